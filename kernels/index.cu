/* Index and scan kernels: the ops of ops/index.c on a GPU, launched by
 * ops/index_gpu.c. Launch: 1-D grid-stride over the elements each kernel
 * names (any grid and block), except em_index_check (one block of 256).
 *
 * No atomics anywhere: each output element is computed by one thread, which
 * visits its contributions in index order (the order ops/index.c's CPU loops
 * apply them), so the bits depend only on the shapes and values. The price:
 * a scatter's or gather_nd gradient's thread scans every index tuple that may
 * hit its row (O(output elements x tuples per batch)).
 *
 * gather_nd and scatter_nd first turn each index tuple into a row of the data
 * (em_index_rows: -1 for a tuple out of range, which em_index_check has
 * reported; it then reads nothing and writes zeros or nothing). Per-element
 * arithmetic: index_math.h, shared with the CPU. */
#include "em_kernel.h"
#include "em_math.h"
#include "index_math.h"

#define IX_THREADS 256 /* em_index_check's block */

#define IX_LOOP(n)                                                                                      \
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X, stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X; \
       i < (n); i += stride_)

/* Index j of an i32 (idx64 0) or i64 array. */
EM_DEVICE em_i64 ix_at(const void *idx, int idx64, em_i64 j) {
  return idx64 ? ((const em_i64 *)idx)[j] : (em_i64)((const int *)idx)[j];
}

/* The first index (flat position in [0, n)) outside [-b, b) where b is
 * bounds[position % k], reported into the device's status record
 * (runtime/devcheck.h; fresh: the copy-back fallback's scratch record). */
EM_GLOBAL void em_index_check(const void *idx, int idx64, em_i64 n, em_i64 k, const em_i64 *bounds, em_i64 *rec,
                              em_i64 tag, int fresh) {
  EM_SHARED em_i64 sh[IX_THREADS];
  int t = EM_TID_X;
  em_i64 bad = -1;
  for (em_i64 i = t; i < n && bad < 0; i += IX_THREADS)
    if (!em_index_ok(ix_at(idx, idx64, i), bounds[i % k])) bad = i;
  sh[t] = bad;
  EM_SYNC();
  for (int w = IX_THREADS / 2; w > 0; w >>= 1) {
    if (t < w && sh[t + w] >= 0 && (sh[t] < 0 || sh[t + w] < sh[t])) sh[t] = sh[t + w];
    EM_SYNC();
  }
  if (t == 0) {
    em_i64 b = sh[0], v = b >= 0 ? ix_at(idx, idx64, b) : 0;
    if (!fresh && (b < 0 || rec[0] != 0)) return;
    rec[1] = b;
    rec[2] = v;
    ((double *)rec)[3] = (double)v;
    rec[0] = b >= 0 ? tag : 0;
  }
}

/* Row of the data that tuple t (k indices into axes of sizes dims[0..k-1])
 * names: (t / per_batch) * batch_rows plus the tuple's row-major offset. */
EM_GLOBAL void em_index_rows(em_i64 *rows, const void *idx, int idx64, em_i64 m, em_i64 k, const em_i64 *dims,
                             em_i64 per_batch, em_i64 batch_rows) {
  IX_LOOP(m) {
    em_i64 r = 0;
    int ok = 1;
    for (em_i64 j = 0; j < k; j++) {
      em_i64 d = dims[j], v = ix_at(idx, idx64, i * k + j);
      if (!em_index_ok(v, d)) ok = 0;
      r = r * d + em_index_wrap(v, d);
    }
    rows[i] = ok ? i / per_batch * batch_rows + r : -1;
  }
}

