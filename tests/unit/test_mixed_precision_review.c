/* Adversarial tests of mixed precision (engine/half.c, engine/autocast.c): graphs the autocast
 * pass might corrupt (a live executor, gradients taken first, the same value on both sides of a
 * product, a convolution without bias, a transposed convolution with one, dynamic batch, an
 * unrolled GRU exported to ONNX), and half results of special values (inf, NaN, -0, f16
 * overflow, subnormals, rounding ties) against this file's own round-to-nearest-even encoders,
 * on the CPU and the GPU double in both modes. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/layers.h"
#include "fakecublas/fakecublas.h"
#include "ember/onnx.h"
#include "gpu_double.h"
#include "half_ref.h"
#include "op_testkit.h"

/* ------------------------------------------------------------ references --- */

/* double -> f16 bits, round to nearest even, by search over the decoded values (no bit tricks
 * shared with the library). */
static uint16_t ref_round(em_dtype t, double v) {
  if (isnan(v)) return t == EM_F16 ? 0x7e00 : 0x7fc0;
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  const uint16_t inf = t == EM_F16 ? 0x7c00 : 0x7f80;
  /* largest finite magnitude code below inf */
  uint16_t lo = 0, hi = inf; /* decoded(lo) <= a < decoded(hi) (inf counts as +inf) */
  if (a >= ts_half_value(t, inf - 1)) {
    double maxf = ts_half_value(t, inf - 1), next = ldexp(1.0, t == EM_F16 ? 16 : 128);
    /* IEEE: overflow to inf when a >= max + ulp/2 (the midpoint to 2^emax+1) */
    if (a >= (maxf + next) / 2) return sign | inf;
    return sign | (uint16_t)(inf - 1);
  }
  while (hi - lo > 1) {
    uint16_t mid = (uint16_t)((lo + hi) / 2);
    if (ts_half_value(t, mid) <= a) lo = mid;
    else hi = mid;
  }
  double dl = a - ts_half_value(t, lo), dh = ts_half_value(t, hi) - a;
  uint16_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
  return sign | r;
}

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }

static em_tensor *host_copy(em_tensor *t) {
  em_tensor *h = NULL;
  assert_int_equal(em_tensor_to_device(t, em_cpu(), &h), EM_OK);
  return h;
}

static int64_t numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* A tensor of dtype t with raw element bits or float values. */
static em_tensor *f32_tensor(int ndim, const int64_t *shape, const float *v) {
  em_tensor *t = NULL;
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, ndim, shape, v, sizeof *v * (size_t)numel(ndim, shape), &t), EM_OK);
  return t;
}
static em_tensor *half_tensor(em_dtype dt, int ndim, const int64_t *shape, const uint16_t *bits) {
  em_tensor *t = NULL;
  assert_int_equal(em_tensor_from_host(em_cpu(), dt, ndim, shape, bits, 2 * (size_t)numel(ndim, shape), &t), EM_OK);
  return t;
}

/* ------------------------------------------------- a live executor --- */

/* An executor planned before the pass must not run the rewritten nodes with its old plan: the
 * converted node now reads a value made after the plan (em_graph_replace's rule: refused, or
 * else right). Without the fix it read past the run's value table. */
static void test_autocast_after_executor(void **state) {
  (void)state;
  em_graph *g = NULL;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var x, w, y;
  em_init init = {.kind = EM_INIT_UNIFORM, .scale = 1, .seed = 2};
  assert_int_equal(em_input(g, "x", EM_F32, 2, (int64_t[]){3, 4}, &x), EM_OK);
  assert_int_equal(em_parameter(g, "w", EM_F32, 2, (int64_t[]){4, 5}, &init, &w), EM_OK);
  assert_int_equal(em_apply(g, "matmul", (em_var[]){x, w}, 2, NULL, 0, &y, 1), EM_OK);
  em_exec *e = NULL;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  em_tensor *xv = ot_rand(EM_F32, 2, (int64_t[]){3, 4}, 7, -1, 1), *out = NULL;
  em_feed f = {x, xv};
  assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
  em_tensor_release(out);
  out = NULL;
  int converted = 0;
  assert_int_equal(em_graph_autocast(g, EM_F16, &converted), EM_OK);
  assert_int_equal(converted, 1);
  em_status s = em_exec_run(e, &f, 1, &out);
  if (s == EM_OK) fail_msg("an executor planned before em_graph_autocast ran the rewritten graph with its old plan");
  if (!strstr(em_last_error(), "edited")) fail_msg("the refusal should say the graph was edited: %s", em_last_error());
  em_exec_free(e);
  /* a new executor runs it */
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
  em_tensor_release(out);
  em_exec_free(e);
  /* a pass that converts nothing leaves executors valid */
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  assert_int_equal(em_graph_autocast(g, EM_BF16, &converted), EM_OK);
  assert_int_equal(converted, 0);
  if (em_exec_run(e, &f, 1, &out)) fail_msg("a pass that converted nothing invalidated an executor: %s", em_last_error());
  em_tensor_release(out);
  em_exec_free(e);
  em_tensor_release(xv);
  em_graph_free(g);
}

/* ------------------------------------------------ special values --- */

