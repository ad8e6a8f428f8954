/* bench_groupconv: CNTK 2.6's group-convolution example, forward only.
 *
 * CNTK v2.6's release notes ("Efficient group convolution") time one group
 * convolution node with input (C, H, W) = (32, 128, 128), 32 output
 * channels, 32 groups (depthwise) and a 5x5 kernel: 9.963 ms per call on
 * the CPU (1000-run average, MKL 2017), 41.921 ms before the change. The
 * notes do not give the padding, stride or CPU; here: batch 1, stride 1,
 * padding 2 on every side (a "same"-sized 128x128 output), no bias.
 *
 * Ember: x an input [1,32,128,128], w a parameter [32,1,5,5], y =
 * convolution(x, w; group 32, pads 2,2,2,2) through an executor; each call
 * is one em_exec_run (output allocated and released). bench/mlp_torch.py
 * groupconv times PyTorch's F.conv2d on the same problem.
 *
 * Before timing, Ember's output is checked against a plain double-precision
 * loop written here.
 *
 * Output: "R key value" lines (see bench_common.h). */
#include <math.h>

#include "bench_common.h"

enum { C = 32, H = 128, W = 128, K = 5, PAD = 2 };

/* y[c,i,j] = sum_{a,b} x[c, i+a-PAD, j+b-PAD] * w[c,a,b] (zero outside). */
static void reference(const float *x, const float *w, double *y) {
  for (int c = 0; c < C; c++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < W; j++) {
        double s = 0;
        for (int a = 0; a < K; a++)
          for (int b = 0; b < K; b++) {
            int ii = i + a - PAD, jj = j + b - PAD;
            if (ii >= 0 && ii < H && jj >= 0 && jj < W)
              s += (double)x[(c * H + ii) * W + jj] * (double)w[(c * K + a) * K + b];
          }
        y[(c * H + i) * W + j] = s;
      }
}

int main(int argc, char **argv) {
  bc_opts o = bc_parse(argc, argv);
  int threads = bc_threads(&o);
  printf("R threads %d\n", threads);

  const int64_t xs[4] = {1, C, H, W}, ws[4] = {C, 1, K, K};
  const int64_t nx = (int64_t)C * H * W, nw = (int64_t)C * K * K;
  float *xb = bc_alloc_f32(nx), *wb = bc_alloc_f32(nw), *yb = bc_alloc_f32(nx);
  bc_fill_uniform(xb, nx, 3);
  bc_fill_uniform(wb, nw, 4);

  em_graph *g;
  em_var x, w, y;
  em_tensor *wt, *xt;
  BC_CHECK(em_graph_create(&g));
  BC_CHECK(em_input(g, "x", EM_F32, 4, xs, &x));
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, ws, wb, sizeof(float) * (size_t)nw, &wt));
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = wt};
  BC_CHECK(em_parameter(g, "w", EM_F32, 4, ws, &init, &w));
  const int64_t pads[4] = {PAD, PAD, PAD, PAD};
  em_attr at[2] = {{.name = "group", .type = EM_ATTR_INT, .i = C},
                   {.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 4}};
  em_var in[2] = {x, w};
  BC_CHECK(em_apply(g, "convolution", in, 2, at, 2, &y, 1));
  em_exec *e;
  BC_CHECK(em_exec_create(g, &y, 1, em_cpu(), &e));
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 4, xs, xb, sizeof(float) * (size_t)nx, &xt));
  em_feed f = {x, xt};

  /* Correctness first. */
  em_tensor *out;
  BC_CHECK(em_exec_run(e, &f, 1, &out));
  BC_CHECK(em_tensor_to_host(out, yb, sizeof(float) * (size_t)nx));
  em_tensor_release(out);
  double *ref = malloc(sizeof *ref * (size_t)nx), err = 0;
  if (!ref) return 1;
  reference(xb, wb, ref);
  for (int64_t i = 0; i < nx; i++) err = fmax(err, fabs((double)yb[i] - ref[i]));
  printf("R groupconv.ember.maxabsdiff %.3g\n", err);
  if (err > 1e-4) {
    fprintf(stderr, "bench_groupconv: Ember's output differs from the reference by %g\n", err);
    return 1;
  }

  /* run.sh repeats the process in rounds */
  bc_time_runs(e, &f, 1, 1, 5, 3, o.quick ? 10 : 20, "groupconv.ember.ms");

  free(ref);
  free(xb);
  free(wb);
  free(yb);
  em_tensor_release(xt);
  em_tensor_release(wt);
  em_exec_free(e);
  em_graph_free(g);
  return 0;
}
