/* bench_softmax_ce: the output layer's loss of a large-vocabulary classifier,
 * forward and backward: logits [64, 32000] f32, sparse labels,
 * cross_entropy_with_softmax averaged over the batch, and its gradient with
 * respect to the logits (no goal; bench/mlp_torch.py softmax_ce times
 * PyTorch's F.cross_entropy the same way).
 *
 * Ember: one graph, loss = reduce_mean(cross_entropy_with_softmax(x, l)),
 * dx = gradient; each call is one em_exec_run giving loss and dx.
 *
 * Before timing, dx is checked against a double-precision reference written
 * here: (softmax(x) - onehot(l)) / 64.
 *
 * Output: "R key value" lines (see bench_common.h). */
#include <math.h>

#include "bench_common.h"

enum { B = 64, C = 32000 };

int main(int argc, char **argv) {
  bc_opts opt = bc_parse(argc, argv);
  int threads = bc_threads(&opt);
  printf("R threads %d\n", threads);

  const int64_t xs[2] = {B, C}, ls[1] = {B};
  float *xb = bc_alloc_f32((int64_t)B * C), *db = bc_alloc_f32((int64_t)B * C);
  bc_fill_uniform(xb, (int64_t)B * C, 21);
  for (int64_t i = 0; i < (int64_t)B * C; i++) xb[i] *= 8; /* logits in [-8, 8) */
  int64_t lb[B];
  uint64_t st = 5;
  for (int i = 0; i < B; i++) lb[i] = (int64_t)(bc_rand_u64(&st) % C);

  em_graph *g;
  em_var x, l, loss, mean, dx;
  BC_CHECK(em_graph_create(&g));
  BC_CHECK(em_input(g, "x", EM_F32, 2, xs, &x));
  BC_CHECK(em_input(g, "l", EM_I64, 1, ls, &l));
  em_var in[2] = {x, l};
  BC_CHECK(em_apply(g, "cross_entropy_with_softmax", in, 2, NULL, 0, &loss, 1));
  BC_CHECK(em_apply(g, "reduce_mean", &loss, 1, NULL, 0, &mean, 1));
  BC_CHECK(em_gradients(g, mean, &x, 1, &dx));
  em_var outs[2] = {mean, dx};
  em_exec *e;
  BC_CHECK(em_exec_create(g, outs, 2, em_cpu(), &e));
  em_tensor *xt, *lt, *o[2];
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, xs, xb, sizeof(float) * (size_t)B * C, &xt));
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_I64, 1, ls, lb, sizeof lb, &lt));
  em_feed f[2] = {{x, xt}, {l, lt}};

  /* Correctness first. */
  BC_CHECK(em_exec_run(e, f, 2, o));
  BC_CHECK(em_tensor_to_host(o[1], db, sizeof(float) * (size_t)B * C));
  em_tensor_release(o[0]);
  em_tensor_release(o[1]);
  double err = 0;
  for (int r = 0; r < B; r++) {
    const float *xr = xb + (int64_t)r * C;
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < C; j++) mx = fmax(mx, xr[j]);
    for (int j = 0; j < C; j++) s += exp(xr[j] - mx);
    for (int j = 0; j < C; j++) {
      double want = (exp(xr[j] - mx) / s - (j == lb[r])) / B;
      err = fmax(err, fabs(want - db[(int64_t)r * C + j]));
    }
  }
  printf("R softmax_ce.ember.maxabsdiff %.3g\n", err);
  if (err > 1e-6) {
    fprintf(stderr, "bench_softmax_ce: Ember's gradient differs from the reference by %g\n", err);
    return 1;
  }

  /* run.sh repeats the process in rounds */
  bc_time_runs(e, f, 2, 2, 3, 3, opt.quick ? 5 : 10, "softmax_ce.ember.ms");
  free(xb);
  free(db);
  em_tensor_release(xt);
  em_tensor_release(lt);
  em_exec_free(e);
  em_graph_free(g);
  return 0;
}
