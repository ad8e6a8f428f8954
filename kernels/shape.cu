/* Shape and indexing kernels: the ops of ops/shape.c on a GPU, launched by
 * ops/shape_gpu.c. Launch: 1-D grid-stride over the elements (or rows) each
 * kernel names, any grid and block size.
 *
 * Ops that only move data run one generic strided copy per element size
 * (em_shape_copy_u8/u16/u32/u64: 1, 2, 4, 8 bytes, whatever the dtype): the
 * index box has at most 6 axes after merging, its inner 5 sizes and both
 * sides' strides (in elements, possibly negative or 0) passed as scalars.
 * The others have a kernel of their own; the rules per element (cast's
 * conversions, pad's source index, top_k's order) come from shape_math.h,
 * which the CPU ops compile too.
 *
 * Gradients that sum (_gather_grad, _pad_grad, _tile_grad: f32 and f64) add
 * each output element's terms in the CPU's order, one thread per output
 * element or column, starting from +0: no atomics, so the bits depend only on
 * the shapes. */
#include "em_kernel.h"
#include "em_math.h"
#include "shape_math.h"

#define EM_SHAPE_LOOP(n)                                                                             \
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X, stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X; \
       i < (n); i += stride_)

/* One axis of em_shape_offsets: the coordinate along an axis of size d
 * peeled off r. Size-1 axes (the host pads views to 6 axes in front) cost
 * nothing; integer division is slow on a GPU. */
#define EM_SHAPE_PEEL(T, d, a, b)      \
  if (d > 1) {                         \
    T c_ = r % (T)d;                   \
    r /= (T)d;                         \
    x += (em_i64)c_ * a;               \
    y += (em_i64)c_ * b;               \
  }

/* Offsets on both sides of flat position i of the box [*, d1, d2, d3, d4, d5]
 * (a: one side's strides, b: the other's). small: every position fits 32
 * bits, so the divisions can be 32-bit ones (several times cheaper). */
EM_DEVICE void em_shape_offsets(em_i64 i, int small, em_i64 d1, em_i64 d2, em_i64 d3, em_i64 d4, em_i64 d5, em_i64 a0,
                                em_i64 a1, em_i64 a2, em_i64 a3, em_i64 a4, em_i64 a5, em_i64 b0, em_i64 b1, em_i64 b2,
                                em_i64 b3, em_i64 b4, em_i64 b5, em_i64 *oa, em_i64 *ob) {
  em_i64 x = 0, y = 0;
  if (small) {
    unsigned int r = (unsigned int)i;
    EM_SHAPE_PEEL(unsigned int, d5, a5, b5)
    EM_SHAPE_PEEL(unsigned int, d4, a4, b4)
    EM_SHAPE_PEEL(unsigned int, d3, a3, b3)
    EM_SHAPE_PEEL(unsigned int, d2, a2, b2)
    EM_SHAPE_PEEL(unsigned int, d1, a1, b1)
    x += (em_i64)r * a0;
    y += (em_i64)r * b0;
  } else {
    em_i64 r = i;
    EM_SHAPE_PEEL(em_i64, d5, a5, b5)
    EM_SHAPE_PEEL(em_i64, d4, a4, b4)
    EM_SHAPE_PEEL(em_i64, d3, a3, b3)
    EM_SHAPE_PEEL(em_i64, d2, a2, b2)
    EM_SHAPE_PEEL(em_i64, d1, a1, b1)
    x += r * a0;
    y += r * b0;
  }
  *oa = x;
  *ob = y;
}

/* ---------------------------------------------------------- strided copy --- */

/* dst[sum i_k * ds_k] = src[sum i_k * ss_k] over the box [n / (d1..d5), d1, .., d5]. */
#define EM_SHAPE_COPY_BODY                                                                                   \
  int small = n <= 0x7fffffff;                                                                               \
  EM_SHAPE_LOOP(n) {                                                                                         \
    em_i64 o, s;                                                                                             \
    em_shape_offsets(i, small, d1, d2, d3, d4, d5, ds0, ds1, ds2, ds3, ds4, ds5, ss0, ss1, ss2, ss3, ss4, ss5, &o, \
                     &s);                                                                                    \
    dst[o] = src[s];                                                                                         \
  }

