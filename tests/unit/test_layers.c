/* The layers library and the model zoo (include/ember/layers.h,
 * training/layers.c, training/models.c), and em_apply's op-name suggestions.
 *
 * Expected values come from outside the code under test: shapes and
 * parameter counts derived by hand (the arithmetic is written out), a plain
 * float64 dense layer, convolution and pooling written here, initialiser
 * bounds from the documented formulas, and the seed rule reimplemented from
 * its documentation. The models train on a tiny synthetic problem with SGD
 * written here (the loss must fall), and one short run of each on the
 * libcuda test double's GPU must give the CPU's bits in portable mode. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <valgrind/valgrind.h>

#include "ember.h"
#include "gpu_double.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

/* ------------------------------------------------------------ helpers --- */

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}
static double unit(uint64_t *s) { return (double)lcg(s) / 9007199254740992.0; }

static em_graph *new_graph(void) {
  em_graph *g;
  CHECK(em_graph_create(&g));
  return g;
}

static em_var input(em_graph *g, const char *name, int ndim, const int64_t *shape) {
  em_var x;
  CHECK(em_input(g, name, EM_F32, ndim, shape, &x));
  return x;
}

/* The shape of v as a string, "[-1, 16, 28, 28]". */
static const char *shape_of(em_graph *g, em_var v) {
  static char buf[128];
  int ndim;
  int64_t sh[EM_MAX_DIMS];
  CHECK(em_var_info(g, v, NULL, &ndim, sh));
  size_t n = (size_t)snprintf(buf, sizeof buf, "[");
  for (int i = 0; i < ndim; i++) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", i ? ", " : "", (long long)sh[i]);
  snprintf(buf + n, sizeof buf - n, "]");
  return buf;
}

/* A host copy of the named parameter or state, as doubles (caller frees). */
static double *param_values(em_graph *g, const char *name, int64_t *numel) {
  em_var p;
  CHECK(em_graph_lookup(g, name, &p));
  em_tensor *t;
  CHECK(em_parameter_get(g, p, em_cpu(), &t));
  int64_t n = em_tensor_numel(t);
  float *f = malloc(sizeof(float) * (size_t)n);
  double *d = malloc(sizeof(double) * (size_t)n);
  CHECK(em_tensor_to_host(t, f, sizeof(float) * (size_t)n));
  for (int64_t i = 0; i < n; i++) d[i] = f[i];
  free(f);
  em_tensor_release(t);
  if (numel) *numel = n;
  return d;
}

/* Runs outputs of g on the CPU with one f32 feed; results into host buffers. */
static void run1(em_graph *g, em_var x, const float *xv, int ndim, const int64_t *shape, em_var y, float *out,
                 size_t out_elems, int training) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, ndim, shape, xv, n * sizeof(float), &xt));
  em_exec *e;
  CHECK(em_exec_create(g, &y, 1, em_cpu(), &e));
  CHECK(em_exec_set_training(e, training));
  em_feed f = {x, xt};
  CHECK(em_exec_run(e, &f, 1, &yt));
  assert_int_equal(em_tensor_numel(yt), (int64_t)out_elems);
  CHECK(em_tensor_to_host(yt, out, out_elems * sizeof(float)));
  em_tensor_release(yt);
  em_tensor_release(xt);
  em_exec_free(e);
}

static void random_fill(float *v, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) v[i] = (float)(unit(&seed) * 2 - 1);
}

static void assert_close(double got, double want, double tol, const char *what, int i) {
  if (!(fabs(got - want) <= tol * fmax(1, fabs(want))))
    fail_msg("%s element %d: got %.9g, want %.9g", what, i, got, want);
}

/* ------------------------------------------------------------- dense --- */

static void test_dense_forward(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_var x = input(g, "x", 2, (int64_t[]){-1, 5}), y;
  em_layers L = {.graph = g, .seed = 3};
  CHECK(em_dense(&L, "fc", x, 4, NULL, &y));
  assert_string_equal(shape_of(g, y), "[-1, 4]");
  float xv[3 * 5], yv[3 * 4];
  random_fill(xv, 15, 1);
  run1(g, x, xv, 2, (int64_t[]){3, 5}, y, yv, 12, 0);
  int64_t nw, nb;
  double *w = param_values(g, "fc.weight", &nw), *b = param_values(g, "fc.bias", &nb);
  assert_int_equal(nw, 4 * 5); /* [out, in] */
  assert_int_equal(nb, 4);
  for (int n = 0; n < 3; n++)
    for (int o = 0; o < 4; o++) {
      double acc = b[o];
      for (int i = 0; i < 5; i++) acc += (double)xv[n * 5 + i] * w[o * 5 + i];
      assert_close(yv[n * 4 + o], acc, 1e-5, "dense", n * 4 + o);
    }
  /* The layer's output is named after it. */
  em_var named;
  CHECK(em_graph_lookup(g, "fc", &named));
  assert_int_equal(named, y);
  /* No bias, an activation, and a rank-3 input (the last axis is the features). */
  em_var x3 = input(g, "x3", 3, (int64_t[]){-1, 7, 5}), y3;
  CHECK(em_dense(&L, NULL, x3, 6, &(em_dense_opts){.no_bias = 1, .activation = EM_ACT_RELU}, &y3));
  assert_string_equal(shape_of(g, y3), "[-1, 7, 6]");
  em_var none;
  assert_int_not_equal(em_graph_lookup(g, "dense1.bias", &none), EM_OK);
  CHECK(em_graph_lookup(g, "dense1.weight", &none));
  free(w);
  free(b);
  em_graph_free(g);
}

/* ------------------------------------------------------- convolution --- */

/* Plain 2-D convolution in double: x [N, C, H, W], w [M, C / groups, KH, KW]. */
static void conv2d_ref(const float *x, int N, int C, int H, int W, const double *w, const double *b, int M, int KH,
                       int KW, int stride, int pad_top, int pad_left, int dil, int groups, int OH, int OW, double *y) {
  int cg = C / groups, mg = M / groups;
  for (int n = 0; n < N; n++)
    for (int m = 0; m < M; m++)
      for (int oy = 0; oy < OH; oy++)
        for (int ox = 0; ox < OW; ox++) {
          double acc = b ? b[m] : 0;
          int grp = m / mg;
          for (int c = 0; c < cg; c++)
            for (int ky = 0; ky < KH; ky++)
              for (int kx = 0; kx < KW; kx++) {
                int iy = oy * stride - pad_top + ky * dil, ix = ox * stride - pad_left + kx * dil;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                acc += (double)x[((n * C + grp * cg + c) * H + iy) * W + ix] * w[((m * cg + c) * KH + ky) * KW + kx];
              }
          y[((n * M + m) * OH + oy) * OW + ox] = acc;
        }
}

