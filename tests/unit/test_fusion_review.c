/* The CPU executor's fusions (engine/exec.c plan_fusions, op.h em_post_op, ops/conv.c,
 * ops/unary.c em_post_apply) under cases test_fusion does not build: fused values that are
 * outputs or read by several ops, values that must not fuse (mul(y, y), a fetched sigmoid,
 * f64, convolution_transpose, two tails on one value), every form of clip's bounds, NaNs and
 * infinities through each tail, em_exec_run_into with accumulation, a dynamic batch, mode
 * switches on one executor, two executors on two threads, 1-D / 3-D / one-channel
 * convolutions, a swish gradient, a GPU executor (the libcuda double). Expected values come
 * from tests/support/conv_reference (a float64 convolution) and the tails written here; in
 * portable mode a fused graph must give the bits of the same graph with the convolution's
 * output also fetched (which forbids the fusion). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_reference.h"
#include "op_testkit.h"

#define CHECK(call)                                                                                                    \
  do {                                                                                                                 \
    em_status s_ = (call);                                                                                             \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                                                                \
  } while (0)

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* ------------------------------------------------------------ builders --- */

enum tail { T_RELU, T_CLIP, T_SWISH };

/* A graph with input x and y = convolution(x, w[, b]) (or convolution_transpose) with random
 * f32-representable weights kept here as floats for the reference. */
typedef struct cnet {
  em_graph *g;
  em_var x, w, b, y;
  ts_conv c;
  em_dtype dt;
  float *wf, *bf; /* bf NULL: no bias */
  int64_t xs[5], ws[5], ys[5];
  int nd;
} cnet;

static void cnet_init(cnet *p, const ts_conv *c, em_dtype dt, int bias, int dyn_batch, const char *op,
                      uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->c = *c, p->dt = dt, p->nd = 2 + c->nsp;
  ts_conv_shapes(c, p->xs, p->ws, p->ys);
  CHECK(em_graph_create(&p->g));
  int64_t xdecl[5];
  memcpy(xdecl, p->xs, sizeof xdecl);
  if (dyn_batch) xdecl[0] = -1;
  CHECK(em_input(p->g, "x", dt, p->nd, xdecl, &p->x));
  int64_t wshape[5];
  memcpy(wshape, p->ws, sizeof wshape);
  if (!strcmp(op, "convolution_transpose")) wshape[0] = c->c, wshape[1] = c->m / c->g; /* [C, M/g, k...] */
  const int64_t nw = ts_prod(wshape, p->nd);
  em_tensor *w = ot_rand(EM_F32, p->nd, wshape, seed, -0.5, 0.5), *wd = NULL;
  p->wf = malloc(sizeof(float) * (size_t)nw);
  memcpy(p->wf, em_tensor_data(w), sizeof(float) * (size_t)nw);
  if (dt == EM_F64) {
    double *v = ot_values(w, NULL);
    wd = ot_tensor(EM_F64, p->nd, wshape, v);
    free(v);
  }
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = wd ? wd : w};
  CHECK(em_parameter(p->g, "w", dt, p->nd, wshape, &iw, &p->w));
  em_tensor_release(w), em_tensor_release(wd);
  em_var in[3] = {p->x, p->w, -1};
  if (bias) {
    int64_t bs[1] = {c->m};
    em_tensor *b32 = ot_rand(EM_F32, 1, bs, seed + 1, -0.5, 0.5);
    p->bf = malloc(sizeof(float) * (size_t)c->m);
    memcpy(p->bf, em_tensor_data(b32), sizeof(float) * (size_t)c->m);
    double *bv = ot_values(b32, NULL);
    em_tensor *b = ot_tensor(dt, 1, bs, bv);
    free(bv);
    em_tensor_release(b32);
    em_init ib = {.kind = EM_INIT_FROM_DATA, .data = b};
    CHECK(em_parameter(p->g, "b", dt, 1, bs, &ib, &p->b));
    em_tensor_release(b);
    in[2] = p->b;
  }
  int64_t pads[6];
  for (int i = 0; i < c->nsp; i++) pads[i] = c->pb[i], pads[c->nsp + i] = c->pe[i];
  em_attr at[4] = {AIS("strides", c->s, c->nsp), AIS("dilations", c->d, c->nsp), AIS("pads", pads, 2 * c->nsp),
                   AI("group", c->g)};
  CHECK(em_apply(p->g, op, in, bias ? 3 : 2, at, 4, &p->y, 1));
}

static void cnet_free(cnet *p) {
  em_graph_free(p->g);
  free(p->wf), free(p->bf);
}

static em_var un(em_graph *g, const char *op, em_var x, const em_attr *at, int n_at) {
  em_var y;
  CHECK(em_apply(g, op, &x, 1, at, n_at, &y, 1));
  return y;
}

static em_var bin(em_graph *g, const char *op, em_var a, em_var b) {
  em_var y, in[2] = {a, b};
  CHECK(em_apply(g, op, in, 2, NULL, 0, &y, 1));
  return y;
}

/* x * sigmoid(x) (ys: x first) */
static em_var swish(em_graph *g, em_var x, int ys) {
  em_var s = un(g, "sigmoid", x, NULL, 0);
  return ys ? bin(g, "mul", x, s) : bin(g, "mul", s, x);
}

static int n_fused(const em_exec *e) {
  char buf[16384];
  em_exec_describe(e, buf, sizeof buf);
  int n = 0;
  for (const char *q = buf; (q = strstr(q, "[fused into step")); q++) n++;
  return n;
}

static em_exec *mk_exec(cnet *p, const em_var *outs, int n, em_mode mode) {
  em_exec *e = NULL;
  CHECK(em_exec_create(p->g, outs, n, em_cpu(), &e));
  CHECK(em_exec_set_mode(e, mode));
  return e;
}

static void run(em_exec *e, em_var x, em_tensor *xt, em_tensor **outs) {
  em_feed f = {x, xt};
  CHECK(em_exec_run(e, &f, 1, outs));
}

static em_tensor *input(const cnet *p, int64_t batch, uint64_t seed) {
  int64_t xs[5];
  memcpy(xs, p->xs, sizeof xs);
  if (batch > 0) xs[0] = batch;
  if (batch < 0) xs[0] = 0; /* an empty batch */
  return ot_rand(EM_F32, p->nd, xs, seed, -2.0, 2.0);
}

