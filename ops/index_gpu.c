/* Launches of kernels/index.cu for ops/index.c's gpu members (index_gpu.h). */
#include "index_gpu.h"

#include <string.h>

#include "ember.h"
#include "devcheck.h"
#include "error.h"
#include "gpu_glue.h"
#include "../kernels/index_math.h"

#define IX_THREADS 256 /* kernels/index.cu's check block */
#define CHECK_MAX_IN 3 /* inputs of the index ops */

static const char *suffix(em_dtype t) {
  switch (t) {
  case EM_F32: return "f32";
  case EM_F64: return "f64";
  case EM_I32: return "i32";
  default: return "i64";
  }
}

static const char *kname(char *buf, size_t cap, const char *base, em_dtype t) {
  snprintf(buf, cap, "%s_%s", base, suffix(t));
  return buf;
}

/* ------------------------------------------------------------ checks --- */

/* What a deferred check keeps for its message (runtime/devcheck.h payload). */
typedef struct check_ctx {
  const em_op_def *def; /* the op table is static: the pointer outlives the run */
  int node, n_in;
  uint64_t step;
  int captured; /* armed in a CUDA graph's capture: the check fails in some later replay */
  em_index_bounds b;
  em_shape in[CHECK_MAX_IN];
} check_ctx;

_Static_assert(sizeof(check_ctx) <= EM_DEVCHECK_PAYLOAD, "check_ctx must fit a device check's payload");

static em_status check_error(const check_ctx *k, const em_devcheck_found *f) {
  em_op_args a = {.def = k->def, .n_in = k->n_in, .in = k->in, .node = k->node, .step = k->step};
  return em_index_fail(&a, &k->b, f->ivalue, f->position);
}

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

/* em_index_check over n indices with bounds (device memory, k of them):
 * deferred where the device has a status record, else into scratch, copied
 * back and reported at once (as ops/loss_gpu.c's label check). */
static em_status run_check(const em_op_args *a, const void *idx, int idx64, int64_t n, int64_t k, const void *bounds,
                           const em_index_bounds *b) {
  if (n <= 0) return EM_OK;
  check_ctx ctx = {.def = a->def, .node = a->node, .step = a->step, .captured = a->captured, .b = *b,
                   .n_in = a->n_in < CHECK_MAX_IN ? a->n_in : CHECK_MAX_IN};
  memcpy(ctx.in, a->in, sizeof(em_shape) * (size_t)ctx.n_in);
  void *rec = NULL;
  int64_t t64;
  em_status s = em_devcheck_arm(a->dev, deferred_report, &ctx, sizeof ctx, &rec, &t64);
  if (s) return s;
  long long nn = n, kk = k, tag = t64;
  int fresh = 0;
  void *args[] = {(void *)&idx, &idx64, &nn, &kk, (void *)&bounds, &rec, &tag, &fresh};
  em_dim3 grid = {1, 1, 1}, block = {IX_THREADS, 1, 1};
  if (rec) return em_ops_launch(a, "em_index_check", grid, block, 0, args);
  int64_t got[EM_DEVCHECK_WORDS] = {0};
  fresh = 1;
  tag = 1; /* any non-zero tag marks a find */
  if ((s = em_ops_scratch(a, sizeof got, &rec))) return s;
  s = em_ops_launch(a, "em_index_check", grid, block, 0, args);
  if (!s) s = em_memcpy_d2h(a->dev, got, rec, sizeof got, a->stream);
  if (!s && a->stream) s = em_stream_sync(a->dev, a->stream);
  em_ops_scratch_free(a, rec);
  if (s || !got[0]) return s;
  em_devcheck_found f = {.position = got[1], .ivalue = got[2]};
  return check_error(&ctx, &f);
}

/* The uploads of this file (a bound, the tuples' dims, the elements' table)
 * hold sizes of the inputs' axes only: fixed by a CUDA graph's key, so the
 * bytes a capture staged (em_ops_scratch_upload) stay right at every replay. */
