/* GPU products of the linalg family: cuBLAS in the fast mode where the
 * device may use it (runtime/cublas.c), else Ember's kernels/gemm.cu.
 *
 * Ember's kernels: the batch axes of a
 * product become the kernel's grid z (targets) and, for a sum over a
 * broadcast batch axis, a sequence of launches in batch order that add into
 * C (accumulate = 1), so every element is summed in the order ops/linalg.c's
 * portable CPU GEMM uses. */
#include <stdio.h>
#include <string.h>

#include "cublas.h"
#include "cublaslt.h"
#include "error.h"
#include "gpu_glue.h"
#include "linalg.h"
#include "shape_gpu.h"

static int is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

/* Tile of one block (kernels/gemm.cu: 16 x 16 threads, 8 x 8 outputs each
 * for 4-byte types, 4 x 4 for 8-byte ones). */
static int64_t gemm_tile(em_dtype dt) { return em_dtype_size(dt) == 4 ? 128 : 64; }

static const char *gemm_kernel(em_dtype dt) {
  switch (dt) {
  case EM_F32: return "em_gemm_f32";
  case EM_F64: return "em_gemm_f64";
  case EM_I32: return "em_gemm_u32";
  case EM_I64: return "em_gemm_u64";
  default: return NULL;
  }
}

#define GRID_LIMIT 65535 /* grid y and z on every CC */

/* The batch axes without size-1 axes, adjacent axes merged where every
 * operand steps over them as over one axis of the same kind (target or
 * summed). */
typedef struct axes {
  int n;
  int64_t d[EM_MAX_DIMS], sx[EM_MAX_DIMS], sy[EM_MAX_DIMS], sc[EM_MAX_DIMS];
} axes;

static int summed(const axes *v, int i) { return v->sc[i] == 0; }

static void coalesce(const em_linalg_gemm *g, axes *v) {
  v->n = 0;
  for (int i = 0; i < g->nd; i++) {
    if (g->dims[i] == 1) continue;
    int j = v->n;
    if (j > 0 && (g->sc[i] == 0) == summed(v, j - 1) && v->sx[j - 1] == g->sx[i] * g->dims[i] &&
        v->sy[j - 1] == g->sy[i] * g->dims[i] && v->sc[j - 1] == g->sc[i] * g->dims[i]) {
      v->d[j - 1] *= g->dims[i];
      v->sx[j - 1] = g->sx[i];
      v->sy[j - 1] = g->sy[i];
      v->sc[j - 1] = g->sc[i];
      continue;
    }
    v->d[j] = g->dims[i];
    v->sx[j] = g->sx[i];
    v->sy[j] = g->sy[i];
    v->sc[j] = g->sc[i];
    v->n++;
  }
}

/* Kernel arguments of one launch; the pointers and offsets change per launch. */
typedef struct launch {
  const char *x, *y;
  char *c;
  const char *cin;
  long long m, n, k, ldx, ldy, ldc, cin_rs, cin_cs, zx, zy, zc;
  int tx, ty, accumulate;
  union { float f; double d; unsigned u; unsigned long long ul; } alpha, beta;
} launch;

static void set_scalar(em_dtype dt, double v, launch *l, int beta) {
  if (dt == EM_F32) (beta ? &l->beta : &l->alpha)->f = (float)v;
  else if (dt == EM_F64) (beta ? &l->beta : &l->alpha)->d = v;
  else if (dt == EM_I32) (beta ? &l->beta : &l->alpha)->u = (unsigned)v;
  else (beta ? &l->beta : &l->alpha)->ul = (unsigned long long)v;
}

/* Launches z targets (grid z) of l, in chunks of GRID_LIMIT targets and of
 * GRID_LIMIT row tiles. */
