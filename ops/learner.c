/* The learner op family: the update rules of include/ember/learner.h as
 * graph ops, added by training/learner.c (em_learner_attach), one node per
 * learner per step over its whole parameter set.
 *
 *   _update_<rule>   inputs (h, scales, p_0..p_{n-1}, g_0..g_{n-1},
 *                    slot 0 of each p, slot 1 of each p), attribute n;
 *                    updates every p and its slots IN PLACE
 *                    (em_op_def.writes_input) and outputs an empty f32[0]
 *                    (the value the trainer fetches to make the executor run
 *                    the node: fetching it copies nothing).
 *   _learner_sumsq   inputs t_0..t_{m-1} (f32, any shapes); outputs
 *                    f32[m], the sum of squares of each in the fixed order
 *                    of learner_math.h (256 lanes in binary64, a tree).
 *   _learner_scales  inputs (h, [sp f32[n],] sg f32[n]) (_learner_sumsq of
 *                    the parameters, with LARC, and of the gradients),
 *                    attributes n, larc (0 none, 1 clip, 2 scale) and skip
 *                    (0 default, 1); outputs f32[n, 2 + skip]: per tensor
 *                    the gradient multiplier (loss scaling's 1 / S,
 *                    h[EM_LRN_H_UNSCALE], times clipping by global norm's),
 *                    LARC's rate factor and, with skip, the skip flag: 1
 *                    on every row when a gradient's sum of squares is inf
 *                    or NaN (dynamic loss scaling: the learner skips the
 *                    step, kernels/learner_math.h em_lrn_scales).
 *
 * An _update_ op's scales are f32[n, 2] or f32[n, 3]: a row whose third
 * column is non-zero leaves its parameter and slots as they were, bitwise
 * (the step is skipped where it runs, inside the executor run that computed
 * the gradients: no round trip to the host).
 *
 * h is the step's f32 hyperparameter vector (kernels/learner_math.h
 * EM_LRN_H_*), fed by the learner; scales is _learner_scales' output or a
 * constant of ones. The arithmetic is kernels/learner_math.h's, shared with
 * the kernels (kernels/learner.cu, launched by ops/learner_gpu.c): every
 * element on its own in f32, in the same order on every device; the sums
 * (_learner_sumsq's, _learner_scales' over n values) in orders fixed by
 * the shapes, in binary64. So
 * the updates are bitwise equal on the CPU and every GPU, in both modes.
 * f32 parameters only. No gradients (the ops are the end of a step). */
#include <string.h>

#include "error.h"
#include "learner_gpu.h"
#include "../kernels/learner_math.h"

/* The rule of an _update_ op: its position in the table below. */
static int rule_of(const em_op_def *d);

static em_status check_h(const em_op_args *a) {
  const em_shape *h = &a->in[0];
  if (h->dtype != EM_F32 || h->ndim != 1 || (h->dims[0] != EM_LRN_H_COUNT && h->dims[0] >= 0))
    return em_op_fail(a, "input 0 (the hyperparameters) must be f32[%d]", EM_LRN_H_COUNT);
  return EM_OK;
}

static em_status read_n(const em_op_args *a, int64_t *n) {
  *n = em_attr_int(a, "n", -1);
  if (*n < 1 || *n > EM_MAX_INPUTS) return em_op_fail(a, "attribute n (tensors) must be 1 .. %d", EM_MAX_INPUTS);
  return EM_OK;
}

/* ---------------------------------------------------------- _update_* --- */

