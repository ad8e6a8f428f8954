/* The cuBLASLt double's entry points (libcublasLt.so.13, built from this folder's files with
 * FCB_LT_DOUBLE: README.md). Its handles are the cuBLAS double's handles (cublasLtCreate makes
 * one as cublasCreate_v2 does: the same driver, context and device checks); a matmul is the
 * cuBLAS double's product (fcb_lt_product: the same operand checks at the sync, the same
 * arithmetic) with cuBLASLt's epilogue applied to each result.
 *
 * Types and values from cublasLt.h of the CUDA 13.0 toolkit (cuBLASLt 13.1): descriptors are
 * pointers to library-owned structures; the attribute sizes are those the header gives
 * (TRANSA / TRANSB int32_t, EPILOGUE uint32_t, BIAS_POINTER a pointer, MAX_WORKSPACE_BYTES
 * uint64_t). What the double models, and refuses, is listed in README.md. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakecublas_internal.h"

typedef struct fcb_lt_desc {
  int compute, scale;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
} fcb_lt_desc;

typedef struct fcb_lt_layout {
  int type;
  uint64_t rows, cols;
  int64_t ld;
} fcb_lt_layout;

typedef struct fcb_lt_pref {
  uint64_t max_workspace;
  uint32_t align[4]; /* MIN_ALIGNMENT_A/B/C/D_BYTES: what the caller promises of its pointers */
} fcb_lt_pref;

typedef struct {
  uint64_t data[8];
} fcb_lt_algo; /* cublasLtMatmulAlgo_t: data[0] the double's mark, data[1] the workspace it needs,
               * data[2..5] the alignment of A, B, C, D it relies on */

typedef struct {
  fcb_lt_algo algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} fcb_lt_heuristic; /* cublasLtMatmulHeuristicResult_t */

#define ALGO_MARK 0x66616b656c74ull /* "fakelt" */

enum { /* cublasLtMatmulDescAttributes_t, cublasLtMatmulPreferenceAttributes_t */
       DESC_TRANSA = 3,
       DESC_TRANSB = 4,
       DESC_EPILOGUE = 7,
       DESC_BIAS_POINTER = 8,
       PREF_MAX_WORKSPACE_BYTES = 1,
       PREF_MIN_ALIGNMENT_A_BYTES = 5, /* .. _D_BYTES = 8: uint32_t, default 256 (cublasLt.h) */
       PREF_MIN_ALIGNMENT_D_BYTES = 8 };

/* The epilogues the double computes (cublasLtEpilogue_t): DEFAULT 1, RELU 2, BIAS 4, RELU_BIAS
 * 6, GELU 32, GELU_BIAS 36. Others (the _AUX outputs, the gradients, the bias gradients) are
 * valid in cuBLASLt but not modelled: NOT_SUPPORTED at the heuristic and the matmul. */
static int modelled_epilogue(uint32_t e) { return e == 1 || e == 2 || e == 4 || e == 6 || e == 32 || e == 36; }

FCB_HOOK cublasStatus_t cublasLtCreate(cublasHandle_t *handle) {
  fcb_version v;
  cublasStatus_t st = fcb_enter(FCB_cublasLtCreate, &v);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!handle) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: lightHandle is NULL");
  return cublasCreate_v2(handle); /* the same driver, device and version rules */
}

FCB_HOOK cublasStatus_t cublasLtDestroy(cublasHandle_t handle) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtDestroy, NULL);
  return st != CUBLAS_STATUS_SUCCESS ? st : cublasDestroy_v2(handle);
}

/* cuBLASLt is versioned with cuBLAS (one release, one number). */
FCB_HOOK cublasStatus_t cublasLtGetProperty(int type, int *value) {
  fcb_version v;
  cublasStatus_t st = fcb_enter(FCB_cublasLtGetProperty, &v);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!value || type < 0 || type > 2)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtGetProperty: type %d or a NULL value", type);
  *value = type == 0 ? v.major : type == 1 ? v.minor : v.patch;
  return CUBLAS_STATUS_SUCCESS;
}

