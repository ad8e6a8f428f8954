/* Indexing and scan ops that exported models use (ONNX CumSum, GatherND,
 * ScatterND, ScatterElements / Scatter). Data dtypes f32 f64 i32 i64;
 * indices i32 or i64, negative ones counting from the end; an index outside
 * [-n, n) fails the run, naming the op, the index, its position in the
 * indices and the axis it indexes (em_index_fail).
 *
 *   cumsum            x; "axis" INT (default 0), "exclusive" INT (0: y_i
 *                     includes x_i; 1: the sum before it, from 0), "reverse"
 *                     INT (0; 1: sums from the end). The running sum goes
 *                     along the axis in index order (from the end with
 *                     reverse) in x's own type, one addition per element:
 *                     what ONNX's reference (numpy's add.accumulate) and
 *                     onnxruntime compute, so f32 accumulates in f32; i32 and
 *                     i64 wrap. Gradient: the cumsum of dy in the other
 *                     direction (same exclusive).
 *   gather_nd         data, indices [..., k]; "batch_dims" INT b (default 0).
 *                     Output indices.shape[:-1] + data.shape[b+k:]: each
 *                     tuple of k indices picks a slice of data (within its
 *                     batch: the first b axes of data and indices agree).
 *   scatter_nd        data, indices [..., k], updates (indices.shape[:-1] +
 *                     data.shape[k:]); "reduction" STRING none (default) |
 *                     add | mul | max | min. Output: data with each update
 *                     slice combined into the slice its tuple names, tuples
 *                     in index order.
 *   scatter_elements  data, indices, updates (indices' shape, the rank of
 *                     data, no larger than data on any axis but `axis`);
 *                     "axis" INT (default 0), "reduction" as scatter_nd.
 *                     Output: data with updates[p] combined into the element
 *                     p names (p with its axis coordinate replaced by
 *                     indices[p]), in row-major order of p.
 * Duplicates: with reduction none ONNX leaves the result undefined; here the
 * last update in index order wins, on every device. max and min keep a NaN.
 *
 * Gradients (float data): gather_nd through _gather_nd_grad; scatter_nd and
 * scatter_elements for reduction none (data: dy with the written elements
 * zeroed, which is the scatter itself of zeros; updates: dy at each update's
 * target, 0 for an update a later one overwrites) and add (data: dy;
 * updates: dy at the target). mul, max and min have no gradient here: asking
 * for one fails when the gradient graph is built.
 *
 * Internal gradient ops (infer + cpu + gpu; each is linear in dy, and its backward, for second
 * order gradients, is gather_nd or the scatter into zeros):
 *   _gather_nd_grad(dy, indices, data)      "batch_dims": zeros of data's shape,
 *                                           each element adding its dy rows from +0 in tuple order.
 *   _scatter_nd_grad(dy, indices, updates)  "reduction" (none | add): updates' gradient.
 *   _scatter_elements_grad(dy, indices, updates)  "axis", "reduction": the same.
 *
 * On a GPU (index_gpu.c, kernels/index.cu) every op gives the CPU's bits:
 * each output element is one thread that applies its contributions in the
 * order this file's loops do (kernels/index_math.h's arithmetic, no
 * atomics). A kernel checks the indices first (runtime/devcheck.h) and the
 * run fails with the same message as on the CPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "index_gpu.h"
#include "op.h"
#include "../kernels/index_math.h"

/* ============================================================ helpers === */

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= dims[i];
  return p;
}

