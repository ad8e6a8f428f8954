/* The reduce family's kernels (ops/reduce.c, launched by ops/reduce_gpu.c):
 * reduce_* over any axes, argmax / argmin, and _reduce_grad. The public
 * primitive em_sum_f32 has its own module, reduce.cu.
 *
 * Every output folds its reduced elements in exactly the order of the CPU
 * loops in ops/reduce.c (see "Determinism" there), with reduce_math.h's
 * arithmetic, so every device gives the CPU's bits in both modes. The input
 * is seen as ops/reduce.c's plan: axes of size 1 dropped, neighbours of the
 * same kind merged; two walks of at most 4 (size, stride) axes each, padded
 * with size 1 / stride 0 in front:
 *   outer (o*): the kept axes but the innermost group, a row-major walk;
 *   rows  (r*): the reduced axes but the innermost group.
 * Case A (the innermost group is reduced, a contiguous run of `inner`):
 *   em_reduce_ops_seg_*: one value per segment (RDM_SEG elements of a run),
 *     8 threads per segment, lane l folding elements l, l + 8, ... from the
 *     identity, the 8 lanes folded pairwise (w = 4, 2, 1); a segment shorter
 *     than 8 folded in order by one thread. With one segment per output it
 *     finishes the output; else
 *   em_reduce_ops_fold_* twice: segments in fixed blocks, then the blocks.
 * Case B (the innermost group is kept, `inner` neighbouring outputs):
 *   em_reduce_ops_rows_*: one thread per (output, block of rows) folds its
 *     rows in order from the identity; with one block it finishes the
 *     output, else em_reduce_ops_fold_* folds the blocks in order.
 * The launch geometry (grid, and for argmax the threads per output) changes
 * which thread does what, never an order. Kernels loop grid-stride with a
 * trip count uniform across each block, so every thread reaches every
 * EM_SYNC(). */
#include "em_kernel.h"
#include "reduce_math.h"

#define RDK_THREADS 256

/* A walk's parameters: 4 sizes then 4 strides (outermost first). */
#define RDK_WALK(p) \
  em_i64 p##d0, em_i64 p##d1, em_i64 p##d2, em_i64 p##d3, em_i64 p##s0, em_i64 p##s1, em_i64 p##s2, em_i64 p##s3
#define RDK_SEEK(p, t) rdk_seek((t), p##d1, p##d2, p##d3, p##s0, p##s1, p##s2, p##s3)

/* The offset of the t-th position of a walk (row-major). */
EM_DEVICE em_i64 rdk_seek(em_i64 t, em_i64 d1, em_i64 d2, em_i64 d3, em_i64 s0, em_i64 s1, em_i64 s2, em_i64 s3) {
  em_i64 off = 0, q;
  if (d3 != 1) {
    q = t / d3;
    off += (t - q * d3) * s3;
    t = q;
  }
  if (d2 != 1) {
    q = t / d2;
    off += (t - q * d2) * s2;
    t = q;
  }
  if (d1 != 1) {
    q = t / d1;
    off += (t - q * d1) * s1;
    t = q;
  }
  return off + t * s0;
}

/* ------------------------------------------------------------- sinks --- */

/* A finished float accumulator of output o to its destination. */
EM_DEVICE void rdk_put_f(double acc, em_i64 o, int dst, int fn, double nr, const double *shift, double *yd,
                         float *yf) {
  if (dst == RDM_DST_RAW) yd[o] = acc;
  else if (dst == RDM_DST_SHIFT) yd[o] = rdm_shift(acc);
  else {
    double v = rdm_finish(fn, acc, nr, shift ? shift[o] : 0.0);
    if (dst == RDM_DST_F32) yf[o] = (float)v;
    else yd[o] = v;
  }
}

/* A finished integer accumulator: its low bits (two's complement wrap). */
EM_DEVICE void rdk_put_i(unsigned long long acc, em_i64 o, int dst, int fn, double nr, const double *shift,
                         long long *yd, int *yf) {
  (void)fn, (void)nr, (void)shift;
  if (dst == RDM_DST_I32) yf[o] = (int)(unsigned int)acc;
  else yd[o] = (long long)acc;
}

/* ------------------------------------------------------- the reductions --- */

/* One lane's fold of a segment: v = COMB(v, TR(p[i])) for i = lane,
 * lane + 8, ... < n, in that order. The loads do not depend on v, so they
 * go RDK_AHEAD at a time into registers before the folds that use them: a
 * thread keeps RDK_AHEAD loads in flight rather than one, which the
 * segment pass needs to stream at the memory's speed (it has only one
 * thread per 512 elements). */
