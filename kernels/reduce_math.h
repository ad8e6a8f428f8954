/* The reduce family's per-element arithmetic, written once for the CPU
 * (ops/reduce.c, which includes this header with a relative path) and for the
 * kernels (kernels/reduce_ops.cu). Both compile it without FMA contraction,
 * so every reduction gives the same bits on the CPU and on every GPU, in both
 * numeric modes (the summation order itself is described in ops/reduce.c).
 *
 * A reduction pass (RDM_PASS_*) is a transform of each element and a fold:
 * float inputs transform and fold in binary64 (f32 widens exactly), integer
 * inputs in 64-bit two's complement (sums and products wrap, as numpy's).
 * Transcendentals (log_sum_exp's exp and log, log_sum's log) are rdm_exp_d and
 * rdm_log_d below: em_math.h's binary64 kernels (relative error below 2^-50,
 * against libm's 2^-53) extended to the whole domain. libm cannot run on a
 * GPU and libdevice's bits differ from it, so both sides use these. Square
 * roots are IEEE (correctly rounded everywhere). */
#ifndef EMBER_REDUCE_MATH_H
#define EMBER_REDUCE_MATH_H

#include "em_math.h"

/* The reductions (ops/reduce.c's rd_fn has the same values). */
#define RDM_FN_SUM 0
#define RDM_FN_MEAN 1
#define RDM_FN_MAX 2
#define RDM_FN_MIN 3
#define RDM_FN_PROD 4
#define RDM_FN_LSE 5
#define RDM_FN_LOG_SUM 6
#define RDM_FN_L1 7
#define RDM_FN_L2 8
#define RDM_FN_SUMSQ 9

/* Passes: transform and fold of one sweep over the reduced elements. */
#define RDM_PASS_SUM 0    /* x, + */
#define RDM_PASS_ABS 1    /* |x|, + */
#define RDM_PASS_SQ 2     /* x*x, + */
#define RDM_PASS_EXP 3    /* exp(x - shift), + */
#define RDM_PASS_PROD 4   /* x, * */
#define RDM_PASS_MAX 5    /* x, max (NaN wins) */
#define RDM_PASS_MIN 6    /* x, min (NaN wins) */
#define RDM_PASS_ZEROS 7  /* x == 0 ? 1 : 0, + */
#define RDM_PASS_NZPROD 8 /* x == 0 ? 1 : x, * */

/* Where a finished float accumulator goes (kernels only; the CPU has sinks). */
#define RDM_DST_RAW 0   /* the binary64 accumulator itself */
#define RDM_DST_SHIFT 1 /* log_sum_exp's shift: the maximum if finite, else 0 */
#define RDM_DST_F32 2   /* rdm_finish, rounded to float */
#define RDM_DST_F64 3   /* rdm_finish */
/* ... and an integer one. */
#define RDM_DST_I32 4   /* the low 32 bits */
#define RDM_DST_I64 5

/* Fixed-order layout shared by the CPU plans and the kernels. */
#define RDM_LANES 8    /* a contiguous run is summed in 8 interleaved lanes, folded pairwise */
#define RDM_SEG 4096   /* elements per segment (lane sum) of a contiguous run */

EM_HD double rdm_inf_d(void) { return em_as_double(0x7ff0000000000000ull); }
EM_HD double rdm_nan_d(void) { return em_as_double(0x7ff8000000000000ull); }
EM_HD int rdm_isnan_d(double x) { return x != x; }
EM_HD double rdm_fabs_d(double x) { return em_as_double(em_as_u64(x) & 0x7fffffffffffffffull); }

/* e^t over the whole binary64 range: NaN stays NaN, +inf above 709.79, 0
 * below -745.2; t = k ln2 + r, |r| <= 0.35, e^r by Taylor to r^12 (as
 * em__exp_d), scaled by 2^k in two steps where 2^k alone is out of range
 * (subnormal results round twice: deterministic, within 1 ulp of the
 * subnormal grid). */
EM_HD double rdm_exp_d(double t) {
  if (t != t) return t;
  if (t > 709.782712893384) return rdm_inf_d();
  if (t < -745.2) return 0.0;
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
  int ki = (int)k;
  if (ki > 1000) return (p * em__pow2_d(ki - 100)) * em__pow2_d(100);
  if (ki < -1000) return (p * em__pow2_d(ki + 600)) * em__pow2_d(-600);
  return p * em__pow2_d(ki);
}

/* log x over the whole binary64 range: NaN and negatives give NaN, +-0
 * gives -inf, +inf stays; subnormals are scaled by 2^54 first (exact). */
