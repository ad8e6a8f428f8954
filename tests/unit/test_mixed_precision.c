/* f16 and bf16 through the engine (engine/half.c) and the mixed-precision graph pass
 * (engine/autocast.c): products and convolutions of half tensors on the CPU and on the GPU
 * double, against references computed here from the half inputs decoded by this file's own
 * binary16/bfloat16 code; a half input beside an f32 one refused; and em_graph_autocast on a
 * small network: what it converts, what it keeps, the forward and the gradients against the
 * f32 graph, a saved and reloaded converted graph. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_double.h"
#include "half_ref.h"
#include "op_testkit.h"

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* ------------------------------------------------------------ helpers --- */

/* A tensor of dtype t (f16/bf16/f32) on the CPU from doubles (Ember rounds them). */
static em_tensor *tensor_of(em_dtype t, int ndim, const int64_t *shape, const double *v) {
  return ot_tensor(t, ndim, shape, v);
}

/* ------------------------------------------------------------ products --- */

static void check_matmul(em_device dev, int portable, em_dtype t) {
  const int64_t M = 7, K = 33, N = 5, sa[2] = {M, K}, sb[2] = {K, N};
  em_tensor *a = ot_rand(t, 2, sa, 11, -2, 2), *b = ot_rand(t, 2, sb, 12, -2, 2);
  double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), want[35];
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += av[i * K + k] * bv[k * N + j];
      want[i * N + j] = s;
    }
  em_tensor *in[2] = {a, b};
  em_tensor *y = ot_run1_on(dev, portable, "matmul", in, 2, NULL, 0, NULL, 0);
  ts_expect_one_rounding(y, t, want, M * N, "matmul");
  /* small integers: every sum is exact in f32 and in the half dtype, so the bits must be */
  const double ia[6] = {1, 2, 3, -4, 5, 6}, ib[6] = {7, -8, 9, 10, 11, 12};
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  em_tensor *x = tensor_of(t, 2, s23, ia), *w = tensor_of(t, 2, s32, ib), *in2[2] = {x, w};
  em_tensor *z = ot_run1_on(dev, portable, "matmul", in2, 2, NULL, 0, NULL, 0);
  const double exact[4] = {1 * 7 + 2 * 9 + 3 * 11, 1 * -8 + 2 * 10 + 3 * 12, -4 * 7 + 5 * 9 + 6 * 11,
                           -4 * -8 + 5 * 10 + 6 * 12};
  double *zv = ts_half_decoded(z);
  for (int i = 0; i < 4; i++)
    if (zv[i] != exact[i]) fail_msg("matmul %s of small integers: element %d is %g, want %g", em_dtype_name(t), i, zv[i], exact[i]);
  free(zv);
  free(av), free(bv);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(y);
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(z);
}

static void test_matmul_half_cpu(void **state) {
  (void)state;
  check_matmul(em_cpu(), 0, EM_F16);
  check_matmul(em_cpu(), 0, EM_BF16);
  check_matmul(em_cpu(), 1, EM_F16);
}

static void test_matmul_half_gpu(void **state) {
  (void)state;
  if (!ts_use_gpu()) {
    skip();
  }
  for (int portable = 0; portable < 2; portable++) {
    check_matmul(em_cuda(0), portable, EM_F16);
    check_matmul(em_cuda(0), portable, EM_BF16);
  }
  /* portable mode: the same bits as the CPU */
  const int64_t sa[3] = {2, 9, 40}, sb[2] = {40, 6};
  em_tensor *a = ot_rand(EM_BF16, 3, sa, 5, -1, 1), *b = ot_rand(EM_BF16, 2, sb, 6, -1, 1), *in[2] = {a, b};
  em_tensor *c = ot_run1_on(em_cpu(), 1, "matmul", in, 2, NULL, 0, NULL, 0), *g = ot_run1_on(em_cuda(0), 1, "matmul", in, 2, NULL, 0, NULL, 0);
  assert_int_equal(em_tensor_numel(c), 2 * 9 * 6);
  assert_memory_equal(em_tensor_data(c), em_tensor_data(g), 2 * 9 * 6 * 2);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(c), em_tensor_release(g);
}