static void check_conv(int C, int H, int W, int M, int k, em_conv_opts o, int pad_top, int pad_left, int OH, int OW,
                       const char *want_shape) {
  em_graph *g = new_graph();
  em_var x = input(g, "x", 4, (int64_t[]){-1, C, H, W}), y;
  em_layers L = {.graph = g, .seed = 5};
  CHECK(em_conv(&L, "c", x, M, k, &o, &y));
  assert_string_equal(shape_of(g, y), want_shape);
  int N = 2;
  size_t nx = (size_t)(N * C * H * W), ny = (size_t)(N * M * OH * OW);
  float *xv = malloc(nx * sizeof(float)), *yv = malloc(ny * sizeof(float));
  double *ref = malloc(ny * sizeof(double));
  random_fill(xv, nx, 9);
  run1(g, x, xv, 4, (int64_t[]){N, C, H, W}, y, yv, ny, 0);
  double *w = param_values(g, "c.weight", NULL), *b = o.no_bias ? NULL : param_values(g, "c.bias", NULL);
  int groups = o.groups ? (int)o.groups : 1, stride = o.stride ? (int)o.stride : 1, dil = o.dilation ? (int)o.dilation : 1;
  conv2d_ref(xv, N, C, H, W, w, b, M, k, k, stride, pad_top, pad_left, dil, groups, OH, OW, ref);
  for (size_t i = 0; i < ny; i++) assert_close(yv[i], ref[i], 1e-5, "conv", (int)i);
  free(xv);
  free(yv);
  free(ref);
  free(w);
  free(b);
  em_graph_free(g);
}

static void test_conv_forward(void **state) {
  (void)state;
  /* 7x6, k 3, stride 2, padding 1: floor((7 + 2 - 3) / 2) + 1 = 4, floor((6 + 2 - 3) / 2) + 1 = 3. */
  check_conv(3, 7, 6, 4, 3, (em_conv_opts){.stride = 2, .padding = 1}, 1, 1, 4, 3, "[-1, 4, 4, 3]");
  /* Groups 3 (6 -> 6 channels, 2 per group), dilation 2, "same" at stride 1: total padding
   * (k - 1) * d = 4, 2 in front; output 7x6. No bias. */
  check_conv(6, 7, 6, 6, 3, (em_conv_opts){.groups = 3, .dilation = 2, .same = 1, .no_bias = 1}, 2, 2, 7, 6,
             "[-1, 6, 7, 6]");
  /* "same" at stride 2 on 7: output ceil(7/2) = 4, total (4-1)*2 + 3 - 7 = 2, 1 in front; on 6: 3, total
   * (3-1)*2 + 3 - 6 = 1, 0 in front (the odd unit at the end). */
  check_conv(2, 7, 6, 3, 3, (em_conv_opts){.stride = 2, .same = 1}, 1, 0, 4, 3, "[-1, 3, 4, 3]");
}

static void test_conv_shapes_1d_3d(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_layers L = {.graph = g, .seed = 1};
  em_var x1 = input(g, "x1", 3, (int64_t[]){-1, 4, 20}), x3 = input(g, "x3", 5, (int64_t[]){-1, 2, 9, 8, 7}), y;
  /* 1-D: (20 - 5) / 3 + 1 = 6. */
  CHECK(em_conv(&L, NULL, x1, 8, 5, &(em_conv_opts){.stride = 3}, &y));
  assert_string_equal(shape_of(g, y), "[-1, 8, 6]");
  CHECK(em_var_info(g, y, NULL, NULL, NULL));
  int64_t n;
  double *w = param_values(g, "conv1.weight", &n);
  assert_int_equal(n, 8 * 4 * 5);
  free(w);
  /* 3-D, k 3, padding 1, per-axis strides 1, 2, 3: 9, floor((8 + 2 - 3) / 2) + 1 = 4, floor((7 + 2 - 3) / 3) + 1 = 3. */
  CHECK(em_conv(&L, NULL, x3, 5, 3, &(em_conv_opts){.padding = 1, .strides = (const int64_t[]){1, 2, 3}}, &y));
  assert_string_equal(shape_of(g, y), "[-1, 5, 9, 4, 3]");
  w = param_values(g, "conv2.weight", &n);
  assert_int_equal(n, 5 * 2 * 27);
  free(w);
  /* Non-square kernel through kernel_shape. */
  em_var x2 = input(g, "x2", 4, (int64_t[]){-1, 1, 10, 10});
  CHECK(em_conv(&L, NULL, x2, 2, 0, &(em_conv_opts){.kernel_shape = (const int64_t[]){3, 5}}, &y));
  assert_string_equal(shape_of(g, y), "[-1, 2, 8, 6]");
  /* Refusals: bad groups, same with padding, rank-2 input. */
  assert_int_equal(em_conv(&L, NULL, x2, 3, 3, &(em_conv_opts){.groups = 2}, &y), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "groups"));
  assert_int_equal(em_conv(&L, NULL, x2, 3, 3, &(em_conv_opts){.same = 1, .padding = 1}, &y), EM_ERR_INVALID_ARGUMENT);
  em_var flat = input(g, "flat", 2, (int64_t[]){-1, 10});
  assert_int_equal(em_conv(&L, NULL, flat, 3, 3, NULL, &y), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "rank"));
  em_graph_free(g);
}

/* ------------------------------------------------------------ pooling --- */

/* A refusal (EM_ERR_INVALID_ARGUMENT) whose message starts with want. */
static void expect_refusal(em_status s, const char *want) {
  if (s != EM_ERR_INVALID_ARGUMENT) fail_msg("%s, not a refusal: %s", em_status_name(s), em_last_error());
  if (strncmp(em_last_error(), want, strlen(want))) fail_msg("\"%s\" does not start with \"%s\"", em_last_error(), want);
}

