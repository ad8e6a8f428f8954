/* Fast-mode f32 products through oneDNN's matmul (ops/linalg.c dnnl_product, ops/dnnl.c
 * em_dnnl_matmul): matmul and gemm against a plain float64 product written here, the weights'
 * kept form following their changes, the same bits for every thread count, and the cases that
 * stay with OpenBLAS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl.h"
#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }

static int dnnl_present(void) {
  char info[256];
  em_cpu_conv_info(info, sizeof info);
  return strncmp(info, "not used", 8) != 0;
}

/* y [rows, n] = x [rows, k] op(w) + bias in double; w is [k, n], or [n, k] where tw. */
static double *reference(const double *x, const double *w, const double *bias, int64_t rows, int64_t k, int64_t n,
                         int tw) {
  double *y = calloc((size_t)(rows * n), sizeof *y);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = bias ? bias[j] : 0;
      for (int64_t t = 0; t < k; t++) acc += x[i * k + t] * (tw ? w[j * k + t] : w[t * n + j]);
      y[i * n + j] = acc;
    }
  return y;
}

typedef struct prod {
  em_graph *g;
  em_var x, w, b, y;
  em_exec *e;
} prod;

/* gemm (x [m, k], w parameter, bias parameter or none; transB = tw) or matmul (x [batch..., m, k]
 * with xdims dims, w parameter [k, n]). */
static void prod_build(prod *p, const char *op, int xnd, const int64_t *xdims, int64_t k, int64_t n, int tw,
                       int with_bias, uint64_t seed) {
  memset(p, 0, sizeof *p);
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  assert_int_equal(em_input(p->g, "x", EM_F32, xnd, xdims, &p->x), EM_OK);
  int64_t ws[2] = {tw ? n : k, tw ? k : n}, bs[1] = {n};
  em_tensor *w = ot_rand(EM_F32, 2, ws, seed, -1, 1), *b = ot_rand(EM_F32, 1, bs, seed + 1, -1, 1);
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = w}, ib = {.kind = EM_INIT_FROM_DATA, .data = b};
  assert_int_equal(em_parameter(p->g, "w", EM_F32, 2, ws, &iw, &p->w), EM_OK);
  em_var in[3] = {p->x, p->w, -1};
  if (with_bias) {
    assert_int_equal(em_parameter(p->g, "b", EM_F32, 1, bs, &ib, &p->b), EM_OK);
    in[2] = p->b;
  }
  em_tensor_release(w), em_tensor_release(b);
  em_attr at[1] = {AI(!strcmp(op, "gemm") ? "transB" : "transpose_b", tw)};
  if (em_apply(p->g, op, in, with_bias ? 3 : 2, at, 1, &p->y, 1)) fail_msg("apply %s: %s", op, em_last_error());
  assert_int_equal(em_exec_create(p->g, &p->y, 1, em_cpu(), &p->e), EM_OK);
}

static em_tensor *prod_run(prod *p, em_tensor *x) {
  em_feed f = {p->x, x};
  em_tensor *y = NULL;
  if (em_exec_run(p->e, &f, 1, &y)) fail_msg("run: %s", em_last_error());
  return y;
}

static void prod_free(prod *p) {
  em_exec_free(p->e);
  em_graph_free(p->g);
}

/* The parameter's current value as doubles (n elements). */
static double *param_values(const prod *p, em_var v, int64_t *n) {
  em_tensor *t = NULL;
  assert_int_equal(em_parameter_get(p->g, v, em_cpu(), &t), EM_OK);
  double *d = ot_values(t, n);
  em_tensor_release(t);
  return d;
}

static void check_against_reference(prod *p, em_tensor *x, int64_t rows, int64_t k, int64_t n, int tw, int with_bias,
                                    const char *what) {
  int64_t nx, nw, nb;
  double *xd = ot_values(x, &nx), *wd = param_values(p, p->w, &nw), *bd = with_bias ? param_values(p, p->b, &nb) : NULL;
  double *want = reference(xd, wd, bd, rows, k, n, tw);
  em_tensor *y = prod_run(p, x);
  ot_expect_values(y, want, rows * n, 1e-4 * sqrt((double)k), what);
  em_tensor_release(y);
  free(xd), free(wd), free(bd), free(want);
}

/* gemm with and without bias, transposed weights or not, over shapes from a batch-1 classifier
 * to a transformer's projections, odd sizes included; each builds a oneDNN plan. */
static void test_gemm_shapes(void **state) {
  (void)state;
  if (!dnnl_present()) skip();
  const int64_t shapes[][3] = {{1, 1280, 1000}, {128, 256, 256}, {7, 33, 65}, {64, 1, 9}, {3, 300, 1}, {1, 1, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int tw = 0; tw < 2; tw++)
      for (int bias = 0; bias < 2; bias++) {
        const int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2], xs[2] = {m, k};
        prod p;
        prod_build(&p, "gemm", 2, xs, k, n, tw, bias, 100 + s * 4 + (size_t)(tw * 2 + bias));
        const uint64_t before = em_dnnl_plan_builds();
        em_tensor *x = ot_rand(EM_F32, 2, xs, 7 + s, -1, 1);
        char what[96];
        snprintf(what, sizeof what, "gemm %lldx%lldx%lld transB %d bias %d", (long long)m, (long long)k, (long long)n,
                 tw, bias);
        check_against_reference(&p, x, m, k, n, tw, bias, what);
        if (em_dnnl_plan_builds() == before) fail_msg("%s: no oneDNN plan was built (not through oneDNN?)", what);
        em_tensor_release(x);
        prod_free(&p);
      }
}

