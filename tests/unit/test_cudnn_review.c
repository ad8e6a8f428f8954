/* A review of the fast mode's cuDNN glue (runtime/cudnn.c, ops/conv_gpu.c) under adversarial
 * cases, on the libcuda double with the cuDNN double (tests/fakecudnn): convolution_transpose
 * with output_padding, strides, dilations, groups and bias against a reference written here,
 * and its gradients against the CPU executor; 1-D and 3-D grouped, depthwise, f64, batch 1
 * with many channels; a spatial axis of one element that is all padding; negative begin
 * padding (convolution_transpose's output_shape and SAME_*); auto_pad SAME_UPPER/LOWER; the
 * descriptors' rank; one geometry in three directions (the keys must not collide); two
 * executors on two threads; more problems than the memory table holds; the disk cache
 * (truncated entries, another device, the directory changing, an unusable directory);
 * EMBER_CUDNN_WORKSPACE_MB's edges; cuDNN 8.9 and a driver older than the cuDNN build;
 * a fault injected into every entry point Ember calls (named, nothing leaked, the next run
 * right); em_shutdown between runs; portable mode and EMBER_CUDNN=0 calling nothing;
 * FAKECUDA_SEED variations; em_cudnn_takes's arithmetic. */
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conv_reference.h"
#include "cudnn.h"
#include "gpu_double.h"
#include "op_testkit.h"

static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* ------------------------------------------------------- the doubles --- */

static char cache_dir[512];
static int serial;
static const char *next_mem_mb; /* FAKECUDA_MEM_MB for the next use_doubles only (unset: the double's default) */

static void new_cache_dir(void) {
  ot_tmp_path(cache_dir, sizeof cache_dir, "cudnn_review_");
  size_t n = strlen(cache_dir);
  snprintf(cache_dir + n, sizeof cache_dir - n, "%d", ++serial);
}

/* The doubles (tests/support/gpu_double.h): devices, driver, cuDNN version and the CUDA it was
 * built for, cuBLAS off; a fresh cache directory unless keep_cache (this file steers cache_dir
 * itself); memory next_mem_mb for this use only. 0 when the doubles are not built (skip). */
static int use_doubles_cache(const char *devices, const char *driver, const char *version, const char *cudart,
                             int keep_cache) {
  if (!keep_cache || !cache_dir[0]) new_cache_dir();
  const char *mem = next_mem_mb;
  next_mem_mb = NULL;
  return ts_use_doubles(&(ts_doubles){.devices = devices, .driver = driver, .cudnn = version, .cudart = cudart,
                                      .mem_mb = mem, .cache = cache_dir});
}

static int use_doubles(const char *devices) { return use_doubles_cache(devices, "13000", "9.19.0", "13000", 0); }

static unsigned long finds(void) {
  return ts_dnn_calls("cudnnFindConvolutionForwardAlgorithmEx") + ts_dnn_calls("cudnnFindConvolutionBackwardDataAlgorithmEx") +
         ts_dnn_calls("cudnnFindConvolutionBackwardFilterAlgorithmEx");
}

static unsigned long conv_runs(void) {
  return ts_dnn_calls("cudnnConvolutionForward") + ts_dnn_calls("cudnnConvolutionBackwardData") +
         ts_dnn_calls("cudnnConvolutionBackwardFilter");
}

/* Every entry point Ember's glue calls. */
static const char *const entry_points[] = {
    "cudnnCreate", "cudnnSetStream", "cudnnCreateTensorDescriptor", "cudnnCreateFilterDescriptor",
    "cudnnCreateConvolutionDescriptor", "cudnnSetTensorNdDescriptor", "cudnnSetFilterNdDescriptor",
    "cudnnSetConvolutionNdDescriptor", "cudnnSetConvolutionGroupCount", "cudnnSetConvolutionMathType",
    "cudnnFindConvolutionForwardAlgorithmEx", "cudnnFindConvolutionBackwardDataAlgorithmEx",
    "cudnnFindConvolutionBackwardFilterAlgorithmEx", "cudnnConvolutionForward", "cudnnConvolutionBackwardData",
    "cudnnConvolutionBackwardFilter"};
#define N_ENTRY (sizeof entry_points / sizeof entry_points[0])

static unsigned long all_calls(void) {
  unsigned long n = 0;
  for (size_t i = 0; i < N_ENTRY; i++) n += ts_dnn_calls(entry_points[i]);
  return n + ts_dnn_calls("cudnnDestroy");
}

/* ------------------------------------------ problems and a reference --- */

/* x [n, c, in...]; convolution: w [m, c/g, k...], y [n, m, out...]; convolution_transpose:
 * w [c, m/g, k...], y [n, m, out...]. Pads pb/pe unless auto_pad or output_shape. */
typedef struct spec {
  int t;
  em_dtype dt;
  int nsp;
  int64_t n, c, m, g;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], op[3], oshape[3];
  int has_oshape;
  const char *auto_pad;
  int bias;
} spec;

static int64_t floor2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

/* The begin padding and the output size of axis i, by ONNX's rules (written here). */
static void axis_geom(const spec *p, int i, int64_t *pb, int64_t *out) {
  int64_t dk = (p->k[i] - 1) * p->d[i] + 1, in = p->in[i], s = p->s[i];
  int same = p->auto_pad && !strncmp(p->auto_pad, "SAME", 4), upper = same && !strcmp(p->auto_pad, "SAME_UPPER");
  if (!p->t) {
    int64_t b = p->pb[i], e = p->pe[i];
    if (same) {
      int64_t o = (in + s - 1) / s, total = (o - 1) * s + dk - in;
      if (total < 0) total = 0;
      b = upper ? total / 2 : total - total / 2;
      e = total - b;
    } else if (p->auto_pad && !strcmp(p->auto_pad, "VALID")) {
      b = e = 0;
    }
    *pb = b;
    *out = (in + b + e - dk) / s + 1;
    return;
  }
  int64_t full = s * (in - 1) + p->op[i] + dk;
  if (p->has_oshape || same) {
    *out = p->has_oshape ? p->oshape[i] : in * s;
    int64_t total = full - *out;
    *pb = upper ? floor2(total) : total - floor2(total);
  } else {
    *pb = p->pb[i];
    *out = full - p->pb[i] - p->pe[i];
  }
}

static void shapes(const spec *p, int64_t *xs, int64_t *ws, int64_t *ys) {
  xs[0] = ys[0] = p->n, xs[1] = p->c, ys[1] = p->m;
  ws[0] = p->t ? p->c : p->m, ws[1] = p->t ? p->m / p->g : p->c / p->g;
  for (int i = 0; i < p->nsp; i++) {
    int64_t pb;
    xs[2 + i] = p->in[i], ws[2 + i] = p->k[i];
    axis_geom(p, i, &pb, &ys[2 + i]);
  }
}

/* y in double, straight from the definitions: a convolution sums x at o s - pb + t d; a
 * transposed one adds x[i] w[t] into y at i s - pb + t d. */
