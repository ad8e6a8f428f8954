/* The MLP of bench_mlp (and its per-op profile), built with Ember's public
 * graph API:
 *
 *   x [B,784] f32, labels [B] i32 (sparse class indices)
 *   h1 = relu(matmul(x,  W1^T) + b1)    W1 [512,784], b1 [512]
 *   h2 = relu(matmul(h1, W2^T) + b2)    W2 [512,512], b2 [512]
 *   z  =      matmul(h2, W3^T) + b3     W3 [10,512],  b3 [10]
 *   loss = reduce_mean(cross_entropy_with_softmax(z, labels))   (a scalar)
 *
 * Weights are [out, in] as torch.nn.Linear stores them (hence transpose_b),
 * initialised as PyTorch's nn.Linear does: U(-1/sqrt(in), 1/sqrt(in)) for
 * weights and biases. The executor computes the loss and the gradients of
 * all six parameters (em_gradients); the SGD step p -= lr * g is applied by
 * the caller to the parameters' own storage (em_parameter_value) and
 * announced with em_parameter_set (graph.h: a write made after a later run
 * must be; the fast CPU mode keeps the weights of a product reordered for
 * oneDNN until the value changes), so the next run sees the new values. */
#ifndef EMBER_BENCH_MLP_GRAPH_H
#define EMBER_BENCH_MLP_GRAPH_H

#include <math.h>

#include "bench_common.h"

#define MLP_IN 784
#define MLP_HID 512
#define MLP_OUT 10
#define MLP_NPARAM 6

typedef struct mlp {
  int64_t batch;
  em_graph *g;
  em_var x, labels, loss;
  em_var params[MLP_NPARAM];  /* W1 b1 W2 b2 W3 b3 */
  em_var grads[MLP_NPARAM];
  em_var outputs[1 + MLP_NPARAM]; /* loss, then the gradients */
  em_exec *e;
  float *pdata[MLP_NPARAM];   /* the parameters' storage */
  int64_t pnumel[MLP_NPARAM];
  em_tensor *pstore[MLP_NPARAM];
} mlp;

static inline em_var mlp_dense(mlp *m, em_var in, int64_t n_in, int64_t n_out, int layer, int relu) {
  char wn[8], bn[8];
  snprintf(wn, sizeof wn, "W%d", layer);
  snprintf(bn, sizeof bn, "b%d", layer);
  double bound = 1.0 / sqrt((double)n_in);
  em_init init = {.kind = EM_INIT_UNIFORM, .scale = bound, .seed = 100 + (uint64_t)layer};
  int64_t ws[2] = {n_out, n_in}, bs[1] = {n_out};
  em_var w, b, mm, y;
  BC_CHECK(em_parameter(m->g, wn, EM_F32, 2, ws, &init, &w));
  init.seed = 200 + (uint64_t)layer;
  BC_CHECK(em_parameter(m->g, bn, EM_F32, 1, bs, &init, &b));
  m->params[2 * (layer - 1)] = w;
  m->params[2 * (layer - 1) + 1] = b;
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var mm_in[2] = {in, w};
  BC_CHECK(em_apply(m->g, "matmul", mm_in, 2, &tb, 1, &mm, 1));
  em_var add_in[2] = {mm, b};
  BC_CHECK(em_apply(m->g, "add", add_in, 2, NULL, 0, &y, 1));
  if (!relu) return y;
  em_var r;
  BC_CHECK(em_apply(m->g, "relu", &y, 1, NULL, 0, &r, 1));
  return r;
}

