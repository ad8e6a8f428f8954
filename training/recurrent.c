/* Recurrent networks (em_recurrent_apply, include/ember/layers.h): ONNX's
 * LSTM, GRU and RNN unrolled over the static time axis into the engine's
 * ops. This file is the one place that knows the cell equations; the ONNX
 * importer and the layers (em_lstm, em_gru, em_rnn) both call it.
 *
 * Shape of the unroll, per direction: x W^T (+ the biases) for every step at
 * once (one matmul over [T, N, I]); then per step a slice of that, one
 * matmul with R, slices per gate, the activations and products, and, with
 * sequence lengths, a `where` per state keeping the old state past the
 * element's length. Zero initial states are not materialised (N may be
 * dynamic): a state that is still zero is EM_NO_VAR and the terms it would
 * feed are left out.
 *
 * An LSTM with the default activations and no peepholes, clip or
 * input_forget (what em_lstm makes by default, and most exported models)
 * is not unrolled: after the same x W^T + biases matmul, each direction is
 * one _lstm_seq node (ops/recurrent.c) whose hand-written backward runs the
 * whole BPTT, instead of ~20 nodes a step whose gradients autodiff sums
 * (the step slices' gradients alone made that O(T^2) in memory traffic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ember/layers.h"
#include "error.h"
#include "graph_internal.h"
#include "op.h"

#define API __attribute__((visibility("default")))
#define NO EM_NO_VAR
#define CONCAT_MAX 16 /* the concat op's input limit */

/* ---------------------------------------------------------- activations --- */

typedef enum act_kind {
  A_RELU, A_TANH, A_SIGMOID, A_AFFINE, A_LEAKY_RELU, A_THRESHOLDED_RELU, A_SCALED_TANH, A_HARD_SIGMOID, A_ELU,
  A_SOFTSIGN, A_SOFTPLUS
} act_kind;

static const struct {
  const char *name;
  int uses_alpha, uses_beta;
  double alpha, beta; /* defaults */
} act_table[] = {
  [A_RELU] = {"Relu", 0, 0, 0, 0},
  [A_TANH] = {"Tanh", 0, 0, 0, 0},
  [A_SIGMOID] = {"Sigmoid", 0, 0, 0, 0},
  [A_AFFINE] = {"Affine", 1, 1, 1, 0},
  [A_LEAKY_RELU] = {"LeakyRelu", 1, 0, 0.01, 0},
  [A_THRESHOLDED_RELU] = {"ThresholdedRelu", 1, 0, 1, 0},
  [A_SCALED_TANH] = {"ScaledTanh", 1, 1, 1, 1},
  [A_HARD_SIGMOID] = {"HardSigmoid", 1, 1, 0.2, 0.5},
  [A_ELU] = {"Elu", 1, 0, 1, 0},
  [A_SOFTSIGN] = {"Softsign", 0, 0, 0, 0},
  [A_SOFTPLUS] = {"Softplus", 0, 0, 0, 0},
};
#define N_ACTS ((int)(sizeof act_table / sizeof act_table[0]))

typedef struct act {
  act_kind kind;
  double alpha, beta;
} act;

/* ------------------------------------------------------------- builder --- */

typedef struct rb {
  em_graph *g;
  em_dtype dt;
  const char *who; /* "LSTM", "GRU", "RNN" for messages */
  em_recurrent_cell cell;
  const em_recurrent_opts *o;
  int64_t T, H, G;
  em_var *mask;    /* [T]: [N, 1] bool, step t is within the element's length; NULL: no lengths */
  act acts[2][3];  /* per direction: f, g, h */
} rb;

static em_status ap(rb *b, const char *op, const em_var *in, int n, const em_attr *at, int n_at, em_var *out) {
  em_status s = em_apply(b->g, op, in, n, at, n_at, out, 1);
  return s ? em_fail_context(s, "%s recurrence", b->who) : EM_OK;
}

static em_status ap2(rb *b, const char *op, em_var x, em_var y, em_var *out) {
  em_var in[2] = {x, y};
  return ap(b, op, in, 2, NULL, 0, out);
}

static em_status ap1(rb *b, const char *op, em_var x, em_var *out) { return ap(b, op, &x, 1, NULL, 0, out); }

static em_status scalar(rb *b, double v, em_var *out) { return em_scalar(b->g, b->dt, v, out); }

/* x + y where either may be absent (a zero term). */
static em_status add_opt(rb *b, em_var x, em_var y, em_var *out) {
  if (x == NO || y == NO) {
    *out = x == NO ? y : x;
    return EM_OK;
  }
  return ap2(b, "add", x, y, out);
}