static const char *dims_str(int nd, const int64_t *dims, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < nd && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* Multi-index of flat position pos within dims, as "[i,j,k]". */
static const char *position_str(int64_t pos, int nd, const int64_t *dims, char *buf, size_t cap) {
  int64_t idx[EM_MAX_DIMS];
  for (int k = nd - 1; k >= 0; k--) {
    idx[k] = dims[k] ? pos % dims[k] : 0;
    pos = dims[k] ? pos / dims[k] : 0;
  }
  return dims_str(nd, idx, buf, cap);
}

static void set_out(em_op_args *a, em_dtype t, int nd, const int64_t *dims) {
  a->out[0].dtype = t;
  a->out[0].ndim = nd;
  for (int i = 0; i < nd; i++) a->out[0].dims[i] = dims[i];
}

/* Equal where both are known. */
static int dim_match(int64_t x, int64_t y) { return x < 0 || y < 0 || x == y; }

static int is_data_dtype(em_dtype t) { return t == EM_F32 || t == EM_F64 || t == EM_I32 || t == EM_I64; }

static em_status check_data(const em_op_args *a, int i) {
  if (!is_data_dtype(a->in[i].dtype))
    return em_op_fail(a, "input %d is %s: expected f32, f64, i32 or i64", i, em_dtype_name(a->in[i].dtype));
  return EM_OK;
}

static em_status check_grad_dtype(const em_op_args *a, int i) {
  if (a->in[i].dtype != EM_F32 && a->in[i].dtype != EM_F64)
    return em_op_fail(a, "input %d is %s: expected f32 or f64", i, em_dtype_name(a->in[i].dtype));
  return EM_OK;
}

static em_status check_indices(const em_op_args *a) {
  if (a->in[1].dtype != EM_I32 && a->in[1].dtype != EM_I64)
    return em_op_fail(a, "indices (input 1) are %s: expected i32 or i64", em_dtype_name(a->in[1].dtype));
  return EM_OK;
}

static int64_t read_index(const void *p, em_dtype t, int64_t i) {
  return t == EM_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static em_status no_memory(const em_op_args *a) {
  return em_fail(EM_ERR_OUT_OF_MEMORY, "op '%s': no memory for a work buffer", a->def->name);
}

em_status em_index_fail(const em_op_args *a, const em_index_bounds *b, int64_t value, int64_t pos) {
  const em_shape *d = &a->in[b->data_in], *is = &a->in[1];
  int ax = b->first_axis + (int)(pos % (b->k > 0 ? b->k : 1));
  int64_t n = ax < d->ndim ? d->dims[ax] : 0;
  char where[160];
  return em_op_fail(a,
                    "index %lld at position %s of the indices (input 1) is out of range for axis %d of input %d, "
                    "of size %lld (valid: %lld to %lld)",
                    (long long)value, position_str(pos, is->ndim, is->dims, where, sizeof where), ax, b->data_in,
                    (long long)n, (long long)-n, (long long)n - 1);
}

/* "reduction": none add mul max min. */
static em_status reduction_of(const em_op_args *a, int *red) {
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  const char *r = em_attr_str(a, "reduction", "none");
  for (int i = 0; i < 5; i++)
    if (!strcmp(r, names[i])) {
      *red = i; /* EM_INDEX_NONE ... EM_INDEX_MIN */
      return EM_OK;
    }
  return em_op_fail(a, "reduction '%s' is not one of none, add, mul, max, min", r);
}

/* The attributes of the op a backward adds, forwarded wholesale. */
static em_status apply_fwd(em_graph *g, const char *op, const em_op_args *a, const em_var *in, int n, em_var *out) {
  return em_apply(g, op, in, n, a->attrs, a->n_attrs, out, 1);
}

/* ============================================================= cumsum === */

static em_status cumsum_params(const em_op_args *a, const em_shape *x, int *axis) {
  if (x->ndim < 1) return em_op_fail(a, "x must have at least one dimension");
  return em_norm_axis(a, em_attr_int(a, "axis", 0), x->ndim, axis);
}

static em_status cumsum_infer(em_op_args *a) {
  int ax;
  em_status s = check_data(a, 0);
  if (!s) s = cumsum_params(a, &a->in[0], &ax);
  if (s) return s;
  set_out(a, a->in[0].dtype, a->in[0].ndim, a->in[0].dims);
  return EM_OK;
}

#define CUMSUM_CPU(T, S)                                                                                    \
  static void cumsum_##S(const T *x, T *y, int64_t lines, int64_t n, int64_t inner, int excl, int rev) {   \
    for (int64_t i = 0; i < lines; i++) {                                                                   \
      int64_t base = i / inner * n * inner + i % inner;                                                     \
      T acc = (T)0;                                                                                         \
      for (int64_t j = 0; j < n; j++) {                                                                     \
        int64_t at = base + (rev ? n - 1 - j : j) * inner;                                                  \
        T v = x[at];                                                                                        \
        if (excl) y[at] = acc;                                                                              \
        acc = em_index_add_##S(acc, v);                                                                     \
        if (!excl) y[at] = acc;                                                                             \
      }                                                                                                     \
    }                                                                                                       \
  }
CUMSUM_CPU(float, f32)
CUMSUM_CPU(double, f64)
CUMSUM_CPU(int32_t, i32)
CUMSUM_CPU(long long, i64)

typedef struct cumsum_geom {
  int64_t outer, n, inner;
  int excl, rev;
} cumsum_geom;

static em_status cumsum_geometry(const em_op_args *a, cumsum_geom *g) {
  int ax;
  em_status s = cumsum_params(a, &a->in[0], &ax);
  if (s) return s;
  const em_shape *x = &a->in[0];
  g->outer = prod(x->dims, 0, ax);
  g->n = x->dims[ax];
  g->inner = prod(x->dims, ax + 1, x->ndim);
  g->excl = em_attr_int(a, "exclusive", 0) != 0;
  g->rev = em_attr_int(a, "reverse", 0) != 0;
  return EM_OK;
}

static em_status cumsum_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  cumsum_geom g;
  em_status s = cumsum_geometry(a, &g);
  if (s) return s;
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
  int64_t lines = g.outer * g.inner;
  switch (a->in[0].dtype) {
  case EM_F32: cumsum_f32(x, y, lines, g.n, g.inner, g.excl, g.rev); break;
  case EM_F64: cumsum_f64(x, y, lines, g.n, g.inner, g.excl, g.rev); break;
  case EM_I32: cumsum_i32(x, y, lines, g.n, g.inner, g.excl, g.rev); break;
  default: cumsum_i64(x, y, lines, g.n, g.inner, g.excl, g.rev); break;
  }
  return EM_OK;
}

