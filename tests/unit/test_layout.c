/* Channels-last values (engine/layout.c, exec.c plan_layouts / choose_layouts, op.h's layout
 * member): in fast mode on the CPU a chain of oneDNN convolutions, element-wise ops and pools
 * keeps NHWC memory under NCHW shapes. Expected values come from plain loops in this file (a
 * float64 evaluation of the same graph, a plain transpose), never from Ember. Every graph test
 * also checks em_exec_stats: channels-last steps where the layout must be used (so the tests
 * fail if the feature silently turns off), none with EMBER_CHANNELS_LAST=0, in portable mode
 * or without oneDNN, and the outputs delivered contiguous. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/valgrind.h>

#include "op.h"
#include "op_testkit.h"
#include "run_self.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

static int dnnl_used(void) {
  char line[600];
  em_cpu_conv_info(line, sizeof line);
  return !strncmp(line, "oneDNN ", 7);
}

#define NEED_DNNL()                                                                      \
  do {                                                                                   \
    if (!dnnl_used()) {                                                                  \
      char line_[600];                                                                   \
      em_cpu_conv_info(line_, sizeof line_);                                             \
      printf("# skipped: channels-last values need oneDNN, and it is %s\n", line_);      \
      skip();                                                                            \
    }                                                                                    \
  } while (0)

/* ============================================================ layout.c === */

static int64_t prod(const int64_t *d, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= d[i];
  return p;
}

/* A channels-last view of shape s (N, C, spatial...): an N x spatial x C tensor permuted. */
static em_tensor *nhwc_view(em_dtype dt, int nd, const int64_t *s) {
  int64_t b[EM_MAX_DIMS];
  int perm[EM_MAX_DIMS];
  b[0] = s[0], b[nd - 1] = s[1];
  for (int i = 2; i < nd; i++) b[i - 1] = s[i];
  perm[0] = 0, perm[1] = nd - 1;
  for (int i = 2; i < nd; i++) perm[i] = i - 1;
  em_tensor *base = NULL, *v = NULL;
  assert_int_equal(em_tensor_zeros(em_cpu(), dt, nd, b, &base), EM_OK);
  assert_int_equal(em_tensor_permute(base, perm, &v), EM_OK);
  em_tensor_release(base);
  return v;
}

static void test_is_channels_last(void **state) {
  (void)state;
  const int64_t s4[4] = {2, 3, 4, 5};
  em_tensor *c = NULL, *v = nhwc_view(EM_F32, 4, s4), *t = NULL;
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 4, s4, &c), EM_OK);
  assert_false(em_tensor_is_channels_last(c)); /* NCHW: the channel stride is H*W */
  assert_true(em_tensor_is_channels_last(v));
  assert_false(em_tensor_is_contiguous(v));
  /* N H W C permuted as N C W H: the spatial axes out of order */
  int pw[4] = {0, 1, 3, 2};
  assert_int_equal(em_tensor_permute(v, pw, &t), EM_OK);
  assert_false(em_tensor_is_channels_last(t));
  em_tensor_release(t);
  /* a slice of the channels: C no longer spans the pixel stride */
  assert_int_equal(em_tensor_slice(v, 1, 0, 2, 1, &t), EM_OK);
  assert_false(em_tensor_is_channels_last(t));
  em_tensor_release(t);
  /* every other column: W's stride is 2C */
  assert_int_equal(em_tensor_slice(v, 3, 0, 5, 2, &t), EM_OK);
  assert_false(em_tensor_is_channels_last(t));
  em_tensor_release(t);
  /* one batch item of a channels-last tensor still is one (N = 1 takes any stride) */
  assert_int_equal(em_tensor_slice(v, 0, 1, 2, 1, &t), EM_OK);
  assert_true(em_tensor_is_channels_last(t));
  em_tensor_release(t);
  em_tensor_release(c), em_tensor_release(v);
  /* size-1 axes: C = 1 or 1x1 spatial are both layouts at once */
  const int64_t c1[4] = {2, 1, 4, 5}, s11[4] = {2, 7, 1, 1}, n1[4] = {1, 3, 4, 5};
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 4, c1, &c), EM_OK);
  assert_true(em_tensor_is_channels_last(c)), em_tensor_release(c);
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 4, s11, &c), EM_OK);
  assert_true(em_tensor_is_channels_last(c)), em_tensor_release(c);
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 4, n1, &c), EM_OK);
  assert_false(em_tensor_is_channels_last(c)), em_tensor_release(c);
  v = nhwc_view(EM_F32, 4, n1);
  assert_true(em_tensor_is_channels_last(v)), em_tensor_release(v);
  /* rank 2 never; a zero-size tensor never */
  const int64_t s2[2] = {3, 4}, z[4] = {2, 0, 3, 3};
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 2, s2, &c), EM_OK);
  assert_false(em_tensor_is_channels_last(c)), em_tensor_release(c);
  v = nhwc_view(EM_F32, 4, z);
  assert_false(em_tensor_is_channels_last(v)), em_tensor_release(v);
  /* ranks 3 and 5 */
  const int64_t s3[3] = {2, 3, 7}, s5[5] = {2, 3, 4, 5, 6};
  v = nhwc_view(EM_F64, 3, s3);
  assert_true(em_tensor_is_channels_last(v) && !em_tensor_is_contiguous(v)), em_tensor_release(v);
  v = nhwc_view(EM_U8, 5, s5);
  assert_true(em_tensor_is_channels_last(v) && !em_tensor_is_contiguous(v)), em_tensor_release(v);
  /* an expanded (stride 0) tensor is not one */
  const int64_t e1[4] = {1, 3, 1, 1}, e4[4] = {2, 3, 4, 5};
  assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 4, e1, &c), EM_OK);
  assert_int_equal(em_tensor_expand(c, 4, e4, &t), EM_OK);
  assert_false(em_tensor_is_channels_last(t));
  em_tensor_release(t), em_tensor_release(c);
}

static void test_empty_channels_last(void **state) {
  (void)state;
  const int64_t dims[3][5] = {{2, 5, 9}, {2, 3, 33, 17}, {2, 4, 3, 5, 6}};
  for (int r = 0; r < 3; r++) {
    const int nd = r + 3;
    em_shape s = {.dtype = EM_F32, .ndim = nd};
    memcpy(s.dims, dims[r], sizeof(int64_t) * (size_t)nd);
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_empty_channels_last(em_cpu(), &s, &t), EM_OK);
    assert_int_equal(em_tensor_ndim(t), nd);
    assert_memory_equal(em_tensor_shape(t), dims[r], sizeof(int64_t) * (size_t)nd);
    assert_true(em_tensor_is_channels_last(t));
    assert_false(em_tensor_is_contiguous(t));
    /* strides by hand: C 1, last spatial C, ..., N C*spatial */
    const int64_t *st = em_tensor_strides(t);
    int64_t want = dims[r][1];
    assert_int_equal(st[1], 1);
    for (int i = nd - 1; i >= 2; i--) assert_int_equal(st[i], want), want *= dims[r][i];
    assert_int_equal(st[0], want);
    em_tensor_release(t);
  }
  em_shape s2 = {.dtype = EM_F32, .ndim = 2, .dims = {3, 4}};
  em_tensor *t = NULL;
  assert_int_equal(em_tensor_empty_channels_last(em_cpu(), &s2, &t), EM_OK);
  assert_true(em_tensor_is_contiguous(t));
  em_tensor_release(t);
}

/* The value each element of the transpose test holds: distinct per (n, c, pixel), exact in
 * every dtype (u8 and bool wrap or clip to what a byte holds). */
static double pattern(em_dtype dt, int64_t n, int64_t c, int64_t p) {
  const int64_t k = n * 7919 + c * 131 + p * 3 + 1;
  switch (dt) {
  case EM_U8: return (double)(k % 251);
  case EM_BOOL: return (double)((n + c * 3 + p) % 3 == 0);
  case EM_I32: return (double)(k * (k % 2 ? -1 : 1));
  default: return (double)k * 0.25 - 1000.0;
  }
}

static void poke(em_dtype dt, void *base, int64_t i, double v) {
  switch (dt) {
  case EM_F32: ((float *)base)[i] = (float)v; break;
  case EM_F64: ((double *)base)[i] = v; break;
  case EM_I32: ((int32_t *)base)[i] = (int32_t)v; break;
  default: ((uint8_t *)base)[i] = (uint8_t)v; break;
  }
}