static em_status launch_targets(const em_op_args *a, const char *kernel, em_dtype dt, launch l, int64_t z) {
  size_t es = em_dtype_size(dt);
  int64_t tile = gemm_tile(dt), row_tiles = (l.m + tile - 1) / tile, col_tiles = (l.n + tile - 1) / tile;
  if (col_tiles > 0x7fffffff)
    return em_op_fail(a, "%lld columns are more than one grid holds", (long long)l.n);
  const launch base = l;
  for (int64_t z0 = 0; z0 < z; z0 += GRID_LIMIT)
    for (int64_t r0 = 0; r0 < row_tiles; r0 += GRID_LIMIT) {
      int64_t zn = z - z0 < GRID_LIMIT ? z - z0 : GRID_LIMIT, rn = row_tiles - r0 < GRID_LIMIT ? row_tiles - r0 : GRID_LIMIT;
      int64_t row = r0 * tile;
      l = base;
      l.m = base.m - row;
      l.x = base.x + (size_t)(z0 * base.zx + (base.tx ? row : row * base.ldx)) * es;
      l.y = base.y + (size_t)(z0 * base.zy) * es;
      l.c = base.c + (size_t)(z0 * base.zc + row * base.ldc) * es;
      l.cin = base.cin + (size_t)(row * base.cin_rs) * es;
      void *args[] = {&l.x,      &l.y,      &l.c,     &l.cin,   &l.m,     &l.n,  &l.k,
                      &l.tx,     &l.ty,     &l.ldx,   &l.ldy,   &l.ldc,   &l.cin_rs, &l.cin_cs,
                      &l.alpha,  &l.beta,   &l.accumulate,      &l.zx,    &l.zy, &l.zc};
      em_status s = em_ops_launch(a, kernel, (em_dim3){(unsigned)col_tiles, (unsigned)rn, (unsigned)zn},
                                  (em_dim3){256, 1, 1}, 0, args);
      if (s) return s;
    }
  return EM_OK;
}

/* One pass of the batch walk: the products of the z targets (zx, zy, zc
 * apart) of one combination of the other batch axes; `later` when a summed
 * axis is past its first product (add into C). */
typedef struct batch {
  const char *x, *y;
  char *c;
  int later;
  int64_t z, zx, zy, zc, k;
  double alpha;
} batch;
typedef em_status (*batch_fn)(const em_op_args *a, const em_linalg_gemm *g, const batch *b);

/* Walks g's batch axes: grid z (or cuBLAS's batch) runs over the last target
 * axis; every other axis is a host loop, row-major, so each target receives
 * its summed products in batch order. */
static em_status walk(const em_op_args *a, const em_linalg_gemm *g, batch_fn run) {
  if (g->m == 0 || g->n == 0) return EM_OK;
  axes v;
  coalesce(g, &v);
  int64_t k = g->k;
  double alpha = g->alpha;
  for (int i = 0; i < v.n; i++)
    if (v.d[i] == 0) {
      if (!summed(&v, i)) return EM_OK; /* no targets */
      /* Nothing to sum: every target is +0, what a product with k = 0 and alpha 1 writes. */
      int w = 0;
      for (int j = 0; j < v.n; j++)
        if (!summed(&v, j)) v.d[w] = v.d[j], v.sx[w] = 0, v.sy[w] = 0, v.sc[w] = v.sc[j], w++;
      v.n = w;
      k = 0;
      alpha = 1;
      break;
    }
  int zaxis = -1;
  for (int i = v.n - 1; i >= 0 && zaxis < 0; i--)
    if (!summed(&v, i)) zaxis = i;
  batch b = {.z = 1, .k = k, .alpha = alpha};
  if (zaxis >= 0) b.z = v.d[zaxis], b.zx = v.sx[zaxis], b.zy = v.sy[zaxis], b.zc = v.sc[zaxis];
  int64_t loops = 1;
  for (int i = 0; i < v.n; i++)
    if (i != zaxis) loops *= v.d[i];
  size_t es = em_dtype_size(g->dt);
  for (int64_t it = 0; it < loops; it++) {
    int64_t rem = it, ox = 0, oy = 0, oc = 0;
    b.later = 0;
    for (int i = v.n - 1; i >= 0; i--) {
      if (i == zaxis) continue;
      int64_t q = rem % v.d[i];
      rem /= v.d[i];
      ox += q * v.sx[i];
      oy += q * v.sy[i];
      oc += q * v.sc[i];
      if (summed(&v, i) && q > 0) b.later = 1;
    }
    b.x = (const char *)g->x + (size_t)ox * es;
    b.y = (const char *)g->y + (size_t)oy * es;
    b.c = (char *)g->c + (size_t)oc * es;
    em_status s = run(a, g, &b);
    if (s) return s;
  }
  return EM_OK;
}

