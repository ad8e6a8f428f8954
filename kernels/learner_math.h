/* The per-element arithmetic of the learner op family, written once for the
 * CPU loops (ops/learner.c, which includes this header with a relative
 * path) and the kernels (kernels/learner.cu), so the CPU and every GPU give
 * the same bits (portable numerics: kernels/README.md). Every operation is
 * an IEEE + - * / or a correctly rounded square root, in the order written,
 * with no contraction and no fma: the bits do not depend on the device.
 *
 * The rules and their exact formulas are include/ember/learner.h's. The
 * hyperparameters of a step arrive as an f32 vector h (EM_LRN_H_*),
 * computed on the host in double by training/learner.c and rounded once;
 * the per-tensor values (learning rate times LARC's factor, the clipping
 * factor) are formed from them by em_lrn_tensor, the same f32 operations on
 * every device. */
#ifndef EM_LEARNER_MATH_H
#define EM_LEARNER_MATH_H

#include "em_math.h"

/* Rule codes: the order of ops/learner.c's table and em_learner_kind. */
enum {
  EM_LRN_SGD, EM_LRN_MOMENTUM, EM_LRN_NESTEROV, EM_LRN_ADAGRAD, EM_LRN_RMSPROP, EM_LRN_ADADELTA, EM_LRN_ADAM,
  EM_LRN_ADAMW, EM_LRN_FSADAGRAD, EM_LRN_RULES
};

/* The hyperparameter vector (f32, EM_LRN_H_COUNT entries). Slots a rule
 * does not use are 0. Its length is part of the hyperparameter input's
 * shape f32[16], which graphs saved in checkpoints hold: a new entry takes
 * a spare slot, never a new one (ops/learner.c asserts the 16). */
enum {
  EM_LRN_H_LR,       /* learning rate of this step (schedules, warmup, cosine; per-sample scaling) */
  EM_LRN_H_MU,       /* momentum, nesterov, fsadagrad: mu; adam(w): beta1 */
  EM_LRN_H_K,        /* momentum, nesterov: the gradient's gain (1, or 1 - mu: unit gain); adam(w): 1 - beta1;
                      * fsadagrad: 1 - mu */
  EM_LRN_H_RHO,      /* rmsprop, adadelta: rho; adam(w): beta2; fsadagrad: the variance momentum */
  EM_LRN_H_RHO1,     /* 1 - EM_LRN_H_RHO (in binary64, rounded once) */
  EM_LRN_H_EPS,      /* epsilon */
  EM_LRN_H_C1,       /* adam(w): 1 / (1 - beta1^t); fsadagrad: CNTK's targetAdagradAvDenom * sqrt(smoothed count) */
  EM_LRN_H_C2,       /* adam(w): 1 / sqrt(1 - beta2^t) */
  EM_LRN_H_L1,       /* coupled L1 */
  EM_LRN_H_L2,       /* coupled L2 */
  EM_LRN_H_WD,       /* decoupled weight decay */
  EM_LRN_H_CLIPV,    /* clipping by value (0: none) */
  EM_LRN_H_CLIPN,    /* clipping by global norm (0: none): read by _learner_scales */
  EM_LRN_H_ETA,      /* LARC's trust coefficient: read by _learner_scales */
  EM_LRN_H_LARC_WD,  /* LARC's weight decay (weight_decay + l2): read by _learner_scales */
  EM_LRN_H_UNSCALE,  /* the gradients' multiplier from loss scaling, 1 / S (the trainer's dynamic loss scaling,
                      * trainer.h): read by _learner_scales, which folds it into every tensor's multiplier
                      * before clipping, LARC and the rule see the gradient. 1 without loss scaling; 0 (the
                      * slot was spare before) counts as 1, so a vector written without it keeps its meaning */
  EM_LRN_H_COUNT
};

