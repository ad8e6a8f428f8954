/* First primitives on any device: each runs the kernel of the same name on a
 * CUDA device (through the dispatch layer) or its CPU twin. Pointers are device
 * pointers for a CUDA device (from em_malloc) and host pointers for the CPU. */
#ifndef EMBER_PRIMITIVES_H
#define EMBER_PRIMITIVES_H

#include <stddef.h>
#include "ember/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = value for i < n. */
EM_API em_status em_fill_f32(em_device dev, float *y, float value, size_t n, em_stream *s);
/* y[i] = a * x[i] + y[i], computed without FMA contraction (a*x rounded, then added). */
EM_API em_status em_axpy_f32(em_device dev, float a, const float *x, float *y, size_t n,
                             em_stream *s);
/* *out = sum of x[0..n), in Ember's fixed order (see kernels/reduce.cu): the same
 * bits on the CPU and every GPU. out is a device pointer on a CUDA device. */
EM_API em_status em_sum_f32(em_device dev, const float *x, size_t n, float *out, em_stream *s);
/* out (cols x rows) = transpose of in (rows x cols), row-major. */
EM_API em_status em_transpose_f32(em_device dev, const float *in, float *out, size_t rows,
                                  size_t cols, em_stream *s);

#ifdef __cplusplus
}
#endif
#endif
