/* Linear algebra: matrix products, through OpenBLAS in the fast mode on the
 * CPU, through Ember's own GEMM in portable mode on the CPU and in both modes
 * on the GPU (ops/linalg_gpu.c, kernels/gemm.cu).
 *
 * matmul(a, b)
 *   numpy matmul: a 1-D a is a row vector [1,K] and a 1-D b a column vector
 *   [K,1], the added axis removed from the result; the axes before the last
 *   two are batch axes and broadcast ([2,1,3,4] @ [5,4,6] -> [2,5,3,6]).
 *   f32, f64 (OpenBLAS sgemm / dgemm, ops/blas.c), i32, i64 (a plain loop, wrapping).
 *   Attributes:
 *     transpose_a INT 0  a's last two axes are used transposed (rank >= 2 only)
 *     transpose_b INT 0  b's last two axes are used transposed (rank >= 2 only)
 * gemm(a, b[, c])
 *   ONNX Gemm: y = alpha * op(a) @ op(b) + beta * c, a and b 2-D, c
 *   broadcast (unidirectionally) to [M,N]. f32, f64. As in BLAS, beta = 0
 *   ignores c's values. Attributes: alpha FLOAT 1, beta FLOAT 1,
 *   transA INT 0, transB INT 0 (ONNX's names).
 * _matmul_grad(dy, a, b)          (internal: the gradients of matmul and gemm)
 *   which INT (0: d/da, 1: d/db), transpose_a, transpose_b, alpha FLOAT 1.
 *   Computes the product and sums it over broadcast batch axes in one pass
 *   (gemm accumulating with beta = 1 in batch order), so 1-D operands and
 *   broadcast batches need no reshape or sum_to nodes.
 * _gemm_c_grad(dy, c)             (internal: gemm's gradient into c)
 *   beta FLOAT 1: beta * dy summed to c's shape.
 *
 * Portable mode (and the GPU): every output element is summed as
 * kernels/gemm_math.h says, the same on every device: acc = fma(x, y, acc)
 * for k = 0 .. K-1 from +0 (an explicit, correctly rounded fma: glibc's
 * fmaf / vfmadd here, fma.rn on the GPU), then alpha * acc, then
 * + beta * c (no FMA); the
 * products of a gradient that sums over broadcast batch axes are added in
 * batch order (the first replaces, the rest add: prev + t). The batch folds
 * below are functions of the shapes, shared by the CPU and the GPU code, so
 * both sum the same products. _gemm_c_grad sums dy in double in row-major
 * order on every device.
 *
 * Determinism: OpenBLAS's own threading is NOT thread-count independent
 * (its blocking and edge kernels change with the partition), so OpenBLAS is
 * kept single-threaded and Ember splits each product into tiles whose sizes
 * depend on the shapes alone, computed in parallel, one BLAS call per tile;
 * products that share a target (broadcast batches in a gradient) add up in
 * batch order. Results are the same bits whatever em_set_num_threads says
 * (tests/unit/test_ops_linalg.c checks it). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gemm_math.h"
#include "blas.h"
#include "dnnl.h"
#include "gpu_glue.h"
#include "linalg.h"
#include "op.h"

/* ---------------------------------------------------------- geometry --- */

/* How matmul sees its operands: M x K times K x N per batch matrix, the
 * batch axes broadcast. Strides are in elements and 0 along broadcast axes. */
typedef struct mm_geom {
  int ta, tb;                 /* operands used transposed */
  int a_vec, b_vec;           /* 1-D operand promoted (its added axis dropped from y) */
  int64_t m, n, k;
  int nb;                     /* batch rank of the result */
  int64_t batch[EM_MAX_DIMS];
  int64_t a_stride[EM_MAX_DIMS], b_stride[EM_MAX_DIMS];
  int64_t n_batch;            /* product of batch (or -1 when dynamic) */
  int64_t a_batch, b_batch;   /* matrices stored in a and b */
} mm_geom;

static int is_dyn(int64_t d) { return d < 0; }

static int all_known(const em_shape *s) {
  for (int i = 0; i < s->ndim; i++)
    if (is_dyn(s->dims[i])) return 0;
  return 1;
}

/* Rows and columns of an operand as stored ([1,K] for a 1-D a, [K,1] for a 1-D b). */
static void stored_matrix(const em_shape *s, int is_b, int64_t *rows, int64_t *cols) {
  if (s->ndim == 1) {
    *rows = is_b ? s->dims[0] : 1;
    *cols = is_b ? 1 : s->dims[0];
  } else {
    *rows = s->dims[s->ndim - 2];
    *cols = s->dims[s->ndim - 1];
  }
}

/* Element strides of one operand's batch axes aligned to the result's batch
 * axes (0 where the operand is missing the axis or broadcasts it). */
static void batch_strides(const em_shape *s, const mm_geom *g, int64_t *stride, int64_t *stored) {
  int own = s->ndim > 2 ? s->ndim - 2 : 0;
  int64_t step = 1;
  for (int i = own; i < s->ndim; i++) step *= s->dims[i];
  *stored = 1;
  for (int j = g->nb - 1; j >= 0; j--) {
    int i = j - (g->nb - own);
    int64_t d = i >= 0 ? s->dims[i] : 1;
    stride[j] = (i >= 0 && d != 1) ? step : 0;
    step *= d;
    *stored *= d;
  }
}

/* Checks a, b and the transposes and fills g and the result's shape. Works
 * with dynamic (-1) dimensions too; strides are only meaningful when the
 * shapes are concrete. */
