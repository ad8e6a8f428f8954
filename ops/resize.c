/* Resize family: ONNX Resize's interpolation on any axes of a tensor.
 *
 *   resize(x)              x [d0, ..., dR-1] -> [o0, ..., oR-1] (rank 1 to 8, f32 or f64)
 *   _resize_grad(dy, x)    resize's gradient with respect to x (x's values are not read)
 *
 * Attributes (ONNX Resize's names and defaults; one entry per axis of x):
 *   sizes INTS        the output size of each axis (>= 0)
 *   scales FLOATS     the scale of each axis (> 0): the output size is floor(d * scale) when sizes is
 *                     absent; the coordinate transforms below use it (default o / d)
 *   (at least one of the two)
 *   mode STRING       nearest (default) | linear (N-linear: bilinear, trilinear...) | cubic
 *   coordinate_transformation_mode STRING  half_pixel (default) | half_pixel_symmetric |
 *                     pytorch_half_pixel | align_corners | asymmetric | tf_crop_and_resize |
 *                     tf_half_pixel_for_nn (opset 11 only): how output index o maps to the input
 *                     coordinate x (ONNX's formulas, in double)
 *   nearest_mode STRING   round_prefer_floor (default) | round_prefer_ceil | floor | ceil
 *   cubic_coeff_a FLOAT   the cubic's a (default -0.75; PyTorch's is -0.75, TF's -0.5)
 *   exclude_outside INT   1: taps outside the input get weight 0 and the rest renormalised (default 0)
 *   extrapolation_value FLOAT  tf_crop_and_resize's value where x falls outside the input (default 0)
 *   roi FLOATS        tf_crop_and_resize's region [starts..., ends...] in normalised coordinates
 *                     (default 0s and 1s)
 *   antialias INT     1: linear and cubic downsampling (scale < 1) stretch their filter by 1 / scale
 *                     (more taps, weights normalised), as ONNX Resize-18 does (default 0)
 * Refused when the graph is built (before anything is allocated): an output of 2^40 elements or
 * more, a tf_crop_and_resize roi that is not finite (other modes ignore roi), an antialias filter of more than 2^20 taps per output.
 *
 * Taps follow ONNX's reference: the neighbours of x in an edge-padded input (linear: 2, cubic: 4,
 * nearest: the 2 of linear with weights 0 and 1 by nearest_mode), so inputs past the border repeat
 * the edge. A tap of weight exactly 0 is skipped (an infinite neighbour does not turn into NaN;
 * an axis left the same size under half_pixel copies its values). The per-axis taps are computed
 * here once per run; the sums over them are kernels/resize_math.h's, which kernels/resize.cu runs
 * too, so every device gives the CPU's bits. The gradient gathers per input element in a fixed
 * order (no atomics). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "resize_gpu.h"
#include "../kernels/resize_math.h"

enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC };
enum { CT_HALF_PIXEL, CT_HALF_PIXEL_SYM, CT_PYTORCH, CT_ALIGN, CT_ASYM, CT_TF_CROP, CT_TF_HALF_NN };
enum { NM_PREFER_FLOOR, NM_PREFER_CEIL, NM_FLOOR, NM_CEIL };

typedef struct rz_params {
  int R, mode, ctm, nearest, exclude, antialias;
  int64_t in[RZ_MAX_RANK], out[RZ_MAX_RANK];
  double scale[RZ_MAX_RANK], roi_lo[RZ_MAX_RANK], roi_hi[RZ_MAX_RANK], a, extrap;
} rz_params;

static const char *const mode_names[] = {"nearest", "linear", "cubic", NULL};
static const char *const ctm_names[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                        "asymmetric", "tf_crop_and_resize",   "tf_half_pixel_for_nn", NULL};
static const char *const nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};

/* The index of the string attribute `name` in names (dflt when absent), or a failure listing them. */
static em_status str_choice(const em_op_args *a, const char *name, const char *const *names, int dflt, int *out) {
  const char *v = em_attr_str(a, name, NULL);
  *out = dflt;
  if (!v) return EM_OK;
  for (int i = 0; names[i]; i++)
    if (!strcmp(v, names[i])) return *out = i, EM_OK;
  char list[256] = "";
  for (int i = 0; names[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
  return em_op_fail(a, "%s '%s' is not one of %s", name, v, list);
}

/* The most taps one output may read on an axis (antialias stretches the filter by 1 / scale), and
 * the most elements an output may have: an output (or its table, 16 bytes per tap) larger than any
 * memory is refused when the graph is built instead of attempted. */
#define RZ_MAX_TAPS ((int64_t)1 << 20)
#define RZ_MAX_ELEMENTS ((int64_t)1 << 40)

/* The number of neighbours each output of axis i reads: 2 (nearest, linear) or 4 (cubic); with
 * antialias and a scale s < 1 the filter is stretched by 1 / s (ONNX's footprint, always even);
 * RZ_MAX_TAPS + 1 for any count past RZ_MAX_TAPS. */
static int64_t tap_count(const rz_params *p, int i) {
  if (p->mode == RZ_NEAREST) return 2;
  double s = p->scale[i] < 1 ? p->scale[i] : 1.0;
  if (!p->antialias) s = 1.0;
  /* In double first: a tiny scale's count does not fit an integer (resolve refuses past RZ_MAX_TAPS). */
  double taps = 2 - 2 * (floor((p->mode == RZ_LINEAR ? -1 : -2) / s) + 1);
  return taps > RZ_MAX_TAPS ? RZ_MAX_TAPS + 1 : (int64_t)taps;
}

/* Reads and checks the attributes against x's shape; fills p and y's shape (-1 for a dynamic
 * input axis without a given size). */
static em_status resolve(const em_op_args *a, const em_shape *x, rz_params *p, em_shape *y) {
  memset(p, 0, sizeof *p);
  if (x->dtype != EM_F32 && x->dtype != EM_F64)
    return em_op_fail(a, "expects f32 or f64 values, not %s", em_dtype_name(x->dtype));
  if (x->ndim < 1 || x->ndim > RZ_MAX_RANK)
    return em_op_fail(a, "the input must have rank 1 to %d, not %d", RZ_MAX_RANK, x->ndim);
  int R = p->R = x->ndim, ns = 0, nc = 0, nr = 0;
  const int64_t *sizes = em_attr_ints(a, "sizes", &ns);
  const double *scales = em_attr_floats(a, "scales", &nc), *roi = em_attr_floats(a, "roi", &nr);
  if (!sizes && !scales) return em_op_fail(a, "needs the attribute sizes or scales (one entry per axis)");
  if (sizes && ns != R) return em_op_fail(a, "sizes has %d entries; the input has rank %d", ns, R);
  if (scales && nc != R) return em_op_fail(a, "scales has %d entries; the input has rank %d", nc, R);
  if (roi && nr != 2 * R) return em_op_fail(a, "roi has %d entries; 2 per axis (%d) expected", nr, 2 * R);
  em_status st = str_choice(a, "mode", mode_names, RZ_NEAREST, &p->mode);
  if (!st) st = str_choice(a, "coordinate_transformation_mode", ctm_names, CT_HALF_PIXEL, &p->ctm);
  if (!st) st = str_choice(a, "nearest_mode", nearest_names, NM_PREFER_FLOOR, &p->nearest);
  if (!st) st = em_attr_number(a, "cubic_coeff_a", -0.75, 0, &p->a);
  if (!st) st = em_attr_number(a, "extrapolation_value", 0, 1, &p->extrap);
  if (st) return st;
  int64_t ex = em_attr_int(a, "exclude_outside", 0);
  if (ex != 0 && ex != 1) return em_op_fail(a, "exclude_outside must be 0 or 1, not %lld", (long long)ex);
  p->exclude = (int)ex;
  int64_t aa = em_attr_int(a, "antialias", 0);
  if (aa != 0 && aa != 1) return em_op_fail(a, "antialias must be 0 or 1, not %lld", (long long)aa);
  p->antialias = (int)aa && p->mode != RZ_NEAREST; /* nearest has no filter to widen */
  *y = *x;
  for (int i = 0; i < R; i++) {
    int64_t d = x->dims[i];
    double sc = scales ? scales[i] : 0;
    if (scales && !(sc > 0 && isfinite(sc)))
      return em_op_fail(a, "scales[%d] = %g; a finite scale > 0 expected", i, sc);
    if (sizes && sizes[i] < 0) return em_op_fail(a, "sizes[%d] = %lld is negative", i, (long long)sizes[i]);
    if (!sizes && d > 0 && !((double)d * sc < (double)RZ_MAX_ELEMENTS))
      return em_op_fail(a, "scales[%d] = %g makes axis %d of size %lld %g long: too large", i, sc, i, (long long)d,
                        floor((double)d * sc));
    if (roi && p->ctm == CT_TF_CROP && !(isfinite(roi[i]) && isfinite(roi[R + i])))
      return em_op_fail(a, "roi[%d] = %g, roi[%d] = %g: a finite roi expected", i, roi[i], R + i, roi[R + i]);
    int64_t o = sizes ? sizes[i] : d < 0 ? -1 : (int64_t)floor((double)d * sc);
    if (!scales) sc = d > 0 ? (double)o / (double)d : 1.0;
    if (d == 0 && o > 0) return em_op_fail(a, "axis %d has size 0 and cannot be resized to %lld", i, (long long)o);
    p->in[i] = d, p->out[i] = o, p->scale[i] = sc;
    p->roi_lo[i] = roi ? roi[i] : 0.0;
    p->roi_hi[i] = roi ? roi[R + i] : 1.0;
    y->dims[i] = o;
    if (tap_count(p, i) > RZ_MAX_TAPS)
      return em_op_fail(a, "axis %d: antialias with scale %g needs more than %lld taps per output; too many", i, sc,
                        (long long)RZ_MAX_TAPS);
  }
  /* The element count (in double: exact to 2^53, no overflow), unless an axis is dynamic. */
  double total = 1;
  int known = 1;
  for (int i = 0; i < R; i++) known = known && y->dims[i] >= 0, total *= (double)y->dims[i];
  if (known && total >= (double)RZ_MAX_ELEMENTS) {
    char sh[160];
    return em_op_fail(a, "the output %s would have %.0f elements; resize makes fewer than %lld (2^40)",
                      em_shape_str(y, sh, sizeof sh), total, (long long)RZ_MAX_ELEMENTS);
  }
  return EM_OK;
}

/* ------------------------------------------------------------ the taps --- */

/* The input coordinate of output index o on axis i (ONNX Resize's formulas, output_width being
 * scale * input_width as a real number); *outside: tf_crop_and_resize past the input. */
static double source_coord(const rz_params *p, int i, int64_t o, int *outside) {
  double in = (double)p->in[i], s = p->scale[i], ow = s * in, x = (double)o, r;
  *outside = 0;
  switch (p->ctm) {
  case CT_ALIGN: return ow == 1 ? 0.0 : x * (in - 1) / (ow - 1);
  case CT_ASYM: return x / s;
  case CT_TF_CROP:
    r = ow == 1 ? (p->roi_hi[i] - p->roi_lo[i]) * (in - 1) / 2
                : x * (p->roi_hi[i] - p->roi_lo[i]) * (in - 1) / (ow - 1);
    r += p->roi_lo[i] * (in - 1);
    *outside = r < 0 || r > in - 1;
    return r;
  case CT_TF_HALF_NN: return (x + 0.5) / s;
  case CT_PYTORCH: return ow == 1 ? -0.5 : (x + 0.5) / s - 0.5;
  case CT_HALF_PIXEL_SYM: {
    double adjustment = (double)p->out[i] / ow, center = in / 2, offset = center * (1 - adjustment);
    return offset + (x + 0.5) / s - 0.5;
  }
  default: return (x + 0.5) / s - 0.5;
  }
}

/* Keys' cubic convolution kernel with parameter A at distance x. */
static double cubic_kernel(double A, double x) {
  x = fabs(x);
  double x2 = x * x, x3 = x * x2;
  if (x <= 1) return (A + 2) * x3 - (A + 3) * x2 + 1;
  if (x < 2) return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A;
  return 0.0;
}

/* The weights c[0 .. n) of the n neighbours of a coordinate whose fraction is ratio, in (0, 1]
 * (ONNX's coefficient functions). */
static void coeffs(const rz_params *p, int i, double ratio, int64_t n, double *c) {
  if (p->mode == RZ_NEAREST) {
    int hi;
    if (ratio == 1) hi = 1;
    else if (p->nearest == NM_PREFER_FLOOR) hi = ratio > 0.5;
    else if (p->nearest == NM_PREFER_CEIL) hi = ratio >= 0.5;
    else hi = p->nearest == NM_CEIL;
    c[0] = !hi, c[1] = hi;
    return;
  }
  if (p->antialias) { /* the kernel stretched by 1 / s, normalised */
    double s = p->scale[i] < 1 ? p->scale[i] : 1.0, sum = 0;
    int64_t start = 1 - n / 2;
    for (int64_t k = 0; k < n; k++) {
      double d = ((double)(start + k) - ratio) * s;
      if (p->mode == RZ_LINEAR) c[k] = 1 - fabs(d) < 0 ? 0 : 1 - fabs(d) > 1 ? 1 : 1 - fabs(d);
      else c[k] = cubic_kernel(p->a, d);
      sum += c[k];
    }
    for (int64_t k = 0; k < n; k++) c[k] /= sum;
    return;
  }
  if (p->mode == RZ_LINEAR) {
    c[0] = 1 - ratio, c[1] = ratio;
    return;
  }
  double A = p->a, r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
  c[0] = ((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A;
  c[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
  c[2] = ((A + 2) * q - (A + 3)) * q * q + 1;
  c[3] = ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A;
}

/* Output o's taps on axis i (n of them at most): slot[0] = count (-1: extrapolate), then the
 * indices; wt the weights; c: room for n coefficients. Returns 0, or -1 when the coordinate is not
 * a number (the scale far from sizes / input: -inf + inf), which no index can be made from. */
static int axis_taps(const rz_params *p, int i, int64_t o, int64_t n, long long *slot, double *wt, double *c) {
  int outside;
  double x = source_coord(p, i, o, &outside);
  for (int64_t j = 0; j <= n; j++) slot[j] = 0, wt[j] = 0;
  if (isnan(x)) return -1;
  if (outside) {
    slot[0] = -1;
    return 0;
  }
  double fl = floor(x), ratio = x == fl ? 1.0 : x - fl;
  coeffs(p, i, ratio, n, c);
  int64_t in = p->in[i], pad = (n + 1) / 2;
  /* The n nearest indices of the edge-padded input [-pad, in + pad), the smaller ones first on a tie. */
  double first = (x == fl ? fl - 1 : fl) - (double)(n / 2 - 1);
  if (first > (double)(in + pad - n)) first = (double)(in + pad - n);
  if (first < (double)-pad) first = (double)-pad;
  int64_t f = (int64_t)first, k = 0;
  if (p->exclude) {
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
      if (f + j < 0 || f + j >= in) c[j] = 0;
      sum += c[j];
    }
    for (int64_t j = 0; j < n && sum != 0; j++) c[j] /= sum;
  }
  for (int64_t j = 0; j < n; j++) {
    if (c[j] == 0) continue;
    int64_t idx = f + j < 0 ? 0 : f + j >= in ? in - 1 : f + j;
    slot[1 + k] = idx, wt[1 + k] = c[j], k++;
  }
  slot[0] = k;
  return 0;
}

/* The table of kernels/resize_math.h for p (t and w: *len entries each; free both). */
static em_status table_build(const em_op_args *a, const rz_params *p, long long **tp, double **wp, int64_t *len) {
  int R = p->R;
  int64_t n = RZ_HEADER(R), nt[RZ_MAX_RANK], most = 0;
  for (int i = 0; i < R; i++) {
    nt[i] = tap_count(p, i);
    if (nt[i] > most) most = nt[i];
    if (nt[i] > RZ_MAX_TAPS || (p->out[i] && nt[i] > RZ_MAX_ELEMENTS / p->out[i]))
      return em_op_fail(a, "axis %d: antialias with scale %g needs %lld taps per output; too many", i, p->scale[i],
                        (long long)nt[i]);
    n += p->out[i] * (1 + nt[i]) + p->in[i] + 1 + p->out[i] * nt[i];
  }
  long long *t = calloc((size_t)n, sizeof *t);
  double *w = calloc((size_t)n, sizeof *w), *c = malloc(sizeof(double) * (size_t)(most + 1));
  int64_t *cnt = NULL;
  if (!t || !w || !c) goto oom;
  t[0] = R;
  int64_t pos = RZ_HEADER(R);
  for (int i = 0; i < R; i++) {
    int64_t slot = 1 + nt[i], fwd = pos;
    t[RZ_IN(i)] = p->in[i], t[RZ_OUT(R, i)] = p->out[i], t[RZ_FWD(R, i)] = fwd, t[RZ_NTAP(R, i)] = nt[i];
    for (int64_t o = 0; o < p->out[i]; o++)
      if (axis_taps(p, i, o, nt[i], t + fwd + o * slot, w + fwd + o * slot, c)) {
        free(t), free(w), free(cnt), free(c);
        return em_op_fail(a, "axis %d: output %lld maps to an input coordinate that is not a number (scale %g, %lld to "
                          "%lld)", i, (long long)o, p->scale[i], (long long)p->in[i], (long long)p->out[i]);
      }
    pos += p->out[i] * slot;
    /* The inverse: per input index, its (output, weight) entries in increasing output order. */
    int64_t inv = pos, ent = pos + p->in[i] + 1;
    t[RZ_INV(R, i)] = inv;
    free(cnt);
    if (!(cnt = calloc((size_t)p->in[i] + 1, sizeof *cnt))) goto oom;
    for (int64_t o = 0; o < p->out[i]; o++)
      for (long long j = 0; j < t[fwd + o * slot]; j++) cnt[t[fwd + o * slot + 1 + j]]++;
    int64_t e = ent;
    for (int64_t q = 0; q < p->in[i]; q++) t[inv + q] = e, e += cnt[q], cnt[q] = t[inv + q];
    t[inv + p->in[i]] = e;
    for (int64_t o = 0; o < p->out[i]; o++)
      for (long long j = 0; j < t[fwd + o * slot]; j++) {
        int64_t q = t[fwd + o * slot + 1 + j], at = cnt[q]++;
        t[at] = o, w[at] = w[fwd + o * slot + 1 + j];
      }
    pos = ent + p->out[i] * nt[i];
  }
  free(cnt), free(c);
  *tp = t, *wp = w, *len = n;
  return EM_OK;
oom:
  free(t), free(w), free(cnt), free(c);
  return em_op_fail(a, "no host memory for the interpolation table");
}

/* ------------------------------------------------------------------ ops --- */

static em_status resize_infer(em_op_args *a) {
  rz_params p;
  return resolve(a, &a->in[0], &p, &a->out[0]);
}

/* The parameters and table of a run on x. */
static em_status run_setup(const em_op_args *a, const em_tensor *x, long long **t, double **w, int64_t *len,
                           rz_params *p) {
  em_shape xs, y;
  em_shape_of(x, &xs);
  em_status st = resolve(a, &xs, p, &y);
  return st ? st : table_build(a, p, t, w, len);
}

static em_status resize_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rz_params p;
  long long *t;
  double *w;
  int64_t len, n = em_tensor_numel(out[0]);
  em_status st = run_setup(a, in[0], &t, &w, &len, &p);
  if (st) return st;
  int f32 = em_tensor_dtype(in[0]) == EM_F32;
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > 16384)
  for (int64_t j = 0; j < n; j++) {
    if (f32) ((float *)y)[j] = (float)rz_gather_d(t, w, x, NULL, j, p.extrap);
    else ((double *)y)[j] = rz_gather_d(t, w, NULL, x, j, p.extrap);
  }
  free(t), free(w);
  return EM_OK;
}

static em_status resize_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rz_params p;
  long long *t;
  double *w;
  int64_t len;
  em_status st = run_setup(a, in[0], &t, &w, &len, &p);
  if (st) return st;
  st = em_resize_gpu_fwd(a, em_tensor_dtype(in[0]) == EM_F64, t, w, len, p.extrap, em_tensor_data(in[0]),
                         em_tensor_data(out[0]), em_tensor_numel(out[0]));
  free(t), free(w);
  return st;
}

static em_status resize_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                 const em_var *dy, em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {dy[0], x[0]};
  return em_apply(g, "_resize_grad", in, 2, a->attrs, a->n_attrs, &din[0], 1);
}