static const float specials[] = {
    65504.0f, 65519.0f, 65520.0f, 65536.0f, -65520.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, -0.0f, 0.0f,
    0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.8p-24f, 0x1.4p-24f, 0x1p-14f, 0x1.ffcp-15f, 1.0009765625f /*1+2^-10*/,
    1.00048828125f /*1+2^-11: f16 tie to 1*/, 1.00146484375f /*1+3*2^-11: tie up*/, 0x1.01p0f /*bf16 tie*/,
    0x1.03p0f /*bf16 tie up*/, 3.4028235e38f, -3.4028235e38f, 0x1p-133f, 0x1p-134f, 0x1.8p-134f, 1e-40f, -1e-45f,
    0x1.fffffep127f, 0.1f, -2.5f, 3.14159265f};
#define N_SPECIALS ((int64_t)(sizeof specials / sizeof specials[0]))

/* cast f32 -> half of every special value, and back, on dev in each mode: the round-to-nearest-
 * even bits of this file's encoder; back to f32 exactly the decoded value. */
static void check_cast(em_device dev, int portable, em_dtype t) {
  em_graph *g = NULL;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var x, h, back;
  const int64_t n = N_SPECIALS;
  assert_int_equal(em_input(g, "x", EM_F32, 1, &n, &x), EM_OK);
  const em_attr to = AI("to", t), to32 = AI("to", EM_F32);
  assert_int_equal(em_apply(g, "cast", &x, 1, &to, 1, &h, 1), EM_OK);
  assert_int_equal(em_apply(g, "cast", &h, 1, &to32, 1, &back, 1), EM_OK);
  em_var outs[2] = {h, back};
  em_exec *e = NULL;
  assert_int_equal(em_exec_create(g, outs, 2, dev, &e), EM_OK);
  if (portable) assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
  em_tensor *xv = f32_tensor(1, &n, specials), *o[2] = {0};
  em_feed f = {x, xv};
  if (em_exec_run(e, &f, 1, o)) fail_msg("cast: %s", em_last_error());
  em_tensor *hh = host_copy(o[0]), *bh = host_copy(o[1]);
  const uint16_t *hb = em_tensor_data(hh);
  const float *bb = em_tensor_data(bh);
  for (int64_t i = 0; i < n; i++) {
    uint16_t want = ref_round(t, specials[i]);
    int both_nan = isnan(ts_half_value(t, want)) && isnan(ts_half_value(t, hb[i]));
    if (hb[i] != want && !both_nan)
      fail_msg("cast %a to %s on %s (%s): bits 0x%04x, want 0x%04x", (double)specials[i], em_dtype_name(t),
               dev.kind == EM_DEVICE_CPU ? "CPU" : "GPU", portable ? "portable" : "fast", hb[i], want);
    double dv = ts_half_value(t, hb[i]);
    if (!(isnan(dv) ? isnan(bb[i]) : ((double)bb[i] == dv && !signbit(bb[i]) == !signbit(dv))))
      fail_msg("cast %s 0x%04x back to f32: %a, want %a", em_dtype_name(t), hb[i], (double)bb[i], dv);
  }
  em_tensor_release(hh), em_tensor_release(bh), em_tensor_release(o[0]), em_tensor_release(o[1]);
  em_tensor_release(xv);
  em_exec_free(e);
  em_graph_free(g);
}

static void test_cast_specials(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    check_cast(em_cpu(), 0, dt);
    check_cast(em_cpu(), 1, dt);
    if (ts_use_gpu()) {
      check_cast(em_cuda(0), 0, dt);
      check_cast(em_cuda(0), 1, dt);
    }
  }
}

/* Products of half inputs whose f32 result needs the half dtype's rounding: x [n, 1] times
 * w [1, 1] with k = 1, so the f32 result is the exact product (every f16 x f16 product fits
 * f32's 24 bits) and one rounding of it must be this file's encoder's bits: ties, overflow to
 * inf, subnormal results, NaN and inf inputs, -0. */
