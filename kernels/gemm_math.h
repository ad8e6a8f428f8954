/* The arithmetic of one GEMM output element, written once for the CPU's
 * portable GEMM (ops/linalg.c includes this header with a relative path) and
 * for the kernels of kernels/gemm.cu, so both give the same bits.
 *
 * An output element of C = alpha * op(X) op(Y) (+ beta * c) is, in order:
 *   acc = +0; for k = 0, 1, ..., K-1: acc = fma(x[k], y[k], acc)
 *                                       (em_gemm_step_*: one rounding a step,
 *                                        em_fmaf / em_fma of em_math.h)
 *   t = alpha * acc                     (no FMA from here on)
 *   out = accumulate ? prev + t          (a later product of a sum over
 *                                         broadcast batches, in batch order)
 *       : beta != 0 ? t + beta * c       (gemm's c; beta == 0 never reads c)
 *       : t
 * The fma is explicit, correctly rounded and written at this one place, so
 * the CPU (glibc fmaf or vfmadd) and the GPU (fma.rn) agree bit for bit;
 * contraction stays off everywhere else. acc may become -0 (an fma whose
 * exact product is a negative value below the smallest subnormal, added to
 * +0), so a zero-padded tile edge must add a product of exactly -0 (kernels
 * pad x with +0 and y with -0 past K): fma(+0, -0, acc) == acc for every
 * acc, -0 and NaN included, while a +0 product would turn -0 into +0.
 * Integer products use the unsigned types (wrapping, acc + x * y, alpha 1,
 * beta 0). */
#ifndef EM_GEMM_MATH_H
#define EM_GEMM_MATH_H

#include "em_math.h" /* em_fmaf, em_fma; EM_HD (EM_DEVICE on the device, static inline on the host) */

#define EM_GEMM_HD EM_HD

/* acc after one more k: the only place the sum's arithmetic is written. */
EM_GEMM_HD float em_gemm_step_f32(float acc, float x, float y) { return em_fmaf(x, y, acc); }
EM_GEMM_HD double em_gemm_step_f64(double acc, double x, double y) { return em_fma(x, y, acc); }
EM_GEMM_HD unsigned int em_gemm_step_u32(unsigned int acc, unsigned int x, unsigned int y) { return acc + x * y; }
EM_GEMM_HD unsigned long long em_gemm_step_u64(unsigned long long acc, unsigned long long x, unsigned long long y) {
  return acc + x * y;
}

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
