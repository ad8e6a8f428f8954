/* ops/resize.c: resize (nearest with every nearest_mode, N-linear, cubic with cubic_coeff_a and
 * exclude_outside; every coordinate_transformation_mode; sizes or scales; tf_crop_and_resize's roi
 * and extrapolation_value) against a plain float64 reference written here from the ONNX spec's
 * formulas (the recursive one-axis-at-a-time interpolation of an edge-padded input), values of
 * the ONNX documentation's examples, gradients by finite differences and by the adjoint identity
 * <resize(x), w> = <x, _resize_grad(w)>, and error messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

/* ---------------------------------------------------------- reference --- */

typedef struct ref_case {
  const char *name;
  int R;
  int64_t in[6], out[6];
  double scale[6];        /* 0: from the sizes (out / in) */
  int use_scales;         /* the op gets scales (and the output is floor(in * scale)) instead of sizes */
  const char *mode, *ctm, *nearest;
  double a;               /* cubic_coeff_a; 0: default -0.75 */
  int exclude;
  double roi[12];         /* tf_crop_and_resize: starts then ends */
  double extrap;
  int antialias;
} ref_case;

typedef struct ref_ctx {
  const ref_case *rc;
  const double *x;
  int64_t out[6];
  double scale[6];
} ref_ctx;

/* The input coordinate of output index o on axis i (ONNX's coordinate transforms, with
 * output_width = scale * input_width), and whether tf_crop_and_resize falls outside the input. */
static double ref_coord(const ref_ctx *c, int i, int64_t o, int *outside) {
  const ref_case *rc = c->rc;
  double L = (double)rc->in[i], s = c->scale[i], W = s * L, x = (double)o, r;
  *outside = 0;
  if (!strcmp(rc->ctm, "align_corners")) return W == 1 ? 0 : x * (L - 1) / (W - 1);
  if (!strcmp(rc->ctm, "asymmetric")) return x / s;
  if (!strcmp(rc->ctm, "tf_half_pixel_for_nn")) return (x + 0.5) / s;
  if (!strcmp(rc->ctm, "pytorch_half_pixel")) return W == 1 ? -0.5 : (x + 0.5) / s - 0.5;
  if (!strcmp(rc->ctm, "half_pixel_symmetric")) {
    double adj = (double)c->out[i] / W, off = L / 2 * (1 - adj);
    return off + (x + 0.5) / s - 0.5;
  }
  if (!strcmp(rc->ctm, "tf_crop_and_resize")) {
    double lo = rc->roi[i], hi = rc->roi[rc->R + i];
    r = W == 1 ? (hi - lo) * (L - 1) / 2 : x * (hi - lo) * (L - 1) / (W - 1);
    r += lo * (L - 1);
    *outside = r < 0 || r > L - 1;
    return r;
  }
  return (x + 0.5) / s - 0.5; /* half_pixel */
}

