/* The loss family's per-element arithmetic, written once for the CPU
 * (ops/loss.c in portable mode, which includes this header with a relative
 * path) and for the kernels (kernels/loss.cu). Both compile it without FMA
 * contraction, so a row gives the same bits on the CPU and on every GPU.
 *
 * The summation order both follow ("lanes"): a row of c elements is summed in
 * L = lm_lanes(c) lanes (the power of two >= c, at most LM_MAX_LANES); lane l
 * adds elements l, l + L, l + 2L, ... in that order, starting from 0.0; the
 * lanes are then folded as a tree: for w = L/2, L/4, ..., 1, lane l < w adds
 * lane l + w. A row's maximum is taken the same way. The kernels give each
 * lane a thread (a block of 256 threads holds 256 / L rows); the CPU runs the
 * lanes one after another. The order depends on c alone.
 *
 * Transcendentals: f32 takes em_math.h's em_expf (float argument, as the
 * CPU's fast path); f64 and every log take lm_exp_d / lm_log_d below:
 * em_math.h's binary64 kernels (relative error below 2^-50, against libm's
 * 2^-53) extended to their whole domain. libm cannot run on a GPU, and
 * libdevice's bits differ from it, so portable mode uses these on both
 * sides; the CPU's fast mode keeps libm. */
#ifndef EMBER_LOSS_MATH_H
#define EMBER_LOSS_MATH_H

#include "em_math.h"

#define LM_MAX_LANES 256

/* Lanes for a row of c elements: the power of two >= c, at most LM_MAX_LANES. */
EM_HD int lm_lanes(long long c) {
  int l = 1;
  while (l < LM_MAX_LANES && l < c) l *= 2;
  return l;
}

EM_HD double lm_inf_d(void) { return em_as_double(0x7ff0000000000000ull); }
EM_HD double lm_nan_d(void) { return em_as_double(0x7ff8000000000000ull); }

/* A row maximum's step: b wins when larger or NaN (a NaN anywhere gives NaN). */
EM_HD float lm_max_f32(float a, float b) { return b > a || b != b ? b : a; }
EM_HD double lm_max_f64(double a, double b) { return b > a || b != b ? b : a; }

/* e^t for every double t: em__exp_d's |t| <= 700 extended. Beyond 700 the
 * power of two is applied in two halves, so subnormal results round twice
 * (the same way on both sides). */
EM_HD double lm_exp_d(double t) {
  if (t != t) return t;
  if (t > 709.79) return lm_inf_d();
  if (t < -745.2) return 0.0;
  if (t >= -700.0 && t <= 700.0) return em__exp_d(t);
  /* t = k ln2 + r as in em__exp_d, with 2^k split so each half stays a normal power. */
  double k = em__rint_d(t * EM__INVLN2_D);
  double r = (t - k * EM__LN2_HI_D) - k * EM__LN2_LO_D;
  int ki = (int)k, k1 = ki / 2;
  return em__exp_d(r) * em__pow2_d(k1) * em__pow2_d(ki - k1);
}

/* log x for every double x: em__log_d (positive normal x) extended to 0,
 * negatives, subnormals, infinity and NaN. */
EM_HD double lm_log_d(double x) {
  if (x != x) return x;
  if (x < 0.0) return lm_nan_d();
  if (x == 0.0) return -lm_inf_d();
  if (x == lm_inf_d()) return x;
  if (x < 2.2250738585072014e-308) return em__log_d(x * 18014398509481984.0) - 54.0 * EM__LN2_D; /* 2^54 */
  return em__log_d(x);
}

/* e^(x - mx), the softmax numerator, in double. */
EM_HD double lm_exp_shift_f32(float x, float mx) { return (double)em_expf(x - mx); }
EM_HD double lm_exp_shift_f64(double x, double mx) { return lm_exp_d(x - mx); }
/* e^y of a log-probability (log_softmax's gradient). */
EM_HD double lm_exp_f32(float y) { return (double)em_expf(y); }
EM_HD double lm_exp_f64(double y) { return lm_exp_d(y); }

/* One softmax output: e^(x - mx) / sum, or log_softmax (x - mx) - log(sum). */
EM_HD double lm_softmax_out(double e, double x, double mx, double sum, double lse, int log_out) {
  return log_out ? (x - mx) - lse : e / sum;
}

/* softmax's gradient y (dy - dot); log_softmax's dy - e^y dot (ey = e^y). */
EM_HD double lm_softmax_grad_out(double y, double dy, double ey, double dot, int log_out) {
  return log_out ? dy - ey * dot : y * (dy - dot);
}

/* Cross entropy's logits gradient for one element, given e = e^(x - mx), the
 * row's sum and (sparse) the sum without the label's element:
 *   g == 0                 -> 0
 *   infinite maximum       -> (e tsum - t) g   (NaN or zeros, as the formula says)
 *   sparse, the label      -> -(others / sum) g  (p - 1 without the cancellation)
 *   otherwise              -> e (tsum g / sum) - t g */
EM_HD double lm_ce_grad_out(double e, double t, double tsum, double g, double sum, double others, int inf_max,
                            int is_label) {
  if (g == 0.0) return 0.0;
  if (inf_max) return (e * tsum - t) * g;
  if (is_label) return -(others / sum) * g;
  return e * (tsum * g / sum) - t * g;
}

/* binary cross entropy: logs clamped below at -100 (PyTorch's BCELoss). */
#define LM_BCE_LOG_FLOOR (-100.0)
#define LM_BCE_EPS 1e-12
EM_HD double lm_clamped_log(double v) {
  double l = lm_log_d(v);
  return l < LM_BCE_LOG_FLOOR ? LM_BCE_LOG_FLOOR : l;
}
EM_HD double lm_bce(double p, double t) { return -(t * lm_clamped_log(p) + (1 - t) * lm_clamped_log(1 - p)); }
/* which 0: d/dp = g (p - t) / max(p (1 - p), eps); which 1: d/dt = g (log(1-p) - log p). */
EM_HD double lm_bce_grad(double p, double t, double g, int which) {
  if (which == 0) {
    double den = p * (1 - p);
    return g * (p - t) / (den > LM_BCE_EPS ? den : LM_BCE_EPS);
  }
  return g * (lm_clamped_log(1 - p) - lm_clamped_log(p));
}

/* A tensor seen as [outer, c, inner] around the class axis: row r starts here and steps by inner. */
EM_HD long long lm_row_base(long long row, long long c, long long inner) {
  return (row / inner) * c * inner + row % inner;
}

#endif
