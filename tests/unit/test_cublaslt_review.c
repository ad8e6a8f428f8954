/* A review of the gemv road and the cuBLASLt epilogues (ops/linalg_gpu.c, runtime/cublas.c,
 * runtime/cublaslt.c, exec.c's plan_fusions), on the libcuda, cuBLAS and cuBLASLt doubles:
 * shapes at the edges of the gemv rule (1x1, k 1, m and n 1 together, k 0, a long k), both
 * dtypes, batched matvecs with one side broadcast, views with offsets feeding the products
 * (pointers below cuBLASLt's default 256-byte alignment), a gemm whose output is also read
 * elsewhere or is itself an output (never fused), inf and NaN through the GELU epilogue against
 * Ember's own gelu on the CPU, a training graph (the gradient needs the gelu's input), mode
 * switches after creation, a CPU executor, EMBER_CUBLASLT=0. Every expected value comes from a
 * float64 loop written here or from the CPU executor. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AS(const char *name, const char *v) { return (em_attr){.name = name, .type = EM_ATTR_STRING, .s = v}; }

/* The three doubles, a fresh runtime; 0 when they are not built (the test skips). */
static int use_doubles(void) {
  const char *cuda = getenv("FAKECUDA_LIB"), *blas = getenv("FAKECUBLAS_LIB"), *lt = getenv("FAKECUBLASLT_LIB");
  if (!cuda || !*cuda || !blas || !*blas || !lt || !*lt) {
    fprintf(stderr, "skipped: FAKECUDA_LIB, FAKECUBLAS_LIB and FAKECUBLASLT_LIB are not all set\n");
    return 0;
  }
  setenv("EMBER_LIBCUDA", cuda, 1);
  setenv("FAKECUDA_DEVICES", "9.0", 1);
  setenv("FAKECUDA_DRIVER", "13000", 1);
  setenv("EMBER_LIBCUBLAS", blas, 1);
  setenv("EMBER_LIBCUBLASLT", lt, 1);
  setenv("FAKECUBLAS_VERSION", "13.1.0", 1);
  unsetenv("EMBER_CUBLAS");
  unsetenv("EMBER_CUBLASLT");
  unsetenv("EMBER_MODE");
  unsetenv("EMBER_TF32");
  em_shutdown();
  int n = 0;
  if (em_cuda_device_count(&n) || n < 1) fail_msg("the libcuda double shows no device: %s", em_last_error());
  return 1;
}

static double gelu_tanh(double v) { return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }

/* alpha op(a) op(b) + beta c (c: rows x cols broadcast, or NULL), a m x k (or k x m), b k x n. */
static double *ref_gemm(const double *a, const double *b, const double *c, int64_t crows, int64_t ccols, int64_t m,
                        int64_t n, int64_t k, int ta, int tb, double alpha, double beta) {
  double *y = calloc((size_t)(m * n + 1), sizeof(double));
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++) acc += (ta ? a[t * m + i] : a[i * k + t]) * (tb ? b[j * k + t] : b[t * n + j]);
      y[i * n + j] = alpha * acc + (c ? beta * c[(crows == 1 ? 0 : i) * ccols + (ccols == 1 ? 0 : j)] : 0.0);
    }
  return y;
}

/* Runs outputs of g on dev with the feeds; mode < 0 keeps the executor's own; plan if asked. */
static void run(em_graph *g, const em_var *outs, int n_out, em_device dev, int mode, const em_feed *f, int nf,
                em_tensor **o, char *plan, size_t cap) {
  em_exec *e;
  if (em_exec_create(g, outs, n_out, dev, &e)) fail_msg("exec: %s", em_last_error());
  if (mode >= 0) assert_int_equal(em_exec_set_mode(e, (em_mode)mode), EM_OK);
  if (em_exec_run(e, f, nf, o)) fail_msg("run: %s", em_last_error());
  if (plan) em_exec_describe(e, plan, cap);
  em_exec_free(e);
}