static em_status cumsum_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  cumsum_geom g;
  em_status s = cumsum_geometry(a, &g);
  if (s) return s;
  return em_index_gpu_cumsum(a, a->in[0].dtype, em_tensor_data(in[0]), em_tensor_data(out[0]), g.outer, g.n,
                             g.inner, g.excl, g.rev);
}

/* y_i = sum_{j <= i} x_j (exclusive: j < i), so dx_j = sum_{i >= j} dy_i
 * (exclusive: i > j): the same cumsum of dy, run the other way. */
static em_status cumsum_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)x, (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  em_attr at[3] = {em_attr_i("axis", em_attr_int(a, "axis", 0)), em_attr_i("exclusive", em_attr_int(a, "exclusive", 0)),
                   em_attr_i("reverse", em_attr_int(a, "reverse", 0) ? 0 : 1)};
  return em_apply(g, "cumsum", &dy[0], 1, at, 3, &din[0], 1);
}

/* ====================================================== index tuples === */

/* gather_nd's (b = batch_dims) and scatter_nd's (b = 0) tuples over `data`
 * (input data_in) from the indices' shape `is`. Shapes may hold -1 while
 * the graph is built: only the checks that can be made are. */
static em_status tuples_of(const em_op_args *a, const em_shape *data, int data_in, const em_shape *is, int64_t bd,
                           em_index_tuples *tu) {
  int r = data->ndim, q = is->ndim;
  if (r < 1) return em_op_fail(a, "input %d must have at least one dimension", data_in);
  if (q < 1) return em_op_fail(a, "indices (input 1) must have at least one dimension");
  if (bd < 0 || bd >= q || bd >= r) /* checked in 64 bits: the attribute is an INT */
    return em_op_fail(a, "batch_dims %lld must be in [0, %d) (the ranks of data and indices)", (long long)bd,
                      q < r ? q : r);
  int b = (int)bd;
  int64_t k = is->dims[q - 1];
  if (k < 0) return em_op_fail(a, "the last dimension of indices (the tuple length) must be known when building");
  if (k < 1 || k > r - b)
    return em_op_fail(a, "the indices' last dimension is %lld: it must be in [1, %d] (data's rank %d less batch_dims %d)",
                      (long long)k, r - b, r, b);
  for (int i = 0; i < b; i++)
    if (!dim_match(is->dims[i], data->dims[i]))
      return em_op_fail(a, "batch axis %d: indices have %lld, data %lld", i, (long long)is->dims[i],
                        (long long)data->dims[i]);
  memset(tu, 0, sizeof *tu);
  tu->k = k;
  for (int j = 0; j < k; j++) tu->dims[j] = data->dims[b + j];
  tu->m = prod(is->dims, 0, q - 1);
  int64_t batches = prod(data->dims, 0, b);
  tu->per_batch = batches > 0 ? tu->m / batches : 0;
  tu->batch_rows = prod(data->dims, b, b + (int)k);
  tu->sz = prod(data->dims, b + (int)k, r);
  tu->b = (em_index_bounds){.data_in = data_in, .first_axis = b, .k = (int)k};
  return EM_OK;
}

/* The shape that tuples over data give (gather_nd's output, scatter_nd's updates). */
static em_status tuples_shape(const em_op_args *a, const em_shape *data, const em_shape *is, int b, int64_t k,
                              int *nd, int64_t *dims) {
  *nd = is->ndim - 1 + data->ndim - b - (int)k;
  if (*nd > EM_MAX_DIMS) return em_op_fail(a, "the result would have %d dimensions: at most %d", *nd, EM_MAX_DIMS);
  int m = 0;
  for (int i = 0; i < is->ndim - 1; i++) dims[m++] = is->dims[i];
  for (int i = b + (int)k; i < data->ndim; i++) dims[m++] = data->dims[i];
  return EM_OK;
}

/* Each tuple's data row, or the failure naming the first index out of range. */
static em_status rows_cpu(const em_op_args *a, const em_tensor *idx, const em_index_tuples *tu, int64_t **out) {
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)(tu->m > 0 ? tu->m : 1));
  if (!rows) return no_memory(a);
  const void *p = em_tensor_data(idx);
  em_dtype it = a->in[1].dtype;
  for (int64_t t = 0; t < tu->m; t++) {
    int64_t r = 0;
    for (int64_t j = 0; j < tu->k; j++) {
      int64_t v = read_index(p, it, t * tu->k + j), d = tu->dims[j];
      if (!em_index_ok(v, d)) {
        free(rows);
        return em_index_fail(a, &tu->b, v, t * tu->k + j);
      }
      r = r * d + em_index_wrap(v, d);
    }
    rows[t] = t / tu->per_batch * tu->batch_rows + r;
  }
  *out = rows;
  return EM_OK;
}

static void tuples_on(em_index_tuples *tu, const em_tensor *idx, em_dtype it) {
  tu->idx = em_tensor_data(idx);
  tu->idx64 = it == EM_I64;
}

