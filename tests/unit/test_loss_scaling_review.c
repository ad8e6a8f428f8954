/* A reviewer's tests of dynamic loss scaling (trainer.h em_loss_scaling,
 * training/trainer_scaling.c, the skip flags of ops/learner.c), beside
 * test_loss_scaling.c: what it did not cover.
 *  - every learner kind, with L1, L2, decoupled weight decay, clipping by
 *    value and a warmup schedule: a skipped step leaves the parameters,
 *    every slot and the learner's host record (steps, samples, fsadagrad's
 *    smoothed count) bitwise as they were, and the next clean step equals
 *    an unscaled run that never saw the skipped minibatch; CPU and the GPU
 *    double, bitwise equal;
 *  - scales too small for f32: init_scale / min_scale below FLT_MIN, and a
 *    trainer record whose S was edited (0, negative, NaN, inf, above
 *    FLT_MAX, below FLT_MIN) are refused, never trained with;
 *  - growth stops at FLT_MAX's power of two; growth_interval 1 with
 *    min_scale == init_scale;
 *  - a checkpoint written in the middle of a streak of skips resumes
 *    bitwise (S, clean count, skips, the next skip at the same step);
 *  - an f64 loss with scaling equals the unscaled run bitwise;
 *  - a graph already holding "trainer.loss_scale" of another shape is
 *    refused by name; two scaled trainers over one graph keep their own S.
 * Expected values come from unscaled runs and plain arithmetic, never from
 * the scaling code. */
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

static em_learner *full_learner(em_learner_kind kind, const char *name, const em_var *params, int n) {
  em_learner_config cfg;
  CHECK(em_learner_defaults(kind, 0.01, &cfg));
  cfg.l1 = 1e-3;
  cfg.l2 = 2e-3;
  cfg.weight_decay = 0.05; /* decoupled: must not shrink a skipped learner's parameters */
  cfg.clip_value = 0.5;
  cfg.lr.warmup_samples = 64; /* the rate grows with the learner's samples: a skip must not move it */
  em_learner *l;
  CHECK(em_learner_create(&cfg, name, params, n, &l));
  return l;
}

static void learner_record(const em_learner *l, unsigned char *out, size_t *n) {
  void *b;
  size_t sz;
  CHECK(em_learner_state_save(l, &b, &sz));
  assert_true(sz <= 64);
  memcpy(out, b, sz);
  *n = sz;
  free(b);
}

/* S = 2^40 clean, grows (interval 1, factor 2^40) to 2^80 where the gradients' sums of squares
 * overflow: minibatch 1 is skipped, S backs off to 2^40 and minibatch 2 is clean. The reference is an
 * unscaled run over minibatches 0 and 2 only. */
