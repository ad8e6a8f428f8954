/* Variable-length sequences in a batch (include/ember/sequence.h, the CTF
 * reader's sequence streams in reader.h, the recurrent layers' lengths).
 *
 *  - The reader: CTF files written here, read with sequence streams, and the
 *    minibatch's tensors compared byte for byte with arrays written out by
 *    hand from CNTK's rule (each line of a sequence gives the next sample
 *    of every input it names; BrainScript CNTKTextFormat Reader page);
 *    truncation; the errors, with file, line and column.
 *  - Masks and the masked mean against values worked out by hand, NaN in the
 *    padding included.
 *  - Padding invariance: an LSTM over a padded batch gives, bitwise in
 *    portable mode, the outputs the same sequences give one at a time
 *    unpadded; its parameter gradients equal the sum of theirs (to a stated
 *    tolerance: the batch sums over N T rows in one matmul, the reference
 *    adds per-sequence sums); what the padding holds changes nothing, bit
 *    for bit, and the padded steps' input gradient is exactly 0.
 *  - Training end to end: an LSTM learns, through the reader and the
 *    trainer, a task over sequences of lengths 3 to 12 mixed in each batch,
 *    to a stated held-out accuracy. */
#include <math.h>
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
#include "gpu_double.h"

static int g_gpus;

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

/* ---------------------------------------------------- mask, masked mean --- */

static em_tensor *host(em_dtype dt, int ndim, const int64_t *shape, const void *data, size_t bytes) {
  em_tensor *t;
  CHECK(em_tensor_from_host(em_cpu(), dt, ndim, shape, data, bytes, &t));
  return t;
}

static void test_mask_and_masked_mean(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var lens, v, mask, fmask, mean, grad;
  CHECK(em_input(g, "lens", EM_I64, 1, (int64_t[]){-1}, &lens));
  CHECK(em_input(g, "v", EM_F32, 2, (int64_t[]){3, 4}, &v));
  CHECK(em_sequence_mask(g, lens, 4, EM_BOOL, &mask));
  CHECK(em_sequence_mask(g, lens, 4, EM_F32, &fmask));
  CHECK(em_masked_mean(g, v, mask, &mean));
  CHECK(em_gradients(g, mean, &v, 1, &grad));
  /* Lengths 2, 0, 5 (past T: all steps). Padded values hold NaN and inf. */
  const float vals[3][4] = {{1, 2, NAN, INFINITY}, {NAN, NAN, NAN, NAN}, {3, 4, 5, 6}};
  em_tensor *vt = host(EM_F32, 2, (int64_t[]){3, 4}, vals, sizeof vals);
  const int64_t lv[3] = {2, 0, 5};
  em_tensor *lt = host(EM_I64, 1, (int64_t[]){3}, lv, sizeof lv);
  em_exec *e;
  CHECK(em_exec_create(g, (em_var[]){mask, fmask, mean, grad}, 4, em_cpu(), &e));
  em_tensor *out[4] = {0};
  CHECK(em_exec_run(e, (em_feed[]){{lens, lt}, {v, vt}}, 2, out));
  const uint8_t want_mask[3][4] = {{1, 1, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}};
  const float want_f[3][4] = {{1, 1, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}};
  assert_tensor(out[0], EM_BOOL, 2, (int64_t[]){3, 4}, want_mask, sizeof want_mask);
  assert_tensor(out[1], EM_F32, 2, (int64_t[]){3, 4}, want_f, sizeof want_f);
  /* (1 + 2 + 3 + 4 + 5 + 6) / 6 = 3.5; d/dv = 1/6 at the 6 valid entries, exactly 0 elsewhere. */
  assert_true(*(const float *)em_tensor_data(out[2]) == 3.5f);
  const float s = 1.0f / 6;
  const float want_g[3][4] = {{s, s, 0, 0}, {0, 0, 0, 0}, {s, s, s, s}};
  assert_tensor(out[3], EM_F32, 2, (int64_t[]){3, 4}, want_g, sizeof want_g);
  for (int i = 0; i < 4; i++) em_tensor_release(out[i]);
  /* No valid step at all: 0, not NaN. */
  const int64_t none[3] = {0, 0, -3};
  em_tensor *nt = host(EM_I64, 1, (int64_t[]){3}, none, sizeof none);
  CHECK(em_exec_run(e, (em_feed[]){{lens, nt}, {v, vt}}, 2, out));
  assert_true(*(const float *)em_tensor_data(out[2]) == 0.0f);
  for (int i = 0; i < 4; i++) em_tensor_release(out[i]);
  em_tensor_release(nt);
  em_tensor_release(lt);
  em_tensor_release(vt);
  em_exec_free(e);

  /* Refusals name the argument. */
  em_var f, i32m, bad;
  CHECK(em_input(g, "f", EM_F32, 1, (int64_t[]){3}, &f));
  assert_int_equal(em_sequence_mask(g, f, 4, EM_F32, &bad), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "lengths is f32");
  assert_int_equal(em_sequence_mask(g, lens, 0, EM_F32, &bad), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "T 0");
  assert_int_equal(em_sequence_mask(g, lens, 4, EM_I32, &bad), EM_ERR_INVALID_ARGUMENT);
  CHECK(em_input(g, "m", EM_I32, 2, (int64_t[]){3, 4}, &i32m));
  assert_int_equal(em_masked_mean(g, v, i32m, &bad), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "the mask is i32");
  assert_int_equal(em_masked_mean(g, v, f, &bad), EM_ERR_INVALID_ARGUMENT);
  assert_contains(em_last_error(), "shape");
  em_graph_free(g);
}

