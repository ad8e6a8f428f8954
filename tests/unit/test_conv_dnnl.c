/* The fast-mode CPU convolution through oneDNN (ops/dnnl.c): weights kept between runs,
 * geometries, thread counts, against a plain float64 reference written here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <malloc.h>
#include <omp.h>
#include <pthread.h>
#include <valgrind/valgrind.h>

#include "conv_reference.h"
#include "dnnl.h"
#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

typedef ts_conv cg;

static int64_t out_size(const cg *c, int i) { return ts_conv_out_size(c, i); }
static void shapes(const cg *c, int64_t *xs, int64_t *ws, int64_t *ys) { ts_conv_shapes(c, xs, ws, ys); }
static int64_t prod(const int64_t *v, int n) { return ts_prod(v, n); }
static double *reference(const cg *c, const float *x, const float *w, const float *b) {
  double *y = ts_conv_reference(c, x, w, b);
  assert_non_null(y);
  return y;
}

static int conv_attrs(const cg *c, em_attr *at, int64_t *pads) {
  int n = 0;
  for (int i = 0; i < c->nsp; i++) pads[i] = c->pb[i], pads[c->nsp + i] = c->pe[i];
  at[n++] = AIS("strides", c->s, c->nsp);
  at[n++] = AIS("dilations", c->d, c->nsp);
  at[n++] = AIS("pads", pads, 2 * c->nsp);
  if (c->g != 1) at[n++] = AI("group", c->g);
  return n;
}

/* A graph y = convolution(x, w[, b]) with w (and b) parameters; x an input. */
typedef struct pg {
  em_graph *g;
  em_var x, w, b, y;
  em_exec *e;
} pg;

static void pg_build(pg *p, const cg *c, em_tensor *w, em_tensor *b) {
  int64_t xs[5], ws[5], ys[5];
  shapes(c, xs, ws, ys);
  memset(p, 0, sizeof *p);
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  assert_int_equal(em_input(p->g, "x", EM_F32, 2 + c->nsp, xs, &p->x), EM_OK);
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = w};
  assert_int_equal(em_parameter(p->g, "w", EM_F32, 2 + c->nsp, ws, &iw, &p->w), EM_OK);
  em_var in[3] = {p->x, p->w, -1};
  if (b) {
    em_init ib = {.kind = EM_INIT_FROM_DATA, .data = b};
    int64_t bs[1] = {c->m};
    assert_int_equal(em_parameter(p->g, "b", EM_F32, 1, bs, &ib, &p->b), EM_OK);
    in[2] = p->b;
  }
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(c, at, pads);
  if (em_apply(p->g, "convolution", in, b ? 3 : 2, at, na, &p->y, 1)) fail_msg("apply: %s", em_last_error());
  assert_int_equal(em_exec_create(p->g, &p->y, 1, em_cpu(), &p->e), EM_OK);
}

static em_tensor *pg_run(pg *p, em_tensor *x) {
  em_feed f = {p->x, x};
  em_tensor *y = NULL;
  if (em_exec_run(p->e, &f, 1, &y)) fail_msg("run: %s", em_last_error());
  return y;
}

static void pg_free(pg *p) {
  em_exec_free(p->e);
  em_graph_free(p->g);
}

static void expect_ref(const cg *c, const em_tensor *y, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                       const char *what) {
  double *want = reference(c, em_tensor_data(x), em_tensor_data(w), b ? em_tensor_data(b) : NULL);
  int64_t n;
  double *got = ot_values(y, &n);
  ot_expect_close(got, want, n, 1e-4, 1e-4, what);
  free(got), free(want);
}

static em_tensor *rand_f32(int nd, const int64_t *s, uint64_t seed) { return ot_rand(EM_F32, nd, s, seed, -1, 1); }

/* ------------------------------------------------------------- cases --- */

static const cg base = {.nsp = 2, .n = 2, .c = 8, .m = 16, .g = 1, .in = {9, 10}, .k = {3, 3}, .s = {1, 1},
                        .d = {1, 1}, .pb = {1, 1}, .pe = {1, 1}};

