/* Tensors: shapes, strides and views, with expected values worked out by hand
 * for small row-major examples. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"

#define OK(x) assert_int_equal((x), EM_OK)

/* x = [[0,1,2],[3,4,5]] as f32 on `dev`. */
static em_tensor *two_by_three(em_device dev) {
  const float v[6] = {0, 1, 2, 3, 4, 5};
  const int64_t shape[2] = {2, 3};
  em_tensor *t = NULL;
  OK(em_tensor_from_host(dev, EM_F32, 2, shape, v, sizeof v, &t));
  return t;
}

static void expect_values(const em_tensor *t, const float *want, size_t n) {
  float got[64];
  assert_true(n <= 64);
  assert_int_equal(em_tensor_numel(t), (int64_t)n);
  OK(em_tensor_to_host(t, got, n * sizeof(float)));
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("element %zu: %g, expected %g", i, got[i], want[i]);
}

static void test_dtypes(void **state) {
  (void)state;
  assert_int_equal(em_dtype_size(EM_F32), 4);
  assert_int_equal(em_dtype_size(EM_F64), 8);
  assert_int_equal(em_dtype_size(EM_F16), 2);
  assert_int_equal(em_dtype_size(EM_BF16), 2);
  assert_int_equal(em_dtype_size(EM_I64), 8);
  assert_int_equal(em_dtype_size(EM_BOOL), 1);
  assert_int_equal(em_dtype_size((em_dtype)99), 0);
  assert_string_equal(em_dtype_name(EM_BF16), "bf16");
}

static void test_round_trip_and_describe(void **state) {
  (void)state;
  em_tensor *t = two_by_three(em_cpu());
  const float want[6] = {0, 1, 2, 3, 4, 5};
  expect_values(t, want, 6);
  assert_int_equal(em_tensor_ndim(t), 2);
  assert_int_equal(em_tensor_strides(t)[0], 3);
  assert_int_equal(em_tensor_strides(t)[1], 1);
  assert_true(em_tensor_is_contiguous(t));
  char d[64];
  assert_string_equal(em_tensor_describe(t, d, sizeof d), "f32[2,3]");
  em_tensor_release(t);
}

static void test_permute_is_transpose(void **state) {
  (void)state;
  em_tensor *t = two_by_three(em_cpu()), *p;
  const int perm[2] = {1, 0};
  OK(em_tensor_permute(t, perm, &p));
  em_tensor_release(t); /* the view keeps the storage alive */
  assert_int_equal(em_tensor_shape(p)[0], 3);
  assert_int_equal(em_tensor_shape(p)[1], 2);
  assert_false(em_tensor_is_contiguous(p));
  const float want[6] = {0, 3, 1, 4, 2, 5};
  expect_values(p, want, 6);
  em_tensor *c;
  OK(em_tensor_contiguous(p, &c));
  assert_true(em_tensor_is_contiguous(c));
  expect_values(c, want, 6);
  const int bad[2] = {0, 0};
  em_tensor *x;
  assert_int_equal(em_tensor_permute(p, bad, &x), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "perm"));
  em_tensor_release(c);
  em_tensor_release(p);
}

static void test_slices(void **state) {
  (void)state;
  em_tensor *t = two_by_three(em_cpu()), *s, *r;
  OK(em_tensor_slice(t, 1, 0, 3, 2, &s)); /* columns 0 and 2 */
  const float cols[4] = {0, 2, 3, 5};
  expect_values(s, cols, 4);
  em_tensor_release(s);
  OK(em_tensor_slice(t, 0, -1, 2, 1, &r)); /* the last row */
  const float last[3] = {3, 4, 5};
  expect_values(r, last, 3);
  em_tensor_release(r);
  OK(em_tensor_slice(t, -1, 2, 1, 1, &s)); /* empty: stop before start */
  assert_int_equal(em_tensor_numel(s), 0);
  em_tensor_release(s);
  assert_int_equal(em_tensor_slice(t, 1, 0, 3, 0, &s), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_tensor_slice(t, 2, 0, 1, 1, &s), EM_ERR_INVALID_ARGUMENT);
  em_tensor_release(t);
}

