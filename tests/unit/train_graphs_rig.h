/* The rig of the whole-step CUDA graph tests (test_exec_graphs_train.c and its review,
 * test_exec_graphs_train_review.c): the libcuda double as one H100, a small classifier (dense
 * layers, optional batch norm and dropout) with one learner (and a second, l2, where a test
 * adds one) in a trainer, minibatches made from a seed, and bitwise comparisons of two trainers'
 * parameters and states read from the host. Static functions: each test file includes it once. */
#ifndef EMBER_TESTS_TRAIN_GRAPHS_RIG_H
#define EMBER_TESTS_TRAIN_GRAPHS_RIG_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/learner.h"
#include "ember/trainer.h"
#include "op_testkit.h"

#define CHECK(call)                                                   \
  do {                                                                \
    em_status s_ = (call);                                            \
    if (s_) fail_msg("%s: %s", #call, em_last_error());               \
  } while (0)

#define IN 6
#define HID 8
#define CLS 3

static em_device gpu0(void) { return (em_device){EM_DEVICE_CUDA, 0}; }

/* The double as one H100 (driver: NULL for its default, else FAKECUDA_DRIVER). */
static int use_double(const char *driver) {
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) return 0;
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0=Fake H100", 1);
  if (driver) setenv("FAKECUDA_DRIVER", driver, 1);
  else unsetenv("FAKECUDA_DRIVER");
  unsetenv("EMBER_FORCE");
  unsetenv("EMBER_CUDA_GRAPHS");
  setenv("EMBER_CUBLAS", "0", 1), setenv("EMBER_CUDNN", "0", 1); /* portable mode uses neither */
  em_shutdown();
  return 1;
}

static int teardown(void **state) {
  (void)state;
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("FAKECUDA_DRIVER");
  unsetenv("FAKECUDA_FAIL");
  unsetenv("EMBER_CUBLAS"), unsetenv("EMBER_CUDNN");
  unsetenv("EMBER_LIBCUBLAS"), unsetenv("EMBER_LIBCUDNN");
  unsetenv("FAKECUDA_NO_MAP_HOST");
  return 0;
}

#define NEED_DOUBLE(driver)                                          \
  do {                                                               \
    if (!use_double(driver)) {                                       \
      print_message("SKIPPED: no test double (FAKECUDA_LIB)\n");     \
      skip();                                                        \
    }                                                                \
  } while (0)

static em_var apply(em_graph *g, const char *op, const em_var *in, int n, const em_attr *attrs, int n_attrs) {
  em_var y;
  if (em_apply(g, op, in, n, attrs, n_attrs, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}

typedef struct net {
  em_graph *g;
  em_var x, label, loss;
  em_var params[6];
  int n_params;
  em_learner *l, *l2; /* l2: a second learner (test_two_learners_under_replay) */
  em_trainer *t;
} net;

static em_var dense(net *m, em_var x, int in, int out, uint64_t seed) {
  char wn[16], bn[16];
  snprintf(wn, sizeof wn, "w%d", m->n_params);
  snprintf(bn, sizeof bn, "b%d", m->n_params);
  em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = seed},
          small = {.kind = EM_INIT_UNIFORM, .seed = seed + 7, .scale = 0.1};
  em_var w, b;
  CHECK(em_parameter(m->g, wn, EM_F32, 2, (int64_t[]){out, in}, &he, &w));
  CHECK(em_parameter(m->g, bn, EM_F32, 1, (int64_t[]){out}, &small, &b));
  m->params[m->n_params++] = w, m->params[m->n_params++] = b;
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var h = apply(m->g, "matmul", (em_var[]){x, w}, 2, &tb, 1);
  return apply(m->g, "add", (em_var[]){h, b}, 2, NULL, 0);
}

static em_var batch_norm(net *m, em_var h);

/* x[N,6] -> dense 8 -> batch norm (running statistics as states) -> relu ->
 * dropout 0.25 -> dense 3 -> softmax cross entropy (i32 labels) -> mean;
 * a trainer with one learner of `kind` over the parameters (bn 0: no batch
 * norm, so an input's scale reaches the gradients). */
static void (*g_tweak)(em_learner_config *cfg); /* a test's change to the learner's config (NULL: none) */

static void build(net *m, em_learner_kind kind, const em_trainer_options *opt, int bn) {
  memset(m, 0, sizeof *m);
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 2, (int64_t[]){-1, IN}, &m->x));
  CHECK(em_input(m->g, "label", EM_I32, 1, (int64_t[]){-1}, &m->label));
  em_var h = dense(m, m->x, IN, HID, 3);
  if (bn) h = batch_norm(m, h);
  h = apply(m->g, "relu", &h, 1, NULL, 0);
  em_attr dr[2] = {{.name = "ratio", .type = EM_ATTR_FLOAT, .f = 0.25}, {.name = "seed", .type = EM_ATTR_INT, .i = 11}};
  h = apply(m->g, "dropout", &h, 1, dr, 2);
  em_var logits = dense(m, h, HID, CLS, 5);
  em_var per = apply(m->g, "cross_entropy_with_softmax", (em_var[]){logits, m->label}, 2, NULL, 0);
  m->loss = apply(m->g, "reduce_mean", &per, 1, NULL, 0);
  em_learner_config cfg;
  CHECK(em_learner_defaults(kind, kind == EM_LEARNER_ADADELTA ? 1.0 : 0.05, &cfg));
  cfg.clip_norm = kind == EM_LEARNER_MOMENTUM ? 0.5 : 0; /* _learner_sumsq's table under replay too */
  if (g_tweak) g_tweak(&cfg);
  CHECK(em_learner_create(&cfg, NULL, m->params, m->n_params, &m->l));
  CHECK(em_trainer_create(m->g, m->loss, -1, &m->l, 1, opt, &m->t));
}

