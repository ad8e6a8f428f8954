/* Copy accounting of a training step on a GPU (the test double's H100; a
 * real one under `make test-gpu`): a step copies its feeds to the device and
 * the fetches the caller asks for to the host, and nothing else, so the
 * only synchronisation is where a fetched value is read.
 *
 * The step: an MLP (6-16-4, ReLU) with softmax cross entropy over sparse i32
 * labels, reduce_mean, the gradients of the four parameters and the SGD
 * update p - lr * g, all in one graph. Each run delivers the loss into a host
 * tensor and the updated parameters into device tensors, which
 * em_parameter_set then copies into the parameters on the device. Expected
 * counts and bytes come from the shapes written here: per run two host to
 * device copies (x: 8 x 6 f32, labels: 8 i32), one device to host copy (the
 * f32 loss), four copies within the device (the updated parameters); at the
 * first run also the four parameters and the learning rate uploaded.
 *
 * Invalid labels are checked on the device (kernels/loss.cu) and reported at
 * the next synchronisation without a copy of their own: a bad label fails
 * the run that reads the loss, naming the op and the label, and the next good
 * run goes on from the parameters before it, bit for bit as a CPU twin that
 * never saw the bad batch (portable mode on both). Where the device cannot
 * map host memory (FAKECUDA_NO_MAP_HOST) the checks fall back to a copy and a
 * synchronisation each, and the statistics count them. On the double the
 * driver calls that wait for the device are counted too (fakecuda_call_count):
 * per step one cuMemcpyDtoH (the loss; more only for the fallback's checks),
 * no cuCtxSynchronize, cuStreamSynchronize or cuMemFree. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda/fakecuda.h"
#include "op_testkit.h"

#define CHECK(call)                                                   \
  do {                                                                \
    em_status s_ = (call);                                            \
    if (s_) fail_msg("%s: %s", #call, em_last_error());               \
  } while (0)

#define N 8      /* batch */
#define IN 6     /* features */
#define HID 16   /* hidden units */
#define CLS 4    /* classes */
#define NP 4     /* parameters */
#define LR 0.25f

/* ------------------------------------------------------------ helpers --- */

/* The double with one H100 (mapping host memory unless no_map), or without
 * it a real GPU (no_map 0 only). Returns 0 when neither is there. */
static int use_gpu(int no_map) {
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) {
    if (no_map || getenv("EMBER_LIBCUDA")) return 0;
    em_shutdown();
    int n = 0;
    return !em_cuda_device_count(&n) && n > 0;
  }
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0=Fake H100", 1);
  if (no_map) setenv("FAKECUDA_NO_MAP_HOST", "1", 1);
  else unsetenv("FAKECUDA_NO_MAP_HOST");
  unsetenv("EMBER_FORCE");
  em_shutdown();
  return 1;
}

static void leave_gpu(void) {
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("FAKECUDA_NO_MAP_HOST");
}

#define NEED_GPU(no_map)                                                                                 \
  do {                                                                                                   \
    if (!use_gpu(no_map)) {                                                                              \
      print_message("SKIPPED: no test double (FAKECUDA_LIB)%s\n", (no_map) ? "" : " and no real GPU");  \
      skip();                                                                                            \
    }                                                                                                    \
  } while (0)

