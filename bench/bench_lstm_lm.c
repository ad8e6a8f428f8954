/* bench_lstm_lm: one training step of an LSTM language model on the CPU
 * (issue 12's recurrent performance goal: Ember's throughput >= PyTorch's).
 *
 *   tokens [T, N] (i32, time-major) -> embedding [V, E] -> LSTM layers of
 *   hidden H (em_lstm, layout 0; each layer's Y [T, 1, N, H] squeezed to
 *   [T, N, H]) -> dense H -> V -> cross_entropy_with_softmax against the next
 *   tokens at every step, reduce_mean -> em_gradients -> plain SGD
 *   (em_learner_attach, lr 0.1, one node): one executor run per step.
 *
 * bench/lstm_lm_torch.py is the PyTorch twin (nn.Embedding, nn.LSTM,
 * nn.Linear, F.cross_entropy, torch.optim.SGD; the same sizes and threads);
 * bench/lstm_lm.sh runs the two as separate processes back to back, in
 * rounds alternating which goes first, and reports the per-step time ratio.
 *
 * Data: random tokens (xorshift), 8 minibatches cycled. Before timing, 20
 * steps on one minibatch must lower the loss.
 *
 * Usage: bench_lstm_lm [--threads N] [--quick] [--vocab V] [--embed E] [--hidden H]
 *                      [--layers L] [--steps T] [--batch N]
 * Output: "R lstm_lm.ember.ms <ms per step>" per repetition, the check's
 * losses, and the sizes (bench_common.h's format). */
#include "bench_common.h"
#include "ember/layers.h"
#include "ember/learner.h"

#define N_BATCHES 8

typedef struct cfg {
  int threads, quick;
  int64_t V, E, H, L, T, N;
} cfg;

typedef struct net {
  em_graph *g;
  em_var tok, labels;
  em_exec *e;
  em_learner *l;
} net;

static cfg parse(int argc, char **argv) {
  cfg c = {.V = 10000, .E = 256, .H = 256, .L = 1, .T = 35, .N = 32};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int64_t *v = !strcmp(a, "--vocab") ? &c.V : !strcmp(a, "--embed") ? &c.E : !strcmp(a, "--hidden") ? &c.H
               : !strcmp(a, "--layers") ? &c.L : !strcmp(a, "--steps") ? &c.T : !strcmp(a, "--batch") ? &c.N : NULL;
    if (!strcmp(a, "--quick")) c.quick = 1;
    else if (!strcmp(a, "--threads") && i + 1 < argc) c.threads = atoi(argv[++i]);
    else if (v && i + 1 < argc) *v = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--threads N] [--quick] [--vocab V] [--embed E] [--hidden H] [--layers L] "
                      "[--steps T] [--batch N]\n", argv[0]);
      exit(2);
    }
  }
  return c;
}

static void net_build(net *n, const cfg *c) {
  BC_CHECK(em_graph_create(&n->g));
  const int64_t ts[2] = {c->T, c->N};
  BC_CHECK(em_input(n->g, "tokens", EM_I32, 2, ts, &n->tok));
  BC_CHECK(em_input(n->g, "labels", EM_I32, 2, ts, &n->labels));
  em_layers L = {.graph = n->g, .seed = 7};
  em_var h, logits, ce, loss;
  BC_CHECK(em_embedding(&L, "embed", n->tok, c->V, c->E, NULL, &h)); /* [T, N, E] */
  for (int64_t k = 0; k < c->L; k++) {
    em_recurrent_outputs ro;
    char name[32];
    snprintf(name, sizeof name, "lstm%lld", (long long)k + 1);
    BC_CHECK(em_lstm(&L, name, h, c->H, NULL, &ro)); /* [T, 1, N, H] */
    int64_t axis = 1;
    em_attr a = {.name = "axes", .type = EM_ATTR_INTS, .ints = &axis, .n = 1};
    BC_CHECK(em_apply(n->g, "squeeze", &ro.y, 1, &a, 1, &h, 1));
  }
  BC_CHECK(em_dense(&L, "decoder", h, c->V, NULL, &logits)); /* [T, N, V] */
  em_var ce_in[2] = {logits, n->labels};
  BC_CHECK(em_apply(n->g, "cross_entropy_with_softmax", ce_in, 2, NULL, 0, &ce, 1));
  BC_CHECK(em_apply(n->g, "reduce_mean", &ce, 1, NULL, 0, &loss, 1));
  em_var params[64], grads[64], update;
  size_t np = 0;
  BC_CHECK(em_graph_parameters(n->g, params, 64, &np));
  BC_CHECK(em_gradients(n->g, loss, params, (int)np, grads));
  em_learner_config lc;
  BC_CHECK(em_learner_defaults(EM_LEARNER_SGD, 0.1, &lc));
  BC_CHECK(em_learner_create(&lc, NULL, params, (int)np, &n->l));
  BC_CHECK(em_learner_attach(n->l, n->g, grads, &update));
  em_var outs[2] = {loss, update};
  BC_CHECK(em_exec_create(n->g, outs, 2, em_cpu(), &n->e));
}