static double *reference(const spec *p, const double *x, const double *w, const double *b) {
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, o[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0};
  for (int i = 0; i < p->nsp; i++) {
    int j = 3 - p->nsp + i;
    in[j] = p->in[i], k[j] = p->k[i], s[j] = p->s[i], d[j] = p->d[i];
    axis_geom(p, i, &pb[j], &o[j]);
  }
  const int64_t cg = p->c / p->g, mg = p->m / p->g, O = o[0] * o[1] * o[2], I = in[0] * in[1] * in[2],
                K = k[0] * k[1] * k[2];
  double *y = calloc((size_t)(p->n * p->m * O) + 1, sizeof *y);
  if (!y) fail_msg("no memory");
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t m = 0; m < p->m; m++)
      for (int64_t q = 0; q < O; q++) y[(n * p->m + m) * O + q] = b ? b[m] : 0;
  /* (image, column) = (x, y) for a convolution, (y, x) for a transposed one */
  const int64_t *col = p->t ? in : o, *img = p->t ? o : in;
  const int64_t C = col[0] * col[1] * col[2], M = img[0] * img[1] * img[2];
  (void)I, (void)M;
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t gi = 0; gi < p->g; gi++)
      for (int64_t a = 0; a < cg; a++)     /* x's channel within the group */
        for (int64_t bq = 0; bq < mg; bq++) /* y's channel within the group */
          for (int64_t c0 = 0; c0 < C; c0++)
            for (int64_t t = 0; t < K; t++) {
              int64_t cp[3] = {c0 / (col[1] * col[2]), c0 / col[2] % col[1], c0 % col[2]},
                      tp[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]}, ip[3];
              int ok = 1;
              for (int j = 0; j < 3; j++) {
                ip[j] = cp[j] * s[j] - pb[j] + tp[j] * d[j];
                if (ip[j] < 0 || ip[j] >= img[j]) ok = 0;
              }
              if (!ok) continue;
              int64_t i0 = (ip[0] * img[1] + ip[1]) * img[2] + ip[2];
              int64_t xc = gi * cg + a, yc = gi * mg + bq;
              if (!p->t) /* y[n, yc, c0] += x[n, xc, i0] w[yc, a, t] */
                y[(n * p->m + yc) * C + c0] += x[(n * p->c + xc) * I + i0] * w[(yc * cg + a) * K + t];
              else /* y[n, yc, i0] += x[n, xc, c0] w[xc, bq, t] */
                y[(n * p->m + yc) * M + i0] += x[(n * p->c + xc) * I + c0] * w[(xc * mg + bq) * K + t];
            }
  return y;
}

/* A graph of the problem; with training, loss = sum(y r) and its gradients for x, w (, b). */
typedef struct rg {
  spec p;
  em_graph *g;
  em_var x, w, b, r, y, outs[4];
  int n_outs;
  em_tensor *xt, *wt, *bt, *rt;
  int64_t xs[5], ws[5], ys[5];
} rg;

static void rg_build(rg *t, const spec *p, int training, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->p = *p;
  shapes(p, t->xs, t->ws, t->ys);
  int nd = 2 + p->nsp;
  int64_t bs[1] = {p->m}, s[3], d[3], pads[6], op[3], os[3];
  for (int i = 0; i < p->nsp; i++)
    s[i] = p->s[i], d[i] = p->d[i], pads[i] = p->pb[i], pads[p->nsp + i] = p->pe[i], op[i] = p->op[i],
    os[i] = p->oshape[i];
  assert_int_equal(em_graph_create(&t->g), EM_OK);
  assert_int_equal(em_input(t->g, "x", p->dt, nd, t->xs, &t->x), EM_OK);
  assert_int_equal(em_input(t->g, "w", p->dt, nd, t->ws, &t->w), EM_OK);
  em_var in[3] = {t->x, t->w, -1};
  if (p->bias) {
    assert_int_equal(em_input(t->g, "b", p->dt, 1, bs, &t->b), EM_OK);
    in[2] = t->b;
  }
  em_attr at[8];
  int na = 0;
  at[na++] = AIS("strides", s, p->nsp);
  at[na++] = AIS("dilations", d, p->nsp);
  at[na++] = (em_attr){.name = "group", .type = EM_ATTR_INT, .i = p->g};
  if (p->auto_pad) at[na++] = (em_attr){.name = "auto_pad", .type = EM_ATTR_STRING, .s = p->auto_pad};
  else if (!p->has_oshape) at[na++] = AIS("pads", pads, 2 * p->nsp);
  if (p->t) at[na++] = AIS("output_padding", op, p->nsp);
  if (p->has_oshape) at[na++] = AIS("output_shape", os, p->nsp);
  if (em_apply(t->g, p->t ? "convolution_transpose" : "convolution", in, p->bias ? 3 : 2, at, na, &t->y, 1))
    fail_msg("apply: %s", em_last_error());
  t->xt = ot_rand(p->dt, nd, t->xs, seed, -1, 1);
  t->wt = ot_rand(p->dt, nd, t->ws, seed + 1, -1, 1);
  t->bt = p->bias ? ot_rand(p->dt, 1, bs, seed + 2, -1, 1) : NULL;
  t->outs[0] = t->y;
  t->n_outs = 1;
  if (training) {
    em_var prod, loss, wrt[3] = {t->x, t->w, t->b};
    assert_int_equal(em_input(t->g, "r", p->dt, nd, t->ys, &t->r), EM_OK);
    t->rt = ot_rand(p->dt, nd, t->ys, seed + 3, -1, 1);
    em_var two[2] = {t->y, t->r};
    assert_int_equal(em_apply(t->g, "mul", two, 2, NULL, 0, &prod, 1), EM_OK);
    assert_int_equal(em_apply(t->g, "reduce_sum", &prod, 1, NULL, 0, &loss, 1), EM_OK);
    if (em_gradients(t->g, loss, wrt, p->bias ? 3 : 2, t->outs + 1)) fail_msg("gradients: %s", em_last_error());
    t->n_outs = p->bias ? 4 : 3;
  }
}

static em_exec *rg_exec(rg *t, em_device dev) {
  em_exec *e;
  if (em_exec_create(t->g, t->outs, t->n_outs, dev, &e)) fail_msg("exec: %s", em_last_error());
  return e;
}

static em_status rg_run(rg *t, em_exec *e, em_tensor **o) {
  em_feed f[4] = {{t->x, t->xt}, {t->w, t->wt}};
  int n = 2;
  if (t->bt) f[n++] = (em_feed){t->b, t->bt};
  if (t->rt) f[n++] = (em_feed){t->r, t->rt};
  return em_exec_run(e, f, n, o);
}

static void rg_free(rg *t) {
  em_graph_free(t->g);
  em_tensor_release(t->xt), em_tensor_release(t->wt), em_tensor_release(t->bt), em_tensor_release(t->rt);
}

static void release(em_tensor **o, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(o[i]);
}

/* y against the reference (f32: about an ulp per term's square root; f64: tight). */
static void check_y(const rg *t, em_tensor *y, const char *what) {
  int64_t n;
  double *x = ot_values(t->xt, &n), *w = ot_values(t->wt, &n), *b = t->bt ? ot_values(t->bt, &n) : NULL;
  double *want = reference(&t->p, x, w, b);
  int64_t terms = (t->p.t ? t->p.m / t->p.g : t->p.c / t->p.g) * ts_prod(t->p.k, t->p.nsp);
  double tol = t->p.dt == EM_F64 ? 1e-12 : 2e-6 * sqrt((double)terms);
  ot_expect_values(y, want, ts_prod(t->ys, 2 + t->p.nsp), tol, what);
  free(x), free(w), free(b), free(want);
}

/* Outputs of two executors within tol of each other (the CPU's as the expected). */
static void check_same(em_tensor *const *got, em_tensor *const *want, int n, double tol, const char *what) {
  for (int i = 0; i < n; i++) {
    int64_t k;
    double *w = ot_values(want[i], &k);
    char label[160];
    snprintf(label, sizeof label, "%s, output %d", what, i);
    ot_expect_values(got[i], w, k, tol, label);
    free(w);
  }
}

/* The road em_exec_describe gives the first step whose line names op. */
static void road_of(const em_exec *e, const char *op, char *out, size_t cap) {
  char plan[8192];
  em_exec_describe(e, plan, sizeof plan);
  const char *line = strstr(plan, op), *end = line ? strchr(line, '\n') : NULL, *open = NULL;
  for (const char *q = line; q && q < end; q++)
    if (*q == '[') open = q;
  const char *close = open ? strchr(open, ']') : NULL;
  snprintf(out, cap, "%.*s", close ? (int)(close - open - 1) : 0, close ? open + 1 : "");
}

static spec conv(int nsp, int64_t n, int64_t c, int64_t m, int64_t g, int64_t in, int64_t k, int64_t s, int64_t d,
                 int64_t p) {
  spec v = {.nsp = nsp, .dt = EM_F32, .n = n, .c = c, .m = m, .g = g};
  for (int i = 0; i < nsp; i++) v.in[i] = in + i, v.k[i] = k, v.s[i] = s, v.d[i] = d, v.pb[i] = v.pe[i] = p;
  return v;
}

static spec tconv(int nsp, int64_t n, int64_t c, int64_t m, int64_t g, int64_t in, int64_t k, int64_t s, int64_t d,
                  int64_t p, int64_t op) {
  spec v = conv(nsp, n, c, m, g, in, k, s, d, p);
  v.t = 1;
  for (int i = 0; i < nsp; i++) v.op[i] = op;
  return v;
}

