/* Normalisation, dropout and LRN (ops/norm.c): forward values against naive
 * float64 loops written here, running statistics against the momentum rule,
 * dropout's mask properties, finite-difference gradients, and errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

static const em_dtype dtypes[2] = {EM_F32, EM_F64};

typedef struct shape {
  int nd;
  int64_t d[EM_MAX_DIMS];
} shape;

static int64_t numel(const shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->nd; i++) n *= s->d[i];
  return n;
}

static int64_t prod(const shape *s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= s->d[i];
  return n;
}

/* Tolerances by dtype: the references run in double on the same (rounded) inputs. */
static double atol_of(em_dtype t) { return t == EM_F32 ? 2e-5 : 1e-12; }
static double rtol_of(em_dtype t) { return t == EM_F32 ? 2e-5 : 1e-10; }

/* Runs op and returns output k's values (free them); every output is released. */
static double *run_values(const char *op, em_tensor **in, int n_in, const em_attr *at, int n_at, int n_out, int k,
                          int training) {
  em_tensor *out[3] = {0};
  em_status s = training ? ot_run_training(op, in, n_in, at, n_at, out, n_out)
                         : ot_run(op, in, n_in, at, n_at, out, n_out);
  if (s) fail_msg("%s failed: %s", op, em_last_error());
  double *v = ot_values(out[k], NULL);
  for (int i = 0; i < n_out; i++) em_tensor_release(out[i]);
  return v;
}

static void release_all(em_tensor **t, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(t[i]);
}

/* ------------------------------------------------------- references --- */

/* Per-channel mean and biased variance of x [n, c, inner] over n and inner. */
static void ref_channel_moments(const double *x, int64_t n, int64_t c, int64_t inner, double *mean, double *var) {
  for (int64_t ch = 0; ch < c; ch++) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < inner; k++) s += x[(i * c + ch) * inner + k];
    mean[ch] = s / (double)(n * inner);
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < inner; k++) {
        double d = x[(i * c + ch) * inner + k] - mean[ch];
        q += d * d;
      }
    var[ch] = q / (double)(n * inner);
  }
}

/* y = scale * (x - mean) / sqrt(var + eps) + bias per channel. */
static void ref_channel_affine(const double *x, int64_t n, int64_t c, int64_t inner, const double *sc, const double *bi,
                               const double *mean, const double *var, double eps, double *y) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t k = 0; k < inner; k++) {
        int64_t j = (i * c + ch) * inner + k;
        y[j] = sc[ch] * (x[j] - mean[ch]) / sqrt(var[ch] + eps) + bi[ch];
      }
}

/* Normalises each of `rows` rows of length m; scale/bias indexed by (row % period_c) when per_row_param, else by
 * position in the row (layer norm). */
static void ref_rows(const double *x, int64_t rows, int64_t m, const double *sc, const double *bi, double eps,
                     int64_t channels, int per_row_param, double *y) {
  for (int64_t r = 0; r < rows; r++) {
    double s = 0, q = 0;
    for (int64_t j = 0; j < m; j++) s += x[r * m + j];
    double mu = s / (double)m;
    for (int64_t j = 0; j < m; j++) q += (x[r * m + j] - mu) * (x[r * m + j] - mu);
    double sd = sqrt(q / (double)m + eps);
    for (int64_t j = 0; j < m; j++) {
      int64_t p = per_row_param ? r % channels : j;
      y[r * m + j] = (x[r * m + j] - mu) / sd * sc[p] + (bi ? bi[p] : 0);
    }
  }
}

/* ONNX LRN over axis 1 of [n, c, inner]. */
static void ref_lrn(const double *x, int64_t n, int64_t c, int64_t inner, int64_t size, double alpha, double beta,
                    double bias, double *y) {
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  for (int64_t i = 0; i < n; i++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t k = 0; k < inner; k++) {
        double s = 0;
        for (int64_t cc = ch - lo; cc <= ch + hi; cc++)
          if (cc >= 0 && cc < c) s += x[(i * c + cc) * inner + k] * x[(i * c + cc) * inner + k];
        int64_t j = (i * c + ch) * inner + k;
        y[j] = x[j] / pow(bias + alpha / (double)size * s, beta);
      }
}

/* ---------------------------------------------------- batch norm --- */

static const shape bn_shapes[] = {
  {2, {2, 3}}, {2, {5, 1}}, {3, {3, 4, 5}}, {4, {2, 3, 4, 5}}, {4, {1, 1, 2, 1}}, {4, {8, 16, 32, 32}},
};
#define N_BN_SHAPES (sizeof bn_shapes / sizeof bn_shapes[0])

/* Inputs x, scale, bias, running_mean, running_var for shape s. */
static void bn_inputs(em_dtype dt, const shape *s, uint64_t seed, em_tensor **in) {
  int64_t c[1] = {s->d[1]};
  in[0] = ot_rand(dt, s->nd, s->d, seed, -2, 3);
  in[1] = ot_rand(dt, 1, c, seed + 1, 0.5, 1.5);
  in[2] = ot_rand(dt, 1, c, seed + 2, -1, 1);
  in[3] = ot_rand(dt, 1, c, seed + 3, -0.5, 0.5);
  in[4] = ot_rand(dt, 1, c, seed + 4, 0.5, 2);
}

