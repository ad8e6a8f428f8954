/* ops/loss.c: softmax, log_softmax and the losses against naive float64
 * formulas written here, finite-difference gradients and error messages
 * (build-time shape checks and run-time label/probability checks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

#define OK(x) assert_int_equal((x), EM_OK)

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }

typedef struct shp {
  int n;
  int64_t d[EM_MAX_DIMS];
} shp;

static int64_t numel(const shp *s) {
  int64_t n = 1;
  for (int i = 0; i < s->n; i++) n *= s->d[i];
  return n;
}

/* [outer, c, inner] around axis. */
static void split(const shp *s, int axis, int64_t *outer, int64_t *c, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
  for (int i = axis + 1; i < s->n; i++) *inner *= s->d[i];
  *c = s->d[axis];
}

static shp drop(const shp *s, int axis) {
  shp r = {0, {0}};
  for (int i = 0; i < s->n; i++)
    if (i != axis) r.d[r.n++] = s->d[i];
  return r;
}

/* log(sum(exp)) of x[o, :, i], the plain way but shifted (the reference
 * must itself survive large inputs). */
static double ref_lse(const double *x, int64_t o, int64_t c, int64_t inner, int64_t i) {
  double mx = -INFINITY, s = 0;
  for (int64_t j = 0; j < c; j++) mx = fmax(mx, x[(o * c + j) * inner + i]);
  for (int64_t j = 0; j < c; j++) s += exp(x[(o * c + j) * inner + i] - mx);
  return mx + log(s);
}

static double tol_of(em_dtype dt) { return dt == EM_F64 ? 1e-12 : 2e-6; }

/* ----------------------------------------------------------- softmax --- */

static void check_softmax(em_dtype dt, shp s, int axis_attr, int log_out, double lo, double hi) {
  int axis = axis_attr < 0 ? axis_attr + s.n : axis_attr;
  em_tensor *x = ot_rand(dt, s.n, s.d, 7 + (uint64_t)numel(&s), lo, hi);
  em_attr at = AI("axis", axis_attr);
  const char *op = log_out ? "log_softmax" : "softmax";
  em_tensor *y = ot_run1(op, &x, 1, &at, 1);
  ot_expect_shape(y, dt, s.n, s.d, op);
  double *xv = ot_values(x, NULL), *want = malloc(sizeof(double) * (size_t)(numel(&s) + 1));
  int64_t outer, c, inner;
  split(&s, axis, &outer, &c, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double lse = ref_lse(xv, o, c, inner, i);
      for (int64_t j = 0; j < c; j++) {
        int64_t k = (o * c + j) * inner + i;
        want[k] = log_out ? xv[k] - lse : exp(xv[k] - lse);
      }
    }
  char what[96];
  snprintf(what, sizeof what, "%s %s rank %d axis %d", op, em_dtype_name(dt), s.n, axis_attr);
  /* log_softmax values reach |x - lse| ~ hi - lo: tolerance relative to that. */
  ot_expect_values(y, want, numel(&s), tol_of(dt) * (log_out ? fmax(1, hi - lo) : 1), what);
  free(xv), free(want);
  em_tensor_release(x), em_tensor_release(y);
}

static void test_softmax_forward(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    for (int lg = 0; lg < 2; lg++) {
      check_softmax(dt, (shp){1, {1}}, -1, lg, -2, 2);
      check_softmax(dt, (shp){1, {7}}, 0, lg, -2, 2);
      check_softmax(dt, (shp){2, {3, 7}}, -1, lg, -3, 3);
      check_softmax(dt, (shp){2, {3, 7}}, 0, lg, -3, 3);
      check_softmax(dt, (shp){3, {2, 5, 4}}, 1, lg, -3, 3);
      check_softmax(dt, (shp){3, {2, 5, 4}}, -3, lg, -3, 3);
      check_softmax(dt, (shp){2, {130, 1000}}, -1, lg, -5, 5); /* parallel rows */
      check_softmax(dt, (shp){2, {300, 200}}, 0, lg, -5, 5);   /* parallel, strided */
      check_softmax(dt, (shp){2, {4, 9}}, 1, lg, 900, 1000);   /* large: needs the max shift */
      check_softmax(dt, (shp){2, {4, 9}}, 1, lg, -1000, -900);
      check_softmax(dt, (shp){2, {0, 9}}, 1, lg, -1, 1);       /* empty */
    }
  }
}

static void test_softmax_gradients(void **state) {
  (void)state;
  const shp shapes[] = {{2, {3, 5}}, {1, {7}}, {3, {2, 3, 4}}, {2, {1, 1}}};
  const int axes[][2] = {{-1, 0}, {0, -1}, {1, 0}, {0, 1}};
  for (int lg = 0; lg < 2; lg++)
    for (int i = 0; i < 4; i++)
      for (int a = 0; a < 2; a++) {
        em_tensor *x = ot_rand(EM_F64, shapes[i].n, shapes[i].d, 17 + (uint64_t)i, -2, 2);
        em_attr at = AI("axis", axes[i][a]);
        ot_gradcheck(lg ? "log_softmax" : "softmax", &x, 1, &at, 1, 1, 0, 1e-6);
        em_tensor_release(x);
      }
}

/* ----------------------------------------------------- cross entropy --- */

/* Dense labels: loss = -sum t * log_softmax(x). */
static void check_ce_dense(em_dtype dt, shp s, int axis_attr) {
  int axis = axis_attr < 0 ? axis_attr + s.n : axis_attr;
  em_tensor *in[2] = {ot_rand(dt, s.n, s.d, 3, -4, 4), ot_rand(dt, s.n, s.d, 4, 0, 1)};
  em_attr at = AI("axis", axis_attr);
  em_tensor *y = ot_run1("cross_entropy_with_softmax", in, 2, &at, 1);
  shp r = drop(&s, axis);
  ot_expect_shape(y, dt, r.n, r.d, "cross_entropy_with_softmax dense");
  double *x = ot_values(in[0], NULL), *t = ot_values(in[1], NULL), *want = calloc((size_t)numel(&r) + 1, 8);
  int64_t outer, c, inner;
  split(&s, axis, &outer, &c, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double lse = ref_lse(x, o, c, inner, i), l = 0;
      for (int64_t j = 0; j < c; j++) l -= t[(o * c + j) * inner + i] * (x[(o * c + j) * inner + i] - lse);
      want[o * inner + i] = l;
    }
  ot_expect_values(y, want, numel(&r), tol_of(dt) * 10, "cross_entropy_with_softmax dense");
  free(x), free(t), free(want);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(y);
}

