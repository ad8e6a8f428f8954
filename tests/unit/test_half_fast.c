/* The fast mode's half road (ops/linalg_gpu.c, ops/conv_gpu.c, runtime/cublas.c, cudnn.c): f16
 * and bf16 products and convolutions handed to cuBLAS (GemmEx with 16F / 16BF operands,
 * COMPUTE_32F) and cuDNN (HALF / BFLOAT16 descriptors, a FLOAT convolution, tensor-op math) on
 * the libcuda, cuBLAS and cuDNN doubles. Each op in each half dtype: the library called with
 * those types (the doubles' own records), em_exec_describe's road, results within one half
 * rounding of a float64 reference computed here from the inputs decoded by this file's own
 * binary16 / bfloat16 code; portable mode calling neither library and giving the CPU's bits;
 * the f32 road taken, with its reason, where the library is not used (EMBER_CUBLAS=0,
 * EMBER_CUDNN=0, no tensor cores for the dtype, an empty sum, a sum over a broadcast batch, a
 * geometry cuDNN refuses); the rule alone over compute capabilities; and cuDNN's algorithm
 * cache keeping f32, f16 and bf16 of one geometry apart. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas.h"
#include "cudnn.h"
#include "gpu_double.h"
#include "half_ref.h"
#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* ------------------------------------------------------- the doubles --- */

/* The doubles (tests/support/gpu_double.h) as devices `devices` on a CUDA 13.0 driver, cuBLAS
 * 13.1.0 and cuDNN 9.19.0, a fresh algorithm cache unless keep_cache; 0 when the doubles are not
 * built (skip). */
static int use_doubles_cache(const char *devices, int keep_cache) {
  return ts_use_doubles(&(ts_doubles){.devices = devices, .cublas = "13.1.0", .keep_cache = keep_cache});
}
static int use_doubles(const char *devices) { return use_doubles_cache(devices, 0); }

static unsigned long gemm_calls(void) {
  return ts_blas_calls("cublasGemmEx") + ts_blas_calls("cublasGemmStridedBatchedEx") + ts_blas_calls("cublasSgemm_v2") +
         ts_blas_calls("cublasDgemm_v2");
}
static unsigned long conv_calls(void) {
  return ts_dnn_calls("cudnnConvolutionForward") + ts_dnn_calls("cudnnConvolutionBackwardData") +
         ts_dnn_calls("cudnnConvolutionBackwardFilter");
}
static unsigned long finds(void) {
  return ts_dnn_calls("cudnnFindConvolutionForwardAlgorithmEx") + ts_dnn_calls("cudnnFindConvolutionBackwardDataAlgorithmEx") +
         ts_dnn_calls("cudnnFindConvolutionBackwardFilterAlgorithmEx");
}

/* ------------------------------------------------------------ one op --- */

static void expect_contains(const char *text, const char *want, const char *what) {
  if (!strstr(text, want)) fail_msg("%s: '%s' lacks '%s'", what, text, want);
}

/* The types cuBLAS was given in its last product, as the double records them. */
static void expect_half_gemm(em_dtype t, const char *what) {
  const char *g = ts_blas_last_gemm(), *ty = t == EM_F16 ? "CUDA_R_16F" : "CUDA_R_16BF";
  char want[96];
  snprintf(want, sizeof want, "A=%s B=%s C=%s ", ty, ty, ty);
  expect_contains(g, want, what);
  expect_contains(g, "compute=CUBLAS_COMPUTE_32F ", what);
}

/* ------------------------------------------------------------ products --- */

/* c = alpha op(a) op(b) (+ beta c0 broadcast by rows or columns), row-major doubles. */
static void ref_product(const double *a, const double *b, int ta, int tb, int64_t m, int64_t n, int64_t k,
                        double alpha, const double *c0, int64_t c_rows, int64_t c_cols, double beta, double *c) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t l = 0; l < k; l++) s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
      c[i * n + j] = alpha * s + (c0 ? beta * c0[(c_rows == 1 ? 0 : i) * c_cols + (c_cols == 1 ? 0 : j)] : 0);
    }
}