static void test_from_channels_last_transposes(void **state) {
  (void)state;
  const int64_t cases[][5] = {
      {2, 3, 33, 17, 0}, {2, 37, 65, 0, 0}, {2, 5, 3, 7, 9}, {1, 33, 5, 7, 0}, {3, 40, 33, 17, 0}, /* parallel path */
      {2, 64, 1, 0, 0},  {2, 3, 1, 1, 0},
  };
  const int nds[] = {4, 3, 5, 4, 4, 3, 4};
  const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_U8, EM_BOOL};
  for (size_t ci = 0; ci < sizeof nds / sizeof *nds; ci++)
    for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
      const int nd = nds[ci];
      const em_dtype dt = dts[di];
      const int64_t *s = cases[ci];
      if (RUNNING_ON_VALGRIND && ci == 4 && di > 0) continue;
      em_tensor *v = nhwc_view(dt, nd, s), *y = NULL;
      const int64_t n = s[0], c = s[1], planes = prod(s + 2, nd - 2);
      /* write the NHWC memory directly: item, pixel, channel */
      void *mem = em_tensor_data(v);
      for (int64_t b = 0; b < n; b++)
        for (int64_t p = 0; p < planes; p++)
          for (int64_t k = 0; k < c; k++) poke(dt, mem, (b * planes + p) * c + k, pattern(dt, b, k, p));
      assert_int_equal(em_tensor_from_channels_last(v, &y), EM_OK);
      assert_true(em_tensor_is_contiguous(y));
      assert_int_equal(em_tensor_dtype(y), dt);
      assert_memory_equal(em_tensor_shape(y), s, sizeof(int64_t) * (size_t)nd);
      int64_t cnt;
      double *got = ot_values(y, &cnt);
      assert_int_equal(cnt, n * c * planes);
      for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < c; k++)
          for (int64_t p = 0; p < planes; p++) {
            double want = pattern(dt, b, k, p);
            if (dt == EM_F32) want = (float)want;
            if (dt == EM_U8) want = (uint8_t)want;
            if (got[(b * c + k) * planes + p] != want)
              fail_msg("case %zu dtype %s: y[%ld,%ld,pixel %ld] = %g, expected %g", ci, em_dtype_name(dt), (long)b,
                       (long)k, (long)p, got[(b * c + k) * planes + p], want);
          }
      free(got);
      em_tensor_release(y), em_tensor_release(v);
    }
}

/* A contiguous or other strided tensor goes through em_tensor_contiguous: same values. */
static void test_from_channels_last_other_layouts(void **state) {
  (void)state;
  const int64_t s[4] = {2, 3, 4, 5};
  em_tensor *x = ot_rand(EM_F32, 4, s, 3, -1, 1), *y = NULL, *t = NULL;
  assert_int_equal(em_tensor_from_channels_last(x, &y), EM_OK);
  assert_true(em_tensor_is_contiguous(y));
  assert_memory_equal(em_tensor_data(y), em_tensor_data(x), sizeof(float) * 120);
  em_tensor_release(y);
  int perm[4] = {0, 1, 3, 2}; /* N C W H: not channels-last */
  assert_int_equal(em_tensor_permute(x, perm, &t), EM_OK);
  assert_int_equal(em_tensor_from_channels_last(t, &y), EM_OK);
  assert_true(em_tensor_is_contiguous(y));
  const float *xf = em_tensor_data(x), *yf = em_tensor_data(y);
  for (int n = 0; n < 2; n++)
    for (int c = 0; c < 3; c++)
      for (int w = 0; w < 5; w++)
        for (int h = 0; h < 4; h++)
          assert_true(yf[((n * 3 + c) * 5 + w) * 4 + h] == xf[((n * 3 + c) * 4 + h) * 5 + w]);
  em_tensor_release(y), em_tensor_release(t), em_tensor_release(x);
}

/* ===================================================== graph machinery === */

/* A graph recorded twice: built with Ember's public API, and kept as a list of nodes that
 * evaluate() computes in float64 with the loops below. */
enum kind { K_IN, K_LEAF, K_CONV, K_UN, K_BIN, K_GAP, K_MAXP, K_CAT, K_FLAT };
enum un { U_RELU, U_SIGMOID, U_CLIP, U_NEG, U_ABS };
enum bin { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_LESS, B_GREATER, B_AND };
static const char *const UN_NAMES[] = {"relu", "sigmoid", "clip", "neg", "abs"};
static const char *const BIN_NAMES[] = {"add", "sub", "mul", "div", "max", "less", "greater", "and"};

#define MAXN 48
typedef struct rt {
  int nd;
  int64_t d[EM_MAX_DIMS];
  double *v;
} rt;

typedef struct node {
  enum kind kind;
  int a, b, c; /* input nodes (-1: none) */
  int op;
  double lo, hi;
  int64_t s, pad, group, k, axis; /* max_pool: group holds the dilation, axis ceil_mode */
  rt leaf; /* K_LEAF's values (also K_IN's declared shape) */
} node;

typedef struct net {
  em_graph *g;
  em_dtype dt;
  node nodes[MAXN];
  em_var vars[MAXN];
  int nn, in_node;
  rt r[MAXN]; /* evaluate()'s results */
  uint64_t seed;
} net;

static int64_t rt_numel(const rt *r) { return prod(r->d, r->nd); }

static rt rt_alloc(int nd, const int64_t *d) {
  rt r = {.nd = nd};
  memcpy(r.d, d, sizeof(int64_t) * (size_t)nd);
  int64_t n = rt_numel(&r);
  r.v = calloc((size_t)(n ? n : 1), sizeof(double));
  assert_non_null(r.v);
  return r;
}

static rt rt_of(const em_tensor *t) {
  rt r = {.nd = em_tensor_ndim(t)};
  memcpy(r.d, em_tensor_shape(t), sizeof(int64_t) * (size_t)r.nd);
  int64_t n;
  r.v = ot_values(t, &n);
  return r;
}

static void net_init(net *p, em_dtype dt, int nd, const int64_t *shape, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->dt = dt;
  p->seed = seed;
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  node *n = &p->nodes[0];
  n->kind = K_IN, n->a = n->b = n->c = -1;
  n->leaf.nd = nd;
  memcpy(n->leaf.d, shape, sizeof(int64_t) * (size_t)nd);
  assert_int_equal(em_input(p->g, "x", dt, nd, shape, &p->vars[0]), EM_OK);
  p->nn = 1, p->in_node = 0;
}

static void net_free_results(net *p) {
  for (int i = 0; i < p->nn; i++) free(p->r[i].v), p->r[i].v = NULL;
}

static void net_free(net *p) {
  net_free_results(p);
  for (int i = 0; i < p->nn; i++) free(p->nodes[i].leaf.v);
  em_graph_free(p->g);
}

static int add_node(net *p, node n, em_var v) {
  assert_true(p->nn < MAXN);
  p->nodes[p->nn] = n;
  p->vars[p->nn] = v;
  return p->nn++;
}

/* A parameter of random values (uniform in [-r, r]). */
static int net_param(net *p, int nd, const int64_t *shape, double r) {
  em_tensor *t = ot_rand(p->dt, nd, shape, p->seed++, -r, r);
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
  em_var v;
  char name[16];
  snprintf(name, sizeof name, "p%d", p->nn);
  assert_int_equal(em_parameter(p->g, name, p->dt, nd, shape, &init, &v), EM_OK);
  node n = {.kind = K_LEAF, .a = -1, .b = -1, .c = -1, .leaf = rt_of(t)};
  em_tensor_release(t);
  return add_node(p, n, v);
}

/* A constant of random values of dtype dt. */
static int net_const(net *p, em_dtype dt, int nd, const int64_t *shape, double lo, double hi) {
  em_tensor *t = ot_rand(dt, nd, shape, p->seed++, lo, hi);
  em_var v;
  assert_int_equal(em_constant(p->g, t, &v), EM_OK);
  node n = {.kind = K_LEAF, .a = -1, .b = -1, .c = -1, .leaf = rt_of(t)};
  em_tensor_release(t);
  return add_node(p, n, v);
}

/* convolution of node x: m output channels, kernel k (every spatial axis), stride s, pads pad
 * on both sides, group; with a bias when bias. */
static int net_conv(net *p, int x, int64_t m, int64_t k, int64_t s, int64_t pad, int64_t group, int bias) {
  em_dtype dt;
  int nd;
  int64_t xs[EM_MAX_DIMS];
  assert_int_equal(em_var_info(p->g, p->vars[x], &dt, &nd, xs), EM_OK);
  const int nsp = nd - 2;
  int64_t ws[EM_MAX_DIMS] = {m, xs[1] / group}, bs[1] = {m}, st[3], pads[6];
  for (int i = 0; i < nsp; i++) ws[2 + i] = k, st[i] = s, pads[i] = pads[nsp + i] = pad;
  const double r = 1.0 / sqrt((double)(ws[1] * prod(ws + 2, nsp)));
  const int w = net_param(p, nd, ws, r), b = bias ? net_param(p, 1, bs, 0.5) : -1;
  em_attr at[3] = {AIS("strides", st, nsp), AIS("pads", pads, 2 * nsp), AI("group", group)};
  em_var in[3] = {p->vars[x], p->vars[w], bias ? p->vars[b] : -1}, y;
  if (em_apply(p->g, "convolution", in, bias ? 3 : 2, at, 3, &y, 1)) fail_msg("convolution: %s", em_last_error());
  node n = {.kind = K_CONV, .a = x, .b = w, .c = b, .s = s, .pad = pad, .group = group, .k = k};
  return add_node(p, n, y);
}

