/* cuDNN for the fast mode (cudnn.h).
 *
 * API: cuDNN's legacy convolution API (cudnnFind/ConvolutionForward and
 * the backward pairs), not the graph API. It exists unchanged in cuDNN 8
 * and 9 (deprecated in 9, still shipped through 9.19), so one code path
 * serves every cuDNN Ember can load, including 8.9 for Maxwell to Volta
 * fleets on older drivers; its per-problem algorithm search maps one to one
 * onto a cache entry. The graph API is the way forward once cuDNN 10 drops
 * the legacy calls.
 *
 * The library: EMBER_LIBCUDNN names one file, else libcudnn.so.9 then .8.
 * A build for CUDA M (cudnnGetCudartVersion) needs a CUDA M.0 driver;
 * devices below the release's lowest compute capability (arch_table
 * libreq: 9.11+ from 7.5, 9.0-9.10 and 8.9 from 5.0) keep Ember's kernels.
 *
 * Algorithms: chosen once per (device name and CC, cuDNN version, direction,
 * geometry, dtype, math mode, workspace limit, determinism) by
 * cudnnFind*AlgorithmEx on the call's own buffers, the fastest whose status
 * is success, whose workspace fits EMBER_CUDNN_WORKSPACE_MB (default 256)
 * and, under EMBER_CUDNN_DETERMINISTIC=1, that is deterministic; kept in
 * memory and in the JIT cache's directory (kind "cudnn-algo": same atomic
 * writes, checksums, directory checks and size cap), so a second process
 * runs no search. ABI values: the CUDA 13.0 toolkit's cudnn_*_v9.h. */
#include "cudnn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL /* header-only, as load.c and jit_cache.c use it: no link dependency */
#include <xxhash.h>

#include "arch_table.h"
#include "error.h"
#include "load.h"
#include "runtime.h"

typedef struct cudnnContext *cudnnHandle_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;
enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_DATA_FLOAT = 0,
  CUDNN_DATA_DOUBLE = 1,
  CUDNN_DATA_HALF = 2,
  CUDNN_DATA_BFLOAT16 = 9,
  CUDNN_TENSOR_NCHW = 0,
  CUDNN_CROSS_CORRELATION = 1,
  CUDNN_DEFAULT_MATH = 0, /* TF32 allowed for float on CC 8.0+ */
  CUDNN_TENSOR_OP_MATH = 1,
  CUDNN_FMA_MATH = 3,     /* FMA kernels only: no TF32 */
  CUDNN_DETERMINISTIC = 1,
};
/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: one layout for all three. */
typedef struct algo_perf {
  int algo;
  int status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
} algo_perf;

typedef size_t (*fn_version)(void);
typedef const char *(*fn_error)(int);
typedef int (*fn_create)(cudnnHandle_t *);
typedef int (*fn_destroy)(cudnnHandle_t);
typedef int (*fn_set_stream)(cudnnHandle_t, CUstream);
typedef int (*fn_desc_create)(void **);
typedef int (*fn_desc_destroy)(void *);
typedef int (*fn_tensor_nd)(cudnnTensorDescriptor_t, int, int, const int *, const int *);
typedef int (*fn_filter_nd)(cudnnFilterDescriptor_t, int, int, int, const int *);
typedef int (*fn_conv_nd)(cudnnConvolutionDescriptor_t, int, const int *, const int *, const int *, int, int);
typedef int (*fn_conv_int)(cudnnConvolutionDescriptor_t, int);
/* Find*Ex: (handle, descA, a, descB, b, conv, descOut, out, requested, *returned, perf*, ws, ws bytes). */
typedef int (*fn_find)(cudnnHandle_t, const void *, const void *, const void *, const void *,
                       cudnnConvolutionDescriptor_t, const void *, void *, int, int *, algo_perf *, void *, size_t);
/* Run: (handle, alpha, descA, a, descB, b, conv, algo, ws, ws bytes, beta, descOut, out). */
typedef int (*fn_run)(cudnnHandle_t, const void *, const void *, const void *, const void *, const void *,
                      cudnnConvolutionDescriptor_t, int, void *, size_t, const void *, const void *, void *);

static const char *const dir_names[3] = {"forward", "backward data", "backward filter"};
static const char *const find_names[3] = {"cudnnFindConvolutionForwardAlgorithmEx",
                                          "cudnnFindConvolutionBackwardDataAlgorithmEx",
                                          "cudnnFindConvolutionBackwardFilterAlgorithmEx"};
static const char *const run_names[3] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                         "cudnnConvolutionBackwardFilter"};

#define MAX_DEVICES 64
#define MEMO_MAX 1024 /* chosen algorithms kept in memory; past it the oldest go (the disk keeps them) */

typedef struct dnn_device {
  int decided, usable;
  char why[256];
  cudnnHandle_t handle;
  pthread_mutex_t lock;
} dnn_device;

/* A chosen algorithm. */
typedef struct choice {
  uint64_t hash;       /* of the key text */
  char *key;
  int algo;           /* -1: cuDNN declined the problem, for the reason in why */
  size_t memory;
  char *why;          /* (memo only) the decline's message, reported again by later calls */
} choice;

