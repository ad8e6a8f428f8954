/* Batch normalisation and pooling through cuDNN (cudnn_norm_pool.h).
 *
 * The same legacy API and reasoning as cudnn.c's convolutions: these calls exist unchanged in
 * cuDNN 8.9 and 9.x (deprecated in 9, still exported by libcudnn.so.9). cudnn.c loads the
 * library and decides per device (em_cudnn_usable); this file binds the calls it needs with
 * dlsym on that library, keyed on its dlopen handle (em_shutdown may load another), and fails
 * naming the missing symbol, never aborting. ABI values: the CUDA 13.0 toolkit's
 * cudnn_ops_v9.h and cudnn_graph_v9.h (cudnnBatchNormMode_t, cudnnPoolingMode_t,
 * cudnnNanPropagation_t, cudnnDataType_t), unchanged since cuDNN 8.
 *
 * Semantics, against ops/norm.c and ops/pool.c:
 * - batch norm: CUDNN_BATCHNORM_SPATIAL on [n, c, inner, 1] (Ember's op has no per-activation
 *   case: its statistics are always per channel; SPATIAL_PERSISTENT is not used: cudnn_ops_v9.h
 *   says it "imposes some limits on the range of values"). ONNX's momentum is the weight of the
 *   old running value, cuDNN's exponentialAverageFactor that of the batch's ("runningMean =
 *   newMean*factor + runningMean*(1-factor)", cudnn_ops_v9.h), so factor = 1 - momentum. The
 *   running variance takes the unbiased batch variance in both ([S]: PyTorch hands its running
 *   variance, documented as unbiased, straight to cuDNN with factor = its momentum; the cuDNN
 *   double models the same; no GPU was lent to confirm it on real cuDNN). The backward gets NULL
 *   savedMean / savedInvVariance: cuDNN then recomputes the statistics from x (both NULL at
 *   once is allowed: cuDNN API reference, cudnnBatchNormalizationBackward), which is what
 *   Ember's _batch_norm_grad does, having no saved statistics either.
 * - pooling: max is CUDNN_POOLING_MAX_DETERMINISTIC (CUDNN_POOLING_MAX's backward adds
 *   overlapping windows with atomics: cuDNN's reproducibility notes), NaNs propagated (Ember: a
 *   NaN is the window's maximum); a tie's gradient goes to one maximum, not necessarily Ember's
 *   first (ops/README.md). Averages count the padding or not (count_include_pad). */
#include "cudnn_norm_pool.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cudnn.h"
#include "error.h"

enum {
  CUDNN_DATA_FLOAT = 0,
  CUDNN_DATA_DOUBLE = 1,
  CUDNN_BATCHNORM_SPATIAL = 1,
  CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING = 1,
  CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING = 2,
  CUDNN_POOLING_MAX_DETERMINISTIC = 3,
  CUDNN_PROPAGATE_NAN = 1,
};

typedef void *desc_t;
typedef int (*fn_create)(desc_t *);
typedef int (*fn_destroy)(desc_t);
typedef int (*fn_tensor_nd)(desc_t, int, int, const int *, const int *);
typedef int (*fn_derive)(desc_t, desc_t, int);
typedef int (*fn_bn_infer)(void *, int, const void *, const void *, desc_t, const void *, desc_t, void *, desc_t,
                           const void *, const void *, const void *, const void *, double);
typedef int (*fn_bn_train)(void *, int, const void *, const void *, desc_t, const void *, desc_t, void *, desc_t,
                           const void *, const void *, double, void *, void *, double, void *, void *);
typedef int (*fn_bn_back)(void *, int, const void *, const void *, const void *, const void *, desc_t, const void *,
                          desc_t, const void *, desc_t, void *, desc_t, const void *, void *, void *, double,
                          const void *, const void *);
typedef int (*fn_pool_nd)(desc_t, int, int, int, const int *, const int *, const int *);
typedef int (*fn_pool_fwd)(void *, desc_t, const void *, desc_t, const void *, const void *, desc_t, void *);
typedef int (*fn_pool_bwd)(void *, desc_t, const void *, desc_t, const void *, desc_t, const void *, desc_t,
                           const void *, const void *, desc_t, void *);

