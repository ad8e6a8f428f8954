/* Core ops: the ones the engine itself relies on (autodiff seeds and
 * accumulates gradients with them, the test kit builds losses with them).
 *
 *   identity(x)              x (any dtype)
 *   stop_gradient(x)         x; no gradient flows back through it
 *   zeros()                  zeros of attrs "shape" (INTS) and "dtype" (INT, default f32)
 *   zeros_like(x)            zeros of x's dtype and shape (attr "dtype": another dtype)
 *   ones_like(x)             ones, likewise
 *   add_n(x1..xn)            elementwise sum of 1..16 same-shape, same-dtype inputs
 *   sum_to(x, like)          x summed over the axes where like's shape broadcasts to x's (the
 *                            gradient of broadcasting); like's values are not read
 *   broadcast_like(x, like)  x broadcast (numpy) to like's shape; its gradient is sum_to
 *   _weighted_sum(y, w)      scalar sum(y * w), accumulated in double (test losses)
 *   _scale_by(w, s)          w times the scalar s
 *
 * Every op runs on the GPU too (ops/core_gpu.c, kernels/core.cu) with the
 * same bits in both modes; the orders of the sums, which the kernels follow:
 *   add_n           per element, inputs in input order, in the dtype (integers wrap);
 *   sum_to          per output element, from 0 in a double (int64 for integers), x's
 *                   elements in row-major order;
 *   _weighted_sum   double products summed in chunks of EM_CORE_WSUM_CHUNK, then the
 *                   chunk sums in order (kernels/core_math.h).
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "core_gpu.h"
#include "../kernels/core_math.h"

/* ------------------------------------------------------------ helpers --- */

static em_status same_as_input(em_op_args *a) {
  a->out[0] = a->in[0];
  return EM_OK;
}

static int is_numeric_math(em_dtype t) { return t == EM_F32 || t == EM_F64 || t == EM_I32 || t == EM_I64; }

/* The value of element i of a contiguous tensor of a math dtype, as double. */
static double get_d(em_dtype t, const void *p, int64_t i) {
  switch (t) {
  case EM_F32: return ((const float *)p)[i];
  case EM_F64: return ((const double *)p)[i];
  case EM_I32: return ((const int32_t *)p)[i];
  case EM_I64: return (double)((const int64_t *)p)[i];
  default: return 0;
  }
}

/* Row-major strides of shape, with 0 on the axes where `small` (aligned to
 * the right of `big`, numpy style) has size 1 while big does not. */
static void broadcast_strides(const em_shape *big, const em_shape *small, int64_t *strides) {
  int64_t st = 1;
  for (int i = big->ndim - 1; i >= 0; i--) {
    int j = i - (big->ndim - small->ndim);
    int64_t d = j >= 0 ? small->dims[j] : 1;
    strides[i] = d == 1 && big->dims[i] != 1 ? 0 : st;
    st *= d;
  }
}

/* For each element of big (row-major), the offset in small under numpy
 * broadcasting: calls visit(i_big, i_small). Iterative, no recursion. */
#define WALK_BROADCAST(big, small, BODY)                                                                   \
  do {                                                                                                     \
    int64_t st_[EM_MAX_DIMS], idx_[EM_MAX_DIMS] = {0};                                                     \
    broadcast_strides(big, small, st_);                                                                    \
    int64_t n_ = em_shape_numel(big), off_ = 0;                                                            \
    int nd_ = (big)->ndim;                                                                                 \
    for (int64_t ib = 0; ib < n_; ib++) {                                                                  \
      int64_t is = off_;                                                                                   \
      BODY;                                                                                                \
      for (int k_ = nd_ - 1; k_ >= 0; k_--) {                                                              \
        off_ += st_[k_];                                                                                   \
        if (++idx_[k_] < (big)->dims[k_]) break;                                                           \
        off_ -= st_[k_] * idx_[k_];                                                                        \
        idx_[k_] = 0;                                                                                      \
      }                                                                                                    \
    }                                                                                                      \
  } while (0)

/* ----------------------------------------------------- identity family --- */

static em_status copy_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  size_t bytes = (size_t)em_shape_numel(&a->out[0]) * em_dtype_size(a->out[0].dtype);
  if (em_tensor_data(out[0]) != em_tensor_data(in[0]) && bytes) memcpy(em_tensor_data(out[0]), em_tensor_data(in[0]), bytes);
  return EM_OK;
}

static em_status identity_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                   const em_var *dy, em_var *din) {
  (void)g, (void)a, (void)x, (void)y;
  din[0] = dy[0];
  return EM_OK;
}

