/* CUDA graphs in the executor (em_exec_set_graphs, engine/exec_graphs.c) on
 * the libcuda test double (an H100 on a CUDA 13 driver): an MLP's loss and
 * the gradients of its four parameters, run N times by an eager executor
 * and by one with graphs on, every output bitwise equal (portable mode;
 * the fast mode with the cuBLAS double too). The double counts driver
 * calls: a replayed run is one cuGraphLaunch and no cuLaunchKernel. New
 * feed values reach the graph; a new feed shape captures a new graph; a
 * parameter set on the host between runs is seen by the replay; each
 * refusal says why and the run stays eager and right; a driver without
 * stream capture (FAKECUDA_DRIVER=9020) stays eager with the reason; and
 * em_exec_free leaves no graph and no device memory behind.
 * Expected values are the eager executor's, never the graph's own. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda/fakecuda.h"
#include "gpu_double.h"
#include "op_testkit.h"

#define CHECK(call)                                                   \
  do {                                                                \
    em_status s_ = (call);                                            \
    if (s_) fail_msg("%s: %s", #call, em_last_error());               \
  } while (0)

#define IN 6
#define HID 16
#define CLS 4
#define NP 4
#define NOUT (1 + NP)
#define RUNS 6

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
  /* the fast mode's libraries: the doubles (gpu_double.c does the same) */
  const char *blas = getenv("FAKECUBLAS_LIB"), *dnn = getenv("FAKECUDNN_LIB");
  if (blas && *blas) setenv("EMBER_LIBCUBLAS", blas, 1);
  else setenv("EMBER_CUBLAS", "0", 1);
  if (dnn && *dnn) setenv("EMBER_LIBCUDNN", dnn, 1);
  else setenv("EMBER_CUDNN", "0", 1);
  em_shutdown();
  return 1;
}

static int teardown(void **state) {
  (void)state;
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("FAKECUDA_DRIVER");
  unsetenv("FAKECUDA_NO_MAP_HOST");
  unsetenv("EMBER_FORCE");
  unsetenv("EMBER_LIBCUBLAS"), unsetenv("EMBER_CUBLAS");
  unsetenv("EMBER_LIBCUDNN"), unsetenv("EMBER_CUDNN");
  return 0;
}

#define NEED_DOUBLE(driver)                                          \
  do {                                                               \
    if (!use_double(driver)) {                                       \
      print_message("SKIPPED: no test double (FAKECUDA_LIB)\n");     \
      skip();                                                        \
    }                                                                \
  } while (0)

static long calls(const char *entry) {
  long n = ts_double_calls(entry);
  if (n < 0) fail_msg("the double does not count %s", entry);
  return n;
}

/* cublasGemmEx calls of the cuBLAS double, -1 before it is loaded. */
static long gemm_calls(void) {
  const char *lib = getenv("FAKECUBLAS_LIB");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  unsigned long (*count)(const char *) = h ? (unsigned long (*)(const char *))dlsym(h, "fakecublas_call_count") : NULL;
  long n = count ? (long)count("cublasGemmEx") : -1;
  if (h) dlclose(h);
  return n;
}