/* x * y where y may be absent (zero): absent. */
static em_status mul_opt(rb *b, em_var x, em_var y, em_var *out) {
  if (y == NO) {
    *out = NO;
    return EM_OK;
  }
  return ap2(b, "mul", x, y, out);
}

/* x[start:end] along axis. */
static em_status slice(rb *b, em_var x, int64_t axis, int64_t start, int64_t end, em_var *out) {
  em_attr at[3] = {em_attr_is("starts", &start, 1), em_attr_is("ends", &end, 1), em_attr_is("axes", &axis, 1)};
  return ap(b, "slice", &x, 1, at, 3, out);
}

/* x[i] along axis, the axis removed. */
static em_status take(rb *b, em_var x, int64_t axis, int64_t i, em_var *out) {
  em_var s1;
  em_status s = slice(b, x, axis, i, i + 1, &s1);
  if (s) return s;
  em_attr a = em_attr_is("axes", &axis, 1);
  return ap(b, "squeeze", &s1, 1, &a, 1, out);
}

static em_status unsqueeze(rb *b, em_var x, int64_t axis, em_var *out) {
  em_attr a = em_attr_is("axes", &axis, 1);
  return ap(b, "unsqueeze", &x, 1, &a, 1, out);
}

static em_status transpose(rb *b, em_var x, const int64_t *perm, int n, em_var *out) {
  em_attr a = em_attr_is("perm", perm, n);
  return ap(b, "transpose", &x, 1, &a, 1, out);
}

/* Concatenation of n values along axis, in groups of the op's limit. */
static em_status concat_many(rb *b, em_var *v, int n, int64_t axis, em_var *out) {
  em_attr a = em_attr_i("axis", axis);
  while (n > 1) {
    int m = 0;
    for (int i = 0; i < n; i += CONCAT_MAX, m++) {
      int k = n - i < CONCAT_MAX ? n - i : CONCAT_MAX;
      if (k == 1) v[m] = v[i];
      else {
        em_status s = ap(b, "concat", v + i, k, &a, 1, &v[m]);
        if (s) return s;
      }
    }
    n = m;
  }
  *out = v[0];
  return EM_OK;
}

/* x @ w^T for w [out, in]. */
static em_status matmul_t(rb *b, em_var x, em_var w, em_var *out) {
  em_var in[2] = {x, w};
  em_attr a = em_attr_i("transpose_b", 1);
  return ap(b, "matmul", in, 2, &a, 1, out);
}

/* The activation f applied to a gate's pre-activation (clipped first when
 * opts.clip > 0). */
static em_status activate_raw(rb *b, const act *f, em_var pre, em_var *out);
static em_status activate(rb *b, const act *f, em_var pre, em_var *out) {
  if (b->o->clip > 0) {
    em_attr at[2] = {em_attr_f("min", -b->o->clip), em_attr_f("max", b->o->clip)};
    em_status s = ap(b, "clip", &pre, 1, at, 2, &pre);
    if (s) return s;
  }
  return activate_raw(b, f, pre, out);
}

/* The activation f, never clipped: LSTM's h(C) (onnxruntime clips only the
 * gates' pre-activations, not the cell state h reads). */
static em_status activate_raw(rb *b, const act *f, em_var pre, em_var *out) {
  em_status s;
  em_var a, c;
  switch (f->kind) {
  case A_RELU: return ap1(b, "relu", pre, out);
  case A_TANH: return ap1(b, "tanh", pre, out);
  case A_SIGMOID: return ap1(b, "sigmoid", pre, out);
  case A_SOFTSIGN: return ap1(b, "softsign", pre, out);
  case A_SOFTPLUS: return ap1(b, "softplus", pre, out);
  case A_AFFINE:
    if ((s = scalar(b, f->alpha, &a)) || (s = scalar(b, f->beta, &c)) || (s = ap2(b, "mul", pre, a, &a))) return s;
    return ap2(b, "add", a, c, out);
  case A_SCALED_TANH:
    if ((s = scalar(b, f->beta, &c)) || (s = ap2(b, "mul", pre, c, &c)) || (s = ap1(b, "tanh", c, &c)) ||
        (s = scalar(b, f->alpha, &a)))
      return s;
    return ap2(b, "mul", c, a, out);
  case A_LEAKY_RELU:
  case A_THRESHOLDED_RELU:
  case A_ELU: {
    const char *op = f->kind == A_LEAKY_RELU ? "leaky_relu" : f->kind == A_ELU ? "elu" : "thresholded_relu";
    em_attr at = em_attr_f("alpha", f->alpha);
    return ap(b, op, &pre, 1, &at, 1, out);
  }
  case A_HARD_SIGMOID: {
    em_attr at[2] = {em_attr_f("alpha", f->alpha), em_attr_f("beta", f->beta)};
    return ap(b, "hard_sigmoid", &pre, 1, at, 2, out);
  }
  }
  return em_fail(EM_ERR_INTERNAL, "%s recurrence: activation kind %d", b->who, (int)f->kind);
}

