/* Unary op family: elementwise functions of one input; the output has the
 * input's shape (and dtype, except isnan/isinf: bool). Float ops take f32 and
 * f64; "ints" below means i32 and i64 are accepted too. Every op takes
 * exactly the attributes listed (an unknown or repeated attribute is an
 * error); float attributes may be given as ints.
 *
 *   neg abs sign relu           f32 f64, ints. Integer neg/abs wrap (two's complement: -INT_MIN
 *                               is INT_MIN), so no input traps. sign(0) = 0, NaN stays NaN;
 *                               relu(x) = x < 0 ? 0 : x (NaN propagates). Gradients: abs: dy*sign(x)
 *                               (0 at 0); relu: dy where x > 0 (0 at 0, as PyTorch).
 *   exp log sqrt rsqrt reciprocal sigmoid tanh softplus softsign sin cos tan atan asinh
 *   erf asin acos sinh cosh acosh atanh log1p
 *                               f32 f64. softplus(x) = log(1 + e^x); softsign(x) = x / (1 + |x|).
 *   leaky_relu  alpha (0.01)    x < 0 ? alpha*x : x. Gradient alpha*dy where x <= 0.
 *   elu         alpha (1.0)     x > 0 ? x : alpha*(e^x - 1). Gradient dy*(y + alpha) where x <= 0.
 *   selu        alpha (1.67326319217681884765625), gamma (1.05070102214813232421875) (ONNX's):
 *                               gamma * (x > 0 ? x : alpha*(e^x - 1)).
 *   hard_sigmoid alpha (0.2), beta (0.5)
 *                               max(0, min(1, alpha*x + beta)). Gradient alpha*dy strictly inside
 *                               0 < alpha*x + beta < 1, else 0.
 *   hard_swish                  x * max(0, min(1, x/6 + 1/2)) (ONNX HardSwish). Gradient as PyTorch:
 *                               0 for x < -3, dy*(x/3 + 1/2) for -3 <= x <= 3, dy above.
 *   thresholded_relu alpha (1.0) x > alpha ? x : 0 (NaN propagates). Gradient dy where x > alpha.
 *   gelu        approximate ("none" | "tanh", default "none")
 *                               none: x * Phi(x) = x/2 * erfc(-x/sqrt 2);
 *                               tanh: x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 *   floor ceil round            f32 f64. round: half to even (ONNX Round). Zero gradient.
 *   clip        min (-inf), max (+inf)
 *                               f32 f64, ints. min(max(x, min), max); NaN propagates; min <= max
 *                               required (neither NaN). On ints the bounds must be integers (or
 *                               infinite). Gradient dy where min <= x <= max (boundaries included,
 *                               as PyTorch's clamp), 0 outside.
 *   pow_scalar  exponent (required, finite)
 *                               x^exponent with C's pow special cases (f32 uses the exponent rounded to
 *                               f32). Gradient dy*e*x^(e-1); 0 when e == 0 (as PyTorch).
 *   isnan                       f32 f64 -> bool. No gradient flows.
 *   isinf       detect_negative (1), detect_positive (1) (0 or 1) -> bool.
 *
 * Internal: _unary_grad (x, y, dy) attrs fn (the forward op's name) plus the
 * forward's own attributes: dx = dy * f'(x) in one pass (y = f(x) is used
 * where it is cheaper: exp, sigmoid, tanh, sqrt, rsqrt, reciprocal, elu,
 * selu, tan). No backward of its own. sign/floor/ceil/round get zeros_like;
 * integer inputs receive no gradient.
 *
 * Numerics: the per-element arithmetic is kernels/unary_math.h (em_un_*,
 * em_ung_*) and kernels/em_math.h (em_expf, em_geluf, ...), the same source
 * the GPU kernels (kernels/unary.cu, launched by ops/unary_gpu.c) compile, and
 * the per-op constants come from one function (em_unary_launch_of), so the
 * CPU and every GPU give the same bits, in both numeric modes (no op sums).
 * f32: every op, forward and gradient; asin acos sinh cosh acosh atanh and
 * exact gelu compute in binary64 from em_math.h's pieces and round once
 * (about 0.5 ulp). f64: the exact-arithmetic ops (neg abs sign relu
 * leaky_relu clip floor ceil round reciprocal sqrt rsqrt softsign
 * hard_sigmoid thresholded_relu hard_swish isnan isinf, and the gradients
 * that need only y or a rational function of x) likewise; the f64
 * transcendentals use libm and run on the CPU only (their gpu member hands
 * them back with EM_ERR_USE_CPU). Integer ops are exact everywhere.
 *
 * Speed: one flat loop per op and dtype, split among threads by output
 * element (`parallel for simd`), so results never depend on the thread count.
 * GCC will not if-convert floating-point selects under its default
 * -ftrapping-math, which leaves every loop with a branch (em_expf's range
 * checks, relu's select) scalar; this file is compiled with
 * -fno-trapping-math (pragma below). That only lets the compiler ignore FP
 * exception flags, which Ember never reads; the values are the same IEEE
 * operations (no reassociation, no contraction), and the tests check the
 * vector loops against scalar em_math.h bit for bit. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "op.h"
#include "select_math.h"
#include "unary_gpu.h"
#include "../kernels/unary_math.h"

/* ================================================================ table === */

#define DT_F ((1u << EM_F32) | (1u << EM_F64))
#define DT_FI (DT_F | (1u << EM_I32) | (1u << EM_I64))

/* Attributes an op accepts. */
enum {
  AT_ALPHA = 1 << 0,
  AT_BETA = 1 << 1,
  AT_GAMMA = 1 << 2,
  AT_MIN = 1 << 3,
  AT_MAX = 1 << 4,
  AT_EXPONENT = 1 << 5,
  AT_APPROX = 1 << 6,
  AT_DETECT = 1 << 7,
};

/* How the gradient is formed. */
enum { G_FUSED, G_ZERO, G_NONE };

#define SELU_ALPHA 1.67326319217681884765625
#define SELU_GAMMA 1.05070102214813232421875

/* X(ID, name, dtypes, attrs, grad, alpha, beta, gamma, doc): alpha, beta and
 * gamma are the defaults of the attributes of those names. */
