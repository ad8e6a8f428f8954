/* Learners (include/ember/learner.h): the host side of the update rules.
 * A learner keeps its settings and schedules, adds its update to a graph
 * (em_learner_attach: state values, the hyperparameter input, the sums of
 * squares that clipping by global norm and LARC need (_learner_sumsq,
 * _learner_scales), and one update node of the learner op family,
 * ops/learner.c), and per step computes the
 * hyperparameters in double and rounds them once into the f32 vector the
 * node reads (em_learner_feed; layout: kernels/learner_math.h EM_LRN_H_*).
 * Its host state (steps, samples, fsadagrad's smoothed count) is a small
 * versioned record for checkpoints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "error.h"
#include "learner_internal.h"
#include "schedule_internal.h"
#include "../kernels/learner_math.h"

#define API __attribute__((visibility("default")))

/* An update node takes 2 + 4 inputs per parameter at most (adam's slots),
 * and a node at most 4096 inputs (engine/op.h EM_MAX_INPUTS). */
#define MAX_PARAMS 1023

struct em_learner {
  em_learner_config cfg;      /* schedules point into the copies below */
  double *lr_values, *mom_values;
  uint64_t *lr_counts, *mom_counts;
  char *name;
  em_var *params;
  int n;
  em_graph *g;                /* set by attach */
  em_var h_input, update;
  em_tensor *h;               /* the feed's tensor (host, f32[EM_LRN_H_COUNT]) */
  uint64_t steps, samples;
  double smoothed;            /* fsadagrad: CNTK's smoothedCount */
  /* Dynamic loss scaling (em_learner_attach_scaled): the gradients are
   * those of the loss times S; unscale = 1 / S goes to h[EM_LRN_H_UNSCALE]. */
  int loss_scaled;
  double unscale;
};

static const char *const kind_names[] = {"sgd",      "momentum", "nesterov", "adagrad",  "rmsprop",
                                         "adadelta", "adam",     "adamw",    "fsadagrad"};
#define N_KINDS (int)(sizeof kind_names / sizeof kind_names[0])
_Static_assert(sizeof kind_names / sizeof kind_names[0] == EM_LRN_RULES, "a name per rule of learner_math.h");

API const char *em_learner_kind_name(em_learner_kind kind) {
  return (unsigned)kind < (unsigned)N_KINDS ? kind_names[kind] : NULL;
}

