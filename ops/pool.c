/* Pooling family on NCHW data (1, 2 or 3 spatial axes; global pools any number).
 *
 *   max_pool(x)                 x [N, C, s...] -> [N, C, o...]: the largest element of each window
 *   average_pool(x)             the mean of each window
 *   global_max_pool(x)          x [N, C, s...] -> [N, C, 1...]: the largest element of each plane
 *   global_average_pool(x)      the mean of each plane
 *   _max_pool_grad(x, dy)       max_pool's gradient: each dy goes to the FIRST maximum of its window
 *                               (window order: depth, then row, then column; a NaN counts as the
 *                               maximum, the first NaN wins), shaped like x
 *   _avg_pool_grad(dy, x)       average_pool's gradient (x's values are not read)
 *   _global_pool_grad(x, dy)    global_max_pool's (mode "max", first maximum) or
 *                               global_average_pool's (mode "average") gradient
 *
 * Attributes of max_pool and average_pool (ONNX names and defaults):
 *   kernel_shape INTS   required, one per spatial axis, >= 1
 *   strides INTS        >= 1 (default 1s)
 *   dilations INTS      >= 1 (default 1s)
 *   pads INTS           [begin..., end...], >= 0 (default 0s); only with auto_pad NOTSET
 *   auto_pad STRING     NOTSET | VALID | SAME_UPPER | SAME_LOWER (output ceil(in / stride); the odd
 *                       unit of padding at the end for SAME_UPPER, at the beginning for SAME_LOWER) |
 *                       SAME_SYMMETRIC (CNTK's auto-padding, ops/spatial.h)
 *   ceil_mode INT       0 (default): output = floor((in + pads - dilated kernel) / stride) + 1;
 *                       1: ceil instead, but a last window that would start inside the end padding
 *                       is dropped (as ONNX's reference and PyTorch do)
 *   average_pool: count_include_pad INT  0 (default): divide by the number of input elements in the
 *                       window; 1: also count padding positions (those inside [-pad_begin,
 *                       in + pad_end), so a ceil_mode overhang past the end padding is not counted)
 *   max_pool: storage_order INT  only 0 (row-major) is supported; max_pool has one output (no indices)
 * Padded positions never win a max. A window that covers no input element at all (possible with
 * large pads and dilation) is refused when the op is built.
 *
 * Work is split by (item, channel) plane; every plane is reduced, and its gradient scattered, in
 * one fixed order, so results never depend on the thread count. Sums are accumulated in double.
 * The per-window arithmetic (argmax, mean, a window's gradient share) and the window tables are
 * kernels/pool_math.h's, shared with kernels/pool.cu: the GPU computes each output the same way
 * and gathers each input's gradient from its windows in the order this file scatters them, so
 * the GPU gives the CPU's bits in both modes where it runs Ember's kernels. In the fast mode the
 * window pools go through cuDNN where it expresses the geometry (ops/pool_gpu.c): within
 * tolerance, and a tied max window's gradient goes to one of its maxima, not necessarily the
 * first (ops/README.md). */
#ifndef POOL_T
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "spatial.h"
#include "pool_gpu.h"
#include "../kernels/pool_math.h"

#define SP 3 /* spatial axes as handled internally (missing leading axes have size 1) */

typedef struct pool_geom {
  int nsp;
  int64_t planes;                       /* N * C */
  int64_t img[SP], col[SP];             /* input and output spatial sizes */
  int64_t k[SP], s[SP], d[SP], pb[SP], pe[SP];
} pool_geom;

/* Per axis and output index: the valid taps [lo, hi) (reading input, not padding) and, for
 * count_include_pad, how many taps fall inside the padded input. */
typedef struct pool_tables {
  int64_t *lo[SP], *hi[SP], *padded[SP];
  int64_t *mem;
} pool_tables;

static int64_t prod3(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* The geometry as kernels/pool_math.h takes it (long long, for the CPU loops and the kernels alike). */
static pm_geom to_pm(const pool_geom *gm) {
  pm_geom p = {.planes = gm->planes};
  for (int j = 0; j < SP; j++) {
    p.img[j] = gm->img[j], p.col[j] = gm->col[j], p.k[j] = gm->k[j], p.s[j] = gm->s[j], p.d[j] = gm->d[j];
    p.pb[j] = gm->pb[j], p.pe[j] = gm->pe[j];
  }
  return p;
}

#define POOL_T float
#define POOL_NAME(f) f##_f32
#define POOL_PM(f) f##_f32
#include "pool.c"
#undef POOL_T
#undef POOL_NAME
#undef POOL_PM
#define POOL_T double
#define POOL_NAME(f) f##_f64
#define POOL_PM(f) f##_f64
#include "pool.c"
#undef POOL_T
#undef POOL_NAME
#undef POOL_PM

/* --------------------------------------------------------- attributes --- */

/* 1 when some tap of window o reads an input element. */
static int window_has_input(int64_t o, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb) {
  for (int64_t t = 0; t < k; t++) {
    int64_t p = o * s - pb + t * d;
    if (p >= 0 && p < in) return 1;
  }
  return 0;
}

/* The output size of one axis, its padding, and the checks (kernel within the padded input,
 * no window of padding only). */
static em_status pool_axis(const em_op_args *a, int i, int mode, const int64_t *pads, int nsp, int ceil_mode,
                           pool_geom *gm, int j) {
  int64_t in = gm->img[j], k = gm->k[j], s = gm->s[j], d = gm->d[j], dk = (k - 1) * d + 1, pb, pe, out;
  em_spatial_pads(mode, pads, nsp, i, in, s, dk, &pb, &pe);
  if (pb < 0 || pe < 0)
    return em_op_fail(a, "auto_pad SAME_SYMMETRIC on spatial axis %d gives pads %lld, %lld: the stride %lld is larger "
                      "than the kernel (%lld), where CNTK would crop; give pads instead",
                      i, (long long)pb, (long long)pe, (long long)s, (long long)dk);
  if (in + pb + pe < dk)
    return em_op_fail(a, "kernel_shape[%d] = %lld (dilation %lld: spans %lld) is larger than the padded input "
                      "(%lld + pads %lld + %lld)", i, (long long)k, (long long)d, (long long)dk, (long long)in,
                      (long long)pb, (long long)pe);
  if (mode == EM_PAD_SAME_UPPER || mode == EM_PAD_SAME_LOWER || mode == EM_PAD_SAME_SYMMETRIC) {
    out = (in + s - 1) / s;
  } else {
    int64_t span = in + pb + pe - dk;
    out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (out - 1) * s >= in + pb) out--; /* the last window would start in the end padding */
  }
  for (int64_t o = 0; o < out; o++)
    if (!window_has_input(o, in, k, s, d, pb))
      return em_op_fail(a, "window %lld of spatial axis %d covers only padding (pads %lld, %lld; kernel %lld; "
                        "dilation %lld)", (long long)o, i, (long long)pb, (long long)pe, (long long)k, (long long)d);
  gm->pb[j] = pb;
  gm->pe[j] = pe;
  gm->col[j] = out;
  return EM_OK;
}

