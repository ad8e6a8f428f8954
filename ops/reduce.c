/* Reductions: sums, means, extrema, products and norms over a set of axes,
 * argmax / argmin along one axis, and the fused gradient of the reductions.
 *
 * Ops (x: the input; "reduced elements": those of x that map onto one output)
 *   reduce_sum          f32 f64 i32 i64   sum
 *   reduce_mean         f32 f64           sum / n
 *   reduce_max          f32 f64 i32 i64   largest (NaN propagates)
 *   reduce_min          f32 f64 i32 i64   smallest (NaN propagates)
 *   reduce_prod         f32 f64 i32 i64   product
 *   reduce_log_sum_exp  f32 f64           m + log(sum(exp(x - m))), m = max (stable)
 *   reduce_log_sum      f32 f64           log(sum(x))
 *   reduce_l1           f32 f64           sum(|x|)
 *   reduce_l2           f32 f64           sqrt(sum(x^2))
 *   reduce_sum_square   f32 f64           sum(x^2)
 * Attributes (ONNX names):
 *   axes      INTS  axes to reduce; negative counts from the end; a repeated
 *                   axis is refused; absent or empty: every axis
 *   keepdims  INT   1 keeps reduced axes with size 1; default 0 (numpy)
 * Integer sums and products wrap around modulo 2^bits (two's complement), as
 * numpy's do; integer inputs receive no gradient.
 * Reducing over nothing (a reduced axis of size 0): sum, l1, l2, sum_square
 * give 0, prod gives 1, mean gives NaN (0/0), log_sum and log_sum_exp give
 * -inf; max and min refuse it (the extremum of nothing is undefined) with an
 * error naming the axis, at build time or, for a dynamic axis, at run time.
 *
 *   argmax, argmin      any numeric dtype (f32 f64 f16 bf16 i32 i64 u8) -> i64
 *   axis              INT   the axis searched (negative allowed); default 0
 *   keepdims          INT   default 0
 *   select_last_index INT   0: the first of equal extremes (default); 1: the last
 * NaN counts as the extreme for both (numpy's argmax/argmin return the first
 * NaN). An empty axis is refused. No gradient flows through them.
 *
 *   _reduce_grad(x, y, dy) -> dx   internal: the backward of every float
 *                   reduction, fused. Attributes: the forward's axes and
 *                   keepdims, plus fn (STRING: sum mean max min prod
 *                   log_sum_exp log_sum l1 l2 sum_square). dy (shaped like y)
 *                   is broadcast back over the reduced axes and multiplied by
 *                   the local derivative:
 *     sum 1; mean 1/n; max and min: all of dy goes to the FIRST extreme
 *     element in row-major order (others get 0; ties have measure zero);
 *     prod: the product of the other elements (exact with zeros: one zero gets
 *     the product of the rest, two or more zeros give 0 everywhere);
 *     log_sum_exp: softmax exp(x - y) (0 where y is -inf); l1: sign(x) (0 at 0);
 *     l2: x / y (0 where y is 0); sum_square: 2x; log_sum: 1 / sum(x).
 *
 * Determinism. Each output's accumulation order depends only on the shapes
 * and axes, never on the thread count: after merging adjacent axes, either
 *  (A) the innermost reduced run is contiguous: it is summed in fixed 4096-
 *      element segments, each over 8 interleaved lanes combined pairwise
 *      (a run shorter than 8: in order), and segments are folded in order
 *      (in fixed blocks of segments); or
 *  (B) the innermost axis is kept: outputs next to each other are
 *      accumulated side by side, row by row in row-major order of the reduced
 *      elements (in fixed blocks of rows), so memory is read contiguously.
 * Threads split outputs, or (when outputs are few) the fixed blocks, whose
 * partial results are then folded in the same order as a single thread does.
 * f32 inputs accumulate in double. The per-element arithmetic (transforms,
 * folds, the finishing mean / sqrt / log, the gradient) is
 * kernels/reduce_math.h's, log_sum_exp and log_sum use its binary64 exp and
 * log (not libm's), and the GPU kernels (kernels/reduce_ops.cu, launched by
 * ops/reduce_gpu.c) follow the same plan and order with one thread per
 * segment lane, (output, block of rows) or fixed block: every device gives
 * the CPU's bits, in both numeric modes. argmax / argmin pick the same element
 * on every device (equal extremes resolved by position). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "../kernels/em_math.h"
#include "../kernels/reduce_math.h"
#include "gpu_glue.h"
#include "reduce_gpu.h"

#define RD_LANES RDM_LANES
#define RD_SEG RDM_SEG         /* A: elements per segment (lane partial) */
#define RD_BLOCK_WORK 32768    /* elements folded per fixed block */
#define RD_SUB 256             /* B: columns accumulated side by side on the stack */
#define RD_MIN_ROWS 16         /* B: rows per block at least */
#define RD_PAR_MIN 32768       /* below this much work: one thread */

/* ------------------------------------------------------------ functions --- */

/* The values are reduce_math.h's RDM_FN_*, which the kernels take. */
typedef enum rd_fn {
  RD_SUM = RDM_FN_SUM, RD_MEAN = RDM_FN_MEAN, RD_MAX = RDM_FN_MAX, RD_MIN = RDM_FN_MIN, RD_PROD = RDM_FN_PROD,
  RD_LSE = RDM_FN_LSE, RD_LOG_SUM = RDM_FN_LOG_SUM, RD_L1 = RDM_FN_L1, RD_L2 = RDM_FN_L2, RD_SUMSQ = RDM_FN_SUMSQ,
  RD_N_FN
} rd_fn;

static const char *const rd_fn_names[RD_N_FN] = {"sum", "mean", "max", "min", "prod", "log_sum_exp", "log_sum",
                                                 "l1", "l2", "sum_square"};

static int rd_fn_find(const char *s) {
  for (int i = 0; i < RD_N_FN; i++)
    if (s && !strcmp(s, rd_fn_names[i])) return i;
  return -1;
}

/* The reduction an op computes, from its name ("reduce_" + fn). */
static rd_fn rd_fn_of_op(const em_op_def *def) { return (rd_fn)rd_fn_find(def->name + strlen("reduce_")); }

static int rd_fn_takes_ints(rd_fn f) { return f == RD_SUM || f == RD_MAX || f == RD_MIN || f == RD_PROD; }

/* ---------------------------------------------------------- attributes --- */

static const em_attr *rd_attr(const em_op_args *a, const char *name) {
  for (int i = 0; i < a->n_attrs; i++)
    if (a->attrs[i].name && !strcmp(a->attrs[i].name, name)) return &a->attrs[i];
  return NULL;
}

/* An INT attribute that must be one of lo..hi. */
static em_status rd_int_attr(const em_op_args *a, const char *name, int64_t dflt, int64_t lo, int64_t hi,
                             int64_t *out) {
  const em_attr *t = rd_attr(a, name);
  *out = dflt;
  if (!t) return EM_OK;
  if (t->type != EM_ATTR_INT) return em_op_fail(a, "attribute '%s' must be an INT", name);
  if (t->i < lo || t->i > hi)
    return em_op_fail(a, "attribute '%s' is %lld; expected %lld to %lld", name, (long long)t->i, (long long)lo,
                      (long long)hi);
  *out = t->i;
  return EM_OK;
}

/* The reduced axes as a bit mask (bit i: axis i), from "axes" (absent or
 * empty: all axes); refuses out-of-range and repeated axes. */
static em_status rd_axes_mask(const em_op_args *a, int ndim, unsigned *mask) {
  const em_attr *t = rd_attr(a, "axes");
  *mask = 0;
  if (!t || (t->type == EM_ATTR_INTS && t->n == 0)) {
    *mask = ndim ? (1u << ndim) - 1u : 0u;
    return EM_OK;
  }
  if (t->type != EM_ATTR_INTS) return em_op_fail(a, "attribute 'axes' must be a list of INTS");
  for (int i = 0; i < t->n; i++) {
    int64_t ax = t->ints[i];
    if (ax < -ndim || ax >= ndim)
      return em_op_fail(a, "axes[%d] = %lld is out of range for rank %d (expected %d to %d)", i, (long long)ax, ndim,
                        -ndim, ndim - 1);
    int k = (int)(ax < 0 ? ax + ndim : ax);
    if (*mask & (1u << k)) return em_op_fail(a, "axes lists axis %d twice", k);
    *mask |= 1u << k;
  }
  return EM_OK;
}