static em_tensor *to_gpu(const em_tensor *t) {
  em_tensor *o;
  if (em_tensor_to_device(t, em_cuda(0), &o)) fail_msg("to_device: %s", em_last_error());
  return o;
}

/* ---------------------------------------------------------------- gemv --- */

/* gemm at the gemv rule's edges, f32 (no TF32: gemv) and f64, every transpose, a full c with
 * beta 0.5 and alpha 1.5 (cuBLAS's beta 1 over beta * c), against the float64 loop. k = 0 must
 * give beta * c (not garbage and not c). */
static void test_gemv_shapes(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t sizes[][3] = {{1, 1, 1}, {1, 6, 1}, {6, 1, 1}, {1, 1, 7}, {1, 9, 300}, {9, 1, 300},
                              {1, 1, 0}, {1, 5, 0}, {2, 3, 1}, {1, 1, 4099}};
  for (int d = 0; d < 2; d++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          const em_dtype dt = d ? EM_F64 : EM_F32;
          const int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
          const int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n}, cs[2] = {m, n};
          em_graph *g;
          em_var a, b, c, y;
          assert_int_equal(em_graph_create(&g), EM_OK);
          assert_int_equal(em_input(g, "a", dt, 2, as, &a), EM_OK);
          assert_int_equal(em_input(g, "b", dt, 2, bs, &b), EM_OK);
          assert_int_equal(em_input(g, "c", dt, 2, cs, &c), EM_OK);
          em_attr at[4] = {AF("alpha", 1.5), AF("beta", 0.5), AI("transA", ta), AI("transB", tb)};
          em_var in[3] = {a, b, c};
          if (em_apply(g, "gemm", in, 3, at, 4, &y, 1)) fail_msg("gemm: %s", em_last_error());
          em_tensor *at_ = ot_rand(dt, 2, as, 10 + s, -1, 1), *bt = ot_rand(dt, 2, bs, 20 + s, -1, 1),
                    *ct = ot_rand(dt, 2, cs, 30 + s, -1, 1);
          em_feed f[3] = {{a, at_}, {b, bt}, {c, ct}};
          em_tensor *o = NULL;
          char plan[4096], what[96];
          run(g, &y, 1, em_cuda(0), -1, f, 3, &o, plan, sizeof plan);
          double *av = ot_values(at_, NULL), *bv = ot_values(bt, NULL), *cv = ot_values(ct, NULL);
          double *want = ref_gemm(av, bv, cv, m, n, m, n, k, ta, tb, 1.5, 0.5);
          snprintf(what, sizeof what, "%s m %lld n %lld k %lld transA %d transB %d", d ? "f64" : "f32", (long long)m,
                   (long long)n, (long long)k, ta, tb);
          ot_expect_values(o, want, m * n, d ? 1e-12 : 1e-4 * (1 + sqrt((double)k) / 8), what);
          if (k > 0 && (m == 1 || n == 1) && !strstr(plan, "gemv")) fail_msg("%s: not the gemv road:\n%s", what, plan);
          free(av), free(bv), free(cv), free(want);
          em_tensor_release(o), em_tensor_release(at_), em_tensor_release(bt), em_tensor_release(ct);
          em_graph_free(g);
        }
}

/* matmul with one side batched and the other broadcast, whose members are matvecs: [3, 1, k] x
 * [k, n] (row times matrix per member, the matrix shared), [k] x [3, k, n] and [3, m, k] x [k],
 * f32 and f64, fed as GPU tensors that are transposed views (permute) of other storage. */