/* ------------------------------------------------------- the options --- */

static int n_acts_of(em_recurrent_cell cell) { return cell == EM_CELL_LSTM ? 3 : cell == EM_CELL_GRU ? 2 : 1; }

static em_status parse_acts(rb *b, int D) {
  const em_recurrent_opts *o = b->o;
  int per = n_acts_of(b->cell);
  static const act_kind dflt[3] = {A_SIGMOID, A_TANH, A_TANH};
  if (o->n_activations && o->n_activations != per * D)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %d activations given; %d expected (%d per direction, %d direction%s)",
                   b->who, o->n_activations, per * D, per, D, D > 1 ? "s" : "");
  int ia = 0, ib = 0;
  for (int d = 0; d < D; d++)
    for (int k = 0; k < per; k++) {
      act *f = &b->acts[d][k];
      if (!o->n_activations) {
        f->kind = b->cell == EM_CELL_RNN ? A_TANH : dflt[k];
        continue;
      }
      const char *name = o->activations[d * per + k];
      int found = -1;
      for (int i = 0; name && i < N_ACTS; i++)
        if (!strcasecmp(name, act_table[i].name)) found = i;
      if (found < 0)
        return em_fail(EM_ERR_UNSUPPORTED, "%s: activation '%s' is not one of ONNX's (Relu, Tanh, Sigmoid, Affine, "
                       "LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)",
                       b->who, name ? name : "(null)");
      f->kind = (act_kind)found;
      f->alpha = act_table[found].alpha, f->beta = act_table[found].beta;
      if (act_table[found].uses_alpha && ia < o->n_alpha) f->alpha = o->activation_alpha[ia++];
      if (act_table[found].uses_beta && ib < o->n_beta) f->beta = o->activation_beta[ib++];
    }
  return EM_OK;
}

/* ------------------------------------------------------- shape checks --- */

static em_status info(rb *b, em_var v, const char *what, int want_rank, int64_t *shape) {
  em_dtype dt;
  int nd;
  em_status s = em_var_info(b->g, v, &dt, &nd, shape);
  if (s) return em_fail_context(s, "%s input '%s'", b->who, what);
  if (nd != want_rank)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: input '%s' has rank %d; rank %d expected", b->who, what, nd,
                   want_rank);
  if (dt != b->dt)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: input '%s' is %s and X %s; they must match", b->who, what,
                   em_dtype_name(dt), em_dtype_name(b->dt));
  return EM_OK;
}

/* shape must equal want where want is known (>= 0); N (-2 in want) may be anything. */
static em_status expect(rb *b, const char *what, const int64_t *shape, const int64_t *want, int n) {
  for (int i = 0; i < n; i++)
    if (want[i] != -2 && shape[i] != want[i]) {
      char got[96], exp[96];
      size_t a = 0, c = 0;
      for (int k = 0; k < n; k++) {
        a += (size_t)snprintf(got + a, sizeof got - a, "%s%lld", k ? ", " : "", (long long)shape[k]);
        if (want[k] == -2) c += (size_t)snprintf(exp + c, sizeof exp - c, "%sN", k ? ", " : "");
        else c += (size_t)snprintf(exp + c, sizeof exp - c, "%s%lld", k ? ", " : "", (long long)want[k]);
      }
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: input '%s' is [%s]; [%s] expected", b->who, what, got, exp);
    }
  return EM_OK;
}

/* ---------------------------------------------------------- one step --- */

/* The per-direction constants: the weights of direction d, sliced once. */
typedef struct dir_w {
  em_var xw;        /* [T, N, G H]: x W^T + Wb (+ Rb for RNN and LSTM, + Rb_zr for GRU's z r) */
  em_var r;         /* [G H, H] (GRU: the z r rows only) */
  em_var r_h, rb_h; /* GRU: R's h rows [H, H] and Rb_h [H] (NO without B) */
  em_var pi, po, pf;/* LSTM peepholes [H] or NO */
} dir_w;

/* The state after step t: the old state past the element's length (sequence
 * lengths given), else the new one. */
static em_status keep_or_update(rb *b, int t, em_var fresh, em_var old, em_var *out) {
  if (!b->mask) {
    *out = fresh;
    return EM_OK;
  }
  em_status s;
  if (old == NO && (s = scalar(b, 0, &old))) return s;
  em_var in[3] = {b->mask[t], fresh, old};
  return ap(b, "where", in, 3, NULL, 0, out);
}

