/* The unary op family (ops/unary.c) on the GPU: one kernel per dtype with
 * the op code as a parameter (EM_UNARY_*, unary_math.h), and one for the
 * fused gradient _unary_grad. Each element goes through the function of
 * unary_math.h that the CPU loops call, so the bits are the CPU's. The
 * switch is outside the grid-stride loop: the op is the same for every
 * thread, and each case is a loop of its own with nothing else inlined.
 * Launch: 1-D grid-stride over tiles of 4 * block elements (EM_UN_TILES), any
 * grid and block size (ops/unary_gpu.c: em_ops_launch_wide). Meaning
 * of a, b and mode per op: unary_math.h. An op code a kernel does not know
 * writes nothing (the launch never sends one). */
#include "em_kernel.h"
#include "unary_math.h"

/* The loop over a block's tiles of EM_UN_U * EM_BDIM_X contiguous elements,
 * grid-stride: thread t of a block takes elements t, t + B, t + 2B, t + 3B
 * of each tile (B = EM_BDIM_X: every load and store of a warp is
 * coalesced). It reads its four elements into registers before it computes
 * and stores any of them, so four loads per thread are in flight at once:
 * one per resident thread is far from what HBM needs to stream at full
 * speed, and the compiler cannot hoist a later load above an earlier store
 * on its own (the output may alias the input: ops run in place). The last
 * tile, partly past n, goes one element at a time. un_t_ is the element
 * type (a typedef in each kernel); EXPR computes an element from X_ = x[i]
 * (and, for gradients, Y_ = y[i], G_ = dy[i]). */
#define EM_UN_U 4
#define EM_UN_TILES(BODY4, BODY1)                                                                \
  do {                                                                                           \
    const em_i64 bd_ = EM_BDIM_X, step_ = bd_ * EM_UN_U * EM_GDIM_X;                             \
    em_i64 i_ = (em_i64)EM_BID_X * bd_ * EM_UN_U + EM_TID_X;                                     \
    for (; i_ + 3 * bd_ < n; i_ += step_) {                                                      \
      const em_i64 i0_ = i_, i1_ = i_ + bd_, i2_ = i_ + 2 * bd_, i3_ = i_ + 3 * bd_;             \
      BODY4                                                                                      \
    }                                                                                            \
    for (; i_ < n; i_ += bd_) {                                                                  \
      const em_i64 i0_ = i_;                                                                     \
      BODY1                                                                                      \
    }                                                                                            \
  } while (0)
/* Slots 0..3 (or slot 0) of array A into registers V0_ ... V3_. */
#define EM_UN_LD1(A, V) const un_t_ V##0_ = A[i0_];
#define EM_UN_LD4(A, V) \
  const un_t_ V##0_ = A[i0_]; const un_t_ V##1_ = A[i1_]; const un_t_ V##2_ = A[i2_]; const un_t_ V##3_ = A[i3_];
