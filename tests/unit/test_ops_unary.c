/* Tests of the unary op family (ops/unary.c). Forward values are checked
 * against naive float64 references written here with libm, for every op in
 * f32 and f64 over shapes from a scalar to a parallel-sized vector; special
 * values (signed zeros, infinities, NaN, huge, subnormal); integer variants;
 * gradients by finite differences (ot_gradcheck, f64) away from kinks and
 * domain edges; the boundary conventions of the fused gradient op; that the
 * f32 loops give exactly kernels/em_math.h's bits (the GPU's) whatever the
 * thread count; and the error messages. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_testkit.h"
#include "../../kernels/em_math.h"

/* ------------------------------------------------------------ helpers --- */

#define F(nm, v) {.name = (nm), .type = EM_ATTR_FLOAT, .f = (v)}
#define S(nm, v) {.name = (nm), .type = EM_ATTR_STRING, .s = (v)}
#define I(nm, v) {.name = (nm), .type = EM_ATTR_INT, .i = (v)}

/* The parameters a reference needs (attribute values or their defaults). */
typedef struct tp {
  double alpha, beta, gamma, lo, hi, e;
  int tanh_form;
} tp;

typedef double (*ref_fn)(double x, const tp *p);

static double r_neg(double x, const tp *p) { (void)p; return -x; }
static double r_abs(double x, const tp *p) { (void)p; return fabs(x); }
static double r_sign(double x, const tp *p) { (void)p; return x > 0 ? 1 : x < 0 ? -1 : x; }
static double r_exp(double x, const tp *p) { (void)p; return exp(x); }
static double r_log(double x, const tp *p) { (void)p; return log(x); }
static double r_sqrt(double x, const tp *p) { (void)p; return sqrt(x); }
static double r_rsqrt(double x, const tp *p) { (void)p; return 1.0 / sqrt(x); }
static double r_recip(double x, const tp *p) { (void)p; return 1.0 / x; }
static double r_sigmoid(double x, const tp *p) { (void)p; return 1.0 / (1.0 + exp(-x)); }
static double r_tanh(double x, const tp *p) { (void)p; return tanh(x); }
static double r_relu(double x, const tp *p) { (void)p; return x < 0 ? 0 : x; }
static double r_leaky(double x, const tp *p) { return x < 0 ? p->alpha * x : x; }
static double r_elu(double x, const tp *p) { return x > 0 ? x : p->alpha * expm1(x); }
static double r_selu(double x, const tp *p) { return p->gamma * (x > 0 ? x : p->alpha * expm1(x)); }
static double r_softplus(double x, const tp *p) { (void)p; return x > 30 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double r_softsign(double x, const tp *p) { (void)p; return isinf(x) ? copysign(1, x) : x / (1 + fabs(x)); }
static double r_hsig(double x, const tp *p) { return fmax(0, fmin(1, p->alpha * x + p->beta)); }
static double r_hswish(double x, const tp *p) { (void)p; return x * fmax(0, fmin(1, x / 6 + 0.5)); }
static double r_gelu(double x, const tp *p) {
  /* x/2 (1 + tanh u) with 1 + tanh u = 2/(1 + e^-2u), which does not cancel for u << 0 */
  if (p->tanh_form) return x / (1 + exp(-2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * erfc(-x / sqrt(2)); /* = x (1 + erf(x/sqrt 2))/2 without cancelling */
}
static double r_sin(double x, const tp *p) { (void)p; return sin(x); }
static double r_cos(double x, const tp *p) { (void)p; return cos(x); }
static double r_tan(double x, const tp *p) { (void)p; return tan(x); }
static double r_atan(double x, const tp *p) { (void)p; return atan(x); }
static double r_asinh(double x, const tp *p) { (void)p; return asinh(x); }
static double r_floor(double x, const tp *p) { (void)p; return floor(x); }
static double r_ceil(double x, const tp *p) { (void)p; return ceil(x); }
static double r_round(double x, const tp *p) { (void)p; return nearbyint(x); }
static double r_clip(double x, const tp *p) { return x < p->lo ? p->lo : x > p->hi ? p->hi : x; }
static double r_pow(double x, const tp *p) { return pow(x, p->e); }
static double r_erf(double x, const tp *p) { (void)p; return erf(x); }
static double r_asin(double x, const tp *p) { (void)p; return asin(x); }
static double r_acos(double x, const tp *p) { (void)p; return acos(x); }
static double r_sinh(double x, const tp *p) { (void)p; return sinh(x); }
static double r_cosh(double x, const tp *p) { (void)p; return cosh(x); }
static double r_acosh(double x, const tp *p) { (void)p; return acosh(x); }
static double r_atanh(double x, const tp *p) { (void)p; return atanh(x); }
static double r_log1p(double x, const tp *p) { (void)p; return log1p(x); }
static double r_thr(double x, const tp *p) { return x > p->alpha ? x : 0; }

/* One test case: an op with attributes, its reference, where to sample the
 * forward inputs, and where the gradient check samples (magnitudes in
 * [glo, ghi], random signs when gsym; nudged at least 0.1 away from `kinks`
 * and, with `period`, from offset + every integer). f32 compares with
 * rtol 4e-6 plus atol32 (only where a float-rounded attribute makes
 * alpha*x + beta cancel). zero_grad: the gradient is identically 0. */
typedef struct tcase {
  const char *op;
  ref_fn ref;
  em_attr attrs[3];
  int n_attrs;
  tp p;
  double lo, hi;
  double glo, ghi;
  int gsym;
  double kinks[3];
  int n_kinks;
  int periodic;
  double offset;
  double atol32;
  int zero_grad;
} tcase;

#define NOP {{0}}, 0
#define PDEF {0, 0, 0, -INFINITY, INFINITY, 0, 0}

static const tcase CASES[] = {
  {"neg", r_neg, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"abs", r_abs, NOP, PDEF, -5, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"sign", r_sign, NOP, PDEF, -5, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 1},
  {"exp", r_exp, NOP, PDEF, -10, 10, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"log", r_log, NOP, PDEF, 0.01, 100, 0.2, 5, 0, {0}, 0, 0, 0, 0, 0},
  {"sqrt", r_sqrt, NOP, PDEF, 0, 100, 0.2, 5, 0, {0}, 0, 0, 0, 0, 0},
  {"rsqrt", r_rsqrt, NOP, PDEF, 0.01, 100, 0.2, 5, 0, {0}, 0, 0, 0, 0, 0},
  {"reciprocal", r_recip, NOP, PDEF, -10, 10, 0.3, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"sigmoid", r_sigmoid, NOP, PDEF, -10, 10, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"tanh", r_tanh, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"relu", r_relu, NOP, PDEF, -5, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"leaky_relu", r_leaky, NOP, {0.01, 0, 0, 0, 0, 0, 0}, -5, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"leaky_relu", r_leaky, {F("alpha", 0.2)}, 1, {0.2, 0, 0, 0, 0, 0, 0}, -5, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  /* An INT attribute where a float is expected: the same number (alpha = 2). */
  {"leaky_relu", r_leaky, {I("alpha", 2)}, 1, {2.0, 0, 0, 0, 0, 0, 0}, -5, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"elu", r_elu, NOP, {1.0, 0, 0, 0, 0, 0, 0}, -8, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"elu", r_elu, {F("alpha", 0.5)}, 1, {0.5, 0, 0, 0, 0, 0, 0}, -8, 5, 0.1, 3, 1, {0}, 0, 0, 0, 0, 0},
  {"selu", r_selu, NOP, {1.67326319217681884765625, 0, 1.05070102214813232421875, 0, 0, 0, 0}, -8, 5, 0.1, 3, 1,
   {0}, 0, 0, 0, 0, 0},
  {"selu", r_selu, {F("alpha", 2.0), F("gamma", 0.5)}, 2, {2.0, 0, 0.5, 0, 0, 0, 0}, -8, 5, 0.1, 3, 1, {0}, 0, 0, 0,
   0, 0},
  {"softplus", r_softplus, NOP, PDEF, -20, 20, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"softsign", r_softsign, NOP, PDEF, -10, 10, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"hard_sigmoid", r_hsig, NOP, {0.2, 0.5, 0, 0, 0, 0, 0}, -4, 4, -4, 4, 0, {-2.5, 2.5}, 2, 0, 0, 1e-7, 0},
  {"hard_sigmoid", r_hsig, {F("alpha", 0.5), F("beta", 0.25)}, 2, {0.5, 0.25, 0, 0, 0, 0, 0}, -3, 3, -3, 3, 0,
   {-0.5, 1.5}, 2, 0, 0, 1e-7, 0},
  {"hard_swish", r_hswish, NOP, PDEF, -5, 5, -5, 5, 0, {-3, 3}, 2, 0, 0, 0, 0},
  {"gelu", r_gelu, NOP, PDEF, -6, 5, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"gelu", r_gelu, {S("approximate", "none")}, 1, PDEF, -6, 5, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"gelu", r_gelu, {S("approximate", "tanh")}, 1, {0, 0, 0, 0, 0, 0, 1}, -4, 4, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"sin", r_sin, NOP, PDEF, -10, 10, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"cos", r_cos, NOP, PDEF, -10, 10, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"tan", r_tan, NOP, PDEF, -1.4, 1.4, -1.2, 1.2, 0, {0}, 0, 0, 0, 0, 0},
  {"atan", r_atan, NOP, PDEF, -10, 10, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"asinh", r_asinh, NOP, PDEF, -10, 10, -4, 4, 0, {0}, 0, 0, 0, 0, 0},
  {"floor", r_floor, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 1, 0, 0, 1},
  {"ceil", r_ceil, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 1, 0, 0, 1},
  {"round", r_round, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 1, 0.5, 0, 1},
  {"clip", r_clip, {F("min", -0.5), F("max", 0.75)}, 2, {0, 0, 0, -0.5, 0.75, 0, 0}, -2, 2, -2, 2, 0, {-0.5, 0.75},
   2, 0, 0, 0, 0},
  {"clip", r_clip, {F("min", 0.25)}, 1, {0, 0, 0, 0.25, INFINITY, 0, 0}, -2, 2, -2, 2, 0, {0.25}, 1, 0, 0, 0, 0},
  {"clip", r_clip, NOP, PDEF, -2, 2, -2, 2, 0, {0}, 0, 0, 0, 0, 0},
  {"pow_scalar", r_pow, {F("exponent", 2.5)}, 1, {0, 0, 0, 0, 0, 2.5, 0}, 0.01, 5, 0.2, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"pow_scalar", r_pow, {I("exponent", 3)}, 1, {0, 0, 0, 0, 0, 3, 0}, -3, 3, -2, 2, 0, {0}, 0, 0, 0, 0, 0},
  {"pow_scalar", r_pow, {F("exponent", -1.5)}, 1, {0, 0, 0, 0, 0, -1.5, 0}, 0.1, 5, 0.3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"pow_scalar", r_pow, {F("exponent", 0)}, 1, {0, 0, 0, 0, 0, 0, 0}, -3, 3, -2, 2, 0, {0}, 0, 0, 0, 0, 1},
  {"erf", r_erf, NOP, PDEF, -4, 4, -2, 2, 0, {0}, 0, 0, 0, 0, 0},
  {"asin", r_asin, NOP, PDEF, -0.99, 0.99, -0.8, 0.8, 0, {0}, 0, 0, 0, 0, 0},
  {"acos", r_acos, NOP, PDEF, -0.99, 0.99, -0.8, 0.8, 0, {0}, 0, 0, 0, 0, 0},
  {"sinh", r_sinh, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"cosh", r_cosh, NOP, PDEF, -5, 5, -3, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"acosh", r_acosh, NOP, PDEF, 1, 10, 1.2, 5, 0, {0}, 0, 0, 0, 0, 0},
  {"atanh", r_atanh, NOP, PDEF, -0.99, 0.99, -0.8, 0.8, 0, {0}, 0, 0, 0, 0, 0},
  {"log1p", r_log1p, NOP, PDEF, -0.99, 10, -0.7, 3, 0, {0}, 0, 0, 0, 0, 0},
  {"thresholded_relu", r_thr, NOP, {1.0, 0, 0, 0, 0, 0, 0}, -3, 3, -3, 3, 0, {1.0}, 1, 0, 0, 0, 0},
  {"thresholded_relu", r_thr, {F("alpha", -0.5)}, 1, {-0.5, 0, 0, 0, 0, 0, 0}, -3, 3, -3, 3, 0, {-0.5}, 1, 0, 0, 0,
   0},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Forward shapes: scalar, edge sizes, a large one, 4-d, and one above the
 * 32768-element threshold where the loops go parallel. */
static const struct {
  int nd;
  int64_t d[4];
} SHAPES[] = {{0, {0}}, {1, {1}}, {1, {7}}, {2, {3, 5}}, {1, {1000}}, {4, {2, 3, 4, 5}}, {1, {40000}}};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

static const struct {
  int nd;
  int64_t d[3];
} GSHAPES[] = {{1, {5}}, {2, {3, 4}}, {3, {2, 3, 2}}};
#define N_GSHAPES (sizeof GSHAPES / sizeof GSHAPES[0])

/* The case's parameters as an f32 op sees them: attributes rounded to float. */
static tp params_for(const tcase *c, em_dtype dt) {
  tp p = c->p;
  if (dt == EM_F32) {
    p.alpha = (float)p.alpha, p.beta = (float)p.beta, p.gamma = (float)p.gamma;
    p.lo = (float)p.lo, p.hi = (float)p.hi, p.e = (float)p.e;
  }
  return p;
}

static void describe(const tcase *c, em_dtype dt, int nd, const int64_t *d, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s", c->op);
  for (int a = 0; a < c->n_attrs; a++) {
    const em_attr *t = &c->attrs[a];
    if (t->type == EM_ATTR_STRING) n += (size_t)snprintf(buf + n, cap - n, " %s=%s", t->name, t->s);
    else if (t->type == EM_ATTR_INT) n += (size_t)snprintf(buf + n, cap - n, " %s=%lld", t->name, (long long)t->i);
    else n += (size_t)snprintf(buf + n, cap - n, " %s=%g", t->name, t->f);
  }
  n += (size_t)snprintf(buf + n, cap - n, " %s[", em_dtype_name(dt));
  for (int i = 0; i < nd; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)d[i]);
  snprintf(buf + n, cap - n, "]");
}

/* Runs op on `in` (one input) and returns its values; fails the test on error. */
static double *run_values(const char *op, em_tensor *in, const em_attr *attrs, int n_attrs, const char *what,
                          em_dtype want_dt) {
  em_tensor *out = NULL;
  if (ot_run(op, &in, 1, attrs, n_attrs, &out, 1)) fail_msg("%s: %s", what, em_last_error());
  ot_expect_shape(out, want_dt, em_tensor_ndim(in), em_tensor_shape(in), what);
  double *v = ot_values(out, NULL);
  em_tensor_release(out);
  return v;
}

/* ------------------------------------------------------------ forward --- */

static void check_forward(const tcase *c, em_dtype dt, int nd, const int64_t *d, uint64_t seed) {
  char what[200];
  describe(c, dt, nd, d, what, sizeof what);
  em_tensor *x = ot_rand(dt, nd, d, seed, c->lo, c->hi);
  int64_t n;
  double *xv = ot_values(x, &n); /* the inputs exactly as stored (f32: rounded) */
  double *got = run_values(c->op, x, c->attrs, c->n_attrs, what, dt);
  double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  tp p = params_for(c, dt);
  for (int64_t i = 0; i < n; i++) {
    want[i] = c->ref(xv[i], &p);
    if (dt == EM_F32) want[i] = (float)want[i];
  }
  if (dt == EM_F32) ot_expect_close(got, want, n, c->atol32, 4e-6, what);
  else ot_expect_close(got, want, n, 0, 1e-12, what);
  free(xv), free(got), free(want);
  em_tensor_release(x);
}

static void test_forward(void **s) {
  (void)s;
  for (size_t k = 0; k < N_CASES; k++)
    for (size_t h = 0; h < N_SHAPES; h++) {
      check_forward(&CASES[k], EM_F32, SHAPES[h].nd, SHAPES[h].d, 100 + k * 31 + h);
      check_forward(&CASES[k], EM_F64, SHAPES[h].nd, SHAPES[h].d, 900 + k * 31 + h);
    }
}

/* Every float op gives NaN for NaN (isnan aside; x^0 is 1, as C's pow). */
static void test_nan_propagates(void **s) {
  (void)s;
  int64_t sh[1] = {3};
  double v[3] = {NAN, 1.5, -NAN};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_F64 : EM_F32;
    for (size_t k = 0; k < N_CASES; k++) {
      const tcase *c = &CASES[k];
      char what[200];
      describe(c, dt, 1, sh, what, sizeof what);
      em_tensor *x = ot_tensor(dt, 1, sh, v);
      double *got = run_values(c->op, x, c->attrs, c->n_attrs, what, dt);
      int pow0 = !strcmp(c->op, "pow_scalar") && c->p.e == 0;
      if (pow0 ? !(got[0] == 1 && got[2] == 1) : !(isnan(got[0]) && isnan(got[2])))
        fail_msg("%s: NaN gave %g, %g", what, got[0], got[2]);
      free(got);
      em_tensor_release(x);
    }
  }
}

/* Signed zeros, infinities, NaN, huge and tiny (f32 subnormal) inputs. The
 * f32 reference is the double function of the float input, rounded to float;
 * atol of two f32 subnormal steps covers results that are subnormal. */
static void test_special_values(void **s) {
  (void)s;
  static const double X[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e30, -1e30, 100, -100, 88.5, -88.5,
                             1e-40, -1e-40, 1e-30, 0.5, -0.5, 1, -1, 20, -20};
  enum { NX = sizeof X / sizeof X[0] };
  static const struct {
    const char *op;
    ref_fn ref;
  } OPS[] = {{"exp", r_exp},        {"log", r_log},         {"sqrt", r_sqrt},   {"rsqrt", r_rsqrt},
             {"sigmoid", r_sigmoid}, {"tanh", r_tanh},       {"softplus", r_softplus}, {"reciprocal", r_recip},
             {"log1p", r_log1p},    {"softsign", r_softsign}, {"erf", r_erf},  {"atan", r_atan},
             {"asinh", r_asinh},    {"floor", r_floor},     {"ceil", r_ceil},   {"round", r_round}};
  int64_t sh[1] = {NX};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_F64 : EM_F32;
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
      char what[64];
      snprintf(what, sizeof what, "%s special values %s", OPS[k].op, em_dtype_name(dt));
      em_tensor *x = ot_tensor(dt, 1, sh, X);
      double *xv = ot_values(x, NULL), want[NX];
      double *got = run_values(OPS[k].op, x, NULL, 0, what, dt);
      for (int i = 0; i < NX; i++) want[i] = dt == EM_F32 ? (float)OPS[k].ref(xv[i], NULL) : OPS[k].ref(xv[i], NULL);
      ot_expect_close(got, want, NX, dt == EM_F32 ? 3e-45 : 0, dt == EM_F32 ? 4e-6 : 1e-12, what);
      /* The sign of a zero result matters too (sqrt(-0) = -0, tanh(-0) = -0, floor(-0.5) = -1, ceil(-0.5) = -0). */
      for (int i = 0; i < NX; i++)
        if (want[i] == 0 && got[i] == 0 && signbit(want[i]) != signbit(got[i]))
          fail_msg("%s: element %d (x = %g) gave %g, expected %g", what, i, xv[i], got[i], want[i]);
      free(xv), free(got);
      em_tensor_release(x);
    }
  }
  /* Spot values that must be exact. */
  double e1[4] = {0, -0.0, INFINITY, -INFINITY};
  int64_t s4[1] = {4};
  em_tensor *x = ot_tensor(EM_F32, 1, s4, e1);
  double *v = run_values("log", x, NULL, 0, "log(0, -0, inf, -inf)", EM_F32);
  assert_true(v[0] == -INFINITY && v[1] == -INFINITY && v[2] == INFINITY && isnan(v[3]));
  free(v);
  v = run_values("sigmoid", x, NULL, 0, "sigmoid(0, -0, inf, -inf)", EM_F32);
  assert_true(v[0] == 0.5 && v[1] == 0.5 && v[2] == 1 && v[3] == 0 && !signbit(v[3]));
  free(v);
  v = run_values("softplus", x, NULL, 0, "softplus(0, -0, inf, -inf)", EM_F32);
  assert_true(fabs(v[0] - log(2)) < 1e-7 && v[2] == INFINITY && v[3] == 0);
  free(v);
  v = run_values("exp", x, NULL, 0, "exp(0, -0, inf, -inf)", EM_F32);
  assert_true(v[0] == 1 && v[1] == 1 && v[2] == INFINITY && v[3] == 0);
  free(v);
  em_tensor_release(x);
}

/* Round halves to even; floor and ceil at and around integers and halves. */
static void test_rounding(void **s) {
  (void)s;
  static const double X[] = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -2.5001, 3.0, -3.0, 1e7 + 0.5,
                             8388607.5, -8388607.5, 8388609.0, 1e20, -1e20, 4503599627370495.5, 0.49999999999999994};
  enum { NX = sizeof X / sizeof X[0] };
  int64_t sh[1] = {NX};
  static const char *OPS[3] = {"round", "floor", "ceil"};
  static const ref_fn REF[3] = {r_round, r_floor, r_ceil};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_F64 : EM_F32;
    em_tensor *x = ot_tensor(dt, 1, sh, X);
    double *xv = ot_values(x, NULL);
    for (int o = 0; o < 3; o++) {
      char what[64];
      snprintf(what, sizeof what, "%s %s", OPS[o], em_dtype_name(dt));
      double *got = run_values(OPS[o], x, NULL, 0, what, dt), want[NX];
      for (int i = 0; i < NX; i++) want[i] = REF[o](xv[i], NULL);
      ot_expect_close(got, want, NX, 0, 0, what);
      free(got);
    }
    free(xv);
    em_tensor_release(x);
  }
}