/* Ember's kernel (kernels/gemm.cu) for one pass. */
static em_status kernel_batch(const em_op_args *a, const em_linalg_gemm *g, const batch *b) {
  launch l;
  memset(&l, 0, sizeof l);
  l.x = b->x;
  l.y = b->y;
  l.c = b->c;
  l.m = g->m;
  l.n = g->n;
  l.k = b->k;
  l.ldx = g->ldx;
  l.ldy = g->ldy;
  l.ldc = g->ldc;
  l.tx = g->tx;
  l.ty = g->ty;
  l.zx = b->zx;
  l.zy = b->zy;
  l.zc = b->zc;
  l.accumulate = b->later;
  set_scalar(g->dt, b->alpha, &l, 0);
  set_scalar(g->dt, g->cin ? g->beta : 0.0, &l, 1);
  /* The kernel reads cin only when beta != 0; any valid pointer stands in otherwise. */
  l.cin = g->cin ? g->cin : g->c;
  l.cin_rs = g->cin ? g->cin_rs : 0;
  l.cin_cs = g->cin ? g->cin_cs : 0;
  return launch_targets(a, gemm_kernel(g->dt), g->dt, l, b->z);
}

/* ------------------------------------------------------------- cuBLAS --- */

/* A leading dimension cuBLAS accepts: at least the rows as stored (and 1);
 * else -1, and Ember's kernel takes the product. */
static long long legal_ld(int64_t ld, int64_t rows) { return ld >= (rows > 1 ? rows : 1) ? ld : -1; }

/* Row-major C (m x n) = op(X) op(Y) is column-major C^T (n x m) =
 * op(Y)^T op(X)^T: cuBLAS's A is Y (transposed when Y is), its B is X. */
static int cublas_form(const em_linalg_gemm *g, const batch *b, em_cublas_gemm *q) {
  long long lda = legal_ld(g->ldy, g->ty ? b->k : g->n), ldb = legal_ld(g->ldx, g->tx ? g->m : b->k);
  long long ldc = legal_ld(g->ldc, g->n);
  const int64_t lim = 0x7fffffff;
  /* k = 0 stays with the kernel, which writes beta * c or zeros: strided-batched cuBLAS has
   * been reported to return garbage for an empty sum (pytorch/pytorch#31421). */
  if (b->k == 0 || lda < 0 || ldb < 0 || ldc < 0 || lda > lim || ldb > lim || ldc > lim || g->m > lim || g->n > lim ||
      b->k > lim)
    return 0;
  memset(q, 0, sizeof *q);
  q->dt = g->dt;
  q->ta = g->ty, q->tb = g->tx;
  q->m = (int)g->n, q->n = (int)g->m, q->k = (int)b->k;
  q->a = b->y, q->b = b->x, q->c = b->c;
  q->lda = (int)lda, q->ldb = (int)ldb, q->ldc = (int)ldc;
  q->stride_a = b->zy, q->stride_b = b->zx, q->stride_c = b->zc;
  q->alpha = b->alpha;
  return 1;
}

/* cuBLAS for one pass; gemm's c input (g->cin, broadcast over rows or
 * columns) is first put into C as beta * c by Ember's kernel with k = 0,
 * then added to (cuBLAS beta 1). f16 and bf16 have no Ember kernel: C gets
 * an exact broadcast copy of c (the shape family's strided copy of 2-byte
 * elements) and cuBLAS scales it by beta itself, so alpha * sum + beta * c is
 * computed in f32 and rounded once, as the f32 road does; em_linalg_half_takes
 * has made sure cuBLAS takes the sizes. */