#define UNARY_OPS(X)                                                                                               \
  X(NEG, "neg", DT_FI, 0, G_FUSED, 0, 0, 0, "y = -x; f32 f64 i32 i64 (ints wrap)")                                 \
  X(ABS, "abs", DT_FI, 0, G_FUSED, 0, 0, 0, "y = |x|; f32 f64 i32 i64 (ints wrap); gradient 0 at 0")               \
  X(SIGN, "sign", DT_FI, 0, G_ZERO, 0, 0, 0, "y = -1, 0 or 1 (NaN stays NaN); f32 f64 i32 i64; zero gradient")    \
  X(EXP, "exp", DT_F, 0, G_FUSED, 0, 0, 0, "y = e^x; f32 f64")                                                     \
  X(LOG, "log", DT_F, 0, G_FUSED, 0, 0, 0, "natural logarithm; f32 f64")                                           \
  X(SQRT, "sqrt", DT_F, 0, G_FUSED, 0, 0, 0, "square root; f32 f64")                                               \
  X(RSQRT, "rsqrt", DT_F, 0, G_FUSED, 0, 0, 0, "y = 1/sqrt(x); f32 f64")                                           \
  X(RECIPROCAL, "reciprocal", DT_F, 0, G_FUSED, 0, 0, 0, "y = 1/x; f32 f64")                                       \
  X(SIGMOID, "sigmoid", DT_F, 0, G_FUSED, 0, 0, 0, "y = 1/(1+e^-x); f32 f64")                                      \
  X(TANH, "tanh", DT_F, 0, G_FUSED, 0, 0, 0, "hyperbolic tangent; f32 f64")                                        \
  X(RELU, "relu", DT_FI, 0, G_FUSED, 0, 0, 0, "y = max(x, 0) (NaN propagates); f32 f64 i32 i64")                    \
  X(LEAKY_RELU, "leaky_relu", DT_F, AT_ALPHA, G_FUSED, 0.01, 0, 0,                                                 \
    "y = x < 0 ? alpha*x : x; attr alpha (float, 0.01); f32 f64")                                                  \
  X(ELU, "elu", DT_F, AT_ALPHA, G_FUSED, 1.0, 0, 0, "y = x > 0 ? x : alpha*(e^x-1); attr alpha (float, 1.0); f32 f64") \
  X(SELU, "selu", DT_F, AT_ALPHA | AT_GAMMA, G_FUSED, SELU_ALPHA, 0, SELU_GAMMA,                                  \
    "y = gamma*(x > 0 ? x : alpha*(e^x-1)); attrs alpha, gamma (floats, ONNX defaults); f32 f64")                 \
  X(SOFTPLUS, "softplus", DT_F, 0, G_FUSED, 0, 0, 0, "y = log(1+e^x); f32 f64")                                    \
  X(SOFTSIGN, "softsign", DT_F, 0, G_FUSED, 0, 0, 0, "y = x/(1+|x|); f32 f64")                                     \
  X(HARD_SIGMOID, "hard_sigmoid", DT_F, AT_ALPHA | AT_BETA, G_FUSED, 0.2, 0.5, 0,                                  \
    "y = max(0, min(1, alpha*x+beta)); attrs alpha (0.2), beta (0.5); f32 f64")                                    \
  X(GELU, "gelu", DT_F, AT_APPROX, G_FUSED, 0, 0, 0,                                                               \
    "y = x*Phi(x); attr approximate (string: \"none\" exact erf form, default, or \"tanh\"); f32 f64")              \
  X(SIN, "sin", DT_F, 0, G_FUSED, 0, 0, 0, "sine; f32 f64")                                                        \
  X(COS, "cos", DT_F, 0, G_FUSED, 0, 0, 0, "cosine; f32 f64")                                                      \
  X(TAN, "tan", DT_F, 0, G_FUSED, 0, 0, 0, "tangent; f32 f64")                                                     \
  X(ATAN, "atan", DT_F, 0, G_FUSED, 0, 0, 0, "arc tangent; f32 f64")                                               \
  X(ASINH, "asinh", DT_F, 0, G_FUSED, 0, 0, 0, "inverse hyperbolic sine; f32 f64")                                 \
  X(FLOOR, "floor", DT_F, 0, G_ZERO, 0, 0, 0, "largest integer <= x; f32 f64; zero gradient")                      \
  X(CEIL, "ceil", DT_F, 0, G_ZERO, 0, 0, 0, "smallest integer >= x; f32 f64; zero gradient")                       \
  X(ROUND, "round", DT_F, 0, G_ZERO, 0, 0, 0, "nearest integer, halves to even (ONNX Round); f32 f64; zero gradient") \
  X(CLIP, "clip", DT_FI, AT_MIN | AT_MAX, G_FUSED, 0, 0, 0,                                                        \
    "y = min(max(x, min), max); attrs min (-inf), max (+inf) (floats; integers for i32/i64); gradient where "      \
    "min <= x <= max; f32 f64 i32 i64")                                                                            \
  X(POW_SCALAR, "pow_scalar", DT_F, AT_EXPONENT, G_FUSED, 0, 0, 0,                                                 \
    "y = x^exponent; attr exponent (float, required, finite); f32 f64")                                            \
  X(ERF, "erf", DT_F, 0, G_FUSED, 0, 0, 0, "error function; f32 f64")                                              \
  X(ASIN, "asin", DT_F, 0, G_FUSED, 0, 0, 0, "arc sine; f32 f64")                                                  \
  X(ACOS, "acos", DT_F, 0, G_FUSED, 0, 0, 0, "arc cosine; f32 f64")                                                \
  X(SINH, "sinh", DT_F, 0, G_FUSED, 0, 0, 0, "hyperbolic sine; f32 f64")                                           \
  X(COSH, "cosh", DT_F, 0, G_FUSED, 0, 0, 0, "hyperbolic cosine; f32 f64")                                         \
  X(ACOSH, "acosh", DT_F, 0, G_FUSED, 0, 0, 0, "inverse hyperbolic cosine; f32 f64")                               \
  X(ATANH, "atanh", DT_F, 0, G_FUSED, 0, 0, 0, "inverse hyperbolic tangent; f32 f64")                              \
  X(LOG1P, "log1p", DT_F, 0, G_FUSED, 0, 0, 0, "y = log(1+x); f32 f64")                                            \
  X(THRESHOLDED_RELU, "thresholded_relu", DT_F, AT_ALPHA, G_FUSED, 1.0, 0, 0,                                      \
    "y = x > alpha ? x : 0; attr alpha (float, 1.0); f32 f64")                                                     \
  X(HARD_SWISH, "hard_swish", DT_F, 0, G_FUSED, 0, 0, 0, "y = x*max(0, min(1, x/6+1/2)); f32 f64")                  \
  X(ISNAN, "isnan", DT_F, 0, G_NONE, 0, 0, 0, "bool: x is NaN; f32 f64; no gradient")                              \
  X(ISINF, "isinf", DT_F, AT_DETECT, G_NONE, 0, 0, 0,                                                              \
    "bool: x is +inf (if detect_positive) or -inf (if detect_negative); attrs detect_negative, detect_positive "   \
    "(0 or 1, default 1); f32 f64; no gradient")

