/* The trainer (trainer.h, training/trainer.c) at the API level, against
 * float64 references written here:
 *  - SGD on a linear least-squares model: after each minibatch (sizes 4, 2,
 *    3, 1) the weights equal w <- w - lr * d(mean loss)/dw computed by hand,
 *    and the epoch's loss is the sample-weighted mean of the minibatches'
 *    losses (CNTK's aggregation), not the mean of the means;
 *  - a metric (classification error) aggregated the same way, and
 *    test_minibatch counting apart from training and changing no weight;
 *  - the refusals (no learner, a loss of the wrong shape, a parameter in
 *    two learners, a learner over a value that is not a parameter, no
 *    feeds), each leaving no trainer behind;
 *  - training mode on the training executor only (dropout drops there);
 *  - divergence: a step whose gradient is inf (with and without clipping
 *    by global norm, on the CPU and a GPU) or whose loss is inf fails
 *    naming the step and counts nothing, em_trainer_fit stops there and
 *    keeps the last good checkpoint (its source where the last good step
 *    left it), a checkpoint of a model holding NaN or inf is refused, and
 *    restoring the diverged trainer equals restoring a fresh one.
 * The end-to-end runs on Fashion-MNIST are in test_train_e2e.c. */
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

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

/* y = x @ w^T, per-sample loss (y - t)^2, w [1, 3]. */
typedef struct linear {
  em_graph *g;
  em_var x, t, w, y, loss;
} linear;

static void linear_build(linear *m, const double w0[3]) {
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 2, (int64_t[]){-1, 3}, &m->x));
  CHECK(em_input(m->g, "t", EM_F32, 2, (int64_t[]){-1, 1}, &m->t));
  float wf[3] = {(float)w0[0], (float)w0[1], (float)w0[2]};
  em_tensor *wt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){1, 3}, wf, sizeof wf, &wt));
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = wt};
  CHECK(em_parameter(m->g, "w", EM_F32, 2, (int64_t[]){1, 3}, &init, &m->w));
  em_tensor_release(wt);
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  CHECK(em_apply(m->g, "matmul", (em_var[]){m->x, m->w}, 2, &tb, 1, &m->y, 1));
  CHECK(em_apply(m->g, "squared_error", (em_var[]){m->y, m->t}, 2, NULL, 0, &m->loss, 1));
}

static em_learner *sgd(const em_var *params, int n, double lr) {
  em_learner_config cfg;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, lr, &cfg));
  em_learner *l;
  CHECK(em_learner_create(&cfg, NULL, params, n, &l));
  return l;
}

/* Deterministic data: x in [-1, 1), t = 0.5 x0 - x1 + 2 x2 + noise. */
static void data(int n, uint64_t seed, float *x, float *t) {
  uint64_t s = seed;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < 3; j++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[3 * i + j] = (float)((double)(s >> 40) / 8388608.0 - 1.0);
    }
    t[i] = (float)(0.5 * x[3 * i] - x[3 * i + 1] + 2 * x[3 * i + 2] + 0.01 * (i % 3));
  }
}

static void read_w(const linear *m, float w[3]) {
  em_tensor *p;
  CHECK(em_parameter_get(m->g, m->w, em_cpu(), &p));
  CHECK(em_tensor_to_host(p, w, 3 * sizeof(float)));
  em_tensor_release(p);
}