static em_status mm_geometry(const em_op_args *op, const em_shape *a, const em_shape *b, int64_t ta, int64_t tb,
                             mm_geom *g, em_shape *out) {
  memset(g, 0, sizeof *g);
  if (a->ndim < 1 || b->ndim < 1)
    return em_op_fail(op, "operands must have rank >= 1 (got ranks %d and %d)", a->ndim, b->ndim);
  if (ta != 0 && ta != 1) return em_op_fail(op, "attribute transpose_a must be 0 or 1, got %lld", (long long)ta);
  if (tb != 0 && tb != 1) return em_op_fail(op, "attribute transpose_b must be 0 or 1, got %lld", (long long)tb);
  if (ta && a->ndim == 1) return em_op_fail(op, "transpose_a needs a rank >= 2 first operand (it is 1-D)");
  if (tb && b->ndim == 1) return em_op_fail(op, "transpose_b needs a rank >= 2 second operand (it is 1-D)");
  g->ta = (int)ta;
  g->tb = (int)tb;
  g->a_vec = a->ndim == 1;
  g->b_vec = b->ndim == 1;
  int64_t ar, ac, br, bc;
  stored_matrix(a, 0, &ar, &ac);
  stored_matrix(b, 1, &br, &bc);
  g->m = ta ? ac : ar;
  int64_t ka = ta ? ar : ac;
  int64_t kb = tb ? bc : br;
  g->n = tb ? br : bc;
  if (!is_dyn(ka) && !is_dyn(kb) && ka != kb)
    return em_op_fail(op, "inner dimensions differ: the first operand gives K = %lld, the second K = %lld%s",
                      (long long)ka, (long long)kb, (ta || tb) ? " (after the transposes)" : "");
  g->k = is_dyn(ka) ? kb : ka;

  int na = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
  g->nb = na > nbb ? na : nbb;
  g->n_batch = 1;
  for (int j = 0; j < g->nb; j++) {
    int ia = j - (g->nb - na), ib = j - (g->nb - nbb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    int64_t d;
    if (da == db || db == 1) d = da;
    else if (da == 1) d = db;
    else if (is_dyn(da) || is_dyn(db)) d = -1;
    else
      return em_op_fail(op, "batch axes do not broadcast: batch axis %d is %lld in the first operand, %lld in the second",
                        j, (long long)da, (long long)db);
    g->batch[j] = d;
    g->n_batch = (is_dyn(d) || g->n_batch < 0) ? -1 : g->n_batch * d;
  }

  out->dtype = a->dtype;
  out->ndim = 0;
  for (int j = 0; j < g->nb; j++) out->dims[out->ndim++] = g->batch[j];
  if (!g->a_vec) out->dims[out->ndim++] = g->m;
  if (!g->b_vec) out->dims[out->ndim++] = g->n;

  if (all_known(a) && all_known(b)) {
    batch_strides(a, g, g->a_stride, &g->a_batch);
    batch_strides(b, g, g->b_stride, &g->b_batch);
  }
  return EM_OK;
}

/* Element offsets of batch matrix idx (row-major over the result's batch axes) in a and b. */
static void batch_offsets(const mm_geom *g, int64_t idx, int64_t *oa, int64_t *ob) {
  *oa = *ob = 0;
  for (int j = g->nb - 1; j >= 0; j--) {
    int64_t i = idx % g->batch[j];
    idx /= g->batch[j];
    *oa += i * g->a_stride[j];
    *ob += i * g->b_stride[j];
  }
}

/* One contiguous run of batch matrices can be a single gemm: a stacked
 * [n_batch * M, K] block against one shared b (a dense layer on a batch). */
static int fold_batches(const mm_geom *g) {
  return !g->ta && g->b_batch == 1 && g->a_batch == g->n_batch && g->n_batch > 1;
}

/* ------------------------------------------------------------ kernels --- */

/* C[m,n] = alpha * op(X)[m,k] @ op(Y)[k,n] + beta * C, row-major with
 * leading dimensions (in elements). */
typedef struct gemm_call {
  int tx, ty;
  int64_t m, n, k;
  double alpha, beta;
  const void *x;
  int64_t ldx;
  const void *y;
  int64_t ldy;
  void *c;
  int64_t ldc;
} gemm_call;

static int fits_blas(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* k == 0: C = beta * C (BLAS may return early and leave C as it was). */
static void scale_block(em_dtype dt, void *c, int64_t m, int64_t n, int64_t ldc, double beta) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      if (dt == EM_F32) {
        float *p = (float *)c + i * ldc + j;
        *p = beta == 0 ? 0.0f : (float)(beta * *p);
      } else {
        double *p = (double *)c + i * ldc + j;
        *p = beta == 0 ? 0.0 : beta * *p;
      }
    }
}

static void float_gemm(em_dtype dt, const gemm_call *c) {
  if (dt == EM_F32)
    em_blas_sgemm(c->tx, c->ty, (int)c->m, (int)c->n, (int)c->k, (float)c->alpha, c->x, (int)c->ldx, c->y,
                  (int)c->ldy, (float)c->beta, c->c, (int)c->ldc);
  else
    em_blas_dgemm(c->tx, c->ty, (int)c->m, (int)c->n, (int)c->k, c->alpha, c->x, (int)c->ldx, c->y, (int)c->ldy,
                  c->beta, c->c, (int)c->ldc);
}

/* Integer products: C = op(X) @ op(Y) (+ C when beta != 0), wrapping on
 * overflow (unsigned arithmetic); alpha is 1 for integer matmul. */
static int64_t int_at(em_dtype dt, const void *p, int64_t i) {
  return dt == EM_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static void int_gemm(em_dtype dt, const gemm_call *c) {
  for (int64_t i = 0; i < c->m; i++)
    for (int64_t j = 0; j < c->n; j++) {
      uint64_t s = c->beta != 0 ? (uint64_t)int_at(dt, c->c, i * c->ldc + j) : 0;
      for (int64_t p = 0; p < c->k; p++) {
        int64_t xv = int_at(dt, c->x, c->tx ? p * c->ldx + i : i * c->ldx + p);
        int64_t yv = int_at(dt, c->y, c->ty ? j * c->ldy + p : p * c->ldy + j);
        s += (uint64_t)xv * (uint64_t)yv;
      }
      if (dt == EM_I32) ((int32_t *)c->c)[i * c->ldc + j] = (int32_t)(uint32_t)s;
      else ((int64_t *)c->c)[i * c->ldc + j] = (int64_t)s;
    }
}

/* The portable GEMM: each element of C exactly as kernels/gemm.cu computes
 * it (kernels/gemm_math.h: acc = fma(x, y, acc) for k = 0 .. K-1 from +0,
 * then alpha * acc, then + beta * c or, for a later product of a sum over
 * broadcast batches, prev + t), vectorised across the columns of C. op(Y) is
 * copied one panel of NB columns at a time into a contiguous [K][NB] buffer
 * (zero-padded past N; a copy changes no bits), then PG_ROWS rows x NB
 * columns of accumulators, few enough to stay in vector registers (NB = 16
 * floats or 8 doubles: 8 AVX2 registers), take one panel row at a time, in
 * k order. Without memory for the panel a plain loop computes the same.
 *
 * The fma is what the hot loop needs the CPU for: a library built for
 * baseline x86-64 would call glibc's fmaf for every element (correct, ~10x
 * slower). So pg_block is compiled three times, like EM_SIMD_CLONES
 * (engine/op.h) but with an FMA3 variant instead of the AVX2 one (GCC's
 * "avx2" does not imply FMA; every AVX2 CPU has FMA3): vfmadd on 8 floats
 * (or 16 with AVX-512F, which implies FMA), and the baseline variant for
 * CPUs without FMA. Each lane's vfmadd rounds once, like fmaf and the GPU's
 * fma.rn, so every variant gives the same bits. */
#define PG_ROWS 4
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__) && \
    !defined(EM_NO_SIMD_CLONES)
#define PG_CLONES __attribute__((target_clones("default", "fma", "avx512f")))
#else
#define PG_CLONES /* other targets: FMA is baseline (aarch64) or fmaf is called */
#endif

