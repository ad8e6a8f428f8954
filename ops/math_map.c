/* Elementwise maps of Ember's portable math (include/ember/primitives.h):
 * each runs its kernel from kernels/math.cu on a CUDA device, or the CPU
 * twin here. The twin is the same kernels/em_math.h compiled for the host,
 * so the CPU and every GPU give the same bits. As in primitives.c, when a
 * device's plan for the module is the CPU, the inputs come to the host, the
 * twin runs, and the result goes back: slower, never wrong, and logged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "gpu_glue.h"
#include "error.h"
#include "../kernels/em_math.h"

#define API __attribute__((visibility("default")))

#define BLOCK EM_OPS_BLOCK

/* ------------------------------------------------------------ CPU twins --- */

#define CPU_MAP(name, fn)                                          \
  static void cpu_##name(const void *x, const void *unused, void *y, size_t n) { \
    (void)unused;                                                  \
    const float *xf = x;                                           \
    float *yf = y;                                                 \
    for (size_t i = 0; i < n; i++) yf[i] = fn(xf[i]);              \
  }

CPU_MAP(exp, em_expf)
CPU_MAP(log, em_logf)
CPU_MAP(log1p, em_log1pf)
CPU_MAP(expm1, em_expm1f)
CPU_MAP(tanh, em_tanhf)
CPU_MAP(sigmoid, em_sigmoidf)
CPU_MAP(softplus, em_softplusf)
CPU_MAP(erf, em_erff)
CPU_MAP(sqrt, em_sqrtf)
CPU_MAP(rsqrt, em_rsqrtf)
CPU_MAP(sin, em_sinf)
CPU_MAP(cos, em_cosf)
CPU_MAP(tan, em_tanf)
CPU_MAP(atan, em_atanf)
CPU_MAP(asinh, em_asinhf)

static void cpu_pow(const void *x, const void *p, void *y, size_t n) {
  const float *xf = x, *pf = p;
  float *yf = y;
  for (size_t i = 0; i < n; i++) yf[i] = em_powf(xf[i], pf[i]);
}

static void cpu_f32_to_f16(const void *x, const void *unused, void *y, size_t n) {
  (void)unused;
  const float *xf = x;
  uint16_t *yh = y;
  for (size_t i = 0; i < n; i++) yh[i] = em_f32_to_f16_bits(xf[i]);
}

static void cpu_f16_to_f32(const void *x, const void *unused, void *y, size_t n) {
  (void)unused;
  const uint16_t *xh = x;
  float *yf = y;
  for (size_t i = 0; i < n; i++) yf[i] = em_f16_bits_to_f32(xh[i]);
}

static void cpu_f32_to_bf16(const void *x, const void *unused, void *y, size_t n) {
  (void)unused;
  const float *xf = x;
  uint16_t *yh = y;
  for (size_t i = 0; i < n; i++) yh[i] = em_f32_to_bf16_bits(xf[i]);
}

static void cpu_bf16_to_f32(const void *x, const void *unused, void *y, size_t n) {
  (void)unused;
  const uint16_t *xh = x;
  float *yf = y;
  for (size_t i = 0; i < n; i++) yf[i] = em_bf16_bits_to_f32(xh[i]);
}

typedef void (*cpu_fn)(const void *x, const void *x2, void *y, size_t n);

static const struct {
  const char *name, *kernel;
  cpu_fn cpu;
} math_fns[EM_MATH_FN_COUNT] = {
  [EM_MATH_EXP] = {"exp", "em_map_exp_f32", cpu_exp},
  [EM_MATH_LOG] = {"log", "em_map_log_f32", cpu_log},
  [EM_MATH_LOG1P] = {"log1p", "em_map_log1p_f32", cpu_log1p},
  [EM_MATH_EXPM1] = {"expm1", "em_map_expm1_f32", cpu_expm1},
  [EM_MATH_TANH] = {"tanh", "em_map_tanh_f32", cpu_tanh},
  [EM_MATH_SIGMOID] = {"sigmoid", "em_map_sigmoid_f32", cpu_sigmoid},
  [EM_MATH_SOFTPLUS] = {"softplus", "em_map_softplus_f32", cpu_softplus},
  [EM_MATH_ERF] = {"erf", "em_map_erf_f32", cpu_erf},
  [EM_MATH_SQRT] = {"sqrt", "em_map_sqrt_f32", cpu_sqrt},
  [EM_MATH_RSQRT] = {"rsqrt", "em_map_rsqrt_f32", cpu_rsqrt},
  [EM_MATH_SIN] = {"sin", "em_map_sin_f32", cpu_sin},
  [EM_MATH_COS] = {"cos", "em_map_cos_f32", cpu_cos},
  [EM_MATH_TAN] = {"tan", "em_map_tan_f32", cpu_tan},
  [EM_MATH_ATAN] = {"atan", "em_map_atan_f32", cpu_atan},
  [EM_MATH_ASINH] = {"asinh", "em_map_asinh_f32", cpu_asinh},
};

/* ------------------------------------------------------------- one map --- */

/* An elementwise map: one or two inputs of in_size bytes per element, one
 * output of out_size bytes per element. */
typedef struct map_job {
  const char *what; /* for messages: "em_map_f32(exp)" */
  const char *kernel;
  cpu_fn cpu;
  const void *x, *x2; /* x2: NULL for unary maps */
  void *y;
  size_t in_size, out_size, n;
} map_job;