static void check_product_specials(em_device dev, int portable, em_dtype t, const char *op) {
  /* x values (as half bits from doubles) and one w */
  const double xs[] = {3.0, 256.0, 255.875, 300.0, -300.0, 1.0 / 1024, 0x1p-14, INFINITY, NAN, -0.0, 0.0, 1.0,
                       1.0009765625, 0x1.01p0, 1.5, 65504.0};
  const double ws[] = {1.0009765625, 1.0, 0x1.01p0, 0.5, -0.0, 0x1p-10, 300.0};
  const int64_t n = (int64_t)(sizeof xs / sizeof xs[0]);
  uint16_t xb[16];
  for (int64_t i = 0; i < n; i++) xb[i] = ref_round(t, xs[i]);
  for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
    uint16_t wb = ref_round(t, ws[k]);
    em_tensor *xt = half_tensor(t, 2, (int64_t[]){n, 1}, xb), *wt = half_tensor(t, 2, (int64_t[]){1, 1}, &wb);
    em_graph *g = NULL;
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_var x, w, y;
    assert_int_equal(em_input(g, "x", t, 2, (int64_t[]){n, 1}, &x), EM_OK);
    assert_int_equal(em_input(g, "w", t, 2, (int64_t[]){1, 1}, &w), EM_OK);
    assert_int_equal(em_apply(g, op, (em_var[]){x, w}, 2, NULL, 0, &y, 1), EM_OK);
    em_exec *e = NULL;
    assert_int_equal(em_exec_create(g, &y, 1, dev, &e), EM_OK);
    if (portable) assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
    em_feed f[2] = {{x, xt}, {w, wt}};
    em_tensor *o = NULL;
    if (em_exec_run(e, f, 2, &o)) fail_msg("%s: %s", op, em_last_error());
    em_tensor *oh = host_copy(o);
    const uint16_t *ob = em_tensor_data(oh);
    double wv = ts_half_value(t, wb);
    for (int64_t i = 0; i < n; i++) {
      double p = ts_half_value(t, xb[i]) * wv; /* exact in double */
      /* f32 first: its product is exact, and 0 * -0 is -0 only as the sum 0 + x*w may leave it */
      uint16_t want = ref_round(t, p);
      int nan_ok = isnan(p) && isnan(ts_half_value(t, ob[i]));
      int zero_ok = p == 0 && ts_half_value(t, ob[i]) == 0; /* the sign of an exact zero sum: not asserted */
      if (ob[i] != want && !nan_ok && !zero_ok)
        fail_msg("%s %s on %s (%s): %a * %a gives 0x%04x (%a), want 0x%04x (%a)", op, em_dtype_name(t),
                 dev.kind == EM_DEVICE_CPU ? "CPU" : "GPU", portable ? "portable" : "fast", ts_half_value(t, xb[i]), wv,
                 ob[i], ts_half_value(t, ob[i]), want, ts_half_value(t, want));
    }
    em_tensor_release(oh), em_tensor_release(o), em_tensor_release(xt), em_tensor_release(wt);
    em_exec_free(e);
    em_graph_free(g);
  }
}

static void test_product_specials(void **state) {
  (void)state;
  const char *ops[2] = {"matmul", "gemm"};
  for (int o = 0; o < 2; o++)
    for (int t = 0; t < 2; t++) {
      em_dtype dt = t ? EM_BF16 : EM_F16;
      check_product_specials(em_cpu(), 0, dt, ops[o]);
      check_product_specials(em_cpu(), 1, dt, ops[o]);
      if (ts_use_gpu()) {
        check_product_specials(em_cuda(0), 0, dt, ops[o]);
        check_product_specials(em_cuda(0), 1, dt, ops[o]);
      }
    }
}

/* ------------------------------------------------- graph shapes the pass meets --- */

/* Runs outs of g on dev with the feeds, returning CPU doubles of each (malloc'd). */
static void run_values(em_graph *g, const em_var *outs, int n, em_device dev, int portable, const em_feed *f, int nf,
                       double **vals, int64_t *counts) {
  em_exec *e = NULL;
  if (em_exec_create(g, outs, n, dev, &e)) fail_msg("executor: %s", em_last_error());
  if (portable) assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
  em_tensor *o[8] = {0};
  if (em_exec_run(e, f, nf, o)) fail_msg("run: %s", em_last_error());
  for (int i = 0; i < n; i++) {
    em_tensor *h = host_copy(o[i]);
    vals[i] = ot_values(h, &counts[i]);
    em_tensor_release(h), em_tensor_release(o[i]);
  }
  em_exec_free(e);
}

static double max_abs(const double *v, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
  return m;
}

/* conv (no bias) -> relu -> conv (bias) -> convolution_transpose (bias) -> matmul with the
 * same value on both sides (y y^T over the flattened features), dynamic batch, loss = sum;
 * built twice, one autocast before em_gradients and one after: both run, give the f32
 * graph's values and gradients within the half roundings, on the CPU (fast: channels-last
 * chains; portable) and the GPU double. */
typedef struct cnet {
  em_graph *g;
  em_var x, w1, w2, b2, wt, bt, y, gram, loss, grads[5];
} cnet;

