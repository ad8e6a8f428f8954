/* Normalisation, dropout and local response normalisation (f32 and f64).
 *
 * batch_normalization(x [N, C, spatial...] or [N, C], scale [C], bias [C],
 *                     running_mean [C], running_var [C]) -> y
 *   epsilon  FLOAT, default 1e-5, >= 0
 *   momentum FLOAT, default 0.9, in [0, 1] (ONNX meaning: running = running * momentum + batch * (1 - momentum))
 *   Inference: y = scale * (x - running_mean) / sqrt(running_var + epsilon) + bias.
 *   Training: normalises by the batch mean and biased variance over N and the
 *   spatial axes, and updates running_mean / running_var in place (they are
 *   state inputs) with the momentum rule. The running variance takes the
 *   UNBIASED batch variance (sum / (m - 1), m = N * spatial), as PyTorch and
 *   cuDNN (CNTK's GPU batch norm) do; training therefore needs m >= 2. No
 *   gradient flows into the running statistics.
 * _batch_norm_grad(x, scale, running_mean, running_var, dy) -> dx, dscale, dbias
 *   Same attributes. Recomputes the batch statistics from x; training mode
 *   (the run's) differentiates through them, inference mode is the affine map.
 *
 * layer_normalization(x, scale, [bias]) -> y
 *   axis    INT, default -1: normalises over x.shape[axis:] (scale and bias have exactly that shape)
 *   epsilon FLOAT, default 1e-5, >= 0
 * _layer_norm_grad(x, scale, dy) -> dx, dscale, dbias   (same attributes)
 *
 * instance_normalization(x [N, C, spatial...], scale [C], bias [C]) -> y
 *   epsilon FLOAT, default 1e-5, >= 0: normalises each (n, c) over the spatial axes.
 * _instance_norm_grad(x, scale, dy) -> dx, dscale, dbias (same attribute)
 *
 * local_response_normalization(x [N, C, ...]) -> y   (ONNX LRN, across channels)
 *   size  INT, required, odd, >= 1
 *   alpha FLOAT, default 1e-4, >= 0; beta FLOAT, default 0.75; bias FLOAT, default 1.0, > 0
 *   y[c] = x[c] / (bias + alpha / size * sum_{|c' - c| <= size/2} x[c']^2)^beta
 * _lrn_grad(x, dy) -> dx (same attributes)
 *
 * dropout(x) -> y
 *   ratio FLOAT, default 0.5, in [0, 1); seed INT, default 0;
 *   node  INT, default: the node's own index (set on gradient nodes to the forward node's index)
 *   Inference, or ratio 0: identity. Training: each element is kept with
 *   probability 1 - ratio and scaled by 1 / (1 - ratio). The mask is a pure
 *   function of (seed, run step, node, element index): a counter-based hash
 *   (splitmix64's finaliser), so it is the same whatever the thread count and
 *   the backward recomputes it instead of storing it.
 * _dropout_grad(dy) -> dx: dropout's mask and scale applied to dy (same attributes).
 *
 * Reductions accumulate in double in a fixed order; parallel loops split
 * output rows or columns only, so results do not depend on the thread count.
 * The order, which kernels/norm.cu repeats on a GPU (gpu members at the end):
 * row sums over x viewed as [rows, inner] element by element from 0.0; batch
 * norm's per-channel folds over the rows (n, c) of a channel, n ascending;
 * layer norm's parameter gradients per column, rows ascending; LRN's window
 * sums channels ascending. So the CPU and every GPU give the same bits in
 * both modes (batch norm in the fast mode: cuDNN's sums, within tolerance), except LRN's power: libm's pow in the fast mode, and in portable
 * mode kernels/norm_math.h's nm_pow_d, which the kernels always use. Dropout's
 * counter-based mask generator is in norm_math.h too, shared with the kernels. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/norm_math.h"
#include "error.h"
#include "norm_gpu.h"
#include "op.h"

/* ------------------------------------------------------------ helpers --- */

#define OMP_FOR _Pragma("omp parallel for schedule(static) num_threads(em_cpu_threads()) if (work > 32768)")

/* Calls fn_f32 or fn_f64 (the typed kernels below) by dtype. */
#define BY_DTYPE(dt, fn, ...) ((dt) == EM_F32 ? fn##_f32(__VA_ARGS__) : fn##_f64(__VA_ARGS__))

static const em_attr *attr_get(const em_op_args *a, const char *name) {
  for (int i = 0; i < a->n_attrs; i++)
    if (a->attrs[i].name && !strcmp(a->attrs[i].name, name)) return &a->attrs[i];
  return NULL;
}

/* A real attribute (FLOAT, or INT converted); anything else, or a non-finite value, fails. */
static em_status attr_real(const em_op_args *a, const char *name, double dflt, double *out) {
  return em_attr_number(a, name, dflt, 0, out);
}

/* An INT attribute; *present tells whether it was given. */
static em_status attr_integer(const em_op_args *a, const char *name, int64_t dflt, int64_t *out, int *present) {
  const em_attr *t = attr_get(a, name);
  *out = dflt;
  if (present) *present = t != NULL;
  if (!t) return EM_OK;
  if (t->type != EM_ATTR_INT) return em_op_fail(a, "attribute '%s' must be an INT", name);
  *out = t->i;
  return EM_OK;
}

static em_status check_epsilon(const em_op_args *a, double *eps) {
  em_status s = attr_real(a, "epsilon", 1e-5, eps);
  if (!s && *eps < 0) s = em_op_fail(a, "attribute 'epsilon' is %g; it must be >= 0", *eps);
  return s;
}

/* Input 0 computes in f32 or f64. */
static em_status check_float_x(const em_op_args *a) {
  em_dtype t = a->in[0].dtype;
  if (t != EM_F32 && t != EM_F64)
    return em_op_fail(a, "x is %s; this op computes in f32 and f64", em_dtype_name(t));
  return EM_OK;
}

/* -1 (a dynamic axis) matches anything. */
static int dim_ok(int64_t got, int64_t want) { return got == want || got < 0 || want < 0; }

/* Input i has x's dtype and the shape `want` (leniently on dynamic axes). */
static em_status check_like(const em_op_args *a, int i, const char *what, const em_shape *want) {
  const em_shape *s = &a->in[i];
  char w[160], g[160];
  if (s->dtype != a->in[0].dtype)
    return em_op_fail(a, "%s is %s but x is %s; they must have the same dtype", what, em_dtype_name(s->dtype),
                      em_dtype_name(a->in[0].dtype));
  int ok = s->ndim == want->ndim;
  for (int d = 0; ok && d < s->ndim; d++) ok = dim_ok(s->dims[d], want->dims[d]);
  if (!ok)
    return em_op_fail(a, "%s must be %s, got %s", what, em_shape_str(want, w, sizeof w), em_shape_str(s, g, sizeof g));
  return EM_OK;
}

/* The shape [C] of x's channel axis (axis 1). */
static em_shape channel_shape(const em_shape *x) {
  em_shape c = {.dtype = x->dtype, .ndim = 1};
  c.dims[0] = x->dims[1];
  return c;
}

static int64_t prod_dims(const int64_t *d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= d[i];
  return p;
}