static em_status update_infer(em_op_args *a) {
  int64_t n;
  em_status s = read_n(a, &n);
  if (s) return s;
  int slots = em_lrn_slots(rule_of(a->def));
  if (a->n_in != 2 + (2 + slots) * n)
    return em_op_fail(a, "takes h, scales and %d tensors per parameter (%lld parameters: %lld inputs), %d given",
                      2 + slots, (long long)n, (long long)(2 + (2 + slots) * n), a->n_in);
  if ((s = check_h(a))) return s;
  const em_shape *sc = &a->in[1];
  if (sc->dtype != EM_F32 || sc->ndim != 2 || sc->dims[0] != n || (sc->dims[1] != 2 && sc->dims[1] != 3))
    return em_op_fail(a, "input 1 (scales) must be f32[%lld, 2] or f32[%lld, 3] (with the skip flags)",
                      (long long)n, (long long)n);
  for (int64_t i = 0; i < n; i++) {
    const em_shape *p = &a->in[2 + i];
    if (p->dtype != EM_F32) return em_op_fail(a, "parameter %lld is %s: learners update f32 parameters",
                                              (long long)i, em_dtype_name(p->dtype));
    for (int k = 1; k < 2 + slots; k++) {
      const em_shape *o = &a->in[2 + k * n + i];
      if (!em_shape_equal(o, p)) {
        char x[96], y[96];
        return em_op_fail(a, "%s %lld is %s, its parameter %s", k == 1 ? "gradient" : "slot", (long long)i,
                          em_shape_str(o, x, sizeof x), em_shape_str(p, y, sizeof y));
      }
    }
  }
  a->out[0].dtype = EM_F32;
  a->out[0].ndim = 1;
  a->out[0].dims[0] = 0;
  return EM_OK;
}

/* Parameters (2 .. 2 + n) and slots (from 2 + 2n) are written; h, scales
 * and the gradients are read. */
static int update_writes(const em_op_args *a, int i) {
  int64_t n = em_attr_int(a, "n", -1);
  return n > 0 && i >= 2 && (i < 2 + n || i >= 2 + 2 * n);
}

/* Elements per parallel chunk: every element is independent, so the
 * thread count never changes a bit. */
#define LRN_CHUNK 16384

/* Elements [j0, j1) of one tensor. The rule is a constant in each loop (em_lrn_step's switch
 * folds away) and the hyperparameters are copied to locals that the stores to p and the
 * slots cannot alias. Without clipping, L1 / L2 and weight decay (the plain case) those
 * settings are also literal constants in the loops, so em_lrn_grad's tests fold away too
 * and the loops vectorise (the tests' outcomes are the same: nothing is applied). Each
 * element's arithmetic, and so its bits, are em_lrn_step's. p, g and the slots are distinct
 * tensors (omp simd). */
#define LRN_LOOP(RULE, S0, S1)                                                                               \
  _Pragma("omp simd") for (int64_t j = j0; j < j1; j++) em_lrn_step(RULE, hl, &tl, &p[j], g[j], S0, S1)
#define LRN_RULES                                                                                            \
  switch (rule) {                                                                                            \
  case EM_LRN_SGD: LRN_LOOP(EM_LRN_SGD, &d0, &d1); break;                                                    \
  case EM_LRN_MOMENTUM: LRN_LOOP(EM_LRN_MOMENTUM, &s0[j], &d1); break;                                       \
  case EM_LRN_NESTEROV: LRN_LOOP(EM_LRN_NESTEROV, &s0[j], &d1); break;                                       \
  case EM_LRN_ADAGRAD: LRN_LOOP(EM_LRN_ADAGRAD, &s0[j], &d1); break;                                         \
  case EM_LRN_RMSPROP: LRN_LOOP(EM_LRN_RMSPROP, &s0[j], &d1); break;                                         \
  case EM_LRN_ADADELTA: LRN_LOOP(EM_LRN_ADADELTA, &s0[j], &s1[j]); break;                                    \
  case EM_LRN_ADAM: LRN_LOOP(EM_LRN_ADAM, &s0[j], &s1[j]); break;                                            \
  case EM_LRN_ADAMW: LRN_LOOP(EM_LRN_ADAMW, &s0[j], &s1[j]); break;                                          \
  default: /* fsadagrad, and any rule added later: the generic call */                                       \
    for (int64_t j = j0; j < j1; j++) em_lrn_step(rule, hl, &tl, &p[j], g[j], s0 ? &s0[j] : &d0, s1 ? &s1[j] : &d1); \
  }
