/* Tests of the index family (ops/index.c): cumsum, gather_nd, scatter_nd,
 * scatter_elements. Expected values come from the ONNX operator
 * documentation's examples (hand-checked), from hand derivations (f32
 * accumulation, integer wrap, duplicate indices under each reduction) and
 * from plain references written here (cumsum in every direction); gradients
 * by finite differences in f64 (ot_gradcheck), which also pins the duplicate
 * rule (an overwritten update gets no gradient). Errors: indices out of
 * range on the CPU and, through the libcuda test double, on the GPU path
 * (the check kernel), and the refused gradients of mul/max/min. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"

#define NA(a) ((int)(sizeof(a) / sizeof((a)[0])))

static em_attr ai(const char *n, int64_t v) { return (em_attr){.name = n, .type = EM_ATTR_INT, .i = v}; }
static em_attr as(const char *n, const char *s) { return (em_attr){.name = n, .type = EM_ATTR_STRING, .s = s}; }

static void expect_exact(const em_tensor *t, const double *want, int64_t n, const char *what) {
  ot_expect_values(t, want, n, 0.0, what);
}

/* Runs op with fixed inputs and compares the single output exactly. */
static void check_exact(const char *op, em_tensor **in, int n_in, const em_attr *at, int n_at, const double *want,
                        int64_t n, const char *what) {
  em_tensor *y = ot_run1(op, in, n_in, at, n_at);
  expect_exact(y, want, n, what);
  em_tensor_release(y);
}

static void release_all(em_tensor **t, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(t[i]);
}

/* --------------------------------------------------------------- cumsum --- */

/* The plain reference: along axis ax of dims, in double (exact for the small
 * integers and f64 values used with it). */
static void cumsum_ref(const double *x, double *y, int nd, const int64_t *dims, int ax, int excl, int rev) {
  int64_t outer = 1, inner = 1, n = dims[ax];
  for (int i = 0; i < ax; i++) outer *= dims[i];
  for (int i = ax + 1; i < nd; i++) inner *= dims[i];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t c = 0; c < inner; c++) {
      double acc = 0;
      for (int64_t j = 0; j < n; j++) {
        int64_t at = (o * n + (rev ? n - 1 - j : j)) * inner + c;
        if (excl) y[at] = acc;
        acc += x[at];
        if (!excl) y[at] = acc;
      }
    }
}

static void test_cumsum_examples(void **state) {
  (void)state;
  /* ONNX CumSum's documentation: [1, 2, 3, 4, 5] */
  int64_t s5[1] = {5};
  const double x[5] = {1, 2, 3, 4, 5};
  const double want[4][5] = {{1, 3, 6, 10, 15}, {0, 1, 3, 6, 10}, {15, 14, 12, 9, 5}, {14, 12, 9, 5, 0}};
  const em_dtype dts[4] = {EM_F32, EM_F64, EM_I32, EM_I64};
  for (int d = 0; d < 4; d++)
    for (int m = 0; m < 4; m++) {
      em_tensor *in = ot_tensor(dts[d], 1, s5, x);
      em_attr at[2] = {ai("exclusive", m == 1 || m == 3), ai("reverse", m >= 2)};
      check_exact("cumsum", &in, 1, at, 2, want[m], 5, "cumsum example");
      em_tensor_release(in);
    }
  /* f32 accumulates in f32, in index order (numpy's float32 cumsum and
   * onnxruntime): 1e8 + 1 rounds back to 1e8, so the running sum loses the 1. */
  int64_t s4[1] = {4};
  const double big[4] = {1e8, 1, -1e8, 1};
  em_tensor *xf = ot_tensor(EM_F32, 1, s4, big);
  check_exact("cumsum", &xf, 1, NULL, 0, (const double[]){1e8, 1e8, 0, 1}, 4, "f32 accumulates in f32");
  em_tensor_release(xf);
  em_tensor *xd = ot_tensor(EM_F64, 1, s4, big);
  check_exact("cumsum", &xd, 1, NULL, 0, (const double[]){1e8, 1e8 + 1, 1, 2}, 4, "f64");
  em_tensor_release(xd);
  /* integers wrap (two's complement) */
  int64_t s2[1] = {2};
  em_tensor *xi = ot_tensor(EM_I32, 1, s2, (const double[]){2147483647, 1});
  check_exact("cumsum", &xi, 1, NULL, 0, (const double[]){2147483647, -2147483648.0}, 2, "i32 wraps");
  em_tensor_release(xi);
}

