/* Softmax and the losses (CNTK's training criteria). f32 and f64; sums run
 * in double in a fixed order, and parallel loops split rows (one output
 * element each), so results never depend on the thread count.
 *
 * softmax(x), log_softmax(x)
 *   axis INT -1: the class axis. Stable: the row's maximum is subtracted
 *   before exp. Gradients through the fused _softmax_grad(y, dy) and
 *   _log_softmax_grad(y, dy) (attr axis), from the op's output.
 * cross_entropy_with_softmax(logits, labels)
 *   CNTK's: -sum_c labels_c * log_softmax(logits)_c along axis (INT -1);
 *   output: logits' shape without that axis. labels are dense (the logits'
 *   dtype and shape) or sparse (i32/i64 class indices, the output's shape).
 *   A sparse label outside [0, C) fails at run time naming it and its
 *   position; ignore_index INT (sparse only, optional): samples with that
 *   label give 0 loss and 0 gradient. Gradients (fused _cross_entropy_grad,
 *   attr which 0/1): logits: (softmax * sum_c labels_c - labels) * dy, which
 *   is CNTK's (softmax - labels) * dy for labels summing to 1; dense labels:
 *   -log_softmax * dy; sparse labels take none.
 * binary_cross_entropy(p, t)
 *   elementwise -(t log p + (1-t) log(1-p)), p and t of one shape; each log
 *   is clamped below at -100 (as PyTorch's BCELoss) so p = 0 or 1 gives a
 *   finite loss. p outside [0, 1] fails at run time (NaN passes through).
 *   Gradients (fused _bce_grad, attr which): p: dy (p - t) / max(p(1-p), 1e-12),
 *   t: dy (log(1-p) - log p) with the clamped logs.
 * squared_error(x, y)
 *   sum of (x-y)^2 per sample: over every axis but the first, output [N]
 *   (CNTK sums over a sample's axes); 0-D and 1-D inputs give a scalar (the
 *   sum over everything). Gradients (fused _squared_error_grad, attr which):
 *   x: 2(x-y) dy, y: -2(x-y) dy.
 * classification_error(output, labels)
 *   axis INT -1, topN INT 1: per sample 1 when the label's class is not
 *   among the topN largest outputs, else 0 (output's dtype, shape without
 *   axis). Labels dense (one-hot: its largest entry, the first on ties) or
 *   sparse as above. A class's rank counts the outputs larger than it and
 *   the equal ones before it, so ties go to the lower index (as argmax).
 *   ignore_index INT (sparse only, optional): those samples give 0.
 *   Not differentiable (no gradient into either input).
 *
 * Speed: f32 rows whose class axis is the last (contiguous) go through
 * vector fast paths (below: em_expf, the exp the GPU kernels share, and sums
 * in double over LANES fixed partial sums); other rows, and f64, take the
 * generic path in double with libm.
 *
 * Portable mode (a->portable) and the GPU (kernels/loss.cu, gpu members at the
 * end): every row sum and maximum in kernels/loss_math.h's "lanes" order
 * (L = the power of two >= the row length, at most 256; lane l adds elements
 * l, l + L, ... from 0.0, then the lanes fold as a tree), the per-element code
 * of loss_math.h (em_expf for f32 exponentials, its binary64 exp and log for
 * f64 and for every log), so the CPU and every GPU give the same bits. The
 * elementwise ops (binary cross entropy, the squared error's gradient) and
 * classification_error (no sums) give the same bits in every mode. */
/* Lets GCC turn the fast paths' selects (the row maximum) into vector code; it
 * only stops the compiler from preserving FP exception flags, which Ember never
 * reads (as in unary.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/em_math.h"
#include "../kernels/loss_math.h"
#include "loss_gpu.h"
#include "op.h"

/* ---------------------------------------------------------- plumbing --- */

#define PAR_THRESHOLD 32768

/* ------------------------------------------------ f32 row fast paths --- */

/* A softmax-family op over [64, 32000] f32 logits spent ~7 ns per exp in the generic path
 * (double libm, one element at a time): softmax + cross entropy forward and backward took
 * 69 ms on one thread, seven times the GEMM that made the logits. These kernels work on
 * one contiguous f32 row in vector loops. Sums run in double in LANES partial sums, lane l
 * taking elements l, l + LANES, ..., added pairwise in a fixed order at the end: the bits
 * depend neither on the thread count nor on the vector width of the clone that runs.
 * exp is em_math.h's em_expf on a float argument, so a tiny probability far below the
 * row's maximum carries a relative error of about |x - max| * 2^-24 (as in any f32
 * softmax); sums, log-sum-exp and log-softmax stay in double. */
#define LANES 16

EM_INLINE static double lanes_total(double *s) {
  for (int w = LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) s[l] += s[l + w];
  return s[0];
}

/* The row's maximum; NaN when any element is NaN. */
EM_INLINE static float row_max_f32(const float *x, int64_t c) {
  float m[LANES];
  for (int l = 0; l < LANES; l++) m[l] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= c; j += LANES)
#pragma omp simd
    for (int l = 0; l < LANES; l++) {
      float v = x[j + l];
      m[l] = v > m[l] || v != v ? v : m[l];
    }
#pragma omp simd
  for (int l = 0; l < (int)(c - j); l++) {
    float v = x[j + l];
    m[l] = v > m[l] || v != v ? v : m[l];
  }
  float mx = m[0];
  for (int l = 1; l < LANES; l++) mx = m[l] > mx || m[l] != m[l] ? m[l] : mx;
  return mx;
}

/* exp's argument below which em_expf's float result is subnormal (ln FLT_MIN = -87.336):
 * few bits left, 0 below -104. Results scaled up by more than 1 redo those elements in
 * double (the generic path's precision). */
#define EXPF_SUBNORMAL_BELOW (-87.33f)

/* sum_j exp(x_j - mx) over j != skip (skip < 0: every j), in double. */
EM_INLINE static double row_sum_exp_f32(const float *x, int64_t c, float mx, int64_t skip) {
  double s[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= c; j += LANES)
#pragma omp simd
    for (int l = 0; l < LANES; l++) s[l] += j + l == skip ? 0.0 : (double)em_expf(x[j + l] - mx);
#pragma omp simd
  for (int l = 0; l < (int)(c - j); l++) s[l] += j + l == skip ? 0.0 : (double)em_expf(x[j + l] - mx);
  return lanes_total(s);
}

/* The row's maximum and sum_j exp(x_j - max); the sum is 1 when the maximum is infinite
 * (no finite shift exists: the callers' formulas then give the plain ones' inf or NaN). */
EM_SIMD_CLONES static void row_stats_f32(const float *x, int64_t c, double *mx, double *sum) {
  float m = row_max_f32(x, c);
  *mx = m;
  *sum = isinf(m) ? 1.0 : row_sum_exp_f32(x, c, m, -1);
}

