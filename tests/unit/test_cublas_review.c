/* A review of the fast mode's cuBLAS glue (runtime/cublas.c, ops/linalg_gpu.c) on the
 * libcuda double with the cuBLAS double (tests/fakecublas): matmul with every transpose and
 * batch-broadcast pattern and gemm with every c shape against float64 loops written here;
 * gradients summed over broadcast batch axes, zero-size products, integer products and
 * recurrent training steps against the CPU executor; the road em_exec_describe reports
 * against what was called; two executors on two threads; EMBER_TF32; em_shutdown and
 * restart (handles destroyed, made again); injected cuBLAS failures; portable mode; a device
 * cuBLAS does not support beside one it does. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas.h"
#include "fakecublas/fakecublas.h"
#include "op_testkit.h"

#define CHECK(call)                                                                                                    \
  do {                                                                                                                 \
    em_status s_ = (call);                                                                                             \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                                                                \
  } while (0)

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }

/* ------------------------------------------------------- the doubles --- */

static fakecublas_call_count_fn calls_of;
static fakecublas_text_fn last_gemm, last_error;
static fakecublas_reset_fn blas_reset;
static fakecublas_live_handles_fn live_handles;

static int doubles_missing(void) {
  const char *cuda = getenv("FAKECUDA_LIB"), *blas = getenv("FAKECUBLAS_LIB");
  if (!cuda || !*cuda || !blas || !*blas) {
    fprintf(stderr, "skipped: FAKECUDA_LIB and FAKECUBLAS_LIB (the doubles) are not set\n");
    return 1;
  }
  if (!calls_of) {
    void *h = dlopen(blas, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("cannot load FAKECUBLAS_LIB=%s: %s", blas, dlerror());
    calls_of = (fakecublas_call_count_fn)dlsym(h, "fakecublas_call_count");
    last_gemm = (fakecublas_text_fn)dlsym(h, "fakecublas_last_gemm");
    last_error = (fakecublas_text_fn)dlsym(h, "fakecublas_last_error");
    blas_reset = (fakecublas_reset_fn)dlsym(h, "fakecublas_reset");
    live_handles = (fakecublas_live_handles_fn)dlsym(h, "fakecublas_live_handles");
    if (!calls_of || !last_gemm || !last_error || !blas_reset || !live_handles)
      fail_msg("%s lacks its test hooks", blas);
  }
  return 0;
}

/* Devices, driver and cuBLAS release of the doubles; the runtime restarted. 0: skip. */
static int use_doubles(const char *devices, const char *driver, const char *blas_version) {
  if (doubles_missing()) return 0;
  setenv("EMBER_LIBCUDA", getenv("FAKECUDA_LIB"), 1);
  setenv("FAKECUDA_DEVICES", devices, 1);
  setenv("FAKECUDA_DRIVER", driver, 1);
  setenv("EMBER_LIBCUBLAS", getenv("FAKECUBLAS_LIB"), 1);
  setenv("FAKECUBLAS_VERSION", blas_version, 1);
  setenv("EMBER_CUDNN", "0", 1);
  unsetenv("EMBER_CUBLAS");
  unsetenv("FAKECUBLAS_FAIL");
  unsetenv("EMBER_TF32");
  unsetenv("EMBER_MODE");
  em_shutdown();
  blas_reset();
  int n = 0;
  if (em_cuda_device_count(&n) || n < 1) fail_msg("the libcuda double shows no device: %s", em_last_error());
  return n;
}

static unsigned long gemm_calls(void) {
  return calls_of("cublasGemmEx") + calls_of("cublasGemmStridedBatchedEx") + calls_of("cublasSgemm_v2") +
         calls_of("cublasDgemm_v2") + calls_of("cublasSgemmStridedBatched") + calls_of("cublasDgemmStridedBatched") +
         /* matvecs (m or n 1) go to gemv */
         calls_of("cublasSgemv_v2") + calls_of("cublasDgemv_v2") + calls_of("cublasSgemvStridedBatched") +
         calls_of("cublasDgemvStridedBatched");
}

/* ---------------------------------------------------------- networks --- */

/* A graph with up to 6 inputs (fed from `feed`) and up to 8 outputs. */
typedef struct net {
  em_graph *g;
  em_var in[6];
  em_tensor *feed[6];
  int n_in;
  em_var out[8];
  int n_out;
} net;

static em_var net_input(net *n, const char *name, em_tensor *value) {
  em_var v;
  CHECK(em_input(n->g, name, em_tensor_dtype(value), em_tensor_ndim(value), em_tensor_shape(value), &v));
  n->in[n->n_in] = v;
  n->feed[n->n_in++] = value;
  return v;
}

static em_var ap(net *n, const char *op, const em_var *in, int n_in, const em_attr *at, int n_at) {
  em_var o;
  if (em_apply(n->g, op, in, n_in, at, n_at, &o, 1)) fail_msg("%s: %s", op, em_last_error());
  return o;
}

static void net_free(net *n) {
  for (int i = 0; i < n->n_in; i++) em_tensor_release(n->feed[i]);
  em_graph_free(n->g);
}

typedef struct ran {
  em_tensor *out[8];
  char plan[8192];
  unsigned long blas_calls;   /* cuBLAS products called by the run */
} ran;

/* Runs n once on dev (portable or fast, tf32 as asked) and keeps the plan's text. */
static void net_run(const net *n, em_device dev, int portable, int tf32, ran *r) {
  memset(r, 0, sizeof *r);
  em_exec *e;
  if (em_exec_create(n->g, n->out, n->n_out, dev, &e)) fail_msg("exec: %s", em_last_error());
  if (portable) CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  if (tf32) CHECK(em_exec_set_tf32(e, 1));
  em_feed f[6];
  for (int i = 0; i < n->n_in; i++) f[i] = (em_feed){n->in[i], n->feed[i]};
  unsigned long before = gemm_calls();
  if (em_exec_run(e, f, n->n_in, r->out)) fail_msg("run on %s: %s", dev.kind == EM_DEVICE_CPU ? "cpu" : "cuda",
                                                 em_last_error());
  r->blas_calls = gemm_calls() - before;
  em_exec_describe(e, r->plan, sizeof r->plan);
  em_exec_free(e);
}

static void ran_free(ran *r, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(r->out[i]);
}

/* got and want (tensors) equal within tol (relative to max(1, |want|)); bits when tol < 0. */
static void expect_same(const em_tensor *got, const em_tensor *want, double tol, const char *what) {
  int64_t n, m;
  if (em_tensor_ndim(got) != em_tensor_ndim(want) ||
      memcmp(em_tensor_shape(got), em_tensor_shape(want), sizeof(int64_t) * (size_t)em_tensor_ndim(got)))
    fail_msg("%s: shapes differ", what);
  double *a = ot_values(got, &n), *b = ot_values(want, &m);
  assert_int_equal(n, m);
  for (int64_t i = 0; i < n; i++) {
    int bad = tol < 0 ? memcmp(&a[i], &b[i], sizeof(double)) != 0
                      : !(fabs(a[i] - b[i]) <= tol * fmax(1.0, fabs(b[i])) || (isnan(a[i]) && isnan(b[i])));
    if (bad) fail_msg("%s: element %lld is %.17g, want %.17g", what, (long long)i, a[i], b[i]);
  }
  free(a), free(b);
}

/* --------------------------------------------------- float64 matmul --- */

/* numpy matmul in double, with transposes: x stored [bx..., r, c] (1-D: [1, k]), op(x) = x or
 * its last two axes swapped; the same for y (1-D: [k, 1]). */
static double *ref_matmul(const em_tensor *xt, int ta, const em_tensor *yt, int tb, int64_t *count) {
  int64_t nx, ny;
  double *x = ot_values(xt, &nx), *y = ot_values(yt, &ny);
  int xnd = em_tensor_ndim(xt), ynd = em_tensor_ndim(yt);
  const int64_t *xs = em_tensor_shape(xt), *ys = em_tensor_shape(yt);
  int64_t xr = xnd == 1 ? 1 : xs[xnd - 2], xc = xs[xnd - 1];
  int64_t yr = ynd == 1 ? ys[0] : ys[ynd - 2], yc = ynd == 1 ? 1 : ys[ynd - 1];
  int64_t m = ta ? xc : xr, k = ta ? xr : xc, n = tb ? yr : yc;
  assert_int_equal(k, tb ? yc : yr);
  int xb = xnd > 2 ? xnd - 2 : 0, yb = ynd > 2 ? ynd - 2 : 0, bnd = xb > yb ? xb : yb;
  int64_t bd[8], nb = 1;
  for (int i = 0; i < bnd; i++) {
    int xi = i - (bnd - xb), yi = i - (bnd - yb);
    int64_t dx = xi >= 0 ? xs[xi] : 1, dy = yi >= 0 ? ys[yi] : 1;
    bd[i] = dx == 1 ? dy : dx;
    nb *= bd[i];
  }
  double *out = calloc((size_t)(nb * m * n + 1), sizeof *out);
  for (int64_t b = 0; b < nb; b++) {
    int64_t bx = 0, by = 0, rem = b, sx = 1, sy = 1;
    for (int i = bnd - 1; i >= 0; i--) {
      int64_t q = rem % bd[i];
      rem /= bd[i];
      int xi = i - (bnd - xb), yi = i - (bnd - yb);
      if (xi >= 0) bx += (xs[xi] == 1 ? 0 : q) * sx, sx *= xs[xi];
      if (yi >= 0) by += (ys[yi] == 1 ? 0 : q) * sy, sy *= ys[yi];
    }
    const double *X = x + bx * xr * xc, *Y = y + by * yr * yc;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t t = 0; t < k; t++) acc += (ta ? X[t * xc + i] : X[i * xc + t]) * (tb ? Y[j * yc + t] : Y[t * yc + j]);
        out[(b * m + i) * n + j] = acc;
      }
  }
  free(x), free(y);
  *count = nb * m * n;
  return out;
}

