/* Launches of kernels/loss.cu for ops/loss.c's gpu members (loss_gpu.h). */
#include "loss_gpu.h"

#include "ember.h"
#include "gpu_glue.h"
#include "../kernels/loss_math.h"

#define LK_THREADS 256 /* kernels/loss.cu's block */

static const char *pick(int f64, const char *k32, const char *k64) { return f64 ? k64 : k32; }

/* A row kernel over n_rows rows of c elements: L lanes per row, 256 / L rows per block. */
static em_status launch_rows(const em_op_args *a, const char *kernel, int64_t n_rows, int L, void **args) {
  if (n_rows <= 0) return EM_OK;
  int64_t rpb = LK_THREADS / L, blocks = (n_rows + rpb - 1) / rpb;
  if (blocks > 65535) blocks = 65535; /* the kernels loop over the rest */
  return em_ops_launch(a, kernel, (em_dim3){(unsigned)blocks, 1, 1}, (em_dim3){LK_THREADS, 1, 1}, 0, args);
}

em_status em_loss_gpu_softmax(const em_op_args *a, int f64, const void *x, void *y, int64_t n_rows, int64_t c,
                              int64_t inner, int log_out) {
  long long nr = n_rows, cc = c, in = inner;
  int L = lm_lanes(c);
  void *args[] = {&x, &y, &nr, &cc, &in, &L, &log_out};
  return launch_rows(a, pick(f64, "em_loss_softmax_f32", "em_loss_softmax_f64"), n_rows, L, args);
}

em_status em_loss_gpu_softmax_grad(const em_op_args *a, int f64, const void *y, const void *dy, void *dx,
                                   int64_t n_rows, int64_t c, int64_t inner, int log_out) {
  long long nr = n_rows, cc = c, in = inner;
  int L = lm_lanes(c);
  void *args[] = {&y, &dy, &dx, &nr, &cc, &in, &L, &log_out};
  return launch_rows(a, pick(f64, "em_loss_softmax_grad_f32", "em_loss_softmax_grad_f64"), n_rows, L, args);
}

em_status em_loss_gpu_ce(const em_op_args *a, int f64, const void *x, const em_loss_gpu_labels *t, void *out,
                         int64_t n_rows, int64_t c, int64_t inner) {
  long long nr = n_rows, cc = c, in = inner, ig = t->ignore;
  int L = lm_lanes(c), sparse = t->sparse, is64 = t->is64, has = t->has_ignore;
  const void *td = t->data;
  void *args[] = {&x, &td, &sparse, &is64, &has, &ig, &out, &nr, &cc, &in, &L};
  return launch_rows(a, pick(f64, "em_loss_ce_f32", "em_loss_ce_f64"), n_rows, L, args);
}

em_status em_loss_gpu_ce_grad(const em_op_args *a, int f64, const void *x, const em_loss_gpu_labels *t,
                              const void *dy, void *d, int64_t n_rows, int64_t c, int64_t inner, int which) {
  long long nr = n_rows, cc = c, in = inner, ig = t->ignore;
  int L = lm_lanes(c), sparse = t->sparse, is64 = t->is64, has = t->has_ignore;
  const void *td = t->data;
  void *args[] = {&x, &td, &sparse, &is64, &has, &ig, &dy, &d, &nr, &cc, &in, &L, &which};
  return launch_rows(a, pick(f64, "em_loss_ce_grad_f32", "em_loss_ce_grad_f64"), n_rows, L, args);
}

em_status em_loss_gpu_clserr(const em_op_args *a, int f64, const void *x, const em_loss_gpu_labels *t, void *out,
                             int64_t n_rows, int64_t c, int64_t inner, int64_t top) {
  long long nr = n_rows, cc = c, in = inner, ig = t->ignore, tp = top;
  int sparse = t->sparse, is64 = t->is64, has = t->has_ignore;
  const void *td = t->data;
  void *args[] = {&x, &td, &sparse, &is64, &has, &ig, &out, &nr, &cc, &in, &tp};
  return em_ops_launch_1d(a, pick(f64, "em_loss_clserr_f32", "em_loss_clserr_f64"), (size_t)n_rows, args);
}

