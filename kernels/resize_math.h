/* The resize family's per-element arithmetic (ops/resize.c), written once
 * for the CPU loops and for the kernels (kernels/resize.cu), so both give the
 * same bits in both modes.
 *
 * Resizing is separable: on each axis a, output index o reads at most n_a
 * input indices with weights (nearest: one tap of weight 1; linear: two;
 * cubic: four; with antialias, when downsampling, the filter widened by
 * 1 / scale), computed once on the host (ops/resize.c, in double,
 * following the ONNX Resize formulas) and handed to both sides as a table.
 * An output element is the sum over every combination of its axes' taps of
 * (w_0 * w_1 * ... * w_{R-1}) * x, the weights multiplied left to right from
 * 1, the combinations in row-major order (axis 0 slowest, taps ascending),
 * added in double from +0 and rounded once to the dtype (rz_gather). An
 * output whose source coordinate lies outside the input on some axis under
 * tf_crop_and_resize holds extrapolation_value (a tap count of -1).
 *
 * The gradient gathers per input element (no atomics): per axis, the list
 * of (output index, weight) pairs that read input index i, in increasing
 * output order (a tap clamped onto the same input twice is listed twice);
 * dx is the sum over every combination of its axes' lists, in row-major
 * order, of the weights' product times dy, in double from +0, rounded once
 * (rz_grad). The CPU and every GPU run these same functions.
 *
 * The table: two parallel arrays of the same length, t (long long) and w
 * (double). t[0] = R (rank, 1 .. RZ_MAX_RANK); then t[RZ_IN(a)] = input size
 * of axis a, t[RZ_OUT(R, a)] = output size, t[RZ_FWD(R, a)] = where axis a's
 * forward slots start, t[RZ_INV(R, a)] = where its inverse starts,
 * t[RZ_NTAP(R, a)] = n_a. Forward slot of output o on axis a at
 * k = fwd + o * (1 + n_a): t[k] = tap count (-1: extrapolate), t[k + 1 + j] =
 * input index of tap j, w[k + 1 + j] its weight. Inverse: t[inv + i] .. t[inv + i + 1] is the range of entries of
 * input index i; an entry e holds the output index t[e] and weight w[e]. */
#ifndef EMBER_RESIZE_MATH_H
#define EMBER_RESIZE_MATH_H

#include "em_math.h"

#define RZ_MAX_RANK 8
#define RZ_IN(a) (1 + (a))
#define RZ_OUT(R, a) (1 + (R) + (a))
#define RZ_FWD(R, a) (1 + 2 * (R) + (a))
#define RZ_INV(R, a) (1 + 3 * (R) + (a))
#define RZ_NTAP(R, a) (1 + 4 * (R) + (a))
#define RZ_HEADER(R) (1 + 5 * (R))

/* Output element j (row-major over the output shape) from x. */
EM_HD double rz_gather_d(const long long *t, const double *w, const float *xf, const double *xd, long long j,
                         double extrap) {
  long long R = t[0], base[RZ_MAX_RANK], cnt[RZ_MAX_RANK], tap[RZ_MAX_RANK], stride[RZ_MAX_RANK];
  long long rem = j, s = 1;
  for (long long a = R - 1; a >= 0; a--) {
    long long n_out = t[RZ_OUT(R, a)], o = rem % n_out, k = t[RZ_FWD(R, a)] + o * (1 + t[RZ_NTAP(R, a)]);
    rem = rem / n_out;
    cnt[a] = t[k];
    base[a] = k + 1;
    tap[a] = 0;
    stride[a] = s;
    s = s * t[RZ_IN(a)];
  }
  for (long long a = 0; a < R; a++) {
    if (cnt[a] < 0) return extrap;
    if (cnt[a] == 0) return 0.0;
  }
  double acc = 0.0;
  for (;;) {
    double wt = 1.0;
    long long off = 0;
    for (long long a = 0; a < R; a++) {
      wt = wt * w[base[a] + tap[a]];
      off = off + t[base[a] + tap[a]] * stride[a];
    }
    acc = acc + wt * (xf ? (double)xf[off] : xd[off]);
    long long a = R - 1;
    while (a >= 0) {
      tap[a] = tap[a] + 1;
      if (tap[a] < cnt[a]) break;
      tap[a] = 0;
      a--;
    }
    if (a < 0) break;
  }
  return acc;
}

/* dx's input element i (row-major over the input shape) from dy. */
EM_HD double rz_grad_d(const long long *t, const double *w, const float *dyf, const double *dyd, long long i) {
  long long R = t[0], lo[RZ_MAX_RANK], hi[RZ_MAX_RANK], e[RZ_MAX_RANK], stride[RZ_MAX_RANK];
  long long rem = i, s = 1;
  for (long long a = R - 1; a >= 0; a--) {
    long long n_in = t[RZ_IN(a)], c = rem % n_in, k = t[RZ_INV(R, a)] + c;
    rem = rem / n_in;
    lo[a] = t[k];
    hi[a] = t[k + 1];
    e[a] = lo[a];
    stride[a] = s;
    s = s * t[RZ_OUT(R, a)];
  }
  for (long long a = 0; a < R; a++)
    if (lo[a] >= hi[a]) return 0.0;
  double acc = 0.0;
  for (;;) {
    double wt = 1.0;
    long long off = 0;
    for (long long a = 0; a < R; a++) {
      wt = wt * w[e[a]];
      off = off + t[e[a]] * stride[a];
    }
    acc = acc + wt * (dyf ? (double)dyf[off] : dyd[off]);
    long long a = R - 1;
    while (a >= 0) {
      e[a] = e[a] + 1;
      if (e[a] < hi[a]) break;
      e[a] = lo[a];
      a--;
    }
    if (a < 0) break;
  }
  return acc;
}

#endif