static em_var batch_norm(net *m, em_var h) {
  em_init one = {.kind = EM_INIT_CONSTANT, .value = 1}, zero = {.kind = EM_INIT_CONSTANT, .value = 0};
  em_var sc, bi, mean, var;
  CHECK(em_parameter(m->g, "bn.scale", EM_F32, 1, (int64_t[]){HID}, &one, &sc));
  CHECK(em_parameter(m->g, "bn.bias", EM_F32, 1, (int64_t[]){HID}, &zero, &bi));
  CHECK(em_state(m->g, "bn.mean", EM_F32, 1, (int64_t[]){HID}, &zero, &mean));
  CHECK(em_state(m->g, "bn.var", EM_F32, 1, (int64_t[]){HID}, &one, &var));
  m->params[m->n_params++] = sc, m->params[m->n_params++] = bi;
  return apply(m->g, "batch_normalization", (em_var[]){h, sc, bi, mean, var}, 5, NULL, 0);
}

static void net_free(net *m) {
  em_trainer_free(m->t);
  em_learner_free(m->l);
  em_graph_free(m->g);
}

/* Batch k of n rows: x in [-1, 1) times xscale, labels k + i mod CLS. */
static void batch(int k, int n, double xscale, em_feed *f, const net *m) {
  float xs[64 * IN];
  int32_t ys[64];
  uint64_t s = 1000 + (uint64_t)k;
  for (int i = 0; i < n * IN; i++) xs[i] = (float)(xscale * ot_uniform(&s, -1, 1));
  for (int i = 0; i < n; i++) ys[i] = (k + i) % CLS;
  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, IN}, xs, sizeof(float) * (size_t)(n * IN), &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){n}, ys, sizeof(int32_t) * (size_t)n, &yt));
  f[0] = (em_feed){m->x, xt};
  f[1] = (em_feed){m->label, yt};
}

static void feeds_release(em_feed *f) {
  em_tensor_release((em_tensor *)f[0].value);
  em_tensor_release((em_tensor *)f[1].value);
}

/* A host copy of a parameter's or state's newest value (em_parameter_get:
 * nothing is marked stale, so nothing is uploaded again). */
static void *value_bytes(const em_graph *g, em_var v, size_t *bytes) {
  em_tensor *t;
  CHECK(em_parameter_get(g, v, em_cpu(), &t));
  *bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
  void *p = malloc(*bytes ? *bytes : 1);
  assert_non_null(p);
  CHECK(em_tensor_to_host(t, p, *bytes));
  em_tensor_release(t);
  return p;
}

/* Every parameter and state of a and b (built alike: the same handles)
 * bitwise equal; returns how many values there were. */
static int assert_same_values(const net *a, const net *b, const char *what, int step) {
  em_var vars[64];
  size_t np = 0, ns = 0;
  CHECK(em_graph_parameters(a->g, vars, 32, &np));
  CHECK(em_graph_states(a->g, vars + np, 32, &ns));
  assert_true(np <= 32 && ns <= 32);
  for (size_t i = 0; i < np + ns; i++) {
    size_t na, nb;
    void *pa = value_bytes(a->g, vars[i], &na), *pb = value_bytes(b->g, vars[i], &nb);
    if (na != nb || memcmp(pa, pb, na)) {
      const char *name = "";
      (void)em_var_name(a->g, vars[i], &name);
      fail_msg("%s: step %d: '%s' differs between the eager trainer and the graph one", what, step, name);
    }
    free(pa), free(pb);
  }
  return (int)(np + ns);
}

static uint64_t loss_bits(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

/* ------------------------------------------------------------ harness --- */

static em_trainer_options portable_on_gpu(void) {
  em_trainer_options o;
  memset(&o, 0, sizeof o);
  o.device = gpu0();
  o.mode = EM_MODE_PORTABLE;
  return o;
}

#endif