/* matmul of a batched x [2, 3, m, k] with one weight matrix: the batches stacked into one
 * product; and a 1-D x. */
static void test_matmul_batched_and_vector(void **state) {
  (void)state;
  if (!dnnl_present()) skip();
  const int64_t xs[4] = {2, 3, 5, 24}, k = 24, n = 17;
  prod p;
  prod_build(&p, "matmul", 4, xs, k, n, 0, 0, 200);
  em_tensor *x = ot_rand(EM_F32, 4, xs, 201, -1, 1);
  check_against_reference(&p, x, 30, k, n, 0, 0, "matmul [2,3,5,24] x [24,17]");
  em_tensor_release(x);
  prod_free(&p);
  const int64_t vs[1] = {24};
  prod_build(&p, "matmul", 1, vs, k, n, 1, 0, 202);
  x = ot_rand(EM_F32, 1, vs, 203, -1, 1);
  check_against_reference(&p, x, 1, k, n, 1, 0, "matmul [24] x [17,24]^T");
  em_tensor_release(x);
  prod_free(&p);
}

/* The weights' reordered form is kept between runs and follows every change of the value. */
static void test_weights_changes_are_seen(void **state) {
  (void)state;
  if (!dnnl_present()) skip();
  const int64_t m = 16, k = 40, n = 24, xs[2] = {m, k}, ws[2] = {n, k};
  prod p;
  prod_build(&p, "gemm", 2, xs, k, n, 1, 1, 300);
  em_tensor *x = ot_rand(EM_F32, 2, xs, 301, -1, 1);
  check_against_reference(&p, x, m, k, n, 1, 1, "gemm, first weights");
  em_tensor *w2 = ot_rand(EM_F32, 2, ws, 302, -2, 2);
  assert_int_equal(em_parameter_set(p.g, p.w, w2), EM_OK);
  em_tensor_release(w2);
  check_against_reference(&p, x, m, k, n, 1, 1, "gemm, weights set anew");
  em_tensor *wv = NULL; /* written in place, then announced */
  assert_int_equal(em_parameter_value(p.g, p.w, &wv), EM_OK);
  float *wf = em_tensor_data(wv);
  for (int64_t i = 0; i < n * k; i += 3) wf[i] = -wf[i] + 0.5f;
  assert_int_equal(em_parameter_set(p.g, p.w, wv), EM_OK);
  em_tensor_release(wv);
  check_against_reference(&p, x, m, k, n, 1, 1, "gemm, weights written in place");
  em_tensor_release(x);
  prod_free(&p);
}

/* The same bits on 1, 2 and 3 threads, on shapes where a kernel might split the k sum between
 * threads (one row, a long k). */
static void test_bits_do_not_depend_on_threads(void **state) {
  (void)state;
  if (!dnnl_present()) skip();
  const int64_t shapes[][3] = {{1, 4096, 64}, {2, 2048, 512}, {128, 256, 256}, {33, 1000, 7}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    const int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2], xs[2] = {m, k};
    em_tensor *x = ot_rand(EM_F32, 2, xs, 400 + s, -1, 1), *ref = NULL;
    for (int threads = 1; threads <= 3; threads++) {
      assert_int_equal(em_set_num_threads(threads), EM_OK);
      prod p;
      prod_build(&p, "gemm", 2, xs, k, n, 0, 1, 410 + s);
      em_tensor *y = prod_run(&p, x);
      if (!ref) ref = y;
      else {
        if (memcmp(em_tensor_data(ref), em_tensor_data(y), sizeof(float) * (size_t)(m * n)))
          fail_msg("gemm %lldx%lldx%lld: %d threads give other bits than 1", (long long)m, (long long)k, (long long)n,
                   threads);
        em_tensor_release(y);
      }
      prod_free(&p);
    }
    em_tensor_release(ref), em_tensor_release(x);
  }
  assert_int_equal(em_set_num_threads(0), EM_OK);
}

/* What oneDNN does not take stays right: alpha != 1, a full c matrix, transposed a, beta 0.5. */
static void test_other_gemm_forms(void **state) {
  (void)state;
  const int64_t m = 6, k = 10, n = 5, xs[2] = {k, m}, ws[2] = {k, n}, cs[2] = {m, n};
  em_tensor *a = ot_rand(EM_F32, 2, xs, 500, -1, 1), *b = ot_rand(EM_F32, 2, ws, 501, -1, 1);
  em_tensor *c = ot_rand(EM_F32, 2, cs, 502, -1, 1);
  int64_t na, nb, nc;
  double *ad = ot_values(a, &na), *bd = ot_values(b, &nb), *cd = ot_values(c, &nc);
  double want[30];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++) acc += ad[t * m + i] * bd[t * n + j];
      want[i * n + j] = 2.0 * acc + 0.5 * cd[i * n + j];
    }
  em_tensor *in[3] = {a, b, c};
  em_attr at[3] = {AI("transA", 1), AF("alpha", 2.0), AF("beta", 0.5)};
  em_tensor *y = ot_run1("gemm", in, 3, at, 3);
  ot_expect_values(y, want, m * n, 1e-5, "gemm transA, alpha 2, beta 0.5, full c");
  em_tensor_release(y), em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);
  free(ad), free(bd), free(cd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gemm_shapes),
    cmocka_unit_test(test_matmul_batched_and_vector),
    cmocka_unit_test(test_weights_changes_are_seen),
    cmocka_unit_test(test_bits_do_not_depend_on_threads),
    cmocka_unit_test(test_other_gemm_forms),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