/* em_parameter_set between runs: the second run uses the new weights. */
static void test_param_set(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 1), *w1 = rand_f32(4, ws, 2), *w2 = rand_f32(4, ws, 3);
  pg p;
  pg_build(&p, &base, w1, NULL);
  em_tensor *y = pg_run(&p, x);
  expect_ref(&base, y, x, w1, NULL, "first weights");
  em_tensor_release(y);
  assert_int_equal(em_parameter_set(p.g, p.w, w2), EM_OK);
  y = pg_run(&p, x);
  expect_ref(&base, y, x, w2, NULL, "after em_parameter_set");
  em_tensor_release(y);
  /* written through em_parameter_value's tensor, announced with em_parameter_set */
  em_tensor *pv;
  assert_int_equal(em_parameter_value(p.g, p.w, &pv), EM_OK);
  y = pg_run(&p, x);
  em_tensor_release(y);
  memcpy(em_tensor_data(pv), em_tensor_data(w1), (size_t)em_tensor_numel(w1) * 4);
  assert_int_equal(em_parameter_set(p.g, p.w, pv), EM_OK);
  y = pg_run(&p, x);
  expect_ref(&base, y, x, w1, NULL, "after writing through em_parameter_value");
  em_tensor_release(y);
  em_tensor_release(pv);
  pg_free(&p);
  em_tensor_release(x), em_tensor_release(w1), em_tensor_release(w2);
}

/* Clones: SHARE sees em_parameter_set on the original; COPY does not. */
static void test_clone(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 11), *w1 = rand_f32(4, ws, 12), *w2 = rand_f32(4, ws, 13);
  pg p;
  pg_build(&p, &base, w1, NULL);
  em_graph *gs, *gc;
  assert_int_equal(em_graph_clone(p.g, EM_CLONE_SHARE, &gs), EM_OK);
  assert_int_equal(em_graph_clone(p.g, EM_CLONE_COPY, &gc), EM_OK);
  em_exec *es, *ec;
  assert_int_equal(em_exec_create(gs, &p.y, 1, em_cpu(), &es), EM_OK);
  assert_int_equal(em_exec_create(gc, &p.y, 1, em_cpu(), &ec), EM_OK);
  em_feed f = {p.x, x};
  em_tensor *y;
  y = pg_run(&p, x), em_tensor_release(y);
  assert_int_equal(em_exec_run(es, &f, 1, &y), EM_OK), em_tensor_release(y);
  assert_int_equal(em_exec_run(ec, &f, 1, &y), EM_OK), em_tensor_release(y);
  assert_int_equal(em_parameter_set(p.g, p.w, w2), EM_OK);
  assert_int_equal(em_exec_run(es, &f, 1, &y), EM_OK);
  expect_ref(&base, y, x, w2, NULL, "share clone");
  em_tensor_release(y);
  assert_int_equal(em_exec_run(ec, &f, 1, &y), EM_OK);
  expect_ref(&base, y, x, w1, NULL, "copy clone");
  em_tensor_release(y);
  em_exec_free(es), em_exec_free(ec), em_graph_free(gs), em_graph_free(gc);
  pg_free(&p);
  em_tensor_release(x), em_tensor_release(w1), em_tensor_release(w2);
}

