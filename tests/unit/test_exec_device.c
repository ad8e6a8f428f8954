/* The executor on a CUDA device (the test double's GPUs; a real one under
 * `make test-gpu`): devices checked where they enter, parameters and states
 * resident on the device (uploaded once, again only after a change; states
 * updated there read back lazily), copy accounting in em_exec_stats (exact
 * counts, host-copy fallback included), the caching allocator's out of
 * memory path (retry after returning the cache, then an error naming the
 * node, op, shape and bytes; the executor usable afterwards), and
 * em_exec_run_into delivering on the device.
 *
 * Expected counts are derived here from what each run must copy: one
 * host-to-device copy per host feed, one per leaf uploaded, and for a step
 * that runs on host copies one device-to-host copy per input and one
 * host-to-device copy per output. Which steps run on host copies is read
 * from em_exec_describe (its "[on host copies" marks), so the counts stay
 * exact while the op families gain GPU implementations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "op_testkit.h"

#define CHECK(call)                                                   \
  do {                                                                \
    em_status s_ = (call);                                            \
    if (s_) fail_msg("%s: %s", #call, em_last_error());               \
  } while (0)

/* ------------------------------------------------------------ helpers --- */

/* Points the runtime at the test double with these devices (NULL: none
 * visible) and memory cap (0: the default), forcing a path (NULL: none).
 * Without the double (a real GPU, `make test-gpu`), a test that needs only
 * one GPU (real_ok) runs on the real driver's cuda:0. Returns 0 when neither
 * is there (the test then skips). */
static int use_double(const char *devices, int mem_mb, const char *force, int real_ok) {
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) {
    if (!real_ok || getenv("EMBER_LIBCUDA")) return 0;
    if (force) setenv("EMBER_FORCE", force, 1);
    else unsetenv("EMBER_FORCE");
    em_shutdown();
    int n = 0;
    return !em_cuda_device_count(&n) && n > 0;
  }
  setenv("EMBER_LIBCUDA", fake, 1);
  if (devices) setenv("FAKECUDA_DEVICES", devices, 1);
  else setenv("FAKECUDA_DEVICES", "", 1);
  char mb[32];
  snprintf(mb, sizeof mb, "%d", mem_mb);
  if (mem_mb) setenv("FAKECUDA_MEM_MB", mb, 1);
  else unsetenv("FAKECUDA_MEM_MB");
  if (force) setenv("EMBER_FORCE", force, 1);
  else unsetenv("EMBER_FORCE");
  unsetenv("FAKECUDA_STUB");
  em_shutdown();
  return 1;
}

static void leave_double(void) {
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("FAKECUDA_MEM_MB");
  unsetenv("EMBER_FORCE");
  unsetenv("FAKECUDA_STUB");
}

/* The test double's configuration, or (where one GPU is enough) a real GPU. */
#define NEED_GPU(devices, mem_mb, force, real_ok)                                                        \
  do {                                                                                                   \
    if (!use_double(devices, mem_mb, force, real_ok)) {                                                  \
      print_message("SKIPPED: no test double (FAKECUDA_LIB, set by build-tools/run_tests.sh)%s\n",       \
                    (real_ok) ? " and no real GPU" : "; this test needs the double's configuration");    \
      skip();                                                                                            \
    }                                                                                                    \
  } while (0)
#define NEED_DOUBLE(devices, mem_mb, force) NEED_GPU(devices, mem_mb, force, 0)
#define NEED_ONE_GPU(force) NEED_GPU("9.0=Fake H100", 0, force, 1)

static void expect_error(em_status s, em_status want, const char *n1, const char *n2) {
  if (s != want) fail_msg("expected %s, got %s (%s)", em_status_name(want), em_status_name(s), em_last_error());
  if (n1 && !strstr(em_last_error(), n1)) fail_msg("message lacks \"%s\": %s", n1, em_last_error());
  if (n2 && !strstr(em_last_error(), n2)) fail_msg("message lacks \"%s\": %s", n2, em_last_error());
}

static em_graph *new_graph(void) {
  em_graph *g;
  CHECK(em_graph_create(&g));
  return g;
}

static em_var input(em_graph *g, const char *name, em_dtype dt, int64_t n) {
  em_var v;
  CHECK(em_input(g, name, dt, 1, (int64_t[]){n}, &v));
  return v;
}

static em_var leaf(em_graph *g, int state, const char *name, int64_t n, const double *values) {
  em_tensor *t = ot_tensor(EM_F64, 1, (int64_t[]){n}, values);
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
  em_var v;
  if (state) CHECK(em_state(g, name, EM_F64, 1, (int64_t[]){n}, &init, &v));
  else CHECK(em_parameter(g, name, EM_F64, 1, (int64_t[]){n}, &init, &v));
  em_tensor_release(t);
  return v;
}

