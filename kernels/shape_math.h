/* The per-element rules of the shape family, written once for the CPU ops
 * (ops/shape.c includes this with a relative path) and the kernels
 * (kernels/shape.cu), so both give the same bits: cast's conversions between
 * dtypes, pad's source index, top_k's order.
 *
 * Compiled as host C11 (EM_HD is static inline) and as device code (EM_HD is
 * EM_DEVICE); see em_math.h. Only integer and IEEE operations whose results
 * C and PTX define identically are used: the float -> integer conversions
 * run only on values already known to be in range (truncation toward zero,
 * cvt.rzi on the GPU), int -> float rounds to nearest even (cvt.rn), and
 * double -> float rounds to nearest even (cvt.rn.f32.f64, no flush to zero). */
#ifndef EM_SHAPE_MATH_H
#define EM_SHAPE_MATH_H

#include "em_math.h"

/* dtype codes: the values of em_dtype (include/ember/tensor.h; ops/shape.c
 * checks they agree). Kernels cannot include the public headers. */
#define EM_SHAPE_F32 0
#define EM_SHAPE_F64 1
#define EM_SHAPE_F16 2
#define EM_SHAPE_BF16 3
#define EM_SHAPE_I32 4
#define EM_SHAPE_I64 5
#define EM_SHAPE_U8 6
#define EM_SHAPE_BOOL 7

/* pad's modes. */
#define EM_SHAPE_PAD_CONSTANT 0
#define EM_SHAPE_PAD_REFLECT 1
#define EM_SHAPE_PAD_EDGE 2

/* ------------------------------------------------------------- cast --- */

/* float -> integer: truncation toward zero, NaN -> 0, saturation at the
 * type's limits. The range checks come first, so the C conversion only ever
 * sees values it defines. */
EM_HD long long em_shape_sat_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775808.0) return 0x7fffffffffffffffLL;
  if (d < -9223372036854775808.0) return -0x7fffffffffffffffLL - 1;
  return (long long)d;
}

EM_HD int em_shape_sat_i32(double d) {
  if (d != d) return 0;
  if (d >= 2147483648.0) return 0x7fffffff;
  if (d <= -2147483649.0) return -0x7fffffff - 1;
  return (int)d;
}

EM_HD unsigned char em_shape_sat_u8(double d) {
  if (d != d || d <= -1.0) return 0;
  if (d >= 256.0) return 255;
  return (unsigned char)(int)d;
}

/* double -> float rounding to odd (truncate, then set the last bit when
 * inexact). Rounding that to f16/bf16 to nearest even gives the correctly
 * rounded result, which double -> float -> f16 (two roundings) does not. */
EM_HD float em_shape_f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  double af = (double)f < 0 ? -(double)f : (double)f, ad = d < 0 ? -d : d;
  unsigned int u = em_as_uint(f);
  if (af > ad) u -= 1u; /* rounded away from zero: step back toward it */
  return em_as_float(u | 1u);
}

/* int64 -> float rounding to odd: keep the top 24 significant bits and fold
 * every dropped bit into the last one. q < 2^24 and the power of two are
 * exact floats, so their product is exact. */
EM_HD float em_shape_i64_to_f32_odd(long long v) {
  unsigned long long m = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  if (m < (1ull << 24)) return (float)v;
  int sh = 0;
  while ((m >> sh) >= (1ull << 24)) sh++;
  unsigned long long q = m >> sh;
  if (m & ((1ull << sh) - 1ull)) q |= 1ull;
  float f = (float)q * em__pow2(sh);
  return v < 0 ? -f : f;
}

/* Element i of a float array (f32 f64 f16 bf16), exactly, as a double. */
EM_HD double em_shape_load_float(int t, const void *p, long long i) {
  switch (t) {
  case EM_SHAPE_F32: return (double)((const float *)p)[i];
  case EM_SHAPE_F64: return ((const double *)p)[i];
  case EM_SHAPE_F16: return (double)em_f16_bits_to_f32(((const unsigned short *)p)[i]);
  default: return (double)em_bf16_bits_to_f32(((const unsigned short *)p)[i]);
  }
}

/* Element i of an integer or bool array as an int64 (bool: 0 or 1). */
EM_HD long long em_shape_load_int(int t, const void *p, long long i) {
  switch (t) {
  case EM_SHAPE_I32: return (long long)((const int *)p)[i];
  case EM_SHAPE_I64: return ((const long long *)p)[i];
  case EM_SHAPE_U8: return (long long)((const unsigned char *)p)[i];
  default: return ((const unsigned char *)p)[i] != 0;
  }
}