static struct {
  pthread_mutex_t lock;
  int loaded;
  void *lib;
  char path[512], version[32], why[384];
  int major, minor, patch, built_for;
  size_t number;       /* cudnnGetVersion */
  fn_error error;
  fn_create create;
  fn_destroy destroy;
  fn_set_stream set_stream;
  fn_desc_create tensor_create, filter_create, conv_create;
  fn_desc_destroy tensor_destroy, filter_destroy, conv_destroy;
  fn_tensor_nd tensor_nd;
  fn_filter_nd filter_nd;
  fn_conv_nd conv_nd;
  fn_conv_int group_count, math_type;
  fn_find find[3];
  fn_run run[3];
  dnn_device dev[MAX_DEVICES];
  choice memo[MEMO_MAX];
  int n_memo, next_memo;
} D = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic uint64_t searches;

uint64_t em_cudnn_searches(void) { return atomic_load(&searches); }

void em_cudnn_version_split(size_t v, int *major, int *minor, int *patch) {
  if (v >= 90000) *major = (int)(v / 10000), *minor = (int)(v % 10000 / 100), *patch = (int)(v % 100);
  else *major = (int)(v / 1000), *minor = (int)(v % 1000 / 100), *patch = (int)(v % 100);
}

static const char *status_text(int st) {
  const char *t = D.error ? D.error(st) : NULL;
  static _Thread_local char buf[40];
  if (t && *t) return t;
  snprintf(buf, sizeof buf, "cuDNN status %d", st);
  return buf;
}

/* Whether a status says cuDNN DECLINES the problem (a case this release or this GPU does not
 * support) rather than failing at it: the op then takes Ember's kernels, saying why, where
 * PyTorch stops with "Unable to find a valid cuDNN algorithm". cuDNN 9 groups its statuses by
 * category (cudnn_graph_v9.h: CUDNN_STATUS_NOT_SUPPORTED 3000 and its 3001-3014, the former
 * ARCH_MISMATCH among them); cuDNN 8's are single values (cudnn_ops_infer.h:
 * CUDNN_STATUS_ARCH_MISMATCH 6, CUDNN_STATUS_NOT_SUPPORTED 9). A bad parameter, an internal
 * error or a failed execution is not a decline: it fails the op. */
int em_cudnn_declines(int st) { return D.major >= 9 ? st / 1000 == 3 : st == 6 || st == 9; }

int em_cudnn_supports(int major, int minor, int patch, int built_for, int driver_version, int cc, char *why,
                      size_t cap) {
  int need = built_for / 1000 * 1000;
  if (need && driver_version < need) {
    snprintf(why, cap, "cuDNN %d.%d.%d is built for CUDA %d and needs a CUDA %d.0 driver or newer; this driver is "
             "CUDA %d.%d", major, minor, patch, built_for / 1000, built_for / 1000, driver_version / 1000,
             driver_version % 1000 / 10);
    return 0;
  }
  const char *row = NULL;
  int lowest = em_libreq_lowest_cc("cudnn", major, minor, patch, NULL, &row);
  if (!lowest) {
    snprintf(why, cap, "cuDNN %d.%d.%d is not in Ember's table of cuDNN releases (arch_table libreq): not used", major,
             minor, patch);
    return 0;
  }
  if (cc < lowest) {
    snprintf(why, cap,
             "cuDNN %d.%d.%d supports compute capability %d.%d and newer; this device is %d.%d (Ember's own kernels "
             "run)", major, minor, patch, lowest / 10, lowest % 10, cc / 10, cc % 10);
    return 0;
  }
  snprintf(why, cap, "cuDNN %d.%d.%d supports CC %d.%d on a CUDA %d.%d driver", major, minor, patch, cc / 10, cc % 10,
           driver_version / 1000, driver_version % 1000 / 10);
  return 1;
}

#define BIND(field, name)                                                                                              \
  do {                                                                                                                 \
    *(void **)&D.field = dlsym(h, name);                                                                               \
    if (!D.field && !missing) missing = name;                                                                          \
  } while (0)

static int bind(void *h, char *why, size_t cap) {
  const char *missing = NULL;
  fn_version version = (fn_version)dlsym(h, "cudnnGetVersion"), cudart = (fn_version)dlsym(h, "cudnnGetCudartVersion");
  if (!version) missing = "cudnnGetVersion";
  BIND(error, "cudnnGetErrorString");
  BIND(create, "cudnnCreate");
  BIND(destroy, "cudnnDestroy");
  BIND(set_stream, "cudnnSetStream");
  BIND(tensor_create, "cudnnCreateTensorDescriptor");
  BIND(tensor_destroy, "cudnnDestroyTensorDescriptor");
  BIND(tensor_nd, "cudnnSetTensorNdDescriptor");
  BIND(filter_create, "cudnnCreateFilterDescriptor");
  BIND(filter_destroy, "cudnnDestroyFilterDescriptor");
  BIND(filter_nd, "cudnnSetFilterNdDescriptor");
  BIND(conv_create, "cudnnCreateConvolutionDescriptor");
  BIND(conv_destroy, "cudnnDestroyConvolutionDescriptor");
  BIND(conv_nd, "cudnnSetConvolutionNdDescriptor");
  BIND(group_count, "cudnnSetConvolutionGroupCount");
  BIND(math_type, "cudnnSetConvolutionMathType");
  for (int d = 0; d < 3; d++) {
    BIND(find[d], find_names[d]);
    BIND(run[d], run_names[d]);
  }
  if (missing) {
    snprintf(why, cap, "%s does not export %s (cuDNN 8 or 9 with the convolution API is needed)", D.path, missing);
    return -1;
  }
  D.number = version();
  D.built_for = cudart ? (int)cudart() : 0;
  em_cudnn_version_split(D.number, &D.major, &D.minor, &D.patch);
  snprintf(D.version, sizeof D.version, "%d.%d.%d", D.major, D.minor, D.patch);
  return 0;
}
#undef BIND