static em_var apply(em_graph *g, const char *op, const em_var *in, int n) {
  em_var y;
  if (em_apply(g, op, in, n, NULL, 0, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}

static em_exec_stats stats(const em_exec *e) {
  em_exec_stats s;
  CHECK(em_exec_stats_get(e, &s));
  return s;
}

/* The copies a run must make: feeds given on the host, leaves uploaded, and
 * per step on host copies one copy down per input and one up per output. */
typedef struct copies {
  uint64_t h2d, d2h, d2d;
} copies;

#define ANY UINT64_MAX /* a count not checked */

/* The plan's steps on host copies, from em_exec_describe: adds their copies
 * (each input down, each output up, bytes per tensor) to c. A step that ran
 * on the device may copy within it (an identity may be a device-to-device
 * copy): d2d is then not checked. */
static int add_host_steps(const em_exec *e, copies *c, copies *b, int64_t bytes_each) {
  int steps = 0;
  char text[8192];
  size_t n = em_exec_describe(e, text, sizeof text);
  assert_true(n < sizeof text);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "plan:", 5) && !strstr(line, "[on host copies")) c->d2d = b->d2d = ANY;
    if (!strstr(line, "[on host copies")) continue;
    steps++;
    /* "   0  node 4 add_n(0, 1, 2) -> 5:f64[4]": inputs are the commas + 1. */
    char *open = strchr(line, '('), *close = strchr(line, ')');
    assert_non_null(open);
    int n_in = 1;
    for (char *p = open; p < close; p++) n_in += *p == ',';
    c->d2h += (uint64_t)n_in;
    b->d2h += (uint64_t)(n_in * bytes_each);
    c->h2d += 1; /* every op here has one output */
    b->h2d += (uint64_t)bytes_each;
  }
  return steps;
}

static void expect_copies(const em_exec *e, copies want, copies bytes, const char *what) {
  em_exec_stats s = stats(e);
  int d2d_ok = want.d2d == ANY || (s.d2d_copies == want.d2d && s.d2d_bytes == bytes.d2d);
  if (s.h2d_copies != want.h2d || s.d2h_copies != want.d2h || !d2d_ok || s.h2d_bytes != bytes.h2d ||
      s.d2h_bytes != bytes.d2h) {
    char plan[4096];
    em_exec_describe(e, plan, sizeof plan);
    fail_msg("%s: copies h2d %llu (%llu bytes), d2h %llu (%llu bytes), d2d %llu (%llu bytes); expected h2d %llu "
             "(%llu), d2h %llu (%llu), d2d %llu (%llu)\n%s",
             what, (unsigned long long)s.h2d_copies, (unsigned long long)s.h2d_bytes,
             (unsigned long long)s.d2h_copies, (unsigned long long)s.d2h_bytes, (unsigned long long)s.d2d_copies,
             (unsigned long long)s.d2d_bytes, (unsigned long long)want.h2d, (unsigned long long)bytes.h2d,
             (unsigned long long)want.d2h, (unsigned long long)bytes.d2h, (unsigned long long)want.d2d,
             (unsigned long long)bytes.d2d, plan);
  }
}

static double *values_of(em_tensor *t) {
  double *v = ot_values(t, NULL);
  em_tensor_release(t);
  return v;
}

/* ----------------------------------------------------------- devices --- */

/* A device that does not exist is refused where it enters, naming those that do. */
static void test_devices_checked_where_they_enter(void **state) {
  (void)state;
  NEED_DOUBLE("7.5=Fake T4,9.0=Fake H100", 0, NULL);
  em_graph *g = new_graph();
  em_var x = input(g, "x", EM_F64, 2), y = apply(g, "identity", &x, 1);
  em_exec *e = NULL;
  expect_error(em_exec_create(g, &y, 1, (em_device){(em_device_kind)7, 0}, &e), EM_ERR_INVALID_ARGUMENT,
               "unknown device kind 7", "cuda:1 (Fake H100, CC 9.0)");
  expect_error(em_exec_create(g, &y, 1, em_cuda(2), &e), EM_ERR_NOT_FOUND, "cuda:2", "cuda:0 (Fake T4, CC 7.5)");
  expect_error(em_exec_create(g, &y, 1, em_cuda(-1), &e), EM_ERR_NOT_FOUND, "cuda:-1", "2 visible");
  expect_error(em_exec_create(g, &y, 1, (em_device){EM_DEVICE_CPU, 1}, &e), EM_ERR_INVALID_ARGUMENT, "cpu:1", NULL);
  assert_null(e);
  em_tensor *t = NULL;
  expect_error(em_tensor_zeros(em_cuda(3), EM_F32, 1, (int64_t[]){4}, &t), EM_ERR_NOT_FOUND, "em_tensor_zeros",
               "cuda:1 (Fake H100");
  float one = 1;
  expect_error(em_tensor_from_host((em_device){(em_device_kind)9, 0}, EM_F32, 0, NULL, &one, sizeof one, &t),
               EM_ERR_INVALID_ARGUMENT, "em_tensor_from_host", "unknown device kind 9");
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 0, NULL, &one, sizeof one, &t));
  em_tensor *u = NULL;
  expect_error(em_tensor_to_device(t, em_cuda(7), &u), EM_ERR_NOT_FOUND, "cuda:7", "cuda:0 (Fake T4");
  assert_null(u);
  em_tensor_release(t);
  assert_int_equal(em_device_check(em_cuda(1)), EM_OK);
  assert_int_equal(em_device_check(em_cpu()), EM_OK);
  /* The best: the highest compute capability, whatever its ordinal. */
  em_device best = em_device_best();
  assert_int_equal(best.kind, EM_DEVICE_CUDA);
  assert_int_equal(best.ordinal, 1);
  em_graph_free(g);
  leave_double();
}

