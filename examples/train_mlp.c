/* Trains a small classifier on the CPU with Ember's graph API: two
 * concentric rings of points, an MLP 2-32-32-2 with ReLU, softmax cross
 * entropy, plain SGD. Then saves the model, loads it back and checks that
 * the loaded model predicts the same classes.
 *
 * The parts: inputs with a dynamic batch axis, parameters with seeded
 * initialisers, em_apply for the ops, em_gradients for the backward pass, one
 * executor for loss and gradients together, parameters updated in place.
 * Exits 1 if training does not reach 95% accuracy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ember.h>

#define N 512     /* training points */
#define HIDDEN 32
#define STEPS 400
#define LR 0.2f

#define CHECK(call)                                                                 \
  do {                                                                              \
    em_status s_ = (call);                                                          \
    if (s_) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, em_last_error()); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

/* Points on two rings (radius 1 and 2, with noise): class = ring. */
static void make_data(float *x, int32_t *y) {
  uint64_t s = 42;
  for (int i = 0; i < N; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double angle = (double)(s >> 11) / 9007199254740992.0 * 6.283185307179586;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double noise = ((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.4;
    y[i] = i % 2;
    double r = (y[i] ? 2.0 : 1.0) + noise;
    x[2 * i] = (float)(r * cos(angle));
    x[2 * i + 1] = (float)(r * sin(angle));
  }
}

static em_var apply(em_graph *g, const char *op, const em_var *in, int n, const em_attr *attrs, int n_attrs) {
  em_var out;
  CHECK(em_apply(g, op, in, n, attrs, n_attrs, &out, 1));
  return out;
}

/* dense(x) = x @ W^T + b with W [out, in] (Ember's weight layout). */
static em_var dense(em_graph *g, em_var x, int in, int out, const char *name, uint64_t seed) {
  char wn[32], bn[32];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  em_var w, b;
  em_init he = {.kind = EM_INIT_HE_UNIFORM, .seed = seed}, zero = {.kind = EM_INIT_CONSTANT, .value = 0};
  CHECK(em_parameter(g, wn, EM_F32, 2, (int64_t[]){out, in}, &he, &w));
  CHECK(em_parameter(g, bn, EM_F32, 1, (int64_t[]){out}, &zero, &b));
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var h = apply(g, "matmul", (em_var[]){x, w}, 2, &tb, 1);
  return apply(g, "add", (em_var[]){h, b}, 2, NULL, 0);
}

/* Accuracy of the logits against y. */
static double accuracy(const em_tensor *logits, const int32_t *y) {
  float l[N * 2];
  CHECK(em_tensor_to_host(logits, l, sizeof l));
  int right = 0;
  for (int i = 0; i < N; i++) right += (l[2 * i + 1] > l[2 * i]) == (y[i] == 1);
  return (double)right / N;
}

int main(void) {
  float xs[N * 2];
  int32_t ys[N];
  make_data(xs, ys);

  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, y;
  CHECK(em_input(g, "x", EM_F32, 2, (int64_t[]){-1, 2}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &y));
  em_var h = apply(g, "relu", (em_var[]){dense(g, x, 2, HIDDEN, "fc1", 1)}, 1, NULL, 0);
  h = apply(g, "relu", (em_var[]){dense(g, h, HIDDEN, HIDDEN, "fc2", 2)}, 1, NULL, 0);
  em_var logits = dense(g, h, HIDDEN, 2, "fc3", 3);
  CHECK(em_var_set_name(g, logits, "logits"));
  em_var per_sample = apply(g, "cross_entropy_with_softmax", (em_var[]){logits, y}, 2, NULL, 0);
  em_var loss = apply(g, "reduce_mean", &per_sample, 1, NULL, 0);

  em_var params[6], grads[6];
  size_t n_params;
  CHECK(em_graph_parameters(g, params, 6, &n_params));
  CHECK(em_gradients(g, loss, params, (int)n_params, grads));

  /* One plan: loss, logits and every gradient, forward and backward in one pass. */
  em_var outs[8] = {loss, logits};
  memcpy(outs + 2, grads, sizeof(em_var) * n_params);
  em_exec *train;
  CHECK(em_exec_create(g, outs, 2 + (int)n_params, em_cpu(), &train));

  em_tensor *xt, *yt;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){N, 2}, xs, sizeof xs, &xt));
  CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){N}, ys, sizeof ys, &yt));
  em_feed feeds[2] = {{x, xt}, {y, yt}};

  double acc = 0;
  for (int step = 0; step <= STEPS; step++) {
    em_tensor *res[8];
    CHECK(em_exec_run(train, feeds, 2, res));
    float l;
    CHECK(em_tensor_to_host(res[0], &l, sizeof l));
    acc = accuracy(res[1], ys);
    if (step % 100 == 0) printf("step %3d  loss %.4f  accuracy %.3f\n", step, l, acc);
    /* SGD: p -= lr * g, written into each parameter's own storage. */
    for (size_t k = 0; k < n_params; k++) {
      em_tensor *p;
      CHECK(em_parameter_value(g, params[k], &p));
      float *pv = em_tensor_data(p);
      const float *gv = em_tensor_data(res[2 + k]);
      for (int64_t i = 0; i < em_tensor_numel(p); i++) pv[i] -= LR * gv[i];
      em_tensor_release(p);
    }
    for (size_t k = 0; k < 2 + n_params; k++) em_tensor_release(res[k]);
  }

  /* Save, load, and predict with the loaded model. */
  char path[512];
  snprintf(path, sizeof path, "%s/train_mlp.ember", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  CHECK(em_graph_save(g, path));
  em_graph *loaded;
  CHECK(em_graph_load(path, &loaded));
  remove(path);
  em_var lx, llogits;
  CHECK(em_graph_lookup(loaded, "x", &lx));
  CHECK(em_graph_lookup(loaded, "logits", &llogits));
  em_exec *infer;
  CHECK(em_exec_create(loaded, &llogits, 1, em_cpu(), &infer));
  em_feed f = {lx, xt};
  em_tensor *pred;
  CHECK(em_exec_run(infer, &f, 1, &pred));
  double acc_loaded = accuracy(pred, ys);
  printf("saved and loaded: accuracy %.3f (trained model %.3f)\n", acc_loaded, acc);

  em_tensor_release(pred);
  em_exec_free(infer);
  em_graph_free(loaded);
  em_tensor_release(xt);
  em_tensor_release(yt);
  em_exec_free(train);
  em_graph_free(g);
  return acc >= 0.95 && acc_loaded == acc ? 0 : 1;
}
