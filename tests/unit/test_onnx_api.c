/* The public ONNX API (include/ember/onnx.h).
 *
 * ONNX backend node tests of Debian's libonnx-testdata ($EMBER_ONNX_TESTDATA
 * or /usr/share/libonnx-testdata/data/node; skipped with a message when
 * absent) are loaded through em_onnx_load and em_onnx_load_buffer, run with
 * em_onnx_run on the CPU and on a GPU of the libcuda test double
 * ($FAKECUDA_LIB), and their outputs compared with the test's output_N.pb:
 * the values ONNX's reference computed, read with the internal tensor reader
 * (not the import or run under test). Small models written here byte by
 * byte (protobuf's wire format) check what the node tests lack: symbolic
 * dimensions, a failing node that is not the first, named in the message.
 * Malformed files give the documented status and a message naming the
 * problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"
#include "onnx_import.h"
#include "onnx_reader.h"

static int have_gpu; /* the test double gives cuda:0 */

static const char *node_dir(void) {
  const char *d = getenv("EMBER_ONNX_TESTDATA");
  return d && *d ? d : "/usr/share/libonnx-testdata/data/node";
}

static int have_testdata(void) {
  char p[1024];
  struct stat st;
  snprintf(p, sizeof p, "%s/test_abs/model.onnx", node_dir());
  if (stat(p, &st) == 0) return 1;
  print_message("SKIPPED: libonnx-testdata not found under %s (apt-get install libonnx-testdata)\n", node_dir());
  return 0;
}

#define NEED_TESTDATA()          \
  do {                           \
    if (!have_testdata()) skip(); \
  } while (0)

static void *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return b;
}

static void expect_fail(em_status got, em_status want, const char *const *words) {
  if (got != want) fail_msg("status %s, expected %s: %s", em_status_name(got), em_status_name(want), em_last_error());
  for (; *words; words++)
    if (!strstr(em_last_error(), *words)) fail_msg("message lacks \"%s\": %s", *words, em_last_error());
}
#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A test data file (input_N.pb, output_N.pb) as an Ember CPU tensor. */
static em_tensor *pb_tensor(const char *test, const char *file) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s/test_data_set_0/%s", node_dir(), test, file);
  em_onnx_tensor *t;
  em_tensor *out;
  if (em_onnx_tensor_load(p, &t)) fail_msg("%s", em_last_error());
  if (em_onnx_tensor_to_em(t, &out)) fail_msg("%s", em_last_error());
  em_onnx_tensor_free(t);
  return out;
}

/* got (any device) against want (the reference, CPU): dtype and shape
 * exactly, integers and bools exactly, floats to |d| <= 1e-5 + 1e-4 |want|
 * (the node tests' values are f32 computed by numpy; ONNX's runner allows
 * rtol 1e-3). */
static void expect_close(const em_tensor *got, const em_tensor *want, const char *what) {
  char a[128], b[128];
  em_tensor_describe(got, a, sizeof a);
  em_tensor_describe(want, b, sizeof b);
  if (strcmp(a, b)) fail_msg("%s: got %s, expected %s", what, a, b);
  size_t n = (size_t)em_tensor_numel(want), es = em_dtype_size(em_tensor_dtype(want));
  unsigned char *g = malloc(n * es + 1), *w = malloc(n * es + 1);
  assert_non_null(g);
  assert_non_null(w);
  assert_int_equal(em_tensor_to_host(got, g, n * es), EM_OK);
  assert_int_equal(em_tensor_to_host(want, w, n * es), EM_OK);
  for (size_t i = 0; i < n; i++) {
    em_dtype t = em_tensor_dtype(want);
    if (t == EM_F32 || t == EM_F64) {
      double x = t == EM_F32 ? ((float *)g)[i] : ((double *)g)[i], y = t == EM_F32 ? ((float *)w)[i] : ((double *)w)[i];
      double d = x > y ? x - y : y - x;
      if (!(d <= 1e-5 + 1e-4 * (y < 0 ? -y : y))) fail_msg("%s: element %zu is %.9g, expected %.9g", what, i, x, y);
    } else if (memcmp(g + i * es, w + i * es, es)) {
      fail_msg("%s: element %zu differs from the reference", what, i);
    }
  }
  free(g);
  free(w);
}

/* ------------------------------------------------------ node-test runs --- */

