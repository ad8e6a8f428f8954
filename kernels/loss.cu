/* The loss family's kernels (ops/loss.c, launched by ops/loss_gpu.c): softmax,
 * log_softmax, cross entropy with softmax, binary cross entropy, squared
 * error, classification error and their fused gradients, f32 and f64.
 *
 * Row kernels (every sum or maximum along a row): blocks of LK_THREADS
 * threads; a row of c elements takes L = lm_lanes(c) consecutive threads
 * (one per lane), so a block holds LK_THREADS / L rows and loops over the rows
 * with a stride of the grid. Lane l reads elements l, l + L, ... and the lanes
 * fold as a tree in shared memory: kernels/loss_math.h's documented order,
 * which ops/loss.c follows on the CPU in portable mode. The order depends on
 * the row length only, never on the grid. Launch: LK_THREADS threads, any
 * number of blocks, L passed in (a power of two <= LK_THREADS).
 *
 * Elementwise kernels: 1-D grid-stride. Checks (labels in range, p in [0, 1]):
 * one block of LK_THREADS threads finds the first offending position and
 * thread 0 reports it into a status record (runtime/devcheck.h: int64
 * {tag, position, integer value, double value}) unless an earlier check
 * already did; the host reads it at its next synchronisation, so a run
 * makes no copy for them. With `fresh` (the copy-back fallback, into
 * scratch) the record is written whatever is found, tag 0 for nothing. A
 * label the check rejects is read as ignored by the other kernels, so a run
 * whose failure is reported later never reads outside the logits. */
#include "em_kernel.h"
#include "loss_math.h"

#define LK_THREADS 256

/* ------------------------------------------------------------ helpers --- */

/* The lanes of each row fold as a tree (sum); every thread of the block must call it. */
EM_DEVICE double lk_sum(double *sh, int L, double v) {
  int t = EM_TID_X, lane = t & (L - 1);
  sh[t] = v;
  EM_SYNC();
  for (int w = L >> 1; w > 0; w >>= 1) {
    if (lane < w) sh[t] = sh[t] + sh[t + w];
    EM_SYNC();
  }
  double r = sh[t - lane];
  EM_SYNC();
  return r;
}

/* The same with the row maximum's step (exact: any order gives the same value). */
EM_DEVICE double lk_max(double *sh, int L, double v) {
  int t = EM_TID_X, lane = t & (L - 1);
  sh[t] = v;
  EM_SYNC();
  for (int w = L >> 1; w > 0; w >>= 1) {
    if (lane < w) sh[t] = lm_max_f64(sh[t], sh[t + w]);
    EM_SYNC();
  }
  double r = sh[t - lane];
  EM_SYNC();
  return r;
}

/* A sparse label (i32 or i64) of row `row`; -1 when it is ignore_index or
 * outside [0, c) (the check kernel reports that one; nothing reads x at it). */
EM_DEVICE em_i64 lk_label(const void *lab, int is64, em_i64 row, int has_ignore, em_i64 ignore, em_i64 c) {
  em_i64 l = is64 ? ((const em_i64 *)lab)[row] : (em_i64)((const int *)lab)[row];
  return (has_ignore && l == ignore) || l < 0 || l >= c ? -1 : l;
}

EM_DEVICE int lk_isinf(double v) { return v == lm_inf_d() || v == -lm_inf_d(); }

/* Thread 0 reports the first bad position `bad` (or nothing, -1) into the
 * status record, with its value. Within one check the first bad element is
 * named, as on the CPU; across checks the earliest in stream order wins. */
EM_DEVICE void lk_report(em_i64 *rec, em_i64 tag, int fresh, em_i64 bad, em_i64 ivalue, double fvalue) {
  if (!fresh && (bad < 0 || rec[0] != 0)) return;
  rec[1] = bad;
  rec[2] = ivalue;
  ((double *)rec)[3] = fvalue;
  rec[0] = bad >= 0 ? tag : 0;
}

