/* The convolution family's GPU work for ops/conv.c's gpu members
 * (conv_gpu.h): cuDNN in the fast mode where the device may use it and
 * cuDNN takes the geometry (runtime/cudnn.c), else kernels/conv.cu. */
#include "conv_gpu.h"

#include <stdio.h>

#include "cudnn.h"
#include "ember.h"
#include "error.h"
#include "gpu_glue.h"
#include "shape_gpu.h"

static const char *pick(em_dtype dt, const char *k32, const char *k64) { return dt == EM_F64 ? k64 : k32; }
static int is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

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

/* Whether cuDNN takes this computation (1), else 0 and why; g: its geometry for cuDNN. */
static int cudnn_takes(const em_op_args *a, em_dtype dt, const cm_geom *gm, em_cudnn_geom *g, char *why, size_t cap) {
  if (a->portable) {
    snprintf(why, cap, "portable mode: Ember's own kernels%s", is_half(dt) ? " on f32 copies, the CPU's bits" : "");
    return 0;
  }
  if (!em_cudnn_usable(a->dev, dt, why, cap)) return 0;
  int first;
  *g = (em_cudnn_geom){.dt = dt, .nd = spatial_axes(gm, &first), .n = gm->n, .ci = gm->ci,
                       .co = gm->co, .groups = gm->g};
  for (int i = 0; i < g->nd; i++) {
    int j = first + i;
    g->img[i] = gm->img[j], g->out[i] = gm->col[j], g->k[i] = gm->k[j], g->stride[i] = gm->s[j];
    g->dil[i] = gm->d[j], g->pad[i] = gm->pb[j];
  }
  char geom_why[160];
  if (!em_cudnn_takes(g, geom_why, sizeof geom_why)) {
    snprintf(why, cap, "cuDNN does not take it: %s", geom_why);
    return 0;
  }
  return 1;
}

/* Whether cuDNN runs this f32 or f64 computation (1), else 0 with the road reported
 * (portable mode reports none). */
static int via_cudnn(const em_op_args *a, em_dtype dt, const cm_geom *gm, em_cudnn_geom *g) {
  char why[200];
  if (cudnn_takes(a, dt, gm, g, why, sizeof why)) return 1;
  if (!a->portable) em_op_report_path(a, "Ember's kernels: %s", why);
  return 0;
}

int em_conv_gpu_half_takes(const em_op_args *a, const cm_geom *gm, char *why, size_t cap) {
  em_cudnn_geom g;
  return cudnn_takes(a, em_op_half_dtype(a), gm, &g, why, cap);
}

/* out [n, ch, P] = bias [ch] broadcast, an exact copy (the shape family's strided copy of
 * 2-byte elements), for cuDNN to add its result to (beta 1): a half convolution's bias. */
static em_status put_bias(const em_op_args *a, em_dtype dt, void *out, const void *bias, int64_t n, int64_t ch,
                          int64_t P) {
  const int64_t dims[3] = {n, ch, P}, ds[3] = {ch * P, P, 1}, ss[3] = {0, 1, 0};
  return em_shape_gpu_copy(a, out, bias, 3, dims, ds, ss, em_dtype_size(dt));
}

/* One direction through cuDNN. A bias (out [n, ch, P] += bias [ch]; cuDNN adds none): for f32
 * and f64 Ember's kernel after cuDNN; for f16 and bf16, which have no such kernel, the bias
 * put into out first and cuDNN's blend (beta 1) adding the convolution to it in f32, so the
 * sum is rounded once, as the f32 road rounds it. */
static em_status run_cudnn(const em_op_args *a, em_cudnn_dir dir, const em_cudnn_geom *g, const void *in0,
                           const void *in1, void *out, const void *bias, int64_t n, int64_t ch, int64_t P) {
  static const char *const names[3] = {"forward", "backward data", "backward filter"};
  const int half = is_half(g->dt);
  em_status s = EM_OK;
  if (bias && half && (s = put_bias(a, g->dt, out, bias, n, ch, P))) return s;
  int algo = -1;
  s = em_cudnn_conv_blend(a->dev, a->stream, dir, g, in0, in1, out, bias && half ? 1.0 : 0.0, a->tf32, &algo);
  if (s == EM_ERR_UNSUPPORTED) return s; /* declined: the caller takes another road (declined_here) */
  if (s) return em_fail_context(s, "op '%s'", a->def->name);
  if (half)
    em_op_report_path(a, "cuDNN, %s algorithm %d (%s, f32 accumulation, tensor-op math)", names[dir], algo,
                      em_dtype_name(g->dt));
  else
    em_op_report_path(a, "cuDNN, %s algorithm %d%s", names[dir], algo,
                      a->tf32 && g->dt == EM_F32 ? " (TF32 allowed)" : "");
  if (!bias || half) return EM_OK;
  long long nn = n, cc = ch, pp = P;
  void *args[] = {&out, &bias, &nn, &cc, &pp};
  return em_ops_launch_1d(a, pick(g->dt, "em_conv_add_bias_f32", "em_conv_add_bias_f64"), (size_t)(n * ch * P), args);
}

