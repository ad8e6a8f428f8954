/* The test double of libcublas (tests/fakecublas/README.md): its products
 * against references computed here, the reduced precisions it emulates,
 * stream order through the libcuda double, the mistakes it catches (operands
 * out of bounds or freed, handles used from another context, every argument
 * cuBLAS refuses), versions and devices, fault injection.
 *
 * The libcuda double is loaded through tests/support/fake_driver.c, then
 * $FAKECUBLAS_LIB (build-tools/run_tests.sh sets it); without it every test
 * skips, saying so. Expected values come from plain loops written here and
 * from binary16 / bfloat16 / TF32 rounding done by scaling (frexp, ldexp,
 * nearbyint), never from the double's bit manipulation. The cuBLAS types and
 * values are written here from cublas_api.h (CUDA 13.0), independently of the
 * double's own definitions. */
#include <dlfcn.h>
#include <errno.h>
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "fake_driver.h"
#include "fakecublas/fakecublas.h"

/* ------------------------------------------------------- cuBLAS ABI --- */

typedef struct cublasContext *cublasHandle_t;
enum { ST_SUCCESS = 0, ST_NOT_INITIALIZED = 1, ST_ALLOC_FAILED = 3, ST_INVALID_VALUE = 7, ST_ARCH_MISMATCH = 8,
       ST_EXECUTION_FAILED = 13, ST_NOT_SUPPORTED = 15 };
enum { OP_N = 0, OP_T = 1, OP_C = 2 };
enum { PTR_HOST = 0, PTR_DEVICE = 1 };
enum { MATH_DEFAULT = 0, MATH_TENSOR_OP = 1, MATH_PEDANTIC = 2, MATH_TF32 = 3, MATH_DISALLOW_RRR = 16 };
enum { COMPUTE_16F = 64, COMPUTE_32F = 68, COMPUTE_32F_PEDANTIC = 69, COMPUTE_64F = 70, COMPUTE_64F_PEDANTIC = 71,
       COMPUTE_32I = 72,
       COMPUTE_32F_FAST_16F = 74, COMPUTE_32F_FAST_16BF = 75, COMPUTE_32F_FAST_TF32 = 77 };
enum { R_32F = 0, R_64F = 1, R_16F = 2, R_8I = 3, R_32I = 10, R_16BF = 14 };
enum { ALGO_DEFAULT = -1 };

typedef int (*fn_create)(cublasHandle_t *);
typedef int (*fn_destroy)(cublasHandle_t);
typedef int (*fn_set_stream)(cublasHandle_t, CUstream);
typedef int (*fn_get_stream)(cublasHandle_t, CUstream *);
typedef int (*fn_set_workspace)(cublasHandle_t, void *, size_t);
typedef int (*fn_set_int)(cublasHandle_t, int);
typedef int (*fn_get_int)(cublasHandle_t, int *);
typedef int (*fn_property)(int, int *);
typedef const char *(*fn_status_text)(int);
typedef int (*fn_sgemm)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int, const float *, int,
                        const float *, float *, int);
typedef int (*fn_dgemm)(cublasHandle_t, int, int, int, int, int, const double *, const double *, int, const double *,
                        int, const double *, double *, int);
typedef int (*fn_gemm_ex)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int, const void *,
                          int, int, const void *, void *, int, int, int, int);
typedef int (*fn_gemm_sb_ex)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int, long long,
                             const void *, int, int, long long, const void *, void *, int, int, long long, int, int,
                             int);
typedef int (*fn_sgemm_sb)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int, long long,
                           const float *, int, long long, const float *, float *, int, long long, int);
typedef int (*fn_dgemm_sb)(cublasHandle_t, int, int, int, int, int, const double *, const double *, int, long long,
                           const double *, int, long long, const double *, double *, int, long long, int);
typedef int (*fn_sgemv)(cublasHandle_t, int, int, int, const float *, const float *, int, const float *, int,
                        const float *, float *, int);
typedef int (*fn_dgemv)(cublasHandle_t, int, int, int, const double *, const double *, int, const double *, int,
                        const double *, double *, int);

static struct {
  void *lib; /* NULL: no double, tests skip */
  fn_create Create;
  fn_destroy Destroy;
  fn_set_stream SetStream;
  fn_get_stream GetStream;
  fn_set_workspace SetWorkspace;
  fn_set_int SetMathMode, SetPointerMode;
  fn_get_int GetMathMode, GetPointerMode, GetVersion;
  fn_property GetProperty;
  fn_status_text GetStatusName, GetStatusString;
  fn_sgemm Sgemm;
  fn_dgemm Dgemm;
  fn_gemm_ex GemmEx;
  fn_gemm_sb_ex GemmStridedBatchedEx;
  fn_sgemm_sb SgemmStridedBatched;
  fn_dgemm_sb DgemmStridedBatched;
  fn_sgemv Sgemv;
  fn_dgemv Dgemv;
  fakecublas_call_count_fn call_count;
  fakecublas_reset_fn reset;
  fakecublas_text_fn last_gemm, last_error;
  fakecublas_live_handles_fn live_handles;
  int create_without_driver; /* cublasCreate_v2 before any libcuda was loaded */
} cb;


/* ------------------------------------------------------------ set-up --- */

static int bind_double(void) {
  const char *names[] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGetStream_v2",
                         "cublasSetWorkspace_v2", "cublasSetMathMode", "cublasSetPointerMode_v2", "cublasGetMathMode",
                         "cublasGetPointerMode_v2", "cublasGetVersion_v2", "cublasGetProperty", "cublasGetStatusName",
                         "cublasGetStatusString", "cublasSgemm_v2", "cublasDgemm_v2", "cublasGemmEx",
                         "cublasGemmStridedBatchedEx", "cublasSgemmStridedBatched", "cublasDgemmStridedBatched",
                         "cublasSgemv_v2", "cublasDgemv_v2", "fakecublas_call_count", "fakecublas_reset",
                         "fakecublas_last_gemm", "fakecublas_last_error", "fakecublas_live_handles"};
  void **slots[] = {(void **)&cb.Create, (void **)&cb.Destroy, (void **)&cb.SetStream, (void **)&cb.GetStream,
                    (void **)&cb.SetWorkspace, (void **)&cb.SetMathMode, (void **)&cb.SetPointerMode,
                    (void **)&cb.GetMathMode, (void **)&cb.GetPointerMode, (void **)&cb.GetVersion,
                    (void **)&cb.GetProperty, (void **)&cb.GetStatusName, (void **)&cb.GetStatusString,
                    (void **)&cb.Sgemm, (void **)&cb.Dgemm, (void **)&cb.GemmEx, (void **)&cb.GemmStridedBatchedEx,
                    (void **)&cb.SgemmStridedBatched, (void **)&cb.DgemmStridedBatched, (void **)&cb.Sgemv,
                    (void **)&cb.Dgemv, (void **)&cb.call_count, (void **)&cb.reset, (void **)&cb.last_gemm,
                    (void **)&cb.last_error, (void **)&cb.live_handles};
  int ok = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    *slots[i] = dlsym(cb.lib, names[i]);
    if (!*slots[i]) fprintf(stderr, "test_fakecublas: FAKECUBLAS_LIB does not export %s\n", names[i]), ok = 0;
  }
  return ok;
}

/* The cuBLAS double first, alone: with no libcuda loaded, cublasCreate_v2
 * has no driver to find. Then the libcuda double. */
static int group_setup(void **state) {
  const char *path = getenv("FAKECUBLAS_LIB");
  if (!path || !*path) {
    fprintf(stderr, "test_fakecublas: FAKECUBLAS_LIB is not set (the path of build/tests/fakecublas/libcublas.so.13); "
                    "skipping every test of the cuBLAS double\n");
    return 0;
  }
  cb.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!cb.lib) {
    fprintf(stderr, "test_fakecublas: cannot load FAKECUBLAS_LIB=%s: %s\n", path, dlerror());
    return -1;
  }
  if (!bind_double()) return -1;
  cublasHandle_t h = NULL;
  cb.create_without_driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) ? -1 : cb.Create(&h);
  cb.reset();
  return fake_group_setup(state);
}

static int group_teardown(void **state) {
  if (cb.lib) {
    cb.reset(); /* drops the handles' references on the libcuda double */
    dlclose(cb.lib);
  }
  return fake_group_teardown(state);
}

static int test_setup(void **state) {
  unsetenv("FAKECUBLAS_VERSION");
  unsetenv("FAKECUBLAS_FAIL");
  if (cb.lib) cb.reset();
  return fake_test_setup(state);
}

#define NEED()                          \
  do {                                  \
    if (!fk.handle || !cb.lib) skip(); \
  } while (0)

static int contains(const char *text, const char *part) { return text && strstr(text, part) != NULL; }

#define ASSERT_HAS(text, part)                                                          \
  do {                                                                                  \
    const char *t_ = (text);                                                            \
    if (!contains(t_, part)) fail_msg("\"%s\" lacks \"%s\"", t_ ? t_ : "(null)", part); \
  } while (0)

#define DP(d) ((void *)(uintptr_t)(d))

/* A libcuda double with these devices, device 0's context current, and a
 * handle made in it. */
static cublasHandle_t start(const char *devices) {
  assert_int_equal(fake_init_with(devices, NULL), CUDA_SUCCESS);
  fake_use_device(0);
  cublasHandle_t h = NULL;
  assert_int_equal(cb.Create(&h), ST_SUCCESS);
  assert_non_null(h);
  return h;
}

static CUdeviceptr upload(const void *host, size_t bytes) {
  CUdeviceptr d = 0;
  assert_int_equal(fk.MemAlloc(&d, bytes ? bytes : 4), CUDA_SUCCESS); /* an empty operand still has an address */
  if (host && bytes) assert_int_equal(fk.MemcpyHtoD(d, host, bytes), CUDA_SUCCESS);
  return d;
}

static void download(void *host, CUdeviceptr d, size_t bytes) {
  assert_int_equal(fk.MemcpyDtoH(host, d, bytes), CUDA_SUCCESS);
}

/* Deterministic values with a fractional part (so sums round in float). */
static float value_at(int i, int salt) {
  unsigned x = (unsigned)(i * 2654435761u) ^ (unsigned)(salt * 40503u);
  x ^= x >> 13;
  return ((float)(x % 2001u) - 1000.0f) / 97.0f;
}

static void fill_f32(float *v, size_t n, int salt) {
  for (size_t i = 0; i < n; i++) v[i] = value_at((int)i, salt);
}

static void fill_nan_f32(float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = NAN;
}

/* -------------------------------------------------------- references --- */

/* op(X)[r, c] of a column-major X with leading dimension ld. */
static size_t at(int trans, int r, int c, int ld) {
  return trans == OP_N ? (size_t)r + (size_t)c * (size_t)ld : (size_t)c + (size_t)r * (size_t)ld;
}

/* C = alpha op(A) op(B) + beta C in float: the k loop in order, each term
 * an ordinary product and sum; beta 0 leaves C unread; alpha 0 leaves A and
 * B unread (the reference BLAS rules). */
