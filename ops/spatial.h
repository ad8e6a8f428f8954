/* What the spatial op families (ops/conv.c, ops/pool.c) share: reading and checking the ONNX
 * window attributes (kernel_shape, strides, dilations, pads, auto_pad) and the padding rule of a
 * forward window. Kept in one place so convolution and pooling cannot drift apart on ONNX's
 * padding contract. Internal to libember (the build hides every non-static symbol). */
#ifndef EMBER_OPS_SPATIAL_H
#define EMBER_OPS_SPATIAL_H

#include <stdint.h>

#include "op.h"

/* auto_pad modes */
enum { EM_PAD_NOTSET, EM_PAD_VALID, EM_PAD_SAME_UPPER, EM_PAD_SAME_LOWER, EM_PAD_SAME_SYMMETRIC };

/* The window attributes of an op with nsp spatial axes; a NULL list is absent (defaults apply). */
typedef struct em_spatial_attrs {
  const int64_t *kernel_shape, *strides, *dilations, *pads; /* nsp, nsp, nsp, 2 * nsp values */
  int auto_pad;                                             /* EM_PAD_* */
} em_spatial_attrs;

/* An INTS attribute of exactly `want` values, each >= min; *out = NULL when absent. */
em_status em_spatial_ints_attr(const em_op_args *a, const char *name, int want, int64_t min, const int64_t **out);

/* An INT attribute in [min, max] (max INT64_MAX: no upper bound). */
em_status em_spatial_int_attr(const em_op_args *a, const char *name, int64_t dflt, int64_t min, int64_t max,
                              int64_t *out);

/* kernel_shape (refused when absent and kernel_required), strides, dilations, pads and auto_pad,
 * each checked; pads together with an auto_pad other than NOTSET is refused. */
em_status em_spatial_attrs_read(const em_op_args *a, int nsp, int kernel_required, em_spatial_attrs *sa);

/* Every input f32 or f64, all of one dtype. */
em_status em_spatial_check_float(const em_op_args *a);

/* 1 when a and b agree on dtype, rank and every dim known in both. */
int em_spatial_shapes_compatible(const em_shape *a, const em_shape *b);

/* Refuses a gradient dy whose shape differs from the forward output y. */
em_status em_spatial_check_grad(const em_op_args *a, const em_shape *dy, const em_shape *y);

/* Begin and end padding of spatial axis i of a forward window (input size in, stride s, dilated
 * kernel span dk) under ONNX's rules: pads as given (NOTSET), none (VALID), or the least total
 * that gives ceil(in / s) outputs, the odd unit at the end (SAME_UPPER) or beginning (SAME_LOWER).
 * SAME_SYMMETRIC is CNTK's auto-padding (Source/Math/ConvolveGeometry.h, GetLowerPad/GetUpperPad):
 * ceil(in / s) outputs whose kernel centres ((dk - 1) / 2 into the window) are spread evenly over
 * the input: with extra = in - ((out - 1) s + 1) input cells beyond the first and last centre,
 * begin = (dk - 1) / 2 - extra / 2 and end = dk - 1 - (dk - 1) / 2 - (extra - extra / 2). With
 * stride 1 that is SAME_UPPER; with larger strides it differs. Either pad may come out negative
 * (stride larger than the kernel: CNTK crops there); callers refuse that. */
void em_spatial_pads(int auto_pad, const int64_t *pads, int nsp, int i, int64_t in, int64_t s, int64_t dk,
                     int64_t *pb, int64_t *pe);

/* Column phases of a strided window (max_pool's rows, a depthwise convolution's padded
 * planes): rows rows of w columns -> the same rows, each row's columns grouped by their
 * phase modulo s, so that the taps of windows s columns apart read contiguous elements:
 * dst[r * s * wq + f * wq + i] = src[r * w + f + s * i], wq = ceil(w / s) (slots past a
 * phase's end are left as they are; a window inside the row never reads them).
 * em_split_phases picks the float or double one. */
#define EM_SPLIT_PHASES_DEF(T, name)                                                              \
  static inline void name(const T *src, int64_t rows, int64_t w, int64_t s, int64_t wq, T *dst) { \
    if (s == 2) { /* the common stride, as pairs: a loop the compiler vectorises with shuffles */ \
      for (int64_t r = 0; r < rows; r++) {                                                        \
        const T *from = src + r * w;                                                              \
        T *even = dst + r * 2 * wq, *odd = even + wq;                                             \
        for (int64_t i = 0; i < w / 2; i++) {                                                     \
          even[i] = from[2 * i];                                                                  \
          odd[i] = from[2 * i + 1];                                                               \
        }                                                                                         \
        if (w % 2) even[w / 2] = from[w - 1];                                                     \
      }                                                                                           \
      return;                                                                                     \
    }                                                                                             \
    for (int64_t r = 0; r < rows; r++)                                                            \
      for (int64_t f = 0; f < s && f < w; f++) {                                                  \
        const T *from = src + r * w + f;                                                          \
        T *to = dst + (r * s + f) * wq;                                                           \
        for (int64_t i = 0; f + s * i < w; i++) to[i] = from[s * i];                              \
      }                                                                                           \
  }
EM_SPLIT_PHASES_DEF(float, em_split_phases_f32)
EM_SPLIT_PHASES_DEF(double, em_split_phases_f64)
#define em_split_phases(src, rows, w, s, wq, dst) \
  _Generic((dst), float *: em_split_phases_f32, double *: em_split_phases_f64)(src, rows, w, s, wq, dst)

#endif