/* dst [m, sz] = src's rows (last_only: zeros for a tuple a later one names too). */
static em_status gather_rows_cpu(const em_op_args *a, const em_tensor *idx, const em_index_tuples *tu, char *dst,
                                 const char *src, size_t es, int64_t nrows, int last_only) {
  int64_t *rows;
  em_status s = rows_cpu(a, idx, tu, &rows);
  if (s) return s;
  unsigned char *seen = last_only ? calloc((size_t)(nrows > 0 ? nrows : 1), 1) : NULL;
  if (last_only && !seen) {
    free(rows);
    return no_memory(a);
  }
  const size_t row = (size_t)tu->sz * es;
  for (int64_t t = tu->m - 1; t >= 0; t--) {
    char *d = dst + (size_t)t * row;
    if (last_only && seen[rows[t]]) {
      memset(d, 0, row);
      continue;
    }
    if (last_only) seen[rows[t]] = 1;
    memcpy(d, src + (size_t)rows[t] * row, row);
  }
  free(seen);
  free(rows);
  return EM_OK;
}

/* ========================================================== gather_nd === */

/* The attribute as given; tuples_of checks its range before anything narrows it. */
static int64_t batch_dims(const em_op_args *a) { return em_attr_int(a, "batch_dims", 0); }

static em_status gather_nd_infer(em_op_args *a) {
  em_status s = check_data(a, 0);
  if (!s) s = check_indices(a);
  if (s) return s;
  em_index_tuples tu;
  int nd;
  int64_t dims[EM_MAX_DIMS];
  if ((s = tuples_of(a, &a->in[0], 0, &a->in[1], batch_dims(a), &tu))) return s;
  if ((s = tuples_shape(a, &a->in[0], &a->in[1], (int)batch_dims(a), tu.k, &nd, dims))) return s;
  set_out(a, a->in[0].dtype, nd, dims);
  return EM_OK;
}

static em_status gather_nd_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  em_status s = tuples_of(a, &a->in[0], 0, &a->in[1], batch_dims(a), &tu);
  if (s) return s;
  return gather_rows_cpu(a, in[1], &tu, em_tensor_data(out[0]), em_tensor_data(in[0]), em_dtype_size(a->in[0].dtype),
                         em_shape_numel(&a->in[0]) / (tu.sz ? tu.sz : 1), 0);
}

static em_status gather_nd_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  em_status s = tuples_of(a, &a->in[0], 0, &a->in[1], batch_dims(a), &tu);
  if (s) return s;
  tuples_on(&tu, in[1], a->in[1].dtype);
  return em_index_gpu_gather_rows(a, a->in[0].dtype, &tu, em_tensor_data(out[0]), em_tensor_data(in[0]), 0);
}

static em_status gather_nd_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                em_var *din) {
  (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  em_var in[3] = {dy[0], x[1], x[0]};
  return apply_fwd(g, "_gather_nd_grad", a, in, 3, &din[0]);
}

static em_status gather_nd_grad_infer(em_op_args *a) {
  em_status s = check_grad_dtype(a, 0);
  if (!s) s = check_indices(a);
  if (!s) s = check_data(a, 2);
  if (s) return s;
  if (a->in[0].dtype != a->in[2].dtype) return em_op_fail(a, "dy and data must have the same dtype");
  em_index_tuples tu;
  int nd;
  int64_t dims[EM_MAX_DIMS];
  if ((s = tuples_of(a, &a->in[2], 2, &a->in[1], batch_dims(a), &tu))) return s;
  if ((s = tuples_shape(a, &a->in[2], &a->in[1], (int)batch_dims(a), tu.k, &nd, dims))) return s;
  int ok = a->in[0].ndim == nd;
  for (int i = 0; ok && i < nd; i++) ok = dim_match(a->in[0].dims[i], dims[i]);
  if (!ok) {
    char buf[160];
    return em_op_fail(a, "dy must have gather_nd's output shape %s", dims_str(nd, dims, buf, sizeof buf));
  }
  set_out(a, a->in[2].dtype, a->in[2].ndim, a->in[2].dims);
  return EM_OK;
}

#define GATHER_GRAD_CPU(T, S)                                                                                  \
  static void gather_grad_##S(T *dx, const T *dy, const int64_t *rows, int64_t m, int64_t sz, int64_t nrows) { \
    for (int64_t i = 0; i < nrows * sz; i++) dx[i] = (T)0;                                                     \
    for (int64_t t = 0; t < m; t++)                                                                            \
      for (int64_t c = 0; c < sz; c++) dx[rows[t] * sz + c] = em_index_add_##S(dx[rows[t] * sz + c], dy[t * sz + c]); \
  }
GATHER_GRAD_CPU(float, f32)
GATHER_GRAD_CPU(double, f64)

