/* ops/pool.c: max_pool, average_pool (1-D, 2-D, 3-D; strides, dilations, asymmetric pads,
 * SAME_UPPER / SAME_LOWER / VALID, ceil_mode, count_include_pad), global pools and their
 * gradient ops, against naive float64 loops written here; finite-difference gradients;
 * thread-count determinism; error messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}
static em_attr AS(const char *name, const char *s) { return (em_attr){.name = name, .type = EM_ATTR_STRING, .s = s}; }

/* s[i] / d[i] of 0: attribute not given (1). */
typedef struct pool_case {
  const char *name;
  int nsp;
  int64_t n, c;
  int64_t in[3], k[3], s[3], d[3];
  int has_pads;
  int64_t pads[6];
  const char *auto_pad;
  int ceil_mode, cip;
} pool_case;

static int case_attrs(const pool_case *pc, int is_max, em_attr *at) {
  int n = 0, nsp = pc->nsp;
  at[n++] = AIS("kernel_shape", pc->k, nsp);
  if (pc->s[0]) at[n++] = AIS("strides", pc->s, nsp);
  if (pc->d[0]) at[n++] = AIS("dilations", pc->d, nsp);
  if (pc->has_pads) at[n++] = AIS("pads", pc->pads, 2 * nsp);
  if (pc->auto_pad) at[n++] = AS("auto_pad", pc->auto_pad);
  if (pc->ceil_mode) at[n++] = AI("ceil_mode", 1);
  if (!is_max && pc->cip) at[n++] = AI("count_include_pad", 1);
  return n;
}

/* ---------------------------------------------------------- reference --- */

/* Spatial axes right-aligned into three (leading ones of size 1). */
typedef struct geo {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} geo;

static geo ref_geom(const pool_case *pc) {
  geo g;
  for (int j = 0; j < 3; j++) g.in[j] = g.out[j] = g.k[j] = g.s[j] = g.d[j] = 1, g.pb[j] = g.pe[j] = 0;
  int same = pc->auto_pad && !strncmp(pc->auto_pad, "SAME", 4);
  for (int i = 0; i < pc->nsp; i++) {
    int j = 3 - pc->nsp + i;
    int64_t k = pc->k[i], s = pc->s[i] ? pc->s[i] : 1, d = pc->d[i] ? pc->d[i] : 1, dk = (k - 1) * d + 1, in = pc->in[i];
    int64_t b = pc->has_pads ? pc->pads[i] : 0, e = pc->has_pads ? pc->pads[pc->nsp + i] : 0, out;
    if (same) {
      out = (int64_t)ceil((double)in / (double)s);
      int64_t total = (out - 1) * s + dk - in;
      if (total < 0) total = 0;
      b = !strcmp(pc->auto_pad, "SAME_UPPER") ? total / 2 : total - total / 2;
      e = total - b;
    } else {
      double span = (double)(in + b + e - dk) / (double)s;
      out = (int64_t)(pc->ceil_mode ? ceil(span) : floor(span)) + 1;
      if (pc->ceil_mode && (out - 1) * s >= in + b) out--;
    }
    g.in[j] = in, g.out[j] = out, g.k[j] = k, g.s[j] = s, g.d[j] = d, g.pb[j] = b, g.pe[j] = e;
  }
  return g;
}

static int64_t prod3(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* Forward (y) and gradient (dx from dy) of one pool over every plane, in plain loops. */
static void ref_pool(const geo *g, int64_t planes, int is_max, int cip, const double *x, const double *dy, double *y,
                     double *dx) {
  int64_t P = prod3(g->out), Q = prod3(g->in);
  memset(dx, 0, sizeof(double) * (size_t)(planes * Q));
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t o0 = 0; o0 < g->out[0]; o0++)
      for (int64_t o1 = 0; o1 < g->out[1]; o1++)
        for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
          int64_t oi = pl * P + (o0 * g->out[1] + o1) * g->out[2] + o2, best = -1, count = 0, padded = 1;
          double sum = 0;
          int64_t idx[4096];
          int nidx = 0;
          for (int a = 0; a < 3; a++) {
            int64_t o = a == 0 ? o0 : a == 1 ? o1 : o2, c = 0;
            for (int64_t t = 0; t < g->k[a]; t++) {
              int64_t p = o * g->s[a] - g->pb[a] + t * g->d[a];
              if (p >= -g->pb[a] && p < g->in[a] + g->pe[a]) c++;
            }
            padded *= c;
          }
          for (int64_t t0 = 0; t0 < g->k[0]; t0++)
            for (int64_t t1 = 0; t1 < g->k[1]; t1++)
              for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                int64_t p0 = o0 * g->s[0] - g->pb[0] + t0 * g->d[0], p1 = o1 * g->s[1] - g->pb[1] + t1 * g->d[1];
                int64_t p2 = o2 * g->s[2] - g->pb[2] + t2 * g->d[2];
                if (p0 < 0 || p0 >= g->in[0] || p1 < 0 || p1 >= g->in[1] || p2 < 0 || p2 >= g->in[2]) continue;
                int64_t ii = pl * Q + (p0 * g->in[1] + p1) * g->in[2] + p2;
                if (best < 0 || x[ii] > x[best]) best = ii;
                sum += x[ii];
                count++;
                assert_true(nidx < 4096);
                idx[nidx++] = ii;
              }
          assert_true(count > 0);
          if (is_max) {
            y[oi] = x[best];
            dx[best] += dy[oi];
          } else {
            double div = cip ? (double)padded : (double)count;
            y[oi] = sum / div;
            for (int i = 0; i < nidx; i++) dx[idx[i]] += dy[oi] / div;
          }
        }
}

/* ------------------------------------------------------------ helpers --- */

/* Distinct values spaced 0.05 apart, in a scrambled order (no ties, far from kinks). */
static em_tensor *distinct(em_dtype dt, int nd, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)n);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7919) % n) * 0.05 - 1.0;
  em_tensor *t = ot_tensor(dt, nd, shape, v);
  free(v);
  return t;
}