/* stop_gradient: the gradient is cut (din stays -1). */
static em_status stop_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                               em_var *din) {
  (void)g, (void)a, (void)x, (void)y, (void)dy, (void)din;
  return EM_OK;
}

/* ------------------------------------------------ zeros_like, ones_like --- */

static em_status like_infer(em_op_args *a) {
  a->out[0] = a->in[0];
  if (em_attr_has(a, "dtype")) {
    int64_t t = em_attr_int(a, "dtype", -1);
    if (t < 0 || t > EM_BOOL || !em_dtype_size((em_dtype)t))
      return em_op_fail(a, "attribute dtype = %lld is not an Ember dtype (0 f32 ... 7 bool)", (long long)t);
    a->out[0].dtype = (em_dtype)t;
  }
  return EM_OK;
}

static em_status zeros_infer(em_op_args *a) {
  int n;
  const int64_t *shape = em_attr_ints(a, "shape", &n);
  if (n > EM_MAX_DIMS) return em_op_fail(a, "attribute shape has %d dimensions (at most %d)", n, EM_MAX_DIMS);
  int64_t t = em_attr_int(a, "dtype", EM_F32);
  if (t < 0 || t > EM_BOOL) return em_op_fail(a, "attribute dtype = %lld is not an Ember dtype", (long long)t);
  a->out[0].dtype = (em_dtype)t;
  a->out[0].ndim = n;
  for (int i = 0; i < n; i++) {
    if (shape[i] < 0) return em_op_fail(a, "attribute shape has a negative dimension (%lld)", (long long)shape[i]);
    a->out[0].dims[i] = shape[i];
  }
  return EM_OK;
}

static em_status fill_value(const em_shape *s, em_tensor *t, double v) {
  int64_t n = em_shape_numel(s);
  void *p = em_tensor_data(t);
  switch (s->dtype) {
  case EM_F32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)v; break;
  case EM_F64: for (int64_t i = 0; i < n; i++) ((double *)p)[i] = v; break;
  case EM_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i] = (int32_t)v; break;
  case EM_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = (int64_t)v; break;
  case EM_U8: case EM_BOOL: memset(p, v != 0, (size_t)n); break;
  case EM_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = v != 0 ? 0x3c00 : 0; break; /* 1.0 in binary16 */
  case EM_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = v != 0 ? 0x3f80 : 0; break; /* 1.0 in bfloat16 */
  }
  return EM_OK;
}

static em_status zeros_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)in;
  return fill_value(&a->out[0], out[0], 0);
}

static em_status ones_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)in;
  return fill_value(&a->out[0], out[0], 1);
}

/* ---------------------------------------------------------------- add_n --- */

static em_status add_n_infer(em_op_args *a) {
  if (!is_numeric_math(a->in[0].dtype)) return em_op_fail(a, "adds f32, f64, i32 and i64 values");
  for (int i = 1; i < a->n_in; i++)
    if (a->in[i].dtype != a->in[0].dtype || a->in[i].ndim != a->in[0].ndim ||
        memcmp(a->in[i].dims, a->in[0].dims, sizeof(int64_t) * (size_t)a->in[0].ndim))
      return em_op_fail(a, "input %d differs from input 0 (add_n adds same-shape, same-dtype values)", i);
  a->out[0] = a->in[0];
  return EM_OK;
}

/* A: the accumulator, the dtype itself or (integers) its unsigned twin, so a
 * sum wraps instead of overflowing (undefined in C); kernels/core.cu does the same.
 * Blocks of ADD_N_BLOCK elements: the block's running sums start as input 0
 * and take each further input in turn, so every element is still
 * ((x0 + x1) + x2) + ... in input order (the same bits as one element at a
 * time), but each pass is a plain vector loop over one input instead of an
 * inner loop over the inputs per element. The output may be input 0 (add_n
 * runs in place): a block reads input 0 before it writes. */
#define ADD_N_BLOCK 512
#define ADD_N_LOOP(T, A)                                                                                   \
  do {                                                                                                     \
    T *y = em_tensor_data(out[0]);                                                                         \
    const T *xs[16];                                                                                       \
    for (int k = 0; k < a->n_in; k++) xs[k] = em_tensor_data(in[k]);                                      \
    _Pragma("omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > 32768)")             \
    for (int64_t b = 0; b < n; b += ADD_N_BLOCK) {                                                        \
      const int64_t m = n - b < ADD_N_BLOCK ? n - b : ADD_N_BLOCK;                                         \
      A acc[ADD_N_BLOCK];                                                                                  \
      for (int64_t i = 0; i < m; i++) acc[i] = (A)xs[0][b + i];                                            \
      for (int k = 1; k < a->n_in; k++) {                                                                  \
        const T *xk = xs[k] + b;                                                                           \
        for (int64_t i = 0; i < m; i++) acc[i] += (A)xk[i];                                                \
      }                                                                                                    \
      for (int64_t i = 0; i < m; i++) y[b + i] = (T)acc[i];                                                \
    }                                                                                                      \
  } while (0)