/* x's shape with the masked axes reduced (kept as 1 with keepdims). */
static void rd_reduced_shape(const em_shape *x, unsigned mask, int keepdims, em_dtype dtype, em_shape *out) {
  memset(out, 0, sizeof *out);
  out->dtype = dtype;
  for (int i = 0; i < x->ndim; i++) {
    if (!(mask & (1u << i))) out->dims[out->ndim++] = x->dims[i];
    else if (keepdims) out->dims[out->ndim++] = 1;
  }
}

/* The first reduced axis of concrete size 0, or -1. */
static int rd_empty_axis(const em_shape *x, unsigned mask) {
  for (int i = 0; i < x->ndim; i++)
    if ((mask & (1u << i)) && x->dims[i] == 0) return i;
  return -1;
}

/* ---------------------------------------------------------------- plans --- */

/* The offset of the t-th position (row-major); idx receives its index. */
static int64_t rd_seek(const rd_walk *w, int64_t t, int64_t *idx) {
  int64_t off = 0;
  for (int k = w->n - 1; k >= 0; k--) {
    idx[k] = t % w->dim[k];
    t /= w->dim[k];
    off += idx[k] * w->stride[k];
  }
  return off;
}

/* The offset of the position after (idx, off); wraps to 0 after the last. */
static int64_t rd_step(const rd_walk *w, int64_t *idx, int64_t off) {
  for (int k = w->n - 1; k >= 0; k--) {
    off += w->stride[k];
    if (++idx[k] < w->dim[k]) return off;
    off -= w->stride[k] * w->dim[k];
    idx[k] = 0;
  }
  return off;
}

static int64_t rd_walk_count(const rd_walk *w) {
  int64_t n = 1;
  for (int k = 0; k < w->n; k++) n *= w->dim[k];
  return n;
}

static void rd_walk_add(rd_walk *w, int64_t dim, int64_t stride) {
  w->dim[w->n] = dim;
  w->stride[w->n] = stride;
  w->n++;
}

static int64_t rd_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t rd_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* nt: the threads that will run it; it sets how columns are split between
 * threads in case B, never an accumulation order. */
static void rd_plan_make(const int64_t *dims, int ndim, unsigned mask, int nt, rd_plan *p) {
  memset(p, 0, sizeof *p);
  int64_t numel = 1, n_out = 1, n_red = 1;
  for (int i = 0; i < ndim; i++) {
    numel *= dims[i];
    if (mask & (1u << i)) n_red *= dims[i];
    else n_out *= dims[i];
  }
  p->n_out = n_out;
  p->n_red = n_red;
  if (numel == 0) {
    p->empty = 1;
    return;
  }
  /* Merge axes into groups; a group's stride is its innermost axis's. */
  int64_t gdim[EM_MAX_DIMS], gstride[EM_MAX_DIMS], stride = 1, st[EM_MAX_DIMS];
  int gred[EM_MAX_DIMS], m = 0;
  for (int i = ndim - 1; i >= 0; i--) {
    st[i] = stride;
    stride *= dims[i];
  }
  for (int i = 0; i < ndim; i++) {
    if (dims[i] == 1) continue;
    int r = (mask >> i) & 1u;
    if (m && gred[m - 1] == r) {
      gdim[m - 1] *= dims[i];
      gstride[m - 1] = st[i];
    } else {
      gdim[m] = dims[i];
      gstride[m] = st[i];
      gred[m] = r;
      m++;
    }
  }
  p->inner_reduced = m == 0 || gred[m - 1];
  p->inner = m ? gdim[m - 1] : 1;
  for (int k = 0; k < m - 1; k++) {
    if (gred[k]) rd_walk_add(&p->rows, gdim[k], gstride[k]);
    else rd_walk_add(&p->outer, gdim[k], gstride[k]);
  }
  if (p->inner_reduced) {
    p->n_rows = rd_walk_count(&p->rows);
    p->nchunk = rd_cdiv(p->inner, RD_SEG);
    p->n_seg = p->n_rows * p->nchunk;
    p->seg_per_blk = RD_BLOCK_WORK / rd_min64(p->inner, RD_SEG);
    if (p->seg_per_blk < 1) p->seg_per_blk = 1;
    p->n_blk = rd_cdiv(p->n_seg, p->seg_per_blk);
    p->n_groups = p->n_out;
  } else {
    int64_t n_bases = rd_walk_count(&p->outer), split = 1, jc;
    p->n_rows = rd_walk_count(&p->rows);
    p->rows_per_blk = RD_BLOCK_WORK / p->inner;
    if (p->rows_per_blk < RD_MIN_ROWS) p->rows_per_blk = RD_MIN_ROWS;
    p->n_blk = rd_cdiv(p->n_rows, p->rows_per_blk);
    /* Whole rows per group (contiguous reads) unless that leaves threads idle. */
    if (nt > 1 && n_bases < 2 * nt) split = rd_cdiv(2 * nt, n_bases);
    jc = rd_cdiv(rd_cdiv(p->inner, split), 8) * 8;
    if (jc < 64) jc = 64;
    p->jc = rd_min64(jc, p->inner);
    p->n_jc = rd_cdiv(p->inner, p->jc);
    p->n_groups = n_bases * p->n_jc;
  }
}

/* B: the block base, first output and width of group g. */
static void rd_group(const rd_plan *p, int64_t g, int64_t *base, int64_t *o0, int64_t *w) {
  int64_t b = g / p->n_jc, j0 = (g % p->n_jc) * p->jc, idx[EM_MAX_DIMS];
  *base = rd_seek(&p->outer, b, idx) + j0;
  *o0 = b * p->inner + j0;
  *w = rd_min64(p->jc, p->inner - j0);
}

/* ------------------------------------------------------------- kernels --- */

/* Where finished accumulators go: put(sink, o0, n, acc) receives the
 * accumulators (of the kernel's type A) of outputs o0 .. o0 + n - 1. It is
 * called from any thread, for disjoint ranges. */
typedef struct rd_sink {
  void (*put)(const struct rd_sink *s, int64_t o0, int64_t n, const void *acc);
  rd_fn f;
  int64_t n_red;
  const double *shift;        /* log_sum_exp: the per-output shift */
  void *out;                  /* output elements of dtype dt */
  em_dtype dt;
} rd_sink;

#define RD_TILE 512            /* A: outputs finished per put */

/* One reduction kernel for element type T, accumulator A: INIT the identity,
 * TR(v, s) the per-element transform (s: the output's shift, used by
 * log_sum_exp only), COMB(a, b) the fold. NAME##_run(x, plan, shift, sink)
 * hands every output's accumulator to the sink. */