/* The geometry of max_pool (is_max) or average_pool on x, and the output shape y. */
static em_status pool_resolve(const em_op_args *a, int is_max, const em_shape *x, pool_geom *gm, em_shape *y) {
  if (x->ndim < 3 || x->ndim > 5)
    return em_op_fail(a, "the input must be [N, C, spatial...] with 1 to 3 spatial axes (rank 3 to 5), not rank %d",
                      x->ndim);
  int nsp = x->ndim - 2;
  em_spatial_attrs sa;
  int64_t ceil_mode = 0, v;
  em_status st = em_spatial_attrs_read(a, nsp, 1, &sa);
  if (!st) st = em_spatial_int_attr(a, "ceil_mode", 0, 0, 1, &ceil_mode);
  if (!st && !is_max) st = em_spatial_int_attr(a, "count_include_pad", 0, 0, 1, &v);
  if (!st && is_max) st = em_spatial_int_attr(a, "storage_order", 0, 0, 0, &v);
  if (st) return st;
  const int64_t *ks = sa.kernel_shape, *strides = sa.strides, *dil = sa.dilations;
  memset(gm, 0, sizeof *gm);
  gm->nsp = nsp;
  gm->planes = x->dims[0] < 0 || x->dims[1] < 0 ? -1 : x->dims[0] * x->dims[1];
  for (int j = 0; j < SP; j++) gm->img[j] = gm->col[j] = gm->k[j] = gm->s[j] = gm->d[j] = 1;
  for (int i = 0; i < nsp; i++) {
    int j = SP - nsp + i;
    gm->img[j] = x->dims[2 + i];
    gm->k[j] = ks[i];
    gm->s[j] = strides ? strides[i] : 1;
    gm->d[j] = dil ? dil[i] : 1;
    if (gm->img[j] < 0) gm->col[j] = -1;
    else if ((st = pool_axis(a, i, sa.auto_pad, sa.pads, nsp, (int)ceil_mode, gm, j))) return st;
  }
  *y = *x;
  for (int i = 0; i < nsp; i++) y->dims[2 + i] = gm->col[SP - nsp + i];
  return EM_OK;
}

static void tables_free(pool_tables *t) { free(t->mem); }

static em_status tables_build(const pool_geom *gm, pool_tables *t) {
  int64_t total = gm->col[0] + gm->col[1] + gm->col[2];
  t->mem = malloc(sizeof(int64_t) * (size_t)(3 * total + 1));
  if (!t->mem) return em_fail(EM_ERR_OUT_OF_MEMORY, "pooling: no memory for window tables");
  int64_t *p = t->mem;
  for (int j = 0; j < SP; j++) {
    t->lo[j] = p;
    t->hi[j] = p + gm->col[j];
    t->padded[j] = p + 2 * gm->col[j];
    p += 3 * gm->col[j];
    for (int64_t o = 0; o < gm->col[j]; o++) {
      long long lo, hi, padded;
      pm_taps(o, gm->img[j], gm->k[j], gm->s[j], gm->d[j], gm->pb[j], gm->pe[j], &lo, &hi, &padded);
      t->lo[j][o] = lo, t->hi[j][o] = hi, t->padded[j][o] = padded;
    }
  }
  return EM_OK;
}

/* The 2x2, stride-2 max pool of CNNs (LeNet, VGG) on 2-D planes: no padding or dilation and
 * every window whole (each reads four input elements, the windows do not overlap). Its loops
 * (max2x2_fwd, max2x2_grad) skip the window tables and the scatter: per window they take
 * pm_argmax's first maximum in its order, so the bits are the general loops'. */
static int is_max2x2(const pool_geom *gm) {
  return gm->k[0] == 1 && gm->s[0] == 1 && gm->pb[0] == 0 && gm->k[1] == 2 && gm->k[2] == 2 && gm->s[1] == 2 &&
         gm->s[2] == 2 && gm->d[1] == 1 && gm->d[2] == 1 && gm->pb[1] == 0 && gm->pb[2] == 0 &&
         gm->col[0] == gm->img[0] && 2 * gm->col[1] <= gm->img[1] && 2 * gm->col[2] <= gm->img[2];
}

/* ------------------------------------------------------------------ ops --- */

static em_status max_pool_infer(em_op_args *a) {
  pool_geom gm;
  em_status st = em_spatial_check_float(a);
  return st ? st : pool_resolve(a, 1, &a->in[0], &gm, &a->out[0]);
}

static em_status avg_pool_infer(em_op_args *a) {
  pool_geom gm;
  em_status st = em_spatial_check_float(a);
  return st ? st : pool_resolve(a, 0, &a->in[0], &gm, &a->out[0]);
}

/* Geometry and tables of the input in[ix] at run time. */
static em_status run_setup(const em_op_args *a, int is_max, em_tensor *x, pool_geom *gm, pool_tables *t) {
  em_shape xs, y;
  em_shape_of(x, &xs);
  em_status st = pool_resolve(a, is_max, &xs, gm, &y);
  return st ? st : tables_build(gm, t);
}

