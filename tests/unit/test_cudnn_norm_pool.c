/* Batch normalisation and window pooling through cuDNN in the fast mode
 * (runtime/cudnn_norm_pool.c, ops/norm_gpu.c, ops/pool_gpu.c), run on the libcuda double with
 * the cuDNN double (tests/fakecudnn): each case goes through its cuDNN call (call counts, the
 * double's last_call text, the road em_exec_describe reports) and is checked against float64
 * references written here and against the CPU: batch norm inference, training with the running
 * statistics after several steps (ONNX momentum, unbiased running variance), its gradient; max
 * and average pools (counting the padding or not), 1-D to 3-D, forward and backward. Every
 * fallback says why (dilation, asymmetric padding, ceil_mode, an inference-mode gradient, a
 * device cuDNN does not serve, EMBER_CUDNN=0), portable mode makes no cuDNN call, and an
 * injected failure fails the run naming the call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_norm_pool.h"
#include "gpu_double.h"
#include "op_testkit.h"

/* The doubles (tests/support/gpu_double.h): devices and a cuDNN version, cuBLAS off. 0 when the
 * doubles are not built (the test then skips). */
static int use_doubles_v(const char *devices, const char *version) {
  return ts_use_doubles(&(ts_doubles){.devices = devices, .cudnn = version});
}

static int use_doubles(void) { return use_doubles_v("9.0=NVIDIA H100 (double)", "9.19.0"); }

/* The step's road in em_exec_describe: the last "[...]" on the first line naming op. */
static void road_of(const em_exec *e, const char *op, char *out, size_t cap) {
  char plan[8192];
  em_exec_describe(e, plan, sizeof plan);
  char key[64];
  snprintf(key, sizeof key, " %s(", op);
  const char *line = strstr(plan, key), *end = line ? strchr(line, '\n') : NULL, *open = NULL;
  if (line && !end) end = line + strlen(line);
  for (const char *p = line; p && p < end; p++)
    if (*p == '[') open = p;
  const char *close = open ? strchr(open, ']') : NULL;
  snprintf(out, cap, "%.*s", close ? (int)(close - open - 1) : 0, close ? open + 1 : "");
}

static void expect_road(const em_exec *e, const char *op, const char *want, const char *what) {
  char road[512];
  road_of(e, op, road, sizeof road);
  if (!strstr(road, want)) fail_msg("%s: %s's road is '%s', want '%s'", what, op, road, want);
}

static double *values_of(const em_tensor *t) {
  int64_t n;
  return ot_values(t, &n);
}

static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}
static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }

/* --------------------------------------------------- batch normalisation --- */

/* y = batch_normalization(x, scale, bias, running_mean, running_var) with the running
 * statistics as em_state values (updated in place when training), and, when grads, the
 * gradients of L = sum(y * w) for x, scale and bias. */
typedef struct bn_graph {
  em_graph *g;
  em_var x, scale, bias, rm, rv, w, y, outs[4];
  int n_out;
  em_exec *e;
} bn_graph;

static void bn_build(bn_graph *b, em_dtype dt, int nd, const int64_t *xs, double eps, double momentum, int grads,
                     int training, em_device dev, em_mode mode, const em_tensor *rm0, const em_tensor *rv0) {
  memset(b, 0, sizeof *b);
  int64_t cs[1] = {xs[1]};
  assert_int_equal(em_graph_create(&b->g), EM_OK);
  assert_int_equal(em_input(b->g, "x", dt, nd, xs, &b->x), EM_OK);
  assert_int_equal(em_input(b->g, "scale", dt, 1, cs, &b->scale), EM_OK);
  assert_int_equal(em_input(b->g, "bias", dt, 1, cs, &b->bias), EM_OK);
  em_init i1 = {.kind = EM_INIT_FROM_DATA, .data = rm0}, i2 = {.kind = EM_INIT_FROM_DATA, .data = rv0};
  assert_int_equal(em_state(b->g, "rm", dt, 1, cs, &i1, &b->rm), EM_OK);
  assert_int_equal(em_state(b->g, "rv", dt, 1, cs, &i2, &b->rv), EM_OK);
  em_var in[5] = {b->x, b->scale, b->bias, b->rm, b->rv};
  em_attr at[2] = {AF("epsilon", eps), AF("momentum", momentum)};
  if (em_apply(b->g, "batch_normalization", in, 5, at, 2, &b->y, 1)) fail_msg("bn: %s", em_last_error());
  b->outs[b->n_out++] = b->y;
  if (grads) {
    em_var prod, loss, wrt[3] = {b->x, b->scale, b->bias};
    assert_int_equal(em_input(b->g, "w", dt, nd, xs, &b->w), EM_OK);
    em_var pin[2] = {b->y, b->w};
    assert_int_equal(em_apply(b->g, "mul", pin, 2, NULL, 0, &prod, 1), EM_OK);
    assert_int_equal(em_apply(b->g, "reduce_sum", &prod, 1, NULL, 0, &loss, 1), EM_OK);
    if (em_gradients(b->g, loss, wrt, 3, b->outs + 1)) fail_msg("gradients: %s", em_last_error());
    b->n_out = 4;
  }
  if (em_exec_create(b->g, b->outs, b->n_out, dev, &b->e)) fail_msg("exec: %s", em_last_error());
  assert_int_equal(em_exec_set_mode(b->e, mode), EM_OK);
  assert_int_equal(em_exec_set_training(b->e, training), EM_OK);
}

static void bn_free(bn_graph *b) {
  em_exec_free(b->e);
  em_graph_free(b->g);
}

static em_status bn_run(bn_graph *b, em_tensor *x, em_tensor *scale, em_tensor *bias, em_tensor *w, em_tensor **out) {
  em_feed f[4] = {{b->x, x}, {b->scale, scale}, {b->bias, bias}, {b->w, w}};
  return em_exec_run(b->e, f, w ? 4 : 3, out);
}

/* The float64 reference, per channel over n and the positions: y from the batch statistics
 * (training) or the running ones, the running statistics updated in place (training: ONNX's
 * momentum, the unbiased batch variance), and with dy the gradients. */
static void bn_reference(int training, int64_t n, int64_t c, int64_t inner, const double *x, const double *scale,
                         const double *bias, double *rm, double *rv, double eps, double momentum, double *y,
                         const double *dy, double *dx, double *dscale, double *dbias) {
  for (int64_t ch = 0; ch < c; ch++) {
    double m = (double)(n * inner), mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < inner; k++) mean += x[(i * c + ch) * inner + k];
    mean /= m;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < inner; k++) {
        double d = x[(i * c + ch) * inner + k] - mean;
        var += d * d;
      }
    var /= m;
    double mu = training ? mean : rm[ch], v = training ? var : rv[ch], inv = 1 / sqrt(v + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < inner; k++) {
        int64_t at = (i * c + ch) * inner + k;
        y[at] = scale[ch] * (x[at] - mu) * inv + bias[ch];
        if (dy) sdy += dy[at], sdyx += dy[at] * (x[at] - mu) * inv;
      }
    if (dy) {
      dscale[ch] = sdyx, dbias[ch] = sdy;
      for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < inner; k++) {
          int64_t at = (i * c + ch) * inner + k;
          double xhat = (x[at] - mu) * inv;
          dx[at] = training ? scale[ch] * inv / m * (m * dy[at] - sdy - xhat * sdyx) : scale[ch] * inv * dy[at];
        }
    }
    if (training) {
      rm[ch] = rm[ch] * momentum + mean * (1 - momentum);
      rv[ch] = rv[ch] * momentum + var * m / (m - 1) * (1 - momentum);
    }
  }
}

