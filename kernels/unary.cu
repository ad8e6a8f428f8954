/* The unary op family (ops/unary.c) on the GPU: one kernel per dtype with
 * the op code as a parameter (EM_UNARY_*, unary_math.h), and one for the
 * fused gradient _unary_grad. Each element goes through the function of
 * unary_math.h that the CPU loops call, so the bits are the CPU's. The
 * switch is outside the grid-stride loop: the op is the same for every
 * thread, and each case is a loop of its own with nothing else inlined.
 * Launch: 1-D grid-stride, any grid and block size (ops/unary_gpu.c). Meaning
 * of a, b and mode per op: unary_math.h. An op code a kernel does not know
 * writes nothing (the launch never sends one). */
#include "em_kernel.h"
#include "unary_math.h"

#define EM_UN_LOOP(stmt)                                                                         \
  do {                                                                                           \
    em_i64 stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                                              \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += stride_) { stmt; }      \
  } while (0)
#define EM_UN_CASE(code, stmt) \
  case code: EM_UN_LOOP(stmt); break

EM_GLOBAL void em_unary_f32(int op, const float *x, float *y, em_i64 n, float a, float b, int mode) {
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, y[i] = em_un_neg_f32(x[i]));
  EM_UN_CASE(EM_UNARY_ABS, y[i] = em_un_abs_f32(x[i]));
  EM_UN_CASE(EM_UNARY_SIGN, y[i] = em_un_sign_f32(x[i]));
  EM_UN_CASE(EM_UNARY_EXP, y[i] = em_expf(x[i]));
  EM_UN_CASE(EM_UNARY_LOG, y[i] = em_logf(x[i]));
  EM_UN_CASE(EM_UNARY_SQRT, y[i] = em_sqrtf(x[i]));
  EM_UN_CASE(EM_UNARY_RSQRT, y[i] = em_rsqrtf(x[i]));
  EM_UN_CASE(EM_UNARY_RECIPROCAL, y[i] = em_un_reciprocal_f32(x[i]));
  EM_UN_CASE(EM_UNARY_SIGMOID, y[i] = em_sigmoidf(x[i]));
  EM_UN_CASE(EM_UNARY_TANH, y[i] = em_tanhf(x[i]));
  EM_UN_CASE(EM_UNARY_RELU, y[i] = em_un_relu_f32(x[i]));
  EM_UN_CASE(EM_UNARY_LEAKY_RELU, y[i] = em_un_leaky_relu_f32(x[i], a));
  EM_UN_CASE(EM_UNARY_ELU, y[i] = em_un_elu_f32(x[i], a));
  EM_UN_CASE(EM_UNARY_SELU, y[i] = em_un_selu_f32(x[i], a, b));
  EM_UN_CASE(EM_UNARY_SOFTPLUS, y[i] = em_softplusf(x[i]));
  EM_UN_CASE(EM_UNARY_SOFTSIGN, y[i] = em_un_softsign_f32(x[i]));
  EM_UN_CASE(EM_UNARY_HARD_SIGMOID, y[i] = em_un_hard_sigmoid_f32(x[i], a, b));
  case EM_UNARY_GELU:
    if (mode) EM_UN_LOOP(y[i] = em_un_gelu_tanh_f32(x[i]));
    else EM_UN_LOOP(y[i] = em_geluf(x[i]));
    break;
  EM_UN_CASE(EM_UNARY_SIN, y[i] = em_sinf(x[i]));
  EM_UN_CASE(EM_UNARY_COS, y[i] = em_cosf(x[i]));
  EM_UN_CASE(EM_UNARY_TAN, y[i] = em_tanf(x[i]));
  EM_UN_CASE(EM_UNARY_ATAN, y[i] = em_atanf(x[i]));
  EM_UN_CASE(EM_UNARY_ASINH, y[i] = em_asinhf(x[i]));
  EM_UN_CASE(EM_UNARY_FLOOR, y[i] = em_un_floor_f32(x[i]));
  EM_UN_CASE(EM_UNARY_CEIL, y[i] = em_un_ceil_f32(x[i]));
  EM_UN_CASE(EM_UNARY_ROUND, y[i] = em_un_round_f32(x[i]));
  EM_UN_CASE(EM_UNARY_CLIP, y[i] = em_un_clip_f32(x[i], a, b));
  EM_UN_CASE(EM_UNARY_POW_SCALAR, y[i] = em_powf(x[i], a));
  EM_UN_CASE(EM_UNARY_ERF, y[i] = em_erff(x[i]));
  EM_UN_CASE(EM_UNARY_ASIN, y[i] = em_asinf(x[i]));
  EM_UN_CASE(EM_UNARY_ACOS, y[i] = em_acosf(x[i]));
  EM_UN_CASE(EM_UNARY_SINH, y[i] = em_sinhf(x[i]));
  EM_UN_CASE(EM_UNARY_COSH, y[i] = em_coshf(x[i]));
  EM_UN_CASE(EM_UNARY_ACOSH, y[i] = em_acoshf(x[i]));
  EM_UN_CASE(EM_UNARY_ATANH, y[i] = em_atanhf(x[i]));
  EM_UN_CASE(EM_UNARY_LOG1P, y[i] = em_log1pf(x[i]));
  EM_UN_CASE(EM_UNARY_THRESHOLDED_RELU, y[i] = em_un_thresholded_relu_f32(x[i], a));
  EM_UN_CASE(EM_UNARY_HARD_SWISH, y[i] = em_un_hard_swish_f32(x[i]));
  default: break;
  }
}

