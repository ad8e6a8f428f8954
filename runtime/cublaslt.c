/* cuBLASLt for the fast mode's fused products (cublaslt.h).
 *
 * The library: EMBER_LIBCUBLASLT names one file; else libcublasLt.so.M beside the loaded
 * cuBLAS, M its major (cuBLAS itself links against the cuBLASLt of its release: mixing majors
 * or releases is never tried; load()). It is used on a device only where cuBLAS is (em_cublas_usable: the same
 * support rule, portable mode never, EMBER_CUBLAS=0 too), and not with EMBER_CUBLASLT=0.
 *
 * One cublasLtHandle_t per device, made with the device's primary context current. A matmul
 * takes its stream and workspace per call (unlike a cuBLAS handle), so the handle needs no
 * lock of its own [U: that one cublasLtHandle_t may be used by several host threads at once;
 * the handle holds no per-call state Ember sets]; its descriptors are made and destroyed around each call (host work, cheap
 * beside the product; caching them per shape is left for later). The workspace comes from the
 * device's caching allocator, as cuBLAS's does (cublas.c): freed right after the call is
 * issued, reused only by work issued later on the same stream.
 *
 * The ABI slice below is declared here so the library builds without the toolkit. Source of
 * every value and prototype: cublasLt.h of the CUDA 13.0 toolkit (cuBLASLt 13.1); the
 * attributes used here have kept their values since cuBLAS 11.0 [U for 11.x releases before
 * 11.4: not checked]. */
#include "cublaslt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "load.h"
#include "runtime.h"

typedef struct cublasLtContext *cublasLtHandle_t;
typedef void *cublasLtMatmulDesc_t, *cublasLtMatrixLayout_t, *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

enum {
  LT_SUCCESS = 0,
  LT_NOT_SUPPORTED = 15,   /* CUBLAS_STATUS_NOT_SUPPORTED */
  LT_OP_N = 0,
  LT_OP_T = 1,
  LT_COMPUTE_32F = 68,
  LT_COMPUTE_32F_FAST_TF32 = 77,
  LT_R_32F = 0,            /* cudaDataType_t CUDA_R_32F */
  DESC_TRANSA = 3,         /* cublasLtMatmulDescAttributes_t: int32_t */
  DESC_TRANSB = 4,         /* int32_t */
  DESC_EPILOGUE = 7,       /* uint32_t */
  DESC_BIAS_POINTER = 8,   /* const void * */
  PREF_MAX_WORKSPACE_BYTES = 1, /* cublasLtMatmulPreferenceAttributes_t: uint64_t */
  PREF_MIN_ALIGNMENT_A_BYTES = 5, /* _B 6, _C 7, _D 8: uint32_t, default 256 */
  EPI_DEFAULT = 1,         /* cublasLtEpilogue_t */
  EPI_RELU = 2,
  EPI_BIAS = 4,
  EPI_GELU = 32,
};

typedef int (*fn_create)(cublasLtHandle_t *);
typedef int (*fn_destroy)(cublasLtHandle_t);
typedef int (*fn_property)(int, int *);
typedef int (*fn_desc_create)(cublasLtMatmulDesc_t *, int, int);
typedef int (*fn_desc_destroy)(cublasLtMatmulDesc_t);
typedef int (*fn_desc_set)(cublasLtMatmulDesc_t, int, const void *, size_t);
typedef int (*fn_layout_create)(cublasLtMatrixLayout_t *, int, uint64_t, uint64_t, int64_t);
typedef int (*fn_layout_destroy)(cublasLtMatrixLayout_t);
typedef int (*fn_pref_create)(cublasLtMatmulPreference_t *);
typedef int (*fn_pref_destroy)(cublasLtMatmulPreference_t);
typedef int (*fn_pref_set)(cublasLtMatmulPreference_t, int, const void *, size_t);
typedef int (*fn_heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                            cublasLtMatmulHeuristicResult_t *, int *);
typedef int (*fn_matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,
                         const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t,
                         void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, CUstream);

#define MAX_DEVICES 64

typedef struct lt_device {
  int decided, usable;
  char why[256];
  cublasLtHandle_t handle;
} lt_device;

