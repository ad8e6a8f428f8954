/* Launches of kernels/pool.cu for ops/pool.c's gpu members (pool_gpu.h), and in the fast mode
 * the window pools through cuDNN (runtime/cudnn_norm_pool.c) where the device may use it and
 * cuDNN's pooling descriptor expresses the geometry. */
#include "pool_gpu.h"

#include <stdio.h>

#include "cudnn.h"
#include "cudnn_norm_pool.h"
#include "ember.h"
#include "error.h"
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

/* ------------------------------------------------------------- cuDNN --- */

/* Whether cuDNN runs this window pool (1, *p its problem), else 0 with the road reported
 * (portable mode reports none). x is input ix of the op (pool.c: input 0 of max_pool,
 * average_pool and _max_pool_grad, input 1 of _avg_pool_grad): its N and C, and its rank for
 * the spatial axes, which pm_geom right-aligns in three. */
static int via_cudnn(const em_op_args *a, int f64, const pm_geom *gm, int ix, em_cudnn_pool_mode mode,
                     em_cudnn_pool *p) {
  if (a->portable) return 0;
  char why[256], geom[200];
  em_dtype dt = f64 ? EM_F64 : EM_F32;
  if (!em_cudnn_usable(a->dev, dt, why, sizeof why)) {
    em_op_report_path(a, "Ember's kernels: %s", why);
    return 0;
  }
  const em_shape *x = &a->in[ix];
  int nd = x->ndim - 2;
  *p = (em_cudnn_pool){.dt = dt, .mode = mode, .nd = nd, .n = x->dims[0], .c = x->dims[1]};
  for (int i = 0; i < nd && i < 3; i++) {
    int j = 3 - nd + i;
    p->img[i] = gm->img[j], p->out[i] = gm->col[j], p->k[i] = gm->k[j], p->stride[i] = gm->s[j];
    p->dil[i] = gm->d[j], p->pb[i] = gm->pb[j], p->pe[i] = gm->pe[j];
  }
  if (!em_cudnn_pool_takes(p, geom, sizeof geom)) {
    em_op_report_path(a, "Ember's kernels: cuDNN does not take it: %s", geom);
    return 0;
  }
  return 1;
}

static const char *pool_kind(em_cudnn_pool_mode m) { return m == EM_CUDNN_POOL_MAX ? "max" : "average"; }

static em_status cudnn_forward(const em_op_args *a, const em_cudnn_pool *p, const void *x, void *y) {
  em_status s = em_cudnn_pool_forward(a->dev, a->stream, p, x, y);
  if (s == EM_ERR_UNSUPPORTED) return s; /* declined: the caller takes Ember's kernels */
  if (s) return em_fail_context(s, "op '%s'", a->def->name);
  em_op_report_path(a, "cuDNN %s, %s pooling (%s)", em_cudnn_version_text(), pool_kind(p->mode),
                    em_cudnn_pool_mode_name(p->mode));
  return EM_OK;
}

/* cudnnPoolingBackward takes the forward's y, which the gradient ops do not have: recomputed
 * into scratch by cuDNN's own forward (also for averages, whose y cuDNN's reference does not
 * declare unread). */
static em_status cudnn_backward(const em_op_args *a, const em_cudnn_pool *p, const void *x, const void *dy,
                                void *dx) {
  size_t bytes = (size_t)p->n * (size_t)p->c * em_dtype_size(p->dt);
  for (int i = 0; i < p->nd; i++) bytes *= (size_t)p->out[i];
  void *y = NULL;
  em_status s = em_ops_scratch(a, bytes, &y);
  if (s) return s;
  s = em_cudnn_pool_backward(a->dev, a->stream, p, x, dy, y, dx);
  em_ops_scratch_free(a, y); /* reused only by work issued after this, as every scratch */
  if (s == EM_ERR_UNSUPPORTED) return s; /* declined: the caller takes Ember's kernels */
  if (s) return em_fail_context(s, "op '%s'", a->def->name);
  em_op_report_path(a, "cuDNN %s, %s pooling backward (%s; y recomputed by cudnnPoolingForward)",
                    em_cudnn_version_text(), pool_kind(p->mode), em_cudnn_pool_mode_name(p->mode));
  return EM_OK;
}

static em_cudnn_pool_mode avg_mode(int count_include_pad) {
  return count_include_pad ? EM_CUDNN_POOL_AVG_INCLUDE : EM_CUDNN_POOL_AVG_EXCLUDE;
}

/* ------------------------------------------------------ Ember's kernels --- */

em_status em_pool_gpu_max(const em_op_args *a, int f64, const pm_geom *gm, const void *x, void *y) {
  em_cudnn_pool p;
  em_status s;
  if (via_cudnn(a, f64, gm, 0, EM_CUDNN_POOL_MAX, &p) && !em_ops_declined(a, s = cudnn_forward(a, &p, x, y))) return s;
  void *lead[] = {&x, &y};
  return launch_geom(a, pick(f64, "em_pool_max_f32", "em_pool_max_f64"), outputs(gm), lead, 2, gm);
}

em_status em_pool_gpu_max_grad(const em_op_args *a, int f64, const pm_geom *gm, const void *x, const void *dy,
                               void *dx) {
  em_cudnn_pool p;
  em_status s;
  if (via_cudnn(a, f64, gm, 0, EM_CUDNN_POOL_MAX, &p) && !em_ops_declined(a, s = cudnn_backward(a, &p, x, dy, dx)))
    return s;
  if (inputs(gm) <= 0) return EM_OK;
  void *arg = NULL;
  s = em_ops_scratch(a, sizeof(long long) * (size_t)(outputs(gm) > 0 ? outputs(gm) : 1), &arg);
  if (s) return s;
  void *lead1[] = {&x, &arg}, *lead2[] = {&arg, &dy, &dx};
  s = launch_geom(a, pick(f64, "em_pool_argmax_f32", "em_pool_argmax_f64"), outputs(gm), lead1, 2, gm);
  if (!s) s = launch_geom(a, pick(f64, "em_pool_max_grad_f32", "em_pool_max_grad_f64"), inputs(gm), lead2, 3, gm);
  em_ops_scratch_free(a, arg);
  return s;
}

em_status em_pool_gpu_avg(const em_op_args *a, int f64, const pm_geom *gm, int count_include_pad, const void *x,
                          void *y) {
  em_cudnn_pool p;
  em_status s;
  if (via_cudnn(a, f64, gm, 0, avg_mode(count_include_pad), &p) && !em_ops_declined(a, s = cudnn_forward(a, &p, x, y)))
    return s;
  void *lead[] = {&x, &y, &count_include_pad};
  return launch_geom(a, pick(f64, "em_pool_avg_f32", "em_pool_avg_f64"), outputs(gm), lead, 3, gm);
}

em_status em_pool_gpu_avg_grad(const em_op_args *a, int f64, const pm_geom *gm, int count_include_pad,
                               const void *x, const void *dy, void *dx) {
  em_cudnn_pool p;
  em_status s;
  if (via_cudnn(a, f64, gm, 1, avg_mode(count_include_pad), &p) &&
      !em_ops_declined(a, s = cudnn_backward(a, &p, x, dy, dx)))
    return s;
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
