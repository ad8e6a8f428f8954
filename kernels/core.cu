/* The core op family's kernels (ops/core.c, launched by ops/core_gpu.c):
 * fills, add_n, sum_to, broadcast_like, _weighted_sum, _scale_by. Every sum
 * follows the CPU loop's order exactly (described at each kernel), so every
 * device gives the CPU's bits in both modes. identity and stop_gradient are
 * device-to-device copies, no kernel.
 *
 * Launch: 1-D grid-stride (any grid and block) unless said otherwise. */
#include "em_kernel.h"
#include "core_math.h"

#define EM_CORE_LOOP(n)                                                        \
  em_i64 stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                              \
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < (n); i += stride_)

/* The elementwise kernels that stream (add_n, _scale_by): grid-stride over
 * tiles of 4 * B contiguous elements (B = EM_BDIM_X), thread t taking
 * t, t + B, t + 2B, t + 3B of each, every load of the four before the first
 * store (y may alias an input, so the compiler keeps the order it is given):
 * four times the loads in flight of one element per step. V(i) is the value
 * of element i, stored to y[i] as T; the last tile goes one by one. Launch:
 * em_ops_launch_wide (ops/core_gpu.c). */
#define EM_CORE_TILES(n, T, V)                                                                                \
  do {                                                                                                       \
    const em_i64 bd_ = EM_BDIM_X, step_ = bd_ * 4 * EM_GDIM_X;                                               \
    em_i64 i_ = (em_i64)EM_BID_X * bd_ * 4 + EM_TID_X;                                                       \
    for (; i_ + 3 * bd_ < (n); i_ += step_) {                                                                \
      const T v0_ = (T)V(i_), v1_ = (T)V(i_ + bd_), v2_ = (T)V(i_ + 2 * bd_), v3_ = (T)V(i_ + 3 * bd_);      \
      y[i_] = v0_;                                                                                           \
      y[i_ + bd_] = v1_;                                                                                     \
      y[i_ + 2 * bd_] = v2_;                                                                                 \
      y[i_ + 3 * bd_] = v3_;                                                                                 \
    }                                                                                                        \
    for (; i_ < (n); i_ += bd_) y[i_] = (T)V(i_);                                                            \
  } while (0)

/* ------------------------------------------------------------------ fills --- */

/* y[i] = the low bytes of v (zeros, zeros_like, ones_like: the host gives
 * the dtype's bit pattern). */
EM_GLOBAL void em_core_fill_1(em_i64 n, unsigned long long v, unsigned char *y) {
  EM_CORE_LOOP(n) y[i] = (unsigned char)v;
}
EM_GLOBAL void em_core_fill_2(em_i64 n, unsigned long long v, unsigned short *y) {
  EM_CORE_LOOP(n) y[i] = (unsigned short)v;
}
EM_GLOBAL void em_core_fill_4(em_i64 n, unsigned long long v, unsigned int *y) {
  EM_CORE_LOOP(n) y[i] = (unsigned int)v;
}
EM_GLOBAL void em_core_fill_8(em_i64 n, unsigned long long v, unsigned long long *y) {
  EM_CORE_LOOP(n) y[i] = v;
}

/* ------------------------------------------------------------------ add_n --- */

/* y[i] = ((x0[i] + x1[i]) + x2[i]) + ..., the first k inputs in input order,
 * in the dtype (A: the accumulator type; integers wrap through unsigned).
 * Unused pointers repeat x0 and are never read. */