static void check_bn_forward(int training) {
  /* epsilon = INT 1 on the f64 pass: an INT is accepted where a float is expected. */
  for (int t = 0; t < 2; t++) {
    const double eps = t ? 1.0 : 1e-3;
    em_attr at[1] = {t ? (em_attr){.name = "epsilon", .type = EM_ATTR_INT, .i = 1}
                       : (em_attr){.name = "epsilon", .type = EM_ATTR_FLOAT, .f = eps}};
    for (size_t k = 0; k < N_BN_SHAPES; k++) {
      const shape *s = &bn_shapes[k];
      em_tensor *in[5];
      bn_inputs(dtypes[t], s, 100 + k, in);
      double *v[5];
      for (int i = 0; i < 5; i++) v[i] = ot_values(in[i], NULL);
      int64_t n = s->d[0], c = s->d[1], inner = prod(s, 2, s->nd), total = numel(s);
      double *mean = malloc(sizeof(double) * (size_t)c), *var = malloc(sizeof(double) * (size_t)c);
      double *want = malloc(sizeof(double) * (size_t)total);
      if (training) ref_channel_moments(v[0], n, c, inner, mean, var);
      else {
        memcpy(mean, v[3], sizeof(double) * (size_t)c);
        memcpy(var, v[4], sizeof(double) * (size_t)c);
      }
      ref_channel_affine(v[0], n, c, inner, v[1], v[2], mean, var, eps, want);
      double *got = run_values("batch_normalization", in, 5, at, 1, 1, 0, training);
      char what[96];
      snprintf(what, sizeof what, "batch_normalization %s %s shape %zu", training ? "training" : "inference",
               em_dtype_name(dtypes[t]), k);
      ot_expect_close(got, want, total, atol_of(dtypes[t]), rtol_of(dtypes[t]), what);
      free(got);
      free(want);
      free(mean);
      free(var);
      for (int i = 0; i < 5; i++) free(v[i]);
      release_all(in, 5);
    }
  }
}

static void test_bn_inference_forward(void **state) {
  (void)state;
  check_bn_forward(0);
}

static void test_bn_training_forward(void **state) {
  (void)state;
  check_bn_forward(1);
}

/* A graph with states for the running statistics: after each training run
 * they follow running * momentum + batch * (1 - momentum), the variance
 * unbiased; inference then uses them. */
static void test_bn_running_stats(void **state) {
  (void)state;
  const double eps = 1e-3, mom = 0.8;
  const int64_t C = 3, xdecl[4] = {-1, 3, 2, 2};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = dtypes[t];
    int64_t cshape[1] = {C};
    em_tensor *sc = ot_rand(dt, 1, cshape, 1, 0.5, 1.5), *bi = ot_rand(dt, 1, cshape, 2, -1, 1);
    em_tensor *rm0 = ot_rand(dt, 1, cshape, 3, -0.5, 0.5), *rv0 = ot_rand(dt, 1, cshape, 4, 0.5, 2);
    em_graph *g;
    em_var v[5], y;
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_init init[4] = {{.kind = EM_INIT_FROM_DATA, .data = sc}, {.kind = EM_INIT_FROM_DATA, .data = bi},
                       {.kind = EM_INIT_FROM_DATA, .data = rm0}, {.kind = EM_INIT_FROM_DATA, .data = rv0}};
    assert_int_equal(em_input(g, "x", dt, 4, xdecl, &v[0]), EM_OK);
    assert_int_equal(em_parameter(g, "scale", dt, 1, cshape, &init[0], &v[1]), EM_OK);
    assert_int_equal(em_parameter(g, "bias", dt, 1, cshape, &init[1], &v[2]), EM_OK);
    assert_int_equal(em_state(g, "rm", dt, 1, cshape, &init[2], &v[3]), EM_OK);
    assert_int_equal(em_state(g, "rv", dt, 1, cshape, &init[3], &v[4]), EM_OK);
    em_attr at[2] = {{.name = "epsilon", .type = EM_ATTR_FLOAT, .f = eps},
                     {.name = "momentum", .type = EM_ATTR_FLOAT, .f = mom}};
    if (em_apply(g, "batch_normalization", v, 5, at, 2, &y, 1)) fail_msg("apply: %s", em_last_error());
    em_exec *e;
    assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
    assert_int_equal(em_exec_set_training(e, 1), EM_OK);

    double *scv = ot_values(sc, NULL), *biv = ot_values(bi, NULL);
    double *rm = ot_values(rm0, NULL), *rv = ot_values(rv0, NULL);
    const int64_t batches[2] = {4, 2};
    em_tensor *xs[2];
    for (int run = 0; run < 2; run++) {
      int64_t xshape[4] = {batches[run], 3, 2, 2}, n = batches[run], inner = 4, total = n * C * inner;
      xs[run] = ot_rand(dt, 4, xshape, 50 + run, -3, 4);
      double *xv = ot_values(xs[run], NULL), mean[3], var[3], *want = malloc(sizeof(double) * (size_t)total);
      ref_channel_moments(xv, n, C, inner, mean, var);
      ref_channel_affine(xv, n, C, inner, scv, biv, mean, var, eps, want);
      em_feed f = {v[0], xs[run]};
      em_tensor *out;
      if (em_exec_run(e, &f, 1, &out)) fail_msg("run: %s", em_last_error());
      double *got = ot_values(out, NULL);
      ot_expect_close(got, want, total, atol_of(dt), rtol_of(dt), "batch norm training output");
      double m = (double)(n * inner);
      for (int64_t ch = 0; ch < C; ch++) {
        rm[ch] = rm[ch] * mom + mean[ch] * (1 - mom);
        rv[ch] = rv[ch] * mom + var[ch] * m / (m - 1) * (1 - mom);
      }
      em_tensor *srm, *srv;
      assert_int_equal(em_parameter_value(g, v[3], &srm), EM_OK);
      assert_int_equal(em_parameter_value(g, v[4], &srv), EM_OK);
      double *grm = ot_values(srm, NULL), *grv = ot_values(srv, NULL);
      ot_expect_close(grm, rm, C, atol_of(dt), rtol_of(dt), "running_mean after a training run");
      ot_expect_close(grv, rv, C, atol_of(dt), rtol_of(dt), "running_var after a training run (unbiased)");
      free(grm);
      free(grv);
      em_tensor_release(srm);
      em_tensor_release(srv);
      free(got);
      free(want);
      free(xv);
      em_tensor_release(out);
    }
    /* Inference now normalises by the updated running statistics (and leaves them alone). */
    assert_int_equal(em_exec_set_training(e, 0), EM_OK);
    em_tensor *srm;
    assert_int_equal(em_parameter_value(g, v[3], &srm), EM_OK);
    double *before = ot_values(srm, NULL);
    em_feed f = {v[0], xs[0]};
    em_tensor *out;
    if (em_exec_run(e, &f, 1, &out)) fail_msg("run: %s", em_last_error());
    double *xv = ot_values(xs[0], NULL), want[48];
    ref_channel_affine(xv, 4, C, 4, scv, biv, rm, rv, eps, want);
    double *got = ot_values(out, NULL);
    ot_expect_close(got, want, 48, atol_of(dt), rtol_of(dt), "batch norm inference with updated statistics");
    double *grm = ot_values(srm, NULL);
    ot_expect_close(grm, before, C, 0, 0, "running_mean unchanged by inference");
    free(grm);
    free(before);
    em_tensor_release(srm);
    free(got);
    free(xv);
    em_tensor_release(out);
    em_exec_free(e);
    em_graph_free(g);
    free(scv);
    free(biv);
    free(rm);
    free(rv);
    release_all(xs, 2);
    em_tensor_release(sc);
    em_tensor_release(bi);
    em_tensor_release(rm0);
    em_tensor_release(rv0);
  }
}

