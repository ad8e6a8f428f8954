/* The .npy reader and writer of the ember tool (tools/ember/npy.c).
 *
 * Expected bytes are written out here from NumPy's format description
 * (numpy/lib/format.py: magic \x93NUMPY, version, little-endian header
 * length, a dict literal padded with spaces to a multiple of 64 bytes and
 * ended by '\n', then the raw C-order data) and from what numpy.save writes
 * for the same arrays, not produced by the code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember.h"
#include "npy.h"

/* A .npy file: version major.0, the dict padded to total % 64 == 0 (when
 * pad), then data. Header length field of 2 bytes (1.0) or 4 (2.0). */
static size_t make_npy(unsigned char *out, int major, const char *dict, int pad, const void *data, size_t n) {
  size_t pre = major == 1 ? 10 : 12, len = strlen(dict) + 1;
  if (pad) len = ((pre + len + 63) / 64) * 64 - pre;
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (unsigned char)major, out[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) out[8 + i] = (unsigned char)(len >> (8 * i));
  memset(out + pre, ' ', len);
  memcpy(out + pre, dict, strlen(dict));
  out[pre + len - 1] = '\n';
  if (n) memcpy(out + pre + len, data, n); /* data may be NULL for an empty array */
  return pre + len + n;
}

static em_tensor *parse_ok(const unsigned char *b, size_t n) {
  em_tensor *t;
  char err[256];
  if (npy_parse(b, n, "t.npy", &t, err, sizeof err)) fail_msg("%s", err);
  return t;
}

static void expect_shape(const em_tensor *t, em_dtype dt, int nd, const int64_t *shape) {
  assert_int_equal(em_tensor_dtype(t), dt);
  assert_int_equal(em_tensor_ndim(t), nd);
  for (int d = 0; d < nd; d++) assert_int_equal(em_tensor_shape(t)[d], shape[d]);
}

