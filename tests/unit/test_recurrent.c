/* Recurrent networks: em_recurrent_apply (training/recurrent.c) and the
 * layers em_lstm, em_gru, em_rnn (training/layers.c).
 *
 * Expected values come from outside the code under test: the ONNX LSTM,
 * GRU and RNN equations (onnx/docs/Operators.md) written here as plain
 * float64 loops over scalars (every direction, sequence lengths, initial
 * states, peepholes, clip, linear_before_reset, input_forget, layout 1,
 * activations with alpha and beta); gradients against central finite
 * differences of the graph's own loss in f64; one run on the libcuda test
 * double's GPU in portable mode against the CPU's bits; and an LSTM that
 * must learn a toy sequence task (recall the first bit of a sequence) to a
 * stated accuracy. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}
static double unif(uint64_t *s, double a) { return a * (2.0 * (double)lcg(s) / 9007199254740992.0 - 1.0); }

/* ------------------------------------------------- the f64 reference --- */

typedef struct cfg {
  const char *label;
  em_recurrent_cell cell;
  em_recurrent_direction dir;
  int layout, T, N, I, H;
  double clip;
  int lbr, input_forget;
  int has_b, has_p, has_h0, has_c0;
  const int *lens;            /* NULL: none */
  const char *acts[6];
  int n_acts;
  double alpha[6], beta[6];
  int n_alpha, n_beta;
} cfg;

static int gates_of(em_recurrent_cell c) { return c == EM_CELL_LSTM ? 4 : c == EM_CELL_GRU ? 3 : 1; }
static int dirs_of(const cfg *c) { return c->dir == EM_DIR_BIDIRECTIONAL ? 2 : 1; }

typedef struct ref_act {
  char name[24];
  double alpha, beta;
} ref_act;

/* The ONNX activation functions, from their definitions. */
static double ref_apply(const ref_act *a, double x) {
  if (!strcasecmp(a->name, "Sigmoid")) return 1 / (1 + exp(-x));
  if (!strcasecmp(a->name, "Tanh")) return tanh(x);
  if (!strcasecmp(a->name, "Relu")) return x > 0 ? x : 0;
  if (!strcasecmp(a->name, "HardSigmoid")) return fmax(0, fmin(1, a->alpha * x + a->beta));
  if (!strcasecmp(a->name, "LeakyRelu")) return x < 0 ? a->alpha * x : x;
  if (!strcasecmp(a->name, "ScaledTanh")) return a->alpha * tanh(a->beta * x);
  if (!strcasecmp(a->name, "Affine")) return a->alpha * x + a->beta;
  if (!strcasecmp(a->name, "Elu")) return x > 0 ? x : a->alpha * (exp(x) - 1);
  if (!strcasecmp(a->name, "Softsign")) return x / (1 + fabs(x));
  if (!strcasecmp(a->name, "Softplus")) return log1p(exp(x));
  if (!strcasecmp(a->name, "ThresholdedRelu")) return x > a->alpha ? x : 0;
  fail_msg("reference: unknown activation %s", a->name);
  return 0;
}

/* The activations of direction d: the given names with alpha/beta taken in
 * order by those that use them (ONNX defaults otherwise), or the defaults. */
static void ref_acts(const cfg *c, ref_act acts[2][3]) {
  int per = c->cell == EM_CELL_LSTM ? 3 : c->cell == EM_CELL_GRU ? 2 : 1, ia = 0, ib = 0;
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < per; k++) {
      ref_act *a = &acts[d][k];
      memset(a, 0, sizeof *a);
      if (!c->n_acts || d * per + k >= c->n_acts) {
        snprintf(a->name, sizeof a->name, "%s", c->cell == EM_CELL_RNN ? "Tanh" : k == 0 ? "Sigmoid" : "Tanh");
        continue;
      }
      snprintf(a->name, sizeof a->name, "%s", c->acts[d * per + k]);
      int ua = 0, ub = 0;
      if (!strcasecmp(a->name, "HardSigmoid")) a->alpha = 0.2, a->beta = 0.5, ua = ub = 1;
      else if (!strcasecmp(a->name, "LeakyRelu")) a->alpha = 0.01, ua = 1;
      else if (!strcasecmp(a->name, "ScaledTanh")) a->alpha = 1, a->beta = 1, ua = ub = 1;
      else if (!strcasecmp(a->name, "Affine")) a->alpha = 1, a->beta = 0, ua = ub = 1;
      else if (!strcasecmp(a->name, "Elu") || !strcasecmp(a->name, "ThresholdedRelu")) a->alpha = 1, ua = 1;
      if (ua && ia < c->n_alpha) a->alpha = c->alpha[ia++];
      if (ub && ib < c->n_beta) a->beta = c->beta[ib++];
    }
}

static double clipv(const cfg *c, double v) { return c->clip > 0 ? fmax(-c->clip, fmin(c->clip, v)) : v; }

/* The data of one case, time-major and [D, N, H] whatever the layout: x
 * [T][N][I], W [D][G H][I], R [D][G H][H], B [D][2 G H], P [D][3 H], h0, c0
 * [D][N][H]. */
typedef struct data {
  double *x, *w, *r, *b, *p, *h0, *c0;
} data;

