/* The learner op family (ops/learner.c) on the GPU: the in-place updates of
 * include/ember/learner.h's rules and the per-tensor factors of clipping by
 * global norm and LARC. Each element goes through kernels/learner_math.h's
 * em_lrn_step, which the CPU loop calls too, so the bits are the CPU's.
 *
 * A learner's whole parameter set is one launch of each kernel, as
 * multi-tensor kernels do: the tensors come in a table in device memory
 * (learner_math.h EM_LRN_TAB_*, built and uploaded by ops/learner_gpu.c),
 * their addresses read through EM_DEVICE_ADDR (kernels/em_kernel.h).
 *
 * em_learner_update_f32: tensor i of the table (k of them) takes
 * ceil(n_i / EM_LRN_CHUNK) blocks; a block finds its tensor by a binary
 * search over the tensors' first blocks, then its threads stride over the
 * block's chunk of it. Launch: (sum of the tensors' blocks, 1, 1) x
 * (any, 1, 1). Every element is independent: any geometry gives the same
 * bits.
 *
 * em_learner_sumsq_f32: tensor b's sum of squares, block b of EM_LRN_LANES
 * threads; em_learner_scales_f32 (1 thread) computes the [n, 2] factors
 * from the sums ([n, 3] with skip: dynamic loss scaling's skip flags, which
 * em_learner_update_f32 reads from its scales of `cols` columns). */
#include "em_kernel.h"
#include "learner_math.h"

/* The tensor of the table whose blocks hold block b: the last i with first block <= b (tensor 0's is 0). */
EM_DEVICE int em_lrn_tensor_of(const em_i64 *tab, int k, em_i64 b) {
  int lo = 0, hi = k - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (tab[(em_i64)mid * EM_LRN_TAB + EM_LRN_TAB_BLOCK0] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

EM_GLOBAL void em_learner_update_f32(int rule, const float *h, const float *scales, int cols, const em_i64 *tab,
                                     int k) {
  const int i = em_lrn_tensor_of(tab, k, EM_BID_X);
  if (em_lrn_skips(scales, cols, i)) return; /* dynamic loss scaling skips the step: nothing written */
  const em_i64 *e = tab + (em_i64)i * EM_LRN_TAB;
  const em_i64 n = e[EM_LRN_TAB_N], j0 = (EM_BID_X - e[EM_LRN_TAB_BLOCK0]) * EM_LRN_CHUNK;
  const em_i64 j1 = n - j0 < EM_LRN_CHUNK ? n : j0 + EM_LRN_CHUNK;
  float *p = EM_DEVICE_ADDR(float, e[EM_LRN_TAB_P]), *s0 = EM_DEVICE_ADDR(float, e[EM_LRN_TAB_S0]);
  float *s1 = EM_DEVICE_ADDR(float, e[EM_LRN_TAB_S1]);
  const float *g = EM_DEVICE_ADDR(const float, e[EM_LRN_TAB_G]);
  const em_lrn_t t = em_lrn_tensor(h, scales[cols * i], scales[cols * i + 1]);
  float d0 = 0.0f, d1 = 0.0f;
  for (em_i64 j = j0 + EM_TID_X; j < j1; j += EM_BDIM_X)
    em_lrn_step(rule, h, &t, &p[j], g[j], s0 ? &s0[j] : &d0, s1 ? &s1[j] : &d1);
}

/* The sum of squares of x[0 .. n) into the block's lanes, in learner_math.h's
 * order: thread l is lane l, then a tree over the lanes in shared memory. */
EM_DEVICE float em_lrn_block_sumsq(const float *x, em_i64 n, double *lanes) {
  const int l = EM_TID_X;
  lanes[l] = em_lrn_lane_sumsq(x, n, l);
  EM_SYNC();
  for (int s = EM_LRN_LANES / 2; s > 0; s /= 2) {
    if (l < s) lanes[l] = lanes[l] + lanes[l + s];
    EM_SYNC();
  }
  return (float)lanes[0];
}

/* Launch: (tensors, 1, 1) x (EM_LRN_LANES, 1, 1); block b sums tensor b of the table into y[b]. */
EM_GLOBAL void em_learner_sumsq_f32(float *y, const em_i64 *tab) {
  const em_i64 *e = tab + (em_i64)EM_BID_X * EM_LRN_TAB;
  const float *x = EM_DEVICE_ADDR(const float, e[EM_LRN_TAB_P]);
  /* In the kernel, not the device function: a static of an internal-linkage function gets a name with a
   * per-compilation hash in the PTX, which would make the committed PTX differ on every machine. */
  EM_SHARED double lanes[EM_LRN_LANES];
  const float r = em_lrn_block_sumsq(x, e[EM_LRN_TAB_N], lanes);
  if (EM_TID_X == 0) y[EM_BID_X] = r;
}

EM_GLOBAL void em_learner_scales_f32(const float *h, int larc, int skip, int n, const float *sp, const float *sg,
                                     float *out) {
  if (EM_BID_X != 0 || EM_TID_X != 0) return;
  em_lrn_scales(h, larc, skip, n, sp, sg, out);
}
