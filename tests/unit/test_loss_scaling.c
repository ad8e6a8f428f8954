/* Dynamic loss scaling in the trainer (trainer.h em_loss_scaling,
 * training/trainer_scaling.c), in f32 (no half precision needed: an init
 * scale of 2^100 or more makes the f32 gradients' sums of squares overflow):
 *  - option validation, each bad field named; AUTO is on only with EM_F16;
 *  - overflow: the step is skipped on the device (parameters, momentum and
 *    Adam's moments bitwise as they were, the learner's step counter not
 *    advanced), S backs off each time until the gradients are finite, and
 *    the first clean step equals an unscaled step bitwise;
 *  - growth after exactly growth_interval clean steps, the count reset by
 *    a skip; the min_scale failure (EM_ERR_NOT_FINITE, nothing counted); a
 *    non-finite loss still the divergence error (nothing counted, S kept);
 *  - a scaled run with S a power of two gives bitwise the parameters,
 *    state and losses of an unscaled run: sgd, momentum, nesterov, adam,
 *    adamw with clipping by global norm (and by value, L2), LARC;
 *  - two learners where only one overflows: only it skips;
 *  - checkpoints: save mid-run and resume continues bitwise (S, the clean
 *    count, the skips restored); a scaled record refused by a trainer
 *    without scaling; an unscaled record into a scaled trainer starts S fresh;
 *  - the same scenarios on the libcuda test double in portable mode,
 *    bitwise equal to the CPU. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"
#include "loss_scaling_rig.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

static int g_gpus;


/* ------------------------------------------------------------ tests --- */

static void test_options(void **state) {
  (void)state;
  static const struct {
    em_loss_scaling ls;
    const char *field;
  } bad[] = {
      {{.mode = 7}, "mode = 7"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .growth_factor = 1}, "growth_factor = 1"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .growth_factor = 0.5}, "growth_factor = 0.5"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .backoff_factor = 1}, "backoff_factor = 1"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .backoff_factor = -0.5}, "backoff_factor = -0.5"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .growth_interval = -3}, "growth_interval = -3"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .init_scale = -1}, "init_scale = -1"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .init_scale = INFINITY}, "init_scale = inf"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .init_scale = 1e39}, "init_scale = 1e+39"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .min_scale = -2}, "min_scale = -2"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .min_scale = NAN}, "min_scale = nan"},
      {{.mode = EM_LOSS_SCALE_DYNAMIC, .init_scale = 4, .min_scale = 8}, "init_scale = 4 is below"},
      /* checked whatever the mode */
      {{.mode = EM_LOSS_SCALE_NONE, .growth_factor = 0.9}, "growth_factor = 0.9"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    model m;
    ls_build(&m, 0.5);
    em_learner *l = ls_learner(EM_LEARNER_SGD, NULL, &m.w1, 1, 0);
    em_trainer_options o = {.loss_scaling = bad[i].ls};
    em_trainer *t = (em_trainer *)&m; /* must come back NULL */
    assert_int_equal(em_trainer_create(m.g, m.loss, -1, &l, 1, &o, &t), EM_ERR_INVALID_ARGUMENT);
    assert_null(t);
    if (!strstr(em_last_error(), bad[i].field)) fail_msg("case %zu: '%s' lacks '%s'", i, em_last_error(), bad[i].field);
    em_learner_free(l);
    em_graph_free(m.g);
  }
  /* Off: NONE, AUTO with f32 (zero-initialised options); on: DYNAMIC (the defaults), AUTO with f16. */
  static const struct {
    em_loss_scale_mode mode;
    em_dtype precision;
    int on;
  } modes[] = {{EM_LOSS_SCALE_NONE, EM_F32, 0},    {EM_LOSS_SCALE_AUTO, EM_F32, 0}, {EM_LOSS_SCALE_DYNAMIC, EM_F32, 1},
               {EM_LOSS_SCALE_AUTO, EM_F16, 1},    {EM_LOSS_SCALE_NONE, EM_F16, 0}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    model m;
    ls_build(&m, 0.5);
    em_learner *l = ls_learner(EM_LEARNER_SGD, NULL, (em_var[]){m.w1, m.b1, m.w2, m.w3}, 4, 0);
    em_trainer_options o = {.precision = modes[i].precision, .loss_scaling = {.mode = modes[i].mode}};
    em_trainer *t;
    CHECK(em_trainer_create(m.g, m.loss, -1, &l, 1, &o, &t));
    em_trainer_totals tot = ls_totals(t);
    if (modes[i].on) assert_true(tot.loss_scale == 65536.0);
    else assert_true(isnan(tot.loss_scale));
    assert_int_equal(tot.skipped_steps, 0);
    em_trainer_free(t);
    em_learner_free(l);
    em_graph_free(m.g);
  }
}