static void test_pooling(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_layers L = {.graph = g};
  em_var x = input(g, "x", 4, (int64_t[]){-1, 2, 6, 6}), ymax, yavg, yexcl, yraw, y;
  /* The layer's stride defaults to the window: 6 / 2 = 3. */
  CHECK(em_max_pool(&L, x, 2, NULL, &ymax));
  assert_string_equal(shape_of(g, ymax), "[-1, 2, 3, 3]");
  /* The raw op keeps ONNX's stride 1: 6 - 2 + 1 = 5. */
  em_attr ks = {.name = "kernel_shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){2, 2}, .n = 2};
  CHECK(em_apply(g, "max_pool", &x, 1, &ks, 1, &yraw, 1));
  assert_string_equal(shape_of(g, yraw), "[-1, 2, 5, 5]");
  /* Average, window 3, stride 2, padding 1: floor((6 + 2 - 3) / 2) + 1 = 3; padding counted (PyTorch). */
  CHECK(em_avg_pool(&L, x, 3, &(em_pool_opts){.stride = 2, .padding = 1}, &yavg));
  CHECK(em_avg_pool(&L, x, 3, &(em_pool_opts){.stride = 2, .padding = 1, .exclude_padding = 1}, &yexcl));
  assert_string_equal(shape_of(g, yavg), "[-1, 2, 3, 3]");
  /* Same padding, window 3 stride 2 on 7x7 (any input): ceil(7 / 2) = 4; ceil_mode on 7, window 2: ceil(5/2)+1 = 4. */
  em_var x7 = input(g, "x7", 4, (int64_t[]){-1, 1, 7, 7});
  CHECK(em_max_pool(&L, x7, 3, &(em_pool_opts){.stride = 2, .same = 1}, &y));
  assert_string_equal(shape_of(g, y), "[-1, 1, 4, 4]");
  CHECK(em_max_pool(&L, x7, 2, &(em_pool_opts){.ceil_mode = 1}, &y));
  assert_string_equal(shape_of(g, y), "[-1, 1, 4, 4]");
  CHECK(em_max_pool(&L, x7, 2, NULL, &y));
  assert_string_equal(shape_of(g, y), "[-1, 1, 3, 3]");
  /* 1-D and 3-D. */
  em_var x1 = input(g, "x1", 3, (int64_t[]){-1, 3, 10}), x3 = input(g, "x3", 5, (int64_t[]){-1, 3, 4, 6, 8});
  CHECK(em_avg_pool(&L, x1, 3, NULL, &y));
  assert_string_equal(shape_of(g, y), "[-1, 3, 3]");
  CHECK(em_max_pool(&L, x3, 2, NULL, &y));
  assert_string_equal(shape_of(g, y), "[-1, 3, 2, 3, 4]");
  CHECK(em_global_avg_pool(&L, x3, &y));
  assert_string_equal(shape_of(g, y), "[-1, 3]");
  /* Refusals name the pooling layer by its kind (it has no name): never an
   * empty name, "max pool '': ...". */
  em_var v2 = input(g, "v2", 2, (int64_t[]){-1, 4}), v1 = input(g, "v1", 1, (int64_t[]){4});
  expect_refusal(em_max_pool(&L, x, 0, NULL, &y), "max pool: the kernel on spatial axis 0 is 0; it must be >= 1");
  expect_refusal(em_avg_pool(&L, x, 2, &(em_pool_opts){.padding = -1}, &y), "average pool: padding is -1");
  expect_refusal(em_max_pool(&L, x, 2, &(em_pool_opts){.same = 1, .padding = 1}, &y), "max pool: both same padding");
  expect_refusal(em_avg_pool(&L, x, 2, &(em_pool_opts){.stride = -2}, &y), "average pool: the stride on spatial axis 0");
  expect_refusal(em_max_pool(&L, v2, 2, NULL, &y), "max pool: the input is [-1, 4] (rank 2)");
  expect_refusal(em_global_avg_pool(&L, v1, &y), "global average pool: the input is [4] (rank 1)");
  /* Named layers keep their name. */
  expect_refusal(em_conv(&L, "c9", v2, 2, 3, NULL, &y), "conv 'c9': the input is [-1, 4] (rank 2)");

  /* Values against plain loops. */
  float xv[2 * 2 * 36];
  random_fill(xv, 144, 4);
  float got[2 * 2 * 9];
  run1(g, x, xv, 4, (int64_t[]){2, 2, 6, 6}, ymax, got, 36, 0);
  for (int p = 0; p < 4; p++)
    for (int oy = 0; oy < 3; oy++)
      for (int ox = 0; ox < 3; ox++) {
        double m = -INFINITY;
        for (int ky = 0; ky < 2; ky++)
          for (int kx = 0; kx < 2; kx++) m = fmax(m, xv[p * 36 + (oy * 2 + ky) * 6 + ox * 2 + kx]);
        assert_close(got[p * 9 + oy * 3 + ox], m, 0, "max pool", p * 9 + oy * 3 + ox);
      }
  float avg[36], excl[36];
  run1(g, x, xv, 4, (int64_t[]){2, 2, 6, 6}, yavg, avg, 36, 0);
  run1(g, x, xv, 4, (int64_t[]){2, 2, 6, 6}, yexcl, excl, 36, 0);
  for (int p = 0; p < 4; p++)
    for (int oy = 0; oy < 3; oy++)
      for (int ox = 0; ox < 3; ox++) {
        double s = 0;
        int cnt = 0;
        for (int ky = 0; ky < 3; ky++)
          for (int kx = 0; kx < 3; kx++) {
            int iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
            if (iy < 0 || iy >= 6 || ix < 0 || ix >= 6) continue;
            s += xv[p * 36 + iy * 6 + ix];
            cnt++;
          }
        int i = p * 9 + oy * 3 + ox;
        assert_close(avg[i], s / 9, 1e-6, "average pool (padding counted)", i);
        assert_close(excl[i], s / cnt, 1e-6, "average pool (padding excluded)", i);
      }
  em_graph_free(g);
}

/* -------------------------------------------------------------- names --- */

static int has_value(em_graph *g, const char *name) {
  em_var v;
  return em_graph_lookup(g, name, &v) == EM_OK;
}

static void test_names_and_numbering(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_layers L = {.graph = g, .seed = 1};
  em_var x = input(g, "x", 4, (int64_t[]){-1, 3, 8, 8}), y;
  CHECK(em_conv(&L, NULL, x, 4, 3, NULL, &y));
  CHECK(em_conv(&L, NULL, y, 4, 3, NULL, &y));
  CHECK(em_batch_norm(&L, NULL, y, NULL, &y));
  CHECK(em_dropout(&L, NULL, y, 0.2, &y));
  CHECK(em_flatten(&L, y, &y));
  CHECK(em_dense(&L, NULL, y, 5, NULL, &y));
  CHECK(em_layer_norm(&L, NULL, y, NULL, &y));
  const char *want[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "bn1.weight", "bn1.bias",
                        "bn1.running_mean", "bn1.running_var", "dense1.weight", "dense1.bias", "ln1.weight",
                        "ln1.bias", "conv1", "conv2", "bn1", "dropout1", "dense1", "ln1"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!has_value(g, want[i])) fail_msg("no value named '%s'", want[i]);
  /* Running statistics are states, not parameters. */
  size_t np, ns;
  CHECK(em_graph_parameters(g, NULL, 0, &np));
  CHECK(em_graph_states(g, NULL, 0, &ns));
  assert_int_equal(np, 10);
  assert_int_equal(ns, 2);
  /* A given name that is taken is refused; a numbered one skips taken numbers. */
  assert_int_equal(em_conv(&L, "conv1", x, 4, 3, NULL, &y), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "conv1"));
  assert_int_equal(em_dense(&L, "fc", x, 2, NULL, &y), EM_OK); /* dense over the last axis (8) */
  assert_int_equal(em_dense(&L, "fc", y, 2, NULL, &y), EM_ERR_INVALID_ARGUMENT);
  CHECK(em_dense(&L, "conv3", y, 2, NULL, &y)); /* takes "conv3": the next numbered conv is conv4 */
  CHECK(em_conv(&L, NULL, x, 4, 3, NULL, &y));
  assert_true(has_value(g, "conv4.weight"));
  /* A prefix is put in front. */
  em_layers B = L;
  B.prefix = "block1.";
  CHECK(em_conv(&B, NULL, x, 4, 3, NULL, &y));
  CHECK(em_batch_norm(&B, "bn", y, NULL, &y));
  assert_true(has_value(g, "block1.conv1.weight"));
  assert_true(has_value(g, "block1.bn.running_var"));
  em_graph_free(g);
}

/* ------------------------------------------------------- initialisers --- */

/* The documented seed rule, written again here: FNV-1a 64 of the name, xor
 * the model seed, splitmix64's finaliser. */