#define PORTABLE_GEMM(T, SUF, NB)                                                                               \
  /* acc[r][j] = sum over p of x[r][p * xsp] * panel[p * NB + j], in p order (rows past the matrix repeat     \
   * its last row; their sums are dropped). */                                                                \
  PG_CLONES static void pg_block_##SUF(T acc[PG_ROWS][NB], const T *x0, const T *x1, const T *x2,          \
                                            const T *x3, int64_t xsp, const T *panel, int64_t k) {            \
    T a0[NB], a1[NB], a2[NB], a3[NB];                                                                         \
    for (int j = 0; j < NB; j++) a0[j] = a1[j] = a2[j] = a3[j] = 0;                                           \
    for (int64_t p = 0; p < k; p++) {                                                                         \
      const T *yr = panel + p * NB;                                                                           \
      T v0 = x0[p * xsp], v1 = x1[p * xsp], v2 = x2[p * xsp], v3 = x3[p * xsp];                               \
      _Pragma("GCC unroll 16") for (int j = 0; j < NB; j++) {                                                  \
        a0[j] = em_gemm_step_##SUF(a0[j], v0, yr[j]);                                                         \
        a1[j] = em_gemm_step_##SUF(a1[j], v1, yr[j]);                                                         \
        a2[j] = em_gemm_step_##SUF(a2[j], v2, yr[j]);                                                         \
        a3[j] = em_gemm_step_##SUF(a3[j], v3, yr[j]);                                                         \
      }                                                                                                       \
    }                                                                                                         \
    for (int j = 0; j < NB; j++) {                                                                            \
      acc[0][j] = a0[j];                                                                                      \
      acc[1][j] = a1[j];                                                                                      \
      acc[2][j] = a2[j];                                                                                      \
      acc[3][j] = a3[j];                                                                                      \
    }                                                                                                         \
  }                                                                                                           \
                                                                                                              \
  static void pg_store_##SUF(const gemm_call *c, int64_t i, int64_t j, T acc, int accumulate) {               \
    T *o = (T *)c->c + i * c->ldc + j, beta = (T)c->beta;                                                     \
    T prev = accumulate ? *o : (T)0, cv = (!accumulate && beta != (T)0) ? *o : (T)0;                          \
    *o = em_gemm_out_##SUF(acc, (T)c->alpha, accumulate, prev, beta, cv);                                     \
  }                                                                                                           \
                                                                                                              \
  static void portable_gemm_##SUF(const gemm_call *c, int accumulate) {                                       \
    const T *x = c->x, *y = c->y;                                                                             \
    int64_t xsr = c->tx ? 1 : c->ldx, xsp = c->tx ? c->ldx : 1;                                               \
    int64_t ysp = c->ty ? 1 : c->ldy, ysj = c->ty ? c->ldy : 1;                                               \
    T *panel = malloc(sizeof(T) * (size_t)(c->k > 0 ? c->k : 1) * NB);                                        \
    if (!panel) {                                                                                             \
      for (int64_t i = 0; i < c->m; i++)                                                                      \
        for (int64_t j = 0; j < c->n; j++) {                                                                  \
          T acc = 0;                                                                                          \
          for (int64_t p = 0; p < c->k; p++)                                                                  \
            acc = em_gemm_step_##SUF(acc, x[i * xsr + p * xsp], y[p * ysp + j * ysj]);                        \
          pg_store_##SUF(c, i, j, acc, accumulate);                                                           \
        }                                                                                                     \
      return;                                                                                                 \
    }                                                                                                         \
    T acc[PG_ROWS][NB];                                                                                       \
    for (int64_t j0 = 0; j0 < c->n; j0 += NB) {                                                               \
      int64_t w = c->n - j0 < NB ? c->n - j0 : NB;                                                            \
      for (int64_t p = 0; p < c->k; p++)                                                                      \
        for (int64_t j = 0; j < NB; j++) panel[p * NB + j] = j < w ? y[p * ysp + (j0 + j) * ysj] : (T)0;     \
      for (int64_t i0 = 0; i0 < c->m; i0 += PG_ROWS) {                                                        \
        int rows = c->m - i0 < PG_ROWS ? (int)(c->m - i0) : PG_ROWS;                                          \
        const T *xr[PG_ROWS];                                                                                 \
        for (int r = 0; r < PG_ROWS; r++) xr[r] = x + (i0 + (r < rows ? r : rows - 1)) * xsr;                 \
        pg_block_##SUF(acc, xr[0], xr[1], xr[2], xr[3], xsp, panel, c->k);                                    \
        for (int r = 0; r < rows; r++)                                                                        \
          for (int64_t j = 0; j < w; j++) pg_store_##SUF(c, i0 + r, j0 + j, acc[r][j], accumulate);          \
      }                                                                                                       \
    }                                                                                                         \
    free(panel);                                                                                              \
  }
PORTABLE_GEMM(float, f32, 16)
PORTABLE_GEMM(double, f64, 8)

/* One product on the calling thread. accumulate (portable mode): a later
 * product of a sum over broadcast batches, added to what C holds. */
static void gemm_one(em_dtype dt, const gemm_call *c, int portable, int accumulate) {
  if (c->m == 0 || c->n == 0) return;
  if (dt == EM_I32 || dt == EM_I64) int_gemm(dt, c);
  else if (portable && dt == EM_F32) portable_gemm_f32(c, accumulate);
  else if (portable) portable_gemm_f64(c, accumulate);
  else if (c->k == 0) scale_block(dt, c->c, c->m, c->n, c->ldc, c->beta);
  else float_gemm(dt, c);
}

/* The [r0, r0+h) x [c0, c0+w) block of a product's C. */
static gemm_call sub_block(const gemm_call *c, size_t es, int64_t r0, int64_t h, int64_t c0, int64_t w) {
  gemm_call s = *c;
  s.m = h;
  s.n = w;
  s.x = (const char *)c->x + (size_t)(c->tx ? r0 : r0 * c->ldx) * es;
  s.y = (const char *)c->y + (size_t)(c->ty ? c0 * c->ldy : c0) * es;
  s.c = (char *)c->c + (size_t)(r0 * c->ldc + c0) * es;
  return s;
}

/* Products below this many multiply-adds are not split into tiles, and a
 * whole plan below PAR_WORK runs on one thread. */
#define TILE_WORK 2097152.0
#define PAR_WORK 262144.0
/* Tile shape, a function of the product's shape only (never of the thread
 * count, so bits never depend on it). One single-threaded OpenBLAS call per
 * tile costs a little per call (panel packing, edge kernels), and calls
 * running side by side compete for cache, so large products get large
 * tiles: 512 x 1024 once C has 1024^2 elements. Measured on one thread
 * against one whole-matrix call (bench/gemm_tiles.c, OpenBLAS 0.3.21,
 * 2026-11-21): 128 x 256 tiles ran at 0.82-0.92 of it, 512 x 1024 at
 * 0.96-0.99; two threads on a 1024^2 product made 180-194 GFLOP/s with
 * 512 x 1024 tiles and 96-130 with 256 x 1024. Smaller products (an MLP
 * layer: 256 x 512) keep 128 x 256 tiles so several threads get work. The
 * price: a 1024^2 product has only 2 tiles, so it uses at most 2 threads. */
