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
 * _learner_scales gathers its n (or 2n with LARC) one-element sums into a
 * scratch vector, EM_LRN_GATHER of them a launch, then one thread computes
 * every tensor's factors in index order (learner_math.h em_lrn_scales). */
#include "learner_gpu.h"

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/learner_math.h"

#define EM_LRN_PER_LAUNCH 5
#define EM_LRN_GATHER 24

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
  const long long n = em_attr_int(a, "n", 1);
  int larc = (int)em_attr_int(a, "larc", 0);
  const long long sums = a->n_in - 1; /* [sp_0 .. sp_{n-1},] sg_0 .. sg_{n-1} */
  void *buf;
  em_status s = em_ops_scratch(a, sizeof(float) * (size_t)(2 * n), &buf);
  if (s) return s;
  /* buf[0 .. n) = sp (zeros without LARC), buf[n .. 2n) = sg */
  long long first = larc ? 0 : n;
  for (long long j0 = 0; j0 < sums && !s; j0 += EM_LRN_GATHER) {
    void *src[EM_LRN_GATHER];
    int cnt = 0;
    for (int k = 0; k < EM_LRN_GATHER; k++) {
      src[k] = j0 + k < sums ? em_tensor_data(in[1 + j0 + k]) : NULL;
      cnt += j0 + k < sums;
    }
    long long at = first + j0;
    void *args[] = {&buf, &at, &cnt, &src[0], &src[1], &src[2], &src[3], &src[4], &src[5], &src[6], &src[7],
                    &src[8], &src[9], &src[10], &src[11], &src[12], &src[13], &src[14], &src[15], &src[16],
                    &src[17], &src[18], &src[19], &src[20], &src[21], &src[22], &src[23]};
    s = em_ops_launch(a, "em_learner_gather_f32", (em_dim3){1, 1, 1}, (em_dim3){32, 1, 1}, 0, args);
  }
  if (!s) {
    const void *h = em_tensor_data(in[0]);
    void *o = em_tensor_data(out[0]);
    int k = (int)n;
    void *args[] = {&h, &larc, &k, &buf, &o};
    s = em_ops_launch(a, "em_learner_scales_f32", (em_dim3){1, 1, 1}, (em_dim3){1, 1, 1}, 0, args);
  }
  em_ops_scratch_free(a, buf);
  return s;
}
