/* Launches of the pooling family's kernels (kernels/pool.cu) for the gpu
 * members in ops/pool.c: pool.c resolves the geometry as for the CPU and
 * calls these with it (pm_geom, kernels/pool_math.h). Each returns
 * EM_ERR_USE_CPU untouched when the device's plan for the module is the CPU.
 * In the fast mode the window pools and their gradients go through cuDNN where the device
 * may use it and cuDNN expresses the geometry (no dilation, the same padding at both ends,
 * no ceil_mode window beyond cuDNN's output size); each reports its road (em_op_report_path).
 * Pointers are device memory on a->dev; `f64` picks the kernel's dtype. */
#ifndef EMBER_OPS_POOL_GPU_H
#define EMBER_OPS_POOL_GPU_H

#include <stdint.h>
#include "../engine/op.h"
#include "../kernels/pool_math.h"

em_status em_pool_gpu_max(const em_op_args *a, int f64, const pm_geom *gm, const void *x, void *y);
/* max_pool's gradient: each window's dy to its first maximum (argmax scratch on the device). */
em_status em_pool_gpu_max_grad(const em_op_args *a, int f64, const pm_geom *gm, const void *x, const void *dy,
                               void *dx);
em_status em_pool_gpu_avg(const em_op_args *a, int f64, const pm_geom *gm, int count_include_pad, const void *x,
                          void *y);
/* average_pool's gradient; x (the forward's input) is read only on cuDNN's road, whose backward
 * takes x and y. */
em_status em_pool_gpu_avg_grad(const em_op_args *a, int f64, const pm_geom *gm, int count_include_pad,
                               const void *x, const void *dy, void *dx);
/* Global pools over planes of size elements. */
em_status em_pool_gpu_global(const em_op_args *a, int f64, int is_max, int64_t planes, int64_t size, const void *x,
                             void *y);
em_status em_pool_gpu_global_grad(const em_op_args *a, int f64, int is_max, int64_t planes, int64_t size,
                                  const void *x, const void *dy, void *dx);

#endif