/* ------------------------------------------- matmul, every pattern --- */

typedef struct mm_case {
  int xnd;
  int64_t xs[5];
  int ynd;
  int64_t ys[5];
  int ta, tb;
} mm_case;

/* The shapes as stored: transposes swap the last two axes of each operand. */
static const mm_case mm_cases[] = {
    {2, {5, 7}, 2, {7, 4}, 0, 0},             {2, {7, 5}, 2, {7, 4}, 1, 0},
    {2, {5, 7}, 2, {4, 7}, 0, 1},             {2, {7, 5}, 2, {4, 7}, 1, 1},
    {5, {2, 1, 3, 5, 7}, 4, {4, 1, 7, 6}, 0, 0}, {5, {2, 1, 3, 7, 5}, 4, {4, 1, 6, 7}, 1, 1},
    {5, {2, 1, 3, 7, 5}, 4, {4, 1, 7, 6}, 1, 0}, {5, {2, 1, 3, 5, 7}, 4, {4, 1, 6, 7}, 0, 1},
    {4, {2, 1, 5, 7}, 4, {1, 3, 7, 4}, 0, 0}, {4, {2, 1, 7, 5}, 4, {1, 3, 4, 7}, 1, 1},
    {3, {3, 5, 7}, 1, {7}, 0, 0},             {3, {3, 7, 5}, 1, {7}, 1, 0},
    {1, {7}, 3, {3, 7, 4}, 0, 0},             {1, {7}, 3, {3, 4, 7}, 0, 1},
    {1, {7}, 1, {7}, 0, 0},                   {2, {5, 7}, 4, {2, 3, 7, 4}, 0, 0},
    {2, {7, 5}, 4, {2, 3, 4, 7}, 1, 1},       {4, {2, 3, 5, 7}, 2, {7, 4}, 0, 0},
    {4, {2, 3, 7, 5}, 2, {4, 7}, 1, 1},       {4, {2, 3, 5, 7}, 2, {4, 7}, 0, 1},
    {3, {1, 5, 7}, 3, {3, 7, 4}, 0, 0},       {3, {3, 5, 7}, 3, {1, 4, 7}, 0, 1},
    {4, {3, 1, 1, 7}, 3, {2, 7, 1}, 0, 0},    {3, {2, 33, 65}, 3, {2, 17, 65}, 0, 1},
    /* adjacent batch axes that one operand steps over as one axis and the other does not */
    {4, {2, 3, 5, 7}, 4, {2, 1, 7, 4}, 0, 0}, {4, {2, 1, 7, 5}, 4, {2, 3, 4, 7}, 1, 1},
    {5, {2, 3, 4, 5, 7}, 5, {2, 3, 1, 7, 4}, 0, 0},
};

