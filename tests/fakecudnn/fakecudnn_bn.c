/* Batch normalisation of the fake libcudnn (forward training, forward
 * inference, backward; spatial and per-activation modes) and the two tensor
 * helpers cudnnSetTensor and cudnnAddTensor, run as work on the handle's
 * stream.
 *
 * Formulas (Ioffe and Szegedy, as cudnn_ops_v9.h's comments give them), for
 * each channel (spatial modes: over n and the positions) or each
 * channel-position (per activation: over n), m values:
 *   mean = sum x / m; var = sum (x - mean)^2 / m (biased);
 *   inv = 1 / sqrt(var + epsilon); y = scale (x - mean) inv + bias;
 *   running_mean = (1 - f) running_mean + f mean;
 *   running_var = (1 - f) running_var + f var m / (m - 1) (unbiased [S]:
 *   PyTorch's and CNTK's use of cuDNN, ops/norm.c);
 *   saved mean = mean, saved inverse variance = inv.
 * Backward: xhat = (x - mean) inv; dbias = sum dy; dscale = sum dy xhat;
 *   dx = scale inv / m (m dy - dbias - xhat dscale).
 * Sums run in order over the group's elements, in f32 for f32, f16 and bf16
 * data and f64 for f64 (the parameters' type). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_work.h"

enum { BN_TRAIN, BN_INFER, BN_BACKWARD };

typedef struct bn_work {
  fd_work hdr;
  int kind, spatial;
  fd_view x, y, dy, dx;           /* y is the output of the forward kinds */
  fd_view scale, bias, mean, var; /* bias/mean/var: by kind (see bn_run) */
  fd_view save_mean, save_inv, dscale, dbias;
  int has_running, has_saved;
  double factor, epsilon;
  double alpha, beta, alpha_p, beta_p;
  int compute;
} bn_work;

/* ------------------------------------------------------------ slices --- */

/* The elements of v that share parameter element p (index [0, c, sp...]):
 * the same view with one channel (and, per activation, one position),
 * starting there. */
static fd_view slice(const fd_view *v, const int64_t *p, int spatial) {
  fd_view s = *v;
  int64_t off = p[1] * v->strides[1];
  s.dims[1] = 1;
  for (int i = 2; i < v->nd; i++)
    if (!spatial) {
      off += p[i] * v->strides[i];
      s.dims[i] = 1;
    }
  s.host = (unsigned char *)v->host + (size_t)off * fd_dtype_size(v->dtype);
  return s;
}

static double rnd(const bn_work *bw, double v) { return fd_round_to(bw->compute, v); }

static double sum_of(const bn_work *bw, const fd_view *s) {
  int64_t idx[FD_DIM_MAX] = {0};
  double acc = 0.0;
  do acc = rnd(bw, acc + fd_load(s, fd_view_offset(s, idx)));
  while (fd_next_index(s, idx));
  return acc;
}

static double squares_about(const bn_work *bw, const fd_view *s, double mean) {
  int64_t idx[FD_DIM_MAX] = {0};
  double acc = 0.0;
  do {
    double d = rnd(bw, fd_load(s, fd_view_offset(s, idx)) - mean);
    acc = rnd(bw, acc + rnd(bw, d * d));
  } while (fd_next_index(s, idx));
  return acc;
}

/* ------------------------------------------------------------ forward --- */

/* y = scale (x - mean) inv + bias, blended, over one slice. */
static void normalise(const bn_work *bw, const fd_view *xs, const fd_view *ys, double mean, double inv, double scale,
                      double bias) {
  int64_t idx[FD_DIM_MAX] = {0};
  do {
    double x = fd_load(xs, fd_view_offset(xs, idx));
    double v = rnd(bw, rnd(bw, rnd(bw, scale * rnd(bw, x - mean)) * inv) + bias);
    int64_t off = fd_view_offset(ys, idx);
    fd_store(ys, off, fd_blend(bw->compute, bw->alpha, v, bw->beta, ys, off));
  } while (fd_next_index(ys, idx));
}