#define AS_ENUM(id, ...) U_##id,
enum { UNARY_OPS(AS_ENUM) U_COUNT };
/* The kernels' op codes (kernels/unary_math.h) are these. */
#define AS_CODE_CHECK(id, ...) _Static_assert((int)U_##id == (int)EM_UNARY_##id, "unary_math.h: op code of " #id);
UNARY_OPS(AS_CODE_CHECK)
_Static_assert((int)U_COUNT == (int)EM_UNARY_COUNT, "unary_math.h lists another number of ops");

typedef struct ufn {
  const char *name;
  unsigned dtypes;
  unsigned attrs;
  int grad;
  double alpha, beta, gamma;
} ufn;

#define AS_FN(id, nm, dt, at, gr, al, be, ga, dc) {nm, dt, at, gr, al, be, ga},
static const ufn fns[U_COUNT] = {UNARY_OPS(AS_FN)};

/* The op of that name, or -1. */
static int fn_find(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < U_COUNT; i++)
    if (!strcmp(fns[i].name, name)) return i;
  return -1;
}

/* ========================================================== attributes === */

typedef struct uparams {
  double alpha, beta, gamma;
  double lo, hi;              /* clip */
  double exponent;            /* pow_scalar */
  int approx_tanh;            /* gelu */
  int detect_neg, detect_pos; /* isinf */
} uparams;

static const struct {
  unsigned bit;
  const char *name;
} attr_names[] = {
  {AT_ALPHA, "alpha"}, {AT_BETA, "beta"}, {AT_GAMMA, "gamma"}, {AT_MIN, "min"}, {AT_MAX, "max"},
  {AT_EXPONENT, "exponent"}, {AT_APPROX, "approximate"}, {AT_DETECT, "detect_negative"},
  {AT_DETECT, "detect_positive"},
};
#define N_ATTR_NAMES (sizeof attr_names / sizeof attr_names[0])

static const em_attr *attr_find(const em_op_args *a, const char *name) {
  for (int i = 0; i < a->n_attrs; i++)
    if (a->attrs[i].name && !strcmp(a->attrs[i].name, name)) return &a->attrs[i];
  return NULL;
}

/* Every attribute has a name the op takes (`with_fn`: also "fn", for
 * _unary_grad), given once. */
static em_status check_attr_names(const em_op_args *a, const ufn *f, int with_fn) {
  for (int i = 0; i < a->n_attrs; i++) {
    const char *nm = a->attrs[i].name;
    if (!nm) return em_op_fail(a, "attribute %d has no name", i);
    int known = with_fn && !strcmp(nm, "fn");
    for (size_t k = 0; k < N_ATTR_NAMES && !known; k++)
      known = (f->attrs & attr_names[k].bit) && !strcmp(nm, attr_names[k].name);
    if (!known) {
      char list[160] = "";
      size_t n = 0;
      for (size_t k = 0; k < N_ATTR_NAMES; k++)
        if (f->attrs & attr_names[k].bit)
          n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s", n ? ", " : "",
                                attr_names[k].name);
      return em_op_fail(a, "unknown attribute '%s' (%s takes %s)", nm, f->name, n ? list : "no attributes");
    }
    for (int j = 0; j < i; j++)
      if (a->attrs[j].name && !strcmp(a->attrs[j].name, nm)) return em_op_fail(a, "attribute '%s' given twice", nm);
  }
  return EM_OK;
}

/* A float attribute (an int is accepted), dflt when absent; finite unless
 * allow_inf (NaN never). */
static em_status attr_float(const em_op_args *a, const char *name, double dflt, int allow_inf, double *out) {
  return em_attr_number(a, name, dflt, allow_inf, out);
}

static em_status attr_flag(const em_op_args *a, const char *name, int *out) {
  const em_attr *t = attr_find(a, name);
  *out = 1;
  if (!t) return EM_OK;
  if (t->type != EM_ATTR_INT) return em_op_fail(a, "attribute '%s' must be an int (0 or 1), got %s", name, em_attr_type_name(t->type));
  if (t->i != 0 && t->i != 1) return em_op_fail(a, "attribute '%s' = %lld must be 0 or 1", name, (long long)t->i);
  *out = (int)t->i;
  return EM_OK;
}

/* clip's bounds: NaN-free, min <= max, integral (or infinite) on ints. */
static em_status clip_bounds(const em_op_args *a, em_dtype dt, uparams *p) {
  em_status s = attr_float(a, "min", -INFINITY, 1, &p->lo);
  if (!s) s = attr_float(a, "max", INFINITY, 1, &p->hi);
  if (s) return s;
  if (p->lo > p->hi) return em_op_fail(a, "attribute min = %g is greater than max = %g", p->lo, p->hi);
  if (dt == EM_I32 || dt == EM_I64) {
    if (isfinite(p->lo) && p->lo != floor(p->lo))
      return em_op_fail(a, "attribute min = %g must be an integer for %s input", p->lo, em_dtype_name(dt));
    if (isfinite(p->hi) && p->hi != floor(p->hi))
      return em_op_fail(a, "attribute max = %g must be an integer for %s input", p->hi, em_dtype_name(dt));
  }
  return EM_OK;
}

/* Reads and checks op f's attributes from a (dt: the input dtype). */
static em_status read_params(const em_op_args *a, const ufn *f, em_dtype dt, int with_fn, uparams *p) {
  memset(p, 0, sizeof *p);
  em_status s = check_attr_names(a, f, with_fn);
  if (!s && (f->attrs & AT_ALPHA)) s = attr_float(a, "alpha", f->alpha, 0, &p->alpha);
  if (!s && (f->attrs & AT_BETA)) s = attr_float(a, "beta", f->beta, 0, &p->beta);
  if (!s && (f->attrs & AT_GAMMA)) s = attr_float(a, "gamma", f->gamma, 0, &p->gamma);
  if (!s && (f->attrs & (AT_MIN | AT_MAX))) s = clip_bounds(a, dt, p);
  if (!s && (f->attrs & AT_EXPONENT)) {
    if (!attr_find(a, "exponent")) return em_op_fail(a, "attribute 'exponent' (float) is required");
    s = attr_float(a, "exponent", 0, 0, &p->exponent);
  }
  if (!s && (f->attrs & AT_APPROX)) {
    const em_attr *t = attr_find(a, "approximate");
    if (t && t->type != EM_ATTR_STRING)
      return em_op_fail(a, "attribute 'approximate' must be a string (\"none\" or \"tanh\"), got %s", em_attr_type_name(t->type));
    const char *v = t && t->s ? t->s : "none";
    if (strcmp(v, "none") && strcmp(v, "tanh"))
      return em_op_fail(a, "attribute approximate = \"%s\" is not one of \"none\", \"tanh\"", v);
    p->approx_tanh = !strcmp(v, "tanh");
  }
  if (!s && (f->attrs & AT_DETECT)) s = attr_flag(a, "detect_negative", &p->detect_neg);
  if (!s && (f->attrs & AT_DETECT)) s = attr_flag(a, "detect_positive", &p->detect_pos);
  return s;
}

