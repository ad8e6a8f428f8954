/* Checkpoints (include/ember/checkpoint.h, training/checkpoint.c): the
 * round trip (every byte of every parameter, state and section), the layout
 * read back by hand from docs/checkpoint-format.md with xxhash computed here,
 * every kind of damage refused with a message naming the file and the part
 * (each byte flipped in turn, truncation at every offset, foreign files, a
 * newer version, edits resealed so the parsers behind the checksums see
 * them), the atomic write under SIGKILL (a writer killed 100 times at random
 * points, the checkpoint always one of the versions written), and the
 * executor's run counter that a resumed training restores; `ember checkpoint
 * inspect` ($EMBER_CLI, skipped without it) against the layout read here.
 *
 * Under valgrind (RUNNING_ON_VALGRIND) the byte sweeps take every 7th
 * offset and the kill test does 12 kills instead of 100. */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <valgrind/valgrind.h>

#include <jansson.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "op_testkit.h"

/* ------------------------------------------------------------- helpers --- */

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void set64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void expect_error(em_status got, em_status want, const char *needle1, const char *needle2) {
  if (got != want)
    fail_msg("got %s, want %s (%s)", em_status_name(got), em_status_name(want), em_last_error());
  if (needle1 && !strstr(em_last_error(), needle1)) fail_msg("'%s' not in: %s", needle1, em_last_error());
  if (needle2 && !strstr(em_last_error(), needle2)) fail_msg("'%s' not in: %s", needle2, em_last_error());
}

/* The layout as docs/checkpoint-format.md gives it, read from the bytes. */
typedef struct layout {
  uint32_t n;
  struct {
    char name[57];
    uint64_t offset, size, sum;
  } s[16];
} layout;

static void read_layout(const unsigned char *f, size_t size, layout *l) {
  assert_memory_equal(f, "EMBRCKPT", 8);
  assert_int_equal(le32(f + 8), 1);
  l->n = le32(f + 12);
  assert_true(l->n >= 1 && l->n <= 16);
  assert_int_equal(le64(f + 16), size);
  assert_int_equal(le64(f + 24), XXH3_64bits(f, 24));
  size_t table_end = 32 + 80 * (size_t)l->n;
  assert_int_equal(le64(f + table_end), XXH3_64bits(f + 32, 80 * (size_t)l->n));
  uint64_t at = table_end + 8;
  for (uint32_t i = 0; i < l->n; i++) {
    const unsigned char *e = f + 32 + 80 * i;
    memcpy(l->s[i].name, e, 56);
    l->s[i].name[56] = 0;
    l->s[i].offset = le64(e + 56);
    l->s[i].size = le64(e + 64);
    l->s[i].sum = le64(e + 72);
    assert_int_equal(l->s[i].offset, at);
    assert_int_equal(l->s[i].sum, XXH3_64bits(f + at, l->s[i].size));
    at += (l->s[i].size + 7) / 8 * 8;
  }
  assert_int_equal(at + 8, size);
  assert_int_equal(le64(f + size - 8), XXH3_64bits(f, size - 8));
}

/* Recomputes every checksum of an edited file, so the edit reaches the
 * parsers behind them (sizes and offsets are left as they are). */
static void reseal(unsigned char *f, size_t size) {
  uint32_t n = le32(f + 12);
  for (uint32_t i = 0; i < n; i++) {
    unsigned char *e = f + 32 + 80 * i;
    set64(e + 72, XXH3_64bits(f + le64(e + 56), le64(e + 64)));
  }
  set64(f + 32 + 80 * (size_t)n, XXH3_64bits(f + 32, 80 * (size_t)n));
  set64(f + 24, XXH3_64bits(f, 24));
  set64(f + size - 8, XXH3_64bits(f, size - 8));
}

/* A small model: parameters of three dtypes, learner states. */
typedef struct model {
  em_graph *g;
  em_var w, b, steps, m, v;
} model;

static model make_model(uint64_t seed) {
  model md;
  assert_int_equal(em_graph_create(&md.g), EM_OK);
  em_init normal = {.kind = EM_INIT_NORMAL, .scale = 1, .seed = seed};
  assert_int_equal(em_parameter(md.g, "fc.weight", EM_F32, 2, (int64_t[]){7, 5}, &normal, &md.w), EM_OK);
  normal.seed++;
  assert_int_equal(em_parameter(md.g, "fc.bias", EM_F64, 1, (int64_t[]){7}, &normal, &md.b), EM_OK);
  em_tensor *steps = ot_tensor(EM_I64, 1, (int64_t[]){3}, (double[]){42, -7, 1e15});
  assert_int_equal(
    em_state(md.g, "fc.steps", EM_I64, 1, (int64_t[]){3}, &(em_init){.kind = EM_INIT_FROM_DATA, .data = steps}, &md.steps),
    EM_OK);
  em_tensor_release(steps);
  normal.seed++;
  assert_int_equal(em_state(md.g, "fc.weight.adam.m", EM_F32, 2, (int64_t[]){7, 5}, &normal, &md.m), EM_OK);
  normal.seed++;
  assert_int_equal(em_state(md.g, "fc.weight.adam.v", EM_F32, 2, (int64_t[]){7, 5}, &normal, &md.v), EM_OK);
  return md;
}

