/* The CPU executor's fusions (engine/exec.c plan_fusions, op.h em_post_op): a convolution whose
 * output only relu, clip or x * sigmoid(x) reads runs those ops itself. Expected values come
 * from a plain float64 convolution (tests/support/conv_reference) and the ops' definitions
 * written here; in portable mode a fused graph must give the same bits as the same graph with
 * the convolution's output also fetched (which forbids the fusion). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_reference.h"
#include "op_testkit.h"
#include "run_self.h"

enum tail { T_RELU, T_CLIP, T_SWISH_YS, T_SWISH_SY };
static const char *const TAIL_NAMES[] = {"relu", "clip", "y * sigmoid(y)", "sigmoid(y) * y"};

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* A 3x3 convolution (pads 1) with bias, or a depthwise one, or a pointwise one. */
static ts_conv geometry(int kind) {
  ts_conv c = {.nsp = 2, .n = 2, .c = 8, .m = 16, .g = 1, .in = {9, 11}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1},
               .pb = {1, 1}, .pe = {1, 1}};
  if (kind == 1) c.c = c.m = c.g = 16;                                      /* depthwise */
  if (kind == 2) c.k[0] = c.k[1] = 1, c.pb[0] = c.pb[1] = c.pe[0] = c.pe[1] = 0; /* pointwise */
  return c;
}

typedef struct net {
  em_graph *g;
  em_var x, w, b, y, out;
  em_exec *e;
} net;

/* out = tail(convolution(x, w, b)); also_y: y is fetched too (no fusion then). */
static void net_build(net *p, const ts_conv *c, enum tail t, int also_y, em_mode mode, uint64_t seed) {
  int64_t xs[5], ws[5], ys[5], bs[1] = {c->m};
  ts_conv_shapes(c, xs, ws, ys);
  memset(p, 0, sizeof *p);
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  assert_int_equal(em_input(p->g, "x", EM_F32, 4, xs, &p->x), EM_OK);
  em_tensor *w = ot_rand(EM_F32, 4, ws, seed, -0.5, 0.5), *b = ot_rand(EM_F32, 1, bs, seed + 1, -0.5, 0.5);
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = w}, ib = {.kind = EM_INIT_FROM_DATA, .data = b};
  assert_int_equal(em_parameter(p->g, "w", EM_F32, 4, ws, &iw, &p->w), EM_OK);
  assert_int_equal(em_parameter(p->g, "b", EM_F32, 1, bs, &ib, &p->b), EM_OK);
  em_tensor_release(w), em_tensor_release(b);
  int64_t pads[4] = {c->pb[0], c->pb[1], c->pe[0], c->pe[1]};
  em_attr at[4] = {AIS("strides", c->s, 2), AIS("dilations", c->d, 2), AIS("pads", pads, 4), AI("group", c->g)};
  em_var in[3] = {p->x, p->w, p->b};
  assert_int_equal(em_apply(p->g, "convolution", in, 3, at, 4, &p->y, 1), EM_OK);
  if (t == T_RELU) assert_int_equal(em_apply(p->g, "relu", &p->y, 1, NULL, 0, &p->out, 1), EM_OK);
  if (t == T_CLIP) {
    em_attr ca[2] = {AF("min", -0.25), AF("max", 0.4)};
    assert_int_equal(em_apply(p->g, "clip", &p->y, 1, ca, 2, &p->out, 1), EM_OK);
  }
  if (t == T_SWISH_YS || t == T_SWISH_SY) {
    em_var s;
    assert_int_equal(em_apply(p->g, "sigmoid", &p->y, 1, NULL, 0, &s, 1), EM_OK);
    em_var m[2] = {t == T_SWISH_YS ? p->y : s, t == T_SWISH_YS ? s : p->y};
    assert_int_equal(em_apply(p->g, "mul", m, 2, NULL, 0, &p->out, 1), EM_OK);
  }
  em_var outs[2] = {p->out, p->y};
  assert_int_equal(em_exec_create(p->g, outs, also_y ? 2 : 1, em_cpu(), &p->e), EM_OK);
  assert_int_equal(em_exec_set_mode(p->e, mode), EM_OK);
}