EM_GLOBAL void em_shape_copy_u8(unsigned char *dst, const unsigned char *src, em_i64 n, em_i64 d1, em_i64 d2,
                                em_i64 d3, em_i64 d4, em_i64 d5, em_i64 ds0, em_i64 ds1, em_i64 ds2, em_i64 ds3,
                                em_i64 ds4, em_i64 ds5, em_i64 ss0, em_i64 ss1, em_i64 ss2, em_i64 ss3, em_i64 ss4,
                                em_i64 ss5) {
  EM_SHAPE_COPY_BODY
}

EM_GLOBAL void em_shape_copy_u16(unsigned short *dst, const unsigned short *src, em_i64 n, em_i64 d1, em_i64 d2,
                                 em_i64 d3, em_i64 d4, em_i64 d5, em_i64 ds0, em_i64 ds1, em_i64 ds2, em_i64 ds3,
                                 em_i64 ds4, em_i64 ds5, em_i64 ss0, em_i64 ss1, em_i64 ss2, em_i64 ss3, em_i64 ss4,
                                 em_i64 ss5) {
  EM_SHAPE_COPY_BODY
}

EM_GLOBAL void em_shape_copy_u32(unsigned int *dst, const unsigned int *src, em_i64 n, em_i64 d1, em_i64 d2,
                                 em_i64 d3, em_i64 d4, em_i64 d5, em_i64 ds0, em_i64 ds1, em_i64 ds2, em_i64 ds3,
                                 em_i64 ds4, em_i64 ds5, em_i64 ss0, em_i64 ss1, em_i64 ss2, em_i64 ss3, em_i64 ss4,
                                 em_i64 ss5) {
  EM_SHAPE_COPY_BODY
}

EM_GLOBAL void em_shape_copy_u64(unsigned long long *dst, const unsigned long long *src, em_i64 n, em_i64 d1,
                                 em_i64 d2, em_i64 d3, em_i64 d4, em_i64 d5, em_i64 ds0, em_i64 ds1, em_i64 ds2,
                                 em_i64 ds3, em_i64 ds4, em_i64 ds5, em_i64 ss0, em_i64 ss1, em_i64 ss2, em_i64 ss3,
                                 em_i64 ss4, em_i64 ss5) {
  EM_SHAPE_COPY_BODY
}

/* ------------------------------------------------------------------ fill --- */

/* dst[i] = the element whose bytes are the low bytes of bits. */
EM_GLOBAL void em_shape_fill_u8(unsigned char *dst, em_i64 n, unsigned long long bits) {
  EM_SHAPE_LOOP(n) dst[i] = (unsigned char)bits;
}
EM_GLOBAL void em_shape_fill_u16(unsigned short *dst, em_i64 n, unsigned long long bits) {
  EM_SHAPE_LOOP(n) dst[i] = (unsigned short)bits;
}
EM_GLOBAL void em_shape_fill_u32(unsigned int *dst, em_i64 n, unsigned long long bits) {
  EM_SHAPE_LOOP(n) dst[i] = (unsigned int)bits;
}
EM_GLOBAL void em_shape_fill_u64(unsigned long long *dst, em_i64 n, unsigned long long bits) {
  EM_SHAPE_LOOP(n) dst[i] = bits;
}

/* ------------------------------------------------------------------ cast --- */

/* y[i] = x[i] converted from dtype `from` to `to` (shape_math.h's rules). */
EM_GLOBAL void em_shape_cast(const void *x, int from, void *y, int to, em_i64 n) {
  if (em_shape_is_float(from)) {
    EM_SHAPE_LOOP(n) em_shape_store_from_float(to, y, i, em_shape_load_float(from, x, i));
  } else {
    EM_SHAPE_LOOP(n) em_shape_store_from_int(to, y, i, em_shape_load_int(from, x, i));
  }
}