/* Every byte of a leaf's value, and its dtype and shape, equal. */
static void expect_same_value(em_graph *a, em_graph *b, em_var v) {
  em_tensor *x, *y;
  assert_int_equal(em_parameter_value(a, v, &x), EM_OK);
  assert_int_equal(em_parameter_value(b, v, &y), EM_OK);
  assert_int_equal(em_tensor_dtype(x), em_tensor_dtype(y));
  assert_int_equal(em_tensor_ndim(x), em_tensor_ndim(y));
  assert_memory_equal(em_tensor_shape(x), em_tensor_shape(y), sizeof(int64_t) * (size_t)em_tensor_ndim(x));
  assert_memory_equal(em_tensor_data(x), em_tensor_data(y),
                      (size_t)em_tensor_numel(x) * em_dtype_size(em_tensor_dtype(x)));
  em_tensor_release(x);
  em_tensor_release(y);
}

static size_t sweep_step(void) { return RUNNING_ON_VALGRIND ? 7 : 1; }

/* A checkpoint of the small model with three sections; *bytes its file. */
static unsigned char *small_checkpoint(const char *path, size_t *n) {
  model md = make_model(3);
  unsigned char trainer[24] = "epoch=3;steps=1234";
  em_checkpoint_section s[] = {{"trainer", trainer, sizeof trainer}, {"learner.0", "\x01\x02\x03", 3},
                               {"reader", NULL, 0}};
  assert_int_equal(em_checkpoint_save(path, md.g, s, 3, NULL), EM_OK);
  em_graph_free(md.g);
  return ot_read_file(path, n);
}

/* ----------------------------------------------------------- round trip --- */