static void train_one(const bn_work *bw, const int64_t *p) {
  fd_view xs = slice(&bw->x, p, bw->spatial), ys = slice(&bw->y, p, bw->spatial);
  int64_t m = fd_view_count(&xs), po = fd_view_offset(&bw->scale, p);
  double mean = rnd(bw, sum_of(bw, &xs) / (double)m);
  double var = rnd(bw, squares_about(bw, &xs, mean) / (double)m);
  double inv = rnd(bw, 1.0 / rnd(bw, sqrt(rnd(bw, var + bw->epsilon))));
  normalise(bw, &xs, &ys, mean, inv, fd_load(&bw->scale, po), fd_load(&bw->bias, po));
  if (bw->has_running) {
    double f = bw->factor, unbiased = rnd(bw, var * (double)m / (double)(m - 1));
    fd_store(&bw->mean, po, rnd(bw, rnd(bw, (1.0 - f) * fd_load(&bw->mean, po)) + rnd(bw, f * mean)));
    fd_store(&bw->var, po, rnd(bw, rnd(bw, (1.0 - f) * fd_load(&bw->var, po)) + rnd(bw, f * unbiased)));
  }
  if (bw->has_saved) {
    fd_store(&bw->save_mean, po, mean);
    fd_store(&bw->save_inv, po, inv);
  }
}

static void infer_one(const bn_work *bw, const int64_t *p) {
  fd_view xs = slice(&bw->x, p, bw->spatial), ys = slice(&bw->y, p, bw->spatial);
  int64_t po = fd_view_offset(&bw->scale, p);
  double inv = rnd(bw, 1.0 / rnd(bw, sqrt(rnd(bw, fd_load(&bw->var, po) + bw->epsilon))));
  normalise(bw, &xs, &ys, fd_load(&bw->mean, po), inv, fd_load(&bw->scale, po), fd_load(&bw->bias, po));
}

/* ----------------------------------------------------------- backward --- */

static void backward_one(const bn_work *bw, const int64_t *p) {
  fd_view xs = slice(&bw->x, p, bw->spatial), dys = slice(&bw->dy, p, bw->spatial), dxs = slice(&bw->dx, p, bw->spatial);
  int64_t m = fd_view_count(&xs), po = fd_view_offset(&bw->scale, p), idx[FD_DIM_MAX] = {0};
  double mean, inv;
  if (bw->has_saved) {
    mean = fd_load(&bw->save_mean, po);
    inv = fd_load(&bw->save_inv, po);
  } else {
    mean = rnd(bw, sum_of(bw, &xs) / (double)m);
    inv = rnd(bw, 1.0 / rnd(bw, sqrt(rnd(bw, rnd(bw, squares_about(bw, &xs, mean) / (double)m) + bw->epsilon))));
  }
  double dbias = 0.0, dscale = 0.0;
  do {
    double dy = fd_load(&dys, fd_view_offset(&dys, idx));
    double xhat = rnd(bw, rnd(bw, fd_load(&xs, fd_view_offset(&xs, idx)) - mean) * inv);
    dbias = rnd(bw, dbias + dy);
    dscale = rnd(bw, dscale + rnd(bw, dy * xhat));
  } while (fd_next_index(&xs, idx));
  double k = rnd(bw, rnd(bw, fd_load(&bw->scale, po) * inv) / (double)m);
  memset(idx, 0, sizeof idx);
  do {
    double dy = fd_load(&dys, fd_view_offset(&dys, idx));
    double xhat = rnd(bw, rnd(bw, fd_load(&xs, fd_view_offset(&xs, idx)) - mean) * inv);
    double v = rnd(bw, k * rnd(bw, rnd(bw, rnd(bw, (double)m * dy) - dbias) - rnd(bw, xhat * dscale)));
    int64_t off = fd_view_offset(&dxs, idx);
    fd_store(&dxs, off, fd_blend(bw->compute, bw->alpha, v, bw->beta, &dxs, off));
  } while (fd_next_index(&xs, idx));
  fd_store(&bw->dscale, po, fd_blend(bw->compute, bw->alpha_p, dscale, bw->beta_p, &bw->dscale, po));
  fd_store(&bw->dbias, po, fd_blend(bw->compute, bw->alpha_p, dbias, bw->beta_p, &bw->dbias, po));
}