/* Slots (per-element state tensors) of each rule. */
EM_HD int em_lrn_slots(int rule) {
  switch (rule) {
  case EM_LRN_SGD: return 0;
  case EM_LRN_MOMENTUM: case EM_LRN_NESTEROV: case EM_LRN_ADAGRAD: case EM_LRN_RMSPROP: return 1;
  default: return 2;
  }
}

/* One tensor's constants of a step: its learning rate lr * LARC's factor
 * (scale[1]), its gradient multiplier (scale[0], clipping by global norm),
 * lr * wd for the decoupled weight decay, adam's lr / (1 - beta1^t). */
typedef struct em_lrn_t {
  float lr, gmul, lrwd, c1;
} em_lrn_t;

EM_HD em_lrn_t em_lrn_tensor(const float *h, float gmul, float lrmul) {
  em_lrn_t t;
  t.lr = h[EM_LRN_H_LR] * lrmul;
  t.gmul = gmul;
  t.lrwd = t.lr * h[EM_LRN_H_WD];
  t.c1 = t.lr * h[EM_LRN_H_C1];
  return t;
}

/* The gradient after clipping (global norm, then value) and coupled L2 /
 * L1. Each term only when its coefficient is set, so a zero coefficient
 * never turns an infinite parameter into NaN. A NaN gradient stays NaN. */
EM_HD float em_lrn_grad(const float *h, const em_lrn_t *t, float g, float p) {
  if (t->gmul != 1.0f) g = g * t->gmul;
  const float cv = h[EM_LRN_H_CLIPV];
  if (cv > 0.0f) g = g < -cv ? -cv : (g > cv ? cv : g);
  if (h[EM_LRN_H_L2] != 0.0f) g = g + h[EM_LRN_H_L2] * p;
  if (h[EM_LRN_H_L1] != 0.0f) g = g + h[EM_LRN_H_L1] * (p > 0.0f ? 1.0f : (p < 0.0f ? -1.0f : 0.0f));
  return g;
}

/* One element of a rule: p and its slots s0, s1 in place (s0, s1 unused by
 * rules with fewer slots). */
EM_HD void em_lrn_step(int rule, const float *h, const em_lrn_t *t, float *p, float g0, float *s0, float *s1) {
  float pv = *p;
  const float g = em_lrn_grad(h, t, g0, pv);
  if (t->lrwd != 0.0f) pv = pv - t->lrwd * pv;
  const float mu = h[EM_LRN_H_MU], k = h[EM_LRN_H_K], rho = h[EM_LRN_H_RHO], rho1 = h[EM_LRN_H_RHO1];
  const float eps = h[EM_LRN_H_EPS];
  switch (rule) {
  case EM_LRN_SGD: pv = pv - t->lr * g; break;
  case EM_LRN_MOMENTUM: {
    const float b = mu * *s0 + k * g;
    *s0 = b;
    pv = pv - t->lr * b;
    break;
  }
  case EM_LRN_NESTEROV: {
    const float b = mu * *s0 + k * g;
    *s0 = b;
    pv = pv - t->lr * (k * g + mu * b);
    break;
  }
  case EM_LRN_ADAGRAD: {
    const float s = *s0 + g * g;
    *s0 = s;
    pv = pv - t->lr * g / (em_sqrtf(s) + eps);
    break;
  }
  case EM_LRN_RMSPROP: {
    const float v = rho * *s0 + rho1 * (g * g);
    *s0 = v;
    pv = pv - t->lr * g / (em_sqrtf(v) + eps);
    break;
  }
  case EM_LRN_ADADELTA: {
    const float v = rho * *s0 + rho1 * (g * g);
    const float d = em_sqrtf(*s1 + eps) / em_sqrtf(v + eps) * g;
    *s0 = v;
    *s1 = rho * *s1 + rho1 * (d * d);
    pv = pv - t->lr * d;
    break;
  }
  case EM_LRN_ADAM:
  case EM_LRN_ADAMW: {
    const float m = mu * *s0 + k * g;
    const float v = rho * *s1 + rho1 * (g * g);
    *s0 = m;
    *s1 = v;
    pv = pv - t->c1 * m / (em_sqrtf(v) * h[EM_LRN_H_C2] + eps);
    break;
  }
  case EM_LRN_FSADAGRAD: {
    /* CNTK's _fsadagrad (Math/GPUMatrixCUDAKernels.cuh): adaMul = c1. */
    float gg = g;
    const float s = rho * *s0 + rho1 * (g * g);
    *s0 = s;
    if (s != 0.0f) {
      float w = h[EM_LRN_H_C1] * (1.0f / em_sqrtf(s));
      if (w > 10.0f) w = 10.0f;
      gg = gg * w;
    }
    if (mu > 0.0f) {
      gg = mu * *s1 + k * gg;
      *s1 = gg;
    }
    pv = pv - t->lr * gg;
    break;
  }
  default: break;
  }
  *p = pv;
}

