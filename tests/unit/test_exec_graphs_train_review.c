/* Review of whole-step CUDA graph capture (test_exec_graphs_train.c's
 * subject): attempts to make a replayed training step differ from the eager
 * one. Two trainers over identical graphs on the libcuda double, portable
 * mode, one with graphs on its executors, one without; the host changes
 * things between replays (em_parameter_set from the host and from the
 * device, a checkpoint restored mid-run, a schedule moving the learning
 * rate every step, the loss scale growing and backing off), the feed
 * shapes cycle through more keys than the executor keeps, a capture fails
 * at instantiation, the evaluation executor runs between the steps, the
 * executor is freed while it holds graphs, a replayed step meets a bad
 * label. After every step the losses, the trainers' totals, every
 * parameter and state are compared bitwise with the eager trainer's (the
 * expected values are always the eager run's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/learner.h"
#include "ember/reader.h"
#include "ember/trainer.h"
#include "gpu_double.h"
#include "op_testkit.h"

#include "train_graphs_rig.h"

static em_exec_stats stats_of(const net *m) {
  em_exec_stats st;
  CHECK(em_exec_stats_get(em_trainer_train_exec(m->t), &st));
  return st;
}

static void assert_same_totals(const net *a, const net *b, const char *what, int k) {
  em_trainer_totals ta, tb;
  CHECK(em_trainer_get_totals(a->t, &ta));
  CHECK(em_trainer_get_totals(b->t, &tb));
  if (ta.steps != tb.steps || ta.samples != tb.samples || ta.epoch_minibatches != tb.epoch_minibatches ||
      ta.epoch_samples != tb.epoch_samples || loss_bits(ta.epoch_loss) != loss_bits(tb.epoch_loss) ||
      loss_bits(ta.loss_scale) != loss_bits(tb.loss_scale) || ta.skipped_steps != tb.skipped_steps ||
      ta.test_samples != tb.test_samples || loss_bits(ta.test_loss) != loss_bits(tb.test_loss))
    fail_msg("%s: step %d: the totals differ (steps %llu/%llu, epoch loss %.9g/%.9g, scale %g/%g, skipped %llu/%llu, "
             "test loss %.9g/%.9g)",
             what, k, (unsigned long long)ta.steps, (unsigned long long)tb.steps, ta.epoch_loss, tb.epoch_loss,
             ta.loss_scale, tb.loss_scale, (unsigned long long)ta.skipped_steps, (unsigned long long)tb.skipped_steps,
             ta.test_loss, tb.test_loss);
  assert_int_equal(em_learner_steps(a->l), em_learner_steps(b->l));
  assert_int_equal(em_learner_samples(a->l), em_learner_samples(b->l));
}

/* Called before step k on both trainers (the same change to each). */
typedef void (*between_fn)(net *m, int k, void *ctx);

/* One step of each trainer on batch k (rows rows, labels shifted by
 * label_add), then everything compared; returns the graph trainer's
 * graph_replayed. Both must succeed, or both fail with the same status. */
static int step_both(net *a, net *b, int k, int rows, int32_t bad_label, const char *what) {
  em_feed f[2];
  batch(k, rows, 1, f, a);
  if (bad_label) { /* a label outside [0, CLS): cross entropy's device check */
    em_tensor_release((em_tensor *)f[1].value);
    int32_t ys[64];
    for (int i = 0; i < rows; i++) ys[i] = i == rows / 2 ? bad_label : i % CLS;
    CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){rows}, ys, sizeof(int32_t) * (size_t)rows,
                              (em_tensor **)&f[1].value));
  }
  em_minibatch_result ra = {0}, rb = {0};
  em_status sa = em_trainer_train_minibatch(a->t, f, 2, &ra);
  char ea[512];
  snprintf(ea, sizeof ea, "%s", sa ? em_last_error() : "");
  em_clear_error();
  f[0].var = b->x, f[1].var = b->label;
  em_status sb = em_trainer_train_minibatch(b->t, f, 2, &rb);
  char eb[512];
  snprintf(eb, sizeof eb, "%s", sb ? em_last_error() : "");
  em_clear_error();
  feeds_release(f);
  if (sa && bad_label) { /* both name the bad label, and neither names a run other than this one (run k) */
    char want[64];
    snprintf(want, sizeof want, "label %d at position", (int)bad_label);
    if (!strstr(ea, want) || !strstr(eb, want)) fail_msg("%s: step %d: the label is not named: %s | %s", what, k, ea, eb);
    const char *runs[2] = {strstr(ea, "in run "), strstr(eb, "in run ")};
    for (int i = 0; i < 2; i++)
      if (runs[i] && strtoull(runs[i] + 7, NULL, 10) != (unsigned long long)k)
        fail_msg("%s: step %d (run %d): the %s trainer's error names another run: %s", what, k, k,
                 i ? "graph" : "eager", i ? eb : ea);
  }
  if (sa != sb) fail_msg("%s: step %d: eager status %d (%s), graphs %d (%s)", what, k, sa, ea, sb, eb);
  if (!sa && loss_bits(ra.loss) != loss_bits(rb.loss))
    fail_msg("%s: step %d: loss %.9g (eager) != %.9g (graphs)", what, k, ra.loss, rb.loss);
  assert_same_values(a, b, what, k);
  assert_same_totals(a, b, what, k);
  return stats_of(b).graph_replayed;
}