static em_status gather_nd_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  em_status s = tuples_of(a, &a->in[2], 2, &a->in[1], batch_dims(a), &tu);
  if (s) return s;
  int64_t *rows;
  if ((s = rows_cpu(a, in[1], &tu, &rows))) return s;
  int64_t nrows = tu.sz ? em_shape_numel(&a->in[2]) / tu.sz : 0;
  if (a->in[0].dtype == EM_F32)
    gather_grad_f32(em_tensor_data(out[0]), em_tensor_data(in[0]), rows, tu.m, tu.sz, nrows);
  else
    gather_grad_f64(em_tensor_data(out[0]), em_tensor_data(in[0]), rows, tu.m, tu.sz, nrows);
  free(rows);
  return EM_OK;
}

static em_status gather_nd_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  em_status s = tuples_of(a, &a->in[2], 2, &a->in[1], batch_dims(a), &tu);
  if (s) return s;
  tuples_on(&tu, in[1], a->in[1].dtype);
  int64_t nrows = tu.sz ? em_shape_numel(&a->in[2]) / tu.sz : 0;
  return em_index_gpu_gather_rows_grad(a, a->in[0].dtype, &tu, em_tensor_data(out[0]), em_tensor_data(in[0]), nrows);
}

/* _gather_nd_grad is linear in dy: its own gradient is gather_nd of the incoming one (the gradient
 * of a gradient; data is read for its shape only). */
static em_status gather_nd_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                     const em_var *dy, em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {dy[0], x[1]};
  return apply_fwd(g, "gather_nd", a, in, 2, &din[0]);
}

/* The updates' gradient ops are linear in dy (each update takes dy at its target; under none, 0
 * for one a later update overwrites): their own gradient puts each incoming value back at its
 * target, which is the scatter itself into zeros with the same reduction (none: the last wins,
 * the overwritten ones were 0; add: they sum). */
static em_status scatter_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *dy, em_var *din,
                                   const char *scatter) {
  if (dy[0] < 0) return EM_OK;
  em_var z;
  em_status s = em_apply1(g, "zeros_like", x[0], &z);
  if (s) return s;
  em_var in[3] = {z, x[1], dy[0]};
  return apply_fwd(g, scatter, a, in, 3, &din[0]);
}

static em_status scatter_nd_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                      const em_var *dy, em_var *din) {
  (void)y;
  return scatter_grad_back(g, a, x, dy, din, "scatter_nd");
}

static em_status scatter_elements_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                            const em_var *dy, em_var *din) {
  (void)y;
  return scatter_grad_back(g, a, x, dy, din, "scatter_elements");
}

/* ========================================================= scatter_nd === */

/* data (input 0; dy for the gradient), indices, updates: the tuples, checked against updates' shape. */
static em_status scatter_nd_check(const em_op_args *a, em_index_tuples *tu) {
  em_status s = tuples_of(a, &a->in[0], 0, &a->in[1], 0, tu);
  if (s) return s;
  int nd;
  int64_t dims[EM_MAX_DIMS];
  if ((s = tuples_shape(a, &a->in[0], &a->in[1], 0, tu->k, &nd, dims))) return s;
  int ok = a->in[2].ndim == nd;
  for (int i = 0; ok && i < nd; i++) ok = dim_match(a->in[2].dims[i], dims[i]);
  if (!ok) {
    char buf[160];
    return em_op_fail(a, "updates (input 2) must have shape indices.shape[:-1] + data.shape[k:] = %s",
                      dims_str(nd, dims, buf, sizeof buf));
  }
  return EM_OK;
}

static em_status scatter_nd_infer(em_op_args *a) {
  int red;
  em_status s = check_data(a, 0);
  if (!s) s = check_indices(a);
  if (!s) s = check_data(a, 2);
  if (!s) s = reduction_of(a, &red);
  if (s) return s;
  if (a->in[0].dtype != a->in[2].dtype) return em_op_fail(a, "data and updates must have the same dtype");
  em_index_tuples tu;
  if ((s = scatter_nd_check(a, &tu))) return s;
  set_out(a, a->in[0].dtype, a->in[0].ndim, a->in[0].dims);
  return EM_OK;
}

#define SCATTER_ROWS_CPU(T, S)                                                                                \
  static void scatter_rows_##S(T *out, const T *data, const T *upd, const int64_t *rows, int64_t n, int64_t m, \
                               int64_t sz, int red) {                                                         \
    memcpy(out, data, sizeof(T) * (size_t)n);                                                                 \
    for (int64_t t = 0; t < m; t++)                                                                           \
      for (int64_t c = 0; c < sz; c++)                                                                        \
        out[rows[t] * sz + c] = em_index_combine_##S(out[rows[t] * sz + c], upd[t * sz + c], red);            \
  }
SCATTER_ROWS_CPU(float, f32)
SCATTER_ROWS_CPU(double, f64)
SCATTER_ROWS_CPU(int32_t, i32)
SCATTER_ROWS_CPU(long long, i64)