static struct {
  pthread_mutex_t lock;
  void *lib; /* the library these were bound from */
  const char *missing;
  fn_create tensor_create, pool_create;
  fn_destroy tensor_destroy, pool_destroy;
  fn_tensor_nd tensor_nd;
  fn_derive derive;
  fn_bn_infer bn_infer;
  fn_bn_train bn_train;
  fn_bn_back bn_back;
  fn_pool_nd pool_nd;
  fn_pool_fwd pool_fwd;
  fn_pool_bwd pool_bwd;
} B = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define BIND(field, name)                                                                                              \
  do {                                                                                                                 \
    *(void **)&B.field = dlsym(lib, name);                                                                             \
    if (!B.field && !B.missing) B.missing = name;                                                                      \
  } while (0)

/* The calls, bound once per loaded library. */
static em_status bind(void) {
  void *lib = em_cudnn_library();
  if (!lib) return em_fail(EM_ERR_INTERNAL, "cuDNN's batch normalization or pooling called with no cuDNN loaded");
  pthread_mutex_lock(&B.lock);
  if (B.lib != lib) {
    B.missing = NULL;
    BIND(tensor_create, "cudnnCreateTensorDescriptor");
    BIND(tensor_destroy, "cudnnDestroyTensorDescriptor");
    BIND(tensor_nd, "cudnnSetTensorNdDescriptor");
    BIND(derive, "cudnnDeriveBNTensorDescriptor");
    BIND(bn_infer, "cudnnBatchNormalizationForwardInference");
    BIND(bn_train, "cudnnBatchNormalizationForwardTraining");
    BIND(bn_back, "cudnnBatchNormalizationBackward");
    BIND(pool_create, "cudnnCreatePoolingDescriptor");
    BIND(pool_destroy, "cudnnDestroyPoolingDescriptor");
    BIND(pool_nd, "cudnnSetPoolingNdDescriptor");
    BIND(pool_fwd, "cudnnPoolingForward");
    BIND(pool_bwd, "cudnnPoolingBackward");
    B.lib = lib;
  }
  const char *missing = B.missing;
  pthread_mutex_unlock(&B.lock);
  if (missing) return em_fail(EM_ERR_UNSUPPORTED, "cuDNN %s does not export %s", em_cudnn_version_text(), missing);
  return EM_OK;
}
#undef BIND