static void test_batched_matvec(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t B = 3, m = 4, n = 5, k = 7;
  for (int d = 0; d < 2; d++)
    for (int c = 0; c < 3; c++) {
      const em_dtype dt = d ? EM_F64 : EM_F32;
      int64_t as[3], bs[3];
      int an, bn;
      if (c == 0) an = 3, as[0] = B, as[1] = 1, as[2] = k, bn = 2, bs[0] = k, bs[1] = n;
      else if (c == 1) an = 1, as[0] = k, bn = 3, bs[0] = B, bs[1] = k, bs[2] = n;
      else an = 3, as[0] = B, as[1] = m, as[2] = k, bn = 1, bs[0] = k;
      em_graph *g;
      em_var a, b, y;
      assert_int_equal(em_graph_create(&g), EM_OK);
      assert_int_equal(em_input(g, "a", dt, an, as, &a), EM_OK);
      assert_int_equal(em_input(g, "b", dt, bn, bs, &b), EM_OK);
      em_var in[2] = {a, b};
      if (em_apply(g, "matmul", in, 2, NULL, 0, &y, 1)) fail_msg("matmul: %s", em_last_error());
      em_tensor *ah = ot_rand(dt, an, as, 40 + c, -1, 1), *bh = ot_rand(dt, bn, bs, 50 + c, -1, 1);
      /* b of case 0 arrives as the transpose of a [n, k] GPU tensor: a strided view */
      em_tensor *ag = to_gpu(ah), *bg = NULL;
      if (c == 0) {
        const int64_t bts[2] = {n, k};
        em_tensor *bt = ot_rand(dt, 2, bts, 60, -1, 1), *btg = to_gpu(bt);
        const int perm[2] = {1, 0};
        if (em_tensor_permute(btg, perm, &bg)) fail_msg("permute: %s", em_last_error());
        em_tensor_release(btg);
        em_tensor_release(bh);
        double *tv = ot_values(bt, NULL), *bv = malloc(sizeof(double) * (size_t)(k * n));
        for (int64_t i = 0; i < k; i++)
          for (int64_t j = 0; j < n; j++) bv[i * n + j] = tv[j * k + i];
        bh = ot_tensor(dt, 2, bs, bv);
        free(tv), free(bv);
        em_tensor_release(bt);
      } else bg = to_gpu(bh);
      em_feed f[2] = {{a, ag}, {b, bg}};
      em_tensor *o = NULL;
      run(g, &y, 1, em_cuda(0), -1, f, 2, &o, NULL, 0);
      double *av = ot_values(ah, NULL), *bv = ot_values(bh, NULL);
      int64_t rows = c == 2 ? m : 1, cols = c == 2 ? 1 : n;
      double *want = malloc(sizeof(double) * (size_t)(B * rows * cols));
      for (int64_t z = 0; z < B; z++) {
        const double *az = c == 1 ? av : av + z * (c == 0 ? k : m * k);
        const double *bz = c == 1 ? bv + z * k * n : bv;
        double *w = ref_gemm(az, bz, NULL, 1, 1, rows, cols, k, 0, 0, 1.0, 0.0);
        memcpy(want + z * rows * cols, w, sizeof(double) * (size_t)(rows * cols));
        free(w);
      }
      char what[64];
      snprintf(what, sizeof what, "%s batched matvec case %d", d ? "f64" : "f32", c);
      ot_expect_values(o, want, B * rows * cols, d ? 1e-12 : 1e-5, what);
      free(av), free(bv), free(want);
      em_tensor_release(o), em_tensor_release(ah), em_tensor_release(bh), em_tensor_release(ag), em_tensor_release(bg);
      em_graph_free(g);
    }
}

/* ------------------------------------------------------------ cuBLASLt --- */

/* A GEMM with a bias row and a tanh gelu whose operands are GPU views starting one element
 * (4 bytes) or one row into their storage: pointers below the 256 bytes cuBLASLt assumes unless
 * told (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, cublasLt.h). The product must come out right
 * (cuBLASLt told the real alignment, or another road). */
