/* Tests of the reduction op family (ops/reduce.c): reduce_* over axes,
 * argmax / argmin, and the fused gradient _reduce_grad. Forward values are
 * checked against naive float64 references written here (one pass over x
 * in row-major order, mapping each element to its output by coordinates);
 * gradients by finite differences (ot_gradcheck, f64) and, for large shapes
 * and f32, _reduce_grad against a naive reference derivative; determinism
 * across thread counts bit for bit; errors through em_apply's messages. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"
#include "ember/exec.h"

#define OK(x) assert_int_equal((x), EM_OK)

static const char *const FLOAT_FNS[] = {"sum", "mean", "max", "min", "prod", "log_sum_exp", "log_sum",
                                        "l1", "l2", "sum_square"};
#define N_FLOAT_FNS (sizeof FLOAT_FNS / sizeof FLOAT_FNS[0])
static const char *const INT_FNS[] = {"sum", "max", "min", "prod"};
#define N_INT_FNS (sizeof INT_FNS / sizeof INT_FNS[0])

/* One reduction case: shape and axes (n_axes -1: the attribute is absent). */
typedef struct rcase {
  int nd;
  int64_t dims[4];
  int n_axes;
  int64_t axes[4];
} rcase;

static const rcase CASES[] = {
  {1, {7}, -1, {0}},
  {1, {7}, 1, {0}},
  {1, {7}, 1, {-1}},
  {2, {3, 4}, 1, {0}},
  {2, {3, 4}, 1, {1}},
  {2, {3, 4}, 2, {0, 1}},
  {2, {3, 4}, -1, {0}},
  {2, {3, 4}, 1, {-1}},
  {2, {3, 4}, 0, {0}}, /* an empty list: every axis */
  {4, {2, 3, 4, 5}, 2, {1, 3}},
  {4, {2, 3, 4, 5}, 3, {0, 2, 3}},
  {4, {2, 3, 4, 5}, 2, {0, 2}},
  {4, {2, 1, 4, 1}, 2, {1, 2}},
  {2, {1, 1}, -1, {0}},
  {2, {1, 1}, 1, {0}},
  {0, {0}, -1, {0}}, /* a scalar */
  {2, {1000, 3}, 1, {0}},
  {2, {1000, 3}, 1, {1}},
  {2, {1000, 3}, -1, {0}},
  /* Just above the parallel threshold (32768 elements): threads over
   * outputs, fixed blocks folded in order, several 4096-element segments per
   * run, several 256-wide column chunks. */
  {2, {200, 170}, 1, {0}},
  {2, {200, 170}, 1, {1}},
  {2, {129, 300}, 1, {0}},
  {1, {40001}, -1, {0}},
  {3, {20, 30, 60}, 1, {1}},
  {3, {20, 30, 60}, 2, {0, 2}},
  {2, {3, 12000}, 1, {1}},
  {2, {12000, 3}, 1, {0}},
  {3, {3, 2, 5000}, 2, {0, 2}},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Cases whose reduced axis has size 0 (or whose output is empty). */
static const rcase EMPTY_CASES[] = {
  {2, {3, 0}, 1, {1}},
  {2, {0, 3}, 1, {0}},
  {2, {0, 3}, 1, {1}},
  {1, {0}, -1, {0}},
  {3, {2, 0, 2}, 2, {0, 1}},
};
#define N_EMPTY_CASES (sizeof EMPTY_CASES / sizeof EMPTY_CASES[0])

static int64_t numel(int nd, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  return n;
}

static unsigned case_mask(const rcase *c) {
  if (c->n_axes <= 0) return (1u << c->nd) - 1u;
  unsigned m = 0;
  for (int i = 0; i < c->n_axes; i++) m |= 1u << (c->axes[i] < 0 ? c->axes[i] + c->nd : c->axes[i]);
  return m;
}

/* The expected output shape; returns its rank. */
static int out_shape(const rcase *c, int keepdims, int64_t *out) {
  unsigned m = case_mask(c);
  int n = 0;
  for (int i = 0; i < c->nd; i++) {
    if (!(m & (1u << i))) out[n++] = c->dims[i];
    else if (keepdims) out[n++] = 1;
  }
  return n;
}

static int make_attrs(const rcase *c, int keepdims, em_attr *at) {
  int n = 0;
  if (c->n_axes >= 0) at[n++] = (em_attr){.name = "axes", .type = EM_ATTR_INTS, .ints = c->axes, .n = c->n_axes};
  at[n++] = (em_attr){.name = "keepdims", .type = EM_ATTR_INT, .i = keepdims};
  return n;
}

static void describe(const rcase *c, int keepdims, const char *op, em_dtype t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s %s[", op, em_dtype_name(t));
  for (int i = 0; i < c->nd; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)c->dims[i]);
  n += (size_t)snprintf(buf + n, cap - n, "] axes");
  if (c->n_axes < 0) n += (size_t)snprintf(buf + n, cap - n, " absent");
  for (int i = 0; i < c->n_axes; i++) n += (size_t)snprintf(buf + n, cap - n, " %lld", (long long)c->axes[i]);
  snprintf(buf + n, cap - n, " keepdims %d", keepdims);
}

/* ---------------------------------------------------------- references --- */

/* The output (row-major over kept axes) that x's element `flat` reduces into. */
static int64_t ref_out_index(int nd, const int64_t *dims, unsigned mask, int64_t flat) {
  int64_t coord[8], o = 0;
  for (int d = nd - 1; d >= 0; d--) {
    coord[d] = flat % dims[d];
    flat /= dims[d];
  }
  for (int d = 0; d < nd; d++)
    if (!(mask & (1u << d))) o = o * dims[d] + coord[d];
  return o;
}

/* Naive float64 reduction `fn` of x (shape dims) over mask into out[n_out]. */
static void ref_reduce(const char *fn, const double *x, int nd, const int64_t *dims, unsigned mask, double *out,
                       int64_t n_out) {
  int64_t n = numel(nd, dims);
  double *cnt = calloc((size_t)n_out + 1, sizeof(double)), *sum = calloc((size_t)n_out + 1, sizeof(double));
  double *sab = calloc((size_t)n_out + 1, sizeof(double)), *ssq = calloc((size_t)n_out + 1, sizeof(double));
  double *prd = malloc(sizeof(double) * ((size_t)n_out + 1)), *mx = malloc(sizeof(double) * ((size_t)n_out + 1));
  double *mn = malloc(sizeof(double) * ((size_t)n_out + 1)), *se = calloc((size_t)n_out + 1, sizeof(double));
  for (int64_t o = 0; o < n_out; o++) prd[o] = 1, mx[o] = -INFINITY, mn[o] = INFINITY;
  for (int64_t i = 0; i < n; i++) {
    int64_t o = ref_out_index(nd, dims, mask, i);
    double v = x[i];
    cnt[o] += 1;
    sum[o] += v;
    sab[o] += fabs(v);
    ssq[o] += v * v;
    prd[o] *= v;
    if (!isnan(mx[o]) && (isnan(v) || v > mx[o])) mx[o] = v;
    if (!isnan(mn[o]) && (isnan(v) || v < mn[o])) mn[o] = v;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t o = ref_out_index(nd, dims, mask, i);
    se[o] += exp(x[i] - (isfinite(mx[o]) ? mx[o] : 0));
  }
  for (int64_t o = 0; o < n_out; o++) {
    double r = 0;
    if (!strcmp(fn, "sum")) r = sum[o];
    else if (!strcmp(fn, "mean")) r = cnt[o] ? sum[o] / cnt[o] : NAN;
    else if (!strcmp(fn, "max")) r = mx[o];
    else if (!strcmp(fn, "min")) r = mn[o];
    else if (!strcmp(fn, "prod")) r = prd[o];
    else if (!strcmp(fn, "log_sum_exp")) r = (isfinite(mx[o]) ? mx[o] : 0) + log(se[o]);
    else if (!strcmp(fn, "log_sum")) r = log(sum[o]);
    else if (!strcmp(fn, "l1")) r = sab[o];
    else if (!strcmp(fn, "l2")) r = sqrt(ssq[o]);
    else if (!strcmp(fn, "sum_square")) r = ssq[o];
    else fail_msg("ref_reduce: unknown fn %s", fn);
    out[o] = r;
  }
  free(cnt), free(sum), free(sab), free(ssq), free(prd), free(mx), free(mn), free(se);
}

/* Naive integer reduction, wrapping modulo 2^64 as two's complement does. */
static void ref_reduce_int(const char *fn, const int64_t *x, int nd, const int64_t *dims, unsigned mask, int64_t *out,
                           int64_t n_out) {
  uint64_t *acc = malloc(sizeof(uint64_t) * ((size_t)n_out + 1));
  int *seen = calloc((size_t)n_out + 1, sizeof(int));
  for (int64_t o = 0; o < n_out; o++) acc[o] = !strcmp(fn, "prod") ? 1 : 0;
  for (int64_t i = 0, n = numel(nd, dims); i < n; i++) {
    int64_t o = ref_out_index(nd, dims, mask, i), v = x[i];
    if (!strcmp(fn, "sum")) acc[o] += (uint64_t)v;
    else if (!strcmp(fn, "prod")) acc[o] *= (uint64_t)v;
    else if (!strcmp(fn, "max")) acc[o] = !seen[o] || v > (int64_t)acc[o] ? (uint64_t)v : acc[o];
    else acc[o] = !seen[o] || v < (int64_t)acc[o] ? (uint64_t)v : acc[o];
    seen[o] = 1;
  }
  for (int64_t o = 0; o < n_out; o++) out[o] = (int64_t)acc[o];
  free(acc);
  free(seen);
}

/* Test data for fn: signed values for most, positive for log_sum, values
 * near +-1 for prod (products of thousands stay finite). */
static double *make_values(const char *fn, int64_t n, uint64_t seed) {
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    if (!strcmp(fn, "log_sum")) v[i] = ot_uniform(&seed, 0.5, 1.5);
    else if (!strcmp(fn, "prod")) v[i] = ot_uniform(&seed, 0.97, 1.03) * (ot_uniform(&seed, 0, 1) < 0.5 ? -1 : 1);
    else v[i] = ot_uniform(&seed, -1.5, 1.5);
  }
  return v;
}