/* Y [T][D][N][H], Yh and Yc [D][N][H], by the ONNX equations. */
static void reference(const cfg *c, const data *v, double *Y, double *Yh, double *Yc) {
  const int T = c->T, N = c->N, I = c->I, H = c->H, G = gates_of(c->cell), D = dirs_of(c);
  ref_act acts[2][3];
  ref_acts(c, acts);
  double *h = calloc((size_t)(N * H), sizeof *h), *cs = calloc((size_t)(N * H), sizeof *cs);
  double *pre = calloc((size_t)(G * H), sizeof *pre), *hn = calloc((size_t)H, sizeof *hn);
  for (int d = 0; d < D; d++) {
    int rev = c->dir == EM_DIR_REVERSE || d == 1;
    const double *W = v->w + (size_t)d * G * H * I, *R = v->r + (size_t)d * G * H * H;
    const double *Wb = c->has_b ? v->b + (size_t)d * 2 * G * H : NULL, *Rb = Wb ? Wb + G * H : NULL;
    const double *P = c->has_p ? v->p + (size_t)d * 3 * H : NULL;
    const ref_act *f = &acts[d][0], *g = &acts[d][1], *hf = &acts[d][2];
    for (int i = 0; i < N * H; i++) {
      h[i] = c->has_h0 ? v->h0[(size_t)d * N * H + i] : 0;
      cs[i] = c->has_c0 ? v->c0[(size_t)d * N * H + i] : 0;
    }
    for (int k = 0; k < T; k++) {
      int t = rev ? T - 1 - k : k;
      for (int n = 0; n < N; n++) {
        double *Yo = Y + (((size_t)t * D + d) * N + n) * H, *hp = h + n * H, *cp = cs + n * H;
        if (c->lens && t >= c->lens[n]) {
          for (int j = 0; j < H; j++) Yo[j] = 0;
          continue;
        }
        const double *xt = v->x + ((size_t)t * N + n) * I;
        /* x W^T + Wb for every gate row; the recurrent part per cell. */
        for (int q = 0; q < G * H; q++) {
          double s = 0;
          for (int i = 0; i < I; i++) s += xt[i] * W[q * I + i];
          pre[q] = s + (Wb ? Wb[q] : 0);
        }
        if (c->cell == EM_CELL_LSTM) { /* i o f c */
          for (int q = 0; q < G * H; q++) {
            double s = 0;
            for (int i = 0; i < H; i++) s += hp[i] * R[q * H + i];
            pre[q] += s + (Rb ? Rb[q] : 0);
          }
          for (int j = 0; j < H; j++) {
            double it = ref_apply(f, clipv(c, pre[j] + (P ? P[j] * cp[j] : 0)));
            double ft = c->input_forget ? 1 - it : ref_apply(f, clipv(c, pre[2 * H + j] + (P ? P[2 * H + j] * cp[j] : 0)));
            double ct = ref_apply(g, clipv(c, pre[3 * H + j]));
            double C = ft * cp[j] + it * ct;
            double ot = ref_apply(f, clipv(c, pre[H + j] + (P ? P[H + j] * C : 0)));
            hn[j] = ot * ref_apply(hf, C); /* clip bounds the gates only (onnxruntime; checked against it) */
            cp[j] = C;
          }
        } else if (c->cell == EM_CELL_GRU) { /* z r h */
          double z[64], r[64];
          for (int j = 0; j < H; j++) {
            double sz = 0, sr = 0;
            for (int i = 0; i < H; i++) sz += hp[i] * R[j * H + i], sr += hp[i] * R[(H + j) * H + i];
            z[j] = ref_apply(f, clipv(c, pre[j] + sz + (Rb ? Rb[j] : 0)));
            r[j] = ref_apply(f, clipv(c, pre[H + j] + sr + (Rb ? Rb[H + j] : 0)));
          }
          for (int j = 0; j < H; j++) {
            double s = 0, rbh = Rb ? Rb[2 * H + j] : 0;
            if (c->lbr) {
              for (int i = 0; i < H; i++) s += hp[i] * R[(2 * H + j) * H + i];
              s = r[j] * (s + rbh);
            } else {
              for (int i = 0; i < H; i++) s += r[i] * hp[i] * R[(2 * H + j) * H + i];
              s += rbh;
            }
            double hh = ref_apply(g, clipv(c, pre[2 * H + j] + s));
            hn[j] = (1 - z[j]) * hh + z[j] * hp[j];
          }
        } else {
          for (int j = 0; j < H; j++) {
            double s = 0;
            for (int i = 0; i < H; i++) s += hp[i] * R[j * H + i];
            hn[j] = ref_apply(f, clipv(c, pre[j] + s + (Rb ? Rb[j] : 0)));
          }
        }
        for (int j = 0; j < H; j++) hp[j] = Yo[j] = hn[j];
      }
    }
    /* A sequence of length 0 ends in zero states, whatever the initial ones
     * (onnxruntime's rule on the CPU and CUDA: its final states of an empty
     * sequence are zeroed). */
    for (int n = 0; c->lens && n < N; n++)
      if (c->lens[n] == 0)
        for (int j = 0; j < H; j++) h[n * H + j] = cs[n * H + j] = 0;
    memcpy(Yh + (size_t)d * N * H, h, sizeof(double) * (size_t)(N * H));
    if (Yc) memcpy(Yc + (size_t)d * N * H, cs, sizeof(double) * (size_t)(N * H));
  }
  free(h), free(cs), free(pre), free(hn);
}

/* ------------------------------------------------------ graph builder --- */

typedef struct rig {
  em_graph *g;
  em_var in[8];               /* x w r b lens h0 c0 p (-1 absent) */
  em_tensor *val[8];
  em_recurrent_outputs out;
} rig;

static em_tensor *tensor_of(em_dtype dt, int nd, const int64_t *shape, const double *v) {
  em_tensor *t;
  CHECK(em_tensor_zeros(em_cpu(), dt, nd, shape, &t));
  int64_t n = em_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == EM_F64) ((double *)em_tensor_data(t))[i] = v[i];
    else ((float *)em_tensor_data(t))[i] = (float)v[i];
  }
  return t;
}

/* [D][N][H] or [T][N][I] time-major data as layout 1 ([N][D][H], [N][T][I]). */
static double *swap01(const double *v, int a, int b, int c) {
  double *o = malloc(sizeof(double) * (size_t)(a * b * c));
  for (int i = 0; i < a; i++)
    for (int j = 0; j < b; j++)
      for (int k = 0; k < c; k++) o[((size_t)j * a + i) * c + k] = v[((size_t)i * b + j) * c + k];
  return o;
}