/* Both trainers built alike, graphs on for b's training executor. */
static void build_both(net *a, net *b, em_learner_kind kind, const em_trainer_options *o, int bn) {
  build(a, kind, o, bn);
  build(b, kind, o, bn);
  CHECK(em_exec_set_graphs(em_trainer_train_exec(b->t), 1));
}

static const char *graphs_line(const net *m) {
  static char d[4096];
  em_exec_describe(em_trainer_train_exec(m->t), d, sizeof d);
  const char *l = strstr(d, "graphs:");
  return l ? l : d;
}

/* -------------------------------------------------------------- tests --- */

/* em_parameter_set between replays: w0 from a host tensor, b0 from a
 * device tensor (em_resident_set's d2d path), batch norm's running mean (a
 * state) from the host; each next step must see the new value (the
 * replay's upload to the same address) and the step after the set still
 * replays. */
static void test_parameter_set_between_replays(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAM, &o, 1);
  em_var mean;
  CHECK(em_graph_lookup(a.g, "bn.mean", &mean));
  for (int k = 0; k < 9; k++) {
    net *m[2] = {&a, &b};
    for (int t = 0; t < 2; t++) {
      if (k == 4) {
        float w[HID * IN];
        for (int i = 0; i < HID * IN; i++) w[i] = 0.01f * (float)(i % 7) - 0.02f;
        em_tensor *v;
        CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){HID, IN}, w, sizeof w, &v));
        CHECK(em_parameter_set(m[t]->g, m[t]->params[0], v));
        em_tensor_release(v);
      }
      if (k == 5) {
        float bb[HID];
        for (int i = 0; i < HID; i++) bb[i] = 0.5f - 0.125f * (float)i;
        em_tensor *v;
        CHECK(em_tensor_from_host(gpu0(), EM_F32, 1, (int64_t[]){HID}, bb, sizeof bb, &v));
        CHECK(em_parameter_set(m[t]->g, m[t]->params[1], v));
        em_tensor_release(v);
      }
      if (k == 6) {
        float mv[HID];
        for (int i = 0; i < HID; i++) mv[i] = 3.0f + (float)i;
        em_tensor *v;
        CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){HID}, mv, sizeof mv, &v));
        CHECK(em_parameter_set(m[t]->g, mean, v));
        em_tensor_release(v);
      }
    }
    int rep = step_both(&a, &b, k, 8, 0, "parameter set");
    if (rep != (k >= 2)) fail_msg("step %d replayed %d: %s", k, rep, graphs_line(&b));
  }
  /* the set values reached the steps: w0 is not what training alone made */
  size_t n;
  void *w = value_bytes(b.g, b.params[0], &n);
  free(w);
  assert_int_equal(stats_of(&b).graph_captures, 1);
  net_free(&a), net_free(&b);
}

/* A learning rate that moves every step (cosine decay over 64 samples, 8
 * per step) and a momentum schedule in pieces: the rates are per-step
 * feeds, so a replay must take each step's. */
static void tweak_schedules(em_learner_config *cfg) {
  cfg->lr.cosine_samples = 64;
  cfg->lr.cosine_floor = 0.1;
  static const double mom[3] = {0.5, 0.9, 0.7};
  static const uint64_t cnt[3] = {16, 16, 16};
  cfg->momentum.n = 3, cfg->momentum.values = mom, cfg->momentum.counts = cnt, cfg->momentum.epoch_size = 1;
}

