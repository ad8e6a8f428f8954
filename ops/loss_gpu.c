/* Launches of kernels/loss.cu for ops/loss.c's gpu members (loss_gpu.h). */
#include "loss_gpu.h"

#include <string.h>

#include "ember.h"
#include "gpu_glue.h"
#include "devcheck.h"
#include "error.h"
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

/* ------------------------------------------------------------ checks --- */

#define CHECK_MAX_IN 3 /* inputs of the checked ops (_cross_entropy_grad has 3) */

/* What a deferred check keeps for its message (runtime/devcheck.h payload). */
typedef struct check_ctx {
  em_loss_gpu_label_fail label_fail; /* one of the two is set */
  em_loss_gpu_prob_fail prob_fail;
  const em_op_def *def;              /* the op table is static: the pointer outlives the run */
  int node, n_in;
  uint64_t step;
  int captured; /* armed in a CUDA graph's capture: the check fails in some later replay */
  int64_t c;
  em_shape in[CHECK_MAX_IN];
} check_ctx;

_Static_assert(sizeof(check_ctx) <= EM_DEVCHECK_PAYLOAD, "check_ctx must fit a device check's payload");

static check_ctx context_of(const em_op_args *a, em_loss_gpu_label_fail lf, em_loss_gpu_prob_fail pf, int64_t c) {
  check_ctx k = {.label_fail = lf, .prob_fail = pf, .def = a->def, .node = a->node, .step = a->step, .captured = a->captured, .c = c,
                 .n_in = a->n_in < CHECK_MAX_IN ? a->n_in : CHECK_MAX_IN};
  memcpy(k.in, a->in, sizeof(em_shape) * (size_t)k.n_in);
  return k;
}

/* The op's own message, from the kept context and what the kernel found. */
static em_status check_error(const check_ctx *k, const em_devcheck_found *f) {
  em_op_args a = {.def = k->def, .n_in = k->n_in, .in = k->in, .node = k->node, .step = k->step};
  return k->label_fail ? k->label_fail(&a, f->ivalue, f->position, k->c) : k->prob_fail(&a, f->fvalue, f->position);
}

/* devcheck's report: the message, with where and when the check ran (a later
 * synchronisation reports it, maybe during another run). */
static em_status deferred_report(const void *payload, const em_devcheck_found *f) {
  const check_ctx *k = payload;
  em_status s = check_error(k, f);
  /* a captured check's payload is made once and reported by whichever replay fails: naming the
   * capture's run as the failing one would send the user to the wrong minibatch */
  if (k->captured)
    return em_fail_context(s, "node %d (op '%s') in a replay of the CUDA graph captured at run %llu", k->node,
                           k->def->name, (unsigned long long)k->step);
  return em_fail_context(s, "node %d (op '%s') in run %llu", k->node, k->def->name, (unsigned long long)k->step);
}

/* Launches a one-block check kernel (its last three parameters: record, tag,
 * fresh). Deferred where the device has a status record; else into scratch,
 * copied back (counted) and waited for, reported at once. */
static em_status run_check(const em_op_args *a, const char *kernel, void **args, int n_args, const check_ctx *k) {
  void *rec = NULL;
  long long tag = 0;
  int fresh = 0;
  int64_t t64;
  em_status s = em_devcheck_arm(a->dev, deferred_report, k, sizeof *k, &rec, &t64);
  if (s) return s;
  tag = t64;
  args[n_args - 3] = &rec;
  args[n_args - 2] = &tag;
  args[n_args - 1] = &fresh;
  em_dim3 grid = {1, 1, 1}, block = {LK_THREADS, 1, 1};
  if (rec) return em_ops_launch(a, kernel, grid, block, 0, args);
  /* No mapped memory: the record in scratch, read back now. */
  int64_t got[EM_DEVCHECK_WORDS] = {0};
  fresh = 1;
  tag = 1; /* any non-zero tag marks a find */
  if ((s = em_ops_scratch(a, sizeof got, &rec))) return s;
  s = em_ops_launch(a, kernel, grid, block, 0, args);
  if (!s) s = em_memcpy_d2h(a->dev, got, rec, sizeof got, a->stream);
  if (!s && a->stream) s = em_stream_sync(a->dev, a->stream);
  em_ops_scratch_free(a, rec);
  if (s || !got[0]) return s;
  em_devcheck_found f = {.position = got[1], .ivalue = got[2]};
  memcpy(&f.fvalue, &got[3], sizeof f.fvalue);
  return check_error(k, &f);
}

em_status em_loss_gpu_check_labels(const em_op_args *a, const em_loss_gpu_labels *t, int64_t n, int64_t c,
                                   em_loss_gpu_label_fail fail) {
  if (n <= 0) return EM_OK;
  long long nn = n, cc = c, ig = t->ignore;
  int is64 = t->is64, has = t->has_ignore;
  const void *lab = t->data;
  void *args[] = {&lab, &is64, &nn, &cc, &has, &ig, NULL, NULL, NULL};
  check_ctx k = context_of(a, fail, NULL, c);
  return run_check(a, "em_loss_check_labels", args, 9, &k);
}

em_status em_loss_gpu_check_prob(const em_op_args *a, int f64, const void *p, int64_t n, em_loss_gpu_prob_fail fail) {
  if (n <= 0) return EM_OK;
  long long nn = n;
  void *args[] = {&p, &nn, NULL, NULL, NULL};
  check_ctx k = context_of(a, NULL, fail, 0);
  return run_check(a, pick(f64, "em_loss_check_prob_f32", "em_loss_check_prob_f64"), args, 5, &k);
}
