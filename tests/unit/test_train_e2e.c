/* Training end to end: the trainer's loop (em_trainer_fit) over Fashion-MNIST
 * subsets read by the IDX reader, with the zoo's MLP and Adam, on the CPU
 * and on a GPU of the libcuda test double; checkpoints and resume.
 *
 *  - accuracy: 2000 training images, 12 epochs of minibatches of 50 (480
 *    steps) must classify at least 78% of 500 held-out test images (it
 *    reaches 84%; a model that learned nothing gets ~10%); on the test
 *    double's GPU in portable mode 2 epochs must end with the CPU's weights
 *    bit for bit and at least 70% (fewer steps under valgrind);
 *  - resume: a run stopped mid-epoch by a callback, checkpointed, restored
 *    into a fresh trainer (fresh graph, learner and source) and continued
 *    ends with the bits of a run that never stopped (weights, Adam's
 *    moments, the epoch's loss), with dropout in the model so the executor's
 *    run counter matters; and across devices: written on the GPU and resumed
 *    on the CPU, and the other way;
 *  - early stopping and the callbacks: the reports' counts and the stops;
 *  - a checkpoint of another model is refused and changes nothing.
 * Skips, saying so, when the data set is not installed
 * (/usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist) or, for
 * the GPU parts, when no driver (real or double) is present. */
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
#include <valgrind/valgrind.h>

#include "ember.h"
#include "gpu_double.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

#define DATA_DIR "/usr/share/datasets/fashion-mnist"

static em_dataset *g_train, *g_test; /* 2000 training images, 500 test images */
static int g_gpus;
static char g_dir[256];

static int setup(void **state) {
  (void)state;
  em_dataset *all;
  if (em_dataset_open_idx_dir(DATA_DIR, "train", 10, &all)) {
    fprintf(stderr, "test_train_e2e: %s: %s\n", DATA_DIR, em_last_error());
    return 0;
  }
  em_status s = em_dataset_slice(all, 0, 2000, &g_train);
  em_dataset_free(all);
  if (!s) s = em_dataset_open_idx_dir(DATA_DIR, "t10k", 10, &all);
  if (!s) {
    s = em_dataset_slice(all, 0, 500, &g_test);
    em_dataset_free(all);
  }
  if (s) return -1;
  g_gpus = ts_use_gpu();
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/ember-e2e-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  em_dataset_free(g_train);
  em_dataset_free(g_test);
  if (g_dir[0]) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "test_train_e2e: could not remove %s\n", g_dir);
  }
  em_shutdown();
  return 0;
}

#define NEED_DATA()                                                                          \
  do {                                                                                       \
    if (!g_train) {                                                                          \
      print_message("SKIPPED: Fashion-MNIST is not installed (" DATA_DIR ")\n");             \
      skip();                                                                                \
    }                                                                                        \
  } while (0)
#define NEED_GPU()                                                                           \
  do {                                                                                       \
    if (!g_gpus) {                                                                           \
      print_message("SKIPPED: no CUDA driver, real or test double\n");                       \
      skip();                                                                                \
    }                                                                                        \
  } while (0)

/* One training setup: the zoo's MLP 784-hidden-10 (dropout before the
 * output when asked), softmax cross entropy, classification error, Adam. */
typedef struct run {
  em_graph *g;
  em_var in[2];               /* x, label: fed from the streams features, labels */
  em_var loss, err;
  em_learner *l;
  em_trainer *t;
  em_minibatch_source *src, *val;
} run;

static void run_build(run *r, em_device dev, int64_t hidden, double dropout, const em_dataset *train, int64_t batch) {
  memset(r, 0, sizeof *r);
  CHECK(em_graph_create(&r->g));
  CHECK(em_input(r->g, "x", EM_F32, 4, (int64_t[]){-1, 1, 28, 28}, &r->in[0]));
  CHECK(em_input(r->g, "label", EM_I32, 1, (int64_t[]){-1}, &r->in[1]));
  em_model_opts mo = {.hidden = (int64_t[]){hidden}, .n_hidden = 1, .dropout = dropout};
  em_var logits;
  CHECK(em_model_mlp(r->g, r->in[0], 10, 7, &mo, &logits));
  CHECK(em_apply(r->g, "cross_entropy_with_softmax", (em_var[]){logits, r->in[1]}, 2, NULL, 0, &r->loss, 1));
  CHECK(em_apply(r->g, "classification_error", (em_var[]){logits, r->in[1]}, 2, NULL, 0, &r->err, 1));
  size_t np;
  em_var params[16];
  CHECK(em_graph_parameters(r->g, params, 16, &np));
  em_learner_config cfg;
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.002, &cfg));
  CHECK(em_learner_create(&cfg, NULL, params, (int)np, &r->l));
  em_trainer_options to = {.device = dev, .mode = EM_MODE_PORTABLE};
  CHECK(em_trainer_create(r->g, r->loss, r->err, &r->l, 1, &to, &r->t));
  em_minibatch_options so = {.batch_size = batch, .seed = 5, .shuffle = 1, .transform.scale = 1.0f / 255};
  CHECK(em_minibatch_source_create(train, &so, &r->src));
  em_minibatch_options vo = {.batch_size = 100, .max_sweeps = 1, .transform.scale = 1.0f / 255};
  CHECK(em_minibatch_source_create(g_test, &vo, &r->val));
}