/* pre (the step's x W^T + biases) + h R^T, where h may be absent. */
static em_status with_recurrent(rb *b, em_var pre, em_var h, em_var r, em_var *out) {
  em_var rec;
  em_status s;
  if (h == NO) {
    *out = pre;
    return EM_OK;
  }
  if ((s = matmul_t(b, h, r, &rec))) return s;
  return ap2(b, "add", pre, rec, out);
}

/* One LSTM step: *h_new and *c_new from the step's x part and the states. */
static em_status lstm_step(rb *b, const act *a, const dir_w *w, em_var xw, em_var h, em_var c, em_var *h_new,
                           em_var *c_new) {
  const int64_t H = b->H;
  em_var pre, p[4], t1, t2, i, fg, cc, o, cn;
  em_status s;
  if ((s = with_recurrent(b, xw, h, w->r, &pre))) return s;
  for (int k = 0; k < 4; k++)
    if ((s = slice(b, pre, 1, k * H, (k + 1) * H, &p[k]))) return s; /* i o f c */
  if (w->pi != NO && c != NO &&
      ((s = ap2(b, "mul", w->pi, c, &t1)) || (s = ap2(b, "add", p[0], t1, &p[0])) ||
       (s = ap2(b, "mul", w->pf, c, &t2)) || (s = ap2(b, "add", p[2], t2, &p[2]))))
    return s;
  if ((s = activate(b, &a[0], p[0], &i)) || (s = activate(b, &a[1], p[3], &cc))) return s;
  if (b->o->input_forget) {
    em_var one;
    if ((s = scalar(b, 1, &one)) || (s = ap2(b, "sub", one, i, &fg))) return s;
  } else if ((s = activate(b, &a[0], p[2], &fg))) return s;
  if ((s = mul_opt(b, fg, c, &t1)) || (s = ap2(b, "mul", i, cc, &t2)) || (s = add_opt(b, t1, t2, &cn))) return s;
  if (w->po != NO && ((s = ap2(b, "mul", w->po, cn, &t1)) || (s = ap2(b, "add", p[1], t1, &p[1])))) return s;
  if ((s = activate(b, &a[0], p[1], &o)) || (s = activate_raw(b, &a[2], cn, &t1))) return s;
  *c_new = cn;
  return ap2(b, "mul", o, t1, h_new);
}

/* One GRU step. */
static em_status gru_step(rb *b, const act *a, const dir_w *w, em_var xw, em_var h, em_var *h_new) {
  const int64_t H = b->H;
  em_var xzr, xh, zr, z, r, hh, t1, one, omz;
  em_status s;
  if ((s = slice(b, xw, 1, 0, 2 * H, &xzr)) || (s = slice(b, xw, 1, 2 * H, 3 * H, &xh)) ||
      (s = with_recurrent(b, xzr, h, w->r, &zr)) || (s = slice(b, zr, 1, 0, H, &z)) ||
      (s = slice(b, zr, 1, H, 2 * H, &r)) || (s = activate(b, &a[0], z, &z)) || (s = activate(b, &a[0], r, &r)))
    return s;
  /* The h gate's recurrent term: (r * h) R_h^T + Rb_h, or r * (h R_h^T + Rb_h). */
  em_var rec = NO;
  if (b->o->linear_before_reset) {
    if (h != NO && (s = matmul_t(b, h, w->r_h, &rec))) return s;
    if ((s = add_opt(b, rec, w->rb_h, &rec))) return s;
    if (rec != NO && (s = ap2(b, "mul", r, rec, &rec))) return s;
  } else {
    if (h != NO && ((s = ap2(b, "mul", r, h, &t1)) || (s = matmul_t(b, t1, w->r_h, &rec)))) return s;
    if ((s = add_opt(b, rec, w->rb_h, &rec))) return s;
  }
  if ((s = add_opt(b, xh, rec, &hh)) || (s = activate(b, &a[1], hh, &hh))) return s;
  /* (1 - z) * hh + z * h */
  if ((s = scalar(b, 1, &one)) || (s = ap2(b, "sub", one, z, &omz)) || (s = ap2(b, "mul", omz, hh, &hh)) ||
      (s = mul_opt(b, z, h, &t1)))
    return s;
  return add_opt(b, hh, t1, h_new);
}

/* One RNN step. */
static em_status rnn_step(rb *b, const act *a, const dir_w *w, em_var xw, em_var h, em_var *h_new) {
  em_var pre;
  em_status s = with_recurrent(b, xw, h, w->r, &pre);
  return s ? s : activate(b, &a[0], pre, h_new);
}

