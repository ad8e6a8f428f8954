/* cuBLAS for the fast mode: the library loaded once per process, one handle
 * per device, and the decision whether a device may use it, with the reason
 * when not (cublas.c). Ops call em_cublas_gemm for their products
 * (ops/linalg_cublas.c); portable mode never comes here. */
#ifndef EMBER_RUNTIME_CUBLAS_H
#define EMBER_RUNTIME_CUBLAS_H

#include <stddef.h>
#include <stdint.h>

#include "ember/runtime.h"
#include "ember/tensor.h"

/* One cuBLAS call in cuBLAS's own terms: column-major, C = alpha op(A) op(B)
 * + beta C for `batch` products `stride_*` elements apart (batch 1: a plain
 * GEMM). dt is the type of A, B and C; alpha and beta are converted to it. */
typedef struct em_cublas_gemm {
  em_dtype dt;            /* EM_F32, EM_F64, or EM_F16 / EM_BF16 (f32 accumulation, one rounding into C) */
  int ta, tb;             /* op(A) = A^T, op(B) = B^T */
  int m, n, k;            /* op(A) is m x k, op(B) k x n, C m x n */
  const void *a, *b;
  void *c;
  int lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;
  int batch;
  double alpha, beta;
  int tf32;               /* f32 products may round their inputs to TF32 (tensor cores): only when asked;
                           * ignored for the other dtypes */
} em_cublas_gemm;

/* Whether em_cublas_gemm_run issues a product as a matrix-vector one (cublas<t>gemv, strided
 * batches through cublas<t>gemvStridedBatched where the library has it): f32 or f64 with
 * m == 1 or n == 1, and for f32 only when TF32 is not allowed. gemv has no TF32 road (no compute
 * type; a matvec reads each matrix element once, bound by memory, so tensor cores would not pay);
 * with TF32 allowed the matvec stays on GemmEx with TF32 compute, so that an f32 product rounds
 * the same way whatever its shape (a batch of one row like a batch of two). */
int em_cublas_is_gemv(em_dtype dt, int m, int n, int tf32);

/* Whether products of dtype dt on dev go through cuBLAS: 1, or 0 with the
 * reason in why (no library, EMBER_CUBLAS=0, the library does not support
 * this device or driver, a dtype it is not used for, no tensor cores for a
 * half dtype (em_cublas_half_supports), the handle could not be made).
 * Loads the library and makes the device's handle on the first call; the
 * answer for a device does not change until em_shutdown. */
int em_cublas_usable(em_device dev, em_dtype dt, char *why, size_t cap);

/* The rule for f16 and bf16 products alone, a pure function of the compute capability cc: 1
 * where the device has tensor cores for dt (f16 from 7.0, bf16 from 8.0), else 0 and why (the
 * product then runs on f32 copies: engine/half.c). em_cublas_usable applies it. */
int em_cublas_half_supports(em_dtype dt, int cc, char *why, size_t cap);

/* Issues g on stream s of dev (which em_cublas_usable accepted). Any device
 * memory cuBLAS needs for its workspace comes from the device's caching
 * allocator, on s. A failure names the call and the cuBLAS status. */
em_status em_cublas_gemm_run(em_device dev, em_stream *s, const em_cublas_gemm *g);

/* The support rule alone, a pure function of the versions (tested over the
 * matrix): cuBLAS major.minor.patch against a driver (cuDriverGetVersion)
 * and a device of compute capability cc (10 * major + minor). 1 when
 * supported, else 0 and why. */
int em_cublas_supports(int major, int minor, int patch, int driver_version, int cc, char *why, size_t cap);

/* The loaded library's major version (0: none) and a cuBLAS status as text
 * (cublasGetStatusName where the library has it), for cublaslt.c, which loads the
 * cuBLASLt of the same major and shares cuBLAS's statuses. */
int em_cublas_major(void);
const char *em_cublas_status_text(int st);

/* The loaded library for reports: "" when none; its version text. */
const char *em_cublas_library(char *version, size_t cap);

/* Destroys the handles (em_shutdown, with the runtime's lock held and each
 * device's context alive). */
struct em_runtime;
void em_cublas_shutdown(struct em_runtime *rt);

#endif
