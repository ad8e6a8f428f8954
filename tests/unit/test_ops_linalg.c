/* ops/linalg.c: matmul and gemm against a naive float64 reference written
 * here (promotion, broadcast batches, transposes), portable mode's bits
 * against a plain fmaf / fma loop written here, finite-difference
 * gradients, thread-count determinism and error messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

#define OK(x) assert_int_equal((x), EM_OK)

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AF(const char *name, double v) { return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v}; }

/* ---------------------------------------------------------- reference --- */

typedef struct shp {
  int n;
  int64_t d[EM_MAX_DIMS];
} shp;

static int64_t numel(const shp *s) {
  int64_t n = 1;
  for (int i = 0; i < s->n; i++) n *= s->d[i];
  return n;
}

/* numpy matmul in float64: y = op(a) @ op(b), ys its shape. */
static void ref_matmul(const shp *sa, const double *a, const shp *sb, const double *b, int ta, int tb, shp *ys,
                       double **y) {
  /* Promote to rank >= 2. */
  shp A = *sa, B = *sb;
  if (A.n == 1) A = (shp){2, {1, sa->d[0]}};
  if (B.n == 1) B = (shp){2, {sb->d[0], 1}};
  int64_t M = ta ? A.d[A.n - 1] : A.d[A.n - 2], K = ta ? A.d[A.n - 2] : A.d[A.n - 1];
  int64_t N = tb ? B.d[B.n - 2] : B.d[B.n - 1];
  int nb = (A.n > B.n ? A.n : B.n) - 2;
  int64_t batch[EM_MAX_DIMS];
  for (int j = 0; j < nb; j++) {
    int ia = j - (nb - (A.n - 2)), ib = j - (nb - (B.n - 2));
    int64_t da = ia >= 0 ? A.d[ia] : 1, db = ib >= 0 ? B.d[ib] : 1;
    batch[j] = da == 1 ? db : da;
  }
  ys->n = 0;
  int64_t n_batch = 1;
  for (int j = 0; j < nb; j++) ys->d[ys->n++] = batch[j], n_batch *= batch[j];
  if (sa->n > 1) ys->d[ys->n++] = M;
  if (sb->n > 1) ys->d[ys->n++] = N;
  *y = calloc((size_t)(n_batch * M * N + 1), sizeof(double));
  for (int64_t bi = 0; bi < n_batch; bi++) {
    /* The batch multi-index, mapped into a and b (size-1 axes broadcast). */
    int64_t idx[EM_MAX_DIMS], rem = bi;
    for (int j = nb - 1; j >= 0; j--) idx[j] = rem % batch[j], rem /= batch[j];
    int64_t oa = 0, ob = 0;
    for (int j = 0; j < nb; j++) {
      int ia = j - (nb - (A.n - 2)), ib = j - (nb - (B.n - 2));
      if (ia >= 0) oa = oa * A.d[ia] + (A.d[ia] == 1 ? 0 : idx[j]);
      if (ib >= 0) ob = ob * B.d[ib] + (B.d[ib] == 1 ? 0 : idx[j]);
    }
    const double *am = a + oa * M * K, *bm = b + ob * K * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t p = 0; p < K; p++) {
          double av = ta ? am[p * M + i] : am[i * K + p];
          double bv = tb ? bm[j * K + p] : bm[p * N + j];
          s += av * bv;
        }
        (*y)[bi * M * N + i * N + j] = s;
      }
  }
}

static em_tensor *rnd(em_dtype dt, const shp *s, uint64_t seed) { return ot_rand(dt, s->n, s->d, seed, -1, 1); }

static int64_t abs_dims_product(const shp *s) { return numel(s); }

/* Runs matmul (or gemm through the same path) on random data and compares with ref_matmul. */
static void check_matmul(em_dtype dt, shp sa, shp sb, int ta, int tb, double tol) {
  em_tensor *in[2] = {rnd(dt, &sa, 11 + (uint64_t)sa.n), rnd(dt, &sb, 23 + (uint64_t)sb.n)};
  em_attr at[2] = {AI("transpose_a", ta), AI("transpose_b", tb)};
  em_tensor *out = NULL;
  if (ot_run("matmul", in, 2, at, 2, &out, 1)) fail_msg("matmul: %s", em_last_error());
  double *a = ot_values(in[0], NULL), *b = ot_values(in[1], NULL), *want;
  shp ys;
  ref_matmul(&sa, a, &sb, b, ta, tb, &ys, &want);
  ot_expect_shape(out, dt, ys.n, ys.d, "matmul");
  int64_t n;
  double *got = ot_values(out, &n);
  assert_int_equal(n, abs_dims_product(&ys));
  char what[64];
  snprintf(what, sizeof what, "matmul %s ranks %d,%d ta=%d tb=%d", em_dtype_name(dt), sa.n, sb.n, ta, tb);
  ot_expect_close(got, want, n, tol, tol, what);
  free(a), free(b), free(want), free(got);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
}