/* S = 2^120: every step overflows and is skipped (the model, momentum and Adam's moments bitwise as
 * they were, the learner's steps at 0) and S halves, until the gradients fit; that step equals an
 * unscaled first step bitwise. */
static void overflow_backs_off(em_device dev) {
  const em_learner_kind kinds[] = {EM_LEARNER_SGD, EM_LEARNER_MOMENTUM, EM_LEARNER_ADAM};
  for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
    em_trainer_options o = ls_scaled(dev, 0x1p120, 1000);
    rig r, ref;
    ls_rig_one(&r, kinds[q], 0, &o);
    em_trainer_options plain = {.device = dev, .mode = EM_MODE_PORTABLE};
    ls_rig_one(&ref, kinds[q], 0, &plain);
    snap s0, s;
    ls_snapshot(r.m.g, &s0);
    double expect = 0x1p120;
    int skips = 0;
    for (;;) {
      em_minibatch_result res;
      CHECK(ls_train(r.t, &r.m, 0, 1, &res));
      assert_true(isfinite(res.loss));
      em_trainer_totals tot = ls_totals(r.t);
      assert_int_equal(tot.steps, (uint64_t)skips + 1);
      assert_int_equal(tot.samples, 8 * ((uint64_t)skips + 1)); /* a skipped minibatch counts */
      if (tot.skipped_steps == (uint64_t)skips) break;
      skips++;
      assert_int_equal(tot.skipped_steps, (uint64_t)skips);
      expect *= 0.5;
      if (tot.loss_scale != expect) fail_msg("after skip %d S = %g, %g expected", skips, tot.loss_scale, expect);
      ls_snapshot(r.m.g, &s);
      ls_snap_equal(&s, &s0, "a skipped step");
      assert_int_equal(em_learner_steps(r.l[0]), 0);
      assert_int_equal(em_learner_samples(r.l[0]), 0);
      assert_true(skips < 120);
    }
    /* the sums of squares of gradients of order 1 overflow f32 until S^2 is below about 2^128 */
    if (skips < 40) fail_msg("%s: %d skips from 2^120", em_learner_kind_name(kinds[q]), skips);
    assert_true(ls_totals(r.t).loss_scale == expect); /* no growth: one clean step of 1000 */
    assert_int_equal(em_learner_steps(r.l[0]), 1);
    CHECK(ls_train(ref.t, &ref.m, 0, 1, NULL));
    ls_snapshot(r.m.g, &s);
    assert_memory_not_equal(s.v, s0.v, sizeof(float) * s.n); /* the clean step moved the model */
    ls_snapshot(ref.m.g, &s0);
    ls_snap_equal(&s, &s0, "the first clean step against an unscaled step");
    ls_rig_free(&r);
    ls_rig_free(&ref);
  }
}

static void test_overflow_backs_off(void **state) {
  (void)state;
  overflow_backs_off(em_cpu());
}

/* Growth after exactly growth_interval clean steps; a skip resets the count. S = 2^100 skips, the
 * backoff 2^-60 takes it to 2^40 at once, then interval 2: 2^41 after 2 clean steps, 2^42 after 4. */