/* --------------------------------------------------------------- ints --- */

static em_tensor *int_tensor(em_dtype dt, const int64_t *v, int64_t n) {
  em_tensor *t = NULL;
  int64_t sh[1] = {n};
  if (dt == EM_I64) {
    if (em_tensor_from_host(em_cpu(), dt, 1, sh, v, sizeof(int64_t) * (size_t)n, &t)) fail_msg("%s", em_last_error());
  } else {
    int32_t w[64];
    for (int64_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
    if (em_tensor_from_host(em_cpu(), dt, 1, sh, w, sizeof(int32_t) * (size_t)n, &t)) fail_msg("%s", em_last_error());
  }
  return t;
}

static int64_t int_at(const em_tensor *t, int64_t i) {
  return em_tensor_dtype(t) == EM_I64 ? ((const int64_t *)em_tensor_data(t))[i] : ((const int32_t *)em_tensor_data(t))[i];
}

/* neg abs sign relu clip on i32 and i64, the extremes included (-MIN wraps to MIN). */
static void test_ints(void **s) {
  (void)s;
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_I64 : EM_I32;
    int64_t mn = t ? INT64_MIN : INT32_MIN, mx = t ? INT64_MAX : INT32_MAX;
    int64_t v[12] = {0, 1, -1, 7, -7, 3, -3, 4, 5, -4, mn, mx};
    em_tensor *x = int_tensor(dt, v, 12);
    const char *ops[] = {"neg", "abs", "sign", "relu", "clip", "clip", "clip"};
    em_attr cl[2] = {F("min", -3), F("max", 4)}, big[2] = {F("min", -1e30), F("max", 1e30)}, hi[1] = {F("max", 0)};
    const em_attr *attrs[] = {NULL, NULL, NULL, NULL, cl, big, hi};
    const int n_attrs[] = {0, 0, 0, 0, 2, 2, 1};
    for (int o = 0; o < 7; o++) {
      char what[64];
      snprintf(what, sizeof what, "%s %s (case %d)", ops[o], em_dtype_name(dt), o);
      em_tensor *out = NULL;
      if (ot_run(ops[o], &x, 1, attrs[o], n_attrs[o], &out, 1)) fail_msg("%s: %s", what, em_last_error());
      int64_t sh[1] = {12};
      ot_expect_shape(out, dt, 1, sh, what);
      for (int i = 0; i < 12; i++) {
        int64_t a = v[i], w;
        switch (o) {
        case 0: w = a == mn ? mn : -a; break;
        case 1: w = a == mn ? mn : (a < 0 ? -a : a); break;
        case 2: w = (a > 0) - (a < 0); break;
        case 3: w = a < 0 ? 0 : a; break;
        case 4: w = a < -3 ? -3 : a > 4 ? 4 : a; break;
        case 5: w = a; break;
        default: w = a > 0 ? 0 : a; break;
        }
        if (int_at(out, i) != w) fail_msg("%s: element %d (x = %lld) is %lld, expected %lld", what, i, (long long)a,
                                          (long long)int_at(out, i), (long long)w);
      }
      em_tensor_release(out);
    }
    em_tensor_release(x);
  }
}