static void check_case(const pool_case *pc, int is_max, em_dtype dt) {
  char what[160];
  const double rel = dt == EM_F32 ? 1e-5 : 1e-12;
  const char *op = is_max ? "max_pool" : "average_pool";
  int nd = pc->nsp + 2;
  geo g = ref_geom(pc);
  int64_t xs[5] = {pc->n, pc->c}, ys[5] = {pc->n, pc->c};
  for (int i = 0; i < pc->nsp; i++) xs[2 + i] = pc->in[i], ys[2 + i] = g.out[3 - pc->nsp + i];
  em_attr at[8];
  int na = case_attrs(pc, is_max, at);
  em_tensor *x = ot_rand(dt, nd, xs, 11 + (uint64_t)pc->n, -1, 1), *dy = ot_rand(dt, nd, ys, 12 + (uint64_t)pc->c, -1, 1);
  int64_t nx, ny;
  double *xv = ot_values(x, &nx), *dyv = ot_values(dy, &ny);
  double *y_ref = malloc(sizeof(double) * (size_t)ny), *dx_ref = malloc(sizeof(double) * (size_t)nx);
  assert_non_null(y_ref), assert_non_null(dx_ref);
  ref_pool(&g, pc->n * pc->c, is_max, pc->cip, xv, dyv, y_ref, dx_ref);

  em_tensor *y = ot_run1(op, &x, 1, at, na);
  snprintf(what, sizeof what, "%s %s %s forward", op, pc->name, em_dtype_name(dt));
  ot_expect_shape(y, dt, nd, ys, what);
  ot_expect_values(y, y_ref, ny, rel, what);

  em_tensor *gin[2] = {is_max ? x : dy, is_max ? dy : x};
  em_tensor *dx = ot_run1(is_max ? "_max_pool_grad" : "_avg_pool_grad", gin, 2, at, na);
  snprintf(what, sizeof what, "%s %s %s gradient", op, pc->name, em_dtype_name(dt));
  ot_expect_shape(dx, dt, nd, xs, what);
  ot_expect_values(dx, dx_ref, nx, rel, what);

  em_tensor_release(x), em_tensor_release(dy), em_tensor_release(y), em_tensor_release(dx);
  free(xv), free(dyv), free(y_ref), free(dx_ref);
}

/* -------------------------------------------------------------- tests --- */

static const pool_case cases[] = {
  {.name = "2d k2 defaults", .nsp = 2, .n = 1, .c = 1, .in = {4, 5}, .k = {2, 2}},
  /* 2x2 stride 2 (max_pool's own loop for it): even planes, and odd ones whose last row and column no window reads */
  {.name = "2d k2 s2 even", .nsp = 2, .n = 2, .c = 3, .in = {8, 6}, .k = {2, 2}, .s = {2, 2}},
  {.name = "2d k2 s2 odd", .nsp = 2, .n = 2, .c = 3, .in = {7, 9}, .k = {2, 2}, .s = {2, 2}},
  {.name = "2d k3 s2 pads 1", .nsp = 2, .n = 3, .c = 2, .in = {7, 8}, .k = {3, 3}, .s = {2, 2}, .has_pads = 1,
   .pads = {1, 1, 1, 1}},
  {.name = "2d asym pads", .nsp = 2, .n = 2, .c = 3, .in = {6, 7}, .k = {3, 2}, .s = {2, 1}, .has_pads = 1,
   .pads = {0, 1, 2, 1}},
  {.name = "2d asym pads count_include_pad", .nsp = 2, .n = 2, .c = 3, .in = {6, 7}, .k = {3, 2}, .s = {2, 1},
   .has_pads = 1, .pads = {0, 1, 2, 1}, .cip = 1},
  {.name = "1d ceil_mode dropping a window", .nsp = 1, .n = 2, .c = 3, .in = {5}, .k = {2}, .s = {2}, .has_pads = 1,
   .pads = {1, 1}, .ceil_mode = 1},
  {.name = "1d ceil_mode overhang cip", .nsp = 1, .n = 1, .c = 2, .in = {8}, .k = {3}, .s = {2}, .has_pads = 1,
   .pads = {1, 0}, .ceil_mode = 1, .cip = 1},
  {.name = "2d ceil_mode", .nsp = 2, .n = 1, .c = 3, .in = {9, 6}, .k = {3, 2}, .s = {2, 3}, .ceil_mode = 1},
  {.name = "2d ceil_mode pads cip", .nsp = 2, .n = 2, .c = 1, .in = {7, 10}, .k = {2, 3}, .s = {2, 2},
   .has_pads = 1, .pads = {1, 0, 1, 1}, .ceil_mode = 1, .cip = 1},
  {.name = "2d dilation 2", .nsp = 2, .n = 2, .c = 2, .in = {9, 8}, .k = {3, 2}, .s = {1, 2}, .d = {2, 3},
   .has_pads = 1, .pads = {2, 1, 1, 2}},
  {.name = "2d SAME_UPPER even kernel", .nsp = 2, .n = 1, .c = 2, .in = {7, 6}, .k = {4, 2}, .s = {2, 2},
   .auto_pad = "SAME_UPPER"},
  {.name = "2d SAME_LOWER even kernel", .nsp = 2, .n = 1, .c = 2, .in = {7, 6}, .k = {4, 2}, .s = {2, 2},
   .auto_pad = "SAME_LOWER"},
  {.name = "2d SAME_LOWER odd kernel cip", .nsp = 2, .n = 2, .c = 2, .in = {5, 8}, .k = {3, 5}, .s = {1, 3},
   .auto_pad = "SAME_LOWER", .cip = 1},
  {.name = "2d VALID", .nsp = 2, .n = 1, .c = 1, .in = {7, 7}, .k = {3, 3}, .s = {2, 2}, .auto_pad = "VALID"},
  {.name = "1d", .nsp = 1, .n = 3, .c = 5, .in = {13}, .k = {4}, .s = {3}, .has_pads = 1, .pads = {2, 1}},
  {.name = "1d kernel 1", .nsp = 1, .n = 1, .c = 2, .in = {1}, .k = {1}},
  {.name = "3d", .nsp = 3, .n = 2, .c = 2, .in = {5, 6, 7}, .k = {2, 3, 2}, .s = {1, 2, 2}, .has_pads = 1,
   .pads = {1, 0, 1, 0, 1, 1}},
  {.name = "3d ceil cip", .nsp = 3, .n = 1, .c = 3, .in = {4, 5, 6}, .k = {3, 2, 3}, .s = {2, 2, 2}, .has_pads = 1,
   .pads = {1, 1, 0, 1, 0, 1}, .ceil_mode = 1, .cip = 1},
  {.name = "2d large", .nsp = 2, .n = 4, .c = 16, .in = {64, 48}, .k = {3, 3}, .s = {2, 2}, .has_pads = 1,
   .pads = {1, 1, 1, 1}},
};

