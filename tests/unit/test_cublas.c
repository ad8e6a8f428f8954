/* The fast mode's products through cuBLAS (runtime/cublas.c, ops/linalg_gpu.c), run on the
 * libcuda double with the cuBLAS double (tests/fakecublas): which devices and drivers use it
 * and why (the rule, checked here over a hand-made matrix), results against plain float64
 * products written here, portable mode and EMBER_CUBLAS=0 staying with Ember's kernels, TF32
 * only when asked, a cuBLAS failure reported with the call and its status, and a cuBLAS that
 * cannot be loaded leaving the products to Ember's kernels with the reason in
 * em_device_library_use and em_exec_describe. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas.h"
#include "fakecublas/fakecublas.h"
#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }


/* ------------------------------------------------------ the rule alone --- */

/* Expected answers from cuda-compat.md's facts, not from arch_table's code: a CUDA M.x library
 * runs on drivers of CUDA M.0 and newer (minor-version compatibility); cuBLAS 13 dropped every
 * GPU before Turing (7.5), cuBLAS 12 Kepler (5.0 and newer remain), cuBLAS 11 still had 3.5. */
static void test_support_rule(void **state) {
  (void)state;
  const struct {
    int major, minor, patch, driver, cc, want;
    const char *why;
  } rows[] = {
      {13, 1, 0, 13000, 90, 1, "supports"},     {13, 1, 0, 13020, 120, 1, "supports"},
      {13, 1, 0, 12080, 90, 0, "CUDA 13.0 driver"}, {13, 0, 0, 13000, 75, 1, "supports"},
      {13, 0, 0, 13000, 70, 0, "7.5"},          {12, 9, 1, 12040, 70, 1, "supports"},
      {12, 9, 1, 13000, 50, 1, "supports"},     {12, 9, 1, 12040, 37, 0, "5.0"},
      {12, 0, 0, 11080, 80, 0, "CUDA 12.0 driver"}, {11, 11, 3, 11040, 35, 1, "supports"},
      {11, 11, 3, 10020, 35, 0, "CUDA 11.0 driver"}, {14, 0, 0, 14000, 90, 0, "not in Ember's table"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char why[256] = "";
    int got = em_cublas_supports(rows[i].major, rows[i].minor, rows[i].patch, rows[i].driver, rows[i].cc, why,
                                 sizeof why);
    if (got != rows[i].want || !strstr(why, rows[i].why))
      fail_msg("cuBLAS %d.%d.%d, driver %d, CC %d: got %d (%s), want %d (\"%s\")", rows[i].major, rows[i].minor,
               rows[i].patch, rows[i].driver, rows[i].cc, got, why, rows[i].want, rows[i].why);
  }
}

/* ------------------------------------------------------- the doubles --- */

static fakecublas_call_count_fn calls_of;
static fakecublas_text_fn last_gemm;
static fakecublas_reset_fn blas_reset;

/* Points the library at the doubles: devices (FAKECUDA_DEVICES), a driver, a cuBLAS
 * version; restarts the runtime. Returns the CUDA device count, 0 when the doubles are not
 * built (the test then skips). */
static int use_doubles(const char *devices, const char *driver, const char *blas_version) {
  const char *cuda = getenv("FAKECUDA_LIB"), *blas = getenv("FAKECUBLAS_LIB");
  if (!cuda || !*cuda || !blas || !*blas) {
    fprintf(stderr, "skipped: FAKECUDA_LIB and FAKECUBLAS_LIB (the doubles) are not set\n");
    return 0;
  }
  if (!calls_of) {
    void *h = dlopen(blas, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("cannot load FAKECUBLAS_LIB=%s: %s", blas, dlerror());
    calls_of = (fakecublas_call_count_fn)dlsym(h, "fakecublas_call_count");
    last_gemm = (fakecublas_text_fn)dlsym(h, "fakecublas_last_gemm");
    blas_reset = (fakecublas_reset_fn)dlsym(h, "fakecublas_reset");
    if (!calls_of || !last_gemm || !blas_reset) fail_msg("%s lacks its test hooks", blas);
  }
  setenv("EMBER_LIBCUDA", cuda, 1);
  setenv("FAKECUDA_DEVICES", devices, 1);
  setenv("FAKECUDA_DRIVER", driver, 1);
  setenv("EMBER_LIBCUBLAS", blas, 1);
  setenv("FAKECUBLAS_VERSION", blas_version, 1);
  unsetenv("EMBER_CUBLAS");
  unsetenv("FAKECUBLAS_FAIL");
  unsetenv("EMBER_TF32");
  em_shutdown();
  blas_reset();
  int n = 0;
  if (em_cuda_device_count(&n) || n < 1) fail_msg("the libcuda double shows no device: %s", em_last_error());
  return n;
}

static unsigned long gemm_calls(void) {
  return calls_of("cublasGemmEx") + calls_of("cublasGemmStridedBatchedEx") + calls_of("cublasSgemm_v2") +
         calls_of("cublasDgemm_v2");
}

/* Every product entry point, the matvecs (gemv) included. */
static unsigned long product_calls(void) {
  return gemm_calls() + calls_of("cublasSgemv_v2") + calls_of("cublasDgemv_v2") +
         calls_of("cublasSgemvStridedBatched") + calls_of("cublasDgemvStridedBatched");
}

/* ------------------------------------------------------------ graphs --- */

typedef struct prod {
  em_graph *g;
  em_var x, y, out;
  em_exec *e;
  em_tensor *xt, *yt;
} prod;

/* out = matmul(x, y) with x and y inputs of the given shapes (random values). */
static void prod_matmul(prod *p, em_dtype dt, int xnd, const int64_t *xs, int ynd, const int64_t *ys, em_device dev,
                        uint64_t seed) {
  memset(p, 0, sizeof *p);
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  assert_int_equal(em_input(p->g, "x", dt, xnd, xs, &p->x), EM_OK);
  assert_int_equal(em_input(p->g, "y", dt, ynd, ys, &p->y), EM_OK);
  em_var in[2] = {p->x, p->y};
  if (em_apply(p->g, "matmul", in, 2, NULL, 0, &p->out, 1)) fail_msg("matmul: %s", em_last_error());
  if (em_exec_create(p->g, &p->out, 1, dev, &p->e)) fail_msg("exec: %s", em_last_error());
  p->xt = ot_rand(dt, xnd, xs, seed, -1, 1);
  p->yt = ot_rand(dt, ynd, ys, seed + 1, -1, 1);
}

static em_tensor *prod_run(prod *p) {
  em_feed f[2] = {{p->x, p->xt}, {p->y, p->yt}};
  em_tensor *o = NULL;
  if (em_exec_run(p->e, f, 2, &o)) fail_msg("run: %s", em_last_error());
  return o;
}

static void prod_free(prod *p) {
  em_exec_free(p->e);
  em_graph_free(p->g);
  em_tensor_release(p->xt);
  em_tensor_release(p->yt);
}

/* numpy matmul in double of x [bx..., m, k] and y [by..., k, n] (1-D x or y promoted), the
 * batch axes broadcast: out has nb batches of m x n. */
static double *matmul_reference(const prod *p, int64_t *count) {
  int64_t nx, ny;
  double *x = ot_values(p->xt, &nx), *y = ot_values(p->yt, &ny);
  int xnd = em_tensor_ndim(p->xt), ynd = em_tensor_ndim(p->yt);
  const int64_t *xs = em_tensor_shape(p->xt), *ys = em_tensor_shape(p->yt);
  int64_t m = xnd == 1 ? 1 : xs[xnd - 2], k = xs[xnd - 1], n = ynd == 1 ? 1 : ys[ynd - 1];
  int bnd = (xnd > ynd ? xnd : ynd) - 2;
  int64_t bdims[EM_MAX_DIMS], nb = 1;
  for (int i = 0; i < bnd; i++) {
    int xi = i - (bnd - (xnd - 2)), yi = i - (bnd - (ynd - 2));
    int64_t dx = xi >= 0 && xnd > 2 ? xs[xi] : 1, dy = yi >= 0 && ynd > 2 ? ys[yi] : 1;
    bdims[i] = dx > dy ? dx : dy;
    nb *= bdims[i];
  }
  double *out = calloc((size_t)(nb * m * n), sizeof *out);
  for (int64_t b = 0; b < nb; b++) {
    int64_t bx = 0, by = 0, rem = b, sx = 1, sy = 1;
    for (int i = bnd - 1; i >= 0; i--) {
      int64_t q = rem % bdims[i];
      rem /= bdims[i];
      int xi = i - (bnd - (xnd - 2)), yi = i - (bnd - (ynd - 2));
      if (xi >= 0 && xnd > 2) bx += (xs[xi] == 1 ? 0 : q) * sx, sx *= xs[xi];
      if (yi >= 0 && ynd > 2) by += (ys[yi] == 1 ? 0 : q) * sy, sy *= ys[yi];
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t t = 0; t < k; t++) acc += x[(bx * m + i) * k + t] * y[(by * k + t) * n + j];
        out[(b * m + i) * n + j] = acc;
      }
  }
  free(x), free(y);
  *count = nb * m * n;
  return out;
}

static void expect_reference(prod *p, em_tensor *got, double tol, const char *what) {
  int64_t n;
  double *want = matmul_reference(p, &n);
  ot_expect_values(got, want, n, tol, what);
  free(want);
}

/* ------------------------------------------------------------- tests --- */

/* Shapes that take each road through the batch walk: one product, stacked rows, a strided
 * batch, a broadcast operand (stride 0), vectors (one-column leading dimensions), odd sizes,
 * f32 and f64. */
static void test_products_through_cublas(void **state) {
  (void)state;
  if (!use_doubles("9.0=NVIDIA H100 (double)", "13000", "13.1.0")) skip();
  const struct {
    int xnd;
    int64_t xs[4];
    int ynd;
    int64_t ys[4];
  } shapes[] = {
      {2, {5, 7}, 2, {7, 4}},       {3, {3, 5, 7}, 2, {7, 4}},       {3, {3, 5, 7}, 3, {3, 7, 4}},
      {3, {1, 5, 7}, 3, {4, 7, 6}}, {4, {2, 1, 3, 5}, 3, {3, 5, 2}}, {1, {7}, 2, {7, 4}},
      {2, {5, 7}, 1, {7}},          {2, {1, 1}, 2, {1, 1}},          {2, {33, 65}, 2, {65, 17}},
  };
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      prod p;
      prod_matmul(&p, f64 ? EM_F64 : EM_F32, shapes[s].xnd, shapes[s].xs, shapes[s].ynd, shapes[s].ys, em_cuda(0),
                  10 + s);
      unsigned long before = product_calls();
      em_tensor *o = prod_run(&p);
      char what[64];
      snprintf(what, sizeof what, "matmul case %zu %s", s, f64 ? "f64" : "f32");
      expect_reference(&p, o, f64 ? 1e-12 : 1e-5, what);
      if (product_calls() == before) fail_msg("%s: cuBLAS was not called", what);
      if (strstr(last_gemm(), "tf32")) fail_msg("%s: TF32 without being asked: %s", what, last_gemm());
      em_tensor_release(o);
      prod_free(&p);
    }
}