/* Training with one value per channel has no unbiased variance: refused at run time. */
static void test_bn_training_one_value_per_channel(void **state) {
  (void)state;
  shape s = {2, {1, 3}};
  em_tensor *in[5], *out = NULL;
  bn_inputs(EM_F64, &s, 7, in);
  assert_int_equal(ot_run_training("batch_normalization", in, 5, NULL, 0, &out, 1), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "one value per channel"));
  em_tensor_release(out);
  /* Inference is fine with one sample. */
  double *got = run_values("batch_normalization", in, 5, NULL, 0, 1, 0, 0);
  free(got);
  release_all(in, 5);
}

static void test_bn_gradcheck(void **state) {
  (void)state;
  static const shape shapes[] = {{2, {3, 2}}, {3, {2, 3, 4}}, {4, {2, 2, 3, 2}}};
  em_attr at[2] = {{.name = "epsilon", .type = EM_ATTR_FLOAT, .f = 1e-2},
                   {.name = "momentum", .type = EM_ATTR_FLOAT, .f = 0.7}};
  for (size_t k = 0; k < 3; k++) {
    em_tensor *in[5];
    bn_inputs(EM_F64, &shapes[k], 300 + k, in);
    /* The running statistics take no gradient (no_grad), hence skipped. */
    ot_gradcheck("batch_normalization", in, 5, at, 2, 1, 0x18, 1e-6);
    ot_gradcheck_training("batch_normalization", in, 5, at, 2, 1, 0x18, 1e-6);
    release_all(in, 5);
  }
}

/* ---------------------------------------------------- layer norm --- */

typedef struct ln_case {
  shape s;
  int64_t axis;
} ln_case;

static const ln_case ln_cases[] = {
  {{2, {4, 5}}, -1},  {{3, {2, 3, 4}}, -2}, {{3, {2, 3, 4}}, 1}, {{1, {7}}, 0},
  {{2, {6, 1}}, -1},  {{3, {3, 1, 5}}, 0},  {{2, {64, 1024}}, -1},
};

static void test_ln_forward(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++)
    for (size_t k = 0; k < sizeof ln_cases / sizeof ln_cases[0]; k++)
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        const ln_case *lc = &ln_cases[k];
        int axis = (int)(lc->axis < 0 ? lc->axis + lc->s.nd : lc->axis);
        em_attr at[2] = {{.name = "axis", .type = EM_ATTR_INT, .i = lc->axis},
                         {.name = "epsilon", .type = EM_ATTR_FLOAT, .f = 1e-4}};
        em_tensor *in[3];
        in[0] = ot_rand(dtypes[t], lc->s.nd, lc->s.d, 10 + k, -2, 5);
        in[1] = ot_rand(dtypes[t], lc->s.nd - axis, lc->s.d + axis, 20 + k, 0.5, 1.5);
        in[2] = ot_rand(dtypes[t], lc->s.nd - axis, lc->s.d + axis, 30 + k, -1, 1);
        int n_in = with_bias ? 3 : 2;
        double *v[3];
        for (int i = 0; i < n_in; i++) v[i] = ot_values(in[i], NULL);
        int64_t rows = prod(&lc->s, 0, axis), m = prod(&lc->s, axis, lc->s.nd);
        double *want = malloc(sizeof(double) * (size_t)(rows * m));
        ref_rows(v[0], rows, m, v[1], with_bias ? v[2] : NULL, 1e-4, 1, 0, want);
        double *got = run_values("layer_normalization", in, n_in, at, 2, 1, 0, 0);
        char what[96];
        snprintf(what, sizeof what, "layer_normalization %s case %zu bias %d", em_dtype_name(dtypes[t]), k, with_bias);
        ot_expect_close(got, want, rows * m, atol_of(dtypes[t]), rtol_of(dtypes[t]), what);
        free(got);
        free(want);
        for (int i = 0; i < n_in; i++) free(v[i]);
        release_all(in, 3);
      }
}