#define TILE_ROWS 128
#define TILE_COLS 256
#define BIG_TILE_ROWS 512
#define BIG_TILE_COLS 1024
#define BIG_PRODUCT (1024.0 * 1024.0)
/* From 4096^2 elements of C: 1024 x 2048 tiles (8 for 4096^2). Two threads on a
 * 4096^2 product (OpenBLAS direct: 205 GFLOP/s) made 186 with 512 x 1024 tiles
 * and 198 with 1024 x 2048 (2026-11-21, same machine). */
#define HUGE_TILE_ROWS 1024
#define HUGE_TILE_COLS 2048
#define HUGE_PRODUCT (4096.0 * 4096.0)

/* Tile extent along one axis: about `unit`, balanced, a multiple of 16.
 * A function of the shape alone, never of the thread count. */
static int64_t tile_extent(int64_t len, int64_t unit) {
  if (len <= unit) return len > 0 ? len : 1;
  int64_t tiles = (len + unit - 1) / unit, e = (len + tiles - 1) / tiles;
  return (e + 15) / 16 * 16;
}

/* A batch of products into target matrices: product i adds
 * alpha op(X + ox) op(Y + oy) into C + oc. Products sharing a target run
 * one after another in batch order (the first with beta_first, the rest
 * accumulating), so sums never depend on scheduling. */
typedef struct gemm_item {
  int64_t ox, oy, oc, idx;
} gemm_item;

typedef struct gemm_plan {
  em_dtype dt;
  gemm_call proto;            /* transposes, sizes, alpha, leading dims; pointers are the bases */
  double beta_first;
  gemm_item *items;           /* sorted by (oc, idx) */
  int64_t count;
} gemm_plan;