static int dtype_of(em_dtype dt) { return dt == EM_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

static void packed_strides(int nb, const int *dims, int *strides) {
  strides[nb - 1] = 1;
  for (int i = nb - 2; i >= 0; i--) strides[i] = strides[i + 1] * dims[i + 1];
}

/* A packed NCHW tensor descriptor of nb dimensions. *call names what failed. */
static int tensor_make(desc_t *d, em_dtype dt, int nb, const int *dims, const char **call) {
  int strides[5], st;
  packed_strides(nb, dims, strides);
  *call = "cudnnCreateTensorDescriptor";
  if ((st = B.tensor_create(d))) {
    *d = NULL;
    return st;
  }
  *call = "cudnnSetTensorNdDescriptor";
  return B.tensor_nd(*d, dtype_of(dt), nb, dims, strides);
}

static void tensor_free(desc_t d) {
  if (d) B.tensor_destroy(d);
}

/* The scaling parameters alpha = 1, beta = 0: double for double data, float for float (the
 * reference's "Scaling Parameters"). */
typedef struct scalars {
  double d1, d0;
  float f1, f0;
} scalars;
static const void *one(const scalars *k, em_dtype dt) { return dt == EM_F64 ? (const void *)&k->d1 : (const void *)&k->f1; }
static const void *zero(const scalars *k, em_dtype dt) { return dt == EM_F64 ? (const void *)&k->d0 : (const void *)&k->f0; }
static const scalars K = {1.0, 0.0, 1.0f, 0.0f};

/* The error of a failed call, naming it, the status, what ran and the device: EM_ERR_UNSUPPORTED
 * where cuDNN declined the case (em_cudnn_declines: nothing was written; the op takes Ember's
 * kernels), else EM_ERR_CUDA. */
static em_status failed(const char *call, int st, const char *what, em_dtype dt, int ordinal) {
  const int declined = em_cudnn_declines(st);
  return em_fail(declined ? EM_ERR_UNSUPPORTED : EM_ERR_CUDA, "%s %s: %s (%s, %s) on CUDA device %d", call,
                 declined ? "declined" : "failed", em_cudnn_status_text(st), what, em_dtype_name(dt), ordinal);
}

/* ------------------------------------------------ batch normalisation --- */

int em_cudnn_bn_takes(const em_cudnn_bn *g, char *why, size_t cap) {
  const int64_t lim = 0x7fffffff;
  if (g->dt != EM_F32 && g->dt != EM_F64) {
    snprintf(why, cap, "cuDNN's batch normalization is used for f32 and f64; this one is %s", em_dtype_name(g->dt));
    return 0;
  }
  if (g->n < 1 || g->c < 1 || g->inner < 1) {
    snprintf(why, cap, "an empty tensor");
    return 0;
  }
  if (g->n > lim || g->c > lim || g->inner > lim || g->n * g->c > lim / g->inner) {
    snprintf(why, cap, "more than 2^31 - 1 elements (cuDNN's descriptors take int)");
    return 0;
  }
  if (!(g->eps >= EM_CUDNN_BN_MIN_EPSILON)) {
    snprintf(why, cap, "epsilon %g is below CUDNN_BN_MIN_EPSILON (%g)", g->eps, EM_CUDNN_BN_MIN_EPSILON);
    return 0;
  }
  return 1;
}

typedef enum { BN_INFER, BN_TRAIN, BN_BACK } bn_kind;
static const char *const bn_what[] = {"batch normalization inference", "batch normalization training",
                                      "batch normalization backward"};

typedef struct bn_call {
  bn_kind kind;
  double factor;
  const void *x, *scale, *bias, *mean, *var, *dy;
  void *y, *rmean, *rvar, *dx, *dscale, *dbias;
} bn_call;

static em_status bn_run(em_device dev, em_stream *s, const em_cudnn_bn *g, const bn_call *c) {
  em_status r = bind();
  if (r) return r;
  char why[200];
  if (!em_cudnn_bn_takes(g, why, sizeof why)) return em_fail(EM_ERR_INTERNAL, "%s through cuDNN: %s", bn_what[c->kind], why);
  em_cudnn_use u;
  if ((r = em_cudnn_enter(dev, s, &u))) return r;
  desc_t xd = NULL, pd = NULL;
  const int dims[4] = {(int)g->n, (int)g->c, (int)g->inner, 1};
  const char *call = "";
  int st = tensor_make(&xd, g->dt, 4, dims, &call);
  if (!st) {
    call = "cudnnCreateTensorDescriptor";
    st = B.tensor_create(&pd);
    if (st) pd = NULL;
  }
  if (!st) {
    /* [1, c, 1, 1] of x's type for f32 and f64 (cudnn_ops_v9.h), as cuDNN derives it */
    call = "cudnnDeriveBNTensorDescriptor";
    st = B.derive(pd, xd, CUDNN_BATCHNORM_SPATIAL);
  }
  const void *a1 = one(&K, g->dt), *b0 = zero(&K, g->dt);
  if (!st) switch (c->kind) {
    case BN_INFER:
      call = "cudnnBatchNormalizationForwardInference";
      st = B.bn_infer(u.handle, CUDNN_BATCHNORM_SPATIAL, a1, b0, xd, c->x, xd, c->y, pd, c->scale, c->bias, c->mean,
                      c->var, g->eps);
      break;
    case BN_TRAIN:
      call = "cudnnBatchNormalizationForwardTraining";
      st = B.bn_train(u.handle, CUDNN_BATCHNORM_SPATIAL, a1, b0, xd, c->x, xd, c->y, pd, c->scale, c->bias, c->factor,
                      c->rmean, c->rvar, g->eps, NULL, NULL);
      break;
    case BN_BACK:
      call = "cudnnBatchNormalizationBackward";
      st = B.bn_back(u.handle, CUDNN_BATCHNORM_SPATIAL, a1, b0, a1, b0, xd, c->x, xd, c->dy, xd, c->dx, pd, c->scale,
                     c->dscale, c->dbias, g->eps, NULL, NULL);
      break;
    }
  tensor_free(xd);
  tensor_free(pd);
  int ordinal = u.ordinal;
  em_cudnn_leave(&u);
  return st ? failed(call, st, bn_what[c->kind], g->dt, ordinal) : EM_OK;
}

em_status em_cudnn_bn_inference(em_device dev, em_stream *s, const em_cudnn_bn *g, const void *x, void *y,
                                const void *scale, const void *bias, const void *mean, const void *var) {
  bn_call c = {.kind = BN_INFER, .x = x, .y = y, .scale = scale, .bias = bias, .mean = mean, .var = var};
  return bn_run(dev, s, g, &c);
}

em_status em_cudnn_bn_training(em_device dev, em_stream *s, const em_cudnn_bn *g, double factor, const void *x,
                               void *y, const void *scale, const void *bias, void *running_mean, void *running_var) {
  bn_call c = {.kind = BN_TRAIN, .factor = factor, .x = x, .y = y, .scale = scale, .bias = bias,
               .rmean = running_mean, .rvar = running_var};
  return bn_run(dev, s, g, &c);
}

em_status em_cudnn_bn_backward(em_device dev, em_stream *s, const em_cudnn_bn *g, const void *x, const void *dy,
                               const void *scale, void *dx, void *dscale, void *dbias) {
  bn_call c = {.kind = BN_BACK, .x = x, .dy = dy, .scale = scale, .dx = dx, .dscale = dscale, .dbias = dbias};
  return bn_run(dev, s, g, &c);
}

/* ------------------------------------------------------------ pooling --- */

const char *em_cudnn_pool_mode_name(em_cudnn_pool_mode m) {
  return m == EM_CUDNN_POOL_MAX ? "MAX_DETERMINISTIC"
       : m == EM_CUDNN_POOL_AVG_INCLUDE ? "AVERAGE_COUNT_INCLUDE_PADDING" : "AVERAGE_COUNT_EXCLUDE_PADDING";
}

int em_cudnn_pool_takes(const em_cudnn_pool *g, char *why, size_t cap) {
  const int64_t lim = 0x7fffffff;
  if (g->dt != EM_F32 && g->dt != EM_F64) {
    snprintf(why, cap, "cuDNN's pooling is used for f32 and f64; this one is %s", em_dtype_name(g->dt));
    return 0;
  }
  if (g->nd < 1 || g->nd > 3) {
    snprintf(why, cap, "%d spatial axes (1 to 3 here)", g->nd);
    return 0;
  }
  if (g->n < 1 || g->c < 1) {
    snprintf(why, cap, "an empty tensor");
    return 0;
  }
  if (g->n > lim || g->c > lim) {
    snprintf(why, cap, "a dimension above 2^31 - 1");
    return 0;
  }
  int64_t elems = g->n * g->c;
  for (int i = 0; i < g->nd; i++) {
    if (g->img[i] < 1 || g->out[i] < 1) {
      snprintf(why, cap, "an empty tensor");
      return 0;
    }
    if (g->img[i] > lim || g->k[i] > lim || g->stride[i] > lim || g->pb[i] > lim || g->pe[i] > lim) {
      snprintf(why, cap, "a dimension above 2^31 - 1");
      return 0;
    }
    if (g->dil[i] != 1) {
      snprintf(why, cap, "axis %d has dilation %lld (cuDNN's pooling has none)", i, (long long)g->dil[i]);
      return 0;
    }
    if (g->pb[i] != g->pe[i]) {
      snprintf(why, cap, "axis %d's padding is %lld at the start and %lld at the end (cuDNN pads both ends alike)", i,
               (long long)g->pb[i], (long long)g->pe[i]);
      return 0;
    }
    if (g->pb[i] >= g->k[i]) { /* cuDNN refuses it (BAD_PARAM): a window could see only padding */
      snprintf(why, cap, "axis %d's padding %lld is not below its window %lld", i, (long long)g->pb[i],
               (long long)g->k[i]);
      return 0;
    }
    /* cuDNN's output size: floor((in + 2 pad - window) / stride) + 1 (cudnnGetPoolingNdForwardOutputDim) */
    int64_t want = (g->img[i] + 2 * g->pb[i] - g->k[i]) / g->stride[i] + 1;
    if (g->img[i] + 2 * g->pb[i] < g->k[i] || want != g->out[i]) {
      snprintf(why, cap, "axis %d has %lld windows where cuDNN's rounded-down size gives %lld (ceil_mode)", i,
               (long long)g->out[i], (long long)want);
      return 0;
    }
    if (elems > lim / (g->img[i] > g->out[i] ? g->img[i] : g->out[i])) {
      snprintf(why, cap, "more than 2^31 - 1 elements (cuDNN's descriptors take int)");
      return 0;
    }
    elems *= g->img[i] > g->out[i] ? g->img[i] : g->out[i];
  }
  return 1;
}

typedef struct pool_descs {
  desc_t x, y, pool;
} pool_descs;

static void pool_descs_free(pool_descs *d) {
  tensor_free(d->x);
  tensor_free(d->y);
  if (d->pool) B.pool_destroy(d->pool);
}

/* x and y 4-D or 5-D (a 1-D pool gets a leading unit axis: cuDNN's pooling takes 2 or 3). */
static int pool_descs_make(const em_cudnn_pool *g, pool_descs *d, const char **call) {
  memset(d, 0, sizeof *d);
  int lead = g->nd == 1, sp = g->nd + lead, nb = sp + 2;
  int xd[5] = {(int)g->n, (int)g->c}, yd[5] = {(int)g->n, (int)g->c}, win[3], pad[3], str[3];
  for (int i = 0; i < sp; i++) {
    int j = i - lead; /* the geometry's axis, -1 for the added unit axis */
    xd[2 + i] = j < 0 ? 1 : (int)g->img[j];
    yd[2 + i] = j < 0 ? 1 : (int)g->out[j];
    win[i] = j < 0 ? 1 : (int)g->k[j];
    pad[i] = j < 0 ? 0 : (int)g->pb[j];
    str[i] = j < 0 ? 1 : (int)g->stride[j];
  }
  int st = tensor_make(&d->x, g->dt, nb, xd, call);
  if (!st) st = tensor_make(&d->y, g->dt, nb, yd, call);
  if (st) return st;
  *call = "cudnnCreatePoolingDescriptor";
  if ((st = B.pool_create(&d->pool))) {
    d->pool = NULL;
    return st;
  }
  int mode = g->mode == EM_CUDNN_POOL_MAX ? CUDNN_POOLING_MAX_DETERMINISTIC
           : g->mode == EM_CUDNN_POOL_AVG_INCLUDE ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  *call = "cudnnSetPoolingNdDescriptor";
  return B.pool_nd(d->pool, mode, CUDNN_PROPAGATE_NAN, sp, win, pad, str);
}

/* Forward (dy NULL) or backward: the forward into y, then with dy the backward into dx. */
static em_status pool_run(em_device dev, em_stream *s, const em_cudnn_pool *g, const void *x, void *y, const void *dy,
                          void *dx) {
  em_status r = bind();
  if (r) return r;
  char why[200];
  if (!em_cudnn_pool_takes(g, why, sizeof why)) return em_fail(EM_ERR_INTERNAL, "pooling through cuDNN: %s", why);
  em_cudnn_use u;
  if ((r = em_cudnn_enter(dev, s, &u))) return r;
  pool_descs d;
  const char *call = "";
  int st = pool_descs_make(g, &d, &call);
  const void *a1 = one(&K, g->dt), *b0 = zero(&K, g->dt);
  if (!st) {
    call = "cudnnPoolingForward";
    st = B.pool_fwd(u.handle, d.pool, a1, d.x, x, b0, d.y, y);
  }
  if (!st && dy) {
    call = "cudnnPoolingBackward";
    st = B.pool_bwd(u.handle, d.pool, a1, d.y, y, d.y, dy, d.x, x, b0, d.x, dx);
  }
  pool_descs_free(&d);
  int ordinal = u.ordinal;
  em_cudnn_leave(&u);
  if (!st) return EM_OK;
  char what[96];
  snprintf(what, sizeof what, "%s pooling %s, %d-D", em_cudnn_pool_mode_name(g->mode), dy ? "backward" : "forward",
           g->nd);
  return failed(call, st, what, g->dt, ordinal);
}

em_status em_cudnn_pool_forward(em_device dev, em_stream *s, const em_cudnn_pool *g, const void *x, void *y) {
  return pool_run(dev, s, g, x, y, NULL, NULL);
}

em_status em_cudnn_pool_backward(em_device dev, em_stream *s, const em_cudnn_pool *g, const void *x, const void *dy,
                                 void *y_scratch, void *dx) {
  return pool_run(dev, s, g, x, y_scratch, dy, dx);
}