/* The twin on host copies of the device buffers, for a CPU plan. */
struct host_run { const map_job *j; em_host_copy *c; };
static void host_run(void *p) {
  struct host_run *r = p;
  r->j->cpu(r->c[0].host, r->j->x2 ? r->c[2].host : NULL, r->c[1].host, r->j->n);
}

static em_status run_on_host_copies(em_device dev, const map_job *j, em_stream *s) {
  size_t in_bytes = j->n * j->in_size, out_bytes = j->n * j->out_size;
  em_host_copy c[3] = {{NULL, j->x, in_bytes, 1, 0}, {NULL, j->y, out_bytes, 0, 1}, {NULL, j->x2, in_bytes, 1, 0}};
  struct host_run r = {j, c};
  em_status st = em_ops_on_host_copies(dev, c, j->x2 ? 3 : 2, s, host_run, &r);
  return st ? em_fail_context(st, "%s", j->what) : EM_OK;
}

static int ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

static em_status run_map(em_device dev, const map_job *j, em_stream *s) {
  size_t big = j->in_size > j->out_size ? j->in_size : j->out_size;
  if (j->n > SIZE_MAX / big) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: n = %zu overflows", j->what, j->n);
  if ((!j->x || !j->y) && j->n) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: x or y is NULL for n = %zu", j->what, j->n);
  /* In place is fine when elements have one size (each element is read
   * before it is written, by the same thread); otherwise threads would
   * overwrite inputs others have yet to read. */
  if (j->in_size != j->out_size && j->n &&
      (ranges_overlap(j->x, j->n * j->in_size, j->y, j->n * j->out_size) ||
       (j->x2 && ranges_overlap(j->x2, j->n * j->in_size, j->y, j->n * j->out_size))))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: input and output overlap; use separate buffers", j->what);
  if (dev.kind == EM_DEVICE_CPU) return j->cpu(j->x, j->x2, j->y, j->n), EM_OK;
  em_kernel *k;
  em_status st = em_kernel_get(dev, j->kernel, &k);
  if (st == EM_ERR_USE_CPU) return j->n ? run_on_host_copies(dev, j, s) : EM_OK;
  if (st || !j->n) return st;
  long long nn = (long long)j->n;
  const void *x = j->x, *x2 = j->x2;
  void *y = j->y;
  void *unary[] = {&x, &y, &nn};
  void *binary[] = {&x, &x2, &y, &nn};
  return em_kernel_launch(k, (em_dim3){em_ops_grid_1d(j->n), 1, 1}, (em_dim3){BLOCK, 1, 1}, 0, s, j->x2 ? binary : unary);
}

/* ---------------------------------------------------------- public API --- */

API const char *em_math_fn_name(em_math_fn fn) {
  return (unsigned)fn < EM_MATH_FN_COUNT ? math_fns[fn].name : NULL;
}

API em_status em_map_f32(em_device dev, em_math_fn fn, const float *x, float *y, size_t n, em_stream *s) {
  if ((unsigned)fn >= EM_MATH_FN_COUNT)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_map_f32: unknown function %d (valid: 0 to %d, em_math_fn)", (int)fn,
                   EM_MATH_FN_COUNT - 1);
  char what[64];
  snprintf(what, sizeof what, "em_map_f32(%s)", math_fns[fn].name);
  map_job j = {what, math_fns[fn].kernel, math_fns[fn].cpu, x, NULL, y, sizeof(float), sizeof(float), n};
  return run_map(dev, &j, s);
}

API em_status em_pow_f32(em_device dev, const float *x, const float *p, float *y, size_t n, em_stream *s) {
  if (!p && n) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_pow_f32: p is NULL for n = %zu", n);
  map_job j = {"em_pow_f32", "em_map_pow_f32", cpu_pow, x, p, y, sizeof(float), sizeof(float), n};
  return run_map(dev, &j, s);
}

API em_status em_f32_to_f16(em_device dev, const float *x, uint16_t *y, size_t n, em_stream *s) {
  map_job j = {"em_f32_to_f16", "em_map_f32_to_f16", cpu_f32_to_f16, x, NULL, y, sizeof(float), sizeof(uint16_t), n};
  return run_map(dev, &j, s);
}

API em_status em_f16_to_f32(em_device dev, const uint16_t *x, float *y, size_t n, em_stream *s) {
  map_job j = {"em_f16_to_f32", "em_map_f16_to_f32", cpu_f16_to_f32, x, NULL, y, sizeof(uint16_t), sizeof(float), n};
  return run_map(dev, &j, s);
}

API em_status em_f32_to_bf16(em_device dev, const float *x, uint16_t *y, size_t n, em_stream *s) {
  map_job j = {"em_f32_to_bf16", "em_map_f32_to_bf16", cpu_f32_to_bf16, x, NULL, y, sizeof(float), sizeof(uint16_t), n};
  return run_map(dev, &j, s);
}

API em_status em_bf16_to_f32(em_device dev, const uint16_t *x, float *y, size_t n, em_stream *s) {
  map_job j = {"em_bf16_to_f32", "em_map_bf16_to_f32", cpu_bf16_to_f32, x, NULL, y, sizeof(uint16_t), sizeof(float), n};
  return run_map(dev, &j, s);
}
