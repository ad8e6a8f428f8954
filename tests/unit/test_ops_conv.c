/* ops/conv.c: convolution and convolution_transpose (1-D, 2-D, 3-D; strides, dilations,
 * asymmetric pads, SAME_UPPER / SAME_LOWER / VALID, groups, depthwise, bias, output_padding,
 * output_shape) and their gradient ops, against naive float64 loops written here; finite-
 * difference gradients; thread-count determinism; error messages. */
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

/* ------------------------------------------------------------- cases --- */

/* convolution: x [n, c, in...], w [m, c/g, k...], y [n, m, ...].
 * convolution_transpose: x [n, c, in...], w [c, m/g, k...], y [n, m, ...].
 * s[i] / d[i] of 0 mean "attribute not given" (1). */
typedef struct conv_case {
  const char *name;
  int nsp;
  int64_t n, c, m, g;
  int64_t in[3], k[3], s[3], d[3];
  int has_pads;
  int64_t pads[6];
  const char *auto_pad;
  int bias, kernel_shape;
  int has_opad;
  int64_t opad[3];
  int has_oshape;
  int64_t oshape[3];
} conv_case;

static int case_attrs(const conv_case *cc, em_attr *at) {
  int n = 0, nsp = cc->nsp;
  if (cc->s[0]) at[n++] = AIS("strides", cc->s, nsp);
  if (cc->d[0]) at[n++] = AIS("dilations", cc->d, nsp);
  if (cc->has_pads) at[n++] = AIS("pads", cc->pads, 2 * nsp);
  if (cc->auto_pad) at[n++] = AS("auto_pad", cc->auto_pad);
  if (cc->g != 1) at[n++] = AI("group", cc->g);
  if (cc->kernel_shape) at[n++] = AIS("kernel_shape", cc->k, nsp);
  if (cc->has_opad) at[n++] = AIS("output_padding", cc->opad, nsp);
  if (cc->has_oshape) at[n++] = AIS("output_shape", cc->oshape, nsp);
  return n;
}

/* ---------------------------------------------------------- reference --- */

/* Spatial axes right-aligned into three (leading ones of size 1). The image side is
 * convolution's input / convolution_transpose's output; the column side the other. */
typedef struct geo {
  int64_t img[3], col[3], k[3], s[3], d[3], pb[3];
} geo;

/* Output sizes and begin padding, from ONNX's formulas, written out independently here. */
static geo ref_geom(const conv_case *cc, int transpose) {
  geo g;
  for (int j = 0; j < 3; j++) g.img[j] = g.col[j] = g.k[j] = g.s[j] = g.d[j] = 1, g.pb[j] = 0;
  int same = cc->auto_pad && !strncmp(cc->auto_pad, "SAME", 4);
  int upper = same && !strcmp(cc->auto_pad, "SAME_UPPER");
  for (int i = 0; i < cc->nsp; i++) {
    int j = 3 - cc->nsp + i;
    int64_t k = cc->k[i], s = cc->s[i] ? cc->s[i] : 1, d = cc->d[i] ? cc->d[i] : 1, dk = (k - 1) * d + 1;
    int64_t in = cc->in[i], b = cc->has_pads ? cc->pads[i] : 0, e = cc->has_pads ? cc->pads[cc->nsp + i] : 0;
    g.k[j] = k, g.s[j] = s, g.d[j] = d;
    if (!transpose) {
      g.img[j] = in;
      if (same) {
        int64_t o = (int64_t)ceil((double)in / (double)s), total = (o - 1) * s + dk - in;
        if (total < 0) total = 0;
        b = upper ? total / 2 : total - total / 2;
        e = total - b;
      }
      g.pb[j] = b;
      g.col[j] = (in + b + e - dk) / s + 1;
    } else {
      int64_t op = cc->has_opad ? cc->opad[i] : 0, full = s * (in - 1) + op + dk;
      g.col[j] = in;
      if (cc->has_oshape || same) {
        int64_t out = cc->has_oshape ? cc->oshape[i] : in * s, total = full - out;
        int64_t half = (int64_t)floor((double)total / 2.0);
        b = upper ? half : total - half;
        g.img[j] = out;
      } else {
        g.img[j] = full - b - e;
      }
      g.pb[j] = b;
    }
  }
  return g;
}

static int64_t prod3(const int64_t *v) { return v[0] * v[1] * v[2]; }

enum { WALK_FWD, WALK_ADJ, WALK_WGRAD };

/* Every (item, column channel, column position, image channel of the group, tap) whose tap
 * reads a real image element, in plain nested loops:
 *   WALK_FWD:   col[n,co,o] += img[n,ci,p] * w[co,cg,t]    (a = img, b = w, out = col)
 *   WALK_ADJ:   img[n,ci,p] += col[n,co,o] * w[co,cg,t]    (a = col, b = w, out = img)
 *   WALK_WGRAD: w[co,cg,t]  += col[n,co,o] * img[n,ci,p]   (a = col, b = img, out = w)
 * out must be zeroed by the caller. */
static void ref_walk(const geo *g, int64_t N, int64_t Ci, int64_t Co, int64_t G, int mode, const double *a,
                     const double *b, double *out) {
  int64_t cig = Ci / G, cog = Co / G, P = prod3(g->col), Q = prod3(g->img), T = prod3(g->k);
  for (int64_t n = 0; n < N; n++)
    for (int64_t co = 0; co < Co; co++)
      for (int64_t o0 = 0; o0 < g->col[0]; o0++)
        for (int64_t o1 = 0; o1 < g->col[1]; o1++)
          for (int64_t o2 = 0; o2 < g->col[2]; o2++)
            for (int64_t cg = 0; cg < cig; cg++)
              for (int64_t t0 = 0; t0 < g->k[0]; t0++)
                for (int64_t t1 = 0; t1 < g->k[1]; t1++)
                  for (int64_t t2 = 0; t2 < g->k[2]; t2++) {
                    int64_t p0 = o0 * g->s[0] - g->pb[0] + t0 * g->d[0];
                    int64_t p1 = o1 * g->s[1] - g->pb[1] + t1 * g->d[1];
                    int64_t p2 = o2 * g->s[2] - g->pb[2] + t2 * g->d[2];
                    if (p0 < 0 || p0 >= g->img[0] || p1 < 0 || p1 >= g->img[1] || p2 < 0 || p2 >= g->img[2]) continue;
                    int64_t ci = co / cog * cig + cg;
                    int64_t io = (n * Co + co) * P + (o0 * g->col[1] + o1) * g->col[2] + o2;
                    int64_t ii = (n * Ci + ci) * Q + (p0 * g->img[1] + p1) * g->img[2] + p2;
                    int64_t iw = (co * cig + cg) * T + (t0 * g->k[1] + t1) * g->k[2] + t2;
                    if (mode == WALK_FWD) out[io] += a[ii] * b[iw];
                    else if (mode == WALK_ADJ) out[ii] += a[io] * b[iw];
                    else out[iw] += a[io] * b[ii];
                  }
}

static void add_bias_ref(double *y, const double *bias, int64_t N, int64_t C, int64_t P) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t p = 0; p < P; p++) y[(n * C + c) * P + p] += bias[c];
}

/* ------------------------------------------------------------ helpers --- */

/* got (a tensor) against want (n doubles); tolerance rel * (|want| + sqrt(terms)). */
static void expect_tensor(const em_tensor *got, const double *want, int64_t n, double rel, double terms,
                          const char *what) {
  int64_t m;
  double *v = ot_values(got, &m);
  assert_int_equal(m, n);
  ot_expect_close(v, want, n, rel * sqrt(terms > 1 ? terms : 1), rel, what);
  free(v);
}

static double *zeros(int64_t n) {
  double *p = calloc((size_t)(n ? n : 1), sizeof(double));
  assert_non_null(p);
  return p;
}

/* Shapes of x, w and y for a case: conv (transpose 0) or conv_transpose (1). */
static void case_shapes(const conv_case *cc, int transpose, const geo *g, int64_t *xs, int64_t *ws, int64_t *ys) {
  int nsp = cc->nsp;
  xs[0] = cc->n, xs[1] = cc->c;
  ws[0] = transpose ? cc->c : cc->m;
  ws[1] = transpose ? cc->m / cc->g : cc->c / cc->g;
  ys[0] = cc->n, ys[1] = cc->m;
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    xs[2 + i] = cc->in[i];
    ws[2 + i] = cc->k[i];
    ys[2 + i] = transpose ? g->img[j] : g->col[j];
  }
}