static em_status cublas_batch(const em_op_args *a, const em_linalg_gemm *g, const batch *b) {
  em_cublas_gemm q;
  if (is_half(g->dt)) {
    if (!cublas_form(g, b, &q)) return em_op_fail(a, "internal: a %s product cuBLAS does not take reached cuBLAS",
                                                  em_dtype_name(g->dt));
    q.beta = b->later ? 1.0 : 0.0;
    if (g->cin && !b->later) {
      const int64_t dims[2] = {g->m, g->n}, ds[2] = {g->ldc, 1}, ss[2] = {g->cin_rs, g->cin_cs};
      em_status s = em_shape_gpu_copy(a, b->c, g->cin, 2, dims, ds, ss, em_dtype_size(g->dt));
      if (s) return s;
      q.beta = g->beta;
    }
  } else if (!cublas_form(g, b, &q)) {
    /* Every pass has the same sizes, so the whole product takes this road: say so. */
    em_op_report_path(a, "Ember's kernels: cuBLAS does not take these sizes (m %lld, n %lld, k %lld, leading "
                      "dimensions %lld, %lld, %lld)", (long long)g->m, (long long)g->n, (long long)b->k,
                      (long long)g->ldx, (long long)g->ldy, (long long)g->ldc);
    return kernel_batch(a, g, b);
  }
  q.tf32 = a->tf32;
  if (!is_half(g->dt)) {
    q.beta = b->later ? 1.0 : 0.0;
    if (g->cin && !b->later) {
      batch fill = *b;
      fill.k = 0;
      em_status s = kernel_batch(a, g, &fill);
      if (s) return s;
      q.beta = 1.0;
    }
  }
  size_t es = em_dtype_size(g->dt);
  for (int64_t z0 = 0; z0 < b->z; z0 += 0x7fffffff) {
    int64_t zn = b->z - z0 < 0x7fffffff ? b->z - z0 : 0x7fffffff;
    em_cublas_gemm one = q;
    one.a = (const char *)q.a + (size_t)(z0 * b->zy) * es;
    one.b = (const char *)q.b + (size_t)(z0 * b->zx) * es;
    one.c = (char *)q.c + (size_t)(z0 * b->zc) * es;
    one.batch = (int)zn;
    em_status s = em_cublas_gemm_run(a->dev, a->stream, &one);
    if (s == EM_ERR_UNSUPPORTED) return s; /* declined: em_linalg_gemm_gpu takes another road */
    if (s) return em_fail_context(s, "op '%s'", a->def->name);
  }
  return EM_OK;
}

int em_linalg_uses_cublas(const em_op_args *a, em_dtype dt, char *why, size_t cap) {
  if (a->portable) {
    snprintf(why, cap, "portable mode: Ember's own kernels");
    return 0;
  }
  return em_cublas_usable(a->dev, dt, why, cap);
}

