/* OpenBLAS for the fast CPU mode's products (ops/linalg.c, ops/conv.c,
 * through ops/recurrent.c): loaded on first use, single-threaded. See blas.c
 * for why Ember loads it itself rather than linking it. */
#ifndef EMBER_OPS_BLAS_H
#define EMBER_OPS_BLAS_H

#include <stddef.h>

#include "ember/device.h"

/* Loads OpenBLAS once per process (later calls return the first result) and
 * sets it to one thread (Ember splits products itself: ops/linalg.c says
 * why). Call before a product, outside parallel regions. Fails with
 * EM_ERR_UNSUPPORTED naming the library and dlerror() when it cannot be
 * loaded; nothing else in Ember needs it. */
em_status em_blas_ready(void);

/* Row-major C = alpha * op(A) @ op(B) + beta * C (ta / tb: the operand is
 * used transposed); sizes as BLAS's int. Only after em_blas_ready succeeded. */
void em_blas_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc);
void em_blas_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                   int ldb, double beta, double *C, int ldc);

/* The core type to ask OpenBLAS for, or NULL to let it choose: a pure
 * function of the CPU (vendor "AuthenticAMD" / "GenuineIntel" / ...; avx512:
 * F, CD, BW, DQ and VL present and their registers enabled by the OS; bf16:
 * AVX512_BF16) and of OPENBLAS_CORETYPE as the user set it (env, may be
 * NULL). Exposed for tests/unit/test_blas.c. */
const char *em_blas_core_choice(const char *vendor, int avx512, int bf16, const char *env);

/* The public em_cpu_blas_info (include/ember/device.h) is defined in blas.c. */

#endif
