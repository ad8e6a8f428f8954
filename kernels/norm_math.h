/* The norm family's shared arithmetic (ops/norm.c on the CPU, kernels/norm.cu
 * on a GPU), compiled by both without FMA contraction:
 *
 * - dropout's mask: a counter-based generator, so the mask is a pure function
 *   of (seed, run step, node, element index) and every device draws the same
 *   one. The key is splitmix64's finaliser over the seed, the step and the
 *   node; element i is kept when the top 53 bits of mix64(key + (i + 1)
 *   golden) are >= ratio * 2^53 (rounded up).
 * - LRN's power: portable mode needs the same bits from the CPU and every GPU,
 *   so base^e is e^(e log base) through loss_math.h's binary64 exp and log
 *   (relative error about 2^-49 for LRN's arguments); the CPU's fast mode
 *   keeps libm's pow. Square roots are IEEE's (libm's sqrt and the GPU's
 *   sqrt.rn agree bit for bit). */
#ifndef EMBER_NORM_MATH_H
#define EMBER_NORM_MATH_H

#include "loss_math.h"

#define NM_GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's finaliser: a bijective 64-bit mix. */
EM_HD unsigned long long nm_mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One key per (seed, step, node). */
EM_HD unsigned long long nm_dropout_key(unsigned long long seed, unsigned long long step, unsigned long long node) {
  unsigned long long key = nm_mix64(seed + NM_GOLDEN);
  key = nm_mix64(key ^ nm_mix64(step + 2 * NM_GOLDEN));
  return nm_mix64(key ^ nm_mix64(node + 3 * NM_GOLDEN));
}

/* Is element i kept? thr = ceil(ratio * 2^53). */
EM_HD int nm_dropout_keep(unsigned long long key, long long i, unsigned long long thr) {
  return (nm_mix64(key + (unsigned long long)(i + 1) * NM_GOLDEN) >> 11) >= thr;
}

/* base^e for base > 0 (LRN's base is >= its bias > 0). */
EM_HD double nm_pow_d(double base, double e) { return lm_exp_d(e * lm_log_d(base)); }

#endif
