/* The per-element arithmetic of the unary op family, written once for the
 * CPU loops (ops/unary.c, which includes this header with a relative path)
 * and the kernels (kernels/unary.cu): every op computes its element through
 * the function of its name here, so the CPU and every GPU give the same bits
 * (portable numerics: kernels/README.md, em_math.h).
 *
 * Op codes: EM_UNARY_<OP>, in the order of UNARY_OPS in ops/unary.c (a
 * static assertion there keeps the two lists equal). The kernels take two
 * per-op constants a, b (rounded to the dtype by the launch, exactly as the
 * CPU rounds them) and an int mode:
 *   leaky_relu, elu, thresholded_relu  a = alpha
 *   selu                               a = gamma, b = gamma * alpha (one rounding, in binary64)
 *   hard_sigmoid                       a = alpha, b = beta
 *   clip                               a = min, b = max
 *   pow_scalar                         a = exponent
 *   gelu                               mode 1: the tanh form
 *   isinf                              mode bit 0: detect_negative, bit 1: detect_positive
 *
 * f32: every op, forward and gradient (em_math.h for the transcendentals).
 * f64: the ops built from IEEE + - * / and square roots only (the
 * "exact-arithmetic" ops, em_unary_f64_portable below); the f64
 * transcendentals stay on the CPU with libm, whose bits no GPU reproduces.
 * i32 / i64: neg abs sign relu clip (two's complement wrap, no trap). */
#ifndef EM_UNARY_MATH_H
#define EM_UNARY_MATH_H

#include "em_math.h"

enum {
  EM_UNARY_NEG, EM_UNARY_ABS, EM_UNARY_SIGN, EM_UNARY_EXP, EM_UNARY_LOG, EM_UNARY_SQRT, EM_UNARY_RSQRT,
  EM_UNARY_RECIPROCAL, EM_UNARY_SIGMOID, EM_UNARY_TANH, EM_UNARY_RELU, EM_UNARY_LEAKY_RELU, EM_UNARY_ELU,
  EM_UNARY_SELU, EM_UNARY_SOFTPLUS, EM_UNARY_SOFTSIGN, EM_UNARY_HARD_SIGMOID, EM_UNARY_GELU, EM_UNARY_SIN,
  EM_UNARY_COS, EM_UNARY_TAN, EM_UNARY_ATAN, EM_UNARY_ASINH, EM_UNARY_FLOOR, EM_UNARY_CEIL, EM_UNARY_ROUND,
  EM_UNARY_CLIP, EM_UNARY_POW_SCALAR, EM_UNARY_ERF, EM_UNARY_ASIN, EM_UNARY_ACOS, EM_UNARY_SINH, EM_UNARY_COSH,
  EM_UNARY_ACOSH, EM_UNARY_ATANH, EM_UNARY_LOG1P, EM_UNARY_THRESHOLDED_RELU, EM_UNARY_HARD_SWISH, EM_UNARY_ISNAN,
  EM_UNARY_ISINF, EM_UNARY_COUNT
};

/* gelu's tanh form: x/2 (1 + tanh u) = x sigmoid(2u), 2u = x (C1 + C2 x^2),
 * C1 = 2 sqrt(2/pi), C2 = C1 * 0.044715 (binary64), C3 = 3 C2; the sigmoid
 * form does not cancel for negative x as 1 + tanh u does. */
#define EM_UNARY_GELU_C1 1.5957691216057308
#define EM_UNARY_GELU_C2 0.07135481627260025
#define EM_UNARY_GELU_C3 0.21406444881780073
#define EM_UNARY_GELU_C1F 1.59576917f
#define EM_UNARY_GELU_C2F 0.0713548139f
#define EM_UNARY_GELU_C3F 0.214064449f
#define EM_UNARY_TWO_INV_SQRTPI_F 1.12837923f /* 2/sqrt(pi), rounded to float */

/* ------------------------------------------------------ binary64 bits --- */

