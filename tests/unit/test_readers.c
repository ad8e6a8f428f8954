/* The readers and the minibatch source (reader.h; training/reader_*.c,
 * training/minibatch.c). Every file is written by the test itself, byte by
 * byte from the formats' definitions (IDX from LeCun's MNIST page, CTF
 * from CNTK's documentation, EMB from docs/dataset-format.md), plain and
 * gzipped with zlib; the real Fashion-MNIST files are checked against the
 * facts its authors publish (60000 + 10000 images of 28x28, 6000 and 1000
 * per class). The shuffle is checked against the algorithm reader.h
 * documents, re-implemented here and itself checked against SplitMix64's
 * published test vector; transforms against a plain float64 reference. */
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <valgrind/valgrind.h>
#include <zlib.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ember.h"
#include "reader_internal.h" /* em_gunzip's limit, which no file of a test's size reaches through the API */

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/ember_readers_XXXXXX", t && *t ? t : "/tmp");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *path_of(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void write_gz(const char *path, const void *b, size_t n) {
  gzFile f = gzopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
  assert_int_equal(gzclose(f), Z_OK);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  rewind(f);
  unsigned char *b = malloc(*n + 1);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

/* An IDX header: 00 00 type ndim, then big-endian dimensions. */
static size_t idx_header(unsigned char *b, int type, int ndim, const uint32_t *dims) {
  b[0] = 0, b[1] = 0, b[2] = (unsigned char)type, b[3] = (unsigned char)ndim;
  for (int i = 0; i < ndim; i++) {
    b[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
    b[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
    b[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
    b[7 + 4 * i] = (unsigned char)dims[i];
  }
  return 4 + 4 * (size_t)ndim;
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("expected \"%s\" in the message: %s", needle, hay);
}

/* 3 images of 2x3 and their labels, as the tests below expect them. */
static const unsigned char images3[3][6] = {{0, 1, 2, 3, 4, 5}, {255, 254, 0, 7, 8, 9}, {10, 20, 30, 40, 50, 60}};
static const unsigned char labels3[3] = {7, 0, 9};

static size_t make_images(unsigned char *b) {
  size_t h = idx_header(b, 0x08, 3, (const uint32_t[]){3, 2, 3});
  memcpy(b + h, images3, sizeof images3);
  return h + sizeof images3;
}

static size_t make_labels(unsigned char *b) {
  size_t h = idx_header(b, 0x08, 1, (const uint32_t[]){3});
  memcpy(b + h, labels3, 3);
  return h + 3;
}

static void check_images3(const em_dataset *d) {
  assert_int_equal(em_dataset_samples(d), 3);
  assert_int_equal(em_dataset_n_streams(d), 2);
  em_stream_desc s;
  assert_int_equal(em_dataset_stream(d, 0, &s), EM_OK);
  assert_string_equal(s.name, "features");
  assert_int_equal(s.dtype, EM_U8);
  assert_int_equal(s.ndim, 2);
  assert_int_equal(s.shape[0], 2);
  assert_int_equal(s.shape[1], 3);
  assert_int_equal(s.classes, 0);
  assert_memory_equal(em_dataset_stream_data(d, 0), images3, sizeof images3);
  assert_int_equal(em_dataset_stream(d, 1, &s), EM_OK);
  assert_string_equal(s.name, "labels");
  assert_int_equal(s.dtype, EM_I32);
  assert_int_equal(s.ndim, 0);
  assert_int_equal(s.classes, 10);
  const int32_t *l = em_dataset_stream_data(d, 1);
  for (int i = 0; i < 3; i++) assert_int_equal(l[i], labels3[i]);
}

static void test_idx_plain_and_gzip(void **state) {
  (void)state;
  unsigned char img[64], lab[16];
  size_t ni = make_images(img), nl = make_labels(lab);
  write_bytes(path_of("img"), img, ni);
  write_bytes(path_of("lab"), lab, nl);
  write_gz(path_of("img.gz"), img, ni);
  write_gz(path_of("lab.gz"), lab, nl);
  em_dataset *d;
  assert_int_equal(em_dataset_open_idx(path_of("img"), path_of("lab"), 10, &d), EM_OK);
  check_images3(d);
  em_dataset_free(d);
  assert_int_equal(em_dataset_open_idx(path_of("img.gz"), path_of("lab.gz"), 10, &d), EM_OK);
  check_images3(d);
  em_dataset_free(d);

  /* The directory layout, the gzipped files only; then the plain ones win. */
  assert_int_equal(em_dataset_open_idx_dir(tmpdir, "t10k", 10, &d), EM_ERR_NOT_FOUND);
  assert_contains(em_last_error(), "t10k-images-idx3-ubyte.gz");
  write_gz(path_of("t10k-images-idx3-ubyte.gz"), img, ni);
  write_gz(path_of("t10k-labels-idx1-ubyte.gz"), lab, nl);
  assert_int_equal(em_dataset_open_idx_dir(tmpdir, "t10k", 10, &d), EM_OK);
  check_images3(d);
  em_dataset_free(d);
  img[4 + 12] = 99; /* the first pixel */
  write_bytes(path_of("t10k-images-idx3-ubyte"), img, ni);
  write_bytes(path_of("t10k-labels-idx1-ubyte"), lab, nl);
  assert_int_equal(em_dataset_open_idx_dir(tmpdir, "t10k", 10, &d), EM_OK);
  assert_int_equal(((const unsigned char *)em_dataset_stream_data(d, 0))[0], 99);
  em_dataset_free(d);
  img[4 + 12] = images3[0][0];

  /* Two gzip members, as `gzip -c a b` writes, read as one stream. */
  gzFile f = gzopen(path_of("two.gz"), "wb");
  assert_int_equal(gzwrite(f, img, 10), 10);
  assert_int_equal(gzclose(f), Z_OK);
  size_t n1;
  unsigned char *m1 = read_bytes(path_of("two.gz"), &n1);
  f = gzopen(path_of("two.gz"), "wb");
  assert_int_equal(gzwrite(f, img + 10, (unsigned)(ni - 10)), (int)(ni - 10));
  assert_int_equal(gzclose(f), Z_OK);
  size_t n2;
  unsigned char *m2 = read_bytes(path_of("two.gz"), &n2);
  unsigned char *both = malloc(n1 + n2);
  memcpy(both, m1, n1);
  memcpy(both + n1, m2, n2);
  write_bytes(path_of("two.gz"), both, n1 + n2);
  free(m1), free(m2), free(both);
  assert_int_equal(em_dataset_create(&d), EM_OK);
  assert_int_equal(em_dataset_add_idx(d, path_of("two.gz"), "x", 0), EM_OK);
  assert_memory_equal(em_dataset_stream_data(d, 0), images3, sizeof images3);
  em_dataset_free(d);
}

static void test_idx_element_types(void **state) {
  (void)state;
  unsigned char b[128];
  em_dataset *d;
  assert_int_equal(em_dataset_create(&d), EM_OK);
  /* signed bytes [2, 2]: -1, 127, -128, 5 */
  size_t h = idx_header(b, 0x09, 2, (const uint32_t[]){2, 2});
  memcpy(b + h, (const unsigned char[]){0xff, 0x7f, 0x80, 0x05}, 4);
  write_bytes(path_of("i8"), b, h + 4);
  assert_int_equal(em_dataset_add_idx(d, path_of("i8"), "i8", 0), EM_OK);
  /* shorts [2]: -2 (ff fe), 258 (01 02) */
  h = idx_header(b, 0x0B, 1, (const uint32_t[]){2});
  memcpy(b + h, (const unsigned char[]){0xff, 0xfe, 0x01, 0x02}, 4);
  write_bytes(path_of("i16"), b, h + 4);
  assert_int_equal(em_dataset_add_idx(d, path_of("i16"), "i16", 0), EM_OK);
  /* ints [2]: -3, 0x01020304 */
  h = idx_header(b, 0x0C, 1, (const uint32_t[]){2});
  memcpy(b + h, (const unsigned char[]){0xff, 0xff, 0xff, 0xfd, 1, 2, 3, 4}, 8);
  write_bytes(path_of("i32"), b, h + 8);
  assert_int_equal(em_dataset_add_idx(d, path_of("i32"), "i32", 0), EM_OK);
  /* floats [2]: 1.5 = 0x3fc00000, -2 = 0xc0000000 */
  h = idx_header(b, 0x0D, 1, (const uint32_t[]){2});
  memcpy(b + h, (const unsigned char[]){0x3f, 0xc0, 0, 0, 0xc0, 0, 0, 0}, 8);
  write_bytes(path_of("f32"), b, h + 8);
  assert_int_equal(em_dataset_add_idx(d, path_of("f32"), "f32", 0), EM_OK);
  /* doubles [2]: 0.25 = 0x3fd0000000000000, -1e300's bits are not needed: 3 = 0x4008000000000000 */
  h = idx_header(b, 0x0E, 1, (const uint32_t[]){2});
  memcpy(b + h, (const unsigned char[]){0x3f, 0xd0, 0, 0, 0, 0, 0, 0, 0x40, 0x08, 0, 0, 0, 0, 0, 0}, 16);
  write_bytes(path_of("f64"), b, h + 16);
  assert_int_equal(em_dataset_add_idx(d, path_of("f64"), "f64", 0), EM_OK);
  /* int labels [2]: 3, 1 as a class stream */
  h = idx_header(b, 0x0C, 1, (const uint32_t[]){2});
  memcpy(b + h, (const unsigned char[]){0, 0, 0, 3, 0, 0, 0, 1}, 8);
  write_bytes(path_of("cls"), b, h + 8);
  assert_int_equal(em_dataset_add_idx(d, path_of("cls"), "cls", 4), EM_OK);

  em_stream_desc s;
  assert_int_equal(em_dataset_stream(d, 0, &s), EM_OK);
  assert_int_equal(s.dtype, EM_I32);
  assert_int_equal(s.ndim, 1);
  assert_int_equal(s.shape[0], 2);
  const int32_t *i8 = em_dataset_stream_data(d, 0);
  assert_int_equal(i8[0], -1), assert_int_equal(i8[1], 127), assert_int_equal(i8[2], -128), assert_int_equal(i8[3], 5);
  const int32_t *i16 = em_dataset_stream_data(d, 1);
  assert_int_equal(i16[0], -2), assert_int_equal(i16[1], 258);
  const int32_t *i32 = em_dataset_stream_data(d, 2);
  assert_int_equal(i32[0], -3), assert_int_equal(i32[1], 0x01020304);
  assert_int_equal(em_dataset_stream(d, 3, &s), EM_OK);
  assert_int_equal(s.dtype, EM_F32);
  const float *f32 = em_dataset_stream_data(d, 3);
  assert_true(f32[0] == 1.5f && f32[1] == -2.0f);
  assert_int_equal(em_dataset_stream(d, 4, &s), EM_OK);
  assert_int_equal(s.dtype, EM_F64);
  const double *f64 = em_dataset_stream_data(d, 4);
  assert_true(f64[0] == 0.25 && f64[1] == 3.0);
  assert_int_equal(em_dataset_stream(d, 5, &s), EM_OK);
  assert_int_equal(s.classes, 4);
  const int32_t *cls = em_dataset_stream_data(d, 5);
  assert_int_equal(cls[0], 3), assert_int_equal(cls[1], 1);

  /* A stream of another sample count is refused, and the data set keeps its six. */
  h = idx_header(b, 0x08, 1, (const uint32_t[]){3});
  write_bytes(path_of("three"), b, h + 3);
  assert_int_equal(em_dataset_add_idx(d, path_of("three"), "three", 0), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "3 samples");
  assert_int_equal(em_dataset_n_streams(d), 6);
  assert_int_equal(em_dataset_add_idx(d, path_of("cls"), "cls", 4), EM_ERR_INVALID_ARGUMENT); /* same name */
  em_dataset_free(d);
}

/* Opening `name` (written with bytes b) as labels fails with `code` and a
 * message holding each of the needles. */
static void expect_idx_error(const char *name, const unsigned char *b, size_t n, int gz, int64_t classes,
                             em_status code, const char *n1, const char *n2) {
  const char *p = path_of(name);
  if (gz) write_gz(p, b, n);
  else write_bytes(p, b, n);
  em_dataset *d;
  assert_int_equal(em_dataset_create(&d), EM_OK);
  assert_int_equal(em_dataset_add_idx(d, p, "x", classes), code);
  assert_contains(em_last_error(), name);
  if (n1) assert_contains(em_last_error(), n1);
  if (n2) assert_contains(em_last_error(), n2);
  assert_int_equal(em_dataset_n_streams(d), 0);
  em_dataset_free(d);
}

static void test_idx_errors(void **state) {
  (void)state;
  unsigned char img[64], lab[16];
  size_t ni = make_images(img), nl = make_labels(lab);
  unsigned char bad[64];
  memcpy(bad, img, ni);
  bad[0] = 0x1e; /* neither IDX nor gzip */
  expect_idx_error("magic", bad, ni, 0, 0, EM_ERR_CORRUPT, "byte 0", "not an IDX file");
  memcpy(bad, img, ni);
  bad[2] = 0x0A;
  expect_idx_error("type", bad, ni, 0, 0, EM_ERR_CORRUPT, "byte 2", "0x0a");
  expect_idx_error("short_header", img, 10, 0, 0, EM_ERR_CORRUPT, "byte 10", "header");
  expect_idx_error("truncated", img, ni - 1, 0, 0, EM_ERR_CORRUPT, "byte 33", "truncated");
  expect_idx_error("truncated_gz", img, ni - 5, 1, 0, EM_ERR_CORRUPT, "byte 29", "truncated");
  memcpy(bad, img, ni);
  bad[ni] = 1;
  expect_idx_error("extra", bad, ni + 1, 0, 0, EM_ERR_CORRUPT, "byte 34", "after");
  expect_idx_error("empty", img, 0, 0, 0, EM_ERR_CORRUPT, "byte 0", NULL);
  /* Label 9 of sample 2 (byte 8 + 2 = 10) is out of range for 9 classes. */
  expect_idx_error("labels_range", lab, nl, 0, 9, EM_ERR_CORRUPT, "byte 10", "label 9");
  expect_idx_error("labels_range.gz", lab, nl, 1, 7, EM_ERR_CORRUPT, "byte 8", "label 7");
  expect_idx_error("labels_3d", img, ni, 0, 10, EM_ERR_CORRUPT, "labels must be one integer", NULL);

  /* gzip: a damaged deflate stream and a cut-off file. */
  write_gz(path_of("ok.gz"), img, ni);
  size_t n;
  unsigned char *gz = read_bytes(path_of("ok.gz"), &n);
  unsigned char *cut = malloc(n);
  memcpy(cut, gz, n);
  cut[3] = 0xE0; /* reserved flag bits */
  expect_idx_error("flags.gz", cut, n, 0, 0, EM_ERR_CORRUPT, "gzip", "byte");
  expect_idx_error("cut.gz", gz, n - 12, 0, 0, EM_ERR_CORRUPT, "gzip stream is truncated", NULL);
  memcpy(cut, gz, n);
  cut[n - 6] ^= 0xff; /* the CRC-32 */
  expect_idx_error("crc.gz", cut, n, 0, 0, EM_ERR_CORRUPT, "gzip", NULL);
  free(cut), free(gz);

  em_dataset *d;
  assert_int_equal(em_dataset_open_idx(path_of("missing"), path_of("lab"), 10, &d), EM_ERR_IO);
  assert_contains(em_last_error(), "missing");
  /* A directory opens, but is no file to read: an I/O error naming it, for
   * every reader (it was "out of memory for 9223372036854775807 bytes", its
   * size as seeking to the end gives it on ext4). */
  assert_int_equal(em_dataset_create(&d), EM_OK);
  assert_int_equal(em_dataset_add_idx(d, tmpdir, "x", 0), EM_ERR_IO);
  assert_contains(em_last_error(), "directory");
  assert_int_equal(em_dataset_n_streams(d), 0);
  em_dataset_free(d);
  assert_int_equal(em_dataset_open_emb(tmpdir, &d), EM_ERR_IO);
  assert_contains(em_last_error(), "directory");
  const em_ctf_stream one = {.name = "a", .dim = 1};
  assert_int_equal(em_dataset_open_ctf(tmpdir, &one, 1, &d), EM_ERR_IO);
  assert_contains(em_last_error(), "directory");
  /* A pipe has no size to read up front: read to its end, the buffer
   * growing past its first 64 KiB (20000 samples of 5 bytes). */
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/pipe.ctf", tmpdir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    FILE *w = fopen(fifo, "w");
    for (int i = 0; w && i < 20000; i++) fprintf(w, "|a %d\n", i % 10);
    _exit(w && fclose(w) == 0 ? 0 : 1);
  }
  assert_int_equal(em_dataset_open_ctf(fifo, &one, 1, &d), EM_OK);
  int wst;
  assert_int_equal(waitpid(child, &wst, 0), child);
  assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
  assert_int_equal(em_dataset_samples(d), 20000);
  const float *a = em_dataset_stream_data(d, 0);
  assert_true(a[0] == 0 && a[13] == 3 && a[19999] == 9);
  em_dataset_free(d);
  unlink(fifo);
}

/* em_gunzip refuses an output over its limit (a gzip bomb), whatever the
 * growth of its buffer: exactly the limit passes, one byte more fails, and
 * so does an output between the limit and twice it (the buffer once grew by
 * doubling and only checked the limit before growing). With and without the
 * trailer's size hint (a second member follows the first). */
static void test_gunzip_limit(void **state) {
  (void)state;
  const size_t limit = 100000;
  static const size_t sizes[] = {100000, 100001, 150000, 199999};
  unsigned char *plain = calloc(1, 200000);
  assert_non_null(plain);
  for (size_t i = 0; i < 200000; i++) plain[i] = (unsigned char)(i * 31 / 7);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (int members = 1; members <= 2; members++) {
      /* Two members: the second a 1-byte file, so the trailer's size says 1. */
      write_gz(path_of("lim.gz"), plain, sizes[k] - (size_t)(members - 1));
      size_t n1, n2 = 0;
      unsigned char *a = read_bytes(path_of("lim.gz"), &n1), *b = NULL;
      if (members == 2) {
        write_gz(path_of("one.gz"), plain + sizes[k] - 1, 1);
        b = read_bytes(path_of("one.gz"), &n2);
        a = realloc(a, n1 + n2);
        memcpy(a + n1, b, n2);
      }
      unsigned char *out;
      size_t out_size;
      int gz;
      em_status st = em_gunzip("lim.gz", a, n1 + n2, limit, &out, &out_size, &gz);
      assert_int_equal(gz, 1);
      if (sizes[k] <= limit) {
        if (st != EM_OK) fail_msg("%zu bytes (%d members): %s", sizes[k], members, em_last_error());
        assert_int_equal(out_size, sizes[k]);
        assert_memory_equal(out, plain, sizes[k]);
        free(out);
      } else {
        if (st == EM_OK) fail_msg("%zu bytes (%d members) over a limit of %zu: accepted", sizes[k], members, limit);
        assert_int_equal(st, EM_ERR_CORRUPT);
        assert_contains(em_last_error(), "more than 100000 bytes");
        assert_null(out);
      }
      free(a);
      free(b);
    }
  free(plain);
}

/* ------------------------------------------------------------------ CTF --- */

static const em_ctf_stream ctf_decl[] = {
  {.name = "features", .dim = 3},
  {.name = "sp", .dim = 5, .sparse = 1},
  {.name = "labels", .dim = 4, .sparse = 1, .is_class = 1},
};

static void test_ctf(void **state) {
  (void)state;
  const char *text =
    "|# a comment line\n"
    "|features 1 2 3 |sp 0:1 4:2.5 |labels 2:1\n"
    "\n"
    "7 |features -1.5\t0 1e2 |# note |# with an escaped pipe |labels 0:1\r\n"
    "7 |sp 3:-1\n"
    "8 |labels 3:1 |features 0.5 .25 -0\n"
    "|features 4 5 6|labels 1:1|sp 1:1 1:2";
  const char *p = path_of("data.ctf");
  write_bytes(p, text, strlen(text));
  em_dataset *d;
  assert_int_equal(em_dataset_open_ctf(p, ctf_decl, 3, &d), EM_OK);
  assert_int_equal(em_dataset_samples(d), 4);
  const float feat[4][3] = {{1, 2, 3}, {-1.5f, 0, 100}, {0.5f, 0.25f, -0.0f}, {4, 5, 6}};
  const float sp[4][5] = {{1, 0, 0, 0, 2.5f}, {0, 0, 0, -1, 0}, {0}, {0, 3, 0, 0, 0}};
  const int32_t lab[4] = {2, 0, 3, 1};
  assert_memory_equal(em_dataset_stream_data(d, 0), feat, sizeof feat);
  assert_memory_equal(em_dataset_stream_data(d, 1), sp, sizeof sp);
  assert_memory_equal(em_dataset_stream_data(d, 2), lab, sizeof lab);
  em_stream_desc s;
  assert_int_equal(em_dataset_stream(d, 1, &s), EM_OK);
  assert_int_equal(s.dtype, EM_F32);
  assert_int_equal(s.ndim, 1);
  assert_int_equal(s.shape[0], 5);
  assert_int_equal(em_dataset_stream(d, 2, &s), EM_OK);
  assert_int_equal(s.classes, 4);
  em_dataset_free(d);

  /* The same, gzipped; and a dense one-hot class stream. */
  write_gz(path_of("data.ctf.gz"), text, strlen(text));
  assert_int_equal(em_dataset_open_ctf(path_of("data.ctf.gz"), ctf_decl, 3, &d), EM_OK);
  assert_memory_equal(em_dataset_stream_data(d, 2), lab, sizeof lab);
  em_dataset_free(d);
  const em_ctf_stream dense_cls[] = {{.name = "y", .dim = 3, .is_class = 1}};
  write_bytes(p, "|y 0 0 1\n|y 0 1 0\n", 18);
  assert_int_equal(em_dataset_open_ctf(p, dense_cls, 1, &d), EM_OK);
  const int32_t *y = em_dataset_stream_data(d, 0);
  assert_int_equal(y[0], 2), assert_int_equal(y[1], 1);
  em_dataset_free(d);
  write_bytes(p, "|y 0 0 1\n|y 0 0.9 0\n", 20);
  d = NULL;
  assert_int_equal(em_dataset_open_ctf(p, dense_cls, 1, &d), EM_ERR_CORRUPT);
  assert_null(d);
  assert_contains(em_last_error(), "line 2: 'y' is a class stream but its value at index 1 is 0.9");
}

/* An application that set a locale with a decimal comma (de_DE) must still
 * read "1.5" in a CTF file as 1.5: data files are written with '.'. The
 * locale is built into the test's directory with localedef (Debian's
 * locales sources), since a fresh machine has none but C. */
static void test_ctf_under_a_decimal_comma_locale(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", tmpdir);
  if (system(cmd) != 0) {
    print_message("SKIPPED: localedef could not build de_DE.UTF-8 (no locales sources)\n");
    skip();
  }
  setenv("LOCPATH", tmpdir, 1);
  if (!setlocale(LC_NUMERIC, "de_DE.UTF-8")) {
    unsetenv("LOCPATH");
    print_message("SKIPPED: setlocale(de_DE.UTF-8) failed after localedef\n");
    skip();
  }
  const float comma = strtof("1.5", NULL); /* the locale really reads '.' as the end of the number */
  const char *p = path_of("locale.ctf");
  const char *text = "|features 1.5 -2.25 1e-1 |labels 1:1\n";
  write_bytes(p, text, strlen(text));
  em_dataset *d = NULL;
  em_status st = em_dataset_open_ctf(p, ctf_decl, 3, &d);
  setlocale(LC_NUMERIC, "C");
  unsetenv("LOCPATH");
  assert_float_equal(comma, 1.0f, 0.0f);
  if (st) fail_msg("under de_DE: %s", em_last_error());
  const float feat[3] = {1.5f, -2.25f, 0.1f};
  assert_memory_equal(em_dataset_stream_data(d, 0), feat, sizeof feat);
  em_dataset_free(d);
}

static void expect_ctf_error(const char *text, const char *n1, const char *n2) {
  const char *p = path_of("bad.ctf");
  write_bytes(p, text, strlen(text));
  em_dataset *d = NULL;
  assert_int_equal(em_dataset_open_ctf(p, ctf_decl, 3, &d), EM_ERR_CORRUPT);
  assert_null(d);
  assert_contains(em_last_error(), "bad.ctf");
  assert_contains(em_last_error(), n1);
  if (n2) assert_contains(em_last_error(), n2);
}

static void test_ctf_errors(void **state) {
  (void)state;
  const char *ok = "|features 1 2 3 |labels 0:1\n";
  char buf[256];
  snprintf(buf, sizeof buf, "%s|features 1 2x 3 |labels 0:1\n", ok);
  expect_ctf_error(buf, "line 2, column 14", "not a number: unexpected character 'x'");
  snprintf(buf, sizeof buf, "%s%s|features 1 2 |labels 0:1\n", ok, ok);
  expect_ctf_error(buf, "line 3", "too few values");
  expect_ctf_error("|features 1 2 3 4 |labels 0:1\n", "line 1, column 17", "too many values");
  expect_ctf_error("|features 1 2 3 |labels 4:1\n", "line 1, column 25", "sparse index out of range");
  expect_ctf_error("|features 1 2 3 |labels 2\n", "line 1", "index:value");
  expect_ctf_error("|features 1 2 3 |lables 0:1\n", "line 1, column 18", "unknown input 'lables'");
  expect_ctf_error("|features 1 2 3 |labels 0:1\n|features 1 2 3 |labels 0:1 |labels 1:1\n", "line 2",
                   "given at line 2 already");
  expect_ctf_error("5 |features 1 2 3 |labels 0:1\n5 |features 1 2 3\n", "line 2", "sequence");
  expect_ctf_error("|features 1 2 3 |labels 0:1 1:1\n", "line 1", "two nonzero");
  expect_ctf_error("|features 1 2 3 |labels\n", "line 1", "no nonzero");
  /* One-hot is strict: the class is marked with 1, as CNTK's format has it
   * (a sparse or dense mark of another value is refused, file and line). */
  snprintf(buf, sizeof buf, "%s|features 1 2 3 |labels 2:0.5\n", ok);
  expect_ctf_error(buf, "line 2", "index 2 is 0.5");
  expect_ctf_error("|features 1 2 3 |labels 1:2\n", "line 1", "index 1 is 2; it must be one-hot");
  expect_ctf_error("|features 1 2 3 |labels 3:-1\n", "line 1", "index 3 is -1");
  expect_ctf_error("|features 1 2 3 |labels 0:0.5 0:0.5 1:0\n|features 1 2 3 |labels 0:3\n", "line 2", "is 3");
  expect_ctf_error("|labels 0:1\n", "line 1", "no 'features'");
  expect_ctf_error("|features 1 2 3 |labels 0:1\n|sp 1:1\n", "line 2", "no 'features'");
  expect_ctf_error("features 1 2 3\n", "line 1, column 1", "expected '|'");
  expect_ctf_error("|features 1 2 nan |labels 0:1\n", "line 1, column 15", "not a number");
  expect_ctf_error("|features 1 2 1e99 |labels 0:1\n", "line 1, column 15", "finite");
  expect_ctf_error("| 1 2 3\n", "line 1, column 2", "name is missing");
  /* A sparse index given twice adds up: two finite values whose sum is not
   * (3e38 + 3e38 overflows f32) must not reach the data set as inf. */
  expect_ctf_error("|features 1 2 3 |sp 1:3e38 1:3e38 |labels 0:1\n", "line 1, column 28", "not finite");

  em_dataset *d;
  assert_int_equal(em_dataset_open_ctf(path_of("bad.ctf"), ctf_decl, 0, &d), EM_ERR_INVALID_ARGUMENT);
  const em_ctf_stream twice[] = {{.name = "a", .dim = 1}, {.name = "a", .dim = 2}};
  assert_int_equal(em_dataset_open_ctf(path_of("bad.ctf"), twice, 2, &d), EM_ERR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------------ EMB --- */

/* A data set of 5 samples: u8 images [2, 3], f32 [2], i32 classes of 3. */
static em_dataset *small_dataset(void) {
  em_dataset *d;
  assert_int_equal(em_dataset_create(&d), EM_OK);
  unsigned char img[5][6];
  float x[5][2];
  int32_t y[5];
  for (int i = 0; i < 5; i++) {
    for (int k = 0; k < 6; k++) img[i][k] = (unsigned char)(i * 40 + k * 7);
    x[i][0] = (float)i * 0.5f, x[i][1] = -(float)i;
    y[i] = i % 3;
  }
  em_stream_desc s = {.name = "features", .dtype = EM_U8, .ndim = 2, .shape = {2, 3}};
  assert_int_equal(em_dataset_add_stream(d, &s, 5, img, sizeof img), EM_OK);
  s = (em_stream_desc){.name = "x", .dtype = EM_F32, .ndim = 1, .shape = {2}};
  assert_int_equal(em_dataset_add_stream(d, &s, 5, x, sizeof x), EM_OK);
  s = (em_stream_desc){.name = "labels", .dtype = EM_I32, .classes = 3};
  assert_int_equal(em_dataset_add_stream(d, &s, 5, y, sizeof y), EM_OK);
  return d;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++, v >>= 8) p[i] = (unsigned char)v;
}

static void test_emb_roundtrip_and_layout(void **state) {
  (void)state;
  em_dataset *d = small_dataset(), *e;
  const char *p = path_of("small.emb");
  assert_int_equal(em_dataset_write(d, p), EM_OK);
  assert_int_equal(em_dataset_open_emb(p, &e), EM_OK);
  assert_int_equal(em_dataset_samples(e), 5);
  assert_int_equal(em_dataset_n_streams(e), 3);
  for (int i = 0; i < 3; i++) {
    em_stream_desc a, b;
    assert_int_equal(em_dataset_stream(d, i, &a), EM_OK);
    assert_int_equal(em_dataset_stream(e, i, &b), EM_OK);
    assert_memory_equal(&a, &b, sizeof a);
  }
  assert_memory_equal(em_dataset_stream_data(d, 0), em_dataset_stream_data(e, 0), 30);
  assert_memory_equal(em_dataset_stream_data(d, 1), em_dataset_stream_data(e, 1), 40);
  assert_memory_equal(em_dataset_stream_data(d, 2), em_dataset_stream_data(e, 2), 20);
  em_dataset_free(e);

  /* The file, byte by byte as docs/dataset-format.md lays it out. */
  unsigned char want[512];
  memset(want, 0, sizeof want);
  size_t at = 0;
  memcpy(want, "EMBDATA", 8), at = 8;
  put_le(want + at, 1, 4), at += 4;        /* version */
  put_le(want + at, 3, 4), at += 4;        /* streams */
  put_le(want + at, 5, 8), at += 8;        /* samples */
  want[at++] = 8, memcpy(want + at, "features", 8), at += 8, want[at++] = 6, want[at++] = 2;
  put_le(want + at, 2, 8), at += 8, put_le(want + at, 3, 8), at += 8, put_le(want + at, 0, 8), at += 8;
  want[at++] = 1, want[at++] = 'x', want[at++] = 0, want[at++] = 1;
  put_le(want + at, 2, 8), at += 8, put_le(want + at, 0, 8), at += 8;
  want[at++] = 6, memcpy(want + at, "labels", 6), at += 6, want[at++] = 4, want[at++] = 0;
  put_le(want + at, 3, 8), at += 8;
  at = (at + 7) & ~(size_t)7;
  memcpy(want + at, em_dataset_stream_data(d, 0), 30), at += 32;
  memcpy(want + at, em_dataset_stream_data(d, 1), 40), at += 40;
  memcpy(want + at, em_dataset_stream_data(d, 2), 20), at += 24;
  put_le(want + at, XXH3_64bits(want, at), 8), at += 8;
  size_t n;
  unsigned char *got = read_bytes(p, &n);
  assert_int_equal(n, at);
  assert_memory_equal(got, want, at);

  /* Damage: a flipped data bit, a cut, another magic, another version. */
  got[at - 20] ^= 1;
  write_bytes(path_of("flip.emb"), got, n);
  assert_int_equal(em_dataset_open_emb(path_of("flip.emb"), &e), EM_ERR_CORRUPT);
  assert_contains(em_last_error(), "flip.emb");
  assert_contains(em_last_error(), "checksum mismatch");
  got[at - 20] ^= 1;
  write_bytes(path_of("cut.emb"), got, n - 30);
  assert_int_equal(em_dataset_open_emb(path_of("cut.emb"), &e), EM_ERR_CORRUPT);
  assert_contains(em_last_error(), "truncated");
  got[0] = 'X';
  write_bytes(path_of("magic.emb"), got, n);
  assert_int_equal(em_dataset_open_emb(path_of("magic.emb"), &e), EM_ERR_CORRUPT);
  assert_contains(em_last_error(), "byte 0");
  got[0] = 'E', got[8] = 2;
  write_bytes(path_of("version.emb"), got, n);
  assert_int_equal(em_dataset_open_emb(path_of("version.emb"), &e), EM_ERR_CORRUPT);
  assert_contains(em_last_error(), "byte 8: EMB version 2");
  free(got);

  /* A slice, and the refusals of add_stream. */
  assert_int_equal(em_dataset_slice(d, 1, 3, &e), EM_OK);
  assert_int_equal(em_dataset_samples(e), 3);
  assert_memory_equal(em_dataset_stream_data(e, 1), (const float *)em_dataset_stream_data(d, 1) + 2, 24);
  em_dataset_free(e);
  assert_int_equal(em_dataset_slice(d, 3, 3, &e), EM_ERR_INVALID_ARGUMENT);
  int32_t bad[5] = {0, 1, 2, 3, 0};
  em_stream_desc s = {.name = "y2", .dtype = EM_I32, .classes = 3};
  assert_int_equal(em_dataset_add_stream(d, &s, 5, bad, sizeof bad), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "sample 3: label 3");
  assert_int_equal(em_dataset_add_stream(d, &s, 5, bad, 16), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_dataset_n_streams(d), 3);
  em_dataset_free(d);
}

/* ----------------------------------------------------- the shuffle's PRNG --- */

static uint64_t ref_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint64_t ref_next(uint64_t *s) {
  *s += 0x9E3779B97F4A7C15ull;
  return ref_mix(*s);
}
static uint64_t ref_below(uint64_t *s, uint64_t m) {
  uint64_t t = (0 - m) % m;
  for (;;) {
    uint64_t r = ref_next(s);
    if (r >= t) return r % m;
  }
}
/* Sweep s's order as reader.h documents it. */
static void ref_perm(uint64_t seed, uint64_t sweep, int64_t n, int64_t *p) {
  for (int64_t i = 0; i < n; i++) p[i] = i;
  uint64_t g = ref_mix(seed ^ ref_mix(sweep + 1));
  for (int64_t i = n - 1; i >= 1; i--) {
    int64_t j = (int64_t)ref_below(&g, (uint64_t)i + 1), t = p[i];
    p[i] = p[j], p[j] = t;
  }
}

/* A data set of n samples whose "features" is the index (f32 [1]) and
 * "labels" index % 10. */
static em_dataset *index_dataset(int64_t n) {
  em_dataset *d;
  assert_int_equal(em_dataset_create(&d), EM_OK);
  float *x = malloc((size_t)n * sizeof *x);
  int32_t *y = malloc((size_t)n * sizeof *y);
  for (int64_t i = 0; i < n; i++) x[i] = (float)i, y[i] = (int32_t)(i % 10);
  em_stream_desc s = {.name = "features", .dtype = EM_F32, .ndim = 1, .shape = {1}};
  assert_int_equal(em_dataset_add_stream(d, &s, n, x, (size_t)n * 4), EM_OK);
  s = (em_stream_desc){.name = "labels", .dtype = EM_I32, .classes = 10};
  assert_int_equal(em_dataset_add_stream(d, &s, n, y, (size_t)n * 4), EM_OK);
  free(x), free(y);
  return d;
}

/* The samples (their indices) of the next count minibatches. */
static int64_t take(em_minibatch_source *s, int count, int64_t *out) {
  int64_t k = 0;
  for (int m = 0; m < count; m++) {
    em_minibatch mb = {0};
    assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
    if (mb.end_of_data) break;
    assert_non_null(mb.features);
    assert_non_null(mb.labels);
    const float *x = em_tensor_data(mb.features);
    const int32_t *y = em_tensor_data(mb.labels);
    assert_int_equal(em_tensor_shape(mb.features)[0], mb.samples);
    for (int64_t i = 0; i < mb.samples; i++) {
      out[k] = (int64_t)x[i];
      assert_int_equal(y[i], out[k] % 10);
      k++;
    }
    em_minibatch_clear(&mb);
  }
  return k;
}

static void test_shuffle(void **state) {
  (void)state;
  /* SplitMix64's published test vector (seed 1234567). */
  uint64_t g = 1234567;
  assert_true(ref_next(&g) == 6457827717110365317ull);
  assert_true(ref_next(&g) == 3203168211198807973ull);
  assert_true(ref_next(&g) == 9817491932198370423ull);

  enum { N = 37, SWEEPS = 4 };
  em_dataset *d = index_dataset(N);
  em_minibatch_options o = {.batch_size = 5, .seed = 42, .shuffle = 1, .epoch_size = 50};
  em_minibatch_source *s;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  int64_t got[N * SWEEPS + 8], want[N];
  /* 148 samples = 30 minibatches of 5 cut at the epoch ends 50, 100 (and 150). */
  int64_t k = 0;
  while (k < N * SWEEPS) k += take(s, 1, got + k);
  for (int sw = 0; sw < SWEEPS; sw++) {
    ref_perm(42, (uint64_t)sw, N, want);
    assert_memory_equal(got + sw * N, want, sizeof want);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) seen[got[sw * N + i]]++;
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
  }
  assert_memory_not_equal(got, got + N, N * sizeof(int64_t));
  em_minibatch_source_free(s);

  /* Another seed, another order; no shuffle, the stored order. */
  o.seed = 43;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  int64_t other[N + 8];
  k = 0;
  while (k < N) k += take(s, 1, other + k);
  assert_memory_not_equal(other, got, N * sizeof(int64_t));
  em_minibatch_source_free(s);
  o.shuffle = 0;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  k = 0;
  while (k < N) k += take(s, 1, other + k);
  for (int i = 0; i < N; i++) assert_int_equal(other[i], i);
  em_minibatch_source_free(s);
  em_dataset_free(d);
}

static void expect_mb(em_minibatch_source *s, int64_t samples, int64_t epoch, int64_t sweep, int eoe, int eos,
                      uint64_t seen) {
  em_minibatch mb = {0};
  assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
  assert_int_equal(mb.end_of_data, 0);
  assert_int_equal(mb.samples, samples);
  assert_int_equal(mb.epoch, epoch);
  assert_int_equal(mb.sweep, sweep);
  assert_int_equal(mb.end_of_epoch, eoe);
  assert_int_equal(mb.end_of_sweep, eos);
  assert_int_equal(mb.samples_seen, seen);
  assert_int_equal(mb.n_streams, 2);
  assert_int_equal(em_tensor_ndim(mb.features), 2);
  assert_int_equal(em_tensor_shape(mb.features)[0], samples);
  assert_int_equal(em_tensor_dtype(mb.labels), EM_I32);
  em_minibatch_clear(&mb);
}

static void test_epochs_and_eval(void **state) {
  (void)state;
  em_dataset *d = index_dataset(10);
  em_minibatch_source *s;
  /* Epoch = sweep = 10, batches of 4: 4, 4, 2 per epoch. */
  em_minibatch_options o = {.batch_size = 4, .shuffle = 1, .seed = 7};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  expect_mb(s, 4, 0, 0, 0, 0, 4);
  expect_mb(s, 4, 0, 0, 0, 0, 8);
  expect_mb(s, 2, 0, 0, 1, 1, 10);
  expect_mb(s, 4, 1, 1, 0, 0, 14);
  em_minibatch_position pos;
  assert_int_equal(em_minibatch_get_position(s, &pos), EM_OK);
  assert_int_equal(pos.samples_seen, 14);
  assert_int_equal(pos.epoch, 1);
  assert_int_equal(pos.sweep, 1);
  assert_int_equal(pos.sweep_position, 4);
  assert_int_equal(pos.epoch_size, 10);
  assert_int_equal(pos.sweep_size, 10);
  em_minibatch_source_free(s);

  /* Epoch of 25 = 2.5 sweeps: minibatches cross sweep ends, never epoch ends. */
  o.epoch_size = 25;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  expect_mb(s, 4, 0, 0, 0, 0, 4);
  expect_mb(s, 4, 0, 0, 0, 0, 8);
  expect_mb(s, 4, 0, 0, 0, 1, 12);  /* samples 8..11: sweep 0's last two */
  expect_mb(s, 4, 0, 1, 0, 0, 16);
  expect_mb(s, 4, 0, 1, 0, 1, 20);  /* 16..19 */
  expect_mb(s, 4, 0, 2, 0, 0, 24);
  expect_mb(s, 1, 0, 2, 1, 0, 25);  /* the epoch's end */
  expect_mb(s, 4, 1, 2, 0, 0, 29);
  expect_mb(s, 4, 1, 2, 0, 1, 33);  /* 29..32 */
  em_minibatch_source_free(s);

  /* Evaluation: one pass in order, a short last minibatch, then the end; rewind. */
  o = (em_minibatch_options){.batch_size = 4, .max_sweeps = 1};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  for (int pass = 0; pass < 2; pass++) {
    int64_t idx[16];
    assert_int_equal(take(s, 3, idx), 10);
    for (int i = 0; i < 10; i++) assert_int_equal(idx[i], i);
    for (int twice = 0; twice < 2; twice++) {
      em_minibatch mb = {0};
      assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
      assert_int_equal(mb.end_of_data, 1);
      assert_int_equal(mb.samples, 0);
      assert_null(mb.features);
      assert_null(mb.values[0]);
      em_minibatch_clear(&mb);
    }
    assert_int_equal(em_minibatch_rewind(s), EM_OK);
  }
  em_minibatch_source_free(s);

  /* Refusals. */
  o = (em_minibatch_options){.batch_size = 0};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "batch_size");
  o = (em_minibatch_options){.batch_size = 2, .transform = {.random_flip = 1}};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "no image stream");
  o = (em_minibatch_options){.batch_size = 2, .image_stream = "nope"};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  em_dataset_free(d);
}

