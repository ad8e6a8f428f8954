/* bench_lenet: CPU training throughput of the model zoo's networks as
 * `ember train` runs them (issue 11): one step = an executor run that
 * computes the loss, the gradients (em_gradients) and the momentum
 * learner's in-place update (em_learner_attach, one node), fed a
 * minibatch and the learner's hyperparameter vector.
 *
 *   lenet  em_model_lenet on [64, 1, 28, 28] Fashion-MNIST images (conv 5x5
 *          32 pad 2, ReLU, max pool 2, conv 5x5 64, ReLU, max pool 2, dense
 *          1600-256-128-10), loss = reduce_mean(cross_entropy_with_softmax)
 *   mlp    em_model_mlp 784-512-512-10 (ReLU) on the same images flattened
 *
 * Learner: momentum (PyTorch's SGD with momentum 0.9, lr 0.01, no
 * dampening). bench/lenet_torch.py is the PyTorch twin (same layers,
 * batch, loss, learner and threads); bench/run.sh runs the two as separate
 * processes back to back in rounds and reports the per-step time ratio.
 *
 * The images: the first 16 minibatches of Fashion-MNIST's training set
 * (Debian's dataset-fashion-mnist, read through em_dataset_open_idx_dir),
 * pixels / 255, cycled; random data when the files are missing (then both
 * sides say so). Before timing, 30 steps on one minibatch must lower the loss.
 *
 * Usage: bench_lenet [--threads N] [--quick]
 * Output: "R train.<model>.64.ember.ms <ms per step>" lines, one per
 * repetition, plus the check's losses (bench_common.h's format). */
#include "bench_common.h"
#include "ember/layers.h"
#include "ember/learner.h"
#include "ember/reader.h"

#define BATCH 64
#define N_BATCHES 16
#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct net {
  em_graph *g;
  em_var x, labels;
  em_exec *e;
  em_learner *l;
} net;

/* 16 minibatches of images [BATCH, 1, 28, 28] (pixels / 255) and labels. */
static int load_data(em_tensor **xs, em_tensor **ls) {
  em_dataset *d = NULL;
  float *xb = bc_alloc_f32(BATCH * 784);
  int32_t lb[BATCH];
  int real = em_dataset_open_idx_dir(FMNIST_DIR, "train", 10, &d) == EM_OK;
  const uint8_t *px = real ? em_dataset_stream_data(d, em_dataset_find_stream(d, "features")) : NULL;
  const int32_t *lab = real ? em_dataset_stream_data(d, em_dataset_find_stream(d, "labels")) : NULL;
  uint64_t s = 12345;
  const int64_t xshape[4] = {BATCH, 1, 28, 28}, lshape[1] = {BATCH};
  for (int k = 0; k < N_BATCHES; k++) {
    for (int64_t i = 0; i < BATCH * 784; i++)
      xb[i] = real ? (float)px[k * BATCH * 784 + i] / 255.0f : (float)(bc_rand_u64(&s) >> 40) * 0x1.0p-24f;
    for (int i = 0; i < BATCH; i++) lb[i] = real ? lab[k * BATCH + i] : (int32_t)(bc_rand_u64(&s) % 10);
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, xshape, xb, sizeof(float) * BATCH * 784, &xs[k]));
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, lshape, lb, sizeof lb, &ls[k]));
  }
  free(xb);
  em_dataset_free(d);
  return real;
}

