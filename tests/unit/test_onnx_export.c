/* ONNX export (include/ember/onnx.h: em_onnx_export, em_onnx_export_buffer).
 *
 * Round trips: a graph built here (an MLP; a CNN with convolution, batch
 * norm, max-pool, ReLU and Gemm; shape ops, concat, softmax, reductions,
 * ...; Resize with antialias; a LeNet trained a few steps with the layers
 * and trainer; LSTM, GRU and RNN layers with every ONNX option, each
 * written as ONE ONNX LSTM / GRU / RNN node, unrolled where the model reads
 * inside it) and graphs imported from ONNX backend node tests are
 * exported, the bytes loaded
 * again with em_onnx_load_buffer and run: the outputs must equal the
 * original graph's bit for bit on the CPU (each Ember op is written as the
 * ONNX op the importer turns back into it).
 *
 * The independent check: every exported model is also written to a
 * temporary directory with its inputs and Ember's outputs, and
 * tests/support/onnx_check.py (run once, at the end; tests/support/
 * ort_check.h) passes each through onnx.checker (full_check) and
 * onnxruntime, whose outputs must match Ember's to 1e-5 + 1e-4 |x|
 * (integers and bools exactly). Python, onnx and onnxruntime come from
 * $EMBER_ONNXPY or $EMBER_SRC_DIR/.tools/onnxpy (pip install --target);
 * where they are absent that part is skipped with a message saying so.
 *
 * A LeNet trained on the GPU of the libcuda test double ($FAKECUDA_LIB) is
 * exported before anything reads it on the CPU: the file holds the
 * device's newest parameters and batch-norm statistics.
 *
 * Refusals: an op without an ONNX form (a loss) and a form the opset lacks
 * fail with EM_ERR_UNSUPPORTED naming the node and the op; external data
 * is written beside the model and read back. EMBER_EXPORT_ALL_NODE_TESTS=1
 * runs the round trip over every node test that imports and prints the
 * counts. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
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
#include "graph_internal.h" /* test_recurrent_fallbacks finds a gate inside a recurrence */
#include "onnx_export.h"
#include "onnx_import.h"
#include "onnx_reader.h"
#include "op_testkit.h" /* ot_reseal */
#include "ort_check.h"

#define CHECK(call)                                                          \
  do {                                                                       \
    em_status s_ = (call);                                                   \
    if (s_) fail_msg("%s: %s (%s)", #call, em_status_name(s_), em_last_error()); \
  } while (0)

/* ------------------------------------------------- onnxruntime cases --- */

static ts_ort_cases cases; /* for onnx.checker and onnxruntime (tests/support/ort_check.h) */
static int have_gpu;        /* the test double gives cuda:0 */

/* Keeps the model, its inputs and Ember's outputs for the onnxruntime check. */
static void keep_case(const char *label, const char *origin, const void *bytes, size_t size, const em_named_tensor *in,
                      int n_in, em_tensor *const *out, int n_out) {
  ts_ort_keep(&cases, label, origin, 0, bytes, size, in, n_in, out, n_out);
}

/* ------------------------------------------------------- comparisons --- */

static void expect_same_bits(const em_tensor *got, const em_tensor *want, const char *what, int j) {
  char a[128], b[128];
  em_tensor_describe(got, a, sizeof a);
  em_tensor_describe(want, b, sizeof b);
  if (strcmp(a, b)) fail_msg("%s output %d: got %s, expected %s", what, j, a, b);
  size_t n = (size_t)em_tensor_numel(want) * em_dtype_size(em_tensor_dtype(want));
  unsigned char *g = malloc(n + 1), *w = malloc(n + 1);
  assert_non_null(g);
  assert_non_null(w);
  CHECK(em_tensor_to_host(got, g, n));
  CHECK(em_tensor_to_host(want, w, n));
  for (size_t i = 0; i < n; i++)
    if (g[i] != w[i]) fail_msg("%s output %d: byte %zu differs after the round trip", what, j, i);
  free(g);
  free(w);
}

/* Exports outs of g, loads the bytes, runs both on the inputs and compares. */
/* Fast mode: the reload within a few float32 roundings of the original.
 * Fast mode's contract is a tolerance, not bits (DESIGN.md): the export may
 * write an op in another form (MatMul + Add as one Gemm) whose BLAS call
 * sums in another order (OpenBLAS's AVX-512 small-matrix kernels start
 * from beta * C). Integer outputs must be equal. */
static void expect_close(const em_tensor *got, const em_tensor *want, const char *what, int j) {
  em_dtype dt = em_tensor_dtype(want);
  if (dt != EM_F32 && dt != EM_F64) {
    expect_same_bits(got, want, what, j);
    return;
  }
  int64_t n = em_tensor_numel(want);
  assert_int_equal(em_tensor_numel(got), n);
  double *g = malloc(sizeof(double) * (size_t)(n + 1)), *w = malloc(sizeof(double) * (size_t)(n + 1)), big = 0, diff = 0;
  assert_non_null(g);
  assert_non_null(w);
  if (dt == EM_F64) {
    CHECK(em_tensor_to_host(got, g, sizeof(double) * (size_t)n));
    CHECK(em_tensor_to_host(want, w, sizeof(double) * (size_t)n));
  } else {
    float *gf = malloc(sizeof(float) * (size_t)(n + 1)), *wf = malloc(sizeof(float) * (size_t)(n + 1));
    assert_non_null(gf);
    assert_non_null(wf);
    CHECK(em_tensor_to_host(got, gf, sizeof(float) * (size_t)n));
    CHECK(em_tensor_to_host(want, wf, sizeof(float) * (size_t)n));
    for (int64_t i = 0; i < n; i++) g[i] = gf[i], w[i] = wf[i];
    free(gf);
    free(wf);
  }
  for (int64_t i = 0; i < n; i++) {
    if (fabs(w[i]) > big) big = fabs(w[i]);
    if (fabs(g[i] - w[i]) > diff || g[i] != g[i]) diff = g[i] != g[i] ? INFINITY : fabs(g[i] - w[i]);
  }
  if (diff > 1e-5 * (big > 1 ? big : 1))
    fail_msg("%s output %d (fast mode): max |diff| %g after the round trip (max |value| %g)", what, j, diff, big);
  free(g);
  free(w);
}

/* The feeds as the exported model's named inputs (the graph's input names). */
static void named_feeds(const em_graph *g, const em_feed *feeds, int n_feeds, em_named_tensor *in) {
  for (int i = 0; i < n_feeds; i++) {
    CHECK(em_var_name(g, feeds[i].var, &in[i].name));
    in[i].value = (em_tensor *)feeds[i].value;
  }
}

/* Runs outs on the CPU in `mode`: from g directly (want) and through the
 * export reloaded (got). */
static void run_both(em_graph *g, const em_var *outs, int n_out, const em_feed *feeds, int n_feeds, const void *bytes,
                     size_t size, em_mode mode, const char *label, em_tensor **want, em_tensor **got) {
  em_exec *e;
  CHECK(em_exec_create(g, outs, n_out, em_cpu(), &e));
  CHECK(em_exec_set_mode(e, mode));
  CHECK(em_exec_run(e, feeds, n_feeds, want));
  em_exec_free(e);
  em_onnx *m;
  em_onnx_options lo = {.mode = mode == EM_MODE_PORTABLE ? EM_ONNX_MODE_PORTABLE : EM_ONNX_MODE_FAST};
  if (em_onnx_load_buffer(bytes, size, label, &lo, &m)) fail_msg("%s: reload: %s", label, em_last_error());
  assert_int_equal(em_onnx_output_count(m), (size_t)n_out);
  em_named_tensor in[16];
  named_feeds(g, feeds, n_feeds, in);
  if (em_onnx_run(m, in, n_feeds, got)) fail_msg("%s: run of the exported model: %s", label, em_last_error());
  em_onnx_free(m);
}

/* The export of outs reloaded by Ember: the same bits in portable mode (the
 * same ops in the same order), within fast mode's tolerance in fast mode;
 * the fast-mode outputs are kept for onnxruntime (keep_case). */
static void round_trip(em_graph *g, const em_var *outs, int n_out, const em_feed *feeds, int n_feeds,
                       const em_onnx_export_options *o, const char *label) {
  em_tensor *want[16], *got[16];
  assert_true(n_out <= 16 && n_feeds <= 16);
  void *bytes;
  size_t size;
  em_status s = em_onnx_export_buffer(g, outs, n_out, o, &bytes, &size);
  if (s) fail_msg("%s: export: %s", label, em_last_error());
  run_both(g, outs, n_out, feeds, n_feeds, bytes, size, EM_MODE_PORTABLE, label, want, got);
  for (int j = 0; j < n_out; j++) expect_same_bits(got[j], want[j], label, j);
  for (int j = 0; j < n_out; j++) em_tensor_release(got[j]), em_tensor_release(want[j]);
  run_both(g, outs, n_out, feeds, n_feeds, bytes, size, EM_MODE_FAST, label, want, got);
  for (int j = 0; j < n_out; j++) expect_close(got[j], want[j], label, j);
  em_named_tensor in[16];
  named_feeds(g, feeds, n_feeds, in);
  keep_case(label, NULL, bytes, size, in, n_feeds, want, n_out);
  for (int j = 0; j < n_out; j++) em_tensor_release(got[j]), em_tensor_release(want[j]);
  free(bytes);
}

/* ----------------------------------------------------------- builders --- */

static em_var param(em_graph *g, const char *name, int ndim, const int64_t *shape, uint64_t seed) {
  em_var v;
  em_init init = {.kind = EM_INIT_UNIFORM, .scale = 0.5, .seed = seed};
  CHECK(em_parameter(g, name, EM_F32, ndim, shape, &init, &v));
  return v;
}

static em_var ap(em_graph *g, const char *op, const em_var *in, int n_in, const em_attr *at, int n_at) {
  em_var y;
  if (em_apply(g, op, in, n_in, at, n_at, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  return y;
}
#define AP1(g, op, x, ...) ap(g, op, (em_var[]){x}, 1, (em_attr[]){__VA_ARGS__}, \
                              (int)(sizeof((em_attr[]){__VA_ARGS__}) / sizeof(em_attr)))
#define AP(g, op, ...) ap(g, op, (em_var[]){__VA_ARGS__}, (int)(sizeof((em_var[]){__VA_ARGS__}) / sizeof(em_var)), \
                          NULL, 0)
#define AI(nm, v) ((em_attr){.name = nm, .type = EM_ATTR_INT, .i = (v)})
#define AF(nm, v) ((em_attr){.name = nm, .type = EM_ATTR_FLOAT, .f = (v)})
#define AIS(nm, ...) ((em_attr){.name = nm, .type = EM_ATTR_INTS, .ints = (const int64_t[]){__VA_ARGS__}, \
                                .n = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))})