static em_status scatter_nd_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  int red;
  em_status s = reduction_of(a, &red);
  if (!s) s = scatter_nd_check(a, &tu);
  if (s) return s;
  int64_t *rows;
  if ((s = rows_cpu(a, in[1], &tu, &rows))) return s;
  const void *d = em_tensor_data(in[0]), *u = em_tensor_data(in[2]);
  void *o = em_tensor_data(out[0]);
  int64_t n = em_shape_numel(&a->in[0]);
  switch (a->in[0].dtype) {
  case EM_F32: scatter_rows_f32(o, d, u, rows, n, tu.m, tu.sz, red); break;
  case EM_F64: scatter_rows_f64(o, d, u, rows, n, tu.m, tu.sz, red); break;
  case EM_I32: scatter_rows_i32(o, d, u, rows, n, tu.m, tu.sz, red); break;
  default: scatter_rows_i64(o, d, u, rows, n, tu.m, tu.sz, red); break;
  }
  free(rows);
  return EM_OK;
}

static em_status scatter_nd_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  int red;
  em_status s = reduction_of(a, &red);
  if (!s) s = scatter_nd_check(a, &tu);
  if (s) return s;
  tuples_on(&tu, in[1], a->in[1].dtype);
  int64_t nrows = tu.sz ? em_shape_numel(&a->in[0]) / tu.sz : 0;
  return em_index_gpu_scatter_rows(a, a->in[0].dtype, &tu, em_tensor_data(out[0]), em_tensor_data(in[0]),
                                   em_tensor_data(in[2]), nrows, red);
}

/* The scatters' backward: reduction none or add (see the top of the file). */
static em_status scatter_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *dy, em_var *din,
                              const char *scatter, const char *grad) {
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  int red;
  em_status s = reduction_of(a, &red);
  if (s) return s;
  if (red != EM_INDEX_NONE && red != EM_INDEX_ADD)
    return em_op_fail(a, "no gradient for reduction '%s' (defined for none and add)", em_attr_str(a, "reduction", ""));
  if (red == EM_INDEX_ADD) {
    din[0] = dy[0];
  } else {
    em_var z, in[3] = {dy[0], x[1], -1};
    if ((s = em_apply1(g, "zeros_like", x[2], &z))) return s;
    in[2] = z;
    if ((s = apply_fwd(g, scatter, a, in, 3, &din[0]))) return s;
  }
  em_var gin[3] = {dy[0], x[1], x[2]};
  return apply_fwd(g, grad, a, gin, 3, &din[2]);
}

static em_status scatter_nd_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                 em_var *din) {
  (void)y;
  return scatter_back(g, a, x, dy, din, "scatter_nd", "_scatter_nd_grad");
}

/* none: last_only; add: every update gets dy at its target. */
static em_status grad_mode(const em_op_args *a, int *last_only) {
  int red;
  em_status s = reduction_of(a, &red);
  if (s) return s;
  if (red != EM_INDEX_NONE && red != EM_INDEX_ADD)
    return em_op_fail(a, "reduction '%s' has no gradient (defined for none and add)", em_attr_str(a, "reduction", ""));
  *last_only = red == EM_INDEX_NONE;
  return EM_OK;
}

static em_status scatter_grad_infer_common(em_op_args *a) {
  int lo;
  em_status s = check_grad_dtype(a, 0);
  if (!s) s = check_indices(a);
  if (!s) s = check_grad_dtype(a, 2);
  if (!s) s = grad_mode(a, &lo);
  if (s) return s;
  if (a->in[0].dtype != a->in[2].dtype) return em_op_fail(a, "dy and updates must have the same dtype");
  return EM_OK;
}

static em_status scatter_nd_grad_infer(em_op_args *a) {
  em_status s = scatter_grad_infer_common(a);
  em_index_tuples tu;
  if (!s) s = scatter_nd_check(a, &tu);
  if (s) return s;
  set_out(a, a->in[2].dtype, a->in[2].ndim, a->in[2].dims);
  return EM_OK;
}

static em_status scatter_nd_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  int last_only;
  em_status s = grad_mode(a, &last_only);
  if (!s) s = scatter_nd_check(a, &tu);
  if (s) return s;
  int64_t nrows = tu.sz ? em_shape_numel(&a->in[0]) / tu.sz : 0;
  return gather_rows_cpu(a, in[1], &tu, em_tensor_data(out[0]), em_tensor_data(in[0]), em_dtype_size(a->in[0].dtype),
                         nrows, last_only);
}

static em_status scatter_nd_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_index_tuples tu;
  int last_only;
  em_status s = grad_mode(a, &last_only);
  if (!s) s = scatter_nd_check(a, &tu);
  if (s) return s;
  tuples_on(&tu, in[1], a->in[1].dtype);
  return em_index_gpu_gather_rows(a, a->in[0].dtype, &tu, em_tensor_data(out[0]), em_tensor_data(in[0]), last_only);
}

/* =================================================== scatter_elements === */

