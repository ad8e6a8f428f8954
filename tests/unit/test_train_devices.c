/* Training on a GPU gives the CPU's weights, bit for bit, in portable mode.
 *
 * Two models train with plain SGD for a number of steps on the CPU and on a
 * GPU (the test double's pretend H100 in CI, FAKECUDA_LIB; the real driver
 * under `make test-gpu`), both in portable mode, from the same seeded
 * initial weights and data:
 *   - the MLP of examples/train_mlp.c (2-32-32-2, ReLU, softmax cross
 *     entropy, reduce_mean), on two rings of points;
 *   - a small CNN: conv 3x3 (4 channels, pad 1) + bias, ReLU, 2x2 max pool,
 *     flatten, dense to 3 classes, on random 8x8 images.
 * After every step the loss must be bitwise equal, and at the end every
 * parameter. The update p -= lr * g runs on the host from the fetched
 * gradients, written back with em_parameter_set, so only the executor's
 * forward and backward differ between the devices.
 *
 * Skips, saying so, when no driver (real or double) is present. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

#define MAX_PARAMS 8

typedef struct model {
  em_graph *g;
  em_var x, label, loss;
  em_var params[MAX_PARAMS], grads[MAX_PARAMS];
  size_t n_params;
  em_tensor *xt, *yt;
} model;

static em_var apply(em_graph *g, const char *op, const em_var *in, int n, const em_attr *attrs, int n_attrs) {
  em_var out;
  CHECK(em_apply(g, op, in, n, attrs, n_attrs, &out, 1));
  return out;
}

static em_var dense(em_graph *g, em_var x, int in, int out, const char *name, uint64_t seed) {
  char wn[32], bn[32];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  em_var w, b;
  em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = seed}, small = {.kind = EM_INIT_UNIFORM, .seed = seed + 100,
                                                                    .scale = 0.1};
  CHECK(em_parameter(g, wn, EM_F32, 2, (int64_t[]){out, in}, &he, &w));
  CHECK(em_parameter(g, bn, EM_F32, 1, (int64_t[]){out}, &small, &b));
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var h = apply(g, "matmul", (em_var[]){x, w}, 2, &tb, 1);
  return apply(g, "add", (em_var[]){h, b}, 2, NULL, 0);
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}
static double unit(uint64_t *s) { return (double)lcg(s) / 9007199254740992.0; }

/* The loss, its gradients for every parameter. */
static void finish(model *m, em_var logits) {
  em_var per_sample = apply(m->g, "cross_entropy_with_softmax", (em_var[]){logits, m->label}, 2, NULL, 0);
  m->loss = apply(m->g, "reduce_mean", &per_sample, 1, NULL, 0);
  CHECK(em_graph_parameters(m->g, m->params, MAX_PARAMS, &m->n_params));
  CHECK(em_gradients(m->g, m->loss, m->params, (int)m->n_params, m->grads));
}

#define MLP_N 96
static void build_mlp(model *m) {
  float xs[MLP_N * 2];
  int32_t ys[MLP_N];
  uint64_t s = 42;
  for (int i = 0; i < MLP_N; i++) {
    double angle = unit(&s) * 6.283185307179586, noise = (unit(&s) - 0.5) * 0.4;
    ys[i] = i % 2;
    double r = (ys[i] ? 2.0 : 1.0) + noise;
    xs[2 * i] = (float)(r * cos(angle));
    xs[2 * i + 1] = (float)(r * sin(angle));
  }
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 2, (int64_t[]){-1, 2}, &m->x));
  CHECK(em_input(m->g, "label", EM_I32, 1, (int64_t[]){-1}, &m->label));
  em_var h = apply(m->g, "relu", (em_var[]){dense(m->g, m->x, 2, 32, "fc1", 1)}, 1, NULL, 0);
  h = apply(m->g, "relu", (em_var[]){dense(m->g, h, 32, 32, "fc2", 2)}, 1, NULL, 0);
  finish(m, dense(m->g, h, 32, 2, "fc3", 3));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){MLP_N, 2}, xs, sizeof xs, &m->xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){MLP_N}, ys, sizeof ys, &m->yt));
}

#define CNN_N 6
static void build_cnn(model *m) {
  static float xs[CNN_N * 1 * 8 * 8];
  int32_t ys[CNN_N];
  uint64_t s = 7;
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) xs[i] = (float)(unit(&s) * 2 - 1);
  for (int i = 0; i < CNN_N; i++) ys[i] = i % 3;
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 4, (int64_t[]){-1, 1, 8, 8}, &m->x));
  CHECK(em_input(m->g, "label", EM_I32, 1, (int64_t[]){-1}, &m->label));
  em_var w, b;
  em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = 11}, small = {.kind = EM_INIT_UNIFORM, .seed = 12, .scale = 0.1};
  CHECK(em_parameter(m->g, "conv.weight", EM_F32, 4, (int64_t[]){4, 1, 3, 3}, &he, &w));
  CHECK(em_parameter(m->g, "conv.bias", EM_F32, 1, (int64_t[]){4}, &small, &b));
  em_attr pads = {.name = "pads", .type = EM_ATTR_INTS, .ints = (const int64_t[]){1, 1, 1, 1}, .n = 4};
  em_var h = apply(m->g, "convolution", (em_var[]){m->x, w, b}, 3, &pads, 1);
  h = apply(m->g, "relu", &h, 1, NULL, 0);
  em_attr pool[2] = {{.name = "kernel_shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){2, 2}, .n = 2},
                     {.name = "strides", .type = EM_ATTR_INTS, .ints = (const int64_t[]){2, 2}, .n = 2}};
  h = apply(m->g, "max_pool", &h, 1, pool, 2);
  h = apply(m->g, "flatten", &h, 1, NULL, 0);
  finish(m, dense(m->g, h, 4 * 4 * 4, 3, "fc", 13));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, (int64_t[]){CNN_N, 1, 8, 8}, xs, sizeof xs, &m->xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){CNN_N}, ys, sizeof ys, &m->yt));
}