/* A road through cuBLAS: "cuBLAS 13.1.0 (f16, f32 accumulation)". */
static void expect_cublas_road(const char *road, em_dtype t, const char *what) {
  char want[64];
  snprintf(want, sizeof want, "cuBLAS 13.1.0 (%s, f32 accumulation)", em_dtype_name(t));
  if (strcmp(road, want)) fail_msg("%s: the road is '%s', want '%s'", what, road, want);
}

static void products_through_cublas(em_dtype t) {
  char road[256], what[64];
  /* matmul of batches (strided batched) */
  {
    const int64_t sa[3] = {3, 5, 33}, sb[3] = {3, 33, 7};
    em_tensor *a = ot_rand(t, 3, sa, 1, -2, 2), *b = ot_rand(t, 3, sb, 2, -2, 2), *in[2] = {a, b};
    double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), want[3 * 5 * 7];
    for (int z = 0; z < 3; z++) ref_product(av + z * 165, bv + z * 231, 0, 0, 5, 7, 33, 1, NULL, 0, 0, 0, want + z * 35);
    snprintf(what, sizeof what, "matmul %s", em_dtype_name(t));
    unsigned long before = ts_blas_calls("cublasGemmStridedBatchedEx");
    em_tensor *y = ot_run1_on(em_cuda(0), 0, "matmul", in, 2, NULL, 0, road, sizeof road);
    if (ts_blas_calls("cublasGemmStridedBatchedEx") == before) fail_msg("%s: no cublasGemmStridedBatchedEx", what);
    expect_half_gemm(t, what);
    expect_contains(ts_blas_last_gemm(), "batch=3 ", what);
    expect_cublas_road(road, t, what);
    ts_expect_one_rounding(y, t, want, 105, what);
    free(av), free(bv);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(y);
  }
  /* gemm: alpha a^T b + beta c, c a row [N] and a column [M, 1] */
  for (int col = 0; col < 2; col++) {
    const int64_t sa[2] = {9, 4}, sb[2] = {9, 6}, sc_row[1] = {6}, sc_col[2] = {4, 1};
    em_tensor *a = ot_rand(t, 2, sa, 3, -1, 1), *b = ot_rand(t, 2, sb, 4, -1, 1);
    em_tensor *c = col ? ot_rand(t, 2, sc_col, 5, -1, 1) : ot_rand(t, 1, sc_row, 5, -1, 1), *in[3] = {a, b, c};
    double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), *cv = ts_half_decoded(c), want[24];
    ref_product(av, bv, 1, 0, 4, 6, 9, 0.5, cv, col ? 4 : 1, col ? 1 : 6, 2, want);
    const em_attr at[3] = {AI("transA", 1), AF("alpha", 0.5), AF("beta", 2)};
    snprintf(what, sizeof what, "gemm %s, c a %s", em_dtype_name(t), col ? "column" : "row");
    unsigned long before = gemm_calls();
    em_tensor *y = ot_run1_on(em_cuda(0), 0, "gemm", in, 3, at, 3, road, sizeof road);
    if (gemm_calls() != before + 1) fail_msg("%s: %lu cuBLAS products, want 1", what, gemm_calls() - before);
    expect_half_gemm(t, what);
    expect_cublas_road(road, t, what);
    ts_expect_one_rounding(y, t, want, 24, what);
    free(av), free(bv), free(cv);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(c), em_tensor_release(y);
  }
  /* _matmul_grad into a (dy b^T) and into b (a^T dy), batch axes folded */
  for (int which = 0; which < 2; which++) {
    const int64_t sa[3] = {2, 5, 8}, sb[2] = {8, 3}, sdy[3] = {2, 5, 3};
    em_tensor *a = ot_rand(t, 3, sa, 6, -1, 1), *b = ot_rand(t, 2, sb, 7, -1, 1), *dy = ot_rand(t, 3, sdy, 8, -1, 1);
    em_tensor *in[3] = {dy, a, b};
    double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), *dv = ts_half_decoded(dy), want[80];
    if (which == 0) ref_product(dv, bv, 0, 1, 10, 8, 3, 1, NULL, 0, 0, 0, want); /* [10, 3] [8, 3]^T */
    else ref_product(av, dv, 1, 0, 8, 3, 10, 1, NULL, 0, 0, 0, want);            /* [10, 8]^T [10, 3] */
    const em_attr at[1] = {AI("which", which)};
    snprintf(what, sizeof what, "_matmul_grad which %d %s", which, em_dtype_name(t));
    unsigned long before = gemm_calls();
    em_tensor *y = ot_run1_on(em_cuda(0), 0, "_matmul_grad", in, 3, at, 1, road, sizeof road);
    if (gemm_calls() == before) fail_msg("%s: cuBLAS not called", what);
    expect_half_gemm(t, what);
    expect_cublas_road(road, t, what);
    ts_expect_one_rounding(y, t, want, which ? 24 : 80, what);
    free(av), free(bv), free(dv);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(dy), em_tensor_release(y);
  }
}