/* Inputs (all graph inputs, fed), the recurrence, outputs. */
static void rig_build(rig *rg, const cfg *c, const data *v, em_dtype dt) {
  const int T = c->T, N = c->N, I = c->I, H = c->H, G = gates_of(c->cell), D = dirs_of(c);
  memset(rg, 0, sizeof *rg);
  CHECK(em_graph_create(&rg->g));
  const char *names[8] = {"X", "W", "R", "B", "lens", "h0", "c0", "P"};
  int64_t shapes[8][3] = {{T, N, I}, {D, G * H, I}, {D, G * H, H}, {D, 2 * G * H}, {N}, {D, N, H}, {D, N, H}, {D, 3 * H}};
  int nds[8] = {3, 3, 3, 2, 1, 3, 3, 2};
  const double *vals[8] = {v->x, v->w, v->r, v->b, NULL, v->h0, v->c0, v->p};
  int present[8] = {1, 1, 1, c->has_b, c->lens != NULL, c->has_h0, c->has_c0, c->has_p};
  double *tmp[8] = {0};
  if (c->layout) {
    shapes[0][0] = N, shapes[0][1] = T;
    tmp[0] = swap01(v->x, T, N, I), vals[0] = tmp[0];
    for (int k = 5; k <= 6; k++)
      if (present[k]) shapes[k][0] = N, shapes[k][1] = D, tmp[k] = swap01(vals[k], D, N, H), vals[k] = tmp[k];
  }
  em_recurrent_inputs ri = EM_RECURRENT_INPUTS(EM_NO_VAR, EM_NO_VAR, EM_NO_VAR);
  em_var *slot[8] = {&ri.x, &ri.w, &ri.r, &ri.b, &ri.sequence_lens, &ri.initial_h, &ri.initial_c, &ri.p};
  for (int k = 0; k < 8; k++) {
    rg->in[k] = EM_NO_VAR;
    if (!present[k]) continue;
    em_dtype kdt = k == 4 ? EM_I32 : dt;
    CHECK(em_input(rg->g, names[k], kdt, nds[k], shapes[k], &rg->in[k]));
    if (k == 4) CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, shapes[4], c->lens, sizeof(int) * (size_t)N, &rg->val[k]));
    else rg->val[k] = tensor_of(dt, nds[k], shapes[k], vals[k]);
    *slot[k] = rg->in[k];
  }
  for (int k = 0; k < 8; k++) free(tmp[k]);
  em_recurrent_opts o = {.direction = c->dir, .layout = c->layout, .clip = c->clip, .linear_before_reset = c->lbr,
                         .input_forget = c->input_forget, .activations = c->acts, .n_activations = c->n_acts,
                         .activation_alpha = c->alpha, .n_alpha = c->n_alpha, .activation_beta = c->beta,
                         .n_beta = c->n_beta};
  CHECK(em_recurrent_apply(rg->g, c->cell, &ri, &o, &rg->out));
}

static int rig_feeds(const rig *rg, em_feed *f) {
  int n = 0;
  for (int k = 0; k < 8; k++)
    if (rg->in[k] != EM_NO_VAR) f[n++] = (em_feed){rg->in[k], rg->val[k]};
  return n;
}

static void rig_free(rig *rg) {
  for (int k = 0; k < 8; k++) em_tensor_release(rg->val[k]);
  em_graph_free(rg->g);
}

static double *random_values(uint64_t *seed, size_t n, double a) {
  double *v = malloc(sizeof(double) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) v[i] = unif(seed, a);
  return v;
}

static data make_data(const cfg *c, uint64_t seed) {
  const int T = c->T, N = c->N, I = c->I, H = c->H, G = gates_of(c->cell), D = dirs_of(c);
  data v;
  v.x = random_values(&seed, (size_t)(T * N * I), 1);
  v.w = random_values(&seed, (size_t)(D * G * H * I), 0.8);
  v.r = random_values(&seed, (size_t)(D * G * H * H), 0.8);
  v.b = random_values(&seed, (size_t)(D * 2 * G * H), 0.5);
  v.p = random_values(&seed, (size_t)(D * 3 * H), 0.5);
  v.h0 = random_values(&seed, (size_t)(D * N * H), 0.7);
  v.c0 = random_values(&seed, (size_t)(D * N * H), 0.7);
  return v;
}

static void data_free(data *v) { free(v->x), free(v->w), free(v->r), free(v->b), free(v->p), free(v->h0), free(v->c0); }

/* ------------------------------------------------------- forward check --- */

/* got (layout as c) against want ([T][D][N][H] or [D][N][H] time-major). */
static void compare(const cfg *c, const char *what, const em_tensor *got, const double *want, int is_y) {
  const int T = c->T, N = c->N, H = c->H, D = dirs_of(c);
  const double *g = em_tensor_data(got);
  int64_t n = em_tensor_numel(got);
  assert_int_equal(n, (int64_t)(is_y ? T : 1) * D * N * H);
  for (int t = 0; t < (is_y ? T : 1); t++)
    for (int d = 0; d < D; d++)
      for (int b = 0; b < N; b++)
        for (int j = 0; j < H; j++) {
          size_t wi = (((size_t)t * D + d) * N + b) * H + j, gi;
          if (!c->layout) gi = wi;
          else if (is_y) gi = (((size_t)b * T + t) * D + d) * H + j; /* [N, T, D, H] */
          else gi = ((size_t)b * D + d) * H + j;                       /* [N, D, H] */
          if (!(fabs(g[gi] - want[wi]) <= 1e-12))
            fail_msg("%s: %s[t %d, dir %d, n %d, j %d] = %.17g, the reference gives %.17g", c->label, what, t, d, b, j,
                     g[gi], want[wi]);
        }
}

static const int lens_a[3] = {5, 2, 0};
static const int lens_b[3] = {3, 5, 1};