static void every_kind_skip(em_device dev, em_learner_kind kind, snap *out) {
  em_trainer_options o = ls_scaled(dev, 0x1p40, 1);
  o.loss_scaling.growth_factor = 0x1p40;
  o.loss_scaling.backoff_factor = 0x1p-40;
  rig r, ref;
  const em_trainer_options plain = {.device = dev, .mode = EM_MODE_PORTABLE};
  rig *rs[2] = {&r, &ref};
  const em_trainer_options *os[2] = {&o, &plain};
  for (int k = 0; k < 2; k++) {
    ls_build(&rs[k]->m, 0.5);
    rs[k]->n_l = 1;
    rs[k]->l[0] = full_learner(kind, NULL, (em_var[]){rs[k]->m.w1, rs[k]->m.b1, rs[k]->m.w2, rs[k]->m.w3}, 4);
    CHECK(em_trainer_create(rs[k]->m.g, rs[k]->m.loss, -1, rs[k]->l, 1, os[k], &rs[k]->t));
  }
  const char *kn = em_learner_kind_name(kind);
  CHECK(ls_train(r.t, &r.m, 0, 1, NULL));
  CHECK(ls_train(ref.t, &ref.m, 0, 1, NULL));
  assert_true(ls_totals(r.t).loss_scale == 0x1p80);
  assert_int_equal(ls_totals(r.t).skipped_steps, 0);
  snap s0, s1;
  unsigned char rec0[64], rec1[64];
  size_t n0, n1;
  ls_snapshot(r.m.g, &s0);
  learner_record(r.l[0], rec0, &n0);
  em_minibatch_result res;
  CHECK(ls_train(r.t, &r.m, 1, 1, &res));
  assert_true(isfinite(res.loss));
  em_trainer_totals tot = ls_totals(r.t);
  if (tot.skipped_steps != 1 || tot.loss_scale != 0x1p40)
    fail_msg("%s: step 2 at S = 2^80 did not skip (%llu skips, S %g)", kn, (unsigned long long)tot.skipped_steps,
             tot.loss_scale);
  assert_int_equal(tot.steps, 2);
  assert_int_equal(tot.samples, 16);
  ls_snapshot(r.m.g, &s1);
  char what[96];
  snprintf(what, sizeof what, "%s: a skipped step (parameters and every slot)", kn);
  ls_snap_equal(&s1, &s0, what);
  learner_record(r.l[0], rec1, &n1);
  assert_int_equal(n0, n1);
  if (memcmp(rec0, rec1, n0)) fail_msg("%s: the learner's host record moved on a skipped step", kn);
  assert_int_equal(em_learner_steps(r.l[0]), 1);
  assert_int_equal(em_learner_samples(r.l[0]), 8);
  /* the next clean step is the unscaled run's second step */
  CHECK(ls_train(r.t, &r.m, 2, 1, NULL));
  CHECK(ls_train(ref.t, &ref.m, 2, 1, NULL));
  ls_snapshot(r.m.g, &s0);
  ls_snapshot(ref.m.g, &s1);
  snprintf(what, sizeof what, "%s: after the skip, against an unscaled run without that minibatch", kn);
  ls_snap_equal(&s0, &s1, what);
  learner_record(r.l[0], rec0, &n0);
  learner_record(ref.l[0], rec1, &n1);
  if (n0 != n1 || memcmp(rec0, rec1, n0)) fail_msg("%s: the learner's host record differs from the unscaled run's", kn);
  *out = s0;
  ls_rig_free(&r);
  ls_rig_free(&ref);
}

static const em_learner_kind all_kinds[] = {EM_LEARNER_SGD,      EM_LEARNER_MOMENTUM, EM_LEARNER_NESTEROV,
                                            EM_LEARNER_ADAGRAD,  EM_LEARNER_RMSPROP,  EM_LEARNER_ADADELTA,
                                            EM_LEARNER_ADAM,     EM_LEARNER_ADAMW,    EM_LEARNER_FSADAGRAD};

static void test_every_kind_skips_bitwise(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof all_kinds / sizeof all_kinds[0]; i++) {
    snap c;
    every_kind_skip(em_cpu(), all_kinds[i], &c);
    if (g_gpus) {
      snap g;
      every_kind_skip(em_cuda(0), all_kinds[i], &g);
      ls_snap_equal(&g, &c, em_learner_kind_name(all_kinds[i]));
    }
  }
  if (g_gpus) assert_true(ts_double_calls("cuLaunchKernel") != 0); /* the GPU runs were on a device */
  else print_message("no CUDA driver, real or test double: the CPU only\n");
}

/* LARC (clip and scale) with clipping by global norm: a skip leaves everything, and the run equals
 * the unscaled one over the minibatches that were not skipped. */