#define RDK_AHEAD 16
#define RDK_LANE(T, PASS, TR, COMB)                                                                                  \
  do {                                                                                                               \
    em_i64 i = lane;                                                                                                 \
    for (; i + (RDK_AHEAD - 1) * RDM_LANES < n; i += RDK_AHEAD * RDM_LANES) {                                        \
      T e_[RDK_AHEAD];                                                                                               \
      for (int k = 0; k < RDK_AHEAD; k++) e_[k] = p[i + k * RDM_LANES];                                             \
      for (int k = 0; k < RDK_AHEAD; k++) v = COMB(PASS, v, TR(PASS, e_[k], shv));                                  \
    }                                                                                                                \
    for (; i < n; i += RDM_LANES) v = COMB(PASS, v, TR(PASS, p[i], shv));                                           \
  } while (0)

/* One set of reduction kernels: T the element, A the accumulator, YD / YF
 * the two output pointer types, INIT / TR / COMB the pass (reduce_math.h),
 * PUT the sink. */
#define RDK_REDUCE(SUF, T, A, YD, YF, INIT, TR, COMB, PUT)                                                           \
  /* Case A, stage 1: segment s of all n_out * n_seg; see the top. */                                               \
  EM_GLOBAL void em_reduce_ops_seg_##SUF(const T *x, const double *shift, int pass, em_i64 n_out, em_i64 inner,      \
                                         em_i64 nchunk, em_i64 n_seg, int lanes, A *mid, int dst, int fn, double nr, \
                                         YD *yd, YF *yf, RDK_WALK(o), RDK_WALK(r)) {                                 \
    EM_SHARED A sh_[RDK_THREADS];                                                                                    \
    (void)od0, (void)rd0;                                                                                            \
    int t = EM_TID_X, lane = t % lanes, per_blk = EM_BDIM_X / lanes;                                                 \
    em_i64 total = n_out * n_seg;                                                                                    \
    for (em_i64 g0 = (em_i64)EM_BID_X * per_blk; g0 < total; g0 += (em_i64)EM_GDIM_X * per_blk) {                    \
      em_i64 s = g0 + t / lanes, n = 0, o = 0;                                                                       \
      A v = INIT(pass);                                                                                              \
      if (s < total) {                                                                                               \
        o = s / n_seg;                                                                                               \
        em_i64 sg = s - o * n_seg, row = sg / nchunk, at = (sg - row * nchunk) * RDM_SEG;                            \
        n = inner - at < RDM_SEG ? inner - at : RDM_SEG;                                                             \
        const T *p = x + RDK_SEEK(o, o) + RDK_SEEK(r, row) + at;                                                     \
        double shv = shift ? shift[o] : 0.0;                                                                         \
        (void)shv;                                                                                                   \
        if (n < RDM_LANES) {                                                                                         \
          if (lane == 0)                                                                                             \
            for (em_i64 i = 0; i < n; i++) v = COMB(pass, v, TR(pass, p[i], shv));                                   \
        } else if (pass == RDM_PASS_SUM) { /* the common pass, its switches folded away */                           \
          RDK_LANE(T, RDM_PASS_SUM, TR, COMB);                                                                       \
        } else {                                                                                                     \
          RDK_LANE(T, pass, TR, COMB);                                                                               \
        }                                                                                                            \
      }                                                                                                              \
      sh_[t] = v;                                                                                                    \
      EM_SYNC();                                                                                                     \
      if (lane == 0 && s < total) {                                                                                  \
        A r_ = sh_[t];                                                                                               \
        if (n >= RDM_LANES) {                                                                                        \
          A l_[RDM_LANES];                                                                                           \
          for (int k = 0; k < RDM_LANES; k++) l_[k] = sh_[t + k];                                                    \
          for (int w = RDM_LANES / 2; w; w /= 2)                                                                     \
            for (int k = 0; k < w; k++) l_[k] = COMB(pass, l_[k], l_[k + w]);                                        \
          r_ = l_[0];                                                                                                \
        }                                                                                                            \
        if (n_seg == 1) PUT(COMB(pass, INIT(pass), COMB(pass, INIT(pass), r_)), o, dst, fn, nr, shift, yd, yf);      \
        else mid[s] = r_;                                                                                            \
      }                                                                                                              \
      EM_SYNC();                                                                                                     \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  /* Case B, stage 1: thread (b, blk, j) folds rows [blk*rpb, +rpb) of output                                      \
   * b*inner + j; mid[(b*n_blk + blk)*inner + j] when n_blk > 1. */                                                  \
  EM_GLOBAL void em_reduce_ops_rows_##SUF(const T *x, const double *shift, int pass, em_i64 n_bases, em_i64 inner,   \
                                          em_i64 n_rows, em_i64 rpb, em_i64 n_blk, A *mid, int dst, int fn,          \
                                          double nr, YD *yd, YF *yf, RDK_WALK(o), RDK_WALK(r)) {                     \
    (void)od0, (void)rd0;                                                                                            \
    em_i64 total = n_bases * n_blk * inner, step = (em_i64)EM_BDIM_X * EM_GDIM_X;                                    \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < total; i += step) {                                 \
      em_i64 j = i % inner, q = i / inner, blk = q % n_blk, b = q / n_blk, o = b * inner + j;                        \
      em_i64 t0 = blk * rpb, t1 = t0 + rpb < n_rows ? t0 + rpb : n_rows;                                             \
      const T *p = x + RDK_SEEK(o, b) + j;                                                                           \
      double shv = shift ? shift[o] : 0.0;                                                                           \
      (void)shv;                                                                                                     \
      /* the rows walk, stepped (rd_step) */                                                                         \
      em_i64 off = RDK_SEEK(r, t0), q1 = t0 / rd3, i3 = t0 - q1 * rd3, q2 = q1 / rd2, i2 = q1 - q2 * rd2;            \
      em_i64 i1 = q2 % rd1;                                                                                          \
      A v = INIT(pass);                                                                                              \
      for (em_i64 tt = t0; tt < t1; tt++) {                                                                          \
        v = COMB(pass, v, TR(pass, p[off], shv));                                                                    \
        off += rs3;                                                                                                  \
        if (++i3 == rd3) {                                                                                           \
          i3 = 0;                                                                                                    \
          off += rs2 - rs3 * rd3;                                                                                    \
          if (++i2 == rd2) {                                                                                         \
            i2 = 0;                                                                                                  \
            off += rs1 - rs2 * rd2;                                                                                  \
            if (++i1 == rd1) {                                                                                       \
              i1 = 0;                                                                                                \
              off += rs0 - rs1 * rd1;                                                                                \
            }                                                                                                        \
          }                                                                                                          \
        }                                                                                                            \
      }                                                                                                              \
      if (n_blk == 1) PUT(COMB(pass, INIT(pass), v), o, dst, fn, nr, shift, yd, yf);                                 \
      else mid[i] = v;                                                                                               \
    }                                                                                                                \
  }