/* A tensor of shape filled with a fixed pseudo-random pattern in [-1, 1). */
static em_tensor *pattern(int ndim, const int64_t *shape, unsigned seed) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float *v = malloc(sizeof(float) * (size_t)n);
  assert_non_null(v);
  uint32_t x = 2463534242u ^ seed;
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v[i] = (float)((double)(x % 2000) / 1000.0 - 1.0);
  }
  em_tensor *t;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, ndim, shape, v, sizeof(float) * (size_t)n, &t));
  free(v);
  return t;
}

/* ---------------------------------------------------------- the tests --- */

static void test_mlp(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 8}, &x));
  em_var w1 = param(g, "fc1.W", 2, (int64_t[]){8, 16}, 1), b1 = param(g, "fc1.b", 1, (int64_t[]){16}, 2);
  em_var w2 = param(g, "fc2.W", 2, (int64_t[]){4, 16}, 3), b2 = param(g, "fc2.b", 1, (int64_t[]){4}, 4);
  em_var h = AP(g, "relu", AP(g, "add", AP(g, "matmul", x, w1), b1));
  em_var y = ap(g, "gemm", (em_var[]){h, w2, b2}, 3, (em_attr[]){AI("transB", 1), AF("alpha", 0.5)}, 2);
  CHECK(em_var_set_name(g, y, "logits"));
  em_var p = AP1(g, "softmax", y, AI("axis", 1));
  em_tensor *xv = pattern(2, (int64_t[]){5, 8}, 1);
  em_feed f = {x, xv};
  round_trip(g, (em_var[]){p, y}, 2, &f, 1, NULL, "mlp");
  /* Another batch size through the same file: the batch axis is a dim_param. */
  void *bytes;
  size_t size;
  CHECK(em_onnx_export_buffer(g, (em_var[]){p}, 1, NULL, &bytes, &size));
  em_onnx *m;
  CHECK(em_onnx_load_buffer(bytes, size, "mlp", NULL, &m));
  em_onnx_io io;
  CHECK(em_onnx_input_get(m, 0, &io));
  assert_string_equal(io.name, "x");
  assert_int_equal(io.shape[0], -1);
  assert_string_equal(io.dim_names[0], "N");
  CHECK(em_onnx_output_get(m, 0, &io));
  assert_int_equal(io.shape[0], -1);
  em_onnx_free(m);
  free(bytes);
  em_tensor_release(xv);
  em_graph_free(g);
}

/* conv -> batch norm -> relu -> max-pool -> flatten -> gemm -> log_softmax,
 * and a global average pool of the same activations. */
static em_graph *cnn(em_var *x, em_var *outs) {
  em_graph *g;
  CHECK(em_graph_create(&g));
  CHECK(em_input(g, "image", EM_F32, 4, (int64_t[]){-1, 2, 10, 10}, x));
  em_var w = param(g, "conv.W", 4, (int64_t[]){4, 2, 3, 3}, 5), b = param(g, "conv.b", 1, (int64_t[]){4}, 6);
  em_var sc = param(g, "bn.scale", 1, (int64_t[]){4}, 7), sh = param(g, "bn.shift", 1, (int64_t[]){4}, 8);
  em_var mean, var;
  CHECK(em_state(g, "bn.mean", EM_F32, 1, (int64_t[]){4}, &(em_init){.kind = EM_INIT_NORMAL, .scale = 0.3, .seed = 9},
                 &mean));
  CHECK(em_state(g, "bn.var", EM_F32, 1, (int64_t[]){4}, &(em_init){.kind = EM_INIT_CONSTANT, .value = 0.7}, &var));
  em_var c = ap(g, "convolution", (em_var[]){*x, w, b}, 3,
                (em_attr[]){AIS("pads", 1, 1, 1, 1), AIS("kernel_shape", 3, 3)}, 2);
  em_var n = ap(g, "batch_normalization", (em_var[]){c, sc, sh, mean, var}, 5, (em_attr[]){AF("epsilon", 1e-3)}, 1);
  em_var r = AP(g, "relu", n);
  em_var p = AP1(g, "max_pool", r, AIS("kernel_shape", 2, 2), AIS("strides", 2, 2));
  em_var fl = AP1(g, "flatten", p, AI("axis", 1));
  em_var fw = param(g, "fc.W", 2, (int64_t[]){3, 100}, 10), fb = param(g, "fc.b", 1, (int64_t[]){3}, 11);
  em_var y = ap(g, "gemm", (em_var[]){fl, fw, fb}, 3, (em_attr[]){AI("transB", 1)}, 1);
  outs[0] = AP1(g, "log_softmax", y, AI("axis", -1));
  outs[1] = AP(g, "global_average_pool", r);
  outs[2] = AP1(g, "average_pool", r, AIS("kernel_shape", 3, 3), AIS("pads", 1, 1, 1, 1),
                AI("count_include_pad", 1));
  return g;
}

static void test_cnn(void **state) {
  (void)state;
  em_var x, outs[3];
  em_graph *g = cnn(&x, outs);
  em_tensor *xv = pattern(4, (int64_t[]){3, 2, 10, 10}, 2);
  em_feed f = {x, xv};
  round_trip(g, outs, 3, &f, 1, NULL, "cnn");
  round_trip(g, outs, 3, &f, 1, &(em_onnx_export_options){.opset = 13}, "cnn_opset13");
  round_trip(g, outs, 3, &f, 1, &(em_onnx_export_options){.opset = 18}, "cnn_opset18");
  em_tensor_release(xv);
  em_graph_free(g);
}

/* A mixed-precision graph (em_graph_autocast): the casts around each product and convolution
 * export as Cast nodes and the products in the half dtype, so the file computes what Ember
 * did; it re-imports to the same bits (f16 and bf16), and onnxruntime runs the f16 one (its
 * CPU provider computes f16 products in f32 and rounds once, as Ember does: a scaled tolerance
 * of a few f16 roundings for the differing summation orders). */
static void test_mixed_precision(void **state) {
  (void)state;
  for (int half = 0; half < 2; half++) {
    em_var x, outs[3];
    em_graph *g = cnn(&x, outs);
    int converted = 0;
    CHECK(em_graph_autocast(g, half ? EM_BF16 : EM_F16, &converted));
    assert_int_equal(converted, 2); /* the convolution and the gemm */
    em_tensor *xv = pattern(4, (int64_t[]){3, 2, 10, 10}, 2);
    em_feed f = {x, xv};
    const char *label = half ? "cnn_bf16" : "cnn_f16";
    void *bytes;
    size_t size;
    CHECK(em_onnx_export_buffer(g, outs, 3, NULL, &bytes, &size));
    em_tensor *want[3], *got[3];
    run_both(g, outs, 3, &f, 1, bytes, size, EM_MODE_PORTABLE, label, want, got);
    for (int j = 0; j < 3; j++) expect_same_bits(got[j], want[j], label, j);
    if (!half) {
      em_named_tensor in[1];
      named_feeds(g, &f, 1, in);
      ts_ort_keep(&cases, label, NULL, 5e-3, bytes, size, in, 1, want, 3);
    }
    for (int j = 0; j < 3; j++) em_tensor_release(got[j]), em_tensor_release(want[j]);
    free(bytes);
    em_tensor_release(xv);
    em_graph_free(g);
  }
}