/* Sparse labels (class indices) of dtype lt; every 5th label ignored when ignore >= 0. */
static void check_ce_sparse(em_dtype dt, em_dtype lt, shp s, int axis_attr, int64_t ignore) {
  int axis = axis_attr < 0 ? axis_attr + s.n : axis_attr;
  int64_t outer, c, inner;
  split(&s, axis, &outer, &c, &inner);
  shp r = drop(&s, axis);
  int64_t n = numel(&r);
  double *lab = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) lab[i] = (ignore >= 0 && i % 5 == 1) ? (double)ignore : (double)((i * 7 + 3) % c);
  em_tensor *in[2] = {ot_rand(dt, s.n, s.d, 5, -4, 4), ot_tensor(lt, r.n, r.d, lab)};
  em_attr at[2] = {AI("axis", axis_attr), AI("ignore_index", ignore)};
  em_tensor *y = ot_run1("cross_entropy_with_softmax", in, 2, at, ignore >= 0 ? 2 : 1);
  ot_expect_shape(y, dt, r.n, r.d, "cross_entropy_with_softmax sparse");
  double *x = ot_values(in[0], NULL), *want = calloc((size_t)n + 1, 8);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t l = (int64_t)lab[o * inner + i];
      if (ignore >= 0 && l == ignore) continue;
      want[o * inner + i] = ref_lse(x, o, c, inner, i) - x[(o * c + l) * inner + i];
    }
  ot_expect_values(y, want, n, tol_of(dt) * 10, "cross_entropy_with_softmax sparse");
  free(x), free(lab), free(want);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(y);
}

static void test_ce_forward(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    check_ce_dense(dt, (shp){2, {4, 5}}, -1);
    check_ce_dense(dt, (shp){2, {4, 5}}, 0);
    check_ce_dense(dt, (shp){3, {2, 6, 3}}, 1);
    check_ce_dense(dt, (shp){1, {9}}, -1); /* one sample: scalar loss */
    check_ce_dense(dt, (shp){2, {200, 300}}, -1);
    check_ce_sparse(dt, EM_I64, (shp){2, {4, 5}}, -1, -1);
    check_ce_sparse(dt, EM_I32, (shp){2, {4, 5}}, 0, -1);
    check_ce_sparse(dt, EM_I64, (shp){3, {2, 6, 3}}, 1, -1);
    check_ce_sparse(dt, EM_I32, (shp){2, {300, 200}}, -1, -1);
    check_ce_sparse(dt, EM_I64, (shp){2, {12, 5}}, -1, 4);   /* ignore_index a valid class */
    check_ce_sparse(dt, EM_I64, (shp){2, {12, 5}}, -1, 100); /* ignore_index outside the classes */
  }
}

/* A one-hot label against logits [0, 0, big]: the loss is ~0 without overflow. */
static void test_ce_stable(void **state) {
  (void)state;
  const int64_t s[2] = {1, 3};
  const double xv[3] = {0, 0, 1000}, tv[3] = {0, 0, 1};
  em_tensor *in[2] = {ot_tensor(EM_F32, 2, s, xv), ot_tensor(EM_F32, 2, s, tv)};
  em_tensor *y = ot_run1("cross_entropy_with_softmax", in, 2, NULL, 0);
  const double want[1] = {0};
  ot_expect_values(y, want, 1, 1e-6, "cross_entropy_with_softmax large logits");
  em_tensor_release(y);
  em_tensor_release(in[1]);
  const int64_t one[1] = {1};
  const double l0[1] = {0};
  in[1] = ot_tensor(EM_I64, 1, one, l0);
  y = ot_run1("cross_entropy_with_softmax", in, 2, NULL, 0);
  const double want0[1] = {1000};
  ot_expect_values(y, want0, 1, 1e-4, "cross_entropy_with_softmax large logits, sparse");
  em_tensor_release(y), em_tensor_release(in[0]), em_tensor_release(in[1]);
}