static void ref_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float sum = 0.0f;
      for (int l = 0; alpha != 0.0f && l < k; l++) {
        float prod = A[at(ta, i, l, lda)] * B[at(tb, l, j, ldb)];
        sum = sum + prod;
      }
      float c = alpha * sum;
      if (beta != 0.0f) c = c + beta * C[(size_t)i + (size_t)j * (size_t)ldc];
      C[(size_t)i + (size_t)j * (size_t)ldc] = c;
    }
}

static void ref_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                      int ldb, double beta, double *C, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double sum = 0.0;
      for (int l = 0; alpha != 0.0 && l < k; l++) {
        double prod = A[at(ta, i, l, lda)] * B[at(tb, l, j, ldb)];
        sum = sum + prod;
      }
      double c = alpha * sum;
      if (beta != 0.0) c = c + beta * C[(size_t)i + (size_t)j * (size_t)ldc];
      C[(size_t)i + (size_t)j * (size_t)ldc] = c;
    }
}

/* x rounded to a binary format of p significand bits whose smallest normal
 * is 2^emin and largest finite value maxv, ties to even: by scaling to an
 * integer multiple of the quantum and nearbyint (the default rounding mode
 * is to nearest even), not by bits. */
static double round_format(double x, int p, int emin, double maxv) {
  if (isnan(x) || isinf(x) || x == 0.0) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int lead = e - 1 < emin ? emin : e - 1;
  double quantum = ldexp(1.0, lead - (p - 1));
  double r = nearbyint(x / quantum) * quantum;
  return fabs(r) > maxv ? copysign(INFINITY, x) : r;
}

static double round_f16(double x) { return round_format(x, 11, -14, 65504.0); }
static double round_bf16(double x) { return round_format(x, 8, -126, ldexp(255.0, 120)); }
static double round_tf32(double x) { return round_format(x, 11, -126, ldexp(2047.0, 117)); }

/* The bits of a value exactly representable in a format of ebits exponent
 * and mbits mantissa bits, and back, through frexp / ldexp. */
static uint16_t encode(double x, int ebits, int mbits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint16_t sign = signbit(x) ? (uint16_t)(1u << (ebits + mbits)) : 0;
  double a = fabs(x);
  if (isnan(x)) return (uint16_t)(sign | (((1u << ebits) - 1u) << mbits) | (1u << (mbits - 1)));
  if (isinf(x)) return (uint16_t)(sign | (((1u << ebits) - 1u) << mbits));
  if (a == 0.0) return sign;
  int e;
  double f = frexp(a, &e); /* a = f 2^e, f in [0.5, 1) */
  int biased = e - 1 + bias;
  if (biased <= 0) { /* subnormal: a = man 2^(1 - bias - mbits) */
    double man = ldexp(a, bias - 1 + mbits);
    assert_true(man == floor(man));
    return (uint16_t)(sign | (uint16_t)man);
  }
  double man = ldexp(f, mbits + 1) - ldexp(1.0, mbits);
  assert_true(man == floor(man)); /* exactly representable */
  return (uint16_t)(sign | (uint16_t)((unsigned)biased << mbits) | (uint16_t)man);
}

static double decode(uint16_t bits, int ebits, int mbits) {
  int bias = (1 << (ebits - 1)) - 1;
  unsigned exp = (bits >> mbits) & ((1u << ebits) - 1u), man = bits & ((1u << mbits) - 1u);
  double sign = bits >> (ebits + mbits) ? -1.0 : 1.0;
  if (exp == (1u << ebits) - 1u) return man ? NAN : sign * INFINITY;
  if (exp == 0) return sign * ldexp((double)man, 1 - bias - mbits);
  return sign * ldexp((double)(man + (1u << mbits)), (int)exp - bias - mbits);
}

static uint16_t half_bits(double x) { return encode(x, 5, 10); }
static double from_half(uint16_t b) { return decode(b, 5, 10); }
static uint16_t bf16_bits(double x) { return encode(x, 8, 7); }
static double from_bf16(uint16_t b) { return decode(b, 8, 7); }

/* --------------------------------------------------------- f32 GEMMs --- */

/* Which entry point computes an f32 product. */
enum { VIA_SGEMM, VIA_GEMM_EX };

/* One f32 GEMM of the given shape through the double, every operand with
 * padding (lda, ldb, ldc above the rows they hold), compared bit for bit
 * with ref_sgemm, padding of C included. c_nan fills C with NaN first. */
static void check_sgemm(cublasHandle_t h, int via, int ta, int tb, int m, int n, int k, float alpha, float beta,
                        int c_nan, int salt) {
  int a_rows = ta == OP_N ? m : k, a_cols = ta == OP_N ? k : m, b_rows = tb == OP_N ? k : n, b_cols = tb == OP_N ? n : k;
  int lda = a_rows + 2, ldb = b_rows + 1, ldc = m + 3;
  size_t na = (size_t)lda * (size_t)a_cols, nb = (size_t)ldb * (size_t)b_cols, nc = (size_t)ldc * (size_t)n;
  float *A = malloc((na + 1) * 4), *B = malloc((nb + 1) * 4), *C = malloc((nc + 1) * 4), *got = malloc((nc + 1) * 4);
  fill_f32(A, na, salt), fill_f32(B, nb, salt + 1);
  if (c_nan) fill_nan_f32(C, nc);
  else fill_f32(C, nc, salt + 2);
  CUdeviceptr dA = upload(A, na * 4), dB = upload(B, nb * 4), dC = upload(C, nc * 4);
  int st = via == VIA_SGEMM ? cb.Sgemm(h, ta, tb, m, n, k, &alpha, DP(dA), lda, DP(dB), ldb, &beta, DP(dC), ldc)
                            : cb.GemmEx(h, ta, tb, m, n, k, &alpha, DP(dA), R_32F, lda, DP(dB), R_32F, ldb, &beta, DP(dC),
                                        R_32F, ldc, COMPUTE_32F, ALGO_DEFAULT);
  assert_int_equal(st, ST_SUCCESS);
  download(got, dC, nc * 4);
  ref_sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  for (size_t i = 0; i < nc; i++)
    if (memcmp(&got[i], &C[i], 4) != 0)
      fail_msg("ta %d tb %d m %d n %d k %d: C[%zu] = %.9g, expected %.9g", ta, tb, m, n, k, i, got[i], C[i]);
  assert_int_equal(fk.MemFree(dA), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(dB), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(dC), CUDA_SUCCESS);
  free(A), free(B), free(C), free(got);
}

/* Odd shapes, every transpose combination (CUBLAS_OP_C is CUBLAS_OP_T for
 * real matrices), beta not 0, through both entry points. */
static void sgemm_matches_a_plain_loop(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  const int ops[] = {OP_N, OP_T, OP_C};
  for (int via = VIA_SGEMM; via <= VIA_GEMM_EX; via++)
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) check_sgemm(h, via, ops[a], ops[b], 5, 3, 7, 1.5f, -0.75f, 0, 10 * a + b);
  check_sgemm(h, VIA_SGEMM, OP_T, OP_N, 1, 1, 1, 2.0f, 0.5f, 0, 1);
  check_sgemm(h, VIA_SGEMM, OP_N, OP_T, 17, 13, 29, -0.3f, 1.25f, 0, 2);
  assert_int_equal(cb.call_count("cublasSgemm_v2"), 11);
  assert_int_equal(cb.call_count("cublasGemmEx"), 9);
  assert_int_equal(cb.Destroy(h), ST_SUCCESS);
}

/* beta 0: C is not read, so NaN in it does not come through (BLAS). */
static void beta_zero_does_not_read_c(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  for (int via = VIA_SGEMM; via <= VIA_GEMM_EX; via++) {
    check_sgemm(h, via, OP_N, OP_N, 4, 6, 5, 1.0f, 0.0f, 1, 3);
    check_sgemm(h, via, OP_T, OP_T, 3, 2, 9, -2.5f, 0.0f, 1, 4);
  }
}

/* k 0 gives beta C (and zeros with beta 0, NaN in C or not); alpha 0 reads
 * neither A nor B (NaN there does not come through). */
static void k_zero_and_alpha_zero(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  check_sgemm(h, VIA_SGEMM, OP_N, OP_N, 3, 4, 0, 1.0f, 0.5f, 0, 5);
  check_sgemm(h, VIA_GEMM_EX, OP_T, OP_N, 3, 4, 0, 2.0f, 0.0f, 1, 6);
  enum { M = 3, N = 2, K = 4 };
  float A[M * K], B[K * N], C[M * N], got[M * N], alpha = 0.0f, beta = -2.0f;
  fill_nan_f32(A, M * K), fill_nan_f32(B, K * N), fill_f32(C, M * N, 7);
  CUdeviceptr dA = upload(A, sizeof A), dB = upload(B, sizeof B), dC = upload(C, sizeof C);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, &alpha, DP(dA), M, DP(dB), K, &beta, DP(dC), M), ST_SUCCESS);
  download(got, dC, sizeof got);
  for (int i = 0; i < M * N; i++) assert_true(got[i] == -2.0f * C[i]);
}

/* m or n 0: nothing is issued and C stays as it was. */
static void empty_products_issue_nothing(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  float C[4] = {1, 2, 3, 4}, got[4], one = 1.0f, zero = 0.0f;
  CUdeviceptr dC = upload(C, sizeof C);
  size_t pending = fk.pending_ops();
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 0, 2, 2, &one, DP(dC), 1, DP(dC), 2, &zero, DP(dC), 1), ST_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 0, 2, &one, DP(dC), 2, DP(dC), 2, &zero, DP(dC), 2), ST_SUCCESS);
  assert_int_equal(cb.SgemmStridedBatched(h, OP_N, OP_N, 2, 2, 2, &one, DP(dC), 2, 4, DP(dC), 2, 4, &zero, DP(dC), 2,
                                          4, 0),
                   ST_SUCCESS);
  assert_int_equal(cb.Sgemv(h, OP_N, 0, 3, &one, DP(dC), 1, DP(dC), 1, &zero, DP(dC), 1), ST_SUCCESS);
  assert_int_equal(fk.pending_ops(), pending);
  ASSERT_HAS(cb.last_gemm(), "issued=no");
  download(got, dC, sizeof got);
  assert_memory_equal(got, C, sizeof C);
}

/* Strided batched GEMMs, one operand shared by every member (stride 0),
 * gaps between the members of the others, each member against the loop. */
static void strided_batched_with_a_shared_operand(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  enum { M = 4, N = 3, K = 5, BATCH = 3, LDA = K + 1, LDB = K, LDC = M + 2 };
  const long long sa = LDA * M + 7, sb = 0, sc = LDC * N + 3; /* A is op T: K x M stored */
  size_t na = (size_t)(sa * (BATCH - 1) + LDA * M), nb = LDB * N, nc = (size_t)(sc * (BATCH - 1) + LDC * N);
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *got = malloc(nc * 4), alpha = 0.5f,
        beta = 2.0f;
  fill_f32(A, na, 20), fill_f32(B, nb, 21), fill_f32(C, nc, 22);
  CUdeviceptr dA = upload(A, na * 4), dB = upload(B, nb * 4), dC = upload(C, nc * 4);
  for (int via = 0; via < 2; via++) {
    int st = via ? cb.GemmStridedBatchedEx(h, OP_T, OP_N, M, N, K, &alpha, DP(dA), R_32F, LDA, sa, DP(dB), R_32F, LDB,
                                           sb, &beta, DP(dC), R_32F, LDC, sc, BATCH, COMPUTE_32F, ALGO_DEFAULT)
                 : cb.SgemmStridedBatched(h, OP_T, OP_N, M, N, K, &alpha, DP(dA), LDA, sa, DP(dB), LDB, sb, &beta,
                                          DP(dC), LDC, sc, BATCH);
    assert_int_equal(st, ST_SUCCESS);
    for (int b = 0; b < BATCH; b++)
      ref_sgemm(OP_T, OP_N, M, N, K, alpha, A + sa * b, LDA, B + sb * b, LDB, beta, C + sc * b, LDC);
    download(got, dC, nc * 4);
    for (size_t i = 0; i < nc; i++)
      if (memcmp(&got[i], &C[i], 4) != 0) fail_msg("via %d: C[%zu] = %.9g, expected %.9g", via, i, got[i], C[i]);
  }
  ASSERT_HAS(cb.last_gemm(), "batch=3 strideA=31 strideB=0 strideC=21");
  free(A), free(B), free(C), free(got);
}