/* ------------------------------------------------- the fused LSTM op --- */

/* Whether direction d's LSTM is one _lstm_seq node (ops/recurrent.c): the
 * default activations (sigmoid, tanh, tanh), no peepholes, clip or
 * input_forget. Anything else is unrolled step by step below. */
static int fused_lstm(const rb *b, const em_recurrent_inputs *in, int d) {
  const act *a = b->acts[d];
  return b->cell == EM_CELL_LSTM && in->p == NO && b->o->clip == 0 && !b->o->input_forget &&
         a[0].kind == A_SIGMOID && a[1].kind == A_TANH && a[2].kind == A_TANH;
}

/* The whole recurrence of one direction as one node: y [T, N, H] into *y,
 * the final states into *h and *c (zeros for an empty sequence, as the
 * unrolled form's zero_if_empty gives them). */
static em_status lstm_seq(rb *b, int reverse, em_var xw, em_var r, em_var lens, em_var *y, em_var *h, em_var *c) {
  em_var inp[5] = {xw, r}, outs[4];
  int n = 2;
  if (*h != NO) inp[n++] = *h;
  if (*c != NO) inp[n++] = *c;
  if (lens != NO) inp[n++] = lens;
  em_attr at[4] = {em_attr_i("reverse", reverse), em_attr_i("has_h0", *h != NO), em_attr_i("has_c0", *c != NO),
                   em_attr_i("has_lens", lens != NO)};
  em_status s = em_apply(b->g, "_lstm_seq", inp, n, at, 4, outs, 4);
  if (s) return em_fail_context(s, "%s recurrence", b->who);
  *y = outs[0], *h = outs[1], *c = outs[2];
  return EM_OK;
}

/* --------------------------------------------------------- a direction --- */

/* Direction index d of the weights over x [T, N, I], reversed or not: the
 * outputs per step (in time order) into ys, or, for a fused LSTM, all of
 * them [T, N, H] into *yd (NO otherwise); the final states into *h, *c
 * (which hold the initial ones, NO for zeros). */
static em_status run_direction(rb *b, int d, int reverse, em_var x, const em_recurrent_inputs *in, em_var *ys,
                               em_var *yd, em_var *h, em_var *c) {
  const int64_t H = b->H, GH = b->G * H;
  dir_w w = {.r_h = NO, .rb_h = NO, .pi = NO, .po = NO, .pf = NO};
  em_var wd, rd, bd, wb, rbias, bias = NO;
  em_status s;
  if ((s = take(b, in->w, 0, d, &wd)) || (s = take(b, in->r, 0, d, &rd)) || (s = matmul_t(b, x, wd, &w.xw)))
    return s;
  w.r = rd;
  if (in->b != NO) {
    if ((s = take(b, in->b, 0, d, &bd)) || (s = slice(b, bd, 0, 0, GH, &wb)) || (s = slice(b, bd, 0, GH, 2 * GH, &rbias)))
      return s;
    if (b->cell == EM_CELL_GRU) {
      /* Rb's z r part joins Wb; Rb_h stays in the h gate (inside r with linear_before_reset). */
      em_var rzr, zero_h, parts[2];
      if ((s = slice(b, rbias, 0, 0, 2 * H, &rzr)) || (s = slice(b, rbias, 0, 2 * H, 3 * H, &w.rb_h)) ||
          (s = scalar(b, 0, &zero_h)) || (s = ap2(b, "mul", w.rb_h, zero_h, &zero_h)))
        return s;
      parts[0] = rzr, parts[1] = zero_h;
      if ((s = concat_many(b, parts, 2, 0, &rzr)) || (s = ap2(b, "add", wb, rzr, &bias))) return s;
    } else if ((s = ap2(b, "add", wb, rbias, &bias))) return s;
    if ((s = ap2(b, "add", w.xw, bias, &w.xw))) return s;
  }
  if (b->cell == EM_CELL_GRU &&
      ((s = slice(b, rd, 0, 2 * H, 3 * H, &w.r_h)) || (s = slice(b, rd, 0, 0, 2 * H, &w.r))))
    return s;
  *yd = NO;
  if (fused_lstm(b, in, d)) return lstm_seq(b, reverse, w.xw, rd, in->sequence_lens, yd, h, c);
  if (b->cell == EM_CELL_LSTM && in->p != NO) {
    em_var pd;
    if ((s = take(b, in->p, 0, d, &pd)) || (s = slice(b, pd, 0, 0, H, &w.pi)) || (s = slice(b, pd, 0, H, 2 * H, &w.po)) ||
        (s = slice(b, pd, 0, 2 * H, 3 * H, &w.pf)))
      return s;
  }
  const act *a = b->acts[d];
  for (int64_t k = 0; k < b->T; k++) {
    int t = (int)(reverse ? b->T - 1 - k : k);
    em_var xw, hn, cn = NO;
    if ((s = take(b, w.xw, 0, t, &xw))) return s;
    switch (b->cell) {
    case EM_CELL_LSTM: s = lstm_step(b, a, &w, xw, *h, *c, &hn, &cn); break;
    case EM_CELL_GRU: s = gru_step(b, a, &w, xw, *h, &hn); break;
    default: s = rnn_step(b, a, &w, xw, *h, &hn); break;
    }
    if (s) return s;
    if (b->mask) {
      em_var zero;
      if ((s = scalar(b, 0, &zero))) return s;
      em_var yin[3] = {b->mask[t], hn, zero};
      if ((s = ap(b, "where", yin, 3, NULL, 0, &ys[t]))) return s;
    } else ys[t] = hn;
    if ((s = keep_or_update(b, t, hn, *h, h))) return s;
    if (b->cell == EM_CELL_LSTM && (s = keep_or_update(b, t, cn, *c, c))) return s;
  }
  return EM_OK;
}