/* Default attributes: axis -1, epsilon 1e-5. */
static void test_ln_defaults(void **state) {
  (void)state;
  int64_t xs[2] = {3, 4}, ps[1] = {4};
  em_tensor *in[2] = {ot_rand(EM_F64, 2, xs, 1, -1, 1), ot_rand(EM_F64, 1, ps, 2, 0.5, 1.5)};
  double *x = ot_values(in[0], NULL), *sc = ot_values(in[1], NULL), want[12];
  ref_rows(x, 3, 4, sc, NULL, 1e-5, 1, 0, want);
  double *got = run_values("layer_normalization", in, 2, NULL, 0, 1, 0, 0);
  ot_expect_close(got, want, 12, 1e-12, 1e-10, "layer_normalization defaults");
  free(got);
  free(x);
  free(sc);
  release_all(in, 2);
}

static void test_ln_gradcheck(void **state) {
  (void)state;
  static const ln_case cases[] = {{{2, {3, 5}}, -1}, {{3, {2, 3, 4}}, -2}, {{2, {2, 6}}, 0}};
  for (size_t k = 0; k < 3; k++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      const ln_case *lc = &cases[k];
      int axis = (int)(lc->axis < 0 ? lc->axis + lc->s.nd : lc->axis);
      em_attr at[2] = {{.name = "axis", .type = EM_ATTR_INT, .i = lc->axis},
                       {.name = "epsilon", .type = EM_ATTR_FLOAT, .f = 1e-3}};
      em_tensor *in[3] = {ot_rand(EM_F64, lc->s.nd, lc->s.d, 40 + k, -2, 2),
                          ot_rand(EM_F64, lc->s.nd - axis, lc->s.d + axis, 50 + k, 0.5, 1.5),
                          ot_rand(EM_F64, lc->s.nd - axis, lc->s.d + axis, 60 + k, -1, 1)};
      ot_gradcheck("layer_normalization", in, with_bias ? 3 : 2, at, 2, 1, 0, 1e-6);
      release_all(in, 3);
    }
}

/* ------------------------------------------------- instance norm --- */

static void in_inputs(em_dtype dt, const shape *s, uint64_t seed, em_tensor **in) {
  int64_t c[1] = {s->d[1]};
  in[0] = ot_rand(dt, s->nd, s->d, seed, -2, 3);
  in[1] = ot_rand(dt, 1, c, seed + 1, 0.5, 1.5);
  in[2] = ot_rand(dt, 1, c, seed + 2, -1, 1);
}

static void test_in_forward(void **state) {
  (void)state;
  static const shape shapes[] = {
    {3, {2, 3, 4}}, {4, {1, 2, 3, 3}}, {3, {2, 1, 5}}, {3, {3, 2, 1}}, {4, {4, 8, 32, 40}},
  };
  em_attr at[1] = {{.name = "epsilon", .type = EM_ATTR_FLOAT, .f = 1e-3}};
  for (int t = 0; t < 2; t++)
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
      const shape *s = &shapes[k];
      em_tensor *in[3];
      in_inputs(dtypes[t], s, 70 + k, in);
      double *v[3];
      for (int i = 0; i < 3; i++) v[i] = ot_values(in[i], NULL);
      int64_t rows = s->d[0] * s->d[1], m = prod(s, 2, s->nd);
      double *want = malloc(sizeof(double) * (size_t)(rows * m));
      ref_rows(v[0], rows, m, v[1], v[2], 1e-3, s->d[1], 1, want);
      double *got = run_values("instance_normalization", in, 3, at, 1, 1, 0, 0);
      char what[96];
      snprintf(what, sizeof what, "instance_normalization %s shape %zu", em_dtype_name(dtypes[t]), k);
      ot_expect_close(got, want, rows * m, atol_of(dtypes[t]), rtol_of(dtypes[t]), what);
      free(got);
      free(want);
      for (int i = 0; i < 3; i++) free(v[i]);
      release_all(in, 3);
    }
}

static void test_in_gradcheck(void **state) {
  (void)state;
  static const shape shapes[] = {{3, {2, 3, 4}}, {4, {1, 2, 3, 3}}, {3, {3, 1, 2}}};
  em_attr at[1] = {{.name = "epsilon", .type = EM_ATTR_FLOAT, .f = 1e-3}};
  for (size_t k = 0; k < 3; k++) {
    em_tensor *in[3];
    in_inputs(EM_F64, &shapes[k], 80 + k, in);
    ot_gradcheck("instance_normalization", in, 3, at, 1, 1, 0, 1e-6);
    release_all(in, 3);
  }
}

/* ------------------------------------------------------------ LRN --- */