/* Runs the op and its three gradient ops on random data and compares with the reference. */
static void check_case(const conv_case *cc, int transpose, em_dtype dt) {
  char what[160];
  const double rel = dt == EM_F32 ? 1e-5 : 1e-12;
  const int nd = cc->nsp + 2;
  geo g = ref_geom(cc, transpose);
  int64_t xs[5], ws[5], ys[5], bs[1] = {cc->m};
  case_shapes(cc, transpose, &g, xs, ws, ys);
  em_attr at[12];
  int na = case_attrs(cc, at);
  uint64_t seed = 1000 + (uint64_t)cc->n * 7 + (uint64_t)cc->c * 131 + (uint64_t)transpose;
  em_tensor *x = ot_rand(dt, nd, xs, seed, -1, 1), *w = ot_rand(dt, nd, ws, seed + 1, -1, 1);
  em_tensor *b = ot_rand(dt, 1, bs, seed + 2, -1, 1), *dy = ot_rand(dt, nd, ys, seed + 3, -1, 1);
  int64_t nx, nw, nb, ndy;
  double *xv = ot_values(x, &nx), *wv = ot_values(w, &nw), *bv = ot_values(b, &nb), *dyv = ot_values(dy, &ndy);
  /* Image / column channels and the reference of each op. */
  int64_t Ci = transpose ? cc->m : cc->c, Co = transpose ? cc->c : cc->m;
  double fan = (double)(Ci / cc->g * prod3(g.k)), fan_t = (double)(Co / cc->g * prod3(g.k));

  /* forward */
  em_tensor *in3[3] = {x, w, b};
  em_tensor *y = ot_run1(transpose ? "convolution_transpose" : "convolution", in3, cc->bias ? 3 : 2, at, na);
  snprintf(what, sizeof what, "%s %s %s forward", transpose ? "convolution_transpose" : "convolution", cc->name,
           em_dtype_name(dt));
  ot_expect_shape(y, dt, nd, ys, what);
  double *want = zeros(ndy);
  if (!transpose) ref_walk(&g, cc->n, Ci, Co, cc->g, WALK_FWD, xv, wv, want);
  else ref_walk(&g, cc->n, Ci, Co, cc->g, WALK_ADJ, xv, wv, want);
  if (cc->bias) add_bias_ref(want, bv, cc->n, cc->m, ndy / (cc->n * cc->m));
  expect_tensor(y, want, ndy, rel, transpose ? fan_t : fan, what);
  free(want);

  /* gradient for x */
  em_attr at2[13];
  memcpy(at2, at, sizeof(em_attr) * (size_t)na);
  at2[na] = AI("transpose", transpose);
  em_tensor *gi[3] = {dy, w, x};
  em_tensor *dx = ot_run1("_conv_grad_input", gi, 3, at2, na + 1);
  snprintf(what, sizeof what, "%s %s %s grad input", transpose ? "convolution_transpose" : "convolution", cc->name,
           em_dtype_name(dt));
  ot_expect_shape(dx, dt, nd, xs, what);
  want = zeros(nx);
  if (!transpose) ref_walk(&g, cc->n, Ci, Co, cc->g, WALK_ADJ, dyv, wv, want);
  else ref_walk(&g, cc->n, Ci, Co, cc->g, WALK_FWD, dyv, wv, want);
  expect_tensor(dx, want, nx, rel, transpose ? fan : fan_t, what);
  free(want);

  /* gradient for w */
  em_tensor *gw[3] = {x, dy, w};
  em_tensor *dw = ot_run1("_conv_grad_weight", gw, 3, at2, na + 1);
  snprintf(what, sizeof what, "%s %s %s grad weight", transpose ? "convolution_transpose" : "convolution", cc->name,
           em_dtype_name(dt));
  ot_expect_shape(dw, dt, nd, ws, what);
  want = zeros(nw);
  if (!transpose) ref_walk(&g, cc->n, Ci, Co, cc->g, WALK_WGRAD, dyv, xv, want);
  else ref_walk(&g, cc->n, Ci, Co, cc->g, WALK_WGRAD, xv, dyv, want);
  expect_tensor(dw, want, nw, rel, (double)(cc->n * (transpose ? prod3(g.img) : prod3(g.col))), what);
  free(want);

  /* gradient for the bias */
  em_tensor *db = ot_run1("_conv_grad_bias", &dy, 1, NULL, 0);
  want = zeros(cc->m);
  int64_t P = ndy / (cc->n * cc->m);
  for (int64_t n = 0; n < cc->n; n++)
    for (int64_t c = 0; c < cc->m; c++)
      for (int64_t p = 0; p < P; p++) want[c] += dyv[(n * cc->m + c) * P + p];
  snprintf(what, sizeof what, "%s %s grad bias", cc->name, em_dtype_name(dt));
  expect_tensor(db, want, cc->m, rel, (double)(cc->n * P), what);
  free(want);

  em_tensor_release(x), em_tensor_release(w), em_tensor_release(b), em_tensor_release(dy);
  em_tensor_release(y), em_tensor_release(dx), em_tensor_release(dw), em_tensor_release(db);
  free(xv), free(wv), free(bv), free(dyv);
}

/* -------------------------------------------------------------- tests --- */

