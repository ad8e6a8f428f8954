/* Launches of kernels/norm.cu for ops/norm.c's gpu members (norm_gpu.h). The
 * kernels mirror norm.c's CPU loops sum for sum (see the module's comment), so
 * the launches below follow norm.c's steps one to one. */
#include "norm_gpu.h"

#include <stdio.h>

#include "cudnn.h"
#include "cudnn_norm_pool.h"
#include "ember.h"
#include "error.h"
#include "gpu_glue.h"

/* kernel "<base>_f32" or "<base>_f64" over n items, 1-D grid-stride. */
static em_status launch(const em_op_args *a, const char *base, int f64, int64_t n, void **args) {
  char name[96];
  snprintf(name, sizeof name, "%s_%s", base, f64 ? "f64" : "f32");
  return n > 0 ? em_ops_launch_1d(a, name, (size_t)n, args) : EM_OK;
}

static em_status alloc_doubles(const em_op_args *a, int64_t n, double **out) {
  return em_ops_scratch(a, sizeof(double) * (size_t)(n > 0 ? n : 1), (void **)out);
}

static em_status stats_alloc(const em_op_args *a, int64_t groups, em_norm_gpu_stats *st) {
  em_status s = alloc_doubles(a, 3 * groups, &st->buf);
  if (s) {
    st->buf = NULL;
    return s;
  }
  st->mean = st->buf;
  st->var = st->buf + groups;
  st->invstd = st->buf + 2 * groups;
  return EM_OK;
}

void em_norm_gpu_stats_free(const em_op_args *a, em_norm_gpu_stats *st) {
  em_ops_scratch_free(a, st->buf);
  st->buf = NULL;
}

/* grp = fold of row over the rows of each group (divided by count when divide). */
static em_status fold(const em_op_args *a, const double *row, const em_norm_gpu_nc *g, int divide, double count,
                      double *grp) {
  long long n = g->n, c = g->c;
  int pc = g->per_channel;
  void *args[] = {&row, &n, &c, &pc, &divide, &count, &grp};
  int64_t groups = pc ? g->c : g->n * g->c;
  return groups > 0 ? em_ops_launch_1d(a, "em_norm_fold", (size_t)groups, args) : EM_OK;
}

em_status em_norm_gpu_batch_stats(const em_op_args *a, int f64, const void *x, const em_norm_gpu_nc *g, double eps,
                                  em_norm_gpu_stats *st) {
  int64_t rows = g->n * g->c, groups = g->per_channel ? g->c : rows;
  double count = (double)(g->per_channel ? g->n * g->inner : g->inner), *row;
  em_status s = stats_alloc(a, groups, st);
  if (s) return s;
  s = alloc_doubles(a, rows, &row);
  if (s) {
    em_norm_gpu_stats_free(a, st);
    return s;
  }
  long long nr = rows, n = g->n, c = g->c, inner = g->inner, ng = groups;
  int pc = g->per_channel;
  double *mean = st->mean, *var = st->var, *invstd = st->invstd;
  void *sums[] = {&x, &nr, &inner, &row};
  void *sqdev[] = {&x, &n, &c, &inner, &pc, &mean, &row};
  void *inv[] = {&var, &ng, &eps, &invstd};
  s = launch(a, "em_norm_row_sums", f64, rows, sums);
  if (!s) s = fold(a, row, g, 1, count, mean);
  if (!s) s = launch(a, "em_norm_row_sqdev", f64, rows, sqdev);
  if (!s) s = fold(a, row, g, 1, count, var);
  if (!s && groups > 0) s = em_ops_launch_1d(a, "em_norm_invstd", (size_t)groups, inv);
  em_ops_scratch_free(a, row);
  if (s) em_norm_gpu_stats_free(a, st);
  return s;
}

em_status em_norm_gpu_running_stats(const em_op_args *a, int f64, const void *rmean, const void *rvar, int64_t c,
                                    double eps, em_norm_gpu_stats *st) {
  em_status s = stats_alloc(a, c, st);
  if (s) return s;
  long long cc = c;
  void *args[] = {&rmean, &rvar, &cc, &eps, &st->mean, &st->var, &st->invstd};
  s = launch(a, "em_norm_running_stats", f64, c, args);
  if (s) em_norm_gpu_stats_free(a, st);
  return s;
}

em_status em_norm_gpu_nc_apply(const em_op_args *a, int f64, const void *x, void *y, const em_norm_gpu_nc *g,
                               const em_norm_gpu_stats *st, const void *scale, const void *bias) {
  long long n = g->n, c = g->c, inner = g->inner;
  int pc = g->per_channel;
  const double *mean = st->mean, *invstd = st->invstd;
  void *args[] = {&x, &y, &n, &c, &inner, &pc, &mean, &invstd, &scale, &bias};
  return launch(a, "em_norm_nc_apply", f64, g->n * g->c * g->inner, args);
}

em_status em_norm_gpu_bn_update(const em_op_args *a, int f64, void *rmean, void *rvar, const em_norm_gpu_stats *st,
                                int64_t c, double momentum, double unbias) {
  long long cc = c;
  const double *mean = st->mean, *var = st->var;
  void *args[] = {&rmean, &rvar, &mean, &var, &cc, &momentum, &unbias};
  return launch(a, "em_norm_bn_update", f64, c, args);
}