static void mm_net(net *n, em_dtype dt, const mm_case *c, uint64_t seed, em_var *x, em_var *y) {
  memset(n, 0, sizeof *n);
  CHECK(em_graph_create(&n->g));
  *x = net_input(n, "x", ot_rand(dt, c->xnd, c->xs, seed, -1, 1));
  *y = net_input(n, "y", ot_rand(dt, c->ynd, c->ys, seed + 1, -1, 1));
  em_var in[2] = {*x, *y};
  em_attr at[2] = {AI("transpose_a", c->ta), AI("transpose_b", c->tb)};
  n->out[n->n_out++] = ap(n, "matmul", in, 2, at, 2);
}

static void test_matmul_transposes_broadcasts(void **state) {
  (void)state;
  if (!use_doubles("9.0=NVIDIA H100 (double)", "13000", "13.1.0")) skip();
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t s = 0; s < sizeof mm_cases / sizeof mm_cases[0]; s++) {
      const mm_case *c = &mm_cases[s];
      net n;
      em_var x, y;
      mm_net(&n, f64 ? EM_F64 : EM_F32, c, 100 + s, &x, &y);
      ran r;
      net_run(&n, em_cuda(0), 0, 0, &r);
      char what[96];
      snprintf(what, sizeof what, "matmul case %zu (ta %d tb %d) %s", s, c->ta, c->tb, f64 ? "f64" : "f32");
      int64_t cnt;
      double *want = ref_matmul(n.feed[0], c->ta, n.feed[1], c->tb, &cnt);
      ot_expect_values(r.out[0], want, cnt, f64 ? 1e-12 : 2e-6, what);
      free(want);
      if (!r.blas_calls) fail_msg("%s: cuBLAS was not called\n%s", what, r.plan);
      if (!strstr(r.plan, "[cuBLAS 13.1.0]") && !strstr(r.plan, "[cuBLAS 13.1.0 gemv]")) fail_msg("%s: the plan does not say cuBLAS:\n%s", what, r.plan);
      if (strstr(last_gemm(), "tf32")) fail_msg("%s: TF32 unasked: %s", what, last_gemm());
      if (!strstr(last_gemm(), f64 ? "precision=fp64" : "precision=fp32")) fail_msg("%s: %s", what, last_gemm());
      ran_free(&r, 1);
      net_free(&n);
    }
}

/* ------------------------------ gradients over broadcast batch axes --- */

/* loss = sum(matmul(x, y) * w): d/dx and d/dy sum the products of every batch member that
 * read a broadcast operand (the later ones added to C with beta 1). */
static void grad_net(net *n, em_dtype dt, const mm_case *c, uint64_t seed) {
  em_var x, y;
  mm_net(n, dt, c, seed, &x, &y);
  em_var prod = n->out[0];
  em_dtype pdt;
  int pnd;
  int64_t pdims[EM_MAX_DIMS];
  CHECK(em_var_info(n->g, prod, &pdt, &pnd, pdims));
  em_var w = net_input(n, "w", ot_rand(dt, pnd, pdims, seed + 7, -1, 1));
  em_var mw[2] = {prod, w};
  em_var m = ap(n, "mul", mw, 2, NULL, 0);
  em_var loss = ap(n, "reduce_sum", &m, 1, NULL, 0);
  em_var xs[2] = {x, y}, gr[2];
  CHECK(em_gradients(n->g, loss, xs, 2, gr));
  n->out[n->n_out++] = gr[0];
  n->out[n->n_out++] = gr[1];
}

static void test_grad_broadcast_sums(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t s = 0; s < sizeof mm_cases / sizeof mm_cases[0]; s++) {
      net n;
      grad_net(&n, f64 ? EM_F64 : EM_F32, &mm_cases[s], 300 + s);
      ran gpu, cpu;
      net_run(&n, em_cuda(0), 0, 0, &gpu);
      net_run(&n, em_cpu(), 0, 0, &cpu);
      for (int o = 0; o < 3; o++) {
        char what[96];
        snprintf(what, sizeof what, "grad case %zu %s: %s", s, f64 ? "f64" : "f32", o == 0 ? "y" : o == 1 ? "dx" : "dy");
        expect_same(gpu.out[o], cpu.out[o], f64 ? 1e-12 : 1e-5, what);
      }
      if (!gpu.blas_calls || !strstr(gpu.plan, "_matmul_grad") || strstr(gpu.plan, "[Ember's kernels"))
        fail_msg("grad case %zu: not through cuBLAS:\n%s", s, gpu.plan);
      ran_free(&gpu, 3), ran_free(&cpu, 3);
      net_free(&n);
    }
}

/* ------------------------------------------------- gemm, every c --- */