static const conv_case conv_cases[] = {
  {.name = "2d defaults", .nsp = 2, .n = 1, .c = 1, .m = 1, .g = 1, .in = {5, 5}, .k = {3, 3}},
  {.name = "1d asym pads", .nsp = 1, .n = 1, .c = 3, .m = 4, .g = 1, .in = {11}, .k = {3}, .has_pads = 1, .pads = {1, 2}},
  {.name = "1d in=1 k=1", .nsp = 1, .n = 3, .c = 2, .m = 3, .g = 1, .in = {1}, .k = {1}, .bias = 1},
  {.name = "1d kernel = padded input", .nsp = 1, .n = 2, .c = 2, .m = 2, .g = 1, .in = {3}, .k = {5}, .has_pads = 1,
   .pads = {1, 1}},
  {.name = "2d stride 2 asym pads bias", .nsp = 2, .n = 3, .c = 4, .m = 6, .g = 1, .in = {7, 9}, .k = {3, 2},
   .s = {2, 2}, .has_pads = 1, .pads = {1, 0, 2, 1}, .bias = 1, .kernel_shape = 1},
  {.name = "2d dilation 2", .nsp = 2, .n = 2, .c = 3, .m = 2, .g = 1, .in = {9, 8}, .k = {3, 3}, .d = {2, 2},
   .has_pads = 1, .pads = {2, 2, 2, 2}},
  {.name = "2d stride 3 dilation 2 mixed", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {13, 10}, .k = {2, 3},
   .s = {3, 1}, .d = {2, 1}, .has_pads = 1, .pads = {0, 1, 3, 0}},
  {.name = "3d", .nsp = 3, .n = 2, .c = 2, .m = 3, .g = 1, .in = {5, 6, 4}, .k = {2, 3, 2}, .s = {1, 2, 1},
   .has_pads = 1, .pads = {1, 0, 1, 0, 1, 1}, .bias = 1},
  {.name = "3d groups dilation", .nsp = 3, .n = 1, .c = 4, .m = 2, .g = 2, .in = {6, 5, 7}, .k = {2, 2, 3},
   .d = {2, 1, 2}, .has_pads = 1, .pads = {1, 1, 2, 0, 1, 1}},
  {.name = "2d groups 2", .nsp = 2, .n = 3, .c = 4, .m = 6, .g = 2, .in = {6, 7}, .k = {3, 3}, .has_pads = 1,
   .pads = {1, 1, 1, 1}, .bias = 1},
  {.name = "2d groups 3 stride 2", .nsp = 2, .n = 2, .c = 6, .m = 3, .g = 3, .in = {9, 6}, .k = {3, 2}, .s = {2, 2}},
  {.name = "2d depthwise SAME_UPPER", .nsp = 2, .n = 2, .c = 5, .m = 5, .g = 5, .in = {9, 8}, .k = {5, 5},
   .auto_pad = "SAME_UPPER", .bias = 1},
  {.name = "2d depthwise x2 stride 2 dilation 2", .nsp = 2, .n = 3, .c = 3, .m = 6, .g = 3, .in = {11, 10},
   .k = {3, 3}, .s = {2, 2}, .d = {2, 2}, .has_pads = 1, .pads = {2, 1, 0, 2}, .bias = 1},
  {.name = "2d depthwise x2 stride 2 wide rows", .nsp = 2, .n = 1, .c = 4, .m = 8, .g = 4, .in = {9, 61},
   .k = {3, 5}, .s = {2, 2}, .auto_pad = "SAME_LOWER", .bias = 1},
  {.name = "2d depthwise x2 dilation 2 wide rows", .nsp = 2, .n = 2, .c = 3, .m = 6, .g = 3, .in = {7, 45},
   .k = {2, 3}, .d = {1, 2}, .has_pads = 1, .pads = {1, 3, 0, 1}},
  {.name = "1d depthwise stride 3", .nsp = 1, .n = 2, .c = 4, .m = 4, .g = 4, .in = {17}, .k = {4}, .s = {3},
   .has_pads = 1, .pads = {2, 1}},
  {.name = "3d depthwise", .nsp = 3, .n = 1, .c = 3, .m = 3, .g = 3, .in = {5, 6, 7}, .k = {3, 2, 3},
   .auto_pad = "SAME_LOWER", .bias = 1},
  {.name = "2d SAME_UPPER even kernel", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {7, 6}, .k = {4, 2},
   .auto_pad = "SAME_UPPER"},
  {.name = "2d SAME_LOWER even kernel", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {7, 6}, .k = {4, 2},
   .auto_pad = "SAME_LOWER"},
  {.name = "2d SAME_UPPER odd kernel stride 2", .nsp = 2, .n = 3, .c = 2, .m = 2, .g = 1, .in = {9, 8}, .k = {3, 5},
   .s = {2, 2}, .auto_pad = "SAME_UPPER"},
  {.name = "2d SAME_LOWER even kernel stride 2", .nsp = 2, .n = 2, .c = 2, .m = 2, .g = 1, .in = {9, 8}, .k = {4, 2},
   .s = {2, 3}, .auto_pad = "SAME_LOWER"},
  {.name = "2d VALID", .nsp = 2, .n = 1, .c = 3, .m = 2, .g = 1, .in = {8, 7}, .k = {3, 3}, .s = {2, 2},
   .auto_pad = "VALID"},
  {.name = "2d 1x1", .nsp = 2, .n = 3, .c = 5, .m = 4, .g = 1, .in = {6, 5}, .k = {1, 1}, .bias = 1},
  {.name = "2d 1x1 groups", .nsp = 2, .n = 2, .c = 6, .m = 4, .g = 2, .in = {3, 7}, .k = {1, 1}},
  {.name = "2d 1x1 stride 2", .nsp = 2, .n = 2, .c = 3, .m = 2, .g = 1, .in = {7, 6}, .k = {1, 1}, .s = {2, 2}},
  {.name = "2d batch chunks", .nsp = 2, .n = 4, .c = 8, .m = 16, .g = 1, .in = {20, 20}, .k = {3, 3},
   .has_pads = 1, .pads = {1, 1, 1, 1}, .bias = 1},
  {.name = "2d uneven batch chunks", .nsp = 2, .n = 3, .c = 8, .m = 4, .g = 2, .in = {100, 100}, .k = {5, 5},
   .has_pads = 1, .pads = {2, 2, 2, 2}},
  {.name = "2d depthwise 32x128x128 5x5", .nsp = 2, .n = 1, .c = 32, .m = 32, .g = 32, .in = {128, 128},
   .k = {5, 5}, .auto_pad = "SAME_UPPER", .bias = 1},
  /* the fused forward: output-position windows across rows, two tiles of output channels */
  {.name = "2d 140 output channels windows", .nsp = 2, .n = 2, .c = 3, .m = 140, .g = 1, .in = {23, 29},
   .k = {3, 2}, .s = {1, 2}, .has_pads = 1, .pads = {1, 0, 2, 1}, .bias = 1},
  /* weight gradient: two tiles of image channels and of output channels, six windows in six segments */
  {.name = "2d 130 -> 140 channels weight-gradient tiles", .nsp = 2, .n = 3, .c = 130, .m = 140, .g = 1,
   .in = {9, 40}, .k = {2, 2}, .has_pads = 1, .pads = {1, 0, 0, 1}},
  /* review: a begin pad wider than a position tile: the last tap's zeros before lo run past the window */
  {.name = "1d begin pad beyond a position tile", .nsp = 1, .n = 1, .c = 2, .m = 3, .g = 1, .in = {10}, .k = {2},
   .has_pads = 1, .pads = {300, 0}},
  {.name = "2d begin pad beyond the window's last row segment", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1,
   .in = {10, 10}, .k = {2, 2}, .has_pads = 1, .pads = {0, 30, 0, 0}},
  {.name = "3d groups windows", .nsp = 3, .n = 2, .c = 4, .m = 6, .g = 2, .in = {5, 9, 11}, .k = {2, 3, 3},
   .s = {1, 1, 2}, .d = {2, 1, 1}, .has_pads = 1, .pads = {1, 1, 0, 0, 2, 1}},
  /* rows of a register block and a tail; a left pad wider than the kernel reaches */
  {.name = "2d depthwise wide rows pads beyond kernel", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 2, .in = {3, 150},
   .k = {3, 4}, .d = {1, 2}, .has_pads = 1, .pads = {1, 7, 0, 2}, .bias = 1},
  {.name = "2d depthwise x3 wide rows SAME_LOWER", .nsp = 2, .n = 2, .c = 2, .m = 6, .g = 2, .in = {4, 70},
   .k = {2, 3}, .auto_pad = "SAME_LOWER"},
  {.name = "2d depthwise stride 2 wide rows", .nsp = 2, .n = 1, .c = 3, .m = 3, .g = 3, .in = {5, 260},
   .k = {3, 3}, .s = {1, 2}, .has_pads = 1, .pads = {1, 1, 1, 1}},
  /* review edge cases: depthwise gathers over zero-padded planes */
  {.name = "1d depthwise kernel wider than image", .nsp = 1, .n = 2, .c = 3, .m = 3, .g = 3, .in = {3}, .k = {7},
   .has_pads = 1, .pads = {3, 3}, .bias = 1},
  {.name = "1d depthwise x2 dilated taps beyond image", .nsp = 1, .n = 1, .c = 2, .m = 4, .g = 2, .in = {4}, .k = {3},
   .d = {5}, .has_pads = 1, .pads = {5, 5}},
  {.name = "1d depthwise x3 output width 1", .nsp = 1, .n = 2, .c = 2, .m = 6, .g = 2, .in = {5}, .k = {5}, .bias = 1},
  {.name = "2d depthwise image width 1", .nsp = 2, .n = 1, .c = 3, .m = 3, .g = 3, .in = {6, 1}, .k = {3, 3},
   .has_pads = 1, .pads = {1, 1, 1, 1}},
  {.name = "2d depthwise left pad 70 wide", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 2, .in = {2, 100}, .k = {1, 3},
   .has_pads = 1, .pads = {0, 70, 0, 5}, .bias = 1},
  {.name = "2d depthwise end pad 140", .nsp = 2, .n = 1, .c = 2, .m = 4, .g = 2, .in = {2, 5}, .k = {2, 3},
   .has_pads = 1, .pads = {0, 0, 1, 140}},
  {.name = "3d depthwise x2 wide rows", .nsp = 3, .n = 1, .c = 2, .m = 4, .g = 2, .in = {3, 2, 130}, .k = {2, 2, 3},
   .s = {2, 1, 1}, .d = {1, 1, 2}, .has_pads = 1, .pads = {1, 0, 3, 0, 1, 0}, .bias = 1},
  {.name = "1d depthwise stride 2 dilation 3 wide", .nsp = 1, .n = 1, .c = 2, .m = 2, .g = 2, .in = {300}, .k = {4},
   .s = {2}, .d = {3}, .has_pads = 1, .pads = {4, 1}},
  {.name = "1d depthwise stride above kernel", .nsp = 1, .n = 1, .c = 2, .m = 2, .g = 2, .in = {20}, .k = {2},
   .s = {5}},
  {.name = "2d depthwise zero-width image", .nsp = 2, .n = 1, .c = 2, .m = 4, .g = 2, .in = {3, 0}, .k = {1, 3},
   .has_pads = 1, .pads = {0, 2, 0, 2}, .bias = 1},
  {.name = "1d depthwise 64 outputs", .nsp = 1, .n = 1, .c = 2, .m = 2, .g = 2, .in = {66}, .k = {3}},
  {.name = "1d depthwise 65 outputs", .nsp = 1, .n = 1, .c = 2, .m = 2, .g = 2, .in = {67}, .k = {3}},
  {.name = "1d depthwise 128 outputs", .nsp = 1, .n = 1, .c = 2, .m = 2, .g = 2, .in = {128}, .k = {3},
   .has_pads = 1, .pads = {1, 1}},
  {.name = "2d depthwise x8 wide rows", .nsp = 2, .n = 2, .c = 2, .m = 16, .g = 2, .in = {3, 70}, .k = {2, 3},
   .has_pads = 1, .pads = {1, 2, 0, 3}, .bias = 1},
  {.name = "2d depthwise many planes threads", .nsp = 2, .n = 3, .c = 24, .m = 48, .g = 24, .in = {20, 90},
   .k = {3, 5}, .d = {1, 2}, .has_pads = 1, .pads = {1, 4, 1, 4}, .bias = 1},
};