typedef struct bn_case {
  em_dtype dt;
  int nd;
  int64_t xs[5];
  double eps, momentum;
} bn_case;

static const bn_case bn_cases[] = {
    {EM_F32, 4, {2, 3, 4, 5}, 1e-5, 0.9},    {EM_F64, 4, {3, 2, 3, 3}, 1e-3, 0.8},
    {EM_F32, 5, {2, 3, 2, 3, 4}, 1e-5, 0.7}, {EM_F64, 2, {7, 3}, 1e-4, 0.5},
    {EM_F32, 3, {4, 3, 5}, 1e-2, 0.0},       {EM_F64, 4, {1, 2, 1, 3}, 0.0, 1.0},
};

static int64_t prod(const int64_t *d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= d[i];
  return p;
}

/* One case: `steps` runs on the device and on the CPU, each checked against the reference
 * (outputs, gradients when grads, and the running statistics after the last run); returns
 * nothing, fails the test. */
static void bn_check(const bn_case *k, int training, int grads, int steps, const char *what) {
  int64_t n = k->xs[0], c = k->xs[1], inner = prod(k->xs, 2, k->nd), total = n * c * inner, cs[1] = {c};
  double tol = k->dt == EM_F32 ? 2e-5 : 1e-11;
  em_tensor *rm0 = ot_rand(k->dt, 1, cs, 11, -1, 1), *rv0 = ot_rand(k->dt, 1, cs, 12, 0.5, 2);
  double *rm = values_of(rm0), *rv = values_of(rv0);
  bn_graph dev, cpu;
  bn_build(&dev, k->dt, k->nd, k->xs, k->eps, k->momentum, grads, training, em_cuda(0), EM_MODE_FAST, rm0, rv0);
  bn_build(&cpu, k->dt, k->nd, k->xs, k->eps, k->momentum, grads, training, em_cpu(), EM_MODE_FAST, rm0, rv0);
  const char *fwd = training ? "cudnnBatchNormalizationForwardTraining" : "cudnnBatchNormalizationForwardInference";
  unsigned long f0 = ts_dnn_calls(fwd), b0 = ts_dnn_calls("cudnnBatchNormalizationBackward");
  double *y = malloc(sizeof(double) * (size_t)total), *dx = malloc(sizeof(double) * (size_t)total), ds[64], db[64];
  for (int s = 0; s < steps; s++) {
    em_tensor *xt = ot_rand(k->dt, k->nd, k->xs, 100 + (uint64_t)s, -2, 2), *st = ot_rand(k->dt, 1, cs, 200, 0.5, 1.5);
    em_tensor *bt = ot_rand(k->dt, 1, cs, 300, -1, 1), *wt = grads ? ot_rand(k->dt, k->nd, k->xs, 400, -1, 1) : NULL;
    double *xv = values_of(xt), *sv = values_of(st), *bv = values_of(bt), *wv = wt ? values_of(wt) : NULL;
    bn_reference(training, n, c, inner, xv, sv, bv, rm, rv, k->eps, k->momentum, y, wv, dx, ds, db);
    em_tensor *got[4] = {NULL}, *want[4] = {NULL};
    if (bn_run(&dev, xt, st, bt, wt, got)) fail_msg("%s: device run: %s", what, em_last_error());
    if (bn_run(&cpu, xt, st, bt, wt, want)) fail_msg("%s: CPU run: %s", what, em_last_error());
    char msg[160];
    const double *refs[4] = {y, dx, ds, db};
    const char *names[4] = {"y", "dx", "dscale", "dbias"};
    for (int o = 0; o < (grads ? 4 : 1); o++) {
      snprintf(msg, sizeof msg, "%s step %d: %s against the reference", what, s, names[o]);
      ot_expect_values(got[o], refs[o], o < 2 ? total : c, tol, msg);
      int64_t m;
      double *cv = ot_values(want[o], &m);
      snprintf(msg, sizeof msg, "%s step %d: %s against the CPU", what, s, names[o]);
      ot_expect_values(got[o], cv, m, tol, msg);
      free(cv);
      em_tensor_release(got[o]), em_tensor_release(want[o]);
    }
    free(xv), free(sv), free(bv), free(wv);
    em_tensor_release(xt), em_tensor_release(st), em_tensor_release(bt), em_tensor_release(wt);
  }
  if (ts_dnn_calls(fwd) - f0 != (unsigned long)steps) fail_msg("%s: %lu calls of %s, want %d", what, ts_dnn_calls(fwd) - f0, fwd, steps);
  if (grads && training && ts_dnn_calls("cudnnBatchNormalizationBackward") - b0 != (unsigned long)steps)
    fail_msg("%s: %lu calls of cudnnBatchNormalizationBackward, want %d", what,
             ts_dnn_calls("cudnnBatchNormalizationBackward") - b0, steps);
  if (!strstr(ts_dnn_last_call(), "mode=SPATIAL")) fail_msg("%s: not the spatial mode: %s", what, ts_dnn_last_call());
  expect_road(dev.e, "batch_normalization", training ? "cuDNN 9.19.0, batch normalization (training)"
                                                     : "cuDNN 9.19.0, batch normalization (inference)", what);
  if (grads)
    expect_road(dev.e, "_batch_norm_grad", training ? "cuDNN 9.19.0, batch normalization backward (training)"
                                                    : "Ember's kernels: an inference-mode gradient", what);
  /* the running statistics after the steps: the reference's and the CPU's */
  for (int v = 0; v < 2; v++) {
    em_tensor *gd = NULL, *gc = NULL;
    assert_int_equal(em_parameter_get(dev.g, v ? dev.rv : dev.rm, em_cpu(), &gd), EM_OK);
    assert_int_equal(em_parameter_get(cpu.g, v ? cpu.rv : cpu.rm, em_cpu(), &gc), EM_OK);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: running %s after %d steps against the reference", what, v ? "var" : "mean", steps);
    ot_expect_values(gd, v ? rv : rm, c, tol, msg);
    double *cv = values_of(gc);
    snprintf(msg, sizeof msg, "%s: running %s after %d steps against the CPU", what, v ? "var" : "mean", steps);
    ot_expect_values(gd, cv, c, tol, msg);
    free(cv);
    em_tensor_release(gd), em_tensor_release(gc);
  }
  free(y), free(dx), free(rm), free(rv);
  em_tensor_release(rm0), em_tensor_release(rv0);
  bn_free(&dev), bn_free(&cpu);
}