static void test_ce_gradients(void **state) {
  (void)state;
  /* Dense: both inputs, labels unnormalised (the exact gradient). */
  const shp dense[] = {{2, {4, 5}}, {3, {2, 3, 4}}, {1, {6}}};
  const int daxis[] = {-1, 1, 0};
  for (int i = 0; i < 3; i++) {
    em_tensor *in[2] = {ot_rand(EM_F64, dense[i].n, dense[i].d, 61, -2, 2),
                        ot_rand(EM_F64, dense[i].n, dense[i].d, 62, 0, 1)};
    em_attr at = AI("axis", daxis[i]);
    ot_gradcheck("cross_entropy_with_softmax", in, 2, &at, 1, 1, 0, 1e-6);
    em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
  /* Sparse (integer labels are not perturbed and take no gradient). */
  for (int ig = 0; ig < 2; ig++) {
    const int64_t s[2] = {6, 5}, ls[1] = {6};
    const double lab[6] = {0, 4, 2, 2, 1, 3};
    em_tensor *in[2] = {ot_rand(EM_F64, 2, s, 63, -2, 2), ot_tensor(EM_I64, 1, ls, lab)};
    em_attr at = AI("ignore_index", 2);
    ot_gradcheck("cross_entropy_with_softmax", in, 2, &at, ig, 1, 0, 1e-6);
    em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
  const int64_t s3[3] = {2, 4, 3}, ls3[2] = {2, 3};
  const double lab3[6] = {0, 3, 1, 2, 2, 0};
  em_tensor *in[2] = {ot_rand(EM_F64, 3, s3, 64, -2, 2), ot_tensor(EM_I32, 2, ls3, lab3)};
  em_attr at = AI("axis", 1);
  ot_gradcheck("cross_entropy_with_softmax", in, 2, &at, 1, 1, 0, 1e-6);
  em_tensor_release(in[0]), em_tensor_release(in[1]);
}

/* The gradient into logits for one-hot labels is (softmax - labels) * dy
 * exactly (CNTK's formula); ignored samples get zeros. */
static void test_ce_grad_values(void **state) {
  (void)state;
  const int64_t s[2] = {3, 4}, ls[1] = {3};
  const double xv[12] = {1, 2, 3, 4, -1, 0, 1, 0, 2, 2, 2, 2}, lab[3] = {3, 0, 1};
  const double dyv[3] = {1, 2, 0.5};
  em_tensor *in[3] = {ot_tensor(EM_F64, 2, s, xv), ot_tensor(EM_I64, 1, ls, lab), ot_tensor(EM_F64, 1, ls, dyv)};
  em_attr at[2] = {AI("which", 0), AI("ignore_index", 0)};
  em_tensor *g = ot_run1("_cross_entropy_grad", in, 3, at, 1);
  double want[12];
  for (int r = 0; r < 3; r++) {
    double lse = ref_lse(xv, r, 4, 1, 0);
    for (int j = 0; j < 4; j++) want[r * 4 + j] = (exp(xv[r * 4 + j] - lse) - (j == lab[r])) * dyv[r];
  }
  ot_expect_values(g, want, 12, 1e-14, "_cross_entropy_grad sparse");
  em_tensor_release(g);
  g = ot_run1("_cross_entropy_grad", in, 3, at, 2); /* ignore_index 0: row 1 */
  for (int j = 0; j < 4; j++) want[4 + j] = 0;
  ot_expect_values(g, want, 12, 1e-14, "_cross_entropy_grad ignore_index");
  em_tensor_release(g);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
}

/* f32 rows along the last axis take vector fast paths (ops/loss.c): their gradients
 * against the plain double formulas, on rows of one lane block plus a tail (37) and of
 * many blocks (1000), inputs read back as doubles. Also NaN and all -inf rows behave as
 * in the generic path (the f64 run of the same values). */
static void test_f32_row_paths(void **state) {
  (void)state;
  const int64_t cs[2] = {37, 1000};
  for (int ci = 0; ci < 2; ci++) {
    const int64_t c = cs[ci], s[2] = {5, c}, ls[1] = {5}, n = 5 * c;
    em_tensor *y = ot_rand(EM_F32, 2, s, 11 + ci, 0, 1), *dy = ot_rand(EM_F32, 2, s, 13 + ci, -1, 1);
    double *yv = ot_values(y, NULL), *dyv = ot_values(dy, NULL), *want = malloc(sizeof(double) * (size_t)n);
    em_tensor *in[3] = {y, dy, NULL};
    for (int lg = 0; lg < 2; lg++) {
      for (int r = 0; r < 5; r++) {
        double dot = 0;
        for (int64_t j = 0; j < c; j++) dot += lg ? dyv[r * c + j] : dyv[r * c + j] * yv[r * c + j];
        for (int64_t j = 0; j < c; j++) {
          int64_t k = r * c + j;
          want[k] = lg ? dyv[k] - exp(yv[k]) * dot : yv[k] * (dyv[k] - dot);
        }
      }
      em_tensor *g = ot_run1(lg ? "_log_softmax_grad" : "_softmax_grad", in, 2, NULL, 0);
      ot_expect_values(g, want, n, 2e-6 * (lg ? (double)c : 1), lg ? "_log_softmax_grad f32" : "_softmax_grad f32");
      em_tensor_release(g);
    }
    /* cross entropy's logits gradient: sparse (with an ignored sample) and dense labels */
    em_tensor *x = ot_rand(EM_F32, 2, s, 17 + ci, -4, 4), *g1 = ot_rand(EM_F32, 1, ls, 19, 0.5, 2);
    double *xv = ot_values(x, NULL), *gv = ot_values(g1, NULL);
    const double lab[5] = {0, 3, (double)(c - 1), 3, 7};
    em_tensor *tl = ot_tensor(EM_I64, 1, ls, lab), *td = ot_rand(EM_F32, 2, s, 23 + ci, 0, 1);
    double *tdv = ot_values(td, NULL);
    for (int dense = 0; dense < 2; dense++) {
      for (int r = 0; r < 5; r++) {
        double lse = ref_lse(xv, r, c, 1, 0), tsum = 0;
        for (int64_t j = 0; j < c; j++) tsum += dense ? tdv[r * c + j] : (j == (int64_t)lab[r]);
        for (int64_t j = 0; j < c; j++) {
          int64_t k = r * c + j;
          double t = dense ? tdv[k] : (j == (int64_t)lab[r]);
          want[k] = !dense && lab[r] == 3 ? 0 : (exp(xv[k] - lse) * tsum - t) * gv[r];
        }
      }
      em_tensor *cin[3] = {x, dense ? td : tl, g1};
      em_attr at[2] = {AI("which", 0), AI("ignore_index", 3)};
      em_tensor *g = ot_run1("_cross_entropy_grad", cin, 3, at, dense ? 1 : 2);
      ot_expect_values(g, want, n, 2e-6, dense ? "_cross_entropy_grad f32 dense" : "_cross_entropy_grad f32 sparse");
      em_tensor_release(g);
    }
    free(yv), free(dyv), free(want), free(xv), free(gv), free(tdv);
    em_tensor_release(y), em_tensor_release(dy), em_tensor_release(x), em_tensor_release(g1);
    em_tensor_release(tl), em_tensor_release(td);
  }
  /* special rows: a NaN, all -inf, +inf with finite values; f32 (fast) and f64 (generic) agree */
  const int64_t s[2] = {3, 20};
  double v[60];
  for (int i = 0; i < 60; i++) v[i] = (i % 7) - 3;
  v[5] = NAN;
  for (int i = 20; i < 40; i++) v[i] = -INFINITY;
  v[47] = INFINITY;
  em_tensor *xf = ot_tensor(EM_F32, 2, s, v), *xd = ot_tensor(EM_F64, 2, s, v);
  for (int lg = 0; lg < 2; lg++) {
    const char *op = lg ? "log_softmax" : "softmax";
    em_tensor *yf = ot_run1(op, &xf, 1, NULL, 0), *yd = ot_run1(op, &xd, 1, NULL, 0);
    double *want = ot_values(yd, NULL);
    ot_expect_values(yf, want, 60, 1e-6, lg ? "log_softmax f32 special rows" : "softmax f32 special rows");
    free(want);
    em_tensor_release(yf), em_tensor_release(yd);
  }
  em_tensor_release(xf), em_tensor_release(xd);
}

/* ------------------------------------------- review: f32 fast paths --- */

/* Differential: f32 rows on the last axis (fast paths) against the f64 run of the same
 * (float-exact) values (generic path), over lane-block boundaries and special rows: NaN
 * at the first / middle / last element, +inf, -inf, all -inf, +inf with -inf, two +inf,
 * NaN with +inf, one 1e30 or FLT_MAX among -1e30 or -FLT_MAX; sparse labels at 0 and c-1 and ignored (ignore_index
 * a valid class), dense labels (a zero next to a -inf logit); g = 1, 0, -2.5, 1e-30. */
static void expect_f32_matches(const char *what, const em_tensor *tf, const em_tensor *td, double rtol) {
  int64_t n, m;
  double *gf = ot_values(tf, &n), *gd = ot_values(td, &m);
  assert_int_equal(n, m);
  for (int64_t i = 0; i < n; i++) {
    double w = (double)(float)gd[i], g = gf[i];
    if ((isnan(w) && isnan(g)) || (isinf(w) && g == w)) continue;
    if (!(fabs(g - w) <= rtol * fabs(w) + 4 * 1.401298464324817e-45))
      fail_msg("%s: element %lld is %.9g (f32), %.17g (f64)", what, (long long)i, g, gd[i]);
  }
  free(gf), free(gd);
}

static void test_f32_fast_matches_generic(void **state) {
  (void)state;
  const int64_t cs[] = {1, 2, 15, 16, 17, 31, 32, 33, 100};
  const double gs[] = {1, 0, -2.5, 1e-30};
  for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
    for (int p = 0; p < 12; p++) {
      const int64_t c = cs[ci], R = 2, s[2] = {R, c}, ls[1] = {R}, mid = c / 2, last = c - 1;
      double *v = malloc(sizeof(double) * (size_t)(R * c)), *t = malloc(sizeof(double) * (size_t)(R * c));
      uint64_t st = 99 + (uint64_t)p;
      for (int64_t i = 0; i < R * c; i++) v[i] = ot_uniform(&st, -5, 5), t[i] = ot_uniform(&st, 0, 1);
      for (int64_t r = 0; r < R; r++) {
        double *x = v + r * c;
        if (p == 1) x[0] = NAN;
        if (p == 2) x[mid] = NAN;
        if (p == 3) x[last] = NAN;
        if (p == 4) x[mid] = INFINITY;
        if (p == 5) x[mid] = -INFINITY, t[r * c + mid] = 0;
        for (int64_t j = 0; j < c; j++) {
          if (p == 6) x[j] = -INFINITY;
          if (p == 9) x[j] = j == mid ? 1e30 : -1e30;
          if (p == 10) x[j] = j == mid ? 3.4028234663852886e38 : -3.4028234663852886e38;
        }
        if (p == 7) x[0] = -INFINITY, x[last] = INFINITY;
        if (p == 8) x[0] = INFINITY, x[last] = INFINITY;
        if (p == 11) x[0] = NAN, x[last] = INFINITY;
      }
      for (int64_t i = 0; i < R * c; i++) v[i] = (double)(float)v[i], t[i] = (double)(float)t[i];
      em_tensor *xf = ot_tensor(EM_F32, 2, s, v), *xd = ot_tensor(EM_F64, 2, s, v);
      em_tensor *tf = ot_tensor(EM_F32, 2, s, t), *td = ot_tensor(EM_F64, 2, s, t);
      char w[96];
      for (int lg = 0; lg < 2; lg++) {
        const char *op = lg ? "log_softmax" : "softmax", *gop = lg ? "_log_softmax_grad" : "_softmax_grad";
        em_tensor *i2f[2] = {xf, tf}, *i2d[2] = {xd, td};
        em_tensor *a = ot_run1(op, &xf, 1, NULL, 0), *b = ot_run1(op, &xd, 1, NULL, 0);
        snprintf(w, sizeof w, "%s c=%lld pattern %d", op, (long long)c, p);
        expect_f32_matches(w, a, b, 2e-6);
        em_tensor_release(a), em_tensor_release(b);
        a = ot_run1(gop, i2f, 2, NULL, 0), b = ot_run1(gop, i2d, 2, NULL, 0);
        snprintf(w, sizeof w, "%s c=%lld pattern %d", gop, (long long)c, p);
        expect_f32_matches(w, a, b, 1e-5);
        em_tensor_release(a), em_tensor_release(b);
      }
      for (int lab = 0; lab < 4; lab++) { /* sparse: label 0, c-1, ignored (a valid class); 3: dense */
        const double lv[2] = {lab == 1 ? (double)last : 0, lab == 2 ? 0 : (double)last};
        em_tensor *l = ot_tensor(EM_I64, 1, ls, lv);
        em_attr at[2] = {AI("which", 0), AI("ignore_index", 0)};
        int n_at = lab == 2 ? 2 : 1;
        em_tensor *i2f[2] = {xf, lab == 3 ? tf : l}, *i2d[2] = {xd, lab == 3 ? td : l};
        em_tensor *a = ot_run1("cross_entropy_with_softmax", i2f, 2, at + 1, n_at - 1);
        em_tensor *b = ot_run1("cross_entropy_with_softmax", i2d, 2, at + 1, n_at - 1);
        snprintf(w, sizeof w, "cross_entropy_with_softmax c=%lld pattern %d labels %d", (long long)c, p, lab);
        expect_f32_matches(w, a, b, 2e-6);
        em_tensor_release(a), em_tensor_release(b);
        for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++)
          for (int which = 0; which < (lab == 3 ? 2 : 1); which++) {
            const double gv[2] = {gs[gi], -gs[gi]};
            em_tensor *gf = ot_tensor(EM_F32, 1, ls, gv), *gd = ot_tensor(EM_F64, 1, ls, gv);
            em_tensor *i3f[3] = {xf, i2f[1], gf}, *i3d[3] = {xd, i2d[1], gd};
            at[0] = AI("which", which);
            a = ot_run1("_cross_entropy_grad", i3f, 3, at, n_at), b = ot_run1("_cross_entropy_grad", i3d, 3, at, n_at);
            snprintf(w, sizeof w, "_cross_entropy_grad c=%lld pattern %d labels %d which %d g %g", (long long)c, p, lab,
                     which, gs[gi]);
            expect_f32_matches(w, a, b, 1e-5);
            em_tensor_release(a), em_tensor_release(b), em_tensor_release(gf), em_tensor_release(gd);
          }
        em_tensor_release(l);
      }
      em_tensor_release(xf), em_tensor_release(xd), em_tensor_release(tf), em_tensor_release(td);
      free(v), free(t);
    }
  /* no classes (c = 0): empty rows, loss 0 with dense labels */
  const int64_t s0[2] = {3, 0}, ls0[1] = {3};
  const double g0[3] = {1, 2, 3}, zero[3] = {0, 0, 0};
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    em_tensor *x = ot_tensor(dt, 2, s0, NULL), *g = ot_tensor(dt, 1, ls0, g0), *in[3] = {x, x, g};
    em_tensor *y = ot_run1("softmax", in, 1, NULL, 0);
    ot_expect_shape(y, dt, 2, s0, "softmax c = 0"), em_tensor_release(y);
    y = ot_run1("_log_softmax_grad", in, 2, NULL, 0), em_tensor_release(y);
    y = ot_run1("cross_entropy_with_softmax", in, 2, NULL, 0);
    ot_expect_values(y, zero, 3, 0, "cross_entropy_with_softmax c = 0"), em_tensor_release(y);
    em_attr at = AI("which", 0);
    y = ot_run1("_cross_entropy_grad", in, 3, &at, 1), em_tensor_release(y);
    em_tensor_release(x), em_tensor_release(g);
  }
}