static void test_conv_values(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    check_case(&conv_cases[i], 0, EM_F32);
    check_case(&conv_cases[i], 0, EM_F64);
  }
}

static const conv_case transpose_cases[] = {
  {.name = "1d defaults", .nsp = 1, .n = 1, .c = 2, .m = 3, .g = 1, .in = {5}, .k = {3}},
  {.name = "1d stride 2 pads output_padding", .nsp = 1, .n = 2, .c = 3, .m = 4, .g = 1, .in = {6}, .k = {3},
   .s = {2}, .has_pads = 1, .pads = {1, 0}, .has_opad = 1, .opad = {1}, .bias = 1},
  {.name = "2d groups 2 stride 2 asym pads", .nsp = 2, .n = 2, .c = 4, .m = 6, .g = 2, .in = {4, 5}, .k = {3, 3},
   .s = {2, 2}, .has_pads = 1, .pads = {1, 1, 0, 2}, .bias = 1, .kernel_shape = 1},
  {.name = "2d dilation 2 stride 3", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {4, 3}, .k = {2, 3},
   .s = {3, 1}, .d = {2, 2}, .has_opad = 1, .opad = {1, 1}},
  {.name = "2d SAME_UPPER stride 2", .nsp = 2, .n = 3, .c = 2, .m = 2, .g = 1, .in = {4, 5}, .k = {3, 4},
   .s = {2, 2}, .auto_pad = "SAME_UPPER"},
  {.name = "2d SAME_LOWER stride 2", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 1, .in = {4, 5}, .k = {3, 4},
   .s = {2, 2}, .auto_pad = "SAME_LOWER"},
  {.name = "2d SAME_UPPER kernel below stride", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {3, 4}, .k = {1, 2},
   .s = {2, 3}, .auto_pad = "SAME_UPPER"},
  {.name = "2d SAME_LOWER kernel below stride", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {3, 4}, .k = {1, 2},
   .s = {2, 3}, .auto_pad = "SAME_LOWER"},
  {.name = "2d output_shape", .nsp = 2, .n = 2, .c = 3, .m = 2, .g = 1, .in = {4, 4}, .k = {3, 3}, .s = {2, 2},
   .has_oshape = 1, .oshape = {8, 9}},
  {.name = "2d VALID", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 1, .in = {3, 4}, .k = {2, 3}, .s = {2, 1},
   .auto_pad = "VALID"},
  {.name = "3d", .nsp = 3, .n = 2, .c = 2, .m = 2, .g = 1, .in = {3, 4, 2}, .k = {2, 3, 2}, .s = {2, 1, 2},
   .has_pads = 1, .pads = {0, 1, 1, 1, 0, 0}, .bias = 1},
  {.name = "2d depthwise", .nsp = 2, .n = 2, .c = 3, .m = 3, .g = 3, .in = {5, 6}, .k = {3, 3}, .s = {2, 1},
   .has_pads = 1, .pads = {1, 1, 1, 1}, .bias = 1},
  {.name = "2d 1x1", .nsp = 2, .n = 3, .c = 4, .m = 5, .g = 1, .in = {3, 5}, .k = {1, 1}},
  {.name = "2d batch chunks", .nsp = 2, .n = 3, .c = 6, .m = 4, .g = 2, .in = {16, 12}, .k = {3, 3}, .s = {2, 2},
   .has_pads = 1, .pads = {1, 1, 1, 1}, .has_opad = 1, .opad = {1, 1}},
  /* stride 1: the adjoint runs as a convolution with the flipped kernel */
  {.name = "2d stride 1 dilation groups", .nsp = 2, .n = 2, .c = 4, .m = 6, .g = 2, .in = {5, 7}, .k = {3, 2},
   .d = {2, 1}, .has_pads = 1, .pads = {1, 0, 2, 1}, .bias = 1},
  {.name = "2d stride 1 output_shape above full", .nsp = 2, .n = 1, .c = 3, .m = 5, .g = 1, .in = {4, 6},
   .k = {2, 3}, .has_oshape = 1, .oshape = {6, 9}},
  {.name = "3d stride 1 pads", .nsp = 3, .n = 1, .c = 2, .m = 3, .g = 1, .in = {3, 4, 5}, .k = {2, 2, 3},
   .has_pads = 1, .pads = {1, 0, 1, 0, 1, 1}},
  /* review: the flipped-kernel forward with a begin pad (-pb) wider than a position tile */
  {.name = "1d stride 1 output_shape far above full", .nsp = 1, .n = 1, .c = 2, .m = 3, .g = 1, .in = {10},
   .k = {2}, .has_oshape = 1, .oshape = {600}},
  /* review: the input gradient (image -> column) with a begin pad beyond a position tile */
  {.name = "1d stride 2 pads beyond a position tile", .nsp = 1, .n = 1, .c = 2, .m = 3, .g = 1, .in = {300},
   .k = {2}, .s = {2}, .has_pads = 1, .pads = {400, 0}},
  /* the depthwise adjoint gather over rows of a register block and a tail */
  {.name = "2d depthwise wide rows", .nsp = 2, .n = 1, .c = 3, .m = 3, .g = 3, .in = {3, 80}, .k = {3, 3},
   .has_pads = 1, .pads = {1, 2, 0, 1}, .bias = 1},
  {.name = "2d depthwise x2 wide rows dilation output_padding", .nsp = 2, .n = 2, .c = 2, .m = 4, .g = 2,
   .in = {4, 70}, .k = {2, 3}, .s = {2, 1}, .d = {1, 3}, .has_pads = 1, .pads = {0, 4, 1, 0}, .has_opad = 1,
   .opad = {1, 0}},
  /* review edge cases: negative begin pads (output_shape above the full size), large positive ones, multipliers */
  {.name = "2d depthwise output_shape above full", .nsp = 2, .n = 1, .c = 3, .m = 3, .g = 3, .in = {3, 5},
   .k = {2, 3}, .has_oshape = 1, .oshape = {4, 12}, .bias = 1},
  {.name = "2d depthwise output_shape below full", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 2, .in = {2, 80},
   .k = {3, 3}, .has_oshape = 1, .oshape = {2, 10}},
  {.name = "2d depthwise x2 output_shape wide", .nsp = 2, .n = 2, .c = 6, .m = 3, .g = 3, .in = {4, 70},
   .k = {3, 3}, .has_oshape = 1, .oshape = {5, 90}, .bias = 1},
  {.name = "2d depthwise zero-width input", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 2, .in = {3, 0}, .k = {2, 3},
   .bias = 1},
  {.name = "1d depthwise output width 1", .nsp = 1, .n = 1, .c = 2, .m = 2, .g = 2, .in = {3}, .k = {2},
   .has_oshape = 1, .oshape = {1}},
  {.name = "2d depthwise SAME_UPPER kernel below stride", .nsp = 2, .n = 1, .c = 3, .m = 3, .g = 3, .in = {3, 4},
   .k = {1, 2}, .s = {2, 3}, .auto_pad = "SAME_UPPER"},
  {.name = "1d depthwise x2 SAME_LOWER kernel below stride", .nsp = 1, .n = 1, .c = 4, .m = 2, .g = 2, .in = {70},
   .k = {1}, .s = {3}, .auto_pad = "SAME_LOWER"},
};

static void test_conv_transpose_values(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof transpose_cases / sizeof transpose_cases[0]; i++) {
    check_case(&transpose_cases[i], 1, EM_F32);
    check_case(&transpose_cases[i], 1, EM_F64);
  }
}