/* ------------------------------------------------------------------- pad --- */

/* Output position i of pad over 6 axes (y: output sizes, x: input sizes, p:
 * begin pads): the input element it copies, or the constant `bits`. */
#define EM_SHAPE_PAD_BODY(T)                                                                   \
  EM_SHAPE_LOOP(n) {                                                                           \
    em_i64 r = i, s = 0, xs = 1, c;                                                            \
    int constant = 0;                                                                          \
    c = em_shape_pad_src(r % y5, p5, x5, mode), r /= y5, constant |= c < 0, s += c * xs, xs *= x5; \
    c = em_shape_pad_src(r % y4, p4, x4, mode), r /= y4, constant |= c < 0, s += c * xs, xs *= x4; \
    c = em_shape_pad_src(r % y3, p3, x3, mode), r /= y3, constant |= c < 0, s += c * xs, xs *= x3; \
    c = em_shape_pad_src(r % y2, p2, x2, mode), r /= y2, constant |= c < 0, s += c * xs, xs *= x2; \
    c = em_shape_pad_src(r % y1, p1, x1, mode), r /= y1, constant |= c < 0, s += c * xs, xs *= x1; \
    c = em_shape_pad_src(r, p0, x0, mode), constant |= c < 0, s += c * xs;                       \
    dst[i] = constant ? (T)bits : src[s];                                                        \
  }

EM_GLOBAL void em_shape_pad_u8(unsigned char *dst, const unsigned char *src, em_i64 n, int mode,
                               unsigned long long bits, em_i64 y1, em_i64 y2, em_i64 y3, em_i64 y4, em_i64 y5,
                               em_i64 x0, em_i64 x1, em_i64 x2, em_i64 x3, em_i64 x4, em_i64 x5, em_i64 p0, em_i64 p1,
                               em_i64 p2, em_i64 p3, em_i64 p4, em_i64 p5) {
  EM_SHAPE_PAD_BODY(unsigned char)
}

EM_GLOBAL void em_shape_pad_u16(unsigned short *dst, const unsigned short *src, em_i64 n, int mode,
                                unsigned long long bits, em_i64 y1, em_i64 y2, em_i64 y3, em_i64 y4, em_i64 y5,
                                em_i64 x0, em_i64 x1, em_i64 x2, em_i64 x3, em_i64 x4, em_i64 x5, em_i64 p0,
                                em_i64 p1, em_i64 p2, em_i64 p3, em_i64 p4, em_i64 p5) {
  EM_SHAPE_PAD_BODY(unsigned short)
}

EM_GLOBAL void em_shape_pad_u32(unsigned int *dst, const unsigned int *src, em_i64 n, int mode,
                                unsigned long long bits, em_i64 y1, em_i64 y2, em_i64 y3, em_i64 y4, em_i64 y5,
                                em_i64 x0, em_i64 x1, em_i64 x2, em_i64 x3, em_i64 x4, em_i64 x5, em_i64 p0,
                                em_i64 p1, em_i64 p2, em_i64 p3, em_i64 p4, em_i64 p5) {
  EM_SHAPE_PAD_BODY(unsigned int)
}

EM_GLOBAL void em_shape_pad_u64(unsigned long long *dst, const unsigned long long *src, em_i64 n, int mode,
                                unsigned long long bits, em_i64 y1, em_i64 y2, em_i64 y3, em_i64 y4, em_i64 y5,
                                em_i64 x0, em_i64 x1, em_i64 x2, em_i64 x3, em_i64 x4, em_i64 x5, em_i64 p0,
                                em_i64 p1, em_i64 p2, em_i64 p3, em_i64 p4, em_i64 p5) {
  EM_SHAPE_PAD_BODY(unsigned long long)
}

/* pad's gradient: input element i sums the output positions whose source it
 * is, in row-major order of the output (the CPU's order: its walk over dy
 * visits them so), from +0. Per axis the positions come from
 * em_shape_pad_next, in increasing order; an odometer over the 6 axes makes
 * their row-major order. */
