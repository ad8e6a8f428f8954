/* The pooling family's per-window arithmetic, written once for the CPU
 * (ops/pool.c, which includes this header with a relative path) and for the
 * kernels (kernels/pool.cu), so both give the same bits in both modes.
 *
 * Geometry: spatial axes right-aligned into three (missing leading axes have
 * size 1); on each axis window o's tap t reads input o*s - pb + t*d. The taps
 * that read input (not padding) are [lo, hi) (pm_taps). Orders:
 *   max:      the window's taps in (depth, row, column) order; the first
 *             strictly larger value wins (ties keep the first), a NaN wins
 *             once and then stays (pm_argmax).
 *   average:  the sum in double over the taps in that order, divided by the
 *             divisor in double, rounded once to the dtype (pm_avg).
 *   gradients (max, average): an input element receives from every window
 *             that reads it, in increasing (od, oh, ow) order, starting from
 *             +0, adding in the dtype: the CPU scatters window after window,
 *             the kernels gather per input element in the same order.
 *   global:   a plane in index order (pm_plane_argmax, pm_plane_mean). */
#ifndef EMBER_POOL_MATH_H
#define EMBER_POOL_MATH_H

#include "em_math.h"

typedef struct pm_geom {
  long long planes;                                      /* N * C */
  long long img[3], col[3], k[3], s[3], d[3], pb[3], pe[3]; /* input and output sizes, window, pads */
} pm_geom;

/* The geometry as a kernel's scalar parameters (kernels/README: no structs),
 * and the struct rebuilt from them inside the kernel. */
#define PM_GEOM_PARAMS                                                                                          \
  em_i64 g_planes, em_i64 g_i0, em_i64 g_i1, em_i64 g_i2, em_i64 g_o0, em_i64 g_o1, em_i64 g_o2, em_i64 g_k0,  \
      em_i64 g_k1, em_i64 g_k2, em_i64 g_s0, em_i64 g_s1, em_i64 g_s2, em_i64 g_d0, em_i64 g_d1, em_i64 g_d2,   \
      em_i64 g_b0, em_i64 g_b1, em_i64 g_b2, em_i64 g_e0, em_i64 g_e1, em_i64 g_e2
#define PM_GEOM_FROM_PARAMS(gm)                                                                                  \
  pm_geom gm;                                                                                                  \
  gm.planes = g_planes;                                                                                        \
  gm.img[0] = g_i0, gm.img[1] = g_i1, gm.img[2] = g_i2, gm.col[0] = g_o0, gm.col[1] = g_o1, gm.col[2] = g_o2;  \
  gm.k[0] = g_k0, gm.k[1] = g_k1, gm.k[2] = g_k2, gm.s[0] = g_s0, gm.s[1] = g_s1, gm.s[2] = g_s2;              \
  gm.d[0] = g_d0, gm.d[1] = g_d1, gm.d[2] = g_d2, gm.pb[0] = g_b0, gm.pb[1] = g_b1, gm.pb[2] = g_b2;           \
  gm.pe[0] = g_e0, gm.pe[1] = g_e1, gm.pe[2] = g_e2
#define PM_GEOM_N_PARAMS 22

EM_HD long long pm_prod3(const long long *v) { return v[0] * v[1] * v[2]; }

/* An empty global pool's results: the max of nothing, the mean of nothing. */
EM_HD double pm_neg_inf_d(void) { return em_as_double(0xfff0000000000000ull); }
EM_HD double pm_nan_d(void) { return em_as_double(0x7ff8000000000000ull); }

/* Window o of one axis: the taps [*lo, *hi) that read input, and how many taps
 * lie inside the padded input [-pb, in + pe) (count_include_pad's divisor). */
EM_HD void pm_taps(long long o, long long in, long long k, long long s, long long d, long long pb, long long pe,
                   long long *lo, long long *hi, long long *padded) {
  long long l = -1, h = 0, n = 0;
  for (long long t = 0; t < k; t++) {
    long long pos = o * s - pb + t * d;
    if (pos >= 0 && pos < in) {
      if (l < 0) l = t;
      h = t + 1;
    }
    if (pos >= -pb && pos < in + pe) n++;
  }
  *lo = l < 0 ? 0 : l;
  *hi = l < 0 ? 0 : h;
  *padded = n;
}