#define RD_KERNEL(NAME, T, A, INIT, TR, COMB)                                                                         \
  /* A: a contiguous run; 8 interleaved lanes folded pairwise (runs shorter                                           \
   * than 8: in order). */                                                                                            \
  static inline A NAME##_seg(const T *restrict x, int64_t n, double sh) {                                             \
    (void)sh;                                                                                                         \
    if (n < RD_LANES) {                                                                                               \
      A a = INIT;                                                                                                     \
      for (int64_t i = 0; i < n; i++) a = COMB(a, TR(x[i], sh));                                                      \
      return a;                                                                                                       \
    }                                                                                                                 \
    A l0 = INIT, l1 = INIT, l2 = INIT, l3 = INIT, l4 = INIT, l5 = INIT, l6 = INIT, l7 = INIT;                         \
    int64_t i = 0;                                                                                                    \
    for (; i + RD_LANES <= n; i += RD_LANES) {                                                                        \
      l0 = COMB(l0, TR(x[i], sh));                                                                                    \
      l1 = COMB(l1, TR(x[i + 1], sh));                                                                                \
      l2 = COMB(l2, TR(x[i + 2], sh));                                                                                \
      l3 = COMB(l3, TR(x[i + 3], sh));                                                                                \
      l4 = COMB(l4, TR(x[i + 4], sh));                                                                                \
      l5 = COMB(l5, TR(x[i + 5], sh));                                                                                \
      l6 = COMB(l6, TR(x[i + 6], sh));                                                                                \
      l7 = COMB(l7, TR(x[i + 7], sh));                                                                                \
    }                                                                                                                 \
    A l[RD_LANES] = {l0, l1, l2, l3, l4, l5, l6, l7};                                                                 \
    for (int k = 0; i < n; i++, k++) l[k] = COMB(l[k], TR(x[i], sh));                                                 \
    for (int w = RD_LANES / 2; w; w /= 2)                                                                             \
      for (int k = 0; k < w; k++) l[k] = COMB(l[k], l[k + w]);                                                        \
    return l[0];                                                                                                      \
  }                                                                                                                   \
  /* A: the fold of segment block blk of the output at base. */                                                       \
  static A NAME##_ablk(const T *x, const rd_plan *p, int64_t base, int64_t blk, double sh) {                          \
    int64_t s0 = blk * p->seg_per_blk, s1 = rd_min64(s0 + p->seg_per_blk, p->n_seg), idx[EM_MAX_DIMS];                \
    int64_t c = s0 % p->nchunk, off = rd_seek(&p->rows, s0 / p->nchunk, idx);                                         \
    A acc = INIT;                                                                                                     \
    for (int64_t s = s0; s < s1; s++) {                                                                               \
      int64_t at = c * RD_SEG;                                                                                        \
      acc = COMB(acc, NAME##_seg(x + base + off + at, rd_min64(RD_SEG, p->inner - at), sh));                          \
      if (++c == p->nchunk) {                                                                                         \
        c = 0;                                                                                                        \
        off = rd_step(&p->rows, idx, off);                                                                            \
      }                                                                                                               \
    }                                                                                                                 \
    return acc;                                                                                                       \
  }                                                                                                                   \
  /* A: full folds of outputs [o0, o1) into tile[0 .. o1 - o0). */                                                    \
  static void NAME##_arange(const T *x, const rd_plan *p, int64_t o0, int64_t o1, const double *sh, A *tile) {        \
    int64_t idx[EM_MAX_DIMS], base = rd_seek(&p->outer, o0, idx);                                                     \
    if (p->n_seg == 1) { /* one short run per output: the general fold below, without its overhead */                 \
      for (int64_t o = o0; o < o1; o++) {                                                                             \
        tile[o - o0] = COMB(INIT, COMB(INIT, NAME##_seg(x + base, p->inner, sh ? sh[o] : 0.0)));                      \
        base = rd_step(&p->outer, idx, base);                                                                         \
      }                                                                                                               \
      return;                                                                                                         \
    }                                                                                                                 \
    for (int64_t o = o0; o < o1; o++) {                                                                               \
      double s = sh ? sh[o] : 0.0;                                                                                    \
      A a = INIT;                                                                                                     \
      for (int64_t b = 0; b < p->n_blk; b++) a = COMB(a, NAME##_ablk(x, p, base, b, s));                              \
      tile[o - o0] = a;                                                                                               \
      base = rd_step(&p->outer, idx, base);                                                                           \
    }                                                                                                                 \
  }                                                                                                                   \
  /* B: dst[j] = COMB(dst[j], fold of row block blk) for the w outputs at                                             \
   * base, RD_SUB columns at a time (the row block stays in cache), four rows                                         \
   * per pass (still folded one row after the other). */                                                              \
  static void NAME##_bblk(const T *x, const rd_plan *p, int64_t base, int64_t blk, int64_t w, const double *shv,      \
                          A *restrict dst) {                                                                          \
    (void)shv;                                                                                                        \
    int64_t t0 = blk * p->rows_per_blk, t1 = rd_min64(t0 + p->rows_per_blk, p->n_rows);                               \
    int64_t idx0[EM_MAX_DIMS], idx[EM_MAX_DIMS], off0 = rd_seek(&p->rows, t0, idx0);                                  \
    for (int64_t c0 = 0; c0 < w; c0 += RD_SUB) {                                                                      \
      int64_t cw = rd_min64(RD_SUB, w - c0), off = off0, t = t0;                                                      \
      A part[RD_SUB];                                                                                                 \
      memcpy(idx, idx0, sizeof idx);                                                                                  \
      for (int64_t j = 0; j < cw; j++) part[j] = INIT;                                                                \
      for (; t + 4 <= t1; t += 4) {                                                                                   \
        const T *restrict r0 = x + base + c0 + off;                                                                   \
        off = rd_step(&p->rows, idx, off);                                                                            \
        const T *restrict r1 = x + base + c0 + off;                                                                   \
        off = rd_step(&p->rows, idx, off);                                                                            \
        const T *restrict r2 = x + base + c0 + off;                                                                   \
        off = rd_step(&p->rows, idx, off);                                                                            \
        const T *restrict r3 = x + base + c0 + off;                                                                   \
        off = rd_step(&p->rows, idx, off);                                                                            \
        _Pragma("omp simd") for (int64_t j = 0; j < cw; j++) {                                                        \
          A a = COMB(part[j], TR(r0[j], shv[c0 + j]));                                                                \
          a = COMB(a, TR(r1[j], shv[c0 + j]));                                                                        \
          a = COMB(a, TR(r2[j], shv[c0 + j]));                                                                        \
          part[j] = COMB(a, TR(r3[j], shv[c0 + j]));                                                                  \
        }                                                                                                             \
      }                                                                                                               \
      for (; t < t1; t++) {                                                                                           \
        const T *restrict xr = x + base + c0 + off;                                                                   \
        _Pragma("omp simd") for (int64_t j = 0; j < cw; j++) part[j] = COMB(part[j], TR(xr[j], shv[c0 + j]));         \
        off = rd_step(&p->rows, idx, off);                                                                            \
      }                                                                                                               \
      for (int64_t j = 0; j < cw; j++) dst[c0 + j] = COMB(dst[c0 + j], part[j]);                                      \
    }                                                                                                                 \
  }                                                                                                                   \
  /* B: full folds of the w outputs at base into dst. */                                                              \
  static void NAME##_bcols(const T *x, const rd_plan *p, int64_t base, int64_t w, const double *shv, A *dst) {        \
    for (int64_t j = 0; j < w; j++) dst[j] = INIT;                                                                    \
    for (int64_t b = 0; b < p->n_blk; b++) NAME##_bblk(x, p, base, b, w, shv, dst);                                   \
  }                                                                                                                   \
  /* B: group g, whole (its accumulators on the heap when wide), or RD_SUB                                            \
   * columns at a time when there is no memory for that (same bits, slower). */                                       \
  static void NAME##_bgroup(const T *x, const rd_plan *p, int64_t g, const double *sh, const rd_sink *sink) {         \
    int64_t base, o0, w;                                                                                              \
    A stack[RD_SUB];                                                                                                  \
    rd_group(p, g, &base, &o0, &w);                                                                                   \
    A *dst = w <= RD_SUB ? stack : malloc(sizeof(A) * (size_t)w);                                                     \
    if (dst) {                                                                                                        \
      NAME##_bcols(x, p, base, w, sh ? sh + o0 : NULL, dst);                                                          \
      sink->put(sink, o0, w, dst);                                                                                    \
      if (dst != stack) free(dst);                                                                                    \
      return;                                                                                                         \
    }                                                                                                                 \
    for (int64_t c0 = 0; c0 < w; c0 += RD_SUB) {                                                                      \
      int64_t cw = rd_min64(RD_SUB, w - c0);                                                                          \
      NAME##_bcols(x, p, base + c0, cw, sh ? sh + o0 + c0 : NULL, stack);                                             \
      sink->put(sink, o0 + c0, cw, stack);                                                                            \
    }                                                                                                                 \
  }                                                                                                                   \
  /* Few outputs, many blocks: blocks in parallel, then folded in order. Slots                                        \
   * start at INIT, so each holds COMB(INIT, partial), which folds to the same                                        \
   * bits as the partial itself. */                                                                                   \
  static int NAME##_by_blocks(const T *x, const rd_plan *p, const double *sh, const rd_sink *sink, int nt) {          \
    int64_t width = p->inner_reduced ? 1 : p->jc, items = p->n_groups * p->n_blk;                                     \
    A *part = malloc(sizeof(A) * (size_t)(items * width));                                                            \
    if (!part) return 0;                                                                                              \
    for (int64_t i = 0; i < items * width; i++) part[i] = INIT;                                                       \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t i = 0; i < items; i++) {                \
      int64_t g = i / p->n_blk, b = i % p->n_blk, idx[EM_MAX_DIMS];                                                   \
      if (p->inner_reduced) {                                                                                         \
        part[i] = NAME##_ablk(x, p, rd_seek(&p->outer, g, idx), b, sh ? sh[g] : 0.0);                                 \
      } else {                                                                                                        \
        int64_t base, o0, w;                                                                                          \
        rd_group(p, g, &base, &o0, &w);                                                                               \
        NAME##_bblk(x, p, base, b, w, sh ? sh + o0 : NULL, part + i * width);                                         \
      }                                                                                                               \
    }                                                                                                                 \
    for (int64_t g = 0; g < p->n_groups; g++) {                                                                       \
      int64_t o0 = g, w = 1, base;                                                                                    \
      A *first = part + g * p->n_blk * width;                                                                         \
      if (!p->inner_reduced) rd_group(p, g, &base, &o0, &w);                                                          \
      for (int64_t j = 0; j < w; j++) {                                                                               \
        A a = INIT;                                                                                                   \
        for (int64_t b = 0; b < p->n_blk; b++) a = COMB(a, first[b * width + j]);                                     \
        first[j] = a;                                                                                                 \
      }                                                                                                               \
      sink->put(sink, o0, w, first);                                                                                  \
    }                                                                                                                 \
    free(part);                                                                                                       \
    return 1;                                                                                                         \
  }                                                                                                                   \
  static void NAME##_run(const void *xv, const rd_plan *p, const double *sh, const rd_sink *sink) {                   \
    const T *x = xv;                                                                                                  \
    int nt = em_cpu_threads();                                                                                        \
    int64_t work = p->n_out * p->n_red;                                                                               \
    int par = work > RD_PAR_MIN && nt > 1;                                                                            \
    if (p->empty) { /* every output reduces nothing: the identity */                                                  \
      A tile[RD_TILE];                                                                                                \
      for (int64_t j = 0; j < RD_TILE; j++) tile[j] = INIT;                                                           \
      for (int64_t o = 0; o < p->n_out; o += RD_TILE) sink->put(sink, o, rd_min64(RD_TILE, p->n_out - o), tile);      \
      return;                                                                                                         \
    }                                                                                                                 \
    if (par && p->n_groups < 2 * nt && p->n_blk > 1 && NAME##_by_blocks(x, p, sh, sink, nt)) return;                  \
    if (p->inner_reduced) {                                                                                           \
      int64_t per = rd_cdiv(p->n_out, (int64_t)(par ? nt : 1) * 8), n_chunks;                                         \
      if (per < 1) per = 1;                                                                                           \
      n_chunks = rd_cdiv(p->n_out, per);                                                                              \
      _Pragma("omp parallel for schedule(static) num_threads(nt) if (par)") for (int64_t c = 0; c < n_chunks;         \
                                                                                c++) {                                \
        A tile[RD_TILE];                                                                                              \
        for (int64_t o = c * per, end = rd_min64((c + 1) * per, p->n_out); o < end; o += RD_TILE) {                   \
          int64_t o1 = rd_min64(o + RD_TILE, end);                                                                    \
          NAME##_arange(x, p, o, o1, sh, tile);                                                                       \
          sink->put(sink, o, o1 - o, tile);                                                                           \
        }                                                                                                             \
      }                                                                                                               \
    } else {                                                                                                          \
      _Pragma("omp parallel for schedule(static) num_threads(nt) if (par)") for (int64_t g = 0; g < p->n_groups;      \
                                                                                g++)                                  \
        NAME##_bgroup(x, p, g, sh, sink);                                                                             \
    }                                                                                                                 \
  }