/* The weight computed from a parameter (w * 2 through mul by a constant), the parameter changed. */
static void test_computed_weights(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 21), *w1 = rand_f32(4, ws, 22), *w2 = rand_f32(4, ws, 23);
  em_graph *g;
  em_var xv, wv, y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &xv), EM_OK);
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = w1};
  assert_int_equal(em_parameter(g, "w", EM_F32, 4, ws, &iw, &wv), EM_OK);
  /* reshape to a flat vector and back: possibly a view sharing the storage */
  int64_t flat[1] = {prod(ws, 4)};
  em_var r1, r2;
  em_attr a1 = AIS("shape", flat, 1), a2 = AIS("shape", ws, 4);
  if (em_apply(g, "reshape", &wv, 1, &a1, 1, &r1, 1) || em_apply(g, "reshape", &r1, 1, &a2, 1, &r2, 1))
    fail_msg("reshape: %s", em_last_error());
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(&base, at, pads);
  em_var in[2] = {xv, r2};
  assert_int_equal(em_apply(g, "convolution", in, 2, at, na, &y, 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  em_feed f = {xv, x};
  em_tensor *out;
  assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
  expect_ref(&base, out, x, w1, NULL, "reshaped weights");
  em_tensor_release(out);
  assert_int_equal(em_parameter_set(g, wv, w2), EM_OK);
  assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
  expect_ref(&base, out, x, w2, NULL, "reshaped weights after set");
  em_tensor_release(out);
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(x), em_tensor_release(w1), em_tensor_release(w2);
}

/* A graph x, w -> convolution (base's geometry) with both fed: run with w, w overwritten in place
 * with w2's values, run again: each run must give its weights' result. */
static void fed_weights_changed(em_tensor *x, em_tensor *w, const em_tensor *w2, const char *what) {
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(&base, at, pads);
  em_graph *g;
  em_var v[2], y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &v[0]), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F32, 4, ws, &v[1]), EM_OK);
  assert_int_equal(em_apply(g, "convolution", v, 2, at, na, &y, 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  em_feed f[2] = {{v[0], x}, {v[1], w}};
  em_tensor *out;
  assert_int_equal(em_exec_run(e, f, 2, &out), EM_OK);
  expect_ref(&base, out, x, w, NULL, what);
  em_tensor_release(out);
  memcpy(em_tensor_data(w), em_tensor_data(w2), (size_t)em_tensor_numel(w) * 4);
  assert_int_equal(em_exec_run(e, f, 2, &out), EM_OK);
  expect_ref(&base, out, x, w2, NULL, what);
  em_tensor_release(out);
  em_exec_free(e);
  em_graph_free(g);
}

/* A fed weight changed in place between runs. */
static void test_fed_weights(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 31), *w = rand_f32(4, ws, 32), *w2 = rand_f32(4, ws, 33);
  fed_weights_changed(x, w, w2, "fed weights changed in place");
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(w2);
}

/* One parameter used by two convolutions of different geometry (strides). */
static void test_shared_weights_two_geometries(void **state) {
  (void)state;
  cg c2 = base;
  c2.s[0] = c2.s[1] = 2;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 41), *w1 = rand_f32(4, ws, 42), *w2 = rand_f32(4, ws, 43);
  em_graph *g;
  em_var xv, wv, y[2];
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &xv), EM_OK);
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = w1};
  assert_int_equal(em_parameter(g, "w", EM_F32, 4, ws, &iw, &wv), EM_OK);
  em_attr at[8], at2[8];
  int64_t pads[6], pads2[6];
  int na = conv_attrs(&base, at, pads), na2 = conv_attrs(&c2, at2, pads2);
  em_var in[2] = {xv, wv};
  assert_int_equal(em_apply(g, "convolution", in, 2, at, na, &y[0], 1), EM_OK);
  assert_int_equal(em_apply(g, "convolution", in, 2, at2, na2, &y[1], 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, y, 2, em_cpu(), &e), EM_OK);
  em_feed f = {xv, x};
  for (int r = 0; r < 2; r++) {
    em_tensor *out[2];
    em_tensor *wcur = r ? w2 : w1;
    if (r) assert_int_equal(em_parameter_set(g, wv, w2), EM_OK);
    assert_int_equal(em_exec_run(e, &f, 1, out), EM_OK);
    expect_ref(&base, out[0], x, wcur, NULL, "stride 1");
    expect_ref(&c2, out[1], x, wcur, NULL, "stride 2");
    em_tensor_release(out[0]), em_tensor_release(out[1]);
  }
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(x), em_tensor_release(w1), em_tensor_release(w2);
}

/* A random sweep of geometries, weights as parameters (kept form) with a bias, against the
 * reference, and the same bits with one thread and with two or three. */
