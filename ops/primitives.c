/* First primitives (include/ember/primitives.h): each runs its kernel from
 * kernels/ on a CUDA device, or its CPU twin here. The twins follow the
 * kernels' arithmetic exactly (same order, no FMA contraction), so a GPU and
 * the CPU produce the same bits. When a device's plan for the kernel is the
 * CPU, the data is brought to the host, the twin runs, and the result goes
 * back: slower, never wrong, and the reason is in the dispatch log. */
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "gpu_glue.h"
#include "error.h"
#include "memory.h"

#define API __attribute__((visibility("default")))

#define BLOCK EM_OPS_BLOCK
#define REDUCE_THREADS 256 /* kernels/reduce.cu EM_REDUCE_THREADS */
#define TILE 32            /* kernels/transpose.cu EM_TILE */

/* ------------------------------------------------------------ CPU twins --- */

static void fill_cpu(float *y, float v, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = v;
}

static void axpy_cpu(float a, const float *x, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    volatile float p = a * x[i]; /* rounded product, as the kernel: no contraction */
    y[i] = p + y[i];
  }
}

/* Blocks of the first reduction stage: a function of n only, never of the
 * device, so the summation order is the same everywhere. */
static size_t reduce_blocks(size_t n) {
  size_t g = (n + (size_t)REDUCE_THREADS * 8 - 1) / ((size_t)REDUCE_THREADS * 8);
  if (g < 1) g = 1;
  if (g > 1024) g = 1024;
  return g;
}

/* One block of kernels/reduce.cu em_block_sum: strided sequential sums per
 * thread, then the shared-memory tree. */
static float block_sum_cpu(const float *x, size_t n, size_t first, size_t stride) {
  float sh[REDUCE_THREADS];
  for (size_t t = 0; t < REDUCE_THREADS; t++) {
    float acc = 0.0f;
    for (size_t i = first + t; i < n; i += stride) acc = acc + x[i];
    sh[t] = acc;
  }
  for (size_t s = REDUCE_THREADS / 2; s > 0; s >>= 1)
    for (size_t t = 0; t < s; t++) sh[t] = sh[t] + sh[t + s];
  return sh[0];
}

static float sum_cpu(const float *x, size_t n) {
  size_t g = reduce_blocks(n);
  float *partials = malloc(g * sizeof *partials);
  float buf[1024];
  if (!partials) partials = buf; /* g <= 1024 */
  for (size_t b = 0; b < g; b++) partials[b] = block_sum_cpu(x, n, b * REDUCE_THREADS, g * REDUCE_THREADS);
  float s = block_sum_cpu(partials, g, 0, REDUCE_THREADS);
  if (partials != buf) free(partials);
  return s;
}

static void transpose_cpu(const float *in, float *out, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) out[c * rows + r] = in[r * cols + c];
}

/* ------------------------------------------------------------- helpers --- */

/* em_kernel_get, telling "use the CPU twin" apart from real failures. */
static em_status kernel(em_device dev, const char *name, em_kernel **k, int *use_cpu) {
  em_status s = em_kernel_get(dev, name, k);
  *use_cpu = s == EM_ERR_USE_CPU;
  return *use_cpu ? EM_OK : s;
}

/* ---------------------------------------------------------- primitives --- */

struct fill_args { em_host_copy *c; float v; size_t n; };
static void fill_run(void *p) { struct fill_args *a = p; fill_cpu(a->c[0].host, a->v, a->n); }

API em_status em_fill_f32(em_device dev, float *y, float value, size_t n, em_stream *s) {
  if (!y && n) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_fill_f32: y is NULL for n = %zu", n);
  if (dev.kind == EM_DEVICE_CPU) return fill_cpu(y, value, n), EM_OK;
  em_kernel *k;
  int cpu;
  em_status st = kernel(dev, "em_fill_f32", &k, &cpu);
  if (st || !n) return st;
  if (cpu) {
    em_host_copy c[1] = {{NULL, y, n * sizeof *y, 0, 1}}; /* fill overwrites all of y */
    struct fill_args a = {c, value, n};
    return em_ops_on_host_copies(dev, c, 1, s, fill_run, &a);
  }
  long long nn = (long long)n;
  void *args[] = {&y, &value, &nn};
  return em_kernel_launch(k, (em_dim3){em_ops_grid_1d(n), 1, 1}, (em_dim3){BLOCK, 1, 1}, 0, s, args);
}

struct axpy_args { em_host_copy *c; float a; size_t n; };
static void axpy_run(void *p) { struct axpy_args *a = p; axpy_cpu(a->a, a->c[0].host, a->c[1].host, a->n); }