static void test_round_trip(void **state) {
  (void)state;
  char path[512];
  ot_tmp_path(path, sizeof path, "round.ckpt");
  model md = make_model(11);
  unsigned char big[20000];
  uint64_t r = 99;
  for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)(ot_uniform(&r, 0, 256));
  em_checkpoint_section s[] = {{"trainer", "T", 1}, {"learner.0", big, sizeof big}, {"empty", NULL, 0},
                               {"reader.state_2-x", big + 5, 13}};
  time_t before = time(NULL);
  em_checkpoint_save_options o = {.device = em_cpu(), .mode = EM_MODE_PORTABLE};
  assert_int_equal(em_checkpoint_save(path, md.g, s, 4, &o), EM_OK);
  time_t after = time(NULL);

  /* No temporary file stays; the file has the mode a new file gets. */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1);
  mode_t mask = umask(022);
  umask(mask);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0666 & ~mask);

  /* The layout, read by hand. */
  size_t n;
  unsigned char *f = ot_read_file(path, &n);
  layout l;
  read_layout(f, n, &l);
  const char *want[] = {"manifest", "graph", "trainer", "learner.0", "empty", "reader.state_2-x"};
  assert_int_equal(l.n, 6);
  for (int i = 0; i < 6; i++) assert_string_equal(l.s[i].name, want[i]);
  assert_memory_equal(f + l.s[3].offset, big, sizeof big);
  /* The graph section is em_graph_save's file, byte for byte. */
  char gpath[512];
  ot_tmp_path(gpath, sizeof gpath, "round.emb");
  assert_int_equal(em_graph_save(md.g, gpath), EM_OK);
  size_t gn;
  unsigned char *gf = ot_read_file(gpath, &gn);
  assert_int_equal(gn, l.s[1].size);
  assert_memory_equal(gf, f + l.s[1].offset, gn);
  free(gf);
  unlink(gpath);

  em_checkpoint *c;
  assert_int_equal(em_checkpoint_load(path, &c), EM_OK);
  em_checkpoint_manifest m;
  assert_int_equal(em_checkpoint_get_manifest(c, &m), EM_OK);
  assert_int_equal(m.format_version, 1);
  assert_true(m.created >= before && m.created <= after);
  assert_string_equal(m.ember_version, em_version());
  assert_int_equal(m.device.kind, EM_DEVICE_CPU);
  assert_string_equal(m.device_name, "cpu");
  assert_int_equal(m.mode, EM_MODE_PORTABLE);
  assert_int_equal(m.file_size, n);
  assert_int_equal(em_checkpoint_section_count(c), 6);
  for (size_t i = 0; i < 6; i++) {
    em_checkpoint_section_info si;
    assert_int_equal(em_checkpoint_section_get(c, i, &si), EM_OK);
    assert_string_equal(si.name, want[i]);
    assert_int_equal(si.offset, l.s[i].offset);
    assert_int_equal(si.size, l.s[i].size);
    assert_int_equal(si.checksum, l.s[i].sum);
    if (si.size) assert_memory_equal(si.bytes, f + si.offset, si.size);
  }
  expect_error(em_checkpoint_section_get(c, 6, &(em_checkpoint_section_info){0}), EM_ERR_INVALID_ARGUMENT, path, NULL);
  for (int i = 0; i < 4; i++) {
    const void *b;
    size_t bn;
    assert_int_equal(em_checkpoint_find(c, s[i].name, &b, &bn), EM_OK);
    assert_int_equal(bn, s[i].size);
    if (bn) assert_memory_equal(b, s[i].bytes, bn);
  }
  const void *b;
  size_t bn;
  expect_error(em_checkpoint_find(c, "learner.1", &b, &bn), EM_ERR_NOT_FOUND, "learner.1", path);

  /* Every parameter and state, every byte; names and handles kept. */
  em_graph *g = em_checkpoint_graph(c);
  assert_non_null(g);
  em_var vars[] = {md.w, md.b, md.steps, md.m, md.v};
  for (int i = 0; i < 5; i++) expect_same_value(md.g, g, vars[i]);
  size_t np, ns;
  assert_int_equal(em_graph_parameters(g, NULL, 0, &np), EM_OK);
  assert_int_equal(em_graph_states(g, NULL, 0, &ns), EM_OK);
  assert_int_equal(np, 2);
  assert_int_equal(ns, 3);
  em_var found;
  assert_int_equal(em_graph_lookup(g, "fc.weight.adam.v", &found), EM_OK);
  assert_int_equal(found, md.v);
  em_graph *taken;
  assert_int_equal(em_checkpoint_take_graph(c, &taken), EM_OK);
  assert_ptr_equal(taken, g);
  assert_null(em_checkpoint_graph(c));
  expect_error(em_checkpoint_take_graph(c, &taken), EM_ERR_NOT_FOUND, path, NULL);
  em_checkpoint_free(c); /* the graph is the caller's now */
  expect_same_value(md.g, g, md.m);
  em_graph_free(g);

  /* Inspection without the graph. */
  assert_int_equal(em_checkpoint_info(path, &c), EM_OK);
  assert_null(em_checkpoint_graph(c));
  assert_int_equal(em_checkpoint_section_count(c), 6);
  em_checkpoint_free(c);

  /* Without a graph; a second save replaces the first. */
  assert_int_equal(em_checkpoint_save(path, NULL, s, 1, NULL), EM_OK);
  assert_int_equal(em_checkpoint_load(path, &c), EM_OK);
  assert_null(em_checkpoint_graph(c));
  assert_int_equal(em_checkpoint_section_count(c), 2);
  assert_int_equal(em_checkpoint_get_manifest(c, &m), EM_OK);
  assert_int_equal(m.mode, EM_MODE_FAST);
  em_checkpoint_free(c);

  free(f);
  em_graph_free(md.g);
  unlink(path);
}