static void test_products_through_cublas(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  products_through_cublas(EM_F16);
  products_through_cublas(EM_BF16);
}

/* Portable mode: no cuBLAS call, and the CPU's bits (both compute on f32 copies with Ember's
 * own fixed-order kernels and round once). */
static void test_products_portable(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    const int64_t sa[3] = {2, 9, 40}, sb[2] = {40, 6}, sc[1] = {6}, sg[2] = {18, 40};
    em_tensor *a = ot_rand(dt, 3, sa, 9, -1, 1), *b = ot_rand(dt, 2, sb, 10, -1, 1), *in[2] = {a, b};
    em_tensor *a2 = ot_rand(dt, 2, sg, 11, -1, 1), *c = ot_rand(dt, 1, sc, 12, -1, 1), *gin[3] = {a2, b, c};
    unsigned long before = gemm_calls();
    char road[256];
    em_tensor *gm = ot_run1_on(em_cuda(0), 1, "matmul", in, 2, NULL, 0, road, sizeof road);
    em_tensor *gg = ot_run1_on(em_cuda(0), 1, "gemm", gin, 3, NULL, 0, NULL, 0);
    if (gemm_calls() != before) fail_msg("portable %s: %lu cuBLAS calls", em_dtype_name(dt), gemm_calls() - before);
    if (road[0]) fail_msg("portable %s: a road is reported: %s", em_dtype_name(dt), road);
    em_tensor *cm = ot_run1_on(em_cpu(), 1, "matmul", in, 2, NULL, 0, NULL, 0);
    em_tensor *cg = ot_run1_on(em_cpu(), 1, "gemm", gin, 3, NULL, 0, NULL, 0);
    assert_memory_equal(em_tensor_data(cm), em_tensor_data(gm), 2 * 9 * 6 * 2);
    assert_memory_equal(em_tensor_data(cg), em_tensor_data(gg), 18 * 6 * 2);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(a2), em_tensor_release(c);
    em_tensor_release(gm), em_tensor_release(gg), em_tensor_release(cm), em_tensor_release(cg);
  }
}

/* One matmul whose road must be the f32 one: no half product reaches cuBLAS, the road names
 * the reason, the result is still within one rounding. */