static void test_schedules_move_under_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  g_tweak = tweak_schedules;
  net a, b;
  build_both(&a, &b, EM_LEARNER_MOMENTUM, &o, 1);
  g_tweak = NULL;
  double prev = -1;
  for (int k = 0; k < 8; k++) {
    double lr, mu;
    CHECK(em_learner_rates(b.l, 8, &lr, &mu));
    assert_true(lr != prev); /* the schedule does move */
    prev = lr;
    int rep = step_both(&a, &b, k, 8, 0, "schedules");
    if (rep != (k >= 2)) fail_msg("step %d replayed %d: %s", k, rep, graphs_line(&b));
  }
  net_free(&a), net_free(&b);
}

/* Each trainer's checkpoint after step 3 (the graph trainer's written
 * between replays), restored into it after step 6 (parameters, slots,
 * running statistics, counters and run numbers replaced from the host),
 * then 4 more steps. */
static void test_checkpoint_restored_mid_run(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  char path[64];
  char path_b[64];
  snprintf(path, sizeof path, "/tmp/ember_graphs_review_%d.ckpt", (int)getpid());
  snprintf(path_b, sizeof path_b, "/tmp/ember_graphs_review_%d_b.ckpt", (int)getpid());
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAM, &o, 1);
  for (int k = 0; k < 11; k++) {
    if (k == 7) { /* each from its own file: b's was written from the host copies after its replays */
      CHECK(em_trainer_restore_checkpoint(a.t, path, NULL));
      CHECK(em_trainer_restore_checkpoint(b.t, path_b, NULL));
      assert_same_values(&a, &b, "checkpoint (restored)", k);
    }
    (void)step_both(&a, &b, k, 8, 0, "checkpoint");
    if (k == 3) {
      CHECK(em_trainer_save_checkpoint(a.t, path, NULL, NULL, 0));
      CHECK(em_trainer_save_checkpoint(b.t, path_b, NULL, NULL, 0));
    }
  }
  /* the restore did not stop the replays for good */
  assert_int_equal(stats_of(&b).graph_replayed, 1);
  unlink(path), unlink(path_b);
  net_free(&a), net_free(&b);
}

/* Dynamic loss scaling that grows every 2 clean steps and backs off on
 * step 5's overflow (inputs times 1e4, as test_exec_graphs_train's
 * loss-scaling test): S is a feed, so each replay must take the new S. */
static void test_loss_scale_grows_and_backs_off(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  o.loss_scaling.mode = EM_LOSS_SCALE_DYNAMIC;
  o.loss_scaling.init_scale = ldexp(1.0, 50);
  o.loss_scaling.min_scale = 1;
  o.loss_scaling.growth_interval = 2;
  net a, b;
  build_both(&a, &b, EM_LEARNER_MOMENTUM, &o, 0);
  double scales[10];
  for (int k = 0; k < 10; k++) {
    em_feed f[2];
    batch(k, 8, k == 5 ? 1e4 : 1, f, &a);
    em_minibatch_result ra, rb;
    CHECK(em_trainer_train_minibatch(a.t, f, 2, &ra));
    f[0].var = b.x, f[1].var = b.label;
    CHECK(em_trainer_train_minibatch(b.t, f, 2, &rb));
    feeds_release(f);
    if (loss_bits(ra.loss) != loss_bits(rb.loss)) fail_msg("step %d: loss %.9g != %.9g", k, ra.loss, rb.loss);
    assert_same_values(&a, &b, "loss scale", k);
    assert_same_totals(&a, &b, "loss scale", k);
    em_trainer_totals t;
    CHECK(em_trainer_get_totals(b.t, &t));
    scales[k] = t.loss_scale;
    if (stats_of(&b).graph_replayed != (k >= 2)) fail_msg("step %d: %s", k, graphs_line(&b));
  }
  /* S did move both ways under replay */
  assert_true(scales[3] > scales[1]);
  assert_true(scales[5] < scales[4]);
  em_trainer_totals t;
  CHECK(em_trainer_get_totals(b.t, &t));
  assert_int_equal(t.skipped_steps, 1);
  net_free(&a), net_free(&b);
}

/* Feed shapes cycling through 10 batch sizes (more keys than the 8 an
 * executor keeps: the least recently used graph goes), each size 3 steps,
 * then the first sizes again (evicted: warm up and capture anew). Each
 * capture stages its learner table and dropout reads the step; every step
 * bitwise the eager trainer's. */
static void test_more_shapes_than_graphs_kept(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_RMSPROP, &o, 1);
  int k = 0, replays = 0;
  for (int round = 0; round < 2; round++)
    for (int rows = 2; rows <= (round ? 4 : 11); rows++)
      for (int r = 0; r < 3; r++, k++) {
        int rep = step_both(&a, &b, k, rows, 0, "shapes");
        if (rep != (r == 2)) fail_msg("step %d (%d rows, round %d): replayed %d: %s", k, rows, round, rep, graphs_line(&b));
        replays += rep;
      }
  em_exec_stats st = stats_of(&b);
  assert_int_equal(st.graph_captures, 13);
  assert_int_equal(st.graphs_held, 8);
  assert_int_equal(replays, 13);
  net_free(&a), net_free(&b);
}