static void net_free(net *p) {
  em_exec_free(p->e);
  em_graph_free(p->g);
}

/* Runs the net on x: out (and y where fetched). */
static em_tensor *net_run(net *p, em_tensor *x, int also_y, em_tensor **y) {
  em_feed f = {p->x, x};
  em_tensor *o[2] = {0};
  if (em_exec_run(p->e, &f, 1, o)) fail_msg("run: %s", em_last_error());
  if (also_y) *y = o[1];
  return o[0];
}

static int fused_steps(const net *p) {
  char buf[8192];
  em_exec_describe(p->e, buf, sizeof buf);
  int n = 0;
  for (const char *q = buf; (q = strstr(q, "[fused into step")); q++) n++;
  return n;
}

static double tail_of(enum tail t, double v) {
  switch (t) {
  case T_RELU: return v < 0 ? 0 : v;
  case T_CLIP: return v < -0.25 ? -0.25 : v > 0.4 ? 0.4 : v;
  default: return v / (1.0 + exp(-v));
  }
}

/* The expected output: the convolution in double, then the tail in double. */
static double *expected(const net *p, const ts_conv *c, em_tensor *x, enum tail t, int64_t *n) {
  em_tensor *w = NULL, *b = NULL;
  assert_int_equal(em_parameter_get(p->g, p->w, em_cpu(), &w), EM_OK);
  assert_int_equal(em_parameter_get(p->g, p->b, em_cpu(), &b), EM_OK);
  int64_t nx, nw, nb;
  double *xd = ot_values(x, &nx), *wd = ot_values(w, &nw), *bd = ot_values(b, &nb);
  float *xf = malloc(sizeof *xf * (size_t)nx), *wf = malloc(sizeof *wf * (size_t)nw), *bf = malloc(sizeof *bf * (size_t)nb);
  for (int64_t i = 0; i < nx; i++) xf[i] = (float)xd[i];
  for (int64_t i = 0; i < nw; i++) wf[i] = (float)wd[i];
  for (int64_t i = 0; i < nb; i++) bf[i] = (float)bd[i];
  double *y = ts_conv_reference(c, xf, wf, bf);
  int64_t xs[5], ws[5], ys[5];
  ts_conv_shapes(c, xs, ws, ys);
  *n = ts_prod(ys, 4);
  for (int64_t i = 0; i < *n; i++) y[i] = tail_of(t, y[i]);
  free(xd), free(wd), free(bd), free(xf), free(wf), free(bf);
  em_tensor_release(w), em_tensor_release(b);
  return y;
}

static em_tensor *input_for(const ts_conv *c, uint64_t seed) {
  int64_t xs[5], ws[5], ys[5];
  ts_conv_shapes(c, xs, ws, ys);
  return ot_rand(EM_F32, 4, xs, seed, -2.0, 2.0);
}

/* Fast mode: each tail on each geometry is fused (one or two steps folded into the
 * convolution's) and matches the double reference. */
static void test_fused_tails_match_reference(void **state) {
  (void)state;
  for (int kind = 0; kind < 3; kind++)
    for (int t = T_RELU; t <= T_SWISH_SY; t++) {
      const ts_conv c = geometry(kind);
      net p;
      net_build(&p, &c, (enum tail)t, 0, EM_MODE_FAST, 10 + (uint64_t)(kind * 4 + t));
      const int want = t >= T_SWISH_YS ? 2 : 1;
      if (fused_steps(&p) != want)
        fail_msg("geometry %d, %s: %d steps fused, expected %d", kind, TAIL_NAMES[t], fused_steps(&p), want);
      em_tensor *x = input_for(&c, 99 + (uint64_t)t);
      em_tensor *out = net_run(&p, x, 0, NULL);
      int64_t n;
      double *want_v = expected(&p, &c, x, (enum tail)t, &n);
      char what[96];
      snprintf(what, sizeof what, "geometry %d, %s, fused", kind, TAIL_NAMES[t]);
      ot_expect_values(out, want_v, n, 2e-5, what);
      free(want_v);
      em_tensor_release(out), em_tensor_release(x);
      net_free(&p);
    }
}