static void test_geometry_sweep(void **state) {
  (void)state;
  uint64_t rs = 12345;
  const int iters = RUNNING_ON_VALGRIND ? 16 : 600; /* valgrind runs every new kernel's JIT slowly */
  for (int it = 0; it < iters; it++) {
    cg c;
    memset(&c, 0, sizeof c);
    c.nsp = 1 + (int)ot_uniform(&rs, 0, 3);
    c.n = 1 + (int64_t)ot_uniform(&rs, 0, 3);
    c.g = 1 + (int64_t)ot_uniform(&rs, 0, 4);
    int dw = ot_uniform(&rs, 0, 1) < 0.3;
    if (dw) c.g = 1 + (int64_t)ot_uniform(&rs, 0, 9);
    c.c = c.g * (dw ? 1 : 1 + (int64_t)ot_uniform(&rs, 0, 5));
    c.m = c.g * (1 + (int64_t)ot_uniform(&rs, 0, dw ? 3 : 6));
    int ok = 1;
    for (int i = 0; i < c.nsp; i++) {
      c.in[i] = 1 + (int64_t)ot_uniform(&rs, 0, c.nsp == 3 ? 7 : 14);
      c.k[i] = 1 + (int64_t)ot_uniform(&rs, 0, 5);
      c.s[i] = 1 + (int64_t)ot_uniform(&rs, 0, 4);
      c.d[i] = 1 + (int64_t)ot_uniform(&rs, 0, 3);
      c.pb[i] = (int64_t)ot_uniform(&rs, 0, 5);
      c.pe[i] = (int64_t)ot_uniform(&rs, 0, 5);
      if (out_size(&c, i) < 1 || c.in[i] + c.pb[i] + c.pe[i] < (c.k[i] - 1) * c.d[i] + 1) ok = 0;
    }
    int pointwise = 1;
    for (int i = 0; i < c.nsp; i++) pointwise &= c.k[i] == 1 && c.s[i] == 1 && c.pb[i] == 0 && c.pe[i] == 0;
    if (!ok || pointwise) continue;
    int64_t xs[5], ws[5], ys[5], bs[1] = {c.m};
    shapes(&c, xs, ws, ys);
    em_tensor *x = rand_f32(2 + c.nsp, xs, 100 + it), *w = rand_f32(2 + c.nsp, ws, 200 + it),
              *b = rand_f32(1, bs, 300 + it);
    pg p;
    pg_build(&p, &c, w, it % 2 ? b : NULL);
    char what[256];
    snprintf(what, sizeof what,
             "case %d nsp %d n %lld c %lld m %lld g %lld in %lld,%lld,%lld k %lld,%lld,%lld s %lld,%lld,%lld d "
             "%lld,%lld,%lld pb %lld,%lld,%lld pe %lld,%lld,%lld",
             it, c.nsp, (long long)c.n, (long long)c.c, (long long)c.m, (long long)c.g, (long long)c.in[0],
             (long long)c.in[1], (long long)c.in[2], (long long)c.k[0], (long long)c.k[1], (long long)c.k[2],
             (long long)c.s[0], (long long)c.s[1], (long long)c.s[2], (long long)c.d[0], (long long)c.d[1],
             (long long)c.d[2], (long long)c.pb[0], (long long)c.pb[1], (long long)c.pb[2], (long long)c.pe[0],
             (long long)c.pe[1], (long long)c.pe[2]);
    /* run 0 on one thread, run 1 (the kept weights) on 2 or 3: the same bits (a sweep like this
     * found 1-D layers whose last output oneDNN sums in another order on two threads) */
    em_tensor *first = NULL;
    for (int r = 0; r < 2; r++) {
      assert_int_equal(em_set_num_threads(r ? 2 + it % 2 : 1), EM_OK);
      em_tensor *y = pg_run(&p, x);
      expect_ref(&c, y, x, w, it % 2 ? b : NULL, what);
      if (!r) first = y;
      else {
        if (memcmp(em_tensor_data(first), em_tensor_data(y), (size_t)em_tensor_numel(y) * 4))
          fail_msg("%s: %d threads give other bits than one", what, 2 + it % 2);
        em_tensor_release(y);
      }
    }
    assert_int_equal(em_set_num_threads(0), EM_OK);
    em_tensor_release(first);
    pg_free(&p);
    em_tensor_release(x), em_tensor_release(w), em_tensor_release(b);
  }
}