static void test_gemm_every_c(void **state) {
  (void)state;
  if (!use_doubles("8.0", "13000", "13.1.0")) skip();
  const int64_t M = 6, K = 9, N = 5;
  const struct { int nd; int64_t d[2]; } cshapes[] = {{-1, {0}}, {0, {0}}, {1, {N}}, {1, {1}}, {2, {M, 1}},
                                                     {2, {1, 1}}, {2, {M, N}}, {2, {1, N}}};
  const double ab[][2] = {{1, 1}, {0.5, 2}, {-1.5, 0}, {0, 3}, {2, -1}};
  int cases = 0;
  for (int f64 = 0; f64 < 2; f64++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (size_t ci = 0; ci < sizeof cshapes / sizeof cshapes[0]; ci++)
          for (size_t s = 0; s < sizeof ab / sizeof ab[0]; s++) {
            em_dtype dt = f64 ? EM_F64 : EM_F32;
            net n = {0};
            CHECK(em_graph_create(&n.g));
            int64_t as[2] = {ta ? K : M, ta ? M : K}, bs[2] = {tb ? N : K, tb ? K : N};
            uint64_t seed = 1000 + (uint64_t)cases;
            em_var in[3];
            in[0] = net_input(&n, "a", ot_rand(dt, 2, as, seed, -1, 1));
            in[1] = net_input(&n, "b", ot_rand(dt, 2, bs, seed + 1, -1, 1));
            int has_c = cshapes[ci].nd >= 0;
            if (has_c) {
              em_tensor *ct = ot_rand(dt, cshapes[ci].nd, cshapes[ci].d, seed + 2, -1, 1);
              if (ab[s][1] == 0) { /* beta 0 ignores c's values, NaN included */
                int64_t cn = em_tensor_numel(ct);
                double *nan = malloc(sizeof(double) * (size_t)(cn + 1));
                for (int64_t i = 0; i < cn; i++) nan[i] = NAN;
                em_tensor_release(ct);
                ct = ot_tensor(dt, cshapes[ci].nd, cshapes[ci].d, nan);
                free(nan);
              }
              in[2] = net_input(&n, "c", ct);
            }
            em_attr at[4] = {AF("alpha", ab[s][0]), AF("beta", ab[s][1]), AI("transA", ta), AI("transB", tb)};
            n.out[n.n_out++] = ap(&n, "gemm", in, has_c ? 3 : 2, at, 4);
            ran gpu, cpu;
            net_run(&n, em_cuda(0), 0, 0, &gpu);
            net_run(&n, em_cpu(), 0, 0, &cpu);
            /* float64 reference */
            double *a = ot_values(n.feed[0], NULL), *b = ot_values(n.feed[1], NULL);
            double *cv = has_c ? ot_values(n.feed[2], NULL) : NULL, want[6 * 5];
            int64_t rows = has_c && cshapes[ci].nd == 2 ? cshapes[ci].d[0] : 1;
            int64_t cols = has_c && cshapes[ci].nd >= 1 ? cshapes[ci].d[cshapes[ci].nd - 1] : 1;
            for (int64_t i = 0; i < M; i++)
              for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t t = 0; t < K; t++)
                  acc += (ta ? a[t * M + i] : a[i * K + t]) * (tb ? b[j * K + t] : b[t * N + j]);
                double cc = has_c && ab[s][1] != 0 ? ab[s][1] * cv[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)] : 0;
                want[i * N + j] = ab[s][0] * acc + cc;
              }
            char what[128];
            snprintf(what, sizeof what, "gemm %s transA %d transB %d c#%zu alpha %g beta %g", f64 ? "f64" : "f32", ta,
                     tb, ci, ab[s][0], ab[s][1]);
            ot_expect_values(gpu.out[0], want, M * N, f64 ? 1e-12 : 2e-6, what);
            expect_same(gpu.out[0], cpu.out[0], f64 ? 1e-12 : 2e-6, what);
            /* a bias row with beta 1 goes to cuBLASLt's BIAS epilogue (test_cublaslt counts those calls) */
            if (!gpu.blas_calls && !strstr(gpu.plan, "[cuBLASLt 13.1.0, epilogue BIAS]"))
              fail_msg("%s: cuBLAS not called\n%s", what, gpu.plan);
            free(a), free(b), free(cv);
            ran_free(&gpu, 1), ran_free(&cpu, 1);
            net_free(&n);
            cases++;
          }
}

/* ---------------------------------------------------- zero sizes --- */

/* Where the plan says cuBLAS, cuBLAS was called; where it says Ember's kernels, it was not. */
static void expect_road_true(const ran *r, const char *what) {
  int says_blas = strstr(r->plan, "[cuBLAS") != NULL;
  if (says_blas && !r->blas_calls)
    fail_msg("%s: the plan says cuBLAS but no cuBLAS product was called:\n%s", what, r->plan);
  if (!says_blas && r->blas_calls) fail_msg("%s: cuBLAS was called, the plan does not say so:\n%s", what, r->plan);
}

static void test_zero_sizes(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  /* k = 0 (each transpose), m = 0, n = 0, a batch of 0, a broadcast batch of 0. */
  static const mm_case z[] = {
      {2, {5, 0}, 2, {0, 4}, 0, 0}, {2, {0, 5}, 2, {0, 4}, 1, 0}, {2, {5, 0}, 2, {4, 0}, 0, 1},
      {2, {0, 5}, 2, {4, 0}, 1, 1}, {3, {3, 5, 0}, 2, {0, 4}, 0, 0}, {3, {3, 5, 0}, 3, {1, 0, 4}, 0, 0},
      {2, {0, 7}, 2, {7, 4}, 0, 0}, {2, {5, 7}, 2, {7, 0}, 0, 0},   {3, {0, 5, 7}, 2, {7, 4}, 0, 0},
      {3, {0, 5, 7}, 3, {1, 7, 4}, 0, 0}, {4, {2, 0, 5, 7}, 3, {1, 7, 4}, 0, 0},
  };
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t s = 0; s < sizeof z / sizeof z[0]; s++) {
      net n;
      grad_net(&n, f64 ? EM_F64 : EM_F32, &z[s], 500 + s);
      ran gpu, cpu;
      net_run(&n, em_cuda(0), 0, 0, &gpu);
      net_run(&n, em_cpu(), 0, 0, &cpu);
      char what[96];
      for (int o = 0; o < 3; o++) {
        snprintf(what, sizeof what, "zero-size case %zu %s output %d", s, f64 ? "f64" : "f32", o);
        expect_same(gpu.out[o], cpu.out[o], -1, what); /* zeros: bits */
      }
      snprintf(what, sizeof what, "zero-size case %zu %s", s, f64 ? "f64" : "f32");
      ran_free(&gpu, 3), ran_free(&cpu, 3);
      net_free(&n);
      /* the forward product alone: the road it reports is the one it took */
      em_var x, y;
      mm_net(&n, f64 ? EM_F64 : EM_F32, &z[s], 600 + s, &x, &y);
      net_run(&n, em_cuda(0), 0, 0, &gpu);
      net_run(&n, em_cpu(), 0, 0, &cpu);
      expect_same(gpu.out[0], cpu.out[0], -1, what);
      int64_t m = z[s].ta ? z[s].xs[z[s].xnd - 1] : z[s].xs[z[s].xnd - 2];
      int64_t nn = z[s].tb ? z[s].ys[z[s].ynd - 2] : z[s].ys[z[s].ynd - 1];
      if (m > 0 && nn > 0 && em_tensor_numel(gpu.out[0]) > 0) expect_road_true(&gpu, what);
      ran_free(&gpu, 1), ran_free(&cpu, 1);
      net_free(&n);
    }
  /* gemm with k = 0: beta * c, or zeros without c */
  for (int has_c = 0; has_c < 2; has_c++)
    for (int ta = 0; ta < 2; ta++) {
      net n = {0};
      CHECK(em_graph_create(&n.g));
      int64_t as[2] = {ta ? 0 : 3, ta ? 3 : 0}, bs[2] = {0, 4}, cs[1] = {4};
      em_var in[3];
      in[0] = net_input(&n, "a", ot_rand(EM_F32, 2, as, 1, -1, 1));
      in[1] = net_input(&n, "b", ot_rand(EM_F32, 2, bs, 2, -1, 1));
      if (has_c) in[2] = net_input(&n, "c", ot_rand(EM_F32, 1, cs, 3, -1, 1));
      em_attr at[3] = {AF("alpha", 2.0), AF("beta", 0.5), AI("transA", ta)};
      n.out[n.n_out++] = ap(&n, "gemm", in, 2 + has_c, at, 3);
      ran gpu, cpu;
      net_run(&n, em_cuda(0), 0, 0, &gpu);
      net_run(&n, em_cpu(), 0, 0, &cpu);
      char what[64];
      snprintf(what, sizeof what, "gemm k = 0, c %d, transA %d", has_c, ta);
      expect_same(gpu.out[0], cpu.out[0], -1, what);
      double want[12];
      double *cv = has_c ? ot_values(n.feed[2], NULL) : NULL;
      for (int i = 0; i < 12; i++) want[i] = has_c ? (double)(float)(0.5 * cv[i % 4]) : 0.0;
      ot_expect_values(gpu.out[0], want, 12, 1e-7, what);
      expect_road_true(&gpu, what);
      free(cv);
      ran_free(&gpu, 1), ran_free(&cpu, 1);
      net_free(&n);
    }
}