int em_linalg_half_takes(const em_op_args *a, const em_linalg_gemm *g, char *why, size_t cap) {
  if (a->portable) {
    snprintf(why, cap, "portable mode: Ember's own kernels on f32 copies, the CPU's bits");
    return 0;
  }
  if (!em_linalg_uses_cublas(a, g->dt, why, cap)) return 0;
  if (g->m == 0 || g->n == 0) return 1; /* nothing to write: the walk does nothing */
  axes v;
  coalesce(g, &v);
  int64_t k = g->k;
  int sums = 0;
  for (int i = 0; i < v.n; i++) {
    if (v.d[i] == 0) {
      if (!summed(&v, i)) return 1; /* no targets */
      k = 0;
    }
    sums |= summed(&v, i) && v.d[i] > 1;
  }
  /* A sum over a broadcast batch axis adds several products into C in batch order: in a half
   * C every addition would round, where the f32 road rounds the whole sum once. */
  if (sums && k > 0) {
    snprintf(why, cap, "a sum over a broadcast batch axis, which cuBLAS would add up in %s", em_dtype_name(g->dt));
    return 0;
  }
  /* k = 0 writes beta * c or zeros, which the f32 road's kernel does (cublas_form keeps it
   * from cuBLAS); so do sizes or leading dimensions cuBLAS does not take. Every pass of the
   * walk has the sizes of this one. */
  batch b = {.k = k};
  em_cublas_gemm q;
  if (k == 0) {
    snprintf(why, cap, "an empty sum (k = 0), which cuBLAS is not given");
    return 0;
  }
  if (!cublas_form(g, &b, &q)) {
    snprintf(why, cap, "cuBLAS does not take these sizes (m %lld, n %lld, k %lld, leading dimensions %lld, %lld, "
             "%lld)", (long long)g->m, (long long)g->n, (long long)k, (long long)g->ldx, (long long)g->ldy,
             (long long)g->ldc);
    return 0;
  }
  return 1;
}

em_status em_linalg_gemm_gpu(const em_op_args *a, const em_linalg_gemm *g) {
  char why[200];
  if (is_half(g->dt)) {
    if (!em_linalg_half_takes(a, g, why, sizeof why))
      return em_op_fail(a, "internal: a %s product reached the cuBLAS road, which does not take it: %s",
                        em_dtype_name(g->dt), why);
    char version[32];
    em_cublas_library(version, sizeof version);
    em_op_report_path(a, "cuBLAS %s (%s, f32 accumulation)", version, em_dtype_name(g->dt));
    return walk(a, g, cublas_batch);
  }
  const char *kernel = gemm_kernel(g->dt);
  if (!kernel) return em_op_fail(a, "no GPU GEMM for dtype %s", em_dtype_name(g->dt));
  if (em_linalg_uses_cublas(a, g->dt, why, sizeof why)) {
    char version[32];
    em_cublas_library(version, sizeof version);
    /* cuBLAS's m and n are the product's n and m (cublas_form). */
    if (em_cublas_is_gemv(g->dt, g->n == 1 ? 1 : 2, g->m == 1 ? 1 : 2, a->tf32))
      em_op_report_path(a, "cuBLAS %s gemv", version);
    else em_op_report_path(a, "cuBLAS %s%s", version, a->tf32 && g->dt == EM_F32 ? " (TF32 allowed)" : "");
    /* cuBLAS declining the product (em_cublas_gemm_run): the whole walk again on Ember's kernels,
     * whose first pass overwrites C, so what cuBLAS passes wrote before does not matter */
    em_status s = walk(a, g, cublas_batch);
    if (!em_ops_declined(a, s)) return s;
  } else if (!a->portable) em_op_report_path(a, "Ember's kernels: %s", why);
  return walk(a, g, kernel_batch);
}

/* ----------------------------------------------------------- cuBLASLt --- */

/* Appends " (text)" to the op's road, as far as it fits. */
static void road_note(const em_op_args *a, const char *text) {
  if (!a->report || !text[0]) return;
  size_t n = strlen(a->report->path);
  snprintf(a->report->path + n, sizeof a->report->path - n, " (%s)", text);
}

/* The cuBLASLt road of em_linalg_gemm_gpu_epilogue; *ran when it issued the product, else why
 * (empty when there is nothing to say: cuBLAS itself is not used, an empty product). */
