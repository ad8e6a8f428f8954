/* kernels/em_math.h's sigmoid and tanh (f32) with their branches written as
 * selects, for the CPU's vector loops (ops/unary.c, ops/recurrent.c).
 *
 * The same operations on the same values as em_sigmoidf and em_tanhf, so the
 * same bits (both checked against them on all 2^32 inputs; test_ops_unary's
 * test_portable_bits keeps checking wide ranges and the branch edges), which
 * is what portable mode needs: the GPU kernels call the scalar functions. A
 * loop over the scalar functions did not vectorise (their early returns): gcc
 * called them per element. Every branch is computed and the wanted one
 * selected; arguments a branch must not see (NaN, out of range) are replaced
 * by a harmless value before it, the result after.
 *
 * Selects of floats vectorise in gcc only without -ftrapping-math: a file
 * using these compiles with -fno-trapping-math (ops/unary.c's pragma). CPU
 * only (not EM_HD): the kernels keep em_math.h's functions. */
#ifndef EM_SELECT_MATH_H
#define EM_SELECT_MATH_H

#include "../kernels/em_math.h"

/* Inlined into each caller, so a caller cloned per vector ISA (EM_SIMD_CLONES)
 * compiles them for each. */
#if defined(__GNUC__)
#define EM_SEL_INLINE static inline __attribute__((always_inline))
#else
#define EM_SEL_INLINE static inline
#endif

/* em_sigmoidf. e^-|x| is e^x for x < 0 and e^-x for x >= 0 alike; |x| > 104
 * (e^-|x| < 2^-150) and NaN take the exponential of 0 in the reduction, so no
 * conversion sees a NaN, and are replaced after it. */
EM_SEL_INLINE float em_sigmoidf_sel(float x) {
  const float ax = em__fabs(x);
  const int inside = ax <= 104.0f; /* false for NaN */
  float k, lo;
  const float hi = em__exp_reduced(inside ? -ax : 0.0f, &k, &lo);
  const int ki = (int)k;     /* -150 <= ki <= 0 */
  const int sub = ki < -125; /* em__scale's two steps to a subnormal */
  const float p = (hi + lo) * em__pow2(sub ? ki + 64 : ki);
  const float e = inside ? (sub ? p * em__pow2(-64) : p) : 0.0f;
  const float y = (x >= 0.0f ? 1.0f : e) / (1.0f + e);
  return em__isnan(x) ? em__nan() : y;
}

/* em_tanhf. Its large branch is 1 - 2 / (em_expm1f(2|x|) + 2) for 0.55 <=
 * |x| <= 9.02, where em_expm1f always takes its reduction path with
 * 2 <= k <= 26 (2|x| in [1.1, 18.04]): that path is written out below, its
 * argument 1.1 outside the range (NaN included). */
EM_SEL_INLINE float em_tanhf_sel(float x) {
  const float ax = em__fabs(x);
  const int mid = ax >= 0.55f && ax <= 9.02f; /* false for NaN */
  float k, lo;
  const float hi = em__exp_reduced(mid ? 2.0f * ax : 1.1f, &k, &lo);
  const float s = em__pow2((int)k);
  const float b = hi * s; /* exact */
  const float t = b - 1.0f;
  const float bb = t - b;
  const float err = (b - (t - bb)) + (-1.0f - bb);
  const float e = t + (err + lo * s);
  const float large = em__copysign(1.0f - 2.0f / (e + 2.0f), x);
  const float z = x * x;
  float p = -9.617853211e-04f;
  p = 3.401583759e-03f + z * p;
  p = -8.825144731e-03f + z * p;
  p = 2.186550759e-02f + z * p;
  p = -5.396805331e-02f + z * p;
  p = 1.333333254e-01f + z * p;
  p = -3.333333433e-01f + z * p;
  const float small = ax < 2.44140625e-04f ? x : x + x * (z * p);
  const float y = ax > 9.02f ? em__copysign(1.0f, x) : ax < 0.55f ? small : large;
  return em__isnan(x) ? em__nan() : y;
}

#endif
