/* cuBLAS for the fast mode (cublas.h).
 *
 * The library: EMBER_LIBCUBLAS names one file; else the newest of
 * libcublas.so.13 / .12 / .11 that this driver can run (a CUDA M.x library
 * needs a driver of CUDA M.0 or newer: minor-version compatibility,
 * shared/reference/cuda-compat.md; arch_table's libreq rows give each
 * major's toolkit), loaded once per process and kept mapped. A device uses
 * it when its compute capability is at or above the lowest the library
 * supports (arch_table libreq: cuBLAS 11 from 3.5, 12 from 5.0, 13 from
 * 7.5); other devices keep Ember's kernels, and the reason is reported
 * (EMBER_LOG=dispatch, em_exec_describe).
 *
 * One handle per device, made with the device's primary context current.
 * A handle's stream and workspace are per call state, so every use takes
 * the device's lock: set the stream, set a workspace, issue the product.
 * The workspace comes from the device's caching allocator for that call
 * (the cuBLAS API reference, cublasSetWorkspace: 32 MiB recommended on
 * Hopper, 4 MiB on other architectures) and is freed right after the call
 * is issued, as Ember's own kernels' scratch is: the allocator is not
 * stream-aware, which is safe because executors issue on one stream (the
 * device's default) and a freed block is reused only by work issued later.
 *
 * The ABI slice below is declared here so the library builds without the
 * toolkit. Source of every value and prototype: the CUDA 13.0 toolkit's
 * cublas_api.h and library_types.h (stable since cuBLAS 11.0, which
 * introduced cublasComputeType_t). */
#include "cublas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_table.h"
#include "cudnn.h"
#include "error.h"
#include "load.h"
#include "runtime.h"

typedef struct cublasContext *cublasHandle_t;
enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16, /* cuBLAS 11.0+ (cublasMath_t) */
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_GEMM_DEFAULT = -1,
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
  LIB_MAJOR_VERSION = 0, /* libraryPropertyType */
  LIB_MINOR_VERSION = 1,
  LIB_PATCH_LEVEL = 2,
};
typedef int (*fn_create)(cublasHandle_t *);
typedef int (*fn_destroy)(cublasHandle_t);
typedef int (*fn_set_stream)(cublasHandle_t, CUstream);
typedef int (*fn_set_workspace)(cublasHandle_t, void *, size_t);
typedef int (*fn_set_math)(cublasHandle_t, int);
typedef int (*fn_property)(int, int *);
typedef const char *(*fn_status_name)(int);
typedef int (*fn_gemm_batched)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int, long long,
                               const void *, int, int, long long, const void *, void *, int, int, long long, int, int,
                               int);
typedef int (*fn_gemm)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int, const void *, int,
                       int, const void *, void *, int, int, int, int);
/* cublasSgemv_v2 / cublasDgemv_v2 (handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy) and
 * their strided batches (..., A, lda, strideA, x, incx, stridex, beta, y, incy, stridey,
 * batchCount): cublas_api.h of CUDA 13.0, the element type float or double (void here). */
typedef int (*fn_gemv)(cublasHandle_t, int, int, int, const void *, const void *, int, const void *, int, const void *,
                       void *, int);
typedef int (*fn_gemv_batched)(cublasHandle_t, int, int, int, const void *, const void *, int, long long, const void *,
                               int, long long, const void *, void *, int, long long, int);

#define MAX_DEVICES 64

typedef struct blas_device {
  int decided;            /* usable / why hold the answer */
  int usable;
  char why[256];
  cublasHandle_t handle;
  pthread_mutex_t lock;   /* a handle's stream and workspace are set per call */
} blas_device;

static struct {
  pthread_mutex_t lock;   /* loading, deciding, shutdown */
  int loaded;             /* the search ran */
  void *lib;
  char path[512];
  char version[32];
  int major, minor, patch;
  char why[384];          /* why no library, when lib is NULL */
  fn_create create;
  fn_destroy destroy;
  fn_set_stream set_stream;
  fn_set_workspace set_workspace;
  fn_set_math set_math;
  fn_status_name status_name; /* optional (cuBLAS 11.4.2+) */
  fn_gemm gemm;
  fn_gemm_batched gemm_batched;
  fn_gemv sgemv, dgemv;                     /* in every cuBLAS 11+ (the legacy BLAS-2 API) */
  fn_gemv_batched sgemv_batched, dgemv_batched; /* optional: newer releases only [U: which one added them] */
  blas_device dev[MAX_DEVICES];
} B = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *status_text(int st) {
  const char *n = B.status_name ? B.status_name(st) : NULL;
  static _Thread_local char buf[40];
  if (n) return n;
  snprintf(buf, sizeof buf, "cuBLAS status %d", st);
  return buf;
}