EM_SIMD_CLONES static void softmax_row_f32(const float *x, float *y, int64_t c, int log_out) {
  float mx = row_max_f32(x, c);
  double sum = row_sum_exp_f32(x, c, mx, -1);
  if (log_out) {
    double lse = log(sum), m = mx;
#pragma omp simd
    for (int64_t j = 0; j < c; j++) y[j] = (float)(((double)x[j] - m) - lse);
  } else {
    double inv = 1.0 / sum; /* <= 1: the maximum's term is 1 */
#pragma omp simd
    for (int64_t j = 0; j < c; j++) y[j] = (float)((double)em_expf(x[j] - mx) * inv);
  }
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). */
EM_SIMD_CLONES static void softmax_grad_row_f32(const float *y, const float *dy, float *dx, int64_t c, int log_out) {
  double s[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= c; j += LANES)
#pragma omp simd
    for (int l = 0; l < LANES; l++) s[l] += log_out ? (double)dy[j + l] : (double)dy[j + l] * (double)y[j + l];
#pragma omp simd
  for (int l = 0; l < (int)(c - j); l++) s[l] += log_out ? (double)dy[j + l] : (double)dy[j + l] * (double)y[j + l];
  double dot = lanes_total(s);
  if (!log_out) {
#pragma omp simd
    for (j = 0; j < c; j++) dx[j] = (float)((double)y[j] * ((double)dy[j] - dot));
    return;
  }
#pragma omp simd
  for (j = 0; j < c; j++) dx[j] = (float)((double)dy[j] - (double)em_expf(y[j]) * dot);
  if (fabs(dot) > 1)
    for (j = 0; j < c; j++)
      if (y[j] < EXPF_SUBNORMAL_BELOW) dx[j] = (float)((double)dy[j] - exp((double)y[j]) * dot);
}

/* Cross entropy's logits gradient for one row: (softmax * tsum - t) * g, with t the dense
 * labels row, or, when t is NULL, the one-hot row of label (tsum 1; none when label < 0).
 * The probabilities come as exp(x - max) * (tsum g / sum). With sparse labels the bulk is
 * scaled in float (the result's precision), and the label's element is -(the sum of the
 * other terms / sum) g: p - 1 computed as such cancels on a confident row. A row whose
 * maximum is infinite takes the formula as written (NaN or zeros, as the generic path). */
EM_SIMD_CLONES static void ce_grad_row_f32(const float *x, const float *t, int64_t label, double tsum, double g,
                                           float *dx, int64_t c) {
  if (g == 0) {
    for (int64_t j = 0; j < c; j++) dx[j] = 0;
    return;
  }
  float mx = row_max_f32(x, c);
  if (isinf(mx)) {
    for (int64_t j = 0; j < c; j++) {
      double tv = t ? (double)t[j] : (double)(j == label);
      dx[j] = (float)((exp((double)x[j] - mx) * tsum - tv) * g);
    }
    return;
  }
  if (t) {
    double scale = tsum * g / row_sum_exp_f32(x, c, mx, -1);
#pragma omp simd
    for (int64_t j = 0; j < c; j++) dx[j] = (float)((double)em_expf(x[j] - mx) * scale - (double)t[j] * g);
    if (fabs(scale) > 1)
      for (int64_t j = 0; j < c; j++)
        if (x[j] - mx < EXPF_SUBNORMAL_BELOW) dx[j] = (float)(exp((double)x[j] - mx) * scale - (double)t[j] * g);
    return;
  }
  int has = label >= 0 && label < c;
  double others = row_sum_exp_f32(x, c, mx, has ? label : -1);
  double sum = others + (has ? exp((double)x[label] - mx) : 0.0), scale = g / sum;
  const float scale_f = (float)scale;
#pragma omp simd
  for (int64_t j = 0; j < c; j++) dx[j] = em_expf(x[j] - mx) * scale_f;
  if (fabs(scale) > 1)
    for (int64_t j = 0; j < c; j++)
      if (x[j] - mx < EXPF_SUBNORMAL_BELOW) dx[j] = (float)(exp((double)x[j] - mx) * scale);
  if (has) dx[label] = (float)(-(others / sum) * g);
}

static double ld(const void *p, int f64, int64_t i) { return f64 ? ((const double *)p)[i] : ((const float *)p)[i]; }
static void st(void *p, int f64, int64_t i, double v) {
  if (f64) ((double *)p)[i] = v;
  else ((float *)p)[i] = (float)v;
}
static int64_t ld_int(const void *p, em_dtype t, int64_t i) {
  return t == EM_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}
static int is_int(em_dtype t) { return t == EM_I32 || t == EM_I64; }

/* A tensor seen as [outer, c, inner] around the class axis: row r = (o, i)
 * starts at o*c*inner + i and steps by inner. */
typedef struct rows {
  int64_t outer, c, inner;
} rows;

static rows rows_of(const em_shape *s, int axis) {
  rows r = {1, s->dims[axis], 1};
  for (int i = 0; i < axis; i++) r.outer *= s->dims[i];
  for (int i = axis + 1; i < s->ndim; i++) r.inner *= s->dims[i];
  return r;
}
static int64_t row_base(const rows *r, int64_t row) { return (row / r->inner) * r->c * r->inner + row % r->inner; }

/* Same dims, -1 (dynamic) matching anything. */
static int dims_match(const int64_t *x, const int64_t *y, int n) {
  for (int i = 0; i < n; i++)
    if (x[i] != y[i] && x[i] >= 0 && y[i] >= 0) return 0;
  return 1;
}

static em_status need_float(const em_op_args *a, int i) {
  em_dtype t = a->in[i].dtype;
  if (t != EM_F32 && t != EM_F64)
    return em_op_fail(a, "input %d has dtype %s; expected f32 or f64", i, em_dtype_name(t));
  return EM_OK;
}

/* in[i] has in[0]'s dtype and shape. */
static em_status need_same(const em_op_args *a, int i, const char *what) {
  const em_shape *x = &a->in[0], *y = &a->in[i];
  if (y->dtype != x->dtype)
    return em_op_fail(a, "%s has dtype %s, expected %s", what, em_dtype_name(y->dtype), em_dtype_name(x->dtype));
  if (y->ndim != x->ndim || !dims_match(x->dims, y->dims, x->ndim))
    return em_op_fail(a, "%s must have the first input's shape", what);
  return EM_OK;
}

/* The class axis (attr axis, default -1) of in[0]. */
static em_status class_axis(const em_op_args *a, int *axis) {
  if (a->in[0].ndim < 1) return em_op_fail(a, "input 0 must have rank >= 1 (a class axis)");
  return em_norm_axis(a, em_attr_int(a, "axis", -1), a->in[0].ndim, axis);
}

/* x's shape without axis. */
static void drop_axis(const em_shape *x, int axis, em_shape *out) {
  out->dtype = x->dtype;
  out->ndim = 0;
  for (int i = 0; i < x->ndim; i++)
    if (i != axis) out->dims[out->ndim++] = x->dims[i];
}

/* in[which], with a dynamic dim filled from the other when it is known. */
static void merged_shape(const em_shape *x, const em_shape *y, em_shape *out) {
  *out = *x;
  for (int i = 0; i < x->ndim; i++)
    if (out->dims[i] < 0) out->dims[i] = y->dims[i];
}

