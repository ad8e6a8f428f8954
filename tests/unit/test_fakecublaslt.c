/* The cuBLASLt double (tests/fakecublas, libcublasLt.so.13) alone, through its own entry
 * points on the libcuda double: what it exports, the epilogues' arithmetic against loops
 * written here (bias, RELU as max(r, 0), GELU's tanh form), and the refusals cuBLASLt makes
 * (an epilogue it does not model, a wrong attribute size, a BIAS without its pointer, no
 * algorithm, a workspace too small). Skips without FAKECUBLASLT_LIB. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake_driver.h"
#include "fakecublas/fakecublas.h"

/* cublasLt.h of CUDA 13.0 (written here, not included) */
typedef void *lt_handle, *lt_desc, *lt_layout, *lt_pref;
typedef struct { uint64_t data[8]; } lt_algo;
typedef struct {
  lt_algo algo;
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
} lt_heur;
enum { ST_SUCCESS = 0, ST_INVALID_VALUE = 7, ST_EXECUTION_FAILED = 13, ST_NOT_SUPPORTED = 15 };
enum { COMPUTE_32F = 68, COMPUTE_64F = 70, R_32F = 0, R_64F = 1 };
enum { TRANSA = 3, TRANSB = 4, EPILOGUE = 7, BIAS_POINTER = 8, MAX_WS = 1 };
enum { E_DEFAULT = 1, E_RELU = 2, E_BIAS = 4, E_RELU_BIAS = 6, E_GELU = 32, E_GELU_BIAS = 36, E_RELU_AUX = 130 };

static struct {
  void *lib;
  int (*create)(lt_handle *);
  int (*destroy)(lt_handle);
  int (*desc_create)(lt_desc *, int, int);
  int (*desc_destroy)(lt_desc);
  int (*desc_set)(lt_desc, int, const void *, size_t);
  int (*layout_create)(lt_layout *, int, uint64_t, uint64_t, int64_t);
  int (*layout_destroy)(lt_layout);
  int (*pref_create)(lt_pref *);
  int (*pref_destroy)(lt_pref);
  int (*pref_set)(lt_pref, int, const void *, size_t);
  int (*heuristic)(lt_handle, lt_desc, lt_layout, lt_layout, lt_layout, lt_layout, lt_pref, int, lt_heur *, int *);
  int (*matmul)(lt_handle, lt_desc, const void *, const void *, lt_layout, const void *, lt_layout, const void *,
                const void *, lt_layout, void *, lt_layout, const lt_algo *, void *, size_t, CUstream);
  fakecublas_reset_fn reset;
  fakecublas_text_fn last;
} lt;