/* A hand-computed value: a 1-D [1,2,3] with kernel [1,1] and pads 1 gives [1,3,5,3]. */
static void test_conv_known_values(void **state) {
  (void)state;
  int64_t xs[3] = {1, 1, 3}, ws[3] = {1, 1, 2}, pads[2] = {1, 1};
  double xv[3] = {1, 2, 3}, wv[2] = {1, 1}, want[4] = {1, 3, 5, 3};
  em_tensor *in[2] = {ot_tensor(EM_F64, 3, xs, xv), ot_tensor(EM_F64, 3, ws, wv)};
  em_attr at[1] = {AIS("pads", pads, 2)};
  em_tensor *y = ot_run1("convolution", in, 2, at, 1);
  expect_tensor(y, want, 4, 1e-15, 1, "known convolution");
  em_tensor_release(y);
  /* its transpose scatters [1,1] back: [1,2,3] -> [1+2, 2+3] with pads 1 removing the ends */
  double want_t[2] = {3, 5};
  y = ot_run1("convolution_transpose", in, 2, at, 1);
  expect_tensor(y, want_t, 2, 1e-15, 1, "known convolution_transpose");
  em_tensor_release(y), em_tensor_release(in[0]), em_tensor_release(in[1]);
}

static void gradcheck_case(const conv_case *cc, int transpose) {
  geo g = ref_geom(cc, transpose);
  int64_t xs[5], ws[5], ys[5], bs[1] = {cc->m};
  case_shapes(cc, transpose, &g, xs, ws, ys);
  em_attr at[12];
  int na = case_attrs(cc, at), nd = cc->nsp + 2;
  em_tensor *in[3] = {ot_rand(EM_F64, nd, xs, 77, -1, 1), ot_rand(EM_F64, nd, ws, 78, -1, 1),
                      ot_rand(EM_F64, 1, bs, 79, -1, 1)};
  ot_gradcheck(transpose ? "convolution_transpose" : "convolution", in, cc->bias ? 3 : 2, at, na, 1, 0, 1e-6);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
}

static const conv_case grad_conv_cases[] = {
  {.name = "2d stride 2 asym pads bias", .nsp = 2, .n = 2, .c = 3, .m = 4, .g = 1, .in = {6, 7}, .k = {3, 2},
   .s = {2, 2}, .has_pads = 1, .pads = {1, 0, 2, 1}, .bias = 1},
  {.name = "2d dilation groups", .nsp = 2, .n = 2, .c = 4, .m = 2, .g = 2, .in = {7, 6}, .k = {2, 3}, .d = {2, 2},
   .has_pads = 1, .pads = {1, 2, 1, 0}, .bias = 1},
  {.name = "2d depthwise x2 SAME_UPPER stride 2", .nsp = 2, .n = 2, .c = 3, .m = 6, .g = 3, .in = {7, 6},
   .k = {4, 3}, .s = {2, 2}, .auto_pad = "SAME_UPPER", .bias = 1},
  {.name = "1d SAME_LOWER", .nsp = 1, .n = 3, .c = 2, .m = 3, .g = 1, .in = {9}, .k = {4}, .s = {2},
   .auto_pad = "SAME_LOWER", .bias = 1},
  {.name = "3d", .nsp = 3, .n = 1, .c = 2, .m = 2, .g = 1, .in = {4, 5, 3}, .k = {2, 3, 2}, .s = {2, 1, 1},
   .d = {1, 1, 2}, .has_pads = 1, .pads = {1, 1, 0, 0, 1, 1}, .bias = 1},
  {.name = "2d 1x1 groups", .nsp = 2, .n = 2, .c = 4, .m = 6, .g = 2, .in = {3, 4}, .k = {1, 1}, .bias = 1},
  {.name = "2d depthwise wide rows", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 2, .in = {3, 67}, .k = {3, 3},
   .has_pads = 1, .pads = {1, 1, 1, 2}, .bias = 1},
  {.name = "2d stride 1 pads beyond the kernel", .nsp = 2, .n = 2, .c = 3, .m = 2, .g = 1, .in = {4, 5}, .k = {2, 2},
   .d = {1, 2}, .has_pads = 1, .pads = {3, 4, 2, 1}, .bias = 1},
  {.name = "1d depthwise x2 kernel wider than image", .nsp = 1, .n = 1, .c = 2, .m = 4, .g = 2, .in = {3}, .k = {7},
   .has_pads = 1, .pads = {4, 2}, .bias = 1},
  {.name = "2d depthwise left pad beyond kernel", .nsp = 2, .n = 1, .c = 2, .m = 2, .g = 2, .in = {2, 6}, .k = {2, 2},
   .d = {1, 2}, .has_pads = 1, .pads = {0, 9, 1, 0}},
};

static const conv_case grad_transpose_cases[] = {
  {.name = "2d groups stride 2 output_padding", .nsp = 2, .n = 2, .c = 4, .m = 2, .g = 2, .in = {3, 4}, .k = {3, 2},
   .s = {2, 2}, .has_pads = 1, .pads = {1, 0, 0, 1}, .has_opad = 1, .opad = {1, 0}, .bias = 1},
  {.name = "2d SAME_UPPER kernel below stride", .nsp = 2, .n = 1, .c = 2, .m = 3, .g = 1, .in = {3, 3}, .k = {1, 2},
   .s = {2, 3}, .auto_pad = "SAME_UPPER", .bias = 1},
  {.name = "1d dilation", .nsp = 1, .n = 2, .c = 3, .m = 2, .g = 1, .in = {5}, .k = {3}, .d = {2}, .s = {2},
   .has_pads = 1, .pads = {2, 1}},
  {.name = "2d depthwise", .nsp = 2, .n = 2, .c = 3, .m = 3, .g = 3, .in = {4, 3}, .k = {3, 3}, .s = {2, 1},
   .has_pads = 1, .pads = {1, 1, 1, 1}, .bias = 1},
  {.name = "3d output_shape", .nsp = 3, .n = 1, .c = 2, .m = 2, .g = 1, .in = {2, 3, 2}, .k = {2, 2, 3},
   .s = {2, 2, 1}, .has_oshape = 1, .oshape = {5, 6, 3}},
  {.name = "2d depthwise x2 output_shape above full", .nsp = 2, .n = 1, .c = 4, .m = 2, .g = 2, .in = {3, 4},
   .k = {2, 3}, .has_oshape = 1, .oshape = {4, 9}, .bias = 1},
};

static void test_conv_gradcheck(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof grad_conv_cases / sizeof grad_conv_cases[0]; i++) gradcheck_case(&grad_conv_cases[i], 0);
}

static void test_conv_transpose_gradcheck(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof grad_transpose_cases / sizeof grad_transpose_cases[0]; i++)
    gradcheck_case(&grad_transpose_cases[i], 1);
}

/* The same bits with 1 and 3 threads, for every kernel path (general im2col with batch
 * chunks, depthwise, 1x1, weight gradients reduced in segments) and every op. (OpenBLAS's
 * own threading changes bits on AVX2 CPUs; run with OPENBLAS_CORETYPE=Haswell, or under
 * valgrind, to exercise that case on an AVX-512 machine.) */
static void run_all(const conv_case *cc, em_tensor **in, em_tensor **outs) {
  em_attr at[13];
  int na = case_attrs(cc, at);
  at[na] = AI("transpose", 0);
  outs[0] = ot_run1("convolution", in, 3, at, na);
  em_tensor *gi[3] = {in[3], in[1], in[0]}, *gw[3] = {in[0], in[3], in[1]};
  outs[1] = ot_run1("_conv_grad_input", gi, 3, at, na + 1);
  outs[2] = ot_run1("_conv_grad_weight", gw, 3, at, na + 1);
  outs[3] = ot_run1("_conv_grad_bias", &in[3], 1, NULL, 0);
}

