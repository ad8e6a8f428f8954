/* GPU benchmarks of issue 10, Ember's side (bench/gpu_torch.py is PyTorch's;
 * bench/run_gpu.sh runs both and writes the result file). Everything runs
 * through the public API on one CUDA device, with tensors resident on it:
 *
 *   bw      elementwise ops and a reduction over 256 MB (64 M floats) through
 *           the executor, and a device-to-device copy of the same bytes
 *           (em_memcpy_d2d): GB/s counted as bytes read + bytes written;
 *   gemm    matmul f32 of square N x N at N = 1024 ... 8192 through the
 *           executor, and cuBLAS SGEMM (dlopen'd; default math mode, no TF32)
 *           on the same device buffers: TFLOP/s;
 *   host    a chain of 256 `neg` ops on a 1-element tensor: microseconds of
 *           host time per op through the executor;
 *   mlp     the 784-512-512-10 MLP of bench_mlp (loss and all six gradients,
 *           no optimiser step), batch 64 and 256, in the fast and the
 *           portable mode: ms per step.
 *
 * Output: "R key value" lines (bench_common.h). Timing: wall clock around
 * `reps` runs, with em_stream_sync(dev, NULL) before the clock stops.
 *   bench_gpu [--device N] [--quick] [--only bw,gemm,host,mlp] */
#include <dlfcn.h>
#include <math.h>

#include "bench_common.h"
#include "ember.h"
#include "mlp_graph.h"

static em_device g_dev;
static int g_quick;

/* A device tensor of n random floats. */
static em_tensor *device_f32(int ndim, const int64_t *shape, uint64_t seed) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float *h = bc_alloc_f32(n);
  bc_fill_uniform(h, n, seed);
  em_tensor *t;
  BC_CHECK(em_tensor_from_host(g_dev, EM_F32, ndim, shape, h, sizeof(float) * (size_t)n, &t));
  free(h);
  return t;
}

/* Seconds per run of e (fed `feeds`, outputs released), median of 5 batches of reps. */
static double time_exec(em_exec *e, const em_feed *feeds, int n_feeds, int n_out, int reps) {
  double t[5];
  bc_run_once(e, feeds, n_feeds, n_out); /* loads modules, fills the allocator's cache */
  BC_CHECK(em_stream_sync(g_dev, NULL));
  for (int b = 0; b < 5; b++) {
    double t0 = bc_now();
    for (int i = 0; i < reps; i++) bc_run_once(e, feeds, n_feeds, n_out);
    BC_CHECK(em_stream_sync(g_dev, NULL));
    t[b] = (bc_now() - t0) / reps;
  }
  return bc_median(t, 5);
}

/* One op applied to inputs of the given shapes, planned on the device. */
static em_exec *op_exec(em_graph **g, const char *op, int n_in, em_tensor **in, em_var *vars, const em_attr *attrs,
                        int n_attrs) {
  BC_CHECK(em_graph_create(g));
  for (int i = 0; i < n_in; i++)
    BC_CHECK(em_input(*g, NULL, EM_F32, em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &vars[i]));
  em_var y;
  BC_CHECK(em_apply(*g, op, vars, n_in, attrs, n_attrs, &y, 1));
  em_exec *e;
  BC_CHECK(em_exec_create(*g, &y, 1, g_dev, &e));
  return e;
}

static void bench_bandwidth(void) {
  int64_t n = g_quick ? 16 << 20 : 64 << 20;
  int64_t shape[1] = {n};
  size_t bytes = sizeof(float) * (size_t)n;
  em_tensor *x = device_f32(1, shape, 1), *y = device_f32(1, shape, 2), *z = device_f32(1, shape, 3);
  double t[5];
  for (int b = 0; b < 5; b++) {
    BC_CHECK(em_stream_sync(g_dev, NULL));
    double t0 = bc_now();
    for (int i = 0; i < 10; i++) BC_CHECK(em_memcpy_d2d(g_dev, em_tensor_data(z), em_tensor_data(x), bytes, NULL));
    BC_CHECK(em_stream_sync(g_dev, NULL));
    t[b] = (bc_now() - t0) / 10;
  }
  printf("R bw_copy_gbs %.2f\n", 2.0 * (double)bytes / bc_median(t, 5) / 1e9);
  static const struct {
    const char *op;
    int n_in, reads, writes;
  } ops[] = {{"relu", 1, 1, 1}, {"exp", 1, 1, 1}, {"add", 2, 2, 1}, {"mul", 2, 2, 1}, {"reduce_sum", 1, 1, 0}};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    em_graph *g;
    em_var v[2];
    em_tensor *in[2] = {x, y};
    em_exec *e = op_exec(&g, ops[k].op, ops[k].n_in, in, v, NULL, 0);
    em_feed f[2] = {{v[0], x}, {v[1], y}};
    double s = time_exec(e, f, ops[k].n_in, 1, 10);
    printf("R bw_%s_gbs %.2f\n", ops[k].op, (double)(ops[k].reads + ops[k].writes) * (double)bytes / s / 1e9);
    em_exec_free(e);
    em_graph_free(g);
  }
  em_tensor_release(x);
  em_tensor_release(y);
  em_tensor_release(z);
}

/* cuBLAS through dlopen: only what SGEMM needs. */
typedef int (*cublas_create_fn)(void **);
typedef int (*cublas_destroy_fn)(void *);
typedef int (*cublas_sgemm_fn)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
                               const float *, float *, int);