static em_var apply(em_graph *g, const char *op, const em_var *in, int n, const em_attr *attrs, int n_attrs) {
  em_var y;
  if (em_apply(g, op, in, n, attrs, n_attrs, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}

typedef struct model {
  em_graph *g;
  em_var x, label;
  em_var params[NP];
  em_var outs[NOUT]; /* loss, then each parameter's gradient */
} model;

static em_var dense(model *m, em_var x, int in, int out, int k, uint64_t seed) {
  char wn[16], bn[16];
  snprintf(wn, sizeof wn, "w%d", k);
  snprintf(bn, sizeof bn, "b%d", k);
  em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = seed},
          small = {.kind = EM_INIT_UNIFORM, .seed = seed + 7, .scale = 0.1};
  CHECK(em_parameter(m->g, wn, EM_F32, 2, (int64_t[]){out, in}, &he, &m->params[2 * k]));
  CHECK(em_parameter(m->g, bn, EM_F32, 1, (int64_t[]){out}, &small, &m->params[2 * k + 1]));
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var h = apply(m->g, "matmul", (em_var[]){x, m->params[2 * k]}, 2, &tb, 1);
  return apply(m->g, "add", (em_var[]){h, m->params[2 * k + 1]}, 2, NULL, 0);
}

/* The MLP 6-16-4 (ReLU), softmax cross entropy over i32 labels, the mean, and
 * the gradients; dropout_ratio > 0 puts a dropout after the ReLU. */
static void build(model *m, double dropout_ratio) {
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 2, (int64_t[]){-1, IN}, &m->x));
  CHECK(em_input(m->g, "label", EM_I32, 1, (int64_t[]){-1}, &m->label));
  em_var h = apply(m->g, "relu", (em_var[]){dense(m, m->x, IN, HID, 0, 3)}, 1, NULL, 0);
  if (dropout_ratio > 0) {
    em_attr r = {.name = "ratio", .type = EM_ATTR_FLOAT, .f = dropout_ratio};
    h = apply(m->g, "dropout", &h, 1, &r, 1);
  }
  em_var logits = dense(m, h, HID, CLS, 1, 5);
  em_var per = apply(m->g, "cross_entropy_with_softmax", (em_var[]){logits, m->label}, 2, NULL, 0);
  m->outs[0] = apply(m->g, "reduce_mean", &per, 1, NULL, 0);
  CHECK(em_gradients(m->g, m->outs[0], m->params, NP, m->outs + 1));
}