static int item_cmp(const void *pa, const void *pb) {
  const gemm_item *a = pa, *b = pb;
  if (a->oc != b->oc) return a->oc < b->oc ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Work items: (group of products sharing a target) x (tile of the target).
 * Each tile is computed by one single-threaded BLAS call per product, so
 * every element's arithmetic is fixed by the shapes alone; the tiles run in
 * parallel. */
static em_status gemm_plan_run(const em_op_args *a, gemm_plan *p) {
  const gemm_call *c = &p->proto;
  if (p->count == 0 || c->m == 0 || c->n == 0) return EM_OK; /* nothing to compute: no OpenBLAS needed */
  /* Ember parallelises products itself (the tiles below) and em_blas_ready
   * keeps OpenBLAS single-threaded: OpenBLAS's own threading changes the
   * blocking and which kernel (edge or full tile) computes an element, so its
   * results depend on the thread count (measured on 0.3.21: dgemm
   * 300x500x400 differs in ~1% of elements between 1, 2 and 4 threads, sgemm
   * between 1 and 2). Loaded here, before the parallel loop. */
  int blas = !a->portable && (p->dt == EM_F32 || p->dt == EM_F64);
  em_status st = blas ? em_blas_ready() : EM_OK;
  if (st) return st;
  for (int64_t i = 1; i < p->count; i++)
    if (item_cmp(&p->items[i - 1], &p->items[i]) > 0) {
      qsort(p->items, (size_t)p->count, sizeof *p->items, item_cmp);
      break;
    }
  int64_t *start = malloc(sizeof *start * (size_t)(p->count + 1)), n_groups = 0;
  if (!start) return em_op_fail(a, "no memory to plan %lld products", (long long)p->count);
  for (int64_t i = 0; i < p->count; i++)
    if (i == 0 || p->items[i].oc != p->items[i - 1].oc) start[n_groups++] = i;
  start[n_groups] = p->count;

  double work = (double)c->m * (double)c->n * (double)(c->k > 0 ? c->k : 1); /* double: no overflow */
  int split = work >= TILE_WORK;
  double cells = (double)c->m * (double)c->n;
  int64_t unit_r = cells >= HUGE_PRODUCT ? HUGE_TILE_ROWS : cells >= BIG_PRODUCT ? BIG_TILE_ROWS : TILE_ROWS;
  int64_t unit_c = cells >= HUGE_PRODUCT ? HUGE_TILE_COLS : cells >= BIG_PRODUCT ? BIG_TILE_COLS : TILE_COLS;
  int64_t th = split ? tile_extent(c->m, unit_r) : c->m;
  int64_t tw = split ? tile_extent(c->n, unit_c) : c->n;
  int64_t rt = (c->m + th - 1) / th, ct = (c->n + tw - 1) / tw, n_work = n_groups * rt * ct;
  int par = n_work > 1 && work * (double)p->count >= PAR_WORK;
  size_t es = em_dtype_size(p->dt);
#pragma omp parallel for schedule(dynamic, 1) num_threads(em_cpu_threads()) if (par)
  for (int64_t w = 0; w < n_work; w++) {
    int64_t g = w / (rt * ct), ti = (w % (rt * ct)) / ct, tj = w % ct;
    int64_t r0 = ti * th, c0 = tj * tw;
    int64_t h = c->m - r0 < th ? c->m - r0 : th, wd = c->n - c0 < tw ? c->n - c0 : tw;
    for (int64_t i = start[g]; i < start[g + 1]; i++) {
      gemm_call one = *c;
      one.x = (const char *)c->x + (size_t)p->items[i].ox * es;
      one.y = (const char *)c->y + (size_t)p->items[i].oy * es;
      one.c = (char *)c->c + (size_t)p->items[i].oc * es;
      one.beta = i == start[g] ? p->beta_first : 1.0;
      gemm_call sub = sub_block(&one, es, r0, h, c0, wd);
      gemm_one(p->dt, &sub, a->portable, i != start[g]);
    }
  }
  free(start);
  return EM_OK;
}

/* A plan over count products (items allocated, offsets zero). */
static em_status gemm_plan_init(const em_op_args *a, gemm_plan *p, em_dtype dt, const gemm_call *proto,
                                double beta_first, int64_t count) {
  p->dt = dt;
  p->proto = *proto;
  p->beta_first = beta_first;
  p->count = count;
  p->items = calloc((size_t)(count > 0 ? count : 1), sizeof *p->items);
  if (!p->items) return em_op_fail(a, "no memory to plan %lld products", (long long)count);
  return EM_OK;
}

static em_status check_blas_sizes(const em_op_args *a, const mm_geom *g) {
  if (!fits_blas(g->m) || !fits_blas(g->n) || !fits_blas(g->k) || !fits_blas(g->m * (g->n_batch > 0 ? g->n_batch : 1)))
    return em_op_fail(a, "matrix dimensions beyond %d are not supported by the BLAS interface", INT_MAX);
  return EM_OK;
}

static em_status check_dtype(const em_op_args *a, em_dtype want, int allow_int) {
  em_dtype t = a->in[0].dtype;
  if (t != EM_F32 && t != EM_F64 && !(allow_int && (t == EM_I32 || t == EM_I64)))
    return em_op_fail(a, "dtype %s is not supported (expected f32 or f64%s)", em_dtype_name(t),
                      allow_int ? ", i32, i64" : "");
  for (int i = 1; i < a->n_in; i++)
    if (a->in[i].dtype != want)
      return em_op_fail(a, "input %d has dtype %s, expected %s like input 0", i, em_dtype_name(a->in[i].dtype),
                        em_dtype_name(want));
  return EM_OK;
}

em_status em_linalg_gemm_cpu(const em_op_args *a, const em_linalg_gemm *g) {
  if (g->nd != 0 || (g->dt != EM_F32 && g->dt != EM_F64))
    return em_op_fail(a, "em_linalg_gemm_cpu: one f32 or f64 product expected");
  if (!fits_blas(g->m) || !fits_blas(g->n) || !fits_blas(g->k) || !fits_blas(g->ldx) || !fits_blas(g->ldy) ||
      !fits_blas(g->ldc))
    return em_op_fail(a, "matrix dimensions beyond %d are not supported by the BLAS interface", INT_MAX);
  gemm_call c = {.tx = g->tx, .ty = g->ty, .m = g->m, .n = g->n, .k = g->k, .alpha = g->alpha, .x = g->x,
                 .ldx = g->ldx, .y = g->y, .ldy = g->ldy, .c = g->c, .ldc = g->ldc};
  gemm_plan p;
  em_status s = gemm_plan_init(a, &p, g->dt, &c, g->beta, 1);
  if (s) return s;
  s = gemm_plan_run(a, &p);
  free(p.items);
  return s;
}

/* ------------------------------------------------------------- matmul --- */

static em_status matmul_infer(em_op_args *a) {
  em_status s = check_dtype(a, a->in[0].dtype, 1);
  if (s) return s;
  mm_geom g;
  return mm_geometry(a, &a->in[0], &a->in[1], em_attr_int(a, "transpose_a", 0),
                     em_attr_int(a, "transpose_b", 0), &g, &a->out[0]);
}

/* The stored leading dimension of a [rows, cols] matrix is cols. */
static int64_t lead_a(const mm_geom *g) { return g->ta ? g->m : g->k; }
static int64_t lead_b(const mm_geom *g) { return g->tb ? g->k : g->n; }

/* Fast mode, f32: x [m, k] (any batch stacked into m) times one matrix w through oneDNN's
 * matmul, whose kernels take w in the layout they prefer, reordered once and kept with the
 * graph value (OpenBLAS packs both operands again on every call: 15-25% of a transformer
 * layer's projections, 5x on a batch-1 classifier). *done = 0 where it does not apply. */
static em_status dnnl_product(const em_op_args *a, const mm_geom *g, em_tensor *x, em_tensor *w, const void *bias,
                              em_tensor *y, int *done) {
  *done = 0;
  if (a->portable || a->in[0].dtype != EM_F32 || g->ta || g->b_batch != 1 || (g->n_batch != 1 && !fold_batches(g)))
    return EM_OK;
  const em_dnnl_matmul_geom mm = {.m = g->m * (g->n_batch > 1 ? g->n_batch : 1), .k = g->k, .n = g->n, .tw = g->tb};
  return em_dnnl_matmul(&mm, w, em_tensor_data(x), bias, em_tensor_data(y), done);
}

static em_status matmul_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  mm_geom g;
  em_shape ys;
  em_status s = mm_geometry(a, &a->in[0], &a->in[1], em_attr_int(a, "transpose_a", 0),
                            em_attr_int(a, "transpose_b", 0), &g, &ys);
  if (s || (s = check_blas_sizes(a, &g))) return s;
  int done;
  if ((s = dnnl_product(a, &g, in[0], in[1], NULL, out[0], &done)) || done) return s;
  gemm_call c = {.tx = g.ta, .ty = g.tb, .m = g.m, .n = g.n, .k = g.k, .alpha = 1, .x = em_tensor_data(in[0]),
                 .ldx = lead_a(&g), .y = em_tensor_data(in[1]), .ldy = lead_b(&g), .c = em_tensor_data(out[0]),
                 .ldc = g.n};
  int fold = fold_batches(&g);
  if (fold) c.m *= g.n_batch; /* one product of the stacked a */
  gemm_plan p;
  if ((s = gemm_plan_init(a, &p, a->in[0].dtype, &c, 0.0, fold ? 1 : g.n_batch))) return s;
  for (int64_t idx = 0; idx < p.count && !fold; idx++) {
    batch_offsets(&g, idx, &p.items[idx].ox, &p.items[idx].oy);
    p.items[idx].oc = idx * g.m * g.n;
    p.items[idx].idx = idx;
  }
  s = gemm_plan_run(a, &p);
  free(p.items);
  return s;
}

/* Batch strides of the contiguous result (and of dy), in elements. */
static void result_strides(const mm_geom *g, int64_t *st) {
  int64_t step = g->m * g->n;
  for (int j = g->nb - 1; j >= 0; j--) {
    st[j] = step;
    step *= g->batch[j];
  }
}

/* A half product (EM_HALF_GPU_NATIVE): cuBLAS on the half tensors where it takes them (f16 /
 * bf16 operands and output, f32 accumulation, tensor cores), else the member `self` on f32
 * copies, with the reason reported. The f32 run of self never comes back here. */
static em_status half_product(const em_op_args *a, em_tensor *const *in, em_tensor *const *out,
                              const em_linalg_gemm *q, em_op_kernel self) {
  char why[300];
  if (em_linalg_half_takes(a, q, why, sizeof why)) {
    em_status s = em_linalg_gemm_gpu(a, q);
    if (s != EM_ERR_UNSUPPORTED) return s;
    snprintf(why, sizeof why, "%s", em_last_error()); /* cuBLAS declined it: the f32 road, which overwrites all */
    em_clear_error();
  }
  return em_ops_half_via_f32(a, in, out, self, why);
}

static int half_dtype(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

/* The GPU runs the same products as matmul_cpu (the same fold), each element
 * summed as the portable CPU GEMM sums it. */
static em_status matmul_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  mm_geom g;
  em_shape ys;
  em_status s = mm_geometry(a, &a->in[0], &a->in[1], em_attr_int(a, "transpose_a", 0),
                            em_attr_int(a, "transpose_b", 0), &g, &ys);
  if (s) return s;
  em_linalg_gemm q = {.dt = a->in[0].dtype, .tx = g.ta, .ty = g.tb, .m = g.m, .n = g.n, .k = g.k,
                      .ldx = lead_a(&g), .ldy = lead_b(&g), .ldc = g.n, .alpha = 1, .x = em_tensor_data(in[0]),
                      .y = em_tensor_data(in[1]), .c = em_tensor_data(out[0])};
  if (fold_batches(&g)) {
    q.m *= g.n_batch;
  } else {
    q.nd = g.nb;
    memcpy(q.dims, g.batch, sizeof q.dims);
    memcpy(q.sx, g.a_stride, sizeof q.sx);
    memcpy(q.sy, g.b_stride, sizeof q.sy);
    result_strides(&g, q.sc);
  }
  if (half_dtype(q.dt)) return half_product(a, in, out, &q, matmul_gpu);
  return em_linalg_gemm_gpu(a, &q);
}

