/* The fused LSTM recurrence: one node for a whole direction of an LSTM over
 * T steps, with a hand-written backward (BPTT), instead of ~20 nodes a step.
 * training/recurrent.c (em_recurrent_apply) uses it for the LSTMs it covers:
 * default activations (sigmoid, tanh, tanh), no peepholes, no clip, no
 * input_forget; x W^T + biases for all steps stays one matmul before it
 * (its gradient gives dW, dB and dx), the recurrence and its gradient are
 * here.
 *
 * _lstm_seq(xw, r[, h0][, c0][, lens])
 *   xw [T, N, 4H]: x W^T + Wb + Rb per step, gates i o f c (ONNX's order);
 *   r [4H, H]; h0, c0 [N, H] initial states (absent: zeros); lens [N] (i32
 *   or i64): step t counts for element n iff t < lens[n], otherwise the state
 *   is kept and y is 0 (ONNX's rule; reversed, the recurrence starts at
 *   lens[n] - 1). Attributes: reverse INT 0 (steps T-1 ... 0), has_h0,
 *   has_c0, has_lens INT 0 (which optional inputs follow, in that order).
 *   Outputs: y [T, N, H]; h_last, c_last [N, H] (the final states; zeros for
 *   a sequence of length <= 0, as onnxruntime gives them); ws [T, N, 5H]
 *   (the workspace the gradient reads: the activations i o f g and the cell
 *   state of each step, zeros where a step does not count;
 *   kernels/recurrent_math.h).
 *   Per step: pre = xw[t] + h R^T (one GEMM [N, H] x [H, 4H]; skipped while h
 *   is still the zero state), then kernels/recurrent_math.h per element.
 * _lstm_seq_grad(r, y, ws, dy, dh_last, dc_last[, h0][, c0][, lens][, dws])
 *   the same attributes and has_dws INT 0 (a gradient reached the workspace
 *   itself: it is added where recurrent_math.h says); outputs dxw [T, N, 4H], dr [4H, H], dh0, dc0
 *   [N, H]. Steps in reverse order of the forward: per step the elementwise
 *   gradient (recurrent_math.h) into dxw[t], then dh = dxw[t] R (one GEMM
 *   [N, 4H] x [4H, H]); at the end dr = dxw^T hprev (one GEMM over all T N
 *   rows, hprev [T, N, H] the state each step read: y of the step before, or
 *   h0).
 *
 * Order: the GEMMs are the linalg family's (ops/linalg.h: OpenBLAS in fixed
 * tiles in the fast mode, the portable GEMM in portable mode and on the GPU:
 * pre's element is fma over k from +0, then + 1 * xw); everything else is per
 * element, so portable mode gives the same bits on the CPU and the GPU
 * (ops/recurrent_gpu.c, kernels/recurrent.cu). f64 runs on the CPU (libm's
 * tanh and exp, as the unary family's f64). Loops split by element only. */
/* The elementwise passes are vector loops over a row's H elements (gates in
 * contiguous blocks) with ops/select_math.h's sigmoid and tanh, which are
 * em_math.h's with selects for branches (the same bits as the kernels' scalar
 * calls); gcc vectorises float selects only without -ftrapping-math (as
 * ops/unary.c; Ember never reads FP exception flags, the values are the same
 * IEEE operations). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "select_math.h"
#define EM_REC_SIGMOIDF em_sigmoidf_sel
#define EM_REC_TANHF em_tanhf_sel
#define EM_REC_FN EM_SEL_INLINE
#include "../kernels/recurrent_math.h"
#include "linalg.h"
#include "op.h"
#include "recurrent_gpu.h"

/* ------------------------------------------------------------ geometry --- */