/* The value at output coordinates o of the sub-tensor whose first `ax` input coordinates are ic. */
static double ref_point(const ref_ctx *c, int ax, int64_t *ic, const int64_t *o) {
  const ref_case *rc = c->rc;
  if (ax == rc->R) {
    int64_t f = 0;
    for (int i = 0; i < rc->R; i++) f = f * rc->in[i] + ic[i];
    return c->x[f];
  }
  int outside;
  double xo = ref_coord(c, ax, o[ax], &outside);
  if (outside) return rc->extrap;
  double ratio = xo == floor(xo) ? 1.0 : xo - floor(xo), co[64];
  int n;
  if (rc->antialias && strcmp(rc->mode, "nearest") != 0) {
    /* The filter stretched by 1 / scale when downsampling: taps at offsets start .. -start + 1
     * from the left neighbour, weights k((offset - ratio) * scale) normalised to sum 1. */
    double s = c->scale[ax] < 1 ? c->scale[ax] : 1, A = rc->a ? rc->a : -0.75, sum = 0;
    int cubic = !strcmp(rc->mode, "cubic"), start = (int)floor((cubic ? -2 : -1) / s) + 1;
    n = 2 - 2 * start;
    for (int j = 0; j < n; j++) {
      double d = fabs(((double)(start + j) - ratio) * s);
      if (!cubic) co[j] = d < 1 ? 1 - d : 0;
      else co[j] = d <= 1 ? ((A + 2) * d - (A + 3)) * d * d + 1 : d < 2 ? ((A * d - 5 * A) * d + 8 * A) * d - 4 * A : 0;
      sum += co[j];
    }
    for (int j = 0; j < n; j++) co[j] /= sum;
  } else if (!strcmp(rc->mode, "linear")) {
    n = 2, co[0] = 1 - ratio, co[1] = ratio;
  } else if (!strcmp(rc->mode, "cubic")) {
    double A = rc->a ? rc->a : -0.75, t[4] = {1 + ratio, ratio, 1 - ratio, 2 - ratio};
    n = 4;
    for (int j = 0; j < 4; j++) { /* Keys' kernel at distance t */
      double d = t[j];
      co[j] = d <= 1 ? ((A + 2) * d - (A + 3)) * d * d + 1 : ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
    }
  } else {
    const char *nm = rc->nearest ? rc->nearest : "round_prefer_floor";
    int up = ratio == 1 ? 1
             : !strcmp(nm, "round_prefer_floor") ? ratio > 0.5
             : !strcmp(nm, "round_prefer_ceil")  ? ratio >= 0.5
             : !strcmp(nm, "ceil");
    n = 2, co[0] = !up, co[1] = up;
  }
  /* The n nearest positions of the input padded by ceil(n / 2) edge copies on each side,
   * the smaller index first on equal distance, in ascending order. */
  int64_t pad = (n + 1) / 2, len = rc->in[ax] + 2 * pad, pick[64];
  double xp = xo + (double)pad;
  int taken = 0;
  unsigned char *used = calloc((size_t)len, 1);
  for (int j = 0; j < n; j++) {
    int64_t best = 0;
    while (used[best]) best++;
    for (int64_t k = best + 1; k < len; k++)
      if (!used[k] && fabs(xp - (double)k) < fabs(xp - (double)best)) best = k;
    used[best] = 1, taken++;
  }
  for (int64_t k = 0, j = 0; k < len; k++)
    if (used[k]) pick[j++] = k - pad;
  free(used);
  if (rc->exclude) {
    double sum = 0;
    for (int j = 0; j < n; j++) {
      if (pick[j] < 0 || pick[j] >= rc->in[ax]) co[j] = 0;
      sum += co[j];
    }
    for (int j = 0; j < n; j++) co[j] /= sum;
  }
  double acc = 0;
  for (int j = 0; j < n; j++) {
    int64_t k = pick[j] < 0 ? 0 : pick[j] >= rc->in[ax] ? rc->in[ax] - 1 : pick[j];
    ic[ax] = k;
    acc += co[j] * ref_point(c, ax + 1, ic, o);
  }
  return acc;
}

/* The reference output (malloc'd) and its shape. */
static double *ref_resize(const ref_case *rc, const double *x, int64_t *out_shape, int64_t *numel) {
  ref_ctx c = {.rc = rc, .x = x};
  int64_t n = 1;
  for (int i = 0; i < rc->R; i++) {
    c.out[i] = rc->use_scales ? (int64_t)floor((double)rc->in[i] * rc->scale[i]) : rc->out[i];
    c.scale[i] = rc->use_scales ? rc->scale[i] : (double)c.out[i] / (double)rc->in[i];
    out_shape[i] = c.out[i];
    n *= c.out[i];
  }
  double *y = malloc(sizeof *y * (size_t)(n ? n : 1));
  for (int64_t j = 0; j < n; j++) {
    int64_t o[6], ic[6], rem = j;
    for (int i = rc->R - 1; i >= 0; i--) o[i] = rem % c.out[i], rem /= c.out[i];
    y[j] = ref_point(&c, 0, ic, o);
  }
  *numel = n;
  return y;
}

/* ------------------------------------------------------------- helpers --- */