FCB_HOOK cublasStatus_t cublasLtMatmulDescCreate(fcb_lt_desc **desc, int compute, int scale) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulDescCreate, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!desc) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: matmulDesc is NULL");
  fcb_lt_desc *d = calloc(1, sizeof *d);
  if (!d) return fcb_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmulDescCreate: out of host memory");
  d->compute = compute, d->scale = scale, d->epilogue = 1;
  *desc = d;
  return CUBLAS_STATUS_SUCCESS;
}

FCB_HOOK cublasStatus_t cublasLtMatmulDescDestroy(fcb_lt_desc *desc) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulDescDestroy, NULL);
  if (st == CUBLAS_STATUS_SUCCESS) free(desc);
  return st;
}

/* INVALID_VALUE "if buf is NULL or sizeInBytes doesn't match size of internal storage for
 * selected attribute" (cublasLt.h); an attribute the double does not model is refused the same
 * way [U: cuBLASLt accepts every attribute of its enum]. */
FCB_HOOK cublasStatus_t cublasLtMatmulDescSetAttribute(fcb_lt_desc *desc, int attr, const void *buf, size_t size) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulDescSetAttribute, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const char *e = "cublasLtMatmulDescSetAttribute";
  if (!desc || !buf) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: desc or buf is NULL", e);
  size_t want = attr == DESC_TRANSA || attr == DESC_TRANSB ? sizeof(int32_t) : attr == DESC_EPILOGUE ? sizeof(uint32_t)
                : attr == DESC_BIAS_POINTER ? sizeof(void *) : 0;
  if (!want) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d is not modelled by the double", e, attr);
  if (size != want)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d takes %zu bytes, got %zu", e, attr, want, size);
  if (attr == DESC_TRANSA) memcpy(&desc->transa, buf, size);
  else if (attr == DESC_TRANSB) memcpy(&desc->transb, buf, size);
  else if (attr == DESC_EPILOGUE) memcpy(&desc->epilogue, buf, size);
  else memcpy(&desc->bias, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

FCB_HOOK cublasStatus_t cublasLtMatrixLayoutCreate(fcb_lt_layout **layout, int type, uint64_t rows, uint64_t cols,
                                                   int64_t ld) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatrixLayoutCreate, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!layout) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: matLayout is NULL");
  fcb_lt_layout *l = calloc(1, sizeof *l);
  if (!l) return fcb_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatrixLayoutCreate: out of host memory");
  l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
  *layout = l;
  return CUBLAS_STATUS_SUCCESS;
}

FCB_HOOK cublasStatus_t cublasLtMatrixLayoutDestroy(fcb_lt_layout *layout) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatrixLayoutDestroy, NULL);
  if (st == CUBLAS_STATUS_SUCCESS) free(layout);
  return st;
}

FCB_HOOK cublasStatus_t cublasLtMatmulPreferenceCreate(fcb_lt_pref **pref) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulPreferenceCreate, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!pref) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: pref is NULL");
  if (!(*pref = calloc(1, sizeof **pref)))
    return fcb_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmulPreferenceCreate: out of host memory");
  for (int i = 0; i < 4; i++) (*pref)->align[i] = 256; /* cublasLt.h: "default: 256" */
  return CUBLAS_STATUS_SUCCESS;
}

FCB_HOOK cublasStatus_t cublasLtMatmulPreferenceDestroy(fcb_lt_pref *pref) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulPreferenceDestroy, NULL);
  if (st == CUBLAS_STATUS_SUCCESS) free(pref);
  return st;
}