/* ------------------------------------------------------------ forward --- */

static const struct {
  shp a, b;
  int ta, tb;
} mm_cases[] = {
  {{2, {1, 1}}, {2, {1, 1}}, 0, 0},
  {{2, {3, 7}}, {2, {7, 5}}, 0, 0},       /* 3x5x7 (M,N,K) */
  {{2, {64, 32}}, {2, {32, 128}}, 0, 0},  /* 64x128x32 */
  {{1, {4}}, {2, {4, 6}}, 0, 0},          /* 1-D @ 2-D */
  {{2, {5, 4}}, {1, {4}}, 0, 0},          /* 2-D @ 1-D */
  {{1, {9}}, {1, {9}}, 0, 0},             /* 1-D @ 1-D -> scalar */
  {{4, {2, 1, 3, 4}}, {3, {5, 4, 6}}, 0, 0}, /* batch broadcast -> [2,5,3,6] */
  {{3, {2, 3, 4}}, {2, {4, 5}}, 0, 0},    /* stacked a, one b (a dense layer) */
  {{2, {3, 4}}, {3, {2, 4, 5}}, 0, 0},    /* one a, stacked b */
  {{3, {2, 3, 4}}, {1, {4}}, 0, 0},       /* batch @ 1-D */
  {{1, {4}}, {3, {2, 4, 3}}, 0, 0},       /* 1-D @ batch */
  {{2, {7, 3}}, {2, {7, 5}}, 1, 0},       /* transpose_a */
  {{2, {3, 7}}, {2, {5, 7}}, 0, 1},       /* transpose_b */
  {{2, {7, 3}}, {2, {5, 7}}, 1, 1},
  {{4, {2, 1, 4, 3}}, {3, {5, 6, 4}}, 1, 1}, /* both, broadcast batch */
  {{3, {3, 4, 2}}, {2, {4, 5}}, 1, 0},    /* transposed stacked a (no folding) */
  {{2, {3, 0}}, {2, {0, 4}}, 0, 0},       /* K = 0: zeros */
  {{3, {2, 3, 0}}, {2, {0, 5}}, 0, 0},
  {{2, {0, 3}}, {2, {3, 4}}, 0, 0},       /* M = 0: empty */
  {{3, {0, 3, 4}}, {2, {4, 2}}, 0, 0},    /* empty batch */
};

static void test_matmul_f64(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++)
    check_matmul(EM_F64, mm_cases[i].a, mm_cases[i].b, mm_cases[i].ta, mm_cases[i].tb, 1e-12);
}

static void test_matmul_f32(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++)
    check_matmul(EM_F32, mm_cases[i].a, mm_cases[i].b, mm_cases[i].ta, mm_cases[i].tb, 1e-5);
}

static void test_matmul_int(void **state) {
  (void)state;
  /* Integer values, exact results. */
  const shp sa = {3, {2, 3, 4}}, sb = {2, {4, 5}};
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_I64 : EM_I32;
    double av[24], bv[20];
    for (int i = 0; i < 24; i++) av[i] = (i * 7) % 11 - 5;
    for (int i = 0; i < 20; i++) bv[i] = (i * 5) % 9 - 4;
    em_tensor *in[2] = {ot_tensor(dt, sa.n, sa.d, av), ot_tensor(dt, sb.n, sb.d, bv)}, *out = NULL;
    OK(ot_run("matmul", in, 2, NULL, 0, &out, 1));
    shp ys;
    double *want;
    ref_matmul(&sa, av, &sb, bv, 0, 0, &ys, &want);
    ot_expect_shape(out, dt, ys.n, ys.d, "int matmul");
    double *got = ot_values(out, NULL);
    ot_expect_close(got, want, numel(&ys), 0, 0, "int matmul");
    free(got), free(want);
    em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
  }
}

/* K = 0 gives exact zeros even when the output buffer held garbage (it is
 * reused from earlier values): run a product twice in one graph. */
static void test_matmul_k0_zeros(void **state) {
  (void)state;
  const shp sa = {2, {3, 0}}, sb = {2, {0, 4}};
  em_tensor *in[2] = {rnd(EM_F32, &sa, 1), rnd(EM_F32, &sb, 2)}, *out = NULL;
  OK(ot_run("matmul", in, 2, NULL, 0, &out, 1));
  int64_t n;
  double *v = ot_values(out, &n);
  assert_int_equal(n, 12);
  for (int i = 0; i < 12; i++) assert_true(v[i] == 0.0);
  free(v);
  em_tensor_release(in[0]), em_tensor_release(in[1]), em_tensor_release(out);
}