static int case_attrs(const ref_case *rc, em_attr *at) {
  int n = 0;
  if (rc->use_scales) at[n++] = (em_attr){.name = "scales", .type = EM_ATTR_FLOATS, .floats = rc->scale, .n = rc->R};
  else at[n++] = (em_attr){.name = "sizes", .type = EM_ATTR_INTS, .ints = rc->out, .n = rc->R};
  at[n++] = (em_attr){.name = "mode", .type = EM_ATTR_STRING, .s = rc->mode};
  at[n++] = (em_attr){.name = "coordinate_transformation_mode", .type = EM_ATTR_STRING, .s = rc->ctm};
  if (rc->nearest) at[n++] = (em_attr){.name = "nearest_mode", .type = EM_ATTR_STRING, .s = rc->nearest};
  if (rc->a) at[n++] = (em_attr){.name = "cubic_coeff_a", .type = EM_ATTR_FLOAT, .f = rc->a};
  if (rc->exclude) at[n++] = (em_attr){.name = "exclude_outside", .type = EM_ATTR_INT, .i = 1};
  if (rc->antialias) at[n++] = (em_attr){.name = "antialias", .type = EM_ATTR_INT, .i = 1};
  if (!strcmp(rc->ctm, "tf_crop_and_resize")) {
    at[n++] = (em_attr){.name = "roi", .type = EM_ATTR_FLOATS, .floats = rc->roi, .n = 2 * rc->R};
    at[n++] = (em_attr){.name = "extrapolation_value", .type = EM_ATTR_FLOAT, .f = rc->extrap};
  }
  return n;
}

static void check_case(const ref_case *rc, em_dtype dt, uint64_t seed) {
  em_tensor *x = ot_rand(dt, rc->R, rc->in, seed, -2, 2);
  int64_t nx, ny, shape[6];
  double *xv = ot_values(x, &nx), *want = ref_resize(rc, xv, shape, &ny);
  em_attr at[10];
  int na = case_attrs(rc, at);
  em_tensor *y = ot_run1("resize", &x, 1, at, na);
  char what[160];
  snprintf(what, sizeof what, "resize %s (%s)", rc->name, dt == EM_F32 ? "f32" : "f64");
  ot_expect_shape(y, dt, rc->R, shape, what);
  ot_expect_values(y, want, ny, dt == EM_F32 ? 2e-6 : 1e-12, what);
  em_tensor_release(y);
  em_tensor_release(x);
  free(xv), free(want);
}

#define NHWC(...) {__VA_ARGS__}

static const char *const ctms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
static const char *const nearest_modes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

/* Every mode with every coordinate transform, up and down, by sizes and by scales. */
static void test_resize_vs_reference(void **state) {
  (void)state;
  const ref_case shapes[] = {
    {.name = "2d up sizes", .R = 4, .in = {2, 3, 4, 5}, .out = {2, 3, 7, 9}},
    {.name = "2d down sizes", .R = 4, .in = {1, 2, 7, 9}, .out = {1, 2, 3, 4}},
    {.name = "2d scales", .R = 4, .in = {2, 1, 5, 4}, .scale = {1, 1, 1.7, 0.6}, .use_scales = 1},
    {.name = "1d scales", .R = 3, .in = {2, 3, 6}, .scale = {1, 1, 2.5}, .use_scales = 1},
    {.name = "3d", .R = 5, .in = {1, 2, 3, 4, 5}, .out = {1, 2, 5, 3, 8}},
    {.name = "every axis", .R = 2, .in = {4, 5}, .out = {6, 3}},
    {.name = "to one", .R = 3, .in = {2, 5, 4}, .out = {2, 1, 1}},
  };
  uint64_t seed = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int m = 0; m < 3; m++)
      for (int t = 0; t < 7; t++)
        for (int k = 0; k < (m == 0 ? 4 : 1); k++) {
          ref_case rc = shapes[s];
          rc.mode = m == 0 ? "nearest" : m == 1 ? "linear" : "cubic";
          rc.ctm = ctms[t];
          if (m == 0) rc.nearest = nearest_modes[k];
          for (int i = 0; i < rc.R; i++) rc.roi[i] = 0.1 * (i % 3) - 0.05, rc.roi[rc.R + i] = 1.2 - 0.15 * (i % 2);
          rc.extrap = 7.5;
          char name[160];
          snprintf(name, sizeof name, "%s %s %s %s", shapes[s].name, rc.mode, rc.ctm, m == 0 ? rc.nearest : "");
          rc.name = name;
          check_case(&rc, EM_F64, seed++);
          check_case(&rc, EM_F32, seed++);
        }
}