/* bn_check of every case, in training (3 steps) and/or inference (2 runs), then no descriptor
 * left behind. */
static void bn_check_all(const bn_case *cases, size_t n, int training, int inference, const char *tag) {
  for (size_t i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "%s training case %zu", tag, i);
    if (training) bn_check(&cases[i], 1, 1, 3, what);
    snprintf(what, sizeof what, "%s inference case %zu", tag, i);
    if (inference) bn_check(&cases[i], 0, 1, 2, what);
  }
  if (ts_dnn_live_descriptors()) fail_msg("%zu cuDNN descriptors left behind", ts_dnn_live_descriptors());
}

static void test_bn_inference(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  bn_check_all(bn_cases, sizeof bn_cases / sizeof bn_cases[0], 0, 1, "");
}

/* Three training steps: y and the gradients each step, the running statistics after the last
 * (momentum 0 and 1 included: cuDNN's factor 1 and 0). */
static void test_bn_training(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  bn_check_all(bn_cases, sizeof bn_cases / sizeof bn_cases[0], 1, 0, "");
}

/* The forward alone in training (no gradient graph): the momentum convention in isolation. */
static void test_bn_running_statistics(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const bn_case k = {EM_F64, 4, {4, 2, 3, 2}, 1e-5, 0.25};
  bn_check(&k, 1, 0, 5, "five f64 steps, momentum 0.25");
  if (!strstr(ts_dnn_last_call(), "[4,2,6,1]")) fail_msg("x is not handed over as [n, c, inner, 1]: %s", ts_dnn_last_call());
}

/* ---------------------------------------------------------------- pools --- */

typedef struct pool_case {
  const char *op;   /* max_pool or average_pool */
  em_dtype dt;
  int nsp;
  int64_t xs[5], k[3], s[3], pads[6];
  int cip;
} pool_case;

/* The float64 reference of the window pool and its gradient (max: to the first maximum; the
 * inputs are random, so tie-free), symmetric or not, no dilation, floor output sizes. */
static void pool_reference(const pool_case *p, const double *x, const double *dy, double *y, double *dx,
                           int64_t *ys) {
  int nsp = p->nsp;
  int64_t img[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, pb[3] = {0}, pe[3] = {0};
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    img[j] = p->xs[2 + i], k[j] = p->k[i], s[j] = p->s[i], pb[j] = p->pads[i], pe[j] = p->pads[nsp + i];
    out[j] = (img[j] + pb[j] + pe[j] - k[j]) / s[j] + 1;
    ys[2 + i] = out[j];
  }
  ys[0] = p->xs[0], ys[1] = p->xs[1];
  int64_t planes = p->xs[0] * p->xs[1], isz = img[0] * img[1] * img[2], osz = out[0] * out[1] * out[2];
  int is_max = !strcmp(p->op, "max_pool");
  for (int64_t i = 0; i < planes * isz; i++) dx[i] = 0;
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t o0 = 0; o0 < out[0]; o0++)
      for (int64_t o1 = 0; o1 < out[1]; o1++)
        for (int64_t o2 = 0; o2 < out[2]; o2++) {
          int64_t oi = pl * osz + (o0 * out[1] + o1) * out[2] + o2, best = -1, count = 0, volume = 0;
          double acc = is_max ? -INFINITY : 0;
          for (int64_t t0 = 0; t0 < k[0]; t0++)
            for (int64_t t1 = 0; t1 < k[1]; t1++)
              for (int64_t t2 = 0; t2 < k[2]; t2++) {
                int64_t a0 = o0 * s[0] - pb[0] + t0, a1 = o1 * s[1] - pb[1] + t1, a2 = o2 * s[2] - pb[2] + t2;
                volume++;
                if (a0 < 0 || a0 >= img[0] || a1 < 0 || a1 >= img[1] || a2 < 0 || a2 >= img[2]) continue;
                int64_t ii = pl * isz + (a0 * img[1] + a1) * img[2] + a2;
                count++;
                if (is_max && x[ii] > acc) acc = x[ii], best = ii;
                if (!is_max) acc += x[ii];
              }
          double div = (double)(p->cip ? volume : count);
          y[oi] = is_max ? acc : acc / div;
          if (is_max) {
            dx[best] += dy[oi];
            continue;
          }
          for (int64_t t0 = 0; t0 < k[0]; t0++)
            for (int64_t t1 = 0; t1 < k[1]; t1++)
              for (int64_t t2 = 0; t2 < k[2]; t2++) {
                int64_t a0 = o0 * s[0] - pb[0] + t0, a1 = o1 * s[1] - pb[1] + t1, a2 = o2 * s[2] - pb[2] + t2;
                if (a0 < 0 || a0 >= img[0] || a1 < 0 || a1 >= img[1] || a2 < 0 || a2 >= img[2]) continue;
                dx[pl * isz + (a0 * img[1] + a1) * img[2] + a2] += dy[oi] / div;
              }
        }
}

/* The shape of v; returns its rank. */
static int var_dims(const em_graph *g, em_var v, int64_t *dims) {
  em_dtype dt;
  int nd = 0;
  assert_int_equal(em_var_info(g, v, &dt, &nd, dims), EM_OK);
  return nd;
}

typedef struct pool_graph {
  em_graph *g;
  em_var x, w, y, outs[2];
  em_exec *e;
} pool_graph;

static void pool_build(pool_graph *b, const pool_case *p, int ceil_mode, const int64_t *dil, em_device dev,
                       em_mode mode) {
  memset(b, 0, sizeof *b);
  int nd = 2 + p->nsp;
  assert_int_equal(em_graph_create(&b->g), EM_OK);
  assert_int_equal(em_input(b->g, "x", p->dt, nd, p->xs, &b->x), EM_OK);
  em_attr at[6] = {AIS("kernel_shape", p->k, p->nsp), AIS("strides", p->s, p->nsp), AIS("pads", p->pads, 2 * p->nsp),
                   AI("ceil_mode", ceil_mode)};
  int n_at = 4;
  if (dil) at[n_at++] = AIS("dilations", dil, p->nsp);
  if (!strcmp(p->op, "average_pool")) at[n_at++] = AI("count_include_pad", p->cip);
  if (em_apply(b->g, p->op, &b->x, 1, at, n_at, &b->y, 1)) fail_msg("%s: %s", p->op, em_last_error());
  em_var prod, loss;
  int64_t ys[EM_MAX_DIMS];
  var_dims(b->g, b->y, ys);
  assert_int_equal(em_input(b->g, "w", p->dt, nd, ys, &b->w), EM_OK);
  em_var pin[2] = {b->y, b->w};
  assert_int_equal(em_apply(b->g, "mul", pin, 2, NULL, 0, &prod, 1), EM_OK);
  assert_int_equal(em_apply(b->g, "reduce_sum", &prod, 1, NULL, 0, &loss, 1), EM_OK);
  b->outs[0] = b->y;
  if (em_gradients(b->g, loss, &b->x, 1, &b->outs[1])) fail_msg("gradients: %s", em_last_error());
  if (em_exec_create(b->g, b->outs, 2, dev, &b->e)) fail_msg("exec: %s", em_last_error());
  assert_int_equal(em_exec_set_mode(b->e, mode), EM_OK);
}