/* The first capture's instantiation fails (the double fails
 * cuGraphInstantiateWithFlags once): the captured run was recorded, not
 * run, so the step is done once eagerly; that key stays eager and right;
 * another batch size then captures and replays. */
static void test_failed_capture_applies_the_step_once(void **state) {
  (void)state;
  setenv("FAKECUDA_FAIL", "cuGraphInstantiateWithFlags=2@1", 1);
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAM, &o, 1);
  const int rows[9] = {8, 8, 8, 8, 6, 6, 6, 6, 8};
  const int want[9] = {0, 0, 0, 0, 0, 0, 1, 1, 0};
  for (int k = 0; k < 9; k++) {
    int rep = step_both(&a, &b, k, rows[k], 0, "failed capture");
    if (rep != want[k]) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
  }
  em_exec_stats st = stats_of(&b);
  assert_int_equal(st.graph_captures, 1);
  net_free(&a), net_free(&b);
  unsetenv("FAKECUDA_FAIL");
}

/* The evaluation executor (graphs on as well for b) runs between the
 * training steps: inference batch norm reads the running statistics the
 * replays wrote, dropout is the identity; its loss bitwise the eager
 * trainer's, and the training replays continue (the step counters of the
 * two executors are their own). Then graphs are switched off and on again
 * on the training executor mid-run. */
static void test_eval_between_replays_and_graphs_toggled(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_NESTEROV, &o, 1);
  CHECK(em_exec_set_graphs(em_trainer_eval_exec(b.t), 1));
  for (int k = 0; k < 10; k++) {
    if (k == 6) CHECK(em_exec_set_graphs(em_trainer_train_exec(b.t), 0));
    if (k == 7) CHECK(em_exec_set_graphs(em_trainer_train_exec(b.t), 1));
    (void)step_both(&a, &b, k, 8, 0, "eval between");
    em_feed f[2];
    batch(100 + k, 5, 1, f, &a);
    em_minibatch_result ra, rb;
    CHECK(em_trainer_test_minibatch(a.t, f, 2, &ra));
    f[0].var = b.x, f[1].var = b.label;
    CHECK(em_trainer_test_minibatch(b.t, f, 2, &rb));
    feeds_release(f);
    if (loss_bits(ra.loss) != loss_bits(rb.loss)) fail_msg("step %d: test loss %.9g != %.9g", k, ra.loss, rb.loss);
    assert_same_values(&a, &b, "eval between", k);
    assert_same_totals(&a, &b, "eval between", k);
    em_exec_stats st;
    CHECK(em_exec_stats_get(em_trainer_eval_exec(b.t), &st));
    assert_int_equal(st.graph_replayed, k >= 2);
  }
  assert_int_equal(stats_of(&b).graph_replayed, 1);
  net_free(&a), net_free(&b);
}

/* A label out of range in a replayed step: cross entropy's device check
 * must fail that step as it fails the eager one (not be lost in the
 * replay), naming the label and no other run than the one that failed
 * (the check's message was made at the capture, 2 runs before), leaving
 * the same values; the next steps go on alike. */
static void test_bad_label_in_a_replayed_step(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_SGD, &o, 1);
  for (int k = 0; k < 8; k++) {
    int rep = step_both(&a, &b, k, 8, k == 4 ? 7 : 0, "bad label");
    if (rep != (k >= 2)) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
  }
  em_trainer_totals t;
  CHECK(em_trainer_get_totals(b.t, &t));
  assert_int_equal(t.steps, 7); /* the bad step failed in both */
  net_free(&a), net_free(&b);
}

/* The trainers (and so their executors, b's holding a graph whose last
 * replay wrote the parameters) freed before the graph: the values read
 * from the graph afterwards are the newest, equal to the eager run's. */
static void test_executor_freed_while_holding_graphs(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAGRAD, &o, 1);
  for (int k = 0; k < 5; k++) (void)step_both(&a, &b, k, 8, 0, "freed");
  assert_int_equal(stats_of(&b).graphs_held, 1);
  em_trainer_free(a.t), em_trainer_free(b.t);
  a.t = b.t = NULL;
  assert_same_values(&a, &b, "after the executors were freed", 5);
  net_free(&a), net_free(&b);
}