static uint64_t seed_rule(uint64_t seed, const char *name) {
  uint64_t h = 14695981039346656037ull;
  for (const char *p = name; *p; p++) {
    h ^= (unsigned char)*p;
    h *= 1099511628211ull;
  }
  uint64_t z = h ^ seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct stats { double min, max, mean, var; } stats;

static stats stats_of(const double *v, int64_t n) {
  stats s = {INFINITY, -INFINITY, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    s.min = fmin(s.min, v[i]);
    s.max = fmax(s.max, v[i]);
    s.mean += v[i];
  }
  s.mean /= (double)n;
  for (int64_t i = 0; i < n; i++) s.var += (v[i] - s.mean) * (v[i] - s.mean);
  s.var /= (double)n;
  return s;
}

/* Uniform on (-bound, bound): inside it, reaching near both ends, mean ~0 and variance bound^2 / 3. */
static void check_uniform(em_graph *g, const char *name, double bound) {
  int64_t n;
  double *v = param_values(g, name, &n);
  stats s = stats_of(v, n);
  if (!(s.max <= bound * (1 + 1e-6) && s.min >= -bound * (1 + 1e-6)))
    fail_msg("%s: values in [%g, %g], outside +-%g", name, s.min, s.max, bound);
  if (!(s.max > 0.97 * bound && s.min < -0.97 * bound))
    fail_msg("%s: values in [%g, %g] do not reach +-%g", name, s.min, s.max, bound);
  double sd_mean = bound / sqrt(3.0 * (double)n);
  if (!(fabs(s.mean) < 5 * sd_mean)) fail_msg("%s: mean %g (bound %g, n %lld)", name, s.mean, bound, (long long)n);
  if (!(fabs(s.var / (bound * bound / 3) - 1) < 0.08)) fail_msg("%s: variance %g, want %g", name, s.var, bound * bound / 3);
  free(v);
}

/* The exact values: the documented rule (em_init kind and scale, seed from the model seed and the name) applied
 * through em_parameter by hand must give the layer's parameter bit for bit. */
static void check_exact(em_graph *g, const char *name, em_init init, uint64_t model_seed) {
  int ndim;
  int64_t shape[EM_MAX_DIMS], n;
  em_var p;
  CHECK(em_graph_lookup(g, name, &p));
  CHECK(em_var_info(g, p, NULL, &ndim, shape));
  init.seed = seed_rule(model_seed, name);
  char manual[128];
  snprintf(manual, sizeof manual, "manual.%s", name);
  CHECK(em_parameter(g, manual, EM_F32, ndim, shape, &init, &p));
  double *want = param_values(g, manual, &n), *got = param_values(g, name, NULL);
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(double))) fail_msg("%s[%lld] = %.9g, want %.9g", name, (long long)i, got[i], want[i]);
  free(want);
  free(got);
}

static void check_constant(em_graph *g, const char *name, double value) {
  int64_t n;
  double *v = param_values(g, name, &n);
  for (int64_t i = 0; i < n; i++)
    if (v[i] != value) fail_msg("%s[%lld] = %g, want %g", name, (long long)i, v[i], value);
  free(v);
}

static void test_initialisers(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_var x = input(g, "x", 2, (int64_t[]){-1, 100}), img = input(g, "img", 4, (int64_t[]){-1, 4, 5, 5}), y;
  em_var idx;
  CHECK(em_input(g, "idx", EM_I32, 1, (int64_t[]){-1}, &idx));
  /* PyTorch's family: kaiming_uniform(a = sqrt 5) = U(+-1/sqrt(fan_in)) for weights and biases. */
  em_layers T = {.graph = g, .seed = 11};
  CHECK(em_dense(&T, "fc", x, 300, NULL, &y));     /* fan_in 100: bound 0.1 */
  CHECK(em_conv(&T, "conv", img, 16, 3, &(em_conv_opts){.groups = 2}, &y)); /* fan_in (4 / 2) * 3 * 3 = 18 */
  CHECK(em_embedding(&T, "emb", idx, 100, 100, NULL, &y));
  check_uniform(g, "fc.weight", 0.1);
  check_uniform(g, "fc.bias", 0.1);
  check_uniform(g, "conv.weight", 1 / sqrt(18.0));
  check_exact(g, "fc.weight", (em_init){.kind = EM_INIT_UNIFORM, .scale = 0.1}, 11);
  check_exact(g, "fc.bias", (em_init){.kind = EM_INIT_UNIFORM, .scale = 0.1}, 11);
  check_exact(g, "conv.weight", (em_init){.kind = EM_INIT_UNIFORM, .scale = 1 / sqrt(18.0)}, 11);
  check_exact(g, "conv.bias", (em_init){.kind = EM_INIT_UNIFORM, .scale = 1 / sqrt(18.0)}, 11);
  check_exact(g, "emb.weight", (em_init){.kind = EM_INIT_NORMAL, .scale = 1}, 11);
  /* Embeddings N(0, 1). */
  int64_t n;
  double *v = param_values(g, "emb.weight", &n);
  stats s = stats_of(v, n);
  assert_true(fabs(s.mean) < 0.05 && fabs(s.var - 1) < 0.06);
  free(v);
  /* CNTK's: glorot_uniform weights, bound sqrt(6 / (fan_in + fan_out)), zero biases. */
  em_layers C = {.graph = g, .seed = 11, .init = EM_LAYERS_INIT_CNTK};
  CHECK(em_dense(&C, "cfc", x, 300, NULL, &y));    /* sqrt(6 / 400) */
  CHECK(em_conv(&C, "cconv", img, 16, 3, &(em_conv_opts){.groups = 2}, &y)); /* fan_out 16 * 9: sqrt(6 / (18 + 144)) */
  check_uniform(g, "cfc.weight", sqrt(6.0 / 400));
  check_constant(g, "cfc.bias", 0);
  check_uniform(g, "cconv.weight", sqrt(6.0 / 162));
  check_exact(g, "cconv.weight", (em_init){.kind = EM_INIT_GLOROT_UNIFORM}, 11);
  /* Normalisation: scale 1, shift 0, running mean 0, running variance 1 in both families. */
  CHECK(em_batch_norm(&C, "bn", img, NULL, &y));
  check_constant(g, "bn.weight", 1);
  check_constant(g, "bn.bias", 0);
  check_constant(g, "bn.running_mean", 0);
  check_constant(g, "bn.running_var", 1);
  /* A caller's initialiser wins; its seed 0 takes the derived one. */
  em_init he = {.kind = EM_INIT_CONSTANT, .value = 0.25};
  CHECK(em_dense(&T, "custom", x, 3, &(em_dense_opts){.weight_init = &he, .bias_init = &he}, &y));
  check_constant(g, "custom.weight", 0.25);
  check_constant(g, "custom.bias", 0.25);
  em_graph_free(g);
}

