/* Descriptors of the fake libcudnn: tensors, filters, convolutions and
 * pooling, the convolution and pooling output sizes, and the derived batch
 * normalisation descriptor.
 *
 * What each Set checks is what cuDNN's API reference lists for it (BAD_PARAM
 * for a NULL or destroyed descriptor, a non-positive size, a bad enumerant;
 * NOT_SUPPORTED for more than CUDNN_DIM_MAX dimensions). Where the
 * reference is silent the choice is the double's and marked [U] in README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_internal.h"

#define FD_MAX_ELEMENTS 2147483647LL /* "the maximum limit of 2 Giga-elements" */

static int dtype_is_enum(int d) { return d >= 0 && d < FD_N_DTYPES; }

/* ------------------------------------------------------ create / destroy --- */

static cudnnStatus_t create_obj(void **out, size_t size, fd_kind kind, const char *op) {
  if (!out) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: the descriptor pointer is NULL", op);
  void *o = calloc(1, size);
  if (!o || fd_register(o, kind) != 0) {
    free(o);
    return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  }
  *out = o;
  return FD_SUCCESS;
}

/* Destroying NULL does nothing [U]; destroying twice, or something that is
 * not a live descriptor of that kind, is BAD_PARAM [U: undefined in cuDNN]. */
static cudnnStatus_t destroy_obj(void *o, fd_kind kind, const char *op) {
  if (!o) return FD_SUCCESS;
  if (fd_unregister(o, kind) != 0) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live descriptor", op, o);
  free(o);
  return FD_SUCCESS;
}

static cudnnStatus_t create_tensor(fd_tensor *t) {
  return create_obj((void **)t, sizeof **t, FD_OBJ_TENSOR, "cudnnCreateTensorDescriptor");
}

static cudnnStatus_t create_conv(fd_conv *c) {
  cudnnStatus_t s = create_obj((void **)c, sizeof **c, FD_OBJ_CONV, "cudnnCreateConvolutionDescriptor");
  if (s == FD_SUCCESS) {
    (*c)->groups = 1;
    (*c)->math = FD_DEFAULT_MATH;
  }
  return s;
}

