/* The products of the cuBLAS double: GEMM (C = alpha op(A) op(B) + beta C,
 * plain and strided batched) and GEMV (y = alpha op(A) x + beta y), all
 * column-major as cuBLAS is.
 *
 * A call is checked as cuBLAS checks it (README.md, "Checks at the call"),
 * then issued as work on the handle's stream through the libcuda double
 * (fakecuda_enqueue_work): nothing is computed at the call. When the queue
 * gets to the work, every operand is translated with its exact extent
 * (fakecuda_device_span), so an operand that does not fit its allocation,
 * freed memory or another device's memory fails the work as a faulting
 * kernel would, and the context keeps the error.
 *
 * The arithmetic is a plain loop over k in the compute type (float for the
 * 32-bit compute types, double for the 64-bit ones; no fused multiply-add,
 * the build has -ffp-contract=off), then alpha * sum + beta * C. The reduced
 * precisions cuBLAS may use are done for real (README.md, "Precision"):
 * TF32 or binary16 / bfloat16 rounding of every A and B element before it is
 * multiplied, binary16 / bfloat16 outputs rounded once from the float
 * result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecublas_internal.h"

/* How inputs are rounded before they are multiplied. */
typedef enum fcb_rounding { ROUND_NONE, ROUND_TF32, ROUND_F16, ROUND_BF16 } fcb_rounding;

/* One product as its call asked for it. For a GEMV, b is x (ldb its
 * increment), c is y (ldc its increment) and k is unused. */
typedef struct fcb_product {
  fcb_entry entry;
  int gemv;
  int transa, transb, m, n, k;
  const void *alpha, *beta; /* host or device pointers (pointer mode) */
  CUdeviceptr a, b, c;
  int atype, btype, ctype;
  int lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;
  int batch;
  int compute;
  int algo;
} fcb_product;

/* What runs on the stream: the product, how it rounds, its scalars. */
typedef struct fcb_work {
  fcb_product p;
  fcb_rounding rounding;
  int output_reduction;         /* split-K partial sums reduced in C's (half) type: output_reduction() */
  int device_scalars;           /* CUBLAS_POINTER_MODE_DEVICE: read alpha and beta when it runs */
  double alpha, beta;           /* their values, read at the call in host pointer mode */
  CUdeviceptr workspace;        /* cublasSetWorkspace_v2, checked again when it runs */
  size_t workspace_bytes;
  fakecuda_device_span_fn span;
  int lt, epilogue;             /* a cublasLtMatmul (fcb_lt_product): its epilogue and bias */
  CUdeviceptr bias;
} fcb_work;

/* The lowest compute capability of each cuBLAS major (Ember's
 * arch_table/data/libreq.tsv rows, shared/reference/cuda-compat.md
 * section 9.2: cuBLAS 11 from 3.5, 12 from 5.0, 13 from 7.5). */
static int lowest_cc(int major) { return major <= 11 ? 35 : major == 12 ? 50 : 75; }

static int is_64f(int compute) { return compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC; }

static size_t type_size(int type) {
  return type == CUDA_R_64F ? 8 : type == CUDA_R_32F ? 4 : 2;
}

/* ------------------------------------------------------------ names --- */

static const char *type_name(int type) {
  switch (type) {
  case CUDA_R_32F: return "CUDA_R_32F";
  case CUDA_R_64F: return "CUDA_R_64F";
  case CUDA_R_16F: return "CUDA_R_16F";
  case CUDA_R_16BF: return "CUDA_R_16BF";
  default: return "CUDA_other";
  }
}

static const char *compute_name(int compute) {
  switch (compute) {
  case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
  case CUBLAS_COMPUTE_32F_PEDANTIC: return "CUBLAS_COMPUTE_32F_PEDANTIC";
  case CUBLAS_COMPUTE_32F_FAST_TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
  case CUBLAS_COMPUTE_32F_FAST_16F: return "CUBLAS_COMPUTE_32F_FAST_16F";
  case CUBLAS_COMPUTE_32F_FAST_16BF: return "CUBLAS_COMPUTE_32F_FAST_16BF";
  case CUBLAS_COMPUTE_64F: return "CUBLAS_COMPUTE_64F";
  case CUBLAS_COMPUTE_64F_PEDANTIC: return "CUBLAS_COMPUTE_64F_PEDANTIC";
  default: return "CUBLAS_COMPUTE_other";
  }
}

static const char *math_name(int mode) {
  switch (mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) {
  case CUBLAS_TENSOR_OP_MATH: return "CUBLAS_TENSOR_OP_MATH";
  case CUBLAS_PEDANTIC_MATH: return "CUBLAS_PEDANTIC_MATH";
  case CUBLAS_TF32_TENSOR_OP_MATH: return "CUBLAS_TF32_TENSOR_OP_MATH";
  case CUBLAS_FP32_EMULATED_BF16X9_MATH: return "CUBLAS_FP32_EMULATED_BF16X9_MATH";
  case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH: return "CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH";
  default: return "CUBLAS_DEFAULT_MATH";
  }
}

static const char *rounding_name(fcb_rounding r, int compute) {
  switch (r) {
  case ROUND_TF32: return "tf32";
  case ROUND_F16: return "fp16-inputs";
  case ROUND_BF16: return "bf16-inputs";
  default: return is_64f(compute) ? "fp64" : "fp32";
  }
}

static char op_letter(int op) { return op == CUBLAS_OP_N ? 'N' : op == CUBLAS_OP_T ? 'T' : 'C'; }