static void test_sgd_matches_reference_and_aggregates_by_samples(void **state) {
  (void)state;
  const double w0[3] = {0.1, -0.2, 0.3}, lr = 0.1;
  linear m;
  linear_build(&m, w0);
  em_learner *l = sgd(&m.w, 1, lr);
  em_trainer *t;
  CHECK(em_trainer_create(m.g, m.loss, -1, &l, 1, NULL, &t));

  static const int sizes[] = {4, 2, 3, 1};
  float x[10 * 3], tt[10];
  data(10, 7, x, tt);
  double w[3] = {w0[0], w0[1], w0[2]}, loss_sum = 0;
  int at = 0, samples = 0;
  for (size_t b = 0; b < sizeof sizes / sizeof sizes[0]; b++) {
    int n = sizes[b];
    /* The reference: mean loss and its gradient at the current w. */
    double mean = 0, grad[3] = {0, 0, 0};
    for (int i = at; i < at + n; i++) {
      double y = 0;
      for (int j = 0; j < 3; j++) y += w[j] * (double)x[3 * i + j];
      double r = y - (double)tt[i];
      mean += r * r / n;
      for (int j = 0; j < 3; j++) grad[j] += 2 * r * (double)x[3 * i + j] / n;
    }
    em_tensor *xt, *tt_;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, 3}, x + 3 * at, sizeof(float) * 3 * (size_t)n, &xt));
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, 1}, tt + at, sizeof(float) * (size_t)n, &tt_));
    em_feed feeds[2] = {{m.x, xt}, {m.t, tt_}};
    em_minibatch_result r;
    CHECK(em_trainer_train_minibatch(t, feeds, 2, &r));
    em_tensor_release(xt);
    em_tensor_release(tt_);
    assert_int_equal(r.samples, (uint64_t)n);
    if (fabs(r.loss - mean) > 1e-5 * (1 + mean)) fail_msg("minibatch %zu: loss %.9g, reference %.9g", b, r.loss, mean);
    assert_true(isnan(r.metric));
    for (int j = 0; j < 3; j++) w[j] -= lr * grad[j];
    float got[3];
    read_w(&m, got);
    for (int j = 0; j < 3; j++)
      if (fabs(got[j] - w[j]) > 1e-5) fail_msg("minibatch %zu: w[%d] = %.9g, reference %.9g", b, j, got[j], w[j]);
    loss_sum += mean * n;
    samples += n;
    at += n;
  }
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.steps, 4);
  assert_int_equal(tot.samples, 10);
  assert_int_equal(tot.epoch_minibatches, 4);
  assert_int_equal(tot.epoch_samples, 10);
  assert_int_equal(tot.epoch, 0);
  if (fabs(tot.epoch_loss - loss_sum / samples) > 1e-5)
    fail_msg("epoch loss %.9g, sample-weighted reference %.9g", tot.epoch_loss, loss_sum / samples);
  assert_true(isnan(tot.epoch_metric));
  assert_true(tot.epoch_seconds >= 0);
  assert_int_equal(em_learner_steps(l), 4);
  assert_int_equal(em_learner_samples(l), 10);

  /* A new epoch starts its own means; the totals go on. */
  CHECK(em_trainer_end_epoch(t));
  CHECK(em_trainer_begin_epoch(t));
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.epoch, 1);
  assert_int_equal(tot.epoch_samples, 0);
  assert_true(isnan(tot.epoch_loss));
  assert_int_equal(tot.samples, 10);

  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(m.g);
}

/* Two classes of 2-D points; logits = x @ w^T + b; metric classification
 * error. */
static void test_metric_and_test_minibatch(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, label, w, b, h, logits, ce, err;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 2}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &label));
  em_init zero = {.kind = EM_INIT_CONSTANT, .value = 0};
  CHECK(em_parameter(g, "w", EM_F32, 2, (int64_t[]){2, 2}, &zero, &w));
  CHECK(em_parameter(g, "b", EM_F32, 1, (int64_t[]){2}, &zero, &b));
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  CHECK(em_apply(g, "matmul", (em_var[]){x, w}, 2, &tb, 1, &h, 1));
  CHECK(em_apply(g, "add", (em_var[]){h, b}, 2, NULL, 0, &logits, 1));
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){logits, label}, 2, NULL, 0, &ce, 1));
  CHECK(em_apply(g, "classification_error", (em_var[]){logits, label}, 2, NULL, 0, &err, 1));
  em_var params[2] = {w, b};
  em_learner *l = sgd(params, 2, 0.5);
  em_trainer *t;
  CHECK(em_trainer_create(g, ce, err, &l, 1, NULL, &t));

  /* With w = b = 0 every logit is 0: the loss is ln 2 per sample, and the
   * error of a tie is counted as CNTK does (1 unless the label is the first
   * maximum): independently, the first test minibatch's error is the share
   * of labels that are not class 0. */
  float xs[6 * 2] = {1, 0, 0.9f, 0.1f, 0, 1, 0.2f, 0.8f, 1, 0.2f, 0.1f, 1};
  int32_t ys[6] = {0, 0, 1, 1, 0, 1};
  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){6, 2}, xs, sizeof xs, &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){6}, ys, sizeof ys, &yt));
  em_feed feeds[2] = {{x, xt}, {label, yt}};
  em_minibatch_result r;
  CHECK(em_trainer_test_minibatch(t, feeds, 2, &r));
  assert_int_equal(r.samples, 6);
  assert_true(fabs(r.loss - log(2.0)) < 1e-6);
  assert_true(fabs(r.metric - 0.5) < 1e-12);
  /* Evaluation changed nothing and counted only as test. */
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.steps, 0);
  assert_int_equal(tot.test_samples, 6);
  float wv[4];
  em_tensor *wt;
  CHECK(em_parameter_get(g, w, em_cpu(), &wt));
  CHECK(em_tensor_to_host(wt, wv, sizeof wv));
  em_tensor_release(wt);
  for (int i = 0; i < 4; i++) assert_true(wv[i] == 0.0f);

  /* Training separates the two clusters: after 30 steps no error. */
  for (int i = 0; i < 30; i++) CHECK(em_trainer_train_minibatch(t, feeds, 2, &r));
  assert_true(r.metric == 0.0);
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.epoch_samples, 180);
  assert_true(tot.epoch_metric > 0 && tot.epoch_metric < 0.5);

  /* A second test minibatch of 2 samples weighs a third of the first. */
  em_tensor *x2, *y2;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){2, 2}, xs, 4 * sizeof(float), &x2));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){2}, (int32_t[]){1, 1}, 2 * sizeof(int32_t), &y2));
  em_feed f2[2] = {{x, x2}, {label, y2}};
  em_minibatch_result r2;
  CHECK(em_trainer_test_minibatch(t, f2, 2, &r2));
  assert_true(r2.metric == 1.0); /* both points are class 0's */
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.test_samples, 8);
  assert_true(fabs(tot.test_metric - (0.5 * 6 + 1.0 * 2) / 8) < 1e-12);
  CHECK(em_trainer_reset_test(t));
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.test_samples, 0);
  assert_true(isnan(tot.test_metric));

  em_tensor_release(xt);
  em_tensor_release(yt);
  em_tensor_release(x2);
  em_tensor_release(y2);
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(g);
}