/* With D.lock held: the search, once. */
static void load(void) {
  if (D.loaded) return;
  D.loaded = 1;
  const char *forced = getenv("EMBER_LIBCUDNN");
  if (forced && *forced) {
    snprintf(D.path, sizeof D.path, "%s", forced);
    D.lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!D.lib) snprintf(D.why, sizeof D.why, "EMBER_LIBCUDNN=%s cannot be loaded: %s", forced, dlerror());
  } else {
    D.lib = em_libs_open("libcudnn.so.9", D.path, sizeof D.path);
    if (!D.lib) D.lib = em_libs_open("libcudnn.so.8", D.path, sizeof D.path);
    if (!D.lib)
      snprintf(D.why, sizeof D.why, "no cuDNN found (libcudnn.so.9 or .8 under the loader's path, CUDA_HOME or "
               "/usr/local/cuda)");
  }
  if (D.lib && bind(D.lib, D.why, sizeof D.why)) D.lib = NULL;
  if (D.lib) em_log(EM_LOG_DISPATCH, "cuDNN %s (built for CUDA %d.%d) loaded from %s", D.version, D.built_for / 1000,
                    D.built_for % 1000 / 10, D.path);
  else em_log(EM_LOG_DISPATCH, "cuDNN not used: %s", D.why);
}

static void decide_once(em_runtime *rt, em_gpu *g, dnn_device *d) {
  load();
  if (!D.lib) {
    snprintf(d->why, sizeof d->why, "%s", D.why);
    return;
  }
  if (!em_cudnn_supports(D.major, D.minor, D.patch, D.built_for, rt->driver.driver_version, g->cc, d->why,
                         sizeof d->why))
    return;
  if (em_gpu_enter(g)) {
    snprintf(d->why, sizeof d->why, "the context of CUDA device %d could not be made current", g->ordinal);
    return;
  }
  int st = D.create(&d->handle);
  em_gpu_leave(g);
  if (st) {
    snprintf(d->why, sizeof d->why, "cudnnCreate failed on CUDA device %d: %s", g->ordinal, status_text(st));
    d->handle = NULL;
    return;
  }
  d->usable = 1;
}

static void decide(em_runtime *rt, em_gpu *g, dnn_device *d) {
  d->decided = 1;
  pthread_mutex_init(&d->lock, NULL);
  decide_once(rt, g, d);
  if (d->usable)
    em_log(EM_LOG_DISPATCH, "device %d (%s, CC %d.%d): convolutions, batch norm and pooling through cuDNN %s", g->ordinal, g->info.name,
           g->cc / 10, g->cc % 10, D.version);
  else
    em_log(EM_LOG_DISPATCH, "device %d (%s, CC %d.%d): convolutions, batch norm and pooling through Ember's kernels: %s", g->ordinal,
           g->info.name, g->cc / 10, g->cc % 10, d->why);
}

static dnn_device *device_of(em_device dev, em_gpu **gpu, char *why, size_t cap) {
  em_gpu *g;
  if (dev.kind != EM_DEVICE_CUDA || em_rt_gpu(dev, &g) || dev.ordinal >= MAX_DEVICES) {
    snprintf(why, cap, "not a CUDA device Ember can use cuDNN on");
    return NULL;
  }
  dnn_device *d = &D.dev[dev.ordinal];
  em_runtime *rt = em_rt();
  pthread_mutex_lock(&D.lock);
  if (!d->decided) decide(rt, g, d);
  pthread_mutex_unlock(&D.lock);
  *gpu = g;
  return d;
}

int em_cudnn_usable(em_device dev, em_dtype dt, char *why, size_t cap) {
  const char *off = getenv("EMBER_CUDNN");
  if (off && !strcmp(off, "0")) {
    snprintf(why, cap, "EMBER_CUDNN=0");
    return 0;
  }
  if (dt != EM_F32 && dt != EM_F64 && dt != EM_F16 && dt != EM_BF16) {
    snprintf(why, cap, "cuDNN is used for f32 and f64 convolutions (f16 and bf16 with tensor cores); this one is %s",
             em_dtype_name(dt));
    return 0;
  }
  em_gpu *g;
  dnn_device *d = device_of(dev, &g, why, cap);
  if (!d) return 0;
  snprintf(why, cap, "%s", d->why); /* the reason either way: what supports it, or why not */
  if (d->usable && (dt == EM_F16 || dt == EM_BF16)) return em_cudnn_half_supports(dt, g->cc, why, cap);
  return d->usable;
}