static void run_free(run *r) {
  em_minibatch_source_free(r->src);
  em_minibatch_source_free(r->val);
  em_trainer_free(r->t);
  em_learner_free(r->l);
  em_graph_free(r->g);
}

static em_fit_options fit_opts(run *r, int64_t epochs) {
  return (em_fit_options){.epochs = epochs, .train = r->src, .inputs = r->in, .n_inputs = 2};
}

/* Every parameter and state of the graph (weights, Adam's moments), as
 * bytes in creation order, for bitwise comparison. */
typedef struct snapshot {
  unsigned char *bytes;
  size_t n;
} snapshot;

static snapshot snap(const run *r) {
  snapshot s = {NULL, 0};
  em_var vars[64];
  size_t np, ns;
  CHECK(em_graph_parameters(r->g, vars, 64, &np));
  CHECK(em_graph_states(r->g, vars + np, 64 - np, &ns));
  for (size_t i = 0; i < np + ns; i++) {
    em_tensor *v;
    CHECK(em_parameter_get(r->g, vars[i], em_cpu(), &v));
    size_t b = (size_t)em_tensor_numel(v) * em_dtype_size(em_tensor_dtype(v));
    s.bytes = realloc(s.bytes, s.n + b);
    assert_non_null(s.bytes);
    CHECK(em_tensor_to_host(v, s.bytes + s.n, b));
    s.n += b;
    em_tensor_release(v);
  }
  assert_true(np >= 2 && ns >= 2 * np); /* adam's m and v per parameter */
  return s;
}

static void same_bits(const snapshot *a, const snapshot *b, const char *what) {
  assert_int_equal(a->n, b->n);
  if (memcmp(a->bytes, b->bytes, a->n)) {
    size_t i = 0;
    while (a->bytes[i] == b->bytes[i]) i++;
    fail_msg("%s: the weights and learner state differ from byte %zu of %zu", what, i, a->n);
  }
}

/* ------------------------------------------------------------ accuracy --- */

static void train_for_accuracy(const em_dataset *train, em_device dev, int64_t epochs, snapshot *out,
                               double *accuracy) {
  int64_t steps = em_dataset_samples(train) / 50;
  run r;
  run_build(&r, dev, 64, 0, train, 50);
  em_fit_options o = fit_opts(&r, epochs);
  o.validation = r.val;
  em_fit_result res;
  CHECK(em_trainer_fit(r.t, &o, &res));
  assert_int_equal(res.epochs, epochs);
  assert_false(res.early_stopped || res.callback_stopped || res.end_of_data);
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(r.t, &tot));
  assert_int_equal(tot.steps, (uint64_t)(epochs * steps));
  assert_int_equal(tot.samples, (uint64_t)(epochs * steps * 50));
  assert_int_equal(tot.test_samples, 500); /* the last validation pass */
  *accuracy = 1 - res.val_metric;
  *out = snap(&r);
  run_free(&r);
}

static void test_cpu_reaches_accuracy(void **state) {
  (void)state;
  NEED_DATA();
  snapshot w;
  double acc;
  train_for_accuracy(g_train, em_cpu(), RUNNING_ON_VALGRIND ? 3 : 12, &w, &acc);
  print_message("CPU: %.1f%% of 500 held-out images\n", 100 * acc);
  if (!RUNNING_ON_VALGRIND && acc < 0.78) fail_msg("accuracy %.4f after 480 steps, expected >= 0.78", acc);
  if (RUNNING_ON_VALGRIND && acc < 0.65) fail_msg("accuracy %.4f after 120 steps, expected >= 0.65", acc);
  free(w.bytes);
}

/* The test double runs every kernel's host build (each GPU thread a
 * fiber): 2 epochs (80 steps) there, against the same 2 epochs on the CPU;
 * under valgrind 2 steps on 100 images, for the bits only. */