/* data (input 0; dy for the gradient), indices, updates. */
static em_status elements_check(const em_op_args *a, int *axis) {
  const em_shape *d = &a->in[0], *is = &a->in[1], *u = &a->in[2];
  if (d->ndim < 1) return em_op_fail(a, "data must have at least one dimension");
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), d->ndim, axis);
  if (s) return s;
  if (is->ndim != d->ndim) return em_op_fail(a, "indices must have data's rank %d", d->ndim);
  if (u->ndim != is->ndim) return em_op_fail(a, "updates must have the indices' shape");
  for (int i = 0; i < d->ndim; i++) {
    if (!dim_match(u->dims[i], is->dims[i])) return em_op_fail(a, "updates must have the indices' shape");
    if (i != *axis && is->dims[i] >= 0 && d->dims[i] >= 0 && is->dims[i] > d->dims[i])
      return em_op_fail(a, "indices have %lld on axis %d, data only %lld", (long long)is->dims[i], i,
                        (long long)d->dims[i]);
  }
  return EM_OK;
}

static em_status scatter_elements_infer(em_op_args *a) {
  int red, ax;
  em_status s = check_data(a, 0);
  if (!s) s = check_indices(a);
  if (!s) s = check_data(a, 2);
  if (!s) s = reduction_of(a, &red);
  if (!s) s = elements_check(a, &ax);
  if (s) return s;
  if (a->in[0].dtype != a->in[2].dtype) return em_op_fail(a, "data and updates must have the same dtype");
  set_out(a, a->in[0].dtype, a->in[0].ndim, a->in[0].dims);
  return EM_OK;
}

/* The data offset each update goes to (row-major over the indices), or the failure naming the first bad index. */
static em_status element_targets(const em_op_args *a, const em_tensor *idx, int axis, int64_t **out) {
  const em_shape *d = &a->in[0], *is = &a->in[1];
  int64_t ne = em_shape_numel(is), n = d->dims[axis];
  int64_t *tg = malloc(sizeof(int64_t) * (size_t)(ne > 0 ? ne : 1));
  if (!tg) return no_memory(a);
  const void *p = em_tensor_data(idx);
  em_index_bounds b = {.data_in = 0, .first_axis = axis, .k = 1};
  for (int64_t i = 0; i < ne; i++) {
    int64_t v = read_index(p, is->dtype, i);
    if (!em_index_ok(v, n)) {
      free(tg);
      return em_index_fail(a, &b, v, i);
    }
    int64_t rem = i, off = 0, ds = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
      int64_t c = rem % is->dims[k];
      rem /= is->dims[k];
      off += (k == axis ? em_index_wrap(v, n) : c) * ds;
      ds *= d->dims[k];
    }
    tg[i] = off;
  }
  *out = tg;
  return EM_OK;
}

#define SCATTER_ELEMENTS_CPU(T, S)                                                                               \
  static void scatter_elements_##S(T *out, const T *data, const T *upd, const int64_t *tg, int64_t n, int64_t ne, \
                                   int red) {                                                                    \
    memcpy(out, data, sizeof(T) * (size_t)n);                                                                    \
    for (int64_t i = 0; i < ne; i++) out[tg[i]] = em_index_combine_##S(out[tg[i]], upd[i], red);                 \
  }
SCATTER_ELEMENTS_CPU(float, f32)
SCATTER_ELEMENTS_CPU(double, f64)
SCATTER_ELEMENTS_CPU(int32_t, i32)
SCATTER_ELEMENTS_CPU(long long, i64)

static em_status scatter_elements_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int red, ax;
  em_status s = reduction_of(a, &red);
  if (!s) s = elements_check(a, &ax);
  if (s) return s;
  int64_t *tg;
  if ((s = element_targets(a, in[1], ax, &tg))) return s;
  const void *d = em_tensor_data(in[0]), *u = em_tensor_data(in[2]);
  void *o = em_tensor_data(out[0]);
  int64_t n = em_shape_numel(&a->in[0]), ne = em_shape_numel(&a->in[1]);
  switch (a->in[0].dtype) {
  case EM_F32: scatter_elements_f32(o, d, u, tg, n, ne, red); break;
  case EM_F64: scatter_elements_f64(o, d, u, tg, n, ne, red); break;
  case EM_I32: scatter_elements_i32(o, d, u, tg, n, ne, red); break;
  default: scatter_elements_i64(o, d, u, tg, n, ne, red); break;
  }
  free(tg);
  return EM_OK;
}

static void elements_on(const em_op_args *a, const em_tensor *idx, int axis, em_index_elements *e) {
  memset(e, 0, sizeof *e);
  e->idx = em_tensor_data(idx);
  e->idx64 = a->in[1].dtype == EM_I64;
  e->rank = a->in[0].ndim;
  e->axis = axis;
  for (int i = 0; i < e->rank; i++) {
    e->ddims[i] = a->in[0].dims[i];
    e->edims[i] = a->in[1].dims[i];
  }
}

static em_status scatter_elements_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int red, ax;
  em_status s = reduction_of(a, &red);
  if (!s) s = elements_check(a, &ax);
  if (s) return s;
  em_index_elements e;
  elements_on(a, in[1], ax, &e);
  return em_index_gpu_scatter_elements(a, a->in[0].dtype, &e, em_tensor_data(out[0]), em_tensor_data(in[0]),
                                       em_tensor_data(in[2]), red);
}