/* cubic_coeff_a and exclude_outside (with the taps past the border). */
static void test_resize_cubic_options(void **state) {
  (void)state;
  ref_case cs[] = {
    {.name = "a -0.5 exclude up", .R = 4, .in = {1, 1, 4, 4}, .out = {1, 1, 8, 8},
     .mode = "cubic", .ctm = "half_pixel", .a = -0.5, .exclude = 1},
    {.name = "a -0.5 exclude down", .R = 4, .in = {1, 1, 4, 4}, .scale = {1, 1, 0.8, 0.8}, .use_scales = 1,
     .mode = "cubic", .ctm = "half_pixel", .a = -0.5,
     .exclude = 1},
    {.name = "exclude align", .R = 3, .in = {2, 3, 5}, .out = {2, 3, 9}, .mode = "cubic",
     .ctm = "align_corners", .exclude = 1},
    {.name = "a -0.6 asym", .R = 2, .in = {3, 6}, .out = {5, 11}, .mode = "cubic", .ctm = "asymmetric", .a = -0.6},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    check_case(&cs[i], EM_F64, 100 + i);
    check_case(&cs[i], EM_F32, 200 + i);
  }
}

/* antialias: linear and cubic downsampling with the filter widened by 1 / scale; upsampling as
 * without it. */
static void test_resize_antialias(void **state) {
  (void)state;
  ref_case cs[] = {
    {.name = "linear 0.5", .R = 4, .in = {1, 2, 8, 9}, .out = {1, 2, 4, 4}, .mode = "linear", .ctm = "half_pixel"},
    {.name = "linear 0.3 scales", .R = 3, .in = {2, 2, 17}, .scale = {1, 1, 0.3}, .use_scales = 1, .mode = "linear",
     .ctm = "half_pixel"},
    {.name = "cubic 0.6", .R = 4, .in = {1, 1, 10, 7}, .out = {1, 1, 6, 4}, .mode = "cubic", .ctm = "half_pixel"},
    {.name = "cubic exclude align", .R = 2, .in = {9, 8}, .out = {4, 3}, .mode = "cubic", .ctm = "align_corners",
     .exclude = 1, .a = -0.5},
    {.name = "linear up", .R = 2, .in = {3, 4}, .out = {7, 9}, .mode = "linear", .ctm = "asymmetric"},
    {.name = "nearest ignores", .R = 2, .in = {8, 8}, .out = {3, 5}, .mode = "nearest", .ctm = "half_pixel"},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    cs[i].antialias = 1;
    check_case(&cs[i], EM_F64, 400 + i);
    check_case(&cs[i], EM_F32, 200 + i);
  }
}

/* Values from the ONNX operator documentation's examples. */
static void test_resize_known_values(void **state) {
  (void)state;
  const int64_t s22[] = {1, 1, 2, 2}, s44[] = {1, 1, 4, 4}, s46[] = {1, 1, 4, 6};
  const double x22[] = {1, 2, 3, 4};
  em_tensor *x = ot_tensor(EM_F32, 4, s22, x22);
  const double sc_lin[] = {1, 1, 2, 2}, sc_near[] = {1, 1, 2, 3};
  em_attr lin[] = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = sc_lin, .n = 4},
                   {.name = "mode", .type = EM_ATTR_STRING, .s = "linear"}};
  const double want_lin[] = {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4};
  em_tensor *y = ot_run1("resize", &x, 1, lin, 2);
  ot_expect_shape(y, EM_F32, 4, s44, "upsample_scales_linear");
  ot_expect_values(y, want_lin, 16, 0, "upsample_scales_linear");
  em_tensor_release(y);
  em_attr near[] = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = sc_near, .n = 4}};
  const double want_near[] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
  y = ot_run1("resize", &x, 1, near, 1);
  ot_expect_shape(y, EM_F32, 4, s46, "upsample_scales_nearest");
  ot_expect_values(y, want_near, 24, 0, "upsample_scales_nearest");
  em_tensor_release(y);
  em_tensor_release(x);
}