static void expect_f32_road(em_dtype t, em_tensor *a, em_tensor *b, const double *want, int64_t n, const char *reason,
                            const char *what) {
  em_tensor *in[2] = {a, b};
  char road[256];
  const char *half_type = t == EM_F16 ? "CUDA_R_16F" : "CUDA_R_16BF";
  unsigned long before = gemm_calls();
  em_tensor *y = ot_run1_on(em_cuda(0), 0, "matmul", in, 2, NULL, 0, road, sizeof road);
  if (gemm_calls() != before && strstr(ts_blas_last_gemm(), half_type)) fail_msg("%s: a %s product reached cuBLAS: %s", what, em_dtype_name(t), ts_blas_last_gemm());
  char head[48];
  snprintf(head, sizeof head, "%s on f32 copies (", em_dtype_name(t));
  if (strncmp(road, head, strlen(head))) fail_msg("%s: the road is '%s'", what, road);
  expect_contains(road, reason, what);
  ts_expect_one_rounding(y, t, want, n, what);
  em_tensor_release(y);
}

static void test_products_fallbacks(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const int64_t sa[2] = {4, 6}, sb[2] = {6, 3};
  em_tensor *a = ot_rand(EM_F16, 2, sa, 13, -1, 1), *b = ot_rand(EM_F16, 2, sb, 14, -1, 1);
  double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), want[12];
  ref_product(av, bv, 0, 0, 4, 3, 6, 1, NULL, 0, 0, 0, want);
  /* EMBER_CUBLAS=0: the f32 copies take Ember's kernels, and the road says both */
  setenv("EMBER_CUBLAS", "0", 1);
  expect_f32_road(EM_F16, a, b, want, 12, "EMBER_CUBLAS=0): Ember's kernels: EMBER_CUBLAS=0",
                  "EMBER_CUBLAS=0");
  unsetenv("EMBER_CUBLAS");
  /* cuBLAS declining the f16 product (its first GemmEx: NOT_SUPPORTED): the f32 copies, whose
   * product cuBLAS then takes */
  if (!use_doubles_cache("9.0", 0)) skip(); /* a fresh double: it reads FAKECUBLAS_FAIL at its first call */
  setenv("FAKECUBLAS_FAIL", "cublasGemmEx=15@1", 1);
  expect_f32_road(EM_F16, a, b, want, 12, "cublasGemmEx declined: CUBLAS_STATUS_NOT_SUPPORTED", "cuBLAS declined");
  expect_contains(ts_blas_last_gemm(), "A=CUDA_R_32F", "declined f16: the f32 copies' product");
  unsetenv("FAKECUBLAS_FAIL");
  /* an empty sum: k = 0 writes zeros through the f32 road's kernel */
  const int64_t se[2] = {4, 0}, sf[2] = {0, 3};
  em_tensor *e = ot_rand(EM_F16, 2, se, 15, -1, 1), *f = ot_rand(EM_F16, 2, sf, 16, -1, 1);
  const double zeros[12] = {0};
  expect_f32_road(EM_F16, e, f, zeros, 12, "an empty sum (k = 0)", "k = 0");
  /* a sum over a broadcast batch axis: the f32 road sums it before the one rounding */
  {
    const int64_t s1[4] = {2, 1, 4, 6}, s2[4] = {1, 3, 6, 5}, sdy[4] = {2, 3, 4, 5};
    em_tensor *x = ot_rand(EM_BF16, 4, s1, 17, -1, 1), *w = ot_rand(EM_BF16, 4, s2, 18, -1, 1);
    em_tensor *dy = ot_rand(EM_BF16, 4, sdy, 19, -1, 1), *in[3] = {dy, x, w};
    double *wv = ts_half_decoded(w), *dv = ts_half_decoded(dy), want2[48] = {0}, part[24];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) { /* d/dx[i, 0] = sum over j of dy[i, j] w[0, j]^T */
        ref_product(dv + (i * 3 + j) * 20, wv + j * 30, 0, 1, 4, 6, 5, 1, NULL, 0, 0, 0, part);
        for (int q = 0; q < 24; q++) want2[i * 24 + q] += part[q];
      }
    const em_attr at[1] = {AI("which", 0)};
    char road[256];
    unsigned long before = gemm_calls();
    em_tensor *y = ot_run1_on(em_cuda(0), 0, "_matmul_grad", in, 3, at, 1, road, sizeof road);
    if (gemm_calls() != before && strstr(ts_blas_last_gemm(), "CUDA_R_16BF")) fail_msg("a summed broadcast reached cuBLAS in bf16: %s", ts_blas_last_gemm());
    expect_contains(road, "bf16 on f32 copies (a sum over a broadcast batch axis", "summed broadcast");
    ts_expect_one_rounding(y, EM_BF16, want2, 48, "_matmul_grad over a broadcast batch");
    free(wv), free(dv);
    em_tensor_release(x), em_tensor_release(w), em_tensor_release(dy), em_tensor_release(y);
  }
  free(av), free(bv);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(e), em_tensor_release(f);
  /* a Turing device: f16 through cuBLAS, bf16 on f32 copies (which cuBLAS takes in f32) */
  if (!use_doubles("7.5")) skip();
  em_tensor *a16 = ot_rand(EM_F16, 2, sa, 20, -1, 1), *b16 = ot_rand(EM_F16, 2, sb, 21, -1, 1), *in16[2] = {a16, b16};
  char road[256];
  em_tensor *y = ot_run1_on(em_cuda(0), 0, "matmul", in16, 2, NULL, 0, road, sizeof road);
  expect_cublas_road(road, EM_F16, "f16 on CC 7.5");
  expect_half_gemm(EM_F16, "f16 on CC 7.5");
  em_tensor_release(y);
  em_tensor *a_b = ot_rand(EM_BF16, 2, sa, 22, -1, 1), *b_b = ot_rand(EM_BF16, 2, sb, 23, -1, 1);
  av = ts_half_decoded(a_b), bv = ts_half_decoded(b_b);
  ref_product(av, bv, 0, 0, 4, 3, 6, 1, NULL, 0, 0, 0, want);
  expect_f32_road(EM_BF16, a_b, b_b, want, 12,
                  "tensor cores for bf16 start at CC 8.0 (Ampere)): cuBLAS 13.1.0", "bf16 on CC 7.5");
  expect_contains(ts_blas_last_gemm(), "A=CUDA_R_32F", "bf16 on CC 7.5: the f32 copies' product");
  free(av), free(bv);
  em_tensor_release(a16), em_tensor_release(b16), em_tensor_release(a_b), em_tensor_release(b_b);
}

