/* Sum of a float vector in a fixed order, so the CPU twin (ops/primitives.c,
 * sum_f32_fixed_order) and every GPU produce the same bits.
 *
 * The order depends only on n, never on the device:
 *   stage 1: EM_REDUCE_BLOCKS(n) blocks of 256 threads; thread t of block b adds,
 *            in index order, x[b*256 + t + k*G*256] for k = 0, 1, ... (G = blocks);
 *            the block then folds its 256 partials as a tree: s = 128, 64, ..., 1,
 *            p[t] += p[t + s].
 *   stage 2: one block of 256 threads does the same over the G partials.
 * Launch stage 1 with exactly G blocks of 256 threads, stage 2 with 1 block. */
#include "em_kernel.h"

#define EM_REDUCE_THREADS 256

/* Shared by stage 1 and 2: thread-strided sequential sum, then the tree. */
EM_DEVICE float em_block_sum(const float *x, em_i64 n, em_i64 first, em_i64 stride, float *sh) {
  int t = EM_TID_X;
  float acc = 0.0f;
  for (em_i64 i = first; i < n; i += stride) acc = acc + x[i];
  sh[t] = acc;
  EM_SYNC();
  for (int s = EM_REDUCE_THREADS / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = sh[t] + sh[t + s];
    EM_SYNC();
  }
  return sh[0];
}

EM_GLOBAL void em_sum_f32_stage1(const float *x, em_i64 n, float *partials) {
  EM_SHARED float sh[EM_REDUCE_THREADS];
  em_i64 first = (em_i64)EM_BID_X * EM_REDUCE_THREADS + EM_TID_X;
  em_i64 stride = (em_i64)EM_GDIM_X * EM_REDUCE_THREADS;
  float s = em_block_sum(x, n, first, stride, sh);
  if (EM_TID_X == 0) partials[EM_BID_X] = s;
}

EM_GLOBAL void em_sum_f32_stage2(const float *partials, em_i64 g, float *out) {
  EM_SHARED float sh[EM_REDUCE_THREADS];
  float s = em_block_sum(partials, g, EM_TID_X, EM_REDUCE_THREADS, sh);
  if (EM_TID_X == 0) out[0] = s;
}