/* The portable mode's promise across devices: a CPU trainer and the GPU
 * trainer with graphs on (dropout's mask derived on the device from the
 * step in device memory, replayed) give the same bits at every step. */
static void test_cpu_and_replayed_gpu_same_bits(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options oc = portable_on_gpu(), og = portable_on_gpu();
  oc.device = em_cpu();
  net a, b;
  build(&a, EM_LEARNER_ADAM, &oc, 1);
  build(&b, EM_LEARNER_ADAM, &og, 1);
  CHECK(em_exec_set_graphs(em_trainer_train_exec(b.t), 1));
  for (int k = 0; k < 6; k++) {
    int rep = step_both(&a, &b, k, 8, 0, "cpu vs replayed gpu");
    if (rep != (k >= 2)) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
  }
  net_free(&a), net_free(&b);
}

/* Mixed precision (the autocast to f16, dynamic loss scaling on by
 * default): the casts of the f32 master weights are graph ops the replay
 * repeats after each update; bitwise the eager trainer's. */
static void test_f16_autocast_under_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  o.precision = EM_F16;
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAM, &o, 1);
  for (int k = 0; k < 6; k++) {
    int rep = step_both(&a, &b, k, 8, 0, "f16");
    if (rep != (k >= 2)) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
  }
  net_free(&a), net_free(&b);
}

/* Trains the graph trainer alone to step 4 (a replay), w0 set from the
 * host just before it (so the host copy is current going in); returns the
 * status of step 4 and, through *d2d, the device-to-device copies made
 * before it. */
static em_status replay_with_w0_set(net *b, long *d2d) {
  em_trainer_options o = portable_on_gpu();
  build(b, EM_LEARNER_SGD, &o, 1);
  CHECK(em_exec_set_graphs(em_trainer_train_exec(b->t), 1));
  em_status s = EM_OK;
  for (int k = 0; k <= 4 && !s; k++) {
    if (k == 4) {
      float w[HID * IN];
      for (int i = 0; i < HID * IN; i++) w[i] = 0.03f * (float)(i % 5) - 0.05f;
      em_tensor *v;
      CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){HID, IN}, w, sizeof w, &v));
      CHECK(em_parameter_set(b->g, b->params[0], v));
      em_tensor_release(v);
      *d2d = ts_double_calls("cuMemcpyDtoDAsync_v2");
    }
    em_feed f[2];
    batch(k, 8, 1, f, b);
    s = em_trainer_train_minibatch(b->t, f, 2, NULL);
    feeds_release(f);
    if (k < 4 && s) fail_msg("step %d: %s", k, em_last_error());
  }
  return s;
}

/* A replay whose graph ran but whose output copy then failed (the double
 * fails the first device-to-device copy after the launch: fetching the
 * loss): the step fails, yet the graph's update of w0 happened on the
 * device, and the host must know it (as the eager run's states_written
 * tells it at each step, whatever follows): the host's read of w0 equals
 * the device copy's bytes rather than the value set before the step. The
 * copy's number comes from a first pass without the failure. */
static void test_failed_output_copy_after_replay_tells_the_host(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  net b;
  long before = -1;
  CHECK(replay_with_w0_set(&b, &before));
  assert_int_equal(stats_of(&b).graph_replayed, 1);
  net_free(&b);
  assert_true(before >= 0);
  char rule[64];
  snprintf(rule, sizeof rule, "cuMemcpyDtoDAsync_v2=1@%ld", before + 1);
  setenv("FAKECUDA_FAIL", rule, 1);
  NEED_DOUBLE(NULL);
  long again = -1;
  em_status s = replay_with_w0_set(&b, &again);
  assert_int_equal(again, before); /* the same sequence of calls up to the step */
  if (!s) fail_msg("step 4 did not fail (the rule %s did not hit the output copy)", rule);
  em_clear_error();
  em_tensor *h, *d;
  CHECK(em_parameter_get(b.g, b.params[0], em_cpu(), &h));
  CHECK(em_parameter_get(b.g, b.params[0], gpu0(), &d));
  float hv[HID * IN], dv[HID * IN];
  CHECK(em_tensor_to_host(h, hv, sizeof hv));
  CHECK(em_tensor_to_host(d, dv, sizeof dv));
  em_tensor_release(h), em_tensor_release(d);
  if (memcmp(hv, dv, sizeof hv)) fail_msg("w0 read on the host (%g ...) is not the device's (%g ...)", hv[0], dv[0]);
  assert_true(hv[0] != -0.05f); /* the step's update is there: not the value set */
  net_free(&b);
  unsetenv("FAKECUDA_FAIL");
}