/* Batch k of n rows: x in [-1, 1), labels k + i mod CLS. */
static void batch(int k, int n, em_feed *f, const model *m) {
  float xs[64 * IN];
  int32_t ys[64];
  uint64_t s = 1000 + (uint64_t)k;
  for (int i = 0; i < n * IN; i++) xs[i] = (float)ot_uniform(&s, -1, 1);
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

/* The bytes of a (device) tensor on the host. */
static void *host_bytes(em_tensor *t, size_t *bytes) {
  *bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
  void *p = malloc(*bytes ? *bytes : 1);
  assert_non_null(p);
  CHECK(em_tensor_to_host(t, p, *bytes));
  return p;
}

static void assert_same_bits(em_tensor *a, em_tensor *b, const char *what, int run, int out) {
  size_t na, nb;
  void *pa = host_bytes(a, &na), *pb = host_bytes(b, &nb);
  if (na != nb || memcmp(pa, pb, na)) fail_msg("%s: run %d, output %d differs from the eager executor's", what, run, out);
  free(pa), free(pb);
}

static int bits_equal(em_tensor *a, em_tensor *b) {
  size_t na, nb;
  void *pa = host_bytes(a, &na), *pb = host_bytes(b, &nb);
  int eq = na == nb && !memcmp(pa, pb, na);
  free(pa), free(pb);
  return eq;
}

static em_exec *executor(model *m, int graphs, em_mode mode) {
  em_exec *e;
  CHECK(em_exec_create(m->g, m->outs, NOUT, gpu0(), &e));
  CHECK(em_exec_set_mode(e, mode));
  CHECK(em_exec_set_graphs(e, graphs));
  return e;
}

static char *describe(em_exec *e) {
  size_t n = em_exec_describe(e, NULL, 0);
  char *s = malloc(n + 1);
  assert_non_null(s);
  em_exec_describe(e, s, n + 1);
  return s;
}

static void assert_describes(em_exec *e, const char *part) {
  char *d = describe(e);
  const char *line = strstr(d, "graphs:"); /* cmocka's message is short: the graphs line, else the end */
  if (!strstr(d, part)) fail_msg("em_exec_describe lacks \"%s\": %s", part, line ? line : d + strlen(d) / 2);
  free(d);
}

static void release_all(em_tensor **t, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(t[i]);
}

/* N runs eager and N with graphs, batch size n per run (rows[k]). */
static void compare_runs(em_mode mode, const char *what) {
  model m;
  build(&m, 0);
  em_exec *eager = executor(&m, 0, mode), *gr = executor(&m, 1, mode);
  em_tensor *prev[NOUT] = {0};
  for (int k = 0; k < RUNS; k++) {
    em_feed f[2];
    batch(k, 8, f, &m);
    em_tensor *a[NOUT], *b[NOUT];
    CHECK(em_exec_run(eager, f, 2, a));
    long launches = calls("cuLaunchKernel"), glaunch = calls("cuGraphLaunch"), gemms = gemm_calls();
    CHECK(em_exec_run(gr, f, 2, b));
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    /* runs 0 and 1 warm up, 2 is captured and launched, 3.. replay */
    assert_int_equal(st.graph_replayed, k >= 2);
    assert_int_equal(calls("cuGraphLaunch") - glaunch, k >= 2);
    if (k >= 3) {
      assert_int_equal(calls("cuLaunchKernel") - launches, 0);
      if (gemms >= 0) assert_int_equal(gemm_calls() - gemms, 0);
    } else if (calls("cuLaunchKernel") <= launches) {
      fail_msg("run %d: no cuLaunchKernel while warming up or capturing", k);
    }
    for (int i = 0; i < NOUT; i++) assert_same_bits(a[i], b[i], what, k, i);
    /* new feed values reach the graph: the loss changes with the batch */
    if (k) assert_false(bits_equal(b[0], prev[0]));
    release_all(prev, NOUT);
    memcpy(prev, b, sizeof prev);
    release_all(a, NOUT);
    feeds_release(f);
  }
  em_exec_stats st;
  CHECK(em_exec_stats_get(gr, &st));
  assert_int_equal(st.graph_captures, 1);
  assert_int_equal(st.graph_replays, RUNS - 2);
  assert_int_equal(st.graphs_held, 1);
  assert_true(st.graph_pool_bytes > 0);
  assert_int_equal(st.runs, RUNS);
  assert_describes(gr, "graphs: on, 1 held");
  release_all(prev, NOUT);
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
}

static void test_portable_replay_is_bitwise_eager(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  compare_runs(EM_MODE_PORTABLE, "portable");
}

/* The fast mode's products go through the cuBLAS double, whose work is
 * captured as a closure with alpha and beta copied at the call
 * (tests/fakecublas/fakecublas_gemm.c: fcb_work keeps their values in host
 * pointer mode), and its workspace comes from the graph's pool. */
static void test_fast_replay_with_cublas_double(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  if (!getenv("FAKECUBLAS_LIB")) skip();
  compare_runs(EM_MODE_FAST, "fast");
  assert_true(gemm_calls() > 0); /* cuBLAS ran the products (compare_runs: never during a replay) */
}

/* A feed-shape change warms up and captures a graph of its own; the first
 * shape's graph is kept and replays again. A parameter set on the host
 * between runs is uploaded to its same address and the replay reads it. */
static void test_shapes_and_parameters(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0);
  em_exec *eager = executor(&m, 0, EM_MODE_PORTABLE), *gr = executor(&m, 1, EM_MODE_PORTABLE);
  const int rows[] = {8, 8, 8, 8, 5, 5, 5, 5, 8, 5};
  const int n_runs = (int)(sizeof rows / sizeof rows[0]);
  for (int k = 0; k < n_runs; k++) {
    if (k == 9) { /* a new value of w0 from the host, before a replay */
      float w[HID * IN];
      for (int i = 0; i < HID * IN; i++) w[i] = 0.01f * (float)(i % 17) - 0.05f;
      em_tensor *wt;
      CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){HID, IN}, w, sizeof w, &wt));
      CHECK(em_parameter_set(m.g, m.params[0], wt));
      em_tensor_release(wt);
    }
    em_feed f[2];
    batch(k, rows[k], f, &m);
    em_tensor *a[NOUT], *b[NOUT];
    CHECK(em_exec_run(gr, f, 2, b)); /* first: its own upload of w0, not the eager executor's */
    CHECK(em_exec_run(eager, f, 2, a));
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    int want_replay = k == 2 || k == 3 || k == 6 || k == 7 || k == 8 || k == 9;
    if (st.graph_replayed != want_replay) fail_msg("run %d (%d rows): replayed %d", k, rows[k], st.graph_replayed);
    for (int i = 0; i < NOUT; i++) assert_same_bits(a[i], b[i], "shapes", k, i);
    release_all(a, NOUT), release_all(b, NOUT);
    feeds_release(f);
  }
  em_exec_stats st;
  CHECK(em_exec_stats_get(gr, &st));
  assert_int_equal(st.graph_captures, 2);
  assert_int_equal(st.graphs_held, 2);
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
}