static void test_cumsum_reference(void **state) {
  (void)state;
  int64_t dims[3] = {3, 4, 5};
  const em_dtype dts[4] = {EM_F32, EM_F64, EM_I32, EM_I64};
  for (int d = 0; d < 4; d++)
    for (int ax = -1; ax < 3; ax++)
      for (int m = 0; m < 4; m++) {
        em_tensor *in = ot_rand(dts[d], 3, dims, 7u + (uint64_t)(d * 16 + ax * 4 + m), -50, 50);
        int64_t n;
        double *xv = ot_values(in, &n), *want = malloc(sizeof(double) * (size_t)n);
        assert_non_null(want);
        if (dts[d] == EM_F32) /* small integers: every partial sum exact in f32 too */
          for (int64_t i = 0; i < n; i++) xv[i] = rint(xv[i]);
        em_tensor_release(in);
        in = ot_tensor(dts[d], 3, dims, xv);
        cumsum_ref(xv, want, 3, dims, ax < 0 ? 2 : ax, m & 1, m >> 1);
        em_attr at[3] = {ai("axis", ax), ai("exclusive", m & 1), ai("reverse", m >> 1)};
        char what[64];
        snprintf(what, sizeof what, "cumsum %s axis %d mode %d", em_dtype_name(dts[d]), ax, m);
        check_exact("cumsum", &in, 1, at, 3, want, n, what);
        free(xv);
        free(want);
        em_tensor_release(in);
      }
}

static void test_cumsum_grad(void **state) {
  (void)state;
  int64_t dims[3] = {2, 5, 3};
  for (int ax = 0; ax < 3; ax++)
    for (int m = 0; m < 4; m++) {
      em_tensor *in = ot_rand(EM_F64, 3, dims, 100u + (uint64_t)(ax * 4 + m), -2, 2);
      em_attr at[3] = {ai("axis", ax), ai("exclusive", m & 1), ai("reverse", m >> 1)};
      ot_gradcheck("cumsum", &in, 1, at, 3, 1, 0, 1e-6);
      em_tensor_release(in);
    }
}

/* ------------------------------------------------------------ gather_nd --- */