/* --------------------------------------------------- padding invariance --- */

#define PI_I 3
#define PI_H 5
#define PI_C 4
#define PI_N 3
#define PI_T 6
static const int64_t pi_len[PI_N] = {6, 2, 4};

/* An LSTM (layout 1) over x [n, t, I] with lengths, a dense layer per step
 * to C logits, the per-step cross-entropy, and the classification of the
 * final state Y_h: loss = masked mean of the per-step losses + mean of the
 * per-sequence ones. Parameters are named and seeded the same in every
 * graph, so every graph starts from the same values. */
typedef struct pi_model {
  em_graph *g;
  em_var x, lens, tags, label;
  em_var y, yh, step_ce, seq_ce, loss;
  em_var params[8], grads[8], dx;
  size_t np;
} pi_model;

static void pi_build(pi_model *m, int64_t n, int64_t t) {
  CHECK(em_graph_create(&m->g));
  em_graph *g = m->g;
  CHECK(em_input(g, "x", EM_F32, 3, (int64_t[]){n, t, PI_I}, &m->x));
  CHECK(em_input(g, "lens", EM_I64, 1, (int64_t[]){n}, &m->lens));
  CHECK(em_input(g, "tags", EM_I32, 2, (int64_t[]){n, t}, &m->tags));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){n}, &m->label));
  em_layers L = {.graph = g, .seed = 21};
  em_recurrent_outputs r;
  CHECK(em_lstm(&L, "rnn", m->x, PI_H, &(em_recurrent_layer_opts){.rnn.layout = 1, .sequence_lens = &m->lens}, &r));
  m->y = r.y, m->yh = r.y_h;
  em_var y3, h2, logits, seq_logits;
  em_attr s3 = {.name = "shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){n, t, PI_H}, .n = 3};
  em_attr s2 = {.name = "shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){n, PI_H}, .n = 2};
  CHECK(em_apply(g, "reshape", &r.y, 1, &s3, 1, &y3, 1)); /* [N, T, 1, H] -> [N, T, H] */
  CHECK(em_apply(g, "reshape", &r.y_h, 1, &s2, 1, &h2, 1));
  CHECK(em_dense(&L, "tagger", y3, PI_C, NULL, &logits));
  CHECK(em_dense(&L, "classifier", h2, PI_C, NULL, &seq_logits));
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){logits, m->tags}, 2, NULL, 0, &m->step_ce, 1));
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){seq_logits, m->label}, 2, NULL, 0, &m->seq_ce, 1));
  /* The batch's loss as a sum (the reference adds the single sequences'):
   * masked mean times the count of valid steps would round; the sum of the
   * masked per-step losses is what the mean divides. */
  em_var mask, kept, zero, step_sum, seq_sum;
  CHECK(em_sequence_mask(g, m->lens, t, EM_BOOL, &mask));
  em_tensor *zt;
  CHECK(em_tensor_zeros(em_cpu(), EM_F32, 0, NULL, &zt));
  CHECK(em_constant(g, zt, &zero));
  em_tensor_release(zt);
  CHECK(em_apply(g, "where", (em_var[]){mask, m->step_ce, zero}, 3, NULL, 0, &kept, 1));
  CHECK(em_apply(g, "reduce_sum", &kept, 1, NULL, 0, &step_sum, 1));
  CHECK(em_apply(g, "reduce_sum", &m->seq_ce, 1, NULL, 0, &seq_sum, 1));
  CHECK(em_apply(g, "add", (em_var[]){step_sum, seq_sum}, 2, NULL, 0, &m->loss, 1));
  CHECK(em_graph_parameters(g, m->params, 8, &m->np));
  assert_int_equal(m->np, 7); /* rnn W R B, tagger w b, classifier w b */
  CHECK(em_gradients(g, m->loss, m->params, (int)m->np, m->grads));
  CHECK(em_gradients(g, m->loss, &m->x, 1, &m->dx));
}