/* Adds the node op(inputs) with attrs to g as din[k]. */
static em_status grad_node(em_graph *g, const char *op, const em_var *in, int n_in, const em_attr *at, int n_at,
                           em_var *out) {
  return em_apply(g, op, in, n_in, at, n_at, out, 1);
}

/* ------------------------------------------------- portable mode --- */

/* Portable mode (a->portable) sums every row in kernels/loss_math.h's "lanes"
 * order with its per-element code, as kernels/loss.cu does on a GPU, so both
 * give the same bits: lane l of L = lm_lanes(c) adds elements l, l + L, ...
 * in order from 0.0, then the lanes fold as a tree (w = L/2 ... 1: lane l < w
 * adds lane l + w). Not vectorised: the fast mode keeps the paths above. */
typedef struct lanes {
  int L;
  double s[LM_MAX_LANES];
} lanes;

static void lanes_start(lanes *l, int64_t c, double v) {
  l->L = lm_lanes(c);
  for (int i = 0; i < l->L; i++) l->s[i] = v;
}
static void lanes_add(lanes *l, int64_t j, double v) {
  double *p = &l->s[j & (l->L - 1)];
  *p = *p + v;
}
static void lanes_max(lanes *l, int64_t j, double v) {
  double *p = &l->s[j & (l->L - 1)];
  *p = lm_max_f64(*p, v);
}
static double lanes_sum(lanes *l) {
  for (int w = l->L / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l->s[i] = l->s[i] + l->s[i + w];
  return l->s[0];
}
static double lanes_fold_max(lanes *l) {
  for (int w = l->L / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l->s[i] = lm_max_f64(l->s[i], l->s[i + w]);
  return l->s[0];
}

/* e^(v - mx) and e^v as the kernels compute them: em_expf on floats for f32. */
static double p_exp_shift(int f64, double v, double mx) {
  return f64 ? lm_exp_shift_f64(v, mx) : lm_exp_shift_f32((float)v, (float)mx);
}
static double p_exp(int f64, double v) { return f64 ? lm_exp_f64(v) : lm_exp_f32((float)v); }

static double p_row_max(const void *x, int f64, int64_t base, int64_t c, int64_t step) {
  lanes l;
  lanes_start(&l, c, -INFINITY);
  for (int64_t j = 0; j < c; j++) lanes_max(&l, j, ld(x, f64, base + j * step));
  return lanes_fold_max(&l);
}

/* sum_j e^(x_j - mx) over j != skip (skip < 0: every j). */
static double p_row_sum_exp(const void *x, int f64, int64_t base, int64_t c, int64_t step, double mx, int64_t skip) {
  lanes l;
  lanes_start(&l, c, 0.0);
  for (int64_t j = 0; j < c; j++) lanes_add(&l, j, j == skip ? 0.0 : p_exp_shift(f64, ld(x, f64, base + j * step), mx));
  return lanes_sum(&l);
}

static void p_softmax_row(const void *x, void *y, int f64, int64_t base, int64_t c, int64_t step, int log_out) {
  double mx = p_row_max(x, f64, base, c, step);
  double sum = p_row_sum_exp(x, f64, base, c, step, mx, -1), lse = log_out ? lm_log_d(sum) : 0.0;
  for (int64_t j = 0; j < c; j++) {
    int64_t k = base + j * step;
    double v = ld(x, f64, k), e = log_out ? 0.0 : p_exp_shift(f64, v, mx);
    st(y, f64, k, lm_softmax_out(e, v, mx, sum, lse, log_out));
  }
}

static void p_softmax_grad_row(const void *y, const void *dy, void *dx, int f64, int64_t base, int64_t c, int64_t step,
                               int log_out) {
  lanes l;
  lanes_start(&l, c, 0.0);
  for (int64_t j = 0; j < c; j++) {
    int64_t k = base + j * step;
    lanes_add(&l, j, log_out ? ld(dy, f64, k) : ld(dy, f64, k) * ld(y, f64, k));
  }
  double dot = lanes_sum(&l);
  for (int64_t j = 0; j < c; j++) {
    int64_t k = base + j * step;
    double yv = ld(y, f64, k);
    st(dx, f64, k, lm_softmax_grad_out(yv, ld(dy, f64, k), log_out ? p_exp(f64, yv) : 0.0, dot, log_out));
  }
}

/* ----------------------------------------------------------- softmax --- */

static em_status softmax_infer(em_op_args *a) {
  int axis;
  em_status s = need_float(a, 0);
  if (s || (s = class_axis(a, &axis))) return s;
  a->out[0] = a->in[0];
  return EM_OK;
}

/* One row: y = softmax(x) or log_softmax(x), with max subtraction. */
static void softmax_row(const void *x, void *y, int f64, int64_t base, int64_t c, int64_t step, int log_out) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < c; j++) {
    double v = ld(x, f64, base + j * step);
    if (v > mx || isnan(v)) mx = v;
  }
  double sum = 0;
  for (int64_t j = 0; j < c; j++) sum += exp(ld(x, f64, base + j * step) - mx);
  double lse = log(sum);
  for (int64_t j = 0; j < c; j++) {
    double v = ld(x, f64, base + j * step) - mx;
    st(y, f64, base + j * step, log_out ? v - lse : exp(v) / sum);
  }
}

static em_status softmax_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, int log_out) {
  int axis;
  em_status s = class_axis(a, &axis);
  if (s) return s;
  rows r = rows_of(&a->in[0], axis);
  int f64 = a->in[0].dtype == EM_F64;
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
  int64_t n_rows = r.outer * r.inner;
  const int fast = !f64 && r.inner == 1;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n_rows * r.c > PAR_THRESHOLD)
  for (int64_t row = 0; row < n_rows; row++) {
    if (a->portable) p_softmax_row(x, y, f64, row_base(&r, row), r.c, r.inner, log_out);
    else if (fast) softmax_row_f32((const float *)x + row * r.c, (float *)y + row * r.c, r.c, log_out);
    else softmax_row(x, y, f64, row_base(&r, row), r.c, r.inner, log_out);
  }
  return EM_OK;
}

static em_status softmax_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_run(a, in, out, 0);
}
static em_status log_softmax_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_run(a, in, out, 1);
}

static em_status softmax_backward_common(em_graph *g, const em_op_args *a, const em_var *y, const em_var *dy,
                                         em_var *din, const char *grad_op) {
  if (dy[0] < 0) return EM_OK;
  int axis;
  em_status s = class_axis(a, &axis);
  if (s) return s;
  em_attr at = em_attr_i("axis", axis);
  em_var in[2] = {y[0], dy[0]};
  return grad_node(g, grad_op, in, 2, &at, 1, &din[0]);
}

static em_status softmax_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                  const em_var *dy, em_var *din) {
  (void)x;
  return softmax_backward_common(g, a, y, dy, din, "_softmax_grad");
}
static em_status log_softmax_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                      const em_var *dy, em_var *din) {
  (void)x;
  return softmax_backward_common(g, a, y, dy, din, "_log_softmax_grad");
}