static void bench_gemm(void) {
  static const char *libs[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};
  void *lib = NULL;
  for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !lib; i++) lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
  cublas_create_fn create = lib ? (cublas_create_fn)dlsym(lib, "cublasCreate_v2") : NULL;
  cublas_destroy_fn destroy = lib ? (cublas_destroy_fn)dlsym(lib, "cublasDestroy_v2") : NULL;
  cublas_sgemm_fn sgemm = lib ? (cublas_sgemm_fn)dlsym(lib, "cublasSgemm_v2") : NULL;
  void *handle = NULL;
  if (!create || !sgemm || create(&handle) != 0) {
    printf("R cublas unavailable\n");
    handle = NULL;
  }
  static const int64_t sizes[] = {1024, 2048, 4096, 8192};
  int n_sizes = g_quick ? 2 : 4;
  for (int s = 0; s < n_sizes; s++) {
    int64_t n = sizes[s], shape[2] = {n, n};
    em_tensor *a = device_f32(2, shape, 10), *b = device_f32(2, shape, 11), *c = device_f32(2, shape, 12);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    int reps = n >= 4096 ? 3 : 10;
    em_graph *g;
    em_var v[2];
    em_tensor *in[2] = {a, b};
    em_exec *e = op_exec(&g, "matmul", 2, in, v, NULL, 0);
    em_feed f[2] = {{v[0], a}, {v[1], b}};
    printf("R gemm_ember_%lld_tflops %.3f\n", (long long)n, flop / time_exec(e, f, 2, 1, reps) / 1e12);
    em_exec_free(e);
    em_graph_free(g);
    if (handle) {
      /* Row-major C = A B is column-major C^T = B^T A^T: the same buffers, operands swapped. */
      const float one = 1, zero = 0;
      int nn = (int)n;
      double t[5];
      for (int k = 0; k < 6; k++) {
        BC_CHECK(em_stream_sync(g_dev, NULL));
        double t0 = bc_now();
        for (int i = 0; i < reps; i++)
          if (sgemm(handle, 0, 0, nn, nn, nn, &one, em_tensor_data(b), nn, em_tensor_data(a), nn, &zero,
                    em_tensor_data(c), nn) != 0) {
            fprintf(stderr, "cublasSgemm failed\n");
            exit(1);
          }
        BC_CHECK(em_stream_sync(g_dev, NULL));
        if (k) t[k - 1] = (bc_now() - t0) / reps; /* the first batch warms up */
      }
      printf("R gemm_cublas_%lld_tflops %.3f\n", (long long)n, flop / bc_median(t, 5) / 1e12);
    }
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(c);
  }
  if (handle && destroy) destroy(handle);
}

static void bench_host_cost(void) {
  enum { CHAIN = 256 };
  em_graph *g;
  BC_CHECK(em_graph_create(&g));
  int64_t shape[1] = {1};
  em_var x, y;
  BC_CHECK(em_input(g, "x", EM_F32, 1, shape, &x));
  y = x;
  for (int i = 0; i < CHAIN; i++) BC_CHECK(em_apply(g, "neg", &y, 1, NULL, 0, &y, 1));
  em_exec *e;
  BC_CHECK(em_exec_create(g, &y, 1, g_dev, &e));
  em_tensor *xt = device_f32(1, shape, 5);
  em_feed f = {x, xt};
  printf("R host_us_per_op %.3f\n", time_exec(e, &f, 1, 1, 20) / CHAIN * 1e6);
  em_exec_free(e);
  em_graph_free(g);
  em_tensor_release(xt);
}

static void bench_mlp(void) {
  static const int64_t batches[] = {64, 256};
  for (int bi = 0; bi < 2; bi++) {
    for (int mode = 0; mode < 2; mode++) {
      mlp m;
      mlp_build(&m, batches[bi]);
      em_exec_free(m.e); /* mlp_build plans on the CPU: plan again on the device */
      BC_CHECK(em_exec_create(m.g, m.outputs, 1 + MLP_NPARAM, g_dev, &m.e));
      BC_CHECK(em_exec_set_mode(m.e, mode ? EM_MODE_PORTABLE : EM_MODE_FAST));
      em_tensor *xs, *ls, *xd, *ld;
      mlp_data(batches[bi], 1, &xs, &ls);
      BC_CHECK(em_tensor_to_device(xs, g_dev, &xd));
      BC_CHECK(em_tensor_to_device(ls, g_dev, &ld));
      em_feed f[2] = {{m.x, xd}, {m.labels, ld}};
      double s = time_exec(m.e, f, 2, 1 + MLP_NPARAM, 20);
      printf("R mlp_b%lld_%s_ms %.4f\n", (long long)batches[bi], mode ? "portable" : "fast", s * 1e3);
      em_tensor_release(xs);
      em_tensor_release(ls);
      em_tensor_release(xd);
      em_tensor_release(ld);
      mlp_free(&m);
    }
  }
}

int main(int argc, char **argv) {
  int ordinal = 0;
  const char *only = "bw,gemm,host,mlp";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) g_quick = 1;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) ordinal = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--device N] [--quick] [--only bw,gemm,host,mlp]\n", argv[0]);
      return 2;
    }
  }
  g_dev = em_cuda(ordinal);
  em_device_info info;
  BC_CHECK(em_device_get_info(g_dev, &info));
  printf("R gpu %s\nR cc %d.%d\nR driver_cuda %d\n", info.name, info.cc_major, info.cc_minor, info.driver_version);
  if (strstr(only, "bw")) bench_bandwidth();
  if (strstr(only, "gemm")) bench_gemm();
  if (strstr(only, "host")) bench_host_cost();
  if (strstr(only, "mlp")) bench_mlp();
  em_shutdown();
  return 0;
}