/* A GPU asked for where the driver is unusable fails saying so; the best
 * device there is the CPU. */
static void test_no_usable_driver(void **state) {
  (void)state;
  NEED_DOUBLE(NULL, 0, NULL); /* no visible device: cuInit answers CUDA_ERROR_NO_DEVICE */
  em_graph *g = new_graph();
  em_var x = input(g, "x", EM_F64, 2), y = apply(g, "identity", &x, 1);
  em_exec *e = NULL;
  expect_error(em_exec_create(g, &y, 1, em_cuda(0), &e), EM_ERR_NOT_FOUND, "CUDA is not usable", "only the CPU");
  em_tensor *t = NULL;
  expect_error(em_tensor_zeros(em_cuda(0), EM_F64, 1, (int64_t[]){2}, &t), EM_ERR_NOT_FOUND, "CUDA is not usable",
               NULL);
  em_device best = em_device_best();
  assert_int_equal(best.kind, EM_DEVICE_CPU);
  CHECK(em_exec_create(g, &y, 1, em_cpu(), &e)); /* the CPU always works */
  em_exec_free(e);
  em_graph_free(g);
  setenv("FAKECUDA_STUB", "1", 1); /* the toolkit's stub libcuda */
  em_shutdown();
  g = new_graph();
  x = input(g, "x", EM_F64, 2), y = apply(g, "identity", &x, 1);
  expect_error(em_exec_create(g, &y, 1, em_cuda(0), &e), EM_ERR_NOT_FOUND, "CUDA is not usable", NULL);
  em_graph_free(g);
  leave_double();
}

/* ------------------------------------------------------------- copies --- */

/* x + p + c on a device whose plan for every module is the CPU (EMBER_FORCE=cpu):
 * every step runs on host copies, and each copy is counted exactly. The
 * parameter and the constant are uploaded at the first run only, and again
 * after em_parameter_set or em_parameter_value (which hands out the host
 * storage for writing), never after em_parameter_get. */
static void test_copies_counted_with_host_fallback(void **state) {
  (void)state;
  NEED_ONE_GPU("cpu");
  em_graph *g = new_graph();
  double pv[4] = {1, 2, 3, 4}, cv[4] = {10, 20, 30, 40}, xv[4] = {100, 200, 300, 400};
  em_var x = input(g, "x", EM_F64, 4), p = leaf(g, 0, "p", 4, pv);
  em_tensor *ct = ot_tensor(EM_F64, 1, (int64_t[]){4}, cv);
  em_var c;
  CHECK(em_constant(g, ct, &c));
  em_tensor_release(ct);
  em_var sum = apply(g, "add_n", (em_var[]){x, p, c}, 3), y = apply(g, "identity", &sum, 1);
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &e));
  em_tensor *xt = ot_tensor(EM_F64, 1, (int64_t[]){4}, xv), *r;
  em_feed f = {x, xt};

  CHECK(em_exec_run(e, &f, 1, &r));
  assert_int_equal(em_tensor_device(r).kind, EM_DEVICE_CUDA);
  double *got = values_of(r), want[4] = {111, 222, 333, 444};
  ot_expect_close(got, want, 4, 0, 0, "x + p + c");
  free(got);
  copies n = {.h2d = 1 + 2}, b = {.h2d = 32 * 3}; /* the feed; p and c uploaded */
  assert_int_equal(stats(e).host_steps, add_host_steps(e, &n, &b, 32));
  expect_copies(e, n, b, "first run");
  assert_int_equal(stats(e).resident_bytes, 64);

  CHECK(em_exec_run(e, &f, 1, &r));
  em_tensor_release(r);
  copies n2 = {.h2d = 1}, b2 = {.h2d = 32}; /* the feed only */
  add_host_steps(e, &n2, &b2, 32);
  expect_copies(e, n2, b2, "second run: nothing uploaded again");

  /* Changed on the host: uploaded again, once. */
  double nv[4] = {-1, -2, -3, -4};
  em_tensor *nt = ot_tensor(EM_F64, 1, (int64_t[]){4}, nv);
  CHECK(em_parameter_set(g, p, nt));
  em_tensor_release(nt);
  CHECK(em_exec_run(e, &f, 1, &r));
  double want2[4] = {109, 218, 327, 436};
  got = values_of(r);
  ot_expect_close(got, want2, 4, 0, 0, "after em_parameter_set");
  free(got);
  copies n3 = {.h2d = 2}, b3 = {.h2d = 64};
  add_host_steps(e, &n3, &b3, 32);
  expect_copies(e, n3, b3, "after em_parameter_set: p uploaded again");

  /* em_parameter_value hands out the host storage: the caller may write. */
  em_tensor *pt;
  CHECK(em_parameter_value(g, p, &pt));
  ((double *)em_tensor_data(pt))[0] = 1000;
  em_tensor_release(pt);
  CHECK(em_exec_run(e, &f, 1, &r));
  got = values_of(r);
  assert_true(got[0] == 1110);
  free(got);
  expect_copies(e, n3, b3, "after a write through em_parameter_value: p uploaded again");

  /* em_parameter_get only reads: device to device, nothing uploaded after it. */
  CHECK(em_parameter_get(g, p, em_cuda(0), &pt));
  assert_int_equal(em_tensor_device(pt).kind, EM_DEVICE_CUDA);
  got = values_of(pt);
  assert_true(got[0] == 1000 && got[3] == -4);
  free(got);
  CHECK(em_exec_run(e, &f, 1, &r));
  em_tensor_release(r);
  expect_copies(e, n2, b2, "after em_parameter_get: nothing uploaded");

  /* Set from a tensor on the device: copied there directly, nothing uploaded,
   * and the host sees it when read. */
  double dv[4] = {7, 8, 9, 10};
  em_tensor *dh = ot_tensor(EM_F64, 1, (int64_t[]){4}, dv), *dd;
  CHECK(em_tensor_to_device(dh, em_cuda(0), &dd));
  em_tensor_release(dh);
  CHECK(em_parameter_set(g, p, dd));
  em_tensor_release(dd);
  CHECK(em_exec_run(e, &f, 1, &r));
  double want3[4] = {117, 228, 339, 450};
  got = values_of(r);
  ot_expect_close(got, want3, 4, 0, 0, "after em_parameter_set from the device");
  free(got);
  expect_copies(e, n2, b2, "after em_parameter_set from the device: nothing uploaded");
  CHECK(em_parameter_get(g, p, em_cpu(), &pt));
  got = values_of(pt);
  ot_expect_close(got, dv, 4, 0, 0, "the host reads the value set on the device");
  free(got);

  /* A feed already on the device is not copied. */
  em_tensor *xd;
  CHECK(em_tensor_to_device(xt, em_cuda(0), &xd));
  em_feed fd = {x, xd};
  CHECK(em_exec_run(e, &fd, 1, &r));
  em_tensor_release(r);
  copies n4 = {0}, b4 = {0};
  add_host_steps(e, &n4, &b4, 32);
  expect_copies(e, n4, b4, "fed on the device");

  /* The steps on host copies are named. */
  char plan[2048];
  em_exec_describe(e, plan, sizeof plan);
  if (!strstr(plan, "add_n") || (stats(e).host_steps && !strstr(plan, "[on host copies")) ||
      !strstr(plan, "device cuda:0"))
    fail_msg("em_exec_describe does not mark the steps on host copies:\n%s", plan);
  em_tensor_release(xd);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
  leave_double();
}