/* ------------------------------------------------------------- isnan/isinf --- */

static void test_isnan_isinf(void **s) {
  (void)s;
  double v[7] = {0, -1.5, INFINITY, -INFINITY, NAN, 3e38, -0.0};
  int64_t sh[1] = {7};
  static const struct {
    const char *op;
    em_attr attrs[2];
    int n_attrs;
    double want[7];
  } C[] = {
    {"isnan", {{0}}, 0, {0, 0, 0, 0, 1, 0, 0}},
    {"isinf", {{0}}, 0, {0, 0, 1, 1, 0, 0, 0}},
    {"isinf", {I("detect_negative", 0)}, 1, {0, 0, 1, 0, 0, 0, 0}},
    {"isinf", {I("detect_positive", 0)}, 1, {0, 0, 0, 1, 0, 0, 0}},
    {"isinf", {I("detect_positive", 0), I("detect_negative", 0)}, 2, {0, 0, 0, 0, 0, 0, 0}},
  };
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_F64 : EM_F32;
    em_tensor *x = ot_tensor(dt, 1, sh, v);
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
      char what[64];
      snprintf(what, sizeof what, "%s %s (case %zu)", C[k].op, em_dtype_name(dt), k);
      double *got = run_values(C[k].op, x, C[k].attrs, C[k].n_attrs, what, EM_BOOL);
      ot_expect_close(got, C[k].want, 7, 0, 0, what);
      free(got);
    }
    em_tensor_release(x);
  }
}

