/* Launches of kernels/resize.cu for ops/resize.c's gpu members (resize_gpu.h). */
#include "resize_gpu.h"

#include "ember.h"
#include "gpu_glue.h"

/* Uploads the table (t, w) and launches `kernel` over n elements with args, whose [2] and [3]
 * receive the table's device addresses; the scratch goes back once the launch is queued (the
 * copies and the launch share the executor's stream). The taps and weights follow from the
 * attributes and the input and output shapes only (resize.c's run_setup), so under a CUDA
 * graph the staged copy a replay repeats (em_ops_scratch_upload) holds the right table. */
static em_status launch_with_table(const em_op_args *a, const char *kernel, const long long *t, const double *w,
                                   int64_t len, int64_t n, void **args) {
  if (n <= 0) return EM_OK;
  em_status s = em_ops_kernel_ready(a, kernel); /* no copy for a launch that will not happen */
  void *dt = NULL, *dw = NULL;
  if (!s) s = em_ops_scratch_upload(a, t, sizeof *t * (size_t)len, &dt);
  if (!s) s = em_ops_scratch_upload(a, w, sizeof *w * (size_t)len, &dw);
  if (!s) {
    *(void **)args[2] = dt;
    *(void **)args[3] = dw;
    s = em_ops_launch_1d(a, kernel, (size_t)n, args);
  }
  if (dt) em_ops_scratch_free(a, dt);
  if (dw) em_ops_scratch_free(a, dw);
  return s;
}

em_status em_resize_gpu_fwd(const em_op_args *a, int f64, const long long *t, const double *w, int64_t len,
                            double extrap, const void *x, void *y, int64_t n) {
  void *dt = NULL, *dw = NULL;
  long long nn = n;
  void *args[] = {&x, &y, &dt, &dw, &nn, &extrap};
  return launch_with_table(a, f64 ? "em_resize_fwd_f64" : "em_resize_fwd_f32", t, w, len, n, args);
}

em_status em_resize_gpu_grad(const em_op_args *a, int f64, const long long *t, const double *w, int64_t len,
                             const void *dy, void *dx, int64_t n) {
  void *dt = NULL, *dw = NULL;
  long long nn = n;
  void *args[] = {&dy, &dx, &dt, &dw, &nn};
  return launch_with_table(a, f64 ? "em_resize_grad_f64" : "em_resize_grad_f32", t, w, len, n, args);
}