static void pool_free(pool_graph *b) {
  em_exec_free(b->e);
  em_graph_free(b->g);
}

/* Runs the pool and its gradient on dev and on the CPU with the same inputs: out[0] y, out[1]
 * dx of the device, want[] the CPU's; x and w are returned too (release them). */
static void pool_run(const pool_case *p, int ceil_mode, const int64_t *dil, em_device dev, em_mode mode,
                     em_tensor **out, em_tensor **want, em_tensor **xt, em_tensor **wt, char *road, size_t cap,
                     char *groad, size_t gcap) {
  pool_graph d, c;
  pool_build(&d, p, ceil_mode, dil, dev, mode);
  pool_build(&c, p, ceil_mode, dil, em_cpu(), EM_MODE_FAST);
  int64_t ys[EM_MAX_DIMS];
  int ynd = var_dims(d.g, d.y, ys);
  *xt = ot_rand(p->dt, 2 + p->nsp, p->xs, 5, -1, 1);
  *wt = ot_rand(p->dt, ynd, ys, 6, -1, 1);
  em_feed f[2] = {{d.x, *xt}, {d.w, *wt}}, fc[2] = {{c.x, *xt}, {c.w, *wt}};
  if (em_exec_run(d.e, f, 2, out)) fail_msg("%s on the device: %s", p->op, em_last_error());
  if (em_exec_run(c.e, fc, 2, want)) fail_msg("%s on the CPU: %s", p->op, em_last_error());
  if (road) road_of(d.e, p->op, road, cap);
  if (groad) road_of(d.e, !strcmp(p->op, "max_pool") ? "_max_pool_grad" : "_avg_pool_grad", groad, gcap);
  pool_free(&d), pool_free(&c);
}