em_status em_lstm_geometry(const em_op_args *a, int grad, em_lstm_geo *g) {
  memset(g, 0, sizeof *g);
  g->reverse = em_attr_int(a, "reverse", 0) != 0;
  g->has_h0 = em_attr_int(a, "has_h0", 0) != 0;
  g->has_c0 = em_attr_int(a, "has_c0", 0) != 0;
  g->has_lens = em_attr_int(a, "has_lens", 0) != 0;
  g->has_dws = grad && em_attr_int(a, "has_dws", 0) != 0;
  int first = grad ? 6 : 2, k = first;
  g->i_h0 = g->has_h0 ? k++ : -1;
  g->i_c0 = g->has_c0 ? k++ : -1;
  g->i_lens = g->has_lens ? k++ : -1;
  g->i_dws = g->has_dws ? k++ : -1;
  if (a->n_in != k)
    return em_op_fail(a, "%d inputs given; %d expected (%d, then h0, c0, lens%s as has_h0 %d, has_c0 %d, has_lens %d%s "
                      "say)", a->n_in, k, first, grad ? ", dws" : "", g->has_h0, g->has_c0, g->has_lens,
                      grad ? (g->has_dws ? ", has_dws 1" : ", has_dws 0") : "");
  const em_shape *r = &a->in[grad ? 0 : 1], *lead = &a->in[grad ? 1 : 0];
  em_dtype dt = r->dtype;
  if (dt != EM_F32 && dt != EM_F64) return em_op_fail(a, "dtype %s; f32 or f64 expected", em_dtype_name(dt));
  if (r->ndim != 2 || r->dims[1] < 1 || r->dims[0] != 4 * r->dims[1])
    return em_op_fail(a, "r must be [4H, H] with H known");
  g->dt = dt;
  g->H = r->dims[1];
  /* forward: xw [T, N, 4H]; gradient: y [T, N, H] */
  int64_t width = grad ? g->H : 4 * g->H;
  if (lead->ndim != 3 || lead->dims[0] < 1 || lead->dims[2] != width || lead->dtype != dt)
    return em_op_fail(a, "input %d must be %s [T, N, %lld] with T known", grad ? 1 : 0, em_dtype_name(dt),
                      (long long)width);
  g->T = lead->dims[0], g->N = lead->dims[1];
  const int same3[3] = {grad ? 2 : -1, grad ? 3 : -1, g->i_dws};
  const int64_t w3[3] = {5 * g->H, g->H, 5 * g->H};
  for (int i = 0; i < 3; i++) {
    if (same3[i] < 0) continue;
    const em_shape *s = &a->in[same3[i]];
    if (s->ndim != 3 || s->dtype != dt || s->dims[0] != g->T || s->dims[2] != w3[i] ||
        (s->dims[1] != g->N && s->dims[1] >= 0 && g->N >= 0))
      return em_op_fail(a, "input %d must be [T, N, %lld] like y", same3[i], (long long)w3[i]);
  }
  int nh[4] = {grad ? 4 : -1, grad ? 5 : -1, g->i_h0, g->i_c0};
  for (int i = 0; i < 4; i++) {
    if (nh[i] < 0) continue;
    const em_shape *s = &a->in[nh[i]];
    if (s->ndim != 2 || s->dtype != dt || s->dims[1] != g->H || (s->dims[0] != g->N && s->dims[0] >= 0 && g->N >= 0))
      return em_op_fail(a, "input %d must be %s [N, %lld]", nh[i], em_dtype_name(dt), (long long)g->H);
  }
  if (g->has_lens) {
    const em_shape *s = &a->in[g->i_lens];
    if ((s->dtype != EM_I32 && s->dtype != EM_I64) || s->ndim != 1 ||
        (s->dims[0] != g->N && s->dims[0] >= 0 && g->N >= 0))
      return em_op_fail(a, "lens must be an i32 or i64 vector [N]");
    g->lens64 = s->dtype == EM_I64;
  }
  return EM_OK;
}

static void set_shape(em_shape *s, em_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2) {
  s->dtype = dt;
  s->ndim = nd;
  s->dims[0] = d0, s->dims[1] = d1, s->dims[2] = d2;
}

static em_status seq_infer(em_op_args *a) {
  em_lstm_geo g;
  em_status s = em_lstm_geometry(a, 0, &g);
  if (s) return s;
  set_shape(&a->out[0], g.dt, 3, g.T, g.N, g.H);
  set_shape(&a->out[1], g.dt, 2, g.N, g.H, 0);
  set_shape(&a->out[2], g.dt, 2, g.N, g.H, 0);
  set_shape(&a->out[3], g.dt, 3, g.T, g.N, 5 * g.H);
  return EM_OK;
}

static em_status seq_grad_infer(em_op_args *a) {
  em_lstm_geo g;
  em_status s = em_lstm_geometry(a, 1, &g);
  if (s) return s;
  set_shape(&a->out[0], g.dt, 3, g.T, g.N, 4 * g.H);
  set_shape(&a->out[1], g.dt, 2, 4 * g.H, g.H, 0);
  set_shape(&a->out[2], g.dt, 2, g.N, g.H, 0);
  set_shape(&a->out[3], g.dt, 2, g.N, g.H, 0);
  return EM_OK;
}