/* The device table of a multi-tensor launch (ops/learner_gpu.c builds it,
 * kernels/learner.cu reads it): EM_LRN_TAB 64-bit entries per tensor, the
 * addresses as integers (kernels/em_kernel.h EM_DEVICE_ADDR). The update's
 * tensor i is (p, g, slot 0, slot 1: 0 where the rule has none, its
 * elements, its first block); it takes ceil(n / EM_LRN_CHUNK) blocks of
 * the launch's grid from its first block on, so block b works on the
 * tensor with the last first-block <= b (found by a binary search: tensors
 * of no elements take no block) and on its elements [c * CHUNK, (c + 1) *
 * CHUNK), c = b - first block. _learner_sumsq's tensor i is (x, elements, -,
 * -, -, -): one block each. Every element is independent, so how the
 * elements fall into blocks changes no bit. */
enum { EM_LRN_TAB_P, EM_LRN_TAB_G, EM_LRN_TAB_S0, EM_LRN_TAB_S1, EM_LRN_TAB_N, EM_LRN_TAB_BLOCK0, EM_LRN_TAB };
#define EM_LRN_CHUNK 2048

/* _learner_sumsq: the sum of squares of one tensor in an order fixed by
 * its size alone: EM_LRN_LANES lanes, lane l adding x[j]^2 (exact in
 * binary64) for j = l, l + LANES, ... in ascending j from +0, then the
 * lanes folded as a tree (lane l += lane l + s for s = LANES/2, ..., 1),
 * rounded to f32 once. The kernel runs a block of LANES threads per tensor,
 * each thread a lane (em_lrn_lane_sumsq); the CPU makes one pass over the
 * tensor with the lanes side by side (em_lrn_lanes_sumsq): each lane adds
 * the same terms in the same order either way. */
#define EM_LRN_LANES 256

EM_HD double em_lrn_lane_sumsq(const float *x, long long n, int lane) {
  double acc = 0.0;
  for (long long j = lane; j < n; j += EM_LRN_LANES) acc = acc + (double)x[j] * (double)x[j];
  return acc;
}

/* Every lane of x at once: lanes[l] = em_lrn_lane_sumsq(x, n, l), in one
 * pass over x (LANES consecutive elements feed the LANES lanes). */
EM_HD void em_lrn_lanes_sumsq(const float *x, long long n, double *lanes) {
  for (int l = 0; l < EM_LRN_LANES; l++) lanes[l] = 0.0;
  for (long long j0 = 0; j0 < n; j0 += EM_LRN_LANES) {
    const float *row = x + j0;
    const int m = n - j0 < EM_LRN_LANES ? (int)(n - j0) : EM_LRN_LANES;
    for (int l = 0; l < m; l++) lanes[l] = lanes[l] + (double)row[l] * (double)row[l];
  }
}

/* Folds lanes[0 .. EM_LRN_LANES) into lanes[0] (the CPU's form of the
 * kernel's shared-memory tree). */