#define IX_KERNELS(T, S)                                                                                           \
  /* cumsum along the middle axis of [outer, n, inner]: one thread per line, in index order (reverse: from the   \
   * end); exclusive writes the sum before adding. */                                                             \
  EM_GLOBAL void em_index_cumsum_##S(const T *x, T *y, em_i64 lines, em_i64 n, em_i64 inner, int exclusive,      \
                                     int reverse) {                                                               \
    IX_LOOP(lines) {                                                                                              \
      em_i64 base = i / inner * n * inner + i % inner;                                                            \
      T acc = (T)0;                                                                                               \
      for (em_i64 j = 0; j < n; j++) {                                                                            \
        em_i64 at = base + (reverse ? n - 1 - j : j) * inner;                                                     \
        T v = x[at];                                                                                              \
        if (exclusive) y[at] = acc;                                                                               \
        acc = em_index_add_##S(acc, v);                                                                           \
        if (!exclusive) y[at] = acc;                                                                              \
      }                                                                                                           \
    }                                                                                                             \
  }                                                                                                               \
  /* dst [m, sz] = src's rows rows[t] (0 for -1; last_only: 0 unless no later tuple names the same row). */      \
  EM_GLOBAL void em_index_gather_rows_##S(T *dst, const T *src, const em_i64 *rows, em_i64 m, em_i64 sz,         \
                                          int last_only) {                                                        \
    IX_LOOP(m * sz) {                                                                                             \
      em_i64 t = i / sz, r = rows[t];                                                                             \
      int keep = r >= 0;                                                                                          \
      for (em_i64 u = t + 1; keep && last_only && u < m; u++)                                                     \
        if (rows[u] == r) keep = 0;                                                                               \
      dst[i] = keep ? src[r * sz + i % sz] : (T)0;                                                                \
    }                                                                                                             \
  }                                                                                                               \
  /* out [nrows, sz]: data's row combined with every update row whose tuple names it, in tuple order. */          \
  EM_GLOBAL void em_index_scatter_rows_##S(T *out, const T *data, const T *upd, const em_i64 *rows, em_i64 nrows, \
                                           em_i64 sz, em_i64 m, int red) {                                        \
    IX_LOOP(nrows * sz) {                                                                                         \
      em_i64 r = i / sz, s = i % sz;                                                                              \
      T v = data[i];                                                                                              \
      for (em_i64 t = 0; t < m; t++)                                                                              \
        if (rows[t] == r) v = em_index_combine_##S(v, upd[t * sz + s], red);                                      \
      out[i] = v;                                                                                                 \
    }                                                                                                             \
  }                                                                                                               \
  /* scatter_elements: out = data with each update on out's line (axis `axis`) combined in index order. tab:    \
   * data's dims, then the indices' dims (rank each). */                                                          \
  EM_GLOBAL void em_index_scatter_elements_##S(T *out, const T *data, const void *idx, int idx64, const T *upd,   \
                                               const em_i64 *tab, int rank, int axis, em_i64 numel, int red) {    \
    IX_LOOP(numel) {                                                                                              \
      em_i64 rem = i, off = 0, es = 1, astride = 0, qa = 0;                                                       \
      int inside = 1;                                                                                             \
      for (int d = rank - 1; d >= 0; d--) {                                                                       \
        em_i64 dd = tab[d], ed = tab[rank + d], c = rem % dd;                                                     \
        rem /= dd;                                                                                                \
        if (d == axis) {                                                                                          \
          qa = c;                                                                                                 \
          astride = es;                                                                                           \
        } else {                                                                                                  \
          if (c >= ed) inside = 0;                                                                                \
          off += c * es;                                                                                          \
        }                                                                                                         \
        es *= ed;                                                                                                 \
      }                                                                                                           \
      T v = data[i];                                                                                              \
      em_i64 n = tab[axis], ne = inside ? tab[rank + axis] : 0;                                                   \
      for (em_i64 j = 0; j < ne; j++) {                                                                           \
        em_i64 p = off + j * astride, w = ix_at(idx, idx64, p);                                                   \
        if (em_index_ok(w, n) && em_index_wrap(w, n) == qa) v = em_index_combine_##S(v, upd[p], red);             \
      }                                                                                                           \
      out[i] = v;                                                                                                 \
    }                                                                                                             \
  }

IX_KERNELS(float, f32)
IX_KERNELS(double, f64)
IX_KERNELS(int, i32)
IX_KERNELS(long long, i64)

#define IX_GRAD_KERNELS(T, S)                                                                                       \
  /* gather_nd's gradient: dx [nrows, sz] from +0, adding the dy rows whose tuple names the row, in tuple order   \
   * (tuples of the row's batch only: per_batch of them, batch_rows rows a batch). */                             \
  EM_GLOBAL void em_index_gather_rows_grad_##S(T *dx, const T *dy, const em_i64 *rows, em_i64 nrows, em_i64 sz,   \
                                               em_i64 per_batch, em_i64 batch_rows) {                             \
    IX_LOOP(nrows * sz) {                                                                                         \
      em_i64 r = i / sz, t0 = r / batch_rows * per_batch;                                                         \
      T acc = (T)0;                                                                                               \
      for (em_i64 t = t0; t < t0 + per_batch; t++)                                                                \
        if (rows[t] == r) acc = em_index_add_##S(acc, dy[t * sz + i % sz]);                                       \
      dx[i] = acc;                                                                                                \
    }                                                                                                             \
  }                                                                                                               \
  /* scatter_elements' gradient for the updates: dy at each update's target (last_only: 0 where a later update  \
   * on the same line has the same target). tab as em_index_scatter_elements'. */                                 \
  EM_GLOBAL void em_index_scatter_elements_grad_##S(T *dupd, const T *dy, const void *idx, int idx64,             \
                                                    const em_i64 *tab, int rank, int axis, em_i64 numel,          \
                                                    int last_only) {                                              \
    IX_LOOP(numel) {                                                                                              \
      em_i64 rem = i, off = 0, ds = 1, es = 1, dstride = 0, estride = 0, ja = 0;                                  \
      for (int d = rank - 1; d >= 0; d--) {                                                                       \
        em_i64 ed = tab[rank + d], c = rem % ed;                                                                  \
        rem /= ed;                                                                                                \
        if (d == axis) {                                                                                          \
          ja = c;                                                                                                 \
          dstride = ds;                                                                                           \
          estride = es;                                                                                           \
        } else {                                                                                                  \
          off += c * ds;                                                                                          \
        }                                                                                                         \
        ds *= tab[d];                                                                                             \
        es *= ed;                                                                                                 \
      }                                                                                                           \
      em_i64 n = tab[axis], ne = tab[rank + axis], w = ix_at(idx, idx64, i);                                      \
      int keep = em_index_ok(w, n);                                                                               \
      w = em_index_wrap(w, n);                                                                                    \
      for (em_i64 j = ja + 1; keep && last_only && j < ne; j++) {                                                 \
        em_i64 v = ix_at(idx, idx64, i + (j - ja) * estride);                                                     \
        if (em_index_ok(v, n) && em_index_wrap(v, n) == w) keep = 0;                                              \
      }                                                                                                           \
      dupd[i] = keep ? dy[off + w * dstride] : (T)0;                                                              \
    }                                                                                                             \
  }

IX_GRAD_KERNELS(float, f32)
IX_GRAD_KERNELS(double, f64)