EM_DEVICE double rdk_tr_f(int pass, double v, double sh) { return rdm_tr(pass, v, sh); }
EM_DEVICE unsigned long long rdk_tr_i(int pass, long long v, double sh) {
  (void)pass, (void)sh;
  return (unsigned long long)v;
}

RDK_REDUCE(f32, float, double, double, float, rdm_init, rdk_tr_f, rdm_comb, rdk_put_f)
RDK_REDUCE(f64, double, double, double, float, rdm_init, rdk_tr_f, rdm_comb, rdk_put_f)
RDK_REDUCE(i32, int, unsigned long long, long long, int, rdm_iinit, rdk_tr_i, rdm_icomb, rdk_put_i)
RDK_REDUCE(i64, long long, unsigned long long, long long, int, rdm_iinit, rdk_tr_i, rdm_icomb, rdk_put_i)

/* The fold stage: for group g and chunk k (of n_chunks), the fold from the
 * identity of items [k*per, min((k+1)*per, n_items)); item i of group g is
 * in[((g / width) * n_items + i) * width + g % width] (width 1: group-major;
 * width `inner`: case B's row blocks). final: finish output g (n_chunks is
 * 1), else mid[g * n_chunks + k]. n_items 0 gives the identity. */
#define RDK_FOLD(SUF, A, YD, YF, INIT, COMB, PUT)                                                                    \
  EM_GLOBAL void em_reduce_ops_fold_##SUF(const A *in, int pass, em_i64 n_groups, em_i64 n_items, em_i64 per,        \
                                          em_i64 n_chunks, em_i64 width, int final, A *mid, int dst, int fn,         \
                                          double nr, const double *shift, YD *yd, YF *yf) {                          \
    em_i64 total = n_groups * n_chunks, step = (em_i64)EM_BDIM_X * EM_GDIM_X;                                        \
    for (em_i64 u = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; u < total; u += step) {                                 \
      em_i64 g = u / n_chunks, k = u - g * n_chunks, i0 = k * per, i1 = i0 + per < n_items ? i0 + per : n_items;     \
      const A *src = in + (g / width) * n_items * width + g % width;                                                 \
      A v = INIT(pass);                                                                                              \
      for (em_i64 i = i0; i < i1; i++) v = COMB(pass, v, src[i * width]);                                            \
      if (final) PUT(v, g, dst, fn, nr, shift, yd, yf);                                                              \
      else mid[u] = v;                                                                                               \
    }                                                                                                                \
  }