/* A half dtype reaching Ember's kernels: the op's gpu member asks em_conv_gpu_half_takes
 * first and takes the f32 road where it says no, so this is a bug. */
static em_status no_half_kernel(const em_op_args *a, em_dtype dt) {
  return em_op_fail(a, "internal: a %s convolution reached Ember's kernels, which have no %s form (the op should "
                    "have taken the f32 road: em_conv_gpu_half_takes)", em_dtype_name(dt), em_dtype_name(dt));
}

/* Whether the convolution continues on Ember's kernels after cuDNN's answer s: 1 when cuDNN
 * declined it at run time (EM_ERR_UNSUPPORTED: a case this cuDNN or this GPU does not support,
 * or no algorithm within the workspace limit; nothing was written) and dt has a kernel, with
 * the decline reported as the road. A half dtype has no kernel: the decline goes back to
 * ops/conv.c, which runs the op on f32 copies. */
static int declined_here(const em_op_args *a, em_dtype dt, em_status s) { return !is_half(dt) && em_ops_declined(a, s); }

em_status em_conv_gpu_fwd(const em_op_args *a, em_dtype dt, const cm_geom *gm, const void *x, const void *w,
                          const void *bias, void *y) {
  em_cudnn_geom g;
  if (via_cudnn(a, dt, gm, &g)) {
    em_status s = run_cudnn(a, EM_CUDNN_FWD, &g, x, w, y, bias, gm->n, gm->co, cm_prod3(gm->col));
    if (!declined_here(a, dt, s)) return s;
  }
  if (is_half(dt)) return no_half_kernel(a, dt);
  const void *p[4] = {x, w, bias, y};
  return launch_geom(a, pick(dt, "em_conv_fwd_f32", "em_conv_fwd_f64"), cm_fwd_count(gm), p, 4, gm);
}

em_status em_conv_gpu_adj(const em_op_args *a, em_dtype dt, const cm_geom *gm, const void *dy, const void *w,
                          const void *bias, void *dx) {
  em_cudnn_geom g;
  if (via_cudnn(a, dt, gm, &g)) {
    em_status s = run_cudnn(a, EM_CUDNN_BWD_DATA, &g, dy, w, dx, bias, gm->n, gm->ci, cm_prod3(gm->img));
    if (!declined_here(a, dt, s)) return s;
  }
  if (is_half(dt)) return no_half_kernel(a, dt);
  const void *p[4] = {dy, w, bias, dx};
  return launch_geom(a, pick(dt, "em_conv_adj_f32", "em_conv_adj_f64"), cm_adj_count(gm), p, 4, gm);
}

em_status em_conv_gpu_wgrad(const em_op_args *a, em_dtype dt, const cm_geom *gm, const void *img, const void *col,
                            void *dw) {
  em_cudnn_geom g;
  if (via_cudnn(a, dt, gm, &g)) {
    em_status s = run_cudnn(a, EM_CUDNN_BWD_FILTER, &g, img, col, dw, NULL, 0, 0, 0);
    if (!declined_here(a, dt, s)) return s;
  }
  if (is_half(dt)) return no_half_kernel(a, dt);
  const void *p[3] = {img, col, dw};
  return launch_geom(a, pick(dt, "em_conv_wgrad_f32", "em_conv_wgrad_f64"), cm_wgrad_count(gm), p, 3, gm);
}

em_status em_conv_gpu_bias_grad(const em_op_args *a, em_dtype dt, const void *dy, int64_t n, int64_t ch, int64_t P,
                                void *db) {
  long long nn = n, cc = ch, pp = P;
  void *args[] = {&dy, &db, &nn, &cc, &pp};
  return em_ops_launch_1d(a, pick(dt, "em_conv_bias_grad_f32", "em_conv_bias_grad_f64"), (size_t)ch, args);
}