/* The description of the last product names everything it was asked. */
static void last_gemm_describes_the_call(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.6");
  assert_string_equal(cb.last_gemm(), "");
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cb.SetStream(h, s), ST_SUCCESS);
  assert_int_equal(cb.SetMathMode(h, MATH_TF32 | MATH_DISALLOW_RRR), ST_SUCCESS);
  float one = 1.0f;
  CUdeviceptr d = upload(NULL, 4096);
  assert_int_equal(cb.GemmEx(h, OP_T, OP_N, 3, 5, 7, &one, DP(d), R_32F, 9, DP(d), R_32F, 8, &one, DP(d), R_32F, 4,
                             COMPUTE_32F, ALGO_DEFAULT),
                   ST_SUCCESS);
  char want[512];
  snprintf(want, sizeof want,
           "entry=cublasGemmEx transa=T transb=N m=3 n=5 k=7 lda=9 ldb=8 ldc=4 batch=1 strideA=0 strideB=0 strideC=0 "
           "A=CUDA_R_32F B=CUDA_R_32F C=CUDA_R_32F compute=CUBLAS_COMPUTE_32F precision=tf32 "
           "math=CUBLAS_TF32_TENSOR_OP_MATH|DISALLOW_REDUCED_PRECISION_REDUCTION pointer_mode=host stream=%p issued=yes",
           (void *)s);
  assert_string_equal(cb.last_gemm(), want);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
}

/* ----------------------------------------------------------- f64 --- */

static void check_dgemm(cublasHandle_t h, int via, int ta, int tb, int m, int n, int k, double alpha, double beta,
                        int salt) {
  int a_rows = ta == OP_N ? m : k, a_cols = ta == OP_N ? k : m, b_rows = tb == OP_N ? k : n, b_cols = tb == OP_N ? n : k;
  int lda = a_rows + 1, ldb = b_rows + 3, ldc = m + 2;
  size_t na = (size_t)lda * (size_t)a_cols, nb = (size_t)ldb * (size_t)b_cols, nc = (size_t)ldc * (size_t)n;
  double *A = malloc(na * 8), *B = malloc(nb * 8), *C = malloc(nc * 8), *got = malloc(nc * 8);
  /* values with more bits than a float holds: a float computation shows */
  for (size_t i = 0; i < na; i++) A[i] = value_at((int)i, salt) * (1.0 + ldexp(1.0, -40));
  for (size_t i = 0; i < nb; i++) B[i] = value_at((int)i, salt + 1) / 3.0;
  for (size_t i = 0; i < nc; i++) C[i] = value_at((int)i, salt + 2) / 7.0;
  CUdeviceptr dA = upload(A, na * 8), dB = upload(B, nb * 8), dC = upload(C, nc * 8);
  int st;
  if (via == 0)
    st = cb.Dgemm(h, ta, tb, m, n, k, &alpha, DP(dA), lda, DP(dB), ldb, &beta, DP(dC), ldc);
  else if (via == 1)
    st = cb.GemmEx(h, ta, tb, m, n, k, &alpha, DP(dA), R_64F, lda, DP(dB), R_64F, ldb, &beta, DP(dC), R_64F, ldc,
                   COMPUTE_64F, ALGO_DEFAULT);
  else
    st = cb.DgemmStridedBatched(h, ta, tb, m, n, k, &alpha, DP(dA), lda, 0, DP(dB), ldb, 0, &beta, DP(dC), ldc, 0, 1);
  assert_int_equal(st, ST_SUCCESS);
  download(got, dC, nc * 8);
  ref_dgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  for (size_t i = 0; i < nc; i++)
    if (memcmp(&got[i], &C[i], 8) != 0) fail_msg("f64 via %d ta %d tb %d: C[%zu] = %.17g, expected %.17g", via, ta, tb, i,
                                                 got[i], C[i]);
  free(A), free(B), free(C), free(got);
}

static void f64_gemms_compute_in_double(void **state) {
  (void)state;
  NEED();
  fake_set("FAKECUBLAS_VERSION", "12.9.1"); /* a 7.0 device: cuBLAS 12 */
  cublasHandle_t h = start("7.0");
  for (int via = 0; via < 3; via++)
    for (int ta = OP_N; ta <= OP_T; ta++)
      for (int tb = OP_N; tb <= OP_T; tb++) check_dgemm(h, via, ta, tb, 6, 5, 9, 0.7, via == 1 ? 0.0 : -1.3, via + ta);
  ASSERT_HAS(cb.last_gemm(), "precision=fp64");
}

/* ------------------------------------------------------ f16 / bf16 --- */

/* A 1 x 2 row A = [1, 0.5] times 2 x n columns (b0, b1): C[j] = b0 + b1 / 2,
 * exact in float, then rounded once to C's type. Each column is a case of
 * the rounding: ties to even, carries, overflow, subnormals, inf and NaN. */
typedef struct narrow_case {
  double b0, b1;
} narrow_case;

static void check_narrow_output(cublasHandle_t h, int type, const narrow_case *cases, int n) {
  int half = type == R_16F;
  uint16_t A[2], *B = malloc((size_t)n * 4), *C = malloc((size_t)n * 2);
  A[0] = half ? half_bits(1.0) : bf16_bits(1.0);
  A[1] = half ? half_bits(0.5) : bf16_bits(0.5);
  for (int j = 0; j < n; j++) {
    B[2 * j] = half ? half_bits(cases[j].b0) : bf16_bits(cases[j].b0);
    B[2 * j + 1] = half ? half_bits(cases[j].b1) : bf16_bits(cases[j].b1);
  }
  CUdeviceptr dA = upload(A, sizeof A), dB = upload(B, (size_t)n * 4), dC = upload(NULL, (size_t)n * 2);
  float one = 1.0f, zero = 0.0f;
  assert_int_equal(cb.GemmEx(h, OP_N, OP_N, 1, n, 2, &one, DP(dA), type, 1, DP(dB), type, 2, &zero, DP(dC), type, 1,
                             COMPUTE_32F, ALGO_DEFAULT),
                   ST_SUCCESS);
  download(C, dC, (size_t)n * 2);
  for (int j = 0; j < n; j++) {
    double exact = cases[j].b0 + cases[j].b1 / 2, want = half ? round_f16(exact) : round_bf16(exact);
    double got = half ? from_half(C[j]) : from_bf16(C[j]);
    if (!(got == want || (isnan(got) && isnan(want))))
      fail_msg("%s case %d: %.10g + %.10g / 2 gave %.10g (bits 0x%04x), expected %.10g", half ? "f16" : "bf16", j,
               cases[j].b0, cases[j].b1, got, C[j], want);
  }
  free(B), free(C);
}

static void f16_outputs_round_to_nearest_even(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  const narrow_case cases[] = {
      {1.0, ldexp(1.0, -10)},                      /* 1 + 2^-11: a tie, to 1 (even) */
      {1.0, 3 * ldexp(1.0, -10)},                  /* 1 + 3 2^-11: a tie, up to 1 + 2^-9 (even) */
      {1.0 + ldexp(1.0, -10), ldexp(1.0, -10)},    /* 1 + 3 2^-11 from an odd start: up */
      {1.0, ldexp(1.0, -10) + ldexp(1.0, -19)},    /* above the tie: up to 1 + 2^-10 */
      {2047.0, 1.0},                               /* 2047.5: a tie at ulp 1 above 1024, to 2048 */
      {65504.0, 16.0},                             /* 65512: below the tie, 65504 */
      {65504.0, 32.0},                             /* 65520: a tie at the top, to infinity */
      {-65504.0, -64.0},                           /* -65536: -infinity */
      {ldexp(1.0, -24), ldexp(1.0, -24)},          /* 1.5 subnormal units: a tie, to 2 units */
      {0.0, ldexp(1.0, -24)},                      /* half a unit: a tie, to 0 */
      {ldexp(1.0, -14), -ldexp(1.0, -24)},         /* just below the smallest normal */
      {INFINITY, 1.0},
      {-INFINITY, 2.0},
      {NAN, 1.0},
      {INFINITY, -INFINITY},                       /* inf - inf: NaN */
      {-3.0, 0.25},
  };
  check_narrow_output(h, R_16F, cases, (int)(sizeof cases / sizeof cases[0]));
}

static void bf16_outputs_round_to_nearest_even(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  const narrow_case cases[] = {
      {1.0, ldexp(1.0, -7)},                      /* 1 + 2^-8: a tie, to 1 */
      {1.0, 3 * ldexp(1.0, -7)},                  /* 1 + 3 2^-8: a tie, up to 1 + 2^-6 */
      {1.0, ldexp(1.0, -7) + ldexp(1.0, -14)},    /* above the tie: up */
      {ldexp(255.0, 120), ldexp(1.0, 120)},       /* the largest bf16 + half an ulp: a tie, to infinity */
      {ldexp(254.0, 120), ldexp(1.0, 120)},       /* from an even mantissa: stays */
      {ldexp(1.0, -133), ldexp(1.0, -133)},       /* 1.5 subnormal units: to 2 */
      {0.0, ldexp(1.0, -133)},                    /* half a unit: to 0 */
      {NAN, 0.0},
      {-INFINITY, 1.0},
      {300.0, 1.5},
  };
  check_narrow_output(h, R_16BF, cases, (int)(sizeof cases / sizeof cases[0]));
}

/* binary16 / bfloat16 inputs with a float C (and with their own type as C),
 * subnormal binary16 inputs among them: each input exactly a float, the
 * sum a float loop, C's own type rounded once from the float result. */