/* Shape ops, concat, slices, reductions, comparisons, casts, the
 * attributes ONNX takes as inputs, and the ops written as two nodes. */
static void test_shapes_and_more(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x;
  CHECK(em_input(g, "x", EM_F32, 3, (int64_t[]){2, 3, 4}, &x));
  em_tensor *idx_t, *one_t;
  CHECK(em_tensor_from_host(em_cpu(), EM_I64, 1, (int64_t[]){2}, (int64_t[]){2, 0}, 16, &idx_t));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 0, NULL, (float[]){1.0f}, 4, &one_t));
  em_var idx, one;
  CHECK(em_constant(g, idx_t, &idx));
  CHECK(em_constant(g, one_t, &one));
  em_var a = AP1(g, "reshape", x, AIS("shape", 6, -1));
  em_var b = AP(g, "transpose", a);
  em_var c = ap(g, "concat", (em_var[]){b, b}, 2, (em_attr[]){AI("axis", 1)}, 1);
  em_var d = AP1(g, "slice", c, AIS("starts", 1), AIS("ends", 3), AIS("axes", 0));
  em_var e = AP1(g, "unsqueeze", d, AIS("axes", 0));
  em_var f = AP1(g, "squeeze", e, AIS("axes", 0));
  em_var rm = AP1(g, "reduce_mean", f, AIS("axes", 1), AI("keepdims", 1));
  em_var am = AP1(g, "argmax", c, AI("axis", 1));
  em_var cl = AP1(g, "clip", x, AF("min", -0.5), AF("max", 0.5));
  em_var pd = AP1(g, "pad", x, AIS("pads", 0, 1, 0, 0, 1, 0), AF("value", 0.25));
  em_var tl = AP1(g, "tile", x, AIS("repeats", 1, 2, 1));
  em_var ex = AP1(g, "expand", AP1(g, "reduce_sum", x, AIS("axes", 2), AI("keepdims", 1)), AIS("shape", 2, 3, 4));
  em_var wh = ap(g, "where", (em_var[]){AP(g, "greater", x, cl), AP(g, "sigmoid", x), AP(g, "tanh", x)}, 3, NULL, 0);
  em_var cs = AP1(g, "cast", am, AI("to", EM_F32));
  em_var mm = ap(g, "matmul", (em_var[]){x, x}, 2, (em_attr[]){AI("transpose_b", 1)}, 1);
  em_var rs = AP(g, "rsqrt", AP(g, "add", AP(g, "abs", x), one));
  em_var ps = AP1(g, "pow_scalar", AP(g, "abs", x), AF("exponent", 1.5));
  em_var tk[2];
  CHECK(em_apply(g, "top_k", &x, 1, (em_attr[]){AI("k", 2), AI("axis", 1)}, 2, tk, 2));
  em_var oh = AP1(g, "one_hot", am, AI("depth", 12));
  em_var fl = AP1(g, "flatten", x, AI("axis", 2));
  em_var ga = ap(g, "gather", (em_var[]){x, idx}, 2, (em_attr[]){AI("axis", 1)}, 1);
  em_var mx = AP(g, "reduce_max", x);
  em_var dr = AP1(g, "dropout", x, AF("ratio", 0.3));
  em_var lk = AP1(g, "leaky_relu", AP(g, "neg", x), AF("alpha", 0.2));
  em_var sm = AP1(g, "softmax", x, AI("axis", 1));
  em_var outs[] = {rm, am, cl, pd, tl, ex, wh, cs, mm, rs, ps, tk[0]};
  em_var outs2[] = {tk[1], oh, fl, ga, mx, dr, lk, sm, a};
  em_tensor *xv = pattern(3, (int64_t[]){2, 3, 4}, 3);
  em_feed fd = {x, xv};
  round_trip(g, outs, 12, &fd, 1, NULL, "shapes");
  round_trip(g, outs2, 9, &fd, 1, &(em_onnx_export_options){.opset = 18}, "shapes2");
  /* Named outputs, one value twice, an initializer as an output: Identity nodes. */
  em_onnx_export_options named = {.output_names = (const char *const[]){"first", NULL, "again"}};
  void *bytes;
  size_t size;
  CHECK(em_onnx_export_buffer(g, (em_var[]){sm, sm, sm}, 3, &named, &bytes, &size));
  em_onnx *m;
  CHECK(em_onnx_load_buffer(bytes, size, "named", NULL, &m));
  size_t k;
  CHECK(em_onnx_find_output(m, "first", &k));
  assert_int_equal(k, 0);
  CHECK(em_onnx_find_output(m, "again", &k));
  assert_int_equal(k, 2);
  em_onnx_free(m);
  free(bytes);
  round_trip(g, (em_var[]){one, sm, sm}, 3, &fd, 1, NULL, "leaf_and_twice");
  em_tensor_release(xv), em_tensor_release(idx_t), em_tensor_release(one_t);
  em_graph_free(g);
}

/* Resize with antialias (ONNX Resize-18), built here: opset 18 round-trips,
 * 17 refuses naming the node. */
static void test_resize_antialias(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x;
  CHECK(em_input(g, "x", EM_F32, 4, (int64_t[]){1, 2, 8, 6}, &x));
  em_var y = ap(g, "resize", &x, 1,
                (em_attr[]){{.name = "scales", .type = EM_ATTR_FLOATS, .floats = (const double[]){1, 1, 0.5, 0.5}, .n = 4},
                            {.name = "mode", .type = EM_ATTR_STRING, .s = "linear"}, AI("antialias", 1)},
                3);
  CHECK(em_var_set_name(g, y, "small"));
  em_var z = ap(g, "resize", &x, 1,
                (em_attr[]){{.name = "sizes", .type = EM_ATTR_INTS, .ints = (const int64_t[]){1, 2, 3, 5}, .n = 4},
                            {.name = "mode", .type = EM_ATTR_STRING, .s = "cubic"}, AI("antialias", 1)},
                3);
  em_tensor *xv = pattern(4, (int64_t[]){1, 2, 8, 6}, 7);
  em_feed f = {x, xv};
  round_trip(g, (em_var[]){y, z}, 2, &f, 1, &(em_onnx_export_options){.opset = 18}, "resize_antialias");
  void *bytes;
  size_t size;
  assert_int_equal(em_onnx_export_buffer(g, &y, 1, NULL, &bytes, &size), EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(em_last_error(), "'small' (op resize)"));
  assert_non_null(strstr(em_last_error(), "antialias needs Resize of opset 18"));
  em_tensor_release(xv);
  em_graph_free(g);
}

/* Graphs whose form is unusual for an exporter: values of f64, i64 and bool;
 * a dynamic axis that is not the batch's own (reshape to [-1]); outputs that
 * are an input, a parameter and one value three times; names with spaces,
 * slashes and non-ASCII bytes, names that collide with the suffixes the
 * exporter makes; and an LSTM (sequence lengths with 0
 * and T, initial states, bidirectional) built by em_lstm: each must load
 * back bitwise, pass onnx.checker and match onnxruntime (test_onnxruntime). */