static void test_offset_views(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t m = 5, n = 6, k = 3, as[2] = {m + 1, k}, bs[2] = {k, n}, cs[1] = {n + 1};
  em_graph *g;
  em_var a, b, c, z, y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "a", EM_F32, 2, (const int64_t[]){m, k}, &a), EM_OK);
  assert_int_equal(em_input(g, "b", EM_F32, 2, bs, &b), EM_OK);
  assert_int_equal(em_input(g, "c", EM_F32, 1, (const int64_t[]){n}, &c), EM_OK);
  em_attr at[2] = {AF("alpha", 1.0), AF("beta", 1.0)};
  em_var in[3] = {a, b, c};
  if (em_apply(g, "gemm", in, 3, at, 2, &z, 1)) fail_msg("gemm: %s", em_last_error());
  em_attr ga = AS("approximate", "tanh");
  if (em_apply(g, "gelu", &z, 1, &ga, 1, &y, 1)) fail_msg("gelu: %s", em_last_error());
  em_tensor *ah = ot_rand(EM_F32, 2, as, 70, -1, 1), *bh = ot_rand(EM_F32, 2, bs, 71, -1, 1),
            *ch = ot_rand(EM_F32, 1, cs, 72, -1, 1);
  em_tensor *ag = to_gpu(ah), *bg = to_gpu(bh), *cg = to_gpu(ch), *av_, *cv_;
  if (em_tensor_slice(ag, 0, 1, m + 1, 1, &av_) || em_tensor_slice(cg, 0, 1, n + 1, 1, &cv_))
    fail_msg("slice: %s", em_last_error());
  em_feed f[3] = {{a, av_}, {b, bg}, {c, cv_}};
  em_tensor *o = NULL;
  char plan[4096];
  run(g, &y, 1, em_cuda(0), -1, f, 3, &o, plan, sizeof plan);
  double *avals = ot_values(ah, NULL), *bvals = ot_values(bh, NULL), *cvals = ot_values(ch, NULL);
  double *want = ref_gemm(avals + k, bvals, cvals + 1, 1, n, m, n, k, 0, 0, 1.0, 1.0);
  for (int64_t i = 0; i < m * n; i++) want[i] = gelu_tanh(want[i]);
  ot_expect_values(o, want, m * n, 2e-5, "offset views through the GELU_BIAS road");
  free(avals), free(bvals), free(cvals), free(want);
  em_tensor_release(o), em_tensor_release(av_), em_tensor_release(cv_);
  em_tensor_release(ag), em_tensor_release(bg), em_tensor_release(cg);
  em_tensor_release(ah), em_tensor_release(bh), em_tensor_release(ch);
  em_graph_free(g);
}

/* gemm -> gelu(tanh) where the gemm's output is also read by another op (an add), or is itself
 * an output: not fused (the gelu'd values must not replace it); both outputs right. */
static void test_shared_output_not_fused(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t m = 4, n = 3, k = 5, as[2] = {m, k}, bs[2] = {k, n}, cs[1] = {n};
  for (int how = 0; how < 2; how++) {
    em_graph *g;
    em_var a, b, c, z, y, w;
    assert_int_equal(em_graph_create(&g), EM_OK);
    assert_int_equal(em_input(g, "a", EM_F32, 2, as, &a), EM_OK);
    assert_int_equal(em_input(g, "b", EM_F32, 2, bs, &b), EM_OK);
    assert_int_equal(em_input(g, "c", EM_F32, 1, cs, &c), EM_OK);
    em_attr at[2] = {AF("alpha", 1.0), AF("beta", 1.0)};
    em_var in[3] = {a, b, c};
    if (em_apply(g, "gemm", in, 3, at, 2, &z, 1)) fail_msg("gemm: %s", em_last_error());
    em_attr ga = AS("approximate", "tanh");
    if (em_apply(g, "gelu", &z, 1, &ga, 1, &y, 1)) fail_msg("gelu: %s", em_last_error());
    em_var second = z;
    if (how == 0) {
      em_var zz[2] = {z, z};
      if (em_apply(g, "add", zz, 2, NULL, 0, &w, 1)) fail_msg("add: %s", em_last_error());
      second = w;
    }
    em_tensor *ah = ot_rand(EM_F32, 2, as, 80, -1, 1), *bh = ot_rand(EM_F32, 2, bs, 81, -1, 1),
              *ch = ot_rand(EM_F32, 1, cs, 82, -1, 1);
    em_feed f[3] = {{a, ah}, {b, bh}, {c, ch}};
    em_var outs[2] = {y, second};
    em_tensor *o[2] = {NULL, NULL};
    char plan[4096];
    run(g, outs, 2, em_cuda(0), -1, f, 3, o, plan, sizeof plan);
    if (strstr(plan, "fused")) fail_msg("case %d: a gemm read twice was fused:\n%s", how, plan);
    double *av = ot_values(ah, NULL), *bv = ot_values(bh, NULL), *cv = ot_values(ch, NULL);
    double *zr = ref_gemm(av, bv, cv, 1, n, m, n, k, 0, 0, 1.0, 1.0), *yr = malloc(sizeof(double) * (size_t)(m * n));
    for (int64_t i = 0; i < m * n; i++) yr[i] = gelu_tanh(zr[i]), zr[i] *= how == 0 ? 2.0 : 1.0;
    ot_expect_values(o[0], yr, m * n, 2e-5, "the gelu");
    ot_expect_values(o[1], zr, m * n, 2e-5, how == 0 ? "the gemm doubled" : "the gemm as an output");
    free(av), free(bv), free(cv), free(zr), free(yr);
    em_tensor_release(o[0]), em_tensor_release(o[1]);
    em_tensor_release(ah), em_tensor_release(bh), em_tensor_release(ch);
    em_graph_free(g);
  }
}