/* --------------------------------------------------------------- gemm --- */

/* as_ints: alpha and beta given as INT attributes (integral values), which a
 * float attribute must accept as the same number. */
static void check_gemm_attrs(em_dtype dt, shp sa, shp sb, const shp *sc, int ta, int tb, double alpha, double beta,
                             double tol, int as_ints) {
  em_tensor *in[3] = {rnd(dt, &sa, 5), rnd(dt, &sb, 6), sc ? rnd(dt, sc, 7) : NULL};
  em_attr at[4] = {AF("alpha", alpha), AF("beta", beta), AI("transA", ta), AI("transB", tb)};
  if (as_ints) at[0] = AI("alpha", (int64_t)alpha), at[1] = AI("beta", (int64_t)beta);
  em_tensor *out = NULL;
  if (ot_run("gemm", in, sc ? 3 : 2, at, 4, &out, 1)) fail_msg("gemm: %s", em_last_error());
  double *a = ot_values(in[0], NULL), *b = ot_values(in[1], NULL), *want, *c = sc ? ot_values(in[2], NULL) : NULL;
  shp ys;
  ref_matmul(&sa, a, &sb, b, ta, tb, &ys, &want);
  int64_t M = ys.d[0], N = ys.d[1];
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double cv = 0;
      if (sc) {
        int64_t rows = sc->n == 2 ? sc->d[0] : 1, cols = sc->n >= 1 ? sc->d[sc->n - 1] : 1;
        cv = c[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
      }
      want[i * N + j] = alpha * want[i * N + j] + (sc ? beta * cv : 0);
    }
  ot_expect_shape(out, dt, 2, ys.d, "gemm");
  double *got = ot_values(out, NULL);
  ot_expect_close(got, want, M * N, tol, tol, "gemm");
  free(a), free(b), free(c), free(want), free(got);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  em_tensor_release(out);
}

static void check_gemm(em_dtype dt, shp sa, shp sb, const shp *sc, int ta, int tb, double alpha, double beta,
                       double tol) {
  check_gemm_attrs(dt, sa, sb, sc, ta, tb, alpha, beta, tol, 0);
}

static void test_gemm_forward(void **state) {
  (void)state;
  const shp full = {2, {3, 5}}, row = {1, {5}}, col = {2, {3, 1}}, one = {0, {0}};
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    double tol = k ? 1e-12 : 1e-5;
    check_gemm(dt, (shp){2, {3, 4}}, (shp){2, {4, 5}}, NULL, 0, 0, 1.0, 1.0, tol);
    check_gemm(dt, (shp){2, {3, 4}}, (shp){2, {4, 5}}, &full, 0, 0, 0.5, 2.0, tol);
    check_gemm(dt, (shp){2, {4, 3}}, (shp){2, {4, 5}}, &row, 1, 0, -1.5, 0.25, tol);
    check_gemm(dt, (shp){2, {3, 4}}, (shp){2, {5, 4}}, &col, 0, 1, 1.0, 1.0, tol);
    check_gemm(dt, (shp){2, {4, 3}}, (shp){2, {5, 4}}, &one, 1, 1, 2.0, -1.0, tol);
    check_gemm(dt, (shp){2, {64, 33}}, (shp){2, {33, 5}}, &row, 0, 0, 1.0, 1.0, tol);
    check_gemm(dt, (shp){2, {3, 0}}, (shp){2, {0, 5}}, &full, 0, 0, 1.0, 3.0, tol); /* K = 0: beta * c */
    check_gemm(dt, (shp){2, {3, 0}}, (shp){2, {0, 5}}, NULL, 0, 0, 1.0, 3.0, tol);  /* K = 0, no c: zeros */
    /* alpha = INT 2, beta = INT -3 are 2.0 and -3.0, not the defaults (1, 1). */
    check_gemm_attrs(dt, (shp){2, {3, 4}}, (shp){2, {4, 5}}, &full, 0, 0, 2.0, -3.0, tol, 1);
    check_gemm_attrs(dt, (shp){2, {4, 3}}, (shp){2, {4, 5}}, &row, 1, 0, -2.0, 0.0, tol, 1);
  }
}

/* ------------------------------------------------------ portable order --- */