/* ---------------------------------------------------------- gradients --- */

/* Gradient-check inputs: magnitudes in [glo, ghi] (random signs when gsym),
 * at least 0.1 away from the case's kinks. */
static em_tensor *grad_input(const tcase *c, int nd, const int64_t *d, uint64_t seed) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  double v[64];
  for (int64_t i = 0; i < n; i++) {
    double x = ot_uniform(&seed, c->glo, c->ghi);
    if (c->gsym && ot_uniform(&seed, 0, 1) < 0.5) x = -x;
    for (int k = 0; k < c->n_kinks; k++)
      if (fabs(x - c->kinks[k]) < 0.1) x = c->kinks[k] + (x < c->kinks[k] ? -0.15 : 0.15);
    if (c->periodic) {
      double r = x - c->offset - nearbyint(x - c->offset);
      if (fabs(r) < 0.1) x += 0.2;
    }
    v[i] = x;
  }
  return ot_tensor(EM_F64, nd, d, v);
}

static void test_gradients(void **s) {
  (void)s;
  for (size_t k = 0; k < N_CASES; k++)
    for (size_t h = 0; h < N_GSHAPES; h++) {
      em_tensor *x = grad_input(&CASES[k], GSHAPES[h].nd, GSHAPES[h].d, 7000 + k * 13 + h);
      ot_gradcheck(CASES[k].op, &x, 1, CASES[k].attrs, CASES[k].n_attrs, 1, 0, 1e-6);
      em_tensor_release(x);
    }
}