static void update_range(int rule, const float *h, const em_lrn_t *t, float *p, const float *g, float *s0,
                         float *s1, int64_t j0, int64_t j1) {
  float hl[EM_LRN_H_COUNT], d0 = 0, d1 = 0;
  memcpy(hl, h, sizeof hl);
  em_lrn_t tl = *t;
  if (t->gmul == 1.0f && !(h[EM_LRN_H_CLIPV] > 0.0f) && h[EM_LRN_H_L2] == 0.0f && h[EM_LRN_H_L1] == 0.0f &&
      t->lrwd == 0.0f) {
    tl.gmul = 1.0f, tl.lrwd = 0.0f, hl[EM_LRN_H_CLIPV] = 0.0f, hl[EM_LRN_H_L2] = 0.0f, hl[EM_LRN_H_L1] = 0.0f;
    LRN_RULES
  } else {
    LRN_RULES
  }
}
#undef LRN_RULES
#undef LRN_LOOP

static em_status update_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)out;
  const int rule = rule_of(a->def), slots = em_lrn_slots(rule);
  const int64_t n = em_attr_int(a, "n", 1);
  const float *h = em_tensor_data(in[0]), *sc = em_tensor_data(in[1]);
  const int cols = (int)em_tensor_shape(in[1])[1];
  for (int64_t i = 0; i < n; i++) {
    if (em_lrn_skips(sc, cols, (int)i)) continue; /* a skipped step: nothing written */
    const em_lrn_t t = em_lrn_tensor(h, sc[cols * i], sc[cols * i + 1]);
    float *p = em_tensor_data(in[2 + i]);
    const float *g = em_tensor_data(in[2 + n + i]);
    float *s0 = slots > 0 ? em_tensor_data(in[2 + 2 * n + i]) : NULL;
    float *s1 = slots > 1 ? em_tensor_data(in[2 + 3 * n + i]) : NULL;
    const int64_t m = em_tensor_numel(in[2 + i]), chunks = (m + LRN_CHUNK - 1) / LRN_CHUNK;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (m > 65536)
    for (int64_t c = 0; c < chunks; c++)
      update_range(rule, h, &t, p, g, s0, s1, c * LRN_CHUNK, m - c * LRN_CHUNK < LRN_CHUNK ? m : (c + 1) * LRN_CHUNK);
  }
  return EM_OK;
}

/* ---------------------------------------------------- _learner_scales --- */

static em_status scales_infer(em_op_args *a) {
  int64_t n;
  em_status s = read_n(a, &n);
  if (s) return s;
  int64_t larc = em_attr_int(a, "larc", 0), skip = em_attr_int(a, "skip", 0);
  if (larc < 0 || larc > 2) return em_op_fail(a, "attribute larc must be 0 (none), 1 (clip) or 2 (scale)");
  if (skip != 0 && skip != 1)
    return em_op_fail(a, "attribute skip is %lld: 0 (no skip flags) or 1 (a third column, 1 where the step skips)",
                      (long long)skip);
  if (a->n_in != (larc ? 3 : 2))
    return em_op_fail(a, "takes h, %sthe gradients' sums of squares: %d inputs, %d given",
                      larc ? "the parameters' and " : "", larc ? 3 : 2, a->n_in);
  if ((s = check_h(a))) return s;
  for (int i = 1; i < a->n_in; i++)
    if (a->in[i].dtype != EM_F32 || a->in[i].ndim != 1 || a->in[i].dims[0] != n)
      return em_op_fail(a, "input %d must be f32[%lld] (sums of squares)", i, (long long)n);
  a->out[0].dtype = EM_F32;
  a->out[0].ndim = 2;
  a->out[0].dims[0] = n;
  a->out[0].dims[1] = 2 + skip;
  return EM_OK;
}