#define EM_SHAPE_PAD_GRAD_BODY(T)                                                                          \
  em_i64 yd[6] = {y0, y1, y2, y3, y4, y5}, xd[6] = {x0, x1, x2, x3, x4, x5}, pd[6] = {p0, p1, p2, p3, p4, p5}; \
  em_i64 ys[6];                                                                                            \
  ys[5] = 1;                                                                                               \
  for (int k = 4; k >= 0; k--) ys[k] = ys[k + 1] * yd[k + 1];                                              \
  EM_SHAPE_LOOP(n) {                                                                                       \
    em_i64 src[6], at[6], r = i;                                                                           \
    for (int k = 5; k >= 0; k--) {                                                                         \
      src[k] = r % xd[k];                                                                                  \
      r /= xd[k];                                                                                          \
    }                                                                                                      \
    T acc = 0;                                                                                             \
    int any = 1;                                                                                           \
    for (int k = 0; k < 6 && any; k++) {                                                                   \
      at[k] = em_shape_pad_next(-1, src[k], pd[k], xd[k], yd[k], mode);                                    \
      any = at[k] >= 0;                                                                                    \
    }                                                                                                      \
    while (any) {                                                                                          \
      em_i64 off = 0;                                                                                      \
      for (int k = 0; k < 6; k++) off += at[k] * ys[k];                                                    \
      acc += dy[off];                                                                                      \
      int k = 5;                                                                                           \
      for (; k >= 0; k--) {                                                                                \
        at[k] = em_shape_pad_next(at[k], src[k], pd[k], xd[k], yd[k], mode);                               \
        if (at[k] >= 0) break;                                                                             \
        at[k] = em_shape_pad_next(-1, src[k], pd[k], xd[k], yd[k], mode);                                  \
      }                                                                                                    \
      any = k >= 0;                                                                                        \
    }                                                                                                      \
    dx[i] = acc;                                                                                           \
  }

EM_GLOBAL void em_shape_pad_grad_f32(float *dx, const float *dy, em_i64 n, int mode, em_i64 y0, em_i64 y1, em_i64 y2,
                                     em_i64 y3, em_i64 y4, em_i64 y5, em_i64 x0, em_i64 x1, em_i64 x2, em_i64 x3,
                                     em_i64 x4, em_i64 x5, em_i64 p0, em_i64 p1, em_i64 p2, em_i64 p3, em_i64 p4,
                                     em_i64 p5) {
  EM_SHAPE_PAD_GRAD_BODY(float)
}

EM_GLOBAL void em_shape_pad_grad_f64(double *dx, const double *dy, em_i64 n, int mode, em_i64 y0, em_i64 y1,
                                     em_i64 y2, em_i64 y3, em_i64 y4, em_i64 y5, em_i64 x0, em_i64 x1, em_i64 x2,
                                     em_i64 x3, em_i64 x4, em_i64 x5, em_i64 p0, em_i64 p1, em_i64 p2, em_i64 p3,
                                     em_i64 p4, em_i64 p5) {
  EM_SHAPE_PAD_GRAD_BODY(double)
}

/* ---------------------------------------------------------------- gather --- */

/* Index j of an i32 (idx64 0) or i64 array. */
EM_DEVICE em_i64 em_shape_index_at(const void *idx, int idx64, em_i64 j) {
  return idx64 ? ((const long long *)idx)[j] : (em_i64)((const int *)idx)[j];
}

/* Output [outer, m, inner] from data [outer, nd, inner]: element (o, j, c) is
 * data (o, idx[j], c); negative indices count from the end. An index out of
 * range gives 0 bits (the CPU refuses it; the GPU cannot stop the run). */
#define EM_SHAPE_GATHER_BODY(T)                                           \
  EM_SHAPE_LOOP(n) {                                                      \
    em_i64 c = i % inner, t = i / inner, j = t % m, o = t / m;            \
    em_i64 w = em_shape_index_at(idx, idx64, j);                          \
    if (w < 0) w += nd;                                                   \
    dst[i] = w >= 0 && w < nd ? src[(o * nd + w) * inner + c] : (T)0;     \
  }