static void narrow_inputs_against_a_loop(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("9.0");
  enum { M = 3, N = 4, K = 6 };
  for (int half = 0; half < 2; half++)
    for (int narrow_c = 0; narrow_c < 2; narrow_c++)
      for (int ta = OP_N; ta <= OP_T; ta++) {
        int type = half ? R_16F : R_16BF, lda = ta == OP_N ? M + 1 : K, ctype = narrow_c ? type : R_32F;
        double a[(M + 1) * K], b[K * N], c[M * N];
        uint16_t A[(M + 1) * K], B[K * N], C16[M * N], got16[M * N];
        float C32[M * N], got32[M * N], alpha = 0.5f, beta = 2.0f;
        for (int i = 0; i < (M + 1) * K; i++) a[i] = (double)((i * 7) % 33 - 16) / 8.0;
        for (int i = 0; i < K * N; i++) b[i] = (double)((i * 5) % 29 - 14) / 8.0;
        for (int i = 0; i < M * N; i++) c[i] = (double)(i % 9 - 4) / 4.0;
        if (half) a[1] = ldexp(3.0, -24), b[2] = ldexp(1.0, -24); /* subnormal inputs */
        for (int i = 0; i < (M + 1) * K; i++) A[i] = half ? half_bits(a[i]) : bf16_bits(a[i]);
        for (int i = 0; i < K * N; i++) B[i] = half ? half_bits(b[i]) : bf16_bits(b[i]);
        for (int i = 0; i < M * N; i++) C16[i] = half ? half_bits(c[i]) : bf16_bits(c[i]), C32[i] = (float)c[i];
        CUdeviceptr dA = upload(A, sizeof A), dB = upload(B, sizeof B),
                    dC = narrow_c ? upload(C16, sizeof C16) : upload(C32, sizeof C32);
        assert_int_equal(cb.GemmEx(h, ta, OP_N, M, N, K, &alpha, DP(dA), type, lda, DP(dB), type, K, &beta, DP(dC),
                                   ctype, M, COMPUTE_32F, ALGO_DEFAULT),
                         ST_SUCCESS);
        if (narrow_c) download(got16, dC, sizeof got16);
        else download(got32, dC, sizeof got32);
        for (int j = 0; j < N; j++)
          for (int i = 0; i < M; i++) {
            float sum = 0.0f; /* the inputs are exact in float; the sum rounds as float */
            for (int l = 0; l < K; l++) {
              float prod = (float)a[at(ta, i, l, lda)] * (float)b[l + j * K];
              sum = sum + prod;
            }
            float r = 0.5f * sum;
            r = r + 2.0f * (float)c[i + j * M];
            double want = !narrow_c ? (double)r : half ? round_f16(r) : round_bf16(r);
            double got = !narrow_c ? got32[i + j * M] : half ? from_half(got16[i + j * M]) : from_bf16(got16[i + j * M]);
            if (got != want) fail_msg("half %d narrow C %d ta %d: C(%d,%d) = %.10g, expected %.10g", half, narrow_c, ta,
                                      i, j, got, want);
          }
      }
}

/* ------------------------------------------------------- precision --- */

/* A column A (m x 1) times B = [b] (1 x 1): C[i] = A[i] b with each input
 * rounded as the product rounds its inputs. Checked against rounder(A[i])
 * rounder(b) computed in double (exact: both have at most 11 bits). */
typedef double (*rounder_fn)(double);

static double no_rounding(double x) { return x; }

static const float tf32_probe[] = {
    1.0f + 0x1p-11f,               /* a tie: to 1 */
    1.0f + 0x3p-11f,               /* a tie: up to 1 + 2^-9 */
    1.0f + 0x1p-11f + 0x1p-20f,    /* above the tie: to 1 + 2^-10 */
    -(1.0f + 0x1p-12f),            /* below the tie: to -1 */
    0x1.fffffep127f,               /* the largest float: to infinity */
    0x3p-137f,                     /* a subnormal tie at TF32's last place: to 2^-135 */
    1.0f + 0x1p-20f,               /* a binary16 / bfloat16 rounding shows too */
    3.0e-6f,                       /* below binary16's normals */
};
enum { N_PROBE = sizeof tf32_probe / sizeof tf32_probe[0] };

/* Issues the probe through `call` and checks every C[i]. */
static void check_rounding(cublasHandle_t h, int via, int compute, float b, rounder_fn rounder, const char *label) {
  float got[N_PROBE];
  CUdeviceptr dA = upload(tf32_probe, sizeof tf32_probe), dB = upload(&b, 4), dC = upload(NULL, sizeof got);
  float one = 1.0f, zero = 0.0f;
  int st = via == VIA_SGEMM ? cb.Sgemm(h, OP_N, OP_N, N_PROBE, 1, 1, &one, DP(dA), N_PROBE, DP(dB), 1, &zero, DP(dC),
                                       N_PROBE)
                            : cb.GemmEx(h, OP_N, OP_N, N_PROBE, 1, 1, &one, DP(dA), R_32F, N_PROBE, DP(dB), R_32F, 1,
                                        &zero, DP(dC), R_32F, N_PROBE, compute, ALGO_DEFAULT);
  assert_int_equal(st, ST_SUCCESS);
  download(got, dC, sizeof got);
  for (int i = 0; i < N_PROBE; i++) {
    double want = (double)(float)(rounder(tf32_probe[i]) * rounder(b));
    if (!((double)got[i] == want)) fail_msg("%s: %a x %a gave %a, expected %a", label, tf32_probe[i], b, got[i], want);
  }
  ASSERT_HAS(cb.last_gemm(), label);
}

/* TF32 when asked either way (CUBLAS_COMPUTE_32F_FAST_TF32, or COMPUTE_32F
 * under CUBLAS_TF32_TENSOR_OP_MATH, Sgemm included), on A and on B; not
 * under PEDANTIC, not by default, not below compute capability 8.0. */
static void tf32_when_asked_and_available(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  float b_exact = 1.0f, b_rounds = 1.0f + 0x1p-11f + 0x1p-22f; /* B to 1 + 2^-10 in TF32 */
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F, b_rounds, no_rounding, "precision=fp32");
  check_rounding(h, VIA_SGEMM, 0, b_rounds, no_rounding, "precision=fp32");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_TF32, b_exact, round_tf32, "precision=tf32");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_TF32, b_rounds, round_tf32, "precision=tf32");
  assert_int_equal(cb.SetMathMode(h, MATH_TF32), ST_SUCCESS);
  check_rounding(h, VIA_SGEMM, 0, b_rounds, round_tf32, "precision=tf32");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F, b_rounds, round_tf32, "precision=tf32");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_PEDANTIC, b_rounds, no_rounding, "precision=fp32");
  assert_int_equal(cb.SetMathMode(h, MATH_TF32 | MATH_DISALLOW_RRR), ST_SUCCESS);
  check_rounding(h, VIA_SGEMM, 0, b_rounds, round_tf32, "precision=tf32");
  assert_int_equal(cb.SetMathMode(h, MATH_PEDANTIC), ST_SUCCESS);
  check_rounding(h, VIA_SGEMM, 0, b_rounds, no_rounding, "precision=fp32");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_TF32, b_rounds, round_tf32, "precision=tf32");
  int mode = -1;
  assert_int_equal(cb.GetMathMode(h, &mode), ST_SUCCESS);
  assert_int_equal(mode, MATH_PEDANTIC);
  assert_int_equal(cb.Destroy(h), ST_SUCCESS);
  /* A Turing has no TF32 tensor cores: the same requests compute in fp32. */
  cb.reset();
  h = start("7.5");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_TF32, b_rounds, no_rounding, "precision=fp32");
  assert_int_equal(cb.SetMathMode(h, MATH_TF32), ST_SUCCESS);
  check_rounding(h, VIA_SGEMM, 0, b_rounds, no_rounding, "precision=fp32");
}

/* The _FAST_16F / _FAST_16BF compute types round f32 inputs to binary16 /
 * bfloat16 (CUBLAS_TENSOR_OP_MATH is _FAST_16F for COMPUTE_32F, cublas_api.h);
 * binary16 needs tensor cores (7.0), bfloat16 8.0. */
static void fast_16f_and_16bf_round_inputs(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  float b = 1.0f + 0x1p-9f + 0x1p-12f;
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_16F, b, round_f16, "precision=fp16-inputs");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_16BF, b, round_bf16, "precision=bf16-inputs");
  assert_int_equal(cb.SetMathMode(h, MATH_TENSOR_OP), ST_SUCCESS);
  check_rounding(h, VIA_SGEMM, 0, b, round_f16, "precision=fp16-inputs");
  cb.reset();
  fake_set("FAKECUBLAS_VERSION", "12.9.1");
  h = start("6.1");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_16F, b, no_rounding, "precision=fp32");
  check_rounding(h, VIA_GEMM_EX, COMPUTE_32F_FAST_16BF, b, no_rounding, "precision=fp32");
}

/* ------------------------------------------------------ pointer mode --- */

/* Device pointer mode: alpha and beta are read from device memory when the
 * product runs, in stream order (a later copy into them does not reach an
 * earlier product; an earlier one does). Host pointer mode: read at the
 * call. */
static void scalars_by_pointer_mode(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 1), CUDA_SUCCESS);
  assert_int_equal(cb.SetStream(h, s), ST_SUCCESS);
  enum { M = 3, N = 2, K = 4 };
  float A[M * K], B[K * N], C[M * N], C2[M * N], got[M * N], two = 2.0f, three = 3.0f, beta0 = 0.0f, quarter = 0.25f;
  fill_f32(A, M * K, 30), fill_f32(B, K * N, 31), fill_f32(C, M * N, 32);
  CUdeviceptr dA = upload(A, sizeof A), dB = upload(B, sizeof B), dC = upload(C, sizeof C), dC2 = upload(C, sizeof C);
  CUdeviceptr d_alpha = upload(&two, 4), d_beta = upload(&quarter, 4);
  int mode = -1;
  assert_int_equal(cb.GetPointerMode(h, &mode), ST_SUCCESS);
  assert_int_equal(mode, PTR_HOST);
  assert_int_equal(cb.SetPointerMode(h, PTR_DEVICE), ST_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, DP(d_alpha), DP(dA), M, DP(dB), K, DP(d_beta), DP(dC), M),
                   ST_SUCCESS);
  assert_int_equal(fk.MemcpyHtoDAsync(d_alpha, &three, 4, s), CUDA_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, DP(d_alpha), DP(dA), M, DP(dB), K, DP(d_beta), DP(dC2), M),
                   ST_SUCCESS);
  ASSERT_HAS(cb.last_gemm(), "pointer_mode=device");
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  memcpy(C2, C, sizeof C);
  ref_sgemm(OP_N, OP_N, M, N, K, 2.0f, A, M, B, K, 0.25f, C, M);
  ref_sgemm(OP_N, OP_N, M, N, K, 3.0f, A, M, B, K, 0.25f, C2, M);
  download(got, dC, sizeof got);
  assert_memory_equal(got, C, sizeof C);
  download(got, dC2, sizeof got);
  assert_memory_equal(got, C2, sizeof C2);
  /* host mode: the value at the call counts, not the variable later */
  assert_int_equal(cb.SetPointerMode(h, PTR_HOST), ST_SUCCESS);
  float alpha = 1.5f;
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, &alpha, DP(dA), M, DP(dB), K, &beta0, DP(dC), M), ST_SUCCESS);
  alpha = 100.0f;
  ref_sgemm(OP_N, OP_N, M, N, K, 1.5f, A, M, B, K, 0.0f, C, M);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  download(got, dC, sizeof got);
  assert_memory_equal(got, C, sizeof C);
  (void)alpha;
  /* f64 products read 8-byte scalars from the device */
  double dalpha = -0.5, dbeta = 0.0, X[4] = {1, 2, 3, 4}, Y[4], dgot[4];
  CUdeviceptr dX = upload(X, sizeof X), dY = upload(NULL, sizeof Y), da = upload(&dalpha, 8), db = upload(&dbeta, 8);
  assert_int_equal(cb.SetPointerMode(h, PTR_DEVICE), ST_SUCCESS);
  assert_int_equal(cb.Dgemm(h, OP_N, OP_N, 2, 2, 2, DP(da), DP(dX), 2, DP(dX), 2, DP(db), DP(dY), 2), ST_SUCCESS);
  ref_dgemm(OP_N, OP_N, 2, 2, 2, -0.5, X, 2, X, 2, 0.0, Y, 2);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  download(dgot, dY, sizeof dgot);
  assert_memory_equal(dgot, Y, sizeof Y);
}