static double vec_get(em_dtype dt, const void *p, int64_t i) {
  return dt == EM_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void vec_set(em_dtype dt, void *p, int64_t i, double v) {
  if (dt == EM_F32) ((float *)p)[i] = (float)v;
  else ((double *)p)[i] = v;
}

static em_status scratch(size_t n, double **out) {
  *out = malloc(sizeof(double) * (n ? n : 1));
  return *out ? EM_OK : em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for %zu doubles of normalisation scratch", n);
}

static void copy_if_distinct(em_tensor *dst, const em_tensor *src) {
  void *d = em_tensor_data(dst);
  const void *s = em_tensor_data(src);
  if (d != s) memcpy(d, s, (size_t)em_tensor_numel(src) * em_dtype_size(em_tensor_dtype(src)));
}

/* ------------------------------------------------------ typed kernels --- */

/* The kernels work on rows of a [rows, inner] view; per-row statistics are
 * doubles. Instantiated for float (f32) and double (f64). */
#define NORM_KERNELS(T, S)                                                                                          \
  /* out[r] = sum of row r. */                                                                                      \
  static void row_sum_##S(const void *xv, int64_t rows, int64_t inner, double *out) {                               \
    const T *x = xv;                                                                                                \
    const int64_t work = rows * inner;                                                                              \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T *p = x + r * inner;                                                                                   \
      double s = 0;                                                                                                 \
      for (int64_t i = 0; i < inner; i++) s += p[i];                                                                \
      out[r] = s;                                                                                                   \
    }                                                                                                               \
  }                                                                                                                 \
  /* out[r] = sum over row r of (x - mean[r])^2. */                                                                 \
  static void row_sqdev_##S(const void *xv, int64_t rows, int64_t inner, const double *mean, double *out) {         \
    const T *x = xv;                                                                                                \
    const int64_t work = rows * inner;                                                                              \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T *p = x + r * inner;                                                                                   \
      double s = 0, m = mean[r];                                                                                    \
      for (int64_t i = 0; i < inner; i++) s += ((double)p[i] - m) * ((double)p[i] - m);                             \
      out[r] = s;                                                                                                   \
    }                                                                                                               \
  }                                                                                                                 \
  /* sdy[r] = sum of dy over row r; sdyx[r] = sum of dy * (x - mean[r]). */                                         \
  static void row_grad_sums_##S(const void *xv, const void *dyv, int64_t rows, int64_t inner, const double *mean,   \
                                double *sdy, double *sdyx) {                                                        \
    const T *x = xv, *dy = dyv;                                                                                     \
    const int64_t work = rows * inner;                                                                              \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T *px = x + r * inner, *pd = dy + r * inner;                                                            \
      double s0 = 0, s1 = 0, m = mean[r];                                                                           \
      for (int64_t i = 0; i < inner; i++) {                                                                         \
        s0 += pd[i];                                                                                                \
        s1 += (double)pd[i] * ((double)px[i] - m);                                                                  \
      }                                                                                                             \
      sdy[r] = s0;                                                                                                  \
      sdyx[r] = s1;                                                                                                 \
    }                                                                                                               \
  }                                                                                                                 \
  /* y = (x - mean[r]) * k[r] + b[r] along each row. */                                                             \
  static void affine_rows_##S(const void *xv, void *yv, int64_t rows, int64_t inner, const double *mean,            \
                              const double *k, const double *b) {                                                   \
    const T *x = xv;                                                                                                \
    T *y = yv;                                                                                                      \
    const int64_t work = rows * inner;                                                                              \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T m = (T)mean[r], kk = (T)k[r], bb = (T)b[r];                                                           \
      const T *px = x + r * inner;                                                                                  \
      T *py = y + r * inner;                                                                                        \
      for (int64_t i = 0; i < inner; i++) py[i] = (px[i] - m) * kk + bb;                                            \
    }                                                                                                               \
  }                                                                                                                 \
  /* dx = A[r] * dy + B[r] * (x - mean[r]) + D[r] along each row. */                                                \
  static void grad_rows_##S(const void *xv, const void *dyv, void *dxv, int64_t rows, int64_t inner,                \
                            const double *mean, const double *A, const double *B, const double *D) {                \
    const T *x = xv, *dy = dyv;                                                                                     \
    T *dx = dxv;                                                                                                    \
    const int64_t work = rows * inner;                                                                              \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T m = (T)mean[r], aa = (T)A[r], bb = (T)B[r], dd = (T)D[r];                                             \
      const T *px = x + r * inner, *pd = dy + r * inner;                                                            \
      T *po = dx + r * inner;                                                                                       \
      for (int64_t i = 0; i < inner; i++) po[i] = aa * pd[i] + bb * (px[i] - m) + dd;                               \
    }                                                                                                               \
  }                                                                                                                 \
  /* Layer norm: y[r, j] = (x - mean[r]) * invstd[r] * scale[j] + bias[j] (bias may be NULL). */                    \
  static void ln_apply_##S(const void *xv, const void *sv, const void *bv, void *yv, int64_t rows, int64_t m,       \
                           const double *mean, const double *invstd) {                                              \
    const T *x = xv, *sc = sv, *bi = bv;                                                                            \
    T *y = yv;                                                                                                      \
    const int64_t work = rows * m;                                                                                  \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T mu = (T)mean[r], is = (T)invstd[r];                                                                   \
      const T *px = x + r * m;                                                                                      \
      T *py = y + r * m;                                                                                            \
      if (bi)                                                                                                       \
        for (int64_t j = 0; j < m; j++) py[j] = (px[j] - mu) * is * sc[j] + bi[j];                                  \
      else                                                                                                          \
        for (int64_t j = 0; j < m; j++) py[j] = (px[j] - mu) * is * sc[j];                                          \
    }                                                                                                               \
  }                                                                                                                 \
  /* Layer norm dx: with g = dy * scale and xhat = (x - mean) * invstd,                                             \
   * dx = invstd * (g - mean_j(g) - xhat * mean_j(g * xhat)) along each row. */                                     \
  static void ln_grad_rows_##S(const void *xv, const void *sv, const void *dyv, void *dxv, int64_t rows, int64_t m, \
                               const double *mean, const double *invstd) {                                          \
    const T *x = xv, *sc = sv, *dy = dyv;                                                                           \
    T *dx = dxv;                                                                                                    \
    const int64_t work = rows * m;                                                                                  \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      const T *px = x + r * m, *pd = dy + r * m;                                                                    \
      T *po = dx + r * m;                                                                                           \
      double mu = mean[r], is = invstd[r], s1 = 0, s2 = 0;                                                          \
      for (int64_t j = 0; j < m; j++) {                                                                             \
        double g = (double)pd[j] * (double)sc[j];                                                                   \
        s1 += g;                                                                                                    \
        s2 += g * ((double)px[j] - mu) * is;                                                                        \
      }                                                                                                             \
      const T c1 = (T)(s1 / (double)m), c2 = (T)(s2 / (double)m), tmu = (T)mu, tis = (T)is;                         \
      for (int64_t j = 0; j < m; j++) {                                                                             \
        T xhat = (px[j] - tmu) * tis;                                                                               \
        po[j] = tis * (pd[j] * sc[j] - c1 - xhat * c2);                                                             \
      }                                                                                                             \
    }                                                                                                               \
  }                                                                                                                 \
  /* Layer norm dscale[j] = sum_r dy * xhat, dbias[j] = sum_r dy: blocks of                                         \
   * columns in parallel, rows summed in ascending order. */                                                        \
  static void ln_param_grads_##S(const void *xv, const void *dyv, void *dsv, void *dbv, int64_t rows, int64_t m,    \
                                 const double *mean, const double *invstd, double *acc) {                           \
    const T *x = xv, *dy = dyv;                                                                                     \
    T *ds = dsv, *db = dbv;                                                                                         \
    const int64_t work = rows * m, blocks = (m + 255) / 256;                                                        \
    OMP_FOR                                                                                                         \
    for (int64_t bl = 0; bl < blocks; bl++) {                                                                       \
      int64_t j0 = bl * 256, j1 = j0 + 256 < m ? j0 + 256 : m;                                                      \
      double *as = acc + j0, *ab = acc + m + j0;                                                                    \
      for (int64_t j = 0; j < j1 - j0; j++) as[j] = ab[j] = 0;                                                      \
      for (int64_t r = 0; r < rows; r++) {                                                                          \
        const T *px = x + r * m + j0, *pd = dy + r * m + j0;                                                        \
        double mu = mean[r], is = invstd[r];                                                                        \
        for (int64_t j = 0; j < j1 - j0; j++) {                                                                     \
          as[j] += (double)pd[j] * ((double)px[j] - mu) * is;                                                       \
          ab[j] += pd[j];                                                                                           \
        }                                                                                                           \
      }                                                                                                             \
      for (int64_t j = 0; j < j1 - j0; j++) {                                                                       \
        ds[j0 + j] = (T)as[j];                                                                                      \
        db[j0 + j] = (T)ab[j];                                                                                      \
      }                                                                                                             \
    }                                                                                                               \
  }                                                                                                                 \
  /* LRN forward over the channel axis of [n, c, inner]. */                                                         \
  static void lrn_fwd_##S(const void *xv, void *yv, int64_t n, int64_t c, int64_t inner, int64_t half,             \
                          double alpha_n, double bias, double beta, int portable) {                                 \
    const T *x = xv;                                                                                                \
    T *y = yv;                                                                                                      \
    const int64_t rows = n * c, work = rows * inner;                                                                \
    OMP_FOR                                                                                                         \
    for (int64_t r = 0; r < rows; r++) {                                                                            \
      int64_t ch = r % c, lo = ch - half > 0 ? ch - half : 0, hi = ch + half < c - 1 ? ch + half : c - 1;           \
      const T *xb = x + (r - ch) * inner;                                                                           \
      for (int64_t i = 0; i < inner; i++) {                                                                         \
        double s = 0;                                                                                               \
        for (int64_t k = lo; k <= hi; k++) s += (double)xb[k * inner + i] * (double)xb[k * inner + i];              \
        y[r * inner + i] = (T)((double)x[r * inner + i] * lrn_pow(bias + alpha_n * s, -beta, portable));            \
      }                                                                                                             \
    }                                                                                                               \
  }                                                                                                                 \
  /* LRN backward for one batch item [c, inner]; t is c * inner scratch. With                                       \
   * base = bias + alpha_n * window sum of x^2:                                                                     \
   * dx[j] = dy[j] base[j]^-beta - 2 alpha_n beta x[j] sum_{c in window(j)} dy[c] x[c] base[c]^(-beta-1). */        \
  static void lrn_grad_item_##S(const void *xv, const void *dyv, void *dxv, int64_t c, int64_t inner, int64_t half, \
                                double alpha_n, double bias, double beta, double *t, int portable) {                \
    const T *x = xv, *dy = dyv;                                                                                     \
    T *dx = dxv;                                                                                                    \
    const int64_t work = c * inner;                                                                                 \
    OMP_FOR                                                                                                         \
    for (int64_t ch = 0; ch < c; ch++) {                                                                            \
      int64_t lo = ch - half > 0 ? ch - half : 0, hi = ch + half < c - 1 ? ch + half : c - 1;                       \
      for (int64_t i = 0; i < inner; i++) {                                                                         \
        double s = 0;                                                                                               \
        for (int64_t k = lo; k <= hi; k++) s += (double)x[k * inner + i] * (double)x[k * inner + i];               \
        double base = bias + alpha_n * s, p = lrn_pow(base, -beta - 1, portable), d = dy[ch * inner + i];           \
        t[ch * inner + i] = d * (double)x[ch * inner + i] * p;                                                      \
        dx[ch * inner + i] = (T)(d * base * p);                                                                     \
      }                                                                                                             \
    }                                                                                                               \
    OMP_FOR                                                                                                         \
    for (int64_t ch = 0; ch < c; ch++) {                                                                            \
      int64_t lo = ch - half > 0 ? ch - half : 0, hi = ch + half < c - 1 ? ch + half : c - 1;                       \
      for (int64_t i = 0; i < inner; i++) {                                                                         \
        double s = 0;                                                                                               \
        for (int64_t k = lo; k <= hi; k++) s += t[k * inner + i];                                                   \
        dx[ch * inner + i] = (T)((double)dx[ch * inner + i] - 2 * alpha_n * beta * (double)x[ch * inner + i] * s);  \
      }                                                                                                             \
    }                                                                                                               \
  }                                                                                                                 \
  /* y[i] = x[i] * scale where the hash of element i keeps it, else 0. */                                           \
  static void dropout_##S(const void *xv, void *yv, int64_t n, uint64_t key, uint64_t thr, double scale) {          \
    const T *x = xv;                                                                                                \
    T *y = yv;                                                                                                      \
    const T sc = (T)scale;                                                                                          \
    const int64_t work = n;                                                                                         \
    OMP_FOR                                                                                                         \
    for (int64_t i = 0; i < n; i++) y[i] = nm_dropout_keep(key, i, thr) ? x[i] * sc : 0;                           \
  }

