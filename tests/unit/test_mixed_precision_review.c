/* Adversarial tests of mixed precision (engine/half.c, engine/autocast.c): graphs the autocast
 * pass might corrupt (a live executor, gradients taken first, the same value on both sides of a
 * product, a convolution without bias, a transposed convolution with one, dynamic batch, an
 * unrolled GRU exported to ONNX), and half results of special values (inf, NaN, -0, f16
 * overflow, subnormals, rounding ties) against this file's own round-to-nearest-even encoders,
 * on the CPU and the GPU double in both modes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/layers.h"
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_autocast_after_executor),
      cmocka_unit_test(test_cast_specials),
      cmocka_unit_test(test_product_specials),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