static em_status check_dtype(const em_op_args *a, const ufn *f, em_dtype dt) {
  if ((unsigned)dt < 32 && (f->dtypes & (1u << dt))) return EM_OK;
  return em_op_fail(a, "dtype %s is not supported (expected %s)", em_dtype_name(dt),
                    f->dtypes == DT_FI ? "f32, f64, i32 or i64" : "f32 or f64");
}

/* ================================================================ infer === */

static int fn_of_def(const em_op_args *a) { return fn_find(a->def->name); }

static em_status unary_infer(em_op_args *a) {
  int id = fn_of_def(a);
  if (id < 0) return em_op_fail(a, "not a unary op");
  const ufn *f = &fns[id];
  if (a->n_in != 1 || a->n_out != 1) return em_op_fail(a, "takes one input and gives one output");
  em_status s = check_dtype(a, f, a->in[0].dtype);
  uparams p;
  if (!s) s = read_params(a, f, a->in[0].dtype, 0, &p);
  if (s) return s;
  a->out[0] = a->in[0];
  if (id == U_ISNAN || id == U_ISINF) a->out[0].dtype = EM_BOOL;
  return EM_OK;
}

/* The forward op named by _unary_grad's "fn", or -1 after em_op_fail. */
static int grad_fn(const em_op_args *a) {
  const em_attr *t = attr_find(a, "fn");
  if (!t || t->type != EM_ATTR_STRING || !t->s) {
    em_op_fail(a, "attribute 'fn' (string: the forward op's name) is required");
    return -1;
  }
  int id = fn_find(t->s);
  if (id < 0 || fns[id].grad != G_FUSED) {
    em_op_fail(a, "attribute fn = '%s' is not a unary op with a fused gradient", t->s);
    return -1;
  }
  return id;
}

static em_status grad_infer(em_op_args *a) {
  if (a->n_in != 3 || a->n_out != 1) return em_op_fail(a, "takes (x, y, dy) and gives dx");
  int id = grad_fn(a);
  if (id < 0) return EM_ERR_INVALID_ARGUMENT;
  em_status s = check_dtype(a, &fns[id], a->in[0].dtype);
  if (s) return s;
  if (!em_dtype_is_float(a->in[0].dtype)) return em_op_fail(a, "x must be f32 or f64");
  if (!em_shape_equal(&a->in[1], &a->in[0]) || !em_shape_equal(&a->in[2], &a->in[0]))
    return em_op_fail(a, "x, y and dy must have one dtype and shape");
  uparams p;
  s = read_params(a, &fns[id], a->in[0].dtype, 1, &p);
  if (s) return s;
  a->out[0] = a->in[0];
  return EM_OK;
}

/* The op code and per-op constants of the kernels and the CPU loops
 * (kernels/unary_math.h's table of a, b and mode). */
em_status em_unary_launch_of(const em_op_args *a, int grad, em_dtype dt, em_unary_launch *l) {
  int id = grad ? grad_fn(a) : fn_of_def(a);
  if (id < 0) return grad ? EM_ERR_INVALID_ARGUMENT : em_op_fail(a, "not a unary op");
  uparams p;
  em_status s = read_params(a, &fns[id], dt, grad, &p);
  if (s) return s;
  memset(l, 0, sizeof *l);
  l->op = id;
  switch (id) {
  case U_LEAKY_RELU: case U_ELU: case U_THRESHOLDED_RELU: l->a = p.alpha; break;
  case U_SELU: l->a = p.gamma, l->b = p.gamma * p.alpha; break;
  case U_HARD_SIGMOID: l->a = p.alpha, l->b = p.beta; break;
  case U_POW_SCALAR: l->a = p.exponent; break;
  case U_GELU: l->mode = p.approx_tanh; break;
  case U_ISINF: l->mode = p.detect_neg | p.detect_pos << 1; break;
  case U_CLIP: {
    l->a = p.lo, l->b = p.hi;
    const double tmin = dt == EM_I32 ? (double)INT32_MIN : (double)INT64_MIN;
    const double tmax = dt == EM_I32 ? (double)INT32_MAX : (double)INT64_MAX;
    const int64_t imin = dt == EM_I32 ? INT32_MIN : INT64_MIN, imax = dt == EM_I32 ? INT32_MAX : INT64_MAX;
    l->ia = p.lo <= tmin ? imin : (p.lo >= tmax ? imax : (int64_t)p.lo);
    l->ib = p.hi <= tmin ? imin : (p.hi >= tmax ? imax : (int64_t)p.hi);
    break;
  }
  default: break;
  }
  return EM_OK;
}

/* ========================================================== CPU kernels === */

/* The kernels below map elements [i0, i1) in one vector loop (MAP). SPLIT
 * runs one over [0, n) in chunks of UNARY_CHUNK, among threads above 32768
 * elements. The f32 kernels are cloned per vector ISA (EM_SIMD_CLONES: the
 * em_math.h polynomials run 4x faster at AVX-512 width than at SSE2's); a
 * chunk per call keeps the parallel region outside the cloned code. Every
 * element is independent: the bits do not depend on the thread count or the
 * vector width. */
#define UNARY_CHUNK 16384
#define MAP(...)                                                                            \
  do {                                                                                      \
    _Pragma("omp simd")                                                                     \
    for (int64_t i = i0; i < i1; i++) { __VA_ARGS__; }                                      \
  } while (0)
#define SPLIT(n, CALL)                                                                      \
  do {                                                                                      \
    const int64_t n_ = (n), chunks_ = (n_ + UNARY_CHUNK - 1) / UNARY_CHUNK;                 \
    _Pragma("omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n_ > 32768)") \
    for (int64_t c_ = 0; c_ < chunks_; c_++) {                                              \
      const int64_t i0 = c_ * UNARY_CHUNK, i1 = n_ - i0 < UNARY_CHUNK ? n_ : i0 + UNARY_CHUNK; \
      CALL;                                                                                 \
    }                                                                                       \
  } while (0)

