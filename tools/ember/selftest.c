/* ember selftest: for every device, runs each primitive on fresh random
 * inputs and compares the bits with the CPU twin, and one graph op of each
 * op family's kernel module (portable mode: the CPU's bits); reports, per kernel module,
 * the path its plan took and how long the load took (cold or from the JIT
 * cache). The portable math maps (kernels/math.cu) get inputs that reach
 * every branch: random bit patterns, every scale, and all 65536 half and
 * bfloat16 values. Through Ember's test double of libcuda (EMBER_LIBCUDA) the
 * kernels run from their host builds, so the same comparisons hold in CI;
 * `make test-gpu` runs this against the real driver, every path forced in
 * turn. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember.h"

typedef struct case_result {
  const char *kernel;
  const char *module;
  int ran;          /* the comparison was made (no error before it) */
  int ok;
  size_t mismatches;
  char error[300];
} case_result;

static uint64_t rng_state;
static float rand_float(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill_random(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = rand_float();
}

static size_t count_mismatches(const float *a, const float *b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

/* Device buffers for one case, freed on every path out. */
typedef struct bufs { em_device dev; void *p[3]; } bufs;
static void bufs_free(bufs *b) {
  for (int i = 0; i < 3; i++)
    if (b->p[i]) em_free(b->dev, b->p[i]);
}

static int upload(em_device dev, void **dst, const float *src, size_t n) {
  if (em_malloc(dev, n * sizeof(float), dst)) return 1;
  return src ? em_memcpy_h2d(dev, *dst, src, n * sizeof(float), NULL) != EM_OK : 0;
}

static void record_error(case_result *r) {
  r->ok = 0;
  r->ran = 0;
  snprintf(r->error, sizeof r->error, "%s", em_last_error());
}

/* Each case: run on dev, run the twin on the CPU, compare. */
static void case_axpy(em_device dev, case_result *r) {
  size_t n = 1000003;
  float *x = malloc(n * 4), *y = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  float a = rand_float();
  fill_random(x, n);
  fill_random(y, n);
  memcpy(want, y, n * 4);
  em_axpy_f32(em_cpu(), a, x, want, n, NULL);
  if (upload(dev, &b.p[0], x, n) || upload(dev, &b.p[1], y, n) || em_axpy_f32(dev, a, b.p[0], b.p[1], n, NULL) ||
      em_memcpy_d2h(dev, got, b.p[1], n * 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(x), free(y), free(want), free(got);
}

static void case_fill(em_device dev, case_result *r) {
  size_t n = 777777;
  float v = rand_float(), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  em_fill_f32(em_cpu(), want, v, n, NULL);
  if (upload(dev, &b.p[0], NULL, n) || em_fill_f32(dev, b.p[0], v, n, NULL) || em_memcpy_d2h(dev, got, b.p[0], n * 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(want), free(got);
}

static void case_sum(em_device dev, case_result *r) {
  size_t n = 3000017;
  float *x = malloc(n * 4), want = 0, got = 0;
  bufs b = {dev, {0}};
  fill_random(x, n);
  em_sum_f32(em_cpu(), x, n, &want, NULL);
  if (upload(dev, &b.p[0], x, n) || upload(dev, &b.p[1], NULL, 1) || em_sum_f32(dev, b.p[0], n, b.p[1], NULL) ||
      em_memcpy_d2h(dev, &got, b.p[1], 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches(&want, &got, 1)) == 0;
  bufs_free(&b);
  free(x);
}

static void case_transpose(em_device dev, case_result *r) {
  size_t rows = 1023, cols = 517, n = rows * cols;
  float *in = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  fill_random(in, n);
  em_transpose_f32(em_cpu(), in, want, rows, cols, NULL);
  if (upload(dev, &b.p[0], in, n) || upload(dev, &b.p[1], NULL, n) ||
      em_transpose_f32(dev, b.p[0], b.p[1], rows, cols, NULL) || em_memcpy_d2h(dev, got, b.p[1], n * 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(in), free(want), free(got);
}

/* ------------------------------------------------ portable math (math.cu) --- */

static uint32_t rand_bits(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 32);
}

/* Inputs that reach every branch of kernels/em_math.h: any bit pattern (NaN,
 * inf, subnormals, huge arguments), values of every scale near 0, and the
 * range where activations live. */
/* 2^k for |k| <= 126, without libm (the tool does not link it). */
static float pow2f(int k) {
  uint32_t u = (uint32_t)(k + 127) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void fill_math_inputs(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = rand_bits();
    switch (i % 3) {
    case 0: memcpy(&x[i], &u, 4); break;
    case 1: x[i] = rand_float() * pow2f((int)(u % 41) - 20); break;
    default: x[i] = rand_float() * 100.0f; break;
    }
  }
}

static size_t count_mismatches_bytes(const void *a, const void *b, size_t n, size_t size) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp((const char *)a + i * size, (const char *)b + i * size, size) != 0;
  return bad;
}

static int upload_bytes(em_device dev, void **dst, const void *src, size_t bytes) {
  if (em_malloc(dev, bytes, dst)) return 1;
  return src ? em_memcpy_h2d(dev, *dst, src, bytes, NULL) != EM_OK : 0;
}

static void case_map(em_device dev, case_result *r, em_math_fn fn) {
  size_t n = (1u << 18) + 13;
  float *x = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  fill_math_inputs(x, n);
  em_map_f32(em_cpu(), fn, x, want, n, NULL);
  if (upload(dev, &b.p[0], x, n) || upload(dev, &b.p[1], NULL, n) || em_map_f32(dev, fn, b.p[0], b.p[1], n, NULL) ||
      em_memcpy_d2h(dev, got, b.p[1], n * 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(x), free(want), free(got);
}

#define MAP_CASE(name, fn) \
  static void case_map_##name(em_device dev, case_result *r) { case_map(dev, r, fn); }
MAP_CASE(exp, EM_MATH_EXP)
MAP_CASE(log, EM_MATH_LOG)
MAP_CASE(log1p, EM_MATH_LOG1P)
MAP_CASE(expm1, EM_MATH_EXPM1)
MAP_CASE(tanh, EM_MATH_TANH)
MAP_CASE(sigmoid, EM_MATH_SIGMOID)
MAP_CASE(softplus, EM_MATH_SOFTPLUS)
MAP_CASE(erf, EM_MATH_ERF)
MAP_CASE(sqrt, EM_MATH_SQRT)
MAP_CASE(rsqrt, EM_MATH_RSQRT)
MAP_CASE(sin, EM_MATH_SIN)
MAP_CASE(cos, EM_MATH_COS)
MAP_CASE(tan, EM_MATH_TAN)
MAP_CASE(atan, EM_MATH_ATAN)
MAP_CASE(asinh, EM_MATH_ASINH)

static void case_pow(em_device dev, case_result *r) {
  size_t n = (1u << 18) + 7;
  float *x = malloc(n * 4), *p = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  fill_math_inputs(x, n);
  fill_math_inputs(p, n);
  for (size_t i = 0; i < n; i += 4) x[i] = x[i] < 0.0f ? -x[i] : x[i]; /* more finite results */
  em_pow_f32(em_cpu(), x, p, want, n, NULL);
  if (upload(dev, &b.p[0], x, n) || upload(dev, &b.p[1], p, n) || upload(dev, &b.p[2], NULL, n) ||
      em_pow_f32(dev, b.p[0], b.p[1], b.p[2], n, NULL) || em_memcpy_d2h(dev, got, b.p[2], n * 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(x), free(p), free(want), free(got);
}

/* float -> 16-bit: random floats, plus every value near the half and
 * bfloat16 rounding boundaries that random bits rarely hit. */
typedef em_status (*to16_fn)(em_device, const float *, uint16_t *, size_t, em_stream *);
static void case_to16(em_device dev, case_result *r, to16_fn f) {
  size_t n = (1u << 18) + 5;
  float *x = malloc(n * 4);
  uint16_t *want = malloc(n * 2), *got = malloc(n * 2);
  bufs b = {dev, {0}};
  fill_math_inputs(x, n);
  for (size_t i = 0; i < n; i += 2) x[i] = rand_float() * 70000.0f * pow2f(-(int)(rand_bits() % 40));
  f(em_cpu(), x, want, n, NULL);
  if (upload(dev, &b.p[0], x, n) || upload_bytes(dev, &b.p[1], NULL, n * 2) || f(dev, b.p[0], b.p[1], n, NULL) ||
      em_memcpy_d2h(dev, got, b.p[1], n * 2, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches_bytes(want, got, n, 2)) == 0;
  bufs_free(&b);
  free(x), free(want), free(got);
}

/* 16-bit -> float: all 65536 values, then random ones. */
typedef em_status (*from16_fn)(em_device, const uint16_t *, float *, size_t, em_stream *);
static void case_from16(em_device dev, case_result *r, from16_fn f) {
  size_t n = 65536 * 3;
  uint16_t *x = malloc(n * 2);
  float *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  for (size_t i = 0; i < n; i++) x[i] = (uint16_t)(i < 65536 ? i : rand_bits());
  f(em_cpu(), x, want, n, NULL);
  if (upload_bytes(dev, &b.p[0], x, n * 2) || upload(dev, &b.p[1], NULL, n) || f(dev, b.p[0], b.p[1], n, NULL) ||
      em_memcpy_d2h(dev, got, b.p[1], n * 4, NULL))
    record_error(r);
  else
    r->ok = (r->mismatches = count_mismatches_bytes(want, got, n, 4)) == 0;
  bufs_free(&b);
  free(x), free(want), free(got);
}

static void case_f32_to_f16(em_device dev, case_result *r) { case_to16(dev, r, em_f32_to_f16); }
static void case_f32_to_bf16(em_device dev, case_result *r) { case_to16(dev, r, em_f32_to_bf16); }
static void case_f16_to_f32(em_device dev, case_result *r) { case_from16(dev, r, em_f16_to_f32); }
static void case_bf16_to_f32(em_device dev, case_result *r) { case_from16(dev, r, em_bf16_to_f32); }

/* ---------------------------------------------------------- engine ops --- */

/* One graph op on dev and on the CPU, both in portable mode, inputs random
 * f32 in [-2, 2): the outputs must be the same bits. Shows that the op
 * family's kernel module loads and computes on this device. */
typedef struct op_case {
  const char *op;
  int n_in;
  int n_out;                  /* the op's outputs (0: 1); the first is compared */
  int ndim[3];
  int64_t shape[3][4];
  int n_attrs;
  em_attr attrs[2];
} op_case;

static em_status run_op(const op_case *c, em_device dev, em_tensor *const *in, em_tensor **host_out) {
  em_graph *g = NULL;
  em_exec *e = NULL;
  em_var x[3], y[4];
  em_tensor *out = NULL;
  em_status s = em_graph_create(&g);
  for (int i = 0; i < c->n_in && !s; i++) s = em_input(g, NULL, EM_F32, c->ndim[i], c->shape[i], &x[i]);
  if (!s) s = em_apply(g, c->op, x, c->n_in, c->attrs, c->n_attrs, y, c->n_out ? c->n_out : 1);
  if (!s) s = em_exec_create(g, &y[0], 1, dev, &e);
  if (!s) s = em_exec_set_mode(e, EM_MODE_PORTABLE);
  em_feed f[3];
  for (int i = 0; i < c->n_in; i++) f[i] = (em_feed){x[i], in[i]};
  if (!s) s = em_exec_run(e, f, c->n_in, &out);
  if (!s) s = em_tensor_to_device(out, em_cpu(), host_out);
  em_tensor_release(out);
  em_exec_free(e);
  em_graph_free(g);
  return s;
}

static void case_op(em_device dev, case_result *r, const op_case *c) {
  em_tensor *in[3] = {0}, *want = NULL, *got = NULL;
  int ok = 1;
  for (int i = 0; i < c->n_in && ok; i++) {
    int64_t n = 1;
    for (int d = 0; d < c->ndim[i]; d++) n *= c->shape[i][d];
    float *v = malloc(sizeof(float) * (size_t)n);
    if (v) fill_random(v, (size_t)n);
    for (int64_t k = 0; v && k < n; k++) v[k] *= 2;
    ok = v && !em_tensor_from_host(em_cpu(), EM_F32, c->ndim[i], c->shape[i], v, sizeof(float) * (size_t)n, &in[i]);
    free(v);
  }
  if (!ok || run_op(c, em_cpu(), in, &want) || run_op(c, dev, in, &got)) record_error(r);
  else {
    size_t n = (size_t)em_tensor_numel(want);
    r->ok = em_tensor_numel(got) == (int64_t)n &&
            (r->mismatches = count_mismatches(em_tensor_data(want), em_tensor_data(got), n)) == 0;
  }
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  em_tensor_release(want);
  em_tensor_release(got);
}

#define PADS1 {.name = "pads", .type = EM_ATTR_INTS, .ints = (const int64_t[]){1, 1, 1, 1}, .n = 4}
static const op_case op_unary = {.op = "exp", .n_in = 1, .ndim = {1}, .shape = {{100003}}};
static const op_case op_binary = {.op = "add", .n_in = 2, .ndim = {2, 1}, .shape = {{257, 33}, {33}}};
static const op_case op_core = {.op = "add_n", .n_in = 3, .ndim = {1, 1, 1}, .shape = {{1000}, {1000}, {1000}}};
static const op_case op_reduce = {
    .op = "reduce_sum", .n_in = 1, .ndim = {2}, .shape = {{129, 1000}}, .n_attrs = 1,
    .attrs = {{.name = "axes", .type = EM_ATTR_INTS, .ints = (const int64_t[]){1}, .n = 1}}};
static const op_case op_shape = {.op = "transpose", .n_in = 1, .ndim = {2}, .shape = {{65, 130}}};
static const op_case op_gemm = {.op = "matmul", .n_in = 2, .ndim = {2, 2}, .shape = {{70, 50}, {50, 90}}};
static const op_case op_conv = {.op = "convolution", .n_in = 2, .ndim = {4, 4}, .shape = {{2, 3, 9, 11}, {4, 3, 3, 3}},
                                .n_attrs = 1, .attrs = {PADS1}};
static const op_case op_pool = {
    .op = "max_pool", .n_in = 1, .ndim = {4}, .shape = {{2, 3, 9, 11}}, .n_attrs = 1,
    .attrs = {{.name = "kernel_shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){3, 3}, .n = 2}}};
static const op_case op_loss = {.op = "softmax", .n_in = 1, .ndim = {2}, .shape = {{33, 300}}};
static const op_case op_norm = {.op = "layer_normalization", .n_in = 2, .ndim = {2, 1}, .shape = {{16, 300}, {300}}};
/* resize: bilinear upsampling by 2 x 1.5 (its taps' weights and the order of their sum, kernels/resize_math.h). */
static const op_case op_resize = {
    .op = "resize", .n_in = 1, .ndim = {4}, .shape = {{2, 3, 17, 20}}, .n_attrs = 2,
    .attrs = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = (const double[]){1, 1, 2, 1.5}, .n = 4},
              {.name = "mode", .type = EM_ATTR_STRING, .s = "linear"}}};
/* index: a cumsum along the long axis (a running f32 sum in index order, kernels/index_math.h). */
static const op_case op_index = {.op = "cumsum", .n_in = 1, .ndim = {2}, .shape = {{37, 1000}}, .n_attrs = 1,
                                 .attrs = {{.name = "axis", .type = EM_ATTR_INT, .i = 1}}};
/* recurrent: the fused LSTM recurrence over 9 steps (a GEMM and the gate
 * arithmetic of kernels/recurrent_math.h per step; its output y). */
static const op_case op_recurrent = {.op = "_lstm_seq", .n_in = 2, .n_out = 4, .ndim = {3, 2},
                                     .shape = {{9, 5, 64}, {64, 16}}};
#define OP_CASE(name) \
  static void case_op_##name(em_device dev, case_result *r) { case_op(dev, r, &op_##name); }
OP_CASE(unary)
OP_CASE(binary)
OP_CASE(core)
OP_CASE(reduce)
OP_CASE(shape)
OP_CASE(gemm)
OP_CASE(conv)
OP_CASE(pool)
OP_CASE(loss)
OP_CASE(norm)
OP_CASE(resize)
OP_CASE(index)
OP_CASE(recurrent)

/* The learner module: three Adam steps (moments, a square root and a
 * division per element) over one parameter of 10007 elements, on dev and on
 * the CPU in portable mode; the updated parameters must be the same bits. */
static em_status adam_steps(em_device dev, const em_tensor *w0, const em_tensor *grad, em_tensor **host_out) {
  em_graph *g = NULL;
  em_learner *l = NULL;
  em_exec *e = NULL;
  em_var w, gv, update;
  em_learner_config cfg;
  int64_t n = em_tensor_numel(w0);
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = w0};
  em_status s = em_graph_create(&g);
  if (!s) s = em_parameter(g, "w", EM_F32, 1, &n, &init, &w);
  if (!s) s = em_input(g, "grad", EM_F32, 1, &n, &gv);
  if (!s) s = em_learner_defaults(EM_LEARNER_ADAM, 1e-2, &cfg);
  if (!s) s = em_learner_create(&cfg, NULL, &w, 1, &l);
  if (!s) s = em_learner_attach(l, g, &gv, &update);
  if (!s) s = em_exec_create(g, &update, 1, dev, &e);
  if (!s) s = em_exec_set_mode(e, EM_MODE_PORTABLE);
  for (int step = 0; step < 3 && !s; step++) {
    em_feed f[2] = {{gv, grad}};
    em_tensor *out = NULL;
    if (!(s = em_learner_feed(l, 1, &f[1])) && !(s = em_exec_run(e, f, 2, &out))) s = em_learner_step_done(l, 1);
    em_tensor_release(out);
  }
  if (!s) s = em_parameter_get(g, w, em_cpu(), host_out);
  em_exec_free(e);
  em_learner_free(l);
  em_graph_free(g);
  return s;
}

static void case_learner(em_device dev, case_result *r) {
  enum { N = 10007 };
  float *v = malloc(sizeof(float) * 2 * N);
  em_tensor *w0 = NULL, *grad = NULL, *want = NULL, *got = NULL;
  int64_t n = N;
  if (v) fill_random(v, 2 * N);
  if (!v || em_tensor_from_host(em_cpu(), EM_F32, 1, &n, v, sizeof(float) * N, &w0) ||
      em_tensor_from_host(em_cpu(), EM_F32, 1, &n, v + N, sizeof(float) * N, &grad) ||
      adam_steps(em_cpu(), w0, grad, &want) || adam_steps(dev, w0, grad, &got))
    record_error(r);
  else r->ok = (r->mismatches = count_mismatches(em_tensor_data(want), em_tensor_data(got), N)) == 0;
  free(v);
  em_tensor_release(w0);
  em_tensor_release(grad);
  em_tensor_release(want);
  em_tensor_release(got);
}

/* kernel: the primitive, or for an engine op "op:<name>". */
static const struct {
  const char *kernel, *module;
  void (*run)(em_device, case_result *);
} cases[] = {
  {"em_fill_f32", "elementwise", case_fill},
  {"em_axpy_f32", "elementwise", case_axpy},
  {"em_sum_f32", "reduce", case_sum},
  {"em_transpose_f32", "transpose", case_transpose},
  {"em_map_exp_f32", "math", case_map_exp},
  {"em_map_log_f32", "math", case_map_log},
  {"em_map_log1p_f32", "math", case_map_log1p},
  {"em_map_expm1_f32", "math", case_map_expm1},
  {"em_map_tanh_f32", "math", case_map_tanh},
  {"em_map_sigmoid_f32", "math", case_map_sigmoid},
  {"em_map_softplus_f32", "math", case_map_softplus},
  {"em_map_erf_f32", "math", case_map_erf},
  {"em_map_sqrt_f32", "math", case_map_sqrt},
  {"em_map_rsqrt_f32", "math", case_map_rsqrt},
  {"em_map_sin_f32", "math", case_map_sin},
  {"em_map_cos_f32", "math", case_map_cos},
  {"em_map_tan_f32", "math", case_map_tan},
  {"em_map_atan_f32", "math", case_map_atan},
  {"em_map_asinh_f32", "math", case_map_asinh},
  {"em_map_pow_f32", "math", case_pow},
  {"em_map_f32_to_f16", "math", case_f32_to_f16},
  {"em_map_f16_to_f32", "math", case_f16_to_f32},
  {"em_map_f32_to_bf16", "math", case_f32_to_bf16},
  {"em_map_bf16_to_f32", "math", case_bf16_to_f32},
  {"op:exp", "unary", case_op_unary},
  {"op:add", "binary", case_op_binary},
  {"op:add_n", "core", case_op_core},
  {"op:reduce_sum", "reduce_ops", case_op_reduce},
  {"op:transpose", "shape", case_op_shape},
  {"op:matmul", "gemm", case_op_gemm},
  {"op:convolution", "conv", case_op_conv},
  {"op:max_pool", "pool", case_op_pool},
  {"op:softmax", "loss", case_op_loss},
  {"op:layer_normalization", "norm", case_op_norm},
  {"op:resize", "resize", case_op_resize},
  {"op:cumsum", "index", case_op_index},
  {"op:_lstm_seq", "recurrent", case_op_recurrent},
  {"op:_update_adam", "learner", case_learner},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* EMBER_SELFTEST_MODULES: a comma-separated list of kernel modules to test
 * (unset or empty: all). */
static int module_selected(const char *module) {
  const char *list = getenv("EMBER_SELFTEST_MODULES");
  if (!list || !*list) return 1;
  size_t n = strlen(module);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && !strncmp(p, module, n)) return 1;
    p += len + (p[len] == ',');
  }
  return 0;
}

int ember_selftest(int json) {
  em_driver_info drv;
  int n_gpu = 0, failures = 0;
  if (em_driver_get_info(&drv) || em_cuda_device_count(&n_gpu)) {
    fprintf(stderr, "ember: %s\n", em_last_error());
    return 1;
  }
  const char *seed_env = getenv("EMBER_SELFTEST_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
  rng_state = seed ? seed : 1;

  json_t *devs = json_array();
  if (!json) printf("selftest: seed %llu (EMBER_SELFTEST_SEED=%llu repeats it)\n", (unsigned long long)seed, (unsigned long long)seed);
  for (int d = 0; d < n_gpu; d++) {
    em_device dev = em_cuda(d);
    em_device_info info;
    em_device_get_info(dev, &info);
    json_t *rows = json_array();
    if (!json) printf("\ncuda:%d %s (CC %d.%d)\n", d, info.name, info.cc_major, info.cc_minor);
    for (size_t c = 0; c < N_CASES; c++) {
      if (!module_selected(cases[c].module)) continue;
      case_result r = {cases[c].kernel, cases[c].module, 1, 1, 0, ""};
      cases[c].run(dev, &r);
      em_load_record rec;
      memset(&rec, 0, sizeof rec);
      em_dispatch_load_record(dev, cases[c].module, &rec);
      const char *verdict = r.ok ? "ok" : "FAIL";
      failures += !r.ok;
      if (json) {
        /* "image": the image table index that was loaded (`ember images`), -1
         * for NVRTC and the CPU: which of several cubins of one SM ran. */
        json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:i, s:b, s:b, s:b, s:I, s:f, s:s, s:s}", "kernel",
                                              r.kernel, "module", r.module, "path", em_path_name(rec.path), "image",
                                              rec.loaded ? rec.image_index : -1, "ran", r.ran, "ok", r.ok,
                                              "from_cache", rec.from_cache, "mismatches", (json_int_t)r.mismatches,
                                              "load_ms", rec.load_ms, "error", r.error, "detail", rec.detail));
      } else {
        printf("  %-20s %-11s %-10s load %8.2f ms%s  %s", r.kernel, r.module, em_path_name(rec.path), rec.load_ms,
               rec.from_cache ? " (cache)" : "        ", verdict);
        if (r.mismatches) printf(" (%zu values differ from the CPU twin)", r.mismatches);
        if (r.error[0]) printf(": %s", r.error);
        putchar('\n');
      }
    }
    if (json)
      json_array_append_new(devs, json_pack("{s:i, s:s, s:i, s:i, s:o}", "ordinal", d, "name", info.name, "cc_major",
                                            info.cc_major, "cc_minor", info.cc_minor, "results", rows));
    else json_decref(rows);
  }
  if (json) {
    json_t *root = json_pack("{s:s, s:I, s:s, s:i, s:b, s:i, s:o}", "schema", "ember.selftest/1", "seed", (json_int_t)seed,
                             "driver", drv.message, "driver_version", drv.driver_version, "kernels_run", 1,
                             "failures", failures, "devices", devs);
    json_dumpf(root, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(root);
  } else {
    json_decref(devs);
    if (!n_gpu) printf("no CUDA device: %s\n", drv.message);
    printf("\nselftest: %d failure%s\n", failures, failures == 1 ? "" : "s");
  }
  return failures ? 1 : 0;
}
