/* Tests of the binary op family (ops/binary.c): arithmetic, comparisons,
 * logic and where under numpy broadcasting. Forward values are checked
 * against naive float64 references that do their own broadcasting index
 * math; gradients by finite differences (ot_gradcheck, f64); errors through
 * em_apply's messages. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

/* ------------------------------------------------------------ helpers --- */

typedef struct shape_pair {
  int nx;
  int64_t x[4];
  int ny;
  int64_t y[4];
} shape_pair;

/* Forward shapes: the cases the brief names plus large ones that take the
 * parallel paths (bias rows, scalar, general N-d) and a chunk boundary. */
static const shape_pair PAIRS[] = {
  {2, {3, 4}, 2, {3, 4}},       {2, {3, 4}, 1, {4}},         {1, {4}, 2, {3, 4}},
  {2, {3, 1}, 2, {1, 4}},       {0, {0}, 2, {2, 3}},         {2, {2, 3}, 0, {0}},
  {3, {2, 1, 5}, 2, {3, 1}},    {1, {1}, 1, {1}},            {1, {1000}, 1, {1000}},
  {4, {2, 3, 4, 5}, 2, {4, 1}}, {2, {4, 1}, 4, {2, 3, 4, 5}}, {1, {7}, 1, {1}},
  {2, {300, 200}, 1, {200}},    {1, {70001}, 0, {0}},        {3, {40, 30, 50}, 3, {40, 1, 50}},
  {2, {3, 17000}, 2, {3, 1}},   {2, {5, 1}, 2, {5, 7}},
};
#define N_PAIRS (sizeof PAIRS / sizeof PAIRS[0])

/* Gradient-check shapes (every broadcasting pattern, kept small). */
static const shape_pair GPAIRS[] = {
  {2, {3, 4}, 2, {3, 4}}, {2, {3, 4}, 1, {4}}, {2, {3, 1}, 2, {1, 4}},
  {0, {0}, 2, {2, 3}},    {2, {2, 3}, 0, {0}}, {3, {2, 1, 5}, 2, {3, 1}},
};
#define N_GPAIRS (sizeof GPAIRS / sizeof GPAIRS[0])

static int64_t numel(int nd, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  return n;
}

/* numpy broadcast of two shapes, written out here independently of the
 * library; returns the rank. */
static int ref_bshape(int nx, const int64_t *x, int ny, const int64_t *y, int64_t *out) {
  int nd = nx > ny ? nx : ny;
  for (int i = 0; i < nd; i++) {
    int ix = i - (nd - nx), iy = i - (nd - ny);
    int64_t a = ix >= 0 ? x[ix] : 1, b = iy >= 0 ? y[iy] : 1;
    out[i] = a == 1 ? b : a;
  }
  return nd;
}

/* The flat index into an input of shape id[0..ni) read by output element
 * `flat` of shape od[0..nd): coordinates aligned on the right, size-1 axes
 * pinned at 0. */
static int64_t ref_src(int nd, const int64_t *od, int64_t flat, int ni, const int64_t *id) {
  int64_t coord[8];
  for (int d = nd - 1; d >= 0; d--) {
    coord[d] = flat % od[d];
    flat /= od[d];
  }
  int64_t idx = 0;
  for (int j = 0; j < ni; j++) idx = idx * id[j] + (id[j] == 1 ? 0 : coord[j + nd - ni]);
  return idx;
}

static int is_int(em_dtype t) { return t == EM_I32 || t == EM_I64 || t == EM_U8 || t == EM_BOOL; }

/* Test data: uniform in [lo, hi) (integers: floored); with away_zero the
 * magnitude is drawn from [lo, hi) and the sign alternates. */
static em_tensor *make(em_dtype t, int nd, const int64_t *shape, uint64_t seed, double lo, double hi, int away_zero) {
  int64_t n = numel(nd, shape);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) {
    double u = ot_uniform(&seed, lo, hi);
    if (is_int(t)) u = floor(u);
    if (away_zero && (i % 2)) u = -u;
    v[i] = u;
  }
  em_tensor *r = ot_tensor(t, nd, shape, v);
  free(v);
  return r;
}

static const char *dt_name(em_dtype t) { return em_dtype_name(t); }

/* ------------------------------------------------- reference functions --- */

static double ref_arith(const char *op, double a, double b, int integer, int fmod_attr) {
  if (!strcmp(op, "add")) return a + b;
  if (!strcmp(op, "sub")) return a - b;
  if (!strcmp(op, "mul")) return a * b;
  if (!strcmp(op, "div")) return integer ? (b == 0 ? 0 : trunc(a / b)) : a / b;
  if (!strcmp(op, "pow")) return pow(a, b);
  if (!strcmp(op, "max")) return a > b ? a : b;
  if (!strcmp(op, "min")) return a < b ? a : b;
  if (!strcmp(op, "mod")) {
    if (b == 0) return integer ? 0 : NAN;
    return fmod_attr ? a - b * trunc(a / b) : a - b * floor(a / b);
  }
  fail_msg("no reference for %s", op);
  return 0;
}