static em_tensor *run_reduce(const char *op, em_tensor *x, const em_attr *at, int n_at) {
  em_tensor *y = NULL;
  if (ot_run(op, &x, 1, at, n_at, &y, 1)) fail_msg("%s failed: %s", op, em_last_error());
  return y;
}

/* ------------------------------------------------------------- forward --- */

static void check_float_case(const rcase *c, const char *fn, em_dtype t, int keepdims) {
  char op[64], what[256];
  snprintf(op, sizeof op, "reduce_%s", fn);
  describe(c, keepdims, op, t, what, sizeof what);
  int64_t n = numel(c->nd, c->dims), oshape[8];
  int ond = out_shape(c, keepdims, oshape);
  int64_t n_out = numel(ond, oshape);
  double *v = make_values(fn, n, 0x1234u + (uint64_t)n);
  em_tensor *x = ot_tensor(t, c->nd, c->dims, v);
  double *xv = ot_values(x, NULL); /* the values as stored (f32: rounded) */
  em_attr at[2];
  int n_at = make_attrs(c, keepdims, at);
  em_tensor *y = run_reduce(op, x, at, n_at);
  ot_expect_shape(y, t, ond, oshape, what);
  double *want = malloc(sizeof(double) * (size_t)(n_out + 1));
  ref_reduce(fn, xv, c->nd, c->dims, case_mask(c), want, n_out);
  double *got = ot_values(y, NULL);
  /* The library accumulates in double: f32 results differ from the
   * reference by their final rounding only; f64 by summation order. */
  if (t == EM_F32) ot_expect_close(got, want, n_out, 1e-6, 2e-6, what);
  else ot_expect_close(got, want, n_out, 1e-10, 1e-10, what);
  free(v), free(xv), free(want), free(got);
  em_tensor_release(x);
  em_tensor_release(y);
}

static void test_forward_float(void **state) {
  (void)state;
  const em_dtype types[2] = {EM_F32, EM_F64};
  for (size_t k = 0; k < N_CASES; k++)
    for (size_t f = 0; f < N_FLOAT_FNS; f++)
      for (int ti = 0; ti < 2; ti++)
        for (int keep = 0; keep <= (numel(CASES[k].nd, CASES[k].dims) <= 5000); keep++)
          check_float_case(&CASES[k], FLOAT_FNS[f], types[ti], keep);
}