#define TR_F(v, s) ((double)(v))
#define TR_ABS(v, s) fabs((double)(v))
#define TR_SQ(v, s) ((double)(v) * (double)(v))
#define TR_EXP(v, s) rdm_exp_d((double)(v) - (s))
#define TR_ISZERO(v, s) ((v) == 0 ? 1.0 : 0.0)
#define TR_NONZERO(v, s) ((v) == 0 ? 1.0 : (double)(v))
#define TR_U(v, s) ((uint64_t)(v))
#define TR_I(v, s) ((int64_t)(v))
#define C_ADD(a, b) ((a) + (b))
#define C_MUL(a, b) ((a) * (b))
/* NaN wins (propagates), as in numpy. */
#define C_FMAX(a, b) rdm_fmax(a, b)
#define C_FMIN(a, b) rdm_fmin(a, b)
#define C_IMAX(a, b) ((b) > (a) ? (b) : (a))
#define C_IMIN(a, b) ((b) < (a) ? (b) : (a))

RD_KERNEL(sum_f32, float, double, 0.0, TR_F, C_ADD)
RD_KERNEL(abs_f32, float, double, 0.0, TR_ABS, C_ADD)
RD_KERNEL(sq_f32, float, double, 0.0, TR_SQ, C_ADD)
RD_KERNEL(exp_f32, float, double, 0.0, TR_EXP, C_ADD)
RD_KERNEL(prod_f32, float, double, 1.0, TR_F, C_MUL)
RD_KERNEL(max_f32, float, double, -INFINITY, TR_F, C_FMAX)
RD_KERNEL(min_f32, float, double, INFINITY, TR_F, C_FMIN)
RD_KERNEL(zeros_f32, float, double, 0.0, TR_ISZERO, C_ADD)
RD_KERNEL(nzprod_f32, float, double, 1.0, TR_NONZERO, C_MUL)
RD_KERNEL(sum_f64, double, double, 0.0, TR_F, C_ADD)
RD_KERNEL(abs_f64, double, double, 0.0, TR_ABS, C_ADD)
RD_KERNEL(sq_f64, double, double, 0.0, TR_SQ, C_ADD)
RD_KERNEL(exp_f64, double, double, 0.0, TR_EXP, C_ADD)
RD_KERNEL(prod_f64, double, double, 1.0, TR_F, C_MUL)
RD_KERNEL(max_f64, double, double, -INFINITY, TR_F, C_FMAX)
RD_KERNEL(min_f64, double, double, INFINITY, TR_F, C_FMIN)
RD_KERNEL(zeros_f64, double, double, 0.0, TR_ISZERO, C_ADD)
RD_KERNEL(nzprod_f64, double, double, 1.0, TR_NONZERO, C_MUL)
RD_KERNEL(sum_i32, int32_t, uint64_t, 0u, TR_U, C_ADD)
RD_KERNEL(prod_i32, int32_t, uint64_t, 1u, TR_U, C_MUL)
RD_KERNEL(max_i32, int32_t, int64_t, INT64_MIN, TR_I, C_IMAX)
RD_KERNEL(min_i32, int32_t, int64_t, INT64_MAX, TR_I, C_IMIN)
RD_KERNEL(sum_i64, int64_t, uint64_t, 0u, TR_U, C_ADD)
RD_KERNEL(prod_i64, int64_t, uint64_t, 1u, TR_U, C_MUL)
RD_KERNEL(max_i64, int64_t, int64_t, INT64_MIN, TR_I, C_IMAX)
RD_KERNEL(min_i64, int64_t, int64_t, INT64_MAX, TR_I, C_IMIN)

/* The float kernels of one dtype, by role. */
typedef void (*rd_kernel_fn)(const void *x, const rd_plan *p, const double *sh, const rd_sink *sink);
typedef struct rd_fset {
  rd_kernel_fn sum, abs, sq, exp, prod, max, min, zeros, nzprod;
} rd_fset;

static const rd_fset rd_fset_f32 = {sum_f32_run, abs_f32_run,  sq_f32_run,    exp_f32_run,   prod_f32_run,
                                    max_f32_run, min_f32_run, zeros_f32_run, nzprod_f32_run};
static const rd_fset rd_fset_f64 = {sum_f64_run, abs_f64_run,  sq_f64_run,    exp_f64_run,   prod_f64_run,
                                    max_f64_run, min_f64_run, zeros_f64_run, nzprod_f64_run};

/* ------------------------------------------------------ arg selection --- */

/* What to select: the maximum (want_max) or minimum, NaN counting as the
 * extreme; of equal extremes the first, or the last when `last`; reported
 * as the position among the output's reduced elements (row-major), or as
 * the element's offset in x when `offsets`. */
typedef struct rd_sel {
  int want_max, last, offsets;
} rd_sel;

/* The selection for each output. V: the compared value type, LOAD its
 * conversion, ISNAN its NaN test. */