/* Runs that cannot be captured stay eager, right, and say why. */
static void run_refused(model *m, em_exec *gr, em_exec *eager, const char *why) {
  for (int k = 0; k < 4; k++) {
    em_feed f[2];
    batch(k, 8, f, m);
    em_tensor *a[NOUT], *b[NOUT];
    CHECK(em_exec_run(eager, f, 2, a));
    long glaunch = calls("cuGraphLaunch");
    CHECK(em_exec_run(gr, f, 2, b));
    assert_int_equal(calls("cuGraphLaunch"), glaunch);
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    assert_int_equal(st.graph_replayed, 0);
    for (int i = 0; i < NOUT; i++) assert_same_bits(a[i], b[i], why, k, i);
    release_all(a, NOUT), release_all(b, NOUT);
    feeds_release(f);
  }
  assert_describes(gr, why);
}

/* Dropout when training is captured now: its kernel reads the run's step
 * from device memory written before each replay (op.h's step_dev), so every
 * replay draws the eager run's mask of the same step (more in
 * test_exec_graphs_train.c). */
static void test_dropout_in_training_replays(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0.25);
  em_exec *eager = executor(&m, 0, EM_MODE_PORTABLE), *gr = executor(&m, 1, EM_MODE_PORTABLE);
  CHECK(em_exec_set_training(eager, 1));
  CHECK(em_exec_set_training(gr, 1));
  for (int k = 0; k < 5; k++) {
    em_feed f[2];
    batch(0, 8, f, &m); /* the same batch: only the mask changes the loss */
    em_tensor *a[NOUT], *b[NOUT];
    CHECK(em_exec_run(eager, f, 2, a));
    CHECK(em_exec_run(gr, f, 2, b));
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    assert_int_equal(st.graph_replayed, k >= 2);
    for (int i = 0; i < NOUT; i++) assert_same_bits(a[i], b[i], "dropout", k, i);
    release_all(a, NOUT), release_all(b, NOUT);
    feeds_release(f);
  }
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
}

/* An output that is a parameter: its copy is made outside the plan. */
static void test_leaf_output_is_refused(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0);
  m.outs[NOUT - 1] = m.params[0];
  em_exec *eager = executor(&m, 0, EM_MODE_PORTABLE), *gr = executor(&m, 1, EM_MODE_PORTABLE);
  run_refused(&m, gr, eager, "is a leaf");
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
}

/* On devices that cannot map host memory the loss's label check copies its
 * finding back and synchronises (ops/loss_gpu.c), which invalidates a
 * capture: the step is named, the run is done again eagerly, and the key
 * stays eager. (A gather's uploaded bound invalidated it before uploads
 * were staged in pinned memory under capture: test_exec_graphs_train.c.) */
static void test_invalidated_capture_names_the_step(void **state) {
  (void)state;
  setenv("FAKECUDA_NO_MAP_HOST", "1", 1);
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0);
  em_exec *eager = executor(&m, 0, EM_MODE_PORTABLE), *gr = executor(&m, 1, EM_MODE_PORTABLE);
  run_refused(&m, gr, eager, "eager: running node 11 (op 'cross_entropy_with_softmax')");
  assert_describes(gr, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  em_exec_stats st;
  CHECK(em_exec_stats_get(gr, &st));
  assert_int_equal(st.graph_captures, 0);
  assert_int_equal(st.graphs_held, 0);
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
  unsetenv("FAKECUDA_NO_MAP_HOST");
}

/* A learner's update writes the parameters in place and uploads a per-step
 * table: captured now (the table staged in the graph's pinned memory, the
 * writes told to the host after each replay). h is all zeros (learning
 * rate 0), so both executors' updates leave the shared parameters as they
 * were and the runs stay comparable; test_exec_graphs_train.c trains. */
