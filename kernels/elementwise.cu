/* Elementwise kernels. Launch: 1-D grid-stride, any grid and block size.
 * CPU twins: ops/primitives.c. */
#include "em_kernel.h"

/* y[i] = value */
EM_GLOBAL void em_fill_f32(float *y, float value, em_i64 n) {
  em_i64 stride = (em_i64)EM_BDIM_X * EM_GDIM_X;
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += stride) y[i] = value;
}

/* y[i] = a * x[i] + y[i]. The product is rounded before the add: every build
 * of this file disables FMA contraction, so the CPU twin gets the same bits. */
EM_GLOBAL void em_axpy_f32(float a, const float *x, float *y, em_i64 n) {
  em_i64 stride = (em_i64)EM_BDIM_X * EM_GDIM_X;
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += stride) {
    float p = a * x[i];
    y[i] = p + y[i];
  }
}