/* The f64 reference of y = conv(x) for the batch of x. */
static double *ref_conv(const cnet *p, const em_tensor *x, int64_t *n) {
  ts_conv c = p->c;
  c.n = em_tensor_shape(x)[0];
  int64_t nx;
  double *xd = ot_values(x, &nx);
  float *xf = malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  for (int64_t i = 0; i < nx; i++) xf[i] = (float)xd[i];
  double *y = ts_conv_reference(&c, xf, p->wf, p->bf);
  int64_t xs[5], ws[5], ys[5];
  ts_conv_shapes(&c, xs, ws, ys);
  *n = ts_prod(ys, p->nd);
  free(xd), free(xf);
  return y;
}

static double ref_clip(double v, double lo, double hi) { return isnan(v) ? v : v < lo ? lo : v > hi ? hi : v; }
static double ref_tail(enum tail t, double v, double lo, double hi) {
  switch (t) {
  case T_RELU: return isnan(v) ? v : v < 0 ? 0 : v;
  case T_CLIP: return ref_clip(v, lo, hi);
  default: return v / (1.0 + exp(-v));
  }
}

static double *ref_with_tail(const cnet *p, const em_tensor *x, enum tail t, double lo, double hi, int64_t *n) {
  double *y = ref_conv(p, x, n);
  for (int64_t i = 0; i < *n; i++) y[i] = ref_tail(t, y[i], lo, hi);
  return y;
}

static void same_bits(const em_tensor *a, const em_tensor *b, const char *what) {
  assert_int_equal(em_tensor_numel(a), em_tensor_numel(b));
  assert_int_equal(em_tensor_dtype(a), em_tensor_dtype(b));
  const size_t bytes = em_dtype_size(em_tensor_dtype(a)) * (size_t)em_tensor_numel(a);
  if (memcmp(em_tensor_data(a), em_tensor_data(b), bytes)) {
    int64_t n;
    double *av = ot_values(a, &n), *bv = ot_values(b, NULL);
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&av[i], &bv[i], sizeof(double)))
        fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, av[i], bv[i]);
    fail_msg("%s: bits differ", what);
  }
}

static ts_conv conv3x3(void) {
  return (ts_conv){.nsp = 2, .n = 2, .c = 6, .m = 8, .g = 1, .in = {7, 9}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1},
                   .pb = {1, 1}, .pe = {1, 1}};
}

/* ================================================================ tests === */

/* The fused op's value is an executor output and is read by other ops too: still fused (only
 * the convolution's own output matters), and every output right. */
static void test_tail_value_is_output_and_shared(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    cnet p;
    const ts_conv c = conv3x3();
    cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 11 + (uint64_t)t);
    em_var r = t == 0 ? un(p.g, "relu", p.y, NULL, 0) : swish(p.g, p.y, 1);
    em_var s = un(p.g, "sigmoid", r, NULL, 0), d = bin(p.g, "add", r, r);
    em_var outs[3] = {r, s, d};
    em_exec *e = mk_exec(&p, outs, 3, EM_MODE_FAST);
    assert_int_equal(n_fused(e), t == 0 ? 1 : 2);
    em_tensor *x = input(&p, 0, 12), *o[3] = {0};
    run(e, p.x, x, o);
    int64_t n;
    double *want = ref_with_tail(&p, x, t == 0 ? T_RELU : T_SWISH, 0, 0, &n);
    ot_expect_values(o[0], want, n, 2e-5, "fused value");
    for (int64_t i = 0; i < n; i++) want[i] = 1.0 / (1.0 + exp(-want[i]));
    ot_expect_values(o[1], want, n, 2e-5, "sigmoid of the fused value");
    double *r2 = ot_values(o[0], NULL);
    for (int64_t i = 0; i < n; i++) r2[i] *= 2;
    ot_expect_values(o[2], r2, n, 0, "fused value doubled");
    free(want), free(r2);
    for (int i = 0; i < 3; i++) em_tensor_release(o[i]);
    em_tensor_release(x);
    em_exec_free(e);
    cnet_free(&p);
  }
}

/* Shapes that must not fuse, each with right values: mul(y, y); sigmoid(y) fetched beside
 * the product; two tails on y; an f64 convolution; convolution_transpose. */
static void test_not_fused(void **state) {
  (void)state;
  const ts_conv c = conv3x3();
  for (int variant = 0; variant < 4; variant++) {
    cnet p;
    cnet_init(&p, &c, variant == 3 ? EM_F64 : EM_F32, 1, 0, "convolution", 20 + (uint64_t)variant);
    em_var outs[2];
    int n_out = 1;
    if (variant == 0) outs[0] = bin(p.g, "mul", p.y, p.y);
    if (variant == 1) {
      em_var s = un(p.g, "sigmoid", p.y, NULL, 0);
      outs[0] = bin(p.g, "mul", p.y, s), outs[1] = s, n_out = 2;
    }
    if (variant == 2) outs[0] = un(p.g, "relu", p.y, NULL, 0), outs[1] = un(p.g, "neg", p.y, NULL, 0), n_out = 2;
    if (variant == 3) outs[0] = un(p.g, "relu", p.y, NULL, 0);
    em_exec *e = mk_exec(&p, outs, n_out, EM_MODE_FAST);
    if (n_fused(e)) fail_msg("variant %d: fused", variant);
    em_tensor *x = input(&p, 0, 21), *xx = x, *o[2] = {0};
    if (variant == 3) {
      double *v = ot_values(x, NULL);
      xx = ot_tensor(EM_F64, p.nd, p.xs, v);
      free(v);
    }
    run(e, p.x, xx, o);
    int64_t n;
    double *y = ref_conv(&p, x, &n), *w0 = malloc(sizeof(double) * (size_t)n), *w1 = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      const double v = y[i], s = 1.0 / (1.0 + exp(-v));
      w0[i] = variant == 0 ? v * v : variant == 1 ? v * s : v < 0 ? 0 : v;
      w1[i] = variant == 1 ? s : -v;
    }
    ot_expect_values(o[0], w0, n, variant == 3 ? 1e-12 : 2e-5, "output 0");
    if (n_out == 2) ot_expect_values(o[1], w1, n, 2e-5, "output 1");
    free(y), free(w0), free(w1);
    for (int i = 0; i < n_out; i++) em_tensor_release(o[i]);
    if (xx != x) em_tensor_release(xx);
    em_tensor_release(x);
    em_exec_free(e);
    cnet_free(&p);
  }
  /* convolution_transpose: not fused; its relu equals relu of the fetched transpose's output */
  ts_conv t = {.nsp = 2, .n = 2, .c = 4, .m = 6, .g = 1, .in = {5, 6}, .k = {3, 3}, .s = {2, 2}, .d = {1, 1}};
  cnet p;
  cnet_init(&p, &t, EM_F32, 1, 0, "convolution_transpose", 29);
  em_var r = un(p.g, "relu", p.y, NULL, 0), both[2] = {r, p.y};
  em_exec *e = mk_exec(&p, &r, 1, EM_MODE_FAST), *e2 = mk_exec(&p, both, 2, EM_MODE_FAST);
  if (n_fused(e)) fail_msg("convolution_transpose fused");
  em_tensor *x = input(&p, 0, 30), *a = NULL, *o[2] = {0};
  run(e, p.x, x, &a), run(e2, p.x, x, o);
  int64_t n;
  double *yv = ot_values(o[1], &n);
  for (int64_t i = 0; i < n; i++) yv[i] = yv[i] < 0 ? 0 : yv[i];
  ot_expect_values(a, yv, n, 0, "relu(convolution_transpose)");
  free(yv);
  em_tensor_release(a), em_tensor_release(o[0]), em_tensor_release(o[1]), em_tensor_release(x);
  em_exec_free(e), em_exec_free(e2);
  cnet_free(&p);
}

