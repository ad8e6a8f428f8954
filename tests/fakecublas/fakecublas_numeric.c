/* The narrow formats of the cuBLAS double: IEEE binary16 (CUDA_R_16F),
 * bfloat16 (CUDA_R_16BF) and TF32 (the tensor cores' 19-bit format: the
 * sign and 8 exponent bits of binary32, 10 explicit mantissa bits). Every
 * narrowing rounds to nearest, ties to even, on the bits of the binary32
 * value: the sum of the dropped bits and the rounding increment carries into
 * the exponent by itself, so a value just below a power of two rounds up to
 * it and the largest values round up to infinity, as IEEE 754 says.
 * Infinities stay infinities; a NaN stays a NaN of the same sign, made
 * quiet, keeping the top bits of its payload. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fakecublas_internal.h"

static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float float_of(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* value >> shift, rounded to nearest even on the dropped bits (1 <= shift < 32). */
static uint32_t shift_round_even(uint32_t value, int shift) {
  uint32_t kept = value >> shift, dropped = value & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (dropped > half || (dropped == half && (kept & 1u))) kept++;
  return kept;
}

uint16_t fcb_f32_to_f16(float f) {
  uint32_t x = bits_of(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (exp == 0xffu) /* infinity, or a quiet NaN keeping the payload's top bits */
    return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
  if (exp == 0) return sign; /* binary32 zeros and subnormals are far below binary16's range */
  int e = (int)exp - 127;
  if (e > 15) return (uint16_t)(sign | 0x7c00u); /* 2^16 and up: beyond 65504 and its rounding range */
  if (e >= -14) /* a normal binary16 exponent: drop 13 mantissa bits (a carry may reach infinity) */
    return (uint16_t)(sign | shift_round_even(((uint32_t)(e + 15) << 23) | man, 13));
  /* Below 2^-14: a binary16 subnormal, the 24-bit significand in units of 2^-24. */
  int shift = -e - 1;
  if (shift > 24) return sign; /* below half the smallest subnormal */
  return (uint16_t)(sign | shift_round_even(man | 0x800000u, shift));
}

float fcb_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return float_of(sign | 0x7f800000u | (man << 13));
  if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in binary32 */
    float v = ldexpf((float)man, -24);
    return sign ? -v : v;
  }
  return float_of(sign | ((exp - 15u + 127u) << 23) | (man << 13));
}

uint16_t fcb_f32_to_bf16(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN: keep it, quiet */
  return (uint16_t)(shift_round_even(x & 0x7fffffffu, 16) | ((x >> 16) & 0x8000u));
}

float fcb_bf16_to_f32(uint16_t b) { return float_of((uint32_t)b << 16); }

float fcb_round_tf32(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return float_of((x | 0x400000u) & ~0x1fffu); /* NaN, quiet */
  uint32_t mag = shift_round_even(x & 0x7fffffffu, 13) << 13;
  return float_of(mag | (x & 0x80000000u));
}