int em_cudnn_half_supports(em_dtype dt, int cc, char *why, size_t cap) {
  /* PSEUDO_HALF_CONFIG runs on any device cuDNN supports and PSEUDO_BFLOAT16_CONFIG needs
   * Ampere (cudnnConvolutionForward's table of supported configurations), but tensor cores for
   * f16 start with Volta (7.0): below it a half convolution through cuDNN would be no faster
   * than Ember's f32 road, which rounds the same way. */
  return em_libs_half_supports(dt, cc, "convolutions", why, cap);
}

int em_cudnn_takes(const em_cudnn_geom *g, char *why, size_t cap) {
  const int64_t lim = 0x7fffffff;
  if (g->nd < 1 || g->nd > 3) {
    snprintf(why, cap, "%d spatial axes (cuDNN's convolutions take 1 to 3 here)", g->nd);
    return 0;
  }
  if (g->n < 1 || g->ci < 1 || g->co < 1 || g->groups < 1) {
    snprintf(why, cap, "an empty convolution");
    return 0;
  }
  if (g->n > lim || g->ci > lim || g->co > lim) {
    snprintf(why, cap, "a dimension above 2^31 - 1");
    return 0;
  }
  for (int i = 0; i < g->nd; i++) {
    /* bounds first: the arithmetic below then stays far inside int64 */
    if (g->img[i] > lim || g->out[i] > lim || g->k[i] > lim || g->pad[i] > lim || g->stride[i] > lim ||
        g->dil[i] > lim) {
      snprintf(why, cap, "a dimension above 2^31 - 1");
      return 0;
    }
    if (g->pad[i] < 0) { /* convolution_transpose cropping its output: no cuDNN padding says that */
      snprintf(why, cap, "axis %d's padding is negative (a cropped output)", i);
      return 0;
    }
    if (g->img[i] < 1 || g->out[i] < 1 || g->k[i] < 1 || g->stride[i] < 1 || g->dil[i] < 1) {
      snprintf(why, cap, "axis %d has an empty size, kernel, stride or dilation", i);
      return 0;
    }
    /* cuDNN pads both ends alike: the output must be what that padding gives. */
    int64_t span = g->dil[i] * (g->k[i] - 1) + 1, want = (g->img[i] + 2 * g->pad[i] - span) / g->stride[i] + 1;
    if (g->img[i] + 2 * g->pad[i] < span || want != g->out[i]) {
      snprintf(why, cap, "axis %d's padding is not the same at both ends (cuDNN pads symmetrically)", i);
      return 0;
    }
  }
  /* every tensor's element count within int, checked factor by factor (each below 2^31, so
   * a product of two never leaves int64) */
  int64_t big = g->n * (g->ci > g->co ? g->ci : g->co), filt = g->co * (g->ci / g->groups);
  for (int i = 0; i < g->nd && big <= lim && filt <= lim; i++) {
    big *= g->img[i] > g->out[i] ? g->img[i] : g->out[i];
    filt *= g->k[i];
  }
  if (big > lim || filt > lim) {
    snprintf(why, cap, "more than 2^31 - 1 elements in one tensor (cuDNN's descriptors take int)");
    return 0;
  }
  return 1;
}

/* The descriptors of one geometry: x [n, ci, spatial], y [n, co, out], w
 * [co, ci/groups, k]; 1-D problems get a unit leading spatial axis
 * (cuDNN's descriptors start at 4 dimensions). */
typedef struct descs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
} descs;

static void descs_free(descs *s) {
  if (s->x) D.tensor_destroy(s->x);
  if (s->y) D.tensor_destroy(s->y);
  if (s->w) D.filter_destroy(s->w);
  if (s->conv) D.conv_destroy(s->conv);
}

static void packed_strides(int nb, const int *dims, int *strides) {
  strides[nb - 1] = 1;
  for (int i = nb - 2; i >= 0; i--) strides[i] = strides[i + 1] * dims[i + 1];
}

static int is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