/* LRN's power: libm's in the fast mode; in portable mode norm_math.h's, which the kernels use. */
static double lrn_pow(double base, double e, int portable) { return portable ? nm_pow_d(base, e) : pow(base, e); }

NORM_KERNELS(float, f32)
NORM_KERNELS(double, f64)

/* --------------------------------- batch and instance normalisation --- */

/* x viewed as [n, c, inner] with rows (n, c). Batch norm pools its
 * statistics per channel (over n and inner), instance norm per row. */
typedef struct nc_geom {
  int64_t n, c, inner;
  int per_channel;
} nc_geom;

static nc_geom nc_geometry(const em_tensor *x, int per_channel) {
  const int64_t *d = em_tensor_shape(x);
  int nd = em_tensor_ndim(x);
  nc_geom g = {d[0], d[1], prod_dims(d, 2, nd), per_channel};
  return g;
}

static int64_t nc_groups(const nc_geom *g) { return g->per_channel ? g->c : g->n * g->c; }
static int64_t nc_group_of(const nc_geom *g, int64_t r) { return g->per_channel ? r % g->c : r; }
static double nc_count(const nc_geom *g) { return (double)(g->per_channel ? g->n * g->inner : g->inner); }

/* grp[k] = sum of row[r] over the rows of group k, rows in ascending order. */
static void nc_fold(const nc_geom *g, const double *row, double *grp) {
  int64_t ng = nc_groups(g), rows = g->n * g->c;
  for (int64_t k = 0; k < ng; k++) grp[k] = 0;
  for (int64_t r = 0; r < rows; r++) grp[nc_group_of(g, r)] += row[r];
}