API em_status em_learner_kind_parse(const char *name, em_learner_kind *out) {
  if (!name || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_kind_parse: NULL argument");
  for (int i = 0; i < N_KINDS; i++)
    if (!strcmp(name, kind_names[i])) {
      *out = (em_learner_kind)i;
      return EM_OK;
    }
  return em_fail(EM_ERR_INVALID_ARGUMENT,
                 "no learner named '%.40s' (sgd, momentum, nesterov, adagrad, rmsprop, adadelta, adam, adamw, "
                 "fsadagrad)", name);
}

static int uses_momentum(em_learner_kind k) {
  return k == EM_LEARNER_MOMENTUM || k == EM_LEARNER_NESTEROV || k == EM_LEARNER_ADAM || k == EM_LEARNER_ADAMW ||
         k == EM_LEARNER_FSADAGRAD;
}

API em_status em_learner_defaults(em_learner_kind kind, double lr, em_learner_config *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_defaults: NULL out");
  if ((unsigned)kind >= (unsigned)N_KINDS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_defaults: unknown learner kind %d", (int)kind);
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->lr.value = lr;
  if (uses_momentum(kind)) out->momentum.value = 0.9;
  switch (kind) {
  case EM_LEARNER_ADAGRAD: out->epsilon = 1e-10; break;
  case EM_LEARNER_RMSPROP: out->beta2 = 0.99, out->epsilon = 1e-8; break;
  case EM_LEARNER_ADADELTA: out->beta2 = 0.9, out->epsilon = 1e-6; break;
  case EM_LEARNER_ADAMW: out->weight_decay = 0.01; /* fall through */
  case EM_LEARNER_ADAM: out->beta2 = 0.999, out->epsilon = 1e-8; break;
  case EM_LEARNER_FSADAGRAD: out->beta2 = 720000; break;
  default: break;
  }
  out->larc_eta = 0.002;
  return EM_OK;
}

static em_status check_number(const char *field, double v, double lo, int lo_open, double hi, int hi_open) {
  int ok = isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: %s = %g is out of range (%s%g, %g%s)", field, v,
                   lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  return EM_OK;
}

static em_status check_config(const em_learner_config *c) {
  if ((unsigned)c->kind >= (unsigned)N_KINDS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: unknown learner kind %d", (int)c->kind);
  em_status s = em_schedule_check(&c->lr, "em_learner_create: lr");
  if (!s && c->lr.unit == EM_UNIT_TIME_CONSTANT)
    s = em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: lr: a time constant schedules a momentum, not a rate");
  if (!s && uses_momentum(c->kind)) {
    s = em_schedule_check(&c->momentum, "em_learner_create: momentum");
    if (!s && c->momentum.unit != EM_UNIT_TIME_CONSTANT) {
      for (int i = 0; i < (c->momentum.n ? c->momentum.n : 1) && !s; i++)
        s = check_number("momentum", c->momentum.n ? c->momentum.values[i] : c->momentum.value, 0, 0, 1, 1);
    }
  }
  const double inf = INFINITY;
  switch (c->kind) {
  case EM_LEARNER_RMSPROP:
  case EM_LEARNER_ADADELTA:
  case EM_LEARNER_ADAM:
  case EM_LEARNER_ADAMW:
    if (!s) s = check_number("beta2", c->beta2, 0, 0, 1, 1);
    break;
  case EM_LEARNER_FSADAGRAD:
    if (!s) s = check_number("beta2 (the variance time constant in samples)", c->beta2, 0, 1, inf, 1);
    break;
  default: break;
  }
  if (!s) s = check_number("epsilon", c->epsilon, 0, 0, inf, 1);
  if (!s) s = check_number("l1", c->l1, 0, 0, inf, 1);
  if (!s) s = check_number("l2", c->l2, 0, 0, inf, 1);
  if (!s) s = check_number("weight_decay", c->weight_decay, 0, 0, inf, 1);
  if (!s) s = check_number("clip_value", c->clip_value, 0, 0, inf, 1);
  if (!s) s = check_number("clip_norm", c->clip_norm, 0, 0, inf, 1);
  if (!s && (unsigned)c->larc > EM_LARC_SCALE)
    s = em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: unknown LARC policy %d", (int)c->larc);
  if (!s && c->larc) s = check_number("larc_eta", c->larc_eta, 0, 1, inf, 1);
  return s;
}

/* Copies a schedule's arrays into the learner. */
static em_status own_schedule(em_schedule *s, double **values, uint64_t **counts) {
  *values = NULL;
  *counts = NULL;
  if (s->n == 0) {
    s->values = NULL;
    s->counts = NULL;
    return EM_OK;
  }
  *values = malloc(sizeof(double) * (size_t)s->n);
  if (s->counts) *counts = malloc(sizeof(uint64_t) * (size_t)s->n);
  if (!*values || (s->counts && !*counts)) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a schedule");
  memcpy(*values, s->values, sizeof(double) * (size_t)s->n);
  if (s->counts) memcpy(*counts, s->counts, sizeof(uint64_t) * (size_t)s->n);
  s->values = *values;
  s->counts = *counts;
  return EM_OK;
}

API void em_learner_free(em_learner *l) {
  if (!l) return;
  free(l->lr_values);
  free(l->lr_counts);
  free(l->mom_values);
  free(l->mom_counts);
  free(l->name);
  free(l->params);
  em_tensor_release(l->h);
  free(l);
}

API em_status em_learner_create(const em_learner_config *cfg, const char *name, const em_var *params, int n,
                                em_learner **out) {
  if (!cfg || !out || (n > 0 && !params)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: NULL argument");
  *out = NULL;
  if (n < 1 || n > MAX_PARAMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: %d parameters (1 .. %d)", n, MAX_PARAMS);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (params[i] == params[j])
        return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: parameter %d is given twice (as %d and %d)",
                       (int)params[i], j, i);
  em_status s = check_config(cfg);
  if (s) return s;
  if (name && (!*name || strchr(name, '.')))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_create: the name '%.40s' must be non-empty, without '.'", name);
  em_learner *l = calloc(1, sizeof *l);
  if (!l) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a learner");
  l->cfg = *cfg;
  l->n = n;
  l->h_input = l->update = -1;
  l->name = strdup(name ? name : kind_names[cfg->kind]);
  l->params = malloc(sizeof(em_var) * (size_t)n);
  if (!l->name || !l->params) s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a learner");
  if (!s) s = own_schedule(&l->cfg.lr, &l->lr_values, &l->lr_counts);
  if (!s) s = own_schedule(&l->cfg.momentum, &l->mom_values, &l->mom_counts);
  if (!s) s = em_tensor_zeros(em_cpu(), EM_F32, 1, (int64_t[]){EM_LRN_H_COUNT}, &l->h);
  if (s) {
    em_learner_free(l);
    return s;
  }
  memcpy(l->params, params, sizeof(em_var) * (size_t)n);
  *out = l;
  return EM_OK;
}

API em_status em_learner_larc(em_learner *l, em_larc_policy policy, double eta) {
  if (!l) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_larc: NULL learner");
  if (l->g) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_larc: the learner is attached already");
  if (policy != EM_LARC_CLIP && policy != EM_LARC_SCALE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_larc: policy %d (EM_LARC_CLIP or EM_LARC_SCALE)", (int)policy);
  if (!(eta > 0 && isfinite(eta))) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_larc: eta = %g must be > 0", eta);
  l->cfg.larc = policy;
  l->cfg.larc_eta = eta;
  return EM_OK;
}

API const em_var *em_learner_params(const em_learner *l, int *n) {
  if (n) *n = l ? l->n : 0;
  return l ? l->params : NULL;
}

API const em_learner_config *em_learner_get_config(const em_learner *l) { return l ? &l->cfg : NULL; }
API uint64_t em_learner_steps(const em_learner *l) { return l ? l->steps : 0; }
API uint64_t em_learner_samples(const em_learner *l) { return l ? l->samples : 0; }

/* ---------------------------------------------------------------- attach --- */

static const char *slot_name(em_learner_kind k, int slot) {
  switch (k) {
  case EM_LEARNER_MOMENTUM:
  case EM_LEARNER_NESTEROV: return "b";
  case EM_LEARNER_ADAGRAD: return "s";
  case EM_LEARNER_RMSPROP: return "v";
  case EM_LEARNER_ADADELTA: return slot ? "u" : "v";
  case EM_LEARNER_ADAM:
  case EM_LEARNER_ADAMW: return slot ? "v" : "m";
  case EM_LEARNER_FSADAGRAD: return slot ? "b" : "s";
  default: return "?";
  }
}

/* The state value "<param>.<learner>.<slot>": the graph's own when it has
 * one of that name (a loaded checkpoint), else a new zero-filled state. */
static em_status slot_value(em_learner *l, em_graph *g, int i, int slot, em_var *out) {
  const char *pname = NULL;
  char fallback[32], name[512];
  if (em_var_name(g, l->params[i], &pname) || !pname) {
    snprintf(fallback, sizeof fallback, "param%d", (int)l->params[i]);
    pname = fallback;
  }
  snprintf(name, sizeof name, "%s.%s.%s", pname, l->name, slot_name(l->cfg.kind, slot));
  em_dtype dt;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  em_status s = em_var_info(g, l->params[i], &dt, &nd, shape);
  if (s) return s;
  if (!em_graph_lookup(g, name, out)) {
    em_dtype dt2;
    int nd2;
    int64_t shape2[EM_MAX_DIMS];
    if ((s = em_var_info(g, *out, &dt2, &nd2, shape2))) return s;
    if (dt2 != dt || nd2 != nd || memcmp(shape, shape2, sizeof(int64_t) * (size_t)nd))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_attach: the graph's value '%s' does not match its parameter",
                     name);
    return EM_OK;
  }
  em_clear_error();
  em_init zero = {.kind = EM_INIT_CONSTANT, .value = 0};
  return em_state(g, name, dt, nd, shape, &zero, out);
}

/* The scales input: _learner_scales over the sums when clipping by global
 * norm or LARC is on, or with loss scaling (grad_sumsq >= 0: the trainer's
 * sums of these gradients, and the skip flags: every step needs the 1 / S
 * multiplier and the finiteness test), else a constant of ones (f32[n, 2],
 * as graphs saved before loss scaling hold it). */
static em_status scales_value(em_learner *l, em_graph *g, const em_var *grads, em_var grad_sumsq, em_var *out) {
  int n = l->n;
  if (l->cfg.clip_norm > 0 || l->cfg.larc || grad_sumsq >= 0) {
    int larc = (int)l->cfg.larc;
    em_var in[3] = {l->h_input};
    em_status s = larc ? em_apply(g, "_learner_sumsq", l->params, n, NULL, 0, &in[1], 1) : EM_OK;
    if (grad_sumsq >= 0) in[larc ? 2 : 1] = grad_sumsq;
    else if (!s) s = em_apply(g, "_learner_sumsq", grads, n, NULL, 0, &in[larc ? 2 : 1], 1);
    em_attr at[3] = {{.name = "n", .type = EM_ATTR_INT, .i = n},
                     {.name = "larc", .type = EM_ATTR_INT, .i = larc},
                     {.name = "skip", .type = EM_ATTR_INT, .i = 1}};
    /* Without loss scaling the node is the one of before (no skip attribute). */
    if (!s) s = em_apply(g, "_learner_scales", in, larc ? 3 : 2, at, grad_sumsq >= 0 ? 3 : 2, out, 1);
    return s;
  }
  float *ones = malloc(sizeof(float) * 2 * (size_t)n);
  if (!ones) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a learner's scales");
  for (int i = 0; i < 2 * n; i++) ones[i] = 1.0f;
  em_tensor *t;
  em_status s = em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, 2}, ones, sizeof(float) * 2 * (size_t)n, &t);
  free(ones);
  if (!s) s = em_constant(g, t, out);
  em_tensor_release(t);
  return s;
}

/* A learner updates parameters: a constant, an input, a state or an
 * intermediate value given in their place would be written in place where
 * it lives (a constant's storage, an intermediate's buffer) and the update
 * silently lost or applied to something else, so those are refused. */
static em_status check_are_parameters(const em_learner *l, const em_graph *g) {
  size_t np = 0;
  em_status s = em_graph_parameters(g, NULL, 0, &np);
  em_var *all = s ? NULL : malloc(sizeof *all * (np ? np : 1));
  if (!s && !all) s = em_fail(EM_ERR_OUT_OF_MEMORY, "em_learner_attach: out of memory");
  if (!s) s = em_graph_parameters(g, all, np, &np);
  for (int i = 0; i < l->n && !s; i++) {
    size_t k = 0;
    while (k < np && all[k] != l->params[i]) k++;
    if (k < np) continue;
    const char *name = NULL;
    if (em_var_name(g, l->params[i], &name) || !name) name = "";
    em_clear_error();
    s = em_fail(EM_ERR_INVALID_ARGUMENT,
                "em_learner_attach: learner '%s': its value %d%s%s%s (entry %d) is not a parameter of the graph (a "
                "constant, input, state or computed value); learners update parameters (em_parameter)",
                l->name, (int)l->params[i], *name ? " '" : "", name, *name ? "'" : "", i);
  }
  free(all);
  return s;
}

static em_status check_params(const em_learner *l, em_graph *g, const em_var *grads) {
  em_status s0 = check_are_parameters(l, g);
  if (s0) return s0;
  for (int i = 0; i < l->n; i++) {
    em_dtype dt, dg;
    int nd, ng;
    int64_t sp[EM_MAX_DIMS], sg[EM_MAX_DIMS];
    em_status s = em_var_info(g, l->params[i], &dt, &nd, sp);
    if (!s) s = em_var_info(g, grads[i], &dg, &ng, sg);
    if (s) return em_fail_context(s, "em_learner_attach: parameter %d", i);
    if (dt != EM_F32)
      return em_fail(EM_ERR_UNSUPPORTED, "em_learner_attach: parameter %d is %s; learners update f32 parameters", i,
                     em_dtype_name(dt));
    if (dg != dt || ng != nd || memcmp(sp, sg, sizeof(int64_t) * (size_t)nd))
      return em_fail(EM_ERR_INVALID_ARGUMENT,
                     "em_learner_attach: gradient %d (value %d) does not have its parameter's dtype and shape", i,
                     (int)grads[i]);
  }
  return EM_OK;
}

static em_status attach(em_learner *l, em_graph *g, const em_var *grads, em_var grad_sumsq, em_var *update) {
  if (!l || !g || !grads || !update) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_attach: NULL argument");
  if (l->g) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_attach: learner '%s' is attached already", l->name);
  em_status s = check_params(l, g, grads);
  if (s) return s;
  int n = l->n, slots = em_lrn_slots((int)l->cfg.kind), n_in = 2 + (2 + slots) * n;
  char hname[256];
  snprintf(hname, sizeof hname, "%s.hyperparameters", l->name);
  if (em_graph_lookup(g, hname, &l->h_input)) {
    em_clear_error();
    s = em_input(g, hname, EM_F32, 1, (int64_t[]){EM_LRN_H_COUNT}, &l->h_input);
  }
  em_var *in = malloc(sizeof(em_var) * (size_t)n_in);
  if (!s && !in) s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a learner's inputs");
  if (!s) {
    in[0] = l->h_input;
    s = scales_value(l, g, grads, grad_sumsq, &in[1]);
  }
  for (int i = 0; i < n && !s; i++) {
    in[2 + i] = l->params[i];
    in[2 + n + i] = grads[i];
    for (int k = 0; k < slots && !s; k++) s = slot_value(l, g, i, k, &in[2 + (2 + k) * n + i]);
  }
  char op[64];
  snprintf(op, sizeof op, "_update_%s", kind_names[l->cfg.kind]);
  em_attr at = {.name = "n", .type = EM_ATTR_INT, .i = n};
  if (!s) s = em_apply(g, op, in, n_in, &at, 1, &l->update, 1);
  free(in);
  if (s) return em_fail_context(s, "em_learner_attach: learner '%s'", l->name);
  l->g = g;
  l->loss_scaled = grad_sumsq >= 0;
  l->unscale = 1.0;
  *update = l->update;
  return EM_OK;
}

API em_status em_learner_attach(em_learner *l, em_graph *g, const em_var *grads, em_var *update) {
  return attach(l, g, grads, -1, update);
}

em_status em_learner_attach_scaled(em_learner *l, em_graph *g, const em_var *grads, em_var grad_sumsq,
                                   em_var *update) {
  if (grad_sumsq < 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_attach: loss scaling needs the gradients' sums of squares");
  return attach(l, g, grads, grad_sumsq, update);
}

void em_learner_set_grad_unscale(em_learner *l, double unscale) {
  if (l) l->unscale = unscale;
}

/* ------------------------------------------------------------------ steps --- */

static double momentum_of(const em_learner *l, uint64_t mb) {
  return uses_momentum(l->cfg.kind) ? em_schedule_momentum(&l->cfg.momentum, l->samples, mb) : 0.0;
}

/* fsadagrad: the variance momentum of a step of mb samples. */
static double variance_momentum(const em_learner *l, uint64_t mb) { return exp(-(double)mb / l->cfg.beta2); }

API em_status em_learner_rates(const em_learner *l, uint64_t minibatch_samples, double *lr, double *momentum) {
  if (!l) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_rates: NULL learner");
  if (!minibatch_samples) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_rates: a minibatch of 0 samples");
  if (lr) *lr = em_schedule_rate(&l->cfg.lr, l->samples, minibatch_samples);
  if (momentum) *momentum = momentum_of(l, minibatch_samples);
  return EM_OK;
}

/* This step's hyperparameters in double (layout EM_LRN_H_*). */
static void hyper(const em_learner *l, uint64_t mb, double *h) {
  const em_learner_config *c = &l->cfg;
  memset(h, 0, sizeof(double) * EM_LRN_H_COUNT);
  const double mu = momentum_of(l, mb), t = (double)(l->steps + 1);
  h[EM_LRN_H_LR] = em_schedule_rate(&c->lr, l->samples, mb);
  h[EM_LRN_H_EPS] = c->epsilon;
  switch (c->kind) {
  case EM_LEARNER_MOMENTUM:
  case EM_LEARNER_NESTEROV:
    h[EM_LRN_H_MU] = mu;
    h[EM_LRN_H_K] = c->unit_gain ? 1 - mu : 1;
    break;
  case EM_LEARNER_RMSPROP:
  case EM_LEARNER_ADADELTA:
    h[EM_LRN_H_RHO] = c->beta2;
    h[EM_LRN_H_RHO1] = 1 - c->beta2;
    break;
  case EM_LEARNER_ADAM:
  case EM_LEARNER_ADAMW:
    h[EM_LRN_H_MU] = mu;
    h[EM_LRN_H_K] = 1 - mu;
    h[EM_LRN_H_RHO] = c->beta2;
    h[EM_LRN_H_RHO1] = 1 - c->beta2;
    h[EM_LRN_H_C1] = 1 / (1 - pow(mu, t));
    h[EM_LRN_H_C2] = 1 / sqrt(1 - pow(c->beta2, t));
    break;
  case EM_LEARNER_FSADAGRAD: {
    const double vm = variance_momentum(l, mb);
    const double smoothed = vm * l->smoothed + (1 - vm) * (double)mb;
    h[EM_LRN_H_MU] = mu;
    h[EM_LRN_H_K] = 1 - mu;
    h[EM_LRN_H_RHO] = vm;
    h[EM_LRN_H_RHO1] = 1 - vm;
    h[EM_LRN_H_C1] = 1.0 * sqrt(smoothed); /* CNTK's targetAdagradAvDenom = 1 */
    break;
  }
  default: break;
  }
  h[EM_LRN_H_L1] = c->l1;
  h[EM_LRN_H_L2] = c->l2;
  h[EM_LRN_H_WD] = c->weight_decay;
  h[EM_LRN_H_CLIPV] = c->clip_value;
  h[EM_LRN_H_CLIPN] = c->clip_norm;
  h[EM_LRN_H_ETA] = c->larc ? c->larc_eta : 0;
  h[EM_LRN_H_LARC_WD] = c->weight_decay + c->l2;
  h[EM_LRN_H_UNSCALE] = l->loss_scaled ? l->unscale : 1;
}

API em_status em_learner_feed(em_learner *l, uint64_t minibatch_samples, em_feed *out) {
  if (!l || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_feed: NULL argument");
  if (!l->g) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_feed: learner '%s' is not attached", l->name);
  if (!minibatch_samples) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_feed: a minibatch of 0 samples");
  double h[EM_LRN_H_COUNT];
  hyper(l, minibatch_samples, h);
  float *f = em_tensor_data(l->h);
  for (int i = 0; i < EM_LRN_H_COUNT; i++) f[i] = (float)h[i];
  out->var = l->h_input;
  out->value = l->h;
  return EM_OK;
}

API em_status em_learner_step_done(em_learner *l, uint64_t minibatch_samples) {
  if (!l) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_step_done: NULL learner");
  if (!minibatch_samples) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_step_done: a minibatch of 0 samples");
  if (l->cfg.kind == EM_LEARNER_FSADAGRAD) {
    const double vm = variance_momentum(l, minibatch_samples);
    l->smoothed = vm * l->smoothed + (1 - vm) * (double)minibatch_samples;
  }
  l->steps++;
  l->samples += minibatch_samples;
  return EM_OK;
}

/* ------------------------------------------------------------ host state --- */

/* "EMLRNST1", then little-endian u32 version, kind, parameter count, u64
 * steps, samples, and the smoothed count's binary64 bits: 44 bytes. */
#define STATE_MAGIC "EMLRNST1"
#define STATE_VERSION 1u
#define STATE_BYTES 44

static void put_u(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

API em_status em_learner_state_save(const em_learner *l, void **bytes, size_t *size) {
  if (!l || !bytes || !size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_state_save: NULL argument");
  unsigned char *b = malloc(STATE_BYTES);
  if (!b) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a learner's state");
  uint64_t sm;
  memcpy(&sm, &l->smoothed, sizeof sm);
  memcpy(b, STATE_MAGIC, 8);
  put_u(b + 8, STATE_VERSION, 4);
  put_u(b + 12, (uint64_t)l->cfg.kind, 4);
  put_u(b + 16, (uint64_t)l->n, 4);
  put_u(b + 20, l->steps, 8);
  put_u(b + 28, l->samples, 8);
  put_u(b + 36, sm, 8);
  *bytes = b;
  *size = STATE_BYTES;
  return EM_OK;
}

API em_status em_learner_state_load(em_learner *l, const void *bytes, size_t size) {
  if (!l || (!bytes && size)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_learner_state_load: NULL argument");
  const unsigned char *b = bytes;
  if (size < 8 || memcmp(b, STATE_MAGIC, 8))
    return em_fail(EM_ERR_CORRUPT, "learner state: no '" STATE_MAGIC "' at offset 0 (%zu bytes)", size);
  if (size < 12 || get_u(b + 8, 4) != STATE_VERSION)
    return em_fail(EM_ERR_CORRUPT, "learner state: unknown version at offset 8");
  if (size != STATE_BYTES)
    return em_fail(EM_ERR_CORRUPT, "learner state: %zu bytes, a version %u record has %d", size, STATE_VERSION,
                   STATE_BYTES);
  if (get_u(b + 12, 4) != (uint64_t)l->cfg.kind)
    return em_fail(EM_ERR_CORRUPT, "learner state: offset 12: a %s learner's state, not %s's",
                   em_learner_kind_name((em_learner_kind)get_u(b + 12, 4)) ? em_learner_kind_name((em_learner_kind)get_u(b + 12, 4)) : "unknown",
                   kind_names[l->cfg.kind]);
  if (get_u(b + 16, 4) != (uint64_t)l->n)
    return em_fail(EM_ERR_CORRUPT, "learner state: offset 16: %llu parameters, this learner has %d",
                   (unsigned long long)get_u(b + 16, 4), l->n);
  uint64_t sm = get_u(b + 36, 8);
  double smoothed;
  memcpy(&smoothed, &sm, sizeof smoothed);
  if (!(smoothed >= 0 && isfinite(smoothed)))
    return em_fail(EM_ERR_CORRUPT, "learner state: offset 36: smoothed count %g", smoothed);
  l->steps = get_u(b + 20, 8);
  l->samples = get_u(b + 28, 8);
  l->smoothed = smoothed;
  return EM_OK;
}
