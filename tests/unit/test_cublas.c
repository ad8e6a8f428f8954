/* The fast mode's products through cuBLAS (runtime/cublas.c, ops/linalg_gpu.c): which
 * devices and drivers use it and why (the rule, checked here over a hand-made matrix), and a
 * cuBLAS that cannot be loaded leaving the products to Ember's kernels on the libcuda double,
 * with the reason in em_device_library_use and em_exec_describe. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas.h"
#include "op_testkit.h"


/* ------------------------------------------------------ the rule alone --- */

/* Expected answers from cuda-compat.md's facts, not from arch_table's code: a CUDA M.x library
 * runs on drivers of CUDA M.0 and newer (minor-version compatibility); cuBLAS 13 dropped every
 * GPU before Turing (7.5), cuBLAS 12 Kepler (5.0 and newer remain), cuBLAS 11 still had 3.5. */
static void test_support_rule(void **state) {
  (void)state;
  const struct {
    int major, minor, patch, driver, cc, want;
    const char *why;
  } rows[] = {
      {13, 1, 0, 13000, 90, 1, "supports"},     {13, 1, 0, 13020, 120, 1, "supports"},
      {13, 1, 0, 12080, 90, 0, "CUDA 13.0 driver"}, {13, 0, 0, 13000, 75, 1, "supports"},
      {13, 0, 0, 13000, 70, 0, "7.5"},          {12, 9, 1, 12040, 70, 1, "supports"},
      {12, 9, 1, 13000, 50, 1, "supports"},     {12, 9, 1, 12040, 37, 0, "5.0"},
      {12, 0, 0, 11080, 80, 0, "CUDA 12.0 driver"}, {11, 11, 3, 11040, 35, 1, "supports"},
      {11, 11, 3, 10020, 35, 0, "CUDA 11.0 driver"}, {14, 0, 0, 14000, 90, 0, "not in Ember's table"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char why[256] = "";
    int got = em_cublas_supports(rows[i].major, rows[i].minor, rows[i].patch, rows[i].driver, rows[i].cc, why,
                                 sizeof why);
    if (got != rows[i].want || !strstr(why, rows[i].why))
      fail_msg("cuBLAS %d.%d.%d, driver %d, CC %d: got %d (%s), want %d (\"%s\")", rows[i].major, rows[i].minor,
               rows[i].patch, rows[i].driver, rows[i].cc, got, why, rows[i].want, rows[i].why);
  }
}

/* A cuBLAS that cannot be loaded: the products run on Ember's kernels, right, and every
 * report says why. */
static void test_missing_library(void **state) {
  (void)state;
  const char *cuda = getenv("FAKECUDA_LIB");
  if (!cuda || !*cuda) {
    fprintf(stderr, "skipped: FAKECUDA_LIB (the libcuda double) is not set\n");
    skip();
  }
  setenv("EMBER_LIBCUDA", cuda, 1);
  setenv("FAKECUDA_DEVICES", "9.0", 1);
  setenv("FAKECUDA_DRIVER", "13000", 1);
  setenv("EMBER_LIBCUBLAS", "/nonexistent/libcublas.so.13", 1);
  unsetenv("EMBER_CUBLAS");
  em_shutdown();
  int used = 1;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why), EM_OK);
  if (used || !strstr(why, "/nonexistent/libcublas.so.13") || !strstr(why, "cannot be loaded"))
    fail_msg("em_device_library_use: used %d, %s", used, why);
  assert_int_equal(em_device_library_use(em_cuda(0), "cudnn?", &used, why, sizeof why), EM_ERR_NOT_FOUND);

  const int64_t m = 3, k = 4, n = 2, xs[2] = {m, k}, ys[2] = {k, n};
  em_graph *g;
  em_var x, y, out;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 2, xs, &x), EM_OK);
  assert_int_equal(em_input(g, "y", EM_F32, 2, ys, &y), EM_OK);
  em_var in[2] = {x, y};
  assert_int_equal(em_apply(g, "matmul", in, 2, NULL, 0, &out, 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &out, 1, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_rand(EM_F32, 2, xs, 1, -1, 1), *yt = ot_rand(EM_F32, 2, ys, 2, -1, 1), *o = NULL;
  em_feed f[2] = {{x, xt}, {y, yt}};
  if (em_exec_run(e, f, 2, &o)) fail_msg("run: %s", em_last_error());
  double *xv = ot_values(xt, NULL), *yv = ot_values(yt, NULL), want[3 * 2];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      want[i * n + j] = 0;
      for (int64_t t = 0; t < k; t++) want[i * n + j] += xv[i * k + t] * yv[t * n + j];
    }
  ot_expect_values(o, want, m * n, 1e-6, "matmul on Ember's kernels");
  char plan[2048];
  em_exec_describe(e, plan, sizeof plan);
  if (!strstr(plan, "[Ember's kernels: EMBER_LIBCUBLAS=/nonexistent/libcublas.so.13 cannot be loaded"))
    fail_msg("em_exec_describe does not say why the product did not use cuBLAS:\n%s", plan);
  /* Portable mode is Ember's kernels by definition: nothing to explain. */
  assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
  em_tensor_release(o);
  free(xv), free(yv);
  em_tensor_release(xt), em_tensor_release(yt);
  em_exec_free(e);
  em_graph_free(g);
  unsetenv("EMBER_LIBCUBLAS");
  em_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_support_rule),
      cmocka_unit_test(test_missing_library),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
