/* Learners (include/ember/learner.h) against plain float64 references
 * written here from the formulas of the header (PyTorch's and CNTK's
 * rules), step by step:
 *   - every rule over several steps on two tensors of different shapes;
 *   - schedules: piecewise per sample and per minibatch with epoch sizes,
 *     momentum per sample and as a time constant, warmup, cosine; and a
 *     training run that uses them with changing minibatch sizes;
 *   - LARC's local rate (clip and scale), clipping by value and by global
 *     norm, L1 / L2 and decoupled weight decay;
 *   - two learners over disjoint parameter subsets in one graph;
 *   - host state save / load, and refusal of damaged records;
 *   - the executor runs an update after every reader of its parameters,
 *     whatever the outputs' order, and refuses two updates of one value;
 *   - on a GPU (the test double's pretend H100 in CI, FAKECUDA_LIB): every
 *     rule with every option bitwise equal to the CPU in portable mode, and
 *     a step copying only its feeds and the kernels' tables of tensors;
 *     a learner over 13 tensors in one launch of each learner kernel;
 *     three learners in one step over 300 tiny tensors (empty ones first,
 *     last and between), {empty, 4097, 1, empty} and only empty tensors;
 *   - a real training step (an MLP, em_gradients, two learners in one
 *     executor with the loss): the loss falls, and the GPU's losses and
 *     weights equal the CPU's bit for bit.
 * The gradients are fed as inputs (chosen by a seeded generator), so the
 * references see exactly what the update ops see. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

#define NT 2          /* tensors per test graph */
#define MAXE 35       /* elements per tensor at most */
static const int64_t SHAPE0[2] = {5, 7}, SHAPE1[1] = {9};
static const int NUMEL[NT] = {35, 9};

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}
/* Uniform in [lo, hi), rounded to float (the values the ops see). */
static float uni(uint64_t *s, double lo, double hi) {
  return (float)(lo + (hi - lo) * ((double)lcg(s) / 9007199254740992.0));
}

/* ------------------------------------------------------------ the graph --- */

typedef struct rig {
  em_graph *g;
  em_var p[NT], gin[NT], update[2];
  em_learner *l[2];
  int n_learners;
  em_exec *e;
  float init[NT][MAXE];
} rig;

static void rig_params(rig *r, uint64_t seed) {
  CHECK(em_graph_create(&r->g));
  uint64_t s = seed;
  for (int i = 0; i < NT; i++) {
    for (int j = 0; j < NUMEL[i]; j++) r->init[i][j] = uni(&s, -1, 1);
    em_tensor *t;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, i ? 1 : 2, i ? SHAPE1 : SHAPE0, r->init[i],
                              sizeof(float) * (size_t)NUMEL[i], &t));
    em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
    char name[16];
    snprintf(name, sizeof name, "w%d", i);
    CHECK(em_parameter(r->g, name, EM_F32, i ? 1 : 2, i ? SHAPE1 : SHAPE0, &init, &r->p[i]));
    em_tensor_release(t);
    snprintf(name, sizeof name, "g%d", i);
    CHECK(em_input(r->g, name, EM_F32, i ? 1 : 2, i ? SHAPE1 : SHAPE0, &r->gin[i]));
  }
}

/* Learners over the subsets given (each a list of tensor indices), attached,
 * and an executor on dev. */
static void rig_learners(rig *r, const em_learner_config *const *cfg, const int *const *subsets, const int *counts,
                         int n, em_device dev, int portable) {
  r->n_learners = n;
  for (int k = 0; k < n; k++) {
    em_var ps[NT], gs[NT];
    for (int i = 0; i < counts[k]; i++) ps[i] = r->p[subsets[k][i]], gs[i] = r->gin[subsets[k][i]];
    char name[16];
    snprintf(name, sizeof name, "l%d", k);
    CHECK(em_learner_create(cfg[k], n > 1 ? name : NULL, ps, counts[k], &r->l[k]));
    CHECK(em_learner_attach(r->l[k], r->g, gs, &r->update[k]));
  }
  CHECK(em_exec_create(r->g, r->update, n, dev, &r->e));
  if (portable) CHECK(em_exec_set_mode(r->e, EM_MODE_PORTABLE));
}

static void rig_one(rig *r, const em_learner_config *cfg, em_device dev, int portable) {
  static const int all[NT] = {0, 1};
  const int *sub[1] = {all};
  int cnt[1] = {NT};
  rig_learners(r, &cfg, sub, cnt, 1, dev, portable);
}

/* One step with gradients grads[i] and a minibatch of mb samples. */
static void rig_step(rig *r, float grads[NT][MAXE], uint64_t mb) {
  em_feed f[NT + 2];
  em_tensor *gt[NT];
  for (int i = 0; i < NT; i++) {
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, i ? 1 : 2, i ? SHAPE1 : SHAPE0, grads[i],
                              sizeof(float) * (size_t)NUMEL[i], &gt[i]));
    f[i] = (em_feed){r->gin[i], gt[i]};
  }
  for (int k = 0; k < r->n_learners; k++) CHECK(em_learner_feed(r->l[k], mb, &f[NT + k]));
  em_tensor *out[2] = {0};
  CHECK(em_exec_run(r->e, f, NT + r->n_learners, out));
  for (int k = 0; k < r->n_learners; k++) {
    assert_int_equal(em_tensor_numel(out[k]), 0);
    em_tensor_release(out[k]);
    CHECK(em_learner_step_done(r->l[k], mb));
  }
  for (int i = 0; i < NT; i++) em_tensor_release(gt[i]);
}

/* A value of the graph (parameter or state) into host floats. */
static void rig_read(rig *r, em_var v, float *out, int n) {
  em_tensor *t;
  CHECK(em_parameter_get(r->g, v, em_cpu(), &t));
  CHECK(em_tensor_to_host(t, out, sizeof(float) * (size_t)n));
  em_tensor_release(t);
}

static void rig_read_named(rig *r, const char *name, float *out, int n) {
  em_var v;
  CHECK(em_graph_lookup(r->g, name, &v));
  rig_read(r, v, out, n);
}

static void rig_free(rig *r) {
  em_exec_free(r->e);
  for (int k = 0; k < r->n_learners; k++) em_learner_free(r->l[k]);
  em_graph_free(r->g);
  memset(r, 0, sizeof *r);
}

static void make_grads(uint64_t *s, float grads[NT][MAXE], double scale) {
  for (int i = 0; i < NT; i++)
    for (int j = 0; j < NUMEL[i]; j++) grads[i][j] = uni(s, -scale, scale);
}

/* -------------------------------------------------- float64 references --- */

/* The reference's state: parameters and two slots per element. */
typedef struct ref {
  double p[NT][MAXE], s0[NT][MAXE], s1[NT][MAXE];
  double smoothed;
  uint64_t t;
} ref;

static void ref_init(ref *f, const rig *r) {
  memset(f, 0, sizeof *f);
  for (int i = 0; i < NT; i++)
    for (int j = 0; j < NUMEL[i]; j++) f->p[i][j] = r->init[i][j];
}

static double sgn(double x) { return x > 0 ? 1 : x < 0 ? -1 : 0; }

/* What a step of the rule does, written from learner.h's formulas. lr and
 * mu are this step's (the test computes them itself); the options come
 * from c. Only tensors with use[i] are updated. */