typedef struct node_case {
  const char *test;
  unsigned at_load; /* bit k: input k is given at load (Ember takes it as an attribute) */
} node_case;

static const node_case cases[] = {
    {"test_abs", 0},                          /* one input */
    {"test_add_bcast", 0},                    /* two, broadcast */
    {"test_equal_bcast", 0},                  /* int32 in, bool out */
    {"test_argmax_default_axis_example", 0},  /* int64 out */
    {"test_gemm_all_attributes", 0},          /* attributes, three inputs */
    {"test_conv_with_strides_padding", 0},
    {"test_maxpool_2d_pads", 0},
    {"test_softmax_axis_0", 0},
    {"test_reshape_reordered_all_dims", 2u}, /* shape: known at load */
};

/* Loads c's model (from its file or its bytes) onto dev and runs it: the
 * inputs in c->at_load through the options, the others by name at the run. */
static void run_case(const node_case *c, em_device dev, int from_buffer, em_onnx_mode mode) {
  char path[1024], file[32];
  snprintf(path, sizeof path, "%s/%s/model.onnx", node_dir(), c->test);
  em_onnx *meta;
  em_onnx_options mo = {.metadata_only = 1};
  assert_int_equal(em_onnx_load(path, &mo, &meta), EM_OK);
  size_t n_in = em_onnx_input_count(meta), n_out = em_onnx_output_count(meta);
  em_named_tensor load_v[8], run_v[8];
  int n_load = 0, n_run = 0;
  assert_true(n_in <= 8 && n_out <= 8);
  for (size_t k = 0; k < n_in; k++) {
    em_onnx_io io;
    assert_int_equal(em_onnx_input_get(meta, k, &io), EM_OK);
    snprintf(file, sizeof file, "input_%zu.pb", k);
    em_named_tensor v = {io.name, pb_tensor(c->test, file)};
    if (c->at_load >> k & 1) load_v[n_load++] = v;
    else run_v[n_run++] = v;
  }
  em_onnx_options o = {.device = dev, .mode = mode, .input_values = load_v, .n_input_values = n_load};
  em_onnx *m;
  em_status s;
  if (from_buffer) {
    size_t size;
    void *bytes = read_all(path, &size);
    s = em_onnx_load_buffer(bytes, size, c->test, &o, &m);
    free(bytes); /* the model keeps no pointer into them */
  } else {
    s = em_onnx_load(path, &o, &m);
  }
  if (s) fail_msg("%s: %s", c->test, em_last_error());
  em_tensor *outs[8];
  if (em_onnx_run(m, run_v, n_run, outs)) fail_msg("%s: %s", c->test, em_last_error());
  for (size_t j = 0; j < n_out; j++) {
    snprintf(file, sizeof file, "output_%zu.pb", j);
    em_tensor *want = pb_tensor(c->test, file);
    assert_int_equal(em_tensor_device(outs[j]).kind, dev.kind);
    expect_close(outs[j], want, c->test);
    em_tensor_release(want);
    em_tensor_release(outs[j]);
  }
  for (int k = 0; k < n_load; k++) em_tensor_release(load_v[k].value);
  for (int k = 0; k < n_run; k++) em_tensor_release(run_v[k].value);
  em_onnx_free(m);
  em_onnx_free(meta);
}

static void test_node_tests_cpu_from_file(void **state) {
  (void)state;
  NEED_TESTDATA();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], em_cpu(), 0, EM_ONNX_MODE_DEFAULT);
}

static void test_node_tests_cpu_from_buffer_portable(void **state) {
  (void)state;
  NEED_TESTDATA();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], em_cpu(), 1, EM_ONNX_MODE_PORTABLE);
}

static void test_node_tests_gpu(void **state) {
  (void)state;
  NEED_TESTDATA();
  if (!have_gpu) {
    print_message("SKIPPED: no test double of libcuda (FAKECUDA_LIB, set by build-tools/run_tests.sh)\n");
    skip();
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(&cases[i], em_cuda(0), i % 2, EM_ONNX_MODE_FAST);
    run_case(&cases[i], em_cuda(0), 0, EM_ONNX_MODE_PORTABLE);
  }
}

/* ------------------------------------------------- description of a model --- */

