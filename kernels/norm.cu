/* The norm family's kernels (ops/norm.c, launched by ops/norm_gpu.c): batch,
 * layer and instance normalisation, local response normalisation and
 * dropout, forward and backward, f32 and f64.
 *
 * Every sum follows ops/norm.c's CPU order exactly, which the shapes alone fix:
 *  - row sums (x viewed as [rows, inner]) run in one thread per row, elements
 *    in ascending order, in double from 0.0;
 *  - per-group folds (batch norm pools the rows (n, c) of a channel) run in one
 *    thread per group, rows in ascending order from 0.0;
 *  - layer norm's parameter gradients run one thread per column, rows in
 *    ascending order; LRN's window sums one thread per element, channels in
 *    ascending order.
 * Everything else is elementwise. So the CPU (either mode) and every GPU give
 * the same bits, LRN's power aside (kernels/norm_math.h: the CPU's fast mode
 * uses libm's pow, portable mode nm_pow_d as here). All kernels are 1-D
 * grid-stride loops over their threads' items (any grid). Statistics are
 * double arrays in device scratch. */
#include "em_kernel.h"
#include "norm_math.h"

#define NK_FOR(i, n) \
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < (n); i += (em_i64)EM_GDIM_X * EM_BDIM_X)

/* grp[k] = sum of row[r] over the rows r of group k in ascending order, divided by count when divide
 * (0 when count is 0). per_channel: rows r = i c + k (i < n), else group k is row k. */
EM_GLOBAL void em_norm_fold(const double *row, em_i64 n, em_i64 c, int per_channel, int divide, double count,
                            double *grp) {
  em_i64 groups = per_channel ? c : n * c;
  NK_FOR(k, groups) {
    double s = 0.0;
    if (per_channel)
      for (em_i64 i = 0; i < n; i++) s = s + row[i * c + k];
    else
      s = s + row[k];
    grp[k] = !divide ? s : count > 0 ? s / count : 0.0;
  }
}

/* invstd[k] = 1 / sqrt(var[k] + eps). */
EM_GLOBAL void em_norm_invstd(const double *var, em_i64 groups, double eps, double *invstd) {
  NK_FOR(k, groups) invstd[k] = 1.0 / em__sqrt_hw_d(var[k] + eps);
}

/* The group of row r of [n, c] rows. */
EM_DEVICE em_i64 nk_group(em_i64 r, em_i64 c, int per_channel) { return per_channel ? r % c : r; }