/* _resize_grad(dy, x): dy must be resize's output on x; out = x's shape. */
static em_status grad_infer(em_op_args *a) {
  rz_params p;
  em_shape y;
  char want[128], have[128];
  em_status st = resolve(a, &a->in[1], &p, &y);
  if (st) return st;
  const em_shape *dy = &a->in[0];
  int ok = dy->dtype == y.dtype && dy->ndim == y.ndim;
  for (int i = 0; ok && i < y.ndim; i++) ok = dy->dims[i] == y.dims[i] || dy->dims[i] < 0 || y.dims[i] < 0;
  if (!ok)
    return em_op_fail(a, "the gradient %s does not match the forward output %s", em_shape_str(dy, have, sizeof have),
                      em_shape_str(&y, want, sizeof want));
  a->out[0] = a->in[1];
  return EM_OK;
}

static em_status grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rz_params p;
  long long *t;
  double *w;
  int64_t len, n = em_tensor_numel(out[0]);
  em_status st = run_setup(a, in[1], &t, &w, &len, &p);
  if (st) return st;
  int f32 = em_tensor_dtype(in[0]) == EM_F32;
  const void *dy = em_tensor_data(in[0]);
  void *dx = em_tensor_data(out[0]);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > 16384)
  for (int64_t i = 0; i < n; i++) {
    if (f32) ((float *)dx)[i] = (float)rz_grad_d(t, w, dy, NULL, i);
    else ((double *)dx)[i] = rz_grad_d(t, w, NULL, dy, i);
  }
  free(t), free(w);
  return EM_OK;
}

