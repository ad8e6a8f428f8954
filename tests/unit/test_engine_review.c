/* Review tests for the engine core (graph, autodiff, executor, editing,
 * save/load): tests written to break it. Expected values are derived by hand
 * in each test (or by a plain loop over doubles in the test itself).
 *
 * Tests marked "FIXED:" at their top exposed a defect found in review (the
 * comment says where and why); they stay as regression tests.
 * Calls that might crash (NULL arguments) run in a forked child, so a crash
 * is reported as a failure instead of killing the whole run. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "op_testkit.h"

/* ------------------------------------------------------------- helpers --- */

static em_graph *new_graph(void) {
  em_graph *g = NULL;
  if (em_graph_create(&g)) fail_msg("em_graph_create: %s", em_last_error());
  return g;
}

static em_var input(em_graph *g, const char *name, int ndim, const int64_t *shape) {
  em_var v;
  if (em_input(g, name, EM_F64, ndim, shape, &v)) fail_msg("em_input: %s", em_last_error());
  return v;
}

static em_var apply_a(em_graph *g, const char *op, const em_var *in, int n, const em_attr *at, int n_at) {
  em_var y;
  if (em_apply(g, op, in, n, at, n_at, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}

static em_var apply(em_graph *g, const char *op, const em_var *in, int n) { return apply_a(g, op, in, n, NULL, 0); }

static em_var apply2(em_graph *g, const char *op, em_var a, em_var b) {
  em_var in[2] = {a, b};
  return apply(g, op, in, 2);
}

static em_var constant(em_graph *g, int ndim, const int64_t *shape, const double *v) {
  em_tensor *t = ot_tensor(EM_F64, ndim, shape, v);
  em_var c;
  if (em_constant(g, t, &c)) fail_msg("em_constant: %s", em_last_error());
  em_tensor_release(t);
  return c;
}

static em_var param_data(em_graph *g, const char *name, int ndim, const int64_t *shape, const double *v) {
  em_tensor *t = ot_tensor(EM_F64, ndim, shape, v);
  em_var p;
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
  if (em_parameter(g, name, EM_F64, ndim, shape, &init, &p)) fail_msg("em_parameter: %s", em_last_error());
  em_tensor_release(t);
  return p;
}

static em_var state_data(em_graph *g, const char *name, int ndim, const int64_t *shape, const double *v) {
  em_tensor *t = ot_tensor(EM_F64, ndim, shape, v);
  em_var p;
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
  if (em_state(g, name, EM_F64, ndim, shape, &init, &p)) fail_msg("em_state: %s", em_last_error());
  em_tensor_release(t);
  return p;
}

static em_var scalar_const(em_graph *g, double v) { return constant(g, 0, NULL, &v); }

/* sum of all elements of x as a scalar, through core ops only (sum_to to a
 * 0-d value; its backward, broadcast_like, is differentiable again). */
static em_var sum_all(em_graph *g, em_var x) { return apply2(g, "sum_to", x, scalar_const(g, 0)); }

static void expect_error(em_status s, em_status want, const char *needle) {
  if (s != want) fail_msg("expected %s, got %s (%s)", em_status_name(want), em_status_name(s), em_last_error());
  if (needle && !strstr(em_last_error(), needle)) fail_msg("message lacks \"%s\": %s", needle, em_last_error());
}

/* Runs outputs with feeds; returns the doubles of every output. */
static void run_feeds(em_graph *g, const em_var *outs, int n, const em_feed *feeds, int n_feeds, double **values) {
  em_exec *e;
  if (em_exec_create(g, outs, n, em_cpu(), &e)) fail_msg("em_exec_create: %s", em_last_error());
  em_tensor *res[16];
  if (em_exec_run(e, feeds, n_feeds, res)) fail_msg("em_exec_run: %s", em_last_error());
  for (int k = 0; k < n; k++) {
    values[k] = ot_values(res[k], NULL);
    em_tensor_release(res[k]);
  }
  em_exec_free(e);
}

static void run1(em_graph *g, const em_var *outs, int n, em_var fed, em_tensor *value, double **values) {
  em_feed f = {fed, value};
  run_feeds(g, outs, n, &f, value ? 1 : 0, values);
}

static void free_all(double **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
}

static void expect_var_shape(const em_graph *g, em_var v, int ndim, const int64_t *dims, const char *what) {
  em_dtype dt;
  int nd;
  int64_t d[EM_MAX_DIMS];
  if (em_var_info(g, v, &dt, &nd, d)) fail_msg("%s: em_var_info: %s", what, em_last_error());
  int ok = nd == ndim;
  for (int i = 0; ok && i < nd; i++) ok = d[i] == dims[i];
  if (!ok) {
    char b[160];
    size_t len = (size_t)snprintf(b, sizeof b, "[");
    for (int i = 0; i < nd; i++) len += (size_t)snprintf(b + len, sizeof b - len, "%s%lld", i ? "," : "", (long long)d[i]);
    snprintf(b + len, sizeof b - len, "]");
    fail_msg("%s: value %d has shape %s (rank %d), expected rank %d starting %lld", what, (int)v, b, nd, ndim,
             ndim ? (long long)dims[0] : 0LL);
  }
}

static uint64_t cpu_bytes_in_use(void) {
  em_alloc_stats st;
  if (em_alloc_stats_get(em_cpu(), &st)) fail_msg("em_alloc_stats_get: %s", em_last_error());
  return st.bytes_in_use;
}

/* ---------------------------------------------------------- autodiff --- */

/* x [2,5] feeds top_k (both outputs used: values weighted, indices cast to
 * f64 and weighted) and also a direct term. L = sum(w1*vals) +
 * sum(w2*x) + sum(w3*cast(idx)). dL/dx = w2 + w1 scattered to the top-2
 * positions; the index path carries no gradient. */
static void test_grad_top_k_both_outputs_and_fanout(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s25[2] = {2, 5}, s22[2] = {2, 2};
  double xv[10] = {0.3, 2.5, -1.0, 4.0, 1.5, /* row 1 */ -2.0, -0.5, 3.0, 0.25, 1.0};
  double w1v[4] = {10, 20, 30, 40}, w2v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, w3v[4] = {100, 200, 300, 400};
  em_var x = input(g, "x", 2, s25);
  em_attr k = (em_attr){.name = "k", .type = EM_ATTR_INT, .i = 2};
  em_var tk[2];
  assert_int_equal(em_apply(g, "top_k", &x, 1, &k, 1, tk, 2), EM_OK);
  em_attr to = (em_attr){.name = "to", .type = EM_ATTR_INT, .i = EM_F64};
  em_var idxf = apply_a(g, "cast", &tk[1], 1, &to, 1);
  em_var t1 = apply2(g, "_weighted_sum", tk[0], constant(g, 2, s22, w1v));
  em_var t2 = apply2(g, "_weighted_sum", x, constant(g, 2, s25, w2v));
  em_var t3 = apply2(g, "_weighted_sum", idxf, constant(g, 2, s22, w3v));
  em_var terms[3] = {t1, t2, t3};
  em_var loss = apply(g, "add_n", terms, 3);
  em_var grad;
  assert_int_equal(em_gradients(g, loss, &x, 1, &grad), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 2, s25, xv);
  em_var outs[4] = {loss, grad, tk[0], tk[1]};
  double *o[4];
  run1(g, outs, 4, x, xt, o);
  /* Top-2 per row: row 0: 4.0 (at 3), 2.5 (at 1); row 1: 3.0 (at 2), 1.0 (at 4). */
  double want_vals[4] = {4.0, 2.5, 3.0, 1.0}, want_idx[4] = {3, 1, 2, 4};
  ot_expect_close(o[2], want_vals, 4, 0, 0, "top_k values");
  ot_expect_close(o[3], want_idx, 4, 0, 0, "top_k indices");
  double want_grad[10];
  for (int i = 0; i < 10; i++) want_grad[i] = w2v[i];
  want_grad[3] += 10, want_grad[1] += 20, want_grad[5 + 2] += 30, want_grad[5 + 4] += 40;
  ot_expect_close(o[1], want_grad, 10, 0, 0, "dL/dx through both top_k outputs and the direct use");
  double want_loss = 0;
  for (int i = 0; i < 4; i++) want_loss += w1v[i] * want_vals[i] + w3v[i] * want_idx[i];
  for (int i = 0; i < 10; i++) want_loss += w2v[i] * xv[i];
  ot_expect_close(o[0], &want_loss, 1, 1e-9, 0, "loss");
  free_all(o, 4);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* h = x*x, y = sum(w*h). Gradients w.r.t. the intermediate h (= w), x
 * (= 2xw, total derivative through h) and y itself (= 1), in one call. */
static void test_grad_wrt_intermediate_and_y(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s3[1] = {3};
  double xv[3] = {1.5, -2, 0.5}, wv[3] = {3, 5, -7};
  em_var x = input(g, "x", 1, s3);
  em_var h = apply2(g, "mul", x, x);
  em_var y = apply2(g, "_weighted_sum", h, constant(g, 1, s3, wv));
  em_var xs[3] = {h, x, y}, grads[3];
  assert_int_equal(em_gradients(g, y, xs, 3, grads), EM_OK);
  expect_var_shape(g, grads[2], 0, NULL, "dy/dy is a scalar");
  em_tensor *xt = ot_tensor(EM_F64, 1, s3, xv);
  double *o[3];
  run1(g, grads, 3, x, xt, o);
  double dx[3], one = 1;
  for (int i = 0; i < 3; i++) dx[i] = 2 * xv[i] * wv[i];
  ot_expect_close(o[0], wv, 3, 0, 0, "dy/dh");
  ot_expect_close(o[1], dx, 3, 1e-15, 0, "dy/dx");
  ot_expect_close(o[2], &one, 1, 0, 0, "dy/dy");
  free_all(o, 3);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* x used by 20 identities: 20 contributions are summed in chunks of 16. */
static void test_grad_more_than_16_contributions(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double wv[2] = {0.5, -3}, xv[2] = {1, 2};
  em_var x = input(g, "x", 1, s2), ids[20];
  for (int i = 0; i < 20; i++) ids[i] = apply(g, "identity", &x, 1);
  em_var s1 = apply(g, "add_n", ids, 16);
  em_var rest[5] = {s1, ids[16], ids[17], ids[18], ids[19]};
  em_var s = apply(g, "add_n", rest, 5);
  em_var loss = apply2(g, "_weighted_sum", s, constant(g, 1, s2, wv)), grad;
  assert_int_equal(em_gradients(g, loss, &x, 1, &grad), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 1, s2, xv);
  double *o[1], want[2] = {20 * 0.5, 20 * -3.0};
  run1(g, &grad, 1, x, xt, o);
  ot_expect_close(o[0], want, 2, 0, 0, "20 contributions");
  free_all(o, 1);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* Second order through ops that all have backwards (mul, add_n, sum_to,
 * broadcast_like): L = sum(x^3), g1 = 3x^2, L2 = sum(w*g1), g2 = 6wx. */
static void test_second_order_mul_add(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s3[1] = {3};
  double xv[3] = {1.5, -2, 0.25}, wv[3] = {2, -1, 4};
  em_var x = input(g, "x", 1, s3);
  em_var cube = apply2(g, "mul", apply2(g, "mul", x, x), x);
  em_var loss = sum_all(g, cube), g1, g2;
  assert_int_equal(em_gradients(g, loss, &x, 1, &g1), EM_OK);
  em_var loss2 = sum_all(g, apply2(g, "mul", g1, constant(g, 1, s3, wv)));
  if (em_gradients(g, loss2, &x, 1, &g2)) fail_msg("second order: %s", em_last_error());
  em_tensor *xt = ot_tensor(EM_F64, 1, s3, xv);
  em_var outs[2] = {g1, g2};
  double *o[2], w1[3], w2[3];
  run1(g, outs, 2, x, xt, o);
  for (int i = 0; i < 3; i++) w1[i] = 3 * xv[i] * xv[i], w2[i] = 6 * wv[i] * xv[i];
  ot_expect_close(o[0], w1, 3, 1e-14, 1e-14, "first order");
  ot_expect_close(o[1], w2, 3, 1e-14, 1e-14, "second order");
  free_all(o, 2);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* FIXED: autodiff.c mark_dependents (line 113) propagates "depends on
 * x" through inputs an op declares no_grad. The seed ones_like(y) (no_grad)
 * is therefore marked as depending on x, and in the second em_gradients the
 * first gradient's _scale_by(w, seed) (no backward) is treated as lying on
 * the path from x, so d/dx fails with "op '_scale_by' has no gradient" even
 * though no gradient can flow through it (the seed is a constant function of
 * x). Fix: in mark_dependents, only propagate through inputs whose no_grad
 * bit is clear (d |= dep[in_i] && !(op->no_grad & 1u << i)).
 * L = sum(w*x*x): g1 = 2wx; L2 = sum(v*g1): g2 = 2wv. */
static void test_second_order_through_weighted_sum_seed(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s3[1] = {3};
  double xv[3] = {1, 2, 3}, wv[3] = {0.5, -1, 2}, vv[3] = {3, 4, -5};
  em_var x = input(g, "x", 1, s3);
  em_var loss = apply2(g, "_weighted_sum", apply2(g, "mul", x, x), constant(g, 1, s3, wv)), g1, g2;
  assert_int_equal(em_gradients(g, loss, &x, 1, &g1), EM_OK);
  em_var loss2 = apply2(g, "_weighted_sum", g1, constant(g, 1, s3, vv));
  em_status s = em_gradients(g, loss2, &x, 1, &g2);
  if (s) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", em_last_error());
    em_graph_free(g);
    fail_msg("second order through a seed-only op without backward refused: %s", msg);
  }
  em_tensor *xt = ot_tensor(EM_F64, 1, s3, xv);
  double *o[1], want[3];
  run1(g, &g2, 1, x, xt, o);
  for (int i = 0; i < 3; i++) want[i] = 2 * wv[i] * vv[i];
  ot_expect_close(o[0], want, 3, 1e-14, 0, "second order");
  free_all(o, 1);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* em_gradients twice on one graph: new nodes, the same values; an executor
 * planned before the second call still runs. */
static void test_gradients_called_twice(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s3[1] = {3};
  double xv[3] = {1, -2, 3}, wv[3] = {4, 5, 6};
  em_var x = input(g, "x", 1, s3);
  em_var loss = apply2(g, "_weighted_sum", apply2(g, "mul", x, x), constant(g, 1, s3, wv)), ga, gb;
  assert_int_equal(em_gradients(g, loss, &x, 1, &ga), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &ga, 1, em_cpu(), &e), EM_OK);
  size_t before = em_graph_value_count(g);
  assert_int_equal(em_gradients(g, loss, &x, 1, &gb), EM_OK);
  assert_true(em_graph_value_count(g) > before);
  assert_true(gb != ga);
  em_tensor *xt = ot_tensor(EM_F64, 1, s3, xv), *r;
  em_feed f = {x, xt};
  assert_int_equal(em_exec_run(e, &f, 1, &r), EM_OK); /* planned before the second call */
  double *a = ot_values(r, NULL), *o[2], want[3];
  em_tensor_release(r);
  em_var both[2] = {ga, gb};
  run1(g, both, 2, x, xt, o);
  for (int i = 0; i < 3; i++) want[i] = 2 * xv[i] * wv[i];
  ot_expect_close(a, want, 3, 0, 0, "first call, old executor");
  ot_expect_close(o[0], want, 3, 0, 0, "first call");
  ot_expect_close(o[1], want, 3, 0, 0, "second call");
  free(a);
  free_all(o, 2);
  em_exec_free(e);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* L = mean(x @ W + b) with x [-1,3]: one executor, batches 3 and 5.
 * dL/dz = 1/(2N); dW[i][j] = sum_n x[n][i] / (2N); db = 1/2;
 * dx[n][i] = sum_j W[i][j] / (2N). */
static void test_grad_dynamic_batch_matmul_bias_mean(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t dyn[2] = {-1, 3}, s32[2] = {3, 2}, s2[1] = {2};
  double wv[6] = {1, -2, 0.5, 3, -1, 4}, bv[2] = {0.25, -0.75};
  em_var x = input(g, "x", 2, dyn), W = param_data(g, "W", 2, s32, wv), b = param_data(g, "b", 1, s2, bv);
  em_var z = apply2(g, "add", apply2(g, "matmul", x, W), b);
  em_var loss = apply(g, "reduce_mean", &z, 1);
  em_var xs[3] = {W, b, x}, grads[3];
  assert_int_equal(em_gradients(g, loss, xs, 3, grads), EM_OK);
  em_var outs[4] = {loss, grads[0], grads[1], grads[2]};
  em_exec *e;
  assert_int_equal(em_exec_create(g, outs, 4, em_cpu(), &e), EM_OK);
  for (int N = 3; N <= 5; N += 2) {
    int64_t shape[2] = {N, 3};
    em_tensor *xt = ot_rand(EM_F64, 2, shape, (uint64_t)N, -1, 1), *res[4];
    double *xv = ot_values(xt, NULL);
    em_feed f = {x, xt};
    if (em_exec_run(e, &f, 1, res)) fail_msg("batch %d: %s", N, em_last_error());
    double want_loss = 0, dW[6] = {0}, db[2] = {0.5, 0.5}, dx[15];
    for (int n = 0; n < N; n++)
      for (int j = 0; j < 2; j++) {
        double zz = bv[j];
        for (int i = 0; i < 3; i++) zz += xv[n * 3 + i] * wv[i * 2 + j];
        want_loss += zz / (2.0 * N);
      }
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 2; j++)
        for (int n = 0; n < N; n++) dW[i * 2 + j] += xv[n * 3 + i] / (2.0 * N);
    for (int n = 0; n < N; n++)
      for (int i = 0; i < 3; i++) dx[n * 3 + i] = (wv[i * 2] + wv[i * 2 + 1]) / (2.0 * N);
    int64_t want_x_shape[2] = {N, 3};
    ot_expect_shape(res[3], EM_F64, 2, want_x_shape, "dL/dx has the batch's shape");
    double *o[4];
    for (int k = 0; k < 4; k++) o[k] = ot_values(res[k], NULL);
    ot_expect_close(o[0], &want_loss, 1, 1e-14, 1e-12, "loss");
    ot_expect_close(o[1], dW, 6, 1e-14, 1e-12, "dL/dW");
    ot_expect_close(o[2], db, 2, 1e-14, 1e-12, "dL/db");
    ot_expect_close(o[3], dx, (int64_t)N * 3, 1e-14, 1e-12, "dL/dx");
    free_all(o, 4);
    free(xv);
    for (int k = 0; k < 4; k++) em_tensor_release(res[k]);
    em_tensor_release(xt);
  }
  em_exec_free(e);
  em_graph_free(g);
}

/* ------------------------------------------------------------- executor --- */

/* Intermediates read twice by one op (x+x, x*x), a value that is an output
 * and read later, and chains of in-place candidates. */
static void test_exec_inplace_hazards(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s[1] = {257};
  em_var x = input(g, "x", 1, s);
  double cv[257], xv[257];
  for (int i = 0; i < 257; i++) cv[i] = 0.5 * i - 7, xv[i] = 0.01 * i - 1;
  em_var c = constant(g, 1, s, cv);
  em_var a = apply(g, "identity", &x, 1);          /* intermediate, also an output */
  em_var b = apply2(g, "add", a, c);                 /* reads the output a: must not overwrite it */
  em_var d = apply2(g, "mul", b, b);                 /* b read twice by one op, dies here */
  em_var e1 = apply(g, "identity", &d, 1);           /* in place of d */
  em_var f = apply2(g, "add", e1, e1);               /* read twice again */
  em_var h = apply2(g, "sub", f, apply(g, "identity", &f, 1)); /* f read by two ops: the later one may reuse */
  em_var outs[3] = {a, h, f};
  em_tensor *xt = ot_tensor(EM_F64, 1, s, xv), *res[3];
  double *o[3], wa[257], wh[257], wf[257];
  em_exec *ex;
  assert_int_equal(em_exec_create(g, outs, 3, em_cpu(), &ex), EM_OK);
  em_feed fd = {x, xt};
  assert_int_equal(em_exec_run(ex, &fd, 1, res), EM_OK);
  em_exec_stats st;
  assert_int_equal(em_exec_stats_get(ex, &st), EM_OK);
  assert_true(st.inplace_steps >= 1); /* e1 = identity(d) reuses d: the hazards are exercised */
  for (int k = 0; k < 3; k++) {
    o[k] = ot_values(res[k], NULL);
    em_tensor_release(res[k]);
  }
  em_exec_free(ex);
  for (int i = 0; i < 257; i++) {
    double bb = xv[i] + cv[i];
    wa[i] = xv[i];
    wf[i] = 2 * bb * bb;
    wh[i] = 0;
  }
  ot_expect_close(o[0], wa, 257, 0, 0, "a (an output read later)");
  ot_expect_close(o[2], wf, 257, 0, 0, "f = 2 (x+c)^2");
  ot_expect_close(o[1], wh, 257, 0, 0, "h = f - f");
  free_all(o, 3);
  /* The fed tensor itself is never written. */
  double *back = ot_values(xt, NULL);
  ot_expect_close(back, xv, 257, 0, 0, "fed tensor untouched");
  free(back);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* Subsets of outputs; outputs that are leaves (parameter, constant, fed
 * input); the same value twice among the outputs. */
static void test_exec_subsets_and_leaf_outputs(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double pv[2] = {3, 4}, cv[2] = {10, 20}, xv[2] = {-1, 0.5};
  em_var x = input(g, "x", 1, s2), unused = input(g, "unused", 1, s2);
  em_var p = param_data(g, "p", 1, s2, pv), c = constant(g, 1, s2, cv);
  em_var y = apply2(g, "add", x, p), z = apply2(g, "mul", y, c);
  (void)unused;
  em_tensor *xt = ot_tensor(EM_F64, 1, s2, xv);
  double *o[6];
  em_var outs[6] = {p, c, x, y, z, y};
  run1(g, outs, 6, x, xt, o);
  double wy[2] = {2, 4.5}, wz[2] = {20, 90};
  ot_expect_close(o[0], pv, 2, 0, 0, "parameter as output");
  ot_expect_close(o[1], cv, 2, 0, 0, "constant as output");
  ot_expect_close(o[2], xv, 2, 0, 0, "fed input as output");
  ot_expect_close(o[3], wy, 2, 0, 0, "y");
  ot_expect_close(o[4], wz, 2, 0, 0, "z");
  ot_expect_close(o[5], wy, 2, 0, 0, "y twice");
  free_all(o, 6);
  /* Only p and c: nothing needs to be fed. */
  em_var leaves[2] = {p, c};
  run_feeds(g, leaves, 2, NULL, 0, o);
  ot_expect_close(o[0], pv, 2, 0, 0, "p alone");
  ot_expect_close(o[1], cv, 2, 0, 0, "c alone");
  free_all(o, 2);
  /* Only y: `unused` is not needed. */
  run1(g, &y, 1, x, xt, o);
  ot_expect_close(o[0], wy, 2, 0, 0, "subset");
  free_all(o, 1);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* FIXED: exec.c bind_leaves (line 234) hands the parameter's own stored tensor
 * to the run, and em_exec_run (line 354) returns it as the output: on the CPU
 * the caller's "new reference" aliases the parameter, so a later
 * em_parameter_set (or a learner's in-place update) silently rewrites a
 * result the caller already holds, and writing into the result changes the
 * parameter. On a CUDA executor the same output is a copy: the semantics
 * differ by device. Fix: when an output value is a leaf (parameter, state,
 * constant; arguably also a fed input), return a copy
 * (em_tensor_to_device(t, e->dev, ...)) instead of the stored tensor. */
static void test_exec_parameter_output_is_not_aliased(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double pv[2] = {1, 2}, nv[2] = {7, 8};
  em_var p = param_data(g, "p", 1, s2, pv);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &p, 1, em_cpu(), &e), EM_OK);
  em_tensor *out, *nt = ot_tensor(EM_F64, 1, s2, nv);
  assert_int_equal(em_exec_run(e, NULL, 0, &out), EM_OK);
  assert_int_equal(em_parameter_set(g, p, nt), EM_OK);
  double *got = ot_values(out, NULL);
  int aliased = got[0] != pv[0] || got[1] != pv[1];
  free(got);
  em_tensor_release(out);
  em_tensor_release(nt);
  em_exec_free(e);
  em_graph_free(g);
  if (aliased) fail_msg("an output returned by em_exec_run changed when the parameter was set afterwards (aliasing)");
}

static void test_exec_sees_parameter_set(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double pv[2] = {1, 2}, nv[2] = {-5, 0.5}, xv[2] = {10, 20};
  em_var x = input(g, "x", 1, s2), p = param_data(g, "p", 1, s2, pv);
  em_var y = apply2(g, "mul", x, p);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 1, s2, xv), *nt = ot_tensor(EM_F64, 1, s2, nv), *r;
  em_feed f = {x, xt};
  assert_int_equal(em_exec_run(e, &f, 1, &r), EM_OK);
  double *a = ot_values(r, NULL), w1[2] = {10, 40}, w2[2] = {-50, 10};
  em_tensor_release(r);
  ot_expect_close(a, w1, 2, 0, 0, "before");
  free(a);
  assert_int_equal(em_parameter_set(g, p, nt), EM_OK);
  assert_int_equal(em_exec_run(e, &f, 1, &r), EM_OK);
  a = ot_values(r, NULL);
  em_tensor_release(r);
  ot_expect_close(a, w2, 2, 0, 0, "after em_parameter_set");
  free(a);
  em_tensor_release(nt);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

/* Feeding one input twice: either refused (naming it) or the last value
 * wins; no reference may leak either way. */
static void test_exec_feed_same_input_twice(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double av[2] = {1, 2}, bv[2] = {30, 40};
  em_var x = input(g, "x", 1, s2), y = apply(g, "identity", &x, 1);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  uint64_t before = cpu_bytes_in_use();
  em_tensor *at = ot_tensor(EM_F64, 1, s2, av), *bt = ot_tensor(EM_F64, 1, s2, bv), *r = NULL;
  em_feed f[2] = {{x, at}, {x, bt}};
  em_status s = em_exec_run(e, f, 2, &r);
  if (s == EM_OK) {
    double *v = ot_values(r, NULL);
    ot_expect_close(v, bv, 2, 0, 0, "the last feed wins");
    free(v);
    em_tensor_release(r);
  } else {
    expect_error(s, EM_ERR_INVALID_ARGUMENT, "x");
  }
  em_tensor_release(at);
  em_tensor_release(bt);
  assert_int_equal(cpu_bytes_in_use(), before);
  em_exec_free(e);
  em_graph_free(g);
}

/* FIXED: exec.c bind_feed (lines 194, 215-216) checks the feed's handle
 * against the graph (em_graph_check_var: g->n_values) but indexes r->val,
 * which has only e->n_values entries (the count when the plan was made).
 * Feeding an input created after em_exec_create writes past the end of
 * r->val (heap overflow; valgrind: invalid write) and the retained tensor is
 * never released (run_free stops at e->n_values): a leaked reference. Fix:
 * in bind_feed refuse (or ignore) f->var >= e->n_values, before indexing. */
static void test_exec_feed_value_created_after_plan(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s1[1] = {1}, big[1] = {1 << 16};
  double one = 1;
  em_var x = input(g, "x", 1, s1), y = apply(g, "identity", &x, 1);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK); /* plans 2 values */
  em_var late = input(g, "late", 1, big);                          /* value 2 */
  uint64_t before = cpu_bytes_in_use();
  em_tensor *xt = ot_tensor(EM_F64, 1, s1, &one), *lt = ot_tensor(EM_F64, 1, big, NULL), *r = NULL;
  em_feed f[2] = {{x, xt}, {late, lt}};
  em_status s = em_exec_run(e, f, 2, &r);
  em_tensor_release(r);
  em_tensor_release(xt);
  em_tensor_release(lt);
  uint64_t after = cpu_bytes_in_use();
  em_exec_free(e);
  em_graph_free(g);
  if (s != EM_OK && s != EM_ERR_INVALID_ARGUMENT) fail_msg("unexpected status %s", em_status_name(s));
  if (after != before)
    fail_msg("feeding a value created after planning leaked %llu bytes (the fed tensor was stored past the run's "
             "value table)", (unsigned long long)(after - before));
}

/* Batch normalization in training mode through an executor updates its
 * em_state running statistics in place (momentum 0.9, unbiased variance);
 * inference mode uses them and leaves them alone. */
static void test_batch_norm_state_update_in_training(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s42[2] = {4, 2}, s2[1] = {2};
  double xv[8] = {1, 10, 2, 20, 3, 30, 6, 40}, ones[2] = {1, 1}, zeros[2] = {0, 0};
  em_var x = input(g, "x", 2, s42);
  em_var sc = param_data(g, "scale", 1, s2, ones), bi = param_data(g, "bias", 1, s2, zeros);
  em_var rm = state_data(g, "rm", 1, s2, zeros), rv = state_data(g, "rv", 1, s2, ones);
  em_var in[5] = {x, sc, bi, rm, rv};
  em_var y = apply(g, "batch_normalization", in, 5);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  assert_int_equal(em_exec_set_training(e, 1), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 2, s42, xv), *r;
  em_feed f = {x, xt};
  double mean[2] = {0, 0}, var_b[2] = {0, 0}, var_u[2];
  for (int n = 0; n < 4; n++)
    for (int c = 0; c < 2; c++) mean[c] += xv[n * 2 + c] / 4;
  for (int n = 0; n < 4; n++)
    for (int c = 0; c < 2; c++) var_b[c] += (xv[n * 2 + c] - mean[c]) * (xv[n * 2 + c] - mean[c]) / 4;
  for (int c = 0; c < 2; c++) var_u[c] = var_b[c] * 4 / 3;
  double want_rm[2], want_rv[2];
  for (int c = 0; c < 2; c++) want_rm[c] = 0.1 * mean[c], want_rv[c] = 0.9 + 0.1 * var_u[c];
  assert_int_equal(em_exec_run(e, &f, 1, &r), EM_OK);
  double *yv = ot_values(r, NULL), want_y[8];
  em_tensor_release(r);
  for (int n = 0; n < 4; n++)
    for (int c = 0; c < 2; c++) want_y[n * 2 + c] = (xv[n * 2 + c] - mean[c]) / sqrt(var_b[c] + 1e-5);
  ot_expect_close(yv, want_y, 8, 1e-12, 1e-12, "training output");
  free(yv);
  em_tensor *t;
  assert_int_equal(em_parameter_value(g, rm, &t), EM_OK);
  double *got = ot_values(t, NULL);
  em_tensor_release(t);
  ot_expect_close(got, want_rm, 2, 1e-12, 1e-12, "running mean after one training run");
  free(got);
  assert_int_equal(em_parameter_value(g, rv, &t), EM_OK);
  got = ot_values(t, NULL);
  em_tensor_release(t);
  ot_expect_close(got, want_rv, 2, 1e-12, 1e-12, "running var after one training run");
  free(got);
  /* A second run compounds: rm2 = 0.9 rm1 + 0.1 mean. */
  assert_int_equal(em_exec_run(e, &f, 1, &r), EM_OK);
  em_tensor_release(r);
  assert_int_equal(em_parameter_value(g, rm, &t), EM_OK);
  got = ot_values(t, NULL);
  em_tensor_release(t);
  double rm2[2] = {0.9 * want_rm[0] + 0.1 * mean[0], 0.9 * want_rm[1] + 0.1 * mean[1]};
  ot_expect_close(got, rm2, 2, 1e-12, 1e-12, "running mean after two runs");
  free(got);
  /* Inference: normalises with the running statistics; no update. */
  assert_int_equal(em_exec_set_training(e, 0), EM_OK);
  assert_int_equal(em_exec_run(e, &f, 1, &r), EM_OK);
  yv = ot_values(r, NULL);
  em_tensor_release(r);
  assert_int_equal(em_parameter_value(g, rm, &t), EM_OK);
  got = ot_values(t, NULL);
  em_tensor_release(t);
  ot_expect_close(got, rm2, 2, 1e-15, 1e-15, "no update in inference");
  double rv2[2];
  for (int c = 0; c < 2; c++) rv2[c] = 0.9 * want_rv[c] + 0.1 * var_u[c];
  for (int n = 0; n < 4; n++)
    for (int c = 0; c < 2; c++) want_y[n * 2 + c] = (xv[n * 2 + c] - rm2[c]) / sqrt(rv2[c] + 1e-5);
  ot_expect_close(yv, want_y, 8, 1e-12, 1e-12, "inference output");
  free(yv);
  free(got);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

/* FIXED: nothing checks that an op's state_inputs (batch norm's running
 * statistics) are em_state values. exec.c passes whatever tensor holds the
 * value, so a training run writes in place into a constant (which, per
 * em_constant, holds a reference to the CALLER's tensor) or into a fed input
 * (the caller's tensor, retained by bind_feed). Here the caller's tensor
 * behind a constant is silently rewritten. Fix: em_apply (graph.c) or
 * plan() (exec.c, ~line 98) should refuse a state input that is not an
 * EM_NODE_STATE (or an op output), naming the op and the input. */
static void test_batch_norm_running_stats_must_be_states(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s42[2] = {4, 2}, s2[1] = {2};
  double xv[8] = {1, 10, 2, 20, 3, 30, 6, 40}, ones[2] = {1, 1}, zeros[2] = {0, 0};
  em_var x = input(g, "x", 2, s42);
  em_tensor *mine = ot_tensor(EM_F64, 1, s2, zeros);
  em_var rm;
  assert_int_equal(em_constant(g, mine, &rm), EM_OK);
  em_var in[5] = {x, constant(g, 1, s2, ones), constant(g, 1, s2, zeros), rm, constant(g, 1, s2, ones)};
  em_var y;
  em_status s = em_apply(g, "batch_normalization", in, 5, NULL, 0, &y, 1);
  int refused = s != EM_OK;
  em_exec *e = NULL;
  if (!refused) refused = em_exec_create(g, &y, 1, em_cpu(), &e) != EM_OK;
  em_tensor *xt = ot_tensor(EM_F64, 2, s42, xv), *r = NULL;
  if (!refused) {
    em_feed f = {x, xt};
    em_exec_set_training(e, 1);
    refused = em_exec_run(e, &f, 1, &r) != EM_OK;
  }
  em_tensor_release(r);
  em_exec_free(e);
  double *after = ot_values(mine, NULL);
  int changed = after[0] != 0 || after[1] != 0;
  free(after);
  em_tensor_release(mine);
  em_tensor_release(xt);
  em_graph_free(g);
  if (!refused && changed) fail_msg("a training run wrote batch statistics into the caller's constant tensor");
}

/* Dropout: within one run the forward and the backward use the same mask;
 * masks change from run to run; two fresh executors give the same sequence;
 * results do not depend on the thread count; inference is the identity. */
static void test_dropout_mask_consistency_and_determinism(void **state) {
  (void)state;
  enum { N = 4000 };
  em_graph *g = new_graph();
  int64_t s[1] = {N};
  static double xv[N], wv[N];
  for (int i = 0; i < N; i++) xv[i] = 1 + 0.001 * i, wv[i] = 2 - 0.0003 * i;
  em_var x = input(g, "x", 1, s);
  em_var xi = apply(g, "identity", &x, 1); /* an intermediate: dropout may run in place */
  em_attr ratio = (em_attr){.name = "ratio", .type = EM_ATTR_FLOAT, .f = 0.3};
  em_var y = apply_a(g, "dropout", &xi, 1, &ratio, 1);
  em_var loss = apply2(g, "_weighted_sum", y, constant(g, 1, s, wv)), grad;
  assert_int_equal(em_gradients(g, loss, &x, 1, &grad), EM_OK);
  em_var outs[2] = {y, grad};
  em_tensor *xt = ot_tensor(EM_F64, 1, s, xv);
  em_feed f = {x, xt};
  double *seq[2][2][2]; /* [executor][run][output] */
  for (int ex = 0; ex < 2; ex++) {
    em_exec *e;
    assert_int_equal(em_exec_create(g, outs, 2, em_cpu(), &e), EM_OK);
    assert_int_equal(em_exec_set_training(e, 1), EM_OK);
    em_set_num_threads(ex == 0 ? 1 : 7);
    for (int run = 0; run < 2; run++) {
      em_tensor *res[2];
      assert_int_equal(em_exec_run(e, &f, 1, res), EM_OK);
      for (int k = 0; k < 2; k++) {
        seq[ex][run][k] = ot_values(res[k], NULL);
        em_tensor_release(res[k]);
      }
    }
    em_exec_free(e);
  }
  em_set_num_threads(0);
  for (int run = 0; run < 2; run++) {
    const double *yv = seq[0][run][0], *gv = seq[0][run][1];
    int kept = 0;
    for (int i = 0; i < N; i++) {
      if (yv[i] == 0) {
        if (gv[i] != 0) fail_msg("run %d, element %d dropped forward but gradient %g", run, i, gv[i]);
      } else {
        kept++;
        if (fabs(yv[i] - xv[i] / 0.7) > 1e-12) fail_msg("run %d, element %d: y %g, want %g", run, i, yv[i], xv[i] / 0.7);
        if (fabs(gv[i] - wv[i] / 0.7) > 1e-12) fail_msg("run %d, element %d kept but gradient %g", run, i, gv[i]);
      }
    }
    if (fabs(kept / (double)N - 0.7) > 0.04) fail_msg("run %d kept %d of %d (ratio 0.3)", run, kept, N);
  }
  assert_true(memcmp(seq[0][0][0], seq[0][1][0], sizeof(double) * N) != 0); /* masks change per run */
  for (int run = 0; run < 2; run++)
    for (int k = 0; k < 2; k++) assert_memory_equal(seq[0][run][k], seq[1][run][k], sizeof(double) * N);
  for (int ex = 0; ex < 2; ex++)
    for (int run = 0; run < 2; run++) free_all(seq[ex][run], 2);
  /* Inference: y = x, gradient = w. */
  double *o[2];
  run1(g, outs, 2, x, xt, o);
  ot_expect_close(o[0], xv, N, 0, 0, "inference dropout");
  ot_expect_close(o[1], wv, N, 0, 0, "inference gradient");
  free_all(o, 2);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* Same inputs, same bits, whatever the thread count (matmul, softmax,
 * reductions and their gradients). */
static void test_determinism_across_threads(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t sx[2] = {-1, 300}, sw[2] = {300, 70};
  em_var x = input(g, "x", 2, sx), W;
  em_init init = {.kind = EM_INIT_GLOROT_UNIFORM, .seed = 11};
  assert_int_equal(em_parameter(g, "W", EM_F64, 2, sw, &init, &W), EM_OK);
  em_var sm = apply(g, "softmax", (em_var[]){apply2(g, "matmul", x, W)}, 1);
  em_var loss = apply(g, "reduce_sum", (em_var[]){apply2(g, "mul", sm, sm)}, 1), gw;
  assert_int_equal(em_gradients(g, loss, &W, 1, &gw), EM_OK);
  int64_t shape[2] = {130, 300};
  em_tensor *xt = ot_rand(EM_F64, 2, shape, 5, -2, 2);
  em_var outs[2] = {loss, gw};
  double *a[2], *b[2];
  em_set_num_threads(1);
  run1(g, outs, 2, x, xt, a);
  em_set_num_threads(8);
  run1(g, outs, 2, x, xt, b);
  em_set_num_threads(0);
  assert_memory_equal(a[0], b[0], sizeof(double));
  assert_memory_equal(a[1], b[1], sizeof(double) * 300 * 70);
  free_all(a, 2);
  free_all(b, 2);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* -------------------------------------------------------------- editing --- */

/* Replacing a parameter by a constant; a failing replacement is rolled back
 * (shapes, wiring, value count; executors keep running). */
static void test_replace_parameter_and_rollback(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s23[2] = {2, 3}, dyn[2] = {-1, 3}, s43[2] = {4, 3};
  double pv[6] = {1, 2, 3, 4, 5, 6}, cv[6] = {10, 20, 30, 40, 50, 60}, xv[6] = {0.5, 0.5, 0.5, -1, -1, -1};
  em_var x = input(g, "x", 2, s23), p = param_data(g, "p", 2, s23, pv);
  em_var y = apply2(g, "add", x, p);
  em_var c = constant(g, 2, s23, cv);
  assert_int_equal(em_graph_replace(g, p, c), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 2, s23, xv);
  double *o[1], want[6];
  run1(g, &y, 1, x, xt, o);
  for (int i = 0; i < 6; i++) want[i] = xv[i] + cv[i];
  ot_expect_close(o[0], want, 6, 0, 0, "after replacing p by c");
  free_all(o, 1);
  size_t count;
  assert_int_equal(em_graph_parameters(g, NULL, 0, &count), EM_OK);
  assert_int_equal(count, 1); /* p still exists, unused */

  /* Rollback: z = d + q, d [-1,3], q [4,3]; d -> constant [2,3] cannot broadcast with [4,3]. */
  em_var d = input(g, "d", 2, dyn), q = input(g, "q", 2, s43);
  em_var z = apply2(g, "add", d, q);
  em_var zz = apply(g, "identity", &z, 1);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &zz, 1, em_cpu(), &e), EM_OK);
  size_t nv = em_graph_value_count(g);
  expect_error(em_graph_replace(g, d, c), EM_ERR_INVALID_ARGUMENT, NULL);
  assert_int_equal(em_graph_value_count(g), nv);
  expect_var_shape(g, z, 2, s43, "z keeps its shape");
  expect_var_shape(g, zz, 2, s43, "zz keeps its shape");
  expect_var_shape(g, d, 2, dyn, "d keeps its shape");
  /* Still wired to d: the old executor runs (no version bump) and reads d. */
  em_tensor *dt = ot_rand(EM_F64, 2, s43, 1, -1, 1), *qt = ot_rand(EM_F64, 2, s43, 2, -1, 1), *r;
  em_feed f[2] = {{d, dt}, {q, qt}};
  if (em_exec_run(e, f, 2, &r)) fail_msg("executor after a refused replace: %s", em_last_error());
  double *rv = ot_values(r, NULL), *dv = ot_values(dt, NULL), *qv = ot_values(qt, NULL), wz[12];
  for (int i = 0; i < 12; i++) wz[i] = dv[i] + qv[i];
  ot_expect_close(rv, wz, 12, 0, 0, "z after the refused replace");
  free(rv), free(dv), free(qv);
  em_tensor_release(r);
  em_tensor_release(dt);
  em_tensor_release(qt);
  em_exec_free(e);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* FIXED: graph_edit.c reinfer_all (line 34-36) schedules EVERY value of the
 * graph, including the placeholder being bound (its node stays in the graph)
 * and any other unbound placeholder or cycle; em_graph_schedule then fails
 * and reinfer_all returns EM_OK without inferring anything. So binding a
 * placeholder never re-infers downstream shapes (they keep their -1 axis)
 * and never checks them: a binding whose shape is incompatible downstream
 * is accepted, leaving a graph that only fails when it runs. Fix: re-infer
 * the op nodes in a topological order that skips unbound placeholders (and
 * nodes downstream of them or on a cycle) instead of giving up; schedule
 * from the op nodes' outputs with placeholders treated as leaves. */
static void test_replace_placeholder_reinfers_shapes(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t dyn[2] = {-1, 3}, s23[2] = {2, 3}, s43[2] = {4, 3};
  double cv[6] = {1, 2, 3, 4, 5, 6};
  em_var ph, ph2;
  assert_int_equal(em_placeholder(g, "ph", EM_F64, 2, dyn, &ph), EM_OK);
  em_var y = apply(g, "identity", &ph, 1);
  em_var c = constant(g, 2, s23, cv);
  assert_int_equal(em_graph_replace(g, ph, c), EM_OK);
  int64_t dims[EM_MAX_DIMS];
  int nd;
  assert_int_equal(em_var_info(g, y, NULL, &nd, dims), EM_OK);
  int stale = nd != 2 || dims[0] != 2 || dims[1] != 3;
  /* An incompatible binding must be refused, leaving the graph as it was. */
  assert_int_equal(em_placeholder(g, "ph2", EM_F64, 2, dyn, &ph2), EM_OK);
  em_var q = input(g, "q", 2, s43);
  em_var z = apply2(g, "add", ph2, q); /* f64[4,3] */
  em_status s = em_graph_replace(g, ph2, c); /* [2,3] + [4,3] does not broadcast */
  em_graph_free(g);
  if (stale || s == EM_OK)
    fail_msg("identity(ph) after binding ph to f64[2,3] is [%lld,%lld]; binding ph2 to f64[2,3] where it is added "
             "to f64[4,3] gave %s",
             (long long)dims[0], (long long)dims[1], em_status_name(s));
  (void)z;
}

/* Clone (copy), save the clone, load it: same values and bits. */
static void test_clone_then_save_load(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t dyn[2] = {-1, 4}, s43[2] = {4, 3}, s3[1] = {3};
  em_var x = input(g, "x", 2, dyn), W, b;
  em_init init = {.kind = EM_INIT_NORMAL, .scale = 0.5, .seed = 77};
  assert_int_equal(em_parameter(g, "W", EM_F64, 2, s43, &init, &W), EM_OK);
  assert_int_equal(em_parameter(g, "b", EM_F64, 1, s3, &init, &b), EM_OK);
  em_var y = apply2(g, "add", apply2(g, "matmul", x, W), b);
  assert_int_equal(em_var_set_name(g, y, "y"), EM_OK);
  em_graph *c;
  assert_int_equal(em_graph_clone(g, EM_CLONE_COPY, &c), EM_OK);
  /* Growing the clone (its arrays are sized exactly) must work. */
  em_var y2 = apply(c, "identity", &y, 1);
  char path[512];
  snprintf(path, sizeof path, "%s/ember_review_%d_clone.emb", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  assert_int_equal(em_graph_save(c, path), EM_OK);
  em_graph *h;
  assert_int_equal(em_graph_load(path, &h), EM_OK);
  unlink(path);
  em_var ly;
  assert_int_equal(em_graph_lookup(h, "y", &ly), EM_OK);
  assert_int_equal(ly, y);
  int64_t s54[2] = {5, 4};
  em_tensor *xt = ot_rand(EM_F64, 2, s54, 3, -1, 1);
  double *a[1], *bb[2];
  run1(g, &y, 1, x, xt, a);
  em_var outs[2] = {y, y2};
  run1(h, outs, 2, x, xt, bb);
  assert_memory_equal(a[0], bb[0], sizeof(double) * 15);
  assert_memory_equal(a[0], bb[1], sizeof(double) * 15);
  free_all(a, 1);
  free_all(bb, 2);
  size_t count;
  assert_int_equal(em_graph_parameters(h, NULL, 0, &count), EM_OK);
  assert_int_equal(count, 2);
  em_tensor_release(xt);
  em_graph_free(h);
  em_graph_free(c);
  em_graph_free(g);
}

/* ---------------------------------------------------------- save / load --- */

static uint32_t rd32(const unsigned char *p, size_t off) {
  return (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
}

static void wr32(unsigned char *p, size_t off, uint32_t v) {
  for (int i = 0; i < 4; i++) p[off + (size_t)i] = (unsigned char)(v >> (8 * i));
}

static size_t skip_str(const unsigned char *p, size_t off) {
  uint32_t n = rd32(p, off);
  return off + 4 + (n == 0xffffffffu ? 0 : n);
}

static size_t skip_shape(const unsigned char *p, size_t off) { return off + 2 + 8 * (size_t)p[off + 1]; }

/* Where things are in a saved file (format: engine/README.md). */
typedef struct file_map {
  size_t value_at[64], values_end;
  size_t op_name_at[64], n_out_at[64], inputs_at[64];
  int n_nodes, n_values;
} file_map;

static void map_file(const unsigned char *p, file_map *m) {
  memset(m, 0, sizeof *m);
  m->n_nodes = (int)rd32(p, 12);
  m->n_values = (int)rd32(p, 16);
  assert_true(m->n_nodes <= 64 && m->n_values <= 64);
  size_t off = 20;
  for (int v = 0; v < m->n_values; v++) {
    m->value_at[v] = off;
    off = skip_str(p, skip_shape(p, off));
  }
  m->values_end = off;
  for (int i = 0; i < m->n_nodes; i++) {
    off = skip_str(p, off + 1); /* kind, name */
    m->op_name_at[i] = off;
    off = skip_str(p, off);
    m->n_out_at[i] = off;
    uint32_t n_in = rd32(p, off + 4);
    m->inputs_at[i] = off + 8;
    off += 8 + 4 * (size_t)n_in;
    uint32_t n_attrs = rd32(p, off);
    off += 4;
    for (uint32_t k = 0; k < n_attrs; k++) {
      off = skip_str(p, off);
      unsigned t = p[off++];
      if (t <= 1) off += 8;
      else if (t <= 3) off += 4 + 8 * (size_t)rd32(p, off);
      else off = skip_str(p, off);
    }
    if (p[off++]) {
      off = skip_shape(p, off);
      uint64_t bytes = rd32(p, off) | (uint64_t)rd32(p, off + 4) << 32;
      off += 8 + bytes;
    }
  }
}

/* A placeholder survives save/load; the loaded graph refuses to run until
 * it is bound, and runs once bound. */
static void test_save_load_with_placeholder(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t dyn[2] = {-1, 2}, s32[2] = {3, 2};
  em_var ph;
  assert_int_equal(em_placeholder(g, "later", EM_F64, 2, dyn, &ph), EM_OK);
  em_var y = apply2(g, "mul", ph, ph);
  char path[512];
  ot_tmp_path(path, sizeof path, "ph.emb");
  assert_int_equal(em_graph_save(g, path), EM_OK);
  em_graph *h;
  if (em_graph_load(path, &h)) fail_msg("loading a graph with a placeholder: %s", em_last_error());
  unlink(path);
  em_exec *e;
  expect_error(em_exec_create(h, &y, 1, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT, "later");
  double v[6] = {1, 2, 3, 4, 5, 6}, w[6];
  assert_int_equal(em_graph_replace(h, ph, constant(h, 2, s32, v)), EM_OK);
  double *o[1];
  run_feeds(h, &y, 1, NULL, 0, o);
  for (int i = 0; i < 6; i++) w[i] = v[i] * v[i];
  ot_expect_close(o[0], w, 6, 0, 0, "bound after load");
  free_all(o, 1);
  em_graph_free(h);
  em_graph_free(g);
}

/* A file whose wiring was patched into a cycle (a reads b, b reads a)
 * loads (the checksum is resealed; shapes still check) and em_exec_create
 * refuses it naming the cycle. */
static void test_load_cycle_refused_by_exec(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s3[1] = {3};
  em_var x = input(g, "x", 1, s3);
  em_var a = apply(g, "identity", &x, 1);
  em_var b = apply(g, "identity", &a, 1);
  assert_int_equal(em_var_set_name(g, b, "bee"), EM_OK);
  char path[512];
  ot_tmp_path(path, sizeof path, "cycle.emb");
  assert_int_equal(em_graph_save(g, path), EM_OK);
  size_t n;
  unsigned char *p = ot_read_file(path, &n);
  file_map m;
  map_file(p, &m);
  assert_int_equal(m.n_nodes, 3);
  assert_int_equal(rd32(p, m.inputs_at[1]), (uint32_t)x); /* node 1 = a reads x */
  wr32(p, m.inputs_at[1], (uint32_t)b);
  ot_reseal(p, n);
  ot_write_file(path, p, n);
  free(p);
  em_graph *h;
  if (em_graph_load(path, &h)) fail_msg("loading the cyclic file: %s", em_last_error());
  unlink(path);
  em_exec *e;
  expect_error(em_exec_create(h, &b, 1, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT, "cycle");
  assert_non_null(strstr(em_last_error(), "identity"));
  /* A graph with a cycle cannot be differentiated either. */
  em_var grad;
  expect_error(em_gradients(h, apply(h, "_weighted_sum", (em_var[]){b, constant(h, 1, s3, (double[]){1, 1, 1})}, 2),
                            &x, 1, &grad),
               EM_ERR_INVALID_ARGUMENT, "cycle");
  em_graph_free(h);
  em_graph_free(g);
}

/* FIXED: graph_io.c get_node (lines 345-358) checks n_out in 1..8 and n_in
 * <= 16 but never against the op's own n_outputs / min_inputs..max_inputs;
 * check_shapes (line 394) only compares the outputs the file declares. A
 * damaged file can thus give top_k one output (the executor then runs
 * top_k's cpu with out[1] == NULL: a crash) or identity two inputs; an op
 * with fewer inputs than it needs makes em_node_infer read uninitialised
 * shapes. Fix: in get_node, after em_op_find, refuse n_out !=
 * op->n_outputs and n_in outside [min_inputs, max_inputs] with
 * EM_ERR_CORRUPT. Here load must refuse both patched files. */
static void test_load_refuses_op_arity_mismatch(void **state) {
  (void)state;
  char path[512];
  ot_tmp_path(path, sizeof path, "arity.emb");
  int64_t s4[1] = {4};
  em_graph *h = NULL;
  /* (a) top_k stored with one output (its index value removed). */
  em_graph *g = new_graph();
  em_var x = input(g, "x", 1, s4), tk[2];
  em_attr k = (em_attr){.name = "k", .type = EM_ATTR_INT, .i = 2};
  assert_int_equal(em_apply(g, "top_k", &x, 1, &k, 1, tk, 2), EM_OK);
  assert_int_equal(em_graph_save(g, path), EM_OK);
  em_graph_free(g);
  size_t n;
  unsigned char *p = ot_read_file(path, &n);
  file_map m;
  map_file(p, &m);
  assert_int_equal(m.n_values, 3);
  assert_int_equal(rd32(p, m.n_out_at[1]), 2);
  size_t cut = m.values_end - m.value_at[2]; /* the last value record */
  unsigned char *q = malloc(n);
  memcpy(q, p, m.value_at[2]);
  memcpy(q + m.value_at[2], p + m.values_end, n - m.values_end);
  size_t qn = n - cut;
  wr32(q, 16, 2);                       /* n_values */
  wr32(q, m.n_out_at[1] - cut, 1);      /* top_k's n_out */
  ot_reseal(q, qn);
  ot_write_file(path, q, qn);
  free(q);
  free(p);
  em_status s1 = em_graph_load(path, &h);
  char msg1[512];
  snprintf(msg1, sizeof msg1, "%s", s1 ? em_last_error() : "loaded");
  em_graph_free(h);
  h = NULL;
  /* (b) add_n(x, x) renamed identity: two inputs to a one-input op. */
  g = new_graph();
  x = input(g, "x", 1, s4);
  apply2(g, "add_n", x, x);
  assert_int_equal(em_graph_save(g, path), EM_OK);
  em_graph_free(g);
  p = ot_read_file(path, &n);
  map_file(p, &m);
  size_t at = m.op_name_at[1];
  assert_int_equal(rd32(p, at), 5);
  assert_memory_equal(p + at + 4, "add_n", 5);
  q = malloc(n + 3);
  memcpy(q, p, at);
  wr32(q, at, 8);
  memcpy(q + at + 4, "identity", 8);
  memcpy(q + at + 12, p + at + 9, n - at - 9);
  ot_reseal(q, n + 3);
  ot_write_file(path, q, n + 3);
  free(q);
  free(p);
  em_status s2 = em_graph_load(path, &h);
  em_graph_free(h);
  unlink(path);
  if (s1 != EM_ERR_CORRUPT || s2 != EM_ERR_CORRUPT)
    fail_msg("top_k stored with 1 output: load gave %s (%s); identity stored with 2 inputs: load gave %s",
             em_status_name(s1), msg1, em_status_name(s2));
}

/* FIXED: em_apply (graph.c lines 302-305) validates attribute names and data but
 * not the attribute type: a type outside em_attr_type is stored, em_graph_save
 * writes it (put_attr's switch has no default), and em_graph_load refuses
 * the file ("unknown attribute type"): the library writes files it cannot
 * read. Fix: em_apply refuses attrs[i].type > EM_ATTR_STRING naming it. */
static void test_apply_refuses_unknown_attribute_type(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  em_var x = input(g, "x", 1, s2), y;
  em_attr bogus = {.name = "whatever", .type = (em_attr_type)42, .i = 1};
  em_status s = em_apply(g, "identity", &x, 1, &bogus, 1, &y, 1);
  if (s == EM_ERR_INVALID_ARGUMENT) {
    em_graph_free(g);
    return;
  }
  assert_int_equal(s, EM_OK);
  char path[512];
  ot_tmp_path(path, sizeof path, "attr.emb");
  em_status saved = em_graph_save(g, path);
  em_graph *h = NULL;
  em_status loaded = saved ? saved : em_graph_load(path, &h);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", em_last_error());
  em_graph_free(h);
  em_graph_free(g);
  unlink(path);
  if (loaded) fail_msg("em_apply accepted attribute type 42, and the graph does not round-trip: %s", msg);
}

/* ------------------------------------------------------ argument checks --- */

static char g_failures[8192];
static size_t g_failures_len;

/* Runs `expr` in a child (so a crash cannot take the test run down) and
 * records a failure unless it returned EM_ERR_INVALID_ARGUMENT. */
static void check_child(int result, int status, const char *what) {
  const char *why = NULL;
  char buf[64];
  if (result < 0) {
    snprintf(buf, sizeof buf, "crashed (%s %d)", WIFSIGNALED(status) ? "signal" : "exit",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    why = buf;
  } else if (result != EM_ERR_INVALID_ARGUMENT) {
    snprintf(buf, sizeof buf, "returned %s", em_status_name((em_status)result));
    why = buf;
  }
  if (why && g_failures_len < sizeof g_failures)
    g_failures_len += (size_t)snprintf(g_failures + g_failures_len, sizeof g_failures - g_failures_len, "\n  %s: %s",
                                       what, why);
}

/* cmocka's crash handler would longjmp back into the test runner inside
 * the child: restore the default actions so a crash ends the child. */
static void child_default_signals(void) {
  int sigs[5] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (int i = 0; i < 5; i++) signal(sigs[i], SIG_DFL);
}

/* The child reports the status through a pipe (its exit code would be
 * valgrind's under valgrind); no report means it crashed. */
#define EXPECT_REFUSED(expr)                                                                               \
  do {                                                                                                     \
    int fd_[2];                                                                                            \
    assert_int_equal(pipe(fd_), 0);                                                                        \
    fflush(NULL);                                                                                          \
    pid_t pid_ = fork();                                                                                   \
    assert_true(pid_ >= 0);                                                                                \
    if (pid_ == 0) {                                                                                       \
      child_default_signals();                                                                             \
      close(fd_[0]);                                                                                       \
      int r_ = (int)(expr);                                                                                \
      ssize_t w_ = write(fd_[1], &r_, sizeof r_);                                                          \
      _exit(w_ == (ssize_t)sizeof r_ ? 0 : 1);                                                             \
    }                                                                                                      \
    close(fd_[1]);                                                                                         \
    int got_ = -1;                                                                                         \
    ssize_t n_ = read(fd_[0], &got_, sizeof got_);                                                         \
    close(fd_[0]);                                                                                         \
    int st_ = 0;                                                                                           \
    waitpid(pid_, &st_, 0);                                                                                \
    check_child(n_ == (ssize_t)sizeof got_ ? got_ : -1, st_, #expr);                                       \
  } while (0)

/* FIXED: em_var_name (graph.c line 353) writes *name and
 * em_parameter_value (graph.c line 412) writes *out without checking for
 * NULL: both crash on a NULL out-pointer instead of returning
 * EM_ERR_INVALID_ARGUMENT. Every other public function passes. */
static void test_null_arguments(void **state) {
  (void)state;
  g_failures_len = 0;
  g_failures[0] = 0;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  em_var x = input(g, "x", 1, s2), v, p;
  em_init init = {.kind = EM_INIT_CONSTANT, .value = 1};
  assert_int_equal(em_parameter(g, "p", EM_F64, 1, s2, &init, &p), EM_OK);
  em_var y = apply2(g, "add", x, p);
  em_var loss = apply2(g, "_weighted_sum", y, constant(g, 1, s2, (double[]){1, 1}));
  em_tensor *t = ot_tensor(EM_F64, 1, s2, NULL), *outs[1];
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  em_feed feed = {x, t}, null_feed = {x, NULL};
  const char *name;
  size_t count;
  em_graph *other;
  em_exec_stats st;
  em_var grads[1];
  EXPECT_REFUSED(em_graph_create(NULL));
  EXPECT_REFUSED(em_input(NULL, "a", EM_F64, 1, s2, &v));
  EXPECT_REFUSED(em_input(g, "a", EM_F64, 1, s2, NULL));
  EXPECT_REFUSED(em_input(g, "a", EM_F64, 1, NULL, &v));
  EXPECT_REFUSED(em_parameter(NULL, "a", EM_F64, 1, s2, &init, &v));
  EXPECT_REFUSED(em_parameter(g, "a", EM_F64, 1, s2, NULL, &v));
  EXPECT_REFUSED(em_parameter(g, "a", EM_F64, 1, s2, &init, NULL));
  EXPECT_REFUSED(em_parameter(g, "a", EM_F64, 1, NULL, &init, &v));
  EXPECT_REFUSED(em_state(NULL, "a", EM_F64, 1, s2, &init, &v));
  EXPECT_REFUSED(em_state(g, "a", EM_F64, 1, s2, &init, NULL));
  EXPECT_REFUSED(em_constant(NULL, t, &v));
  EXPECT_REFUSED(em_constant(g, NULL, &v));
  EXPECT_REFUSED(em_constant(g, t, NULL));
  EXPECT_REFUSED(em_placeholder(NULL, "a", EM_F64, 1, s2, &v));
  EXPECT_REFUSED(em_placeholder(g, "a", EM_F64, 1, s2, NULL));
  EXPECT_REFUSED(em_apply(NULL, "identity", &x, 1, NULL, 0, &v, 1));
  EXPECT_REFUSED(em_apply(g, NULL, &x, 1, NULL, 0, &v, 1));
  EXPECT_REFUSED(em_apply(g, "identity", NULL, 1, NULL, 0, &v, 1));
  EXPECT_REFUSED(em_apply(g, "identity", &x, 1, NULL, 1, &v, 1));
  EXPECT_REFUSED(em_apply(g, "identity", &x, 1, NULL, 0, NULL, 1));
  EXPECT_REFUSED(em_stop_gradient(NULL, x, &v));
  EXPECT_REFUSED(em_stop_gradient(g, x, NULL));
  EXPECT_REFUSED(em_var_info(NULL, x, NULL, NULL, NULL));
  EXPECT_REFUSED(em_var_name(NULL, x, &name));
  EXPECT_REFUSED(em_var_name(g, x, NULL));
  EXPECT_REFUSED(em_var_set_name(NULL, x, "a"));
  EXPECT_REFUSED(em_graph_lookup(NULL, "x", &v));
  EXPECT_REFUSED(em_graph_lookup(g, NULL, &v));
  EXPECT_REFUSED(em_graph_lookup(g, "x", NULL));
  EXPECT_REFUSED(em_graph_parameters(NULL, NULL, 0, &count));
  EXPECT_REFUSED(em_graph_parameters(g, NULL, 0, NULL));
  EXPECT_REFUSED(em_graph_states(NULL, NULL, 0, &count));
  EXPECT_REFUSED(em_graph_states(g, NULL, 0, NULL));
  EXPECT_REFUSED(em_parameter_value(NULL, p, &t));
  EXPECT_REFUSED(em_parameter_value(g, p, NULL));
  EXPECT_REFUSED(em_parameter_set(NULL, p, t));
  EXPECT_REFUSED(em_parameter_set(g, p, NULL));
  EXPECT_REFUSED(em_gradients(NULL, loss, &x, 1, grads));
  EXPECT_REFUSED(em_gradients(g, loss, NULL, 1, grads));
  EXPECT_REFUSED(em_gradients(g, loss, &x, 1, NULL));
  EXPECT_REFUSED(em_graph_replace(NULL, x, y));
  EXPECT_REFUSED(em_graph_clone(NULL, EM_CLONE_SHARE, &other));
  EXPECT_REFUSED(em_graph_clone(g, EM_CLONE_SHARE, NULL));
  EXPECT_REFUSED(em_graph_save(NULL, "/tmp/never"));
  EXPECT_REFUSED(em_graph_save(g, NULL));
  EXPECT_REFUSED(em_graph_load(NULL, &other));
  EXPECT_REFUSED(em_graph_load("/tmp/never", NULL));
  EXPECT_REFUSED(em_op_info_get(0, NULL));
  EXPECT_REFUSED(em_exec_create(NULL, &y, 1, em_cpu(), &e));
  EXPECT_REFUSED(em_exec_create(g, NULL, 1, em_cpu(), &e));
  EXPECT_REFUSED(em_exec_create(g, &y, 1, em_cpu(), NULL));
  EXPECT_REFUSED(em_exec_run(NULL, &feed, 1, outs));
  EXPECT_REFUSED(em_exec_run(e, NULL, 1, outs));
  EXPECT_REFUSED(em_exec_run(e, &feed, 1, NULL));
  EXPECT_REFUSED(em_exec_run(e, &null_feed, 1, outs));
  EXPECT_REFUSED(em_exec_run_into(NULL, &feed, 1, outs, EM_RUN_STORE));
  EXPECT_REFUSED(em_exec_run_into(e, &feed, 1, NULL, EM_RUN_STORE));
  EXPECT_REFUSED(em_exec_run_into(e, &feed, 1, (em_tensor *[]){NULL}, EM_RUN_STORE));
  EXPECT_REFUSED(em_exec_set_training(NULL, 1));
  EXPECT_REFUSED(em_exec_stats_get(NULL, &st));
  EXPECT_REFUSED(em_exec_stats_get(e, NULL));
  /* The void and size-returning ones must simply cope. */
  em_graph_free(NULL);
  em_exec_free(NULL);
  assert_int_equal(em_graph_value_count(NULL), 0);
  assert_int_equal(em_exec_describe(NULL, NULL, 0), 0);
  assert_true(em_exec_describe(e, NULL, 0) > 0);
  em_exec_free(e);
  em_tensor_release(t);
  em_graph_free(g);
  if (g_failures_len) fail_msg("NULL arguments not refused with EM_ERR_INVALID_ARGUMENT:%s", g_failures);
}

/* Handles out of range (-1, the value count, INT32_MAX, INT32_MIN) are
 * refused by every function that takes one. */
static void test_handles_out_of_range(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  em_var x = input(g, "x", 1, s2), v;
  em_var loss = apply2(g, "_weighted_sum", x, constant(g, 1, s2, (double[]){1, 1}));
  em_tensor *t = ot_tensor(EM_F64, 1, s2, NULL), *out;
  em_exec *e;
  assert_int_equal(em_exec_create(g, &loss, 1, em_cpu(), &e), EM_OK);
  em_var bad[4] = {-1, (em_var)em_graph_value_count(g), INT32_MAX, INT32_MIN};
  for (int i = 0; i < 4; i++) {
    em_var b = bad[i];
    const char *name;
    em_dtype dt;
    em_tensor *pt;
    expect_error(em_var_info(g, b, &dt, NULL, NULL), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_var_name(g, b, &name), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_var_set_name(g, b, "n"), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_parameter_value(g, b, &pt), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_parameter_set(g, b, t), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_apply(g, "identity", &b, 1, NULL, 0, &v, 1), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_stop_gradient(g, b, &v), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_gradients(g, b, &x, 1, &v), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_gradients(g, loss, &b, 1, &v), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_graph_replace(g, b, x), EM_ERR_INVALID_ARGUMENT, NULL);
    expect_error(em_graph_replace(g, x, b), EM_ERR_INVALID_ARGUMENT, NULL);
    em_exec *e2;
    expect_error(em_exec_create(g, &b, 1, em_cpu(), &e2), EM_ERR_INVALID_ARGUMENT, NULL);
    em_feed f[2] = {{x, t}, {b, t}};
    expect_error(em_exec_run(e, f, 2, &out), EM_ERR_INVALID_ARGUMENT, NULL);
  }
  /* Bad counts. */
  expect_error(em_gradients(g, loss, &x, -1, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  em_feed f = {x, t};
  expect_error(em_exec_run(e, &f, -1, &out), EM_ERR_INVALID_ARGUMENT, NULL);
  em_exec *e3;
  expect_error(em_exec_create(g, &loss, 0, em_cpu(), &e3), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_exec_create(g, &loss, -3, em_cpu(), &e3), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_apply(g, "add_n", &x, -1, NULL, 0, &v, 1), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_apply(g, "identity", &x, 1, NULL, -1, &v, 1), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_apply(g, "identity", &x, 1, NULL, 0, &v, 2), EM_ERR_INVALID_ARGUMENT, NULL);
  em_op_info info;
  expect_error(em_op_info_get(em_op_info_count(), &info), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_graph_clone(g, (em_clone_mode)7, &(em_graph *){NULL}), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_exec_run_into(e, &f, 1, &t, (em_run_mode)9), EM_ERR_INVALID_ARGUMENT, NULL);
  em_exec_free(e);
  em_tensor_release(t);
  em_graph_free(g);
}

/* Leaves with bad or huge dimensions are refused (no overflow later). */
static void test_leaf_dimension_limits(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_var v;
  em_init init = {.kind = EM_INIT_CONSTANT};
  int64_t huge2[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, big_bytes[2] = {(int64_t)1 << 62, 4};
  int64_t max1[1] = {INT64_MAX}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  expect_error(em_parameter(g, "p", EM_F64, 2, huge2, &init, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_parameter(g, "p", EM_F64, 2, big_bytes, &init, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_parameter(g, "p", EM_F32, 1, max1, &init, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_state(g, "s", EM_F64, 2, huge2, &init, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_input(g, "i", EM_F64, 9, nine, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_input(g, "i", EM_F64, -1, nine, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_input(g, "i", (em_dtype)99, 1, nine, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_input(g, "i", (em_dtype)-1, 1, nine, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  expect_error(em_placeholder(g, "ph", EM_F64, 1, (int64_t[]){-2}, &v), EM_ERR_INVALID_ARGUMENT, NULL);
  assert_int_equal(em_graph_value_count(g), 0); /* nothing half-made */
  em_graph_free(g);
}

/* FIXED: graph.c leaf() (lines 94-97) checks each dimension (>= -1) but not
 * their product: em_input / em_placeholder accept [2^40, 2^40] (2^80
 * elements) and [2^62, 4] (bytes overflow size_t), which no tensor can
 * ever have; later numel computations (em_shape_numel in op_registry.c,
 * ops' infer) overflow int64 (undefined behaviour). em_parameter refuses
 * the same shapes (through em_tensor_zeros). Fix: in leaf(), refuse a shape
 * whose product of non-negative dims overflows int64 or whose byte size
 * overflows SIZE_MAX, naming the leaf and shape. */
static void test_input_overflowing_dims(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_var v;
  int64_t huge2[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, big_bytes[3] = {-1, (int64_t)1 << 62, 4};
  em_status a = em_input(g, "i", EM_F64, 2, huge2, &v);
  em_status b = em_input(g, "j", EM_F64, 3, big_bytes, &v);
  em_status c = em_placeholder(g, "k", EM_F64, 2, huge2, &v);
  em_graph_free(g);
  if (a != EM_ERR_INVALID_ARGUMENT || b != EM_ERR_INVALID_ARGUMENT || c != EM_ERR_INVALID_ARGUMENT)
    fail_msg("overflowing shapes accepted: em_input [2^40,2^40] -> %s, em_input [?,2^62,4] -> %s, "
             "em_placeholder [2^40,2^40] -> %s",
             em_status_name(a), em_status_name(b), em_status_name(c));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_null_arguments), /* first: its children inherit no leak from failed tests */
    cmocka_unit_test(test_grad_top_k_both_outputs_and_fanout),
    cmocka_unit_test(test_grad_wrt_intermediate_and_y),
    cmocka_unit_test(test_grad_more_than_16_contributions),
    cmocka_unit_test(test_second_order_mul_add),
    cmocka_unit_test(test_second_order_through_weighted_sum_seed),
    cmocka_unit_test(test_gradients_called_twice),
    cmocka_unit_test(test_grad_dynamic_batch_matmul_bias_mean),
    cmocka_unit_test(test_exec_inplace_hazards),
    cmocka_unit_test(test_exec_subsets_and_leaf_outputs),
    cmocka_unit_test(test_exec_parameter_output_is_not_aliased),
    cmocka_unit_test(test_exec_sees_parameter_set),
    cmocka_unit_test(test_exec_feed_same_input_twice),
    cmocka_unit_test(test_exec_feed_value_created_after_plan),
    cmocka_unit_test(test_batch_norm_state_update_in_training),
    cmocka_unit_test(test_batch_norm_running_stats_must_be_states),
    cmocka_unit_test(test_dropout_mask_consistency_and_determinism),
    cmocka_unit_test(test_determinism_across_threads),
    cmocka_unit_test(test_replace_parameter_and_rollback),
    cmocka_unit_test(test_replace_placeholder_reinfers_shapes),
    cmocka_unit_test(test_clone_then_save_load),
    cmocka_unit_test(test_save_load_with_placeholder),
    cmocka_unit_test(test_load_cycle_refused_by_exec),
    cmocka_unit_test(test_load_refuses_op_arity_mismatch),
    cmocka_unit_test(test_apply_refuses_unknown_attribute_type),
    cmocka_unit_test(test_handles_out_of_range),
    cmocka_unit_test(test_leaf_dimension_limits),
    cmocka_unit_test(test_input_overflowing_dims),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