/* ------------------------------------------------------------ f64 twin --- */

/* recurrent_math.h's arithmetic in f64 with libm (the CPU only). */
static inline double sig64(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

static EM_INLINE void lstm_fwd_f64(const double *pre, double *ws, int64_t H, int64_t j, double c_prev, double *h_out,
                                double *c_out) {
  double i = sig64(pre[j]), o = sig64(pre[H + j]), f = sig64(pre[2 * H + j]), g = tanh(pre[3 * H + j]);
  double t1 = f * c_prev, t2 = i * g, c = t1 + t2;
  ws[j] = i, ws[H + j] = o, ws[2 * H + j] = f, ws[3 * H + j] = g, ws[4 * H + j] = c;
  *c_out = c;
  *h_out = o * tanh(c);
}

static EM_INLINE void lstm_bwd_f64(const double *ws, const double *dws, double *dz, int64_t H, int64_t j,
                                double c_prev, double dh, double *dc) {
  double i = ws[j], o = ws[H + j], f = ws[2 * H + j], g = ws[3 * H + j], tc = tanh(ws[4 * H + j]);
  double d_o = dh * tc, dcx = *dc + (dh * o) * (1.0 - tc * tc);
  if (dws) dcx = dcx + dws[4 * H + j], d_o = d_o + dws[H + j];
  double di = dcx * g, dg = dcx * i, df = dcx * c_prev;
  if (dws) di = di + dws[j], df = df + dws[2 * H + j], dg = dg + dws[3 * H + j];
  dz[j] = di * ((1.0 - i) * i);
  dz[H + j] = d_o * ((1.0 - o) * o);
  dz[2 * H + j] = df * ((1.0 - f) * f);
  dz[3 * H + j] = dg * (1.0 - g * g);
  *dc = dcx * f;
}

static EM_INLINE void lstm_fwd_f32(const float *pre, float *ws, int64_t H, int64_t j, float c_prev, float *h_out,
                                float *c_out) {
  em_rec_lstm_fwd_f32(pre, ws, H, j, c_prev, h_out, c_out);
}

static EM_INLINE void lstm_bwd_f32(const float *ws, const float *dws, float *dz, int64_t H, int64_t j, float c_prev,
                                float dh, float *dc) {
  em_rec_lstm_bwd_f32(ws, dws, dz, H, j, c_prev, dh, dc);
}

/* ------------------------------------------------------------- the CPU --- */

/* One batch element's row of a step, a loop over its H elements (vectorised;
 * cloned per vector ISA): forward from pre (4 H) into ws's row (5 H), y's row
 * and the carried state h, c; backward into dz's row (4 H) with dh = dy +
 * the carried dh, c_prev from cp, the carried dc updated in place; dws: the
 * step's workspace gradient row. */
#define LSTM_ROWS(T_, SUF)                                                                                          \
  EM_SIMD_CLONES static void fwd_row_##SUF(const T_ *pre, T_ *ws, int64_t H, T_ *y, T_ *hs, T_ *cs) {              \
    _Pragma("omp simd")                                                                                           \
    for (int64_t j = 0; j < H; j++) {                                                                             \
      T_ h, c;                                                                                                    \
      lstm_fwd_##SUF(pre, ws, H, j, cs[j], &h, &c);                                                               \
      hs[j] = h, cs[j] = c, y[j] = h;                                                                             \
    }                                                                                                             \
  }                                                                                                               \
  EM_SIMD_CLONES static void bwd_row_##SUF(const T_ *ws, T_ *dz, int64_t H, const T_ *cp, const T_ *dy,            \
                                           const T_ *dh, T_ *dc) {                                                \
    _Pragma("omp simd")                                                                                           \
    for (int64_t j = 0; j < H; j++) lstm_bwd_##SUF(ws, NULL, dz, H, j, cp[j], dy[j] + dh[j], &dc[j]);             \
  }                                                                                                               \
  EM_SIMD_CLONES static void bwd_row_dws_##SUF(const T_ *ws, const T_ *dws, T_ *dz, int64_t H, const T_ *cp,       \
                                               const T_ *dy, const T_ *dh, T_ *dc) {                              \
    _Pragma("omp simd")                                                                                           \
    for (int64_t j = 0; j < H; j++) lstm_bwd_##SUF(ws, dws, dz, H, j, cp[j], dy[j] + dh[j], &dc[j]);              \
  }