static void test_conv_thread_determinism(void **state) {
  (void)state;
  static const conv_case cases[] = {
    {.name = "general", .nsp = 2, .n = 5, .c = 6, .m = 8, .g = 2, .in = {33, 31}, .k = {3, 3}, .s = {1, 2},
     .has_pads = 1, .pads = {1, 1, 1, 1}},
    {.name = "depthwise", .nsp = 2, .n = 2, .c = 16, .m = 16, .g = 16, .in = {64, 64}, .k = {5, 5},
     .auto_pad = "SAME_UPPER"},
    {.name = "1x1 segmented weight gradient", .nsp = 2, .n = 2, .c = 8, .m = 8, .g = 1, .in = {128, 130}, .k = {1, 1}},
    /* a deep pointwise layer on a small image (MobileNet's last): GEMM libraries like to split
     * such products along their reduction when they have threads to spare */
    {.name = "deep pointwise", .nsp = 2, .n = 1, .c = 320, .m = 256, .g = 1, .in = {7, 7}, .k = {1, 1}},
    {.name = "deep 3x3 on a small image", .nsp = 2, .n = 1, .c = 256, .m = 64, .g = 1, .in = {4, 4}, .k = {3, 3},
     .has_pads = 1, .pads = {1, 1, 1, 1}},
    {.name = "segmented weight gradient", .nsp = 2, .n = 2, .c = 4, .m = 8, .g = 1, .in = {96, 96}, .k = {3, 3},
     .has_pads = 1, .pads = {1, 1, 1, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const conv_case *cc = &cases[c];
    geo g = ref_geom(cc, 0);
    int64_t xs[5], ws[5], ys[5], bs[1] = {cc->m};
    case_shapes(cc, 0, &g, xs, ws, ys);
    em_tensor *in[4] = {ot_rand(EM_F32, 4, xs, 5, -1, 1), ot_rand(EM_F32, 4, ws, 6, -1, 1),
                        ot_rand(EM_F32, 1, bs, 7, -1, 1), ot_rand(EM_F32, 4, ys, 8, -1, 1)};
    em_tensor *one[4], *many[4];
    assert_int_equal(em_set_num_threads(1), EM_OK);
    run_all(cc, in, one);
    assert_int_equal(em_set_num_threads(3), EM_OK);
    run_all(cc, in, many);
    assert_int_equal(em_set_num_threads(0), EM_OK);
    for (int i = 0; i < 4; i++) {
      size_t bytes = (size_t)em_tensor_numel(one[i]) * sizeof(float);
      if (memcmp(em_tensor_data(one[i]), em_tensor_data(many[i]), bytes))
        fail_msg("%s: output %d differs between 1 and 3 threads", cc->name, i);
      em_tensor_release(one[i]), em_tensor_release(many[i]), em_tensor_release(in[i]);
    }
  }
}

/* A graph with a dynamic batch axis: shapes carry -1 while it is built (forward and gradient
 * ops), and a run with 3 items matches the ops run directly. */
static void test_conv_dynamic_batch(void **state) {
  (void)state;
  int64_t xs_dyn[4] = {-1, 4, 7, 6}, ws[4] = {6, 2, 3, 2}, ys_dyn[4] = {-1, 6, 4, 6}, bs[1] = {6};
  int64_t xs[4] = {3, 4, 7, 6}, ys[4] = {3, 6, 4, 6}, strides[2] = {2, 1}, pads[4] = {1, 0, 1, 1};
  em_attr at[3] = {AIS("strides", strides, 2), AIS("pads", pads, 4), AI("group", 2)};
  em_tensor *xt = ot_rand(EM_F64, 4, xs, 91, -1, 1), *wt = ot_rand(EM_F64, 4, ws, 92, -1, 1);
  em_tensor *bt = ot_rand(EM_F64, 1, bs, 93, -1, 1), *dyt = ot_rand(EM_F64, 4, ys, 94, -1, 1);
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  em_var x, w, b, dy, y, loss, grads[3];
  em_init from_w = {.kind = EM_INIT_FROM_DATA, .data = wt}, from_b = {.kind = EM_INIT_FROM_DATA, .data = bt};
  assert_int_equal(em_input(g, "x", EM_F64, 4, xs_dyn, &x), EM_OK);
  assert_int_equal(em_input(g, "dy", EM_F64, 4, ys_dyn, &dy), EM_OK);
  assert_int_equal(em_parameter(g, "w", EM_F64, 4, ws, &from_w, &w), EM_OK);
  assert_int_equal(em_parameter(g, "b", EM_F64, 1, bs, &from_b, &b), EM_OK);
  em_var in[3] = {x, w, b};
  if (em_apply(g, "convolution", in, 3, at, 3, &y, 1)) fail_msg("convolution: %s", em_last_error());
  int nd;
  int64_t shape[EM_MAX_DIMS];
  assert_int_equal(em_var_info(g, y, NULL, &nd, shape), EM_OK);
  assert_int_equal(nd, 4);
  assert_memory_equal(shape, ys_dyn, sizeof ys_dyn);
  em_var pair[2] = {y, dy};
  if (em_apply(g, "_weighted_sum", pair, 2, NULL, 0, &loss, 1)) fail_msg("_weighted_sum: %s", em_last_error());
  em_var xs_v[3] = {x, w, b};
  if (em_gradients(g, loss, xs_v, 3, grads)) fail_msg("em_gradients: %s", em_last_error());
  em_var outs[4] = {y, grads[0], grads[1], grads[2]};
  em_exec *e;
  assert_int_equal(em_exec_create(g, outs, 4, em_cpu(), &e), EM_OK);
  em_feed feeds[2] = {{x, xt}, {dy, dyt}};
  em_tensor *got[4];
  if (em_exec_run(e, feeds, 2, got)) fail_msg("run: %s", em_last_error());
  em_attr at_t[4] = {at[0], at[1], at[2], AI("transpose", 0)};
  em_tensor *fw[3] = {xt, wt, bt}, *gi[3] = {dyt, wt, xt}, *gw[3] = {xt, dyt, wt};
  em_tensor *want[4] = {ot_run1("convolution", fw, 3, at, 3), ot_run1("_conv_grad_input", gi, 3, at_t, 4),
                        ot_run1("_conv_grad_weight", gw, 3, at_t, 4), ot_run1("_conv_grad_bias", &dyt, 1, NULL, 0)};
  for (int i = 0; i < 4; i++) {
    int64_t n;
    double *wv = ot_values(want[i], &n);
    expect_tensor(got[i], wv, n, 1e-12, 1, "dynamic batch");
    free(wv);
    em_tensor_release(got[i]), em_tensor_release(want[i]);
  }
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(bt), em_tensor_release(dyt);
}

/* ------------------------------------------------------------- errors --- */

static void fails(const char *op, int n_in, em_dtype dx, const int64_t *xs, int ndx, const int64_t *ws, int ndw,
                  const int64_t *bs, const em_attr *at, int na, const char *n1, const char *n2) {
  em_dtype dts[3] = {dx, dx, dx};
  int nds[3] = {ndx, ndw, 1};
  const int64_t *shapes[3] = {xs, ws, bs};
  ot_expect_apply_fails(op, n_in, dts, nds, shapes, at, na, 1, n1, n2);
}

static void test_conv_errors(void **state) {
  (void)state;
  int64_t x4[4] = {1, 3, 5, 5}, w_c2[4] = {4, 2, 3, 3}, w_c1[4] = {4, 1, 3, 3}, x4c4[4] = {1, 4, 5, 5};
  int64_t w_m3[4] = {3, 2, 3, 3}, w5[4] = {1, 3, 8, 8}, w_ok[4] = {4, 3, 3, 3}, x3[3] = {1, 3, 5}, x2[2] = {3, 5};
  int64_t b_bad[1] = {5}, two[2] = {1, 1}, three[3] = {1, 1, 1}, neg[4] = {-1, 0, 0, 0}, k_bad[2] = {3, 2};
  int64_t zero[2] = {0, 0}, x6[6] = {1, 1, 2, 2, 2, 2}, w6[6] = {1, 1, 1, 1, 1, 1};
  em_attr g2 = AI("group", 2), g0 = AI("group", 0);

  /* channel mismatch names both shapes */
  fails("convolution", 2, EM_F32, x4, 4, w_c2, 4, NULL, NULL, 0, "f32[1,3,5,5]", "f32[4,2,3,3]");
  fails("convolution", 2, EM_F32, x4, 4, w_c2, 4, NULL, NULL, 0, "channel mismatch", NULL);
  /* group not dividing C, not dividing M, below 1 */
  fails("convolution", 2, EM_F32, x4, 4, w_c1, 4, NULL, &g2, 1, "group 2", "3 channels");
  fails("convolution", 2, EM_F32, x4c4, 4, w_m3, 4, NULL, &g2, 1, "group 2", "3 output channels");
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &g0, 1, "group", ">= 1");
  /* kernel larger than the padded input */
  fails("convolution", 2, EM_F32, x4, 4, w5, 4, NULL, NULL, 0, "larger than the padded input", "axis 0");
  em_attr p1 = AIS("pads", (int64_t[]){1, 1, 1, 1}, 4);
  fails("convolution", 2, EM_F32, x4, 4, w5, 4, NULL, &p1, 1, "larger than the padded input", "pads 1");
  /* negative pads, wrong attribute lengths and values */
  em_attr pn = AIS("pads", neg, 4);
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &pn, 1, "pads[0]", ">= 0");
  em_attr s3 = AIS("strides", three, 3), s0 = AIS("strides", zero, 2), d0 = AIS("dilations", zero, 2);
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &s3, 1, "strides", "expected 2");
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &s0, 1, "strides[0]", ">= 1");
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &d0, 1, "dilations[0]", ">= 1");
  em_attr ap = AS("auto_pad", "SAME"), ks = AIS("kernel_shape", k_bad, 2);
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &ap, 1, "auto_pad", "SAME_UPPER");
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &ks, 1, "kernel_shape[1]", "3");
  em_attr both[2] = {AIS("pads", (int64_t[]){0, 0, 0, 0}, 4), AS("auto_pad", "SAME_UPPER")};
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, both, 2, "pads", "auto_pad");
  em_attr opad = AIS("output_padding", two, 2);
  fails("convolution", 2, EM_F32, x4, 4, w_ok, 4, NULL, &opad, 1, "output_padding", "convolution_transpose");
  /* wrong ranks and dtypes */
  fails("convolution", 2, EM_F32, x3, 3, w_ok, 4, NULL, NULL, 0, "rank", "f32[1,3,5]");
  fails("convolution", 2, EM_F32, x2, 2, x2, 2, NULL, NULL, 0, "rank 3 to 5", "rank 2");
  fails("convolution", 2, EM_F32, x6, 6, w6, 6, NULL, NULL, 0, "rank 3 to 5", "rank 6");
  fails("convolution", 2, EM_I32, x4, 4, w_ok, 4, NULL, NULL, 0, "i32", "f32 or f64");
  {
    em_dtype dts[2] = {EM_F32, EM_F64};
    int nds[2] = {4, 4};
    const int64_t *shapes[2] = {x4, w_ok};
    ot_expect_apply_fails("convolution", 2, dts, nds, shapes, NULL, 0, 1, "f64", "input 1");
  }
  /* bias */
  fails("convolution", 3, EM_F32, x4, 4, w_ok, 4, b_bad, NULL, 0, "bias", "[4]");
  /* convolution_transpose: weights are [C, M/group, k...] */
  int64_t wt_bad[4] = {4, 2, 3, 3}, wt_ok[4] = {3, 2, 3, 3};
  fails("convolution_transpose", 2, EM_F32, x4, 4, wt_bad, 4, NULL, NULL, 0, "channel mismatch", "f32[4,2,3,3]");
  em_attr big_opad[2] = {AIS("output_padding", two, 2), AIS("strides", two, 2)};
  fails("convolution_transpose", 2, EM_F32, x4, 4, wt_ok, 4, NULL, big_opad, 2, "output_padding[0]", "stride 1");
  fails("convolution_transpose", 2, EM_F32, x4, 4, wt_ok, 4, NULL, &g2, 1, "group 2", "3 channels");
  em_attr big_pads = AIS("pads", (int64_t[]){4, 0, 4, 0}, 4);
  fails("convolution_transpose", 2, EM_F32, x4, 4, wt_ok, 4, NULL, &big_pads, 1, "output would have", "axis 0");
  /* gradient ops: the gradient must match the forward output */
  {
    em_dtype dts[3] = {EM_F32, EM_F32, EM_F32};
    int nds[3] = {4, 4, 4};
    int64_t dy_bad[4] = {1, 4, 2, 2};
    const int64_t *shapes[3] = {dy_bad, w_ok, x4};
    ot_expect_apply_fails("_conv_grad_input", 3, dts, nds, shapes, NULL, 0, 1, "f32[1,4,2,2]", "f32[1,4,3,3]");
    const int64_t *shapes_w[3] = {x4, dy_bad, w_ok};
    ot_expect_apply_fails("_conv_grad_weight", 3, dts, nds, shapes_w, NULL, 0, 1, "does not match", "f32[1,4,3,3]");
  }
}

