/* The fast mode's cuBLASLt epilogues (runtime/cublaslt.c, ops/linalg_gpu.c, exec.c's
 * plan_fusions), run on the libcuda double with the cuBLAS and cuBLASLt doubles
 * (tests/fakecublas): gemm with a bias row (beta 1) as the BIAS epilogue, a following gelu with
 * approximate "tanh" fused as GELU(_BIAS), every transpose and both bias shapes, against float64
 * loops written here; what is not fused (a full c, beta 2, relu, the erf gelu) and the
 * fallbacks with their reasons in the road: no cuBLASLt, no algorithm, a workspace too large, a
 * device cuBLAS does not serve, portable mode (no cuBLASLt, the CPU's portable bits), a failing
 * cublasLtMatmul. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecublas/fakecublas.h"
#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AS(const char *name, const char *v) { return (em_attr){.name = name, .type = EM_ATTR_STRING, .s = v}; }

/* ------------------------------------------------------- the doubles --- */

static fakecublas_call_count_fn lt_calls;
static fakecublas_text_fn lt_last;
static fakecublas_reset_fn lt_reset, blas_reset;

/* Points the library at the three doubles (devices, driver, cuBLAS version) and restarts the
 * runtime; 0 when they are not built (the test skips). */
static int use_doubles(const char *devices) {
  const char *cuda = getenv("FAKECUDA_LIB"), *blas = getenv("FAKECUBLAS_LIB"), *lt = getenv("FAKECUBLASLT_LIB");
  if (!cuda || !*cuda || !blas || !*blas || !lt || !*lt) {
    fprintf(stderr, "skipped: FAKECUDA_LIB, FAKECUBLAS_LIB and FAKECUBLASLT_LIB (the doubles) are not all set\n");
    return 0;
  }
  if (!lt_calls) {
    void *h = dlopen(lt, RTLD_NOW | RTLD_LOCAL), *hb = dlopen(blas, RTLD_NOW | RTLD_LOCAL);
    if (!h || !hb) fail_msg("cannot load the cuBLAS doubles: %s", dlerror());
    lt_calls = (fakecublas_call_count_fn)dlsym(h, "fakecublas_call_count");
    lt_last = (fakecublas_text_fn)dlsym(h, "fakecublas_last_gemm");
    lt_reset = (fakecublas_reset_fn)dlsym(h, "fakecublas_reset");
    blas_reset = (fakecublas_reset_fn)dlsym(hb, "fakecublas_reset");
    if (!lt_calls || !lt_last || !lt_reset || !blas_reset) fail_msg("%s lacks its test hooks", lt);
    /* only cuBLASLt's names: the cuBLAS entry points stay inside the cuBLASLt double */
    if (dlsym(h, "cublasGemmEx") || !dlsym(h, "cublasLtMatmul")) fail_msg("%s exports the wrong names", lt);
  }
  setenv("EMBER_LIBCUDA", cuda, 1);
  setenv("FAKECUDA_DEVICES", devices, 1);
  setenv("FAKECUDA_DRIVER", "13000", 1);
  setenv("EMBER_LIBCUBLAS", blas, 1);
  setenv("EMBER_LIBCUBLASLT", lt, 1);
  setenv("FAKECUBLAS_VERSION", "13.1.0", 1);
  unsetenv("EMBER_CUBLAS");
  unsetenv("EMBER_CUBLASLT");
  unsetenv("EMBER_MODE");
  unsetenv("EMBER_TF32");
  unsetenv("FAKECUBLAS_FAIL");
  unsetenv("FAKECUBLASLT_ALGOS");
  unsetenv("FAKECUBLASLT_WORKSPACE");
  em_shutdown();
  lt_reset();
  blas_reset();
  int n = 0;
  if (em_cuda_device_count(&n) || n < 1) fail_msg("the libcuda double shows no device: %s", em_last_error());
  return n;
}

/* ------------------------------------------------------- the graph --- */

typedef enum tail { TAIL_NONE, TAIL_GELU_TANH, TAIL_GELU_ERF, TAIL_RELU } tail;

/* y = tail(gemm(a, b[, c])) with alpha, beta, the transposes; c of shape cs (cnd 0: none). */
typedef struct net {
  em_graph *g;
  em_var a, b, c, y;
  em_tensor *at, *bt, *ct;
  int64_t m, n, k;
  int ta, tb, cnd;
  int64_t cs[2];
  double alpha, beta;
  tail t;
} net;