static void net_build(net *n, const char *model) {
  BC_CHECK(em_graph_create(&n->g));
  const int64_t xs[4] = {BATCH, 1, 28, 28}, lshape[1] = {BATCH};
  BC_CHECK(em_input(n->g, "x", EM_F32, 4, xs, &n->x));
  BC_CHECK(em_input(n->g, "labels", EM_I32, 1, lshape, &n->labels));
  em_var logits, ce, loss, h = n->x;
  if (!strcmp(model, "lenet")) {
    BC_CHECK(em_model_lenet(n->g, n->x, 10, 1, NULL, &logits));
  } else {
    static const int64_t hidden[2] = {512, 512};
    em_model_opts o = {.hidden = hidden, .n_hidden = 2};
    BC_CHECK(em_model_mlp(n->g, h, 10, 1, &o, &logits));
  }
  em_var ce_in[2] = {logits, n->labels};
  BC_CHECK(em_apply(n->g, "cross_entropy_with_softmax", ce_in, 2, NULL, 0, &ce, 1));
  BC_CHECK(em_apply(n->g, "reduce_mean", &ce, 1, NULL, 0, &loss, 1));
  em_var params[32], grads[32], update;
  size_t np = 0;
  BC_CHECK(em_graph_parameters(n->g, params, 32, &np));
  BC_CHECK(em_gradients(n->g, loss, params, (int)np, grads));
  em_learner_config cfg;
  BC_CHECK(em_learner_defaults(EM_LEARNER_MOMENTUM, 0.01, &cfg));
  cfg.momentum.value = 0.9;
  BC_CHECK(em_learner_create(&cfg, NULL, params, (int)np, &n->l));
  BC_CHECK(em_learner_attach(n->l, n->g, grads, &update));
  em_var outs[2] = {loss, update};
  BC_CHECK(em_exec_create(n->g, outs, 2, em_cpu(), &n->e));
}

static float net_step(net *n, em_tensor *x, em_tensor *labels) {
  em_feed f[3] = {{n->x, x}, {n->labels, labels}, {0}};
  BC_CHECK(em_learner_feed(n->l, BATCH, &f[2]));
  em_tensor *out[2] = {0};
  BC_CHECK(em_exec_run(n->e, f, 3, out));
  BC_CHECK(em_learner_step_done(n->l, BATCH));
  float loss = *(const float *)em_tensor_data(out[0]);
  em_tensor_release(out[0]);
  em_tensor_release(out[1]);
  return loss;
}

static void net_free(net *n) {
  em_exec_free(n->e);
  em_learner_free(n->l);
  em_graph_free(n->g);
}

static void bench_model(const char *model, em_tensor **xs, em_tensor **ls, int reps, int steps) {
  net n;
  net_build(&n, model);
  float first = 0, last = 0;
  for (int i = 0; i < 30; i++) { /* training works; also the warm-up */
    last = net_step(&n, xs[0], ls[0]);
    if (i == 0) first = last;
  }
  printf("R train.%s.%d.ember.check_loss_first %.5f\n", model, BATCH, first);
  printf("R train.%s.%d.ember.check_loss_last %.5f\n", model, BATCH, last);
  if (!(last < first)) {
    fprintf(stderr, "bench_lenet: 30 momentum steps on one batch did not lower %s's loss (%g -> %g)\n", model, first,
            last);
    exit(1);
  }
  int k = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = bc_now();
    for (int s = 0; s < steps; s++, k++) net_step(&n, xs[k % N_BATCHES], ls[k % N_BATCHES]);
    printf("R train.%s.%d.ember.ms %.4f\n", model, BATCH, (bc_now() - t0) / steps * 1e3);
    fflush(stdout);
  }
  net_free(&n);
}

int main(int argc, char **argv) {
  bc_opts o = bc_parse(argc, argv);
  int threads = bc_threads(&o);
  printf("R threads %d\n", threads);
  em_tensor *xs[N_BATCHES], *ls[N_BATCHES];
  int real = load_data(xs, ls);
  printf("R train.data.ember %s\n", real ? "fashion-mnist" : "random");
  bench_model("lenet", xs, ls, o.quick ? 2 : 5, o.quick ? 10 : 20);
  bench_model("mlp", xs, ls, o.quick ? 2 : 5, o.quick ? 20 : 40);
  for (int i = 0; i < N_BATCHES; i++) {
    em_tensor_release(xs[i]);
    em_tensor_release(ls[i]);
  }
  return 0;
}