LSTM_ROWS(float, f32)
LSTM_ROWS(double, f64)

/* Below this many elements per step the elementwise loops run on one thread. */
#define PAR_ELEMS 16384

static int64_t step_of(const em_lstm_geo *g, int64_t s) { return g->reverse ? g->T - 1 - s : s; }

/* C [m, n] = X [m, k] op(Y) (+ C when beta 1), through the linalg family. */
static em_status product(const em_op_args *a, em_dtype dt, int tx, int ty, int64_t m, int64_t n, int64_t k,
                         const void *x, int64_t ldx, const void *y, int64_t ldy, void *c, double beta) {
  em_linalg_gemm q = {.dt = dt, .tx = tx, .ty = ty, .m = m, .n = n, .k = k, .ldx = ldx, .ldy = ldy, .ldc = n,
                      .alpha = 1, .beta = beta, .x = x, .y = y, .c = c};
  return em_linalg_gemm_cpu(a, &q);
}

#define LSTM_CPU(T_, SUF)                                                                                           \
  static em_status seq_cpu_##SUF(const em_op_args *a, const em_lstm_geo *g, em_tensor *const *in,                  \
                                  em_tensor *const *out) {                                                        \
    const int64_t N = g->N, H = g->H, G = 4 * H, NH = N * H;                                                      \
    const T_ *xw = em_tensor_data(in[0]), *r = em_tensor_data(in[1]);                                             \
    const T_ *h0 = g->has_h0 ? em_tensor_data(in[g->i_h0]) : NULL, *c0 = g->has_c0 ? em_tensor_data(in[g->i_c0]) : NULL; \
    const void *lens = g->has_lens ? em_tensor_data(in[g->i_lens]) : NULL;                                        \
    T_ *y = em_tensor_data(out[0]), *hl = em_tensor_data(out[1]), *cl = em_tensor_data(out[2]);                   \
    T_ *ws = em_tensor_data(out[3]);                                                                              \
    T_ *hs = malloc(sizeof(T_) * (size_t)(NH > 0 ? NH : 1)), *cs = malloc(sizeof(T_) * (size_t)(NH > 0 ? NH : 1)); \
    T_ *pre = malloc(sizeof(T_) * (size_t)(N * G > 0 ? N * G : 1));                                               \
    em_status s = EM_OK;                                                                                          \
    if (!hs || !cs || !pre) s = em_op_fail(a, "no memory for the recurrence's state ([%lld, %lld])", (long long)N, \
                                           (long long)H);                                                         \
    for (int64_t e = 0; !s && e < NH; e++) hs[e] = h0 ? h0[e] : 0, cs[e] = c0 ? c0[e] : 0;                        \
    int par = NH >= PAR_ELEMS;                                                                                    \
    for (int64_t st = 0; !s && st < g->T; st++) {                                                                 \
      int64_t t = step_of(g, st);                                                                                 \
      const T_ *xt = xw + t * N * G, *p = xt;                                                                     \
      if (st > 0 || h0) {                                                                                         \
        memcpy(pre, xt, sizeof(T_) * (size_t)(N * G));                                                            \
        if ((s = product(a, g->dt, 0, 1, N, G, H, hs, H, r, H, pre, 1.0))) break;                                 \
        p = pre;                                                                                                  \
      }                                                                                                           \
      T_ *yt = y + t * NH, *wt = ws + t * N * 5 * H;                                                              \
      _Pragma("omp parallel for num_threads(em_cpu_threads()) if (par)")                                          \
      for (int64_t n = 0; n < N; n++) {                                                                           \
        T_ *w = wt + n * 5 * H, *yn = yt + n * H;                                                                 \
        if (em_rec_active(lens, g->lens64, n, t)) fwd_row_##SUF(p + n * G, w, H, yn, hs + n * H, cs + n * H);     \
        else memset(yn, 0, sizeof(T_) * (size_t)H), memset(w, 0, sizeof(T_) * (size_t)(5 * H));                 \
      }                                                                                                           \
    }                                                                                                             \
    for (int64_t e = 0; !s && e < NH; e++) {                                                                      \
      int empty = !em_rec_active(lens, g->lens64, e / H, 0);                                                      \
      hl[e] = empty ? 0 : hs[e];                                                                                  \
      cl[e] = empty ? 0 : cs[e];                                                                                  \
    }                                                                                                             \
    free(hs), free(cs), free(pre);                                                                                \
    return s;                                                                                                     \
  }                                                                                                               \
                                                                                                                  \
  static em_status grad_cpu_##SUF(const em_op_args *a, const em_lstm_geo *g, em_tensor *const *in,                 \
                                   em_tensor *const *out) {                                                       \
    const int64_t T = g->T, N = g->N, H = g->H, G = 4 * H, NH = N * H;                                            \
    const T_ *r = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *ws = em_tensor_data(in[2]);                 \
    const T_ *dy = em_tensor_data(in[3]), *dhl = em_tensor_data(in[4]), *dcl = em_tensor_data(in[5]);             \
    const T_ *h0 = g->has_h0 ? em_tensor_data(in[g->i_h0]) : NULL, *c0 = g->has_c0 ? em_tensor_data(in[g->i_c0]) : NULL; \
    const void *lens = g->has_lens ? em_tensor_data(in[g->i_lens]) : NULL;                                        \
    const T_ *dws = g->has_dws ? em_tensor_data(in[g->i_dws]) : NULL;                                             \
    T_ *dz = em_tensor_data(out[0]), *dr = em_tensor_data(out[1]), *dhs = em_tensor_data(out[2]);                 \
    T_ *dcs = em_tensor_data(out[3]);                                                                             \
    T_ *tmp = malloc(sizeof(T_) * (size_t)(NH > 0 ? NH : 1)), *hp = malloc(sizeof(T_) * (size_t)(T * NH > 0 ? T * NH : 1)); \
    T_ *zero = calloc((size_t)H, sizeof(T_));                                                                     \
    em_status s = EM_OK;                                                                                          \
    if (!tmp || !hp || !zero) s = em_op_fail(a, "no memory for the recurrence's gradient");                      \
    for (int64_t e = 0; !s && e < NH; e++) {                                                                      \
      int empty = !em_rec_active(lens, g->lens64, e / H, 0);                                                      \
      dhs[e] = empty ? 0 : dhl[e];                                                                                \
      dcs[e] = empty ? 0 : dcl[e];                                                                                \
    }                                                                                                             \
    int par = NH >= PAR_ELEMS;                                                                                    \
    for (int64_t st = T - 1; !s && st >= 0; st--) {                                                               \
      int64_t t = step_of(g, st), tp = st > 0 ? step_of(g, st - 1) : -1;                                          \
      T_ *dzt = dz + t * N * G;                                                                                   \
      const T_ *dyt = dy + t * NH, *wt = ws + t * N * 5 * H, *wp = tp >= 0 ? ws + tp * N * 5 * H : NULL;          \
      _Pragma("omp parallel for num_threads(em_cpu_threads()) if (par)")                                          \
      for (int64_t n = 0; n < N; n++) {                                                                           \
        T_ *row = dzt + n * G;                                                                                    \
        if (!em_rec_active(lens, g->lens64, n, t)) {                                                              \
          memset(row, 0, sizeof(T_) * (size_t)G);                                                                 \
          continue;                                                                                               \
        }                                                                                                         \
        /* c_prev: the cell state the step read (zeros: no c0 and the first counting step) */                   \
        const T_ *cp = wp && em_rec_active(lens, g->lens64, n, tp) ? wp + n * 5 * H + 4 * H : c0 ? c0 + n * H : zero; \
        const T_ *w = wt + n * 5 * H, *dyn = dyt + n * H;                                                         \
        T_ *dhn = dhs + n * H, *dcn = dcs + n * H;                                                                \
        if (dws) bwd_row_dws_##SUF(w, dws + (t * N + n) * 5 * H, row, H, cp, dyn, dhn, dcn);                      \
        else bwd_row_##SUF(w, row, H, cp, dyn, dhn, dcn);                                                         \
      }                                                                                                           \
      if (st == 0 && !h0) continue; /* h0 is zero: its gradient is not asked for */                               \
      if ((s = product(a, g->dt, 0, 0, N, H, G, dzt, G, r, H, tmp, 0.0))) break;                                  \
      for (int64_t e = 0; e < NH; e++)                                                                            \
        if (em_rec_active(lens, g->lens64, e / H, t)) dhs[e] = tmp[e];                                            \
    }                                                                                                             \
    /* hprev: the state each step read (y of the step before, where that one counted, else h0). */                \
    for (int64_t st = 0; !s && st < T; st++) {                                                                    \
      int64_t t = step_of(g, st), tp = st > 0 ? step_of(g, st - 1) : -1;                                          \
      for (int64_t e = 0; e < NH; e++)                                                                            \
        hp[t * NH + e] = tp >= 0 && em_rec_active(lens, g->lens64, e / H, tp) ? y[tp * NH + e] : h0 ? h0[e] : 0;  \
    }                                                                                                             \
    if (!s) s = product(a, g->dt, 1, 0, G, H, T * N, dz, G, hp, H, dr, 0.0);                                       \
    free(tmp), free(hp), free(zero);                                                                              \
    return s;                                                                                                     \
  }