static const pool_case pool_cases[] = {
    {"max_pool", EM_F32, 2, {2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
    {"max_pool", EM_F64, 2, {1, 2, 8, 7}, {2, 3}, {1, 2}, {0, 1, 0, 1}, 0},
    {"max_pool", EM_F32, 3, {1, 2, 5, 6, 7}, {2, 3, 2}, {2, 2, 1}, {0, 1, 1, 0, 1, 1}, 0},
    {"max_pool", EM_F64, 1, {2, 3, 17}, {4}, {3}, {1, 1}, 0},
    {"average_pool", EM_F32, 2, {2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
    {"average_pool", EM_F64, 2, {2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 1},
    {"average_pool", EM_F64, 3, {1, 2, 5, 6, 7}, {2, 2, 3}, {1, 2, 2}, {1, 0, 1, 1, 0, 1}, 1},
    {"average_pool", EM_F32, 1, {2, 2, 13}, {3}, {2}, {1, 1}, 0},
};

/* The GPU's y and dx (got) against the float64 reference and the CPU's (want); releases all. x
 * is the pool's input, w the weights of its loss (dy). */
static void pool_expect(const pool_case *p, em_tensor **got, em_tensor **want, em_tensor *xt, em_tensor *wt,
                        const char *what) {
  double *x = values_of(xt), *w = values_of(wt);
  int64_t nx = em_tensor_numel(xt), ny = em_tensor_numel(wt), ys[5];
  double *y = malloc(sizeof(double) * (size_t)ny), *dx = malloc(sizeof(double) * (size_t)nx);
  pool_reference(p, x, w, y, dx, ys);
  double tol = p->dt == EM_F32 ? 1e-6 : 1e-13;
  char msg[200];
  snprintf(msg, sizeof msg, "%s: y", what);
  ot_expect_values(got[0], y, ny, tol, msg);
  snprintf(msg, sizeof msg, "%s: dx", what);
  ot_expect_values(got[1], dx, nx, tol, msg);
  for (int o = 0; o < 2; o++) {
    int64_t m;
    double *cv = ot_values(want[o], &m);
    snprintf(msg, sizeof msg, "%s: %s against the CPU", what, o ? "dx" : "y");
    ot_expect_values(got[o], cv, m, tol, msg);
    free(cv);
    em_tensor_release(got[o]), em_tensor_release(want[o]);
  }
  free(x), free(w), free(y), free(dx);
  em_tensor_release(xt), em_tensor_release(wt);
}

static void test_pools_through_cudnn(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
    const pool_case *p = &pool_cases[i];
    unsigned long f0 = ts_dnn_calls("cudnnPoolingForward"), b0 = ts_dnn_calls("cudnnPoolingBackward");
    em_tensor *got[2], *want[2], *xt, *wt;
    char road[512], groad[512], what[96];
    snprintf(what, sizeof what, "case %zu (%s %d-D %s%s)", i, p->op, p->nsp, em_dtype_name(p->dt),
             p->cip ? ", counting the padding" : "");
    pool_run(p, 0, NULL, em_cuda(0), EM_MODE_FAST, got, want, &xt, &wt, road, sizeof road, groad, sizeof groad);
    const char *last = ts_dnn_last_call();
    const char *mode = !strcmp(p->op, "max_pool") ? "mode=MAX_DETERMINISTIC"
                     : p->cip ? "mode=AVERAGE_COUNT_INCLUDE_PADDING" : "mode=AVERAGE_COUNT_EXCLUDE_PADDING";
    if (!strstr(last, mode)) fail_msg("%s: the last cuDNN call: %s", what, last);
    if (p->nsp == 1 && !strstr(last, ",1,")) fail_msg("%s: a 1-D pool without its unit axis: %s", what, last);
    /* the forward once, the backward once with the forward recomputed for its y */
    if (ts_dnn_calls("cudnnPoolingForward") - f0 != 2 || ts_dnn_calls("cudnnPoolingBackward") - b0 != 1)
      fail_msg("%s: %lu forward and %lu backward calls, want 2 and 1", what, ts_dnn_calls("cudnnPoolingForward") - f0,
               ts_dnn_calls("cudnnPoolingBackward") - b0);
    if (!strstr(road, "cuDNN 9.19.0, ") || !strstr(groad, "cuDNN 9.19.0, ") || !strstr(groad, "backward"))
      fail_msg("%s: roads '%s' and '%s'", what, road, groad);
    pool_expect(p, got, want, xt, wt, what);
  }
  if (ts_dnn_live_descriptors()) fail_msg("%zu cuDNN descriptors left behind", ts_dnn_live_descriptors());
}

/* A tied window: cuDNN promises the gradient to one maximum, so the check is tie-aware: every
 * window's dy lands whole on elements equal to its maximum (the double takes the first, like
 * Ember's kernels; a real cuDNN may take another). */
static void test_max_pool_ties(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t xs[4] = {1, 1, 4, 4}, k[2] = {2, 2}, s[2] = {2, 2};
  const double xv[16] = {1, 1, 0, 2, 1, 0, 2, 2, 3, 3, 0, 0, 3, 3, 0, 0};
  em_graph *g;
  em_var x, y, loss, dx;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &x), EM_OK);
  em_attr at[2] = {AIS("kernel_shape", k, 2), AIS("strides", s, 2)};
  assert_int_equal(em_apply(g, "max_pool", &x, 1, at, 2, &y, 1), EM_OK);
  assert_int_equal(em_apply(g, "reduce_sum", &y, 1, NULL, 0, &loss, 1), EM_OK);
  assert_int_equal(em_gradients(g, loss, &x, 1, &dx), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &dx, 1, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_tensor(EM_F32, 4, xs, xv), *o = NULL;
  em_feed f = {x, xt};
  if (em_exec_run(e, &f, 1, &o)) fail_msg("run: %s", em_last_error());
  expect_road(e, "_max_pool_grad", "cuDNN 9.19.0, max pooling backward (MAX_DETERMINISTIC", "ties");
  double *d = values_of(o);
  for (int wr = 0; wr < 2; wr++)
    for (int wc = 0; wc < 2; wc++) {
      double top = -INFINITY, sum = 0;
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++) top = fmax(top, xv[(2 * wr + r) * 4 + 2 * wc + c]);
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++) {
          int at = (2 * wr + r) * 4 + 2 * wc + c;
          if (d[at] != 0 && xv[at] != top) fail_msg("window (%d, %d): gradient on %g, not its maximum %g", wr, wc, xv[at], top);
          sum += d[at];
        }
      if (sum != 1) fail_msg("window (%d, %d): its gradient sums to %g, not 1", wr, wc, sum);
    }
  free(d);
  em_tensor_release(o), em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

/* A NaN is its window's maximum (CUDNN_PROPAGATE_NAN), as on the CPU; the others are exact. */
static void test_max_pool_nan(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t xs[4] = {1, 1, 4, 4}, k[2] = {2, 2}, s[2] = {2, 2};
  const double xv[16] = {1, NAN, 0, 2, 1, 0, 2, 5, 3, 3, 0, 0, 7, 3, 0, -1};
  const double want[4] = {NAN, 5, 7, 0};
  em_graph *g;
  em_var x, y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &x), EM_OK);
  em_attr at[2] = {AIS("kernel_shape", k, 2), AIS("strides", s, 2)};
  assert_int_equal(em_apply(g, "max_pool", &x, 1, at, 2, &y, 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_tensor(EM_F32, 4, xs, xv), *o = NULL;
  em_feed f = {x, xt};
  if (em_exec_run(e, &f, 1, &o)) fail_msg("run: %s", em_last_error());
  expect_road(e, "max_pool", "cuDNN 9.19.0, max pooling (MAX_DETERMINISTIC)", "NaN");
  ot_expect_values(o, want, 4, 0, "max pool with a NaN");
  em_tensor_release(o), em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
}

/* Geometries cuDNN's pooling descriptor cannot express keep Ember's kernels, say why and make
 * no cuDNN pooling call; the results are the CPU's. */
static void test_pool_fallbacks(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t dil[2] = {2, 1};
  const struct {
    pool_case p;
    int ceil_mode;
    const int64_t *dil;
    const char *why;
  } rows[] = {
      {{"max_pool", EM_F32, 2, {1, 2, 9, 9}, {3, 2}, {1, 1}, {0, 0, 0, 0}, 0}, 0, dil, "axis 0 has dilation 2"},
      {{"average_pool", EM_F32, 2, {1, 2, 6, 7}, {2, 2}, {1, 1}, {0, 1, 1, 0}, 0}, 0, NULL,
       "axis 0's padding is 0 at the start and 1 at the end"},
      {{"max_pool", EM_F64, 1, {2, 3, 17}, {4}, {3}, {0, 0}, 0}, 1, NULL,
       "axis 0 has 6 windows where cuDNN's rounded-down size gives 5 (ceil_mode)"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    unsigned long f0 = ts_dnn_calls("cudnnPoolingForward"), b0 = ts_dnn_calls("cudnnPoolingBackward");
    em_tensor *got[2], *want[2], *xt, *wt;
    char road[512], groad[512];
    pool_run(&rows[i].p, rows[i].ceil_mode, rows[i].dil, em_cuda(0), EM_MODE_FAST, got, want, &xt, &wt, road,
             sizeof road, groad, sizeof groad);
    if (!strstr(road, "Ember's kernels: cuDNN does not take it: ") || !strstr(road, rows[i].why) ||
        !strstr(groad, rows[i].why))
      fail_msg("row %zu: roads '%s' and '%s', want '%s'", i, road, groad, rows[i].why);
    if (ts_dnn_calls("cudnnPoolingForward") != f0 || ts_dnn_calls("cudnnPoolingBackward") != b0)
      fail_msg("row %zu: cuDNN's pooling was called", i);
    for (int o = 0; o < 2; o++) {
      int64_t m;
      double *cv = ot_values(want[o], &m);
      ot_expect_values(got[o], cv, m, 0, "Ember's kernels against the CPU"); /* the CPU's order: the same bits */
      free(cv);
      em_tensor_release(got[o]), em_tensor_release(want[o]);
    }
    em_tensor_release(xt), em_tensor_release(wt);
  }
}

/* Portable mode never calls cuDNN (and reports no cuDNN road); EMBER_CUDNN=0 and a device
 * cuDNN 9.19 does not serve (CC 7.0) keep Ember's kernels, saying why. */
static void test_portable_and_unserved(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const char *entries[] = {"cudnnBatchNormalizationForwardTraining", "cudnnBatchNormalizationForwardInference",
                           "cudnnBatchNormalizationBackward", "cudnnPoolingForward", "cudnnPoolingBackward"};
  const int64_t xs[4] = {2, 3, 4, 5}, cs[1] = {3};
  em_tensor *rm0 = ot_rand(EM_F32, 1, cs, 1, -1, 1), *rv0 = ot_rand(EM_F32, 1, cs, 2, 0.5, 2);
  for (int round = 0; round < 3; round++) {
    if (round == 1) use_doubles(), setenv("EMBER_CUDNN", "0", 1);
    if (round == 2) use_doubles_v("7.0=Tesla V100 (double)", "9.19.0");
    const char *want = round == 0 ? NULL : round == 1 ? "Ember's kernels: EMBER_CUDNN=0"
                                                      : "Ember's kernels: cuDNN 9.19.0 supports compute capability 7.5";
    em_mode mode = round == 0 ? EM_MODE_PORTABLE : EM_MODE_FAST;
    unsigned long before[5];
    for (int k = 0; k < 5; k++) before[k] = ts_dnn_calls(entries[k]);
    bn_graph b;
    bn_build(&b, EM_F32, 4, xs, 1e-5, 0.9, 1, 1, em_cuda(0), mode, rm0, rv0);
    em_tensor *xt = ot_rand(EM_F32, 4, xs, 3, -2, 2), *st = ot_rand(EM_F32, 1, cs, 4, 0.5, 1.5);
    em_tensor *bt = ot_rand(EM_F32, 1, cs, 5, -1, 1), *wt = ot_rand(EM_F32, 4, xs, 6, -1, 1), *o[4];
    if (bn_run(&b, xt, st, bt, wt, o)) fail_msg("round %d: %s", round, em_last_error());
    char road[512];
    road_of(b.e, "batch_normalization", road, sizeof road);
    if (want ? !strstr(road, want) : strstr(road, "cuDNN") != NULL) fail_msg("round %d: bn road '%s'", round, road);
    for (int k = 0; k < 4; k++) em_tensor_release(o[k]);
    em_tensor_release(xt), em_tensor_release(st), em_tensor_release(bt), em_tensor_release(wt);
    bn_free(&b);
    em_tensor *got[2], *ref[2], *px, *pw;
    char proad[512], groad[512];
    pool_run(&pool_cases[0], 0, NULL, em_cuda(0), mode, got, ref, &px, &pw, proad, sizeof proad, groad, sizeof groad);
    if (want ? !strstr(proad, want) || !strstr(groad, want) : strstr(proad, "cuDNN") || strstr(groad, "cuDNN"))
      fail_msg("round %d: pool roads '%s', '%s'", round, proad, groad);
    for (int k = 0; k < 2; k++) {
      int64_t m;
      double *cv = ot_values(ref[k], &m);
      ot_expect_values(got[k], cv, m, 0, "Ember's kernels against the CPU");
      free(cv);
      em_tensor_release(got[k]), em_tensor_release(ref[k]);
    }
    em_tensor_release(px), em_tensor_release(pw);
    for (int k = 0; k < 5; k++)
      if (ts_dnn_calls(entries[k]) != before[k]) fail_msg("round %d: %s was called", round, entries[k]);
  }
  unsetenv("EMBER_CUDNN");
  em_tensor_release(rm0), em_tensor_release(rv0);
}

/* An injected cuDNN failure fails the run; the message names the call, its status and the op;
 * the running statistics are not left half-updated by a refused call. */
static void test_failures_named(void **state) {
  (void)state;
  const struct {
    const char *fail, *call, *op;
    int pool;
  } rows[] = {
      {"cudnnBatchNormalizationForwardTraining=5000", "cudnnBatchNormalizationForwardTraining", "batch_normalization", 0},
      {"cudnnBatchNormalizationBackward=4000", "cudnnBatchNormalizationBackward", "_batch_norm_grad", 0},
      {"cudnnDeriveBNTensorDescriptor=2000", "cudnnDeriveBNTensorDescriptor", "batch_normalization", 0},
      {"cudnnPoolingForward=5000", "cudnnPoolingForward", "max_pool", 1},
      {"cudnnPoolingBackward=5000", "cudnnPoolingBackward", "_max_pool_grad", 1},
      {"cudnnSetPoolingNdDescriptor=2000@2", "cudnnSetPoolingNdDescriptor", "_max_pool_grad", 1},
  };
  const int64_t xs[4] = {2, 3, 4, 5}, cs[1] = {3};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (!use_doubles()) skip();
    setenv("FAKECUDNN_FAIL", rows[i].fail, 1);
    em_shutdown(); /* Ember's handles go before the double forgets them */
    ts_dnn_reset();
    em_status s;
    if (rows[i].pool) {
      pool_graph b;
      pool_build(&b, &pool_cases[0], 0, NULL, em_cuda(0), EM_MODE_FAST);
      int64_t ys[EM_MAX_DIMS];
      var_dims(b.g, b.y, ys);
      em_tensor *xt = ot_rand(EM_F32, 4, pool_cases[0].xs, 1, -1, 1), *wt = ot_rand(EM_F32, 4, ys, 2, -1, 1);
      em_tensor *o[2] = {NULL, NULL};
      em_feed f[2] = {{b.x, xt}, {b.w, wt}};
      s = em_exec_run(b.e, f, 2, o);
      em_tensor_release(xt), em_tensor_release(wt);
      pool_free(&b);
    } else {
      em_tensor *rm0 = ot_rand(EM_F32, 1, cs, 1, -1, 1), *rv0 = ot_rand(EM_F32, 1, cs, 2, 0.5, 2);
      bn_graph b;
      bn_build(&b, EM_F32, 4, xs, 1e-5, 0.9, 1, 1, em_cuda(0), EM_MODE_FAST, rm0, rv0);
      em_tensor *xt = ot_rand(EM_F32, 4, xs, 3, -2, 2), *st = ot_rand(EM_F32, 1, cs, 4, 0.5, 1.5);
      em_tensor *bt = ot_rand(EM_F32, 1, cs, 5, -1, 1), *wt = ot_rand(EM_F32, 4, xs, 6, -1, 1), *o[4];
      s = bn_run(&b, xt, st, bt, wt, o);
      if (strstr(rows[i].call, "Forward")) { /* a refused forward writes nothing: the running stats are as they were */
        em_tensor *rm = NULL;
        assert_int_equal(em_parameter_get(b.g, b.rm, em_cpu(), &rm), EM_OK);
        double *want = values_of(rm0);
        ot_expect_values(rm, want, 3, 0, "the running mean after a refused training step");
        free(want);
        em_tensor_release(rm);
      }
      em_tensor_release(xt), em_tensor_release(st), em_tensor_release(bt), em_tensor_release(wt);
      em_tensor_release(rm0), em_tensor_release(rv0);
      bn_free(&b);
    }
    const char *msg = em_last_error();
    char op[64];
    snprintf(op, sizeof op, "'%s'", rows[i].op);
    if (s == EM_OK) fail_msg("%s: the run succeeded", rows[i].fail);
    if (!strstr(msg, rows[i].call) || !strstr(msg, "failed: CUDNN_STATUS_") || !strstr(msg, op))
      fail_msg("%s: the message does not name the call, its status and the op: %s", rows[i].fail, msg);
  }
  unsetenv("FAKECUDNN_FAIL");
  em_shutdown();
}

/* cuDNN DECLINING batch normalization or pooling at run time (a NOT_SUPPORTED status, as a
 * real cuDNN gives for a case one release or GPU lacks): the op runs on Ember's kernels,
 * right (against the CPU, itself checked against the references above), the running
 * statistics updated once, and the road names the call that declined. A status that is not a
 * decline fails (test_failures_named). */
static void test_declines_take_ember_kernels(void **state) {
  (void)state;
  static const struct {
    const char *fail, *call, *op;
  } bn_rows[] = {
      {"cudnnBatchNormalizationForwardTraining=3000", "cudnnBatchNormalizationForwardTraining", "batch_normalization"},
      {"cudnnBatchNormalizationBackward=3003", "cudnnBatchNormalizationBackward", "_batch_norm_grad"},
  };
  const int64_t xs[4] = {2, 3, 4, 5}, cs[1] = {3};
  for (size_t i = 0; i < sizeof bn_rows / sizeof bn_rows[0]; i++) {
    if (!use_doubles()) skip();
    setenv("FAKECUDNN_FAIL", bn_rows[i].fail, 1);
    em_tensor *rm0 = ot_rand(EM_F32, 1, cs, 1, -1, 1), *rv0 = ot_rand(EM_F32, 1, cs, 2, 0.5, 2);
    bn_graph d, c;
    bn_build(&d, EM_F32, 4, xs, 1e-5, 0.9, 1, 1, em_cuda(0), EM_MODE_FAST, rm0, rv0);
    bn_build(&c, EM_F32, 4, xs, 1e-5, 0.9, 1, 1, em_cpu(), EM_MODE_FAST, rm0, rv0);
    em_tensor *xt = ot_rand(EM_F32, 4, xs, 3, -2, 2), *st = ot_rand(EM_F32, 1, cs, 4, 0.5, 1.5);
    em_tensor *bt = ot_rand(EM_F32, 1, cs, 5, -1, 1), *wt = ot_rand(EM_F32, 4, xs, 6, -1, 1), *got[4], *want[4];
    for (int step = 0; step < 2; step++) {
      if (bn_run(&d, xt, st, bt, wt, got)) fail_msg("%s: the run failed: %s", bn_rows[i].fail, em_last_error());
      if (bn_run(&c, xt, st, bt, wt, want)) fail_msg("%s: CPU run: %s", bn_rows[i].fail, em_last_error());
      for (int o = 0; o < 4; o++) {
        int64_t m;
        double *cv = ot_values(want[o], &m);
        char msg[160];
        snprintf(msg, sizeof msg, "%s, step %d: output %d against the CPU", bn_rows[i].fail, step, o);
        ot_expect_values(got[o], cv, m, 2e-5, msg);
        free(cv);
        em_tensor_release(got[o]), em_tensor_release(want[o]);
      }
    }
    for (int v = 0; v < 2; v++) { /* two steps' running statistics: each step updated them once */
      em_tensor *gd = NULL, *gc = NULL;
      assert_int_equal(em_parameter_get(d.g, v ? d.rv : d.rm, em_cpu(), &gd), EM_OK);
      assert_int_equal(em_parameter_get(c.g, v ? c.rv : c.rm, em_cpu(), &gc), EM_OK);
      double *cv = values_of(gc);
      ot_expect_values(gd, cv, 3, 2e-5, v ? "running variance after a decline" : "running mean after a decline");
      free(cv);
      em_tensor_release(gd), em_tensor_release(gc);
    }
    char want_road[160];
    snprintf(want_road, sizeof want_road, "Ember's kernels: %s declined: CUDNN_STATUS_NOT_SUPPORTED", bn_rows[i].call);
    expect_road(d.e, bn_rows[i].op, want_road, bn_rows[i].fail);
    em_tensor_release(xt), em_tensor_release(st), em_tensor_release(bt), em_tensor_release(wt);
    em_tensor_release(rm0), em_tensor_release(rv0);
    bn_free(&d), bn_free(&c);
  }
  static const char *const pool_fails[] = {"cudnnPoolingForward=3000", "cudnnPoolingBackward=3000"};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 2; k++) { /* max and average */
      if (!use_doubles()) skip();
      setenv("FAKECUDNN_FAIL", pool_fails[i], 1);
      const pool_case *p = &pool_cases[k ? 4 : 0];
      em_tensor *got[2], *want[2], *xt, *wt;
      char road[512], groad[512], what[96];
      pool_run(p, 0, NULL, em_cuda(0), EM_MODE_FAST, got, want, &xt, &wt, road, sizeof road, groad, sizeof groad);
      snprintf(what, sizeof what, "%s, %s", pool_fails[i], p->op);
      /* the backward recomputes y with cudnnPoolingForward, so a declined forward declines both */
      if (!strstr(groad, "Ember's kernels: ") || !strstr(groad, "declined: CUDNN_STATUS_NOT_SUPPORTED") ||
          (i == 0 && (!strstr(road, "Ember's kernels: cudnnPoolingForward declined"))))
        fail_msg("%s: roads '%s' and '%s'", what, road, groad);
      pool_expect(p, got, want, xt, wt, what);
    }
  }
  unsetenv("FAKECUDNN_FAIL");
  em_shutdown();
}