static void check_int_case(const rcase *c, const char *fn, em_dtype t, int keepdims) {
  char op[64], what[256];
  snprintf(op, sizeof op, "reduce_%s", fn);
  describe(c, keepdims, op, t, what, sizeof what);
  int64_t n = numel(c->nd, c->dims), oshape[8];
  int ond = out_shape(c, keepdims, oshape);
  int64_t n_out = numel(ond, oshape);
  uint64_t seed = 77 + (uint64_t)n;
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  int64_t *xi = malloc(sizeof(int64_t) * (size_t)(n + 1));
  /* Products of many small integers wrap around, which is tested too. */
  double span = !strcmp(fn, "prod") ? 3 : t == EM_I64 ? 1e12 : 50;
  for (int64_t i = 0; i < n; i++) xi[i] = (int64_t)floor(ot_uniform(&seed, -span, span + 1)), v[i] = (double)xi[i];
  em_tensor *x = ot_tensor(t, c->nd, c->dims, v);
  em_attr at[2];
  int n_at = make_attrs(c, keepdims, at);
  em_tensor *y = run_reduce(op, x, at, n_at);
  ot_expect_shape(y, t, ond, oshape, what);
  int64_t *want = malloc(sizeof(int64_t) * (size_t)(n_out + 1));
  ref_reduce_int(fn, xi, c->nd, c->dims, case_mask(c), want, n_out);
  for (int64_t o = 0; o < n_out; o++) {
    int64_t got = t == EM_I32 ? ((const int32_t *)em_tensor_data(y))[o] : ((const int64_t *)em_tensor_data(y))[o];
    int64_t w = t == EM_I32 ? (int64_t)(int32_t)(uint32_t)(uint64_t)want[o] : want[o];
    if (got != w) fail_msg("%s: element %lld is %lld, expected %lld", what, (long long)o, (long long)got, (long long)w);
  }
  free(v), free(xi), free(want);
  em_tensor_release(x);
  em_tensor_release(y);
}

static void test_forward_int(void **state) {
  (void)state;
  const em_dtype types[2] = {EM_I32, EM_I64};
  for (size_t k = 0; k < N_CASES; k++)
    for (size_t f = 0; f < N_INT_FNS; f++)
      for (int ti = 0; ti < 2; ti++)
        for (int keep = 0; keep <= 1; keep++) check_int_case(&CASES[k], INT_FNS[f], types[ti], keep);
}

/* Reducing over nothing: the identities, NaN for mean, -inf for the logs. */
static void test_empty(void **state) {
  (void)state;
  const char *fns[] = {"sum", "mean", "prod", "log_sum_exp", "log_sum", "l1", "l2", "sum_square"};
  const double expect[] = {0, NAN, 1, -INFINITY, -INFINITY, 0, 0, 0};
  for (size_t k = 0; k < N_EMPTY_CASES; k++)
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++)
      for (int keep = 0; keep <= 1; keep++) {
        const rcase *c = &EMPTY_CASES[k];
        char op[64], what[256];
        snprintf(op, sizeof op, "reduce_%s", fns[f]);
        describe(c, keep, op, EM_F64, what, sizeof what);
        int64_t oshape[8];
        int ond = out_shape(c, keep, oshape);
        int64_t n_out = numel(ond, oshape);
        em_tensor *x = ot_tensor(EM_F64, c->nd, c->dims, NULL);
        em_attr at[2];
        int n_at = make_attrs(c, keep, at);
        em_tensor *y = run_reduce(op, x, at, n_at);
        ot_expect_shape(y, EM_F64, ond, oshape, what);
        double *got = ot_values(y, NULL), want[8];
        for (int64_t o = 0; o < n_out; o++) want[o] = expect[f];
        ot_expect_close(got, want, n_out, 0, 0, what);
        free(got);
        em_tensor_release(x);
        em_tensor_release(y);
      }
  /* Integer sums and products of nothing. */
  const int64_t d[2] = {2, 0}, ax[1] = {1};
  em_attr at[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax, .n = 1}};
  em_tensor *x = ot_tensor(EM_I32, 2, d, NULL);
  em_tensor *s = run_reduce("reduce_sum", x, at, 1), *p = run_reduce("reduce_prod", x, at, 1);
  assert_int_equal(((int32_t *)em_tensor_data(s))[1], 0);
  assert_int_equal(((int32_t *)em_tensor_data(p))[1], 1);
  em_tensor_release(x), em_tensor_release(s), em_tensor_release(p);
}

/* NaN propagates through max/min (and every sum); +-inf through log_sum_exp. */
static void test_nan_inf(void **state) {
  (void)state;
  const int64_t d[2] = {3, 4};
  const double v[12] = {1, NAN, 3, 2, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 5, INFINITY, 1, 0};
  em_tensor *x = ot_tensor(EM_F64, 2, d, v);
  const int64_t ax[1] = {1};
  em_attr at[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax, .n = 1}};
  struct { const char *op; double want[3]; } cases[] = {
    {"reduce_max", {NAN, -INFINITY, INFINITY}},
    {"reduce_min", {NAN, -INFINITY, 0}},
    {"reduce_sum", {NAN, -INFINITY, INFINITY}},
    {"reduce_log_sum_exp", {NAN, -INFINITY, INFINITY}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    em_tensor *y = run_reduce(cases[k].op, x, at, 1);
    double *got = ot_values(y, NULL);
    ot_expect_close(got, cases[k].want, 3, 0, 0, cases[k].op);
    free(got);
    em_tensor_release(y);
  }
  em_tensor_release(x);
  /* log_sum_exp stays finite where exp overflows. */
  const int64_t d1[1] = {3};
  const double big[3] = {1000, 1000, 999};
  em_tensor *xb = ot_tensor(EM_F64, 1, d1, big);
  em_tensor *y = run_reduce("reduce_log_sum_exp", xb, NULL, 0);
  double *got = ot_values(y, NULL), want = 1000 + log(2 + exp(-1.0));
  ot_expect_close(got, &want, 1, 0, 1e-15, "log_sum_exp of large values");
  free(got);
  em_tensor_release(y);
  em_tensor_release(xb);
}

/* ------------------------------------------------------ argmax, argmin --- */

