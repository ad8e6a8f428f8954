/* The per-element rules of the index family (ops/index.c: cumsum, gather_nd,
 * scatter_nd, scatter_elements and their gradients), written once for the
 * CPU loops (ops/index.c includes this with a relative path) and the kernels
 * (kernels/index.cu), so both give the same bits.
 *
 * Compiled as host C11 (EM_HD is static inline) and as device code (EM_HD is
 * EM_DEVICE); see em_math.h. Integer sums and products wrap (two's
 * complement, computed in unsigned arithmetic so C defines them); float ones
 * are single IEEE operations in the input's type, as ONNX's reference
 * (numpy's add.accumulate) and onnxruntime compute them. */
#ifndef EM_INDEX_MATH_H
#define EM_INDEX_MATH_H

#include "em_math.h"

/* The scatters' reductions (ONNX's attribute "reduction"). none: the later
 * update (in index order) replaces the earlier one. */
#define EM_INDEX_NONE 0
#define EM_INDEX_ADD 1
#define EM_INDEX_MUL 2
#define EM_INDEX_MAX 3
#define EM_INDEX_MIN 4

/* An index v is valid for an axis of size n when -n <= v < n; a negative one
 * counts from the end. */
EM_HD int em_index_ok(long long v, long long n) { return v >= -n && v < n; }
EM_HD long long em_index_wrap(long long v, long long n) { return v < 0 ? v + n : v; }

EM_HD float em_index_add_f32(float a, float b) { return a + b; }
EM_HD double em_index_add_f64(double a, double b) { return a + b; }
EM_HD int em_index_add_i32(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
EM_HD long long em_index_add_i64(long long a, long long b) {
  return (long long)((unsigned long long)a + (unsigned long long)b);
}

/* max and min keep a NaN operand (numpy's maximum and minimum, which ONNX's
 * reference uses): the first NaN seen, unchanged. */
#define EM_INDEX_COMBINE(T, S, MUL, NAN_A, NAN_B)                           \
  EM_HD T em_index_combine_##S(T a, T b, int red) {                         \
    if (red == EM_INDEX_ADD) return em_index_add_##S(a, b);                 \
    if (red == EM_INDEX_MUL) return MUL;                                    \
    if (red == EM_INDEX_MAX || red == EM_INDEX_MIN) {                       \
      if (NAN_A) return a;                                                  \
      if (NAN_B) return b;                                                  \
      return (red == EM_INDEX_MAX ? b > a : b < a) ? b : a;                 \
    }                                                                       \
    return b;                                                               \
  }
EM_INDEX_COMBINE(float, f32, a * b, a != a, b != b)
EM_INDEX_COMBINE(double, f64, a * b, a != a, b != b)
EM_INDEX_COMBINE(int, i32, (int)((unsigned)a * (unsigned)b), 0, 0)
EM_INDEX_COMBINE(long long, i64, (long long)((unsigned long long)a * (unsigned long long)b), 0, 0)

#endif
