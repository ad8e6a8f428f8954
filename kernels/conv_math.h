/* The convolution family's per-element arithmetic, written once for the CPU's
 * portable mode (ops/conv.c, which includes this header with a relative path)
 * and for the kernels (kernels/conv.cu). Both compile it without FMA
 * contraction, so every element gives the same bits on the CPU and on every
 * GPU.
 *
 * Geometry (cm_geom): spatial axes right-aligned into three (missing leading
 * axes have size 1, stride 1, dilation 1, pad 0). The "image" side is
 * convolution's input (convolution_transpose's output), the "column" side
 * convolution's output (convolution_transpose's input); weights are
 * [co, ci / g, k0, k1, k2] in both ops (ops/conv.c). Three computations serve
 * all five ops:
 *
 *   cm_fwd   image -> column: out[n, m, p] for output position p
 *            = the sum over c in [0, ci/g), then the taps t = (kd, kh, kw) in
 *              row-major order, of x[n, g*ci/g + c, pos(p, t)] * w[m, c, t],
 *              taps that read padding skipped; then + bias[m] when given.
 *   cm_adj   column -> image (its adjoint): out[n, c, q] for image position q
 *            = the sum over the group's output channels m in increasing order,
 *              then the taps t in row-major order whose output position
 *              p = (q + pb - k d) / s is whole and inside the column side, of
 *              dy[n, m, p] * w[m, c mod ci/g, t]; then + bias[c] when given.
 *   cm_wgrad dw[m, c, t] = the sum over n, then the output positions p in
 *              row-major order whose tap t reads an image element, of
 *              col[n, m, p] * img[n, g*ci/g + c, pos(p, t)].
 *   cm_bias_grad db[c] = the sum in double over n, then p, of dy[n, c, p],
 *              rounded once to the dtype (also the CPU's fast mode).
 *
 * Every sum starts from +0 and adds acc = acc + a * b in the dtype (no FMA:
 * --fmad=false on the device, -ffp-contract=off on the host). The order is a
 * function of the shapes alone, never of the grid. */
#ifndef EMBER_CONV_MATH_H
#define EMBER_CONV_MATH_H

#include "em_math.h"

typedef struct cm_geom {
  long long n, ci, co, g;                          /* batch, image channels, column channels, groups */
  long long img[3], col[3], k[3], s[3], d[3], pb[3]; /* spatial sizes, kernel, stride, dilation, begin pad */
} cm_geom;

/* The geometry as a kernel's scalar parameters (kernels/README: no structs),
 * and the struct rebuilt from them inside the kernel. */
#define CM_GEOM_PARAMS                                                                                          \
  em_i64 g_n, em_i64 g_ci, em_i64 g_co, em_i64 g_g, em_i64 g_i0, em_i64 g_i1, em_i64 g_i2, em_i64 g_o0,        \
      em_i64 g_o1, em_i64 g_o2, em_i64 g_k0, em_i64 g_k1, em_i64 g_k2, em_i64 g_s0, em_i64 g_s1, em_i64 g_s2,   \
      em_i64 g_d0, em_i64 g_d1, em_i64 g_d2, em_i64 g_p0, em_i64 g_p1, em_i64 g_p2
#define CM_GEOM_FROM_PARAMS(gm)                                                                                  \
  cm_geom gm;                                                                                                  \
  gm.n = g_n, gm.ci = g_ci, gm.co = g_co, gm.g = g_g;                                                          \
  gm.img[0] = g_i0, gm.img[1] = g_i1, gm.img[2] = g_i2, gm.col[0] = g_o0, gm.col[1] = g_o1, gm.col[2] = g_o2;  \
  gm.k[0] = g_k0, gm.k[1] = g_k1, gm.k[2] = g_k2, gm.s[0] = g_s0, gm.s[1] = g_s1, gm.s[2] = g_s2;              \
  gm.d[0] = g_d0, gm.d[1] = g_d1, gm.d[2] = g_d2, gm.pb[0] = g_p0, gm.pb[1] = g_p1, gm.pb[2] = g_p2
#define CM_GEOM_N_PARAMS 22

EM_HD long long cm_prod3(const long long *v) { return v[0] * v[1] * v[2]; }

/* Elements each computation writes: cm_fwd n*co*P, cm_adj n*ci*Q, cm_wgrad co*(ci/g)*taps. */
EM_HD long long cm_fwd_count(const cm_geom *gm) { return gm->n * gm->co * cm_prod3(gm->col); }
EM_HD long long cm_adj_count(const cm_geom *gm) { return gm->n * gm->ci * cm_prod3(gm->img); }
EM_HD long long cm_wgrad_count(const cm_geom *gm) { return gm->co * (gm->ci / gm->g) * cm_prod3(gm->k); }