#define RD_ARG(NAME, T, V, LOAD, ISNAN)                                                                               \
  static int NAME##_better(V v, int vn, V b, int bn, int want_max, int last) {                                        \
    int c = (vn || bn) ? vn - bn : want_max ? (v > b) - (v < b) : (v < b) - (v > b);                                  \
    return c > 0 || (c == 0 && last);                                                                                 \
  }                                                                                                                   \
  /* A: the output at base. */                                                                                        \
  static int64_t NAME##_aout(const T *x, const rd_plan *p, int64_t base, const rd_sel *sel) {                         \
    int64_t ridx[EM_MAX_DIMS], off = 0, bp = sel->offsets ? base : 0;                                                 \
    V best = LOAD(x[base]);                                                                                           \
    int bn = ISNAN(best);                                                                                             \
    memset(ridx, 0, sizeof ridx);                                                                                     \
    for (int64_t t = 0; t < p->n_rows; t++) {                                                                         \
      const T *xr = x + base + off;                                                                                   \
      for (int64_t i = 0; i < p->inner; i++) {                                                                        \
        V v = LOAD(xr[i]);                                                                                            \
        int vn = ISNAN(v);                                                                                            \
        if (NAME##_better(v, vn, best, bn, sel->want_max, sel->last)) {                                               \
          best = v;                                                                                                   \
          bn = vn;                                                                                                    \
          bp = sel->offsets ? base + off + i : t * p->inner + i;                                                      \
        }                                                                                                             \
      }                                                                                                               \
      off = rd_step(&p->rows, ridx, off);                                                                             \
    }                                                                                                                 \
    return bp;                                                                                                        \
  }                                                                                                                   \
  /* A: outputs [o0, o1). */                                                                                          \
  static void NAME##_arange(const T *x, const rd_plan *p, int64_t o0, int64_t o1, const rd_sel *sel,                  \
                            int64_t *pos) {                                                                           \
    int64_t idx[EM_MAX_DIMS], base = rd_seek(&p->outer, o0, idx);                                                     \
    for (int64_t o = o0; o < o1; o++) {                                                                               \
      pos[o] = NAME##_aout(x, p, base, sel);                                                                          \
      base = rd_step(&p->outer, idx, base);                                                                           \
    }                                                                                                                 \
  }                                                                                                                   \
  /* B: w neighbouring outputs at base, row by row (contiguous reads). */                                             \
  static void NAME##_bcols(const T *x, const rd_plan *p, int64_t base, int64_t w, const rd_sel *sel,                  \
                           V *best, int *bn, int64_t *bp) {                                                           \
    int64_t idx[EM_MAX_DIMS], off = 0;                                                                                \
    memset(idx, 0, sizeof idx);                                                                                       \
    for (int64_t j = 0; j < w; j++) {                                                                                 \
      best[j] = LOAD(x[base + j]);                                                                                    \
      bn[j] = ISNAN(best[j]);                                                                                         \
      bp[j] = sel->offsets ? base + j : 0;                                                                            \
    }                                                                                                                 \
    for (int64_t t = 0; t < p->n_rows; t++) {                                                                         \
      const T *xr = x + base + off;                                                                                   \
      for (int64_t j = 0; j < w; j++) {                                                                               \
        V v = LOAD(xr[j]);                                                                                            \
        int vn = ISNAN(v);                                                                                            \
        if (NAME##_better(v, vn, best[j], bn[j], sel->want_max, sel->last)) {                                         \
          best[j] = v;                                                                                                \
          bn[j] = vn;                                                                                                 \
          bp[j] = sel->offsets ? base + off + j : t;                                                                  \
        }                                                                                                             \
      }                                                                                                               \
      off = rd_step(&p->rows, idx, off);                                                                              \
    }                                                                                                                 \
  }                                                                                                                   \
  /* B: group g; a wide group's state on the heap, or RD_SUB columns at a                                             \
   * time when there is no memory for it (same result, slower). */                                                    \
  static void NAME##_bgroup(const T *x, const rd_plan *p, int64_t g, const rd_sel *sel, int64_t *pos) {               \
    int64_t base, o0, w;                                                                                              \
    rd_group(p, g, &base, &o0, &w);                                                                                   \
    V *best = w > RD_SUB ? malloc(sizeof(V) * (size_t)w) : NULL;                                                      \
    int *bn = best ? malloc(sizeof(int) * (size_t)w) : NULL;                                                          \
    if (bn) {                                                                                                         \
      NAME##_bcols(x, p, base, w, sel, best, bn, pos + o0);                                                           \
    } else {                                                                                                          \
      V sbest[RD_SUB];                                                                                                \
      int sbn[RD_SUB];                                                                                                \
      for (int64_t c0 = 0; c0 < w; c0 += RD_SUB)                                                                      \
        NAME##_bcols(x, p, base + c0, rd_min64(RD_SUB, w - c0), sel, sbest, sbn, pos + o0 + c0);                      \
    }                                                                                                                 \
    free(best);                                                                                                       \
    free(bn);                                                                                                         \
  }                                                                                                                   \
  static void NAME(const void *xv, const rd_plan *p, const rd_sel *sel, int64_t *pos) {                               \
    const T *x = xv;                                                                                                  \
    int nt = em_cpu_threads(), par = p->n_out * p->n_red > RD_PAR_MIN && nt > 1;                                      \
    if (p->inner_reduced) {                                                                                           \
      int64_t per = rd_cdiv(p->n_out, (int64_t)(par ? nt : 1) * 8), n_chunks;                                         \
      if (per < 1) per = 1;                                                                                           \
      n_chunks = rd_cdiv(p->n_out, per);                                                                              \
      _Pragma("omp parallel for schedule(static) num_threads(nt) if (par)") for (int64_t c = 0; c < n_chunks; c++)    \
        NAME##_arange(x, p, c * per, rd_min64((c + 1) * per, p->n_out), sel, pos);                                    \
    } else {                                                                                                          \
      _Pragma("omp parallel for schedule(static) num_threads(nt) if (par)") for (int64_t g = 0; g < p->n_groups;      \
                                                                                g++)                                  \
        NAME##_bgroup(x, p, g, sel, pos);                                                                             \
    }                                                                                                                 \
  }

#define LD_ID(v) (v)
#define LD_I64(v) ((int64_t)(v))
#define LD_F16(v) em_f16_bits_to_f32(v)
#define LD_BF16(v) em_bf16_bits_to_f32(v)
#define NAN_F(v) isnan(v)
#define NAN_NO(v) 0

RD_ARG(arg_f32, float, float, LD_ID, NAN_F)
RD_ARG(arg_f64, double, double, LD_ID, NAN_F)
RD_ARG(arg_f16, uint16_t, float, LD_F16, NAN_F)
RD_ARG(arg_bf16, uint16_t, float, LD_BF16, NAN_F)
RD_ARG(arg_i32, int32_t, int64_t, LD_I64, NAN_NO)
RD_ARG(arg_i64, int64_t, int64_t, LD_ID, NAN_NO)
RD_ARG(arg_u8, uint8_t, int64_t, LD_I64, NAN_NO)

typedef void (*rd_argfn)(const void *x, const rd_plan *p, const rd_sel *sel, int64_t *pos);

static rd_argfn rd_arg_kernel(em_dtype t) {
  switch (t) {
  case EM_F32: return arg_f32;
  case EM_F64: return arg_f64;
  case EM_F16: return arg_f16;
  case EM_BF16: return arg_bf16;
  case EM_I32: return arg_i32;
  case EM_I64: return arg_i64;
  case EM_U8: return arg_u8;
  default: return NULL;
  }
}

/* -------------------------------------------------------------- forward --- */

static em_status rd_infer(em_op_args *a) {
  rd_fn f = rd_fn_of_op(a->def);
  const em_shape *x = &a->in[0];
  if (x->dtype != EM_F32 && x->dtype != EM_F64 && !(rd_fn_takes_ints(f) && (x->dtype == EM_I32 || x->dtype == EM_I64)))
    return em_op_fail(a, "dtype %s is not supported (expected %s)", em_dtype_name(x->dtype),
                      rd_fn_takes_ints(f) ? "f32, f64, i32 or i64" : "f32 or f64");
  unsigned mask;
  int64_t keepdims;
  em_status s = rd_axes_mask(a, x->ndim, &mask);
  if (!s) s = rd_int_attr(a, "keepdims", 0, 0, 1, &keepdims);
  if (s) return s;
  int e = rd_empty_axis(x, mask);
  if (e >= 0 && (f == RD_MAX || f == RD_MIN))
    return em_op_fail(a, "axis %d has size 0: the %s of no elements is undefined", e, rd_fn_names[f]);
  rd_reduced_shape(x, mask, (int)keepdims, x->dtype, &a->out[0]);
  return EM_OK;
}

/* The plan for input shape x reduced over the op's axes (already checked). */
static void rd_plan_for(const em_op_args *a, const em_shape *x, rd_plan *p) {
  unsigned mask;
  if (rd_axes_mask(a, x->ndim, &mask)) mask = 0; /* infer refused it before */
  rd_plan_make(x->dims, x->ndim, mask, em_cpu_threads(), p);
}

