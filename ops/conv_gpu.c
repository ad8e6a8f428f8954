/* Launches of kernels/conv.cu for ops/conv.c's gpu members (conv_gpu.h). */
#include "conv_gpu.h"

#include "ember.h"
#include "gpu_glue.h"

static const char *pick(int f64, const char *k32, const char *k64) { return f64 ? k64 : k32; }

/* Pointers to the geometry's 22 scalars, in CM_GEOM_PARAMS's order, at args[0..21]. */
static void geom_args(const cm_geom *gm, void **args) {
  cm_geom *g = (cm_geom *)gm; /* the launch only reads them */
  void *p[CM_GEOM_N_PARAMS] = {&g->n,      &g->ci,     &g->co,     &g->g,     &g->img[0], &g->img[1],
                               &g->img[2], &g->col[0], &g->col[1], &g->col[2], &g->k[0],  &g->k[1],
                               &g->k[2],   &g->s[0],   &g->s[1],   &g->s[2],   &g->d[0],  &g->d[1],
                               &g->d[2],   &g->pb[0],  &g->pb[1],  &g->pb[2]};
  for (int i = 0; i < CM_GEOM_N_PARAMS; i++) args[i] = p[i];
}

/* A kernel taking three pointers (in, in, out: wgrad) or four (in, in, bias, out) and the geometry. */
static em_status launch_geom(const em_op_args *a, const char *kernel, long long count, const void **ptrs, int n_ptrs,
                             const cm_geom *gm) {
  void *args[4 + CM_GEOM_N_PARAMS];
  for (int i = 0; i < n_ptrs; i++) args[i] = (void *)&ptrs[i];
  geom_args(gm, args + n_ptrs);
  return count > 0 ? em_ops_launch_1d(a, kernel, (size_t)count, args) : EM_OK;
}

em_status em_conv_gpu_fwd(const em_op_args *a, int f64, const cm_geom *gm, const void *x, const void *w,
                          const void *bias, void *y) {
  const void *p[4] = {x, w, bias, y};
  return launch_geom(a, pick(f64, "em_conv_fwd_f32", "em_conv_fwd_f64"), cm_fwd_count(gm), p, 4, gm);
}

em_status em_conv_gpu_adj(const em_op_args *a, int f64, const cm_geom *gm, const void *dy, const void *w,
                          const void *bias, void *dx) {
  const void *p[4] = {dy, w, bias, dx};
  return launch_geom(a, pick(f64, "em_conv_adj_f32", "em_conv_adj_f64"), cm_adj_count(gm), p, 4, gm);
}

em_status em_conv_gpu_wgrad(const em_op_args *a, int f64, const cm_geom *gm, const void *img, const void *col,
                            void *dw) {
  const void *p[3] = {img, col, dw};
  return launch_geom(a, pick(f64, "em_conv_wgrad_f32", "em_conv_wgrad_f64"), cm_wgrad_count(gm), p, 3, gm);
}

em_status em_conv_gpu_bias_grad(const em_op_args *a, int f64, const void *dy, int64_t n, int64_t ch, int64_t P,
                                void *db) {
  long long nn = n, cc = ch, pp = P;
  void *args[] = {&dy, &db, &nn, &cc, &pp};
  return em_ops_launch_1d(a, pick(f64, "em_conv_bias_grad_f32", "em_conv_bias_grad_f64"), (size_t)ch, args);
}