static int net_unary(net *p, enum un op, int x) {
  em_attr at[2] = {AF("min", -0.25), AF("max", 0.5)};
  em_var y;
  if (em_apply(p->g, UN_NAMES[op], &p->vars[x], 1, at, op == U_CLIP ? 2 : 0, &y, 1))
    fail_msg("%s: %s", UN_NAMES[op], em_last_error());
  node n = {.kind = K_UN, .a = x, .b = -1, .c = -1, .op = op, .lo = -0.25, .hi = 0.5};
  return add_node(p, n, y);
}

static int net_bin(net *p, enum bin op, int x, int y) {
  em_var in[2] = {p->vars[x], p->vars[y]}, z;
  if (em_apply(p->g, BIN_NAMES[op], in, 2, NULL, 0, &z, 1)) fail_msg("%s: %s", BIN_NAMES[op], em_last_error());
  node n = {.kind = K_BIN, .a = x, .b = y, .c = -1, .op = op};
  return add_node(p, n, z);
}

static int net_gap(net *p, int x) {
  em_var y;
  assert_int_equal(em_apply(p->g, "global_average_pool", &p->vars[x], 1, NULL, 0, &y, 1), EM_OK);
  node n = {.kind = K_GAP, .a = x, .b = -1, .c = -1};
  return add_node(p, n, y);
}

/* max_pool of node x: kernel k, strides s, pads pad (both sides), dilation dil, ceil_mode
 * ceil, on every spatial axis */
static int net_maxpool_full(net *p, int x, int64_t k, int64_t s, int64_t pad, int64_t dil, int ceil) {
  em_dtype dt;
  int nd;
  int64_t xs[EM_MAX_DIMS], ks[3], ss[3], ds[3], ps[6];
  assert_int_equal(em_var_info(p->g, p->vars[x], &dt, &nd, xs), EM_OK);
  const int nsp = nd - 2;
  for (int i = 0; i < nsp; i++) ks[i] = k, ss[i] = s, ds[i] = dil, ps[i] = ps[nsp + i] = pad;
  em_attr at[5] = {AIS("kernel_shape", ks, nsp), AIS("strides", ss, nsp), AIS("pads", ps, 2 * nsp),
                   AIS("dilations", ds, nsp), AI("ceil_mode", ceil)};
  em_var y;
  if (em_apply(p->g, "max_pool", &p->vars[x], 1, at, 5, &y, 1)) fail_msg("max_pool: %s", em_last_error());
  node n = {.kind = K_MAXP, .a = x, .b = -1, .c = -1, .k = k, .s = s, .pad = pad, .group = dil, .axis = ceil};
  return add_node(p, n, y);
}

static int net_maxpool(net *p, int x, int64_t k, int64_t s) { return net_maxpool_full(p, x, k, s, 0, 1, 0); }

static int net_concat(net *p, int x, int y, int64_t axis) {
  em_var in[2] = {p->vars[x], p->vars[y]}, z;
  em_attr at = AI("axis", axis);
  if (em_apply(p->g, "concat", in, 2, &at, 1, &z, 1)) fail_msg("concat: %s", em_last_error());
  node n = {.kind = K_CAT, .a = x, .b = y, .c = -1, .axis = axis};
  return add_node(p, n, z);
}

static int net_flatten(net *p, int x) {
  em_attr at = AI("axis", 1);
  em_var y;
  assert_int_equal(em_apply(p->g, "flatten", &p->vars[x], 1, &at, 1, &y, 1), EM_OK);
  node n = {.kind = K_FLAT, .a = x, .b = -1, .c = -1};
  return add_node(p, n, y);
}

/* ----------------------------------------------------- float64 loops --- */

static rt ref_conv(const rt *x, const rt *w, const rt *b, int64_t s, int64_t pad, int64_t g) {
  const int nsp = x->nd - 2;
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, o[3] = {1, 1, 1}, ss[3] = {1, 1, 1}, pp[3] = {0, 0, 0};
  int64_t yd[EM_MAX_DIMS] = {x->d[0], w->d[0]};
  for (int i = 0; i < nsp; i++) {
    in[i] = x->d[2 + i], k[i] = w->d[2 + i], ss[i] = s, pp[i] = pad;
    o[i] = yd[2 + i] = (in[i] + 2 * pad - k[i]) / s + 1;
  }
  rt y = rt_alloc(x->nd, yd);
  const int64_t N = x->d[0], C = x->d[1], M = w->d[0], cg = C / g, mg = M / g;
  double *out = y.v;
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t o0 = 0; o0 < o[0]; o0++)
        for (int64_t o1 = 0; o1 < o[1]; o1++)
          for (int64_t o2 = 0; o2 < o[2]; o2++) {
            double acc = b ? b->v[m] : 0;
            const int64_t c0 = m / mg * cg;
            for (int64_t c = 0; c < cg; c++)
              for (int64_t k0 = 0; k0 < k[0]; k0++)
                for (int64_t k1 = 0; k1 < k[1]; k1++)
                  for (int64_t k2 = 0; k2 < k[2]; k2++) {
                    const int64_t i0 = o0 * ss[0] - pp[0] + k0, i1 = o1 * ss[1] - pp[1] + k1, i2 = o2 * ss[2] - pp[2] + k2;
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    acc += x->v[(((n * C + c0 + c) * in[0] + i0) * in[1] + i1) * in[2] + i2] *
                           w->v[(((m * cg + c) * k[0] + k0) * k[1] + k1) * k[2] + k2];
                  }
            *out++ = acc;
          }
  return y;
}

static double un_of(enum un op, double v, double lo, double hi) {
  switch (op) {
  case U_RELU: return v > 0 ? v : 0;
  case U_SIGMOID: return 1.0 / (1.0 + exp(-v));
  case U_CLIP: return v < lo ? lo : v > hi ? hi : v;
  case U_NEG: return -v;
  default: return fabs(v);
  }
}

static double bin_of(enum bin op, double a, double b) {
  switch (op) {
  case B_ADD: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  case B_DIV: return a / b;
  case B_MAX: return a > b ? a : b;
  case B_LESS: return a < b;
  case B_GREATER: return a > b;
  default: return a != 0 && b != 0;
  }
}

/* numpy broadcasting: shapes aligned on the right */
static rt ref_bin(enum bin op, const rt *a, const rt *b) {
  const int nd = a->nd > b->nd ? a->nd : b->nd;
  int64_t d[EM_MAX_DIMS], sa[EM_MAX_DIMS], sb[EM_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    const int ia = i - (nd - a->nd), ib = i - (nd - b->nd);
    const int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    d[i] = da > db ? da : db;
  }
  int64_t ra = 1, rb = 1;
  for (int i = nd - 1; i >= 0; i--) {
    const int ia = i - (nd - a->nd), ib = i - (nd - b->nd);
    const int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    sa[i] = da == 1 ? 0 : ra, sb[i] = db == 1 ? 0 : rb;
    ra *= da, rb *= db;
  }
  rt y = rt_alloc(nd, d);
  const int64_t n = rt_numel(&y);
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int k = nd - 1; k >= 0; k--) {
      const int64_t c = rem % d[k];
      rem /= d[k];
      oa += c * sa[k], ob += c * sb[k];
    }
    y.v[i] = bin_of(op, a->v[oa], b->v[ob]);
  }
  return y;
}