EM_HD float em_lrn_fold_lanes(double *lanes) {
  for (int s = EM_LRN_LANES / 2; s > 0; s /= 2)
    for (int l = 0; l < s; l++) lanes[l] = lanes[l] + lanes[l + s];
  return (float)lanes[0];
}

/* 1 when x is neither inf nor NaN (by its bits: the same test on every
 * device and under any compiler flag). */
EM_HD int em_lrn_finite(float x) { return (em_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

/* _learner_scales: per tensor i the gradient multiplier (loss scaling's
 * 1 / S, clipping by global norm) and the learning-rate factor (LARC) from
 * the sums of squares of the parameters (sp, only with LARC) and of the
 * gradients (sg), in binary64 in index order, rounded to f32 once. larc:
 * 0 none, 1 clip, 2 scale. Out, cols = 2 + skip values per tensor:
 * out[cols i] = gmul, out[cols i + 1] = lrmul, and with skip
 * out[cols i + 2] = 1 when any sg[j] (j < k) is inf or NaN, else 0: the
 * learner's update leaves every tensor and slot as it was (dynamic loss
 * scaling skips the step, trainer.h; the trainer reads the same sums and
 * so makes the same decision). One thread does it all: k is the number of
 * tensors of one learner, and the sums came from _learner_sumsq.
 *
 * The sums are those of the scaled gradients S g: the gradients' global
 * norm is sqrt(total) / S, and the multiplier min(clip / norm, 1) / S. With
 * S a power of two every one of these products is exact (absent overflow
 * and subnormals), so a scaled step gives the bits of an unscaled one; with
 * h[UNSCALE] = 1 (no scaling) the arithmetic is the one before it existed. */
EM_HD void em_lrn_scales(const float *h, int larc, int skip, int k, const float *sp, const float *sg, float *out) {
  const int cols = skip ? 3 : 2;
  const double u = h[EM_LRN_H_UNSCALE] > 0.0f ? (double)h[EM_LRN_H_UNSCALE] : 1.0;
  double gmul = u;
  const double clipn = (double)h[EM_LRN_H_CLIPN];
  if (clipn > 0.0) {
    double total = 0.0;
    for (int i = 0; i < k; i++) total = total + (double)sg[i];
    const double c = clipn / (em__sqrt_hw_d(total) * u + 1e-6);
    /* A NaN norm (a NaN gradient) makes every gradient NaN, as PyTorch's clip_grad_norm_ does: taking
     * the else branch would let the finite entries through unclipped. An infinite norm gives 0. */
    gmul = total != total ? total : (c < 1.0 ? c : 1.0) * u;
  }
  float skipped = 0.0f;
  for (int i = 0; skip && i < k; i++)
    if (!em_lrn_finite(sg[i])) skipped = 1.0f;
  const double lr = (double)h[EM_LRN_H_LR], eta = (double)h[EM_LRN_H_ETA], wd = (double)h[EM_LRN_H_LARC_WD];
  for (int i = 0; i < k; i++) {
    double r = 1.0;
    if (larc) {
      /* gmul includes 1 / S: gn is the norm of the gradient the rule applies. */
      const double wn = em__sqrt_hw_d((double)sp[i]), gn = em__sqrt_hw_d((double)sg[i]) * gmul;
      if (wn > 0.0 && gn > 0.0) {
        const double local = eta * wn / (gn + wd * wn);
        if (larc == 1) r = lr > 0.0 ? (local < lr ? local : lr) / lr : 1.0;
        else r = local;
      }
    }
    out[cols * i] = (float)gmul;
    out[cols * i + 1] = (float)r;
    if (skip) out[cols * i + 2] = skipped;
  }
}

/* The update's reading of tensor i's row of a scales input of cols
 * columns (2: no skip column, a constant of ones or _learner_scales without
 * skip; 3: with it): 1 when the learner skips this step. */
EM_HD int em_lrn_skips(const float *scales, int cols, int i) { return cols > 2 && scales[cols * i + 2] != 0.0f; }

#endif
