/* The engine: graphs (leaves, initialisers, names, errors), reverse-mode
 * autodiff, the executor (feeds, dynamic axis, liveness, in place,
 * accumulation, devices), editing (placeholders, replace, cycles, clone)
 * and save/load. Only core ops (ops/core.c) are used, so these tests do not
 * depend on the op families; expected values are derived by hand in each
 * test. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "op_testkit.h"

/* ------------------------------------------------------------- helpers --- */

static em_graph *new_graph(void) {
  em_graph *g = NULL;
  assert_int_equal(em_graph_create(&g), EM_OK);
  return g;
}

static em_var input(em_graph *g, const char *name, int ndim, const int64_t *shape) {
  em_var v;
  if (em_input(g, name, EM_F64, ndim, shape, &v)) fail_msg("em_input: %s", em_last_error());
  return v;
}

static em_var apply(em_graph *g, const char *op, const em_var *in, int n) {
  em_var y;
  if (em_apply(g, op, in, n, NULL, 0, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}

static em_var constant(em_graph *g, int ndim, const int64_t *shape, const double *v) {
  em_tensor *t = ot_tensor(EM_F64, ndim, shape, v);
  em_var c;
  if (em_constant(g, t, &c)) fail_msg("em_constant: %s", em_last_error());
  em_tensor_release(t);
  return c;
}

/* Runs outputs with one optional feed; returns the doubles of output k. */
static void run(em_graph *g, const em_var *outs, int n, em_var fed, em_tensor *value, double **values) {
  em_exec *e;
  if (em_exec_create(g, outs, n, em_cpu(), &e)) fail_msg("em_exec_create: %s", em_last_error());
  em_feed f = {fed, value};
  em_tensor *res[8];
  if (em_exec_run(e, &f, value ? 1 : 0, res)) fail_msg("em_exec_run: %s", em_last_error());
  for (int k = 0; k < n; k++) {
    values[k] = ot_values(res[k], NULL);
    em_tensor_release(res[k]);
  }
  em_exec_free(e);
}

static void expect_error(em_status s, em_status want, const char *needle) {
  if (s != want) fail_msg("expected %s, got %s (%s)", em_status_name(want), em_status_name(s), em_last_error());
  if (needle && !strstr(em_last_error(), needle)) fail_msg("message lacks \"%s\": %s", needle, em_last_error());
}

/* --------------------------------------------------------------- leaves --- */

static void test_leaves_names_and_lookup(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t shape[2] = {-1, 4};
  em_var x = input(g, "x", 2, shape), found;
  assert_int_equal(em_graph_lookup(g, "x", &found), EM_OK);
  assert_int_equal(found, x);
  expect_error(em_graph_lookup(g, "nope", &found), EM_ERR_NOT_FOUND, "nope");
  em_dtype dt;
  int nd;
  int64_t dims[EM_MAX_DIMS];
  assert_int_equal(em_var_info(g, x, &dt, &nd, dims), EM_OK);
  assert_int_equal(dt, EM_F64);
  assert_int_equal(nd, 2);
  assert_int_equal(dims[0], -1);
  assert_int_equal(dims[1], 4);
  em_var y = apply(g, "identity", &x, 1);
  assert_int_equal(em_var_set_name(g, y, "features"), EM_OK);
  assert_int_equal(em_graph_lookup(g, "features", &found), EM_OK);
  assert_int_equal(found, y);
  expect_error(em_var_info(g, 99, &dt, &nd, dims), EM_ERR_INVALID_ARGUMENT, "99");
  int64_t bad[1] = {-2};
  expect_error(em_input(g, "b", EM_F32, 1, bad, &found), EM_ERR_INVALID_ARGUMENT, "-2");
  expect_error(em_parameter(g, "p", EM_F32, 1, (int64_t[]){-1}, &(em_init){0}, &found), EM_ERR_INVALID_ARGUMENT, "p");
  em_graph_free(g);
}

static void test_apply_errors(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s3[1] = {3}, s4[1] = {4};
  em_var a = input(g, "a", 1, s3), b = input(g, "b", 1, s4), y;
  expect_error(em_apply(g, "no_such_op", &a, 1, NULL, 0, &y, 1), EM_ERR_NOT_FOUND, "no_such_op");
  em_var ab[2] = {a, b};
  expect_error(em_apply(g, "identity", ab, 2, NULL, 0, &y, 1), EM_ERR_INVALID_ARGUMENT, "identity");
  /* add_n names the op and both shapes. */
  expect_error(em_apply(g, "add_n", ab, 2, NULL, 0, &y, 1), EM_ERR_INVALID_ARGUMENT, "f64[4]");
  assert_non_null(strstr(em_last_error(), "f64[3]"));
  assert_non_null(strstr(em_last_error(), "add_n"));
  em_var bogus = 1000;
  expect_error(em_apply(g, "identity", &bogus, 1, NULL, 0, &y, 1), EM_ERR_INVALID_ARGUMENT, "1000");
  em_attr no_name = {.type = EM_ATTR_INT, .i = 1};
  expect_error(em_apply(g, "identity", &a, 1, &no_name, 1, &y, 1), EM_ERR_INVALID_ARGUMENT, "malformed");
  em_graph_free(g);
}

/* --------------------------------------------------------- initialisers --- */

static double *param_values(em_graph *g, em_var p, int64_t *n) {
  em_tensor *t;
  if (em_parameter_value(g, p, &t)) fail_msg("%s", em_last_error());
  double *v = ot_values(t, n);
  em_tensor_release(t);
  return v;
}

static em_var param(em_graph *g, em_dtype dt, int ndim, const int64_t *shape, em_init init) {
  em_var p;
  if (em_parameter(g, "p", dt, ndim, shape, &init, &p)) fail_msg("em_parameter: %s", em_last_error());
  return p;
}

static void test_initialisers(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t n;
  /* Constant. */
  int64_t s5[1] = {5};
  double *v = param_values(g, param(g, EM_F32, 1, s5, (em_init){.kind = EM_INIT_CONSTANT, .value = 0.25}), &n);
  for (int i = 0; i < 5; i++) assert_true(v[i] == 0.25);
  free(v);
  /* Glorot uniform on [40, 30, 5]: fan_in = 30*5, fan_out = 40*5, bound sqrt(6/350). */
  int64_t w[3] = {40, 30, 5};
  double bound = sqrt(6.0 / (150 + 200)), maxabs = 0, mean = 0;
  v = param_values(g, param(g, EM_F64, 3, w, (em_init){.kind = EM_INIT_GLOROT_UNIFORM, .seed = 7}), &n);
  for (int64_t i = 0; i < n; i++) {
    assert_true(fabs(v[i]) <= bound);
    maxabs = fmax(maxabs, fabs(v[i]));
    mean += v[i] / (double)n;
  }
  assert_true(maxabs > 0.99 * bound);          /* 6000 draws reach the edge */
  assert_true(fabs(mean) < 4 * bound / sqrt(3.0 * (double)n)); /* 4 sigma of the sample mean */
  free(v);
  /* He normal on [2000, 50]: std sqrt(2/50) = 0.2, checked to 5%. */
  int64_t h[2] = {2000, 50};
  v = param_values(g, param(g, EM_F64, 2, h, (em_init){.kind = EM_INIT_HE_NORMAL, .seed = 3}), &n);
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += v[i] * v[i];
  assert_true(fabs(sqrt(ss / (double)n) - 0.2) < 0.01);
  free(v);
  /* Truncated normal: within 2 scale. */
  v = param_values(g, param(g, EM_F64, 2, h, (em_init){.kind = EM_INIT_TRUNCATED_NORMAL, .scale = 0.5, .seed = 4}), &n);
  for (int64_t i = 0; i < n; i++) assert_true(fabs(v[i]) <= 1.0);
  free(v);
  /* Same seed, same bits; another seed, other values. */
  int64_t s100[1] = {100};
  double *a = param_values(g, param(g, EM_F32, 1, s100, (em_init){.kind = EM_INIT_NORMAL, .scale = 1, .seed = 9}), &n);
  double *b = param_values(g, param(g, EM_F32, 1, s100, (em_init){.kind = EM_INIT_NORMAL, .scale = 1, .seed = 9}), &n);
  double *c = param_values(g, param(g, EM_F32, 1, s100, (em_init){.kind = EM_INIT_NORMAL, .scale = 1, .seed = 10}), &n);
  assert_memory_equal(a, b, sizeof(double) * 100);
  assert_true(memcmp(a, c, sizeof(double) * 100) != 0);
  free(a), free(b), free(c);
  /* From data; and a mismatching tensor is refused naming it. */
  double d3[3] = {1, 2, 3};
  int64_t s3[1] = {3};
  em_tensor *t = ot_tensor(EM_F64, 1, s3, d3);
  v = param_values(g, param(g, EM_F64, 1, s3, (em_init){.kind = EM_INIT_FROM_DATA, .data = t}), &n);
  ot_expect_close(v, d3, 3, 0, 0, "from data");
  free(v);
  em_var p;
  expect_error(em_parameter(g, "q", EM_F64, 1, s5, &(em_init){.kind = EM_INIT_FROM_DATA, .data = t}, &p),
               EM_ERR_INVALID_ARGUMENT, "f64[3]");
  em_tensor_release(t);
  em_graph_free(g);
}

static void test_parameters_and_states(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  em_init zero = {.kind = EM_INIT_CONSTANT};
  em_var p1, p2, st, x = input(g, "x", 1, s2);
  assert_int_equal(em_parameter(g, "w", EM_F64, 1, s2, &zero, &p1), EM_OK);
  assert_int_equal(em_state(g, "running", EM_F64, 1, s2, &zero, &st), EM_OK);
  assert_int_equal(em_parameter(g, "b", EM_F64, 1, s2, &zero, &p2), EM_OK);
  em_var list[4];
  size_t count;
  assert_int_equal(em_graph_parameters(g, list, 4, &count), EM_OK);
  assert_int_equal(count, 2);
  assert_int_equal(list[0], p1);
  assert_int_equal(list[1], p2);
  assert_int_equal(em_graph_states(g, list, 4, &count), EM_OK);
  assert_int_equal(count, 1);
  assert_int_equal(list[0], st);
  double v[2] = {3, 4};
  em_tensor *t = ot_tensor(EM_F64, 1, s2, v);
  assert_int_equal(em_parameter_set(g, p1, t), EM_OK);
  int64_t n;
  double *got = param_values(g, p1, &n);
  ot_expect_close(got, v, 2, 0, 0, "parameter_set");
  free(got);
  em_tensor_release(t);
  int64_t s3[1] = {3};
  t = ot_tensor(EM_F64, 1, s3, NULL);
  expect_error(em_parameter_set(g, p1, t), EM_ERR_INVALID_ARGUMENT, "f64[3]");
  em_tensor_release(t);
  em_tensor *dummy;
  expect_error(em_parameter_value(g, x, &dummy), EM_ERR_INVALID_ARGUMENT, "input");
  em_graph_free(g);
}

/* ------------------------------------------------------------- autodiff --- */

/* L = sum(w * add_n(b broadcast to x, x, b broadcast)) with x [2,3], b [3]:
 * dL/dx = w; dL/db = 2 * column sums of w (two broadcast uses). */
static void test_gradients_broadcast_and_fanout(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s23[2] = {2, 3}, s3[1] = {3};
  double wv[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {0.5, -1, 2}, xv[6] = {1, 0, -1, 2, 3, 4};
  em_var x = input(g, "x", 2, s23), b = constant(g, 1, s3, bv), w = constant(g, 2, s23, wv);
  em_var bx[2] = {b, x};
  em_var bb = apply(g, "broadcast_like", bx, 2);
  em_var terms[3] = {bb, x, bb};
  em_var z = apply(g, "add_n", terms, 3);
  em_var zw[2] = {z, w};
  em_var loss = apply(g, "_weighted_sum", zw, 2);
  em_var xs[2] = {x, b}, grads[2];
  assert_int_equal(em_gradients(g, loss, xs, 2, grads), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 2, s23, xv);
  double *out[3];
  em_var outs[3] = {loss, grads[0], grads[1]};
  run(g, outs, 3, x, xt, out);
  double want_loss = 0;
  for (int i = 0; i < 6; i++) want_loss += wv[i] * (2 * bv[i % 3] + xv[i]);
  ot_expect_close(out[0], &want_loss, 1, 1e-12, 0, "loss");
  ot_expect_close(out[1], wv, 6, 0, 0, "dL/dx");
  double db[3] = {2 * (1 + 4), 2 * (2 + 5), 2 * (3 + 6)};
  ot_expect_close(out[2], db, 3, 0, 0, "dL/db");
  for (int k = 0; k < 3; k++) free(out[k]);
  em_tensor_release(xt);
  em_graph_free(g);
}

static void test_gradients_stop_and_unreached(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double wv[2] = {3, 5}, xv[2] = {1, 1};
  em_var x = input(g, "x", 1, s2), other = input(g, "other", 1, s2), w = constant(g, 1, s2, wv);
  em_var stopped, y;
  assert_int_equal(em_stop_gradient(g, x, &stopped), EM_OK);
  em_var xs2[2] = {x, stopped};
  y = apply(g, "add_n", xs2, 2); /* y = 2x, but only one path carries a gradient */
  em_var yw[2] = {y, w};
  em_var loss = apply(g, "_weighted_sum", yw, 2);
  em_var xs[3] = {x, other, x}, grads[3];
  assert_int_equal(em_gradients(g, loss, xs, 3, grads), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 1, s2, xv);
  double *out[3];
  run(g, grads, 3, x, xt, out);
  double zero[2] = {0, 0};
  ot_expect_close(out[0], wv, 2, 0, 0, "through the unstopped path only");
  ot_expect_close(out[1], zero, 2, 0, 0, "unreached input");
  ot_expect_close(out[2], wv, 2, 0, 0, "x named twice");
  for (int k = 0; k < 3; k++) free(out[k]);
  em_tensor_release(xt);
  em_graph_free(g);
}

static void test_gradient_errors(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double wv[2] = {1, 1};
  em_var x = input(g, "x", 1, s2), w = constant(g, 1, s2, wv), grads[1];
  /* y with two elements is refused. */
  expect_error(em_gradients(g, x, &x, 1, grads), EM_ERR_INVALID_ARGUMENT, "f64[2]");
  /* _scale_by has no backward: a second-order gradient through it names it. */
  em_var xw[2] = {x, w};
  em_var loss = apply(g, "_weighted_sum", xw, 2);
  assert_int_equal(em_gradients(g, loss, &x, 1, grads), EM_OK); /* = _scale_by(w, 1) */
  em_var gw[2] = {grads[0], w};
  em_var loss2 = apply(g, "_weighted_sum", gw, 2);
  em_var ws[1] = {w}, g2[1];
  /* d loss2 / d w passes through _scale_by(w, ...): no backward. */
  expect_error(em_gradients(g, loss2, ws, 1, g2), EM_ERR_UNSUPPORTED, "_scale_by");
  em_graph_free(g);
}

/* ------------------------------------------------------------- executor --- */

static void test_feeds_and_dynamic_axis(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t dyn[2] = {-1, 3}, s3[1] = {3};
  double bv[3] = {1, 2, 3};
  em_var x = input(g, "x", 2, dyn), b = constant(g, 1, s3, bv);
  em_var xb[2] = {x, b};
  em_var bb = apply(g, "broadcast_like", (em_var[]){b, x}, 2);
  (void)xb;
  em_var y = apply(g, "add_n", (em_var[]){x, bb}, 2);
  em_var col = apply(g, "sum_to", (em_var[]){y, b}, 2); /* column sums: batch-size dependent */
  em_exec *e;
  assert_int_equal(em_exec_create(g, &col, 1, em_cpu(), &e), EM_OK);
  for (int batch = 1; batch <= 5; batch += 4) {
    int64_t shape[2] = {batch, 3};
    double xv[15];
    for (int i = 0; i < batch * 3; i++) xv[i] = i;
    em_tensor *xt = ot_tensor(EM_F64, 2, shape, xv), *out;
    em_feed f = {x, xt};
    assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
    double want[3] = {0, 0, 0};
    for (int i = 0; i < batch * 3; i++) want[i % 3] += xv[i] + bv[i % 3];
    double *got = ot_values(out, NULL);
    ot_expect_close(got, want, 3, 0, 0, "column sums");
    free(got);
    em_tensor_release(out);
    em_tensor_release(xt);
  }
  /* Wrong trailing dim, wrong dtype, missing feed, feeding a constant. */
  int64_t bad[2] = {2, 4};
  em_tensor *bt = ot_tensor(EM_F64, 2, bad, NULL), *ft = ot_tensor(EM_F32, 2, (int64_t[]){2, 3}, NULL), *out;
  em_feed f = {x, bt};
  expect_error(em_exec_run(e, &f, 1, &out), EM_ERR_INVALID_ARGUMENT, "f64[2,4]");
  assert_non_null(strstr(em_last_error(), "f64[?,3]"));
  f.value = ft;
  expect_error(em_exec_run(e, &f, 1, &out), EM_ERR_INVALID_ARGUMENT, "f32[2,3]");
  expect_error(em_exec_run(e, NULL, 0, &out), EM_ERR_INVALID_ARGUMENT, "'x'");
  f = (em_feed){b, bt};
  expect_error(em_exec_run(e, &f, 1, &out), EM_ERR_INVALID_ARGUMENT, "constant");
  em_tensor_release(bt);
  em_tensor_release(ft);
  em_exec_free(e);
  em_graph_free(g);
}

/* A chain of single-input add_n (identity arithmetic) runs in place: each
 * step writes into the buffer of the value that dies there, so the peak is
 * one buffer while the total is one per step; a value that is also an
 * output is never overwritten. */
static void test_liveness_and_in_place(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s[1] = {1000};
  em_var x = input(g, "x", 1, s);
  em_var v = apply(g, "identity", &x, 1); /* x is fed: identity copies it */
  em_var mid = -1;
  for (int i = 0; i < 10; i++) {
    v = apply(g, "add_n", (em_var[]){v, v}, 2); /* doubles; reads v twice: not in place */
    v = apply(g, "identity", &v, 1);            /* in place */
    if (i == 4) {
      mid = v;
      v = apply(g, "identity", &v, 1); /* reads an output: must copy */
    }
  }
  em_var outs[2] = {v, mid};
  em_exec *e;
  assert_int_equal(em_exec_create(g, outs, 2, em_cpu(), &e), EM_OK);
  double xv[1000];
  for (int i = 0; i < 1000; i++) xv[i] = i * 0.5;
  em_tensor *xt = ot_tensor(EM_F64, 1, s, xv), *res[2];
  em_feed f = {x, xt};
  assert_int_equal(em_exec_run(e, &f, 1, res), EM_OK);
  double *last = ot_values(res[0], NULL), *m = ot_values(res[1], NULL), want[1000], wmid[1000];
  for (int i = 0; i < 1000; i++) {
    want[i] = xv[i] * 1024;
    wmid[i] = xv[i] * 32;
  }
  ot_expect_close(last, want, 1000, 0, 0, "chain result");
  ot_expect_close(m, wmid, 1000, 0, 0, "an output kept intact");
  em_exec_stats st;
  assert_int_equal(em_exec_stats_get(e, &st), EM_OK);
  assert_int_equal(st.steps, 22);
  /* The 10 identities after an add_n run in place; the one reading the output `mid` does not. */
  assert_int_equal(st.inplace_steps, 10);
  assert_true(st.total_bytes == 22 * 8000ull);
  assert_true(st.peak_bytes <= 3 * 8000ull);
  free(last), free(m);
  em_tensor_release(res[0]);
  em_tensor_release(res[1]);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

static void test_run_into_accumulates(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  double wv[2] = {2, -3}, xv[2] = {1, 1};
  em_var x = input(g, "x", 1, s2), w = constant(g, 1, s2, wv), grad;
  em_var loss = apply(g, "_weighted_sum", (em_var[]){x, w}, 2);
  assert_int_equal(em_gradients(g, loss, &x, 1, &grad), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &grad, 1, em_cpu(), &e), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 1, s2, xv), *acc = ot_tensor(EM_F64, 1, s2, NULL);
  em_feed f = {x, xt};
  assert_int_equal(em_exec_run_into(e, &f, 1, &acc, EM_RUN_STORE), EM_OK);
  assert_int_equal(em_exec_run_into(e, &f, 1, &acc, EM_RUN_ACCUMULATE), EM_OK);
  assert_int_equal(em_exec_run_into(e, &f, 1, &acc, EM_RUN_ACCUMULATE), EM_OK);
  double *got = ot_values(acc, NULL), want[2] = {6, -9};
  ot_expect_close(got, want, 2, 0, 0, "three accumulated gradients");
  free(got);
  em_tensor *wrong = ot_tensor(EM_F32, 1, s2, NULL);
  expect_error(em_exec_run_into(e, &f, 1, &wrong, EM_RUN_ACCUMULATE), EM_ERR_INVALID_ARGUMENT, "f32[2]");
  em_tensor_release(wrong);
  em_tensor_release(acc);
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

/* -------------------------------------------------------------- editing --- */

static void test_placeholder_replace_and_cycles(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2}, s3[1] = {3};
  double one[2] = {1, 1}, two[2] = {2, 2};
  em_var ph, x = input(g, "x", 1, s2), y;
  assert_int_equal(em_placeholder(g, "later", EM_F64, 1, s2, &ph), EM_OK);
  y = apply(g, "add_n", (em_var[]){x, ph}, 2);
  em_exec *e;
  expect_error(em_exec_create(g, &y, 1, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT, "later");
  /* A replacement of another shape is refused and nothing changes. */
  em_var wrong = constant(g, 1, s3, (double[]){1, 2, 3});
  expect_error(em_graph_replace(g, ph, wrong), EM_ERR_INVALID_ARGUMENT, "f64[3]");
  expect_error(em_exec_create(g, &y, 1, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT, "later");
  /* Bind it; then replacing x by a constant changes what y computes. */
  em_var c2 = constant(g, 1, s2, two);
  assert_int_equal(em_graph_replace(g, ph, c2), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 1, s2, one);
  double *out[1];
  run(g, &y, 1, x, xt, out);
  double three[2] = {3, 3};
  ot_expect_close(out[0], three, 2, 0, 0, "after binding");
  free(out[0]);
  /* An executor planned before an edit refuses to run after it. */
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  em_var c1 = constant(g, 1, s2, one);
  assert_int_equal(em_graph_replace(g, x, c1), EM_OK);
  em_tensor *r;
  expect_error(em_exec_run(e, NULL, 0, &r), EM_ERR_INVALID_ARGUMENT, "edited");
  em_exec_free(e);
  /* A cycle: z = identity(y); replacing the constant c2 (an input of y) by z
   * makes y depend on itself. */
  em_var z = apply(g, "identity", &y, 1);
  assert_int_equal(em_graph_replace(g, c2, z), EM_OK);
  expect_error(em_exec_create(g, &z, 1, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT, "cycle");
  assert_non_null(strstr(em_last_error(), "identity"));
  assert_non_null(strstr(em_last_error(), "add_n"));
  em_tensor_release(xt);
  em_graph_free(g);
}

static void test_clone_share_and_copy(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t s2[1] = {2};
  em_var p;
  assert_int_equal(em_parameter(g, "w", EM_F64, 1, s2, &(em_init){.kind = EM_INIT_CONSTANT, .value = 1}, &p), EM_OK);
  em_var y = apply(g, "identity", &p, 1);
  em_graph *shared, *copied;
  assert_int_equal(em_graph_clone(g, EM_CLONE_SHARE, &shared), EM_OK);
  assert_int_equal(em_graph_clone(g, EM_CLONE_COPY, &copied), EM_OK);
  double nine[2] = {9, 9}, one[2] = {1, 1};
  em_tensor *t = ot_tensor(EM_F64, 1, s2, nine);
  assert_int_equal(em_parameter_set(g, p, t), EM_OK);
  em_tensor_release(t);
  double *out[1];
  run(shared, &y, 1, -1, NULL, out);
  ot_expect_close(out[0], nine, 2, 0, 0, "shared clone sees the update");
  free(out[0]);
  run(copied, &y, 1, -1, NULL, out);
  ot_expect_close(out[0], one, 2, 0, 0, "copied clone keeps its value");
  free(out[0]);
  em_var found;
  assert_int_equal(em_graph_lookup(copied, "w", &found), EM_OK);
  assert_int_equal(found, p);
  em_graph_free(g); /* the clones keep their own references */
  run(shared, &y, 1, -1, NULL, out);
  ot_expect_close(out[0], nine, 2, 0, 0, "shared clone outlives the original");
  free(out[0]);
  em_graph_free(shared);
  em_graph_free(copied);
}

/* ------------------------------------------------------------ save/load --- */

static void test_save_load_roundtrip_and_damage(void **state) {
  (void)state;
  em_graph *g = new_graph();
  int64_t dyn[2] = {-1, 3}, s3[1] = {3};
  em_var x = input(g, "x", 2, dyn), b;
  assert_int_equal(em_parameter(g, "bias", EM_F64, 1, s3, &(em_init){.kind = EM_INIT_NORMAL, .scale = 1, .seed = 5}, &b),
                   EM_OK);
  em_var bb = apply(g, "broadcast_like", (em_var[]){b, x}, 2);
  em_var y = apply(g, "add_n", (em_var[]){x, bb}, 2);
  em_attr dt = {.name = "dtype", .type = EM_ATTR_INT, .i = EM_F32};
  em_var z;
  assert_int_equal(em_apply(g, "zeros_like", &y, 1, &dt, 1, &z, 1), EM_OK);
  em_var_set_name(g, y, "sum");
  char path[512];
  ot_tmp_path(path, sizeof path, "graph.emb");
  assert_int_equal(em_graph_save(g, path), EM_OK);
  em_graph *h;
  assert_int_equal(em_graph_load(path, &h), EM_OK);
  em_var ly, lz, lx;
  assert_int_equal(em_graph_lookup(h, "sum", &ly), EM_OK);
  assert_int_equal(em_graph_lookup(h, "x", &lx), EM_OK);
  assert_int_equal(ly, y);
  lz = z;
  em_dtype zdt;
  assert_int_equal(em_var_info(h, lz, &zdt, NULL, NULL), EM_OK);
  assert_int_equal(zdt, EM_F32); /* the attribute survived */
  em_tensor *xt = ot_rand(EM_F64, 2, (int64_t[]){4, 3}, 1, -1, 1);
  double *a[1], *c[1];
  run(g, &y, 1, x, xt, a);
  run(h, &ly, 1, lx, xt, c);
  assert_memory_equal(a[0], c[0], sizeof(double) * 12); /* same bits */
  free(a[0]), free(c[0]);
  em_graph_free(h);

  size_t n;
  unsigned char *bytes = ot_read_file(path, &n);
  char bad[512];
  ot_tmp_path(bad, sizeof bad, "bad.emb");
  /* A flipped byte: the checksum names the damage. */
  bytes[n / 2] ^= 0x40;
  ot_write_file(bad, bytes, n);
  expect_error(em_graph_load(bad, &h), EM_ERR_CORRUPT, "checksum");
  assert_non_null(strstr(em_last_error(), bad));
  bytes[n / 2] ^= 0x40;
  /* Truncated (resealed so the parser, not the checksum, finds it). */
  unsigned char *cut = malloc(n);
  memcpy(cut, bytes, n);
  memmove(cut + n / 2, cut + n - 8, 8);
  ot_reseal(cut, n / 2 + 8);
  ot_write_file(bad, cut, n / 2 + 8);
  expect_error(em_graph_load(bad, &h), EM_ERR_CORRUPT, "offset");
  free(cut);
  /* An op this build does not know: rename add_n to add_x. */
  for (size_t i = 0; i + 5 <= n; i++)
    if (!memcmp(bytes + i, "add_n", 5)) bytes[i + 4] = 'x';
  ot_reseal(bytes, n);
  ot_write_file(bad, bytes, n);
  expect_error(em_graph_load(bad, &h), EM_ERR_CORRUPT, "add_x");
  /* Not an Ember file at all. */
  ot_write_file(bad, (const unsigned char *)"hello, world, this is not a graph", 33);
  expect_error(em_graph_load(bad, &h), EM_ERR_CORRUPT, "magic");
  char missing[600];
  snprintf(missing, sizeof missing, "%s.missing", path);
  expect_error(em_graph_load(missing, &h), EM_ERR_IO, "missing");
  free(bytes);
  unlink(bad);
  unlink(path);
  em_tensor_release(xt);
  em_graph_free(g);
}

/* ------------------------------------------------------------- devices --- */

/* On a CUDA device an op without a GPU implementation runs on host copies;
 * the fake driver keeps device memory in host memory. */
static void test_exec_on_fake_gpu(void **state) {
  (void)state;
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake) skip();
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0=NVIDIA H100", 1);
  em_shutdown();
  em_graph *g = new_graph();
  int64_t s3[1] = {3};
  double wv[3] = {1, 2, 3}, xv[3] = {4, 5, 6};
  em_var x = input(g, "x", 1, s3), w = constant(g, 1, s3, wv);
  em_var loss = apply(g, "_weighted_sum", (em_var[]){x, w}, 2), grad;
  assert_int_equal(em_gradients(g, loss, &x, 1, &grad), EM_OK);
  em_exec *e;
  em_var outs[2] = {loss, grad};
  assert_int_equal(em_exec_create(g, outs, 2, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_tensor(EM_F64, 1, s3, xv), *res[2];
  em_feed f = {x, xt};
  assert_int_equal(em_exec_run(e, &f, 1, res), EM_OK);
  assert_int_equal(em_tensor_device(res[0]).kind, EM_DEVICE_CUDA);
  double *l = ot_values(res[0], NULL), *gr = ot_values(res[1], NULL), want = 32;
  ot_expect_close(l, &want, 1, 0, 0, "loss on the device");
  ot_expect_close(gr, wv, 3, 0, 0, "gradient on the device");
  free(l), free(gr);
  em_tensor_release(res[0]);
  em_tensor_release(res[1]);
  em_tensor_release(xt);
  em_exec_free(e);
  /* A device that does not exist is refused at planning. */
  expect_error(em_exec_create(g, outs, 2, em_cuda(5), &e), EM_ERR_NOT_FOUND, "cuda:5");
  em_graph_free(g);
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
}

/* The default thread count: OMP_NUM_THREADS when it names a count from 1 to 4096 (other
 * values are ignored, as libgomp does), else the CPUs in the affinity mask (counted here
 * with sched_getaffinity; not sysconf's online count). */
static void test_default_threads(void **state) {
  (void)state;
  const char *was = getenv("OMP_NUM_THREADS");
  char *saved = was ? strdup(was) : NULL;
  cpu_set_t set;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  int allowed = CPU_COUNT(&set) < 256 ? CPU_COUNT(&set) : 256;
  assert_int_equal(em_set_num_threads(0), EM_OK);

  static const struct { const char *value; int want; } cases[] = {
      {"3", 3}, {"5,2", 5}, {" 4 ", 4}, {"4096", 4096}, {"4097", -1}, {"99999999999999999999", -1},
      {"0", -1}, {"-2", -1}, {"abc", -1}, {"4x", -1}, {"", -1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(setenv("OMP_NUM_THREADS", cases[i].value, 1), 0);
    int got = em_get_num_threads(), want = cases[i].want > 0 ? cases[i].want : allowed;
    if (got != want) fail_msg("OMP_NUM_THREADS=\"%s\": %d threads, expected %d", cases[i].value, got, want);
  }
  unsetenv("OMP_NUM_THREADS");
  assert_int_equal(em_get_num_threads(), allowed);
  /* an explicit count wins over the variable; 0 goes back to it */
  assert_int_equal(setenv("OMP_NUM_THREADS", "3", 1), 0);
  assert_int_equal(em_set_num_threads(2), EM_OK);
  assert_int_equal(em_get_num_threads(), 2);
  assert_int_equal(em_set_num_threads(0), EM_OK);
  assert_int_equal(em_get_num_threads(), 3);

  if (saved) setenv("OMP_NUM_THREADS", saved, 1);
  else unsetenv("OMP_NUM_THREADS");
  free(saved);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_leaves_names_and_lookup),
    cmocka_unit_test(test_apply_errors),
    cmocka_unit_test(test_initialisers),
    cmocka_unit_test(test_parameters_and_states),
    cmocka_unit_test(test_gradients_broadcast_and_fanout),
    cmocka_unit_test(test_gradients_stop_and_unreached),
    cmocka_unit_test(test_gradient_errors),
    cmocka_unit_test(test_feeds_and_dynamic_axis),
    cmocka_unit_test(test_liveness_and_in_place),
    cmocka_unit_test(test_run_into_accumulates),
    cmocka_unit_test(test_placeholder_replace_and_cycles),
    cmocka_unit_test(test_clone_share_and_copy),
    cmocka_unit_test(test_save_load_roundtrip_and_damage),
    cmocka_unit_test(test_exec_on_fake_gpu),
    cmocka_unit_test(test_default_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