static const cfg fwd_cases[] = {
  {"lstm forward, defaults", EM_CELL_LSTM, EM_DIR_FORWARD, 0, 5, 3, 3, 4, 0, 0, 0, 0, 0, 0, 0, NULL, {0}, 0, {0}, {0}, 0, 0},
  {"lstm bidirectional, B P h0 c0 lens clip", EM_CELL_LSTM, EM_DIR_BIDIRECTIONAL, 0, 5, 3, 3, 4, 0.3, 0, 0, 1, 1, 1,
   1, lens_a, {0}, 0, {0}, {0}, 0, 0},
  {"lstm reverse, layout 1, input_forget, activations", EM_CELL_LSTM, EM_DIR_REVERSE, 1, 5, 3, 3, 4, 0, 0, 1, 1, 1,
   1, 0, lens_b, {"HardSigmoid", "LeakyRelu", "ScaledTanh"}, 3, {0.3, 0.1, 1.5}, {0.4, 0.8}, 3, 2},
  {"gru forward, B lens", EM_CELL_GRU, EM_DIR_FORWARD, 0, 5, 3, 3, 4, 0, 0, 0, 1, 0, 0, 0, lens_b, {0}, 0, {0}, {0}, 0, 0},
  {"gru bidirectional, linear_before_reset, h0 clip", EM_CELL_GRU, EM_DIR_BIDIRECTIONAL, 0, 5, 3, 3, 4, 0.7, 1, 0, 1,
   0, 1, 0, lens_a, {0}, 0, {0}, {0}, 0, 0},
  {"gru reverse, layout 1, activations", EM_CELL_GRU, EM_DIR_REVERSE, 1, 4, 2, 3, 3, 0, 0, 0, 1, 0, 1, 0, NULL,
   {"Sigmoid", "Softsign"}, 2, {0}, {0}, 0, 0},
  {"gru forward, no B, linear_before_reset", EM_CELL_GRU, EM_DIR_FORWARD, 0, 3, 2, 2, 3, 0, 1, 0, 0, 0, 0, 0, NULL,
   {0}, 0, {0}, {0}, 0, 0},
  {"rnn forward, T 20 (chained concats)", EM_CELL_RNN, EM_DIR_FORWARD, 0, 20, 2, 3, 3, 0, 0, 0, 1, 0, 0, 0, NULL, {0},
   0, {0}, {0}, 0, 0},
  {"rnn bidirectional, h0 lens, Relu Affine", EM_CELL_RNN, EM_DIR_BIDIRECTIONAL, 0, 5, 3, 2, 4, 0, 0, 0, 1, 0, 1, 0,
   lens_a, {"Relu", "Affine"}, 2, {0.5}, {0.25}, 1, 1},
  {"rnn reverse, layout 1, clip", EM_CELL_RNN, EM_DIR_REVERSE, 1, 5, 3, 3, 4, 0.5, 0, 0, 1, 0, 1, 0, lens_b, {0}, 0,
   {0}, {0}, 0, 0},
};

static void test_forward_matches_reference(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof fwd_cases / sizeof fwd_cases[0]; k++) {
    const cfg *c = &fwd_cases[k];
    data v = make_data(c, 1000 + k);
    const int D = dirs_of(c);
    size_t ny = (size_t)(c->T * D * c->N * c->H), nh = (size_t)(D * c->N * c->H);
    double *Y = calloc(ny, sizeof *Y), *Yh = calloc(nh, sizeof *Yh), *Yc = calloc(nh, sizeof *Yc);
    reference(c, &v, Y, Yh, c->cell == EM_CELL_LSTM ? Yc : NULL);
    rig rg;
    rig_build(&rg, c, &v, EM_F64);
    int lstm = c->cell == EM_CELL_LSTM;
    assert_int_equal(rg.out.y_c == EM_NO_VAR, !lstm);
    em_var outs[3] = {rg.out.y, rg.out.y_h, rg.out.y_c};
    em_exec *e;
    CHECK(em_exec_create(rg.g, outs, lstm ? 3 : 2, em_cpu(), &e));
    em_feed f[8];
    em_tensor *res[3] = {0};
    CHECK(em_exec_run(e, f, rig_feeds(&rg, f), res));
    compare(c, "Y", res[0], Y, 1);
    compare(c, "Y_h", res[1], Yh, 0);
    if (lstm) compare(c, "Y_c", res[2], Yc, 0);
    for (int i = 0; i < 3; i++) em_tensor_release(res[i]);
    em_exec_free(e);
    rig_free(&rg);
    free(Y), free(Yh), free(Yc);
    data_free(&v);
  }
}

/* ------------------------------------------------------ gradient check --- */

/* loss = sum(Y * ky) + sum(Y_h * kh) (+ sum(Y_c * kc)), constants k. */
static em_var loss_of(rig *rg, uint64_t seed, em_dtype dt) {
  em_var outs[3] = {rg->out.y, rg->out.y_h, rg->out.y_c}, total = EM_NO_VAR;
  for (int i = 0; i < 3 && outs[i] != EM_NO_VAR; i++) {
    int nd;
    int64_t sh[EM_MAX_DIMS], n = 1;
    CHECK(em_var_info(rg->g, outs[i], NULL, &nd, sh));
    for (int d = 0; d < nd; d++) n *= sh[d];
    double *k = random_values(&seed, (size_t)n, 1);
    em_tensor *t = tensor_of(dt, nd, sh, k);
    free(k);
    em_var kv, m, s;
    CHECK(em_constant(rg->g, t, &kv));
    em_tensor_release(t);
    CHECK(em_apply(rg->g, "mul", (em_var[]){outs[i], kv}, 2, NULL, 0, &m, 1));
    CHECK(em_apply(rg->g, "reduce_sum", &m, 1, NULL, 0, &s, 1));
    if (total == EM_NO_VAR) total = s;
    else CHECK(em_apply(rg->g, "add", (em_var[]){total, s}, 2, NULL, 0, &total, 1));
  }
  return total;
}

static double run_loss(em_exec *e, const rig *rg) {
  em_feed f[8];
  em_tensor *r = NULL;
  CHECK(em_exec_run(e, f, rig_feeds(rg, f), &r));
  double v = *(const double *)em_tensor_data(r);
  em_tensor_release(r);
  return v;
}

static const cfg grad_cases[] = {
  {"lstm gradient (bidirectional, B P h0 c0 lens)", EM_CELL_LSTM, EM_DIR_BIDIRECTIONAL, 0, 3, 2, 2, 2, 0, 0, 0, 1, 1,
   1, 1, (const int[]){3, 2}, {0}, 0, {0}, {0}, 0, 0},
  {"gru gradient (bidirectional, linear_before_reset, h0 lens)", EM_CELL_GRU, EM_DIR_BIDIRECTIONAL, 0, 3, 2, 2, 2, 0,
   1, 0, 1, 0, 1, 0, (const int[]){1, 3}, {0}, 0, {0}, {0}, 0, 0},
  {"gru gradient (reverse, layout 1)", EM_CELL_GRU, EM_DIR_REVERSE, 1, 3, 2, 2, 2, 0, 0, 0, 1, 0, 1, 0, NULL, {0}, 0,
   {0}, {0}, 0, 0},
  {"rnn gradient (bidirectional, h0 lens)", EM_CELL_RNN, EM_DIR_BIDIRECTIONAL, 0, 3, 2, 2, 3, 0, 0, 0, 1, 0, 1, 0,
   (const int[]){2, 3}, {0}, 0, {0}, {0}, 0, 0},
  /* A length 0 with initial states: its final states are 0, so no gradient reaches h0 and c0 there. */
  {"lstm gradient (reverse, lengths 0 and T, h0 c0)", EM_CELL_LSTM, EM_DIR_REVERSE, 0, 3, 2, 2, 2, 0, 0, 0, 1, 0,
   1, 1, (const int[]){0, 3}, {0}, 0, {0}, {0}, 0, 0},
};