/* _softmax_grad(y, dy) / _log_softmax_grad(y, dy): dx along rows. */
static em_status softmax_grad_infer(em_op_args *a) {
  int axis;
  em_status s = need_float(a, 0);
  if (s || (s = need_same(a, 1, "dy")) || (s = class_axis(a, &axis))) return s;
  a->out[0] = a->in[0]; /* y's shape is x's, exactly (dynamic axes included) */
  return EM_OK;
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). */
static void softmax_grad_row(const void *y, const void *dy, void *dx, int f64, int64_t base, int64_t c, int64_t step,
                             int log_out) {
  double dot = 0;
  for (int64_t j = 0; j < c; j++) {
    int64_t k = base + j * step;
    dot += log_out ? ld(dy, f64, k) : ld(dy, f64, k) * ld(y, f64, k);
  }
  for (int64_t j = 0; j < c; j++) {
    int64_t k = base + j * step;
    double yv = ld(y, f64, k), g = ld(dy, f64, k);
    st(dx, f64, k, log_out ? g - exp(yv) * dot : yv * (g - dot));
  }
}

static em_status softmax_grad_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, int log_out) {
  int axis;
  em_status s = class_axis(a, &axis);
  if (s) return s;
  rows r = rows_of(&a->in[0], axis);
  int f64 = a->in[0].dtype == EM_F64;
  const void *y = em_tensor_data(in[0]), *dy = em_tensor_data(in[1]);
  void *dx = em_tensor_data(out[0]);
  int64_t n_rows = r.outer * r.inner;
  const int fast = !f64 && r.inner == 1;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n_rows * r.c > PAR_THRESHOLD)
  for (int64_t row = 0; row < n_rows; row++) {
    if (a->portable) p_softmax_grad_row(y, dy, dx, f64, row_base(&r, row), r.c, r.inner, log_out);
    else if (fast)
      softmax_grad_row_f32((const float *)y + row * r.c, (const float *)dy + row * r.c, (float *)dx + row * r.c, r.c,
                           log_out);
    else softmax_grad_row(y, dy, dx, f64, row_base(&r, row), r.c, r.inner, log_out);
  }
  return EM_OK;
}

static em_status softmax_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_grad_run(a, in, out, 0);
}
static em_status log_softmax_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_grad_run(a, in, out, 1);
}

/* ------------------------------------------------------------ labels --- */

/* The labels of a classification loss: dense (logits' dtype and shape) or
 * sparse (integer indices, logits' shape without the class axis). */
typedef struct labels_info {
  int axis;
  int sparse;
  em_dtype label_dtype;
  int has_ignore;             /* ignore_index given (sparse only) */
  int64_t ignore;
  em_shape reduced;           /* logits' shape without the class axis */
} labels_info;

static em_status check_labels(const em_op_args *a, labels_info *li) {
  em_status s = need_float(a, 0);
  if (s || (s = class_axis(a, &li->axis))) return s;
  const em_shape *x = &a->in[0], *t = &a->in[1];
  drop_axis(x, li->axis, &li->reduced);
  if (t->dtype == x->dtype) {
    li->sparse = 0;
    if (t->ndim != x->ndim || !dims_match(t->dims, x->dims, x->ndim))
      return em_op_fail(a, "dense labels must have the logits' shape");
  } else if (is_int(t->dtype)) {
    li->sparse = 1;
    if (t->ndim != li->reduced.ndim || !dims_match(t->dims, li->reduced.dims, t->ndim))
      return em_op_fail(a, "sparse labels (class indices) must have the logits' shape without axis %d", li->axis);
  } else {
    return em_op_fail(a, "labels of dtype %s: expected %s (dense) or i32/i64 class indices (sparse)",
                      em_dtype_name(t->dtype), em_dtype_name(x->dtype));
  }
  li->label_dtype = t->dtype;
  li->has_ignore = em_attr_has(a, "ignore_index");
  li->ignore = em_attr_int(a, "ignore_index", 0);
  if (li->has_ignore && !li->sparse)
    return em_op_fail(a, "attribute ignore_index applies to sparse (integer) labels only");
  for (int i = 0; i < li->reduced.ndim; i++)
    if (li->reduced.dims[i] < 0 && li->sparse) li->reduced.dims[i] = t->dims[i];
  return EM_OK;
}