static void test_resize_gradcheck(void **state) {
  (void)state;
  const ref_case cs[] = {
    {.name = "nearest", .R = 4, .in = {1, 2, 3, 4}, .out = {1, 2, 5, 3}, .mode = "nearest", .ctm = "half_pixel"},
    {.name = "nearest ceil asym", .R = 3, .in = {2, 3, 4}, .out = {2, 3, 9}, .mode = "nearest",
     .ctm = "asymmetric", .nearest = "ceil"},
    {.name = "linear", .R = 4, .in = {1, 2, 3, 4}, .out = {1, 2, 7, 3}, .mode = "linear", .ctm = "half_pixel"},
    {.name = "linear align", .R = 4, .in = {1, 2, 3, 4}, .out = {1, 2, 5, 6}, .mode = "linear", .ctm = "align_corners"},
    {.name = "trilinear", .R = 5, .in = {1, 1, 3, 2, 4}, .out = {1, 1, 4, 3, 3}, .mode = "linear",
     .ctm = "pytorch_half_pixel"},
    {.name = "cubic", .R = 4, .in = {1, 2, 4, 3}, .out = {1, 2, 6, 5}, .mode = "cubic", .ctm = "half_pixel"},
    {.name = "cubic exclude", .R = 4, .in = {1, 1, 4, 5}, .out = {1, 1, 3, 9},
     .mode = "cubic", .ctm = "half_pixel", .a = -0.5, .exclude = 1},
    {.name = "antialias linear", .R = 4, .in = {1, 2, 9, 8}, .out = {1, 2, 4, 3}, .mode = "linear",
     .ctm = "half_pixel", .antialias = 1},
    {.name = "antialias cubic", .R = 4, .in = {1, 1, 9, 8}, .out = {1, 1, 5, 3}, .mode = "cubic",
     .ctm = "pytorch_half_pixel", .antialias = 1},
    {.name = "tf crop", .R = 4, .in = {1, 2, 4, 4}, .out = {1, 2, 3, 5}, .mode = "linear", .ctm = "tf_crop_and_resize",
     .roi = {0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3}, .extrap = 3},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    em_attr at[10];
    int na = case_attrs(&cs[i], at);
    em_tensor *x = ot_rand(EM_F64, cs[i].R, cs[i].in, 300 + i, -1, 1);
    ot_gradcheck("resize", &x, 1, at, na, 1, 0, 1e-6);
    em_tensor_release(x);
  }
}

/* <resize(x), w> = <x, _resize_grad(w, x)>: the gradient is resize's adjoint (f64, every mode). */
static void test_resize_adjoint(void **state) {
  (void)state;
  uint64_t seed = 500;
  for (int m = 0; m < 3; m++)
    for (int t = 0; t < 7; t++) {
      ref_case rc = {.name = "adjoint", .R = 4, .in = {2, 1, 5, 6}, .out = {2, 1, 8, 4},
                     .mode = m == 0 ? "nearest" : m == 1 ? "linear" : "cubic",
                     .ctm = ctms[t], .roi = {0, 0, 0.1, -0.3, 1, 1, 1.1, 0.8}, .extrap = 2, .exclude = m == 2 && t == 0,
                     .antialias = t == 1};
      em_attr at[10];
      int na = case_attrs(&rc, at);
      em_tensor *x = ot_rand(EM_F64, 4, rc.in, seed++, -1, 1), *w = ot_rand(EM_F64, 4, rc.out, seed++, -1, 1);
      em_tensor *y = ot_run1("resize", &x, 1, at, na), *gin[2] = {w, x};
      /* The extrapolated outputs are constants: <y - resize(0), w> is the linear part. */
      em_tensor *zero = ot_tensor(EM_F64, 4, rc.in, NULL);
      em_tensor *y0 = ot_run1("resize", &zero, 1, at, na), *g = ot_run1("_resize_grad", gin, 2, at, na);
      int64_t n1, n2, n3, n4, n5;
      double *yv = ot_values(y, &n1), *wv = ot_values(w, &n2), *xv = ot_values(x, &n3), *gv = ot_values(g, &n4),
             *y0v = ot_values(y0, &n5), lhs = 0, rhs = 0;
      for (int64_t i = 0; i < n1; i++) lhs += (yv[i] - y0v[i]) * wv[i];
      for (int64_t i = 0; i < n3; i++) rhs += xv[i] * gv[i];
      if (fabs(lhs - rhs) > 1e-10 * (1 + fabs(lhs)))
        fail_msg("adjoint %s %s: <resize(x), w> = %.17g but <x, grad(w)> = %.17g", rc.mode, rc.ctm, lhs, rhs);
      free(yv), free(wv), free(xv), free(gv), free(y0v);
      em_tensor_release(x), em_tensor_release(w), em_tensor_release(y), em_tensor_release(zero);
      em_tensor_release(y0), em_tensor_release(g);
    }
}