static em_status max_pool_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pool_geom gm;
  pool_tables t;
  em_status st = run_setup(a, 1, in[0], &gm, &t);
  if (st) return st;
  if (!em_tensor_is_contiguous(in[0]) || !em_tensor_is_contiguous(out[0])) { /* channels-last: max_pool_layout */
    const int64_t *sh = em_tensor_shape(in[0]);
    if (em_tensor_dtype(in[0]) == EM_F32) max_fwd_cl_f32(&gm, &t, sh[0], sh[1], em_tensor_data(in[0]), em_tensor_data(out[0]));
    else max_fwd_cl_f64(&gm, &t, sh[0], sh[1], em_tensor_data(in[0]), em_tensor_data(out[0]));
    tables_free(&t);
    return EM_OK;
  }
  int f32 = em_tensor_dtype(in[0]) == EM_F32, quad = is_max2x2(&gm);
  if (quad && f32) max2x2_fwd_f32(&gm, em_tensor_data(in[0]), em_tensor_data(out[0]));
  else if (quad) max2x2_fwd_f64(&gm, em_tensor_data(in[0]), em_tensor_data(out[0]));
  else if (f32) st = max_fwd_f32(&gm, &t, em_tensor_data(in[0]), em_tensor_data(out[0]));
  else st = max_fwd_f64(&gm, &t, em_tensor_data(in[0]), em_tensor_data(out[0]));
  tables_free(&t);
  return st;
}

static em_status avg_pool_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pool_geom gm;
  pool_tables t;
  em_status st = run_setup(a, 0, in[0], &gm, &t);
  if (st) return st;
  int cip = (int)em_attr_int(a, "count_include_pad", 0);
  if (em_tensor_dtype(in[0]) == EM_F32) avg_fwd_f32(&gm, &t, cip, em_tensor_data(in[0]), em_tensor_data(out[0]));
  else avg_fwd_f64(&gm, &t, cip, em_tensor_data(in[0]), em_tensor_data(out[0]));
  tables_free(&t);
  return EM_OK;
}

/* The geometry of max_pool (is_max) or average_pool on x at run time, for the kernels. */
static em_status run_geom_pm(const em_op_args *a, int is_max, em_tensor *x, pm_geom *out) {
  pool_geom gm;
  em_shape xs, y;
  em_shape_of(x, &xs);
  em_status st = pool_resolve(a, is_max, &xs, &gm, &y);
  if (!st) *out = to_pm(&gm);
  return st;
}

static em_status max_pool_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pm_geom g;
  em_status st = run_geom_pm(a, 1, in[0], &g);
  return st ? st : em_pool_gpu_max(a, em_tensor_dtype(in[0]) == EM_F64, &g, em_tensor_data(in[0]),
                                   em_tensor_data(out[0]));
}

static em_status avg_pool_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pm_geom g;
  em_status st = run_geom_pm(a, 0, in[0], &g);
  return st ? st : em_pool_gpu_avg(a, em_tensor_dtype(in[0]) == EM_F64, &g, (int)em_attr_int(a, "count_include_pad", 0),
                                   em_tensor_data(in[0]), em_tensor_data(out[0]));
}

static em_status max_pool_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                   const em_var *dy, em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {x[0], dy[0]};
  return em_apply(g, "_max_pool_grad", in, 2, a->attrs, a->n_attrs, &din[0], 1);
}

static em_status avg_pool_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                   const em_var *dy, em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {dy[0], x[0]};
  return em_apply(g, "_avg_pool_grad", in, 2, a->attrs, a->n_attrs, &din[0], 1);
}

/* A gradient op: dy (input idy) must match the forward output of x (input ix); out = x's shape. */
static em_status pool_grad_infer(em_op_args *a, int is_max, int ix, int idy) {
  pool_geom gm;
  em_shape y;
  em_status st = em_spatial_check_float(a);
  if (!st) st = pool_resolve(a, is_max, &a->in[ix], &gm, &y);
  if (!st) st = em_spatial_check_grad(a, &a->in[idy], &y);
  if (st) return st;
  a->out[0] = a->in[ix];
  return EM_OK;
}

static em_status max_grad_infer(em_op_args *a) { return pool_grad_infer(a, 1, 0, 1); }
static em_status avg_grad_infer(em_op_args *a) { return pool_grad_infer(a, 0, 1, 0); }

/* _max_pool_grad(x, dy) */
static em_status max_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pool_geom gm;
  pool_tables t;
  em_status st = run_setup(a, 1, in[0], &gm, &t);
  if (st) return st;
  int f32 = em_tensor_dtype(in[0]) == EM_F32, quad = is_max2x2(&gm);
  const void *x = em_tensor_data(in[0]), *dy = em_tensor_data(in[1]);
  void *dx = em_tensor_data(out[0]);
  if (quad && f32) max2x2_grad_f32(&gm, x, dy, dx);
  else if (quad) max2x2_grad_f64(&gm, x, dy, dx);
  else if (f32) max_grad_f32(&gm, &t, x, dy, dx);
  else max_grad_f64(&gm, &t, x, dy, dx);
  tables_free(&t);
  return EM_OK;
}

static em_status max_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pm_geom g;
  em_status st = run_geom_pm(a, 1, in[0], &g);
  return st ? st : em_pool_gpu_max_grad(a, em_tensor_dtype(in[0]) == EM_F64, &g, em_tensor_data(in[0]),
                                        em_tensor_data(in[1]), em_tensor_data(out[0]));
}

/* _avg_pool_grad(dy, x) */
static em_status avg_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pool_geom gm;
  pool_tables t;
  em_status st = run_setup(a, 0, in[1], &gm, &t);
  if (st) return st;
  int cip = (int)em_attr_int(a, "count_include_pad", 0);
  if (em_tensor_dtype(in[0]) == EM_F32) avg_grad_f32(&gm, &t, cip, em_tensor_data(in[0]), em_tensor_data(out[0]));
  else avg_grad_f64(&gm, &t, cip, em_tensor_data(in[0]), em_tensor_data(out[0]));
  tables_free(&t);
  return EM_OK;
}

static em_status avg_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  pm_geom g;
  em_status st = run_geom_pm(a, 0, in[1], &g);
  return st ? st : em_pool_gpu_avg_grad(a, em_tensor_dtype(in[0]) == EM_F64, &g,
                                        (int)em_attr_int(a, "count_include_pad", 0), em_tensor_data(in[1]),
                                        em_tensor_data(in[0]), em_tensor_data(out[0]));
}