em_status em_norm_gpu_nc_backward(const em_op_args *a, int f64, const void *x, const void *scale, const void *dy,
                                  const em_norm_gpu_nc *g, const em_norm_gpu_stats *st, int through, void *dx,
                                  void *dscale, void *dbias) {
  int64_t rows = g->n * g->c, groups = g->per_channel ? g->c : rows;
  double count = (double)(g->per_channel ? g->n * g->inner : g->inner), *buf;
  em_status s = alloc_doubles(a, 2 * rows + 2 * groups, &buf);
  if (s) return s;
  double *sdy = buf, *sdyx = buf + rows, *gdy = sdyx + rows, *gdyx = gdy + groups;
  long long n = g->n, c = g->c, inner = g->inner;
  int pc = g->per_channel;
  const double *mean = st->mean, *invstd = st->invstd;
  void *sums[] = {&x, &dy, &n, &c, &inner, &pc, &mean, &sdy, &sdyx};
  void *grad[] = {&x, &dy, &dx, &n, &c, &inner, &pc, &mean, &invstd, &scale, &gdy, &gdyx, &through, &count};
  void *params[] = {&sdy, &sdyx, &invstd, &n, &c, &pc, &dscale, &dbias};
  s = launch(a, "em_norm_row_grad_sums", f64, rows, sums);
  if (!s) s = fold(a, sdy, g, 0, 0.0, gdy);
  if (!s) s = fold(a, sdyx, g, 0, 0.0, gdyx);
  if (!s) s = launch(a, "em_norm_nc_grad", f64, rows * g->inner, grad);
  if (!s) s = launch(a, "em_norm_nc_param_grads", f64, g->c, params);
  em_ops_scratch_free(a, buf);
  return s;
}

/* Layer norm's mean and invstd per row of [rows, m]: the batch statistics of rows (1, rows) of m. */
static em_status ln_stats(const em_op_args *a, int f64, const void *x, int64_t rows, int64_t m, double eps,
                          em_norm_gpu_stats *st) {
  em_norm_gpu_nc g = {1, rows, m, 0};
  return em_norm_gpu_batch_stats(a, f64, x, &g, eps, st);
}

em_status em_norm_gpu_ln(const em_op_args *a, int f64, const void *x, const void *scale, const void *bias, void *y,
                         int64_t rows, int64_t m, double eps) {
  em_norm_gpu_stats st;
  em_status s = ln_stats(a, f64, x, rows, m, eps, &st);
  if (s) return s;
  long long nr = rows, mm = m;
  int has_bias = bias != NULL;
  const void *b = has_bias ? bias : scale; /* a valid device pointer either way; unread without bias */
  void *args[] = {&x, &scale, &b, &has_bias, &y, &nr, &mm, &st.mean, &st.invstd};
  s = launch(a, "em_norm_ln_apply", f64, rows * m, args);
  em_norm_gpu_stats_free(a, &st);
  return s;
}

em_status em_norm_gpu_ln_grad(const em_op_args *a, int f64, const void *x, const void *scale, const void *dy,
                              void *dx, void *dscale, void *dbias, int64_t rows, int64_t m, double eps) {
  em_norm_gpu_stats st;
  em_status s = ln_stats(a, f64, x, rows, m, eps, &st);
  if (s) return s;
  double *sums;
  s = alloc_doubles(a, 2 * rows, &sums);
  if (s) {
    em_norm_gpu_stats_free(a, &st);
    return s;
  }
  double *s1 = sums, *s2 = sums + rows;
  long long nr = rows, mm = m;
  void *a1[] = {&x, &scale, &dy, &nr, &mm, &st.mean, &st.invstd, &s1, &s2};
  void *a2[] = {&x, &scale, &dy, &dx, &nr, &mm, &st.mean, &st.invstd, &s1, &s2};
  void *a3[] = {&x, &dy, &dscale, &dbias, &nr, &mm, &st.mean, &st.invstd};
  s = launch(a, "em_norm_ln_grad_sums", f64, rows, a1);
  if (!s) s = launch(a, "em_norm_ln_grad", f64, rows * m, a2);
  if (!s) s = launch(a, "em_norm_ln_param_grads", f64, m, a3);
  em_ops_scratch_free(a, sums);
  em_norm_gpu_stats_free(a, &st);
  return s;
}

em_status em_norm_gpu_lrn(const em_op_args *a, int f64, const void *x, void *y, int64_t n, int64_t c, int64_t inner,
                          int64_t half, double alpha_n, double bias, double beta) {
  long long nn = n, cc = c, in = inner, h = half;
  void *args[] = {&x, &y, &nn, &cc, &in, &h, &alpha_n, &bias, &beta};
  return launch(a, "em_norm_lrn", f64, n * c * inner, args);
}