/* The rule alone: tensor cores for f16 from Volta (7.0), for bf16 from Ampere (8.0). */
static void test_half_rule(void **state) {
  (void)state;
  const struct { em_dtype t; int cc, want; } rows[] = {
      {EM_F16, 61, 0}, {EM_F16, 70, 1}, {EM_F16, 75, 1}, {EM_F16, 120, 1},
      {EM_BF16, 70, 0}, {EM_BF16, 75, 0}, {EM_BF16, 80, 1}, {EM_BF16, 90, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char why[256] = "", why2[256] = "";
    int b = em_cublas_half_supports(rows[i].t, rows[i].cc, why, sizeof why);
    int d = em_cudnn_half_supports(rows[i].t, rows[i].cc, why2, sizeof why2);
    if (b != rows[i].want || d != rows[i].want || !why[0] || !why2[0])
      fail_msg("%s on CC %d: cuBLAS %d (%s), cuDNN %d (%s), want %d", em_dtype_name(rows[i].t), rows[i].cc, b, why, d,
               why2, rows[i].want);
    if (!rows[i].want) expect_contains(why, rows[i].t == EM_F16 ? "CC 7.0" : "CC 8.0", "the reason");
  }
}

/* -------------------------------------------------------- convolutions --- */

/* x [2, 3, 6, 5] with w [4, 3, 3, 3], pads 1, stride 1 (y [2, 4, 6, 5]); the three directions
 * in double from decoded inputs. */
enum { N = 2, C = 3, M = 4, H = 6, W = 5, K = 3 };
#define XI(n, c, i, j) ((((n) * C + (c)) * H + (i)) * W + (j))
#define YI(n, o, i, j) ((((n) * M + (o)) * H + (i)) * W + (j))
#define WI(o, c, p, q) ((((o) * C + (c)) * K + (p)) * K + (q))

/* Calls f(n, o, c, i, j, p, q, xi) for every term x[n, c, i+p-1, j+q-1] w[o, c, p, q]. */
#define FOR_TERMS(body)                                                                                              \
  for (int n = 0; n < N; n++)                                                                                        \
    for (int o = 0; o < M; o++)                                                                                      \
      for (int i = 0; i < H; i++)                                                                                    \
        for (int j = 0; j < W; j++)                                                                                  \
          for (int c = 0; c < C; c++)                                                                                \
            for (int p = 0; p < K; p++)                                                                              \
              for (int q = 0; q < K; q++) {                                                                          \
                int yi = i + p - 1, xj = j + q - 1;                                                                  \
                if (yi < 0 || yi >= H || xj < 0 || xj >= W) continue;                                              \
                body;                                                                                                \
              }

static void expect_cudnn(em_dtype t, const char *road, const char *dir, unsigned long calls_before, const char *what) {
  if (conv_calls() == calls_before) fail_msg("%s: cuDNN not called", what);
  char want[128];
  snprintf(want, sizeof want, "cuDNN, %s algorithm", dir);
  if (strncmp(road, want, strlen(want))) fail_msg("%s: the road is '%s'", what, road);
  snprintf(want, sizeof want, "(%s, f32 accumulation, tensor-op math)", em_dtype_name(t));
  expect_contains(road, want, what);
  const char *call = ts_dnn_last_call();
  expect_contains(call, "TENSOR_OP_MATH", what);
  expect_contains(call, t == EM_F16 ? "]f16 " : "]bf16 ", what);
}

static void convolutions_through_cudnn(em_dtype t, int portable) {
  const int64_t sx[4] = {N, C, H, W}, sw[4] = {M, C, K, K}, sy[4] = {N, M, H, W}, sbm[1] = {M}, sbc[1] = {C};
  const int64_t pads[4] = {1, 1, 1, 1};
  em_tensor *x = ot_rand(t, 4, sx, 31, -1, 1), *w = ot_rand(t, 4, sw, 32, -1, 1), *dy = ot_rand(t, 4, sy, 33, -1, 1);
  em_tensor *bm = ot_rand(t, 1, sbm, 34, -1, 1), *bc = ot_rand(t, 1, sbc, 35, -1, 1);
  double *xv = ts_half_decoded(x), *wv = ts_half_decoded(w), *dv = ts_half_decoded(dy), *bmv = ts_half_decoded(bm), *bcv = ts_half_decoded(bc);
  double fwd[N * M * H * W], adj[N * C * H * W], wg[M * C * K * K], tr[N * C * H * W];
  for (int n = 0; n < N; n++)
    for (int o = 0; o < M; o++)
      for (int i = 0; i < H * W; i++) fwd[(n * M + o) * H * W + i] = bmv[o];
  memset(adj, 0, sizeof adj), memset(wg, 0, sizeof wg);
  FOR_TERMS(fwd[YI(n, o, i, j)] += xv[XI(n, c, yi, xj)] * wv[WI(o, c, p, q)];
            adj[XI(n, c, yi, xj)] += dv[YI(n, o, i, j)] * wv[WI(o, c, p, q)];
            wg[WI(o, c, p, q)] += xv[XI(n, c, yi, xj)] * dv[YI(n, o, i, j)])
  /* convolution_transpose of dy (channels M) with w [M, C, 3, 3] and a bias [C]: the adjoint */
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < H * W; i++) tr[(n * C + c) * H * W + i] = adj[(n * C + c) * H * W + i] + bcv[c];
  const em_attr at[1] = {AIS("pads", pads, 4)};
  const em_attr gat[2] = {AIS("pads", pads, 4), AI("transpose", 0)};
  struct {
    const char *op, *dir;
    em_tensor *in[3];
    int n_in;
    const em_attr *at;
    int n_at;
    const double *want;
    int64_t n;
  } cases[] = {
      {"convolution", "forward", {x, w, bm}, 3, at, 1, fwd, N * M * H * W},
      {"convolution_transpose", "backward data", {dy, w, bc}, 3, at, 1, tr, N * C * H * W},
      {"_conv_grad_input", "backward data", {dy, w, x}, 3, gat, 2, adj, N * C * H * W},
      {"_conv_grad_weight", "backward filter", {x, dy, w}, 3, gat, 2, wg, M * C * K * K},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char road[256], what[96];
    snprintf(what, sizeof what, "%s %s%s", cases[k].op, em_dtype_name(t), portable ? " (portable)" : "");
    unsigned long before = conv_calls(), searched = finds();
    em_tensor *y = ot_run1_on(em_cuda(0), portable, cases[k].op, cases[k].in, cases[k].n_in, cases[k].at, cases[k].n_at,
                          road, sizeof road);
    if (portable) {
      if (conv_calls() != before || finds() != searched) fail_msg("%s: cuDNN called", what);
      em_tensor *c = ot_run1_on(em_cpu(), 1, cases[k].op, cases[k].in, cases[k].n_in, cases[k].at, cases[k].n_at, NULL, 0);
      assert_memory_equal(em_tensor_data(c), em_tensor_data(y), (size_t)cases[k].n * 2);
      em_tensor_release(c);
    } else {
      expect_cudnn(t, road, cases[k].dir, before, what);
    }
    ts_expect_one_rounding(y, t, cases[k].want, cases[k].n, what);
    em_tensor_release(y);
  }
  free(xv), free(wv), free(dv), free(bmv), free(bcv);
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(dy), em_tensor_release(bm), em_tensor_release(bc);
}