/* ----------------------------------------------------------- streams --- */

/* A product is work on the handle's stream: it runs after the copies issued
 * before it, nothing runs at the call, and a copy back issued after it sees
 * its result only once the stream is synchronised. */
static void products_run_in_stream_order(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  CUstream s, got_s = NULL;
  assert_int_equal(fk.StreamCreate(&s, 1), CUDA_SUCCESS);
  assert_int_equal(cb.SetStream(h, s), ST_SUCCESS);
  assert_int_equal(cb.GetStream(h, &got_s), ST_SUCCESS);
  assert_ptr_equal(got_s, s);
  enum { M = 5, N = 4, K = 3 };
  float A[M * K], B[K * N], C[M * N], got[M * N], one = 1.0f, zero = 0.0f;
  fill_f32(A, M * K, 40), fill_f32(B, K * N, 41);
  CUdeviceptr dA = upload(NULL, sizeof A), dB = upload(NULL, sizeof B), dC = upload(NULL, sizeof C);
  size_t pending = fk.pending_ops();
  assert_int_equal(fk.MemcpyHtoDAsync(dA, A, sizeof A, s), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoDAsync(dB, B, sizeof B, s), CUDA_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, &one, DP(dA), M, DP(dB), K, &zero, DP(dC), M), ST_SUCCESS);
  assert_int_equal(fk.pending_ops(), pending + 3); /* the product waits with the copies */
  for (int i = 0; i < M * N; i++) got[i] = -7.0f;
  assert_int_equal(fk.MemcpyDtoHAsync(got, dC, sizeof got, s), CUDA_SUCCESS);
  assert_true(got[0] == -7.0f); /* not read back yet */
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  ref_sgemm(OP_N, OP_N, M, N, K, 1.0f, A, M, B, K, 0.0f, C, M);
  assert_memory_equal(got, C, sizeof C);
  char want[64];
  snprintf(want, sizeof want, "stream=%p", (void *)s);
  ASSERT_HAS(cb.last_gemm(), want);
  /* Back to the legacy default stream: ordered after the blocking work of
   * the context, here a synchronous copy's */
  assert_int_equal(cb.SetStream(h, NULL), ST_SUCCESS);
  assert_int_equal(cb.GetStream(h, &got_s), ST_SUCCESS);
  assert_null(got_s);
  fill_f32(A, M * K, 42);
  assert_int_equal(fk.MemcpyHtoD(dA, A, sizeof A), CUDA_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, &one, DP(dA), M, DP(dB), K, &zero, DP(dC), M), ST_SUCCESS);
  download(got, dC, sizeof got); /* a synchronous copy on the legacy stream waits for the product */
  ref_sgemm(OP_N, OP_N, M, N, K, 1.0f, A, M, B, K, 0.0f, C, M);
  assert_memory_equal(got, C, sizeof C);
}

/* -------------------------------------------------------- bad memory --- */

/* An operand that does not fit its allocation, freed memory, a host
 * pointer: the call succeeds (cuBLAS does not look at the memory), the
 * work fails when it runs, as a faulting kernel, with the double's message,
 * and the context keeps the error: the next product cannot be issued. */
static void bad_operands_fail_at_the_sync(void **state) {
  (void)state;
  NEED();
  enum { M = 4, N = 3, K = 5, LDA = 6, LDB = 5, LDC = 4 };
  const char *operand_name[] = {"operand A", "operand B", "operand C"};
  for (int which = 0; which < 3; which++)
    for (int kind = 0; kind < 3; kind++) { /* one element short, freed, a host pointer */
      cb.reset();
      cublasHandle_t h = start("8.0");
      size_t need[3] = {LDA * (K - 1) + M, LDB * (N - 1) + K, LDC * (N - 1) + M}; /* exact extents: these pass */
      CUdeviceptr d[3];
      for (int i = 0; i < 3; i++) d[i] = upload(NULL, 4 * need[i] - (i == which && kind == 0 ? 4 : 0));
      if (kind == 1) assert_int_equal(fk.MemFree(d[which]), CUDA_SUCCESS);
      float host_buf[64], one = 1.0f, zero = 0.0f;
      void *p[3] = {DP(d[0]), DP(d[1]), DP(d[2])};
      if (kind == 2) p[which] = host_buf;
      assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, &one, p[0], LDA, p[1], LDB, &zero, p[2], LDC), ST_SUCCESS);
      assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
      ASSERT_HAS(fk.last_error(), "cublasSgemm_v2: ");
      ASSERT_HAS(fk.last_error(), operand_name[which]);
      ASSERT_HAS(fk.last_error(), kind == 0 ? "past the end" : kind == 1 ? "freed" : "not device memory");
      assert_int_equal(cb.Sgemm(h, OP_N, OP_N, M, N, K, &one, p[0], LDA, p[1], LDB, &zero, p[2], LDC),
                       ST_EXECUTION_FAILED);
    }
  /* exact extents pass (the loop above allocated them for the others); a
   * batched product names its member; a device-mode alpha is an operand */
  cb.reset();
  cublasHandle_t h = start("8.0");
  float one = 1.0f, zero = 0.0f;
  CUdeviceptr dA = upload(NULL, 4 * 2 * 2 * 3 - 4), dC = upload(NULL, 4 * 2 * 2 * 3);
  assert_int_equal(cb.SgemmStridedBatched(h, OP_N, OP_N, 2, 2, 2, &one, DP(dA), 2, 4, DP(dA), 2, 0, &zero, DP(dC), 2,
                                          4, 3),
                   ST_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_HAS(fk.last_error(), "operand A of batch member 2");
  cb.reset();
  h = start("8.0");
  CUdeviceptr d_alpha = upload(&one, 4), dX = upload(NULL, 64);
  assert_int_equal(fk.MemFree(d_alpha), CUDA_SUCCESS);
  assert_int_equal(cb.SetPointerMode(h, PTR_DEVICE), ST_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, DP(d_alpha), DP(dX), 2, DP(dX), 2, DP(dX), DP(dX), 2), ST_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_HAS(fk.last_error(), "operand alpha");
}

/* ----------------------------------------------------- call checks --- */

/* One GemmEx call with every argument given; the tests change one. */
typedef struct ex_call {
  int ta, tb, m, n, k, atype, lda, btype, ldb, ctype, ldc, compute, algo;
  int null_alpha, null_beta;
} ex_call;

static int issue_ex(cublasHandle_t h, CUdeviceptr d, ex_call c) {
  float one = 1.0f;
  double one64 = 1.0; /* the scale type of the 64-bit compute types */
  const void *scale = c.compute == COMPUTE_64F || c.compute == COMPUTE_64F_PEDANTIC ? (const void *)&one64 : &one;
  return cb.GemmEx(h, c.ta, c.tb, c.m, c.n, c.k, c.null_alpha ? NULL : scale, DP(d), c.atype, c.lda, DP(d), c.btype,
                   c.ldb, c.null_beta ? NULL : scale, DP(d), c.ctype, c.ldc, c.compute, c.algo);
}

/* Every argument rule cuBLAS documents gives CUBLAS_STATUS_INVALID_VALUE at
 * the call, with nothing issued; the same shapes one step inside the rule
 * pass. Unsupported type combinations give NOT_SUPPORTED. */