/* gemm with a bias and the transposes: alpha * a^T b + beta * c against a double reference. */
static void test_gemm_half(void **state) {
  (void)state;
  const int64_t sa[2] = {6, 4}, sb[2] = {5, 6}, sc[1] = {5};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_BF16 : EM_F16;
    em_tensor *a = ot_rand(dt, 2, sa, 21, -1, 1), *b = ot_rand(dt, 2, sb, 22, -1, 1), *c = ot_rand(dt, 1, sc, 23, -1, 1);
    double *av = ts_half_decoded(a), *bv = ts_half_decoded(b), *cv = ts_half_decoded(c), want[20];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 5; j++) {
        double s = 0;
        for (int k = 0; k < 6; k++) s += av[k * 4 + i] * bv[j * 6 + k];
        want[i * 5 + j] = 0.5 * s + 2 * cv[j];
      }
    const em_attr at[4] = {AI("transA", 1), AI("transB", 1), {.name = "alpha", .type = EM_ATTR_FLOAT, .f = 0.5},
                           {.name = "beta", .type = EM_ATTR_FLOAT, .f = 2}};
    em_tensor *in[3] = {a, b, c};
    em_tensor *y = ot_run1_on(em_cpu(), 0, "gemm", in, 3, at, 4, NULL, 0);
    ts_expect_one_rounding(y, dt, want, 20, "gemm");
    em_tensor_release(y);
    if (ts_use_gpu()) {
      y = ot_run1_on(em_cuda(0), 0, "gemm", in, 3, at, 4, NULL, 0);
      ts_expect_one_rounding(y, dt, want, 20, "gemm on the GPU");
      em_tensor_release(y);
    }
    free(av), free(bv), free(cv);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);
  }
}

/* ---------------------------------------------------------- convolution --- */

static void check_conv(em_device dev, em_dtype t) {
  const int64_t sx[4] = {2, 3, 6, 5}, sw[4] = {4, 3, 3, 3}, sb[1] = {4};
  em_tensor *x = ot_rand(t, 4, sx, 31, -1, 1), *w = ot_rand(t, 4, sw, 32, -1, 1), *b = ot_rand(t, 1, sb, 33, -1, 1);
  double *xv = ts_half_decoded(x), *wv = ts_half_decoded(w), *bv = ts_half_decoded(b);
  /* pads 1, stride 1: output 2 x 4 x 6 x 5 */
  double *want = calloc(2 * 4 * 6 * 5, sizeof *want);
  for (int n = 0; n < 2; n++)
    for (int o = 0; o < 4; o++)
      for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) {
          double s = bv[o];
          for (int c = 0; c < 3; c++)
            for (int p = 0; p < 3; p++)
              for (int q = 0; q < 3; q++) {
                int yi = i + p - 1, xj = j + q - 1;
                if (yi < 0 || yi >= 6 || xj < 0 || xj >= 5) continue;
                s += xv[((n * 3 + c) * 6 + yi) * 5 + xj] * wv[((o * 3 + c) * 3 + p) * 3 + q];
              }
          want[((n * 4 + o) * 6 + i) * 5 + j] = s;
        }
  const int64_t pads[4] = {1, 1, 1, 1};
  const em_attr at[1] = {AIS("pads", pads, 4)};
  em_tensor *in[3] = {x, w, b};
  em_tensor *y = ot_run1_on(dev, 0, "convolution", in, 3, at, 1, NULL, 0);
  ts_expect_one_rounding(y, t, want, 2 * 4 * 6 * 5, dev.kind == EM_DEVICE_CPU ? "convolution" : "convolution on the GPU");
  free(xv), free(wv), free(bv), free(want);
  em_tensor_release(x), em_tensor_release(w), em_tensor_release(b), em_tensor_release(y);
}

static void test_conv_half(void **state) {
  (void)state;
  check_conv(em_cpu(), EM_F16);
  check_conv(em_cpu(), EM_BF16);
  if (ts_use_gpu()) {
    check_conv(em_cuda(0), EM_F16);
    check_conv(em_cuda(0), EM_BF16);
  }
}

/* ------------------------------------------------------------ refusals --- */