em_status em_norm_gpu_lrn_grad(const em_op_args *a, int f64, const void *x, const void *dy, void *dx, int64_t n,
                               int64_t c, int64_t inner, int64_t half, double alpha_n, double bias, double beta) {
  int64_t total = n * c * inner;
  double *t;
  em_status s = alloc_doubles(a, total, &t);
  if (s) return s;
  long long nn = n, cc = c, in = inner, h = half;
  void *a1[] = {&x, &dy, &dx, &t, &nn, &cc, &in, &h, &alpha_n, &bias, &beta};
  void *a2[] = {&x, &t, &dx, &nn, &cc, &in, &h, &alpha_n, &beta};
  s = launch(a, "em_norm_lrn_grad1", f64, total, a1);
  if (!s) s = launch(a, "em_norm_lrn_grad2", f64, total, a2);
  em_ops_scratch_free(a, t);
  return s;
}

/* The step comes from device memory: the executor's copy (a->step_dev), else
 * (an op run outside an executor) a scratch upload of a->step, so eager runs,
 * captures and replays all take the one kernel. */
em_status em_norm_gpu_dropout(const em_op_args *a, int f64, const void *x, void *y, int64_t n, uint64_t seed,
                              uint64_t node, uint64_t thr, double scale) {
  long long nn = n, sd = (long long)seed, nd = (long long)node, t = (long long)thr;
  if (n <= 0) return EM_OK;
  const void *step = a->step_dev;
  void *up = NULL;
  if (!step) {
    uint64_t v = a->step;
    em_status s = em_ops_kernel_ready(a, f64 ? "em_norm_dropout_f64" : "em_norm_dropout_f32");
    if (!s) s = em_ops_scratch_upload(a, &v, sizeof v, &up);
    if (s) return s;
    step = up;
  }
  void *args[] = {&x, &y, &nn, &sd, &nd, &step, &t, &scale};
  em_status s = launch(a, "em_norm_dropout", f64, n, args);
  em_ops_scratch_free(a, up);
  return s;
}

/* ------------------------------------------------------------- cuDNN --- */

/* Whether cuDNN runs this batch normalisation (1, *cg its problem), else 0 with the road
 * reported (portable mode reports none). */
static int bn_via_cudnn(const em_op_args *a, int f64, const em_norm_gpu_nc *g, double eps, em_cudnn_bn *cg) {
  if (a->portable) return 0;
  char why[256], geom[200];
  em_dtype dt = f64 ? EM_F64 : EM_F32;
  *cg = (em_cudnn_bn){.dt = dt, .n = g->n, .c = g->c, .inner = g->inner, .eps = eps};
  if (!em_cudnn_usable(a->dev, dt, why, sizeof why)) {
    em_op_report_path(a, "Ember's kernels: %s", why);
    return 0;
  }
  if (!em_cudnn_bn_takes(cg, geom, sizeof geom)) {
    em_op_report_path(a, "Ember's kernels: cuDNN does not take it: %s", geom);
    return 0;
  }
  return 1;
}

int em_norm_gpu_bn_cudnn(const em_op_args *a, int f64, const em_norm_gpu_nc *g, double eps, double momentum,
                         const void *x, void *y, const void *scale, const void *bias, void *rmean, void *rvar,
                         em_status *status) {
  em_cudnn_bn cg;
  if (!bn_via_cudnn(a, f64, g, eps, &cg)) return 0;
  /* ONNX's momentum weighs the old running value, cuDNN's exponentialAverageFactor the batch's */
  em_status s = a->training ? em_cudnn_bn_training(a->dev, a->stream, &cg, 1.0 - momentum, x, y, scale, bias, rmean,
                                                   rvar)
                            : em_cudnn_bn_inference(a->dev, a->stream, &cg, x, y, scale, bias, rmean, rvar);
  if (em_ops_declined(a, s)) return 0; /* nothing written: Ember's kernels */
  if (s) s = em_fail_context(s, "op '%s'", a->def->name);
  else em_op_report_path(a, "cuDNN %s, batch normalization (%s)", em_cudnn_version_text(),
                         a->training ? "training" : "inference");
  *status = s;
  return 1;
}

int em_norm_gpu_bn_grad_cudnn(const em_op_args *a, int f64, const em_norm_gpu_nc *g, double eps, const void *x,
                              const void *scale, const void *dy, void *dx, void *dscale, void *dbias,
                              em_status *status) {
  if (!a->training) {
    /* the affine map of the running statistics: cudnnBatchNormalizationBackward has no such mode */
    if (!a->portable)
      em_op_report_path(a, "Ember's kernels: an inference-mode gradient (cuDNN's batch normalization backward "
                           "differentiates through the batch statistics only)");
    return 0;
  }
  em_cudnn_bn cg;
  if (!bn_via_cudnn(a, f64, g, eps, &cg)) return 0;
  em_status s = em_cudnn_bn_backward(a->dev, a->stream, &cg, x, dy, scale, dx, dscale, dbias);
  if (em_ops_declined(a, s)) return 0; /* nothing written: Ember's kernels */
  if (s) s = em_fail_context(s, "op '%s'", a->def->name);
  else em_op_report_path(a, "cuDNN %s, batch normalization backward (training)", em_cudnn_version_text());
  *status = s;
  return 1;
}