static int group_setup(void **state) {
  const char *path = getenv("FAKECUBLASLT_LIB");
  if (!path || !*path) {
    fprintf(stderr, "test_fakecublaslt: FAKECUBLASLT_LIB is not set; skipping\n");
    return fake_group_setup(state);
  }
  if (!(lt.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    fprintf(stderr, "test_fakecublaslt: cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  const char *names[] = {"cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy",
                         "cublasLtMatmulDescSetAttribute", "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy",
                         "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
                         "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul",
                         "fakecublas_reset", "fakecublas_last_gemm"};
  void **slots[] = {(void **)&lt.create, (void **)&lt.destroy, (void **)&lt.desc_create, (void **)&lt.desc_destroy,
                    (void **)&lt.desc_set, (void **)&lt.layout_create, (void **)&lt.layout_destroy,
                    (void **)&lt.pref_create, (void **)&lt.pref_destroy, (void **)&lt.pref_set,
                    (void **)&lt.heuristic, (void **)&lt.matmul, (void **)&lt.reset, (void **)&lt.last};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!(*slots[i] = dlsym(lt.lib, names[i]))) {
      fprintf(stderr, "test_fakecublaslt: %s does not export %s\n", path, names[i]);
      return -1;
    }
  return fake_group_setup(state);
}

static int group_teardown(void **state) {
  if (lt.lib) lt.reset(), dlclose(lt.lib);
  return fake_group_teardown(state);
}

static int test_setup(void **state) {
  unsetenv("FAKECUBLAS_FAIL");
  unsetenv("FAKECUBLASLT_ALGOS");
  unsetenv("FAKECUBLASLT_WORKSPACE");
  if (lt.lib) lt.reset();
  return fake_test_setup(state);
}

#define NEED()                         \
  do {                                 \
    if (!fk.handle || !lt.lib) skip(); \
  } while (0)

static lt_handle start(void) {
  assert_int_equal(fake_init_with("9.0", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  lt_handle h = NULL;
  assert_int_equal(lt.create(&h), ST_SUCCESS);
  return h;
}

static CUdeviceptr upload(const void *host, size_t bytes) {
  CUdeviceptr d = 0;
  assert_int_equal(fk.MemAlloc(&d, bytes), CUDA_SUCCESS);
  if (host) assert_int_equal(fk.MemcpyHtoD(d, host, bytes), CUDA_SUCCESS);
  return d;
}

#define DP(d) ((void *)(uintptr_t)(d))

/* One described matmul: C (M x N, column-major, ld M) = op(A) op(B), A M x K, B K x N, N. */
enum { M = 3, N = 4, K = 5 };
typedef struct mm {
  lt_desc d;
  lt_layout a, b, c;
  lt_pref p;
} mm;

static void describe(mm *x, uint32_t epilogue, const void *bias, uint64_t max_ws) {
  assert_int_equal(lt.desc_create(&x->d, COMPUTE_32F, R_32F), ST_SUCCESS);
  assert_int_equal(lt.desc_set(x->d, EPILOGUE, &epilogue, sizeof epilogue), ST_SUCCESS);
  if (bias) assert_int_equal(lt.desc_set(x->d, BIAS_POINTER, &bias, sizeof bias), ST_SUCCESS);
  assert_int_equal(lt.layout_create(&x->a, R_32F, M, K, M), ST_SUCCESS);
  assert_int_equal(lt.layout_create(&x->b, R_32F, K, N, K), ST_SUCCESS);
  assert_int_equal(lt.layout_create(&x->c, R_32F, M, N, M), ST_SUCCESS);
  assert_int_equal(lt.pref_create(&x->p), ST_SUCCESS);
  assert_int_equal(lt.pref_set(x->p, MAX_WS, &max_ws, sizeof max_ws), ST_SUCCESS);
}

static void undescribe(mm *x) {
  lt.pref_destroy(x->p), lt.layout_destroy(x->c), lt.layout_destroy(x->b), lt.layout_destroy(x->a);
  lt.desc_destroy(x->d);
}

static float value(int i, int salt) { return (float)((i * 37 + salt * 11) % 19 - 9) / 8.0f; }

/* Each epilogue against a loop here: r = sum + bias[row], then max(r, 0) or the tanh GELU; a
 * NaN in A makes its row NaN before the epilogue, which RELU turns into 0 (max with 0). */
static void epilogues_match_a_loop(void **state) {
  (void)state;
  NEED();
  lt_handle h = start();
  float A[M * K], B[K * N], bias[M];
  for (int i = 0; i < M * K; i++) A[i] = value(i, 1);
  for (int i = 0; i < K * N; i++) B[i] = value(i, 2);
  for (int i = 0; i < M; i++) bias[i] = value(i, 3);
  A[2] = NAN; /* row 2 of C is NaN before the epilogue */
  CUdeviceptr dA = upload(A, sizeof A), dB = upload(B, sizeof B), db = upload(bias, sizeof bias),
              dC = upload(NULL, sizeof(float) * M * N);
  const uint32_t epis[] = {E_DEFAULT, E_RELU, E_BIAS, E_RELU_BIAS, E_GELU, E_GELU_BIAS};
  const char *names[] = {"epilogue=DEFAULT", "epilogue=RELU", "epilogue=BIAS", "epilogue=RELU_BIAS", "epilogue=GELU",
                         "epilogue=GELU_BIAS"};
  for (size_t e = 0; e < 6; e++) {
    mm x;
    describe(&x, epis[e], (epis[e] & E_BIAS) ? DP(db) : NULL, 0);
    lt_heur best;
    int found = 0;
    assert_int_equal(lt.heuristic(h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_SUCCESS);
    assert_int_equal(found, 1);
    float alpha = 1.5f, beta = 0.0f;
    assert_int_equal(lt.matmul(h, x.d, &alpha, DP(dA), x.a, DP(dB), x.b, &beta, DP(dC), x.c, DP(dC), x.c, &best.algo,
                               NULL, 0, NULL),
                     ST_SUCCESS);
    if (!strstr(lt.last(), names[e])) fail_msg("%s lacks %s", lt.last(), names[e]);
    float got[M * N];
    assert_int_equal(fk.MemcpyDtoH(got, dC, sizeof got), CUDA_SUCCESS);
    for (int j = 0; j < N; j++)
      for (int i = 0; i < M; i++) {
        float s = 0.0f;
        for (int l = 0; l < K; l++) s = s + A[i + l * M] * B[l + j * K];
        float r = alpha * s;
        if (epis[e] & E_BIAS) r = r + bias[i];
        if (epis[e] & E_RELU) r = r > 0.0f ? r : 0.0f; /* NaN > 0 is false: 0 */
        if (epis[e] & E_GELU) {
          double v = r;
          r = (float)(0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
        }
        float g = got[i + j * M];
        if (!(g == r || (isnan(g) && isnan(r))))
          fail_msg("%s: C[%d][%d] = %.9g, want %.9g", names[e], i, j, (double)g, (double)r);
      }
    undescribe(&x);
  }
  lt.destroy(h);
}

/* The refusals: an unmodelled epilogue (RELU_AUX) and f64 are NOT_SUPPORTED at the heuristic; a
 * wrong attribute size, a BIAS without its pointer, sizes that disagree are INVALID_VALUE; no
 * algorithm (FAKECUBLASLT_ALGOS=0, or a workspace above the preference's) is a count of 0; the
 * matmul refuses a workspace smaller than the algorithm's and an algorithm not from the
 * heuristic. */
static void refusals(void **state) {
  (void)state;
  NEED();
  lt_handle h = start();
  CUdeviceptr d = upload(NULL, 4096);
  lt_heur best;
  int found = 5;
  mm x;
  describe(&x, E_RELU_AUX, NULL, 0);
  assert_int_equal(lt.heuristic(h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_NOT_SUPPORTED);
  uint32_t small = 1;
  assert_int_equal(lt.desc_set(x.d, EPILOGUE, &small, 2), ST_INVALID_VALUE);
  uint32_t bias_only = E_BIAS;
  assert_int_equal(lt.desc_set(x.d, EPILOGUE, &bias_only, sizeof bias_only), ST_SUCCESS);
  assert_int_equal(lt.heuristic(h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_INVALID_VALUE); /* no pointer */
  assert_int_equal(lt.heuristic(h, x.d, x.a, x.c, x.c, x.c, x.p, 1, &best, &found), ST_INVALID_VALUE); /* B M x N */
  undescribe(&x);
  lt_desc d64;
  assert_int_equal(lt.desc_create(&d64, COMPUTE_64F, R_64F), ST_SUCCESS);
  describe(&x, E_DEFAULT, NULL, 0);
  assert_int_equal(lt.heuristic(h, d64, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_NOT_SUPPORTED);
  lt.desc_destroy(d64);
  setenv("FAKECUBLASLT_ALGOS", "0", 1);
  assert_int_equal(lt.heuristic(h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_SUCCESS);
  assert_int_equal(found, 0);
  unsetenv("FAKECUBLASLT_ALGOS");
  setenv("FAKECUBLASLT_WORKSPACE", "1024", 1); /* above the preference's 0 bytes */
  assert_int_equal(lt.heuristic(h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_SUCCESS);
  assert_int_equal(found, 0);
  undescribe(&x);
  describe(&x, E_DEFAULT, NULL, 4096);
  assert_int_equal(lt.heuristic(h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &best, &found), ST_SUCCESS);
  assert_int_equal(found, 1);
  assert_int_equal((int)best.workspaceSize, 1024);
  float one = 1.0f;
  assert_int_equal(lt.matmul(h, x.d, &one, DP(d), x.a, DP(d), x.b, &one, DP(d), x.c, DP(d), x.c, &best.algo, DP(d), 512,
                             NULL),
                   ST_INVALID_VALUE); /* 512 bytes of workspace, 1024 needed */
  lt_algo foreign;
  memset(&foreign, 0, sizeof foreign);
  assert_int_equal(lt.matmul(h, x.d, &one, DP(d), x.a, DP(d), x.b, &one, DP(d), x.c, DP(d), x.c, &foreign, DP(d), 4096,
                             NULL),
                   ST_INVALID_VALUE);
  assert_int_equal(lt.matmul(h, x.d, &one, DP(d), x.a, DP(d), x.b, &one, DP(d), x.c, DP(d), x.c, &best.algo, DP(d), 4096,
                             NULL),
                   ST_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  undescribe(&x);
  unsetenv("FAKECUBLASLT_WORKSPACE");
  lt.destroy(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(epilogues_match_a_loop, test_setup),
      cmocka_unit_test_setup(refusals, test_setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