static void build_cnet(cnet *c, int autocast_when /* 0 none, 1 before grads, 2 after */, em_dtype half) {
  assert_int_equal(em_graph_create(&c->g), EM_OK);
  em_init init = {.kind = EM_INIT_UNIFORM, .scale = 0.5, .seed = 31};
  assert_int_equal(em_input(c->g, "x", EM_F32, 4, (int64_t[]){-1, 3, 7, 6}, &c->x), EM_OK);
  assert_int_equal(em_parameter(c->g, "w1", EM_F32, 4, (int64_t[]){4, 3, 3, 3}, &init, &c->w1), EM_OK);
  init.seed++;
  assert_int_equal(em_parameter(c->g, "w2", EM_F32, 4, (int64_t[]){5, 4, 3, 3}, &init, &c->w2), EM_OK);
  init.seed++;
  assert_int_equal(em_parameter(c->g, "b2", EM_F32, 1, (int64_t[]){5}, &init, &c->b2), EM_OK);
  init.seed++;
  assert_int_equal(em_parameter(c->g, "wt", EM_F32, 4, (int64_t[]){5, 2, 2, 2}, &init, &c->wt), EM_OK);
  init.seed++;
  assert_int_equal(em_parameter(c->g, "bt", EM_F32, 1, (int64_t[]){2}, &init, &c->bt), EM_OK);
  const int64_t pads[4] = {1, 1, 1, 1}, strides[2] = {2, 2};
  const em_attr pad = {.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 4};
  const em_attr st = {.name = "strides", .type = EM_ATTR_INTS, .ints = strides, .n = 2};
  em_var h1, r1, h2, r2, t, flat, tb;
  assert_int_equal(em_apply(c->g, "convolution", (em_var[]){c->x, c->w1}, 2, &pad, 1, &h1, 1), EM_OK);
  assert_int_equal(em_apply(c->g, "relu", &h1, 1, NULL, 0, &r1, 1), EM_OK);
  assert_int_equal(em_apply(c->g, "convolution", (em_var[]){r1, c->w2, c->b2}, 3, &pad, 1, &h2, 1), EM_OK);
  assert_int_equal(em_apply(c->g, "relu", &h2, 1, NULL, 0, &r2, 1), EM_OK);
  assert_int_equal(em_apply(c->g, "convolution_transpose", (em_var[]){r2, c->wt, c->bt}, 3, &st, 1, &t, 1), EM_OK);
  c->y = t;
  assert_int_equal(em_var_set_name(c->g, c->y, "y"), EM_OK);
  const em_attr ax = AI("axis", 1);
  assert_int_equal(em_apply(c->g, "flatten", &t, 1, &ax, 1, &flat, 1), EM_OK);
  const em_attr tr = AI("transpose_b", 1);
  (void)tb;
  assert_int_equal(em_apply(c->g, "matmul", (em_var[]){flat, flat}, 2, &tr, 1, &c->gram, 1), EM_OK);
  assert_int_equal(em_apply(c->g, "reduce_sum", &c->gram, 1, NULL, 0, &c->loss, 1), EM_OK);
  int converted = -1;
  if (autocast_when == 1) {
    assert_int_equal(em_graph_autocast(c->g, half, &converted), EM_OK);
    assert_int_equal(converted, 4);
  }
  em_var p[5] = {c->w1, c->w2, c->b2, c->wt, c->bt};
  if (em_gradients(c->g, c->loss, p, 5, c->grads)) fail_msg("gradients: %s", em_last_error());
  if (autocast_when == 2) {
    assert_int_equal(em_graph_autocast(c->g, half, &converted), EM_OK);
    if (converted < 4) fail_msg("autocast after em_gradients converted %d ops", converted);
  }
}

static void check_cnet(em_device dev, int portable, em_dtype half, int64_t batch) {
  cnet ref, mp[2];
  build_cnet(&ref, 0, half);
  build_cnet(&mp[0], 1, half);
  build_cnet(&mp[1], 2, half);
  const int64_t sx[4] = {batch, 3, 7, 6};
  em_tensor *xv = ot_rand(EM_F32, 4, sx, 77, -1, 1);
  double *rv[7], *mv[7];
  int64_t rc[7], mc[7];
  em_feed f = {ref.x, xv};
  em_var ro[7] = {ref.loss, ref.y, ref.grads[0], ref.grads[1], ref.grads[2], ref.grads[3], ref.grads[4]};
  run_values(ref.g, ro, 7, dev, portable, &f, 1, rv, rc);
  const char *what[7] = {"loss", "y", "d w1", "d w2", "d b2", "d wt", "d bt"};
  for (int k = 0; k < 2; k++) {
    em_var mo[7] = {mp[k].loss, mp[k].y, mp[k].grads[0], mp[k].grads[1], mp[k].grads[2], mp[k].grads[3], mp[k].grads[4]};
    /* y by name too: the converted node keeps its value and name */
    em_var named;
    assert_int_equal(em_graph_lookup(mp[k].g, "y", &named), EM_OK);
    assert_int_equal(named, mp[k].y);
    f.var = mp[k].x;
    run_values(mp[k].g, mo, 7, dev, portable, &f, 1, mv, mc);
    for (int i = 0; i < 7; i++) {
      assert_int_equal(rc[i], mc[i]);
      char label[128];
      snprintf(label, sizeof label, "%s (%s, autocast %s em_gradients, %s%s, batch %lld)", what[i], em_dtype_name(half),
               k ? "after" : "before", dev.kind == EM_DEVICE_CPU ? "CPU" : "GPU", portable ? " portable" : "",
               (long long)batch);
      ot_expect_close(mv[i], rv[i], rc[i], (half == EM_F16 ? 2e-2 : 8e-2) * max_abs(rv[i], rc[i]), 0, label);
      free(mv[i]);
    }
  }
  for (int i = 0; i < 7; i++) free(rv[i]);
  em_tensor_release(xv);
  em_graph_free(ref.g), em_graph_free(mp[0].g), em_graph_free(mp[1].g);
}

static void test_autocast_conv_chain(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    em_dtype h = t ? EM_BF16 : EM_F16;
    check_cnet(em_cpu(), 0, h, 2);
    check_cnet(em_cpu(), 0, h, 5);
    check_cnet(em_cpu(), 1, h, 3);
    if (ts_use_gpu()) {
      check_cnet(em_cuda(0), 0, h, 2);
      check_cnet(em_cuda(0), 1, h, 3);
    }
  }
}