static double ref_compare(const char *op, double a, double b) {
  if (!strcmp(op, "equal")) return a == b;
  if (!strcmp(op, "less")) return a < b;
  if (!strcmp(op, "greater")) return a > b;
  if (!strcmp(op, "less_equal")) return a <= b;
  if (!strcmp(op, "greater_equal")) return a >= b;
  if (!strcmp(op, "and")) return (a != 0) && (b != 0);
  if (!strcmp(op, "or")) return (a != 0) || (b != 0);
  if (!strcmp(op, "xor")) return (a != 0) != (b != 0);
  fail_msg("no reference for %s", op);
  return 0;
}

/* ------------------------------------------------ forward: arithmetic --- */

/* Input ranges that keep each op well defined (and, for ints, exercise
 * negative values and division by zero). */
static void ranges(const char *op, em_dtype t, double r[4], int *away) {
  *away = 0;
  if (is_int(t)) {
    r[0] = -20, r[1] = 20, r[2] = -6, r[3] = 6;
    return;
  }
  r[0] = -3, r[1] = 3, r[2] = -3, r[3] = 3;
  if (!strcmp(op, "div")) r[2] = 0.5, r[3] = 2.5, *away = 1;
  if (!strcmp(op, "pow")) r[0] = 0.5, r[1] = 2, r[2] = -2, r[3] = 2;
  if (!strcmp(op, "mod")) r[0] = -5, r[1] = 5, r[2] = 0.5, r[3] = 2, *away = 1;
}

static void check_arith(const char *op, em_dtype t, const shape_pair *p, int fmod_attr) {
  double r[4];
  int away;
  ranges(op, t, r, &away);
  em_tensor *in[2] = {make(t, p->nx, p->x, 11 + (uint64_t)p->nx * 7 + (uint64_t)numel(p->nx, p->x), r[0], r[1], 0),
                      make(t, p->ny, p->y, 97 + (uint64_t)numel(p->ny, p->y), r[2], r[3], away)};
  em_attr at = {.name = "fmod", .type = EM_ATTR_INT, .i = fmod_attr};
  int with_attr = !strcmp(op, "mod");
  em_tensor *out = NULL;
  if (ot_run(op, in, 2, with_attr ? &at : NULL, with_attr, &out, 1))
    fail_msg("%s %s: %s", op, dt_name(t), em_last_error());
  int64_t od[8];
  int nd = ref_bshape(p->nx, p->x, p->ny, p->y, od);
  ot_expect_shape(out, t, nd, od, op);
  int64_t n = numel(nd, od), m;
  double *x = ot_values(in[0], &m), *y = ot_values(in[1], &m), *got = ot_values(out, &m);
  double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(want);
  for (int64_t i = 0; i < n; i++) {
    double a = x[ref_src(nd, od, i, p->nx, p->x)], b = y[ref_src(nd, od, i, p->ny, p->y)];
    want[i] = ref_arith(op, a, b, is_int(t), fmod_attr);
  }
  char what[160];
  snprintf(what, sizeof what, "%s %s (fmod %d) x ndim %d numel %lld, y ndim %d numel %lld", op, dt_name(t),
           fmod_attr, p->nx, (long long)numel(p->nx, p->x), p->ny, (long long)numel(p->ny, p->y));
  double rtol = t == EM_F32 ? 1e-6 : t == EM_F64 ? 1e-13 : 0, atol = t == EM_F32 ? 1e-6 : t == EM_F64 ? 1e-13 : 0;
  if (!strcmp(op, "pow") && t == EM_F32) rtol = 1e-5;
  if (!strcmp(op, "mod")) atol = t == EM_F32 ? 1e-5 : t == EM_F64 ? 1e-12 : 0;
  ot_expect_close(got, want, n, atol, rtol, what);
  free(x), free(y), free(got), free(want);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
}

static void arith_all_shapes(const char *op, int ints) {
  const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_I64};
  for (int d = 0; d < (ints ? 4 : 2); d++)
    for (size_t k = 0; k < N_PAIRS; k++) check_arith(op, dts[d], &PAIRS[k], 0);
}

static void test_add(void **s) { (void)s; arith_all_shapes("add", 1); }
static void test_sub(void **s) { (void)s; arith_all_shapes("sub", 1); }
static void test_mul(void **s) { (void)s; arith_all_shapes("mul", 1); }
static void test_div(void **s) { (void)s; arith_all_shapes("div", 1); }
static void test_pow(void **s) { (void)s; arith_all_shapes("pow", 0); }
static void test_max(void **s) { (void)s; arith_all_shapes("max", 1); }
static void test_min(void **s) { (void)s; arith_all_shapes("min", 1); }