static void test_gather_nd_examples(void **state) {
  (void)state;
  /* ONNX GatherND's documentation, examples 1-5 (data [[0,1],[2,3]] or [[[0,1],[2,3]],[[4,5],[6,7]]]). */
  int64_t d2[2] = {2, 2}, d3[3] = {2, 2, 2};
  const double v2[4] = {0, 1, 2, 3}, v3[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  struct {
    int nd;
    const int64_t *dims;
    const double *data;
    int ni;
    int64_t is[3];
    double idx[8];
    int b;
    int64_t n;
    double want[8];
  } C[] = {
    {2, d2, v2, 2, {2, 2}, {0, 0, 1, 1}, 0, 2, {0, 3}},
    {2, d2, v2, 2, {2, 1}, {1, 0}, 0, 4, {2, 3, 0, 1}},
    {3, d3, v3, 2, {2, 2}, {0, 1, 1, 0}, 0, 4, {2, 3, 4, 5}},
    {3, d3, v3, 3, {2, 1, 2}, {0, 1, 1, 0}, 0, 4, {2, 3, 4, 5}},
    {3, d3, v3, 2, {2, 1}, {1, 0}, 1, 4, {2, 3, 4, 5}},
    /* negative indices count from the end; a repeated tuple repeats its slice */
    {2, d2, v2, 2, {3, 2}, {-1, -2, 1, 0, -1, -2}, 0, 3, {2, 2, 2}},
  };
  const em_dtype dts[4] = {EM_F32, EM_F64, EM_I32, EM_I64};
  for (int c = 0; c < NA(C); c++)
    for (int d = 0; d < 4; d++) {
      em_tensor *in[2] = {ot_tensor(dts[d], C[c].nd, C[c].dims, C[c].data),
                          ot_tensor(d & 1 ? EM_I64 : EM_I32, C[c].ni, C[c].is, C[c].idx)};
      em_attr at = ai("batch_dims", C[c].b);
      char what[48];
      snprintf(what, sizeof what, "gather_nd example %d %s", c + 1, em_dtype_name(dts[d]));
      check_exact("gather_nd", in, 2, &at, 1, C[c].want, C[c].n, what);
      release_all(in, 2);
    }
}

static void test_gather_nd_grad(void **state) {
  (void)state;
  /* repeated tuples sum their rows; batch_dims 1 keeps each batch's own */
  int64_t ds[3] = {4, 3, 2}, is1[2] = {5, 1}, is2[3] = {2, 3, 2}, db[3] = {2, 5, 3}, ib[3] = {2, 3, 1};
  const double k1[5] = {3, 0, -1, 3, 1}, k2[12] = {0, 2, 3, 1, -4, -1, 0, 2, 2, 0, 3, 1}, kb[6] = {4, 0, 4, -1, 2, 0};
  em_tensor *a[2] = {ot_rand(EM_F64, 3, ds, 1, -2, 2), ot_tensor(EM_I64, 2, is1, k1)};
  ot_gradcheck("gather_nd", a, 2, NULL, 0, 1, 0, 1e-6);
  em_tensor *b[2] = {ot_rand(EM_F64, 3, ds, 2, -2, 2), ot_tensor(EM_I32, 3, is2, k2)};
  ot_gradcheck("gather_nd", b, 2, NULL, 0, 1, 0, 1e-6);
  em_tensor *c[2] = {ot_rand(EM_F64, 3, db, 3, -2, 2), ot_tensor(EM_I64, 3, ib, kb)};
  em_attr at = ai("batch_dims", 1);
  ot_gradcheck("gather_nd", c, 2, &at, 1, 1, 0, 1e-6);
  release_all(a, 2);
  release_all(b, 2);
  release_all(c, 2);
  /* _gather_nd_grad by hand: rows 3 (twice), 0 and 3 (as -1) of a [4] vector */
  int64_t s4[1] = {4}, s5[1] = {5};
  em_tensor *g[3] = {ot_tensor(EM_F64, 1, s5, (const double[]){1, 10, 100, 1000, 10000}),
                     ot_tensor(EM_I64, 2, is1, k1), ot_tensor(EM_F64, 1, s4, NULL)};
  check_exact("_gather_nd_grad", g, 3, NULL, 0, (const double[]){10, 10000, 0, 1101}, 4, "_gather_nd_grad sums");
  release_all(g, 3);
}

/* ----------------------------------------------------------- scatter_nd --- */

static void test_scatter_nd_examples(void **state) {
  (void)state;
  /* ONNX ScatterND's documentation, example 1 */
  int64_t s8[1] = {8}, i41[2] = {4, 1}, s4[1] = {4};
  const em_dtype dts[4] = {EM_F32, EM_F64, EM_I32, EM_I64};
  for (int d = 0; d < 4; d++) {
    em_tensor *in[3] = {ot_tensor(dts[d], 1, s8, (const double[]){1, 2, 3, 4, 5, 6, 7, 8}),
                        ot_tensor(EM_I64, 2, i41, (const double[]){4, 3, 1, 7}),
                        ot_tensor(dts[d], 1, s4, (const double[]){9, 10, 11, 12})};
    check_exact("scatter_nd", in, 3, NULL, 0, (const double[]){1, 11, 3, 10, 9, 6, 7, 12}, 8, "scatter_nd example 1");
    release_all(in, 3);
  }
  /* example 2: slices of a [4, 4, 4] */
  int64_t d3[3] = {4, 4, 4}, i21[2] = {2, 1}, u3[3] = {2, 4, 4};
  double data[64], upd[32], want[64];
  const double base[16] = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1};
  for (int i = 0; i < 64; i++) data[i] = want[i] = base[i % 16];
  for (int i = 0; i < 32; i++) upd[i] = i < 16 ? 5 + i / 4 : 1 + (i - 16) / 4;
  for (int i = 0; i < 16; i++) {
    want[i] = upd[i];           /* slice 0 <- updates[0] */
    want[32 + i] = upd[16 + i]; /* slice 2 <- updates[1] */
  }
  em_tensor *e2[3] = {ot_tensor(EM_F32, 3, d3, data), ot_tensor(EM_I32, 2, i21, (const double[]){0, 2}),
                      ot_tensor(EM_F32, 3, u3, upd)};
  check_exact("scatter_nd", e2, 3, NULL, 0, want, 64, "scatter_nd example 2");
  release_all(e2, 3);
  /* duplicates: rows 1, 1 (as -3) and 2 of [3] with updates 5, 7, 2, under each reduction */
  int64_t s3[1] = {3}, i31[2] = {3, 1};
  const char *reds[5] = {"none", "add", "mul", "max", "min"};
  const double dup_want[5][3] = {{4, 7, 2}, {4, 3 + 5 + 7, 6 + 2}, {4, 3 * 5 * 7, 6 * 2}, {4, 7, 6}, {4, 3, 2}};
  for (int d = 0; d < 4; d++)
    for (int r = 0; r < 5; r++) {
      em_tensor *in[3] = {ot_tensor(dts[d], 1, s3, (const double[]){4, 3, 6}),
                          ot_tensor(EM_I64, 2, i31, (const double[]){1, -2, 2}),
                          ot_tensor(dts[d], 1, s3, (const double[]){5, 7, 2})};
      em_attr at = as("reduction", reds[r]);
      char what[64];
      snprintf(what, sizeof what, "scatter_nd duplicates %s %s", reds[r], em_dtype_name(dts[d]));
      check_exact("scatter_nd", in, 3, &at, 1, dup_want[r], 3, what);
      release_all(in, 3);
    }
  /* max keeps a NaN (numpy's maximum) */
  em_tensor *nan_in[3] = {ot_tensor(EM_F32, 1, s3, (const double[]){4, NAN, 6}),
                          ot_tensor(EM_I64, 2, i31, (const double[]){1, 2, 2}),
                          ot_tensor(EM_F32, 1, s3, (const double[]){5, NAN, 9})};
  em_attr mx = as("reduction", "max");
  check_exact("scatter_nd", nan_in, 3, &mx, 1, (const double[]){4, NAN, NAN}, 3, "scatter_nd max NaN");
  release_all(nan_in, 3);
}