/* y[i] = EXPR(X_). */
#define EM_UN_PUT(k, EXPR)                                                                       \
  {                                                                                              \
    const un_t_ X_ = x##k##_;                                                                    \
    y[i##k##_] = (EXPR);                                                                         \
  }
#define EM_UN_LOOP(EXPR)                                                                         \
  EM_UN_TILES(                                                                                   \
      {                                                                                          \
        EM_UN_LD4(x, x)                      \
        EM_UN_PUT(0, EXPR) EM_UN_PUT(1, EXPR) EM_UN_PUT(2, EXPR) EM_UN_PUT(3, EXPR)              \
      },                                                                                         \
      {                                                                                          \
        EM_UN_LD1(x, x)                                                                \
        EM_UN_PUT(0, EXPR)                                                                       \
      })
#define EM_UN_CASE(code, EXPR) \
  case code: EM_UN_LOOP(EXPR); break

/* Gradients: dx[i] = EXPR(X_, Y_, G_); the loads an EXPR does not use are
 * dead code, which every compiler drops. */
#define EM_UNG_PUT(k, EXPR)                                                                      \
  {                                                                                              \
    const un_t_ X_ = x##k##_, Y_ = y##k##_, G_ = g##k##_;                                        \
    (void)X_, (void)Y_, (void)G_;                                                                \
    dx[i##k##_] = (EXPR);                                                                        \
  }
#define EM_UNG_LOOP(EXPR)                                                                        \
  EM_UN_TILES(                                                                                   \
      {                                                                                          \
        EM_UN_LD4(x, x)                      \
        EM_UN_LD4(y, y)                      \
        EM_UN_LD4(dy, g)                  \
        EM_UNG_PUT(0, EXPR) EM_UNG_PUT(1, EXPR) EM_UNG_PUT(2, EXPR) EM_UNG_PUT(3, EXPR)          \
      },                                                                                         \
      {                                                                                          \
        EM_UN_LD1(x, x) EM_UN_LD1(y, y) EM_UN_LD1(dy, g)                                   \
        EM_UNG_PUT(0, EXPR)                                                                      \
      })
#define EM_UNG_CASE(code, EXPR) \
  case code: EM_UNG_LOOP(EXPR); break

/* The cheap and the common functions; em_unary_f32_ext has those that need
 * more than 32 registers a thread (gelu, tan, pow, the inverse trigonometric
 * and hyperbolic functions): one kernel takes the registers of its costliest
 * case, and above 32 a 256-thread block no longer fits 8 times on an SM
 * (64 K registers), which would cost every op here a quarter of its loads
 * in flight. ops/unary_gpu.c (em_unary_f32_ext_op) picks the kernel. */
EM_GLOBAL void em_unary_f32(int op, const float *x, float *y, em_i64 n, float a, float b, int mode) {
  typedef float un_t_;
  (void)mode;
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, em_un_neg_f32(X_));
  EM_UN_CASE(EM_UNARY_ABS, em_un_abs_f32(X_));
  EM_UN_CASE(EM_UNARY_SIGN, em_un_sign_f32(X_));
  EM_UN_CASE(EM_UNARY_EXP, em_expf(X_));
  EM_UN_CASE(EM_UNARY_LOG, em_logf(X_));
  EM_UN_CASE(EM_UNARY_SQRT, em_sqrtf(X_));
  EM_UN_CASE(EM_UNARY_RSQRT, em_rsqrtf(X_));
  EM_UN_CASE(EM_UNARY_RECIPROCAL, em_un_reciprocal_f32(X_));
  EM_UN_CASE(EM_UNARY_SIGMOID, em_sigmoidf(X_));
  EM_UN_CASE(EM_UNARY_TANH, em_tanhf(X_));
  EM_UN_CASE(EM_UNARY_RELU, em_un_relu_f32(X_));
  EM_UN_CASE(EM_UNARY_LEAKY_RELU, em_un_leaky_relu_f32(X_, a));
  EM_UN_CASE(EM_UNARY_ELU, em_un_elu_f32(X_, a));
  EM_UN_CASE(EM_UNARY_SELU, em_un_selu_f32(X_, a, b));
  EM_UN_CASE(EM_UNARY_SOFTPLUS, em_softplusf(X_));
  EM_UN_CASE(EM_UNARY_SOFTSIGN, em_un_softsign_f32(X_));
  EM_UN_CASE(EM_UNARY_HARD_SIGMOID, em_un_hard_sigmoid_f32(X_, a, b));
  EM_UN_CASE(EM_UNARY_SIN, em_sinf(X_));
  EM_UN_CASE(EM_UNARY_COS, em_cosf(X_));
  EM_UN_CASE(EM_UNARY_FLOOR, em_un_floor_f32(X_));
  EM_UN_CASE(EM_UNARY_CEIL, em_un_ceil_f32(X_));
  EM_UN_CASE(EM_UNARY_ROUND, em_un_round_f32(X_));
  EM_UN_CASE(EM_UNARY_CLIP, em_un_clip_f32(X_, a, b));
  EM_UN_CASE(EM_UNARY_ERF, em_erff(X_));
  EM_UN_CASE(EM_UNARY_SINH, em_sinhf(X_));
  EM_UN_CASE(EM_UNARY_COSH, em_coshf(X_));
  EM_UN_CASE(EM_UNARY_LOG1P, em_log1pf(X_));
  EM_UN_CASE(EM_UNARY_THRESHOLDED_RELU, em_un_thresholded_relu_f32(X_, a));
  EM_UN_CASE(EM_UNARY_HARD_SWISH, em_un_hard_swish_f32(X_));
  default: break;
  }
}