static void test_mod(void **s) {
  (void)s;
  const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_I64};
  for (int f = 0; f < 2; f++)
    for (int d = 0; d < 4; d++)
      for (size_t k = 0; k < N_PAIRS; k++) check_arith("mod", dts[d], &PAIRS[k], f);
}

/* Exact values at the edges: integer division truncates toward zero, x/0 is
 * 0, MIN/-1 wraps to MIN, remainders follow the sign rules, sums wrap. */
static void expect_int_op(const char *op, em_dtype t, int n, const double *x, const double *y, const double *want,
                          int fmod_attr) {
  int64_t shape[1] = {n};
  em_tensor *in[2] = {ot_tensor(t, 1, shape, x), ot_tensor(t, 1, shape, y)}, *out = NULL;
  em_attr at = {.name = "fmod", .type = EM_ATTR_INT, .i = fmod_attr};
  if (ot_run(op, in, 2, &at, !strcmp(op, "mod"), &out, 1)) fail_msg("%s: %s", op, em_last_error());
  double *got = ot_values(out, NULL);
  char what[64];
  snprintf(what, sizeof what, "%s %s fmod %d", op, dt_name(t), fmod_attr);
  ot_expect_close(got, want, n, 0, 0, what);
  free(got);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
}

static void test_int_edges(void **s) {
  (void)s;
  const double m32 = -2147483648.0, m64 = -9223372036854775808.0;
  {
    double x[] = {7, -7, 7, -7, 5, m32, 0, 1}, y[] = {2, 2, -2, -2, 0, -1, 0, 3};
    double q[] = {3, -3, -3, 3, 0, m32, 0, 0};
    expect_int_op("div", EM_I32, 8, x, y, q, 0);
    x[5] = m64;
    q[5] = m64;
    expect_int_op("div", EM_I64, 8, x, y, q, 0);
  }
  {
    double x[] = {7, -7, 7, -7, 5, m32, 6}, y[] = {3, 3, -3, -3, 0, -1, 3};
    double py[] = {1, 2, -2, -1, 0, 0, 0}, c[] = {1, -1, 1, -1, 0, 0, 0};
    expect_int_op("mod", EM_I32, 7, x, y, py, 0);
    expect_int_op("mod", EM_I32, 7, x, y, c, 1);
    x[5] = m64;
    expect_int_op("mod", EM_I64, 7, x, y, py, 0);
    expect_int_op("mod", EM_I64, 7, x, y, c, 1);
  }
  {
    double x[] = {2147483647.0, m32}, y[] = {1, 1}, sum[] = {m32, m32 + 1}, diff[] = {2147483646.0, 2147483647.0};
    expect_int_op("add", EM_I32, 2, x, y, sum, 0);
    expect_int_op("sub", EM_I32, 2, x, y, diff, 0);
  }
}