em_status em_loss_gpu_bce(const em_op_args *a, int f64, const void *p, const void *t, void *y, int64_t n) {
  long long nn = n;
  void *args[] = {&p, &t, &y, &nn};
  return em_ops_launch_1d(a, pick(f64, "em_loss_bce_f32", "em_loss_bce_f64"), (size_t)n, args);
}

em_status em_loss_gpu_bce_grad(const em_op_args *a, int f64, const void *p, const void *t, const void *dy, void *d,
                               int64_t n, int which) {
  long long nn = n;
  void *args[] = {&p, &t, &dy, &d, &nn, &which};
  return em_ops_launch_1d(a, pick(f64, "em_loss_bce_grad_f32", "em_loss_bce_grad_f64"), (size_t)n, args);
}

em_status em_loss_gpu_sqerr(const em_op_args *a, int f64, const void *x, const void *y, void *out, int64_t n,
                            int64_t per) {
  long long nn = n, pp = per;
  int L = lm_lanes(per);
  void *args[] = {&x, &y, &out, &nn, &pp, &L};
  return launch_rows(a, pick(f64, "em_loss_sqerr_f32", "em_loss_sqerr_f64"), n, L, args);
}

em_status em_loss_gpu_sqerr_grad(const em_op_args *a, int f64, const void *x, const void *y, const void *dy, void *d,
                                 int64_t total, int64_t per, double sign) {
  long long tt = total, pp = per;
  void *args[] = {&x, &y, &dy, &d, &tt, &pp, &sign};
  return em_ops_launch_1d(a, pick(f64, "em_loss_sqerr_grad_f32", "em_loss_sqerr_grad_f64"), (size_t)total, args);
}

/* Runs a one-block check kernel writing the first bad position to scratch, and reads it back. */
static em_status first_bad(const em_op_args *a, const char *kernel, void **args, int n_args, int64_t *bad) {
  void *dev_bad = NULL;
  long long got = -1;
  em_status s = em_ops_scratch(a, sizeof got, &dev_bad);
  if (s) return s;
  args[n_args - 1] = &dev_bad;
  s = em_ops_launch(a, kernel, (em_dim3){1, 1, 1}, (em_dim3){LK_THREADS, 1, 1}, 0, args);
  if (!s) s = em_memcpy_d2h(a->dev, &got, dev_bad, sizeof got, a->stream);
  if (!s) s = em_stream_sync(a->dev, a->stream);
  em_ops_scratch_free(a, dev_bad);
  *bad = got;
  return s;
}

em_status em_loss_gpu_check_labels(const em_op_args *a, const em_loss_gpu_labels *t, int64_t n, int64_t c,
                                   int64_t *bad, int64_t *value) {
  *bad = -1;
  if (n <= 0) return EM_OK;
  long long nn = n, cc = c, ig = t->ignore;
  int is64 = t->is64, has = t->has_ignore;
  const void *lab = t->data;
  void *args[] = {&lab, &is64, &nn, &cc, &has, &ig, NULL};
  em_status s = first_bad(a, "em_loss_check_labels", args, 7, bad);
  if (s || *bad < 0) return s;
  size_t es = is64 ? 8 : 4;
  long long v64 = 0;
  int v32 = 0;
  s = em_memcpy_d2h(a->dev, is64 ? (void *)&v64 : (void *)&v32, (const char *)lab + (size_t)*bad * es, es, a->stream);
  if (!s) s = em_stream_sync(a->dev, a->stream);
  *value = is64 ? v64 : v32;
  return s;
}

em_status em_loss_gpu_check_prob(const em_op_args *a, int f64, const void *p, int64_t n, int64_t *bad,
                                 double *value) {
  *bad = -1;
  if (n <= 0) return EM_OK;
  long long nn = n;
  void *args[] = {&p, &nn, NULL};
  em_status s = first_bad(a, pick(f64, "em_loss_check_prob_f32", "em_loss_check_prob_f64"), args, 3, bad);
  if (s || *bad < 0) return s;
  double v64 = 0;
  float v32 = 0;
  size_t es = f64 ? 8 : 4;
  s = em_memcpy_d2h(a->dev, f64 ? (void *)&v64 : (void *)&v32, (const char *)p + (size_t)*bad * es, es, a->stream);
  if (!s) s = em_stream_sync(a->dev, a->stream);
  *value = f64 ? v64 : v32;
  return s;
}
