/* Ember's portable math: one source for the CPU and every GPU.
 *
 * Portable mode (DESIGN.md "Two numeric modes") needs the same bits from the
 * CPU and from every GPU generation. libm and CUDA's libdevice give different
 * bits (and different ulp errors) for exp, log, tanh, ..., so Ember carries
 * its own, written once here. This header compiles as host C11 (the CPU
 * twins: ops/math_map.c) and as device code in kernels/' portable subset
 * (nvcc, NVRTC, clang -nocudainc: kernels/math.cu).
 *
 * Why the bits agree: every function is a fixed sequence of IEEE binary32 and
 * binary64 +, -, *, /, sqrt (each correctly rounded to nearest-even on x86-64
 * SSE and on NVIDIA GPUs), conversions between float, double and integers,
 * and integer bit manipulation. There is no fmaf (FMA contraction is off in
 * every build: nvcc/NVRTC --fmad=false, clang -ffp-contract=off, gcc
 * -std=c11), no libm call besides the hardware square root, and no table in
 * memory. (em_fmaf / em_fma below are for other kernels, the GEMM: an
 * explicit, correctly rounded fma written at the same place on both sides.)
 * Range reductions and polynomials are written out below; their coefficients
 * were fitted for Ember (Chebyshev fits with mpmath, rounded to the working
 * precision) or are Taylor coefficients.
 *
 * Requirements on the host build (checked where a macro can tell): SSE
 * arithmetic (FLT_EVAL_METHOD 0, not x87), no -ffast-math, no FMA
 * contraction (-ffp-contract=off; gcc's -std=c11 implies it), and the FPU
 * left in its default state (round to nearest, no FTZ/DAZ: a library built
 * with -ffast-math can switch FTZ on for the whole process at load time).
 *
 * Denormals are not flushed, on either side: inputs and results may be
 * subnormal, as IEEE 754 says. CUDA's non-fast-math defaults (nvcc and NVRTC
 * -ftz=false) and clang's (no -fgpu-flush-denormals-to-zero) emit no .ftz
 * (tests/unit/test_em_math.c checks the committed PTX).
 *
 * NaN: every NaN a function returns is EM_NAN_BITS (0x7fc00000). x86 and
 * NVIDIA make different NaN bits (x86: 0xffc00000 for invalid operations and
 * the input's payload otherwise; NVIDIA: 0x7fffffff), so the functions test
 * for NaN themselves and return the one canonical NaN.
 *
 * Accuracy: max |result - exact| in ulps of the float result, measured over
 * ALL 2^32 float inputs (powf: 2^30 sampled pairs) against glibc's binary64
 * functions. tests/unit/test_em_math.c asserts the EM_ULP_* bounds below on
 * a sample (EMBER_MATH_SWEEP=32 runs the exhaustive sweep):
 *
 *   expf 0.764   logf 0.835   log1pf 0.839   expm1f 1.006   tanhf 1.485
 *   sigmoidf 2.402   softplusf 1.550   erff 1.148   sqrtf 0.5   rsqrtf 1.490
 *   powf 0.500   sinf 0.500   cosf 0.500   tanf 0.500   atanf 0.500   asinhf 0.500
 *   asinf 0.500  acosf 0.500  sinhf 0.500  coshf 0.500  acoshf 0.500  atanhf 0.500
 *   geluf 0.500 (x Phi(x), the exact gelu)
 * (the last seven measured over 2^27 inputs spread over all floats plus dense
 * runs at their branch points, against glibc in binary64).
 *
 * sigmoid is the least accurate: e^x, 1 + e^x and the division each round,
 * and near x = -4 the result's ulp is half of e^x's, relatively.
 *
 * float-only (hot in training): exp, log, log1p, expm1, tanh, sigmoid,
 * softplus, erf, sqrt, rsqrt. binary64 inside (not hot; each rounds to float
 * once at the end, so about 0.5 ulp): pow, sin, cos, tan, atan, asinh, asin,
 * acos, sinh, cosh, acosh, atanh, gelu (and the normal CDF). FP64
 * is slow on consumer GPUs (1/32 to 1/64 of FP32), which these uses tolerate.
 *
 * Also here: float <-> IEEE half and bfloat16 conversions, in integer code. */
#ifndef EM_MATH_H
#define EM_MATH_H

/* ------------------------------------------------ qualifiers and bit casts --- */

#if defined(__CUDACC__) || defined(__CUDA__)
/* Device code: nvcc, NVRTC (__CUDACC__ and __CUDACC_RTC__), clang (__CUDA__). */
#include "em_kernel.h"
#define EM_HD EM_DEVICE
#if defined(__clang__) && !defined(__NVCC__) && !defined(__CUDACC_RTC__)
#define EM_MATH_CLANG_NVPTX 1 /* -nocudainc: no CUDA headers, use clang's NVVM builtins */
#else
#define EM_MATH_NV 1          /* nvcc, NVRTC: CUDA's built-in device intrinsics */
#endif
#else
/* Host C. */
#include <math.h>
#include <string.h>
#define EM_HD static inline
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "em_math.h: -ffast-math breaks portable numerics (NaN tests, reassociation); build without it"
#endif
#if defined(__FLT_EVAL_METHOD__) && __FLT_EVAL_METHOD__ != 0
#error "em_math.h: float arithmetic must be evaluated in float (FLT_EVAL_METHOD 0: SSE, not x87)"
#endif
_Static_assert(sizeof(unsigned int) == 4 && sizeof(unsigned long long) == 8, "em_math.h needs 32-bit int");
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