/* Naive argmax/argmin along `axis`, NaN counting as the extreme. */
static void ref_arg(const double *x, int nd, const int64_t *dims, int axis, int want_max, int last, int64_t *out) {
  int64_t outer = 1, inner = 1, n = dims[axis];
  for (int d = 0; d < axis; d++) outer *= dims[d];
  for (int d = axis + 1; d < nd; d++) inner *= dims[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t best = 0;
      double b = x[o * n * inner + i];
      for (int64_t k = 1; k < n; k++) {
        double v = x[(o * n + k) * inner + i];
        int take;
        if (isnan(b)) take = isnan(v) && last;
        else if (isnan(v)) take = 1;
        else take = want_max ? (v > b || (v == b && last)) : (v < b || (v == b && last));
        if (take) best = k, b = v;
      }
      out[o * inner + i] = best;
    }
}

static void check_arg(const char *op, em_dtype t, int nd, const int64_t *dims, int64_t axis, int keepdims, int last,
                      const double *v) {
  char what[128];
  snprintf(what, sizeof what, "%s %s rank %d axis %lld keepdims %d last %d", op, em_dtype_name(t), nd,
           (long long)axis, keepdims, last);
  em_tensor *x = ot_tensor(t, nd, dims, v);
  em_attr at[3] = {{.name = "axis", .type = EM_ATTR_INT, .i = axis},
                   {.name = "keepdims", .type = EM_ATTR_INT, .i = keepdims},
                   {.name = "select_last_index", .type = EM_ATTR_INT, .i = last}};
  em_tensor *y = run_reduce(op, x, at, 3);
  int k = (int)(axis < 0 ? axis + nd : axis);
  int64_t oshape[8], n_out = 1;
  int ond = 0;
  for (int d = 0; d < nd; d++) {
    if (d != k) oshape[ond++] = dims[d];
    else if (keepdims) oshape[ond++] = 1;
    if (d != k) n_out *= dims[d];
  }
  ot_expect_shape(y, EM_I64, ond, oshape, what);
  double *xv = ot_values(x, NULL);
  int64_t *want = malloc(sizeof(int64_t) * (size_t)(n_out + 1));
  ref_arg(xv, nd, dims, k, !strcmp(op, "argmax"), last, want);
  const int64_t *got = em_tensor_data(y);
  for (int64_t o = 0; o < n_out; o++)
    if (got[o] != want[o]) fail_msg("%s: element %lld is %lld, expected %lld", what, (long long)o, (long long)got[o],
                                    (long long)want[o]);
  free(xv), free(want);
  em_tensor_release(x);
  em_tensor_release(y);
}

/* Hand-worked ties: the first index, or the last with select_last_index. */
static void test_arg_ties(void **state) {
  (void)state;
  const int64_t d[2] = {2, 3};
  const double v[6] = {1, 3, 3, 2, 2, 1};
  em_tensor *x = ot_tensor(EM_F32, 2, d, v);
  struct { const char *op; int64_t axis, last; int64_t want[3]; int n; } cases[] = {
    {"argmax", 1, 0, {1, 0}, 2},    {"argmax", 1, 1, {2, 1}, 2},    {"argmin", 1, 0, {0, 2}, 2},
    {"argmin", -1, 1, {0, 2}, 2},   {"argmax", 0, 0, {1, 0, 0}, 3}, {"argmin", -2, 0, {0, 1, 1}, 3},
    {"argmax", -2, 1, {1, 0, 0}, 3},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    em_attr at[2] = {{.name = "axis", .type = EM_ATTR_INT, .i = cases[k].axis},
                     {.name = "select_last_index", .type = EM_ATTR_INT, .i = cases[k].last}};
    em_tensor *y = run_reduce(cases[k].op, x, at, 2);
    ot_expect_shape(y, EM_I64, 1, (int64_t[]){cases[k].n}, cases[k].op);
    const int64_t *got = em_tensor_data(y);
    for (int i = 0; i < cases[k].n; i++)
      if (got[i] != cases[k].want[i])
        fail_msg("%s axis %lld last %lld: element %d is %lld, expected %lld", cases[k].op, (long long)cases[k].axis,
                 (long long)cases[k].last, i, (long long)got[i], (long long)cases[k].want[i]);
    em_tensor_release(y);
  }
  em_tensor_release(x);
  /* NaN is the extreme for both: the first NaN, or the last. */
  const int64_t d1[1] = {5};
  const double vn[5] = {1, NAN, 7, NAN, -3};
  em_tensor *xn = ot_tensor(EM_F64, 1, d1, vn);
  for (int last = 0; last <= 1; last++)
    for (int mx = 0; mx <= 1; mx++) {
      em_attr at[1] = {{.name = "select_last_index", .type = EM_ATTR_INT, .i = last}};
      em_tensor *y = run_reduce(mx ? "argmax" : "argmin", xn, at, 1);
      assert_int_equal(((int64_t *)em_tensor_data(y))[0], last ? 3 : 1);
      em_tensor_release(y);
    }
  em_tensor_release(xn);
}

/* Random small integers (many ties) in every numeric dtype, several axes. */
static void test_arg_reference(void **state) {
  (void)state;
  struct { int nd; int64_t dims[4]; int64_t axis; } shapes[] = {
    {1, {7}, 0},         {2, {3, 4}, 0},       {2, {3, 4}, 1},      {2, {3, 4}, -1},   {4, {2, 3, 4, 5}, 2},
    {4, {2, 3, 4, 5}, -3}, {4, {2, 3, 4, 5}, 3}, {2, {1000, 3}, 0},  {2, {1, 1}, 0},    {2, {200, 170}, 1},
    {2, {200, 170}, 0},  {3, {4, 1, 5}, 1},    {2, {129, 300}, 0},    {2, {20, 700}, 0},
  };
  const em_dtype types[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I32, EM_I64, EM_U8};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t n = numel(shapes[s].nd, shapes[s].dims);
    double *v = malloc(sizeof(double) * (size_t)n);
    uint64_t seed = 99 + s;
    for (int64_t i = 0; i < n; i++) v[i] = floor(ot_uniform(&seed, 0, 4));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      for (int keep = 0; keep <= 1; keep++)
        for (int last = 0; last <= 1; last++) {
          check_arg("argmax", types[t], shapes[s].nd, shapes[s].dims, shapes[s].axis, keep, last, v);
          check_arg("argmin", types[t], shapes[s].nd, shapes[s].dims, shapes[s].axis, keep, last, v);
        }
    free(v);
  }
}