/* Portable mode: the fused convolution applies the ops with their own kernels, so the bits
 * equal those of the unfused graph (the convolution's output fetched too keeps every step). */
static void test_portable_fused_bits_equal_unfused(void **state) {
  (void)state;
  for (int kind = 0; kind < 3; kind++)
    for (int t = T_RELU; t <= T_SWISH_SY; t++) {
      const ts_conv c = geometry(kind);
      net fused, plain;
      net_build(&fused, &c, (enum tail)t, 0, EM_MODE_PORTABLE, 30 + (uint64_t)t);
      net_build(&plain, &c, (enum tail)t, 1, EM_MODE_PORTABLE, 30 + (uint64_t)t);
      assert_true(fused_steps(&fused) > 0);
      assert_int_equal(fused_steps(&plain), 0);
      em_tensor *x = input_for(&c, 7 + (uint64_t)kind), *y = NULL;
      em_tensor *a = net_run(&fused, x, 0, NULL), *b = net_run(&plain, x, 1, &y);
      const size_t bytes = sizeof(float) * (size_t)em_tensor_numel(a);
      if (memcmp(em_tensor_data(a), em_tensor_data(b), bytes))
        fail_msg("geometry %d, %s: the fused graph's bits differ from the unfused one's in portable mode", kind,
                 TAIL_NAMES[t]);
      em_tensor_release(a), em_tensor_release(b), em_tensor_release(y), em_tensor_release(x);
      net_free(&fused), net_free(&plain);
    }
}

/* NaNs and infinities in x come out of a fused graph where they come out of the unfused one
 * (fast mode: a relu or clip that turned NaN into 0 would hide a diverging model). */
static void test_fused_keep_nan_and_inf(void **state) {
  (void)state;
  for (int kind = 0; kind < 3; kind++)
    for (int t = T_RELU; t <= T_SWISH_SY; t++) {
      const ts_conv c = geometry(kind);
      net fused, plain;
      net_build(&fused, &c, (enum tail)t, 0, EM_MODE_FAST, 90);
      net_build(&plain, &c, (enum tail)t, 1, EM_MODE_FAST, 90);
      em_tensor *x = input_for(&c, 91), *y = NULL;
      float *xf = em_tensor_data(x);
      const int64_t nx = em_tensor_numel(x);
      xf[nx / 7] = NAN, xf[nx / 3] = INFINITY, xf[nx / 2] = -INFINITY;
      em_tensor *a = net_run(&fused, x, 0, NULL), *b = net_run(&plain, x, 1, &y);
      const float *av = em_tensor_data(a), *bv = em_tensor_data(b);
      int64_t nan = 0;
      for (int64_t i = 0; i < em_tensor_numel(a); i++) {
        nan += isnan(bv[i]);
        if (isnan(av[i]) != isnan(bv[i]) || (isinf(bv[i]) && av[i] != bv[i]))
          fail_msg("geometry %d, %s, element %lld: fused %g, unfused %g", kind, TAIL_NAMES[t], (long long)i,
                   (double)av[i], (double)bv[i]);
      }
      if (nan == 0) fail_msg("geometry %d, %s: no NaN reached the output (the test's input is wrong)", kind, TAIL_NAMES[t]);
      em_tensor_release(a), em_tensor_release(b), em_tensor_release(y), em_tensor_release(x);
      net_free(&fused), net_free(&plain);
    }
}

/* Where the intermediate is read by anything else, nothing is fused: y read by relu and by an
 * add; mul of y with the sigmoid of another value; a sigmoid read twice. */