/* The gemm -> gelu graph of the remaining tests: y = gelu(a b + c), c a bias row. */
typedef struct net {
  em_graph *g;
  em_var a, b, c, z, y;
} net;

static void net_build(net *p, int64_t m, int64_t n, int64_t k, const char *approx) {
  const int64_t as[2] = {m, k}, bs[2] = {k, n}, cs[1] = {n};
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  assert_int_equal(em_input(p->g, "a", EM_F32, 2, as, &p->a), EM_OK);
  assert_int_equal(em_input(p->g, "b", EM_F32, 2, bs, &p->b), EM_OK);
  assert_int_equal(em_input(p->g, "c", EM_F32, 1, cs, &p->c), EM_OK);
  em_attr at[2] = {AF("alpha", 1.0), AF("beta", 1.0)};
  em_var in[3] = {p->a, p->b, p->c};
  if (em_apply(p->g, "gemm", in, 3, at, 2, &p->z, 1)) fail_msg("gemm: %s", em_last_error());
  em_attr ga = AS("approximate", approx);
  if (em_apply(p->g, "gelu", &p->z, 1, &ga, 1, &p->y, 1)) fail_msg("gelu: %s", em_last_error());
}

/* Classes equal (NaN, +inf, -inf) and finite values within tol of each other. */
static void expect_same_classes(const em_tensor *got, const em_tensor *want, double tol, const char *what) {
  int64_t n, n2;
  double *gv = ot_values(got, &n), *wv = ot_values(want, &n2);
  assert_int_equal(n, n2);
  for (int64_t i = 0; i < n; i++) {
    int ok = isnan(wv[i]) ? isnan(gv[i]) : isinf(wv[i]) ? gv[i] == wv[i] : fabs(gv[i] - wv[i]) <= tol * (1 + fabs(wv[i]));
    if (!ok) fail_msg("%s: y[%lld] = %.9g, Ember's own kernels give %.9g", what, (long long)i, gv[i], wv[i]);
  }
  free(gv), free(wv);
}

/* inf and NaN through GELU_BIAS (fused, cuBLASLt) against the CPU executor (Ember's gelu kernel):
 * rows whose products are +inf, -inf, NaN (a NaN in a), and a NaN bias element. */