/* Gradient of one operand through _matmul_grad (any float dtype; none for integers). */
static em_status mm_grad_node(em_graph *gr, em_var dy, em_var a, em_var b, int which, int ta, int tb, double alpha,
                              em_var *out) {
  em_attr at[4] = {em_attr_i("which", which), em_attr_i("transpose_a", ta), em_attr_i("transpose_b", tb),
                   em_attr_f("alpha", alpha)};
  em_var in[3] = {dy, a, b};
  return em_apply(gr, "_matmul_grad", in, 3, at, 4, out, 1);
}

static em_status matmul_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                 const em_var *dy, em_var *din) {
  (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  int ta = (int)em_attr_int(a, "transpose_a", 0), tb = (int)em_attr_int(a, "transpose_b", 0);
  em_status s = mm_grad_node(g, dy[0], x[0], x[1], 0, ta, tb, 1.0, &din[0]);
  if (!s) s = mm_grad_node(g, dy[0], x[0], x[1], 1, ta, tb, 1.0, &din[1]);
  return s;
}

/* ------------------------------------------------------- _matmul_grad --- */

static em_status mm_grad_infer(em_op_args *a) {
  em_status s = check_dtype(a, a->in[0].dtype, 0);
  if (s) return s;
  int64_t which = em_attr_int(a, "which", -1);
  if (which != 0 && which != 1) return em_op_fail(a, "attribute which must be 0 (d/da) or 1 (d/db), got %lld", (long long)which);
  mm_geom g;
  em_shape ys;
  s = mm_geometry(a, &a->in[1], &a->in[2], em_attr_int(a, "transpose_a", 0),
                  em_attr_int(a, "transpose_b", 0), &g, &ys);
  if (s) return s;
  if (ys.ndim != a->in[0].ndim) return em_op_fail(a, "dy has rank %d, the product rank %d", a->in[0].ndim, ys.ndim);
  for (int i = 0; i < ys.ndim; i++)
    if (ys.dims[i] != a->in[0].dims[i] && !is_dyn(ys.dims[i]) && !is_dyn(a->in[0].dims[i]))
      return em_op_fail(a, "dy's axis %d is %lld, the product's %lld", i, (long long)a->in[0].dims[i],
                        (long long)ys.dims[i]);
  a->out[0] = a->in[1 + which];
  return EM_OK;
}

/* The gemm adding batch matrix idx's contribution to d/da (in a's stored
 * orientation): dA += dY op(B)^T, or for a transposed a, op(B) dY^T. */
static void grad_a_call(const mm_geom *g, gemm_call *c) {
  if (!g->ta) {
    *c = (gemm_call){.tx = 0, .ldx = g->n, .ty = !g->tb, .ldy = g->tb ? g->k : g->n, .m = g->m, .n = g->k, .k = g->n,
                     .ldc = g->k};
  } else {
    *c = (gemm_call){.tx = g->tb, .ldx = g->tb ? g->k : g->n, .ty = 1, .ldy = g->n, .m = g->k, .n = g->m, .k = g->n,
                     .ldc = g->m};
  }
}

/* d/db (in b's stored orientation): dB += op(A)^T dY, or for a transposed b, dY^T op(A). */
static void grad_b_call(const mm_geom *g, gemm_call *c) {
  if (!g->tb) {
    *c = (gemm_call){.tx = !g->ta, .ldx = g->ta ? g->m : g->k, .ty = 0, .ldy = g->n, .m = g->k, .n = g->n, .k = g->m,
                     .ldc = g->n};
  } else {
    *c = (gemm_call){.tx = 1, .ldx = g->n, .ty = g->ta, .ldy = g->ta ? g->m : g->k, .m = g->n, .n = g->k, .k = g->m,
                     .ldc = g->k};
  }
}

/* Whether the product for d/d(operand) reads dy as its first factor
 * (grad_a_call / grad_b_call order their factors so). */
static int grad_x_is_dy(const mm_geom *g, int which) { return which == 0 ? !g->ta : g->tb; }

static em_status mm_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  mm_geom g;
  em_shape ys;
  em_status s = mm_geometry(a, &a->in[1], &a->in[2], em_attr_int(a, "transpose_a", 0),
                            em_attr_int(a, "transpose_b", 0), &g, &ys);
  if (s || (s = check_blas_sizes(a, &g))) return s;
  int which = (int)em_attr_int(a, "which", 0);
  em_dtype dt = a->in[0].dtype;
  const void *pdy = em_tensor_data(in[0]), *other = em_tensor_data(in[which == 0 ? 2 : 1]);
  void *pd = em_tensor_data(out[0]);
  /* Zeros first: every product then accumulates, and a target no product
   * reaches (an empty batch) stays zero. */
  memset(pd, 0, (size_t)em_tensor_numel(out[0]) * em_dtype_size(dt));
  gemm_call c;
  if (which == 0) grad_a_call(&g, &c);
  else grad_b_call(&g, &c);
  int x_dy = grad_x_is_dy(&g, which);
  c.alpha = em_attr_float(a, "alpha", 1.0);
  c.x = x_dy ? pdy : other;
  c.y = x_dy ? other : pdy;
  c.c = pd;
  int fold = fold_batches(&g);
  if (fold && which == 0) c.m *= g.n_batch; /* d/da of the stacked a: one product */
  if (fold && which == 1) c.k *= g.n_batch; /* d/db: one product over every stacked row */
  gemm_plan p;
  /* Portable mode: the first product replaces C (t, not t + 0: the GPU's
   * order, kernels/gemm_math.h), the rest add to it. */
  if ((s = gemm_plan_init(a, &p, dt, &c, a->portable ? 0.0 : 1.0, fold ? 1 : g.n_batch))) return s;
  for (int64_t idx = 0; idx < p.count && !fold; idx++) {
    int64_t oa, ob, o_dy = idx * g.m * g.n;
    batch_offsets(&g, idx, &oa, &ob);
    int64_t o_other = which == 0 ? ob : oa;
    p.items[idx] = (gemm_item){.ox = x_dy ? o_dy : o_other, .oy = x_dy ? o_other : o_dy,
                               .oc = which == 0 ? oa : ob, .idx = idx};
  }
  s = gemm_plan_run(a, &p);
  free(p.items);
  return s;
}