/* Runs a one-output op on the CPU in portable mode (Ember's own GEMM, not OpenBLAS). */
static em_tensor *run_portable(const char *op, em_tensor *const *in, int n_in, const em_attr *at, int n_at) {
  em_graph *g;
  em_exec *e;
  em_var v[3], y;
  em_feed f[3];
  OK(em_graph_create(&g));
  for (int i = 0; i < n_in; i++) {
    char name[8];
    snprintf(name, sizeof name, "in%d", i);
    OK(em_input(g, name, em_tensor_dtype(in[i]), em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &v[i]));
    f[i] = (em_feed){v[i], in[i]};
  }
  if (em_apply(g, op, v, n_in, at, n_at, &y, 1)) fail_msg("%s: %s", op, em_last_error());
  OK(em_exec_create(g, &y, 1, em_cpu(), &e));
  OK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_tensor *out = NULL;
  if (em_exec_run(e, f, n_in, &out)) fail_msg("%s (portable): %s", op, em_last_error());
  em_exec_free(e);
  em_graph_free(g);
  return out;
}

/* kernels/gemm_math.h's order, written out here with C99 fmaf / fma: for each
 * element acc = +0, acc = fma(x, y, acc) for p = 0 .. K-1, t = alpha * acc, then
 * t + beta * c (c full [M, N], or none). 2-D operands, row-major. */
#define REF_PORTABLE(T, SUF, FMA)                                                                                \
  static void ref_portable_##SUF(const T *a, const T *b, const T *c, int64_t M, int64_t N, int64_t K, int ta,     \
                                 int tb, T alpha, T beta, T *out) {                                              \
    for (int64_t i = 0; i < M; i++)                                                                             \
      for (int64_t j = 0; j < N; j++) {                                                                         \
        T acc = 0;                                                                                              \
        for (int64_t p = 0; p < K; p++)                                                                         \
          acc = FMA(ta ? a[p * M + i] : a[i * K + p], tb ? b[j * K + p] : b[p * N + j], acc);                   \
        T t = alpha * acc;                                                                                      \
        out[i * N + j] = c ? t + beta * c[i * N + j] : t;                                                       \
      }                                                                                                         \
  }
REF_PORTABLE(float, f32, fmaf)
REF_PORTABLE(double, f64, fma)

/* got must equal want bit for bit (the sign of zero included). */
static void expect_bits(const em_tensor *got, const void *want, int64_t n, const char *what) {
  size_t es = em_dtype_size(em_tensor_dtype(got));
  assert_int_equal(em_tensor_numel(got), n);
  const unsigned char *g = em_tensor_data(got), *w = want;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(g + (size_t)i * es, w + (size_t)i * es, es)) {
      double gv = es == 4 ? ((const float *)g)[i] : ((const double *)g)[i];
      double wv = es == 4 ? ((const float *)w)[i] : ((const double *)w)[i];
      fail_msg("%s: element %lld is %a, the fma loop gives %a", what, (long long)i, gv, wv);
    }
}

/* One 2-D product in portable mode against the fma loop: matmul, or gemm with alpha, beta and a full c. */
static void check_portable(em_dtype dt, int64_t M, int64_t N, int64_t K, int ta, int tb, int gemm, double alpha,
                           double beta, double a_fill, double b_fill) {
  shp sa = {2, {ta ? K : M, ta ? M : K}}, sb = {2, {tb ? N : K, tb ? K : N}}, sc = {2, {M, N}};
  em_tensor *in[3] = {rnd(dt, &sa, 41), rnd(dt, &sb, 43), rnd(dt, &sc, 47)};
  if (a_fill != 0) {
    em_tensor_release(in[0]), em_tensor_release(in[1]);
    double *av = malloc(sizeof(double) * (size_t)(M * K)), *bv = malloc(sizeof(double) * (size_t)(K * N));
    for (int64_t i = 0; i < M * K; i++) av[i] = a_fill;
    for (int64_t i = 0; i < K * N; i++) bv[i] = b_fill;
    in[0] = ot_tensor(dt, sa.n, sa.d, av), in[1] = ot_tensor(dt, sb.n, sb.d, bv);
    free(av), free(bv);
  }
  em_attr at[4];
  int n_at;
  if (gemm) {
    at[0] = AF("alpha", alpha), at[1] = AF("beta", beta), at[2] = AI("transA", ta), at[3] = AI("transB", tb);
    n_at = 4;
  } else {
    at[0] = AI("transpose_a", ta), at[1] = AI("transpose_b", tb);
    n_at = 2;
  }
  em_tensor *out = run_portable(gemm ? "gemm" : "matmul", in, gemm ? 3 : 2, at, n_at);
  char what[96];
  snprintf(what, sizeof what, "%s %s %lldx%lldx%lld ta=%d tb=%d (portable)", gemm ? "gemm" : "matmul",
           em_dtype_name(dt), (long long)M, (long long)N, (long long)K, ta, tb);
  const void *c = gemm ? em_tensor_data(in[2]) : NULL;
  if (dt == EM_F32) {
    float *want = malloc(sizeof(float) * (size_t)(M * N));
    ref_portable_f32(em_tensor_data(in[0]), em_tensor_data(in[1]), c, M, N, K, ta, tb, gemm ? (float)alpha : 1.0f,
                     (float)beta, want);
    expect_bits(out, want, M * N, what);
    free(want);
  } else {
    double *want = malloc(sizeof(double) * (size_t)(M * N));
    ref_portable_f64(em_tensor_data(in[0]), em_tensor_data(in[1]), c, M, N, K, ta, tb, gemm ? alpha : 1.0, beta,
                     want);
    expect_bits(out, want, M * N, what);
    free(want);
  }
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
  em_tensor_release(out);
}

