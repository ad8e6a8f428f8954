/* Tensors: typed, up to 8-dimensional, strided views over reference-counted
 * storage that lives on one device (the CPU or a CUDA device). */
#ifndef EMBER_TENSOR_H
#define EMBER_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "ember/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_MAX_DIMS 8

typedef enum em_dtype {
  EM_F32 = 0, EM_F64 = 1, EM_F16 = 2, EM_BF16 = 3,
  EM_I32 = 4, EM_I64 = 5, EM_U8 = 6, EM_BOOL = 7
} em_dtype;

EM_API size_t em_dtype_size(em_dtype t);      /* bytes per element; 0 for an unknown dtype */
EM_API const char *em_dtype_name(em_dtype t); /* "f32", "bf16", ... */

typedef struct em_tensor em_tensor;

/* A new contiguous (row-major) tensor, zero-filled. A 0-dimensional tensor is
 * a scalar; a dimension of size 0 gives an empty tensor. */
EM_API em_status em_tensor_zeros(em_device dev, em_dtype dtype, int ndim, const int64_t *shape, em_tensor **out);
/* A new contiguous tensor holding a copy of `bytes` bytes of row-major host data
 * (bytes must equal numel * dtype size). */
EM_API em_status em_tensor_from_host(em_device dev, em_dtype dtype, int ndim, const int64_t *shape,
                                     const void *data, size_t bytes, em_tensor **out);
/* Copies the tensor's elements, in row-major order of its shape (whatever its
 * strides), to host memory of `bytes` bytes (must equal numel * dtype size). */
EM_API em_status em_tensor_to_host(const em_tensor *t, void *data, size_t bytes);

EM_API em_tensor *em_tensor_retain(em_tensor *t);
EM_API void em_tensor_release(em_tensor *t); /* NULL is fine */

EM_API int em_tensor_ndim(const em_tensor *t);
EM_API const int64_t *em_tensor_shape(const em_tensor *t);   /* ndim entries */
EM_API const int64_t *em_tensor_strides(const em_tensor *t); /* in elements */
EM_API int64_t em_tensor_numel(const em_tensor *t);
EM_API em_dtype em_tensor_dtype(const em_tensor *t);
EM_API em_device em_tensor_device(const em_tensor *t);
EM_API int em_tensor_is_contiguous(const em_tensor *t);
/* Address of the first element (device memory for a CUDA tensor). */
EM_API void *em_tensor_data(const em_tensor *t);

/* Views share storage with t; no data moves. */
/* Reshape a contiguous tensor; one entry of shape may be -1 (inferred). */
EM_API em_status em_tensor_reshape(em_tensor *t, int ndim, const int64_t *shape, em_tensor **out);
/* perm[i] = the input axis that becomes output axis i. */
EM_API em_status em_tensor_permute(em_tensor *t, const int *perm, em_tensor **out);
/* Elements start, start+step, ... < stop of one axis (negative start/stop count
 * from the end, as in numpy; step >= 1). */
EM_API em_status em_tensor_slice(em_tensor *t, int axis, int64_t start, int64_t stop, int64_t step, em_tensor **out);
/* numpy broadcasting of t to `shape` (stride 0 along broadcast axes). */
EM_API em_status em_tensor_expand(em_tensor *t, int ndim, const int64_t *shape, em_tensor **out);
/* A contiguous copy (or t itself, retained, when already contiguous). */
EM_API em_status em_tensor_contiguous(em_tensor *t, em_tensor **out);
/* A copy on another device (contiguous). */
EM_API em_status em_tensor_to_device(const em_tensor *t, em_device dev, em_tensor **out);

/* "f32[2,3]" into buf. */
EM_API const char *em_tensor_describe(const em_tensor *t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