static struct {
  pthread_mutex_t lock;
  int loaded;
  void *lib;
  char path[512];
  char version[32];
  char why[384];
  fn_create create;
  fn_destroy destroy;
  fn_desc_create desc_create;
  fn_desc_destroy desc_destroy;
  fn_desc_set desc_set;
  fn_layout_create layout_create;
  fn_layout_destroy layout_destroy;
  fn_pref_create pref_create;
  fn_pref_destroy pref_destroy;
  fn_pref_set pref_set;
  fn_heuristic heuristic;
  fn_matmul matmul;
  lt_device dev[MAX_DEVICES];
} L = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int bind(void *h, char *why, size_t cap) {
#define SYM(field, type, name) (L.field = (type)dlsym(h, name)) ? NULL : name
  fn_property prop = (fn_property)dlsym(h, "cublasLtGetProperty");
  const char *missing = !prop ? "cublasLtGetProperty" : NULL;
  if (!missing) missing = SYM(create, fn_create, "cublasLtCreate");
  if (!missing) missing = SYM(destroy, fn_destroy, "cublasLtDestroy");
  if (!missing) missing = SYM(desc_create, fn_desc_create, "cublasLtMatmulDescCreate");
  if (!missing) missing = SYM(desc_destroy, fn_desc_destroy, "cublasLtMatmulDescDestroy");
  if (!missing) missing = SYM(desc_set, fn_desc_set, "cublasLtMatmulDescSetAttribute");
  if (!missing) missing = SYM(layout_create, fn_layout_create, "cublasLtMatrixLayoutCreate");
  if (!missing) missing = SYM(layout_destroy, fn_layout_destroy, "cublasLtMatrixLayoutDestroy");
  if (!missing) missing = SYM(pref_create, fn_pref_create, "cublasLtMatmulPreferenceCreate");
  if (!missing) missing = SYM(pref_destroy, fn_pref_destroy, "cublasLtMatmulPreferenceDestroy");
  if (!missing) missing = SYM(pref_set, fn_pref_set, "cublasLtMatmulPreferenceSetAttribute");
  if (!missing) missing = SYM(heuristic, fn_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  if (!missing) missing = SYM(matmul, fn_matmul, "cublasLtMatmul");
#undef SYM
  if (missing) {
    snprintf(why, cap, "%s does not export %s", L.path, missing);
    return -1;
  }
  int v[3];
  for (int i = 0; i < 3; i++)
    if (prop(i, &v[i])) {
      snprintf(why, cap, "%s: cublasLtGetProperty failed", L.path);
      return -1;
    }
  snprintf(L.version, sizeof L.version, "%d.%d.%d", v[0], v[1], v[2]);
  return 0;
}

/* With L.lock held: the search, once. major and blas_path: the loaded cuBLAS's. cuBLASLt ships
 * beside cuBLAS, and a cuBLAS runs with the cuBLASLt of its own release: the library is the
 * libcublasLt.so.M in the loaded cuBLAS's folder; only a cuBLAS found by soname (the loader's
 * path) lets cuBLASLt be found the same way. So a cuBLAS named by EMBER_LIBCUBLAS (a test
 * double) never pairs with some other cuBLASLt on the machine. */
static void load(int major, const char *blas_path) {
  if (L.loaded) return;
  L.loaded = 1;
  const char *forced = getenv("EMBER_LIBCUBLASLT");
  char soname[32];
  snprintf(soname, sizeof soname, "libcublasLt.so.%d", major);
  const char *slash = strrchr(blas_path, '/');
  if (forced && *forced) {
    snprintf(L.path, sizeof L.path, "%s", forced);
    L.lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!L.lib) snprintf(L.why, sizeof L.why, "EMBER_LIBCUBLASLT=%s cannot be loaded: %s", forced, dlerror());
  } else if (slash) {
    snprintf(L.path, sizeof L.path, "%.*s/%s", (int)(slash - blas_path), blas_path, soname);
    L.lib = dlopen(L.path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!L.lib) snprintf(L.why, sizeof L.why, "no %s beside cuBLAS (%s): %s", soname, blas_path, dlerror());
  } else {
    L.lib = em_libs_open(soname, L.path, sizeof L.path);
    if (!L.lib) snprintf(L.why, sizeof L.why, "no %s (cuBLAS %d's cuBLASLt) found", soname, major);
  }
  if (L.lib && bind(L.lib, L.why, sizeof L.why)) L.lib = NULL; /* stays mapped (RTLD_NODELETE); not used */
  if (L.lib) em_log(EM_LOG_DISPATCH, "cuBLASLt %s loaded from %s", L.version, L.path);
  else em_log(EM_LOG_DISPATCH, "cuBLASLt not used: %s", L.why);
}

