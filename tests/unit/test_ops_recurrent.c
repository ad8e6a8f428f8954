/* Tests of the recurrent family (ops/recurrent.c): _lstm_seq, the fused LSTM
 * recurrence, against a plain float64 reference of ONNX's LSTM equations
 * written here (i o f c gates, sigmoid / tanh, sequence lengths: a step
 * past an element's length keeps the state and gives y 0; an empty
 * sequence's final states are 0), forward and reverse, with and without
 * initial states and lengths, f64 and f32; its gradient (_lstm_seq_grad, the
 * hand-written BPTT) by finite differences in f64 (ot_gradcheck, whose loss
 * weighs every output, the workspace too); and the refusals. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

static em_attr ai(const char *n, int64_t v) { return (em_attr){.name = n, .type = EM_ATTR_INT, .i = v}; }

typedef struct lcase {
  const char *label;
  int64_t T, N, H;
  int reverse, h0, c0;
  const int64_t *lens; /* NULL: none */
} lcase;

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ONNX's LSTM over xw (x W^T + biases, [T, N, 4H]) and r [4H, H], in double. */
static void reference(const lcase *c, const double *xw, const double *r, const double *h0, const double *c0,
                      double *y, double *hl, double *cl) {
  const int64_t T = c->T, N = c->N, H = c->H;
  double *h = calloc((size_t)(N * H), sizeof *h), *cs = calloc((size_t)(N * H), sizeof *cs);
  double *hn = calloc((size_t)(N * H), sizeof *hn), *cn = calloc((size_t)(N * H), sizeof *cn);
  assert_non_null(h), assert_non_null(cs), assert_non_null(hn), assert_non_null(cn);
  for (int64_t e = 0; e < N * H; e++) h[e] = h0 ? h0[e] : 0, cs[e] = c0 ? c0[e] : 0;
  for (int64_t k = 0; k < T; k++) {
    int64_t t = c->reverse ? T - 1 - k : k;
    for (int64_t n = 0; n < N; n++)
      for (int64_t j = 0; j < H; j++) {
        double z[4];
        for (int q = 0; q < 4; q++) {
          double acc = xw[(t * N + n) * 4 * H + q * H + j];
          for (int64_t m = 0; m < H; m++) acc += h[n * H + m] * r[(q * H + j) * H + m];
          z[q] = acc;
        }
        double i = sig(z[0]), o = sig(z[1]), f = sig(z[2]), g = tanh(z[3]);
        double cc = f * cs[n * H + j] + i * g;
        cn[n * H + j] = cc;
        hn[n * H + j] = o * tanh(cc);
      }
    for (int64_t n = 0; n < N; n++) {
      int on = !c->lens || t < c->lens[n];
      for (int64_t j = 0; j < H; j++) {
        int64_t e = n * H + j;
        if (on) h[e] = hn[e], cs[e] = cn[e];
        y[t * N * H + e] = on ? hn[e] : 0;
      }
    }
  }
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < H; j++) {
      int empty = c->lens && c->lens[n] <= 0;
      hl[n * H + j] = empty ? 0 : h[n * H + j];
      cl[n * H + j] = empty ? 0 : cs[n * H + j];
    }
  free(h), free(cs), free(hn), free(cn);
}

/* The case's inputs (xw, r[, h0][, c0][, lens]) and attributes; returns the input count. */
static int inputs_of(const lcase *c, em_dtype dt, uint64_t seed, em_tensor **in, em_attr *at) {
  const int64_t T = c->T, N = c->N, H = c->H;
  int n = 0;
  in[n++] = ot_rand(dt, 3, (int64_t[]){T, N, 4 * H}, seed, -2, 2);
  in[n++] = ot_rand(dt, 2, (int64_t[]){4 * H, H}, seed + 1, -0.8, 0.8);
  if (c->h0) in[n++] = ot_rand(dt, 2, (int64_t[]){N, H}, seed + 2, -1, 1);
  if (c->c0) in[n++] = ot_rand(dt, 2, (int64_t[]){N, H}, seed + 3, -1.5, 1.5);
  if (c->lens) {
    double l[16];
    for (int64_t i = 0; i < N; i++) l[i] = (double)c->lens[i];
    in[n++] = ot_tensor(EM_I64, 1, (int64_t[]){N}, l);
  }
  at[0] = ai("reverse", c->reverse), at[1] = ai("has_h0", c->h0), at[2] = ai("has_c0", c->c0);
  at[3] = ai("has_lens", c->lens != NULL);
  return n;
}

static const int64_t lens_a[] = {5, 0, 2, 3}, lens_b[] = {1, 4, 4}, lens_c[] = {3, 0};
/* Lengths past T count every step; a negative length is an empty sequence. */
static const int64_t lens_d[] = {9, -2, 3, 4};