EM_GLOBAL void em_shape_gather_u8(unsigned char *dst, const unsigned char *src, const void *idx, int idx64, em_i64 n,
                                  em_i64 m, em_i64 inner, em_i64 nd) {
  EM_SHAPE_GATHER_BODY(unsigned char)
}
EM_GLOBAL void em_shape_gather_u16(unsigned short *dst, const unsigned short *src, const void *idx, int idx64,
                                   em_i64 n, em_i64 m, em_i64 inner, em_i64 nd) {
  EM_SHAPE_GATHER_BODY(unsigned short)
}
EM_GLOBAL void em_shape_gather_u32(unsigned int *dst, const unsigned int *src, const void *idx, int idx64, em_i64 n,
                                   em_i64 m, em_i64 inner, em_i64 nd) {
  EM_SHAPE_GATHER_BODY(unsigned int)
}
EM_GLOBAL void em_shape_gather_u64(unsigned long long *dst, const unsigned long long *src, const void *idx, int idx64,
                                   em_i64 n, em_i64 m, em_i64 inner, em_i64 nd) {
  EM_SHAPE_GATHER_BODY(unsigned long long)
}

/* gather's gradient: dx [outer, nd, inner] from dy [outer, m, inner]. One
 * thread per (o, column c, chunk of rows [r0, r1)): it zeroes its rows, then
 * adds dy (o, j, c) into dx (o, idx[j], c) for j = 0 .. m-1 in order when
 * idx[j] is one of its rows. So every dx element sums its terms in index
 * order from +0, as the CPU does, whatever the chunking. */
#define EM_SHAPE_GATHER_GRAD_BODY(T)                                                  \
  EM_SHAPE_LOOP(n) {                                                                  \
    em_i64 c = i % inner, t = i / inner, ch = t % chunks, o = t / chunks;             \
    em_i64 r0 = ch * rows, r1 = r0 + rows < nd ? r0 + rows : nd;                       \
    T *col = dx + o * nd * inner + c;                                                 \
    const T *g = dy + o * m * inner + c;                                              \
    for (em_i64 r = r0; r < r1; r++) col[r * inner] = 0;                              \
    for (em_i64 j = 0; j < m; j++) {                                                  \
      em_i64 w = em_shape_index_at(idx, idx64, j);                                    \
      if (w < 0) w += nd;                                                             \
      if (w >= r0 && w < r1) col[w * inner] += g[j * inner];                          \
    }                                                                                 \
  }

EM_GLOBAL void em_shape_gather_grad_f32(float *dx, const float *dy, const void *idx, int idx64, em_i64 n, em_i64 m,
                                        em_i64 inner, em_i64 nd, em_i64 rows, em_i64 chunks) {
  EM_SHAPE_GATHER_GRAD_BODY(float)
}
EM_GLOBAL void em_shape_gather_grad_f64(double *dx, const double *dy, const void *idx, int idx64, em_i64 n, em_i64 m,
                                        em_i64 inner, em_i64 nd, em_i64 rows, em_i64 chunks) {
  EM_SHAPE_GATHER_GRAD_BODY(double)
}

/* --------------------------------------------------------------- one_hot --- */

/* Output [outer, depth, inner]: element (p, d, q) is on where index (p, q)
 * (negative: + depth) is d, else off. */
#define EM_SHAPE_ONE_HOT_BODY(T)                                                 \
  EM_SHAPE_LOOP(n) {                                                             \
    em_i64 q = i % inner, t = i / inner, d = t % depth, p = t / depth;          \
    em_i64 v = em_shape_index_at(idx, idx64, p * inner + q);                     \
    if (v < 0) v += depth;                                                       \
    dst[i] = v == d ? (T)on : (T)off;                                            \
  }