static void test_growth(void **state) {
  (void)state;
  em_trainer_options o = ls_scaled(em_cpu(), 0x1p100, 2);
  o.loss_scaling.backoff_factor = 0x1p-60;
  rig r;
  ls_rig_one(&r, EM_LEARNER_ADAM, 0, &o);
  const double want[] = {0x1p40, 0x1p40, 0x1p41, 0x1p41, 0x1p42, 0x1p42, 0x1p43};
  for (int i = 0; i < 7; i++) {
    CHECK(ls_train(r.t, &r.m, i, 1, NULL));
    em_trainer_totals tot = ls_totals(r.t);
    if (tot.loss_scale != want[i]) fail_msg("after step %d S = %g, %g expected", i + 1, tot.loss_scale, want[i]);
    assert_int_equal(tot.skipped_steps, 1);
    assert_int_equal(em_learner_steps(r.l[0]), (uint64_t)i);
  }
  ls_rig_free(&r);
  /* growth_interval 1, growth 2^30, backoff 2^-50 from 2^70: a skip (2^20), clean steps grow S
   * (2^50, 2^80) until it overflows again (gradients of order 1 fit up to S = 2^64): 2^30. */
  o = ls_scaled(em_cpu(), 0x1p70, 1);
  o.loss_scaling.growth_factor = 0x1p30;
  o.loss_scaling.backoff_factor = 0x1p-50;
  ls_rig_one(&r, EM_LEARNER_SGD, 0, &o);
  const double want2[] = {0x1p20, 0x1p50, 0x1p80, 0x1p30, 0x1p60, 0x1p90, 0x1p40};
  const uint64_t skips2[] = {1, 1, 1, 2, 2, 2, 3};
  for (int i = 0; i < 7; i++) {
    CHECK(ls_train(r.t, &r.m, i, 1, NULL));
    em_trainer_totals tot = ls_totals(r.t);
    if (tot.loss_scale != want2[i] || tot.skipped_steps != skips2[i])
      fail_msg("after step %d S = %g (%g expected), %llu skipped (%llu)", i + 1, tot.loss_scale, want2[i],
               (unsigned long long)tot.skipped_steps, (unsigned long long)skips2[i]);
  }
  ls_rig_free(&r);
  /* A skip in the middle of an interval resets the clean count: interval 3 from 1024, two clean
   * steps, then a minibatch whose w3 gradient overflows (x2 of 1e15): 512, and 3 more clean steps
   * (not 1) before it grows back to 1024. */
  o = ls_scaled(em_cpu(), 1024, 3);
  ls_rig_two(&r, 1e-10, &o);
  const double x2[] = {1, 1, 1e15, 1, 1, 1, 1};
  const double want3[] = {1024, 1024, 512, 512, 512, 1024, 1024};
  for (int i = 0; i < 7; i++) {
    CHECK(ls_train(r.t, &r.m, i, x2[i], NULL));
    em_trainer_totals tot = ls_totals(r.t);
    if (tot.loss_scale != want3[i] || tot.skipped_steps != (i >= 2))
      fail_msg("after step %d S = %g (%g expected), %llu skipped", i + 1, tot.loss_scale, want3[i],
               (unsigned long long)tot.skipped_steps);
  }
  assert_int_equal(em_learner_steps(r.l[0]), 6);
  assert_int_equal(em_learner_steps(r.l[1]), 7);
  ls_rig_free(&r);
}

/* A skip that would take S below min_scale fails the step: EM_ERR_NOT_FINITE naming min_scale,
 * nothing counted, the learner (which skipped on the device) untouched. */
static void test_min_scale(void **state) {
  (void)state;
  em_trainer_options o = ls_scaled(em_cpu(), 0x1p120, 10);
  o.loss_scaling.min_scale = 0x1p119;
  rig r;
  ls_rig_one(&r, EM_LEARNER_MOMENTUM, 0, &o);
  snap s0, s;
  ls_snapshot(r.m.g, &s0);
  CHECK(ls_train(r.t, &r.m, 0, 1, NULL)); /* 2^120 skips: 2^119 is still >= min */
  em_trainer_totals before = ls_totals(r.t);
  assert_true(before.loss_scale == 0x1p119);
  em_minibatch_result res = {.samples = 77};
  assert_int_equal(ls_train(r.t, &r.m, 1, 1, &res), EM_ERR_NOT_FINITE);
  const char *msg = em_last_error();
  if (!strstr(msg, "min_scale") || !strstr(msg, "step 2") || !strstr(msg, "learner 0"))
    fail_msg("message: %s", msg);
  assert_int_equal(res.samples, 77);
  em_trainer_totals after = ls_totals(r.t);
  assert_int_equal(after.steps, 1);
  assert_int_equal(after.samples, 8);
  assert_int_equal(after.skipped_steps, 1);
  assert_true(after.loss_scale == 0x1p119);
  assert_true(after.epoch_loss == before.epoch_loss);
  assert_int_equal(em_learner_steps(r.l[0]), 0);
  ls_snapshot(r.m.g, &s);
  ls_snap_equal(&s, &s0, "after the min_scale failure");
  ls_rig_free(&r);

  /* init = min: the first overflow fails at once */
  o = ls_scaled(em_cpu(), 0x1p120, 10);
  o.loss_scaling.min_scale = 0x1p120;
  ls_rig_one(&r, EM_LEARNER_SGD, 0, &o);
  assert_int_equal(ls_train(r.t, &r.m, 0, 1, NULL), EM_ERR_NOT_FINITE);
  assert_int_equal(ls_totals(r.t).steps, 0);
  ls_rig_free(&r);
}

