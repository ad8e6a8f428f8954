/* gemm_tiles: what splitting a product into tiles costs OpenBLAS, on one
 * thread (so only the tiling differs).
 *
 * Ember's matmul (ops/linalg.c) cuts C into tiles of about 128 rows x 256
 * columns (sizes fixed by the shape, for results independent of the thread
 * count) and calls single-threaded cblas_sgemm once per tile. Each call packs
 * its own panels of A and B, so B's panel is packed again for every row tile
 * and A's for every column tile, and the kernel works on short blocks. Here
 * the same square product is computed one tile after another with several
 * tile shapes: the whole matrix in one call, Ember's tiles, and larger ones.
 *
 * Output: "R tiles.<n>.<rows>x<cols>.gflops value" lines (bench_common.h). */
#include <cblas.h>

#include "bench_common.h"

/* The tile extent Ember's linalg.c uses: about `unit`, balanced, a multiple of 16. */
static int64_t ember_extent(int64_t len, int64_t unit) {
  if (len <= unit) return len;
  int64_t tiles = (len + unit - 1) / unit, e = (len + tiles - 1) / tiles;
  return (e + 15) / 16 * 16;
}

static void tiled(int64_t n, int64_t th, int64_t tw, const float *A, const float *B, float *C) {
  for (int64_t i = 0; i < n; i += th)
    for (int64_t j = 0; j < n; j += tw) {
      int64_t h = n - i < th ? n - i : th, w = n - j < tw ? n - j : tw;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)h, (int)w, (int)n, 1.0f, A + i * n, (int)n, B + j,
                  (int)n, 0.0f, C + i * n + j, (int)n);
    }
}

int main(int argc, char **argv) {
  bc_opts o = bc_parse(argc, argv);
  (void)o;
  openblas_set_num_threads(1);
  printf("R tiles.threads 1\n");
  const int64_t sizes[3] = {1024, 2048, 4096};
  for (int si = 0; si < 3; si++) {
    int64_t n = sizes[si], nn = n * n;
    float *A = bc_alloc_f32(nn), *B = bc_alloc_f32(nn), *C = bc_alloc_f32(nn);
    bc_fill_uniform(A, nn, 1);
    bc_fill_uniform(B, nn, 2);
    const int64_t shapes[5][2] = {
        {n, n}, {ember_extent(n, 128), ember_extent(n, 256)}, {256, 256}, {512, 1024}, {n, 512}};
    int reps = n >= 4096 ? 2 : 3;
    tiled(n, n, n, A, B, C); /* warm-up */
    for (int r = 0; r < reps; r++)
      for (int k = 0; k < 5; k++) {
        int c = (k + r) % 5;
        double t0 = bc_now();
        tiled(n, shapes[c][0], shapes[c][1], A, B, C);
        double dt = bc_now() - t0;
        printf("R tiles.%lld.%lldx%lld%s.gflops %.3f\n", (long long)n, (long long)shapes[c][0],
               (long long)shapes[c][1], c == 1 ? "(ember)" : "", 2.0 * (double)nn * (double)n / dt * 1e-9);
        fflush(stdout);
      }
    free(A);
    free(B);
    free(C);
  }
  return 0;
}