LSTM_CPU(float, f32)
LSTM_CPU(double, f64)

static em_status seq_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_lstm_geo g;
  em_status s = em_lstm_geometry(a, 0, &g);
  if (s) return s;
  return g.dt == EM_F32 ? seq_cpu_f32(a, &g, in, out) : seq_cpu_f64(a, &g, in, out);
}

static em_status seq_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_lstm_geo g;
  em_status s = em_lstm_geometry(a, 1, &g);
  if (s) return s;
  return g.dt == EM_F32 ? grad_cpu_f32(a, &g, in, out) : grad_cpu_f64(a, &g, in, out);
}

/* ------------------------------------------------------------ backward --- */

/* dy of an output no gradient reaches: zeros of its shape. */
static em_status or_zeros(em_graph *g, em_var dy, em_var like, em_var *out) {
  if (dy >= 0) {
    *out = dy;
    return EM_OK;
  }
  return em_apply1(g, "zeros_like", like, out);
}

static em_status seq_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                              em_var *din) {
  if (dy[0] < 0 && dy[1] < 0 && dy[2] < 0 && dy[3] < 0) return EM_OK;
  em_lstm_geo geo;
  em_status s = em_lstm_geometry(a, 0, &geo);
  if (s) return s;
  em_var in[10] = {x[1], y[0], y[3]};
  if ((s = or_zeros(g, dy[0], y[0], &in[3])) || (s = or_zeros(g, dy[1], y[1], &in[4])) ||
      (s = or_zeros(g, dy[2], y[2], &in[5])))
    return s;
  int n = 6;
  if (geo.has_h0) in[n++] = x[geo.i_h0];
  if (geo.has_c0) in[n++] = x[geo.i_c0];
  if (geo.has_lens) in[n++] = x[geo.i_lens];
  if (dy[3] >= 0) in[n++] = dy[3];
  em_attr at[5] = {em_attr_i("reverse", geo.reverse), em_attr_i("has_h0", geo.has_h0), em_attr_i("has_c0", geo.has_c0),
                   em_attr_i("has_lens", geo.has_lens), em_attr_i("has_dws", dy[3] >= 0)};
  em_var d[4];
  if ((s = em_apply(g, "_lstm_seq_grad", in, n, at, 5, d, 4))) return s;
  din[0] = d[0], din[1] = d[1];
  if (geo.has_h0) din[geo.i_h0] = d[2];
  if (geo.has_c0) din[geo.i_c0] = d[3];
  return EM_OK;
}