/* ----------------------------------------------------------- checks --- */

static int valid_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

static int max1(int v) { return v > 1 ? v : 1; }

/* cuBLAS documentation, cublas<t>gemm and cublasGemmEx, "Error values":
 * CUBLAS_STATUS_INVALID_VALUE "if m < 0 or n < 0 or k < 0 or if transa,
 * transb != CUBLAS_OP_N, CUBLAS_OP_C, CUBLAS_OP_T or if lda < max(1, m) if
 * transa == CUBLAS_OP_N and lda < max(1, k) otherwise or if ldb < max(1, k)
 * if transb == CUBLAS_OP_N and ldb < max(1, n) otherwise or if ldc < max(1,
 * m) or if alpha, beta == NULL"; batchCount < 0 for the batched forms. */
static cublasStatus_t check_gemm_arguments(const fcb_product *p) {
  const char *e = fcb_entry_name(p->entry);
  cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
  if (!valid_op(p->transa) || !valid_op(p->transb))
    return fcb_refuse(bad, "%s: transa %d / transb %d is not CUBLAS_OP_N, _T or _C", e, p->transa, p->transb);
  if (p->m < 0 || p->n < 0 || p->k < 0) return fcb_refuse(bad, "%s: m %d, n %d, k %d: negative", e, p->m, p->n, p->k);
  int a_rows = p->transa == CUBLAS_OP_N ? p->m : p->k, b_rows = p->transb == CUBLAS_OP_N ? p->k : p->n;
  if (p->lda < max1(a_rows)) return fcb_refuse(bad, "%s: lda %d < max(1, %d), the rows of A as stored", e, p->lda, a_rows);
  if (p->ldb < max1(b_rows)) return fcb_refuse(bad, "%s: ldb %d < max(1, %d), the rows of B as stored", e, p->ldb, b_rows);
  if (p->ldc < max1(p->m)) return fcb_refuse(bad, "%s: ldc %d < max(1, m = %d)", e, p->ldc, p->m);
  if (!p->alpha || !p->beta) return fcb_refuse(bad, "%s: alpha or beta is NULL", e);
  if (p->batch < 0) return fcb_refuse(bad, "%s: batchCount %d < 0", e, p->batch);
  return CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS documentation, cublas<t>gemv: INVALID_VALUE "if m < 0 or n < 0
 * or incx = 0 or incy = 0 or lda < max(1, m)", an unknown trans, or alpha,
 * beta NULL. */
static cublasStatus_t check_gemv_arguments(const fcb_product *p) {
  const char *e = fcb_entry_name(p->entry);
  cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
  if (!valid_op(p->transa)) return fcb_refuse(bad, "%s: trans %d is not CUBLAS_OP_N, _T or _C", e, p->transa);
  if (p->m < 0 || p->n < 0) return fcb_refuse(bad, "%s: m %d, n %d: negative", e, p->m, p->n);
  if (p->lda < max1(p->m)) return fcb_refuse(bad, "%s: lda %d < max(1, m = %d)", e, p->lda, p->m);
  if (p->ldb == 0 || p->ldc == 0) return fcb_refuse(bad, "%s: incx %d / incy %d is 0", e, p->ldb, p->ldc);
  if (!p->alpha || !p->beta) return fcb_refuse(bad, "%s: alpha or beta is NULL", e);
  if (p->batch < 0) return fcb_refuse(bad, "%s: batchCount %d < 0", e, p->batch); /* the strided batches */
  return CUBLAS_STATUS_SUCCESS;
}

static int known_compute(int c) {
  return (c >= CUBLAS_COMPUTE_16F && c <= CUBLAS_COMPUTE_32F_FAST_16BF && c != 66 && c != 67) ||
         c == CUBLAS_COMPUTE_32F_FAST_TF32 || c == CUBLAS_COMPUTE_32F_EMULATED_16BFX9 ||
         c == CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT;
}

/* cublasGemmAlgo_t of cublas_api.h: DEFAULT (-1), ALGO0 ... ALGO23,
 * DEFAULT_TENSOR_OP (99), ALGO0_TENSOR_OP ... ALGO15_TENSOR_OP, AUTOTUNE
 * (999). The algorithm changes nothing in the double. */
static int known_algo(int a) { return (a >= -1 && a <= 23) || (a >= 99 && a <= 115) || a == 999; }

/* The combinations of cublasGemmEx's table (cuBLAS documentation,
 * cublasGemmEx) that the double computes:
 *   COMPUTE_64F(_PEDANTIC): A, B, C CUDA_R_64F;
 *   COMPUTE_32F(_PEDANTIC): A, B, C CUDA_R_32F; A, B CUDA_R_16F with C
 *     CUDA_R_16F or CUDA_R_32F; A, B CUDA_R_16BF with C CUDA_R_16BF or
 *     CUDA_R_32F;
 *   COMPUTE_32F_FAST_TF32 / _FAST_16F / _FAST_16BF: A, B, C CUDA_R_32F.
 * The table's other rows (complex, 8-bit integer, COMPUTE_16F, COMPUTE_32I,
 * the emulated compute types) are not modelled and get NOT_SUPPORTED, as a
 * combination outside the table does ("the combination of the parameters
 * Atype, Btype and Ctype ... is not supported"). */
static int modelled_combination(int a, int b, int c, int compute) {
  if (a != b) return 0;
  switch (compute) {
  case CUBLAS_COMPUTE_64F:
  case CUBLAS_COMPUTE_64F_PEDANTIC: return a == CUDA_R_64F && c == CUDA_R_64F;
  case CUBLAS_COMPUTE_32F:
  case CUBLAS_COMPUTE_32F_PEDANTIC:
    return (a == CUDA_R_32F && c == CUDA_R_32F) || ((a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F));
  case CUBLAS_COMPUTE_32F_FAST_TF32:
  case CUBLAS_COMPUTE_32F_FAST_16F:
  case CUBLAS_COMPUTE_32F_FAST_16BF: return a == CUDA_R_32F && c == CUDA_R_32F;
  default: return 0;
  }
}

/* Values outside the enums are INVALID_VALUE [U]; known values outside the
 * modelled table NOT_SUPPORTED. */
static cublasStatus_t check_types(const fcb_product *p) {
  const char *e = fcb_entry_name(p->entry);
  int types[3] = {p->atype, p->btype, p->ctype};
  for (int i = 0; i < 3; i++)
    if (types[i] < 0 || types[i] > FCB_DATA_TYPE_LAST)
      return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %d is not a cudaDataType", e, types[i]);
  if (!known_compute(p->compute))
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %d is not a cublasComputeType_t", e, p->compute);
  if (!known_algo(p->algo))
    return fcb_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %d is not a cublasGemmAlgo_t", e, p->algo);
  if (!modelled_combination(p->atype, p->btype, p->ctype, p->compute))
    return fcb_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: A %s, B %s, C %s with %s is not a supported combination", e,
                      type_name(p->atype), type_name(p->btype), type_name(p->ctype), compute_name(p->compute));
  return CUBLAS_STATUS_SUCCESS;
}