/* ------------------------------------------------------------------ API --- */

static const char *cell_name(em_recurrent_cell cell) {
  return cell == EM_CELL_LSTM ? "LSTM" : cell == EM_CELL_GRU ? "GRU" : cell == EM_CELL_RNN ? "RNN" : NULL;
}

/* Checks the inputs' shapes; T, I, H, N (maybe -1) out. */
static em_status check_inputs(rb *b, const em_recurrent_inputs *in, int D, int64_t *I, int64_t *N) {
  int64_t xs[EM_MAX_DIMS], ws[EM_MAX_DIMS], rs[EM_MAX_DIMS], sh[EM_MAX_DIMS];
  em_dtype dt;
  int nd;
  em_status s = em_var_info(b->g, in->x, &dt, &nd, xs);
  if (s) return em_fail_context(s, "%s input 'X'", b->who);
  if (dt != EM_F32 && dt != EM_F64)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: X is %s; f32 or f64 expected", b->who, em_dtype_name(dt));
  b->dt = dt;
  if (nd != 3) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: X has rank %d; [T, N, I] or [N, T, I] expected", b->who, nd);
  int lay = b->o->layout;
  b->T = xs[lay ? 1 : 0], *N = xs[lay ? 0 : 1], *I = xs[2];
  if (b->T < 1 || *I < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: X is [%lld, %lld, %lld]; its sequence length and input size must be "
                   "known when the graph is built (the recurrence is unrolled)", b->who, (long long)xs[0],
                   (long long)xs[1], (long long)xs[2]);
  if ((s = info(b, in->r, "R", 3, rs))) return s;
  b->H = rs[2];
  const int64_t H = b->H, GH = b->G * H;
  if (H < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: R's hidden size %lld must be known", b->who, (long long)H);
  if ((s = expect(b, "R", rs, (int64_t[]){D, GH, H}, 3)) || (s = info(b, in->w, "W", 3, ws)) ||
      (s = expect(b, "W", ws, (int64_t[]){D, GH, *I}, 3)))
    return s;
  if (in->b != NO && ((s = info(b, in->b, "B", 2, sh)) || (s = expect(b, "B", sh, (int64_t[]){D, 2 * GH}, 2)))) return s;
  if (in->p != NO) {
    if (b->cell != EM_CELL_LSTM) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: P (peepholes) is an LSTM input", b->who);
    if ((s = info(b, in->p, "P", 2, sh)) || (s = expect(b, "P", sh, (int64_t[]){D, 3 * H}, 2))) return s;
  }
  if (in->initial_c != NO && b->cell != EM_CELL_LSTM)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: initial_c is an LSTM input", b->who);
  /* The batch size where X gives it (-2: anything): a length or an initial
   * state of batch size 1 would otherwise broadcast over the batch. */
  const int64_t n_want = *N >= 0 ? *N : -2;
  const em_var st[2] = {in->initial_h, in->initial_c};
  const char *st_name[2] = {"initial_h", "initial_c"};
  for (int k = 0; k < 2; k++)
    if (st[k] != NO) {
      int64_t want[3] = {D, n_want, H};
      if (lay) want[0] = n_want, want[1] = D;
      if ((s = info(b, st[k], st_name[k], 3, sh))) return s;
      if (sh[lay ? 0 : 1] < 0) want[lay ? 0 : 1] = -2; /* dynamic: met by the ops' broadcasting when it runs */
      if ((s = expect(b, st_name[k], sh, want, 3))) return s;
    }
  if (in->sequence_lens != NO) {
    if ((s = em_var_info(b->g, in->sequence_lens, &dt, &nd, sh))) return em_fail_context(s, "%s sequence_lens", b->who);
    if ((dt != EM_I32 && dt != EM_I64) || nd != 1)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: sequence_lens is %s of rank %d; a vector [N] of i32 or i64 expected",
                     b->who, em_dtype_name(dt), nd);
    if (sh[0] >= 0 && (s = expect(b, "sequence_lens", sh, &n_want, 1))) return s;
  }
  return EM_OK;
}

