/* Variable-length sequences in a batch (the CTF reader's sequence streams
 * in reader.h).
 *
 *  - The reader: CTF files written here, read with sequence streams, and the
 *    minibatch's tensors compared byte for byte with arrays written out by
 *    hand from CNTK's rule (each line of a sequence gives the next sample
 *    of every input it names; BrainScript CNTKTextFormat Reader page);
 *    truncation; the errors, with file, line and column. */
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

#define CHECK(x) assert_int_equal_msg((x), EM_OK)
static void assert_int_equal_msg(em_status s, em_status want) {
  if (s != want) fail_msg("status %d (%s), wanted %d", (int)s, em_last_error(), (int)want);
}

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/ember_sequences_XXXXXX", t && *t ? t : "/tmp");
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

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("'%s' does not contain '%s'", hay, needle);
}

/* One pass in stored order, all samples in one minibatch. */
static void read_all(const em_dataset *d, em_minibatch *mb) {
  em_minibatch_source *src;
  CHECK(em_minibatch_source_create(d, &(em_minibatch_options){.batch_size = 64, .max_sweeps = 1, .no_prefetch = 1},
                                   &src));
  memset(mb, 0, sizeof *mb);
  CHECK(em_minibatch_next(src, mb));
  em_minibatch_source_free(src);
}

static size_t nbytes(const em_tensor *t) {
  size_t es = em_tensor_dtype(t) == EM_F64 || em_tensor_dtype(t) == EM_I64 ? 8
              : em_tensor_dtype(t) == EM_U8 || em_tensor_dtype(t) == EM_BOOL ? 1 : 4;
  return (size_t)em_tensor_numel(t) * es;
}