int em_cublaslt_usable(em_device dev, char *why, size_t cap) {
  const char *off = getenv("EMBER_CUBLASLT");
  if (off && !strcmp(off, "0")) {
    snprintf(why, cap, "EMBER_CUBLASLT=0");
    return 0;
  }
  if (!em_cublas_usable(dev, EM_F32, why, cap)) return 0; /* why: cuBLAS's reason */
  em_gpu *g;
  if (em_rt_gpu(dev, &g) || dev.ordinal >= MAX_DEVICES) {
    snprintf(why, cap, "not a CUDA device Ember can use cuBLASLt on");
    return 0;
  }
  int major = em_cublas_major();
  char blas_version[32], blas_path[512];
  snprintf(blas_path, sizeof blas_path, "%s", em_cublas_library(blas_version, sizeof blas_version));
  pthread_mutex_lock(&L.lock);
  lt_device *d = &L.dev[dev.ordinal];
  if (!d->decided) {
    d->decided = 1;
    load(major, blas_path);
    if (!L.lib) snprintf(d->why, sizeof d->why, "%s", L.why);
    else if (em_gpu_enter(g)) snprintf(d->why, sizeof d->why, "the context of CUDA device %d could not be made current", g->ordinal);
    else {
      int st = L.create(&d->handle);
      em_gpu_leave(g);
      if (st) {
        snprintf(d->why, sizeof d->why, "cublasLtCreate failed on CUDA device %d: %s", g->ordinal,
                 em_cublas_status_text(st));
        d->handle = NULL;
      } else {
        d->usable = 1;
        snprintf(d->why, sizeof d->why, "cuBLASLt %s", L.version);
      }
    }
  }
  int ok = d->usable;
  snprintf(why, cap, "%s", d->why);
  pthread_mutex_unlock(&L.lock);
  return ok;
}

const char *em_cublaslt_epilogue_name(int bias, em_lt_act act) {
  if (act == EM_LT_ACT_RELU) return bias ? "RELU_BIAS" : "RELU";
  if (act == EM_LT_ACT_GELU) return bias ? "GELU_BIAS" : "GELU";
  return bias ? "BIAS" : "DEFAULT";
}

/* The largest power of two up to 256 dividing p's address: what cuBLASLt may assume of it.
 * The heuristic assumes 256 bytes unless the preference says less (MIN_ALIGNMENT_*_BYTES,
 * cublasLt.h), and an algorithm chosen for 256 may use wide loads a pointer into a view (an
 * operand sliced one element in) does not allow. */
static uint32_t alignment_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t r = 256;
  while (r > 1 && a % r) r /= 2;
  return r;
}

/* The workspace cuBLASLt may use: as cuBLAS's (cublas.c), 32 MiB on Hopper and newer, else 4 MiB. */
static size_t workspace_bytes(const em_gpu *g) { return g->cc >= 90 ? (32u << 20) : (4u << 20); }