/* A weight-0 tap is skipped: an axis kept the same size copies its values, infinities included. */
static void test_resize_special_values(void **state) {
  (void)state;
  const int64_t sh[] = {1, 4};
  const double xv[] = {1, INFINITY, NAN, -2}, want[] = {1, INFINITY, NAN, -2};
  const int64_t sizes[] = {1, 4};
  em_tensor *x = ot_tensor(EM_F64, 2, sh, xv);
  const char *modes[] = {"nearest", "linear", "cubic"};
  for (int m = 0; m < 3; m++) {
    em_attr at[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = sizes, .n = 2},
                    {.name = "mode", .type = EM_ATTR_STRING, .s = modes[m]}};
    em_tensor *y = ot_run1("resize", &x, 1, at, 2);
    ot_expect_values(y, want, 4, 0, modes[m]);
    em_tensor_release(y);
  }
  em_tensor_release(x);
}

static void test_resize_errors(void **state) {
  (void)state;
  const int64_t s4[] = {1, 2, 3, 4}, *shapes[] = {s4};
  const int nd[] = {4};
  const em_dtype f32[] = {EM_F32}, i32[] = {EM_I32};
  const int64_t sz3[] = {1, 2, 3}, sz4[] = {1, 2, 6, 8};
  const double bad_sc[] = {1, 1, 0, 2};
  em_attr none[] = {{.name = "mode", .type = EM_ATTR_STRING, .s = "linear"}};
  ot_expect_apply_fails("resize", 1, f32, nd, shapes, none, 1, 1, "sizes or scales", NULL);
  em_attr short_sizes[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = sz3, .n = 3}};
  ot_expect_apply_fails("resize", 1, f32, nd, shapes, short_sizes, 1, 1, "sizes has 3 entries", "rank 4");
  em_attr bad_mode[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = sz4, .n = 4},
                        {.name = "mode", .type = EM_ATTR_STRING, .s = "bilinear"}};
  ot_expect_apply_fails("resize", 1, f32, nd, shapes, bad_mode, 2, 1, "'bilinear'", "nearest, linear, cubic");
  em_attr bad_ctm[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = sz4, .n = 4},
                       {.name = "coordinate_transformation_mode", .type = EM_ATTR_STRING, .s = "tf_half_pixel"}};
  ot_expect_apply_fails("resize", 1, f32, nd, shapes, bad_ctm, 2, 1, "'tf_half_pixel'", "align_corners");
  em_attr scales0[] = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = bad_sc, .n = 4}};
  ot_expect_apply_fails("resize", 1, f32, nd, shapes, scales0, 1, 1, "scales[2]", NULL);
  ot_expect_apply_fails("resize", 1, i32, nd, shapes, short_sizes, 1, 1, "i32", NULL);
}


/* _resize_grad is linear in dy even where tf_crop_and_resize extrapolates: its own gradient is
 * resize's linear part (extrapolated outputs read nothing, so they give 0, not extrapolation_value). */
static void test_resize_grad_of_grad(void **state) {
  (void)state;
  ref_case rc = {.name = "tf crop", .R = 2, .in = {4, 4}, .out = {3, 5}, .mode = "linear", .ctm = "tf_crop_and_resize",
                 .roi = {-0.2, 0.1, 0.9, 1.3}, .extrap = 3};
  em_attr at[10];
  int na = case_attrs(&rc, at);
  em_tensor *in[2] = {ot_rand(EM_F64, 2, rc.out, 900, -1, 1), ot_rand(EM_F64, 2, rc.in, 901, -1, 1)};
  ot_gradcheck("_resize_grad", in, 2, at, na, 1, 2u, 1e-6);
  em_tensor_release(in[0]), em_tensor_release(in[1]);
}

/* Hostile sizes, scales and roi are refused when the graph is built, naming what is wrong, before
 * anything is allocated: an output of 2^40 elements (one axis or several), a scale whose output
 * size does not fit 64 bits, a roi that is not finite, antialias taps past the limit. */