static void test_seeds(void **state) {
  (void)state;
  assert_true(em_layers_seed(42, "conv1.weight") == seed_rule(42, "conv1.weight"));
  assert_true(em_layers_seed(0, "fc.bias") == seed_rule(0, "fc.bias"));
  assert_true(em_layers_seed(1, "a") != em_layers_seed(1, "b"));
  /* The same model seed and names give the same bits; another layer before does not matter; another seed
   * gives other values. */
  double *w[3];
  for (int k = 0; k < 3; k++) {
    em_graph *g = new_graph();
    em_var x = input(g, "x", 2, (int64_t[]){-1, 8}), y;
    em_layers L = {.graph = g, .seed = k == 2 ? 8 : 7};
    if (k == 1) CHECK(em_dense(&L, "before", x, 8, NULL, &y));
    CHECK(em_dense(&L, "fc", x, 8, NULL, &y));
    w[k] = param_values(g, "fc.weight", NULL);
    /* The parameter was seeded with the rule: the same as an em_init seeded by hand. */
    if (k == 0) {
      em_var p;
      em_init u = {.kind = EM_INIT_UNIFORM, .scale = 1 / sqrt(8.0), .seed = seed_rule(7, "fc.weight")};
      CHECK(em_parameter(g, "manual", EM_F32, 2, (int64_t[]){8, 8}, &u, &p));
      double *m = param_values(g, "manual", NULL);
      assert_memory_equal(m, w[0], 64 * sizeof(double));
      free(m);
    }
    em_graph_free(g);
  }
  assert_memory_equal(w[0], w[1], 64 * sizeof(double));
  assert_memory_not_equal(w[0], w[2], 64 * sizeof(double));
  for (int k = 0; k < 3; k++) free(w[k]);
}

/* ------------------------------------------------------ normalisation --- */

static void test_batch_norm(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_layers L = {.graph = g};
  em_var x = input(g, "x", 4, (int64_t[]){-1, 3, 2, 2}), y;
  CHECK(em_batch_norm(&L, "bn", x, NULL, &y));
  enum { N = 4, C = 3, S = 4 };
  float xv[N * C * S], yv[N * C * S];
  random_fill(xv, N * C * S, 21);
  for (int i = 0; i < N * C * S; i++) xv[i] = xv[i] * 3 + 1;
  run1(g, x, xv, 4, (int64_t[]){N, C, 2, 2}, y, yv, N * C * S, 1);
  double *rm = param_values(g, "bn.running_mean", NULL), *rv = param_values(g, "bn.running_var", NULL);
  for (int c = 0; c < C; c++) {
    double mean = 0, ss = 0;
    for (int n = 0; n < N; n++)
      for (int s = 0; s < S; s++) mean += xv[(n * C + c) * S + s];
    mean /= N * S;
    for (int n = 0; n < N; n++)
      for (int s = 0; s < S; s++) ss += pow(xv[(n * C + c) * S + s] - mean, 2);
    /* PyTorch's momentum 0.1: running = 0.9 running + 0.1 batch; the variance unbiased. */
    assert_close(rm[c], 0.1 * mean, 1e-5, "running mean", c);
    assert_close(rv[c], 0.9 + 0.1 * ss / (N * S - 1), 1e-5, "running var", c);
    for (int n = 0; n < N; n++)
      for (int s = 0; s < S; s++) {
        int i = (n * C + c) * S + s;
        assert_close(yv[i], (xv[i] - mean) / sqrt(ss / (N * S) + 1e-5), 1e-4, "batch norm (training)", i);
      }
  }
  free(rm);
  free(rv);
  /* Per element (CNTK's spatial=False): statistics per (c, h, w), parameters [C * H * W]. */
  em_var ype;
  CHECK(em_batch_norm(&L, "bnpe", x, &(em_batch_norm_opts){.per_element = 1, .momentum = 0.5}, &ype));
  assert_string_equal(shape_of(g, ype), "[-1, 3, 2, 2]");
  int64_t n;
  double *w = param_values(g, "bnpe.weight", &n);
  assert_int_equal(n, C * S);
  free(w);
  run1(g, x, xv, 4, (int64_t[]){N, C, 2, 2}, ype, yv, N * C * S, 1);
  rm = param_values(g, "bnpe.running_mean", NULL);
  for (int f = 0; f < C * S; f++) {
    double mean = 0;
    for (int b = 0; b < N; b++) mean += xv[b * C * S + f];
    assert_close(rm[f], 0.5 * mean / N, 1e-5, "per-element running mean", f);
  }
  free(rm);
  em_graph_free(g);
}

static void test_layer_norm_embedding_dropout(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_layers L = {.graph = g, .seed = 2};
  em_var x = input(g, "x", 3, (int64_t[]){-1, 4, 5}), y;
  CHECK(em_layer_norm(&L, "ln", x, &(em_layer_norm_opts){.dims = 2}, &y));
  int64_t n;
  double *w = param_values(g, "ln.weight", &n);
  assert_int_equal(n, 20);
  free(w);
  float xv[3 * 20], yv[3 * 20];
  random_fill(xv, 60, 5);
  run1(g, x, xv, 3, (int64_t[]){3, 4, 5}, y, yv, 60, 0);
  for (int r = 0; r < 3; r++) {
    double mean = 0, var = 0;
    for (int i = 0; i < 20; i++) mean += xv[r * 20 + i];
    mean /= 20;
    for (int i = 0; i < 20; i++) var += pow(xv[r * 20 + i] - mean, 2);
    var /= 20;
    for (int i = 0; i < 20; i++)
      assert_close(yv[r * 20 + i], (xv[r * 20 + i] - mean) / sqrt(var + 1e-5), 1e-4, "layer norm", r * 20 + i);
  }

  /* Embedding: rows of the weight. */
  em_var idx, e;
  CHECK(em_input(g, "idx", EM_I32, 2, (int64_t[]){-1, 3}, &idx));
  CHECK(em_embedding(&L, "emb", idx, 10, 4, NULL, &e));
  assert_string_equal(shape_of(g, e), "[-1, 3, 4]");
  int32_t iv[6] = {0, 9, 3, 3, 7, 1};
  em_tensor *it, *et;
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 2, (int64_t[]){2, 3}, iv, sizeof iv, &it));
  em_exec *ex;
  CHECK(em_exec_create(g, &e, 1, em_cpu(), &ex));
  em_feed f = {idx, it};
  CHECK(em_exec_run(ex, &f, 1, &et));
  float ev[24];
  CHECK(em_tensor_to_host(et, ev, sizeof ev));
  double *ew = param_values(g, "emb.weight", NULL);
  for (int i = 0; i < 6; i++)
    for (int d = 0; d < 4; d++) assert_close(ev[i * 4 + d], ew[iv[i] * 4 + d], 0, "embedding", i * 4 + d);
  free(ew);
  em_tensor_release(et);
  em_tensor_release(it);
  em_exec_free(ex);

  /* Dropout: zero with probability rate in training, survivors scaled; identity in inference; rate 0 adds
   * nothing; two layers draw different masks. */
  em_var v = input(g, "v", 1, (int64_t[]){-1}), d1, d2, same;
  CHECK(em_dropout(&L, NULL, v, 0.3, &d1));
  CHECK(em_dropout(&L, NULL, v, 0.3, &d2));
  CHECK(em_dropout(&L, NULL, v, 0, &same));
  assert_int_equal(same, v);
  enum { M = 2000 };
  float *ones = malloc(M * sizeof(float)), *o1 = malloc(M * sizeof(float)), *o2 = malloc(M * sizeof(float));
  for (int i = 0; i < M; i++) ones[i] = 1;
  run1(g, v, ones, 1, (int64_t[]){M}, d1, o1, M, 1);
  run1(g, v, ones, 1, (int64_t[]){M}, d2, o2, M, 1);
  int zeros = 0, differ = 0;
  for (int i = 0; i < M; i++) {
    if (o1[i] == 0) zeros++;
    else assert_close(o1[i], 1 / 0.7, 1e-6, "dropout survivor", i);
    differ += (o1[i] == 0) != (o2[i] == 0);
  }
  /* 0.3 +- 4.4 standard deviations (sqrt(0.21 / 2000) = 0.0102). */
  if (fabs(zeros / (double)M - 0.3) > 0.045) fail_msg("dropout zeroed %d of %d", zeros, M);
  assert_true(differ > 0);
  run1(g, v, ones, 1, (int64_t[]){M}, d1, o1, M, 0);
  for (int i = 0; i < M; i++) assert_close(o1[i], 1, 0, "dropout in inference", i);
  free(ones);
  free(o1);
  free(o2);
  assert_int_equal(em_dropout(&L, NULL, v, 1.0, &d1), EM_ERR_INVALID_ARGUMENT);
  em_graph_free(g);
}