static void test_larc_skip(void **state) {
  (void)state;
  const em_larc_policy pol[] = {EM_LARC_CLIP, EM_LARC_SCALE};
  for (int p = 0; p < 2; p++) {
    em_trainer_options o = ls_scaled(em_cpu(), 0x1p40, 1);
    o.loss_scaling.growth_factor = 0x1p40;
    o.loss_scaling.backoff_factor = 0x1p-40;
    const em_trainer_options plain = {.device = em_cpu(), .mode = EM_MODE_PORTABLE};
    rig r[2];
    for (int k = 0; k < 2; k++) {
      ls_build(&r[k].m, 0.5);
      r[k].n_l = 1;
      r[k].l[0] = ls_learner(EM_LEARNER_MOMENTUM, NULL, (em_var[]){r[k].m.w1, r[k].m.b1, r[k].m.w2, r[k].m.w3}, 4, 0.1);
      CHECK(em_learner_larc(r[k].l[0], pol[p], 0.01));
      CHECK(em_trainer_create(r[k].m.g, r[k].m.loss, -1, r[k].l, 1, k ? &plain : &o, &r[k].t));
    }
    snap a, b;
    CHECK(ls_train(r[0].t, &r[0].m, 0, 1, NULL));
    ls_snapshot(r[0].m.g, &a);
    CHECK(ls_train(r[0].t, &r[0].m, 1, 1, NULL)); /* skipped */
    assert_int_equal(ls_totals(r[0].t).skipped_steps, 1);
    ls_snapshot(r[0].m.g, &b);
    ls_snap_equal(&b, &a, "LARC: a skipped step");
    CHECK(ls_train(r[0].t, &r[0].m, 2, 1, NULL));
    CHECK(ls_train(r[1].t, &r[1].m, 0, 1, NULL));
    CHECK(ls_train(r[1].t, &r[1].m, 2, 1, NULL));
    ls_snapshot(r[0].m.g, &a);
    ls_snapshot(r[1].m.g, &b);
    ls_snap_equal(&a, &b, "LARC: scaled with a skip against unscaled");
    for (int k = 0; k < 2; k++) ls_rig_free(&r[k]);
  }
}

/* S must be representable in f32 together with 1 / S: a scale below FLT_MIN rounds to a subnormal
 * or 0 when fed, 1 / S to inf, and the unscale multiplier inf turns every zero gradient into NaN. */
static void test_tiny_scales_refused(void **state) {
  (void)state;
  const struct {
    double init, min;
    const char *field;
  } bad[] = {{0x1p-140, 0x1p-140, "init_scale"}, {0x1p-127, 0x1p-127, "init_scale"}, {1, 0x1p-200, "min_scale"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    model m;
    ls_build(&m, 0.5);
    em_learner *l = ls_learner(EM_LEARNER_SGD, NULL, (em_var[]){m.w1, m.b1, m.w2, m.w3}, 4, 0);
    em_trainer_options o = ls_scaled(em_cpu(), bad[i].init, 10);
    o.loss_scaling.min_scale = bad[i].min;
    em_trainer *t = NULL;
    em_status s = em_trainer_create(m.g, m.loss, -1, &l, 1, &o, &t);
    if (s == EM_OK) {
      /* accepted: then training must not poison the model */
      em_status st = ls_train(t, &m, 0, 1, NULL);
      snap sn;
      ls_snapshot(m.g, &sn);
      for (size_t j = 0; j < sn.n; j++)
        if (!isfinite(sn.v[j]))
          fail_msg("case %zu: init_scale %g, min_scale %g accepted and one step (status %d) made value %zu %g", i,
                   bad[i].init, bad[i].min, (int)st, j, sn.v[j]);
      fail_msg("case %zu: init_scale %g, min_scale %g accepted", i, bad[i].init, bad[i].min);
    }
    assert_int_equal(s, EM_ERR_INVALID_ARGUMENT);
    if (!strstr(em_last_error(), bad[i].field)) fail_msg("case %zu: '%s' lacks '%s'", i, em_last_error(), bad[i].field);
    em_learner_free(l);
    em_graph_free(m.g);
  }
  /* the smallest allowed: FLT_MIN as both */
  rig r;
  em_trainer_options o = ls_scaled(em_cpu(), FLT_MIN, 10);
  o.loss_scaling.min_scale = FLT_MIN;
  ls_rig_one(&r, EM_LEARNER_SGD, 0, &o);
  CHECK(ls_train(r.t, &r.m, 0, 1, NULL));
  snap sn;
  ls_snapshot(r.m.g, &sn);
  for (size_t j = 0; j < sn.n; j++) assert_true(isfinite(sn.v[j]));
  ls_rig_free(&r);
}

/* A version-2 trainer record (trainer_state.c) whose S was edited: refused (EM_ERR_CORRUPT naming the
 * loss scale), the trainer unchanged and still training. */
static void test_edited_scale_refused(void **state) {
  (void)state;
  rig r;
  em_trainer_options o = ls_scaled(em_cpu(), 1024, 3);
  ls_rig_one(&r, EM_LEARNER_ADAM, 0, &o);
  CHECK(ls_train(r.t, &r.m, 0, 1, NULL));
  void *b;
  size_t n;
  CHECK(em_trainer_state_save(r.t, &b, &n));
  /* the record: 16 bytes of header, a version-1 body of 105 bytes, then f64 S */
  assert_int_equal(n, 16 + 105 + 24);
  double s_saved;
  memcpy(&s_saved, (unsigned char *)b + 16 + 105, 8); /* little-endian hosts only */
  assert_true(s_saved == 1024);
  const double bad[] = {0, -0.0, -1024, NAN, INFINITY, -INFINITY, 1e39, 0x1p-140, 0x1p-127, 4.9e-324};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned char *e = malloc(n);
    memcpy(e, b, n);
    memcpy(e + 16 + 105, &bad[i], 8);
    em_status s = em_trainer_state_load(r.t, e, n);
    free(e);
    if (s != EM_ERR_CORRUPT) fail_msg("S = %g: loaded (status %d)", bad[i], (int)s);
    if (!strstr(em_last_error(), "loss scale")) fail_msg("S = %g: message '%s'", bad[i], em_last_error());
    assert_true(ls_totals(r.t).loss_scale == 1024);
    assert_int_equal(ls_totals(r.t).steps, 1);
  }
  free(b);
  CHECK(ls_train(r.t, &r.m, 1, 1, NULL));
  ls_rig_free(&r);
}