static const char *describe_spec(const spec *p, char *buf, size_t cap) {
  int n = snprintf(buf, cap, "%s %s %dD n%lld c%lld m%lld g%lld%s%s", p->t ? "conv_transpose" : "conv",
                   em_dtype_name(p->dt), p->nsp, (long long)p->n, (long long)p->c, (long long)p->m, (long long)p->g,
                   p->bias ? " bias" : "", p->auto_pad ? p->auto_pad : "");
  for (int i = 0; i < p->nsp && n > 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, " [in %lld k %lld s %lld d %lld p %lld,%lld op %lld]", (long long)p->in[i],
                  (long long)p->k[i], (long long)p->s[i], (long long)p->d[i], (long long)p->pb[i], (long long)p->pe[i],
                  (long long)p->op[i]);
  return buf;
}

/* One problem's forward on the GPU: right against the reference, through cuDNN when
 * want_cudnn (a cuDNN call made, the road says so), else on Ember's kernels with a reason;
 * and nothing left behind. */
static void forward_case(const spec *p, int want_cudnn, uint64_t seed) {
  char what[400], road[300];
  describe_spec(p, what, sizeof what);
  rg t;
  rg_build(&t, p, 0, seed);
  em_exec *e = rg_exec(&t, em_cuda(0));
  unsigned long before = conv_runs();
  em_tensor *o = NULL;
  if (rg_run(&t, e, &o)) fail_msg("%s: run: %s", what, em_last_error());
  check_y(&t, o, what);
  road_of(e, p->t ? "convolution_transpose" : "convolution", road, sizeof road);
  if (want_cudnn && (conv_runs() == before || strncmp(road, "cuDNN", 5)))
    fail_msg("%s: not through cuDNN (%lu calls), road '%s'", what, conv_runs() - before, road);
  if (!want_cudnn && (conv_runs() != before || !strstr(road, "Ember's kernels")))
    fail_msg("%s: should stay on Ember's kernels: %lu cuDNN calls, road '%s'", what, conv_runs() - before, road);
  em_tensor_release(o);
  em_exec_free(e);
  rg_free(&t);
  if (ts_dnn_live_descriptors()) fail_msg("%s: %zu cuDNN descriptors left behind", what, ts_dnn_live_descriptors());
}

/* Forward and gradients on the GPU against the CPU executor (fast mode both). */
static void training_case(const spec *p, uint64_t seed, double tol) {
  char what[400];
  describe_spec(p, what, sizeof what);
  rg t;
  rg_build(&t, p, 1, seed);
  em_tensor *got[4] = {0}, *want[4] = {0};
  for (int dev = 0; dev < 2; dev++) {
    em_exec *e = rg_exec(&t, dev ? em_cuda(0) : em_cpu());
    if (rg_run(&t, e, dev ? got : want)) fail_msg("%s on %s: %s", what, dev ? "cuda" : "cpu", em_last_error());
    em_exec_free(e);
  }
  check_y(&t, want[0], what); /* the CPU itself against the reference */
  check_same(got, want, t.n_outs, tol, what);
  release(got, t.n_outs), release(want, t.n_outs);
  rg_free(&t);
}

/* ------------------------------------------------------------- tests --- */

/* convolution_transpose through cuDNN's backward data: output_padding, strides, dilations,
 * groups, bias, 1-D / 2-D / 3-D, f64; against the reference written here. */
static void test_transpose_through_cudnn(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec cases[] = {
      tconv(2, 2, 3, 4, 1, 4, 3, 2, 1, 1, 1), /* output_padding 1 with stride 2 */
      tconv(2, 1, 4, 6, 2, 3, 3, 3, 1, 0, 2), /* groups, stride 3, output_padding 2 */
      tconv(2, 2, 4, 4, 2, 4, 2, 2, 2, 0, 1), /* dilation 2, stride 2, output_padding 1 */
      tconv(1, 2, 6, 3, 3, 5, 3, 2, 2, 1, 1), /* 1-D, groups 3 */
      tconv(3, 1, 2, 4, 2, 3, 2, 2, 1, 0, 1), /* 3-D, groups 2 */
      tconv(2, 1, 3, 3, 3, 4, 3, 2, 1, 1, 0), /* depthwise */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int v = 0; v < 3; v++) {
      spec p = cases[i];
      p.bias = v >= 1;
      if (v == 2) p.dt = EM_F64;
      forward_case(&p, 1, 40 + i);
    }
  /* an asymmetric pads pair that changes the output keeps Ember's kernels, and so does an
   * output_padding of at least the stride (below the dilation): rows cuDNN's symmetric
   * padding cannot give */
  spec a = tconv(2, 1, 2, 3, 1, 4, 3, 2, 1, 1, 0);
  a.pb[1] = 0; /* pads 0, 1: symmetric 0 would give 4 rows of x, not 5 */
  forward_case(&a, 0, 3);
  a.pb[1] = 1, a.pe[1] = 0; /* pads 1, 0: an extra last row nothing writes but the bias: cuDNN may */
  a.bias = 1;
  forward_case(&a, 1, 3);
  spec b = tconv(2, 2, 4, 4, 2, 4, 2, 1, 2, 0, 1);
  b.bias = 1;
  forward_case(&b, 0, 4);
}

/* convolution_transpose's gradients (backward: forward and backward filter on its geometry)
 * against the CPU's, f32 and f64, with bias. */
static void test_transpose_gradients(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec cases[] = {tconv(2, 2, 4, 6, 2, 3, 3, 2, 1, 1, 1), tconv(1, 2, 3, 4, 1, 5, 3, 2, 2, 0, 1),
                  tconv(3, 1, 2, 2, 1, 3, 2, 2, 1, 0, 1)};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int f64 = 0; f64 < 2; f64++) {
      spec p = cases[i];
      p.bias = 1;
      p.dt = f64 ? EM_F64 : EM_F32;
      unsigned long fw = ts_dnn_calls("cudnnConvolutionForward"), bf = ts_dnn_calls("cudnnConvolutionBackwardFilter"),
                    bd = ts_dnn_calls("cudnnConvolutionBackwardData");
      training_case(&p, 60 + i, f64 ? 1e-10 : 1e-4);
      if (ts_dnn_calls("cudnnConvolutionForward") == fw || ts_dnn_calls("cudnnConvolutionBackwardFilter") == bf ||
          ts_dnn_calls("cudnnConvolutionBackwardData") == bd)
        fail_msg("case %zu: a direction did not go through cuDNN", i);
    }
}

/* Convolutions cuDNN must take: 1-D and 3-D with groups, depthwise, f64, batch 1 with many
 * channels, bias; and their gradients. */
static void test_convolution_shapes(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec cases[] = {
      conv(1, 2, 6, 4, 2, 9, 3, 2, 1, 1),  conv(1, 1, 4, 8, 4, 7, 2, 1, 3, 2), conv(3, 1, 4, 4, 2, 4, 3, 1, 1, 1),
      conv(3, 2, 3, 6, 3, 4, 2, 2, 1, 0),  conv(2, 2, 8, 8, 8, 6, 3, 1, 1, 1), conv(2, 1, 6, 12, 6, 7, 3, 2, 2, 2),
      conv(2, 1, 64, 64, 1, 4, 3, 1, 1, 1), conv(2, 1, 96, 8, 4, 3, 1, 1, 1, 0),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int v = 0; v < 2; v++) {
      spec p = cases[i];
      p.bias = v;
      if (v) p.dt = EM_F64;
      forward_case(&p, 1, 80 + i);
    }
  spec empty = conv(2, 0, 2, 3, 1, 5, 3, 1, 1, 1); /* batch 0: nothing for cuDNN, nothing fails */
  forward_case(&empty, 0, 89);
  spec grads[] = {conv(1, 2, 6, 4, 2, 9, 3, 2, 1, 1), conv(3, 1, 4, 4, 2, 4, 3, 1, 1, 1),
                  conv(2, 2, 8, 8, 8, 6, 3, 1, 1, 1)};
  for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++) {
    grads[i].bias = 1;
    training_case(&grads[i], 90 + i, 1e-4);
  }
}