static int descs_make(const em_cudnn_geom *g, int tf32, descs *s, const char **call) {
  memset(s, 0, sizeof *s);
  int lead = g->nd == 1, sp = g->nd + lead, nb = sp + 2;
  int type = g->dt == EM_F64 ? CUDNN_DATA_DOUBLE : g->dt == EM_F16 ? CUDNN_DATA_HALF
           : g->dt == EM_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  /* Half data with a FLOAT convolution: PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG, products
   * summed in f32 and each result rounded once (TRUE_HALF_CONFIG would sum in f16). */
  int compute = is_half(g->dt) ? CUDNN_DATA_FLOAT : type;
  int xd[5], yd[5], wd[5], xs[5], ys[5], pad[3], str[3], dil[3];
  xd[0] = yd[0] = (int)g->n, xd[1] = (int)g->ci, yd[1] = (int)g->co;
  wd[0] = (int)g->co, wd[1] = (int)(g->ci / g->groups);
  for (int i = 0; i < sp; i++) {
    int j = i - lead; /* the geometry's axis, -1 for the added unit axis */
    xd[2 + i] = j < 0 ? 1 : (int)g->img[j];
    yd[2 + i] = j < 0 ? 1 : (int)g->out[j];
    wd[2 + i] = j < 0 ? 1 : (int)g->k[j];
    pad[i] = j < 0 ? 0 : (int)g->pad[j];
    str[i] = j < 0 ? 1 : (int)g->stride[j];
    dil[i] = j < 0 ? 1 : (int)g->dil[j];
  }
  packed_strides(nb, xd, xs);
  packed_strides(nb, yd, ys);
  int st;
  if ((st = D.tensor_create((void **)&s->x)) || (st = D.tensor_create((void **)&s->y)) ||
      (st = D.filter_create((void **)&s->w)) || (st = D.conv_create((void **)&s->conv))) {
    *call = "cudnnCreate*Descriptor";
    return st;
  }
  *call = "cudnnSetTensorNdDescriptor";
  if ((st = D.tensor_nd(s->x, type, nb, xd, xs)) || (st = D.tensor_nd(s->y, type, nb, yd, ys))) return st;
  *call = "cudnnSetFilterNdDescriptor";
  if ((st = D.filter_nd(s->w, type, CUDNN_TENSOR_NCHW, nb, wd))) return st;
  *call = "cudnnSetConvolutionNdDescriptor";
  if ((st = D.conv_nd(s->conv, sp, pad, str, dil, CUDNN_CROSS_CORRELATION, compute))) return st;
  *call = "cudnnSetConvolutionGroupCount";
  if ((st = D.group_count(s->conv, (int)g->groups))) return st;
  /* FMA_MATH keeps f32 exact (DEFAULT_MATH lets CC 8.0+ use TF32: cuDNN API, cudnnMathType_t).
   * Half data: TENSOR_OP_MATH, tensor cores being the point of it; their sums stay f32. */
  *call = "cudnnSetConvolutionMathType";
  return D.math_type(s->conv, is_half(g->dt) ? CUDNN_TENSOR_OP_MATH
                              : g->dt == EM_F32 && tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
}

/* ------------------------------------------------ algorithm choices --- */

#define DEFAULT_WORKSPACE_MB 256

/* EMBER_CUDNN_WORKSPACE_MB: the most workspace one convolution may use. */
static em_status workspace_limit(size_t *bytes) {
  const char *v = getenv("EMBER_CUDNN_WORKSPACE_MB");
  *bytes = (size_t)DEFAULT_WORKSPACE_MB << 20;
  if (!v || !*v) return EM_OK;
  char *end;
  long long mb = strtoll(v, &end, 10);
  if (*end || mb < 0 || mb > (1ll << 24))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "EMBER_CUDNN_WORKSPACE_MB=%.40s is not a number of MiB from 0 to 16777216 "
                   "(unset: %d)", v, DEFAULT_WORKSPACE_MB);
  *bytes = (size_t)mb << 20;
  return EM_OK;
}

static int deterministic_only(void) {
  const char *v = getenv("EMBER_CUDNN_DETERMINISTIC");
  return v && !strcmp(v, "1");
}

/* Everything the choice depends on, as text (the cache key). */
static void key_text(const em_gpu *gpu, em_cudnn_dir dir, const em_cudnn_geom *g, int tf32, size_t limit, int det,
                     char *buf, size_t cap) {
  int n = snprintf(buf, cap, "cudnn %s built-for %d; device %s cc %d; %s %s; n %lld ci %lld co %lld groups %lld",
                   D.version, D.built_for, gpu->info.name, gpu->cc, dir_names[dir], em_dtype_name(g->dt),
                   (long long)g->n, (long long)g->ci, (long long)g->co, (long long)g->groups);
  for (int i = 0; i < g->nd && n > 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, "; axis %d img %lld out %lld k %lld s %lld d %lld p %lld", i,
                  (long long)g->img[i], (long long)g->out[i], (long long)g->k[i], (long long)g->stride[i],
                  (long long)g->dil[i], (long long)g->pad[i]);
  if (n > 0 && (size_t)n < cap)
    snprintf(buf + n, cap - (size_t)n, "; math %s; workspace %zu MiB; %s",
             is_half(g->dt) ? "tensor-op, f32 accumulation" : g->dt == EM_F32 && tf32 ? "tf32" : "exact",
             limit >> 20, det ? "deterministic" : "any");
}

/* With D.lock held. */
static const choice *memo_find(uint64_t hash, const char *key) {
  for (int i = 0; i < D.n_memo; i++)
    if (D.memo[i].hash == hash && !strcmp(D.memo[i].key, key)) return &D.memo[i];
  return NULL;
}

static void memo_put(uint64_t hash, const char *key, int algo, size_t memory) {
  char *k = strdup(key);
  if (!k) return; /* no memory: the next call searches again */
  choice *c = &D.memo[D.n_memo < MEMO_MAX ? D.n_memo++ : D.next_memo++ % MEMO_MAX];
  free(c->key), free(c->why);
  *c = (choice){hash, k, algo, memory, NULL};
}

/* A problem cuDNN declined (algorithm -1 in the memo, with the message why), so later steps
 * take Ember's kernels without asking again and report the same reason. */