static void test_refusals(void **state) {
  (void)state;
  const double w0[3] = {0, 0, 0};
  linear m;
  linear_build(&m, w0);
  em_learner *l = sgd(&m.w, 1, 0.1), *l2 = sgd(&m.w, 1, 0.1);
  em_trainer *t = (em_trainer *)1;
  assert_int_equal(em_trainer_create(m.g, m.loss, -1, NULL, 0, NULL, &t), EM_ERR_INVALID_ARGUMENT);
  assert_null(t);
  assert_non_null(strstr(em_last_error(), "learner"));
  /* y is [N, 1]: neither a scalar nor a per-sample vector. */
  assert_int_equal(em_trainer_create(m.g, m.y, -1, &l, 1, NULL, &t), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "loss"));
  em_learner *both[2] = {l, l2};
  assert_int_equal(em_trainer_create(m.g, m.loss, -1, both, 2, NULL, &t), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "'w'"));
  assert_int_equal(em_trainer_create(m.g, m.loss, -1, &l, 1, &(em_trainer_options){.mode = (em_mode)7}, &t),
                   EM_ERR_INVALID_ARGUMENT);
  /* A learner over a value that is not a parameter (the computed y, a
   * constant) would update a buffer nobody reads: refused naming it. */
  CHECK(em_var_set_name(m.g, m.y, "prediction"));
  em_tensor *ct;
  em_var cst;
  CHECK(em_tensor_zeros(em_cpu(), EM_F32, 2, (int64_t[]){1, 3}, &ct));
  CHECK(em_constant(m.g, ct, &cst));
  em_tensor_release(ct);
  em_var over[2][2] = {{m.w, m.y}, {m.w, cst}};
  for (int k = 0; k < 2; k++) {
    em_learner *bad = sgd(over[k], 2, 0.1);
    t = (em_trainer *)1;
    assert_int_equal(em_trainer_create(m.g, m.loss, -1, &bad, 1, NULL, &t), EM_ERR_INVALID_ARGUMENT);
    assert_null(t);
    assert_non_null(strstr(em_last_error(), "is not a parameter"));
    assert_non_null(strstr(em_last_error(), k ? "value" : "'prediction'"));
    em_learner_free(bad);
  }
  em_learner_free(l);
  em_learner_free(l2);
  em_graph_free(m.g);

  linear_build(&m, w0);
  l = sgd(&m.w, 1, 0.1);
  CHECK(em_trainer_create(m.g, m.loss, -1, &l, 1, NULL, &t));
  assert_int_equal(em_trainer_train_minibatch(t, NULL, 0, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "no feeds"));
  /* A run that fails (the target not fed) counts nothing. */
  em_tensor *xt;
  CHECK(em_tensor_zeros(em_cpu(), EM_F32, 2, (int64_t[]){2, 3}, &xt));
  em_feed only_x = {m.x, xt};
  assert_int_not_equal(em_trainer_train_minibatch(t, &only_x, 1, NULL), EM_OK);
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.steps, 0);
  assert_int_equal(em_learner_steps(l), 0);
  em_tensor_release(xt);
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(m.g);
  em_trainer_free(NULL);
}

/* The training executor is in training mode, the evaluation one is not:
 * dropout (rate 0.5) zeroes about half of a constant input in training and
 * none in evaluation. loss = mean(dropout(x) * w), w = 1, a zero learning
 * rate keeps w. */