/* Growth stops at the largest power of two f32 holds (2^127: 2^128 is above FLT_MAX), and a
 * non-power-of-two growth stops below FLT_MAX; with zero gradients every step is clean. */
static void test_growth_cap(void **state) {
  (void)state;
  const struct {
    double init, growth, last;
  } cases[] = {{0x1p120, 2, 0x1p127}, {(double)FLT_MAX / 2, 3, (double)FLT_MAX / 2}, {0x1p127, 0x1p100, 0x1p127}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    em_graph *g;
    em_var x, tv, w, y, loss;
    CHECK(em_graph_create(&g));
    CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 1}, &x));
    CHECK(em_input(g, "t", EM_F32, 2, (int64_t[]){-1, 1}, &tv));
    ls_param(g, "w", 2, (int64_t[]){1, 1}, 0.5, 3, &w);
    em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
    CHECK(em_apply(g, "matmul", (em_var[]){x, w}, 2, &tb, 1, &y, 1));
    CHECK(em_apply(g, "squared_error", (em_var[]){y, tv}, 2, NULL, 0, &loss, 1));
    em_learner *l = ls_learner(EM_LEARNER_ADAM, NULL, &w, 1, 0);
    em_trainer_options o = ls_scaled(em_cpu(), cases[c].init, 1);
    o.loss_scaling.growth_factor = cases[c].growth;
    o.loss_scaling.min_scale = cases[c].init;
    em_trainer *t;
    CHECK(em_trainer_create(g, loss, -1, &l, 1, &o, &t));
    float zeros[4] = {0};
    em_tensor *xt, *tt;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){4, 1}, zeros, sizeof zeros, &xt));
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){4, 1}, zeros, sizeof zeros, &tt));
    em_feed f[2] = {{x, xt}, {tv, tt}};
    for (int i = 0; i < 12; i++) {
      em_minibatch_result res;
      CHECK(em_trainer_train_minibatch(t, f, 2, &res));
      assert_true(res.loss == 0);
      em_trainer_totals tot = ls_totals(t);
      if (!(tot.loss_scale <= FLT_MAX) || tot.skipped_steps)
        fail_msg("case %zu step %d: S = %g (FLT_MAX %g), %llu skips", c, i + 1, tot.loss_scale, (double)FLT_MAX,
                 (unsigned long long)tot.skipped_steps);
    }
    if (ls_totals(t).loss_scale != cases[c].last)
      fail_msg("case %zu: S = %.17g, %.17g expected", c, ls_totals(t).loss_scale, cases[c].last);
    assert_int_equal(em_learner_steps(l), 12);
    em_tensor_release(xt);
    em_tensor_release(tt);
    em_trainer_free(t);
    em_learner_free(l);
    em_graph_free(g);
  }
}

/* growth_interval 1 and min_scale == init_scale: clean steps grow S each step; a skip fails only when
 * it would take S below the minimum. From 2^10 (= min): 2^11, 2^12 clean (x2 1), then minibatches
 * whose w3 gradient overflows (x2 1e15): 2^11, 2^10 (skips of learner "a", counted), then the
 * failure (2^9 < min), nothing counted. */