/* clip's bounds in every form: min only, max only, int attributes, infinite bounds, min == max,
 * none. Fast fused against the reference; portable fused bits equal the unfused graph's. */
static void test_clip_bound_forms(void **state) {
  (void)state;
  const em_attr forms[][2] = {
    {AF("min", -0.3), {0}},
    {AF("max", 0.2), {0}},
    {AI("min", 0), AI("max", 1)},
    {AF("min", -INFINITY), AF("max", INFINITY)},
    {AF("min", 0.1), AF("max", 0.1)},
    {AF("min", -1e30), AF("max", 0.7)},
  };
  const int n_at[] = {1, 1, 2, 2, 2, 2};
  const double lo[] = {-INFINITY, -INFINITY, 0, -INFINITY, 0.1, -1e30}, hi[] = {INFINITY, 0.2, 1, INFINITY, 0.1, 0.7};
  double lo_[6], hi_[6];
  memcpy(lo_, lo, sizeof lo), memcpy(hi_, hi, sizeof hi);
  lo_[0] = -0.3;
  for (int f = 0; f < 7; f++) {
    cnet p;
    const ts_conv c = conv3x3();
    cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 40 + (uint64_t)f);
    em_var out = un(p.g, "clip", p.y, f < 6 ? forms[f] : NULL, f < 6 ? n_at[f] : 0), both[2] = {out, p.y};
    const double l = f < 6 ? (double)(float)lo_[f] : -INFINITY, h = f < 6 ? (double)(float)hi_[f] : INFINITY;
    em_tensor *x = input(&p, 0, 41);
    int64_t n;
    double *want = ref_with_tail(&p, x, T_CLIP, l, h, &n);
    em_exec *fast = mk_exec(&p, &out, 1, EM_MODE_FAST), *port = mk_exec(&p, &out, 1, EM_MODE_PORTABLE),
            *plain = mk_exec(&p, both, 2, EM_MODE_PORTABLE);
    assert_int_equal(n_fused(fast), 1);
    assert_int_equal(n_fused(plain), 0);
    em_tensor *a = NULL, *b = NULL, *o[2] = {0};
    run(fast, p.x, x, &a), run(port, p.x, x, &b), run(plain, p.x, x, o);
    char what[64];
    snprintf(what, sizeof what, "clip form %d, fast fused", f);
    ot_expect_values(a, want, n, 2e-5, what);
    snprintf(what, sizeof what, "clip form %d, portable fused vs unfused", f);
    same_bits(b, o[0], what);
    free(want);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(o[0]), em_tensor_release(o[1]);
    em_tensor_release(x);
    em_exec_free(fast), em_exec_free(port), em_exec_free(plain);
    cnet_free(&p);
  }
}

/* NaN, infinities, signed zeros, huge and tiny values through each tail: a depthwise 1x1
 * convolution with unit weights makes y = x exactly, so each tail's input is known. Fused and
 * unfused agree (bits for relu and clip; NaN, infinities and close values for x * sigmoid(x)),
 * and both agree with the tails' definitions, in fast mode, with EMBER_CHANNELS_LAST=0, and in
 * portable mode. */