em_status em_index_gpu_check_axis(const em_op_args *a, const void *idx, int idx64, int64_t n, const em_index_bounds *b) {
  const em_shape *d = &a->in[b->data_in];
  int64_t size = d->dims[b->first_axis];
  void *bound = NULL;
  em_status s = em_ops_kernel_ready(a, "em_index_check");
  if (!s) s = em_ops_scratch_upload(a, &size, sizeof size, &bound);
  if (!s) s = run_check(a, idx, idx64, n, 1, bound, b);
  if (bound) em_ops_scratch_free(a, bound);
  return s;
}

/* ------------------------------------------------------------ cumsum --- */

em_status em_index_gpu_cumsum(const em_op_args *a, em_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                              int64_t inner, int exclusive, int reverse) {
  char k[48];
  long long lines = outer * inner, nn = n, in = inner;
  void *args[] = {(void *)&x, &y, &lines, &nn, &in, &exclusive, &reverse};
  return em_ops_launch_1d(a, kname(k, sizeof k, "em_index_cumsum", t), (size_t)lines, args);
}

/* ------------------------------------------------------------ tuples --- */

/* The tuples' bounds uploaded, checked, and turned into rows (scratch, freed
 * by the caller with em_ops_scratch_free; NULL when there are no tuples). */
static em_status tuple_rows(const em_op_args *a, const em_index_tuples *tu, void **rows) {
  *rows = NULL;
  int64_t dims[EM_MAX_DIMS];
  int64_t k = tu->k > 0 ? tu->k : 1;
  for (int j = 0; j < EM_MAX_DIMS; j++) dims[j] = j < tu->k ? tu->dims[j] : 1;
  void *dd = NULL;
  em_status s = em_ops_kernel_ready(a, "em_index_rows");
  if (!s) s = em_ops_scratch_upload(a, dims, sizeof(int64_t) * (size_t)k, &dd);
  if (!s && tu->k > 0) s = run_check(a, tu->idx, tu->idx64, tu->m * tu->k, tu->k, dd, &tu->b);
  if (!s) s = em_ops_scratch(a, sizeof(int64_t) * (size_t)(tu->m > 0 ? tu->m : 1), rows);
  if (!s) {
    long long m = tu->m, kk = tu->k, pb = tu->per_batch, br = tu->batch_rows;
    void *args[] = {rows, (void *)&tu->idx, (void *)&tu->idx64, &m, &kk, &dd, &pb, &br};
    s = em_ops_launch_1d(a, "em_index_rows", (size_t)m, args);
  }
  if (dd) em_ops_scratch_free(a, dd);
  if (s && *rows) {
    em_ops_scratch_free(a, *rows);
    *rows = NULL;
  }
  return s;
}

em_status em_index_gpu_gather_rows(const em_op_args *a, em_dtype t, const em_index_tuples *tu, void *dst,
                                   const void *src, int last_only) {
  if (tu->m == 0) return EM_OK;
  void *rows;
  em_status s = tuple_rows(a, tu, &rows);
  if (s) return s;
  char k[48];
  long long m = tu->m, sz = tu->sz;
  void *args[] = {&dst, (void *)&src, &rows, &m, &sz, &last_only};
  s = em_ops_launch_1d(a, kname(k, sizeof k, "em_index_gather_rows", t), (size_t)(m * sz), args);
  em_ops_scratch_free(a, rows);
  return s;
}

em_status em_index_gpu_gather_rows_grad(const em_op_args *a, em_dtype t, const em_index_tuples *tu, void *dx,
                                        const void *dy, int64_t nrows) {
  char k[48];
  long long nr = nrows, sz = tu->sz, pb = tu->per_batch, br = tu->batch_rows > 0 ? tu->batch_rows : 1;
  if (nr * sz == 0 && tu->m == 0) return EM_OK;
  void *rows = NULL;
  em_status s = tuple_rows(a, tu, &rows);
  if (s) return s;
  const void *rp = rows;
  void *args[] = {&dx, (void *)&dy, (void *)&rp, &nr, &sz, &pb, &br};
  s = em_ops_launch_1d(a, kname(k, sizeof k, "em_index_gather_rows_grad", t), (size_t)(nr * sz), args);
  if (rows) em_ops_scratch_free(a, rows);
  return s;
}