/* Portable mode sums each element with one fma a step, in k order: the same
 * bits as a plain fmaf / fma loop (and different from x * y + acc rounded
 * twice in most elements of these products). Sizes cover the CPU's column
 * panels (16 floats, 8 doubles) and row blocks (4) with remainders. */
static void test_portable_fma_order(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_F64 : EM_F32;
    for (int t = 0; t < 4; t++) check_portable(dt, 37, 29, 45, t & 1, t >> 1, 0, 1, 0, 0, 0);
    check_portable(dt, 6, 35, 70, 0, 0, 1, -1.5, 0.25, 0, 0);
    check_portable(dt, 19, 3, 8, 1, 1, 1, 0.5, 2, 0, 0);
    /* Each product 1e-30 * -1e-30 rounds to -0 on its own but not inside an fma: acc starts at +0 and
     * the first fma makes it -0 (the exact -1e-60 rounds to -0), which every later one keeps. */
    check_portable(dt, 5, 18, 7, 0, 0, 0, 1, 0, 1e-30, k ? -1e-300 : -1e-30);
  }
}

/* ---------------------------------------------------------- gradients --- */

static void grad_matmul(shp sa, shp sb, int ta, int tb) {
  em_tensor *in[2] = {rnd(EM_F64, &sa, 31), rnd(EM_F64, &sb, 37)};
  em_attr at[2] = {AI("transpose_a", ta), AI("transpose_b", tb)};
  ot_gradcheck("matmul", in, 2, at, 2, 1, 0, 1e-6);
  em_tensor_release(in[0]), em_tensor_release(in[1]);
}

static void test_matmul_gradients(void **state) {
  (void)state;
  grad_matmul((shp){2, {3, 4}}, (shp){2, {4, 5}}, 0, 0);
  grad_matmul((shp){2, {1, 1}}, (shp){2, {1, 1}}, 0, 0);
  grad_matmul((shp){4, {2, 1, 3, 4}}, (shp){3, {5, 4, 6}}, 0, 0); /* broadcast batch both ways */
  grad_matmul((shp){3, {2, 3, 4}}, (shp){2, {4, 5}}, 0, 0);       /* folded dense-layer path */
  grad_matmul((shp){3, {2, 3, 4}}, (shp){2, {5, 4}}, 0, 1);
  grad_matmul((shp){2, {3, 4}}, (shp){3, {2, 4, 5}}, 0, 0);       /* a shared across b's batch */
  grad_matmul((shp){1, {4}}, (shp){2, {4, 5}}, 0, 0);             /* 1-D cases */
  grad_matmul((shp){2, {3, 4}}, (shp){1, {4}}, 0, 0);
  grad_matmul((shp){1, {6}}, (shp){1, {6}}, 0, 0);
  grad_matmul((shp){3, {2, 3, 4}}, (shp){1, {4}}, 0, 0);
  grad_matmul((shp){1, {4}}, (shp){3, {2, 4, 3}}, 0, 0);
  grad_matmul((shp){1, {4}}, (shp){3, {2, 3, 4}}, 0, 1);
  grad_matmul((shp){3, {2, 4, 3}}, (shp){1, {4}}, 1, 0);
  grad_matmul((shp){2, {4, 3}}, (shp){2, {4, 5}}, 1, 0);          /* transposes */
  grad_matmul((shp){2, {3, 4}}, (shp){2, {5, 4}}, 0, 1);
  grad_matmul((shp){2, {4, 3}}, (shp){2, {5, 4}}, 1, 1);
  grad_matmul((shp){4, {2, 1, 4, 3}}, (shp){3, {5, 6, 4}}, 1, 1);
  grad_matmul((shp){3, {3, 4, 2}}, (shp){2, {4, 5}}, 1, 0);
  grad_matmul((shp){2, {3, 4}}, (shp){2, {4, 0}}, 0, 0);          /* empty product: zero gradients */
}