static void test_special_values(void **state) {
  (void)state;
  const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 100.f, -100.f,
                           1e-40f, -1e-40f, 88.7f, -88.7f, 0.1f, -0.25f, 0.4f, 3.f, -3.f, 0.3f};
  const int ns = (int)(sizeof special / sizeof special[0]);
  const ts_conv c = {.nsp = 2, .n = 2, .c = 16, .m = 16, .g = 16, .in = {5, 4}, .k = {1, 1}, .s = {1, 1}, .d = {1, 1}};
  for (int env = 0; env < 3; env++)
    for (int t = T_RELU; t <= T_SWISH; t++)
      for (int order = 0; order < (t == T_SWISH ? 2 : 1); order++) {
        if (env == 1) setenv("EMBER_CHANNELS_LAST", "0", 1);
        cnet p;
        cnet_init(&p, &c, EM_F32, 0, 0, "convolution", 50);
        const int64_t nw = ts_prod(p.ws, 4);
        for (int64_t i = 0; i < nw; i++) p.wf[i] = 1.0f;
        em_tensor *ones = ot_rand(EM_F32, 4, p.ws, 1, 1.0, 1.0);
        for (int64_t i = 0; i < nw; i++) ((float *)em_tensor_data(ones))[i] = 1.0f;
        CHECK(em_parameter_set(p.g, p.w, ones));
        em_tensor_release(ones);
        em_attr ca[2] = {AF("min", -0.25), AF("max", 0.4)};
        em_var out = t == T_RELU ? un(p.g, "relu", p.y, NULL, 0)
                     : t == T_CLIP ? un(p.g, "clip", p.y, ca, 2)
                                   : swish(p.g, p.y, order);
        em_var both[2] = {out, p.y};
        const em_mode mode = env == 2 ? EM_MODE_PORTABLE : EM_MODE_FAST;
        em_exec *fused = mk_exec(&p, &out, 1, mode), *plain = mk_exec(&p, both, 2, mode);
        if (env == 1) unsetenv("EMBER_CHANNELS_LAST");
        assert_true(n_fused(fused) > 0);
        em_tensor *x = input(&p, 0, 51);
        float *xf = em_tensor_data(x);
        const int64_t nx = em_tensor_numel(x);
        for (int64_t i = 0; i < nx; i++) xf[i] = special[(i * 7) % ns];
        em_tensor *a = NULL, *o[2] = {0};
        run(fused, p.x, x, &a), run(plain, p.x, x, o);
        const float *av = em_tensor_data(a), *bv = em_tensor_data(o[0]), *yv = em_tensor_data(o[1]);
        for (int64_t i = 0; i < nx; i++) {
          if (yv[i] != xf[i] && !(isnan(yv[i]) && isnan(xf[i]))) /* -0 may come out as 0 */
            fail_msg("the unit convolution changed %g into %g", (double)xf[i], (double)yv[i]);
          const double want = ref_tail((enum tail)t, (double)yv[i], -0.25, 0.4);
          const char *which = env == 0 ? "fast" : env == 1 ? "fast, EMBER_CHANNELS_LAST=0" : "portable";
          for (int k = 0; k < 2; k++) {
            const double got = k ? bv[i] : av[i];
            const int ok = isnan(want) ? isnan(got)
                           : isinf(want) ? got == want
                                         : fabs(got - want) <= 1e-5 * fabs(want) + 1e-30; /* oneDNN flushes x sigmoid(x) below -87 to -0 */
            if (!ok)
              fail_msg("%s, tail %d (order %d), x = %g: %s gives %g, expected %g", which, t, order, (double)xf[i],
                       k ? "unfused" : "fused", got, want);
          }
          if ((t != T_SWISH || env == 2) && memcmp(&av[i], &bv[i], 4) && !(isnan(av[i]) && isnan(bv[i])))
            fail_msg("%s, tail %d, x = %g: fused %g, unfused %g (bits differ)", which, t, (double)xf[i],
                     (double)av[i], (double)bv[i]);
        }
        em_tensor_release(a), em_tensor_release(o[0]), em_tensor_release(o[1]), em_tensor_release(x);
        em_exec_free(fused), em_exec_free(plain);
        cnet_free(&p);
      }
}

/* em_exec_run_into on a fused output: a store, then an accumulation gives twice the store. */
static void test_run_into_accumulate(void **state) {
  (void)state;
  for (int t = 0; t < 2; t++) {
    cnet p;
    const ts_conv c = conv3x3();
    cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 60 + (uint64_t)t);
    em_var out = t ? swish(p.g, p.y, 0) : un(p.g, "relu", p.y, NULL, 0);
    em_exec *e = mk_exec(&p, &out, 1, EM_MODE_FAST);
    assert_true(n_fused(e) > 0);
    em_tensor *x = input(&p, 0, 61), *dst = NULL;
    CHECK(em_tensor_zeros(em_cpu(), EM_F32, 4, p.ys, &dst));
    em_feed f = {p.x, x};
    CHECK(em_exec_run_into(e, &f, 1, &dst, EM_RUN_STORE));
    int64_t n;
    double *want = ref_with_tail(&p, x, t ? T_SWISH : T_RELU, 0, 0, &n);
    ot_expect_values(dst, want, n, 2e-5, "stored");
    double *once = ot_values(dst, NULL);
    CHECK(em_exec_run_into(e, &f, 1, &dst, EM_RUN_ACCUMULATE));
    for (int64_t i = 0; i < n; i++) once[i] *= 2;
    ot_expect_values(dst, once, n, 0, "accumulated");
    free(want), free(once);
    em_tensor_release(dst), em_tensor_release(x);
    em_exec_free(e);
    cnet_free(&p);
  }
}

/* A dynamic batch: one fused executor run on batches 3, 1, 0 (empty), 2, 3. */
static void test_dynamic_batch(void **state) {
  (void)state;
  const int64_t batches[] = {3, 1, 0, 2, 3};
  for (int t = 0; t < 2; t++) {
    cnet p;
    const ts_conv c = conv3x3();
    cnet_init(&p, &c, EM_F32, 1, 1, "convolution", 70 + (uint64_t)t);
    em_var out = t ? swish(p.g, p.y, 1) : un(p.g, "relu", p.y, NULL, 0);
    em_exec *e = mk_exec(&p, &out, 1, EM_MODE_FAST);
    assert_true(n_fused(e) > 0);
    for (int k = 0; k < 5; k++) {
      em_tensor *x = input(&p, batches[k] ? batches[k] : -1, 71 + (uint64_t)k), *o = NULL;
      run(e, p.x, x, &o);
      assert_int_equal(em_tensor_shape(o)[0], batches[k]);
      int64_t n;
      double *want = ref_with_tail(&p, x, t ? T_SWISH : T_RELU, 0, 0, &n);
      ot_expect_values(o, want, n, 2e-5, "dynamic batch");
      free(want);
      em_tensor_release(o), em_tensor_release(x);
    }
    em_exec_free(e);
    cnet_free(&p);
  }
}

/* Fast -> portable -> fast on one fused executor: the portable run gives the unfused portable
 * graph's bits, the second fast run the first one's. */