static em_status lt_product(const em_op_args *a, const em_linalg_gemm *g, int *ran, int *post_done, char *why,
                            size_t cap) {
  *ran = 0;
  why[0] = 0;
  /* gemm's c enters as y = alpha op(x) op(w) + beta c. With beta 1 and c one value per output
   * column (cin_rs 0; cin_cs 1, or a single column), that is cuBLASLt's D = alpha op(A) op(B) +
   * bias with its C unused (beta 0): the same two f32 roundings as c copied into y and cuBLAS
   * adding to it (cublas_batch). Any other c (a full matrix, a column, beta other than 1) keeps
   * that road: scaling the bias first would round once more. */
  int bias = g->cin && g->beta == 1.0 && g->cin_rs == 0 && (g->cin_cs == 1 || g->n == 1);
  /* Only gelu's tanh form is fused (plan_fusions): relu is not, because cuBLASLt's RELU is
   * max(x, 0) (cublasLt.h), which turns a NaN into 0 where Ember's relu keeps it, and a NaN
   * must not vanish in fast mode (as for oneDNN's post-ops, ops/conv.c). */
  em_lt_act act = a->post && a->post->kind == EM_POST_GELU ? EM_LT_ACT_GELU : EM_LT_ACT_NONE;
  if ((!bias && act == EM_LT_ACT_NONE) || g->m == 0 || g->n == 0 || g->k == 0) return EM_OK;
  char blas_why[200];
  if (!em_linalg_uses_cublas(a, g->dt, blas_why, sizeof blas_why)) return EM_OK; /* its road says why */
  if (g->cin && !bias) {
    snprintf(why, cap, "no cuBLASLt epilogue: c is not a row of biases added with beta 1");
    return EM_OK;
  }
  axes v;
  coalesce(g, &v);
  if (v.n) {
    snprintf(why, cap, "no cuBLASLt epilogue: a batched product");
    return EM_OK;
  }
  batch b = {.x = g->x, .y = g->y, .c = g->c, .z = 1, .k = g->k, .alpha = g->alpha};
  em_cublas_gemm q;
  if (!cublas_form(g, &b, &q)) {
    snprintf(why, cap, "no cuBLASLt epilogue: cuBLAS does not take these sizes");
    return EM_OK;
  }
  char lt[160];
  if (!em_cublaslt_usable(a->dev, lt, sizeof lt)) {
    snprintf(why, cap, "no cuBLASLt epilogue: %s", lt);
    return EM_OK;
  }
  q.beta = 0.0;
  q.batch = 1;
  q.tf32 = a->tf32;
  char declined[200] = "";
  em_status s = em_cublaslt_matmul(a->dev, a->stream, &q, bias ? g->cin : NULL, act, ran, declined, sizeof declined);
  if (s) return em_fail_context(s, "op '%s'", a->def->name);
  if (!*ran) {
    snprintf(why, cap, "%s", declined);
    return EM_OK;
  }
  *post_done = act != EM_LT_ACT_NONE;
  em_op_report_path(a, "%s, epilogue %s%s", lt, em_cublaslt_epilogue_name(bias, act), a->tf32 ? " (TF32 allowed)" : "");
  return EM_OK;
}

em_status em_linalg_gemm_gpu_epilogue(const em_op_args *a, const em_linalg_gemm *g, int *post_done) {
  *post_done = 0;
  char why[256] = "";
  if (!a->portable && g->dt == EM_F32) {
    int ran;
    em_status s = lt_product(a, g, &ran, post_done, why, sizeof why);
    if (s || ran) return s;
  }
  em_status s = em_linalg_gemm_gpu(a, g);
  if (!s && !a->portable) { /* portable mode reports no road */
    char then[64];
    snprintf(then, sizeof then, "then Ember's %s kernel", a->post ? a->post->unary.def->name : "");
    if (a->post) road_note(a, then);
    road_note(a, why);
  }
  return s;
}

em_status em_linalg_c_grad_gpu(const em_op_args *a, const void *dy, void *dc, int64_t m, int64_t n, int64_t rows,
                               int64_t cols, double beta) {
  const char *kernel = a->in[0].dtype == EM_F32 ? "em_gemm_c_grad_f32" : "em_gemm_c_grad_f64";
  long long lm = m, ln = n, lr = rows, lc = cols;
  void *args[] = {&dy, &dc, &lm, &ln, &lr, &lc, &beta};
  return em_ops_launch_1d(a, kernel, (size_t)(rows * cols), args);
}
