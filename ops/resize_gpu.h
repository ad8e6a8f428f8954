/* Launches of the resize family's kernels (kernels/resize.cu) for the gpu
 * members in ops/resize.c: resize.c builds the tap table (t, w: len entries
 * each, kernels/resize_math.h) as for the CPU and calls these with it; they
 * upload it and launch. Each returns EM_ERR_USE_CPU untouched when the
 * device's plan for the module is the CPU. x, y, dy, dx are device memory
 * on a->dev; `f64` picks the kernel's dtype. The host table stays the
 * caller's. */
#ifndef EMBER_OPS_RESIZE_GPU_H
#define EMBER_OPS_RESIZE_GPU_H

#include <stdint.h>
#include "../engine/op.h"

/* y (n elements) = resize of x. */
em_status em_resize_gpu_fwd(const em_op_args *a, int f64, const long long *t, const double *w, int64_t len,
                            double extrap, const void *x, void *y, int64_t n);
/* dx (n elements) = the gradient gathered from dy. */
em_status em_resize_gpu_grad(const em_op_args *a, int f64, const long long *t, const double *w, int64_t len,
                             const void *dy, void *dx, int64_t n);

#endif