static void ref_step(ref *f, const em_learner_config *c, float grads[NT][MAXE], double lr, double mu, uint64_t mb,
                     const int *use) {
  f->t++;
  const double t = (double)f->t;
  /* clipping by global norm over the learner's gradients */
  double gmul = 1;
  if (c->clip_norm > 0) {
    double total = 0;
    for (int i = 0; i < NT; i++)
      if (use[i])
        for (int j = 0; j < NUMEL[i]; j++) total += (double)grads[i][j] * grads[i][j];
    gmul = fmin(1, c->clip_norm / (sqrt(total) + 1e-6));
  }
  double vm = 0, smoothed = 0;
  if (c->kind == EM_LEARNER_FSADAGRAD) {
    vm = exp(-(double)mb / c->beta2);
    smoothed = f->smoothed = vm * f->smoothed + (1 - vm) * (double)mb;
  }
  for (int i = 0; i < NT; i++) {
    if (!use[i]) continue;
    double lri = lr;
    if (c->larc) {
      double wn = 0, gn = 0;
      for (int j = 0; j < NUMEL[i]; j++) wn += f->p[i][j] * f->p[i][j], gn += (double)grads[i][j] * grads[i][j];
      wn = sqrt(wn), gn = sqrt(gn) * gmul;
      if (wn > 0 && gn > 0) {
        double local = c->larc_eta * wn / (gn + (c->weight_decay + c->l2) * wn);
        lri = c->larc == EM_LARC_CLIP ? fmin(local, lr) : lr * local;
      }
    }
    for (int j = 0; j < NUMEL[i]; j++) {
      double *p = &f->p[i][j], *s0 = &f->s0[i][j], *s1 = &f->s1[i][j];
      double g = grads[i][j] * gmul;
      if (c->clip_value > 0) g = fmax(-c->clip_value, fmin(c->clip_value, g));
      g += c->l2 * *p + c->l1 * sgn(*p);
      *p -= lri * c->weight_decay * *p;
      double k = c->unit_gain ? 1 - mu : 1, rho = c->beta2, eps = c->epsilon;
      switch (c->kind) {
      case EM_LEARNER_SGD: *p -= lri * g; break;
      case EM_LEARNER_MOMENTUM: *s0 = mu * *s0 + k * g; *p -= lri * *s0; break;
      case EM_LEARNER_NESTEROV: *s0 = mu * *s0 + k * g; *p -= lri * (k * g + mu * *s0); break;
      case EM_LEARNER_ADAGRAD: *s0 += g * g; *p -= lri * g / (sqrt(*s0) + eps); break;
      case EM_LEARNER_RMSPROP: *s0 = rho * *s0 + (1 - rho) * g * g; *p -= lri * g / (sqrt(*s0) + eps); break;
      case EM_LEARNER_ADADELTA: {
        *s0 = rho * *s0 + (1 - rho) * g * g;
        double d = sqrt(*s1 + eps) / sqrt(*s0 + eps) * g;
        *s1 = rho * *s1 + (1 - rho) * d * d;
        *p -= lri * d;
        break;
      }
      case EM_LEARNER_ADAM:
      case EM_LEARNER_ADAMW: {
        *s0 = mu * *s0 + (1 - mu) * g;
        *s1 = rho * *s1 + (1 - rho) * g * g;
        double mhat = *s0 / (1 - pow(mu, t)), vhat = *s1 / (1 - pow(rho, t));
        *p -= lri * mhat / (sqrt(vhat) + eps);
        break;
      }
      case EM_LEARNER_FSADAGRAD: {
        *s0 = vm * *s0 + (1 - vm) * g * g;
        if (*s0 != 0) g *= fmin(sqrt(smoothed) / sqrt(*s0), 10);
        if (mu > 0) {
          *s1 = mu * *s1 + (1 - mu) * g;
          g = *s1;
        }
        *p -= lri * g;
        break;
      }
      }
    }
  }
}

static void expect_close(const char *what, int i, int j, double got, double want, double tol) {
  if (!(fabs(got - want) <= tol * fmax(1, fabs(want))))
    fail_msg("%s: tensor %d element %d: %.9g, the float64 reference says %.9g", what, i, j, got, want);
}

/* The rig's parameters (and the slots named <w>.<learner>.<slot>) against f. */
static void compare(rig *r, const ref *f, const char *what, const char *lname, const char *slot0, const char *slot1,
                    const int *use, double tol) {
  for (int i = 0; i < NT; i++) {
    float got[MAXE];
    rig_read(r, r->p[i], got, NUMEL[i]);
    for (int j = 0; j < NUMEL[i]; j++) {
      if (!use[i]) {
        if (got[j] != r->init[i][j]) fail_msg("%s: tensor %d changed, but no learner owns it", what, i);
        continue;
      }
      expect_close(what, i, j, got[j], f->p[i][j], tol);
    }
    if (!use[i]) continue;
    const char *slots[2] = {slot0, slot1};
    for (int k = 0; k < 2; k++) {
      if (!slots[k]) continue;
      char name[64];
      snprintf(name, sizeof name, "w%d.%s.%s", i, lname, slots[k]);
      rig_read_named(r, name, got, NUMEL[i]);
      for (int j = 0; j < NUMEL[i]; j++) expect_close(name, i, j, got[j], k ? f->s1[i][j] : f->s0[i][j], tol);
    }
  }
}

static const char *slot_names[][2] = {
    [EM_LEARNER_SGD] = {NULL, NULL},     [EM_LEARNER_MOMENTUM] = {"b", NULL}, [EM_LEARNER_NESTEROV] = {"b", NULL},
    [EM_LEARNER_ADAGRAD] = {"s", NULL},  [EM_LEARNER_RMSPROP] = {"v", NULL},  [EM_LEARNER_ADADELTA] = {"v", "u"},
    [EM_LEARNER_ADAM] = {"m", "v"},      [EM_LEARNER_ADAMW] = {"m", "v"},     [EM_LEARNER_FSADAGRAD] = {"s", "b"},
};

/* Runs cfg for `steps` steps of mb samples on the CPU against the
 * reference, with constant lr and momentum (cfg's values). */
static void run_rule(const em_learner_config *cfg, const char *what, int steps, uint64_t mb, double gscale) {
  static const int use[NT] = {1, 1};
  rig r = {0};
  rig_params(&r, 11);
  rig_one(&r, cfg, em_cpu(), 0);
  ref f;
  ref_init(&f, &r);
  uint64_t s = 99;
  for (int k = 0; k < steps; k++) {
    float grads[NT][MAXE];
    make_grads(&s, grads, gscale);
    rig_step(&r, grads, mb);
    double lr = cfg->lr.unit == EM_UNIT_PER_SAMPLE ? cfg->lr.value * (double)mb : cfg->lr.value;
    ref_step(&f, cfg, grads, lr, cfg->momentum.value, mb, use);
  }
  compare(&r, &f, what, em_learner_kind_name(cfg->kind), slot_names[cfg->kind][0], slot_names[cfg->kind][1], use,
          2e-5);
  /* and it moved: equal to a reference that moved */
  float got[MAXE];
  rig_read(&r, r.p[1], got, NUMEL[1]);
  int moved = 0;
  for (int j = 0; j < NUMEL[1]; j++) moved |= got[j] != r.init[1][j];
  if (!moved) fail_msg("%s: the parameters did not change", what);
  rig_free(&r);
}

static void test_rules(void **state) {
  (void)state;
  for (int kind = 0; kind <= EM_LEARNER_FSADAGRAD; kind++) {
    em_learner_config c;
    CHECK(em_learner_defaults((em_learner_kind)kind, 0.05, &c));
    if (kind == EM_LEARNER_FSADAGRAD) c.beta2 = 50; /* a short variance time constant: the count moves */
    char what[64];
    snprintf(what, sizeof what, "%s, defaults", em_learner_kind_name((em_learner_kind)kind));
    run_rule(&c, what, 6, 8, 1.0);
  }
  /* unit-gain momentum (CNTK), nesterov too; fsadagrad without momentum */
  em_learner_config c;
  CHECK(em_learner_defaults(EM_LEARNER_MOMENTUM, 0.1, &c));
  c.unit_gain = 1;
  run_rule(&c, "momentum, unit gain", 5, 4, 1.0);
  CHECK(em_learner_defaults(EM_LEARNER_NESTEROV, 0.1, &c));
  c.unit_gain = 1;
  c.momentum.value = 0.5;
  run_rule(&c, "nesterov, unit gain, mu 0.5", 5, 4, 1.0);
  CHECK(em_learner_defaults(EM_LEARNER_FSADAGRAD, 0.01, &c));
  c.momentum.value = 0;
  c.beta2 = 20;
  run_rule(&c, "fsadagrad, no momentum", 5, 16, 1.0);
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.001, &c));
  c.lr.unit = EM_UNIT_PER_SAMPLE;
  run_rule(&c, "sgd, rate per sample", 4, 32, 1.0);
}