/* f64 helpers (libm: the f64 transcendentals run on the CPU only). */
static inline double sigmoid_f64(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
static inline double softplus_f64(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */
#define TWO_INV_SQRTPI 1.12837916709551257390 /* 2/sqrt(pi) */

/* Exact gelu in f64: x Phi(x) with Phi(x) = erfc(-x/sqrt 2)/2 (accurate for x < 0 too). */
static inline double gelu_erf_f64(double x) { return 0.5 * x * erfc(-x * SQRT1_2); }
static inline double gelu_erf_grad_f64(double x) {
  return 0.5 * erfc(-x * SQRT1_2) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

/* sigmoid and tanh: ops/select_math.h's forms of em_sigmoidf and em_tanhf
 * (selects for branches, the same bits), so their loops vectorise: MAP's loop
 * over em_sigmoidf called the scalar function per element, half of
 * EfficientNet-B0's inference time. */

/* The per-element arithmetic is kernels/unary_math.h's (em_un_*, em_ung_*)
 * and em_math.h's: the loops below and kernels/unary.cu call the same
 * functions with the same constants (em_unary_launch: a and b rounded to the
 * dtype once, here and in the launch alike). */
EM_SIMD_CLONES static void fwd_f32(const em_unary_launch *l, const float *x, float *y, int64_t i0, int64_t i1) {
  const float a = (float)l->a, b = (float)l->b;
  switch (l->op) {
  case U_NEG: MAP(y[i] = em_un_neg_f32(x[i])); break;
  case U_ABS: MAP(y[i] = em_un_abs_f32(x[i])); break;
  case U_SIGN: MAP(y[i] = em_un_sign_f32(x[i])); break;
  case U_EXP: MAP(y[i] = em_expf(x[i])); break;
  case U_LOG: MAP(y[i] = em_logf(x[i])); break;
  case U_SQRT: MAP(y[i] = em_sqrtf(x[i])); break;
  case U_RSQRT: MAP(y[i] = em_rsqrtf(x[i])); break;
  case U_RECIPROCAL: MAP(y[i] = em_un_reciprocal_f32(x[i])); break;
  case U_SIGMOID: MAP(y[i] = em_sigmoidf_sel(x[i])); break;
  case U_TANH: MAP(y[i] = em_tanhf_sel(x[i])); break;
  case U_RELU: MAP(y[i] = em_un_relu_f32(x[i])); break;
  case U_LEAKY_RELU: MAP(y[i] = em_un_leaky_relu_f32(x[i], a)); break;
  case U_ELU: MAP(y[i] = em_un_elu_f32(x[i], a)); break;
  case U_SELU: MAP(y[i] = em_un_selu_f32(x[i], a, b)); break;
  case U_SOFTPLUS: MAP(y[i] = em_softplusf(x[i])); break;
  case U_SOFTSIGN: MAP(y[i] = em_un_softsign_f32(x[i])); break;
  case U_HARD_SIGMOID: MAP(y[i] = em_un_hard_sigmoid_f32(x[i], a, b)); break;
  case U_HARD_SWISH: MAP(y[i] = em_un_hard_swish_f32(x[i])); break;
  case U_GELU:
    if (l->mode) MAP(y[i] = em_un_gelu_tanh_f32(x[i]));
    else MAP(y[i] = em_geluf(x[i]));
    break;
  case U_SIN: MAP(y[i] = em_sinf(x[i])); break;
  case U_COS: MAP(y[i] = em_cosf(x[i])); break;
  case U_TAN: MAP(y[i] = em_tanf(x[i])); break;
  case U_ATAN: MAP(y[i] = em_atanf(x[i])); break;
  case U_ASINH: MAP(y[i] = em_asinhf(x[i])); break;
  case U_FLOOR: MAP(y[i] = em_un_floor_f32(x[i])); break;
  case U_CEIL: MAP(y[i] = em_un_ceil_f32(x[i])); break;
  case U_ROUND: MAP(y[i] = em_un_round_f32(x[i])); break;
  case U_CLIP: MAP(y[i] = em_un_clip_f32(x[i], a, b)); break;
  case U_POW_SCALAR: MAP(y[i] = em_powf(x[i], a)); break;
  case U_ERF: MAP(y[i] = em_erff(x[i])); break;
  case U_ASIN: MAP(y[i] = em_asinf(x[i])); break;
  case U_ACOS: MAP(y[i] = em_acosf(x[i])); break;
  case U_SINH: MAP(y[i] = em_sinhf(x[i])); break;
  case U_COSH: MAP(y[i] = em_coshf(x[i])); break;
  case U_ACOSH: MAP(y[i] = em_acoshf(x[i])); break;
  case U_ATANH: MAP(y[i] = em_atanhf(x[i])); break;
  case U_LOG1P: MAP(y[i] = em_log1pf(x[i])); break;
  case U_THRESHOLDED_RELU: MAP(y[i] = em_un_thresholded_relu_f32(x[i], a)); break;
  default: break; /* isnan, isinf: fwd_bool */
  }
}

/* f64: the exact-arithmetic ops through unary_math.h (what the GPU runs);
 * the transcendentals through libm, on the CPU only. */
static void fwd_f64(const em_unary_launch *l, const double *x, double *y, int64_t i0, int64_t i1) {
  const double a = l->a, b = l->b;
  switch (l->op) {
  case U_NEG: MAP(y[i] = em_un_neg_f64(x[i])); break;
  case U_ABS: MAP(y[i] = em_un_abs_f64(x[i])); break;
  case U_SIGN: MAP(y[i] = em_un_sign_f64(x[i])); break;
  case U_SQRT: MAP(y[i] = em_un_sqrt_f64(x[i])); break;
  case U_RSQRT: MAP(y[i] = em_un_rsqrt_f64(x[i])); break;
  case U_RECIPROCAL: MAP(y[i] = em_un_reciprocal_f64(x[i])); break;
  case U_RELU: MAP(y[i] = em_un_relu_f64(x[i])); break;
  case U_LEAKY_RELU: MAP(y[i] = em_un_leaky_relu_f64(x[i], a)); break;
  case U_SOFTSIGN: MAP(y[i] = em_un_softsign_f64(x[i])); break;
  case U_HARD_SIGMOID: MAP(y[i] = em_un_hard_sigmoid_f64(x[i], a, b)); break;
  case U_HARD_SWISH: MAP(y[i] = em_un_hard_swish_f64(x[i])); break;
  case U_FLOOR: MAP(y[i] = em_un_floor_f64(x[i])); break;
  case U_CEIL: MAP(y[i] = em_un_ceil_f64(x[i])); break;
  case U_ROUND: MAP(y[i] = em_un_round_f64(x[i])); break;
  case U_CLIP: MAP(y[i] = em_un_clip_f64(x[i], a, b)); break;
  case U_THRESHOLDED_RELU: MAP(y[i] = em_un_thresholded_relu_f64(x[i], a)); break;
  /* libm, CPU only */
  case U_EXP: MAP(y[i] = exp(x[i])); break;
  case U_LOG: MAP(y[i] = log(x[i])); break;
  case U_SIGMOID: MAP(y[i] = sigmoid_f64(x[i])); break;
  case U_TANH: MAP(y[i] = tanh(x[i])); break;
  case U_ELU: MAP(double v = x[i]; y[i] = v > 0 ? v : a * expm1(v)); break;
  case U_SELU: MAP(double v = x[i]; y[i] = v > 0 ? a * v : b * expm1(v)); break;
  case U_SOFTPLUS: MAP(y[i] = softplus_f64(x[i])); break;
  case U_GELU:
    if (l->mode)
      MAP(double v = x[i]; y[i] = v * sigmoid_f64(v * (EM_UNARY_GELU_C1 + EM_UNARY_GELU_C2 * (v * v))));
    else MAP(y[i] = gelu_erf_f64(x[i]));
    break;
  case U_SIN: MAP(y[i] = sin(x[i])); break;
  case U_COS: MAP(y[i] = cos(x[i])); break;
  case U_TAN: MAP(y[i] = tan(x[i])); break;
  case U_ATAN: MAP(y[i] = atan(x[i])); break;
  case U_ASINH: MAP(y[i] = asinh(x[i])); break;
  case U_POW_SCALAR: MAP(y[i] = pow(x[i], a)); break;
  case U_ERF: MAP(y[i] = erf(x[i])); break;
  case U_ASIN: MAP(y[i] = asin(x[i])); break;
  case U_ACOS: MAP(y[i] = acos(x[i])); break;
  case U_SINH: MAP(y[i] = sinh(x[i])); break;
  case U_COSH: MAP(y[i] = cosh(x[i])); break;
  case U_ACOSH: MAP(y[i] = acosh(x[i])); break;
  case U_ATANH: MAP(y[i] = atanh(x[i])); break;
  case U_LOG1P: MAP(y[i] = log1p(x[i])); break;
  default: break;
  }
}

/* Integer ops; clip's bounds arrive clamped to the type (em_unary_launch). */
static void fwd_i32(const em_unary_launch *l, const int32_t *x, int32_t *y, int64_t i0, int64_t i1) {
  const int32_t lo = (int32_t)l->ia, hi = (int32_t)l->ib;
  switch (l->op) {
  case U_NEG: MAP(y[i] = em_un_neg_i32(x[i])); break;
  case U_ABS: MAP(y[i] = em_un_abs_i32(x[i])); break;
  case U_SIGN: MAP(y[i] = em_un_sign_i32(x[i])); break;
  case U_RELU: MAP(y[i] = em_un_relu_i32(x[i])); break;
  case U_CLIP: MAP(y[i] = em_un_clip_i32(x[i], lo, hi)); break;
  default: break;
  }
}
static void fwd_i64(const em_unary_launch *l, const int64_t *x, int64_t *y, int64_t i0, int64_t i1) {
  const int64_t lo = l->ia, hi = l->ib;
  switch (l->op) {
  case U_NEG: MAP(y[i] = em_un_neg_i64(x[i])); break;
  case U_ABS: MAP(y[i] = em_un_abs_i64(x[i])); break;
  case U_SIGN: MAP(y[i] = em_un_sign_i64(x[i])); break;
  case U_RELU: MAP(y[i] = em_un_relu_i64(x[i])); break;
  case U_CLIP: MAP(y[i] = em_un_clip_i64(x[i], lo, hi)); break;
  default: break;
  }
}

/* isnan / isinf into bool (one byte, 0 or 1). */
static void fwd_bool_f32(const em_unary_launch *l, const float *x, uint8_t *y, int64_t i0, int64_t i1) {
  const int mode = l->mode;
  if (l->op == U_ISNAN) MAP(y[i] = em_un_isnan_f32(x[i]));
  else MAP(y[i] = em_un_isinf_f32(x[i], mode));
}
static void fwd_bool_f64(const em_unary_launch *l, const double *x, uint8_t *y, int64_t i0, int64_t i1) {
  const int mode = l->mode;
  if (l->op == U_ISNAN) MAP(y[i] = em_un_isnan_f64(x[i]));
  else MAP(y[i] = em_un_isinf_f64(x[i], mode));
}

/* v = v * sigmoid(v): em_post_apply's fused x * sigmoid(x). */
EM_SIMD_CLONES static void swish_f32(float *v, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; i++) {
    const float s = em_sigmoidf_sel(v[i]);
    v[i] = v[i] * s;
  }
}

static em_status unary_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_dtype dt = em_tensor_dtype(in[0]);
  em_unary_launch l;
  em_status s = em_unary_launch_of(a, 0, dt, &l);
  if (s) return s;
  int64_t n = em_tensor_numel(in[0]);
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
  if (l.op == U_ISNAN || l.op == U_ISINF) {
    if (dt == EM_F32) SPLIT(n, fwd_bool_f32(&l, x, y, i0, i1));
    else SPLIT(n, fwd_bool_f64(&l, x, y, i0, i1));
    return EM_OK;
  }
  switch (dt) {
  case EM_F32: SPLIT(n, fwd_f32(&l, x, y, i0, i1)); break;
  case EM_F64: SPLIT(n, fwd_f64(&l, x, y, i0, i1)); break;
  case EM_I32: SPLIT(n, fwd_i32(&l, x, y, i0, i1)); break;
  case EM_I64: SPLIT(n, fwd_i64(&l, x, y, i0, i1)); break;
  default: return em_op_fail(a, "dtype %s reached the CPU kernel", em_dtype_name(dt));
  }
  return EM_OK;
}

/* A convolution's fused tail (op.h, exec.c's plan_fusions) with the unary kernels themselves:
 * relu and clip as unary_cpu computes them, x * sigmoid(x) as the sigmoid op and then mul
 * (binary.c: one f32 product) do, so the same bits as the ops run one after the other. */
em_status em_post_apply(const em_post_op *post, em_tensor *y) {
  em_tensor *io[1] = {y};
  if (post->kind != EM_POST_SWISH) return unary_cpu(&post->unary, io, io);
  if (em_tensor_dtype(y) != EM_F32) return em_op_fail(&post->unary, "a fused x * sigmoid(x) on %s", em_dtype_name(em_tensor_dtype(y)));
  float *v = em_tensor_data(y);
  const int64_t n = em_tensor_numel(y);
  SPLIT(n, swish_f32(v, i0, i1));
  return EM_OK;
}

/* Element-wise: a channels-last input gives a channels-last output, element i of one buffer
 * mapping to element i of the other (the kernel's flat loop reads both in memory order). Where
 * the output must be contiguous the executor hands over a contiguous input instead. */
static em_status unary_layout(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c) {
  (void)a;
  const int cl = out_may && !em_tensor_is_contiguous(in[0]) && em_tensor_is_channels_last(in[0]);
  c->as_is = (uint64_t)cl;
  c->out_channels_last = cl;
  return EM_OK;
}

/* ======================================================= gradient kernels === */

/* dx = dy * f'(x), with y = f(x) where it is the cheaper way. Loops over
 * (x, y, g = dy) into dx; the arithmetic is unary_math.h's, as on the GPU. */
EM_SIMD_CLONES static void grad_f32(const em_unary_launch *l, const float *x, const float *y, const float *dy,
                                   float *dx, int64_t i0, int64_t i1) {
  const float a = (float)l->a, b = (float)l->b;
  switch (l->op) {
  case U_NEG: MAP(dx[i] = -dy[i]); break;
  case U_ABS: MAP(dx[i] = em_ung_abs_f32(x[i], dy[i])); break;
  case U_EXP: MAP(dx[i] = dy[i] * y[i]); break;
  case U_LOG: MAP(dx[i] = dy[i] / x[i]); break;
  case U_SQRT: MAP(dx[i] = em_ung_sqrt_f32(y[i], dy[i])); break;
  case U_RSQRT: MAP(dx[i] = em_ung_rsqrt_f32(y[i], dy[i])); break;
  case U_RECIPROCAL: MAP(dx[i] = em_ung_reciprocal_f32(y[i], dy[i])); break;
  case U_SIGMOID: MAP(dx[i] = em_ung_sigmoid_f32(y[i], dy[i])); break;
  case U_TANH: MAP(dx[i] = em_ung_tanh_f32(y[i], dy[i])); break;
  case U_RELU: MAP(dx[i] = em_ung_relu_f32(x[i], dy[i])); break;
  case U_LEAKY_RELU: MAP(dx[i] = em_ung_leaky_relu_f32(x[i], dy[i], a)); break;
  case U_ELU: MAP(dx[i] = em_ung_elu_f32(x[i], y[i], dy[i], a)); break;
  case U_SELU: MAP(dx[i] = em_ung_selu_f32(x[i], y[i], dy[i], a, b)); break;
  case U_SOFTPLUS: MAP(dx[i] = em_ung_softplus_f32(x[i], dy[i])); break;
  case U_SOFTSIGN: MAP(dx[i] = em_ung_softsign_f32(x[i], dy[i])); break;
  case U_HARD_SIGMOID: MAP(dx[i] = em_ung_hard_sigmoid_f32(x[i], dy[i], a, b)); break;
  case U_HARD_SWISH: MAP(dx[i] = em_ung_hard_swish_f32(x[i], dy[i])); break;
  case U_GELU:
    if (l->mode) MAP(dx[i] = em_ung_gelu_tanh_f32(x[i], dy[i]));
    else MAP(dx[i] = em_ung_gelu_f32(x[i], dy[i]));
    break;
  case U_SIN: MAP(dx[i] = em_ung_sin_f32(x[i], dy[i])); break;
  case U_COS: MAP(dx[i] = em_ung_cos_f32(x[i], dy[i])); break;
  case U_TAN: MAP(dx[i] = em_ung_tan_f32(y[i], dy[i])); break;
  case U_ATAN: MAP(dx[i] = em_ung_atan_f32(x[i], dy[i])); break;
  case U_ASINH: MAP(dx[i] = em_ung_asinh_f32(x[i], dy[i])); break;
  case U_CLIP: MAP(dx[i] = em_ung_clip_f32(x[i], dy[i], a, b)); break;
  case U_POW_SCALAR: MAP(dx[i] = em_ung_pow_scalar_f32(x[i], dy[i], a)); break;
  case U_ERF: MAP(dx[i] = em_ung_erf_f32(x[i], dy[i])); break;
  case U_ASIN: MAP(dx[i] = em_ung_asin_f32(x[i], dy[i])); break;
  case U_ACOS: MAP(dx[i] = em_ung_acos_f32(x[i], dy[i])); break;
  case U_SINH: MAP(dx[i] = em_ung_sinh_f32(x[i], dy[i])); break;
  case U_COSH: MAP(dx[i] = em_ung_cosh_f32(x[i], dy[i])); break;
  case U_ACOSH: MAP(dx[i] = em_ung_acosh_f32(x[i], dy[i])); break;
  case U_ATANH: MAP(dx[i] = em_ung_atanh_f32(x[i], dy[i])); break;
  case U_LOG1P: MAP(dx[i] = em_ung_log1p_f32(x[i], dy[i])); break;
  case U_THRESHOLDED_RELU: MAP(dx[i] = em_ung_thresholded_relu_f32(x[i], dy[i], a)); break;
  default: break;
  }
}

static void grad_f64(const em_unary_launch *l, const double *x, const double *y, const double *dy, double *dx,
                     int64_t i0, int64_t i1) {
  const double a = l->a, b = l->b;
  switch (l->op) {
  case U_NEG: MAP(dx[i] = -dy[i]); break;
  case U_ABS: MAP(dx[i] = em_ung_abs_f64(x[i], dy[i])); break;
  case U_EXP: MAP(dx[i] = dy[i] * y[i]); break;
  case U_LOG: MAP(dx[i] = dy[i] / x[i]); break;
  case U_SQRT: MAP(dx[i] = em_ung_sqrt_f64(y[i], dy[i])); break;
  case U_RSQRT: MAP(dx[i] = em_ung_rsqrt_f64(y[i], dy[i])); break;
  case U_RECIPROCAL: MAP(dx[i] = em_ung_reciprocal_f64(y[i], dy[i])); break;
  case U_SIGMOID: MAP(dx[i] = em_ung_sigmoid_f64(y[i], dy[i])); break;
  case U_TANH: MAP(dx[i] = em_ung_tanh_f64(y[i], dy[i])); break;
  case U_RELU: MAP(dx[i] = em_ung_relu_f64(x[i], dy[i])); break;
  case U_LEAKY_RELU: MAP(dx[i] = em_ung_leaky_relu_f64(x[i], dy[i], a)); break;
  case U_ELU: MAP(dx[i] = em_ung_elu_f64(x[i], y[i], dy[i], a)); break;
  case U_SELU: MAP(dx[i] = em_ung_selu_f64(x[i], y[i], dy[i], a, b)); break;
  case U_SOFTSIGN: MAP(dx[i] = em_ung_softsign_f64(x[i], dy[i])); break;
  case U_HARD_SIGMOID: MAP(dx[i] = em_ung_hard_sigmoid_f64(x[i], dy[i], a, b)); break;
  case U_HARD_SWISH: MAP(dx[i] = em_ung_hard_swish_f64(x[i], dy[i])); break;
  case U_TAN: MAP(dx[i] = em_ung_tan_f64(y[i], dy[i])); break;
  case U_ATAN: MAP(dx[i] = em_ung_atan_f64(x[i], dy[i])); break;
  case U_ASINH: MAP(dx[i] = em_ung_asinh_f64(x[i], dy[i])); break;
  case U_CLIP: MAP(dx[i] = em_ung_clip_f64(x[i], dy[i], a, b)); break;
  case U_ASIN: MAP(dx[i] = em_ung_asin_f64(x[i], dy[i])); break;
  case U_ACOS: MAP(dx[i] = em_ung_acos_f64(x[i], dy[i])); break;
  case U_ACOSH: MAP(dx[i] = em_ung_acosh_f64(x[i], dy[i])); break;
  case U_ATANH: MAP(dx[i] = em_ung_atanh_f64(x[i], dy[i])); break;
  case U_LOG1P: MAP(dx[i] = em_ung_log1p_f64(x[i], dy[i])); break;
  case U_THRESHOLDED_RELU: MAP(dx[i] = em_ung_thresholded_relu_f64(x[i], dy[i], a)); break;
  /* libm, CPU only */
  case U_SOFTPLUS: MAP(dx[i] = dy[i] * sigmoid_f64(x[i])); break;
  case U_GELU:
    if (l->mode)
      MAP(double v = x[i]; double v2 = v * v;
          double s = sigmoid_f64(v * (EM_UNARY_GELU_C1 + EM_UNARY_GELU_C2 * v2));
          dx[i] = dy[i] * (s + v * (s * (1.0 - s)) * (EM_UNARY_GELU_C1 + EM_UNARY_GELU_C3 * v2)));
    else MAP(dx[i] = dy[i] * gelu_erf_grad_f64(x[i]));
    break;
  case U_SIN: MAP(dx[i] = dy[i] * cos(x[i])); break;
  case U_COS: MAP(dx[i] = -dy[i] * sin(x[i])); break;
  case U_POW_SCALAR:
    if (a == 0.0) MAP(dx[i] = 0.0);
    else MAP(dx[i] = dy[i] * (a * pow(x[i], a - 1.0)));
    break;
  case U_ERF: MAP(double v = x[i]; dx[i] = dy[i] * (TWO_INV_SQRTPI * exp(-(v * v)))); break;
  case U_SINH: MAP(dx[i] = dy[i] * cosh(x[i])); break;
  case U_COSH: MAP(dx[i] = dy[i] * sinh(x[i])); break;
  default: break;
  }
}

static em_status grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_dtype dt = em_tensor_dtype(in[0]);
  em_unary_launch l;
  em_status s = em_unary_launch_of(a, 1, dt, &l);
  if (s) return s;
  int64_t n = em_tensor_numel(in[0]);
  const void *x = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *dx = em_tensor_data(out[0]);
  if (dt == EM_F32) SPLIT(n, grad_f32(&l, x, y, dy, dx, i0, i1));
  else if (dt == EM_F64) SPLIT(n, grad_f64(&l, x, y, dy, dx, i0, i1));
  else return em_op_fail(a, "dtype %s reached the CPU kernel", em_dtype_name(dt));
  return EM_OK;
}