static void test_convolutions_through_cudnn(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  convolutions_through_cudnn(EM_F16, 0);
  convolutions_through_cudnn(EM_BF16, 0);
}

static void test_convolutions_portable(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  convolutions_through_cudnn(EM_F16, 1);
  convolutions_through_cudnn(EM_BF16, 1);
}

/* A convolution cuDNN is not used for: the f32 road with the reason, one rounding still. */
static void conv_fallback(em_dtype t, const int64_t *pads, const char *reason, const char *what) {
  const int64_t sx[4] = {1, 2, 5, 5}, sw[4] = {3, 2, 3, 3};
  em_tensor *x = ot_rand(t, 4, sx, 41, -1, 1), *w = ot_rand(t, 4, sw, 42, -1, 1), *in[2] = {x, w};
  const em_attr at[1] = {AIS("pads", pads, 4)};
  char road[256], head[48];
  unsigned long before = conv_calls();
  em_tensor *y = ot_run1_on(em_cuda(0), 0, "convolution", in, 2, at, 1, road, sizeof road);
  em_tensor *c = ot_run1_on(em_cpu(), 0, "convolution", in, 2, at, 1, NULL, 0);
  if (conv_calls() != before && strstr(ts_dnn_last_call(), t == EM_F16 ? "]f16 " : "]bf16 "))
    fail_msg("%s: a half convolution reached cuDNN: %s", what, ts_dnn_last_call());
  snprintf(head, sizeof head, "%s on f32 copies (", em_dtype_name(t));
  if (strncmp(road, head, strlen(head))) fail_msg("%s: the road is '%s'", what, road);
  expect_contains(road, reason, what);
  double *want = ts_half_decoded(c); /* the CPU's f32 road, already checked against a reference elsewhere */
  ts_expect_one_rounding(y, t, want, em_tensor_numel(c), what);
  free(want);
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(y), em_tensor_release(c);
}