/* The products of mm_grad_cpu (the same fold, the same batch order). */
static em_status mm_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  mm_geom g;
  em_shape ys;
  em_status s = mm_geometry(a, &a->in[1], &a->in[2], em_attr_int(a, "transpose_a", 0),
                            em_attr_int(a, "transpose_b", 0), &g, &ys);
  if (s) return s;
  int which = (int)em_attr_int(a, "which", 0);
  gemm_call c;
  if (which == 0) grad_a_call(&g, &c);
  else grad_b_call(&g, &c);
  int x_dy = grad_x_is_dy(&g, which);
  const void *pdy = em_tensor_data(in[0]), *other = em_tensor_data(in[which == 0 ? 2 : 1]);
  em_linalg_gemm q = {.dt = a->in[0].dtype, .tx = c.tx, .ty = c.ty, .m = c.m, .n = c.n, .k = c.k, .ldx = c.ldx,
                      .ldy = c.ldy, .ldc = c.ldc, .alpha = em_attr_float(a, "alpha", 1.0), .x = x_dy ? pdy : other,
                      .y = x_dy ? other : pdy, .c = em_tensor_data(out[0])};
  if (fold_batches(&g)) {
    if (which == 0) q.m *= g.n_batch;
    else q.k *= g.n_batch;
  } else {
    int64_t dy_st[EM_MAX_DIMS];
    result_strides(&g, dy_st);
    const int64_t *other_st = which == 0 ? g.b_stride : g.a_stride;
    q.nd = g.nb;
    memcpy(q.dims, g.batch, sizeof q.dims);
    memcpy(q.sx, x_dy ? dy_st : other_st, sizeof q.sx);
    memcpy(q.sy, x_dy ? other_st : dy_st, sizeof q.sy);
    memcpy(q.sc, which == 0 ? g.a_stride : g.b_stride, sizeof q.sc);
  }
  if (half_dtype(q.dt)) return half_product(a, in, out, &q, mm_grad_gpu);
  return em_linalg_gemm_gpu(a, &q);
}

/* --------------------------------------------------------------- gemm --- */

static em_status gemm_attrs(const em_op_args *a, int *ta, int *tb) {
  int64_t x = em_attr_int(a, "transA", 0), y = em_attr_int(a, "transB", 0);
  if (x != 0 && x != 1) return em_op_fail(a, "attribute transA must be 0 or 1, got %lld", (long long)x);
  if (y != 0 && y != 1) return em_op_fail(a, "attribute transB must be 0 or 1, got %lld", (long long)y);
  *ta = (int)x;
  *tb = (int)y;
  return EM_OK;
}

/* c broadcasts to [m, n] (ONNX's unidirectional broadcasting). */
static em_status gemm_check_c(const em_op_args *a, const em_shape *c, int64_t m, int64_t n) {
  if (c->ndim > 2) return em_op_fail(a, "c must have rank <= 2 to broadcast to [M,N], it has rank %d", c->ndim);
  int64_t want[2] = {m, n};
  for (int i = 0; i < c->ndim; i++) {
    int64_t d = c->dims[i], w = want[2 - c->ndim + i];
    if (d != 1 && d != w && !is_dyn(d) && !is_dyn(w))
      return em_op_fail(a, "c does not broadcast to the product's [%lld,%lld] (axis %d is %lld)", (long long)m,
                        (long long)n, i, (long long)d);
  }
  return EM_OK;
}

static em_status gemm_infer(em_op_args *a) {
  em_status s = check_dtype(a, a->in[0].dtype, 0);
  if (s) return s;
  int ta, tb;
  if ((s = gemm_attrs(a, &ta, &tb))) return s;
  if (a->in[0].ndim != 2 || a->in[1].ndim != 2)
    return em_op_fail(a, "a and b must be 2-D (ranks %d and %d)", a->in[0].ndim, a->in[1].ndim);
  mm_geom g;
  if ((s = mm_geometry(a, &a->in[0], &a->in[1], ta, tb, &g, &a->out[0]))) return s;
  if (a->n_in == 3) return gemm_check_c(a, &a->in[2], g.m, g.n);
  return EM_OK;
}

/* y = c broadcast to [m, n] (the starting value gemm scales by beta). */
static void gemm_fill_c(em_dtype dt, const em_shape *cs, const void *c, void *y, int64_t m, int64_t n) {
  int64_t rows = cs->ndim == 2 ? cs->dims[0] : 1, cols = cs->ndim >= 1 ? cs->dims[cs->ndim - 1] : 1;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t src = (rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j);
      if (dt == EM_F32) ((float *)y)[i * n + j] = ((const float *)c)[src];
      else ((double *)y)[i * n + j] = ((const double *)c)[src];
    }
}

static em_status gemm_product_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

/* A CUDA gemm step handed to the host carries its fused gelu (a->post) along: applied here
 * with the gelu op's CPU kernel, as the separate step would have. */
static em_status gemm_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_status s = gemm_product_cpu(a, in, out);
  return !s && a->post ? em_post_apply(a->post, out[0]) : s;
}

static em_status gemm_product_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int ta, tb;
  mm_geom g;
  em_shape ys;
  em_status s = gemm_attrs(a, &ta, &tb);
  if (s || (s = mm_geometry(a, &a->in[0], &a->in[1], ta, tb, &g, &ys)) || (s = check_blas_sizes(a, &g))) return s;
  em_dtype dt = a->in[0].dtype;
  double beta = a->n_in == 3 ? em_attr_float(a, "beta", 1.0) : 0.0;
  /* x w + a bias row (a Linear layer), through oneDNN where it applies */
  const em_shape *cs = a->n_in == 3 ? &a->in[2] : NULL;
  const int bias_row = cs && beta == 1.0 &&
                       ((cs->ndim == 1 && cs->dims[0] == g.n) || (cs->ndim == 2 && cs->dims[0] == 1 && cs->dims[1] == g.n));
  if (em_attr_float(a, "alpha", 1.0) == 1.0 && (!cs || bias_row)) {
    int done;
    if ((s = dnnl_product(a, &g, in[0], in[1], cs ? em_tensor_data(in[2]) : NULL, out[0], &done)) || done) return s;
  }
  if (a->n_in == 3 && beta != 0) gemm_fill_c(dt, &a->in[2], em_tensor_data(in[2]), em_tensor_data(out[0]), g.m, g.n);
  else beta = 0; /* BLAS semantics: c's values are not read */
  gemm_call c = {.tx = ta, .ty = tb, .m = g.m, .n = g.n, .k = g.k, .alpha = em_attr_float(a, "alpha", 1.0),
                 .x = em_tensor_data(in[0]), .ldx = lead_a(&g), .y = em_tensor_data(in[1]), .ldy = lead_b(&g),
                 .c = em_tensor_data(out[0]), .ldc = g.n};
  gemm_plan p;
  if ((s = gemm_plan_init(a, &p, dt, &c, beta, 1))) return s;
  s = gemm_plan_run(a, &p);
  free(p.items);
  return s;
}