/* Runs m on the given values; out: y, yh, step_ce, seq_ce, loss, dx, grads[np]. */
static void pi_run(pi_model *m, em_device dev, int64_t n, int64_t t, const float *x, const int64_t *lens,
                   const int32_t *tags, const int32_t *label, em_tensor **out) {
  em_var fetch[6 + 8] = {m->y, m->yh, m->step_ce, m->seq_ce, m->loss, m->dx};
  for (size_t i = 0; i < m->np; i++) fetch[6 + i] = m->grads[i];
  em_exec *e;
  CHECK(em_exec_create(m->g, fetch, 6 + (int)m->np, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_tensor *in[4] = {host(EM_F32, 3, (int64_t[]){n, t, PI_I}, x, sizeof(float) * (size_t)(n * t * PI_I)),
                      host(EM_I64, 1, &n, lens, sizeof(int64_t) * (size_t)n),
                      host(EM_I32, 2, (int64_t[]){n, t}, tags, sizeof(int32_t) * (size_t)(n * t)),
                      host(EM_I32, 1, &n, label, sizeof(int32_t) * (size_t)n)};
  em_feed f[4] = {{m->x, in[0]}, {m->lens, in[1]}, {m->tags, in[2]}, {m->label, in[3]}};
  CHECK(em_exec_run(e, f, 4, out));
  for (int k = 0; k < 6 + (int)m->np; k++) { /* to the host, from a GPU */
    em_tensor *h;
    CHECK(em_tensor_to_device(out[k], em_cpu(), &h));
    em_tensor_release(out[k]);
    out[k] = h;
  }
  for (int i = 0; i < 4; i++) em_tensor_release(in[i]);
  em_exec_free(e);
}

static const float *fdata(const em_tensor *t) { return (const float *)em_tensor_data(t); }

static void test_padding_invariance(void **state) {
  (void)state;
  /* The batch: values from a fixed LCG in [-1, 1), the padding `pad`. */
  float x[PI_N][PI_T][PI_I], xg[PI_N][PI_T][PI_I];
  int32_t tags[PI_N][PI_T], label[PI_N];
  uint64_t seed = 99;
  for (int n = 0; n < PI_N; n++) {
    label[n] = (int32_t)((n * 7 + 1) % PI_C);
    for (int t = 0; t < PI_T; t++) {
      int valid = t < pi_len[n];
      tags[n][t] = valid ? (int32_t)((n + 3 * t) % PI_C) : 0;
      for (int i = 0; i < PI_I; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        float v = (float)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
        x[n][t][i] = valid ? v : 0;
        xg[n][t][i] = valid ? v : 7.5f; /* what the padding holds must not matter */
      }
    }
  }
  pi_model b;
  pi_build(&b, PI_N, PI_T);
  em_tensor *ob[14] = {0}, *og[14] = {0};
  pi_run(&b, em_cpu(), PI_N, PI_T, &x[0][0][0], pi_len, &tags[0][0], label, ob);
  pi_run(&b, em_cpu(), PI_N, PI_T, &xg[0][0][0], pi_len, &tags[0][0], label, og);
  const int n_out = 6 + (int)b.np;
  /* Garbage in the padding: every output but x's gradient is bitwise the same
   * (Y, Y_h, the per-step losses of the padded steps too: Y is 0 there). */
  for (int k = 0; k < n_out; k++) {
    if (k == 5) continue;
    assert_int_equal(nbytes(ob[k]), nbytes(og[k]));
    if (memcmp(em_tensor_data(ob[k]), em_tensor_data(og[k]), nbytes(ob[k])))
      fail_msg("output %d changed with what the padding holds", k);
  }
  /* The input gradient: 0 at padded steps (exactly), the same elsewhere. */
  for (int n = 0; n < PI_N; n++)
    for (int t = 0; t < PI_T; t++)
      for (int i = 0; i < PI_I; i++) {
        size_t at = ((size_t)n * PI_T + (size_t)t) * PI_I + (size_t)i;
        float a = fdata(ob[5])[at], c = fdata(og[5])[at];
        if (t >= pi_len[n] && (a != 0 || c != 0)) fail_msg("dx[%d][%d][%d] = %g, %g at a padded step", n, t, i, a, c);
        if (memcmp(&a, &c, sizeof a)) fail_msg("dx[%d][%d][%d] differs: %g vs %g", n, t, i, a, c);
      }
  /* Y past a sequence's length is 0. */
  for (int n = 0; n < PI_N; n++)
    for (int t = (int)pi_len[n]; t < PI_T; t++)
      for (int h = 0; h < PI_H; h++) assert_true(fdata(ob[0])[((size_t)n * PI_T + (size_t)t) * PI_H + (size_t)h] == 0);

  /* One sequence at a time, unpadded, in a graph of its own length. */
  double gsum[8][128] = {{0}};
  double max_rel = 0;
  for (int n = 0; n < PI_N; n++) {
    int64_t T = pi_len[n], len = T;
    pi_model s;
    pi_build(&s, 1, T);
    em_tensor *os[14] = {0};
    pi_run(&s, em_cpu(), 1, T, &x[n][0][0], &len, tags[n], &label[n], os);
    /* Forward bitwise: Y's valid steps, Y_h, each step's loss, the sequence's loss. */
    assert_memory_equal(fdata(os[0]), fdata(ob[0]) + (size_t)n * PI_T * PI_H, sizeof(float) * (size_t)(T * PI_H));
    assert_memory_equal(fdata(os[1]), fdata(ob[1]) + (size_t)n * PI_H, sizeof(float) * PI_H);
    assert_memory_equal(fdata(os[2]), fdata(ob[2]) + (size_t)n * PI_T, sizeof(float) * (size_t)T);
    assert_memory_equal(fdata(os[3]), fdata(ob[3]) + n, sizeof(float));
    /* The input gradient of each valid step: bitwise (it flows through this sequence alone). */
    assert_memory_equal(fdata(os[5]), fdata(ob[5]) + (size_t)n * PI_T * PI_I, sizeof(float) * (size_t)(T * PI_I));
    for (size_t p = 0; p < s.np; p++) {
      size_t cnt = nbytes(os[6 + p]) / sizeof(float);
      assert_true(cnt <= 128);
      for (size_t k = 0; k < cnt; k++) gsum[p][k] += fdata(os[6 + p])[k];
    }
    for (int k = 0; k < 6 + (int)s.np; k++) em_tensor_release(os[k]);
    em_graph_free(s.g);
  }
  /* Parameter gradients: the batch's equal the sum of the sequences'. */
  for (size_t p = 0; p < b.np; p++) {
    size_t cnt = nbytes(ob[6 + p]) / sizeof(float);
    double scale = 0;
    for (size_t k = 0; k < cnt; k++) scale = fmax(scale, fabs(gsum[p][k]));
    for (size_t k = 0; k < cnt; k++) {
      double d = fabs(fdata(ob[6 + p])[k] - gsum[p][k]) / (scale > 0 ? scale : 1);
      if (d > max_rel) max_rel = d;
    }
  }
  print_message("padded batch vs one sequence at a time: forward and input gradients bitwise; parameter gradients "
                "within %.2g of the largest (1e-5 allowed)\n", max_rel);
  if (!(max_rel <= 1e-5)) fail_msg("parameter gradients differ by %g relative", max_rel);
  /* The padded batch on the GPU (the test double in CI): the same bits. */
  if (g_gpus) {
    em_tensor *oc[14] = {0};
    pi_run(&b, em_cuda(0), PI_N, PI_T, &xg[0][0][0], pi_len, &tags[0][0], label, oc);
    for (int k = 0; k < n_out; k++) {
      assert_int_equal(nbytes(oc[k]), nbytes(og[k]));
      if (memcmp(em_tensor_data(oc[k]), em_tensor_data(og[k]), nbytes(og[k])))
        fail_msg("output %d differs between cuda:0 and the CPU in portable mode", k);
      em_tensor_release(oc[k]);
    }
  } else {
    print_message("padding invariance on the GPU: SKIPPED: no CUDA driver, real or test double\n");
  }
  for (int k = 0; k < n_out; k++) {
    em_tensor_release(ob[k]);
    em_tensor_release(og[k]);
  }
  em_graph_free(b.g);
}

/* ------------------------------------------------------------ training --- */

/* Sequences of 3 to 12 symbols of 4 (one-hot), mixed lengths in every
 * batch. Two targets: the sequence's class is its FIRST symbol (read from
 * the final state Y_h, so it must be carried through up to 11 steps and
 * read at the right step), and each step's tag is 1 when symbol 0 has
 * appeared at or before it (a per-step loss, masked). Chance: 25% and about
 * 50%. */
#define TS_SYM 4
#define TS_TMAX 12
#define TS_H 16

static void write_task(const char *path, int count, uint64_t seed) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int s = 0; s < count; s++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    int len = 3 + (int)((seed >> 33) % 10), first = -1, seen0 = 0;
    for (int t = 0; t < len; t++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      int sym = (int)((seed >> 33) % TS_SYM);
      if (t == 0) first = sym;
      seen0 |= sym == 0;
      fprintf(f, "%d |x %d:1 |seen %d:1", s, sym, seen0);
      if (t == 0) fprintf(f, " |first %d:1", first);
      fputc('\n', f);
    }
  }
  assert_int_equal(fclose(f), 0);
}