RDK_FOLD(f, double, double, float, rdm_init, rdm_comb, rdk_put_f)
RDK_FOLD(i, unsigned long long, long long, int, rdm_iinit, rdm_icomb, rdk_put_i)

/* The same folds, one block per unit u (grid-stride over blocks), for few
 * units of many items: the last fold of a full reduction is one unit of
 * n_blk items (2048 for 64 M elements), which one thread reading global
 * memory item by item takes longer over than the whole segment pass. Here
 * the block reads up to RDK_STAGE items at a time into shared memory, each
 * thread RDK_STAGE_AHEAD loads in flight, and thread 0 folds them in order
 * from there: the same fold, the same order. */
#define RDK_STAGE 2048
#define RDK_STAGE_AHEAD 8
#define RDK_FOLD1(SUF, A, YD, YF, INIT, COMB, PUT)                                                                   \
  EM_GLOBAL void em_reduce_ops_fold1_##SUF(const A *in, int pass, em_i64 n_groups, em_i64 n_items, em_i64 per,       \
                                           em_i64 n_chunks, em_i64 width, int final, A *mid, int dst, int fn,        \
                                           double nr, const double *shift, YD *yd, YF *yf) {                         \
    EM_SHARED A st_[RDK_STAGE];                                                                                      \
    const em_i64 total = n_groups * n_chunks, bd = EM_BDIM_X, t = EM_TID_X;                                          \
    for (em_i64 u = EM_BID_X; u < total; u += EM_GDIM_X) {                                                           \
      em_i64 g = u / n_chunks, k = u - g * n_chunks, i0 = k * per, i1 = i0 + per < n_items ? i0 + per : n_items;     \
      const A *src = in + (g / width) * n_items * width + g % width;                                                 \
      A v = INIT(pass);                                                                                              \
      for (em_i64 c0 = i0; c0 < i1; c0 += RDK_STAGE) {                                                               \
        const em_i64 m = i1 - c0 < RDK_STAGE ? i1 - c0 : RDK_STAGE;                                                  \
        for (em_i64 j0 = 0; j0 < m; j0 += RDK_STAGE_AHEAD * bd) {                                                    \
          A r_[RDK_STAGE_AHEAD];                                                                                     \
          for (int q = 0; q < RDK_STAGE_AHEAD; q++) {                                                                \
            const em_i64 j = j0 + q * bd + t;                                                                        \
            r_[q] = j < m ? src[(c0 + j) * width] : v;                                                               \
          }                                                                                                          \
          for (int q = 0; q < RDK_STAGE_AHEAD; q++) {                                                                \
            const em_i64 j = j0 + q * bd + t;                                                                        \
            if (j < m) st_[j] = r_[q];                                                                               \
          }                                                                                                          \
        }                                                                                                            \
        EM_SYNC();                                                                                                   \
        if (t == 0) {                                                                                                \
          if (pass == RDM_PASS_SUM) /* the common pass, its switch folded away */                                    \
            for (em_i64 j = 0; j < m; j++) v = COMB(RDM_PASS_SUM, v, st_[j]);                                        \
          else                                                                                                       \
            for (em_i64 j = 0; j < m; j++) v = COMB(pass, v, st_[j]);                                                \
        }                                                                                                            \
        EM_SYNC();                                                                                                   \
      }                                                                                                              \
      if (t == 0) {                                                                                                  \
        if (final) PUT(v, g, dst, fn, nr, shift, yd, yf);                                                            \
        else mid[u] = v;                                                                                             \
      }                                                                                                              \
    }                                                                                                                \
  }

RDK_FOLD1(f, double, double, float, rdm_init, rdm_comb, rdk_put_f)
RDK_FOLD1(i, unsigned long long, long long, int, rdm_iinit, rdm_icomb, rdk_put_i)