static void test_scatter_nd_grad(void **state) {
  (void)state;
  int64_t ds[2] = {4, 3}, is[2] = {5, 1}, us[2] = {5, 3};
  const double k1[5] = {3, 0, -1, 3, 1};
  const char *reds[2] = {"none", "add"};
  for (int r = 0; r < 2; r++) {
    em_tensor *in[3] = {ot_rand(EM_F64, 2, ds, 10u + (uint64_t)r, -2, 2), ot_tensor(EM_I64, 2, is, k1),
                        ot_rand(EM_F64, 2, us, 20u + (uint64_t)r, -2, 2)};
    em_attr at = as("reduction", reds[r]);
    ot_gradcheck("scatter_nd", in, 3, &at, 1, 1, 0, 1e-6);
    release_all(in, 3);
  }
  /* by hand, none: updates 0 and 3 both write row 3; only the later (3) gets dy */
  int64_t s4[2] = {4, 1}, s5[2] = {5, 1};
  em_tensor *g[3] = {ot_tensor(EM_F64, 2, s4, (const double[]){1, 2, 3, 4}), ot_tensor(EM_I64, 2, is, k1),
                     ot_tensor(EM_F64, 2, s5, NULL)};
  em_attr none = as("reduction", "none");
  check_exact("_scatter_nd_grad", g, 3, &none, 1, (const double[]){0, 1, 0, 4, 2}, 5, "_scatter_nd_grad none");
  release_all(g, 3);
}

/* ----------------------------------------------------- scatter_elements --- */

