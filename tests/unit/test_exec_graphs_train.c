/* CUDA graphs over whole training steps (issue 13) on the libcuda test double
 * (an H100 on a CUDA 13 driver): two trainers over two identical graphs, one
 * with graphs on its training executor (em_exec_set_graphs on
 * em_trainer_train_exec), one without, portable mode. After every step the
 * losses, every parameter and every state (batch norm's running statistics,
 * the learners' slots) are bitwise equal, read from the host between
 * replays (em_parameter_get), and the graph trainer's executor says it
 * captured once and replayed the rest. Also: each learner kind under
 * replay; a batch-size change captures a second graph and the first
 * replays again; dynamic loss scaling's device-side skip under replay; a
 * replayed dropout's mask against a reference derived here from the
 * documented key (splitmix64, norm_math.h's scheme written out again, not
 * included), so a replay that repeated the captured step's mask fails; a
 * driver without stream capture, or no page-locked memory for the staged
 * uploads, stays eager with the reason.
 * Expected values are the eager trainer's or the reference's, never the
 * graph's own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/learner.h"
#include "ember/trainer.h"
#include "gpu_double.h"
#include "op_testkit.h"

#include "train_graphs_rig.h"

static void stats_of(const net *m, em_exec_stats *st) { CHECK(em_exec_stats_get(em_trainer_train_exec(m->t), st)); }

/* rows[k] rows at step k (xscale[k] times the usual inputs, NULL: 1), eager
 * and with graphs, everything compared after every step. want_replayed[k]
 * (NULL: k >= 2) is what the graph trainer's step k must report. */
static void train_both(em_learner_kind kind, const em_trainer_options *opt, int bn, const int *rows,
                       const double *xscale, int steps, const int *want_replayed, const char *what, net *eager,
                       net *gr) {
  build(eager, kind, opt, bn);
  build(gr, kind, opt, bn);
  CHECK(em_exec_set_graphs(em_trainer_train_exec(gr->t), 1));
  assert_int_equal(em_exec_get_graphs(em_trainer_train_exec(eager->t)), 0); /* off by default */
  int n_values = assert_same_values(eager, gr, what, -1);
  assert_true(n_values >= (bn ? 8 : 4)); /* the parameters, batch norm's 2 running statistics, the slots */
  void *before = NULL;
  size_t nb = 0;
  for (int k = 0; k < steps; k++) {
    em_feed f[2];
    batch(k, rows[k], xscale ? xscale[k] : 1, f, eager);
    em_minibatch_result ra, rb;
    long k0 = ts_double_calls("cuLaunchKernel");
    CHECK(em_trainer_train_minibatch(eager->t, f, 2, &ra));
    long k1 = ts_double_calls("cuLaunchKernel"), g1 = ts_double_calls("cuGraphLaunch");
    f[0].var = gr->x, f[1].var = gr->label;
    CHECK(em_trainer_train_minibatch(gr->t, f, 2, &rb));
    long k2 = ts_double_calls("cuLaunchKernel"), g2 = ts_double_calls("cuGraphLaunch");
    feeds_release(f);
    assert_true(k0 >= 0 && g1 >= 0);
    if (k1 - k0 < 10) fail_msg("%s: step %d: the eager step launched %ld kernels", what, k, k1 - k0);
    /* a replayed step is one graph launch: forward, backward and update, no kernel launched alone */
    if (k >= 3 && (want_replayed ? want_replayed[k] && want_replayed[k - 1] : 1) && (k2 - k1 != 0 || g2 - g1 != 1))
      fail_msg("%s: step %d: %ld kernel launches and %ld graph launches (eager: %ld kernels)", what, k, k2 - k1,
               g2 - g1, k1 - k0);
    if (k == 3 && !want_replayed) print_message("%s: an eager step launches %ld kernels, a replayed one 1 graph\n", what, k1 - k0);
    em_exec_stats st;
    stats_of(gr, &st);
    int want = want_replayed ? want_replayed[k] : k >= 2;
    if (st.graph_replayed != want) {
      char d[2048];
      em_exec_describe(em_trainer_train_exec(gr->t), d, sizeof d);
      const char *line = strstr(d, "graphs:");
      fail_msg("%s: step %d replayed %d, expected %d: %s", what, k, st.graph_replayed, want, line ? line : d);
    }
    if (loss_bits(ra.loss) != loss_bits(rb.loss))
      fail_msg("%s: step %d: loss %.9g (eager) != %.9g (graphs)", what, k, ra.loss, rb.loss);
    assert_same_values(eager, gr, what, k);
    /* the replayed update reached the host's reads: w0 moved this step;
     * a step with scaled inputs (loss scaling's overflow) is skipped: it
     * did not */
    size_t n;
    void *now = value_bytes(gr->g, gr->params[0], &n);
    int skip = xscale && xscale[k] != 1;
    if (before && (n == nb && !memcmp(before, now, n)) != skip)
      fail_msg("%s: step %d: w0 read on the host %s", what, k, skip ? "changed in a skipped step" : "did not change");
    free(before);
    before = now, nb = n;
    if (k == 4) { /* em_parameter_value hands out the host tensor, so the device copies go stale: the next
                   * run uploads w1 again (to the same address, which the replay checks) and still replays */
      em_tensor *v;
      CHECK(em_parameter_value(gr->g, gr->params[2], &v));
      em_tensor_release(v);
    }
  }
  free(before);
}