static void grad_gemm(shp sa, shp sb, const shp *sc, int ta, int tb, double alpha, double beta) {
  em_tensor *in[3] = {rnd(EM_F64, &sa, 41), rnd(EM_F64, &sb, 43), sc ? rnd(EM_F64, sc, 47) : NULL};
  em_attr at[4] = {AF("alpha", alpha), AF("beta", beta), AI("transA", ta), AI("transB", tb)};
  ot_gradcheck("gemm", in, sc ? 3 : 2, at, 4, 1, 0, 1e-6);
  for (int i = 0; i < 3; i++) em_tensor_release(in[i]);
}

static void test_gemm_gradients(void **state) {
  (void)state;
  const shp full = {2, {3, 5}}, row = {1, {5}}, col = {2, {3, 1}}, one = {0, {0}}, one2 = {2, {1, 1}};
  grad_gemm((shp){2, {3, 4}}, (shp){2, {4, 5}}, NULL, 0, 0, 1.0, 1.0);
  grad_gemm((shp){2, {3, 4}}, (shp){2, {4, 5}}, &full, 0, 0, 0.5, 2.0);
  grad_gemm((shp){2, {4, 3}}, (shp){2, {4, 5}}, &row, 1, 0, -1.5, 0.25);
  grad_gemm((shp){2, {3, 4}}, (shp){2, {5, 4}}, &col, 0, 1, 1.0, 1.0);
  grad_gemm((shp){2, {4, 3}}, (shp){2, {5, 4}}, &one, 1, 1, 2.0, -1.0);
  grad_gemm((shp){2, {4, 3}}, (shp){2, {5, 4}}, &one2, 1, 1, 1.0, 3.0);
}

/* -------------------------------------------------------- determinism --- */

/* The same products with 1, 2, 3 and 4 threads: identical bits. (OpenBLAS's
 * own threading fails this: linalg.c keeps it single-threaded and splits
 * products into fixed tiles itself.) */
static void same_bits(const char *op, em_tensor *const *in, int n_in, const em_attr *at, int n_at) {
  const int threads[4] = {1, 2, 3, 4};
  em_tensor *out[4] = {NULL};
  for (int k = 0; k < 4; k++) {
    OK(em_set_num_threads(threads[k]));
    if (ot_run(op, in, n_in, at, n_at, &out[k], 1)) fail_msg("%s: %s", op, em_last_error());
  }
  OK(em_set_num_threads(0));
  size_t bytes = (size_t)em_tensor_numel(out[0]) * em_dtype_size(em_tensor_dtype(out[0]));
  for (int k = 1; k < 4; k++)
    if (memcmp(em_tensor_data(out[0]), em_tensor_data(out[k]), bytes))
      fail_msg("%s %s: 1 and %d threads give different bits", op, em_dtype_name(em_tensor_dtype(out[0])), threads[k]);
  for (int k = 0; k < 4; k++) em_tensor_release(out[k]);
}

static void determinism(em_dtype dt) {
  /* 300x500x400 (M x N x K). */
  const shp sa = {2, {300, 400}}, sb = {2, {400, 500}}, sy = {2, {300, 500}};
  em_tensor *in[3] = {rnd(dt, &sa, 101), rnd(dt, &sb, 103), rnd(dt, &sy, 105)};
  same_bits("matmul", in, 2, NULL, 0);
  em_attr tr[2] = {AI("transpose_a", 1), AI("transpose_b", 1)};
  em_tensor *tin[2] = {in[1], in[0]}; /* [400,500]^T @ [300,400]^T = [500,300] */
  same_bits("matmul", tin, 2, tr, 2);
  /* The gradient products (d/db sums over M = 300). */
  em_tensor *g_in[3] = {in[2], in[0], in[1]};
  em_attr which[2] = {AI("which", 0), AI("which", 1)};
  same_bits("_matmul_grad", g_in, 3, &which[0], 1);
  same_bits("_matmul_grad", g_in, 3, &which[1], 1);
  for (int k = 0; k < 3; k++) em_tensor_release(in[k]);
  /* A broadcast batch: d/db accumulates 6 products into each of b's matrices. */
  const shp ba = {4, {3, 2, 70, 90}}, bb = {3, {2, 90, 110}}, by = {4, {3, 2, 70, 110}};
  em_tensor *bin[3] = {rnd(dt, &by, 107), rnd(dt, &ba, 109), rnd(dt, &bb, 111)};
  same_bits("matmul", &bin[1], 2, NULL, 0);
  same_bits("_matmul_grad", bin, 3, &which[1], 1);
  for (int k = 0; k < 3; k++) em_tensor_release(bin[k]);
}