/* The analytic gradient itself (not only its agreement with the numeric
 * one): zero where the op is flat; nonzero elsewhere. Catches a backward
 * that returns zeros and a numeric check too lenient to notice. */
static void test_zero_gradients(void **s) {
  (void)s;
  int64_t sh[1] = {6};
  double v[6] = {-2.3, -1.7, -0.2, 0.3, 1.2, 2.6};
  for (size_t k = 0; k < N_CASES; k++) {
    const tcase *c = &CASES[k];
    if (!c->zero_grad) continue;
    em_graph *g;
    assert_int_equal(em_graph_create(&g), EM_OK);
    em_var x, y, loss, dx;
    assert_int_equal(em_input(g, "x", EM_F64, 1, sh, &x), EM_OK);
    if (em_apply(g, c->op, &x, 1, c->attrs, c->n_attrs, &y, 1)) fail_msg("%s: %s", c->op, em_last_error());
    em_tensor *w = ot_rand(EM_F64, 1, sh, 3, 0.5, 1.5);
    em_var wv, yw[2];
    assert_int_equal(em_constant(g, w, &wv), EM_OK);
    yw[0] = y, yw[1] = wv;
    assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
    if (em_gradients(g, loss, &x, 1, &dx)) fail_msg("%s: %s", c->op, em_last_error());
    em_exec *e;
    assert_int_equal(em_exec_create(g, &dx, 1, em_cpu(), &e), EM_OK);
    em_tensor *xt = ot_tensor(EM_F64, 1, sh, v), *gt = NULL;
    em_feed feed = {x, xt};
    if (em_exec_run(e, &feed, 1, &gt)) fail_msg("%s: %s", c->op, em_last_error());
    double *gv = ot_values(gt, NULL), zero[6] = {0};
    ot_expect_shape(gt, EM_F64, 1, sh, c->op);
    ot_expect_close(gv, zero, 6, 0, 0, c->op);
    free(gv);
    em_tensor_release(gt), em_tensor_release(xt), em_tensor_release(w);
    em_exec_free(e);
    em_graph_free(g);
  }
}

/* _unary_grad (x, y, dy) at the points the gradient check must avoid: the
 * conventions chosen at kinks and boundaries, in f32 and f64. */