static em_status scales_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const int n = (int)em_attr_int(a, "n", 1), larc = (int)em_attr_int(a, "larc", 0);
  const int skip = (int)em_attr_int(a, "skip", 0);
  const float *sp = larc ? em_tensor_data(in[1]) : NULL, *sg = em_tensor_data(in[larc ? 2 : 1]);
  em_lrn_scales(em_tensor_data(in[0]), larc, skip, n, sp, sg, em_tensor_data(out[0]));
  return EM_OK;
}

/* ----------------------------------------------------- _learner_sumsq --- */

static em_status sumsq_infer(em_op_args *a) {
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i].dtype != EM_F32) return em_op_fail(a, "input %d is %s: f32 only", i, em_dtype_name(a->in[i].dtype));
  a->out[0].dtype = EM_F32;
  a->out[0].ndim = 1;
  a->out[0].dims[0] = a->n_in;
  return EM_OK;
}

static em_status sumsq_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  float *y = em_tensor_data(out[0]);
#pragma omp parallel for schedule(dynamic) num_threads(em_cpu_threads()) if (a->n_in > 1)
  for (int i = 0; i < a->n_in; i++) {
    double lanes[EM_LRN_LANES];
    const float *x = em_tensor_data(in[i]);
    const long long n = (long long)em_tensor_numel(in[i]);
    em_lrn_lanes_sumsq(x, n, lanes);
    y[i] = em_lrn_fold_lanes(lanes);
  }
  return EM_OK;
}

/* --------------------------------------------------------------- table --- */

#define UPDATE(rule_name, slots_doc)                                                                       \
  {.name = "_update_" rule_name,                                                                           \
   .doc = "learner.h's " rule_name " rule over n parameters in place: inputs (h f32[16], scales f32[n,2|3], " \
          "params, grads" slots_doc "); output f32[0]",                                                     \
   .min_inputs = 4, .max_inputs = EM_MAX_INPUTS, .n_outputs = 1, .infer = update_infer, .cpu = update_cpu, \
   .gpu = em_learner_update_gpu, .attrs = EM_ATTRS("n"), .writes_input = update_writes}

const em_op_def em_ops_learner[] = {
    UPDATE("sgd", ""),
    UPDATE("momentum", ", slot b"),
    UPDATE("nesterov", ", slot b"),
    UPDATE("adagrad", ", slot s"),
    UPDATE("rmsprop", ", slot v"),
    UPDATE("adadelta", ", slots v, u"),
    UPDATE("adam", ", slots m, v"),
    UPDATE("adamw", ", slots m, v"),
    UPDATE("fsadagrad", ", slots s, b"),
    {.name = "_learner_scales",
     .doc = "per tensor (the gradient multiplier of loss scaling and clipping, LARC's rate factor[, skip flag]) "
            "from h f32[16] and sums of squares f32[n] ([params' if larc,] grads'): attrs n, larc (0 none, 1 clip, "
            "2 scale), skip (0, 1: a third column, 1 when a gradient is not finite); output f32[n,2+skip]",
     .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .infer = scales_infer, .cpu = scales_cpu,
     .gpu = em_learner_scales_gpu, .attrs = EM_ATTRS("n", "larc", "skip")},
    {.name = "_learner_sumsq",
     .doc = "sums of squares f32[m] of m f32 tensors, each in 256 lanes in double folded as a tree",
     .min_inputs = 1, .max_inputs = EM_MAX_INPUTS, .n_outputs = 1, .infer = sumsq_infer, .cpu = sumsq_cpu,
     .gpu = em_learner_sumsq_gpu, .attrs = EM_NO_ATTRS},
};
const size_t em_ops_learner_count = sizeof em_ops_learner / sizeof em_ops_learner[0];

_Static_assert(EM_LRN_H_COUNT == 16, "the hyperparameter vector keeps 16 entries (saved graphs' input shape)");
_Static_assert(sizeof em_ops_learner / sizeof em_ops_learner[0] == EM_LRN_RULES + 2,
               "one _update_ op per rule of kernels/learner_math.h, in its order, then the two helpers");

static int rule_of(const em_op_def *d) { return (int)(d - em_ops_learner); }

int em_learner_rule_of(const em_op_def *d) { return rule_of(d); }
