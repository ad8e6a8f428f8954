/* Test hooks of the fake libcublas (tests/fakecublas, README.md), for tests
 * that dlopen() it: resolve them with dlsym by name and call through these
 * types. They take the double's lock and are not subject to FAKECUBLAS_FAIL
 * or to the configuration rules of the cuBLAS entry points. */
#ifndef FAKECUBLAS_H
#define FAKECUBLAS_H

#include <stddef.h>

/* fakecublas_call_count: calls of one cuBLAS entry point (its exported name,
 * e.g. "cublasGemmEx") since the configuration was read, refused and
 * injected failures included; 0 for a name the double does not export. */
typedef unsigned long (*fakecublas_call_count_fn)(const char *name);

/* fakecublas_reset: forget every handle (dropping the references they hold
 * on the loaded libcuda), every counter, the last GEMM and the
 * configuration, as if the library had been unloaded; the next call reads
 * the environment again. */
typedef void (*fakecublas_reset_fn)(void);

/* fakecublas_last_gemm: one line describing the last product that passed
 * the call's checks (GEMM or GEMV, issued or empty): entry point,
 * transa/transb, m n k, lda ldb ldc, batch and strides, A/B/C types,
 * compute type, the precision it emulated ("precision=tf32"), the handle's
 * math and pointer modes and the stream, as space-separated key=value
 * pairs; "" if none. fakecublas_last_error: why the last refused call was
 * refused ("" if none). Both are copies private to the calling thread, valid
 * until its next call of the same hook. */
typedef const char *(*fakecublas_text_fn)(void);

/* fakecublas_live_handles: handles created and not yet destroyed. */
typedef size_t (*fakecublas_live_handles_fn)(void);

#endif