static void test_describe_node_test(void **state) {
  (void)state;
  NEED_TESTDATA();
  char path[1024];
  snprintf(path, sizeof path, "%s/test_add_bcast/model.onnx", node_dir());
  em_onnx *m;
  assert_int_equal(em_onnx_load(path, NULL, &m), EM_OK);
  em_onnx_model_info info;
  assert_int_equal(em_onnx_get_info(m, &info), EM_OK);
  assert_string_equal(info.source, path);
  assert_string_equal(info.producer_name, "backend-test");
  assert_string_equal(info.graph_name, "test_add_bcast");
  assert_int_equal(info.n_nodes, 1);
  assert_int_equal(em_onnx_input_count(m), 2);
  em_onnx_io io;
  assert_int_equal(em_onnx_input_get(m, 1, &io), EM_OK); /* y: float [5] */
  assert_string_equal(io.name, "y");
  assert_int_equal(io.dtype, EM_F32);
  assert_string_equal(io.onnx_dtype, "float");
  assert_int_equal(io.ndim, 1);
  assert_int_equal(io.shape[0], 5);
  assert_null(io.dim_names[0]);
  assert_true(io.var >= 0);
  em_dtype dt;
  int nd;
  int64_t sh[EM_MAX_DIMS];
  assert_int_equal(em_var_info(em_onnx_graph_of(m), io.var, &dt, &nd, sh), EM_OK);
  assert_int_equal(nd, 1);
  assert_int_equal(sh[0], 5);
  size_t k;
  assert_int_equal(em_onnx_find_input(m, "y", &k), EM_OK);
  assert_int_equal(k, 1);
  assert_int_equal(em_onnx_find_output(m, "sum", &k), EM_OK);
  assert_int_equal(k, 0);
  expect_fail(em_onnx_find_input(m, "z", &k), EM_ERR_NOT_FOUND, WORDS("'z'", "'x', 'y'"));
  expect_fail(em_onnx_input_get(m, 2, &io), EM_ERR_INVALID_ARGUMENT, WORDS("input 2", "has 2"));
  assert_int_equal(em_onnx_opset_count(m), 1);
  const char *d;
  int64_t v;
  assert_int_equal(em_onnx_opset_get(m, 0, &d, &v), EM_OK);
  assert_string_equal(d, "");
  assert_int_equal(v, 14); /* the file ends with opset_import {domain "", version 14}: 42 04 0a 00 10 0e */
  em_onnx_node_info ni;
  assert_int_equal(em_onnx_node_get(m, 0, &ni), EM_OK);
  assert_string_equal(ni.op_type, "Add");
  assert_int_equal(ni.supported, 1);
  assert_non_null(em_onnx_exec_of(m));
  em_onnx_free(m);
}

/* --------------------------------------------- models written byte by byte --- */

/* protobuf's wire format, enough for a ModelProto (onnx.proto's field
 * numbers). */
typedef struct pb {
  unsigned char b[2048];
  size_t n;
} pb;