/* Builds the graph, its gradients and the executor for a fixed batch size. */
static inline void mlp_build(mlp *m, int64_t batch) {
  memset(m, 0, sizeof *m);
  m->batch = batch;
  BC_CHECK(em_graph_create(&m->g));
  int64_t xs[2] = {batch, MLP_IN}, ls[1] = {batch};
  BC_CHECK(em_input(m->g, "x", EM_F32, 2, xs, &m->x));
  BC_CHECK(em_input(m->g, "labels", EM_I32, 1, ls, &m->labels));
  em_var h = mlp_dense(m, m->x, MLP_IN, MLP_HID, 1, 1);
  h = mlp_dense(m, h, MLP_HID, MLP_HID, 2, 1);
  em_var z = mlp_dense(m, h, MLP_HID, MLP_OUT, 3, 0);
  em_var ce_in[2] = {z, m->labels}, ce;
  BC_CHECK(em_apply(m->g, "cross_entropy_with_softmax", ce_in, 2, NULL, 0, &ce, 1));
  BC_CHECK(em_apply(m->g, "reduce_mean", &ce, 1, NULL, 0, &m->loss, 1)); /* no axes: all of them */
  BC_CHECK(em_gradients(m->g, m->loss, m->params, MLP_NPARAM, m->grads));
  m->outputs[0] = m->loss;
  for (int i = 0; i < MLP_NPARAM; i++) m->outputs[1 + i] = m->grads[i];
  BC_CHECK(em_exec_create(m->g, m->outputs, 1 + MLP_NPARAM, em_cpu(), &m->e));
  for (int i = 0; i < MLP_NPARAM; i++) {
    BC_CHECK(em_parameter_value(m->g, m->params[i], &m->pstore[i]));
    if (em_tensor_dtype(m->pstore[i]) != EM_F32 || !em_tensor_is_contiguous(m->pstore[i])) {
      fprintf(stderr, "parameter %d is not contiguous f32 storage\n", i);
      exit(1);
    }
    m->pdata[i] = em_tensor_data(m->pstore[i]);
    m->pnumel[i] = em_tensor_numel(m->pstore[i]);
  }
}

static inline void mlp_free(mlp *m) {
  for (int i = 0; i < MLP_NPARAM; i++) em_tensor_release(m->pstore[i]);
  em_exec_free(m->e);
  em_graph_free(m->g);
}

/* p -= lr * g, in the parameter's storage; elementwise, so split across the
 * threads like PyTorch's SGD kernels are. */
static inline void mlp_sgd(mlp *m, em_tensor *const *grads, float lr, int threads) {
  for (int i = 0; i < MLP_NPARAM; i++) {
    float *p = m->pdata[i];
    const float *g = em_tensor_data(grads[i]);
    int64_t n = m->pnumel[i];
#pragma omp parallel for simd schedule(static) num_threads(threads) if (n > 32768)
    for (int64_t j = 0; j < n; j++) p[j] -= lr * g[j];
    BC_CHECK(em_parameter_set(m->g, m->params[i], m->pstore[i])); /* the same tensor: only marks it changed */
  }
}

/* One training step: forward + backward through the executor, then SGD.
 * Returns the loss (before the update). */
static inline float mlp_step(mlp *m, em_tensor *x, em_tensor *labels, float lr, int threads) {
  em_feed f[2] = {{m->x, x}, {m->labels, labels}};
  em_tensor *out[1 + MLP_NPARAM] = {0};
  BC_CHECK(em_exec_run(m->e, f, 2, out));
  float loss = *(const float *)em_tensor_data(out[0]);
  mlp_sgd(m, out + 1, lr, threads);
  for (int i = 0; i < 1 + MLP_NPARAM; i++) em_tensor_release(out[i]);
  return loss;
}

/* Random batches: x ~ U(-1, 1), labels uniform in [0, 10). */
static inline void mlp_data(int64_t batch, int n_batches, em_tensor **xs, em_tensor **ls) {
  int64_t xshape[2] = {batch, MLP_IN}, lshape[1] = {batch};
  float *xb = bc_alloc_f32(batch * MLP_IN);
  int32_t *lb = malloc(sizeof *lb * (size_t)batch);
  if (!lb) exit(1);
  uint64_t s = 12345;
  for (int k = 0; k < n_batches; k++) {
    bc_fill_uniform(xb, batch * MLP_IN, 1000 + (uint64_t)k);
    for (int64_t i = 0; i < batch; i++) lb[i] = (int32_t)(bc_rand_u64(&s) % MLP_OUT);
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, xshape, xb, sizeof(float) * (size_t)(batch * MLP_IN), &xs[k]));
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, lshape, lb, sizeof(int32_t) * (size_t)batch, &ls[k]));
  }
  free(xb);
  free(lb);
}

#endif