static void test_training_mode_only_when_training(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, w, d, y, loss;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 64}, &x));
  em_init one = {.kind = EM_INIT_CONSTANT, .value = 1};
  CHECK(em_parameter(g, "w", EM_F32, 1, (int64_t[]){64}, &one, &w));
  em_attr ratio = {.name = "ratio", .type = EM_ATTR_FLOAT, .f = 0.5};
  CHECK(em_apply(g, "dropout", &x, 1, &ratio, 1, &d, 1));
  CHECK(em_apply(g, "mul", (em_var[]){d, w}, 2, NULL, 0, &y, 1));
  CHECK(em_apply(g, "reduce_mean", &y, 1, NULL, 0, &loss, 1));
  em_learner *l = sgd(&w, 1, 0);
  em_trainer *t;
  CHECK(em_trainer_create(g, loss, -1, &l, 1, NULL, &t));
  em_tensor *xt;
  float ones[4 * 64];
  for (int i = 0; i < 4 * 64; i++) ones[i] = 1;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){4, 64}, ones, sizeof ones, &xt));
  em_feed f = {x, xt};
  em_minibatch_result tr, ev;
  CHECK(em_trainer_train_minibatch(t, &f, 1, &tr));
  CHECK(em_trainer_test_minibatch(t, &f, 1, &ev));
  /* Kept elements are scaled by 2, dropped ones are 0: the training mean is
   * 2 * (kept share), never exactly 1 for 256 fair draws in practice, and
   * always a multiple of 2/256. Inference is the identity: exactly 1. */
  assert_true(ev.loss == 1.0);
  assert_true(tr.loss != 1.0);
  assert_true(fabs(tr.loss * 128 - round(tr.loss * 128)) < 1e-6);
  assert_true(tr.loss > 0.5 && tr.loss < 1.5);
  em_tensor_release(xt);
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(g);
}

/* The trainer's own record: a round trip restores the accounting and the
 * executors' run counters; a foreign, truncated or mismatched record is
 * refused naming the byte and changes nothing. */
static void test_state_record(void **state) {
  (void)state;
  const double w0[3] = {0.5, 0.5, 0.5};
  linear m;
  linear_build(&m, w0);
  em_learner *l = sgd(&m.w, 1, 0.01);
  em_trainer *t;
  CHECK(em_trainer_create(m.g, m.loss, -1, &l, 1, NULL, &t));
  float x[6 * 3], tt[6];
  data(6, 3, x, tt);
  em_tensor *xt, *tt_;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){6, 3}, x, sizeof x, &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){6, 1}, tt, sizeof tt, &tt_));
  em_feed feeds[2] = {{m.x, xt}, {m.t, tt_}};
  for (int i = 0; i < 3; i++) CHECK(em_trainer_train_minibatch(t, feeds, 2, NULL));
  void *rec;
  size_t n;
  CHECK(em_trainer_state_save(t, &rec, &n));
  em_trainer_totals before;
  CHECK(em_trainer_get_totals(t, &before));

  /* Two more steps, then back to the record. */
  for (int i = 0; i < 2; i++) CHECK(em_trainer_train_minibatch(t, feeds, 2, NULL));
  CHECK(em_trainer_state_load(t, rec, n));
  em_trainer_totals after;
  CHECK(em_trainer_get_totals(t, &after));
  assert_int_equal(after.steps, 3);
  assert_int_equal(after.samples, 18);
  assert_true(after.epoch_loss == before.epoch_loss);
  em_exec_stats st;
  CHECK(em_exec_stats_get(em_trainer_train_exec(t), &st));
  assert_int_equal(st.runs, 3);

  /* Refusals. */
  unsigned char *bad = malloc(n);
  assert_non_null(bad);
  memcpy(bad, rec, n);
  bad[0] ^= 1;
  assert_int_equal(em_trainer_state_load(t, bad, n), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "byte 0"));
  memcpy(bad, rec, n);
  assert_int_equal(em_trainer_state_load(t, bad, n - 1), EM_ERR_CORRUPT);
  bad[8] = 9; /* version 9 */
  assert_int_equal(em_trainer_state_load(t, bad, n), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "version 9"));
  assert_int_equal(em_trainer_state_load(t, bad, 3), EM_ERR_CORRUPT);
  CHECK(em_trainer_get_totals(t, &after));
  assert_int_equal(after.steps, 3);

  /* A record of a trainer without a metric into one with a metric. */
  em_var err;
  CHECK(em_apply(m.g, "squared_error", (em_var[]){m.y, m.t}, 2, NULL, 0, &err, 1));
  em_learner *l2 = sgd(&m.w, 1, 0.01);
  em_trainer *t2;
  CHECK(em_trainer_create(m.g, m.loss, err, &l2, 1, NULL, &t2));
  assert_int_equal(em_trainer_state_load(t2, rec, n), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "metric"));

  free(bad);
  free(rec);
  em_tensor_release(xt);
  em_tensor_release(tt_);
  em_trainer_free(t2);
  em_learner_free(l2);
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(m.g);
}

/* Two learners, the one over the LAST layer listed first: y = (x @ W1^T) @
 * W2^T, W1 [2, 3] with SGD at 0.05, W2 [1, 2] with SGD at 0.1, learners
 * {W2's, W1's} (named apart: two of the default name are refused). W1's gradient reads W2 (dL/dh = r * W2), so every gradient
 * must be computed before either update writes its parameters: the trainer
 * must accept the learners in any order, and each step must equal SGD on
 * the gradients at the step's start (float64 reference). */