static void test_bad_arguments(void **state) {
  (void)state;
  char path[512];
  ot_tmp_path(path, sizeof path, "args.ckpt");
  char n56[57], n55[56];
  memset(n56, 'n', 56);
  n56[56] = 0;
  memcpy(n55, n56, 55);
  n55[55] = 0;
  const char *bad_names[] = {"", "has space", "slash/x", "manifest", "graph", "tab\t", n56};
  for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
    em_checkpoint_section s = {bad_names[i], "x", 1};
    expect_error(em_checkpoint_save(path, NULL, &s, 1, NULL), EM_ERR_INVALID_ARGUMENT, "name", NULL);
  }
  em_checkpoint_section ok55 = {n55, "x", 1};
  assert_int_equal(em_checkpoint_save(path, NULL, &ok55, 1, NULL), EM_OK);
  em_checkpoint_section two[] = {{"a", "x", 1}, {"a", "y", 1}};
  expect_error(em_checkpoint_save(path, NULL, two, 2, NULL), EM_ERR_INVALID_ARGUMENT, "two sections", "'a'");
  expect_error(em_checkpoint_save(path, NULL, &(em_checkpoint_section){"a", NULL, 3}, 1, NULL),
               EM_ERR_INVALID_ARGUMENT, "NULL", NULL);
  expect_error(em_checkpoint_save(NULL, NULL, NULL, 0, NULL), EM_ERR_INVALID_ARGUMENT, NULL, NULL);
  expect_error(em_checkpoint_load(NULL, &(em_checkpoint *){NULL}), EM_ERR_INVALID_ARGUMENT, NULL, NULL);
  /* A directory that does not exist: an I/O error naming the file. */
  expect_error(em_checkpoint_save("/nonexistent-dir/x.ckpt", NULL, NULL, 0, NULL), EM_ERR_IO, "/nonexistent-dir/x.ckpt",
               NULL);
  expect_error(em_checkpoint_load("/nonexistent-dir/x.ckpt", &(em_checkpoint *){NULL}), EM_ERR_IO,
               "/nonexistent-dir/x.ckpt", NULL);
  /* A directory opens but is no file: refused by name, by the checkpoint
   * and the graph loaders alike (one whole-file reader; it said "reading
   * ... failed"). */
  expect_error(em_checkpoint_load(".", &(em_checkpoint *){NULL}), EM_ERR_IO, "checkpoint: cannot read .",
               "it is a directory");
  expect_error(em_graph_load(".", &(em_graph *){NULL}), EM_ERR_IO, "em_graph_load: cannot read .", "it is a directory");
  /* The earlier checkpoint is still there, unchanged by the failed saves. */
  em_checkpoint *c;
  assert_int_equal(em_checkpoint_load(path, &c), EM_OK);
  assert_int_equal(em_checkpoint_section_count(c), 2);
  em_checkpoint_free(c);
  em_checkpoint_free(NULL);
  unlink(path);
}

/* ---------------------------------------------------------------- damage --- */

/* What the message must name for damage at byte i of a good file. */
static const char *part_at(const layout *l, size_t i, size_t size) {
  size_t table_end = 32 + 80 * (size_t)l->n;
  if (i < 8) return "not an Ember checkpoint";
  if (i < 32) return "header";
  if (i < table_end + 8) return "section table";
  if (i >= size - 8) return "trailer";
  for (uint32_t k = 0; k < l->n; k++)
    if (i >= l->s[k].offset && i < l->s[k].offset + l->s[k].size) {
      static char want[80];
      snprintf(want, sizeof want, "section '%s'", l->s[k].name);
      return want;
    }
  return "padding";
}

static void test_every_flipped_byte(void **state) {
  (void)state;
  char path[512], bad[512];
  ot_tmp_path(path, sizeof path, "flip.ckpt");
  ot_tmp_path(bad, sizeof bad, "flip_bad.ckpt");
  size_t n;
  unsigned char *f = small_checkpoint(path, &n);
  layout l;
  read_layout(f, n, &l);
  int parts_seen[8] = {0};
  for (size_t i = 0; i < n; i += sweep_step()) {
    f[i] ^= 0x10;
    ot_write_file(bad, f, n);
    em_checkpoint *c = (em_checkpoint *)1;
    const char *want = part_at(&l, i, n);
    expect_error(em_checkpoint_load(bad, &c), EM_ERR_CORRUPT, bad, want);
    assert_null(c);
    if (!strstr(em_last_error(), "offset") && !strstr(em_last_error(), "bytes "))
      fail_msg("no offset in: %s", em_last_error());
    f[i] ^= 0x10;
    const char *names[] = {"not an", "header", "table", "'manifest'", "'graph'", "'trainer'", "padding", "trailer"};
    for (int k = 0; k < 8; k++)
      if (strstr(want, names[k])) parts_seen[k] = 1;
  }
  for (int k = 0; k < 8; k++) assert_true(parts_seen[k]); /* the sweep reached every part */
  free(f);
  unlink(bad);
  unlink(path);
}

static void test_truncation_at_every_offset(void **state) {
  (void)state;
  char path[512], bad[512];
  ot_tmp_path(path, sizeof path, "trunc.ckpt");
  ot_tmp_path(bad, sizeof bad, "trunc_bad.ckpt");
  size_t n;
  unsigned char *f = small_checkpoint(path, &n);
  for (size_t cut = 0; cut < n; cut += sweep_step()) {
    ot_write_file(bad, f, cut);
    em_checkpoint *c = (em_checkpoint *)1;
    char at[64];
    snprintf(at, sizeof at, "truncated at byte %zu", cut);
    expect_error(em_checkpoint_load(bad, &c), EM_ERR_CORRUPT, bad, at);
    assert_null(c);
  }
  /* And a byte too many. */
  unsigned char *longer = malloc(n + 1);
  memcpy(longer, f, n);
  longer[n] = 0;
  ot_write_file(bad, longer, n + 1);
  expect_error(em_checkpoint_load(bad, &(em_checkpoint *){NULL}), EM_ERR_CORRUPT, bad, "after the end");
  free(longer);
  free(f);
  unlink(bad);
  unlink(path);
}

