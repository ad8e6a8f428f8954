/* cuBLASLt for the fast mode's fused products (cublaslt.c): a GEMM whose epilogue adds a bias
 * broadcast along rows and applies relu or the tanh GELU while the result is written, in one
 * kernel. Used only where cuBLAS itself is (em_cublas_usable), f32 products (TF32 when asked);
 * ops/linalg_gpu.c decides per product and falls back to cuBLAS GemmEx and Ember's own
 * kernels whenever cuBLASLt is absent or declines. Portable mode never comes here. */
#ifndef EMBER_RUNTIME_CUBLASLT_H
#define EMBER_RUNTIME_CUBLASLT_H

#include <stddef.h>

#include "cublas.h"

/* The activation applied after the bias (cublasLtEpilogue_t's RELU and GELU bits). */
typedef enum em_lt_act { EM_LT_ACT_NONE = 0, EM_LT_ACT_RELU, EM_LT_ACT_GELU } em_lt_act;

/* Whether dev may run cuBLASLt matmuls: 1, or 0 with the reason in why (cuBLAS not used on dev,
 * no libcublasLt of the loaded cuBLAS's major, EMBER_CUBLASLT=0, its handle could not be made).
 * Loads the library and makes the device's handle on the first call. */
int em_cublaslt_usable(em_device dev, char *why, size_t cap);

/* Issues g (f32, batch 1; its beta is the product's, 0 or 1 over C) on stream s of dev with the
 * epilogue: bias (g->m floats, one per row of cuBLAS's column-major C, or NULL) added, then
 * act. *ran = 1 when issued; *ran = 0 with why when cuBLASLt declines it (no algorithm from the
 * heuristic, NOT_SUPPORTED, a workspace too small): nothing was issued and the caller takes
 * another road. Other failures fail the call, naming the cuBLASLt call and its status. */
em_status em_cublaslt_matmul(em_device dev, em_stream *s, const em_cublas_gemm *g, const void *bias, em_lt_act act,
                             int *ran, char *why, size_t cap);

/* "BIAS", "RELU_BIAS", "GELU_BIAS", "RELU", "GELU", "DEFAULT": the epilogue's name in reports. */
const char *em_cublaslt_epilogue_name(int bias, em_lt_act act);

/* Destroys the handles (em_shutdown, with the runtime's lock held and each device's context alive). */
struct em_runtime;
void em_cublaslt_shutdown(struct em_runtime *rt);

#endif