#define NORM_KERNELS(T, S)                                                                                        \
  /* out[r] = sum of row r of x [rows, inner]. */                                                               \
  EM_GLOBAL void em_norm_row_sums_##S(const T *x, em_i64 rows, em_i64 inner, double *out) {                      \
    NK_FOR(r, rows) {                                                                                           \
      const T *p = x + r * inner;                                                                               \
      double s = 0.0;                                                                                           \
      for (em_i64 i = 0; i < inner; i++) s = s + (double)p[i];                                                  \
      out[r] = s;                                                                                               \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* out[r] = sum over row r of (x - mean[group(r)])^2; rows are [n, c] (layer norm: n 1, per_channel 0). */   \
  EM_GLOBAL void em_norm_row_sqdev_##S(const T *x, em_i64 n, em_i64 c, em_i64 inner, int per_channel,           \
                                       const double *mean, double *out) {                                       \
    NK_FOR(r, n * c) {                                                                                          \
      const T *p = x + r * inner;                                                                               \
      double s = 0.0, m = mean[nk_group(r, c, per_channel)];                                                    \
      for (em_i64 i = 0; i < inner; i++) s = s + ((double)p[i] - m) * ((double)p[i] - m);                      \
      out[r] = s;                                                                                               \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Batch norm inference: the running statistics as mean, var and invstd. */                                  \
  EM_GLOBAL void em_norm_running_stats_##S(const T *rmean, const T *rvar, em_i64 c, double eps, double *mean,   \
                                           double *var, double *invstd) {                                       \
    NK_FOR(k, c) {                                                                                              \
      mean[k] = (double)rmean[k];                                                                               \
      var[k] = (double)rvar[k];                                                                                 \
      invstd[k] = 1.0 / em__sqrt_hw_d(var[k] + eps);                                                            \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* y = (x - mean) * (invstd scale[ch]) + bias[ch] on rows (n, c) of inner elements, in T. */                  \
  EM_GLOBAL void em_norm_nc_apply_##S(const T *x, T *y, em_i64 n, em_i64 c, em_i64 inner, int per_channel,      \
                                      const double *mean, const double *invstd, const T *scale, const T *bias) {  \
    NK_FOR(e, n * c * inner) {                                                                                  \
      em_i64 r = e / inner, ch = r % c, k = nk_group(r, c, per_channel);                                        \
      const T m = (T)mean[k], kk = (T)(invstd[k] * (double)scale[ch]), bb = bias[ch];                           \
      y[e] = (x[e] - m) * kk + bb;                                                                              \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Batch norm training: running = running momentum + batch (1 - momentum), the variance unbiased. */         \
  EM_GLOBAL void em_norm_bn_update_##S(T *rmean, T *rvar, const double *mean, const double *var, em_i64 c,      \
                                       double mom, double unbias) {                                             \
    NK_FOR(k, c) {                                                                                              \
      rmean[k] = (T)((double)rmean[k] * mom + mean[k] * (1 - mom));                                             \
      rvar[k] = (T)((double)rvar[k] * mom + var[k] * unbias * (1 - mom));                                       \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* sdy[r] = sum of dy over row r; sdyx[r] = sum of dy (x - mean[group(r)]). */                                \
  EM_GLOBAL void em_norm_row_grad_sums_##S(const T *x, const T *dy, em_i64 n, em_i64 c, em_i64 inner,           \
                                           int per_channel, const double *mean, double *sdy, double *sdyx) {    \
    NK_FOR(r, n * c) {                                                                                          \
      const T *px = x + r * inner, *pd = dy + r * inner;                                                        \
      double s0 = 0.0, s1 = 0.0, m = mean[nk_group(r, c, per_channel)];                                         \
      for (em_i64 i = 0; i < inner; i++) {                                                                      \
        s0 = s0 + (double)pd[i];                                                                                \
        s1 = s1 + (double)pd[i] * ((double)px[i] - m);                                                          \
      }                                                                                                         \
      sdy[r] = s0;                                                                                              \
      sdyx[r] = s1;                                                                                             \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* dx = A dy + B (x - mean) + D per row, A = scale invstd, B and D through the batch statistics when        \
   * through (count values per group). */                                                                      \
  EM_GLOBAL void em_norm_nc_grad_##S(const T *x, const T *dy, T *dx, em_i64 n, em_i64 c, em_i64 inner,          \
                                     int per_channel, const double *mean, const double *invstd, const T *scale, \
                                     const double *gdy, const double *gdyx, int through, double count) {        \
    NK_FOR(e, n * c * inner) {                                                                                  \
      em_i64 r = e / inner, ch = r % c, k = nk_group(r, c, per_channel);                                        \
      double is = invstd[k], a = (double)scale[ch] * is;                                                        \
      double B = through && count > 0 ? -a * is * is * gdyx[k] / count : 0;                                     \
      double D = through && count > 0 ? -a * gdy[k] / count : 0;                                                \
      const T m = (T)mean[k], aa = (T)a, bb = (T)B, dd = (T)D;                                                  \
      dx[e] = aa * dy[e] + bb * (x[e] - m) + dd;                                                                \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* dscale[ch] = sum sdyx[r] invstd[group(r)], dbias[ch] = sum sdy[r] over the rows of channel ch, rows       \
   * ascending. */                                                                                              \
  EM_GLOBAL void em_norm_nc_param_grads_##S(const double *sdy, const double *sdyx, const double *invstd,        \
                                            em_i64 n, em_i64 c, int per_channel, T *dscale, T *dbias) {         \
    NK_FOR(ch, c) {                                                                                             \
      double cdy = 0.0, cdyx = 0.0;                                                                             \
      for (em_i64 i = 0; i < n; i++) {                                                                          \
        em_i64 r = i * c + ch;                                                                                  \
        cdy = cdy + sdy[r];                                                                                     \
        cdyx = cdyx + sdyx[r] * invstd[nk_group(r, c, per_channel)];                                            \
      }                                                                                                         \
      dscale[ch] = (T)cdyx;                                                                                     \
      dbias[ch] = (T)cdy;                                                                                       \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Layer norm: y[r, j] = (x - mean[r]) invstd[r] scale[j] + bias[j] (has_bias 0: no bias). */                \
  EM_GLOBAL void em_norm_ln_apply_##S(const T *x, const T *scale, const T *bias, int has_bias, T *y, em_i64 rows, \
                                      em_i64 m, const double *mean, const double *invstd) {                     \
    NK_FOR(e, rows * m) {                                                                                       \
      em_i64 r = e / m, j = e % m;                                                                              \
      const T mu = (T)mean[r], is = (T)invstd[r];                                                               \
      y[e] = has_bias ? (x[e] - mu) * is * scale[j] + bias[j] : (x[e] - mu) * is * scale[j];                    \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Layer norm dx, first pass: per row s1 = sum dy scale, s2 = sum dy scale (x - mean) invstd. */              \
  EM_GLOBAL void em_norm_ln_grad_sums_##S(const T *x, const T *scale, const T *dy, em_i64 rows, em_i64 m,       \
                                          const double *mean, const double *invstd, double *s1, double *s2) {    \
    NK_FOR(r, rows) {                                                                                           \
      const T *px = x + r * m, *pd = dy + r * m;                                                                \
      double mu = mean[r], is = invstd[r], a = 0.0, b = 0.0;                                                    \
      for (em_i64 j = 0; j < m; j++) {                                                                          \
        double g = (double)pd[j] * (double)scale[j];                                                            \
        a = a + g;                                                                                              \
        b = b + g * ((double)px[j] - mu) * is;                                                                  \
      }                                                                                                         \
      s1[r] = a;                                                                                                \
      s2[r] = b;                                                                                                \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Layer norm dx = invstd (dy scale - mean_j(dy scale) - xhat mean_j(dy scale xhat)), in T. */                \
  EM_GLOBAL void em_norm_ln_grad_##S(const T *x, const T *scale, const T *dy, T *dx, em_i64 rows, em_i64 m,     \
                                     const double *mean, const double *invstd, const double *s1,                \
                                     const double *s2) {                                                        \
    NK_FOR(e, rows * m) {                                                                                       \
      em_i64 r = e / m, j = e % m;                                                                              \
      const T c1 = (T)(s1[r] / (double)m), c2 = (T)(s2[r] / (double)m), tmu = (T)mean[r], tis = (T)invstd[r];   \
      T xhat = (x[e] - tmu) * tis;                                                                              \
      dx[e] = tis * (dy[e] * scale[j] - c1 - xhat * c2);                                                        \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Layer norm dscale[j] = sum_r dy xhat, dbias[j] = sum_r dy: one thread per column, rows ascending. */       \
  EM_GLOBAL void em_norm_ln_param_grads_##S(const T *x, const T *dy, T *dscale, T *dbias, em_i64 rows, em_i64 m, \
                                            const double *mean, const double *invstd) {                         \
    NK_FOR(j, m) {                                                                                              \
      double as = 0.0, ab = 0.0;                                                                                \
      for (em_i64 r = 0; r < rows; r++) {                                                                       \
        double mu = mean[r], is = invstd[r];                                                                    \
        as = as + (double)dy[r * m + j] * ((double)x[r * m + j] - mu) * is;                                     \
        ab = ab + (double)dy[r * m + j];                                                                        \
      }                                                                                                         \
      dscale[j] = (T)as;                                                                                        \
      dbias[j] = (T)ab;                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* LRN forward over the channel axis of [n, c, inner]: y = x (bias + alpha_n sum x^2)^-beta. */               \
  EM_GLOBAL void em_norm_lrn_##S(const T *x, T *y, em_i64 n, em_i64 c, em_i64 inner, em_i64 half,               \
                                 double alpha_n, double bias, double beta) {                                    \
    NK_FOR(e, n * c * inner) {                                                                                  \
      em_i64 r = e / inner, i = e % inner, ch = r % c;                                                          \
      em_i64 lo = ch - half > 0 ? ch - half : 0, hi = ch + half < c - 1 ? ch + half : c - 1;                    \
      const T *xb = x + (r - ch) * inner;                                                                       \
      double s = 0.0;                                                                                           \
      for (em_i64 k = lo; k <= hi; k++) s = s + (double)xb[k * inner + i] * (double)xb[k * inner + i];          \
      y[e] = (T)((double)x[e] * nm_pow_d(bias + alpha_n * s, -beta));                                           \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* LRN backward, first pass: t = dy x base^(-beta-1) (double scratch), dx = dy base^-beta (rounded to T). */  \
  EM_GLOBAL void em_norm_lrn_grad1_##S(const T *x, const T *dy, T *dx, double *t, em_i64 n, em_i64 c,           \
                                       em_i64 inner, em_i64 half, double alpha_n, double bias, double beta) {   \
    NK_FOR(e, n * c * inner) {                                                                                  \
      em_i64 r = e / inner, i = e % inner, ch = r % c;                                                          \
      em_i64 lo = ch - half > 0 ? ch - half : 0, hi = ch + half < c - 1 ? ch + half : c - 1;                    \
      const T *xb = x + (r - ch) * inner;                                                                       \
      double s = 0.0;                                                                                           \
      for (em_i64 k = lo; k <= hi; k++) s = s + (double)xb[k * inner + i] * (double)xb[k * inner + i];          \
      double base = bias + alpha_n * s, p = nm_pow_d(base, -beta - 1), d = (double)dy[e];                       \
      t[e] = d * (double)x[e] * p;                                                                              \
      dx[e] = (T)(d * base * p);                                                                                \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* LRN backward, second pass: dx -= 2 alpha_n beta x sum of t over the window. */                             \
  EM_GLOBAL void em_norm_lrn_grad2_##S(const T *x, const double *t, T *dx, em_i64 n, em_i64 c, em_i64 inner,    \
                                       em_i64 half, double alpha_n, double beta) {                              \
    NK_FOR(e, n * c * inner) {                                                                                  \
      em_i64 r = e / inner, i = e % inner, ch = r % c;                                                          \
      em_i64 lo = ch - half > 0 ? ch - half : 0, hi = ch + half < c - 1 ? ch + half : c - 1;                    \
      const double *tb = t + (r - ch) * inner;                                                                  \
      double s = 0.0;                                                                                           \
      for (em_i64 k = lo; k <= hi; k++) s = s + tb[k * inner + i];                                              \
      dx[e] = (T)((double)dx[e] - 2 * alpha_n * beta * (double)x[e] * s);                                       \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Dropout: y = x scale where the counter-based mask keeps element i, else 0 (key, thr: norm_math.h).       \
   * The run's step is read from device memory (the executor writes it before each run and each CUDA graph    \
   * replay), not passed by value: a replay repeats launch parameters, and must draw a new mask.             \
   * Each thread derives the key itself: the same nm_dropout_key as the CPU's.                               \
   */                                                                                                          \
  EM_GLOBAL void em_norm_dropout_##S(const T *x, T *y, em_i64 n, em_i64 seed, em_i64 node, const em_i64 *step,  \
                                     em_i64 thr, double scale) {                                                \
    const T sc = (T)scale;                                                                                      \
    const unsigned long long key =                                                                              \
        nm_dropout_key((unsigned long long)seed, (unsigned long long)step[0], (unsigned long long)node);         \
    NK_FOR(i, n) y[i] = nm_dropout_keep(key, i, (unsigned long long)thr) ? x[i] * sc : (T)0;                    \
  }

NORM_KERNELS(float, f32)
NORM_KERNELS(double, f64)