int em_cublas_supports(int major, int minor, int patch, int driver_version, int cc, char *why, size_t cap) {
  int need_driver = major * 1000;
  if (driver_version < need_driver) {
    snprintf(why, cap,
             "cuBLAS %d.%d.%d needs a CUDA %d.0 driver or newer (minor-version compatibility); this driver is CUDA "
             "%d.%d",
             major, minor, patch, major, driver_version / 1000, driver_version % 1000 / 10);
    return 0;
  }
  const char *row = NULL;
  int lowest = em_libreq_lowest_cc("cublas", major, minor, patch, NULL, &row);
  if (!lowest) {
    snprintf(why, cap, "cuBLAS %d.%d.%d is not in Ember's table of cuBLAS releases (arch_table libreq): not used", major,
             minor, patch);
    return 0;
  }
  if (cc < lowest) {
    snprintf(why, cap,
             "cuBLAS %d supports compute capability %d.%d and newer; this device is %d.%d (Ember's own kernels run)",
             major, lowest / 10, lowest % 10, cc / 10, cc % 10);
    return 0;
  }
  snprintf(why, cap, "cuBLAS %d.%d.%d supports CC %d.%d on a CUDA %d.%d driver", major, minor, patch, cc / 10, cc % 10,
           driver_version / 1000, driver_version % 1000 / 10);
  return 1;
}

/* Resolves the entry points of an opened library and reads its version. */
static int bind(void *h, char *why, size_t cap) {
  fn_property prop = (fn_property)dlsym(h, "cublasGetProperty");
  B.create = (fn_create)dlsym(h, "cublasCreate_v2");
  B.destroy = (fn_destroy)dlsym(h, "cublasDestroy_v2");
  B.set_stream = (fn_set_stream)dlsym(h, "cublasSetStream_v2");
  B.set_workspace = (fn_set_workspace)dlsym(h, "cublasSetWorkspace_v2");
  B.set_math = (fn_set_math)dlsym(h, "cublasSetMathMode");
  B.status_name = (fn_status_name)dlsym(h, "cublasGetStatusName");
  B.gemm = (fn_gemm)dlsym(h, "cublasGemmEx");
  B.gemm_batched = (fn_gemm_batched)dlsym(h, "cublasGemmStridedBatchedEx");
  B.sgemv = (fn_gemv)dlsym(h, "cublasSgemv_v2");
  B.dgemv = (fn_gemv)dlsym(h, "cublasDgemv_v2");
  /* Present in CUDA 13.0's cublas_api.h; absent in older releases [U: added in an 11.x
   * release]. Without them a strided batch of matvecs is one gemv per member. */
  B.sgemv_batched = (fn_gemv_batched)dlsym(h, "cublasSgemvStridedBatched");
  B.dgemv_batched = (fn_gemv_batched)dlsym(h, "cublasDgemvStridedBatched");
  const char *missing = !prop ? "cublasGetProperty" : !B.create ? "cublasCreate_v2" : !B.destroy ? "cublasDestroy_v2"
                        : !B.set_stream ? "cublasSetStream_v2" : !B.set_workspace ? "cublasSetWorkspace_v2"
                        : !B.set_math ? "cublasSetMathMode" : !B.gemm ? "cublasGemmEx"
                        : !B.gemm_batched ? "cublasGemmStridedBatchedEx" : !B.sgemv ? "cublasSgemv_v2"
                        : !B.dgemv ? "cublasDgemv_v2" : NULL;
  if (missing) {
    snprintf(why, cap, "%s does not export %s (cuBLAS 11.0 or newer is needed)", B.path, missing);
    return -1;
  }
  if (prop(LIB_MAJOR_VERSION, &B.major) || prop(LIB_MINOR_VERSION, &B.minor) || prop(LIB_PATCH_LEVEL, &B.patch)) {
    snprintf(why, cap, "%s: cublasGetProperty failed", B.path);
    return -1;
  }
  snprintf(B.version, sizeof B.version, "%d.%d.%d", B.major, B.minor, B.patch);
  return 0;
}