/* The same bits for 1, 2, 3, 4, 7 threads, on a few larger shapes. */
static void test_thread_bits(void **state) {
  (void)state;
  static const cg cases[] = {
    {.nsp = 2, .n = 2, .c = 64, .m = 64, .g = 1, .in = {28, 28}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1},
     .pb = {1, 1}, .pe = {1, 1}},
    {.nsp = 2, .n = 1, .c = 256, .m = 256, .g = 1, .in = {7, 7}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1},
     .pb = {1, 1}, .pe = {1, 1}},
    {.nsp = 2, .n = 1, .c = 512, .m = 64, .g = 1, .in = {4, 4}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1},
     .pb = {1, 1}, .pe = {1, 1}},
    {.nsp = 2, .n = 4, .c = 3, .m = 64, .g = 1, .in = {56, 56}, .k = {7, 7}, .s = {2, 2}, .d = {1, 1},
     .pb = {3, 3}, .pe = {3, 3}},
    {.nsp = 2, .n = 2, .c = 96, .m = 96, .g = 96, .in = {28, 28}, .k = {3, 3}, .s = {2, 2}, .d = {1, 1},
     .pb = {1, 1}, .pe = {1, 1}},
    {.nsp = 2, .n = 1, .c = 128, .m = 128, .g = 1, .in = {14, 14}, .k = {1, 1}, .s = {2, 2}, .d = {1, 1},
     .pb = {0, 0}, .pe = {0, 0}},
    {.nsp = 1, .n = 3, .c = 1024, .m = 32, .g = 1, .in = {5}, .k = {3}, .s = {1}, .d = {1}, .pb = {1}, .pe = {1}},
    {.nsp = 3, .n = 1, .c = 32, .m = 32, .g = 1, .in = {8, 8, 8}, .k = {3, 3, 3}, .s = {1, 1, 1}, .d = {1, 1, 1},
     .pb = {1, 1, 1}, .pe = {1, 1, 1}},
  };
  static const int threads[] = {1, 2, 3, 4, 7, 16};
  int bad = 0;
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const cg *c = &cases[ci];
    int64_t xs[5], ws[5], ys[5];
    shapes(c, xs, ws, ys);
    em_tensor *x = rand_f32(2 + c->nsp, xs, 500 + ci), *w = rand_f32(2 + c->nsp, ws, 600 + ci);
    pg p;
    pg_build(&p, c, w, NULL);
    em_tensor *first = NULL;
    const size_t nt = RUNNING_ON_VALGRIND ? 3 : sizeof threads / sizeof *threads; /* 1, 2, 3 under valgrind */
    for (size_t t = 0; t < nt; t++) {
      assert_int_equal(em_set_num_threads(threads[t]), EM_OK);
      em_tensor *y = pg_run(&p, x);
      if (!first) {
        first = y;
        expect_ref(c, y, x, w, NULL, "thread bits reference");
        continue;
      }
      if (memcmp(em_tensor_data(first), em_tensor_data(y), (size_t)em_tensor_numel(y) * 4))
        { fprintf(stderr, "case %zu: %d threads differ from 1 thread\n", ci, threads[t]); bad++; }
      em_tensor_release(y);
    }
    assert_int_equal(em_set_num_threads(0), EM_OK);
    em_tensor_release(first);
    pg_free(&p);
    em_tensor_release(x), em_tensor_release(w);
  }
  if (bad) fail_msg("%d thread counts gave other bits", bad);
}

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

/* A graph with a dynamic batch axis run at many batch sizes: the weights' reordered form is
 * kept once (it does not depend on the batch), not once per batch size. */
