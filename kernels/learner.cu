/* The learner op family (ops/learner.c) on the GPU: the in-place updates of
 * include/ember/learner.h's rules and the per-tensor factors of clipping by
 * global norm and LARC. Each element goes through kernels/learner_math.h's
 * em_lrn_step, which the CPU loop calls too, so the bits are the CPU's.
 *
 * em_learner_update_f32 takes up to 5 tensors (ops/learner_gpu.c says why:
 * kernel parameters, not a table in device memory), tensor i0 + k being
 * (p_k, g_k, s0_k, s1_k, n_k) (slots NULL for rules with fewer; n_k = 0:
 * none). Launch: 1-D grid-stride; every thread strides over each tensor in
 * turn. Every element is independent: any grid gives the same bits.
 *
 * em_learner_sumsq_f32: up to 15 tensors' sums of squares, a block of
 * EM_LRN_LANES threads each; em_learner_scales_f32 (1 thread) computes the
 * [n, 2] factors from the sums. */
#include "em_kernel.h"
#include "learner_math.h"

EM_DEVICE void em_lrn_one(int rule, const float *h, const float *scales, em_i64 i, float *p, const float *g,
                          float *s0, float *s1, em_i64 n) {
  if (n <= 0) return;
  const em_lrn_t t = em_lrn_tensor(h, scales[2 * i], scales[2 * i + 1]);
  float d0 = 0.0f, d1 = 0.0f;
  const em_i64 stride = (em_i64)EM_BDIM_X * EM_GDIM_X;
  for (em_i64 j = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; j < n; j += stride)
    em_lrn_step(rule, h, &t, &p[j], g[j], s0 ? &s0[j] : &d0, s1 ? &s1[j] : &d1);
}

EM_GLOBAL void em_learner_update_f32(int rule, const float *h, const float *scales, em_i64 i0,
                                     float *p0, const float *g0, float *a0, float *b0, em_i64 n0,
                                     float *p1, const float *g1, float *a1, float *b1, em_i64 n1,
                                     float *p2, const float *g2, float *a2, float *b2, em_i64 n2,
                                     float *p3, const float *g3, float *a3, float *b3, em_i64 n3,
                                     float *p4, const float *g4, float *a4, float *b4, em_i64 n4) {
  em_lrn_one(rule, h, scales, i0, p0, g0, a0, b0, n0);
  em_lrn_one(rule, h, scales, i0 + 1, p1, g1, a1, b1, n1);
  em_lrn_one(rule, h, scales, i0 + 2, p2, g2, a2, b2, n2);
  em_lrn_one(rule, h, scales, i0 + 3, p3, g3, a3, b3, n3);
  em_lrn_one(rule, h, scales, i0 + 4, p4, g4, a4, b4, n4);
}

/* Block b: the sum of squares of tensor b of the launch (x_b, n_b) into
 * y[b], in learner_math.h's order: thread l is lane l, then a tree over
 * the lanes in shared memory. Launch: (tensors, 1, 1) x (EM_LRN_LANES, 1, 1). */
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

EM_GLOBAL void em_learner_sumsq_f32(float *y, const float *x0, em_i64 n0, const float *x1, em_i64 n1,
                                    const float *x2, em_i64 n2, const float *x3, em_i64 n3, const float *x4,
                                    em_i64 n4, const float *x5, em_i64 n5, const float *x6, em_i64 n6,
                                    const float *x7, em_i64 n7, const float *x8, em_i64 n8, const float *x9,
                                    em_i64 n9, const float *x10, em_i64 n10, const float *x11, em_i64 n11,
                                    const float *x12, em_i64 n12, const float *x13, em_i64 n13, const float *x14,
                                    em_i64 n14) {
  const float *x;
  em_i64 n;
  switch (EM_BID_X) {
  case 0: x = x0, n = n0; break;
  case 1: x = x1, n = n1; break;
  case 2: x = x2, n = n2; break;
  case 3: x = x3, n = n3; break;
  case 4: x = x4, n = n4; break;
  case 5: x = x5, n = n5; break;
  case 6: x = x6, n = n6; break;
  case 7: x = x7, n = n7; break;
  case 8: x = x8, n = n8; break;
  case 9: x = x9, n = n9; break;
  case 10: x = x10, n = n10; break;
  case 11: x = x11, n = n11; break;
  case 12: x = x12, n = n12; break;
  case 13: x = x13, n = n13; break;
  default: x = x14, n = n14; break;
  }
  /* In the kernel, not the device function: a static of an internal-linkage function gets a name with a
   * per-compilation hash in the PTX, which would make the committed PTX differ on every machine. */
  EM_SHARED double lanes[EM_LRN_LANES];
  const float r = em_lrn_block_sumsq(x, n, lanes);
  if (EM_TID_X == 0) y[EM_BID_X] = r;
}

EM_GLOBAL void em_learner_scales_f32(const float *h, int larc, int n, const float *sp, const float *sg, float *out) {
  if (EM_BID_X != 0 || EM_TID_X != 0) return;
  em_lrn_scales(h, larc, n, sp, sg, out);
}