static void test_gelu_nonfinite(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t m = 4, n = 3, k = 2, as[2] = {m, k}, bs[2] = {k, n}, cs[1] = {n};
  net p;
  net_build(&p, m, n, k, "tanh");
  float av[8] = {1e30f, 1e30f, -1e30f, 1e30f, NAN, 1.0f, 0.5f, -0.25f}, bv[6] = {1e30f, 1e30f, 1e30f, 1, 1, 1};
  float cv[3] = {0.5f, NAN, -0.5f};
  em_tensor *at, *bt, *ct;
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 2, as, av, sizeof av, &at), EM_OK);
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 2, bs, bv, sizeof bv, &bt), EM_OK);
  assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 1, cs, cv, sizeof cv, &ct), EM_OK);
  em_feed f[3] = {{p.a, at}, {p.b, bt}, {p.c, ct}};
  em_tensor *gpu = NULL, *cpu = NULL;
  char plan[4096];
  run(p.g, &p.y, 1, em_cuda(0), -1, f, 3, &gpu, plan, sizeof plan);
  if (!strstr(plan, "GELU_BIAS")) fail_msg("not the GELU_BIAS epilogue:\n%s", plan);
  run(p.g, &p.y, 1, em_cpu(), -1, f, 3, &cpu, NULL, 0);
  expect_same_classes(gpu, cpu, 1e-5, "GELU_BIAS with inf and NaN");
  /* row 1 is -inf (a -1e30 * 1e30 product): the tanh form's -inf * 0, NaN, as the real
   * GELU epilogue gives (observed on an H200, cuBLASLt 13.1.0) and Ember's x * sigmoid form */
  double *gv = ot_values(gpu, NULL);
  if (!isnan(gv[3]) || !isinf(gv[0]) || !isnan(gv[4])) fail_msg("gelu(-inf) %g, gelu(+inf) %g, NaN bias %g", gv[3], gv[0], gv[4]);
  free(gv);
  em_tensor_release(gpu), em_tensor_release(cpu);
  em_tensor_release(at), em_tensor_release(bt), em_tensor_release(ct);
  em_graph_free(p.g);
}

/* Training: the gradient of sum(gelu(a b + c)) needs the gelu's input, the gemm's output: the
 * fusion must leave it (the gemm is read twice, so not fused) and the gradients must match the
 * float64 loop: da = (gelu'(z)) b^T, dc = column sums of gelu'(z). */
static void test_training_gradients(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t m = 3, n = 4, k = 5, as[2] = {m, k}, bs[2] = {k, n}, cs[1] = {n};
  net p;
  net_build(&p, m, n, k, "tanh");
  em_var s, grads[2], xs[2] = {p.a, p.c};
  if (em_apply(p.g, "reduce_sum", &p.y, 1, NULL, 0, &s, 1)) fail_msg("reduce_sum: %s", em_last_error());
  if (em_gradients(p.g, s, xs, 2, grads)) fail_msg("gradients: %s", em_last_error());
  em_tensor *ah = ot_rand(EM_F32, 2, as, 90, -1, 1), *bh = ot_rand(EM_F32, 2, bs, 91, -1, 1),
            *ch = ot_rand(EM_F32, 1, cs, 92, -1, 1);
  em_feed f[3] = {{p.a, ah}, {p.b, bh}, {p.c, ch}};
  em_var outs[3] = {p.y, grads[0], grads[1]};
  em_tensor *o[3] = {NULL, NULL, NULL};
  run(p.g, outs, 3, em_cuda(0), -1, f, 3, o, NULL, 0);
  double *av = ot_values(ah, NULL), *bv = ot_values(bh, NULL), *cv = ot_values(ch, NULL);
  double *z = ref_gemm(av, bv, cv, 1, n, m, n, k, 0, 0, 1.0, 1.0);
  double *y = malloc(sizeof(double) * (size_t)(m * n)), *gz = malloc(sizeof(double) * (size_t)(m * n));
  double *da = calloc((size_t)(m * k), sizeof(double)), *dc = calloc((size_t)n, sizeof(double));
  const double s2 = sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < m * n; i++) {
    double v = z[i], u = s2 * (v + 0.044715 * v * v * v), t = tanh(u);
    y[i] = 0.5 * v * (1 + t);
    gz[i] = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * s2 * (1 + 3 * 0.044715 * v * v);
  }
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      dc[j] += gz[i * n + j];
      for (int64_t t = 0; t < k; t++) da[i * k + t] += gz[i * n + j] * bv[t * n + j];
    }
  ot_expect_values(o[0], y, m * n, 2e-5, "training forward");
  ot_expect_values(o[1], da, m * k, 1e-4, "d a");
  ot_expect_values(o[2], dc, n, 1e-4, "d c");
  free(av), free(bv), free(cv), free(z), free(y), free(gz), free(da), free(dc);
  for (int i = 0; i < 3; i++) em_tensor_release(o[i]);
  em_tensor_release(ah), em_tensor_release(bh), em_tensor_release(ch);
  em_graph_free(p.g);
}

