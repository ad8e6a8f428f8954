/* GPU launches of the recurrent family (ops/recurrent.c): per step one
 * linalg GEMM (ops/linalg.h, kernels/gemm.cu) and one kernel of
 * kernels/recurrent.cu, in the CPU's order, so portable mode gives the CPU's
 * bits. f64 goes back to the CPU (EM_ERR_USE_CPU: its activations are libm's
 * there). Everything is checked to run on the device before the first
 * launch, so a hand-back to the CPU never follows partial work. */
#include "error.h"
#include "gpu_glue.h"
#include "linalg.h"
#include "recurrent_gpu.h"

static em_status ready(const em_op_args *a, const char *const *kernels, int n) {
  em_status s = em_ops_kernel_ready(a, "em_gemm_f32");
  for (int i = 0; !s && i < n; i++) s = em_ops_kernel_ready(a, kernels[i]);
  return s;
}

static em_status f32_only(const em_op_args *a, const em_lstm_geo *g) {
  if (g->dt == EM_F32) return EM_OK;
  return em_fail(EM_ERR_USE_CPU, "op '%s': f64 uses libm's tanh and exp, which run on the CPU only", a->def->name);
}

/* C [m, n] = alpha op(X) op(Y) (+ cin, row stride cin_rs, when given). */
static em_status product(const em_op_args *a, int tx, int ty, int64_t m, int64_t n, int64_t k, const void *x,
                         int64_t ldx, const void *y, int64_t ldy, void *c, const void *cin, int64_t cin_rs) {
  em_linalg_gemm q = {.dt = EM_F32, .tx = tx, .ty = ty, .m = m, .n = n, .k = k, .ldx = ldx, .ldy = ldy, .ldc = n,
                      .alpha = 1, .x = x, .y = y, .c = c};
  if (cin) q.beta = 1, q.cin = cin, q.cin_rs = cin_rs, q.cin_cs = 1;
  return em_linalg_gemm_gpu(a, &q);
}

static int64_t step_of(const em_lstm_geo *g, int64_t s) { return g->reverse ? g->T - 1 - s : s; }

em_status em_recurrent_lstm_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_lstm_geo g;
  static const char *const ks[] = {"em_recurrent_lstm_init_f32", "em_recurrent_lstm_fwd_f32",
                                   "em_recurrent_lstm_last_f32"};
  em_status s = em_lstm_geometry(a, 0, &g);
  if (s || (s = f32_only(a, &g)) || (s = ready(a, ks, 3))) return s;
  long long N = g.N, H = g.H, G = 4 * H, NH = N * H;
  if (NH == 0) return EM_OK;
  const float *xw = em_tensor_data(in[0]), *r = em_tensor_data(in[1]);
  float *y = em_tensor_data(out[0]), *hl = em_tensor_data(out[1]), *cl = em_tensor_data(out[2]);
  float *ws = em_tensor_data(out[3]);
  void *st = NULL, *pre = NULL;
  if ((s = em_ops_scratch(a, sizeof(float) * (size_t)(2 * NH), &st))) return s;
  if ((s = em_ops_scratch(a, sizeof(float) * (size_t)(N * G), &pre))) {
    em_ops_scratch_free(a, st);
    return s;
  }
  float *hs = st, *cs = hs + NH;
  const void *h0 = g.has_h0 ? em_tensor_data(in[g.i_h0]) : (const void *)hs;
  const void *c0 = g.has_c0 ? em_tensor_data(in[g.i_c0]) : (const void *)hs;
  const void *lens = g.has_lens ? em_tensor_data(in[g.i_lens]) : (const void *)hs;
  void *ia[] = {&hs, &cs, (void *)&h0, (void *)&c0, &g.has_h0, &g.has_c0, &NH};
  s = em_ops_launch_1d(a, "em_recurrent_lstm_init_f32", (size_t)NH, ia);
  for (int64_t k = 0; !s && k < g.T; k++) {
    long long t = step_of(&g, k);
    const float *xt = xw + t * N * G, *p = xt;
    if (k > 0 || g.has_h0) {
      if ((s = product(a, 0, 1, N, G, H, hs, H, r, H, pre, xt, G))) break;
      p = pre;
    }
    float *wt = ws + t * N * 5 * H, *yt = y + t * NH;
    void *fa[] = {(void *)&p, &wt, &yt, &hs, &cs, (void *)&lens, &g.has_lens, &g.lens64, &t, &N, &H};
    s = em_ops_launch_1d(a, "em_recurrent_lstm_fwd_f32", (size_t)NH, fa);
  }
  if (!s) {
    void *la[] = {&hs, &cs, &hl, &cl, (void *)&lens, &g.has_lens, &g.lens64, &NH, &H};
    s = em_ops_launch_1d(a, "em_recurrent_lstm_last_f32", (size_t)NH, la);
  }
  em_ops_scratch_free(a, pre);
  em_ops_scratch_free(a, st);
  return s;
}