/* Sink: finished float outputs (f32 or f64) of reduction s->f. */
#define RD_PUT_FLOAT(OUT_T)                                                                                           \
  do {                                                                                                                \
    OUT_T *out = (OUT_T *)s->out + o0;                                                                                \
    const double nr = (double)s->n_red, *sh = s->shift ? s->shift + o0 : NULL;                                        \
    switch (s->f) {                                                                                                   \
    case RD_MEAN: for (int64_t i = 0; i < n; i++) out[i] = (OUT_T)(acc[i] / nr); break;                               \
    case RD_L2: for (int64_t i = 0; i < n; i++) out[i] = (OUT_T)rdm_finish(RD_L2, acc[i], nr, 0); break;               \
    case RD_LOG_SUM: for (int64_t i = 0; i < n; i++) out[i] = (OUT_T)rdm_finish(RD_LOG_SUM, acc[i], nr, 0); break;     \
    case RD_LSE: for (int64_t i = 0; i < n; i++) out[i] = (OUT_T)rdm_finish(RD_LSE, acc[i], nr, sh[i]); break;      \
    default: for (int64_t i = 0; i < n; i++) out[i] = (OUT_T)acc[i]; break;                                           \
    }                                                                                                                 \
  } while (0)

static void rd_put_float(const rd_sink *s, int64_t o0, int64_t n, const void *accv) {
  const double *acc = accv;
  if (s->dt == EM_F32) RD_PUT_FLOAT(float);
  else RD_PUT_FLOAT(double);
}

/* Sink: the double accumulators themselves (shifts, gradient helpers). */
static void rd_put_doubles(const rd_sink *s, int64_t o0, int64_t n, const void *acc) {
  memcpy((double *)s->out + o0, acc, sizeof(double) * (size_t)n);
}

/* Sink: integer outputs. Accumulators are 64-bit (sums and products modulo
 * 2^64), cut to the output's width: the two's complement wrap-around numpy
 * gives. */
static void rd_put_int(const rd_sink *s, int64_t o0, int64_t n, const void *accv) {
  const uint64_t *acc = accv;
  if (s->dt == EM_I32) {
    int32_t *out = (int32_t *)s->out + o0;
    for (int64_t i = 0; i < n; i++) out[i] = (int32_t)(uint32_t)acc[i];
  } else {
    int64_t *out = (int64_t *)s->out + o0;
    for (int64_t i = 0; i < n; i++) out[i] = (int64_t)acc[i];
  }
}

/* log_sum_exp: a max pass gives each output's shift (the finite maximum,
 * else 0: -inf means all -inf or nothing, +inf and NaN propagate anyway),
 * then sum(exp(x - shift)). */
static em_status rd_log_sum_exp(const rd_fset *k, const void *x, const rd_plan *p, rd_sink *s) {
  double *shift = malloc(sizeof(double) * (size_t)p->n_out);
  if (!shift)
    return em_fail(EM_ERR_OUT_OF_MEMORY, "reduce_log_sum_exp: no memory for %lld shifts", (long long)p->n_out);
  rd_sink st = {rd_put_doubles, RD_MAX, p->n_red, NULL, shift, EM_F64};
  k->max(x, p, NULL, &st);
  for (int64_t o = 0; o < p->n_out; o++)
    if (!isfinite(shift[o])) shift[o] = 0.0;
  s->shift = shift;
  k->exp(x, p, shift, s);
  free(shift);
  return EM_OK;
}

static em_status rd_cpu_float(rd_fn f, const rd_plan *p, const em_tensor *x, em_tensor *y) {
  const rd_fset *k = em_tensor_dtype(x) == EM_F32 ? &rd_fset_f32 : &rd_fset_f64;
  const void *xd = em_tensor_data(x);
  rd_sink s = {rd_put_float, f, p->n_red, NULL, em_tensor_data(y), em_tensor_dtype(y)};
  switch (f) {
  case RD_SUM:
  case RD_MEAN:
  case RD_LOG_SUM: k->sum(xd, p, NULL, &s); break;
  case RD_L1: k->abs(xd, p, NULL, &s); break;
  case RD_L2:
  case RD_SUMSQ: k->sq(xd, p, NULL, &s); break;
  case RD_PROD: k->prod(xd, p, NULL, &s); break;
  case RD_MAX: k->max(xd, p, NULL, &s); break;
  case RD_MIN: k->min(xd, p, NULL, &s); break;
  case RD_LSE: return rd_log_sum_exp(k, xd, p, &s);
  default: break;
  }
  return EM_OK;
}

static em_status rd_cpu_int(rd_fn f, const rd_plan *p, const em_tensor *x, em_tensor *y) {
  int is32 = em_tensor_dtype(x) == EM_I32;
  const void *xd = em_tensor_data(x);
  rd_sink s = {rd_put_int, f, p->n_red, NULL, em_tensor_data(y), em_tensor_dtype(y)};
  switch (f) {
  case RD_SUM: (is32 ? sum_i32_run : sum_i64_run)(xd, p, NULL, &s); break;
  case RD_PROD: (is32 ? prod_i32_run : prod_i64_run)(xd, p, NULL, &s); break;
  case RD_MAX: (is32 ? max_i32_run : max_i64_run)(xd, p, NULL, &s); break;
  case RD_MIN: (is32 ? min_i32_run : min_i64_run)(xd, p, NULL, &s); break;
  default: break;
  }
  return EM_OK;
}

static em_status rd_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rd_fn f = rd_fn_of_op(a->def);
  em_shape xs;
  rd_plan p;
  em_shape_of(in[0], &xs);
  rd_plan_for(a, &xs, &p);
  if (p.n_out == 0) return EM_OK;
  if (xs.dtype == EM_F32 || xs.dtype == EM_F64) return rd_cpu_float(f, &p, in[0], out[0]);
  return rd_cpu_int(f, &p, in[0], out[0]);
}

/* The pass that folds reduction f's elements (its CPU kernel above). */
static int rd_pass_of(rd_fn f) {
  switch (f) {
  case RD_L1: return RDM_PASS_ABS;
  case RD_L2:
  case RD_SUMSQ: return RDM_PASS_SQ;
  case RD_PROD: return RDM_PASS_PROD;
  case RD_MAX: return RDM_PASS_MAX;
  case RD_MIN: return RDM_PASS_MIN;
  default: return RDM_PASS_SUM; /* sum, mean, log_sum */
  }
}

/* On a CUDA device: the passes of rd_cpu_float / rd_cpu_int, in the same
 * order (ops/reduce_gpu.c, kernels/reduce_ops.cu), so every device gives the
 * CPU's bits in both modes. */
static em_status rd_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rd_fn f = rd_fn_of_op(a->def);
  em_shape xs;
  rd_plan p;
  em_shape_of(in[0], &xs);
  rd_plan_for(a, &xs, &p);
  if (p.n_out == 0) return EM_OK;
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
  em_dtype dt = xs.dtype;
  if (dt == EM_I32 || dt == EM_I64)
    return em_reduce_gpu_pass(a, dt, rd_pass_of(f), f, dt == EM_I32 ? RDM_DST_I32 : RDM_DST_I64, &p, x, NULL, y);
  int dst = dt == EM_F32 ? RDM_DST_F32 : RDM_DST_F64;
  if (f != RD_LSE) return em_reduce_gpu_pass(a, dt, rd_pass_of(f), f, dst, &p, x, NULL, y);
  /* log_sum_exp: the shifts (rd_log_sum_exp), then sum(exp(x - shift)). */
  void *shift = NULL;
  em_status s = em_ops_scratch(a, sizeof(double) * (size_t)p.n_out, &shift);
  if (!s) s = em_reduce_gpu_pass(a, dt, RDM_PASS_MAX, f, RDM_DST_SHIFT, &p, x, NULL, shift);
  if (!s) s = em_reduce_gpu_pass(a, dt, RDM_PASS_EXP, f, dst, &p, x, shift, y);
  em_ops_scratch_free(a, shift);
  return s;
}

/* The backward of every float reduction: one fused _reduce_grad node. */
static em_status rd_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK; /* integers carry no gradient */
  em_attr at[3];
  int n = 0;
  const em_attr *axes = rd_attr(a, "axes");
  int64_t keepdims = em_attr_int(a, "keepdims", 0);
  if (axes) at[n++] = *axes;
  at[n++] = (em_attr){.name = "keepdims", .type = EM_ATTR_INT, .i = keepdims};
  at[n++] = (em_attr){.name = "fn", .type = EM_ATTR_STRING, .s = rd_fn_names[rd_fn_of_op(a->def)]};
  em_var in[3] = {x[0], y[0], dy[0]};
  return em_apply(g, "_reduce_grad", in, 3, at, n, &din[0], 1);
}

/* ------------------------------------------------------ argmax, argmin --- */