static void net_build(net *p, int64_t m, int64_t n, int64_t k, int ta, int tb, int cnd, const int64_t *cs,
                      double alpha, double beta, tail t, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->m = m, p->n = n, p->k = k, p->ta = ta, p->tb = tb, p->cnd = cnd, p->alpha = alpha, p->beta = beta, p->t = t;
  if (cnd) memcpy(p->cs, cs, sizeof(int64_t) * (size_t)cnd);
  const int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n};
  assert_int_equal(em_graph_create(&p->g), EM_OK);
  assert_int_equal(em_input(p->g, "a", EM_F32, 2, as, &p->a), EM_OK);
  assert_int_equal(em_input(p->g, "b", EM_F32, 2, bs, &p->b), EM_OK);
  em_var in[3] = {p->a, p->b, 0};
  if (cnd) {
    assert_int_equal(em_input(p->g, "c", EM_F32, cnd, cs, &p->c), EM_OK);
    in[2] = p->c;
  }
  em_attr at[4] = {AF("alpha", alpha), AF("beta", beta), AI("transA", ta), AI("transB", tb)};
  em_var g;
  if (em_apply(p->g, "gemm", in, cnd ? 3 : 2, at, 4, &g, 1)) fail_msg("gemm: %s", em_last_error());
  p->y = g;
  if (t == TAIL_RELU && em_apply(p->g, "relu", &g, 1, NULL, 0, &p->y, 1)) fail_msg("relu: %s", em_last_error());
  if (t == TAIL_GELU_TANH || t == TAIL_GELU_ERF) {
    em_attr ga = AS("approximate", t == TAIL_GELU_TANH ? "tanh" : "none");
    if (em_apply(p->g, "gelu", &g, 1, &ga, 1, &p->y, 1)) fail_msg("gelu: %s", em_last_error());
  }
  p->at = ot_rand(EM_F32, 2, as, seed, -1, 1);
  p->bt = ot_rand(EM_F32, 2, bs, seed + 1, -1, 1);
  if (cnd) p->ct = ot_rand(EM_F32, cnd, cs, seed + 2, -1, 1);
}

/* Runs the net on dev (portable or not); the plan's text into plan. */
static em_tensor *net_run(net *p, em_device dev, int portable, char *plan, size_t cap) {
  em_exec *e;
  if (em_exec_create(p->g, &p->y, 1, dev, &e)) fail_msg("exec: %s", em_last_error());
  if (portable) assert_int_equal(em_exec_set_mode(e, EM_MODE_PORTABLE), EM_OK);
  em_feed f[3] = {{p->a, p->at}, {p->b, p->bt}, {p->c, p->ct}};
  em_tensor *o = NULL;
  if (em_exec_run(e, f, p->cnd ? 3 : 2, &o)) fail_msg("run: %s", em_last_error());
  if (plan) em_exec_describe(e, plan, cap);
  em_exec_free(e);
  return o;
}

static void net_free(net *p) {
  em_tensor_release(p->at), em_tensor_release(p->bt), em_tensor_release(p->ct);
  em_graph_free(p->g);
}

/* The float64 reference: alpha op(A) op(B) + beta c (broadcast), then the tail. */
static double *reference(const net *p) {
  double *a = ot_values(p->at, NULL), *b = ot_values(p->bt, NULL), *c = p->cnd ? ot_values(p->ct, NULL) : NULL;
  double *y = malloc(sizeof(double) * (size_t)(p->m * p->n));
  int64_t rows = p->cnd == 2 ? p->cs[0] : 1, cols = p->cnd ? p->cs[p->cnd - 1] : 1;
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t j = 0; j < p->n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < p->k; t++)
        acc += (p->ta ? a[t * p->m + i] : a[i * p->k + t]) * (p->tb ? b[j * p->k + t] : b[t * p->n + j]);
      double v = p->alpha * acc + (c ? p->beta * c[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)] : 0.0);
      if (p->t == TAIL_RELU) v = v > 0 ? v : 0;
      if (p->t == TAIL_GELU_TANH) v = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      if (p->t == TAIL_GELU_ERF) v = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
      y[i * p->n + j] = v;
    }
  free(a), free(b), free(c);
  return y;
}

static void expect_reference(const net *p, const em_tensor *o, const char *what) {
  double *want = reference(p);
  ot_expect_values(o, want, p->m * p->n, 2e-5, what);
  free(want);
}

static void expect_has(const char *text, const char *part, const char *what) {
  if (!strstr(text, part)) fail_msg("%s: no \"%s\" in:\n%s", what, part, text);
}

/* ------------------------------------------------------------- tests --- */