/* The column-side index o whose tap k reads image index i on one axis: i + pb - k d = o s;
 * -1 when there is none (not a multiple of the stride, or outside [0, n_col)). */
EM_HD long long cm_col_of(long long i, long long pb, long long k, long long d, long long s, long long n_col) {
  long long t = i + pb - k * d;
  if (t < 0 || t % s) return -1;
  t /= s;
  return t < n_col ? t : -1;
}

#define CM_FUNCS(T, S)                                                                                           \
  /* image -> column, element idx of [n, co, col...] (cm_fwd above). */                                          \
  EM_HD T cm_fwd_##S(const cm_geom *gm, const T *x, const T *w, const T *bias, long long idx) {                  \
    const long long *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;             \
    long long P = cm_prod3(out), Q = cm_prod3(in), nt = cm_prod3(k), cig = gm->ci / gm->g, cog = gm->co / gm->g; \
    long long p = idx % P, m = idx / P % gm->co, n = idx / P / gm->co;                                            \
    long long ow = p % out[2], oh = p / out[2] % out[1], od = p / out[2] / out[1];                                \
    const T *xg = x + (n * gm->ci + m / cog * cig) * Q, *wm = w + m * cig * nt;                                   \
    T acc = 0;                                                                                                   \
    for (long long c = 0; c < cig; c++) {                                                                        \
      const T *xc = xg + c * Q, *wc = wm + c * nt;                                                               \
      for (long long kd = 0; kd < k[0]; kd++) {                                                                  \
        long long id = od * s[0] - pb[0] + kd * d[0];                                                            \
        if (id < 0 || id >= in[0]) continue;                                                                     \
        for (long long kh = 0; kh < k[1]; kh++) {                                                                \
          long long ih = oh * s[1] - pb[1] + kh * d[1];                                                          \
          if (ih < 0 || ih >= in[1]) continue;                                                                   \
          const T *row = xc + (id * in[1] + ih) * in[2], *wr = wc + (kd * k[1] + kh) * k[2];                     \
          for (long long kw = 0; kw < k[2]; kw++) {                                                              \
            long long iw = ow * s[2] - pb[2] + kw * d[2];                                                        \
            if (iw < 0 || iw >= in[2]) continue;                                                                 \
            acc = acc + row[iw] * wr[kw];                                                                        \
          }                                                                                                      \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    if (bias) acc = acc + bias[m];                                                                               \
    return acc;                                                                                                  \
  }                                                                                                              \
                                                                                                                 \
  /* column -> image, element idx of [n, ci, img...] (cm_adj above). */                                          \
  EM_HD T cm_adj_##S(const cm_geom *gm, const T *dy, const T *w, const T *bias, long long idx) {                 \
    const long long *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;             \
    long long P = cm_prod3(out), Q = cm_prod3(in), nt = cm_prod3(k), cig = gm->ci / gm->g, cog = gm->co / gm->g; \
    long long q = idx % Q, c = idx / Q % gm->ci, n = idx / Q / gm->ci;                                            \
    long long iw = q % in[2], ih = q / in[2] % in[1], id = q / in[2] / in[1];                                     \
    long long m0 = c / cig * cog, cl = c % cig;                                                                   \
    T acc = 0;                                                                                                   \
    for (long long m = m0; m < m0 + cog; m++) {                                                                  \
      const T *dym = dy + (n * gm->co + m) * P, *wm = w + (m * cig + cl) * nt;                                    \
      for (long long kd = 0; kd < k[0]; kd++) {                                                                  \
        long long od = cm_col_of(id, pb[0], kd, d[0], s[0], out[0]);                                             \
        if (od < 0) continue;                                                                                    \
        for (long long kh = 0; kh < k[1]; kh++) {                                                                \
          long long oh = cm_col_of(ih, pb[1], kh, d[1], s[1], out[1]);                                           \
          if (oh < 0) continue;                                                                                  \
          const T *row = dym + (od * out[1] + oh) * out[2], *wr = wm + (kd * k[1] + kh) * k[2];                  \
          for (long long kw = 0; kw < k[2]; kw++) {                                                              \
            long long ow = cm_col_of(iw, pb[2], kw, d[2], s[2], out[2]);                                         \
            if (ow < 0) continue;                                                                                \
            acc = acc + row[ow] * wr[kw];                                                                        \
          }                                                                                                      \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    if (bias) acc = acc + bias[c];                                                                               \
    return acc;                                                                                                  \
  }                                                                                                              \
                                                                                                                 \
  /* The weight gradient, element idx of [co, ci/g, k...] (cm_wgrad above). */                                   \
  EM_HD T cm_wgrad_##S(const cm_geom *gm, const T *img, const T *col, long long idx) {                           \
    const long long *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;             \
    long long P = cm_prod3(out), Q = cm_prod3(in), nt = cm_prod3(k), cig = gm->ci / gm->g, cog = gm->co / gm->g; \
    long long t = idx % nt, cl = idx / nt % cig, m = idx / nt / cig, c = m / cog * cig + cl;                      \
    long long kw = t % k[2], kh = t / k[2] % k[1], kd = t / k[2] / k[1];                                          \
    T acc = 0;                                                                                                   \
    for (long long n = 0; n < gm->n; n++) {                                                                      \
      const T *xc = img + (n * gm->ci + c) * Q, *gc = col + (n * gm->co + m) * P;                                 \
      for (long long od = 0; od < out[0]; od++) {                                                                \
        long long id = od * s[0] - pb[0] + kd * d[0];                                                            \
        if (id < 0 || id >= in[0]) continue;                                                                     \
        for (long long oh = 0; oh < out[1]; oh++) {                                                              \
          long long ih = oh * s[1] - pb[1] + kh * d[1];                                                          \
          if (ih < 0 || ih >= in[1]) continue;                                                                   \
          const T *row = xc + (id * in[1] + ih) * in[2], *grow = gc + (od * out[1] + oh) * out[2];               \
          for (long long ow = 0; ow < out[2]; ow++) {                                                            \
            long long iw = ow * s[2] - pb[2] + kw * d[2];                                                        \
            if (iw < 0 || iw >= in[2]) continue;                                                                 \
            acc = acc + grow[ow] * row[iw];                                                                      \
          }                                                                                                      \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    return acc;                                                                                                  \
  }                                                                                                              \
                                                                                                                 \
  /* The outputs [n, m, od, oh, 0 .. col2) of cm_fwd at once, for the CPU: each out[ow] receives     \
   * exactly cm_fwd's sequence of additions (channels, then taps, padding skipped, then the bias),     \
   * only interleaved with its neighbours', so the bits are cm_fwd's and the ow loop vectorises. */    \
  EM_HD void cm_fwd_row_##S(const cm_geom *gm, const T *x, const T *w, const T *bias, long long n, long long m,  \
                            long long od, long long oh, T *out) {                                          \
    const long long *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *col = gm->col;       \
    long long Q = cm_prod3(in), nt = cm_prod3(k), cig = gm->ci / gm->g, cog = gm->co / gm->g;               \
    const T *xg = x + (n * gm->ci + m / cog * cig) * Q, *wm = w + m * cig * nt;                             \
    for (long long ow = 0; ow < col[2]; ow++) out[ow] = 0;                                                  \
    for (long long c = 0; c < cig; c++) {                                                                  \
      const T *xc = xg + c * Q, *wc = wm + c * nt;                                                         \
      for (long long kd = 0; kd < k[0]; kd++) {                                                            \
        long long id = od * s[0] - pb[0] + kd * d[0];                                                      \
        if (id < 0 || id >= in[0]) continue;                                                               \
        for (long long kh = 0; kh < k[1]; kh++) {                                                          \
          long long ih = oh * s[1] - pb[1] + kh * d[1];                                                    \
          if (ih < 0 || ih >= in[1]) continue;                                                             \
          const T *row = xc + (id * in[1] + ih) * in[2], *wr = wc + (kd * k[1] + kh) * k[2];               \
          for (long long kw = 0; kw < k[2]; kw++) {                                                        \
            long long off = kw * d[2] - pb[2], lo, hi; /* ow in [lo, hi): 0 <= ow s + off < in2 */           \
            lo = off >= 0 ? 0 : (-off + s[2] - 1) / s[2];                                                  \
            hi = in[2] - 1 - off < 0 ? 0 : (in[2] - 1 - off) / s[2] + 1;                                   \
            if (hi > col[2]) hi = col[2];                                                                  \
            const T wv = wr[kw];                                                                           \
            for (long long ow = lo; ow < hi; ow++) out[ow] = out[ow] + row[ow * s[2] + off] * wv;           \
          }                                                                                                \
        }                                                                                                  \
      }                                                                                                    \
    }                                                                                                      \
    if (bias)                                                                                              \
      for (long long ow = 0; ow < col[2]; ow++) out[ow] = out[ow] + bias[m];                               \
  }                                                                                                        \
                                                                                                           \
  /* db[c] of dy [n, ch, P]: in double, over n then p (cm_bias_grad above). */                                   \
  EM_HD T cm_bias_grad_##S(const T *dy, long long n, long long ch, long long P, long long c) {                   \
    double acc = 0;                                                                                              \
    for (long long i = 0; i < n; i++) {                                                                          \
      const T *row = dy + (i * ch + c) * P;                                                                      \
      for (long long p = 0; p < P; p++) acc = acc + (double)row[p];                                              \
    }                                                                                                            \
    return (T)acc;                                                                                               \
  }

CM_FUNCS(float, f32)
CM_FUNCS(double, f64)

#endif