/* --------------------------------------------------------- transforms --- */

/* 64 images [2, 5, 6] of bytes, labels i % 10. */
static em_dataset *image_dataset(void) {
  enum { N = 64, C = 2, H = 5, W = 6 };
  em_dataset *d;
  assert_int_equal(em_dataset_create(&d), EM_OK);
  unsigned char *img = malloc(N * C * H * W);
  for (int i = 0; i < N * C * H * W; i++) img[i] = (unsigned char)((i * 2654435761u) >> 24);
  int32_t y[N];
  for (int i = 0; i < N; i++) y[i] = i % 10;
  em_stream_desc s = {.name = "features", .dtype = EM_U8, .ndim = 3, .shape = {C, H, W}};
  assert_int_equal(em_dataset_add_stream(d, &s, N, img, N * C * H * W), EM_OK);
  s = (em_stream_desc){.name = "labels", .dtype = EM_I32, .classes = 10};
  assert_int_equal(em_dataset_add_stream(d, &s, N, y, sizeof y), EM_OK);
  free(img);
  return d;
}

/* The plain reference: sample `raw` [C,H,W] scaled, normalised, padded, then
 * the window at (cy, cx) of OH x OW, flipped or not, in float64. */
static void ref_transform(const unsigned char *raw, int C, int H, int W, double scale, const double *mean,
                          const double *sd, int pad, int OH, int OW, int cy, int cx, int flip, double *out) {
  int PH = H + 2 * pad, PW = W + 2 * pad;
  double *padded = calloc((size_t)(C * PH * PW), sizeof *padded);
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        padded[(c * PH + y + pad) * PW + x + pad] = (raw[(c * H + y) * W + x] * scale - mean[c]) / sd[c];
  for (int c = 0; c < C; c++)
    for (int y = 0; y < OH; y++)
      for (int x = 0; x < OW; x++) {
        int sx = flip ? OW - 1 - x : x;
        out[(c * OH + y) * OW + x] = padded[(c * PH + cy + y) * PW + cx + sx];
      }
  free(padded);
}