/* ------------------------------------------------------------ schedules --- */

static double sched(const em_schedule *s, int momentum, uint64_t seen, uint64_t mb) {
  double v;
  CHECK(em_schedule_value(s, momentum, seen, mb, &v));
  return v;
}

static void near(double got, double want, const char *what) {
  if (!(fabs(got - want) <= 1e-12 * fmax(1, fabs(want)))) fail_msg("%s: %.17g, expected %.17g", what, got, want);
}

static void test_schedule_values(void **state) {
  (void)state;
  /* CNTK: learning_parameter_schedule([0.1]*2 + [0.05]*3 + [0.01], epoch_size=100), per minibatch */
  static const double v[] = {0.1, 0.05, 0.01};
  static const uint64_t n[] = {2, 3, 1};
  em_schedule s = {.n = 3, .values = v, .counts = n, .epoch_size = 100};
  near(sched(&s, 0, 0, 10), 0.1, "piece 0 at 0");
  near(sched(&s, 0, 199, 10), 0.1, "piece 0 at 199");
  near(sched(&s, 0, 200, 10), 0.05, "piece 1 at 200");
  near(sched(&s, 0, 499, 10), 0.05, "piece 1 at 499");
  near(sched(&s, 0, 500, 10), 0.01, "piece 2 at 500");
  near(sched(&s, 0, 100000, 10), 0.01, "the last value holds");
  /* per sample: times the minibatch's samples */
  s.unit = EM_UNIT_PER_SAMPLE;
  near(sched(&s, 0, 250, 32), 0.05 * 32, "per sample");
  /* no counts, no epoch size: one sample each */
  em_schedule s2 = {.n = 3, .values = v};
  near(sched(&s2, 0, 0, 4), 0.1, "sample 0");
  near(sched(&s2, 0, 1, 4), 0.05, "sample 1");
  near(sched(&s2, 0, 7, 4), 0.01, "sample 7");
  /* momentum: per minibatch, per sample (mu^N), time constant exp(-N/T) */
  em_schedule m = {.value = 0.9};
  near(sched(&m, 1, 0, 16), 0.9, "momentum per minibatch");
  m.unit = EM_UNIT_PER_SAMPLE;
  m.value = 0.99;
  near(sched(&m, 1, 0, 16), pow(0.99, 16), "momentum per sample");
  m.unit = EM_UNIT_TIME_CONSTANT;
  m.value = 1100;
  near(sched(&m, 1, 0, 64), exp(-64.0 / 1100), "momentum as time constant");
  m.value = 0;
  near(sched(&m, 1, 0, 64), 0, "time constant 0");
  double out;
  assert_int_equal(em_schedule_value(&m, 0, 0, 64, &out), EM_ERR_INVALID_ARGUMENT);
  /* warmup: linear up to W samples, then the value */
  em_schedule w = {.value = 0.4, .warmup_samples = 1000};
  near(sched(&w, 0, 0, 100), 0.4 * 100 / 1000, "warmup, first step");
  near(sched(&w, 0, 400, 100), 0.4 * 500 / 1000, "warmup, middle");
  near(sched(&w, 0, 900, 100), 0.4, "warmup, last step");
  near(sched(&w, 0, 5000, 100), 0.4, "after warmup");
  /* cosine after warmup, to a floor */
  w.cosine_samples = 4000;
  w.cosine_floor = 0.1;
  near(sched(&w, 0, 1000, 100), 0.4, "cosine start");
  near(sched(&w, 0, 3000, 100), 0.4 * (0.1 + 0.9 * (1 + cos(3.14159265358979323846 * 0.5)) / 2), "cosine middle");
  near(sched(&w, 0, 5000, 100), 0.4 * 0.1, "cosine end");
  near(sched(&w, 0, 90000, 100), 0.4 * 0.1, "after the cosine");
  /* malformed */
  static const double bad[] = {0.1, -1};
  em_schedule b = {.n = 2, .values = bad};
  assert_int_equal(em_schedule_value(&b, 0, 0, 1, &out), EM_ERR_INVALID_ARGUMENT);
  static const uint64_t zero[] = {1, 0};
  em_schedule b2 = {.n = 2, .values = v, .counts = zero};
  assert_int_equal(em_schedule_value(&b2, 0, 0, 1, &out), EM_ERR_INVALID_ARGUMENT);
  em_schedule b3 = {.value = 1, .cosine_floor = 2};
  assert_int_equal(em_schedule_value(&b3, 0, 0, 1, &out), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_schedule_value(&w, 0, 0, 0, &out), EM_ERR_INVALID_ARGUMENT);
}

/* Momentum SGD with a piecewise per-sample rate and momentum as a time
 * constant, minibatches of changing size: the rates the learner uses are
 * those written out here. */
static void test_schedules_in_training(void **state) {
  (void)state;
  static const double lrs[] = {0.01, 0.004};
  static const uint64_t counts[] = {3, 1};
  em_learner_config c;
  CHECK(em_learner_defaults(EM_LEARNER_MOMENTUM, 0, &c));
  c.lr = (em_schedule){.n = 2, .values = lrs, .counts = counts, .epoch_size = 10, .unit = EM_UNIT_PER_SAMPLE};
  c.momentum = (em_schedule){.value = 40, .unit = EM_UNIT_TIME_CONSTANT};
  static const int use[NT] = {1, 1};
  static const uint64_t mbs[] = {8, 12, 5, 9, 16, 3};
  rig r = {0};
  rig_params(&r, 5);
  rig_one(&r, &c, em_cpu(), 0);
  ref f;
  ref_init(&f, &r);
  uint64_t s = 3, seen = 0;
  for (int k = 0; k < 6; k++) {
    float grads[NT][MAXE];
    make_grads(&s, grads, 1.0);
    double lr_want = (seen < 30 ? 0.01 : 0.004) * (double)mbs[k], mu_want = exp(-(double)mbs[k] / 40);
    double lr, mu;
    CHECK(em_learner_rates(r.l[0], mbs[k], &lr, &mu));
    near(lr, lr_want, "em_learner_rates: lr");
    near(mu, mu_want, "em_learner_rates: momentum");
    rig_step(&r, grads, mbs[k]);
    ref_step(&f, &c, grads, lr_want, mu_want, mbs[k], use);
    seen += mbs[k];
  }
  assert_int_equal(em_learner_steps(r.l[0]), 6);
  assert_int_equal(em_learner_samples(r.l[0]), seen);
  compare(&r, &f, "momentum with schedules", "momentum", "b", NULL, use, 2e-5);
  rig_free(&r);

  /* adam with warmup and cosine per minibatch */
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.02, &c));
  c.lr.warmup_samples = 20;
  c.lr.cosine_samples = 30;
  rig_params(&r, 6);
  rig_one(&r, &c, em_cpu(), 0);
  ref_init(&f, &r);
  seen = 0;
  for (int k = 0; k < 8; k++) {
    float grads[NT][MAXE];
    make_grads(&s, grads, 1.0);
    double lr = 0.02;
    if (seen + 8 < 20) lr *= (double)(seen + 8) / 20;
    double tc = seen > 20 ? fmin((double)(seen - 20), 30) : 0;
    lr *= (1 + cos(3.14159265358979323846 * tc / 30)) / 2;
    rig_step(&r, grads, 8);
    ref_step(&f, &c, grads, lr, 0.9, 8, use);
    seen += 8;
  }
  compare(&r, &f, "adam with warmup and cosine", "adam", "m", "v", use, 2e-5);
  rig_free(&r);
}

/* -------------------------------------- LARC, clipping, regularisation --- */