/* With loss scaling a non-finite gradient is a skip, but a non-finite loss is still divergence:
 * EM_ERR_NOT_FINITE naming the loss, nothing counted, S as it was (x2 = inf: the loss is inf; the
 * gradients are not finite either, so the learner skipped on the device and the model is intact). */
static void test_non_finite_loss_is_divergence(void **state) {
  (void)state;
  em_trainer_options o = ls_scaled(em_cpu(), 1024, 2);
  rig r;
  ls_rig_one(&r, EM_LEARNER_ADAM, 0, &o);
  CHECK(ls_train(r.t, &r.m, 0, 1, NULL));
  snap s0, s;
  ls_snapshot(r.m.g, &s0);
  assert_int_equal(ls_train(r.t, &r.m, 1, INFINITY, NULL), EM_ERR_NOT_FINITE);
  if (!strstr(em_last_error(), "step 2: the loss is")) fail_msg("message: %s", em_last_error());
  em_trainer_totals tot = ls_totals(r.t);
  assert_int_equal(tot.steps, 1);
  assert_int_equal(tot.skipped_steps, 0);
  assert_true(tot.loss_scale == 1024);
  assert_int_equal(em_learner_steps(r.l[0]), 1);
  ls_snapshot(r.m.g, &s);
  ls_snap_equal(&s, &s0, "after a step whose loss was inf");
  /* and training goes on: the clean count was not moved by the failed step (growth after step 3) */
  CHECK(ls_train(r.t, &r.m, 2, 1, NULL));
  assert_true(ls_totals(r.t).loss_scale == 2048);
  ls_rig_free(&r);
}

/* A scaled run (S = 1024 growing to 2048, 4096: powers of two) gives bitwise the parameters, the
 * learners' state and the losses of an unscaled run, step by step. */
static void scaled_equals_unscaled(em_device dev) {
  static const struct {
    em_learner_kind kind;
    double clip_norm, clip_value, l2;
    em_larc_policy larc;
  } cases[] = {
      {EM_LEARNER_SGD, 0, 0, 0, 0},          {EM_LEARNER_MOMENTUM, 0, 0, 0, 0},
      {EM_LEARNER_NESTEROV, 0, 0, 0, 0},     {EM_LEARNER_ADAM, 0, 0, 0, 0},
      {EM_LEARNER_SGD, 0.05, 0, 0, 0},       /* clipping by global norm, which clips (norms of about 1) */
      {EM_LEARNER_ADAMW, 0.1, 0.02, 0.01, 0}, /* with clipping by value and L2 too */
      {EM_LEARNER_MOMENTUM, 0, 0, 0, EM_LARC_CLIP},
      {EM_LEARNER_ADAGRAD, 0.3, 0, 0, EM_LARC_SCALE},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    rig r[2];
    for (int k = 0; k < 2; k++) {
      ls_build(&r[k].m, 0.5);
      em_learner_config cfg;
      CHECK(em_learner_defaults(cases[c].kind, 0.02, &cfg));
      cfg.clip_norm = cases[c].clip_norm;
      cfg.clip_value = cases[c].clip_value;
      cfg.l2 = cases[c].l2;
      cfg.larc = cases[c].larc;
      r[k].n_l = 1;
      CHECK(em_learner_create(&cfg, NULL, (em_var[]){r[k].m.w1, r[k].m.b1, r[k].m.w2, r[k].m.w3}, 4, &r[k].l[0]));
      em_trainer_options o = k ? ls_scaled(dev, 1024, 2) : (em_trainer_options){.device = dev, .mode = EM_MODE_PORTABLE};
      CHECK(em_trainer_create(r[k].m.g, r[k].m.loss, -1, r[k].l, 1, &o, &r[k].t));
    }
    for (int i = 0; i < 6; i++) {
      em_minibatch_result res[2];
      for (int k = 0; k < 2; k++) CHECK(ls_train(r[k].t, &r[k].m, i, 1, &res[k]));
      if (memcmp(&res[0].loss, &res[1].loss, sizeof(double)))
        fail_msg("case %zu step %d: loss %.17g scaled, %.17g unscaled", c, i, res[1].loss, res[0].loss);
      snap s0, s1;
      ls_snapshot(r[0].m.g, &s0);
      ls_snapshot(r[1].m.g, &s1);
      char what[96];
      snprintf(what, sizeof what, "case %zu (%s) step %d, scaled against unscaled", c,
               em_learner_kind_name(cases[c].kind), i + 1);
      ls_snap_equal(&s1, &s0, what);
    }
    em_trainer_totals tot = ls_totals(r[1].t);
    assert_true(tot.loss_scale == 8192); /* 1024 * 2^3: grown after steps 2, 4, 6 */
    assert_int_equal(tot.skipped_steps, 0);
    assert_true(isnan(ls_totals(r[0].t).loss_scale));
    for (int k = 0; k < 2; k++) ls_rig_free(&r[k]);
  }
}