static int close_to(const float *got, const double *want, int n) {
  for (int i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > 1e-5 * (1 + fabs(want[i]))) return 0;
  return 1;
}

static void test_transforms(void **state) {
  (void)state;
  enum { N = 64, C = 2, H = 5, W = 6 };
  em_dataset *d = image_dataset();
  const unsigned char *raw = em_dataset_stream_data(d, 0);
  const double mean[2] = {0.25, 0.5}, sd[2] = {0.5, 2.0};
  em_minibatch_options o = {.batch_size = 16, .max_sweeps = 1};
  o.transform = (em_image_transform){.scale = 1.0f / 255, .norm_channels = 2, .mean = {0.25f, 0.5f},
                                     .std = {0.5f, 2.0f}, .pad = 2, .crop_h = 5, .crop_w = 4};
  /* Centre crop: offsets ((5+4-5)/2, (6+4-4)/2) = (2, 3). */
  em_minibatch_source *s;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  double want[C * 5 * 4];
  for (int b = 0; b < N / 16; b++) {
    em_minibatch mb = {0};
    assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
    assert_int_equal(em_tensor_ndim(mb.features), 4);
    const int64_t *sh = em_tensor_shape(mb.features);
    assert_true(sh[0] == 16 && sh[1] == C && sh[2] == 5 && sh[3] == 4);
    const float *x = em_tensor_data(mb.features);
    for (int i = 0; i < 16; i++) {
      int sample = b * 16 + i;
      ref_transform(raw + sample * C * H * W, C, H, W, 1.0 / 255, mean, sd, 2, 5, 4, 2, 3, 0, want);
      assert_true(close_to(x + i * C * 20, want, C * 20));
    }
    em_minibatch_clear(&mb);
  }
  em_minibatch_source_free(s);

  /* Random crop and flip: each output is the reference at some offset and
   * flip; over 6 sweeps every offset (5 x 7) and both flips occur. */
  o = (em_minibatch_options){.batch_size = 16, .seed = 3, .shuffle = 1, .layout = EM_LAYOUT_FLAT};
  o.transform = (em_image_transform){.scale = 2.0f, .pad = 2, .crop_h = 5, .crop_w = 4, .random_crop = 1,
                                     .random_flip = 1};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  const double zero[2] = {0, 0}, one[2] = {1, 1};
  int offsets[5][7] = {{0}}, flips[2] = {0};
  for (int b = 0; b < 6 * N / 16; b++) {
    em_minibatch mb = {0};
    assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
    assert_int_equal(em_tensor_ndim(mb.features), 2);
    assert_int_equal(em_tensor_shape(mb.features)[1], C * 5 * 4);
    const float *x = em_tensor_data(mb.features);
    const int32_t *y = em_tensor_data(mb.labels);
    for (int i = 0; i < 16; i++) {
      int found = 0;
      /* The label names the sample modulo 10; try every sample with it. */
      for (int sample = y[i]; sample < N && !found; sample += 10)
        for (int cy = 0; cy < 5 && !found; cy++)
          for (int cx = 0; cx < 7 && !found; cx++)
            for (int f = 0; f < 2 && !found; f++) {
              ref_transform(raw + sample * C * H * W, C, H, W, 2.0, zero, one, 2, 5, 4, cy, cx, f, want);
              if (close_to(x + i * C * 20, want, C * 20)) found = 1, offsets[cy][cx]++, flips[f]++;
            }
      assert_true(found);
    }
    em_minibatch_clear(&mb);
  }
  for (int cy = 0; cy < 5; cy++)
    for (int cx = 0; cx < 7; cx++) assert_true(offsets[cy][cx] > 0);
  assert_true(flips[0] > 100 && flips[1] > 100);
  em_minibatch_source_free(s);

  /* Refusals: a crop beyond the padded image, a zero std, a channel count. */
  o = (em_minibatch_options){.batch_size = 4, .transform = {.crop_h = 6, .crop_w = 4}};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "crop");
  o = (em_minibatch_options){.batch_size = 4, .transform = {.norm_channels = 1, .std = {0}}};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "std[0]");
  o = (em_minibatch_options){.batch_size = 4, .transform = {.norm_channels = 3, .std = {1, 1, 1}}};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  /* A NaN or inf scale, mean or std would make every image NaN (or 0). */
  const float nonfinite[3] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; k++) {
    const em_image_transform bad[3] = {{.scale = nonfinite[k]},
                                       {.norm_channels = 2, .mean = {0, nonfinite[k]}, .std = {1, 1}},
                                       {.norm_channels = 1, .std = {nonfinite[k]}}};
    const char *field[3] = {"scale", "mean[1]", "std[0]"};
    for (int f = 0; f < 3; f++) {
      o = (em_minibatch_options){.batch_size = 4, .transform = bad[f]};
      s = NULL;
      assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
      assert_null(s);
      assert_contains(em_last_error(), field[f]);
    }
  }
  em_dataset_free(d);
  /* 20 channels, one std each: more than the 16 a transform holds. The
   * message said "(0, 1 or 20)" when 20 was given: it must say the limit. */
  assert_int_equal(em_dataset_create(&d), EM_OK);
  unsigned char px[20] = {0};
  em_stream_desc wide = {.name = "features", .dtype = EM_U8, .ndim = 3, .shape = {20, 1, 1}};
  assert_int_equal(em_dataset_add_stream(d, &wide, 1, px, sizeof px), EM_OK);
  o = (em_minibatch_options){.batch_size = 1, .transform = {.norm_channels = 20}};
  for (int c = 0; c < EM_TRANSFORM_MAX_CHANNELS; c++) o.transform.std[c] = 1;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "at most 16 channels");
  em_dataset_free(d);
}