static void evaluate(net *p, const em_tensor *x) {
  net_free_results(p);
  for (int i = 0; i < p->nn; i++) {
    const node *n = &p->nodes[i];
    const rt *A = n->a >= 0 ? &p->r[n->a] : NULL, *B = n->b >= 0 ? &p->r[n->b] : NULL;
    switch (n->kind) {
    case K_IN: p->r[i] = rt_of(x); break;
    case K_LEAF:
      p->r[i] = rt_alloc(n->leaf.nd, n->leaf.d);
      memcpy(p->r[i].v, n->leaf.v, sizeof(double) * (size_t)rt_numel(&n->leaf));
      break;
    case K_CONV: p->r[i] = ref_conv(A, B, n->c >= 0 ? &p->r[n->c] : NULL, n->s, n->pad, n->group); break;
    case K_UN:
      p->r[i] = rt_alloc(A->nd, A->d);
      for (int64_t k = 0; k < rt_numel(A); k++) p->r[i].v[k] = un_of((enum un)n->op, A->v[k], n->lo, n->hi);
      break;
    case K_BIN: p->r[i] = ref_bin((enum bin)n->op, A, B); break;
    case K_GAP: {
      int64_t d[EM_MAX_DIMS];
      for (int k = 0; k < A->nd; k++) d[k] = k < 2 ? A->d[k] : 1;
      p->r[i] = rt_alloc(A->nd, d);
      const int64_t planes = prod(A->d + 2, A->nd - 2);
      for (int64_t k = 0; k < A->d[0] * A->d[1]; k++) {
        double s = 0;
        for (int64_t q = 0; q < planes; q++) s += A->v[k * planes + q];
        p->r[i].v[k] = s / (double)planes;
      }
      break;
    }
    case K_MAXP: {
      const int nsp = A->nd - 2;
      const int64_t K = n->k, S = n->s, P = n->pad, D = n->group;
      int64_t in[3] = {1, 1, 1}, o[3] = {1, 1, 1}, d[EM_MAX_DIMS] = {A->d[0], A->d[1]};
      for (int q = 0; q < nsp; q++) {
        const int64_t span = in[q] = A->d[2 + q], ext = (K - 1) * D + 1, num = span + 2 * P - ext;
        o[q] = d[2 + q] = (n->axis ? (num + S - 1) / S : num / S) + 1;
      }
      p->r[i] = rt_alloc(A->nd, d);
      double *out = p->r[i].v;
      const int64_t k1 = nsp > 1 ? K : 1, k2 = nsp > 2 ? K : 1;
      for (int64_t pl = 0; pl < A->d[0] * A->d[1]; pl++)
        for (int64_t o0 = 0; o0 < o[0]; o0++)
          for (int64_t o1 = 0; o1 < o[1]; o1++)
            for (int64_t o2 = 0; o2 < o[2]; o2++) {
              double m = -INFINITY;
              for (int64_t a = 0; a < K; a++)
                for (int64_t b = 0; b < k1; b++)
                  for (int64_t c = 0; c < k2; c++) {
                    const int64_t i0 = o0 * S - P + a * D;
                    const int64_t i1 = nsp > 1 ? o1 * S - P + b * D : 0, i2 = nsp > 2 ? o2 * S - P + c * D : 0;
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const double v = A->v[((pl * in[0] + i0) * in[1] + i1) * in[2] + i2];
                    if (v > m) m = v;
                  }
              *out++ = m;
            }
      break;
    }
    case K_CAT: {
      int64_t d[EM_MAX_DIMS];
      memcpy(d, A->d, sizeof d);
      const int ax = (int)n->axis;
      d[ax] = A->d[ax] + B->d[ax];
      p->r[i] = rt_alloc(A->nd, d);
      const int64_t outer = prod(A->d, ax), ia = prod(A->d + ax, A->nd - ax), ib = prod(B->d + ax, B->nd - ax);
      for (int64_t q = 0; q < outer; q++) {
        memcpy(p->r[i].v + q * (ia + ib), A->v + q * ia, sizeof(double) * (size_t)ia);
        memcpy(p->r[i].v + q * (ia + ib) + ia, B->v + q * ib, sizeof(double) * (size_t)ib);
      }
      break;
    }
    case K_FLAT: {
      const int64_t d[2] = {A->d[0], prod(A->d + 1, A->nd - 1)};
      p->r[i] = rt_alloc(2, d);
      memcpy(p->r[i].v, A->v, sizeof(double) * (size_t)rt_numel(A));
      break;
    }
    }
  }
}

/* ---------------------------------------------------------------- runs --- */

typedef struct run_opts {
  em_mode mode;
  int threads;       /* 0: leave */
  int cl_off;        /* EMBER_CHANNELS_LAST=0 when the executor is created */
} run_opts;

/* Runs the net once on x with outputs outs (nodes); got[i] receive the outputs. */
static void net_run(net *p, const int *outs, int n_out, const em_tensor *x, const run_opts *o, em_tensor **got,
                    em_exec_stats *st) {
  em_var ov[8];
  for (int i = 0; i < n_out; i++) ov[i] = p->vars[outs[i]];
  if (o && o->cl_off) setenv("EMBER_CHANNELS_LAST", "0", 1);
  em_exec *e = NULL;
  em_status s = em_exec_create(p->g, ov, n_out, em_cpu(), &e);
  if (o && o->cl_off) unsetenv("EMBER_CHANNELS_LAST");
  if (s) fail_msg("em_exec_create: %s", em_last_error());
  assert_int_equal(em_exec_set_mode(e, o ? o->mode : EM_MODE_FAST), EM_OK);
  if (o && o->threads) em_set_num_threads(o->threads);
  em_feed f = {p->vars[p->in_node], x};
  s = em_exec_run(e, &f, 1, got);
  if (o && o->threads) em_set_num_threads(0);
  if (s) fail_msg("em_exec_run: %s", em_last_error());
  if (st) assert_int_equal(em_exec_stats_get(e, st), EM_OK);
  em_exec_free(e);
}

/* got (an output tensor) is contiguous, has the reference's shape and values within tol. */
static void expect_ref(const net *p, int node_i, const em_tensor *got, double tol, const char *what) {
  const rt *r = &p->r[node_i];
  char msg[160];
  if (!em_tensor_is_contiguous(got)) fail_msg("%s: output (node %d) delivered non-contiguous", what, node_i);
  snprintf(msg, sizeof msg, "%s (node %d)", what, node_i);
  ot_expect_shape(got, em_tensor_dtype(got), r->nd, r->d, msg);
  int64_t n;
  double *v = ot_values(got, &n);
  ot_expect_close(v, r->v, n, tol, tol, msg);
  free(v);
}

static em_tensor *input_of(const net *p, const int64_t *shape, uint64_t seed) {
  return ot_rand(p->dt, p->nodes[0].leaf.nd, shape, seed, -1.5, 1.5);
}

/* The common check: fast mode matches the reference with channels-last steps (want_cl: at
 * least that many; -1 don't care), and so do EMBER_CHANNELS_LAST=0 and portable mode with
 * none. Returns the fast run's stats. */
static em_exec_stats check_net(net *p, const int *outs, int n_out, const int64_t *xshape, int want_cl, double tol,
                               const char *what) {
  em_tensor *x = input_of(p, xshape, 4242);
  evaluate(p, x);
  em_exec_stats fast = {0}, st = {0};
  em_tensor *got[8] = {0};
  char w[160];
  const run_opts modes[3] = {{EM_MODE_FAST, 0, 0}, {EM_MODE_FAST, 0, 1}, {EM_MODE_PORTABLE, 0, 0}};
  const char *const names[3] = {"fast", "EMBER_CHANNELS_LAST=0", "portable"};
  for (int m = 0; m < 3; m++) {
    net_run(p, outs, n_out, x, &modes[m], got, &st);
    snprintf(w, sizeof w, "%s, %s", what, names[m]);
    for (int i = 0; i < n_out; i++) expect_ref(p, outs[i], got[i], tol, w), em_tensor_release(got[i]);
    if (m == 0) {
      fast = st;
      if (want_cl >= 0 && st.channels_last_steps < want_cl)
        fail_msg("%s: %d channels-last steps, expected at least %d", w, st.channels_last_steps, want_cl);
    } else if (st.channels_last_steps || st.layout_copies) {
      fail_msg("%s: %d channels-last steps and %lu layout copies, expected none", w, st.channels_last_steps,
               (unsigned long)st.layout_copies);
    }
  }
  em_tensor_release(x);
  return fast;
}

/* ======================================================== graph tests === */

/* stem conv -> pointwise (expand) -> clip -> depthwise 3x3 -> clip -> pointwise (project) ->
 * residual add with the stem's output -> relu (the add's output read by an element-wise op) */
static void test_mobilenet_block(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 13, 11};
  net p;
  net_init(&p, EM_F32, 4, xs, 1);
  const int stem = net_conv(&p, 0, 8, 3, 1, 1, 1, 1);
  const int e = net_unary(&p, U_CLIP, net_conv(&p, stem, 24, 1, 1, 0, 1, 1));
  const int dw = net_unary(&p, U_CLIP, net_conv(&p, e, 24, 3, 1, 1, 24, 1));
  const int pr = net_conv(&p, dw, 8, 1, 1, 0, 1, 0);
  const int out = net_conv(&p, net_unary(&p, U_RELU, net_bin(&p, B_ADD, pr, stem)), 5, 3, 2, 1, 1, 1);
  em_exec_stats st = check_net(&p, &out, 1, xs, 4, 1e-4, "MobileNet block");
  assert_int_equal(st.layout_copies, 0);
  net_free(&p);
}