/* Clipping by value and by global norm, coupled L2 and L1, decoupled
 * weight decay and LARC (its parameter norms) on adamw: the per-learner
 * scales the update reads are computed inside the graph at each replay. */
static void tweak_clipping(em_learner_config *cfg) {
  cfg->clip_value = 0.05, cfg->clip_norm = 0.3, cfg->l1 = 1e-3, cfg->l2 = 1e-2, cfg->weight_decay = 0.02;
  cfg->larc = EM_LARC_CLIP, cfg->larc_eta = 0.01;
}

static void test_clipping_and_larc_under_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  g_tweak = tweak_clipping;
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAMW, &o, 1);
  g_tweak = NULL;
  for (int k = 0; k < 6; k++) {
    int rep = step_both(&a, &b, k, 8, 0, "clipping");
    if (rep != (k >= 2)) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
  }
  net_free(&a), net_free(&b);
}

/* The fast mode with the cuBLAS and cuDNN doubles (the libraries'
 * work and workspaces recorded in the graph): bitwise the eager fast-mode
 * trainer's, which runs the same library calls. */
static void test_fast_mode_libraries_under_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  const char *blas = getenv("FAKECUBLAS_LIB"), *dnn = getenv("FAKECUDNN_LIB");
  if (!blas || !*blas || !dnn || !*dnn) {
    print_message("SKIPPED: no cuBLAS / cuDNN double\n");
    skip();
  }
  setenv("EMBER_LIBCUBLAS", blas, 1), setenv("EMBER_LIBCUDNN", dnn, 1);
  unsetenv("EMBER_CUBLAS"), unsetenv("EMBER_CUDNN");
  em_shutdown();
  em_trainer_options o = portable_on_gpu();
  o.mode = EM_MODE_FAST;
  net a, b;
  build_both(&a, &b, EM_LEARNER_MOMENTUM, &o, 1);
  for (int k = 0; k < 6; k++) {
    int rep = step_both(&a, &b, k, 8, 0, "fast mode");
    if (rep != (k >= 2)) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
  }
  char d[8192];
  em_exec_describe(em_trainer_train_exec(b.t), d, sizeof d);
  if (!strstr(d, "cuBLAS")) fail_msg("no step took cuBLAS: %s", d); /* else this tested nothing new */
  net_free(&a), net_free(&b);
}

/* A device that cannot map host memory: cross entropy's label check copies
 * its verdict back and synchronises, which a capture cannot hold; the key
 * stays eager with the reason, every step right. */
static void test_no_mapped_memory_stays_eager(void **state) {
  (void)state;
  setenv("FAKECUDA_NO_MAP_HOST", "1", 1);
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_both(&a, &b, EM_LEARNER_ADAM, &o, 1);
  for (int k = 0; k < 5; k++) {
    int rep = step_both(&a, &b, k, 8, k == 3 ? 9 : 0, "no mapped memory");
    assert_int_equal(rep, 0);
  }
  assert_int_equal(stats_of(&b).graph_captures, 0);
  if (!strstr(graphs_line(&b), "eager:")) fail_msg("no reason given: %s", graphs_line(&b));
  net_free(&a), net_free(&b);
}

/* em_trainer_fit, graphs on through EMBER_CUDA_GRAPHS=1 for the second
 * trainer's executors (read at their creation): 44 samples in minibatches
 * of 8 (the epoch's last one of 4: two keys), shuffled, 3 epochs with a
 * validation pass after each; the fit results, totals and every value
 * bitwise the eager trainer's. */