static void test_mode_switches(void **state) {
  (void)state;
  for (int t = 0; t < 3; t++) {
    cnet p;
    const ts_conv c = conv3x3();
    cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 80 + (uint64_t)t);
    em_attr ca[2] = {AF("min", -0.1), AF("max", 0.3)};
    em_var out = t == 2 ? swish(p.g, p.y, 1) : t ? un(p.g, "clip", p.y, ca, 2) : un(p.g, "relu", p.y, NULL, 0);
    em_var both[2] = {out, p.y};
    em_exec *e = mk_exec(&p, &out, 1, EM_MODE_FAST), *plain = mk_exec(&p, both, 2, EM_MODE_PORTABLE);
    em_tensor *x = input(&p, 0, 81), *f1 = NULL, *pt = NULL, *f2 = NULL, *o[2] = {0};
    run(e, p.x, x, &f1);
    CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
    run(e, p.x, x, &pt);
    CHECK(em_exec_set_mode(e, EM_MODE_FAST));
    run(e, p.x, x, &f2);
    run(plain, p.x, x, o);
    int64_t n;
    double *want = ref_with_tail(&p, x, t == 2 ? T_SWISH : t ? T_CLIP : T_RELU, (float)-0.1, (float)0.3, &n);
    ot_expect_values(f1, want, n, 2e-5, "fast");
    ot_expect_values(pt, want, n, 2e-5, "portable");
    same_bits(pt, o[0], "portable after fast vs unfused portable");
    same_bits(f1, f2, "fast, portable, fast again");
    free(want);
    em_tensor_release(f1), em_tensor_release(pt), em_tensor_release(f2), em_tensor_release(o[0]),
        em_tensor_release(o[1]), em_tensor_release(x);
    em_exec_free(e), em_exec_free(plain);
    cnet_free(&p);
  }
}

/* A chain whose fused values live channels-last in fast mode (conv -> relu -> conv ->
 * x * sigmoid(x) -> conv -> clip): switched fast -> portable -> fast on one executor, the
 * portable run gives the unfused portable graph's bits, each fast run (1 to 3 threads) the
 * same bits, and both the double reference's values. */
static void test_mode_switches_channels_last_chain(void **state) {
  (void)state;
  const ts_conv c1 = {.nsp = 2, .n = 2, .c = 3, .m = 8, .g = 1, .in = {6, 7}, .k = {3, 3}, .s = {1, 1},
                      .d = {1, 1}, .pb = {1, 1}, .pe = {1, 1}};
  /* then a depthwise 3x3 (8 channels, pads 1) and a pointwise 8 -> 5 */
  cnet p;
  cnet_init(&p, &c1, EM_F32, 1, 0, "convolution", 140);
  /* the next two convolutions, built by hand on the same graph */
  em_tensor *w2 = ot_rand(EM_F32, 4, (int64_t[]){8, 1, 3, 3}, 141, -0.5, 0.5);
  em_tensor *w3 = ot_rand(EM_F32, 4, (int64_t[]){5, 8, 1, 1}, 142, -0.5, 0.5);
  em_var pw2, pw3, y2, y3, r1 = un(p.g, "relu", p.y, NULL, 0);
  em_init i2 = {.kind = EM_INIT_FROM_DATA, .data = w2}, i3 = {.kind = EM_INIT_FROM_DATA, .data = w3};
  CHECK(em_parameter(p.g, "w2", EM_F32, 4, (int64_t[]){8, 1, 3, 3}, &i2, &pw2));
  CHECK(em_parameter(p.g, "w3", EM_F32, 4, (int64_t[]){5, 8, 1, 1}, &i3, &pw3));
  int64_t pads[4] = {1, 1, 1, 1};
  em_attr a2[2] = {AIS("pads", pads, 4), AI("group", 8)};
  em_var in2[2] = {r1, pw2};
  CHECK(em_apply(p.g, "convolution", in2, 2, a2, 2, &y2, 1));
  em_var s2 = swish(p.g, y2, 1), in3[2] = {s2, pw3};
  CHECK(em_apply(p.g, "convolution", in3, 2, NULL, 0, &y3, 1));
  em_attr ca[2] = {AF("min", -0.2), AF("max", 0.3)};
  em_var out = un(p.g, "clip", y3, ca, 2), all[4] = {out, p.y, y2, y3};
  em_exec *e = mk_exec(&p, &out, 1, EM_MODE_FAST), *plain = mk_exec(&p, all, 4, EM_MODE_PORTABLE);
  assert_int_equal(n_fused(e), 4);
  assert_int_equal(n_fused(plain), 0);
  em_tensor *x = input(&p, 0, 143), *f1 = NULL, *pt = NULL, *f2 = NULL, *o[4] = {0};
  run(e, p.x, x, &f1);
  em_exec_stats st;
  CHECK(em_exec_stats_get(e, &st));
  const int cl_steps = st.channels_last_steps;
  if (cl_steps < 1) fail_msg("the chain kept no value channels-last");
  for (int threads = 1; threads <= 3; threads++) { /* every thread count gives the same bits */
    CHECK(em_set_num_threads(threads));
    em_tensor *t = NULL;
    run(e, p.x, x, &t);
    char what[48];
    snprintf(what, sizeof what, "fast chain on %d threads", threads);
    same_bits(t, f1, what);
    em_tensor_release(t);
  }
  CHECK(em_set_num_threads(0));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  run(e, p.x, x, &pt);
  CHECK(em_exec_stats_get(e, &st));
  assert_int_equal(st.channels_last_steps, 0);
  CHECK(em_exec_set_mode(e, EM_MODE_FAST));
  run(e, p.x, x, &f2);
  CHECK(em_exec_stats_get(e, &st));
  assert_int_equal(st.channels_last_steps, cl_steps);
  run(plain, p.x, x, o);
  same_bits(pt, o[0], "portable after fast vs unfused portable");
  same_bits(f1, f2, "fast, portable, fast again");
  /* the double reference: three convolutions and the tails */
  int64_t n1;
  double *a = ref_conv(&p, x, &n1);
  for (int64_t i = 0; i < n1; i++) a[i] = a[i] < 0 ? 0 : a[i];
  const float *w2f = em_tensor_data(w2), *w3f = em_tensor_data(w3);
  const int64_t H = 6, W = 7, N = 2;
  double *b = calloc((size_t)(N * 8 * H * W), sizeof(double)), *d = calloc((size_t)(N * 5 * H * W), sizeof(double));
  for (int64_t nb = 0; nb < N; nb++)
    for (int64_t ch = 0; ch < 8; ch++)
      for (int64_t i = 0; i < H; i++)
        for (int64_t j = 0; j < W; j++) {
          double acc = 0;
          for (int64_t kh = 0; kh < 3; kh++)
            for (int64_t kw = 0; kw < 3; kw++) {
              const int64_t ih = i + kh - 1, iw = j + kw - 1;
              if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                acc += (double)w2f[ch * 9 + kh * 3 + kw] * a[((nb * 8 + ch) * H + ih) * W + iw];
            }
          b[((nb * 8 + ch) * H + i) * W + j] = acc / (1 + exp(-acc));
        }
  for (int64_t nb = 0; nb < N; nb++)
    for (int64_t m = 0; m < 5; m++)
      for (int64_t px = 0; px < H * W; px++) {
        double acc = 0;
        for (int64_t ch = 0; ch < 8; ch++) acc += (double)w3f[m * 8 + ch] * b[(nb * 8 + ch) * H * W + px];
        d[(nb * 5 + m) * H * W + px] = ref_clip(acc, (float)-0.2, (float)0.3);
      }
  ot_expect_values(f1, d, N * 5 * H * W, 1e-4, "fast chain");
  ot_expect_values(pt, d, N * 5 * H * W, 1e-4, "portable chain");
  free(a), free(b), free(d);
  em_tensor_release(f1), em_tensor_release(pt), em_tensor_release(f2), em_tensor_release(x);
  for (int i = 0; i < 4; i++) em_tensor_release(o[i]);
  em_tensor_release(w2), em_tensor_release(w3);
  em_exec_free(e), em_exec_free(plain);
  cnet_free(&p);
}

