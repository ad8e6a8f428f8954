/* The convolution family's GPU work for ops/conv.c's gpu members
 * (conv_gpu.h): cuDNN in the fast mode where the device may use it and
 * cuDNN takes the geometry (runtime/cudnn.c), else kernels/conv.cu. */
#include "conv_gpu.h"

#include <stdio.h>

#include "cudnn.h"
#include "ember.h"
#include "error.h"
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

/* ------------------------------------------------------------- cuDNN --- */

/* The spatial axes a geometry uses: cm_geom right-aligns them and fills the unused leading
 * ones with size 1 and no padding, so those are dropped from the front (a 2-D problem gets
 * 4-D descriptors, not 5-D ones). A used axis of size 1 with padding keeps its padding: its
 * one output may read nothing but padding. *first: the index of the first axis kept. */
static int spatial_axes(const cm_geom *gm, int *first) {
  int f = 0;
  while (f < 2 && gm->img[f] == 1 && gm->col[f] == 1 && gm->k[f] == 1 && gm->pb[f] == 0) f++;
  *first = f;
  return 3 - f;
}

/* Whether cuDNN runs this computation (1), else 0 with the road reported. */
static int via_cudnn(const em_op_args *a, int f64, const cm_geom *gm, em_cudnn_geom *g) {
  char why[200];
  if (a->portable) return 0;
  if (!em_cudnn_usable(a->dev, f64 ? EM_F64 : EM_F32, why, sizeof why)) {
    em_op_report_path(a, "Ember's kernels: %s", why);
    return 0;
  }
  int first;
  *g = (em_cudnn_geom){.dt = f64 ? EM_F64 : EM_F32, .nd = spatial_axes(gm, &first), .n = gm->n, .ci = gm->ci,
                       .co = gm->co, .groups = gm->g};
  for (int i = 0; i < g->nd; i++) {
    int j = first + i;
    g->img[i] = gm->img[j], g->out[i] = gm->col[j], g->k[i] = gm->k[j], g->stride[i] = gm->s[j];
    g->dil[i] = gm->d[j], g->pad[i] = gm->pb[j];
  }
  if (!em_cudnn_takes(g, why, sizeof why)) {
    em_op_report_path(a, "Ember's kernels: cuDNN does not take it: %s", why);
    return 0;
  }
  return 1;
}

static em_status run_cudnn(const em_op_args *a, em_cudnn_dir dir, const em_cudnn_geom *g, const void *in0,
                           const void *in1, void *out) {
  static const char *const names[3] = {"forward", "backward data", "backward filter"};
  int algo = -1;
  em_status s = em_cudnn_conv(a->dev, a->stream, dir, g, in0, in1, out, a->tf32, &algo);
  if (s) return em_fail_context(s, "op '%s'", a->def->name);
  em_op_report_path(a, "cuDNN, %s algorithm %d%s", names[dir], algo, a->tf32 && g->dt == EM_F32 ? " (TF32 allowed)" : "");
  return EM_OK;
}

/* out [n, ch, P] += bias [ch] after cuDNN (which adds none). */
static em_status add_bias(const em_op_args *a, int f64, void *out, const void *bias, int64_t n, int64_t ch, int64_t P) {
  if (!bias) return EM_OK;
  long long nn = n, cc = ch, pp = P;
  void *args[] = {&out, &bias, &nn, &cc, &pp};
  return em_ops_launch_1d(a, pick(f64, "em_conv_add_bias_f32", "em_conv_add_bias_f64"), (size_t)(n * ch * P), args);
}

em_status em_conv_gpu_fwd(const em_op_args *a, int f64, const cm_geom *gm, const void *x, const void *w,
                          const void *bias, void *y) {
  em_cudnn_geom g;
  if (via_cudnn(a, f64, gm, &g)) {
    em_status s = run_cudnn(a, EM_CUDNN_FWD, &g, x, w, y);
    return s ? s : add_bias(a, f64, y, bias, gm->n, gm->co, cm_prod3(gm->col));
  }
  const void *p[4] = {x, w, bias, y};
  return launch_geom(a, pick(f64, "em_conv_fwd_f32", "em_conv_fwd_f64"), cm_fwd_count(gm), p, 4, gm);
}

em_status em_conv_gpu_adj(const em_op_args *a, int f64, const cm_geom *gm, const void *dy, const void *w,
                          const void *bias, void *dx) {
  em_cudnn_geom g;
  if (via_cudnn(a, f64, gm, &g)) {
    em_status s = run_cudnn(a, EM_CUDNN_BWD_DATA, &g, dy, w, dx);
    return s ? s : add_bias(a, f64, dx, bias, gm->n, gm->ci, cm_prod3(gm->img));
  }
  const void *p[4] = {dy, w, bias, dx};
  return launch_geom(a, pick(f64, "em_conv_adj_f32", "em_conv_adj_f64"), cm_adj_count(gm), p, 4, gm);
}

em_status em_conv_gpu_wgrad(const em_op_args *a, int f64, const cm_geom *gm, const void *img, const void *col,
                            void *dw) {
  em_cudnn_geom g;
  if (via_cudnn(a, f64, gm, &g)) return run_cudnn(a, EM_CUDNN_BWD_FILTER, &g, img, col, dw);
  const void *p[3] = {img, col, dw};
  return launch_geom(a, pick(f64, "em_conv_wgrad_f32", "em_conv_wgrad_f64"), cm_wgrad_count(gm), p, 3, gm);
}

em_status em_conv_gpu_bias_grad(const em_op_args *a, int f64, const void *dy, int64_t n, int64_t ch, int64_t P,
                                void *db) {
  long long nn = n, cc = ch, pp = P;
  void *args[] = {&dy, &db, &nn, &cc, &pp};
  return em_ops_launch_1d(a, pick(f64, "em_conv_bias_grad_f32", "em_conv_bias_grad_f64"), (size_t)ch, args);
}
