/* Dynamic loss scaling in the trainer (trainer.h em_loss_scaling), as
 * PyTorch's GradScaler does it, inside Ember's one-run step:
 *
 *  - the graph: the learners take the gradients of loss_mean * S, S an f32
 *    (the loss's dtype) graph input "trainer.loss_scale" of shape [] fed
 *    every step; the reported loss stays loss_mean, unscaled;
 *  - the device: each learner's _learner_scales (ops/learner.c) multiplies
 *    its gradients by 1 / S (h[EM_LRN_H_UNSCALE]) before clipping, LARC and
 *    the rule see them, and flags the step skipped when a sum of squares of
 *    its (scaled) gradients is inf or NaN: the update node then writes
 *    nothing, in the same executor run;
 *  - the host (here): the trainer fetches the same sums (the learner reads
 *    the trainer's own _learner_sumsq node, learner_internal.h), so it
 *    knows which learners skipped without asking the device again: their
 *    step counters and schedules do not move (PyTorch skips
 *    optimizer.step), S is multiplied by backoff_factor, and after
 *    growth_interval clean steps by growth_factor.
 *
 * With S a power of two (the defaults keep it one) scaling and unscaling
 * are exact in binary floating point absent overflow and subnormals, so a
 * scaled f32 run gives the bits of an unscaled one (tests/unit/
 * test_loss_scaling.c checks it for sgd, momentum, adam and clipping).
 * S stays at most FLT_MAX: it is fed as f32, and 1 / S must stay non-zero
 * in h's f32. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/learner.h"
#include "error.h"
#include "graph_internal.h"
#include "learner_internal.h"
#include "trainer_internal.h"

#define SCALE_INPUT "trainer.loss_scale"

/* A double option: 0 takes the default; anything else must be finite. */
static em_status option(const char *field, double v, double def, double *out) {
  if (!isfinite(v))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: loss_scaling.%s = %g must be finite (0: %g)", field,
                   v, def);
  *out = v == 0 ? def : v;
  return EM_OK;
}

em_status em_trainer_scaling_options(em_trainer *t, const em_trainer_options *o) {
  const em_loss_scaling *in = &o->loss_scaling;
  em_loss_scaling *ls = &t->ls;
  if (in->mode != EM_LOSS_SCALE_AUTO && in->mode != EM_LOSS_SCALE_DYNAMIC && in->mode != EM_LOSS_SCALE_NONE)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_trainer_create: loss_scaling.mode = %d (EM_LOSS_SCALE_AUTO 0, _DYNAMIC 1 or _NONE 2)",
                   (int)in->mode);
  ls->mode = in->mode;
  /* The fields are checked whatever the mode: a bad value is a mistake even where it is not used yet. */
  em_status s = option("init_scale", in->init_scale, 65536.0, &ls->init_scale);
  if (!s) s = option("growth_factor", in->growth_factor, 2.0, &ls->growth_factor);
  if (!s) s = option("backoff_factor", in->backoff_factor, 0.5, &ls->backoff_factor);
  if (!s) s = option("min_scale", in->min_scale, 1.0, &ls->min_scale);
  if (s) return s;
  ls->growth_interval = in->growth_interval == 0 ? 2000 : in->growth_interval;
  /* S and 1 / S are both fed as f32 (the scale input, h[EM_LRN_H_UNSCALE]): below FLT_MIN S is a
   * subnormal or 0 there and 1 / S inf, which turns the gradients into inf and NaN. */
  if (!(ls->init_scale >= FLT_MIN && ls->init_scale <= FLT_MAX))
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_trainer_create: loss_scaling.init_scale = %g must be in [%g, %g] (S and 1 / S are fed as "
                   "f32)",
                   ls->init_scale, (double)FLT_MIN, (double)FLT_MAX);
  if (!(ls->min_scale >= FLT_MIN))
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_trainer_create: loss_scaling.min_scale = %g must be at least %g (FLT_MIN: S and 1 / S are "
                   "fed as f32)",
                   ls->min_scale, (double)FLT_MIN);
  if (ls->init_scale < ls->min_scale)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_trainer_create: loss_scaling.init_scale = %g is below loss_scaling.min_scale = %g",
                   ls->init_scale, ls->min_scale);
  if (!(ls->growth_factor > 1))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: loss_scaling.growth_factor = %g must be > 1",
                   ls->growth_factor);
  if (!(ls->backoff_factor > 0 && ls->backoff_factor < 1))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: loss_scaling.backoff_factor = %g must be in (0, 1)",
                   ls->backoff_factor);
  if (ls->growth_interval < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_trainer_create: loss_scaling.growth_interval = %lld must be >= 1 (0: 2000)",
                   (long long)ls->growth_interval);
  /* The one rule of precision read here; the precision itself is the autocast's. */
  t->scaling = ls->mode == EM_LOSS_SCALE_DYNAMIC || (ls->mode == EM_LOSS_SCALE_AUTO && o->precision == EM_F16);
  t->scale_input = -1;
  em_trainer_scaling_reset(t);
  return EM_OK;
}

void em_trainer_scaling_reset(em_trainer *t) {
  t->scale = t->ls.init_scale;
  t->scale_clean = 0;
  t->skipped_steps = 0;
}