/* The ops that have a GPU implementation run on the device: a run copies its
 * host feed and, at the first run, the parameter; fed on the device, nothing.
 * Skips while no op of the chain has its gpu member. */
static void test_device_ops_copy_only_feeds(void **state) {
  (void)state;
  NEED_ONE_GPU(NULL);
  /* Two-input elementwise ops that may have a GPU implementation by now. */
  static const char *const candidates[] = {"mul", "add", "sub", "max", "add_n"};
  const char *op = NULL;
  for (size_t i = 0, n = em_op_info_count(); i < n && !op; i++) {
    em_op_info info;
    CHECK(em_op_info_get(i, &info));
    for (size_t k = 0; k < sizeof candidates / sizeof *candidates; k++)
      if (info.gpu && !strcmp(info.name, candidates[k])) op = candidates[k];
  }
  if (!op) {
    print_message("SKIPPED: none of mul, add, sub, max, add_n has a GPU implementation yet\n");
    leave_double();
    skip();
  }
  em_graph *g = new_graph();
  double pv[5] = {1, 2, 3, 4, 5}, xv[5] = {5, 4, 3, 2, 1};
  em_var x = input(g, "x", EM_F64, 5), p = leaf(g, 0, "p", 5, pv);
  em_var y = apply(g, op, (em_var[]){x, p}, 2);
  y = apply(g, op, (em_var[]){y, p}, 2);
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &e));
  em_tensor *xt = ot_tensor(EM_F64, 1, (int64_t[]){5}, xv), *r, *rc;
  em_feed f = {x, xt};
  CHECK(em_exec_run(e, &f, 1, &r));
  if (stats(e).host_steps) {
    char plan[2048];
    em_exec_describe(e, plan, sizeof plan);
    fail_msg("op '%s' has a GPU implementation but ran on host copies:\n%s", op, plan);
  }
  expect_copies(e, (copies){.h2d = 2}, (copies){.h2d = 80}, "first run on the device");
  /* The same values as the CPU. */
  em_exec *ce;
  CHECK(em_exec_create(g, &y, 1, em_cpu(), &ce));
  CHECK(em_exec_run(ce, &f, 1, &rc));
  double *gv = values_of(r), *cv = values_of(rc);
  ot_expect_close(gv, cv, 5, 0, 0, "the device against the CPU");
  free(gv), free(cv);
  em_exec_free(ce);
  CHECK(em_exec_run(e, &f, 1, &r));
  em_tensor_release(r);
  expect_copies(e, (copies){.h2d = 1}, (copies){.h2d = 40}, "second run: the feed only");
  em_tensor *xd;
  CHECK(em_tensor_to_device(xt, em_cuda(0), &xd));
  em_feed fd = {x, xd};
  CHECK(em_exec_run(e, &fd, 1, &r));
  em_tensor_release(r);
  expect_copies(e, (copies){0}, (copies){0}, "fed on the device: no copy at all");
  em_tensor_release(xd);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
  leave_double();
}

