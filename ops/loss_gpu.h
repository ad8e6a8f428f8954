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

/* Run-time checks of values (runtime/devcheck.h): a one-block kernel looks
 * for the first bad element. Where the device maps host memory the check
 * reports into the device's status record and returns EM_OK at once: the
 * failure surfaces at the next synchronisation (a value read back,
 * em_stream_sync, the executor's next run) as the error `fail` builds, with
 * the node and run prefixed. Elsewhere the result is copied back and
 * waited for, and `fail`'s error returned here. `fail` gets a copy of a's
 * op, node, step and input shapes only (no attributes, no device). */
typedef em_status (*em_loss_gpu_label_fail)(const em_op_args *a, int64_t label, int64_t position, int64_t c);
typedef em_status (*em_loss_gpu_prob_fail)(const em_op_args *a, double p, int64_t position);

/* Sparse labels must lie in [0, c) (ignore_index excepted). */
em_status em_loss_gpu_check_labels(const em_op_args *a, const em_loss_gpu_labels *t, int64_t n, int64_t c,
                                   em_loss_gpu_label_fail fail);
/* p must lie in [0, 1] (NaN passes). */
em_status em_loss_gpu_check_prob(const em_op_args *a, int f64, const void *p, int64_t n, em_loss_gpu_prob_fail fail);

#endif