static em_var apply(em_graph *g, const char *op, const em_var *in, int n, const em_attr *attrs, int n_attrs) {
  em_var y;
  if (em_apply(g, op, in, n, attrs, n_attrs, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}

typedef struct model {
  em_graph *g;
  em_var x, label;
  em_var params[NP];
  em_var outs[1 + NP]; /* loss, then each parameter's update */
  int64_t shapes[NP][2];
  int ndims[NP];
} model;

static em_var dense(model *m, em_var x, int in, int out, int k, uint64_t seed) {
  char wn[16], bn[16];
  snprintf(wn, sizeof wn, "w%d", k);
  snprintf(bn, sizeof bn, "b%d", k);
  em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = seed}, small = {.kind = EM_INIT_UNIFORM, .seed = seed + 7,
                                                                    .scale = 0.1};
  CHECK(em_parameter(m->g, wn, EM_F32, 2, (int64_t[]){out, in}, &he, &m->params[2 * k]));
  CHECK(em_parameter(m->g, bn, EM_F32, 1, (int64_t[]){out}, &small, &m->params[2 * k + 1]));
  m->ndims[2 * k] = 2, m->shapes[2 * k][0] = out, m->shapes[2 * k][1] = in;
  m->ndims[2 * k + 1] = 1, m->shapes[2 * k + 1][0] = out;
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var h = apply(m->g, "matmul", (em_var[]){x, m->params[2 * k]}, 2, &tb, 1);
  return apply(m->g, "add", (em_var[]){h, m->params[2 * k + 1]}, 2, NULL, 0);
}

/* Forward, loss, gradients and the update p - lr * g, as graph outputs. */
static void build(model *m) {
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 2, (int64_t[]){-1, IN}, &m->x));
  CHECK(em_input(m->g, "label", EM_I32, 1, (int64_t[]){-1}, &m->label));
  em_var h = apply(m->g, "relu", (em_var[]){dense(m, m->x, IN, HID, 0, 3)}, 1, NULL, 0);
  em_var logits = dense(m, h, HID, CLS, 1, 5);
  em_var per = apply(m->g, "cross_entropy_with_softmax", (em_var[]){logits, m->label}, 2, NULL, 0);
  m->outs[0] = apply(m->g, "reduce_mean", &per, 1, NULL, 0);
  em_var grads[NP], lr;
  CHECK(em_gradients(m->g, m->outs[0], m->params, NP, grads));
  em_tensor *lrt;
  float lrv = LR;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 0, NULL, &lrv, sizeof lrv, &lrt));
  CHECK(em_constant(m->g, lrt, &lr));
  em_tensor_release(lrt);
  for (int i = 0; i < NP; i++) {
    em_var step = apply(m->g, "mul", (em_var[]){grads[i], lr}, 2, NULL, 0);
    m->outs[1 + i] = apply(m->g, "sub", (em_var[]){m->params[i], step}, 2, NULL, 0);
  }
}

/* Batch `k`: x in [-1, 1), labels k + i mod CLS, one of them replaced by bad_label when >= 0 (at position 5). */
static void batch(int k, int bad_label, em_tensor **xt, em_tensor **yt) {
  float xs[N * IN];
  int32_t ys[N];
  uint64_t s = 1000 + (uint64_t)k;
  for (int i = 0; i < N * IN; i++) xs[i] = (float)ot_uniform(&s, -1, 1);
  for (int i = 0; i < N; i++) ys[i] = (k + i) % CLS;
  if (bad_label >= 0) ys[5] = bad_label;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){N, IN}, xs, sizeof xs, xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){N}, ys, sizeof ys, yt));
}

/* The caller's tensors a run delivers into: the loss on the host, the
 * updated parameters on dev. */
typedef struct sinks {
  em_tensor *t[1 + NP];
} sinks;

static sinks make_sinks(const model *m, em_device dev) {
  sinks k;
  CHECK(em_tensor_zeros(em_cpu(), EM_F32, 0, NULL, &k.t[0]));
  for (int i = 0; i < NP; i++) CHECK(em_tensor_zeros(dev, EM_F32, m->ndims[i], m->shapes[i], &k.t[1 + i]));
  return k;
}

static void sinks_free(sinks *k) {
  for (int i = 0; i < 1 + NP; i++) em_tensor_release(k->t[i]);
}

/* One training step: the run, then (when it succeeded) the parameters set
 * from the delivered updates. Returns the run's status; *loss its loss. */