static int uses_type(const fcb_product *p, int type) {
  return p->atype == type || p->btype == type || p->ctype == type;
}

/* The device can run this product: at or above the lowest compute
 * capability of this cuBLAS major (ARCH_MISMATCH [U: the status]); binary16
 * arithmetic from 5.3 (ARCH_MISMATCH, as the documentation says of
 * cublasHgemm: "the device does not support math in half precision");
 * bfloat16 from 8.0 (NOT_SUPPORTED [U: the status and the bound]). */
static cublasStatus_t check_device(const fcb_product *p, const fcb_handle_state *hs, const fcb_version *v) {
  const char *e = fcb_entry_name(p->entry);
  int cc = hs->cc, low = lowest_cc(v->major);
  if (cc < low)
    return fcb_refuse(CUBLAS_STATUS_ARCH_MISMATCH, "%s: cuBLAS %d supports compute capability %d.%d and newer; this "
                      "device is %d.%d", e, v->major, low / 10, low % 10, cc / 10, cc % 10);
  if (uses_type(p, CUDA_R_16F) && cc < 53)
    return fcb_refuse(CUBLAS_STATUS_ARCH_MISMATCH, "%s: binary16 needs compute capability 5.3; this device is %d.%d",
                      e, cc / 10, cc % 10);
  if (uses_type(p, CUDA_R_16BF) && cc < 80)
    return fcb_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: bfloat16 needs compute capability 8.0; this device is %d.%d",
                      e, cc / 10, cc % 10);
  return CUBLAS_STATUS_SUCCESS;
}

/* The handle belongs to the context current at cublasCreate_v2; a product
 * issued with another context current (or none) is refused with
 * EXECUTION_FAILED [U: the status; cuBLAS's kernels would not launch there]. */
static cublasStatus_t check_context(const fcb_product *p, const fcb_handle_state *hs) {
  CUcontext cur = NULL;
  CUresult r = hs->drv.ctx_get_current(&cur);
  if (r != CUDA_SUCCESS || cur != hs->ctx)
    return fcb_refuse(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the handle belongs to context %p (device %d); the current "
                      "context is %p", fcb_entry_name(p->entry), (void *)hs->ctx, hs->device, (void *)cur);
  return CUBLAS_STATUS_SUCCESS;
}

/* -------------------------------------------------------- precision --- */

/* How f32 inputs are rounded (README.md, "Precision"). Binary16, bfloat16
 * and binary64 inputs are never rounded: TF32 holds every binary16 and
 * bfloat16 value. The _FAST_ compute types and the tensor-op math modes
 * "allow" a narrower format; the double always takes it where the device
 * has the tensor cores for it [U: cuBLAS's choice per shape], and never
 * below (TF32 and bfloat16 from 8.0, binary16 tensor cores from 7.0 [S]). */
static fcb_rounding input_rounding(const fcb_product *p, int math_mode, int cc) {
  if (p->atype != CUDA_R_32F) return ROUND_NONE;
  /* CUBLAS_PEDANTIC_MATH and the _PEDANTIC compute types fall through: "the
   * matching _PEDANTIC compute type" is used (cublas_api.h), never reduced. */
  int base = math_mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  fcb_rounding want = ROUND_NONE;
  if (p->compute == CUBLAS_COMPUTE_32F_FAST_TF32) want = ROUND_TF32;
  else if (p->compute == CUBLAS_COMPUTE_32F_FAST_16F) want = ROUND_F16;
  else if (p->compute == CUBLAS_COMPUTE_32F_FAST_16BF) want = ROUND_BF16;
  else if (p->compute == CUBLAS_COMPUTE_32F && base == CUBLAS_TF32_TENSOR_OP_MATH) want = ROUND_TF32;
  else if (p->compute == CUBLAS_COMPUTE_32F && base == CUBLAS_TENSOR_OP_MATH) want = ROUND_F16; /* cublas_api.h */
  if ((want == ROUND_TF32 || want == ROUND_BF16) && cc < 80) return ROUND_NONE;
  if (want == ROUND_F16 && cc < 70) return ROUND_NONE;
  return want;
}