static const lcase cases[] = {
  {"forward", 5, 3, 4, 0, 0, 0, NULL},
  {"reverse h0 c0", 4, 2, 3, 1, 1, 1, NULL},
  {"lengths 5 0 2 3 h0 c0", 5, 4, 3, 0, 1, 1, lens_a},
  {"reverse lengths 5 0 2 3 c0 only", 5, 4, 3, 1, 0, 1, lens_a},
  {"reverse lengths 1 4 4 h0 only", 4, 3, 5, 1, 1, 0, lens_b},
  {"T 1", 1, 2, 2, 0, 1, 1, NULL},
  {"H 1 lengths 3 0", 3, 2, 1, 0, 0, 0, lens_c},
  {"N 0", 3, 0, 2, 1, 1, 1, NULL},
  {"lengths 9 -2 3 4 (past T, negative) h0 c0", 4, 4, 2, 0, 1, 1, lens_d},
  {"reverse lengths 9 -2 3 4 (past T, negative) h0 c0", 4, 4, 2, 1, 1, 1, lens_d},
};

static void check_case(const lcase *c, em_dtype dt, double tol) {
  em_tensor *in[5];
  em_attr at[4];
  int n_in = inputs_of(c, dt, 0x1234 + (uint64_t)c->T * 7 + (uint64_t)c->H, in, at);
  em_tensor *out[4] = {0};
  if (ot_run("_lstm_seq", in, n_in, at, 4, out, 4)) fail_msg("%s: _lstm_seq failed: %s", c->label, em_last_error());
  const int64_t T = c->T, N = c->N, H = c->H;
  double *xw = ot_values(in[0], NULL), *r = ot_values(in[1], NULL);
  double *h0 = c->h0 ? ot_values(in[2], NULL) : NULL, *c0 = c->c0 ? ot_values(in[2 + c->h0], NULL) : NULL;
  double *y = malloc(sizeof *y * (size_t)(T * N * H)), *hl = malloc(sizeof *hl * (size_t)(N * H)),
         *cl = malloc(sizeof *cl * (size_t)(N * H));
  assert_non_null(y), assert_non_null(hl), assert_non_null(cl);
  reference(c, xw, r, h0, c0, y, hl, cl);
  char what[96];
  snprintf(what, sizeof what, "%s %s y", c->label, em_dtype_name(dt));
  ot_expect_shape(out[0], dt, 3, (int64_t[]){T, N, H}, what);
  ot_expect_values(out[0], y, T * N * H, tol, what);
  snprintf(what, sizeof what, "%s %s h_last", c->label, em_dtype_name(dt));
  ot_expect_values(out[1], hl, N * H, tol, what);
  snprintf(what, sizeof what, "%s %s c_last", c->label, em_dtype_name(dt));
  ot_expect_values(out[2], cl, N * H, tol, what);
  ot_expect_shape(out[3], dt, 3, (int64_t[]){T, N, 5 * H}, "workspace");
  free(xw), free(r), free(h0), free(c0), free(y), free(hl), free(cl);
  for (int i = 0; i < 4; i++) em_tensor_release(out[i]);
  for (int i = 0; i < n_in; i++) em_tensor_release(in[i]);
}

static void test_forward_matches_reference(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    check_case(&cases[k], EM_F64, 1e-12);
    check_case(&cases[k], EM_F32, 2e-6);
  }
}

/* Finite differences of every float input (lens is an integer input, never
 * perturbed); the loss weighs y, h_last, c_last and the workspace. */
static void test_gradients(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    em_tensor *in[5];
    em_attr at[4];
    int n_in = inputs_of(&cases[k], EM_F64, 0x777 + k, in, at);
    ot_gradcheck("_lstm_seq", in, n_in, at, 4, 4, 0, 1e-6);
    for (int i = 0; i < n_in; i++) em_tensor_release(in[i]);
  }
}

/* The gradient when only y is used (the workspace and final states get no
 * gradient: _lstm_seq_grad without has_dws and with zero dh_last, dc_last)
 * against finite differences of sum(y * w) built by hand. */