static void test_two_learners_last_layer_first(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, tv, w1, w2, h, y, loss;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 3}, &x));
  CHECK(em_input(g, "t", EM_F32, 2, (int64_t[]){-1, 1}, &tv));
  const float w1f[6] = {0.2f, -0.1f, 0.3f, 0.4f, 0.1f, -0.2f}, w2f[2] = {0.5f, -0.3f};
  em_tensor *a, *b;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){2, 3}, w1f, sizeof w1f, &a));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){1, 2}, w2f, sizeof w2f, &b));
  em_init ia = {.kind = EM_INIT_FROM_DATA, .data = a}, ib = {.kind = EM_INIT_FROM_DATA, .data = b};
  CHECK(em_parameter(g, "w1", EM_F32, 2, (int64_t[]){2, 3}, &ia, &w1));
  CHECK(em_parameter(g, "w2", EM_F32, 2, (int64_t[]){1, 2}, &ib, &w2));
  em_tensor_release(a);
  em_tensor_release(b);
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  CHECK(em_apply(g, "matmul", (em_var[]){x, w1}, 2, &tb, 1, &h, 1));
  CHECK(em_apply(g, "matmul", (em_var[]){h, w2}, 2, &tb, 1, &y, 1));
  CHECK(em_apply(g, "squared_error", (em_var[]){y, tv}, 2, NULL, 0, &loss, 1));
  /* Two learners of one kind and the default name share their
   * hyperparameter input: refused, not trained with one learner's rates. */
  em_learner *same[2] = {sgd(&w2, 1, 0.1), sgd(&w1, 1, 0.05)};
  em_trainer *t;
  assert_int_equal(em_trainer_create(g, loss, -1, same, 2, NULL, &t), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "same name"));
  em_learner_free(same[0]);
  em_learner_free(same[1]);
  em_learner_config cfg;
  em_learner *ls[2];
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &cfg));
  CHECK(em_learner_create(&cfg, "top", &w2, 1, &ls[0]));
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.05, &cfg));
  CHECK(em_learner_create(&cfg, "bottom", &w1, 1, &ls[1]));
  CHECK(em_trainer_create(g, loss, -1, ls, 2, NULL, &t));

  double W1[6], W2[2];
  for (int i = 0; i < 6; i++) W1[i] = w1f[i];
  for (int i = 0; i < 2; i++) W2[i] = w2f[i];
  float xs[4 * 3], ts[4];
  data(4, 11, xs, ts);
  em_tensor *xt, *tt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){4, 3}, xs, sizeof xs, &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){4, 1}, ts, sizeof ts, &tt));
  em_feed feeds[2] = {{x, xt}, {tv, tt}};
  for (int step = 0; step < 3; step++) {
    double g1[6] = {0}, g2[2] = {0};
    for (int i = 0; i < 4; i++) {
      double hh[2], yy = 0;
      for (int k = 0; k < 2; k++) {
        hh[k] = 0;
        for (int j = 0; j < 3; j++) hh[k] += W1[3 * k + j] * xs[3 * i + j];
        yy += W2[k] * hh[k];
      }
      double r = 2 * (yy - ts[i]) / 4;
      for (int k = 0; k < 2; k++) {
        g2[k] += r * hh[k];
        for (int j = 0; j < 3; j++) g1[3 * k + j] += r * W2[k] * xs[3 * i + j];
      }
    }
    for (int k = 0; k < 2; k++) W2[k] -= 0.1 * g2[k];
    for (int k = 0; k < 6; k++) W1[k] -= 0.05 * g1[k];
    CHECK(em_trainer_train_minibatch(t, feeds, 2, NULL));
    float got1[6], got2[2];
    em_tensor *p;
    CHECK(em_parameter_get(g, w1, em_cpu(), &p));
    CHECK(em_tensor_to_host(p, got1, sizeof got1));
    em_tensor_release(p);
    CHECK(em_parameter_get(g, w2, em_cpu(), &p));
    CHECK(em_tensor_to_host(p, got2, sizeof got2));
    em_tensor_release(p);
    for (int k = 0; k < 6; k++)
      if (fabs(got1[k] - W1[k]) > 1e-5) fail_msg("step %d: w1[%d] = %.9g, reference %.9g", step, k, got1[k], W1[k]);
    for (int k = 0; k < 2; k++)
      if (fabs(got2[k] - W2[k]) > 1e-5) fail_msg("step %d: w2[%d] = %.9g, reference %.9g", step, k, got2[k], W2[k]);
  }
  em_tensor_release(xt);
  em_tensor_release(tt);
  em_trainer_free(t);
  em_learner_free(ls[0]);
  em_learner_free(ls[1]);
  em_graph_free(g);
}

/* ------------------------------------------------------- divergence --- */

static int g_gpus;

