/* Window attributes and padding shared by convolution and pooling (see spatial.h). No op table:
 * these are helpers of ops/conv.c and ops/pool.c. */
#include "spatial.h"

#include <string.h>

em_status em_spatial_ints_attr(const em_op_args *a, const char *name, int want, int64_t min, const int64_t **out) {
  int n;
  *out = em_attr_ints(a, name, &n);
  if (!*out) {
    if (em_attr_has(a, name)) return em_op_fail(a, "attribute %s must be a list of %d ints", name, want);
    return EM_OK;
  }
  if (n != want)
    return em_op_fail(a, "attribute %s has %d values; expected %d (%s)", name, n, want,
                      !strcmp(name, "pads") ? "begin and end per spatial axis" : "one per spatial axis");
  for (int i = 0; i < n; i++)
    if ((*out)[i] < min)
      return em_op_fail(a, "attribute %s[%d] is %lld; it must be >= %lld", name, i, (long long)(*out)[i], (long long)min);
  return EM_OK;
}

em_status em_spatial_int_attr(const em_op_args *a, const char *name, int64_t dflt, int64_t min, int64_t max,
                              int64_t *out) {
  *out = em_attr_int(a, name, dflt);
  /* em_attr_int returns its default for an attribute of another kind: a sentinel default tells */
  if (em_attr_has(a, name) && em_attr_int(a, name, INT64_MIN) == INT64_MIN)
    return em_op_fail(a, "attribute %s must be an int", name);
  if (max == INT64_MAX && *out < min)
    return em_op_fail(a, "attribute %s is %lld; it must be >= %lld", name, (long long)*out, (long long)min);
  if (*out < min || *out > max)
    return em_op_fail(a, "attribute %s is %lld; expected %lld to %lld", name, (long long)*out, (long long)min,
                      (long long)max);
  return EM_OK;
}

static em_status auto_pad_attr(const em_op_args *a, int *mode) {
  const char *s = em_attr_str(a, "auto_pad", NULL);
  if (!s && em_attr_has(a, "auto_pad")) return em_op_fail(a, "attribute auto_pad must be a string");
  if (!s || !strcmp(s, "NOTSET")) *mode = EM_PAD_NOTSET;
  else if (!strcmp(s, "VALID")) *mode = EM_PAD_VALID;
  else if (!strcmp(s, "SAME_UPPER")) *mode = EM_PAD_SAME_UPPER;
  else if (!strcmp(s, "SAME_LOWER")) *mode = EM_PAD_SAME_LOWER;
  else if (!strcmp(s, "SAME_SYMMETRIC")) *mode = EM_PAD_SAME_SYMMETRIC;
  else return em_op_fail(a, "auto_pad is '%s'; expected NOTSET, VALID, SAME_UPPER, SAME_LOWER or SAME_SYMMETRIC", s);
  return EM_OK;
}

em_status em_spatial_attrs_read(const em_op_args *a, int nsp, int kernel_required, em_spatial_attrs *sa) {
  sa->auto_pad = EM_PAD_NOTSET;
  em_status st = em_spatial_ints_attr(a, "kernel_shape", nsp, 1, &sa->kernel_shape);
  if (!st && kernel_required && !sa->kernel_shape)
    st = em_op_fail(a, "attribute kernel_shape is required (%d ints, one per spatial axis)", nsp);
  if (!st) st = em_spatial_ints_attr(a, "strides", nsp, 1, &sa->strides);
  if (!st) st = em_spatial_ints_attr(a, "dilations", nsp, 1, &sa->dilations);
  if (!st) st = em_spatial_ints_attr(a, "pads", 2 * nsp, 0, &sa->pads);
  if (!st) st = auto_pad_attr(a, &sa->auto_pad);
  if (!st && sa->pads && sa->auto_pad != EM_PAD_NOTSET)
    st = em_op_fail(a, "pads and auto_pad=%s are both given; use one", em_attr_str(a, "auto_pad", ""));
  return st;
}

em_status em_spatial_check_float(const em_op_args *a) {
  em_dtype t = a->in[0].dtype;
  if (t != EM_F32 && t != EM_F64) return em_op_fail(a, "expects f32 or f64 values, not %s", em_dtype_name(t));
  for (int i = 1; i < a->n_in; i++)
    if (a->in[i].dtype != t)
      return em_op_fail(a, "input %d is %s but input 0 is %s (all inputs share one dtype)", i,
                        em_dtype_name(a->in[i].dtype), em_dtype_name(t));
  return EM_OK;
}

int em_spatial_shapes_compatible(const em_shape *a, const em_shape *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i]) return 0;
  return 1;
}

em_status em_spatial_check_grad(const em_op_args *a, const em_shape *dy, const em_shape *y) {
  char want[128], have[128];
  if (em_spatial_shapes_compatible(dy, y)) return EM_OK;
  return em_op_fail(a, "the gradient %s does not match the forward output %s", em_shape_str(dy, have, sizeof have),
                    em_shape_str(y, want, sizeof want));
}

void em_spatial_pads(int auto_pad, const int64_t *pads, int nsp, int i, int64_t in, int64_t s, int64_t dk,
                     int64_t *pb, int64_t *pe) {
  if (auto_pad == EM_PAD_NOTSET) {
    *pb = pads ? pads[i] : 0;
    *pe = pads ? pads[nsp + i] : 0;
  } else if (auto_pad == EM_PAD_VALID) {
    *pb = *pe = 0;
  } else if (auto_pad == EM_PAD_SAME_SYMMETRIC) {
    int64_t out = (in + s - 1) / s, extra = in - ((out - 1) * s + 1);
    *pb = (dk - 1) / 2 - extra / 2;
    *pe = (dk - 1) - (dk - 1) / 2 - (extra - extra / 2);
  } else {
    int64_t out = (in + s - 1) / s, total = (out - 1) * s + dk - in;
    if (total < 0) total = 0;
    *pb = auto_pad == EM_PAD_SAME_UPPER ? total / 2 : total - total / 2;
    *pe = total - *pb;
  }
}