static void remember_decline(uint64_t hash, const char *key, const char *why) {
  pthread_mutex_lock(&D.lock);
  choice *m = (choice *)memo_find(hash, key);
  if (!m) {
    memo_put(hash, key, -1, 0);
    m = (choice *)memo_find(hash, key);
  }
  if (m) {
    m->algo = -1, m->memory = 0;
    free(m->why);
    m->why = strdup(why);
  }
  pthread_mutex_unlock(&D.lock);
}

static em_jit_key disk_key(const em_gpu *gpu, uint64_t hash, const char *text) {
  em_runtime *rt = em_rt();
  return (em_jit_key){.kind = "cudnn-algo", .input_hash = hash, .options = text, .sm = gpu->cc, .variant = 0,
                      .driver_version = rt ? rt->driver.driver_version : 0, .tool_version = (int)D.number};
}

/* A disk entry: "algo A memory B\n". 0 when it reads as one. */
static int disk_parse(const char *p, size_t n, choice *c) {
  char text[96];
  if (n >= sizeof text) return -1;
  memcpy(text, p, n);
  text[n] = '\0';
  int algo;
  unsigned long long mem;
  char tail;
  if (sscanf(text, "algo %d memory %llu%c", &algo, &mem, &tail) != 3 || tail != '\n' || algo < 0 || algo > 64)
    return -1;
  c->algo = algo, c->memory = (size_t)mem;
  return 0;
}

/* Bytes of the output of one direction (y, dx or dw). */
static size_t out_bytes(em_cudnn_dir dir, const em_cudnn_geom *g) {
  int64_t n = dir == EM_CUDNN_BWD_FILTER ? g->co * (g->ci / g->groups) : g->n * (dir == EM_CUDNN_FWD ? g->co : g->ci);
  for (int i = 0; i < g->nd; i++) n *= dir == EM_CUDNN_FWD ? g->out[i] : dir == EM_CUDNN_BWD_DATA ? g->img[i] : g->k[i];
  return (size_t)n * em_dtype_size(g->dt);
}

/* The search: runs the candidates on these buffers and keeps the fastest
 * that succeeded, fits the limit and (if asked) is deterministic. out NULL:
 * the caller's output holds what the convolution adds to (beta != 0), which
 * the trials would overwrite, so they write a scratch buffer of its size.
 * *searched: the workspace it had (less than the limit when the device
 * had less free). */
static em_status search(dnn_device *d, em_gpu *gpu, em_device dev, em_cudnn_dir dir, const em_cudnn_geom *g,
                        const descs *s, const void *a, const void *b, void *out, size_t limit, int det, choice *c,
                        size_t *searched) {
  enum { MAX_ALGOS = 16 };
  algo_perf perf[MAX_ALGOS];
  int returned = 0;
  void *ws = NULL, *scratch = NULL;
  if (!out) {
    em_status os = em_malloc(dev, out_bytes(dir, g), &scratch);
    if (os) return em_fail_context(os, "a %zu-byte output for the cuDNN search", out_bytes(dir, g));
    out = scratch;
  }
  size_t ws_bytes = limit;
  em_status es = ws_bytes ? em_malloc(dev, ws_bytes, &ws) : EM_OK;
  while (es == EM_ERR_OUT_OF_MEMORY) { /* a smaller search space rather than none; last, no workspace at all */
    em_clear_error();
    ws_bytes = ws_bytes > (1u << 20) ? ws_bytes / 2 : 0;
    es = ws_bytes ? em_malloc(dev, ws_bytes, &ws) : EM_OK;
  }
  if (es) {
    if (scratch) em_free(dev, scratch);
    return em_fail_context(es, "a %zu-byte cuDNN search workspace", ws_bytes);
  }
  *searched = ws_bytes;
  const void *da = dir == EM_CUDNN_BWD_DATA ? (const void *)s->w : (const void *)s->x;
  const void *db = dir == EM_CUDNN_FWD ? (const void *)s->w : (const void *)s->y;
  const void *dout = dir == EM_CUDNN_FWD ? (const void *)s->y : dir == EM_CUDNN_BWD_DATA ? (const void *)s->x
                                                                                           : (const void *)s->w;
  int st = D.find[dir](d->handle, da, dir == EM_CUDNN_BWD_DATA ? b : a, db, dir == EM_CUDNN_BWD_DATA ? a : b, s->conv,
                       dout, out, MAX_ALGOS, &returned, perf, ws, ws_bytes);
  em_free(dev, ws);
  if (scratch) em_free(dev, scratch); /* as the workspace: reused only by work issued after the search */
  atomic_fetch_add(&searches, 1);
  if (st)
    return em_fail(em_cudnn_declines(st) ? EM_ERR_UNSUPPORTED : EM_ERR_CUDA, "%s %s: %s on CUDA device %d", find_names[dir],
                   em_cudnn_declines(st) ? "declined" : "failed", status_text(st), gpu->ordinal);
  for (int i = 0; i < returned && i < MAX_ALGOS; i++) { /* cuDNN sorts them fastest first */
    const algo_perf *p = &perf[i];
    if (p->status != CUDNN_STATUS_SUCCESS || p->memory > ws_bytes || (det && p->determinism != CUDNN_DETERMINISTIC))
      continue;
    c->algo = p->algo, c->memory = p->memory;
    return EM_OK;
  }
  return em_fail(EM_ERR_UNSUPPORTED, "cuDNN has no %s%s algorithm for this convolution within %zu MiB of workspace "
                 "(EMBER_CUDNN_WORKSPACE_MB)", det ? "deterministic " : "", dir_names[dir], ws_bytes >> 20);
}