static void nc_spread(const nc_geom *g, const double *grp, double *row) {
  for (int64_t r = 0, rows = g->n * g->c; r < rows; r++) row[r] = grp[nc_group_of(g, r)];
}

/* Batch mean and biased variance per group (two passes, for accuracy).
 * rowa, rowb: scratch of n * c. */
static void nc_stats(const nc_geom *g, em_dtype dt, const void *x, double *mean, double *var, double *rowa,
                     double *rowb) {
  int64_t rows = g->n * g->c, ng = nc_groups(g);
  double m = nc_count(g);
  BY_DTYPE(dt, row_sum, x, rows, g->inner, rowa);
  nc_fold(g, rowa, mean);
  for (int64_t k = 0; k < ng; k++) mean[k] = m > 0 ? mean[k] / m : 0;
  nc_spread(g, mean, rowb);
  BY_DTYPE(dt, row_sqdev, x, rows, g->inner, rowb, rowa);
  nc_fold(g, rowa, var);
  for (int64_t k = 0; k < ng; k++) var[k] = m > 0 ? var[k] / m : 0;
}

/* y = (x - mean) * invstd * scale + bias with per-group mean, invstd. */
static em_status nc_apply(const nc_geom *g, em_dtype dt, const void *x, void *y, const double *mean,
                          const double *invstd, const void *scale, const void *bias) {
  int64_t rows = g->n * g->c;
  double *buf;
  em_status s = scratch((size_t)(3 * rows), &buf);
  if (s) return s;
  double *rm = buf, *rk = buf + rows, *rb = buf + 2 * rows;
  for (int64_t r = 0; r < rows; r++) {
    int64_t k = nc_group_of(g, r), ch = r % g->c;
    rm[r] = mean[k];
    rk[r] = invstd[k] * vec_get(dt, scale, ch);
    rb[r] = vec_get(dt, bias, ch);
  }
  BY_DTYPE(dt, affine_rows, x, y, rows, g->inner, rm, rk, rb);
  free(buf);
  return EM_OK;
}

/* dx, dscale, dbias given per-group mean and invstd. through_stats: the
 * statistics are the batch's own (differentiate through them); else they
 * are constants (batch norm inference). */
static em_status nc_backward(const nc_geom *g, em_dtype dt, const void *x, const void *scale, const void *dy,
                             const double *mean, const double *invstd, int through_stats, void *dx, void *dscale,
                             void *dbias) {
  int64_t rows = g->n * g->c, ng = nc_groups(g);
  double m = nc_count(g), *buf;
  em_status s = scratch((size_t)(6 * rows + 2 * ng + 2 * g->c), &buf);
  if (s) return s;
  double *rm = buf, *sdy = rm + rows, *sdyx = sdy + rows, *A = sdyx + rows, *B = A + rows, *D = B + rows;
  double *gdy = D + rows, *gdyx = gdy + ng, *cdy = gdyx + ng, *cdyx = cdy + g->c;
  nc_spread(g, mean, rm);
  BY_DTYPE(dt, row_grad_sums, x, dy, rows, g->inner, rm, sdy, sdyx);
  nc_fold(g, sdy, gdy);
  nc_fold(g, sdyx, gdyx);
  for (int64_t r = 0; r < rows; r++) {
    int64_t k = nc_group_of(g, r);
    double is = invstd[k], a = vec_get(dt, scale, r % g->c) * is;
    A[r] = a;
    B[r] = through_stats && m > 0 ? -a * is * is * gdyx[k] / m : 0;
    D[r] = through_stats && m > 0 ? -a * gdy[k] / m : 0;
  }
  BY_DTYPE(dt, grad_rows, x, dy, dx, rows, g->inner, rm, A, B, D);
  /* dscale = sum dy * xhat, dbias = sum dy, per channel (rows ascending). */
  for (int64_t ch = 0; ch < g->c; ch++) cdy[ch] = cdyx[ch] = 0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t k = nc_group_of(g, r), ch = r % g->c;
    cdy[ch] += sdy[r];
    cdyx[ch] += sdyx[r] * invstd[k];
  }
  for (int64_t ch = 0; ch < g->c; ch++) {
    vec_set(dt, dscale, ch, cdyx[ch]);
    vec_set(dt, dbias, ch, cdy[ch]);
  }
  free(buf);
  return EM_OK;
}

typedef struct bn_params {
  double eps, momentum;
} bn_params;

static em_status bn_parse(const em_op_args *a, bn_params *p) {
  em_status s = check_epsilon(a, &p->eps);
  if (!s) s = attr_real(a, "momentum", 0.9, &p->momentum);
  if (!s && (p->momentum < 0 || p->momentum > 1))
    s = em_op_fail(a, "attribute 'momentum' is %g; it must be in [0, 1]", p->momentum);
  return s;
}

static const char *const bn_names[] = {"x", "scale", "bias", "running_mean", "running_var"};

/* x [N, C, ...] in f32/f64 and the [C] vectors at inputs first..last. */
static em_status check_nc_inputs(const em_op_args *a, int min_rank, int first, int last, const char *const *names) {
  em_status s = check_float_x(a);
  if (s) return s;
  if (a->in[0].ndim < min_rank)
    return em_op_fail(a, "x must be [N, C%s] (rank >= %d), got rank %d", min_rank > 2 ? ", spatial..." : ", ...",
                      min_rank, a->in[0].ndim);
  em_shape c = channel_shape(&a->in[0]);
  for (int i = first; i <= last && !s; i++) s = check_like(a, i, names[i], &c);
  return s;
}

static em_status bn_infer(em_op_args *a) {
  bn_params p;
  em_status s = bn_parse(a, &p);
  if (!s) s = check_nc_inputs(a, 2, 1, 4, bn_names);
  if (!s) a->out[0] = a->in[0];
  return s;
}

/* Batch statistics, or the running ones in inference, in new scratch *out (free it): mean,
 * var and invstd, [C] each and in that order, then room for the row sums. */
static em_status bn_statistics(const em_op_args *a, const nc_geom *g, em_dtype dt, const void *x, const void *rmean,
                               const void *rvar, double eps, double **out) {
  int64_t rows = g->n * g->c;
  em_status s = scratch((size_t)(3 * g->c + 2 * rows), out);
  if (s) return s;
  double *mean = *out, *var = mean + g->c, *invstd = var + g->c, *rowa = invstd + g->c, *rowb = rowa + rows;
  if (a->training) {
    nc_stats(g, dt, x, mean, var, rowa, rowb);
  } else {
    for (int64_t ch = 0; ch < g->c; ch++) {
      mean[ch] = vec_get(dt, rmean, ch);
      var[ch] = vec_get(dt, rvar, ch);
    }
  }
  for (int64_t ch = 0; ch < g->c; ch++) invstd[ch] = 1.0 / sqrt(var[ch] + eps);
  return EM_OK;
}