/* gemm's alpha, beta and a c broadcast over rows: c goes in as beta * c, cuBLAS adds. */
static void test_gemm_bias(void **state) {
  (void)state;
  if (!use_doubles("8.0", "13000", "13.1.0")) skip();
  const int64_t m = 6, k = 9, n = 5, xs[2] = {m, k}, ws[2] = {n, k}, cs[1] = {n};
  em_graph *g;
  em_var x, w, c, y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 2, xs, &x), EM_OK);
  assert_int_equal(em_input(g, "w", EM_F32, 2, ws, &w), EM_OK);
  assert_int_equal(em_input(g, "c", EM_F32, 1, cs, &c), EM_OK);
  em_var in[3] = {x, w, c};
  em_attr at[3] = {AF("alpha", 0.5), AF("beta", 2.0), AI("transB", 1)};
  if (em_apply(g, "gemm", in, 3, at, 3, &y, 1)) fail_msg("gemm: %s", em_last_error());
  em_exec *e;
  assert_int_equal(em_exec_create(g, &y, 1, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_rand(EM_F32, 2, xs, 1, -1, 1), *wt = ot_rand(EM_F32, 2, ws, 2, -1, 1),
            *ct = ot_rand(EM_F32, 1, cs, 3, -1, 1);
  em_feed f[3] = {{x, xt}, {w, wt}, {c, ct}};
  em_tensor *o = NULL;
  unsigned long before = gemm_calls();
  if (em_exec_run(e, f, 3, &o)) fail_msg("run: %s", em_last_error());
  if (gemm_calls() == before) fail_msg("gemm did not call cuBLAS");
  double *xv = ot_values(xt, NULL), *wv = ot_values(wt, NULL), *cv = ot_values(ct, NULL), want[6 * 5];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++) acc += xv[i * k + t] * wv[j * k + t];
      want[i * n + j] = 0.5 * acc + 2.0 * cv[j];
    }
  ot_expect_values(o, want, m * n, 1e-5, "gemm alpha 0.5 beta 2 transB");
  free(xv), free(wv), free(cv);
  em_tensor_release(o), em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(ct);
  em_exec_free(e);
  em_graph_free(g);
}