static em_status arg_infer(em_op_args *a) {
  const em_shape *x = &a->in[0];
  if (!rd_arg_kernel(x->dtype))
    return em_op_fail(a, "dtype %s is not supported (expected a numeric dtype: f32, f64, f16, bf16, i32, i64 or u8)",
                      em_dtype_name(x->dtype));
  if (x->ndim < 1) return em_op_fail(a, "the input is a scalar; expected at least 1 dimension to search along");
  int64_t axis, keepdims, last;
  em_status s = rd_int_attr(a, "axis", 0, -x->ndim, x->ndim - 1, &axis);
  if (!s) s = rd_int_attr(a, "keepdims", 0, 0, 1, &keepdims);
  if (!s) s = rd_int_attr(a, "select_last_index", 0, 0, 1, &last);
  if (s) return s;
  int k = (int)(axis < 0 ? axis + x->ndim : axis);
  if (x->dims[k] == 0)
    return em_op_fail(a, "axis %d has size 0: there is no element to select", k);
  rd_reduced_shape(x, 1u << k, (int)keepdims, EM_I64, &a->out[0]);
  return EM_OK;
}

static em_status arg_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_shape xs;
  rd_plan p;
  em_shape_of(in[0], &xs);
  int64_t axis = em_attr_int(a, "axis", 0);
  int k = (int)(axis < 0 ? axis + xs.ndim : axis);
  rd_plan_make(xs.dims, xs.ndim, 1u << k, em_cpu_threads(), &p);
  if (p.n_out == 0) return EM_OK;
  rd_sel sel = {!strcmp(a->def->name, "argmax"), em_attr_int(a, "select_last_index", 0) != 0, 0};
  rd_arg_kernel(xs.dtype)(em_tensor_data(in[0]), &p, &sel, em_tensor_data(out[0]));
  return EM_OK;
}

/* On a CUDA device: the same selection (first or last of equal extremes,
 * NaN the extreme), whatever the threads per output. */
static em_status arg_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_shape xs;
  rd_plan p;
  em_shape_of(in[0], &xs);
  int64_t axis = em_attr_int(a, "axis", 0);
  int k = (int)(axis < 0 ? axis + xs.ndim : axis);
  rd_plan_make(xs.dims, xs.ndim, 1u << k, 1, &p);
  if (p.n_out == 0) return EM_OK;
  return em_reduce_gpu_arg(a, xs.dtype, &p, !strcmp(a->def->name, "argmax"),
                           em_attr_int(a, "select_last_index", 0) != 0, 0, em_tensor_data(in[0]),
                           em_tensor_data(out[0]));
}

/* No gradient flows into the searched values (no_grad marks it too). */
static em_status arg_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                              em_var *din) {
  (void)g, (void)a, (void)x, (void)y, (void)dy, (void)din;
  return EM_OK;
}

/* --------------------------------------------------------- _reduce_grad --- */

static int rd_dims_match(const em_shape *a, const em_shape *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i] && a->dims[i] >= 0 && b->dims[i] >= 0) return 0;
  return 1;
}

static em_status grad_infer(em_op_args *a) {
  const em_shape *x = &a->in[0];
  const char *fn = em_attr_str(a, "fn", NULL);
  if (rd_fn_find(fn) < 0)
    return em_op_fail(a, "attribute 'fn' is '%s'; expected sum, mean, max, min, prod, log_sum_exp, log_sum, l1, l2 or "
                         "sum_square", fn ? fn : "(absent)");
  if (x->dtype != EM_F32 && x->dtype != EM_F64)
    return em_op_fail(a, "dtype %s is not supported (expected f32 or f64)", em_dtype_name(x->dtype));
  unsigned mask;
  int64_t keepdims;
  em_status s = rd_axes_mask(a, x->ndim, &mask);
  if (!s) s = rd_int_attr(a, "keepdims", 0, 0, 1, &keepdims);
  if (s) return s;
  em_shape want;
  char w[128];
  rd_reduced_shape(x, mask, (int)keepdims, x->dtype, &want);
  if (!rd_dims_match(&a->in[1], &want) || !rd_dims_match(&a->in[2], &want))
    return em_op_fail(a, "y and dy must both be %s (x reduced)", em_shape_str(&want, w, sizeof w));
  a->out[0] = *x;
  return EM_OK;
}

/* dx over x[i0, i0 + n) of one run; y, dy, aux1, aux2 step by ys (0: one
 * output for the whole run, 1: one output per element). */
#define RD_GRAD_RUN(NAME, T)                                                                                          \
  static void NAME(rd_fn f, const T *restrict x, T *restrict dx, int64_t n, const T *y, const T *dy,                  \
                   const double *a1, const double *a2, int64_t ys, double inv_n) {                                    \
    switch (f) {                                                                                                      \
    case RD_SUM:                                                                                                      \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) dx[j] = dy[j * ys];                                         \
      break;                                                                                                          \
    case RD_MEAN:                                                                                                     \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) dx[j] = (T)((double)dy[j * ys] * inv_n);                    \
      break;                                                                                                          \
    case RD_SUMSQ:                                                                                                    \
      _Pragma("omp simd") for (int64_t j = 0; j < n; j++) dx[j] = (T)(2.0 * (double)x[j] * (double)dy[j * ys]);       \
      break;                                                                                                          \
    case RD_L1:                                                                                                       \
      for (int64_t j = 0; j < n; j++) dx[j] = x[j] > 0 ? dy[j * ys] : x[j] < 0 ? -dy[j * ys] : (T)0;                  \
      break;                                                                                                          \
    case RD_L2:                                                                                                       \
      for (int64_t j = 0; j < n; j++)                                                                                 \
        dx[j] = y[j * ys] == 0 ? (T)0 : (T)((double)x[j] / (double)y[j * ys] * (double)dy[j * ys]);                   \
      break;                                                                                                          \
    case RD_LSE:                                                                                                      \
      for (int64_t j = 0; j < n; j++)                                                                                 \
        dx[j] = y[j * ys] == -INFINITY ? (T)0                                                                         \
                                       : (T)((double)dy[j * ys] * rdm_exp_d((double)x[j] - (double)y[j * ys]));        \
      break;                                                                                                          \
    case RD_LOG_SUM: /* a1: the sum */                                                                                \
      for (int64_t j = 0; j < n; j++) dx[j] = (T)((double)dy[j * ys] / a1[j * ys]);                                   \
      break;                                                                                                          \
    case RD_PROD: /* a1: zeros among the reduced elements, a2: product of the non-zero ones */                        \
      for (int64_t j = 0; j < n; j++) {                                                                               \
        double z = a1[j * ys], g;                                                                                     \
        if (z == 0) g = a2[j * ys] / (double)x[j];                                                                    \
        else if (z == 1 && x[j] == 0) g = a2[j * ys];                                                                 \
        else g = 0;                                                                                                   \
        dx[j] = (T)(g * (double)dy[j * ys]);                                                                          \
      }                                                                                                               \
      break;                                                                                                          \
    default: break;                                                                                                   \
    }                                                                                                                 \
  }

RD_GRAD_RUN(grad_run_f32, float)
RD_GRAD_RUN(grad_run_f64, double)

/* dx for the element-wise derivatives, over runs of x: in case A a run is
 * one segment of an output's reduced elements (one output for the run), in
 * case B one row of a block of K neighbouring outputs. Runs are numbered
 * (output or block, then segment or row) and split into contiguous ranges
 * between threads; no reduction is involved. */
static void rd_grad_map(rd_fn f, const rd_plan *p, em_dtype dt, const void *x, void *dx, const void *y, const void *dy,
                        const double *a1, const double *a2) {
  double inv_n = 1.0 / (double)p->n_red;
  int nt = em_cpu_threads(), par = p->n_out * p->n_red > RD_PAR_MIN && nt > 1;
  int64_t per_major = p->inner_reduced ? p->n_seg : p->n_rows, runs = rd_walk_count(&p->outer) * per_major;
  int64_t per = rd_cdiv(runs, (int64_t)(par ? nt : 1) * 8), n_chunks;
  if (per < 1) per = 1;
  n_chunks = rd_cdiv(runs, per);
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
  for (int64_t c = 0; c < n_chunks; c++) {
    int64_t r0 = c * per, r1 = rd_min64(r0 + per, runs), oidx[EM_MAX_DIMS], ridx[EM_MAX_DIMS];
    int64_t major = r0 / per_major, minor = r0 % per_major; /* output (A) or block (B); segment (A) or row (B) */
    int64_t sub = p->inner_reduced ? minor % p->nchunk : 0; /* A: the segment within its run */
    int64_t base = rd_seek(&p->outer, major, oidx);
    int64_t roff = rd_seek(&p->rows, p->inner_reduced ? minor / p->nchunk : minor, ridx);
    for (int64_t r = r0; r < r1; r++) {
      int64_t o, n, ys, off = base + roff;
      if (p->inner_reduced) {
        o = major;
        off += sub * RD_SEG;
        n = rd_min64(RD_SEG, p->inner - sub * RD_SEG);
        ys = 0;
      } else {
        o = major * p->inner;
        n = p->inner;
        ys = 1;
      }
      const double *b1 = a1 ? a1 + o : NULL, *b2 = a2 ? a2 + o : NULL;
      if (dt == EM_F32)
        grad_run_f32(f, (const float *)x + off, (float *)dx + off, n, (const float *)y + o, (const float *)dy + o, b1,
                     b2, ys, inv_n);
      else
        grad_run_f64(f, (const double *)x + off, (double *)dx + off, n, (const double *)y + o, (const double *)dy + o,
                     b1, b2, ys, inv_n);
      /* the next run */
      if (!p->inner_reduced || ++sub == p->nchunk) {
        sub = 0;
        roff = rd_step(&p->rows, ridx, roff);
      }
      if (++minor == per_major) {
        minor = 0;
        major++;
        base = rd_step(&p->outer, oidx, base);
      }
    }
  }
}

