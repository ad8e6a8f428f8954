/* Trains a small CNN built with the layers library (ember/layers.h) on the
 * CPU: 16x16 images of three kinds of stripes (horizontal, vertical,
 * diagonal) with noise, a LeNet-style network written as an em_sequential
 * list of layers, softmax cross entropy, plain SGD written out by hand.
 *
 * Compare with train_mlp.c, which builds every parameter and op itself: here
 * the network is the nine lines of `net` below, its parameters are named by
 * layer (conv1.weight, bn1.running_mean, ...), seeded from one model seed and
 * initialised as PyTorch would. Batch normalisation and dropout behave as in
 * training because the executor is put in training mode.
 * Exits 1 if training does not reach 95% accuracy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ember.h>

#define N 96      /* training images */
#define SIDE 16
#define CLASSES 3
#define STEPS 40
#define LR 0.05f
#define MAX_PARAMS 16

#define CHECK(call)                                                                 \
  do {                                                                              \
    em_status s_ = (call);                                                          \
    if (s_) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, em_last_error()); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

/* Stripes with a random phase and period 4, plus noise: class 0 horizontal, 1 vertical, 2 diagonal. */
static void make_data(float *x, int32_t *y) {
  uint64_t s = 7;
  for (int i = 0; i < N; i++) {
    y[i] = i % CLASSES;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int phase = (int)(s >> 60) & 3;
    for (int r = 0; r < SIDE; r++)
      for (int c = 0; c < SIDE; c++) {
        int t = y[i] == 0 ? r : y[i] == 1 ? c : r + c;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double noise = ((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.8;
        x[(i * SIDE + r) * SIDE + c] = (float)(((t + phase) % 4 < 2 ? 1.0 : 0.0) + noise);
      }
  }
}

int main(void) {
  static float xs[N * SIDE * SIDE];
  int32_t ys[N];
  make_data(xs, ys);

  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, label, logits;
  CHECK(em_input(g, "x", EM_F32, 4, (int64_t[]){-1, 1, SIDE, SIDE}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &label));

  /* The network: names are numbered per kind (conv1, bn1, ...) unless given. */
  const em_layer net[] = {
    EM_L_CONV(8, 3, .conv.padding = 1, .conv.no_bias = 1), /* 8 x 16 x 16 */
    EM_L_BATCH_NORM(.act = EM_ACT_RELU),
    EM_L_MAX_POOL(2),                                       /* 8 x 8 x 8 (stride = window) */
    EM_L_CONV(16, 3, .act = EM_ACT_RELU),                   /* 16 x 6 x 6 */
    EM_L_MAX_POOL(2),                                       /* 16 x 3 x 3 */
    EM_L_FLATTEN(),                                         /* 144 */
    EM_L_DENSE(32, .act = EM_ACT_RELU),
    EM_L_DROPOUT(0.2),
    EM_L_DENSE(CLASSES, .name = "logits"),
  };
  em_layers L = {.graph = g, .seed = 42};
  CHECK(em_sequential(&L, x, net, EM_COUNT(net), &logits));

  int64_t n_weights;
  CHECK(em_layers_parameter_count(g, &n_weights));
  em_var params[MAX_PARAMS], grads[MAX_PARAMS];
  size_t n_params;
  CHECK(em_graph_parameters(g, params, MAX_PARAMS, &n_params));
  printf("%zu parameter tensors, %lld weights:", n_params, (long long)n_weights);
  for (size_t k = 0; k < n_params; k++) {
    const char *name;
    CHECK(em_var_name(g, params[k], &name));
    printf(" %s", name);
  }
  printf("\n");

  em_var per_sample, loss;
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){logits, label}, 2, NULL, 0, &per_sample, 1));
  CHECK(em_apply(g, "reduce_mean", &per_sample, 1, NULL, 0, &loss, 1));
  CHECK(em_gradients(g, loss, params, (int)n_params, grads));

  /* Training: loss and gradients in one executor, in training mode. */
  em_var outs[1 + MAX_PARAMS] = {loss};
  memcpy(outs + 1, grads, sizeof(em_var) * n_params);
  em_exec *train, *infer;
  CHECK(em_exec_create(g, outs, 1 + (int)n_params, em_cpu(), &train));
  CHECK(em_exec_set_training(train, 1));
  CHECK(em_exec_create(g, &logits, 1, em_cpu(), &infer)); /* inference mode: running statistics, no dropout */

  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, (int64_t[]){N, 1, SIDE, SIDE}, xs, sizeof xs, &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){N}, ys, sizeof ys, &yt));
  em_feed feeds[2] = {{x, xt}, {label, yt}};

  for (int step = 0; step < STEPS; step++) {
    em_tensor *res[1 + MAX_PARAMS];
    CHECK(em_exec_run(train, feeds, 2, res));
    float l;
    CHECK(em_tensor_to_host(res[0], &l, sizeof l));
    if (step % 10 == 0) printf("step %2d  loss %.4f\n", step, l);
    for (size_t k = 0; k < n_params; k++) { /* SGD: p -= lr * g, in the parameter's own storage */
      em_tensor *p;
      CHECK(em_parameter_value(g, params[k], &p));
      float *pv = em_tensor_data(p);
      const float *gv = em_tensor_data(res[1 + k]);
      for (int64_t i = 0; i < em_tensor_numel(p); i++) pv[i] -= LR * gv[i];
      em_tensor_release(p);
    }
    for (size_t k = 0; k < 1 + n_params; k++) em_tensor_release(res[k]);
  }

  em_tensor *pred;
  CHECK(em_exec_run(infer, feeds, 1, &pred));
  static float lv[N * CLASSES];
  CHECK(em_tensor_to_host(pred, lv, sizeof lv));
  int right = 0;
  for (int i = 0; i < N; i++) {
    int best = 0;
    for (int c = 1; c < CLASSES; c++)
      if (lv[i * CLASSES + c] > lv[i * CLASSES + best]) best = c;
    right += best == ys[i];
  }
  double acc = (double)right / N;
  printf("accuracy %.3f (inference mode)\n", acc);

  em_tensor_release(pred);
  em_tensor_release(xt);
  em_tensor_release(yt);
  em_exec_free(infer);
  em_exec_free(train);
  em_graph_free(g);
  return acc >= 0.95 ? 0 : 1;
}