/* A bias row with beta 1 ([n] and [1, n]), every transpose, alpha 0.5: one cublasLtMatmul with
 * the BIAS epilogue per run; with a gelu (tanh) after it, GELU_BIAS and the gelu step fused; a
 * gelu with no c, the GELU epilogue. */
static void test_epilogues(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const int64_t m = 6, n = 5, k = 9, c1[1] = {5}, c2[2] = {1, 5};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int shape = 0; shape < 2; shape++)
        for (int gelu = 0; gelu < 2; gelu++) {
          net p;
          net_build(&p, m, n, k, ta, tb, shape + 1, shape ? c2 : c1, 0.5, 1.0, gelu ? TAIL_GELU_TANH : TAIL_NONE,
                    100 + ta * 8 + tb * 4 + shape * 2 + gelu);
          char what[96], plan[4096];
          snprintf(what, sizeof what, "transA %d transB %d bias [%s] %s", ta, tb, shape ? "1,n" : "n",
                   gelu ? "gelu tanh" : "no tail");
          unsigned long before = lt_calls("cublasLtMatmul");
          em_tensor *o = net_run(&p, em_cuda(0), 0, plan, sizeof plan);
          expect_reference(&p, o, what);
          if (lt_calls("cublasLtMatmul") != before + 1) fail_msg("%s: %lu cublasLtMatmul calls", what,
                                                                  lt_calls("cublasLtMatmul") - before);
          expect_has(plan, gelu ? "[cuBLASLt 13.1.0, epilogue GELU_BIAS]" : "[cuBLASLt 13.1.0, epilogue BIAS]", what);
          expect_has(lt_last(), gelu ? "epilogue=GELU_BIAS" : "epilogue=BIAS", what);
          if (gelu) expect_has(plan, "runs the fused steps", what);
          em_tensor_release(o);
          net_free(&p);
        }
  /* no c: GELU alone; TF32 when asked reaches cuBLASLt as its compute type */
  net p;
  net_build(&p, 4, 3, 7, 0, 1, 0, NULL, 1.0, 0.0, TAIL_GELU_TANH, 7);
  char plan[4096];
  em_tensor *o = net_run(&p, em_cuda(0), 0, plan, sizeof plan);
  expect_reference(&p, o, "gelu without c");
  expect_has(plan, "[cuBLASLt 13.1.0, epilogue GELU]", "gelu without c");
  if (strstr(lt_last(), "tf32")) fail_msg("TF32 unasked: %s", lt_last());
  em_tensor_release(o);
  setenv("EMBER_TF32", "1", 1);
  o = net_run(&p, em_cuda(0), 0, plan, sizeof plan);
  expect_has(lt_last(), "tf32", "EMBER_TF32=1");
  expect_has(plan, "epilogue GELU (TF32 allowed)", "EMBER_TF32=1");
  unsetenv("EMBER_TF32");
  em_tensor_release(o);
  net_free(&p);
}

/* What gets no epilogue: a full c or a column (no cuBLASLt call, the road says why), a bias row
 * with beta 2 (scaling it first would round once more), the erf gelu (not fused: its own step),
 * relu (not fused: cuBLASLt's max(x, 0) would turn a NaN into 0): BIAS, then the relu step,
 * which keeps a NaN. */