/* "[2,0]": the multi-index of flat position pos in shape s. */
static const char *position_str(const em_shape *s, int64_t pos, char *buf, size_t cap) {
  int64_t idx[EM_MAX_DIMS];
  for (int i = s->ndim - 1; i >= 0; i--) {
    idx[i] = s->dims[i] ? pos % s->dims[i] : 0;
    pos = s->dims[i] ? pos / s->dims[i] : 0;
  }
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < s->ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", idx[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* Sparse label l at flat position i is not a class of [0, c). */
static em_status label_range_error(const em_op_args *a, int64_t l, int64_t i, int64_t c) {
  char pos[160];
  return em_op_fail(a, "label %" PRId64 " at position %s is outside the classes [0, %" PRId64 ")", l,
                    position_str(&a->in[1], i, pos, sizeof pos), c);
}

/* Run-time check of sparse labels (before any parallel loop, so the first
 * bad one is reported whatever the thread count). */
static em_status check_label_values(const em_op_args *a, const labels_info *li, const em_tensor *labels,
                                    int64_t c) {
  const void *p = em_tensor_data(labels);
  int64_t n = em_tensor_numel(labels);
  for (int64_t i = 0; i < n; i++) {
    int64_t l = ld_int(p, li->label_dtype, i);
    if (li->has_ignore && l == li->ignore) continue;
    if (l < 0 || l >= c) return label_range_error(a, l, i, c);
  }
  return EM_OK;
}

/* At run time, what every classification loss needs first: the labels' kind, the logits'
 * rows along the class axis, and (sparse) every label checked against the class count. */
static em_status labels_at_run(const em_op_args *a, em_tensor *const *in, labels_info *li, rows *r) {
  em_status s = check_labels(a, li);
  if (s) return s;
  *r = rows_of(&a->in[0], li->axis);
  return li->sparse ? check_label_values(a, li, in[1], r->c) : EM_OK;
}

/* The label of row `row` for a sparse loss: -1 when ignored. */
static int64_t sparse_label(const labels_info *li, const void *labels, int64_t row) {
  int64_t l = ld_int(labels, li->label_dtype, row);
  return li->has_ignore && l == li->ignore ? -1 : l;
}

/* A row's maximum, sum_j exp(x_j - max), and the same sum without j = skip (skip < 0:
 * none). The sums are 1 when the maximum is infinite (see row_stats_f32). The losses use
 * them as (max - x) + log(sum), never as lse - x: with |max| ~ 1e16 or more, max + log(sum)
 * would round the log away (tied logits of 1e20 gave a loss of 0 instead of log 2). */
static void row_stats(const void *x, int f64, int64_t base, int64_t c, int64_t step, int64_t skip, double *mx,
                      double *sum, double *others) {
  if (!f64 && step == 1 && skip < 0) {
    row_stats_f32((const float *)x + base, c, mx, sum);
    *others = *sum;
    return;
  }
  double m = -INFINITY, s = 0, o = 0;
  for (int64_t j = 0; j < c; j++) {
    double v = ld(x, f64, base + j * step);
    if (v > m || isnan(v)) m = v;
  }
  if (isinf(m)) s = o = 1;
  else
    for (int64_t j = 0; j < c; j++) {
      double e = exp(ld(x, f64, base + j * step) - m);
      s += e;
      if (j != skip) o += e;
    }
  *mx = m, *sum = s, *others = o;
}

/* ------------------------------------------------- cross entropy --- */

static em_status ce_infer(em_op_args *a) {
  labels_info li;
  em_status s = check_labels(a, &li);
  if (s) return s;
  a->out[0] = li.reduced;
  return EM_OK;
}

/* Portable mode: the row maximum, sum_j e^(x_j - max) in lanes (1 when the maximum is
 * infinite), and the loss as (max - x) + log(sum), as kernels/loss.cu's em_loss_ce_*. */
static double p_ce_row(const labels_info *li, const rows *r, const void *x, const void *t, int f64, int64_t row) {
  int64_t base = row_base(r, row);
  double mx = p_row_max(x, f64, base, r->c, r->inner);
  int inf_max = isinf(mx);
  double sum = inf_max ? 1.0 : p_row_sum_exp(x, f64, base, r->c, r->inner, mx, -1), ls = lm_log_d(sum);
  if (li->sparse) {
    int64_t l = sparse_label(li, t, row);
    return l < 0 ? 0.0 : (mx - ld(x, f64, base + l * r->inner)) + ls;
  }
  lanes acc;
  lanes_start(&acc, r->c, 0.0);
  for (int64_t j = 0; j < r->c; j++) {
    int64_t k = base + j * r->inner;
    double tv = ld(t, f64, k);
    lanes_add(&acc, j, tv != 0.0 ? tv * ((mx - ld(x, f64, k)) + ls) : 0.0);
  }
  return lanes_sum(&acc);
}

/* Portable mode: one row of _cross_entropy_grad, as kernels/loss.cu's em_loss_ce_grad_*. */
static void p_ce_grad_row(const labels_info *li, const rows *r, const void *x, const void *t, double g, void *d,
                          int f64, int64_t row, int which) {
  int64_t base = row_base(r, row), c = r->c, step = r->inner;
  int64_t l = li->sparse ? sparse_label(li, t, row) : -1;
  if (li->sparse && l < 0) g = 0.0;
  double tsum = 1.0;
  if (!li->sparse) {
    lanes ts;
    lanes_start(&ts, c, 0.0);
    for (int64_t j = 0; j < c; j++) lanes_add(&ts, j, ld(t, f64, base + j * step));
    tsum = lanes_sum(&ts);
  }
  double mx = p_row_max(x, f64, base, c, step);
  int inf_max = isinf(mx);
  double others = inf_max ? 1.0 : p_row_sum_exp(x, f64, base, c, step, mx, l), sum = others;
  if (!inf_max && l >= 0) sum = others + p_exp_shift(f64, ld(x, f64, base + l * step), mx);
  double ls = lm_log_d(sum);
  for (int64_t j = 0; j < c; j++) {
    int64_t k = base + j * step;
    double xv = ld(x, f64, k), v;
    if (which == 1) {
      v = ((mx - xv) + ls) * g;
    } else {
      double tv = li->sparse ? (j == l ? 1.0 : 0.0) : ld(t, f64, k);
      v = lm_ce_grad_out(p_exp_shift(f64, xv, mx), tv, tsum, g, sum, others, inf_max, j == l);
    }
    st(d, f64, k, v);
  }
}

static em_status ce_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  labels_info li;
  rows r;
  em_status s = labels_at_run(a, in, &li, &r);
  if (s) return s;
  int f64 = a->in[0].dtype == EM_F64;
  const void *x = em_tensor_data(in[0]), *t = em_tensor_data(in[1]);
  void *y = em_tensor_data(out[0]);
  int64_t n_rows = r.outer * r.inner;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n_rows * r.c > PAR_THRESHOLD)
  for (int64_t row = 0; row < n_rows; row++) {
    int64_t base = row_base(&r, row);
    double loss = 0, mx, sum, others;
    if (a->portable) {
      st(y, f64, row, p_ce_row(&li, &r, x, t, f64, row));
      continue;
    }
    if (li.sparse) {
      int64_t l = sparse_label(&li, t, row);
      if (l >= 0) {
        row_stats(x, f64, base, r.c, r.inner, -1, &mx, &sum, &others);
        loss = (mx - ld(x, f64, base + l * r.inner)) + log(sum);
      }
    } else {
      row_stats(x, f64, base, r.c, r.inner, -1, &mx, &sum, &others);
      double ls = log(sum);
      for (int64_t j = 0; j < r.c; j++) {
        int64_t k = base + j * r.inner;
        double tv = ld(t, f64, k);
        if (tv != 0) loss += tv * ((mx - ld(x, f64, k)) + ls); /* a zero label adds nothing, even against -inf */
      }
    }
    st(y, f64, row, loss);
  }
  return EM_OK;
}

static em_status ce_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  int axis;
  em_status s = class_axis(a, &axis);
  if (s) return s;
  em_attr at[3] = {em_attr_i("axis", axis), em_attr_i("which", 0),
                   em_attr_i("ignore_index", em_attr_int(a, "ignore_index", 0))};
  int n_at = em_attr_has(a, "ignore_index") ? 3 : 2;
  em_var in[3] = {x[0], x[1], dy[0]};
  s = grad_node(g, "_cross_entropy_grad", in, 3, at, n_at, &din[0]);
  if (s || is_int(a->in[1].dtype)) return s; /* sparse labels take no gradient */
  at[1] = em_attr_i("which", 1);
  return grad_node(g, "_cross_entropy_grad", in, 3, at, n_at, &din[1]);
}

/* _cross_entropy_grad(logits, labels, dy): which 0 -> d/dlogits, 1 -> d/dlabels (dense). */
static em_status ce_grad_infer(em_op_args *a) {
  labels_info li;
  em_status s = check_labels(a, &li);
  if (s) return s;
  int64_t which = em_attr_int(a, "which", -1);
  if (which != 0 && which != 1) return em_op_fail(a, "attribute which must be 0 or 1, got %lld", (long long)which);
  if (which == 1 && li.sparse) return em_op_fail(a, "sparse labels take no gradient (which = 1)");
  const em_shape *d = &a->in[2];
  if (d->dtype != a->in[0].dtype || d->ndim != li.reduced.ndim || !dims_match(d->dims, li.reduced.dims, d->ndim))
    return em_op_fail(a, "dy must have the loss's dtype and shape");
  a->out[0] = a->in[which];
  return EM_OK;
}