static void test_larc_clip_regularisation(void **state) {
  (void)state;
  em_learner_config c;
  /* LARC clip: eta large enough that some local rates exceed lr and some not */
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.5, &c));
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.5, &c));
  c.larc = EM_LARC_CLIP;
  c.larc_eta = 0.3;
  run_rule(&c, "sgd + LARC clip", 4, 4, 1.0);
  CHECK(em_learner_defaults(EM_LEARNER_MOMENTUM, 0.5, &c));
  c.larc = EM_LARC_SCALE;
  c.larc_eta = 0.02;
  c.weight_decay = 0.01;
  run_rule(&c, "momentum + LARC scale + weight decay", 4, 4, 1.0);
  /* em_learner_larc sets the same */
  rig r = {0};
  rig_params(&r, 1);
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.01, &c));
  CHECK(em_learner_create(&c, NULL, r.p, NT, &r.l[0]));
  assert_int_equal(em_learner_larc(r.l[0], (em_larc_policy)7, 0.1), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_learner_larc(r.l[0], EM_LARC_CLIP, -1), EM_ERR_INVALID_ARGUMENT);
  CHECK(em_learner_larc(r.l[0], EM_LARC_SCALE, 0.05));
  assert_int_equal(em_learner_get_config(r.l[0])->larc, EM_LARC_SCALE);
  em_learner_free(r.l[0]);
  em_graph_free(r.g);
  /* clipping by value: gradients up to 3, clipped at 0.5 */
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  c.clip_value = 0.5;
  run_rule(&c, "sgd, clip by value", 3, 4, 3.0);
  /* clipping by global norm (the norm is about 10, clipped to 1) */
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.01, &c));
  c.clip_norm = 1.0;
  run_rule(&c, "adam, clip by global norm", 4, 4, 3.0);
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  c.clip_norm = 1000; /* above the norm: no change */
  run_rule(&c, "sgd, clip norm not reached", 3, 4, 1.0);
  /* everything at once, with LARC on the clipped norm */
  CHECK(em_learner_defaults(EM_LEARNER_NESTEROV, 0.2, &c));
  c.clip_norm = 2;
  c.clip_value = 0.4;
  c.larc = EM_LARC_CLIP;
  c.larc_eta = 0.1;
  c.l1 = 0.01;
  c.l2 = 0.02;
  c.weight_decay = 0.03;
  run_rule(&c, "nesterov, every option", 4, 4, 2.0);
  /* L1 / L2 coupled, decoupled weight decay */
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  c.l1 = 0.05;
  c.l2 = 0.1;
  run_rule(&c, "sgd, L1 + L2", 4, 4, 1.0);
  CHECK(em_learner_defaults(EM_LEARNER_ADAMW, 0.05, &c));
  c.weight_decay = 0.2;
  run_rule(&c, "adamw, weight decay 0.2", 5, 4, 1.0);
  CHECK(em_learner_defaults(EM_LEARNER_RMSPROP, 0.01, &c));
  c.l2 = 0.1;
  c.weight_decay = 0.1;
  run_rule(&c, "rmsprop, L2 and decoupled decay", 4, 4, 1.0);
}

/* -------------------------------------------- two learners, one graph --- */

static void test_two_learners(void **state) {
  (void)state;
  em_learner_config a, b;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &a));
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.01, &b));
  static const int s0[] = {0}, s1[] = {1};
  const int *subs[2] = {s0, s1};
  const int counts[2] = {1, 1};
  const em_learner_config *cfgs[2] = {&a, &b};
  rig r = {0};
  rig_params(&r, 21);
  rig_learners(&r, cfgs, subs, counts, 2, em_cpu(), 0);
  ref fa, fb;
  ref_init(&fa, &r);
  ref_init(&fb, &r);
  static const int use0[NT] = {1, 0}, use1[NT] = {0, 1};
  uint64_t s = 8;
  for (int k = 0; k < 4; k++) {
    float grads[NT][MAXE];
    make_grads(&s, grads, 1.0);
    rig_step(&r, grads, 4);
    ref_step(&fa, &a, grads, 0.1, 0, 4, use0);
    ref_step(&fb, &b, grads, 0.01, 0.9, 4, use1);
  }
  float got[MAXE];
  rig_read(&r, r.p[0], got, NUMEL[0]);
  for (int j = 0; j < NUMEL[0]; j++) expect_close("sgd's tensor", 0, j, got[j], fa.p[0][j], 2e-5);
  rig_read(&r, r.p[1], got, NUMEL[1]);
  for (int j = 0; j < NUMEL[1]; j++) expect_close("adam's tensor", 1, j, got[j], fb.p[1][j], 2e-5);
  rig_read_named(&r, "w1.l1.m", got, NUMEL[1]);
  for (int j = 0; j < NUMEL[1]; j++) expect_close("w1.l1.m", 1, j, got[j], fb.s0[1][j], 2e-5);
  em_var v;
  assert_int_not_equal(em_graph_lookup(r.g, "w0.l1.m", &v), EM_OK); /* adam's state only for its own tensor */
  rig_free(&r);
}

/* ------------------------------------------------- host state, refusals --- */

static void test_state_and_refusals(void **state) {
  (void)state;
  em_learner_config c;
  CHECK(em_learner_defaults(EM_LEARNER_FSADAGRAD, 0.01, &c));
  c.beta2 = 30;
  rig r = {0};
  rig_params(&r, 2);
  rig_one(&r, &c, em_cpu(), 0);
  uint64_t s = 1;
  for (int k = 0; k < 3; k++) {
    float grads[NT][MAXE];
    make_grads(&s, grads, 1.0);
    rig_step(&r, grads, 7);
  }
  void *bytes;
  size_t size;
  CHECK(em_learner_state_save(r.l[0], &bytes, &size));
  /* a fresh learner loads it and feeds the same hyperparameters */
  em_learner *l2;
  CHECK(em_learner_create(&c, "other", r.p, NT, &l2));
  CHECK(em_learner_state_load(l2, bytes, size));
  assert_int_equal(em_learner_steps(l2), 3);
  assert_int_equal(em_learner_samples(l2), 21);
  void *bytes2;
  size_t size2;
  CHECK(em_learner_state_save(l2, &bytes2, &size2));
  assert_int_equal(size, size2);
  assert_memory_equal(bytes, bytes2, size);
  free(bytes2);
  /* damaged, short, foreign, mismatched: refused, nothing changed */
  unsigned char *b = malloc(size);
  memcpy(b, bytes, size);
  b[0] ^= 1;
  assert_int_equal(em_learner_state_load(l2, b, size), EM_ERR_CORRUPT);
  assert_int_equal(em_learner_state_load(l2, bytes, size - 1), EM_ERR_CORRUPT);
  assert_int_equal(em_learner_state_load(l2, bytes, 3), EM_ERR_CORRUPT);
  memcpy(b, bytes, size);
  b[12] = EM_LEARNER_ADAM;
  assert_int_equal(em_learner_state_load(l2, b, size), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "offset 12"));
  memcpy(b, bytes, size);
  b[16] = 5;
  assert_int_equal(em_learner_state_load(l2, b, size), EM_ERR_CORRUPT);
  assert_int_equal(em_learner_steps(l2), 3);
  free(b);
  free(bytes);
  em_learner_free(l2);
  /* bad configs name the field */
  em_learner *bad;
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.01, &c));
  c.beta2 = 1.5;
  assert_int_equal(em_learner_create(&c, NULL, r.p, NT, &bad), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "beta2"));
  CHECK(em_learner_defaults(EM_LEARNER_SGD, -1, &c));
  assert_int_equal(em_learner_create(&c, NULL, r.p, NT, &bad), EM_ERR_INVALID_ARGUMENT);
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  c.lr.unit = EM_UNIT_TIME_CONSTANT;
  assert_int_equal(em_learner_create(&c, NULL, r.p, NT, &bad), EM_ERR_INVALID_ARGUMENT);
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  em_var twice[2] = {r.p[0], r.p[0]};
  assert_int_equal(em_learner_create(&c, NULL, twice, 2, &bad), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_learner_create(&c, "a.b", r.p, NT, &bad), EM_ERR_INVALID_ARGUMENT);
  em_learner_kind k;
  CHECK(em_learner_kind_parse("adamw", &k));
  assert_int_equal(k, EM_LEARNER_ADAMW);
  assert_int_equal(em_learner_kind_parse("adam_w", &k), EM_ERR_INVALID_ARGUMENT);
  assert_string_equal(em_learner_kind_name(EM_LEARNER_FSADAGRAD), "fsadagrad");
  /* the update runs after every reader of its parameters, whatever the
   * outputs' order: neg(p) listed after the update reads p before it */
  em_var after, outs[2];
  CHECK(em_apply(r.g, "neg", &r.p[0], 1, NULL, 0, &after, 1));
  outs[0] = r.update[0];
  outs[1] = after;
  float p_before[MAXE], p_after[MAXE], negated[MAXE];
  rig_read(&r, r.p[0], p_before, NUMEL[0]);
  em_exec *e;
  CHECK(em_exec_create(r.g, outs, 2, em_cpu(), &e));
  em_tensor *fed[2], *res[2];
  em_feed hf;
  CHECK(em_learner_feed(r.l[0], 7, &hf));
  float gz[MAXE] = {0};
  gz[0] = 1;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, SHAPE0, gz, sizeof(float) * (size_t)NUMEL[0], &fed[0]));
  CHECK(em_tensor_zeros(em_cpu(), EM_F32, 1, SHAPE1, &fed[1]));
  em_feed feeds[3] = {hf, {r.gin[0], fed[0]}, {r.gin[1], fed[1]}};
  CHECK(em_exec_run(e, feeds, 3, res));
  CHECK(em_tensor_to_host(res[1], negated, sizeof(float) * (size_t)NUMEL[0]));
  rig_read(&r, r.p[0], p_after, NUMEL[0]);
  assert_true(p_after[0] != p_before[0]); /* the update ran */
  for (int j = 0; j < NUMEL[0]; j++) assert_true(negated[j] == -p_before[j]);
  for (int i = 0; i < 2; i++) em_tensor_release(res[i]);
  em_tensor_release(fed[0]);
  em_tensor_release(fed[1]);
  em_exec_free(e);
  /* two updates of one parameter cannot both come last: refused */
  em_learner *l3;
  em_var upd3, g3 = r.gin[0];
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  CHECK(em_learner_create(&c, "third", &r.p[0], 1, &l3));
  CHECK(em_learner_attach(l3, r.g, &g3, &upd3));
  outs[0] = r.update[0];
  outs[1] = upd3;
  assert_int_equal(em_exec_create(r.g, outs, 2, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "second update"));
  em_learner_free(l3);
  rig_free(&r);
}