EM_HD unsigned int em_as_uint(float x) {
#if defined(EM_MATH_NV)
  return __float_as_uint(x);
#elif defined(EM_MATH_CLANG_NVPTX)
  return (unsigned int)__nvvm_bitcast_f2i(x);
#else
  unsigned int u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

EM_HD float em_as_float(unsigned int u) {
#if defined(EM_MATH_NV)
  return __uint_as_float(u);
#elif defined(EM_MATH_CLANG_NVPTX)
  return __nvvm_bitcast_i2f((int)u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

EM_HD unsigned long long em_as_u64(double x) {
#if defined(EM_MATH_NV)
  return (unsigned long long)__double_as_longlong(x);
#elif defined(EM_MATH_CLANG_NVPTX)
  return (unsigned long long)__nvvm_bitcast_d2ll(x);
#else
  unsigned long long u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

EM_HD double em_as_double(unsigned long long u) {
#if defined(EM_MATH_NV)
  return __longlong_as_double((long long)u);
#elif defined(EM_MATH_CLANG_NVPTX)
  return __nvvm_bitcast_ll2d((long long)u);
#else
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

#define EM_AS_UINT(x) em_as_uint(x)
#define EM_AS_FLOAT(u) em_as_float(u)

/* IEEE square roots, correctly rounded on both sides (sqrt.rn.f32/f64 on the
 * GPU; SSE sqrtss/sqrtsd on the host), so they agree bit for bit. */
EM_HD float em__sqrt_hw(float x) {
#if defined(EM_MATH_NV)
  return __fsqrt_rn(x);
#elif defined(EM_MATH_CLANG_NVPTX)
  return __nvvm_sqrt_rn_f(x);
#else
  return sqrtf(x);
#endif
}

EM_HD double em__sqrt_hw_d(double x) {
#if defined(EM_MATH_NV)
  return __dsqrt_rn(x);
#elif defined(EM_MATH_CLANG_NVPTX)
  return __nvvm_sqrt_rn_d(x);
#else
  return sqrt(x);
#endif
}

/* Explicit fused multiply-add: a * b + c rounded once (IEEE 754 fusedMultiplyAdd,
 * round to nearest even), so the CPU and every GPU give the same bits: fma.rn.f32 /
 * fma.rn.f64 on the GPU (CUDA's __fmaf_rn / __fma_rn, clang's NVVM builtins; every
 * NVIDIA GPU has them, subnormals kept), C99 fmaf / fma on the host (glibc's are
 * correctly rounded, in hardware where the CPU has FMA3 and in software otherwise;
 * GCC inlines them as vfmadd in code compiled for an FMA target). Only an fma written
 * out like this is fused: every build keeps contraction off, so a * b + c stays two
 * roundings. The functions of this header use none (test_em_math rejects any fma in
 * ptx/math.*.ptx); the GEMM sums with them (kernels/gemm_math.h). */
EM_HD float em_fmaf(float a, float b, float c) {
#if defined(EM_MATH_NV)
  return __fmaf_rn(a, b, c);
#elif defined(EM_MATH_CLANG_NVPTX)
  return __nvvm_fma_rn_f(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}

EM_HD double em_fma(double a, double b, double c) {
#if defined(EM_MATH_NV)
  return __fma_rn(a, b, c);
#elif defined(EM_MATH_CLANG_NVPTX)
  return __nvvm_fma_rn_d(a, b, c);
#else
  return fma(a, b, c);
#endif
}

/* ----------------------------------------------- measured accuracy (ulp) --- */
/* Max |result - exact| in units of the float result's ulp; see the header
 * comment for how they were measured. Non-integer bounds are rounded up to
 * a tenth. */
#define EM_ULP_EXPF 0.8
#define EM_ULP_LOGF 0.9
#define EM_ULP_LOG1PF 0.9
#define EM_ULP_EXPM1F 1.1
#define EM_ULP_TANHF 1.5
#define EM_ULP_SIGMOIDF 2.5
#define EM_ULP_SOFTPLUSF 1.6
#define EM_ULP_ERFF 1.2
#define EM_ULP_SQRTF 0.5
#define EM_ULP_RSQRTF 1.5
#define EM_ULP_POWF 0.6
#define EM_ULP_SINF 0.6
#define EM_ULP_COSF 0.6
#define EM_ULP_TANF 0.6
#define EM_ULP_ATANF 0.6
#define EM_ULP_ASINHF 0.6
#define EM_ULP_ASINF 0.6
#define EM_ULP_ACOSF 0.6
#define EM_ULP_SINHF 0.6
#define EM_ULP_COSHF 0.6
#define EM_ULP_ACOSHF 0.6
#define EM_ULP_ATANHF 0.6
#define EM_ULP_GELUF 0.6

/* ------------------------------------------------------------- helpers --- */

#define EM_NAN_BITS 0x7fc00000u

EM_HD float em__nan(void) { return em_as_float(EM_NAN_BITS); }
EM_HD float em__inf(void) { return em_as_float(0x7f800000u); }
EM_HD int em__isnan(float x) { return (em_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }
EM_HD float em__fabs(float x) { return em_as_float(em_as_uint(x) & 0x7fffffffu); }
/* |mag| with the sign of sgn. */
EM_HD float em__copysign(float mag, float sgn) {
  return em_as_float((em_as_uint(mag) & 0x7fffffffu) | (em_as_uint(sgn) & 0x80000000u));
}

/* Nearest integer (ties to even) of |x| < 2^22: adding 1.5*2^23 leaves no
 * fraction bits. Written out so no compiler or libm decides the rounding. */
EM_HD float em__rint(float x) { return (x + 12582912.0f) - 12582912.0f; }
/* The same for doubles, |x| < 2^51. */
EM_HD double em__rint_d(double x) { return (x + 6755399441055744.0) - 6755399441055744.0; }

/* 2^k as a float, for -126 <= k <= 127. */
EM_HD float em__pow2(int k) { return em_as_float((unsigned int)(k + 127) << 23); }

/* p * 2^k for p in [0.5, 2) and -151 <= k <= 128, rounded once. A result
 * below the normal range is reached in two steps whose first is exact, so it
 * is rounded once, to the nearest subnormal. */
EM_HD float em__scale(float p, int k) {
  if (k > 126) return (p * 2.0f) * em__pow2(k - 1);
  if (k < -125) return (p * em__pow2(k + 64)) * em__pow2(-64);
  return p * em__pow2(k);
}

/* 2^k as a double, for -1022 <= k <= 1023. */
EM_HD double em__pow2_d(int k) { return em_as_double((unsigned long long)(k + 1023) << 52); }

/* ln 2 = EM__LN2_HI + EM__LN2_LO; the high part has 15 significant bits, so
 * k * EM__LN2_HI is exact for |k| < 2^9. */
#define EM__LN2_HI 0.693145751953125f
#define EM__LN2_LO 1.428606765e-06f
#define EM__LOG2E 1.442695022e+00f
/* The same split for doubles: a 32-bit high part, exact times |k| < 2^21. */
#define EM__LN2_HI_D 0.69314718036912382
#define EM__LN2_LO_D 1.9082149292705877e-10
#define EM__LN2_D 0.69314718055994529
#define EM__INVLN2_D 1.4426950408889634

/* ----------------------------------------------------------- exp family --- */

/* q(r) with e^r - 1 = r + r^2 q(r) for |r| <= 0.35: a degree-5 Chebyshev fit
 * of (e^r - 1 - r) / r^2 (max fit error 1e-9 relative). */
EM_HD float em__expm1_q(float r) {
  float q = 1.989197044e-04f;
  q = 1.393453218e-03f + r * q;
  q = 8.333310485e-03f + r * q;
  q = 4.166645557e-02f + r * q;
  q = 1.666666716e-01f + r * q;
  return 5.000000000e-01f + r * q;
}

/* e^x for the reduction x = k ln2 + r, |r| <= 0.35, as hi + *lo with hi = 1 + r
 * and |*lo| < 2^-23: k = rint(x log2 e); r = (x - k ln2_hi) - k ln2_lo, the
 * first step exact and the second's rounding error d kept; then
 * e^(r + d) = (1 + r) + (r^2 q(r) + d), with 1 + r split exactly (Fast2Sum)
 * so that the caller's last addition is the only large rounding. */
EM_HD float em__exp_reduced(float x, float *k, float *lo) {
  *k = em__rint(x * EM__LOG2E);
  float rh = x - *k * EM__LN2_HI;
  float t = *k * EM__LN2_LO;
  float r = rh - t;
  float d = (rh - r) - t; /* r + d = rh - t exactly */
  float hi = 1.0f + r;
  *lo = ((1.0f - hi) + r) + (d + (r * r) * em__expm1_q(r));
  return hi;
}

/* e^x. exp(x) overflows above 88.7228317 (the largest float whose exp is
 * finite) and rounds to 0 below -103.972 (e^x < 2^-150). */
EM_HD float em_expf(float x) {
  if (em__isnan(x)) return em__nan();
  if (x > 88.7228317f) return em__inf();
  if (x < -104.0f) return 0.0f;
  float k, lo;
  float hi = em__exp_reduced(x, &k, &lo);
  return em__scale(hi + lo, (int)k);
}

/* e^x - 1, accurate near 0. */
EM_HD float em_expm1f(float x) {
  if (em__isnan(x)) return em__nan();
  if (x > 88.7228317f) return em__inf();
  if (x < -17.5f) return -1.0f; /* e^x < 2^-25: -1 + e^x rounds to -1 */
  float ax = em__fabs(x);
  if (ax < 2.98023224e-08f) return x; /* 2^-25: x + x^2/2 rounds to x; keeps -0 and subnormals */
  if (ax < 0.34657359f) return x + (x * x) * em__expm1_q(x);
  float k, lo;
  float hi = em__exp_reduced(x, &k, &lo);
  int ki = (int)k;
  if (ki > 100) return em__scale(hi + lo, ki); /* the -1 is far below half an ulp */
  /* 2^k (hi + lo) - 1: b - 1 with its rounding error (Knuth's TwoSum, exact),
   * then the small terms, then one last rounding. */
  float s = em__pow2(ki);
  float b = hi * s; /* exact: -26 <= k <= 100 */
  float t = b - 1.0f;
  float bb = t - b;
  float err = (b - (t - bb)) + (-1.0f - bb);
  return t + (err + lo * s);
}

/* ----------------------------------------------------------- log family --- */

/* log(1 + f) for f = m - 1, m in [sqrt(1/2), sqrt(2)), plus k ln2 and a small
 * correction c (log1p's rounding of 1 + x), as
 *   k ln2_hi - ((f^2/2 - (s (f^2/2 + R) + (k ln2_lo + c))) - f)
 * with s = f / (2 + f) and 2 atanh(s) = 2s + s R(s^2): the leading terms f and
 * f^2/2 are nearly exact, the rounded ones are small. R(z) = z P(z), P a
 * degree-3 Chebyshev fit of (2 atanh(s) - 2s) / (s z) on z <= 0.0298. */
EM_HD float em__log_kernel(float f, float k, float c) {
  float s = f / (2.0f + f);
  float z = s * s;
  float p = 2.334194332e-01f;
  p = 2.855039835e-01f + z * p;
  p = 4.000012577e-01f + z * p;
  p = 6.666666865e-01f + z * p;
  float R = z * p;
  float hfsq = 0.5f * f * f;
  return k * EM__LN2_HI - ((hfsq - (s * (hfsq + R) + (k * EM__LN2_LO + c))) - f);
}

/* Splits a positive normal float u into 2^k m with m in [sqrt(1/2), sqrt(2)). */
EM_HD float em__split_sqrt2(float u, float *k) {
  unsigned int b = em_as_uint(u);
  int e = (int)(b >> 23) - 127;
  unsigned int mant = b & 0x007fffffu;
  if (mant > 0x003504f3u) { /* m > sqrt(2): halve it */
    mant |= 0x3f000000u;
    e += 1;
  } else {
    mant |= 0x3f800000u;
  }
  *k = (float)e;
  return em_as_float(mant);
}

/* Natural logarithm. */
EM_HD float em_logf(float x) {
  unsigned int b = em_as_uint(x);
  if (em__isnan(x) || (b > 0x80000000u)) return em__nan(); /* NaN, x < 0 */
  if ((b & 0x7fffffffu) == 0) return -em__inf();           /* +-0 */
  if (b == 0x7f800000u) return x;                          /* +inf */
  float bias = 0.0f;
  if (b < 0x00800000u) { /* subnormal: scale into the normal range, exactly */
    x = x * 33554432.0f; /* 2^25 */
    bias = -25.0f;
  }
  float k;
  float m = em__split_sqrt2(x, &k);
  return em__log_kernel(m - 1.0f, k + bias, 0.0f);
}

/* log(1 + x), accurate near 0. */
EM_HD float em_log1pf(float x) {
  if (em__isnan(x) || x < -1.0f) return em__nan();
  if (x == -1.0f) return -em__inf();
  if (x == em__inf()) return x;
  float ax = em__fabs(x);
  if (ax < 5.96046448e-08f) return x; /* 2^-24: x - x^2/2 rounds to x; keeps -0 and subnormals */
  /* 1 + x already in [sqrt(1/2), sqrt(2)): f = x exactly, nothing to correct. */
  if (x > -2.928932309e-01f && x < 4.142135680e-01f) return em__log_kernel(x, 0.0f, 0.0f);
  float u = 1.0f + x;
  /* c = (1 + x) - u, exactly: the rounding error of u, added back as c / u. */
  float c = u >= 2.0f ? 1.0f - (u - x) : x - (u - 1.0f);
  c = c / u;
  float k;
  float m = em__split_sqrt2(u, &k);
  return em__log_kernel(m - 1.0f, k, c);
}

/* ------------------------------------------------- activation functions --- */

/* tanh: x + x^3 T(x^2) for |x| < 0.55 (T a degree-6 Chebyshev fit of
 * (tanh x - x) / x^3); 1 - 2 / (e^(2|x|) + 1) above; +-1 from 9.02 on, where
 * 1 - tanh|x| < 2^-25. */
EM_HD float em_tanhf(float x) {
  if (em__isnan(x)) return em__nan();
  float ax = em__fabs(x);
  if (ax > 9.02f) return em__copysign(1.0f, x);
  if (ax < 0.55f) {
    if (ax < 2.44140625e-04f) return x; /* 2^-12: x - x^3/3 rounds to x */
    float z = x * x;
    float t = -9.617853211e-04f;
    t = 3.401583759e-03f + z * t;
    t = -8.825144731e-03f + z * t;
    t = 2.186550759e-02f + z * t;
    t = -5.396805331e-02f + z * t;
    t = 1.333333254e-01f + z * t;
    t = -3.333333433e-01f + z * t;
    return x + x * (z * t);
  }
  float e = em_expm1f(2.0f * ax);
  return em__copysign(1.0f - 2.0f / (e + 2.0f), x);
}

/* 1 / (1 + e^-x), with the exponential always of a non-positive argument, so
 * it never overflows: e^x / (1 + e^x) for x < 0. */
EM_HD float em_sigmoidf(float x) {
  if (em__isnan(x)) return em__nan();
  if (x >= 0.0f) return 1.0f / (1.0f + em_expf(-x));
  float e = em_expf(x);
  return e / (1.0f + e);
}

/* log(1 + e^x) = max(x, 0) + log1p(e^-|x|): never overflows, and for large
 * negative x it is e^x (subnormal included), not 0. */
EM_HD float em_softplusf(float x) {
  if (em__isnan(x)) return em__nan();
  if (x > 0.0f) return x + em_log1pf(em_expf(-x));
  return em_log1pf(em_expf(x));
}

/* erf: x + x E(x^2) for |x| < 0.75 (E a degree-6 Chebyshev fit of
 * erf(x)/x - 1); 1 - erfc(|x|) with erfc from two Chebyshev fits in
 * t = |x| - centre, on [0.75, 2] (degree 11) and [2, 3.92] (degree 11);
 * +-1 from 3.92 on, where erfc < 2^-25. */
EM_HD float em_erff(float x) {
  if (em__isnan(x)) return em__nan();
  float ax = em__fabs(x);
  if (ax < 0.75f) {
    float z = x * x;
    float e = 9.468199278e-05f;
    e = -8.356577018e-04f + z * e;
    e = 5.216769408e-03f + z * e;
    e = -2.686476707e-02f + z * e;
    e = 1.128377840e-01f + z * e;
    e = -3.761263788e-01f + z * e;
    e = 1.283791661e-01f + z * e;
    return x + x * e;
  }
  if (ax >= 3.92f) return em__copysign(1.0f, x);
  float c;
  if (ax < 2.0f) {
    float t = ax - 1.375f;
    c = 2.927052265e-04f;
    c = -3.478324797e-04f + t * c;
    c = -1.557881245e-03f + t * c;
    c = 4.270414822e-03f + t * c;
    c = 1.415039296e-03f + t * c;
    c = -2.216301858e-02f + t * c;
    c = 3.060634248e-02f + t * c;
    c = 3.050076775e-02f + t * c;
    c = -1.579377204e-01f + t * c;
    c = 2.342446893e-01f + t * c;
    c = -1.703597754e-01f + t * c;
    c = 5.182992667e-02f + t * c;
  } else {
    float t = ax - 2.96f; /* exact: ax and 2.96f are within a factor of 2 */
    c = 1.033025728e-05f;
    c = -2.615793528e-05f + t * c;
    c = -4.378945960e-06f + t * c;
    c = 1.434218429e-04f + t * c;
    c = -4.355870187e-04f + t * c;
    c = 8.513341891e-04f + t * c;
    c = -1.206994290e-03f + t * c;
    c = 1.266773208e-03f + t * c;
    c = -9.734767955e-04f + t * c;
    c = 5.231215619e-04f + t * c;
    c = -1.767416688e-04f + t * c;
    c = 2.838277032e-05f + t * c;
  }
  return em__copysign(1.0f - c, x);
}

/* ---------------------------------------------------------- square roots --- */

/* Correctly rounded square root; sqrt(-0) = -0. */
EM_HD float em_sqrtf(float x) {
  if (em__isnan(x) || x < 0.0f) return em__nan();
  return em__sqrt_hw(x);
}

/* 1 / sqrt(x): two correctly rounded steps (no approximate rsqrt). */
EM_HD float em_rsqrtf(float x) {
  if (em__isnan(x) || x < 0.0f) return em__nan();
  return 1.0f / em__sqrt_hw(x);
}

/* ------------------------------------------- binary64 kernels (not hot) --- */

/* log(x) for a positive normal double, relative error below 2^-50:
 * x = 2^k m, m in [sqrt(1/2), sqrt(2)), s = (m - 1) / (m + 1),
 * log m = 2 atanh(s) = 2s + 2s^3/3 + 2s^5/5 + ... (Taylor to s^19; |s| <= 0.172). */
EM_HD double em__log_d(double x) {
  unsigned long long b = em_as_u64(x);
  int k = (int)(b >> 52) - 1023;
  unsigned long long mant = b & 0x000fffffffffffffull;
  if (mant > 0x6a09e667f3bcdull) { /* m > sqrt(2) */
    mant |= 0x3fe0000000000000ull;
    k += 1;
  } else {
    mant |= 0x3ff0000000000000ull;
  }
  double f = em_as_double(mant) - 1.0;
  double s = f / (2.0 + f);
  double z = s * s;
  double p = 2.0 / 19.0;
  p = 2.0 / 17.0 + z * p;
  p = 2.0 / 15.0 + z * p;
  p = 2.0 / 13.0 + z * p;
  p = 2.0 / 11.0 + z * p;
  p = 2.0 / 9.0 + z * p;
  p = 2.0 / 7.0 + z * p;
  p = 2.0 / 5.0 + z * p;
  p = 2.0 / 3.0 + z * p;
  double dk = (double)k;
  return dk * EM__LN2_HI_D + ((2.0 * s + s * (z * p)) + dk * EM__LN2_LO_D);
}

/* e^t for |t| <= 700, relative error below 2^-50: t = k ln2 + r, |r| <= 0.35,
 * e^r by Taylor to r^12. */
EM_HD double em__exp_d(double t) {
  double k = em__rint_d(t * EM__INVLN2_D);
  double r = (t - k * EM__LN2_HI_D) - k * EM__LN2_LO_D;
  double p = 1.0 / 479001600.0;
  p = 1.0 / 39916800.0 + r * p;
  p = 1.0 / 3628800.0 + r * p;
  p = 1.0 / 362880.0 + r * p;
  p = 1.0 / 40320.0 + r * p;
  p = 1.0 / 5040.0 + r * p;
  p = 1.0 / 720.0 + r * p;
  p = 1.0 / 120.0 + r * p;
  p = 1.0 / 24.0 + r * p;
  p = 1.0 / 6.0 + r * p;
  p = 0.5 + r * p;
  p = 1.0 + r * (1.0 + r * p);
  return p * em__pow2_d((int)k);
}

/* ------------------------------------------------------------------ pow --- */

/* 0: y is not an integer; 1: odd integer; 2: even integer. y finite. */
EM_HD int em__int_kind(float y) {
  if (em__fabs(y) >= 16777216.0f) return 2; /* 2^24 and up: even integers */
  double r = em__rint_d((double)y);
  if (r != (double)y) return 0;
  return ((long long)r & 1) ? 1 : 2;
}

/* x^y, with C99 Annex F's special cases; |x|^y = e^(y log|x|) in binary64
 * (log to 2^-50, so y log|x| is accurate enough for every float result),
 * rounded to float once. */
EM_HD float em_powf(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f; /* even for NaN */
  if (em__isnan(x) || em__isnan(y)) return em__nan();
  float ax = em__fabs(x);
  if (em__fabs(y) == em__inf()) {
    if (ax == 1.0f) return 1.0f; /* (-1)^+-inf */
    return (ax > 1.0f) == (y > 0.0f) ? em__inf() : 0.0f;
  }
  int kind = em__int_kind(y);
  if (ax == 0.0f) {
    if (y < 0.0f) return kind == 1 ? em__copysign(em__inf(), x) : em__inf();
    return kind == 1 ? x : 0.0f;
  }
  if (ax == em__inf()) {
    float mag = y < 0.0f ? 0.0f : em__inf();
    return x < 0.0f && kind == 1 ? -mag : mag;
  }
  if (x < 0.0f && kind == 0) return em__nan();
  double t = (double)y * em__log_d((double)ax);
  if (t > 200.0) t = 200.0; /* beyond float's range either way */
  if (t < -200.0) t = -200.0;
  float r = (float)em__exp_d(t);
  return x < 0.0f && kind == 1 ? -r : r;
}

/* ---------------------------------------------------------- trigonometry --- */

/* Bits of 2/pi after the binary point, 32 per word (computed with mpmath to
 * 100 digits). A switch, not an array: no table in memory, the same code in
 * every compiler. */
EM_HD unsigned long long em__two_over_pi_word(int i) {
  switch (i) {
  case 0: return 0xA2F9836Eull;
  case 1: return 0x4E441529ull;
  case 2: return 0xFC2757D1ull;
  case 3: return 0xF534DDC0ull;
  case 4: return 0xDB629599ull;
  case 5: return 0x3C439041ull;
  case 6: return 0xFE5163ABull;
  default: return 0xDEBBC561ull;
  }
}

/* Bits [32i + s, 32i + s + 32) of 2/pi after the point, 0 <= s < 32. */
EM_HD unsigned long long em__two_over_pi_bits(int i, int s) {
  unsigned long long w = (em__two_over_pi_word(i) << 32) | em__two_over_pi_word(i + 1);
  return ((w << s) >> 32) & 0xffffffffull;
}

/* x = j pi/2 + r, |r| <= pi/4 (a hair more), r in binary64 with relative
 * error near 2^-50 even where x is close to a multiple of pi/2; returns j mod 4.
 * x finite. */
EM_HD int em__reduce_pio2(float x, double *r) {
  float ax = em__fabs(x);
  if (ax < 33554432.0f) { /* 2^25: Cody-Waite with pi/2 in three parts */
    /* P1, P2: 28 significant bits each, so j P1 and j P2 are exact for
     * |j| < 2^25; P3: the next 53 bits. */
    double xd = (double)x;
    double j = em__rint_d(xd * 0.63661977236758138);
    *r = ((xd - j * 1.570796325802803) - j * 9.9209357395935172e-10) - j * 5.7211887261098318e-18;
    return (int)((long long)j & 3);
  }
  /* Payne-Hanek: x = m 2^(E-23), m a 24-bit integer, E >= 25. Bits of 2/pi
   * before p = E - 25 contribute multiples of 4 to x 2/pi: skip them, and
   * multiply m by the next 96 bits. The product has its binary point 94 bits
   * up: 2 integer bits we need (j mod 4), then the fraction. */
  unsigned int b = em_as_uint(ax);
  int E = (int)(b >> 23) - 127;
  unsigned long long m = (b & 0x007fffffu) | 0x00800000u;
  int p = E - 25;
  int wi = p >> 5, ws = p & 31;
  unsigned long long a = m * em__two_over_pi_bits(wi + 2, ws);
  unsigned long long lo = a & 0xffffffffull;
  unsigned long long bb = m * em__two_over_pi_bits(wi + 1, ws) + (a >> 32);
  unsigned long long mid = bb & 0xffffffffull;
  unsigned long long c = m * em__two_over_pi_bits(wi, ws) + (bb >> 32);
  int j = (int)((c >> 30) & 3);
  unsigned long long frac = (c << 34) | (mid << 2) | (lo >> 30); /* 64 fraction bits */
  long long sf;
  if (frac >> 63) { /* fraction >= 1/2: round j up, fraction - 1 */
    j = (j + 1) & 3;
    sf = (long long)(frac - 0x8000000000000000ull) - 0x7fffffffffffffffll - 1;
  } else {
    sf = (long long)frac;
  }
  /* sf 2^-64 turns, times pi/2. */
  double rr = (double)sf * 5.4210108624275222e-20 * 1.5707963267948966;
  if (x < 0.0f) {
    rr = -rr;
    j = (4 - j) & 3;
  }
  *r = rr;
  return j;
}

/* sin r and cos r for |r| <= 0.786, Taylor to r^15 and r^16 (error < 2^-45). */
EM_HD double em__sin_d(double r) {
  double z = r * r;
  double p = -1.0 / 1307674368000.0;
  p = 1.0 / 6227020800.0 + z * p;
  p = -1.0 / 39916800.0 + z * p;
  p = 1.0 / 362880.0 + z * p;
  p = -1.0 / 5040.0 + z * p;
  p = 1.0 / 120.0 + z * p;
  p = -1.0 / 6.0 + z * p;
  return r + r * (z * p);
}

EM_HD double em__cos_d(double r) {
  double z = r * r;
  double p = 1.0 / 20922789888000.0;
  p = -1.0 / 87178291200.0 + z * p;
  p = 1.0 / 479001600.0 + z * p;
  p = -1.0 / 3628800.0 + z * p;
  p = 1.0 / 40320.0 + z * p;
  p = -1.0 / 720.0 + z * p;
  p = 1.0 / 24.0 + z * p;
  p = -0.5 + z * p;
  return 1.0 + z * p;
}

EM_HD float em_sinf(float x) {
  if (em__isnan(x) || em__fabs(x) == em__inf()) return em__nan();
  if (em__fabs(x) < 2.44140625e-04f) return x; /* 2^-12: x - x^3/6 rounds to x; keeps -0 */
  double r;
  int j = em__reduce_pio2(x, &r);
  double v = (j & 1) ? em__cos_d(r) : em__sin_d(r);
  return (float)(j & 2 ? -v : v);
}

EM_HD float em_cosf(float x) {
  if (em__isnan(x) || em__fabs(x) == em__inf()) return em__nan();
  double r;
  int j = em__reduce_pio2(x, &r);
  double v = (j & 1) ? em__sin_d(r) : em__cos_d(r);
  return (float)(j == 1 || j == 2 ? -v : v);
}

EM_HD float em_tanf(float x) {
  if (em__isnan(x) || em__fabs(x) == em__inf()) return em__nan();
  if (em__fabs(x) < 2.44140625e-04f) return x; /* 2^-12: x + x^3/3 rounds to x; keeps -0 */
  double r;
  int j = em__reduce_pio2(x, &r);
  double s = em__sin_d(r), c = em__cos_d(r);
  return (float)((j & 1) ? -c / s : s / c);
}

/* atan t for t >= 0 (+inf included) in binary64, error below 1e-12 relative:
 * t > 1 -> pi/2 - atan(1/t); t > sqrt(2) - 1 -> pi/4 + atan((t-1)/(t+1));
 * then atan(u) = u + u z A(z), z = u^2 <= 0.172, A a degree-7 Chebyshev fit
 * (error 7e-13). */
EM_HD double em__atan_d(double t) {
  int inv = t > 1.0;
  if (inv) t = 1.0 / t;
  double base = 0.0;
  if (t > 0.41421356237309503) {
    t = (t - 1.0) / (t + 1.0);
    base = 0.78539816339744828;
  }
  double z = t * t;
  double a = 0.032938757974709847;
  a = -0.060262983947018789 + z * a;
  a = 0.076045794868523031 + z * a;
  a = -0.090840781416635374 + z * a;
  a = 0.11110818413358031 + z * a;
  a = -0.14285708076608974 + z * a;
  a = 0.19999999949530611 + z * a;
  a = -0.33333333333265697 + z * a;
  double v = base + (t + t * (z * a));
  if (inv) v = 1.5707963267948966 - v;
  return v;
}

EM_HD float em_atanf(float x) {
  if (em__isnan(x)) return em__nan();
  return em__copysign((float)em__atan_d((double)em__fabs(x)), x);
}

/* asinh(x) = sign(x) log(|x| + sqrt(x^2 + 1)) in binary64: its rounding
 * errors near |x| = 2^-12 are 2^-41 relative, and x^2 cannot overflow. */
EM_HD float em_asinhf(float x) {
  if (em__isnan(x)) return em__nan();
  float ax = em__fabs(x);
  if (ax < 2.44140625e-04f) return x; /* 2^-12: x - x^3/6 rounds to x */
  if (ax == em__inf()) return x;
  double t = (double)ax;
  double v = em__log_d(t + em__sqrt_hw_d(t * t + 1.0));
  return em__copysign((float)v, x);
}

/* ------------------------------- inverse trigonometric and hyperbolic --- */
/* All in binary64 from atan, log and exp above, rounded to float once (about
 * 0.5 ulp): none is hot, and binary64 keeps the cancellations near the
 * domain edges (1 - x^2, x - 1, e^x - e^-x) far below a float ulp. */

/* asin x = atan(x / sqrt((1 - x)(1 + x))); 1 - |x| and 1 + |x| are exact in
 * binary64. NaN for |x| > 1. */
EM_HD float em_asinf(float x) {
  float ax = em__fabs(x);
  if (em__isnan(x) || ax > 1.0f) return em__nan();
  if (ax < 2.44140625e-04f) return x; /* 2^-12: x + x^3/6 rounds to x; keeps -0 */
  double t = (double)ax;
  double v = ax == 1.0f ? 1.5707963267948966 : em__atan_d(t / em__sqrt_hw_d((1.0 - t) * (1.0 + t)));
  return em__copysign((float)v, x);
}

/* acos x = 2 atan(sqrt((1 - x) / (1 + x))): no cancellation at either end
 * (acos(-1) = pi through atan(+inf)). NaN for |x| > 1. */
EM_HD float em_acosf(float x) {
  if (em__isnan(x) || em__fabs(x) > 1.0f) return em__nan();
  double t = (double)x;
  return (float)(2.0 * em__atan_d(em__sqrt_hw_d((1.0 - t) / (1.0 + t))));
}

/* sinh t in binary64 for a float-valued t, relative error below 2^-45:
 * Taylor to t^15 below 0.5 (where e^t - e^-t cancels), (e^t - e^-t)/2 up to
 * 700, +-inf beyond (every float result has overflowed by 89.5). */
EM_HD double em__sinh_d(double t) {
  double at = t < 0.0 ? -t : t;
  if (at < 0.5) {
    double z = t * t;
    double p = 1.0 / 1307674368000.0;
    p = 1.0 / 6227020800.0 + z * p;
    p = 1.0 / 39916800.0 + z * p;
    p = 1.0 / 362880.0 + z * p;
    p = 1.0 / 5040.0 + z * p;
    p = 1.0 / 120.0 + z * p;
    p = 1.0 / 6.0 + z * p;
    return t + t * (z * p);
  }
  double v = at > 700.0 ? em_as_double(0x7ff0000000000000ull) : em__exp_d(at);
  if (at <= 700.0) v = 0.5 * (v - 1.0 / v);
  return t < 0.0 ? -v : v;
}

/* cosh t = (e^|t| + e^-|t|)/2 in binary64, +inf beyond 700. */
EM_HD double em__cosh_d(double t) {
  double at = t < 0.0 ? -t : t;
  if (at > 700.0) return em_as_double(0x7ff0000000000000ull);
  double e = em__exp_d(at);
  return 0.5 * (e + 1.0 / e);
}

EM_HD float em_sinhf(float x) {
  if (em__isnan(x)) return em__nan();
  if (em__fabs(x) < 2.44140625e-04f) return x; /* 2^-12: x + x^3/6 rounds to x; keeps -0 */
  return (float)em__sinh_d((double)x);
}

EM_HD float em_coshf(float x) {
  if (em__isnan(x)) return em__nan();
  return (float)em__cosh_d((double)x);
}

/* acosh x = log(x + sqrt((x - 1)(x + 1))) in binary64 (x - 1 exact; x^2
 * cannot overflow). NaN below 1. */
EM_HD float em_acoshf(float x) {
  if (em__isnan(x) || x < 1.0f) return em__nan();
  if (x == em__inf()) return x;
  double t = (double)x;
  return (float)em__log_d(t + em__sqrt_hw_d((t - 1.0) * (t + 1.0)));
}

/* atanh x = log((1 + x)/(1 - x))/2 in binary64 (1 +- x exact): the quotient's
 * rounding is 2^-53 absolute in the log, 2^-41 relative for |x| >= 2^-12.
 * +-inf at +-1, NaN beyond. */
EM_HD float em_atanhf(float x) {
  float ax = em__fabs(x);
  if (em__isnan(x) || ax > 1.0f) return em__nan();
  if (ax == 1.0f) return em__copysign(em__inf(), x);
  if (ax < 2.44140625e-04f) return x; /* 2^-12: x + x^3/3 rounds to x; keeps -0 */
  double t = (double)ax;
  return em__copysign((float)(0.5 * em__log_d((1.0 + t) / (1.0 - t))), x);
}

/* ------------------------------------------------------ normal CDF, gelu --- */

/* Phi(x) = erfc(-x/sqrt 2)/2, the standard normal CDF, in binary64 for a
 * float x, relative error below 1e-12 (measured against glibc's erfc):
 *  - |x| < 2 sqrt 2: 1/2 + erf(x/sqrt 2)/2, erf(z) = 2/sqrt(pi) z S(z^2),
 *    S the Taylor series (-1)^n z^2n / (n! (2n + 1)) to n = 28 (the next
 *    term is below 1e-15 for |z| < 2; the alternating terms lose at most
 *    6 bits), coefficients rounded from exact fractions;
 *  - beyond: erfc(z) = e^-z^2 / sqrt(pi) / K(z), K the continued fraction
 *    z + (1/2)/(z + 1/(z + (3/2)/(z + ...))) evaluated from the bottom, 40
 *    levels deep below z = 3, 20 below 5, 16 beyond (each under 2e-13);
 *    e^-z^2 = e^(-x^2/2) with x^2/2 exact for a float x. For x > 0,
 *    Phi = 1 - erfc(z)/2.
 * 0 (1) below -37 (above 37), where e^(-x^2/2) leaves em__exp_d's range;
 * every float result has long been 0 (by -15). */
EM_HD double em__phi_d(float x) {
  double t = (double)x;
  double at = t < 0.0 ? -t : t;
  if (at < 2.8284271247461903) {
    double z = t * 0.70710678118654752;
    double z2 = z * z;
    double s = 5.754191643982172e-32;
    s = -1.669761793417372e-30 + z2 * s;
    s = 4.6784835155184856e-29 + z2 * s;
    s = -1.2641078988989164e-27 + z2 * s;
    s = 3.289260349175752e-26 + z2 * s;
    s = -8.230149299214221e-25 + z2 * s;
    s = 1.977064753877905e-23 + z2 * s;
    s = -4.5518467589282e-22 + z2 * s;
    s = 1.0025164934907719e-20 + z2 * s;
    s = -2.107855191442136e-19 + z2 * s;
    s = 4.221407288807088e-18 + z2 * s;
    s = -8.032735012415773e-17 + z2 * s;
    s = 1.4483264643598138e-15 + z2 * s;
    s = -2.466827010264457e-14 + z2 * s;
    s = 3.9554295164585257e-13 + z2 * s;
    s = -5.9477940136376354e-12 + z2 * s;
    s = 8.35070279514724e-11 + z2 * s;
    s = -1.0892221037148573e-09 + z2 * s;
    s = 1.3122532963802806e-08 + z2 * s;
    s = -1.4503852223150468e-07 + z2 * s;
    s = 1.4589169000933706e-06 + z2 * s;
    s = -1.3227513227513228e-05 + z2 * s;
    s = 0.00010683760683760684 + z2 * s;
    s = -0.0007575757575757576 + z2 * s;
    s = 0.004629629629629629 + z2 * s;
    s = -0.023809523809523808 + z2 * s;
    s = 0.1 + z2 * s;
    s = -0.3333333333333333 + z2 * s;
    s = 1.0 + z2 * s;
    return 0.5 + 0.5641895835477563 * (z * s); /* 1/2 + (2/sqrt(pi))/2 z S */
  }
  if (at > 37.0) return t < 0.0 ? 0.0 : 1.0;
  double z = at * 0.70710678118654752;
  int levels = z < 3.0 ? 40 : (z < 5.0 ? 20 : 16);
  double k = z;
  for (int n = levels; n >= 1; n--) k = z + (0.5 * (double)n) / k;
  double half_erfc = em__exp_d(-0.5 * (t * t)) * 0.28209479177387814 / k; /* 1/(2 sqrt(pi)) */
  return t < 0.0 ? half_erfc : 1.0 - half_erfc;
}

/* gelu(x) = x Phi(x) (the exact, erf form), rounded to float once; NaN
 * stays NaN, gelu(+inf) = +inf and gelu(-inf) = NaN (-inf times 0, as the
 * f64 op and x (1 + erf(x/sqrt 2))/2 elsewhere give). */
EM_HD float em_geluf(float x) {
  if (em__isnan(x) || x == -em__inf()) return em__nan();
  if (x == em__inf()) return x;
  return (float)((double)x * em__phi_d(x));
}

/* gelu'(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi), in binary64. */
EM_HD double em__gelu_grad_d(float x) {
  double t = (double)x;
  double at = t < 0.0 ? -t : t;
  double dens = at > 37.0 ? 0.0 : em__exp_d(-0.5 * (t * t)) * 0.3989422804014327;
  return em__phi_d(x) + t * dens;
}

/* ------------------------------------------------- half and bfloat16 bits --- */

/* float -> IEEE binary16, round to nearest even; overflow to inf; NaN stays
 * NaN (quiet, top payload bits kept); results below 2^-14 are subnormal. */
EM_HD unsigned short em_f32_to_f16_bits(float x) {
  unsigned int u = em_as_uint(x);
  unsigned int sign = (u >> 16) & 0x8000u;
  unsigned int a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* >= 65520: inf */
  if (a >= 0x38800000u) {                                       /* >= 2^-14: normal */
    unsigned int h = a - 0x38000000u;                           /* rebias 127 -> 15 */
    h = (h + 0x0fffu + ((h >> 13) & 1u)) >> 13;                 /* RNE; a carry bumps the exponent */
    return (unsigned short)(sign | h);
  }
  unsigned int e = a >> 23;
  if (e < 102u) return (unsigned short)sign; /* < 2^-25 (or = 2^-25: tie to 0) */
  /* Subnormal half: q = x / 2^-24 = m 2^(e-126), shift 126 - e in [14, 24]. */
  unsigned int m = (a & 0x007fffffu) | 0x00800000u;
  unsigned int sh = 126u - e;
  unsigned int q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
  if (rem > half || (rem == half && (q & 1u))) q += 1u;
  return (unsigned short)(sign | q);
}

/* IEEE binary16 -> float, exact; a NaN comes back quiet with its payload. */
EM_HD float em_f16_bits_to_f32(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int e = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int m = (unsigned int)h & 0x03ffu;
  if (e == 31u) return em_as_float(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));
  if (e == 0u) {
    if (m == 0u) return em_as_float(sign);
    /* Subnormal m 2^-24: normalise so the leading bit sits at bit 10. */
    int ex = 113; /* biased float exponent of 2^-14 */
    while (!(m & 0x0400u)) {
      m <<= 1;
      ex -= 1;
    }
    return em_as_float(sign | ((unsigned int)ex << 23) | ((m & 0x03ffu) << 13));
  }
  return em_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* float -> bfloat16 (the top half of a float), round to nearest even; NaN
 * stays NaN (quiet). Subnormals and overflow fall out of the integer rounding. */
EM_HD unsigned short em_f32_to_bf16_bits(float x) {
  unsigned int u = em_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* bfloat16 -> float, exact; a NaN comes back quiet with its payload. */
EM_HD float em_bf16_bits_to_f32(unsigned short h) {
  unsigned int u = (unsigned int)h << 16;
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
  return em_as_float(u);
}

#endif