/* ============================================================ backward === */

#define MAX_FWD_ATTRS 8

static em_status unary_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                em_var *din) {
  int id = fn_of_def(a);
  if (id < 0 || dy[0] < 0) return EM_OK;
  /* Integers carry no gradient; isnan/isinf have none. */
  if (!em_dtype_is_float(a->in[0].dtype) || fns[id].grad == G_NONE) return EM_OK;
  if (fns[id].grad == G_ZERO) return em_apply1(g, "zeros_like", x[0], &din[0]);
  /* fn plus the forward's attributes as given (infer accepted them: at most
   * one of each name the op takes). */
  if (a->n_attrs > MAX_FWD_ATTRS) return em_op_fail(a, "too many attributes (%d)", a->n_attrs);
  em_attr at[MAX_FWD_ATTRS + 1];
  at[0] = (em_attr){.name = "fn", .type = EM_ATTR_STRING, .s = fns[id].name};
  for (int i = 0; i < a->n_attrs; i++) at[i + 1] = a->attrs[i];
  em_var in[3] = {x[0], y[0], dy[0]};
  return em_apply(g, "_unary_grad", in, 3, at, a->n_attrs + 1, &din[0], 1);
}

/* =============================================================== table === */

/* The engine's list of attribute names (em_op_def.attrs) for an op's AT_
 * bits, spelt as attr_names spells them. Only the combinations UNARY_OPS
 * uses are listed; the static assertions below refuse any other, so a new
 * combination cannot end up with a wrong list. */