/* With B.lock held: the search, once. */
static void load(int driver_version) {
  if (B.loaded) return;
  B.loaded = 1;
  const char *forced = getenv("EMBER_LIBCUBLAS");
  if (forced && *forced) {
    snprintf(B.path, sizeof B.path, "%s", forced);
    B.lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!B.lib) snprintf(B.why, sizeof B.why, "EMBER_LIBCUBLAS=%s cannot be loaded: %s", forced, dlerror());
  } else {
    /* Newest first, skipping a major this driver cannot run. */
    static const char *const sonames[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"};
    static const int majors[] = {13, 12, 11};
    char skipped[160] = "";
    for (size_t i = 0; i < 3 && !B.lib; i++) {
      if (driver_version < majors[i] * 1000) {
        size_t n = strlen(skipped);
        snprintf(skipped + n, sizeof skipped - n, "%s%s", n ? ", " : "", sonames[i]);
        continue;
      }
      B.lib = em_libs_open(sonames[i], B.path, sizeof B.path);
    }
    if (!B.lib)
      snprintf(B.why, sizeof B.why, "no cuBLAS found for this CUDA %d.%d driver (libcublas.so.13/.12/.11 under the "
               "loader's path, CUDA_HOME or /usr/local/cuda%s%s%s)", driver_version / 1000, driver_version % 1000 / 10,
               skipped[0] ? "; too new for the driver: " : "", skipped, "");
  }
  if (B.lib && bind(B.lib, B.why, sizeof B.why)) B.lib = NULL; /* mapped for good (RTLD_NODELETE); not used */
  if (B.lib) em_log(EM_LOG_DISPATCH, "cuBLAS %s loaded from %s", B.version, B.path);
  else em_log(EM_LOG_DISPATCH, "cuBLAS not used: %s", B.why);
}

static int env_off(void) {
  const char *v = getenv("EMBER_CUBLAS");
  return v && !strcmp(v, "0");
}

static void decide_once(em_runtime *rt, em_gpu *g, blas_device *d);

/* With B.lock held: whether device g may use the library (logged either way). */
static void decide(em_runtime *rt, em_gpu *g, blas_device *d) {
  decide_once(rt, g, d);
  if (!d->usable)
    em_log(EM_LOG_DISPATCH, "device %d (%s, CC %d.%d): products through Ember's kernels: %s", g->ordinal, g->info.name,
           g->cc / 10, g->cc % 10, d->why);
}

static void decide_once(em_runtime *rt, em_gpu *g, blas_device *d) {
  d->decided = 1;
  pthread_mutex_init(&d->lock, NULL);
  load(rt->driver.driver_version);
  if (!B.lib) {
    snprintf(d->why, sizeof d->why, "%s", B.why);
    return;
  }
  if (!em_cublas_supports(B.major, B.minor, B.patch, rt->driver.driver_version, g->cc, d->why, sizeof d->why)) return;
  if (em_gpu_enter(g)) {
    snprintf(d->why, sizeof d->why, "the context of CUDA device %d could not be made current", g->ordinal);
    return;
  }
  const char *call = "cublasCreate_v2";
  int st = B.create(&d->handle);
  /* DISALLOW_REDUCED_PRECISION_REDUCTION: a half product's split-K partial sums are reduced in
   * f32, not in the half output type (cuBLAS's default allows the latter: several roundings,
   * where the half road promises one; it changes nothing for f32 and f64 outputs). */
  if (!st && (st = B.set_math(d->handle, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))) {
    call = "cublasSetMathMode";
    B.destroy(d->handle); /* made but not usable: not kept, so not leaked */
  }
  em_gpu_leave(g);
  if (st) {
    snprintf(d->why, sizeof d->why, "%s failed on CUDA device %d: %s", call, g->ordinal, status_text(st));
    d->handle = NULL;
    return;
  }
  d->usable = 1;
  em_log(EM_LOG_DISPATCH, "device %d (%s, CC %d.%d): products through cuBLAS %s", g->ordinal, g->info.name, g->cc / 10,
         g->cc % 10, B.version);
}