static void test_fit_with_graphs_from_the_environment(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  enum { N = 44 };
  float xs[N * IN];
  int32_t ys[N];
  uint64_t seed = 99;
  for (int i = 0; i < N * IN; i++) xs[i] = (float)ot_uniform(&seed, -1, 1);
  for (int i = 0; i < N; i++) ys[i] = (i * 7) % CLS;
  em_dataset *ds;
  CHECK(em_dataset_create(&ds));
  em_stream_desc fd = {.name = "features", .dtype = EM_F32, .ndim = 1, .shape = {IN}};
  em_stream_desc ld = {.name = "labels", .dtype = EM_I32, .ndim = 0, .classes = CLS};
  CHECK(em_dataset_add_stream(ds, &fd, N, xs, sizeof xs));
  CHECK(em_dataset_add_stream(ds, &ld, N, ys, sizeof ys));
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build(&a, EM_LEARNER_ADAM, &o, 1);
  setenv("EMBER_CUDA_GRAPHS", "1", 1);
  build(&b, EM_LEARNER_ADAM, &o, 1);
  unsetenv("EMBER_CUDA_GRAPHS");
  assert_int_equal(em_exec_get_graphs(em_trainer_train_exec(b.t)), 1);
  assert_int_equal(em_exec_get_graphs(em_trainer_train_exec(a.t)), 0);
  em_fit_result fr[2];
  net *m[2] = {&a, &b};
  for (int t = 0; t < 2; t++) {
    em_minibatch_options mo = {.batch_size = 8, .seed = 5, .shuffle = 1, .no_prefetch = 1};
    em_minibatch_options vo = {.batch_size = 8, .max_sweeps = 1, .no_prefetch = 1};
    em_minibatch_source *tr, *va;
    CHECK(em_minibatch_source_create(ds, &mo, &tr));
    CHECK(em_minibatch_source_create(ds, &vo, &va));
    em_var inputs[2] = {m[t]->x, m[t]->label};
    em_fit_options fo = {.epochs = 3, .train = tr, .inputs = inputs, .n_inputs = 2, .validation = va};
    CHECK(em_trainer_fit(m[t]->t, &fo, &fr[t]));
    em_minibatch_source_free(tr), em_minibatch_source_free(va);
  }
  assert_int_equal(fr[0].epochs, 3);
  assert_int_equal(fr[1].epochs, 3);
  if (loss_bits(fr[0].val_loss) != loss_bits(fr[1].val_loss))
    fail_msg("validation loss %.9g (eager) != %.9g (graphs)", fr[0].val_loss, fr[1].val_loss);
  assert_same_values(&a, &b, "fit", 3);
  assert_same_totals(&a, &b, "fit", 3);
  em_exec_stats st = stats_of(&b);
  if (st.graph_replays < 10) fail_msg("only %llu replays: %s", (unsigned long long)st.graph_replays, graphs_line(&b));
  net_free(&a), net_free(&b);
  em_dataset_free(ds);
}

/* splitmix64's finaliser and norm_math.h's documented key scheme, written
 * out as the reference (as test_exec_graphs_train.c does): element i of
 * dropout(seed, node) at step `step` is kept when the top 53 bits of
 * mix(key + (i + 1) G) reach ceil(ratio 2^53). */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
#define GOLDEN 0x9e3779b97f4a7c15ull
static int kept(uint64_t seed, uint64_t step, uint64_t node, int64_t i, double ratio) {
  uint64_t key = mix(mix(mix(seed + GOLDEN) ^ mix(step + 2 * GOLDEN)) ^ mix(node + 3 * GOLDEN));
  return (mix(key + (uint64_t)(i + 1) * GOLDEN) >> 11) >= (uint64_t)ceil(ratio * 9007199254740992.0);
}

/* One dropout executor (training, graphs on) run after run while the
 * route changes under it: a second key (a new capture, then the first
 * key's graph again), graphs switched off for a run (eager on the legacy
 * stream) and on again (fresh graphs: warm-up, capture), a second executor
 * over the same graph running in between (its own counter), an inference
 * run (the identity, the counter still moves). Every run's mask is the
 * reference's for that executor's run number. */
static void test_dropout_mask_follows_the_run_across_routes(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, y;
  CHECK(em_input(g, "x", EM_F32, 1, (int64_t[]){-1}, &x));
  em_attr at[3] = {{.name = "ratio", .type = EM_ATTR_FLOAT, .f = 0.5},
                   {.name = "seed", .type = EM_ATTR_INT, .i = 3},
                   {.name = "node", .type = EM_ATTR_INT, .i = 9}};
  y = apply(g, "dropout", &x, 1, at, 3);
  em_exec *e, *other;
  CHECK(em_exec_create(g, &y, 1, gpu0(), &e));
  CHECK(em_exec_create(g, &y, 1, gpu0(), &other));
  em_exec *ex[2] = {e, other};
  for (int i = 0; i < 2; i++) {
    CHECK(em_exec_set_mode(ex[i], EM_MODE_PORTABLE));
    CHECK(em_exec_set_training(ex[i], 1));
    CHECK(em_exec_set_graphs(ex[i], 1));
  }
  float ones[96], got[96];
  for (int i = 0; i < 96; i++) ones[i] = 1.0f;
  /* per run: elements, which executor, graphs on e, training */
  const int len[16] = {64, 64, 64, 64, 96, 96, 96, 64, 96, 64, 64, 64, 64, 64, 64, 64};
  const int who[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0};
  const int gon[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1};
  const int trn[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1};
  uint64_t runs[2] = {0, 0};
  int replayed = 0;
  for (int k = 0; k < 16; k++) {
    em_exec *r = ex[who[k]];
    if (!who[k]) CHECK(em_exec_set_graphs(e, gon[k]));
    CHECK(em_exec_set_training(r, trn[k]));
    em_tensor *xt, *out;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){len[k]}, ones, sizeof(float) * (size_t)len[k], &xt));
    em_feed f = {x, xt};
    CHECK(em_exec_run(r, &f, 1, &out));
    em_exec_stats st;
    CHECK(em_exec_stats_get(r, &st));
    replayed += st.graph_replayed;
    CHECK(em_tensor_to_host(out, got, sizeof(float) * (size_t)len[k]));
    em_tensor_release(out), em_tensor_release(xt);
    uint64_t step = runs[who[k]]++;
    for (int i = 0; i < len[k]; i++) {
      float want = !trn[k] ? 1.0f : kept(3, step, 9, i, 0.5) ? 2.0f : 0.0f;
      if (got[i] != want)
        fail_msg("run %d (executor %d, its run %llu, graphs %d, training %d), element %d: %g, the reference %g", k,
                 who[k], (unsigned long long)step, gon[k], trn[k], i, got[i], want);
    }
  }
  if (replayed < 4) fail_msg("only %d runs replayed: the routes above are meant to include replays", replayed);
  em_exec_free(e), em_exec_free(other);
  em_graph_free(g);
}

