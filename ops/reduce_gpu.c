/* Launches of the reduce family's kernels (kernels/reduce_ops.cu); the order
 * each kernel follows is described there and in ops/reduce.c. The launch
 * geometry below (grid sizes, threads per argmax output) is a performance
 * choice only: no result depends on it. */
#include "reduce_gpu.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/reduce_math.h"

#define RG_THREADS 256
#define RG_MAX_GRID 65535
#define RG_FOLD1_MAX_UNITS 1024 /* about 8 blocks a multiprocessor on the largest GPUs */
#define RG_FOLD1_MIN_ITEMS 64

static long long rg_cdiv(long long a, long long b) { return (a + b - 1) / b; }

static unsigned rg_grid(long long items, long long per_block) {
  long long g = rg_cdiv(items, per_block);
  if (g < 1) g = 1;
  return (unsigned)(g > RG_MAX_GRID ? RG_MAX_GRID : g);
}

static em_status rg_launch(const em_op_args *a, const char *name, unsigned grid, void **args) {
  return em_ops_launch(a, name, (em_dim3){grid, 1, 1}, (em_dim3){RG_THREADS, 1, 1}, 0, args);
}

/* A walk as the kernels take it: 4 sizes then 4 strides, padded in front
 * with size 1 / stride 0. Plans never have more than 4 axes per walk (8
 * axes alternate between kept and reduced groups, the innermost group is
 * not in a walk). */
static em_status rg_walk(const rd_walk *w, long long v[8]) {
  if (w->n > 4) return em_fail(EM_ERR_USE_CPU, "a reduction walk of %d axes (the kernels take 4)", w->n);
  for (int k = 0; k < 4; k++) {
    int i = k - (4 - w->n);
    v[k] = i >= 0 ? (long long)w->dim[i] : 1;
    v[4 + k] = i >= 0 ? (long long)w->stride[i] : 0;
  }
  return EM_OK;
}

static const char *rg_suffix(em_dtype dt) {
  switch (dt) {
  case EM_F32: return "f32";
  case EM_F64: return "f64";
  case EM_F16: return "f16";
  case EM_BF16: return "bf16";
  case EM_I32: return "i32";
  case EM_I64: return "i64";
  case EM_U8: return "u8";
  default: return NULL;
  }
}

/* The sink pointers of the kernels: yd (double or i64), yf (float or i32). */
static void rg_sink(int dst, void *y, void **yd, void **yf) {
  int narrow = dst == RDM_DST_F32 || dst == RDM_DST_I32;
  *yd = narrow ? NULL : y;
  *yf = narrow ? y : NULL;
}

/* The fold stage (see the kernel): final 1 finishes group g into the sink. */
static em_status rg_fold(const em_op_args *a, int is_int, const void *in, int pass, long long n_groups,
                         long long n_items, long long per, long long n_chunks, long long width, int final, void *mid,
                         int dst, int fn, double nr, const double *shift, void *y) {
  void *yd, *yf;
  rg_sink(dst, y, &yd, &yf);
  void *args[] = {&in, &pass, &n_groups, &n_items, &per, &n_chunks, &width, &final, &mid, &dst, &fn, &nr, &shift,
                  &yd, &yf};
  long long units = n_groups * n_chunks;
  /* Few long folds (a full reduction's last one: one unit of n_blk items):
   * a block per unit stages the items in shared memory (fold1); many: a
   * thread per unit. The same fold in the same order either way. */
  if (units <= RG_FOLD1_MAX_UNITS && per >= RG_FOLD1_MIN_ITEMS)
    return rg_launch(a, is_int ? "em_reduce_ops_fold1_i" : "em_reduce_ops_fold1_f", rg_grid(units, 1), args);
  return rg_launch(a, is_int ? "em_reduce_ops_fold_i" : "em_reduce_ops_fold_f", rg_grid(units, RG_THREADS), args);
}