/* Floats: IEEE division by zero, NaN propagation through max and min. */
static void test_float_edges(void **s) {
  (void)s;
  int64_t shape[1] = {4};
  double x[] = {1, -1, NAN, 2}, y[] = {0, 0, 1, NAN};
  for (int d = 0; d < 2; d++) {
    em_dtype t = d ? EM_F64 : EM_F32;
    em_tensor *in[2] = {ot_tensor(t, 1, shape, x), ot_tensor(t, 1, shape, y)}, *out = NULL;
    const char *ops[] = {"div", "max", "min"};
    double want[3][4] = {{INFINITY, -INFINITY, NAN, NAN}, {1, 0, NAN, NAN}, {0, -1, NAN, NAN}};
    for (int k = 0; k < 3; k++) {
      if (ot_run(ops[k], in, 2, NULL, 0, &out, 1)) fail_msg("%s: %s", ops[k], em_last_error());
      double *got = ot_values(out, NULL);
      for (int i = 0; i < 4; i++)
        if (isnan(want[k][i]) != isnan(got[i])) fail_msg("%s %s element %d: got %g", ops[k], dt_name(t), i, got[i]);
      ot_expect_close(got, want[k], 4, 0, 0, ops[k]);
      free(got);
      em_tensor_release(out);
    }
    em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
}

/* ---------------------------------------------- comparisons and logic --- */

/* Few distinct values, so ties are frequent: integers in [lo, hi), plus 0.5
 * for floats (exact in f32). */
static em_tensor *make_ties(em_dtype t, int nd, const int64_t *shape, uint64_t seed, double lo, double hi) {
  int64_t n = numel(nd, shape);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = floor(ot_uniform(&seed, lo, hi)) + (is_int(t) ? 0 : 0.5);
  em_tensor *r = ot_tensor(t, nd, shape, v);
  free(v);
  return r;
}

static void check_predicate(const char *op, em_dtype t, const shape_pair *p) {
  double hi = t == EM_BOOL ? 2 : 4, lo = t == EM_BOOL || t == EM_U8 ? 0 : -3;
  em_tensor *in[2] = {make_ties(t, p->nx, p->x, 5 + (uint64_t)numel(p->nx, p->x), lo, hi),
                      make_ties(t, p->ny, p->y, 6 + (uint64_t)numel(p->ny, p->y) * 3, lo, hi)};
  em_tensor *out = NULL;
  if (ot_run(op, in, 2, NULL, 0, &out, 1)) fail_msg("%s %s: %s", op, dt_name(t), em_last_error());
  int64_t od[8];
  int nd = ref_bshape(p->nx, p->x, p->ny, p->y, od);
  ot_expect_shape(out, EM_BOOL, nd, od, op);
  int64_t n = numel(nd, od), m;
  double *x = ot_values(in[0], &m), *y = ot_values(in[1], &m), *got = ot_values(out, &m);
  double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(want);
  for (int64_t i = 0; i < n; i++)
    want[i] = ref_compare(op, x[ref_src(nd, od, i, p->nx, p->x)], y[ref_src(nd, od, i, p->ny, p->y)]);
  char what[128];
  snprintf(what, sizeof what, "%s %s x numel %lld y numel %lld", op, dt_name(t), (long long)numel(p->nx, p->x),
           (long long)numel(p->ny, p->y));
  ot_expect_close(got, want, n, 0, 0, what);
  free(x), free(y), free(got), free(want);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
}

static void test_comparisons(void **s) {
  (void)s;
  const char *ops[] = {"equal", "less", "greater", "less_equal", "greater_equal"};
  const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_I64, EM_U8, EM_BOOL};
  for (int o = 0; o < 5; o++)
    for (int d = 0; d < 6; d++)
      for (size_t k = 0; k < N_PAIRS; k++) check_predicate(ops[o], dts[d], &PAIRS[k]);
}

static void test_logic(void **s) {
  (void)s;
  const char *ops[] = {"and", "or", "xor"};
  for (int o = 0; o < 3; o++)
    for (size_t k = 0; k < N_PAIRS; k++) check_predicate(ops[o], EM_BOOL, &PAIRS[k]);
}

/* The truth tables, spelled out: [2,1] against [1,2] gives all four pairs. */
static void test_truth_tables(void **s) {
  (void)s;
  int64_t sa[2] = {2, 1}, sb[2] = {1, 2};
  double a[] = {0, 1}, b[] = {0, 1};
  em_tensor *in[2] = {ot_tensor(EM_BOOL, 2, sa, a), ot_tensor(EM_BOOL, 2, sb, b)}, *out = NULL;
  const char *ops[] = {"and", "or", "xor"};
  /* rows: a = 0, 1; columns: b = 0, 1 */
  const double want[3][4] = {{0, 0, 0, 1}, {0, 1, 1, 1}, {0, 1, 1, 0}};
  int64_t od[2] = {2, 2};
  for (int o = 0; o < 3; o++) {
    if (ot_run(ops[o], in, 2, NULL, 0, &out, 1)) fail_msg("%s: %s", ops[o], em_last_error());
    ot_expect_shape(out, EM_BOOL, 2, od, ops[o]);
    double *got = ot_values(out, NULL);
    ot_expect_close(got, want[o], 4, 0, 0, ops[o]);
    free(got);
    em_tensor_release(out);
  }
  em_tensor_release(in[0]), em_tensor_release(in[1]);

  int64_t s4[1] = {4};
  double nv[] = {0, 1, 1, 0}, nw[] = {1, 0, 0, 1};
  em_tensor *x = ot_tensor(EM_BOOL, 1, s4, nv);
  if (ot_run("not", &x, 1, NULL, 0, &out, 1)) fail_msg("not: %s", em_last_error());
  ot_expect_shape(out, EM_BOOL, 1, s4, "not");
  double *got = ot_values(out, NULL);
  ot_expect_close(got, nw, 4, 0, 0, "not");
  free(got);
  em_tensor_release(out), em_tensor_release(x);

  /* A large not takes the parallel loop. */
  int64_t big[1] = {50001};
  x = make(EM_BOOL, 1, big, 3, 0, 2, 0);
  if (ot_run("not", &x, 1, NULL, 0, &out, 1)) fail_msg("not: %s", em_last_error());
  double *xv = ot_values(x, NULL);
  got = ot_values(out, NULL);
  for (int64_t i = 0; i < big[0]; i++) xv[i] = xv[i] == 0;
  ot_expect_close(got, xv, big[0], 0, 0, "not (large)");
  free(got), free(xv);
  em_tensor_release(out), em_tensor_release(x);

  /* Comparison truth values on explicit numbers. */
  double p[] = {1, 2, 3}, q[] = {2, 2, 2};
  int64_t s3[1] = {3};
  const char *cops[] = {"equal", "less", "greater", "less_equal", "greater_equal"};
  const double cw[5][3] = {{0, 1, 0}, {1, 0, 0}, {0, 0, 1}, {1, 1, 0}, {0, 1, 1}};
  for (int d = 0; d < 2; d++) {
    em_dtype t = d ? EM_I64 : EM_F32;
    em_tensor *cin[2] = {ot_tensor(t, 1, s3, p), ot_tensor(t, 1, s3, q)};
    for (int o = 0; o < 5; o++) {
      if (ot_run(cops[o], cin, 2, NULL, 0, &out, 1)) fail_msg("%s: %s", cops[o], em_last_error());
      got = ot_values(out, NULL);
      ot_expect_close(got, cw[o], 3, 0, 0, cops[o]);
      free(got);
      em_tensor_release(out);
    }
    em_tensor_release(cin[0]), em_tensor_release(cin[1]);
  }
}