static void test_lrn_forward(void **state) {
  (void)state;
  static const shape shapes[] = {
    {4, {2, 5, 3, 3}}, {3, {1, 3, 4}}, {2, {2, 7}}, {4, {1, 1, 2, 2}}, {4, {4, 32, 20, 20}},
  };
  static const int64_t sizes[] = {1, 3, 5};
  for (int t = 0; t < 2; t++)
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
      for (size_t z = 0; z < 3; z++) {
        const shape *s = &shapes[k];
        /* Non-default constants so the window term matters; the defaults once. */
        int defaults = k == 0 && z == 1;
        double alpha = defaults ? 1e-4 : 0.4, beta = defaults ? 0.75 : 0.6, bias = defaults ? 1.0 : 1.5;
        em_attr at[4] = {{.name = "size", .type = EM_ATTR_INT, .i = sizes[z]},
                         {.name = "alpha", .type = EM_ATTR_FLOAT, .f = alpha},
                         {.name = "beta", .type = EM_ATTR_FLOAT, .f = beta},
                         {.name = "bias", .type = EM_ATTR_FLOAT, .f = bias}};
        em_tensor *in[1] = {ot_rand(dtypes[t], s->nd, s->d, 90 + k, -2, 2)};
        double *x = ot_values(in[0], NULL);
        int64_t total = numel(s);
        double *want = malloc(sizeof(double) * (size_t)total);
        ref_lrn(x, s->d[0], s->d[1], prod(s, 2, s->nd), sizes[z], alpha, beta, bias, want);
        double *got = run_values("local_response_normalization", in, 1, at, defaults ? 1 : 4, 1, 0, 0);
        char what[96];
        snprintf(what, sizeof what, "LRN %s shape %zu size %lld", em_dtype_name(dtypes[t]), k, (long long)sizes[z]);
        ot_expect_close(got, want, total, atol_of(dtypes[t]), rtol_of(dtypes[t]), what);
        free(got);
        free(want);
        free(x);
        em_tensor_release(in[0]);
      }
}

static void test_lrn_gradcheck(void **state) {
  (void)state;
  static const shape shapes[] = {{3, {2, 5, 3}}, {4, {1, 6, 2, 2}}, {3, {2, 3, 4}}};
  static const int64_t sizes[] = {3, 5};
  for (size_t k = 0; k < 3; k++)
    for (size_t z = 0; z < 2; z++) {
      em_attr at[4] = {{.name = "size", .type = EM_ATTR_INT, .i = sizes[z]},
                       {.name = "alpha", .type = EM_ATTR_FLOAT, .f = 0.5},
                       {.name = "beta", .type = EM_ATTR_FLOAT, .f = 0.75},
                       {.name = "bias", .type = EM_ATTR_FLOAT, .f = 1.5}};
      em_tensor *in[1] = {ot_rand(EM_F64, shapes[k].nd, shapes[k].d, 110 + k, -2, 2)};
      ot_gradcheck("local_response_normalization", in, 1, at, 4, 1, 0, 1e-6);
      em_tensor_release(in[0]);
    }
}

/* -------------------------------------------------------- dropout --- */

static void dropout_attrs(em_attr *at, double ratio, int64_t seed) {
  at[0] = (em_attr){.name = "ratio", .type = EM_ATTR_FLOAT, .f = ratio};
  at[1] = (em_attr){.name = "seed", .type = EM_ATTR_INT, .i = seed};
}

static void test_dropout_inference_identity(void **state) {
  (void)state;
  int64_t s[2] = {37, 11};
  em_attr at[2];
  dropout_attrs(at, 0.5, 3);
  for (int t = 0; t < 2; t++) {
    em_tensor *x = ot_rand(dtypes[t], 2, s, 5, -1, 1), *y;
    assert_int_equal(ot_run("dropout", &x, 1, at, 2, &y, 1), EM_OK);
    ot_expect_shape(y, dtypes[t], 2, s, "dropout inference");
    assert_memory_equal(em_tensor_data(y), em_tensor_data(x), (size_t)(37 * 11) * em_dtype_size(dtypes[t]));
    em_tensor_release(y);
    em_tensor_release(x);
  }
}

/* ratio 0 keeps everything, in training too. */
static void test_dropout_ratio_zero(void **state) {
  (void)state;
  int64_t s[1] = {1000};
  em_attr at[2];
  dropout_attrs(at, 0.0, 3);
  em_tensor *x = ot_rand(EM_F64, 1, s, 5, -1, 1), *y;
  assert_int_equal(ot_run_training("dropout", &x, 1, at, 2, &y, 1), EM_OK);
  assert_memory_equal(em_tensor_data(y), em_tensor_data(x), 1000 * sizeof(double));
  em_tensor_release(y);
  em_tensor_release(x);
}

/* Kept fraction within 6 standard deviations for 100000 elements; kept
 * values exactly x / (1 - ratio) (ratios whose scale is exact), dropped 0. */