em_status em_recurrent_lstm_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_lstm_geo g;
  static const char *const ks[] = {"em_recurrent_lstm_last_f32", "em_recurrent_lstm_bwd_f32",
                                   "em_recurrent_lstm_carry_f32", "em_recurrent_lstm_hprev_f32"};
  em_status s = em_lstm_geometry(a, 1, &g);
  if (s || (s = f32_only(a, &g)) || (s = ready(a, ks, 4))) return s;
  long long T = g.T, N = g.N, H = g.H, G = 4 * H, NH = N * H;
  const float *r = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *ws = em_tensor_data(in[2]);
  const float *dy = em_tensor_data(in[3]), *dhl = em_tensor_data(in[4]), *dcl = em_tensor_data(in[5]);
  float *dz = em_tensor_data(out[0]), *dr = em_tensor_data(out[1]), *dhs = em_tensor_data(out[2]);
  float *dcs = em_tensor_data(out[3]);
  if (NH == 0) /* no rows: dr is a sum over none */
    return product(a, 1, 0, G, H, 0, dz, G, dz, H, dr, NULL, 0);
  void *tmp = NULL, *hp = NULL;
  if ((s = em_ops_scratch(a, sizeof(float) * (size_t)NH, &tmp))) return s;
  if ((s = em_ops_scratch(a, sizeof(float) * (size_t)(T * NH), &hp))) {
    em_ops_scratch_free(a, tmp);
    return s;
  }
  const void *h0 = g.has_h0 ? em_tensor_data(in[g.i_h0]) : (const void *)dhs;
  const void *c0 = g.has_c0 ? em_tensor_data(in[g.i_c0]) : (const void *)dhs;
  const void *lens = g.has_lens ? em_tensor_data(in[g.i_lens]) : (const void *)dhs;
  const void *dws = g.has_dws ? em_tensor_data(in[g.i_dws]) : (const void *)dhs;
  void *la[] = {(void *)&dhl, (void *)&dcl, &dhs, &dcs, (void *)&lens, &g.has_lens, &g.lens64, &NH, &H};
  s = em_ops_launch_1d(a, "em_recurrent_lstm_last_f32", (size_t)NH, la);
  for (int64_t k = T - 1; !s && k >= 0; k--) {
    long long t = step_of(&g, k), tp = k > 0 ? step_of(&g, k - 1) : -1;
    const float *dyt = dy + t * NH;
    float *dzt = dz + t * N * G;
    void *ba[] = {(void *)&ws, (void *)&dws, &g.has_dws, (void *)&dyt, &dzt, &dhs, &dcs, (void *)&c0, &g.has_c0, (void *)&lens, &g.has_lens,
                  &g.lens64, &t, &tp, &N, &H};
    if ((s = em_ops_launch_1d(a, "em_recurrent_lstm_bwd_f32", (size_t)NH, ba))) break;
    if (k == 0 && !g.has_h0) continue; /* as the CPU: h0 is zero, its gradient not asked for */
    if ((s = product(a, 0, 0, N, H, G, dzt, G, r, H, tmp, NULL, 0))) break;
    void *ca[] = {&dhs, &tmp, (void *)&lens, &g.has_lens, &g.lens64, &t, &NH, &H};
    s = em_ops_launch_1d(a, "em_recurrent_lstm_carry_f32", (size_t)NH, ca);
  }
  if (!s) {
    void *ha[] = {&hp, (void *)&y, (void *)&h0, &g.has_h0, (void *)&lens, &g.has_lens, &g.lens64, &g.reverse, &T, &N, &H};
    s = em_ops_launch_1d(a, "em_recurrent_lstm_hprev_f32", (size_t)(T * NH), ha);
  }
  if (!s) s = product(a, 1, 0, G, H, T * N, dz, G, hp, H, dr, NULL, 0);
  em_ops_scratch_free(a, hp);
  em_ops_scratch_free(a, tmp);
  return s;
}