/* ----------------------------------------------------------------- where --- */

typedef struct where_case {
  int nc;
  int64_t c[4];
  int nx;
  int64_t x[4];
  int ny;
  int64_t y[4];
} where_case;

static const where_case WCASES[] = {
  {2, {3, 1}, 2, {1, 4}, 0, {0}},     {2, {2, 3}, 2, {2, 3}, 1, {3}},         {0, {0}, 2, {2, 3}, 2, {2, 3}},
  {1, {5}, 2, {4, 1}, 1, {1}},        {3, {2, 1, 4}, 2, {3, 1}, 1, {4}},      {2, {200, 300}, 1, {300}, 2, {200, 1}},
};
#define N_WCASES (sizeof WCASES / sizeof WCASES[0])

static void check_where(const where_case *w, em_dtype t) {
  em_tensor *in[3] = {make(EM_BOOL, w->nc, w->c, 1 + (uint64_t)numel(w->nc, w->c), 0, 2, 0),
                      make(t, w->nx, w->x, 2, -9, 9, 0), make(t, w->ny, w->y, 3, -9, 9, 0)};
  em_tensor *out = NULL;
  if (ot_run("where", in, 3, NULL, 0, &out, 1)) fail_msg("where %s: %s", dt_name(t), em_last_error());
  int64_t t1[8], od[8];
  int n1 = ref_bshape(w->nc, w->c, w->nx, w->x, t1);
  int nd = ref_bshape(n1, t1, w->ny, w->y, od);
  ot_expect_shape(out, t, nd, od, "where");
  int64_t n = numel(nd, od);
  double *c = ot_values(in[0], NULL), *x = ot_values(in[1], NULL), *y = ot_values(in[2], NULL);
  double *got = ot_values(out, NULL), *want = malloc(sizeof(double) * (size_t)n);
  assert_non_null(want);
  for (int64_t i = 0; i < n; i++)
    want[i] = c[ref_src(nd, od, i, w->nc, w->c)] != 0 ? x[ref_src(nd, od, i, w->nx, w->x)]
                                                      : y[ref_src(nd, od, i, w->ny, w->y)];
  char what[64];
  snprintf(what, sizeof what, "where %s (cond numel %lld)", dt_name(t), (long long)numel(w->nc, w->c));
  ot_expect_close(got, want, n, 0, 0, what);
  free(c), free(x), free(y), free(got), free(want);
  for (int k = 0; k < 3; k++) em_tensor_release(in[k]);
  em_tensor_release(out);
}

static void test_where(void **s) {
  (void)s;
  const em_dtype dts[] = {EM_F32, EM_F64, EM_I32, EM_I64, EM_U8, EM_BOOL};
  for (size_t k = 0; k < N_WCASES; k++)
    for (int d = 0; d < 6; d++) check_where(&WCASES[k], dts[d]);
}

/* -------------------------------------------------------------- gradients --- */

