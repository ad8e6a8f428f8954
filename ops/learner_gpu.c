/* Launch glue of the learner op family: the gpu members of ops/learner.c's
 * table, running kernels/learner.cu.
 *
 * An update node covers a learner's whole parameter set, but a kernel takes
 * at most 32 scalar or pointer parameters (kernels/README.md) and the test
 * double of libcuda translates device addresses only where they are kernel
 * parameters, never inside a table in device memory; the gradients are
 * intermediates whose addresses may change from run to run, so a device
 * table would also need an upload (a counted copy) per step. So the tensors
 * go to the kernel as parameters, EM_LRN_PER_LAUNCH of them a launch (each
 * p, g, slot 0, slot 1 and its size: 5 parameters, plus the rule, h and
 * scales and the first tensor's index): a step of a learner over k tensors
 * is ceil(k / 5) launches and copies nothing. Each launch's threads stride
 * over each of its tensors in turn, so small tensors (biases) cost little.
 *
 * _learner_sumsq likewise takes EM_LRN_SUMSQ tensors a launch (pointer and
 * size each), a block of EM_LRN_LANES threads per tensor: a learner's sums
 * of squares are ceil(k / 15) launches. _learner_scales is one thread
 * computing every tensor's factors in index order (em_lrn_scales). */
#include "learner_gpu.h"

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/learner_math.h"

#define EM_LRN_PER_LAUNCH 5
#define EM_LRN_SUMSQ 15

em_status em_learner_update_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)out;
  int rule = em_learner_rule_of(a->def), slots = em_lrn_slots(rule);
  const long long n = em_attr_int(a, "n", 1);
  const void *h = em_tensor_data(in[0]), *sc = em_tensor_data(in[1]);
  for (long long i0 = 0; i0 < n; i0 += EM_LRN_PER_LAUNCH) {
    void *p[EM_LRN_PER_LAUNCH], *g[EM_LRN_PER_LAUNCH], *s0[EM_LRN_PER_LAUNCH], *s1[EM_LRN_PER_LAUNCH];
    long long m[EM_LRN_PER_LAUNCH];
    long long most = 0;
    for (int k = 0; k < EM_LRN_PER_LAUNCH; k++) {
      long long i = i0 + k;
      int here = i < n;
      p[k] = here ? em_tensor_data(in[2 + i]) : NULL;
      g[k] = here ? em_tensor_data(in[2 + n + i]) : NULL;
      s0[k] = here && slots > 0 ? em_tensor_data(in[2 + 2 * n + i]) : NULL;
      s1[k] = here && slots > 1 ? em_tensor_data(in[2 + 3 * n + i]) : NULL;
      m[k] = here ? (long long)em_tensor_numel(in[2 + i]) : 0;
      if (m[k] > most) most = m[k];
    }
    if (most == 0) continue;
    void *args[] = {&rule, &h, &sc, &i0,
                    &p[0], &g[0], &s0[0], &s1[0], &m[0],
                    &p[1], &g[1], &s0[1], &s1[1], &m[1],
                    &p[2], &g[2], &s0[2], &s1[2], &m[2],
                    &p[3], &g[3], &s0[3], &s1[3], &m[3],
                    &p[4], &g[4], &s0[4], &s1[4], &m[4]};
    em_status s = em_ops_launch_1d(a, "em_learner_update_f32", (size_t)most, args);
    if (s) return s;
  }
  return EM_OK;
}

em_status em_learner_scales_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int larc = (int)em_attr_int(a, "larc", 0), n = (int)em_attr_int(a, "n", 1);
  const void *h = em_tensor_data(in[0]), *sp = larc ? em_tensor_data(in[1]) : NULL;
  const void *sg = em_tensor_data(in[larc ? 2 : 1]);
  void *o = em_tensor_data(out[0]);
  void *args[] = {&h, &larc, &n, &sp, &sg, &o};
  return em_ops_launch(a, "em_learner_scales_f32", (em_dim3){1, 1, 1}, (em_dim3){1, 1, 1}, 0, args);
}

em_status em_learner_sumsq_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  float *y = em_tensor_data(out[0]);
  for (long long i0 = 0; i0 < a->n_in; i0 += EM_LRN_SUMSQ) {
    const void *x[EM_LRN_SUMSQ];
    long long m[EM_LRN_SUMSQ];
    unsigned blocks = 0;
    for (int k = 0; k < EM_LRN_SUMSQ; k++) {
      int here = i0 + k < a->n_in;
      x[k] = here ? em_tensor_data(in[i0 + k]) : NULL;
      m[k] = here ? (long long)em_tensor_numel(in[i0 + k]) : 0;
      blocks += (unsigned)here;
    }
    void *yk = y + i0;
    void *args[] = {&yk, &x[0], &m[0], &x[1], &m[1], &x[2], &m[2], &x[3], &m[3], &x[4], &m[4], &x[5], &m[5],
                    &x[6], &m[6], &x[7], &m[7], &x[8], &m[8], &x[9], &m[9], &x[10], &m[10], &x[11], &m[11],
                    &x[12], &m[12], &x[13], &m[13], &x[14], &m[14]};
    em_status s = em_ops_launch(a, "em_learner_sumsq_f32", (em_dim3){blocks, 1, 1}, (em_dim3){EM_LRN_LANES, 1, 1},
                                0, args);
    if (s) return s;
  }
  return EM_OK;
}