/* ------------------------------------------------------------- tests --- */

/* An MLP with batch norm and dropout, SGD, 8 steps: bitwise eager, one
 * capture, replays from step 2 (the capture's own launch counts as one, as
 * em_exec_stats says). */
static void test_train_steps_replay_bitwise(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  const int steps = 8, rows[8] = {8, 8, 8, 8, 8, 8, 8, 8};
  net a, b;
  train_both(EM_LEARNER_SGD, &o, 1, rows, NULL, steps, NULL, "sgd", &a, &b);
  em_exec_stats st;
  stats_of(&b, &st);
  assert_int_equal(st.graph_captures, 1);
  assert_int_equal(st.graph_replays, steps - 2);
  assert_int_equal(st.graphs_held, 1);
  stats_of(&a, &st);
  assert_int_equal(st.graph_captures, 0);
  net_free(&a), net_free(&b);
}

/* Every learner kind at least once under replay (4 steps: 2 replays). */
static void test_every_learner_kind_replays(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  const int rows[4] = {8, 8, 8, 8};
  for (int kind = EM_LEARNER_SGD; kind <= EM_LEARNER_FSADAGRAD; kind++) {
    net a, b;
    train_both((em_learner_kind)kind, &o, 1, rows, NULL, 4, NULL, em_learner_kind_name((em_learner_kind)kind), &a, &b);
    em_exec_stats st;
    stats_of(&b, &st);
    assert_int_equal(st.graph_captures, 1);
    assert_int_equal(st.graph_replays, 2);
    net_free(&a), net_free(&b);
  }
}

/* 8 rows, then 5 (a new key: two eager runs, a capture), then 8 again (the
 * first graph replays at once), then 5 (replays too). */
static void test_batch_size_change_recaptures(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  const int rows[10] = {8, 8, 8, 5, 5, 5, 5, 8, 8, 5};
  const int want[10] = {0, 0, 1, 0, 0, 1, 1, 1, 1, 1};
  net a, b;
  train_both(EM_LEARNER_ADAM, &o, 1, rows, NULL, 10, want, "batch sizes", &a, &b);
  em_exec_stats st;
  stats_of(&b, &st);
  assert_int_equal(st.graph_captures, 2);
  assert_int_equal(st.graphs_held, 2);
  net_free(&a), net_free(&b);
}

/* Dynamic loss scaling at S = 2^53, no batch norm: the skip is decided on
 * the scaled gradients' sums of squares, so step 4's inputs times 1e4
 * (gradients of the weights about 1e4 S / 8 ~ 1e19, squared past f32's
 * 3.4e38) make it, while the other steps' (S / 8 ~ 1e15, squared 1e30) do
 * not: the learner skips on the device inside the replay, S backs off; the
 * graph trainer skips the same steps with the same bits. */
static void test_loss_scaling_skip_under_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  o.loss_scaling.mode = EM_LOSS_SCALE_DYNAMIC;
  o.loss_scaling.init_scale = ldexp(1.0, 53);
  o.loss_scaling.min_scale = 1;
  const int rows[7] = {8, 8, 8, 8, 8, 8, 8};
  const double xs[7] = {1, 1, 1, 1, 1e4, 1, 1};
  net a, b;
  train_both(EM_LEARNER_MOMENTUM, &o, 0, rows, xs, 7, NULL, "loss scaling", &a, &b);
  em_trainer_totals ta, tb;
  CHECK(em_trainer_get_totals(a.t, &ta));
  CHECK(em_trainer_get_totals(b.t, &tb));
  assert_int_equal(ta.skipped_steps, 1); /* step 4's overflow, a replay (train_both checked w0 stayed) */
  assert_int_equal(ta.skipped_steps, tb.skipped_steps);
  assert_true(loss_bits(ta.loss_scale) == loss_bits(tb.loss_scale));
  assert_int_equal(em_learner_steps(a.l), em_learner_steps(b.l));
  em_exec_stats st;
  stats_of(&b, &st);
  assert_int_equal(st.graph_captures, 1);
  assert_int_equal(st.graph_replays, 5);
  net_free(&a), net_free(&b);
}