/* conv -> y; s = sigmoid(conv1x1(relu(conv1x1(gap(y))))); y * s (both orders) -> conv */
static void test_se_block(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 4, 9, 10};
  for (int order = 0; order < 2; order++) {
    net p;
    net_init(&p, EM_F32, 4, xs, 20 + (uint64_t)order);
    const int y = net_unary(&p, U_RELU, net_conv(&p, 0, 16, 3, 1, 1, 1, 1));
    const int sq = net_unary(&p, U_RELU, net_conv(&p, net_gap(&p, y), 4, 1, 1, 0, 1, 1));
    const int s = net_unary(&p, U_SIGMOID, net_conv(&p, sq, 16, 1, 1, 0, 1, 1));
    const int m = order ? net_bin(&p, B_MUL, s, y) : net_bin(&p, B_MUL, y, s);
    const int out = net_conv(&p, m, 6, 1, 1, 0, 1, 0);
    check_net(&p, &out, 1, xs, 2, 1e-4, order ? "SE block, s * y" : "SE block, y * s");
    net_free(&p);
  }
}

/* x * sigmoid(x) on a convolution's output, the product read by a convolution; also with the
 * convolution's output read a third time (no fusion: the ops run as steps on the layout) */
static void test_swish(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {1, 5, 12, 7};
  for (int variant = 0; variant < 2; variant++) {
    net p;
    net_init(&p, EM_F32, 4, xs, 30 + (uint64_t)variant);
    const int y = net_conv(&p, 0, 12, 3, 1, 1, 1, 1);
    int sw = net_bin(&p, B_MUL, y, net_unary(&p, U_SIGMOID, y));
    if (variant) sw = net_bin(&p, B_SUB, sw, y);
    const int out = net_conv(&p, sw, 4, 3, 1, 1, 1, 1);
    check_net(&p, &out, 1, xs, 1 + variant, 1e-4, variant ? "x * sigmoid(x) - x" : "x * sigmoid(x)");
    net_free(&p);
  }
}

/* channels-last values meeting max_pool, concat (channels and another axis), flatten (no
 * layout member) and a convolution whose output is also fetched */
static void test_layout_ops_and_decliners(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 10, 14};
  net p;
  net_init(&p, EM_F32, 4, xs, 40);
  const int a = net_unary(&p, U_RELU, net_conv(&p, 0, 8, 3, 1, 1, 1, 1));
  const int mp = net_maxpool(&p, a, 2, 2);
  const int b = net_conv(&p, mp, 6, 1, 1, 0, 1, 1), c = net_conv(&p, mp, 4, 3, 1, 1, 1, 1);
  const int cat = net_concat(&p, b, c, 1);
  const int d = net_conv(&p, cat, 5, 3, 1, 1, 1, 1);
  const int cat2 = net_concat(&p, d, net_unary(&p, U_NEG, d), 2); /* along H */
  const int fl = net_flatten(&p, net_conv(&p, cat2, 3, 1, 1, 0, 1, 1));
  const int fetched = net_conv(&p, 0, 4, 3, 1, 1, 1, 0); /* an output, also read below */
  const int after = net_conv(&p, net_unary(&p, U_RELU, fetched), 4, 1, 1, 0, 1, 1);
  /* y2 read by a relu that is an output (which declines: a copy) and a convolution */
  const int y2 = net_conv(&p, 0, 6, 3, 1, 1, 1, 1);
  const int r2 = net_unary(&p, U_RELU, y2), c2 = net_conv(&p, y2, 3, 3, 1, 1, 1, 1);
  const int outs[6] = {fl, fetched, after, cat, r2, c2};
  em_exec_stats st = check_net(&p, outs, 6, xs, 6, 1e-4, "pools, concat, flatten, fetched");
  if (st.layout_copies < 1) fail_msg("no layout copies: the relu that is an output took its input as it is?");
  net_free(&p);
}

/* binary ops on a channels-last value and constants of every broadcast shape, either side */
static void test_broadcasting(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 5, 7};
  const int64_t shapes[][4] = {{6, 1, 1}, {1, 6, 1, 1}, {7}, {1}, {2, 1, 5, 7}, {5, 7}, {2, 6, 5, 7}, {5, 1}, {1, 1, 1, 7}};
  const int nds[] = {3, 4, 1, 1, 4, 2, 4, 2, 4};
  const enum bin ops[] = {B_ADD, B_SUB, B_MUL, B_DIV, B_MAX};
  /* under valgrind every third shape, one side each */
  for (size_t si = 0; si < sizeof nds / sizeof *nds; si += RUNNING_ON_VALGRIND ? 3 : 1)
    for (int side = RUNNING_ON_VALGRIND ? (int)(si / 3 % 2) : 0; side < 2; side += RUNNING_ON_VALGRIND ? 2 : 1) {
      net p;
      net_init(&p, EM_F32, 4, xs, 50 + si * 2 + (uint64_t)side);
      const int y = net_conv(&p, 0, 6, 3, 1, 1, 1, 1);
      int v = y;
      for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
        const int k = net_const(&p, EM_F32, nds[si], shapes[si], 0.5, 1.5);
        v = side ? net_bin(&p, ops[oi], k, v) : net_bin(&p, ops[oi], v, k);
      }
      const int out = net_conv(&p, v, 4, 1, 1, 0, 1, 1);
      char what[96];
      snprintf(what, sizeof what, "broadcast shape %zu, constant %s", si, side ? "first" : "second");
      check_net(&p, &out, 1, xs, 2, 1e-4, what);
      net_free(&p);
    }
}

/* x + x and x * x of a channels-last x (read twice by one node: never in place); the residual
 * add of two channels-last values; relu in place on a channels-last buffer */
static void test_read_twice_and_in_place(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 4, 6, 5};
  net p;
  net_init(&p, EM_F32, 4, xs, 60);
  const int y = net_conv(&p, 0, 8, 3, 1, 1, 1, 1);
  const int k = net_const(&p, EM_F32, 3, (const int64_t[]){8, 1, 1}, -0.5, 0.5);
  const int yy = net_bin(&p, B_ADD, y, y);
  const int sq = net_bin(&p, B_MUL, yy, yy);
  const int r = net_unary(&p, U_RELU, net_bin(&p, B_ADD, sq, k)); /* add in place into sq, relu into that */
  const int out = net_conv(&p, net_unary(&p, U_ABS, r), 3, 1, 1, 0, 1, 1);
  em_exec_stats st = check_net(&p, &out, 1, xs, 5, 1e-4, "x + x, in place");
  if (st.inplace_steps < 2) fail_msg("%d steps in place, expected at least 2", st.inplace_steps);
  net_free(&p);
}

/* predicates on channels-last values give channels-last bools, which `and` reads */
static void test_predicates(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 6, 7};
  net p;
  net_init(&p, EM_F32, 4, xs, 70);
  const int y = net_conv(&p, 0, 5, 3, 1, 1, 1, 1);
  const int k1 = net_const(&p, EM_F32, 3, (const int64_t[]){5, 1, 1}, -0.3, 0.0);
  const int k2 = net_const(&p, EM_F32, 1, (const int64_t[]){7}, 0.0, 0.3);
  const int both = net_bin(&p, B_AND, net_bin(&p, B_GREATER, y, k1), net_bin(&p, B_LESS, y, k2));
  em_exec_stats st = check_net(&p, &both, 1, xs, 3, 0, "bool predicates");
  assert_int_equal(st.layout_copies, 0);
  net_free(&p);
}

/* convolutions of every rank, batch, group, stride, pad, with and without bias, C = 1,
 * 1x1 outputs */