static void test_interval_one_min_equal_init(void **state) {
  (void)state;
  em_trainer_options o = ls_scaled(em_cpu(), 0x1p10, 1);
  o.loss_scaling.min_scale = 0x1p10;
  rig r;
  ls_rig_two(&r, 1e-10, &o);
  const double x2[] = {1, 1, 1e15, 1e15};
  const double want[] = {0x1p11, 0x1p12, 0x1p11, 0x1p10};
  for (int i = 0; i < 4; i++) {
    CHECK(ls_train(r.t, &r.m, i, x2[i], NULL));
    em_trainer_totals tot = ls_totals(r.t);
    if (tot.loss_scale != want[i]) fail_msg("step %d: S = %g, %g expected", i + 1, tot.loss_scale, want[i]);
  }
  assert_int_equal(ls_totals(r.t).skipped_steps, 2);
  assert_int_equal(em_learner_steps(r.l[0]), 2); /* "a" (w3) skipped twice */
  assert_int_equal(em_learner_steps(r.l[1]), 4);
  assert_int_equal(ls_train(r.t, &r.m, 4, 1e15, NULL), EM_ERR_NOT_FINITE);
  em_trainer_totals tot = ls_totals(r.t);
  assert_int_equal(tot.steps, 4);
  assert_true(tot.loss_scale == 0x1p10);
  assert_int_equal(tot.skipped_steps, 2);
  assert_int_equal(em_learner_steps(r.l[1]), 4); /* nothing counted, also for the learner that stepped */
  ls_rig_free(&r);
}

/* A checkpoint written in the middle of a streak of skips (S = 2^120: about 60 skips before the
 * gradients fit) resumes bitwise: the same number of skips still to come, the first clean step at the
 * same step, the same model. */
static void mid_streak(em_device dev, snap *out) {
  char path[] = "/tmp/test_loss_scaling_review_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  em_trainer_options o = ls_scaled(dev, 0x1p120, 4);
  rig a, b;
  ls_rig_one(&a, EM_LEARNER_ADAMW, 0, &o);
  for (int i = 0; i < 5; i++) CHECK(ls_train(a.t, &a.m, i, 1, NULL));
  assert_int_equal(ls_totals(a.t).skipped_steps, 5);
  assert_true(ls_totals(a.t).loss_scale == 0x1p115);
  CHECK(em_trainer_save_checkpoint(a.t, path, NULL, NULL, 0));
  ls_rig_one(&b, EM_LEARNER_ADAMW, 0, &o);
  CHECK(em_trainer_restore_checkpoint(b.t, path, NULL));
  unlink(path);
  int clean_at = -1;
  for (int i = 5; i < 80; i++) {
    CHECK(ls_train(a.t, &a.m, i, 1, NULL));
    CHECK(ls_train(b.t, &b.m, i, 1, NULL));
    em_trainer_totals ta = ls_totals(a.t), tb = ls_totals(b.t);
    if (ta.loss_scale != tb.loss_scale || ta.skipped_steps != tb.skipped_steps || ta.steps != tb.steps)
      fail_msg("step %d: resumed S %g skips %llu, running S %g skips %llu", i + 1, tb.loss_scale,
               (unsigned long long)tb.skipped_steps, ta.loss_scale, (unsigned long long)ta.skipped_steps);
    if (clean_at < 0 && ta.skipped_steps == (uint64_t)i) clean_at = i;
    assert_int_equal(em_learner_steps(a.l[0]), em_learner_steps(b.l[0]));
    snap sa, sb;
    ls_snapshot(a.m.g, &sa);
    ls_snapshot(b.m.g, &sb);
    ls_snap_equal(&sb, &sa, "resumed mid-streak");
  }
  assert_true(clean_at > 5);
  assert_int_equal(em_learner_steps(a.l[0]), 80 - ls_totals(a.t).skipped_steps); /* skips after growths too */
  ls_snapshot(a.m.g, out);
  ls_rig_free(&a);
  ls_rig_free(&b);
}

static void test_checkpoint_mid_streak(void **state) {
  (void)state;
  snap c, g;
  mid_streak(em_cpu(), &c);
  if (g_gpus) {
    mid_streak(em_cuda(0), &g);
    ls_snap_equal(&g, &c, "mid-streak resume, the GPU against the CPU");
  }
}