static void test_lstm_trains_on_ctf_sequences(void **state) {
  (void)state;
  write_task(path_of("train.ctf"), 512, 1);
  write_task(path_of("test.ctf"), 256, 2);
  const em_ctf_stream decl[] = {
    {.name = "x", .dim = TS_SYM, .sparse = 1, .max_steps = TS_TMAX},
    {.name = "first", .dim = TS_SYM, .sparse = 1, .is_class = 1},
    {.name = "seen", .dim = 2, .sparse = 1, .is_class = 1, .max_steps = TS_TMAX},
  };
  em_dataset *train, *test;
  CHECK(em_dataset_open_ctf(path_of("train.ctf"), decl, 3, &train));
  CHECK(em_dataset_open_ctf(path_of("test.ctf"), decl, 3, &test));
  assert_int_equal(em_dataset_samples(train), 512);
  assert_int_equal(em_dataset_n_streams(train), 5); /* x first seen x.lengths seen.lengths */

  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, first, seen, lens, logits_seq, logits_step, hn, y3, seq_ce, seq_loss, step_loss, step_err, loss, err;
  CHECK(em_input(g, "x", EM_F32, 3, (int64_t[]){-1, TS_TMAX, TS_SYM}, &x));
  CHECK(em_input(g, "first", EM_I32, 1, (int64_t[]){-1}, &first));
  CHECK(em_input(g, "seen", EM_I32, 2, (int64_t[]){-1, TS_TMAX}, &seen));
  CHECK(em_input(g, "x.lengths", EM_I64, 1, (int64_t[]){-1}, &lens));
  em_layers L = {.graph = g, .seed = 3};
  em_recurrent_outputs r;
  CHECK(em_lstm(&L, NULL, x, TS_H, &(em_recurrent_layer_opts){.rnn.layout = 1, .sequence_lens = &lens}, &r));
  em_attr s2 = {.name = "shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){-1, TS_H}, .n = 2};
  em_attr s3 = {.name = "shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){-1, TS_TMAX, TS_H}, .n = 3};
  CHECK(em_apply(g, "reshape", &r.y_h, 1, &s2, 1, &hn, 1));
  CHECK(em_apply(g, "reshape", &r.y, 1, &s3, 1, &y3, 1));
  CHECK(em_dense(&L, "first_head", hn, TS_SYM, NULL, &logits_seq));
  CHECK(em_dense(&L, "seen_head", y3, 2, NULL, &logits_step));
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){logits_seq, first}, 2, NULL, 0, &seq_ce, 1));
  CHECK(em_apply(g, "reduce_mean", &seq_ce, 1, NULL, 0, &seq_loss, 1));
  CHECK(em_sequence_cross_entropy(g, logits_step, seen, lens, &step_loss, &step_err));
  CHECK(em_apply(g, "add", (em_var[]){seq_loss, step_loss}, 2, NULL, 0, &loss, 1));
  CHECK(em_apply(g, "classification_error", (em_var[]){logits_seq, first}, 2, NULL, 0, &err, 1));

  size_t np;
  em_var params[16];
  CHECK(em_graph_parameters(g, params, 16, &np));
  em_learner_config lc;
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.04, &lc));
  em_learner *l;
  CHECK(em_learner_create(&lc, NULL, params, (int)np, &l));
  em_trainer *tr;
  CHECK(em_trainer_create(g, loss, err, &l, 1, NULL, &tr));
  em_minibatch_source *src, *val;
  CHECK(em_minibatch_source_create(train, &(em_minibatch_options){.batch_size = 32, .shuffle = 1, .seed = 4}, &src));
  CHECK(em_minibatch_source_create(test, &(em_minibatch_options){.batch_size = 64, .max_sweeps = 1}, &val));
  /* The streams in data set order: x, first, seen, x.lengths, seen.lengths (not needed). */
  const em_var inputs[5] = {x, first, seen, lens, -1};
  const int epochs = 16; /* 256 steps; 100% from about 12 epochs on */
  em_fit_result fr;
  CHECK(em_trainer_fit(tr, &(em_fit_options){.epochs = epochs, .train = src, .inputs = inputs, .n_inputs = 5},
                       &fr));
  em_minibatch_result res;
  CHECK(em_trainer_evaluate(tr, val, inputs, 5, &res));
  /* The per-step accuracy, over the valid steps of the held-out set. */
  em_exec *ev;
  CHECK(em_exec_create(g, &step_err, 1, em_cpu(), &ev));
  em_minibatch mb;
  CHECK(em_minibatch_rewind(val));
  double wrong_steps = 0, steps = 0;
  for (;;) {
    memset(&mb, 0, sizeof mb);
    CHECK(em_minibatch_next(val, &mb));
    if (mb.end_of_data) break;
    em_feed f[4] = {{x, mb.values[0]}, {first, mb.values[1]}, {seen, mb.values[2]}, {lens, mb.values[3]}};
    em_tensor *o = NULL;
    CHECK(em_exec_run(ev, f, 4, &o));
    double n_steps = 0;
    for (int64_t k = 0; k < mb.samples; k++) n_steps += (double)((const int64_t *)em_tensor_data(mb.values[3]))[k];
    wrong_steps += *(const float *)em_tensor_data(o) * n_steps;
    steps += n_steps;
    em_tensor_release(o);
    em_minibatch_clear(&mb);
  }
  em_minibatch_clear(&mb);
  double seq_acc = 1 - res.metric, step_acc = 1 - wrong_steps / steps;
  print_message("LSTM on CTF sequences of lengths 3..12 (%d epochs of 512): held-out first-symbol accuracy %.1f%% "
                "(chance 25%%), per-step 'symbol 0 seen' accuracy %.1f%% over %.0f valid steps\n", epochs,
                100 * seq_acc, 100 * step_acc, steps);
  if (!(seq_acc >= 0.95)) fail_msg("first-symbol accuracy %.1f%%; >= 95%% expected", 100 * seq_acc);
  if (!(step_acc >= 0.98)) fail_msg("per-step accuracy %.1f%%; >= 98%% expected", 100 * step_acc);
  em_exec_free(ev);
  em_minibatch_source_free(val);
  em_minibatch_source_free(src);
  em_trainer_free(tr);
  em_learner_free(l);
  em_graph_free(g);
  em_dataset_free(test);
  em_dataset_free(train);
}

int main(void) {
  g_gpus = ts_use_gpu();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ctf_sequence_streams),
    cmocka_unit_test(test_ctf_truncate),
    cmocka_unit_test(test_ctf_sequence_errors),
    cmocka_unit_test(test_mask_and_masked_mean),
    cmocka_unit_test(test_padding_invariance),
    cmocka_unit_test(test_lstm_trains_on_ctf_sequences),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
