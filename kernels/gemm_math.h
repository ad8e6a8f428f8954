/* The arithmetic of one GEMM output element, written once for the CPU's
 * portable GEMM (ops/linalg.c includes this header with a relative path) and
 * for the kernels of kernels/gemm.cu, so both give the same bits.
 *
 * An output element of C = alpha * op(X) op(Y) (+ beta * c) is, in order:
 *   acc = +0; for k = 0, 1, ..., K-1: acc = acc + x[k] * y[k]   (no FMA)
 *   t = alpha * acc
 *   out = accumulate ? prev + t          (a later product of a sum over
 *                                         broadcast batches, in batch order)
 *       : beta != 0 ? t + beta * c       (gemm's c; beta == 0 never reads c)
 *       : t
 * acc starts at +0, so it is never -0 and adding the +0 products of a
 * zero-padded tile edge leaves it unchanged: the kernels may pad K.
 * Integer products use the unsigned types (wrapping, alpha 1, beta 0). */
#ifndef EM_GEMM_MATH_H
#define EM_GEMM_MATH_H

#if defined(__CUDACC__) || defined(__CUDA__)
#include "em_kernel.h"
#define EM_GEMM_HD EM_DEVICE
#else
#define EM_GEMM_HD static inline
#endif

#define EM_GEMM_EPILOGUE(T, SUF)                                                                    \
  EM_GEMM_HD T em_gemm_out_##SUF(T acc, T alpha, int accumulate, T prev, T beta, T c) {            \
    T t = alpha * acc;                                                                              \
    if (accumulate) return prev + t;                                                                \
    if (beta != (T)0) return t + beta * c;                                                          \
    return t;                                                                                       \
  }
EM_GEMM_EPILOGUE(float, f32)
EM_GEMM_EPILOGUE(double, f64)
EM_GEMM_EPILOGUE(unsigned int, u32)
EM_GEMM_EPILOGUE(unsigned long long, u64)
#undef EM_GEMM_EPILOGUE

#endif
