/* Ember's own GEMM: C = alpha * op(X) op(Y) (+ beta * c), batched, with a
 * sum over broadcast batches, for f32, f64 and the integer dtypes (i32 and
 * i64 as wrapping unsigned arithmetic: the same bits as two's complement).
 *
 *   em_gemm_f32  em_gemm_f64  em_gemm_u32  em_gemm_u64
 *
 * Launch: block (256), grid (ceil(n / BN), ceil(m / BM), targets), with
 * BM = 16 * TM, BN = 16 * TN: 128 x 128 tiles (8 x 8 outputs a thread) for the
 * 4-byte types, 64 x 64 (4 x 4) for the 8-byte ones, whose registers are twice
 * as wide. ops/linalg_gpu.c is the launcher.
 *
 * Operands, row-major with leading dimensions (in elements):
 *   op(X)[i, p] = tx ? x[p * ldx + i] : x[i * ldx + p]      (m x k)
 *   op(Y)[p, j] = ty ? y[j * ldy + p] : y[p * ldy + j]      (k x n)
 *   C[i, j] = c[i * ldc + j], gemm's input c[i * cin_rs + j * cin_cs]
 *     (strides 0 where c broadcasts; read only when beta != 0)
 * Batches: block z works on target z (x, y, c advanced by z * zx, zy, zc).
 * accumulate = 1: the product is added to what c holds (prev + t, see
 * kernels/gemm_math.h): the launcher sums the products of a broadcast batch
 * axis (a gradient) by launching them in batch order. A loop over those
 * products inside the kernel kept everything live across it and cost ~100
 * registers a thread (nvcc 13, sm_90).
 *
 * Arithmetic (kernels/gemm_math.h, shared with the CPU's portable GEMM):
 * every output element sums p = 0 .. k-1 strictly in order, acc = acc +
 * x * y, no FMA (--fmad=false, -ffp-contract=off), then alpha * acc, then
 * the previous product's sum or beta * c. The tiling changes only where the
 * operands come from, never that order, so the result is the same bits on
 * every GPU, every grid and the CPU.
 *
 * Tiles: the block stages a BM x 8 slice of op(X) and an 8 x BN slice of
 * op(Y) in shared memory, k-major, each row padded by 4 so the stores of
 * either load path hit distinct banks. Loads are coalesced along whichever
 * axis is contiguous in memory (the transposes pick the path) and the next
 * slice is fetched into registers while the current one is multiplied.
 * Thread (trow, tcol) of the 16 x 16 block owns rows trow + 16 i and columns
 * tcol + 16 j: its shared-memory reads are broadcasts or consecutive words
 * (no bank conflicts) and its stores to C are coalesced along j. Out-of-range
 * rows, columns and k are loaded as 0 (the padded products add +0 to an acc
 * that is never -0: no change) and never stored. */
#include "em_kernel.h"
#include "gemm_math.h"

#define EM_GEMM_BK 8
#define EM_GEMM_THREADS 256
#define EM_GEMM_SIDE 16 /* the block is EM_GEMM_SIDE x EM_GEMM_SIDE threads */

#if defined(__CUDACC__) || defined(__CUDA__)
#define EM_GEMM_UNROLL _Pragma("unroll")
#else
#define EM_GEMM_UNROLL
#endif

/* Per type: the tile loads (global -> registers -> shared) and the kernel.
 * BM = 16 * TM rows and BN = 16 * TN columns a block; LX and LY elements of
 * each operand's slice a thread. */
