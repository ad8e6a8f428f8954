/* Launches of the norm family's kernels (kernels/norm.cu) for the gpu members
 * in ops/norm.c: norm.c parses attributes and checks shapes as for the CPU and
 * calls these with plain geometry. Pointers are device memory on a->dev;
 * statistics are double arrays in device scratch. Each returns
 * EM_ERR_USE_CPU untouched when the device's plan for the module is the CPU. */
#ifndef EMBER_OPS_NORM_GPU_H
#define EMBER_OPS_NORM_GPU_H

#include <stdint.h>
#include "../engine/op.h"

/* x viewed as [n, c, inner]; batch norm pools per channel, instance norm per (n, c). */
typedef struct em_norm_gpu_nc {
  int64_t n, c, inner;
  int per_channel;
} em_norm_gpu_nc;

/* Statistics of one normalisation: mean, var, invstd per group (device doubles). */
typedef struct em_norm_gpu_stats {
  double *buf; /* one scratch block: mean, var, invstd */
  double *mean, *var, *invstd;
} em_norm_gpu_stats;

/* Batch statistics of x (mean, biased variance, 1/sqrt(var + eps)) per group. */
em_status em_norm_gpu_batch_stats(const em_op_args *a, int f64, const void *x, const em_norm_gpu_nc *g, double eps,
                                  em_norm_gpu_stats *st);
/* Batch norm inference: the running statistics as doubles. */
em_status em_norm_gpu_running_stats(const em_op_args *a, int f64, const void *rmean, const void *rvar, int64_t c,
                                    double eps, em_norm_gpu_stats *st);
void em_norm_gpu_stats_free(const em_op_args *a, em_norm_gpu_stats *st);

em_status em_norm_gpu_nc_apply(const em_op_args *a, int f64, const void *x, void *y, const em_norm_gpu_nc *g,
                               const em_norm_gpu_stats *st, const void *scale, const void *bias);
em_status em_norm_gpu_bn_update(const em_op_args *a, int f64, void *rmean, void *rvar, const em_norm_gpu_stats *st,
                                int64_t c, double momentum, double unbias);
em_status em_norm_gpu_nc_backward(const em_op_args *a, int f64, const void *x, const void *scale, const void *dy,
                                  const em_norm_gpu_nc *g, const em_norm_gpu_stats *st, int through, void *dx,
                                  void *dscale, void *dbias);

em_status em_norm_gpu_ln(const em_op_args *a, int f64, const void *x, const void *scale, const void *bias, void *y,
                         int64_t rows, int64_t m, double eps);
em_status em_norm_gpu_ln_grad(const em_op_args *a, int f64, const void *x, const void *scale, const void *dy,
                              void *dx, void *dscale, void *dbias, int64_t rows, int64_t m, double eps);

em_status em_norm_gpu_lrn(const em_op_args *a, int f64, const void *x, void *y, int64_t n, int64_t c, int64_t inner,
                          int64_t half, double alpha_n, double bias, double beta);
em_status em_norm_gpu_lrn_grad(const em_op_args *a, int f64, const void *x, const void *dy, void *dx, int64_t n,
                               int64_t c, int64_t inner, int64_t half, double alpha_n, double bias, double beta);

/* Dropout with the key nm_dropout_key(seed, step, node), step read on the device from
 * a->step_dev (the executor's per-run copy; see op.h) or uploaded from a->step. */
em_status em_norm_gpu_dropout(const em_op_args *a, int f64, const void *x, void *y, int64_t n, uint64_t seed,
                              uint64_t node, uint64_t thr, double scale);

/* Batch normalisation through cuDNN in the fast mode (runtime/cudnn_norm_pool.c), where the device
 * may use it and cuDNN takes the problem: 1 when cuDNN ran it (*status: its result, the road
 * reported as "cuDNN <version>, batch normalization (...)"), 0 when Ember's kernels must run
 * (the road reported with the reason, except in portable mode, which never uses cuDNN).
 * Forward: inference from the running statistics, or training (y from the batch statistics, the
 * running ones updated in place with momentum's ONNX meaning). The gradient: training only,
 * through the batch statistics, which cuDNN recomputes from x. */
int em_norm_gpu_bn_cudnn(const em_op_args *a, int f64, const em_norm_gpu_nc *g, double eps, double momentum,
                         const void *x, void *y, const void *scale, const void *bias, void *rmean, void *rvar,
                         em_status *status);
int em_norm_gpu_bn_grad_cudnn(const em_op_args *a, int f64, const em_norm_gpu_nc *g, double eps, const void *x,
                              const void *scale, const void *dy, void *dx, void *dscale, void *dbias,
                              em_status *status);

#endif