static void test_dropout_training_statistics(void **state) {
  (void)state;
  const int64_t n = 100000;
  static const double ratios[] = {0.5, 0.75, 0.3, 0.9};
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 4; r++) {
      em_attr at[2];
      dropout_attrs(at, ratios[r], 1234);
      em_tensor *x = ot_rand(dtypes[t], 1, &n, 9, 1, 2), *y;
      assert_int_equal(ot_run_training("dropout", &x, 1, at, 2, &y, 1), EM_OK);
      double *xv = ot_values(x, NULL), *yv = ot_values(y, NULL);
      double p = 1 - ratios[r], scale = 1.0 / p;
      int exact = ratios[r] == 0.5 || ratios[r] == 0.75;
      int64_t kept = 0;
      for (int64_t i = 0; i < n; i++) {
        if (yv[i] == 0) continue;
        kept++;
        double want = xv[i] / p;
        if (dtypes[t] == EM_F32) want = (double)(float)((float)xv[i] * (float)scale);
        if (exact ? yv[i] != want : fabs(yv[i] - want) > 1e-15 * want)
          fail_msg("dropout %s ratio %g: element %lld is %.17g, expected %.17g", em_dtype_name(dtypes[t]), ratios[r],
                   (long long)i, yv[i], want);
        if (exact && yv[i] != xv[i] / p) fail_msg("dropout: kept value not exactly x / (1 - ratio)");
      }
      double sd = sqrt((double)n * p * (1 - p));
      if (fabs((double)kept - (double)n * p) > 6 * sd)
        fail_msg("dropout ratio %g kept %lld of %lld (expected %.0f +- %.0f)", ratios[r], (long long)kept,
                 (long long)n, (double)n * p, 6 * sd);
      /* Neighbours are independent: pairs (2i, 2i+1) both kept with probability p^2. */
      int64_t both = 0;
      for (int64_t i = 0; i + 1 < n; i += 2) both += yv[i] != 0 && yv[i + 1] != 0;
      double pairs = (double)(n / 2), sd2 = sqrt(pairs * p * p * (1 - p * p));
      if (fabs((double)both - pairs * p * p) > 6 * sd2)
        fail_msg("dropout ratio %g: %lld neighbour pairs both kept (expected %.0f +- %.0f)", ratios[r],
                 (long long)both, pairs * p * p, 6 * sd2);
      free(xv);
      free(yv);
      em_tensor_release(y);
      em_tensor_release(x);
    }
}

/* The keep mask (1 where y != 0) of a dropout output, x all nonzero. */
static unsigned char *mask_of(const em_tensor *y, int64_t n) {
  double *v = ot_values(y, NULL);
  unsigned char *m = malloc((size_t)n);
  for (int64_t i = 0; i < n; i++) m[i] = v[i] != 0;
  free(v);
  return m;
}

/* Runs a dropout graph `runs` times with one executor (steps 0, 1, ...). */
static void dropout_steps(em_dtype dt, int64_t n, const em_attr *at, int n_at, int runs, unsigned char **masks) {
  em_graph *g;
  em_var x, y;
  em_exec *e;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", dt, 1, &n, &x), EM_OK);
  if (em_apply(g, "dropout", &x, 1, at, n_at, &y, 1)) fail_msg("apply: %s", em_last_error());
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  assert_int_equal(em_exec_set_training(e, 1), EM_OK);
  em_tensor *xt = ot_rand(dt, 1, &n, 4, 1, 2);
  em_feed f = {x, xt};
  for (int r = 0; r < runs; r++) {
    em_tensor *out;
    if (em_exec_run(e, &f, 1, &out)) fail_msg("run: %s", em_last_error());
    masks[r] = mask_of(out, n);
    em_tensor_release(out);
  }
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

static int64_t agreements(const unsigned char *a, const unsigned char *b, int64_t n) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) k += a[i] == b[i];
  return k;
}

/* Same seed and step: same mask (also across dtypes); another step, seed or
 * node: an independent-looking mask (agreement near p^2 + (1-p)^2). */
static void test_dropout_mask_determinism(void **state) {
  (void)state;
  const int64_t n = 20000;
  const double ratio = 0.5, agree = ratio * ratio + (1 - ratio) * (1 - ratio), sd = sqrt(n * agree * (1 - agree));
  em_attr at[3];
  dropout_attrs(at, ratio, 42);
  unsigned char *a[2], *b[2], *c[1], *d[1], *f32[1];
  dropout_steps(EM_F64, n, at, 2, 2, a);
  dropout_steps(EM_F64, n, at, 2, 2, b);
  dropout_steps(EM_F32, n, at, 2, 1, f32);
  assert_memory_equal(a[0], b[0], (size_t)n);
  assert_memory_equal(a[1], b[1], (size_t)n);
  assert_memory_equal(a[0], f32[0], (size_t)n);
  if (fabs((double)agreements(a[0], a[1], n) - n * agree) > 6 * sd) fail_msg("dropout: step 1's mask is not fresh");
  dropout_attrs(at, ratio, 43);
  dropout_steps(EM_F64, n, at, 2, 1, c);
  if (fabs((double)agreements(a[0], c[0], n) - n * agree) > 6 * sd) fail_msg("dropout: another seed, same mask");
  dropout_attrs(at, ratio, 42);
  at[2] = (em_attr){.name = "node", .type = EM_ATTR_INT, .i = 12345};
  dropout_steps(EM_F64, n, at, 3, 1, d);
  if (fabs((double)agreements(a[0], d[0], n) - n * agree) > 6 * sd) fail_msg("dropout: another node, same mask");
  free(a[0]);
  free(a[1]);
  free(b[0]);
  free(b[1]);
  free(c[0]);
  free(d[0]);
  free(f32[0]);
}