/* Each step resolves its kernels on its first launch and keeps the handles:
 * the first run looks up at least one kernel per step (every step here runs
 * on the device), later runs none; another executor of the same graph has
 * its own steps and looks up again. */
static void test_kernels_resolved_once(void **state) {
  (void)state;
  NEED_ONE_GPU(NULL);
  em_graph *g = new_graph();
  em_var x = input(g, "x", EM_F32, 4);
  em_var y = apply(g, "neg", &x, 1);
  y = apply(g, "relu", &y, 1);
  y = apply(g, "neg", &y, 1);
  em_exec *e, *e2;
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &e));
  float xv[4] = {1, -2, 3, -4}, want[4] = {-0.0f, -2, -0.0f, -4}, got[4]; /* neg(relu(-x)): relu gives +0, neg -0 */
  em_tensor *xt, *r;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){4}, xv, sizeof xv, &xt));
  em_feed f = {x, xt};
  for (int run = 0; run < 3; run++) {
    CHECK(em_exec_run(e, &f, 1, &r));
    CHECK(em_tensor_to_host(r, got, sizeof got));
    em_tensor_release(r);
    assert_memory_equal(got, want, sizeof want);
    em_exec_stats s = stats(e);
    if (s.host_steps) skip(); /* this build's plan for the unary kernels is the CPU */
    if (run == 0 && s.kernel_lookups < 3) fail_msg("first run: %llu lookups for 3 steps", (unsigned long long)s.kernel_lookups);
    if (run > 0 && s.kernel_lookups) fail_msg("run %d looked up %llu kernels again", run, (unsigned long long)s.kernel_lookups);
  }
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &e2));
  CHECK(em_exec_run(e2, &f, 1, &r));
  em_tensor_release(r);
  assert_true(stats(e2).kernel_lookups >= 3);
  em_exec_free(e2);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
  leave_double();
}

/* em_exec_run_into: a store into a device tensor is one copy within the
 * device, into a host tensor one copy down; an accumulation into a device
 * tensor goes through the host (two down, one up), counted. */
static void test_run_into_device_outputs(void **state) {
  (void)state;
  NEED_ONE_GPU("cpu");
  em_graph *g = new_graph();
  double xv[3] = {1, 2, 3}, ten[3] = {10, 10, 10};
  em_var x = input(g, "x", EM_F64, 3), y = apply(g, "identity", &x, 1);
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &e));
  em_tensor *xt = ot_tensor(EM_F64, 1, (int64_t[]){3}, xv), *xd, *dst, *host = ot_tensor(EM_F64, 1, (int64_t[]){3}, ten);
  CHECK(em_tensor_to_device(xt, em_cuda(0), &xd));
  CHECK(em_tensor_to_device(host, em_cuda(0), &dst));
  em_feed f = {x, xd};
  /* A plain run first: which steps run on host copies (describe marks them
   * once they ran), and what the steps copy within the device. */
  em_tensor *r;
  CHECK(em_exec_run(e, &f, 1, &r));
  em_tensor_release(r);
  copies base = {0}, bb = {0};
  add_host_steps(e, &base, &bb, 24);
  if (base.d2d == ANY) base.d2d = stats(e).d2d_copies, bb.d2d = stats(e).d2d_bytes;

  CHECK(em_exec_run_into(e, &f, 1, &dst, EM_RUN_STORE));
  copies n = base, b = bb;
  n.d2d += 1, b.d2d += 24;
  expect_copies(e, n, b, "store into a device tensor");
  double *got = ot_values(dst, NULL);
  ot_expect_close(got, xv, 3, 0, 0, "stored on the device");
  free(got);

  CHECK(em_exec_run_into(e, &f, 1, &host, EM_RUN_STORE));
  n = base, b = bb;
  n.d2h += 1, b.d2h += 24;
  expect_copies(e, n, b, "store into a host tensor");
  ot_expect_close(em_tensor_data(host), xv, 3, 0, 0, "stored on the host");

  CHECK(em_exec_run_into(e, &f, 1, &dst, EM_RUN_ACCUMULATE));
  n = base, b = bb;
  n.d2h += 2, b.d2h += 48, n.h2d += 1, b.h2d += 24;
  expect_copies(e, n, b, "accumulate into a device tensor");
  got = ot_values(dst, NULL);
  double twice[3] = {2, 4, 6};
  ot_expect_close(got, twice, 3, 0, 0, "accumulated on the device");
  free(got);
  em_tensor_release(dst);
  em_tensor_release(host);
  em_tensor_release(xd);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
  leave_double();
}

/* ------------------------------------------------------------- states --- */

/* Batch normalization's running statistics updated on the device (by its
 * kernel, or on host copies written back): what em_parameter_value,
 * em_parameter_get, em_graph_save and a CPU executor see is the newest value,
 * equal to a CPU executor's; a second run does not upload them again; and
 * freeing the executor brings the host up to date. Once with the double's
 * kernels, once with every module planned to the CPU. */