/* A learner over a value that is not a parameter (an input, a constant, a
 * state, a computed value) would update it in place where it lives and the
 * update would be lost: refused at attach, naming the value; nothing is
 * attached, so the same learner over parameters attaches afterwards. */
static void test_refuses_non_parameters(void **state) {
  (void)state;
  rig r = {0};
  rig_params(&r, 3);
  em_var neg, cst, st;
  CHECK(em_apply(r.g, "neg", &r.p[1], 1, NULL, 0, &neg, 1));
  CHECK(em_var_set_name(r.g, neg, "minus_w1"));
  em_tensor *t;
  CHECK(em_tensor_zeros(em_cpu(), EM_F32, 1, SHAPE1, &t));
  CHECK(em_constant(r.g, t, &cst));
  em_tensor_release(t);
  em_init zero = {.kind = EM_INIT_CONSTANT, .value = 0};
  CHECK(em_state(r.g, "running", EM_F32, 1, SHAPE1, &zero, &st));
  const struct {
    em_var v;
    const char *named;
  } bad[] = {{r.gin[1], "'g1'"}, {neg, "'minus_w1'"}, {cst, "is not a parameter"}, {st, "'running'"}};
  em_learner_config c;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    em_var ps[2] = {r.p[0], bad[k].v}, gs[2] = {r.gin[0], r.gin[1]}, upd = -1;
    em_learner *l;
    CHECK(em_learner_create(&c, NULL, ps, 2, &l));
    assert_int_equal(em_learner_attach(l, r.g, gs, &upd), EM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(em_last_error(), "is not a parameter"));
    assert_non_null(strstr(em_last_error(), bad[k].named));
    char entry[32];
    snprintf(entry, sizeof entry, "value %d", (int)bad[k].v);
    assert_non_null(strstr(em_last_error(), entry));
    assert_int_equal(upd, -1);
    em_learner_free(l);
  }
  /* the graph took nothing that stops a learner over the parameters */
  const em_learner_config *cfgs[1] = {&c};
  const int all[2] = {0, 1}, *subsets[1] = {all}, counts[1] = {2};
  rig_learners(&r, cfgs, subsets, counts, 1, em_cpu(), 0);
  rig_free(&r);
}

/* ------------------------------------------------------------ on a GPU --- */

static int g_gpus;

static void use_gpu(void) { g_gpus = ts_use_gpu(); }

/* Steps of cfg on dev in portable mode; the final parameters and slots. */
static void run_on(const em_learner_config *cfg, em_device dev, float out[NT][3][MAXE], em_exec_stats *st) {
  rig r = {0};
  rig_params(&r, 31);
  rig_one(&r, cfg, dev, 1);
  uint64_t s = 77;
  for (int k = 0; k < 4; k++) {
    float grads[NT][MAXE];
    make_grads(&s, grads, 2.0);
    rig_step(&r, grads, 6);
  }
  if (st) CHECK(em_exec_stats_get(r.e, st));
  const char *lname = em_learner_kind_name(cfg->kind);
  for (int i = 0; i < NT; i++) {
    rig_read(&r, r.p[i], out[i][0], NUMEL[i]);
    for (int k = 0; k < 2; k++) {
      memset(out[i][1 + k], 0, sizeof out[i][1 + k]);
      if (!slot_names[cfg->kind][k]) continue;
      char name[64];
      snprintf(name, sizeof name, "w%d.%s.%s", i, lname, slot_names[cfg->kind][k]);
      rig_read_named(&r, name, out[i][1 + k], NUMEL[i]);
    }
  }
  rig_free(&r);
}

static void test_gpu_bitwise(void **state) {
  (void)state;
  if (!g_gpus) {
    print_message("SKIPPED: no CUDA driver, real or test double\n");
    skip();
  }
  for (int kind = 0; kind <= EM_LEARNER_FSADAGRAD; kind++)
    for (int opts = 0; opts < 2; opts++) {
      em_learner_config c;
      CHECK(em_learner_defaults((em_learner_kind)kind, 0.05, &c));
      if (kind == EM_LEARNER_FSADAGRAD) c.beta2 = 40;
      if (opts) { /* every option on */
        c.clip_norm = 3, c.clip_value = 0.8, c.l1 = 0.01, c.l2 = 0.02, c.weight_decay = 0.03;
        c.larc = kind % 2 ? EM_LARC_SCALE : EM_LARC_CLIP;
        c.larc_eta = 0.05;
      }
      float cpu[NT][3][MAXE], gpu[NT][3][MAXE];
      em_exec_stats st;
      run_on(&c, em_cpu(), cpu, NULL);
      run_on(&c, em_cuda(0), gpu, &st);
      for (int i = 0; i < NT; i++)
        for (int k = 0; k < 3; k++)
          for (int j = 0; j < NUMEL[i]; j++)
            if (memcmp(&cpu[i][k][j], &gpu[i][k][j], sizeof(float)))
              fail_msg("%s%s: tensor %d %s element %d: %.9g on cuda:0, %.9g on the CPU",
                       em_learner_kind_name((em_learner_kind)kind), opts ? " with every option" : "", i,
                       k ? "slot" : "parameter", j, gpu[i][k][j], cpu[i][k][j]);
      /* a step copies its feeds (two gradients and the hyperparameters) and the tables of tensors its kernels
       * read (the update's; with clipping or LARC also the two sums of squares'), nothing back, no host step */
      assert_int_equal(st.h2d_copies, 3 + 1 + (opts ? 2 : 0));
      assert_int_equal(st.d2h_copies, 0);
      assert_int_equal(st.host_steps, 0);
    }
}

/* A real training step: an MLP 2-16-2 on two rings of points, gradients
 * from em_gradients, adam with LARC and clipping on the weights and
 * nesterov on the biases, one executor computing the loss and both
 * updates. Returns the losses and the final weights; on a GPU also the
 * step's copies. */