/* -------------------------------------------------------- activations --- */

static double ref_act(em_activation a, double x) {
  switch (a) {
  case EM_ACT_RELU: return fmax(x, 0);
  case EM_ACT_RELU6: return fmin(fmax(x, 0), 6);
  case EM_ACT_LEAKY_RELU: return x < 0 ? 0.01 * x : x;
  case EM_ACT_ELU: return x > 0 ? x : exp(x) - 1;
  case EM_ACT_SELU: return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (exp(x) - 1));
  case EM_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  case EM_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case EM_ACT_SILU: return x / (1 + exp(-x));
  case EM_ACT_SIGMOID: return 1 / (1 + exp(-x));
  case EM_ACT_TANH: return tanh(x);
  case EM_ACT_SOFTPLUS: return log1p(exp(x));
  case EM_ACT_SOFTSIGN: return x / (1 + fabs(x));
  case EM_ACT_HARD_SIGMOID: return fmax(0, fmin(1, x / 6 + 0.5));
  case EM_ACT_HARD_SWISH: return x * fmax(0, fmin(1, x / 6 + 0.5));
  default: return x;
  }
}

static void test_activations(void **state) {
  (void)state;
  enum { K = 9 };
  const float xv[K] = {-4, -3, -1, -0.5f, 0, 0.5f, 1, 3, 7};
  for (int a = EM_ACT_NONE; a < EM_ACT_COUNT; a++) {
    em_graph *g = new_graph();
    em_layers L = {.graph = g};
    em_var x = input(g, "x", 2, (int64_t[]){-1, K}), y;
    CHECK(em_activation_apply(&L, x, (em_activation)a, &y));
    if (a == EM_ACT_NONE) assert_int_equal(y, x);
    float yv[K];
    run1(g, x, xv, 2, (int64_t[]){1, K}, y, yv, K, 0);
    double lse = 0, mx = 7;
    for (int i = 0; i < K; i++) lse += exp(xv[i] - mx);
    lse = mx + log(lse);
    for (int i = 0; i < K; i++) {
      double want = a == EM_ACT_SOFTMAX ? exp(xv[i] - lse) : a == EM_ACT_LOG_SOFTMAX ? xv[i] - lse : ref_act(a, xv[i]);
      char what[64];
      snprintf(what, sizeof what, "activation %s", em_activation_name((em_activation)a));
      assert_close(yv[i], want, 2e-6, what, i);
    }
    em_activation back;
    CHECK(em_activation_from_name(em_activation_name((em_activation)a), &back));
    assert_int_equal(back, a);
    em_graph_free(g);
  }
  em_activation act;
  assert_int_equal(em_activation_from_name("swishy", &act), EM_ERR_NOT_FOUND);
  assert_non_null(strstr(em_last_error(), "relu"));
  assert_null(em_activation_name(EM_ACT_COUNT));
}

/* --------------------------------------------------------- sequential --- */

static void test_sequential(void **state) {
  (void)state;
  em_graph *g = new_graph();
  em_var x = input(g, "x", 4, (int64_t[]){-1, 1, 28, 28}), logits;
  /* The header's LeNet example. */
  const em_layer lenet[] = {
    EM_L_CONV(32, 5, .conv.padding = 2, .act = EM_ACT_RELU),
    EM_L_MAX_POOL(2),
    EM_L_CONV(64, 5, .act = EM_ACT_RELU),
    EM_L_MAX_POOL(2),
    EM_L_FLATTEN(),
    EM_L_DENSE(256, .act = EM_ACT_RELU),
    EM_L_DROPOUT(0.5),
    EM_L_DENSE(10, .name = "out"),
  };
  em_layers L = {.graph = g, .seed = 42};
  CHECK(em_sequential(&L, x, lenet, EM_COUNT(lenet), &logits));
  assert_string_equal(shape_of(g, logits), "[-1, 10]");
  em_var v;
  CHECK(em_graph_lookup(g, "conv2", &v));
  assert_string_equal(shape_of(g, v), "[-1, 64, 10, 10]"); /* 14 - 5 + 1 */
  CHECK(em_graph_lookup(g, "dense1", &v));
  assert_string_equal(shape_of(g, v), "[-1, 256]");
  int64_t n;
  CHECK(em_layers_parameter_count(g, &n));
  /* conv1 32*25+32, conv2 64*32*25+64, dense1 1600*256+256, out 256*10+10 */
  assert_int_equal(n, (32 * 25 + 32) + (64 * 32 * 25 + 64) + (1600 * 256 + 256) + (256 * 10 + 10));
  /* A failing layer is named by index and kind. */
  em_var flat = input(g, "flat", 2, (int64_t[]){-1, 8});
  const em_layer bad[] = {EM_L_DENSE(4), EM_L_CONV(2, 3)};
  assert_int_equal(em_sequential(&L, flat, bad, 2, &v), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "layer 1 (conv)"));
  em_graph_free(g);
}

/* ------------------------------------------------------------- models --- */

static int64_t count_of(em_graph *g) {
  int64_t n;
  CHECK(em_layers_parameter_count(g, &n));
  return n;
}