/* loss = mean(x * sqrt(p) + x * q), p = 0, q = 1, x = 1: the loss is 1
 * (finite) but d loss / dp = 0.5 / sqrt(0) = +inf (IEEE: 1 / +0). With
 * clipping by global norm the norm is inf; PyTorch's clip_grad_norm_
 * would then scale every gradient by 0 (inf) or NaN, and Ember's kernel
 * today keeps q's finite gradient: either way the step must not pass
 * unnoticed. The trainer fails it with EM_ERR_NOT_FINITE naming the step
 * and the parameter, and counts nothing; on the CPU and on a GPU. */
static void test_non_finite_gradient_fails_the_step(void **state) {
  (void)state;
  for (int on_gpu = 0; on_gpu < 2; on_gpu++) {
    if (on_gpu && !g_gpus) {
      print_message("no CUDA driver, real or test double: the GPU half is skipped\n");
      break;
    }
    for (int clip = 0; clip < 2; clip++) {
      em_graph *g;
      CHECK(em_graph_create(&g));
      em_var x, p, q, r, a, b, y, loss;
      CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 1}, &x));
      em_init zero = {.kind = EM_INIT_CONSTANT, .value = 0}, one = {.kind = EM_INIT_CONSTANT, .value = 1};
      CHECK(em_parameter(g, "q", EM_F32, 1, (int64_t[]){1}, &one, &q));
      CHECK(em_parameter(g, "p", EM_F32, 1, (int64_t[]){1}, &zero, &p));
      CHECK(em_apply(g, "sqrt", &p, 1, NULL, 0, &r, 1));
      CHECK(em_apply(g, "mul", (em_var[]){x, r}, 2, NULL, 0, &a, 1));
      CHECK(em_apply(g, "mul", (em_var[]){x, q}, 2, NULL, 0, &b, 1));
      CHECK(em_apply(g, "add", (em_var[]){a, b}, 2, NULL, 0, &y, 1));
      CHECK(em_apply(g, "reduce_mean", &y, 1, NULL, 0, &loss, 1));
      em_learner_config cfg;
      CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &cfg));
      if (clip) cfg.clip_norm = 1;
      em_learner *l;
      CHECK(em_learner_create(&cfg, NULL, (em_var[]){q, p}, 2, &l));
      em_trainer *t;
      em_trainer_options to = {.device = on_gpu ? em_cuda(0) : em_cpu(), .mode = EM_MODE_PORTABLE};
      CHECK(em_trainer_create(g, loss, -1, &l, 1, &to, &t));
      const float ones[4] = {1, 1, 1, 1};
      em_tensor *xt;
      CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){4, 1}, ones, sizeof ones, &xt));
      em_feed f = {x, xt};
      em_minibatch_result res = {.samples = 99};
      assert_int_equal(em_trainer_train_minibatch(t, &f, 1, &res), EM_ERR_NOT_FINITE);
      const char *msg = em_last_error();
      if (!strstr(msg, "step 1") || !strstr(msg, "gradient of parameter 'p'") || !strstr(msg, "inf"))
        fail_msg("on %s, clip %d: %s", on_gpu ? "a GPU" : "the CPU", clip, msg);
      assert_int_equal(res.samples, 99); /* out is not written */
      em_trainer_totals tot;
      CHECK(em_trainer_get_totals(t, &tot));
      assert_int_equal(tot.steps, 0);
      assert_int_equal(tot.samples, 0);
      assert_int_equal(em_learner_steps(l), 0);
      em_tensor_release(xt);
      em_trainer_free(t);
      em_learner_free(l);
      em_graph_free(g);
    }
  }
}

/* The linear model's data set in memory: streams "x" [3] and "t" [1]. */
static em_dataset *linear_dataset(int n) {
  float *x = malloc(sizeof(float) * 3 * (size_t)n), *tt = malloc(sizeof(float) * (size_t)n);
  assert_non_null(x);
  assert_non_null(tt);
  data(n, 5, x, tt);
  em_dataset *d;
  CHECK(em_dataset_create(&d));
  em_stream_desc dx = {.name = "x", .dtype = EM_F32, .ndim = 1, .shape = {3}};
  em_stream_desc dt = {.name = "t", .dtype = EM_F32, .ndim = 1, .shape = {1}};
  CHECK(em_dataset_add_stream(d, &dx, n, x, sizeof(float) * 3 * (size_t)n));
  CHECK(em_dataset_add_stream(d, &dt, n, tt, sizeof(float) * (size_t)n));
  free(x);
  free(tt);
  return d;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)size + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *n = (size_t)size;
  return b;
}

typedef struct snapshot {
  const char *path;
  uint64_t at_total_samples;
  unsigned char *bytes;
  size_t n;
} snapshot;

static int take_snapshot(const em_train_report *r, void *user) {
  snapshot *sn = user;
  if (r->total_samples == sn->at_total_samples) sn->bytes = slurp(sn->path, &sn->n);
  return 0;
}