static void test_mixed_dtypes_refused(void **state) {
  (void)state;
  em_graph *g = NULL;
  assert_int_equal(em_graph_create(&g), EM_OK);
  const int64_t s[2] = {3, 3};
  em_var a, b, c, y;
  assert_int_equal(em_input(g, "a", EM_F16, 2, s, &a), EM_OK);
  assert_int_equal(em_input(g, "b", EM_F32, 2, s, &b), EM_OK);
  assert_int_equal(em_input(g, "c", EM_BF16, 2, s, &c), EM_OK);
  em_var ab[2] = {a, b}, ac[2] = {a, c};
  assert_int_equal(em_apply(g, "matmul", ab, 2, NULL, 0, &y, 1), EM_ERR_INVALID_ARGUMENT);
  if (!strstr(em_last_error(), "f32") || !strstr(em_last_error(), "f16") || !strstr(em_last_error(), "matmul"))
    fail_msg("the refusal of f16 x f32 should name the op and both dtypes: %s", em_last_error());
  assert_int_equal(em_apply(g, "matmul", ac, 2, NULL, 0, &y, 1), EM_ERR_INVALID_ARGUMENT);
  if (!strstr(em_last_error(), "bf16")) fail_msg("f16 x bf16 should name bf16: %s", em_last_error());
  /* an op that does not take half tensors still refuses them */
  assert_int_not_equal(em_apply(g, "softmax", &a, 1, NULL, 0, &y, 1), EM_OK);
  assert_int_equal(em_graph_autocast(g, EM_F32, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_graph_autocast(NULL, EM_F16, NULL), EM_ERR_INVALID_ARGUMENT);
  em_graph_free(g);
}

/* ------------------------------------------------------------- autocast --- */

/* x [8, 12] -> conv-free MLP: h = relu(x @ W1^T + b1) (gemm), logits = h @ W2 (matmul),
 * loss = mean(cross_entropy_with_softmax(logits, labels)). */
typedef struct net {
  em_graph *g;
  em_var x, labels, w1, b1, w2, h, logits, loss, grads[3];
} net;

static void build_net(net *n, em_dtype dt) {
  assert_int_equal(em_graph_create(&n->g), EM_OK);
  const int64_t sx[2] = {8, 12}, sl[2] = {8, 4}, sw1[2] = {16, 12}, sb1[1] = {16}, sw2[2] = {16, 4};
  em_init glorot = {.kind = EM_INIT_GLOROT_UNIFORM, .seed = 3}, small = {.kind = EM_INIT_UNIFORM, .scale = 0.1, .seed = 4};
  assert_int_equal(em_input(n->g, "x", dt, 2, sx, &n->x), EM_OK);
  assert_int_equal(em_input(n->g, "labels", dt, 2, sl, &n->labels), EM_OK);
  assert_int_equal(em_parameter(n->g, "w1", dt, 2, sw1, &glorot, &n->w1), EM_OK);
  assert_int_equal(em_parameter(n->g, "b1", dt, 1, sb1, &small, &n->b1), EM_OK);
  glorot.seed = 5;
  assert_int_equal(em_parameter(n->g, "w2", dt, 2, sw2, &glorot, &n->w2), EM_OK);
  const em_attr tb = AI("transB", 1);
  em_var gin[3] = {n->x, n->w1, n->b1}, pre, mm[2], ce[2], per;
  assert_int_equal(em_apply(n->g, "gemm", gin, 3, &tb, 1, &pre, 1), EM_OK);
  assert_int_equal(em_apply(n->g, "relu", &pre, 1, NULL, 0, &n->h, 1), EM_OK);
  assert_int_equal(em_var_set_name(n->g, n->h, "hidden"), EM_OK);
  mm[0] = n->h, mm[1] = n->w2;
  assert_int_equal(em_apply(n->g, "matmul", mm, 2, NULL, 0, &n->logits, 1), EM_OK);
  assert_int_equal(em_var_set_name(n->g, n->logits, "logits"), EM_OK);
  ce[0] = n->logits, ce[1] = n->labels;
  assert_int_equal(em_apply(n->g, "cross_entropy_with_softmax", ce, 2, NULL, 0, &per, 1), EM_OK);
  assert_int_equal(em_apply(n->g, "reduce_mean", &per, 1, NULL, 0, &n->loss, 1), EM_OK);
}

static void net_grads(net *n) {
  em_var p[3] = {n->w1, n->b1, n->w2};
  if (em_gradients(n->g, n->loss, p, 3, n->grads)) fail_msg("gradients: %s", em_last_error());
}

/* Runs loss, logits and the three gradients on dev; writes them (CPU copies) into out[5]. */
static void run_net(net *n, em_device dev, em_tensor **out) {
  const int64_t sx[2] = {8, 12}, sl[2] = {8, 4};
  em_tensor *x = ot_rand(EM_F32, 2, sx, 41, -1, 1);
  double lv[32] = {0};
  for (int i = 0; i < 8; i++) lv[i * 4 + (i * 3) % 4] = 1;
  em_tensor *l = ot_tensor(EM_F32, 2, sl, lv);
  em_var want[5] = {n->loss, n->logits, n->grads[0], n->grads[1], n->grads[2]};
  em_exec *e = NULL;
  if (em_exec_create(n->g, want, 5, dev, &e)) fail_msg("executor: %s", em_last_error());
  em_feed f[2] = {{n->x, x}, {n->labels, l}};
  em_tensor *o[5] = {0};
  if (em_exec_run(e, f, 2, o)) fail_msg("run: %s", em_last_error());
  for (int i = 0; i < 5; i++) {
    assert_int_equal(em_tensor_to_device(o[i], em_cpu(), &out[i]), EM_OK);
    em_tensor_release(o[i]);
  }
  em_exec_free(e);
  em_tensor_release(x), em_tensor_release(l);
}

static void check_autocast(em_dtype half, em_device dev, double tol) {
  net f32, mp;
  build_net(&f32, EM_F32);
  build_net(&mp, EM_F32);
  size_t values_before = em_graph_value_count(mp.g);
  int converted = -1;
  if (em_graph_autocast(mp.g, half, &converted)) fail_msg("autocast: %s", em_last_error());
  assert_int_equal(converted, 2); /* the gemm and the matmul; relu, softmax, the mean stay */
  assert_true(em_graph_value_count(mp.g) > values_before);
  /* the values the caller holds keep their dtype and names */
  em_dtype t;
  assert_int_equal(em_var_info(mp.g, mp.logits, &t, NULL, NULL), EM_OK);
  assert_int_equal(t, EM_F32);
  assert_int_equal(em_var_info(mp.g, mp.h, &t, NULL, NULL), EM_OK);
  assert_int_equal(t, EM_F32);
  em_var named;
  assert_int_equal(em_graph_lookup(mp.g, "logits", &named), EM_OK);
  assert_int_equal(named, mp.logits);
  /* a second pass finds nothing more to convert */
  assert_int_equal(em_graph_autocast(mp.g, half, &converted), EM_OK);
  assert_int_equal(converted, 0);
  net_grads(&f32);
  net_grads(&mp);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(em_var_info(mp.g, mp.grads[i], &t, NULL, NULL), EM_OK);
    assert_int_equal(t, EM_F32); /* master weights: f32 gradients of f32 parameters */
  }
  em_tensor *a[5], *b[5];
  run_net(&f32, dev, a);
  run_net(&mp, dev, b);
  const char *what[5] = {"loss", "logits", "d w1", "d b1", "d w2"};
  for (int i = 0; i < 5; i++) {
    int64_t n1, n2;
    double *va = ot_values(a[i], &n1), *vb = ot_values(b[i], &n2);
    assert_int_equal(n1, n2);
    double scale = 0;
    for (int64_t k = 0; k < n1; k++) scale = fmax(scale, fabs(va[k]));
    char label[96];
    snprintf(label, sizeof label, "%s in %s vs f32", what[i], em_dtype_name(half));
    ot_expect_close(vb, va, n1, tol * scale, 0, label);
    /* and not the f32 bits: the products really ran in the half dtype */
    if (i == 1 && !memcmp(va, vb, sizeof *va * (size_t)n1)) fail_msg("%s: identical to f32, so nothing ran in half", label);
    free(va), free(vb);
    em_tensor_release(a[i]), em_tensor_release(b[i]);
  }
  em_graph_free(f32.g);
  em_graph_free(mp.g);
}