/* The f32 functions that need more than 32 registers (see em_unary_f32). */
EM_GLOBAL void em_unary_f32_ext(int op, const float *x, float *y, em_i64 n, float a, float b, int mode) {
  typedef float un_t_;
  (void)b;
  switch (op) {
  case EM_UNARY_GELU:
    if (mode) EM_UN_LOOP(em_un_gelu_tanh_f32(X_));
    else EM_UN_LOOP(em_geluf(X_));
    break;
  EM_UN_CASE(EM_UNARY_TAN, em_tanf(X_));
  EM_UN_CASE(EM_UNARY_ATAN, em_atanf(X_));
  EM_UN_CASE(EM_UNARY_ASINH, em_asinhf(X_));
  EM_UN_CASE(EM_UNARY_POW_SCALAR, em_powf(X_, a));
  EM_UN_CASE(EM_UNARY_ASIN, em_asinf(X_));
  EM_UN_CASE(EM_UNARY_ACOS, em_acosf(X_));
  EM_UN_CASE(EM_UNARY_ACOSH, em_acoshf(X_));
  EM_UN_CASE(EM_UNARY_ATANH, em_atanhf(X_));
  default: break;
  }
}

/* dx = dy f'(x) from x, y = f(x) and dy. */
EM_GLOBAL void em_unary_grad_f32(int op, const float *x, const float *y, const float *dy, float *dx, em_i64 n,
                                 float a, float b, int mode) {
  typedef float un_t_;
  switch (op) {
  EM_UNG_CASE(EM_UNARY_NEG, -G_);
  EM_UNG_CASE(EM_UNARY_ABS, em_ung_abs_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_EXP, G_ * Y_);
  EM_UNG_CASE(EM_UNARY_LOG, G_ / X_);
  EM_UNG_CASE(EM_UNARY_SQRT, em_ung_sqrt_f32(Y_, G_));
  EM_UNG_CASE(EM_UNARY_RSQRT, em_ung_rsqrt_f32(Y_, G_));
  EM_UNG_CASE(EM_UNARY_RECIPROCAL, em_ung_reciprocal_f32(Y_, G_));
  EM_UNG_CASE(EM_UNARY_SIGMOID, em_ung_sigmoid_f32(Y_, G_));
  EM_UNG_CASE(EM_UNARY_TANH, em_ung_tanh_f32(Y_, G_));
  EM_UNG_CASE(EM_UNARY_RELU, em_ung_relu_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_LEAKY_RELU, em_ung_leaky_relu_f32(X_, G_, a));
  EM_UNG_CASE(EM_UNARY_ELU, em_ung_elu_f32(X_, Y_, G_, a));
  EM_UNG_CASE(EM_UNARY_SELU, em_ung_selu_f32(X_, Y_, G_, a, b));
  EM_UNG_CASE(EM_UNARY_SOFTPLUS, em_ung_softplus_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_SOFTSIGN, em_ung_softsign_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_HARD_SIGMOID, em_ung_hard_sigmoid_f32(X_, G_, a, b));
  EM_UNG_CASE(EM_UNARY_HARD_SWISH, em_ung_hard_swish_f32(X_, G_));
  case EM_UNARY_GELU:
    if (mode) EM_UNG_LOOP(em_ung_gelu_tanh_f32(X_, G_));
    else EM_UNG_LOOP(em_ung_gelu_f32(X_, G_));
    break;
  EM_UNG_CASE(EM_UNARY_SIN, em_ung_sin_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_COS, em_ung_cos_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_TAN, em_ung_tan_f32(Y_, G_));
  EM_UNG_CASE(EM_UNARY_ATAN, em_ung_atan_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_ASINH, em_ung_asinh_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_CLIP, em_ung_clip_f32(X_, G_, a, b));
  EM_UNG_CASE(EM_UNARY_POW_SCALAR, em_ung_pow_scalar_f32(X_, G_, a));
  EM_UNG_CASE(EM_UNARY_ERF, em_ung_erf_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_ASIN, em_ung_asin_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_ACOS, em_ung_acos_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_SINH, em_ung_sinh_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_COSH, em_ung_cosh_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_ACOSH, em_ung_acosh_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_ATANH, em_ung_atanh_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_LOG1P, em_ung_log1p_f32(X_, G_));
  EM_UNG_CASE(EM_UNARY_THRESHOLDED_RELU, em_ung_thresholded_relu_f32(X_, G_, a));
  default: break;
  }
}