/* The first sparse label outside [0, c) (ignore_index excepted), reported. One block. */
EM_GLOBAL void em_loss_check_labels(const void *lab, int is64, em_i64 n, em_i64 c, int has_ignore, em_i64 ignore,
                                    em_i64 *rec, em_i64 tag, int fresh) {
  EM_SHARED em_i64 sh[LK_THREADS];
  int t = EM_TID_X;
  em_i64 bad = -1;
  for (em_i64 i = t; i < n && bad < 0; i += LK_THREADS) {
    em_i64 l = is64 ? ((const em_i64 *)lab)[i] : (em_i64)((const int *)lab)[i];
    if (!(has_ignore && l == ignore) && (l < 0 || l >= c)) bad = i;
  }
  sh[t] = bad;
  EM_SYNC();
  for (int w = LK_THREADS / 2; w > 0; w >>= 1) {
    if (t < w && sh[t + w] >= 0 && (sh[t] < 0 || sh[t + w] < sh[t])) sh[t] = sh[t + w];
    EM_SYNC();
  }
  if (t == 0) {
    em_i64 b = sh[0], l = 0;
    if (b >= 0) l = is64 ? ((const em_i64 *)lab)[b] : (em_i64)((const int *)lab)[b];
    lk_report(rec, tag, fresh, b, l, (double)l);
  }
}

/* ------------------------------------------------------ typed kernels --- */