#define LSTM_ATTRS EM_ATTRS("reverse", "has_h0", "has_c0", "has_lens")

const em_op_def em_ops_recurrent[] = {
  {.name = "_lstm_seq",
   .doc = "a whole LSTM direction (xw [T,N,4H], r[, h0][, c0][, lens]) -> y, h_last, c_last, workspace; attrs reverse, "
          "has_h0, has_c0, has_lens",
   .min_inputs = 2, .max_inputs = 5, .n_outputs = 4, .infer = seq_infer, .cpu = seq_cpu,
   .gpu = em_recurrent_lstm_gpu, .backward = seq_backward, .attrs = LSTM_ATTRS},
  {.name = "_lstm_seq_grad",
   .doc = "_lstm_seq's gradient (r, y, ws, dy, dh_last, dc_last[, h0][, c0][, lens][, dws]) -> dxw, dr, dh0, dc0; "
          "attrs as _lstm_seq's and has_dws",
   .min_inputs = 6, .max_inputs = 10, .n_outputs = 4, .infer = seq_grad_infer, .cpu = seq_grad_cpu,
   .gpu = em_recurrent_lstm_grad_gpu, .attrs = EM_ATTRS("reverse", "has_h0", "has_c0", "has_lens", "has_dws")},
};
const size_t em_ops_recurrent_count = sizeof em_ops_recurrent / sizeof em_ops_recurrent[0];