/* ---------------------------------------------- integer products --- */

static void test_integer_matmul_stays_on_kernels(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  static const mm_case c[] = {{3, {2, 5, 7}, 2, {7, 4}, 0, 0}, {4, {2, 1, 7, 5}, 3, {3, 4, 7}, 1, 1}};
  for (int i64 = 0; i64 < 2; i64++)
    for (size_t s = 0; s < 2; s++) {
      em_dtype dt = i64 ? EM_I64 : EM_I32;
      net n;
      em_var x, y;
      memset(&n, 0, sizeof n);
      CHECK(em_graph_create(&n.g));
      x = net_input(&n, "x", ot_rand(dt, c[s].xnd, c[s].xs, 40 + s, -1000, 1000));
      y = net_input(&n, "y", ot_rand(dt, c[s].ynd, c[s].ys, 50 + s, -1000, 1000));
      em_var in[2] = {x, y};
      em_attr at[2] = {AI("transpose_a", c[s].ta), AI("transpose_b", c[s].tb)};
      n.out[n.n_out++] = ap(&n, "matmul", in, 2, at, 2);
      ran gpu;
      net_run(&n, em_cuda(0), 0, 0, &gpu);
      int64_t cnt;
      double *want = ref_matmul(n.feed[0], c[s].ta, n.feed[1], c[s].tb, &cnt);
      char what[64];
      snprintf(what, sizeof what, "%s matmul case %zu", i64 ? "i64" : "i32", s);
      ot_expect_values(gpu.out[0], want, cnt, 0, what);
      free(want);
      if (gpu.blas_calls) fail_msg("%s: an integer product went to cuBLAS", what);
      if (!strstr(gpu.plan, "[Ember's kernels: cuBLAS is used for f32 and f64 products"))
        fail_msg("%s: the plan does not say why not cuBLAS:\n%s", what, gpu.plan);
      ran_free(&gpu, 1);
      net_free(&n);
    }
}

/* ------------------------------------------- recurrent training --- */

/* A recurrent layer (LSTM fused, GRU and RNN unrolled, LSTM unrolled by clip) with a loss
 * of Y and Y_h, its gradients to x and the weights; returns the outputs. */
static void rnn_net(net *n, int kind, int dir) {
  memset(n, 0, sizeof *n);
  CHECK(em_graph_create(&n->g));
  const int64_t T = 3, N = 4, I = 5, H = 6, xs[3] = {T, N, I};
  uint64_t st = 77;
  double xv[3 * 4 * 5];
  for (int i = 0; i < 60; i++) xv[i] = ot_uniform(&st, -1, 1);
  em_var x = net_input(n, "x", ot_tensor(EM_F32, 3, xs, xv));
  em_layers L = {.graph = n->g, .seed = 9};
  em_recurrent_layer_opts lo = {.rnn = {.direction = dir, .clip = kind == 3 ? 1e30 : 0}};
  em_recurrent_outputs ro;
  const char *name = kind == 1 ? "gru" : kind == 2 ? "rnn" : "lstm";
  if (kind == 1) CHECK(em_gru(&L, name, x, H, &lo, &ro));
  else if (kind == 2) CHECK(em_rnn(&L, name, x, H, &lo, &ro));
  else CHECK(em_lstm(&L, name, x, H, &lo, &ro));
  char pn[32];
  em_var W, R, B;
  snprintf(pn, sizeof pn, "%s.W", name);
  CHECK(em_graph_lookup(n->g, pn, &W));
  snprintf(pn, sizeof pn, "%s.R", name);
  CHECK(em_graph_lookup(n->g, pn, &R));
  snprintf(pn, sizeof pn, "%s.B", name);
  CHECK(em_graph_lookup(n->g, pn, &B));
  em_var sy = ap(n, "sin", &ro.y, 1, NULL, 0);
  em_var yy[2] = {ro.y, sy};
  em_var t1 = ap(n, "mul", yy, 2, NULL, 0);
  t1 = ap(n, "reduce_sum", &t1, 1, NULL, 0);
  em_var t2 = ap(n, "reduce_sum", &ro.y_h, 1, NULL, 0);
  em_var tt[2] = {t1, t2};
  em_var loss = ap(n, "add", tt, 2, NULL, 0);
  em_var wrt[4] = {x, W, R, B}, gr[4];
  CHECK(em_gradients(n->g, loss, wrt, 4, gr));
  n->out[n->n_out++] = ro.y;
  n->out[n->n_out++] = ro.y_h;
  for (int i = 0; i < 4; i++) n->out[n->n_out++] = gr[i];
}

static void test_recurrent_training_step(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  static const char *const kinds[] = {"LSTM (fused)", "GRU", "RNN", "LSTM (unrolled)"};
  for (int kind = 0; kind < 4; kind++)
    for (int dir = 0; dir < 3; dir += 2) {
      net n;
      rnn_net(&n, kind, dir);
      ran gpu, cpu, port, cport;
      net_run(&n, em_cuda(0), 0, 0, &gpu);
      net_run(&n, em_cpu(), 0, 0, &cpu);
      for (int o = 0; o < n.n_out; o++) {
        char what[96];
        snprintf(what, sizeof what, "%s direction %d output %d", kinds[kind], dir, o);
        expect_same(gpu.out[o], cpu.out[o], 2e-5, what);
      }
      if (!gpu.blas_calls) fail_msg("%s: no cuBLAS product:\n%s", kinds[kind], gpu.plan);
      if (kind == 0 && !strstr(gpu.plan, "_lstm_seq_grad")) fail_msg("the LSTM is not fused:\n%s", gpu.plan);
      /* portable: no cuBLAS, the CPU's portable bits */
      net_run(&n, em_cuda(0), 1, 0, &port);
      net_run(&n, em_cpu(), 1, 0, &cport);
      if (port.blas_calls) fail_msg("%s: portable mode called cuBLAS", kinds[kind]);
      for (int o = 0; o < n.n_out; o++) {
        char what[96];
        snprintf(what, sizeof what, "portable %s direction %d output %d", kinds[kind], dir, o);
        expect_same(port.out[o], cport.out[o], -1, what);
      }
      ran_free(&gpu, n.n_out), ran_free(&cpu, n.n_out), ran_free(&port, n.n_out), ran_free(&cport, n.n_out);
      net_free(&n);
    }
}