/* The engine's gradient of every float input against central differences. */
static void test_gradients_finite_differences(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof grad_cases / sizeof grad_cases[0]; k++) {
    const cfg *c = &grad_cases[k];
    data v = make_data(c, 2000 + k);
    rig rg;
    rig_build(&rg, c, &v, EM_F64);
    em_var loss = loss_of(&rg, 77 + k, EM_F64);
    int idx[8], n = 0;
    em_var xs[8], gs[8];
    for (int i = 0; i < 8; i++)
      if (i != 4 && rg.in[i] != EM_NO_VAR) idx[n] = i, xs[n++] = rg.in[i];
    CHECK(em_gradients(rg.g, loss, xs, n, gs));
    em_exec *eg, *el;
    CHECK(em_exec_create(rg.g, gs, n, em_cpu(), &eg));
    CHECK(em_exec_create(rg.g, &loss, 1, em_cpu(), &el));
    em_feed f[8];
    em_tensor *res[8] = {0};
    CHECK(em_exec_run(eg, f, rig_feeds(&rg, f), res));
    const char *names[8] = {"X", "W", "R", "B", "lens", "initial_h", "initial_c", "P"};
    for (int i = 0; i < n; i++) {
      double *p = em_tensor_data(rg.val[idx[i]]);
      const double *gr = em_tensor_data(res[i]);
      for (int64_t e = 0; e < em_tensor_numel(rg.val[idx[i]]); e++) {
        const double h = 1e-6, keep = p[e];
        p[e] = keep + h;
        double up = run_loss(el, &rg);
        p[e] = keep - h;
        double down = run_loss(el, &rg);
        p[e] = keep;
        double fd = (up - down) / (2 * h);
        if (!(fabs(fd - gr[e]) <= 1e-6 * (1 + fabs(fd))))
          fail_msg("%s: d loss / d %s[%lld]: autodiff %.12g, finite differences %.12g", c->label, names[idx[i]],
                   (long long)e, gr[e], fd);
      }
      em_tensor_release(res[i]);
    }
    em_exec_free(eg);
    em_exec_free(el);
    rig_free(&rg);
    data_free(&v);
  }
}

/* ------------------------------------------------------- the GPU double --- */

static int g_gpus;

/* Forward outputs and every gradient, f32, portable mode, on dev. */
static void run_f32(const cfg *c, em_device dev, em_tensor **res, int *n_res) {
  data v = make_data(c, 3000);
  rig rg;
  rig_build(&rg, c, &v, EM_F32);
  em_var loss = loss_of(&rg, 99, EM_F32);
  em_var outs[16];
  int n = 0;
  outs[n++] = loss;
  outs[n++] = rg.out.y;
  outs[n++] = rg.out.y_h;
  if (rg.out.y_c != EM_NO_VAR) outs[n++] = rg.out.y_c;
  em_var xs[8];
  int nx = 0;
  for (int i = 0; i < 8; i++)
    if (i != 4 && rg.in[i] != EM_NO_VAR) xs[nx++] = rg.in[i];
  CHECK(em_gradients(rg.g, loss, xs, nx, outs + n));
  n += nx;
  em_exec *e;
  CHECK(em_exec_create(rg.g, outs, n, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_feed f[8];
  em_tensor *r[16] = {0};
  CHECK(em_exec_run(e, f, rig_feeds(&rg, f), r));
  for (int i = 0; i < n; i++) {
    CHECK(em_tensor_to_device(r[i], em_cpu(), &res[i]));
    em_tensor_release(r[i]);
  }
  *n_res = n;
  em_exec_free(e);
  rig_free(&rg);
  data_free(&v);
}

static void test_gpu_bitwise(void **state) {
  (void)state;
  if (!g_gpus) {
    print_message("recurrent nets on the GPU: SKIPPED: no CUDA driver, real or test double\n");
    skip();
  }
  const cfg cases[] = {grad_cases[0], grad_cases[1], grad_cases[3]};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    em_tensor *a[16], *b[16];
    int na, nb;
    run_f32(&cases[k], em_cpu(), a, &na);
    run_f32(&cases[k], em_cuda(0), b, &nb);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) {
      int64_t m = em_tensor_numel(a[i]);
      assert_int_equal(m, em_tensor_numel(b[i]));
      const float *x = em_tensor_data(a[i]), *y = em_tensor_data(b[i]);
      for (int64_t j = 0; j < m; j++)
        if (memcmp(&x[j], &y[j], sizeof(float)))
          fail_msg("%s: output %d element %lld: %.9g on cuda:0, %.9g on the CPU (portable mode must give the same bits)",
                   cases[k].label, i, (long long)j, y[j], x[j]);
      em_tensor_release(a[i]);
      em_tensor_release(b[i]);
    }
  }
}

/* ------------------------------------------------------------ errors --- */