/* The problem rules alone. */
static void test_rules(void **state) {
  (void)state;
  char why[200];
  em_cudnn_bn b = {.dt = EM_F32, .n = 2, .c = 3, .inner = 4, .eps = 1e-5};
  if (!em_cudnn_bn_takes(&b, why, sizeof why)) fail_msg("a plain batch norm: %s", why);
  b.eps = -1e-9;
  if (em_cudnn_bn_takes(&b, why, sizeof why) || !strstr(why, "CUDNN_BN_MIN_EPSILON")) fail_msg("eps < 0: %s", why);
  b.eps = 0, b.n = 1 << 20, b.inner = 1 << 12;
  if (em_cudnn_bn_takes(&b, why, sizeof why) || !strstr(why, "2^31")) fail_msg("2^33 elements: %s", why);
  b.n = 0;
  if (em_cudnn_bn_takes(&b, why, sizeof why) || !strstr(why, "empty")) fail_msg("empty: %s", why);
  b.n = 2, b.dt = EM_F16;
  if (em_cudnn_bn_takes(&b, why, sizeof why) || !strstr(why, "f16")) fail_msg("f16: %s", why);
  em_cudnn_pool p = {.dt = EM_F32, .mode = EM_CUDNN_POOL_MAX, .nd = 2, .n = 2, .c = 3, .img = {9, 9}, .out = {5, 5},
                     .k = {3, 3}, .stride = {2, 2}, .dil = {1, 1}, .pb = {1, 1}, .pe = {1, 1}};
  if (!em_cudnn_pool_takes(&p, why, sizeof why)) fail_msg("a plain pool: %s", why);
  p.pb[1] = p.pe[1] = 3;
  if (em_cudnn_pool_takes(&p, why, sizeof why) || !strstr(why, "not below its window")) fail_msg("pad 3, k 3: %s", why);
  p.pb[1] = p.pe[1] = 1, p.out[0] = 6;
  if (em_cudnn_pool_takes(&p, why, sizeof why) || !strstr(why, "ceil_mode")) fail_msg("6 windows: %s", why);
  p.out[0] = 5, p.nd = 4;
  if (em_cudnn_pool_takes(&p, why, sizeof why)) fail_msg("4 spatial axes taken");
}