/* ---------------------------------------------------------- global pools --- */

static em_status global_shape(em_op_args *a, const em_shape *x, em_shape *y) {
  if (x->ndim < 3)
    return em_op_fail(a, "the input must be [N, C, spatial...] with at least one spatial axis, not rank %d", x->ndim);
  *y = *x;
  for (int i = 2; i < x->ndim; i++) y->dims[i] = 1;
  return EM_OK;
}

static em_status global_infer(em_op_args *a) {
  em_status st = em_spatial_check_float(a);
  return st ? st : global_shape(a, &a->in[0], &a->out[0]);
}

/* Planes and plane size of a contiguous [N, C, spatial...] tensor. */
static void plane_dims(const em_tensor *x, int64_t *planes, int64_t *size) {
  const int64_t *sh = em_tensor_shape(x);
  *planes = sh[0] * sh[1];
  *size = 1;
  for (int i = 2; i < em_tensor_ndim(x); i++) *size *= sh[i];
}

static em_status global_cpu(int is_max, em_tensor *const *in, em_tensor *const *out) {
  int64_t planes, size;
  plane_dims(in[0], &planes, &size);
  if (em_tensor_dtype(in[0]) == EM_F32)
    global_fwd_f32(is_max, planes, size, em_tensor_data(in[0]), em_tensor_data(out[0]));
  else global_fwd_f64(is_max, planes, size, em_tensor_data(in[0]), em_tensor_data(out[0]));
  return EM_OK;
}

static em_status global_max_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)a;
  return global_cpu(1, in, out);
}

static em_status global_avg_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)a;
  if (!em_tensor_is_contiguous(in[0])) { /* channels-last (global_avg_layout) */
    const int64_t *sh = em_tensor_shape(in[0]), n = sh[0], c = sh[1], size = em_tensor_numel(in[0]) / (n * c);
    if (em_tensor_dtype(in[0]) == EM_F32) global_mean_cl_f32(n, c, size, em_tensor_data(in[0]), em_tensor_data(out[0]));
    else global_mean_cl_f64(n, c, size, em_tensor_data(in[0]), em_tensor_data(out[0]));
    return EM_OK;
  }
  return global_cpu(0, in, out);
}

/* A channels-last x gives a channels-last y (max_fwd_cl) where y may be one; else x arrives
 * contiguous. */
static em_status max_pool_layout(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c) {
  (void)a;
  const int cl = out_may && em_tensor_numel(in[0]) > 0 && !em_tensor_is_contiguous(in[0]) &&
                 em_tensor_is_channels_last(in[0]);
  c->as_is = (uint64_t)cl;
  c->out_channels_last = cl;
  return EM_OK;
}

/* A channels-last x is read as it is (global_mean_cl); the output [N, C, 1...] is contiguous. */
static em_status global_avg_layout(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c) {
  (void)a, (void)out_may;
  c->as_is = em_tensor_numel(in[0]) > 0 && em_tensor_is_channels_last(in[0]);
  c->out_channels_last = 0;
  return EM_OK;
}

static em_status global_backward(em_graph *g, const char *mode, const em_var *x, const em_var *dy, em_var *din) {
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {x[0], dy[0]};
  em_attr at = em_attr_s("mode", mode);
  return em_apply(g, "_global_pool_grad", in, 2, &at, 1, &din[0], 1);
}

static em_status global_gpu(const em_op_args *a, int is_max, em_tensor *const *in, em_tensor *const *out) {
  int64_t planes, size;
  plane_dims(in[0], &planes, &size);
  return em_pool_gpu_global(a, em_tensor_dtype(in[0]) == EM_F64, is_max, planes, size, em_tensor_data(in[0]),
                            em_tensor_data(out[0]));
}

static em_status global_max_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return global_gpu(a, 1, in, out);
}

static em_status global_avg_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return global_gpu(a, 0, in, out);
}

static em_status global_max_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                     const em_var *dy, em_var *din) {
  (void)a, (void)y;
  return global_backward(g, "max", x, dy, din);
}

static em_status global_avg_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                     const em_var *dy, em_var *din) {
  (void)a, (void)y;
  return global_backward(g, "average", x, dy, din);
}

static em_status global_mode(const em_op_args *a, int *is_max) {
  const char *m = em_attr_str(a, "mode", "");
  if (!strcmp(m, "max")) *is_max = 1;
  else if (!strcmp(m, "average")) *is_max = 0;
  else return em_op_fail(a, "attribute mode is '%s'; expected \"max\" or \"average\"", m);
  return EM_OK;
}

/* _global_pool_grad(x, dy) */
static em_status global_grad_infer(em_op_args *a) {
  int is_max;
  em_shape y;
  em_status st = em_spatial_check_float(a);
  if (!st) st = global_mode(a, &is_max);
  if (!st) st = global_shape(a, &a->in[0], &y);
  if (!st) st = em_spatial_check_grad(a, &a->in[1], &y);
  if (st) return st;
  a->out[0] = a->in[0];
  return EM_OK;
}

static em_status global_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int is_max;
  em_status st = global_mode(a, &is_max);
  if (st) return st;
  int64_t planes, size;
  plane_dims(in[0], &planes, &size);
  if (em_tensor_dtype(in[0]) == EM_F32)
    global_grad_f32(is_max, planes, size, em_tensor_data(in[0]), em_tensor_data(in[1]), em_tensor_data(out[0]));
  else global_grad_f64(is_max, planes, size, em_tensor_data(in[0]), em_tensor_data(in[1]), em_tensor_data(out[0]));
  return EM_OK;
}

static em_status global_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int is_max;
  em_status st = global_mode(a, &is_max);
  if (st) return st;
  int64_t planes, size;
  plane_dims(in[0], &planes, &size);
  return em_pool_gpu_global_grad(a, em_tensor_dtype(in[0]) == EM_F64, is_max, planes, size, em_tensor_data(in[0]),
                                 em_tensor_data(in[1]), em_tensor_data(out[0]));
}