static void test_kept_weights_per_batch(void **state) {
  (void)state;
  cg c = {.nsp = 2, .n = 1, .c = 256, .m = 256, .g = 1, .in = {3, 3}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1},
          .pb = {1, 1}, .pe = {1, 1}};
  int64_t xs[5], ws[5], ys[5];
  shapes(&c, xs, ws, ys);
  const size_t wbytes = (size_t)prod(ws, 4) * 4; /* 2.4 MB */
  em_tensor *w = rand_f32(4, ws, 71);
  em_graph *g;
  em_var xv, wv, y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t xdyn[4] = {-1, xs[1], xs[2], xs[3]};
  assert_int_equal(em_input(g, "x", EM_F32, 4, xdyn, &xv), EM_OK);
  em_init iw = {.kind = EM_INIT_FROM_DATA, .data = w};
  assert_int_equal(em_parameter(g, "w", EM_F32, 4, ws, &iw, &wv), EM_OK);
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(&c, at, pads);
  em_var in[2] = {xv, wv};
  assert_int_equal(em_apply(g, "convolution", in, 2, at, na, &y, 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
  size_t before = 0;
  const int64_t last = RUNNING_ON_VALGRIND ? 3 : 24; /* valgrind's malloc is not mallinfo2's: no check there */
  for (int64_t n = 1; n <= last; n++) {
    c.n = n;
    shapes(&c, xs, ws, ys);
    em_tensor *x = rand_f32(4, xs, 72 + (uint64_t)n), *out;
    em_feed f = {xv, x};
    assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
    if (n == 1 || n == last) expect_ref(&c, out, x, w, NULL, "dynamic batch");
    em_tensor_release(out), em_tensor_release(x);
    if (n == 1) before = heap_in_use();
  }
  size_t after = heap_in_use();
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(w);
  if (!RUNNING_ON_VALGRIND && after > before + 4 * wbytes)
    fail_msg("23 more batch sizes kept %.1f MB more (the weights are %.1f MB)", (after - before) / 1e6, wbytes / 1e6);
}

/* em_exec_run from inside the caller's own OpenMP parallel region, and the caller's
 * omp_set_num_threads setting afterwards. */
static void test_user_openmp(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 81), *w = rand_f32(4, ws, 82);
  pg p;
  pg_build(&p, &base, w, NULL);
  omp_set_num_threads(5);
  em_tensor *y = pg_run(&p, x);
  expect_ref(&base, y, x, w, NULL, "user's omp setting");
  em_tensor_release(y);
  assert_int_equal(omp_get_max_threads(), 5);
  int bad = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad)
  {
    em_exec *e2;
    if (em_exec_create(p.g, &p.y, 1, em_cpu(), &e2)) bad++;
    else {
      em_feed f = {p.x, x};
      for (int r = 0; r < 5; r++) {
        em_tensor *o = NULL;
        if (em_exec_run(e2, &f, 1, &o)) {
          bad++;
          break;
        }
        double *want = reference(&base, em_tensor_data(x), em_tensor_data(w), NULL);
        int64_t n;
        double *got = ot_values(o, &n);
        for (int64_t i = 0; i < n; i++)
          if (fabs(got[i] - want[i]) > 1e-4 + 1e-4 * fabs(want[i])) {
            bad++;
            break;
          }
        free(got), free(want);
        em_tensor_release(o);
      }
      em_exec_free(e2);
    }
  }
  assert_int_equal(bad, 0);
  assert_int_equal(omp_get_max_threads(), 5);
  omp_set_num_threads(omp_get_num_procs());
  pg_free(&p);
  em_tensor_release(x), em_tensor_release(w);
}

/* A tensor given to em_constant of a graph that is freed since, then fed as a convolution's
 * weights in another graph and changed between that graph's runs: the second run must see the
 * new values (the tensor is the caller's again; nothing marks its changes). */
static void test_constant_tensor_reused_as_feed(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 91), *w = rand_f32(4, ws, 92), *w2 = rand_f32(4, ws, 93);
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(&base, at, pads);
  {
    em_graph *g;
    em_var v[2], y;
    assert_int_equal(em_graph_create(&g), EM_OK);
    assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &v[0]), EM_OK);
    assert_int_equal(em_constant(g, w, &v[1]), EM_OK);
    assert_int_equal(em_apply(g, "convolution", v, 2, at, na, &y, 1), EM_OK);
    em_exec *e;
    assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
    em_feed f = {v[0], x};
    em_tensor *out;
    assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
    expect_ref(&base, out, x, w, NULL, "constant weights");
    em_tensor_release(out);
    em_exec_free(e);
    em_graph_free(g);
  }
  fed_weights_changed(x, w, w2, "fed weights changed in place after the constant's graph was freed");
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(w2);
}

/* A tensor given to em_constant of a graph that is freed since, changed in place (it is the
 * caller's again), then given to em_constant of a new graph: the new graph must use the new
 * values (the first graph's kept form of the weights went with it). */
static void test_constant_tensor_reused_as_constant(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 94), *w = rand_f32(4, ws, 95), *w2 = rand_f32(4, ws, 96);
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(&base, at, pads);
  for (int round = 0; round < 2; round++) {
    if (round) memcpy(em_tensor_data(w), em_tensor_data(w2), (size_t)em_tensor_numel(w) * sizeof(float));
    em_graph *g;
    em_var v[2], y;
    assert_int_equal(em_graph_create(&g), EM_OK);
    assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &v[0]), EM_OK);
    assert_int_equal(em_constant(g, w, &v[1]), EM_OK);
    assert_int_equal(em_apply(g, "convolution", v, 2, at, na, &y, 1), EM_OK);
    em_exec *e;
    assert_int_equal(em_exec_create(g, &y, 1, em_cpu(), &e), EM_OK);
    em_feed f = {v[0], x};
    em_tensor *out;
    assert_int_equal(em_exec_run(e, &f, 1, &out), EM_OK);
    expect_ref(&base, out, x, w, NULL, round ? "a new graph's constant after the caller changed it" : "constant weights");
    em_tensor_release(out);
    em_exec_free(e);
    em_graph_free(g);
  }
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(w2);
}