/* ------------------------------------------------------------ review --- */

/* From the review of this file (helper-67): geometries and batch-norm shapes the cases above do
 * not reach, each against the float64 references and the CPU. */
/* Strides larger than the window (with padding: windows that skip input), 1x1 images, a
 * window of 1 with stride 2, overlapping 3-D windows counting the padding in f32, a 1-D f64
 * exclude-pad average with the padding as wide as allowed (window - 1). */
static const pool_case review_pools[] = {
    {"max_pool", EM_F32, 2, {2, 3, 10, 9}, {2, 2}, {3, 4}, {1, 1, 1, 1}, 0},
    {"average_pool", EM_F32, 2, {2, 3, 10, 9}, {2, 2}, {3, 4}, {1, 1, 1, 1}, 1},
    {"average_pool", EM_F64, 2, {2, 3, 10, 9}, {2, 2}, {3, 4}, {1, 1, 1, 1}, 0},
    {"max_pool", EM_F64, 2, {3, 2, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 0},
    {"average_pool", EM_F32, 2, {3, 2, 1, 1}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0},
    {"average_pool", EM_F64, 2, {3, 2, 1, 1}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1},
    {"max_pool", EM_F32, 2, {1, 2, 7, 7}, {1, 1}, {2, 2}, {0, 0, 0, 0}, 0},
    {"average_pool", EM_F32, 3, {2, 2, 4, 5, 6}, {3, 3, 3}, {1, 2, 1}, {1, 2, 1, 1, 2, 1}, 1},
    {"max_pool", EM_F64, 3, {2, 2, 4, 5, 6}, {3, 3, 3}, {1, 2, 1}, {1, 2, 1, 1, 2, 1}, 0},
    {"average_pool", EM_F64, 1, {2, 3, 9}, {4}, {1}, {3, 3}, 0},
    {"average_pool", EM_F32, 1, {2, 3, 9}, {4}, {5}, {3, 3}, 1},
};

static void check_pool(const pool_case *p, int ceil_mode, const char *what) {
  unsigned long f0 = ts_dnn_calls("cudnnPoolingForward"), b0 = ts_dnn_calls("cudnnPoolingBackward");
  em_tensor *got[2], *want[2], *xt, *wt;
  char road[512], groad[512];
  pool_run(p, ceil_mode, NULL, em_cuda(0), EM_MODE_FAST, got, want, &xt, &wt, road, sizeof road, groad, sizeof groad);
  if (ts_dnn_calls("cudnnPoolingForward") - f0 != 2 || ts_dnn_calls("cudnnPoolingBackward") - b0 != 1)
    fail_msg("%s: not through cuDNN (roads '%s', '%s')", what, road, groad);
  pool_expect(p, got, want, xt, wt, what);
}

static void test_review_pools(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  for (size_t i = 0; i < sizeof review_pools / sizeof review_pools[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "review pool %zu (%s %d-D)", i, review_pools[i].op, review_pools[i].nsp);
    check_pool(&review_pools[i], 0, what);
    /* ceil_mode where it changes nothing (the rounded-up count is the rounded-down one) */
  }
  /* ceil_mode = 1 with exact division: cuDNN takes it, same windows */
  const pool_case exact[] = {
      {"max_pool", EM_F32, 2, {2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
      {"average_pool", EM_F64, 2, {2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 1},
  };
  for (int i = 0; i < 2; i++) check_pool(&exact[i], 1, "ceil_mode with exact division");
  if (ts_dnn_live_descriptors()) fail_msg("%zu cuDNN descriptors left behind", ts_dnn_live_descriptors());
}

/* Batch norm shapes the original cases miss: a batch of 1 with positions (m = positions),
 * spatial size 1 with the smallest training batch (m = 2), rank 6, f64 with epsilon 0, many
 * channels of one position. */
static const bn_case review_bn[] = {
    {EM_F32, 4, {1, 3, 2, 2}, 1e-5, 0.9}, {EM_F64, 4, {2, 3, 1, 1}, 1e-5, 0.9}, {EM_F64, 2, {2, 5}, 0.0, 0.6},
    {EM_F64, 5, {1, 2, 1, 2, 1}, 1e-5, 0.3}, {EM_F32, 3, {3, 40, 1}, 1e-3, 0.1},
};

static void test_review_bn(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  bn_check_all(review_bn, sizeof review_bn / sizeof review_bn[0], 1, 1, "review");
}

/* m = 1 in training: the unbiased running variance divides by 0; Ember refuses on the CPU and
 * must refuse on the cuDNN road too, making no cuDNN call and leaving the state alone. */
static void test_review_bn_m1(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t xs[4] = {1, 3, 1, 1}, cs[1] = {3};
  em_tensor *rm0 = ot_rand(EM_F32, 1, cs, 11, -1, 1), *rv0 = ot_rand(EM_F32, 1, cs, 12, 0.5, 2);
  for (int d = 0; d < 2; d++) {
    bn_graph b;
    bn_build(&b, EM_F32, 4, xs, 1e-5, 0.9, 0, 1, d ? em_cuda(0) : em_cpu(), EM_MODE_FAST, rm0, rv0);
    unsigned long f0 = ts_dnn_calls("cudnnBatchNormalizationForwardTraining");
    em_tensor *xt = ot_rand(EM_F32, 4, xs, 1, -1, 1), *st = ot_rand(EM_F32, 1, cs, 2, 1, 2),
              *bt = ot_rand(EM_F32, 1, cs, 3, 1, 2), *out[1] = {NULL};
    em_status s = bn_run(&b, xt, st, bt, NULL, out);
    if (!s) fail_msg("%s: training with m = 1 ran", d ? "device" : "CPU");
    if (!strstr(em_last_error(), "more than one value")) fail_msg("m = 1: %s", em_last_error());
    if (ts_dnn_calls("cudnnBatchNormalizationForwardTraining") != f0) fail_msg("m = 1 reached cuDNN");
    em_tensor *gv = NULL;
    assert_int_equal(em_parameter_get(b.g, b.rv, em_cpu(), &gv), EM_OK);
    double *want = values_of(rv0);
    ot_expect_values(gv, want, 3, 0, "m = 1: the running variance untouched");
    free(want);
    em_tensor_release(gv), em_tensor_release(xt), em_tensor_release(st), em_tensor_release(bt);
    bn_free(&b);
  }
  em_tensor_release(rm0), em_tensor_release(rv0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules),
      cmocka_unit_test(test_bn_inference),
      cmocka_unit_test(test_bn_training),
      cmocka_unit_test(test_bn_running_statistics),
      cmocka_unit_test(test_pools_through_cudnn),
      cmocka_unit_test(test_max_pool_ties),
      cmocka_unit_test(test_max_pool_nan),
      cmocka_unit_test(test_pool_fallbacks),
      cmocka_unit_test(test_portable_and_unserved),
      cmocka_unit_test(test_failures_named),
      cmocka_unit_test(test_declines_take_ember_kernels),
      cmocka_unit_test(test_review_pools),
      cmocka_unit_test(test_review_bn),
      cmocka_unit_test(test_review_bn_m1),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return r;
}