static void test_autocast_cpu(void **state) {
  (void)state;
  check_autocast(EM_F16, em_cpu(), 4e-3);
  check_autocast(EM_BF16, em_cpu(), 3e-2);
}

static void test_autocast_gpu(void **state) {
  (void)state;
  if (!ts_use_gpu()) {
    skip();
  }
  check_autocast(EM_F16, em_cuda(0), 4e-3);
  check_autocast(EM_BF16, em_cuda(0), 3e-2);
}

/* f64 graphs are left alone; a converted graph saves, loads (its rewritten nodes read values
 * made after them) and runs to the same bits. */
static void test_autocast_keeps_f64_and_round_trips(void **state) {
  (void)state;
  net d;
  build_net(&d, EM_F64);
  int converted = -1;
  assert_int_equal(em_graph_autocast(d.g, EM_BF16, &converted), EM_OK);
  assert_int_equal(converted, 0);
  em_graph_free(d.g);

  net m;
  build_net(&m, EM_F32);
  assert_int_equal(em_graph_autocast(m.g, EM_F16, &converted), EM_OK);
  net_grads(&m);
  char path[512];
  ot_tmp_path(path, sizeof path, "autocast.emg");
  if (em_graph_save(m.g, path)) fail_msg("save: %s", em_last_error());
  em_graph *back = NULL;
  if (em_graph_load(path, &back)) fail_msg("load: %s", em_last_error());
  remove(path);
  net r = m;
  r.g = back; /* the same value numbers in the loaded graph */
  em_tensor *a[5], *b[5];
  run_net(&m, em_cpu(), a);
  run_net(&r, em_cpu(), b);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(em_tensor_numel(a[i]), em_tensor_numel(b[i]));
    assert_memory_equal(em_tensor_data(a[i]), em_tensor_data(b[i]), (size_t)em_tensor_numel(a[i]) * 4);
    em_tensor_release(a[i]), em_tensor_release(b[i]);
  }
  em_graph_free(back);
  em_graph_free(m.g);
}