/* The converted graph cloned (shared and copied), saved and loaded, described: the same bits. */
static void test_autocast_clone_describe(void **state) {
  (void)state;
  cnet c;
  build_cnet(&c, 1, EM_F16);
  em_tensor *xv = ot_rand(EM_F32, 4, (int64_t[]){2, 3, 7, 6}, 5, -1, 1);
  em_feed f = {c.x, xv};
  em_var o[2] = {c.loss, c.grads[0]};
  double *a[2], *b[2];
  int64_t na[2], nb[2];
  run_values(c.g, o, 2, em_cpu(), 1, &f, 1, a, na);
  for (int mode = 0; mode < 3; mode++) {
    em_graph *d = NULL;
    if (mode < 2) assert_int_equal(em_graph_clone(c.g, mode ? EM_CLONE_COPY : EM_CLONE_SHARE, &d), EM_OK);
    else {
      char path[512];
      ot_tmp_path(path, sizeof path, "autocast_review.emg");
      if (em_graph_save(c.g, path)) fail_msg("save: %s", em_last_error());
      if (em_graph_load(path, &d)) fail_msg("load: %s", em_last_error());
      remove(path);
    }
    run_values(d, o, 2, em_cpu(), 1, &f, 1, b, nb);
    for (int i = 0; i < 2; i++) {
      assert_int_equal(na[i], nb[i]);
      assert_memory_equal(a[i], b[i], sizeof(double) * (size_t)na[i]);
      free(b[i]);
    }
    em_graph_free(d);
  }
  em_exec *e = NULL;
  assert_int_equal(em_exec_create(c.g, o, 2, em_cpu(), &e), EM_OK);
  em_tensor *out[2] = {0};
  assert_int_equal(em_exec_run(e, &f, 1, out), EM_OK);
  char buf[16384];
  em_exec_describe(e, buf, sizeof buf);
  if (!strstr(buf, "f16")) fail_msg("em_exec_describe of a converted graph names no f16 value:\n%s", buf);
  em_tensor_release(out[0]), em_tensor_release(out[1]);
  em_exec_free(e);
  for (int i = 0; i < 2; i++) free(a[i]);
  em_tensor_release(xv);
  em_graph_free(c.g);
}

/* An unrolled GRU (its per-step products converted) exported to ONNX and loaded back: the
 * block is written as one GRU (f32, as the values it records are), the loaded model runs and
 * gives the f32 recurrence within the half roundings; the exported unrolled form too. */
static void test_autocast_gru_onnx(void **state) {
  (void)state;
  const int64_t T = 4, N = 2, I = 3, H = 5;
  double *ref = NULL, *mp = NULL, *back[2] = {0};
  int64_t n_ref = 0;
  em_tensor *xv = ot_rand(EM_F32, 3, (int64_t[]){T, N, I}, 41, -1, 1);
  for (int pass = 0; pass < 2; pass++) {
    em_graph *g = NULL;
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_var x, w, r, b;
    em_init init = {.kind = EM_INIT_UNIFORM, .scale = 0.6, .seed = 9};
    assert_int_equal(em_input(g, "x", EM_F32, 3, (int64_t[]){T, N, I}, &x), EM_OK);
    assert_int_equal(em_parameter(g, "W", EM_F32, 3, (int64_t[]){1, 3 * H, I}, &init, &w), EM_OK);
    init.seed++;
    assert_int_equal(em_parameter(g, "R", EM_F32, 3, (int64_t[]){1, 3 * H, H}, &init, &r), EM_OK);
    init.seed++;
    assert_int_equal(em_parameter(g, "B", EM_F32, 2, (int64_t[]){1, 6 * H}, &init, &b), EM_OK);
    em_recurrent_inputs in = EM_RECURRENT_INPUTS(x, w, r);
    in.b = b;
    em_recurrent_outputs out;
    if (em_recurrent_apply(g, EM_CELL_GRU, &in, NULL, &out)) fail_msg("gru: %s", em_last_error());
    if (pass) {
      int converted = 0;
      assert_int_equal(em_graph_autocast(g, EM_F16, &converted), EM_OK);
      if (converted < (int)T) fail_msg("an unrolled GRU of %lld steps had %d products converted", (long long)T, converted);
    }
    em_feed f = {x, xv};
    double *v[1];
    int64_t c[1];
    run_values(g, &out.y, 1, em_cpu(), 0, &f, 1, v, c);
    if (pass) mp = v[0];
    else ref = v[0], n_ref = c[0];
    if (!pass) {
      em_graph_free(g);
      continue;
    }
    for (int unroll = 0; unroll < 2; unroll++) {
      em_onnx_export_options eo = {.unroll_recurrent = unroll};
      void *bytes = NULL;
      size_t size = 0;
      if (em_onnx_export_buffer(g, &out.y, 1, &eo, &bytes, &size))
        fail_msg("export of an autocast GRU (unroll %d): %s", unroll, em_last_error());
      em_onnx *m = NULL;
      if (em_onnx_load_buffer(bytes, size, "gru", NULL, &m))
        fail_msg("load of the exported autocast GRU (unroll %d): %s", unroll, em_last_error());
      free(bytes);
      em_named_tensor nt = {"x", xv};
      em_tensor *o = NULL;
      if (em_onnx_run(m, &nt, 1, &o)) fail_msg("run of the exported autocast GRU: %s", em_last_error());
      em_tensor *h = host_copy(o);
      int64_t nb = 0;
      back[unroll] = ot_values(h, &nb);
      assert_int_equal(nb, n_ref);
      em_tensor_release(h), em_tensor_release(o);
      em_onnx_free(m);
    }
    em_graph_free(g);
  }
  double s = max_abs(ref, n_ref);
  ot_expect_close(mp, ref, n_ref, 4e-3 * s, 0, "autocast GRU vs f32");
  ot_expect_close(back[0], ref, n_ref, 4e-3 * s, 0, "exported autocast GRU (one node) vs f32");
  ot_expect_close(back[1], mp, n_ref, 1e-6 * s, 0, "exported autocast GRU (unrolled) vs the graph");
  free(ref), free(mp), free(back[0]), free(back[1]);
  em_tensor_release(xv);
}