static void test_conv_geometries(void **state) {
  (void)state;
  NEED_DNNL();
  typedef struct g_case {
    int nd;
    int64_t xs[5];
    int64_t m, k, s, pad, group;
    int bias;
  } g_case;
  const g_case cases[] = {
      {3, {2, 4, 17}, 8, 3, 1, 1, 1, 1},       /* conv1d */
      {3, {3, 6, 20}, 6, 5, 2, 2, 3, 0},       /* conv1d, groups, stride */
      {5, {2, 3, 5, 6, 7}, 4, 3, 1, 1, 1, 1},  /* conv3d */
      {5, {1, 4, 4, 5, 3}, 4, 3, 2, 1, 4, 0},  /* conv3d depthwise, stride */
      {4, {1, 1, 9, 8}, 4, 3, 1, 1, 1, 1},     /* C = 1 in */
      {4, {2, 4, 9, 8}, 1, 3, 1, 1, 1, 1},     /* C = 1 out */
      {4, {2, 4, 1, 1}, 8, 1, 1, 0, 1, 1},     /* 1x1 spatial */
      {4, {3, 6, 11, 9}, 6, 3, 2, 0, 2, 0},    /* groups 2, stride 2, no pad */
      {4, {2, 4, 7, 7}, 6, 7, 1, 0, 1, 1},     /* a 7x7 kernel to a 1x1 output */
      {4, {2, 8, 8, 8}, 8, 3, 1, 2, 8, 1},     /* depthwise, pad 2 */
      {4, {2, 8, 3, 3}, 16, 3, 1, 0, 1, 1},    /* 3x3 to 1x1 */
      {4, {2, 8, 2, 2}, 8, 3, 2, 1, 8, 1},     /* depthwise to 1x1 */
      {4, {2, 16, 4, 4}, 1, 3, 1, 1, 1, 0},    /* 16 -> 1 channel */
      {4, {2, 16, 4, 4}, 1, 1, 1, 0, 1, 0},    /* pointwise 16 -> 1 channel */
      {4, {2, 16, 3, 3}, 1, 3, 1, 0, 1, 0},    /* 16 -> 1 channel, 1x1 */
      {4, {2, 16, 5, 5}, 2, 3, 1, 1, 2, 1},    /* groups of 8 -> 1 */
      {3, {2, 16, 3}, 4, 3, 1, 0, 1, 1},       /* conv1d to length 1 */
      {5, {2, 8, 3, 3, 3}, 4, 3, 1, 0, 1, 1},  /* conv3d to 1x1x1 */
      {5, {2, 8, 3, 4, 5}, 1, 3, 1, 1, 1, 1},  /* conv3d to 1 channel */
      {3, {2, 8, 9}, 1, 3, 1, 1, 1, 1},        /* conv1d to 1 channel */
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci += RUNNING_ON_VALGRIND ? 3 : 1) {
    const g_case *c = &cases[ci];
    net p;
    net_init(&p, EM_F32, c->nd, c->xs, 80 + ci);
    /* conv (under test) between two convolutions, each followed by relu: the one under test
     * reads a channels-last input and writes a channels-last output where oneDNN takes it */
    const int in = net_unary(&p, U_RELU, net_conv(&p, 0, c->xs[1], 1, 1, 0, 1, 1));
    const int t = net_unary(&p, U_RELU, net_conv(&p, in, c->m, c->k, c->s, c->pad, c->group, c->bias));
    const int out = net_conv(&p, net_bin(&p, B_ADD, t, t), 3, 1, 1, 0, 1, 1);
    char what[64];
    snprintf(what, sizeof what, "geometry %zu", ci);
    check_net(&p, &out, 1, c->xs, 1, 1e-4, what);
    net_free(&p);
  }
}

/* max_pool on channels-last values: pads, strides, dilations, ceil_mode, 1-D, 2-D and 3-D */
static void test_max_pool_geometries(void **state) {
  (void)state;
  NEED_DNNL();
  typedef struct p_case {
    int nd;
    int64_t xs[5];
    int64_t k, s, pad, dil;
    int ceil;
  } p_case;
  const p_case cases[] = {
      {4, {2, 5, 11, 9}, 3, 2, 1, 1, 0}, /* ResNet's */
      {4, {2, 5, 11, 9}, 3, 2, 1, 1, 1}, /* ceil_mode */
      {4, {1, 6, 12, 10}, 2, 2, 0, 1, 0},
      {4, {2, 3, 9, 9}, 3, 1, 1, 1, 0},
      {4, {2, 4, 10, 11}, 3, 1, 2, 2, 0}, /* dilated */
      {3, {2, 5, 17}, 3, 2, 1, 1, 0},
      {5, {2, 3, 5, 6, 7}, 2, 2, 0, 1, 1},
      {4, {2, 7, 3, 3}, 3, 1, 0, 1, 0},   /* to 1x1 */
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci += RUNNING_ON_VALGRIND ? 2 : 1) {
    const p_case *c = &cases[ci];
    net p;
    net_init(&p, EM_F32, c->nd, c->xs, 140 + ci);
    const int y = net_conv(&p, 0, c->xs[1] + 1, 3, 1, 1, 1, 1);
    const int mp = net_maxpool_full(&p, y, c->k, c->s, c->pad, c->dil, c->ceil);
    const int out = net_conv(&p, net_unary(&p, U_NEG, mp), 3, 1, 1, 0, 1, 1);
    const int outs[2] = {out, net_maxpool_full(&p, net_unary(&p, U_ABS, y), c->k, c->s, c->pad, c->dil, c->ceil)};
    char what[64];
    snprintf(what, sizeof what, "max_pool case %zu", ci);
    check_net(&p, outs, 2, c->xs, 3, 1e-4, what);
    net_free(&p);
  }
}

/* concat of channels-last values with each other and with contiguous ones, on every axis;
 * global_average_pool of 3-D and 5-D channels-last values */
static void test_concat_axes_and_pools(void **state) {
  (void)state;
  NEED_DNNL();
  for (int nd = 3; nd <= 5; nd++) {
    const int64_t xs[5] = {2, 6, 5, 4, 3};
    for (int axis = RUNNING_ON_VALGRIND ? nd - 3 : 0; axis < nd; axis += RUNNING_ON_VALGRIND ? nd : 1) {
      net p;
      net_init(&p, EM_F32, nd, xs, 160 + (uint64_t)(nd * 8 + axis));
      const int a = net_conv(&p, 0, 6, 3, 1, 1, 1, 1);
      const int b = net_unary(&p, U_SIGMOID, net_conv(&p, 0, 6, 1, 1, 0, 1, 0));
      const int c = net_concat(&p, net_concat(&p, a, b, axis), 0, axis); /* the input: contiguous */
      const int out = net_conv(&p, net_unary(&p, U_RELU, c), 2, 1, 1, 0, 1, 1);
      const int gp = net_gap(&p, net_bin(&p, B_MUL, a, b));
      const int outs[3] = {out, gp, net_concat(&p, b, a, axis)};
      char what[64];
      snprintf(what, sizeof what, "concat rank %d axis %d", nd, axis);
      check_net(&p, outs, 3, xs, 3, 1e-4, what);
      net_free(&p);
    }
  }
}

/* binary ops between two channels-last values of different shapes: [2,C,H,W] with a
 * channels-last [1,C,H,W] (a convolution of a constant) and with a channels-last [2,C,H,1];
 * the results fetched directly (contiguous outputs from channels-last inputs) */
static void test_binary_two_layouts(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 6, 5}, k1[4] = {1, 3, 6, 5}, k2[4] = {2, 3, 6, 1};
  net p;
  net_init(&p, EM_F32, 4, xs, 180);
  const int y = net_conv(&p, 0, 4, 3, 1, 1, 1, 1);
  const int z1 = net_conv(&p, net_const(&p, EM_F32, 4, k1, -1, 1), 4, 3, 1, 1, 1, 1);
  const int z2 = net_conv(&p, net_const(&p, EM_F32, 4, k2, -1, 1), 4, 1, 1, 0, 1, 0);
  const int s1 = net_bin(&p, B_ADD, y, z1), s2 = net_bin(&p, B_MUL, z2, y), s3 = net_bin(&p, B_SUB, z1, z2);
  const int t = net_conv(&p, net_bin(&p, B_ADD, net_bin(&p, B_MAX, s1, s2), s3), 2, 1, 1, 0, 1, 1);
  const int outs[4] = {t, net_bin(&p, B_SUB, s1, z2), net_bin(&p, B_DIV, z2, net_unary(&p, U_SIGMOID, s2)),
                       net_bin(&p, B_ADD, s3, net_const(&p, EM_F32, 1, (const int64_t[]){5}, -1, 1))};
  check_net(&p, outs, 4, xs, 6, 1e-4, "two channels-last shapes");
  net_free(&p);
}

/* max_pool and global_average_pool on channels-last values, bit for bit: y = conv(x) is fetched
 * exactly through y + 0 (so y itself stays channels-last); the window maxima (a NaN in a window
 * wins) and the per-channel double sums in index order are computed here from those bits. */