static em_status add_n_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n = em_shape_numel(&a->out[0]);
  if (a->n_in > 16) return em_op_fail(a, "%d inputs: at most 16", a->n_in);
  switch (a->out[0].dtype) {
  case EM_F32: ADD_N_LOOP(float, float); break;
  case EM_F64: ADD_N_LOOP(double, double); break;
  case EM_I32: ADD_N_LOOP(int32_t, uint32_t); break;
  case EM_I64: ADD_N_LOOP(int64_t, uint64_t); break;
  default: return em_op_fail(a, "unsupported dtype");
  }
  return EM_OK;
}

static em_status add_n_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                em_var *din) {
  (void)g, (void)x, (void)y;
  for (int i = 0; i < a->n_in; i++) din[i] = dy[0];
  return EM_OK;
}

/* ------------------------------------------------ sum_to, broadcast_like --- */

/* 1 when `small` broadcasts (numpy) to `big`; -1 dims match anything. */
static int broadcasts_to(const em_shape *small, const em_shape *big) {
  if (small->ndim > big->ndim) return 0;
  for (int i = 0; i < small->ndim; i++) {
    int64_t s = small->dims[i], b = big->dims[i + big->ndim - small->ndim];
    if (s != b && s != 1 && s != -1 && b != -1) return 0;
  }
  return 1;
}

static em_status sum_to_infer(em_op_args *a) {
  if (!is_numeric_math(a->in[0].dtype)) return em_op_fail(a, "sums f32, f64, i32 and i64 values");
  if (!broadcasts_to(&a->in[1], &a->in[0]))
    return em_op_fail(a, "the target shape (input 1) does not broadcast to input 0's shape");
  a->out[0] = a->in[1];
  a->out[0].dtype = a->in[0].dtype;
  return EM_OK;
}

/* When the target is x's trailing dimensions (a bias gradient: [N, C] to
 * [C], or [1, C]), the sum runs over whole rows: a contiguous inner loop the
 * compiler vectorises, rows added in order. Returns the row count, or -1 when
 * the shapes are not of that form. */
static int64_t leading_rows(const em_shape *big, const em_shape *small) {
  int lead = big->ndim - small->ndim;
  int k = 0;
  while (k < small->ndim && small->dims[k] == 1 && big->dims[lead + k] != 1) k++;
  /* small = [1,...,1, trailing dims of big] */
  for (int i = k; i < small->ndim; i++)
    if (small->dims[i] != big->dims[lead + i]) return -1;
  int64_t rows = 1;
  for (int i = 0; i < lead + k; i++) rows *= big->dims[i];
  return rows;
}

static em_status sum_rows_float(em_dtype t, const void *x, void *y, int64_t rows, int64_t cols) {
  double *acc = calloc((size_t)(cols ? cols : 1), sizeof *acc);
  if (!acc) return em_fail(EM_ERR_OUT_OF_MEMORY, "sum_to: no memory for %lld accumulators", (long long)cols);
  for (int64_t r = 0; r < rows; r++) {
    if (t == EM_F32) {
      const float *row = (const float *)x + r * cols;
      for (int64_t j = 0; j < cols; j++) acc[j] += row[j];
    } else {
      const double *row = (const double *)x + r * cols;
      for (int64_t j = 0; j < cols; j++) acc[j] += row[j];
    }
  }
  for (int64_t j = 0; j < cols; j++) {
    if (t == EM_F32) ((float *)y)[j] = (float)acc[j];
    else ((double *)y)[j] = acc[j];
  }
  free(acc);
  return EM_OK;
}