/* An f64 loss (the model's f32 output cast to f64): S is an f64 input then; the run equals the
 * unscaled one bitwise, and an overflowing step still skips. */
static void test_f64_loss(void **state) {
  (void)state;
  rig r[2];
  for (int k = 0; k < 2; k++) {
    ls_build(&r[k].m, 0.5);
    em_attr to = {.name = "to", .type = EM_ATTR_INT, .i = EM_F64};
    em_var l64;
    CHECK(em_apply(r[k].m.g, "cast", &r[k].m.loss, 1, &to, 1, &l64, 1));
    r[k].m.loss = l64;
    r[k].n_l = 1;
    r[k].l[0] = ls_learner(EM_LEARNER_ADAM, NULL, (em_var[]){r[k].m.w1, r[k].m.b1, r[k].m.w2, r[k].m.w3}, 4, 0);
    em_trainer_options o = k ? ls_scaled(em_cpu(), 0x1p20, 2) : (em_trainer_options){.mode = EM_MODE_PORTABLE};
    CHECK(em_trainer_create(r[k].m.g, r[k].m.loss, -1, r[k].l, 1, &o, &r[k].t));
  }
  em_var sv;
  CHECK(em_graph_lookup(r[1].m.g, "trainer.loss_scale", &sv));
  em_dtype dt;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  CHECK(em_var_info(r[1].m.g, sv, &dt, &nd, shape));
  assert_int_equal(dt, EM_F64);
  for (int i = 0; i < 6; i++) {
    em_minibatch_result res[2];
    for (int k = 0; k < 2; k++) CHECK(ls_train(r[k].t, &r[k].m, i, 1, &res[k]));
    if (memcmp(&res[0].loss, &res[1].loss, sizeof(double)))
      fail_msg("step %d: loss %.17g scaled, %.17g unscaled", i + 1, res[1].loss, res[0].loss);
    snap a, b;
    ls_snapshot(r[0].m.g, &a);
    ls_snapshot(r[1].m.g, &b);
    ls_snap_equal(&b, &a, "f64 loss, scaled against unscaled");
  }
  assert_true(ls_totals(r[1].t).loss_scale == 0x1p23);
  for (int k = 0; k < 2; k++) ls_rig_free(&r[k]);
}

/* A graph already holding "trainer.loss_scale" that is not an f32 scalar: refused by name. A
 * parameter of that name with the right shape: not an input the trainer may feed, refused too
 * (feeding it would overwrite a parameter, or be refused at every step). */
static void test_foreign_scale_value(void **state) {
  (void)state;
  for (int c = 0; c < 3; c++) {
    model m;
    ls_build(&m, 0.5);
    em_var v;
    if (c == 0) CHECK(em_input(m.g, "trainer.loss_scale", EM_F32, 1, (int64_t[]){1}, &v));
    else if (c == 1) CHECK(em_input(m.g, "trainer.loss_scale", EM_F64, 0, NULL, &v));
    else ls_param(m.g, "trainer.loss_scale", 0, NULL, 0.5, 9, &v);
    em_learner *l = ls_learner(EM_LEARNER_SGD, NULL, (em_var[]){m.w1, m.b1, m.w2, m.w3}, 4, 0);
    em_trainer_options o = ls_scaled(em_cpu(), 1024, 10);
    em_trainer *t = NULL;
    em_status s = em_trainer_create(m.g, m.loss, -1, &l, 1, &o, &t);
    if (c < 2 || s != EM_OK) {
      if (s != EM_ERR_INVALID_ARGUMENT) fail_msg("case %d: status %d", c, (int)s);
      if (!strstr(em_last_error(), "trainer.loss_scale")) fail_msg("case %d: message '%s'", c, em_last_error());
    } else {
      /* accepted: it must then train like a trainer whose S is its own, and leave that parameter be */
      em_tensor *before, *after;
      CHECK(em_parameter_get(m.g, v, em_cpu(), &before));
      em_status st = ls_train(t, &m, 0, 1, NULL);
      CHECK(em_parameter_get(m.g, v, em_cpu(), &after));
      float fb, fa;
      CHECK(em_tensor_to_host(before, &fb, 4));
      CHECK(em_tensor_to_host(after, &fa, 4));
      em_tensor_release(before);
      em_tensor_release(after);
      if (st) fail_msg("a parameter named trainer.loss_scale: accepted at creation, then a step fails: %s", em_last_error());
      if (fa != fb) fail_msg("a parameter named trainer.loss_scale: the step overwrote it (%g, was %g)", fa, fb);
    }
    if (c < 2 || s != EM_OK) assert_null(t);
    em_trainer_free(t);
    em_learner_free(l);
    em_graph_free(m.g);
  }
}

