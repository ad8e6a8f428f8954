/* The fast mode's convolutions through cuDNN (runtime/cudnn.c, ops/conv_gpu.c), run on the
 * libcuda double with the cuDNN double (tests/fakecudnn): which devices and drivers use it and
 * why (the rule, checked over a hand-made matrix), the geometries cuDNN cannot take, cuDNN's
 * version numbers; convolutions and their gradients against a plain reference and the CPU;
 * the algorithm search run once and remembered in memory and on disk (hit, miss, corrupt
 * entry, another cuDNN version); the workspace limit, deterministic-only choices and TF32
 * only when asked; failures named; and a cuDNN that cannot be loaded leaving convolutions to
 * Ember's kernels with the reason in em_device_library_use and em_exec_describe. */
#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_reference.h"
#include "cudnn.h"
#include "gpu_double.h"
#include "op_testkit.h"

static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* ------------------------------------------------------ the rule alone --- */

/* Expected answers from cuda-compat.md's facts: a cuDNN built for CUDA M needs a CUDA M.0
 * driver; cuDNN 9.11 and later dropped everything before Turing (7.5); 9.0 to 9.10 and 8.9
 * support Maxwell (5.0) and newer. */
static void test_support_rule(void **state) {
  (void)state;
  const struct {
    int major, minor, patch, built_for, driver, cc, want;
    const char *why;
  } rows[] = {
      {9, 19, 0, 13000, 13000, 90, 1, "supports"},  {9, 19, 0, 13000, 12080, 90, 0, "CUDA 13.0 driver"},
      {9, 19, 0, 12090, 12040, 90, 1, "supports"},  {9, 19, 0, 12090, 11080, 90, 0, "CUDA 12.0 driver"},
      {9, 19, 0, 13000, 13000, 70, 0, "7.5"},       {9, 11, 0, 12080, 12080, 75, 1, "supports"},
      {9, 10, 2, 12080, 12040, 61, 1, "supports"},  {9, 10, 2, 12080, 12040, 37, 0, "5.0"},
      {8, 9, 7, 11080, 11040, 50, 1, "supports"},   {7, 0, 0, 10000, 13000, 90, 0, "not in Ember's table"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char why[256] = "";
    int got = em_cudnn_supports(rows[i].major, rows[i].minor, rows[i].patch, rows[i].built_for, rows[i].driver,
                                rows[i].cc, why, sizeof why);
    if (got != rows[i].want || !strstr(why, rows[i].why))
      fail_msg("cuDNN %d.%d.%d for CUDA %d, driver %d, CC %d: got %d (%s), want %d (\"%s\")", rows[i].major,
               rows[i].minor, rows[i].patch, rows[i].built_for, rows[i].driver, rows[i].cc, got, why, rows[i].want,
               rows[i].why);
  }
}

/* cudnnGetVersion's numbers (cudnn_version.h: CUDNN_VERSION = major*10000 + minor*100 + patch
 * since 9.0, major*1000 + minor*100 + patch before). */
static void test_version_numbers(void **state) {
  (void)state;
  const struct { size_t v; int major, minor, patch; } rows[] = {
      {91900, 9, 19, 0}, {90000, 9, 0, 0}, {91002, 9, 10, 2}, {8907, 8, 9, 7}, {8100, 8, 1, 0}, {7605, 7, 6, 5}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int a, b, c;
    em_cudnn_version_split(rows[i].v, &a, &b, &c);
    if (a != rows[i].major || b != rows[i].minor || c != rows[i].patch)
      fail_msg("%zu: got %d.%d.%d, want %d.%d.%d", rows[i].v, a, b, c, rows[i].major, rows[i].minor, rows[i].patch);
  }
}

/* cuDNN pads both ends alike and its descriptors take int: geometries it cannot express. */
static void test_geometries_cudnn_takes(void **state) {
  (void)state;
  em_cudnn_geom g = {.dt = EM_F32, .nd = 2, .n = 2, .ci = 3, .co = 4, .groups = 1};
  for (int i = 0; i < 2; i++) g.img[i] = 7, g.k[i] = 3, g.stride[i] = 2, g.dil[i] = 1, g.pad[i] = 1, g.out[i] = 4;
  char why[200];
  if (!em_cudnn_takes(&g, why, sizeof why)) fail_msg("a plain 3x3 stride-2 convolution: %s", why);
  g.out[1] = 5; /* (7 + 1 + 2 - 3) / 2 + 1: one more pad at the end than at the start */
  if (em_cudnn_takes(&g, why, sizeof why) || !strstr(why, "axis 1"))
    fail_msg("asymmetric padding taken (%s)", why);
  g.out[1] = 4;
  g.n = 1ll << 20, g.ci = 1ll << 12; /* 2^32 elements in x */
  if (em_cudnn_takes(&g, why, sizeof why) || !strstr(why, "2^31")) fail_msg("a 2^32-element tensor taken (%s)", why);
  g.n = 2, g.ci = 3, g.nd = 4;
  if (em_cudnn_takes(&g, why, sizeof why)) fail_msg("4 spatial axes taken");
}

/* ------------------------------------------------------- the doubles --- */

static char cache_dir[512]; /* the algorithm cache of the last use_doubles_cache */

/* The doubles (tests/support/gpu_double.h): devices, a driver, a cuDNN version and the CUDA it was
 * built for, cuBLAS off; a fresh cache directory unless keep_cache (a second process). */
static int use_doubles_cache(const char *devices, const char *driver, const char *version, const char *cudart,
                             int keep_cache) {
  int n = ts_use_doubles(&(ts_doubles){.devices = devices, .driver = driver, .cudnn = version, .cudart = cudart,
                                       .keep_cache = keep_cache});
  snprintf(cache_dir, sizeof cache_dir, "%s", ts_doubles_cache_dir());
  return n;
}

static int use_doubles(const char *devices) { return use_doubles_cache(devices, "13000", "9.19.0", "13000", 0); }

static unsigned long finds(void) {
  return ts_dnn_calls("cudnnFindConvolutionForwardAlgorithmEx") + ts_dnn_calls("cudnnFindConvolutionBackwardDataAlgorithmEx") +
         ts_dnn_calls("cudnnFindConvolutionBackwardFilterAlgorithmEx");
}

/* A convolution graph y = conv(x, w [, b]) on dev with ONNX attributes from c. */
typedef struct cg {
  em_graph *g;
  em_var x, w, b, y;
  em_exec *e;
  em_tensor *xt, *wt, *bt;
  ts_conv c;
} cg;

static void cg_build(cg *t, const ts_conv *c, int bias, em_device dev, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->c = *c;
  int64_t xs[5], ws[5], ys[5], bs[1] = {c->m}, k[3], s[3], d[3], pads[6];
  ts_conv_shapes(c, xs, ws, ys);
  for (int i = 0; i < c->nsp; i++)
    k[i] = c->k[i], s[i] = c->s[i], d[i] = c->d[i], pads[i] = c->pb[i], pads[c->nsp + i] = c->pe[i];
  assert_int_equal(em_graph_create(&t->g), EM_OK);
  assert_int_equal(em_input(t->g, "x", EM_F32, 2 + c->nsp, xs, &t->x), EM_OK);
  assert_int_equal(em_input(t->g, "w", EM_F32, 2 + c->nsp, ws, &t->w), EM_OK);
  em_var in[3] = {t->x, t->w, -1};
  if (bias) {
    assert_int_equal(em_input(t->g, "b", EM_F32, 1, bs, &t->b), EM_OK);
    in[2] = t->b;
  }
  em_attr at[5] = {AIS("kernel_shape", k, c->nsp), AIS("strides", s, c->nsp), AIS("dilations", d, c->nsp),
                   AIS("pads", pads, 2 * c->nsp), {.name = "group", .type = EM_ATTR_INT, .i = c->g}};
  if (em_apply(t->g, "convolution", in, bias ? 3 : 2, at, 5, &t->y, 1)) fail_msg("convolution: %s", em_last_error());
  if (em_exec_create(t->g, &t->y, 1, dev, &t->e)) fail_msg("exec: %s", em_last_error());
  t->xt = ot_rand(EM_F32, 2 + c->nsp, xs, seed, -1, 1);
  t->wt = ot_rand(EM_F32, 2 + c->nsp, ws, seed + 1, -1, 1);
  t->bt = bias ? ot_rand(EM_F32, 1, bs, seed + 2, -1, 1) : NULL;
}

static em_tensor *cg_run(cg *t) {
  em_feed f[3] = {{t->x, t->xt}, {t->w, t->wt}, {t->b, t->bt}};
  em_tensor *o = NULL;
  if (em_exec_run(t->e, f, t->bt ? 3 : 2, &o)) fail_msg("run: %s", em_last_error());
  return o;
}

static void cg_free(cg *t) {
  em_exec_free(t->e);
  em_graph_free(t->g);
  em_tensor_release(t->xt), em_tensor_release(t->wt), em_tensor_release(t->bt);
}

static void cg_check(cg *t, em_tensor *o, const char *what) {
  const float *x = em_tensor_data(t->xt), *w = em_tensor_data(t->wt), *b = t->bt ? em_tensor_data(t->bt) : NULL;
  double *want = ts_conv_reference(&t->c, x, w, b);
  int64_t xs[5], ws[5], ys[5];
  ts_conv_shapes(&t->c, xs, ws, ys);
  ot_expect_values(o, want, ts_prod(ys, 2 + t->c.nsp), 1e-5 * sqrt((double)(t->c.c / t->c.g * ts_prod(t->c.k, t->c.nsp))),
                   what);
  free(want);
}

static ts_conv conv2d(int64_t n, int64_t c, int64_t m, int64_t g, int64_t hw, int64_t k, int64_t s, int64_t d,
                      int64_t p) {
  ts_conv v = {.nsp = 2, .n = n, .c = c, .m = m, .g = g};
  for (int i = 0; i < 2; i++) v.in[i] = hw + i, v.k[i] = k, v.s[i] = s, v.d[i] = d, v.pb[i] = v.pe[i] = p;
  return v;
}

/* The step's road in em_exec_describe: the last "[...]" on the first line naming op. */
static void road_of(const em_exec *e, const char *op, char *out, size_t cap) {
  char plan[4096];
  em_exec_describe(e, plan, sizeof plan);
  const char *line = strstr(plan, op), *end = line ? strchr(line, '\n') : NULL, *open = NULL;
  for (const char *p = line; p && p < end; p++)
    if (*p == '[') open = p;
  const char *close = open ? strchr(open, ']') : NULL;
  snprintf(out, cap, "%.*s", close ? (int)(close - open - 1) : 0, close ? open + 1 : "");
}

/* Forward convolutions of many geometries through cuDNN against the plain reference: one
 * search each, exact f32 math (FMA_MATH), no descriptor left behind. */
static void test_convolutions_through_cudnn(void **state) {
  (void)state;
  if (!use_doubles("9.0=NVIDIA H100 (double)")) skip();
  int used = 0;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cudnn", &used, why, sizeof why), EM_OK);
  if (!used || !strstr(why, "cuDNN 9.19.0 supports CC 9.0")) fail_msg("cuDNN 9.19 on an H100: used %d: %s", used, why);
  ts_conv cases[] = {
      conv2d(2, 3, 4, 1, 7, 3, 1, 1, 1), conv2d(1, 4, 6, 2, 9, 3, 2, 1, 1), conv2d(2, 6, 6, 6, 8, 3, 1, 2, 2),
      conv2d(1, 5, 7, 1, 6, 1, 1, 1, 0), conv2d(3, 2, 3, 1, 5, 5, 2, 1, 2),
      {.nsp = 1, .n = 2, .c = 3, .m = 5, .g = 1, .in = {11}, .k = {3}, .s = {2}, .d = {1}, .pb = {1}, .pe = {1}},
      {.nsp = 3, .n = 1, .c = 2, .m = 3, .g = 1, .in = {4, 5, 6}, .k = {3, 3, 3}, .s = {1, 1, 1}, .d = {1, 1, 1},
       .pb = {1, 1, 1}, .pe = {1, 1, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int bias = 0; bias < 2; bias++) {
      cg t;
      cg_build(&t, &cases[i], bias, em_cuda(0), 100 + i);
      unsigned long before = ts_dnn_calls("cudnnConvolutionForward"), searched = finds();
      em_tensor *o = cg_run(&t);
      char what[64], road[256];
      snprintf(what, sizeof what, "case %zu%s", i, bias ? " with bias" : "");
      cg_check(&t, o, what);
      if (ts_dnn_calls("cudnnConvolutionForward") == before) fail_msg("%s: cudnnConvolutionForward not called", what);
      if (finds() != searched + (bias ? 0 : 1)) fail_msg("%s: %lu searches, want %d", what, finds() - searched, !bias);
      if (!strstr(ts_dnn_last_call(), "math=FMA_MATH")) fail_msg("%s: not exact f32 math: %s", what, ts_dnn_last_call());
      road_of(t.e, "convolution", road, sizeof road);
      if (strncmp(road, "cuDNN, forward algorithm", 24)) fail_msg("%s: the road says '%s'", what, road);
      em_tensor_release(o);
      cg_free(&t);
    }
  if (ts_dnn_live_descriptors()) fail_msg("%zu cuDNN descriptors left behind", ts_dnn_live_descriptors());
}

/* Gradients of a training graph (backward data and filter) against the CPU's. */
static void test_gradients_through_cudnn(void **state) {
  (void)state;
  if (!use_doubles("8.0")) skip();
  ts_conv c = conv2d(2, 4, 6, 2, 7, 3, 2, 1, 1);
  em_tensor *got[2] = {NULL, NULL}, *want[2] = {NULL, NULL};
  for (int dev = 0; dev < 2; dev++) {
    cg t;
    cg_build(&t, &c, 0, em_cpu(), 7); /* the graph only; the gradient executor is made below */
    em_var loss, grads[2], wrt[2] = {t.x, t.w};
    assert_int_equal(em_apply(t.g, "reduce_sum", &t.y, 1, NULL, 0, &loss, 1), EM_OK);
    if (em_gradients(t.g, loss, wrt, 2, grads)) fail_msg("gradients: %s", em_last_error());
    em_exec *e;
    assert_int_equal(em_exec_create(t.g, grads, 2, dev ? em_cuda(0) : em_cpu(), &e), EM_OK);
    em_feed f[2] = {{t.x, t.xt}, {t.w, t.wt}};
    unsigned long data = ts_dnn_calls("cudnnConvolutionBackwardData"), filt = ts_dnn_calls("cudnnConvolutionBackwardFilter");
    if (em_exec_run(e, f, 2, dev ? got : want)) fail_msg("run: %s", em_last_error());
    if (dev && (ts_dnn_calls("cudnnConvolutionBackwardData") == data || ts_dnn_calls("cudnnConvolutionBackwardFilter") == filt))
      fail_msg("the gradients did not go through cuDNN's backward calls");
    em_exec_free(e);
    cg_free(&t);
  }
  for (int k = 0; k < 2; k++) {
    int64_t n;
    double *w = ot_values(want[k], &n);
    ot_expect_values(got[k], w, n, 1e-4, k ? "dw" : "dx");
    free(w);
    em_tensor_release(got[k]), em_tensor_release(want[k]);
  }
}

/* How many files of the cache directory have names that start with no dot; the first cap of
 * them go to names. */
static int cache_files(char names[][256], int cap) {
  DIR *d = opendir(cache_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.' && n++ < cap) snprintf(names[n - 1], 256, "%s/%s", cache_dir, e->d_name);
  if (d) closedir(d);
  return n;
}

/* One search per problem: the second executor takes the memory's choice, a new process the
 * disk's; a corrupt entry and another cuDNN version search again. */
static void test_search_remembered(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  ts_conv c = conv2d(2, 3, 4, 1, 9, 3, 1, 1, 1);
  for (int round = 0; round < 6; round++) {
    if (round == 2) use_doubles_cache("9.0", "13000", "9.19.0", "13000", 1); /* a new process, same cache */
    if (round == 3) {                                                         /* damage every entry */
      char names[64][256];
      int n = cache_files(names, 64);
      if (n < 1 || n > 64) fail_msg("%d entries in %s after a search", n, cache_dir);
      for (int i = 0; i < n; i++) {
        size_t len;
        unsigned char *p = ot_read_file(names[i], &len);
        p[len - 1] ^= 0x5a;
        ot_write_file(names[i], p, len);
        free(p);
      }
      use_doubles_cache("9.0", "13000", "9.19.0", "13000", 1);
    }
    if (round == 4) use_doubles_cache("9.0", "13000", "9.19.0", "13000", 1); /* the re-stored entry */
    if (round == 5) use_doubles_cache("9.0", "13000", "9.20.0", "13000", 1); /* another cuDNN */
    cg t;
    cg_build(&t, &c, 0, em_cuda(0), 3);
    unsigned long before = finds();
    em_tensor *o = cg_run(&t);
    char what[32];
    snprintf(what, sizeof what, "round %d", round);
    cg_check(&t, o, what);
    const int want[6] = {1, 0, 0, 1, 0, 1};
    if ((int)(finds() - before) != want[round])
      fail_msg("%s: %lu searches, want %d", what, finds() - before, want[round]);
    em_tensor_release(o);
    cg_free(&t);
  }
}

/* Without a disk cache (a directory others may write is refused), the choice is remembered
 * in memory: one search for two executors and many runs. */
static void test_search_remembered_in_memory(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  if (mkdir(cache_dir, 0700) || chmod(cache_dir, 0777)) fail_msg("cannot make %s", cache_dir);
  ts_conv c = conv2d(1, 3, 4, 1, 7, 3, 1, 1, 1);
  unsigned long before = finds();
  for (int k = 0; k < 2; k++) {
    cg t;
    cg_build(&t, &c, 0, em_cuda(0), 12);
    for (int run = 0; run < 3; run++) {
      em_tensor *o = cg_run(&t);
      cg_check(&t, o, "without a disk cache");
      em_tensor_release(o);
    }
    cg_free(&t);
  }
  if (finds() - before != 1) fail_msg("%lu searches without a disk cache, want 1", finds() - before);
  if (cache_files((char(*)[256])NULL, 0)) fail_msg("an entry was written into a directory others may write");
}

/* EMBER_CUDNN_WORKSPACE_MB=0 leaves only the algorithms that need none; a bad value fails the
 * run naming the variable. */
static void test_workspace_limit(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  setenv("EMBER_CUDNN_WORKSPACE_MB", "0", 1);
  ts_conv c = conv2d(2, 3, 4, 1, 9, 3, 1, 1, 1);
  cg t;
  cg_build(&t, &c, 0, em_cuda(0), 4);
  em_tensor *o = cg_run(&t);
  cg_check(&t, o, "no workspace");
  if (!strstr(ts_dnn_last_call(), "workspace=0 given 0 needed")) fail_msg("with no workspace: %s", ts_dnn_last_call());
  em_tensor_release(o);
  cg_free(&t);
  setenv("EMBER_CUDNN_WORKSPACE_MB", "lots", 1);
  cg_build(&t, &c, 0, em_cuda(0), 4);
  em_feed f[2] = {{t.x, t.xt}, {t.w, t.wt}};
  if (em_exec_run(t.e, f, 2, &o) == EM_OK) fail_msg("EMBER_CUDNN_WORKSPACE_MB=lots was accepted");
  if (!strstr(em_last_error(), "EMBER_CUDNN_WORKSPACE_MB=lots")) fail_msg("the message: %s", em_last_error());
  cg_free(&t);
  unsetenv("EMBER_CUDNN_WORKSPACE_MB");
}

/* EMBER_CUDNN_DETERMINISTIC=1: the filter gradient takes a deterministic algorithm (the
 * double's ALGO_0 and ALGO_3 are not, and one of them wins the search otherwise: the problem
 * is small enough, about 2000 multiply-adds, that ALGO_0's low fixed cost beats the 2-D
 * Winograd and FFT families a 4-D descriptor allows). */
static void test_deterministic_only(void **state) {
  (void)state;
  for (int det = 0; det < 2; det++) {
    if (!use_doubles("9.0")) skip();
    if (det) setenv("EMBER_CUDNN_DETERMINISTIC", "1", 1);
    ts_conv c = conv2d(2, 2, 2, 1, 5, 3, 1, 1, 1);
    cg t;
    cg_build(&t, &c, 0, em_cpu(), 5);
    em_var loss, dw;
    assert_int_equal(em_apply(t.g, "reduce_sum", &t.y, 1, NULL, 0, &loss, 1), EM_OK);
    assert_int_equal(em_gradients(t.g, loss, &t.w, 1, &dw), EM_OK);
    em_exec *e;
    assert_int_equal(em_exec_create(t.g, &dw, 1, em_cuda(0), &e), EM_OK);
    em_feed f[2] = {{t.x, t.xt}, {t.w, t.wt}};
    em_tensor *o = NULL;
    if (em_exec_run(e, f, 2, &o)) fail_msg("run: %s", em_last_error());
    char road[256];
    road_of(e, "_conv_grad_weight", road, sizeof road);
    int algo = -1;
    const char *p = strstr(road, "backward filter algorithm ");
    if (p) algo = atoi(p + 26);
    if (det && (algo < 0 || algo == 0 || algo == 3)) fail_msg("deterministic only, but: %s", road);
    if (!det && algo != 0 && algo != 3) fail_msg("without the rule, a faster non-deterministic one should win: %s", road);
    em_tensor_release(o);
    em_exec_free(e);
    cg_free(&t);
  }
  unsetenv("EMBER_CUDNN_DETERMINISTIC");
}

/* TF32 only when asked: FMA_MATH by default, DEFAULT_MATH (TF32 on 8.0+) with em_exec_set_tf32. */
static void test_tf32_only_when_asked(void **state) {
  (void)state;
  if (!use_doubles("8.0")) skip();
  ts_conv c = conv2d(1, 3, 4, 1, 6, 3, 1, 1, 1);
  for (int ask = 0; ask < 2; ask++) {
    cg t;
    cg_build(&t, &c, 0, em_cuda(0), 6);
    if (ask) assert_int_equal(em_exec_set_tf32(t.e, 1), EM_OK);
    em_tensor *o = cg_run(&t);
    const char *want = ask ? "math=DEFAULT_MATH" : "math=FMA_MATH";
    if (!strstr(ts_dnn_last_call(), want)) fail_msg("%s: %s", ask ? "asked" : "not asked", ts_dnn_last_call());
    em_tensor_release(o);
    cg_free(&t);
  }
}

/* Devices cuDNN does not serve and geometries it cannot take keep Ember's kernels, and say
 * why; an injected failure fails the run naming the call. */
static void test_fallbacks_and_failures(void **state) {
  (void)state;
  if (!use_doubles("7.0=Tesla V100 (double)")) skip();
  ts_conv c = conv2d(1, 2, 3, 1, 6, 3, 1, 1, 1);
  cg t;
  char road[256];
  cg_build(&t, &c, 0, em_cuda(0), 8);
  em_tensor *o = cg_run(&t);
  cg_check(&t, o, "V100 with cuDNN 9.19");
  road_of(t.e, "convolution", road, sizeof road);
  if (!strstr(road, "Ember's kernels: cuDNN 9.19.0 supports compute capability 7.5")) fail_msg("road: %s", road);
  em_tensor_release(o);
  cg_free(&t);

  use_doubles_cache("6.1", "12040", "9.10.2", "12080", 0); /* cuDNN 9.10 still serves Pascal */
  cg_build(&t, &c, 0, em_cuda(0), 8);
  o = cg_run(&t);
  cg_check(&t, o, "P40 with cuDNN 9.10");
  road_of(t.e, "convolution", road, sizeof road);
  if (strncmp(road, "cuDNN", 5)) fail_msg("cuDNN 9.10 on a 6.1 device: %s", road);
  em_tensor_release(o);
  cg_free(&t);

  use_doubles("9.0");
  ts_conv asym = conv2d(1, 2, 3, 1, 6, 2, 1, 1, 0);
  asym.pe[0] = 1; /* one more row of padding at the bottom */
  cg_build(&t, &asym, 0, em_cuda(0), 9);
  o = cg_run(&t);
  cg_check(&t, o, "asymmetric padding on Ember's kernels");
  road_of(t.e, "convolution", road, sizeof road);
  if (!strstr(road, "cuDNN does not take it")) fail_msg("asymmetric padding: %s", road);
  em_tensor_release(o);
  cg_free(&t);

  setenv("FAKECUDNN_FAIL", "cudnnConvolutionForward=5000", 1); /* CUDNN_STATUS_EXECUTION_FAILED (cudnn_graph_v9.h) */
  em_shutdown(); /* Ember's handles go before the double forgets them */
  ts_dnn_reset();
  cg_build(&t, &c, 0, em_cuda(0), 10);
  em_feed f[2] = {{t.x, t.xt}, {t.w, t.wt}};
  if (em_exec_run(t.e, f, 2, &o) == EM_OK) fail_msg("an injected cuDNN failure did not fail the run");
  if (!strstr(em_last_error(), "cudnnConvolutionForward") || !strstr(em_last_error(), "convolution"))
    fail_msg("the message does not name the call and the op: %s", em_last_error());
  cg_free(&t);
  unsetenv("FAKECUDNN_FAIL");
}

/* cuDNN DECLINING a convolution at run time (a NOT_SUPPORTED status from the search or the
 * run, as a real cuDNN gives for a case one release or GPU lacks) is not a failure: the op runs
 * on Ember's kernels, right, its road says which call declined and why, and later runs do not
 * ask cuDNN again (no second search, no second try of the declined call). A status that is
 * not a decline (EXECUTION_FAILED, above) still fails the run. cuDNN 8 numbers its statuses
 * otherwise (NOT_SUPPORTED is 9 there). */
static void test_decline_takes_ember_kernels(void **state) {
  (void)state;
  static const struct {
    const char *version, *fail, *call, *status;
  } rows[] = {
      {"9.19.0", "cudnnFindConvolutionForwardAlgorithmEx=3000", "cudnnFindConvolutionForwardAlgorithmEx",
       "CUDNN_STATUS_NOT_SUPPORTED"},
      {"9.19.0", "cudnnConvolutionForward=3002", "cudnnConvolutionForward", "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"},
      {"8.9.7", "cudnnFindConvolutionForwardAlgorithmEx=9", "cudnnFindConvolutionForwardAlgorithmEx",
       "CUDNN_STATUS_NOT_SUPPORTED"},
  };
  const ts_conv c = conv2d(2, 3, 4, 1, 7, 3, 1, 1, 1);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (!use_doubles_cache("9.0", "13000", rows[i].version, "12080", 0)) skip();
    setenv("FAKECUDNN_FAIL", rows[i].fail, 1);
    ts_dnn_reset();
    cg t;
    cg_build(&t, &c, 1, em_cuda(0), 30 + i);
    for (int run = 0; run < 3; run++) {
      em_tensor *o = cg_run(&t);
      char what[160];
      snprintf(what, sizeof what, "%s, run %d: on Ember's kernels", rows[i].fail, run);
      cg_check(&t, o, what);
      em_tensor_release(o);
    }
    char road[512];
    road_of(t.e, "convolution", road, sizeof road);
    if (!strstr(road, "Ember's kernels: ") || !strstr(road, rows[i].call) || !strstr(road, "declined") ||
        !strstr(road, rows[i].status))
      fail_msg("%s: the road does not say which call declined and why: %s", rows[i].fail, road);
    const unsigned long tries = ts_dnn_calls(rows[i].call);
    if (tries != 1) fail_msg("%s: cuDNN was asked %lu times in 3 runs; a decline is remembered", rows[i].fail, tries);
    cg_free(&t);
    unsetenv("FAKECUDNN_FAIL");
  }
}

/* A cuDNN that cannot be loaded: convolutions run on Ember's kernels, right, and every report
 * says why. */
static void test_missing_library(void **state) {
  (void)state;
  const char *cuda = getenv("FAKECUDA_LIB");
  if (!cuda || !*cuda) {
    fprintf(stderr, "skipped: FAKECUDA_LIB (the libcuda double) is not set\n");
    skip();
  }
  setenv("EMBER_LIBCUDA", cuda, 1);
  setenv("FAKECUDA_DEVICES", "9.0", 1);
  setenv("FAKECUDA_DRIVER", "13000", 1);
  setenv("EMBER_LIBCUDNN", "/nonexistent/libcudnn.so.9", 1);
  unsetenv("EMBER_CUDNN");
  em_shutdown();
  int used = 1;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cudnn", &used, why, sizeof why), EM_OK);
  if (used || !strstr(why, "/nonexistent/libcudnn.so.9") || !strstr(why, "cannot be loaded"))
    fail_msg("em_device_library_use: used %d, %s", used, why);

  /* y [1, 1, 3, 3] = 2x2 convolution of x [1, 1, 4, 4] = 0..15 with w = [[1, 2], [3, 4]]. */
  const int64_t xs[4] = {1, 1, 4, 4}, ws[4] = {1, 1, 2, 2}, one[2] = {1, 1};
  double xv[16], wv[4] = {1, 2, 3, 4}, want[9];
  for (int i = 0; i < 16; i++) xv[i] = i;
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++)
      want[r * 3 + c] = xv[r * 4 + c] + 2 * xv[r * 4 + c + 1] + 3 * xv[(r + 1) * 4 + c] + 4 * xv[(r + 1) * 4 + c + 1];
  em_graph *g;
  em_var x, w, y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 4, xs, &x), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F32, 4, ws, &w), EM_OK);
  em_var in[2] = {x, w};
  em_attr at[1] = {AIS("strides", one, 2)};
  if (em_apply(g, "convolution", in, 2, at, 1, &y, 1)) fail_msg("convolution: %s", em_last_error());
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_tensor(EM_F32, 4, xs, xv), *wt = ot_tensor(EM_F32, 4, ws, wv), *o = NULL;
  em_feed f[2] = {{x, xt}, {w, wt}};
  if (em_exec_run(e, f, 2, &o)) fail_msg("run: %s", em_last_error());
  ot_expect_values(o, want, 9, 0, "conv on Ember's kernels");
  char plan[2048];
  em_exec_describe(e, plan, sizeof plan);
  if (!strstr(plan, "[Ember's kernels: EMBER_LIBCUDNN=/nonexistent/libcudnn.so.9 cannot be loaded"))
    fail_msg("em_exec_describe does not say why the convolution did not use cuDNN:\n%s", plan);
  em_tensor_release(o), em_tensor_release(xt), em_tensor_release(wt);
  em_exec_free(e);
  em_graph_free(g);
  unsetenv("EMBER_LIBCUDNN");
  em_shutdown();
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* The cache directories the tests made (ember_test_<pid>_cudnn_cache_<n>). */
static int remove_caches(void **state) {
  (void)state;
  char base[512];
  ot_tmp_path(base, sizeof base, "cudnn_cache_");
  for (int i = 1; i < 64; i++) {
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
      cmocka_unit_test(test_support_rule),
      cmocka_unit_test(test_version_numbers),
      cmocka_unit_test(test_geometries_cudnn_takes),
      cmocka_unit_test(test_convolutions_through_cudnn),
      cmocka_unit_test(test_gradients_through_cudnn),
      cmocka_unit_test(test_search_remembered),
      cmocka_unit_test(test_search_remembered_in_memory),
      cmocka_unit_test(test_workspace_limit),
      cmocka_unit_test(test_deterministic_only),
      cmocka_unit_test(test_tf32_only_when_asked),
      cmocka_unit_test(test_fallbacks_and_failures),
      cmocka_unit_test(test_decline_takes_ember_kernels),
      cmocka_unit_test(test_missing_library),
  };
  return cmocka_run_group_tests(tests, NULL, remove_caches);
}