static void test_scatter_elements_examples(void **state) {
  (void)state;
  /* ONNX ScatterElements' documentation, example 1 (axis 0) */
  int64_t d33[2] = {3, 3}, i23[2] = {2, 3};
  em_tensor *e1[3] = {ot_tensor(EM_F32, 2, d33, NULL), ot_tensor(EM_I64, 2, i23, (const double[]){1, 0, 2, 0, 2, 1}),
                      ot_tensor(EM_F32, 2, i23, (const double[]){1.0, 1.1, 1.2, 2.0, 2.1, 2.2})};
  const double w1[9] = {2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f};
  check_exact("scatter_elements", e1, 3, NULL, 0, w1, 9, "scatter_elements example 1");
  release_all(e1, 3);
  /* example 2 (axis 1) and its negative-index form; then duplicates under each reduction */
  int64_t d15[2] = {1, 5}, i12[2] = {1, 2};
  const char *reds[5] = {"none", "add", "mul", "max", "min"};
  struct { double idx[2]; const char *red; double want[5]; } C[] = {
    {{1, 3}, "none", {1, 1.1, 3, 2.1, 5}},       {{1, -3}, "none", {1, 1.1, 2.1, 4, 5}},
    {{1, 1}, "none", {1, 2.1, 3, 4, 5}},         {{1, 1}, "add", {1, 2 + 1.1 + 2.1, 3, 4, 5}},
    {{1, 1}, "mul", {1, 2 * 1.1 * 2.1, 3, 4, 5}}, {{-4, 1}, "max", {1, 2.1, 3, 4, 5}},
    {{1, 1}, "min", {1, 1.1, 3, 4, 5}},
  };
  (void)reds;
  for (int c = 0; c < NA(C); c++) {
    em_tensor *in[3] = {ot_tensor(EM_F64, 2, d15, (const double[]){1, 2, 3, 4, 5}), ot_tensor(EM_I32, 2, i12, C[c].idx),
                        ot_tensor(EM_F64, 2, i12, (const double[]){1.1, 2.1})};
    em_attr at[2] = {ai("axis", 1), as("reduction", C[c].red)};
    char what[64];
    snprintf(what, sizeof what, "scatter_elements case %d (%s)", c, C[c].red);
    em_tensor *y = ot_run1("scatter_elements", in, 3, at, 2);
    ot_expect_values(y, C[c].want, 5, 1e-15, what); /* the products round once each, as written */
    em_tensor_release(y);
    release_all(in, 3);
  }
  /* integers: i32 wraps under mul */
  int64_t s2[1] = {2};
  em_tensor *wi[3] = {ot_tensor(EM_I32, 1, s2, (const double[]){65536, 1}), ot_tensor(EM_I64, 1, s2, (const double[]){0, 0}),
                      ot_tensor(EM_I32, 1, s2, (const double[]){65536, 3})};
  em_attr mul = as("reduction", "mul");
  check_exact("scatter_elements", wi, 3, &mul, 1, (const double[]){0, 1}, 2, "i32 mul wraps");
  release_all(wi, 3);
}