/* d stored as element i of an array of dtype t (cast's rules from a float). */
EM_HD void em_shape_store_from_float(int t, void *p, long long i, double d) {
  switch (t) {
  case EM_SHAPE_F32: ((float *)p)[i] = (float)d; break;
  case EM_SHAPE_F64: ((double *)p)[i] = d; break;
  case EM_SHAPE_F16: ((unsigned short *)p)[i] = em_f32_to_f16_bits(em_shape_f64_to_f32_odd(d)); break;
  case EM_SHAPE_BF16: ((unsigned short *)p)[i] = em_f32_to_bf16_bits(em_shape_f64_to_f32_odd(d)); break;
  case EM_SHAPE_I32: ((int *)p)[i] = em_shape_sat_i32(d); break;
  case EM_SHAPE_I64: ((long long *)p)[i] = em_shape_sat_i64(d); break;
  case EM_SHAPE_U8: ((unsigned char *)p)[i] = em_shape_sat_u8(d); break;
  default: ((unsigned char *)p)[i] = d != 0; break;
  }
}

/* v stored as element i of an array of dtype t (cast's rules from an
 * integer: a narrower integer keeps the low bits, two's complement). */
EM_HD void em_shape_store_from_int(int t, void *p, long long i, long long v) {
  switch (t) {
  case EM_SHAPE_F32: ((float *)p)[i] = (float)v; break;
  case EM_SHAPE_F64: ((double *)p)[i] = (double)v; break;
  case EM_SHAPE_F16: ((unsigned short *)p)[i] = em_f32_to_f16_bits(em_shape_i64_to_f32_odd(v)); break;
  case EM_SHAPE_BF16: ((unsigned short *)p)[i] = em_f32_to_bf16_bits(em_shape_i64_to_f32_odd(v)); break;
  case EM_SHAPE_I32: ((int *)p)[i] = (int)(unsigned int)(unsigned long long)v; break;
  case EM_SHAPE_I64: ((long long *)p)[i] = v; break;
  case EM_SHAPE_U8: ((unsigned char *)p)[i] = (unsigned char)(unsigned long long)v; break;
  default: ((unsigned char *)p)[i] = v != 0; break;
  }
}

EM_HD int em_shape_is_float(int t) { return t == EM_SHAPE_F32 || t == EM_SHAPE_F64 || t == EM_SHAPE_F16 || t == EM_SHAPE_BF16; }

/* -------------------------------------------------------------- pad --- */

/* The source index along one axis of output position o (pb: the begin pad,
 * n: the input's size, n >= 1 outside constant mode), or -1 for the
 * constant. reflect mirrors without repeating the edge (numpy), folding
 * again when a pad is wider than the axis. */
EM_HD long long em_shape_pad_src(long long o, long long pb, long long n, int mode) {
  long long i = o - pb;
  if (i >= 0 && i < n) return i;
  if (mode == EM_SHAPE_PAD_CONSTANT) return -1;
  if (mode == EM_SHAPE_PAD_EDGE) return i < 0 ? 0 : n - 1;
  long long period = 2 * (n - 1);
  if (period == 0) return 0;
  long long r = i % period;
  if (r < 0) r += period;
  return r < n ? r : period - r;
}

/* The smallest output position after o (o = -1: the first) whose source is
 * p along an axis of ny outputs, or -1: pad's gradient walks the positions
 * of one source in increasing order with it. */
EM_HD long long em_shape_pad_next(long long o, long long p, long long pb, long long n, long long ny, int mode) {
  long long c = o + 1;
  if (c >= ny) return -1;
  if (mode == EM_SHAPE_PAD_CONSTANT) {
    long long at = pb + p;
    return at >= c && at < ny ? at : -1;
  }
  if (mode == EM_SHAPE_PAD_EDGE) { /* the positions clamping to p form one interval */
    long long lo = p == 0 ? 0 : pb + p, hi = p == n - 1 ? ny - 1 : pb + p;
    if (c < lo) c = lo;
    return c <= hi && c < ny ? c : -1;
  }
  if (n == 1) return c; /* reflect of one element: every position */
  /* reflect: o - pb is congruent to p or to -p modulo 2(n - 1) */
  long long period = 2 * (n - 1), best = -1;
  for (int s = 0; s < 2; s++) {
    long long want = s ? pb - p : pb + p;
    long long r = (want - c) % period;
    if (r < 0) r += period;
    if (best < 0 || c + r < best) best = c + r;
  }
  return best < ny ? best : -1;
}

/* ------------------------------------------------------------ top_k --- */

/* 1 when (a, at_a) comes before (b, at_b) in top_k's order: larger first
 * (largest) or smaller first, NaN after nothing when largest and last
 * otherwise, ties broken by the lower position. Keys of float dtypes. */
EM_HD int em_shape_topk_before_f(double a, long long at_a, double b, long long at_b, int largest) {
  int an = a != a, bn = b != b;
  if (an != bn) return largest ? an : bn;
  if (!an && a != b) return largest ? a > b : a < b;
  return at_a < at_b;
}

/* The same for integer keys. */
EM_HD int em_shape_topk_before_i(long long a, long long at_a, long long b, long long at_b, int largest) {
  if (a != b) return largest ? a > b : a < b;
  return at_a < at_b;
}

#endif