static em_status step(em_exec *e, model *m, sinks *k, int batch_no, int bad_label, float *loss) {
  em_tensor *xt, *yt;
  batch(batch_no, bad_label, &xt, &yt);
  em_feed f[2] = {{m->x, xt}, {m->label, yt}};
  em_status s = em_exec_run_into(e, f, 2, k->t, EM_RUN_STORE);
  em_tensor_release(xt);
  em_tensor_release(yt);
  if (s) return s;
  *loss = *(const float *)em_tensor_data(k->t[0]);
  for (int i = 0; i < NP; i++) CHECK(em_parameter_set(m->g, m->params[i], k->t[1 + i]));
  return EM_OK;
}

static em_exec_stats stats_of(const em_exec *e) {
  em_exec_stats s;
  CHECK(em_exec_stats_get(e, &s));
  return s;
}

static uint64_t param_bytes(const model *m) {
  uint64_t b = 0;
  for (int i = 0; i < NP; i++) b += 4 * (uint64_t)(m->ndims[i] == 2 ? m->shapes[i][0] * m->shapes[i][1] : m->shapes[i][0]);
  return b;
}

/* The double's count of calls to a driver entry point, or -1 on a real GPU. */
static long calls(const char *name) {
  const char *fake = getenv("FAKECUDA_LIB");
  void *h = fake && *fake ? dlopen(fake, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (!h) return -1;
  fakecuda_call_count_fn count = (fakecuda_call_count_fn)(uintptr_t)dlsym(h, "fakecuda_call_count");
  long n = count ? (long)count(name) : -1;
  dlclose(h);
  return n;
}

/* The calls that wait for the device, per step. */
typedef struct waits {
  long d2h, ctx_sync, stream_sync, free;
} waits;

static waits waits_now(void) {
  return (waits){calls("cuMemcpyDtoH_v2"), calls("cuCtxSynchronize"), calls("cuStreamSynchronize"),
                 calls("cuMemFree_v2")};
}

static void expect_waits(waits before, long d2h, const char *what) {
  waits now = waits_now();
  if (before.d2h < 0) return; /* a real GPU: the double is not there to count */
  if (now.d2h - before.d2h != d2h || now.ctx_sync != before.ctx_sync || now.stream_sync != before.stream_sync ||
      now.free != before.free)
    fail_msg("%s: cuMemcpyDtoH %ld (expected %ld), cuCtxSynchronize %ld, cuStreamSynchronize %ld, cuMemFree %ld "
             "(expected none)",
             what, now.d2h - before.d2h, d2h, now.ctx_sync - before.ctx_sync, now.stream_sync - before.stream_sync,
             now.free - before.free);
}

/* Copies of one run, as expected. */
typedef struct want {
  uint64_t h2d, h2d_bytes, d2h, d2h_bytes, d2d, d2d_bytes;
} want;

static void expect_copies(const em_exec *e, want w, const char *what) {
  em_exec_stats s = stats_of(e);
  if (s.h2d_copies != w.h2d || s.h2d_bytes != w.h2d_bytes || s.d2h_copies != w.d2h || s.d2h_bytes != w.d2h_bytes ||
      s.d2d_copies != w.d2d || s.d2d_bytes != w.d2d_bytes)
    fail_msg("%s: copies h2d %llu (%llu bytes), d2h %llu (%llu bytes), d2d %llu (%llu bytes); expected h2d %llu "
             "(%llu), d2h %llu (%llu), d2d %llu (%llu)",
             what, (unsigned long long)s.h2d_copies, (unsigned long long)s.h2d_bytes,
             (unsigned long long)s.d2h_copies, (unsigned long long)s.d2h_bytes, (unsigned long long)s.d2d_copies,
             (unsigned long long)s.d2d_bytes, (unsigned long long)w.h2d, (unsigned long long)w.h2d_bytes,
             (unsigned long long)w.d2h, (unsigned long long)w.d2h_bytes, (unsigned long long)w.d2d,
             (unsigned long long)w.d2d_bytes);
  if (s.host_steps) {
    char plan[8192];
    em_exec_describe(e, plan, sizeof plan);
    fail_msg("%s: %d steps ran on host copies:\n%s", what, s.host_steps, plan);
  }
}

static void expect_bad_label_error(em_status s, const char *where) {
  if (s != EM_ERR_INVALID_ARGUMENT)
    fail_msg("%s: a label of 4 with 4 classes gave %s (%s)", where, em_status_name(s), em_last_error());
  const char *msg = em_last_error();
  static const char *const parts[] = {"cross_entropy_with_softmax", "label 4 at position [5]", "[0, 4)"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (!strstr(msg, parts[i])) fail_msg("%s: the message lacks \"%s\": %s", where, parts[i], msg);
}

/* The CPU twin's losses for batches 0 .. n-1 (portable mode). */
static void cpu_losses(int n, float *losses) {
  model m = {0};
  build(&m);
  em_exec *e;
  CHECK(em_exec_create(m.g, m.outs, 1 + NP, em_cpu(), &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  sinks k = make_sinks(&m, em_cpu());
  for (int b = 0; b < n; b++) CHECK(step(e, &m, &k, b, -1, &losses[b]));
  sinks_free(&k);
  em_exec_free(e);
  em_graph_free(m.g);
}

/* Lets the device finish the work issued so far without a synchronisation
 * Ember sees, as a real GPU does by itself microseconds later (the double
 * runs work only at synchronisation points): device 0's legacy stream is
 * queried, in its primary context, until it is idle. */
static void device_catches_up(void) {
  const char *lib = getenv("EMBER_LIBCUDA");
  void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) fail_msg("the driver library is not loaded: %s", dlerror());
  typedef int (*retain_fn)(void **ctx, int dev);
  typedef int (*push_fn)(void *ctx);
  typedef int (*pop_fn)(void **ctx);
  typedef int (*query_fn)(void *stream);
  typedef int (*release_fn)(int dev);
  retain_fn retain = (retain_fn)(uintptr_t)dlsym(h, "cuDevicePrimaryCtxRetain");
  push_fn push = (push_fn)(uintptr_t)dlsym(h, "cuCtxPushCurrent_v2");
  pop_fn pop = (pop_fn)(uintptr_t)dlsym(h, "cuCtxPopCurrent_v2");
  query_fn query = (query_fn)(uintptr_t)dlsym(h, "cuStreamQuery");
  release_fn release = (release_fn)(uintptr_t)dlsym(h, "cuDevicePrimaryCtxRelease_v2");
  void *ctx = NULL, *popped = NULL;
  if (!retain || !push || !pop || !query || !release || retain(&ctx, 0) || push(ctx))
    fail_msg("cannot make device 0's primary context current");
  int r;
  while ((r = query(NULL)) == 600) /* CUDA_ERROR_NOT_READY */
    ;
  if (r) fail_msg("cuStreamQuery: %d", r);
  pop(&popped);
  release(0);
  dlclose(h);
}

/* ------------------------------------------------------------- tests --- */

#define GOOD_STEPS 4

/* Mapped host memory (no_map 0): a step copies its feeds and the loss, and
 * moves the updates within the device, nothing more. Without it (no_map 1)
 * each of the two label checks (the loss and its gradient) adds one copy of
 * its 32-byte record to the host. */
static void train_and_count(int no_map) {
  float want_loss[GOOD_STEPS + 1];
  cpu_losses(GOOD_STEPS + 1, want_loss);
  model m = {0};
  build(&m);
  em_exec *e;
  CHECK(em_exec_create(m.g, m.outs, 1 + NP, em_cuda(0), &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  sinks k = make_sinks(&m, em_cuda(0));
  uint64_t pb = param_bytes(&m);
  assert_int_equal(pb, 4 * (HID * IN + HID + CLS * HID + CLS));
  const uint64_t feed_bytes = 4 * N * IN + 4 * N, checks = no_map ? 2 : 0;
  want per_run = {.h2d = 2, .h2d_bytes = feed_bytes, .d2h = 1 + checks, .d2h_bytes = 4 + 32 * checks,
                  .d2d = NP, .d2d_bytes = pb};
  for (int b = 0; b < GOOD_STEPS; b++) {
    float loss;
    waits before = waits_now();
    CHECK(step(e, &m, &k, b, -1, &loss));
    if (b > 0) expect_waits(before, 1 + (long)checks, "a training step"); /* the first also loads modules */
    if (memcmp(&loss, &want_loss[b], sizeof loss))
      fail_msg("step %d: loss %.9g on the GPU, %.9g on the CPU", b, loss, want_loss[b]);
    want w = per_run;
    if (b == 0) w.h2d += NP + 1, w.h2d_bytes += pb + 4; /* the parameters and lr, uploaded once */
    char what[64];
    snprintf(what, sizeof what, "step %d", b);
    expect_copies(e, w, what);
    if (b == 1)
      print_message("per training step on cuda:0: h2d %llu copies (%llu bytes), d2h %llu (%llu bytes), d2d %llu "
                    "(%llu bytes), host steps 0\n",
                    (unsigned long long)w.h2d, (unsigned long long)w.h2d_bytes, (unsigned long long)w.d2h,
                    (unsigned long long)w.d2h_bytes, (unsigned long long)w.d2d, (unsigned long long)w.d2d_bytes);
  }

  /* A bad label: the run that reads the loss fails, naming the op and label;
   * nothing is updated, and the next good run continues as the CPU twin. */
  float ignored;
  expect_bad_label_error(step(e, &m, &k, 99, CLS, &ignored), "a step with a bad label");
  float loss;
  CHECK(step(e, &m, &k, GOOD_STEPS, -1, &loss));
  if (memcmp(&loss, &want_loss[GOOD_STEPS], sizeof loss))
    fail_msg("the step after the bad one: loss %.9g on the GPU, %.9g on the CPU", loss, want_loss[GOOD_STEPS]);
  expect_copies(e, per_run, "the step after the bad one");

  /* Outputs left on the device: the run itself cannot know yet (mapped
   * memory: no synchronisation in it); reading the loss reports it. */
  if (!no_map) {
    em_tensor *xt, *yt, *res[1 + NP];
    batch(7, CLS, &xt, &yt);
    em_feed f[2] = {{m.x, xt}, {m.label, yt}};
    CHECK(em_exec_run(e, f, 2, res));
    expect_copies(e, (want){.h2d = 2, .h2d_bytes = feed_bytes}, "a run leaving its outputs on the device");
    float v;
    expect_bad_label_error(em_tensor_to_host(res[0], &v, sizeof v), "reading the loss of that run");
    CHECK(em_tensor_to_host(res[0], &v, sizeof v)); /* reported once */
    for (int i = 0; i < 1 + NP; i++) em_tensor_release(res[i]);
    em_tensor_release(xt);
    em_tensor_release(yt);
  }
  sinks_free(&k);
  em_exec_free(e);
  em_graph_free(m.g);
  leave_gpu();
}

static void test_step_copies_only_feeds_and_fetches(void **state) {
  (void)state;
  NEED_GPU(0);
  train_and_count(0);
}

static void test_step_without_mapped_memory_counts_the_checks(void **state) {
  (void)state;
  NEED_GPU(1);
  train_and_count(1);
}

/* binary_cross_entropy's probability check reports the same way: p = 1.5
 * fails the read of the result with the op's message, once. */
static void test_probability_check_reported_at_the_read(void **state) {
  (void)state;
  NEED_GPU(0);
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var p, t;
  CHECK(em_input(g, "p", EM_F64, 1, (int64_t[]){4}, &p));
  CHECK(em_input(g, "t", EM_F64, 1, (int64_t[]){4}, &t));
  em_var y = apply(g, "binary_cross_entropy", (em_var[]){p, t}, 2, NULL, 0);
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &e));
  em_tensor *pt = ot_tensor(EM_F64, 1, (int64_t[]){4}, (double[]){0.25, 0.5, 1.5, 0.75});
  em_tensor *tt = ot_tensor(EM_F64, 1, (int64_t[]){4}, (double[]){0, 1, 1, 0});
  em_tensor *r, *host = ot_tensor(EM_F64, 1, (int64_t[]){4}, (double[]){0, 0, 0, 0});
  em_feed f[2] = {{p, pt}, {t, tt}};
  em_status s = em_exec_run_into(e, f, 2, &host, EM_RUN_STORE);
  if (s != EM_ERR_INVALID_ARGUMENT || !strstr(em_last_error(), "binary_cross_entropy") ||
      !strstr(em_last_error(), "p = 1.5 at position [2]"))
    fail_msg("p = 1.5 gave %s: %s", em_status_name(s), em_last_error());
  /* Good input afterwards: no stale report. */
  em_tensor *ok = ot_tensor(EM_F64, 1, (int64_t[]){4}, (double[]){0.25, 0.5, 0.5, 0.75});
  f[0].value = ok;
  CHECK(em_exec_run(e, f, 2, &r));
  double got[4];
  CHECK(em_tensor_to_host(r, got, sizeof got));
  em_tensor_release(r);
  em_tensor_release(ok);
  em_tensor_release(pt);
  em_tensor_release(tt);
  em_tensor_release(host);
  em_exec_free(e);
  em_graph_free(g);
  leave_gpu();
}

/* A failure still pending when em_exec_free runs (the run's outputs left on
 * the device, not read yet): free cannot return it, so the caller's next read
 * of an output it still holds must, once. Another executor on the same device
 * being freed meanwhile must not take it either. */
static void test_failure_pending_at_free_fails_the_later_read(void **state) {
  (void)state;
  NEED_GPU(0);
  model m = {0}, other = {0};
  build(&m);
  build(&other);
  em_exec *e, *e2;
  CHECK(em_exec_create(m.g, m.outs, 1 + NP, em_cuda(0), &e));
  CHECK(em_exec_create(other.g, other.outs, 1 + NP, em_cuda(0), &e2));
  em_tensor *xt, *yt, *res[1 + NP], *res2[1 + NP];
  batch(1, -1, &xt, &yt);
  em_feed f2[2] = {{other.x, xt}, {other.label, yt}};
  CHECK(em_exec_run(e2, f2, 2, res2)); /* the other executor holds its parameters on the device */
  em_tensor_release(xt);
  em_tensor_release(yt);
  batch(7, CLS, &xt, &yt);
  em_feed f[2] = {{m.x, xt}, {m.label, yt}};
  CHECK(em_exec_run(e, f, 2, res));
  device_catches_up();
  em_exec_free(e2);
  em_exec_free(e);
  float v;
  expect_bad_label_error(em_tensor_to_host(res[0], &v, sizeof v), "reading the loss after em_exec_free");
  CHECK(em_tensor_to_host(res[0], &v, sizeof v)); /* reported once */
  for (int i = 0; i < 1 + NP; i++) {
    em_tensor_release(res[i]);
    em_tensor_release(res2[i]);
  }
  em_tensor_release(xt);
  em_tensor_release(yt);
  em_graph_free(m.g);
  em_graph_free(other.g);
  leave_gpu();
}

int main(void) {
  /* These counts are the eager run's (each step launched, the fetches
   * handed over as computed): with CUDA graphs, from the third run on a
   * replay also copies each fetch out of the graph's buffer (within the
   * device), which test_exec_graphs covers. */
  setenv("EMBER_CUDA_GRAPHS", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_step_copies_only_feeds_and_fetches),
      cmocka_unit_test(test_step_without_mapped_memory_counts_the_checks),
      cmocka_unit_test(test_probability_check_reported_at_the_read),
      cmocka_unit_test(test_failure_pending_at_free_fails_the_later_read),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