#define MLP_N 64
static void mlp_train(em_device dev, int steps, float *losses, float *weights, int n_weights, em_exec_stats *st) {
  float xs[MLP_N * 2];
  int32_t ys[MLP_N];
  uint64_t s = 42;
  for (int i = 0; i < MLP_N; i++) {
    double angle = (double)lcg(&s) / 9007199254740992.0 * 6.283185307179586;
    double r = (i % 2 ? 2.0 : 1.0) + ((double)lcg(&s) / 9007199254740992.0 - 0.5) * 0.4;
    ys[i] = i % 2;
    xs[2 * i] = (float)(r * cos(angle));
    xs[2 * i + 1] = (float)(r * sin(angle));
  }
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, y, w[2], b[2], h;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 2}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &y));
  const int64_t dims[2][2] = {{16, 2}, {2, 16}};
  h = x;
  for (int k = 0; k < 2; k++) {
    char wn[16], bn[16];
    snprintf(wn, sizeof wn, "fc%d.weight", k);
    snprintf(bn, sizeof bn, "fc%d.bias", k);
    em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = 1u + (uint64_t)k}, zero = {.kind = EM_INIT_CONSTANT};
    CHECK(em_parameter(g, wn, EM_F32, 2, dims[k], &he, &w[k]));
    CHECK(em_parameter(g, bn, EM_F32, 1, dims[k], &zero, &b[k]));
    em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
    CHECK(em_apply(g, "matmul", (em_var[]){h, w[k]}, 2, &tb, 1, &h, 1));
    CHECK(em_apply(g, "add", (em_var[]){h, b[k]}, 2, NULL, 0, &h, 1));
    if (k == 0) CHECK(em_apply(g, "relu", &h, 1, NULL, 0, &h, 1));
  }
  em_var per, loss, params[4] = {w[0], w[1], b[0], b[1]}, grads[4];
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){h, y}, 2, NULL, 0, &per, 1));
  CHECK(em_apply(g, "reduce_mean", &per, 1, NULL, 0, &loss, 1));
  CHECK(em_gradients(g, loss, params, 4, grads));
  em_learner_config ca, cn;
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.05, &ca));
  ca.clip_norm = 1;
  CHECK(em_learner_defaults(EM_LEARNER_NESTEROV, 0.1, &cn));
  em_learner *la, *ln;
  CHECK(em_learner_create(&ca, "adam", params, 2, &la));
  CHECK(em_learner_larc(la, EM_LARC_CLIP, 0.5));
  CHECK(em_learner_create(&cn, NULL, params + 2, 2, &ln));
  em_var outs[3] = {loss};
  CHECK(em_learner_attach(la, g, grads, &outs[1]));
  CHECK(em_learner_attach(ln, g, grads + 2, &outs[2]));
  em_exec *e;
  CHECK(em_exec_create(g, outs, 3, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){MLP_N, 2}, xs, sizeof xs, &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){MLP_N}, ys, sizeof ys, &yt));
  for (int k = 0; k < steps; k++) {
    em_feed f[4] = {{x, xt}, {y, yt}};
    CHECK(em_learner_feed(la, MLP_N, &f[2]));
    CHECK(em_learner_feed(ln, MLP_N, &f[3]));
    em_tensor *res[3];
    CHECK(em_exec_run(e, f, 4, res));
    CHECK(em_tensor_to_host(res[0], &losses[k], sizeof(float)));
    for (int i = 0; i < 3; i++) em_tensor_release(res[i]);
    CHECK(em_learner_step_done(la, MLP_N));
    CHECK(em_learner_step_done(ln, MLP_N));
  }
  if (st) CHECK(em_exec_stats_get(e, st));
  int at = 0;
  for (int k = 0; k < 4; k++) {
    em_tensor *t;
    CHECK(em_parameter_get(g, params[k], em_cpu(), &t));
    int64_t n = em_tensor_numel(t);
    assert_true(at + n <= n_weights);
    CHECK(em_tensor_to_host(t, weights + at, sizeof(float) * (size_t)n));
    at += (int)n;
    em_tensor_release(t);
  }
  em_tensor_release(xt);
  em_tensor_release(yt);
  em_exec_free(e);
  em_learner_free(la);
  em_learner_free(ln);
  em_graph_free(g);
}

static void test_mlp_training(void **state) {
  (void)state;
  enum { STEPS = 30, NW = 16 * 2 + 2 * 16 + 16 + 2 };
  float loss_cpu[STEPS], w_cpu[NW];
  mlp_train(em_cpu(), STEPS, loss_cpu, w_cpu, NW, NULL);
  if (!(loss_cpu[STEPS - 1] < 0.5f * loss_cpu[0]))
    fail_msg("the MLP's loss did not fall: %g -> %g", loss_cpu[0], loss_cpu[STEPS - 1]);
  if (!g_gpus) {
    print_message("GPU part SKIPPED: no CUDA driver, real or test double\n");
    return;
  }
  float loss_gpu[STEPS], w_gpu[NW];
  em_exec_stats st;
  mlp_train(em_cuda(0), STEPS, loss_gpu, w_gpu, NW, &st);
  for (int k = 0; k < STEPS; k++)
    if (memcmp(&loss_cpu[k], &loss_gpu[k], sizeof(float)))
      fail_msg("step %d: loss %.9g on cuda:0, %.9g on the CPU", k, loss_gpu[k], loss_cpu[k]);
  for (int i = 0; i < NW; i++)
    if (memcmp(&w_cpu[i], &w_gpu[i], sizeof(float)))
      fail_msg("weight %d: %.9g on cuda:0, %.9g on the CPU", i, w_gpu[i], w_cpu[i]);
  /* a step copies its feeds (x, labels, two hyperparameter vectors) and the learner kernels' tables of
   * tensors (adam's update and two sums of squares, nesterov's update) up; nothing else moves, and the
   * fetched loss stays on the device until read */
  assert_int_equal(st.h2d_copies, 4 + 3 + 1);
  assert_int_equal(st.d2h_copies, 0);
  assert_int_equal(st.d2d_copies, 0);
  assert_int_equal(st.host_steps, 0);
}

/* _learner_sumsq over 17 tensors (one launch on a GPU, a block each) of
 * sizes below, at and above its 256 lanes: each sum against a float64 sum,
 * and the GPU's bits equal to the CPU's. */
static void sumsq_on(em_device dev, float *out) {
  enum { K = 17 };
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x[K], y;
  em_feed f[K];
  em_tensor *t[K];
  uint64_t s = 5;
  for (int i = 0; i < K; i++) {
    int64_t n = 1 + (int64_t)i * i * 23;
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < n; j++) v[j] = uni(&s, -2, 2);
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, &n, v, sizeof(float) * (size_t)n, &t[i]));
    CHECK(em_input(g, NULL, EM_F32, 1, &n, &x[i]));
    f[i] = (em_feed){x[i], t[i]};
    free(v);
  }
  CHECK(em_apply(g, "_learner_sumsq", x, K, NULL, 0, &y, 1));
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, dev, &e));
  em_tensor *r;
  CHECK(em_exec_run(e, f, K, &r));
  CHECK(em_tensor_to_host(r, out, sizeof(float) * K));
  for (int i = 0; i < K; i++) {
    const float *v = em_tensor_data(t[i]);
    double want = 0;
    for (int64_t j = 0; j < em_tensor_numel(t[i]); j++) want += (double)v[j] * v[j];
    if (!(fabs(out[i] - want) <= 1e-6 * want)) fail_msg("sum of squares %d: %.9g, float64 says %.9g", i, out[i], want);
    em_tensor_release(t[i]);
  }
  em_tensor_release(r);
  em_exec_free(e);
  em_graph_free(g);
}

static void test_sums_of_squares(void **state) {
  (void)state;
  float cpu[17], gpu[17];
  sumsq_on(em_cpu(), cpu);
  if (!g_gpus) return;
  sumsq_on(em_cuda(0), gpu);
  for (int i = 0; i < 17; i++)
    if (memcmp(&cpu[i], &gpu[i], sizeof(float)))
      fail_msg("sum of squares %d: %.9g on cuda:0, %.9g on the CPU", i, gpu[i], cpu[i]);
}