#define POOL_DEF_L(NAME, DOC, NIN, INFER, CPU, GPU, BACKWARD, ATTRS, LAYOUT)                                    \
  {.name = NAME, .doc = DOC, .min_inputs = NIN, .max_inputs = NIN, .n_outputs = 1, .no_grad = 0,                \
   .state_inputs = 0, .inplace = 0, .infer = INFER, .cpu = CPU, .gpu = GPU, .backward = BACKWARD, .attrs = ATTRS, \
   .layout = LAYOUT}
#define POOL_DEF(NAME, DOC, NIN, INFER, CPU, GPU, BACKWARD, ATTRS) \
  POOL_DEF_L(NAME, DOC, NIN, INFER, CPU, GPU, BACKWARD, ATTRS, NULL)
#define MAX_POOL_ATTRS EM_ATTRS("kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode", "storage_order")
#define AVG_POOL_ATTRS                                                                                          \
  EM_ATTRS("kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode", "count_include_pad")

/* The window pools' gradient ops receive their forward's attributes wholesale. */
const em_op_def em_ops_pool[] = {
  POOL_DEF_L("max_pool", "window maximum of x [N,C,s...]; attrs kernel_shape (required), strides, dilations, "
             "pads, auto_pad, ceil_mode", 1, max_pool_infer, max_pool_cpu, max_pool_gpu, max_pool_backward,
             MAX_POOL_ATTRS, max_pool_layout),
  POOL_DEF("average_pool", "window mean of x [N,C,s...]; attrs kernel_shape (required), strides, dilations, pads, "
           "auto_pad, ceil_mode, count_include_pad", 1, avg_pool_infer, avg_pool_cpu, avg_pool_gpu, avg_pool_backward,
           AVG_POOL_ATTRS),
  POOL_DEF("global_max_pool", "maximum of each [N,C] plane of x [N,C,s...] -> [N,C,1...]", 1, global_infer,
           global_max_cpu, global_max_gpu, global_max_backward, EM_NO_ATTRS),
  POOL_DEF_L("global_average_pool", "mean of each [N,C] plane of x [N,C,s...] -> [N,C,1...]", 1, global_infer,
             global_avg_cpu, global_avg_gpu, global_avg_backward, EM_NO_ATTRS, global_avg_layout),
  POOL_DEF("_max_pool_grad", "max_pool's gradient (x, dy): dy routed to the first maximum of each window; max_pool's "
           "attrs", 2, max_grad_infer, max_grad_cpu, max_grad_gpu, NULL, MAX_POOL_ATTRS),
  POOL_DEF("_avg_pool_grad", "average_pool's gradient (dy, x); average_pool's attrs", 2, avg_grad_infer,
           avg_grad_cpu, avg_grad_gpu, NULL, AVG_POOL_ATTRS),
  POOL_DEF("_global_pool_grad", "global pools' gradient (x, dy); attr mode \"max\" (first maximum) or \"average\"",
           2, global_grad_infer, global_grad_cpu, global_grad_gpu, NULL, EM_ATTRS("mode")),
};
const size_t em_ops_pool_count = sizeof em_ops_pool / sizeof em_ops_pool[0];

#else /* ------------------------------------ type-generic kernels (POOL_T) --- */

#define R POOL_T

/* The taps of window (od, oh, ow) per axis, from the tables. */
static void POOL_NAME(window_taps)(const pool_tables *t, int64_t od, int64_t oh, int64_t ow, long long *lo,
                                   long long *hi, long long *padded) {
  lo[0] = t->lo[0][od], lo[1] = t->lo[1][oh], lo[2] = t->lo[2][ow];
  hi[0] = t->hi[0][od], hi[1] = t->hi[1][oh], hi[2] = t->hi[2][ow];
  padded[0] = t->padded[0][od], padded[1] = t->padded[1][oh], padded[2] = t->padded[2][ow];
}

/* The flat input index of the first maximum of window (od, oh, ow) in a plane (pool_math.h's rule). */
static int64_t POOL_NAME(argmax)(const pm_geom *g, const pool_tables *t, const R *src, int64_t od, int64_t oh,
                                 int64_t ow) {
  long long lo[3], hi[3], padded[3];
  POOL_NAME(window_taps)(t, od, oh, ow, lo, hi, padded);
  return POOL_PM(pm_argmax)(src, g->img, g->s, g->d, g->pb, od, oh, ow, lo, hi);
}

/* TAKE(v): whether tap v replaces the best so far under pm_argmax's test (strict >, a NaN
 * wins once and then stays), written as a select so the loops over a row of windows
 * vectorise. */
#define TAKE(v) ((v) > best || ((v) != (v) && best == best))

/* One block of n windows from window o (n a constant once inlined: one vector), every tap
 * in order, the running maxima held in registers: tap t of window ow is tr[t][ti[t] + ow]. */
static inline __attribute__((always_inline)) void POOL_NAME(max_block)(R *out, const R *const *tr,
                                                                       const int64_t *ti, int nt, int64_t o,
                                                                       int64_t n) {
  R acc[16];
  for (int64_t j = 0; j < n; j++) acc[j] = tr[0][ti[0] + o + j];
  for (int t = 1; t < nt; t++) {
    const R *src = tr[t];
    const int64_t at = ti[t] + o;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      const R v = src[at + j], best = acc[j];
      acc[j] = TAKE(v) ? v : best;
    }
  }
  for (int64_t j = 0; j < n; j++) out[o + j] = acc[j];
}

#define MAX_TAPS 64 /* taps a window may have for max_row; more take the window-by-window path */

/* dst[ow] for the windows [o0, o1) of one output row whose column taps all read input (none
 * in the padding): each keeps its first maximum over the taps of kernel rows rows[0..nr)
 * (input rows, in window order) and of every kernel column, in pm_argmax's order. Blocks of
 * 16 windows (8 on short rows) run all their taps in registers, the last block overlapping
 * the one before (it recomputes the same maxima); rows under 8 windows go one at a time.
 * The rows are split into their s column phases (em_split_phases: phase f at f * wq holds
 * columns f, f + s, ...), so a tap's windows read contiguous elements whatever the stride
 * (with s = 1 the row is its own single phase). */