EM_HD double em_un_fabs_d(double x) { return em_as_double(em_as_u64(x) & 0x7fffffffffffffffull); }
EM_HD double em_un_copysign_d(double mag, double sgn) {
  return em_as_double((em_as_u64(mag) & 0x7fffffffffffffffull) | (em_as_u64(sgn) & 0x8000000000000000ull));
}
EM_HD int em_un_isnan_d(double x) { return (em_as_u64(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
EM_HD double em_un_nan_d(void) { return em_as_double(0x7ff8000000000000ull); }

/* ------------------------------------------------------- f32 forward --- */

EM_HD float em_un_neg_f32(float x) { return -x; }
EM_HD float em_un_abs_f32(float x) { return em__fabs(x); }
/* -1, 0 or 1; the zero keeps its sign and NaN stays NaN (x itself). */
EM_HD float em_un_sign_f32(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
EM_HD float em_un_reciprocal_f32(float x) { return 1.0f / x; }
EM_HD float em_un_relu_f32(float x) { return x < 0.0f ? 0.0f : x; }
EM_HD float em_un_leaky_relu_f32(float x, float alpha) { return x < 0.0f ? alpha * x : x; }
EM_HD float em_un_elu_f32(float x, float alpha) { return x > 0.0f ? x : alpha * em_expm1f(x); }
EM_HD float em_un_selu_f32(float x, float gamma, float gamma_alpha) {
  return x > 0.0f ? gamma * x : gamma_alpha * em_expm1f(x);
}
EM_HD float em_un_softsign_f32(float x) {
  float ax = em__fabs(x);
  return ax == em__inf() ? em__copysign(1.0f, x) : x / (1.0f + ax);
}
EM_HD float em_un_hard_sigmoid_f32(float x, float alpha, float beta) {
  float t = alpha * x + beta;
  return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
}
/* (x + 3)/6 rather than x/6 + 1/2: x + 3 is exact near -3, no cancellation. */
EM_HD float em_un_hard_swish_f32(float x) {
  float t = (x + 3.0f) / 6.0f;
  return x * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
}
EM_HD float em_un_gelu_tanh_f32(float x) { return x * em_sigmoidf(x * (EM_UNARY_GELU_C1F + EM_UNARY_GELU_C2F * (x * x))); }
EM_HD float em_un_thresholded_relu_f32(float x, float alpha) { return x <= alpha ? 0.0f : x; }
EM_HD float em_un_clip_f32(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* Nearest integer, halves to even: below 2^23 adding and subtracting 2^23
 * leaves no fraction bits (round to nearest even is the FPU's mode); at or
 * above it (and inf, NaN) x already is one. The sign goes back so that -0.3
 * gives -0. floor and ceil from it; the sign of a zero follows x (floor(-0)
 * = -0, ceil(-0.5) = -0), as C's. */
EM_HD float em_un_round_f32(float x) {
  float ax = em__fabs(x);
  float r = em__copysign((ax + 8388608.0f) - 8388608.0f, x);
  return ax < 8388608.0f ? r : x;
}
EM_HD float em_un_floor_f32(float x) {
  float r = em_un_round_f32(x);
  return em__copysign(r > x ? r - 1.0f : r, x);
}
EM_HD float em_un_ceil_f32(float x) {
  float r = em_un_round_f32(x);
  return em__copysign(r < x ? r + 1.0f : r, x);
}

/* isnan / isinf as a bool byte. */
EM_HD unsigned char em_un_isnan_f32(float x) { return (unsigned char)em__isnan(x); }
EM_HD unsigned char em_un_isinf_f32(float x, int mode) {
  return (unsigned char)(em__fabs(x) == em__inf() && (x > 0.0f ? (mode >> 1) & 1 : mode & 1));
}

/* ------------------------------------------------------ f32 gradients --- */
/* dx from x, y = f(x) and g = dy: y where it is the cheaper way. */

EM_HD float em_ung_abs_f32(float x, float g) { return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f); }
EM_HD float em_ung_sqrt_f32(float y, float g) { return (0.5f * g) / y; }
EM_HD float em_ung_rsqrt_f32(float y, float g) { return (-0.5f * g) * (y * y * y); }
EM_HD float em_ung_reciprocal_f32(float y, float g) { return -g * (y * y); }
EM_HD float em_ung_sigmoid_f32(float y, float g) { return g * ((1.0f - y) * y); }
EM_HD float em_ung_tanh_f32(float y, float g) { return g * (1.0f - y * y); }
EM_HD float em_ung_relu_f32(float x, float g) { return x > 0.0f ? g : 0.0f; }
EM_HD float em_ung_leaky_relu_f32(float x, float g, float alpha) {
  float ag = alpha * g;
  return x > 0.0f ? g : ag;
}
EM_HD float em_ung_elu_f32(float x, float y, float g, float alpha) {
  float t = g * (y + alpha);
  return x > 0.0f ? g : t;
}
EM_HD float em_ung_selu_f32(float x, float y, float g, float gamma, float gamma_alpha) {
  float t = g * (y + gamma_alpha);
  return x > 0.0f ? gamma * g : t;
}
EM_HD float em_ung_softplus_f32(float x, float g) { return g * em_sigmoidf(x); }
EM_HD float em_ung_softsign_f32(float x, float g) {
  float d = 1.0f + em__fabs(x);
  return g / (d * d);
}
/* alpha g strictly inside 0 < alpha x + beta < 1, else 0. */
EM_HD float em_ung_hard_sigmoid_f32(float x, float g, float alpha, float beta) {
  float t = alpha * x + beta;
  float ag = alpha * g;
  return t > 0.0f && t < 1.0f ? ag : 0.0f;
}
/* As PyTorch: 0 below -3, g (x/3 + 1/2) on [-3, 3], g above. */
EM_HD float em_ung_hard_swish_f32(float x, float g) {
  float m = g * (x / 3.0f + 0.5f);
  return x < -3.0f ? 0.0f : (x <= 3.0f ? m : g);
}
EM_HD float em_ung_gelu_tanh_f32(float x, float g) {
  float x2 = x * x;
  float s = em_sigmoidf(x * (EM_UNARY_GELU_C1F + EM_UNARY_GELU_C2F * x2));
  return g * (s + x * (s * (1.0f - s)) * (EM_UNARY_GELU_C1F + EM_UNARY_GELU_C3F * x2));
}
/* g Phi'(x)-form in binary64, rounded once (em_math.h: em__gelu_grad_d). */
EM_HD float em_ung_gelu_f32(float x, float g) { return (float)((double)g * em__gelu_grad_d(x)); }
EM_HD float em_ung_sin_f32(float x, float g) { return g * em_cosf(x); }
EM_HD float em_ung_cos_f32(float x, float g) { return -g * em_sinf(x); }
EM_HD float em_ung_tan_f32(float y, float g) { return g * (1.0f + y * y); }
EM_HD float em_ung_atan_f32(float x, float g) { return g / (1.0f + x * x); }
EM_HD float em_ung_asinh_f32(float x, float g) { return g / em_sqrtf(x * x + 1.0f); }
/* Boundaries included, as PyTorch's clamp. */
EM_HD float em_ung_clip_f32(float x, float g, float lo, float hi) { return x >= lo && x <= hi ? g : 0.0f; }
/* 0 when the exponent is 0 (as PyTorch). */
EM_HD float em_ung_pow_scalar_f32(float x, float g, float e) {
  return e == 0.0f ? 0.0f : g * (e * em_powf(x, e - 1.0f));
}
EM_HD float em_ung_erf_f32(float x, float g) { return g * (EM_UNARY_TWO_INV_SQRTPI_F * em_expf(-(x * x))); }
/* 1 - x^2 and x^2 - 1 cancel near |x| = 1: binary64, rounded once. */
EM_HD float em_ung_asin_f32(float x, float g) {
  double v = (double)x;
  return (float)((double)g / em__sqrt_hw_d((1.0 - v) * (1.0 + v)));
}
EM_HD float em_ung_acos_f32(float x, float g) {
  double v = (double)x;
  return (float)(-(double)g / em__sqrt_hw_d((1.0 - v) * (1.0 + v)));
}
EM_HD float em_ung_sinh_f32(float x, float g) { return (float)((double)g * em__cosh_d((double)x)); }
EM_HD float em_ung_cosh_f32(float x, float g) { return (float)((double)g * em__sinh_d((double)x)); }
EM_HD float em_ung_acosh_f32(float x, float g) {
  double v = (double)x;
  return (float)((double)g / em__sqrt_hw_d((v - 1.0) * (v + 1.0)));
}
EM_HD float em_ung_atanh_f32(float x, float g) {
  double v = (double)x;
  return (float)((double)g / ((1.0 - v) * (1.0 + v)));
}
EM_HD float em_ung_log1p_f32(float x, float g) { return g / (1.0f + x); }
EM_HD float em_ung_thresholded_relu_f32(float x, float g, float alpha) { return x > alpha ? g : 0.0f; }

/* ----------------------------------------------- f64, exact arithmetic --- */

/* 1 when op runs on f64 from + - * / and square roots alone (forward, or
 * with grad its _unary_grad): the ops whose f64 bits every device shares. */
EM_HD int em_unary_f64_portable(int op, int grad) {
  switch (op) {
  case EM_UNARY_NEG: case EM_UNARY_ABS: case EM_UNARY_SIGN: case EM_UNARY_SQRT: case EM_UNARY_RSQRT:
  case EM_UNARY_RECIPROCAL: case EM_UNARY_RELU: case EM_UNARY_LEAKY_RELU: case EM_UNARY_SOFTSIGN:
  case EM_UNARY_HARD_SIGMOID: case EM_UNARY_FLOOR: case EM_UNARY_CEIL: case EM_UNARY_ROUND: case EM_UNARY_CLIP:
  case EM_UNARY_THRESHOLDED_RELU: case EM_UNARY_HARD_SWISH: case EM_UNARY_ISNAN: case EM_UNARY_ISINF:
    return 1;
  /* gradients from y (or rational in x) although the forward needs libm */
  case EM_UNARY_EXP: case EM_UNARY_LOG: case EM_UNARY_SIGMOID: case EM_UNARY_TANH: case EM_UNARY_ELU:
  case EM_UNARY_SELU: case EM_UNARY_TAN: case EM_UNARY_ATAN: case EM_UNARY_ASINH: case EM_UNARY_ASIN:
  case EM_UNARY_ACOS: case EM_UNARY_ACOSH: case EM_UNARY_ATANH: case EM_UNARY_LOG1P:
    return grad;
  default:
    return 0;
  }
}

EM_HD double em_un_neg_f64(double x) { return -x; }
EM_HD double em_un_abs_f64(double x) { return em_un_fabs_d(x); }
EM_HD double em_un_sign_f64(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
/* Correctly rounded on both sides; NaN (also for x < 0) is the one canonical NaN. */
EM_HD double em_un_sqrt_f64(double x) {
  if (em_un_isnan_d(x) || x < 0.0) return em_un_nan_d();
  return em__sqrt_hw_d(x);
}
EM_HD double em_un_rsqrt_f64(double x) {
  if (em_un_isnan_d(x) || x < 0.0) return em_un_nan_d();
  return 1.0 / em__sqrt_hw_d(x);
}
EM_HD double em_un_reciprocal_f64(double x) { return 1.0 / x; }
EM_HD double em_un_relu_f64(double x) { return x < 0.0 ? 0.0 : x; }
EM_HD double em_un_leaky_relu_f64(double x, double alpha) { return x < 0.0 ? alpha * x : x; }
EM_HD double em_un_softsign_f64(double x) {
  double ax = em_un_fabs_d(x);
  return ax == em_as_double(0x7ff0000000000000ull) ? em_un_copysign_d(1.0, x) : x / (1.0 + ax);
}
EM_HD double em_un_hard_sigmoid_f64(double x, double alpha, double beta) {
  double t = alpha * x + beta;
  return t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t);
}
EM_HD double em_un_hard_swish_f64(double x) {
  double t = (x + 3.0) / 6.0;
  return x * (t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t));
}
EM_HD double em_un_thresholded_relu_f64(double x, double alpha) { return x <= alpha ? 0.0 : x; }
EM_HD double em_un_clip_f64(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }
EM_HD double em_un_round_f64(double x) {
  double ax = em_un_fabs_d(x);
  double r = em_un_copysign_d((ax + 4503599627370496.0) - 4503599627370496.0, x);
  return ax < 4503599627370496.0 ? r : x;
}
EM_HD double em_un_floor_f64(double x) {
  double r = em_un_round_f64(x);
  return em_un_copysign_d(r > x ? r - 1.0 : r, x);
}
EM_HD double em_un_ceil_f64(double x) {
  double r = em_un_round_f64(x);
  return em_un_copysign_d(r < x ? r + 1.0 : r, x);
}
EM_HD unsigned char em_un_isnan_f64(double x) { return (unsigned char)em_un_isnan_d(x); }
EM_HD unsigned char em_un_isinf_f64(double x, int mode) {
  return (unsigned char)(em_un_fabs_d(x) == em_as_double(0x7ff0000000000000ull) &&
                         (x > 0.0 ? (mode >> 1) & 1 : mode & 1));
}

/* f64 gradients of the ops above (and of those whose gradient needs only y
 * or a rational function of x). */
EM_HD double em_ung_abs_f64(double x, double g) { return x > 0.0 ? g : (x < 0.0 ? -g : 0.0); }
EM_HD double em_ung_sqrt_f64(double y, double g) { return (0.5 * g) / y; }
EM_HD double em_ung_rsqrt_f64(double y, double g) { return (-0.5 * g) * (y * y * y); }
EM_HD double em_ung_reciprocal_f64(double y, double g) { return -g * (y * y); }
EM_HD double em_ung_sigmoid_f64(double y, double g) { return g * ((1.0 - y) * y); }
EM_HD double em_ung_tanh_f64(double y, double g) { return g * (1.0 - y * y); }
EM_HD double em_ung_relu_f64(double x, double g) { return x > 0.0 ? g : 0.0; }
EM_HD double em_ung_leaky_relu_f64(double x, double g, double alpha) {
  double ag = alpha * g;
  return x > 0.0 ? g : ag;
}
EM_HD double em_ung_elu_f64(double x, double y, double g, double alpha) {
  double t = g * (y + alpha);
  return x > 0.0 ? g : t;
}
EM_HD double em_ung_selu_f64(double x, double y, double g, double gamma, double gamma_alpha) {
  double t = g * (y + gamma_alpha);
  return x > 0.0 ? gamma * g : t;
}
EM_HD double em_ung_softsign_f64(double x, double g) {
  double d = 1.0 + em_un_fabs_d(x);
  return g / (d * d);
}
EM_HD double em_ung_hard_sigmoid_f64(double x, double g, double alpha, double beta) {
  double t = alpha * x + beta;
  double ag = alpha * g;
  return t > 0.0 && t < 1.0 ? ag : 0.0;
}
EM_HD double em_ung_hard_swish_f64(double x, double g) {
  double m = g * (x / 3.0 + 0.5);
  return x < -3.0 ? 0.0 : (x <= 3.0 ? m : g);
}
EM_HD double em_ung_tan_f64(double y, double g) { return g * (1.0 + y * y); }
EM_HD double em_ung_atan_f64(double x, double g) { return g / (1.0 + x * x); }
EM_HD double em_ung_asinh_f64(double x, double g) { return g / em__sqrt_hw_d(x * x + 1.0); }
EM_HD double em_ung_clip_f64(double x, double g, double lo, double hi) { return x >= lo && x <= hi ? g : 0.0; }
EM_HD double em_ung_asin_f64(double x, double g) { return g / em__sqrt_hw_d((1.0 - x) * (1.0 + x)); }
EM_HD double em_ung_acos_f64(double x, double g) { return -g / em__sqrt_hw_d((1.0 - x) * (1.0 + x)); }
EM_HD double em_ung_acosh_f64(double x, double g) { return g / em__sqrt_hw_d((x - 1.0) * (x + 1.0)); }
EM_HD double em_ung_atanh_f64(double x, double g) { return g / ((1.0 - x) * (1.0 + x)); }
EM_HD double em_ung_log1p_f64(double x, double g) { return g / (1.0 + x); }
EM_HD double em_ung_thresholded_relu_f64(double x, double g, double alpha) { return x > alpha ? g : 0.0; }

/* ----------------------------------------------------------- integers --- */
/* Negation through the unsigned type: -INT_MIN wraps to INT_MIN instead of
 * being undefined behaviour. */

EM_HD int em_un_neg_i32(int x) { return (int)(0u - (unsigned int)x); }
EM_HD int em_un_abs_i32(int x) { return x < 0 ? (int)(0u - (unsigned int)x) : x; }
EM_HD int em_un_sign_i32(int x) { return (x > 0) - (x < 0); }
EM_HD int em_un_relu_i32(int x) { return x < 0 ? 0 : x; }
EM_HD int em_un_clip_i32(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
EM_HD long long em_un_neg_i64(long long x) { return (long long)(0ull - (unsigned long long)x); }
EM_HD long long em_un_abs_i64(long long x) { return x < 0 ? (long long)(0ull - (unsigned long long)x) : x; }
EM_HD long long em_un_sign_i64(long long x) { return (long long)((x > 0) - (x < 0)); }
EM_HD long long em_un_relu_i64(long long x) { return x < 0 ? 0 : x; }
EM_HD long long em_un_clip_i64(long long x, long long lo, long long hi) { return x < lo ? lo : (x > hi ? hi : x); }

#endif
