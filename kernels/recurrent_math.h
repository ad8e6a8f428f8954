/* The per-element arithmetic of the fused LSTM recurrence (ops/recurrent.c:
 * _lstm_seq, _lstm_seq_grad), written once for the CPU loops and for
 * kernels/recurrent.cu, so both give the same bits.
 *
 * Gates in ONNX's order i o f c, each H wide: a step's pre-activations are
 * one row of 4 H values (x W^T + biases + h R^T, summed by the GEMM). The
 * workspace keeps, per step and batch element, 5 H values: the activations
 * i o f g and the new cell state c, which the backward pass reads.
 *
 * Forward of element j of a row:   i = sigmoid(zi)  o = sigmoid(zo)
 *   f = sigmoid(zf)  g = tanh(zg)  c = f * c_prev + i * g (two products,
 *   then the sum; no FMA)  h = o * tanh(c)
 * as the unrolled recurrence's ops compute them (f32: em_math.h's sigmoid
 * and tanh; f64: libm's, which only the CPU runs: the f64 GPU path hands the
 * op to the CPU as ops/unary_gpu.c does).
 *
 * A step that does not count (past its sequence's length) writes a zero
 * workspace row: its values then depend on nothing, and neither does the
 * gradient.
 *
 * Backward, given dh (dy of the step + the carried dh), the carried dc and,
 * when a gradient reaches the workspace itself, its row dws (w_i ... w_c):
 *   tc = tanh(c)  do = dh * tc (+ w_o)  dc' = dc + (dh * o) * (1 - tc * tc) (+ w_c)
 *   di = dc' * g (+ w_i)  dg = dc' * i (+ w_g)  df = dc' * c_prev (+ w_f)  dc_prev = dc' * f
 *   dzi = di * ((1 - i) * i)  dzo = do * ((1 - o) * o)  dzf = df * ((1 - f) * f)
 *   dzg = dg * (1 - g * g)
 * (the sigmoid and tanh gradients as kernels/unary_math.h writes them). */
#ifndef EM_RECURRENT_MATH_H
#define EM_RECURRENT_MATH_H

#include "em_math.h"

/* The activations, and how the per-element functions below are declared.
 * The CPU's vector loops (ops/recurrent.c) define these before including
 * this header: ops/select_math.h's select forms of the same functions (the
 * same bits) and functions always inlined, so that the loops vectorise; the
 * kernels take em_math.h's functions and EM_HD. */
#ifndef EM_REC_SIGMOIDF
#define EM_REC_SIGMOIDF em_sigmoidf
#endif
#ifndef EM_REC_TANHF
#define EM_REC_TANHF em_tanhf
#endif
#ifndef EM_REC_FN
#define EM_REC_FN EM_HD
#endif

/* Step t is within element n's sequence (lens: i32 or i64; NULL: every step). */
EM_HD int em_rec_active(const void *lens, int lens64, long long n, long long t) {
  if (!lens) return 1;
  long long len = lens64 ? ((const long long *)lens)[n] : (long long)((const int *)lens)[n];
  return t < len;
}

/* One element of a forward step: pre and ws point at the row's starts, j < H. */
EM_REC_FN void em_rec_lstm_fwd_f32(const float *pre, float *ws, long long H, long long j, float c_prev, float *h_out,
                               float *c_out) {
  float i = EM_REC_SIGMOIDF(pre[j]), o = EM_REC_SIGMOIDF(pre[H + j]), f = EM_REC_SIGMOIDF(pre[2 * H + j]);
  float g = EM_REC_TANHF(pre[3 * H + j]);
  float t1 = f * c_prev, t2 = i * g, c = t1 + t2;
  ws[j] = i, ws[H + j] = o, ws[2 * H + j] = f, ws[3 * H + j] = g, ws[4 * H + j] = c;
  *c_out = c;
  *h_out = o * EM_REC_TANHF(c);
}

/* One element of a backward step: dz (the row of 4 H pre-activation
 * gradients) written; *dc carried in and out (dc_prev). dws: the gradient
 * that reached the step's workspace row (i o f g c) directly, or 0 (not
 * read). */
EM_REC_FN void em_rec_lstm_bwd_f32(const float *ws, const float *dws, float *dz, long long H, long long j, float c_prev,
                               float dh, float *dc) {
  float i = ws[j], o = ws[H + j], f = ws[2 * H + j], g = ws[3 * H + j], tc = EM_REC_TANHF(ws[4 * H + j]);
  float d_o = dh * tc, dcx = *dc + (dh * o) * (1.0f - tc * tc);
  if (dws) dcx = dcx + dws[4 * H + j], d_o = d_o + dws[H + j];
  float di = dcx * g, dg = dcx * i, df = dcx * c_prev;
  if (dws) di = di + dws[j], df = df + dws[2 * H + j], dg = dg + dws[3 * H + j];
  dz[j] = di * ((1.0f - i) * i);
  dz[H + j] = d_o * ((1.0f - o) * o);
  dz[2 * H + j] = df * ((1.0f - f) * f);
  dz[3 * H + j] = dg * (1.0f - g * g);
  *dc = dcx * f;
}

#endif