EM_SIMD_CLONES static void POOL_NAME(max_row)(R *dst, int64_t o0, int64_t o1, const R *const *rows, int nr,
                                             int64_t k, int64_t s, int64_t d, int64_t pb, int64_t wq) {
  /* tap kw reads column ow s + kw d - pb (>= 0 for windows inside the row, though kw d - pb
   * may be negative): element ow + i of phase f, f = (kw d - pb) mod s, i its floor quotient;
   * stepping kw adds d mod s to f and d / s to i, carrying */
  const int64_t f0 = ((-pb) % s + s) % s, i00 = (-pb - f0) / s, df = d % s, di = d / s;
  const R *tr[MAX_TAPS];
  int64_t ti[MAX_TAPS];
  int nt = 0;
  for (int r = 0; r < nr; r++) {
    int64_t f = f0, i = i00;
    for (int64_t kw = 0; kw < k; kw++, nt++) {
      tr[nt] = rows[r] + f * wq, ti[nt] = i; /* + ow: the window's element */
      f += df, i += di;
      if (f >= s) f -= s, i++;
    }
  }
  const int64_t n = o1 - o0;
  if (n >= 16) {
    int64_t o = o0;
    for (; o + 16 <= o1; o += 16) POOL_NAME(max_block)(dst, tr, ti, nt, o, 16);
    if (o < o1) POOL_NAME(max_block)(dst, tr, ti, nt, o1 - 16, 16);
  } else if (n >= 8) {
    POOL_NAME(max_block)(dst, tr, ti, nt, o0, 8);
    if (n > 8) POOL_NAME(max_block)(dst, tr, ti, nt, o1 - 8, 8);
  } else {
    for (int64_t o = o0; o < o1; o++) POOL_NAME(max_block)(dst, tr, ti, nt, o, 1);
  }
}

/* Each window's first maximum (pm_argmax's). The windows of an output row whose columns lie
 * inside the input take max_row's loop; those reaching into the column padding (the row's
 * ends) and rows of more kernel rows than max_row takes go window by window through
 * pm_argmax. Before max_row every window went that way, 37% of SqueezeNet's inference. */
static em_status POOL_NAME(max_fwd)(const pool_geom *gm, const pool_tables *t, const R *x, R *y) {
  const int64_t P = prod3(gm->col), Q = prod3(gm->img), *out = gm->col, *in = gm->img, OW = out[2];
  const pm_geom g = to_pm(gm);
  /* the windows [wa, wb) whose column taps are all inside the row */
  int64_t wa = 0, wb = OW;
  while (wa < OW && !(t->lo[2][wa] == 0 && t->hi[2][wa] == gm->k[2])) wa++;
  while (wb > wa && !(t->lo[2][wb - 1] == 0 && t->hi[2][wb - 1] == gm->k[2])) wb--;
  /* A column stride: each thread splits its plane into column phases first (max_row says why).
   * A stride beyond the row leaves at most one window inside it, and its phases would take
   * rows * stride elements (terabytes, or a size that wraps, for strides like 2^40 or 2^62):
   * such rows go window by window. With s <= in[2] the phases take under 2 in[2] per row. */
  if (gm->s[2] > in[2]) wb = wa;
  /* wq = ceil(in[2] / s), written so that no stride overflows it */
  const int64_t s = gm->s[2], wq = (in[2] - 1) / s + 1, rows_in = in[0] * in[1], split = s > 1 && wa < wb;
  const int par = gm->planes * P > 32768, threads = par ? em_cpu_threads() : 1;
  R *scratch = split ? malloc(sizeof(R) * (size_t)(rows_in * s * wq) * (size_t)threads + 1) : NULL;
  if (split && !scratch) return em_fail(EM_ERR_OUT_OF_MEMORY, "max_pool: no memory for %lld phase-split planes",
                                        (long long)threads);
#pragma omp parallel for schedule(static) num_threads(threads) if (par)
  for (int64_t pl = 0; pl < gm->planes; pl++) {
    const R *src = x + pl * Q, *rowsrc = src;
    R *dst = y + pl * P;
    int64_t rw = in[2]; /* the distance between rows in rowsrc */
    if (split) {
      R *ph = scratch + (size_t)omp_get_thread_num() * (size_t)(rows_in * s * wq);
      em_split_phases(src, rows_in, in[2], s, wq, ph);
      rowsrc = ph, rw = s * wq;
    }
    for (int64_t od = 0; od < out[0]; od++)
      for (int64_t oh = 0; oh < out[1]; oh++) {
        R *drow = dst + (od * out[1] + oh) * OW;
        const R *rows[MAX_TAPS];
        int nr = 0, fits = gm->k[2] <= MAX_TAPS; /* max_row takes at most MAX_TAPS taps */
        for (int64_t kd = t->lo[0][od]; kd < t->hi[0][od] && fits; kd++)
          for (int64_t kh = t->lo[1][oh]; kh < t->hi[1][oh]; kh++) {
            if ((nr + 1) * gm->k[2] > MAX_TAPS) {
              fits = 0;
              break;
            }
            int64_t id = od * gm->s[0] - gm->pb[0] + kd * gm->d[0], ih = oh * gm->s[1] - gm->pb[1] + kh * gm->d[1];
            rows[nr++] = rowsrc + (id * in[1] + ih) * rw;
          }
        int64_t a = fits && nr > 0 ? wa : OW, b = fits && nr > 0 ? wb : OW;
        if (a < b) POOL_NAME(max_row)(drow, a, b, rows, nr, gm->k[2], s, gm->d[2], gm->pb[2], wq);
        for (int64_t ow = 0; ow < OW; ow++)
          if (ow < a || ow >= b) drow[ow] = src[POOL_NAME(argmax)(&g, t, src, od, oh, ow)];
      }
  }
  free(scratch);
  return EM_OK;
}

/* Each window's dy added to its first maximum, window after window (pool_math.h's order). */
static void POOL_NAME(max_grad)(const pool_geom *gm, const pool_tables *t, const R *x, const R *dy, R *dx) {
  const int64_t P = prod3(gm->col), Q = prod3(gm->img), *out = gm->col;
  const pm_geom g = to_pm(gm);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (gm->planes * P > 32768)
  for (int64_t pl = 0; pl < gm->planes; pl++) {
    const R *src = x + pl * Q, *gr = dy + pl * P;
    R *dst = dx + pl * Q;
    memset(dst, 0, sizeof(R) * (size_t)Q);
    for (int64_t od = 0; od < out[0]; od++)
      for (int64_t oh = 0; oh < out[1]; oh++)
        for (int64_t ow = 0; ow < out[2]; ow++)
          dst[POOL_NAME(argmax)(&g, t, src, od, oh, ow)] += gr[(od * out[1] + oh) * out[2] + ow];
  }
}