/* ----------------------------------------------------------- gradients --- */

typedef struct gcase {
  int nd;
  int64_t dims[4];
  int n_axes;
  int64_t axes[4];
  int keepdims;
} gcase;

static const gcase GCASES[] = {
  {1, {5}, -1, {0}, 0},        {2, {3, 4}, 1, {1}, 0},          {2, {3, 4}, 1, {0}, 1},
  {3, {2, 3, 4}, 2, {0, 2}, 0}, {3, {2, 3, 4}, -1, {0}, 1},     {4, {2, 3, 2, 3}, 2, {-1, 1}, 0},
};
#define N_GCASES (sizeof GCASES / sizeof GCASES[0])

/* Inputs away from the op's kinks: distinct values for max/min (no ties),
 * magnitudes >= 0.2 for l1 and prod, positive for log_sum. */
static double *grad_values(const char *fn, int64_t n, uint64_t seed) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    double mag = ot_uniform(&seed, 0.2, 1.5), sign = ot_uniform(&seed, 0, 1) < 0.5 ? -1 : 1;
    v[i] = !strcmp(fn, "log_sum") ? mag : sign * mag;
  }
  if (!strcmp(fn, "max") || !strcmp(fn, "min")) /* a shuffled ramp, 0.1 apart */
    for (int64_t i = 0; i < n; i++) v[i] = 0.1 * (double)((i * 7919) % n) - 1;
  return v;
}

static void gradcheck_fn(const char *fn) {
  char op[64];
  snprintf(op, sizeof op, "reduce_%s", fn);
  for (size_t k = 0; k < N_GCASES; k++) {
    const gcase *c = &GCASES[k];
    rcase rc = {c->nd, {c->dims[0], c->dims[1], c->dims[2], c->dims[3]}, c->n_axes,
                {c->axes[0], c->axes[1], c->axes[2], c->axes[3]}};
    int64_t n = numel(c->nd, c->dims);
    double *v = grad_values(fn, n, 5 + k);
    em_tensor *x = ot_tensor(EM_F64, c->nd, c->dims, v);
    em_attr at[2];
    int n_at = make_attrs(&rc, c->keepdims, at);
    ot_gradcheck(op, &x, 1, at, n_at, 1, 0, 1e-6);
    free(v);
    em_tensor_release(x);
  }
}

static void test_grad_sum(void **state) { (void)state, gradcheck_fn("sum"); }
static void test_grad_mean(void **state) { (void)state, gradcheck_fn("mean"); }
static void test_grad_max(void **state) { (void)state, gradcheck_fn("max"); }
static void test_grad_min(void **state) { (void)state, gradcheck_fn("min"); }
static void test_grad_prod(void **state) { (void)state, gradcheck_fn("prod"); }
static void test_grad_log_sum_exp(void **state) { (void)state, gradcheck_fn("log_sum_exp"); }
static void test_grad_log_sum(void **state) { (void)state, gradcheck_fn("log_sum"); }
static void test_grad_l1(void **state) { (void)state, gradcheck_fn("l1"); }
static void test_grad_l2(void **state) { (void)state, gradcheck_fn("l2"); }
static void test_grad_sum_square(void **state) { (void)state, gradcheck_fn("sum_square"); }

/* prod is multilinear, so central differences stay exact with zeros: one
 * zero (it gets the product of the others) and two (everything gets 0). */
static void test_grad_prod_zeros(void **state) {
  (void)state;
  const int64_t d[2] = {3, 4};
  const double v[12] = {0, 1.5, -2, 0.5, 0, 2, 0, -1, 1.25, -0.5, 3, 0};
  const int64_t ax[1] = {1};
  em_attr at[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax, .n = 1}};
  em_tensor *x = ot_tensor(EM_F64, 2, d, v);
  ot_gradcheck("reduce_prod", &x, 1, at, 1, 1, 0, 1e-6);
  em_tensor_release(x);
}

/* Ties in max / min: all of dy goes to the first extreme element (row-major
 * over the reduced axes), in both cases B (columns) and A (rows). */
static void test_grad_max_ties(void **state) {
  (void)state;
  const int64_t d[2] = {3, 4}, d1[1] = {4}, d3[1] = {3};
  const double v[12] = {1, 3, 3, 2, /**/ 5, 5, 0, 5, /**/ -1, 3, 0, 0};
  struct { const char *fn; int64_t axis; int n_out; double dx[12]; } cases[] = {
    {"max", 1, 3, {0, 1, 0, 0, /**/ 2, 0, 0, 0, /**/ 0, 3, 0, 0}},
    {"min", 1, 3, {1, 0, 0, 0, /**/ 0, 0, 2, 0, /**/ 3, 0, 0, 0}},
    {"max", 0, 4, {0, 0, 3, 0, /**/ 1, 2, 0, 4, /**/ 0, 0, 0, 0}},
    {"min", 0, 4, {0, 2, 0, 0, /**/ 0, 0, 3, 0, /**/ 1, 0, 0, 4}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const double dyv[4] = {1, 2, 3, 4};
    em_tensor *in[3];
    in[0] = ot_tensor(EM_F64, 2, d, v);
    in[2] = ot_tensor(EM_F64, 1, cases[k].n_out == 3 ? d3 : d1, dyv);
    em_attr at[2] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = &cases[k].axis, .n = 1},
                     {.name = "fn", .type = EM_ATTR_STRING, .s = cases[k].fn}};
    OK(ot_run(!strcmp(cases[k].fn, "max") ? "reduce_max" : "reduce_min", in, 1, at, 1, &in[1], 1));
    em_tensor *dx = NULL;
    OK(ot_run("_reduce_grad", in, 3, at, 2, &dx, 1));
    double *got = ot_values(dx, NULL);
    ot_expect_close(got, cases[k].dx, 12, 0, 0, cases[k].fn);
    free(got);
    for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
    em_tensor_release(dx);
  }
}

/* Where the derivative has a special value: l2 of a zero row (0, not 0/0),
 * log_sum_exp of an all -inf row (0, not NaN). */
