/* Launches of the convolution family's kernels (kernels/conv.cu) for the gpu
 * members in ops/conv.c: conv.c resolves the geometry as for the CPU and
 * calls these with it (cm_geom, kernels/conv_math.h). Each returns
 * EM_ERR_USE_CPU untouched when the device's plan for the module is the CPU.
 * Pointers are device memory on a->dev; `dt` is the tensors' dtype: f32 or
 * f64, or f16 / bf16 where em_conv_gpu_half_takes said cuDNN takes them
 * (Ember's kernels have no half form). */
#ifndef EMBER_OPS_CONV_GPU_H
#define EMBER_OPS_CONV_GPU_H

#include <stdint.h>
#include "../engine/op.h"
#include "../kernels/conv_math.h"

/* For the gpu members of EM_HALF_GPU_NATIVE ops, on f16 or bf16 tensors: 1 when cuDNN takes
 * the computation as it is (fast mode, the device has tensor cores for the dtype, cuDNN takes
 * the geometry), else 0 and why, and the member computes on f32 copies (em_ops_half_via_f32),
 * as portable mode always does. */
int em_conv_gpu_half_takes(const em_op_args *a, const cm_geom *gm, char *why, size_t cap);

/* image -> column: y = conv(x, w) (+ bias [co] unless NULL). */
em_status em_conv_gpu_fwd(const em_op_args *a, em_dtype dt, const cm_geom *gm, const void *x, const void *w,
                          const void *bias, void *y);
/* column -> image: dx = adjoint(dy, w) (+ bias [ci] unless NULL). */
em_status em_conv_gpu_adj(const em_op_args *a, em_dtype dt, const cm_geom *gm, const void *dy, const void *w,
                          const void *bias, void *dx);
/* dw from the image side and the column side. */
em_status em_conv_gpu_wgrad(const em_op_args *a, em_dtype dt, const cm_geom *gm, const void *img, const void *col,
                            void *dw);
/* db [ch] = dy [n, ch, P] summed over n and P. */
em_status em_conv_gpu_bias_grad(const em_op_args *a, em_dtype dt, const void *dy, int64_t n, int64_t ch, int64_t P,
                                void *db);

#endif
