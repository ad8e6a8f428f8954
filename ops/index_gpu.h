/* Launches of kernels/index.cu for ops/index.c's gpu members. Each returns
 * EM_ERR_USE_CPU when the device's plan for the module is the CPU. The ops
 * that read indices first run em_index_check over them: an index out of
 * range fails the run with ops/index.c's message (em_index_fail), deferred
 * to the next synchronisation where the device has a status record
 * (runtime/devcheck.h); the kernels then skip that tuple. dtype: f32 f64 i32
 * i64 (the gradients f32 f64); indices i32 (idx64 0) or i64. */
#ifndef EMBER_OPS_INDEX_GPU_H
#define EMBER_OPS_INDEX_GPU_H

#include <stdint.h>

#include "../engine/op.h"

/* Where the indices' bounds come from, for em_index_fail: the data-shaped
 * input data_in, axes first_axis + (position % k). */
typedef struct em_index_bounds {
  int data_in, first_axis, k;
} em_index_bounds;

/* ops/index.c: the op's error for index `value` at flat position `pos` of
 * its indices (input 1). */
em_status em_index_fail(const em_op_args *a, const em_index_bounds *b, int64_t value, int64_t pos);

/* em_index_check over n indices (device memory) that all address axis
 * b->first_axis of input b->data_in (b->k 1), as gather's do: one outside
 * [-size, size) fails the run with em_index_fail's message, as above. For
 * ops of other families (ops/shape.c's gather). */
em_status em_index_gpu_check_axis(const em_op_args *a, const void *idx, int idx64, int64_t n, const em_index_bounds *b);

em_status em_index_gpu_cumsum(const em_op_args *a, em_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                              int64_t inner, int exclusive, int reverse);

/* The tuples of gather_nd / scatter_nd: m tuples of k indices into axes of
 * sizes dims[0..k-1] (k <= EM_MAX_DIMS), per_batch tuples in each batch of
 * batch_rows data rows of sz elements each. */
typedef struct em_index_tuples {
  const void *idx;
  int idx64;
  int64_t m, k, dims[EM_MAX_DIMS], per_batch, batch_rows, sz;
  em_index_bounds b;
} em_index_tuples;

/* dst [m, sz] = the rows; last_only (scatter_nd's gradient for reduction
 * none): zero for a tuple a later one overwrites. */
em_status em_index_gpu_gather_rows(const em_op_args *a, em_dtype t, const em_index_tuples *tu, void *dst,
                                   const void *src, int last_only);
/* gather_nd's gradient: dx [nrows, sz] sums dy's rows in tuple order. */
em_status em_index_gpu_gather_rows_grad(const em_op_args *a, em_dtype t, const em_index_tuples *tu, void *dx,
                                        const void *dy, int64_t nrows);
/* scatter_nd: out [nrows, sz] = data combined with upd's rows in tuple order. */
em_status em_index_gpu_scatter_rows(const em_op_args *a, em_dtype t, const em_index_tuples *tu, void *out,
                                    const void *data, const void *upd, int64_t nrows, int red);

/* scatter_elements over data of dims ddims and indices (= updates) of dims
 * edims, rank r, along axis. */
typedef struct em_index_elements {
  const void *idx;
  int idx64, rank, axis;
  int64_t ddims[EM_MAX_DIMS], edims[EM_MAX_DIMS];
} em_index_elements;

em_status em_index_gpu_scatter_elements(const em_op_args *a, em_dtype t, const em_index_elements *e, void *out,
                                        const void *data, const void *upd, int red);
/* Its gradient for the updates: dy at each update's target (last_only: 0
 * for an update a later one on its line overwrites). */
em_status em_index_gpu_scatter_elements_grad(const em_op_args *a, em_dtype t, const em_index_elements *e, void *dupd,
                                             const void *dy, int last_only);

#endif