/* A learner over 13 tensors (more than the 5 the update kernel once took a
 * launch, 15 for the sums of squares), of sizes around the kernel's chunk
 * of 2048 elements a block (learner_math.h EM_LRN_CHUNK) and one of none:
 * adam with clipping by global norm and LARC, three steps. The GPU's
 * parameters and slots equal the CPU's bit for bit, and a step is ONE
 * launch of each learner kernel (sums of squares of the parameters and of
 * the gradients, the factors, the update) and one table upload for each
 * that takes a table, counted by the test double; on a real GPU, the
 * executor's copies. */
#define MT 13
static const int64_t MT_N[MT] = {1, 2047, 2048, 2049, 5, 0, 4100, 300, 33, 7, 1, 256, 257};

/* Copies to the device the test double has made, synchronous or not (-1: not the double). */
static long h2d_calls(void) {
  long a = ts_double_calls("cuMemcpyHtoD_v2"), b = ts_double_calls("cuMemcpyHtoDAsync_v2");
  return a < 0 || b < 0 ? -1 : a + b;
}

static void many_on(em_device dev, float **out, em_exec_stats *st, long *launches, long *h2d) {
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var p[MT], gin[MT], upd;
  em_tensor *gt[MT];
  em_feed f[MT + 1];
  uint64_t s = 99;
  for (int i = 0; i < MT; i++) {
    float *v = malloc(sizeof(float) * (size_t)(MT_N[i] + 1));
    for (int64_t j = 0; j < MT_N[i]; j++) v[j] = uni(&s, -1, 1);
    em_tensor *t;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, &MT_N[i], v, sizeof(float) * (size_t)MT_N[i], &t));
    em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
    char name[16];
    snprintf(name, sizeof name, "w%d", i);
    CHECK(em_parameter(g, name, EM_F32, 1, &MT_N[i], &init, &p[i]));
    em_tensor_release(t);
    CHECK(em_input(g, NULL, EM_F32, 1, &MT_N[i], &gin[i]));
    free(v);
  }
  em_learner_config c;
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.05, &c));
  c.clip_norm = 3, c.weight_decay = 0.01;
  em_learner *l;
  CHECK(em_learner_create(&c, NULL, p, MT, &l));
  CHECK(em_learner_larc(l, EM_LARC_CLIP, 0.05));
  CHECK(em_learner_attach(l, g, gin, &upd));
  em_exec *e;
  CHECK(em_exec_create(g, &upd, 1, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < MT; i++) {
      float *v = malloc(sizeof(float) * (size_t)(MT_N[i] + 1));
      for (int64_t j = 0; j < MT_N[i]; j++) v[j] = uni(&s, -2, 2);
      CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, &MT_N[i], v, sizeof(float) * (size_t)MT_N[i], &gt[i]));
      f[i] = (em_feed){gin[i], gt[i]};
      free(v);
    }
    CHECK(em_learner_feed(l, 8, &f[MT]));
    long l0 = ts_double_calls("cuLaunchKernel"), c0 = h2d_calls();
    em_tensor *res;
    CHECK(em_exec_run(e, f, MT + 1, &res));
    if (launches) *launches = l0 < 0 ? -1 : ts_double_calls("cuLaunchKernel") - l0;
    if (h2d) *h2d = c0 < 0 ? -1 : h2d_calls() - c0;
    em_tensor_release(res);
    CHECK(em_learner_step_done(l, 8));
    for (int i = 0; i < MT; i++) em_tensor_release(gt[i]);
  }
  if (st) CHECK(em_exec_stats_get(e, st));
  for (int i = 0; i < MT; i++) {
    em_tensor *t;
    CHECK(em_parameter_get(g, p[i], em_cpu(), &t));
    CHECK(em_tensor_to_host(t, out[3 * i], sizeof(float) * (size_t)MT_N[i]));
    em_tensor_release(t);
    static const char *const slot[2] = {"m", "v"};
    for (int k = 0; k < 2; k++) {
      char name[32];
      snprintf(name, sizeof name, "w%d.adam.%s", i, slot[k]);
      em_var v;
      CHECK(em_graph_lookup(g, name, &v));
      CHECK(em_parameter_get(g, v, em_cpu(), &t));
      CHECK(em_tensor_to_host(t, out[3 * i + 1 + k], sizeof(float) * (size_t)MT_N[i]));
      em_tensor_release(t);
    }
  }
  em_exec_free(e);
  em_learner_free(l);
  em_graph_free(g);
}

static void test_many_tensors_one_launch(void **state) {
  (void)state;
  if (!g_gpus) {
    print_message("SKIPPED: no CUDA driver, real or test double\n");
    skip();
  }
  float *cpu[3 * MT], *gpu[3 * MT];
  for (int i = 0; i < 3 * MT; i++) {
    cpu[i] = calloc((size_t)MT_N[i / 3] + 1, sizeof(float));
    gpu[i] = calloc((size_t)MT_N[i / 3] + 1, sizeof(float));
  }
  many_on(em_cpu(), cpu, NULL, NULL, NULL);
  em_exec_stats st;
  long launches, h2d;
  many_on(em_cuda(0), gpu, &st, &launches, &h2d);
  for (int i = 0; i < 3 * MT; i++)
    for (int64_t j = 0; j < MT_N[i / 3]; j++)
      if (memcmp(&cpu[i][j], &gpu[i][j], sizeof(float)))
        fail_msg("tensor %d (%lld elements) %s element %lld: %.9g on cuda:0, %.9g on the CPU", i / 3,
                 (long long)MT_N[i / 3], i % 3 ? (i % 3 == 1 ? "m" : "v") : "parameter", (long long)j, gpu[i][j],
                 cpu[i][j]);
  /* the feeds (12 gradients: the empty one copies nothing; the hyperparameters) and three tables (two sums of
   * squares, the update) */
  assert_int_equal(st.h2d_copies, MT - 1 + 1 + 3);
  assert_int_equal(st.d2h_copies, 0);
  assert_int_equal(st.host_steps, 0);
  if (launches >= 0) { /* the test double counts the driver's calls */
    assert_int_equal(launches, 4);
    assert_int_equal(h2d, MT - 1 + 1 + 3);
  }
  for (int i = 0; i < 3 * MT; i++) free(cpu[i]), free(gpu[i]);
}


/* Tables at their edges: three learners in ONE step (three tables alive on
 * the stream at once, each freed after its launch is queued), a learner
 * over 300 tensors (more blocks than tensors, and more tensors than any
 * block's binary search covers in a few steps) most of 1 to 5 elements and
 * every seventh empty, with empty tensors first and last, one of 2049
 * elements in the middle; one over {empty, 4097, 1, empty}; and one whose
 * every tensor is empty (its update takes no block at all; its sums of
 * squares read empty tensors). CPU == GPU bit for bit, parameters and
 * slots, after two steps. */
#define TB_L 3
static const int TB_COUNT[TB_L] = {300, 4, 2};

static int64_t tb_size(int l, int i) {
  if (l == 2) return 0;
  if (l == 1) return (int64_t[]){0, 4097, 1, 0}[i];
  if (i == 150) return 2049;
  if (i % 7 == 0 || i == TB_COUNT[0] - 1) return 0;
  return 1 + (i * 37) % 5;
}

static void tb_config(int l, em_learner_config *c, em_larc_policy *larc) {
  static const em_learner_kind kinds[TB_L] = {EM_LEARNER_MOMENTUM, EM_LEARNER_ADAM, EM_LEARNER_SGD};
  CHECK(em_learner_defaults(kinds[l], 0.05, c));
  c->clip_norm = 0.5, c->weight_decay = 0.01;
  *larc = l == 0 ? EM_LARC_SCALE : l == 1 ? EM_LARC_CLIP : EM_LARC_NONE;
}