static void invalid_arguments_are_refused_at_the_call(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("9.0");
  CUdeviceptr d = upload(NULL, 1 << 16);
  const ex_call ok = {OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, ALGO_DEFAULT, 0, 0};
  struct {
    ex_call c;
    int status;
  } cases[] = {
      {ok, ST_SUCCESS},
      {{OP_T, OP_T, 4, 3, 5, R_32F, 5, R_32F, 3, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_SUCCESS}, /* lda >= k, ldb >= n */
      {{OP_N, OP_N, 0, 3, 5, R_32F, 1, R_32F, 5, R_32F, 1, COMPUTE_32F, -1, 0, 0}, ST_SUCCESS}, /* max(1, 0) */
      {{3, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* CUBLAS_OP_CONJG */
      {{OP_N, -1, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE},
      {{OP_N, OP_N, -1, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE},
      {{OP_N, OP_N, 4, -1, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE},
      {{OP_N, OP_N, 4, 3, -1, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE},
      {{OP_N, OP_N, 4, 3, 5, R_32F, 3, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* lda < m */
      {{OP_T, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* lda < k */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 4, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* ldb < k */
      {{OP_N, OP_T, 4, 3, 5, R_32F, 4, R_32F, 2, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* ldb < n */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 3, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* ldc < m */
      {{OP_N, OP_N, 0, 3, 5, R_32F, 0, R_32F, 5, R_32F, 1, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* lda 0 */
      {{OP_N, OP_N, 0, 3, 5, R_32F, 1, R_32F, 5, R_32F, 0, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE}, /* ldc 0 */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 1, 0}, ST_INVALID_VALUE}, /* alpha NULL */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 1}, ST_INVALID_VALUE}, /* beta NULL */
      {{OP_N, OP_N, 4, 3, 5, 99, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_INVALID_VALUE},    /* no such type */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, 99, -1, 0, 0}, ST_INVALID_VALUE},          /* compute */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, 50, 0, 0}, ST_INVALID_VALUE}, /* algo */
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_32F, 99, 0, 0}, ST_SUCCESS}, /* DEFAULT_TENSOR_OP */
      {{OP_N, OP_N, 4, 3, 5, R_16F, 4, R_16BF, 5, R_32F, 4, COMPUTE_32F, -1, 0, 0}, ST_NOT_SUPPORTED},
      {{OP_N, OP_N, 4, 3, 5, R_16F, 4, R_16F, 5, R_64F, 4, COMPUTE_32F, -1, 0, 0}, ST_NOT_SUPPORTED},
      {{OP_N, OP_N, 4, 3, 5, R_16BF, 4, R_16BF, 5, R_16F, 4, COMPUTE_32F, -1, 0, 0}, ST_NOT_SUPPORTED},
      {{OP_N, OP_N, 4, 3, 5, R_32F, 4, R_32F, 5, R_32F, 4, COMPUTE_64F, -1, 0, 0}, ST_NOT_SUPPORTED},
      {{OP_N, OP_N, 4, 3, 5, R_64F, 4, R_64F, 5, R_64F, 4, COMPUTE_32F, -1, 0, 0}, ST_NOT_SUPPORTED},
      {{OP_N, OP_N, 4, 3, 5, R_16F, 4, R_16F, 5, R_16F, 4, COMPUTE_32F_FAST_TF32, -1, 0, 0}, ST_NOT_SUPPORTED},
      {{OP_N, OP_N, 4, 3, 5, R_16F, 4, R_16F, 5, R_16F, 4, COMPUTE_16F, -1, 0, 0}, ST_NOT_SUPPORTED}, /* not modelled */
      {{OP_N, OP_N, 4, 3, 5, R_8I, 4, R_8I, 5, R_32I, 4, COMPUTE_32I, -1, 0, 0}, ST_NOT_SUPPORTED},   /* not modelled */
      {{OP_N, OP_N, 4, 3, 5, R_16BF, 4, R_16BF, 5, R_32F, 4, COMPUTE_32F_PEDANTIC, -1, 0, 0}, ST_SUCCESS},
      {{OP_N, OP_N, 4, 3, 5, R_64F, 4, R_64F, 5, R_64F, 4, COMPUTE_64F_PEDANTIC, -1, 0, 0}, ST_SUCCESS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t pending = fk.pending_ops();
    unsigned long calls = cb.call_count("cublasGemmEx");
    int st = issue_ex(h, d, cases[i].c);
    if (st != cases[i].status) fail_msg("case %zu: status %d, expected %d (%s)", i, st, cases[i].status, cb.last_error());
    assert_int_equal(cb.call_count("cublasGemmEx"), calls + 1);
    if (st != ST_SUCCESS) {
      assert_int_equal(fk.pending_ops(), pending);
      ASSERT_HAS(cb.last_error(), "cublasGemmEx: ");
    }
  }
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  /* the typed, batched and GEMV forms */
  float one = 1.0f;
  double done = 1.0;
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 4, 3, 5, &one, DP(d), 3, DP(d), 5, &one, DP(d), 4), ST_INVALID_VALUE);
  assert_int_equal(cb.Dgemm(h, OP_N, 7, 4, 3, 5, &done, DP(d), 4, DP(d), 5, &done, DP(d), 4), ST_INVALID_VALUE);
  assert_int_equal(cb.SgemmStridedBatched(h, OP_N, OP_N, 2, 2, 2, &one, DP(d), 2, 4, DP(d), 2, 4, &one, DP(d), 2, 4, -1),
                   ST_INVALID_VALUE);
  assert_int_equal(cb.DgemmStridedBatched(h, OP_N, OP_N, 2, 2, 2, &done, DP(d), 2, 4, DP(d), 1, 4, &done, DP(d), 2, 4,
                                          1),
                   ST_INVALID_VALUE);
  assert_int_equal(cb.GemmStridedBatchedEx(h, OP_N, OP_N, 2, 2, 2, &one, DP(d), R_32F, 2, 4, DP(d), R_32F, 2, 4, &one,
                                           DP(d), R_32F, 2, 4, -3, COMPUTE_32F, ALGO_DEFAULT),
                   ST_INVALID_VALUE);
  assert_int_equal(cb.Sgemv(h, OP_N, 3, 2, &one, DP(d), 2, DP(d), 1, &one, DP(d), 1), ST_INVALID_VALUE); /* lda < m */
  assert_int_equal(cb.Sgemv(h, OP_T, 3, 2, &one, DP(d), 3, DP(d), 0, &one, DP(d), 1), ST_INVALID_VALUE); /* incx 0 */
  assert_int_equal(cb.Dgemv(h, OP_N, 3, 2, &done, DP(d), 3, DP(d), 1, &done, DP(d), 0), ST_INVALID_VALUE); /* incy 0 */
  assert_int_equal(cb.Dgemv(h, OP_N, -1, 2, &done, DP(d), 3, DP(d), 1, &done, DP(d), 1), ST_INVALID_VALUE);
  assert_int_equal(cb.Sgemv(h, 5, 3, 2, &one, DP(d), 3, DP(d), 1, &one, DP(d), 1), ST_INVALID_VALUE);
  assert_int_equal(cb.Sgemv(h, OP_N, 3, 2, NULL, DP(d), 3, DP(d), 1, &one, DP(d), 1), ST_INVALID_VALUE);
  /* the settings */
  assert_int_equal(cb.SetMathMode(h, 5), ST_INVALID_VALUE);
  assert_int_equal(cb.SetMathMode(h, MATH_TF32 | 32), ST_INVALID_VALUE);
  assert_int_equal(cb.SetPointerMode(h, 2), ST_INVALID_VALUE);
  assert_int_equal(cb.GetMathMode(h, NULL), ST_INVALID_VALUE);
  assert_int_equal(cb.GetPointerMode(h, NULL), ST_INVALID_VALUE);
  assert_int_equal(cb.GetStream(h, NULL), ST_INVALID_VALUE);
  int v;
  assert_int_equal(cb.GetProperty(3, &v), ST_INVALID_VALUE);
  assert_int_equal(cb.GetProperty(0, NULL), ST_INVALID_VALUE);
  assert_int_equal(cb.GetVersion(h, NULL), ST_NOT_INITIALIZED);
  assert_int_equal(cb.Create(NULL), ST_INVALID_VALUE);
}

/* GEMV against a loop: both transposes, a padded A, a negative and a
 * larger-than-one increment, beta 0 over NaN, in f32 and f64. */
static void gemv_matches_a_loop(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  enum { M = 5, N = 3, LDA = 7, INCX = -2, INCY = 3 };
  for (int trans = OP_N; trans <= OP_T; trans++)
    for (int f64 = 0; f64 < 2; f64++)
      for (int beta_zero = 0; beta_zero < 2; beta_zero++) {
        int lx = trans ? M : N, ly = trans ? N : M;
        double A[LDA * N], x[2 * M], y[3 * M], want[3 * M];
        for (int i = 0; i < LDA * N; i++) A[i] = value_at(i, 50 + trans);
        for (int i = 0; i < 2 * M; i++) x[i] = value_at(i, 51);
        for (int i = 0; i < 3 * M; i++) y[i] = beta_zero ? NAN : value_at(i, 52);
        double alpha = 1.25, beta = beta_zero ? 0.0 : -0.5;
        memcpy(want, y, sizeof y);
        for (int i = 0; i < ly; i++) {
          size_t yi = (size_t)i * INCY;
          if (f64) {
            double sum = 0.0;
            for (int l = 0; l < lx; l++) sum += A[trans ? at(OP_T, i, l, LDA) : at(OP_N, i, l, LDA)] * x[(lx - 1 - l) * 2];
            want[yi] = beta_zero ? alpha * sum : alpha * sum + beta * y[yi];
          } else {
            float sum = 0.0f;
            for (int l = 0; l < lx; l++) {
              float prod = (float)A[trans ? at(OP_T, i, l, LDA) : at(OP_N, i, l, LDA)] * (float)x[(lx - 1 - l) * 2];
              sum = sum + prod;
            }
            float r = (float)alpha * sum;
            if (!beta_zero) r = r + (float)beta * (float)y[yi];
            want[yi] = r;
          }
        }
        size_t es = f64 ? 8 : 4;
        void *hA = malloc(sizeof A), *hx = malloc(sizeof x), *hy = malloc(sizeof y), *got = malloc(sizeof y);
        for (int i = 0; i < LDA * N; i++) f64 ? (void)(((double *)hA)[i] = A[i]) : (void)(((float *)hA)[i] = (float)A[i]);
        for (int i = 0; i < 2 * M; i++) f64 ? (void)(((double *)hx)[i] = x[i]) : (void)(((float *)hx)[i] = (float)x[i]);
        for (int i = 0; i < 3 * M; i++) f64 ? (void)(((double *)hy)[i] = y[i]) : (void)(((float *)hy)[i] = (float)y[i]);
        CUdeviceptr dA = upload(hA, es * LDA * N), dx = upload(hx, es * ((size_t)(lx - 1) * 2 + 1)),
                    dy = upload(hy, es * ((size_t)(ly - 1) * INCY + 1));
        float fa = (float)alpha, fb = (float)beta;
        int st = f64 ? cb.Dgemv(h, trans, M, N, &alpha, DP(dA), LDA, DP(dx), INCX, &beta, DP(dy), INCY)
                     : cb.Sgemv(h, trans, M, N, &fa, DP(dA), LDA, DP(dx), INCX, &fb, DP(dy), INCY);
        assert_int_equal(st, ST_SUCCESS);
        size_t ny = (size_t)(ly - 1) * INCY + 1;
        download(got, dy, es * ny);
        for (size_t i = 0; i < ny; i++) {
          double g = f64 ? ((double *)got)[i] : ((float *)got)[i];
          double w = f64 ? want[i] : (double)(float)want[i];
          if (!(g == w || (isnan(g) && isnan(w) && i % INCY != 0)))
            fail_msg("trans %d f64 %d beta0 %d: y[%zu] = %.17g, expected %.17g", trans, f64, beta_zero, i, g, w);
        }
        free(hA), free(hx), free(hy), free(got);
      }
  ASSERT_HAS(cb.last_gemm(), "entry=cublasDgemv_v2 trans=T m=5 n=3 lda=7 incx=-2 incy=3");
}


/* The strided batches of gemv: each member against a loop (a shared x, stride 0; y members
 * apart by stridey), and the batch count checked at the call. */
static void gemv_strided_batched(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0");
  typedef int (*fn_sgemv_b)(cublasHandle_t, int, int, int, const float *, const float *, int, long long,
                            const float *, int, long long, const float *, float *, int, long long, int);
  fn_sgemv_b sb = (fn_sgemv_b)dlsym(cb.lib, "cublasSgemvStridedBatched");
  if (!sb || !dlsym(cb.lib, "cublasDgemvStridedBatched")) fail_msg("the double lacks the strided batched gemv");
  enum { M = 3, N = 4, BATCH = 3, SA = 13, SY = 5 };
  float A[SA * BATCH], x[N], y[SY * BATCH], got[SY * BATCH];
  fill_f32(A, SA * BATCH, 70), fill_f32(x, N, 71), fill_f32(y, SY * BATCH, 72);
  CUdeviceptr dA = upload(A, sizeof A), dx = upload(x, sizeof x), dy = upload(y, sizeof y);
  float alpha = 2.0f, beta = 0.5f, one = 1.0f;
  assert_int_equal(sb(h, OP_N, M, N, &alpha, DP(dA), M, SA, DP(dx), 1, 0, &beta, DP(dy), 1, SY, BATCH), ST_SUCCESS);
  download(got, dy, sizeof got);
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i < SY; i++) {
      float want = y[b * SY + i];
      if (i < M) {
        float sum = 0.0f;
        for (int l = 0; l < N; l++) sum = sum + A[b * SA + l * M + i] * x[l];
        want = alpha * sum + beta * y[b * SY + i];
      }
      if (got[b * SY + i] != want) fail_msg("member %d y[%d] = %.9g, want %.9g", b, i, got[b * SY + i], want);
    }
  ASSERT_HAS(cb.last_gemm(), "entry=cublasSgemvStridedBatched trans=N m=3 n=4 lda=3 incx=1 incy=1 batch=3 strideA=13");
  assert_int_equal(sb(h, OP_N, M, N, &one, DP(dA), M, SA, DP(dx), 1, 0, &one, DP(dy), 1, SY, -1), ST_INVALID_VALUE);
  assert_int_equal(sb(h, OP_N, M, N, &one, DP(dA), M, SA, DP(dx), 0, 0, &one, DP(dy), 1, SY, 2), ST_INVALID_VALUE);
  assert_int_equal(sb(h, OP_N, M, N, &one, DP(dA), M - 1, SA, DP(dx), 1, 0, &one, DP(dy), 1, SY, 2), ST_INVALID_VALUE);
}

/* ------------------------------------------------- versions, devices --- */

static void versions_from_the_environment(void **state) {
  (void)state;
  NEED();
  const struct {
    const char *env;
    int major, minor, patch, number;
  } cases[] = {
      {NULL, 13, 1, 0, 130100},        /* the default: CUDA 13.0's cuBLAS */
      {"12.9.1", 12, 9, 1, 120901},
      {" 11.11.3 ", 11, 11, 3, 111103},
      {"11.7.4", 11, 7, 4, 11704},     /* before 11.8: major * 1000 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cb.reset();
    fake_set("FAKECUBLAS_VERSION", cases[i].env);
    cublasHandle_t h = start("8.0");
    int v[3] = {-1, -1, -1}, number = -1;
    for (int t = 0; t < 3; t++) assert_int_equal(cb.GetProperty(t, &v[t]), ST_SUCCESS);
    assert_int_equal(v[0], cases[i].major);
    assert_int_equal(v[1], cases[i].minor);
    assert_int_equal(v[2], cases[i].patch);
    assert_int_equal(cb.GetVersion(h, &number), ST_SUCCESS);
    assert_int_equal(number, cases[i].number);
  }
  /* malformed: cublasCreate_v2 refuses, saying why */
  const char *bad[] = {"13.1", "13.1.0.3", "10.2.89", "14.0.0", "thirteen", "13.100.0", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cb.reset();
    assert_int_equal(fake_init_with("8.0", NULL), CUDA_SUCCESS);
    fake_use_device(0);
    fake_set("FAKECUBLAS_VERSION", bad[i]);
    cublasHandle_t h = NULL;
    assert_int_equal(cb.Create(&h), ST_NOT_INITIALIZED);
    assert_null(h);
    ASSERT_HAS(cb.last_error(), "FAKECUBLAS_VERSION");
    int v;
    assert_int_equal(cb.GetProperty(0, &v), ST_NOT_INITIALIZED);
  }
}

/* A device below the library's lowest compute capability (cuBLAS 11 from
 * 3.5, 12 from 5.0, 13 from 7.5) takes a handle but no product; binary16
 * needs 5.3, bfloat16 8.0; a driver older than the library's major fails
 * cublasCreate_v2. */
static void devices_and_drivers_the_library_cannot_use(void **state) {
  (void)state;
  NEED();
  const struct {
    const char *version, *device;
    int status;
  } cases[] = {
      {NULL, "7.5", ST_SUCCESS},         {NULL, "7.2", ST_ARCH_MISMATCH}, {"12.9.1", "7.0", ST_SUCCESS},
      {"12.0.1", "5.0", ST_SUCCESS},     {"12.0.1", "3.7", ST_ARCH_MISMATCH}, {"11.11.3", "3.5", ST_SUCCESS},
      {"11.11.3", "3.0", ST_ARCH_MISMATCH},
  };
  float one = 1.0f;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cb.reset();
    fake_set("FAKECUBLAS_VERSION", cases[i].version);
    cublasHandle_t h = start(cases[i].device);
    CUdeviceptr d = upload(NULL, 256);
    int st = cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d), 2, DP(d), 2, &one, DP(d), 2);
    if (st != cases[i].status) fail_msg("cuBLAS %s on CC %s: %d, expected %d", cases[i].version ? cases[i].version : "13",
                                        cases[i].device, st, cases[i].status);
    assert_int_equal(cb.Sgemv(h, OP_N, 2, 2, &one, DP(d), 2, DP(d), 1, &one, DP(d), 1), cases[i].status);
    if (st) ASSERT_HAS(cb.last_error(), "compute capability");
  }
  /* binary16 and bfloat16 by compute capability, under cuBLAS 11 */
  const struct {
    const char *device;
    int type, status;
  } narrow[] = {{"5.2", R_16F, ST_ARCH_MISMATCH}, {"5.3", R_16F, ST_SUCCESS}, {"7.5", R_16BF, ST_NOT_SUPPORTED},
                {"8.0", R_16BF, ST_SUCCESS}};
  for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++) {
    cb.reset();
    fake_set("FAKECUBLAS_VERSION", "11.11.3");
    cublasHandle_t h = start(narrow[i].device);
    CUdeviceptr d = upload(NULL, 256);
    assert_int_equal(cb.GemmEx(h, OP_N, OP_N, 2, 2, 2, &one, DP(d), narrow[i].type, 2, DP(d), narrow[i].type, 2, &one,
                               DP(d), R_32F, 2, COMPUTE_32F, ALGO_DEFAULT),
                     narrow[i].status);
  }
  /* the driver: cuBLAS 13 needs CUDA 13.0, 12 runs on 12.x */
  cb.reset();
  fake_set("FAKECUBLAS_VERSION", NULL);
  assert_int_equal(fake_init_with("8.0", "12080"), CUDA_SUCCESS);
  fake_use_device(0);
  cublasHandle_t h = NULL;
  assert_int_equal(cb.Create(&h), ST_NOT_INITIALIZED);
  ASSERT_HAS(cb.last_error(), "needs a CUDA 13.0 driver");
  fake_set("FAKECUBLAS_VERSION", "12.9.1");
  assert_int_equal(cb.Create(&h), ST_SUCCESS);
  assert_int_equal(cb.live_handles(), 1);
}

/* With no libcuda loaded there is no driver to find (checked in the group
 * set-up, before the libcuda double was loaded); with no current context
 * there is no device for the handle. */
static void create_needs_a_driver_and_a_context(void **state) {
  (void)state;
  NEED();
  assert_int_equal(cb.create_without_driver, ST_NOT_INITIALIZED);
  assert_int_equal(fake_init_with("8.0", NULL), CUDA_SUCCESS);
  cublasHandle_t h = NULL;
  assert_int_equal(cb.Create(&h), ST_NOT_INITIALIZED);
  ASSERT_HAS(cb.last_error(), "no current CUDA context");
  assert_int_equal(cb.live_handles(), 0);
}

/* ------------------------------------------------- fault injection --- */

static void fault_injection(void **state) {
  (void)state;
  NEED();
  fake_set("FAKECUBLAS_FAIL", "cublasSgemm_v2=13@2, cublasSetStream_v2=7");
  cublasHandle_t h = start("8.0");
  CUdeviceptr d = upload(NULL, 256);
  float one = 1.0f, C[4], got[4];
  for (int i = 0; i < 4; i++) C[i] = 9.0f;
  assert_int_equal(fk.MemcpyHtoD(d, C, 16), CUDA_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 0, &one, DP(d), 2, DP(d), 1, &one, DP(d), 2), ST_SUCCESS);
  size_t pending = fk.pending_ops();
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 0, &one, DP(d), 2, DP(d), 1, &one, DP(d), 2), ST_EXECUTION_FAILED);
  assert_int_equal(fk.pending_ops(), pending); /* an injected failure does nothing */
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 0, &one, DP(d), 2, DP(d), 1, &one, DP(d), 2), ST_SUCCESS);
  assert_int_equal(cb.SetStream(h, NULL), ST_INVALID_VALUE);
  assert_int_equal(cb.SetStream(h, NULL), ST_INVALID_VALUE);
  assert_int_equal(cb.call_count("cublasSgemm_v2"), 3);
  assert_int_equal(cb.call_count("cublasSetStream_v2"), 2);
  assert_int_equal(cb.call_count("cublasGemmEx"), 0);
  assert_int_equal(cb.call_count("cublasNoSuchThing"), 0);
  ASSERT_HAS(cb.last_error(), "FAKECUBLAS_FAIL");
  download(got, d, 16);
  assert_memory_equal(got, C, 16); /* beta 1, k 0 twice: C unchanged */
  /* cublasCreate_v2 itself; a changed variable is read by the next create */
  cb.reset();
  fake_set("FAKECUBLAS_FAIL", "cublasCreate_v2=3");
  cublasHandle_t h2 = NULL;
  assert_int_equal(cb.Create(&h2), ST_ALLOC_FAILED);
  assert_null(h2);
  fake_set("FAKECUBLAS_FAIL", "cublasCreate_v2=3@2");
  assert_int_equal(cb.Create(&h2), ST_SUCCESS);
  assert_int_equal(cb.Create(&h2), ST_ALLOC_FAILED);
  assert_int_equal(cb.call_count("cublasCreate_v2"), 2);
  /* malformed: every cuBLAS call fails, and stderr says why */
  const char *bad[] = {"cublasSgemm_v2",        "cublasNope=1",          "cublasSgemm_v2=0", "cublasSgemm_v2=13@0",
                       "cublasSgemm_v2=13x",    "cublasGetStatusName=1", "cublasSgemm_v2=13,", "=13"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cb.reset();
    fake_set("FAKECUBLAS_FAIL", bad[i]);
    cublasHandle_t x = NULL;
    if (cb.Create(&x) != ST_NOT_INITIALIZED) fail_msg("FAKECUBLAS_FAIL=%s was accepted", bad[i]);
    ASSERT_HAS(cb.last_error(), "FAKECUBLAS_FAIL");
  }
}