static void test_not_fused_where_values_are_shared(void **state) {
  (void)state;
  const ts_conv c = geometry(0);
  int64_t xs[5], ws[5], ys[5];
  ts_conv_shapes(&c, xs, ws, ys);
  for (int variant = 0; variant < 3; variant++) {
    em_graph *g;
    em_var x, w, y, r, s, out;
    assert_int_equal(em_graph_create(&g), EM_OK);
    assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &x), EM_OK);
    em_tensor *wt = ot_rand(EM_F32, 4, ws, 5, -0.5, 0.5);
    em_init iw = {.kind = EM_INIT_FROM_DATA, .data = wt};
    assert_int_equal(em_parameter(g, "w", EM_F32, 4, ws, &iw, &w), EM_OK);
    em_tensor_release(wt);
    int64_t pads[4] = {1, 1, 1, 1};
    em_attr at[1] = {AIS("pads", pads, 4)};
    em_var in[2] = {x, w};
    assert_int_equal(em_apply(g, "convolution", in, 2, at, 1, &y, 1), EM_OK);
    if (variant == 0) {
      assert_int_equal(em_apply(g, "relu", &y, 1, NULL, 0, &r, 1), EM_OK);
      em_var ad[2] = {r, y};
      assert_int_equal(em_apply(g, "add", ad, 2, NULL, 0, &out, 1), EM_OK);
    } else if (variant == 1) {
      em_var z;
      assert_int_equal(em_apply(g, "neg", &y, 1, NULL, 0, &z, 1), EM_OK);
      assert_int_equal(em_apply(g, "sigmoid", &z, 1, NULL, 0, &s, 1), EM_OK);
      em_var m[2] = {y, s};
      assert_int_equal(em_apply(g, "mul", m, 2, NULL, 0, &out, 1), EM_OK);
    } else {
      assert_int_equal(em_apply(g, "sigmoid", &y, 1, NULL, 0, &s, 1), EM_OK);
      em_var m[2] = {y, s}, m2[2];
      assert_int_equal(em_apply(g, "mul", m, 2, NULL, 0, &m2[0], 1), EM_OK);
      m2[1] = s;
      assert_int_equal(em_apply(g, "add", m2, 2, NULL, 0, &out, 1), EM_OK);
    }
    em_exec *e;
    assert_int_equal(em_exec_create(g, &out, 1, em_cpu(), &e), EM_OK);
    char buf[8192];
    em_exec_describe(e, buf, sizeof buf);
    if (strstr(buf, "fused")) fail_msg("variant %d fused a shared value:\n%s", variant, buf);
    em_tensor *xt = ot_rand(EM_F32, 4, xs, 6, -1, 1), *o = NULL;
    em_feed f = {x, xt};
    assert_int_equal(em_exec_run(e, &f, 1, &o), EM_OK);
    em_tensor_release(o), em_tensor_release(xt);
    em_exec_free(e);
    em_graph_free(g);
  }
}

/* Ember promises the same bits for every thread count: fused graphs too. */
static void test_fused_bits_do_not_depend_on_threads(void **state) {
  (void)state;
  for (int t = T_RELU; t <= T_SWISH_YS; t++) {
    const ts_conv c = geometry(t == T_CLIP ? 1 : 0);
    em_tensor *ref = NULL;
    for (int threads = 1; threads <= 3; threads++) {
      assert_int_equal(em_set_num_threads(threads), EM_OK);
      net p;
      net_build(&p, &c, (enum tail)t, 0, EM_MODE_FAST, 50);
      em_tensor *x = input_for(&c, 51);
      em_tensor *o = net_run(&p, x, 0, NULL);
      if (!ref) ref = o;
      else {
        if (memcmp(em_tensor_data(ref), em_tensor_data(o), sizeof(float) * (size_t)em_tensor_numel(o)))
          fail_msg("%s: %d threads give other bits than 1", TAIL_NAMES[t], threads);
        em_tensor_release(o);
      }
      em_tensor_release(x);
      net_free(&p);
    }
    em_tensor_release(ref);
  }
  assert_int_equal(em_set_num_threads(0), EM_OK);
}

/* Training: where a gradient reads the convolution's output, nothing is fused and the
 * gradients still match the reference's finite differences (ot_gradcheck-like, by hand). */
