/* bench_conv: a ResNet-style layer, 3x3 convolution 64 -> 64 channels on
 * x [8, 64, 56, 56] f32, padding 1, no bias: forward alone, and forward with
 * the gradients for x and w (no goal; bench/mlp_torch.py conv times PyTorch's
 * nn.Conv2d the same way).
 *
 * Ember: one graph, y = convolution(x, w), s = reduce_sum(y), dx and dw from
 * em_gradients; "fwd" runs an executor for y, "fwdbwd" one for y, dx, dw.
 *
 * Before timing, a sample of y's elements is checked against a
 * double-precision loop written here.
 *
 * Output: "R key value" lines (see bench_common.h). */
#include <math.h>

#include "bench_common.h"

enum { N = 8, C = 64, M = 64, H = 56, W = 56, K = 3 };

/* y[n, m, i, j] in double, zero padding 1. */
static double reference(const float *x, const float *w, int n, int m, int i, int j) {
  double s = 0;
  for (int c = 0; c < C; c++)
    for (int a = 0; a < K; a++)
      for (int b = 0; b < K; b++) {
        int ii = i + a - 1, jj = j + b - 1;
        if (ii >= 0 && ii < H && jj >= 0 && jj < W)
          s += (double)x[(((int64_t)n * C + c) * H + ii) * W + jj] * (double)w[((m * C + c) * K + a) * K + b];
      }
  return s;
}

int main(int argc, char **argv) {
  bc_opts opt = bc_parse(argc, argv);
  int threads = bc_threads(&opt);
  printf("R threads %d\n", threads);

  const int64_t xs[4] = {N, C, H, W}, ws[4] = {M, C, K, K}, ys = (int64_t)N * M * H * W;
  const int64_t nx = (int64_t)N * C * H * W, nw = (int64_t)M * C * K * K;
  float *xb = bc_alloc_f32(nx), *wb = bc_alloc_f32(nw), *yb = bc_alloc_f32(ys);
  bc_fill_uniform(xb, nx, 31);
  bc_fill_uniform(wb, nw, 32);

  em_graph *g;
  em_var x, w, y, s, grads[2];
  em_tensor *wt, *xt;
  BC_CHECK(em_graph_create(&g));
  BC_CHECK(em_input(g, "x", EM_F32, 4, xs, &x));
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, ws, wb, sizeof(float) * (size_t)nw, &wt));
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = wt};
  BC_CHECK(em_parameter(g, "w", EM_F32, 4, ws, &init, &w));
  const int64_t pads[4] = {1, 1, 1, 1};
  em_attr at[1] = {{.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 4}};
  em_var in[2] = {x, w};
  BC_CHECK(em_apply(g, "convolution", in, 2, at, 1, &y, 1));
  BC_CHECK(em_apply(g, "reduce_sum", &y, 1, NULL, 0, &s, 1));
  BC_CHECK(em_gradients(g, s, in, 2, grads));
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, xs, xb, sizeof(float) * (size_t)nx, &xt));
  em_feed f = {x, xt};

  static const char *const names[2] = {"fwd", "fwdbwd"};
  for (int mode = 0; mode < 2; mode++) {
    em_var outs[3] = {y, grads[0], grads[1]};
    int no = mode ? 3 : 1;
    em_exec *e;
    em_tensor *o[3];
    BC_CHECK(em_exec_create(g, outs, no, em_cpu(), &e));
    if (mode == 0) { /* correctness first */
      BC_CHECK(em_exec_run(e, &f, 1, o));
      BC_CHECK(em_tensor_to_host(o[0], yb, sizeof(float) * (size_t)ys));
      em_tensor_release(o[0]);
      double err = 0;
      uint64_t st = 9;
      for (int q = 0; q < 2000; q++) {
        int n = (int)(bc_rand_u64(&st) % N), m = (int)(bc_rand_u64(&st) % M);
        int i = (int)(bc_rand_u64(&st) % H), j = (int)(bc_rand_u64(&st) % W);
        err = fmax(err, fabs(reference(xb, wb, n, m, i, j) - yb[(((int64_t)n * M + m) * H + i) * W + j]));
      }
      printf("R conv.ember.maxabsdiff %.3g\n", err);
      if (err > 1e-3) {
        fprintf(stderr, "bench_conv: Ember's output differs from the reference by %g\n", err);
        return 1;
      }
    }
    char key[32];
    snprintf(key, sizeof key, "conv.%s.ember.ms", names[mode]);
    bc_time_runs(e, &f, 1, no, 2, 3, opt.quick ? 2 : 5, key); /* run.sh repeats the process in rounds */
    em_exec_free(e);
  }
  free(xb);
  free(wb);
  free(yb);
  em_tensor_release(xt);
  em_tensor_release(wt);
  em_graph_free(g);
  return 0;
}