/* Two executors of one graph (fast and portable, each with fusions) run on two threads at
 * once: every run gives the bits that a run alone gave. */
typedef struct worker {
  em_exec *e;
  em_var x;
  em_tensor *in, *want;
  int bad;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  for (int k = 0; k < 15; k++) {
    em_feed f = {w->x, w->in};
    em_tensor *o = NULL;
    if (em_exec_run(w->e, &f, 1, &o) ||
        memcmp(em_tensor_data(o), em_tensor_data(w->want), sizeof(float) * (size_t)em_tensor_numel(o)))
      w->bad++;
    em_tensor_release(o);
  }
  return NULL;
}

static void test_two_executors_two_threads(void **state) {
  (void)state;
  cnet p;
  const ts_conv c = conv3x3();
  cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 90);
  em_var out = swish(p.g, un(p.g, "relu", p.y, NULL, 0), 1);
  em_var outs[1] = {out};
  worker w[2];
  for (int i = 0; i < 2; i++) {
    w[i].e = mk_exec(&p, outs, 1, i ? EM_MODE_PORTABLE : EM_MODE_FAST);
    assert_true(n_fused(w[i].e) > 0);
    w[i].x = p.x, w[i].in = input(&p, 0, 91), w[i].bad = 0;
    run(w[i].e, p.x, w[i].in, &w[i].want);
  }
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (w[i].bad) fail_msg("executor %d: %d of 15 concurrent runs failed or gave other bits", i, w[i].bad);
    em_tensor_release(w[i].in), em_tensor_release(w[i].want);
    em_exec_free(w[i].e);
  }
  cnet_free(&p);
}

/* 1-D, 3-D and one-channel convolutions, strided and dilated: fused, right in fast mode, and
 * the unfused bits in portable mode. */
static void test_conv_ranks(void **state) {
  (void)state;
  const ts_conv cs[] = {
    {.nsp = 1, .n = 2, .c = 3, .m = 5, .g = 1, .in = {17}, .k = {3}, .s = {2}, .d = {1}, .pb = {1}, .pe = {0}},
    {.nsp = 3, .n = 1, .c = 4, .m = 4, .g = 2, .in = {4, 5, 6}, .k = {2, 3, 3}, .s = {1, 2, 1}, .d = {1, 1, 2},
     .pb = {0, 1, 1}, .pe = {1, 1, 2}},
    {.nsp = 2, .n = 3, .c = 1, .m = 7, .g = 1, .in = {6, 6}, .k = {3, 3}, .s = {1, 1}, .d = {2, 2}, .pb = {2, 2},
     .pe = {2, 2}},
    {.nsp = 2, .n = 2, .c = 5, .m = 1, .g = 1, .in = {4, 6}, .k = {1, 1}, .s = {1, 1}, .d = {1, 1}},
  };
  for (int k = 0; k < 4; k++)
    for (int t = T_RELU; t <= T_SWISH; t++) {
      cnet p;
      cnet_init(&p, &cs[k], EM_F32, k != 2, 0, "convolution", 100 + (uint64_t)(k * 3 + t));
      em_attr ca[2] = {AF("min", -0.5), AF("max", 0.5)};
      em_var out = t == T_SWISH ? swish(p.g, p.y, 0) : t == T_CLIP ? un(p.g, "clip", p.y, ca, 2) : un(p.g, "relu", p.y, NULL, 0);
      em_var both[2] = {out, p.y};
      em_exec *fast = mk_exec(&p, &out, 1, EM_MODE_FAST), *port = mk_exec(&p, &out, 1, EM_MODE_PORTABLE),
              *plain = mk_exec(&p, both, 2, EM_MODE_PORTABLE);
      assert_int_equal(n_fused(fast), t == T_SWISH ? 2 : 1);
      em_tensor *x = input(&p, 0, 101), *a = NULL, *b = NULL, *o[2] = {0};
      run(fast, p.x, x, &a), run(port, p.x, x, &b), run(plain, p.x, x, o);
      int64_t n;
      double *want = ref_with_tail(&p, x, (enum tail)t, -0.5, 0.5, &n);
      char what[64];
      snprintf(what, sizeof what, "geometry %d tail %d fast", k, t);
      ot_expect_values(a, want, n, 2e-5, what);
      snprintf(what, sizeof what, "geometry %d tail %d portable", k, t);
      same_bits(b, o[0], what);
      free(want);
      em_tensor_release(a), em_tensor_release(b), em_tensor_release(o[0]), em_tensor_release(o[1]),
          em_tensor_release(x);
      em_exec_free(fast), em_exec_free(port), em_exec_free(plain);
      cnet_free(&p);
    }
}

/* Training: the gradient of sum(y * sigmoid(y)) for the bias, fetched with the product: by
 * hand, d/db[o] = sum over positions of s + y s (1 - s). */