/* -------------------------------------------------------- operands --- */

/* Bytes spanned by a rows x cols column-major operand with leading
 * dimension ld (0 when empty); SIZE_MAX when it does not fit a size_t, which
 * no allocation holds. */
static size_t matrix_bytes(long long rows, long long cols, long long ld, size_t esize) {
  if (rows <= 0 || cols <= 0) return 0;
  unsigned long long elems = (unsigned long long)(cols - 1) * (unsigned long long)ld + (unsigned long long)rows;
  return elems > SIZE_MAX / esize ? SIZE_MAX : (size_t)(elems * esize);
}

/* The host bytes of one operand (of batch member `batch`), or the failure
 * as a fault of the work, naming the call, the operand and its extent. */
static CUresult operand(const fcb_work *w, const char *what, CUdeviceptr base, long long stride, int batch, size_t esize,
                        size_t bytes, void **host, char *msg, size_t cap) {
  CUdeviceptr at = base + (CUdeviceptr)((unsigned long long)stride * (unsigned long long)batch * esize);
  char why[384] = "";
  CUresult r = w->span(at, bytes, host, why, sizeof why);
  if (r != CUDA_SUCCESS) {
    char member[48] = "";
    if (w->p.batch > 1) snprintf(member, sizeof member, " of batch member %d", batch);
    snprintf(msg, cap, "%s: operand %s%s (%zu bytes at 0x%llx): %s", fcb_entry_name(w->p.entry), what, member, bytes,
             at, why);
  }
  return r;
}

/* alpha and beta: from the call (host pointer mode) or, in device pointer
 * mode, from device memory now, as cuBLAS's kernels read them. */