static void test_read_dtypes_and_shapes(void **state) {
  (void)state;
  unsigned char b[512];
  const float f[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  size_t n = make_npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, f, sizeof f);
  em_tensor *t = parse_ok(b, n);
  expect_shape(t, EM_F32, 2, (const int64_t[]){2, 3});
  float got[6];
  assert_int_equal(em_tensor_to_host(t, got, sizeof got), EM_OK);
  assert_memory_equal(got, f, sizeof f);
  em_tensor_release(t);

  /* Format 2.0, keys in another order, double quotes, no padding, 1-D. */
  const int64_t i64[3] = {-1, 0, INT64_MAX};
  n = make_npy(b, 2, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<i8\"}", 0, i64, sizeof i64);
  t = parse_ok(b, n);
  expect_shape(t, EM_I64, 1, (const int64_t[]){3});
  int64_t gi[3];
  assert_int_equal(em_tensor_to_host(t, gi, sizeof gi), EM_OK);
  assert_memory_equal(gi, i64, sizeof i64);
  em_tensor_release(t);

  const double d = 2.5; /* a scalar: shape () */
  t = parse_ok(b, make_npy(b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 1, &d, sizeof d));
  expect_shape(t, EM_F64, 0, NULL);
  em_tensor_release(t);
  const unsigned char bools[4] = {1, 0, 0, 1};
  t = parse_ok(b, make_npy(b, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }", 1, bools, 4));
  expect_shape(t, EM_BOOL, 2, (const int64_t[]){2, 2});
  em_tensor_release(t);
  t = parse_ok(b, make_npy(b, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", 1, bools, 4));
  expect_shape(t, EM_U8, 1, (const int64_t[]){4});
  em_tensor_release(t);
  const int32_t i32[2] = {7, -8};
  t = parse_ok(b, make_npy(b, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 1), }", 1, i32, 8));
  expect_shape(t, EM_I32, 3, (const int64_t[]){1, 2, 1});
  em_tensor_release(t);
  /* An empty array: no data bytes. */
  t = parse_ok(b, make_npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 1, NULL, 0));
  expect_shape(t, EM_F32, 2, (const int64_t[]){0, 3});
  em_tensor_release(t);
}

static void expect_refused(const unsigned char *b, size_t n, npy_status want, const char *w1, const char *w2) {
  em_tensor *t = (em_tensor *)b;
  char err[256] = "";
  npy_status s = npy_parse(b, n, "in.npy", &t, err, sizeof err);
  if (s != want) fail_msg("status %d, expected %d: %s", s, want, err);
  assert_null(t);
  if (!strstr(err, "in.npy") || !strstr(err, w1) || (w2 && !strstr(err, w2)))
    fail_msg("message lacks in.npy, \"%s\" or \"%s\": %s", w1, w2 ? w2 : "", err);
}

static void test_refusals(void **state) {
  (void)state;
  unsigned char b[512];
  const float f[4] = {0};
  size_t n = make_npy(b, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 1, f, 16);
  expect_refused(b, n, NPY_ERR_UNSUPPORTED, "Fortran", "byte 10");
  n = make_npy(b, 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 1, f, 16);
  expect_refused(b, n, NPY_ERR_UNSUPPORTED, "object", "byte 10");
  n = make_npy(b, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", 1, f, 16);
  expect_refused(b, n, NPY_ERR_UNSUPPORTED, "big-endian", NULL);
  n = make_npy(b, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 1, f, 16);
  expect_refused(b, n, NPY_ERR_UNSUPPORTED, "'<c8'", NULL);
  /* The shape needs 16 bytes; 12 are there. The data starts at byte 128. */
  n = make_npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 1, f, 12);
  expect_refused(b, n, NPY_ERR_FORMAT, "byte 128", "16 data bytes");
  n = make_npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", 1, f, 16);
  expect_refused(b, n, NPY_ERR_FORMAT, "unknown header key 'x'", NULL);
  n = make_npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 1, f, 4);
  expect_refused(b, n, NPY_ERR_FORMAT, "'shape'", NULL);
  n = make_npy(b, 1, "{'descr': '<f4', 'shape': (4,), }", 1, f, 16);
  expect_refused(b, n, NPY_ERR_FORMAT, "lacks 'fortran_order'", NULL);
  memcpy(b, "PK\3\4", 4); /* a .npz (zip) or anything else */
  expect_refused(b, n, NPY_ERR_FORMAT, "byte 0", "magic");
  n = make_npy(b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 1, f, 16);
  b[8] = 0xff, b[9] = 0x7f; /* header length beyond the file */
  expect_refused(b, n, NPY_ERR_FORMAT, "byte 8", NULL);
  expect_refused(b, 7, NPY_ERR_FORMAT, "byte 0", NULL);
}

/* What numpy.save writes for np.array([[1, 2, 3], [4, 5, 6]], np.float32):
 * the 118-character dict (10 + 118 = 128 bytes of header) then the data. */
static void test_write_as_numpy_does(void **state) {
  (void)state;
  const float f[6] = {1, 2, 3, 4, 5, 6};
  em_tensor *t;
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 2, (const int64_t[]){2, 3}, f, sizeof f, &t), EM_OK);
  void *bytes;
  size_t size;
  char err[256];
  assert_int_equal(npy_encode(t, &bytes, &size, err, sizeof err), NPY_OK);
  unsigned char want[256];
  const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
  memset(want + 10, ' ', 117);
  memcpy(want + 10, dict, strlen(dict));
  want[127] = '\n';
  memcpy(want + 128, f, sizeof f);
  assert_int_equal(size, 128 + sizeof f);
  assert_memory_equal(bytes, want, size);
  free(bytes);
  em_tensor_release(t);
  /* A 1-D int64 and a scalar: "(3,)" and "()" as Python writes tuples. */
  const int64_t i[3] = {1, 2, 3};
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_I64, 1, (const int64_t[]){3}, i, sizeof i, &t), EM_OK);
  assert_int_equal(npy_encode(t, &bytes, &size, err, sizeof err), NPY_OK);
  assert_memory_equal((char *)bytes + 10, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 57);
  free(bytes);
  em_tensor_release(t);
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_BOOL, 0, NULL, "\1", 1, &t), EM_OK);
  assert_int_equal(npy_encode(t, &bytes, &size, err, sizeof err), NPY_OK);
  assert_memory_equal((char *)bytes + 10, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }", 55);
  assert_int_equal(size, 129);
  free(bytes);
  em_tensor_release(t);
}

static void test_save_load_files(void **state) {
  (void)state;
  const double v[4] = {1.25, -3, 1e300, 0};
  em_tensor *t, *back;
  char err[256], path[] = "/tmp/test_npy_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F64, 2, (const int64_t[]){2, 2}, v, sizeof v, &t), EM_OK);
  assert_int_equal(npy_save(path, t, err, sizeof err), NPY_OK);
  assert_int_equal(npy_load(path, &back, err, sizeof err), NPY_OK);
  expect_shape(back, EM_F64, 2, (const int64_t[]){2, 2});
  double got[4];
  assert_int_equal(em_tensor_to_host(back, got, sizeof got), EM_OK);
  assert_memory_equal(got, v, sizeof v);
  em_tensor_release(back);
  unlink(path);
  assert_int_equal(npy_load(path, &back, err, sizeof err), NPY_ERR_IO);
  assert_non_null(strstr(err, path));
  assert_null(back);
  assert_int_equal(npy_save("/nonexistent-dir/x.npy", t, err, sizeof err), NPY_ERR_IO);
  assert_non_null(strstr(err, "/nonexistent-dir/x.npy"));
  em_tensor_release(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_dtypes_and_shapes),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_write_as_numpy_does),
      cmocka_unit_test(test_save_load_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