/* Portable mode and EMBER_CUBLAS=0 keep Ember's kernels: no cuBLAS call, and portable gives
 * the CPU's portable bits. */
static void test_portable_and_off(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  const int64_t xs[3] = {2, 5, 7}, ys[2] = {7, 4};
  prod p, cpu;
  prod_matmul(&p, EM_F32, 3, xs, 2, ys, em_cuda(0), 5);
  prod_matmul(&cpu, EM_F32, 3, xs, 2, ys, em_cpu(), 5);
  assert_int_equal(em_exec_set_mode(p.e, EM_MODE_PORTABLE), EM_OK);
  assert_int_equal(em_exec_set_mode(cpu.e, EM_MODE_PORTABLE), EM_OK);
  unsigned long before = gemm_calls();
  em_tensor *o = prod_run(&p), *want = prod_run(&cpu);
  if (gemm_calls() != before) fail_msg("portable mode called cuBLAS: %s", last_gemm());
  int64_t n;
  double *a = ot_values(o, &n), *b = ot_values(want, NULL);
  if (memcmp(a, b, sizeof(double) * (size_t)n)) fail_msg("portable GPU product differs from the CPU's bits");
  free(a), free(b);
  em_tensor_release(o), em_tensor_release(want);
  prod_free(&p), prod_free(&cpu);

  setenv("EMBER_CUBLAS", "0", 1);
  prod_matmul(&p, EM_F32, 3, xs, 2, ys, em_cuda(0), 6);
  before = gemm_calls();
  o = prod_run(&p);
  if (gemm_calls() != before) fail_msg("EMBER_CUBLAS=0 still called cuBLAS");
  expect_reference(&p, o, 1e-5, "EMBER_CUBLAS=0");
  int used = 1;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why), EM_OK);
  if (used || !strstr(why, "EMBER_CUBLAS=0")) fail_msg("em_device_library_use: used %d, %s", used, why);
  em_tensor_release(o);
  prod_free(&p);
  unsetenv("EMBER_CUBLAS");
}