static void test_foreign_and_newer_files(void **state) {
  (void)state;
  char path[512], bad[512];
  ot_tmp_path(path, sizeof path, "foreign.ckpt");
  ot_tmp_path(bad, sizeof bad, "foreign_bad.ckpt");
  em_checkpoint *c;
  const char *text = "PK\x03\x04 this is a zip file, or something else entirely, long enough to have a header";
  ot_write_file(bad, (const unsigned char *)text, strlen(text));
  expect_error(em_checkpoint_load(bad, &c), EM_ERR_CORRUPT, bad, "not an Ember checkpoint");
  /* A graph file (em_graph_save) is named as one. */
  model md = make_model(1);
  assert_int_equal(em_graph_save(md.g, bad), EM_OK);
  expect_error(em_checkpoint_info(bad, &c), EM_ERR_CORRUPT, bad, "graph file");
  em_graph_free(md.g);

  size_t n;
  unsigned char *f = small_checkpoint(path, &n);
  /* A newer version, with a valid header: refused naming both versions. */
  f[8] = 2;
  set64(f + 24, XXH3_64bits(f, 24));
  ot_write_file(bad, f, n);
  expect_error(em_checkpoint_load(bad, &c), EM_ERR_UNSUPPORTED, "version 2", "version 1");
  assert_non_null(strstr(em_last_error(), bad));
  /* The same byte damaged (header checksum not updated): damage, not a version. */
  set64(f + 24, XXH3_64bits(f, 24) ^ 1);
  ot_write_file(bad, f, n);
  expect_error(em_checkpoint_load(bad, &c), EM_ERR_CORRUPT, "header", "checksum");
  f[8] = 1;
  set64(f + 24, XXH3_64bits(f, 24));
  layout l;
  read_layout(f, n, &l);

  /* Edits resealed, so the parsers behind the checksums see them. */
  unsigned char *e = malloc(n);
  /* An op name in the graph this build does not know. */
  memcpy(e, f, n);
  unsigned char *g = e + l.s[1].offset;
  int edited = 0;
  for (size_t i = 0; i + 8 <= l.s[1].size; i++)
    if (!memcmp(g + i, "EMBRGRPH", 8)) g[i + 7] = 'X', edited = 1;
  assert_true(edited);
  reseal(e, n);
  ot_write_file(bad, e, n);
  expect_error(em_checkpoint_load(bad, &c), EM_ERR_CORRUPT, bad, "section 'graph'");
  /* ... while inspection, which does not build the graph, still reads it. */
  assert_int_equal(em_checkpoint_info(bad, &c), EM_OK);
  em_checkpoint_free(c);
  /* A manifest that is not JSON, then one missing a field. */
  memcpy(e, f, n);
  e[l.s[0].offset] = '[';
  reseal(e, n);
  ot_write_file(bad, e, n);
  expect_error(em_checkpoint_info(bad, &c), EM_ERR_CORRUPT, bad, "section 'manifest'");
  memcpy(e, f, n);
  char *mode = memmem(e + l.s[0].offset, l.s[0].size, "\"mode\"", 6);
  assert_non_null(mode);
  mode[1] = 'M';
  reseal(e, n);
  ot_write_file(bad, e, n);
  expect_error(em_checkpoint_info(bad, &c), EM_ERR_CORRUPT, "section 'manifest'", "mode");
  /* A section table whose entries overlap, or a second 'graph'. */
  memcpy(e, f, n);
  set64(e + 32 + 80 * 2 + 56, l.s[2].offset - 8);
  reseal(e, n);
  ot_write_file(bad, e, n);
  expect_error(em_checkpoint_info(bad, &c), EM_ERR_CORRUPT, "section table entry 2", "'trainer'");
  memcpy(e, f, n);
  memcpy(e + 32 + 80 * 3, "graph\0\0\0\0", 10);
  reseal(e, n);
  ot_write_file(bad, e, n);
  expect_error(em_checkpoint_info(bad, &c), EM_ERR_CORRUPT, "section table entry 3", "graph");
  /* A section count too large for the file. */
  memcpy(e, f, n);
  e[12] = 200;
  set64(e + 24, XXH3_64bits(e, 24)); /* the header's own checksum only: the table is not read */
  ot_write_file(bad, e, n);
  expect_error(em_checkpoint_info(bad, &c), EM_ERR_CORRUPT, bad, "sections do not fit");
  free(e);
  free(f);
  unlink(bad);
  unlink(path);
}