static void test_grad_special_rows(void **state) {
  (void)state;
  const int64_t d[2] = {2, 3}, d2[1] = {2}, ax[1] = {1};
  struct { const char *fn; double x[6]; double want[6]; } cases[] = {
    {"l2", {0, 0, 0, 3, 0, -4}, {0, 0, 0, 0.6 * 2, 0, -0.8 * 2}},
    {"log_sum_exp", {-INFINITY, -INFINITY, -INFINITY, 0, 0, 0}, {0, 0, 0, 2.0 / 3, 2.0 / 3, 2.0 / 3}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char op[64];
    snprintf(op, sizeof op, "reduce_%s", cases[k].fn);
    const double dyv[2] = {1, 2};
    em_tensor *in[3] = {ot_tensor(EM_F64, 2, d, cases[k].x), NULL, ot_tensor(EM_F64, 1, d2, dyv)};
    em_attr at[2] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax, .n = 1},
                     {.name = "fn", .type = EM_ATTR_STRING, .s = cases[k].fn}};
    OK(ot_run(op, in, 1, at, 1, &in[1], 1));
    em_tensor *dx = NULL;
    OK(ot_run("_reduce_grad", in, 3, at, 2, &dx, 1));
    double *got = ot_values(dx, NULL);
    ot_expect_close(got, cases[k].want, 6, 1e-15, 1e-15, op);
    free(got);
    for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
    em_tensor_release(dx);
  }
}

/* Naive reference of _reduce_grad: dx from x, y (as the op receives it), dy. */
static void ref_grad(const char *fn, const double *x, const double *y, const double *dy, int nd, const int64_t *dims,
                     unsigned mask, int64_t n_out, double *dx) {
  int64_t n = numel(nd, dims);
  double *cnt = calloc((size_t)n_out + 1, sizeof(double)), *sum = calloc((size_t)n_out + 1, sizeof(double));
  double *zeros = calloc((size_t)n_out + 1, sizeof(double)), *pnz = malloc(sizeof(double) * ((size_t)n_out + 1));
  int64_t *first = malloc(sizeof(int64_t) * ((size_t)n_out + 1));
  for (int64_t o = 0; o < n_out; o++) pnz[o] = 1, first[o] = -1;
  int want_max = !strcmp(fn, "max");
  for (int64_t i = 0; i < n; i++) {
    int64_t o = ref_out_index(nd, dims, mask, i);
    cnt[o] += 1, sum[o] += x[i];
    if (x[i] == 0) zeros[o] += 1;
    else pnz[o] *= x[i];
    if (first[o] < 0 || (want_max ? x[i] > x[first[o]] : x[i] < x[first[o]])) first[o] = i;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t o = ref_out_index(nd, dims, mask, i);
    double g = 0, xi = x[i];
    if (!strcmp(fn, "sum")) g = 1;
    else if (!strcmp(fn, "mean")) g = 1 / cnt[o];
    else if (!strcmp(fn, "max") || !strcmp(fn, "min")) g = first[o] == i;
    else if (!strcmp(fn, "prod")) g = zeros[o] == 0 ? pnz[o] / xi : zeros[o] == 1 && xi == 0 ? pnz[o] : 0;
    else if (!strcmp(fn, "log_sum_exp")) g = exp(xi - y[o]);
    else if (!strcmp(fn, "log_sum")) g = 1 / sum[o];
    else if (!strcmp(fn, "l1")) g = xi > 0 ? 1 : xi < 0 ? -1 : 0;
    else if (!strcmp(fn, "l2")) g = y[o] == 0 ? 0 : xi / y[o];
    else if (!strcmp(fn, "sum_square")) g = 2 * xi;
    dx[i] = g * dy[o];
  }
  free(cnt), free(sum), free(zeros), free(pnz), free(first);
}

/* _reduce_grad directly, on large shapes (parallel paths) and f32 as well
 * as f64, against the naive derivative. */
static void test_reduce_grad_direct(void **state) {
  (void)state;
  const rcase cases[] = {
    {2, {200, 170}, 1, {0}}, {2, {200, 170}, 1, {1}}, {1, {40001}, -1, {0}}, {3, {20, 30, 60}, 2, {0, 2}},
    {2, {12000, 3}, 1, {0}}, {4, {2, 3, 4, 5}, 2, {1, 3}}, {2, {3, 4}, 1, {-1}}, {3, {3, 2, 5000}, 2, {0, 2}},
  };
  const em_dtype types[2] = {EM_F32, EM_F64};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (size_t f = 0; f < N_FLOAT_FNS; f++)
      for (int ti = 0; ti < 2; ti++) {
        const rcase *c = &cases[k];
        const char *fn = FLOAT_FNS[f];
        int keep = (int)(k % 2);
        char what[256];
        describe(c, keep, fn, types[ti], what, sizeof what);
        int64_t n = numel(c->nd, c->dims), oshape[8];
        int ond = out_shape(c, keep, oshape);
        int64_t n_out = numel(ond, oshape);
        double *v = make_values(fn, n, 11 + k);
        if (!strcmp(fn, "prod")) { /* one zero in the first output, two in the second */
          v[0] = 0;
          for (int64_t i = 1, zeros = 0; i < n && zeros < 2; i++)
            if (ref_out_index(c->nd, c->dims, case_mask(c), i) == (n_out > 1)) v[i] = 0, zeros++;
        }
        em_tensor *x = ot_tensor(types[ti], c->nd, c->dims, v);
        double *xv = ot_values(x, NULL), *yv = malloc(sizeof(double) * (size_t)n_out);
        double *dyv = malloc(sizeof(double) * (size_t)n_out), *want = malloc(sizeof(double) * (size_t)n);
        ref_reduce(fn, xv, c->nd, c->dims, case_mask(c), yv, n_out);
        uint64_t seed = 3;
        for (int64_t o = 0; o < n_out; o++) dyv[o] = ot_uniform(&seed, 0.5, 1.5);
        em_tensor *in[3] = {x, ot_tensor(types[ti], ond, oshape, yv), ot_tensor(types[ti], ond, oshape, dyv)};
        double *ys = ot_values(in[1], NULL), *dys = ot_values(in[2], NULL);
        ref_grad(fn, xv, ys, dys, c->nd, c->dims, case_mask(c), n_out, want);
        em_attr at[3];
        int n_at = make_attrs(c, keep, at);
        at[n_at++] = (em_attr){.name = "fn", .type = EM_ATTR_STRING, .s = fn};
        em_tensor *dx = NULL;
        if (ot_run("_reduce_grad", in, 3, at, n_at, &dx, 1)) fail_msg("%s: %s", what, em_last_error());
        ot_expect_shape(dx, types[ti], c->nd, c->dims, what);
        double *got = ot_values(dx, NULL);
        if (types[ti] == EM_F32) ot_expect_close(got, want, n, 1e-6, 1e-5, what);
        else ot_expect_close(got, want, n, 1e-12, 1e-10, what);
        free(v), free(xv), free(yv), free(dyv), free(want), free(ys), free(dys), free(got);
        for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
        em_tensor_release(dx);
      }
}