static void test_grad_conventions(void **s) {
  (void)s;
  static const struct {
    const char *fn;
    em_attr attrs[3];
    int n_attrs;
    double x[4];
    double want[4]; /* dx for dy = 2 */
  } C[] = {
    /* clip: 1 on [min, max] including both ends (PyTorch's clamp), 0 outside */
    {"clip", {S("fn", "clip"), F("min", -1), F("max", 2)}, 3, {-1, 2, -1.0001, 2.0001}, {2, 2, 0, 0}},
    {"relu", {S("fn", "relu")}, 1, {0, -0.0, 1e-30, -1e-30}, {0, 0, 2, 0}},
    {"abs", {S("fn", "abs")}, 1, {0, -0.0, 3, -3}, {0, 0, 2, -2}},
    {"leaky_relu", {S("fn", "leaky_relu"), F("alpha", 0.25)}, 2, {0, 1, -1, -0.0}, {0.5, 2, 0.5, 0.5}},
    /* hard_sigmoid: strictly inside only */
    {"hard_sigmoid", {S("fn", "hard_sigmoid")}, 1, {-2.5, 2.5, 0, 3}, {0, 0, 0.4, 0}},
    /* hard_swish: PyTorch's: 0 below -3, x/3 + 1/2 on [-3, 3], 1 above */
    {"hard_swish", {S("fn", "hard_swish")}, 1, {-3, 3, -3.5, 3.5}, {-1, 3, 0, 2}},
    {"thresholded_relu", {S("fn", "thresholded_relu")}, 1, {1, 1.5, 0.5, -2}, {0, 2, 0, 0}},
    /* x^0: gradient 0 everywhere, 0 included */
    {"pow_scalar", {S("fn", "pow_scalar"), F("exponent", 0)}, 2, {0, 1, -2, 5}, {0, 0, 0, 0}},
    {"pow_scalar", {S("fn", "pow_scalar"), F("exponent", 2)}, 2, {0, 1, -2, 5}, {0, 4, -8, 20}},
    {"elu", {S("fn", "elu")}, 1, {0, 1, -1e-300, 2}, {2, 2, 2, 2}},
  };
  int64_t sh[1] = {4};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_F64 : EM_F32;
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
      char what[80];
      snprintf(what, sizeof what, "_unary_grad fn=%s %s (case %zu)", C[k].fn, em_dtype_name(dt), k);
      em_tensor *x = ot_tensor(dt, 1, sh, C[k].x), *y = NULL;
      /* y from the forward op itself (elu's gradient reads it) */
      if (ot_run(C[k].fn, &x, 1, C[k].attrs + 1, C[k].n_attrs - 1, &y, 1)) fail_msg("%s: %s", what, em_last_error());
      double two[4] = {2, 2, 2, 2};
      em_tensor *dy = ot_tensor(dt, 1, sh, two), *in[3] = {x, y, dy}, *out = NULL;
      if (ot_run("_unary_grad", in, 3, C[k].attrs, C[k].n_attrs, &out, 1)) fail_msg("%s: %s", what, em_last_error());
      ot_expect_shape(out, dt, 1, sh, what);
      double *got = ot_values(out, NULL);
      ot_expect_close(got, C[k].want, 4, 0, 1e-6, what);
      free(got);
      em_tensor_release(x), em_tensor_release(y), em_tensor_release(dy), em_tensor_release(out);
    }
  }
}

/* The f32 gradients against the f64 ones (the f64 ones are what the
 * gradient checks verified), through em_gradients on every case. */
static void test_grad_f32(void **s) {
  (void)s;
  int64_t sh[1] = {64};
  for (size_t k = 0; k < N_CASES; k++) {
    const tcase *c = &CASES[k];
    double *res[2];
    em_tensor *x64 = grad_input(c, 1, sh, 4242 + k);
    double *xv = ot_values(x64, NULL);
    for (int t = 0; t < 2; t++) {
      em_dtype dt = t ? EM_F64 : EM_F32;
      em_graph *g;
      assert_int_equal(em_graph_create(&g), EM_OK);
      em_var x, y, loss, dx;
      assert_int_equal(em_input(g, "x", dt, 1, sh, &x), EM_OK);
      if (em_apply(g, c->op, &x, 1, c->attrs, c->n_attrs, &y, 1)) fail_msg("%s: %s", c->op, em_last_error());
      em_var yw[2] = {y, -1};
      em_tensor *w = ot_rand(dt, 1, sh, 5, 0.5, 1.5);
      assert_int_equal(em_constant(g, w, &yw[1]), EM_OK);
      assert_int_equal(em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &loss, 1), EM_OK);
      if (em_gradients(g, loss, &x, 1, &dx)) fail_msg("%s: %s", c->op, em_last_error());
      em_exec *e;
      assert_int_equal(em_exec_create(g, &dx, 1, em_cpu(), &e), EM_OK);
      /* the same inputs in both dtypes: the f64 run sees the f32-rounded values */
      double xr[64];
      for (int i = 0; i < 64; i++) xr[i] = (float)xv[i];
      em_tensor *xt = ot_tensor(dt, 1, sh, xr), *gt = NULL;
      em_feed feed = {x, xt};
      if (em_exec_run(e, &feed, 1, &gt)) fail_msg("%s %s: %s", c->op, em_dtype_name(dt), em_last_error());
      ot_expect_shape(gt, dt, 1, sh, c->op);
      res[t] = ot_values(gt, NULL);
      em_tensor_release(gt), em_tensor_release(xt), em_tensor_release(w);
      em_exec_free(e);
      em_graph_free(g);
    }
    char what[200];
    describe(c, EM_F32, 1, sh, what, sizeof what);
    strncat(what, " gradient vs f64", sizeof what - strlen(what) - 1);
    ot_expect_close(res[0], res[1], 64, 1e-6, 2e-5, what);
    free(res[0]), free(res[1]), free(xv);
    em_tensor_release(x64);
  }
}

/* --------------------------------------------- portable bits, threads --- */

/* The f32 loops (vectorised, parallel above 32768 elements) give exactly the
 * bits of kernels/em_math.h's scalar functions, which the GPU kernels share,
 * over wide input ranges, whatever the thread count. */