static void test_learner_update_replays(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0);
  em_tensor *ht, *ones;
  float hz[16] = {0}, on[NP * 2];
  for (int i = 0; i < NP * 2; i++) on[i] = 1.0f;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){16}, hz, sizeof hz, &ht));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){NP, 2}, on, sizeof on, &ones));
  em_var h, sc;
  CHECK(em_constant(m.g, ht, &h));
  CHECK(em_constant(m.g, ones, &sc));
  em_tensor_release(ht), em_tensor_release(ones);
  em_var in[2 + 2 * NP] = {h, sc};
  for (int i = 0; i < NP; i++) in[2 + i] = m.params[i], in[2 + NP + i] = m.outs[1 + i];
  em_attr n = {.name = "n", .type = EM_ATTR_INT, .i = NP};
  em_var upd = apply(m.g, "_update_sgd", in, 2 + 2 * NP, &n, 1);
  em_var outs[NOUT + 1];
  memcpy(outs, m.outs, sizeof m.outs);
  outs[NOUT] = upd;
  em_exec *eager, *gr;
  CHECK(em_exec_create(m.g, outs, NOUT + 1, gpu0(), &eager));
  CHECK(em_exec_create(m.g, outs, NOUT + 1, gpu0(), &gr));
  CHECK(em_exec_set_mode(eager, EM_MODE_PORTABLE));
  CHECK(em_exec_set_mode(gr, EM_MODE_PORTABLE));
  CHECK(em_exec_set_graphs(eager, 0));
  CHECK(em_exec_set_graphs(gr, 1));
  for (int k = 0; k < 4; k++) {
    em_feed f[2];
    batch(k, 8, f, &m);
    em_tensor *a[NOUT + 1], *b[NOUT + 1];
    CHECK(em_exec_run(eager, f, 2, a));
    CHECK(em_exec_run(gr, f, 2, b));
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    assert_int_equal(st.graph_replayed, k >= 2);
    for (int i = 0; i < NOUT; i++) assert_same_bits(a[i], b[i], "learner", k, i);
    release_all(a, NOUT + 1), release_all(b, NOUT + 1);
    feeds_release(f);
  }
  assert_describes(gr, "graphs: on, 1 held");
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
}

/* EMBER_FORCE=cpu: every step runs its CPU code on host copies: refused. */
static void test_host_steps_are_refused(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  setenv("EMBER_FORCE", "cpu", 1);
  em_shutdown();
  model m;
  build(&m, 0);
  em_exec *eager = executor(&m, 0, EM_MODE_PORTABLE), *gr = executor(&m, 1, EM_MODE_PORTABLE);
  run_refused(&m, gr, eager, "runs its CPU code on host copies");
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
  unsetenv("EMBER_FORCE");
}

/* A CUDA 9.2 driver has no stream capture: eager, with the reason. */
static void test_old_driver_stays_eager(void **state) {
  (void)state;
  NEED_DOUBLE("9020");
  model m;
  build(&m, 0);
  em_exec *eager = executor(&m, 0, EM_MODE_PORTABLE), *gr = executor(&m, 1, EM_MODE_PORTABLE);
  for (int k = 0; k < 4; k++) {
    em_feed f[2];
    batch(k, 8, f, &m);
    em_tensor *a[NOUT], *b[NOUT];
    CHECK(em_exec_run(eager, f, 2, a));
    CHECK(em_exec_run(gr, f, 2, b));
    em_exec_stats st;
    CHECK(em_exec_stats_get(gr, &st));
    assert_int_equal(st.graph_replayed, 0);
    for (int i = 0; i < NOUT; i++) assert_same_bits(a[i], b[i], "CUDA 9.2", k, i);
    release_all(a, NOUT), release_all(b, NOUT);
    feeds_release(f);
  }
  assert_describes(gr, "has no stream capture");
  em_exec_free(eager);
  em_exec_free(gr);
  em_graph_free(m.g);
}

/* em_exec_free frees the graphs and returns their pools: no graph is left
 * in the driver and the device's bytes in use are those before the
 * executor. Turning graphs off frees them too. A CPU executor takes the
 * switch and runs as before. */
/* Graphs are optional: off for a new executor unless EMBER_CUDA_GRAPHS=1; any other value
 * than 0 and 1 is refused, naming it. */