#define EM_GEMM_DEFINE(T, SUF, TM, TN)                                                                          \
  enum { em_gemm_bm_##SUF = EM_GEMM_SIDE * (TM), em_gemm_bn_##SUF = EM_GEMM_SIDE * (TN),                        \
         em_gemm_lx_##SUF = EM_GEMM_SIDE * (TM) * EM_GEMM_BK / EM_GEMM_THREADS,                                 \
         em_gemm_ly_##SUF = EM_GEMM_SIDE * (TN) * EM_GEMM_BK / EM_GEMM_THREADS };                               \
                                                                                                                \
  /* Element e of thread t's share of the op(X) slice: tile row *mm, slice column *kk. Untransposed x has k     \
   * contiguous: 8 threads read one row's slice; transposed x has m contiguous: a warp reads along a column. */ \
  EM_DEVICE void em_gemm_x_at_##SUF(int tx, int t, int e, int *mm, int *kk) {                                   \
    if (!tx) {                                                                                                  \
      *kk = t % EM_GEMM_BK;                                                                                     \
      *mm = t / EM_GEMM_BK + (EM_GEMM_THREADS / EM_GEMM_BK) * e;                                                \
    } else {                                                                                                    \
      *mm = t % em_gemm_bm_##SUF;                                                                               \
      *kk = t / em_gemm_bm_##SUF + (EM_GEMM_THREADS / em_gemm_bm_##SUF) * e;                                    \
    }                                                                                                           \
  }                                                                                                             \
  /* The same for op(Y): untransposed y has n contiguous, transposed y has k contiguous. */                    \
  EM_DEVICE void em_gemm_y_at_##SUF(int ty, int t, int e, int *kk, int *nn) {                                   \
    if (!ty) {                                                                                                  \
      *nn = t % em_gemm_bn_##SUF;                                                                               \
      *kk = t / em_gemm_bn_##SUF + (EM_GEMM_THREADS / em_gemm_bn_##SUF) * e;                                    \
    } else {                                                                                                    \
      *kk = t % EM_GEMM_BK;                                                                                     \
      *nn = t / EM_GEMM_BK + (EM_GEMM_THREADS / EM_GEMM_BK) * e;                                                \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Fetches the slice at k0 into registers. Element e of a thread's share sits at base + e * estep +      \
   * k0 * kstep (the strides follow from the load path), inside the matrix when its row (column) e is below    \
   * the limit lim and its k below k. */                                                                       \
  EM_DEVICE void em_gemm_fetch_##SUF(const T *xp, em_i64 x_es, em_i64 x_ks, int x_rows, int x_kk, int x_re,     \
                                     int x_ke, const T *yp, em_i64 y_es, em_i64 y_ks, int y_cols, int y_kk,     \
                                     int y_ce, int y_ke, em_i64 k0, em_i64 k, T *xr, T *yr) {                   \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_lx_##SUF; e++) {                                                                \
      int ok = e * x_re < x_rows && k0 + x_kk + e * x_ke < k;                                                   \
      xr[e] = ok ? xp[e * x_es + k0 * x_ks] : (T)0;                                                             \
    }                                                                                                           \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_ly_##SUF; e++) {                                                                \
      int ok = e * y_ce < y_cols && k0 + y_kk + e * y_ke < k;                                                   \
      yr[e] = ok ? yp[e * y_es + k0 * y_ks] : (T)0;                                                             \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  EM_GLOBAL void em_gemm_##SUF(const T *x, const T *y, T *c, const T *cin, em_i64 m, em_i64 n, em_i64 k,        \
                               int tx, int ty, em_i64 ldx, em_i64 ldy, em_i64 ldc, em_i64 cin_rs,               \
                               em_i64 cin_cs, T alpha, T beta, int accumulate, em_i64 zx, em_i64 zy,            \
                               em_i64 zc) {                                                                     \
    EM_SHARED T xs[EM_GEMM_BK][em_gemm_bm_##SUF + 4];                                                           \
    EM_SHARED T ys[EM_GEMM_BK][em_gemm_bn_##SUF + 4];                                                           \
    T acc[TM][TN], xr[em_gemm_lx_##SUF], yr[em_gemm_ly_##SUF], xa[TM], yb[TN];                                  \
    const int t = EM_TID_X, trow = t / EM_GEMM_SIDE, tcol = t % EM_GEMM_SIDE;                                   \
    const em_i64 row0 = (em_i64)EM_BID_Y * em_gemm_bm_##SUF, col0 = (em_i64)EM_BID_X * em_gemm_bn_##SUF;        \
    x += (em_i64)EM_BID_Z * zx;                                                                                 \
    y += (em_i64)EM_BID_Z * zy;                                                                                 \
    c += (em_i64)EM_BID_Z * zc;                                                                                 \
    /* Where this thread's share of each slice lies (em_gemm_fetch). */                                         \
    int xm0, xk0, xm1, xk1, yk0, yn0, yk1, yn1;                                                                 \
    em_gemm_x_at_##SUF(tx, t, 0, &xm0, &xk0);                                                                   \
    em_gemm_x_at_##SUF(tx, t, 1, &xm1, &xk1);                                                                   \
    em_gemm_y_at_##SUF(ty, t, 0, &yk0, &yn0);                                                                   \
    em_gemm_y_at_##SUF(ty, t, 1, &yk1, &yn1);                                                                   \
    const int x_re = xm1 - xm0, x_ke = xk1 - xk0, y_ke = yk1 - yk0, y_ce = yn1 - yn0;                           \
    const em_i64 x_left = m - row0 - xm0, y_left = n - col0 - yn0;                                              \
    const int x_rows = x_left > em_gemm_bm_##SUF ? em_gemm_bm_##SUF : (int)x_left;                              \
    const int y_cols = y_left > em_gemm_bn_##SUF ? em_gemm_bn_##SUF : (int)y_left;                              \
    const em_i64 x_ks = tx ? ldx : 1, x_es = tx ? x_ke * ldx : x_re * ldx;                                      \
    const em_i64 y_ks = ty ? 1 : ldy, y_es = ty ? y_ce * ldy : y_ke * ldy;                                      \
    x += tx ? xk0 * ldx + row0 + xm0 : (row0 + xm0) * ldx + xk0;                                                \
    y += ty ? (col0 + yn0) * ldy + yk0 : yk0 * ldy + col0 + yn0;                                                \
    EM_GEMM_UNROLL                                                                                              \
    for (int i = 0; i < (TM); i++) {                                                                            \
      EM_GEMM_UNROLL                                                                                            \
      for (int j = 0; j < (TN); j++) acc[i][j] = (T)0;                                                          \
    }                                                                                                           \
    em_gemm_fetch_##SUF(x, x_es, x_ks, x_rows, xk0, x_re, x_ke, y, y_es, y_ks, y_cols, yk0, y_ce, y_ke, 0,      \
                        k, xr, yr);                                                                             \
    for (em_i64 k0 = 0;; k0 += EM_GEMM_BK) {                                                                    \
      /* The fetched slice goes to shared memory; the next one is fetched while this one is used. */            \
      EM_GEMM_UNROLL                                                                                            \
      for (int e = 0; e < em_gemm_lx_##SUF; e++) {                                                              \
        int mm, kk;                                                                                             \
        em_gemm_x_at_##SUF(tx, t, e, &mm, &kk);                                                                 \
        xs[kk][mm] = xr[e];                                                                                     \
      }                                                                                                         \
      EM_GEMM_UNROLL                                                                                            \
      for (int e = 0; e < em_gemm_ly_##SUF; e++) {                                                              \
        int kk, nn;                                                                                             \
        em_gemm_y_at_##SUF(ty, t, e, &kk, &nn);                                                                 \
        ys[kk][nn] = yr[e];                                                                                     \
      }                                                                                                         \
      EM_SYNC();                                                                                                \
      if (k0 + EM_GEMM_BK < k)                                                                                  \
        em_gemm_fetch_##SUF(x, x_es, x_ks, x_rows, xk0, x_re, x_ke, y, y_es, y_ks, y_cols, yk0, y_ce, y_ke,     \
                            k0 + EM_GEMM_BK, k, xr, yr);                                                        \
      EM_GEMM_UNROLL                                                                                            \
      for (int kk = 0; kk < EM_GEMM_BK; kk++) {                                                                 \
        EM_GEMM_UNROLL                                                                                          \
        for (int i = 0; i < (TM); i++) xa[i] = xs[kk][trow + EM_GEMM_SIDE * i];                                 \
        EM_GEMM_UNROLL                                                                                          \
        for (int j = 0; j < (TN); j++) yb[j] = ys[kk][tcol + EM_GEMM_SIDE * j];                                 \
        EM_GEMM_UNROLL                                                                                          \
        for (int i = 0; i < (TM); i++) {                                                                        \
          EM_GEMM_UNROLL                                                                                        \
          for (int j = 0; j < (TN); j++) acc[i][j] = acc[i][j] + xa[i] * yb[j];                                 \
        }                                                                                                       \
      }                                                                                                         \
      EM_SYNC(); /* everyone is done with the slice before it is overwritten */                                 \
      if (k0 + EM_GEMM_BK >= k) break;                                                                          \
    }                                                                                                           \
    EM_GEMM_UNROLL                                                                                              \
    for (int i = 0; i < (TM); i++) {                                                                            \
      em_i64 gm = row0 + trow + EM_GEMM_SIDE * i;                                                               \
      if (gm >= m) continue;                                                                                    \
      EM_GEMM_UNROLL                                                                                            \
      for (int j = 0; j < (TN); j++) {                                                                          \
        em_i64 gn = col0 + tcol + EM_GEMM_SIDE * j;                                                             \
        if (gn >= n) continue;                                                                                  \
        T *out = c + gm * ldc + gn;                                                                             \
        T prev = accumulate ? *out : (T)0;                                                                      \
        T cv = (!accumulate && beta != (T)0) ? cin[gm * cin_rs + gn * cin_cs] : (T)0;                           \
        *out = em_gemm_out_##SUF(acc[i][j], alpha, accumulate, prev, beta, cv);                                 \
      }                                                                                                         \
    }                                                                                                           \
  }