/* f64: the ops em_unary_f64_portable accepts. */
EM_GLOBAL void em_unary_f64(int op, const double *x, double *y, em_i64 n, double a, double b, int mode) {
  typedef double un_t_;
  (void)mode;
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, em_un_neg_f64(X_));
  EM_UN_CASE(EM_UNARY_ABS, em_un_abs_f64(X_));
  EM_UN_CASE(EM_UNARY_SIGN, em_un_sign_f64(X_));
  EM_UN_CASE(EM_UNARY_SQRT, em_un_sqrt_f64(X_));
  EM_UN_CASE(EM_UNARY_RSQRT, em_un_rsqrt_f64(X_));
  EM_UN_CASE(EM_UNARY_RECIPROCAL, em_un_reciprocal_f64(X_));
  EM_UN_CASE(EM_UNARY_RELU, em_un_relu_f64(X_));
  EM_UN_CASE(EM_UNARY_LEAKY_RELU, em_un_leaky_relu_f64(X_, a));
  EM_UN_CASE(EM_UNARY_SOFTSIGN, em_un_softsign_f64(X_));
  EM_UN_CASE(EM_UNARY_HARD_SIGMOID, em_un_hard_sigmoid_f64(X_, a, b));
  EM_UN_CASE(EM_UNARY_FLOOR, em_un_floor_f64(X_));
  EM_UN_CASE(EM_UNARY_CEIL, em_un_ceil_f64(X_));
  EM_UN_CASE(EM_UNARY_ROUND, em_un_round_f64(X_));
  EM_UN_CASE(EM_UNARY_CLIP, em_un_clip_f64(X_, a, b));
  EM_UN_CASE(EM_UNARY_THRESHOLDED_RELU, em_un_thresholded_relu_f64(X_, a));
  EM_UN_CASE(EM_UNARY_HARD_SWISH, em_un_hard_swish_f64(X_));
  default: break;
  }
}