/* Two scaled trainers over one graph (two learners of different names over the same parameters):
 * each feeds its own S; one's skips do not move the other's S. */
static void test_two_trainers_one_graph(void **state) {
  (void)state;
  model m;
  ls_build(&m, 1e-10);
  const em_var ps[4] = {m.w1, m.b1, m.w2, m.w3};
  em_learner *la = ls_learner(EM_LEARNER_SGD, "first", ps, 4, 0);
  em_learner *lb = ls_learner(EM_LEARNER_SGD, "second", ps, 4, 0);
  em_trainer_options oa = ls_scaled(em_cpu(), 0x1p10, 1000), ob = ls_scaled(em_cpu(), 0x1p30, 1000);
  em_trainer *ta, *tb;
  CHECK(em_trainer_create(m.g, m.loss, -1, &la, 1, &oa, &ta));
  CHECK(em_trainer_create(m.g, m.loss, -1, &lb, 1, &ob, &tb));
  /* x2 1e10 with w3 1e-10: w3's gradient is about 1e10; its square times S^2 overflows at 2^30
   * (1e20 * 2^60 = 1e38 ... 1e20 * 1.2e18 = 1.2e38 < FLT_MAX: use 1e12) */
  CHECK(ls_train(tb, &m, 0, 1e12, NULL));
  CHECK(ls_train(ta, &m, 0, 1e12, NULL));
  em_trainer_totals a = ls_totals(ta), b = ls_totals(tb);
  if (a.skipped_steps != 0 || a.loss_scale != 0x1p10)
    fail_msg("trainer a: %llu skips, S %g (expected 0, 2^10)", (unsigned long long)a.skipped_steps, a.loss_scale);
  if (b.skipped_steps != 1 || b.loss_scale != 0x1p29)
    fail_msg("trainer b: %llu skips, S %g (expected 1, 2^29)", (unsigned long long)b.skipped_steps, b.loss_scale);
  assert_int_equal(em_learner_steps(la), 1);
  assert_int_equal(em_learner_steps(lb), 0);
  em_trainer_free(ta);
  em_trainer_free(tb);
  em_learner_free(la);
  em_learner_free(lb);
  em_graph_free(m.g);
}

/* em_trainer_fit while steps skip (S cycles: 2^70 skips, 2^20 grows by 2^30 each clean step until it
 * overflows again): every minibatch is reported and counted, epochs end on time, the validation and
 * the checkpoint per epoch happen, and the checkpoint restores S, the clean count and the skips. */
typedef struct fit_log {
  int minibatch_calls, epoch_calls;
  uint64_t last_mb;
  int bad_order;
} fit_log;

static int on_mb(const em_train_report *r, void *user) {
  fit_log *f = user;
  if (r->minibatch != f->last_mb + 1) f->bad_order++;
  f->last_mb = r->minibatch;
  f->minibatch_calls++;
  return 0;
}

static int on_epoch(const em_train_report *r, void *user) {
  fit_log *f = user;
  if (r->minibatch != 8 || !isfinite(r->val_loss) || !isfinite(r->loss)) f->bad_order++;
  f->last_mb = 0;
  f->epoch_calls++;
  return 0;
}