static void test_pool_values(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int is_max = 0; is_max < 2; is_max++) {
      check_case(&cases[i], is_max, EM_F32);
      check_case(&cases[i], is_max, EM_F64);
    }
}

/* A hand-computed case: [1, 5, 3, 3, 2] with kernel 2, stride 2, pads (0, 1):
 * max [5, 3, 2]; average [3, 3, 2] and with count_include_pad [3, 3, 1]. */
static void test_pool_known_values(void **state) {
  (void)state;
  int64_t xs[3] = {1, 1, 5}, k[1] = {2}, s[1] = {2}, pads[2] = {0, 1};
  double xv[5] = {1, 5, 3, 3, 2}, want_max[3] = {5, 3, 2}, want_avg[3] = {3, 3, 2}, want_cip[3] = {3, 3, 1};
  em_tensor *x = ot_tensor(EM_F64, 3, xs, xv);
  em_attr at[4] = {AIS("kernel_shape", k, 1), AIS("strides", s, 1), AIS("pads", pads, 2), AI("count_include_pad", 1)};
  em_tensor *y = ot_run1("max_pool", &x, 1, at, 3);
  ot_expect_values(y, want_max, 3, 1e-15, "known max_pool");
  em_tensor_release(y);
  y = ot_run1("average_pool", &x, 1, at, 3);
  ot_expect_values(y, want_avg, 3, 1e-15, "known average_pool");
  em_tensor_release(y);
  y = ot_run1("average_pool", &x, 1, at, 4);
  ot_expect_values(y, want_cip, 3, 1e-15, "known average_pool count_include_pad");
  em_tensor_release(y), em_tensor_release(x);
}

/* Ties: the gradient goes to the first maximum of the window only (row-major window order). */
static void test_max_pool_ties(void **state) {
  (void)state;
  int64_t xs[4] = {1, 1, 3, 3}, ys[4] = {1, 1, 2, 2}, k[2] = {2, 2};
  double xv[9] = {7, 7, 1, 7, 7, 1, 0, 0, 0}, dyv[4] = {1, 10, 100, 1000};
  /* windows (stride 1): {7,7,7,7} -> (0,0); {7,1,7,1} -> (0,1); {7,7,0,0} -> (1,0); {7,1,0,0} -> (1,1) */
  double want[9] = {1, 10, 0, 100, 1000, 0, 0, 0, 0};
  em_attr at[1] = {AIS("kernel_shape", k, 2)};
  for (int f = 0; f < 2; f++) {
    em_dtype dt = f ? EM_F64 : EM_F32;
    em_tensor *in[2] = {ot_tensor(dt, 4, xs, xv), ot_tensor(dt, 4, ys, dyv)};
    em_tensor *dx = ot_run1("_max_pool_grad", in, 2, at, 1);
    ot_expect_values(dx, want, 9, 0, "max_pool ties go to the first maximum");
    em_tensor_release(dx), em_tensor_release(in[0]), em_tensor_release(in[1]);
  }
}

/* The 2x2 stride-2 max pool (its own loop) keeps the general rule's special values: a tie goes
 * to the first tap, a NaN wins once and then stays, a window's dy reaches dx added to +0 (a -0
 * becomes +0), and the row and column no window reads get +0. Derived by hand. */
static void test_max_pool_2x2_special_values(void **state) {
  (void)state;
  const double nan = NAN;
  int64_t xs[4] = {1, 1, 3, 7}, ys[4] = {1, 1, 1, 3}, k[2] = {2, 2}, st[2] = {2, 2};
  double xv[21] = {3, 3, nan, 1, 4, 6, 9,   /* windows: {3,3 / 2,3} tie -> tap 0 (x[0]);          */
                   2, 3, 5, nan, nan, 8, 9, /* {NaN,1 / 5,NaN} the first NaN (x[2]);                  */
                   9, 9, 9, 9, 9, 9, 9};    /* {4,6 / NaN,8} 6 then the NaN (x[11]); row 2, col 6 unread */
  double dyv[3] = {-0.0, 2, 5};
  em_attr at[2] = {AIS("kernel_shape", k, 2), AIS("strides", st, 2)};
  for (int f = 0; f < 2; f++) {
    em_dtype dt = f ? EM_F64 : EM_F32;
    em_tensor *x = ot_tensor(dt, 4, xs, xv), *dy = ot_tensor(dt, 4, ys, dyv);
    em_tensor *y = ot_run1("max_pool", &x, 1, at, 2);
    double *yv = ot_values(y, NULL);
    assert_true(yv[0] == 3 && isnan(yv[1]) && isnan(yv[2]));
    em_tensor *in[2] = {x, dy};
    em_tensor *dx = ot_run1("_max_pool_grad", in, 2, at, 2);
    double *dxv = ot_values(dx, NULL);
    for (int i = 0; i < 21; i++) {
      double want = i == 2 ? 2 : i == 11 ? 5 : 0;
      if (dxv[i] != want || signbit(dxv[i])) fail_msg("%s dx[%d] = %g, want +%g", em_dtype_name(dt), i, dxv[i], want);
    }
    free(yv), free(dxv);
    em_tensor_release(dx), em_tensor_release(y), em_tensor_release(dy), em_tensor_release(x);
  }
}