static em_status scatter_elements_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                       const em_var *dy, em_var *din) {
  (void)y;
  return scatter_back(g, a, x, dy, din, "scatter_elements", "_scatter_elements_grad");
}

static em_status scatter_elements_grad_infer(em_op_args *a) {
  int ax;
  em_status s = scatter_grad_infer_common(a);
  if (!s) s = elements_check(a, &ax);
  if (s) return s;
  set_out(a, a->in[2].dtype, a->in[2].ndim, a->in[2].dims);
  return EM_OK;
}

static em_status scatter_elements_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int last_only, ax;
  em_status s = grad_mode(a, &last_only);
  if (!s) s = elements_check(a, &ax);
  if (s) return s;
  int64_t *tg;
  if ((s = element_targets(a, in[1], ax, &tg))) return s;
  int64_t n = em_shape_numel(&a->in[0]), ne = em_shape_numel(&a->in[1]);
  unsigned char *seen = last_only ? calloc((size_t)(n > 0 ? n : 1), 1) : NULL;
  if (last_only && !seen) {
    free(tg);
    return no_memory(a);
  }
  const size_t es = em_dtype_size(a->in[0].dtype);
  const char *dy = em_tensor_data(in[0]);
  char *o = em_tensor_data(out[0]);
  /* Backwards: the first update seen for a target is the one that last wrote it. */
  for (int64_t i = ne - 1; i >= 0; i--) {
    if (last_only && seen[tg[i]]) {
      memset(o + (size_t)i * es, 0, es);
      continue;
    }
    if (last_only) seen[tg[i]] = 1;
    memcpy(o + (size_t)i * es, dy + (size_t)tg[i] * es, es);
  }
  free(seen);
  free(tg);
  return EM_OK;
}

static em_status scatter_elements_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int last_only, ax;
  em_status s = grad_mode(a, &last_only);
  if (!s) s = elements_check(a, &ax);
  if (s) return s;
  em_index_elements e;
  elements_on(a, in[1], ax, &e);
  return em_index_gpu_scatter_elements_grad(a, a->in[0].dtype, &e, em_tensor_data(out[0]), em_tensor_data(in[0]),
                                            last_only);
}

/* ============================================================== table === */

const em_op_def em_ops_index[] = {
    {.name = "cumsum",
     .doc = "running sum along attr axis (INT, 0) in index order, x's type: attrs exclusive (0), reverse (0)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = cumsum_infer, .cpu = cumsum_cpu, .gpu = cumsum_gpu, .backward = cumsum_back,
     .attrs = EM_ATTRS("axis", "exclusive", "reverse")},
    {.name = "gather_nd",
     .doc = "ONNX GatherND (data, indices [..., k]): slices of data by index tuples; attr batch_dims (INT, 0)",
     .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 1u << 1,
     .infer = gather_nd_infer, .cpu = gather_nd_cpu, .gpu = gather_nd_gpu, .backward = gather_nd_back,
     .attrs = EM_ATTRS("batch_dims")},
    {.name = "_gather_nd_grad",
     .doc = "gather_nd's gradient (dy, indices, data): deterministic scatter-add into zeros; attr batch_dims",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 6u,
     .infer = gather_nd_grad_infer, .cpu = gather_nd_grad_cpu, .gpu = gather_nd_grad_gpu,
     .backward = gather_nd_grad_back,
     .attrs = EM_ATTRS("batch_dims")},
    {.name = "scatter_nd",
     .doc = "ONNX ScatterND (data, indices [..., k], updates): attr reduction none|add|mul|max|min (none: last wins)",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 1u << 1,
     .infer = scatter_nd_infer, .cpu = scatter_nd_cpu, .gpu = scatter_nd_gpu, .backward = scatter_nd_back,
     .attrs = EM_ATTRS("reduction")},
    {.name = "_scatter_nd_grad",
     .doc = "scatter_nd's gradient for the updates (dy, indices, updates): attr reduction none|add",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 6u,
     .infer = scatter_nd_grad_infer, .cpu = scatter_nd_grad_cpu, .gpu = scatter_nd_grad_gpu,
     .backward = scatter_nd_grad_back,
     .attrs = EM_ATTRS("reduction")},
    {.name = "scatter_elements",
     .doc = "ONNX ScatterElements (data, indices, updates): attrs axis (INT, 0), reduction (none: last wins)",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 1u << 1,
     .infer = scatter_elements_infer, .cpu = scatter_elements_cpu, .gpu = scatter_elements_gpu,
     .backward = scatter_elements_back, .attrs = EM_ATTRS("axis", "reduction")},
    {.name = "_scatter_elements_grad",
     .doc = "scatter_elements' gradient for the updates (dy, indices, updates): attrs axis, reduction none|add",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 6u,
     .infer = scatter_elements_grad_infer, .cpu = scatter_elements_grad_cpu, .gpu = scatter_elements_grad_gpu,
     .backward = scatter_elements_grad_back,
     .attrs = EM_ATTRS("axis", "reduction")},
};
const size_t em_ops_index_count = sizeof em_ops_index / sizeof em_ops_index[0];