static float net_step(net *n, const cfg *c, em_tensor *tok, em_tensor *labels) {
  em_feed f[3] = {{n->tok, tok}, {n->labels, labels}, {0}};
  BC_CHECK(em_learner_feed(n->l, c->N, &f[2]));
  em_tensor *out[2] = {0};
  BC_CHECK(em_exec_run(n->e, f, 3, out));
  BC_CHECK(em_learner_step_done(n->l, c->N));
  float loss = *(const float *)em_tensor_data(out[0]);
  em_tensor_release(out[0]);
  em_tensor_release(out[1]);
  return loss;
}

int main(int argc, char **argv) {
  cfg c = parse(argc, argv);
  BC_CHECK(em_set_num_threads(c.threads));
  printf("R threads %d\n", em_get_num_threads());
  printf("R lstm_lm.sizes V%lld-E%lld-H%lld-L%lld-T%lld-N%lld\n", (long long)c.V, (long long)c.E, (long long)c.H,
         (long long)c.L, (long long)c.T, (long long)c.N);
  /* The labels are the next tokens of one random stream per batch column. */
  em_tensor *toks[N_BATCHES], *labs[N_BATCHES];
  int32_t *buf = malloc(sizeof *buf * (size_t)((c.T + 1) * c.N)), *lb = malloc(sizeof *lb * (size_t)(c.T * c.N));
  if (!buf || !lb) return 1;
  uint64_t s = 12345;
  const int64_t ts[2] = {c.T, c.N};
  for (int k = 0; k < N_BATCHES; k++) {
    for (int64_t i = 0; i < (c.T + 1) * c.N; i++) buf[i] = (int32_t)(bc_rand_u64(&s) % (uint64_t)c.V);
    for (int64_t i = 0; i < c.T * c.N; i++) lb[i] = buf[i + c.N];
    size_t bytes = sizeof *buf * (size_t)(c.T * c.N);
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_I32, 2, ts, buf, bytes, &toks[k]));
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_I32, 2, ts, lb, bytes, &labs[k]));
  }
  free(buf);
  free(lb);
  net n;
  double t0 = bc_now();
  net_build(&n, &c);
  printf("R lstm_lm.ember.build_ms %.1f\n", (bc_now() - t0) * 1e3);
  float first = 0, last = 0;
  for (int i = 0; i < 20; i++) { /* training works; also the warm-up */
    last = net_step(&n, &c, toks[0], labs[0]);
    if (i == 0) first = last;
  }
  printf("R lstm_lm.ember.check_loss_first %.5f\nR lstm_lm.ember.check_loss_last %.5f\n", first, last);
  if (!(last < first)) {
    fprintf(stderr, "bench_lstm_lm: 20 SGD steps on one batch did not lower the loss (%g -> %g)\n", first, last);
    return 1;
  }
  int reps = c.quick ? 3 : 5, steps = c.quick ? 3 : 6, k = 0;
  for (int r = 0; r < reps; r++) {
    t0 = bc_now();
    for (int i = 0; i < steps; i++, k++) net_step(&n, &c, toks[k % N_BATCHES], labs[k % N_BATCHES]);
    printf("R lstm_lm.ember.ms %.4f\n", (bc_now() - t0) / steps * 1e3);
    fflush(stdout);
  }
  em_exec_free(n.e);
  em_learner_free(n.l);
  em_graph_free(n.g);
  for (int i = 0; i < N_BATCHES; i++) {
    em_tensor_release(toks[i]);
    em_tensor_release(labs[i]);
  }
  return 0;
}