static void test_expand(void **state) {
  (void)state;
  const float row[3] = {7, 8, 9};
  const int64_t s13[2] = {1, 3}, s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s233[3] = {2, 3, 3};
  em_tensor *r, *e, *v;
  OK(em_tensor_from_host(em_cpu(), EM_F32, 2, s13, row, sizeof row, &r));
  OK(em_tensor_expand(r, 2, s23, &e));
  assert_int_equal(em_tensor_strides(e)[0], 0);
  const float want[6] = {7, 8, 9, 7, 8, 9};
  expect_values(e, want, 6);
  em_tensor_release(e);
  em_tensor_release(r);
  OK(em_tensor_from_host(em_cpu(), EM_F32, 1, s3, row, sizeof row, &v));
  OK(em_tensor_expand(v, 2, s23, &e)); /* [3] -> [2,3]: trailing axes align */
  expect_values(e, want, 6);
  em_tensor_release(e);
  assert_int_equal(em_tensor_expand(v, 1, s2, &e), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "f32[3]"));
  OK(em_tensor_expand(v, 3, s233, &e)); /* [3] -> [2,3,3] */
  assert_int_equal(em_tensor_numel(e), 18);
  em_tensor_release(e);
  em_tensor_release(v);
}

static void test_reshape(void **state) {
  (void)state;
  em_tensor *t = two_by_three(em_cpu()), *r, *p;
  const int64_t s32[2] = {3, -1}, s6[1] = {6}, s4[1] = {4}, two_infer[2] = {-1, -1};
  OK(em_tensor_reshape(t, 2, s32, &r));
  assert_int_equal(em_tensor_shape(r)[1], 2);
  const float same[6] = {0, 1, 2, 3, 4, 5};
  expect_values(r, same, 6);
  em_tensor_release(r);
  assert_int_equal(em_tensor_reshape(t, 1, s4, &r), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "6 elements"));
  assert_int_equal(em_tensor_reshape(t, 2, two_infer, &r), EM_ERR_INVALID_ARGUMENT);
  const int perm[2] = {1, 0};
  OK(em_tensor_permute(t, perm, &p));
  assert_int_equal(em_tensor_reshape(p, 1, s6, &r), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "not contiguous"));
  em_tensor_release(p);
  em_tensor_release(t);
}

static void test_zeros_scalars_and_empties(void **state) {
  (void)state;
  const int64_t s22[2] = {2, 2}, s0[2] = {0, 5};
  em_tensor *z, *sc, *e;
  OK(em_tensor_zeros(em_cpu(), EM_I64, 2, s22, &z));
  int64_t v[4] = {9, 9, 9, 9};
  OK(em_tensor_to_host(z, v, sizeof v));
  for (int i = 0; i < 4; i++) assert_int_equal(v[i], 0);
  OK(em_tensor_zeros(em_cpu(), EM_F64, 0, NULL, &sc));
  assert_int_equal(em_tensor_numel(sc), 1);
  OK(em_tensor_zeros(em_cpu(), EM_F32, 2, s0, &e));
  assert_int_equal(em_tensor_numel(e), 0);
  OK(em_tensor_to_host(e, NULL, 0));
  em_tensor_release(z), em_tensor_release(sc), em_tensor_release(e);
}

static void test_bad_input_is_named(void **state) {
  (void)state;
  const float v[5] = {0};
  const int64_t s23[2] = {2, 3}, neg[2] = {2, -3}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  em_tensor *t;
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 2, s23, v, sizeof v, &t), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "f32[2,3] needs 24 bytes, 20 given"));
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 2, neg, &t), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "[2,-3]"));
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 9, nine, &t), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_tensor_zeros(em_cpu(), (em_dtype)42, 2, s23, &t), EM_ERR_INVALID_ARGUMENT);
  em_tensor *ok = two_by_three(em_cpu());
  float small[2];
  assert_int_equal(em_tensor_to_host(ok, small, sizeof small), EM_ERR_INVALID_ARGUMENT);
  em_tensor_release(ok);
}

/* Through the fake driver, whose device memory is real host memory: the GPU
 * paths of from_host, to_host (incl. a strided view) and to_device. */