#define LOSS_KERNELS(T, S)                                                                                      \
  /* softmax (log_out 0) or log_softmax (1) along rows of [outer, c, inner]. */                                 \
  EM_GLOBAL void em_loss_softmax_##S(const T *x, T *y, em_i64 n_rows, em_i64 c, em_i64 inner, int L,            \
                                     int log_out) {                                                             \
    EM_SHARED double sh[LK_THREADS];                                                                            \
    int lane = EM_TID_X & (L - 1);                                                                              \
    em_i64 rpb = LK_THREADS / L;                                                                                \
    for (em_i64 row0 = (em_i64)EM_BID_X * rpb; row0 < n_rows; row0 += (em_i64)EM_GDIM_X * rpb) {                \
      em_i64 row = row0 + EM_TID_X / L;                                                                         \
      int on = row < n_rows;                                                                                    \
      em_i64 base = on ? lm_row_base(row, c, inner) : 0;                                                        \
      double m = -lm_inf_d();                                                                                   \
      for (em_i64 j = lane; on && j < c; j += L) m = lm_max_f64(m, (double)x[base + j * inner]);                \
      double mx = lk_max(sh, L, m);                                                                             \
      double s = 0.0;                                                                                           \
      for (em_i64 j = lane; on && j < c; j += L) s = s + lm_exp_shift_##S(x[base + j * inner], (T)mx);          \
      double sum = lk_sum(sh, L, s), lse = log_out ? lm_log_d(sum) : 0.0;                                       \
      for (em_i64 j = lane; on && j < c; j += L) {                                                              \
        em_i64 k = base + j * inner;                                                                            \
        double e = log_out ? 0.0 : lm_exp_shift_##S(x[k], (T)mx);                                               \
        y[k] = (T)lm_softmax_out(e, (double)x[k], mx, sum, lse, log_out);                                       \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* softmax's gradient y (dy - sum(dy y)), or log_softmax's dy - e^y sum(dy). */                               \
  EM_GLOBAL void em_loss_softmax_grad_##S(const T *y, const T *dy, T *dx, em_i64 n_rows, em_i64 c, em_i64 inner, \
                                          int L, int log_out) {                                                 \
    EM_SHARED double sh[LK_THREADS];                                                                            \
    int lane = EM_TID_X & (L - 1);                                                                              \
    em_i64 rpb = LK_THREADS / L;                                                                                \
    for (em_i64 row0 = (em_i64)EM_BID_X * rpb; row0 < n_rows; row0 += (em_i64)EM_GDIM_X * rpb) {                \
      em_i64 row = row0 + EM_TID_X / L;                                                                         \
      int on = row < n_rows;                                                                                    \
      em_i64 base = on ? lm_row_base(row, c, inner) : 0;                                                        \
      double s = 0.0;                                                                                           \
      for (em_i64 j = lane; on && j < c; j += L) {                                                              \
        em_i64 k = base + j * inner;                                                                            \
        s = s + (log_out ? (double)dy[k] : (double)dy[k] * (double)y[k]);                                       \
      }                                                                                                         \
      double dot = lk_sum(sh, L, s);                                                                            \
      for (em_i64 j = lane; on && j < c; j += L) {                                                              \
        em_i64 k = base + j * inner;                                                                            \
        double ey = log_out ? lm_exp_##S(y[k]) : 0.0;                                                           \
        dx[k] = (T)lm_softmax_grad_out((double)y[k], (double)dy[k], ey, dot, log_out);                          \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Cross entropy per row. t: dense labels (T, x's shape) or, when sparse, class indices (i32/i64). */         \
  EM_GLOBAL void em_loss_ce_##S(const T *x, const void *t, int sparse, int is64, int has_ignore, em_i64 ignore, \
                                T *out, em_i64 n_rows, em_i64 c, em_i64 inner, int L) {                         \
    EM_SHARED double sh[LK_THREADS];                                                                            \
    int lane = EM_TID_X & (L - 1);                                                                              \
    em_i64 rpb = LK_THREADS / L;                                                                                \
    const T *td = (const T *)t;                                                                                 \
    for (em_i64 row0 = (em_i64)EM_BID_X * rpb; row0 < n_rows; row0 += (em_i64)EM_GDIM_X * rpb) {                \
      em_i64 row = row0 + EM_TID_X / L;                                                                         \
      int on = row < n_rows;                                                                                    \
      em_i64 base = on ? lm_row_base(row, c, inner) : 0;                                                        \
      double m = -lm_inf_d();                                                                                   \
      for (em_i64 j = lane; on && j < c; j += L) m = lm_max_f64(m, (double)x[base + j * inner]);                \
      double mx = lk_max(sh, L, m);                                                                             \
      int inf_max = lk_isinf(mx);                                                                               \
      double s = 0.0;                                                                                           \
      for (em_i64 j = lane; on && !inf_max && j < c; j += L) s = s + lm_exp_shift_##S(x[base + j * inner], (T)mx); \
      double sum = lk_sum(sh, L, s);                                                                            \
      if (inf_max) sum = 1.0;                                                                                   \
      double ls = lm_log_d(sum);                                                                                \
      if (sparse) {                                                                                             \
        if (on && lane == 0) {                                                                                  \
          em_i64 l = lk_label(t, is64, row, has_ignore, ignore, c);                                             \
          out[row] = (T)(l < 0 ? 0.0 : (mx - (double)x[base + l * inner]) + ls);                                \
        }                                                                                                       \
        continue;                                                                                               \
      }                                                                                                         \
      double a = 0.0;                                                                                           \
      for (em_i64 j = lane; on && j < c; j += L) {                                                              \
        em_i64 k = base + j * inner;                                                                            \
        double tv = (double)td[k];                                                                              \
        a = a + (tv != 0.0 ? tv * ((mx - (double)x[k]) + ls) : 0.0);                                            \
      }                                                                                                         \
      double loss = lk_sum(sh, L, a);                                                                           \
      if (on && lane == 0) out[row] = (T)loss;                                                                  \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* Cross entropy's gradient into the logits (which 0) or the dense labels (1); dy per row. */                 \
  EM_GLOBAL void em_loss_ce_grad_##S(const T *x, const void *t, int sparse, int is64, int has_ignore,           \
                                     em_i64 ignore, const T *dy, T *d, em_i64 n_rows, em_i64 c, em_i64 inner,   \
                                     int L, int which) {                                                        \
    EM_SHARED double sh[LK_THREADS];                                                                            \
    int lane = EM_TID_X & (L - 1);                                                                              \
    em_i64 rpb = LK_THREADS / L;                                                                                \
    const T *td = (const T *)t;                                                                                 \
    for (em_i64 row0 = (em_i64)EM_BID_X * rpb; row0 < n_rows; row0 += (em_i64)EM_GDIM_X * rpb) {                \
      em_i64 row = row0 + EM_TID_X / L;                                                                         \
      int on = row < n_rows;                                                                                    \
      em_i64 base = on ? lm_row_base(row, c, inner) : 0;                                                        \
      double g = on ? (double)dy[row] : 0.0;                                                                    \
      em_i64 l = on && sparse ? lk_label(t, is64, row, has_ignore, ignore, c) : -1;                             \
      if (sparse && l < 0) g = 0.0;                                                                             \
      double ts = 0.0;                                                                                          \
      for (em_i64 j = lane; on && !sparse && j < c; j += L) ts = ts + (double)td[base + j * inner];             \
      double tsum = sparse ? 1.0 : lk_sum(sh, L, ts);                                                           \
      double m = -lm_inf_d();                                                                                   \
      for (em_i64 j = lane; on && j < c; j += L) m = lm_max_f64(m, (double)x[base + j * inner]);                \
      double mx = lk_max(sh, L, m);                                                                             \
      int inf_max = lk_isinf(mx);                                                                               \
      double s = 0.0;                                                                                           \
      for (em_i64 j = lane; on && !inf_max && j < c; j += L)                                                    \
        s = s + (j == l ? 0.0 : lm_exp_shift_##S(x[base + j * inner], (T)mx));                                  \
      double others = lk_sum(sh, L, s), sum = others;                                                           \
      if (inf_max) sum = others = 1.0;                                                                          \
      else if (l >= 0) sum = others + lm_exp_shift_##S(x[base + l * inner], (T)mx);                             \
      double ls = lm_log_d(sum);                                                                                \
      for (em_i64 j = lane; on && j < c; j += L) {                                                              \
        em_i64 k = base + j * inner;                                                                            \
        double v;                                                                                               \
        if (which == 1) {                                                                                       \
          v = ((mx - (double)x[k]) + ls) * g;                                                                   \
        } else {                                                                                                \
          double tv = sparse ? (j == l ? 1.0 : 0.0) : (double)td[k];                                            \
          v = lm_ce_grad_out(lm_exp_shift_##S(x[k], (T)mx), tv, tsum, g, sum, others, inf_max, j == l);         \
        }                                                                                                       \
        d[k] = (T)v;                                                                                            \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* The first p outside [0, 1] (NaN passes), reported. One block. */                                           \
  EM_GLOBAL void em_loss_check_prob_##S(const T *p, em_i64 n, em_i64 *rec, em_i64 tag, int fresh) {             \
    EM_SHARED em_i64 sh[LK_THREADS];                                                                            \
    int t = EM_TID_X;                                                                                           \
    em_i64 bad = -1;                                                                                            \
    for (em_i64 i = t; i < n && bad < 0; i += LK_THREADS)                                                       \
      if (p[i] < (T)0 || p[i] > (T)1) bad = i;                                                                  \
    sh[t] = bad;                                                                                                \
    EM_SYNC();                                                                                                  \
    for (int w = LK_THREADS / 2; w > 0; w >>= 1) {                                                              \
      if (t < w && sh[t + w] >= 0 && (sh[t] < 0 || sh[t + w] < sh[t])) sh[t] = sh[t + w];                       \
      EM_SYNC();                                                                                                \
    }                                                                                                           \
    if (t == 0) lk_report(rec, tag, fresh, sh[0], 0, sh[0] >= 0 ? (double)p[sh[0]] : 0.0);                      \
  }                                                                                                             \
                                                                                                                \
  EM_GLOBAL void em_loss_bce_##S(const T *p, const T *t, T *y, em_i64 n) {                                      \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += (em_i64)EM_GDIM_X * EM_BDIM_X)         \
      y[i] = (T)lm_bce((double)p[i], (double)t[i]);                                                             \
  }                                                                                                             \
                                                                                                                \
  EM_GLOBAL void em_loss_bce_grad_##S(const T *p, const T *t, const T *dy, T *d, em_i64 n, int which) {         \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += (em_i64)EM_GDIM_X * EM_BDIM_X)         \
      d[i] = (T)lm_bce_grad((double)p[i], (double)t[i], (double)dy[i], which);                                  \
  }                                                                                                             \
                                                                                                                \
  /* Squared error: out[i] = sum over sample i's per elements of (x - y)^2 (rows of length per). */             \
  EM_GLOBAL void em_loss_sqerr_##S(const T *x, const T *y, T *out, em_i64 n, em_i64 per, int L) {               \
    EM_SHARED double sh[LK_THREADS];                                                                            \
    int lane = EM_TID_X & (L - 1);                                                                              \
    em_i64 rpb = LK_THREADS / L;                                                                                \
    for (em_i64 row0 = (em_i64)EM_BID_X * rpb; row0 < n; row0 += (em_i64)EM_GDIM_X * rpb) {                     \
      em_i64 row = row0 + EM_TID_X / L;                                                                         \
      int on = row < n;                                                                                         \
      double s = 0.0;                                                                                           \
      for (em_i64 j = lane; on && j < per; j += L) {                                                            \
        double dd = (double)x[row * per + j] - (double)y[row * per + j];                                        \
        s = s + dd * dd;                                                                                        \
      }                                                                                                         \
      double sum = lk_sum(sh, L, s);                                                                            \
      if (on && lane == 0) out[row] = (T)sum;                                                                   \
    }                                                                                                           \
  }                                                                                                             \
                                                                                                                \
  /* d = sign (x - y) dy[sample], sign 2 (into x) or -2 (into y). */                                            \
  EM_GLOBAL void em_loss_sqerr_grad_##S(const T *x, const T *y, const T *dy, T *d, em_i64 total, em_i64 per,    \
                                        double sign) {                                                          \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < total; i += (em_i64)EM_GDIM_X * EM_BDIM_X)     \
      d[i] = (T)(sign * ((double)x[i] - (double)y[i]) * (double)dy[i / per]);                                   \
  }                                                                                                             \
                                                                                                                \
  /* Classification error, one thread per row: 1 when the label's class is not among the top n outputs (ties    \
   * to the lower index); dense labels give their first largest entry. No sums: any order gives these bits. */  \
  EM_GLOBAL void em_loss_clserr_##S(const T *x, const void *t, int sparse, int is64, int has_ignore,            \
                                    em_i64 ignore, T *out, em_i64 n_rows, em_i64 c, em_i64 inner, em_i64 top) { \
    const T *td = (const T *)t;                                                                                 \
    for (em_i64 row = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; row < n_rows;                                    \
         row += (em_i64)EM_GDIM_X * EM_BDIM_X) {                                                                \
      em_i64 base = lm_row_base(row, c, inner), l = 0;                                                          \
      if (sparse) {                                                                                             \
        l = lk_label(t, is64, row, has_ignore, ignore, c);                                                      \
      } else {                                                                                                  \
        for (em_i64 j = 1; j < c; j++)                                                                          \
          if (td[base + j * inner] > td[base + l * inner]) l = j;                                               \
      }                                                                                                         \
      double miss = 0.0;                                                                                        \
      if (l >= 0 && c > 0) {                                                                                    \
        T v = x[base + l * inner];                                                                              \
        em_i64 rank = 0;                                                                                        \
        for (em_i64 j = 0; j < c && rank < top; j++) {                                                          \
          T u = x[base + j * inner];                                                                            \
          rank += u > v || (u == v && j < l);                                                                   \
        }                                                                                                       \
        miss = rank < top ? 0.0 : 1.0;                                                                          \
      } else if (l >= 0) {                                                                                      \
        miss = 1.0;                                                                                             \
      }                                                                                                         \
      out[row] = (T)miss;                                                                                       \
    }                                                                                                           \
  }

LOSS_KERNELS(float, f32)
LOSS_KERNELS(double, f64)