static void test_thread_determinism(void **state) {
  (void)state;
  determinism(EM_F32);
  determinism(EM_F64);
}

/* A dynamic batch axis: [?,4] @ [4,3] is [?,3] when built, and runs (with
 * its gradient) on any batch size. */
static void test_dynamic_batch(void **state) {
  (void)state;
  em_graph *g;
  OK(em_graph_create(&g));
  const int64_t sx[3] = {-1, 5, 4}, sw[2] = {4, 3};
  em_var x, w, y, dw;
  OK(em_input(g, "x", EM_F64, 3, sx, &x));
  OK(em_input(g, "w", EM_F64, 2, sw, &w));
  em_var in[2] = {x, w};
  OK(em_apply(g, "matmul", in, 2, NULL, 0, &y, 1));
  int nd;
  int64_t ys[EM_MAX_DIMS];
  OK(em_var_info(g, y, NULL, &nd, ys));
  assert_int_equal(nd, 3);
  assert_true(ys[0] == -1 && ys[1] == 5 && ys[2] == 3);
  /* d/dw through _matmul_grad (what matmul's backward adds), dy fed with a dynamic batch too. */
  const int64_t s_run[3] = {2, 5, 4}, s_dy[3] = {2, 5, 3};
  em_tensor *tx = ot_rand(EM_F64, 3, s_run, 3, -1, 1), *tw = ot_rand(EM_F64, 2, sw, 4, -1, 1);
  em_tensor *tdy = ot_rand(EM_F64, 3, s_dy, 5, -1, 1);
  em_var dyv;
  OK(em_input(g, "dy", EM_F64, 3, (const int64_t[]){-1, 5, 3}, &dyv));
  em_var gin[3] = {dyv, x, w};
  em_attr wh = AI("which", 1);
  OK(em_apply(g, "_matmul_grad", gin, 3, &wh, 1, &dw, 1));
  em_exec *e;
  em_var outs[2] = {y, dw};
  OK(em_exec_create(g, outs, 2, em_cpu(), &e));
  em_feed f[3] = {{x, tx}, {w, tw}, {dyv, tdy}};
  em_tensor *res[2] = {NULL, NULL};
  OK(em_exec_run(e, f, 3, res));
  ot_expect_shape(res[0], EM_F64, 3, s_dy, "dynamic matmul");
  ot_expect_shape(res[1], EM_F64, 2, sw, "dynamic d/dw");
  /* Compare with the reference on the concrete shapes. */
  double *xv = ot_values(tx, NULL), *wv = ot_values(tw, NULL), *dv = ot_values(tdy, NULL), *want;
  shp ysh;
  ref_matmul(&(shp){3, {2, 5, 4}}, xv, &(shp){2, {4, 3}}, wv, 0, 0, &ysh, &want);
  double *got = ot_values(res[0], NULL);
  ot_expect_close(got, want, 30, 1e-12, 1e-12, "dynamic matmul values");
  free(got), free(want);
  double dw_want[12] = {0};
  for (int r = 0; r < 10; r++)
    for (int k = 0; k < 4; k++)
      for (int j = 0; j < 3; j++) dw_want[k * 3 + j] += xv[r * 4 + k] * dv[r * 3 + j];
  got = ot_values(res[1], NULL);
  ot_expect_close(got, dw_want, 12, 1e-12, 1e-12, "dynamic d/dw values");
  free(got), free(xv), free(wv), free(dv);
  em_tensor_release(res[0]), em_tensor_release(res[1]);
  em_tensor_release(tx), em_tensor_release(tw), em_tensor_release(tdy);
  em_exec_free(e);
  em_graph_free(g);
}

/* ------------------------------------------------------------- errors --- */

static void expect_fails2(const char *op, em_dtype ta, shp a, em_dtype tb, shp b, const em_attr *at, int n_at,
                          const char *n1, const char *n2) {
  const em_dtype dts[2] = {ta, tb};
  const int nd[2] = {a.n, b.n};
  const int64_t *sh[2] = {a.d, b.d};
  ot_expect_apply_fails(op, 2, dts, nd, sh, at, n_at, 1, n1, n2);
}