/* The windows [*o0, *o1) of one axis (n_out of them) whose taps read input index i. */
EM_HD void pm_windows(long long i, long long k, long long s, long long d, long long pb, long long n_out, long long *o0,
                      long long *o1) {
  long long top = i + pb, reach = (k - 1) * d; /* o s <= top and top - o s <= reach */
  long long lo = top - reach <= 0 ? 0 : (top - reach + s - 1) / s, hi = top / s + 1;
  *o0 = lo;
  *o1 = hi < n_out ? hi : n_out;
}

/* Whether window o of one axis reads input i (with pm_windows's range: a tap lands on it). */
EM_HD int pm_reads(long long i, long long o, long long s, long long d, long long pb) {
  return (i + pb - o * s) % d == 0;
}

/* The divisor of a window from its three axes' taps. */
EM_HD double pm_divisor(int count_include_pad, const long long *lo, const long long *hi, const long long *padded) {
  if (count_include_pad) return (double)(padded[0] * padded[1] * padded[2]);
  return (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
}

#define PM_FUNCS(T, S)                                                                                          \
  /* The flat plane index of the first maximum of window (od, oh, ow); lo/hi: its taps per axis. */            \
  EM_HD long long pm_argmax_##S(const T *src, const long long *in, const long long *s, const long long *d,      \
                                const long long *pb, long long od, long long oh, long long ow, const long long *lo, \
                                const long long *hi) {                                                          \
    long long arg = -1;                                                                                         \
    T best = 0;                                                                                                 \
    for (long long kd = lo[0]; kd < hi[0]; kd++) {                                                              \
      long long id = od * s[0] - pb[0] + kd * d[0];                                                             \
      for (long long kh = lo[1]; kh < hi[1]; kh++) {                                                            \
        long long ih = oh * s[1] - pb[1] + kh * d[1];                                                           \
        const T *row = src + (id * in[1] + ih) * in[2];                                                         \
        for (long long kw = lo[2]; kw < hi[2]; kw++) {                                                          \
          long long iw = ow * s[2] - pb[2] + kw * d[2];                                                         \
          T v = row[iw];                                                                                        \
          /* strict >: ties keep the first; a NaN wins once and then stays */                                   \
          if (arg < 0 || v > best || (v != v && best == best)) {                                                \
            best = v;                                                                                           \
            arg = (id * in[1] + ih) * in[2] + iw;                                                               \
          }                                                                                                     \
        }                                                                                                       \
      }                                                                                                         \
    }                                                                                                           \
    return arg;                                                                                                 \
  }                                                                                                             \
                                                                                                                \
  /* The mean of window (od, oh, ow): the sum in double over its taps, over div. */                             \
  EM_HD T pm_avg_##S(const T *src, const long long *in, const long long *s, const long long *d,                 \
                     const long long *pb, long long od, long long oh, long long ow, const long long *lo,        \
                     const long long *hi, double div) {                                                         \
    double acc = 0;                                                                                             \
    for (long long kd = lo[0]; kd < hi[0]; kd++) {                                                              \
      long long id = od * s[0] - pb[0] + kd * d[0];                                                             \
      for (long long kh = lo[1]; kh < hi[1]; kh++) {                                                            \
        const T *row = src + (id * in[1] + oh * s[1] - pb[1] + kh * d[1]) * in[2];                              \
        for (long long kw = lo[2]; kw < hi[2]; kw++) acc = acc + (double)row[ow * s[2] - pb[2] + kw * d[2]];    \
      }                                                                                                         \
    }                                                                                                           \
    return (T)(acc / div);                                                                                      \
  }                                                                                                             \
                                                                                                                \
  /* What one window's gradient g gives each input it averages. */                                             \
  EM_HD T pm_avg_share_##S(T g, double div) { return (T)((double)g / div); }                                    \
                                                                                                                \
  /* The index of the first maximum of a plane of n > 0 elements (a NaN counts as the maximum). */              \
  EM_HD long long pm_plane_argmax_##S(const T *p, long long n) {                                                \
    long long arg = 0;                                                                                          \
    for (long long i = 1; i < n; i++)                                                                           \
      if (p[arg] != p[arg]) break;                                                                              \
      else if (p[i] > p[arg] || p[i] != p[i]) arg = i;                                                          \
    return arg;                                                                                                 \
  }                                                                                                             \
                                                                                                                \
  /* The mean of a plane of n > 0 elements: the sum in double, in order. */                                     \
  EM_HD T pm_plane_mean_##S(const T *p, long long n) {                                                          \
    double acc = 0;                                                                                             \
    for (long long i = 0; i < n; i++) acc = acc + (double)p[i];                                                 \
    return (T)(acc / (double)n);                                                                                \
  }

PM_FUNCS(float, f32)
PM_FUNCS(double, f64)

#endif