/* The same bits with one thread and with four. */
static void test_dropout_threads(void **state) {
  (void)state;
  const int64_t n = 100000;
  em_attr at[2];
  dropout_attrs(at, 0.3, 77);
  for (int t = 0; t < 2; t++) {
    em_tensor *x = ot_rand(dtypes[t], 1, &n, 6, -1, 1), *y1, *y4;
    assert_int_equal(em_set_num_threads(1), EM_OK);
    assert_int_equal(ot_run_training("dropout", &x, 1, at, 2, &y1, 1), EM_OK);
    assert_int_equal(em_set_num_threads(4), EM_OK);
    assert_int_equal(ot_run_training("dropout", &x, 1, at, 2, &y4, 1), EM_OK);
    assert_int_equal(em_set_num_threads(0), EM_OK);
    assert_memory_equal(em_tensor_data(y1), em_tensor_data(y4), (size_t)n * em_dtype_size(dtypes[t]));
    em_tensor_release(y1);
    em_tensor_release(y4);
    em_tensor_release(x);
  }
}

/* The normalisations give the same bits with one thread and with four. */
static void test_norm_threads(void **state) {
  (void)state;
  shape s = {4, {4, 8, 32, 40}};
  em_tensor *in[5];
  bn_inputs(EM_F32, &s, 9, in);
  em_attr lrn_at[1] = {{.name = "size", .type = EM_ATTR_INT, .i = 5}};
  em_attr ln_at[1] = {{.name = "axis", .type = EM_ATTR_INT, .i = 2}};
  int64_t ln_p[2] = {32, 40};
  em_tensor *ln_in[3] = {in[0], ot_rand(EM_F32, 2, ln_p, 1, 0.5, 1.5), ot_rand(EM_F32, 2, ln_p, 2, -1, 1)};
  struct {
    const char *op;
    em_tensor **in;
    int n_in;
    const em_attr *at;
    int n_at;
    int training;
  } cases[] = {{"batch_normalization", in, 5, NULL, 0, 1},   {"instance_normalization", in, 3, NULL, 0, 0},
               {"local_response_normalization", in, 1, lrn_at, 1, 0}, {"layer_normalization", ln_in, 3, ln_at, 1, 0}};
  for (size_t k = 0; k < 4; k++) {
    em_tensor *y[2];
    for (int r = 0; r < 2; r++) {
      assert_int_equal(em_set_num_threads(r ? 4 : 1), EM_OK);
      em_status (*run)(const char *, em_tensor *const *, int, const em_attr *, int, em_tensor **, int) =
        cases[k].training ? ot_run_training : ot_run;
      em_status st = run(cases[k].op, cases[k].in, cases[k].n_in, cases[k].at, cases[k].n_at, &y[r], 1);
      if (st) fail_msg("%s: %s", cases[k].op, em_last_error());
    }
    assert_int_equal(em_set_num_threads(0), EM_OK);
    assert_memory_equal(em_tensor_data(y[0]), em_tensor_data(y[1]), (size_t)numel(&s) * sizeof(float));
    release_all(y, 2);
  }
  release_all(in, 5);
  em_tensor_release(ln_in[1]);
  em_tensor_release(ln_in[2]);
}

static void test_dropout_gradcheck(void **state) {
  (void)state;
  int64_t s1[1] = {50}, s2[2] = {4, 7};
  em_attr at[2];
  dropout_attrs(at, 0.4, 5);
  em_tensor *x = ot_rand(EM_F64, 1, s1, 1, -1, 1);
  /* The mask is fixed by seed, step and node, so central differences are valid. */
  ot_gradcheck_training("dropout", &x, 1, at, 2, 1, 0, 1e-6);
  ot_gradcheck("dropout", &x, 1, at, 2, 1, 0, 1e-6);
  em_tensor_release(x);
  dropout_attrs(at, 0.5, 9);
  x = ot_rand(EM_F64, 2, s2, 2, -1, 1);
  ot_gradcheck_training("dropout", &x, 1, at, 2, 1, 0, 1e-6);
  em_tensor_release(x);
}

/* --------------------------------------------------------- errors --- */

static void expect_fails(const char *op, int n_in, em_dtype dt, const int *nd, const int64_t *const *shapes,
                         const em_attr *at, int n_at, int n_out, const char *needle1, const char *needle2) {
  em_dtype dts[5] = {dt, dt, dt, dt, dt};
  ot_expect_apply_fails(op, n_in, dts, nd, shapes, at, n_at, n_out, needle1, needle2);
}