static void pb_varint(pb *p, uint64_t v) {
  for (; v >= 0x80; v >>= 7) p->b[p->n++] = (unsigned char)(v | 0x80);
  p->b[p->n++] = (unsigned char)v;
}
static void pb_int(pb *p, int field, uint64_t v) {
  pb_varint(p, (uint64_t)field << 3);
  pb_varint(p, v);
}
static void pb_bytes(pb *p, int field, const void *d, size_t n) {
  pb_varint(p, (uint64_t)field << 3 | 2);
  pb_varint(p, n);
  assert_true(p->n + n <= sizeof p->b);
  memcpy(p->b + p->n, d, n);
  p->n += n;
}
static void pb_str(pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
static void pb_msg(pb *p, int field, const pb *m) { pb_bytes(p, field, m->b, m->n); }

/* ValueInfoProto of a float tensor; dims: a number, or a name (symbolic). */
static void pb_value_info(pb *p, int field, const char *name, const char *const *dims) {
  pb shape = {0}, tensor = {0}, type = {0}, vi = {0};
  for (; *dims; dims++) {
    pb dim = {0};
    if (**dims >= '0' && **dims <= '9') pb_int(&dim, 1, (uint64_t)atoll(*dims)); /* dim_value */
    else pb_str(&dim, 2, *dims);                                                  /* dim_param */
    pb_msg(&shape, 1, &dim);
  }
  pb_int(&tensor, 1, 1); /* elem_type FLOAT */
  pb_msg(&tensor, 2, &shape);
  pb_msg(&type, 1, &tensor); /* tensor_type */
  pb_str(&vi, 1, name);
  pb_msg(&vi, 2, &type);
  pb_msg(p, field, &vi);
}

static void pb_node(pb *g, const char *op, const char *name, const char *in, const char *out) {
  pb n = {0};
  pb_str(&n, 1, in);
  pb_str(&n, 2, out);
  pb_str(&n, 3, name);
  pb_str(&n, 4, op);
  pb_msg(g, 1, &n);
}

/* x [N, 3] -> Relu 'first' -> h -> <second_op> 'second' -> y [N, 3]. */
static void two_node_model(const char *second_op, pb *model) {
  pb g = {0}, opset = {0};
  pb_node(&g, "Relu", "first", "x", "h");
  pb_node(&g, second_op, "second", "h", "y");
  pb_str(&g, 2, "two_nodes");
  pb_value_info(&g, 11, "x", (const char *const[]){"N", "3", NULL});
  pb_value_info(&g, 12, "y", (const char *const[]){"N", "3", NULL});
  pb_int(&opset, 2, 13);
  *model = (pb){{0}, 0};
  pb_int(model, 1, 8); /* ir_version */
  pb_str(model, 2, "test_onnx_api");
  pb_msg(model, 7, &g);
  pb_msg(model, 8, &opset);
}

static void test_symbolic_dims(void **state) {
  (void)state;
  pb model;
  two_node_model("Neg", &model);
  em_onnx *m;
  assert_int_equal(em_onnx_load_buffer(model.b, model.n, "two_nodes.onnx", NULL, &m), EM_OK);
  em_onnx_io io;
  assert_int_equal(em_onnx_input_get(m, 0, &io), EM_OK);
  assert_int_equal(io.ndim, 2);
  assert_int_equal(io.shape[0], -1);
  assert_string_equal(io.dim_names[0], "N");
  assert_int_equal(io.shape[1], 3);
  assert_null(io.dim_names[1]);
  assert_int_equal(em_onnx_output_get(m, 0, &io), EM_OK);
  assert_string_equal(io.dim_names[0], "N");
  em_onnx_model_info info;
  assert_int_equal(em_onnx_get_info(m, &info), EM_OK);
  assert_string_equal(info.producer_name, "test_onnx_api");
  assert_int_equal(info.ir_version, 8);
  /* The dynamic axis takes any size at the run: -relu(x) = -max(x, 0). */
  const float x[2][3] = {{-1.5f, 0.0f, 2.0f}, {3.0f, -4.0f, 0.25f}};
  const float want[2][3] = {{-0.0f, -0.0f, -2.0f}, {-3.0f, -0.0f, -0.25f}};
  em_tensor *xt, *y;
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 2, (const int64_t[]){2, 3}, x, sizeof x, &xt), EM_OK);
  em_named_tensor in = {"x", xt};
  if (em_onnx_run(m, &in, 1, &y)) fail_msg("%s", em_last_error());
  float got[2][3];
  assert_int_equal(em_tensor_ndim(y), 2);
  assert_int_equal(em_tensor_shape(y)[0], 2);
  assert_int_equal(em_tensor_to_host(y, got, sizeof got), EM_OK);
  assert_memory_equal(got, want, sizeof got);
  em_tensor_release(y);
  em_tensor_release(xt);
  em_onnx_free(m);
}

/* A node Ember lacks, second in the graph: the message names the model, the
 * node's index, name and op, and why; a description still works. */
static void test_unsupported_op_named(void **state) {
  (void)state;
  pb model;
  two_node_model("FancyOp", &model);
  em_onnx *m = (em_onnx *)&model; /* must be set to NULL on failure */
  expect_fail(em_onnx_load_buffer(model.b, model.n, "fancy.onnx", NULL, &m), EM_ERR_UNSUPPORTED,
              WORDS("fancy.onnx", "node 1 of 2", "FancyOp", "'second'", "no Ember translation"));
  assert_null(m);
  em_onnx_options o = {.metadata_only = 1};
  assert_int_equal(em_onnx_load_buffer(model.b, model.n, "fancy.onnx", &o, &m), EM_OK);
  em_onnx_node_info ni;
  assert_int_equal(em_onnx_node_get(m, 1, &ni), EM_OK);
  assert_string_equal(ni.name, "second");
  assert_string_equal(ni.op_type, "FancyOp");
  assert_int_equal(ni.supported, 0);
  assert_int_equal(em_onnx_node_get(m, 0, &ni), EM_OK);
  assert_int_equal(ni.supported, 1);
  assert_null(em_onnx_graph_of(m));
  em_tensor *out;
  expect_fail(em_onnx_run(m, NULL, 0, &out), EM_ERR_INVALID_ARGUMENT, WORDS("fancy.onnx", "metadata_only"));
  em_onnx_free(m);
  assert_int_equal(em_onnx_op_supported("Relu", ""), 1);
  assert_int_equal(em_onnx_op_supported("Relu", "ai.onnx"), 1);
  assert_int_equal(em_onnx_op_supported("Relu", "com.example"), 0);
  assert_int_equal(em_onnx_op_supported("FancyOp", ""), 0);
}