static void test_off_by_default_and_env(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0);
  const char *vals[4] = {NULL, "0", "1", "yes"};
  const int want[4] = {0, 0, 1, -1};
  for (int i = 0; i < 4; i++) {
    if (vals[i]) setenv("EMBER_CUDA_GRAPHS", vals[i], 1);
    else unsetenv("EMBER_CUDA_GRAPHS");
    em_exec *e = NULL;
    em_status s = em_exec_create(m.g, m.outs, NOUT, gpu0(), &e);
    if (want[i] < 0) {
      assert_int_equal(s, EM_ERR_INVALID_ARGUMENT);
      if (!strstr(em_last_error(), "EMBER_CUDA_GRAPHS")) fail_msg("the refusal should name the variable: %s", em_last_error());
    } else {
      CHECK(s);
      assert_int_equal(em_exec_get_graphs(e), want[i]);
      em_exec_free(e);
    }
  }
  unsetenv("EMBER_CUDA_GRAPHS");
  em_graph_free(m.g);
}

static void test_free_releases_graphs_and_pools(void **state) {
  (void)state;
  NEED_DOUBLE(NULL);
  model m;
  build(&m, 0);
  em_exec *first = executor(&m, 0, EM_MODE_PORTABLE); /* holds the parameters on the device throughout */
  em_feed f[2];
  batch(0, 8, f, &m);
  em_tensor *a[NOUT];
  CHECK(em_exec_run(first, f, 2, a));
  release_all(a, NOUT);
  em_alloc_stats before;
  CHECK(em_alloc_stats_get(gpu0(), &before));
  void *h = dlopen(getenv("FAKECUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(h);
  size_t (*live_graphs)(void) = (size_t(*)(void))dlsym(h, "fakecuda_live_graphs");
  assert_non_null(live_graphs);
  for (int round = 0; round < 2; round++) {
    em_exec *gr = executor(&m, 1, EM_MODE_PORTABLE);
    for (int k = 0; k < 4; k++) {
      CHECK(em_exec_run(gr, f, 2, a));
      release_all(a, NOUT);
    }
    assert_true(live_graphs() > 0);
    if (round == 0) {
      CHECK(em_exec_set_graphs(gr, 0));
      assert_int_equal(em_exec_get_graphs(gr), 0);
      assert_int_equal(live_graphs(), 0);
      CHECK(em_exec_run(gr, f, 2, a)); /* eager on the default stream again */
      release_all(a, NOUT);
    }
    em_exec_free(gr);
    assert_int_equal(live_graphs(), 0);
    em_alloc_stats after;
    CHECK(em_alloc_stats_get(gpu0(), &after));
    assert_int_equal(after.bytes_in_use, before.bytes_in_use);
  }
  dlclose(h);
  em_exec *cpu;
  CHECK(em_exec_create(m.g, m.outs, NOUT, em_cpu(), &cpu));
  CHECK(em_exec_set_graphs(cpu, 1));
  assert_int_equal(em_exec_get_graphs(cpu), 1);
  CHECK(em_exec_run(cpu, f, 2, a));
  release_all(a, NOUT);
  assert_describes(cpu, "CUDA graphs need a CUDA device");
  em_exec_free(cpu);
  feeds_release(f);
  em_exec_free(first);
  em_graph_free(m.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_portable_replay_is_bitwise_eager, teardown),
      cmocka_unit_test_teardown(test_fast_replay_with_cublas_double, teardown),
      cmocka_unit_test_teardown(test_shapes_and_parameters, teardown),
      cmocka_unit_test_teardown(test_dropout_in_training_replays, teardown),
      cmocka_unit_test_teardown(test_leaf_output_is_refused, teardown),
      cmocka_unit_test_teardown(test_invalidated_capture_names_the_step, teardown),
      cmocka_unit_test_teardown(test_learner_update_replays, teardown),
      cmocka_unit_test_teardown(test_host_steps_are_refused, teardown),
      cmocka_unit_test_teardown(test_old_driver_stays_eager, teardown),
      cmocka_unit_test_teardown(test_free_releases_graphs_and_pools, teardown),
      cmocka_unit_test_teardown(test_off_by_default_and_env, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