/* d/dlogits of one row: (softmax * sum(t) - t) * g, or (softmax - onehot) * g. */
static void ce_grad_logits_row(const labels_info *li, const rows *r, const void *x,
                               const void *t, double g, void *dx, int f64, int64_t row) {
  int64_t base = row_base(r, row);
  int64_t l = li->sparse ? sparse_label(li, t, row) : 0;
  if (li->sparse && l < 0) g = 0;
  double tsum = 1;
  if (!li->sparse) {
    tsum = 0;
    for (int64_t j = 0; j < r->c; j++) tsum += ld(t, f64, base + j * r->inner);
  }
  if (!f64 && r->inner == 1) {
    ce_grad_row_f32((const float *)x + base, li->sparse ? NULL : (const float *)t + base, l, tsum, g, (float *)dx + base,
                    r->c);
    return;
  }
  /* as ce_grad_row_f32: p = exp(x - max) / sum; a sparse label's element -(others / sum) g */
  int64_t skip = li->sparse ? l : -1;
  double mx, sum, others;
  row_stats(x, f64, base, r->c, r->inner, skip, &mx, &sum, &others);
  for (int64_t j = 0; j < r->c; j++) {
    int64_t k = base + j * r->inner;
    double tv = li->sparse ? (j == l) : ld(t, f64, k), v;
    if (g == 0) v = 0;
    else if (j == skip && !isinf(mx)) v = -(others / sum) * g;
    else v = (exp(ld(x, f64, k) - mx) / sum * tsum - tv) * g;
    st(dx, f64, k, v);
  }
}

static em_status ce_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  labels_info li;
  rows r;
  em_status s = labels_at_run(a, in, &li, &r);
  if (s) return s;
  int which = (int)em_attr_int(a, "which", 0);
  int f64 = a->in[0].dtype == EM_F64;
  const void *x = em_tensor_data(in[0]), *t = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *d = em_tensor_data(out[0]);
  int64_t n_rows = r.outer * r.inner;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n_rows * r.c > PAR_THRESHOLD)
  for (int64_t row = 0; row < n_rows; row++) {
    double g = ld(dy, f64, row);
    if (a->portable) {
      p_ce_grad_row(&li, &r, x, t, g, d, f64, row, which);
      continue;
    }
    if (which == 0) {
      ce_grad_logits_row(&li, &r, x, t, g, d, f64, row);
    } else {
      int64_t base = row_base(&r, row);
      double mx, sum, others;
      row_stats(x, f64, base, r.c, r.inner, -1, &mx, &sum, &others);
      double ls = log(sum);
      for (int64_t j = 0; j < r.c; j++) {
        int64_t k = base + j * r.inner;
        st(d, f64, k, ((mx - ld(x, f64, k)) + ls) * g);
      }
    }
  }
  return EM_OK;
}

/* ------------------------------------------ binary cross entropy --- */

#define BCE_LOG_FLOOR (-100.0)
#define BCE_EPS 1e-12

static double clamped_log(double v) {
  double l = log(v);
  return l < BCE_LOG_FLOOR ? BCE_LOG_FLOOR : l;
}

static em_status same_pair_infer(em_op_args *a, const char *second) {
  em_status s = need_float(a, 0);
  if (s || (s = need_same(a, 1, second))) return s;
  merged_shape(&a->in[0], &a->in[1], &a->out[0]);
  return EM_OK;
}

static em_status bce_infer(em_op_args *a) { return same_pair_infer(a, "the target t"); }

/* p = v at flat position i is outside [0, 1]. */
static em_status prob_error(const em_op_args *a, double v, int64_t i) {
  char pos[160];
  return em_op_fail(a, "p = %g at position %s is not a probability in [0, 1]", v,
                    position_str(&a->in[0], i, pos, sizeof pos));
}

/* p must lie in [0, 1] (NaN passes through). */
static em_status check_probabilities(const em_op_args *a, const em_tensor *p) {
  int f64 = a->in[0].dtype == EM_F64;
  const void *d = em_tensor_data(p);
  for (int64_t i = 0, n = em_tensor_numel(p); i < n; i++) {
    double v = ld(d, f64, i);
    if (v < 0 || v > 1) return prob_error(a, v, i);
  }
  return EM_OK;
}

static em_status bce_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_status s = check_probabilities(a, in[0]);
  if (s) return s;
  int f64 = a->in[0].dtype == EM_F64;
  const void *p = em_tensor_data(in[0]), *t = em_tensor_data(in[1]);
  void *y = em_tensor_data(out[0]);
  int64_t n = em_tensor_numel(out[0]);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > PAR_THRESHOLD)
  for (int64_t i = 0; i < n; i++) {
    double pv = ld(p, f64, i), tv = ld(t, f64, i);
    st(y, f64, i, a->portable ? lm_bce(pv, tv) : -(tv * clamped_log(pv) + (1 - tv) * clamped_log(1 - pv)));
  }
  return EM_OK;
}

/* Fused gradient of a two-input loss: op(x0, x1, dy) with attr which. */
static em_status pair_backward(em_graph *g, const em_var *x, const em_var *dy, em_var *din, const char *op) {
  if (dy[0] < 0) return EM_OK;
  em_var in[3] = {x[0], x[1], dy[0]};
  for (int which = 0; which < 2; which++) {
    em_attr at = em_attr_i("which", which);
    em_status s = grad_node(g, op, in, 3, &at, 1, &din[which]);
    if (s) return s;
  }
  return EM_OK;
}

static em_status bce_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                              em_var *din) {
  (void)a;
  (void)y;
  return pair_backward(g, x, dy, din, "_bce_grad");
}

static em_status which_attr(const em_op_args *a, int *which) {
  int64_t w = em_attr_int(a, "which", -1);
  if (w != 0 && w != 1) return em_op_fail(a, "attribute which must be 0 or 1, got %lld", (long long)w);
  *which = (int)w;
  return EM_OK;
}

/* _bce_grad(p, t, dy), dy of p's shape. */
static em_status bce_grad_infer(em_op_args *a) {
  int which = 0;
  em_status s = need_float(a, 0);
  if (s || (s = need_same(a, 1, "t")) || (s = need_same(a, 2, "dy")) || (s = which_attr(a, &which))) return s;
  a->out[0] = a->in[which];
  return EM_OK;
}

static em_status bce_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int which = (int)em_attr_int(a, "which", 0);
  int f64 = a->in[0].dtype == EM_F64;
  const void *p = em_tensor_data(in[0]), *t = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *d = em_tensor_data(out[0]);
  int64_t n = em_tensor_numel(out[0]);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > PAR_THRESHOLD)
  for (int64_t i = 0; i < n; i++) {
    double pv = ld(p, f64, i), tv = ld(t, f64, i), g = ld(dy, f64, i), v;
    if (a->portable) {
      v = lm_bce_grad(pv, tv, g, which);
    } else if (which == 0) {
      double den = pv * (1 - pv);
      v = g * (pv - tv) / (den > BCE_EPS ? den : BCE_EPS);
    } else {
      v = g * (clamped_log(1 - pv) - clamped_log(pv));
    }
    st(d, f64, i, v);
  }
  return EM_OK;
}

/* ---------------------------------------------------- squared error --- */

/* Samples and elements per sample: [N, rest...] -> N, numel/N; rank <= 1 -> one sample. */
static void samples_of(const em_shape *s, int64_t *n, int64_t *per) {
  int64_t total = 1;
  for (int i = 0; i < s->ndim; i++) total *= s->dims[i];
  *n = s->ndim >= 2 ? s->dims[0] : 1;
  *per = *n ? total / *n : 0;
}

