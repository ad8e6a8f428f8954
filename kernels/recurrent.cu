/* The fused LSTM recurrence on a GPU (ops/recurrent.c's _lstm_seq and
 * _lstm_seq_grad, launched by ops/recurrent_gpu.c between the linalg
 * family's GEMM launches). Every kernel is 1-D grid-stride, one thread per
 * element of a step's [N, H] state (hprev: of [T, N, H]); no sums: the
 * per-element arithmetic is recurrent_math.h's, the CPU's too, so the bits
 * match the CPU's in portable mode. f32 only (f64 runs on the CPU). */
#include "em_kernel.h"
#include "em_math.h"
#include "recurrent_math.h"

#define RC_LOOP(n)                                                                                      \
  for (em_i64 e = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X, stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X; \
       e < (n); e += stride_)

/* The state before the first step: h0 and c0, or zeros where absent (has_*
 * 0: the pointer is not read). */
EM_GLOBAL void em_recurrent_lstm_init_f32(float *hs, float *cs, const float *h0, const float *c0, int has_h0,
                                          int has_c0, em_i64 nh) {
  RC_LOOP(nh) {
    hs[e] = has_h0 ? h0[e] : 0.0f;
    cs[e] = has_c0 ? c0[e] : 0.0f;
  }
}

/* One forward step t: pre [N, 4H] (the step's pre-activations), ws_t
 * [N, 5H] and y_t [N, H] written; the state (hs, cs) updated where the step
 * counts. */
EM_GLOBAL void em_recurrent_lstm_fwd_f32(const float *pre, float *ws_t, float *y_t, float *hs, float *cs,
                                         const void *lens, int has_lens, int lens64, em_i64 t, em_i64 n_rows,
                                         em_i64 H) {
  RC_LOOP(n_rows * H) {
    em_i64 n = e / H, j = e % H;
    float h, c;
    em_rec_lstm_fwd_f32(pre + n * 4 * H, ws_t + n * 5 * H, H, j, cs[e], &h, &c);
    if (em_rec_active(has_lens ? lens : 0, lens64, n, t)) {
      hs[e] = h;
      cs[e] = c;
      y_t[e] = h;
    } else {
      float *w = ws_t + n * 5 * H;
      y_t[e] = 0.0f;
      w[j] = 0.0f;
      w[H + j] = 0.0f;
      w[2 * H + j] = 0.0f;
      w[3 * H + j] = 0.0f;
      w[4 * H + j] = 0.0f;
    }
  }
}

/* h_last and c_last from the state: zeros for an empty sequence (the
 * forward), or the carried gradients from dh_last and dc_last the same way
 * (the backward's start). */
EM_GLOBAL void em_recurrent_lstm_last_f32(const float *h, const float *c, float *h_out, float *c_out,
                                          const void *lens, int has_lens, int lens64, em_i64 nh, em_i64 H) {
  RC_LOOP(nh) {
    int empty = !em_rec_active(has_lens ? lens : 0, lens64, e / H, 0);
    h_out[e] = empty ? 0.0f : h[e];
    c_out[e] = empty ? 0.0f : c[e];
  }
}

/* One backward step t (tp: the step run before it in the forward, -1 for
 * none): dz_t [N, 4H] written, dcs carried; dhs is read (the gradient that
 * reached the step's output state); dws [T, N, 5H] the workspace's own
 * gradient (has_dws 0: not read). */
EM_GLOBAL void em_recurrent_lstm_bwd_f32(const float *ws, const float *dws, int has_dws, const float *dy_t,
                                         float *dz_t, const float *dhs, float *dcs, const float *c0, int has_c0,
                                         const void *lens, int has_lens, int lens64, em_i64 t, em_i64 tp,
                                         em_i64 n_rows, em_i64 H) {
  const void *ln = has_lens ? lens : 0;
  RC_LOOP(n_rows * H) {
    em_i64 n = e / H, j = e % H;
    float *row = dz_t + n * 4 * H;
    if (!em_rec_active(ln, lens64, n, t)) {
      row[j] = 0.0f;
      row[H + j] = 0.0f;
      row[2 * H + j] = 0.0f;
      row[3 * H + j] = 0.0f;
      continue;
    }
    float c_prev = tp >= 0 && em_rec_active(ln, lens64, n, tp) ? ws[(tp * n_rows + n) * 5 * H + 4 * H + j]
                   : has_c0                                     ? c0[e]
                                                                : 0.0f;
    float dc = dcs[e];
    const float *dwr = has_dws ? dws + (t * n_rows + n) * 5 * H : 0;
    em_rec_lstm_bwd_f32(ws + (t * n_rows + n) * 5 * H, dwr, row, H, j, c_prev, dy_t[e] + dhs[e], &dc);
    dcs[e] = dc;
  }
}

/* dhs = the product dz_t R where step t counts (elsewhere the state, and its
 * gradient, passed through). */
EM_GLOBAL void em_recurrent_lstm_carry_f32(float *dhs, const float *prod, const void *lens, int has_lens, int lens64,
                                           em_i64 t, em_i64 nh, em_i64 H) {
  RC_LOOP(nh) {
    if (em_rec_active(has_lens ? lens : 0, lens64, e / H, t)) dhs[e] = prod[e];
  }
}

/* hprev [T, N, H]: the state each step read, y of the step run before it
 * where that one counted, else h0 (or 0). */
EM_GLOBAL void em_recurrent_lstm_hprev_f32(float *hp, const float *y, const float *h0, int has_h0, const void *lens,
                                           int has_lens, int lens64, int reverse, em_i64 T, em_i64 n_rows, em_i64 H) {
  em_i64 nh = n_rows * H;
  RC_LOOP(T * nh) {
    em_i64 t = e / nh, k = e % nh;
    em_i64 st = reverse ? T - 1 - t : t, tp = st > 0 ? (reverse ? t + 1 : t - 1) : -1;
    hp[e] = tp >= 0 && em_rec_active(has_lens ? lens : 0, lens64, k / H, tp) ? y[tp * nh + k]
            : has_h0                                                          ? h0[k]
                                                                              : 0.0f;
  }
}