static void test_scatter_elements_grad(void **state) {
  (void)state;
  int64_t ds[2] = {4, 3}, is[2] = {3, 2};
  const double idx[6] = {1, 2, -3, 2, 1, 0};
  const char *reds[2] = {"none", "add"};
  for (int r = 0; r < 2; r++)
    for (int ax = 0; ax < 2; ax++) {
      em_tensor *in[3] = {ot_rand(EM_F64, 2, ds, 30u + (uint64_t)r, -2, 2), ot_tensor(EM_I64, 2, is, idx),
                          ot_rand(EM_F64, 2, is, 40u + (uint64_t)r, -2, 2)};
      em_attr at[2] = {ai("axis", ax), as("reduction", reds[r])};
      ot_gradcheck("scatter_elements", in, 3, at, 2, 1, 0, 1e-6);
      release_all(in, 3);
    }
  /* by hand, none, axis 0: column 0 gets rows 1, 1 (as -3) and 1: only the last (row 2 of indices) gets dy */
  em_tensor *g[3] = {ot_tensor(EM_F64, 2, ds, (const double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
                     ot_tensor(EM_I64, 2, is, idx), ot_tensor(EM_F64, 2, is, NULL)};
  em_attr none[2] = {ai("axis", 0), as("reduction", "none")};
  check_exact("_scatter_elements_grad", g, 3, none, 2, (const double[]){0, 0, 0, 7, 3, 1}, 6,
              "_scatter_elements_grad none");
  release_all(g, 3);
}

/* --------------------------------------------------------------- errors --- */

/* The message of a run of op that must fail with an index out of range. */
static void expect_run_fails(em_device dev, const char *op, em_tensor **in, int n_in, const em_attr *at, int n_at,
                             const char *n1, const char *n2, const char *n3) {
  em_graph *g = NULL;
  em_var x[3], y;
  assert_int_equal(em_graph_create(&g), EM_OK);
  for (int i = 0; i < n_in; i++) {
    char name[8];
    snprintf(name, sizeof name, "x%d", i);
    assert_int_equal(em_input(g, name, em_tensor_dtype(in[i]), em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &x[i]),
                     EM_OK);
  }
  assert_int_equal(em_apply(g, op, x, n_in, at, n_at, &y, 1), EM_OK);
  em_exec *e = NULL;
  em_feed feeds[3];
  for (int i = 0; i < n_in; i++) feeds[i] = (em_feed){x[i], in[i]};
  em_tensor *out = NULL;
  em_status s = em_exec_create(g, &y, 1, dev, &e);
  if (s) fail_msg("%s: exec_create: %s", op, em_last_error());
  s = em_exec_run(e, feeds, n_in, &out);
  if (!s && out) { /* a deferred device check reports at the next synchronisation: the copy to the host */
    size_t bytes = (size_t)em_tensor_numel(out) * em_dtype_size(em_tensor_dtype(out));
    void *h = malloc(bytes ? bytes : 1);
    s = em_tensor_to_host(out, h, bytes);
    free(h);
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", em_last_error());
  em_tensor_release(out);
  em_exec_free(e);
  em_graph_free(g);
  if (s == EM_OK) fail_msg("%s: an index out of range ran", op);
  /* on a GPU the check kernel found it (not a run on the CPU) */
  const char *need[5] = {op, n1, n2, n3, dev.kind == EM_DEVICE_CUDA ? "check that ran on the device" : NULL};
  for (int i = 0; i < 5; i++)
    if (need[i] && !strstr(msg, need[i])) fail_msg("%s: the message lacks '%s': %s", op, need[i], msg);
}

static void index_errors_on(em_device dev) {
  int64_t d23[2] = {2, 3}, i21[2] = {2, 1}, i22[2] = {2, 2}, u2[1] = {2}, u23[2] = {2, 3};
  /* gather_nd: tuple (1, 3) names column 3 of 3 */
  em_tensor *g[2] = {ot_tensor(EM_F32, 2, d23, NULL), ot_tensor(EM_I64, 2, i22, (const double[]){0, 1, 1, 3})};
  expect_run_fails(dev, "gather_nd", g, 2, NULL, 0, "index 3 at position [1,1]", "axis 1", "-3 to 2");
  release_all(g, 2);
  /* scatter_nd: row -3 of 2 */
  em_tensor *s[3] = {ot_tensor(EM_F64, 2, d23, NULL), ot_tensor(EM_I32, 2, i21, (const double[]){0, -3}),
                     ot_tensor(EM_F64, 2, u23, NULL)};
  expect_run_fails(dev, "scatter_nd", s, 3, NULL, 0, "index -3 at position [1,0]", "axis 0", "size 2");
  release_all(s, 3);
  /* scatter_elements along axis 1: 5 of 3 */
  int64_t e12[2] = {1, 2};
  em_tensor *el[3] = {ot_tensor(EM_F32, 2, d23, NULL), ot_tensor(EM_I64, 2, e12, (const double[]){2, 5}),
                      ot_tensor(EM_F32, 2, e12, NULL)};
  em_attr ax = ai("axis", 1);
  expect_run_fails(dev, "scatter_elements", el, 3, &ax, 1, "index 5 at position [0,1]", "axis 1", "f32[2,3]");
  release_all(el, 3);
  /* gather (ops/shape.c) runs the same check: 3 of 3 along axis 1 (i64), -3 of 2 along axis 0 (i32) */
  int64_t i2[1] = {2};
  em_tensor *ga[2] = {ot_tensor(EM_F32, 2, d23, NULL), ot_tensor(EM_I64, 1, i2, (const double[]){-3, 3})};
  expect_run_fails(dev, "gather", ga, 2, &ax, 1, "index 3 at position [1] of the indices", "axis 1", "-3 to 2");
  release_all(ga, 2);
  em_tensor *gb[2] = {ot_tensor(EM_F64, 2, d23, NULL), ot_tensor(EM_I32, 2, i21, (const double[]){1, -3})};
  expect_run_fails(dev, "gather", gb, 2, NULL, 0, "index -3 at position [1,0]", "axis 0", "size 2");
  release_all(gb, 2);
  (void)u2;
}

static void test_index_errors_cpu(void **state) {
  (void)state;
  index_errors_on(em_cpu());
}

/* The GPU path (the check kernel) through the libcuda test double. */
static void test_index_errors_gpu(void **state) {
  (void)state;
  const char *fake = getenv("FAKECUDA_LIB");
  if (!fake || !*fake) skip();
  setenv("EMBER_LIBCUDA", fake, 1);
  setenv("FAKECUDA_DEVICES", "9.0=NVIDIA H100 80GB HBM3 (test double)", 1);
  em_shutdown();
  int n = 0;
  if (em_cuda_device_count(&n) || n == 0) fail_msg("the test double shows no GPU: %s", em_last_error());
  index_errors_on(em_cuda(0));
  unsetenv("EMBER_LIBCUDA");
  unsetenv("FAKECUDA_DEVICES");
  em_shutdown();
}

static void test_refusals(void **state) {
  (void)state;
  /* no gradient through mul / max / min */
  const char *reds[3] = {"mul", "max", "min"};
  for (int r = 0; r < 3; r++) {
    em_graph *g = NULL;
    em_var x[3], y, l, dx[2];
    int64_t d3[1] = {3}, i21[2] = {2, 1}, u2[1] = {2};
    assert_int_equal(em_graph_create(&g), EM_OK);
    assert_int_equal(em_input(g, "d", EM_F64, 1, d3, &x[0]), EM_OK);
    assert_int_equal(em_input(g, "i", EM_I64, 2, i21, &x[1]), EM_OK);
    assert_int_equal(em_input(g, "u", EM_F64, 1, u2, &x[2]), EM_OK);
    em_attr at = as("reduction", reds[r]);
    assert_int_equal(em_apply(g, "scatter_nd", x, 3, &at, 1, &y, 1), EM_OK);
    em_attr noax[1] = {ai("keepdims", 0)};
    assert_int_equal(em_apply(g, "reduce_sum", &y, 1, noax, 1, &l, 1), EM_OK);
    em_var wrt[2] = {x[0], x[2]};
    assert_int_not_equal(em_gradients(g, l, wrt, 2, dx), EM_OK);
    if (!strstr(em_last_error(), reds[r]) || !strstr(em_last_error(), "scatter_nd"))
      fail_msg("gradient of %s: %s", reds[r], em_last_error());
    em_graph_free(g);
  }
  /* shapes and attributes refused when the graph is built */
  int64_t d23[2] = {2, 3}, i24[2] = {2, 4}, i21[2] = {2, 1}, u5[1] = {5};
  const int64_t *sh1[2] = {d23, i24};
  ot_expect_apply_fails("gather_nd", 2, (const em_dtype[]){EM_F32, EM_I64}, (const int[]){2, 2}, sh1, NULL, 0, 1,
                        "last dimension", "[1, 2]");
  const int64_t *sh2[3] = {d23, i21, u5};
  ot_expect_apply_fails("scatter_nd", 3, (const em_dtype[]){EM_F32, EM_I64, EM_F32}, (const int[]){2, 2, 1}, sh2, NULL,
                        0, 1, "updates", "[2,3]");
  em_attr bad = as("reduction", "sum");
  const int64_t *sh3[3] = {d23, d23, d23};
  ot_expect_apply_fails("scatter_elements", 3, (const em_dtype[]){EM_F32, EM_I64, EM_F32}, (const int[]){2, 2, 2}, sh3,
                        &bad, 1, 1, "reduction 'sum'", NULL);
  const int64_t *sh4[1] = {d23};
  ot_expect_apply_fails("cumsum", 1, (const em_dtype[]){EM_U8}, (const int[]){2}, sh4, NULL, 0, 1, "u8", NULL);
  /* batch_dims is an INT (64 bits): 2^32 is out of range, not batch_dims 0 after truncation to int */
  int64_t i31[2] = {3, 1};
  const int64_t *sh5[2] = {d23, i31};
  em_attr bd = ai("batch_dims", (int64_t)1 << 32);
  ot_expect_apply_fails("gather_nd", 2, (const em_dtype[]){EM_F32, EM_I64}, (const int[]){2, 2}, sh5, &bd, 1, 1,
                        "batch_dims 4294967296", NULL);
}

/* ------------------------------------------------------- second order --- */

static void test_second_order(void **state) {
  (void)state;
  const int64_t d32[2] = {3, 2}, i31[2] = {3, 1}, i23[2] = {2, 3};
  const double dv[6] = {1, -2, 3, 0.5, 2.5, -1}, uv[6] = {0.3, -1.2, 2, 1.5, -0.7, 0.9};
  const double rows[3] = {0, 2, 0}, cols[6] = {1, 0, 1, 2, 2, 0};
  /* _gather_nd_grad: a repeated row (two dy rows summed into it) */
  em_tensor *gin[3] = {ot_tensor(EM_F64, 2, d32, uv), ot_tensor(EM_I64, 2, i31, rows), ot_tensor(EM_F64, 2, d32, dv)};
  ot_grad_dy_check("_gather_nd_grad", gin, 3, 0, NULL, 0, 970);
  release_all(gin, 3);
  /* with batch_dims 1: data [3, 2], indices [3, 1] pick one element per batch row */
  em_attr bd = ai("batch_dims", 1);
  em_tensor *bin[3] = {ot_tensor(EM_F64, 1, (const int64_t[]){3}, uv), ot_tensor(EM_I64, 2, i31, (const double[]){1, 0, 1}),
                       ot_tensor(EM_F64, 2, d32, dv)};
  ot_grad_dy_check("_gather_nd_grad", bin, 3, 0, &bd, 1, 971);
  release_all(bin, 3);
  /* _scatter_nd_grad: updates to rows 0, 2, 0 (under none the first is overwritten) */
  for (int r = 0; r < 2; r++) {
    em_attr red = as("reduction", r ? "add" : "none");
    em_tensor *sin[3] = {ot_tensor(EM_F64, 2, d32, dv), ot_tensor(EM_I64, 2, i31, rows), ot_tensor(EM_F64, 2, d32, uv)};
    ot_grad_dy_check("_scatter_nd_grad", sin, 3, 0, &red, 1, 972 + (uint64_t)r);
    release_all(sin, 3);
  }
  /* _scatter_elements_grad along axis 1 of [2, 3]: row 0 targets 1, 0, 1 */
  for (int r = 0; r < 2; r++) {
    em_attr at[2] = {ai("axis", 1), as("reduction", r ? "add" : "none")};
    em_tensor *ein[3] = {ot_tensor(EM_F64, 2, i23, dv), ot_tensor(EM_I64, 2, i23, cols), ot_tensor(EM_F64, 2, i23, uv)};
    ot_grad_dy_check("_scatter_elements_grad", ein, 3, 0, at, 2, 974 + (uint64_t)r);
    release_all(ein, 3);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cumsum_examples),   cmocka_unit_test(test_cumsum_reference),
    cmocka_unit_test(test_cumsum_grad),       cmocka_unit_test(test_gather_nd_examples),
    cmocka_unit_test(test_gather_nd_grad),    cmocka_unit_test(test_scatter_nd_examples),
    cmocka_unit_test(test_scatter_nd_grad),   cmocka_unit_test(test_scatter_elements_examples),
    cmocka_unit_test(test_scatter_elements_grad), cmocka_unit_test(test_index_errors_cpu),
    cmocka_unit_test(test_index_errors_gpu),  cmocka_unit_test(test_refusals), cmocka_unit_test(test_second_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