static void test_fit_with_skips(void **state) {
  (void)state;
  char path[] = "/tmp/test_loss_scaling_review_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  enum { N = 64 };
  float x[N * 4], x2[N * 2], tt[N];
  uint64_t sd = 77;
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < 4; j++) x[4 * i + j] = ls_uniform(&sd);
    for (int j = 0; j < 2; j++) x2[2 * i + j] = ls_uniform(&sd);
    tt[i] = ls_uniform(&sd);
  }
  em_dataset *d;
  CHECK(em_dataset_create(&d));
  em_stream_desc dx = {.name = "x", .dtype = EM_F32, .ndim = 1, .shape = {4}};
  em_stream_desc dx2 = {.name = "x2", .dtype = EM_F32, .ndim = 1, .shape = {2}};
  em_stream_desc dt = {.name = "t", .dtype = EM_F32, .ndim = 1, .shape = {1}};
  CHECK(em_dataset_add_stream(d, &dx, N, x, sizeof x));
  CHECK(em_dataset_add_stream(d, &dx2, N, x2, sizeof x2));
  CHECK(em_dataset_add_stream(d, &dt, N, tt, sizeof tt));
  em_minibatch_options mo = {.batch_size = 8, .seed = 5, .shuffle = 1, .no_prefetch = 1};
  em_minibatch_options vo = {.batch_size = 16, .max_sweeps = 1, .no_prefetch = 1};
  em_minibatch_source *src, *val;
  CHECK(em_minibatch_source_create(d, &mo, &src));
  CHECK(em_minibatch_source_create(d, &vo, &val));
  em_trainer_options o = ls_scaled(em_cpu(), 0x1p70, 1);
  o.loss_scaling.growth_factor = 0x1p30;
  o.loss_scaling.backoff_factor = 0x1p-50;
  rig r;
  ls_rig_one(&r, EM_LEARNER_ADAM, 0, &o);
  fit_log log = {0};
  em_var inputs[3] = {r.m.x, r.m.x2, r.m.t};
  em_fit_options fo = {.epochs = 3, .train = src, .inputs = inputs, .n_inputs = 3, .validation = val,
                       .checkpoint = path, .on_minibatch = on_mb, .on_epoch = on_epoch, .user = &log,
                       .patience = 100};
  em_fit_result fr;
  CHECK(em_trainer_fit(r.t, &fo, &fr));
  assert_int_equal(fr.epochs, 3);
  assert_int_equal(log.minibatch_calls, 24);
  assert_int_equal(log.epoch_calls, 3);
  assert_int_equal(log.bad_order, 0);
  em_trainer_totals tot = ls_totals(r.t);
  assert_int_equal(tot.steps, 24);
  assert_int_equal(tot.samples, 192);
  assert_int_equal(tot.epoch, 3);
  if (tot.skipped_steps < 5) fail_msg("only %llu skips in 24 steps", (unsigned long long)tot.skipped_steps);
  assert_int_equal(em_learner_steps(r.l[0]), 24 - tot.skipped_steps);
  assert_int_equal(em_learner_samples(r.l[0]), 8 * (24 - tot.skipped_steps));
  /* the last epoch's checkpoint holds this state */
  rig b;
  ls_rig_one(&b, EM_LEARNER_ADAM, 0, &o);
  CHECK(em_trainer_restore_checkpoint(b.t, path, NULL));
  em_trainer_totals tb = ls_totals(b.t);
  assert_true(tb.loss_scale == tot.loss_scale);
  assert_int_equal(tb.skipped_steps, tot.skipped_steps);
  assert_int_equal(tb.steps, 24);
  assert_int_equal(em_learner_steps(b.l[0]), em_learner_steps(r.l[0]));
  snap sa, sb;
  ls_snapshot(r.m.g, &sa);
  ls_snapshot(b.m.g, &sb);
  ls_snap_equal(&sb, &sa, "fit's last checkpoint");
  ls_rig_free(&b);
  ls_rig_free(&r);
  em_minibatch_source_free(src);
  em_minibatch_source_free(val);
  em_dataset_free(d);
  unlink(path);
}

int main(void) {
  g_gpus = ts_use_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_kind_skips_bitwise),
      cmocka_unit_test(test_larc_skip),
      cmocka_unit_test(test_tiny_scales_refused),
      cmocka_unit_test(test_edited_scale_refused),
      cmocka_unit_test(test_growth_cap),
      cmocka_unit_test(test_interval_one_min_equal_init),
      cmocka_unit_test(test_checkpoint_mid_streak),
      cmocka_unit_test(test_f64_loss),
      cmocka_unit_test(test_foreign_scale_value),
      cmocka_unit_test(test_two_trainers_one_graph),
      cmocka_unit_test(test_fit_with_skips),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