/* t holds n values within rtol * |want| of want (no absolute slack: tiny values count). */
static void expect_rel(const em_tensor *t, const double *want, int64_t n, double rtol, const char *what) {
  int64_t m;
  double *got = ot_values(t, &m);
  assert_int_equal(m, n);
  ot_expect_close(got, want, n, 0, rtol, what);
  free(got);
}

/* Tied logits of large magnitude (both paths): computed as lse = max + log(sum), log(sum)
 * rounds away once |max| >~ 1e16, which gave a loss lse - x_l of 0 instead of log 2, a
 * generic gradient exp(x - lse) of 1 for every tied class (softmax summing to 2), and a
 * labels' gradient (lse - x) g of 0. Plain float64 math: loss log 2, softmax 1/2. */
static void test_ce_huge_tied_logits(void **state) {
  (void)state;
  const int64_t s[2] = {1, 3}, ls[1] = {1};
  const double xv[3] = {1e20, 1e20, 0}, lab[1] = {0}, onehot[3] = {1, 0, 0}, g1[1] = {1};
  const double want_loss[1] = {log(2.0)}, want_dx[3] = {-0.5, 0.5, 0}, want_dt[3] = {log(2.0), log(2.0), 1e20 + log(2.0)};
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    double xr[3];
    for (int j = 0; j < 3; j++) xr[j] = k ? xv[j] : (double)(float)xv[j];
    em_tensor *x = ot_tensor(dt, 2, s, xr), *l = ot_tensor(EM_I64, 1, ls, lab), *t = ot_tensor(dt, 2, s, onehot);
    em_tensor *g = ot_tensor(dt, 1, ls, g1);
    em_tensor *in[3] = {x, l, g}, *ind[3] = {x, t, g};
    em_tensor *y = ot_run1("cross_entropy_with_softmax", in, 2, NULL, 0);
    ot_expect_values(y, want_loss, 1, 1e-6, k ? "ce loss, tied 1e20 logits, f64" : "ce loss, tied 1e20 logits, f32");
    em_tensor_release(y);
    em_attr at = AI("which", 0);
    y = ot_run1("_cross_entropy_grad", in, 3, &at, 1);
    ot_expect_values(y, want_dx, 3, 1e-6, k ? "ce d/dlogits, tied 1e20, f64" : "ce d/dlogits, tied 1e20, f32");
    em_tensor_release(y);
    at = AI("which", 1);
    y = ot_run1("_cross_entropy_grad", ind, 3, &at, 1);
    double wt[3] = {want_dt[0], want_dt[1], (k ? 1e20 : (double)(float)1e20) + log(2.0)};
    ot_expect_values(y, wt, 3, 1e-6, k ? "ce d/dlabels, tied 1e20, f64" : "ce d/dlabels, tied 1e20, f32");
    em_tensor_release(y);
    em_tensor_release(x), em_tensor_release(l), em_tensor_release(t), em_tensor_release(g);
  }
}