/* ---------------------------------------------------- kill during save --- */

#define BIG_WORDS 32768 /* a 256 KiB section: writes long enough to be killed in */

/* Version k: every weight k, the section's every word k. */
static int child_saves(const char *path, uint64_t first) {
  em_graph *g;
  em_var w;
  if (em_graph_create(&g) ||
      em_parameter(g, "w", EM_F32, 1, (int64_t[]){256}, &(em_init){.kind = EM_INIT_CONSTANT}, &w))
    return 1;
  uint64_t *words = malloc(sizeof(uint64_t) * BIG_WORDS);
  for (uint64_t k = first;; k++) {
    em_tensor *t;
    if (em_parameter_value(g, w, &t)) return 1;
    float *p = em_tensor_data(t);
    for (int i = 0; i < 256; i++) p[i] = (float)k;
    em_tensor_release(t);
    for (int i = 0; i < BIG_WORDS; i++) words[i] = k;
    em_checkpoint_section s = {"counter", words, sizeof(uint64_t) * BIG_WORDS};
    if (em_checkpoint_save(path, g, &s, 1, NULL)) {
      fprintf(stderr, "child: %s\n", em_last_error());
      return 1;
    }
  }
}

/* The version the checkpoint holds; fails unless it is whole and one. */
static uint64_t version_of(const char *path) {
  em_checkpoint *c;
  if (em_checkpoint_load(path, &c)) fail_msg("after a kill: %s", em_last_error());
  const void *b;
  size_t n;
  assert_int_equal(em_checkpoint_find(c, "counter", &b, &n), EM_OK);
  assert_int_equal(n, sizeof(uint64_t) * BIG_WORDS);
  uint64_t k;
  memcpy(&k, b, 8);
  for (int i = 0; i < BIG_WORDS; i++) assert_memory_equal((const uint64_t *)b + i, &k, 8);
  em_var w;
  assert_int_equal(em_graph_lookup(em_checkpoint_graph(c), "w", &w), EM_OK);
  em_tensor *t;
  assert_int_equal(em_parameter_value(em_checkpoint_graph(c), w, &t), EM_OK);
  const float *p = em_tensor_data(t);
  for (int i = 0; i < 256; i++) assert_true(p[i] == (float)k);
  em_tensor_release(t);
  em_checkpoint_free(c);
  return k;
}

/* What the directory holds besides the checkpoint: 1 for "<name>.tmp", and
 * anything else fails. */
static int leftovers(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int tmp = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "run.ckpt")) continue;
    if (!strcmp(e->d_name, "run.ckpt.tmp")) tmp = 1;
    else fail_msg("unexpected file %s/%s", dir, e->d_name);
  }
  closedir(d);
  return tmp;
}

static void test_kill_during_save(void **state) {
  (void)state;
  char dir[512], path[600], tmp[640];
  snprintf(dir, sizeof dir, "%s/ember_ckp_kill_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/run.ckpt", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  /* A first writer, killed once its first save is complete (the path
   * appears only through a rename). */
  pid_t first = fork();
  assert_true(first >= 0);
  if (first == 0) _exit(child_saves(path, 0));
  while (access(path, F_OK)) {
    int status;
    if (waitpid(first, &status, WNOHANG) == first) fail_msg("the first writer exited (status %d)", status);
    usleep(200);
  }
  kill(first, SIGKILL);
  waitpid(first, NULL, 0);
  uint64_t last = version_of(path);

  int kills = RUNNING_ON_VALGRIND ? 12 : 100, torn_tmp = 0;
  uint64_t seed = 0x5eed;
  for (int round = 0; round < kills; round++) {
    uint64_t base = (uint64_t)(round + 1) * 100000;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(child_saves(path, base));
    if (round % 2) {
      /* Kill while a save is under way: as soon as its temporary file is
       * seen, after a leftover one (reused by the first save) has gone. */
      for (int phase = access(tmp, F_OK) ? 1 : 0; phase < 2;) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) fail_msg("the writer exited (status %d)", status);
        if ((access(tmp, F_OK) == 0) == (phase == 1)) phase++;
        else sched_yield();
      }
    } else {
      /* Kill at a random moment: 0 to 20 ms in (0 to 200 ms under valgrind). */
      useconds_t us = (useconds_t)ot_uniform(&seed, 0, RUNNING_ON_VALGRIND ? 200000 : 20000);
      usleep(us);
    }
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status)); /* it was saving, not failing */
    uint64_t k = version_of(path);
    /* One of the versions written: the last before the kill is at least as
     * new as the one seen before, and comes from this writer or an earlier. */
    assert_true(k >= last && k < base + 100000);
    last = k;
    torn_tmp += leftovers(dir);
  }
  /* Kills during saves left a temporary file; the next save reuses it and
   * renames it away, so the directory ends with the checkpoint alone. */
  assert_true(torn_tmp > 0);
  em_checkpoint_section s = {"counter", "x", 1};
  assert_int_equal(em_checkpoint_save(path, NULL, &s, 1, NULL), EM_OK);
  assert_int_equal(leftovers(dir), 0);
  print_message("kill-during-save: %d kills, %d left a temporary file, last version %llu\n", kills, torn_tmp,
                (unsigned long long)last);
  unlink(path);
  rmdir(dir);
}