/* ---------------------------------------------------- contexts, handles --- */

/* A handle belongs to the context current at its creation: a product with
 * another context current, or none, is refused (EXECUTION_FAILED) and
 * nothing runs; so is a product on a stream of another context; a
 * workspace of another context is refused at cublasSetWorkspace_v2. */
static void handle_used_from_another_context(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0,8.6");
  CUdeviceptr d0 = upload(NULL, 1024);
  CUcontext ctx1 = fake_use_device(1); /* now device 1's context is current */
  CUdeviceptr d1 = upload(NULL, 1024);
  CUstream s1;
  assert_int_equal(fk.StreamCreate(&s1, 0), CUDA_SUCCESS);
  float one = 1.0f;
  size_t pending = fk.pending_ops();
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d0), 2, DP(d0), 2, &one, DP(d0), 2), ST_EXECUTION_FAILED);
  ASSERT_HAS(cb.last_error(), "the handle belongs to context");
  assert_int_equal(fk.pending_ops(), pending);
  assert_int_equal(cb.SetWorkspace(h, DP(d1), 1024), ST_INVALID_VALUE); /* device 1's memory */
  ASSERT_HAS(cb.last_error(), "not device memory of the handle's context");
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_ptr_equal(popped, ctx1);
  /* device 0 current again: the handle works; a stream of device 1 does not */
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d0), 2, DP(d0), 2, &one, DP(d0), 2), ST_SUCCESS);
  assert_int_equal(cb.SetWorkspace(h, DP(d0), 1024), ST_SUCCESS);
  assert_int_equal(cb.SetStream(h, s1), ST_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d0), 2, DP(d0), 2, &one, DP(d0), 2), ST_EXECUTION_FAILED);
  ASSERT_HAS(cb.last_error(), "could not be issued");
  /* no context at all */
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_int_equal(cb.SetStream(h, NULL), ST_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d0), 2, DP(d0), 2, &one, DP(d0), 2), ST_EXECUTION_FAILED);
  assert_int_equal(fk.CtxPushCurrent(popped), CUDA_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
}

/* The workspace: 256-byte aligned, inside one allocation of the handle's
 * context; size 0 is allowed; cublasSetStream_v2 drops it; a workspace freed
 * while a product is pending faults that product. */