/* out[l][i][0..2]: learner l's tensor i, its parameter and slots (malloc'd, freed by the caller). */
static void tables_on(em_device dev, float **out[TB_L], long *launches) {
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var *p[TB_L], *gin[TB_L], upd[TB_L];
  em_learner *lr[TB_L];
  uint64_t s = 4242;
  int n_feeds = 0;
  for (int l = 0; l < TB_L; l++) {
    p[l] = calloc((size_t)TB_COUNT[l], sizeof(em_var));
    gin[l] = calloc((size_t)TB_COUNT[l], sizeof(em_var));
    for (int i = 0; i < TB_COUNT[l]; i++) {
      int64_t n = tb_size(l, i);
      float *v = malloc(sizeof(float) * (size_t)(n + 1));
      for (int64_t j = 0; j < n; j++) v[j] = uni(&s, -1, 1);
      em_tensor *t;
      CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, &n, v, sizeof(float) * (size_t)n, &t));
      em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
      char name[24];
      snprintf(name, sizeof name, "t%d_%d", l, i);
      CHECK(em_parameter(g, name, EM_F32, 1, &n, &init, &p[l][i]));
      em_tensor_release(t);
      CHECK(em_input(g, NULL, EM_F32, 1, &n, &gin[l][i]));
      free(v);
    }
    em_learner_config c;
    em_larc_policy larc;
    tb_config(l, &c, &larc);
    char lname[8];
    snprintf(lname, sizeof lname, "l%d", l);
    CHECK(em_learner_create(&c, lname, p[l], TB_COUNT[l], &lr[l]));
    if (larc != EM_LARC_NONE) CHECK(em_learner_larc(lr[l], larc, 0.05));
    CHECK(em_learner_attach(lr[l], g, gin[l], &upd[l]));
    n_feeds += TB_COUNT[l] + 1;
  }
  em_exec *e;
  CHECK(em_exec_create(g, upd, TB_L, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_feed *f = calloc((size_t)n_feeds, sizeof *f);
  em_tensor **gt = calloc((size_t)n_feeds, sizeof *gt);
  for (int k = 0; k < 2; k++) {
    int at = 0;
    for (int l = 0; l < TB_L; l++) {
      for (int i = 0; i < TB_COUNT[l]; i++) {
        int64_t n = tb_size(l, i);
        float *v = malloc(sizeof(float) * (size_t)(n + 1));
        for (int64_t j = 0; j < n; j++) v[j] = uni(&s, -3, 3);
        em_tensor *t;
        CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, &n, v, sizeof(float) * (size_t)n, &t));
        gt[at] = t;
        f[at++] = (em_feed){gin[l][i], t};
        free(v);
      }
      CHECK(em_learner_feed(lr[l], 8, &f[at++]));
    }
    long l0 = ts_double_calls("cuLaunchKernel");
    em_tensor *res[TB_L];
    CHECK(em_exec_run(e, f, n_feeds, res));
    if (launches) *launches = l0 < 0 ? -1 : ts_double_calls("cuLaunchKernel") - l0;
    for (int l = 0; l < TB_L; l++) {
      em_tensor_release(res[l]);
      CHECK(em_learner_step_done(lr[l], 8));
    }
    for (int i = 0; i < n_feeds; i++) em_tensor_release(gt[i]), gt[i] = NULL;
  }
  free(f);
  free(gt);
  for (int l = 0; l < TB_L; l++) {
    em_learner_config c;
    em_larc_policy larc;
    tb_config(l, &c, &larc);
    out[l] = calloc((size_t)TB_COUNT[l] * 3, sizeof(float *));
    for (int i = 0; i < TB_COUNT[l]; i++) {
      int64_t n = tb_size(l, i);
      for (int k = 0; k < 3; k++) {
        float *o = out[l][3 * i + k] = calloc((size_t)n + 1, sizeof(float));
        em_var v = p[l][i];
        if (k) {
          if (!slot_names[c.kind][k - 1]) continue;
          char name[48];
          snprintf(name, sizeof name, "t%d_%d.l%d.%s", l, i, l, slot_names[c.kind][k - 1]);
          CHECK(em_graph_lookup(g, name, &v));
        }
        em_tensor *t;
        CHECK(em_parameter_get(g, v, em_cpu(), &t));
        CHECK(em_tensor_to_host(t, o, sizeof(float) * (size_t)n));
        em_tensor_release(t);
      }
    }
    free(p[l]);
    free(gin[l]);
  }
  em_exec_free(e);
  for (int l = 0; l < TB_L; l++) em_learner_free(lr[l]);
  em_graph_free(g);
}

static void test_tables_at_their_edges(void **state) {
  (void)state;
  if (!g_gpus) {
    print_message("SKIPPED: no CUDA driver, real or test double\n");
    skip();
  }
  float **cpu[TB_L], **gpu[TB_L];
  long launches;
  tables_on(em_cpu(), cpu, NULL);
  tables_on(em_cuda(0), gpu, &launches);
  for (int l = 0; l < TB_L; l++)
    for (int i = 0; i < TB_COUNT[l]; i++) {
      for (int k = 0; k < 3; k++) {
        for (int64_t j = 0; j < tb_size(l, i); j++)
          if (memcmp(&cpu[l][3 * i + k][j], &gpu[l][3 * i + k][j], sizeof(float)))
            fail_msg("learner %d tensor %d (%lld elements) %s element %lld: %.9g on cuda:0, %.9g on the CPU", l, i,
                     (long long)tb_size(l, i), k ? "slot" : "parameter", (long long)j, gpu[l][3 * i + k][j],
                     cpu[l][3 * i + k][j]);
        free(cpu[l][3 * i + k]), free(gpu[l][3 * i + k]);
      }
    }
  for (int l = 0; l < TB_L; l++) free(cpu[l]), free(gpu[l]);
  /* learners 0 and 1 (clipping and LARC): two sums of squares, the factors, the update; learner 2 (clipping
   * only, no element): the gradients' sums of squares and the factors, and no update launch */
  if (launches >= 0) assert_int_equal(launches, 4 + 4 + 2);
}

/* Clipping by global norm with a NaN in one gradient: the norm is NaN, so
 * every gradient becomes NaN, as PyTorch's clip_grad_norm_ makes it (a NaN
 * factor), and sgd writes NaN into every element of both tensors; the
 * finite entries must not go through unclipped. An inf gradient makes the
 * factor 0 (clip_norm / inf): the other entries stay where they were, the
 * inf one becomes NaN (inf * 0). On the CPU and, when present, the GPU. */
static void clip_nonfinite_on(em_device dev) {
  for (int inf = 0; inf < 2; inf++) {
    em_learner_config c;
    CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c));
    c.clip_norm = 1;
    rig r = {0};
    rig_params(&r, 5);
    rig_one(&r, &c, dev, 1);
    float grads[NT][MAXE];
    uint64_t s = 9;
    make_grads(&s, grads, 1.0);
    grads[0][3] = inf ? INFINITY : NAN;
    rig_step(&r, grads, 1);
    for (int i = 0; i < NT; i++) {
      float p[MAXE];
      rig_read(&r, r.p[i], p, NUMEL[i]);
      for (int j = 0; j < NUMEL[i]; j++) {
        const int bad = i == 0 && j == 3;
        if (!inf || bad) {
          if (!isnan(p[j])) fail_msg("%s gradient: tensor %d element %d is %.9g, want NaN", inf ? "inf" : "NaN", i, j, p[j]);
        } else if (memcmp(&p[j], &r.init[i][j], sizeof(float))) {
          fail_msg("inf gradient: tensor %d element %d moved from %.9g to %.9g (factor 0)", i, j, r.init[i][j], p[j]);
        }
      }
    }
    rig_free(&r);
  }
}

static void test_clip_norm_nonfinite(void **state) {
  (void)state;
  clip_nonfinite_on(em_cpu());
  if (g_gpus) clip_nonfinite_on(em_cuda(0));
}

int main(void) {
  use_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules),
      cmocka_unit_test(test_schedule_values),
      cmocka_unit_test(test_schedules_in_training),
      cmocka_unit_test(test_larc_clip_regularisation),
      cmocka_unit_test(test_two_learners),
      cmocka_unit_test(test_state_and_refusals),
      cmocka_unit_test(test_refuses_non_parameters),
      cmocka_unit_test(test_gpu_bitwise),
      cmocka_unit_test(test_mlp_training),
      cmocka_unit_test(test_sums_of_squares),
      cmocka_unit_test(test_many_tensors_one_launch),
      cmocka_unit_test(test_tables_at_their_edges),
      cmocka_unit_test(test_clip_norm_nonfinite),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