/* A model's layers on two threads: the first run builds their plans (and the one-thread plans
 * they are checked against), the second builds none (building a plan for two threads once
 * evicted another plan although free slots remained, so every layer was built twice). */
static void test_plans_kept_between_runs(void **state) {
  (void)state;
  enum { LAYERS = 6 };
  pg p[LAYERS];
  em_tensor *x[LAYERS], *w[LAYERS];
  assert_int_equal(em_set_num_threads(2), EM_OK);
  for (int l = 0; l < LAYERS; l++) {
    cg c = base;
    c.in[0] = c.in[1] = 11 + l; /* geometries no other test uses */
    int64_t xs[5], ws[5], ys[5];
    shapes(&c, xs, ws, ys);
    x[l] = rand_f32(4, xs, 700 + (uint64_t)l), w[l] = rand_f32(4, ws, 800 + (uint64_t)l);
    pg_build(&p[l], &c, w[l], NULL);
  }
  uint64_t after_first = 0;
  for (int run = 0; run < 2; run++) {
    for (int l = 0; l < LAYERS; l++) em_tensor_release(pg_run(&p[l], x[l]));
    if (!run) after_first = em_dnnl_plan_builds();
  }
  const uint64_t again = em_dnnl_plan_builds() - after_first;
  assert_int_equal(em_set_num_threads(0), EM_OK);
  for (int l = 0; l < LAYERS; l++) pg_free(&p[l]), em_tensor_release(x[l]), em_tensor_release(w[l]);
  if (again) fail_msg("the second run built %llu plans again", (unsigned long long)again);
}

/* Many geometries from two threads at once (the plan cache evicts while plans are in use). */
typedef struct sweep_arg {
  int seed, bad;
} sweep_arg;

static void *sweep_thread(void *arg) {
  sweep_arg *sa = arg;
  for (int it = 0; it < (RUNNING_ON_VALGRIND ? 8 : 300); it++) {
    cg c = {.nsp = 1, .n = 1, .c = 2, .m = 4, .g = 1, .in = {8 + (it + sa->seed * 7) % 300}, .k = {3}, .s = {1},
            .d = {1}, .pb = {1}, .pe = {1}};
    int64_t xs[5], ws[5], ys[5];
    shapes(&c, xs, ws, ys);
    em_tensor *x = ot_rand(EM_F32, 3, xs, 1000 + (uint64_t)it, -1, 1), *w = ot_rand(EM_F32, 3, ws, 2000 + (uint64_t)it, -1, 1);
    em_tensor *in[2] = {x, w}, *y = NULL;
    em_attr at[8];
    int64_t pads[6];
    int na = conv_attrs(&c, at, pads);
    if (ot_run("convolution", in, 2, at, na, &y, 1)) sa->bad++;
    else {
      double *want = reference(&c, em_tensor_data(x), em_tensor_data(w), NULL);
      int64_t n;
      double *got = ot_values(y, &n);
      for (int64_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > 1e-4 + 1e-4 * fabs(want[i])) {
          sa->bad++;
          break;
        }
      free(got), free(want);
    }
    em_tensor_release(y), em_tensor_release(x), em_tensor_release(w);
  }
  return NULL;
}

static void test_plan_eviction_threads(void **state) {
  (void)state;
  pthread_t t[3];
  sweep_arg a[3] = {{1, 0}, {2, 0}, {3, 0}};
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, sweep_thread, &a[i]);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  assert_int_equal(a[0].bad + a[1].bad + a[2].bad, 0);
}