/* --------------------------------------------------------- determinism --- */

static void run_bits(const char *op, em_tensor *x, const em_attr *at, int n_at, int threads, void *bits, size_t cap) {
  OK(em_set_num_threads(threads));
  em_tensor *y = run_reduce(op, x, at, n_at);
  size_t bytes = (size_t)em_tensor_numel(y) * em_dtype_size(em_tensor_dtype(y));
  assert_true(bytes <= cap);
  memcpy(bits, em_tensor_data(y), bytes);
  em_tensor_release(y);
}

/* Values over a wide range of magnitudes, so that any change of summation
 * order changes the rounding (f64), or at least can (f32 summed in double). */
static em_tensor *wide_values(em_dtype t, int nd, const int64_t *dims, uint64_t seed) {
  int64_t n = numel(nd, dims);
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = ot_uniform(&seed, -1, 1) * ldexp(1.0, (int)ot_uniform(&seed, -20, 20));
  em_tensor *x = ot_tensor(t, nd, dims, v);
  free(v);
  return x;
}

/* The same bits with 1, 3 and 4 threads, whatever the path, f32 and f64. */
static void test_determinism(void **state) {
  (void)state;
  const rcase cases[] = {
    {1, {1000003}, -1, {0}}, {2, {40001, 4}, 1, {0}}, {2, {4, 40001}, 1, {1}},
    {2, {300, 300}, 1, {0}}, {2, {300, 300}, 1, {1}}, {3, {50, 40, 50}, 2, {0, 2}},
  };
  const char *ops[] = {"reduce_sum", "reduce_log_sum_exp", "reduce_max", "argmax"};
  static unsigned char a[1 << 18], b[1 << 18];
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int ti = 0; ti < 2; ti++) {
      em_dtype t = ti ? EM_F64 : EM_F32;
      em_tensor *x = wide_values(t, cases[k].nd, cases[k].dims, 42 + k);
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        em_attr at[2];
        int n_at = make_attrs(&cases[k], 0, at);
        if (!strcmp(ops[o], "argmax")) {
          at[0] = (em_attr){.name = "axis", .type = EM_ATTR_INT, .i = cases[k].n_axes > 0 ? cases[k].axes[0] : 0};
          n_at = 1;
        }
        run_bits(ops[o], x, at, n_at, 1, a, sizeof a);
        for (int nt = 3; nt <= 4; nt++) {
          run_bits(ops[o], x, at, n_at, nt, b, sizeof b);
          if (memcmp(a, b, sizeof a))
            fail_msg("%s %s case %zu: %d threads give other bits than 1", ops[o], em_dtype_name(t), k, nt);
        }
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
      }
      if (k == 0) { /* and the sum is right */
        double *xv = ot_values(x, NULL), want = 0;
        for (int64_t i = 0; i < 1000003; i++) want += xv[i];
        em_tensor *y = run_reduce("reduce_sum", x, NULL, 0);
        double *got = ot_values(y, NULL);
        ot_expect_close(got, &want, 1, 1e-6, t == EM_F32 ? 1e-6 : 1e-9, "sum of 1000003 values");
        free(xv), free(got);
        em_tensor_release(y);
      }
      em_tensor_release(x);
    }
  OK(em_set_num_threads(0));
}

/* --------------------------------------------------------------- errors --- */

static void test_errors(void **state) {
  (void)state;
  const int64_t s34[2] = {3, 4}, s30[2] = {3, 0}, *sh34[1] = {s34}, *sh30[1] = {s30};
  const int nd2[1] = {2};
  const em_dtype f32[1] = {EM_F32}, boolt[1] = {EM_BOOL}, i32[1] = {EM_I32}, f16[1] = {EM_F16};
  const int64_t ax2[1] = {2}, axm3[1] = {-3}, dup[2] = {1, -1}, ax1[1] = {1};
  em_attr a_out[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax2, .n = 1}};
  em_attr a_neg[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = axm3, .n = 1}};
  em_attr a_dup[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = dup, .n = 2}};
  em_attr a_ax1[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax1, .n = 1}};
  em_attr a_int[1] = {{.name = "axes", .type = EM_ATTR_INT, .i = 1}};
  em_attr a_keep[1] = {{.name = "keepdims", .type = EM_ATTR_INT, .i = 2}};
  ot_expect_apply_fails("reduce_sum", 1, f32, nd2, sh34, a_out, 1, 1, "f32[3,4]", "axes");
  ot_expect_apply_fails("reduce_mean", 1, f32, nd2, sh34, a_neg, 1, 1, "f32[3,4]", "out of range");
  ot_expect_apply_fails("reduce_max", 1, f32, nd2, sh34, a_dup, 1, 1, "f32[3,4]", "twice");
  ot_expect_apply_fails("reduce_l2", 1, f32, nd2, sh34, a_int, 1, 1, "f32[3,4]", "axes");
  ot_expect_apply_fails("reduce_sum", 1, f32, nd2, sh34, a_keep, 1, 1, "f32[3,4]", "keepdims");
  ot_expect_apply_fails("reduce_sum", 1, boolt, nd2, sh34, NULL, 0, 1, "bool[3,4]", "bool");
  ot_expect_apply_fails("reduce_max", 1, f16, nd2, sh34, NULL, 0, 1, "f16[3,4]", "f16");
  ot_expect_apply_fails("reduce_mean", 1, i32, nd2, sh34, NULL, 0, 1, "i32[3,4]", "i32");
  ot_expect_apply_fails("reduce_log_sum_exp", 1, i32, nd2, sh34, NULL, 0, 1, "i32[3,4]", "i32");
  ot_expect_apply_fails("reduce_max", 1, f32, nd2, sh30, a_ax1, 1, 1, "f32[3,0]", "size 0");
  ot_expect_apply_fails("reduce_min", 1, f32, nd2, sh30, NULL, 0, 1, "f32[3,0]", "size 0");

  em_attr g_axis[1] = {{.name = "axis", .type = EM_ATTR_INT, .i = 2}};
  em_attr g_last[1] = {{.name = "select_last_index", .type = EM_ATTR_INT, .i = 2}};
  em_attr g_ax1[1] = {{.name = "axis", .type = EM_ATTR_INT, .i = -1}};
  ot_expect_apply_fails("argmax", 1, f32, nd2, sh34, g_axis, 1, 1, "f32[3,4]", "axis");
  ot_expect_apply_fails("argmin", 1, boolt, nd2, sh34, NULL, 0, 1, "bool[3,4]", "bool");
  ot_expect_apply_fails("argmin", 1, f32, nd2, sh34, g_last, 1, 1, "f32[3,4]", "select_last_index");
  ot_expect_apply_fails("argmax", 1, f32, nd2, sh30, g_ax1, 1, 1, "f32[3,0]", "size 0");
  const int nd0[1] = {0};
  const int64_t *sh0[1] = {s34};
  ot_expect_apply_fails("argmax", 1, f32, nd0, sh0, NULL, 0, 1, "f32[]", "scalar");

  /* _reduce_grad: an unknown fn, and dy not shaped like y. */
  const int64_t s3[1] = {3};
  const int64_t *gsh[3] = {s34, s3, s34};
  const int gnd[3] = {2, 1, 2};
  const em_dtype g64[3] = {EM_F64, EM_F64, EM_F64};
  em_attr ga[2] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax1, .n = 1},
                   {.name = "fn", .type = EM_ATTR_STRING, .s = "median"}};
  ot_expect_apply_fails("_reduce_grad", 3, g64, gnd, gsh, ga, 2, 1, "median", "fn");
  ga[1].s = "sum";
  ot_expect_apply_fails("_reduce_grad", 3, g64, gnd, gsh, ga, 2, 1, "f64[3,4]", "f64[3]");
}