static void check_global(int nd, const int64_t *xs, em_dtype dt) {
  char what[128];
  const double rel = dt == EM_F32 ? 1e-5 : 1e-12;
  int64_t planes = xs[0] * xs[1], size = 1, ys[5] = {xs[0], xs[1], 1, 1, 1};
  for (int i = 2; i < nd; i++) size *= xs[i];
  em_tensor *x = ot_rand(dt, nd, xs, 21, -2, 2), *dy = ot_rand(dt, nd, ys, 22, -1, 1);
  int64_t nx, ny;
  double *xv = ot_values(x, &nx), *dyv = ot_values(dy, &ny);
  for (int is_max = 0; is_max < 2; is_max++) {
    double *y_ref = calloc((size_t)planes, sizeof(double)), *dx_ref = calloc((size_t)nx, sizeof(double));
    assert_non_null(y_ref), assert_non_null(dx_ref);
    for (int64_t p = 0; p < planes; p++) {
      int64_t best = 0;
      double sum = 0;
      for (int64_t i = 0; i < size; i++) {
        if (xv[p * size + i] > xv[p * size + best]) best = i;
        sum += xv[p * size + i];
      }
      y_ref[p] = is_max ? xv[p * size + best] : sum / (double)size;
      if (is_max) dx_ref[p * size + best] = dyv[p];
      else
        for (int64_t i = 0; i < size; i++) dx_ref[p * size + i] = dyv[p] / (double)size;
    }
    const char *op = is_max ? "global_max_pool" : "global_average_pool";
    em_tensor *y = ot_run1(op, &x, 1, NULL, 0);
    snprintf(what, sizeof what, "%s rank %d %s", op, nd, em_dtype_name(dt));
    ot_expect_shape(y, dt, nd, ys, what);
    ot_expect_values(y, y_ref, planes, rel, what);
    em_attr mode = AS("mode", is_max ? "max" : "average");
    em_tensor *gin[2] = {x, dy};
    em_tensor *dx = ot_run1("_global_pool_grad", gin, 2, &mode, 1);
    snprintf(what, sizeof what, "%s gradient rank %d %s", op, nd, em_dtype_name(dt));
    ot_expect_shape(dx, dt, nd, xs, what);
    ot_expect_values(dx, dx_ref, nx, rel, what);
    em_tensor_release(y), em_tensor_release(dx);
    free(y_ref), free(dx_ref);
  }
  em_tensor_release(x), em_tensor_release(dy);
  free(xv), free(dyv);
}

static void test_global_pools(void **state) {
  (void)state;
  int64_t s1[3] = {2, 3, 7}, s2[4] = {3, 2, 5, 4}, s3[5] = {1, 4, 3, 2, 5}, big[4] = {2, 64, 32, 32},
          one[4] = {1, 1, 1, 1};
  for (int f = 0; f < 2; f++) {
    em_dtype dt = f ? EM_F64 : EM_F32;
    check_global(3, s1, dt);
    check_global(4, s2, dt);
    check_global(5, s3, dt);
    check_global(4, big, dt);
    check_global(4, one, dt);
  }
}

static void gradcheck_case(const pool_case *pc, int is_max) {
  int nd = pc->nsp + 2;
  int64_t xs[5] = {pc->n, pc->c};
  for (int i = 0; i < pc->nsp; i++) xs[2 + i] = pc->in[i];
  em_attr at[8];
  int na = case_attrs(pc, is_max, at);
  em_tensor *x = is_max ? distinct(EM_F64, nd, xs) : ot_rand(EM_F64, nd, xs, 31, -1, 1);
  ot_gradcheck(is_max ? "max_pool" : "average_pool", &x, 1, at, na, 1, 0, 1e-6);
  em_tensor_release(x);
}

static void test_pool_gradcheck(void **state) {
  (void)state;
  static const pool_case g[] = {
    {.name = "2d overlapping pads", .nsp = 2, .n = 2, .c = 2, .in = {6, 5}, .k = {3, 3}, .s = {2, 1}, .has_pads = 1,
     .pads = {1, 1, 1, 0}},
    {.name = "2d ceil cip", .nsp = 2, .n = 1, .c = 3, .in = {7, 6}, .k = {2, 3}, .s = {2, 2}, .has_pads = 1,
     .pads = {1, 0, 0, 1}, .ceil_mode = 1, .cip = 1},
    {.name = "1d dilation SAME_UPPER", .nsp = 1, .n = 3, .c = 2, .in = {9}, .k = {3}, .s = {2}, .d = {2},
     .auto_pad = "SAME_UPPER"},
    {.name = "3d", .nsp = 3, .n = 1, .c = 2, .in = {4, 3, 5}, .k = {2, 2, 3}, .s = {1, 1, 2}, .has_pads = 1,
     .pads = {0, 1, 1, 1, 0, 1}},
  };
  for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
    gradcheck_case(&g[i], 1);
    gradcheck_case(&g[i], 0);
  }
  int64_t s2[4] = {2, 3, 4, 5}, s1[3] = {3, 2, 6};
  em_tensor *x = distinct(EM_F64, 4, s2);
  ot_gradcheck("global_max_pool", &x, 1, NULL, 0, 1, 0, 1e-6);
  ot_gradcheck("global_average_pool", &x, 1, NULL, 0, 1, 0, 1e-6);
  em_tensor_release(x);
  x = distinct(EM_F64, 3, s1);
  ot_gradcheck("global_max_pool", &x, 1, NULL, 0, 1, 0, 1e-6);
  ot_gradcheck("global_average_pool", &x, 1, NULL, 0, 1, 0, 1e-6);
  em_tensor_release(x);
}