static CUresult read_scalars(const fcb_work *w, double *alpha, double *beta, char *msg, size_t cap) {
  *alpha = w->alpha, *beta = w->beta;
  if (!w->device_scalars) return CUDA_SUCCESS;
  size_t size = is_64f(w->p.compute) ? 8 : 4;
  void *pa, *pb;
  CUresult r = operand(w, "alpha", (CUdeviceptr)(uintptr_t)w->p.alpha, 0, 0, 1, size, &pa, msg, cap);
  if (r == CUDA_SUCCESS) r = operand(w, "beta", (CUdeviceptr)(uintptr_t)w->p.beta, 0, 0, 1, size, &pb, msg, cap);
  if (r != CUDA_SUCCESS) return r;
  if (size == 8) {
    memcpy(alpha, pa, 8), memcpy(beta, pb, 8);
  } else {
    float fa, fb;
    memcpy(&fa, pa, 4), memcpy(&fb, pb, 4);
    *alpha = fa, *beta = fb;
  }
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------- arithmetic --- */

static float load_f32(const void *base, int type, size_t i) {
  const unsigned char *b = base;
  if (type == CUDA_R_32F) {
    float v;
    memcpy(&v, b + 4 * i, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return type == CUDA_R_16F ? fcb_f16_to_f32(h) : fcb_bf16_to_f32(h);
}

static void store_f32(void *base, int type, size_t i, float v) {
  unsigned char *b = base;
  if (type == CUDA_R_32F) {
    memcpy(b + 4 * i, &v, 4);
    return;
  }
  uint16_t h = type == CUDA_R_16F ? fcb_f32_to_f16(v) : fcb_f32_to_bf16(v);
  memcpy(b + 2 * i, &h, 2);
}

static float round_input(float v, fcb_rounding r) {
  switch (r) {
  case ROUND_TF32: return fcb_round_tf32(v);
  case ROUND_F16: return fcb_f16_to_f32(fcb_f32_to_f16(v));
  case ROUND_BF16: return fcb_bf16_to_f32(fcb_f32_to_bf16(v));
  default: return v;
  }
}

/* A product whose C is narrower than its f32 compute type may reduce split-K partial sums in
 * C's type unless CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is set ("forces any
 * reductions during matrix multiplications to use the accumulator type ... and not the
 * output type", cublasMath_t; PyTorch's allow_fp16/bf16_reduced_precision_reduction). The
 * double takes that road for deep products (k >= 64: two halves of k, each alpha * partial
 * rounded into C's type, their sum rounded again) [U: when cuBLAS splits k]. */
static int output_reduction(const fcb_product *p, int math_mode) {
  return !p->gemv && p->ctype != CUDA_R_32F && p->ctype != CUDA_R_64F && !is_64f(p->compute) && p->k >= 64 &&
         !(math_mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

static float round_output(float v, int type) {
  if (type == CUDA_R_16F) return fcb_f16_to_f32(fcb_f32_to_f16(v));
  return type == CUDA_R_16BF ? fcb_bf16_to_f32(fcb_f32_to_bf16(v)) : v;
}

/* Index of op(X)[row, col] in X as stored (column-major, leading dimension ld). */
static size_t op_index(int op, int row, int col, int ld) {
  return op == CUBLAS_OP_N ? (size_t)row + (size_t)col * (size_t)ld : (size_t)col + (size_t)row * (size_t)ld;
}

/* One f32-compute GEMM: op(A) row by row and op(B) column by column, rounded,
 * into contiguous buffers; each C element a plain float sum over k. */
/* cuBLASLt's epilogue on one f32 result r of row i: + bias[i] (the BIAS bit), then RELU
 * (max(r, 0)) or GELU. cuBLASLt's GELU is taken to be the tanh form
 * 0.5 r (1 + tanh(sqrt(2/pi) (r + 0.044715 r^3))) [U: cublasLt.h says only "GELU"; PyTorch fuses
 * only approximate='tanh' GELU into it], computed in double and rounded once. */
static float epilogue_f32(const fcb_work *w, const float *bias, int i, float r) {
  if (!w->lt) return r;
  if (w->epilogue & 4) r = r + bias[i];
  if (w->epilogue & 2) r = r > 0.0f ? r : 0.0f; /* NaN: max(NaN, 0) [U], the comparison's NaN kept out */
  if (w->epilogue & 32) {
    double x = r;
    r = (float)(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
  }
  return r;
}

static CUresult gemm_f32(const fcb_work *w, const void *A, const void *B, void *C, float alpha, float beta,
                         const float *bias) {
  const fcb_product *p = &w->p;
  int m = p->m, n = p->n, k = alpha != 0.0f ? p->k : 0; /* alpha 0: A and B are not read */
  float *ra = malloc(((size_t)m * (size_t)k + 1) * sizeof *ra), *cb = malloc(((size_t)k * (size_t)n + 1) * sizeof *cb);
  if (!ra || !cb) {
    free(ra), free(cb);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < m; i++)
    for (int l = 0; l < k; l++)
      ra[(size_t)i * k + l] = round_input(load_f32(A, p->atype, op_index(p->transa, i, l, p->lda)), w->rounding);
  for (int j = 0; j < n; j++)
    for (int l = 0; l < k; l++)
      cb[(size_t)j * k + l] = round_input(load_f32(B, p->btype, op_index(p->transb, l, j, p->ldb)), w->rounding);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float sum = 0.0f;
      size_t ci = (size_t)i + (size_t)j * (size_t)p->ldc;
      float r;
      if (w->output_reduction) {
        float half = 0.0f;
        for (int l = 0; l < k / 2; l++) half += ra[(size_t)i * k + l] * cb[(size_t)j * k + l];
        for (int l = k / 2; l < k; l++) sum += ra[(size_t)i * k + l] * cb[(size_t)j * k + l];
        r = round_output(round_output(alpha * half, p->ctype) + round_output(alpha * sum, p->ctype), p->ctype);
      } else {
        for (int l = 0; l < k; l++) sum += ra[(size_t)i * k + l] * cb[(size_t)j * k + l];
        r = alpha * sum;
      }
      if (beta != 0.0f) r = r + beta * load_f32(C, p->ctype, ci); /* beta 0: C is not read */
      store_f32(C, p->ctype, ci, epilogue_f32(w, bias, i, r));
    }
  free(ra), free(cb);
  return CUDA_SUCCESS;
}

static CUresult gemm_f64(const fcb_work *w, const double *A, const double *B, double *C, double alpha, double beta) {
  const fcb_product *p = &w->p;
  int m = p->m, n = p->n, k = alpha != 0.0 ? p->k : 0;
  double *ra = malloc(((size_t)m * (size_t)k + 1) * sizeof *ra), *cb = malloc(((size_t)k * (size_t)n + 1) * sizeof *cb);
  if (!ra || !cb) {
    free(ra), free(cb);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < m; i++)
    for (int l = 0; l < k; l++) ra[(size_t)i * k + l] = A[op_index(p->transa, i, l, p->lda)];
  for (int j = 0; j < n; j++)
    for (int l = 0; l < k; l++) cb[(size_t)j * k + l] = B[op_index(p->transb, l, j, p->ldb)];
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double sum = 0.0;
      for (int l = 0; l < k; l++) sum += ra[(size_t)i * k + l] * cb[(size_t)j * k + l];
      size_t ci = (size_t)i + (size_t)j * (size_t)p->ldc;
      double r = alpha * sum;
      if (beta != 0.0) r = r + beta * C[ci];
      C[ci] = r;
    }
  free(ra), free(cb);
  return CUDA_SUCCESS;
}

/* One member of a (batched) GEMM: its operands translated, then computed. */
static CUresult run_gemm_member(const fcb_work *w, int batch, double alpha, double beta, char *msg, size_t cap) {
  const fcb_product *p = &w->p;
  int reads_ab = alpha != 0.0 && p->k > 0;
  size_t ea = type_size(p->atype), eb = type_size(p->btype), ec = type_size(p->ctype);
  int a_rows = p->transa == CUBLAS_OP_N ? p->m : p->k, a_cols = p->transa == CUBLAS_OP_N ? p->k : p->m;
  int b_rows = p->transb == CUBLAS_OP_N ? p->k : p->n, b_cols = p->transb == CUBLAS_OP_N ? p->n : p->k;
  void *A = NULL, *B = NULL, *C = NULL, *bias = NULL;
  CUresult r = CUDA_SUCCESS;
  if (w->lt && (w->epilogue & 4)) r = operand(w, "bias", w->bias, 0, 0, 4, (size_t)p->m * 4, &bias, msg, cap);
  if (r == CUDA_SUCCESS && reads_ab)
    r = operand(w, "A", p->a, p->stride_a, batch, ea, matrix_bytes(a_rows, a_cols, p->lda, ea), &A, msg, cap);
  if (r == CUDA_SUCCESS && reads_ab)
    r = operand(w, "B", p->b, p->stride_b, batch, eb, matrix_bytes(b_rows, b_cols, p->ldb, eb), &B, msg, cap);
  if (r == CUDA_SUCCESS)
    r = operand(w, "C", p->c, p->stride_c, batch, ec, matrix_bytes(p->m, p->n, p->ldc, ec), &C, msg, cap);
  if (r != CUDA_SUCCESS) return r;
  r = is_64f(p->compute) ? gemm_f64(w, A, B, C, alpha, beta) : gemm_f32(w, A, B, C, (float)alpha, (float)beta, bias);
  if (r != CUDA_SUCCESS) snprintf(msg, cap, "%s: out of host memory for the product", fcb_entry_name(p->entry));
  return r;
}

/* Element i of a vector of len elements with increment inc (BLAS: a
 * negative increment walks the vector from its far end). */
static size_t vec_index(int i, int len, int inc) {
  return inc > 0 ? (size_t)i * (size_t)inc : (size_t)(len - 1 - i) * (size_t)(-(long long)inc);
}

static size_t vec_bytes(int len, int inc, size_t esize) {
  unsigned long long step = inc > 0 ? (unsigned long long)inc : (unsigned long long)(-(long long)inc);
  return len <= 0 ? 0 : (size_t)(((unsigned long long)(len - 1) * step + 1) * esize);
}

/* y = alpha op(A) x + beta y for batch member `batch` (stride_a/_b/_c elements apart),
 * summing over A's other dimension in order. */
static CUresult run_gemv(const fcb_work *w, int batch, double alpha, double beta, char *msg, size_t cap) {
  const fcb_product *p = &w->p;
  int f64 = p->atype == CUDA_R_64F, trans = p->transa != CUBLAS_OP_N;
  int ly = trans ? p->n : p->m, lx = trans ? p->m : p->n;
  size_t es = f64 ? 8 : 4;
  void *A = NULL, *x = NULL, *y = NULL;
  CUresult r = CUDA_SUCCESS;
  if (alpha != 0.0)
    r = operand(w, "A", p->a, p->stride_a, batch, es, matrix_bytes(p->m, p->n, p->lda, es), &A, msg, cap);
  if (r == CUDA_SUCCESS && alpha != 0.0)
    r = operand(w, "x", p->b, p->stride_b, batch, es, vec_bytes(lx, p->ldb, es), &x, msg, cap);
  if (r == CUDA_SUCCESS) r = operand(w, "y", p->c, p->stride_c, batch, es, vec_bytes(ly, p->ldc, es), &y, msg, cap);
  if (r != CUDA_SUCCESS) return r;
  for (int i = 0; i < ly; i++) {
    size_t yi = vec_index(i, ly, p->ldc);
    if (f64) {
      double sum = 0.0, *Y = y;
      for (int l = 0; alpha != 0.0 && l < lx; l++)
        sum += ((const double *)A)[trans ? op_index(CUBLAS_OP_N, l, i, p->lda) : op_index(CUBLAS_OP_N, i, l, p->lda)] *
               ((const double *)x)[vec_index(l, lx, p->ldb)];
      Y[yi] = beta != 0.0 ? alpha * sum + beta * Y[yi] : alpha * sum;
    } else {
      float sum = 0.0f, fa = (float)alpha, fb = (float)beta, *Y = y;
      for (int l = 0; fa != 0.0f && l < lx; l++)
        sum += ((const float *)A)[trans ? op_index(CUBLAS_OP_N, l, i, p->lda) : op_index(CUBLAS_OP_N, i, l, p->lda)] *
               ((const float *)x)[vec_index(l, lx, p->ldb)];
      Y[yi] = fb != 0.0f ? fa * sum + fb * Y[yi] : fa * sum;
    }
  }
  return CUDA_SUCCESS;
}

/* The work's run function: under the libcuda double's lock, in the work's
 * context; it calls nothing but fakecuda_device_span. */
static CUresult run_product(void *payload, char *msg, size_t cap) {
  const fcb_work *w = payload;
  double alpha, beta;
  CUresult r = read_scalars(w, &alpha, &beta, msg, cap);
  if (r == CUDA_SUCCESS && w->workspace_bytes > 0) {
    void *ws; /* a workspace freed since cublasSetWorkspace_v2 faults as cuBLAS's use of it would [U] */
    r = operand(w, "workspace", w->workspace, 0, 0, 1, w->workspace_bytes, &ws, msg, cap);
  }
  if (r != CUDA_SUCCESS) return r;
  for (int b = 0; b < w->p.batch && r == CUDA_SUCCESS; b++)
    r = w->p.gemv ? run_gemv(w, b, alpha, beta, msg, cap) : run_gemm_member(w, b, alpha, beta, msg, cap);
  return r;
}

/* ------------------------------------------------------------ issue --- */

static void describe(const fcb_work *w, const fcb_handle_state *hs, int issued, char *out, size_t cap) {
  const fcb_product *p = &w->p;
  int n = snprintf(out, cap, "entry=%s ", fcb_entry_name(p->entry));
  if (p->gemv)
    n += snprintf(out + n, cap - (size_t)n,
                  "trans=%c m=%d n=%d lda=%d incx=%d incy=%d batch=%d strideA=%lld stridex=%lld stridey=%lld A=%s ",
                  op_letter(p->transa), p->m, p->n, p->lda, p->ldb, p->ldc, p->batch, p->stride_a, p->stride_b,
                  p->stride_c, type_name(p->atype));
  else
    n += snprintf(out + n, cap - (size_t)n,
                  "transa=%c transb=%c m=%d n=%d k=%d lda=%d ldb=%d ldc=%d batch=%d strideA=%lld strideB=%lld "
                  "strideC=%lld A=%s B=%s C=%s ",
                  op_letter(p->transa), op_letter(p->transb), p->m, p->n, p->k, p->lda, p->ldb, p->ldc, p->batch,
                  p->stride_a, p->stride_b, p->stride_c, type_name(p->atype), type_name(p->btype), type_name(p->ctype));
  if (w->lt)
    n += snprintf(out + n, cap - (size_t)n, "epilogue=%s ",
                  w->epilogue == 1 ? "DEFAULT" : w->epilogue == 2 ? "RELU" : w->epilogue == 4 ? "BIAS"
                  : w->epilogue == 6 ? "RELU_BIAS" : w->epilogue == 32 ? "GELU" : w->epilogue == 36 ? "GELU_BIAS" : "?");
  snprintf(out + n, cap - (size_t)n, "compute=%s precision=%s math=%s%s pointer_mode=%s stream=%p issued=%s",
           compute_name(p->compute), rounding_name(w->rounding, p->compute), math_name(hs->math_mode),
           hs->math_mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION ? "|DISALLOW_REDUCED_PRECISION_REDUCTION"
                                                                            : "",
           w->device_scalars ? "device" : "host", (void *)hs->stream, issued ? "yes" : "no(empty)");
}

/* Host pointer mode: alpha and beta are read now, as cuBLAS reads them
 * before it returns ("the scalars can be ... on the stack"). */
static void take_scalars(fcb_work *w) {
  if (w->device_scalars) return;
  if (is_64f(w->p.compute)) {
    memcpy(&w->alpha, w->p.alpha, 8), memcpy(&w->beta, w->p.beta, 8);
  } else {
    float a, b;
    memcpy(&a, w->p.alpha, 4), memcpy(&b, w->p.beta, 4);
    w->alpha = a, w->beta = b;
  }
}

static int is_empty(const fcb_product *p) { return p->m == 0 || p->n == 0 || p->batch == 0; }

/* Checks a product at the call and issues it on the handle's stream (lt: a cublasLtMatmul's
 * stream, workspace and epilogue instead; NULL for cuBLAS's own entry points). */
static cublasStatus_t product_lt(cublasHandle_t h, fcb_product *p, const fcb_lt_call *lt) {
  const char *e = fcb_entry_name(p->entry);
  fcb_version v;
  fcb_handle_state hs;
  cublasStatus_t st = fcb_enter(p->entry, &v);
  if (st == CUBLAS_STATUS_SUCCESS) st = fcb_handle_get(h, e, &hs);
  if (st == CUBLAS_STATUS_SUCCESS && lt) { /* cublasLtMatmul: its own stream and workspace, its compute type alone */
    hs.stream = lt->stream;
    hs.workspace = lt->workspace, hs.workspace_bytes = lt->workspace_bytes;
    hs.math_mode = CUBLAS_DEFAULT_MATH;
    hs.pointer_mode = CUBLAS_POINTER_MODE_HOST;
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = p->gemv ? check_gemv_arguments(p) : check_gemm_arguments(p);
  if (st == CUBLAS_STATUS_SUCCESS) st = check_types(p);
  if (st == CUBLAS_STATUS_SUCCESS) st = check_device(p, &hs, &v);
  if (st == CUBLAS_STATUS_SUCCESS) st = check_context(p, &hs);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  fcb_work *w = calloc(1, sizeof *w);
  if (!w) return fcb_refuse(CUBLAS_STATUS_ALLOC_FAILED, "%s: out of host memory", e);
  w->p = *p;
  if (lt) w->lt = 1, w->epilogue = lt->epilogue, w->bias = lt->bias;
  w->rounding = p->gemv ? ROUND_NONE : input_rounding(&w->p, hs.math_mode, hs.cc); /* no tensor cores in GEMV [U] */
  w->output_reduction = output_reduction(&w->p, hs.math_mode);
  w->device_scalars = hs.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  w->workspace = hs.workspace, w->workspace_bytes = hs.workspace_bytes;
  w->span = hs.drv.device_span;
  take_scalars(w);
  char text[1024];
  describe(w, &hs, !is_empty(p), text, sizeof text);
  fcb_note_product(text);
  if (is_empty(p)) { /* quick return: nothing to compute, nothing issued */
    free(w);
    return CUBLAS_STATUS_SUCCESS;
  }
  CUresult r = hs.drv.enqueue_work(hs.stream, run_product, free, w, e);
  if (r != CUDA_SUCCESS)
    return fcb_refuse(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the work could not be issued on stream %p (CUresult %d)", e,
                      (void *)hs.stream, (int)r);
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t product(cublasHandle_t h, fcb_product *p) { return product_lt(h, p, NULL); }

/* ----------------------------------------------------- entry points --- */

#define DPTR(x) ((CUdeviceptr)(uintptr_t)(x))

FCB_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                                     const void *alpha, const void *A, int atype, int lda,
                                                     long long stride_a, const void *B, int btype, int ldb,
                                                     long long stride_b, const void *beta, void *C, int ctype, int ldc,
                                                     long long stride_c, int batch, int compute, int algo) {
  fcb_product p = {FCB_cublasGemmStridedBatchedEx, 0, transa, transb, m, n, k, alpha, beta, DPTR(A), DPTR(B), DPTR(C),
                   atype, btype, ctype, lda, ldb, ldc, stride_a, stride_b, stride_c, batch, compute, algo};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                       const void *alpha, const void *A, int atype, int lda, const void *B, int btype,
                                       int ldb, const void *beta, void *C, int ctype, int ldc, int compute, int algo) {
  fcb_product p = {FCB_cublasGemmEx, 0, transa, transb, m, n, k, alpha, beta, DPTR(A), DPTR(B), DPTR(C), atype, btype,
                   ctype, lda, ldb, ldc, 0, 0, 0, 1, compute, algo};
  return product(handle, &p);
}

/* The typed GEMMs are GemmEx with their type and COMPUTE_32F / _64F (which
 * the handle's math mode then shapes, as for GemmEx). */
FCB_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda, const float *B, int ldb,
                                         const float *beta, float *C, int ldc) {
  fcb_product p = {FCB_cublasSgemm_v2, 0, transa, transb, m, n, k, alpha, beta, DPTR(A), DPTR(B), DPTR(C), CUDA_R_32F,
                   CUDA_R_32F, CUDA_R_32F, lda, ldb, ldc, 0, 0, 0, 1, CUBLAS_COMPUTE_32F, -1};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                         const double *alpha, const double *A, int lda, const double *B, int ldb,
                                         const double *beta, double *C, int ldc) {
  fcb_product p = {FCB_cublasDgemm_v2, 0, transa, transb, m, n, k, alpha, beta, DPTR(A), DPTR(B), DPTR(C), CUDA_R_64F,
                   CUDA_R_64F, CUDA_R_64F, lda, ldb, ldc, 0, 0, 0, 1, CUBLAS_COMPUTE_64F, -1};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                                    const float *alpha, const float *A, int lda, long long stride_a,
                                                    const float *B, int ldb, long long stride_b, const float *beta,
                                                    float *C, int ldc, long long stride_c, int batch) {
  fcb_product p = {FCB_cublasSgemmStridedBatched, 0, transa, transb, m, n, k, alpha, beta, DPTR(A), DPTR(B), DPTR(C),
                   CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                   CUBLAS_COMPUTE_32F, -1};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                                    const double *alpha, const double *A, int lda, long long stride_a,
                                                    const double *B, int ldb, long long stride_b, const double *beta,
                                                    double *C, int ldc, long long stride_c, int batch) {
  fcb_product p = {FCB_cublasDgemmStridedBatched, 0, transa, transb, m, n, k, alpha, beta, DPTR(A), DPTR(B), DPTR(C),
                   CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                   CUBLAS_COMPUTE_64F, -1};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, int trans, int m, int n, const float *alpha,
                                         const float *A, int lda, const float *x, int incx, const float *beta, float *y,
                                         int incy) {
  fcb_product p = {FCB_cublasSgemv_v2, 1, trans, CUBLAS_OP_N, m, n, 0, alpha, beta, DPTR(A), DPTR(x), DPTR(y),
                   CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, lda, incx, incy, 0, 0, 0, 1, CUBLAS_COMPUTE_32F, -1};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasDgemv_v2(cublasHandle_t handle, int trans, int m, int n, const double *alpha,
                                         const double *A, int lda, const double *x, int incx, const double *beta,
                                         double *y, int incy) {
  fcb_product p = {FCB_cublasDgemv_v2, 1, trans, CUBLAS_OP_N, m, n, 0, alpha, beta, DPTR(A), DPTR(x), DPTR(y),
                   CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, lda, incx, incy, 0, 0, 0, 1, CUBLAS_COMPUTE_64F, -1};
  return product(handle, &p);
}

/* cublas_api.h of CUDA 13.0: the strided batches of gemv (A, x and y of member i at A + i *
 * strideA, x + i * stridex, y + i * stridey). Not every release has them [U: added during
 * cuBLAS 11]; the double exports them whatever FAKECUBLAS_VERSION says. */
FCB_EXPORT cublasStatus_t cublasSgemvStridedBatched(cublasHandle_t handle, int trans, int m, int n, const float *alpha,
                                                    const float *A, int lda, long long stride_a, const float *x,
                                                    int incx, long long stride_x, const float *beta, float *y, int incy,
                                                    long long stride_y, int batch) {
  fcb_product p = {FCB_cublasSgemvStridedBatched, 1, trans, CUBLAS_OP_N, m, n, 0, alpha, beta, DPTR(A), DPTR(x),
                   DPTR(y), CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, lda, incx, incy, stride_a, stride_x, stride_y, batch,
                   CUBLAS_COMPUTE_32F, -1};
  return product(handle, &p);
}

FCB_EXPORT cublasStatus_t cublasDgemvStridedBatched(cublasHandle_t handle, int trans, int m, int n, const double *alpha,
                                                    const double *A, int lda, long long stride_a, const double *x,
                                                    int incx, long long stride_x, const double *beta, double *y,
                                                    int incy, long long stride_y, int batch) {
  fcb_product p = {FCB_cublasDgemvStridedBatched, 1, trans, CUBLAS_OP_N, m, n, 0, alpha, beta, DPTR(A), DPTR(x),
                   DPTR(y), CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, lda, incx, incy, stride_a, stride_x, stride_y, batch,
                   CUBLAS_COMPUTE_64F, -1};
  return product(handle, &p);
}

/* Entered from fakecublaslt.c under the cuBLASLt entry point's name (fcb_enter counts it). */
cublasStatus_t fcb_lt_product(const fcb_lt_call *c) {
  fcb_product p = {FCB_cublasLtMatmul, 0, c->transa, c->transb, c->m, c->n, c->k, c->alpha, c->beta, c->a, c->b, c->c,
                   CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, c->lda, c->ldb, c->ldc, 0, 0, 0, 1, c->compute, -1};
  return product_lt(c->handle, &p, c);
}