static void states_on_device(const char *force) {
  int64_t s42[2] = {4, 2}, s2[1] = {2};
  double xv[8] = {1, 10, 2, 20, 3, 30, 6, 40}, ones[2] = {1, 1}, zeros[2] = {0, 0};
  em_graph *g[2];
  em_var x, rm, rv, y;
  for (int k = 0; k < 2; k++) {
    g[k] = new_graph();
    CHECK(em_input(g[k], "x", EM_F64, 2, s42, &x));
    em_var sc = leaf(g[k], 0, "scale", 2, ones), bi = leaf(g[k], 0, "bias", 2, zeros);
    rm = leaf(g[k], 1, "rm", 2, zeros), rv = leaf(g[k], 1, "rv", 2, ones);
    y = apply(g[k], "batch_normalization", (em_var[]){x, sc, bi, rm, rv}, 5);
  }
  (void)s2;
  em_exec *e[2];
  CHECK(em_exec_create(g[0], &y, 1, em_cpu(), &e[0]));
  CHECK(em_exec_create(g[1], &y, 1, em_cuda(0), &e[1]));
  em_tensor *host_rm; /* the host storage, held across the runs */
  CHECK(em_parameter_value(g[1], rm, &host_rm));
  em_tensor *xt = ot_tensor(EM_F64, 2, s42, xv), *r;
  em_feed f = {x, xt};
  for (int k = 0; k < 2; k++) {
    CHECK(em_exec_set_training(e[k], 1));
    CHECK(em_exec_set_mode(e[k], EM_MODE_PORTABLE));
    for (int run = 0; run < 2; run++) {
      CHECK(em_exec_run(e[k], &f, 1, &r));
      em_tensor_release(r);
    }
  }
  /* The second device run uploaded nothing but the feed (the states are
   * newest on the device, the parameters unchanged). */
  copies n = {.h2d = 1}, b = {.h2d = 64};
  char plan[2048];
  em_exec_describe(e[1], plan, sizeof plan);
  if (strstr(plan, "[on host copies")) { /* batch norm's 5 inputs down, y up, rm and rv written back */
    n.d2h += 5, b.d2h += 64 + 4 * 16;
    n.h2d += 1 + 2, b.h2d += 64 + 2 * 16;
  }
  expect_copies(e[1], n, b, "second training run on the device");
  double *want_rm, *want_rv, *got;
  em_tensor *t;
  CHECK(em_parameter_get(g[0], rm, em_cpu(), &t));
  want_rm = values_of(t);
  CHECK(em_parameter_get(g[0], rv, em_cpu(), &t));
  want_rv = values_of(t);
  assert_true(want_rm[0] != 0); /* it did update */
  /* Read on the device (device to device) and on the host. */
  CHECK(em_parameter_get(g[1], rm, em_cuda(0), &t));
  assert_int_equal(em_tensor_device(t).kind, EM_DEVICE_CUDA);
  got = values_of(t);
  ot_expect_close(got, want_rm, 2, 1e-12, 1e-12, "running mean read on the device");
  free(got);
  CHECK(em_parameter_get(g[1], rv, em_cpu(), &t));
  got = values_of(t);
  ot_expect_close(got, want_rv, 2, 1e-12, 1e-12, "running variance read on the host");
  free(got);
  /* Saved: the newest values. */
  char path[512];
  ot_tmp_path(path, sizeof path, "exec_device_states.ember");
  CHECK(em_graph_save(g[1], path));
  em_graph *loaded;
  CHECK(em_graph_load(path, &loaded));
  unlink(path);
  CHECK(em_parameter_get(loaded, rm, em_cpu(), &t));
  got = values_of(t);
  ot_expect_close(got, want_rm, 2, 1e-12, 1e-12, "running mean saved after device runs");
  free(got);
  em_graph_free(loaded);
  /* One more device run, then the executor goes: the host storage held all
   * along catches up without anyone asking. */
  CHECK(em_exec_run(e[1], &f, 1, &r));
  em_tensor_release(r);
  CHECK(em_exec_run(e[0], &f, 1, &r));
  em_tensor_release(r);
  em_exec_free(e[1]);
  CHECK(em_parameter_get(g[0], rm, em_cpu(), &t));
  free(want_rm);
  want_rm = values_of(t);
  ot_expect_close(em_tensor_data(host_rm), want_rm, 2, 1e-12, 1e-12, "the host storage after em_exec_free");
  em_tensor_release(host_rm);
  /* A CPU executor on the graph the device updated starts from its values. */
  CHECK(em_exec_create(g[1], &y, 1, em_cpu(), &e[1]));
  CHECK(em_exec_set_training(e[1], 1));
  CHECK(em_exec_run(e[1], &f, 1, &r));
  em_tensor_release(r);
  CHECK(em_exec_run(e[0], &f, 1, &r));
  em_tensor_release(r);
  CHECK(em_parameter_get(g[0], rm, em_cpu(), &t));
  free(want_rm);
  want_rm = values_of(t);
  CHECK(em_parameter_get(g[1], rm, em_cpu(), &t));
  got = values_of(t);
  ot_expect_close(got, want_rm, 2, 1e-12, 1e-12, "a CPU run after the device runs");
  free(got);
  free(want_rm);
  free(want_rv);
  em_tensor_release(xt);
  for (int k = 0; k < 2; k++) {
    em_exec_free(e[k]);
    em_graph_free(g[k]);
  }
  (void)force;
}

static void test_states_on_device(void **state) {
  (void)state;
  NEED_ONE_GPU(NULL);
  states_on_device(NULL);
  leave_double();
}