/* A parameter used by two products (tied weights: y = (x W) W^T) gets a cast per use; its
 * gradient, the sum of both uses, is summed in f32 and matches the f32 graph's within the
 * half roundings. An integer product is left alone. */
static void test_autocast_tied_and_integer(void **state) {
  (void)state;
  double got[2][48];
  for (int mp = 0; mp < 2; mp++) {
    em_graph *g = NULL;
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_var x, w, xi, wi, a, y, yi, loss, dw;
    em_init init = {.kind = EM_INIT_UNIFORM, .scale = 1, .seed = 8};
    assert_int_equal(em_input(g, "x", EM_F32, 2, (int64_t[]){3, 6}, &x), EM_OK);
    assert_int_equal(em_parameter(g, "w", EM_F32, 2, (int64_t[]){6, 8}, &init, &w), EM_OK);
    assert_int_equal(em_input(g, "xi", EM_I32, 2, (int64_t[]){2, 2}, &xi), EM_OK);
    assert_int_equal(em_input(g, "wi", EM_I32, 2, (int64_t[]){2, 2}, &wi), EM_OK);
    assert_int_equal(em_apply(g, "matmul", (em_var[]){x, w}, 2, NULL, 0, &a, 1), EM_OK);
    const em_attr tb = AI("transpose_b", 1);
    assert_int_equal(em_apply(g, "matmul", (em_var[]){a, w}, 2, &tb, 1, &y, 1), EM_OK);
    assert_int_equal(em_apply(g, "matmul", (em_var[]){xi, wi}, 2, NULL, 0, &yi, 1), EM_OK);
    assert_int_equal(em_apply(g, "reduce_sum", &y, 1, NULL, 0, &loss, 1), EM_OK);
    if (mp) {
      int converted = 0;
      assert_int_equal(em_graph_autocast(g, EM_F16, &converted), EM_OK);
      assert_int_equal(converted, 2); /* not the integer product */
    }
    em_dtype t;
    assert_int_equal(em_var_info(g, yi, &t, NULL, NULL), EM_OK);
    assert_int_equal(t, EM_I32);
    assert_int_equal(em_gradients(g, loss, &w, 1, &dw), EM_OK);
    em_tensor *xv = ot_rand(EM_F32, 2, (int64_t[]){3, 6}, 9, -1, 1), *out = NULL;
    em_exec *e = NULL;
    assert_int_equal(em_exec_create(g, &dw, 1, em_cpu(), &e), EM_OK);
    em_feed f = {x, xv};
    if (em_exec_run(e, &f, 1, &out)) fail_msg("tied weights: %s", em_last_error());
    int64_t n = 0;
    double *v = ot_values(out, &n);
    assert_int_equal(n, 48);
    memcpy(got[mp], v, sizeof got[mp]);
    free(v);
    em_tensor_release(out), em_tensor_release(xv);
    em_exec_free(e);
    em_graph_free(g);
  }
  double scale = 0;
  for (int i = 0; i < 48; i++) scale = fmax(scale, fabs(got[0][i]));
  ot_expect_close(got[1], got[0], 48, 4e-3 * scale, 0, "tied weights' gradient, f16 vs f32");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_half_cpu),      cmocka_unit_test(test_matmul_half_gpu),
      cmocka_unit_test(test_gemm_half),            cmocka_unit_test(test_conv_half),
      cmocka_unit_test(test_mixed_dtypes_refused), cmocka_unit_test(test_autocast_cpu),
      cmocka_unit_test(test_autocast_gpu),         cmocka_unit_test(test_autocast_keeps_f64_and_round_trips),
      cmocka_unit_test(test_autocast_tied_and_integer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