#define EM_ADD_N_KERNEL(NAME, T, A)                                                                          \
  EM_DEVICE A NAME##_at(em_i64 i, int k, const T *x0, const T *x1, const T *x2, const T *x3, const T *x4,    \
                        const T *x5, const T *x6, const T *x7, const T *x8, const T *x9, const T *x10,        \
                        const T *x11, const T *x12, const T *x13, const T *x14, const T *x15) {              \
    A s = (A)x0[i];                                                                                          \
    if (k > 1) s += (A)x1[i];                                                                                \
    if (k > 2) s += (A)x2[i];                                                                                \
    if (k > 3) s += (A)x3[i];                                                                                \
    if (k > 4) s += (A)x4[i];                                                                                \
    if (k > 5) s += (A)x5[i];                                                                                \
    if (k > 6) s += (A)x6[i];                                                                                \
    if (k > 7) s += (A)x7[i];                                                                                \
    if (k > 8) s += (A)x8[i];                                                                                \
    if (k > 9) s += (A)x9[i];                                                                                \
    if (k > 10) s += (A)x10[i];                                                                              \
    if (k > 11) s += (A)x11[i];                                                                              \
    if (k > 12) s += (A)x12[i];                                                                              \
    if (k > 13) s += (A)x13[i];                                                                              \
    if (k > 14) s += (A)x14[i];                                                                              \
    if (k > 15) s += (A)x15[i];                                                                              \
    return s;                                                                                                \
  }                                                                                                          \
  EM_GLOBAL void NAME(em_i64 n, int k, const T *x0, const T *x1, const T *x2, const T *x3, const T *x4,      \
                      const T *x5, const T *x6, const T *x7, const T *x8, const T *x9, const T *x10,          \
                      const T *x11, const T *x12, const T *x13, const T *x14, const T *x15, T *y) {          \
    EM_CORE_TILES(n, T, NAME##_V);                                                                           \
  }
#define em_core_add_n_f32_V(i) em_core_add_n_f32_at(i, k, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)
#define em_core_add_n_f64_V(i) em_core_add_n_f64_at(i, k, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)
#define em_core_add_n_i32_V(i) em_core_add_n_i32_at(i, k, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)
#define em_core_add_n_i64_V(i) em_core_add_n_i64_at(i, k, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)
EM_ADD_N_KERNEL(em_core_add_n_f32, float, float)
EM_ADD_N_KERNEL(em_core_add_n_f64, double, double)
EM_ADD_N_KERNEL(em_core_add_n_i32, int, unsigned int)
EM_ADD_N_KERNEL(em_core_add_n_i64, em_i64, unsigned long long)

/* ----------------------------------------------------------------- sum_to --- */

/* y (m elements, the target shape) = x summed over the broadcast axes. The
 * host (core_gpu.c) splits x's axes into kept groups (kd0..kd3, kd3
 * innermost: y's row-major layout) and reduced groups (rd0..rd3), each with
 * its stride in x (ks, rs); unused groups have dim 1. One thread per output
 * element adds its inputs in x's row-major order (r0 outermost) to a double
 * (an int64 for integers, wrapping) from 0: the order of the CPU's walk over x. */
#define EM_SUM_TO_KERNEL(NAME, T, A)                                                                          \
  EM_GLOBAL void NAME(em_i64 m, em_i64 kd0, em_i64 kd1, em_i64 kd2, em_i64 kd3, em_i64 ks0, em_i64 ks1,         \
                      em_i64 ks2, em_i64 ks3, em_i64 rd0, em_i64 rd1, em_i64 rd2, em_i64 rd3, em_i64 rs0,        \
                      em_i64 rs1, em_i64 rs2, em_i64 rs3, const T *x, T *y) {                                    \
    (void)kd0;                                                                                               \
    EM_CORE_LOOP(m) {                                                                                        \
      em_i64 r = i, c3 = r % kd3, c2, c1;                                                                    \
      r /= kd3;                                                                                              \
      c2 = r % kd2;                                                                                          \
      r /= kd2;                                                                                              \
      c1 = r % kd1;                                                                                          \
      r /= kd1;                                                                                              \
      const T *p = x + r * ks0 + c1 * ks1 + c2 * ks2 + c3 * ks3;                                             \
      A s = 0;                                                                                               \
      for (em_i64 r0 = 0; r0 < rd0; r0++)                                                                    \
        for (em_i64 r1 = 0; r1 < rd1; r1++)                                                                  \
          for (em_i64 r2 = 0; r2 < rd2; r2++)                                                                \
            for (em_i64 r3 = 0; r3 < rd3; r3++) s += (A)p[r0 * rs0 + r1 * rs1 + r2 * rs2 + r3 * rs3];        \
      y[i] = (T)s;                                                                                           \
    }                                                                                                        \
  }
EM_SUM_TO_KERNEL(em_core_sum_to_f32, float, double)
EM_SUM_TO_KERNEL(em_core_sum_to_f64, double, double)
EM_SUM_TO_KERNEL(em_core_sum_to_i32, int, unsigned long long)
EM_SUM_TO_KERNEL(em_core_sum_to_i64, em_i64, unsigned long long)

/* --------------------------------------------------------- broadcast_like --- */

/* One axis of the unravel (dim d, x's stride s along it): 32-bit division
 * where the index fits (64-bit division is several times slower on a GPU). */
EM_DEVICE void em_core_axis(em_i64 *r, em_i64 d, em_i64 s, em_i64 *off) {
  if (d == 1) return;
  em_i64 q = *r <= 0xffffffffll ? (em_i64)((unsigned int)*r / (unsigned int)d) : *r / d;
  *off += (*r - q * d) * s;
  *r = q;
}

/* y[i] = x at the broadcast position. The host merges y's axes and pads them
 * to eight (d0..d7, d7 innermost; x's strides s0..s7, 0 where it
 * broadcasts): every shape of up to EM_MAX_DIMS = 8 axes fits, where
 * gpu_glue's map stops at six. Copied by element size. */
#define EM_BROADCAST_BODY                                                                                     \
  (void)d0;                                                                                                   \
  EM_CORE_LOOP(n) {                                                                                           \
    em_i64 r = i, off = 0;                                                                                    \
    em_core_axis(&r, d7, s7, &off);                                                                           \
    em_core_axis(&r, d6, s6, &off);                                                                           \
    em_core_axis(&r, d5, s5, &off);                                                                           \
    em_core_axis(&r, d4, s4, &off);                                                                           \
    em_core_axis(&r, d3, s3, &off);                                                                           \
    em_core_axis(&r, d2, s2, &off);                                                                           \
    em_core_axis(&r, d1, s1, &off);                                                                           \
    y[i] = x[off + r * s0];                                                                                   \
  }
#define EM_BROADCAST_PARAMS                                                                                   \
  em_i64 n, em_i64 d0, em_i64 d1, em_i64 d2, em_i64 d3, em_i64 d4, em_i64 d5, em_i64 d6, em_i64 d7, em_i64 s0, \
      em_i64 s1, em_i64 s2, em_i64 s3, em_i64 s4, em_i64 s5, em_i64 s6, em_i64 s7
EM_GLOBAL void em_core_broadcast_1(EM_BROADCAST_PARAMS, const unsigned char *x, unsigned char *y) {
  EM_BROADCAST_BODY
}
EM_GLOBAL void em_core_broadcast_2(EM_BROADCAST_PARAMS, const unsigned short *x, unsigned short *y) {
  EM_BROADCAST_BODY
}
EM_GLOBAL void em_core_broadcast_4(EM_BROADCAST_PARAMS, const unsigned int *x, unsigned int *y) {
  EM_BROADCAST_BODY
}
EM_GLOBAL void em_core_broadcast_8(EM_BROADCAST_PARAMS, const unsigned long long *x, unsigned long long *y) {
  EM_BROADCAST_BODY
}

/* ---------------------------------------------------------- _weighted_sum --- */

/* Stage 1: part[c] = sum of (double)y[i] * (double)w[i] over chunk c
 * (EM_CORE_WSUM_CHUNK elements, core_math.h), in index order from 0. One
 * thread per chunk. */
#define EM_WSUM_PARTIAL_KERNEL(NAME, T)                                                   \
  EM_GLOBAL void NAME(em_i64 n, em_i64 chunks, const T *y, const T *w, double *part) {     \
    EM_CORE_LOOP(chunks) {                                                               \
      em_i64 lo = i * EM_CORE_WSUM_CHUNK, hi = lo + EM_CORE_WSUM_CHUNK;                   \
      if (hi > n) hi = n;                                                                \
      double s = 0;                                                                      \
      for (em_i64 j = lo; j < hi; j++) s += (double)y[j] * (double)w[j];                 \
      part[i] = s;                                                                       \
    }                                                                                    \
  }
EM_WSUM_PARTIAL_KERNEL(em_core_wsum_partial_f32, float)
EM_WSUM_PARTIAL_KERNEL(em_core_wsum_partial_f64, double)

/* Stage 2, one thread (launch 1 x 1): out = the chunk sums added in order to 0. */
EM_GLOBAL void em_core_wsum_final_f32(em_i64 chunks, const double *part, float *out) {
  if (EM_BID_X != 0 || EM_TID_X != 0) return;
  double s = 0;
  for (em_i64 c = 0; c < chunks; c++) s += part[c];
  out[0] = (float)s;
}
EM_GLOBAL void em_core_wsum_final_f64(em_i64 chunks, const double *part, double *out) {
  if (EM_BID_X != 0 || EM_TID_X != 0) return;
  double s = 0;
  for (em_i64 c = 0; c < chunks; c++) s += part[c];
  out[0] = s;
}

/* -------------------------------------------------------------- _scale_by --- */

/* y[i] = x[i] * s[0] (s: a device scalar, read once: y may alias it as
 * far as the compiler knows, which would make it reread s after every store). */
#define EM_CORE_SCALE_V(i) (x[i] * sv)
EM_GLOBAL void em_core_scale_f32(em_i64 n, const float *x, const float *s, float *y) {
  const float sv = s[0];
  EM_CORE_TILES(n, float, EM_CORE_SCALE_V);
}
EM_GLOBAL void em_core_scale_f64(em_i64 n, const double *x, const double *s, double *y) {
  const double sv = s[0];
  EM_CORE_TILES(n, double, EM_CORE_SCALE_V);
}