em_status em_index_gpu_scatter_rows(const em_op_args *a, em_dtype t, const em_index_tuples *tu, void *out,
                                    const void *data, const void *upd, int64_t nrows, int red) {
  char k[48];
  long long nr = nrows, sz = tu->sz, m = tu->m;
  if (nr * sz == 0 && m == 0) return EM_OK;
  void *rows = NULL;
  em_status s = tuple_rows(a, tu, &rows);
  if (s) return s;
  const void *rp = rows;
  void *args[] = {&out, (void *)&data, (void *)&upd, (void *)&rp, &nr, &sz, &m, &red};
  s = em_ops_launch_1d(a, kname(k, sizeof k, "em_index_scatter_rows", t), (size_t)(nr * sz), args);
  if (rows) em_ops_scratch_free(a, rows);
  return s;
}

/* ---------------------------------------------------------- elements --- */

static em_status elements_table(const em_op_args *a, const em_index_elements *e, void **tab, void **bound) {
  int64_t host[2 * EM_MAX_DIMS];
  for (int d = 0; d < e->rank; d++) {
    host[d] = e->ddims[d];
    host[e->rank + d] = e->edims[d];
  }
  *tab = *bound = NULL;
  em_status s = em_ops_scratch_upload(a, host, sizeof(int64_t) * 2 * (size_t)e->rank, tab);
  if (!s) s = em_ops_scratch_upload(a, &e->ddims[e->axis], sizeof(int64_t), bound);
  return s;
}

static int64_t numel_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  return n;
}

/* Checks the indices, then launches kernel over n elements with args (whose
 * entries tab_at and last hold the table's address). */
static em_status elements_launch(const em_op_args *a, const em_index_elements *e, const char *kernel, int64_t n,
                                 void **args, void **tab_slot) {
  int64_t ne = numel_of(e->rank, e->edims);
  if (n == 0 && ne == 0) return EM_OK;
  void *tab = NULL, *bound = NULL;
  em_status s = em_ops_kernel_ready(a, kernel);
  if (!s) s = elements_table(a, e, &tab, &bound);
  em_index_bounds b = {.data_in = 0, .first_axis = e->axis, .k = 1};
  if (!s) s = run_check(a, e->idx, e->idx64, ne, 1, bound, &b);
  *tab_slot = tab;
  if (!s && n > 0) s = em_ops_launch_1d(a, kernel, (size_t)n, args);
  if (tab) em_ops_scratch_free(a, tab);
  if (bound) em_ops_scratch_free(a, bound);
  return s;
}

em_status em_index_gpu_scatter_elements(const em_op_args *a, em_dtype t, const em_index_elements *e, void *out,
                                        const void *data, const void *upd, int red) {
  char k[48];
  long long n = numel_of(e->rank, e->ddims);
  int rank = e->rank, axis = e->axis, idx64 = e->idx64;
  void *tab = NULL;
  void *args[] = {&out, (void *)&data, (void *)&e->idx, &idx64, (void *)&upd, &tab, &rank, &axis, &n, &red};
  return elements_launch(a, e, kname(k, sizeof k, "em_index_scatter_elements", t), n, args, &tab);
}

em_status em_index_gpu_scatter_elements_grad(const em_op_args *a, em_dtype t, const em_index_elements *e, void *dupd,
                                             const void *dy, int last_only) {
  char k[48];
  long long n = numel_of(e->rank, e->edims);
  int rank = e->rank, axis = e->axis, idx64 = e->idx64;
  void *tab = NULL;
  void *args[] = {&dupd, (void *)&dy, (void *)&e->idx, &idx64, &tab, &rank, &axis, &n, &last_only};
  return elements_launch(a, e, kname(k, sizeof k, "em_index_scatter_elements_grad", t), n, args, &tab);
}