/* max / min: all of dy[o] to output o's first extreme element. */
static void rd_grad_select(rd_fn f, const rd_plan *p, em_dtype dt, const void *x, void *dx, const void *dy,
                           int64_t *pos) {
  size_t es = dt == EM_F32 ? 4 : 8;
  memset(dx, 0, es * (size_t)(p->n_out * p->n_red));
  rd_sel sel = {f == RD_MAX, 0, 1};
  rd_arg_kernel(dt)(x, p, &sel, pos);
  for (int64_t o = 0; o < p->n_out; o++) {
    if (dt == EM_F32) ((float *)dx)[pos[o]] = ((const float *)dy)[o];
    else ((double *)dx)[pos[o]] = ((const double *)dy)[o];
  }
}

static em_status grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rd_fn f = (rd_fn)rd_fn_find(em_attr_str(a, "fn", ""));
  em_shape xs;
  rd_plan p;
  em_shape_of(in[0], &xs);
  rd_plan_for(a, &xs, &p);
  if (p.empty) return EM_OK; /* dx has no elements */
  const void *x = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *dx = em_tensor_data(out[0]);
  const rd_fset *k = xs.dtype == EM_F32 ? &rd_fset_f32 : &rd_fset_f64;
  double *aux = NULL;
  if (f == RD_MAX || f == RD_MIN || f == RD_PROD || f == RD_LOG_SUM) {
    aux = malloc(sizeof(double) * (size_t)(2 * p.n_out));
    if (!aux) return em_fail(EM_ERR_OUT_OF_MEMORY, "_reduce_grad: no memory for %lld outputs", (long long)p.n_out);
  }
  if (f == RD_MAX || f == RD_MIN) {
    rd_grad_select(f, &p, xs.dtype, x, dx, dy, (int64_t *)aux);
  } else if (f == RD_PROD) {
    rd_sink zeros = {rd_put_doubles, f, p.n_red, NULL, aux, EM_F64}, nz = zeros;
    nz.out = aux + p.n_out;
    k->zeros(x, &p, NULL, &zeros);
    k->nzprod(x, &p, NULL, &nz);
    rd_grad_map(f, &p, xs.dtype, x, dx, y, dy, aux, aux + p.n_out);
  } else if (f == RD_LOG_SUM) {
    rd_sink sum = {rd_put_doubles, f, p.n_red, NULL, aux, EM_F64};
    k->sum(x, &p, NULL, &sum);
    rd_grad_map(f, &p, xs.dtype, x, dx, y, dy, aux, NULL);
  } else {
    rd_grad_map(f, &p, xs.dtype, x, dx, y, dy, NULL, NULL);
  }
  free(aux);
  return EM_OK;
}

/* On a CUDA device: grad_cpu's helpers (selected elements, zero counts and
 * products, sums) by the same passes, then dx element by element. */
static em_status grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rd_fn f = (rd_fn)rd_fn_find(em_attr_str(a, "fn", ""));
  em_shape xs;
  rd_plan p;
  unsigned mask;
  em_shape_of(in[0], &xs);
  em_status s = rd_axes_mask(a, xs.ndim, &mask); /* infer checked them */
  if (s) return s;
  rd_plan_make(xs.dims, xs.ndim, mask, 1, &p);
  if (p.empty) return EM_OK; /* dx has no elements */
  const void *x = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *dx = em_tensor_data(out[0]), *aux = NULL;
  double *a1 = NULL, *a2 = NULL;
  int64_t *pos = NULL;
  if (f == RD_MAX || f == RD_MIN || f == RD_PROD || f == RD_LOG_SUM)
    s = em_ops_scratch(a, sizeof(double) * (size_t)(2 * p.n_out), &aux);
  if (!s && (f == RD_MAX || f == RD_MIN)) {
    pos = aux;
    s = em_reduce_gpu_arg(a, xs.dtype, &p, f == RD_MAX, 0, 1, x, pos);
  } else if (!s && f == RD_PROD) {
    a1 = aux;
    a2 = a1 + p.n_out;
    s = em_reduce_gpu_pass(a, xs.dtype, RDM_PASS_ZEROS, f, RDM_DST_RAW, &p, x, NULL, a1);
    if (!s) s = em_reduce_gpu_pass(a, xs.dtype, RDM_PASS_NZPROD, f, RDM_DST_RAW, &p, x, NULL, a2);
  } else if (!s && f == RD_LOG_SUM) {
    a1 = aux;
    s = em_reduce_gpu_pass(a, xs.dtype, RDM_PASS_SUM, f, RDM_DST_RAW, &p, x, NULL, a1);
  }
  if (!s) s = em_reduce_gpu_grad(a, xs.dtype, f, xs.dims, xs.ndim, mask, x, y, dy, a1, a2, pos, dx);
  em_ops_scratch_free(a, aux);
  return s;
}

/* ------------------------------------------------------------- registry --- */

#define RD_OP(NAME, DOC)                                                                                       \
  {.name = NAME, .doc = DOC " Attributes: axes (INTS; absent: all), keepdims (INT, 0).", .min_inputs = 1,          \
   .max_inputs = 1, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0, .infer = rd_infer,            \
   .cpu = rd_cpu, .gpu = rd_gpu, .backward = rd_backward, .attrs = EM_ATTRS("axes", "keepdims")}
#define ARG_OP(NAME, DOC)                                                                                       \
  {.name = NAME, .doc = DOC " (i64). Attributes: axis (INT, 0), keepdims (INT, 0), select_last_index (INT, 0).", \
   .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .no_grad = 1u, .state_inputs = 0, .inplace = 0,             \
   .infer = arg_infer, .cpu = arg_cpu, .gpu = arg_gpu, .backward = arg_backward,                                     \
   .attrs = EM_ATTRS("axis", "keepdims", "select_last_index")}

const em_op_def em_ops_reduce[] = {
  RD_OP("reduce_sum", "Sum over axes (f32 f64 i32 i64; empty: 0)."),
  RD_OP("reduce_mean", "Mean over axes (f32 f64; empty: NaN)."),
  RD_OP("reduce_max", "Maximum over axes (f32 f64 i32 i64; NaN propagates; empty axis refused)."),
  RD_OP("reduce_min", "Minimum over axes (f32 f64 i32 i64; NaN propagates; empty axis refused)."),
  RD_OP("reduce_prod", "Product over axes (f32 f64 i32 i64; empty: 1)."),
  RD_OP("reduce_log_sum_exp", "log(sum(exp(x))) over axes, computed stably (f32 f64; empty: -inf)."),
  RD_OP("reduce_log_sum", "log(sum(x)) over axes (f32 f64; empty: -inf)."),
  RD_OP("reduce_l1", "sum(|x|) over axes (f32 f64; empty: 0)."),
  RD_OP("reduce_l2", "sqrt(sum(x^2)) over axes (f32 f64; empty: 0)."),
  RD_OP("reduce_sum_square", "sum(x^2) over axes (f32 f64; empty: 0)."),
  ARG_OP("argmax", "Index of the largest element along axis, NaN counting as largest"),
  ARG_OP("argmin", "Index of the smallest element along axis, NaN counting as smallest"),
  {.name = "_reduce_grad",
   .doc = "Gradient of the reductions: (x, y, dy) -> dx. Attributes: the forward's axes and keepdims, fn (STRING).",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0,
   .infer = grad_infer, .cpu = grad_cpu, .gpu = grad_gpu, .backward = NULL, .attrs = EM_ATTRS("axes", "keepdims", "fn")},
};
const size_t em_ops_reduce_count = sizeof em_ops_reduce / sizeof em_ops_reduce[0];