/* Devices and drivers cuBLAS does not serve keep Ember's kernels, and say why. */
static void test_unsupported_devices(void **state) {
  (void)state;
  if (!use_doubles("7.0=Tesla V100 (double),9.0", "13000", "13.1.0")) skip();
  const int64_t xs[2] = {5, 7}, ys[2] = {7, 4};
  int used = 1;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why), EM_OK);
  if (used || !strstr(why, "7.5")) fail_msg("cuBLAS 13 on a V100: used %d, %s", used, why);
  assert_int_equal(em_device_library_use(em_cuda(1), "cublas", &used, why, sizeof why), EM_OK);
  if (!used || !strstr(why, "cuBLAS 13.1.0 supports CC 9.0")) fail_msg("cuBLAS 13 on an H100: used %d: %s", used, why);
  prod p;
  prod_matmul(&p, EM_F32, 2, xs, 2, ys, em_cuda(0), 7);
  unsigned long before = gemm_calls();
  em_tensor *o = prod_run(&p);
  if (gemm_calls() != before) fail_msg("a V100 called cuBLAS 13");
  expect_reference(&p, o, 1e-5, "V100 with Ember's kernels");
  em_tensor_release(o);
  prod_free(&p);

  /* cuBLAS 12 serves the V100 on a CUDA 12.4 driver ... */
  use_doubles("7.0", "12040", "12.9.1");
  assert_int_equal(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why), EM_OK);
  if (!used) fail_msg("cuBLAS 12.9 on a V100, driver 12.4: not used: %s", why);
  prod_matmul(&p, EM_F32, 2, xs, 2, ys, em_cuda(0), 8);
  before = gemm_calls();
  o = prod_run(&p);
  if (gemm_calls() == before) fail_msg("cuBLAS 12 on a V100 was not called");
  expect_reference(&p, o, 1e-5, "V100 with cuBLAS 12");
  em_tensor_release(o);
  prod_free(&p);
  /* ... but cuBLAS 13 needs a CUDA 13 driver. */
  use_doubles("9.0", "12040", "13.1.0");
  assert_int_equal(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why), EM_OK);
  if (used || !strstr(why, "CUDA 13.0 driver")) fail_msg("cuBLAS 13 on a 12.4 driver: used %d, %s", used, why);
}