static void test_unusual_graphs(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var xd, xi, xb, xf;
  CHECK(em_input(g, "x.f64[0]", EM_F64, 2, (int64_t[]){-1, 3}, &xd));
  CHECK(em_input(g, "x/i64:ü", EM_I64, 2, (int64_t[]){-1, 3}, &xi));
  CHECK(em_input(g, "tanh_9", EM_BOOL, 2, (int64_t[]){-1, 3}, &xb));
  CHECK(em_input(g, "x_1", EM_F32, 2, (int64_t[]){-1, 3}, &xf));
  em_var pw = param(g, "x.f64[0]_1", 2, (int64_t[]){3, 3}, 21);
  em_var pd = AP1(g, "cast", pw, AI("to", EM_F64));
  em_var d1 = AP(g, "tanh", ap(g, "matmul", (em_var[]){xd, pd}, 2, NULL, 0));
  em_var i1 = AP(g, "add", xi, AP(g, "mul", xi, xi));
  em_var i2 = AP1(g, "reduce_sum", i1, AIS("axes", 1));
  em_var b1 = AP(g, "xor", xb, AP(g, "not", xb));
  em_var b2 = ap(g, "where", (em_var[]){xb, xd, d1}, 3, NULL, 0);
  em_var fl = AP1(g, "reshape", xf, AIS("shape", -1)); /* 3 N elements: not N */
  em_var sh = AP(g, "exp", fl);                        /* shared below */
  em_var s2 = AP(g, "add", sh, sh);
  CHECK(em_var_set_name(g, s2, "x_1_1"));
  em_var outs[] = {d1, i2, b1, b2, fl, s2, xf, pw, i2, xb};
  int64_t n3[2] = {2, 3};
  double dv[6] = {0.5, -1, 2, 0.25, -0.75, 1.5};
  int64_t iv[6] = {1, -2, 3, 3000000, -5, 6};
  unsigned char bv[6] = {1, 0, 0, 1, 1, 0};
  em_tensor *td, *ti, *tb, *tf = pattern(2, n3, 22);
  CHECK(em_tensor_from_host(em_cpu(), EM_F64, 2, n3, dv, sizeof dv, &td));
  CHECK(em_tensor_from_host(em_cpu(), EM_I64, 2, n3, iv, sizeof iv, &ti));
  CHECK(em_tensor_from_host(em_cpu(), EM_BOOL, 2, n3, bv, sizeof bv, &tb));
  em_feed f[4] = {{xd, td}, {xi, ti}, {xb, tb}, {xf, tf}};
  round_trip(g, outs, 10, f, 4, NULL, "dtypes_names_leaves");
  round_trip(g, outs, 10, f, 4, &(em_onnx_export_options){.opset = 13}, "dtypes_names_leaves_opset13");
  em_tensor_release(td), em_tensor_release(ti), em_tensor_release(tb), em_tensor_release(tf);
  em_graph_free(g);

  /* A bidirectional LSTM with lengths 0 and T, initial states and peepholes. */
  CHECK(em_graph_create(&g));
  em_var x, lens, h0, c0;
  CHECK(em_input(g, "seq", EM_F32, 3, (int64_t[]){4, -1, 3}, &x));
  CHECK(em_input(g, "lens", EM_I32, 1, (int64_t[]){-1}, &lens));
  CHECK(em_input(g, "h0", EM_F32, 3, (int64_t[]){2, -1, 5}, &h0));
  CHECK(em_input(g, "c0", EM_F32, 3, (int64_t[]){2, -1, 5}, &c0));
  em_layers L = {.graph = g, .seed = 7};
  em_recurrent_layer_opts lo = {.rnn = {.direction = EM_DIR_BIDIRECTIONAL, .clip = 0.8}, .sequence_lens = &lens,
                                .initial_h = &h0, .initial_c = &c0, .peepholes = 1};
  em_recurrent_outputs ro;
  CHECK(em_lstm(&L, "lstm", x, 5, &lo, &ro));
  em_tensor *tx = pattern(3, (int64_t[]){4, 3, 3}, 23), *th = pattern(3, (int64_t[]){2, 3, 5}, 24),
            *tc = pattern(3, (int64_t[]){2, 3, 5}, 25), *tl;
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){3}, (int32_t[]){4, 0, 2}, 12, &tl));
  em_feed lf[4] = {{x, tx}, {lens, tl}, {h0, th}, {c0, tc}};
  round_trip(g, (em_var[]){ro.y, ro.y_h, ro.y_c}, 3, lf, 4, NULL, "lstm_bidirectional_lens");
  em_tensor_release(tx), em_tensor_release(th), em_tensor_release(tc), em_tensor_release(tl);
  em_graph_free(g);
}

/* ------------------------------------------------------- recurrences --- */

static const char *node_dir(void);
static int node_round_trip(const char *test, int allow_refusal);

/* Nodes of op_type op in the model bytes (and all nodes in *total). */
static int count_nodes(const void *bytes, size_t size, const char *op, size_t *total) {
  em_onnx *m;
  CHECK(em_onnx_load_buffer(bytes, size, "count", &(em_onnx_options){.metadata_only = 1}, &m));
  em_onnx_model_info info;
  CHECK(em_onnx_get_info(m, &info));
  int n = 0;
  for (size_t i = 0; i < info.n_nodes; i++) {
    em_onnx_node_info ni;
    CHECK(em_onnx_node_get(m, i, &ni));
    n += !strcmp(ni.op_type, op);
  }
  if (total) *total = info.n_nodes;
  em_onnx_free(m);
  return n;
}

/* The export of outs has `want` nodes of op (and how many in all). */
static size_t expect_op_count(const em_graph *g, const em_var *outs, int n_out, const em_onnx_export_options *o,
                              const char *op, int want, const char *label) {
  void *bytes;
  size_t size, total;
  if (em_onnx_export_buffer(g, outs, n_out, o, &bytes, &size)) fail_msg("%s: export: %s", label, em_last_error());
  int n = count_nodes(bytes, size, op, &total);
  if (n != want) fail_msg("%s: %d %s nodes in %zu exported; %d expected", label, n, op, total, want);
  free(bytes);
  return total;
}

static em_var f32_input(em_graph *g, const char *name, int ndim, const int64_t *shape) {
  em_var v;
  CHECK(em_input(g, name, EM_F32, ndim, shape, &v));
  return v;
}

/* A recurrence exported as its one ONNX node: that node once (or the
 * unrolled ops where `one` is 0), Ember's reload bitwise equal
 * (round_trip), onnx.checker and onnxruntime at the end. */
static void recurrent_case(em_graph *g, const em_var *outs, int n_out, const em_feed *f, int n_feeds,
                           const em_onnx_export_options *o, const char *op, int one, const char *label) {
  size_t total = expect_op_count(g, outs, n_out, o, op, one, label);
  print_message("%s: %d %s node%s, %zu nodes in all\n", label, one, op, one == 1 ? "" : "s", total);
  if (one && total > 8)
    fail_msg("%s: %zu nodes exported; the %s and at most a Cast, Transposes (layout 1) and Identities expected", label,
             total, op);
  round_trip(g, outs, n_out, f, n_feeds, o, label);
}