/* A run whose last minibatch of epoch 2 diverges: 12 samples in
 * minibatches of 4 (3 steps an epoch), SGD at 0.01 but 1e30 for step 5
 * (samples 16 to 19), which throws the weights to about 1e30, so step 6's
 * loss overflows to inf. em_trainer_fit stops there with
 * EM_ERR_NOT_FINITE naming epoch 2 and step 6, and the checkpoint written
 * after epoch 1 is still there byte for byte: the diverged epoch never
 * replaces the last good one. */
static void test_diverged_last_minibatch_keeps_the_checkpoint(void **state) {
  (void)state;
  char dir[] = "/tmp/ember_trainer_XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/run.ckpt", dir);
  const double w0[3] = {0.5, -0.5, 0.25};
  linear m;
  linear_build(&m, w0);
  const double lrs[3] = {0.01, 1e30, 0.01};
  const uint64_t counts[3] = {4, 1, 1};
  em_learner_config cfg;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0, &cfg));
  cfg.lr = (em_schedule){.n = 3, .values = lrs, .counts = counts, .epoch_size = 4};
  em_learner *l;
  CHECK(em_learner_create(&cfg, NULL, &m.w, 1, &l));
  em_trainer *t;
  CHECK(em_trainer_create(m.g, m.loss, -1, &l, 1, NULL, &t));
  em_dataset *d = linear_dataset(12);
  em_minibatch_source *src;
  CHECK(em_minibatch_source_create(d, &(em_minibatch_options){.batch_size = 4, .no_prefetch = 1}, &src));
  snapshot sn = {.path = path, .at_total_samples = 16}; /* after step 4: epoch 1's checkpoint is written */
  em_var inputs[2] = {m.x, m.t};
  em_fit_options fo = {.epochs = 3, .train = src, .inputs = inputs, .n_inputs = 2, .checkpoint = path,
                       .on_minibatch = take_snapshot, .user = &sn};
  em_fit_result fr;
  em_status s = em_trainer_fit(t, &fo, &fr);
  if (s != EM_ERR_NOT_FINITE) fail_msg("fit gave %s: %s", em_status_name(s), em_last_error());
  const char *msg = em_last_error();
  if (!strstr(msg, "epoch 2") || !strstr(msg, "step 6") || !strstr(msg, "loss is inf"))
    fail_msg("the message names neither the epoch, the step nor the loss: %s", msg);
  assert_non_null(sn.bytes);
  size_t n;
  unsigned char *now = slurp(path, &n);
  assert_int_equal(n, sn.n);
  assert_memory_equal(now, sn.bytes, n);
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(t, &tot));
  assert_int_equal(tot.epoch, 1);
  assert_int_equal(tot.steps, 5);
  free(now);
  free(sn.bytes);
  em_minibatch_source_free(src);
  em_dataset_free(d);
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(m.g);
  unlink(path);
  rmdir(dir);
}

/* A checkpoint of a model holding inf or NaN (an update that overflowed
 * after a finite loss) is refused naming the value and the element, and
 * the previous checkpoint file stays as it was. */
static void test_checkpoint_refuses_non_finite_values(void **state) {
  (void)state;
  char dir[] = "/tmp/ember_trainer_XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/run.ckpt", dir);
  const double w0[3] = {0.5, -0.5, 0.25};
  linear m;
  linear_build(&m, w0);
  em_learner *l = sgd(&m.w, 1, 0.01);
  em_trainer *t;
  CHECK(em_trainer_create(m.g, m.loss, -1, &l, 1, NULL, &t));
  CHECK(em_trainer_save_checkpoint(t, path, NULL, NULL, 0));
  size_t n0;
  unsigned char *before = slurp(path, &n0);
  const float bad[2][3] = {{0.5f, INFINITY, 0.25f}, {0.5f, -0.5f, NAN}};
  for (int k = 0; k < 2; k++) {
    em_tensor *v;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){1, 3}, bad[k], sizeof bad[k], &v));
    CHECK(em_parameter_set(m.g, m.w, v));
    em_tensor_release(v);
    assert_int_equal(em_trainer_save_checkpoint(t, path, NULL, NULL, 0), EM_ERR_NOT_FINITE);
    assert_non_null(strstr(em_last_error(), k ? "'w' element 2 is nan" : "'w' element 1 is inf"));
    assert_non_null(strstr(em_last_error(), path));
    size_t n;
    unsigned char *after = slurp(path, &n);
    assert_int_equal(n, n0);
    assert_memory_equal(after, before, n);
    free(after);
  }
  free(before);
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(m.g);
  unlink(path);
  rmdir(dir);
}