static void test_pool_thread_determinism(void **state) {
  (void)state;
  int64_t xs[4] = {4, 16, 40, 36}, ys[4] = {4, 16, 20, 18}, k[2] = {3, 3}, s[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
  em_attr at[4] = {AIS("kernel_shape", k, 2), AIS("strides", s, 2), AIS("pads", pads, 4), AI("count_include_pad", 1)};
  em_tensor *x = ot_rand(EM_F32, 4, xs, 41, -1, 1), *dy = ot_rand(EM_F32, 4, ys, 42, -1, 1);
  em_tensor *r[2][4];
  for (int pass = 0; pass < 2; pass++) {
    assert_int_equal(em_set_num_threads(pass ? 3 : 1), EM_OK);
    em_tensor *mg[2] = {x, dy}, *ag[2] = {dy, x};
    r[pass][0] = ot_run1("max_pool", &x, 1, at, 3);
    r[pass][1] = ot_run1("average_pool", &x, 1, at, 4);
    r[pass][2] = ot_run1("_max_pool_grad", mg, 2, at, 3);
    r[pass][3] = ot_run1("_avg_pool_grad", ag, 2, at, 4);
  }
  assert_int_equal(em_set_num_threads(0), EM_OK);
  for (int i = 0; i < 4; i++) {
    if (memcmp(em_tensor_data(r[0][i]), em_tensor_data(r[1][i]), (size_t)em_tensor_numel(r[0][i]) * sizeof(float)))
      fail_msg("pool output %d differs between 1 and 3 threads", i);
    em_tensor_release(r[0][i]), em_tensor_release(r[1][i]);
  }
  em_tensor_release(x), em_tensor_release(dy);
}

/* A graph with a dynamic batch axis: -1 while it is built (forward and gradient ops), and a
 * run with 2 items matches the ops run directly. */
static void test_pool_dynamic_batch(void **state) {
  (void)state;
  int64_t xs_dyn[4] = {-1, 3, 7, 6}, ys_dyn[4] = {-1, 3, 4, 3}, xs[4] = {2, 3, 7, 6}, ys[4] = {2, 3, 4, 3};
  int64_t k[2] = {3, 2}, st[2] = {2, 2}, pads[4] = {1, 0, 1, 0};
  em_attr at[3] = {AIS("kernel_shape", k, 2), AIS("strides", st, 2), AIS("pads", pads, 4)};
  const char *ops[3] = {"max_pool", "average_pool", "global_average_pool"};
  for (int o = 0; o < 3; o++) {
    int global = o == 2, na = global ? 0 : 3;
    int64_t ys_g_dyn[4] = {-1, 3, 1, 1}, ys_g[4] = {2, 3, 1, 1};
    em_tensor *xt = distinct(EM_F64, 4, xs), *dyt = ot_rand(EM_F64, 4, global ? ys_g : ys, 51, -1, 1);
    em_graph *g;
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_var x, dy, y, loss, gx;
    assert_int_equal(em_input(g, "x", EM_F64, 4, xs_dyn, &x), EM_OK);
    assert_int_equal(em_input(g, "dy", EM_F64, 4, global ? ys_g_dyn : ys_dyn, &dy), EM_OK);
    if (em_apply(g, ops[o], &x, 1, at, na, &y, 1)) fail_msg("%s: %s", ops[o], em_last_error());
    int nd;
    int64_t shape[EM_MAX_DIMS];
    assert_int_equal(em_var_info(g, y, NULL, &nd, shape), EM_OK);
    assert_memory_equal(shape, global ? ys_g_dyn : ys_dyn, sizeof ys_dyn);
    em_var pair[2] = {y, dy};
    if (em_apply(g, "_weighted_sum", pair, 2, NULL, 0, &loss, 1)) fail_msg("_weighted_sum: %s", em_last_error());
    if (em_gradients(g, loss, &x, 1, &gx)) fail_msg("em_gradients: %s", em_last_error());
    em_var outs[2] = {y, gx};
    em_exec *e;
    assert_int_equal(em_exec_create(g, outs, 2, em_cpu(), &e), EM_OK);
    em_feed feeds[2] = {{x, xt}, {dy, dyt}};
    em_tensor *got[2];
    if (em_exec_run(e, feeds, 2, got)) fail_msg("run: %s", em_last_error());
    em_tensor *gin[2] = {o == 1 ? dyt : xt, o == 1 ? xt : dyt};
    em_attr mode = AS("mode", "average");
    em_tensor *want[2] = {ot_run1(ops[o], &xt, 1, at, na),
                          global ? ot_run1("_global_pool_grad", gin, 2, &mode, 1)
                                 : ot_run1(o == 0 ? "_max_pool_grad" : "_avg_pool_grad", gin, 2, at, na)};
    for (int i = 0; i < 2; i++) {
      int64_t n;
      double *wv = ot_values(want[i], &n);
      ot_expect_values(got[i], wv, n, 1e-12, "dynamic batch");
      free(wv);
      em_tensor_release(got[i]), em_tensor_release(want[i]);
    }
    em_exec_free(e);
    em_graph_free(g);
    em_tensor_release(xt), em_tensor_release(dyt);
  }
}

/* ------------------------------------------------------------- errors --- */

static void fails1(const char *op, em_dtype dt, int nd, const int64_t *xs, const em_attr *at, int na, const char *n1,
                   const char *n2) {
  const int64_t *shapes[1] = {xs};
  ot_expect_apply_fails(op, 1, &dt, &nd, shapes, at, na, 1, n1, n2);
}

static void test_pool_errors(void **state) {
  (void)state;
  int64_t x4[4] = {1, 3, 5, 5}, x2[2] = {3, 5}, x6[6] = {1, 1, 2, 2, 2, 2}, k2[2] = {2, 2}, k3[3] = {2, 2, 2};
  int64_t k_big[2] = {6, 2}, neg[4] = {0, -1, 0, 0}, zero[2] = {0, 0}, x1d[3] = {1, 1, 2}, k1[1] = {1}, p11[2] = {1, 1};
  em_attr ks = AIS("kernel_shape", k2, 2);
  fails1("max_pool", EM_F32, 4, x4, NULL, 0, "kernel_shape", "required");
  fails1("average_pool", EM_F32, 4, x4, NULL, 0, "kernel_shape", "required");
  em_attr ks3 = AIS("kernel_shape", k3, 3);
  fails1("max_pool", EM_F32, 4, x4, &ks3, 1, "kernel_shape", "expected 2");
  em_attr kb = AIS("kernel_shape", k_big, 2);
  fails1("max_pool", EM_F32, 4, x4, &kb, 1, "larger than the padded input", "kernel_shape[0]");
  em_attr pn[2] = {ks, AIS("pads", neg, 4)};
  fails1("average_pool", EM_F32, 4, x4, pn, 2, "pads[1]", ">= 0");
  em_attr sz[2] = {ks, AIS("strides", zero, 2)};
  fails1("max_pool", EM_F32, 4, x4, sz, 2, "strides[0]", ">= 1");
  em_attr cm[2] = {ks, AI("ceil_mode", 2)};
  fails1("max_pool", EM_F32, 4, x4, cm, 2, "ceil_mode", "2");
  em_attr ci[2] = {ks, AI("count_include_pad", -1)};
  fails1("average_pool", EM_F32, 4, x4, ci, 2, "count_include_pad", "-1");
  em_attr so[2] = {ks, AI("storage_order", 1)};
  fails1("max_pool", EM_F32, 4, x4, so, 2, "storage_order", "1");
  em_attr ap[2] = {ks, AS("auto_pad", "same")};
  fails1("max_pool", EM_F32, 4, x4, ap, 2, "auto_pad", "SAME_LOWER");
  em_attr both[3] = {ks, AIS("pads", (int64_t[]){0, 0, 0, 0}, 4), AS("auto_pad", "VALID")};
  fails1("max_pool", EM_F32, 4, x4, both, 3, "pads", "auto_pad=VALID");
  /* a window of padding only: kernel 1 with pads 1 on a 1-D input */
  em_attr only_pad[2] = {AIS("kernel_shape", k1, 1), AIS("pads", p11, 2)};
  fails1("max_pool", EM_F32, 3, x1d, only_pad, 2, "window 0", "only padding");
  fails1("average_pool", EM_F32, 3, x1d, only_pad, 2, "window 0", "only padding");
  /* ranks and dtypes */
  fails1("max_pool", EM_F32, 2, x2, &ks, 1, "rank 2", "f32[3,5]");
  fails1("average_pool", EM_F32, 6, x6, &ks, 1, "rank 6", "rank 3 to 5");
  fails1("global_max_pool", EM_F32, 2, x2, NULL, 0, "rank 2", "spatial");
  fails1("max_pool", EM_I32, 4, x4, &ks, 1, "i32", "f32 or f64");
  fails1("global_average_pool", EM_I64, 4, x4, NULL, 0, "i64", "f32 or f64");
  /* gradient ops: dy must match the forward output */
  {
    em_dtype dts[2] = {EM_F32, EM_F32};
    int nds[2] = {4, 4};
    int64_t dy_bad[4] = {1, 3, 3, 3};
    const int64_t *shapes[2] = {x4, dy_bad};
    ot_expect_apply_fails("_max_pool_grad", 2, dts, nds, shapes, &ks, 1, 1, "f32[1,3,3,3]", "f32[1,3,4,4]");
    const int64_t *shapes_avg[2] = {dy_bad, x4};
    ot_expect_apply_fails("_avg_pool_grad", 2, dts, nds, shapes_avg, &ks, 1, 1, "does not match", "f32[1,3,4,4]");
    em_attr bad_mode = AS("mode", "min");
    ot_expect_apply_fails("_global_pool_grad", 2, dts, nds, shapes, &bad_mode, 1, 1, "mode", "min");
  }
}

/* max_pool with a misspelt extra attribute "kernel_shapes" next to kernel_shape is refused by name; the message
 * names the op, the bad name and the names it takes. */
static void test_pool_unknown_attribute(void **state) {
  (void)state;
  const int64_t k2[2] = {2, 2};
  const int64_t s0[4] = {1, 1, 4, 4};
  const int64_t *shapes[1] = {s0};
  const em_dtype dtypes[1] = {EM_F32};
  const int ndims[1] = {4};
  const em_attr at[2] = {{.name = "kernel_shape", .type = EM_ATTR_INTS, .ints = k2, .n = 2},
                         {.name = "kernel_shapes", .type = EM_ATTR_INTS, .ints = k2, .n = 2}};
  ot_expect_apply_fails("max_pool", 1, dtypes, ndims, shapes, at, 2, 1, "no attribute 'kernel_shapes'",
                        "it takes: kernel_shape");
}

/* auto_pad SAME_SYMMETRIC (CNTK's auto-padding, ops/spatial.h) on pooling: in 8, kernel 3, stride 2
 * gives 4 windows with pads 1 (begin) and 0 (end), derived by hand (extra = 8 - (3*2+1) = 1; begin =
 * 1 - 0, end = 2 - 1 - 1); SAME_UPPER would pad 0, 1. Same bits as the explicit pads. */
static void test_pool_same_symmetric(void **state) {
  (void)state;
  int64_t xs[3] = {2, 3, 8}, k[1] = {3}, st[1] = {2}, pads[2] = {1, 0};
  em_tensor *x = ot_rand(EM_F64, 3, xs, 77, -1, 1), *y1 = NULL, *y2 = NULL;
  const char *ops[2] = {"max_pool", "average_pool"};
  for (int o = 0; o < 2; o++) {
    em_attr sym[3] = {{.name = "kernel_shape", .type = EM_ATTR_INTS, .ints = k, .n = 1},
                      {.name = "strides", .type = EM_ATTR_INTS, .ints = st, .n = 1},
                      {.name = "auto_pad", .type = EM_ATTR_STRING, .s = "SAME_SYMMETRIC"}};
    em_attr expl[3] = {{.name = "kernel_shape", .type = EM_ATTR_INTS, .ints = k, .n = 1},
                       {.name = "strides", .type = EM_ATTR_INTS, .ints = st, .n = 1},
                       {.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 2}};
    if (ot_run(ops[o], &x, 1, sym, 3, &y1, 1) || ot_run(ops[o], &x, 1, expl, 3, &y2, 1))
      fail_msg("%s: %s", ops[o], em_last_error());
    int64_t want[3] = {2, 3, 4}, n1, n2;
    ot_expect_shape(y1, EM_F64, 3, want, ops[o]);
    double *v1 = ot_values(y1, &n1), *v2 = ot_values(y2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(v1, v2, sizeof(double) * (size_t)n1);
    free(v1), free(v2);
    em_tensor_release(y1), em_tensor_release(y2);
  }
  em_tensor_release(x);
}

/* max_pool's general CPU loop (max_row: whole rows of windows, taps as selects; windows at the
 * padded ends window by window) over random geometries (1-3 spatial axes, strides, dilations,
 * asymmetric pads, ceil_mode; a 2-D case of 66 kernel rows, more than max_row takes) and special
 * values: NaN of both signs (the first NaN of a window wins and stays), +0 and -0 (ties keep the
 * first tap, so the sign shows which), infinities and integer ties. Against a plain loop written
 * here, bit for bit (the sign of a zero included), in fast and portable mode. */
static uint64_t sv_state = 0x9e3779b97f4a7c15ull;
static uint64_t sv_next(void) {
  sv_state ^= sv_state << 13, sv_state ^= sv_state >> 7, sv_state ^= sv_state << 17;
  return sv_state;
}
static double sv_unit(void) { return (double)(sv_next() >> 11) / 9007199254740992.0; }
static double sv_value(void) {
  double r = sv_unit();
  if (r < 0.05) return NAN;
  if (r < 0.08) return -NAN;
  if (r < 0.15) return 0.0;
  if (r < 0.22) return -0.0;
  if (r < 0.25) return INFINITY;
  if (r < 0.28) return -INFINITY;
  if (r < 0.5) return (double)((int)(sv_unit() * 4) - 2);
  return sv_unit() * 4 - 2;
}

static void test_max_pool_special_values_random(void **state) {
  (void)state;
  for (int it = 0; it < 300; it++) {
    int nsp = 1 + (int)(sv_next() % 3), ceil_mode = sv_next() % 3 == 0, ok = 1;
    em_dtype dt = sv_next() % 2 ? EM_F32 : EM_F64;
    int64_t n = 1 + (int64_t)(sv_next() % 2), c = 1 + (int64_t)(sv_next() % 3), in[3], k[3], s[3], d[3], pads[6];
    for (int i = 0; i < nsp; i++) {
      in[i] = 1 + (int64_t)(sv_next() % (nsp == 3 ? 7 : 13)), k[i] = 1 + (int64_t)(sv_next() % (nsp == 3 ? 5 : 4));
      s[i] = 1 + (int64_t)(sv_next() % 3), d[i] = 1 + (int64_t)(sv_next() % 3);
      pads[i] = (int64_t)(sv_next() % (uint64_t)k[i]), pads[nsp + i] = (int64_t)(sv_next() % (uint64_t)k[i]);
      if (in[i] + pads[i] + pads[nsp + i] < (k[i] - 1) * d[i] + 1) ok = 0;
    }
    if (it % 10 == 9) { /* 2-D, wide rows, many planes (threads); every 20th: 66 kernel rows */
      nsp = 2, n = 2, c = 9, ok = 1;
      in[0] = 70 + (int64_t)(sv_next() % 10), in[1] = 30 + (int64_t)(sv_next() % 50);
      k[0] = it % 20 == 9 ? 66 : 3, k[1] = 1 + (int64_t)(sv_next() % 4), s[0] = 1, d[0] = 1;
      s[1] = 1 + (int64_t)(sv_next() % 2), d[1] = 1 + (int64_t)(sv_next() % 2);
      pads[0] = 1, pads[2] = 0, pads[1] = (int64_t)(sv_next() % (uint64_t)k[1]);
      pads[3] = (int64_t)(sv_next() % (uint64_t)k[1]);
    }
    if (!ok) continue;
    pool_case pc = {.name = "special", .nsp = nsp, .n = n, .c = c, .has_pads = 1, .ceil_mode = ceil_mode};
    for (int i = 0; i < nsp; i++)
      pc.in[i] = in[i], pc.k[i] = k[i], pc.s[i] = s[i], pc.d[i] = d[i], pc.pads[i] = pads[i],
      pc.pads[nsp + i] = pads[nsp + i];
    geo g = ref_geom(&pc);
    int64_t xs[5] = {n, c}, Q = n * c * prod3(g.in), P = n * c * prod3(g.out);
    for (int i = 0; i < nsp; i++) xs[2 + i] = in[i];
    em_tensor *x = ot_tensor(dt, 2 + nsp, xs, NULL);
    double *xv = malloc(sizeof(double) * (size_t)Q), *want = malloc(sizeof(double) * (size_t)P);
    for (int64_t i = 0; i < Q; i++) {
      xv[i] = sv_value();
      if (dt == EM_F32) ((float *)em_tensor_data(x))[i] = (float)xv[i], xv[i] = (double)(float)xv[i];
      else ((double *)em_tensor_data(x))[i] = xv[i];
    }
    /* each window's taps in (depth, row, column) order: the first strictly larger wins, the first NaN stays */
    int empty = 0; /* a window of padding only: the op refuses the geometry */
    for (int64_t pl = 0, oi = 0; pl < n * c; pl++)
      for (int64_t o0 = 0; o0 < g.out[0]; o0++)
        for (int64_t o1 = 0; o1 < g.out[1]; o1++)
          for (int64_t o2 = 0; o2 < g.out[2]; o2++, oi++) {
            int64_t best = -1;
            for (int64_t t0 = 0; t0 < g.k[0]; t0++)
              for (int64_t t1 = 0; t1 < g.k[1]; t1++)
                for (int64_t t2 = 0; t2 < g.k[2]; t2++) {
                  int64_t p0 = o0 * g.s[0] - g.pb[0] + t0 * g.d[0], p1 = o1 * g.s[1] - g.pb[1] + t1 * g.d[1];
                  int64_t p2 = o2 * g.s[2] - g.pb[2] + t2 * g.d[2];
                  if (p0 < 0 || p0 >= g.in[0] || p1 < 0 || p1 >= g.in[1] || p2 < 0 || p2 >= g.in[2]) continue;
                  int64_t ii = pl * prod3(g.in) + (p0 * g.in[1] + p1) * g.in[2] + p2;
                  if (best < 0 || (!isnan(xv[best]) && (isnan(xv[ii]) || xv[ii] > xv[best]))) best = ii;
                }
            empty |= best < 0;
            want[oi] = best < 0 ? 0 : xv[best];
          }
    em_attr at[8];
    int na = case_attrs(&pc, 1, at);
    for (int mode = 0; mode < 2; mode++) {
      em_graph *gr;
      em_var xvar, y;
      em_exec *e;
      em_tensor *out;
      assert_int_equal(em_graph_create(&gr), EM_OK);
      assert_int_equal(em_input(gr, "x", dt, 2 + nsp, xs, &xvar), EM_OK);
      em_status st = em_apply(gr, "max_pool", &xvar, 1, at, na, &y, 1);
      if (empty) {
        if (!st || !strstr(em_last_error(), "covers only padding"))
          fail_msg("case %d: a window of padding only: %s", it, st ? em_last_error() : "accepted");
        em_graph_free(gr);
        continue;
      }
      if (st) fail_msg("case %d: %s", it, em_last_error());
      assert_int_equal(em_exec_create(gr, &y, 1, em_cpu(), &e), EM_OK);
      assert_int_equal(em_exec_set_mode(e, mode ? EM_MODE_PORTABLE : EM_MODE_FAST), EM_OK);
      em_feed f = {xvar, x};
      if (em_exec_run(e, &f, 1, &out)) fail_msg("case %d: %s", it, em_last_error());
      assert_int_equal(em_tensor_numel(out), P);
      for (int64_t i = 0; i < P; i++) {
        double got = dt == EM_F32 ? (double)((const float *)em_tensor_data(out))[i] : ((const double *)em_tensor_data(out))[i];
        if (isnan(want[i]) ? !isnan(got) || signbit(got) != signbit(want[i])
                           : got != want[i] || signbit(got) != signbit(want[i]))
          fail_msg("case %d (%d axes, %s, mode %d): y[%lld] = %g, the window's first maximum is %g", it, nsp,
                   dt == EM_F32 ? "f32" : "f64", mode, (long long)i, got, want[i]);
      }
      em_tensor_release(out);
      em_exec_free(e);
      em_graph_free(gr);
    }
    em_tensor_release(x);
    free(xv), free(want);
  }
}

/* A column stride far beyond a narrow row: one window per row, over columns 0 and 1, so
 * y[r] = max(x[r, 0], x[r, 1]). A stride's column phases (max_pool) must not take
 * rows * stride elements of scratch: 2^40 asked for terabytes, 2^62 wrapped the size. */
static void far_stride_case(int e) {
  enum { R = 4, W = 5 };
  int64_t xs[4] = {1, 1, R, W}, k[2] = {1, 2}, st[2] = {1, (int64_t)1 << e};
  double xv[R * W] = {1, 7, 3, 3, 3, /**/ 9, -2, 3, 3, 3, /**/ -4, -5, 3, 3, 3, /**/ 0.5, 0.25, 3, 3, 3};
  double want[R] = {7, 9, -4, 0.5};
  em_attr at[2] = {AIS("kernel_shape", k, 2), AIS("strides", st, 2)};
  for (int f = 0; f < 2; f++) {
    em_dtype dt = f ? EM_F64 : EM_F32;
    em_tensor *x = ot_tensor(dt, 4, xs, xv), *y = NULL;
    if (ot_run("max_pool", &x, 1, at, 2, &y, 1)) fail_msg("max_pool column stride 2^%d: %s", e, em_last_error());
    ot_expect_shape(y, dt, 4, (int64_t[]){1, 1, R, 1}, "far stride max_pool");
    ot_expect_values(y, want, R, 0, "far stride max_pool");
    em_tensor_release(y), em_tensor_release(x);
  }
}

static void test_max_pool_far_stride(void **state) {
  (void)state;
  far_stride_case(40); /* 4 rows of 2^40 phase slots: 16 TiB of scratch */
  far_stride_case(62); /* 4 * 2^62 wraps to 0: the phases were written past the scratch */
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_pool_known_values),
    cmocka_unit_test(test_pool_same_symmetric),
    cmocka_unit_test(test_pool_values),
    cmocka_unit_test(test_max_pool_ties),
    cmocka_unit_test(test_max_pool_2x2_special_values),
    cmocka_unit_test(test_max_pool_special_values_random),
    cmocka_unit_test(test_global_pools),
    cmocka_unit_test(test_pool_gradcheck),
    cmocka_unit_test(test_pool_thread_determinism),
    cmocka_unit_test(test_pool_dynamic_batch),
    cmocka_unit_test(test_pool_errors),
    cmocka_unit_test(test_pool_unknown_attribute),
    cmocka_unit_test(test_max_pool_far_stride),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