/* The choice for this problem: memory, then disk, then a search (stored in both). */
static em_status choose(dnn_device *d, em_gpu *gpu, em_device dev, em_cudnn_dir dir, const em_cudnn_geom *g,
                        const descs *s, int tf32, const void *a, const void *b, void *out, choice *c) {
  size_t limit;
  em_status ls = workspace_limit(&limit);
  if (ls) return ls;
  int det = deterministic_only();
  char text[1024];
  key_text(gpu, dir, g, tf32, limit, det, text, sizeof text);
  uint64_t hash = XXH3_64bits(text, strlen(text));
  char declined[512] = "";
  pthread_mutex_lock(&D.lock);
  const choice *m = memo_find(hash, text);
  if (m) *c = *m;
  if (m && m->algo < 0) snprintf(declined, sizeof declined, "%s", m->why ? m->why : "cuDNN declined it");
  c->why = NULL; /* the memo's */
  pthread_mutex_unlock(&D.lock);
  if (m && c->algo < 0) return em_fail(EM_ERR_UNSUPPORTED, "%s", declined); /* no search each step */
  if (m) return EM_OK;
  em_runtime *rt = em_rt();
  em_jit_key key = disk_key(gpu, hash, text);
  void *data = NULL;
  size_t size = 0;
  em_rt_lock();
  em_jit_cache *cache = rt ? em_rt_cache(rt) : NULL;
  em_status hit = cache ? em_jit_cache_get(cache, &key, &data, &size) : EM_ERR_NOT_FOUND;
  em_rt_unlock();
  if (hit == EM_OK && disk_parse(data, size, c) == 0) {
    free(data);
    em_log(EM_LOG_CACHE, "cuDNN %s algorithm %d from the disk cache (%s)", dir_names[dir], c->algo, text);
  } else {
    free(data);
    em_clear_error();
    size_t searched = 0;
    em_status se = search(d, gpu, dev, dir, g, s, a, b, out, limit, det, c, &searched);
    if (se == EM_ERR_UNSUPPORTED) remember_decline(hash, text, em_last_error()); /* in memory only */
    if (se) return se;
    em_log(EM_LOG_DISPATCH, "cuDNN %s: searched, algorithm %d (%zu bytes of workspace) for %s", dir_names[dir], c->algo,
           c->memory, text);
    char entry[96];
    int n = snprintf(entry, sizeof entry, "algo %d memory %zu\n", c->algo, c->memory);
    /* a search squeezed below the limit by a full device is this process's, not the key's */
    if (searched < limit) em_log(EM_LOG_CACHE, "cuDNN choice not stored: searched within %zu of %zu bytes", searched,
                                 limit);
    em_rt_lock();
    if (cache && searched == limit && em_jit_cache_put(cache, &key, entry, (size_t)n)) {
      em_log(EM_LOG_CACHE, "cuDNN choice not stored: %s", em_last_error());
      em_clear_error();
    }
    em_rt_unlock();
  }
  pthread_mutex_lock(&D.lock);
  if (!memo_find(hash, text)) memo_put(hash, text, c->algo, c->memory);
  pthread_mutex_unlock(&D.lock);
  return EM_OK;
}

/* Issues the chosen algorithm (the descriptors' math type: TF32 only when asked). */
static int run_algo(dnn_device *d, em_cudnn_dir dir, const em_cudnn_geom *g, const descs *ds, const void *a,
                    const void *b, void *out, int algo, void *ws, size_t ws_bytes, double blend) {
  /* alpha and beta: double for double data, float for float and half data (the scaling
   * parameters' reference), so a half blend is computed in f32 before the one rounding */
  double one = 1, bd = blend;
  float onef = 1, bf = (float)blend;
  const void *alpha = g->dt == EM_F64 ? (const void *)&one : (const void *)&onef;
  const void *beta = g->dt == EM_F64 ? (const void *)&bd : (const void *)&bf;
  switch (dir) {
  case EM_CUDNN_FWD:
    return D.run[dir](d->handle, alpha, ds->x, a, ds->w, b, ds->conv, algo, ws, ws_bytes, beta, ds->y, out);
  case EM_CUDNN_BWD_DATA:
    return D.run[dir](d->handle, alpha, ds->w, b, ds->y, a, ds->conv, algo, ws, ws_bytes, beta, ds->x, out);
  default:
    return D.run[dir](d->handle, alpha, ds->x, a, ds->y, b, ds->conv, algo, ws, ws_bytes, beta, ds->w, out);
  }
}

em_status em_cudnn_conv(em_device dev, em_stream *s, em_cudnn_dir dir, const em_cudnn_geom *g, const void *a,
                        const void *b, void *out, int tf32, int *algo_out) {
  return em_cudnn_conv_blend(dev, s, dir, g, a, b, out, 0.0, tf32, algo_out);
}

