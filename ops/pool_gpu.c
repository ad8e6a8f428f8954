/* Launches of kernels/pool.cu for ops/pool.c's gpu members (pool_gpu.h). */
#include "pool_gpu.h"

#include "ember.h"
#include "gpu_glue.h"

static const char *pick(int f64, const char *k32, const char *k64) { return f64 ? k64 : k32; }

/* A kernel over count elements taking n_lead leading arguments, then the geometry (PM_GEOM_PARAMS order). */
static em_status launch_geom(const em_op_args *a, const char *kernel, long long count, void **lead, int n_lead,
                             const pm_geom *gm) {
  pm_geom *g = (pm_geom *)gm; /* the launch only reads it */
  void *geom[PM_GEOM_N_PARAMS] = {&g->planes, &g->img[0], &g->img[1], &g->img[2], &g->col[0], &g->col[1],
                                  &g->col[2], &g->k[0],   &g->k[1],   &g->k[2],   &g->s[0],   &g->s[1],
                                  &g->s[2],   &g->d[0],   &g->d[1],   &g->d[2],   &g->pb[0],  &g->pb[1],
                                  &g->pb[2],  &g->pe[0],  &g->pe[1],  &g->pe[2]};
  void *args[4 + PM_GEOM_N_PARAMS];
  for (int i = 0; i < n_lead; i++) args[i] = lead[i];
  for (int i = 0; i < PM_GEOM_N_PARAMS; i++) args[n_lead + i] = geom[i];
  return count > 0 ? em_ops_launch_1d(a, kernel, (size_t)count, args) : EM_OK;
}

static long long outputs(const pm_geom *gm) { return gm->planes * pm_prod3(gm->col); }
static long long inputs(const pm_geom *gm) { return gm->planes * pm_prod3(gm->img); }

em_status em_pool_gpu_max(const em_op_args *a, int f64, const pm_geom *gm, const void *x, void *y) {
  void *lead[] = {&x, &y};
  return launch_geom(a, pick(f64, "em_pool_max_f32", "em_pool_max_f64"), outputs(gm), lead, 2, gm);
}

em_status em_pool_gpu_max_grad(const em_op_args *a, int f64, const pm_geom *gm, const void *x, const void *dy,
                               void *dx) {
  if (inputs(gm) <= 0) return EM_OK;
  void *arg = NULL;
  em_status s = em_ops_scratch(a, sizeof(long long) * (size_t)(outputs(gm) > 0 ? outputs(gm) : 1), &arg);
  if (s) return s;
  void *lead1[] = {&x, &arg}, *lead2[] = {&arg, &dy, &dx};
  s = launch_geom(a, pick(f64, "em_pool_argmax_f32", "em_pool_argmax_f64"), outputs(gm), lead1, 2, gm);
  if (!s) s = launch_geom(a, pick(f64, "em_pool_max_grad_f32", "em_pool_max_grad_f64"), inputs(gm), lead2, 3, gm);
  em_ops_scratch_free(a, arg);
  return s;
}

em_status em_pool_gpu_avg(const em_op_args *a, int f64, const pm_geom *gm, int count_include_pad, const void *x,
                          void *y) {
  void *lead[] = {&x, &y, &count_include_pad};
  return launch_geom(a, pick(f64, "em_pool_avg_f32", "em_pool_avg_f64"), outputs(gm), lead, 3, gm);
}

em_status em_pool_gpu_avg_grad(const em_op_args *a, int f64, const pm_geom *gm, int count_include_pad,
                               const void *dy, void *dx) {
  void *lead[] = {&dy, &dx, &count_include_pad};
  return launch_geom(a, pick(f64, "em_pool_avg_grad_f32", "em_pool_avg_grad_f64"), inputs(gm), lead, 3, gm);
}

em_status em_pool_gpu_global(const em_op_args *a, int f64, int is_max, int64_t planes, int64_t size, const void *x,
                             void *y) {
  long long np = planes, ns = size;
  void *args[] = {&x, &y, &np, &ns, &is_max};
  return em_ops_launch_1d(a, pick(f64, "em_pool_global_f32", "em_pool_global_f64"), (size_t)planes, args);
}

em_status em_pool_gpu_global_grad(const em_op_args *a, int f64, int is_max, int64_t planes, int64_t size,
                                  const void *x, const void *dy, void *dx) {
  long long np = planes, ns = size;
  if (planes <= 0 || size <= 0) return EM_OK;
  void *arg = NULL;
  em_status s = EM_OK;
  if (is_max) {
    s = em_ops_scratch(a, sizeof(long long) * (size_t)planes, &arg);
    void *args[] = {&x, &arg, &np, &ns};
    if (!s) s = em_ops_launch_1d(a, pick(f64, "em_pool_global_argmax_f32", "em_pool_global_argmax_f64"),
                                 (size_t)planes, args);
  }
  void *args[] = {&arg, &dy, &dx, &np, &ns, &is_max};
  if (!s) s = em_ops_launch_1d(a, pick(f64, "em_pool_global_grad_f32", "em_pool_global_grad_f64"),
                               (size_t)(planes * size), args);
  if (arg) em_ops_scratch_free(a, arg);
  return s;
}