static void test_unsupported_node_test(void **state) {
  (void)state;
  NEED_TESTDATA();
  char path[1024];
  snprintf(path, sizeof path, "%s/test_bernoulli/model.onnx", node_dir());
  em_onnx *m;
  expect_fail(em_onnx_load(path, NULL, &m), EM_ERR_UNSUPPORTED, WORDS(path, "node 0 of 1", "Bernoulli"));
}

/* --------------------------------------------------------- external data --- */

/* x [2] + W -> y, W a float [2] initializer whose 8 bytes are in the file
 * `location` at `offset` (ONNX's external_data: TensorProto fields 13, 14). */
static void external_model(const char *location, const char *offset, const char *length, pb *model) {
  pb g = {0}, w = {0}, opset = {0}, n = {0};
  pb_str(&n, 1, "x");
  pb_str(&n, 1, "W");
  pb_str(&n, 2, "y");
  pb_str(&n, 4, "Add");
  pb_msg(&g, 1, &n);
  pb_int(&w, 1, 2);   /* dims [2] */
  pb_int(&w, 2, 1);   /* data_type FLOAT */
  pb_str(&w, 8, "W"); /* name */
  const char *kv[][2] = {{"location", location}, {"offset", offset}, {"length", length}};
  for (size_t i = 0; i < 3; i++) {
    if (!kv[i][1]) continue;
    pb e = {0};
    pb_str(&e, 1, kv[i][0]);
    pb_str(&e, 2, kv[i][1]);
    pb_msg(&w, 13, &e);
  }
  pb_int(&w, 14, 1); /* data_location EXTERNAL */
  pb_msg(&g, 5, &w); /* initializer */
  pb_value_info(&g, 11, "x", (const char *const[]){"2", NULL});
  pb_value_info(&g, 12, "y", (const char *const[]){"2", NULL});
  pb_int(&opset, 2, 13);
  *model = (pb){{0}, 0};
  pb_int(model, 1, 8);
  pb_msg(model, 7, &g);
  pb_msg(model, 8, &opset);
}

static void write_file(const char *dir, const char *name, const void *b, size_t n) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* Loads dir/model.onnx and runs it on x = {1, 2}: y = x + W. */
static void expect_external_sum(const char *dir, const pb *model, const float want[2]) {
  char p[1024];
  snprintf(p, sizeof p, "%s/model.onnx", dir);
  em_onnx *m;
  if (em_onnx_load(p, NULL, &m)) fail_msg("%s", em_last_error());
  em_tensor *x, *y;
  const float xv[2] = {1, 2};
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 1, (const int64_t[]){2}, xv, sizeof xv, &x), EM_OK);
  em_named_tensor in = {"x", x};
  assert_int_equal(em_onnx_run(m, &in, 1, &y), EM_OK);
  float got[2];
  assert_int_equal(em_tensor_to_host(y, got, sizeof got), EM_OK);
  assert_memory_equal(got, want, sizeof got);
  em_tensor_release(y);
  em_onnx_free(m);
  /* From the bytes: refused without the directory, read with it. */
  expect_fail(em_onnx_load_buffer(model->b, model->n, "ext.onnx", NULL, &m), EM_ERR_UNSUPPORTED,
              WORDS("ext.onnx", "'W'", "external"));
  em_onnx_options o = {.external_data_dir = dir};
  assert_int_equal(em_onnx_load_buffer(model->b, model->n, "ext.onnx", &o, &m), EM_OK);
  assert_int_equal(em_onnx_run(m, &in, 1, &y), EM_OK);
  assert_int_equal(em_tensor_to_host(y, got, sizeof got), EM_OK);
  assert_memory_equal(got, want, sizeof got);
  em_tensor_release(y);
  em_tensor_release(x);
  em_onnx_free(m);
}