static void test_scaled_equals_unscaled(void **state) {
  (void)state;
  scaled_equals_unscaled(em_cpu());
}

/* Two learners, only "a" (over w3, whose gradient is 1e10 times larger) overflows at S = 2^50: "a"
 * skips (w3 and its momentum unchanged, its steps at 0), "b" steps; S halves. At 2^20 both step. */
static void two_learners(em_device dev, snap *out) {
  em_trainer_options o = ls_scaled(dev, 0x1p50, 1000);
  o.loss_scaling.backoff_factor = 0x1p-30;
  rig r;
  ls_rig_two(&r, 1e-10, &o);
  snap s0, s;
  ls_snapshot(r.m.g, &s0);
  em_minibatch_result res;
  CHECK(ls_train(r.t, &r.m, 0, 1e10, &res));
  assert_true(isfinite(res.loss));
  em_trainer_totals tot = ls_totals(r.t);
  assert_int_equal(tot.skipped_steps, 1);
  assert_true(tot.loss_scale == 0x1p20);
  assert_int_equal(em_learner_steps(r.l[0]), 0);
  assert_int_equal(em_learner_steps(r.l[1]), 1);
  ls_snapshot(r.m.g, &s);
  /* Creation order: parameters w1 (20), b1 (5), w2 (5), w3 (2), then states: w3.a.b (2), then
   * w1, b1, w2's adam m and v. */
  assert_int_equal(s.n, 32 + 2 + 2 * 30);
  assert_memory_equal(&s.v[30], &s0.v[30], sizeof(float) * 4);     /* w3 and its momentum */
  assert_memory_not_equal(&s.v[0], &s0.v[0], sizeof(float) * 30);  /* w1, b1, w2 moved */
  assert_memory_not_equal(&s.v[34], &s0.v[34], sizeof(float) * 60); /* adam's moments too */
  CHECK(ls_train(r.t, &r.m, 1, 1e10, NULL));
  tot = ls_totals(r.t);
  assert_int_equal(tot.skipped_steps, 1);
  assert_int_equal(em_learner_steps(r.l[0]), 1);
  assert_int_equal(em_learner_steps(r.l[1]), 2);
  ls_snapshot(r.m.g, out);
  assert_memory_not_equal(&out->v[30], &s0.v[30], sizeof(float) * 4);
  ls_rig_free(&r);
}

static void test_two_learners_one_skips(void **state) {
  (void)state;
  snap s;
  two_learners(em_cpu(), &s);
}

/* Saving mid-run (after a skip, between growths) and resuming continues bitwise: parameters, state,
 * S, its clean count (the next growth comes at the same step) and the skip count. */