em_status em_trainer_scaling_loss(em_trainer *t, em_var *loss) {
  *loss = t->loss_mean;
  if (!t->scaling) return EM_OK;
  em_dtype dt, sdt;
  int nd, snd;
  int64_t shape[EM_MAX_DIMS];
  em_status s = em_var_info(t->g, t->loss_mean, &dt, &nd, shape);
  if (s) return em_fail_context(s, "em_trainer_create: loss scaling");
  /* The graph's own input when it has one (another trainer over this graph, or a graph loaded from a
   * checkpoint of one): each trainer feeds its own S. */
  if (!em_graph_lookup(t->g, SCALE_INPUT, &t->scale_input)) {
    if ((s = em_var_info(t->g, t->scale_input, &sdt, &snd, shape))) return s;
    /* Only an input can be fed (a parameter or state of that name would fail every step). */
    const em_node_kind kind = t->g->nodes[t->g->values[t->scale_input].node].kind;
    if (kind != EM_NODE_INPUT)
      return em_fail(EM_ERR_INVALID_ARGUMENT,
                     "em_trainer_create: the graph's value '" SCALE_INPUT "' is not an input (a parameter, state, "
                     "constant or op result): loss scaling feeds a scalar input of that name (rename that value)");
    if (sdt != dt || snd != 0)
      return em_fail(EM_ERR_INVALID_ARGUMENT,
                     "em_trainer_create: the graph's value '" SCALE_INPUT "' is %s with %d dimensions; loss scaling "
                     "needs it a %s scalar input (rename that value)",
                     em_dtype_name(sdt), snd, em_dtype_name(dt));
  } else {
    em_clear_error();
    if ((s = em_input(t->g, SCALE_INPUT, dt, 0, NULL, &t->scale_input)))
      return em_fail_context(s, "em_trainer_create: the loss scale input");
  }
  if ((s = em_tensor_zeros(em_cpu(), dt, 0, NULL, &t->scale_feed)))
    return em_fail_context(s, "em_trainer_create: the loss scale feed");
  t->skipped = calloc((size_t)t->n_learners, 1);
  if (!t->skipped) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
  s = em_apply(t->g, "mul", (em_var[]){t->loss_mean, t->scale_input}, 2, NULL, 0, loss, 1);
  return s ? em_fail_context(s, "em_trainer_create: the scaled loss") : EM_OK;
}

em_status em_trainer_scaling_feed(em_trainer *t, em_feed *feed, int *n) {
  *n = 0;
  if (!t->scaling) return EM_OK;
  /* S as the device sees it (rounded to the feed's dtype once; a power of two is exact) and 1 / S of
   * that value, so the unscale undoes exactly the scale that was applied. */
  const float sf = (float)t->scale;
  if (em_tensor_dtype(t->scale_feed) == EM_F64) *(double *)em_tensor_data(t->scale_feed) = (double)sf;
  else *(float *)em_tensor_data(t->scale_feed) = sf;
  for (int i = 0; i < t->n_learners; i++) em_learner_set_grad_unscale(t->learners[i], 1.0 / (double)sf);
  *feed = (em_feed){t->scale_input, t->scale_feed};
  *n = 1;
  return EM_OK;
}

em_status em_trainer_scaling_step(em_trainer *t, uint64_t samples, uint64_t step) {
  /* The device's decision, from the same f32 sums: a learner skipped when any of its gradients' sums
   * of squares is inf or NaN (kernels/learner_math.h em_lrn_scales). */
  int any = 0, first = -1, k = 0, first_k = 0;
  for (int i = 0; i < t->n_learners; i++) {
    int n = 0;
    em_learner_params(t->learners[i], &n);
    t->skipped[i] = 0;
    for (int j = 0; j < n; j++)
      if (!isfinite(t->gsumsq_host[k + j])) {
        t->skipped[i] = 1;
        if (first < 0) first = i, first_k = k + j;
      }
    any |= t->skipped[i];
    k += n;
  }
  if (any) {
    const double next = t->scale * t->ls.backoff_factor;
    if (next < t->ls.min_scale) {
      const char *name = NULL;
      if (em_var_name(t->g, t->params[first_k], &name) || !name) name = "?";
      em_clear_error();
      return em_fail(EM_ERR_NOT_FINITE,
                     "step %llu: the gradient of parameter '%s' (learner %d) is not finite (its sum of squares is "
                     "%g) with the loss scaled by S = %g, and backing off to %g would take S below "
                     "loss_scaling.min_scale = %g: the gradients overflow even nearly unscaled (training diverged: "
                     "try a smaller learning rate, clipping, or look for NaN or inf in the data). The learners "
                     "whose gradients were not finite left their parameters as they were; any other learner's "
                     "update ran: restore the last checkpoint",
                     (unsigned long long)step, name, first, (double)t->gsumsq_host[first_k], t->scale, next,
                     t->ls.min_scale);
    }
  }
  /* Only the learners that updated count a step (their schedules and bias corrections move on). */
  for (int i = 0; i < t->n_learners; i++) {
    if (t->skipped[i]) continue;
    em_status s = em_learner_step_done(t->learners[i], samples);
    if (s) return em_fail_context(s, "learner %d after a step", i);
  }
  if (any) {
    t->scale *= t->ls.backoff_factor;
    t->scale_clean = 0;
    t->skipped_steps++;
  } else if (++t->scale_clean >= (uint64_t)t->ls.growth_interval) {
    const double next = t->scale * t->ls.growth_factor;
    if (next <= FLT_MAX) t->scale = next; /* S is fed as f32: it stays there */
    t->scale_clean = 0;
  }
  return EM_OK;
}