static void test_convolution_fallbacks(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const int64_t sym[4] = {1, 1, 1, 1}, asym[4] = {0, 1, 2, 1};
  conv_fallback(EM_F16, asym, "cuDNN does not take it: axis 0's padding is not the same at both ends",
                "asymmetric padding");
  /* cuDNN declining the half convolution at run time (its first cudnnConvolutionForward): the
   * f32 copies' convolution, which cuDNN then takes */
  setenv("FAKECUDNN_FAIL", "cudnnConvolutionForward=3000@1", 1);
  conv_fallback(EM_F16, sym, "cudnnConvolutionForward declined: CUDNN_STATUS_NOT_SUPPORTED (forward f16", "declined");
  expect_contains(ts_dnn_last_call(), "]f32 ", "declined f16: the f32 copies' convolution");
  unsetenv("FAKECUDNN_FAIL");
  setenv("EMBER_CUDNN", "0", 1);
  conv_fallback(EM_BF16, sym, "EMBER_CUDNN=0): Ember's kernels: EMBER_CUDNN=0", "EMBER_CUDNN=0");
  unsetenv("EMBER_CUDNN");
  if (!use_doubles("7.5")) skip();
  conv_fallback(EM_BF16, sym, "tensor cores for bf16 start at CC 8.0 (Ampere)): cuDNN, forward algorithm",
                "bf16 on CC 7.5");
  expect_contains(ts_dnn_last_call(), "]f32 ", "bf16 on CC 7.5: the f32 copies' convolution");
  const int64_t sx[4] = {1, 2, 5, 5}, sw[4] = {3, 2, 3, 3};
  em_tensor *x = ot_rand(EM_F16, 4, sx, 43, -1, 1), *w = ot_rand(EM_F16, 4, sw, 44, -1, 1), *in[2] = {x, w};
  const em_attr at[1] = {AIS("pads", sym, 4)};
  char road[256];
  unsigned long before = conv_calls();
  em_tensor *y = ot_run1_on(em_cuda(0), 0, "convolution", in, 2, at, 1, road, sizeof road);
  expect_cudnn(EM_F16, road, "forward", before, "f16 on CC 7.5");
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(y);
}