static void test_gpu_double_learns_with_cpu_bits(void **state) {
  (void)state;
  NEED_DATA();
  NEED_GPU();
  int vg = RUNNING_ON_VALGRIND;
  em_dataset *train = g_train;
  if (vg) CHECK(em_dataset_slice(g_train, 0, 100, &train));
  int64_t epochs = vg ? 1 : 2;
  snapshot wc, wg;
  double acc_cpu, acc_gpu;
  train_for_accuracy(train, em_cpu(), epochs, &wc, &acc_cpu);
  train_for_accuracy(train, em_cuda(0), epochs, &wg, &acc_gpu);
  print_message("cuda:0 (test double), %lld epochs: %.1f%%, CPU %.1f%%\n", (long long)epochs, 100 * acc_gpu,
                100 * acc_cpu);
  same_bits(&wc, &wg, "cuda:0 vs the CPU after the same training in portable mode");
  assert_true(acc_gpu == acc_cpu);
  if (!vg && acc_gpu < 0.70) fail_msg("accuracy %.4f on cuda:0 after 80 steps, expected >= 0.70", acc_gpu);
  if (vg) em_dataset_free(train);
  free(wc.bytes);
  free(wg.bytes);
}

/* -------------------------------------------------------------- resume --- */

typedef struct stopper {
  uint64_t after, seen;
} stopper;

static int stop_after(const em_train_report *r, void *user) {
  (void)r;
  stopper *s = user;
  return ++s->seen >= s->after;
}

/* `images` images in minibatches of 50, 2 epochs; the interrupted run stops
 * after `stop` steps on dev_a, the continuation runs on dev_b, and it must
 * end with the bits of an uninterrupted run on the CPU. */
static void resume_case(int64_t images, em_device dev_a, em_device dev_b, uint64_t stop, const char *what) {
  em_dataset *part;
  CHECK(em_dataset_slice(g_train, 0, images, &part));
  /* The run that never stops. */
  run a;
  run_build(&a, em_cpu(), 32, 0.25, part, 50);
  em_fit_options o = fit_opts(&a, 2);
  CHECK(em_trainer_fit(a.t, &o, NULL));
  snapshot want = snap(&a);
  em_trainer_totals ta;
  CHECK(em_trainer_get_totals(a.t, &ta));
  run_free(&a);

  /* Stopped after `stop` steps, checkpointed. */
  char path[300];
  snprintf(path, sizeof path, "%s/resume.ckpt", g_dir);
  run b;
  run_build(&b, dev_a, 32, 0.25, part, 50);
  stopper st = {.after = stop};
  o = fit_opts(&b, 2);
  o.on_minibatch = stop_after;
  o.user = &st;
  em_fit_result res;
  CHECK(em_trainer_fit(b.t, &o, &res));
  assert_true(res.callback_stopped);
  CHECK(em_trainer_save_checkpoint(b.t, path, b.src, NULL, 0));
  run_free(&b);

  /* Restored into a fresh trainer, graph and source, and continued. */
  run c;
  run_build(&c, dev_b, 32, 0.25, part, 50);
  CHECK(em_trainer_restore_checkpoint(c.t, path, c.src));
  em_trainer_totals tc;
  CHECK(em_trainer_get_totals(c.t, &tc));
  assert_int_equal(tc.steps, stop);
  o = fit_opts(&c, 2);
  CHECK(em_trainer_fit(c.t, &o, &res));
  assert_int_equal(res.epochs, 2);
  snapshot got = snap(&c);
  CHECK(em_trainer_get_totals(c.t, &tc));
  same_bits(&want, &got, what);
  assert_int_equal(tc.steps, ta.steps);
  assert_int_equal(tc.samples, ta.samples);
  assert_int_equal(em_learner_steps(c.l), (uint64_t)(2 * images / 50));
  free(want.bytes);
  free(got.bytes);
  run_free(&c);
  em_dataset_free(part);
}

static void test_resume_is_bitwise(void **state) {
  (void)state;
  NEED_DATA();
  /* 12 steps an epoch (4 under valgrind) */
  int vg = RUNNING_ON_VALGRIND;
  resume_case(vg ? 200 : 600, em_cpu(), em_cpu(), vg ? 6 : 17, "stopped mid epoch 2 and resumed on the CPU");
  resume_case(vg ? 200 : 600, em_cpu(), em_cpu(), vg ? 4 : 12, "stopped at the end of epoch 1 and resumed on the CPU");
}

static void test_resume_across_devices(void **state) {
  (void)state;
  NEED_DATA();
  NEED_GPU();
  /* Under valgrind 2 steps an epoch: the double runs each kernel's host
   * build, every GPU thread a fiber, 20-50x slower there. */
  int vg = RUNNING_ON_VALGRIND;
  resume_case(vg ? 100 : 600, em_cuda(0), em_cpu(), vg ? 1 : 7, "written on cuda:0 (test double), resumed on the CPU");
  resume_case(vg ? 100 : 600, em_cpu(), em_cuda(0), vg ? 3 : 7, "written on the CPU, resumed on cuda:0 (test double)");
}