/* A spatial axis of one element whose only window lies in the padding (W = 1, a 1-wide
 * kernel, pads 1 and 1, stride 3: the output column reads padding only): the output is the
 * bias alone. cuDNN must not drop that axis with its padding. */
static void test_unit_axis_all_padding(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec p = conv(2, 1, 2, 3, 1, 5, 3, 1, 1, 1);
  p.in[1] = 1, p.k[1] = 1, p.s[1] = 3; /* W: (1 + 2 - 1) / 3 + 1 = 1 output, at -1 */
  forward_case(&p, 1, 5);
  p.bias = 1;
  forward_case(&p, 1, 6);
  training_case(&p, 7, 1e-4);
  spec f = conv(2, 1, 2, 3, 1, 5, 3, 1, 1, 1); /* the same on the first axis (H = 1) */
  f.in[0] = 1, f.k[0] = 1, f.s[0] = 3;
  f.bias = 1;
  forward_case(&f, 1, 10);
  f.nsp = 3, f.in[2] = 4, f.k[2] = 2, f.s[2] = 1, f.d[2] = 1, f.pb[2] = f.pe[2] = 0; /* 3-D, D = 1 */
  forward_case(&f, 1, 11);
  spec q = conv(3, 1, 2, 2, 1, 3, 3, 1, 1, 1); /* 3-D with its last axis of one element */
  q.in[2] = 1, q.k[2] = 1, q.s[2] = 2, q.pe[2] = 0; /* (1 + 1 - 1) / 2 + 1 = 1, at -1 */
  q.pb[2] = 1;
  forward_case(&q, 0, 8); /* asymmetric padding that changes nothing cuDNN sees... */
  q.pe[2] = 1;
  q.s[2] = 3;
  forward_case(&q, 1, 9);
}

/* The descriptors have as few dimensions as the problem: a 2-D convolution is 4-D (NCHW),
 * a 1-D one 4-D with a unit axis, a 3-D one 5-D. 5-D descriptors for a 2-D problem leave
 * cuDNN its 3-D kernels only (the double's GEMM, FFT and WINOGRAD families are 2-D only). */
static void test_descriptor_rank(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const struct {
    spec p;
    const char *x;
  } rows[] = {
      {conv(2, 1, 2, 3, 1, 6, 3, 1, 1, 1), "x=[1,2,6,7]"},
      {conv(1, 1, 2, 3, 1, 6, 3, 1, 1, 1), "x=[1,2,1,6]"},
      {conv(3, 1, 2, 3, 1, 3, 3, 1, 1, 1), "x=[1,2,3,4,5]"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    forward_case(&rows[i].p, 1, 11);
    if (!strstr(ts_dnn_last_call(), rows[i].x)) fail_msg("%dD: want %s in: %s", rows[i].p.nsp, rows[i].x, ts_dnn_last_call());
  }
}

/* Negative begin padding (convolution_transpose: an output_shape past the full size, or
 * SAME_* with a stride above the kernel) is no padding cuDNN can express: Ember's kernels,
 * right. */
static void test_transpose_negative_padding(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec a = tconv(2, 1, 2, 3, 1, 3, 1, 3, 1, 0, 0);
  a.auto_pad = "SAME_UPPER"; /* total = 1 - 3 = -2: pb = -1 */
  forward_case(&a, 0, 21);
  a.auto_pad = "SAME_LOWER";
  forward_case(&a, 0, 22);
  spec b = tconv(2, 1, 2, 2, 1, 3, 3, 2, 1, 0, 0);
  b.has_oshape = 1, b.oshape[0] = 9, b.oshape[1] = 9; /* full 7: total -2, pb = -1 */
  forward_case(&b, 0, 23);
  b.bias = 1;
  training_case(&b, 24, 1e-4);
  b.oshape[0] = b.oshape[1] = 8; /* total -1: pb 0, an unread last row: cuDNN may take it */
  forward_case(&b, 1, 25);
}

/* auto_pad SAME_UPPER / SAME_LOWER: asymmetric on even kernels (Ember's kernels, right, the
 * reason in the road), symmetric on odd ones with stride 1 (cuDNN). */
static void test_auto_pad(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const char *modes[] = {"SAME_UPPER", "SAME_LOWER"};
  for (int i = 0; i < 2; i++) {
    spec p = conv(2, 2, 3, 4, 1, 6, 2, 1, 1, 0);
    p.auto_pad = modes[i];
    forward_case(&p, 0, 30 + i);
    training_case(&p, 32 + i, 1e-4);
    p.k[0] = p.k[1] = 3;
    forward_case(&p, 1, 34 + i);
    spec q = conv(2, 1, 2, 2, 1, 7, 3, 2, 1, 0); /* stride 2 on 7: total 2, symmetric */
    q.auto_pad = modes[i];
    q.in[1] = 7;
    forward_case(&q, 1, 36 + i);
    q.in[0] = q.in[1] = 6; /* on 6: total 1, asymmetric; SAME_LOWER's extra row is at the start, where
                            * symmetric padding 1 reads the same windows (the last pad unread) */
    forward_case(&q, i == 1, 38 + i);
  }
}

/* One geometry in three directions (a training graph of one convolution) and a
 * convolution_transpose whose forward is the convolution's backward data: three searches,
 * one per direction, and every result right. A key without the direction shares one. */
static void test_directions_have_their_own_keys(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec p = conv(2, 2, 3, 4, 1, 6, 3, 1, 1, 1);
  unsigned long before = finds();
  training_case(&p, 41, 1e-4);
  if (finds() - before != 3) fail_msg("%lu searches for one geometry's three directions, want 3", finds() - before);
  /* y = conv(x, w); z = conv_transpose(y, w): z's forward is conv's backward data */
  int64_t xs[4] = {2, 3, 6, 7}, ws[4] = {4, 3, 3, 3}, ps[4] = {1, 1, 1, 1};
  em_graph *g;
  em_var x, w, y, z, r, prod, loss, grads[2];
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &x), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F32, 4, ws, &w), EM_OK);
  assert_int_equal(em_input(g, "r", EM_F32, 4, xs, &r), EM_OK);
  em_attr at[1] = {AIS("pads", ps, 4)};
  em_var in[2] = {x, w};
  assert_int_equal(em_apply(g, "convolution", in, 2, at, 1, &y, 1), EM_OK);
  em_var in2[2] = {y, w};
  assert_int_equal(em_apply(g, "convolution_transpose", in2, 2, at, 1, &z, 1), EM_OK);
  em_var two[2] = {z, r}, wrt[2] = {x, w};
  assert_int_equal(em_apply(g, "mul", two, 2, NULL, 0, &prod, 1), EM_OK);
  assert_int_equal(em_apply(g, "reduce_sum", &prod, 1, NULL, 0, &loss, 1), EM_OK);
  assert_int_equal(em_gradients(g, loss, wrt, 2, grads), EM_OK);
  em_var outs[3] = {z, grads[0], grads[1]};
  em_tensor *xt = ot_rand(EM_F32, 4, xs, 1, -1, 1), *wt = ot_rand(EM_F32, 4, ws, 2, -1, 1),
            *rt = ot_rand(EM_F32, 4, xs, 3, -1, 1), *got[3], *want[3];
  em_feed f[3] = {{x, xt}, {w, wt}, {r, rt}};
  before = finds();
  unsigned long runs = conv_runs();
  for (int dev = 0; dev < 2; dev++) {
    em_exec *e;
    assert_int_equal(em_exec_create(g, outs, 3, dev ? em_cuda(0) : em_cpu(), &e), EM_OK);
    if (em_exec_run(e, f, 3, dev ? got : want)) fail_msg("run: %s", em_last_error());
    em_exec_free(e);
  }
  check_same(got, want, 3, 1e-4, "conv then conv_transpose, trained");
  if (finds() != before) fail_msg("%lu new searches for directions already searched", finds() - before);
  if (conv_runs() - runs < 6) fail_msg("only %lu cuDNN runs for six convolutions", conv_runs() - runs);
  release(got, 3), release(want, 3);
  em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(rt);
  em_graph_free(g);
}