/* TF32 only when asked: the executor option and EMBER_TF32=1 both ask; the product then
 * carries TF32's error (about 2^-11 relative per input), seen on inputs exact in f32. */
static void test_tf32_only_when_asked(void **state) {
  (void)state;
  if (!use_doubles("8.0", "13000", "13.1.0")) skip();
  const int64_t xs[2] = {1, 1}, ys[2] = {1, 1};
  for (int how = 0; how < 3; how++) {
    if (how == 2) setenv("EMBER_TF32", "1", 1);
    prod p;
    prod_matmul(&p, EM_F32, 2, xs, 2, ys, em_cuda(0), 9);
    if (how == 1) assert_int_equal(em_exec_set_tf32(p.e, 1), EM_OK);
    const double xv = 1.0 + ldexp(1.0, -20), yv = 3.0; /* 1 + 2^-20 is 1 in TF32 */
    em_tensor_release(p.xt), em_tensor_release(p.yt);
    p.xt = ot_tensor(EM_F32, 2, xs, &xv);
    p.yt = ot_tensor(EM_F32, 2, ys, &yv);
    em_tensor *o = prod_run(&p);
    double *v = ot_values(o, NULL);
    int tf32 = strstr(last_gemm(), "tf32") != NULL;
    if (how == 0 && (tf32 || v[0] != (float)(xv * yv)))
      fail_msg("not asked: %s gives %.9g, want exactly %.9g", last_gemm(), v[0], (double)(float)(xv * yv));
    if (how > 0 && (!tf32 || v[0] != 3.0))
      fail_msg("asked (%s): %s gives %.9g, want TF32's 3", how == 1 ? "em_exec_set_tf32" : "EMBER_TF32=1",
               last_gemm(), v[0]);
    free(v);
    em_tensor_release(o);
    prod_free(&p);
  }
  unsetenv("EMBER_TF32");
  setenv("EMBER_TF32", "yes", 1);
  em_graph *g;
  em_var x;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 2, xs, &x), EM_OK);
  em_exec *e = NULL;
  assert_int_equal(em_exec_create(g, &x, 1, em_cpu(), &e), EM_ERR_INVALID_ARGUMENT);
  if (!strstr(em_last_error(), "EMBER_TF32")) fail_msg("EMBER_TF32=yes: %s", em_last_error());
  em_graph_free(g);
  unsetenv("EMBER_TF32");
}

/* A failing cuBLAS call fails the run with the call and its status named, and the next run
 * (the failure gone) works. */
static void test_failure_reported(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  setenv("FAKECUBLAS_FAIL", "cublasGemmEx=13@1", 1); /* CUBLAS_STATUS_EXECUTION_FAILED once */
  blas_reset();
  const int64_t xs[2] = {5, 7}, ys[2] = {7, 4};
  prod p;
  prod_matmul(&p, EM_F32, 2, xs, 2, ys, em_cuda(0), 11);
  em_feed f[2] = {{p.x, p.xt}, {p.y, p.yt}};
  em_tensor *o = NULL;
  em_status s = em_exec_run(p.e, f, 2, &o);
  if (s == EM_OK) fail_msg("an injected cuBLAS failure did not fail the run");
  const char *msg = em_last_error();
  if (!strstr(msg, "cublasGemmEx") || !strstr(msg, "EXECUTION_FAILED") || !strstr(msg, "matmul"))
    fail_msg("the message does not name the call, the status and the op: %s", msg);
  o = prod_run(&p);
  expect_reference(&p, o, 1e-5, "the run after the failure");
  em_tensor_release(o);
  prod_free(&p);
  unsetenv("FAKECUBLAS_FAIL");
}