static void test_training_graph_keeps_steps(void **state) {
  (void)state;
  const ts_conv c = geometry(0);
  net p;
  net_build(&p, &c, T_RELU, 0, EM_MODE_FAST, 70);
  em_var loss, gw;
  assert_int_equal(em_apply(p.g, "reduce_sum", &p.out, 1, NULL, 0, &loss, 1), EM_OK);
  assert_int_equal(em_gradients(p.g, loss, &p.w, 1, &gw), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(p.g, &gw, 1, em_cpu(), &e), EM_OK);
  char buf[16384];
  em_exec_describe(e, buf, sizeof buf);
  if (strstr(buf, "fused")) fail_msg("a training graph fused the convolution whose output its gradient reads:\n%s", buf);
  em_tensor *x = input_for(&c, 71), *g = NULL;
  em_feed f = {p.x, x};
  assert_int_equal(em_exec_run(e, &f, 1, &g), EM_OK);
  /* d sum(relu(conv(x, w) + b)) / dw[o, i, kh, kw] = sum over outputs with conv > 0 of x tap */
  int64_t n;
  double *y = expected(&p, &c, x, T_RELU, &n); /* relu'd: > 0 exactly where the gradient flows */
  int64_t nx;
  double *xd = ot_values(x, &nx);
  const int64_t H = c.in[0], W = c.in[1], C = c.c, M = c.m;
  double *want = calloc((size_t)(M * C * 9), sizeof *want);
  for (int64_t b = 0; b < c.n; b++)
    for (int64_t o = 0; o < M; o++)
      for (int64_t i = 0; i < H; i++)
        for (int64_t j = 0; j < W; j++) {
          if (y[((b * M + o) * H + i) * W + j] <= 0) continue;
          for (int64_t ci = 0; ci < C; ci++)
            for (int64_t kh = 0; kh < 3; kh++)
              for (int64_t kw = 0; kw < 3; kw++) {
                const int64_t ih = i + kh - 1, iw = j + kw - 1;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                want[((o * C + ci) * 3 + kh) * 3 + kw] += xd[((b * C + ci) * H + ih) * W + iw];
              }
        }
  ot_expect_values(g, want, M * C * 9, 1e-4, "dw through relu(conv)");
  free(want), free(xd), free(y);
  em_tensor_release(g), em_tensor_release(x);
  em_exec_free(e);
  net_free(&p);
}

/* Without oneDNN the convolution's own path applies the fused ops (em_post_apply). */
static int child_without_dnnl(void) {
  const ts_conv c = geometry(0);
  for (int t = T_RELU; t <= T_SWISH_SY; t++) {
    net p;
    net_build(&p, &c, (enum tail)t, 0, EM_MODE_FAST, 80);
    if (fused_steps(&p) == 0) return 10 + t;
    em_tensor *x = input_for(&c, 81);
    em_tensor *o = net_run(&p, x, 0, NULL);
    int64_t n, m;
    double *want = expected(&p, &c, x, (enum tail)t, &n), *got = ot_values(o, &m);
    for (int64_t i = 0; i < n; i++)
      if (fabs(got[i] - want[i]) > 2e-5 * (1 + fabs(want[i]))) return 20 + t;
    free(want), free(got);
    em_tensor_release(o), em_tensor_release(x);
    net_free(&p);
  }
  return 0;
}

static void test_fused_without_dnnl(void **state) {
  (void)state;
  int rc = ts_run_self("--child-without-dnnl", "EMBER_DNNL", "0");
  if (rc) fail_msg("the child without oneDNN failed with %d (1x: not fused, 2x: wrong values)", rc);
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--child-without-dnnl")) return child_without_dnnl();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fused_tails_match_reference),
    cmocka_unit_test(test_portable_fused_bits_equal_unfused),
    cmocka_unit_test(test_fused_keep_nan_and_inf),
    cmocka_unit_test(test_not_fused_where_values_are_shared),
    cmocka_unit_test(test_fused_bits_do_not_depend_on_threads),
    cmocka_unit_test(test_training_graph_keeps_steps),
    cmocka_unit_test(test_fused_without_dnnl),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