/* dx = dy f'(x) from x, y = f(x) and dy. */
EM_GLOBAL void em_unary_grad_f32(int op, const float *x, const float *y, const float *dy, float *dx, em_i64 n,
                                 float a, float b, int mode) {
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, dx[i] = -dy[i]);
  EM_UN_CASE(EM_UNARY_ABS, dx[i] = em_ung_abs_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_EXP, dx[i] = dy[i] * y[i]);
  EM_UN_CASE(EM_UNARY_LOG, dx[i] = dy[i] / x[i]);
  EM_UN_CASE(EM_UNARY_SQRT, dx[i] = em_ung_sqrt_f32(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_RSQRT, dx[i] = em_ung_rsqrt_f32(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_RECIPROCAL, dx[i] = em_ung_reciprocal_f32(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_SIGMOID, dx[i] = em_ung_sigmoid_f32(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_TANH, dx[i] = em_ung_tanh_f32(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_RELU, dx[i] = em_ung_relu_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_LEAKY_RELU, dx[i] = em_ung_leaky_relu_f32(x[i], dy[i], a));
  EM_UN_CASE(EM_UNARY_ELU, dx[i] = em_ung_elu_f32(x[i], y[i], dy[i], a));
  EM_UN_CASE(EM_UNARY_SELU, dx[i] = em_ung_selu_f32(x[i], y[i], dy[i], a, b));
  EM_UN_CASE(EM_UNARY_SOFTPLUS, dx[i] = em_ung_softplus_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_SOFTSIGN, dx[i] = em_ung_softsign_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_HARD_SIGMOID, dx[i] = em_ung_hard_sigmoid_f32(x[i], dy[i], a, b));
  EM_UN_CASE(EM_UNARY_HARD_SWISH, dx[i] = em_ung_hard_swish_f32(x[i], dy[i]));
  case EM_UNARY_GELU:
    if (mode) EM_UN_LOOP(dx[i] = em_ung_gelu_tanh_f32(x[i], dy[i]));
    else EM_UN_LOOP(dx[i] = em_ung_gelu_f32(x[i], dy[i]));
    break;
  EM_UN_CASE(EM_UNARY_SIN, dx[i] = em_ung_sin_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_COS, dx[i] = em_ung_cos_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_TAN, dx[i] = em_ung_tan_f32(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ATAN, dx[i] = em_ung_atan_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ASINH, dx[i] = em_ung_asinh_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_CLIP, dx[i] = em_ung_clip_f32(x[i], dy[i], a, b));
  EM_UN_CASE(EM_UNARY_POW_SCALAR, dx[i] = em_ung_pow_scalar_f32(x[i], dy[i], a));
  EM_UN_CASE(EM_UNARY_ERF, dx[i] = em_ung_erf_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ASIN, dx[i] = em_ung_asin_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ACOS, dx[i] = em_ung_acos_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_SINH, dx[i] = em_ung_sinh_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_COSH, dx[i] = em_ung_cosh_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ACOSH, dx[i] = em_ung_acosh_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ATANH, dx[i] = em_ung_atanh_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_LOG1P, dx[i] = em_ung_log1p_f32(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_THRESHOLDED_RELU, dx[i] = em_ung_thresholded_relu_f32(x[i], dy[i], a));
  default: break;
  }
}

/* f64: the ops em_unary_f64_portable accepts. */
EM_GLOBAL void em_unary_f64(int op, const double *x, double *y, em_i64 n, double a, double b, int mode) {
  (void)mode;
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, y[i] = em_un_neg_f64(x[i]));
  EM_UN_CASE(EM_UNARY_ABS, y[i] = em_un_abs_f64(x[i]));
  EM_UN_CASE(EM_UNARY_SIGN, y[i] = em_un_sign_f64(x[i]));
  EM_UN_CASE(EM_UNARY_SQRT, y[i] = em_un_sqrt_f64(x[i]));
  EM_UN_CASE(EM_UNARY_RSQRT, y[i] = em_un_rsqrt_f64(x[i]));
  EM_UN_CASE(EM_UNARY_RECIPROCAL, y[i] = em_un_reciprocal_f64(x[i]));
  EM_UN_CASE(EM_UNARY_RELU, y[i] = em_un_relu_f64(x[i]));
  EM_UN_CASE(EM_UNARY_LEAKY_RELU, y[i] = em_un_leaky_relu_f64(x[i], a));
  EM_UN_CASE(EM_UNARY_SOFTSIGN, y[i] = em_un_softsign_f64(x[i]));
  EM_UN_CASE(EM_UNARY_HARD_SIGMOID, y[i] = em_un_hard_sigmoid_f64(x[i], a, b));
  EM_UN_CASE(EM_UNARY_FLOOR, y[i] = em_un_floor_f64(x[i]));
  EM_UN_CASE(EM_UNARY_CEIL, y[i] = em_un_ceil_f64(x[i]));
  EM_UN_CASE(EM_UNARY_ROUND, y[i] = em_un_round_f64(x[i]));
  EM_UN_CASE(EM_UNARY_CLIP, y[i] = em_un_clip_f64(x[i], a, b));
  EM_UN_CASE(EM_UNARY_THRESHOLDED_RELU, y[i] = em_un_thresholded_relu_f64(x[i], a));
  EM_UN_CASE(EM_UNARY_HARD_SWISH, y[i] = em_un_hard_swish_f64(x[i]));
  default: break;
  }
}

EM_GLOBAL void em_unary_grad_f64(int op, const double *x, const double *y, const double *dy, double *dx, em_i64 n,
                                 double a, double b, int mode) {
  (void)mode;
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, dx[i] = -dy[i]);
  EM_UN_CASE(EM_UNARY_ABS, dx[i] = em_ung_abs_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_EXP, dx[i] = dy[i] * y[i]);
  EM_UN_CASE(EM_UNARY_LOG, dx[i] = dy[i] / x[i]);
  EM_UN_CASE(EM_UNARY_SQRT, dx[i] = em_ung_sqrt_f64(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_RSQRT, dx[i] = em_ung_rsqrt_f64(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_RECIPROCAL, dx[i] = em_ung_reciprocal_f64(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_SIGMOID, dx[i] = em_ung_sigmoid_f64(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_TANH, dx[i] = em_ung_tanh_f64(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_RELU, dx[i] = em_ung_relu_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_LEAKY_RELU, dx[i] = em_ung_leaky_relu_f64(x[i], dy[i], a));
  EM_UN_CASE(EM_UNARY_ELU, dx[i] = em_ung_elu_f64(x[i], y[i], dy[i], a));
  EM_UN_CASE(EM_UNARY_SELU, dx[i] = em_ung_selu_f64(x[i], y[i], dy[i], a, b));
  EM_UN_CASE(EM_UNARY_SOFTSIGN, dx[i] = em_ung_softsign_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_HARD_SIGMOID, dx[i] = em_ung_hard_sigmoid_f64(x[i], dy[i], a, b));
  EM_UN_CASE(EM_UNARY_HARD_SWISH, dx[i] = em_ung_hard_swish_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_TAN, dx[i] = em_ung_tan_f64(y[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ATAN, dx[i] = em_ung_atan_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ASINH, dx[i] = em_ung_asinh_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_CLIP, dx[i] = em_ung_clip_f64(x[i], dy[i], a, b));
  EM_UN_CASE(EM_UNARY_ASIN, dx[i] = em_ung_asin_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ACOS, dx[i] = em_ung_acos_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ACOSH, dx[i] = em_ung_acosh_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_ATANH, dx[i] = em_ung_atanh_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_LOG1P, dx[i] = em_ung_log1p_f64(x[i], dy[i]));
  EM_UN_CASE(EM_UNARY_THRESHOLDED_RELU, dx[i] = em_ung_thresholded_relu_f64(x[i], dy[i], a));
  default: break;
  }
}

/* isnan / isinf: a bool byte per element. */
EM_GLOBAL void em_unary_bool_f32(int op, const float *x, unsigned char *y, em_i64 n, int mode) {
  if (op == EM_UNARY_ISNAN) EM_UN_LOOP(y[i] = em_un_isnan_f32(x[i]));
  else if (op == EM_UNARY_ISINF) EM_UN_LOOP(y[i] = em_un_isinf_f32(x[i], mode));
}

EM_GLOBAL void em_unary_bool_f64(int op, const double *x, unsigned char *y, em_i64 n, int mode) {
  if (op == EM_UNARY_ISNAN) EM_UN_LOOP(y[i] = em_un_isnan_f64(x[i]));
  else if (op == EM_UNARY_ISINF) EM_UN_LOOP(y[i] = em_un_isinf_f64(x[i], mode));
}

/* Integers: neg abs sign relu clip (a = min, b = max, already clamped to the type). */
EM_GLOBAL void em_unary_i32(int op, const int *x, int *y, em_i64 n, int a, int b) {
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, y[i] = em_un_neg_i32(x[i]));
  EM_UN_CASE(EM_UNARY_ABS, y[i] = em_un_abs_i32(x[i]));
  EM_UN_CASE(EM_UNARY_SIGN, y[i] = em_un_sign_i32(x[i]));
  EM_UN_CASE(EM_UNARY_RELU, y[i] = em_un_relu_i32(x[i]));
  EM_UN_CASE(EM_UNARY_CLIP, y[i] = em_un_clip_i32(x[i], a, b));
  default: break;
  }
}

EM_GLOBAL void em_unary_i64(int op, const em_i64 *x, em_i64 *y, em_i64 n, em_i64 a, em_i64 b) {
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, y[i] = em_un_neg_i64(x[i]));
  EM_UN_CASE(EM_UNARY_ABS, y[i] = em_un_abs_i64(x[i]));
  EM_UN_CASE(EM_UNARY_SIGN, y[i] = em_un_sign_i64(x[i]));
  EM_UN_CASE(EM_UNARY_RELU, y[i] = em_un_relu_i64(x[i]));
  EM_UN_CASE(EM_UNARY_CLIP, y[i] = em_un_clip_i64(x[i], a, b));
  default: break;
  }
}