/* ---------------------------------------------------- argmax, argmin --- */

/* Which of two candidates wins: NaN counts as the extreme; equal values go
 * to the lower position (the first), or the higher with `last`. The rule is
 * a total order, so folding per-thread candidates as a tree finds exactly the
 * element the CPU's row-major scan keeps. */
EM_DEVICE int rdk_arg_wins(double v, int vn, em_i64 vt, double b, int bn, em_i64 bt, int want_max, int last) {
  if (bt < 0) return vt >= 0;
  if (vt < 0) return 0;
  int c = (vn || bn) ? vn - bn : want_max ? (v > b) - (v < b) : (v < b) - (v > b);
  if (c) return c > 0;
  return last ? vt > bt : vt < bt;
}

EM_DEVICE int rdk_arg_wins_i(long long v, em_i64 vt, long long b, em_i64 bt, int want_max, int last) {
  if (bt < 0) return vt >= 0;
  if (vt < 0) return 0;
  int c = want_max ? (v > b) - (v < b) : (v < b) - (v > b);
  if (c) return c > 0;
  return last ? vt > bt : vt < bt;
}

#define RDK_LD_ID(v) (v)
#define RDK_LD_F16(v) em_f16_bits_to_f32(v)
#define RDK_LD_BF16(v) em_bf16_bits_to_f32(v)
#define RDK_LD_I(v) ((long long)(v))
#define RDK_NAN_F(v) ((v) != (v))
#define RDK_NAN_NO(v) 0
#define RDK_WINS_F(v, vn, vt, b, bn, bt, wm, l) rdk_arg_wins((double)(v), vn, vt, (double)(b), bn, bt, wm, l)
#define RDK_WINS_I(v, vn, vt, b, bn, bt, wm, l) rdk_arg_wins_i(v, vt, b, bt, wm, l)

/* The selection: `lanes` threads per output (a power of two dividing the
 * block), lane l scanning positions l, l + lanes, ... of the output's
 * n_red reduced elements (row-major), then a tree over the lanes. pos[o]
 * is the winner's position, or its offset in x with `offsets`. Case A
 * (inner_reduced): position t is element t % inner of run t / inner; case
 * B: output o = b*inner + j, position t is row t. */
#define RDK_ARG(SUF, T, V, LOAD, ISNAN, WINS)                                                                        \
  EM_GLOBAL void em_reduce_ops_arg_##SUF(const T *x, em_i64 n_out, int inner_reduced, em_i64 inner, em_i64 n_red,   \
                                         int lanes, int want_max, int last, int offsets, long long *pos,             \
                                         RDK_WALK(o), RDK_WALK(r)) {                                                 \
    EM_SHARED V sv_[RDK_THREADS];                                                                                    \
    EM_SHARED int sn_[RDK_THREADS];                                                                                  \
    EM_SHARED em_i64 st_[RDK_THREADS];                                                                               \
    (void)od0, (void)rd0;                                                                                            \
    int t = EM_TID_X, lane = t % lanes, per_blk = EM_BDIM_X / lanes;                                                 \
    for (em_i64 o0 = (em_i64)EM_BID_X * per_blk; o0 < n_out; o0 += (em_i64)EM_GDIM_X * per_blk) {                    \
      em_i64 o = o0 + t / lanes, base = 0, bt = -1;                                                                  \
      V best = (V)0;                                                                                                 \
      int bn = 0;                                                                                                    \
      if (o < n_out) {                                                                                               \
        base = inner_reduced ? RDK_SEEK(o, o) : RDK_SEEK(o, o / inner) + o % inner;                                  \
        for (em_i64 k = lane; k < n_red; k += lanes) {                                                               \
          em_i64 off = inner_reduced ? RDK_SEEK(r, k / inner) + k % inner : RDK_SEEK(r, k);                          \
          V v = LOAD(x[base + off]);                                                                                 \
          int vn = ISNAN(v);                                                                                         \
          if (WINS(v, vn, k, best, bn, bt, want_max, last)) {                                                        \
            best = v;                                                                                                \
            bn = vn;                                                                                                 \
            bt = k;                                                                                                  \
          }                                                                                                          \
        }                                                                                                            \
      }                                                                                                              \
      sv_[t] = best;                                                                                                 \
      sn_[t] = bn;                                                                                                   \
      st_[t] = bt;                                                                                                   \
      EM_SYNC();                                                                                                     \
      for (int w = lanes / 2; w; w /= 2) {                                                                           \
        if (lane < w && WINS(sv_[t + w], sn_[t + w], st_[t + w], sv_[t], sn_[t], st_[t], want_max, last)) {          \
          sv_[t] = sv_[t + w];                                                                                       \
          sn_[t] = sn_[t + w];                                                                                       \
          st_[t] = st_[t + w];                                                                                       \
        }                                                                                                            \
        EM_SYNC();                                                                                                   \
      }                                                                                                              \
      if (lane == 0 && o < n_out) {                                                                                  \
        em_i64 k = st_[t];                                                                                           \
        if (offsets) k = base + (inner_reduced ? RDK_SEEK(r, k / inner) + k % inner : RDK_SEEK(r, k));               \
        pos[o] = k;                                                                                                  \
      }                                                                                                              \
      EM_SYNC();                                                                                                     \
    }                                                                                                                \
  }