/* What the choice depends on is in the key: TF32 on and off, two workspace limits,
 * deterministic or not, f32 and f64 are four... separate searches, each right. */
static void test_key_separates_settings(void **state) {
  (void)state;
  if (!use_doubles("8.0")) skip();
  spec p = conv(2, 1, 3, 4, 1, 6, 3, 1, 1, 1);
  struct {
    int tf32;
    const char *ws, *det;
    em_dtype dt;
    int searched;
  } rows[] = {
      {0, NULL, NULL, EM_F32, 1}, {1, NULL, NULL, EM_F32, 1}, {0, NULL, NULL, EM_F32, 0}, {0, "1", NULL, EM_F32, 1},
      {0, "1", "1", EM_F32, 1},   {0, "1", "1", EM_F64, 1},   {1, "1", "1", EM_F64, 0}, /* TF32 means nothing for f64 */
      {1, NULL, NULL, EM_F32, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (rows[i].ws) setenv("EMBER_CUDNN_WORKSPACE_MB", rows[i].ws, 1);
    else unsetenv("EMBER_CUDNN_WORKSPACE_MB");
    if (rows[i].det) setenv("EMBER_CUDNN_DETERMINISTIC", rows[i].det, 1);
    else unsetenv("EMBER_CUDNN_DETERMINISTIC");
    p.dt = rows[i].dt;
    rg t;
    rg_build(&t, &p, 0, 50);
    em_exec *e = rg_exec(&t, em_cuda(0));
    assert_int_equal(em_exec_set_tf32(e, rows[i].tf32), EM_OK);
    unsigned long before = finds();
    em_tensor *o;
    if (rg_run(&t, e, &o)) fail_msg("row %zu: %s", i, em_last_error());
    if (!rows[i].tf32 || rows[i].dt == EM_F64) check_y(&t, o, "settings");
    if ((int)(finds() - before) != rows[i].searched)
      fail_msg("row %zu: %lu searches, want %d", i, finds() - before, rows[i].searched);
    const char *math = rows[i].tf32 && rows[i].dt == EM_F32 ? "math=DEFAULT_MATH" : "math=FMA_MATH";
    if (!strstr(ts_dnn_last_call(), math)) fail_msg("row %zu: %s", i, ts_dnn_last_call());
    em_tensor_release(o);
    em_exec_free(e);
    rg_free(&t);
  }
  unsetenv("EMBER_CUDNN_WORKSPACE_MB");
  unsetenv("EMBER_CUDNN_DETERMINISTIC");
}

/* Two executors on two threads using one device at once (searches racing on one handle and
 * the memory table): every run right, nothing left behind. */
typedef struct worker {
  rg *t;
  int runs, bad;
  char msg[300];
  double *want;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  em_exec *e;
  if (em_exec_create(w->t->g, w->t->outs, 1, em_cuda(0), &e)) {
    snprintf(w->msg, sizeof w->msg, "exec: %s", em_last_error());
    w->bad = 1;
    return NULL;
  }
  for (int r = 0; r < w->runs && !w->bad; r++) {
    em_tensor *o = NULL;
    if (rg_run(w->t, e, &o)) {
      snprintf(w->msg, sizeof w->msg, "run %d: %s", r, em_last_error());
      w->bad = 1;
      break;
    }
    int64_t n;
    double *v = ot_values(o, &n);
    for (int64_t i = 0; i < n && !w->bad; i++)
      if (fabs(v[i] - w->want[i]) > 1e-4 * (1 + fabs(w->want[i]))) {
        snprintf(w->msg, sizeof w->msg, "run %d: element %lld is %g, want %g", r, (long long)i, v[i], w->want[i]);
        w->bad = 1;
      }
    free(v);
    em_tensor_release(o);
  }
  em_exec_free(e);
  return NULL;
}

static void test_two_threads_one_device(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  for (int round = 0; round < 3; round++) {
    spec ps[2] = {conv(2, 2, 3, 4, 1, 6 + round, 3, 1, 1, 1), tconv(2, 2, 4, 2, 2, 5, 3, 2, 1, 1, 1)};
    rg t[2];
    worker w[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
      rg_build(&t[i], &ps[i], 0, 70 + i);
      int64_t n;
      double *x = ot_values(t[i].xt, &n), *wv = ot_values(t[i].wt, &n);
      w[i] = (worker){.t = &t[i], .runs = 4, .want = reference(&ps[i], x, wv, NULL)};
      free(x), free(wv);
    }
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
      if (w[i].bad) fail_msg("round %d, thread %d: %s", round, i, w[i].msg);
      free(w[i].want);
      rg_free(&t[i]);
    }
  }
  if (ts_dnn_live_descriptors()) fail_msg("%zu descriptors left behind", ts_dnn_live_descriptors());
}

/* The handle's stream is per call: two threads issuing on two streams of one device at once
 * (em_cudnn_conv directly) each find their result on their own stream after syncing it; a
 * call issued on the other thread's stream would leave it unwritten (the double runs work at
 * its stream's synchronisation). */
typedef struct streamer {
  int id, bad;
  char msg[200];
} streamer;

static void *stream_work(void *arg) {
  streamer *w = arg;
  em_device dev = em_cuda(0);
  em_stream *st = NULL;
  enum { L = 64 };
  float hx[L], hy[L], hw = (float)(w->id + 2);
  void *dx = NULL, *dw = NULL, *dy = NULL;
  for (int i = 0; i < L; i++) hx[i] = (float)(i % 7) - 3;
  if (em_stream_create(dev, &st) || em_malloc(dev, sizeof hx, &dx) || em_malloc(dev, sizeof hw, &dw) ||
      em_malloc(dev, sizeof hy, &dy) || em_memcpy_h2d(dev, dx, hx, sizeof hx, st) ||
      em_memcpy_h2d(dev, dw, &hw, sizeof hw, st)) {
    snprintf(w->msg, sizeof w->msg, "set-up: %s", em_last_error());
    w->bad = 1;
  }
  for (int r = 0; r < 150 && !w->bad; r++) {
    em_cudnn_geom g = {.dt = EM_F32, .nd = 1, .n = 1, .ci = 1, .co = 1, .groups = 1};
    g.img[0] = g.out[0] = L - w->id * (r % 2), g.k[0] = g.stride[0] = g.dil[0] = 1;
    memset(hy, 0, sizeof hy);
    if (em_cudnn_conv(dev, st, EM_CUDNN_FWD, &g, dx, dw, dy, 0, NULL) ||
        em_memcpy_d2h(dev, hy, dy, (size_t)g.out[0] * sizeof(float), st) || em_stream_sync(dev, st)) {
      snprintf(w->msg, sizeof w->msg, "round %d: %s", r, em_last_error());
      w->bad = 1;
      break;
    }
    for (int i = 0; i < g.out[0] && !w->bad; i++)
      if (hy[i] != hx[i] * hw) {
        snprintf(w->msg, sizeof w->msg, "round %d: y[%d] = %g, want %g", r, i, hy[i], hx[i] * hw);
        w->bad = 1;
      }
  }
  em_stream_sync(dev, st);
  if (dx) em_free(dev, dx);
  if (dw) em_free(dev, dw);
  if (dy) em_free(dev, dy);
  if (st) em_stream_destroy(st);
  return NULL;
}

static void test_two_streams_one_handle(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  streamer w[2] = {{.id = 0}, {.id = 1}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, stream_work, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++)
    if (w[i].bad) fail_msg("thread %d: %s", i, w[i].msg);
  if (ts_dnn_live_descriptors()) fail_msg("%zu descriptors left behind", ts_dnn_live_descriptors());
}

/* More problems than the memory table holds (1024), without a disk cache: the oldest goes
 * and is searched again, newer ones are not, and every result stays right (em_cudnn_conv
 * directly: 1-D problems x [1, 1, L] * w [1, 1, 1], L = 1 .. 1100). */