static void resume(em_device dev, const char *path, snap *out) {
  em_trainer_options o = ls_scaled(dev, 0x1p100, 3);
  o.loss_scaling.backoff_factor = 0x1p-60;
  rig a, b;
  ls_rig_two(&a, 0.5, &o);
  for (int i = 0; i < 5; i++) CHECK(ls_train(a.t, &a.m, i, 1, NULL)); /* skip, then 4 clean: S 2^40, 2^41 */
  assert_true(ls_totals(a.t).loss_scale == 0x1p41);
  CHECK(em_trainer_save_checkpoint(a.t, path, NULL, NULL, 0));
  ls_rig_two(&b, 0.5, &o);
  CHECK(em_trainer_restore_checkpoint(b.t, path, NULL));
  em_trainer_totals ta = ls_totals(a.t), tb = ls_totals(b.t);
  assert_true(tb.loss_scale == ta.loss_scale);
  assert_int_equal(tb.skipped_steps, 1);
  assert_int_equal(tb.steps, 5);
  for (int i = 5; i < 10; i++) {
    CHECK(ls_train(a.t, &a.m, i, 1, NULL));
    CHECK(ls_train(b.t, &b.m, i, 1, NULL));
    ta = ls_totals(a.t);
    tb = ls_totals(b.t);
    if (ta.loss_scale != tb.loss_scale) fail_msg("step %d: S %g resumed, %g", i + 1, tb.loss_scale, ta.loss_scale);
    snap sa, sb;
    ls_snapshot(a.m.g, &sa);
    ls_snapshot(b.m.g, &sb);
    ls_snap_equal(&sb, &sa, "the resumed run");
  }
  assert_true(ta.loss_scale == 0x1p43); /* grown at steps 7 and 10 (clean 2 of 3 was saved) */
  assert_true(ta.epoch_loss == tb.epoch_loss);
  ls_snapshot(a.m.g, out);
  ls_rig_free(&b);

  /* Into a trainer without loss scaling: refused, nothing changed. */
  em_trainer_options plain = {.device = dev, .mode = EM_MODE_PORTABLE};
  rig c;
  ls_rig_two(&c, 0.5, &plain);
  snap s0, s1;
  ls_snapshot(c.m.g, &s0);
  assert_int_equal(em_trainer_restore_checkpoint(c.t, path, NULL), EM_ERR_CORRUPT);
  if (!strstr(em_last_error(), "loss scaling")) fail_msg("message: %s", em_last_error());
  ls_snapshot(c.m.g, &s1);
  ls_snap_equal(&s1, &s0, "a refused restore");
  assert_int_equal(ls_totals(c.t).steps, 0);
  /* A checkpoint without loss scaling into a trainer with it: S starts fresh (init_scale). */
  CHECK(ls_train(c.t, &c.m, 0, 1, NULL));
  CHECK(em_trainer_save_checkpoint(c.t, path, NULL, NULL, 0));
  CHECK(em_trainer_restore_checkpoint(a.t, path, NULL));
  em_trainer_totals t2 = ls_totals(a.t);
  assert_int_equal(t2.steps, 1);
  assert_true(t2.loss_scale == 0x1p100);
  assert_int_equal(t2.skipped_steps, 0);
  ls_rig_free(&c);
  ls_rig_free(&a);
  unlink(path);
}

static void test_checkpoint_resume(void **state) {
  (void)state;
  char path[] = "/tmp/test_loss_scaling_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  snap s;
  resume(em_cpu(), path, &s);
}

/* The libcuda double in portable mode: every scenario above gives the CPU's bits. */
static void test_gpu_equals_cpu(void **state) {
  (void)state;
  if (!g_gpus) {
    print_message("no CUDA driver, real or test double: skipped\n");
    skip();
  }
  overflow_backs_off(em_cuda(0));
  scaled_equals_unscaled(em_cuda(0));
  snap c, g;
  two_learners(em_cpu(), &c);
  two_learners(em_cuda(0), &g);
  ls_snap_equal(&g, &c, "two learners, the GPU against the CPU");
  char path[] = "/tmp/test_loss_scaling_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  resume(em_cpu(), path, &c);
  resume(em_cuda(0), path, &g);
  ls_snap_equal(&g, &c, "resumed, the GPU against the CPU");
  assert_true(ts_double_calls("cuLaunchKernel") != 0); /* the steps ran on the double (-1: a real driver) */
}

int main(void) {
  g_gpus = ts_use_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_overflow_backs_off),
      cmocka_unit_test(test_growth),
      cmocka_unit_test(test_min_scale),
      cmocka_unit_test(test_non_finite_loss_is_divergence),
      cmocka_unit_test(test_scaled_equals_unscaled),
      cmocka_unit_test(test_two_learners_one_skips),
      cmocka_unit_test(test_checkpoint_resume),
      cmocka_unit_test(test_gpu_equals_cpu),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