static em_status sqerr_infer(em_op_args *a) {
  em_status s = need_float(a, 0);
  if (s || (s = need_same(a, 1, "y"))) return s;
  em_shape m;
  merged_shape(&a->in[0], &a->in[1], &m);
  a->out[0].dtype = m.dtype;
  a->out[0].ndim = m.ndim >= 2 ? 1 : 0;
  a->out[0].dims[0] = m.dims[0];
  return EM_OK;
}

static em_status sqerr_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n, per;
  samples_of(&a->in[0], &n, &per);
  int f64 = a->in[0].dtype == EM_F64;
  const void *x = em_tensor_data(in[0]), *y = em_tensor_data(in[1]);
  void *o = em_tensor_data(out[0]);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n * per > PAR_THRESHOLD && n > 1)
  for (int64_t i = 0; i < n; i++) {
    double sum = 0;
    if (a->portable) { /* lanes, as em_loss_sqerr_* */
      lanes l;
      lanes_start(&l, per, 0.0);
      for (int64_t j = 0; j < per; j++) {
        double d = ld(x, f64, i * per + j) - ld(y, f64, i * per + j);
        lanes_add(&l, j, d * d);
      }
      sum = lanes_sum(&l);
    } else {
      for (int64_t j = i * per; j < (i + 1) * per; j++) {
        double d = ld(x, f64, j) - ld(y, f64, j);
        sum += d * d;
      }
    }
    st(o, f64, i, sum);
  }
  return EM_OK;
}

static em_status sqerr_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                const em_var *dy, em_var *din) {
  (void)a;
  (void)y;
  return pair_backward(g, x, dy, din, "_squared_error_grad");
}

/* _squared_error_grad(x, y, dy): dy of the loss's shape. */
static em_status sqerr_grad_infer(em_op_args *a) {
  int which = 0;
  em_status s = need_float(a, 0);
  if (s || (s = need_same(a, 1, "y")) || (s = which_attr(a, &which))) return s;
  const em_shape *d = &a->in[2], *x = &a->in[0];
  int want = x->ndim >= 2 ? 1 : 0;
  if (d->dtype != x->dtype || d->ndim != want || (want && !dims_match(d->dims, x->dims, 1)))
    return em_op_fail(a, "dy must have the loss's dtype and shape (%s)", want ? "[N]" : "a scalar");
  a->out[0] = a->in[which];
  return EM_OK;
}

static em_status sqerr_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n, per;
  samples_of(&a->in[0], &n, &per);
  double sign = em_attr_int(a, "which", 0) ? -2.0 : 2.0;
  int f64 = a->in[0].dtype == EM_F64;
  const void *x = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *d = em_tensor_data(out[0]);
  int64_t total = n * per;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (total > PAR_THRESHOLD)
  for (int64_t j = 0; j < total; j++)
    st(d, f64, j, sign * (ld(x, f64, j) - ld(y, f64, j)) * ld(dy, f64, j / per));
  return EM_OK;
}

/* ---------------------------------------------- classification error --- */

static em_status clserr_infer(em_op_args *a) {
  labels_info li;
  em_status s = check_labels(a, &li);
  if (s) return s;
  int64_t top = em_attr_int(a, "topN", 1);
  if (top < 1) return em_op_fail(a, "attribute topN must be >= 1, got %lld", (long long)top);
  a->out[0] = li.reduced;
  return EM_OK;
}

/* The first index of a row's largest entry. */
static int64_t row_argmax(const void *t, int f64, int64_t base, int64_t c, int64_t step) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; j++)
    if (ld(t, f64, base + j * step) > ld(t, f64, base + best * step)) best = j;
  return best;
}

/* Is class l among the top n of the row (ties to the lower index)? */
static int in_top(const void *x, int f64, int64_t base, int64_t c, int64_t step, int64_t l, int64_t n) {
  double v = ld(x, f64, base + l * step);
  int64_t rank = 0;
  for (int64_t j = 0; j < c && rank < n; j++) {
    double u = ld(x, f64, base + j * step);
    rank += u > v || (u == v && j < l);
  }
  return rank < n;
}

static em_status clserr_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  labels_info li;
  rows r;
  em_status s = labels_at_run(a, in, &li, &r);
  if (s) return s;
  int64_t top = em_attr_int(a, "topN", 1);
  int f64 = a->in[0].dtype == EM_F64;
  const void *x = em_tensor_data(in[0]), *t = em_tensor_data(in[1]);
  void *y = em_tensor_data(out[0]);
  int64_t n_rows = r.outer * r.inner;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n_rows * r.c > PAR_THRESHOLD)
  for (int64_t row = 0; row < n_rows; row++) {
    int64_t base = row_base(&r, row);
    int64_t l = li.sparse ? sparse_label(&li, t, row) : row_argmax(t, f64, base, r.c, r.inner);
    double miss = l < 0 ? 0.0 : (r.c > 0 && in_top(x, f64, base, r.c, r.inner, l, top)) ? 0.0 : 1.0;
    st(y, f64, row, miss); /* an ignored sample (ignore_index) counts as no error */
  }
  return EM_OK;
}

/* Nothing flows back: every input is in no_grad. */
static em_status no_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)g, (void)a, (void)x, (void)y, (void)dy, (void)din;
  return EM_OK;
}

/* ------------------------------------------------------------- GPU --- */

/* The gpu members: the same shapes, labels and checks as the CPU members, then
 * kernels/loss.cu through ops/loss_gpu.c. The kernels always follow the
 * portable order (lanes), so portable mode gives the CPU's bits and the fast
 * mode agrees with the CPU's fast paths within rounding. The run-time checks
 * (sparse labels in range, p in [0, 1]) run on the device and read one
 * position back, so the error names the same value and position as on the
 * CPU; that read waits for the stream. */

static int64_t numel_of(const em_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

static em_status softmax_gpu_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, int log_out) {
  int axis;
  em_status s = class_axis(a, &axis);
  if (s) return s;
  rows r = rows_of(&a->in[0], axis);
  return em_loss_gpu_softmax(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), em_tensor_data(out[0]),
                             r.outer * r.inner, r.c, r.inner, log_out);
}
static em_status softmax_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_gpu_run(a, in, out, 0);
}
static em_status log_softmax_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_gpu_run(a, in, out, 1);
}

static em_status softmax_grad_gpu_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, int log_out) {
  int axis;
  em_status s = class_axis(a, &axis);
  if (s) return s;
  rows r = rows_of(&a->in[0], axis);
  return em_loss_gpu_softmax_grad(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), em_tensor_data(in[1]),
                                  em_tensor_data(out[0]), r.outer * r.inner, r.c, r.inner, log_out);
}
static em_status softmax_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_grad_gpu_run(a, in, out, 0);
}
static em_status log_softmax_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return softmax_grad_gpu_run(a, in, out, 1);
}