/* splitmix64's finaliser and the key scheme norm_math.h documents, written
 * out here as the reference: key(seed, step, node), element i kept when the
 * top 53 bits of mix(key + (i + 1) G) reach ceil(ratio 2^53). */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
#define GOLDEN 0x9e3779b97f4a7c15ull
static int kept(uint64_t seed, uint64_t step, uint64_t node, int64_t i, double ratio) {
  uint64_t key = mix(mix(mix(seed + GOLDEN) ^ mix(step + 2 * GOLDEN)) ^ mix(node + 3 * GOLDEN));
  uint64_t thr = (uint64_t)ceil(ratio * 9007199254740992.0);
  return (mix(key + (uint64_t)(i + 1) * GOLDEN) >> 11) >= thr;
}

/* dropout(x) alone, training, graphs on: each run's mask (replays
 * included) is the reference's for that run's step, and differs from the
 * previous run's, so a replay repeating the captured step would fail here.
 * em_exec_set_runs moves the counter between replays: the replay follows. */
static void test_replayed_dropout_draws_each_steps_mask(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, y;
  const int n = 200;
  const double ratio = 0.5;
  CHECK(em_input(g, "x", EM_F32, 1, (int64_t[]){n}, &x));
  em_attr at[3] = {{.name = "ratio", .type = EM_ATTR_FLOAT, .f = ratio},
                   {.name = "seed", .type = EM_ATTR_INT, .i = 77},
                   {.name = "node", .type = EM_ATTR_INT, .i = 5}};
  y = apply(g, "dropout", &x, 1, at, 3);
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, gpu0(), &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  CHECK(em_exec_set_training(e, 1));
  CHECK(em_exec_set_graphs(e, 1));
  float ones[200], got[200], prev[200];
  for (int i = 0; i < n; i++) ones[i] = 1.0f;
  em_tensor *xt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){n}, ones, sizeof ones, &xt));
  const uint64_t steps[7] = {0, 1, 2, 3, 4, 40, 41};
  for (int k = 0; k < 7; k++) {
    if (k == 5) CHECK(em_exec_set_runs(e, 40));
    em_feed f = {x, xt};
    em_tensor *out;
    CHECK(em_exec_run(e, &f, 1, &out));
    CHECK(em_tensor_to_host(out, got, sizeof got));
    em_tensor_release(out);
    em_exec_stats st;
    CHECK(em_exec_stats_get(e, &st));
    assert_int_equal(st.graph_replayed, k >= 2);
    int kept_n = 0;
    for (int i = 0; i < n; i++) {
      float want = kept(77, steps[k], 5, i, ratio) ? 2.0f : 0.0f;
      if (got[i] != want) fail_msg("run %d (step %llu), element %d: %g, the reference %g", k,
                                   (unsigned long long)steps[k], i, got[i], want);
      kept_n += want != 0;
    }
    assert_true(kept_n > 50 && kept_n < 150);
    if (k) assert_true(memcmp(got, prev, sizeof got) != 0); /* a fresh mask each run */
    memcpy(prev, got, sizeof prev);
  }
  em_exec_stats st;
  CHECK(em_exec_stats_get(e, &st));
  assert_int_equal(st.graph_captures, 1);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

/* A CUDA 9.2 driver has no stream capture: the training executor stays
 * eager, right, and says why. */
static void test_old_driver_trains_eagerly(void **state) {
  (void)state;
  NEED_DOUBLE("9020");
  em_trainer_options o = portable_on_gpu();
  const int rows[4] = {8, 8, 8, 8};
  const int want[4] = {0, 0, 0, 0};
  net a, b;
  train_both(EM_LEARNER_SGD, &o, 1, rows, NULL, 4, want, "CUDA 9.2", &a, &b);
  char d[4096];
  em_exec_describe(em_trainer_train_exec(b.t), d, sizeof d);
  if (!strstr(d, "has no stream capture")) fail_msg("the reason is missing: %s", d);
  em_exec_stats st;
  stats_of(&b, &st);
  assert_int_equal(st.graph_captures, 0);
  net_free(&a), net_free(&b);
}

/* The other callers of em_ops_scratch_upload under replay: a gather (its
 * bound) and a linear resize (its taps and weights), graphs on against an
 * eager executor over the same graph, new inputs every run (before the
 * staging, the gather's pageable upload invalidated the capture). */