static void test_memory_table_eviction(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  if (mkdir(cache_dir, 0700) || chmod(cache_dir, 0777)) fail_msg("cannot make %s", cache_dir); /* no disk cache */
  setenv("EMBER_CUDNN_WORKSPACE_MB", "1", 1);
  enum { N = 1100 };
  em_device dev = em_cuda(0);
  float *hx = malloc(N * sizeof *hx), *hy = malloc(N * sizeof *hy), hw = 1.5f;
  for (int i = 0; i < N; i++) hx[i] = (float)(i % 13) - 6;
  void *dx, *dw, *dy;
  assert_int_equal(em_malloc(dev, N * sizeof(float), &dx), EM_OK);
  assert_int_equal(em_malloc(dev, sizeof(float), &dw), EM_OK);
  assert_int_equal(em_malloc(dev, N * sizeof(float), &dy), EM_OK);
  assert_int_equal(em_memcpy_h2d(dev, dx, hx, N * sizeof(float), NULL), EM_OK);
  assert_int_equal(em_memcpy_h2d(dev, dw, &hw, sizeof(float), NULL), EM_OK);
  const int order[] = {-1, 1, N, 500, 2, 3};
  for (size_t step = 0; step < sizeof order / sizeof order[0]; step++) {
    int lo = order[step] < 0 ? 1 : order[step], hi = order[step] < 0 ? N : order[step];
    uint64_t before = em_cudnn_searches();
    for (int L = lo; L <= hi; L++) {
      em_cudnn_geom g = {.dt = EM_F32, .nd = 1, .n = 1, .ci = 1, .co = 1, .groups = 1};
      g.img[0] = g.out[0] = L, g.k[0] = g.stride[0] = g.dil[0] = 1;
      if (em_cudnn_conv(dev, NULL, EM_CUDNN_FWD, &g, dx, dw, dy, 0, NULL)) fail_msg("L %d: %s", L, em_last_error());
      assert_int_equal(em_memcpy_d2h(dev, hy, dy, (size_t)L * sizeof(float), NULL), EM_OK);
      assert_int_equal(em_stream_sync(dev, NULL), EM_OK);
      for (int i = 0; i < L; i++)
        if (hy[i] != hx[i] * hw) fail_msg("L %d: y[%d] = %g, want %g", L, i, hy[i], hx[i] * hw);
    }
    /* all new; then the oldest (evicted) searched again; the newest, a middle one and the
     * second and third (evicted, unlike 1 which is back) */
    const uint64_t want[] = {N, 1, 0, 0, 1, 1};
    if (em_cudnn_searches() - before != want[step])
      fail_msg("step %zu (L %d..%d): %llu searches, want %llu", step, lo, hi,
               (unsigned long long)(em_cudnn_searches() - before), (unsigned long long)want[step]);
  }
  em_free(dev, dx), em_free(dev, dw), em_free(dev, dy);
  free(hx), free(hy);
  unsetenv("EMBER_CUDNN_WORKSPACE_MB");
}

/* The files in the cache directory (names not starting with a dot). */
static int cache_files(char names[][600], int cap) {
  DIR *d = opendir(cache_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.' && n++ < cap) snprintf(names[n - 1], 600, "%s/%s", cache_dir, e->d_name);
  if (d) closedir(d);
  return n;
}

/* Runs the problem once on cuda(0) and returns the searches it made. */
static unsigned long searches_of_run(const spec *p, uint64_t seed) {
  rg t;
  rg_build(&t, p, 0, seed);
  em_exec *e = rg_exec(&t, em_cuda(0));
  unsigned long before = finds();
  em_tensor *o;
  if (rg_run(&t, e, &o)) fail_msg("run: %s", em_last_error());
  check_y(&t, o, "cache case");
  em_tensor_release(o);
  em_exec_free(e);
  rg_free(&t);
  return finds() - before;
}

/* The disk cache: a truncated entry searches again (and is rewritten); an entry of another
 * device name or CC is not used; EMBER_CACHE_DIR changing between processes (each directory
 * keeps its own); a directory that cannot be one (a file) leaves the memory only. */
static void test_disk_cache_cases(void **state) {
  (void)state;
  spec p = conv(2, 1, 3, 4, 1, 7, 3, 1, 1, 1);
  if (!use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 0)) skip();
  if (searches_of_run(&p, 1) != 1) fail_msg("first run: not one search");
  char first[512];
  snprintf(first, sizeof first, "%s", cache_dir);
  char names[8][600];
  int n = cache_files(names, 8);
  if (n != 1) fail_msg("%d entries after one search", n);
  for (int cut = 0; cut < 2; cut++) { /* truncated: half, then empty */
    size_t len;
    unsigned char *bytes = ot_read_file(names[0], &len);
    ot_write_file(names[0], bytes, cut ? 0 : len / 2);
    free(bytes);
    use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 1);
    if (searches_of_run(&p, 1) != 1) fail_msg("a truncated entry (%s) was used", cut ? "empty" : "half");
    use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 1);
    if (searches_of_run(&p, 1) != 0) fail_msg("the entry was not rewritten after a truncated one");
    n = cache_files(names, 8);
    if (n != 1) fail_msg("%d entries", n);
  }
  use_doubles_cache("9.0=NVIDIA H200 (double)", "13000", "9.19.0", "13000", 1); /* same CC, another name */
  if (searches_of_run(&p, 1) != 1) fail_msg("another device's entry was used");
  use_doubles_cache("8.9=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 1); /* same name, another CC */
  if (searches_of_run(&p, 1) != 1) fail_msg("another CC's entry was used");
  use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "12090", 1); /* another build */
  if (searches_of_run(&p, 1) != 1) fail_msg("another cuDNN build's entry was used");
  use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 0); /* another directory */
  if (searches_of_run(&p, 1) != 1) fail_msg("a new directory had the entry");
  snprintf(cache_dir, sizeof cache_dir, "%s", first); /* back to the first */
  use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 1);
  if (searches_of_run(&p, 1) != 0) fail_msg("the first directory's entry was lost");
  /* a file where the directory should be: the memory remembers, nothing breaks */
  new_cache_dir();
  ot_write_file(cache_dir, (const unsigned char *)"x", 1);
  use_doubles_cache("9.0=NVIDIA H100 (double)", "13000", "9.19.0", "13000", 1);
  if (searches_of_run(&p, 1) != 1 || searches_of_run(&p, 1) != 0) fail_msg("without a usable directory");
  unlink(cache_dir);
}

/* EMBER_CUDNN_WORKSPACE_MB's edges: 1 MiB bounds what the choice needs; more than the device
 * has halves the search's workspace until it fits; negative, too large and trailing
 * garbage fail the run naming the variable; empty is the default. */
static void test_workspace_edges(void **state) {
  (void)state;
  next_mem_mb = "96";
  if (!use_doubles("9.0")) skip();
  spec p = conv(2, 2, 3, 4, 1, 9, 3, 1, 1, 1);
  const struct {
    const char *v;
    int ok;
  } rows[] = {{"1", 1}, {"16777216", 1}, {"", 1}, {"0", 1}, {"-1", 0}, {"16777217", 0}, {"4x", 0},
              {"99999999999999999999", 0}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    setenv("EMBER_CUDNN_WORKSPACE_MB", rows[i].v, 1);
    rg t;
    rg_build(&t, &p, 1, 3);
    em_exec *e = rg_exec(&t, em_cuda(0));
    em_tensor *o[3] = {0};
    em_status st = rg_run(&t, e, o);
    if (rows[i].ok) {
      if (st) fail_msg("EMBER_CUDNN_WORKSPACE_MB='%s': %s", rows[i].v, em_last_error());
      check_y(&t, o[0], rows[i].v);
      unsigned long given, needed;
      const char *q = strstr(ts_dnn_last_call(), "workspace=");
      if (!q || sscanf(q, "workspace=%lu given %lu needed", &given, &needed) != 2)
        fail_msg("no workspace in %s", ts_dnn_last_call());
      if (!strcmp(rows[i].v, "1") && needed > (1ul << 20)) fail_msg("1 MiB: %lu bytes needed", needed);
      release(o, 3);
    } else {
      if (st == EM_OK) fail_msg("EMBER_CUDNN_WORKSPACE_MB='%s' was taken", rows[i].v);
      if (!strstr(em_last_error(), "EMBER_CUDNN_WORKSPACE_MB")) fail_msg("message: %s", em_last_error());
    }
    em_exec_free(e);
    rg_free(&t);
  }
  /* a device with about a MiB free: the search halves its workspace to nothing rather than
   * fail a convolution that needs none */
  next_mem_mb = "1";
  use_doubles("9.0");
  forward_case(&p, 1, 4);
  /* a choice made within less than the limit is not the limit's: a process with the memory
   * searches again rather than inherit it from the disk */
  use_doubles_cache("9.0", "13000", "9.19.0", "13000", 1);
  if (searches_of_run(&p, 4) != 1) fail_msg("a choice made in 0 bytes was stored as the 256 MiB one");
  if (searches_of_run(&p, 4) != 0) fail_msg("and the full search was not remembered");
}