/* cuBLAS DECLINING a product (CUBLAS_STATUS_NOT_SUPPORTED or ARCH_MISMATCH: a type combination
 * a release lacks on a GPU) is not a failure: the product runs on Ember's kernels, right, and
 * the road names the call that declined and why. f64 (GemmEx) and a matvec (gemv) alike. */
static void test_decline_takes_ember_kernels(void **state) {
  (void)state;
  static const struct {
    const char *fail, *call, *status;
    em_dtype dt;
    int64_t n;
  } rows[] = {
      {"cublasGemmEx=15@1", "cublasGemmEx", "CUBLAS_STATUS_NOT_SUPPORTED", EM_F32, 4},
      {"cublasGemmEx=8@1", "cublasGemmEx", "CUBLAS_STATUS_ARCH_MISMATCH", EM_F64, 4},
      {"cublasSgemv_v2=15@1", "cublasSgemv_v2", "CUBLAS_STATUS_NOT_SUPPORTED", EM_F32, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (!use_doubles("9.0", "13000", "13.1.0")) skip();
    setenv("FAKECUBLAS_FAIL", rows[i].fail, 1);
    blas_reset();
    const int64_t xs[2] = {5, 7}, ys[2] = {7, rows[i].n};
    prod p;
    prod_matmul(&p, rows[i].dt, 2, xs, 2, ys, em_cuda(0), 31 + i);
    em_tensor *o = prod_run(&p);
    expect_reference(&p, o, rows[i].dt == EM_F64 ? 1e-12 : 1e-5, rows[i].fail);
    char plan[4096];
    em_exec_describe(p.e, plan, sizeof plan);
    if (!strstr(plan, "Ember's kernels: ") || !strstr(plan, rows[i].call) || !strstr(plan, "declined") ||
        !strstr(plan, rows[i].status))
      fail_msg("%s: the plan does not say which call declined and why:\n%s", rows[i].fail, plan);
    if (calls_of(rows[i].call) != 1) fail_msg("%s: %lu calls of it, want the 1 declined", rows[i].fail, calls_of(rows[i].call));
    em_tensor_release(o);
    prod_free(&p);
    unsetenv("FAKECUBLAS_FAIL");
  }
}

/* A cuBLAS that cannot be loaded: the products run on Ember's kernels, right, and every
 * report says why. */
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
  setenv("EMBER_LIBCUBLAS", "/nonexistent/libcublas.so.13", 1);
  unsetenv("EMBER_CUBLAS");
  em_shutdown();
  int used = 1;
  char why[256];
  assert_int_equal(em_device_library_use(em_cuda(0), "cublas", &used, why, sizeof why), EM_OK);
  if (used || !strstr(why, "/nonexistent/libcublas.so.13") || !strstr(why, "cannot be loaded"))
    fail_msg("em_device_library_use: used %d, %s", used, why);
  assert_int_equal(em_device_library_use(em_cuda(0), "cudnn?", &used, why, sizeof why), EM_ERR_NOT_FOUND);

  const int64_t m = 3, k = 4, n = 2, xs[2] = {m, k}, ys[2] = {k, n};
  em_graph *g;
  em_var x, y, out;
  assert_int_equal(em_graph_create(&g), EM_OK);
  assert_int_equal(em_input(g, "x", EM_F32, 2, xs, &x), EM_OK);
  assert_int_equal(em_input(g, "y", EM_F32, 2, ys, &y), EM_OK);
  em_var in[2] = {x, y};
  assert_int_equal(em_apply(g, "matmul", in, 2, NULL, 0, &out, 1), EM_OK);
  em_exec *e;
  assert_int_equal(em_exec_create(g, &out, 1, em_cuda(0), &e), EM_OK);
  em_tensor *xt = ot_rand(EM_F32, 2, xs, 1, -1, 1), *yt = ot_rand(EM_F32, 2, ys, 2, -1, 1), *o = NULL;
  em_feed f[2] = {{x, xt}, {y, yt}};
  if (em_exec_run(e, f, 2, &o)) fail_msg("run: %s", em_last_error());
  double *xv = ot_values(xt, NULL), *yv = ot_values(yt, NULL), want[3 * 2];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      want[i * n + j] = 0;
      for (int64_t t = 0; t < k; t++) want[i * n + j] += xv[i * k + t] * yv[t * n + j];
    }
  ot_expect_values(o, want, m * n, 1e-6, "matmul on Ember's kernels");
  char plan[2048];
  em_exec_describe(e, plan, sizeof plan);
  if (!strstr(plan, "[Ember's kernels: EMBER_LIBCUBLAS=/nonexistent/libcublas.so.13 cannot be loaded"))
    fail_msg("em_exec_describe does not say why the product did not use cuBLAS:\n%s", plan);
  /* Portable mode is Ember's kernels by definition: nothing to explain. */
  assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
  em_tensor_release(o);
  free(xv), free(yv);
  em_tensor_release(xt), em_tensor_release(yt);
  em_exec_free(e);
  em_graph_free(g);
  unsetenv("EMBER_LIBCUBLAS");
  em_shutdown();
}