EM_HD double rdm_log_d(double x) {
  if (x != x || x < 0.0) return rdm_nan_d();
  if (x == 0.0) return -rdm_inf_d();
  if (x == rdm_inf_d()) return x;
  if (x < 2.2250738585072014e-308) return em__log_d(x * 18014398509481984.0) - 54.0 * 0.69314718055994531;
  return em__log_d(x);
}

/* --------------------------------------------------- float passes (f64) --- */

EM_HD double rdm_init(int pass) {
  switch (pass) {
  case RDM_PASS_PROD:
  case RDM_PASS_NZPROD: return 1.0;
  case RDM_PASS_MAX: return -rdm_inf_d();
  case RDM_PASS_MIN: return rdm_inf_d();
  default: return 0.0;
  }
}

/* NaN wins (propagates), as in numpy. */
EM_HD double rdm_fmax(double a, double b) { return ((b > a) | (b != b)) ? b : a; }
EM_HD double rdm_fmin(double a, double b) { return ((b < a) | (b != b)) ? b : a; }

/* v: the element widened to binary64; sh: the output's shift (exp only). */
EM_HD double rdm_tr(int pass, double v, double sh) {
  switch (pass) {
  case RDM_PASS_ABS: return rdm_fabs_d(v);
  case RDM_PASS_SQ: return v * v;
  case RDM_PASS_EXP: return rdm_exp_d(v - sh);
  case RDM_PASS_ZEROS: return v == 0 ? 1.0 : 0.0;
  case RDM_PASS_NZPROD: return v == 0 ? 1.0 : v;
  default: return v;
  }
}

EM_HD double rdm_comb(int pass, double a, double b) {
  switch (pass) {
  case RDM_PASS_PROD:
  case RDM_PASS_NZPROD: return a * b;
  case RDM_PASS_MAX: return rdm_fmax(a, b);
  case RDM_PASS_MIN: return rdm_fmin(a, b);
  default: return a + b;
  }
}

/* A float reduction's output from its accumulator (n: reduced elements,
 * sh: log_sum_exp's shift). */
EM_HD double rdm_finish(int fn, double acc, double n, double sh) {
  switch (fn) {
  case RDM_FN_MEAN: return acc / n;
  case RDM_FN_L2: return em__sqrt_hw_d(acc);
  case RDM_FN_LOG_SUM: return rdm_log_d(acc);
  case RDM_FN_LSE: return sh + rdm_log_d(acc);
  default: return acc;
  }
}

/* log_sum_exp's shift from a maximum: itself when finite, else 0 (-inf:
 * all -inf or nothing; +inf and NaN propagate through the sum anyway). */
EM_HD double rdm_shift(double m) { return (m - m == 0.0) ? m : 0.0; }

/* ------------------------------------------------ integer passes (u64) --- */

EM_HD unsigned long long rdm_iinit(int pass) {
  switch (pass) {
  case RDM_PASS_PROD: return 1ull;
  case RDM_PASS_MAX: return 0x8000000000000000ull;
  case RDM_PASS_MIN: return 0x7fffffffffffffffull;
  default: return 0ull;
  }
}

EM_HD unsigned long long rdm_icomb(int pass, unsigned long long a, unsigned long long b) {
  switch (pass) {
  case RDM_PASS_PROD: return a * b;
  case RDM_PASS_MAX: return (long long)b > (long long)a ? b : a;
  case RDM_PASS_MIN: return (long long)b < (long long)a ? b : a;
  default: return a + b;
  }
}

/* ------------------------------------------------------------ gradient --- */

/* dx for one element of the element-wise derivatives (every fn but max and
 * min, which select): x the element, y and dy its output's value and
 * gradient, a1 and a2 the helpers (log_sum: the sum; prod: the count of zeros
 * and the product of the non-zero elements), inv_n = 1/n. */
EM_HD double rdm_grad(int fn, double x, double y, double dy, double a1, double a2, double inv_n) {
  switch (fn) {
  case RDM_FN_SUM: return dy;
  case RDM_FN_MEAN: return dy * inv_n;
  case RDM_FN_SUMSQ: return 2.0 * x * dy;
  case RDM_FN_L1: return x > 0 ? dy : x < 0 ? -dy : 0.0;
  case RDM_FN_L2: return y == 0 ? 0.0 : x / y * dy;
  case RDM_FN_LSE: return y == -rdm_inf_d() ? 0.0 : dy * rdm_exp_d(x - y);
  case RDM_FN_LOG_SUM: return dy / a1;
  case RDM_FN_PROD: {
    double g;
    if (a1 == 0) g = a2 / x;
    else if (a1 == 1 && x == 0) g = a2;
    else g = 0;
    return g * dy;
  }
  default: return 0.0;
  }
}

#endif
