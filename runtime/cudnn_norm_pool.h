/* Batch normalisation and window pooling through cuDNN's legacy API for the fast mode
 * (cudnn_norm_pool.c), beside the convolutions of cudnn.c, on the same library and per-device
 * handle. The ops' glue (ops/norm_gpu.c, ops/pool_gpu.c) asks em_cudnn_usable for the device,
 * then the *_takes rule here for the problem, and reports the road either way; portable mode
 * never comes here. Pointers are device memory; f32 and f64 only. */
#ifndef EMBER_RUNTIME_CUDNN_NORM_POOL_H
#define EMBER_RUNTIME_CUDNN_NORM_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "ember/runtime.h"
#include "ember/tensor.h"

/* CUDNN_BN_MIN_EPSILON of cudnn_ops_v9.h (and cuDNN 8's cudnn_ops_infer.h): 0.0. cuDNN 7 had
 * 1e-5; Ember loads 8.9 and 9.x only. */
#define EM_CUDNN_BN_MIN_EPSILON 0.0

/* x [n, c, inner] in NCHW memory: batch_normalization's x [N, C, spatial...] with its spatial
 * axes as one (spatial mode's statistics per channel over n and every position do not depend on
 * how the positions are shaped), handed to cuDNN as 4-D [n, c, inner, 1]. */
typedef struct em_cudnn_bn {
  em_dtype dt;   /* EM_F32 or EM_F64 (parameters and statistics of the same type) */
  int64_t n, c, inner;
  double eps;
} em_cudnn_bn;

/* Whether cuDNN takes it: 1, or 0 and why (a dtype other than f32 / f64, an empty tensor, more
 * than 2^31 - 1 elements, epsilon below CUDNN_BN_MIN_EPSILON). */
int em_cudnn_bn_takes(const em_cudnn_bn *g, char *why, size_t cap);

/* cudnnBatchNormalizationForwardInference: y = scale (x - mean) / sqrt(var + eps) + bias. */
em_status em_cudnn_bn_inference(em_device dev, em_stream *s, const em_cudnn_bn *g, const void *x, void *y,
                                const void *scale, const void *bias, const void *mean, const void *var);
/* cudnnBatchNormalizationForwardTraining: y from the batch mean and biased variance; the running
 * statistics updated in place with cuDNN's exponentialAverageFactor `factor` (running = (1 -
 * factor) running + factor batch; the variance's batch term unbiased, m / (m - 1)). */
em_status em_cudnn_bn_training(em_device dev, em_stream *s, const em_cudnn_bn *g, double factor, const void *x,
                               void *y, const void *scale, const void *bias, void *running_mean, void *running_var);
/* cudnnBatchNormalizationBackward through the batch statistics, which cuDNN recomputes from x
 * (savedMean and savedInvVariance NULL): dx, dscale, dbias overwritten. */
em_status em_cudnn_bn_backward(em_device dev, em_stream *s, const em_cudnn_bn *g, const void *x, const void *dy,
                               const void *scale, void *dx, void *dscale, void *dbias);

typedef enum em_cudnn_pool_mode {
  EM_CUDNN_POOL_MAX = 0,          /* CUDNN_POOLING_MAX_DETERMINISTIC, NaNs propagated */
  EM_CUDNN_POOL_AVG_INCLUDE = 1,  /* CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING */
  EM_CUDNN_POOL_AVG_EXCLUDE = 2,  /* CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING */
} em_cudnn_pool_mode;

/* A window pool in NCHW (NCDHW) memory, 1 to 3 spatial axes; pb / pe: padding at the
 * beginning and end of each axis, dil: dilation (cuDNN's pooling has neither asymmetric
 * padding nor dilation: *_takes says so). */
typedef struct em_cudnn_pool {
  em_dtype dt;
  em_cudnn_pool_mode mode;
  int nd;
  int64_t n, c;
  int64_t img[3], out[3], k[3], stride[3], dil[3], pb[3], pe[3];
} em_cudnn_pool;

/* Whether cuDNN's pooling descriptor expresses it: 1, or 0 and why. */
int em_cudnn_pool_takes(const em_cudnn_pool *g, char *why, size_t cap);

/* cudnnPoolingForward: y overwritten. */
em_status em_cudnn_pool_forward(em_device dev, em_stream *s, const em_cudnn_pool *g, const void *x, void *y);
/* cudnnPoolingBackward: dx overwritten. It takes the forward's y, which Ember's gradient ops do
 * not have: y is computed again by cudnnPoolingForward into the scratch y_scratch (room for y),
 * on the same stream, so the backward compares x with the very values cuDNN's forward gives. */
em_status em_cudnn_pool_backward(em_device dev, em_stream *s, const em_cudnn_pool *g, const void *x, const void *dy,
                                 void *y_scratch, void *dx);

/* "MAX_DETERMINISTIC", "AVERAGE_COUNT_INCLUDE_PADDING", ... for reports. */
const char *em_cudnn_pool_mode_name(em_cudnn_pool_mode m);

#endif