static void assert_tensor(const em_tensor *t, em_dtype dt, int ndim, const int64_t *shape, const void *want,
                          size_t bytes) {
  assert_non_null(t);
  assert_int_equal(em_tensor_dtype(t), dt);
  assert_int_equal(em_tensor_ndim(t), ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(em_tensor_shape(t)[i], shape[i]);
  assert_int_equal(nbytes(t), bytes);
  assert_memory_equal(em_tensor_data(t), want, bytes);
}

/* ------------------------------------------------------------- reader --- */

/* "features": dense dim 2, up to 4 steps; "y": a class of 3 given once per
 * sequence; "tag": a class per step (sparse one-hot), up to 4 steps; "s":
 * sparse dim 3, up to 2 steps, absent from most sequences. */
static const em_ctf_stream seq_decl[] = {
  {.name = "features", .dim = 2, .max_steps = 4},
  {.name = "y", .dim = 3, .is_class = 1},
  {.name = "tag", .dim = 3, .sparse = 1, .is_class = 1, .max_steps = 4},
  {.name = "s", .dim = 3, .sparse = 1, .max_steps = 2},
};

static void test_ctf_sequence_streams(void **state) {
  (void)state;
  const char *text =
    "|# three sequences; ids 3, 7 and 9\n"
    "3 |features 1 2 |y 0 1 0 |tag 1:1\n"
    "3 |features 3 4 |tag 0:1\n"
    "3\t|tag 2:1 |features 5 6 |# the order on a line does not matter\n"
    "\n"
    "7 |features -1 0.5 |y 1 0 0 |tag 1:1\n"
    "9 |y 0 0 1 |tag 0:1 |s 2:4 0:0.25\n"
    "9 |features 7 8\n";
  write_text(path_of("seq.ctf"), text);
  em_dataset *d;
  CHECK(em_dataset_open_ctf(path_of("seq.ctf"), seq_decl, 4, &d));
  assert_int_equal(em_dataset_samples(d), 3);
  assert_int_equal(em_dataset_n_streams(d), 7);
  /* The declared streams keep their indices; the lengths follow. */
  const char *names[7] = {"features", "y", "tag", "s", "features.lengths", "tag.lengths", "s.lengths"};
  for (int i = 0; i < 7; i++) {
    em_stream_desc desc;
    CHECK(em_dataset_stream(d, i, &desc));
    assert_string_equal(desc.name, names[i]);
    assert_int_equal(desc.sequence, i == 0 || i == 2 || i == 3);
  }
  em_stream_desc tag;
  CHECK(em_dataset_stream(d, 2, &tag));
  assert_int_equal(tag.dtype, EM_I32);
  assert_int_equal(tag.ndim, 1);
  assert_int_equal(tag.shape[0], 4);
  assert_int_equal(tag.classes, 3);

  em_minibatch mb;
  read_all(d, &mb);
  assert_int_equal(mb.samples, 3);
  /* By hand: sequence 3 gives features (1 2) (3 4) (5 6), sequence 7 one
   * step, sequence 9 one step (on its second line); zeros after. */
  const float features[3][4][2] = {{{1, 2}, {3, 4}, {5, 6}, {0, 0}},
                                   {{-1, 0.5f}, {0, 0}, {0, 0}, {0, 0}},
                                   {{7, 8}, {0, 0}, {0, 0}, {0, 0}}};
  assert_tensor(mb.values[0], EM_F32, 3, (int64_t[]){3, 4, 2}, features, sizeof features);
  assert_true(mb.features == mb.values[0]); /* a sequence stream is no image: delivered as [B, T, dim] */
  const int32_t y[3] = {1, 0, 2};
  assert_tensor(mb.values[1], EM_I32, 1, (int64_t[]){3}, y, sizeof y);
  const int32_t tags[3][4] = {{1, 0, 2, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}};
  assert_tensor(mb.values[2], EM_I32, 2, (int64_t[]){3, 4}, tags, sizeof tags);
  const float s[3][2][3] = {{{0}}, {{0}}, {{0.25f, 0, 4}, {0, 0, 0}}};
  assert_tensor(mb.values[3], EM_F32, 3, (int64_t[]){3, 2, 3}, s, sizeof s);
  const int64_t flen[3] = {3, 1, 1}, tlen[3] = {3, 1, 1}, slen[3] = {0, 0, 1};
  assert_tensor(mb.values[4], EM_I64, 1, (int64_t[]){3}, flen, sizeof flen);
  assert_tensor(mb.values[5], EM_I64, 1, (int64_t[]){3}, tlen, sizeof tlen);
  assert_tensor(mb.values[6], EM_I64, 1, (int64_t[]){3}, slen, sizeof slen);
  em_minibatch_clear(&mb);

  /* EMB version 1 cannot hold it: refused, nothing written. */
  assert_int_equal(em_dataset_write(d, path_of("seq.emb")), EM_ERR_UNSUPPORTED);
  assert_contains(em_last_error(), "'features'");
  assert_int_equal(access(path_of("seq.emb"), F_OK), -1);
  /* A slice keeps the sequence streams. */
  em_dataset *tail;
  CHECK(em_dataset_slice(d, 2, 1, &tail));
  read_all(tail, &mb);
  assert_tensor(mb.values[0], EM_F32, 3, (int64_t[]){1, 4, 2}, features[2], sizeof features[2]);
  assert_tensor(mb.values[6], EM_I64, 1, (int64_t[]){1}, &slen[2], sizeof slen[2]);
  em_minibatch_clear(&mb);
  em_dataset_free(tail);
  em_dataset_free(d);
}

static void test_ctf_truncate(void **state) {
  (void)state;
  const em_ctf_stream decl[] = {{.name = "x", .dim = 1, .max_steps = 2, .truncate = 1}};
  write_text(path_of("long.ctf"), "1 |x 1\n1 |x 2\n1 |x 3\n2 |x 4\n");
  em_dataset *d;
  CHECK(em_dataset_open_ctf(path_of("long.ctf"), decl, 1, &d));
  em_minibatch mb;
  read_all(d, &mb);
  const float x[2][2] = {{1, 2}, {4, 0}};
  const int64_t len[2] = {2, 1};
  assert_tensor(mb.values[0], EM_F32, 3, (int64_t[]){2, 2, 1}, x, sizeof x);
  assert_tensor(mb.values[1], EM_I64, 1, (int64_t[]){2}, len, sizeof len);
  em_minibatch_clear(&mb);
  em_dataset_free(d);
  /* The dropped steps are still read and checked. */
  write_text(path_of("long.ctf"), "1 |x 1\n1 |x 2\n1 |x 3z\n");
  d = NULL;
  assert_int_equal(em_dataset_open_ctf(path_of("long.ctf"), decl, 1, &d), EM_ERR_CORRUPT);
  assert_null(d);
  assert_contains(em_last_error(), "line 3, column 7");
}

static void expect_seq_error(const char *text, const char *n1, const char *n2) {
  write_text(path_of("bad.ctf"), text);
  em_dataset *d = NULL;
  assert_int_equal(em_dataset_open_ctf(path_of("bad.ctf"), seq_decl, 4, &d), EM_ERR_CORRUPT);
  assert_null(d);
  assert_contains(em_last_error(), "bad.ctf: line ");
  assert_contains(em_last_error(), n1);
  if (n2) assert_contains(em_last_error(), n2);
}

static void test_ctf_sequence_errors(void **state) {
  (void)state;
  /* Too long: the 5th step of features (max 4), at its name. */
  expect_seq_error("12 |features 1 2 |y 1 0 0 |tag 0:1\n12 |features 1 2\n12 |features 1 2\n12 |features 1 2\n"
                   "12 |features 1 2\n", "line 5, column 5", "sequence id 12 (from line 1) gives 'features' more than "
                   "its max_steps 4");
  expect_seq_error("|features 1 2 |features 3 4 |y 1 0 0 |tag 0:1\n", "line 1, column 16", "twice on one line");
  /* Sequence streams that are dense or classes need a step in every sample ... */
  expect_seq_error("|features 1 2 |y 1 0 0 |tag 0:1\n|y 1 0 0 |tag 0:1\n", "line 2", "no 'features'");
  expect_seq_error("|features 1 2 |y 1 0 0\n", "line 1", "no 'tag'");
  /* ... and each step is checked as a sample is. */
  expect_seq_error("4 |features 1 2 |y 1 0 0 |tag 0:1\n4 |features 1 2 |tag 3:1\n", "line 2, column 22",
                   "sparse index out of range");
  expect_seq_error("4 |features 1 2 |y 1 0 0 |tag 0:1\n4 |features 1 2 |tag 1:2\n", "line 2", "value at index 1 is 2");
  expect_seq_error("|features 1 2 |y 1 0 0 |tag 0:1 |s 3:1\n", "line 1, column 36", "sparse index out of range");
  expect_seq_error("|features 1 |y 1 0 0 |tag 0:1\n", "line 1", "too few values");
  /* A stream that is not a sequence stream is still given once per sequence. */
  expect_seq_error("4 |features 1 2 |y 1 0 0 |tag 0:1\n4 |y 1 0 0\n", "line 2", "given at line 1 already");
  /* Without an id, a sequence is one line. */
  const em_ctf_stream one[] = {{.name = "x", .dim = 1, .max_steps = 1}};
  write_text(path_of("bad.ctf"), "|x 1\n|x 2 |x 3\n");
  em_dataset *d = NULL;
  assert_int_equal(em_dataset_open_ctf(path_of("bad.ctf"), one, 1, &d), EM_ERR_CORRUPT);
  assert_contains(em_last_error(), "line 2, column 7");
  write_text(path_of("bad.ctf"), "|x 1\n|x 2\n");
  CHECK(em_dataset_open_ctf(path_of("bad.ctf"), one, 1, &d));
  assert_int_equal(em_dataset_samples(d), 2);
  em_dataset_free(d);

  /* Declarations. */
  const char *p = path_of("bad.ctf");
  d = NULL;
  const em_ctf_stream neg[] = {{.name = "x", .dim = 1, .max_steps = -1}};
  assert_int_equal(em_dataset_open_ctf(p, neg, 1, &d), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "max_steps -1");
  const em_ctf_stream trunc[] = {{.name = "x", .dim = 1, .truncate = 1}};
  assert_int_equal(em_dataset_open_ctf(p, trunc, 1, &d), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "truncate only with max_steps");
  const em_ctf_stream clash[] = {{.name = "x", .dim = 1, .max_steps = 2}, {.name = "x.lengths", .dim = 1}};
  assert_int_equal(em_dataset_open_ctf(p, clash, 2, &d), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "'x.lengths'");
  char long_name[60];
  memset(long_name, 'a', 56);
  long_name[56] = 0;
  const em_ctf_stream too_long[] = {{.name = long_name, .dim = 1, .max_steps = 2}};
  assert_int_equal(em_dataset_open_ctf(p, too_long, 1, &d), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "at most 55 characters");
  em_ctf_stream many[9];
  char many_names[9][4];
  for (int i = 0; i < 9; i++) {
    snprintf(many_names[i], sizeof many_names[i], "s%d", i);
    many[i] = (em_ctf_stream){.name = many_names[i], .dim = 1, .max_steps = 2};
  }
  assert_int_equal(em_dataset_open_ctf(p, many, 9, &d), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "9 lengths streams");
  assert_null(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ctf_sequence_streams),
    cmocka_unit_test(test_ctf_truncate),
    cmocka_unit_test(test_ctf_sequence_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