/* Every option of ONNX's LSTM, GRU and RNN through em_lstm / em_gru / em_rnn. */
static void test_recurrent_as_one_node(void **state) {
  (void)state;
  const int64_t T = 4, N = 3, I = 3, H = 5;
  em_tensor *lens4;
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){N}, (int32_t[]){4, 0, 2}, 12, &lens4));
  em_tensor *tx = pattern(3, (int64_t[]){T, N, I}, 31), *txb = pattern(3, (int64_t[]){N, T, I}, 32);
  em_tensor *th2 = pattern(3, (int64_t[]){2, N, H}, 33), *tc2 = pattern(3, (int64_t[]){2, N, H}, 34);
  em_tensor *thb = pattern(3, (int64_t[]){N, 1, H}, 35), *tcb = pattern(3, (int64_t[]){N, 1, H}, 36);

  /* LSTM: bidirectional, lengths 4 0 2 (T and 0), initial states, peepholes, clip, input_forget. */
  for (int forget = 0; forget < 2; forget++) {
    em_graph *g;
    CHECK(em_graph_create(&g));
    em_var x = f32_input(g, "x", 3, (int64_t[]){T, -1, I}), lens, h0, c0;
    CHECK(em_input(g, "lens", EM_I32, 1, (int64_t[]){-1}, &lens));
    h0 = f32_input(g, "h0", 3, (int64_t[]){2, -1, H}), c0 = f32_input(g, "c0", 3, (int64_t[]){2, -1, H});
    em_layers L = {.graph = g, .seed = 41};
    em_recurrent_layer_opts lo = {.rnn = {.direction = EM_DIR_BIDIRECTIONAL, .clip = 0.75, .input_forget = forget},
                                  .sequence_lens = &lens, .initial_h = &h0, .initial_c = &c0, .peepholes = 1};
    em_recurrent_outputs ro;
    CHECK(em_lstm(&L, "lstm", x, H, &lo, &ro));
    /* Peepholes are zeros at first: give them values that matter. */
    em_var p;
    CHECK(em_graph_lookup(g, "lstm.P", &p));
    em_tensor *pv = pattern(2, (int64_t[]){2, 3 * H}, 37);
    CHECK(em_parameter_set(g, p, pv));
    em_tensor_release(pv);
    em_feed f[4] = {{x, tx}, {lens, lens4}, {h0, th2}, {c0, tc2}};
    em_var outs[3] = {ro.y, ro.y_h, ro.y_c};
    recurrent_case(g, outs, 3, f, 4, NULL, "LSTM", 1, forget ? "lstm_all_input_forget" : "lstm_all");
    if (!forget) {
      /* Unrolled on request, and at opset 13 too (LSTM-7 there). */
      recurrent_case(g, outs, 3, f, 4, &(em_onnx_export_options){.unroll_recurrent = 1}, "LSTM", 0, "lstm_unrolled");
      recurrent_case(g, outs, 3, f, 4, &(em_onnx_export_options){.opset = 13}, "LSTM", 1, "lstm_all_opset13");
      /* Only Y_h: one node still, Y and Y_c unnamed or unused. */
      recurrent_case(g, &ro.y_h, 1, f, 4, NULL, "LSTM", 1, "lstm_y_h_only");
    }
    em_graph_free(g);
  }

  /* LSTM, layout 1 (batch-major), reverse, lengths and initial states. */
  {
    em_graph *g;
    CHECK(em_graph_create(&g));
    em_var x = f32_input(g, "x", 3, (int64_t[]){-1, T, I}), lens, h0, c0;
    CHECK(em_input(g, "lens", EM_I64, 1, (int64_t[]){-1}, &lens));
    h0 = f32_input(g, "h0", 3, (int64_t[]){-1, 1, H}), c0 = f32_input(g, "c0", 3, (int64_t[]){-1, 1, H});
    em_layers L = {.graph = g, .seed = 43};
    em_recurrent_layer_opts lo = {.rnn = {.direction = EM_DIR_REVERSE, .layout = 1}, .sequence_lens = &lens,
                                  .initial_h = &h0, .initial_c = &c0};
    em_recurrent_outputs ro;
    CHECK(em_lstm(&L, "lstm_b", x, H, &lo, &ro));
    em_tensor *l64;
    CHECK(em_tensor_from_host(em_cpu(), EM_I64, 1, (int64_t[]){N}, (int64_t[]){0, 4, 3}, 24, &l64));
    em_feed f[4] = {{x, txb}, {lens, l64}, {h0, thb}, {c0, tcb}};
    em_var outs[3] = {ro.y, ro.y_h, ro.y_c};
    recurrent_case(g, outs, 3, f, 4, NULL, "LSTM", 1, "lstm_layout1_i64_lens");
    /* Written as layout 0 between Transposes (onnxruntime refuses layout 1), so opset 13 too. */
    recurrent_case(g, outs, 3, f, 4, &(em_onnx_export_options){.opset = 13}, "LSTM", 1, "lstm_layout1_opset13");
    /* This LSTM is fused (default activations, no peepholes): it has no unrolled form, so asking for one is
     * refused, saying why, instead of a file (or an error blaming "losses and training steps"). */
    void *bytes = NULL;
    size_t size = 0;
    em_status s = em_onnx_export_buffer(g, outs, 3, &(em_onnx_export_options){.unroll_recurrent = 1}, &bytes, &size);
    if (s != EM_ERR_UNSUPPORTED || !strstr(em_last_error(), "fused LSTM"))
      fail_msg("unrolled export of a fused LSTM: status %d, %s", (int)s, em_last_error());
    assert_null(bytes);
    em_tensor_release(l64);
    em_graph_free(g);
  }

  /* GRU, linear_before_reset 0 and 1, bidirectional, lengths, initial state;
   * the second with HardSigmoid / Softsign. */
  for (int lbr = 0; lbr < 2; lbr++) {
    em_graph *g;
    CHECK(em_graph_create(&g));
    em_var x = f32_input(g, "x", 3, (int64_t[]){T, -1, I}), lens, h0;
    CHECK(em_input(g, "lens", EM_I32, 1, (int64_t[]){-1}, &lens));
    h0 = f32_input(g, "h0", 3, (int64_t[]){2, -1, H});
    static const char *const acts[4] = {"HardSigmoid", "Softsign", "hardsigmoid", "Tanh"};
    static const double alpha[2] = {0.25, 0.125}, beta[2] = {0.5, 0.375};
    em_layers L = {.graph = g, .seed = 45};
    em_recurrent_layer_opts lo = {.rnn = {.direction = EM_DIR_BIDIRECTIONAL, .linear_before_reset = lbr},
                                  .sequence_lens = &lens, .initial_h = &h0};
    if (lbr) {
      lo.rnn.activations = acts, lo.rnn.n_activations = 4;
      lo.rnn.activation_alpha = alpha, lo.rnn.n_alpha = 2, lo.rnn.activation_beta = beta, lo.rnn.n_beta = 2;
    }
    em_recurrent_outputs ro;
    CHECK(em_gru(&L, "gru", x, H, &lo, &ro));
    em_feed f[3] = {{x, tx}, {lens, lens4}, {h0, th2}};
    recurrent_case(g, (em_var[]){ro.y, ro.y_h}, 2, f, 3, NULL, "GRU", 1, lbr ? "gru_lbr1_acts" : "gru_lbr0");
    em_graph_free(g);
  }

  /* RNN: Relu and LeakyRelu, then ScaledTanh and Affine, bidirectional, no bias. */
  for (int k = 0; k < 2; k++) {
    em_graph *g;
    CHECK(em_graph_create(&g));
    em_var x = f32_input(g, "x", 3, (int64_t[]){T, -1, I});
    static const char *const acts[2][2] = {{"Relu", "LeakyRelu"}, {"ScaledTanh", "Affine"}};
    static const double alpha[2] = {0.5, 0.75}, beta[2] = {1.5, 0.25};
    em_layers L = {.graph = g, .seed = 47};
    em_recurrent_layer_opts lo = {.rnn = {.direction = EM_DIR_BIDIRECTIONAL, .activations = acts[k],
                                          .n_activations = 2, .activation_alpha = alpha, .n_alpha = 1 + k,
                                          .activation_beta = beta, .n_beta = 2 * k},
                                  .no_bias = k};
    em_recurrent_outputs ro;
    CHECK(em_rnn(&L, "rnn", x, H, &lo, &ro));
    em_feed f = {x, tx};
    recurrent_case(g, (em_var[]){ro.y, ro.y_h}, 2, &f, 1, NULL, "RNN", 1, k ? "rnn_scaledtanh_affine" : "rnn_relu_leaky");
    em_graph_free(g);
  }
  em_tensor_release(lens4), em_tensor_release(tx), em_tensor_release(txb), em_tensor_release(th2);
  em_tensor_release(tc2), em_tensor_release(thb), em_tensor_release(tcb);
}

/* Where the model reads a value inside the recurrence, or the graph was
 * edited inside it, the export writes the unrolled ops (and stays right);
 * a clone and a saved and loaded graph keep the record. */
static void test_recurrent_fallbacks(void **state) {
  (void)state;
  const int64_t T = 3, I = 2, H = 4;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x = f32_input(g, "x", 3, (int64_t[]){T, -1, I});
  size_t first_node = g->n_nodes;
  em_layers L = {.graph = g, .seed = 51};
  em_recurrent_outputs ro;
  /* Peepholes keep this LSTM unrolled (a default one is a single fused
   * _lstm_seq node, which has no gate to read and no ONNX form of its own). */
  em_recurrent_layer_opts lo = {.peepholes = 1};
  CHECK(em_lstm(&L, "enc", x, H, &lo, &ro));
  em_var top = AP(g, "tanh", ro.y_h); /* something after the recurrence */
  em_tensor *tx = pattern(3, (int64_t[]){T, 2, I}, 52);
  em_feed f = {x, tx};
  recurrent_case(g, &top, 1, &f, 1, NULL, "LSTM", 1, "lstm_then_tanh");
  /* A gate (the first sigmoid inside) read by the model: unrolled. */
  em_var gate = -1;
  for (size_t i = first_node; i < g->n_nodes && gate < 0; i++)
    if (g->nodes[i].kind == EM_NODE_OP && !strcmp(g->nodes[i].op->name, "sigmoid")) gate = g->nodes[i].first_value;
  assert_true(gate >= 0);
  recurrent_case(g, (em_var[]){top, gate}, 2, &f, 1, NULL, "LSTM", 0, "lstm_gate_read");
  /* Kept by a clone and by em_graph_to_bytes / em_graph_from_bytes. */
  em_graph *c;
  CHECK(em_graph_clone(g, EM_CLONE_SHARE, &c));
  expect_op_count(c, &top, 1, NULL, "LSTM", 1, "clone");
  em_graph_free(c);
  void *bytes;
  size_t size;
  CHECK(em_graph_to_bytes(g, &bytes, &size));
  CHECK(em_graph_from_bytes(bytes, size, NULL, &c));
  expect_op_count(c, &top, 1, NULL, "LSTM", 1, "saved and loaded");
  em_graph_free(c);
  /* The block section (format 2) cut short anywhere, resealed: refused as
   * corrupt, never read past its end (valgrind). The last 300 bytes hold it. */
  unsigned char *cut = malloc(size);
  assert_non_null(cut);
  for (size_t k = 1; k <= 300 && k + 8 < size; k++) {
    memcpy(cut, bytes, size - 8 - k);
    ot_reseal(cut, size - k);
    em_status st = em_graph_from_bytes(cut, size - k, "cut", &c);
    if (st != EM_ERR_CORRUPT) fail_msg("cut %zu bytes short: %s (%s)", k, em_status_name(st), st ? em_last_error() : "");
  }
  free(cut);
  free(bytes);
  /* A constant inside replaced (the graph computes something else now): the
   * record is dropped and the unrolled ops are written. */
  em_var inner = -1;
  for (size_t i = first_node; i < g->n_nodes && inner < 0; i++) {
    const em_node *n = &g->nodes[i];
    if (n->kind == EM_NODE_OP && !strcmp(n->op->name, "matmul"))
      for (int k = 0; k < n->n_in && inner < 0; k++)
        if (g->nodes[g->values[n->inputs[k]].node].kind == EM_NODE_OP) inner = n->inputs[k];
  }
  assert_true(inner >= 0); /* the x W^T product's input (the slice of W) or h */
  em_dtype dt;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  CHECK(em_var_info(g, inner, &dt, &nd, shape));
  em_var other = param(g, "other", nd, shape, 53);
  CHECK(em_graph_replace(g, inner, other));
  expect_op_count(g, &top, 1, NULL, "LSTM", 0, "edited inside");
  round_trip(g, &top, 1, &f, 1, NULL, "lstm_edited_inside");
  em_tensor_release(tx);
  em_graph_free(g);

  /* Two recurrences stacked (a GRU over the LSTM's Y, batch-major): two nodes. */
  CHECK(em_graph_create(&g));
  x = f32_input(g, "x", 3, (int64_t[]){-1, T, I});
  em_layers L2 = {.graph = g, .seed = 55};
  em_recurrent_layer_opts bm = {.rnn = {.layout = 1}};
  em_recurrent_outputs r1, r2;
  CHECK(em_lstm(&L2, "first", x, H, &bm, &r1));
  em_var y1 = AP1(g, "reshape", r1.y, AIS("shape", 0, T, H)); /* [N, T, 1, H] -> [N, T, H] */
  CHECK(em_gru(&L2, "second", y1, 3, &bm, &r2));
  tx = pattern(3, (int64_t[]){2, T, I}, 54);
  f = (em_feed){x, tx};
  expect_op_count(g, &r2.y_h, 1, NULL, "LSTM", 1, "stacked");
  size_t total = expect_op_count(g, &r2.y_h, 1, NULL, "GRU", 1, "stacked");
  print_message("lstm_gru_stacked: 1 LSTM and 1 GRU node, %zu nodes in all (Transposes of layout 1, the reshape)\n",
                total);
  round_trip(g, &r2.y_h, 1, &f, 1, NULL, "lstm_gru_stacked");
  em_tensor_release(tx);
  em_graph_free(g);
}