/* The f32 fast path's em_expf(x - max) is a float, subnormal below -87.3 and 0 below
 * -104; multiplied by a large g (cross entropy: scale = g / sum; log_softmax's
 * gradient: sum(dy)) the product would be a normal float carrying the subnormal's few
 * bits (or 0), so those elements are redone in double. Row x = [0, -100, -110], label 0,
 * g = 1e30 (f32 1.0000000150e30): dx[1] = 3.7200760e-14, dx[2] = 1.6889119e-18 (double
 * formula); without the redo, 3.7835058e-14 (+1.7%) and 0. */
static void test_f32_grad_far_below_max_large_g(void **state) {
  (void)state;
  const int64_t s[2] = {1, 3}, ls[1] = {1};
  const double xv[3] = {0, -100, -110}, lab[1] = {0}, onehot[3] = {1, 0, 0}, gv[1] = {1e30};
  const double g = (double)(float)1e30;
  double sum = 0, want[3];
  for (int j = 0; j < 3; j++) sum += exp(xv[j]);
  for (int j = 0; j < 3; j++) want[j] = (exp(xv[j]) / sum - (j == 0)) * g;
  em_tensor *x = ot_tensor(EM_F32, 2, s, xv), *l = ot_tensor(EM_I64, 1, ls, lab), *t = ot_tensor(EM_F32, 2, s, onehot);
  em_tensor *gt = ot_tensor(EM_F32, 1, ls, gv);
  em_attr at = AI("which", 0);
  for (int dense = 0; dense < 2; dense++) {
    em_tensor *in[3] = {x, dense ? t : l, gt};
    em_tensor *y = ot_run1("_cross_entropy_grad", in, 3, &at, 1);
    double *got = ot_values(y, NULL); /* elements 1, 2 (the label's: test_ce_grad_confident_label) */
    ot_expect_close(got + 1, want + 1, 2, 0, 1e-6, dense ? "ce grad f32 dense, x - max = -100/-110, g = 1e30"
                                                         : "ce grad f32 sparse, x - max = -100/-110, g = 1e30");
    free(got), em_tensor_release(y);
  }
  /* log_softmax's gradient with dy = NLL's upstream gradient (-g at the label) */
  const double yv[3] = {0, -100, -110}, dyv[3] = {-1e30, 0, 0};
  em_tensor *y0 = ot_tensor(EM_F32, 2, s, yv), *dy = ot_tensor(EM_F32, 2, s, dyv);
  em_tensor *in2[2] = {y0, dy};
  em_tensor *dx = ot_run1("_log_softmax_grad", in2, 2, NULL, 0);
  double w2[3];
  for (int j = 0; j < 3; j++) w2[j] = (j == 0 ? -g : 0) + exp(yv[j]) * g;
  expect_rel(dx, w2, 3, 1e-6, "_log_softmax_grad f32, y = -100/-110, sum(dy) = -1e30");
  em_tensor_release(dx), em_tensor_release(y0), em_tensor_release(dy);
  em_tensor_release(x), em_tensor_release(l), em_tensor_release(t), em_tensor_release(gt);
}

/* Accuracy (both paths): the label's gradient p_l - 1 of a confident row cancels when
 * computed as such. x = [0, -30], label 0: -e^-30 / (1 + e^-30) = -9.3576e-14, where
 * p - 1 gave -9.348e-14 (1e-3 relative), and 0 at a margin of 40 (want -4.25e-18). */
static void test_ce_grad_confident_label(void **state) {
  (void)state;
  const int64_t s[2] = {2, 2}, ls[1] = {2};
  const double xv[4] = {0, -30, 0, -40}, lab[2] = {0, 0}, gv[2] = {1, 1};
  double want[4];
  for (int r = 0; r < 2; r++) {
    double e = exp(xv[2 * r + 1]);
    want[2 * r] = -e / (1 + e), want[2 * r + 1] = e / (1 + e);
  }
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    em_tensor *in[3] = {ot_tensor(dt, 2, s, xv), ot_tensor(EM_I64, 1, ls, lab), ot_tensor(dt, 1, ls, gv)};
    em_attr at = AI("which", 0);
    em_tensor *y = ot_run1("_cross_entropy_grad", in, 3, &at, 1);
    expect_rel(y, want, 4, 1e-6, k ? "ce grad confident row f64" : "ce grad confident row f32");
    em_tensor_release(y);
    for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  }
}

/* The gradients too give the same bits on 1 and 3 threads. */
static void test_grad_thread_determinism(void **state) {
  (void)state;
  const int64_t s[2] = {97, 1001}, ls[1] = {97};
  double lab[97];
  for (int i = 0; i < 97; i++) lab[i] = (i * 37) % 1001;
  em_tensor *x = ot_rand(EM_F32, 2, s, 5, -3, 3), *t = ot_rand(EM_F32, 2, s, 6, 0, 1), *dy = ot_rand(EM_F32, 2, s, 7, -1, 1);
  em_tensor *l = ot_tensor(EM_I64, 1, ls, lab), *g = ot_rand(EM_F32, 1, ls, 8, -2, 2);
  for (int o = 0; o < 5; o++) {
    em_tensor *in[3] = {x, o == 2 ? l : o > 2 ? t : dy, g};
    if (o < 2) in[1] = dy;
    em_attr at = AI("which", o == 4);
    const char *op = o == 0 ? "_softmax_grad" : o == 1 ? "_log_softmax_grad" : "_cross_entropy_grad";
    em_tensor *y[2];
    for (int k = 0; k < 2; k++) {
      OK(em_set_num_threads(k ? 3 : 1));
      y[k] = ot_run1(op, in, o < 2 ? 2 : 3, &at, o < 2 ? 0 : 1);
    }
    OK(em_set_num_threads(0));
    if (memcmp(em_tensor_data(y[0]), em_tensor_data(y[1]), (size_t)em_tensor_numel(y[0]) * 4))
      fail_msg("%s (case %d): 1 and 3 threads differ", op, o);
    em_tensor_release(y[0]), em_tensor_release(y[1]);
  }
  em_tensor_release(x), em_tensor_release(t), em_tensor_release(dy), em_tensor_release(l), em_tensor_release(g);
}

/* ---------------------------------------------- binary cross entropy --- */