static void test_portable_bits(void **s) {
  (void)s;
  static const struct {
    const char *op;
    float (*fn)(float);
    double lo, hi;
  } C[] = {{"exp", em_expf, -110, 90},      {"log", em_logf, -1, 1e6},       {"sqrt", em_sqrtf, -1, 1e6},
           {"rsqrt", em_rsqrtf, -1, 1e6},   {"sigmoid", em_sigmoidf, -120, 120}, {"tanh", em_tanhf, -12, 12},
           {"softplus", em_softplusf, -120, 120}, {"erf", em_erff, -5, 5},  {"sin", em_sinf, -1e5, 1e5},
           {"cos", em_cosf, -1e5, 1e5},     {"tan", em_tanf, -1e3, 1e3},     {"atan", em_atanf, -1e3, 1e3},
           {"asinh", em_asinhf, -1e4, 1e4}, {"log1p", em_log1pf, -1.5, 1e4}};
  int64_t sh[1] = {70001};
  int saved = em_get_num_threads();
  for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
    em_tensor *x = ot_rand(EM_F32, 1, sh, 77 + k, C[k].lo, C[k].hi);
    const float *xv = em_tensor_data(x);
    em_tensor *r[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++) {
      assert_int_equal(em_set_num_threads(t ? 4 : 1), EM_OK);
      if (ot_run(C[k].op, &x, 1, NULL, 0, &r[t], 1)) fail_msg("%s: %s", C[k].op, em_last_error());
    }
    const float *y0 = em_tensor_data(r[0]);
    for (int64_t i = 0; i < sh[0]; i++) {
      float want = C[k].fn(xv[i]);
      if (memcmp(&want, &y0[i], sizeof want))
        fail_msg("%s: element %lld (x = %a) is %a, em_math.h gives %a", C[k].op, (long long)i, xv[i], y0[i], want);
    }
    if (memcmp(y0, em_tensor_data(r[1]), sizeof(float) * (size_t)sh[0]))
      fail_msg("%s: results differ between 1 and 4 threads", C[k].op);
    em_tensor_release(r[0]), em_tensor_release(r[1]), em_tensor_release(x);
  }
  /* sigmoid's and tanh's loops are em_sigmoidf and em_tanhf with selects for branches
   * (ops/select_math.h): the special values and the edges of their branches (sigmoid:
   * 104, e^-|x| below 2^-150; 87.3, subnormal e^-|x|; tanh: 2^-12, 0.55, 9.02) */
  {
    static const unsigned int bits[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                                        0x7f800001u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x42d00000u, 0xc2d00000u,
                                        0x42d00001u, 0xc2d00001u, 0x42cfffffu, 0xc2cfffffu, 0x42ae9999u, 0xc2ae9999u,
                                        0x42b17218u, 0xc2b17218u, 0x42fc0000u, 0xc2fc0000u, 0x7f7fffffu, 0xff7fffffu,
                                        0x33800000u, 0xb3800000u, 0x3f800000u, 0xbf800000u, 0x397fffffu, 0x39800000u,
                                        0x39800001u, 0xb9800000u, 0x3f0cccccu, 0x3f0ccccdu, 0x3f0cccceu, 0xbf0ccccdu,
                                        0x411051ebu, 0x411051ecu, 0x411051edu, 0xc11051ecu};
    enum { NB = sizeof bits / sizeof bits[0] };
    static const struct {
      const char *op;
      float (*fn)(float);
    } F[] = {{"sigmoid", em_sigmoidf}, {"tanh", em_tanhf}};
    int64_t shb[1] = {NB};
    float xb[NB];
    memcpy(xb, bits, sizeof xb);
    for (size_t k = 0; k < sizeof F / sizeof F[0]; k++) {
      em_tensor *xt = NULL, *yt = NULL;
      assert_int_equal(em_tensor_from_host(em_cpu(), EM_F32, 1, shb, xb, sizeof xb, &xt), EM_OK);
      if (ot_run(F[k].op, &xt, 1, NULL, 0, &yt, 1)) fail_msg("%s: %s", F[k].op, em_last_error());
      for (int i = 0; i < NB; i++) {
        float want = F[k].fn(xb[i]), got = ((const float *)em_tensor_data(yt))[i];
        if (memcmp(&want, &got, sizeof want)) fail_msg("%s(%a) is %a, em_math.h gives %a", F[k].op, xb[i], got, want);
      }
      em_tensor_release(yt), em_tensor_release(xt);
    }
  }
  /* pow_scalar goes through em_powf with the exponent as a float */
  em_tensor *x = ot_rand(EM_F32, 1, sh, 5, -4, 4);
  em_attr e[1] = {F("exponent", 3.0)};
  em_tensor *r = NULL;
  if (ot_run("pow_scalar", &x, 1, e, 1, &r, 1)) fail_msg("pow_scalar: %s", em_last_error());
  for (int64_t i = 0; i < sh[0]; i++) {
    float want = em_powf(((const float *)em_tensor_data(x))[i], 3.0f);
    if (memcmp(&want, (const float *)em_tensor_data(r) + i, sizeof want)) fail_msg("pow_scalar: element %lld", (long long)i);
  }
  em_tensor_release(r), em_tensor_release(x);
  em_set_num_threads(saved);
}

/* Every op (and its gradient) gives the same bits on 1 and 3 threads. */
static void test_thread_independence(void **s) {
  (void)s;
  int64_t sh[1] = {50001};
  int saved = em_get_num_threads();
  for (size_t k = 0; k < N_CASES; k++) {
    const tcase *c = &CASES[k];
    for (int t = 0; t < 2; t++) {
      em_dtype dt = t ? EM_F64 : EM_F32;
      em_tensor *x = ot_rand(dt, 1, sh, 11 + k, c->lo, c->hi), *r[2] = {NULL, NULL};
      for (int th = 0; th < 2; th++) {
        assert_int_equal(em_set_num_threads(th ? 3 : 1), EM_OK);
        if (ot_run(c->op, &x, 1, c->attrs, c->n_attrs, &r[th], 1)) fail_msg("%s: %s", c->op, em_last_error());
      }
      if (memcmp(em_tensor_data(r[0]), em_tensor_data(r[1]), em_dtype_size(dt) * (size_t)sh[0]))
        fail_msg("%s %s: results differ between 1 and 3 threads", c->op, em_dtype_name(dt));
      em_tensor_release(r[0]), em_tensor_release(r[1]), em_tensor_release(x);
    }
  }
  em_set_num_threads(saved);
}

/* ------------------------------------------------------ shapes, errors --- */

static void test_dynamic_axis_and_empty(void **s) {
  (void)s;
  em_graph *g;
  assert_int_equal(em_graph_create(&g), EM_OK);
  int64_t a[2] = {-1, 4};
  em_var x, y, z;
  assert_int_equal(em_input(g, "x", EM_F32, 2, a, &x), EM_OK);
  em_attr t[1] = {S("approximate", "tanh")};
  assert_int_equal(em_apply(g, "gelu", &x, 1, t, 1, &y, 1), EM_OK);
  assert_int_equal(em_apply(g, "isnan", &x, 1, NULL, 0, &z, 1), EM_OK);
  em_dtype dt;
  int nd;
  int64_t sh[EM_MAX_DIMS];
  assert_int_equal(em_var_info(g, y, &dt, &nd, sh), EM_OK);
  assert_true(dt == EM_F32 && nd == 2 && sh[0] == -1 && sh[1] == 4);
  assert_int_equal(em_var_info(g, z, &dt, &nd, sh), EM_OK);
  assert_true(dt == EM_BOOL && nd == 2 && sh[0] == -1 && sh[1] == 4);
  em_graph_free(g);

  int64_t e[2] = {0, 3};
  em_tensor *in = ot_tensor(EM_F64, 2, e, NULL), *out = NULL;
  if (ot_run("exp", &in, 1, NULL, 0, &out, 1)) fail_msg("exp of an empty tensor: %s", em_last_error());
  ot_expect_shape(out, EM_F64, 2, e, "exp of an empty tensor");
  em_tensor_release(out), em_tensor_release(in);
}