/* A saved graph whose recurrence record no longer says what its nodes
 * compute (a file edited by hand, resealed: here the record's first
 * activation Relu made Tanh, the nodes still a Relu): the export checks the
 * record against the nodes (onnx/export_block_check.c) and writes the
 * unrolled ops, which onnxruntime then runs to Ember's outputs; written as
 * the record says, it would compute tanh where the graph computes relu. */
static void test_recurrent_record_checked(void **state) {
  (void)state;
  const int64_t T = 3, I = 2, H = 4;
  em_graph *g, *c;
  CHECK(em_graph_create(&g));
  em_var x = f32_input(g, "x", 3, (int64_t[]){T, -1, I});
  static const char *const acts[2] = {"Relu", "LeakyRelu"};
  static const double alpha[1] = {0.5};
  em_layers L = {.graph = g, .seed = 53};
  em_recurrent_layer_opts lo = {.rnn = {.direction = EM_DIR_BIDIRECTIONAL, .activations = acts, .n_activations = 2,
                                        .activation_alpha = alpha, .n_alpha = 1}};
  em_recurrent_outputs ro;
  CHECK(em_rnn(&L, "rnn", x, H, &lo, &ro));
  em_tensor *tx = pattern(3, (int64_t[]){T, 2, I}, 54);
  em_feed f = {x, tx};
  const em_var outs[2] = {ro.y, ro.y_h};
  expect_op_count(g, outs, 2, NULL, "RNN", 1, "record intact");
  void *bytes;
  size_t size;
  CHECK(em_graph_to_bytes(g, &bytes, &size));
  /* The record is the last part of the file: its activations string. */
  unsigned char *b = bytes;
  size_t at = size;
  for (size_t i = 0; i + 14 <= size; i++)
    if (!memcmp(b + i, "Relu,LeakyRelu", 14)) at = i;
  assert_true(at < size);
  memcpy(b + at, "Tanh", 4);
  ot_reseal(b, size);
  CHECK(em_graph_from_bytes(bytes, size, "edited", &c));
  recurrent_case(c, outs, 2, &f, 1, NULL, "RNN", 0, "rnn_record_edited");
  em_graph_free(c);
  free(bytes);
  em_tensor_release(tx);
  em_graph_free(g);
}

/* An ONNX LSTM imported, exported, imported and exported again: one LSTM node each time. */
static void test_recurrent_import_export(void **state) {
  (void)state;
  static const char *const tests[] = {"test_lstm_with_peepholes", "test_lstm_batchwise", "test_gru_seq_length",
                                      "test_simple_rnn_batchwise"};
  static const char *const ops[] = {"LSTM", "LSTM", "GRU", "RNN"};
  for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/model.onnx", node_dir(), tests[t]);
    struct stat st;
    if (stat(path, &st)) {
      print_message("SKIPPED: %s not found (libonnx-testdata)\n", path);
      skip();
    }
    em_onnx *m;
    CHECK(em_onnx_load(path, NULL, &m));
    for (int round = 0; round < 2; round++) {
      size_t n_out = em_onnx_output_count(m);
      em_var outs[3];
      for (size_t j = 0; j < n_out; j++) {
        em_onnx_io io;
        CHECK(em_onnx_output_get(m, j, &io));
        outs[j] = io.var;
      }
      void *bytes;
      size_t size;
      CHECK(em_onnx_export_buffer(em_onnx_graph_of(m), outs, (int)n_out, NULL, &bytes, &size));
      if (count_nodes(bytes, size, ops[t], NULL) != 1) fail_msg("%s round %d: not one %s", tests[t], round, ops[t]);
      em_onnx_free(m);
      CHECK(em_onnx_load_buffer(bytes, size, tests[t], NULL, &m));
      free(bytes);
    }
    em_onnx_free(m);
    assert_int_equal(node_round_trip(tests[t], 0), 0); /* bitwise, and onnxruntime at the end */
  }
}

/* Every public op is in the export table, or on this list of ops that
 * have no ONNX form (so a new op cannot be forgotten): the losses
 * (training criteria; ONNX's SoftmaxCrossEntropyLoss reduces, Ember's
 * per-sample criteria do not), sum_to (a gradient's reduction to a
 * broadcast source), log1p (ONNX has none; Log(1 + x) loses its precision). */
static void test_every_op_has_a_form_or_a_reason(void **state) {
  (void)state;
  static const char *const without[] = {"sum_to", "cross_entropy_with_softmax", "binary_cross_entropy",
                                        "squared_error", "classification_error", "log1p"};
  int exported = 0;
  for (size_t i = 0; i < em_op_info_count(); i++) {
    em_op_info info;
    CHECK(em_op_info_get(i, &info));
    if (info.internal) continue;
    int listed = 0;
    for (size_t k = 0; k < sizeof without / sizeof without[0]; k++) listed |= !strcmp(without[k], info.name);
    if (em_onnx_export_has_op(info.name) == listed)
      fail_msg("op '%s' is %s", info.name,
               listed ? "exported but listed as having no ONNX form" : "neither exported nor listed as without an ONNX form");
    exported += !listed;
  }
  print_message("%d public ops export, %zu have no ONNX form\n", exported, sizeof without / sizeof without[0]);
}

static void test_refusals(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, lab;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 4}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &lab));
  em_var loss = ap(g, "cross_entropy_with_softmax", (em_var[]){x, lab}, 2, NULL, 0);
  CHECK(em_var_set_name(g, loss, "the_loss"));
  void *bytes = (void *)1;
  size_t size = 1;
  em_status s = em_onnx_export_buffer(g, &loss, 1, NULL, &bytes, &size);
  assert_int_equal(s, EM_ERR_UNSUPPORTED);
  assert_null(bytes);
  assert_non_null(strstr(em_last_error(), "cross_entropy_with_softmax"));
  assert_non_null(strstr(em_last_error(), "no ONNX equivalent"));
  em_var ge = AP(g, "gelu", x);
  CHECK(em_var_set_name(g, ge, "act"));
  s = em_onnx_export_buffer(g, &ge, 1, NULL, &bytes, &size);
  assert_int_equal(s, EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(em_last_error(), "'act'"));
  assert_non_null(strstr(em_last_error(), "opset 20"));
  em_tensor *xv = pattern(2, (int64_t[]){3, 4}, 4);
  em_feed f = {x, xv};
  round_trip(g, &ge, 1, &f, 1, &(em_onnx_export_options){.opset = 20}, "gelu_opset20");
  s = em_onnx_export_buffer(g, &ge, 1, &(em_onnx_export_options){.opset = 12}, &bytes, &size);
  assert_int_equal(s, EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "opset 12"));
  /* ScatterND's reduction came in opset 16. */
  em_var data, ind, upd, sc;
  CHECK(em_input(g, "data", EM_F32, 1, (int64_t[]){5}, &data));
  CHECK(em_input(g, "ind", EM_I64, 2, (int64_t[]){2, 1}, &ind));
  CHECK(em_input(g, "upd", EM_F32, 1, (int64_t[]){2}, &upd));
  CHECK(em_apply(g, "scatter_nd", (em_var[]){data, ind, upd}, 3, (em_attr[]){{.name = "reduction",
                 .type = EM_ATTR_STRING, .s = "add"}}, 1, &sc, 1));
  s = em_onnx_export_buffer(g, &sc, 1, &(em_onnx_export_options){.opset = 15}, &bytes, &size);
  assert_int_equal(s, EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(em_last_error(), "opset 16"));
  assert_non_null(strstr(em_last_error(), "scatter_nd"));
  s = em_onnx_export(g, &ge, 1, &(em_onnx_export_options){.opset = 20}, "/nonexistent-dir/m.onnx");
  assert_int_equal(s, EM_ERR_IO);
  em_tensor_release(xv);
  em_graph_free(g);
}

