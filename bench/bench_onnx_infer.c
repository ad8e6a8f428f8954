/* Issue 12's inference benchmark, Ember side (bench/onnx_infer_bench.sh):
 * loads an ONNX model once through the public API (include/ember/onnx.h, the
 * CPU, fast mode), feeds the raw float32 input file to its input "x", warms
 * up, then times RUNS calls of em_onnx_run back to back:
 *
 *   bench_onnx_infer MODEL.onnx INPUT.in D0,D1,... RUNS TAG OUTPUT.out
 *
 * prints "R ember.<TAG> <ms>" per run and writes the last run's first output
 * (float32) to OUTPUT.out for the comparison with onnxruntime. Threads: the
 * OpenMP count (OMP_NUM_THREADS), as Ember uses it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "ember/onnx.h"

static float *read_floats(const char *path, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  float *v = malloc(n * sizeof *v);
  if (!v || fread(v, sizeof *v, n, f) != n) {
    fprintf(stderr, "%s: cannot read %zu floats\n", path, n);
    exit(1);
  }
  fclose(f);
  return v;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: bench_onnx_infer MODEL.onnx INPUT.in D0,D1,... RUNS TAG OUTPUT.out\n");
    return 2;
  }
  int64_t shape[EM_MAX_DIMS];
  int ndim = 0;
  size_t n = 1;
  for (char *p = argv[3]; *p && ndim < EM_MAX_DIMS;) {
    shape[ndim] = strtoll(p, &p, 10);
    n *= (size_t)shape[ndim++];
    if (*p == ',') p++;
  }
  int runs = atoi(argv[4]);
  float *data = read_floats(argv[2], n);

  double t0 = bc_now();
  em_onnx *m;
  em_onnx_options o = {.mode = EM_ONNX_MODE_FAST};
  BC_CHECK(em_onnx_load(argv[1], &o, &m));
  printf("R ember_load.%s %.4f\n", argv[5], 1e3 * (bc_now() - t0));

  em_tensor *x;
  BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, ndim, shape, data, n * sizeof *data, &x));
  em_named_tensor in[] = {{"x", x}};
  size_t n_out = em_onnx_output_count(m);
  em_tensor **out = calloc(n_out, sizeof *out);
  for (int w = 0; w < 3; w++) {
    BC_CHECK(em_onnx_run(m, in, 1, out));
    if (w < 2)
      for (size_t k = 0; k < n_out; k++) em_tensor_release(out[k]);
  }
  /* the warm-up's last output is the one compared */
  size_t n_y = (size_t)em_tensor_numel(out[0]);
  float *y = malloc(n_y * sizeof *y);
  BC_CHECK(em_tensor_to_host(out[0], y, n_y * sizeof *y));
  for (size_t k = 0; k < n_out; k++) em_tensor_release(out[k]);
  FILE *f = fopen(argv[6], "wb");
  if (!f || fwrite(y, sizeof *y, n_y, f) != n_y || fclose(f)) {
    perror(argv[6]);
    return 1;
  }

  for (int r = 0; r < runs; r++) {
    double t = bc_now();
    BC_CHECK(em_onnx_run(m, in, 1, out));
    printf("R ember.%s %.4f\n", argv[5], 1e3 * (bc_now() - t));
    for (size_t k = 0; k < n_out; k++) em_tensor_release(out[k]);
  }
  em_tensor_release(x);
  em_onnx_free(m);
  free(out);
  free(y);
  free(data);
  return 0;
}