/* ---------------------------------------------------- cuBLAS's half road --- */

static fakecublas_text_fn last_gemm;
static fakecublas_call_count_fn blas_calls;

/* The GPU double with the cuBLAS double; 0 (skip) when they are not built. */
static int blas_double(void) {
  const char *blas = getenv("FAKECUBLAS_LIB");
  if (!ts_use_gpu() || !blas || !*blas) return 0;
  if (!last_gemm) {
    void *h = dlopen(blas, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("cannot load the cuBLAS double: %s", dlerror());
    last_gemm = (fakecublas_text_fn)dlsym(h, "fakecublas_last_gemm");
    blas_calls = (fakecublas_call_count_fn)dlsym(h, "fakecublas_call_count");
    if (!last_gemm || !blas_calls) fail_msg("the cuBLAS double lacks its hooks");
  }
  return 1;
}

static unsigned long gemm_calls(void) { return blas_calls("cublasGemmEx") + blas_calls("cublasGemmStridedBatchedEx"); }

/* One op on dev in the fast mode (tf32 as asked), output 0 on the CPU. */
static em_tensor *run_fast(em_device dev, int tf32, const char *op, em_tensor *const *in, int n_in, const em_attr *at,
                           int n_at) {
  em_graph *g = NULL;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var v[4], y;
  em_feed f[4];
  for (int i = 0; i < n_in; i++) {
    char name[8];
    snprintf(name, sizeof name, "x%d", i);
    assert_int_equal(em_input(g, name, em_tensor_dtype(in[i]), em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &v[i]),
                     EM_OK);
    f[i] = (em_feed){v[i], in[i]};
  }
  if (em_apply(g, op, v, n_in, at, n_at, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  em_exec *e = NULL;
  if (em_exec_create(g, &y, 1, dev, &e)) fail_msg("%s: %s", op, em_last_error());
  assert_int_equal(em_exec_set_tf32(e, tf32), EM_OK);
  em_tensor *out = NULL;
  if (em_exec_run(e, f, n_in, &out)) fail_msg("%s: %s", op, em_last_error());
  em_tensor *h = host_copy(out);
  em_tensor_release(out);
  em_exec_free(e);
  em_graph_free(g);
  return h;
}

/* A deep half product (k = 300) through cuBLAS: one rounding of the f32 sum, which cuBLAS
 * guarantees only with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (else split-K partial
 * sums may be reduced in the half output type; the double does so for k >= 64). */
static void test_cublas_deep_half_one_rounding(void **state) {
  (void)state;
  if (!blas_double()) skip();
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    const int64_t M = 6, K = 300, N = 5;
    em_tensor *a = ot_rand(dt, 2, (int64_t[]){M, K}, 91, -1, 1), *b = ot_rand(dt, 2, (int64_t[]){K, N}, 92, -1, 1);
    double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), want[30];
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += av[i * K + k] * bv[k * N + j];
        want[i * N + j] = s;
      }
    em_tensor *in[2] = {a, b};
    unsigned long before = gemm_calls();
    em_tensor *y = run_fast(em_cuda(0), 0, "matmul", in, 2, NULL, 0);
    if (gemm_calls() == before) fail_msg("a deep %s matmul did not reach cuBLAS", em_dtype_name(dt));
    ts_expect_one_rounding(y, dt, want, M * N, "deep half matmul through cuBLAS");
    if (!strstr(last_gemm(), "DISALLOW_REDUCED_PRECISION_REDUCTION"))
      fail_msg("a %s product through cuBLAS without CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: %s",
               em_dtype_name(dt), last_gemm());
    free(av), free(bv);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(y);
  }
}

/* gemm through cuBLAS with every transpose, c absent / a row / a column / full / a scalar,
 * alpha and beta (beta 0 with c given too), against float64 within one rounding; EMBER_TF32
 * (em_exec_set_tf32) changes no bit of a half product. */