/* A save while another holds the temporary file's lock fails at once and
 * leaves the checkpoint as it was. */
static void test_concurrent_save_refused(void **state) {
  (void)state;
  char path[512], tmp[600];
  ot_tmp_path(path, sizeof path, "locked.ckpt");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  em_checkpoint_section s = {"a", "1", 1};
  assert_int_equal(em_checkpoint_save(path, NULL, &s, 1, NULL), EM_OK);
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    /* Holds the lock as a writer in the middle of a save would. */
    int fd = open(tmp, O_WRONLY | O_CREAT, 0666);
    if (fd < 0 || flock(fd, LOCK_EX)) _exit(1);
    if (write(pipefd[1], "k", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char ch;
  assert_int_equal(read(pipefd[0], &ch, 1), 1);
  em_checkpoint_section s2 = {"b", "2", 1};
  expect_error(em_checkpoint_save(path, NULL, &s2, 1, NULL), EM_ERR_IO, "in progress", path);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  em_checkpoint *c;
  assert_int_equal(em_checkpoint_load(path, &c), EM_OK);
  const void *b;
  size_t n;
  assert_int_equal(em_checkpoint_find(c, "a", &b, &n), EM_OK);
  em_checkpoint_free(c);
  /* The dead holder's file is reused. */
  assert_int_equal(em_checkpoint_save(path, NULL, &s2, 1, NULL), EM_OK);
  assert_int_equal(access(tmp, F_OK), -1);
  close(pipefd[0]);
  close(pipefd[1]);
  unlink(path);
}

/* --------------------------------------------- ember checkpoint inspect --- */

/* Runs $EMBER_CLI with args; *out its stdout (malloc'd); the exit status. */
static int run_cli(const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", getenv("EMBER_CLI"), args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, n = 0, k;
  char *buf = malloc(cap);
  while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
    n += k;
    if (n + 1 == cap) buf = realloc(buf, cap *= 2);
  }
  buf[n] = 0;
  int ws = pclose(p);
  *out = buf;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void test_cli_inspect(void **state) {
  (void)state;
  if (!getenv("EMBER_CLI") || !*getenv("EMBER_CLI")) skip(); /* run through build-tools/run_tests.sh */
  char path[512], args[1200];
  ot_tmp_path(path, sizeof path, "cli.ckpt");
  size_t n;
  unsigned char *f = small_checkpoint(path, &n);
  layout l;
  read_layout(f, n, &l);
  char *out;
  snprintf(args, sizeof args, "checkpoint inspect '%s' --json", path);
  assert_int_equal(run_cli(args, &out), 0);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  if (!j) fail_msg("not JSON: %s\n%s", je.text, out);
  free(out);
  assert_int_equal(json_integer_value(json_object_get(j, "format_version")), 1);
  assert_int_equal(json_integer_value(json_object_get(j, "file_size")), n);
  assert_string_equal(json_string_value(json_object_get(j, "mode")), "fast");
  json_t *secs = json_object_get(j, "sections");
  assert_int_equal(json_array_size(secs), l.n);
  for (uint32_t i = 0; i < l.n; i++) {
    json_t *s = json_array_get(secs, i);
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)l.s[i].sum);
    assert_string_equal(json_string_value(json_object_get(s, "name")), l.s[i].name);
    assert_int_equal(json_integer_value(json_object_get(s, "offset")), l.s[i].offset);
    assert_int_equal(json_integer_value(json_object_get(s, "size")), l.s[i].size);
    assert_string_equal(json_string_value(json_object_get(s, "xxh3_64")), sum);
  }
  /* The small model: fc.weight f32 [7,5], fc.bias f64 [7]; three states. */
  json_t *ps = json_object_get(j, "parameters");
  assert_int_equal(json_array_size(ps), 2);
  json_t *w = json_array_get(ps, 0);
  assert_string_equal(json_string_value(json_object_get(w, "name")), "fc.weight");
  assert_string_equal(json_string_value(json_object_get(w, "dtype")), "f32");
  assert_int_equal(json_integer_value(json_array_get(json_object_get(w, "shape"), 1)), 5);
  assert_int_equal(json_integer_value(json_object_get(w, "count")), 35);
  assert_int_equal(json_integer_value(json_object_get(j, "parameter_count")), 42);
  assert_int_equal(json_array_size(json_object_get(j, "states")), 3);
  assert_int_equal(json_integer_value(json_object_get(j, "state_count")), 3 + 35 + 35);
  json_decref(j);
  /* The text form names the sections; a damaged file exits 1; usage 64. */
  snprintf(args, sizeof args, "checkpoint inspect '%s'", path);
  assert_int_equal(run_cli(args, &out), 0);
  assert_non_null(strstr(out, "learner.0"));
  assert_non_null(strstr(out, "fc.weight.adam.m"));
  free(out);
  /* ember eval of a whole checkpoint that `ember train` did not write (no
   * "ember-train" section): malformed for eval (65), not missing (66). */
  snprintf(args, sizeof args, "eval --checkpoint '%s' --device cpu", path);
  assert_int_equal(run_cli(args, &out), 65);
  free(out);
  f[l.s[2].offset] ^= 1;
  ot_write_file(path, f, n);
  snprintf(args, sizeof args, "checkpoint inspect '%s' --json", path);
  assert_int_equal(run_cli(args, &out), 1);
  j = json_loads(out, 0, &je);
  assert_non_null(j);
  assert_non_null(strstr(json_string_value(json_object_get(j, "error")), "section 'trainer'"));
  json_decref(j);
  free(out);
  assert_int_equal(run_cli("checkpoint inspect", &out), 64);
  free(out);
  assert_int_equal(run_cli("checkpoint --help", &out), 0);
  assert_non_null(strstr(out, "Exit codes"));
  free(out);
  free(f);
  unlink(path);
}