/* The device's entry, decided; NULL with why when dev is not a CUDA device. */
static blas_device *device_of(em_device dev, em_gpu **gpu, char *why, size_t cap) {
  em_gpu *g;
  if (dev.kind != EM_DEVICE_CUDA || em_rt_gpu(dev, &g) || dev.ordinal >= MAX_DEVICES) {
    snprintf(why, cap, "not a CUDA device Ember can use cuBLAS on");
    return NULL;
  }
  blas_device *d = &B.dev[dev.ordinal];
  em_runtime *rt = em_rt();
  pthread_mutex_lock(&B.lock);
  if (!d->decided) decide(rt, g, d);
  pthread_mutex_unlock(&B.lock);
  *gpu = g;
  return d;
}

int em_cublas_usable(em_device dev, em_dtype dt, char *why, size_t cap) {
  if (env_off()) {
    snprintf(why, cap, "EMBER_CUBLAS=0");
    return 0;
  }
  if (dt != EM_F32 && dt != EM_F64 && dt != EM_F16 && dt != EM_BF16) {
    snprintf(why, cap, "cuBLAS is used for f32 and f64 products (f16 and bf16 with tensor cores); this one is %s",
             em_dtype_name(dt));
    return 0;
  }
  em_gpu *g;
  blas_device *d = device_of(dev, &g, why, cap);
  if (!d) return 0;
  snprintf(why, cap, "%s", d->why); /* the reason either way: what supports it, or why not */
  if (d->usable && (dt == EM_F16 || dt == EM_BF16)) return em_cublas_half_supports(dt, g->cc, why, cap);
  return d->usable;
}

int em_cublas_half_supports(em_dtype dt, int cc, char *why, size_t cap) {
  /* cuBLAS computes f16 from CC 5.3 and takes bf16 on some older devices too, but without
   * tensor cores (f16 ones from Volta, 7.0; bf16 ones from Ampere, 8.0) such a product is no
   * faster than Ember's f32 road, and cuBLAS's bf16 support below 8.0 varies by release and
   * device: CUBLAS_STATUS_NOT_SUPPORTED for a bf16 cublasGemmStridedBatchedEx on a P100
   * (6.0) with CUDA 11.3 while a T4 (7.5) ran it (pytorch/pytorch#57773). So half products go
   * to cuBLAS only where the tensor cores for their dtype are. */
  return em_libs_half_supports(dt, cc, "products", why, cap);
}

#define API __attribute__((visibility("default")))