static void test_swish_gradient(void **state) {
  (void)state;
  cnet p;
  const ts_conv c = conv3x3();
  cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 110);
  em_var m = swish(p.g, p.y, 1), loss, gb;
  CHECK(em_apply(p.g, "reduce_sum", &m, 1, NULL, 0, &loss, 1));
  CHECK(em_gradients(p.g, loss, &p.b, 1, &gb));
  em_var outs[2] = {gb, m};
  em_exec *e = mk_exec(&p, outs, 2, EM_MODE_FAST);
  CHECK(em_exec_set_training(e, 1));
  em_tensor *x = input(&p, 0, 111), *o[2] = {0};
  run(e, p.x, x, o);
  int64_t n;
  double *y = ref_conv(&p, x, &n), *want = calloc((size_t)c.m, sizeof(double));
  const int64_t plane = n / (c.n * c.m);
  for (int64_t i = 0; i < n; i++) {
    const double s = 1.0 / (1.0 + exp(-y[i]));
    want[i / plane % c.m] += s + y[i] * s * (1 - s);
  }
  ot_expect_values(o[0], want, c.m, 1e-4, "d sum(swish(conv)) / db");
  for (int64_t i = 0; i < n; i++) y[i] = y[i] / (1 + exp(-y[i]));
  ot_expect_values(o[1], y, n, 2e-5, "swish(conv) beside its gradient");
  free(y), free(want);
  em_tensor_release(o[0]), em_tensor_release(o[1]), em_tensor_release(x);
  em_exec_free(e);
  cnet_free(&p);
}

/* A CUDA executor (the libcuda test double) fuses nothing and gives the reference's values. */
static void test_gpu_executor_unaffected(void **state) {
  (void)state;
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) {
    print_message("SKIPPED: no test double (FAKECUDA_LIB)\n");
    skip();
  }
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0=Fake H100", 1);
  em_shutdown();
  for (int t = 0; t < 2; t++) {
    cnet p;
    const ts_conv c = conv3x3();
    cnet_init(&p, &c, EM_F32, 1, 0, "convolution", 120 + (uint64_t)t);
    em_var out = t ? swish(p.g, p.y, 1) : un(p.g, "relu", p.y, NULL, 0);
    em_exec *e = NULL;
    CHECK(em_exec_create(p.g, &out, 1, em_cuda(0), &e));
    assert_int_equal(n_fused(e), 0);
    em_tensor *x = input(&p, 0, 121), *o = NULL, *h = NULL;
    run(e, p.x, x, &o);
    CHECK(em_tensor_to_device(o, em_cpu(), &h));
    int64_t n;
    double *want = ref_with_tail(&p, x, t ? T_SWISH : T_RELU, 0, 0, &n);
    ot_expect_values(h, want, n, 2e-5, "cuda executor");
    free(want);
    em_tensor_release(o), em_tensor_release(h), em_tensor_release(x);
    em_exec_free(e);
    cnet_free(&p);
  }
  em_shutdown();
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
}


/* ------------------------------------------- channels-last pools, concat --- */

/* Window maximum of a plain [n, c, h, w] x in double: taps in order, the first maximum, a NaN
 * wins and stays (pm_argmax's rule). Sizes per ONNX (ceil_mode drops a window that starts in the
 * end padding). */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d, int ceil) {
  const int64_t span = in + pb + pe - d * (k - 1) - 1;
  int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (o - 1) * s >= in + pb) o--;
  return o;
}

static double *ref_max_pool(const float *x, const int64_t *xs, const int64_t *k, const int64_t *s, const int64_t *pb,
                            const int64_t *pe, const int64_t *d, int ceil, int64_t *ys) {
  ys[0] = xs[0], ys[1] = xs[1];
  for (int i = 0; i < 2; i++) ys[2 + i] = pool_out(xs[2 + i], k[i], s[i], pb[i], pe[i], d[i], ceil);
  double *y = malloc(sizeof(double) * (size_t)(ys[0] * ys[1] * ys[2] * ys[3]));
  for (int64_t p = 0; p < ys[0] * ys[1]; p++)
    for (int64_t oh = 0; oh < ys[2]; oh++)
      for (int64_t ow = 0; ow < ys[3]; ow++) {
        double best = 0;
        int have = 0;
        for (int64_t kh = 0; kh < k[0]; kh++)
          for (int64_t kw = 0; kw < k[1]; kw++) {
            const int64_t ih = oh * s[0] - pb[0] + kh * d[0], iw = ow * s[1] - pb[1] + kw * d[1];
            if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
            const double v = x[(p * xs[2] + ih) * xs[3] + iw];
            if (!have || v > best || (isnan(v) && !isnan(best))) best = v, have = 1;
          }
        if (!have) fail_msg("the reference's window (%lld, %lld) has no tap", (long long)oh, (long long)ow);
        y[(p * ys[2] + oh) * ys[3] + ow] = best;
      }
  return y;
}

static void expect_same_values(const em_tensor *t, const double *want, int64_t n, const char *what) {
  int64_t m;
  double *got = ot_values(t, &m);
  assert_int_equal(m, n);
  for (int64_t i = 0; i < n; i++)
    if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i]))))
      fail_msg("%s: element %lld is %.9g, expected %.9g", what, (long long)i, got[i], want[i]);
  free(got);
}

static int values_identical(const em_tensor *a, const em_tensor *b) {
  if (em_tensor_numel(a) != em_tensor_numel(b)) return 0;
  const float *av = em_tensor_data(a), *bv = em_tensor_data(b);
  for (int64_t i = 0; i < em_tensor_numel(a); i++)
    if (memcmp(&av[i], &bv[i], 4) && !(isnan(av[i]) && isnan(bv[i]))) return 0;
  return 1;
}

/* A depthwise 1x1 convolution with unit weights (y = x: NaNs, infinities and ties included)
 * whose output every reader takes channels-last: max_pool (pads, strides, dilations, ceil_mode,
 * windows wider than the input), global_average_pool (C over 64: several runs of channels),
 * concat with the contiguous x on each axis. Against plain double references, and the bits of
 * EMBER_CHANNELS_LAST=0. */