/* The step masks: mask[t] = (t < sequence_lens) as [N, 1]. */
static em_status make_masks(rb *b, em_var lens) {
  em_dtype dt;
  em_status s = em_var_info(b->g, lens, &dt, NULL, NULL);
  for (int64_t t = 0; !s && t < b->T; t++) {
    em_var tc, m;
    if ((s = em_scalar(b->g, dt, (double)t, &tc)) || (s = ap2(b, "less", tc, lens, &m))) break;
    s = unsqueeze(b, m, 1, &b->mask[t]);
  }
  return s;
}

/* where(lens > 0, state, 0): the final state of an empty sequence is 0. */
static em_status zero_if_empty(rb *b, em_var *state) {
  em_var zero;
  em_status s = scalar(b, 0, &zero);
  if (s) return s;
  em_var in[3] = {b->mask[0], *state, zero};
  return ap(b, "where", in, 3, NULL, 0, state);
}

/* The initial state of direction d ([D, N, H] after the layout), or NO. */
static em_status initial_of(rb *b, em_var v, int d, em_var *out) {
  if (v == NO) {
    *out = NO;
    return EM_OK;
  }
  return take(b, v, 0, d, out);
}

/* Stacks per-direction [N, H] values (or per-step [T] arrays of them) along a new axis. */
static em_status stack(rb *b, em_var *v, int n, int64_t axis, em_var *out) {
  for (int i = 0; i < n; i++) {
    em_status s = unsqueeze(b, v[i], axis, &v[i]);
    if (s) return s;
  }
  return concat_many(b, v, n, axis, out);
}

/* Records in the graph that out is the ONNX op (LSTM, GRU, RNN) of in, in
 * ONNX's terms (a block, engine/graph_internal.h), so that the exporter
 * writes that one node instead of the unrolled ones. Activations are
 * written by their ONNX names, comma-separated, and alpha / beta resolved
 * (defaults filled in) for the activations that take them, which is how
 * onnxruntime and the importer consume them. */
static em_status record_block(rb *b, int D, const em_recurrent_inputs *in, const em_recurrent_outputs *out) {
  static const char *const dir_names[3] = {"forward", "reverse", "bidirectional"};
  const em_recurrent_opts *o = b->o;
  const int per = n_acts_of(b->cell);
  char acts[256] = "";
  double alpha[6], beta[6];
  int na = 0, nb = 0;
  em_attr at[9];
  int n = 0;
  at[n++] = em_attr_i("hidden_size", b->H);
  if (o->direction != EM_DIR_FORWARD) at[n++] = em_attr_s("direction", dir_names[o->direction]);
  if (o->layout) at[n++] = em_attr_i("layout", 1);
  if (o->clip > 0) at[n++] = em_attr_f("clip", o->clip);
  if (o->linear_before_reset) at[n++] = em_attr_i("linear_before_reset", 1);
  if (o->input_forget) at[n++] = em_attr_i("input_forget", 1);
  if (o->n_activations) {
    size_t len = 0;
    for (int d = 0; d < D; d++)
      for (int k = 0; k < per; k++) {
        const act *f = &b->acts[d][k];
        len += (size_t)snprintf(acts + len, sizeof acts - len, "%s%s", len ? "," : "", act_table[f->kind].name);
        if (act_table[f->kind].uses_alpha) alpha[na++] = f->alpha;
        if (act_table[f->kind].uses_beta) beta[nb++] = f->beta;
      }
    at[n++] = em_attr_s("activations", acts);
    if (na) at[n++] = em_attr_fs("activation_alpha", alpha, na);
    if (nb) at[n++] = em_attr_fs("activation_beta", beta, nb);
  }
  const em_var ins[8] = {in->x, in->w, in->r, in->b, in->sequence_lens, in->initial_h, in->initial_c, in->p};
  const em_var outs[3] = {out->y, out->y_h, out->y_c};
  int lstm = b->cell == EM_CELL_LSTM;
  em_status s = em_graph_add_block(b->g, b->who, ins, lstm ? 8 : 6, outs, lstm ? 3 : 2, at, n);
  return s ? em_fail_context(s, "%s recurrence", b->who) : EM_OK;
}