static em_status bn_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bn_params p;
  em_status s = bn_parse(a, &p);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(in[0]);
  nc_geom g = nc_geometry(in[0], 1);
  double m = nc_count(&g);
  if (a->training && m < 2)
    return em_op_fail(a, "training needs more than one value per channel (N * spatial = %g) for the unbiased "
                         "running variance", m);
  double *buf;
  s = bn_statistics(a, &g, dt, em_tensor_data(in[0]), em_tensor_data(in[3]), em_tensor_data(in[4]), p.eps, &buf);
  if (s) return s;
  double *mean = buf, *var = mean + g.c, *invstd = var + g.c;
  s = nc_apply(&g, dt, em_tensor_data(in[0]), em_tensor_data(out[0]), mean, invstd, em_tensor_data(in[1]),
               em_tensor_data(in[2]));
  if (!s && a->training) {
    /* The running statistics are state: updated in the state's own storage. */
    void *rmean = em_tensor_data(in[3]), *rvar = em_tensor_data(in[4]);
    double mom = p.momentum, unbias = m / (m - 1);
    for (int64_t ch = 0; ch < g.c; ch++) {
      vec_set(dt, rmean, ch, vec_get(dt, rmean, ch) * mom + mean[ch] * (1 - mom));
      vec_set(dt, rvar, ch, vec_get(dt, rvar, ch) * mom + var[ch] * unbias * (1 - mom));
    }
  }
  free(buf);
  return s;
}

static em_status bn_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[5] = {x[0], x[1], x[3], x[4], dy[0]}, out[3];
  em_status s = em_apply(g, "_batch_norm_grad", in, 5, a->attrs, a->n_attrs, out, 3);
  if (s) return s;
  din[0] = out[0];
  din[1] = out[1];
  din[2] = out[2];
  return EM_OK;
}

static const char *const bng_names[] = {"x", "scale", "running_mean", "running_var", "dy"};

static em_status bng_infer(em_op_args *a) {
  bn_params p;
  em_status s = bn_parse(a, &p);
  if (!s) s = check_nc_inputs(a, 2, 1, 3, bng_names);
  if (!s) s = check_like(a, 4, "dy", &a->in[0]);
  if (s) return s;
  a->out[0] = a->in[0];
  a->out[1] = a->out[2] = channel_shape(&a->in[0]);
  return EM_OK;
}

static em_status bng_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bn_params p;
  em_status s = bn_parse(a, &p);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(in[0]);
  nc_geom g = nc_geometry(in[0], 1);
  double *buf;
  const void *x = em_tensor_data(in[0]);
  s = bn_statistics(a, &g, dt, x, em_tensor_data(in[2]), em_tensor_data(in[3]), p.eps, &buf);
  if (s) return s;
  double *mean = buf, *invstd = mean + 2 * g.c;
  s = nc_backward(&g, dt, x, em_tensor_data(in[1]), em_tensor_data(in[4]), mean, invstd, a->training,
                  em_tensor_data(out[0]), em_tensor_data(out[1]), em_tensor_data(out[2]));
  free(buf);
  return s;
}

static const char *const in_names[] = {"x", "scale", "bias"};

static em_status inorm_infer(em_op_args *a) {
  double eps;
  em_status s = check_epsilon(a, &eps);
  if (!s) s = check_nc_inputs(a, 3, 1, 2, in_names);
  if (!s) a->out[0] = a->in[0];
  return s;
}

/* Per-row (n, c) mean and invstd of x over the spatial axes. */
static em_status inorm_stats(const nc_geom *g, em_dtype dt, const void *x, double eps, double **out) {
  int64_t rows = g->n * g->c;
  double *buf;
  em_status s = scratch((size_t)(4 * rows), &buf);
  if (s) return s;
  double *mean = buf, *invstd = buf + rows, *var = buf + 2 * rows;
  nc_stats(g, dt, x, mean, var, buf + 3 * rows, invstd /* scratch, overwritten next */);
  for (int64_t r = 0; r < rows; r++) invstd[r] = 1.0 / sqrt(var[r] + eps);
  *out = buf;
  return EM_OK;
}

static em_status inorm_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  double eps, *st;
  em_status s = check_epsilon(a, &eps);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(in[0]);
  nc_geom g = nc_geometry(in[0], 0);
  s = inorm_stats(&g, dt, em_tensor_data(in[0]), eps, &st);
  if (s) return s;
  s = nc_apply(&g, dt, em_tensor_data(in[0]), em_tensor_data(out[0]), st, st + g.n * g.c, em_tensor_data(in[1]),
               em_tensor_data(in[2]));
  free(st);
  return s;
}

/* Shared by instance and layer norm: fused grad(x, scale, dy) -> dx, dscale[, dbias]. */
static em_status affine_norm_backward(em_graph *g, const char *grad_op, const em_op_args *a, const em_var *x,
                                      const em_var *dy, em_var *din) {
  if (dy[0] < 0) return EM_OK;
  em_var in[3] = {x[0], x[1], dy[0]}, out[3];
  em_status s = em_apply(g, grad_op, in, 3, a->attrs, a->n_attrs, out, 3);
  if (s) return s;
  din[0] = out[0];
  din[1] = out[1];
  if (a->n_in > 2) din[2] = out[2];
  return EM_OK;
}

static em_status inorm_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                const em_var *dy, em_var *din) {
  (void)y;
  return affine_norm_backward(g, "_instance_norm_grad", a, x, dy, din);
}

static const char *const ing_names[] = {"x", "scale", "dy"};

static em_status inorm_grad_infer(em_op_args *a) {
  double eps;
  em_status s = check_epsilon(a, &eps);
  if (!s) s = check_nc_inputs(a, 3, 1, 1, ing_names);
  if (!s) s = check_like(a, 2, "dy", &a->in[0]);
  if (s) return s;
  a->out[0] = a->in[0];
  a->out[1] = a->out[2] = channel_shape(&a->in[0]);
  return EM_OK;
}

static em_status inorm_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  double eps, *st;
  em_status s = check_epsilon(a, &eps);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(in[0]);
  nc_geom g = nc_geometry(in[0], 0);
  const void *x = em_tensor_data(in[0]);
  s = inorm_stats(&g, dt, x, eps, &st);
  if (s) return s;
  s = nc_backward(&g, dt, x, em_tensor_data(in[1]), em_tensor_data(in[2]), st, st + g.n * g.c, 1,
                  em_tensor_data(out[0]), em_tensor_data(out[1]), em_tensor_data(out[2]));
  free(st);
  return s;
}

/* ------------------------------------------------ layer normalisation --- */

/* The normalised axis and epsilon; checks x's rank. */
static em_status ln_parse(const em_op_args *a, int *axis, double *eps) {
  int64_t ax;
  em_status s = attr_integer(a, "axis", -1, &ax, NULL);
  if (!s) s = check_epsilon(a, eps);
  if (!s) s = check_float_x(a);
  if (!s && a->in[0].ndim < 1) s = em_op_fail(a, "x must have rank >= 1");
  if (!s) s = em_norm_axis(a, ax, a->in[0].ndim, axis);
  return s;
}

/* x.shape[axis:], the shape of scale and bias. */
static em_shape ln_param_shape(const em_shape *x, int axis) {
  em_shape p = {.dtype = x->dtype, .ndim = x->ndim - axis};
  for (int i = axis; i < x->ndim; i++) p.dims[i - axis] = x->dims[i];
  return p;
}

static em_status ln_infer(em_op_args *a) {
  int axis;
  double eps;
  em_status s = ln_parse(a, &axis, &eps);
  if (s) return s;
  em_shape p = ln_param_shape(&a->in[0], axis);
  s = check_like(a, 1, "scale (x.shape[axis:])", &p);
  if (!s && a->n_in > 2) s = check_like(a, 2, "bias (x.shape[axis:])", &p);
  if (!s) a->out[0] = a->in[0];
  return s;
}