/* A CPU training step (SGD) changes the weights: the next run's forward uses the new ones. */
static void test_learner_step(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  em_tensor *x = rand_f32(4, xs, 51), *w = rand_f32(4, ws, 52);
  pg p;
  pg_build(&p, &base, w, NULL);
  em_var loss, gw, upd;
  if (em_apply(p.g, "reduce_sum", &p.y, 1, NULL, 0, &loss, 1)) fail_msg("reduce_sum: %s", em_last_error());
  assert_int_equal(em_gradients(p.g, loss, &p.w, 1, &gw), EM_OK);
  em_learner_config cfg;
  assert_int_equal(em_learner_defaults(EM_LEARNER_SGD, 0.1, &cfg), EM_OK);
  em_learner *l;
  assert_int_equal(em_learner_create(&cfg, NULL, &p.w, 1, &l), EM_OK);
  assert_int_equal(em_learner_attach(l, p.g, &gw, &upd), EM_OK);
  em_exec *e;
  em_var outs[2] = {p.y, upd};
  assert_int_equal(em_exec_create(p.g, outs, 2, em_cpu(), &e), EM_OK);
  for (int step = 0; step < 3; step++) {
    em_tensor *wnow;
    assert_int_equal(em_parameter_get(p.g, p.w, em_cpu(), &wnow), EM_OK);
    em_feed f[2] = {{p.x, x}};
    assert_int_equal(em_learner_feed(l, 1, &f[1]), EM_OK);
    em_tensor *o[2];
    if (em_exec_run(e, f, 2, o)) fail_msg("train run: %s", em_last_error());
    assert_int_equal(em_learner_step_done(l, 1), EM_OK);
    expect_ref(&base, o[0], x, wnow, NULL, "forward of a training step");
    em_tensor_release(o[0]), em_tensor_release(o[1]), em_tensor_release(wnow);
  }
  em_exec_free(e);
  em_learner_free(l);
  pg_free(&p);
  em_tensor_release(x), em_tensor_release(w);
}

/* Two convolutions whose weights are the two halves (views) of one constant tensor. */
static void test_weight_views_of_one_constant(void **state) {
  (void)state;
  int64_t xs[5], ws[5], ys[5];
  shapes(&base, xs, ws, ys);
  int64_t big[4] = {2 * ws[0], ws[1], ws[2], ws[3]};
  em_tensor *x = rand_f32(4, xs, 61), *t = rand_f32(4, big, 62), *h[2];
  assert_int_equal(em_tensor_slice(t, 0, 0, ws[0], 1, &h[0]), EM_OK);
  assert_int_equal(em_tensor_slice(t, 0, ws[0], 2 * ws[0], 1, &h[1]), EM_OK);
  em_attr at[8];
  int64_t pads[6];
  int na = conv_attrs(&base, at, pads);
  em_graph *g;
  em_var xv, wv[2], y[2];
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &xv), EM_OK);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(em_constant(g, h[i], &wv[i]), EM_OK);
    em_var in[2] = {xv, wv[i]};
    assert_int_equal(em_apply(g, "convolution", in, 2, at, na, &y[i], 1), EM_OK);
  }
  em_exec *e;
  assert_int_equal(em_exec_create(g, y, 2, em_cpu(), &e), EM_OK);
  em_feed f = {xv, x};
  for (int r = 0; r < 2; r++) {
    em_tensor *o[2];
    assert_int_equal(em_exec_run(e, &f, 1, o), EM_OK);
    for (int i = 0; i < 2; i++) {
      em_tensor *hc;
      assert_int_equal(em_tensor_contiguous(h[i], &hc), EM_OK);
      expect_ref(&base, o[i], x, hc, NULL, i ? "second half" : "first half");
      em_tensor_release(hc), em_tensor_release(o[i]);
    }
  }
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(h[0]), em_tensor_release(h[1]), em_tensor_release(t), em_tensor_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_param_set),
    cmocka_unit_test(test_learner_step),
    cmocka_unit_test(test_clone),
    cmocka_unit_test(test_computed_weights),
    cmocka_unit_test(test_fed_weights),
    cmocka_unit_test(test_shared_weights_two_geometries),
    cmocka_unit_test(test_weight_views_of_one_constant),
    cmocka_unit_test(test_geometry_sweep),
    cmocka_unit_test(test_thread_bits),
    cmocka_unit_test(test_kept_weights_per_batch),
    cmocka_unit_test(test_user_openmp),
    cmocka_unit_test(test_constant_tensor_reused_as_feed),
    cmocka_unit_test(test_constant_tensor_reused_as_constant),
    cmocka_unit_test(test_plans_kept_between_runs),
    cmocka_unit_test(test_plan_eviction_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