static void test_errors(void **state) {
  (void)state;
  const int64_t x234[3] = {2, 3, 4}, c3[1] = {3}, c4[1] = {4}, x3[1] = {3}, x23[2] = {2, 3};
  const int nd5[5] = {3, 1, 1, 1, 1};
  /* batch norm: scale of the wrong length, named with the shapes. */
  const int64_t *bad_scale[5] = {x234, c4, c3, c3, c3};
  expect_fails("batch_normalization", 5, EM_F32, nd5, bad_scale, NULL, 0, 1, "f32[4]", "scale");
  const int64_t *bad_var[5] = {x234, c3, c3, c3, c4};
  expect_fails("batch_normalization", 5, EM_F32, nd5, bad_var, NULL, 0, 1, "running_var", "f32[2,3,4]");
  /* rank-1 input. */
  const int nd_r1[5] = {1, 1, 1, 1, 1};
  const int64_t *r1[5] = {x3, c3, c3, c3, c3};
  expect_fails("batch_normalization", 5, EM_F32, nd_r1, r1, NULL, 0, 1, "rank", "f32[3]");
  /* integer x, attributes out of range. */
  const int64_t *good[5] = {x234, c3, c3, c3, c3};
  expect_fails("batch_normalization", 5, EM_I32, nd5, good, NULL, 0, 1, "i32", NULL);
  em_attr mom = {.name = "momentum", .type = EM_ATTR_FLOAT, .f = 1.5};
  expect_fails("batch_normalization", 5, EM_F64, nd5, good, &mom, 1, 1, "momentum", "1.5");
  em_attr eps = {.name = "epsilon", .type = EM_ATTR_FLOAT, .f = -1};
  expect_fails("batch_normalization", 5, EM_F64, nd5, good, &eps, 1, 1, "epsilon", NULL);
  /* mixed dtypes. */
  em_dtype mixed[5] = {EM_F32, EM_F64, EM_F32, EM_F32, EM_F32};
  ot_expect_apply_fails("batch_normalization", 5, mixed, nd5, good, NULL, 0, 1, "scale", "f64");

  /* dropout: ratio 1.0 (and below 0). */
  const int nd1[1] = {2};
  const int64_t *dx[1] = {x23};
  em_attr r = {.name = "ratio", .type = EM_ATTR_FLOAT, .f = 1.0};
  expect_fails("dropout", 1, EM_F32, nd1, dx, &r, 1, 1, "ratio", "[0, 1)");
  r.f = -0.1;
  expect_fails("dropout", 1, EM_F32, nd1, dx, &r, 1, 1, "ratio", NULL);
  expect_fails("dropout", 1, EM_I64, nd1, dx, NULL, 0, 1, "i64", NULL);

  /* LRN: even size, missing size, bad bias. */
  const int nd_lrn[1] = {3};
  const int64_t *lx[1] = {x234};
  em_attr size = {.name = "size", .type = EM_ATTR_INT, .i = 4};
  expect_fails("local_response_normalization", 1, EM_F32, nd_lrn, lx, &size, 1, 1, "size", "odd");
  expect_fails("local_response_normalization", 1, EM_F32, nd_lrn, lx, NULL, 0, 1, "size", "required");
  em_attr lrn_bias[2] = {{.name = "size", .type = EM_ATTR_INT, .i = 3},
                        {.name = "bias", .type = EM_ATTR_FLOAT, .f = 0}};
  expect_fails("local_response_normalization", 1, EM_F32, nd_lrn, lx, lrn_bias, 2, 1, "bias", NULL);
  const int nd_lrn1[1] = {1};
  const int64_t *lx1[1] = {x3};
  expect_fails("local_response_normalization", 1, EM_F32, nd_lrn1, lx1, lrn_bias, 1, 1, "rank", NULL);

  /* layer norm: scale not shaped like x.shape[axis:], axis out of range. */
  const int nd_ln[2] = {3, 1};
  const int64_t *ln_bad[2] = {x234, c3};
  expect_fails("layer_normalization", 2, EM_F32, nd_ln, ln_bad, NULL, 0, 1, "f32[3]", "f32[4]");
  const int64_t *ln_good[2] = {x234, c4};
  em_attr axis = {.name = "axis", .type = EM_ATTR_INT, .i = 3};
  expect_fails("layer_normalization", 2, EM_F32, nd_ln, ln_good, &axis, 1, 1, "axis", NULL);

  /* instance norm: rank 2 has no spatial axes; bias of the wrong length. */
  const int nd_in2[3] = {2, 1, 1};
  const int64_t *in2[3] = {x23, c3, c3};
  expect_fails("instance_normalization", 3, EM_F32, nd_in2, in2, NULL, 0, 1, "rank", NULL);
  const int nd_in[3] = {3, 1, 1};
  const int64_t *in_bad[3] = {x234, c3, c4};
  expect_fails("instance_normalization", 3, EM_F32, nd_in, in_bad, NULL, 0, 1, "bias", "f32[4]");
}

/* layer_normalization's attribute is epsilon: "eps" is refused by name (it would silently use 1e-5); the message
 * names the op, the bad name and the names it takes. */
static void test_norm_unknown_attribute(void **state) {
  (void)state;
  const int64_t s0[2] = {2, 3};
  const int64_t s1[1] = {3};
  const int64_t *shapes[2] = {s0, s1};
  const em_dtype dtypes[2] = {EM_F32, EM_F32};
  const int ndims[2] = {2, 1};
  const em_attr at[1] = {{.name = "eps", .type = EM_ATTR_FLOAT, .f = 1e-3}};
  ot_expect_apply_fails("layer_normalization", 2, dtypes, ndims, shapes, at, 1, 1, "no attribute 'eps'",
                        "it takes: axis, epsilon)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bn_inference_forward),
    cmocka_unit_test(test_bn_training_forward),
    cmocka_unit_test(test_bn_running_stats),
    cmocka_unit_test(test_bn_training_one_value_per_channel),
    cmocka_unit_test(test_bn_gradcheck),
    cmocka_unit_test(test_ln_forward),
    cmocka_unit_test(test_ln_defaults),
    cmocka_unit_test(test_ln_gradcheck),
    cmocka_unit_test(test_in_forward),
    cmocka_unit_test(test_in_gradcheck),
    cmocka_unit_test(test_lrn_forward),
    cmocka_unit_test(test_lrn_gradcheck),
    cmocka_unit_test(test_dropout_inference_identity),
    cmocka_unit_test(test_dropout_ratio_zero),
    cmocka_unit_test(test_dropout_training_statistics),
    cmocka_unit_test(test_dropout_mask_determinism),
    cmocka_unit_test(test_dropout_threads),
    cmocka_unit_test(test_norm_threads),
    cmocka_unit_test(test_dropout_gradcheck),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_norm_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