FCB_HOOK cublasStatus_t cublasLtMatmulPreferenceSetAttribute(fcb_lt_pref *pref, int attr, const void *buf, size_t size) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulPreferenceSetAttribute, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const char *e = "cublasLtMatmulPreferenceSetAttribute";
  if (!pref || !buf) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: pref or buf is NULL", e);
  if (attr >= PREF_MIN_ALIGNMENT_A_BYTES && attr <= PREF_MIN_ALIGNMENT_D_BYTES) {
    if (size != sizeof(uint32_t))
      return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: MIN_ALIGNMENT takes 4 bytes, got %zu", e, size);
    memcpy(&pref->align[attr - PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr != PREF_MAX_WORKSPACE_BYTES)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d is not modelled by the double", e, attr);
  if (size != sizeof(uint64_t))
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: MAX_WORKSPACE_BYTES takes 8 bytes, got %zu", e, size);
  memcpy(&pref->max_workspace, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

/* The checks cuBLASLt makes of a matmul's description, shared by the heuristic and the matmul:
 * the sizes agree (op(A) m x k, op(B) k x n, C and D m x n), leading dimensions at least the
 * rows, the types the double models (everything CUDA_R_32F under COMPUTE_32F or _FAST_TF32 with
 * a CUDA_R_32F scale: else NOT_SUPPORTED), a modelled epilogue with its bias pointer. */
static cublasStatus_t check_matmul(const char *e, const fcb_lt_desc *d, const fcb_lt_layout *a, const fcb_lt_layout *b,
                                   const fcb_lt_layout *c, const fcb_lt_layout *dl, int *m, int *n, int *k) {
  if (!d || !a || !b || !c || !dl) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: a descriptor is NULL", e);
  if ((d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32) || d->scale != CUDA_R_32F ||
      a->type != CUDA_R_32F || b->type != CUDA_R_32F || c->type != CUDA_R_32F || dl->type != CUDA_R_32F)
    return fcb_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: compute %d, scale %d, types %d %d %d %d: the double computes "
                      "CUDA_R_32F under COMPUTE_32F or _FAST_TF32 only", e, d->compute, d->scale, a->type, b->type,
                      c->type, dl->type);
  if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) || (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: transa %d / transb %d", e, d->transa, d->transb);
  if (!modelled_epilogue(d->epilogue))
    return fcb_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: epilogue %u is not modelled by the double", e, d->epilogue);
  if ((d->epilogue & 4) && !d->bias)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: a BIAS epilogue without BIAS_POINTER", e);
  uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
  uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
  if (ak != bk || c->rows != am || c->cols != bn || dl->rows != am || dl->cols != bn)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu do not "
                      "agree", e, (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk,
                      (unsigned long long)bn, (unsigned long long)c->rows, (unsigned long long)c->cols,
                      (unsigned long long)dl->rows, (unsigned long long)dl->cols);
  const fcb_lt_layout *ls[4] = {a, b, c, dl};
  for (int i = 0; i < 4; i++)
    if (ls[i]->ld < (int64_t)(ls[i]->rows > 1 ? ls[i]->rows : 1) || ls[i]->rows > 0x7fffffff || ls[i]->cols > 0x7fffffff ||
        ls[i]->ld > 0x7fffffff)
      return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: layout %d: %llu x %llu with ld %lld", e, i,
                        (unsigned long long)ls[i]->rows, (unsigned long long)ls[i]->cols, (long long)ls[i]->ld);
  *m = (int)am, *n = (int)bn, *k = (int)ak;
  return CUBLAS_STATUS_SUCCESS;
}

/* Configuration read at each heuristic call: FAKECUBLASLT_ALGOS=0 makes it find no algorithm
 * (SUCCESS with a count of 0 [U: cuBLASLt may answer NOT_SUPPORTED instead; Ember takes both]);
 * FAKECUBLASLT_WORKSPACE=N makes the one algorithm need N bytes of workspace (default 0), and
 * with N above the preference's MAX_WORKSPACE_BYTES none is found. */
static unsigned long long env_number(const char *name, unsigned long long fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  return *end ? fallback : n;
}

FCB_HOOK cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasHandle_t handle, const fcb_lt_desc *d, const fcb_lt_layout *a,
                                                       const fcb_lt_layout *b, const fcb_lt_layout *c,
                                                       const fcb_lt_layout *dl, const fcb_lt_pref *pref, int requested,
                                                       fcb_lt_heuristic *results, int *count) {
  cublasStatus_t st = fcb_enter(FCB_cublasLtMatmulAlgoGetHeuristic, NULL);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const char *e = "cublasLtMatmulAlgoGetHeuristic";
  if (!handle || !pref || !results || !count || requested < 1)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: a NULL argument or requestedAlgoCount %d < 1", e, requested);
  int m, n, k;
  if ((st = check_matmul(e, d, a, b, c, dl, &m, &n, &k)) != CUBLAS_STATUS_SUCCESS) return st;
  unsigned long long need = env_number("FAKECUBLASLT_WORKSPACE", 0);
  *count = 0;
  if (env_number("FAKECUBLASLT_ALGOS", 1) == 0 || need > pref->max_workspace) return CUBLAS_STATUS_SUCCESS;
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = ALGO_MARK;
  results[0].algo.data[1] = need;
  /* The algorithm found may rely on the alignment the preference promised (256 bytes unless
   * lowered): the matmul refuses pointers that break the promise. */
  for (int i = 0; i < 4; i++) results[0].algo.data[2 + i] = pref->align[i];
  results[0].workspaceSize = (size_t)need;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* The matmul: the description checked again, the algorithm one of the heuristic's with the
 * workspace it needs (else INVALID_VALUE [U]: cuBLASLt's statuses for a foreign algorithm or a
 * short workspace are not documented per case), D at C (out of place: NOT_SUPPORTED by the
 * double, not by cuBLASLt), then the cuBLAS double's product on `stream`, counted as
 * cublasLtMatmul (fcb_lt_product). */
FCB_HOOK cublasStatus_t cublasLtMatmul(cublasHandle_t handle, const fcb_lt_desc *d, const float *alpha, const void *A,
                                       const fcb_lt_layout *al, const void *B, const fcb_lt_layout *bl,
                                       const float *beta, const void *C, const fcb_lt_layout *cl, void *D,
                                       const fcb_lt_layout *dl, const fcb_lt_algo *algo, void *workspace,
                                       size_t workspace_bytes, CUstream stream) {
  const char *e = "cublasLtMatmul";
  int m, n, k;
  cublasStatus_t st = check_matmul(e, d, al, bl, cl, dl, &m, &n, &k);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta) return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: alpha or beta is NULL", e);
  if (!algo || algo->data[0] != ALGO_MARK)
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: no algorithm from cublasLtMatmulAlgoGetHeuristic", e);
  if (workspace_bytes < algo->data[1] || (algo->data[1] && !workspace))
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: the algorithm needs %llu bytes of workspace, given %zu", e,
                      (unsigned long long)algo->data[1], workspace_bytes);
  /* An algorithm chosen for the preference's MIN_ALIGNMENT (default 256 bytes, cublasLt.h) may
   * use vector loads the pointers do not allow: refused [U: the real status, or a fault]. */
  const void *ptrs[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++)
    if (algo->data[2 + i] && (uintptr_t)ptrs[i] % algo->data[2 + i])
      return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: matrix %c at %p is not aligned to the %llu bytes the "
                        "preference promised (MIN_ALIGNMENT_%c_BYTES)", e, "ABCD"[i], ptrs[i],
                        (unsigned long long)algo->data[2 + i], "ABCD"[i]);
  if (C != D || cl->ld != dl->ld) return fcb_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: D must be C in the double", e);
  fcb_lt_call call = {handle, stream, (CUdeviceptr)(uintptr_t)workspace, workspace_bytes, d->transa, d->transb, m, n, k,
                      alpha, beta, (CUdeviceptr)(uintptr_t)A, (CUdeviceptr)(uintptr_t)B, (CUdeviceptr)(uintptr_t)D,
                      (int)al->ld, (int)bl->ld, (int)dl->ld, d->compute, (int)d->epilogue,
                      (CUdeviceptr)(uintptr_t)d->bias};
  return fcb_lt_product(&call);
}