static void test_pools_exact_with_nans(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 9, 8}, one[1] = {1};
  for (int with_nan = 0; with_nan < 2; with_nan++) {
    net p;
    net_init(&p, EM_F32, 4, xs, 190 + (uint64_t)with_nan);
    const int y = net_conv(&p, 0, 5, 3, 1, 1, 1, 1);
    const int zero = net_const(&p, EM_F32, 1, one, 0, 0);
    const int copy = net_bin(&p, B_ADD, y, zero);
    const int mp = net_bin(&p, B_ADD, net_maxpool_full(&p, y, 3, 2, 1, 1, 0), zero);
    const int gp = net_gap(&p, y);
    const int outs[3] = {copy, mp, gp};
    em_tensor *x = input_of(&p, xs, 11), *got[3] = {0};
    if (with_nan) {
      float *xf = em_tensor_data(x);
      xf[1 * 72 + 4 * 8 + 4] = NAN; /* item 0, channel 1, (4, 4) */
      xf[3 * 72 + 2 * 72 + 0] = NAN; /* item 1, channel 2, (0, 0) */
    }
    em_exec_stats st;
    net_run(&p, outs, 3, x, NULL, got, &st);
    if (st.channels_last_steps < 2) fail_msg("%d channels-last steps, expected 2", st.channels_last_steps);
    const float *yv = em_tensor_data(got[0]), *mv = em_tensor_data(got[1]), *gv = em_tensor_data(got[2]);
    int nans = 0;
    for (int64_t pl = 0; pl < 10; pl++) {
      double sum = 0;
      for (int64_t i = 0; i < 72; i++) sum += (double)yv[pl * 72 + i], nans += isnan(yv[pl * 72 + i]);
      const float want = (float)(sum / 72.0);
      if (memcmp(&want, &gv[pl], sizeof want) && !(isnan(want) && isnan(gv[pl])))
        fail_msg("global_average_pool plane %ld: %.9g, expected %.9g", (long)pl, gv[pl], want);
      for (int64_t oh = 0; oh < 5; oh++)
        for (int64_t ow = 0; ow < 4; ow++) {
          float m = -INFINITY;
          int nan = 0;
          for (int64_t a = 0; a < 3; a++)
            for (int64_t b = 0; b < 3; b++) {
              const int64_t ih = oh * 2 - 1 + a, iw = ow * 2 - 1 + b;
              if (ih < 0 || ih >= 9 || iw < 0 || iw >= 8) continue;
              const float v = yv[pl * 72 + ih * 8 + iw];
              nan |= isnan(v);
              if (v > m) m = v;
            }
          const float g = mv[(pl * 5 + oh) * 4 + ow];
          if (nan ? !isnan(g) : memcmp(&g, &m, sizeof m))
            fail_msg("max_pool plane %ld (%ld, %ld): %.9g, expected %.9g%s", (long)pl, (long)oh, (long)ow, g, m,
                     nan ? " (a NaN in the window)" : "");
        }
    }
    if (with_nan && !nans) fail_msg("the NaNs did not reach the convolution's output");
    for (int i = 0; i < 3; i++) em_tensor_release(got[i]);
    em_tensor_release(x);
    net_free(&p);
  }
}

/* f64 convolutions stay contiguous (oneDNN's NHWC kernels are f32) */
static void test_f64_stays_contiguous(void **state) {
  (void)state;
  const int64_t xs[4] = {2, 3, 6, 7};
  net p;
  net_init(&p, EM_F64, 4, xs, 90);
  const int a = net_unary(&p, U_RELU, net_conv(&p, 0, 4, 3, 1, 1, 1, 1));
  const int out = net_conv(&p, net_bin(&p, B_MUL, a, a), 3, 3, 1, 1, 1, 1);
  em_exec_stats st = check_net(&p, &out, 1, xs, -1, 1e-9, "f64");
  assert_int_equal(st.channels_last_steps, 0);
  assert_int_equal(st.layout_copies, 0);
  net_free(&p);
}

/* A MobileNet-like net used by the tests below. */
static int small_net(net *p, int64_t n_decl, uint64_t seed) {
  const int64_t xs[4] = {n_decl, 4, 10, 9};
  net_init(p, EM_F32, 4, xs, seed);
  const int stem = net_unary(p, U_RELU, net_conv(p, 0, 8, 3, 2, 1, 1, 1));
  const int e = net_unary(p, U_CLIP, net_conv(p, stem, 16, 1, 1, 0, 1, 1));
  const int dw = net_conv(p, e, 16, 3, 1, 1, 16, 1);
  const int sw = net_bin(p, B_MUL, dw, net_unary(p, U_SIGMOID, dw));
  const int se = net_unary(p, U_SIGMOID, net_conv(p, net_gap(p, sw), 16, 1, 1, 0, 1, 1));
  const int pr = net_conv(p, net_bin(p, B_MUL, sw, se), 8, 1, 1, 0, 1, 0);
  return net_conv(p, net_bin(p, B_ADD, pr, stem), 6, 3, 1, 1, 1, 1);
}

/* Bits independent of the thread count (1, 2, 3, default) and equal between two runs of one
 * executor. */
static void test_threads_and_repeat_bits(void **state) {
  (void)state;
  NEED_DNNL();
  net p;
  const int out = small_net(&p, 3, 100);
  const int64_t xs[4] = {3, 4, 10, 9};
  em_tensor *x = input_of(&p, xs, 7), *first = NULL;
  const int threads[] = {1, 2, 3, 0, 4};
  const size_t nt = RUNNING_ON_VALGRIND ? 3 : sizeof threads / sizeof *threads;
  for (size_t t = 0; t < nt; t++) {
    em_tensor *got = NULL;
    em_exec_stats st;
    const run_opts o = {EM_MODE_FAST, threads[t], 0};
    net_run(&p, &out, 1, x, &o, &got, &st);
    assert_true(st.channels_last_steps > 0);
    if (!first) first = got;
    else {
      if (memcmp(em_tensor_data(first), em_tensor_data(got), sizeof(float) * (size_t)em_tensor_numel(got)))
        fail_msg("%d threads give other bits than 1 thread", threads[t]);
      em_tensor_release(got);
    }
  }
  /* two runs of one executor */
  em_exec *e;
  em_var ov = p.vars[out];
  assert_int_equal(em_exec_create(p.g, &ov, 1, em_cpu(), &e), EM_OK);
  em_feed f = {p.vars[0], x};
  em_tensor *r1 = NULL, *r2 = NULL;
  assert_int_equal(em_exec_run(e, &f, 1, &r1), EM_OK);
  assert_int_equal(em_exec_run(e, &f, 1, &r2), EM_OK);
  assert_memory_equal(em_tensor_data(r1), em_tensor_data(r2), sizeof(float) * (size_t)em_tensor_numel(r1));
  assert_memory_equal(em_tensor_data(r1), em_tensor_data(first), sizeof(float) * (size_t)em_tensor_numel(r1));
  em_tensor_release(r1), em_tensor_release(r2), em_tensor_release(first), em_tensor_release(x);
  em_exec_free(e);
  net_free(&p);
}

/* One executor: fast, portable, fast again, with EM_RUN_ACCUMULATE, and a dynamic batch
 * that changes between runs. */
static void test_modes_batches_accumulate(void **state) {
  (void)state;
  NEED_DNNL();
  net p;
  const int out = small_net(&p, -1, 110);
  em_exec *e;
  em_var ov = p.vars[out];
  assert_int_equal(em_exec_create(p.g, &ov, 1, em_cpu(), &e), EM_OK);
  const int64_t batches[] = {2, 1, 3, 2};
  const em_mode modes[] = {EM_MODE_FAST, EM_MODE_PORTABLE, EM_MODE_FAST, EM_MODE_FAST};
  for (int i = 0; i < 4; i++) {
    const int64_t xs[4] = {batches[i], 4, 10, 9};
    em_tensor *x = input_of(&p, xs, 200 + (uint64_t)i), *got = NULL;
    evaluate(&p, x);
    assert_int_equal(em_exec_set_mode(e, modes[i]), EM_OK);
    em_feed f = {p.vars[0], x};
    char what[64];
    snprintf(what, sizeof what, "run %d (batch %ld, %s)", i, (long)batches[i],
             modes[i] == EM_MODE_FAST ? "fast" : "portable");
    if (i < 3) {
      if (em_exec_run(e, &f, 1, &got)) fail_msg("%s: %s", what, em_last_error());
    } else { /* accumulate into a tensor holding 1.0 everywhere */
      int64_t ys[4];
      memcpy(ys, p.r[out].d, sizeof ys);
      assert_int_equal(em_tensor_zeros(em_cpu(), EM_F32, 4, ys, &got), EM_OK);
      float *g = em_tensor_data(got);
      for (int64_t k = 0; k < em_tensor_numel(got); k++) g[k] = 1.0f;
      em_tensor *outs[1] = {got};
      if (em_exec_run_into(e, &f, 1, outs, EM_RUN_ACCUMULATE)) fail_msg("%s: %s", what, em_last_error());
      for (int64_t k = 0; k < rt_numel(&p.r[out]); k++) p.r[out].v[k] += 1.0;
    }
    expect_ref(&p, out, got, 1e-4, what);
    em_exec_stats st;
    assert_int_equal(em_exec_stats_get(e, &st), EM_OK);
    if (modes[i] == EM_MODE_FAST && st.channels_last_steps == 0) fail_msg("%s: no channels-last steps", what);
    if (modes[i] == EM_MODE_PORTABLE && st.channels_last_steps) fail_msg("%s: channels-last steps", what);
    em_tensor_release(got), em_tensor_release(x);
  }
  em_exec_free(e);
  net_free(&p);
}

/* Executors on threads at once, each on its own graph: each result equals the reference. */
typedef struct thread_job {
  uint64_t seed;
  int failed;
  char why[200];
} thread_job;