/* ------------------------------------------ prefetch and save / restore --- */

/* The bytes of every tensor of the next count minibatches, concatenated. */
static size_t run_bytes(em_minibatch_source *s, int count, unsigned char *out) {
  size_t n = 0;
  for (int m = 0; m < count; m++) {
    em_minibatch mb = {0};
    assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
    for (int i = 0; i < mb.n_streams; i++) {
      size_t bytes = (size_t)em_tensor_numel(mb.values[i]) * em_dtype_size(em_tensor_dtype(mb.values[i]));
      memcpy(out + n, em_tensor_data(mb.values[i]), bytes);
      n += bytes;
    }
    memcpy(out + n, &mb.samples_seen, 8);
    n += 8;
    em_minibatch_clear(&mb);
  }
  return n;
}

static void test_prefetch_and_restore(void **state) {
  (void)state;
  em_dataset *d = image_dataset();
  em_minibatch_options o = {.batch_size = 12, .seed = 99, .shuffle = 1, .epoch_size = 100};
  o.transform = (em_image_transform){.scale = 1.0f / 255, .pad = 1, .crop_h = 5, .crop_w = 6, .random_crop = 1,
                                     .random_flip = 1};
  enum { STEPS = 30, CAP = STEPS * (12 * 2 * 5 * 6 * 4 + 12 * 4 + 8) };
  unsigned char *a = malloc(CAP), *b = malloc(CAP);
  em_minibatch_source *s;
  o.no_prefetch = 1;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  size_t na = run_bytes(s, STEPS, a);
  em_minibatch_source_free(s);
  o.no_prefetch = 0;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  size_t nb = run_bytes(s, STEPS, b);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na);

  /* Stop after 11 steps, save, continue in a new source (prefetching),
   * and again in one without: the bytes of the run that never stopped. */
  assert_int_equal(em_minibatch_rewind(s), EM_OK);
  size_t n1 = run_bytes(s, 11, b);
  void *st;
  size_t st_size;
  assert_int_equal(em_minibatch_state_save(s, &st, &st_size), EM_OK);
  em_minibatch_source_free(s);
  for (int prefetch = 0; prefetch < 2; prefetch++) {
    o.no_prefetch = !prefetch;
    assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
    if (prefetch) { /* a prefetched minibatch from position 0 is thrown away */
      em_minibatch mb = {0};
      assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
      em_minibatch_clear(&mb);
    }
    assert_int_equal(em_minibatch_state_load(s, st, st_size), EM_OK);
    size_t n2 = run_bytes(s, STEPS - 11, b + n1);
    assert_int_equal(n1 + n2, na);
    assert_memory_equal(a, b, na);
    em_minibatch_source_free(s);
  }

  /* A state of another seed or sample count is refused, and garbage too. */
  o.seed = 100;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  assert_int_equal(em_minibatch_state_load(s, st, st_size), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "seed");
  ((unsigned char *)st)[3] ^= 1;
  assert_int_equal(em_minibatch_state_load(s, st, st_size), EM_ERR_CORRUPT);
  assert_int_equal(em_minibatch_state_load(s, st, st_size - 1), EM_ERR_CORRUPT);
  em_minibatch_source_free(s);
  free(st);

  /* An edited position (a checkpoint resealed after the edit gets past its
   * checksums): near 2^64 the position arithmetic would wrap; past the end
   * of the data (max_sweeps 2: 128 samples) there is nothing to continue.
   * Refused naming the byte, the source unchanged; the last position a run
   * reaches (the end of the data) loads. */
  o = (em_minibatch_options){.batch_size = 12, .seed = 99, .shuffle = 1, .epoch_size = 100, .max_sweeps = 2,
                             .no_prefetch = 1};
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  unsigned char *rec;
  assert_int_equal(em_minibatch_state_save(s, (void **)&rec, &st_size), EM_OK);
  assert_int_equal(st_size, 64);
  const uint64_t bad_pos[3] = {UINT64_MAX - 5, ((uint64_t)64 << 32) + 1, 129};
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 8; i++) rec[56 + i] = (unsigned char)(bad_pos[k] >> (8 * i));
    assert_int_equal(em_minibatch_state_load(s, rec, st_size), EM_ERR_CORRUPT);
    assert_contains(em_last_error(), "byte 56");
    assert_contains(em_last_error(), "end of the data");
    em_minibatch_position pos;
    assert_int_equal(em_minibatch_get_position(s, &pos), EM_OK);
    assert_int_equal(pos.samples_seen, 0);
  }
  for (int i = 0; i < 8; i++) rec[56 + i] = (unsigned char)((uint64_t)128 >> (8 * i));
  assert_int_equal(em_minibatch_state_load(s, rec, st_size), EM_OK);
  em_minibatch mb = {0};
  assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
  assert_true(mb.end_of_data);
  em_minibatch_clear(&mb);
  em_minibatch_source_free(s);
  /* Without max_sweeps the bound is 2^32 sweeps of the 64 samples. */
  o.max_sweeps = 0;
  assert_int_equal(em_minibatch_source_create(d, &o, &s), EM_OK);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 8; i++) rec[56 + i] = (unsigned char)(bad_pos[k] >> (8 * i));
    assert_int_equal(em_minibatch_state_load(s, rec, st_size), EM_ERR_CORRUPT);
    assert_contains(em_last_error(), "2^32 sweeps");
  }
  const uint64_t last = (uint64_t)64 << 32;
  for (int i = 0; i < 8; i++) rec[56 + i] = (unsigned char)(last >> (8 * i));
  assert_int_equal(em_minibatch_state_load(s, rec, st_size), EM_OK);
  em_minibatch_source_free(s);
  free(rec), free(a), free(b);
  em_dataset_free(d);
}