/* ---------------------------------------------------------------- run --- */

static CUresult span_all(bn_work *bw, char *msg, size_t cap) {
  struct {
    fd_view *v;
    const char *name;
    int used;
  } ops[] = {
      {&bw->x, "x", 1},
      {&bw->y, "y", bw->kind != BN_BACKWARD},
      {&bw->dy, "dy", bw->kind == BN_BACKWARD},
      {&bw->dx, "dx", bw->kind == BN_BACKWARD},
      {&bw->scale, "bnScale", 1},
      {&bw->bias, "bnBias", bw->kind != BN_BACKWARD},
      {&bw->mean, bw->kind == BN_INFER ? "estimatedMean" : "resultRunningMean",
       bw->kind == BN_INFER || (bw->kind == BN_TRAIN && bw->has_running)},
      {&bw->var, bw->kind == BN_INFER ? "estimatedVariance" : "resultRunningVariance",
       bw->kind == BN_INFER || (bw->kind == BN_TRAIN && bw->has_running)},
      {&bw->save_mean, "savedMean", bw->has_saved},
      {&bw->save_inv, "savedInvVariance", bw->has_saved},
      {&bw->dscale, "dBnScaleResult", bw->kind == BN_BACKWARD},
      {&bw->dbias, "dBnBiasResult", bw->kind == BN_BACKWARD},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (!ops[i].used) continue;
    CUresult r = fd_view_span(&bw->hdr, ops[i].v, ops[i].name, msg, cap);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

static CUresult bn_run(void *payload, char *msg, size_t cap) {
  bn_work *bw = payload;
  CUresult r = span_all(bw, msg, cap);
  if (r != CUDA_SUCCESS) return r;
  int64_t p[FD_DIM_MAX] = {0};
  do {
    if (bw->kind == BN_TRAIN) train_one(bw, p);
    else if (bw->kind == BN_INFER) infer_one(bw, p);
    else backward_one(bw, p);
  } while (fd_next_index(&bw->scale, p));
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------- checks --- */

static int same_shape(fd_tensor a, fd_tensor b) {
  if (a->nb != b->nb || a->dtype != b->dtype) return 0;
  for (int i = 0; i < a->nb; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* The references of the three calls: BAD_PARAM for x with other than 4 or 5
 * dimensions, x and y (dy, dx) of other shapes or types, a parameter
 * descriptor other than 1xCx1x1(x1) (spatial) or 1xCxHxW(xD) (per
 * activation), epsilon below CUDNN_BN_MIN_EPSILON (0.0 in 8.x and 9.x); its
 * type must be f64 for f64 data, else f32 (cudnn_ops_v9.h) [U: BAD_PARAM]. */
static cudnnStatus_t check_bn(const char *op, int mode, fd_tensor x, fd_tensor y, fd_tensor pd, double epsilon) {
  cudnnStatus_t s = fd_tensor_ready(x, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(y, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(pd, op);
  if (s != FD_SUCCESS) return s;
  if (mode < FD_BN_PER_ACTIVATION || mode > FD_BN_SPATIAL_PERSISTENT) return fd_refuse(FD_BAD_PARAM, "%s: mode %d", op, mode);
  if (x->nb != 4 && x->nb != 5) return fd_refuse(FD_BAD_PARAM, "%s: x has %d dimensions (4 or 5)", op, x->nb);
  if (!same_shape(x, y)) return fd_refuse(FD_BAD_PARAM, "%s: the data tensors differ in shape or type", op);
  if (!fd_dtype_size(x->dtype)) return fd_refuse(FD_NOT_SUPPORTED_DATA_TYPE, "%s: %s data", op, fd_dtype_name(x->dtype));
  if (fd_tensor_has_negative_stride(x) || fd_tensor_has_negative_stride(y)) return fd_refuse(FD_NOT_SUPPORTED, "%s: negative strides", op);
  int ok = pd->nb == x->nb && pd->dims[0] == 1 && pd->dims[1] == x->dims[1];
  for (int i = 2; ok && i < x->nb; i++) ok = pd->dims[i] == (mode == FD_BN_PER_ACTIVATION ? x->dims[i] : 1);
  if (!ok) return fd_refuse(FD_BAD_PARAM, "%s: the parameter descriptor is not what cudnnDeriveBNTensorDescriptor gives", op);
  if (pd->dtype != (x->dtype == FD_DOUBLE ? FD_DOUBLE : FD_FLOAT))
    return fd_refuse(FD_BAD_PARAM, "%s: %s parameters for %s data", op, fd_dtype_name(pd->dtype), fd_dtype_name(x->dtype));
  if (!(epsilon >= 0.0)) return fd_refuse(FD_BAD_PARAM, "%s: epsilon %g below CUDNN_BN_MIN_EPSILON (0.0)", op, epsilon);
  return FD_SUCCESS;
}

static bn_work *new_work(const char *op, int kind, int mode, fd_tensor x, const void *xp, fd_tensor pd, double epsilon) {
  bn_work *bw = fd_work_alloc(sizeof *bw, op);
  if (!bw) return NULL;
  bw->kind = kind;
  bw->spatial = mode != FD_BN_PER_ACTIVATION;
  bw->epsilon = epsilon;
  bw->compute = x->dtype == FD_DOUBLE ? FD_DOUBLE : FD_FLOAT;
  fd_view_of_tensor(&bw->x, x, xp);
  fd_view_of_tensor(&bw->scale, pd, NULL);
  /* Every parameter shares the descriptor: the same view, its own address. */
  bw->bias = bw->mean = bw->var = bw->save_mean = bw->save_inv = bw->dscale = bw->dbias = bw->scale;
  return bw;
}

static void set_ptr(fd_view *v, const void *p) { v->dptr = (CUdeviceptr)(uintptr_t)p; }

static cudnnStatus_t issue(fd_handle h, bn_work *bw, const char *op, fd_tensor x, int mode) {
  char xs[192];
  fd_tensor_text(x, xs, sizeof xs);
  cudnnStatus_t s = fd_issue(h, bn_run, &bw->hdr);
  if (s == FD_SUCCESS) fd_note_call("%s mode=%s x=%s", op, mode == FD_BN_PER_ACTIVATION ? "PER_ACTIVATION" : "SPATIAL", xs);
  return s;
}

typedef struct train_args {
  fd_handle h;
  int mode;
  const void *alpha, *beta;
  fd_tensor x;
  const void *xp;
  fd_tensor y;
  void *yp;
  fd_tensor pd;
  const void *scale, *bias;
  double factor;
  void *run_mean, *run_var;
  double epsilon;
  void *save_mean, *save_inv;
} train_args;

/* Also BAD_PARAM (its reference): exactly one of the running pointers, or
 * exactly one of the saved pointers, NULL. */
static cudnnStatus_t bn_train(const train_args *a) {
  const char *op = "cudnnBatchNormalizationForwardTraining";
  cudnnStatus_t s = fd_check_handle(a->h, op);
  if (s == FD_SUCCESS) s = check_bn(op, a->mode, a->x, a->y, a->pd, a->epsilon);
  if (s != FD_SUCCESS) return s;
  if (!a->alpha || !a->beta || !a->xp || !a->yp || !a->scale || !a->bias)
    return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: alpha, beta, x, y, bnScale or bnBias is NULL", op);
  if (!a->run_mean != !a->run_var) return fd_refuse(FD_BAD_PARAM, "%s: exactly one running pointer is NULL", op);
  if (!a->save_mean != !a->save_inv) return fd_refuse(FD_BAD_PARAM, "%s: exactly one saved pointer is NULL", op);
  bn_work *bw = new_work(op, BN_TRAIN, a->mode, a->x, a->xp, a->pd, a->epsilon);
  if (!bw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  fd_view_of_tensor(&bw->y, a->y, a->yp);
  set_ptr(&bw->scale, a->scale);
  set_ptr(&bw->bias, a->bias);
  set_ptr(&bw->mean, a->run_mean);
  set_ptr(&bw->var, a->run_var);
  set_ptr(&bw->save_mean, a->save_mean);
  set_ptr(&bw->save_inv, a->save_inv);
  bw->has_running = a->run_mean != NULL;
  bw->has_saved = a->save_mean != NULL;
  bw->factor = a->factor;
  fd_read_scalars(a->x->dtype, a->alpha, a->beta, &bw->alpha, &bw->beta);
  return issue(a->h, bw, op, a->x, a->mode);
}

static cudnnStatus_t bn_infer(fd_handle h, int mode, const void *alpha, const void *beta, fd_tensor x, const void *xp,
                              fd_tensor y, void *yp, fd_tensor pd, const void *scale, const void *bias, const void *mean,
                              const void *var, double epsilon) {
  const char *op = "cudnnBatchNormalizationForwardInference";
  cudnnStatus_t s = fd_check_handle(h, op);
  if (s == FD_SUCCESS) s = check_bn(op, mode, x, y, pd, epsilon);
  if (s != FD_SUCCESS) return s;
  if (!alpha || !beta || !xp || !yp || !scale || !bias || !mean || !var)
    return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: alpha, beta, x, y or a parameter is NULL", op);
  bn_work *bw = new_work(op, BN_INFER, mode, x, xp, pd, epsilon);
  if (!bw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  fd_view_of_tensor(&bw->y, y, yp);
  set_ptr(&bw->scale, scale);
  set_ptr(&bw->bias, bias);
  set_ptr(&bw->mean, mean);
  set_ptr(&bw->var, var);
  fd_read_scalars(x->dtype, alpha, beta, &bw->alpha, &bw->beta);
  return issue(h, bw, op, x, mode);
}

typedef struct back_args {
  fd_handle h;
  int mode;
  const void *alpha_d, *beta_d, *alpha_p, *beta_p;
  fd_tensor x;
  const void *xp;
  fd_tensor dy;
  const void *dyp;
  fd_tensor dx;
  void *dxp;
  fd_tensor pd;
  const void *scale;
  void *dscale, *dbias;
  double epsilon;
  const void *save_mean, *save_inv;
} back_args;

static cudnnStatus_t bn_backward(const back_args *a) {
  const char *op = "cudnnBatchNormalizationBackward";
  cudnnStatus_t s = fd_check_handle(a->h, op);
  if (s == FD_SUCCESS) s = check_bn(op, a->mode, a->x, a->dy, a->pd, a->epsilon);
  if (s == FD_SUCCESS) s = fd_tensor_ready(a->dx, op);
  if (s != FD_SUCCESS) return s;
  if (!same_shape(a->x, a->dx)) return fd_refuse(FD_BAD_PARAM, "%s: x and dx differ in shape or type", op);
  if (!a->alpha_d || !a->beta_d || !a->alpha_p || !a->beta_p || !a->xp || !a->dyp || !a->dxp || !a->scale || !a->dscale ||
      !a->dbias)
    return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: a scaling factor, x, dy, dx or a parameter pointer is NULL", op);
  if (!a->save_mean != !a->save_inv) return fd_refuse(FD_BAD_PARAM, "%s: exactly one saved pointer is NULL", op);
  bn_work *bw = new_work(op, BN_BACKWARD, a->mode, a->x, a->xp, a->pd, a->epsilon);
  if (!bw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  fd_view_of_tensor(&bw->dy, a->dy, a->dyp);
  fd_view_of_tensor(&bw->dx, a->dx, a->dxp);
  set_ptr(&bw->scale, a->scale);
  set_ptr(&bw->dscale, a->dscale);
  set_ptr(&bw->dbias, a->dbias);
  set_ptr(&bw->save_mean, a->save_mean);
  set_ptr(&bw->save_inv, a->save_inv);
  bw->has_saved = a->save_mean != NULL;
  fd_read_scalars(a->x->dtype, a->alpha_d, a->beta_d, &bw->alpha, &bw->beta);
  fd_read_scalars(a->x->dtype, a->alpha_p, a->beta_p, &bw->alpha_p, &bw->beta_p);
  return issue(a->h, bw, op, a->x, a->mode);
}

FD_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardTraining(fd_handle h, int mode, const void *alpha, const void *beta,
                                                               fd_tensor x, const void *xp, fd_tensor y, void *yp,
                                                               fd_tensor pd, const void *scale, const void *bias,
                                                               double factor, void *run_mean, void *run_var, double epsilon,
                                                               void *save_mean, void *save_inv) {
  train_args a = {h, mode, alpha, beta, x, xp, y, yp, pd, scale, bias, factor, run_mean, run_var, epsilon, save_mean, save_inv};
  FD_CALL(cudnnBatchNormalizationForwardTraining, bn_train(&a));
}

FD_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardInference(fd_handle h, int mode, const void *alpha, const void *beta,
                                                                fd_tensor x, const void *xp, fd_tensor y, void *yp,
                                                                fd_tensor pd, const void *scale, const void *bias,
                                                                const void *mean, const void *var, double epsilon) {
  FD_CALL(cudnnBatchNormalizationForwardInference,
          bn_infer(h, mode, alpha, beta, x, xp, y, yp, pd, scale, bias, mean, var, epsilon));
}

FD_EXPORT cudnnStatus_t cudnnBatchNormalizationBackward(fd_handle h, int mode, const void *alpha_d, const void *beta_d,
                                                        const void *alpha_p, const void *beta_p, fd_tensor x, const void *xp,
                                                        fd_tensor dy, const void *dyp, fd_tensor dx, void *dxp, fd_tensor pd,
                                                        const void *scale, void *dscale, void *dbias, double epsilon,
                                                        const void *save_mean, const void *save_inv) {
  back_args a = {h,   mode, alpha_d, beta_d, alpha_p, beta_p, x,      xp,      dy,        dyp,
                 dx,  dxp,  pd,      scale,  dscale,  dbias,  epsilon, save_mean, save_inv};
  FD_CALL(cudnnBatchNormalizationBackward, bn_backward(&a));
}

/* ------------------------------------------------------- tensor helpers --- */

typedef struct fill_work {
  fd_work hdr;
  fd_view a, c;
  int add; /* cudnnAddTensor; else cudnnSetTensor */
  double value, alpha, beta;
  int compute;
} fill_work;

static CUresult fill_run(void *payload, char *msg, size_t cap) {
  fill_work *fw = payload;
  CUresult r = fd_view_span(&fw->hdr, &fw->c, fw->add ? "C" : "y", msg, cap);
  if (r == CUDA_SUCCESS && fw->add) r = fd_view_span(&fw->hdr, &fw->a, "A", msg, cap);
  if (r != CUDA_SUCCESS) return r;
  int64_t idx[FD_DIM_MAX] = {0}, ai[FD_DIM_MAX];
  do {
    int64_t off = fd_view_offset(&fw->c, idx);
    if (!fw->add) {
      fd_store(&fw->c, off, fw->value);
      continue;
    }
    for (int i = 0; i < fw->a.nd; i++) ai[i] = fw->a.dims[i] == 1 ? 0 : idx[i]; /* A broadcasts over its size-1 axes */
    double v = fd_load(&fw->a, fd_view_offset(&fw->a, ai));
    fd_store(&fw->c, off, fd_blend(fw->compute, fw->alpha, v, fw->beta, &fw->c, off));
  } while (fd_next_index(&fw->c, idx));
  return CUDA_SUCCESS;
}

/* cudnnSetTensor: value[0] has y's data type (its reference). */
static cudnnStatus_t set_tensor_value(fd_handle h, fd_tensor y, void *yp, const void *value) {
  const char *op = "cudnnSetTensor";
  cudnnStatus_t s = fd_check_handle(h, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(y, op);
  if (s != FD_SUCCESS) return s;
  if (!yp || !value) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: y or valuePtr is NULL", op);
  if (!fd_dtype_size(y->dtype)) return fd_refuse(FD_NOT_SUPPORTED_DATA_TYPE, "%s: %s data", op, fd_dtype_name(y->dtype));
  fill_work *fw = fd_work_alloc(sizeof *fw, op);
  if (!fw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  fd_view_of_tensor(&fw->c, y, yp);
  /* Read the host value as an element of y's type. */
  fd_view hv = fw->c;
  hv.host = (void *)value;
  fw->value = fd_load(&hv, 0);
  return fd_issue(h, fill_run, &fw->hdr);
}

/* cudnnAddTensor: C = alpha A + beta C, A broadcast along its size-1 axes;
 * BAD_PARAM when A's sizes are neither C's nor 1, or the types differ. */
static cudnnStatus_t add_tensor(fd_handle h, const void *alpha, fd_tensor a, const void *ap, const void *beta, fd_tensor c,
                                void *cp) {
  const char *op = "cudnnAddTensor";
  cudnnStatus_t s = fd_check_handle(h, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(a, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(c, op);
  if (s != FD_SUCCESS) return s;
  if (!alpha || !beta || !ap || !cp) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: alpha, beta, A or C is NULL", op);
  if (a->nb != c->nb || a->dtype != c->dtype) return fd_refuse(FD_BAD_PARAM, "%s: A and C differ in rank or type", op);
  for (int i = 0; i < a->nb; i++)
    if (a->dims[i] != 1 && a->dims[i] != c->dims[i]) return fd_refuse(FD_BAD_PARAM, "%s: A's axis %d is %d, C's %d", op, i, a->dims[i], c->dims[i]);
  if (!fd_dtype_size(c->dtype)) return fd_refuse(FD_NOT_SUPPORTED_DATA_TYPE, "%s: %s data", op, fd_dtype_name(c->dtype));
  fill_work *fw = fd_work_alloc(sizeof *fw, op);
  if (!fw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  fw->add = 1;
  fd_view_of_tensor(&fw->a, a, ap);
  fd_view_of_tensor(&fw->c, c, cp);
  fw->compute = c->dtype == FD_DOUBLE ? FD_DOUBLE : FD_FLOAT;
  fd_read_scalars(c->dtype, alpha, beta, &fw->alpha, &fw->beta);
  return fd_issue(h, fill_run, &fw->hdr);
}

FD_EXPORT cudnnStatus_t cudnnSetTensor(fd_handle h, fd_tensor y, void *yp, const void *value) {
  FD_CALL(cudnnSetTensor, set_tensor_value(h, y, yp, value));
}

FD_EXPORT cudnnStatus_t cudnnAddTensor(fd_handle h, const void *alpha, fd_tensor a, const void *ap, const void *beta,
                                       fd_tensor c, void *cp) {
  FD_CALL(cudnnAddTensor, add_tensor(h, alpha, a, ap, beta, c, cp));
}