#define AT_LIST_KNOWN(at)                                                                                   \
  ((at) == 0 || (at) == AT_ALPHA || (at) == (AT_ALPHA | AT_GAMMA) || (at) == (AT_ALPHA | AT_BETA) ||      \
   (at) == AT_APPROX || (at) == (AT_MIN | AT_MAX) || (at) == AT_EXPONENT || (at) == AT_DETECT)
#define AT_LIST(at)                                                                                         \
  ((at) == 0                        ? EM_NO_ATTRS                                                         \
   : (at) == AT_ALPHA               ? EM_ATTRS("alpha")                                                   \
   : (at) == (AT_ALPHA | AT_GAMMA)  ? EM_ATTRS("alpha", "gamma")                                          \
   : (at) == (AT_ALPHA | AT_BETA)   ? EM_ATTRS("alpha", "beta")                                           \
   : (at) == AT_APPROX              ? EM_ATTRS("approximate")                                             \
   : (at) == (AT_MIN | AT_MAX)      ? EM_ATTRS("min", "max")                                              \
   : (at) == AT_EXPONENT            ? EM_ATTRS("exponent")                                                \
                                    : EM_ATTRS("detect_negative", "detect_positive"))

#define AS_LIST_CHECK(id, nm, dt, at, gr, al, be, ga, dc) \
  _Static_assert(AT_LIST_KNOWN(at), "unary op " nm ": add its attribute combination to AT_LIST");