static void test_states_on_host_copies(void **state) {
  (void)state;
  NEED_ONE_GPU("cpu");
  states_on_device("cpu");
  leave_double();
}

/* ------------------------------------------------------ out of memory --- */

/* A 1 MiB device. y = x + x over 100k floats needs two blocks of 458752
 * bytes (the allocator's class for 400000): they fit only once the cache
 * of an earlier run (two blocks of 262144) is returned to the driver, which
 * the allocator does by itself. z = y + x needs a third: the run fails naming
 * the node, op, shape and bytes, and the executor still runs smaller batches. */
static void test_out_of_memory(void **state) {
  (void)state;
  NEED_DOUBLE("9.0=Fake H100", 1, NULL);
  em_graph *g = new_graph();
  em_var x = input(g, "x", EM_F32, -1);
  em_var y = apply(g, "add_n", (em_var[]){x, x}, 2);
  em_var z = apply(g, "add_n", (em_var[]){y, x}, 2);
  em_exec *ey, *ez;
  CHECK(em_exec_create(g, &y, 1, em_cuda(0), &ey));
  CHECK(em_exec_create(g, &z, 1, em_cuda(0), &ez));
  float *xv = malloc(100000 * sizeof *xv);
  assert_non_null(xv);
  for (int i = 0; i < 100000; i++) xv[i] = (float)(i % 7);
  em_tensor *x60, *x100, *x10, *r;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){60000}, xv, 60000 * sizeof *xv, &x60));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){100000}, xv, 100000 * sizeof *xv, &x100));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){10}, xv, 10 * sizeof *xv, &x10));
  em_feed f = {x, x60};
  CHECK(em_exec_run(ey, &f, 1, &r));
  em_tensor_release(r);
  em_alloc_stats a;
  CHECK(em_alloc_stats_get(em_cuda(0), &a));
  assert_true(a.bytes_cached >= 2 * 262144ull);
  f.value = x100;
  CHECK(em_exec_run(ey, &f, 1, &r)); /* fits after the cache went back */
  float got[3];
  em_tensor *part;
  CHECK(em_tensor_slice(r, 0, 99997, 100000, 1, &part));
  CHECK(em_tensor_to_host(part, got, sizeof got));
  assert_true(got[0] == 2 * (float)(99997 % 7) && got[2] == 2 * (float)(99999 % 7));
  em_tensor_release(part);
  em_tensor_release(r);
  em_exec_stats st = stats(ey);
  assert_true(st.device_peak_bytes >= 2 * 458752ull);

  expect_error(em_exec_run(ez, &f, 1, &r), EM_ERR_OUT_OF_MEMORY, "op 'add_n'", "f32[100000]");
  const char *msg = em_last_error();
  char node[32];
  snprintf(node, sizeof node, "node %d", (int)z); /* each op node here has one value */
  (void)node;
  if (!strstr(msg, "400000 bytes") || !strstr(msg, "in use") || !strstr(msg, "cached") || !strstr(msg, "running node"))
    fail_msg("the out-of-memory error does not name the node, the bytes asked for, in use and cached: %s", msg);
  /* Still usable. */
  f.value = x10;
  CHECK(em_exec_run(ez, &f, 1, &r));
  float small[10];
  CHECK(em_tensor_to_host(r, small, sizeof small));
  assert_true(small[0] == 0 && small[1] == 3 && small[9] == 3 * (float)(9 % 7));
  em_tensor_release(r);
  f.value = x100;
  CHECK(em_exec_run(ey, &f, 1, &r));
  em_tensor_release(r);
  em_tensor_release(x10);
  em_tensor_release(x60);
  em_tensor_release(x100);
  free(xv);
  em_exec_free(ey);
  em_exec_free(ez);
  em_graph_free(g);
  leave_double();
}

/* ------------------------------------------------- several executors --- */

/* Batch normalization trained by executors on two GPUs and by a CPU
 * executor, turn by turn on one graph: each run starts from the newest
 * running statistics wherever the last run left them (another GPU's copy is
 * brought over through the host), so after every turn the statistics equal
 * a CPU executor's after as many runs on a twin graph, bit for bit (portable
 * mode). Freeing the executors in either order loses nothing. */
