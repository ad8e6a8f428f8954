/* Launches of the loss family's kernels (kernels/loss.cu), for the gpu
 * members in ops/loss.c: loss.c works out shapes, labels and errors as for
 * the CPU and calls these with plain geometry. Each returns EM_ERR_USE_CPU
 * untouched when the device's plan for the module is the CPU. Pointers are
 * device memory on a->dev; `f64` picks the kernel's dtype. */
#ifndef EMBER_OPS_LOSS_GPU_H
#define EMBER_OPS_LOSS_GPU_H

#include <stdint.h>
#include "../engine/op.h"

/* Sparse labels of a classification loss on the device. */
typedef struct em_loss_gpu_labels {
  const void *data;   /* dense: the logits' dtype; sparse: i32 or i64 */
  int sparse, is64, has_ignore;
  int64_t ignore;
} em_loss_gpu_labels;

em_status em_loss_gpu_softmax(const em_op_args *a, int f64, const void *x, void *y, int64_t n_rows, int64_t c,
                              int64_t inner, int log_out);
em_status em_loss_gpu_softmax_grad(const em_op_args *a, int f64, const void *y, const void *dy, void *dx,
                                   int64_t n_rows, int64_t c, int64_t inner, int log_out);
em_status em_loss_gpu_ce(const em_op_args *a, int f64, const void *x, const em_loss_gpu_labels *t, void *out,
                         int64_t n_rows, int64_t c, int64_t inner);
em_status em_loss_gpu_ce_grad(const em_op_args *a, int f64, const void *x, const em_loss_gpu_labels *t,
                              const void *dy, void *d, int64_t n_rows, int64_t c, int64_t inner, int which);
em_status em_loss_gpu_clserr(const em_op_args *a, int f64, const void *x, const em_loss_gpu_labels *t, void *out,
                             int64_t n_rows, int64_t c, int64_t inner, int64_t top);
em_status em_loss_gpu_bce(const em_op_args *a, int f64, const void *p, const void *t, void *y, int64_t n);
em_status em_loss_gpu_bce_grad(const em_op_args *a, int f64, const void *p, const void *t, const void *dy, void *d,
                               int64_t n, int which);
em_status em_loss_gpu_sqerr(const em_op_args *a, int f64, const void *x, const void *y, void *out, int64_t n,
                            int64_t per);
em_status em_loss_gpu_sqerr_grad(const em_op_args *a, int f64, const void *x, const void *y, const void *dy, void *d,
                                 int64_t total, int64_t per, double sign);

/* Run-time checks, read back to the host (they wait for the stream): *bad is
 * the first offending position (-1: none) and *value what is there. */
em_status em_loss_gpu_check_labels(const em_op_args *a, const em_loss_gpu_labels *t, int64_t n, int64_t c,
                                   int64_t *bad, int64_t *value);
em_status em_loss_gpu_check_prob(const em_op_args *a, int f64, const void *p, int64_t n, int64_t *bad,
                                 double *value);

#endif
