/* Between the shape family's ops (ops/shape.c: attributes, shapes and the
 * geometry of each op, shared by its cpu and gpu members) and their kernel
 * launches (ops/shape_gpu.c, kernels/shape.cu). Every launcher runs on
 * a->dev and a->stream and returns EM_ERR_USE_CPU, untouched, when the
 * device's plan for kernels/shape.cu is the CPU. Pointers are device memory;
 * strides and sizes count elements. */
#ifndef EMBER_OPS_SHAPE_GPU_H
#define EMBER_OPS_SHAPE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "op.h"

/* Axes of an internal copy view: tile and depth_to_space need up to 2 * EM_MAX_DIMS. */
#define EM_SHAPE_MAXV 16

/* dst[sum i_k*ds_k] = src[sum i_k*ss_k] over an index box. */
typedef struct em_shape_view {
  int nd;
  int64_t dims[EM_SHAPE_MAXV], ds[EM_SHAPE_MAXV], ss[EM_SHAPE_MAXV];
} em_shape_view;

/* ops/shape.c: drops size-1 axes, orders axes by decreasing |dst stride| and
 * merges neighbours contiguous on both sides. 0 for an empty box. */
int em_shape_view_simplify(em_shape_view *v, int nd, const int64_t *dims, const int64_t *ds, const int64_t *ss);

/* The strided copy above, es bytes per element (1, 2, 4 or 8); any number of
 * axes (more than 6 after merging: one launch per index of the outer ones). */
em_status em_shape_gpu_copy(const em_op_args *a, void *dst, const void *src, int nd, const int64_t *dims,
                            const int64_t *ds, const int64_t *ss, size_t es);
/* n elements of es bytes, each the bytes val[0..es). */
em_status em_shape_gpu_fill(const em_op_args *a, void *dst, int64_t n, size_t es, const unsigned char *val);
/* cast of n elements (kernels/shape_math.h's rules). */
em_status em_shape_gpu_cast(const em_op_args *a, const void *x, em_dtype from, void *y, em_dtype to, int64_t n);
/* pad of x (nd axes, sizes xd) into y (sizes yd), begin pads pb, mode
 * EM_SHAPE_PAD_*, constant val. */
em_status em_shape_gpu_pad(const em_op_args *a, void *y, const void *x, int nd, const int64_t *xd, const int64_t *yd,
                           const int64_t *pb, int mode, size_t es, const unsigned char *val);
/* pad's gradient (f32/f64 t): dx (sizes xd) from dy (sizes yd). */
em_status em_shape_gpu_pad_grad(const em_op_args *a, void *dx, const void *dy, em_dtype t, int nd, const int64_t *xd,
                                const int64_t *yd, const int64_t *pb, int mode);
/* gather: y [outer, m, inner] from data [outer, n, inner], indices of dtype it. */
em_status em_shape_gpu_gather(const em_op_args *a, void *y, const void *data, const void *idx, em_dtype it,
                              int64_t outer, int64_t n, int64_t m, int64_t inner, size_t es);
/* gather's gradient (f32/f64 t): dx [outer, n, inner] from dy [outer, m, inner]. */
em_status em_shape_gpu_gather_grad(const em_op_args *a, void *dx, const void *dy, const void *idx, em_dtype it,
                                   em_dtype t, int64_t outer, int64_t n, int64_t m, int64_t inner);
/* one_hot: y [outer, depth, inner] from indices [outer, inner]. */
em_status em_shape_gpu_one_hot(const em_op_args *a, void *y, const void *idx, em_dtype it, int64_t outer,
                               int64_t depth, int64_t inner, size_t es, const unsigned char *on,
                               const unsigned char *off);
/* top_k of x [outer, n, inner] (dtype t): vals and inds [outer, k, inner]. */
em_status em_shape_gpu_top_k(const em_op_args *a, const void *x, em_dtype t, int64_t outer, int64_t n, int64_t inner,
                             int64_t k, int largest, void *vals, int64_t *inds);
/* top_k's gradient: dx [outer, n, inner] from dy and idx [outer, k, inner]. */
em_status em_shape_gpu_top_k_grad(const em_op_args *a, void *dx, const void *dy, const void *idx, em_dtype it,
                                  size_t es, int64_t outer, int64_t n, int64_t k, int64_t inner);
/* tile's gradient (f32/f64 t): dx (nd axes, sizes xd) from dy (sizes xd * reps). */
em_status em_shape_gpu_tile_grad(const em_op_args *a, void *dx, const void *dy, em_dtype t, int nd,
                                 const int64_t *xd, const int64_t *reps);

#endif