/* ------------------------------------------------------------- GEMV --- */

static unsigned long gemv_calls(void) { return product_calls() - gemm_calls(); }

/* y = alpha op(A) op(B) through the gemm op with a row (M = 1) or a column (N = 1) result,
 * every transpose, f32 and f64: cublas<t>gemv runs (no GEMM call), the result matches a
 * float64 loop written here, and the op's road says "gemv". */
static void test_gemv_products(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  const int64_t K = 7, other = 5;
  for (int f64 = 0; f64 < 2; f64++)
    for (int row = 0; row < 2; row++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          em_dtype dt = f64 ? EM_F64 : EM_F32;
          int64_t M = row ? 1 : other, N = row ? other : 1;
          int64_t as[2] = {ta ? K : M, ta ? M : K}, bs[2] = {tb ? N : K, tb ? K : N};
          em_graph *g;
          em_var a, b, y;
          assert_int_equal(em_graph_create(&g), EM_OK);
          assert_int_equal(em_input(g, "a", dt, 2, as, &a), EM_OK);
          assert_int_equal(em_input(g, "b", dt, 2, bs, &b), EM_OK);
          em_var in[2] = {a, b};
          em_attr at[3] = {AF("alpha", 0.75), AI("transA", ta), AI("transB", tb)};
          if (em_apply(g, "gemm", in, 2, at, 3, &y, 1)) fail_msg("gemm: %s", em_last_error());
          em_exec *e;
          assert_int_equal(em_exec_create(g, &y, 1, em_cuda(0), &e), EM_OK);
          em_tensor *at_ = ot_rand(dt, 2, as, 40 + ta, -1, 1), *bt = ot_rand(dt, 2, bs, 50 + tb, -1, 1), *o = NULL;
          em_feed f[2] = {{a, at_}, {b, bt}};
          unsigned long gemms = gemm_calls(), gemvs = gemv_calls();
          if (em_exec_run(e, f, 2, &o)) fail_msg("run: %s", em_last_error());
          char what[96];
          snprintf(what, sizeof what, "gemm %s M %lld N %lld transA %d transB %d", f64 ? "f64" : "f32", (long long)M,
                   (long long)N, ta, tb);
          if (gemv_calls() != gemvs + 1 || gemm_calls() != gemms)
            fail_msg("%s: %lu gemv and %lu GEMM calls, want 1 and 0 (%s)", what, gemv_calls() - gemvs,
                     gemm_calls() - gemms, last_gemm());
          double *av = ot_values(at_, NULL), *bv = ot_values(bt, NULL), want[5];
          for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
              double acc = 0;
              for (int64_t t = 0; t < K; t++)
                acc += av[ta ? t * M + i : i * K + t] * bv[tb ? j * K + t : t * N + j];
              want[i * N + j] = 0.75 * acc;
            }
          ot_expect_values(o, want, M * N, f64 ? 1e-13 : 1e-5, what);
          char plan[2048];
          em_exec_describe(e, plan, sizeof plan);
          if (!strstr(plan, "cuBLAS 13.1.0 gemv")) fail_msg("%s: the road does not say gemv:\n%s", what, plan);
          free(av), free(bv);
          em_tensor_release(o), em_tensor_release(at_), em_tensor_release(bt);
          em_exec_free(e);
          em_graph_free(g);
        }
}