static void test_resize_hostile_attrs(void **state) {
  (void)state;
  const int64_t s1[] = {2}, s2[] = {2, 2}, s4[] = {4}, *sh1[] = {s1}, *sh2[] = {s2}, *sh4[] = {s4};
  const int nd1[] = {1}, nd2[] = {2};
  const em_dtype f32[] = {EM_F32};
  const int64_t big1[] = {(int64_t)1 << 40}, big2[] = {(int64_t)1 << 20, (int64_t)1 << 20}, sz3[] = {3};
  const double huge[] = {1e30}, tiny[] = {1e-30}, roi_nan[] = {NAN, 1}, roi_inf[] = {-INFINITY, INFINITY};
  em_attr a1[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = big1, .n = 1}};
  ot_expect_apply_fails("resize", 1, f32, nd1, sh1, a1, 1, 1, "1099511627776", "elements");
  em_attr a2[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = big2, .n = 2}};
  ot_expect_apply_fails("resize", 1, f32, nd2, sh2, a2, 1, 1, "1099511627776", "elements");
  em_attr a3[] = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = huge, .n = 1}};
  ot_expect_apply_fails("resize", 1, f32, nd1, sh1, a3, 1, 1, "scales[0]", "too large");
  em_attr a4[] = {{.name = "scales", .type = EM_ATTR_FLOATS, .floats = tiny, .n = 1},
                  {.name = "mode", .type = EM_ATTR_STRING, .s = "linear"},
                  {.name = "antialias", .type = EM_ATTR_INT, .i = 1}};
  ot_expect_apply_fails("resize", 1, f32, nd1, sh4, a4, 3, 1, "antialias", "taps");
  for (int k = 0; k < 2; k++) {
    em_attr a5[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = sz3, .n = 1},
                    {.name = "mode", .type = EM_ATTR_STRING, .s = "linear"},
                    {.name = "coordinate_transformation_mode", .type = EM_ATTR_STRING, .s = "tf_crop_and_resize"},
                    {.name = "roi", .type = EM_ATTR_FLOATS, .floats = k ? roi_inf : roi_nan, .n = 2}};
    ot_expect_apply_fails("resize", 1, f32, nd1, sh4, a5, 4, 1, k ? "roi[0] = -inf" : "roi[0] = nan", "finite");
    /* the other modes ignore roi (ONNX's importer passes it always): not refused */
    a5[2].s = "align_corners";
    em_tensor *x = ot_rand(EM_F32, 1, s4, 950 + k, -1, 1), *y = ot_run1("resize", &x, 1, a5, 4);
    em_tensor_release(x), em_tensor_release(y);
  }
}

/* Given both sizes and a scale far from sizes / input (the op takes both; ONNX's importer passes
 * both for keep_aspect_ratio_policy), half_pixel_symmetric's offset is -inf + inf: a coordinate
 * that is not a number fails the run naming the axis instead of becoming an index. */
static void test_resize_nan_coordinate(void **state) {
  (void)state;
  const int64_t s4[] = {4}, sz5[] = {5};
  const double sc[] = {1e-310};
  em_attr at[] = {{.name = "sizes", .type = EM_ATTR_INTS, .ints = sz5, .n = 1},
                  {.name = "scales", .type = EM_ATTR_FLOATS, .floats = sc, .n = 1},
                  {.name = "coordinate_transformation_mode", .type = EM_ATTR_STRING, .s = "half_pixel_symmetric"}};
  em_tensor *x = ot_rand(EM_F32, 1, s4, 960, -1, 1), *y = NULL;
  em_status st = ot_run("resize", &x, 1, at, 3, &y, 1);
  if (st == EM_OK) {
    em_tensor_release(y);
    fail_msg("resize with a coordinate that is not a number ran");
  }
  if (!strstr(em_last_error(), "axis 0") || !strstr(em_last_error(), "not a number"))
    fail_msg("resize NaN coordinate: %s", em_last_error());
  em_tensor_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_resize_known_values),
    cmocka_unit_test(test_resize_vs_reference),
    cmocka_unit_test(test_resize_cubic_options),
    cmocka_unit_test(test_resize_antialias),
    cmocka_unit_test(test_resize_special_values),
    cmocka_unit_test(test_resize_gradcheck),
    cmocka_unit_test(test_resize_adjoint),
    cmocka_unit_test(test_resize_errors),
    cmocka_unit_test(test_resize_grad_of_grad),
    cmocka_unit_test(test_resize_hostile_attrs),
    cmocka_unit_test(test_resize_nan_coordinate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