static void test_not_fused(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const int64_t full[2] = {6, 5}, col[2] = {6, 1}, row[1] = {5};
  const struct {
    int cnd;
    const int64_t *cs;
    double beta;
    tail t;
    int lt, fused;
    const char *road;
  } cases[] = {
      {2, full, 1.0, TAIL_NONE, 0, 0, "[cuBLAS 13.1.0]"}, /* nothing to fuse: GemmEx as before */
      {2, full, 1.0, TAIL_GELU_TANH, 0, 1,
       "[cuBLAS 13.1.0 (then Ember's gelu kernel) (no cuBLASLt epilogue: c is not a row of biases added with beta 1)"},
      {2, col, 1.0, TAIL_GELU_TANH, 0, 1, "no cuBLASLt epilogue: c is not a row of biases"},
      {1, row, 2.0, TAIL_GELU_TANH, 0, 1, "no cuBLASLt epilogue: c is not a row of biases added with beta 1"},
      {1, row, 2.0, TAIL_NONE, 0, 0, "[cuBLAS 13.1.0]"},
      {1, row, 1.0, TAIL_GELU_ERF, 1, 0, "[cuBLASLt 13.1.0, epilogue BIAS]"},
      {1, row, 1.0, TAIL_RELU, 1, 0, "[cuBLASLt 13.1.0, epilogue BIAS]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    net p;
    net_build(&p, 6, 5, 8, 1, 0, cases[i].cnd, cases[i].cs, 1.0, cases[i].beta, cases[i].t, 200 + i);
    char what[32], plan[4096];
    snprintf(what, sizeof what, "case %zu", i);
    unsigned long before = lt_calls("cublasLtMatmul");
    em_tensor *o = net_run(&p, em_cuda(0), 0, plan, sizeof plan);
    expect_reference(&p, o, what);
    if (lt_calls("cublasLtMatmul") - before != (unsigned long)cases[i].lt)
      fail_msg("%s: %lu cublasLtMatmul calls, want %d", what, lt_calls("cublasLtMatmul") - before, cases[i].lt);
    expect_has(plan, cases[i].road, what);
    if ((strstr(plan, "runs the fused steps") != NULL) != cases[i].fused) fail_msg("%s: fused wrongly:\n%s", what, plan);
    em_tensor_release(o);
    net_free(&p);
  }
  /* relu keeps a NaN: a[0][0] NaN makes row 0 NaN before the relu and after it */
  net p;
  net_build(&p, 3, 4, 5, 0, 0, 1, (const int64_t[]){4}, 1.0, 1.0, TAIL_RELU, 9);
  ((float *)em_tensor_data(p.at))[0] = NAN;
  em_tensor *o = net_run(&p, em_cuda(0), 0, NULL, 0);
  double *v = ot_values(o, NULL);
  for (int j = 0; j < 4; j++)
    if (!isnan(v[j])) fail_msg("relu after a NaN product: y[0][%d] = %g, want NaN", j, v[j]);
  free(v);
  em_tensor_release(o);
  net_free(&p);
}

/* Where cuBLASLt is not used the results are the same within the tolerance, the gelu runs as
 * Ember's kernel, and the road says why: no library, no algorithm, a workspace above the
 * preference's 32 MiB, EMBER_CUBLASLT=0, a V100 (cuBLAS 13 needs 7.5: Ember's kernels alone). A
 * workspace the heuristic asks for within the limit is given. */
static void test_fallbacks(void **state) {
  (void)state;
  const int64_t row[1] = {5};
  const struct {
    const char *devices, *var, *value, *road;
    int lt;
  } cases[] = {
      {"9.0", "EMBER_LIBCUBLASLT", "/nonexistent/libcublasLt.so.13", "EMBER_LIBCUBLASLT=/nonexistent/libcublasLt.so.13 cannot be loaded", 0},
      {"9.0", "FAKECUBLASLT_ALGOS", "0", "cuBLASLt's heuristic found no algorithm for the GELU_BIAS epilogue", 0},
      {"9.0", "FAKECUBLASLT_WORKSPACE", "67108864", "cuBLASLt's heuristic found no algorithm", 0},
      {"9.0", "EMBER_CUBLASLT", "0", "no cuBLASLt epilogue: EMBER_CUBLASLT=0", 0},
      {"9.0", "FAKECUBLASLT_WORKSPACE", "1048576", "[cuBLASLt 13.1.0, epilogue GELU_BIAS]", 1},
      {"7.0=Tesla V100 (double)", "EMBER_CUBLAS", "", "Ember's kernels: cuBLAS 13 supports compute capability 7.5", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!use_doubles(cases[i].devices)) skip();
    if (cases[i].value[0]) setenv(cases[i].var, cases[i].value, 1);
    em_shutdown();
    net p;
    net_build(&p, 6, 5, 8, 0, 1, 1, row, 1.0, 1.0, TAIL_GELU_TANH, 300 + i);
    char what[64], plan[4096];
    snprintf(what, sizeof what, "fallback %zu (%s=%s)", i, cases[i].var, cases[i].value);
    unsigned long before = lt_calls("cublasLtMatmul");
    em_tensor *o = net_run(&p, em_cuda(0), 0, plan, sizeof plan);
    expect_reference(&p, o, what);
    if (lt_calls("cublasLtMatmul") - before != (unsigned long)cases[i].lt)
      fail_msg("%s: %lu cublasLtMatmul calls\n%s", what, lt_calls("cublasLtMatmul") - before, plan);
    expect_has(plan, cases[i].road, what);
    if (!cases[i].lt) expect_has(plan, "then Ember's gelu kernel", what);
    em_tensor_release(o);
    net_free(&p);
    unsetenv(cases[i].var);
  }
  em_shutdown();
}

/* Portable mode: no cuBLASLt (nor cuBLAS), and the CPU's portable bits, whether the executor was
 * portable from its creation (EMBER_MODE: nothing fused) or switched after it (the gelu fused
 * into the gemm, run with Ember's kernels). */
static void test_portable(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const int64_t row[2] = {1, 5};
  for (int how = 0; how < 2; how++) {
    if (how == 0) setenv("EMBER_MODE", "portable", 1);
    net p;
    net_build(&p, 7, 5, 9, 1, 1, 2, row, 0.75, 1.0, TAIL_GELU_TANH, 400);
    unsigned long before = lt_calls("cublasLtMatmul");
    char plan[4096];
    em_tensor *gpu = net_run(&p, em_cuda(0), how == 1, plan, sizeof plan),
              *cpu = net_run(&p, em_cpu(), 1, NULL, 0);
    if (lt_calls("cublasLtMatmul") != before) fail_msg("portable mode called cuBLASLt");
    if ((how == 0) == (strstr(plan, "fused") != NULL)) fail_msg("portable %d: fusion planned wrongly:\n%s", how, plan);
    double *gv = ot_values(gpu, NULL), *cv = ot_values(cpu, NULL); /* f32 to double: exact */
    for (int i = 0; i < 35; i++)
      if (memcmp(&gv[i], &cv[i], sizeof(double)))
        fail_msg("portable %d: y[%d] is %.9g on the GPU, %.9g on the CPU", how, i, gv[i], cv[i]);
    free(gv), free(cv);
    expect_reference(&p, gpu, "portable");
    em_tensor_release(gpu), em_tensor_release(cpu);
    net_free(&p);
    unsetenv("EMBER_MODE");
  }
}

/* A failing cublasLtMatmul fails the run, naming the call, its status and the op; the next run
 * works. */
static void test_failure_reported(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  setenv("FAKECUBLAS_FAIL", "cublasLtMatmul=13@1", 1);
  lt_reset();
  net p;
  net_build(&p, 4, 5, 6, 0, 0, 1, (const int64_t[]){5}, 1.0, 1.0, TAIL_NONE, 500);
  em_exec *e;
  assert_int_equal(em_exec_create(p.g, &p.y, 1, em_cuda(0), &e), EM_OK);
  em_feed f[3] = {{p.a, p.at}, {p.b, p.bt}, {p.c, p.ct}};
  em_tensor *o = NULL;
  if (em_exec_run(e, f, 3, &o) == EM_OK) fail_msg("an injected cuBLASLt failure did not fail the run");
  const char *msg = em_last_error();
  if (!strstr(msg, "cublasLtMatmul") || !strstr(msg, "EXECUTION_FAILED") || !strstr(msg, "gemm"))
    fail_msg("the message does not name the call, the status and the op: %s", msg);
  if (em_exec_run(e, f, 3, &o)) fail_msg("the run after the failure: %s", em_last_error());
  expect_reference(&p, o, "after the failure");
  em_tensor_release(o);
  em_exec_free(e);
  net_free(&p);
  unsetenv("FAKECUBLAS_FAIL");
  lt_reset();
}


/* EMBER_LOG=dispatch (set in main, read once per process) says which library was loaded and
 * which epilogue ran, in the road's words: stderr is caught in a file around one run. */
static void test_dispatch_log(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  net p;
  net_build(&p, 4, 5, 6, 0, 0, 1, (const int64_t[]){5}, 1.0, 1.0, TAIL_GELU_TANH, 600);
  FILE *log = tmpfile();
  assert_non_null(log);
  fflush(stderr);
  int saved = dup(2);
  assert_true(saved >= 0 && dup2(fileno(log), 2) >= 0);
  em_tensor *o = net_run(&p, em_cuda(0), 0, NULL, 0);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[8192];
  rewind(log);
  size_t n = fread(text, 1, sizeof text - 1, log);
  text[n] = 0;
  fclose(log);
  expect_has(text, "ember[dispatch]: cuBLASLt 13.1.0 loaded from ", "EMBER_LOG=dispatch");
  expect_has(text, "(op 'gemm'): cuBLASLt 13.1.0, epilogue GELU_BIAS", "EMBER_LOG=dispatch");
  expect_reference(&p, o, "logged run");
  em_tensor_release(o);
  net_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_epilogues), cmocka_unit_test(test_not_fused), cmocka_unit_test(test_fallbacks),
      cmocka_unit_test(test_portable),  cmocka_unit_test(test_failure_reported),
      cmocka_unit_test(test_dispatch_log),
  };
  setenv("EMBER_LOG", "dispatch", 1); /* before the first em_ call: read once per process */
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return r;
}
