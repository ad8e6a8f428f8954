/* Launch glue of the learner op family: the gpu members of ops/learner.c's
 * table, running kernels/learner.cu.
 *
 * An update node covers a learner's whole parameter set, and so does its
 * launch: ONE launch of em_learner_update_f32 per learner per step, as
 * multi-tensor kernels do. A kernel takes at most 32 scalar or pointer
 * parameters (kernels/README.md), so the tensors go to it in a table in
 * device memory (kernels/learner_math.h EM_LRN_TAB_*: per tensor the
 * addresses of p, g and the slots as 64-bit integers, its size and its
 * first block, 48 bytes): built here on the host each step (the gradients
 * are intermediates whose addresses may change from run to run), uploaded
 * into scratch memory by one h2d copy on the executor's stream and freed,
 * stream-ordered, right after the launch is queued. A step of a learner
 * over k tensors is 1 launch and 1 copy of 48k bytes (before: ceil(k / 5)
 * launches, the tensors as kernel parameters, because the test double of
 * libcuda translated device addresses only there; kernels/em_kernel.h's
 * EM_DEVICE_ADDR now lets it translate those read from a table). Each
 * tensor takes ceil(n / EM_LRN_CHUNK) blocks, so small tensors (biases)
 * cost one block, and no block strides over another's tensor.
 *
 * _learner_sumsq likewise: one launch over a table of (address, size), a
 * block of EM_LRN_LANES threads per tensor, and one copy (before:
 * ceil(k / 15) launches). _learner_scales is one thread computing every
 * tensor's factors in index order (em_lrn_scales), no table.
 *
 * Dynamic loss scaling's skip (trainer.h) costs no launch and no copy: the
 * update kernel reads each tensor's skip flag from the scales (a third
 * column, `cols` = 3) on the device and its blocks return before touching
 * anything. */
#include "learner_gpu.h"

#include <stdint.h>
#include <stdlib.h>

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/learner_math.h"

/* A zeroed table of k tensors on the host. */
static em_status table_alloc(const em_op_args *a, int64_t k, long long **tab) {
  *tab = calloc((size_t)k * EM_LRN_TAB, sizeof **tab);
  return *tab ? EM_OK : em_op_fail(a, "no host memory for the table of %lld tensors", (long long)k);
}

static long long addr(const em_tensor *t) { return (long long)(uintptr_t)em_tensor_data(t); }

/* Uploads the table and launches `kernel` once over it (args hold the
 * table's device address at *table_arg), then frees the table: the h2d
 * copy and the launch are on the executor's stream, in that order, so the
 * scratch is reused only by later work on it.
 * Under a CUDA graph's capture the table is staged in the graph's pinned
 * memory and every replay copies the captured bytes again: correct because
 * they are fixed for the graph. They are addresses of parameters and slots
 * (leaves, whose device copies a replay checks have not moved), of
 * gradients (intermediates from the graph's private pool: a replay reuses
 * the capture's addresses for every kernel anyway), sizes and first blocks
 * (from shapes, fixed by the graph's feed-shape key). The per-step values
 * (learning rate, loss scale, skip flags) are not in the table: they come
 * from h and the scales, device tensors the graph reads at each replay. */
static em_status launch_with_table(const em_op_args *a, const char *kernel, long long *tab, int64_t k,
                                   unsigned blocks, unsigned threads, void **table_arg, void **args) {
  em_status s = em_ops_kernel_ready(a, kernel); /* no copy for a launch that will not happen */
  void *up = NULL;
  if (!s) s = em_ops_scratch_upload(a, tab, sizeof *tab * (size_t)k * EM_LRN_TAB, &up);
  free(tab);
  if (s) return s;
  *table_arg = up;
  s = em_ops_launch(a, kernel, (em_dim3){blocks, 1, 1}, (em_dim3){threads, 1, 1}, 0, args);
  em_ops_scratch_free(a, up);
  return s;
}

em_status em_learner_update_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)out;
  int rule = em_learner_rule_of(a->def), slots = em_lrn_slots(rule);
  const int64_t n = em_attr_int(a, "n", 1);
  long long *tab;
  em_status s = table_alloc(a, n, &tab);
  if (s) return s;
  long long blocks = 0;
  for (int64_t i = 0; i < n; i++) {
    long long *e = tab + i * EM_LRN_TAB, m = (long long)em_tensor_numel(in[2 + i]);
    e[EM_LRN_TAB_P] = addr(in[2 + i]);
    e[EM_LRN_TAB_G] = addr(in[2 + n + i]);
    e[EM_LRN_TAB_S0] = slots > 0 ? addr(in[2 + 2 * n + i]) : 0;
    e[EM_LRN_TAB_S1] = slots > 1 ? addr(in[2 + 3 * n + i]) : 0;
    e[EM_LRN_TAB_N] = m;
    e[EM_LRN_TAB_BLOCK0] = blocks;
    blocks += (m + EM_LRN_CHUNK - 1) / EM_LRN_CHUNK;
  }
  if (blocks == 0) { /* nothing to update */
    free(tab);
    return EM_OK;
  }
  if (blocks > INT32_MAX) {
    free(tab);
    return em_op_fail(a, "%lld blocks of %d elements: more than a grid holds (2^31 - 1)", blocks, EM_LRN_CHUNK);
  }
  const void *h = em_tensor_data(in[0]), *sc = em_tensor_data(in[1]);
  void *dtab = NULL;
  int k = (int)n, cols = (int)em_tensor_shape(in[1])[1]; /* 3: the skip flags of dynamic loss scaling */
  void *args[] = {&rule, &h, &sc, &cols, &dtab, &k};
  return launch_with_table(a, "em_learner_update_f32", tab, n, (unsigned)blocks, 256, &dtab, args);
}

em_status em_learner_scales_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int larc = (int)em_attr_int(a, "larc", 0), n = (int)em_attr_int(a, "n", 1), skip = (int)em_attr_int(a, "skip", 0);
  const void *h = em_tensor_data(in[0]), *sp = larc ? em_tensor_data(in[1]) : NULL;
  const void *sg = em_tensor_data(in[larc ? 2 : 1]);
  void *o = em_tensor_data(out[0]);
  void *args[] = {&h, &larc, &skip, &n, &sp, &sg, &o};
  return em_ops_launch(a, "em_learner_scales_f32", (em_dim3){1, 1, 1}, (em_dim3){1, 1, 1}, 0, args);
}

em_status em_learner_sumsq_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  long long *tab;
  em_status s = table_alloc(a, a->n_in, &tab);
  if (s) return s;
  for (int i = 0; i < a->n_in; i++) {
    tab[(int64_t)i * EM_LRN_TAB + EM_LRN_TAB_P] = addr(in[i]);
    tab[(int64_t)i * EM_LRN_TAB + EM_LRN_TAB_N] = (long long)em_tensor_numel(in[i]);
  }
  void *y = em_tensor_data(out[0]), *dtab = NULL;
  void *args[] = {&y, &dtab};
  return launch_with_table(a, "em_learner_sumsq_f32", tab, a->n_in, (unsigned)a->n_in, EM_LRN_LANES, &dtab, args);
}