static void test_gather_and_resize_tables_replay(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, idx, y[2];
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){5, IN}, &x));
  int32_t iv[4] = {4, 0, 2, 2};
  em_tensor *it;
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){4}, iv, sizeof iv, &it));
  CHECK(em_constant(g, it, &idx));
  em_tensor_release(it);
  y[0] = apply(g, "gather", (em_var[]){x, idx}, 2, NULL, 0);
  const double scales[2] = {1.0, 1.5};
  em_attr rz[2] = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = scales, .n = 2},
                   {.name = "mode", .type = EM_ATTR_STRING, .s = "linear"}};
  y[1] = apply(g, "resize", &x, 1, rz, 2);
  em_exec *eager, *gr;
  CHECK(em_exec_create(g, y, 2, gpu0(), &eager));
  CHECK(em_exec_create(g, y, 2, gpu0(), &gr));
  CHECK(em_exec_set_mode(eager, EM_MODE_PORTABLE));
  CHECK(em_exec_set_mode(gr, EM_MODE_PORTABLE));
  CHECK(em_exec_set_graphs(gr, 1));
  for (int k = 0; k < 5; k++) {
    float xs[5 * IN];
    uint64_t s = 77 + (uint64_t)k;
    for (int i = 0; i < 5 * IN; i++) xs[i] = (float)ot_uniform(&s, -2, 2);
    em_tensor *xt, *a[2], *b[2];
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){5, IN}, xs, sizeof xs, &xt));
    em_feed f = {x, xt};
    CHECK(em_exec_run(eager, &f, 1, a));
    CHECK(em_exec_run(gr, &f, 1, b));
    em_tensor_release(xt);
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    if (st.graph_replayed != (k >= 2)) {
      char d[2048];
      em_exec_describe(gr, d, sizeof d);
      fail_msg("run %d: replayed %d: %s", k, st.graph_replayed, strstr(d, "graphs:") ? strstr(d, "graphs:") : d);
    }
    for (int o = 0; o < 2; o++) {
      float fa[5 * 9], fb[5 * 9];
      size_t n = (size_t)em_tensor_numel(a[o]) * sizeof(float);
      assert_true(n <= sizeof fa && n == (size_t)em_tensor_numel(b[o]) * sizeof(float));
      CHECK(em_tensor_to_host(a[o], fa, n));
      CHECK(em_tensor_to_host(b[o], fb, n));
      if (memcmp(fa, fb, n)) fail_msg("run %d: output %d differs from the eager executor's", k, o);
      if (o == 0) /* and the gather is right: row 4 first, from this run's input */
        for (int j = 0; j < IN; j++) assert_true(fa[j] == xs[4 * IN + j]);
      em_tensor_release(a[o]), em_tensor_release(b[o]);
    }
  }
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(g);
}

/* No page-locked memory for the learners' tables (the double fails the
 * second cuMemHostAlloc, the first being the device checks' record): the
 * capture is given up before it begins, the step runs eagerly, right, and
 * the reason is kept; the trainer does not fail. */
static void test_no_pinned_memory_stays_eager(void **state) {
  (void)state;
  setenv("FAKECUDA_FAIL", "cuMemHostAlloc=2@2", 1);
  NEED_DOUBLE(NULL);
  em_trainer_options o = portable_on_gpu();
  const int rows[5] = {8, 8, 8, 8, 8};
  const int want[5] = {0, 0, 0, 0, 0};
  net a, b;
  train_both(EM_LEARNER_ADAM, &o, 1, rows, NULL, 5, want, "no pinned memory", &a, &b);
  char d[4096];
  em_exec_describe(em_trainer_train_exec(b.t), d, sizeof d);
  if (!strstr(d, "no page-locked memory for the")) fail_msg("the reason is missing: %s", d);
  em_exec_stats st;
  stats_of(&b, &st);
  assert_int_equal(st.graph_captures, 0);
  net_free(&a), net_free(&b);
  unsetenv("FAKECUDA_FAIL");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_train_steps_replay_bitwise, teardown),
      cmocka_unit_test_teardown(test_every_learner_kind_replays, teardown),
      cmocka_unit_test_teardown(test_batch_size_change_recaptures, teardown),
      cmocka_unit_test_teardown(test_loss_scaling_skip_under_replay, teardown),
      cmocka_unit_test_teardown(test_replayed_dropout_draws_each_steps_mask, teardown),
      cmocka_unit_test_teardown(test_old_driver_trains_eagerly, teardown),
      cmocka_unit_test_teardown(test_no_pinned_memory_stays_eager, teardown),
      cmocka_unit_test_teardown(test_gather_and_resize_tables_replay, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