EM_GLOBAL void em_shape_one_hot_u8(unsigned char *dst, const void *idx, int idx64, em_i64 n, em_i64 depth,
                                   em_i64 inner, unsigned long long on, unsigned long long off) {
  EM_SHAPE_ONE_HOT_BODY(unsigned char)
}
EM_GLOBAL void em_shape_one_hot_u16(unsigned short *dst, const void *idx, int idx64, em_i64 n, em_i64 depth,
                                    em_i64 inner, unsigned long long on, unsigned long long off) {
  EM_SHAPE_ONE_HOT_BODY(unsigned short)
}
EM_GLOBAL void em_shape_one_hot_u32(unsigned int *dst, const void *idx, int idx64, em_i64 n, em_i64 depth,
                                    em_i64 inner, unsigned long long on, unsigned long long off) {
  EM_SHAPE_ONE_HOT_BODY(unsigned int)
}
EM_GLOBAL void em_shape_one_hot_u64(unsigned long long *dst, const void *idx, int idx64, em_i64 n, em_i64 depth,
                                    em_i64 inner, unsigned long long on, unsigned long long off) {
  EM_SHAPE_ONE_HOT_BODY(unsigned long long)
}

/* ----------------------------------------------------------------- top_k --- */

/* x [outer, nd, inner] of dtype t (not bool): one thread per element (p, j, q)
 * counts the elements of its row that come before it in top_k's order
 * (shape_math.h: a total order, ties by position), stopping at k; an element
 * of rank r < k is written at output position r, with its index j. The
 * ranks are unique, so every output is written once. */
EM_GLOBAL void em_shape_top_k(const void *x, int t, em_i64 n, em_i64 nd, em_i64 inner, em_i64 k, int largest,
                              void *vals, em_i64 *inds) {
  int isf = em_shape_is_float(t);
  EM_SHAPE_LOOP(n) {
    em_i64 q = i % inner, tt = i / inner, j = tt % nd, p = tt / nd, base = p * nd * inner + q, rank = 0;
    if (isf) {
      double v = em_shape_load_float(t, x, i);
      for (em_i64 jj = 0; jj < nd && rank < k; jj++)
        rank += jj != j && em_shape_topk_before_f(em_shape_load_float(t, x, base + jj * inner), jj, v, j, largest);
    } else {
      em_i64 v = em_shape_load_int(t, x, i);
      for (em_i64 jj = 0; jj < nd && rank < k; jj++)
        rank += jj != j && em_shape_topk_before_i(em_shape_load_int(t, x, base + jj * inner), jj, v, j, largest);
    }
    if (rank >= k) continue;
    em_i64 at = (p * k + rank) * inner + q;
    inds[at] = j;
    switch (t) {
    case EM_SHAPE_F64: case EM_SHAPE_I64: ((unsigned long long *)vals)[at] = ((const unsigned long long *)x)[i]; break;
    case EM_SHAPE_F32: case EM_SHAPE_I32: ((unsigned int *)vals)[at] = ((const unsigned int *)x)[i]; break;
    case EM_SHAPE_F16: case EM_SHAPE_BF16: ((unsigned short *)vals)[at] = ((const unsigned short *)x)[i]; break;
    default: ((unsigned char *)vals)[at] = ((const unsigned char *)x)[i]; break;
    }
  }
}

/* top_k's gradient: dx [outer, nd, inner] zero but at the indices, where it
 * takes dy [outer, k, inner]. One thread per row (p, q), writing in index
 * order (a repeated index: the last one wins, as on the CPU); an index out of
 * range is skipped (the CPU refuses it). */
#define EM_SHAPE_TOP_K_GRAD_BODY(T)                                               \
  EM_SHAPE_LOOP(n) {                                                              \
    em_i64 q = i % inner, p = i / inner;                                          \
    T *row = dx + p * nd * inner + q;                                             \
    for (em_i64 r = 0; r < nd; r++) row[r * inner] = 0;                           \
    for (em_i64 j = 0; j < k; j++) {                                              \
      em_i64 at = (p * k + j) * inner + q, v = em_shape_index_at(idx, idx64, at); \
      if (v >= 0 && v < nd) row[v * inner] = dy[at];                              \
    }                                                                             \
  }