static void test_cublas_gemm_sweep(void **state) {
  (void)state;
  if (!blas_double()) skip();
  const int64_t M = 5, N = 7, K = 40;
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int cs = 0; cs < 6; cs++) {
          const int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N};
          int64_t sc[2];
          int cnd = 0;
          switch (cs) {
          case 1: sc[0] = N, cnd = 1; break;
          case 2: sc[0] = M, sc[1] = 1, cnd = 2; break;
          case 3: sc[0] = M, sc[1] = N, cnd = 2; break;
          case 4: sc[0] = 1, cnd = 1; break;
          case 5: sc[0] = M, sc[1] = N, cnd = 2; break; /* beta 0 */
          default: break;
          }
          const double alpha = 0.75, beta = cs == 5 ? 0.0 : -1.5;
          em_tensor *a = ot_rand(dt, 2, sa, 100 + cs, -1, 1), *b = ot_rand(dt, 2, sb, 200 + cs, -1, 1);
          em_tensor *c = cnd ? ot_rand(dt, cnd, sc, 300 + cs, -4, 4) : NULL;
          double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), *cv = c ? ts_half_decoded(c) : NULL, want[35];
          for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
              double s = 0;
              for (int64_t k = 0; k < K; k++)
                s += av[ta ? k * M + i : i * K + k] * bv[tb ? j * K + k : k * N + j];
              double cval = 0;
              if (cs == 1) cval = cv[j];
              else if (cs == 2) cval = cv[i];
              else if (cs == 3 || cs == 5) cval = cv[i * N + j];
              else if (cs == 4) cval = cv[0];
              want[i * N + j] = alpha * s + beta * cval;
            }
          const em_attr at[4] = {AI("transA", ta), AI("transB", tb), {.name = "alpha", .type = EM_ATTR_FLOAT, .f = alpha},
                                 {.name = "beta", .type = EM_ATTR_FLOAT, .f = beta}};
          em_tensor *in[3] = {a, b, c};
          char what[96];
          snprintf(what, sizeof what, "gemm %s transA %d transB %d c form %d", em_dtype_name(dt), ta, tb, cs);
          unsigned long before = gemm_calls();
          em_tensor *y = run_fast(em_cuda(0), 0, "gemm", in, c ? 3 : 2, at, 4);
          if (gemm_calls() == before) fail_msg("%s: cuBLAS not called", what);
          ts_expect_one_rounding(y, dt, want, M * N, what);
          em_tensor *y32 = run_fast(em_cuda(0), 1, "gemm", in, c ? 3 : 2, at, 4);
          if (memcmp(em_tensor_data(y), em_tensor_data(y32), (size_t)(M * N) * 2))
            fail_msg("%s: TF32 allowed changed a half product's bits", what);
          free(av), free(bv), free(cv);
          em_tensor_release(a), em_tensor_release(b), em_tensor_release(c), em_tensor_release(y), em_tensor_release(y32);
        }
  }
}

/* matmul with broadcast batch axes (no sum over them: each output is one product), 1-D
 * operands, and the transpose attributes, through the GPU fast mode vs float64. */
static void test_cublas_matmul_broadcast(void **state) {
  (void)state;
  if (!blas_double()) skip();
  struct {
    int na, nb;
    int64_t sa[4], sb[4];
    int tra, trb;
  } cases[] = {
      {4, 3, {2, 1, 3, 20}, {3, 20, 4}, 0, 0},  /* [2,1,3,20] x [3,20,4] -> [2,3,3,4] */
      {2, 3, {3, 20}, {4, 20, 5}, 0, 0},        /* [3,20] x [4,20,5] -> [4,3,5] */
      {3, 2, {4, 3, 20}, {5, 20}, 0, 1},        /* b^T: [4,3,20] x [5,20]^T */
      {1, 2, {20}, {20, 6}, 0, 0},              /* vector x matrix -> [6] */
      {3, 1, {2, 5, 20}, {20}, 0, 0},           /* matrix x vector -> [2,5] */
      {3, 3, {2, 20, 3}, {2, 20, 4}, 1, 0},     /* a^T batched */
  };
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      em_tensor *a = ot_rand(dt, cases[c].na, cases[c].sa, 400 + c, -1, 1), *b = ot_rand(dt, cases[c].nb, cases[c].sb, 500 + c, -1, 1);
      const em_attr at[2] = {AI("transpose_a", cases[c].tra), AI("transpose_b", cases[c].trb)};
      em_tensor *in[2] = {a, b};
      em_tensor *y = run_fast(em_cuda(0), 0, "matmul", in, 2, at, 2);
      /* the reference: the same op on the CPU in float64 (f64 copies of the decoded inputs:
       * exact products and a float64 sum, independent of the half road) */
      double *av = ts_half_decoded(a), *bv = ts_half_decoded(b);
      em_tensor *a64 = ot_tensor(EM_F64, cases[c].na, cases[c].sa, av), *b64 = ot_tensor(EM_F64, cases[c].nb, cases[c].sb, bv);
      em_tensor *in64[2] = {a64, b64};
      em_tensor *r = ot_run1("matmul", in64, 2, at, 2);
      int64_t n = 0;
      double *want = ot_values(r, &n);
      char what[64];
      snprintf(what, sizeof what, "matmul %s broadcast case %zu", em_dtype_name(dt), c);
      assert_int_equal(n, em_tensor_numel(y));
      ts_expect_one_rounding(y, dt, want, n, what);
      free(av), free(bv), free(want);
      em_tensor_release(a), em_tensor_release(b), em_tensor_release(y), em_tensor_release(a64), em_tensor_release(b64);
      em_tensor_release(r);
    }
  }
}

/* ---------------------------------------------------- cuDNN's half road --- */

/* Convolutions and transposed convolutions through the GPU double's fast mode with groups,
 * strides, dilations, asymmetric pads and a bias (blended by cuDNN into the bias copy), and
 * their gradient ops, against the f64 op on the CPU fed the decoded half inputs (exact
 * products, a float64 sum): within one rounding. */