/* ------------------------------------------------- the real Fashion-MNIST --- */

/* Known facts: 60000 training and 10000 test images of 28x28 bytes, 6000
 * and 1000 of each of the 10 classes (Xiao, Rasul and Vollgraf, 2017); the
 * first labels, as every Fashion-MNIST tutorial prints them (an ankle boot,
 * class 9, first in both). */

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static void check_split(const em_dataset *d, int64_t n, int64_t per_class, const int32_t *first5) {
  assert_int_equal(em_dataset_samples(d), n);
  em_stream_desc s;
  assert_int_equal(em_dataset_stream(d, 0, &s), EM_OK);
  assert_int_equal(s.dtype, EM_U8);
  assert_int_equal(s.ndim, 2);
  assert_true(s.shape[0] == 28 && s.shape[1] == 28);
  const int32_t *y = em_dataset_stream_data(d, 1);
  int64_t counts[10] = {0};
  for (int64_t i = 0; i < n; i++) {
    assert_true(y[i] >= 0 && y[i] < 10);
    counts[y[i]]++;
  }
  for (int c = 0; c < 10; c++) assert_int_equal(counts[c], per_class);
  for (int i = 0; i < 5; i++) assert_int_equal(y[i], first5[i]);
  /* Real images: bytes span the range, a border of background. */
  const unsigned char *px = em_dataset_stream_data(d, 0);
  int maxv = 0;
  for (int i = 0; i < 784 * 100; i++) maxv = px[i] > maxv ? px[i] : maxv;
  assert_int_equal(maxv, 255);
}