static em_status sum_to_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *big = &a->in[0], *small = &a->out[0];
  int64_t m = em_shape_numel(small);
  em_dtype t = big->dtype;
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
  int64_t rows = leading_rows(big, small);
  /* Same order of additions per element as the general walk below (rows in
   * order), so both paths give the same bits. */
  if (rows >= 0 && (t == EM_F32 || t == EM_F64)) return sum_rows_float(t, x, y, rows, m);
  if (t == EM_I32 || t == EM_I64) {
    /* Integers: exact in int64 whatever the order. */
    uint64_t *acc = calloc((size_t)(m ? m : 1), sizeof *acc); /* unsigned: wraps, never overflows */
    if (!acc) return em_fail(EM_ERR_OUT_OF_MEMORY, "sum_to: no memory for %lld accumulators", (long long)m);
    if (t == EM_I32) WALK_BROADCAST(big, small, acc[is] += (uint64_t)((const int32_t *)x)[ib]);
    else WALK_BROADCAST(big, small, acc[is] += (uint64_t)((const int64_t *)x)[ib]);
    for (int64_t i = 0; i < m; i++) {
      if (t == EM_I32) ((int32_t *)y)[i] = (int32_t)acc[i];
      else ((int64_t *)y)[i] = (int64_t)acc[i];
    }
    free(acc);
    return EM_OK;
  }
  /* Floats: double accumulators, elements visited in row-major order, so the
   * order of every sum is fixed. */
  double *acc = calloc((size_t)(m ? m : 1), sizeof *acc);
  if (!acc) return em_fail(EM_ERR_OUT_OF_MEMORY, "sum_to: no memory for %lld accumulators", (long long)m);
  if (t == EM_F32) WALK_BROADCAST(big, small, acc[is] += ((const float *)x)[ib]);
  else WALK_BROADCAST(big, small, acc[is] += ((const double *)x)[ib]);
  for (int64_t i = 0; i < m; i++) {
    if (t == EM_F32) ((float *)y)[i] = (float)acc[i];
    else ((double *)y)[i] = acc[i];
  }
  free(acc);
  return EM_OK;
}

static em_status sum_to_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                 em_var *din) {
  (void)a, (void)y;
  return em_apply2(g, "broadcast_like", dy[0], x[0], &din[0]);
}

static em_status broadcast_like_infer(em_op_args *a) {
  if (!broadcasts_to(&a->in[0], &a->in[1]))
    return em_op_fail(a, "input 0 does not broadcast to the shape of input 1");
  a->out[0] = a->in[1];
  a->out[0].dtype = a->in[0].dtype;
  return EM_OK;
}

static em_status broadcast_like_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *big = &a->out[0];
  em_shape small = a->in[0];
  size_t es = em_dtype_size(big->dtype);
  const char *x = em_tensor_data(in[0]);
  char *y = em_tensor_data(out[0]);
  if (es == 4) WALK_BROADCAST(big, &small, ((uint32_t *)y)[ib] = ((const uint32_t *)x)[is]);
  else if (es == 8) WALK_BROADCAST(big, &small, ((uint64_t *)y)[ib] = ((const uint64_t *)x)[is]);
  else WALK_BROADCAST(big, &small, memcpy(y + ib * (int64_t)es, x + is * (int64_t)es, es));
  return EM_OK;
}

static em_status broadcast_like_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                         const em_var *dy, em_var *din) {
  (void)a, (void)y;
  return em_apply2(g, "sum_to", dy[0], x[0], &din[0]);
}

/* ------------------------------------------- _weighted_sum, _scale_by --- */

static em_status weighted_sum_infer(em_op_args *a) {
  if (a->in[0].dtype != EM_F32 && a->in[0].dtype != EM_F64) return em_op_fail(a, "takes f32 or f64 values");
  if (!em_shape_equal(&a->in[0], &a->in[1])) return em_op_fail(a, "the weights must have the values' dtype and shape");
  a->out[0].dtype = a->in[0].dtype;
  a->out[0].ndim = 0;
  return EM_OK;
}

static em_status weighted_sum_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n = em_shape_numel(&a->in[0]);
  em_dtype t = a->in[0].dtype;
  /* In chunks, then the chunk sums (core_math.h: the GPU's order). */
  double s = 0;
  for (int64_t lo = 0; lo < n; lo += EM_CORE_WSUM_CHUNK) {
    int64_t hi = lo + EM_CORE_WSUM_CHUNK < n ? lo + EM_CORE_WSUM_CHUNK : n;
    double c = 0;
    for (int64_t i = lo; i < hi; i++) c += get_d(t, em_tensor_data(in[0]), i) * get_d(t, em_tensor_data(in[1]), i);
    s += c;
  }
  if (t == EM_F32) *(float *)em_tensor_data(out[0]) = (float)s;
  else *(double *)em_tensor_data(out[0]) = s;
  return EM_OK;
}

static em_status weighted_sum_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                       const em_var *dy, em_var *din) {
  (void)a, (void)y;
  return em_apply2(g, "_scale_by", x[1], dy[0], &din[0]);
}