/* Per-row mean and invstd of x viewed as [rows, m]; *out holds both (free it). */
static em_status ln_stats(em_dtype dt, const void *x, int64_t rows, int64_t m, double eps, double **out) {
  double *buf;
  em_status s = scratch((size_t)(2 * rows), &buf);
  if (s) return s;
  double *mean = buf, *invstd = buf + rows;
  BY_DTYPE(dt, row_sum, x, rows, m, mean);
  for (int64_t r = 0; r < rows; r++) mean[r] = m ? mean[r] / (double)m : 0;
  BY_DTYPE(dt, row_sqdev, x, rows, m, mean, invstd);
  for (int64_t r = 0; r < rows; r++) invstd[r] = 1.0 / sqrt((m ? invstd[r] / (double)m : 0) + eps);
  *out = buf;
  return EM_OK;
}

/* rows and row length of x viewed as [prod(shape[:axis]), prod(shape[axis:])]. */
static void ln_geometry(const em_tensor *x, int axis, int64_t *rows, int64_t *m) {
  *rows = prod_dims(em_tensor_shape(x), 0, axis);
  *m = prod_dims(em_tensor_shape(x), axis, em_tensor_ndim(x));
}

static em_status ln_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int axis;
  double eps, *st;
  em_status s = ln_parse(a, &axis, &eps);
  if (s) return s;
  int64_t rows, m;
  ln_geometry(in[0], axis, &rows, &m);
  em_dtype dt = em_tensor_dtype(in[0]);
  s = ln_stats(dt, em_tensor_data(in[0]), rows, m, eps, &st);
  if (s) return s;
  BY_DTYPE(dt, ln_apply, em_tensor_data(in[0]), em_tensor_data(in[1]), a->n_in > 2 ? em_tensor_data(in[2]) : NULL,
           em_tensor_data(out[0]), rows, m, st, st + rows);
  free(st);
  return EM_OK;
}

static em_status ln_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)y;
  return affine_norm_backward(g, "_layer_norm_grad", a, x, dy, din);
}

static em_status ln_grad_infer(em_op_args *a) {
  int axis;
  double eps;
  em_status s = ln_parse(a, &axis, &eps);
  if (s) return s;
  em_shape p = ln_param_shape(&a->in[0], axis);
  s = check_like(a, 1, "scale (x.shape[axis:])", &p);
  if (!s) s = check_like(a, 2, "dy", &a->in[0]);
  if (s) return s;
  a->out[0] = a->in[0];
  a->out[1] = a->out[2] = p;
  return EM_OK;
}

static em_status ln_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int axis;
  double eps, *st, *acc;
  em_status s = ln_parse(a, &axis, &eps);
  if (s) return s;
  int64_t rows, m;
  ln_geometry(in[0], axis, &rows, &m);
  em_dtype dt = em_tensor_dtype(in[0]);
  const void *x = em_tensor_data(in[0]), *sc = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  s = ln_stats(dt, x, rows, m, eps, &st);
  if (s) return s;
  s = scratch((size_t)(2 * m), &acc);
  if (!s) {
    BY_DTYPE(dt, ln_grad_rows, x, sc, dy, em_tensor_data(out[0]), rows, m, st, st + rows);
    BY_DTYPE(dt, ln_param_grads, x, dy, em_tensor_data(out[1]), em_tensor_data(out[2]), rows, m, st, st + rows, acc);
    free(acc);
  }
  free(st);
  return s;
}

/* ------------------------------------------ local response normalisation --- */

typedef struct lrn_params {
  int64_t size;
  double alpha, beta, bias;
} lrn_params;

static em_status lrn_parse(const em_op_args *a, lrn_params *p) {
  int present;
  em_status s = attr_integer(a, "size", 0, &p->size, &present);
  if (!s && !present) s = em_op_fail(a, "attribute 'size' (an odd window of channels) is required");
  if (!s && (p->size < 1 || p->size % 2 == 0))
    s = em_op_fail(a, "attribute 'size' is %lld; it must be odd and >= 1", (long long)p->size);
  if (!s) s = attr_real(a, "alpha", 1e-4, &p->alpha);
  if (!s) s = attr_real(a, "beta", 0.75, &p->beta);
  if (!s) s = attr_real(a, "bias", 1.0, &p->bias);
  if (!s && p->alpha < 0) s = em_op_fail(a, "attribute 'alpha' is %g; it must be >= 0", p->alpha);
  if (!s && p->bias <= 0) s = em_op_fail(a, "attribute 'bias' is %g; it must be > 0", p->bias);
  if (s) return s;
  s = check_float_x(a);
  if (!s && a->in[0].ndim < 2) s = em_op_fail(a, "x must be [N, C, ...] (rank >= 2), got rank %d", a->in[0].ndim);
  return s;
}

static em_status lrn_infer(em_op_args *a) {
  lrn_params p;
  em_status s = lrn_parse(a, &p);
  if (!s) a->out[0] = a->in[0];
  return s;
}

static em_status lrn_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  lrn_params p;
  em_status s = lrn_parse(a, &p);
  if (s) return s;
  nc_geom g = nc_geometry(in[0], 0);
  BY_DTYPE(em_tensor_dtype(in[0]), lrn_fwd, em_tensor_data(in[0]), em_tensor_data(out[0]), g.n, g.c, g.inner,
           p.size / 2, p.alpha / (double)p.size, p.bias, p.beta, a->portable);
  return EM_OK;
}

static em_status lrn_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                              em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {x[0], dy[0]};
  return em_apply(g, "_lrn_grad", in, 2, a->attrs, a->n_attrs, &din[0], 1);
}

static em_status lrn_grad_infer(em_op_args *a) {
  lrn_params p;
  em_status s = lrn_parse(a, &p);
  if (!s) s = check_like(a, 1, "dy", &a->in[0]);
  if (!s) a->out[0] = a->in[0];
  return s;
}

static em_status lrn_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  lrn_params p;
  em_status s = lrn_parse(a, &p);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(in[0]);
  nc_geom g = nc_geometry(in[0], 0);
  int64_t item = g.c * g.inner;
  double *t;
  s = scratch((size_t)item, &t);
  if (s) return s;
  size_t bytes = (size_t)item * em_dtype_size(dt);
  const char *x = em_tensor_data(in[0]), *dy = em_tensor_data(in[1]);
  char *dx = em_tensor_data(out[0]);
  /* One batch item at a time keeps the scratch at C * spatial. */
  for (int64_t n = 0; n < g.n; n++)
    BY_DTYPE(dt, lrn_grad_item, x + n * bytes, dy + n * bytes, dx + n * bytes, g.c, g.inner, p.size / 2,
             p.alpha / (double)p.size, p.bias, p.beta, t, a->portable);
  free(t);
  return EM_OK;
}

/* -------------------------------------------------------------- dropout --- */

typedef struct dropout_params {
  double ratio;
  int64_t seed, node;
} dropout_params;

static em_status dropout_parse(const em_op_args *a, dropout_params *p) {
  em_status s = attr_real(a, "ratio", 0.5, &p->ratio);
  if (!s && (p->ratio < 0 || p->ratio >= 1))
    s = em_op_fail(a, "attribute 'ratio' is %g; it must be in [0, 1)", p->ratio);
  if (!s) s = attr_integer(a, "seed", 0, &p->seed, NULL);
  if (!s) s = attr_integer(a, "node", a->node, &p->node, NULL);
  if (!s && p->node < 0) s = em_op_fail(a, "attribute 'node' is %lld; it must be >= 0", (long long)p->node);
  if (!s) s = check_float_x(a);
  return s;
}