em_status em_cudnn_conv_blend(em_device dev, em_stream *s, em_cudnn_dir dir, const em_cudnn_geom *g, const void *a,
                              const void *b, void *out, double beta, int tf32, int *algo_out) {
  char why[256];
  em_gpu *gpu;
  dnn_device *d = device_of(dev, &gpu, why, sizeof why);
  if (!d || !d->usable) return em_fail(EM_ERR_INTERNAL, "em_cudnn_conv on a device cuDNN is not used for");
  if (em_gpu_enter(gpu)) return em_fail_context(EM_ERR_CUDA, "cuDNN on CUDA device %d", gpu->ordinal);
  descs ds = {0};
  choice c = {0};
  const char *call = "cudnnSetStream";
  em_status r = EM_OK;
  void *ws = NULL;
  pthread_mutex_lock(&d->lock); /* the handle's stream is per call */
  int st = D.set_stream(d->handle, em_stream_handle(s));
  if (!st) st = descs_make(g, tf32, &ds, &call);
  if (!st) r = choose(d, gpu, dev, dir, g, &ds, tf32, a, b, beta != 0.0 ? NULL : out, &c);
  if (!st && !r && c.memory) r = em_malloc(dev, c.memory, &ws);
  if (!st && !r) {
    call = run_names[dir];
    st = run_algo(d, dir, g, &ds, a, b, out, c.algo, ws, c.memory, beta);
  }
  pthread_mutex_unlock(&d->lock);
  if (ws) em_free(dev, ws); /* as Ember's kernels' scratch: reused only by work issued after this */
  descs_free(&ds);
  em_gpu_leave(gpu);
  if (!r && st && em_cudnn_declines(st)) { /* the descriptors or the chosen algorithm: nothing was written */
    char key[1024];
    size_t limit = 0;
    workspace_limit(&limit);
    key_text(gpu, dir, g, tf32, limit, deterministic_only(), key, sizeof key);
    r = em_fail(EM_ERR_UNSUPPORTED, "%s declined: %s (%s %s convolution, algorithm %d) on CUDA device %d", call,
                status_text(st), dir_names[dir], em_dtype_name(g->dt), c.algo, gpu->ordinal);
    remember_decline(XXH3_64bits(key, strlen(key)), key, em_last_error());
  } else if (!r && st)
    r = em_fail(EM_ERR_CUDA, "%s failed: %s (%s %s convolution, algorithm %d) on CUDA device %d", call, status_text(st),
                dir_names[dir], em_dtype_name(g->dt), c.algo, gpu->ordinal);
  if (!r && algo_out) *algo_out = c.algo;
  return r;
}

/* --------------------------------------------- for cudnn_norm_pool.c --- */

void *em_cudnn_library(void) {
  pthread_mutex_lock(&D.lock);
  void *lib = D.lib;
  pthread_mutex_unlock(&D.lock);
  return lib;
}

const char *em_cudnn_version_text(void) { return D.version; }

const char *em_cudnn_status_text(int status) { return status_text(status); }

em_status em_cudnn_enter(em_device dev, em_stream *s, em_cudnn_use *u) {
  char why[256];
  em_gpu *gpu;
  memset(u, 0, sizeof *u);
  dnn_device *d = device_of(dev, &gpu, why, sizeof why);
  if (!d || !d->usable) return em_fail(EM_ERR_INTERNAL, "cuDNN called on a device it is not used for");
  if (em_gpu_enter(gpu)) return em_fail_context(EM_ERR_CUDA, "cuDNN on CUDA device %d", gpu->ordinal);
  pthread_mutex_lock(&d->lock);
  int st = D.set_stream(d->handle, em_stream_handle(s));
  if (st) {
    pthread_mutex_unlock(&d->lock);
    em_gpu_leave(gpu);
    return em_fail(EM_ERR_CUDA, "cudnnSetStream failed: %s on CUDA device %d", status_text(st), gpu->ordinal);
  }
  *u = (em_cudnn_use){.handle = d->handle, .ordinal = gpu->ordinal, .priv = d, .priv_gpu = gpu};
  return EM_OK;
}

void em_cudnn_leave(em_cudnn_use *u) {
  dnn_device *d = u->priv;
  if (!d) return;
  pthread_mutex_unlock(&d->lock);
  em_gpu_leave(u->priv_gpu);
  u->priv = u->priv_gpu = NULL;
}

void em_cudnn_shutdown(struct em_runtime *rt) {
  pthread_mutex_lock(&D.lock);
  for (int i = 0; i < MAX_DEVICES; i++) {
    dnn_device *d = &D.dev[i];
    if (!d->decided) continue;
    if (d->handle && rt && i < rt->n_gpus && !em_gpu_enter(&rt->gpus[i])) {
      D.destroy(d->handle);
      em_gpu_leave(&rt->gpus[i]);
    }
    pthread_mutex_destroy(&d->lock);
    memset(d, 0, sizeof *d);
  }
  for (int i = 0; i < D.n_memo; i++) free(D.memo[i].key), free(D.memo[i].why);
  memset(D.memo, 0, sizeof D.memo);
  D.n_memo = D.next_memo = 0;
  D.loaded = 0;
  D.lib = NULL;
  pthread_mutex_unlock(&D.lock);
}