static void test_errors(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, w, r, xd;
  CHECK(em_input(g, "x", EM_F32, 3, (int64_t[]){4, 2, 3}, &x));
  CHECK(em_input(g, "xd", EM_F32, 3, (int64_t[]){-1, 2, 3}, &xd));
  CHECK(em_input(g, "w", EM_F32, 3, (int64_t[]){1, 20, 3}, &w));
  CHECK(em_input(g, "r", EM_F32, 3, (int64_t[]){1, 20, 5}, &r));
  em_recurrent_outputs o;
  em_recurrent_inputs in = EM_RECURRENT_INPUTS(x, w, r);
  /* 20 rows are an LSTM's 4 x 5, not a GRU's 3 x 5 */
  assert_int_equal(em_recurrent_apply(g, EM_CELL_GRU, &in, NULL, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "'R' is [1, 20, 5]; [1, 15, 5] expected"));
  CHECK(em_recurrent_apply(g, EM_CELL_LSTM, &in, NULL, &o));
  em_recurrent_opts bi = {.direction = EM_DIR_BIDIRECTIONAL};
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &in, &bi, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "[2, 20, 5] expected"));
  const char *acts[3] = {"Sigmoid", "Tanh", "Swish"};
  em_recurrent_opts ba = {.activations = acts, .n_activations = 3};
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &in, &ba, &o), EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(em_last_error(), "'Swish'"));
  ba.n_activations = 2;
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &in, &ba, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "2 activations given; 3 expected"));
  em_recurrent_inputs dyn = EM_RECURRENT_INPUTS(xd, w, r);
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &dyn, NULL, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "unrolled"));
  em_recurrent_opts lbr = {.linear_before_reset = 1};
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &in, &lbr, &o), EM_ERR_INVALID_ARGUMENT);
  /* Lengths and initial states of another batch size than X's (N 2) are
   * refused: one length, or one initial state, would broadcast over the
   * batch silently (onnxruntime refuses them too). */
  em_var lens1, lens3, h1;
  CHECK(em_input(g, "lens1", EM_I32, 1, (int64_t[]){1}, &lens1));
  CHECK(em_input(g, "lens3", EM_I64, 1, (int64_t[]){3}, &lens3));
  CHECK(em_input(g, "h1", EM_F32, 3, (int64_t[]){1, 1, 5}, &h1));
  em_recurrent_inputs bad = in;
  bad.sequence_lens = lens1;
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &bad, NULL, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "'sequence_lens' is [1]; [2] expected"));
  bad.sequence_lens = lens3;
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &bad, NULL, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "'sequence_lens' is [3]; [2] expected"));
  bad = in;
  bad.initial_h = h1;
  assert_int_equal(em_recurrent_apply(g, EM_CELL_LSTM, &bad, NULL, &o), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "'initial_h' is [1, 1, 5]; [1, 2, 5] expected"));
  em_graph_free(g);
}

/* ---------------------------------------------------------- the layer --- */

/* Parameters, shapes and names of em_lstm / em_gru / em_rnn. */
static void test_layer_parameters(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x;
  CHECK(em_input(g, "x", EM_F32, 3, (int64_t[]){-1, 7, 5}, &x));
  em_layers L = {.graph = g, .seed = 3};
  em_recurrent_layer_opts o = {.rnn = {.direction = EM_DIR_BIDIRECTIONAL, .layout = 1}, .peepholes = 1};
  em_recurrent_outputs out;
  CHECK(em_lstm(&L, NULL, x, 6, &o, &out));
  int nd;
  int64_t sh[EM_MAX_DIMS];
  CHECK(em_var_info(g, out.y, NULL, &nd, sh));
  assert_int_equal(nd, 4);
  assert_true(sh[0] == -1 && sh[1] == 7 && sh[2] == 2 && sh[3] == 6);
  em_var p, y;
  CHECK(em_graph_lookup(g, "lstm1", &y));
  assert_int_equal(y, out.y);
  CHECK(em_graph_lookup(g, "lstm1.W", &p));
  CHECK(em_var_info(g, p, NULL, &nd, sh));
  assert_true(nd == 3 && sh[0] == 2 && sh[1] == 24 && sh[2] == 5);
  CHECK(em_graph_lookup(g, "lstm1.P", &p));
  /* PyTorch's init: U(-1/sqrt(6), 1/sqrt(6)) */
  em_tensor *t;
  CHECK(em_graph_lookup(g, "lstm1.R", &p));
  CHECK(em_parameter_get(g, p, em_cpu(), &t));
  const float *r = em_tensor_data(t);
  double bound = 1 / sqrt(6.0), mx = 0;
  for (int64_t i = 0; i < em_tensor_numel(t); i++) mx = fmax(mx, fabs(r[i]));
  assert_true(mx <= bound && mx > 0.8 * bound);
  em_tensor_release(t);
  int64_t count;
  CHECK(em_layers_parameter_count(g, &count));
  /* W 2*24*5 + R 2*24*6 + B 2*48 + P 2*18 */
  assert_int_equal(count, 240 + 288 + 96 + 36);
  CHECK(em_gru(&L, NULL, x, 4, &(em_recurrent_layer_opts){.rnn.layout = 1, .no_bias = 1}, &out));
  assert_int_equal(out.y_c, EM_NO_VAR);
  CHECK(em_graph_lookup(g, "gru1.R", &p));
  assert_int_equal(em_graph_lookup(g, "gru1.B", &p), EM_ERR_NOT_FOUND);
  CHECK(em_rnn(&L, "enc", x, 3, &(em_recurrent_layer_opts){.rnn.layout = 1}, &out));
  CHECK(em_graph_lookup(g, "enc.B", &p));
  assert_int_equal(em_rnn(&L, "enc", x, 3, &(em_recurrent_layer_opts){.rnn.layout = 1}, &out), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_gru(&L, NULL, x, 4, &(em_recurrent_layer_opts){.rnn.layout = 1, .peepholes = 1}, &out),
                   EM_ERR_INVALID_ARGUMENT);
  /* A layer refused by the recurrence (an initial state of the wrong size,
   * an unknown activation) leaves no parameters behind: none to train or
   * count, and its name is free for the corrected call. */
  int64_t before;
  CHECK(em_layers_parameter_count(g, &before));
  em_var h0;
  CHECK(em_input(g, "h0", EM_F32, 3, (int64_t[]){-1, 1, 5}, &h0));
  assert_int_equal(em_lstm(&L, "dec", x, 6, &(em_recurrent_layer_opts){.rnn.layout = 1, .initial_h = &h0}, &out),
                   EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "initial_h"));
  const char *swish[1] = {"Swish"};
  assert_int_equal(em_rnn(&L, "dec", x, 6, &(em_recurrent_layer_opts){.rnn = {.layout = 1, .activations = swish,
                   .n_activations = 1}}, &out), EM_ERR_UNSUPPORTED);
  CHECK(em_layers_parameter_count(g, &count));
  assert_int_equal(count, before);
  assert_int_equal(em_graph_lookup(g, "dec.W", &p), EM_ERR_NOT_FOUND);
  CHECK(em_lstm(&L, "dec", x, 5, &(em_recurrent_layer_opts){.rnn.layout = 1, .initial_h = &h0}, &out));
  CHECK(em_graph_lookup(g, "dec.W", &p));
  em_graph_free(g);
}