static void test_bce_forward(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    const shp shapes[] = {{2, {3, 4}}, {1, {1}}, {0, {0}}, {2, {200, 300}}};
    for (int i = 0; i < 4; i++) {
      const shp *s = &shapes[i];
      em_tensor *in[2] = {ot_rand(dt, s->n, s->d, 71, 0.01, 0.99), ot_rand(dt, s->n, s->d, 72, 0, 1)};
      em_tensor *y = ot_run1("binary_cross_entropy", in, 2, NULL, 0);
      ot_expect_shape(y, dt, s->n, s->d, "binary_cross_entropy");
      int64_t n;
      double *p = ot_values(in[0], &n), *t = ot_values(in[1], NULL), *want = malloc(sizeof(double) * (size_t)n);
      for (int64_t j = 0; j < n; j++) want[j] = -(t[j] * log(p[j]) + (1 - t[j]) * log(1 - p[j]));
      ot_expect_values(y, want, n, tol_of(dt) * 10, "binary_cross_entropy");
      free(p), free(t), free(want);
      em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(y);
    }
    /* p = 0 and 1: each log clamped at -100 (as PyTorch). */
    const int64_t s4[1] = {4};
    const double pv[4] = {0, 1, 0, 1}, tv[4] = {1, 0, 0, 1}, want[4] = {100, 100, 0, 0};
    em_tensor *in[2] = {ot_tensor(dt, 1, s4, pv), ot_tensor(dt, 1, s4, tv)};
    em_tensor *y = ot_run1("binary_cross_entropy", in, 2, NULL, 0);
    ot_expect_values(y, want, 4, 0, "binary_cross_entropy clamped");
    em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(y);
  }
}

static void test_bce_gradients(void **state) {
  (void)state;
  const shp shapes[] = {{2, {3, 4}}, {1, {5}}, {0, {0}}};
  for (int i = 0; i < 3; i++) {
    em_tensor *in[2] = {ot_rand(EM_F64, shapes[i].n, shapes[i].d, 81, 0.1, 0.9),
                        ot_rand(EM_F64, shapes[i].n, shapes[i].d, 82, 0, 1)};
    ot_gradcheck("binary_cross_entropy", in, 2, NULL, 0, 1, 0, 1e-6);
    em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
}

/* ---------------------------------------------------- squared error --- */

static void check_sqerr(em_dtype dt, shp s) {
  em_tensor *in[2] = {ot_rand(dt, s.n, s.d, 91, -2, 2), ot_rand(dt, s.n, s.d, 92, -2, 2)};
  em_tensor *y = ot_run1("squared_error", in, 2, NULL, 0);
  shp r = s.n >= 2 ? (shp){1, {s.d[0]}} : (shp){0, {0}};
  ot_expect_shape(y, dt, r.n, r.d, "squared_error");
  int64_t n;
  double *x = ot_values(in[0], &n), *z = ot_values(in[1], NULL), *want = calloc((size_t)numel(&r) + 1, 8);
  int64_t per = numel(&r) ? n / numel(&r) : 0;
  for (int64_t j = 0; j < n; j++) want[j / (per ? per : 1)] += (x[j] - z[j]) * (x[j] - z[j]);
  ot_expect_values(y, want, numel(&r), tol_of(dt) * 10, "squared_error");
  free(x), free(z), free(want);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(y);
}

static void test_sqerr_forward(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    check_sqerr(dt, (shp){2, {4, 3}});
    check_sqerr(dt, (shp){3, {5, 2, 3}});
    check_sqerr(dt, (shp){2, {7, 1}});
    check_sqerr(dt, (shp){1, {9}}); /* 1-D: a scalar */
    check_sqerr(dt, (shp){0, {0}}); /* 0-D: a scalar */
    check_sqerr(dt, (shp){2, {3000, 50}});
    check_sqerr(dt, (shp){2, {3, 0}});
  }
}