/* One executor switched fast -> portable -> fast, a CPU executor, EMBER_CUBLASLT=0 and the erf
 * gelu: every result within tolerance of the float64 loop; the fusion only where planned. */
static void test_modes_and_switches(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t m = 6, n = 7, k = 9, as[2] = {m, k}, bs[2] = {k, n}, cs[1] = {n};
  for (int erf_form = 0; erf_form < 2; erf_form++) {
    net p;
    net_build(&p, m, n, k, erf_form ? "none" : "tanh");
    em_tensor *ah = ot_rand(EM_F32, 2, as, 95, -1, 1), *bh = ot_rand(EM_F32, 2, bs, 96, -1, 1),
              *ch = ot_rand(EM_F32, 1, cs, 97, -1, 1);
    double *av = ot_values(ah, NULL), *bv = ot_values(bh, NULL), *cv = ot_values(ch, NULL);
    double *want = ref_gemm(av, bv, cv, 1, n, m, n, k, 0, 0, 1.0, 1.0);
    for (int64_t i = 0; i < m * n; i++) want[i] = erf_form ? 0.5 * want[i] * (1 + erf(want[i] / sqrt(2.0))) : gelu_tanh(want[i]);
    em_feed f[3] = {{p.a, ah}, {p.b, bh}, {p.c, ch}};
    em_exec *e;
    if (em_exec_create(p.g, &p.y, 1, em_cuda(0), &e)) fail_msg("exec: %s", em_last_error());
    const em_mode modes[3] = {EM_MODE_FAST, EM_MODE_PORTABLE, EM_MODE_FAST};
    for (int r = 0; r < 3; r++) {
      assert_int_equal(em_exec_set_mode(e, modes[r]), EM_OK);
      em_tensor *o = NULL;
      if (em_exec_run(e, f, 3, &o)) fail_msg("run %d: %s", r, em_last_error());
      char what[64], plan[4096];
      em_exec_describe(e, plan, sizeof plan);
      snprintf(what, sizeof what, "gelu %s, switch %d", erf_form ? "none" : "tanh", r);
      ot_expect_values(o, want, m * n, 2e-5, what);
      if (erf_form && strstr(plan, "fused")) fail_msg("%s: the erf gelu fused:\n%s", what, plan);
      em_tensor_release(o);
    }
    em_exec_free(e);
    em_tensor *o = NULL;
    char plan[4096];
    run(p.g, &p.y, 1, em_cpu(), -1, f, 3, &o, plan, sizeof plan);
    ot_expect_values(o, want, m * n, 2e-5, "CPU executor");
    if (strstr(plan, "fused")) fail_msg("the CPU fused a gemm:\n%s", plan);
    em_tensor_release(o);
    setenv("EMBER_CUBLASLT", "0", 1);
    run(p.g, &p.y, 1, em_cuda(0), -1, f, 3, &o, plan, sizeof plan);
    unsetenv("EMBER_CUBLASLT");
    ot_expect_values(o, want, m * n, 2e-5, "EMBER_CUBLASLT=0");
    if (strstr(plan, "cuBLASLt 13")) fail_msg("EMBER_CUBLASLT=0 used cuBLASLt:\n%s", plan);
    em_tensor_release(o);
    free(av), free(bv), free(cv), free(want);
    em_tensor_release(ah), em_tensor_release(bh), em_tensor_release(ch);
    em_graph_free(p.g);
  }
}

