/* bench_mlp: training throughput (samples/s) of the MLP 784-512-512-10 of
 * mlp_graph.h, one step = forward + backward (the executor computes the
 * loss and all six gradients) + SGD (p -= lr * g written into the
 * parameters' storage tensors), for batch 64 and 256 on random data.
 * bench/mlp_torch.py does exactly the same with PyTorch; bench/run.sh runs
 * both in one invocation and reports the ratio.
 *
 * Before timing, a check that training works: 30 steps on one fixed batch
 * must lower the loss (the update really reaches the parameters).
 *
 * Output: "R key value" lines (see bench_common.h). */
#include "mlp_graph.h"

#define N_BATCHES 8
#define LR 0.01f

static void check_training(mlp *m, em_tensor *x, em_tensor *l, int threads) {
  float first = 0, last = 0;
  for (int i = 0; i < 30; i++) {
    float loss = mlp_step(m, x, l, 0.1f, threads);
    if (i == 0) first = loss;
    last = loss;
  }
  printf("R mlp.%lld.ember.check_loss_first %.5f\n", (long long)m->batch, first);
  printf("R mlp.%lld.ember.check_loss_last %.5f\n", (long long)m->batch, last);
  if (!(last < first)) {
    fprintf(stderr, "bench_mlp: 30 SGD steps on one batch did not lower the loss (%g -> %g)\n", first, last);
    exit(1);
  }
}

static void bench_batch(int64_t batch, int reps, int steps, int threads) {
  mlp m;
  mlp_build(&m, batch);
  em_tensor *xs[N_BATCHES], *ls[N_BATCHES];
  mlp_data(batch, N_BATCHES, xs, ls);
  check_training(&m, xs[0], ls[0], threads); /* also the warm-up */
  int k = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = bc_now();
    for (int s = 0; s < steps; s++, k++) mlp_step(&m, xs[k % N_BATCHES], ls[k % N_BATCHES], LR, threads);
    double dt = bc_now() - t0;
    printf("R mlp.%lld.ember.sps %.2f\n", (long long)batch, (double)(batch * steps) / dt);
    fflush(stdout);
  }
  for (int i = 0; i < N_BATCHES; i++) {
    em_tensor_release(xs[i]);
    em_tensor_release(ls[i]);
  }
  mlp_free(&m);
}

int main(int argc, char **argv) {
  bc_opts o = bc_parse(argc, argv);
  int threads = bc_threads(&o);
  printf("R threads %d\n", threads);
  bench_batch(64, 3, 20, threads);
  bench_batch(256, 3, 8, threads);
  return 0;
}