/* --------------------------------------------- portable mode, bits --- */

static void test_portable_bits_no_cublas(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  for (size_t s = 0; s < sizeof mm_cases / sizeof mm_cases[0]; s += 3) {
    net n;
    grad_net(&n, EM_F32, &mm_cases[s], 700 + s);
    ran gpu, cpu;
    net_run(&n, em_cuda(0), 1, 1, &gpu); /* TF32 asked: portable ignores it */
    net_run(&n, em_cpu(), 1, 0, &cpu);
    if (gpu.blas_calls) fail_msg("portable case %zu called cuBLAS", s);
    for (int o = 0; o < 3; o++) {
      char what[64];
      snprintf(what, sizeof what, "portable case %zu output %d", s, o);
      expect_same(gpu.out[o], cpu.out[o], -1, what);
    }
    if (strstr(gpu.plan, "cuBLAS")) fail_msg("portable mode's plan names cuBLAS:\n%s", gpu.plan);
    ran_free(&gpu, 3), ran_free(&cpu, 3);
    net_free(&n);
  }
  /* gemm with alpha, beta, both transposes and a c broadcast over columns */
  for (int f64 = 0; f64 < 2; f64++) {
    em_dtype dt = f64 ? EM_F64 : EM_F32;
    net n = {0};
    CHECK(em_graph_create(&n.g));
    const int64_t as[2] = {9, 6}, bs[2] = {5, 9}, cs[2] = {6, 1};
    em_var in[3];
    in[0] = net_input(&n, "a", ot_rand(dt, 2, as, 61, -1, 1));
    in[1] = net_input(&n, "b", ot_rand(dt, 2, bs, 62, -1, 1));
    in[2] = net_input(&n, "c", ot_rand(dt, 2, cs, 63, -1, 1));
    em_attr at[4] = {AF("alpha", 0.75), AF("beta", -1.25), AI("transA", 1), AI("transB", 1)};
    n.out[n.n_out++] = ap(&n, "gemm", in, 3, at, 4);
    ran gpu, cpu;
    net_run(&n, em_cuda(0), 1, 0, &gpu);
    net_run(&n, em_cpu(), 1, 0, &cpu);
    if (gpu.blas_calls) fail_msg("portable gemm called cuBLAS");
    expect_same(gpu.out[0], cpu.out[0], -1, f64 ? "portable gemm f64" : "portable gemm f32");
    ran_free(&gpu, 1), ran_free(&cpu, 1);
    net_free(&n);
  }
}

/* One executor switched from fast to portable: its plan must not keep the fast road. */
static void test_portable_switch_road(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  net n;
  em_var x, y;
  mm_net(&n, EM_F32, &mm_cases[4], 5, &x, &y);
  em_exec *e;
  CHECK(em_exec_create(n.g, n.out, 1, em_cuda(0), &e));
  em_feed f[2] = {{x, n.feed[0]}, {y, n.feed[1]}};
  em_tensor *o;
  CHECK(em_exec_run(e, f, 2, &o));
  em_tensor_release(o);
  char plan[4096];
  em_exec_describe(e, plan, sizeof plan);
  if (!strstr(plan, "[cuBLAS")) fail_msg("fast mode: %s", plan);
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  unsigned long before = gemm_calls();
  CHECK(em_exec_run(e, f, 2, &o));
  em_tensor_release(o);
  if (gemm_calls() != before) fail_msg("portable mode called cuBLAS");
  em_exec_describe(e, plan, sizeof plan);
  if (strstr(plan, "cuBLAS")) fail_msg("after a portable run the plan still says cuBLAS:\n%s", plan);
  em_exec_free(e);
  net_free(&n);
}

/* ------------------------------------------------ two threads --- */

typedef struct worker {
  const mm_case *c;
  em_dtype dt;
  int tf32;
  int runs;
  char error[512];
} worker;

static void *worker_main(void *p) {
  worker *w = p;
  net n;
  em_var x, y;
  memset(&n, 0, sizeof n);
  if (em_graph_create(&n.g)) return snprintf(w->error, sizeof w->error, "graph"), NULL;
  em_tensor *xt = ot_rand(w->dt, w->c->xnd, w->c->xs, 900 + (uint64_t)w->runs, -1, 1);
  em_tensor *yt = ot_rand(w->dt, w->c->ynd, w->c->ys, 901 + (uint64_t)w->runs, -1, 1);
  em_input(n.g, "x", w->dt, w->c->xnd, w->c->xs, &x);
  em_input(n.g, "y", w->dt, w->c->ynd, w->c->ys, &y);
  em_var in[2] = {x, y}, out;
  em_attr at[2] = {AI("transpose_a", w->c->ta), AI("transpose_b", w->c->tb)};
  em_apply(n.g, "matmul", in, 2, at, 2, &out, 1);
  em_exec *e = NULL;
  if (em_exec_create(n.g, &out, 1, em_cuda(0), &e)) {
    snprintf(w->error, sizeof w->error, "exec: %s", em_last_error());
    goto done;
  }
  em_exec_set_tf32(e, w->tf32);
  int64_t cnt;
  double *want = ref_matmul(xt, w->c->ta, yt, w->c->tb, &cnt);
  em_feed f[2] = {{x, xt}, {y, yt}};
  for (int r = 0; r < w->runs && !w->error[0]; r++) {
    em_tensor *o = NULL;
    if (em_exec_run(e, f, 2, &o)) {
      snprintf(w->error, sizeof w->error, "run %d: %s", r, em_last_error());
      break;
    }
    int64_t k;
    double *got = ot_values(o, &k);
    double tol = w->dt == EM_F64 ? 1e-12 : w->tf32 ? 2e-2 : 2e-6;
    for (int64_t i = 0; i < cnt && !w->error[0]; i++)
      if (!(fabs(got[i] - want[i]) <= tol * fmax(1, fabs(want[i]))))
        snprintf(w->error, sizeof w->error, "run %d element %lld: %.9g, want %.9g", r, (long long)i, got[i], want[i]);
    free(got);
    em_tensor_release(o);
  }
  free(want);
done:
  em_exec_free(e);
  em_tensor_release(xt), em_tensor_release(yt);
  em_graph_free(n.g);
  return NULL;
}