static em_status grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  rz_params p;
  long long *t;
  double *w;
  int64_t len;
  em_status st = run_setup(a, in[1], &t, &w, &len, &p);
  if (st) return st;
  st = em_resize_gpu_grad(a, em_tensor_dtype(in[0]) == EM_F64, t, w, len, em_tensor_data(in[0]),
                          em_tensor_data(out[0]), em_tensor_numel(out[0]));
  free(t), free(w);
  return st;
}

/* The gradient is linear in dy: its own gradient is resize of the incoming one. */
static em_status grad_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                               const em_var *dy, em_var *din) {
  (void)x, (void)y;
  if (dy[0] < 0) return EM_OK;
  /* resize's attributes with extrapolation_value 0: an extrapolated output is a constant of the
   * forward, no part of the linear map whose adjoint _resize_grad is. */
  em_attr *at = malloc(sizeof *at * (size_t)(a->n_attrs > 0 ? a->n_attrs : 1));
  int n = 0;
  if (!at) return em_fail(EM_ERR_OUT_OF_MEMORY, "op '_resize_grad': no memory for the gradient's attributes");
  for (int i = 0; i < a->n_attrs; i++)
    if (strcmp(a->attrs[i].name, "extrapolation_value") != 0) at[n++] = a->attrs[i];
  em_status st = em_apply(g, "resize", &dy[0], 1, at, n, &din[0], 1);
  free(at);
  return st;
}

#define RESIZE_ATTRS                                                                                             \
  EM_ATTRS("sizes", "scales", "mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",         \
           "exclude_outside", "extrapolation_value", "roi", "antialias")

const em_op_def em_ops_resize[] = {
  {.name = "resize",
   .doc = "ONNX Resize of x (any rank to 8) by per-axis sizes or scales; attrs sizes, scales, mode "
          "(nearest|linear|cubic), coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, "
          "extrapolation_value, roi, antialias",
   .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .infer = resize_infer, .cpu = resize_cpu, .gpu = resize_gpu,
   .backward = resize_backward, .attrs = RESIZE_ATTRS},
  {.name = "_resize_grad", .doc = "resize's gradient (dy, x) with respect to x; resize's attrs", .min_inputs = 2,
   .max_inputs = 2, .n_outputs = 1, .no_grad = 2, .infer = grad_infer, .cpu = grad_cpu, .gpu = grad_gpu,
   .backward = grad_backward, .attrs = RESIZE_ATTRS},
};
const size_t em_ops_resize_count = sizeof em_ops_resize / sizeof em_ops_resize[0];
