/* First primitives on any device: each runs the kernel of the same name on a
 * CUDA device (through the dispatch layer) or its CPU twin. Pointers are device
 * pointers for a CUDA device (from em_malloc) and host pointers for the CPU. */
#ifndef EMBER_PRIMITIVES_H
#define EMBER_PRIMITIVES_H

#include <stddef.h>
#include <stdint.h>
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

/* Elementwise maps of Ember's portable math (kernels/em_math.h: its own exp,
 * log, tanh, ..., with the max ulp error of each documented there): the same
 * bits on the CPU and on every GPU. NaN results are always 0x7fc00000. */
typedef enum em_math_fn {
  EM_MATH_EXP,
  EM_MATH_LOG,
  EM_MATH_LOG1P,
  EM_MATH_EXPM1,
  EM_MATH_TANH,
  EM_MATH_SIGMOID,  /* 1 / (1 + e^-x) */
  EM_MATH_SOFTPLUS, /* log(1 + e^x) */
  EM_MATH_ERF,
  EM_MATH_SQRT,
  EM_MATH_RSQRT,    /* 1 / sqrt(x) */
  EM_MATH_SIN,
  EM_MATH_COS,
  EM_MATH_TAN,
  EM_MATH_ATAN,
  EM_MATH_ASINH,
  EM_MATH_FN_COUNT
} em_math_fn;

/* "exp", "log", ...; NULL for a value outside em_math_fn. */
EM_API const char *em_math_fn_name(em_math_fn fn);
/* y[i] = fn(x[i]) for i < n. y may be x. */
EM_API em_status em_map_f32(em_device dev, em_math_fn fn, const float *x, float *y, size_t n,
                            em_stream *s);
/* y[i] = x[i] ^ p[i] (C99 powf's special cases). y may be x or p. */
EM_API em_status em_pow_f32(em_device dev, const float *x, const float *p, float *y, size_t n,
                            em_stream *s);
/* float <-> bits of IEEE binary16 and bfloat16: round to nearest even,
 * overflow to inf, subnormals kept, NaN stays a quiet NaN. x and y must not
 * overlap. */
EM_API em_status em_f32_to_f16(em_device dev, const float *x, uint16_t *y, size_t n, em_stream *s);
EM_API em_status em_f16_to_f32(em_device dev, const uint16_t *x, float *y, size_t n, em_stream *s);
EM_API em_status em_f32_to_bf16(em_device dev, const float *x, uint16_t *y, size_t n, em_stream *s);
EM_API em_status em_bf16_to_f32(em_device dev, const uint16_t *x, float *y, size_t n, em_stream *s);

#ifdef __cplusplus
}
#endif
#endif
