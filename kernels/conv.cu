/* The convolution family's kernels (ops/conv.c, launched by ops/conv_gpu.c):
 * convolution and convolution_transpose (1 to 3 spatial axes, groups,
 * depthwise, strides, dilations, pads) and their gradients, f32 and f64.
 *
 * Each kernel is an implicit GEMM with one thread per output element: the
 * element's whole sum runs in that thread in the order documented in
 * kernels/conv_math.h, which the CPU's portable mode follows element for
 * element, so the bits are the CPU's. No atomics, no shared partial sums: the
 * weight gradient gives each weight element a thread that loops over the
 * batch and the positions. Launch: 1-D grid-stride, any grid and block size.
 * The geometry arrives as 22 scalars (CM_GEOM_PARAMS). */
#include "em_kernel.h"
#include "conv_math.h"

#define CK_LOOP(count, stmt)                                                                    \
  do {                                                                                          \
    em_i64 total_ = (count), stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                            \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < total_; i += stride_) { stmt; } \
  } while (0)

#define CONV_KERNELS(T, S)                                                                                     \
  /* y [n, co, col...] = convolution of x [n, ci, img...] with w (+ bias [co] unless NULL). */                \
  EM_GLOBAL void em_conv_fwd_##S(const T *x, const T *w, const T *bias, T *y, CM_GEOM_PARAMS) {                \
    CM_GEOM_FROM_PARAMS(gm);                                                                                   \
    CK_LOOP(cm_fwd_count(&gm), y[i] = cm_fwd_##S(&gm, x, w, bias, i));                                         \
  }                                                                                                            \
                                                                                                               \
  /* dx [n, ci, img...] = the adjoint applied to dy [n, co, col...] (+ bias [ci] unless NULL). */              \
  EM_GLOBAL void em_conv_adj_##S(const T *dy, const T *w, const T *bias, T *dx, CM_GEOM_PARAMS) {              \
    CM_GEOM_FROM_PARAMS(gm);                                                                                   \
    CK_LOOP(cm_adj_count(&gm), dx[i] = cm_adj_##S(&gm, dy, w, bias, i));                                       \
  }                                                                                                            \
                                                                                                               \
  /* dw [co, ci/g, k...] from the image side img [n, ci, img...] and the column side col [n, co, col...]. */   \
  EM_GLOBAL void em_conv_wgrad_##S(const T *img, const T *col, T *dw, CM_GEOM_PARAMS) {                        \
    CM_GEOM_FROM_PARAMS(gm);                                                                                   \
    CK_LOOP(cm_wgrad_count(&gm), dw[i] = cm_wgrad_##S(&gm, img, col, i));                                      \
  }                                                                                                            \
                                                                                                               \
  /* db [ch] = dy [n, ch, P] summed over n and P. */                                                          \
  EM_GLOBAL void em_conv_bias_grad_##S(const T *dy, T *db, em_i64 n, em_i64 ch, em_i64 P) {                    \
    CK_LOOP(ch, db[i] = cm_bias_grad_##S(dy, n, ch, P, i));                                                    \
  }                                                                                                            \
                                                                                                               \
  /* y [n, ch, P] += bias [ch]: the bias of a convolution cuDNN computed (fast mode, ops/conv_gpu.c). */       \
  EM_GLOBAL void em_conv_add_bias_##S(T *y, const T *bias, em_i64 n, em_i64 ch, em_i64 P) {                    \
    CK_LOOP(n * ch * P, y[i] = y[i] + bias[(i / P) % ch]);                                                     \
  }

CONV_KERNELS(float, f32)
CONV_KERNELS(double, f64)