RDK_ARG(f32, float, float, RDK_LD_ID, RDK_NAN_F, RDK_WINS_F)
RDK_ARG(f64, double, double, RDK_LD_ID, RDK_NAN_F, RDK_WINS_F)
RDK_ARG(f16, unsigned short, float, RDK_LD_F16, RDK_NAN_F, RDK_WINS_F)
RDK_ARG(bf16, unsigned short, float, RDK_LD_BF16, RDK_NAN_F, RDK_WINS_F)
RDK_ARG(i32, int, long long, RDK_LD_I, RDK_NAN_NO, RDK_WINS_I)
RDK_ARG(i64, long long, long long, RDK_LD_I, RDK_NAN_NO, RDK_WINS_I)
RDK_ARG(u8, unsigned char, long long, RDK_LD_I, RDK_NAN_NO, RDK_WINS_I)

/* ---------------------------------------------------------- _reduce_grad --- */

/* dx[i] for every element of x: its output o = sum of its coordinates along
 * the merged axes g0..g7 (sizes d*, innermost last, padded with 1 in front)
 * times the output strides s* (0 on reduced axes). max / min: dy[o] where i
 * is the output's selected element pos[o], else 0; the others through
 * rdm_grad (a1, a2: per-output helpers, or NULL). */
#define RDK_GRAD(SUF, T)                                                                                             \
  EM_GLOBAL void em_reduce_ops_grad_##SUF(const T *x, const T *y, const T *dy, const double *a1, const double *a2,   \
                                          const long long *pos, int fn, double inv_n, em_i64 n, T *dx, em_i64 d0,    \
                                          em_i64 d1, em_i64 d2, em_i64 d3, em_i64 d4, em_i64 d5, em_i64 d6,          \
                                          em_i64 d7, em_i64 s0, em_i64 s1, em_i64 s2, em_i64 s3, em_i64 s4,          \
                                          em_i64 s5, em_i64 s6, em_i64 s7) {                                         \
    (void)d0;                                                                                                        \
    em_i64 step = (em_i64)EM_BDIM_X * EM_GDIM_X;                                                                     \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += step) {                                     \
      em_i64 r = i, o = 0, q;                                                                                        \
      if (d7 != 1) { q = r / d7; o += (r - q * d7) * s7; r = q; }                                                    \
      if (d6 != 1) { q = r / d6; o += (r - q * d6) * s6; r = q; }                                                    \
      if (d5 != 1) { q = r / d5; o += (r - q * d5) * s5; r = q; }                                                    \
      if (d4 != 1) { q = r / d4; o += (r - q * d4) * s4; r = q; }                                                    \
      if (d3 != 1) { q = r / d3; o += (r - q * d3) * s3; r = q; }                                                    \
      if (d2 != 1) { q = r / d2; o += (r - q * d2) * s2; r = q; }                                                    \
      if (d1 != 1) { q = r / d1; o += (r - q * d1) * s1; r = q; }                                                    \
      o += r * s0;                                                                                                   \
      if (fn == RDM_FN_MAX || fn == RDM_FN_MIN) dx[i] = i == pos[o] ? dy[o] : (T)0;                                  \
      else                                                                                                           \
        dx[i] = (T)rdm_grad(fn, (double)x[i], (double)y[o], (double)dy[o], a1 ? a1[o] : 0.0, a2 ? a2[o] : 0.0,       \
                            inv_n);                                                                                  \
    }                                                                                                                \
  }

RDK_GRAD(f32, float)
RDK_GRAD(f64, double)