/* ------------------------------------------------------------ training --- */

/* Recall: a sequence of T random bits (one-hot, [N, T, 2]); the class is
 * the FIRST bit, which the LSTM must carry through T - 1 distracting steps
 * to its final state. Chance is 50%. */
#define TR_T 8
#define TR_N 32
#define TR_H 12

static void make_batch(uint64_t *seed, float *x, int32_t *y) {
  for (int n = 0; n < TR_N; n++)
    for (int t = 0; t < TR_T; t++) {
      int bit = (int)(lcg(seed) >> 20) & 1;
      x[(n * TR_T + t) * 2 + 0] = (float)(1 - bit);
      x[(n * TR_T + t) * 2 + 1] = (float)bit;
      if (t == 0) y[n] = bit;
    }
}

static void test_lstm_learns_recall(void **state) {
  (void)state;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, label, hn, logits, ce, loss, wrong, err;
  CHECK(em_input(g, "x", EM_F32, 3, (int64_t[]){-1, TR_T, 2}, &x));
  CHECK(em_input(g, "label", EM_I32, 1, (int64_t[]){-1}, &label));
  em_layers L = {.graph = g, .seed = 11};
  em_recurrent_outputs r;
  CHECK(em_lstm(&L, NULL, x, TR_H, &(em_recurrent_layer_opts){.rnn.layout = 1}, &r));
  em_attr shape = {.name = "shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){-1, TR_H}, .n = 2};
  CHECK(em_apply(g, "reshape", &r.y_h, 1, &shape, 1, &hn, 1)); /* [N, 1, H] -> [N, H] */
  CHECK(em_dense(&L, NULL, hn, 2, NULL, &logits));
  CHECK(em_apply(g, "cross_entropy_with_softmax", (em_var[]){logits, label}, 2, NULL, 0, &ce, 1));
  CHECK(em_apply(g, "reduce_mean", &ce, 1, NULL, 0, &loss, 1));
  CHECK(em_apply(g, "classification_error", (em_var[]){logits, label}, 2, NULL, 0, &wrong, 1));
  CHECK(em_apply(g, "reduce_mean", &wrong, 1, NULL, 0, &err, 1));
  size_t np;
  em_var params[16], grads[16];
  CHECK(em_graph_parameters(g, params, 16, &np));
  CHECK(em_gradients(g, loss, params, (int)np, grads));
  em_learner_config lc;
  CHECK(em_learner_defaults(EM_LEARNER_ADAM, 0.02, &lc));
  em_learner *l;
  em_var update;
  CHECK(em_learner_create(&lc, NULL, params, (int)np, &l));
  CHECK(em_learner_attach(l, g, grads, &update));
  em_exec *e;
  CHECK(em_exec_create(g, (em_var[]){loss, err, update}, 3, em_cpu(), &e));
  uint64_t seed = 5;
  float xv[TR_N * TR_T * 2];
  int32_t yv[TR_N];
  const int steps = 200;
  double first = 0, last_err = 1;
  for (int s = 0; s < steps; s++) {
    make_batch(&seed, xv, yv);
    em_tensor *xt, *yt, *out[3] = {0};
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 3, (int64_t[]){TR_N, TR_T, 2}, xv, sizeof xv, &xt));
    CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){TR_N}, yv, sizeof yv, &yt));
    em_feed f[3] = {{x, xt}, {label, yt}};
    CHECK(em_learner_feed(l, TR_N, &f[2]));
    CHECK(em_exec_run(e, f, 3, out));
    CHECK(em_learner_step_done(l, TR_N));
    float lv = *(const float *)em_tensor_data(out[0]);
    if (s == 0) first = lv;
    for (int i = 0; i < 3; i++) em_tensor_release(out[i]);
    em_tensor_release(xt);
    em_tensor_release(yt);
  }
  /* Accuracy on 8 fresh batches (256 sequences), forward only. */
  em_exec *ev;
  CHECK(em_exec_create(g, &err, 1, em_cpu(), &ev));
  double errs = 0;
  for (int b = 0; b < 8; b++) {
    make_batch(&seed, xv, yv);
    em_tensor *xt, *yt, *out = NULL;
    CHECK(em_tensor_from_host(em_cpu(), EM_F32, 3, (int64_t[]){TR_N, TR_T, 2}, xv, sizeof xv, &xt));
    CHECK(em_tensor_from_host(em_cpu(), EM_I32, 1, (int64_t[]){TR_N}, yv, sizeof yv, &yt));
    em_feed f[2] = {{x, xt}, {label, yt}};
    CHECK(em_exec_run(ev, f, 2, &out));
    errs += *(const float *)em_tensor_data(out);
    em_tensor_release(out);
    em_tensor_release(xt);
    em_tensor_release(yt);
  }
  last_err = errs / 8;
  print_message("lstm recall of the first of %d bits: loss %.4f at step 1, held-out accuracy %.1f%% after %d steps\n",
                TR_T, first, 100 * (1 - last_err), steps);
  if (!(last_err <= 0.02))
    fail_msg("the LSTM reached %.1f%% held-out accuracy after %d Adam steps; >= 98%% expected", 100 * (1 - last_err),
             steps);
  em_exec_free(ev);
  em_exec_free(e);
  em_learner_free(l);
  em_graph_free(g);
}

/* ------------------------------------- fused against unrolled LSTM --- */

/* A default LSTM is one fused _lstm_seq node per direction (ops/recurrent.c);
 * clip 1e30 (no effect on these values) keeps the same LSTM unrolled step by
 * step. Both must give the same outputs and the same gradients of a loss
 * that weighs Y, Y_h and Y_c, with respect to x, W, R, B, h0 and c0, for
 * every direction, both layouts, lengths none / with 0 / past T and
 * negative, with and without initial states. */
static em_var fu_ap(em_graph *g, const char *op, em_var a, em_var b) {
  em_var in[2] = {a, b}, o;
  CHECK(em_apply(g, op, in, b < 0 ? 1 : 2, NULL, 0, &o, 1));
  return o;
}