/* max_fwd for is_max2x2 geometries. */
static void POOL_NAME(max2x2_fwd)(const pool_geom *gm, const R *x, R *y) {
  const int64_t H = gm->img[1], W = gm->img[2], OH = gm->col[1], OW = gm->col[2], Q = gm->img[0] * H * W;
  const int64_t P = gm->col[0] * OH * OW;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (gm->planes * P > 32768)
  for (int64_t pl = 0; pl < gm->planes; pl++)
    for (int64_t od = 0; od < gm->col[0]; od++)
      for (int64_t oh = 0; oh < OH; oh++) {
        const R *r0 = x + pl * Q + (od * H + 2 * oh) * W, *r1 = r0 + W;
        R *dst = y + pl * P + (od * OH + oh) * OW;
#pragma omp simd
        for (int64_t ow = 0; ow < OW; ow++) {
          const R b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
          R best = r0[2 * ow];
          best = TAKE(b) ? b : best;
          best = TAKE(c) ? c : best;
          best = TAKE(d) ? d : best;
          dst[ow] = best;
        }
      }
}

/* max_grad for is_max2x2 geometries: each input element is read by at most one window, so it
 * receives that window's dy when it is the window's first maximum, added to +0 as the general
 * scatter adds it (so a -0 becomes +0), and +0 otherwise. */
static void POOL_NAME(max2x2_grad)(const pool_geom *gm, const R *x, const R *dy, R *dx) {
  const int64_t H = gm->img[1], W = gm->img[2], OH = gm->col[1], OW = gm->col[2], Q = gm->img[0] * H * W;
  const int64_t P = gm->col[0] * OH * OW;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (gm->planes * P > 32768)
  for (int64_t pl = 0; pl < gm->planes; pl++)
    for (int64_t id = 0; id < gm->img[0]; id++) {
      for (int64_t oh = 0; oh < OH; oh++) {
        const int64_t row = (id * H + 2 * oh) * W;
        const R *r0 = x + pl * Q + row, *r1 = r0 + W, *g = dy + pl * P + (id * OH + oh) * OW;
        R *d0 = dx + pl * Q + row, *d1 = d0 + W;
#pragma omp simd
        for (int64_t ow = 0; ow < OW; ow++) {
          const R b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1], v = (R)0 + g[ow];
          R best = r0[2 * ow];
          int arg = 0;
          arg = TAKE(b) ? 1 : arg;
          best = TAKE(b) ? b : best;
          arg = TAKE(c) ? 2 : arg;
          best = TAKE(c) ? c : best;
          arg = TAKE(d) ? 3 : arg;
          d0[2 * ow] = arg == 0 ? v : (R)0;
          d0[2 * ow + 1] = arg == 1 ? v : (R)0;
          d1[2 * ow] = arg == 2 ? v : (R)0;
          d1[2 * ow + 1] = arg == 3 ? v : (R)0;
        }
        for (int64_t iw = 2 * OW; iw < W; iw++) d0[iw] = d1[iw] = 0; /* an odd last column: no window */
      }
      if (2 * OH < H) memset(dx + pl * Q + (id * H + 2 * OH) * W, 0, sizeof(R) * (size_t)W); /* an odd last row */
    }
}
#undef TAKE

static void POOL_NAME(avg_fwd)(const pool_geom *gm, const pool_tables *t, int cip, const R *x, R *y) {
  const int64_t P = prod3(gm->col), Q = prod3(gm->img), *out = gm->col;
  const pm_geom g = to_pm(gm);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (gm->planes * P > 32768)
  for (int64_t pl = 0; pl < gm->planes; pl++) {
    const R *src = x + pl * Q;
    R *dst = y + pl * P;
    for (int64_t od = 0; od < out[0]; od++)
      for (int64_t oh = 0; oh < out[1]; oh++)
        for (int64_t ow = 0; ow < out[2]; ow++) {
          long long lo[3], hi[3], padded[3];
          POOL_NAME(window_taps)(t, od, oh, ow, lo, hi, padded);
          dst[(od * out[1] + oh) * out[2] + ow] =
              POOL_PM(pm_avg)(src, g.img, g.s, g.d, g.pb, od, oh, ow, lo, hi, pm_divisor(cip, lo, hi, padded));
        }
  }
}

/* Each window's share of its dy added to the inputs it averages, window after window. */
static void POOL_NAME(avg_grad)(const pool_geom *gm, const pool_tables *t, int cip, const R *dy, R *dx) {
  const int64_t P = prod3(gm->col), Q = prod3(gm->img), *out = gm->col, *s = gm->s, *d = gm->d, *pb = gm->pb,
                *in = gm->img;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (gm->planes * P > 32768)
  for (int64_t pl = 0; pl < gm->planes; pl++) {
    const R *gr = dy + pl * P;
    R *dst = dx + pl * Q;
    memset(dst, 0, sizeof(R) * (size_t)Q);
    for (int64_t od = 0; od < out[0]; od++)
      for (int64_t oh = 0; oh < out[1]; oh++)
        for (int64_t ow = 0; ow < out[2]; ow++) {
          long long lo[3], hi[3], padded[3];
          POOL_NAME(window_taps)(t, od, oh, ow, lo, hi, padded);
          R v = POOL_PM(pm_avg_share)(gr[(od * out[1] + oh) * out[2] + ow], pm_divisor(cip, lo, hi, padded));
          for (int64_t kd = lo[0]; kd < hi[0]; kd++) {
            int64_t id = od * s[0] - pb[0] + kd * d[0];
            for (int64_t kh = lo[1]; kh < hi[1]; kh++) {
              R *row = dst + (id * in[1] + oh * s[1] - pb[1] + kh * d[1]) * in[2];
              for (int64_t kw = lo[2]; kw < hi[2]; kw++) row[ow * s[2] - pb[2] + kw * d[2]] += v;
            }
          }
        }
  }
}

