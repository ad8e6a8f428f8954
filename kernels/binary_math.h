/* Per-element arithmetic of the binary op family (ops/binary.c), written once
 * for the CPU loops (ops/binary.c includes this header with a relative path)
 * and for the kernels (kernels/binary.cu), so every device computes the same
 * bits (DESIGN.md, portable mode).
 *
 * Everything here is IEEE + - * /, comparisons, conversions and integer bit
 * operations, which x86-64 SSE and every NVIDIA GPU round alike; FMA
 * contraction is off in every build. Where the CPU used libm before (powf,
 * logf, fmodf, floorf, truncf and their f64 twins) this header has its own:
 * em_powf / em_logf from em_math.h, and an exact remainder, floor and trunc
 * below. f64 pow and log stay libm's, on the CPU only: em_math.h has no
 * binary64 pow accurate to f64 precision, so the GPU hands f64 pow (and its
 * gradients) back to the CPU (ops/binary_gpu.c).
 *
 * NaN: + - * / give the hardware's NaN (x86 and NVIDIA differ in the payload,
 * never in NaN-ness); the functions here that test for NaN return em_math's
 * canonical one. Integer ops never trap: x/0 = 0, INT_MIN/-1 = INT_MIN. */
#ifndef EM_BINARY_MATH_H
#define EM_BINARY_MATH_H

#include "em_math.h"

/* Op codes of the arithmetic, comparison and logic kernels; the order is the
 * op table's in ops/binary.c. */
#define EM_BIN_ADD 0
#define EM_BIN_SUB 1
#define EM_BIN_MUL 2
#define EM_BIN_DIV 3
#define EM_BIN_POW 4
#define EM_BIN_MAX 5
#define EM_BIN_MIN 6
#define EM_BIN_MOD 7 /* fmod=0: the sign of y */
#define EM_BIN_EQ 8
#define EM_BIN_LT 9
#define EM_BIN_GT 10
#define EM_BIN_LE 11
#define EM_BIN_GE 12
#define EM_BIN_AND 13
#define EM_BIN_OR 14
#define EM_BIN_XOR 15
#define EM_BIN_FMOD 16 /* mod with fmod=1: the sign of x */

/* Codes of _binary_grad's kernel: g = dy, a = x, b = y. */
#define EM_BGRAD_NEG 0    /* -g */
#define EM_BGRAD_DIV0 1   /* g / b */
#define EM_BGRAD_DIV1 2   /* -g a / b^2 */
#define EM_BGRAD_POW0 3   /* g b a^(b-1), 0 where b == 0 */
#define EM_BGRAD_POW1 4   /* g a^b log a where a > 0, else 0 */
#define EM_BGRAD_MAX0 5   /* g where a >= b */
#define EM_BGRAD_MAX1 6   /* g where a < b */
#define EM_BGRAD_MIN0 7   /* g where a <= b */
#define EM_BGRAD_MIN1 8   /* g where a > b */
#define EM_BGRAD_MOD0 9   /* g */
#define EM_BGRAD_PYMOD1 10 /* -g floor(a / b), 0 where b == 0 */
#define EM_BGRAD_FMOD1 11  /* -g trunc(a / b), 0 where b == 0 */

/* ------------------------------------------------- float helpers, f64 --- */