EM_GLOBAL void em_shape_top_k_grad_u8(unsigned char *dx, const unsigned char *dy, const void *idx, int idx64,
                                      em_i64 n, em_i64 nd, em_i64 k, em_i64 inner) {
  EM_SHAPE_TOP_K_GRAD_BODY(unsigned char)
}
EM_GLOBAL void em_shape_top_k_grad_u16(unsigned short *dx, const unsigned short *dy, const void *idx, int idx64,
                                       em_i64 n, em_i64 nd, em_i64 k, em_i64 inner) {
  EM_SHAPE_TOP_K_GRAD_BODY(unsigned short)
}
EM_GLOBAL void em_shape_top_k_grad_u32(unsigned int *dx, const unsigned int *dy, const void *idx, int idx64,
                                       em_i64 n, em_i64 nd, em_i64 k, em_i64 inner) {
  EM_SHAPE_TOP_K_GRAD_BODY(unsigned int)
}
EM_GLOBAL void em_shape_top_k_grad_u64(unsigned long long *dx, const unsigned long long *dy, const void *idx,
                                       int idx64, em_i64 n, em_i64 nd, em_i64 k, em_i64 inner) {
  EM_SHAPE_TOP_K_GRAD_BODY(unsigned long long)
}

/* ------------------------------------------------------------ tile grad --- */

/* tile's gradient: input element i (6 axes x0..x5, repeats r0..r5) sums its
 * copies in dy [r0*x0, .., r5*x5] over the repeat index in row-major order
 * (last axis fastest), from +0, as the CPU does. */
#define EM_SHAPE_TILE_GRAD_BODY(T)                                                              \
  em_i64 xd[6] = {x0, x1, x2, x3, x4, x5}, rd[6] = {r0, r1, r2, r3, r4, r5}, ys[6];                 \
  ys[5] = 1;                                                                                      \
  for (int k = 4; k >= 0; k--) ys[k] = ys[k + 1] * rd[k + 1] * xd[k + 1];                         \
  EM_SHAPE_LOOP(n) {                                                                              \
    em_i64 rest = i, base = 0, step[6], c[6];                                                     \
    for (int k = 5; k >= 0; k--) {                                                                \
      base += rest % xd[k] * ys[k];                                                               \
      rest /= xd[k];                                                                              \
      step[k] = xd[k] * ys[k]; /* one repeat further along axis k */                              \
      c[k] = 0;                                                                                   \
    }                                                                                             \
    T acc = 0;                                                                                    \
    em_i64 off = 0;                                                                               \
    int more = 1;                                                                                 \
    while (more) {                                                                                \
      acc += dy[base + off];                                                                      \
      int k = 5;                                                                                  \
      for (; k >= 0; k--) {                                                                       \
        c[k]++;                                                                                   \
        off += step[k];                                                                           \
        if (c[k] < rd[k]) break;                                                                  \
        off -= step[k] * rd[k];                                                                   \
        c[k] = 0;                                                                                 \
      }                                                                                           \
      more = k >= 0;                                                                              \
    }                                                                                             \
    dx[i] = acc;                                                                                  \
  }

EM_GLOBAL void em_shape_tile_grad_f32(float *dx, const float *dy, em_i64 n, em_i64 x0, em_i64 x1, em_i64 x2,
                                      em_i64 x3, em_i64 x4, em_i64 x5, em_i64 r0, em_i64 r1, em_i64 r2, em_i64 r3,
                                      em_i64 r4, em_i64 r5) {
  EM_SHAPE_TILE_GRAD_BODY(float)
}
EM_GLOBAL void em_shape_tile_grad_f64(double *dx, const double *dy, em_i64 n, em_i64 x0, em_i64 x1, em_i64 x2,
                                      em_i64 x3, em_i64 x4, em_i64 x5, em_i64 r0, em_i64 r1, em_i64 r2, em_i64 r3,
                                      em_i64 r4, em_i64 r5) {
  EM_SHAPE_TILE_GRAD_BODY(double)
}