/* pm_plane_mean of the GLOBAL_GROUP planes from x, size > 0 elements each, in step: each
 * plane's sum is still one chain of double adds in index order (the same bits), but the
 * chains of the group overlap instead of each waiting on the latency of its adds (a global
 * average pool read about 1 element per 4 cycles: 5% of EfficientNet-B0's inference). */
#define GLOBAL_GROUP 8
static void POOL_NAME(plane_means)(const R *x, int64_t size, R *y) {
  double acc[GLOBAL_GROUP] = {0};
  for (int64_t i = 0; i < size; i++)
#pragma GCC unroll 8
    for (int j = 0; j < GLOBAL_GROUP; j++) acc[j] = acc[j] + (double)x[j * size + i];
  for (int j = 0; j < GLOBAL_GROUP; j++) y[j] = (R)(acc[j] / (double)size);
}

static void POOL_NAME(global_fwd)(int is_max, int64_t planes, int64_t size, const R *x, R *y) {
  if (!is_max && size > 0) {
    const int64_t groups = planes / GLOBAL_GROUP;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * size > 32768)
    for (int64_t gr = 0; gr < groups; gr++)
      POOL_NAME(plane_means)(x + gr * GLOBAL_GROUP * size, size, y + gr * GLOBAL_GROUP);
    for (int64_t pl = groups * GLOBAL_GROUP; pl < planes; pl++) y[pl] = POOL_PM(pm_plane_mean)(x + pl * size, size);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * size > 32768)
  for (int64_t pl = 0; pl < planes; pl++) {
    const R *p = x + pl * size;
    if (size == 0) y[pl] = is_max ? (R)-INFINITY : (R)NAN; /* an empty plane: max of nothing, mean of nothing */
    else if (is_max) y[pl] = p[POOL_PM(pm_plane_argmax)(p, size)];
    else y[pl] = POOL_PM(pm_plane_mean)(p, size);
  }
}

/* Window maxima of a channels-last x [n, img..., c] into a channels-last y [n, col..., c]
 * (engine/layout.c): each window's taps in pm_argmax's order, the same test per channel (strict
 * >, a NaN wins once and then stays), so the same values as the plain layout's kernels; a run
 * of channels at a time, reading along memory. Every window has a tap (pool_resolve). */
/* dst = the running maxima of a run of channels, src the next tap's (TAKE's test, as a select
 * so that it vectorises). */
EM_SIMD_CLONES static void POOL_NAME(max_run_cl)(R *dst, const R *src, int64_t c) {
#pragma omp simd
  for (int64_t j = 0; j < c; j++) {
    const R v = src[j], best = dst[j];
    dst[j] = v > best || (v != v && best == best) ? v : best;
  }
}

static void POOL_NAME(max_fwd_cl)(const pool_geom *gm, const pool_tables *t, int64_t n, int64_t c, const R *x,
                                  R *y) {
  const int64_t *in = gm->img, *out = gm->col, *s = gm->s, *d = gm->d, *pb = gm->pb;
  const int64_t P = prod3(out);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n * P * c > 32768)
  for (int64_t k = 0; k < n * P; k++) {
    const int64_t b = k / P, o = k % P, od = o / (out[1] * out[2]), oh = o / out[2] % out[1], ow = o % out[2];
    long long lo[3], hi[3], padded[3];
    POOL_NAME(window_taps)(t, od, oh, ow, lo, hi, padded);
    R *dst = y + k * c;
    int first = 1;
    for (long long kd = lo[0]; kd < hi[0]; kd++)
      for (long long kh = lo[1]; kh < hi[1]; kh++)
        for (long long kw = lo[2]; kw < hi[2]; kw++) {
          const int64_t id = od * s[0] - pb[0] + kd * d[0], ih = oh * s[1] - pb[1] + kh * d[1],
                        iw = ow * s[2] - pb[2] + kw * d[2];
          const R *src = x + (((b * in[0] + id) * in[1] + ih) * in[2] + iw) * c;
          if (first) {
            memcpy(dst, src, sizeof(R) * (size_t)c);
            first = 0;
            continue;
          }
          POOL_NAME(max_run_cl)(dst, src, c);
        }
  }
}

/* Means of a channels-last x [n, size, c] (engine/layout.c): each channel's sum is the same
 * chain of double adds in index order as pm_plane_mean's (the same bits as the plain layout),
 * a run of channels at a time reading along memory. */
#define GLOBAL_CL_RUN 64
EM_SIMD_CLONES static void POOL_NAME(sum_run_cl)(double *acc, const R *p, int64_t len) {
#pragma omp simd
  for (int64_t j = 0; j < len; j++) acc[j] = acc[j] + (double)p[j];
}

static void POOL_NAME(global_mean_cl)(int64_t n, int64_t c, int64_t size, const R *x, R *y) {
  const int64_t runs = (c + GLOBAL_CL_RUN - 1) / GLOBAL_CL_RUN;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n * c * size > 32768)
  for (int64_t k = 0; k < n * runs; k++) {
    const int64_t b = k / runs, c0 = k % runs * GLOBAL_CL_RUN, len = c - c0 < GLOBAL_CL_RUN ? c - c0 : GLOBAL_CL_RUN;
    double acc[GLOBAL_CL_RUN] = {0};
    const R *p = x + b * size * c + c0;
    for (int64_t i = 0; i < size; i++, p += c) POOL_NAME(sum_run_cl)(acc, p, len);
    for (int64_t j = 0; j < len; j++) y[b * c + c0 + j] = (R)(acc[j] / (double)size);
  }
}

static void POOL_NAME(global_grad)(int is_max, int64_t planes, int64_t size, const R *x, const R *dy, R *dx) {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * size > 32768)
  for (int64_t pl = 0; pl < planes; pl++) {
    R *dst = dx + pl * size;
    if (is_max) {
      memset(dst, 0, sizeof(R) * (size_t)size);
      if (size) dst[POOL_PM(pm_plane_argmax)(x + pl * size, size)] = dy[pl];
    } else {
      R v = POOL_PM(pm_avg_share)(dy[pl], (double)size);
      for (int64_t i = 0; i < size; i++) dst[i] = v;
    }
  }
}

#undef R
#endif