EM_HD double em_bin_nan_d(void) { return em_as_double(0x7ff8000000000000ull); }
EM_HD int em_bin_isnan_d(double x) { return (em_as_u64(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
EM_HD double em_bin_fabs_d(double x) { return em_as_double(em_as_u64(x) & 0x7fffffffffffffffull); }
EM_HD double em_bin_copysign_d(double mag, double sgn) {
  return em_as_double((em_as_u64(mag) & 0x7fffffffffffffffull) | (em_as_u64(sgn) & 0x8000000000000000ull));
}

/* ------------------------------------------------------- trunc, floor --- */

/* Toward zero; the sign of a zero result is x's (as C's truncf). From 2^23 up
 * every float is an integer (and inf, NaN pass through). */
EM_HD float em_bin_trunc_f32(float x) {
  if (!(em__fabs(x) < 8388608.0f)) return x;
  return em__copysign((float)(int)x, x);
}
EM_HD double em_bin_trunc_f64(double x) {
  if (!(em_bin_fabs_d(x) < 4503599627370496.0)) return x; /* 2^52 */
  return em_bin_copysign_d((double)(long long)x, x);
}
/* Toward -inf; floor(-0) = -0. */
EM_HD float em_bin_floor_f32(float x) {
  float t = em_bin_trunc_f32(x);
  return t > x ? t - 1.0f : t;
}
EM_HD double em_bin_floor_f64(double x) {
  double t = em_bin_trunc_f64(x);
  return t > x ? t - 1.0 : t;
}

/* ---------------------------------------------------------- remainder --- */

/* C's fmod: x - trunc(x / y) y, exact (IEEE's remainder is always
 * representable), the sign of x. With x = mx 2^ex and y = my 2^ey (integer
 * significands, ex >= ey) the result is ((mx 2^(ex-ey)) mod my) 2^ey; the
 * power of two is applied a few bits at a time so every step fits in 64 bits.
 * fmod(x, 0), fmod(inf, y) and NaN operands give NaN; |x| < |y| gives x. */
EM_HD float em_bin_fmod_f32(float x, float y) {
  unsigned int ux = em_as_uint(x), uy = em_as_uint(y), sx = ux & 0x80000000u;
  ux &= 0x7fffffffu;
  uy &= 0x7fffffffu;
  if (uy == 0 || ux >= 0x7f800000u || uy > 0x7f800000u) return em__nan();
  if (ux < uy) return x;
  /* Biased exponents, subnormals as exponent 1 without the hidden bit. */
  int ex = (int)(ux >> 23), ey = (int)(uy >> 23);
  unsigned long long mx = ex ? (ux & 0x7fffffu) | 0x800000u : ux;
  unsigned long long my = ey ? (uy & 0x7fffffu) | 0x800000u : uy;
  if (!ex) ex = 1;
  if (!ey) ey = 1;
  unsigned long long r = mx % my; /* r < my < 2^24: r << 32 fits */
  while (ex > ey) {
    int sh = ex - ey < 32 ? ex - ey : 32;
    r = (r << sh) % my;
    ex -= sh;
  }
  if (r == 0) return em_as_float(sx);
  /* r 2^(ey - 150): normalise; below exponent 1 the result is subnormal. */
  while (r < 0x800000u && ey > 1) {
    r <<= 1;
    ey--;
  }
  unsigned int bits = r >= 0x800000u ? ((unsigned int)ey << 23) | ((unsigned int)r & 0x7fffffu) : (unsigned int)r;
  return em_as_float(bits | sx);
}
EM_HD double em_bin_fmod_f64(double x, double y) {
  unsigned long long ux = em_as_u64(x), uy = em_as_u64(y), sx = ux & 0x8000000000000000ull;
  const unsigned long long hidden = 0x10000000000000ull, frac = 0xfffffffffffffull;
  ux &= 0x7fffffffffffffffull;
  uy &= 0x7fffffffffffffffull;
  if (uy == 0 || ux >= 0x7ff0000000000000ull || uy > 0x7ff0000000000000ull) return em_bin_nan_d();
  if (ux < uy) return x;
  int ex = (int)(ux >> 52), ey = (int)(uy >> 52);
  unsigned long long mx = ex ? (ux & frac) | hidden : ux;
  unsigned long long my = ey ? (uy & frac) | hidden : uy;
  if (!ex) ex = 1;
  if (!ey) ey = 1;
  unsigned long long r = mx % my; /* r < my < 2^53: r << 11 fits */
  while (ex > ey) {
    int sh = ex - ey < 11 ? ex - ey : 11;
    r = (r << sh) % my;
    ex -= sh;
  }
  if (r == 0) return em_as_double(sx);
  while (r < hidden && ey > 1) {
    r <<= 1;
    ey--;
  }
  unsigned long long bits = r >= hidden ? ((unsigned long long)ey << 52) | (r & frac) : r;
  return em_as_double(bits | sx);
}

/* numpy's / Python's remainder: the sign of y (a zero takes y's sign). */
EM_HD float em_bin_pymod_f32(float x, float y) {
  float r = em_bin_fmod_f32(x, y);
  if (em__isnan(r)) return r;
  if (r == 0.0f) return em__copysign(0.0f, y);
  return (r < 0.0f) != (y < 0.0f) ? r + y : r;
}
EM_HD double em_bin_pymod_f64(double x, double y) {
  double r = em_bin_fmod_f64(x, y);
  if (em_bin_isnan_d(r)) return r;
  if (r == 0.0) return em_bin_copysign_d(0.0, y);
  return (r < 0.0) != (y < 0.0) ? r + y : r;
}

/* ------------------------------------------------------ float arithmetic --- */

EM_HD float em_bin_add_f32(float a, float b) { return a + b; }
EM_HD float em_bin_sub_f32(float a, float b) { return a - b; }
EM_HD float em_bin_mul_f32(float a, float b) { return a * b; }
EM_HD float em_bin_div_f32(float a, float b) { return a / b; }
/* max/min propagate a NaN of x (and of y, through the comparison failing). */
EM_HD float em_bin_max_f32(float a, float b) { return (a > b || a != a) ? a : b; }
EM_HD float em_bin_min_f32(float a, float b) { return (a < b || a != a) ? a : b; }
EM_HD double em_bin_add_f64(double a, double b) { return a + b; }
EM_HD double em_bin_sub_f64(double a, double b) { return a - b; }
EM_HD double em_bin_mul_f64(double a, double b) { return a * b; }
EM_HD double em_bin_div_f64(double a, double b) { return a / b; }
EM_HD double em_bin_max_f64(double a, double b) { return (a > b || a != a) ? a : b; }
EM_HD double em_bin_min_f64(double a, double b) { return (a < b || a != a) ? a : b; }

/* ---------------------------------------------------- integer arithmetic --- */

/* add/sub/mul through the unsigned type: two's complement wrap-around, never
 * undefined behaviour. Division truncates toward zero (C); x/0 gives 0 and
 * MIN/-1 wraps to MIN, so no input traps. Remainders: x mod 0 and x mod -1
 * are 0; pymod takes y's sign. */
EM_HD int em_bin_add_i32(int a, int b) { return (int)((unsigned int)a + (unsigned int)b); }
EM_HD int em_bin_sub_i32(int a, int b) { return (int)((unsigned int)a - (unsigned int)b); }
EM_HD int em_bin_mul_i32(int a, int b) { return (int)((unsigned int)a * (unsigned int)b); }
EM_HD int em_bin_div_i32(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return (int)(0u - (unsigned int)a);
  return a / b;
}
EM_HD int em_bin_cmod_i32(int a, int b) { return b == 0 || b == -1 ? 0 : a % b; }
EM_HD int em_bin_pymod_i32(int a, int b) {
  int r = em_bin_cmod_i32(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
EM_HD int em_bin_max_i32(int a, int b) { return a > b ? a : b; }
EM_HD int em_bin_min_i32(int a, int b) { return a < b ? a : b; }

EM_HD long long em_bin_add_i64(long long a, long long b) {
  return (long long)((unsigned long long)a + (unsigned long long)b);
}
EM_HD long long em_bin_sub_i64(long long a, long long b) {
  return (long long)((unsigned long long)a - (unsigned long long)b);
}
EM_HD long long em_bin_mul_i64(long long a, long long b) {
  return (long long)((unsigned long long)a * (unsigned long long)b);
}
EM_HD long long em_bin_div_i64(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return (long long)(0ull - (unsigned long long)a);
  return a / b;
}
EM_HD long long em_bin_cmod_i64(long long a, long long b) { return b == 0 || b == -1 ? 0 : a % b; }
EM_HD long long em_bin_pymod_i64(long long a, long long b) {
  long long r = em_bin_cmod_i64(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
EM_HD long long em_bin_max_i64(long long a, long long b) { return a > b ? a : b; }
EM_HD long long em_bin_min_i64(long long a, long long b) { return a < b ? a : b; }

/* ------------------------------------------------------------ gradients --- */

/* g = dy, a = x, b = y; the association is part of the contract (each
 * product rounds in this order on every device). */
EM_HD float em_bgrad_div1_f32(float g, float a, float b) { return -g * a / (b * b); }
EM_HD float em_bgrad_pow0_f32(float g, float a, float b) { return b == 0 ? 0.0f : g * b * em_powf(a, b - 1.0f); }
EM_HD float em_bgrad_pow1_f32(float g, float a, float b) { return a > 0 ? g * em_powf(a, b) * em_logf(a) : 0.0f; }
EM_HD float em_bgrad_pymod1_f32(float g, float a, float b) {
  return b != 0 ? -g * em_bin_floor_f32(a / b) : 0.0f;
}
EM_HD float em_bgrad_fmod1_f32(float g, float a, float b) {
  return b != 0 ? -g * em_bin_trunc_f32(a / b) : 0.0f;
}
EM_HD double em_bgrad_div1_f64(double g, double a, double b) { return -g * a / (b * b); }
EM_HD double em_bgrad_pymod1_f64(double g, double a, double b) {
  return b != 0 ? -g * em_bin_floor_f64(a / b) : 0.0;
}
EM_HD double em_bgrad_fmod1_f64(double g, double a, double b) {
  return b != 0 ? -g * em_bin_trunc_f64(a / b) : 0.0;
}

#endif