UNARY_OPS(AS_LIST_CHECK)

#define AS_DEF(id, nm, dt, at, gr, al, be, ga, dc)                                                          \
  {.name = nm, .doc = dc, .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .no_grad = (gr) == G_NONE,    \
   .inplace = U_##id != U_ISNAN && U_##id != U_ISINF, .infer = unary_infer, .cpu = unary_cpu,              \
   .gpu = em_unary_gpu, .backward = unary_backward, .attrs = AT_LIST(at), .layout = unary_layout},

const em_op_def em_ops_unary[] = {
  UNARY_OPS(AS_DEF)
  {.name = "_unary_grad",
   .doc = "dx = dy * f'(x) for the unary op f named by attribute fn (string), inputs (x, y = f(x), dy), "
          "plus f's attributes; f32 f64",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .inplace = 1, .infer = grad_infer, .cpu = grad_cpu,
   .gpu = em_unary_grad_gpu,
   /* fn plus every attribute of a unary op with a fused gradient (isinf's
    * detect_* never reach it: isinf has no gradient) */
   .attrs = EM_ATTRS("fn", "alpha", "beta", "gamma", "min", "max", "exponent", "approximate")},
};
const size_t em_ops_unary_count = sizeof em_ops_unary / sizeof em_ops_unary[0];