static void test_sqerr_gradients(void **state) {
  (void)state;
  const shp shapes[] = {{2, {4, 3}}, {1, {5}}, {3, {2, 3, 2}}, {0, {0}}};
  for (int i = 0; i < 4; i++) {
    em_tensor *in[2] = {ot_rand(EM_F64, shapes[i].n, shapes[i].d, 95, -2, 2),
                        ot_rand(EM_F64, shapes[i].n, shapes[i].d, 96, -2, 2)};
    ot_gradcheck("squared_error", in, 2, NULL, 0, 1, 0, 1e-6);
    em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
}

/* ---------------------------------------------- classification error --- */

/* Reference: the label's class is in the top n when fewer than n classes
 * beat it (larger, or equal with a lower index). */
static double ref_miss(const double *x, int64_t c, int64_t l, int64_t n) {
  int64_t rank = 0;
  for (int64_t j = 0; j < c; j++) rank += x[j] > x[l] || (x[j] == x[l] && j < l);
  return rank < n ? 0.0 : 1.0;
}

static void test_classification_error(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    const int64_t s[2] = {6, 4}, ls[1] = {6};
    /* Rows with ties (row 3: all equal; row 4: a tie for first). */
    const double xv[24] = {0.1, 0.7, 0.2, 0.0, 0.5, 0.1, 0.3, 0.1, 1, 2, 3, 4,
                           1, 1, 1, 1,         3, 1, 3, 0,         -1, -2, -3, -4};
    const double lab[6] = {1, 2, 0, 2, 2, 3};
    for (int topn = 1; topn <= 4; topn++) {
      double want[6], onehot[24] = {0};
      for (int r = 0; r < 6; r++) {
        want[r] = ref_miss(xv + r * 4, 4, (int64_t)lab[r], topn);
        onehot[r * 4 + (int)lab[r]] = 1;
      }
      em_attr at = AI("topN", topn);
      for (int sparse = 0; sparse < 2; sparse++) {
        em_tensor *in[2] = {ot_tensor(dt, 2, s, xv), sparse ? ot_tensor(EM_I64, 1, ls, lab) : ot_tensor(dt, 2, s, onehot)};
        em_tensor *y = ot_run1("classification_error", in, 2, &at, 1);
        ot_expect_shape(y, dt, 1, ls, "classification_error");
        ot_expect_values(y, want, 6, 0, sparse ? "classification_error sparse" : "classification_error dense");
        em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(y);
      }
    }
    /* Hand-checked values for topN = 1: argmax 1, 0, 3, 0 (tie: first), 0 (tie), 0. */
    const double want1[6] = {0, 1, 1, 1, 1, 1};
    em_tensor *in[2] = {ot_tensor(dt, 2, s, xv), ot_tensor(EM_I32, 1, ls, lab)};
    em_tensor *y = ot_run1("classification_error", in, 2, NULL, 0);
    ot_expect_values(y, want1, 6, 0, "classification_error top-1 by hand");
    em_tensor_release(y);
    /* Class axis 0: the same data transposed. */
    double xt[24];
    for (int r = 0; r < 6; r++)
      for (int j = 0; j < 4; j++) xt[j * 6 + r] = xv[r * 4 + j];
    const int64_t st[2] = {4, 6};
    em_tensor *in0 = ot_tensor(dt, 2, st, xt);
    em_tensor_release(in[0]);
    in[0] = in0;
    em_attr ax = AI("axis", 0);
    y = ot_run1("classification_error", in, 2, &ax, 1);
    ot_expect_values(y, want1, 6, 0, "classification_error axis 0");
    em_tensor_release(y), em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
}

/* No gradient flows through classification_error: em_gradients gives zeros. */
static void test_classification_error_no_grad(void **state) {
  (void)state;
  em_graph *g;
  OK(em_graph_create(&g));
  const int64_t s[2] = {2, 3}, ls[1] = {2};
  em_var x, l, y, c, ys, grad;
  OK(em_input(g, "x", EM_F64, 2, s, &x));
  OK(em_input(g, "l", EM_I64, 1, ls, &l));
  em_var in[2] = {x, l};
  OK(em_apply(g, "classification_error", in, 2, NULL, 0, &y, 1));
  /* A scalar whose gradient into y is not zero: squared_error(y, 3). */
  const double threes[2] = {3, 3};
  em_tensor *tc = ot_tensor(EM_F64, 1, ls, threes);
  OK(em_constant(g, tc, &c));
  em_tensor_release(tc);
  em_var pair[2] = {y, c};
  OK(em_apply(g, "squared_error", pair, 2, NULL, 0, &ys, 1));
  OK(em_gradients(g, ys, &x, 1, &grad));
  em_exec *e;
  OK(em_exec_create(g, &grad, 1, em_cpu(), &e));
  const double xv[6] = {1, 2, 3, 3, 2, 1}, lv[2] = {2, 0};
  em_tensor *tx = ot_tensor(EM_F64, 2, s, xv), *tl = ot_tensor(EM_I64, 1, ls, lv), *out = NULL;
  em_feed f[2] = {{x, tx}, {l, tl}};
  OK(em_exec_run(e, f, 2, &out));
  const double zeros[6] = {0};
  ot_expect_values(out, zeros, 6, 0, "classification_error gradient");
  em_tensor_release(out), em_tensor_release(tx), em_tensor_release(tl);
  em_exec_free(e);
  em_graph_free(g);
}

/* A dynamic batch axis: shapes propagate as -1 and the ops run on any batch. */
static void test_dynamic_batch(void **state) {
  (void)state;
  em_graph *g;
  OK(em_graph_create(&g));
  const int64_t sx[2] = {-1, 5}, sl[1] = {-1};
  em_var x, l, t, ce, sm, se;
  OK(em_input(g, "x", EM_F64, 2, sx, &x));
  OK(em_input(g, "l", EM_I64, 1, sl, &l));
  OK(em_input(g, "t", EM_F64, 2, sx, &t));
  em_var xl[2] = {x, l}, xt[2] = {x, t};
  OK(em_apply(g, "cross_entropy_with_softmax", xl, 2, NULL, 0, &ce, 1));
  OK(em_apply(g, "softmax", &x, 1, NULL, 0, &sm, 1));
  OK(em_apply(g, "squared_error", xt, 2, NULL, 0, &se, 1));
  int nd;
  int64_t d[EM_MAX_DIMS];
  OK(em_var_info(g, ce, NULL, &nd, d));
  assert_true(nd == 1 && d[0] == -1);
  OK(em_var_info(g, se, NULL, &nd, d));
  assert_true(nd == 1 && d[0] == -1);
  em_exec *e;
  em_var outs[3] = {ce, sm, se};
  OK(em_exec_create(g, outs, 3, em_cpu(), &e));
  const int64_t rx[2] = {3, 5}, rl[1] = {3};
  const double lab[3] = {4, 0, 2};
  em_tensor *tx = ot_rand(EM_F64, 2, rx, 9, -1, 1), *tl = ot_tensor(EM_I64, 1, rl, lab), *tt = ot_rand(EM_F64, 2, rx, 10, -1, 1);
  em_feed f[3] = {{x, tx}, {l, tl}, {t, tt}};
  em_tensor *res[3] = {NULL, NULL, NULL};
  OK(em_exec_run(e, f, 3, res));
  ot_expect_shape(res[0], EM_F64, 1, rl, "dynamic cross_entropy_with_softmax");
  ot_expect_shape(res[1], EM_F64, 2, rx, "dynamic softmax");
  ot_expect_shape(res[2], EM_F64, 1, rl, "dynamic squared_error");
  double *xv = ot_values(tx, NULL), want[3];
  for (int r = 0; r < 3; r++) want[r] = ref_lse(xv, r, 5, 1, 0) - xv[r * 5 + (int)lab[r]];
  ot_expect_values(res[0], want, 3, 1e-12, "dynamic cross_entropy_with_softmax values");
  free(xv);
  for (int i = 0; i < 3; i++) em_tensor_release(res[i]);
  em_tensor_release(tx), em_tensor_release(tl), em_tensor_release(tt);
  em_exec_free(e);
  em_graph_free(g);
}

/* -------------------------------------------------------- determinism --- */

/* Parallel loops split rows only: 1 and 4 threads give the same bits. */
static void test_thread_determinism(void **state) {
  (void)state;
  const int64_t s[2] = {257, 1000}, ls[1] = {257};
  double lab[257];
  for (int i = 0; i < 257; i++) lab[i] = (i * 37) % 1000;
  em_tensor *in[2] = {ot_rand(EM_F32, 2, s, 5, -3, 3), ot_tensor(EM_I64, 1, ls, lab)};
  const char *ops[3] = {"softmax", "log_softmax", "cross_entropy_with_softmax"};
  for (int o = 0; o < 3; o++) {
    em_tensor *y[2];
    for (int k = 0; k < 2; k++) {
      OK(em_set_num_threads(k ? 4 : 1));
      y[k] = ot_run1(ops[o], in, o == 2 ? 2 : 1, NULL, 0);
    }
    OK(em_set_num_threads(0));
    if (memcmp(em_tensor_data(y[0]), em_tensor_data(y[1]), (size_t)em_tensor_numel(y[0]) * 4))
      fail_msg("%s: 1 and 4 threads differ", ops[o]);
    em_tensor_release(y[0]), em_tensor_release(y[1]);
  }
  em_tensor_release(in[0]), em_tensor_release(in[1]);
}

/* ------------------------------------------------------------- errors --- */

static void fails(const char *op, int n, const em_dtype *dt, const shp *s, const em_attr *at, int n_at, const char *n1,
                  const char *n2) {
  int nd[4];
  const int64_t *sh[4];
  for (int i = 0; i < n; i++) nd[i] = s[i].n, sh[i] = s[i].d;
  ot_expect_apply_fails(op, n, dt, nd, sh, at, n_at, 1, n1, n2);
}

static void test_build_errors(void **state) {
  (void)state;
  const em_dtype ff[2] = {EM_F32, EM_F32}, fd[2] = {EM_F32, EM_F64}, fi[2] = {EM_F32, EM_I64}, ii[2] = {EM_I32, EM_I64};
  const em_dtype i1[1] = {EM_I32}, h1[1] = {EM_F16};
  const shp s45[2] = {{2, {4, 5}}, {2, {4, 6}}};
  /* Labels shape mismatches. */
  fails("cross_entropy_with_softmax", 2, ff, s45, NULL, 0, "dense labels", "f32[4,6]");
  const shp sp[2] = {{2, {4, 5}}, {1, {5}}};
  fails("cross_entropy_with_softmax", 2, fi, sp, NULL, 0, "sparse labels", "i64[5]");
  const shp sp2[2] = {{2, {4, 5}}, {2, {4, 5}}};
  fails("cross_entropy_with_softmax", 2, fi, sp2, NULL, 0, "sparse labels", "axis 1");
  fails("classification_error", 2, ff, s45, NULL, 0, "dense labels", "f32[4,6]");
  /* Integer logits; labels of another float dtype. */
  fails("cross_entropy_with_softmax", 2, ii, sp, NULL, 0, "i32", "f32 or f64");
  fails("cross_entropy_with_softmax", 2, fd, sp2, NULL, 0, "labels of dtype f64", NULL);
  /* Axis and attributes. */
  em_attr ax = AI("axis", 2), ign = AI("ignore_index", 0), top0 = AI("topN", 0);
  fails("cross_entropy_with_softmax", 2, ff, sp2, &ax, 1, "axis 2", "out of range");
  fails("cross_entropy_with_softmax", 2, ff, sp2, &ign, 1, "ignore_index", "sparse");
  fails("classification_error", 2, fi, (shp[]){{2, {4, 5}}, {1, {4}}}, &top0, 1, "topN", NULL);
  fails("softmax", 1, i1, s45, NULL, 0, "i32", NULL);
  fails("log_softmax", 1, h1, s45, NULL, 0, "f16", NULL);
  fails("softmax", 1, ff, s45, &ax, 1, "axis", NULL);
  fails("softmax", 1, ff, (shp[]){{0, {0}}}, NULL, 0, "rank", NULL);
  /* Pairwise losses: shapes and dtypes must agree. */
  fails("binary_cross_entropy", 2, ff, s45, NULL, 0, "shape", "f32[4,6]");
  fails("binary_cross_entropy", 2, fd, sp2, NULL, 0, "f64", NULL);
  fails("squared_error", 2, ff, s45, NULL, 0, "shape", "f32[4,6]");
  fails("squared_error", 2, ii, sp2, NULL, 0, "i32", NULL);
}

/* Sparse labels are checked when the op runs: the message names the label and its position. */
static void expect_run_error(const char *op, em_tensor *const *in, int n_in, const em_attr *at, int n_at,
                             const char *n1, const char *n2) {
  em_tensor *out = NULL;
  em_status s = ot_run(op, in, n_in, at, n_at, &out, 1);
  em_tensor_release(out);
  const char *msg = em_last_error();
  if (s == EM_OK) fail_msg("%s: expected a run-time error (%s)", op, n1);
  if (!msg || !strstr(msg, op) || !strstr(msg, n1) || (n2 && !strstr(msg, n2)))
    fail_msg("%s: message lacks \"%s\"/\"%s\": %s", op, n1, n2 ? n2 : "", msg ? msg : "(none)");
}

static void test_run_errors(void **state) {
  (void)state;
  const int64_t s[2] = {4, 5}, ls[1] = {4}, s3[3] = {2, 3, 5}, ls3[2] = {2, 3};
  const double bad[4] = {0, 4, 7, 1}, neg[4] = {0, -1, 2, 3}, bad3[6] = {0, 1, 2, 3, 4, 5};
  em_tensor *x = ot_rand(EM_F32, 2, s, 1, -1, 1), *l = ot_tensor(EM_I64, 1, ls, bad);
  em_tensor *in[2] = {x, l};
  expect_run_error("cross_entropy_with_softmax", in, 2, NULL, 0, "label 7", "position [2]");
  expect_run_error("classification_error", in, 2, NULL, 0, "label 7", "[0, 5)");
  em_tensor_release(l);
  in[1] = l = ot_tensor(EM_I32, 1, ls, neg);
  expect_run_error("cross_entropy_with_softmax", in, 2, NULL, 0, "label -1", "position [1]");
  em_attr ign = AI("ignore_index", -1); /* ignoring -1 makes the same labels valid */
  em_tensor *y = ot_run1("cross_entropy_with_softmax", in, 2, &ign, 1);
  em_tensor_release(y), em_tensor_release(l), em_tensor_release(x);
  /* Multi-axis positions. */
  x = ot_rand(EM_F64, 3, s3, 2, -1, 1);
  l = ot_tensor(EM_I64, 2, ls3, bad3);
  em_attr ax = AI("axis", 2);
  in[0] = x, in[1] = l;
  expect_run_error("cross_entropy_with_softmax", in, 2, &ax, 1, "label 5", "position [1,2]");
  em_tensor_release(x), em_tensor_release(l);
  /* Probabilities outside [0, 1]. */
  const double pv[4] = {0.5, 0.2, 1.5, 0.1};
  em_tensor *p = ot_tensor(EM_F32, 1, ls, pv), *t = ot_rand(EM_F32, 1, ls, 3, 0, 1);
  em_tensor *pt[2] = {p, t};
  expect_run_error("binary_cross_entropy", pt, 2, NULL, 0, "p = 1.5", "position [2]");
  em_tensor_release(p), em_tensor_release(t);
}

/* softmax takes only axis: "axsi" is refused by name (it would silently use the last axis); the message names the
 * op, the bad name and the names it takes. */
static void test_loss_unknown_attribute(void **state) {
  (void)state;
  const int64_t s0[2] = {2, 3};
  const int64_t *shapes[1] = {s0};
  const em_dtype dtypes[1] = {EM_F32};
  const int ndims[1] = {2};
  const em_attr at[1] = {{.name = "axsi", .type = EM_ATTR_INT, .i = 0}};
  ot_expect_apply_fails("softmax", 1, dtypes, ndims, shapes, at, 1, 1, "no attribute 'axsi'",
                        "it takes: axis");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_softmax_forward),
    cmocka_unit_test(test_softmax_gradients),
    cmocka_unit_test(test_ce_forward),
    cmocka_unit_test(test_ce_stable),
    cmocka_unit_test(test_ce_gradients),
    cmocka_unit_test(test_ce_grad_values),
    cmocka_unit_test(test_f32_row_paths),
    cmocka_unit_test(test_f32_fast_matches_generic),
    cmocka_unit_test(test_ce_huge_tied_logits),
    cmocka_unit_test(test_f32_grad_far_below_max_large_g),
    cmocka_unit_test(test_ce_grad_confident_label),
    cmocka_unit_test(test_grad_thread_determinism),
    cmocka_unit_test(test_bce_forward),
    cmocka_unit_test(test_bce_gradients),
    cmocka_unit_test(test_sqerr_forward),
    cmocka_unit_test(test_sqerr_gradients),
    cmocka_unit_test(test_classification_error),
    cmocka_unit_test(test_classification_error_no_grad),
    cmocka_unit_test(test_dynamic_batch),
    cmocka_unit_test(test_thread_determinism),
    cmocka_unit_test(test_build_errors),
    cmocka_unit_test(test_run_errors),
    cmocka_unit_test(test_loss_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