/* After em_trainer_fit stopped at a diverged step (the scenario above:
 * step 6's loss is inf), the source is where the last good step left it
 * (trainer.h: "the trainer's accounting and the source are as after the
 * last good step": 5 steps of 4 samples, 20 samples seen, not the 24 the
 * failed minibatch read), and restoring epoch 1's checkpoint into the
 * diverged trainer gives the trainer a fresh one restored from it has: the
 * same accounting, learner steps, weights and source position, and the
 * same next step bit for bit. */
static void test_resume_after_a_diverged_step(void **state) {
  (void)state;
  char dir[] = "/tmp/ember_trainer_XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/run.ckpt", dir);
  const double w0[3] = {0.5, -0.5, 0.25};
  const double lrs[3] = {0.01, 1e30, 0.01};
  const uint64_t counts[3] = {4, 1, 1};
  em_learner_config cfg;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0, &cfg));
  cfg.lr = (em_schedule){.n = 3, .values = lrs, .counts = counts, .epoch_size = 4};
  em_dataset *d = linear_dataset(12);
  linear m[2];
  em_learner *l[2];
  em_trainer *t[2];
  em_minibatch_source *src[2];
  for (int k = 0; k < 2; k++) {
    linear_build(&m[k], w0);
    CHECK(em_learner_create(&cfg, NULL, &m[k].w, 1, &l[k]));
    CHECK(em_trainer_create(m[k].g, m[k].loss, -1, &l[k], 1, NULL, &t[k]));
    CHECK(em_minibatch_source_create(d, &(em_minibatch_options){.batch_size = 4, .no_prefetch = 1}, &src[k]));
  }
  em_var inputs[2] = {m[0].x, m[0].t};
  em_fit_options fo = {.epochs = 3, .train = src[0], .inputs = inputs, .n_inputs = 2, .checkpoint = path};
  em_status s = em_trainer_fit(t[0], &fo, NULL);
  if (s != EM_ERR_NOT_FINITE) fail_msg("fit gave %s: %s", em_status_name(s), em_last_error());
  em_minibatch_position pos;
  CHECK(em_minibatch_get_position(src[0], &pos));
  if (pos.samples_seen != 20)
    fail_msg("after the diverged step 6 the source has seen %llu samples; the last good step left it at 20",
             (unsigned long long)pos.samples_seen);
  for (int k = 0; k < 2; k++) CHECK(em_trainer_restore_checkpoint(t[k], path, src[k]));
  em_trainer_totals tot[2];
  em_minibatch_position at[2];
  float w[2][3];
  for (int k = 0; k < 2; k++) {
    CHECK(em_trainer_get_totals(t[k], &tot[k]));
    CHECK(em_minibatch_get_position(src[k], &at[k]));
    read_w(&m[k], w[k]);
  }
  assert_int_equal(tot[0].epoch, 1);
  assert_int_equal(tot[0].steps, 3);
  assert_int_equal(tot[0].epoch, tot[1].epoch);
  assert_int_equal(tot[0].steps, tot[1].steps);
  assert_int_equal(tot[0].samples, tot[1].samples);
  assert_int_equal(tot[0].epoch_minibatches, tot[1].epoch_minibatches);
  assert_int_equal(tot[0].epoch_samples, tot[1].epoch_samples);
  assert_int_equal(em_learner_steps(l[0]), em_learner_steps(l[1]));
  assert_int_equal(at[0].samples_seen, at[1].samples_seen);
  assert_memory_equal(w[0], w[1], sizeof w[0]);
  for (int i = 0; i < 3; i++) assert_true(isfinite(w[0][i]));
  /* the next step (step 4, lr 0.01) on both */
  for (int k = 0; k < 2; k++) {
    em_minibatch mb = {0};
    CHECK(em_minibatch_next(src[k], &mb));
    em_feed f[2] = {{m[k].x, mb.values[0]}, {m[k].t, mb.values[1]}};
    em_minibatch_result r;
    CHECK(em_trainer_train_minibatch(t[k], f, 2, &r));
    em_minibatch_clear(&mb);
    read_w(&m[k], w[k]);
  }
  assert_memory_equal(w[0], w[1], sizeof w[0]);
  for (int k = 0; k < 2; k++) {
    em_minibatch_source_free(src[k]);
    em_trainer_free(t[k]);
    em_learner_free(l[k]);
    em_graph_free(m[k].g);
  }
  em_dataset_free(d);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  g_gpus = ts_use_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd_matches_reference_and_aggregates_by_samples),
      cmocka_unit_test(test_metric_and_test_minibatch),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_training_mode_only_when_training),
      cmocka_unit_test(test_state_record),
      cmocka_unit_test(test_two_learners_last_layer_first),
      cmocka_unit_test(test_non_finite_gradient_fails_the_step),
      cmocka_unit_test(test_diverged_last_minibatch_keeps_the_checkpoint),
      cmocka_unit_test(test_checkpoint_refuses_non_finite_values),
      cmocka_unit_test(test_resume_after_a_diverged_step),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