static void workspace_rules(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("9.0");
  CUdeviceptr ws = upload(NULL, 4096);
  float host[64];
  assert_int_equal(cb.SetWorkspace(h, DP(ws), 4096), ST_SUCCESS);
  assert_int_equal(cb.SetWorkspace(h, DP(ws + 256), 4096 - 256), ST_SUCCESS);
  assert_int_equal(cb.SetWorkspace(h, DP(ws + 256), 4096), ST_INVALID_VALUE); /* runs past the allocation */
  assert_int_equal(cb.SetWorkspace(h, DP(ws + 128), 1024), ST_INVALID_VALUE); /* not 256-byte aligned */
  ASSERT_HAS(cb.last_error(), "aligned");
  assert_int_equal(cb.SetWorkspace(h, host, 0), (uintptr_t)host % 256 ? ST_INVALID_VALUE : ST_SUCCESS);
  assert_int_equal(cb.SetWorkspace(h, DP(0x100000000ull), 256), ST_INVALID_VALUE); /* no allocation */
  assert_int_equal(cb.SetWorkspace(h, NULL, 0), ST_SUCCESS);
  assert_int_equal(cb.SetWorkspace(h, NULL, 256), ST_INVALID_VALUE);
  /* a freed workspace faults the product that would use it ... */
  CUdeviceptr ws2 = upload(NULL, 1024), d = upload(NULL, 256);
  float one = 1.0f;
  assert_int_equal(cb.SetWorkspace(h, DP(ws2), 1024), ST_SUCCESS);
  assert_int_equal(fk.MemFree(ws2), CUDA_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d), 2, DP(d), 2, &one, DP(d), 2), ST_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_HAS(fk.last_error(), "operand workspace");
  /* ... unless cublasSetStream_v2 went back to the default pool */
  cb.reset();
  h = start("9.0");
  ws2 = upload(NULL, 1024), d = upload(NULL, 256);
  assert_int_equal(cb.SetWorkspace(h, DP(ws2), 1024), ST_SUCCESS);
  assert_int_equal(fk.MemFree(ws2), CUDA_SUCCESS);
  assert_int_equal(cb.SetStream(h, NULL), ST_SUCCESS);
  assert_int_equal(cb.Sgemm(h, OP_N, OP_N, 2, 2, 2, &one, DP(d), 2, DP(d), 2, &one, DP(d), 2), ST_SUCCESS);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
}

/* Handles: NULL and destroyed ones are NOT_INITIALIZED everywhere;
 * destroying one runs the work pending in its context; the hooks count. */
static void handle_lifetime(void **state) {
  (void)state;
  NEED();
  cublasHandle_t h = start("8.0"), h2 = NULL;
  assert_int_equal(cb.Create(&h2), ST_SUCCESS);
  assert_true(h != h2);
  assert_int_equal(cb.live_handles(), 2);
  CUdeviceptr d = upload(NULL, 256);
  float one = 1.0f;
  assert_int_equal(cb.Sgemm(h2, OP_N, OP_N, 2, 2, 2, &one, DP(d), 2, DP(d), 2, &one, DP(d), 2), ST_SUCCESS);
  assert_true(fk.pending_ops() > 0);
  assert_int_equal(cb.Destroy(h2), ST_SUCCESS);
  assert_int_equal(fk.pending_ops(), 0); /* cublasDestroy synchronizes the device */
  assert_int_equal(cb.live_handles(), 1);
  int mode;
  CUstream s;
  cublasHandle_t dead[] = {NULL, h2};
  for (int i = 0; i < 2; i++) {
    cublasHandle_t x = dead[i];
    assert_int_equal(cb.Destroy(x), ST_NOT_INITIALIZED);
    assert_int_equal(cb.SetStream(x, NULL), ST_NOT_INITIALIZED);
    assert_int_equal(cb.GetStream(x, &s), ST_NOT_INITIALIZED);
    assert_int_equal(cb.SetWorkspace(x, NULL, 0), ST_NOT_INITIALIZED);
    assert_int_equal(cb.SetMathMode(x, 0), ST_NOT_INITIALIZED);
    assert_int_equal(cb.GetMathMode(x, &mode), ST_NOT_INITIALIZED);
    assert_int_equal(cb.SetPointerMode(x, 0), ST_NOT_INITIALIZED);
    assert_int_equal(cb.GetPointerMode(x, &mode), ST_NOT_INITIALIZED);
    assert_int_equal(cb.Sgemm(x, OP_N, OP_N, 2, 2, 2, &one, DP(d), 2, DP(d), 2, &one, DP(d), 2), ST_NOT_INITIALIZED);
    assert_int_equal(cb.Sgemv(x, OP_N, 2, 2, &one, DP(d), 2, DP(d), 1, &one, DP(d), 1), ST_NOT_INITIALIZED);
  }
  ASSERT_HAS(cb.last_error(), "not a live handle");
  /* a new handle never takes a destroyed one's value */
  cublasHandle_t h3 = NULL;
  assert_int_equal(cb.Create(&h3), ST_SUCCESS);
  assert_true(h3 != h2 && h3 != h);
  assert_int_equal(cb.Destroy(h3), ST_SUCCESS);
  assert_int_equal(cb.Destroy(h), ST_SUCCESS);
  assert_int_equal(cb.live_handles(), 0);
  assert_int_equal(cb.call_count("cublasDestroy_v2"), 5);
}

static void status_names_and_strings(void **state) {
  (void)state;
  NEED();
  assert_string_equal(cb.GetStatusName(ST_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  assert_string_equal(cb.GetStatusName(ST_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  assert_string_equal(cb.GetStatusName(ST_EXECUTION_FAILED), "CUBLAS_STATUS_EXECUTION_FAILED");
  assert_string_equal(cb.GetStatusName(16), "CUBLAS_STATUS_LICENSE_ERROR");
  assert_string_equal(cb.GetStatusString(ST_INVALID_VALUE),
                      "an unsupported value or parameter was passed to the function");
  assert_string_equal(cb.GetStatusString(ST_ARCH_MISMATCH),
                      "the function requires an architectural feature absent from the device");
  assert_string_equal(cb.GetStatusName(2), "unrecognized status");
  assert_string_equal(cb.GetStatusString(-1), "unrecognized status");
  assert_int_equal(cb.call_count("cublasGetStatusName"), 5);
}

/* Two host threads, each with its own device, handle and stream, issuing
 * and checking products at once: the double's state stays consistent. */
typedef struct worker {
  CUcontext ctx;
  cublasHandle_t h;
  int failures;
  char first_failure[160];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  if (fk.CtxPushCurrent(w->ctx) != CUDA_SUCCESS) {
    w->failures++;
    return NULL;
  }
  enum { M = 6, N = 5, K = 7 };
  float A[M * K], B[K * N], C[M * N], got[M * N], one = 1.0f, zero = 0.0f;
  CUdeviceptr dA = 0, dB = 0, dC = 0;
  fk.MemAlloc(&dA, sizeof A), fk.MemAlloc(&dB, sizeof B), fk.MemAlloc(&dC, sizeof C);
  for (int it = 0; it < 25; it++) {
    fill_f32(A, M * K, it), fill_f32(B, K * N, it + 100);
    fk.MemcpyHtoD(dA, A, sizeof A), fk.MemcpyHtoD(dB, B, sizeof B);
    int st = cb.Sgemm(w->h, OP_T & it, OP_N, M, N, K, &one, DP(dA), (it & 1) ? K : M, DP(dB), K, &zero, DP(dC), M);
    fk.MemcpyDtoH(got, dC, sizeof got);
    ref_sgemm(OP_T & it, OP_N, M, N, K, 1.0f, A, (it & 1) ? K : M, B, K, 0.0f, C, M);
    if ((st != ST_SUCCESS || memcmp(got, C, sizeof C) != 0) && !w->failures++)
      snprintf(w->first_failure, sizeof w->first_failure, "iteration %d: status %d, C[0] %g vs %g", it, st, got[0], C[0]);
    (void)cb.last_gemm(), (void)cb.call_count("cublasSgemm_v2");
  }
  CUcontext popped;
  fk.CtxPopCurrent(&popped);
  return NULL;
}

static void two_host_threads_at_once(void **state) {
  (void)state;
  NEED();
  assert_int_equal(fake_init_with("8.0,9.0", NULL), CUDA_SUCCESS);
  worker w[2];
  memset(w, 0, sizeof w);
  for (int d = 0; d < 2; d++) {
    w[d].ctx = fake_use_device(d);
    assert_int_equal(cb.Create(&w[d].h), ST_SUCCESS);
    CUcontext popped;
    assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  }
  pthread_t t[2];
  for (int d = 0; d < 2; d++) assert_int_equal(pthread_create(&t[d], NULL, worker_main, &w[d]), 0);
  for (int d = 0; d < 2; d++) assert_int_equal(pthread_join(t[d], NULL), 0);
  for (int d = 0; d < 2; d++)
    if (w[d].failures) fail_msg("thread %d: %d failures, first: %s", d, w[d].failures, w[d].first_failure);
  assert_int_equal(cb.call_count("cublasSgemm_v2"), 50);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(sgemm_matches_a_plain_loop, test_setup),
      cmocka_unit_test_setup(beta_zero_does_not_read_c, test_setup),
      cmocka_unit_test_setup(k_zero_and_alpha_zero, test_setup),
      cmocka_unit_test_setup(empty_products_issue_nothing, test_setup),
      cmocka_unit_test_setup(strided_batched_with_a_shared_operand, test_setup),
      cmocka_unit_test_setup(last_gemm_describes_the_call, test_setup),
      cmocka_unit_test_setup(f64_gemms_compute_in_double, test_setup),
      cmocka_unit_test_setup(f16_outputs_round_to_nearest_even, test_setup),
      cmocka_unit_test_setup(bf16_outputs_round_to_nearest_even, test_setup),
      cmocka_unit_test_setup(narrow_inputs_against_a_loop, test_setup),
      cmocka_unit_test_setup(tf32_when_asked_and_available, test_setup),
      cmocka_unit_test_setup(fast_16f_and_16bf_round_inputs, test_setup),
      cmocka_unit_test_setup(scalars_by_pointer_mode, test_setup),
      cmocka_unit_test_setup(products_run_in_stream_order, test_setup),
      cmocka_unit_test_setup(bad_operands_fail_at_the_sync, test_setup),
      cmocka_unit_test_setup(invalid_arguments_are_refused_at_the_call, test_setup),
      cmocka_unit_test_setup(gemv_matches_a_loop, test_setup),
      cmocka_unit_test_setup(gemv_strided_batched, test_setup),
      cmocka_unit_test_setup(versions_from_the_environment, test_setup),
      cmocka_unit_test_setup(devices_and_drivers_the_library_cannot_use, test_setup),
      cmocka_unit_test_setup(create_needs_a_driver_and_a_context, test_setup),
      cmocka_unit_test_setup(fault_injection, test_setup),
      cmocka_unit_test_setup(handle_used_from_another_context, test_setup),
      cmocka_unit_test_setup(workspace_rules, test_setup),
      cmocka_unit_test_setup(handle_lifetime, test_setup),
      cmocka_unit_test_setup(status_names_and_strings, test_setup),
      cmocka_unit_test_setup(two_host_threads_at_once, test_setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