/* Shapes with the dynamic axis: -1 stays where kept, and a max over a
 * dynamic axis that turns out empty fails when it runs. */
static void test_dynamic_axis(void **state) {
  (void)state;
  em_graph *g;
  OK(em_graph_create(&g));
  const int64_t d[2] = {-1, 4};
  em_var x, y0, y1;
  const int64_t ax0[1] = {0}, ax1[1] = {1};
  em_attr a0[2] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax0, .n = 1},
                   {.name = "keepdims", .type = EM_ATTR_INT, .i = 1}};
  em_attr a1[1] = {{.name = "axes", .type = EM_ATTR_INTS, .ints = ax1, .n = 1}};
  OK(em_input(g, "x", EM_F32, 2, d, &x));
  OK(em_apply(g, "reduce_max", &x, 1, a0, 2, &y0, 1));
  OK(em_apply(g, "reduce_sum", &x, 1, a1, 1, &y1, 1));
  int nd;
  int64_t s[8];
  OK(em_var_info(g, y0, NULL, &nd, s));
  assert_int_equal(nd, 2);
  assert_int_equal(s[0], 1);
  assert_int_equal(s[1], 4);
  OK(em_var_info(g, y1, NULL, &nd, s));
  assert_int_equal(nd, 1);
  assert_int_equal(s[0], -1);
  em_exec *e;
  OK(em_exec_create(g, &y0, 1, em_cpu(), &e));
  const int64_t d5[2] = {5, 4}, d0[2] = {0, 4};
  em_tensor *x5 = ot_rand(EM_F32, 2, d5, 1, -1, 1), *x0 = ot_tensor(EM_F32, 2, d0, NULL), *out = NULL;
  em_feed f = {x, x5};
  OK(em_exec_run(e, &f, 1, &out));
  em_tensor_release(out);
  out = NULL;
  f.value = x0;
  assert_int_not_equal(em_exec_run(e, &f, 1, &out), EM_OK);
  assert_non_null(strstr(em_last_error(), "reduce_max"));
  em_tensor_release(out);
  em_tensor_release(x5);
  em_tensor_release(x0);
  em_exec_free(e);
  em_graph_free(g);
}

/* reduce_sum takes axes and keepdims: "axiz" is refused by name (it would silently reduce every axis); the message
 * names the op, the bad name and the names it takes. */
static void test_reduce_unknown_attribute(void **state) {
  (void)state;
  const int64_t one[1] = {1};
  const int64_t s0[2] = {2, 3};
  const int64_t *shapes[1] = {s0};
  const em_dtype dtypes[1] = {EM_F32};
  const int ndims[1] = {2};
  const em_attr at[1] = {{.name = "axiz", .type = EM_ATTR_INTS, .ints = one, .n = 1}};
  ot_expect_apply_fails("reduce_sum", 1, dtypes, ndims, shapes, at, 1, 1, "no attribute 'axiz'",
                        "it takes: axes, keepdims");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_forward_float),      cmocka_unit_test(test_forward_int),
    cmocka_unit_test(test_empty),              cmocka_unit_test(test_nan_inf),
    cmocka_unit_test(test_arg_ties),           cmocka_unit_test(test_arg_reference),
    cmocka_unit_test(test_grad_sum),           cmocka_unit_test(test_grad_mean),
    cmocka_unit_test(test_grad_max),           cmocka_unit_test(test_grad_min),
    cmocka_unit_test(test_grad_prod),          cmocka_unit_test(test_grad_log_sum_exp),
    cmocka_unit_test(test_grad_log_sum),       cmocka_unit_test(test_grad_l1),
    cmocka_unit_test(test_grad_l2),            cmocka_unit_test(test_grad_sum_square),
    cmocka_unit_test(test_grad_prod_zeros),    cmocka_unit_test(test_grad_max_ties),
    cmocka_unit_test(test_grad_special_rows),
    cmocka_unit_test(test_reduce_grad_direct),
    cmocka_unit_test(test_determinism),
    cmocka_unit_test(test_errors),             cmocka_unit_test(test_dynamic_axis),
    cmocka_unit_test(test_reduce_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
