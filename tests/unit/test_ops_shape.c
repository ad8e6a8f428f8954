/* Tests of the shape and indexing family (ops/shape.c). Ops that move
 * elements are checked byte for byte in every dtype against a naive map,
 * written here with multi-index loops, from each output element to the input
 * element it must hold; ops that compute (pad's constant, one_hot, top_k,
 * cast, the summing gradients) against float64 references. Gradients by
 * finite differences (ot_gradcheck, f64); errors through em_apply's and
 * em_exec_run's messages. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

#define NA(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const em_dtype ALL[8] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I32, EM_I64, EM_U8, EM_BOOL};

/* ------------------------------------------------------------ helpers --- */

static em_attr ai(const char *n, int64_t v) { return (em_attr){.name = n, .type = EM_ATTR_INT, .i = v}; }
static em_attr af(const char *n, double v) { return (em_attr){.name = n, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr as(const char *n, const char *s) { return (em_attr){.name = n, .type = EM_ATTR_STRING, .s = s}; }
static em_attr ais(const char *n, const int64_t *v, int k) {
  return (em_attr){.name = n, .type = EM_ATTR_INTS, .ints = v, .n = k};
}

static int64_t numel(int nd, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  return n;
}

static void unravel(int64_t flat, int nd, const int64_t *d, int64_t *idx) {
  for (int k = nd - 1; k >= 0; k--) {
    idx[k] = flat % d[k];
    flat /= d[k];
  }
}

static int64_t ravel(const int64_t *idx, int nd, const int64_t *d) {
  int64_t f = 0;
  for (int k = 0; k < nd; k++) f = f * d[k] + idx[k];
  return f;
}

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random bytes in every element (bool: 0 or 1), so byte moves are checked
 * on arbitrary bit patterns. */
static em_tensor *rand_bytes(em_dtype t, int nd, const int64_t *shape, uint64_t seed) {
  int64_t n = numel(nd, shape);
  size_t es = em_dtype_size(t), bytes = (size_t)n * es;
  unsigned char *b = malloc(bytes ? bytes : 1);
  assert_non_null(b);
  for (size_t i = 0; i < bytes; i++) b[i] = (unsigned char)mix(&seed);
  if (t == EM_BOOL)
    for (size_t i = 0; i < bytes; i++) b[i] &= 1;
  em_tensor *x = NULL;
  if (em_tensor_from_host(em_cpu(), t, nd, shape, b, bytes, &x)) fail_msg("from_host: %s", em_last_error());
  free(b);
  return x;
}

static em_tensor *from_host(em_dtype t, int nd, const int64_t *shape, const void *data) {
  em_tensor *x = NULL;
  if (em_tensor_from_host(em_cpu(), t, nd, shape, data, (size_t)numel(nd, shape) * em_dtype_size(t), &x))
    fail_msg("from_host: %s", em_last_error());
  return x;
}

/* Runs op with one output; fails the test on error. */
/* Every output element must be byte-equal to the input element src()
 * names (flat index into x). */
typedef int64_t (*src_fn)(int64_t flat, const int64_t *oidx, const void *ctx);

static void expect_moved(const em_tensor *y, const em_tensor *x, int nd, const int64_t *oshape, src_fn src,
                         const void *ctx, const char *what) {
  ot_expect_shape(y, em_tensor_dtype(x), nd, oshape, what);
  size_t es = em_dtype_size(em_tensor_dtype(x));
  const unsigned char *yb = em_tensor_data(y), *xb = em_tensor_data(x);
  int64_t idx[16];
  for (int64_t f = 0, n = numel(nd, oshape); f < n; f++) {
    unravel(f, nd, oshape, idx);
    int64_t s = src(f, idx, ctx);
    if (memcmp(yb + (size_t)f * es, xb + (size_t)s * es, es))
      fail_msg("%s (%s): output element %lld should be input element %lld", what, em_dtype_name(em_tensor_dtype(x)),
               (long long)f, (long long)s);
  }
}

static int64_t src_flat(int64_t flat, const int64_t *oidx, const void *ctx) {
  (void)oidx, (void)ctx;
  return flat;
}

/* A fixed check of an op that keeps the element order (reshape family). */
static void check_same_order(const char *op, int nd, const int64_t *shape, const em_attr *at, int n_at, int ond,
                             const int64_t *oshape) {
  for (int d = 0; d < NA(ALL); d++) {
    em_tensor *x = rand_bytes(ALL[d], nd, shape, 11u + (uint64_t)d);
    em_tensor *y = ot_run1(op, &x, 1, at, n_at);
    expect_moved(y, x, ond, oshape, src_flat, NULL, op);
    em_tensor_release(x);
    em_tensor_release(y);
  }
}

/* --------------------------------------------------- reshape and kin --- */

static void test_reshape(void **state) {
  (void)state;
  struct { int nd; int64_t x[4]; int ns; int64_t s[4]; int no; int64_t o[4]; } C[] = {
    {3, {2, 3, 4}, 2, {4, 6}, 2, {4, 6}},       {3, {2, 3, 4}, 2, {0, -1}, 2, {2, 12}},
    {3, {1, 5, 1}, 1, {5}, 1, {5}},             {1, {6}, 3, {-1, 1, 2}, 3, {3, 1, 2}},
    {1, {7}, 2, {7, 1}, 2, {7, 1}},             {1, {1}, 0, {0}, 0, {0}},
    {3, {2, 0, 3}, 2, {6, 0}, 2, {6, 0}},       {2, {300, 500}, 2, {-1, 1000}, 2, {150, 1000}},
    {2, {3, 5}, 3, {0, 0, -1}, 3, {3, 5, 1}},   {0, {0}, 2, {1, 1}, 2, {1, 1}},
  };
  for (int c = 0; c < NA(C); c++) {
    em_attr at = ais("shape", C[c].s, C[c].ns);
    check_same_order("reshape", C[c].nd, C[c].x, &at, 1, C[c].no, C[c].o);
  }
  /* reshape_like: the shape comes from input 1 (its dtype does not matter) */
  int64_t xs[2] = {4, 6}, ls[3] = {2, 3, 4};
  for (int d = 0; d < NA(ALL); d++) {
    em_tensor *in[2] = {rand_bytes(ALL[d], 2, xs, 5), ot_tensor(EM_BOOL, 3, ls, NULL)};
    em_tensor *y = ot_run1("reshape_like", in, 2, NULL, 0);
    expect_moved(y, in[0], 3, ls, src_flat, NULL, "reshape_like");
    em_tensor_release(in[0]);
    em_tensor_release(in[1]);
    em_tensor_release(y);
  }
}

static void test_squeeze_unsqueeze_flatten(void **state) {
  (void)state;
  int64_t x1[4] = {1, 3, 1, 2}, a01[2] = {0, -2}, o1[2] = {3, 2}, o1all[2] = {3, 2}, a2[1] = {2}, o12[3] = {1, 3, 2};
  em_attr at = ais("axes", a01, 2);
  check_same_order("squeeze", 4, x1, &at, 1, 2, o1);
  check_same_order("squeeze", 4, x1, NULL, 0, 2, o1all);
  at = ais("axes", a2, 1);
  check_same_order("squeeze", 4, x1, &at, 1, 3, o12);
  int64_t x2[2] = {3, 4}, u[2] = {0, -1}, ou[4] = {1, 3, 4, 1}, u2[2] = {1, 3}, ou2[4] = {3, 1, 4, 1};
  at = ais("axes", u, 2);
  check_same_order("unsqueeze", 2, x2, &at, 1, 4, ou);
  check_same_order("expand_dims", 2, x2, &at, 1, 4, ou);
  at = ais("axes", u2, 2);
  check_same_order("unsqueeze", 2, x2, &at, 1, 4, ou2);
  int64_t zero[1] = {0}, os[1] = {1};
  at = ais("axes", zero, 1);
  check_same_order("unsqueeze", 0, NULL, &at, 1, 1, os);
  int64_t x3[3] = {2, 3, 4};
  struct { int64_t axis; int64_t o[2]; } F[] = {{0, {1, 24}}, {1, {2, 12}}, {3, {24, 1}}, {-1, {6, 4}}, {-3, {1, 24}}};
  for (int c = 0; c < NA(F); c++) {
    at = ai("axis", F[c].axis);
    check_same_order("flatten", 3, x3, &at, 1, 2, F[c].o);
  }
  int64_t o4[2] = {2, 12};
  check_same_order("flatten", 3, x3, NULL, 0, 2, o4);
}

/* ---------------------------------------------------------- transpose --- */

typedef struct perm_ctx {
  int nd;
  int perm[8];
  const int64_t *xshape;
} perm_ctx;

static int64_t src_perm(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const perm_ctx *p = ctx;
  int64_t in[8];
  for (int i = 0; i < p->nd; i++) in[p->perm[i]] = o[i];
  return ravel(in, p->nd, p->xshape);
}

static void test_transpose(void **state) {
  (void)state;
  struct { int nd; int64_t x[8]; int has_perm; int64_t perm[8]; } C[] = {
    {2, {2, 3}, 0, {0}},
    {3, {2, 3, 4}, 1, {1, 2, 0}},
    {4, {4, 1, 3, 5}, 1, {2, 0, 3, 1}},
    {2, {300, 500}, 1, {1, 0}},
    {4, {3, 2, 40, 37}, 1, {0, 1, 3, 2}},
    {4, {5, 1, 1, 7}, 0, {0}},
    {8, {2, 3, 2, 3, 2, 3, 2, 3}, 1, {7, 0, 6, 1, 5, 2, 4, 3}},
    {3, {64, 33, 9}, 1, {2, 1, 0}},
    {3, {9, 33, 64}, 1, {0, 2, 1}},
    {3, {17, 16, 3}, 1, {1, 0, 2}},
    {1, {1}, 1, {0}},
    {2, {0, 3}, 1, {1, 0}},
    {0, {0}, 0, {0}},
  };
  for (int c = 0; c < NA(C); c++) {
    perm_ctx p = {.nd = C[c].nd, .xshape = C[c].x};
    int64_t o[8];
    for (int i = 0; i < p.nd; i++) {
      p.perm[i] = C[c].has_perm ? (int)C[c].perm[i] : p.nd - 1 - i;
      o[i] = C[c].x[p.perm[i]];
    }
    em_attr at = ais("perm", C[c].perm, C[c].nd);
    for (int d = 0; d < NA(ALL); d++) {
      em_tensor *x = rand_bytes(ALL[d], C[c].nd, C[c].x, 100u + (uint64_t)c);
      em_tensor *y = ot_run1("transpose", &x, 1, &at, C[c].has_perm);
      char what[64];
      snprintf(what, sizeof what, "transpose case %d", c);
      expect_moved(y, x, p.nd, o, src_perm, &p, what);
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
}

/* -------------------------------------------------------------- slice --- */

/* Per axis, the list of input positions ONNX Slice selects: enumerated by
 * walking from the clamped start (not by a count formula). */
typedef struct slice_ctx {
  int nd;
  const int64_t *xshape;
  int64_t sel[8][1024];
  int64_t count[8];
} slice_ctx;

static void ref_slice(slice_ctx *c, int nd, const int64_t *x, int n, const int64_t *starts, const int64_t *ends,
                      const int64_t *axes, const int64_t *steps) {
  c->nd = nd;
  c->xshape = x;
  for (int d = 0; d < nd; d++) {
    c->count[d] = x[d];
    for (int64_t i = 0; i < x[d]; i++) c->sel[d][i] = i;
  }
  for (int k = 0; k < n; k++) {
    int d = axes ? (int)(axes[k] < 0 ? axes[k] + nd : axes[k]) : k;
    int64_t dim = x[d], step = steps ? steps[k] : 1;
    int64_t s = starts[k] < 0 ? starts[k] + dim : starts[k];
    int64_t e = ends[k] < 0 ? ends[k] + dim : ends[k];
    c->count[d] = 0;
    if (step > 0) {
      if (s < 0) s = 0;
      if (s > dim) s = dim;
      if (e < 0) e = 0;
      if (e > dim) e = dim;
      for (int64_t i = s; i < e; i += step) c->sel[d][c->count[d]++] = i;
    } else {
      if (s < 0) s = 0;
      if (s > dim - 1) s = dim - 1;
      if (e < -1) e = -1;
      if (e > dim - 1) e = dim - 1;
      for (int64_t i = s; i > e; i += step) c->sel[d][c->count[d]++] = i;
    }
  }
}

static int64_t src_slice(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const slice_ctx *c = ctx;
  int64_t in[8];
  for (int d = 0; d < c->nd; d++) in[d] = c->sel[d][o[d]];
  return ravel(in, c->nd, c->xshape);
}

typedef struct slice_case {
  int nd;
  int64_t x[4];
  int n;
  int64_t starts[4], ends[4], axes[4], steps[4];
  int has_axes, has_steps;
} slice_case;

static const slice_case SLICES[] = {
  {1, {10}, 1, {2}, {8}, {0}, {1}, 0, 0},
  {1, {10}, 1, {-3}, {INT64_MAX}, {0}, {1}, 0, 0},
  {1, {10}, 1, {8}, {1}, {0}, {-2}, 0, 1},
  {1, {10}, 1, {-1}, {INT64_MIN}, {0}, {-1}, 0, 1},
  {2, {4, 7}, 2, {1, -100}, {100, -2}, {0, -1}, {1, 3}, 1, 1},
  {3, {3, 1, 6}, 1, {0}, {1}, {1}, {1}, 1, 0},
  {3, {3, 1, 6}, 2, {5, 2}, {-10, 0}, {2, 0}, {-2, -1}, 1, 1},
  {2, {5, 4}, 1, {3}, {3}, {0}, {1}, 0, 0},
  {2, {50, 700}, 2, {1, 3}, {49, 690}, {0, 1}, {2, 1}, 1, 1},
  {3, {2, 3, 4}, 3, {0, 0, 0}, {2, 3, 4}, {0, 1, 2}, {1, 1, -1}, 1, 1},
  {1, {6}, 1, {10}, {-10}, {0}, {-3}, 0, 1},
  {1, {9}, 1, {0}, {9}, {0}, {4}, 0, 1},
  {2, {300, 200}, 1, {-1}, {INT64_MIN}, {-1}, {-7}, 1, 1},
  {3, {4, 5, 6}, 2, {-1, 1}, {-5, 5}, {-3, 2}, {-1, 2}, 1, 1},
};

static void slice_attrs(const slice_case *c, em_attr *at, int *n) {
  *n = 0;
  at[(*n)++] = ais("starts", c->starts, c->n);
  at[(*n)++] = ais("ends", c->ends, c->n);
  if (c->has_axes) at[(*n)++] = ais("axes", c->axes, c->n);
  if (c->has_steps) at[(*n)++] = ais("steps", c->steps, c->n);
}

static void test_slice(void **state) {
  (void)state;
  static slice_ctx ctx;
  for (int c = 0; c < NA(SLICES); c++) {
    const slice_case *sc = &SLICES[c];
    ref_slice(&ctx, sc->nd, sc->x, sc->n, sc->starts, sc->ends, sc->has_axes ? sc->axes : NULL,
              sc->has_steps ? sc->steps : NULL);
    em_attr at[4];
    int n_at;
    slice_attrs(sc, at, &n_at);
    for (int d = 0; d < NA(ALL); d++) {
      em_tensor *x = rand_bytes(ALL[d], sc->nd, sc->x, 7u + (uint64_t)c);
      em_tensor *y = ot_run1("slice", &x, 1, at, n_at);
      char what[64];
      snprintf(what, sizeof what, "slice case %d", c);
      expect_moved(y, x, sc->nd, ctx.count, src_slice, &ctx, what);
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
}

/* ------------------------------------------------------------- concat --- */

static void test_concat(void **state) {
  (void)state;
  struct { int n, nd; int64_t axis; int64_t s[16][3]; } C[] = {
    {1, 2, 0, {{2, 3}}},
    {3, 3, 1, {{2, 1, 4}, {2, 3, 4}, {2, 2, 4}}},
    {3, 1, 0, {{3}, {0}, {5}}},
    {2, 2, -1, {{2, 3}, {2, 5}}},
    {2, 2, 1, {{200, 300}, {200, 100}}},
    {16, 2, 0, {{1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2},
                {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}}},
    {2, 3, 0, {{1, 2, 3}, {4, 2, 3}}},
  };
  for (int c = 0; c < NA(C); c++) {
    int nd = C[c].nd, ax = (int)(C[c].axis < 0 ? C[c].axis + nd : C[c].axis);
    int64_t o[3];
    memcpy(o, C[c].s[0], sizeof o);
    o[ax] = 0;
    for (int i = 0; i < C[c].n; i++) o[ax] += C[c].s[i][ax];
    em_attr at = ai("axis", C[c].axis);
    for (int d = 0; d < NA(ALL); d++) {
      em_tensor *in[16];
      for (int i = 0; i < C[c].n; i++) in[i] = rand_bytes(ALL[d], nd, C[c].s[i], 31u * (uint64_t)c + (uint64_t)i);
      em_tensor *y = ot_run1("concat", in, C[c].n, &at, 1);
      ot_expect_shape(y, ALL[d], nd, o, "concat");
      size_t es = em_dtype_size(ALL[d]);
      int64_t idx[3] = {0, 0, 0};
      for (int64_t f = 0; f < numel(nd, o); f++) {
        unravel(f, nd, o, idx);
        int i = 0; /* which input holds this position along the axis */
        while (idx[ax] >= C[c].s[i][ax]) idx[ax] -= C[c].s[i++][ax];
        int64_t s = ravel(idx, nd, C[c].s[i]);
        if (memcmp((char *)em_tensor_data(y) + f * (int64_t)es, (char *)em_tensor_data(in[i]) + s * (int64_t)es, es))
          fail_msg("concat case %d (%s): element %lld should be input %d's %lld", c, em_dtype_name(ALL[d]),
                   (long long)f, i, (long long)s);
      }
      for (int i = 0; i < C[c].n; i++) em_tensor_release(in[i]);
      em_tensor_release(y);
    }
  }
}

/* ---------------------------------------------------------------- pad --- */

/* The source position of output position o along an axis of size n, or -1
 * for the constant: reflect walks back and forth, edge clamps. */
static int64_t ref_pad_src(int64_t o, int64_t pb, int64_t n, const char *mode) {
  int64_t i = o - pb;
  if (i >= 0 && i < n) return i;
  if (!strcmp(mode, "constant")) return -1;
  if (!strcmp(mode, "edge")) return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  while (i < 0 || i >= n) {
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
  }
  return i;
}

typedef struct pad_case {
  int nd;
  int64_t x[3];
  int64_t pads[6];
  const char *mode;
  double value;
} pad_case;

static const pad_case PADS[] = {
  {1, {3}, {2, 1}, "constant", 7},
  {2, {2, 3}, {1, 2, 0, 1}, "reflect", 0},
  {2, {2, 3}, {1, 2, 3, 4}, "reflect", 0},
  {2, {3, 4}, {1, 1, 2, 2}, "edge", 0},
  {2, {4, 5}, {-1, 2, 1, -2}, "constant", -3},
  {2, {4, 5}, {-1, 0, 2, -3}, "reflect", 0},
  {2, {1, 5}, {2, 0, 2, 0}, "reflect", 0},
  {3, {2, 3, 4}, {0, 1, 0, 1, 0, 2}, "edge", 0},
  {2, {100, 400}, {3, 5, 7, 9}, "constant", -2},
  {2, {3, 3}, {0, 0, 0, 0}, "constant", 1},
  {2, {2, 3}, {0, -3, 0, 1}, "constant", 5},
  {2, {3, 1}, {1, 2, 0, 3}, "constant", 4},
  {2, {2, 5}, {0, -2, 0, -2}, "constant", 0},
  {2, {3, 1}, {0, 2, 1, 3}, "reflect", 0},
};

static void pad_out_shape(const pad_case *p, int64_t *o) {
  for (int i = 0; i < p->nd; i++) o[i] = p->x[i] + p->pads[i] + p->pads[p->nd + i];
}

static void test_pad(void **state) {
  (void)state;
  const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_I32, EM_I64, EM_U8};
  for (int c = 0; c < NA(PADS); c++) {
    const pad_case *p = &PADS[c];
    int64_t o[3];
    pad_out_shape(p, o);
    for (int d = 0; d < NA(dts); d++) {
      /* Every other dtype gets the (integral) value as an INT attribute: the same number. */
      em_attr at[3] = {ais("pads", p->pads, 2 * p->nd), as("mode", p->mode),
                       d % 2 ? ai("value", (int64_t)p->value) : af("value", p->value)};
      double value = dts[d] == EM_U8 && p->value < 0 ? 0 : p->value; /* u8 saturates a negative value to 0 */
      em_tensor *x = ot_rand(dts[d], p->nd, p->x, 40u + (uint64_t)c, 0, 100);
      em_tensor *y = ot_run1("pad", &x, 1, at, 3);
      ot_expect_shape(y, dts[d], p->nd, o, "pad");
      int64_t nx, ny;
      double *xv = ot_values(x, &nx), *yv = ot_values(y, &ny), *want = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
      int64_t idx[3], in[3];
      for (int64_t f = 0; f < ny; f++) {
        unravel(f, p->nd, o, idx);
        int constant = 0;
        for (int k = 0; k < p->nd; k++) {
          in[k] = ref_pad_src(idx[k], p->pads[k], p->x[k], p->mode);
          constant |= in[k] < 0;
        }
        want[f] = constant ? value : xv[ravel(in, p->nd, p->x)];
      }
      char what[64];
      snprintf(what, sizeof what, "pad case %d %s", c, em_dtype_name(dts[d]));
      ot_expect_close(yv, want, ny, 0, 0, what);
      free(xv);
      free(yv);
      free(want);
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
  /* edge and reflect move bytes: bool and bf16 through the byte map */
  for (int c = 0; c < NA(PADS); c++) {
    const pad_case *p = &PADS[c];
    if (!strcmp(p->mode, "constant")) continue;
    em_attr at[2] = {ais("pads", p->pads, 2 * p->nd), as("mode", p->mode)};
    const em_dtype bd[2] = {EM_BOOL, EM_BF16};
    for (int d = 0; d < 2; d++) {
      em_tensor *x = rand_bytes(bd[d], p->nd, p->x, 3);
      em_tensor *y = ot_run1("pad", &x, 1, at, 2);
      int64_t o[3], idx[3], in[3];
      pad_out_shape(p, o);
      ot_expect_shape(y, bd[d], p->nd, o, "pad bytes");
      size_t es = em_dtype_size(bd[d]);
      for (int64_t f = 0; f < numel(p->nd, o); f++) {
        unravel(f, p->nd, o, idx);
        for (int k = 0; k < p->nd; k++) in[k] = ref_pad_src(idx[k], p->pads[k], p->x[k], p->mode);
        if (memcmp((char *)em_tensor_data(y) + (size_t)f * es, (char *)em_tensor_data(x) + (size_t)ravel(in, p->nd, p->x) * es, es))
          fail_msg("pad case %d (%s): element %lld", c, em_dtype_name(bd[d]), (long long)f);
      }
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
}

/* ------------------------------------------------------------- gather --- */

typedef struct gather_ctx {
  int axis, dnd, ind;
  const int64_t *dshape, *ishape;
  const int64_t *idx; /* the indices as written (may be negative) */
} gather_ctx;

static int64_t src_gather(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const gather_ctx *g = ctx;
  int64_t in[8];
  for (int i = 0; i < g->axis; i++) in[i] = o[i];
  int64_t v = g->idx[ravel(o + g->axis, g->ind, g->ishape)];
  in[g->axis] = v < 0 ? v + g->dshape[g->axis] : v;
  for (int i = g->axis + 1; i < g->dnd; i++) in[i] = o[i - 1 + g->ind];
  return ravel(in, g->dnd, g->dshape);
}

static void test_gather(void **state) {
  (void)state;
  static int64_t big_idx[700];
  uint64_t seed = 9;
  for (int i = 0; i < 700; i++) big_idx[i] = (int64_t)(mix(&seed) % 2000) - 1000;
  struct { int dnd; int64_t d[3]; int64_t axis; int ind; int64_t is[2]; const int64_t *vals; } C[] = {
    {2, {10, 4}, 0, 1, {5}, (const int64_t[]){0, 9, -1, 3, 3}},
    {3, {3, 5, 2}, 1, 2, {2, 2}, (const int64_t[]){4, 0, -5, 2}},
    {3, {3, 5, 2}, -1, 0, {0}, (const int64_t[]){1}},
    {1, {4}, 0, 2, {3, 1}, (const int64_t[]){3, -4, 1}},
    {2, {1000, 64}, 0, 1, {700}, big_idx},
    {2, {6, 7}, 1, 1, {0}, (const int64_t[]){0}},
    {3, {1, 1, 1}, 2, 1, {3}, (const int64_t[]){0, -1, 0}},
  };
  for (int c = 0; c < NA(C); c++) {
    int ax = (int)(C[c].axis < 0 ? C[c].axis + C[c].dnd : C[c].axis);
    gather_ctx g = {.axis = ax, .dnd = C[c].dnd, .ind = C[c].ind, .dshape = C[c].d, .ishape = C[c].is, .idx = C[c].vals};
    int64_t o[8];
    int on = 0;
    for (int i = 0; i < ax; i++) o[on++] = C[c].d[i];
    for (int i = 0; i < C[c].ind; i++) o[on++] = C[c].is[i];
    for (int i = ax + 1; i < C[c].dnd; i++) o[on++] = C[c].d[i];
    int64_t ni = numel(C[c].ind, C[c].is);
    int32_t i32[700];
    for (int64_t i = 0; i < ni; i++) i32[i] = (int32_t)C[c].vals[i];
    em_attr at = ai("axis", C[c].axis);
    for (int d = 0; d < NA(ALL); d++) {
      for (int it = 0; it < 2; it++) {
        em_tensor *in[2] = {rand_bytes(ALL[d], C[c].dnd, C[c].d, 50u + (uint64_t)c),
                            it ? from_host(EM_I32, C[c].ind, C[c].is, i32) : from_host(EM_I64, C[c].ind, C[c].is, C[c].vals)};
        em_tensor *y = ot_run1("gather", in, 2, &at, 1);
        char what[64];
        snprintf(what, sizeof what, "gather case %d (%s indices)", c, it ? "i32" : "i64");
        expect_moved(y, in[0], on, o, src_gather, &g, what);
        em_tensor_release(in[0]);
        em_tensor_release(in[1]);
        em_tensor_release(y);
      }
    }
  }
}

/* Out-of-range indices fail the run (not the build), naming op, index and position. */
static void test_gather_bad_index(void **state) {
  (void)state;
  int64_t ds[2] = {4, 3};
  struct { int nd; int64_t is[2]; int64_t v[4]; const char *n1, *n2; int64_t axis; } C[] = {
    {1, {2}, {1, 4}, "index 4", "[1]", 0},
    {2, {2, 2}, {0, 1, -5, 2}, "index -5", "[1,0]", 0},
    {1, {3}, {0, 2, 3}, "index 3", "[2]", 1},
    {1, {1}, {-4}, "index -4", "[0]", 1},
  };
  for (int c = 0; c < NA(C); c++) {
    em_tensor *in[2] = {ot_rand(EM_F32, 2, ds, 1, 0, 1), from_host(EM_I64, C[c].nd, C[c].is, C[c].v)};
    em_attr at = ai("axis", C[c].axis);
    em_tensor *y = NULL;
    em_status s = ot_run("gather", in, 2, &at, 1, &y, 1);
    const char *msg = em_last_error();
    if (s != EM_ERR_INVALID_ARGUMENT) fail_msg("gather case %d: expected EM_ERR_INVALID_ARGUMENT, got %d", c, (int)s);
    if (!strstr(msg, "gather") || !strstr(msg, C[c].n1) || !strstr(msg, C[c].n2))
      fail_msg("gather case %d: message lacks the op, \"%s\" or \"%s\": %s", c, C[c].n1, C[c].n2, msg);
    assert_null(y);
    em_tensor_release(in[0]);
    em_tensor_release(in[1]);
  }
  /* the build accepts any indices: the shapes are fine */
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var v[2], y;
  int64_t is[1] = {2};
  assert_int_equal(em_input(g, "d", EM_F32, 2, ds, &v[0]), EM_OK);
  assert_int_equal(em_input(g, "i", EM_I64, 1, is, &v[1]), EM_OK);
  assert_int_equal(em_apply(g, "gather", v, 2, NULL, 0, &y, 1), EM_OK);
  em_graph_free(g);
}

/* ------------------------------------------------------------ one_hot --- */

static void test_one_hot(void **state) {
  (void)state;
  int64_t is[2] = {2, 3}, v[6] = {0, 3, -1, 4, -5, 2};
  int32_t v32[6] = {0, 3, -1, 4, -5, 2};
  const int64_t depth = 4;
  const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I32, EM_I64, EM_U8, EM_BOOL};
  for (int axis = -1; axis <= 2; axis++) {
    int ax = axis < 0 ? 2 : axis;
    int64_t o[3];
    for (int i = 0, j = 0; i < 3; i++) o[i] = i == ax ? depth : is[j++];
    for (int d = 0; d < NA(dts); d++) {
      for (int it = 0; it < 2; it++) {
        int custom = d % 2;
        double on = custom ? 5 : 1, off = custom ? (dts[d] == EM_U8 ? 2 : -1) : 0;
        /* The second pass gives on/off as INT attributes (integral values): the same numbers. */
        em_attr at[5] = {ai("depth", depth), ai("axis", axis), ai("dtype", dts[d]),
                         it ? ai("on_value", (int64_t)on) : af("on_value", on),
                         it ? ai("off_value", (int64_t)off) : af("off_value", off)};
        int n_at = custom ? 5 : 3;
        em_tensor *x = it ? from_host(EM_I32, 2, is, v32) : from_host(EM_I64, 2, is, v);
        em_tensor *y = ot_run1("one_hot", &x, 1, at, n_at);
        ot_expect_shape(y, dts[d], 3, o, "one_hot");
        int64_t n;
        double *yv = ot_values(y, &n), want[24];
        int64_t idx[3];
        for (int64_t f = 0; f < n; f++) {
          unravel(f, 3, o, idx);
          int64_t q[2], k = idx[ax];
          for (int i = 0, j = 0; i < 3; i++)
            if (i != ax) q[j++] = idx[i];
          int64_t val = v[q[0] * 3 + q[1]];
          int64_t w = val < 0 ? val + depth : val;
          double hot = w == k ? on : off;
          want[f] = dts[d] == EM_BOOL ? hot != 0 : hot;
        }
        char what[64];
        snprintf(what, sizeof what, "one_hot axis %d %s", axis, em_dtype_name(dts[d]));
        ot_expect_close(yv, want, n, 0, 0, what);
        free(yv);
        em_tensor_release(x);
        em_tensor_release(y);
      }
    }
  }
}

/* -------------------------------------------------------------- top_k --- */

static int ref_better(double a, double b, int largest) {
  int an = isnan(a), bn = isnan(b);
  if (largest) return (an && !bn) || (!an && !bn && a > b);
  return (!an && bn) || (!an && !bn && a < b);
}

/* Repeated selection of the best unused element, scanning in index order
 * and replacing only on strictly better: ties go to the lower index. */
static void ref_top_k(const double *x, int nd, const int64_t *shape, int ax, int64_t k, int largest, double *vals,
                      double *inds) {
  int64_t n = shape[ax], outer = 1, inner = 1;
  for (int i = 0; i < ax; i++) outer *= shape[i];
  for (int i = ax + 1; i < nd; i++) inner *= shape[i];
  char *used = malloc((size_t)(n ? n : 1));
  for (int64_t p = 0; p < outer; p++)
    for (int64_t q = 0; q < inner; q++) {
      memset(used, 0, (size_t)n);
      for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
          if (used[i]) continue;
          if (best < 0 || ref_better(x[(p * n + i) * inner + q], x[(p * n + best) * inner + q], largest)) best = i;
        }
        used[best] = 1;
        vals[(p * k + j) * inner + q] = x[(p * n + best) * inner + q];
        inds[(p * k + j) * inner + q] = (double)best;
      }
    }
  free(used);
}

static void check_top_k(em_tensor *x, int64_t k, int64_t axis, int largest, const char *what) {
  int nd = em_tensor_ndim(x);
  const int64_t *shape = em_tensor_shape(x);
  int ax = (int)(axis < 0 ? axis + nd : axis);
  int64_t o[8];
  memcpy(o, shape, sizeof(int64_t) * (size_t)nd);
  o[ax] = k;
  em_attr at[3] = {ai("k", k), ai("axis", axis), ai("largest", largest)};
  em_tensor *y[2] = {NULL, NULL};
  if (ot_run("top_k", &x, 1, at, 3, y, 2)) fail_msg("%s: %s", what, em_last_error());
  ot_expect_shape(y[0], em_tensor_dtype(x), nd, o, what);
  ot_expect_shape(y[1], EM_I64, nd, o, what);
  int64_t n, m;
  double *xv = ot_values(x, &n), *vv = ot_values(y[0], &m), *iv = ot_values(y[1], NULL);
  double *wv = malloc(sizeof(double) * (size_t)(m ? m : 1)), *wi = malloc(sizeof(double) * (size_t)(m ? m : 1));
  ref_top_k(xv, nd, shape, ax, k, largest, wv, wi);
  ot_expect_close(iv, wi, m, 0, 0, what);
  ot_expect_close(vv, wv, m, 0, 0, what);
  free(xv), free(vv), free(iv), free(wv), free(wi);
  em_tensor_release(y[0]);
  em_tensor_release(y[1]);
}

static void test_top_k(void **state) {
  (void)state;
  int64_t s37[2] = {3, 7}, s64[2] = {6, 4}, s253[3] = {2, 5, 3}, s5[1] = {5}, s46[2] = {4, 6}, s4[1] = {4},
          big[2] = {64, 1000};
  em_tensor *x = ot_rand(EM_F64, 2, s37, 1, -1, 1);
  check_top_k(x, 3, -1, 1, "top_k f64 [3,7] k3");
  check_top_k(x, 7, 1, 0, "top_k f64 [3,7] k7 smallest");
  check_top_k(x, 0, 1, 1, "top_k k0");
  em_tensor_release(x);
  x = ot_rand(EM_F32, 2, s64, 2, -1, 1);
  check_top_k(x, 2, 0, 0, "top_k f32 [6,4] axis 0 smallest");
  em_tensor_release(x);
  x = ot_rand(EM_F32, 3, s253, 3, -1, 1);
  check_top_k(x, 5, 1, 1, "top_k [2,5,3] axis 1 k=n");
  em_tensor_release(x);
  /* ties: the lower index first */
  const double tie[5] = {1, 3, 3, 2, 3};
  x = ot_tensor(EM_F64, 1, s5, tie);
  check_top_k(x, 3, 0, 1, "top_k ties");
  check_top_k(x, 2, 0, 0, "top_k ties smallest");
  em_tensor *y[2];
  em_attr at[2] = {ai("k", 3), ai("axis", 0)};
  assert_int_equal(ot_run("top_k", &x, 1, at, 2, y, 2), EM_OK);
  const int64_t *ind = em_tensor_data(y[1]);
  assert_true(ind[0] == 1 && ind[1] == 2 && ind[2] == 4);
  em_tensor_release(y[0]);
  em_tensor_release(y[1]);
  em_tensor_release(x);
  /* integer dtypes with many ties */
  const em_dtype idt[] = {EM_I32, EM_I64, EM_U8, EM_F16, EM_BF16};
  for (int d = 0; d < NA(idt); d++) {
    x = ot_rand(idt[d], 2, s46, 4 + (uint64_t)d, 0, 4);
    check_top_k(x, 4, -1, 1, em_dtype_name(idt[d]));
    check_top_k(x, 3, 0, 0, em_dtype_name(idt[d]));
    em_tensor_release(x);
  }
  /* NaN ranks above +inf */
  const float nanv[4] = {1, NAN, 3, -INFINITY};
  x = from_host(EM_F32, 1, s4, nanv);
  check_top_k(x, 2, 0, 1, "top_k NaN largest");
  check_top_k(x, 3, 0, 0, "top_k NaN smallest");
  em_tensor_release(x);
  x = ot_rand(EM_F32, 2, big, 5, -10, 10);
  check_top_k(x, 10, 1, 1, "top_k big");
  em_tensor_release(x);
}

/* ------------------------------------- depth_to_space, space_to_depth --- */

typedef struct d2s_ctx {
  int64_t b, C, H, W; /* of the depth tensor [N, C, H, W] */
  int crd;
} d2s_ctx;

/* depth_to_space per ONNX: out[n, c, h, w] = x[n, channel, h / b, w / b]. */
static int64_t src_d2s(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const d2s_ctx *p = ctx;
  int64_t b = p->b, c2 = p->C / (b * b), i = o[2] % b, j = o[3] % b;
  int64_t ch = p->crd ? o[1] * b * b + i * b + j : (i * b + j) * c2 + o[1];
  int64_t in[4] = {o[0], ch, o[2] / b, o[3] / b}, xs[4] = {0, p->C, p->H, p->W};
  return ravel(in, 4, xs);
}

/* space_to_depth, the inverse: out[n, channel, h, w] = x[n, c, h*b + i, w*b + j]. */
static int64_t src_s2d(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const d2s_ctx *p = ctx; /* C, H, W of the spatial input here */
  int64_t b = p->b, c, i, j;
  if (p->crd) {
    c = o[1] / (b * b);
    i = o[1] / b % b;
    j = o[1] % b;
  } else {
    c = o[1] % p->C;
    i = o[1] / p->C / b;
    j = o[1] / p->C % b;
  }
  int64_t in[4] = {o[0], c, o[2] * b + i, o[3] * b + j}, xs[4] = {0, p->C, p->H, p->W};
  return ravel(in, 4, xs);
}

static void test_depth_space(void **state) {
  (void)state;
  struct { int64_t x[4], b; } D[] = {{{2, 8, 3, 2}, 2}, {{1, 9, 2, 3}, 3}, {{1, 4, 1, 1}, 2}, {{3, 5, 2, 2}, 1},
                                     {{2, 32, 17, 9}, 4}};
  for (int c = 0; c < NA(D); c++)
    for (int crd = 0; crd < 2; crd++) {
      int64_t b = D[c].b, *x = D[c].x;
      int64_t o[4] = {x[0], x[1] / (b * b), x[2] * b, x[3] * b};
      d2s_ctx p = {b, x[1], x[2], x[3], crd};
      em_attr at[2] = {ai("blocksize", b), as("mode", crd ? "CRD" : "DCR")};
      for (int d = 0; d < NA(ALL); d++) {
        em_tensor *t = rand_bytes(ALL[d], 4, x, 60u + (uint64_t)c);
        em_tensor *y = ot_run1("depth_to_space", &t, 1, at, crd ? 2 : 1 + (c % 2)); /* DCR by default or named */
        expect_moved(y, t, 4, o, src_d2s, &p, crd ? "depth_to_space CRD" : "depth_to_space DCR");
        /* space_to_depth with the same mode inverts it exactly */
        em_tensor *z = ot_run1("space_to_depth", &y, 1, at, crd ? 2 : 1);
        expect_moved(z, t, 4, x, src_flat, NULL, "space_to_depth(depth_to_space)");
        d2s_ctx q = {b, o[1], o[2], o[3], crd};
        expect_moved(z, y, 4, x, src_s2d, &q, crd ? "space_to_depth CRD" : "space_to_depth DCR");
        em_tensor_release(t);
        em_tensor_release(y);
        em_tensor_release(z);
      }
    }
}

/* --------------------------------------------------------------- cast --- */

static em_tensor *cast_run(em_tensor *x, em_dtype to) {
  em_attr at = ai("to", to);
  return ot_run1("cast", &x, 1, &at, 1);
}

static void test_cast_values(void **state) {
  (void)state;
  /* every dtype to every dtype on values all of them hold exactly */
  const double v[7] = {0, 1, 2, 3, 5, 100, 0};
  int64_t s7[1] = {7};
  for (int a = 0; a < NA(ALL); a++)
    for (int b = 0; b < NA(ALL); b++) {
      em_tensor *x = ot_tensor(ALL[a], 1, s7, v);
      em_tensor *y = cast_run(x, ALL[b]);
      ot_expect_shape(y, ALL[b], 1, s7, "cast");
      double *yv = ot_values(y, NULL), want[7];
      for (int i = 0; i < 7; i++) want[i] = ALL[a] == EM_BOOL || ALL[b] == EM_BOOL ? v[i] != 0 : v[i];
      char what[64];
      snprintf(what, sizeof what, "cast %s -> %s", em_dtype_name(ALL[a]), em_dtype_name(ALL[b]));
      ot_expect_close(yv, want, 7, 0, 0, what);
      free(yv);
      em_tensor_release(x);
      em_tensor_release(y);
    }
  /* float -> integer: truncation toward zero, NaN -> 0, saturation */
  const double f[12] = {1.9, -1.9, 0.5, -0.5, NAN, 3e9, -3e9, 2147483647.9, -2147483648.9, INFINITY, -INFINITY, -0.0};
  int64_t s12[1] = {12};
  em_tensor *x = from_host(EM_F64, 1, s12, f);
  em_tensor *y = cast_run(x, EM_I32);
  const int32_t want32[12] = {1, -1, 0, 0, 0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0};
  assert_memory_equal(em_tensor_data(y), want32, sizeof want32);
  em_tensor_release(y);
  y = cast_run(x, EM_I64);
  const int64_t want64[12] = {1, -1, 0, 0, 0, 3000000000ll, -3000000000ll, 2147483647ll, -2147483648ll, INT64_MAX, INT64_MIN, 0};
  assert_memory_equal(em_tensor_data(y), want64, sizeof want64);
  em_tensor_release(y);
  y = cast_run(x, EM_U8);
  const uint8_t want8[12] = {1, 0, 0, 0, 0, 255, 0, 255, 0, 255, 0, 0};
  assert_memory_equal(em_tensor_data(y), want8, sizeof want8);
  em_tensor_release(y);
  y = cast_run(x, EM_BOOL);
  const uint8_t wantb[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  assert_memory_equal(em_tensor_data(y), wantb, sizeof wantb);
  em_tensor_release(y);
  em_tensor_release(x);
  const float big[4] = {1e19f, -1e19f, -7.9f, 255.5f};
  int64_t s4[1] = {4};
  x = from_host(EM_F32, 1, s4, big);
  y = cast_run(x, EM_I64);
  const int64_t wbig[4] = {INT64_MAX, INT64_MIN, -7, 255};
  assert_memory_equal(em_tensor_data(y), wbig, sizeof wbig);
  em_tensor_release(y);
  y = cast_run(x, EM_U8);
  const uint8_t wbig8[4] = {255, 0, 0, 255};
  assert_memory_equal(em_tensor_data(y), wbig8, sizeof wbig8);
  em_tensor_release(y);
  em_tensor_release(x);
  /* integer -> narrower integer keeps the low bits */
  const int64_t iv[5] = {(1ll << 32) + 5, -1, 1ll << 31, 263, -256};
  int64_t s5[1] = {5};
  x = from_host(EM_I64, 1, s5, iv);
  y = cast_run(x, EM_I32);
  const int32_t wi32[5] = {5, -1, INT32_MIN, 263, -256};
  assert_memory_equal(em_tensor_data(y), wi32, sizeof wi32);
  em_tensor_release(y);
  y = cast_run(x, EM_U8);
  const uint8_t wu8[5] = {5, 255, 0, 7, 0};
  assert_memory_equal(em_tensor_data(y), wu8, sizeof wu8);
  em_tensor_release(y);
  em_tensor_release(x);
}

static void test_cast_rounding(void **state) {
  (void)state;
  int64_t s1[1] = {1}, s6[1] = {6};
  /* f64 -> f16 just above a half-way point of f16 but below f32's
   * resolution: rounding through f32 would tie to even (1.0); correct is up. */
  const double d16[1] = {1.0 + ldexp(1, -11) + ldexp(1, -40)};
  em_tensor *x = from_host(EM_F64, 1, s1, d16), *y = cast_run(x, EM_F16);
  assert_int_equal(((const uint16_t *)em_tensor_data(y))[0], 0x3C01);
  em_tensor_release(x), em_tensor_release(y);
  const double d16b[1] = {1.0 + ldexp(1, -8) + ldexp(1, -40)};
  x = from_host(EM_F64, 1, s1, d16b), y = cast_run(x, EM_BF16);
  assert_int_equal(((const uint16_t *)em_tensor_data(y))[0], 0x3F81);
  em_tensor_release(x), em_tensor_release(y);
  /* i64 -> bf16: the tie is broken by a low bit f32 would drop */
  const int64_t i16[2] = {(1ll << 40) + (1ll << 32) + 1, (1ll << 40) + (1ll << 32)};
  int64_t s2[1] = {2};
  x = from_host(EM_I64, 1, s2, i16), y = cast_run(x, EM_BF16);
  assert_int_equal(((const uint16_t *)em_tensor_data(y))[0], 0x5381);
  assert_int_equal(((const uint16_t *)em_tensor_data(y))[1], 0x5380); /* exact tie: to even */
  em_tensor_release(x), em_tensor_release(y);
  /* f32 -> f16: overflow to inf, largest finite, underflow to 0 and to the
   * smallest subnormal, ties to even, NaN stays NaN */
  const float f[6] = {65520.0f, 65519.0f, 1e-8f, 3e-8f, 1.0f + 0x1p-11f, NAN};
  x = from_host(EM_F32, 1, s6, f), y = cast_run(x, EM_F16);
  const uint16_t *h = em_tensor_data(y);
  assert_int_equal(h[0], 0x7C00);
  assert_int_equal(h[1], 0x7BFF);
  assert_int_equal(h[2], 0x0000);
  assert_int_equal(h[3], 0x0001);
  assert_int_equal(h[4], 0x3C00);
  assert_true((h[5] & 0x7C00) == 0x7C00 && (h[5] & 0x03FF) != 0);
  em_tensor_release(y);
  y = cast_run(x, EM_BF16);
  h = em_tensor_data(y);
  assert_int_equal(h[0], 0x4780); /* 65520 = 1.999 * 2^15 rounds to 2^16 in bf16 */
  em_tensor_release(x), em_tensor_release(y);
  /* f16 (bytes) -> f32 and f64 exactly; f16 -> bf16 rounds once */
  const uint16_t hb[3] = {0x3555, 0x0001, 0xFC00};
  int64_t s3[1] = {3};
  x = from_host(EM_F16, 1, s3, hb), y = cast_run(x, EM_F64);
  const double *dv = em_tensor_data(y);
  assert_true(dv[0] == 0.333251953125 && dv[1] == ldexp(1, -24) && dv[2] == -INFINITY);
  em_tensor_release(y);
  y = cast_run(x, EM_BF16);
  h = em_tensor_data(y);
  assert_int_equal(h[0], 0x3EAB); /* 0.33325... = 0x3EAAA000 as f32: rounds up to 0x3EAB */
  assert_int_equal(h[2], 0xFF80);
  em_tensor_release(x), em_tensor_release(y);
}

/* ------------------------------------------------------ expand, tile --- */

typedef struct bcast_ctx {
  int xnd, ond;
  const int64_t *xshape;
} bcast_ctx;

static int64_t src_bcast(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const bcast_ctx *b = ctx;
  int64_t in[8];
  for (int j = 0; j < b->xnd; j++) in[j] = b->xshape[j] == 1 ? 0 : o[j + b->ond - b->xnd];
  return ravel(in, b->xnd, b->xshape);
}

static void test_expand(void **state) {
  (void)state;
  struct { int xn; int64_t x[3]; int sn; int64_t s[3]; int on; int64_t o[3]; } C[] = {
    {2, {3, 1}, 3, {2, 3, 4}, 3, {2, 3, 4}}, {1, {1}, 1, {5}, 1, {5}},
    {2, {2, 1}, 2, {1, 3}, 2, {2, 3}},       {1, {4}, 2, {3, 1}, 2, {3, 4}},
    {2, {2, 3}, 0, {0}, 2, {2, 3}},          {2, {1, 300}, 2, {400, 300}, 2, {400, 300}},
    {3, {1, 1, 1}, 3, {2, 0, 3}, 3, {2, 0, 3}}, {2, {500, 1}, 2, {1, 200}, 2, {500, 200}},
  };
  for (int c = 0; c < NA(C); c++) {
    bcast_ctx b = {C[c].xn, C[c].on, C[c].x};
    em_attr at = ais("shape", C[c].s, C[c].sn);
    for (int d = 0; d < NA(ALL); d++) {
      em_tensor *x = rand_bytes(ALL[d], C[c].xn, C[c].x, 70u + (uint64_t)c);
      em_tensor *y = ot_run1("expand", &x, 1, &at, 1);
      expect_moved(y, x, C[c].on, C[c].o, src_bcast, &b, "expand");
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
}

typedef struct tile_ctx {
  int nd;
  const int64_t *xshape;
} tile_ctx;

static int64_t src_tile(int64_t flat, const int64_t *o, const void *ctx) {
  (void)flat;
  const tile_ctx *t = ctx;
  int64_t in[8];
  for (int i = 0; i < t->nd; i++) in[i] = o[i] % t->xshape[i];
  return ravel(in, t->nd, t->xshape);
}

static void test_tile(void **state) {
  (void)state;
  struct { int nd; int64_t x[3], r[3]; } C[] = {
    {2, {2, 3}, {2, 3}}, {3, {1, 4, 1}, {3, 1, 2}}, {1, {3}, {0}}, {2, {5, 7}, {1, 1}},
    {2, {100, 40}, {3, 5}}, {1, {1}, {70000}}, {3, {2, 1, 3}, {1, 4, 1}},
  };
  for (int c = 0; c < NA(C); c++) {
    tile_ctx t = {C[c].nd, C[c].x};
    int64_t o[3];
    for (int i = 0; i < C[c].nd; i++) o[i] = C[c].x[i] * C[c].r[i];
    em_attr at = ais("repeats", C[c].r, C[c].nd);
    for (int d = 0; d < NA(ALL); d++) {
      em_tensor *x = rand_bytes(ALL[d], C[c].nd, C[c].x, 80u + (uint64_t)c);
      em_tensor *y = ot_run1("tile", &x, 1, &at, 1);
      expect_moved(y, x, C[c].nd, o, src_tile, &t, "tile");
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
}

/* ---------------------------------------------------------- gradients --- */

static const double TOL = 1e-6;

static void grad1(const char *op, int nd, const int64_t *shape, const em_attr *at, int n_at, uint64_t seed) {
  em_tensor *x = ot_rand(EM_F64, nd, shape, seed, -2, 2);
  ot_gradcheck(op, &x, 1, at, n_at, 1, 0, TOL);
  em_tensor_release(x);
}

static void test_grad_reshape_family(void **state) {
  (void)state;
  int64_t s234[3] = {2, 3, 4}, r1[2] = {4, 6}, r2[2] = {0, -1}, s131[3] = {1, 3, 1}, ax[1] = {0}, s34[2] = {3, 4};
  em_attr at = ais("shape", r1, 2);
  grad1("reshape", 3, s234, &at, 1, 1);
  at = ais("shape", r2, 2);
  grad1("reshape", 3, s234, &at, 1, 2);
  grad1("squeeze", 3, s131, NULL, 0, 3);
  at = ais("axes", ax, 1);
  grad1("squeeze", 3, s131, &at, 1, 4);
  int64_t ua[2] = {1, -1};
  at = ais("axes", ua, 2);
  grad1("unsqueeze", 2, s34, &at, 1, 5);
  grad1("expand_dims", 2, s34, &at, 1, 6);
  at = ai("axis", 2);
  grad1("flatten", 3, s234, &at, 1, 7);
  grad1("flatten", 3, s234, NULL, 0, 8);
  /* reshape_like: gradient into x only ('like' gets none: skipped) */
  int64_t s26[2] = {2, 6};
  em_tensor *in[2] = {ot_rand(EM_F64, 2, s26, 9, -1, 1), ot_rand(EM_F64, 2, s34, 10, -1, 1)};
  ot_gradcheck("reshape_like", in, 2, NULL, 0, 1, 2u, TOL);
  em_tensor_release(in[0]);
  em_tensor_release(in[1]);
}

static void test_grad_transpose(void **state) {
  (void)state;
  int64_t s234[3] = {2, 3, 4}, p[3] = {2, 0, 1}, s2345[4] = {2, 3, 4, 5}, p2[4] = {0, 1, 3, 2}, s37[2] = {3, 7};
  em_attr at = ais("perm", p, 3);
  grad1("transpose", 3, s234, &at, 1, 1);
  at = ais("perm", p2, 4);
  grad1("transpose", 4, s2345, &at, 1, 2);
  grad1("transpose", 2, s37, NULL, 0, 3);
}

static void test_grad_slice_concat(void **state) {
  (void)state;
  for (int c = 0; c < NA(SLICES); c++) {
    const slice_case *sc = &SLICES[c];
    if (numel(sc->nd, sc->x) > 200) continue; /* gradcheck runs the graph twice per element */
    em_attr at[4];
    int n_at;
    slice_attrs(sc, at, &n_at);
    grad1("slice", sc->nd, sc->x, at, n_at, 20u + (uint64_t)c);
  }
  int64_t a[3] = {2, 1, 4}, b[3] = {2, 3, 4}, c3[3] = {2, 2, 4};
  em_tensor *in[3] = {ot_rand(EM_F64, 3, a, 1, -1, 1), ot_rand(EM_F64, 3, b, 2, -1, 1), ot_rand(EM_F64, 3, c3, 3, -1, 1)};
  em_attr at = ai("axis", 1);
  ot_gradcheck("concat", in, 3, &at, 1, 1, 0, TOL);
  at = ai("axis", -2);
  ot_gradcheck("concat", in, 3, &at, 1, 1, 0, TOL);
  ot_gradcheck("concat", in, 1, &at, 1, 1, 0, TOL);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
}

static void test_grad_pad(void **state) {
  (void)state;
  for (int c = 0; c < NA(PADS); c++) {
    const pad_case *p = &PADS[c];
    if (numel(p->nd, p->x) > 200) continue;
    em_attr at[3] = {ais("pads", p->pads, 2 * p->nd), as("mode", p->mode), af("value", p->value)};
    grad1("pad", p->nd, p->x, at, 3, 30u + (uint64_t)c);
  }
}

static void test_grad_gather(void **state) {
  (void)state;
  int64_t ds[2] = {5, 3}, is[1] = {6}, iv[6] = {1, 4, -1, 1, 0, 1};
  em_tensor *in[2] = {ot_rand(EM_F64, 2, ds, 1, -1, 1), from_host(EM_I64, 1, is, iv)};
  ot_gradcheck("gather", in, 2, NULL, 0, 1, 0, TOL);
  em_tensor_release(in[0]);
  em_tensor_release(in[1]);
  int64_t ds3[3] = {2, 4, 3}, is2[2] = {2, 3};
  int32_t iv2[6] = {3, 0, 3, -4, 2, 3};
  em_tensor *in2[2] = {ot_rand(EM_F64, 3, ds3, 2, -1, 1), from_host(EM_I32, 2, is2, iv2)};
  em_attr at = ai("axis", 1);
  ot_gradcheck("gather", in2, 2, &at, 1, 1, 0, TOL);
  at = ai("axis", -1);
  int32_t iv3[6] = {0, 2, 2, -1, 1, 0};
  em_tensor_release(in2[1]);
  in2[1] = from_host(EM_I32, 2, is2, iv3);
  ot_gradcheck("gather", in2, 2, &at, 1, 1, 0, TOL);
  em_tensor_release(in2[0]);
  em_tensor_release(in2[1]);
}

static void test_grad_top_k(void **state) {
  (void)state;
  int64_t s[2] = {3, 7}, s3[3] = {2, 5, 3};
  em_attr at[3] = {ai("k", 3), ai("axis", -1), ai("largest", 1)};
  em_tensor *x = ot_rand(EM_F64, 2, s, 1, -3, 3);
  ot_gradcheck("top_k", &x, 1, at, 3, 2, 0, TOL);
  at[2] = ai("largest", 0);
  ot_gradcheck("top_k", &x, 1, at, 3, 2, 0, TOL);
  em_tensor_release(x);
  x = ot_rand(EM_F64, 3, s3, 2, -3, 3);
  em_attr at2[2] = {ai("k", 2), ai("axis", 1)};
  ot_gradcheck("top_k", &x, 1, at2, 2, 2, 0, TOL);
  em_tensor_release(x);
}

static void test_grad_depth_space_cast(void **state) {
  (void)state;
  int64_t s[4] = {2, 8, 2, 3}, s2[4] = {1, 2, 4, 6};
  for (int crd = 0; crd < 2; crd++) {
    em_attr at[2] = {ai("blocksize", 2), as("mode", crd ? "CRD" : "DCR")};
    grad1("depth_to_space", 4, s, at, 2, 1u + (uint64_t)crd);
    grad1("space_to_depth", 4, s2, at, 2, 3u + (uint64_t)crd);
  }
  int64_t s34[2] = {3, 4};
  em_attr to = ai("to", EM_F64);
  grad1("cast", 2, s34, &to, 1, 5);
}

static void test_grad_expand_tile(void **state) {
  (void)state;
  int64_t x[2] = {3, 1}, sh[3] = {2, 3, 4}, x2[2] = {2, 3}, r[2] = {2, 2}, x3[3] = {1, 3, 1}, r3[3] = {2, 1, 3};
  em_attr at = ais("shape", sh, 3);
  grad1("expand", 2, x, &at, 1, 1);
  at = ais("repeats", r, 2);
  grad1("tile", 2, x2, &at, 1, 2);
  at = ais("repeats", r3, 3);
  grad1("tile", 3, x3, &at, 1, 3);
}

/* cast f64 -> f32: the gradient comes back as f64 (dy cast to x's dtype).
 * A finite difference through f32 is too coarse, so the vector-Jacobian
 * product is checked exactly: d sum(cast(x) * w) / dx = w. */
static void test_grad_cast_f32(void **state) {
  (void)state;
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t s[2] = {2, 3};
  em_var x, y, wv, loss, gx;
  assert_int_equal(em_input(g, "x", EM_F64, 2, s, &x), EM_OK);
  em_attr to = ai("to", EM_F32);
  assert_int_equal(em_apply(g, "cast", &x, 1, &to, 1, &y, 1), EM_OK);
  em_tensor *w = ot_rand(EM_F32, 2, s, 3, -1, 1);
  assert_int_equal(em_constant(g, w, &wv), EM_OK);
  em_var yw[2] = {y, wv};
  assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
  assert_int_equal(em_gradients(g, loss, &x, 1, &gx), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &gx, 1, em_cpu(), &e), EM_OK);
  em_tensor *xt = ot_rand(EM_F64, 2, s, 4, -1, 1), *gt = NULL;
  em_feed f = {x, xt};
  assert_int_equal(em_exec_run(e, &f, 1, &gt), EM_OK);
  ot_expect_shape(gt, EM_F64, 2, s, "cast gradient");
  double *gv = ot_values(gt, NULL), *wv2 = ot_values(w, NULL);
  ot_expect_close(gv, wv2, 6, 0, 0, "cast gradient");
  free(gv), free(wv2);
  em_tensor_release(xt), em_tensor_release(gt), em_tensor_release(w);
  em_exec_free(e);
  em_graph_free(g);
}

/* ----------------------------------------- internal gradient ops direct --- */

/* Second order: the gradient ops' own gradients with respect to dy (input
 * 0), against central differences (ot_grad_dy_check). They used to be
 * no_grad in every input, so a gradient of a gradient through slice, pad,
 * gather or tile was a silent 0. _top_k_grad and _concat_grad have none
 * yet: asking for one is an error naming the op. */
static void test_grad_second_order(void **state) {
  (void)state;
  const int64_t s34[2] = {3, 4}, s22[2] = {2, 2};
  em_tensor *x34 = ot_rand(EM_F64, 2, s34, 91, -1, 1);
  /* _slice_grad(dy [2, 2], x [3, 4]): rows 1..2, columns 0..3 step 2 */
  em_attr sat[4] = {ais("starts", (const int64_t[]){1, 0}, 2), ais("ends", (const int64_t[]){3, 4}, 2),
                    ais("axes", (const int64_t[]){0, 1}, 2), ais("steps", (const int64_t[]){1, 2}, 2)};
  em_tensor *sin[2] = {ot_rand(EM_F64, 2, s22, 92, -1, 1), x34};
  ot_grad_dy_check("_slice_grad", sin, 2, 0, sat, 4, 101);
  em_tensor_release(sin[0]);
  /* _pad_grad(dy [5, 7], x [3, 4]) in each mode: pads 1, 2 before, 1, 1 after; constant with a value that the
   * second-order gradient must ignore */
  const char *modes[3] = {"constant", "reflect", "edge"};
  const int64_t s57[2] = {5, 7};
  for (int m = 0; m < 3; m++) {
    em_attr pat[3] = {ais("pads", (const int64_t[]){1, 2, 1, 1}, 4), as("mode", modes[m]), af("value", 2.5)};
    em_tensor *pin[2] = {ot_rand(EM_F64, 2, s57, 93 + (uint64_t)m, -1, 1), x34};
    ot_grad_dy_check("_pad_grad", pin, 2, 0, pat, 3, 102 + (uint64_t)m);
    em_tensor_release(pin[0]);
  }
  /* negative pads crop: _pad_grad(dy, x [3, 4]) in each mode for pads cropping one side and padding the other,
   * and cropping both sides of an axis */
  const int64_t crops[3][4] = {{-1, 2, 1, -1}, {1, -2, -1, 2}, {-1, -1, 0, -1}};
  for (int p = 0; p < 3; p++)
    for (int m = 0; m < 3; m++) {
      em_attr pat[3] = {ais("pads", crops[p], 4), as("mode", modes[m]), af("value", 2.5)};
      em_tensor *y = ot_run1("pad", &x34, 1, pat, 3);
      em_tensor *pin[2] = {ot_rand(EM_F64, em_tensor_ndim(y), em_tensor_shape(y), 110 + (uint64_t)(3 * p + m), -1, 1),
                           x34};
      ot_grad_dy_check("_pad_grad", pin, 2, 0, pat, 3, 120 + (uint64_t)(3 * p + m));
      em_tensor_release(pin[0]), em_tensor_release(y);
    }
  /* _slice_grad with negative steps and bounds clamped to the axis */
  em_attr nsat[4] = {ais("starts", (const int64_t[]){-100, 3}, 2), ais("ends", (const int64_t[]){100, -100}, 2),
                     ais("axes", (const int64_t[]){0, 1}, 2), ais("steps", (const int64_t[]){2, -2}, 2)};
  em_tensor *nsin[2] = {ot_rand(EM_F64, 2, s22, 98, -1, 1), x34};
  ot_grad_dy_check("_slice_grad", nsin, 2, 0, nsat, 4, 107);
  em_tensor_release(nsin[0]);
  /* _gather_grad(dy [3, 3], indices [3] with a repeat and a negative one, data [3, 4]) along axis 1 */
  const int64_t s33[2] = {3, 3}, s3[1] = {3};
  em_attr gat = ai("axis", 1);
  em_tensor *gin[3] = {ot_rand(EM_F64, 2, s33, 96, -1, 1), ot_tensor(EM_I64, 1, s3, (const double[]){2, -2, 2}), x34};
  ot_grad_dy_check("_gather_grad", gin, 3, 0, &gat, 1, 105);
  em_tensor_release(gin[0]), em_tensor_release(gin[1]);
  /* _tile_grad(dy [6, 8], x [3, 4]) for repeats 2, 2 */
  const int64_t s68[2] = {6, 8};
  em_attr tat = ais("repeats", (const int64_t[]){2, 2}, 2);
  em_tensor *tin[2] = {ot_rand(EM_F64, 2, s68, 97, -1, 1), x34};
  ot_grad_dy_check("_tile_grad", tin, 2, 0, &tat, 1, 106);
  em_tensor_release(tin[0]);
  em_tensor_release(x34);

  /* no second order through _top_k_grad: an error, not a zero. ys = sum(top_k(x)^2) has the gradient
   * _top_k_grad(2 top_k(x), indices, x), whose dy depends on x */
  em_graph *g;
  em_var x, w, tk[2], sq, ys, dx, dw, l, ddx;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F64, 2, s34, &x), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F64, 2, s34, &w), EM_OK);
  em_attr kat = ai("k", 2);
  assert_int_equal(em_apply(g, "top_k", &x, 1, &kat, 1, tk, 2), EM_OK);
  assert_int_equal(em_apply(g, "mul", (em_var[]){tk[0], tk[0]}, 2, NULL, 0, &sq, 1), EM_OK);
  assert_int_equal(em_apply(g, "reduce_sum", &sq, 1, NULL, 0, &ys, 1), EM_OK);
  assert_int_equal(em_gradients(g, ys, &x, 1, &dx), EM_OK);
  assert_int_equal(em_apply(g, "mul", (em_var[]){dx, w}, 2, NULL, 0, &dw, 1), EM_OK);
  assert_int_equal(em_apply(g, "reduce_sum", &dw, 1, NULL, 0, &l, 1), EM_OK);
  assert_int_equal(em_gradients(g, l, &x, 1, &ddx), EM_ERR_UNSUPPORTED);
  if (!strstr(em_last_error(), "_top_k_grad") || !strstr(em_last_error(), "no gradient"))
    fail_msg("the error should name _top_k_grad and say it has no gradient: %s", em_last_error());
  em_graph_free(g);
}

/* The summing gradients in f16 (computed in f32, rounded once) and f32,
 * against float64 sums; values are small integers so the sums are exact. */
static void test_grad_ops_direct(void **state) {
  (void)state;
  const em_dtype dts[] = {EM_F16, EM_BF16, EM_F32, EM_F64};
  for (int d = 0; d < NA(dts); d++) {
    /* _gather_grad: dy [6,3] into data [5,3] at indices with repeats */
    int64_t ds[2] = {5, 3}, is[1] = {6}, iv[6] = {1, 4, -1, 1, 0, 1}, dys[2] = {6, 3};
    em_tensor *dy = ot_rand(dts[d], 2, dys, 1, -8, 8);
    double *dv = ot_values(dy, NULL);
    for (int i = 0; i < 18; i++) dv[i] = floor(dv[i]);
    em_tensor_release(dy);
    dy = ot_tensor(dts[d], 2, dys, dv);
    em_tensor *in[3] = {dy, from_host(EM_I64, 1, is, iv), ot_tensor(dts[d], 2, ds, NULL)};
    em_tensor *y = ot_run1("_gather_grad", in, 3, NULL, 0);
    ot_expect_shape(y, dts[d], 2, ds, "_gather_grad");
    double want[15] = {0}, *yv = ot_values(y, NULL);
    for (int j = 0; j < 6; j++) {
      int64_t r = iv[j] < 0 ? iv[j] + 5 : iv[j];
      for (int c = 0; c < 3; c++) want[r * 3 + c] += dv[j * 3 + c];
    }
    ot_expect_close(yv, want, 15, 0, 0, "_gather_grad");
    free(yv);
    em_tensor_release(y);
    em_tensor_release(in[1]);
    em_tensor_release(in[2]);
    /* _tile_grad: the same dy [6,3] as x [2,3] tiled [3,1] */
    int64_t xs[2] = {2, 3}, rep[2] = {3, 1};
    em_attr at = ais("repeats", rep, 2);
    em_tensor *tin[2] = {dy, ot_tensor(dts[d], 2, xs, NULL)};
    y = ot_run1("_tile_grad", tin, 2, &at, 1);
    double tw[6] = {0};
    for (int i = 0; i < 6; i++)
      for (int c = 0; c < 3; c++) tw[(i % 2) * 3 + c] += dv[i * 3 + c];
    yv = ot_values(y, NULL);
    ot_expect_close(yv, tw, 6, 0, 0, "_tile_grad");
    free(yv);
    em_tensor_release(y);
    em_tensor_release(tin[1]);
    /* _pad_grad: dy [6,3] back onto x [3,2] padded edge [1,0,2,1] */
    int64_t px[2] = {3, 2}, pads[4] = {1, 0, 2, 1};
    em_attr pat[2] = {ais("pads", pads, 4), as("mode", "edge")};
    em_tensor *pin[2] = {dy, ot_tensor(dts[d], 2, px, NULL)};
    y = ot_run1("_pad_grad", pin, 2, pat, 2);
    double pw[6] = {0};
    for (int o0 = 0; o0 < 6; o0++)
      for (int o1 = 0; o1 < 3; o1++) {
        int64_t i0 = ref_pad_src(o0, 1, 3, "edge"), i1 = ref_pad_src(o1, 0, 2, "edge");
        pw[i0 * 2 + i1] += dv[o0 * 3 + o1];
      }
    yv = ot_values(y, NULL);
    ot_expect_close(yv, pw, 6, 0, 0, "_pad_grad");
    free(yv);
    em_tensor_release(y);
    em_tensor_release(pin[1]);
    free(dv);
    em_tensor_release(dy);
  }
}

/* ----------------------------------------------------- dynamic shapes --- */

static void var_shape(em_graph *g, em_var v, int nd, const int64_t *want, const char *what) {
  em_dtype t;
  int n;
  int64_t s[8];
  assert_int_equal(em_var_info(g, v, &t, &n, s), EM_OK);
  if (n != nd) fail_msg("%s: rank %d, expected %d", what, n, nd);
  for (int i = 0; i < nd; i++)
    if (s[i] != want[i]) fail_msg("%s: dim %d is %lld, expected %lld", what, i, (long long)s[i], (long long)want[i]);
}

static void test_dynamic_shapes(void **state) {
  (void)state;
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t xs[2] = {-1, 6};
  em_var x, y[6];
  assert_int_equal(em_input(g, "x", EM_F32, 2, xs, &x), EM_OK);
  int64_t r0[3] = {0, -1, 2}, r1[1] = {-1}, r2[2] = {2, -1}, r3[2] = {-1, 3};
  em_attr at[4] = {ais("shape", r0, 3), ais("shape", r1, 1), ais("shape", r2, 2), ais("shape", r3, 2)};
  for (int i = 0; i < 4; i++) assert_int_equal(em_apply(g, "reshape", &x, 1, &at[i], 1, &y[i], 1), EM_OK);
  const int64_t b0[3] = {-1, 3, 2}, b1[1] = {-1}, b2[2] = {2, -1}, b3[2] = {-1, 3};
  var_shape(g, y[0], 3, b0, "reshape [0,-1,2]");
  var_shape(g, y[1], 1, b1, "reshape [-1]");
  var_shape(g, y[2], 2, b2, "reshape [2,-1]");
  var_shape(g, y[3], 2, b3, "reshape [-1,3]");
  int64_t st[1] = {1}, en[1] = {-1}, axs[1] = {0};
  em_attr sat[3] = {ais("starts", st, 1), ais("ends", en, 1), ais("axes", axs, 1)};
  assert_int_equal(em_apply(g, "slice", &x, 1, sat, 3, &y[4], 1), EM_OK);
  const int64_t b4[2] = {-1, 6};
  var_shape(g, y[4], 2, b4, "slice of the dynamic axis");
  em_attr tat = ai("axis", 1);
  em_var cin[2] = {x, x};
  assert_int_equal(em_apply(g, "concat", cin, 2, &tat, 1, &y[5], 1), EM_OK);
  const int64_t b5[2] = {-1, 12};
  var_shape(g, y[5], 2, b5, "concat");
  em_exec *e;
  assert_int_equal(em_exec_create(g, y, 6, em_cpu(), &e), EM_OK);
  for (int64_t batch = 1; batch <= 4; batch += 3) {
    int64_t s[2] = {batch, 6};
    em_tensor *xt = ot_rand(EM_F32, 2, s, 1, -1, 1), *out[6] = {0};
    em_feed f = {x, xt};
    assert_int_equal(em_exec_run(e, &f, 1, out), EM_OK);
    const int64_t o0[3] = {batch, 3, 2}, o1[1] = {batch * 6}, o2[2] = {2, batch * 3}, o3[2] = {batch * 2, 3},
                  o4[2] = {batch > 2 ? batch - 2 : 0, 6}, o5[2] = {batch, 12};
    ot_expect_shape(out[0], EM_F32, 3, o0, "dynamic reshape 0");
    ot_expect_shape(out[1], EM_F32, 1, o1, "dynamic reshape 1");
    ot_expect_shape(out[2], EM_F32, 2, o2, "dynamic reshape 2");
    ot_expect_shape(out[3], EM_F32, 2, o3, "dynamic reshape 3");
    ot_expect_shape(out[4], EM_F32, 2, o4, "dynamic slice");
    ot_expect_shape(out[5], EM_F32, 2, o5, "dynamic concat");
    for (int i = 0; i < 4; i++) assert_memory_equal(em_tensor_data(out[i]), em_tensor_data(xt), (size_t)batch * 24);
    if (batch > 2) assert_memory_equal(em_tensor_data(out[4]), (float *)em_tensor_data(xt) + 6, (size_t)(batch - 2) * 24);
    for (int i = 0; i < 6; i++) em_tensor_release(out[i]);
    em_tensor_release(xt);
  }
  em_exec_free(e);
  em_graph_free(g);
}

/* Gradients whose shapes depend on the run: concat along the dynamic axis
 * (_concat_grad), concat of inputs where only one is dynamic on another
 * axis, slice and gather of the dynamic axis. Loss = sum(y * w) with w fed,
 * so d loss / d x is w routed back through the op. */
static void test_dynamic_gradients(void **state) {
  (void)state;
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t d3[2] = {-1, 3}, s23[2] = {2, 3};
  em_var x1, x2, w, y, loss, gr[2];
  assert_int_equal(em_input(g, "x1", EM_F64, 2, d3, &x1), EM_OK);
  assert_int_equal(em_input(g, "x2", EM_F64, 2, s23, &x2), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F64, 2, d3, &w), EM_OK);
  em_var cin[3] = {x2, x1, x2};
  em_attr at = ai("axis", 0);
  assert_int_equal(em_apply(g, "concat", cin, 3, &at, 1, &y, 1), EM_OK);
  em_var yw[2] = {y, w};
  assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
  em_var xs[2] = {x1, x2};
  assert_int_equal(em_gradients(g, loss, xs, 2, gr), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, gr, 2, em_cpu(), &e), EM_OK);
  for (int64_t b = 1; b <= 5; b += 4) {
    int64_t sb[2] = {b, 3}, sw[2] = {b + 4, 3};
    em_tensor *t1 = ot_rand(EM_F64, 2, sb, 1, -1, 1), *t2 = ot_rand(EM_F64, 2, s23, 2, -1, 1);
    em_tensor *tw = ot_rand(EM_F64, 2, sw, 3, -1, 1), *out[2] = {0};
    em_feed f[3] = {{x1, t1}, {x2, t2}, {w, tw}};
    if (em_exec_run(e, f, 3, out)) fail_msg("dynamic concat gradient: %s", em_last_error());
    const double *wd = em_tensor_data(tw);
    double *g1 = ot_values(out[0], NULL), *g2 = ot_values(out[1], NULL), want[6];
    ot_expect_close(g1, wd + 6, b * 3, 0, 0, "d x1");
    free(g1);
    for (int i = 0; i < 6; i++) want[i] = wd[i] + wd[6 + b * 3 + i];
    ot_expect_close(g2, want, 6, 0, 0, "d x2");
    free(g2);
    em_tensor_release(t1), em_tensor_release(t2), em_tensor_release(tw);
    em_tensor_release(out[0]), em_tensor_release(out[1]);
  }
  em_exec_free(e);
  em_graph_free(g);

  /* concat on axis 1 where x1 is dynamic on axis 0 and x2 is not */
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t d2[2] = {-1, 2}, s43[2] = {4, 3}, s45[2] = {4, 5};
  assert_int_equal(em_input(g, "x1", EM_F64, 2, d2, &x1), EM_OK);
  assert_int_equal(em_input(g, "x2", EM_F64, 2, s43, &x2), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F64, 2, s45, &w), EM_OK);
  em_var c2[2] = {x1, x2};
  at = ai("axis", 1);
  assert_int_equal(em_apply(g, "concat", c2, 2, &at, 1, &y, 1), EM_OK);
  yw[0] = y, yw[1] = w;
  assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
  xs[0] = x1, xs[1] = x2;
  if (em_gradients(g, loss, xs, 2, gr)) fail_msg("concat gradient: %s", em_last_error());
  var_shape(g, gr[0], 2, d2, "gradient of a dynamic concat input");
  assert_int_equal(em_exec_create(g, gr, 2, em_cpu(), &e), EM_OK);
  int64_t s42[2] = {4, 2};
  em_tensor *t1 = ot_rand(EM_F64, 2, s42, 1, -1, 1), *t2 = ot_rand(EM_F64, 2, s43, 2, -1, 1);
  em_tensor *tw = ot_rand(EM_F64, 2, s45, 3, -1, 1), *out[2] = {0};
  em_feed f[3] = {{x1, t1}, {x2, t2}, {w, tw}};
  if (em_exec_run(e, f, 3, out)) fail_msg("concat gradient: %s", em_last_error());
  const double *wd = em_tensor_data(tw), *g1 = em_tensor_data(out[0]), *g2 = em_tensor_data(out[1]);
  for (int r = 0; r < 4; r++) {
    for (int c = 0; c < 2; c++) assert_true(g1[r * 2 + c] == wd[r * 5 + c]);
    for (int c = 0; c < 3; c++) assert_true(g2[r * 3 + c] == wd[r * 5 + 2 + c]);
  }
  em_tensor_release(t1), em_tensor_release(t2), em_tensor_release(tw);
  em_tensor_release(out[0]), em_tensor_release(out[1]);
  em_exec_free(e);
  em_graph_free(g);

  /* 16 inputs concatenated along the dynamic axis: each piece's gradient
   * must be found from the nearer end (at most 10 inputs per node) */
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var xk[16], gk[16];
  int64_t d12[2] = {-1, 2};
  for (int k = 0; k < 16; k++) assert_int_equal(em_input(g, NULL, EM_F64, 2, d12, &xk[k]), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F64, 2, d12, &w), EM_OK);
  at = ai("axis", 0);
  assert_int_equal(em_apply(g, "concat", xk, 16, &at, 1, &y, 1), EM_OK);
  yw[0] = y, yw[1] = w;
  assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
  if (em_gradients(g, loss, xk, 16, gk)) fail_msg("16-input concat gradient: %s", em_last_error());
  assert_int_equal(em_exec_create(g, gk, 16, em_cpu(), &e), EM_OK);
  em_feed fk[17];
  em_tensor *tk[17], *ok[16] = {0};
  int64_t rows_total = 0;
  for (int k = 0; k < 16; k++) {
    int64_t sk[2] = {k % 3, 2};
    rows_total += sk[0];
    tk[k] = ot_rand(EM_F64, 2, sk, (uint64_t)k, -1, 1);
    fk[k] = (em_feed){xk[k], tk[k]};
  }
  int64_t swk[2] = {rows_total, 2};
  tk[16] = ot_rand(EM_F64, 2, swk, 99, -1, 1);
  fk[16] = (em_feed){w, tk[16]};
  if (em_exec_run(e, fk, 17, ok)) fail_msg("16-input concat gradient run: %s", em_last_error());
  const double *wk = em_tensor_data(tk[16]);
  for (int k = 0, row = 0; k < 16; k++) {
    int64_t sk[2] = {k % 3, 2};
    ot_expect_shape(ok[k], EM_F64, 2, sk, "16-input concat gradient");
    if (sk[0]) assert_memory_equal(em_tensor_data(ok[k]), wk + row * 2, (size_t)sk[0] * 2 * sizeof(double));
    row += (int)sk[0];
    em_tensor_release(ok[k]);
  }
  for (int k = 0; k < 17; k++) em_tensor_release(tk[k]);
  em_exec_free(e);
  em_graph_free(g);

  /* slice (step 2) and gather of the dynamic axis */
  for (int which = 0; which < 2; which++) {
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_var x, idx = -1;
    assert_int_equal(em_input(g, "x", EM_F64, 2, d3, &x), EM_OK);
    int64_t st[1] = {1}, en[1] = {INT64_MAX}, stp[1] = {2}, one[1] = {3};
    if (which == 0) {
      em_attr sat[3] = {ais("starts", st, 1), ais("ends", en, 1), ais("steps", stp, 1)};
      assert_int_equal(em_apply(g, "slice", &x, 1, sat, 3, &y, 1), EM_OK);
    } else {
      assert_int_equal(em_input(g, "i", EM_I64, 1, one, &idx), EM_OK);
      em_var gin[2] = {x, idx};
      assert_int_equal(em_apply(g, "gather", gin, 2, NULL, 0, &y, 1), EM_OK);
    }
    em_dtype dt;
    int nd;
    int64_t ys[8];
    em_var_info(g, y, &dt, &nd, ys);
    assert_int_equal(em_input(g, "w", EM_F64, nd, ys, &w), EM_OK);
    yw[0] = y, yw[1] = w;
    assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
    assert_int_equal(em_gradients(g, loss, &x, 1, gr), EM_OK);
    assert_int_equal(em_exec_create(g, gr, 1, em_cpu(), &e), EM_OK);
    int64_t sx[2] = {5, 3}, iv[3] = {4, -1, 0};
    int64_t swd[2] = {which ? 3 : 2, 3};
    em_tensor *tx = ot_rand(EM_F64, 2, sx, 1, -1, 1), *ti = from_host(EM_I64, 1, one, iv);
    em_tensor *tw2 = ot_rand(EM_F64, 2, swd, 2, -1, 1), *gx = NULL;
    em_feed fs[3] = {{x, tx}, {w, tw2}, {which ? idx : w, which ? ti : tw2}};
    if (em_exec_run(e, fs, which ? 3 : 2, &gx)) fail_msg("dynamic gradient %d: %s", which, em_last_error());
    double want[15] = {0};
    const double *wv = em_tensor_data(tw2);
    for (int r = 0; r < swd[0]; r++) {
      int64_t src = which ? (iv[r] < 0 ? iv[r] + 5 : iv[r]) : 1 + 2 * r;
      for (int c = 0; c < 3; c++) want[src * 3 + c] += wv[r * 3 + c];
    }
    double *gv = ot_values(gx, NULL);
    ot_expect_close(gv, want, 15, 0, 0, which ? "gather gradient, dynamic axis" : "slice gradient, dynamic axis");
    free(gv);
    em_tensor_release(tx), em_tensor_release(ti), em_tensor_release(tw2), em_tensor_release(gx);
    em_exec_free(e);
    em_graph_free(g);
  }
}

/* ------------------------------------------------------- determinism --- */

/* The parallel paths give the same bits on 1 thread and on many. */
static void test_thread_independence(void **state) {
  (void)state;
  int64_t ds[2] = {300, 128}, is[1] = {5000}, dys[2] = {5000, 128};
  int64_t *iv = malloc(sizeof(int64_t) * 5000);
  uint64_t seed = 5;
  for (int i = 0; i < 5000; i++) iv[i] = (int64_t)(mix(&seed) % 300);
  em_tensor *in[3] = {ot_rand(EM_F32, 2, dys, 1, -1, 1), from_host(EM_I64, 1, is, iv), ot_tensor(EM_F32, 2, ds, NULL)};
  int64_t ts[2] = {300, 500}, rep[2] = {40, 3}, tx[2] = {20, 100};
  em_tensor *big = ot_rand(EM_F32, 2, ts, 2, -1, 1);
  em_tensor *tin[2] = {ot_rand(EM_F32, 2, (int64_t[]){800, 300}, 3, -1, 1), ot_tensor(EM_F32, 2, tx, NULL)};
  em_attr tat = ais("repeats", rep, 2);
  em_tensor *r[2][3];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(em_set_num_threads(k ? 0 : 1), EM_OK);
    r[k][0] = ot_run1("_gather_grad", in, 3, NULL, 0);
    r[k][1] = ot_run1("transpose", &big, 1, NULL, 0);
    r[k][2] = ot_run1("_tile_grad", tin, 2, &tat, 1);
  }
  for (int j = 0; j < 3; j++) {
    assert_int_equal(em_tensor_numel(r[0][j]), em_tensor_numel(r[1][j]));
    assert_memory_equal(em_tensor_data(r[0][j]), em_tensor_data(r[1][j]), (size_t)em_tensor_numel(r[0][j]) * 4);
    em_tensor_release(r[0][j]);
    em_tensor_release(r[1][j]);
  }
  free(iv);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  em_tensor_release(big);
  em_tensor_release(tin[0]);
  em_tensor_release(tin[1]);
}

/* ------------------------------------------------------------ errors --- */

static void test_errors(void **state) {
  (void)state;
  const em_dtype f[3] = {EM_F32, EM_F32, EM_F32};
  const int n1[1] = {1}, n2[2] = {2, 2}, n4[1] = {4};
  int64_t s23[2] = {2, 3}, s24[2] = {2, 4}, s131[3] = {1, 3, 1};
  const int64_t *x23[1] = {s23};
  /* reshape to another element count names both shapes */
  int64_t r42[2] = {4, 2};
  em_attr at = ais("shape", r42, 2);
  const int nd2[1] = {2};
  ot_expect_apply_fails("reshape", 1, f, nd2, x23, &at, 1, 1, "f32[2,3]", "[4,2]");
  int64_t r2m[2] = {-1, -1};
  at = ais("shape", r2m, 2);
  ot_expect_apply_fails("reshape", 1, f, nd2, x23, &at, 1, 1, "-1", NULL);
  int64_t r45[2] = {-1, 4};
  at = ais("shape", r45, 2);
  ot_expect_apply_fails("reshape", 1, f, nd2, x23, &at, 1, 1, "shape", NULL);
  ot_expect_apply_fails("reshape", 1, f, nd2, x23, NULL, 0, 1, "shape", NULL);
  /* transpose: perm not a permutation */
  int64_t p00[2] = {0, 0}, p3[3] = {0, 1, 2}, p05[2] = {0, 5};
  at = ais("perm", p00, 2);
  ot_expect_apply_fails("transpose", 1, f, nd2, x23, &at, 1, 1, "perm", "permutation");
  at = ais("perm", p3, 3);
  ot_expect_apply_fails("transpose", 1, f, nd2, x23, &at, 1, 1, "perm", NULL);
  at = ais("perm", p05, 2);
  ot_expect_apply_fails("transpose", 1, f, nd2, x23, &at, 1, 1, "perm", "[0,5]");
  /* concat with mismatched dims names the axis */
  const int64_t *cc[2] = {s23, s24};
  at = ai("axis", 0);
  ot_expect_apply_fails("concat", 2, f, n2, cc, &at, 1, 1, "axis 1", "concat axis 0");
  at = ai("axis", 2);
  ot_expect_apply_fails("concat", 2, f, n2, cc, &at, 1, 1, "axis", NULL);
  const em_dtype fi[2] = {EM_F32, EM_I32};
  const int64_t *cs[2] = {s23, s23};
  ot_expect_apply_fails("concat", 2, fi, n2, cs, NULL, 0, 1, "i32", NULL);
  /* slice: step 0, mismatched lengths, duplicate axes */
  int64_t z[1] = {0}, one[1] = {1}, two[2] = {0, 1}, dup[2] = {1, -1};
  em_attr sat[4] = {ais("starts", z, 1), ais("ends", one, 1), ais("axes", one, 1), ais("steps", z, 1)};
  ot_expect_apply_fails("slice", 1, f, nd2, x23, sat, 4, 1, "steps", "nonzero");
  sat[1] = ais("ends", two, 2);
  ot_expect_apply_fails("slice", 1, f, nd2, x23, sat, 2, 1, "ends", NULL);
  em_attr sat2[3] = {ais("starts", two, 2), ais("ends", two, 2), ais("axes", dup, 2)};
  ot_expect_apply_fails("slice", 1, f, nd2, x23, sat2, 3, 1, "twice", NULL);
  /* depth_to_space: C not divisible by blocksize^2 */
  int64_t s1344[4] = {1, 3, 4, 4};
  const int64_t *d4[1] = {s1344};
  const int nd4[1] = {4};
  em_attr bat[2] = {ai("blocksize", 2), as("mode", "XYZ")};
  ot_expect_apply_fails("depth_to_space", 1, f, nd4, d4, bat, 1, 1, "blocksize", "f32[1,3,4,4]");
  int64_t s1844[4] = {1, 8, 4, 4};
  const int64_t *d8[1] = {s1844};
  ot_expect_apply_fails("depth_to_space", 1, f, nd4, d8, bat, 2, 1, "mode", "XYZ");
  ot_expect_apply_fails("depth_to_space", 1, f, nd2, x23, bat, 1, 1, "4-D", NULL);
  em_attr b3 = ai("blocksize", 3);
  ot_expect_apply_fails("space_to_depth", 1, f, nd4, d8, &b3, 1, 1, "blocksize 3", NULL);
  /* squeeze a non-1 axis; squeeze without axes on a dynamic shape */
  const int nd3[1] = {3};
  const int64_t *x131[1] = {s131};
  at = ais("axes", one, 1);
  ot_expect_apply_fails("squeeze", 1, f, nd3, x131, &at, 1, 1, "axis 1", "size 3");
  int64_t dyn[2] = {-1, 3};
  const int64_t *xd[1] = {dyn};
  ot_expect_apply_fails("squeeze", 1, f, nd2, xd, NULL, 0, 1, "axes", "dynamic");
  /* unsqueeze: duplicate or out-of-range axes */
  int64_t u00[2] = {0, -4}, u9[1] = {9};
  at = ais("axes", u00, 2);
  ot_expect_apply_fails("unsqueeze", 1, f, nd2, x23, &at, 1, 1, "twice", NULL);
  at = ais("axes", u9, 1);
  ot_expect_apply_fails("expand_dims", 1, f, nd2, x23, &at, 1, 1, "axis 9", NULL);
  at = ai("axis", 3);
  ot_expect_apply_fails("flatten", 1, f, nd2, x23, &at, 1, 1, "axis", NULL);
  /* pad: pads length, mode */
  int64_t p4[4] = {1, 1, 1, 1}, p2[2] = {1, 1}, pneg[4] = {0, -3, 0, -1};
  em_attr pat[2] = {ais("pads", p2, 2), as("mode", "wrap")};
  ot_expect_apply_fails("pad", 1, f, nd2, x23, pat, 1, 1, "pads", "2 * 2");
  pat[0] = ais("pads", p4, 4);
  ot_expect_apply_fails("pad", 1, f, nd2, x23, pat, 2, 1, "mode", "wrap");
  pat[0] = ais("pads", pneg, 4);
  ot_expect_apply_fails("pad", 1, f, nd2, x23, pat, 1, 1, "pads", "below zero");
  /* gather: float indices, bad axis */
  const em_dtype gf[2] = {EM_F32, EM_F32}, gi[2] = {EM_F32, EM_I64};
  const int64_t *gs[2] = {s23, s23};
  ot_expect_apply_fails("gather", 2, gf, n2, gs, NULL, 0, 1, "indices", "i64");
  at = ai("axis", 2);
  ot_expect_apply_fails("gather", 2, gi, n2, gs, &at, 1, 1, "axis 2", NULL);
  /* one_hot: depth missing or < 1, dtype, indices dtype */
  const em_dtype oi[1] = {EM_I64};
  ot_expect_apply_fails("one_hot", 1, oi, nd2, x23, NULL, 0, 1, "depth", NULL);
  em_attr oat[2] = {ai("depth", 0), ai("dtype", 42)};
  ot_expect_apply_fails("one_hot", 1, oi, nd2, x23, oat, 1, 1, "depth", ">= 1");
  oat[0] = ai("depth", 3);
  ot_expect_apply_fails("one_hot", 1, oi, nd2, x23, oat, 2, 1, "dtype", "42");
  ot_expect_apply_fails("one_hot", 1, f, nd2, x23, oat, 1, 1, "f32", "i64");
  /* top_k: k too big, bool */
  em_attr kat = ai("k", 4);
  ot_expect_apply_fails("top_k", 1, f, nd2, x23, &kat, 1, 2, "'k' is 4", "size 3");
  const em_dtype bl[1] = {EM_BOOL};
  kat = ai("k", 1);
  ot_expect_apply_fails("top_k", 1, bl, nd2, x23, &kat, 1, 2, "bool", NULL);
  ot_expect_apply_fails("top_k", 1, f, nd2, x23, NULL, 0, 2, "'k'", NULL);
  /* cast: 'to' missing or not a dtype */
  ot_expect_apply_fails("cast", 1, f, nd2, x23, NULL, 0, 1, "to", NULL);
  em_attr cat_ = ai("to", 9);
  ot_expect_apply_fails("cast", 1, f, nd2, x23, &cat_, 1, 1, "'to' 9", NULL);
  /* expand: incompatible target; tile: repeats length, negative */
  int64_t e4[1] = {4}, s3[1] = {3};
  const int64_t *x3[1] = {s3};
  at = ais("shape", e4, 1);
  ot_expect_apply_fails("expand", 1, f, n1, x3, &at, 1, 1, "broadcast", NULL);
  int64_t rp[1] = {2}, rn[2] = {1, -1};
  at = ais("repeats", rp, 1);
  ot_expect_apply_fails("tile", 1, f, nd2, x23, &at, 1, 1, "repeats", NULL);
  at = ais("repeats", rn, 2);
  ot_expect_apply_fails("tile", 1, f, nd2, x23, &at, 1, 1, "repeats", ">= 0");
  (void)n4;
  /* the gradient ops check their dy */
  const em_dtype ff[2] = {EM_F32, EM_F32};
  const int64_t *sg[2] = {s24, s23};
  int64_t st0[1] = {0}, en2[1] = {2};
  em_attr gsat[2] = {ais("starts", st0, 1), ais("ends", en2, 1)};
  ot_expect_apply_fails("_slice_grad", 2, ff, n2, sg, gsat, 2, 1, "slice's shape", "[2,3]");
  const em_dtype ii[2] = {EM_I32, EM_I32};
  at = ais("repeats", two, 2);
  ot_expect_apply_fails("_tile_grad", 2, ii, n2, sg, &at, 1, 1, "float", NULL);
}

/* transpose takes only perm: "prem" is refused by name (it would silently reverse the axes); the message names the
 * op, the bad name and the names it takes. */
static void test_shape_unknown_attribute(void **state) {
  (void)state;
  const int64_t perm[2] = {1, 0};
  const int64_t s0[2] = {2, 3};
  const int64_t *shapes[1] = {s0};
  const em_dtype dtypes[1] = {EM_F32};
  const int ndims[1] = {2};
  const em_attr at[1] = {{.name = "prem", .type = EM_ATTR_INTS, .ints = perm, .n = 2}};
  ot_expect_apply_fails("transpose", 1, dtypes, ndims, shapes, at, 1, 1, "no attribute 'prem'",
                        "it takes: perm");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reshape),
    cmocka_unit_test(test_squeeze_unsqueeze_flatten),
    cmocka_unit_test(test_transpose),
    cmocka_unit_test(test_slice),
    cmocka_unit_test(test_concat),
    cmocka_unit_test(test_pad),
    cmocka_unit_test(test_gather),
    cmocka_unit_test(test_gather_bad_index),
    cmocka_unit_test(test_one_hot),
    cmocka_unit_test(test_top_k),
    cmocka_unit_test(test_depth_space),
    cmocka_unit_test(test_cast_values),
    cmocka_unit_test(test_cast_rounding),
    cmocka_unit_test(test_expand),
    cmocka_unit_test(test_tile),
    cmocka_unit_test(test_grad_reshape_family),
    cmocka_unit_test(test_grad_transpose),
    cmocka_unit_test(test_grad_slice_concat),
    cmocka_unit_test(test_grad_pad),
    cmocka_unit_test(test_grad_gather),
    cmocka_unit_test(test_grad_top_k),
    cmocka_unit_test(test_grad_depth_space_cast),
    cmocka_unit_test(test_grad_expand_tile),
    cmocka_unit_test(test_grad_cast_f32),
    cmocka_unit_test(test_grad_ops_direct),
    cmocka_unit_test(test_grad_second_order),
    cmocka_unit_test(test_dynamic_shapes),
    cmocka_unit_test(test_dynamic_gradients),
    cmocka_unit_test(test_thread_independence),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_shape_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