static em_status dropout_infer(em_op_args *a) {
  dropout_params p;
  em_status s = dropout_parse(a, &p);
  if (!s) a->out[0] = a->in[0];
  return s;
}

static em_status dropout_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  dropout_params p;
  em_status s = dropout_parse(a, &p);
  if (s) return s;
  if (!a->training || p.ratio == 0) {
    copy_if_distinct(out[0], in[0]);
    return EM_OK;
  }
  /* One key per (seed, step, node); element i then takes the splitmix64
   * output at counter i, so any element's bit can be computed alone. */
  uint64_t key = nm_dropout_key((uint64_t)p.seed, a->step, (uint64_t)p.node);
  uint64_t thr = (uint64_t)ceil(p.ratio * 9007199254740992.0); /* keep when the top 53 bits >= ratio * 2^53 */
  BY_DTYPE(em_tensor_dtype(in[0]), dropout, em_tensor_data(in[0]), em_tensor_data(out[0]), em_tensor_numel(in[0]),
           key, thr, 1.0 / (1.0 - p.ratio));
  return EM_OK;
}

/* dx = _dropout_grad(dy): the same mask, fixed to the forward node's index. */
static em_status dropout_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                  const em_var *dy, em_var *din) {
  (void)x;
  (void)y;
  if (dy[0] < 0) return EM_OK;
  dropout_params p;
  em_status s = dropout_parse(a, &p);
  if (s) return s;
  em_attr at[3] = {em_attr_f("ratio", p.ratio), em_attr_i("seed", p.seed), em_attr_i("node", p.node)};
  return em_apply(g, "_dropout_grad", &dy[0], 1, at, 3, &din[0], 1);
}

/* ---------------------------------------------------------------- GPU --- */

/* The gpu members: the same attribute and shape checks as the CPU members,
 * then kernels/norm.cu through ops/norm_gpu.c, which repeat the CPU's sums
 * in the CPU's order (bitwise equal in both modes; LRN's power in portable
 * mode only, see norm_math.h). In the fast mode batch normalisation and its
 * training gradient go through cuDNN where the device may use it (norm_gpu.c's
 * em_norm_gpu_bn_cudnn): equal to the CPU within tolerance, not bitwise. */

static int is_f64(const em_op_args *a) { return a->in[0].dtype == EM_F64; }

static em_norm_gpu_nc nc_of(const em_tensor *x, int per_channel) {
  nc_geom g = nc_geometry(x, per_channel);
  return (em_norm_gpu_nc){g.n, g.c, g.inner, per_channel};
}

static em_status bn_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bn_params p;
  em_status s = bn_parse(a, &p);
  if (s) return s;
  em_norm_gpu_nc g = nc_of(in[0], 1);
  double m = (double)(g.n * g.inner);
  if (a->training && m < 2)
    return em_op_fail(a, "training needs more than one value per channel (N * spatial = %g) for the unbiased "
                         "running variance", m);
  int f64 = is_f64(a);
  const void *x = em_tensor_data(in[0]);
  void *rmean = em_tensor_data(in[3]), *rvar = em_tensor_data(in[4]);
  em_status cs;
  if (em_norm_gpu_bn_cudnn(a, f64, &g, p.eps, p.momentum, x, em_tensor_data(out[0]), em_tensor_data(in[1]),
                           em_tensor_data(in[2]), rmean, rvar, &cs))
    return cs;
  em_norm_gpu_stats st;
  s = a->training ? em_norm_gpu_batch_stats(a, f64, x, &g, p.eps, &st)
                  : em_norm_gpu_running_stats(a, f64, rmean, rvar, g.c, p.eps, &st);
  if (s) return s;
  s = em_norm_gpu_nc_apply(a, f64, x, em_tensor_data(out[0]), &g, &st, em_tensor_data(in[1]), em_tensor_data(in[2]));
  /* The running statistics are state: updated in the state's own device storage, last (an
   * EM_ERR_USE_CPU above leaves them untouched for the CPU member). */
  if (!s && a->training) s = em_norm_gpu_bn_update(a, f64, rmean, rvar, &st, g.c, p.momentum, m / (m - 1));
  em_norm_gpu_stats_free(a, &st);
  return s;
}

static em_status bng_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bn_params p;
  em_status s = bn_parse(a, &p);
  if (s) return s;
  em_norm_gpu_nc g = nc_of(in[0], 1);
  int f64 = is_f64(a);
  const void *x = em_tensor_data(in[0]);
  em_status cs;
  if (em_norm_gpu_bn_grad_cudnn(a, f64, &g, p.eps, x, em_tensor_data(in[1]), em_tensor_data(in[4]),
                                em_tensor_data(out[0]), em_tensor_data(out[1]), em_tensor_data(out[2]), &cs))
    return cs;
  em_norm_gpu_stats st;
  s = a->training ? em_norm_gpu_batch_stats(a, f64, x, &g, p.eps, &st)
                  : em_norm_gpu_running_stats(a, f64, em_tensor_data(in[2]), em_tensor_data(in[3]), g.c, p.eps, &st);
  if (s) return s;
  s = em_norm_gpu_nc_backward(a, f64, x, em_tensor_data(in[1]), em_tensor_data(in[4]), &g, &st, a->training,
                              em_tensor_data(out[0]), em_tensor_data(out[1]), em_tensor_data(out[2]));
  em_norm_gpu_stats_free(a, &st);
  return s;
}

static em_status inorm_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  double eps;
  em_status s = check_epsilon(a, &eps);
  if (s) return s;
  em_norm_gpu_nc g = nc_of(in[0], 0);
  int f64 = is_f64(a);
  em_norm_gpu_stats st;
  s = em_norm_gpu_batch_stats(a, f64, em_tensor_data(in[0]), &g, eps, &st);
  if (s) return s;
  s = em_norm_gpu_nc_apply(a, f64, em_tensor_data(in[0]), em_tensor_data(out[0]), &g, &st, em_tensor_data(in[1]),
                           em_tensor_data(in[2]));
  em_norm_gpu_stats_free(a, &st);
  return s;
}

static em_status inorm_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  double eps;
  em_status s = check_epsilon(a, &eps);
  if (s) return s;
  em_norm_gpu_nc g = nc_of(in[0], 0);
  int f64 = is_f64(a);
  const void *x = em_tensor_data(in[0]);
  em_norm_gpu_stats st;
  s = em_norm_gpu_batch_stats(a, f64, x, &g, eps, &st);
  if (s) return s;
  s = em_norm_gpu_nc_backward(a, f64, x, em_tensor_data(in[1]), em_tensor_data(in[2]), &g, &st, 1,
                              em_tensor_data(out[0]), em_tensor_data(out[1]), em_tensor_data(out[2]));
  em_norm_gpu_stats_free(a, &st);
  return s;
}

static em_status ln_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int axis;
  double eps;
  em_status s = ln_parse(a, &axis, &eps);
  if (s) return s;
  int64_t rows, m;
  ln_geometry(in[0], axis, &rows, &m);
  return em_norm_gpu_ln(a, is_f64(a), em_tensor_data(in[0]), em_tensor_data(in[1]),
                        a->n_in > 2 ? em_tensor_data(in[2]) : NULL, em_tensor_data(out[0]), rows, m, eps);
}