/* One geometry in f32, f16 and bf16: three searches (the key names the dtype), kept in memory
 * and on disk apart: a new runtime on the same cache searches none of them again. */
static void test_algorithm_key_by_dtype(void **state) {
  (void)state;
  if (!use_doubles("9.0")) skip();
  const int64_t sx[4] = {2, 4, 7, 7}, sw[4] = {8, 4, 3, 3}, pads[4] = {1, 1, 1, 1};
  const em_attr at[1] = {AIS("pads", pads, 4)};
  const em_dtype types[3] = {EM_F32, EM_F16, EM_BF16};
  for (int pass = 0; pass < 2; pass++) {
    if (pass && !use_doubles_cache("9.0", 1)) skip();
    for (int t = 0; t < 3; t++) {
      em_tensor *x = ot_rand(types[t], 4, sx, 51, -1, 1), *w = ot_rand(types[t], 4, sw, 52, -1, 1), *in[2] = {x, w};
      for (int again = 0; again < 2; again++) {
        unsigned long searched = finds();
        em_tensor *y = ot_run1_on(em_cuda(0), 0, "convolution", in, 2, at, 1, NULL, 0);
        unsigned long want = !pass && !again;
        if (finds() - searched != want)
          fail_msg("%s, %s, run %d: %lu searches, want %lu", em_dtype_name(types[t]), pass ? "a new runtime" : "first",
                   again, finds() - searched, want);
        em_tensor_release(y);
      }
      em_tensor_release(x), em_tensor_release(w);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_half_rule),
      cmocka_unit_test(test_products_through_cublas),
      cmocka_unit_test(test_products_portable),
      cmocka_unit_test(test_products_fallbacks),
      cmocka_unit_test(test_convolutions_through_cudnn),
      cmocka_unit_test(test_convolutions_portable),
      cmocka_unit_test(test_convolution_fallbacks),
      cmocka_unit_test(test_algorithm_key_by_dtype),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return r;
}