/* cuDNN 8.9.7 (its own version and status numbering) on a Pascal device with a CUDA 12.4
 * driver: used, right, and an injected failure is named with cuDNN 8's status name. */
static void test_cudnn8(void **state) {
  (void)state;
  if (!use_doubles_cache("6.1=Tesla P40 (double)", "12040", "8.9.7", "12020", 0)) skip();
  int used = 0;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cudnn", &used, why, sizeof why), EM_OK);
  if (!used || !strstr(why, "cuDNN 8.9.7")) fail_msg("cuDNN 8.9.7 on a P40: used %d: %s", used, why);
  spec p = conv(2, 2, 4, 6, 2, 7, 3, 2, 1, 1);
  p.bias = 1;
  forward_case(&p, 1, 12);
  training_case(&p, 13, 1e-4);
  setenv("FAKECUDNN_FAIL", "cudnnConvolutionForward=8", 1); /* cuDNN 8's EXECUTION_FAILED */
  rg t;
  rg_build(&t, &p, 0, 14);
  em_exec *e = rg_exec(&t, em_cuda(0));
  em_tensor *o = NULL;
  if (rg_run(&t, e, &o) == EM_OK) fail_msg("an injected failure did not fail the run");
  if (!strstr(em_last_error(), "CUDNN_STATUS_EXECUTION_FAILED")) fail_msg("message: %s", em_last_error());
  em_exec_free(e);
  rg_free(&t);
  unsetenv("FAKECUDNN_FAIL");
}

/* A cuDNN built for CUDA 13 on a CUDA 12.8 driver is not used (no cudnnCreate), the reason
 * says so, and convolutions stay right on Ember's kernels. */
static void test_driver_older_than_cudnn(void **state) {
  (void)state;
  if (!use_doubles_cache("9.0", "12080", "9.19.0", "13000", 0)) skip();
  spec p = conv(2, 1, 2, 3, 1, 6, 3, 1, 1, 1);
  forward_case(&p, 0, 15);
  rg t;
  rg_build(&t, &p, 0, 15);
  em_exec *e = rg_exec(&t, em_cuda(0));
  em_tensor *o;
  assert_int_equal(rg_run(&t, e, &o), EM_OK);
  char road[300];
  road_of(e, "convolution", road, sizeof road);
  if (!strstr(road, "CUDA 13.0 driver")) fail_msg("road: %s", road);
  if (ts_dnn_calls("cudnnCreate")) fail_msg("cudnnCreate called for a driver the library cannot run on");
  em_tensor_release(o);
  em_exec_free(e);
  rg_free(&t);
}

/* A failure of each entry point Ember calls: the run fails naming the call and the op, no
 * descriptor is left, and the next run (the fault gone) is right. cudnnCreate's failure
 * keeps Ember's kernels with the reason until the runtime restarts. */
static void test_fault_in_every_entry_point(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec p = conv(2, 2, 4, 4, 2, 6, 3, 1, 1, 1);
  p.bias = 1;
  for (size_t i = 0; i < N_ENTRY; i++) {
    const char *name = entry_points[i];
    int create = !strcmp(name, "cudnnCreate");
    new_cache_dir(); /* searches happen */
    setenv("EMBER_CACHE_DIR", cache_dir, 1);
    em_shutdown();
    char fail[160];
    snprintf(fail, sizeof fail, "%s=4000", name); /* CUDNN_STATUS_INTERNAL_ERROR */
    setenv("FAKECUDNN_FAIL", fail, 1);
    rg t;
    rg_build(&t, &p, 1, 100 + i);
    em_exec *e = rg_exec(&t, em_cuda(0));
    em_tensor *o[4] = {0};
    em_status st = rg_run(&t, e, o);
    if (create) {
      char road[300];
      if (st) fail_msg("cudnnCreate failing: the run failed: %s", em_last_error());
      road_of(e, "convolution", road, sizeof road);
      if (!strstr(road, "cudnnCreate") || !strstr(road, "CUDNN_STATUS_INTERNAL_ERROR")) fail_msg("road: %s", road);
      release(o, 4);
    } else {
      if (st == EM_OK) fail_msg("%s failing: the run succeeded", name);
      const char *msg = em_last_error();
      if (!strstr(msg, name) && !(strstr(name, "Create") && strstr(msg, "cudnnCreate*Descriptor")))
        fail_msg("%s failing: the message does not name it: %s", name, msg);
      if (!strstr(msg, "op '")) fail_msg("%s failing: the message does not name the op: %s", name, msg);
      if (!strstr(msg, "CUDNN_STATUS_INTERNAL_ERROR")) fail_msg("%s failing: no status: %s", name, msg);
    }
    if (ts_dnn_live_descriptors()) fail_msg("%s failing: %zu descriptors left", name, ts_dnn_live_descriptors());
    unsetenv("FAKECUDNN_FAIL");
    em_tensor *o2[4] = {0}, *want[4] = {0};
    if (rg_run(&t, e, o2)) fail_msg("%s: the run after the fault: %s", name, em_last_error());
    em_exec *c = rg_exec(&t, em_cpu());
    assert_int_equal(rg_run(&t, c, want), EM_OK);
    check_same(o2, want, t.n_outs, 1e-4, name);
    release(o2, 4), release(want, 4);
    em_exec_free(c);
    em_exec_free(e);
    rg_free(&t);
    if (ts_dnn_live_descriptors()) fail_msg("%s: %zu descriptors left after the good run", name, ts_dnn_live_descriptors());
  }
  em_shutdown();
  if (ts_dnn_live_handles()) fail_msg("%zu cuDNN handles left after em_shutdown", ts_dnn_live_handles());
}

/* em_shutdown between runs: the handle goes, the next runtime makes a new one, the memory
 * table starts empty (the disk keeps the choices), results stay right. */
static void test_shutdown_between_runs(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  spec p = conv(2, 2, 3, 4, 1, 6, 3, 2, 1, 1);
  for (int round = 0; round < 3; round++) {
    unsigned long creates = ts_dnn_calls("cudnnCreate");
    training_case(&p, 16, 1e-4);
    if (ts_dnn_calls("cudnnCreate") != creates + 1) fail_msg("round %d: %lu cudnnCreate calls", round,
                                                        ts_dnn_calls("cudnnCreate") - creates);
    em_shutdown();
    if (ts_dnn_live_handles()) fail_msg("round %d: %zu handles left after em_shutdown", round, ts_dnn_live_handles());
    if (ts_dnn_live_descriptors()) fail_msg("round %d: %zu descriptors left", round, ts_dnn_live_descriptors());
  }
}

/* Portable mode never calls cuDNN and gives the CPU's portable bits; EMBER_CUDNN=0 calls
 * nothing either and says why. */