/* em_shutdown closes the driver, but a CPU tensor the caller still holds
 * keeps its data, and releasing it afterwards hands its block back (the
 * allocator's bytes in use return to where they were: no leak, no error). */
static void test_cpu_tensor_outlives_shutdown(void **state) {
  (void)state;
  em_alloc_stats before, after;
  assert_int_equal(em_alloc_stats_get(em_cpu(), &before), EM_OK);
  const int64_t shape[1] = {1000};
  float host[1000];
  for (int i = 0; i < 1000; i++) host[i] = (float)i * 0.5f - 7.0f;
  em_tensor *t;
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 1, shape, host, sizeof host, &t), EM_OK);
  em_shutdown();
  assert_memory_equal(em_tensor_data(t), host, sizeof host);
  em_alloc_stats held;
  assert_int_equal(em_alloc_stats_get(em_cpu(), &held), EM_OK);
  assert_true(held.bytes_in_use >= before.bytes_in_use + sizeof host); /* still the tensor's */
  em_clear_error();
  em_tensor_release(t);
  assert_string_equal(em_last_error(), ""); /* the block was known and freed */
  assert_int_equal(em_alloc_stats_get(em_cpu(), &after), EM_OK);
  assert_int_equal(after.bytes_in_use, before.bytes_in_use);
}

/* Releasing a CPU tensor after em_shutdown frees a host block and nothing
 * more: the runtime (the driver loaded again, the image table read) must not
 * come back for it. Watched through the test double: loaded while the
 * runtime is up, unloaded by em_shutdown, and still unloaded after the
 * release. */
static void test_cpu_release_after_shutdown_loads_no_driver(void **state) {
  (void)state;
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) skip();
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0", 1);
  em_shutdown();
  int n = 0;
  assert_int_equal(em_cuda_device_count(&n), EM_OK); /* the runtime up, with the double loaded */
  assert_int_equal(n, 1);
  em_tensor *t;
  const int64_t shape[1] = {4};
  float host[4] = {1, 2, 3, 4};
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 1, shape, host, sizeof host, &t), EM_OK);
  em_shutdown();
  void *h = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  if (h) {
    dlclose(h);
    fail_msg("em_shutdown left the driver library loaded");
  }
  em_tensor_release(t);
  h = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  if (h) {
    em_shutdown();
    fail_msg("releasing a CPU tensor after em_shutdown started the runtime again (the driver is loaded)");
  }
}

static void test_on_a_cuda_device(void **state) {
  (void)state;
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) {
    fprintf(stderr, "skipped: FAKECUDA_LIB not set (run through build-tools/run_tests.sh)\n");
    skip();
  }
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0", 1);
  em_shutdown();
  em_tensor *g = two_by_three(em_cuda(0)), *p, *h;
  assert_int_equal(em_tensor_device(g).kind, EM_DEVICE_CUDA);
  const int perm[2] = {1, 0};
  OK(em_tensor_permute(g, perm, &p));
  const float want[6] = {0, 3, 1, 4, 2, 5};
  expect_values(p, want, 6);
  OK(em_tensor_to_device(p, em_cpu(), &h));
  assert_int_equal(em_tensor_device(h).kind, EM_DEVICE_CPU);
  expect_values(h, want, 6);
  em_tensor *z;
  const int64_t s3[1] = {3};
  OK(em_tensor_zeros(em_cuda(0), EM_F32, 1, s3, &z));
  const float zeros[3] = {0, 0, 0};
  expect_values(z, zeros, 3);
  em_tensor_release(z), em_tensor_release(h), em_tensor_release(p), em_tensor_release(g);
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_dtypes),
    cmocka_unit_test(test_round_trip_and_describe),
    cmocka_unit_test(test_permute_is_transpose),
    cmocka_unit_test(test_slices),
    cmocka_unit_test(test_expand),
    cmocka_unit_test(test_reshape),
    cmocka_unit_test(test_zeros_scalars_and_empties),
    cmocka_unit_test(test_bad_input_is_named),
    cmocka_unit_test(test_cpu_tensor_outlives_shutdown),
    cmocka_unit_test(test_cpu_release_after_shutdown_loads_no_driver),
    cmocka_unit_test(test_on_a_cuda_device),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