/* Two learners in one trainer (sgd over the first layer, adam over the
 * rest: two update nodes, two tables staged in one capture, two
 * hyperparameter feeds): bitwise the eager trainer's under replay. */
static void build_two_learners(net *m, const em_trainer_options *o) {
  build(m, EM_LEARNER_SGD, o, 1);
  em_trainer_free(m->t), em_learner_free(m->l); /* rebuilt below over the same graph */
  em_learner_config c1, c2;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &c1));
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.01, &c2));
  em_learner *ls[2];
  CHECK(em_learner_create(&c1, "first", m->params, 2, &ls[0]));
  CHECK(em_learner_create(&c2, "rest", m->params + 2, m->n_params - 2, &ls[1]));
  CHECK(em_trainer_create(m->g, m->loss, -1, ls, 2, o, &m->t));
  m->l = ls[0], m->l2 = ls[1];
}

static void test_two_learners_under_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  net a, b;
  build_two_learners(&a, &o);
  build_two_learners(&b, &o);
  CHECK(em_exec_set_graphs(em_trainer_train_exec(b.t), 1));
  for (int k = 0; k < 6; k++) {
    int rep = step_both(&a, &b, k, 8, 0, "two learners");
    if (rep != (k >= 2)) fail_msg("step %d: replayed %d: %s", k, rep, graphs_line(&b));
    assert_int_equal(em_learner_steps(a.l2), em_learner_steps(b.l2));
  }
  em_learner_free(a.l2), em_learner_free(b.l2);
  net_free(&a), net_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_parameter_set_between_replays, teardown),
      cmocka_unit_test_teardown(test_schedules_move_under_replay, teardown),
      cmocka_unit_test_teardown(test_checkpoint_restored_mid_run, teardown),
      cmocka_unit_test_teardown(test_loss_scale_grows_and_backs_off, teardown),
      cmocka_unit_test_teardown(test_more_shapes_than_graphs_kept, teardown),
      cmocka_unit_test_teardown(test_failed_capture_applies_the_step_once, teardown),
      cmocka_unit_test_teardown(test_eval_between_replays_and_graphs_toggled, teardown),
      cmocka_unit_test_teardown(test_bad_label_in_a_replayed_step, teardown),
      cmocka_unit_test_teardown(test_executor_freed_while_holding_graphs, teardown),
      cmocka_unit_test_teardown(test_cpu_and_replayed_gpu_same_bits, teardown),
      cmocka_unit_test_teardown(test_f16_autocast_under_replay, teardown),
      cmocka_unit_test_teardown(test_clipping_and_larc_under_replay, teardown),
      cmocka_unit_test_teardown(test_fast_mode_libraries_under_replay, teardown),
      cmocka_unit_test_teardown(test_no_mapped_memory_stays_eager, teardown),
      cmocka_unit_test_teardown(test_fit_with_graphs_from_the_environment, teardown),
      cmocka_unit_test_teardown(test_dropout_mask_follows_the_run_across_routes, teardown),
      cmocka_unit_test_teardown(test_two_learners_under_replay, teardown),
      cmocka_unit_test_teardown(test_failed_output_copy_after_replay_tells_the_host, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