API em_status em_recurrent_apply(em_graph *g, em_recurrent_cell cell, const em_recurrent_inputs *in,
                                 const em_recurrent_opts *opts, em_recurrent_outputs *out) {
  const em_recurrent_opts dflt = {0};
  rb b = {.g = g, .cell = cell, .o = opts ? opts : &dflt, .who = cell_name(cell)};
  if (!g || !in || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_recurrent_apply: NULL argument");
  if (!b.who) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_recurrent_apply: cell %d is not EM_CELL_RNN, _GRU or _LSTM", (int)cell);
  if ((unsigned)b.o->direction > EM_DIR_BIDIRECTIONAL || (unsigned)b.o->layout > 1 || !(b.o->clip >= 0))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: direction %d, layout %d, clip %g: direction 0-2, layout 0 or 1, "
                   "clip >= 0 expected", b.who, (int)b.o->direction, b.o->layout, b.o->clip);
  if (b.o->linear_before_reset && cell != EM_CELL_GRU)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: linear_before_reset is a GRU option", b.who);
  if (b.o->input_forget && cell != EM_CELL_LSTM)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: input_forget is an LSTM option", b.who);
  b.G = cell == EM_CELL_LSTM ? 4 : cell == EM_CELL_GRU ? 3 : 1;
  const int D = b.o->direction == EM_DIR_BIDIRECTIONAL ? 2 : 1;
  int64_t I, N;
  em_status s = check_inputs(&b, in, D, &I, &N);
  if (!s) s = parse_acts(&b, D);
  if (s) return s;
  const int lay = b.o->layout;
  em_var x = in->x, h0 = in->initial_h, c0 = in->initial_c;
  const int64_t p102[3] = {1, 0, 2};
  if (lay && ((s = transpose(&b, x, p102, 3, &x)) || (h0 != NO && (s = transpose(&b, h0, p102, 3, &h0))) ||
              (c0 != NO && (s = transpose(&b, c0, p102, 3, &c0)))))
    return s;
  em_var *ys = calloc((size_t)(D * b.T + b.T), sizeof *ys);
  if (!ys) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory", b.who);
  int unrolled = 0; /* directions built step by step (they need the masks) */
  for (int d = 0; d < D; d++) unrolled += !fused_lstm(&b, in, d);
  if (in->sequence_lens != NO && unrolled) {
    b.mask = ys + D * b.T;
    s = make_masks(&b, in->sequence_lens);
  }
  em_var hs[2], cs[2], yd[2];
  for (int d = 0; !s && d < D; d++) {
    int reverse = b.o->direction == EM_DIR_REVERSE || d == 1;
    if ((s = initial_of(&b, h0, d, &hs[d])) || (s = initial_of(&b, c0, d, &cs[d]))) break;
    if ((s = run_direction(&b, d, reverse, x, in, ys + d * b.T, &yd[d], &hs[d], &cs[d]))) break;
    if (yd[d] != NO) continue; /* fused: _lstm_seq gives Y and zeroes an empty sequence's states itself */
    /* A sequence of length 0 ends in zero states, not its initial ones, as
     * onnxruntime's CPU and CUDA kernels give it (mask[0] is lens > 0). */
    if (b.mask && in->initial_h != NO && (s = zero_if_empty(&b, &hs[d]))) break;
    if (b.mask && in->initial_c != NO && (s = zero_if_empty(&b, &cs[d]))) break;
    s = stack(&b, ys + d * b.T, (int)b.T, 0, &yd[d]); /* [T, N, H] */
  }
  em_var y = NO, yh = NO, yc = NO;
  if (!s && cell == EM_CELL_LSTM)
    for (int d = 0; d < D; d++)
      if (cs[d] == NO) s = em_fail(EM_ERR_INTERNAL, "%s: no cell state", b.who); /* T >= 1 makes one */
  if (!s) s = stack(&b, yd, D, 1, &y); /* [T, D, N, H] */
  if (!s) s = stack(&b, hs, D, 0, &yh);
  if (!s && cell == EM_CELL_LSTM) s = stack(&b, cs, D, 0, &yc);
  if (!s && lay) {
    const int64_t p2013[4] = {2, 0, 1, 3};
    s = transpose(&b, y, p2013, 4, &y);
    if (!s) s = transpose(&b, yh, p102, 3, &yh);
    if (!s && yc != NO) s = transpose(&b, yc, p102, 3, &yc);
  }
  free(ys);
  if (s) return s;
  (void)N;
  em_recurrent_outputs res = {.y = y, .y_h = yh, .y_c = yc};
  if ((s = record_block(&b, D, in, &res))) return s;
  *out = res;
  return EM_OK;
}