FD_EXPORT cudnnStatus_t cudnnCreateTensorDescriptor(fd_tensor *t) { FD_CALL(cudnnCreateTensorDescriptor, create_tensor(t)); }
FD_EXPORT cudnnStatus_t cudnnDestroyTensorDescriptor(fd_tensor t) {
  FD_CALL(cudnnDestroyTensorDescriptor, destroy_obj(t, FD_OBJ_TENSOR, "cudnnDestroyTensorDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnCreateFilterDescriptor(fd_filter *f) {
  FD_CALL(cudnnCreateFilterDescriptor, create_obj((void **)f, sizeof **f, FD_OBJ_FILTER, "cudnnCreateFilterDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnDestroyFilterDescriptor(fd_filter f) {
  FD_CALL(cudnnDestroyFilterDescriptor, destroy_obj(f, FD_OBJ_FILTER, "cudnnDestroyFilterDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnCreateConvolutionDescriptor(fd_conv *c) {
  FD_CALL(cudnnCreateConvolutionDescriptor, create_conv(c));
}
FD_EXPORT cudnnStatus_t cudnnDestroyConvolutionDescriptor(fd_conv c) {
  FD_CALL(cudnnDestroyConvolutionDescriptor, destroy_obj(c, FD_OBJ_CONV, "cudnnDestroyConvolutionDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnCreatePoolingDescriptor(fd_pool *p) {
  FD_CALL(cudnnCreatePoolingDescriptor, create_obj((void **)p, sizeof **p, FD_OBJ_POOL, "cudnnCreatePoolingDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnDestroyPoolingDescriptor(fd_pool p) {
  FD_CALL(cudnnDestroyPoolingDescriptor, destroy_obj(p, FD_OBJ_POOL, "cudnnDestroyPoolingDescriptor"));
}

/* ------------------------------------------------------------- tensors --- */

/* The checks every tensor and filter Set shares: a live descriptor, a data
 * type enumerant, 3 to CUDNN_DIM_MAX dimensions (fewer than 3 is BAD_PARAM
 * [U]; the reference says not to use 2; more is NOT_SUPPORTED), positive
 * sizes, at most 2^31 - 1 elements (NOT_SUPPORTED). */
static cudnnStatus_t check_shape(const void *obj, fd_kind kind, int dtype, int nb, const int *dims, const char *op) {
  if (!obj) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: the descriptor is NULL", op);
  if (!fd_is_live(obj, kind)) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live descriptor", op, obj);
  if (!dtype_is_enum(dtype)) return fd_refuse(FD_BAD_PARAM, "%s: %d is no cudnnDataType_t", op, dtype);
  if (nb > FD_DIM_MAX) return fd_refuse(FD_NOT_SUPPORTED, "%s: %d dimensions (at most %d)", op, nb, FD_DIM_MAX);
  if (nb < 3) return fd_refuse(FD_BAD_PARAM, "%s: %d dimensions (at least 3)", op, nb);
  if (!dims) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: the dimension array is NULL", op);
  long long n = 1;
  for (int i = 0; i < nb; i++) {
    if (dims[i] <= 0) return fd_refuse(FD_BAD_PARAM, "%s: dimension %d is %d (dimA[i] <= 0)", op, i, dims[i]);
    n *= dims[i];
    if (n > FD_MAX_ELEMENTS) return fd_refuse(FD_NOT_SUPPORTED, "%s: more than 2^31 - 1 elements", op);
  }
  return FD_SUCCESS;
}

/* Packed strides of dims in a format: NCHW row-major; NHWC with C innermost,
 * then the spatial axes, then N. */
static void packed_strides(int format, int nb, const int *dims, int *strides) {
  if (format == FD_NHWC) {
    int s = 1;
    strides[1] = s;
    s *= dims[1];
    for (int i = nb - 1; i >= 2; i--) {
      strides[i] = s;
      s *= dims[i];
    }
    strides[0] = s;
  } else {
    int s = 1;
    for (int i = nb - 1; i >= 0; i--) {
      strides[i] = s;
      s *= dims[i];
    }
  }
}

static cudnnStatus_t check_format(int format, const char *op) {
  if (format < FD_NCHW || format > FD_NCHW_VECT_C) return fd_refuse(FD_BAD_PARAM, "%s: %d is no cudnnTensorFormat_t", op, format);
  if (format == FD_NCHW_VECT_C) return fd_refuse(FD_NOT_SUPPORTED_LAYOUT, "%s: CUDNN_TENSOR_NCHW_VECT_C is not modelled [U]", op);
  return FD_SUCCESS;
}

static cudnnStatus_t set_tensor(fd_tensor t, int dtype, int nb, const int *dims, const int *strides, const char *op) {
  cudnnStatus_t s = check_shape(t, FD_OBJ_TENSOR, dtype, nb, dims, op);
  if (s != FD_SUCCESS) return s;
  if (!strides) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: the stride array is NULL", op);
  t->nb = nb;
  t->dtype = dtype;
  for (int i = 0; i < nb; i++) {
    t->dims[i] = dims[i];
    t->strides[i] = strides[i];
  }
  return FD_SUCCESS;
}

static cudnnStatus_t set_tensor_format(fd_tensor t, int format, int dtype, int nb, const int *dims, const char *op) {
  cudnnStatus_t s = check_format(format, op);
  if (s == FD_SUCCESS) s = check_shape(t, FD_OBJ_TENSOR, dtype, nb, dims, op);
  if (s != FD_SUCCESS) return s;
  int strides[FD_DIM_MAX];
  packed_strides(format, nb, dims, strides);
  return set_tensor(t, dtype, nb, dims, strides, op);
}

static cudnnStatus_t set_tensor4d(fd_tensor t, int format, int dtype, int n, int c, int h, int w) {
  int dims[4] = {n, c, h, w};
  return set_tensor_format(t, format, dtype, 4, dims, "cudnnSetTensor4dDescriptor");
}

static cudnnStatus_t set_tensor4d_ex(fd_tensor t, int dtype, const int *dims, const int *strides) {
  return set_tensor(t, dtype, 4, dims, strides, "cudnnSetTensor4dDescriptorEx");
}

static cudnnStatus_t get_tensor(fd_tensor t, int requested, int *dtype, int *nb, int *dims, int *strides) {
  const char *op = "cudnnGetTensorNdDescriptor";
  cudnnStatus_t s = fd_tensor_ready(t, op);
  if (s != FD_SUCCESS) return s;
  if (!dtype || !nb || (requested > 0 && (!dims || !strides)))
    return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: an output pointer is NULL", op);
  if (requested < 0) return fd_refuse(FD_BAD_PARAM, "%s: nbDimsRequested is negative", op);
  *dtype = t->dtype;
  *nb = t->nb;
  for (int i = 0; i < requested && i < t->nb; i++) {
    dims[i] = t->dims[i];
    strides[i] = t->strides[i];
  }
  return FD_SUCCESS;
}

static cudnnStatus_t tensor_bytes(fd_tensor t, size_t *size) {
  cudnnStatus_t s = fd_tensor_ready(t, "cudnnGetTensorSizeInBytes");
  if (s != FD_SUCCESS) return s;
  if (!size) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "cudnnGetTensorSizeInBytes: size is NULL");
  fd_view v;
  fd_view_of_tensor(&v, t, NULL);
  *size = fd_view_extent(&v);
  return FD_SUCCESS;
}

FD_EXPORT cudnnStatus_t cudnnSetTensor4dDescriptor(fd_tensor t, int format, int dtype, int n, int c, int h, int w) {
  FD_CALL(cudnnSetTensor4dDescriptor, set_tensor4d(t, format, dtype, n, c, h, w));
}
FD_EXPORT cudnnStatus_t cudnnSetTensor4dDescriptorEx(fd_tensor t, int dtype, int n, int c, int h, int w, int ns, int cs,
                                                     int hs, int ws) {
  int dims[4] = {n, c, h, w}, strides[4] = {ns, cs, hs, ws};
  FD_CALL(cudnnSetTensor4dDescriptorEx, set_tensor4d_ex(t, dtype, dims, strides));
}
FD_EXPORT cudnnStatus_t cudnnSetTensorNdDescriptor(fd_tensor t, int dtype, int nb, const int *dims, const int *strides) {
  FD_CALL(cudnnSetTensorNdDescriptor, set_tensor(t, dtype, nb, dims, strides, "cudnnSetTensorNdDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnSetTensorNdDescriptorEx(fd_tensor t, int format, int dtype, int nb, const int *dims) {
  FD_CALL(cudnnSetTensorNdDescriptorEx, set_tensor_format(t, format, dtype, nb, dims, "cudnnSetTensorNdDescriptorEx"));
}
FD_EXPORT cudnnStatus_t cudnnGetTensorNdDescriptor(fd_tensor t, int requested, int *dtype, int *nb, int *dims,
                                                   int *strides) {
  FD_CALL(cudnnGetTensorNdDescriptor, get_tensor(t, requested, dtype, nb, dims, strides));
}
FD_EXPORT cudnnStatus_t cudnnGetTensorSizeInBytes(fd_tensor t, size_t *size) {
  FD_CALL(cudnnGetTensorSizeInBytes, tensor_bytes(t, size));
}

cudnnStatus_t fd_tensor_ready(fd_tensor t, const char *what) {
  if (!t) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: a tensor descriptor is NULL", what);
  if (!fd_is_live(t, FD_OBJ_TENSOR)) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live tensor descriptor", what, (void *)t);
  if (t->nb == 0) return fd_refuse(FD_BAD_PARAM, "%s: a tensor descriptor was never set", what);
  return FD_SUCCESS;
}

int fd_tensor_has_negative_stride(fd_tensor t) {
  for (int i = 0; i < t->nb; i++)
    if (t->strides[i] < 0) return 1;
  return 0;
}

static void dims_text(char *buf, size_t cap, int nb, const int *dims) {
  size_t at = 0;
  at += (size_t)snprintf(buf + at, cap - at, "[");
  for (int i = 0; i < nb && at < cap; i++) at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", dims[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

void fd_tensor_text(fd_tensor t, char *buf, size_t cap) {
  char d[96], s[128];
  dims_text(d, sizeof d, t->nb, t->dims);
  dims_text(s, sizeof s, t->nb, t->strides);
  snprintf(buf, cap, "%s%s strides %s", d, fd_dtype_name(t->dtype), s);
}

void fd_filter_text(fd_filter f, char *buf, size_t cap) {
  char d[96];
  dims_text(d, sizeof d, f->nb, f->dims);
  snprintf(buf, cap, "%s%s %s", d, fd_dtype_name(f->dtype), f->format == FD_NHWC ? "KRSC" : "KCRS");
}

/* ------------------------------------------------------------- filters --- */

static cudnnStatus_t set_filter(fd_filter f, int dtype, int format, int nb, const int *dims, const char *op) {
  cudnnStatus_t s = check_format(format, op);
  if (s == FD_SUCCESS) s = check_shape(f, FD_OBJ_FILTER, dtype, nb, dims, op);
  if (s != FD_SUCCESS) return s;
  f->nb = nb;
  f->dtype = dtype;
  f->format = format;
  for (int i = 0; i < nb; i++) f->dims[i] = dims[i];
  return FD_SUCCESS;
}

FD_EXPORT cudnnStatus_t cudnnSetFilter4dDescriptor(fd_filter f, int dtype, int format, int k, int c, int h, int w) {
  int dims[4] = {k, c, h, w};
  FD_CALL(cudnnSetFilter4dDescriptor, set_filter(f, dtype, format, 4, dims, "cudnnSetFilter4dDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnSetFilterNdDescriptor(fd_filter f, int dtype, int format, int nb, const int *dims) {
  FD_CALL(cudnnSetFilterNdDescriptor, set_filter(f, dtype, format, nb, dims, "cudnnSetFilterNdDescriptor"));
}

cudnnStatus_t fd_filter_ready(fd_filter f, const char *what) {
  if (!f) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: a filter descriptor is NULL", what);
  if (!fd_is_live(f, FD_OBJ_FILTER)) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live filter descriptor", what, (void *)f);
  if (f->nb == 0) return fd_refuse(FD_BAD_PARAM, "%s: the filter descriptor was never set", what);
  return FD_SUCCESS;
}

/* -------------------------------------------------------- convolutions --- */

/* cudnnSetConvolutionNdDescriptor's reference: BAD_PARAM for a negative
 * array length (0 too [U]), a bad mode or data type, a negative padding, a
 * stride or dilation below 1; NOT_SUPPORTED beyond CUDNN_DIM_MAX - 2. */
static cudnnStatus_t set_conv(fd_conv c, int n, const int *pad, const int *stride, const int *dil, int mode, int compute,
                              const char *op) {
  if (!c) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: the descriptor is NULL", op);
  if (!fd_is_live(c, FD_OBJ_CONV)) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live descriptor", op, (void *)c);
  if (n <= 0) return fd_refuse(FD_BAD_PARAM, "%s: arrayLength %d", op, n);
  if (n > FD_DIM_MAX - 2) return fd_refuse(FD_NOT_SUPPORTED, "%s: arrayLength %d (at most %d)", op, n, FD_DIM_MAX - 2);
  if (!pad || !stride || !dil) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: an array is NULL", op);
  if (mode != FD_CONVOLUTION && mode != FD_CROSS_CORRELATION) return fd_refuse(FD_BAD_PARAM, "%s: mode %d", op, mode);
  if (!dtype_is_enum(compute)) return fd_refuse(FD_BAD_PARAM, "%s: %d is no cudnnDataType_t", op, compute);
  for (int i = 0; i < n; i++) {
    if (pad[i] < 0) return fd_refuse(FD_BAD_PARAM, "%s: padding %d of axis %d", op, pad[i], i);
    if (stride[i] < 1) return fd_refuse(FD_BAD_PARAM, "%s: stride %d of axis %d", op, stride[i], i);
    if (dil[i] < 1) return fd_refuse(FD_BAD_PARAM, "%s: dilation %d of axis %d", op, dil[i], i);
  }
  c->nsp = n;
  for (int i = 0; i < n; i++) {
    c->pad[i] = pad[i];
    c->stride[i] = stride[i];
    c->dilation[i] = dil[i];
  }
  c->mode = mode;
  c->compute = compute;
  return FD_SUCCESS;
}

static cudnnStatus_t set_groups(fd_conv c, int g) {
  if (!fd_is_live(c, FD_OBJ_CONV)) return fd_refuse(FD_BAD_PARAM, "cudnnSetConvolutionGroupCount: not a live descriptor");
  if (g < 1) return fd_refuse(FD_BAD_PARAM, "cudnnSetConvolutionGroupCount: %d groups", g);
  c->groups = g;
  return FD_SUCCESS;
}

static cudnnStatus_t set_math(fd_conv c, int m) {
  if (!fd_is_live(c, FD_OBJ_CONV)) return fd_refuse(FD_BAD_PARAM, "cudnnSetConvolutionMathType: not a live descriptor");
  if (m < FD_DEFAULT_MATH || m > FD_FMA_MATH) return fd_refuse(FD_BAD_PARAM, "cudnnSetConvolutionMathType: %d is no cudnnMathType_t", m);
  c->math = m;
  return FD_SUCCESS;
}

int64_t fd_conv_out_size(int64_t in, int64_t k, int pad, int stride, int dilation) {
  int64_t span = (k - 1) * dilation + 1, room = in + 2 * (int64_t)pad - span;
  return room < 0 ? 0 : 1 + room / stride;
}

/* cudnnGetConvolutionNdForwardOutputDim: n of x, k of w, then each spatial
 * size; BAD_PARAM for unset or unmatched descriptors, nbDims other than x's,
 * channels that do not match the groups, or a filter wider than the padded
 * input. */
static cudnnStatus_t conv_output_dim(fd_conv c, fd_tensor x, fd_filter w, int nb, int *out) {
  const char *op = "cudnnGetConvolutionNdForwardOutputDim";
  cudnnStatus_t s = fd_tensor_ready(x, op);
  if (s == FD_SUCCESS) s = fd_filter_ready(w, op);
  if (s != FD_SUCCESS) return s;
  if (!c || !out) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: convDesc or the output array is NULL", op);
  if (!fd_is_live(c, FD_OBJ_CONV) || c->nsp == 0) return fd_refuse(FD_BAD_PARAM, "%s: the convolution descriptor is not set", op);
  if (nb != x->nb || x->nb != w->nb || x->nb != c->nsp + 2)
    return fd_refuse(FD_BAD_PARAM, "%s: nbDims %d, x has %d, w %d, the convolution %d spatial axes", op, nb, x->nb, w->nb,
                     c->nsp);
  if (x->dims[1] != w->dims[1] * c->groups)
    return fd_refuse(FD_BAD_PARAM, "%s: x has %d channels, w %d per group, %d groups", op, x->dims[1], w->dims[1], c->groups);
  out[0] = x->dims[0];
  out[1] = w->dims[0];
  for (int i = 0; i < c->nsp; i++) {
    int64_t o = fd_conv_out_size(x->dims[2 + i], w->dims[2 + i], c->pad[i], c->stride[i], c->dilation[i]);
    if (o <= 0) return fd_refuse(FD_BAD_PARAM, "%s: the filter is wider than the padded input on axis %d", op, i);
    out[2 + i] = (int)o;
  }
  return FD_SUCCESS;
}

FD_EXPORT cudnnStatus_t cudnnSetConvolution2dDescriptor(fd_conv c, int pad_h, int pad_w, int u, int v, int dil_h, int dil_w,
                                                        int mode, int compute) {
  int pad[2] = {pad_h, pad_w}, stride[2] = {u, v}, dil[2] = {dil_h, dil_w};
  FD_CALL(cudnnSetConvolution2dDescriptor, set_conv(c, 2, pad, stride, dil, mode, compute, "cudnnSetConvolution2dDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnSetConvolutionNdDescriptor(fd_conv c, int n, const int *pad, const int *stride, const int *dil,
                                                        int mode, int compute) {
  FD_CALL(cudnnSetConvolutionNdDescriptor, set_conv(c, n, pad, stride, dil, mode, compute, "cudnnSetConvolutionNdDescriptor"));
}
FD_EXPORT cudnnStatus_t cudnnSetConvolutionGroupCount(fd_conv c, int g) { FD_CALL(cudnnSetConvolutionGroupCount, set_groups(c, g)); }
FD_EXPORT cudnnStatus_t cudnnSetConvolutionMathType(fd_conv c, int m) { FD_CALL(cudnnSetConvolutionMathType, set_math(c, m)); }
FD_EXPORT cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(fd_conv c, fd_tensor x, fd_filter w, int nb, int *out) {
  FD_CALL(cudnnGetConvolutionNdForwardOutputDim, conv_output_dim(c, x, w, nb, out));
}

/* ------------------------------------------------------------- pooling --- */

/* cudnnSetPoolingNdDescriptor: nbDims spatial axes; BAD_PARAM for a bad
 * mode or NaN option, a window or stride below 1, a negative padding, and
 * [U] a padding as wide as the window (an output would see only padding). */
static cudnnStatus_t set_pool(fd_pool p, int mode, int nan_opt, int n, const int *win, const int *pad, const int *stride) {
  const char *op = "cudnnSetPoolingNdDescriptor";
  if (!p) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: the descriptor is NULL", op);
  if (!fd_is_live(p, FD_OBJ_POOL)) return fd_refuse(FD_BAD_PARAM, "%s: not a live descriptor", op);
  if (mode < FD_POOL_MAX || mode > FD_POOL_MAX_DETERMINISTIC) return fd_refuse(FD_BAD_PARAM, "%s: mode %d", op, mode);
  if (nan_opt != FD_NOT_PROPAGATE_NAN && nan_opt != FD_PROPAGATE_NAN) return fd_refuse(FD_BAD_PARAM, "%s: NaN option %d", op, nan_opt);
  if (n <= 0) return fd_refuse(FD_BAD_PARAM, "%s: nbDims %d", op, n);
  if (n > FD_DIM_MAX - 2) return fd_refuse(FD_NOT_SUPPORTED, "%s: nbDims %d", op, n);
  if (!win || !pad || !stride) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: an array is NULL", op);
  for (int i = 0; i < n; i++) {
    if (win[i] < 1 || stride[i] < 1 || pad[i] < 0)
      return fd_refuse(FD_BAD_PARAM, "%s: axis %d: window %d, padding %d, stride %d", op, i, win[i], pad[i], stride[i]);
    if (pad[i] >= win[i]) return fd_refuse(FD_BAD_PARAM, "%s: axis %d: padding %d not below the window %d [U]", op, i, pad[i], win[i]);
  }
  p->nsp = n;
  p->mode = mode;
  p->nan_opt = nan_opt;
  for (int i = 0; i < n; i++) {
    p->window[i] = win[i];
    p->pad[i] = pad[i];
    p->stride[i] = stride[i];
  }
  return FD_SUCCESS;
}

/* The reference's formula: 1 + (in + 2 pad - window) / stride. */
static cudnnStatus_t pool_output_dim(fd_pool p, fd_tensor x, int nb, int *out) {
  const char *op = "cudnnGetPoolingNdForwardOutputDim";
  cudnnStatus_t s = fd_tensor_ready(x, op);
  if (s != FD_SUCCESS) return s;
  if (!p || !out) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: poolingDesc or the output array is NULL", op);
  if (!fd_is_live(p, FD_OBJ_POOL) || p->nsp == 0) return fd_refuse(FD_BAD_PARAM, "%s: the pooling descriptor is not set", op);
  if (nb != x->nb || x->nb != p->nsp + 2)
    return fd_refuse(FD_BAD_PARAM, "%s: nbDims %d, x has %d, the pooling %d spatial axes", op, nb, x->nb, p->nsp);
  out[0] = x->dims[0];
  out[1] = x->dims[1];
  for (int i = 0; i < p->nsp; i++) {
    int room = x->dims[2 + i] + 2 * p->pad[i] - p->window[i];
    if (room < 0) return fd_refuse(FD_BAD_PARAM, "%s: the window is wider than the padded input on axis %d", op, i);
    out[2 + i] = 1 + room / p->stride[i];
  }
  return FD_SUCCESS;
}

FD_EXPORT cudnnStatus_t cudnnSetPoolingNdDescriptor(fd_pool p, int mode, int nan_opt, int n, const int *win, const int *pad,
                                                    const int *stride) {
  FD_CALL(cudnnSetPoolingNdDescriptor, set_pool(p, mode, nan_opt, n, win, pad, stride));
}
FD_EXPORT cudnnStatus_t cudnnGetPoolingNdForwardOutputDim(fd_pool p, fd_tensor x, int nb, int *out) {
  FD_CALL(cudnnGetPoolingNdForwardOutputDim, pool_output_dim(p, x, nb, out));
}

/* ------------------------------------------------------- batch norm ---- */

/* cudnnDeriveBNTensorDescriptor: 1xCx1x1(x1) for the spatial modes,
 * 1xCxHxW(xD) per activation; f32 for f16 input (the reference), and for
 * bf16 input too [U]; NCHW-packed. x must have 4 or 5 dimensions. */
static cudnnStatus_t derive_bn(fd_tensor d, fd_tensor x, int mode) {
  const char *op = "cudnnDeriveBNTensorDescriptor";
  cudnnStatus_t s = fd_tensor_ready(x, op);
  if (s != FD_SUCCESS) return s;
  if (!d) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: derivedBnDesc is NULL", op);
  if (!fd_is_live(d, FD_OBJ_TENSOR)) return fd_refuse(FD_BAD_PARAM, "%s: derivedBnDesc is not a live descriptor", op);
  if (mode < FD_BN_PER_ACTIVATION || mode > FD_BN_SPATIAL_PERSISTENT) return fd_refuse(FD_BAD_PARAM, "%s: mode %d", op, mode);
  if (x->nb != 4 && x->nb != 5) return fd_refuse(FD_BAD_PARAM, "%s: x has %d dimensions (4 or 5)", op, x->nb);
  int dims[FD_DIM_MAX], strides[FD_DIM_MAX];
  dims[0] = 1;
  dims[1] = x->dims[1];
  for (int i = 2; i < x->nb; i++) dims[i] = mode == FD_BN_PER_ACTIVATION ? x->dims[i] : 1;
  packed_strides(FD_NCHW, x->nb, dims, strides);
  int dtype = x->dtype == FD_HALF || x->dtype == FD_BFLOAT16 ? FD_FLOAT : x->dtype;
  return set_tensor(d, dtype, x->nb, dims, strides, op);
}

FD_EXPORT cudnnStatus_t cudnnDeriveBNTensorDescriptor(fd_tensor d, fd_tensor x, int mode) {
  FD_CALL(cudnnDeriveBNTensorDescriptor, derive_bn(d, x, mode));
}