static em_status ln_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int axis;
  double eps;
  em_status s = ln_parse(a, &axis, &eps);
  if (s) return s;
  int64_t rows, m;
  ln_geometry(in[0], axis, &rows, &m);
  return em_norm_gpu_ln_grad(a, is_f64(a), em_tensor_data(in[0]), em_tensor_data(in[1]), em_tensor_data(in[2]),
                             em_tensor_data(out[0]), em_tensor_data(out[1]), em_tensor_data(out[2]), rows, m, eps);
}

static em_status lrn_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  lrn_params p;
  em_status s = lrn_parse(a, &p);
  if (s) return s;
  nc_geom g = nc_geometry(in[0], 0);
  return em_norm_gpu_lrn(a, is_f64(a), em_tensor_data(in[0]), em_tensor_data(out[0]), g.n, g.c, g.inner, p.size / 2,
                         p.alpha / (double)p.size, p.bias, p.beta);
}

static em_status lrn_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  lrn_params p;
  em_status s = lrn_parse(a, &p);
  if (s) return s;
  nc_geom g = nc_geometry(in[0], 0);
  return em_norm_gpu_lrn_grad(a, is_f64(a), em_tensor_data(in[0]), em_tensor_data(in[1]), em_tensor_data(out[0]), g.n,
                              g.c, g.inner, p.size / 2, p.alpha / (double)p.size, p.bias, p.beta);
}

/* Dropout and its gradient: the CPU's key and threshold (norm_math.h), the same mask. */
static em_status dropout_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  dropout_params p;
  em_status s = dropout_parse(a, &p);
  if (s) return s;
  void *y = em_tensor_data(out[0]);
  const void *x = em_tensor_data(in[0]);
  int64_t n = em_tensor_numel(in[0]);
  if (!a->training || p.ratio == 0) {
    if (y == x) return EM_OK;
    s = em_memcpy_d2d(a->dev, y, x, (size_t)n * em_dtype_size(a->in[0].dtype), a->stream);
    return s ? em_fail_context(s, "op '%s': copying %lld elements", a->def->name, (long long)n) : EM_OK;
  }
  /* the kernel derives the key from the run's step in device memory (norm_gpu.c) */
  uint64_t thr = (uint64_t)ceil(p.ratio * 9007199254740992.0);
  return em_norm_gpu_dropout(a, is_f64(a), x, y, n, (uint64_t)p.seed, (uint64_t)p.node, thr, 1.0 / (1.0 - p.ratio));
}

/* ----------------------------------------------------------- the table --- */

#define BN_STATE ((1u << 3) | (1u << 4))

#define NORM_DEF(NAME, DOC, MIN_IN, MAX_IN, N_OUT, NO_GRAD, STATE, INPLACE, INFER, CPU, GPU, BACKWARD, ATTRS)     \
  {.name = NAME, .doc = DOC, .min_inputs = MIN_IN, .max_inputs = MAX_IN, .n_outputs = N_OUT, .no_grad = NO_GRAD,  \
   .state_inputs = STATE, .inplace = INPLACE, .infer = INFER, .cpu = CPU, .gpu = GPU, .backward = BACKWARD,       \
   .attrs = ATTRS}

/* Every gradient op receives its forward's attributes wholesale, so it takes the same names. */
/* dropout and its gradient draw the mask of the run's step, which their gpu member reads from
 * device memory (op.h reads_step) */
#define DROPOUT_DEF(NAME, DOC)                                                                                   \
  {.name = NAME, .doc = DOC, .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,                       \
   .infer = dropout_infer, .cpu = dropout_cpu, .gpu = dropout_gpu, .backward = dropout_backward,                   \
   .attrs = EM_ATTRS("ratio", "seed", "node"), .reads_step = 1}

const em_op_def em_ops_norm[] = {
  NORM_DEF("batch_normalization",
           "batch_normalization(x[N,C,...], scale[C], bias[C], running_mean[C], running_var[C]): epsilon=1e-5, "
           "momentum=0.9; training uses batch statistics and updates the running ones in place (unbiased variance)",
           5, 5, 1, BN_STATE, BN_STATE, 0, bn_infer, bn_cpu, bn_gpu, bn_backward, EM_ATTRS("epsilon", "momentum")),
  NORM_DEF("_batch_norm_grad",
           "_batch_norm_grad(x, scale, running_mean, running_var, dy) -> dx, dscale, dbias: epsilon, momentum; "
           "through the batch statistics when training",
           5, 5, 3, 0x1f, 0, 0, bng_infer, bng_cpu, bng_gpu, NULL, EM_ATTRS("epsilon", "momentum")),
  NORM_DEF("layer_normalization",
           "layer_normalization(x, scale, [bias]) over x.shape[axis:]: axis=-1, epsilon=1e-5; scale and bias shaped "
           "x.shape[axis:]",
           2, 3, 1, 0, 0, 0, ln_infer, ln_cpu, ln_gpu, ln_backward, EM_ATTRS("axis", "epsilon")),
  NORM_DEF("_layer_norm_grad", "_layer_norm_grad(x, scale, dy) -> dx, dscale, dbias: axis, epsilon", 3, 3, 3, 0x7, 0,
           0, ln_grad_infer, ln_grad_cpu, ln_grad_gpu, NULL, EM_ATTRS("axis", "epsilon")),
  NORM_DEF("instance_normalization",
           "instance_normalization(x[N,C,spatial...], scale[C], bias[C]): epsilon=1e-5; each (n, c) over the spatial "
           "axes",
           3, 3, 1, 0, 0, 0, inorm_infer, inorm_cpu, inorm_gpu, inorm_backward, EM_ATTRS("epsilon")),
  NORM_DEF("_instance_norm_grad", "_instance_norm_grad(x, scale, dy) -> dx, dscale, dbias: epsilon", 3, 3, 3, 0x7, 0,
           0, inorm_grad_infer, inorm_grad_cpu, inorm_grad_gpu, NULL, EM_ATTRS("epsilon")),
  NORM_DEF("local_response_normalization",
           "ONNX LRN across channels of x[N,C,...]: size (odd, required), alpha=1e-4, beta=0.75, bias=1.0", 1, 1, 1,
           0, 0, 0, lrn_infer, lrn_cpu, lrn_gpu, lrn_backward, EM_ATTRS("size", "alpha", "beta", "bias")),
  NORM_DEF("_lrn_grad", "_lrn_grad(x, dy) -> dx: size, alpha, beta, bias", 2, 2, 1, 0x3, 0, 0, lrn_grad_infer,
           lrn_grad_cpu, lrn_grad_gpu, NULL, EM_ATTRS("size", "alpha", "beta", "bias")),
  DROPOUT_DEF("dropout", "dropout(x): ratio=0.5 in [0,1), seed=0, node (default: this node); training keeps with "
                         "probability 1-ratio, scaled by 1/(1-ratio); identity in inference"),
  DROPOUT_DEF("_dropout_grad", "_dropout_grad(dy): dropout's mask and scale applied to dy: ratio, seed, node"),
};
const size_t em_ops_norm_count = sizeof em_ops_norm / sizeof em_ops_norm[0];