EM_GEMM_DEFINE(float, f32, 8, 8)
EM_GEMM_DEFINE(double, f64, 4, 4)
EM_GEMM_DEFINE(unsigned int, u32, 8, 8)
EM_GEMM_DEFINE(unsigned long long, u64, 4, 4)

/* gemm's gradient into its input c (dc = beta * dy summed to c's shape,
 * c being [rows, cols] broadcast to dy's [m, n]): one thread per element of
 * dc, summing in double in dy's row-major order, like ops/linalg.c's CPU
 * loop (which sums every float dtype in double). Launch: 1-D grid-stride over
 * rows * cols. */
#define EM_GEMM_C_GRAD(T, SUF)                                                                                  \
  EM_GLOBAL void em_gemm_c_grad_##SUF(const T *dy, T *dc, em_i64 m, em_i64 n, em_i64 rows, em_i64 cols,         \
                                      double beta) {                                                            \
    em_i64 count = rows * cols;                                                                                 \
    for (em_i64 e = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; e < count; e += (em_i64)EM_GDIM_X * EM_BDIM_X) {   \
      em_i64 r = e / cols, q = e % cols;                                                                        \
      em_i64 i0 = rows == 1 ? 0 : r, i1 = rows == 1 ? m : r + 1;                                                \
      em_i64 j0 = cols == 1 ? 0 : q, j1 = cols == 1 ? n : q + 1;                                                \
      double acc = 0;                                                                                           \
      for (em_i64 i = i0; i < i1; i++)                                                                          \
        for (em_i64 j = j0; j < j1; j++) acc = acc + (double)dy[i * n + j];                                     \
      dc[e] = (T)(beta * acc);                                                                                  \
    }                                                                                                           \
  }
EM_GEMM_C_GRAD(float, f32)
EM_GEMM_C_GRAD(double, f64)