static void grad_op(const char *op, int fmod_attr) {
  for (size_t k = 0; k < N_GPAIRS; k++) {
    const shape_pair *p = &GPAIRS[k];
    double r[4];
    int away;
    ranges(op, EM_F64, r, &away);
    if (!strcmp(op, "max") || !strcmp(op, "min")) r[0] = -1, r[1] = 1, r[2] = -1, r[3] = 1;
    em_tensor *in[2] = {make(EM_F64, p->nx, p->x, 31 + k, r[0], r[1], 0),
                        make(EM_F64, p->ny, p->y, 57 + k * 13, r[2], r[3], away)};
    em_attr at = {.name = "fmod", .type = EM_ATTR_INT, .i = fmod_attr};
    ot_gradcheck(op, in, 2, &at, !strcmp(op, "mod"), 1, 0, 1e-6);
    em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
}

static void test_grad_add(void **s) { (void)s; grad_op("add", 0); }
static void test_grad_sub(void **s) { (void)s; grad_op("sub", 0); }
static void test_grad_mul(void **s) { (void)s; grad_op("mul", 0); }
static void test_grad_div(void **s) { (void)s; grad_op("div", 0); }
static void test_grad_pow(void **s) { (void)s; grad_op("pow", 0); }
static void test_grad_max(void **s) { (void)s; grad_op("max", 0); }
static void test_grad_min(void **s) { (void)s; grad_op("min", 0); }
static void test_grad_mod(void **s) {
  (void)s;
  grad_op("mod", 0);
  grad_op("mod", 1);
}

static void test_grad_where(void **s) {
  (void)s;
  for (size_t k = 0; k < N_WCASES - 1; k++) { /* the last case is large */
    const where_case *w = &WCASES[k];
    em_tensor *in[3] = {make(EM_BOOL, w->nc, w->c, 4 + k, 0, 2, 0), make(EM_F64, w->nx, w->x, 5 + k, -2, 2, 0),
                        make(EM_F64, w->ny, w->y, 6 + k, -2, 2, 0)};
    ot_gradcheck("where", in, 3, NULL, 0, 1, 0, 1e-6);
    for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  }
  /* Second order: _where_grad(cond, dy) with respect to dy, for which 0 and 1, dy broadcast against cond both
   * ways (it was no_grad there: a silent 0) */
  for (int which = 0; which < 2; which++)
    for (size_t k = 0; k < 2; k++) {
      const where_case *w = &WCASES[k];
      em_attr at = {.name = "which", .type = EM_ATTR_INT, .i = which};
      em_tensor *in[2] = {make(EM_BOOL, w->nc, w->c, 14 + k, 0, 2, 0), make(EM_F64, w->nx, w->x, 15 + k, -2, 2, 0)};
      ot_grad_dy_check("_where_grad", in, 2, 1, &at, 1, 20 + 2 * (uint64_t)which + k);
      for (int i = 0; i < 2; i++) em_tensor_release(in[i]);
    }
}

/* The documented choices at the points finite differences cannot probe:
 * max/min ties send the gradient to x only; pow's exponent gradient is 0
 * where x <= 0, its base gradient 0 where the exponent is 0. */
static void expect_grad(const char *fn, int which, const double *dy, const double *x, const double *y,
                        const double *want, int n) {
  int64_t shape[1] = {n};
  em_tensor *in[3] = {ot_tensor(EM_F64, 1, shape, dy), ot_tensor(EM_F64, 1, shape, x), ot_tensor(EM_F64, 1, shape, y)};
  em_attr at[2] = {{.name = "fn", .type = EM_ATTR_STRING, .s = fn}, {.name = "which", .type = EM_ATTR_INT, .i = which}};
  em_tensor *out = NULL;
  if (ot_run("_binary_grad", in, 3, at, 2, &out, 1)) fail_msg("_binary_grad %s: %s", fn, em_last_error());
  double *got = ot_values(out, NULL);
  char what[64];
  snprintf(what, sizeof what, "_binary_grad %s which %d", fn, which);
  ot_expect_close(got, want, n, 1e-14, 1e-12, what);
  free(got);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  em_tensor_release(out);
}

static void test_grad_conventions(void **s) {
  (void)s;
  double dy[] = {2, 3, 5}, x[] = {1, 1, 4}, y[] = {1, 0, 7};
  double max0[] = {2, 3, 0}, max1[] = {0, 0, 5}, min0[] = {2, 0, 5}, min1[] = {0, 3, 0};
  expect_grad("max", 0, dy, x, y, max0, 3);
  expect_grad("max", 1, dy, x, y, max1, 3);
  expect_grad("min", 0, dy, x, y, min0, 3);
  expect_grad("min", 1, dy, x, y, min1, 3);
  double px[] = {-1, 0, 2}, py[] = {2, 0.5, 3};
  double pow1[] = {0, 0, 5 * 8 * log(2.0)};
  expect_grad("pow", 1, dy, px, py, pow1, 3);
  double zx[] = {0, 3, 2}, zy[] = {0, 0, 2}, pow0[] = {0, 0, 5 * 2 * 2};
  expect_grad("pow", 0, dy, zx, zy, pow0, 3);
}

/* ------------------------------------------------ shapes, threads, errors --- */

/* A dynamic axis passes through infer. */
static void test_dynamic_axis(void **s) {
  (void)s;
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t a[2] = {-1, 4}, b[1] = {4}, c[2] = {-1, 1};
  em_var x, y, z, w, out;
  assert_int_equal(em_input(g, "x", EM_F32, 2, a, &x), EM_OK);
  assert_int_equal(em_input(g, "y", EM_F32, 1, b, &y), EM_OK);
  assert_int_equal(em_input(g, "c", EM_BOOL, 2, c, &z), EM_OK);
  em_var xy[2] = {x, y};
  assert_int_equal(em_apply(g, "add", xy, 2, NULL, 0, &out, 1), EM_OK);
  em_dtype dt;
  int nd;
  int64_t sh[EM_MAX_DIMS];
  assert_int_equal(em_var_info(g, out, &dt, &nd, sh), EM_OK);
  assert_int_equal(nd, 2);
  assert_true(sh[0] == -1 && sh[1] == 4 && dt == EM_F32);
  em_var wi[3] = {z, x, y};
  assert_int_equal(em_apply(g, "where", wi, 3, NULL, 0, &w, 1), EM_OK);
  assert_int_equal(em_var_info(g, w, &dt, &nd, sh), EM_OK);
  assert_true(nd == 2 && sh[0] == -1 && sh[1] == 4 && dt == EM_F32);
  assert_int_equal(em_apply(g, "less", xy, 2, NULL, 0, &out, 1), EM_OK);
  assert_int_equal(em_var_info(g, out, &dt, &nd, sh), EM_OK);
  assert_true(nd == 2 && sh[0] == -1 && dt == EM_BOOL);
  em_graph_free(g);
}

/* The same bits whatever the thread count (large enough to go parallel). */
static void test_thread_independence(void **s) {
  (void)s;
  int64_t sa[2] = {300, 257}, sb[1] = {257};
  em_tensor *in[2] = {make(EM_F32, 2, sa, 1, -2, 2, 0), make(EM_F32, 1, sb, 2, 0.5, 2, 1)};
  const char *ops[] = {"div", "pow", "mod"};
  int saved = em_get_num_threads();
  for (int o = 0; o < 3; o++) {
    em_tensor *r1 = NULL, *r2 = NULL;
    assert_int_equal(em_set_num_threads(1), EM_OK);
    if (ot_run(ops[o], in, 2, NULL, 0, &r1, 1)) fail_msg("%s: %s", ops[o], em_last_error());
    assert_int_equal(em_set_num_threads(3), EM_OK);
    if (ot_run(ops[o], in, 2, NULL, 0, &r2, 1)) fail_msg("%s: %s", ops[o], em_last_error());
    if (memcmp(em_tensor_data(r1), em_tensor_data(r2), sizeof(float) * 300 * 257))
      fail_msg("%s: results differ between 1 and 3 threads", ops[o]);
    em_tensor_release(r1), em_tensor_release(r2);
  }
  em_set_num_threads(saved);
  em_tensor_release(in[0]), em_tensor_release(in[1]);
}

/* Empty tensors: a zero-size axis broadcasts to a zero-size result. */
static void test_empty(void **s) {
  (void)s;
  int64_t sa[2] = {0, 3}, sb[1] = {3};
  em_tensor *in[2] = {ot_tensor(EM_F32, 2, sa, NULL), ot_tensor(EM_F32, 1, sb, NULL)}, *out = NULL;
  if (ot_run("mul", in, 2, NULL, 0, &out, 1)) fail_msg("mul: %s", em_last_error());
  ot_expect_shape(out, EM_F32, 2, sa, "mul of an empty tensor");
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
}

static void test_errors(void **s) {
  (void)s;
  const int64_t s34[2] = {3, 4}, s5[1] = {5}, s3[1] = {3};
  const int64_t *sh[3] = {s34, s5, s5};
  const int nd[3] = {2, 1, 1};
  const em_dtype ff[3] = {EM_F32, EM_F32, EM_F32};
  const char *ops[] = {"add", "sub", "mul", "div", "pow", "max", "min", "mod", "equal", "less_equal"};
  for (int o = 0; o < 10; o++) ot_expect_apply_fails(ops[o], 2, ff, nd, sh, NULL, 0, 1, "f32[3,4]", "f32[5]");
  const em_dtype bb[2] = {EM_BOOL, EM_BOOL};
  ot_expect_apply_fails("and", 2, bb, nd, sh, NULL, 0, 1, "bool[3,4]", "bool[5]");

  /* dtype mismatch, named both ways round */
  const int64_t *same[3] = {s3, s3, s3};
  const int n1[3] = {1, 1, 1};
  const em_dtype fd[2] = {EM_F32, EM_F64}, df[2] = {EM_F64, EM_F32}, ii[2] = {EM_I32, EM_I32};
  ot_expect_apply_fails("add", 2, fd, n1, same, NULL, 0, 1, "f32 vs f64", "mismatch");
  ot_expect_apply_fails("mul", 2, df, n1, same, NULL, 0, 1, "f64 vs f32", "mismatch");
  ot_expect_apply_fails("less", 2, fd, n1, same, NULL, 0, 1, "f32 vs f64", NULL);
  /* unsupported dtypes */
  ot_expect_apply_fails("add", 2, bb, n1, same, NULL, 0, 1, "bool", "expected");
  ot_expect_apply_fails("pow", 2, ii, n1, same, NULL, 0, 1, "i32", "f32 or f64");
  const em_dtype hh[2] = {EM_F16, EM_F16}, u8[2] = {EM_U8, EM_U8};
  ot_expect_apply_fails("sub", 2, hh, n1, same, NULL, 0, 1, "f16", NULL);
  ot_expect_apply_fails("div", 2, u8, n1, same, NULL, 0, 1, "u8", NULL);
  ot_expect_apply_fails("and", 2, ff, n1, same, NULL, 0, 1, "f32", "bool");
  ot_expect_apply_fails("not", 1, ff, n1, same, NULL, 0, 1, "f32", "bool");
  /* attributes */
  em_attr bad = {.name = "fmod", .type = EM_ATTR_INT, .i = 2};
  ot_expect_apply_fails("mod", 2, ff, n1, same, &bad, 1, 1, "fmod", NULL);
  /* where: cond must be bool, x and y one dtype, all broadcastable */
  const em_dtype wf[3] = {EM_F32, EM_F32, EM_F32}, wm[3] = {EM_BOOL, EM_F32, EM_F64}, wb[3] = {EM_BOOL, EM_F32, EM_F32};
  ot_expect_apply_fails("where", 3, wf, n1, same, NULL, 0, 1, "bool", "f32");
  ot_expect_apply_fails("where", 3, wm, n1, same, NULL, 0, 1, "f32 vs f64", NULL);
  const int64_t *wsh[3] = {s3, s34, s5};
  const int wnd[3] = {1, 2, 1};
  ot_expect_apply_fails("where", 3, wb, wnd, wsh, NULL, 0, 1, "f32[3,4]", "f32[5]");
  /* the internal gradient op checks its attributes */
  const em_dtype g3[3] = {EM_F64, EM_F64, EM_F64};
  em_attr fn = {.name = "fn", .type = EM_ATTR_STRING, .s = "tan"};
  ot_expect_apply_fails("_binary_grad", 3, g3, n1, same, &fn, 1, 1, "fn", "tan");
  em_attr bad_which[2] = {{.name = "fn", .type = EM_ATTR_STRING, .s = "max"},
                          {.name = "which", .type = EM_ATTR_INT, .i = 3}};
  ot_expect_apply_fails("_binary_grad", 3, g3, n1, same, bad_which, 2, 1, "which", NULL);
}

/* mod takes only fmod: a misspelt "fmdo" is refused by name, not ignored; the message names the op, the bad name
 * and the names it takes. */
static void test_binary_unknown_attribute(void **state) {
  (void)state;
  const int64_t s0[1] = {3};
  const int64_t s1[1] = {3};
  const int64_t *shapes[2] = {s0, s1};
  const em_dtype dtypes[2] = {EM_F32, EM_F32};
  const int ndims[2] = {1, 1};
  const em_attr at[1] = {{.name = "fmdo", .type = EM_ATTR_INT, .i = 1}};
  ot_expect_apply_fails("mod", 2, dtypes, ndims, shapes, at, 1, 1, "no attribute 'fmdo'",
                        "it takes: fmod");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_add),          cmocka_unit_test(test_sub),
    cmocka_unit_test(test_mul),          cmocka_unit_test(test_div),
    cmocka_unit_test(test_pow),          cmocka_unit_test(test_max),
    cmocka_unit_test(test_min),          cmocka_unit_test(test_mod),
    cmocka_unit_test(test_int_edges),    cmocka_unit_test(test_float_edges),
    cmocka_unit_test(test_comparisons),  cmocka_unit_test(test_logic),
    cmocka_unit_test(test_truth_tables), cmocka_unit_test(test_where),
    cmocka_unit_test(test_grad_add),     cmocka_unit_test(test_grad_sub),
    cmocka_unit_test(test_grad_mul),     cmocka_unit_test(test_grad_div),
    cmocka_unit_test(test_grad_pow),     cmocka_unit_test(test_grad_max),
    cmocka_unit_test(test_grad_min),     cmocka_unit_test(test_grad_mod),
    cmocka_unit_test(test_grad_where),   cmocka_unit_test(test_grad_conventions),
    cmocka_unit_test(test_dynamic_axis), cmocka_unit_test(test_thread_independence),
    cmocka_unit_test(test_empty),        cmocka_unit_test(test_errors),
    cmocka_unit_test(test_binary_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