static em_tensor *fu_pattern(int nd, const int64_t *sh, int seed) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= sh[i];
  float *v = malloc(sizeof(float) * (size_t)n);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = (float)sin(seed * 1.7 + (double)i * 0.91);
  em_tensor *t;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, nd, sh, v, sizeof(float) * (size_t)n, &t));
  free(v);
  return t;
}

/* Outputs y, y_h, y_c then the gradients (4, or 6 with initial states) into
 * got (float arrays of up to 512 values each); returns how many. */
static int fu_run(int unrolled, int dir, int layout, const int64_t *lensv, int states, float got[9][512],
                  int64_t *count) {
  const int64_t T = 4, N = 4, I = 3, H = 3;
  const int64_t D = dir == EM_DIR_BIDIRECTIONAL ? 2 : 1;
  em_graph *g;
  CHECK(em_graph_create(&g));
  em_var x, lens, h0, c0;
  int64_t xs[3] = {layout ? N : T, layout ? T : N, I}, hs[3] = {layout ? N : D, layout ? D : N, H};
  CHECK(em_input(g, "x", EM_F32, 3, xs, &x));
  CHECK(em_input(g, "lens", EM_I64, 1, (int64_t[]){N}, &lens));
  CHECK(em_input(g, "h0", EM_F32, 3, hs, &h0));
  CHECK(em_input(g, "c0", EM_F32, 3, hs, &c0));
  em_layers L = {.graph = g, .seed = 5};
  em_recurrent_layer_opts lo = {.rnn = {.direction = dir, .layout = layout, .clip = unrolled ? 1e30 : 0},
                                .sequence_lens = lensv ? &lens : NULL, .initial_h = states ? &h0 : NULL,
                                .initial_c = states ? &c0 : NULL};
  em_recurrent_outputs ro;
  CHECK(em_lstm(&L, "l", x, H, &lo, &ro));
  em_var W, R, B;
  CHECK(em_graph_lookup(g, "l.W", &W));
  CHECK(em_graph_lookup(g, "l.R", &R));
  CHECK(em_graph_lookup(g, "l.B", &B));
  em_var t1 = fu_ap(g, "reduce_sum", fu_ap(g, "mul", ro.y, fu_ap(g, "sin", ro.y, -1)), -1);
  em_var t2 = fu_ap(g, "reduce_sum", fu_ap(g, "mul", ro.y_h, fu_ap(g, "cos", ro.y_h, -1)), -1);
  em_var t3 = fu_ap(g, "reduce_sum", fu_ap(g, "mul", ro.y_c, fu_ap(g, "exp", ro.y_c, -1)), -1);
  em_var loss = fu_ap(g, "add", fu_ap(g, "add", t1, t2), t3);
  em_var wrt[6] = {x, W, R, B, h0, c0}, gr[6];
  int nw = states ? 6 : 4;
  CHECK(em_gradients(g, loss, wrt, nw, gr));
  em_var outs[9] = {ro.y, ro.y_h, ro.y_c};
  for (int i = 0; i < nw; i++) outs[3 + i] = gr[i];
  em_exec *e;
  CHECK(em_exec_create(g, outs, 3 + nw, em_cpu(), &e));
  em_tensor *tx = fu_pattern(3, xs, 1), *th = fu_pattern(3, hs, 2), *tc = fu_pattern(3, hs, 3), *tl;
  int64_t lv[4] = {4, 4, 4, 4};
  if (lensv) memcpy(lv, lensv, sizeof lv);
  CHECK(em_tensor_from_host(em_cpu(), EM_I64, 1, (int64_t[]){N}, lv, sizeof lv, &tl));
  em_feed f[4] = {{x, tx}, {lens, tl}, {h0, th}, {c0, tc}};
  em_tensor *o[9];
  CHECK(em_exec_run(e, f, 4, o));
  for (int i = 0; i < 3 + nw; i++) {
    count[i] = em_tensor_numel(o[i]);
    assert_true(count[i] <= 512);
    CHECK(em_tensor_to_host(o[i], got[i], sizeof(float) * (size_t)count[i]));
    em_tensor_release(o[i]);
  }
  em_tensor_release(tx), em_tensor_release(th), em_tensor_release(tc), em_tensor_release(tl);
  em_exec_free(e);
  em_graph_free(g);
  return 3 + nw;
}

static void test_fused_lstm_matches_unrolled(void **state) {
  (void)state;
  static const char *const what[9] = {"y", "y_h", "y_c", "dx", "dW", "dR", "dB", "dh0", "dc0"};
  static const int64_t with0[4] = {4, 0, 2, 3}, odd[4] = {9, -2, 1, 4};
  const int64_t *lens[3] = {NULL, with0, odd};
  static float a[9][512], b[9][512];
  for (int dir = 0; dir < 3; dir++)
    for (int lay = 0; lay < 2; lay++)
      for (int li = 0; li < 3; li++)
        for (int st = 0; st < 2; st++) {
          int64_t ca[9], cb[9];
          int n = fu_run(0, dir, lay, lens[li], st, a, ca);
          assert_int_equal(fu_run(1, dir, lay, lens[li], st, b, cb), n);
          for (int k = 0; k < n; k++) {
            assert_int_equal(ca[k], cb[k]);
            double worst = 0, scale = 0;
            for (int64_t i = 0; i < ca[k]; i++) {
              double d = fabs((double)a[k][i] - b[k][i]);
              if (!(d <= worst)) worst = d;
              scale = fmax(scale, fabs((double)b[k][i]));
            }
            if (!(worst <= 1e-5 * fmax(scale, 1)))
              fail_msg("direction %d layout %d lengths %d initial states %d: %s of the fused LSTM differs from the "
                       "unrolled one by %g", dir, lay, li, st, what[k], worst);
          }
        }
}

int main(void) {
  g_gpus = ts_use_gpu();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_forward_matches_reference),
    cmocka_unit_test(test_gradients_finite_differences),
    cmocka_unit_test(test_gpu_bitwise),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_layer_parameters),
    cmocka_unit_test(test_fused_lstm_matches_unrolled),
    cmocka_unit_test(test_lstm_learns_recall),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  em_shutdown();
  return rc;
}
