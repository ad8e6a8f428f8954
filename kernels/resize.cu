/* The resize family's kernels (ops/resize.c, launched by ops/resize_gpu.c):
 * resize and its gradient _resize_grad, f32 and f64.
 *
 * Both read the tap table that the host builds (kernels/resize_math.h) and
 * run resize_math.h's loops, as the CPU does: one thread per output element
 * for the forward, one thread per input element for the gradient, which
 * gathers its contributions in a fixed order (no atomics), so the bits are
 * the CPU's. Launch: 1-D grid-stride, any grid and block size. */
#include "em_kernel.h"
#include "resize_math.h"

#define RK_LOOP(count, stmt)                                                                    \
  do {                                                                                          \
    em_i64 total_ = (count), stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                            \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < total_; i += stride_) { stmt; } \
  } while (0)

/* y[i] = the resized x at output element i (n outputs). */
EM_GLOBAL void em_resize_fwd_f32(const float *x, float *y, const em_i64 *t, const double *w, em_i64 n, double extrap) {
  RK_LOOP(n, y[i] = (float)rz_gather_d(t, w, x, 0, i, extrap));
}

EM_GLOBAL void em_resize_fwd_f64(const double *x, double *y, const em_i64 *t, const double *w, em_i64 n,
                                 double extrap) {
  RK_LOOP(n, y[i] = rz_gather_d(t, w, 0, x, i, extrap));
}

/* dx[i] = the gradient of input element i from dy (n inputs). */
EM_GLOBAL void em_resize_grad_f32(const float *dy, float *dx, const em_i64 *t, const double *w, em_i64 n) {
  RK_LOOP(n, dx[i] = (float)rz_grad_d(t, w, dy, 0, i));
}

EM_GLOBAL void em_resize_grad_f64(const double *dy, double *dx, const em_i64 *t, const double *w, em_i64 n) {
  RK_LOOP(n, dx[i] = rz_grad_d(t, w, 0, dy, i));
}
