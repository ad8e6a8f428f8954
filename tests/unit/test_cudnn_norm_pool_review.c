/* Review tests of batch normalisation and pooling through cuDNN (test_cudnn_norm_pool.c's
 * helpers, included with its main renamed): geometries and batch-norm shapes the original
 * cases do not reach, each against the float64 references and the CPU. */
#define main test_cudnn_norm_pool_main_unused
#include "test_cudnn_norm_pool.c"
#undef main

/* Strides larger than the window (with padding: windows that skip input), 1x1 images, a
 * window of 1 with stride 2, overlapping 3-D windows counting the padding in f32, a 1-D f64
 * exclude-pad average with the padding as wide as allowed (window - 1). */
static const pool_case review_pools[] = {
    {"max_pool", EM_F32, 2, {2, 3, 10, 9}, {2, 2}, {3, 4}, {1, 1, 1, 1}, 0},
    {"average_pool", EM_F32, 2, {2, 3, 10, 9}, {2, 2}, {3, 4}, {1, 1, 1, 1}, 1},
    {"average_pool", EM_F64, 2, {2, 3, 10, 9}, {2, 2}, {3, 4}, {1, 1, 1, 1}, 0},
    {"max_pool", EM_F64, 2, {3, 2, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 0},
    {"average_pool", EM_F32, 2, {3, 2, 1, 1}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0},
    {"average_pool", EM_F64, 2, {3, 2, 1, 1}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1},
    {"max_pool", EM_F32, 2, {1, 2, 7, 7}, {1, 1}, {2, 2}, {0, 0, 0, 0}, 0},
    {"average_pool", EM_F32, 3, {2, 2, 4, 5, 6}, {3, 3, 3}, {1, 2, 1}, {1, 2, 1, 1, 2, 1}, 1},
    {"max_pool", EM_F64, 3, {2, 2, 4, 5, 6}, {3, 3, 3}, {1, 2, 1}, {1, 2, 1, 1, 2, 1}, 0},
    {"average_pool", EM_F64, 1, {2, 3, 9}, {4}, {1}, {3, 3}, 0},
    {"average_pool", EM_F32, 1, {2, 3, 9}, {4}, {5}, {3, 3}, 1},
};

static void check_pool(const pool_case *p, int ceil_mode, const char *what) {
  unsigned long f0 = calls_of("cudnnPoolingForward"), b0 = calls_of("cudnnPoolingBackward");
  em_tensor *got[2], *want[2], *xt, *wt;
  char road[512], groad[512], msg[200];
  pool_run(p, ceil_mode, NULL, em_cuda(0), EM_MODE_FAST, got, want, &xt, &wt, road, sizeof road, groad, sizeof groad);
  if (calls_of("cudnnPoolingForward") - f0 != 2 || calls_of("cudnnPoolingBackward") - b0 != 1)
    fail_msg("%s: not through cuDNN (roads '%s', '%s')", what, road, groad);
  double *x = values_of(xt), *w = values_of(wt);
  int64_t nx = em_tensor_numel(xt), ny = em_tensor_numel(wt), ys[5];
  double *y = malloc(sizeof(double) * (size_t)ny), *dx = malloc(sizeof(double) * (size_t)nx);
  pool_reference(p, x, w, y, dx, ys);
  double tol = p->dt == EM_F32 ? 1e-6 : 1e-13;
  snprintf(msg, sizeof msg, "%s: y", what);
  ot_expect_values(got[0], y, ny, tol, msg);
  snprintf(msg, sizeof msg, "%s: dx", what);
  ot_expect_values(got[1], dx, nx, tol, msg);
  for (int o = 0; o < 2; o++) {
    int64_t m;
    double *cv = ot_values(want[o], &m);
    snprintf(msg, sizeof msg, "%s: %s against the CPU", what, o ? "dx" : "y");
    ot_expect_values(got[o], cv, m, tol, msg);
    free(cv);
    em_tensor_release(got[o]), em_tensor_release(want[o]);
  }
  free(x), free(w), free(y), free(dx);
  em_tensor_release(xt), em_tensor_release(wt);
}

static void test_review_pools(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  for (size_t i = 0; i < sizeof review_pools / sizeof review_pools[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "review pool %zu (%s %d-D)", i, review_pools[i].op, review_pools[i].nsp);
    check_pool(&review_pools[i], 0, what);
    /* ceil_mode where it changes nothing (the rounded-up count is the rounded-down one) */
  }
  /* ceil_mode = 1 with exact division: cuDNN takes it, same windows */
  const pool_case exact[] = {
      {"max_pool", EM_F32, 2, {2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
      {"average_pool", EM_F64, 2, {2, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 1},
  };
  for (int i = 0; i < 2; i++) check_pool(&exact[i], 1, "ceil_mode with exact division");
  if (live_descriptors()) fail_msg("%zu cuDNN descriptors left behind", live_descriptors());
}

/* Batch norm shapes the original cases miss: a batch of 1 with positions (m = positions),
 * spatial size 1 with the smallest training batch (m = 2), rank 6, f64 with epsilon 0, many
 * channels of one position. */
static const bn_case review_bn[] = {
    {EM_F32, 4, {1, 3, 2, 2}, 1e-5, 0.9}, {EM_F64, 4, {2, 3, 1, 1}, 1e-5, 0.9}, {EM_F64, 2, {2, 5}, 0.0, 0.6},
    {EM_F64, 5, {1, 2, 1, 2, 1}, 1e-5, 0.3}, {EM_F32, 3, {3, 40, 1}, 1e-3, 0.1},
};

static void test_review_bn(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  for (size_t i = 0; i < sizeof review_bn / sizeof review_bn[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "review training %zu", i);
    bn_check(&review_bn[i], 1, 1, 3, what);
    snprintf(what, sizeof what, "review inference %zu", i);
    bn_check(&review_bn[i], 0, 1, 2, what);
  }
  if (live_descriptors()) fail_msg("%zu cuDNN descriptors left behind", live_descriptors());
}

/* m = 1 in training: the unbiased running variance divides by 0; Ember refuses on the CPU and
 * must refuse on the cuDNN road too, making no cuDNN call and leaving the state alone. */
static void test_review_bn_m1(void **state) {
  (void)state;
  if (!use_doubles()) skip();
  const int64_t xs[4] = {1, 3, 1, 1}, cs[1] = {3};
  em_tensor *rm0 = ot_rand(EM_F32, 1, cs, 11, -1, 1), *rv0 = ot_rand(EM_F32, 1, cs, 12, 0.5, 2);
  for (int d = 0; d < 2; d++) {
    bn_graph b;
    bn_build(&b, EM_F32, 4, xs, 1e-5, 0.9, 0, 1, d ? em_cuda(0) : em_cpu(), EM_MODE_FAST, rm0, rv0);
    unsigned long f0 = calls_of("cudnnBatchNormalizationForwardTraining");
    em_tensor *xt = ot_rand(EM_F32, 4, xs, 1, -1, 1), *st = ot_rand(EM_F32, 1, cs, 2, 1, 2),
              *bt = ot_rand(EM_F32, 1, cs, 3, 1, 2), *out[1] = {NULL};
    em_status s = bn_run(&b, xt, st, bt, NULL, out);
    if (!s) fail_msg("%s: training with m = 1 ran", d ? "device" : "CPU");
    if (!strstr(em_last_error(), "more than one value")) fail_msg("m = 1: %s", em_last_error());
    if (calls_of("cudnnBatchNormalizationForwardTraining") != f0) fail_msg("m = 1 reached cuDNN");
    em_tensor *gv = NULL;
    assert_int_equal(em_parameter_get(b.g, b.rv, em_cpu(), &gv), EM_OK);
    double *want = values_of(rv0);
    ot_expect_values(gv, want, 3, 0, "m = 1: the running variance untouched");
    free(want);
    em_tensor_release(gv), em_tensor_release(xt), em_tensor_release(st), em_tensor_release(bt);
    bn_free(&b);
  }
  em_tensor_release(rm0), em_tensor_release(rv0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_review_pools),
      cmocka_unit_test(test_review_bn),
      cmocka_unit_test(test_review_bn_m1),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
