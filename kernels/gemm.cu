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
 * every output element sums p = 0 .. k-1 strictly in order, acc =
 * fma(x, y, acc) (an explicit fma.rn, one rounding a step: em_fmaf / em_fma;
 * contraction stays off everywhere else), then alpha * acc, then the previous
 * product's sum or beta * c. The tiling changes only where the operands come
 * from, never that order, so the result is the same bits on every GPU, every
 * grid and the CPU (glibc's fmaf or vfmadd there: correctly rounded too).
 *
 * Tiles: the block stages a BM x BK slice of op(X) and a BK x BN slice of
 * op(Y) (BK = 16) in shared memory, k-major, each row padded by 4 words so
 * the stores of either load path spread over the banks (at most 2-way) and
 * every row still starts on 16 bytes. Two buffers: while one slice is
 * multiplied the next is fetched from global memory into registers and then
 * stored into the other buffer, one barrier a slice. Loads are coalesced
 * along whichever axis is contiguous in memory (the transposes pick the
 * path); interior blocks (whole tiles inside m and n) fetch every slice but
 * the last without bounds checks.
 * Thread (trow, tcol) owns rows G trow + g and BM / 2 + G trow + g (g < G =
 * TM / 2: 4 floats or 2 doubles, 16 bytes) and the same columns of BN: per k
 * it reads 2 + 2 16-byte words of shared memory (LDS.128) for TM x TN FMAs.
 * A warp spans 4 x 8 threads, so each of those loads touches 64 or 128
 * distinct bytes: no bank conflicts. Out-of-range rows, columns and k are
 * loaded as +0 in x and -0 in y (so a padded k adds a -0 product, which
 * leaves every acc, -0 included, unchanged: kernels/gemm_math.h) and never
 * stored.
 *
 * Measured on an H200 (nvcc 13, 2026-11-27, square f32, no TF32): 41-43
 * TFLOP/s at n = 2048-8192, 0.82-0.84 of cuBLAS SGEMM (49-51); the previous
 * kernel (FMUL + FADD, BK 8, scalar shared loads) made 20.4. SASS (sm_90): the
 * k loop is 1024 FFMA, 64 LDS.128, 16 + 16 LDG/STS a slice, no spills at ~168
 * registers (one block of 8 warps an SM: capping registers at 128 for two
 * blocks spills with BK = 16 and ran slower with BK = 8). */
#include "em_kernel.h"
#include "gemm_math.h"

#define EM_GEMM_BK 16
#define EM_GEMM_THREADS 256
#define EM_GEMM_SIDE 16 /* the block is EM_GEMM_SIDE x EM_GEMM_SIDE threads */

#if defined(__CUDACC__) || defined(__CUDA__)
#define EM_GEMM_UNROLL _Pragma("unroll")
#else
#define EM_GEMM_UNROLL
#endif
/* The shared tiles are read G words at a time (16 bytes): each row starts on a
 * 16-byte boundary (BM + 4 words of 4 or 8 bytes) if the array does. */
#define EM_GEMM_ALIGN16 __attribute__((aligned(16)))

/* Per type: the tile loads (global -> registers -> shared) and the kernel.
 * BM = 16 * TM rows and BN = 16 * TN columns a block; LX and LY elements of
 * each operand's slice a thread. */
#define EM_GEMM_DEFINE(T, SUF, TM, TN, YPAD)                                                                    \
  enum { em_gemm_bm_##SUF = EM_GEMM_SIDE * (TM), em_gemm_bn_##SUF = EM_GEMM_SIDE * (TN),                        \
         em_gemm_lx_##SUF = EM_GEMM_SIDE * (TM) * EM_GEMM_BK / EM_GEMM_THREADS,                                 \
         em_gemm_ly_##SUF = EM_GEMM_SIDE * (TN) * EM_GEMM_BK / EM_GEMM_THREADS };                               \
                                                                                                                \
  /* Element e of thread t's share of the op(X) slice: tile row *mm, slice column *kk. Untransposed x has k     \
   * contiguous: BK threads read one row's slice; transposed x has m contiguous: a warp reads along a column. */\
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
  /* Fetches the slice at k0 into registers; xp and yp point at this thread's first element of that slice.   \
   * Element e of a thread's share sits e * x_es (y_es) further, inside the matrix when its row (column) is   \
   * below x_rows (y_cols) and its k below k. Outside, x reads +0 and y reads YPAD (-0 for floats: the        \
   * products past K are -0, which leave every acc as it is, kernels/gemm_math.h). */                          \
  EM_DEVICE void em_gemm_fetch_##SUF(const T *xp, em_i64 x_es, int x_rows, int x_kk, int x_re, int x_ke,        \
                                     const T *yp, em_i64 y_es, int y_cols, int y_kk, int y_ce, int y_ke,        \
                                     em_i64 k0, em_i64 k, T *xr, T *yr) {                                       \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_lx_##SUF; e++) {                                                                \
      int ok = e * x_re < x_rows && k0 + x_kk + e * x_ke < k;                                                   \
      xr[e] = ok ? xp[e * x_es] : (T)0;                                                                         \
    }                                                                                                           \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_ly_##SUF; e++) {                                                                \
      int ok = e * y_ce < y_cols && k0 + y_kk + e * y_ke < k;                                                   \
      yr[e] = ok ? yp[e * y_es] : (YPAD);                                                                       \
    }                                                                                                           \
  }                                                                                                             \
  /* The same for a slice wholly inside the matrices (an interior tile, k0 + BK <= k): no checks. */           \
  EM_DEVICE void em_gemm_fetch_full_##SUF(const T *xp, em_i64 x_es, const T *yp, em_i64 y_es, T *xr, T *yr) {   \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_lx_##SUF; e++) xr[e] = xp[e * x_es];                                            \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_ly_##SUF; e++) yr[e] = yp[e * y_es];                                            \
  }                                                                                                             \
                                                                                                                \
  /* The fetched slice into one of the shared buffers. */                                                       \
  EM_DEVICE void em_gemm_stage_##SUF(T (*xs)[em_gemm_bm_##SUF + 4], T (*ys)[em_gemm_bn_##SUF + 4], int tx,      \
                                     int ty, int t, const T *xr, const T *yr) {                                 \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_lx_##SUF; e++) {                                                                \
      int mm, kk;                                                                                               \
      em_gemm_x_at_##SUF(tx, t, e, &mm, &kk);                                                                   \
      xs[kk][mm] = xr[e];                                                                                       \
    }                                                                                                           \
    EM_GEMM_UNROLL                                                                                              \
    for (int e = 0; e < em_gemm_ly_##SUF; e++) {                                                                \
      int kk, nn;                                                                                               \
      em_gemm_y_at_##SUF(ty, t, e, &kk, &nn);                                                                   \
      ys[kk][nn] = yr[e];                                                                                       \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  EM_GLOBAL void em_gemm_##SUF(const T *x, const T *y, T *c, const T *cin, em_i64 m, em_i64 n, em_i64 k,        \
                               int tx, int ty, em_i64 ldx, em_i64 ldy, em_i64 ldc, em_i64 cin_rs,               \
                               em_i64 cin_cs, T alpha, T beta, int accumulate, em_i64 zx, em_i64 zy,            \
                               em_i64 zc) {                                                                     \
    /* Two slices: one is multiplied while the next is staged into the other. */                               \
    EM_SHARED T xs[2][EM_GEMM_BK][em_gemm_bm_##SUF + 4] EM_GEMM_ALIGN16;                                        \
    EM_SHARED T ys[2][EM_GEMM_BK][em_gemm_bn_##SUF + 4] EM_GEMM_ALIGN16;                                        \
    enum { G = (TM) / 2, HM = em_gemm_bm_##SUF / 2, HN = em_gemm_bn_##SUF / 2 };                                \
    T acc[TM][TN], xr[em_gemm_lx_##SUF], yr[em_gemm_ly_##SUF], xa[TM], yb[TN];                                  \
    const int t = EM_TID_X, w = t / 32, l = t % 32;                                                             \
    /* Warp w covers 4 x 8 threads: rows of threads 4 (w / 2) .. +3, columns 8 (w % 2) .. +7. */               \
    const int trow = (w / 2) * 4 + l / 8, tcol = (w % 2) * 8 + l % 8;                                           \
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
    em_gemm_fetch_##SUF(x, x_es, x_rows, xk0, x_re, x_ke, y, y_es, y_cols, yk0, y_ce, y_ke, 0, k, xr, yr);      \
    em_gemm_stage_##SUF(xs[0], ys[0], tx, ty, t, xr, yr);                                                       \
    EM_SYNC();                                                                                                  \
    /* Interior blocks read every row and column of their tiles; the others check each element. */           \
    const int interior = m - row0 >= em_gemm_bm_##SUF && n - col0 >= em_gemm_bn_##SUF;                         \
    const em_i64 x_step = EM_GEMM_BK * x_ks, y_step = EM_GEMM_BK * y_ks;                                        \
    /* k0 < k holds for every thread or for none: the barrier inside is reached by all. The last slice's      \
     * fetch and stage see only k >= K (nothing is read) and fill a buffer nobody reads. */                    \
    int b = 0;                                                                                                  \
    for (em_i64 k0 = 0; k0 < k; k0 += EM_GEMM_BK, b ^= 1) {                                                     \
      /* The next slice comes from global memory while this one is multiplied. Fetched before the             \
       * multiplications and stored after them in every slice (the last reads nothing), so that the compiler  \
       * keeps the loads ahead of the FFMAs instead of sinking them into a branch next to their use. */        \
      x += x_step;                                                                                              \
      y += y_step;                                                                                              \
      if (interior && k0 + 2 * EM_GEMM_BK <= k)                                                                 \
        em_gemm_fetch_full_##SUF(x, x_es, y, y_es, xr, yr);                                                     \
      else                                                                                                      \
        em_gemm_fetch_##SUF(x, x_es, x_rows, xk0, x_re, x_ke, y, y_es, y_cols, yk0, y_ce, y_ke,                 \
                            k0 + EM_GEMM_BK, k, xr, yr);                                                        \
      T(*xb)[em_gemm_bm_##SUF + 4] = xs[b];                                                                     \
      T(*yc)[em_gemm_bn_##SUF + 4] = ys[b];                                                                     \
      EM_GEMM_UNROLL                                                                                            \
      for (int kk = 0; kk < EM_GEMM_BK; kk++) {                                                                 \
        /* Rows G trow .. +G-1 and HM + the same: G consecutive words, one wide shared load each half. */      \
        EM_GEMM_UNROLL                                                                                          \
        for (int i = 0; i < (TM); i++) xa[i] = xb[kk][G * trow + i % G + HM * (i / G)];                         \
        EM_GEMM_UNROLL                                                                                          \
        for (int j = 0; j < (TN); j++) yb[j] = yc[kk][G * tcol + j % G + HN * (j / G)];                         \
        EM_GEMM_UNROLL                                                                                          \
        for (int i = 0; i < (TM); i++) {                                                                        \
          EM_GEMM_UNROLL                                                                                        \
          for (int j = 0; j < (TN); j++) acc[i][j] = em_gemm_step_##SUF(acc[i][j], xa[i], yb[j]);               \
        }                                                                                                       \
      }                                                                                                         \
      /* Buffer b ^ 1 was last read in the previous slice, before the barrier that ended it. */                \
      em_gemm_stage_##SUF(xs[b ^ 1], ys[b ^ 1], tx, ty, t, xr, yr);                                             \
      EM_SYNC();                                                                                                \
    }                                                                                                           \
    EM_GEMM_UNROLL                                                                                              \
    for (int i = 0; i < (TM); i++) {                                                                            \
      em_i64 gm = row0 + G * trow + i % G + HM * (i / G);                                                       \
      if (gm >= m) continue;                                                                                    \
      EM_GEMM_UNROLL                                                                                            \
      for (int j = 0; j < (TN); j++) {                                                                          \
        em_i64 gn = col0 + G * tcol + j % G + HN * (j / G);                                                     \
        if (gn >= n) continue;                                                                                  \
        T *out = c + gm * ldc + gn;                                                                             \
        T prev = accumulate ? *out : (T)0;                                                                      \
        T cv = (!accumulate && beta != (T)0) ? cin[gm * cin_rs + gn * cin_cs] : (T)0;                           \
        *out = em_gemm_out_##SUF(acc[i][j], alpha, accumulate, prev, beta, cv);                                 \
      }                                                                                                         \
    }                                                                                                           \
  }

EM_GEMM_DEFINE(float, f32, 8, 8, -0.0f)
EM_GEMM_DEFINE(double, f64, 4, 4, -0.0)
EM_GEMM_DEFINE(unsigned int, u32, 8, 8, 0u)
EM_GEMM_DEFINE(unsigned long long, u64, 4, 4, 0ull)

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