static void test_two_threads_one_device(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  worker w[3] = {{&mm_cases[4], EM_F32, 0, 25, ""}, {&mm_cases[8], EM_F64, 0, 25, ""}, {&mm_cases[23], EM_F32, 1, 25, ""}};
  pthread_t t[3];
  unsigned long before = gemm_calls();
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 3; i++)
    if (w[i].error[0]) fail_msg("thread %d: %s", i, w[i].error);
  if (gemm_calls() - before < 75) fail_msg("only %lu cuBLAS products for 75 runs", gemm_calls() - before);
  if (live_handles() != 1) fail_msg("%zu cuBLAS handles for one device", live_handles());
}

/* --------------------------------------------------------- TF32 --- */

static void test_tf32_values(void **state) {
  (void)state;
  if (!use_doubles("8.0", "13000", "13.1.0")) skip();
  const int64_t s11[2] = {1, 1};
  const double xv = 1.0 + ldexp(1.0, -20), yv = 3.0; /* 1 + 2^-20 is 1 in TF32 */
  static const char *const bad[] = {"yes", "2", " 1", "1 ", "true", "01", "-1", "on", "0x1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("EMBER_TF32", bad[i], 1);
    net n = {0};
    CHECK(em_graph_create(&n.g));
    em_var x = net_input(&n, "x", ot_tensor(EM_F32, 2, s11, &xv));
    n.out[n.n_out++] = x;
    em_exec *e = NULL;
    em_status s = em_exec_create(n.g, n.out, 1, em_cuda(0), &e);
    if (s != EM_ERR_INVALID_ARGUMENT || !strstr(em_last_error(), "EMBER_TF32"))
      fail_msg("EMBER_TF32='%s' accepted (status %d: %s)", bad[i], (int)s, em_last_error());
    em_exec_free(e);
    net_free(&n);
  }
  /* "0" and "" mean no TF32; "1" allows it; f64 never rounds */
  static const char *const good[] = {"0", "", "1"};
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t i = 0; i < 3; i++) {
      setenv("EMBER_TF32", good[i], 1);
      em_dtype dt = f64 ? EM_F64 : EM_F32;
      net n = {0};
      CHECK(em_graph_create(&n.g));
      em_var in[2];
      in[0] = net_input(&n, "x", ot_tensor(dt, 2, s11, &xv));
      in[1] = net_input(&n, "y", ot_tensor(dt, 2, s11, &yv));
      n.out[n.n_out++] = ap(&n, "matmul", in, 2, NULL, 0);
      ran r;
      net_run(&n, em_cuda(0), 0, 0, &r);
      double *v = ot_values(r.out[0], NULL);
      int want_tf32 = i == 2 && !f64;
      double want = want_tf32 ? 3.0 : f64 ? xv * yv : (double)(float)(xv * yv);
      if (v[0] != want || (strstr(last_gemm(), "tf32") != NULL) != want_tf32)
        fail_msg("EMBER_TF32='%s' %s: %.17g (%s), want %.17g", good[i], f64 ? "f64" : "f32", v[0], last_gemm(), want);
      if (want_tf32 != (strstr(r.plan, "TF32 allowed") != NULL)) fail_msg("plan: %s", r.plan);
      free(v);
      ran_free(&r, 1);
      net_free(&n);
    }
  unsetenv("EMBER_TF32");
}

/* -------------------------------------------- shutdown and restart --- */

static void one_product(em_device dev, const char *what) {
  net n;
  em_var x, y;
  mm_net(&n, EM_F32, &mm_cases[5], 3, &x, &y);
  ran r;
  net_run(&n, dev, 0, 0, &r);
  int64_t cnt;
  double *want = ref_matmul(n.feed[0], mm_cases[5].ta, n.feed[1], mm_cases[5].tb, &cnt);
  ot_expect_values(r.out[0], want, cnt, 2e-6, what);
  free(want);
  if (!r.blas_calls) fail_msg("%s: cuBLAS not called:\n%s", what, r.plan);
  ran_free(&r, 1);
  net_free(&n);
}

static void test_shutdown_restart(void **state) {
  (void)state;
  if (!use_doubles("9.0,8.0", "13000", "13.1.0")) skip();
  for (int round = 0; round < 3; round++) {
    if (live_handles() != 0) fail_msg("round %d: %zu handles live before any product", round, live_handles());
    one_product(em_cuda(0), "device 0");
    if (live_handles() != 1) fail_msg("round %d: %zu handles after device 0", round, live_handles());
    one_product(em_cuda(1), "device 1");
    one_product(em_cuda(0), "device 0 again");
    if (live_handles() != 2) fail_msg("round %d: %zu handles after two devices", round, live_handles());
    char version[32];
    em_cublas_library(version, sizeof version);
    if (strcmp(version, round == 1 ? "12.9.1" : "13.1.0")) fail_msg("round %d: library %s", round, version);
    em_shutdown();
    if (live_handles() != 0) fail_msg("round %d: %zu handles live after em_shutdown", round, live_handles());
    /* round 1 runs another cuBLAS release: the search runs again after em_shutdown */
    setenv("FAKECUBLAS_VERSION", round == 0 ? "12.9.1" : "13.1.0", 1);
    blas_reset(); /* the double reads its configuration again (no handle is live to forget) */
  }
}

/* ----------------------------------------------- injected failures --- */