static void test_model_shapes_and_counts(void **state) {
  (void)state;
  /* Hand counts (weights + biases; batch norm: weight + bias per channel). */
  const int64_t mlp = (784 * 256 + 256) + (256 * 128 + 128) + (128 * 10 + 10);
  const int64_t lenet = (32 * 1 * 25 + 32) + (64 * 32 * 25 + 64) + (1600 * 256 + 256) + (256 * 128 + 128) +
                        (128 * 10 + 10);
  const int64_t lenet_bn = lenet - 32 - 64 + 2 * 32 + 2 * 64;
  const int64_t stage1 = 3 * (2 * 16 * 16 * 9 + 2 * 2 * 16);
  const int64_t stage2 = (32 * 16 * 9 + 32 * 32 * 9 + 2 * 2 * 32) + 2 * (2 * 32 * 32 * 9 + 2 * 2 * 32);
  const int64_t stage3 = (64 * 32 * 9 + 64 * 64 * 9 + 2 * 2 * 64) + 2 * (2 * 64 * 64 * 9 + 2 * 2 * 64);
  const int64_t resnet = (16 * 1 * 9 + 2 * 16) + stage1 + stage2 + stage3 + (64 * 10 + 10);
  const int64_t projections = (32 * 16 + 2 * 32) + (64 * 32 + 2 * 64);
  assert_int_equal(mlp, 235146);
  assert_int_equal(lenet, 496138);
  assert_int_equal(resnet, 269434);
  assert_int_equal(resnet + 3 * 16 * 9 - 16 * 9, 269722); /* the paper's CIFAR (3-channel) count */

  struct { const char *model; em_model_opts o; int64_t count; const char *probe, *probe_shape; } cases[] = {
    {"mlp", {0}, mlp, "fc2", "[-1, 128]"},
    {"mlp", {.hidden = (const int64_t[]){64}, .n_hidden = 1, .dropout = 0.2}, 784 * 64 + 64 + 64 * 10 + 10, "dropout1",
     "[-1, 64]"},
    {"lenet", {0}, lenet, "conv2", "[-1, 64, 10, 10]"},
    {"lenet", {.batch_norm = 1, .dropout = 0.5}, lenet_bn, "bn1", "[-1, 32, 28, 28]"},
    {"lenet", {.channels = {6, 16}, .fc = {120, 84}},
     (6 * 25 + 6) + (16 * 6 * 25 + 16) + (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10), "fc1", "[-1, 120]"},
    {"resnet20", {0}, resnet, "stage3.block3.bn2", "[-1, 64, 7, 7]"},
    {"resnet20", {.pad_to_32 = 1}, resnet, "stage2.block1.bn2", "[-1, 32, 16, 16]"},
    {"resnet20", {.projection_shortcuts = 1}, resnet + projections, "stage2.block1.shortcut.bn", "[-1, 32, 14, 14]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    em_graph *g = new_graph();
    em_var x = input(g, "x", 4, (int64_t[]){-1, 1, 28, 28}), logits, v;
    CHECK(em_model_build(g, cases[i].model, x, 10, 1, &cases[i].o, &logits));
    assert_string_equal(shape_of(g, logits), "[-1, 10]");
    if (count_of(g) != cases[i].count)
      fail_msg("%s case %zu: %lld parameters, want %lld", cases[i].model, i, (long long)count_of(g),
               (long long)cases[i].count);
    CHECK(em_graph_lookup(g, cases[i].probe, &v));
    assert_string_equal(shape_of(g, v), cases[i].probe_shape);
    em_graph_free(g);
  }
  /* resnet20's names: the stem, blocks, the head; weights [out, in, 3, 3]. */
  em_graph *g = new_graph();
  em_var x = input(g, "x", 4, (int64_t[]){-1, 1, 28, 28}), logits;
  CHECK(em_model_resnet20(g, x, 10, 1, NULL, &logits));
  int64_t n;
  free(param_values(g, "stage2.block1.conv1.weight", &n));
  assert_int_equal(n, 32 * 16 * 9);
  free(param_values(g, "stage1.block3.bn2.running_var", &n));
  assert_int_equal(n, 16);
  free(param_values(g, "fc.weight", &n));
  assert_int_equal(n, 640);
  em_var none;
  assert_int_not_equal(em_graph_lookup(g, "conv1.bias", &none), EM_OK); /* convolutions before batch norm: no bias */
  size_t ns;
  CHECK(em_graph_states(g, NULL, 0, &ns));
  assert_int_equal(ns, 2 * 19); /* 19 batch norms */
  em_graph_free(g);
  g = new_graph();
  x = input(g, "x", 4, (int64_t[]){-1, 1, 28, 28});
  assert_int_equal(em_model_build(g, "vgg16", x, 10, 1, NULL, &logits), EM_ERR_NOT_FOUND);
  assert_non_null(strstr(em_last_error(), "resnet20"));
  const char *const *names = em_model_names();
  assert_string_equal(names[0], "mlp");
  assert_string_equal(names[2], "resnet20");
  assert_null(names[3]);
  em_graph_free(g);
}

/* ------------------------------------------------------------ training --- */

#define MAX_P 128

typedef struct run_result {
  float loss[32];
  em_tensor *params[MAX_P], *states[MAX_P];
  size_t n_params, n_states;
} run_result;

/* Images of `side` x `side`: class k has a bright square in corner k, plus noise. */
static void make_images(int n, int side, float *x, int32_t *y) {
  uint64_t s = 99;
  int q = side / 2;
  for (int i = 0; i < n; i++) {
    y[i] = i % 3;
    for (int r = 0; r < side; r++)
      for (int c = 0; c < side; c++) {
        int in = (y[i] == 0 && r < q && c < q) || (y[i] == 1 && r < q && c >= q) || (y[i] == 2 && r >= q && c < q);
        x[(i * side + r) * side + c] = (float)((in ? 1.0 : 0.0) + (unit(&s) - 0.5) * 0.3);
      }
  }
}

/* Trains `model` on dev for `steps` SGD steps (written here: p -= lr * g,
 * through em_parameter_set) in training mode. */
static void train_model(const char *model, const em_model_opts *opts, int side, int batch, int steps, float lr,
                        em_device dev, em_mode mode, run_result *r) {
  em_graph *g = new_graph();
  em_var x = input(g, "x", 4, (int64_t[]){-1, 1, side, side}), label, logits, per, loss;
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &label));
  CHECK(em_model_build(g, model, x, 3, 5, opts, &logits));
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){logits, label}, 2, NULL, 0, &per, 1));
  CHECK(em_apply(g, "reduce_mean", &per, 1, NULL, 0, &loss, 1));
  em_var params[MAX_P], grads[MAX_P], states[MAX_P];
  size_t np, ns;
  CHECK(em_graph_parameters(g, params, MAX_P, &np));
  CHECK(em_graph_states(g, states, MAX_P, &ns));
  assert_true(np <= MAX_P && ns <= MAX_P);
  CHECK(em_gradients(g, loss, params, (int)np, grads));
  em_var outs[1 + MAX_P] = {loss};
  memcpy(outs + 1, grads, sizeof(em_var) * np);
  em_exec *e;
  CHECK(em_exec_create(g, outs, 1 + (int)np, dev, &e));
  CHECK(em_exec_set_mode(e, mode));
  CHECK(em_exec_set_training(e, 1));
  float *xv = malloc(sizeof(float) * (size_t)(batch * side * side));
  int32_t *yv = malloc(sizeof(int32_t) * (size_t)batch);
  make_images(batch, side, xv, yv);
  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, (int64_t[]){batch, 1, side, side}, xv,
                            sizeof(float) * (size_t)(batch * side * side), &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){batch}, yv, sizeof(int32_t) * (size_t)batch, &yt));
  em_feed feeds[2] = {{x, xt}, {label, yt}};
  for (int step = 0; step < steps; step++) {
    em_tensor *res[1 + MAX_P];
    CHECK(em_exec_run(e, feeds, 2, res));
    CHECK(em_tensor_to_host(res[0], &r->loss[step], sizeof(float)));
    for (size_t k = 0; k < np; k++) {
      em_tensor *p, *gh;
      CHECK(em_parameter_get(g, params[k], em_cpu(), &p));
      CHECK(em_tensor_to_device(res[1 + k], em_cpu(), &gh));
      float *pv = em_tensor_data(p);
      const float *gv = em_tensor_data(gh);
      for (int64_t i = 0; i < em_tensor_numel(p); i++) pv[i] = pv[i] - lr * gv[i];
      CHECK(em_parameter_set(g, params[k], p));
      em_tensor_release(p);
      em_tensor_release(gh);
    }
    for (size_t k = 0; k < 1 + np; k++) em_tensor_release(res[k]);
  }
  for (size_t k = 0; k < np; k++) CHECK(em_parameter_get(g, params[k], em_cpu(), &r->params[k]));
  for (size_t k = 0; k < ns; k++) CHECK(em_parameter_get(g, states[k], em_cpu(), &r->states[k]));
  r->n_params = np;
  r->n_states = ns;
  em_exec_free(e);
  em_tensor_release(xt);
  em_tensor_release(yt);
  free(xv);
  free(yv);
  em_graph_free(g);
}