/* c is read in place through broadcast strides (what gemm_fill_c copies). */
static em_status gemm_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int ta, tb;
  mm_geom g;
  em_shape ys;
  em_status s = gemm_attrs(a, &ta, &tb);
  if (s || (s = mm_geometry(a, &a->in[0], &a->in[1], ta, tb, &g, &ys))) return s;
  em_linalg_gemm q = {.dt = a->in[0].dtype, .tx = ta, .ty = tb, .m = g.m, .n = g.n, .k = g.k, .ldx = lead_a(&g),
                      .ldy = lead_b(&g), .ldc = g.n, .alpha = em_attr_float(a, "alpha", 1.0),
                      .x = em_tensor_data(in[0]), .y = em_tensor_data(in[1]), .c = em_tensor_data(out[0])};
  double beta = a->n_in == 3 ? em_attr_float(a, "beta", 1.0) : 0.0;
  if (beta != 0) {
    const em_shape *cs = &a->in[2];
    int64_t rows = cs->ndim == 2 ? cs->dims[0] : 1, cols = cs->ndim >= 1 ? cs->dims[cs->ndim - 1] : 1;
    q.beta = beta;
    q.cin = em_tensor_data(in[2]);
    q.cin_rs = rows == 1 ? 0 : cols;
    q.cin_cs = cols == 1 ? 0 : 1;
  }
  if (half_dtype(q.dt)) return half_product(a, in, out, &q, gemm_gpu);
  /* a fused gelu (exec.c's plan_fusions): cuBLASLt's epilogue, else the gelu op's own kernel */
  int post_done = 0;
  s = em_linalg_gemm_gpu_epilogue(a, &q, &post_done);
  if (!s && a->post && !post_done) s = em_post_apply_gpu(a, a->post, out[0]);
  return s;
}

static em_status gemm_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                               em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  int ta = (int)em_attr_int(a, "transA", 0), tb = (int)em_attr_int(a, "transB", 0);
  double alpha = em_attr_float(a, "alpha", 1.0);
  em_status s = mm_grad_node(g, dy[0], x[0], x[1], 0, ta, tb, alpha, &din[0]);
  if (!s) s = mm_grad_node(g, dy[0], x[0], x[1], 1, ta, tb, alpha, &din[1]);
  if (!s && a->n_in == 3) {
    em_attr at = em_attr_f("beta", em_attr_float(a, "beta", 1.0));
    em_var in[2] = {dy[0], x[2]};
    s = em_apply(g, "_gemm_c_grad", in, 2, &at, 1, &din[2], 1);
  }
  return s;
}

/* ------------------------------------------------------ _gemm_c_grad --- */

static em_status gemm_c_grad_infer(em_op_args *a) {
  em_status s = check_dtype(a, a->in[0].dtype, 0);
  if (s) return s;
  if (a->in[0].ndim != 2) return em_op_fail(a, "dy must be 2-D, it has rank %d", a->in[0].ndim);
  if ((s = gemm_check_c(a, &a->in[1], a->in[0].dims[0], a->in[0].dims[1]))) return s;
  a->out[0] = a->in[1];
  return EM_OK;
}

static em_status gemm_c_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *cs = &a->in[1];
  em_dtype dt = a->in[0].dtype;
  int64_t m = a->in[0].dims[0], n = a->in[0].dims[1];
  int64_t rows = cs->ndim == 2 ? cs->dims[0] : 1, cols = cs->ndim >= 1 ? cs->dims[cs->ndim - 1] : 1;
  int64_t nc = rows * cols;
  double *acc = calloc((size_t)(nc ? nc : 1), sizeof *acc);
  if (!acc) return em_op_fail(a, "no memory for %lld accumulators", (long long)nc);
  const void *dy = em_tensor_data(in[0]);
  /* Row-major order over dy: the summation order is fixed. */
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double v = dt == EM_F32 ? ((const float *)dy)[i * n + j] : ((const double *)dy)[i * n + j];
      acc[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)] += v;
    }
  double beta = em_attr_float(a, "beta", 1.0);
  void *dc = em_tensor_data(out[0]);
  for (int64_t i = 0; i < nc; i++) {
    if (dt == EM_F32) ((float *)dc)[i] = (float)(beta * acc[i]);
    else ((double *)dc)[i] = beta * acc[i];
  }
  free(acc);
  return EM_OK;
}

static em_status gemm_c_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *cs = &a->in[1];
  int64_t rows = cs->ndim == 2 ? cs->dims[0] : 1, cols = cs->ndim >= 1 ? cs->dims[cs->ndim - 1] : 1;
  return em_linalg_c_grad_gpu(a, em_tensor_data(in[0]), em_tensor_data(out[0]), a->in[0].dims[0], a->in[0].dims[1],
                              rows, cols, em_attr_float(a, "beta", 1.0));
}

/* ------------------------------------------------------------- table --- */

const em_op_def em_ops_linalg[] = {
  {.name = "matmul",
   .doc = "numpy matmul (1-D operands promoted, batch axes broadcast); attrs transpose_a, transpose_b (INT, 0)",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
   .infer = matmul_infer, .cpu = matmul_cpu, .gpu = matmul_gpu, .backward = matmul_backward,
   .attrs = EM_ATTRS("transpose_a", "transpose_b"), .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  {.name = "gemm",
   .doc = "ONNX Gemm: alpha*op(a)@op(b) + beta*c, c broadcast; attrs alpha, beta (FLOAT, 1), transA, transB (INT, 0)",
   .min_inputs = 2, .max_inputs = 3, .n_outputs = 1,
   .infer = gemm_infer, .cpu = gemm_cpu, .gpu = gemm_gpu, .backward = gemm_backward,
   .attrs = EM_ATTRS("alpha", "beta", "transA", "transB"), .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  {.name = "_matmul_grad",
   .doc = "gradient of matmul/gemm into a (which=0) or b (which=1), summed over broadcast batches; attrs which, "
          "transpose_a, transpose_b, alpha",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1,
   .infer = mm_grad_infer, .cpu = mm_grad_cpu, .gpu = mm_grad_gpu, .attrs = EM_ATTRS("which", "transpose_a", "transpose_b", "alpha"),
   .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  {.name = "_gemm_c_grad",
   .doc = "gemm's gradient into c: beta * dy summed to c's shape; attr beta (FLOAT, 1)",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
   /* a sum of dy's rows or columns, no product: nothing for cuBLAS, so its half form is the f32 one */
   .infer = gemm_c_grad_infer, .cpu = gemm_c_grad_cpu, .gpu = gemm_c_grad_gpu, .attrs = EM_ATTRS("beta"), .half = EM_HALF_VIA_F32},
};
const size_t em_ops_linalg_count = sizeof em_ops_linalg / sizeof em_ops_linalg[0];