/* ---------------------------------------------- callbacks, early stop --- */

typedef struct counter {
  uint64_t minibatches, epochs, last_samples, epoch_samples[8];
  int monotonic;
} counter;

static int count_minibatch(const em_train_report *r, void *user) {
  counter *c = user;
  if (r->samples <= c->last_samples && r->minibatch != 1) c->monotonic = 0;
  c->last_samples = r->samples;
  c->minibatches++;
  if (r->epoch_size != 300 || !r->has_metric || !(r->loss > 0)) c->monotonic = 0;
  return 0;
}

static int count_epoch(const em_train_report *r, void *user) {
  counter *c = user;
  if (c->epochs < 8) c->epoch_samples[c->epochs] = r->samples;
  c->epochs++;
  c->last_samples = 0;
  return 0;
}

static void test_callbacks_and_early_stopping(void **state) {
  (void)state;
  NEED_DATA();
  em_dataset *part;
  CHECK(em_dataset_slice(g_train, 0, 300, &part));
  run r;
  run_build(&r, em_cpu(), 16, 0, part, 64); /* 300 = 4 x 64 + 44: epochs end with a short minibatch */
  counter c = {.monotonic = 1};
  em_fit_options o = fit_opts(&r, 3);
  o.on_minibatch = count_minibatch;
  o.on_epoch = count_epoch;
  o.user = &c;
  em_fit_result res;
  CHECK(em_trainer_fit(r.t, &o, &res));
  assert_int_equal(c.minibatches, 15);
  assert_int_equal(c.epochs, 3);
  assert_true(c.monotonic);
  for (int i = 0; i < 3; i++) assert_int_equal(c.epoch_samples[i], 300);
  assert_true(isnan(res.val_metric));

  /* Early stopping: a min_delta no model can beat means no epoch after the
   * first validated one (epoch 4) counts as better, so patience 2 stops
   * after epoch 6 of 13. */
  o = fit_opts(&r, 13);
  o.validation = r.val;
  o.patience = 2;
  o.min_delta = 1.0;
  CHECK(em_trainer_fit(r.t, &o, &res));
  assert_true(res.early_stopped);
  assert_int_equal(res.epochs, 6);    /* 3 done before, then 3 more */
  assert_int_equal(res.best_epoch, 4); /* the first validated epoch */
  assert_true(res.best_val > 0 && res.best_val < 1);
  assert_false(isnan(res.val_metric));
  /* Patience has run out: fitting again (as after --resume from the last
   * checkpoint) stops at once, without another epoch. */
  c.minibatches = 0;
  o.on_minibatch = count_minibatch;
  o.user = &c;
  CHECK(em_trainer_fit(r.t, &o, &res));
  assert_true(res.early_stopped);
  assert_int_equal(res.epochs, 6);
  assert_int_equal(c.minibatches, 0);

  /* Without a validation source early stopping is refused. */
  o = fit_opts(&r, 20);
  o.patience = 1;
  assert_int_equal(em_trainer_fit(r.t, &o, &res), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "validation"));
  run_free(&r);
  em_dataset_free(part);
}

static void test_checkpoint_of_another_model_is_refused(void **state) {
  (void)state;
  NEED_DATA();
  em_dataset *part;
  CHECK(em_dataset_slice(g_train, 0, 100, &part));
  char path[300];
  snprintf(path, sizeof path, "%s/other.ckpt", g_dir);
  run a;
  run_build(&a, em_cpu(), 16, 0, part, 50);
  em_fit_options o = fit_opts(&a, 1);
  o.checkpoint = path;
  CHECK(em_trainer_fit(a.t, &o, NULL));
  run_free(&a);

  run b;
  run_build(&b, em_cpu(), 24, 0, part, 50); /* fc1 is [24, 784] here, [16, 784] there */
  snapshot before = snap(&b);
  assert_int_equal(em_trainer_restore_checkpoint(b.t, path, b.src), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "fc1"));
  snapshot after = snap(&b);
  same_bits(&before, &after, "a refused restore");
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(b.t, &tot));
  assert_int_equal(tot.steps, 0);
  free(before.bytes);
  free(after.bytes);
  run_free(&b);
  em_dataset_free(part);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpu_reaches_accuracy),
      cmocka_unit_test(test_gpu_double_learns_with_cpu_bits),
      cmocka_unit_test(test_resume_is_bitwise),
      cmocka_unit_test(test_resume_across_devices),
      cmocka_unit_test(test_callbacks_and_early_stopping),
      cmocka_unit_test(test_checkpoint_of_another_model_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