static void test_external_data(void **state) {
  (void)state;
  char dir[] = "/tmp/test_onnx_api_ext_XXXXXX", p[1024];
  assert_non_null(mkdtemp(dir));
  /* 4 bytes before W's values {10, 20.5}, then 4 after. */
  const float vals[4] = {-1.0f, 10.0f, 20.5f, -2.0f};
  write_file(dir, "weights.bin", vals, sizeof vals);
  pb model;
  external_model("weights.bin", "4", "8", &model);
  write_file(dir, "model.onnx", model.b, model.n);
  expect_external_sum(dir, &model, (const float[]){11.0f, 22.5f});
  /* No offset and no length: the file's first 8 bytes. */
  external_model("weights.bin", NULL, NULL, &model);
  write_file(dir, "model.onnx", model.b, model.n);
  expect_external_sum(dir, &model, (const float[]){0.0f, 12.0f});

  snprintf(p, sizeof p, "%s/model.onnx", dir);
  em_onnx *m;
  static const struct {
    const char *loc, *off, *len;
    em_status want;
    const char *word;
  } bad[] = {
      {"none.bin", NULL, NULL, EM_ERR_IO, "none.bin"},
      {"../weights.bin", NULL, NULL, EM_ERR_CORRUPT, "relative path"},
      {"/etc/passwd", NULL, NULL, EM_ERR_CORRUPT, "relative path"},
      {"weights.bin", "0", "12", EM_ERR_CORRUPT, "length is 12"},
      {"weights.bin", "12", NULL, EM_ERR_CORRUPT, "past the file's end"},
      {"weights.bin", "-4", NULL, EM_ERR_CORRUPT, "not a byte count"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    external_model(bad[i].loc, bad[i].off, bad[i].len, &model);
    write_file(dir, "model.onnx", model.b, model.n);
    expect_fail(em_onnx_load(p, NULL, &m), bad[i].want, WORDS(p, "'W'", bad[i].word));
  }
  snprintf(p, sizeof p, "rm -rf '%s'", dir);
  assert_int_equal(system(p), 0);
}

/* ------------------------------------------------------------ malformed --- */

static void test_malformed_files(void **state) {
  (void)state;
  em_onnx *m;
  expect_fail(em_onnx_load("/nonexistent/model.onnx", NULL, &m), EM_ERR_IO, WORDS("/nonexistent/model.onnx"));
  assert_null(m);
  unsigned char garbage[256];
  for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (unsigned char)(i * 37 + 11);
  expect_fail(em_onnx_load_buffer(garbage, sizeof garbage, "garbage.onnx", NULL, &m), EM_ERR_CORRUPT,
              WORDS("garbage.onnx", "byte"));
  expect_fail(em_onnx_load_buffer(garbage, 0, NULL, NULL, &m), EM_ERR_CORRUPT, WORDS("<buffer>", "empty"));
  pb model;
  two_node_model("Neg", &model);
  /* Truncated within the graph: a field claims more bytes than remain. */
  char path[] = "/tmp/test_onnx_api_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, model.b, model.n / 2), (ssize_t)(model.n / 2));
  close(fd);
  expect_fail(em_onnx_load(path, NULL, &m), EM_ERR_CORRUPT, WORDS(path, "byte"));
  unlink(path);
  assert_null(m);
}

/* A node whose input is never defined: the graph is malformed. */
static void test_undefined_input_named(void **state) {
  (void)state;
  pb g = {0}, opset = {0}, model = {0};
  pb_node(&g, "Relu", "r0", "x", "h");
  pb_node(&g, "Relu", "r1", "nowhere", "y");
  pb_value_info(&g, 11, "x", (const char *const[]){"3", NULL});
  pb_value_info(&g, 12, "y", (const char *const[]){"3", NULL});
  pb_int(&opset, 2, 13);
  pb_int(&model, 1, 8);
  pb_msg(&model, 7, &g);
  pb_msg(&model, 8, &opset);
  em_onnx *m;
  expect_fail(em_onnx_load_buffer(model.b, model.n, "undef.onnx", NULL, &m), EM_ERR_INVALID_ARGUMENT,
              WORDS("undef.onnx", "node 1 of 2", "'r1'", "'nowhere'"));
}

/* ------------------------------------------------------------ run errors --- */

static void test_run_and_option_errors(void **state) {
  (void)state;
  NEED_TESTDATA();
  char path[1024];
  snprintf(path, sizeof path, "%s/test_add_bcast/model.onnx", node_dir());
  em_onnx *m;
  em_onnx_options bad_mode = {.mode = (em_onnx_mode)7};
  expect_fail(em_onnx_load(path, &bad_mode, &m), EM_ERR_INVALID_ARGUMENT, WORDS("mode 7"));
  em_tensor *x = pb_tensor("test_add_bcast", "input_0.pb"), *y = pb_tensor("test_add_bcast", "input_1.pb");
  em_named_tensor stray = {"q", x};
  em_onnx_options o = {.input_values = &stray, .n_input_values = 1};
  expect_fail(em_onnx_load(path, &o, &m), EM_ERR_INVALID_ARGUMENT, WORDS(path, "'q'", "'x', 'y'"));
  em_named_tensor wrong = {"y", x}; /* y is declared float [5]; x is [3, 4, 5] */
  o = (em_onnx_options){.input_values = &wrong, .n_input_values = 1};
  expect_fail(em_onnx_load(path, &o, &m), EM_ERR_INVALID_ARGUMENT, WORDS(path, "'y'", "shape [5]", "f32[3,4,5]"));
  em_named_tensor wrong_dtype = {"y", NULL};
  int32_t five[5] = {0};
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_I32, 1, (const int64_t[]){5}, five, sizeof five, &wrong_dtype.value),
                   EM_OK);
  o = (em_onnx_options){.input_values = &wrong_dtype, .n_input_values = 1};
  expect_fail(em_onnx_load(path, &o, &m), EM_ERR_INVALID_ARGUMENT, WORDS("'y'", "declared float", "i32[5]"));
  em_tensor_release(wrong_dtype.value);
  em_onnx_options bad_dev = {.device = em_cuda(7)};
  assert_int_not_equal(em_onnx_load(path, &bad_dev, &m), EM_OK);
  assert_null(m);

  /* y given at load: the run takes x only. */
  em_named_tensor at_load = {"y", y};
  o = (em_onnx_options){.input_values = &at_load, .n_input_values = 1};
  assert_int_equal(em_onnx_load(path, &o, &m), EM_OK);
  em_onnx_io io;
  assert_int_equal(em_onnx_input_get(m, 1, &io), EM_OK);
  assert_int_equal(io.given_at_load, 1);
  em_tensor *out[1] = {(em_tensor *)x};
  expect_fail(em_onnx_run(m, NULL, 0, out), EM_ERR_INVALID_ARGUMENT, WORDS(path, "without a value", "'x'"));
  assert_null(out[0]);
  em_named_tensor both[2] = {{"x", x}, {"y", y}};
  expect_fail(em_onnx_run(m, both, 2, out), EM_ERR_INVALID_ARGUMENT, WORDS("'y'", "when the model was loaded"));
  em_named_tensor twice[2] = {{"x", x}, {"x", x}};
  expect_fail(em_onnx_run(m, twice, 2, out), EM_ERR_INVALID_ARGUMENT, WORDS("'x'", "twice"));
  em_named_tensor wrong_shape = {"x", y}; /* [5], not [3, 4, 5] */
  assert_int_not_equal(em_onnx_run(m, &wrong_shape, 1, out), EM_OK);
  assert_null(out[0]);
  assert_int_equal(em_onnx_run(m, both, 1, out), EM_OK); /* the model stays usable */
  em_tensor *want = pb_tensor("test_add_bcast", "output_0.pb");
  expect_close(out[0], want, "test_add_bcast, y at load");
  em_tensor_release(want);
  em_tensor_release(out[0]);
  em_onnx_free(m);
  em_tensor_release(x);
  em_tensor_release(y);
}

int main(void) {
  /* The test double as an H100 where no real driver is chosen (gpu_double.h). */
  have_gpu = ts_use_gpu() > 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_node_tests_cpu_from_file),
      cmocka_unit_test(test_node_tests_cpu_from_buffer_portable),
      cmocka_unit_test(test_node_tests_gpu),
      cmocka_unit_test(test_describe_node_test),
      cmocka_unit_test(test_symbolic_dims),
      cmocka_unit_test(test_unsupported_op_named),
      cmocka_unit_test(test_unsupported_node_test),
      cmocka_unit_test(test_malformed_files),
      cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_undefined_input_named),
      cmocka_unit_test(test_run_and_option_errors),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