/* Batched matvecs (a column result per batch member, a row result per member): one strided
 * batched gemv call each; a broadcast vector. With TF32 allowed an f32 matvec stays a TF32
 * GemmEx (cublas.h: the rounding does not depend on the shape). */
static void test_gemv_batched(void **state) {
  (void)state;
  if (!use_doubles("9.0", "13000", "13.1.0")) skip();
  const struct {
    int xnd;
    int64_t xs[3];
    int ynd;
    int64_t ys[3];
    const char *entry_f32, *entry_f64;
  } shapes[] = {
      {3, {3, 5, 7}, 3, {3, 7, 1}, "cublasSgemvStridedBatched", "cublasDgemvStridedBatched"},
      {3, {4, 1, 7}, 3, {4, 7, 6}, "cublasSgemvStridedBatched", "cublasDgemvStridedBatched"},
      {3, {3, 5, 7}, 1, {7}, "cublasSgemv_v2", "cublasDgemv_v2"}, /* the rows stack: one 15-row matvec */
      {1, {7}, 3, {2, 7, 4}, "cublasSgemvStridedBatched", "cublasDgemvStridedBatched"},
  };
  for (int f64 = 0; f64 < 2; f64++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      prod p;
      prod_matmul(&p, f64 ? EM_F64 : EM_F32, shapes[s].xnd, shapes[s].xs, shapes[s].ynd, shapes[s].ys, em_cuda(0),
                  60 + s);
      const char *entry = f64 ? shapes[s].entry_f64 : shapes[s].entry_f32;
      unsigned long before = calls_of(entry), gemms = gemm_calls();
      em_tensor *o = prod_run(&p);
      char what[64];
      snprintf(what, sizeof what, "batched matvec case %zu %s", s, f64 ? "f64" : "f32");
      expect_reference(&p, o, f64 ? 1e-13 : 1e-5, what);
      if (calls_of(entry) != before + 1 || gemm_calls() != gemms)
        fail_msg("%s: %s called %lu times, GEMM %lu times (%s)", what, entry, calls_of(entry) - before,
                 gemm_calls() - gemms, last_gemm());
      em_tensor_release(o);
      prod_free(&p);
    }
  /* TF32 allowed: the f32 matvec is a TF32 GemmEx; 1 + 2^-20 is 1 in TF32. */
  const int64_t xs[2] = {1, 2}, ys[2] = {2, 1};
  prod p;
  prod_matmul(&p, EM_F32, 2, xs, 2, ys, em_cuda(0), 70);
  assert_int_equal(em_exec_set_tf32(p.e, 1), EM_OK);
  const double xv[2] = {1.0 + ldexp(1.0, -20), 0.0}, yv[2] = {3.0, 0.0};
  em_tensor_release(p.xt), em_tensor_release(p.yt);
  p.xt = ot_tensor(EM_F32, 2, xs, xv);
  p.yt = ot_tensor(EM_F32, 2, ys, yv);
  unsigned long gemvs = gemv_calls();
  em_tensor *o = prod_run(&p);
  double *v = ot_values(o, NULL);
  if (v[0] != 3.0 || gemv_calls() != gemvs || !strstr(last_gemm(), "tf32"))
    fail_msg("TF32 allowed, matvec: %.9g (%s), want TF32's 3 from a GemmEx", v[0], last_gemm());
  free(v);
  em_tensor_release(o);
  prod_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_support_rule),         cmocka_unit_test(test_products_through_cublas),
      cmocka_unit_test(test_gemm_bias),            cmocka_unit_test(test_portable_and_off),
      cmocka_unit_test(test_unsupported_devices),  cmocka_unit_test(test_tf32_only_when_asked),
      cmocka_unit_test(test_failure_reported),     cmocka_unit_test(test_decline_takes_ember_kernels),
      cmocka_unit_test(test_missing_library),
      cmocka_unit_test(test_gemv_products),        cmocka_unit_test(test_gemv_batched),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