static void *thread_main(void *arg) {
  thread_job *j = arg;
  net p;
  const int out = small_net(&p, 2, j->seed);
  const int64_t xs[4] = {2, 4, 10, 9};
  em_tensor *x = input_of(&p, xs, j->seed);
  evaluate(&p, x);
  em_exec *e = NULL;
  em_var ov = p.vars[out];
  em_feed f = {p.vars[0], x};
  if (em_exec_create(p.g, &ov, 1, em_cpu(), &e)) {
    j->failed = 1;
    snprintf(j->why, sizeof j->why, "create: %s", em_last_error());
  }
  for (int it = 0; !j->failed && it < (RUNNING_ON_VALGRIND ? 2 : 10); it++) {
    em_tensor *got = NULL;
    if (em_exec_run(e, &f, 1, &got)) {
      j->failed = 1;
      snprintf(j->why, sizeof j->why, "run: %s", em_last_error());
      break;
    }
    int64_t n;
    double *v = ot_values(got, &n);
    for (int64_t k = 0; k < n && !j->failed; k++)
      if (fabs(v[k] - p.r[out].v[k]) > 1e-4 * (1 + fabs(p.r[out].v[k]))) {
        j->failed = 1;
        snprintf(j->why, sizeof j->why, "element %ld: %g, expected %g", (long)k, v[k], p.r[out].v[k]);
      }
    em_exec_stats st;
    em_exec_stats_get(e, &st);
    if (!j->failed && !st.channels_last_steps) j->failed = 1, snprintf(j->why, sizeof j->why, "no channels-last steps");
    free(v);
    em_tensor_release(got);
  }
  em_exec_free(e);
  em_tensor_release(x);
  net_free(&p);
  return NULL;
}

static void test_executors_on_threads(void **state) {
  (void)state;
  NEED_DNNL();
  enum { NT = 3 };
  pthread_t th[NT];
  thread_job jobs[NT];
  for (int i = 0; i < NT; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].seed = 300 + (uint64_t)i;
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  }
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NT; i++)
    if (jobs[i].failed) fail_msg("thread %d: %s", i, jobs[i].why);
}

/* Training: loss = sum(relu(conv(x, w, b)) * k) with k a constant [C,1,1]; gradients of w, b and
 * x against float64 loops. */
static void test_training_gradients(void **state) {
  (void)state;
  NEED_DNNL();
  const int64_t xs[4] = {2, 3, 7, 6};
  net p;
  net_init(&p, EM_F32, 4, xs, 120);
  const int y = net_conv(&p, 0, 5, 3, 1, 1, 1, 1);
  const int k = net_const(&p, EM_F32, 3, (const int64_t[]){5, 1, 1}, 0.5, 1.5);
  const int m = net_bin(&p, B_MUL, net_unary(&p, U_RELU, y), k);
  em_var loss, grads[3], wrt[3] = {p.vars[0], p.vars[p.nodes[y].b], p.vars[p.nodes[y].c]};
  em_attr ka = AI("keepdims", 0);
  assert_int_equal(em_apply(p.g, "reduce_sum", &p.vars[m], 1, &ka, 1, &loss, 1), EM_OK);
  assert_int_equal(em_gradients(p.g, loss, wrt, 3, grads), EM_OK);
  em_tensor *x = input_of(&p, xs, 9);
  evaluate(&p, x);
  /* dL/dy = relu'(y) * k; then the convolution's gradients */
  const rt *X = &p.r[0], *W = &p.r[p.nodes[y].b], *Y = &p.r[y], *K = &p.r[k];
  const int64_t N = 2, C = 3, H = 7, Wd = 6, M = 5;
  double *dy = calloc((size_t)rt_numel(Y), sizeof *dy), *dx = calloc((size_t)rt_numel(X), sizeof *dx);
  double *dw = calloc((size_t)rt_numel(W), sizeof *dw), *db = calloc((size_t)M, sizeof *db);
  for (int64_t i = 0; i < rt_numel(Y); i++) dy[i] = Y->v[i] > 0 ? K->v[i / (H * Wd) % M] : 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < M; o++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < Wd; w++) {
          const double g = dy[((n * M + o) * H + h) * Wd + w];
          db[o] += g;
          for (int64_t c = 0; c < C; c++)
            for (int64_t a = 0; a < 3; a++)
              for (int64_t b = 0; b < 3; b++) {
                const int64_t ih = h - 1 + a, iw = w - 1 + b;
                if (ih < 0 || ih >= H || iw < 0 || iw >= Wd) continue;
                dw[((o * C + c) * 3 + a) * 3 + b] += g * X->v[((n * C + c) * H + ih) * Wd + iw];
                dx[((n * C + c) * H + ih) * Wd + iw] += g * W->v[((o * C + c) * 3 + a) * 3 + b];
              }
        }
  const double *want[3] = {dx, dw, db};
  const int64_t counts[3] = {rt_numel(X), rt_numel(W), M};
  for (int mode = 0; mode < 2; mode++) {
    em_exec *e;
    assert_int_equal(em_exec_create(p.g, grads, 3, em_cpu(), &e), EM_OK);
    assert_int_equal(em_exec_set_training(e, 1), EM_OK);
    assert_int_equal(em_exec_set_mode(e, mode ? EM_MODE_PORTABLE : EM_MODE_FAST), EM_OK);
    em_feed f = {p.vars[0], x};
    em_tensor *got[3] = {0};
    if (em_exec_run(e, &f, 1, got)) fail_msg("gradients: %s", em_last_error());
    for (int i = 0; i < 3; i++) {
      char what[64];
      snprintf(what, sizeof what, "gradient %d, %s", i, mode ? "portable" : "fast");
      assert_true(em_tensor_is_contiguous(got[i]));
      int64_t n;
      double *v = ot_values(got[i], &n);
      assert_int_equal(n, counts[i]);
      ot_expect_close(v, want[i], n, 1e-4, 1e-4, what);
      free(v);
      em_tensor_release(got[i]);
    }
    em_exec_free(e);
  }
  free(dy), free(dx), free(dw), free(db);
  em_tensor_release(x);
  net_free(&p);
}

/* ------------------------------------------------------ without oneDNN --- */

static int child_without_dnnl(void) {
  if (dnnl_used()) return 10;
  net p;
  const int out = small_net(&p, 2, 130);
  const int64_t xs[4] = {2, 4, 10, 9};
  em_tensor *x = input_of(&p, xs, 5), *got = NULL;
  evaluate(&p, x);
  em_exec_stats st;
  net_run(&p, &out, 1, x, NULL, &got, &st);
  int r = 0;
  if (st.channels_last_steps || st.layout_copies) r = 11;
  if (!r && !em_tensor_is_contiguous(got)) r = 12;
  int64_t n;
  double *v = ot_values(got, &n);
  for (int64_t k = 0; k < n && !r; k++)
    if (fabs(v[k] - p.r[out].v[k]) > 1e-4 * (1 + fabs(p.r[out].v[k]))) r = 13;
  free(v);
  em_tensor_release(got), em_tensor_release(x);
  net_free(&p);
  return r;
}

static void test_without_dnnl(void **state) {
  (void)state;
  const int status = ts_run_self("--child-no-dnnl", "EMBER_DNNL", "0");
  switch (status) {
  case 0: break;
  case 10: fail_msg("EMBER_DNNL=0: oneDNN still used"); break;
  case 11: fail_msg("EMBER_DNNL=0: channels-last steps or layout copies without oneDNN"); break;
  case 12: fail_msg("EMBER_DNNL=0: the output is not contiguous"); break;
  case 13: fail_msg("EMBER_DNNL=0: wrong values"); break;
  default: fail_msg("EMBER_DNNL=0: the child failed (status %d)", status);
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--child-no-dnnl")) return child_without_dnnl();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_is_channels_last),
      cmocka_unit_test(test_empty_channels_last),
      cmocka_unit_test(test_from_channels_last_transposes),
      cmocka_unit_test(test_from_channels_last_other_layouts),
      cmocka_unit_test(test_mobilenet_block),
      cmocka_unit_test(test_se_block),
      cmocka_unit_test(test_swish),
      cmocka_unit_test(test_layout_ops_and_decliners),
      cmocka_unit_test(test_broadcasting),
      cmocka_unit_test(test_read_twice_and_in_place),
      cmocka_unit_test(test_predicates),
      cmocka_unit_test(test_conv_geometries),
      cmocka_unit_test(test_max_pool_geometries),
      cmocka_unit_test(test_concat_axes_and_pools),
      cmocka_unit_test(test_binary_two_layouts),
      cmocka_unit_test(test_pools_exact_with_nans),
      cmocka_unit_test(test_f64_stays_contiguous),
      cmocka_unit_test(test_threads_and_repeat_bits),
      cmocka_unit_test(test_modes_batches_accumulate),
      cmocka_unit_test(test_executors_on_threads),
      cmocka_unit_test(test_training_gradients),
      cmocka_unit_test(test_without_dnnl),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