static void test_cudnn_half_sweep(void **state) {
  (void)state;
  if (!ts_use_gpu()) skip();
  struct {
    const char *op;
    int64_t sx[4], sw[4];
    int64_t pads[4], strides[2], dil[2], group;
    int bias;
  } cases[] = {
      {"convolution", {2, 4, 9, 8}, {6, 2, 3, 3}, {1, 0, 2, 1}, {2, 1}, {1, 2}, 2, 1},
      {"convolution", {1, 6, 7, 7}, {6, 1, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 6, 0},   /* depthwise */
      {"convolution", {3, 3, 6, 5}, {4, 3, 1, 1}, {0, 0, 0, 0}, {1, 1}, {1, 1}, 1, 1},   /* 1x1 */
      {"convolution_transpose", {2, 4, 5, 4}, {4, 3, 3, 3}, {1, 1, 0, 0}, {2, 2}, {1, 1}, 1, 1},
      {"convolution_transpose", {1, 4, 4, 5}, {4, 1, 2, 3}, {0, 1, 0, 1}, {1, 2}, {2, 1}, 2, 1},
  };
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      int64_t co = !strcmp(cases[c].op, "convolution") ? cases[c].sw[0] : cases[c].sw[1] * cases[c].group;
      em_tensor *x = ot_rand(dt, 4, cases[c].sx, 600 + c, -1, 1), *w = ot_rand(dt, 4, cases[c].sw, 700 + c, -1, 1);
      em_tensor *b = ot_rand(dt, 1, &co, 800 + c, -2, 2);
      const em_attr at[4] = {{.name = "pads", .type = EM_ATTR_INTS, .ints = cases[c].pads, .n = 4},
                             {.name = "strides", .type = EM_ATTR_INTS, .ints = cases[c].strides, .n = 2},
                             {.name = "dilations", .type = EM_ATTR_INTS, .ints = cases[c].dil, .n = 2},
                             AI("group", cases[c].group)};
      em_tensor *in[3] = {x, w, b};
      int n_in = cases[c].bias ? 3 : 2;
      em_tensor *y = run_fast(em_cuda(0), 0, cases[c].op, in, n_in, at, 4);
      double *xv = ts_half_decoded(x), *wv = ts_half_decoded(w), *bv = ts_half_decoded(b);
      em_tensor *x64 = ot_tensor(EM_F64, 4, cases[c].sx, xv), *w64 = ot_tensor(EM_F64, 4, cases[c].sw, wv);
      em_tensor *b64 = ot_tensor(EM_F64, 1, &co, bv), *in64[3] = {x64, w64, b64};
      em_tensor *r = ot_run1(cases[c].op, in64, n_in, at, 4);
      int64_t n = 0;
      double *want = ot_values(r, &n);
      char what[96];
      snprintf(what, sizeof what, "%s %s case %zu on the GPU (fast)", cases[c].op, em_dtype_name(dt), c);
      assert_int_equal(n, em_tensor_numel(y));
      ts_expect_one_rounding(y, dt, want, n, what);
      free(want);
      em_tensor_release(r);
      /* the gradient ops (input, weight) */
      const int64_t *sy = em_tensor_shape(y);
      em_tensor *dy = ot_rand(dt, 4, sy, 900 + c, -1, 1);
      double *dv = ts_half_decoded(dy);
      em_tensor *dy64 = ot_tensor(EM_F64, 4, sy, dv);
      const int tr = strcmp(cases[c].op, "convolution") != 0;
      em_attr gat[5] = {at[0], at[1], at[2], at[3], AI("transpose", tr)};
      for (int which = 0; which < 2; which++) {
        const char *gop = which ? "_conv_grad_weight" : "_conv_grad_input";
        em_tensor *gin[3] = {dy, w, x}, *gin64[3] = {dy64, w64, x64};
        if (which) gin[0] = x, gin[1] = dy, gin[2] = w, gin64[0] = x64, gin64[1] = dy64, gin64[2] = w64;
        em_tensor *g = run_fast(em_cuda(0), 0, gop, gin, 3, gat, 5), *gr = ot_run1(gop, gin64, 3, gat, 5);
        double *gw = ot_values(gr, &n);
        snprintf(what, sizeof what, "%s of %s %s case %zu on the GPU (fast)", gop, cases[c].op, em_dtype_name(dt), c);
        ts_expect_one_rounding(g, dt, gw, n, what);
        free(gw);
        em_tensor_release(g), em_tensor_release(gr);
      }
      free(xv), free(wv), free(bv), free(dv);
      em_tensor_release(x), em_tensor_release(w), em_tensor_release(b), em_tensor_release(y), em_tensor_release(dy);
      em_tensor_release(x64), em_tensor_release(w64), em_tensor_release(b64), em_tensor_release(dy64);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_autocast_after_executor),
      cmocka_unit_test(test_cast_specials),
      cmocka_unit_test(test_product_specials),
      cmocka_unit_test(test_autocast_conv_chain),
      cmocka_unit_test(test_autocast_clone_describe),
      cmocka_unit_test(test_autocast_gru_onnx),
      cmocka_unit_test(test_cublas_deep_half_one_rounding),
      cmocka_unit_test(test_cublas_gemm_sweep),
      cmocka_unit_test(test_cublas_matmul_broadcast),
      cmocka_unit_test(test_cudnn_half_sweep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