static void test_executors_take_turns(void **state) {
  (void)state;
  NEED_DOUBLE("9.0=Fake H100,8.0=Fake A100", 0, NULL);
  int64_t s42[2] = {4, 2};
  double xv[8] = {1, 10, 2, 20, 3, 30, 6, 40}, ones[2] = {1, 1}, zeros[2] = {0, 0};
  em_graph *g[2];
  em_var x, rm, rv, y;
  for (int k = 0; k < 2; k++) {
    g[k] = new_graph();
    CHECK(em_input(g[k], "x", EM_F64, 2, s42, &x));
    em_var sc = leaf(g[k], 0, "scale", 2, ones), bi = leaf(g[k], 0, "bias", 2, zeros);
    rm = leaf(g[k], 1, "rm", 2, zeros), rv = leaf(g[k], 1, "rv", 2, ones);
    y = apply(g[k], "batch_normalization", (em_var[]){x, sc, bi, rm, rv}, 5);
  }
  em_exec *twin, *e[3];
  CHECK(em_exec_create(g[0], &y, 1, em_cpu(), &twin));
  CHECK(em_exec_create(g[1], &y, 1, em_cuda(0), &e[0]));
  CHECK(em_exec_create(g[1], &y, 1, em_cuda(1), &e[1]));
  CHECK(em_exec_create(g[1], &y, 1, em_cpu(), &e[2]));
  em_exec *all[4] = {twin, e[0], e[1], e[2]};
  for (int k = 0; k < 4; k++) {
    CHECK(em_exec_set_training(all[k], 1));
    CHECK(em_exec_set_mode(all[k], EM_MODE_PORTABLE));
  }
  em_tensor *xt = ot_tensor(EM_F64, 2, s42, xv), *r, *t;
  em_feed f = {x, xt};
  static const int order[] = {0, 0, 1, 0, 2, 1, 1, 2, 0};
  for (size_t k = 0; k < sizeof order / sizeof *order; k++) {
    CHECK(em_exec_run(e[order[k]], &f, 1, &r));
    em_tensor_release(r);
    CHECK(em_exec_run(twin, &f, 1, &r));
    em_tensor_release(r);
    for (int sv = 0; sv < 2; sv++) {
      em_var v = sv ? rv : rm;
      CHECK(em_parameter_get(g[0], v, em_cpu(), &t));
      double *want = values_of(t);
      /* Read where the last run was, and on the host. */
      em_device where = order[k] == 2 ? em_cpu() : em_cuda(order[k]);
      CHECK(em_parameter_get(g[1], v, where, &t));
      double *got = values_of(t);
      char what[96];
      snprintf(what, sizeof what, "%s after turn %zu (executor %d)", sv ? "rv" : "rm", k, order[k]);
      ot_expect_close(got, want, 2, 0, 0, what);
      free(got);
      CHECK(em_parameter_get(g[1], v, em_cpu(), &t));
      got = values_of(t);
      ot_expect_close(got, want, 2, 0, 0, what);
      free(got);
      free(want);
    }
  }
  /* cuda:0 ran last: freeing cuda:1's executor first, then cuda:0's, brings
   * the host the newest value. */
  em_exec_free(e[1]);
  em_exec_free(e[0]);
  em_tensor *host;
  CHECK(em_parameter_get(g[0], rm, em_cpu(), &t));
  double *want = values_of(t);
  CHECK(em_parameter_value(g[1], rm, &host));
  ot_expect_close(em_tensor_data(host), want, 2, 0, 0, "the host after both executors went");
  em_tensor_release(host);
  free(want);
  em_exec_free(e[2]);
  em_exec_free(twin);
  em_tensor_release(xt);
  em_graph_free(g[0]);
  em_graph_free(g[1]);
  leave_double();
}

/* A run that fails (out of memory at its second step) frees every
 * intermediate it made: the device holds afterwards what it held before. */
static void test_failed_run_frees_its_memory(void **state) {
  (void)state;
  NEED_DOUBLE("9.0=Fake H100", 1, NULL);
  em_graph *g = new_graph();
  em_var x = input(g, "x", EM_F32, -1);
  em_var y = apply(g, "add_n", (em_var[]){x, x}, 2);
  em_var z = apply(g, "add_n", (em_var[]){y, x}, 2);
  em_var w = apply(g, "add_n", (em_var[]){z, y}, 2);
  em_exec *e;
  CHECK(em_exec_create(g, &w, 1, em_cuda(0), &e));
  float *xv = calloc(100000, sizeof *xv);
  assert_non_null(xv);
  em_tensor *x100, *xd, *r;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, (int64_t[]){100000}, xv, 100000 * sizeof *xv, &x100));
  CHECK(em_tensor_to_device(x100, em_cuda(0), &xd));
  CHECK(em_alloc_trim(em_cuda(0)));
  em_alloc_stats before, after;
  CHECK(em_alloc_stats_get(em_cuda(0), &before));
  em_feed f = {x, xd};
  expect_error(em_exec_run(e, &f, 1, &r), EM_ERR_OUT_OF_MEMORY, "f32[100000]", NULL);
  assert_null(r);
  CHECK(em_alloc_stats_get(em_cuda(0), &after));
  if (after.bytes_in_use != before.bytes_in_use)
    fail_msg("a failed run left %lld bytes in use on the device", (long long)(after.bytes_in_use - before.bytes_in_use));
  em_tensor_release(xd);
  em_tensor_release(x100);
  free(xv);
  em_exec_free(e);
  em_graph_free(g);
  leave_double();
}

int main(void) {
  /* The copy counts here are the eager run's: a CUDA graph's replay also
   * copies each fetch out of the graph's buffer and each feed given on the
   * device into it (test_exec_graphs covers those runs). */
  setenv("EMBER_CUDA_GRAPHS", "0", 1);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_devices_checked_where_they_enter),
    cmocka_unit_test(test_no_usable_driver),
    cmocka_unit_test(test_copies_counted_with_host_fallback),
    cmocka_unit_test(test_device_ops_copy_only_feeds),
    cmocka_unit_test(test_kernels_resolved_once),
    cmocka_unit_test(test_run_into_device_outputs),
    cmocka_unit_test(test_states_on_device),
    cmocka_unit_test(test_states_on_host_copies),
    cmocka_unit_test(test_out_of_memory),
    cmocka_unit_test(test_executors_take_turns),
    cmocka_unit_test(test_failed_run_frees_its_memory),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