/* convolution's attribute is strides: the singular "stride" is refused by name, not ignored; the message names the
 * op, the bad name and the names it takes. */
static void test_conv_unknown_attribute(void **state) {
  (void)state;
  const int64_t two[2] = {2, 2};
  const int64_t s0[4] = {1, 1, 5, 5};
  const int64_t s1[4] = {1, 1, 3, 3};
  const int64_t *shapes[2] = {s0, s1};
  const em_dtype dtypes[2] = {EM_F32, EM_F32};
  const int ndims[2] = {4, 4};
  const em_attr at[1] = {{.name = "stride", .type = EM_ATTR_INTS, .ints = two, .n = 2}};
  ot_expect_apply_fails("convolution", 2, dtypes, ndims, shapes, at, 1, 1, "no attribute 'stride'",
                        "it takes: group, kernel_shape, strides,");
}

/* auto_pad SAME_SYMMETRIC is CNTK's auto-padding (ConvolveGeometry.h): ceil(in/s) outputs, kernel
 * centres spread evenly. The pads below are derived by hand from that rule (extra = in - ((out-1)s+1),
 * begin = (k-1)/2 - extra/2, end = k-1 - (k-1)/2 - (extra - extra/2)); the op with SAME_SYMMETRIC must
 * equal the op with those explicit pads, bit for bit. (in 8, k 3, s 2 is where it differs from
 * SAME_UPPER, whose pads would be 0, 1.) */