static void test_errors(void **state) {
  (void)state;
  /* Inner dimensions: the message names both shapes. */
  expect_fails2("matmul", EM_F32, (shp){2, {3, 4}}, EM_F32, (shp){2, {5, 6}}, NULL, 0, "f32[3,4]", "f32[5,6]");
  expect_fails2("matmul", EM_F32, (shp){2, {3, 4}}, EM_F32, (shp){2, {5, 6}}, NULL, 0, "inner", "K = 4");
  expect_fails2("matmul", EM_F64, (shp){1, {3}}, EM_F64, (shp){1, {4}}, NULL, 0, "f64[3]", "f64[4]");
  em_attr tr_b = AI("transpose_b", 1);
  expect_fails2("matmul", EM_F32, (shp){2, {3, 4}}, EM_F32, (shp){2, {4, 5}}, &tr_b, 1, "inner", "after the transposes");
  /* Batches that do not broadcast. */
  expect_fails2("matmul", EM_F32, (shp){3, {2, 3, 4}}, EM_F32, (shp){3, {3, 4, 5}}, NULL, 0, "batch", "f32[3,4,5]");
  /* dtypes. */
  expect_fails2("matmul", EM_F32, (shp){2, {3, 4}}, EM_F64, (shp){2, {4, 5}}, NULL, 0, "f64", "dtype");
  /* f16 and bf16 are taken (engine/half.c), but one float dtype per op */
  expect_fails2("matmul", EM_F16, (shp){2, {3, 4}}, EM_F32, (shp){2, {4, 5}}, NULL, 0, "f16", "f32");
  expect_fails2("matmul", EM_F16, (shp){2, {3, 4}}, EM_BF16, (shp){2, {4, 5}}, NULL, 0, "f16", "bf16");
  expect_fails2("matmul", EM_BOOL, (shp){2, {3, 4}}, EM_BOOL, (shp){2, {4, 5}}, NULL, 0, "bool", NULL);
  expect_fails2("gemm", EM_I32, (shp){2, {3, 4}}, EM_I32, (shp){2, {4, 5}}, NULL, 0, "i32", NULL);
  /* Ranks and attributes. */
  expect_fails2("matmul", EM_F32, (shp){0, {0}}, EM_F32, (shp){2, {4, 5}}, NULL, 0, "rank", NULL);
  em_attr tr_a = AI("transpose_a", 1), tr_bad = AI("transpose_a", 2);
  expect_fails2("matmul", EM_F32, (shp){1, {4}}, EM_F32, (shp){2, {4, 5}}, &tr_a, 1, "transpose_a", "1-D");
  expect_fails2("matmul", EM_F32, (shp){2, {3, 4}}, EM_F32, (shp){2, {4, 5}}, &tr_bad, 1, "transpose_a", NULL);
  expect_fails2("gemm", EM_F32, (shp){3, {1, 3, 4}}, EM_F32, (shp){2, {4, 5}}, NULL, 0, "2-D", NULL);
  em_attr ta5 = AI("transA", 5);
  expect_fails2("gemm", EM_F32, (shp){2, {3, 4}}, EM_F32, (shp){2, {4, 5}}, &ta5, 1, "transA", NULL);
  /* gemm's c must broadcast to [M,N]. */
  const em_dtype dts[3] = {EM_F32, EM_F32, EM_F32};
  const int nd[3] = {2, 2, 1};
  const int64_t a[2] = {3, 4}, b[2] = {4, 5}, c[1] = {3};
  const int64_t *sh[3] = {a, b, c};
  ot_expect_apply_fails("gemm", 3, dts, nd, sh, NULL, 0, 1, "c does not broadcast", "f32[3]");
}

/* matmul's flag is transpose_b: gemm's spelling transB is refused by name, not ignored; the message names the op,
 * the bad name and the names it takes. */
static void test_linalg_unknown_attribute(void **state) {
  (void)state;
  const int64_t s0[2] = {2, 3};
  const int64_t s1[2] = {4, 3};
  const int64_t *shapes[2] = {s0, s1};
  const em_dtype dtypes[2] = {EM_F32, EM_F32};
  const int ndims[2] = {2, 2};
  const em_attr at[1] = {{.name = "transB", .type = EM_ATTR_INT, .i = 1}};
  ot_expect_apply_fails("matmul", 2, dtypes, ndims, shapes, at, 1, 1, "no attribute 'transB'",
                        "it takes: transpose_a, transpose_b");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_matmul_f64),
    cmocka_unit_test(test_matmul_f32),
    cmocka_unit_test(test_matmul_int),
    cmocka_unit_test(test_matmul_k0_zeros),
    cmocka_unit_test(test_gemm_forward),
    cmocka_unit_test(test_portable_fma_order),
    cmocka_unit_test(test_matmul_gradients),
    cmocka_unit_test(test_gemm_gradients),
    cmocka_unit_test(test_thread_determinism),
    cmocka_unit_test(test_dynamic_batch),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_linalg_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