static void expect_fails1(const char *op, em_dtype dt, int nd, const int64_t *d, const em_attr *attrs, int n_attrs,
                          const char *n1, const char *n2) {
  const int64_t *sh[1] = {d};
  int nds[1] = {nd};
  ot_expect_apply_fails(op, 1, &dt, nds, sh, attrs, n_attrs, 1, n1, n2);
}

static void test_errors(void **s) {
  (void)s;
  const int64_t s3[1] = {3}, s22[2] = {2, 2}, s4[1] = {4}, s2[1] = {2};
  /* dtypes */
  expect_fails1("exp", EM_BOOL, 1, s3, NULL, 0, "bool[3]", "expected f32 or f64");
  expect_fails1("exp", EM_U8, 2, s22, NULL, 0, "u8[2,2]", "u8 is not supported");
  expect_fails1("sqrt", EM_I64, 1, s3, NULL, 0, "i64[3]", "f32 or f64");
  expect_fails1("floor", EM_I32, 1, s4, NULL, 0, "i32[4]", "f32 or f64");
  expect_fails1("neg", EM_U8, 1, s4, NULL, 0, "u8[4]", "f32, f64, i32 or i64");
  expect_fails1("relu", EM_F16, 1, s4, NULL, 0, "f16[4]", "not supported");
  expect_fails1("isnan", EM_I32, 1, s4, NULL, 0, "i32[4]", NULL);
  /* attributes */
  em_attr fast[1] = {S("approximate", "fast")}, num[1] = {F("approximate", 1)};
  expect_fails1("gelu", EM_F32, 1, s3, fast, 1, "\"fast\"", "f32[3]");
  expect_fails1("gelu", EM_F32, 1, s3, num, 1, "approximate", "string");
  em_attr minmax[2] = {F("min", 2), F("max", 1)};
  expect_fails1("clip", EM_F32, 1, s3, minmax, 2, "min = 2", "max = 1");
  em_attr half[1] = {F("min", 0.5)};
  expect_fails1("clip", EM_I32, 1, s3, half, 1, "min = 0.5", "i32");
  em_attr nanmin[1] = {F("min", NAN)};
  expect_fails1("clip", EM_F64, 1, s3, nanmin, 1, "'min'", "NaN");
  expect_fails1("pow_scalar", EM_F32, 1, s2, NULL, 0, "exponent", "f32[2]");
  em_attr infe[1] = {F("exponent", INFINITY)};
  expect_fails1("pow_scalar", EM_F32, 1, s2, infe, 1, "exponent", "finite");
  em_attr salpha[1] = {S("alpha", "big")};
  expect_fails1("leaky_relu", EM_F32, 1, s3, salpha, 1, "'alpha'", "float");
  em_attr nalpha[1] = {F("alpha", NAN)};
  expect_fails1("elu", EM_F64, 1, s3, nalpha, 1, "'alpha'", "f64[3]");
  em_attr typo[1] = {F("alpah", 1)};
  expect_fails1("elu", EM_F32, 1, s3, typo, 1, "'alpah'", "alpha");
  em_attr stray[1] = {F("alpha", 1)};
  expect_fails1("exp", EM_F32, 1, s3, stray, 1, "no attribute 'alpha'", "it takes: none");
  em_attr twice[2] = {F("gamma", 1), F("gamma", 2)};
  expect_fails1("selu", EM_F32, 1, s3, twice, 2, "'gamma'", "twice");
  em_attr det[1] = {I("detect_negative", 2)};
  expect_fails1("isinf", EM_F32, 1, s3, det, 1, "detect_negative", "0 or 1");
  /* _unary_grad */
  const int64_t *sh3[3] = {s3, s3, s3}, *shm[3] = {s3, s3, s4};
  const int nd3[3] = {1, 1, 1};
  const em_dtype fff[3] = {EM_F32, EM_F32, EM_F32}, ffd[3] = {EM_F32, EM_F32, EM_F64};
  em_attr fn_floor[1] = {S("fn", "floor")}, fn_nope[1] = {S("fn", "nope")}, fn_exp[1] = {S("fn", "exp")};
  em_attr fn_clip_bad[3] = {S("fn", "clip"), F("min", 1), F("max", 0)};
  ot_expect_apply_fails("_unary_grad", 3, fff, nd3, sh3, NULL, 0, 1, "'fn'", "required");
  ot_expect_apply_fails("_unary_grad", 3, fff, nd3, sh3, fn_floor, 1, 1, "'floor'", NULL);
  ot_expect_apply_fails("_unary_grad", 3, fff, nd3, sh3, fn_nope, 1, 1, "'nope'", NULL);
  ot_expect_apply_fails("_unary_grad", 3, fff, nd3, shm, fn_exp, 1, 1, "f32[4]", "shape");
  ot_expect_apply_fails("_unary_grad", 3, ffd, nd3, sh3, fn_exp, 1, 1, "f64[3]", "dtype");
  ot_expect_apply_fails("_unary_grad", 3, fff, nd3, sh3, fn_clip_bad, 3, 1, "min = 1", "max = 0");
}

/* leaky_relu takes only alpha: the misspelt "alpah" is refused by name, not ignored; the message names the op, the
 * bad name and the names it takes. */
static void test_unary_unknown_attribute(void **state) {
  (void)state;
  const int64_t s0[1] = {3};
  const int64_t *shapes[1] = {s0};
  const em_dtype dtypes[1] = {EM_F32};
  const int ndims[1] = {1};
  const em_attr at[1] = {{.name = "alpah", .type = EM_ATTR_FLOAT, .f = 0.1}};
  ot_expect_apply_fails("leaky_relu", 1, dtypes, ndims, shapes, at, 1, 1, "no attribute 'alpah'",
                        "it takes: alpha");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_forward),          cmocka_unit_test(test_nan_propagates),
    cmocka_unit_test(test_special_values),   cmocka_unit_test(test_rounding),
    cmocka_unit_test(test_ints),             cmocka_unit_test(test_isnan_isinf),
    cmocka_unit_test(test_gradients),        cmocka_unit_test(test_zero_gradients),
    cmocka_unit_test(test_grad_conventions), cmocka_unit_test(test_grad_f32),
    cmocka_unit_test(test_portable_bits),    cmocka_unit_test(test_thread_independence),
    cmocka_unit_test(test_dynamic_axis_and_empty), cmocka_unit_test(test_errors),
    cmocka_unit_test(test_unary_unknown_attribute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