static void test_conv_same_symmetric(void **state) {
  (void)state;
  static const int64_t cases[][5] = {
      /* in, k, s, begin, end */
      {7, 4, 1, 1, 2}, {8, 3, 2, 1, 0}, {9, 3, 2, 1, 1}, {10, 5, 3, 2, 2}, {11, 5, 3, 2, 1}, {6, 2, 2, 0, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t in = cases[c][0], k = cases[c][1], st = cases[c][2];
    int64_t xs[3] = {2, 3, in}, ws[3] = {4, 3, k};
    em_tensor *x = ot_rand(EM_F64, 3, xs, 100 + c, -1, 1), *w = ot_rand(EM_F64, 3, ws, 200 + c, -1, 1);
    em_tensor *in2[2] = {x, w}, *y1 = NULL, *y2 = NULL;
    int64_t strides[1] = {st}, pads[2] = {cases[c][3], cases[c][4]};
    em_attr sym[2] = {{.name = "auto_pad", .type = EM_ATTR_STRING, .s = "SAME_SYMMETRIC"},
                      {.name = "strides", .type = EM_ATTR_INTS, .ints = strides, .n = 1}};
    em_attr expl[2] = {{.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 2},
                       {.name = "strides", .type = EM_ATTR_INTS, .ints = strides, .n = 1}};
    if (ot_run("convolution", in2, 2, sym, 2, &y1, 1)) fail_msg("case %zu: %s", c, em_last_error());
    if (ot_run("convolution", in2, 2, expl, 2, &y2, 1)) fail_msg("case %zu: %s", c, em_last_error());
    int64_t want[3] = {2, 4, (in + st - 1) / st};
    ot_expect_shape(y1, EM_F64, 3, want, "SAME_SYMMETRIC output");
    int64_t n1, n2;
    double *v1 = ot_values(y1, &n1), *v2 = ot_values(y2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(v1, v2, sizeof(double) * (size_t)n1);
    free(v1), free(v2);
    em_tensor_release(y1), em_tensor_release(y2), em_tensor_release(x), em_tensor_release(w);
  }
  /* Stride larger than the kernel: CNTK would crop; refused, naming the mode. */
  int64_t xs[3] = {1, 1, 9}, ws[3] = {1, 1, 1}, s3[1] = {3};
  const int64_t *shapes[2] = {xs, ws};
  em_attr big[2] = {{.name = "auto_pad", .type = EM_ATTR_STRING, .s = "SAME_SYMMETRIC"},
                    {.name = "strides", .type = EM_ATTR_INTS, .ints = s3, .n = 1}};
  ot_expect_apply_fails("convolution", 2, (em_dtype[]){EM_F32, EM_F32}, (int[]){3, 3}, shapes, big, 2, 1,
                        "SAME_SYMMETRIC", "crop");
  em_attr tr = {.name = "auto_pad", .type = EM_ATTR_STRING, .s = "SAME_SYMMETRIC"};
  ot_expect_apply_fails("convolution_transpose", 2, (em_dtype[]){EM_F32, EM_F32}, (int[]){3, 3}, shapes, &tr, 1, 1,
                        "SAME_SYMMETRIC", NULL);
}

/* Depthwise taps far outside a narrow image (large dilation or stride with large pads): the
 * only tap that reads the image is the last kernel column, so y[c, r, 0] = w[c, 1] * x[c, r, 0]
 * and the input gradient is dx[c, r, 0] = w[c, 1] * dy[c, r, 0]. The padded scratch planes
 * must not grow with the padded width (rows * (2^e + 1) elements), nor overflow int64. */
static void far_taps_case(int e) {
  const int64_t R = 4, big = (int64_t)1 << e;
  int64_t xs[4] = {1, 2, R, 1}, ws[4] = {2, 1, 1, 2}, pads[4] = {0, big, 0, 0}, dil[2] = {1, big};
  double xv[8], wv[4] = {0.5, 2.0, -1.5, 3.0}, want[8];
  for (int i = 0; i < 8; i++) xv[i] = 1 + i;
  for (int c = 0; c < 2; c++)
    for (int r = 0; r < R; r++) want[c * R + r] = wv[c * 2 + 1] * xv[c * R + r];
  em_tensor *in[2] = {ot_tensor(EM_F32, 4, xs, xv), ot_tensor(EM_F32, 4, ws, wv)}, *y = NULL, *dx = NULL;
  em_attr at[4] = {AI("group", 2), AIS("pads", pads, 4), AIS("dilations", dil, 2), AI("transpose", 0)};
  em_tensor *gi[3] = {in[0], in[1], in[0]}; /* dy = x (the same shape) */
  int bad = 0;
  if (ot_run("convolution", in, 2, at, 3, &y, 1)) bad = 1, print_message("2^%d forward: %s\n", e, em_last_error());
  else expect_tensor(y, want, 8, 1e-6, 1, "far taps forward");
  if (ot_run("_conv_grad_input", gi, 3, at, 4, &dx, 1))
    bad = 1, print_message("2^%d grad input: %s\n", e, em_last_error());
  else expect_tensor(dx, want, 8, 1e-6, 1, "far taps grad input");
  if (bad) fail_msg("dilation and begin pad 2^%d refused", e);
  em_tensor_release(y), em_tensor_release(dx), em_tensor_release(in[0]), em_tensor_release(in[1]);
}

static void test_conv_depthwise_far_taps_oom(void **state) {
  (void)state;
  far_taps_case(40); /* 4 rows of 2^40 + 1 floats: 16 TiB of scratch */
}

static void test_conv_depthwise_far_taps_overflow(void **state) {
  (void)state;
  far_taps_case(62); /* rows * (2^62 + 1) wraps to 4: wrong values */
  far_taps_case(61); /* rows * (2^61 + 1) wraps negative: heap corruption */
}

/* A depthwise column stride far beyond a narrow image: one output column, whose taps read
 * image columns 0 and 1, so y[c, r, 0] = w[c, 0] x[c, r, 0] + w[c, 1] x[c, r, 1] and the input
 * gradient is dx[c, r, kw] = w[c, kw] dy[c, r, 0]. A stride's column phases (dw_fwd) must not
 * take rows * stride elements of scratch: 2^40 asked for terabytes, 2^62 wrapped the size. */
static void far_stride_case(int e) {
  enum { R = 4 };
  int64_t xs[4] = {1, 2, R, 2}, ws[4] = {2, 1, 1, 2}, ys[4] = {1, 2, R, 1}, st[2] = {1, (int64_t)1 << e};
  double xv[2 * R * 2], wv[4] = {0.5, 2.0, -1.5, 3.0}, dyv[2 * R], want_y[2 * R], want_dx[2 * R * 2];
  for (int i = 0; i < 2 * R * 2; i++) xv[i] = 1 + i;
  for (int i = 0; i < 2 * R; i++) dyv[i] = 0.25 * (i + 1);
  for (int c = 0; c < 2; c++)
    for (int r = 0; r < R; r++) {
      want_y[c * R + r] = wv[c * 2] * xv[(c * R + r) * 2] + wv[c * 2 + 1] * xv[(c * R + r) * 2 + 1];
      for (int kw = 0; kw < 2; kw++) want_dx[(c * R + r) * 2 + kw] = wv[c * 2 + kw] * dyv[c * R + r];
    }
  for (int f = 0; f < 2; f++) {
    em_dtype dt = f ? EM_F64 : EM_F32;
    em_tensor *in[2] = {ot_tensor(dt, 4, xs, xv), ot_tensor(dt, 4, ws, wv)}, *dy = ot_tensor(dt, 4, ys, dyv);
    em_tensor *y = NULL, *dx = NULL, *gi[3] = {dy, in[1], in[0]};
    em_attr at[3] = {AI("group", 2), AIS("strides", st, 2), AI("transpose", 0)};
    int bad = 0;
    if (ot_run("convolution", in, 2, at, 2, &y, 1)) bad = 1, print_message("2^%d forward: %s\n", e, em_last_error());
    else expect_tensor(y, want_y, 2 * R, 1e-6, 2, "far stride forward");
    if (ot_run("_conv_grad_input", gi, 3, at, 3, &dx, 1))
      bad = 1, print_message("2^%d grad input: %s\n", e, em_last_error());
    else expect_tensor(dx, want_dx, 2 * R * 2, 1e-6, 1, "far stride grad input");
    if (bad) fail_msg("depthwise column stride 2^%d refused", e);
    em_tensor_release(y), em_tensor_release(dx), em_tensor_release(dy), em_tensor_release(in[0]),
        em_tensor_release(in[1]);
  }
}

static void test_conv_depthwise_far_stride(void **state) {
  (void)state;
  far_stride_case(40); /* 4 rows of 2^40 phase slots: 16 TiB of scratch */
  far_stride_case(62); /* 4 * 2^62 wraps to 0: the phases were written past the scratch */
}

/* A 3-D depthwise convolution of a depth-1 image with depth padding and a 1x1x1 kernel:
 * output depth 0 and 2 read only the padding (the bias alone), depth 1 is w x + b. The flat
 * run of stride-1 rows (dw_flat_rows) covers the one image depth, not every output depth. */
static void test_conv_depthwise_depth_padding(void **state) {
  (void)state;
  enum { H = 3, W = 20 };
  int64_t xs[5] = {1, 2, 1, H, W}, ws[5] = {2, 1, 1, 1, 1}, bs[1] = {2}, pads[6] = {1, 0, 0, 1, 0, 0};
  double xv[2 * H * W], wv[2] = {0.5, -2.0}, bv[2] = {0.25, -0.75}, want[2 * 3 * H * W];
  for (int i = 0; i < 2 * H * W; i++) xv[i] = (double)(i % 7) - 3;
  for (int c = 0; c < 2; c++)
    for (int od = 0; od < 3; od++)
      for (int i = 0; i < H * W; i++) want[(c * 3 + od) * H * W + i] = od == 1 ? wv[c] * xv[c * H * W + i] + bv[c] : bv[c];
  for (int f = 0; f < 2; f++) {
    em_dtype dt = f ? EM_F64 : EM_F32;
    em_tensor *in[3] = {ot_tensor(dt, 5, xs, xv), ot_tensor(dt, 5, ws, wv), ot_tensor(dt, 1, bs, bv)};
    em_attr at[2] = {AI("group", 2), AIS("pads", pads, 6)};
    em_tensor *y = ot_run1("convolution", in, 3, at, 2);
    ot_expect_shape(y, dt, 5, (int64_t[]){1, 2, 3, H, W}, "depth-padded depthwise");
    expect_tensor(y, want, 2 * 3 * H * W, 1e-6, 2, "depth-padded depthwise");
    em_tensor_release(y), em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(in[2]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_conv_known_values),
    cmocka_unit_test(test_conv_same_symmetric),
    cmocka_unit_test(test_conv_values),
    cmocka_unit_test(test_conv_transpose_values),
    cmocka_unit_test(test_conv_gradcheck),
    cmocka_unit_test(test_conv_transpose_gradcheck),
    cmocka_unit_test(test_conv_thread_determinism),
    cmocka_unit_test(test_conv_dynamic_batch),
    cmocka_unit_test(test_conv_errors),
    cmocka_unit_test(test_conv_unknown_attribute),
    cmocka_unit_test(test_conv_depthwise_far_taps_oom),
    cmocka_unit_test(test_conv_depthwise_far_taps_overflow),
    cmocka_unit_test(test_conv_depthwise_far_stride),
    cmocka_unit_test(test_conv_depthwise_depth_padding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