API em_status em_axpy_f32(em_device dev, float a, const float *x, float *y, size_t n, em_stream *s) {
  if ((!x || !y) && n) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_axpy_f32: x or y is NULL for n = %zu", n);
  if (dev.kind == EM_DEVICE_CPU) return axpy_cpu(a, x, y, n), EM_OK;
  em_kernel *k;
  int cpu;
  em_status st = kernel(dev, "em_axpy_f32", &k, &cpu);
  if (st || !n) return st;
  if (cpu) {
    em_host_copy c[2] = {{NULL, x, n * sizeof *x, 1, 0}, {NULL, y, n * sizeof *y, 1, 1}}; /* axpy reads y */
    struct axpy_args ar = {c, a, n};
    return em_ops_on_host_copies(dev, c, 2, s, axpy_run, &ar);
  }
  long long nn = (long long)n;
  void *args[] = {&a, &x, &y, &nn};
  return em_kernel_launch(k, (em_dim3){em_ops_grid_1d(n), 1, 1}, (em_dim3){BLOCK, 1, 1}, 0, s, args);
}

struct sum_args { em_host_copy *c; size_t n; };
static void sum_run(void *p) {
  struct sum_args *a = p;
  *(float *)a->c[1].host = sum_cpu(a->c[0].host, a->n);
}

API em_status em_sum_f32(em_device dev, const float *x, size_t n, float *out, em_stream *s) {
  if ((!x && n) || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sum_f32: x or out is NULL (n = %zu)", n);
  if (dev.kind == EM_DEVICE_CPU) return *out = sum_cpu(x, n), EM_OK;
  em_kernel *k1, *k2;
  int cpu;
  em_status st = kernel(dev, "em_sum_f32_stage1", &k1, &cpu);
  if (!st && !cpu) st = kernel(dev, "em_sum_f32_stage2", &k2, &cpu);
  if (st) return st;
  if (cpu) {
    em_host_copy c[2] = {{NULL, x, n * sizeof *x, 1, 0}, {NULL, out, sizeof *out, 0, 1}};
    struct sum_args a = {c, n};
    return em_ops_on_host_copies(dev, c, 2, s, sum_run, &a);
  }
  size_t g = reduce_blocks(n);
  float *partials;
  if ((st = em_malloc(dev, g * sizeof(float), (void **)&partials))) return st;
  long long nn = (long long)n, gg = (long long)g;
  void *a1[] = {&x, &nn, &partials};
  void *a2[] = {&partials, &gg, &out};
  st = em_kernel_launch(k1, (em_dim3){(unsigned)g, 1, 1}, (em_dim3){REDUCE_THREADS, 1, 1}, 0, s, a1);
  if (!st) st = em_kernel_launch(k2, (em_dim3){1, 1, 1}, (em_dim3){REDUCE_THREADS, 1, 1}, 0, s, a2);
  /* The allocator may hand the block out again before the stream has run:
   * wait, so the partials are not overwritten under the kernel. */
  em_status sync = em_stream_wait(dev, s); /* s, or the legacy stream: never the whole context */
  em_free(dev, partials);
  return st ? st : sync;
}

struct transpose_args { em_host_copy *c; size_t rows, cols; };
static void transpose_run(void *p) {
  struct transpose_args *a = p;
  transpose_cpu(a->c[0].host, a->c[1].host, a->rows, a->cols);
}

API em_status em_transpose_f32(em_device dev, const float *in, float *out, size_t rows, size_t cols, em_stream *s) {
  size_t n = rows * cols;
  if (cols && n / cols != rows) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_transpose_f32: %zu x %zu overflows", rows, cols);
  if ((!in || !out) && n) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_transpose_f32: NULL buffer for %zu x %zu", rows, cols);
  if (in == out && n) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_transpose_f32: in and out must not alias");
  if (dev.kind == EM_DEVICE_CPU) return transpose_cpu(in, out, rows, cols), EM_OK;
  em_kernel *k;
  int cpu;
  em_status st = kernel(dev, "em_transpose_f32", &k, &cpu);
  if (st || !n) return st;
  if (cpu) {
    em_host_copy c[2] = {{NULL, in, n * sizeof *in, 1, 0}, {NULL, out, n * sizeof *out, 0, 1}};
    struct transpose_args a = {c, rows, cols};
    return em_ops_on_host_copies(dev, c, 2, s, transpose_run, &a);
  }
  if ((cols + TILE - 1) / TILE > 0x7fffffff || (rows + TILE - 1) / TILE > 65535)
    return em_fail(EM_ERR_UNSUPPORTED, "em_transpose_f32: %zu x %zu exceeds the grid limits", rows, cols);
  long long r = (long long)rows, c = (long long)cols;
  void *args[] = {&in, &out, &r, &c};
  em_dim3 grid = {(unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE), 1};
  return em_kernel_launch(k, grid, (em_dim3){TILE, 8, 1}, 0, s, args);
}