static void test_channels_last_pools_and_concat(void **state) {
  (void)state;
  typedef struct pc {
    int64_t c, h, w, k[2], s[2], pb[2], pe[2], d[2];
    int ceil;
  } pc;
  const pc cases[] = {
    {70, 7, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 0},
    {70, 7, 6, {3, 2}, {2, 3}, {1, 0}, {1, 1}, {1, 1}, 1},
    {17, 3, 3, {5, 5}, {1, 1}, {2, 2}, {2, 2}, {1, 1}, 0},
    {33, 9, 8, {3, 3}, {2, 1}, {2, 1}, {0, 2}, {2, 3}, 1},
    {130, 4, 5, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 1},
  };
  const float special[] = {NAN, 1.f, -1.f, INFINITY, -INFINITY, 0.f, -0.f, 2.5f, 2.5f, -3.f, 7.f, 0.5f, -NAN};
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const pc *q = &cases[ci];
    const ts_conv c = {.nsp = 2, .n = 2, .c = q->c, .m = q->c, .g = q->c, .in = {q->h, q->w}, .k = {1, 1},
                       .s = {1, 1}, .d = {1, 1}};
    for (int axis = 0; axis < 4; axis++) {
      cnet p;
      cnet_init(&p, &c, EM_F32, 0, 0, "convolution", 130);
      em_tensor *ones = ot_rand(EM_F32, 4, p.ws, 1, 1.0, 1.0);
      for (int64_t i = 0; i < em_tensor_numel(ones); i++) ((float *)em_tensor_data(ones))[i] = 1.0f;
      CHECK(em_parameter_set(p.g, p.w, ones));
      em_tensor_release(ones);
      int64_t pads[4] = {q->pb[0], q->pb[1], q->pe[0], q->pe[1]};
      em_attr pa[5] = {AIS("kernel_shape", q->k, 2), AIS("strides", q->s, 2), AIS("pads", pads, 4),
                       AIS("dilations", q->d, 2), AI("ceil_mode", q->ceil)};
      em_var mp, cat, gap, in2[2] = {p.y, p.x};
      CHECK(em_apply(p.g, "max_pool", &p.y, 1, pa, 5, &mp, 1));
      CHECK(em_apply(p.g, "global_average_pool", &p.y, 1, NULL, 0, &gap, 1));
      em_attr ax = AI("axis", axis);
      CHECK(em_apply(p.g, "concat", in2, 2, &ax, 1, &cat, 1));
      em_var outs[3] = {un(p.g, "neg", mp, NULL, 0), gap, un(p.g, "neg", cat, NULL, 0)};
      em_exec *cl = mk_exec(&p, outs, 3, EM_MODE_FAST);
      setenv("EMBER_CHANNELS_LAST", "0", 1);
      em_exec *plain = mk_exec(&p, outs, 3, EM_MODE_FAST);
      unsetenv("EMBER_CHANNELS_LAST");
      em_tensor *x = input(&p, 0, 131 + ci);
      float *xf = em_tensor_data(x);
      const int64_t nx = em_tensor_numel(x);
      for (int64_t i = 0; i < nx; i++)
        if (i % 5 == 0) xf[i] = special[(i / 5) % (int64_t)(sizeof special / sizeof *special)];
      em_tensor *a[3] = {0}, *b[3] = {0};
      run(cl, p.x, x, a), run(plain, p.x, x, b);
      em_exec_stats st;
      CHECK(em_exec_stats_get(cl, &st));
      if (st.channels_last_steps < 2) fail_msg("case %zu: %d channels-last steps", ci, st.channels_last_steps);
      char what[96];
      /* max_pool */
      int64_t ys[4];
      double *want = ref_max_pool(xf, p.xs, q->k, q->s, q->pb, q->pe, q->d, q->ceil, ys);
      const int64_t ny = ys[0] * ys[1] * ys[2] * ys[3];
      for (int64_t i = 0; i < ny; i++) want[i] = -want[i];
      ot_expect_shape(a[0], EM_F32, 4, ys, "max_pool's shape");
      snprintf(what, sizeof what, "case %zu: max_pool of a channels-last value", ci);
      expect_same_values(a[0], want, ny, what);
      free(want);
      /* global_average_pool: each plane's sum in double in index order, then the mean */
      want = malloc(sizeof(double) * (size_t)(2 * q->c));
      for (int64_t pl = 0; pl < 2 * q->c; pl++) {
        double acc = 0;
        for (int64_t i = 0; i < q->h * q->w; i++) acc = acc + (double)xf[pl * q->h * q->w + i];
        want[pl] = (float)(acc / (double)(q->h * q->w));
      }
      snprintf(what, sizeof what, "case %zu: global_average_pool of a channels-last value", ci);
      expect_same_values(a[1], want, 2 * q->c, what);
      free(want);
      /* concat(y, x) on axis: x twice along axis, negated */
      int64_t cs[4] = {p.xs[0], p.xs[1], p.xs[2], p.xs[3]};
      cs[axis] *= 2;
      const int64_t ncat = 2 * nx;
      want = malloc(sizeof(double) * (size_t)ncat);
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < axis; i++) outer *= p.xs[i];
      for (int i = axis; i < 4; i++) inner *= p.xs[i];
      for (int64_t o = 0; o < outer; o++)
        for (int part = 0; part < 2; part++)
          for (int64_t i = 0; i < inner; i++) want[(o * 2 + part) * inner + i] = -(double)xf[o * inner + i];
      ot_expect_shape(a[2], EM_F32, 4, cs, "concat's shape");
      snprintf(what, sizeof what, "case %zu: concat on axis %d", ci, axis);
      expect_same_values(a[2], want, ncat, what);
      free(want);
      for (int i = 0; i < 3; i++) {
        if (!values_identical(a[i], b[i]))
          fail_msg("case %zu axis %d output %d: channels-last bits differ from EMBER_CHANNELS_LAST=0's", ci, axis, i);
        em_tensor_release(a[i]), em_tensor_release(b[i]);
      }
      em_tensor_release(x);
      em_exec_free(cl), em_exec_free(plain);
      cnet_free(&p);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tail_value_is_output_and_shared),
    cmocka_unit_test(test_not_fused),
    cmocka_unit_test(test_clip_bound_forms),
    cmocka_unit_test(test_special_values),
    cmocka_unit_test(test_run_into_accumulate),
    cmocka_unit_test(test_dynamic_batch),
    cmocka_unit_test(test_mode_switches),
    cmocka_unit_test(test_mode_switches_channels_last_chain),
    cmocka_unit_test(test_two_executors_two_threads),
    cmocka_unit_test(test_conv_ranks),
    cmocka_unit_test(test_swish_gradient),
    cmocka_unit_test(test_gpu_executor_unaffected),
    cmocka_unit_test(test_channels_last_pools_and_concat),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