/* Tensors of 1 KiB and more in "<model>.data", read back by the importer
 * (and, as a case of its own, by onnxruntime). */
static void test_external_data(void **state) {
  (void)state;
  em_var x, outs[3];
  em_graph *g = cnn(&x, outs);
  char dir[1100], path[1200], data[1300];
  ts_ort_new_case(&cases, "external", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  snprintf(data, sizeof data, "%s.data", path);
  CHECK(em_onnx_export(g, outs, 3, &(em_onnx_export_options){.external_data = EM_ONNX_EXTERNAL_ALWAYS}, path));
  struct stat st;
  assert_int_equal(stat(data, &st), 0);
  assert_int_equal(st.st_size, 3 * 100 * 4); /* fc.W, the one tensor of 1 KiB or more */
  em_onnx *m;
  CHECK(em_onnx_load(path, NULL, &m));
  em_tensor *xv = pattern(4, (int64_t[]){2, 2, 10, 10}, 5), *got[3], *want[3];
  em_exec *e;
  CHECK(em_exec_create(g, outs, 3, em_cpu(), &e));
  CHECK(em_exec_run(e, &(em_feed){x, xv}, 1, want));
  CHECK(em_onnx_run(m, &(em_named_tensor){"image", xv}, 1, got));
  for (int j = 0; j < 3; j++) expect_same_bits(got[j], want[j], "external", j), em_tensor_release(got[j]);
  ts_ort_write_case(dir, NULL, 0, NULL, 0, &(em_named_tensor){"image", xv}, 1, want, 3);
  for (int j = 0; j < 3; j++) em_tensor_release(want[j]);
  em_exec_free(e);
  em_onnx_free(m);
  em_tensor_release(xv);
  em_graph_free(g);
  /* A failed export leaves the files that are there as they were: here the
   * model's path is a directory, so writing the model fails after its data
   * is ready; the old data file, which an older model beside it reads, must
   * keep its bytes, and no temporary file may be left. */
  snprintf(dir, sizeof dir, "%s/external_fails", cases.root);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(data, sizeof data, "%s.data", path);
  FILE *old = fopen(data, "wb");
  assert_non_null(old);
  fputs("the older model's tensors", old);
  fclose(old);
  g = cnn(&x, outs);
  assert_int_equal(em_onnx_export(g, outs, 3, &(em_onnx_export_options){.external_data = EM_ONNX_EXTERNAL_ALWAYS},
                                  path), EM_ERR_IO);
  em_graph_free(g);
  char kept[64] = {0};
  old = fopen(data, "rb");
  assert_non_null(old);
  assert_int_equal(fread(kept, 1, sizeof kept - 1, old), strlen("the older model's tensors"));
  fclose(old);
  assert_string_equal(kept, "the older model's tensors");
  DIR *dd = opendir(dir);
  assert_non_null(dd);
  int entries = 0;
  for (struct dirent *de; (de = readdir(dd));)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
      entries++;
      if (strcmp(de->d_name, "model.onnx") && strcmp(de->d_name, "model.onnx.data"))
        fail_msg("a failed export left %s/%s", dir, de->d_name);
    }
  closedir(dd);
  assert_int_equal(entries, 2);
  /* Not a case for the onnxruntime check. */
  assert_int_equal(unlink(data) | rmdir(path) | rmdir(dir), 0);
  /* The buffer form cannot hold external data. */
  void *bytes;
  size_t size;
  assert_int_equal(em_onnx_export_buffer(g = cnn(&x, outs), outs, 1,
                                         &(em_onnx_export_options){.external_data = EM_ONNX_EXTERNAL_ALWAYS},
                                         &bytes, &size),
                   EM_ERR_INVALID_ARGUMENT);
  em_graph_free(g);
}

/* A LeNet (batch norm, dropout) trained a few steps with the layers library
 * and the trainer, then exported: its logits as the trained graph gives them. */
static void test_trained_lenet(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, label, logits;
  CHECK(em_input(g, "x", EM_F32, 4, (int64_t[]){-1, 1, 28, 28}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &label));
  em_model_opts mo = {.channels = {4, 6}, .fc = {16, 12}, .batch_norm = 1, .dropout = 0.25};
  CHECK(em_model_lenet(g, x, 10, 42, &mo, &logits));
  em_var loss = ap(g, "cross_entropy_with_softmax", (em_var[]){logits, label}, 2, NULL, 0);
  size_t n_params;
  CHECK(em_graph_parameters(g, NULL, 0, &n_params));
  em_var *params = malloc(sizeof(em_var) * n_params);
  assert_non_null(params);
  CHECK(em_graph_parameters(g, params, n_params, &n_params));
  em_learner_config cfg;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.05, &cfg));
  em_learner *l;
  CHECK(em_learner_create(&cfg, NULL, params, (int)n_params, &l));
  em_trainer *t;
  CHECK(em_trainer_create(g, loss, -1, &l, 1, NULL, &t));
  em_tensor *xv = pattern(4, (int64_t[]){4, 1, 28, 28}, 6), *lv;
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){4}, (int32_t[]){3, 1, 4, 1}, 16, &lv));
  em_feed feeds[2] = {{x, xv}, {label, lv}};
  for (int step = 0; step < 3; step++) CHECK(em_trainer_train_minibatch(t, feeds, 2, NULL));
  round_trip(g, &logits, 1, feeds, 1, NULL, "lenet_trained");
  em_trainer_free(t);
  em_learner_free(l);
  free(params);
  em_tensor_release(xv), em_tensor_release(lv);
  em_graph_free(g);
}

/* Trained on the test double's GPU: the parameters and batch-norm
 * statistics are newest on the device, and the export must write those.
 * The file is made before anything else reads the graph on the CPU; then a
 * CPU executor (which brings the host up to date itself) gives the
 * reference. */
static void test_trained_on_gpu(void **state) {
  (void)state;
  if (!have_gpu) {
    print_message("SKIPPED: no test double of libcuda (FAKECUDA_LIB, set by build-tools/run_tests.sh)\n");
    skip();
  }
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, label, logits;
  CHECK(em_input(g, "x", EM_F32, 4, (int64_t[]){-1, 1, 28, 28}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &label));
  em_model_opts mo = {.channels = {2, 3}, .fc = {8, 8}, .batch_norm = 1};
  CHECK(em_model_lenet(g, x, 10, 7, &mo, &logits));
  em_var loss = ap(g, "cross_entropy_with_softmax", (em_var[]){logits, label}, 2, NULL, 0);
  size_t n_params;
  CHECK(em_graph_parameters(g, NULL, 0, &n_params));
  em_var *params = malloc(sizeof(em_var) * n_params);
  assert_non_null(params);
  CHECK(em_graph_parameters(g, params, n_params, &n_params));
  em_learner_config cfg;
  CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &cfg));
  em_learner *l;
  CHECK(em_learner_create(&cfg, NULL, params, (int)n_params, &l));
  em_trainer *t;
  CHECK(em_trainer_create(g, loss, -1, &l, 1, &(em_trainer_options){.device = em_cuda(0)}, &t));
  em_tensor *xv = pattern(4, (int64_t[]){2, 1, 28, 28}, 8), *lv;
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){2}, (int32_t[]){7, 2}, 8, &lv));
  em_feed feeds[2] = {{x, xv}, {label, lv}};
  for (int step = 0; step < 2; step++) CHECK(em_trainer_train_minibatch(t, feeds, 2, NULL));
  void *bytes;
  size_t size;
  CHECK(em_onnx_export_buffer(g, &logits, 1, NULL, &bytes, &size));
  em_onnx *m;
  CHECK(em_onnx_load_buffer(bytes, size, "lenet_gpu", NULL, &m));
  em_tensor *got, *want;
  CHECK(em_onnx_run(m, &(em_named_tensor){"x", xv}, 1, &got));
  em_exec *e;
  CHECK(em_exec_create(g, &logits, 1, em_cpu(), &e));
  CHECK(em_exec_run(e, feeds, 1, &want));
  expect_same_bits(got, want, "lenet trained on the GPU", 0);
  keep_case("lenet_trained_gpu", NULL, bytes, size, &(em_named_tensor){"x", xv}, 1, &want, 1);
  em_tensor_release(got), em_tensor_release(want);
  em_exec_free(e);
  em_onnx_free(m);
  free(bytes);
  em_trainer_free(t);
  em_learner_free(l);
  free(params);
  em_tensor_release(xv), em_tensor_release(lv);
  em_graph_free(g);
}