EM_GLOBAL void em_unary_grad_f64(int op, const double *x, const double *y, const double *dy, double *dx, em_i64 n,
                                 double a, double b, int mode) {
  typedef double un_t_;
  (void)mode;
  switch (op) {
  EM_UNG_CASE(EM_UNARY_NEG, -G_);
  EM_UNG_CASE(EM_UNARY_ABS, em_ung_abs_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_EXP, G_ * Y_);
  EM_UNG_CASE(EM_UNARY_LOG, G_ / X_);
  EM_UNG_CASE(EM_UNARY_SQRT, em_ung_sqrt_f64(Y_, G_));
  EM_UNG_CASE(EM_UNARY_RSQRT, em_ung_rsqrt_f64(Y_, G_));
  EM_UNG_CASE(EM_UNARY_RECIPROCAL, em_ung_reciprocal_f64(Y_, G_));
  EM_UNG_CASE(EM_UNARY_SIGMOID, em_ung_sigmoid_f64(Y_, G_));
  EM_UNG_CASE(EM_UNARY_TANH, em_ung_tanh_f64(Y_, G_));
  EM_UNG_CASE(EM_UNARY_RELU, em_ung_relu_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_LEAKY_RELU, em_ung_leaky_relu_f64(X_, G_, a));
  EM_UNG_CASE(EM_UNARY_ELU, em_ung_elu_f64(X_, Y_, G_, a));
  EM_UNG_CASE(EM_UNARY_SELU, em_ung_selu_f64(X_, Y_, G_, a, b));
  EM_UNG_CASE(EM_UNARY_SOFTSIGN, em_ung_softsign_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_HARD_SIGMOID, em_ung_hard_sigmoid_f64(X_, G_, a, b));
  EM_UNG_CASE(EM_UNARY_HARD_SWISH, em_ung_hard_swish_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_TAN, em_ung_tan_f64(Y_, G_));
  EM_UNG_CASE(EM_UNARY_ATAN, em_ung_atan_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_ASINH, em_ung_asinh_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_CLIP, em_ung_clip_f64(X_, G_, a, b));
  EM_UNG_CASE(EM_UNARY_ASIN, em_ung_asin_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_ACOS, em_ung_acos_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_ACOSH, em_ung_acosh_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_ATANH, em_ung_atanh_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_LOG1P, em_ung_log1p_f64(X_, G_));
  EM_UNG_CASE(EM_UNARY_THRESHOLDED_RELU, em_ung_thresholded_relu_f64(X_, G_, a));
  default: break;
  }
}

/* isnan / isinf: a bool byte per element. */
EM_GLOBAL void em_unary_bool_f32(int op, const float *x, unsigned char *y, em_i64 n, int mode) {
  typedef float un_t_;
  if (op == EM_UNARY_ISNAN) EM_UN_LOOP(em_un_isnan_f32(X_));
  else if (op == EM_UNARY_ISINF) EM_UN_LOOP(em_un_isinf_f32(X_, mode));
}

EM_GLOBAL void em_unary_bool_f64(int op, const double *x, unsigned char *y, em_i64 n, int mode) {
  typedef double un_t_;
  if (op == EM_UNARY_ISNAN) EM_UN_LOOP(em_un_isnan_f64(X_));
  else if (op == EM_UNARY_ISINF) EM_UN_LOOP(em_un_isinf_f64(X_, mode));
}

/* Integers: neg abs sign relu clip (a = min, b = max, already clamped to the type). */
EM_GLOBAL void em_unary_i32(int op, const int *x, int *y, em_i64 n, int a, int b) {
  typedef int un_t_;
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, em_un_neg_i32(X_));
  EM_UN_CASE(EM_UNARY_ABS, em_un_abs_i32(X_));
  EM_UN_CASE(EM_UNARY_SIGN, em_un_sign_i32(X_));
  EM_UN_CASE(EM_UNARY_RELU, em_un_relu_i32(X_));
  EM_UN_CASE(EM_UNARY_CLIP, em_un_clip_i32(X_, a, b));
  default: break;
  }
}

EM_GLOBAL void em_unary_i64(int op, const em_i64 *x, em_i64 *y, em_i64 n, em_i64 a, em_i64 b) {
  typedef em_i64 un_t_;
  switch (op) {
  EM_UN_CASE(EM_UNARY_NEG, em_un_neg_i64(X_));
  EM_UN_CASE(EM_UNARY_ABS, em_un_abs_i64(X_));
  EM_UN_CASE(EM_UNARY_SIGN, em_un_sign_i64(X_));
  EM_UN_CASE(EM_UNARY_RELU, em_un_relu_i64(X_));
  EM_UN_CASE(EM_UNARY_CLIP, em_un_clip_i64(X_, a, b));
  default: break;
  }
}