static void test_gradient_of_y_only(void **state) {
  (void)state;
  const lcase *c = &cases[2];
  em_tensor *in[5];
  em_attr at[4];
  int n_in = inputs_of(c, EM_F64, 99, in, at);
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var x[5], y[4], loss, dx[4];
  for (int i = 0; i < n_in; i++) {
    char name[8];
    snprintf(name, sizeof name, "x%d", i);
    assert_int_equal(em_input(g, name, em_tensor_dtype(in[i]), em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &x[i]),
                     EM_OK);
  }
  assert_int_equal(em_apply(g, "_lstm_seq", x, n_in, at, 4, y, 4), EM_OK);
  em_tensor *w = ot_rand(EM_F64, 3, (int64_t[]){c->T, c->N, c->H}, 5, 0.5, 1.5);
  em_var wv, ws[2];
  assert_int_equal(em_constant(g, w, &wv), EM_OK);
  ws[0] = y[0], ws[1] = wv;
  assert_int_equal(em_apply(g, "_weighted_sum", ws, 2, NULL, 0, &loss, 1), EM_OK);
  em_var xs[4] = {x[0], x[1], x[2], x[3]}; /* xw, r, h0, c0 */
  assert_int_equal(em_gradients(g, loss, xs, 4, dx), EM_OK);
  em_var fetch[5] = {loss, dx[0], dx[1], dx[2], dx[3]};
  em_exec *e;
  assert_int_equal(em_exec_create(g, fetch, 5, em_cpu(), &e), EM_OK);
  em_feed f[5];
  for (int i = 0; i < n_in; i++) f[i] = (em_feed){x[i], in[i]};
  em_tensor *o[5];
  assert_int_equal(em_exec_run(e, f, n_in, o), EM_OK);
  /* central differences on a few elements of each input */
  for (int i = 0; i < 4; i++) {
    double *an = ot_values(o[1 + i], NULL);
    double *v = (double *)em_tensor_data(in[i]);
    int64_t n = em_tensor_numel(in[i]);
    for (int64_t p = 0; p < n; p += n / 5 + 1) {
      double keep = v[p], hstep = 1e-6 * (fabs(keep) > 1 ? fabs(keep) : 1), lp, lm;
      em_tensor *lo[5];
      v[p] = keep + hstep;
      assert_int_equal(em_exec_run(e, f, n_in, lo), EM_OK);
      lp = *(const double *)em_tensor_data(lo[0]);
      for (int k = 0; k < 5; k++) em_tensor_release(lo[k]);
      v[p] = keep - hstep;
      assert_int_equal(em_exec_run(e, f, n_in, lo), EM_OK);
      lm = *(const double *)em_tensor_data(lo[0]);
      for (int k = 0; k < 5; k++) em_tensor_release(lo[k]);
      v[p] = keep;
      double num = (lp - lm) / (2 * hstep);
      if (fabs(an[p] - num) > 1e-6 * (fabs(num) > 1 ? fabs(num) : 1))
        fail_msg("d sum(y w) / d input %d [%lld]: autodiff %.12g, finite differences %.12g", i, (long long)p, an[p],
                 num);
    }
    free(an);
  }
  for (int k = 0; k < 5; k++) em_tensor_release(o[k]);
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(w);
  for (int i = 0; i < n_in; i++) em_tensor_release(in[i]);
}

static void test_refusals(void **state) {
  (void)state;
  const em_dtype f2[2] = {EM_F32, EM_F32}, f32_i32[2] = {EM_F32, EM_I32};
  const int nd33[2] = {3, 2}, nd32[2] = {3, 3};
  const int64_t xw[3] = {4, 2, 12}, r_bad[2] = {12, 4}, r[2] = {12, 3}, r3[3] = {1, 12, 3};
  ot_expect_apply_fails("_lstm_seq", 2, f2, nd33, (const int64_t *const[]){xw, r_bad}, NULL, 0, 4, "[4H, H]", NULL);
  ot_expect_apply_fails("_lstm_seq", 2, f2, nd32, (const int64_t *const[]){xw, r3}, NULL, 0, 4, "[4H, H]", NULL);
  ot_expect_apply_fails("_lstm_seq", 2, f32_i32, nd33, (const int64_t *const[]){xw, r}, NULL, 0, 4, "dtype", NULL);
  const int64_t xw_bad[3] = {4, 2, 11};
  ot_expect_apply_fails("_lstm_seq", 2, f2, nd33, (const int64_t *const[]){xw_bad, r}, NULL, 0, 4, "[T, N, 12]", NULL);
  em_attr h = ai("has_h0", 1);
  ot_expect_apply_fails("_lstm_seq", 2, f2, nd33, (const int64_t *const[]){xw, r}, &h, 1, 4, "3 expected", NULL);
  const em_dtype f3[3] = {EM_F32, EM_F32, EM_F32};
  const int nd3[3] = {3, 2, 2};
  const int64_t h0_bad[2] = {3, 3};
  ot_expect_apply_fails("_lstm_seq", 3, f3, nd3, (const int64_t *const[]){xw, r, h0_bad}, &h, 1, 4, "[N, 3]", NULL);
  const em_dtype fl[3] = {EM_F32, EM_F32, EM_F32};
  const int ndl[3] = {3, 2, 1};
  const int64_t lens[1] = {2};
  em_attr l = ai("has_lens", 1);
  ot_expect_apply_fails("_lstm_seq", 3, fl, ndl, (const int64_t *const[]){xw, r, lens}, &l, 1, 4, "i32 or i64",
                        NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_forward_matches_reference),
    cmocka_unit_test(test_gradients),
    cmocka_unit_test(test_gradient_of_y_only),
    cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