static void model_free(model *m) {
  em_tensor_release(m->xt);
  em_tensor_release(m->yt);
  em_graph_free(m->g);
}

/* Trains for `steps` steps on dev in portable mode; losses[step] and the
 * final parameters (host tensors, released by the caller). */
static void train(void (*build)(model *), em_device dev, int steps, float lr, float *losses, em_tensor **final) {
  model m = {0};
  build(&m);
  em_var outs[1 + MAX_PARAMS] = {m.loss};
  memcpy(outs + 1, m.grads, sizeof(em_var) * m.n_params);
  em_exec *e;
  CHECK(em_exec_create(m.g, outs, 1 + (int)m.n_params, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_feed feeds[2] = {{m.x, m.xt}, {m.label, m.yt}};
  for (int step = 0; step < steps; step++) {
    em_tensor *res[1 + MAX_PARAMS];
    CHECK(em_exec_run(e, feeds, 2, res));
    CHECK(em_tensor_to_host(res[0], &losses[step], sizeof(float)));
    for (size_t k = 0; k < m.n_params; k++) {
      em_tensor *p, *ph, *gh;
      CHECK(em_parameter_value(m.g, m.params[k], &p));
      CHECK(em_tensor_to_device(p, em_cpu(), &ph));
      CHECK(em_tensor_to_device(res[1 + k], em_cpu(), &gh));
      float *pv = em_tensor_data(ph);
      const float *gv = em_tensor_data(gh);
      for (int64_t i = 0; i < em_tensor_numel(ph); i++) pv[i] = pv[i] - lr * gv[i];
      CHECK(em_parameter_set(m.g, m.params[k], ph));
      em_tensor_release(p);
      em_tensor_release(ph);
      em_tensor_release(gh);
    }
    for (size_t k = 0; k < 1 + m.n_params; k++) em_tensor_release(res[k]);
  }
  for (size_t k = 0; k < m.n_params; k++) {
    em_tensor *p;
    CHECK(em_parameter_value(m.g, m.params[k], &p));
    CHECK(em_tensor_to_device(p, em_cpu(), &final[k]));
    em_tensor_release(p);
  }
  em_exec_free(e);
  model_free(&m);
}

static int g_gpus;

static void use_gpu(void) { g_gpus = ts_use_gpu(); }

static void same_training(void (*build)(model *), const char *what, int steps, float lr) {
  if (!g_gpus) {
    print_message("%s: SKIPPED: no CUDA driver, real or test double\n", what);
    skip();
  }
  float loss_cpu[64], loss_gpu[64];
  em_tensor *p_cpu[MAX_PARAMS] = {0}, *p_gpu[MAX_PARAMS] = {0};
  assert_true(steps <= 64);
  train(build, em_cpu(), steps, lr, loss_cpu, p_cpu);
  train(build, em_cuda(0), steps, lr, loss_gpu, p_gpu);
  /* It learned something, so equal weights are not equal nothing. */
  if (!(loss_cpu[steps - 1] < loss_cpu[0]))
    fail_msg("%s: the loss did not fall on the CPU (%g -> %g)", what, loss_cpu[0], loss_cpu[steps - 1]);
  for (int s = 0; s < steps; s++)
    if (memcmp(&loss_cpu[s], &loss_gpu[s], sizeof(float)))
      fail_msg("%s: step %d: loss %.9g on cuda:0, %.9g on the CPU (portable mode must give the same bits)", what,
               s, loss_gpu[s], loss_cpu[s]);
  for (int k = 0; k < MAX_PARAMS && p_cpu[k]; k++) {
    int64_t n = em_tensor_numel(p_cpu[k]);
    assert_int_equal(n, em_tensor_numel(p_gpu[k]));
    const float *a = em_tensor_data(p_cpu[k]), *b = em_tensor_data(p_gpu[k]);
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&a[i], &b[i], sizeof(float)))
        fail_msg("%s: parameter %d element %lld: %.9g on cuda:0, %.9g on the CPU", what, k, (long long)i, b[i], a[i]);
    em_tensor_release(p_cpu[k]);
    em_tensor_release(p_gpu[k]);
  }
}

static void test_mlp_same_weights(void **state) {
  (void)state;
  same_training(build_mlp, "MLP 2-32-32-2", 40, 0.2f);
}

static void test_cnn_same_weights(void **state) {
  (void)state;
  same_training(build_cnn, "CNN conv-relu-pool-dense", 12, 0.1f);
}

int main(void) {
  use_gpu();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mlp_same_weights),
    cmocka_unit_test(test_cnn_same_weights),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