em_status em_cublaslt_matmul(em_device dev, em_stream *s, const em_cublas_gemm *g, const void *bias, em_lt_act act,
                             int *ran, char *why, size_t cap) {
  *ran = 0;
  em_gpu *gpu;
  if (g->dt != EM_F32 || g->batch != 1 || em_rt_gpu(dev, &gpu) || dev.ordinal >= MAX_DEVICES ||
      !L.dev[dev.ordinal].usable)
    return em_fail(EM_ERR_INTERNAL, "em_cublaslt_matmul: not an f32 single product on a device cuBLASLt is used for");
  lt_device *d = &L.dev[dev.ordinal];
  unsigned epi = (unsigned)((bias ? EPI_BIAS : 0) | (act == EM_LT_ACT_RELU ? EPI_RELU : act == EM_LT_ACT_GELU ? EPI_GELU : 0));
  if (!epi) epi = EPI_DEFAULT;
  int32_t opa = g->ta ? LT_OP_T : LT_OP_N, opb = g->tb ? LT_OP_T : LT_OP_N;
  int compute = g->tf32 ? LT_COMPUTE_32F_FAST_TF32 : LT_COMPUTE_32F;
  float alpha = (float)g->alpha, beta = (float)g->beta;
  uint64_t ws_bytes = workspace_bytes(gpu);
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  void *ws = NULL;
  em_status r = EM_OK;
  if (em_gpu_enter(gpu)) return em_fail_context(EM_ERR_CUDA, "cuBLASLt on CUDA device %d", gpu->ordinal);
  /* Every call below returns a status; the first failure stops the chain and is named. */
  const char *call = "cublasLtMatmulDescCreate";
  int st = L.desc_create(&op, compute, LT_R_32F);
  if (!st) call = "cublasLtMatmulDescSetAttribute(TRANSA)", st = L.desc_set(op, DESC_TRANSA, &opa, sizeof opa);
  if (!st) call = "cublasLtMatmulDescSetAttribute(TRANSB)", st = L.desc_set(op, DESC_TRANSB, &opb, sizeof opb);
  if (!st) call = "cublasLtMatmulDescSetAttribute(EPILOGUE)", st = L.desc_set(op, DESC_EPILOGUE, &epi, sizeof epi);
  if (!st && bias)
    call = "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", st = L.desc_set(op, DESC_BIAS_POINTER, &bias, sizeof bias);
  /* Column-major layouts of A, B and C as stored (rows x cols before the transposes). */
  if (!st)
    call = "cublasLtMatrixLayoutCreate(A)",
    st = L.layout_create(&la, LT_R_32F, (uint64_t)(g->ta ? g->k : g->m), (uint64_t)(g->ta ? g->m : g->k), g->lda);
  if (!st)
    call = "cublasLtMatrixLayoutCreate(B)",
    st = L.layout_create(&lb, LT_R_32F, (uint64_t)(g->tb ? g->n : g->k), (uint64_t)(g->tb ? g->k : g->n), g->ldb);
  if (!st) call = "cublasLtMatrixLayoutCreate(C)", st = L.layout_create(&lc, LT_R_32F, (uint64_t)g->m, (uint64_t)g->n, g->ldc);
  if (!st) call = "cublasLtMatmulPreferenceCreate", st = L.pref_create(&pref);
  if (!st)
    call = "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
    st = L.pref_set(pref, PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  /* A, B, C and D (D is C) as they are, so the heuristic skips algorithms they do not suit */
  const void *ptrs[4] = {g->a, g->b, g->c, g->c};
  for (int i = 0; i < 4 && !st; i++) {
    uint32_t align = alignment_of(ptrs[i]);
    call = "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)";
    st = L.pref_set(pref, PREF_MIN_ALIGNMENT_A_BYTES + i, &align, sizeof align);
  }
  if (!st) call = "cublasLtMatmulAlgoGetHeuristic", st = L.heuristic(d->handle, op, la, lb, lc, lc, pref, 1, &best, &found);
  int declined = 0;
  if (st == LT_NOT_SUPPORTED || (!st && (found < 1 || best.state != LT_SUCCESS || best.workspaceSize > ws_bytes))) {
    /* cuBLASLt has no kernel for this epilogue, shape or alignment: not an error, another road takes it. */
    if (st) snprintf(why, cap, "cuBLASLt declined the %s epilogue: %s returned %s", em_cublaslt_epilogue_name(bias != NULL, act),
                     call, em_cublas_status_text(st));
    else snprintf(why, cap, "cuBLASLt's heuristic found no algorithm for the %s epilogue (m %d, n %d, k %d)",
                  em_cublaslt_epilogue_name(bias != NULL, act), g->m, g->n, g->k);
    declined = 1;
    st = 0;
  }
  if (!st && !declined) {
    size_t need = best.workspaceSize ? best.workspaceSize : 0;
    if (need && (r = em_malloc(dev, need, &ws))) r = em_fail_context(r, "a %zu-byte cuBLASLt workspace", need);
    if (!r) {
      call = "cublasLtMatmul";
      st = L.matmul(d->handle, op, &alpha, g->a, la, g->b, lb, &beta, g->c, lc, g->c, lc, &best.algo, ws, need,
                    em_stream_handle(s));
      if (!st) *ran = 1;
    }
  }
  if (pref) L.pref_destroy(pref);
  if (lc) L.layout_destroy(lc);
  if (lb) L.layout_destroy(lb);
  if (la) L.layout_destroy(la);
  if (op) L.desc_destroy(op);
  em_gpu_leave(gpu);
  if (ws) em_free(dev, ws); /* as cuBLAS's workspace: reused only by work issued after this */
  if (!r && st)
    r = em_fail(EM_ERR_CUDA, "%s failed: %s (m %d, n %d, k %d, lda %d, ldb %d, ldc %d, epilogue %s%s) on CUDA device %d",
                call, em_cublas_status_text(st), g->m, g->n, g->k, g->lda, g->ldb, g->ldc,
                em_cublaslt_epilogue_name(bias != NULL, act), g->tf32 ? ", TF32" : "", gpu->ordinal);
  return r;
}

void em_cublaslt_shutdown(struct em_runtime *rt) {
  pthread_mutex_lock(&L.lock);
  for (int i = 0; i < MAX_DEVICES; i++) {
    lt_device *d = &L.dev[i];
    if (!d->decided) continue;
    if (d->handle && rt && i < rt->n_gpus && !em_gpu_enter(&rt->gpus[i])) {
      L.destroy(d->handle);
      em_gpu_leave(&rt->gpus[i]);
    }
    memset(d, 0, sizeof *d);
  }
  L.loaded = 0; /* the next runtime searches again (a changed EMBER_LIBCUBLASLT takes effect) */
  L.lib = NULL;
  pthread_mutex_unlock(&L.lock);
}