/* --------------------------------------------------------- node tests --- */

static const char *node_dir(void) {
  const char *d = getenv("EMBER_ONNX_TESTDATA");
  return d && *d ? d : "/usr/share/libonnx-testdata/data/node";
}

/* Imports test (inputs Ember needs at build time given at load), exports
 * the imported graph, reloads and compares. 0: done; 1: the import refused
 * it (not this test's business); the export's refusal fails unless
 * allow_refusal (then 2). */
static int node_round_trip(const char *test, int allow_refusal) {
  char path[1024], file[1200];
  snprintf(path, sizeof path, "%s/%s/model.onnx", node_dir(), test);
  em_onnx *meta;
  if (em_onnx_load(path, &(em_onnx_options){.metadata_only = 1}, &meta)) return 1;
  size_t n_in = em_onnx_input_count(meta), n_out = em_onnx_output_count(meta);
  if (n_in > 8 || n_out > 8) {
    em_onnx_free(meta);
    return 1;
  }
  em_named_tensor vals[8];
  size_t n_vals = 0;
  int ok = 1;
  for (size_t k = 0; k < n_in && ok; k++) {
    em_onnx_io io;
    em_onnx_tensor *ot;
    CHECK(em_onnx_input_get(meta, k, &io));
    snprintf(file, sizeof file, "%s/%s/test_data_set_0/input_%zu.pb", node_dir(), test, k);
    if (em_onnx_tensor_load(file, &ot)) { ok = 0; break; }
    vals[n_vals].name = io.name;
    ok = !em_onnx_tensor_to_em(ot, &vals[n_vals].value);
    n_vals += ok;
    em_onnx_tensor_free(ot);
  }
  /* First with every input at run time, else the later ones given at load. */
  em_onnx *m = NULL;
  int n_load = 0;
  if (ok && em_onnx_load(path, NULL, &m)) {
    n_load = (int)n_vals - 1;
    if (em_onnx_load(path, &(em_onnx_options){.input_values = vals + 1, .n_input_values = n_load}, &m)) m = NULL;
  }
  int rc = 1;
  if (m) {
    int n_run = (int)n_vals - n_load;
    em_tensor *want[8], *got[8];
    em_var outs[8];
    for (size_t j = 0; j < n_out; j++) {
      em_onnx_io io;
      CHECK(em_onnx_output_get(m, j, &io));
      outs[j] = io.var;
    }
    if (em_onnx_run(m, vals, n_run, want)) {
      em_onnx_free(m), m = NULL; /* runs that fail are the conformance test's business */
    } else {
      void *bytes;
      size_t size;
      em_status s = em_onnx_export_buffer(em_onnx_graph_of(m), outs, (int)n_out, NULL, &bytes, &size);
      if (s && allow_refusal && s == EM_ERR_UNSUPPORTED) {
        rc = 2;
      } else {
        if (s) fail_msg("%s: export: %s", test, em_last_error());
        em_onnx *m2;
        if (em_onnx_load_buffer(bytes, size, test, NULL, &m2)) fail_msg("%s: reload: %s", test, em_last_error());
        /* Inputs the outputs do not depend on (a Shape folded into a constant) are not exported. */
        em_named_tensor used[8];
        int n_used = 0;
        size_t at;
        for (int k = 0; k < n_run; k++)
          if (!em_onnx_find_input(m2, vals[k].name, &at)) used[n_used++] = vals[k];
        if (em_onnx_run(m2, used, n_used, got)) fail_msg("%s: rerun: %s", test, em_last_error());
        for (size_t j = 0; j < n_out; j++) expect_same_bits(got[j], want[j], test, (int)j), em_tensor_release(got[j]);
        snprintf(file, sizeof file, "%s/%s", node_dir(), test);
        keep_case(test, file, bytes, size, used, n_used, want, (int)n_out);
        em_onnx_free(m2);
        free(bytes);
        rc = 0;
      }
      for (size_t j = 0; j < n_out; j++) em_tensor_release(want[j]);
    }
    em_onnx_free(m);
  }
  for (size_t k = 0; k < n_vals; k++) em_tensor_release(vals[k].value);
  em_onnx_free(meta);
  return rc;
}

static const char *const node_tests[] = {
    "test_add_bcast", "test_relu", "test_conv_with_strides_and_asymmetric_padding", "test_maxpool_2d_pads",
    "test_averagepool_2d_pads", "test_batchnorm_example", "test_gemm_all_attributes", "test_matmul_3d",
    "test_softmax_axis_1", "test_logsoftmax_axis_0", "test_concat_3d_axis_1", "test_transpose_all_permutations_2",
    "test_reshape_reordered_all_dims", "test_flatten_axis2", "test_reduce_mean_keepdims_example",
    "test_reduce_sum_keepdims_example", "test_argmax_keepdims_example", "test_slice", "test_squeeze",
    "test_unsqueeze_axis_0", "test_clip", "test_tile", "test_expand_dim_changed", "test_constant_pad",
    "test_where_example", "test_cast_FLOAT_to_DOUBLE", "test_gather_1", "test_top_k", "test_leakyrelu",
    "test_elu", "test_selu", "test_hardsigmoid", "test_instancenorm_example", "test_lrn",
    "test_globalaveragepool", "test_depthtospace_crd_mode_example", "test_spacetodepth_example",
    "test_convtranspose", "test_equal_bcast", "test_mod_mixed_sign_float64", "test_sqrt", "test_erf",
    "test_cumsum_1d_reverse_exclusive", "test_cumsum_2d_negative_axis", "test_gathernd_example_int32_batch_dim1",
    "test_scatternd_add", "test_scatter_elements_with_duplicate_indices",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric", "test_resize_tf_crop_and_resize",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",
};

static void test_node_tests(void **state) {
  (void)state;
  char p[1024];
  struct stat st;
  snprintf(p, sizeof p, "%s/test_abs/model.onnx", node_dir());
  if (stat(p, &st)) {
    print_message("SKIPPED: libonnx-testdata not found under %s (apt-get install libonnx-testdata)\n", node_dir());
    skip();
  }
  int done = 0;
  for (size_t i = 0; i < sizeof node_tests / sizeof node_tests[0]; i++) {
    snprintf(p, sizeof p, "%s/%s/model.onnx", node_dir(), node_tests[i]);
    if (stat(p, &st)) fail_msg("%s: missing from the node tests", node_tests[i]);
    int rc = node_round_trip(node_tests[i], 0);
    if (rc) fail_msg("%s: does not import or run any more: %s", node_tests[i], em_last_error());
    done++;
  }
  print_message("%d node tests exported, reloaded and equal bit for bit\n", done);
}

/* EMBER_EXPORT_ALL_NODE_TESTS=1: every node test that imports and runs. */
static void test_all_node_tests(void **state) {
  (void)state;
  const char *all = getenv("EMBER_EXPORT_ALL_NODE_TESTS");
  if (!all || strcmp(all, "1")) skip();
  DIR *d = opendir(node_dir());
  if (!d) skip();
  struct dirent *de;
  int n[3] = {0, 0, 0};
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "test_", 5)) continue;
    int rc = node_round_trip(de->d_name, 1);
    n[rc]++;
    if (rc == 2) print_message("  refused: %s: %s\n", de->d_name, em_last_error());
  }
  closedir(d);
  print_message("node tests: %d round-tripped bit for bit, %d refused by the export, %d not imported\n", n[0], n[2],
                n[1]);
}

/* ------------------------------------------------ onnx + onnxruntime --- */

/* Every model kept above through onnx.checker and onnxruntime (tests/support/onnx_check.py). */
static void test_onnxruntime(void **state) {
  (void)state;
  ts_ort_check(&cases);
}

int main(void) {
  /* The test double as an H100 where no real driver is chosen (gpu_double.h). */
  have_gpu = ts_use_gpu() > 0;
  if (ts_ort_init(&cases, "ember_export")) {
    fprintf(stderr, "test_onnx_export: mkdtemp %s: %s\n", cases.root, strerror(errno));
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp),           cmocka_unit_test(test_cnn),
      cmocka_unit_test(test_mixed_precision),
      cmocka_unit_test(test_shapes_and_more), cmocka_unit_test(test_resize_antialias),
      cmocka_unit_test(test_unusual_graphs), cmocka_unit_test(test_recurrent_as_one_node),
      cmocka_unit_test(test_recurrent_fallbacks), cmocka_unit_test(test_recurrent_record_checked),
      cmocka_unit_test(test_recurrent_import_export),
      cmocka_unit_test(test_refusals),      cmocka_unit_test(test_every_op_has_a_form_or_a_reason),
      cmocka_unit_test(test_external_data), cmocka_unit_test(test_trained_lenet),
      cmocka_unit_test(test_trained_on_gpu),
      cmocka_unit_test(test_node_tests),    cmocka_unit_test(test_all_node_tests),
      cmocka_unit_test(test_onnxruntime),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  ts_ort_remove(&cases);
  em_shutdown();
  return rc;
}