/* labels_at_run on the device: the labels' kind and rows, sparse labels checked by a kernel. */
static em_status labels_at_run_gpu(const em_op_args *a, em_tensor *const *in, labels_info *li, rows *r,
                                   em_loss_gpu_labels *t) {
  em_status s = check_labels(a, li);
  if (s) return s;
  *r = rows_of(&a->in[0], li->axis);
  *t = (em_loss_gpu_labels){.data = em_tensor_data(in[1]), .sparse = li->sparse, .is64 = li->label_dtype == EM_I64,
                            .has_ignore = li->has_ignore, .ignore = li->ignore};
  if (!li->sparse) return EM_OK;
  /* Reported at the next synchronisation where the device maps host memory (loss_gpu.h). */
  return em_loss_gpu_check_labels(a, t, numel_of(&a->in[1]), r->c, label_range_error);
}

static em_status ce_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  labels_info li;
  rows r;
  em_loss_gpu_labels t;
  em_status s = labels_at_run_gpu(a, in, &li, &r, &t);
  if (s) return s;
  return em_loss_gpu_ce(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), &t, em_tensor_data(out[0]),
                        r.outer * r.inner, r.c, r.inner);
}

static em_status ce_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  labels_info li;
  rows r;
  em_loss_gpu_labels t;
  em_status s = labels_at_run_gpu(a, in, &li, &r, &t);
  if (s) return s;
  return em_loss_gpu_ce_grad(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), &t, em_tensor_data(in[2]),
                             em_tensor_data(out[0]), r.outer * r.inner, r.c, r.inner,
                             (int)em_attr_int(a, "which", 0));
}

static em_status clserr_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  labels_info li;
  rows r;
  em_loss_gpu_labels t;
  em_status s = labels_at_run_gpu(a, in, &li, &r, &t);
  if (s) return s;
  return em_loss_gpu_clserr(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), &t, em_tensor_data(out[0]),
                            r.outer * r.inner, r.c, r.inner, em_attr_int(a, "topN", 1));
}

static em_status bce_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int f64 = a->in[0].dtype == EM_F64;
  int64_t n = em_tensor_numel(out[0]);
  em_status s = em_loss_gpu_check_prob(a, f64, em_tensor_data(in[0]), n, prob_error);
  if (s) return s;
  return em_loss_gpu_bce(a, f64, em_tensor_data(in[0]), em_tensor_data(in[1]), em_tensor_data(out[0]), n);
}

static em_status bce_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  return em_loss_gpu_bce_grad(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), em_tensor_data(in[1]),
                              em_tensor_data(in[2]), em_tensor_data(out[0]), em_tensor_numel(out[0]),
                              (int)em_attr_int(a, "which", 0));
}

static em_status sqerr_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n, per;
  samples_of(&a->in[0], &n, &per);
  return em_loss_gpu_sqerr(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), em_tensor_data(in[1]),
                           em_tensor_data(out[0]), n, per);
}

static em_status sqerr_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n, per;
  samples_of(&a->in[0], &n, &per);
  double sign = em_attr_int(a, "which", 0) ? -2.0 : 2.0;
  return em_loss_gpu_sqerr_grad(a, a->in[0].dtype == EM_F64, em_tensor_data(in[0]), em_tensor_data(in[1]),
                                em_tensor_data(in[2]), em_tensor_data(out[0]), n * per, per, sign);
}

/* ------------------------------------------------------------- table --- */

const em_op_def em_ops_loss[] = {
  {.name = "softmax", .doc = "softmax along axis (INT, -1), max-subtracted", .min_inputs = 1, .max_inputs = 1,
   .n_outputs = 1, .infer = softmax_infer, .cpu = softmax_cpu, .gpu = softmax_gpu, .backward = softmax_backward,
   .attrs = EM_ATTRS("axis")},
  {.name = "log_softmax", .doc = "log of softmax along axis (INT, -1), max-subtracted", .min_inputs = 1,
   .max_inputs = 1, .n_outputs = 1, .infer = softmax_infer, .cpu = log_softmax_cpu, .gpu = log_softmax_gpu, .backward = log_softmax_backward,
   .attrs = EM_ATTRS("axis")},
  {.name = "_softmax_grad", .doc = "softmax's gradient from (y, dy): y (dy - sum(dy y)); attr axis", .min_inputs = 2,
   .max_inputs = 2, .n_outputs = 1, .infer = softmax_grad_infer, .cpu = softmax_grad_cpu, .gpu = softmax_grad_gpu, .attrs = EM_ATTRS("axis")},
  {.name = "_log_softmax_grad", .doc = "log_softmax's gradient from (y, dy): dy - exp(y) sum(dy); attr axis",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .infer = softmax_grad_infer, .cpu = log_softmax_grad_cpu,
   .gpu = log_softmax_grad_gpu,
   .attrs = EM_ATTRS("axis")},
  {.name = "cross_entropy_with_softmax",
   .doc = "per-sample -sum(labels * log_softmax(logits)); labels dense or sparse indices; attrs axis (INT, -1), "
          "ignore_index (INT, sparse only)",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .infer = ce_infer, .cpu = ce_cpu, .gpu = ce_gpu, .backward = ce_backward,
   .attrs = EM_ATTRS("axis", "ignore_index")},
  {.name = "_cross_entropy_grad",
   .doc = "cross_entropy_with_softmax's gradient (logits, labels, dy) into logits (which=0) or dense labels (1); "
          "attrs axis, which, ignore_index",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .infer = ce_grad_infer, .cpu = ce_grad_cpu, .gpu = ce_grad_gpu,
   .attrs = EM_ATTRS("axis", "which", "ignore_index")},
  {.name = "binary_cross_entropy",
   .doc = "elementwise -(t log p + (1-t) log(1-p)), logs clamped at -100; no attributes", .min_inputs = 2,
   .max_inputs = 2, .n_outputs = 1, .infer = bce_infer, .cpu = bce_cpu, .gpu = bce_gpu, .backward = bce_backward,
   .attrs = EM_NO_ATTRS},
  {.name = "_bce_grad", .doc = "binary_cross_entropy's gradient (p, t, dy) into p (which=0) or t (1); attr which",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .infer = bce_grad_infer, .cpu = bce_grad_cpu, .gpu = bce_grad_gpu, .attrs = EM_ATTRS("which")},
  {.name = "squared_error",
   .doc = "sum of (x-y)^2 per sample (over all axes but the first: [N]; rank <= 1: a scalar); no attributes",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .infer = sqerr_infer, .cpu = sqerr_cpu, .gpu = sqerr_gpu,
   .backward = sqerr_backward, .attrs = EM_NO_ATTRS},
  {.name = "_squared_error_grad", .doc = "squared_error's gradient (x, y, dy) into x (which=0) or y (1); attr which",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .infer = sqerr_grad_infer, .cpu = sqerr_grad_cpu, .gpu = sqerr_grad_gpu,
   .attrs = EM_ATTRS("which")},
  {.name = "classification_error",
   .doc = "per sample 1 when the label is not among the topN outputs; attrs axis (INT, -1), topN (INT, 1), "
          "ignore_index (INT, sparse only)",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 3u, .infer = clserr_infer, .cpu = clserr_cpu, .gpu = clserr_gpu,
   .backward = no_backward, .attrs = EM_ATTRS("axis", "topN", "ignore_index")},
};
const size_t em_ops_loss_count = sizeof em_ops_loss / sizeof em_ops_loss[0];