em_status em_reduce_gpu_pass(const em_op_args *a, em_dtype dt, int pass, int fn, int dst, const rd_plan *p,
                             const void *x, const double *shift, void *y) {
  const char *suf = rg_suffix(dt);
  int is_int = dt == EM_I32 || dt == EM_I64;
  double nr = (double)p->n_red;
  long long n_out = p->n_out, w[16];
  char name[64];
  void *yd, *yf, *mid = NULL, *mid2 = NULL;
  em_status s;
  if (n_out == 0) return EM_OK;
  if (p->empty) /* every output folds nothing: the identity, finished */
    return rg_fold(a, is_int, NULL, pass, n_out, 0, 1, 1, 1, 1, NULL, dst, fn, nr, shift, y);
  if ((s = rg_walk(&p->outer, w)) || (s = rg_walk(&p->rows, w + 8))) return s;
  rg_sink(dst, y, &yd, &yf);
  long long inner = p->inner;
  if (p->inner_reduced) {
    long long nchunk = p->nchunk, n_seg = p->n_seg, n_blk = p->n_blk;
    int lanes = inner < RDM_LANES ? 1 : RDM_LANES;
    if (n_seg > 1) {
      s = em_ops_scratch(a, sizeof(double) * (size_t)(n_out * n_seg), &mid);
      if (!s) s = em_ops_scratch(a, sizeof(double) * (size_t)(n_out * n_blk), &mid2);
    }
    void *args[] = {&x,    &shift, &pass, &n_out, &inner, &nchunk, &n_seg, &lanes, &mid, &dst,
                    &fn,   &nr,    &yd,   &yf,    &w[0],  &w[1],   &w[2],  &w[3],  &w[4], &w[5],
                    &w[6], &w[7],  &w[8], &w[9],  &w[10], &w[11],  &w[12], &w[13], &w[14], &w[15]};
    snprintf(name, sizeof name, "em_reduce_ops_seg_%s", suf);
    if (!s) s = rg_launch(a, name, rg_grid(n_out * n_seg, RG_THREADS / lanes), args);
    /* segments in fixed blocks, then the blocks (ops/reduce.c's _ablk, _arange) */
    if (!s && n_seg > 1)
      s = rg_fold(a, is_int, mid, pass, n_out, n_seg, p->seg_per_blk, n_blk, 1, 0, mid2, dst, fn, nr, shift, y);
    if (!s && n_seg > 1) s = rg_fold(a, is_int, mid2, pass, n_out, n_blk, n_blk, 1, 1, 1, NULL, dst, fn, nr, shift, y);
  } else {
    long long n_bases = n_out / inner, n_rows = p->n_rows, rpb = p->rows_per_blk, n_blk = p->n_blk;
    s = n_blk > 1 ? em_ops_scratch(a, sizeof(double) * (size_t)(n_out * n_blk), &mid) : EM_OK;
    void *args[] = {&x,    &shift, &pass, &n_bases, &inner, &n_rows, &rpb,   &n_blk, &mid,  &dst,
                    &fn,   &nr,    &yd,   &yf,      &w[0],  &w[1],   &w[2],  &w[3],  &w[4], &w[5],
                    &w[6], &w[7],  &w[8], &w[9],    &w[10], &w[11],  &w[12], &w[13], &w[14], &w[15]};
    snprintf(name, sizeof name, "em_reduce_ops_rows_%s", suf);
    if (!s) s = rg_launch(a, name, rg_grid(n_out * n_blk, RG_THREADS), args);
    /* the row blocks of each output in order (ops/reduce.c's _bcols) */
    if (!s && n_blk > 1) s = rg_fold(a, is_int, mid, pass, n_out, n_blk, n_blk, 1, inner, 1, NULL, dst, fn, nr, shift, y);
  }
  em_ops_scratch_free(a, mid);
  em_ops_scratch_free(a, mid2);
  return s;
}

em_status em_reduce_gpu_arg(const em_op_args *a, em_dtype dt, const rd_plan *p, int want_max, int last, int offsets,
                            const void *x, int64_t *pos) {
  const char *suf = rg_suffix(dt);
  long long n_out = p->n_out, n_red = p->n_red, inner = p->inner, w[16];
  int inner_reduced = p->inner_reduced, lanes = 1;
  char name[64];
  em_status s;
  if (n_out == 0) return EM_OK;
  if (!suf) return em_op_fail(a, "no argmax kernel for dtype %s", em_dtype_name(dt));
  if ((s = rg_walk(&p->outer, w)) || (s = rg_walk(&p->rows, w + 8))) return s;
  /* Long searches get up to 256 threads each while outputs are few. */
  while (lanes < RG_THREADS && lanes * 32LL < n_red && n_out * lanes < (1LL << 20)) lanes *= 2;
  void *args[] = {&x,    &n_out, &inner_reduced, &inner, &n_red, &lanes, &want_max, &last,  &offsets,
                  &pos,  &w[0],  &w[1],          &w[2],  &w[3],  &w[4],  &w[5],     &w[6],  &w[7],
                  &w[8], &w[9],  &w[10],         &w[11], &w[12], &w[13], &w[14],    &w[15]};
  snprintf(name, sizeof name, "em_reduce_ops_arg_%s", suf);
  return rg_launch(a, name, rg_grid(n_out, RG_THREADS / lanes), args);
}

em_status em_reduce_gpu_grad(const em_op_args *a, em_dtype dt, int fn, const int64_t *dims, int ndim, unsigned mask,
                             const void *x, const void *y, const void *dy, const double *a1, const double *a2,
                             const int64_t *pos, void *dx) {
  /* Merged groups of x's axes (size 1 dropped, neighbours of one kind
   * merged), each with its stride in the output (0 when reduced). */
  long long gd[8], n = 1;
  int gred[EM_MAX_DIMS], m = 0;
  for (int i = 0; i < ndim; i++) {
    n *= dims[i];
    if (dims[i] == 1) continue;
    int r = (mask >> i) & 1u;
    if (m && gred[m - 1] == r) {
      gd[m - 1] *= dims[i];
    } else {
      gd[m] = dims[i];
      gred[m++] = r;
    }
  }
  if (n == 0) return EM_OK;
  long long d[8], st[8], ostride = 1;
  for (int k = 7, g = m - 1; k >= 0; k--, g--) {
    d[k] = g >= 0 ? gd[g] : 1;
    st[k] = g >= 0 && !gred[g] ? ostride : 0;
    if (g >= 0 && !gred[g]) ostride *= gd[g];
  }
  long long n_red = 1;
  for (int i = 0; i < ndim; i++)
    if (mask & (1u << i)) n_red *= dims[i];
  double inv_n = 1.0 / (double)n_red; /* as grad_cpu */
  void *args[] = {&x,    &y,    &dy,   &a1,   &a2,   &pos,  &fn,   &inv_n, &n,    &dx,   &d[0], &d[1], &d[2],
                  &d[3], &d[4], &d[5], &d[6], &d[7], &st[0], &st[1], &st[2], &st[3], &st[4], &st[5], &st[6], &st[7]};
  return em_ops_launch_1d(a, dt == EM_F32 ? "em_reduce_ops_grad_f32" : "em_reduce_ops_grad_f64", (size_t)n, args);
}