/* The BIAS/GELU_BIAS road at tiny shapes (1x1, k 1, m or n 1: cuBLASLt's D a single row or
 * column, the bias one element), every transpose, a workspace asked for, and the same net with
 * CUDA graphs on (the workspace allocated during a capture, run again from the graph). */
static void test_lt_tiny_and_graphs(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t sizes[][3] = {{1, 1, 1}, {1, 5, 1}, {5, 1, 1}, {1, 1, 300}, {3, 4, 1}, {1, 7, 33}};
  for (int graphs = 0; graphs < 2; graphs++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int t = 0; t < 4; t++) {
        const int ta = t & 1, tb = t >> 1;
        const int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        const int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n}, cs[1] = {n};
        em_graph *g;
        em_var a, b, c, z, y;
        assert_int_equal(em_graph_create(&g), EM_OK);
        assert_int_equal(em_input(g, "a", EM_F32, 2, as, &a), EM_OK);
        assert_int_equal(em_input(g, "b", EM_F32, 2, bs, &b), EM_OK);
        assert_int_equal(em_input(g, "c", EM_F32, 1, cs, &c), EM_OK);
        em_attr at[4] = {AF("alpha", 0.75), AF("beta", 1.0), AI("transA", ta), AI("transB", tb)};
        em_var in[3] = {a, b, c};
        if (em_apply(g, "gemm", in, 3, at, 4, &z, 1)) fail_msg("gemm: %s", em_last_error());
        em_attr ga = AS("approximate", "tanh");
        if (em_apply(g, "gelu", &z, 1, &ga, 1, &y, 1)) fail_msg("gelu: %s", em_last_error());
        em_tensor *ah = ot_rand(EM_F32, 2, as, 110 + s, -1, 1), *bh = ot_rand(EM_F32, 2, bs, 120 + s, -1, 1),
                  *ch = ot_rand(EM_F32, 1, cs, 130 + s, -1, 1);
        em_feed f[3] = {{a, ah}, {b, bh}, {c, ch}};
        setenv("FAKECUBLASLT_WORKSPACE", "4096", 1);
        em_exec *e;
        if (em_exec_create(g, &y, 1, em_cuda(0), &e)) fail_msg("exec: %s", em_last_error());
        if (graphs && em_exec_set_graphs(e, 1)) fail_msg("graphs: %s", em_last_error());
        double *av = ot_values(ah, NULL), *bv = ot_values(bh, NULL), *cv = ot_values(ch, NULL);
        double *want = ref_gemm(av, bv, cv, 1, n, m, n, k, ta, tb, 0.75, 1.0);
        for (int64_t i = 0; i < m * n; i++) want[i] = gelu_tanh(want[i]);
        for (int r = 0; r < (graphs ? 3 : 1); r++) {
          em_tensor *o = NULL;
          if (em_exec_run(e, f, 3, &o)) fail_msg("run %d: %s", r, em_last_error());
          char what[96], plan[4096];
          em_exec_describe(e, plan, sizeof plan);
          snprintf(what, sizeof what, "m %lld n %lld k %lld transA %d transB %d graphs %d run %d", (long long)m,
                   (long long)n, (long long)k, ta, tb, graphs, r);
          ot_expect_values(o, want, m * n, 2e-5, what);
          if (r == 0 && !strstr(plan, "epilogue GELU_BIAS")) fail_msg("%s: not GELU_BIAS:\n%s", what, plan);
          em_tensor_release(o);
        }
        unsetenv("FAKECUBLASLT_WORKSPACE");
        em_exec_free(e);
        free(av), free(bv), free(cv), free(want);
        em_tensor_release(ah), em_tensor_release(bh), em_tensor_release(ch);
        em_graph_free(g);
      }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemv_shapes),        cmocka_unit_test(test_batched_matvec),
      cmocka_unit_test(test_offset_views),       cmocka_unit_test(test_shared_output_not_fused),
      cmocka_unit_test(test_gelu_nonfinite),     cmocka_unit_test(test_training_gradients),
      cmocka_unit_test(test_modes_and_switches), cmocka_unit_test(test_lt_tiny_and_graphs),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return r;
}