static void test_fashion_mnist(void **state) {
  (void)state;
  if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
    print_message("dataset-fashion-mnist is not installed (%s): skipped\n", FASHION_DIR);
    skip();
  }
  em_dataset *train, *test, *e;
  assert_int_equal(em_dataset_open_idx_dir(FASHION_DIR, "t10k", 10, &test), EM_OK);
  check_split(test, 10000, 1000, (const int32_t[]){9, 2, 1, 1, 6});
  if (RUNNING_ON_VALGRIND) {
    /* The training set (26 MB of gzip, 47 MB of pixels, a sweep of it)
     * takes a minute under valgrind; the plain and ASan runs read it. */
    em_dataset_free(test);
    return;
  }
  assert_int_equal(em_dataset_open_idx_dir(FASHION_DIR, "train", 10, &train), EM_OK);
  check_split(train, 60000, 6000, (const int32_t[]){9, 0, 0, 3, 0});
  /* Converted to EMB and back: the same bytes. */
  const char *p = path_of("t10k.emb");
  assert_int_equal(em_dataset_write(test, p), EM_OK);
  assert_int_equal(em_dataset_open_emb(p, &e), EM_OK);
  assert_memory_equal(em_dataset_stream_data(e, 0), em_dataset_stream_data(test, 0), 10000 * 784);
  assert_memory_equal(em_dataset_stream_data(e, 1), em_dataset_stream_data(test, 1), 10000 * 4);
  em_dataset_free(e);
  /* One training sweep through the source: 938 minibatches of 64, the last 32. */
  em_minibatch_options o = {.batch_size = 64, .seed = 1, .shuffle = 1, .max_sweeps = 1,
                            .transform = {.scale = 1.0f / 255}, .layout = EM_LAYOUT_FLAT};
  em_minibatch_source *s;
  assert_int_equal(em_minibatch_source_create(train, &o, &s), EM_OK);
  int64_t batches = 0, samples = 0, counts[10] = {0};
  for (;;) {
    em_minibatch mb = {0};
    assert_int_equal(em_minibatch_next(s, &mb), EM_OK);
    if (mb.end_of_data) break;
    batches++;
    samples += mb.samples;
    assert_int_equal(em_tensor_shape(mb.features)[1], 784);
    const int32_t *y = em_tensor_data(mb.labels);
    for (int64_t i = 0; i < mb.samples; i++) counts[y[i]]++;
    if (mb.end_of_epoch) assert_int_equal(mb.samples, 32);
    em_minibatch_clear(&mb);
  }
  assert_int_equal(batches, 938);
  assert_int_equal(samples, 60000);
  for (int c = 0; c < 10; c++) assert_int_equal(counts[c], 6000);
  em_minibatch_source_free(s);
  em_dataset_free(train);
  em_dataset_free(test);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_idx_plain_and_gzip),
    cmocka_unit_test(test_idx_element_types),
    cmocka_unit_test(test_idx_errors),
    cmocka_unit_test(test_gunzip_limit),
    cmocka_unit_test(test_ctf),
    cmocka_unit_test(test_ctf_under_a_decimal_comma_locale),
    cmocka_unit_test(test_ctf_errors),
    cmocka_unit_test(test_emb_roundtrip_and_layout),
    cmocka_unit_test(test_shuffle),
    cmocka_unit_test(test_epochs_and_eval),
    cmocka_unit_test(test_transforms),
    cmocka_unit_test(test_prefetch_and_restore),
    cmocka_unit_test(test_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