static void test_portable_and_off_call_nothing(void **state) {
  (void)state;
  spec cases[] = {conv(2, 2, 4, 4, 2, 6, 3, 2, 1, 1), tconv(2, 1, 2, 3, 1, 4, 3, 2, 1, 1, 1)};
  for (int off = 0; off < 2; off++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      if (!use_doubles("9.0")) skip();
      if (off) setenv("EMBER_CUDNN", "0", 1);
      spec p = cases[i];
      p.bias = 1;
      rg t;
      rg_build(&t, &p, 1, 17);
      em_tensor *got[4] = {0}, *want[4] = {0};
      for (int dev = 0; dev < 2; dev++) {
        em_exec *e = rg_exec(&t, dev ? em_cuda(0) : em_cpu());
        if (!off) assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
        if (rg_run(&t, e, dev ? got : want)) fail_msg("run: %s", em_last_error());
        if (dev && off) {
          char road[300];
          road_of(e, p.t ? "convolution_transpose" : "convolution", road, sizeof road);
          if (!strstr(road, "EMBER_CUDNN=0")) fail_msg("road with EMBER_CUDNN=0: %s", road);
        }
        em_exec_free(e);
      }
      if (all_calls()) fail_msg("%s, case %zu: %lu cuDNN calls", off ? "EMBER_CUDNN=0" : "portable", i, all_calls());
      for (int k = 0; k < t.n_outs; k++) {
        if (!off) {
          int64_t n1, n2;
          double *a = ot_values(got[k], &n1), *b = ot_values(want[k], &n2);
          if (n1 != n2 || memcmp(a, b, sizeof *a * (size_t)n1))
            fail_msg("portable, case %zu, output %d: the GPU's bits are not the CPU's", i, k);
          free(a), free(b);
        }
      }
      if (off) check_same(got, want, t.n_outs, 1e-4, "EMBER_CUDNN=0");
      release(got, 4), release(want, 4);
      rg_free(&t);
      unsetenv("EMBER_CUDNN");
    }
}

/* Under three FAKECUDA_SEED values (the double's non-deterministic algorithms sum in other
 * orders), a training graph of each kind stays right; under EMBER_CUDNN_DETERMINISTIC=1 the
 * gradients' bits do not change with the seed. */
static void test_seeds(void **state) {
  (void)state;
  const char *saved = getenv("FAKECUDA_SEED");
  char keep[32] = "";
  if (saved) snprintf(keep, sizeof keep, "%s", saved);
  spec cases[] = {conv(2, 4, 3, 4, 1, 6, 3, 1, 1, 1), tconv(2, 3, 4, 4, 2, 4, 3, 2, 1, 1, 1)};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double *first[4] = {0};
    int64_t counts[4] = {0};
    for (int seed = 1; seed <= 3; seed++) {
      char v[16];
      snprintf(v, sizeof v, "%d", seed * 7919);
      setenv("FAKECUDA_SEED", v, 1);
      if (!use_doubles("9.0")) skip();
      training_case(&cases[i], 18, 1e-4);
      setenv("EMBER_CUDNN_DETERMINISTIC", "1", 1);
      rg t;
      rg_build(&t, &cases[i], 1, 19);
      em_exec *e = rg_exec(&t, em_cuda(0));
      em_tensor *o[4] = {0};
      if (rg_run(&t, e, o)) fail_msg("deterministic: %s", em_last_error());
      for (int k = 0; k < t.n_outs; k++) {
        int64_t n;
        double *vals = ot_values(o[k], &n);
        if (seed == 1) first[k] = vals, counts[k] = n;
        else {
          if (n != counts[k] || memcmp(vals, first[k], sizeof *vals * (size_t)n))
            fail_msg("case %zu, output %d: deterministic-only results changed with the seed", i, k);
          free(vals);
        }
      }
      release(o, 4);
      em_exec_free(e);
      rg_free(&t);
      unsetenv("EMBER_CUDNN_DETERMINISTIC");
    }
    for (int k = 0; k < 4; k++) free(first[k]);
  }
  if (*keep) setenv("FAKECUDA_SEED", keep, 1);
  else unsetenv("FAKECUDA_SEED");
}

/* Two devices, both served: each runs with its own handle (the double refuses a handle of
 * another context); a device cuDNN does not serve beside one it does. */
static void test_two_devices(void **state) {
  (void)state;
  if (use_doubles("9.0,8.0") < 2) skip();
  spec p = conv(2, 2, 3, 4, 1, 6, 3, 1, 1, 1);
  for (int d = 0; d < 2; d++) {
    rg t;
    rg_build(&t, &p, 0, 20);
    em_exec *e = rg_exec(&t, em_cuda(d));
    unsigned long before = conv_runs();
    em_tensor *o;
    if (rg_run(&t, e, &o)) fail_msg("device %d: %s", d, em_last_error());
    check_y(&t, o, "two devices");
    if (conv_runs() == before) fail_msg("device %d did not use cuDNN", d);
    em_tensor_release(o);
    em_exec_free(e);
    rg_free(&t);
  }
  use_doubles("9.0,7.0");
  for (int d = 0; d < 2; d++) {
    rg t;
    rg_build(&t, &p, 0, 20);
    em_exec *e = rg_exec(&t, em_cuda(d));
    unsigned long before = conv_runs();
    em_tensor *o;
    if (rg_run(&t, e, &o)) fail_msg("device %d: %s", d, em_last_error());
    check_y(&t, o, "a served and an unserved device");
    if ((conv_runs() != before) != (d == 0)) fail_msg("device %d: cuDNN use wrong", d);
    em_tensor_release(o);
    em_exec_free(e);
    rg_free(&t);
  }
}

/* em_cudnn_takes's arithmetic: products past int64 and spans past int64 are refused, not
 * wrapped; negative padding is refused. */
static void test_takes_arithmetic(void **state) {
  (void)state;
  char why[200];
  em_cudnn_geom g = {.dt = EM_F32, .nd = 3, .n = 1ll << 20, .ci = 1ll << 20, .co = 1, .groups = 1};
  for (int i = 0; i < 3; i++) g.img[i] = g.out[i] = 1ll << 12, g.k[i] = g.stride[i] = g.dil[i] = 1, g.pad[i] = 0;
  /* n ci D H W = 2^76: wraps to 0 in int64 */
  if (em_cudnn_takes(&g, why, sizeof why)) fail_msg("a 2^76-element tensor was taken");
  g.n = 1, g.ci = 1;
  g.img[0] = g.out[0] = 1ll << 30, g.img[1] = g.out[1] = 1ll << 30, g.img[2] = g.out[2] = 1ll << 4;
  if (em_cudnn_takes(&g, why, sizeof why)) fail_msg("a 2^64-element tensor was taken");
  em_cudnn_geom h = {.dt = EM_F32, .nd = 1, .n = 1, .ci = 1, .co = 1, .groups = 1};
  h.img[0] = 8, h.k[0] = 3, h.stride[0] = 1, h.dil[0] = 1, h.pad[0] = -1, h.out[0] = 4;
  if (em_cudnn_takes(&h, why, sizeof why)) fail_msg("negative padding was taken");
  h.pad[0] = 0, h.out[0] = 6;
  if (!em_cudnn_takes(&h, why, sizeof why)) fail_msg("a plain 1-D problem refused: %s", why);
  h.k[0] = 1ll << 40, h.dil[0] = 1ll << 40, h.img[0] = 8; /* span (k - 1) d + 1 past int64 */
  if (em_cudnn_takes(&h, why, sizeof why)) fail_msg("an overflowing span was taken");
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int remove_caches(void **state) {
  (void)state;
  char base[512];
  ot_tmp_path(base, sizeof base, "cudnn_review_");
  for (int i = 1; i <= serial; i++) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s%d", base, i);
    nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
  }
  unsetenv("EMBER_CACHE_DIR");
  em_shutdown();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_takes_arithmetic),
      cmocka_unit_test(test_transpose_through_cudnn),
      cmocka_unit_test(test_transpose_gradients),
      cmocka_unit_test(test_convolution_shapes),
      cmocka_unit_test(test_unit_axis_all_padding),
      cmocka_unit_test(test_descriptor_rank),
      cmocka_unit_test(test_transpose_negative_padding),
      cmocka_unit_test(test_auto_pad),
      cmocka_unit_test(test_directions_have_their_own_keys),
      cmocka_unit_test(test_key_separates_settings),
      cmocka_unit_test(test_two_threads_one_device),
      cmocka_unit_test(test_two_streams_one_handle),
      cmocka_unit_test(test_memory_table_eviction),
      cmocka_unit_test(test_disk_cache_cases),
      cmocka_unit_test(test_workspace_edges),
      cmocka_unit_test(test_cudnn8),
      cmocka_unit_test(test_driver_older_than_cudnn),
      cmocka_unit_test(test_fault_in_every_entry_point),
      cmocka_unit_test(test_shutdown_between_runs),
      cmocka_unit_test(test_portable_and_off_call_nothing),
      cmocka_unit_test(test_seeds),
      cmocka_unit_test(test_two_devices),
  };
  return cmocka_run_group_tests(tests, NULL, remove_caches);
}