static void result_free(run_result *r) {
  for (size_t k = 0; k < r->n_params; k++) em_tensor_release(r->params[k]);
  for (size_t k = 0; k < r->n_states; k++) em_tensor_release(r->states[k]);
}

/* Small enough for valgrind: lenet on 16x16 (conv2 sees 8x8 -> 4x4), resnet20 on 8x8 (stages at 8, 4, 2). */
static const struct { const char *model; em_model_opts o; int side; float lr; } train_cases[] = {
  {"mlp", {.hidden = (const int64_t[]){32, 32}, .n_hidden = 2}, 12, 0.3f},
  {"lenet", {.channels = {8, 16}, .fc = {32, 32}, .batch_norm = 1, .dropout = 0.25}, 16, 0.05f},
  {"resnet20", {0}, 8, 0.05f},
};

static void test_models_train(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof train_cases / sizeof train_cases[0]; i++) {
    run_result r = {0};
    int steps = 16;
    train_model(train_cases[i].model, &train_cases[i].o, train_cases[i].side, 9, steps, train_cases[i].lr, em_cpu(),
                EM_MODE_FAST, &r);
    /* The mean of the last three losses well below the first (noise from dropout and batch statistics). */
    double last = (r.loss[steps - 1] + r.loss[steps - 2] + r.loss[steps - 3]) / 3;
    if (!(last < 0.7 * r.loss[0]))
      fail_msg("%s: the loss went from %g to %g in %d SGD steps", train_cases[i].model, r.loss[0], last, steps);
    print_message("%s: loss %.4f -> %.4f in %d steps\n", train_cases[i].model, r.loss[0], last, steps);
    result_free(&r);
  }
}

static int g_gpus;

static void use_gpu(void) { g_gpus = ts_use_gpu(); }

static void same_tensors(const char *model, const char *what, em_tensor *const *a, em_tensor *const *b, size_t n) {
  for (size_t k = 0; k < n; k++) {
    int64_t m = em_tensor_numel(a[k]);
    assert_int_equal(m, em_tensor_numel(b[k]));
    const float *x = em_tensor_data(a[k]), *y = em_tensor_data(b[k]);
    for (int64_t i = 0; i < m; i++)
      if (memcmp(&x[i], &y[i], sizeof(float)))
        fail_msg("%s: %s %zu element %lld: %.9g on cuda:0, %.9g on the CPU (portable mode must give the same bits)",
                 model, what, k, (long long)i, y[i], x[i]);
  }
}

/* Each model, batch 2, two steps in training mode on the CPU and on the GPU: the same bits. */
static void test_models_gpu_bitwise(void **state) {
  (void)state;
  if (!g_gpus) {
    print_message("models on the GPU: SKIPPED: no CUDA driver, real or test double\n");
    skip();
  }
  for (size_t i = 0; i < sizeof train_cases / sizeof train_cases[0]; i++) {
    run_result c = {0}, d = {0};
    /* Under valgrind the double runs every GPU thread's host build 20-50x
     * slower: resnet20 there took minutes. Its kernels are the convolution,
     * pooling, norm and learner ones lenet runs, which test_ops_devices also
     * checks under valgrind; the plain and ASan runs take all three models. */
    if (RUNNING_ON_VALGRIND && !strcmp(train_cases[i].model, "resnet20")) {
      print_message("resnet20 on the GPU: not run under valgrind (the plain and ASan runs check it)\n");
      continue;
    }
    train_model(train_cases[i].model, &train_cases[i].o, train_cases[i].side, 2, 2, train_cases[i].lr, em_cpu(),
                EM_MODE_PORTABLE, &c);
    train_model(train_cases[i].model, &train_cases[i].o, train_cases[i].side, 2, 2, train_cases[i].lr, em_cuda(0),
                EM_MODE_PORTABLE, &d);
    for (int s = 0; s < 2; s++)
      if (memcmp(&c.loss[s], &d.loss[s], sizeof(float)))
        fail_msg("%s: step %d: loss %.9g on cuda:0, %.9g on the CPU", train_cases[i].model, s, d.loss[s], c.loss[s]);
    assert_int_equal(c.n_params, d.n_params);
    assert_int_equal(c.n_states, d.n_states);
    same_tensors(train_cases[i].model, "parameter", c.params, d.params, c.n_params);
    same_tensors(train_cases[i].model, "state", c.states, d.states, c.n_states);
    result_free(&c);
    result_free(&d);
  }
}

/* ---------------------------------------------------- op suggestions --- */

static void expect_suggestion(const char *op, const char *want) {
  em_graph *g = new_graph();
  em_var x = input(g, "x", 2, (int64_t[]){-1, 4}), y;
  assert_int_equal(em_apply(g, op, &x, 1, NULL, 0, &y, 1), EM_ERR_NOT_FOUND);
  const char *msg = em_last_error();
  if (!strstr(msg, "no operation named")) fail_msg("%s: %s", op, msg);
  if (want && !strstr(msg, want)) fail_msg("%s: '%s' does not contain \"%s\"", op, msg, want);
  if (!want && strstr(msg, "did you mean")) fail_msg("%s: '%s' suggests something", op, msg);
  em_graph_free(g);
}

static void test_op_suggestions(void **state) {
  (void)state;
  expect_suggestion("conv2d", "did you mean 'convolution'?");
  expect_suggestion("Conv2D", "did you mean 'convolution'?");
  expect_suggestion("MaxPool2d", "did you mean 'max_pool'?");
  expect_suggestion("linear", "did you mean 'matmul'");
  expect_suggestion("BatchNorm2d", "'batch_normalization'");
  expect_suggestion("softmx", "did you mean 'softmax'?");
  expect_suggestion("Relu", "did you mean 'relu'?");
  expect_suggestion("reduce_man", "'reduce_mean'");
  expect_suggestion("xyzzy", NULL);
}

int main(void) {
  use_gpu();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_dense_forward),
    cmocka_unit_test(test_conv_forward),
    cmocka_unit_test(test_conv_shapes_1d_3d),
    cmocka_unit_test(test_pooling),
    cmocka_unit_test(test_names_and_numbering),
    cmocka_unit_test(test_initialisers),
    cmocka_unit_test(test_seeds),
    cmocka_unit_test(test_batch_norm),
    cmocka_unit_test(test_layer_norm_embedding_dropout),
    cmocka_unit_test(test_activations),
    cmocka_unit_test(test_sequential),
    cmocka_unit_test(test_model_shapes_and_counts),
    cmocka_unit_test(test_models_train),
    cmocka_unit_test(test_models_gpu_bitwise),
    cmocka_unit_test(test_op_suggestions),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