static void test_injected_failures(void **state) {
  (void)state;
  static const struct {
    const char *fail, *call;
    int batched;
  } f[] = {
      {"cublasSetStream_v2=14@1", "cublasSetStream_v2", 0},
      {"cublasSetWorkspace_v2=7@1", "cublasSetWorkspace_v2", 0},
      {"cublasGemmStridedBatchedEx=13@1", "cublasGemmStridedBatchedEx", 1},
      {"cublasGemmEx=3@1", "cublasGemmEx", 0},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (!use_doubles("9.0", "13000", "13.1.0")) skip();
    setenv("FAKECUBLAS_FAIL", f[i].fail, 1);
    blas_reset();
    net n;
    em_var x, y;
    const mm_case *c = f[i].batched ? &mm_cases[4] : &mm_cases[0];
    mm_net(&n, EM_F32, c, 20 + i, &x, &y);
    em_exec *e;
    CHECK(em_exec_create(n.g, n.out, 1, em_cuda(0), &e));
    em_feed fd[2] = {{x, n.feed[0]}, {y, n.feed[1]}};
    em_tensor *o = NULL;
    if (em_exec_run(e, fd, 2, &o) == EM_OK) fail_msg("%s: the run did not fail", f[i].fail);
    const char *msg = em_last_error();
    if (!strstr(msg, f[i].call) || !strstr(msg, "matmul") || !strstr(msg, "CUBLAS_STATUS_"))
      fail_msg("%s: the message does not name the call, its status and the op: %s", f[i].fail, msg);
    /* the fault gone: the same executor's next run is right */
    CHECK(em_exec_run(e, fd, 2, &o));
    int64_t cnt;
    double *want = ref_matmul(n.feed[0], c->ta, n.feed[1], c->tb, &cnt);
    ot_expect_values(o, want, cnt, 2e-6, f[i].fail);
    free(want);
    em_tensor_release(o);
    em_exec_free(e);
    net_free(&n);
  }
  unsetenv("FAKECUBLAS_FAIL");
}

/* cublasCreate_v2 failing: the device keeps Ember's kernels, says why, and the products are
 * right; after em_shutdown (the fault gone) cuBLAS serves it. */
static void test_create_failure(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  setenv("FAKECUBLAS_FAIL", "cublasCreate_v2=3@1", 1);
  blas_reset();
  net n;
  em_var x, y;
  mm_net(&n, EM_F32, &mm_cases[4], 31, &x, &y);
  ran r;
  net_run(&n, em_cuda(0), 0, 0, &r);
  int64_t cnt;
  double *want = ref_matmul(n.feed[0], 0, n.feed[1], 0, &cnt);
  ot_expect_values(r.out[0], want, cnt, 2e-6, "products after a failed cublasCreate_v2");
  if (r.blas_calls) fail_msg("cuBLAS products without a handle");
  if (!strstr(r.plan, "[Ember's kernels: cublasCreate_v2 failed") || !strstr(r.plan, "CUBLAS_STATUS_ALLOC_FAILED"))
    fail_msg("the plan does not say why:\n%s", r.plan);
  int used = 1;
  char why[256];
  CHECK(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why));
  if (used || !strstr(why, "cublasCreate_v2")) fail_msg("em_device_library_use: %d %s", used, why);
  ran_free(&r, 1);
  em_shutdown();
  if (live_handles() != 0) fail_msg("%zu handles after em_shutdown", live_handles());
  net_run(&n, em_cuda(0), 0, 0, &r);
  ot_expect_values(r.out[0], want, cnt, 2e-6, "products after the fault");
  if (!r.blas_calls || !strstr(r.plan, "[cuBLAS")) fail_msg("cuBLAS not used after restart:\n%s", r.plan);
  ran_free(&r, 1);
  free(want);
  net_free(&n);
  em_shutdown();
  unsetenv("FAKECUBLAS_FAIL");
}

/* cublasSetMathMode failing after the handle was made: the handle must not outlive em_shutdown. */
static void test_set_math_failure_no_leak(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  setenv("FAKECUBLAS_FAIL", "cublasSetMathMode=7@1", 1);
  blas_reset();
  int used = 1;
  char why[256];
  CHECK(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why));
  if (used || !strstr(why, "cublasSetMathMode failed") || !strstr(why, "INVALID_VALUE")) fail_msg("a failed cublasSetMathMode: used %d, %s", used, why);
  em_shutdown();
  size_t live = live_handles();
  unsetenv("FAKECUBLAS_FAIL");
  if (live != 0) fail_msg("%zu cuBLAS handle(s) live after em_shutdown: the handle of a failed set-up leaked", live);
}

/* ------------------------------------------ mixed support, one run --- */

static void test_mixed_devices(void **state) {
  (void)state;
  if (use_doubles("7.0=Tesla V100 (double),9.0=NVIDIA H100 (double)", "13000", "13.1.0") < 2) skip();
  net n;
  grad_net(&n, EM_F32, &mm_cases[9], 77);
  ran v100, h100, cpu;
  net_run(&n, em_cuda(0), 0, 0, &v100);
  net_run(&n, em_cuda(1), 0, 0, &h100);
  net_run(&n, em_cpu(), 0, 0, &cpu);
  if (v100.blas_calls) fail_msg("the V100 called cuBLAS 13");
  if (!h100.blas_calls) fail_msg("the H100 did not call cuBLAS");
  if (!strstr(v100.plan, "[Ember's kernels: cuBLAS 13 supports compute capability 7.5"))
    fail_msg("V100 plan:\n%s", v100.plan);
  if (!strstr(h100.plan, "[cuBLAS 13.1.0]") || strstr(h100.plan, "Ember's kernels"))
    fail_msg("H100 plan:\n%s", h100.plan);
  for (int o = 0; o < 3; o++) {
    expect_same(v100.out[o], cpu.out[o], 1e-5, "V100 against the CPU");
    expect_same(h100.out[o], cpu.out[o], 1e-5, "H100 against the CPU");
  }
  ran_free(&v100, 3), ran_free(&h100, 3), ran_free(&cpu, 3);
  net_free(&n);
  if (live_handles() != 1) fail_msg("%zu handles: the V100 must have none", live_handles());
}

int main(void) {
  /* Every run must reach cuBLAS here: a CUDA graph's replay runs the
   * captured products without calling it (test_exec_graphs). */
  setenv("EMBER_CUDA_GRAPHS", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_transposes_broadcasts),
      cmocka_unit_test(test_grad_broadcast_sums),
      cmocka_unit_test(test_gemm_every_c),
      cmocka_unit_test(test_zero_sizes),
      cmocka_unit_test(test_integer_matmul_stays_on_kernels),
      cmocka_unit_test(test_recurrent_training_step),
      cmocka_unit_test(test_portable_bits_no_cublas),
      cmocka_unit_test(test_portable_switch_road),
      cmocka_unit_test(test_two_threads_one_device),
      cmocka_unit_test(test_tf32_values),
      cmocka_unit_test(test_shutdown_restart),
      cmocka_unit_test(test_injected_failures),
      cmocka_unit_test(test_create_failure),
      cmocka_unit_test(test_set_math_failure_no_leak),
      cmocka_unit_test(test_mixed_devices),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