static em_status scale_by_infer(em_op_args *a) {
  if (a->in[0].dtype != EM_F32 && a->in[0].dtype != EM_F64) return em_op_fail(a, "takes f32 or f64 values");
  if (a->in[1].dtype != a->in[0].dtype || a->in[1].ndim != 0)
    return em_op_fail(a, "input 1 must be a scalar of input 0's dtype");
  a->out[0] = a->in[0];
  return EM_OK;
}

static em_status scale_by_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n = em_shape_numel(&a->in[0]);
  if (a->in[0].dtype == EM_F32) {
    float s = *(const float *)em_tensor_data(in[1]);
    const float *x = em_tensor_data(in[0]);
    float *y = em_tensor_data(out[0]);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
  } else {
    double s = *(const double *)em_tensor_data(in[1]);
    const double *x = em_tensor_data(in[0]);
    double *y = em_tensor_data(out[0]);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
  }
  return EM_OK;
}

/* ---------------------------------------------------------------- table --- */

const em_op_def em_ops_core[] = {
  {.name = "identity", .doc = "y = x (any dtype)", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,
   .attrs = EM_NO_ATTRS,
   .infer = same_as_input, .cpu = copy_cpu, .gpu = em_core_copy_gpu, .backward = identity_backward},
  {.name = "stop_gradient", .doc = "y = x; no gradient flows back into x", .min_inputs = 1, .max_inputs = 1,
   .n_outputs = 1, .inplace = 1, .attrs = EM_NO_ATTRS, .infer = same_as_input, .cpu = copy_cpu, .gpu = em_core_copy_gpu,
   .backward = stop_backward},
  {.name = "zeros", .doc = "zeros of attrs shape (INTS) and dtype (INT, default f32)", .min_inputs = 0,
   .max_inputs = 0, .n_outputs = 1, .attrs = EM_ATTRS("shape", "dtype"), .infer = zeros_infer, .cpu = zeros_cpu,
   .gpu = em_core_zeros_gpu},
  {.name = "zeros_like", .doc = "zeros of x's shape (attr dtype: another dtype)", .min_inputs = 1, .max_inputs = 1,
   .n_outputs = 1, .no_grad = 1, .attrs = EM_ATTRS("dtype"), .infer = like_infer, .cpu = zeros_cpu, .gpu = em_core_zeros_gpu},
  {.name = "ones_like", .doc = "ones of x's shape (attr dtype: another dtype)", .min_inputs = 1, .max_inputs = 1,
   .n_outputs = 1, .no_grad = 1, .attrs = EM_ATTRS("dtype"), .infer = like_infer, .cpu = ones_cpu, .gpu = em_core_ones_gpu},
  {.name = "add_n", .doc = "elementwise sum of 1 to 16 same-shape, same-dtype inputs", .min_inputs = 1,
   .max_inputs = 16, .n_outputs = 1, .inplace = 1, .attrs = EM_NO_ATTRS, .infer = add_n_infer, .cpu = add_n_cpu,
   .gpu = em_core_add_n_gpu, .backward = add_n_backward},
  {.name = "sum_to", .doc = "x summed over the axes along which input 1's shape broadcasts to x's (a broadcast's "
                            "gradient)",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 2, .attrs = EM_NO_ATTRS, .infer = sum_to_infer, .cpu = sum_to_cpu,
   .gpu = em_core_sum_to_gpu, .backward = sum_to_backward},
  {.name = "broadcast_like", .doc = "x broadcast (numpy rules) to the shape of input 1", .min_inputs = 2,
   .max_inputs = 2, .n_outputs = 1, .no_grad = 2, .attrs = EM_NO_ATTRS, .infer = broadcast_like_infer, .cpu = broadcast_like_cpu,
   .gpu = em_core_broadcast_like_gpu, .backward = broadcast_like_backward},
  {.name = "_weighted_sum", .doc = "scalar sum(y * w) accumulated in double", .min_inputs = 2, .max_inputs = 2,
   .n_outputs = 1, .no_grad = 2, .attrs = EM_NO_ATTRS, .infer = weighted_sum_infer, .cpu = weighted_sum_cpu,
   .gpu = em_core_weighted_sum_gpu, .backward = weighted_sum_backward},
  {.name = "_scale_by", .doc = "w times the scalar s", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
   .attrs = EM_NO_ATTRS, .infer = scale_by_infer, .cpu = scale_by_cpu,
   .gpu = em_core_scale_by_gpu},
};
const size_t em_ops_core_count = sizeof em_ops_core / sizeof em_ops_core[0];