API em_status em_device_library_use(em_device dev, const char *library, int *used, char *why, size_t cap) {
  if (!library || !used || (!why && cap)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_device_library_use: NULL argument");
  char text[256];
  if (!strcmp(library, "cublas")) *used = em_cublas_usable(dev, EM_F32, text, sizeof text);
  else if (!strcmp(library, "cudnn")) *used = em_cudnn_usable(dev, EM_F32, text, sizeof text);
  else return em_fail(EM_ERR_NOT_FOUND, "em_device_library_use: no library '%.40s' (cublas, cudnn)", library);
  if (cap) snprintf(why, cap, "%s", text);
  return EM_OK;
}

int em_cublas_is_gemv(em_dtype dt, int m, int n, int tf32) {
  return (dt == EM_F64 || (dt == EM_F32 && !tf32)) && (m == 1 || n == 1);
}

/* One matvec in cublas<t>gemv's terms: y = alpha op(M) x + beta y, M stored rows x cols. */
typedef struct gemv_form {
  int trans, rows, cols, ldm, incx, incy;
  const void *mat, *x;
  void *y;
  long long stride_mat, stride_x, stride_y;
} gemv_form;

/* g (column-major C = op(A) op(B), m == 1 or n == 1) as a gemv. n == 1: C's one column is
 * op(A) (m x k) times op(B)'s first column, which is B's first column (incx 1) or, for op(B)
 * = B^T, B's first row (incx ldb); C's column is contiguous (incy 1). m == 1: C's row, C^T
 * (incy ldc), is op(B)^T (n x k) times op(A)'s row as a column: A's first row (incx lda) or,
 * for op(A) = A^T, A's first column (incx 1); op(B)^T is B^T when B is not transposed
 * (stored k x n: trans T) and B itself when it is (stored n x k: trans N). */
static void gemv_of(const em_cublas_gemm *g, gemv_form *v) {
  if (g->n == 1) {
    v->trans = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    v->rows = g->ta ? g->k : g->m, v->cols = g->ta ? g->m : g->k, v->ldm = g->lda;
    v->mat = g->a, v->stride_mat = g->stride_a;
    v->x = g->b, v->incx = g->tb ? g->ldb : 1, v->stride_x = g->stride_b;
    v->incy = 1;
  } else {
    v->trans = g->tb ? CUBLAS_OP_N : CUBLAS_OP_T;
    v->rows = g->tb ? g->n : g->k, v->cols = g->tb ? g->k : g->n, v->ldm = g->ldb;
    v->mat = g->b, v->stride_mat = g->stride_b;
    v->x = g->a, v->incx = g->ta ? 1 : g->lda, v->stride_x = g->stride_a;
    v->incy = g->ldc;
  }
  v->y = g->c, v->stride_y = g->stride_c;
}

/* With the handle's lock held: g as gemv calls; the name of the failing call in *call. */
static int gemv_issue(blas_device *d, const em_cublas_gemm *g, const void *pa, const void *pb, const char **call) {
  gemv_form v;
  gemv_of(g, &v);
  int f64 = g->dt == EM_F64;
  fn_gemv one = f64 ? B.dgemv : B.sgemv;
  fn_gemv_batched many = f64 ? B.dgemv_batched : B.sgemv_batched;
  if (g->batch > 1 && many) {
    *call = f64 ? "cublasDgemvStridedBatched" : "cublasSgemvStridedBatched";
    return many(d->handle, v.trans, v.rows, v.cols, pa, v.mat, v.ldm, v.stride_mat, v.x, v.incx, v.stride_x, pb, v.y,
                v.incy, v.stride_y, g->batch);
  }
  *call = f64 ? "cublasDgemv_v2" : "cublasSgemv_v2";
  size_t es = f64 ? 8 : 4;
  for (int b = 0; b < g->batch; b++) {
    int st = one(d->handle, v.trans, v.rows, v.cols, pa, (const char *)v.mat + (size_t)(b * v.stride_mat) * es, v.ldm,
                 (const char *)v.x + (size_t)(b * v.stride_x) * es, v.incx, pb,
                 (char *)v.y + (size_t)(b * v.stride_y) * es, v.incy);
    if (st) return st;
  }
  return 0;
}

static size_t workspace_bytes(const em_gpu *g) { return g->cc >= 90 ? (32u << 20) : (4u << 20); }

em_status em_cublas_gemm_run(em_device dev, em_stream *s, const em_cublas_gemm *g) {
  char why[256];
  em_gpu *gpu;
  blas_device *d = device_of(dev, &gpu, why, sizeof why);
  if (!d || !d->usable) return em_fail(EM_ERR_INTERNAL, "em_cublas_gemm_run on a device cuBLAS is not used for");
  /* f16 and bf16: operands and output of that type, f32 accumulation (COMPUTE_32F, alpha and
   * beta as float), each result rounded once into C: cublasGemmEx's type table (CUDA_R_16F /
   * CUDA_R_16BF inputs with the same C under CUBLAS_COMPUTE_32F). CUBLAS_GEMM_DEFAULT: since
   * cuBLAS 11 tensor-core algorithms are chosen without a _TENSOR_OP algorithm or math mode. */
  int f64 = g->dt == EM_F64, half = g->dt == EM_F16 || g->dt == EM_BF16;
  int type = f64 ? CUDA_R_64F : g->dt == EM_F16 ? CUDA_R_16F : g->dt == EM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  int compute = f64 ? CUBLAS_COMPUTE_64F : g->tf32 && !half ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  double alpha = g->alpha, beta = g->beta;
  float alpha_f = (float)alpha, beta_f = (float)beta;
  const void *pa = f64 ? (const void *)&alpha : (const void *)&alpha_f;
  const void *pb = f64 ? (const void *)&beta : (const void *)&beta_f;
  size_t ws_bytes = workspace_bytes(gpu);
  void *ws = NULL;
  em_status es = em_malloc(dev, ws_bytes, &ws);
  if (es) return em_fail_context(es, "a %zu-byte cuBLAS workspace", ws_bytes);
  em_status r = EM_OK;
  if (em_gpu_enter(gpu)) {
    em_free(dev, ws);
    return em_fail_context(EM_ERR_CUDA, "cuBLAS on CUDA device %d", gpu->ordinal);
  }
  pthread_mutex_lock(&d->lock);
  const char *call = "cublasSetStream_v2";
  int st = B.set_stream(d->handle, em_stream_handle(s));
  if (!st) call = "cublasSetWorkspace_v2", st = B.set_workspace(d->handle, ws, ws_bytes);
  if (!st) {
    int opa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (em_cublas_is_gemv(g->dt, g->m, g->n, g->tf32)) {
      st = gemv_issue(d, g, pa, pb, &call);
    } else if (g->batch == 1) {
      call = "cublasGemmEx";
      st = B.gemm(d->handle, opa, opb, g->m, g->n, g->k, pa, g->a, type, g->lda, g->b, type, g->ldb, pb, g->c, type,
                  g->ldc, compute, CUBLAS_GEMM_DEFAULT);
    } else {
      call = "cublasGemmStridedBatchedEx";
      st = B.gemm_batched(d->handle, opa, opb, g->m, g->n, g->k, pa, g->a, type, g->lda, g->stride_a, g->b, type, g->ldb,
                          g->stride_b, pb, g->c, type, g->ldc, g->stride_c, g->batch, compute, CUBLAS_GEMM_DEFAULT);
    }
  }
  pthread_mutex_unlock(&d->lock);
  em_gpu_leave(gpu);
  em_free(dev, ws); /* as Ember's kernels' scratch: reused only by work issued after this */
  /* CUBLAS_STATUS_NOT_SUPPORTED (15) and _ARCH_MISMATCH (8) (cublas_api.h): this cuBLAS declines the
   * product on this GPU (a type combination a release lacks, pytorch/pytorch#57773) and wrote
   * nothing: EM_ERR_UNSUPPORTED, and the op takes Ember's kernels. Any other status fails it. */
  const int declined = st == 15 || st == 8;
  if (st)
    r = em_fail(declined ? EM_ERR_UNSUPPORTED : EM_ERR_CUDA,
                "%s %s: %s (m %d, n %d, k %d, lda %d, ldb %d, ldc %d, batch %d, %s%s) on CUDA device %d", call,
                declined ? "declined" : "failed", status_text(st), g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->batch,
                em_dtype_name(g->dt), half ? ", f32 accumulation" : g->tf32 ? ", TF32" : "", gpu->ordinal);
  return r;
}

int em_cublas_major(void) {
  pthread_mutex_lock(&B.lock);
  int m = B.lib ? B.major : 0;
  pthread_mutex_unlock(&B.lock);
  return m;
}

const char *em_cublas_status_text(int st) { return status_text(st); }

const char *em_cublas_library(char *version, size_t cap) {
  pthread_mutex_lock(&B.lock);
  snprintf(version, cap, "%s", B.lib ? B.version : "");
  const char *p = B.lib ? B.path : "";
  pthread_mutex_unlock(&B.lock);
  return p;
}

void em_cublas_shutdown(struct em_runtime *rt) {
  pthread_mutex_lock(&B.lock);
  for (int i = 0; i < MAX_DEVICES; i++) {
    blas_device *d = &B.dev[i];
    if (!d->decided) continue;
    if (d->handle && rt && i < rt->n_gpus && !em_gpu_enter(&rt->gpus[i])) {
      B.destroy(d->handle);
      em_gpu_leave(&rt->gpus[i]);
    }
    pthread_mutex_destroy(&d->lock);
    memset(d, 0, sizeof *d);
  }
  /* The library stays mapped (RTLD_NODELETE) and bound; the next runtime
   * searches again, so a changed EMBER_LIBCUBLAS takes effect. */
  B.loaded = 0;
  B.lib = NULL;
  pthread_mutex_unlock(&B.lock);
}