/* ------------------------------------------------------ the run counter --- */

/* Dropout's mask is a function of the run count: an executor set to run k
 * draws what the k-th run of one that never stopped drew. */
static void test_exec_set_runs_continues_dropout(void **state) {
  (void)state;
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var x, y;
  assert_int_equal(em_input(g, "x", EM_F32, 1, (int64_t[]){512}, &x), EM_OK);
  em_attr a[] = {{.name = "ratio", .type = EM_ATTR_FLOAT, .f = 0.5}, {.name = "seed", .type = EM_ATTR_INT, .i = 9}};
  assert_int_equal(em_apply(g, "dropout", &x, 1, a, 2, &y, 1), EM_OK);
  double one[512];
  for (int i = 0; i < 512; i++) one[i] = 1;
  em_tensor *ones = ot_tensor(EM_F32, 1, (int64_t[]){512}, one);
  em_feed feed = {x, ones};
  float runs[4][512];
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  assert_int_equal(em_exec_set_training(e, 1), EM_OK);
  for (int r = 0; r < 4; r++) {
    em_tensor *out;
    assert_int_equal(em_exec_run(e, &feed, 1, &out), EM_OK);
    memcpy(runs[r], em_tensor_data(out), sizeof runs[r]);
    em_tensor_release(out);
  }
  em_exec_free(e);
  assert_memory_not_equal(runs[1], runs[2], sizeof runs[1]); /* masks differ from run to run */
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  assert_int_equal(em_exec_set_training(e, 1), EM_OK);
  assert_int_equal(em_exec_set_runs(e, 2), EM_OK);
  em_exec_stats st;
  assert_int_equal(em_exec_stats_get(e, &st), EM_OK);
  assert_int_equal(st.runs, 2);
  for (int r = 2; r < 4; r++) {
    em_tensor *out;
    assert_int_equal(em_exec_run(e, &feed, 1, &out), EM_OK);
    assert_memory_equal(em_tensor_data(out), runs[r], sizeof runs[r]);
    em_tensor_release(out);
  }
  em_exec_free(e);
  expect_error(em_exec_set_runs(NULL, 1), EM_ERR_INVALID_ARGUMENT, NULL, NULL);
  em_tensor_release(ones);
  em_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_round_trip),
    cmocka_unit_test(test_bad_arguments),
    cmocka_unit_test(test_every_flipped_byte),
    cmocka_unit_test(test_truncation_at_every_offset),
    cmocka_unit_test(test_foreign_and_newer_files),
    cmocka_unit_test(test_kill_during_save),
    cmocka_unit_test(test_concurrent_save_refused),
    cmocka_unit_test(test_cli_inspect),
    cmocka_unit_test(test_exec_set_runs_continues_dropout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
