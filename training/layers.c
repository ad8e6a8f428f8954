/* The layers library (include/ember/layers.h): each layer is a few em_apply
 * calls on the graph's ops plus its named, seeded parameters. What lives
 * here and nowhere else: the naming rule (given or numbered, unique in the
 * graph), the seed rule (model seed and parameter name), the initialiser
 * families (PyTorch's and CNTK's defaults), and the translation of PyTorch-
 * style options (stride defaults, "same", momentum's meaning) into the ops'
 * ONNX attributes. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/layers.h"
#include "error.h"

#define API __attribute__((visibility("default")))

#define NAME_CAP 256
#define MAX_SP 3 /* spatial axes of convolution and pooling */

/* ------------------------------------------------------------- helpers --- */

static em_status apply1(em_graph *g, const char *op, const em_var *in, int n, const em_attr *at, int n_at,
                        em_var *out) {
  return em_apply(g, op, in, n, at, n_at, out, 1);
}

static em_attr attr_int(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr attr_float(const char *name, double v) {
  return (em_attr){.name = name, .type = EM_ATTR_FLOAT, .f = v};
}
static em_attr attr_ints(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}
static em_attr attr_str(const char *name, const char *s) {
  return (em_attr){.name = name, .type = EM_ATTR_STRING, .s = s};
}

static em_status check_context(const em_layers *L, const char *what) {
  if (!L || !L->graph) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the em_layers context or its graph is NULL", what);
  if (L->dtype != EM_F32 && L->dtype != EM_F64)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: em_layers.dtype is %s; layers make f32 or f64 parameters", what,
                   em_dtype_name(L->dtype));
  if ((unsigned)L->init > EM_LAYERS_INIT_CNTK)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: em_layers.init is %d (EM_LAYERS_INIT_TORCH or _CNTK)", what,
                   (int)L->init);
  return EM_OK;
}

/* "[2, -1, 28]" for messages. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* x's dtype and shape, checked against what the layer needs: a float of the
 * parameters' dtype with rank in [min_rank, max_rank]. */
/* A layer as its messages name it: "dense 'fc1'", or the kind alone for
 * the layers that have no name (pooling: no parameters, nothing named). */
typedef struct label {
  char text[NAME_CAP + 48];
} label;

static label label_of(const char *what, const char *name) {
  label l;
  if (name && *name) snprintf(l.text, sizeof l.text, "%s '%s'", what, name);
  else snprintf(l.text, sizeof l.text, "%s", what);
  return l;
}

static em_status input_info(const em_layers *L, const char *what, const char *name, em_var x, int min_rank,
                            int max_rank, int *ndim, int64_t *shape) {
  const label who = label_of(what, name);
  em_dtype dt;
  em_status s = em_var_info(L->graph, x, &dt, ndim, shape);
  if (s) return em_fail_context(s, "%s", who.text);
  char buf[128];
  if (*ndim < min_rank || *ndim > max_rank)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the input is %s (rank %d); it must have rank %d to %d", who.text,
                   shape_str(*ndim, shape, buf, sizeof buf), *ndim, min_rank, max_rank);
  if (dt != L->dtype)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the input is %s and the parameters %s (em_layers.dtype)", who.text,
                   em_dtype_name(dt), em_dtype_name(L->dtype));
  return EM_OK;
}

/* -------------------------------------------------------------- naming --- */

/* A layer name is taken when a value is called `name` or `name.<anything>`. */
static int name_taken(const em_graph *g, const char *name) {
  size_t len = strlen(name), n = em_graph_value_count(g);
  for (size_t i = 0; i < n; i++) {
    const char *v;
    if (em_var_name(g, (em_var)i, &v) || !v) continue;
    if (!strncmp(v, name, len) && (v[len] == 0 || v[len] == '.')) return 1;
  }
  return 0;
}

/* The layer's full name into buf: prefix + given, or prefix + kind + the
 * first free number. */
static em_status layer_name(const em_layers *L, const char *given, const char *kind, char *buf) {
  const char *prefix = L->prefix ? L->prefix : "";
  if (given) {
    if (!*given) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the layer name is empty (pass NULL for a numbered one)", kind);
    if ((size_t)snprintf(buf, NAME_CAP, "%s%s", prefix, given) >= NAME_CAP)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s%s': the name is longer than %d bytes", kind, prefix, given,
                     NAME_CAP - 1);
    if (name_taken(L->graph, buf))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': the name is already used in the graph (give another, or NULL "
                     "for a numbered one)", kind, buf);
    return EM_OK;
  }
  for (int k = 1; k < 1000000; k++) {
    if ((size_t)snprintf(buf, NAME_CAP, "%s%s%d", prefix, kind, k) >= NAME_CAP)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the prefix '%s' is too long", kind, prefix);
    if (!name_taken(L->graph, buf)) return EM_OK;
  }
  return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: no free numbered name", kind);
}

/* FNV-1a 64 of the name, xored with the model seed, through splitmix64's
 * finaliser: names that differ in one byte give unrelated seeds. */
API uint64_t em_layers_seed(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  uint64_t z = h ^ seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---------------------------------------------------------- parameters --- */

typedef enum role { ROLE_WEIGHT, ROLE_BIAS, ROLE_EMBEDDING, ROLE_ONES, ROLE_ZEROS } role;

/* The family's initialiser for a parameter of this role; fan_in for
 * PyTorch's 1/sqrt(fan_in) bounds. */
static em_init family_init(em_layers_init family, role r, double fan_in) {
  switch (r) {
  case ROLE_ONES: return (em_init){.kind = EM_INIT_CONSTANT, .value = 1};
  case ROLE_ZEROS: return (em_init){.kind = EM_INIT_CONSTANT, .value = 0};
  case ROLE_EMBEDDING:
    return family == EM_LAYERS_INIT_CNTK ? (em_init){.kind = EM_INIT_GLOROT_UNIFORM}
                                         : (em_init){.kind = EM_INIT_NORMAL, .scale = 1};
  case ROLE_WEIGHT:
    /* kaiming_uniform(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in). */
    return family == EM_LAYERS_INIT_CNTK ? (em_init){.kind = EM_INIT_GLOROT_UNIFORM}
                                         : (em_init){.kind = EM_INIT_UNIFORM, .scale = 1 / sqrt(fan_in)};
  case ROLE_BIAS:
    return family == EM_LAYERS_INIT_CNTK ? (em_init){.kind = EM_INIT_CONSTANT, .value = 0}
                                         : (em_init){.kind = EM_INIT_UNIFORM, .scale = 1 / sqrt(fan_in)};
  }
  return (em_init){.kind = EM_INIT_CONSTANT};
}

/* Creates "<layer>.<suffix>" as a parameter (or a state), initialised by
 * `override` or the family's rule, seeded from the model seed and the name. */
static em_status make_param(const em_layers *L, const char *layer, const char *suffix, int is_state, role r,
                            double fan_in, const em_init *override, int ndim, const int64_t *shape, em_var *out) {
  char full[NAME_CAP + 32];
  snprintf(full, sizeof full, "%s.%s", layer, suffix);
  em_init init = override ? *override : family_init(L->init, r, fan_in);
  if (!override || !override->seed) init.seed = em_layers_seed(L->seed, full);
  return is_state ? em_state(L->graph, full, L->dtype, ndim, shape, &init, out)
                  : em_parameter(L->graph, full, L->dtype, ndim, shape, &init, out);
}

/* -------------------------------------------------------- activations --- */

static const char *const act_names[EM_ACT_COUNT] = {
  [EM_ACT_NONE] = "none", [EM_ACT_RELU] = "relu", [EM_ACT_RELU6] = "relu6", [EM_ACT_LEAKY_RELU] = "leaky_relu",
  [EM_ACT_ELU] = "elu", [EM_ACT_SELU] = "selu", [EM_ACT_GELU] = "gelu", [EM_ACT_GELU_TANH] = "gelu_tanh",
  [EM_ACT_SILU] = "silu", [EM_ACT_SIGMOID] = "sigmoid", [EM_ACT_TANH] = "tanh", [EM_ACT_SOFTPLUS] = "softplus",
  [EM_ACT_SOFTSIGN] = "softsign", [EM_ACT_HARD_SIGMOID] = "hard_sigmoid", [EM_ACT_HARD_SWISH] = "hard_swish",
  [EM_ACT_SOFTMAX] = "softmax", [EM_ACT_LOG_SOFTMAX] = "log_softmax",
};

API const char *em_activation_name(em_activation act) {
  return (unsigned)act < EM_ACT_COUNT ? act_names[act] : NULL;
}

API em_status em_activation_from_name(const char *name, em_activation *out) {
  if (!name || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_activation_from_name: NULL argument");
  for (int i = 0; i < EM_ACT_COUNT; i++)
    if (!strcmp(act_names[i], name)) {
      *out = (em_activation)i;
      return EM_OK;
    }
  char list[512];
  size_t n = 0;
  for (int i = 0; i < EM_ACT_COUNT; i++) n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", act_names[i]);
  return em_fail(EM_ERR_NOT_FOUND, "no activation named '%s' (there are: %s)", name, list);
}

API em_status em_activation_apply(const em_layers *L, em_var x, em_activation act, em_var *out) {
  em_status s = check_context(L, "activation");
  if (s) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "activation: out is NULL");
  em_graph *g = L->graph;
  em_attr at[2];
  int n_at = 0;
  const char *op = NULL;
  switch (act) {
  case EM_ACT_NONE: *out = x; return em_var_info(g, x, NULL, NULL, NULL);
  case EM_ACT_RELU6: op = "clip"; at[n_at++] = attr_float("min", 0); at[n_at++] = attr_float("max", 6); break;
  case EM_ACT_LEAKY_RELU: op = "leaky_relu"; at[n_at++] = attr_float("alpha", 0.01); break;
  case EM_ACT_GELU: op = "gelu"; break;
  case EM_ACT_GELU_TANH: op = "gelu"; at[n_at++] = attr_str("approximate", "tanh"); break;
  case EM_ACT_HARD_SIGMOID:
    op = "hard_sigmoid";
    at[n_at++] = attr_float("alpha", 1.0 / 6);
    at[n_at++] = attr_float("beta", 0.5);
    break;
  case EM_ACT_SOFTMAX: case EM_ACT_LOG_SOFTMAX: op = act_names[act]; at[n_at++] = attr_int("axis", -1); break;
  case EM_ACT_SILU: {
    em_var sg;
    s = apply1(g, "sigmoid", &x, 1, NULL, 0, &sg);
    return s ? s : apply1(g, "mul", (em_var[]){x, sg}, 2, NULL, 0, out);
  }
  default:
    if ((unsigned)act >= EM_ACT_COUNT)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "activation: %d is not an em_activation", (int)act);
    op = act_names[act]; /* relu, elu, selu, sigmoid, tanh, softplus, softsign, hard_swish: the op's own name */
  }
  return apply1(g, op, &x, 1, at, n_at, out);
}

/* The layer's output: the activation applied, then named after the layer. */
static em_status finish(const em_layers *L, const char *name, em_var y, em_activation act, em_var *out) {
  em_status s = em_activation_apply(L, y, act, &y);
  if (!s && name) s = em_var_set_name(L->graph, y, name);
  if (!s) *out = y;
  return s;
}

/* -------------------------------------------------------------- dense --- */

API em_status em_dense(const em_layers *L, const char *name, em_var x, int64_t units, const em_dense_opts *opts,
                       em_var *out) {
  static const em_dense_opts none = {0};
  const em_dense_opts *o = opts ? opts : &none;
  em_status s = check_context(L, "dense");
  if (s) return s;
  char full[NAME_CAP];
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  if ((s = layer_name(L, name, "dense", full))) return s;
  if ((s = input_info(L, "dense", full, x, 1, EM_MAX_DIMS, &ndim, shape))) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "dense '%s': out is NULL", full);
  int64_t in = shape[ndim - 1];
  if (units < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "dense '%s': units is %" PRId64 "; it must be >= 1", full, units);
  if (in < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "dense '%s': the input's last axis has size %" PRId64 "; it must be known "
                   "(flatten images first)", full, in);
  em_var w, b, y;
  if ((s = make_param(L, full, "weight", 0, ROLE_WEIGHT, (double)in, o->weight_init, 2, (int64_t[]){units, in}, &w)))
    return s;
  em_attr tb = attr_int("transpose_b", 1);
  if ((s = apply1(L->graph, "matmul", (em_var[]){x, w}, 2, &tb, 1, &y))) return s;
  if (!o->no_bias) {
    if ((s = make_param(L, full, "bias", 0, ROLE_BIAS, (double)in, o->bias_init, 1, &units, &b))) return s;
    if ((s = apply1(L->graph, "add", (em_var[]){y, b}, 2, NULL, 0, &y))) return s;
  }
  return finish(L, full, y, o->activation, out);
}

/* -------------------------------------------------------- convolution --- */

/* One per-axis value: the list's, else the scalar (0: dflt). */
static int64_t axis_value(const int64_t *list, int i, int64_t scalar, int64_t dflt) {
  return list ? list[i] : scalar ? scalar : dflt;
}

/* Checks that every per-axis value is >= min. */
static em_status check_axes(const char *what, const char *name, const char *opt, const int64_t *v, int n, int64_t min) {
  for (int i = 0; i < n; i++)
    if (v[i] < min)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %s on spatial axis %d is %" PRId64 "; it must be >= %" PRId64,
                     label_of(what, name).text, opt, i, v[i], min);
  return EM_OK;
}

/* The window attributes shared by convolution and pooling: kernel_shape,
 * strides, pads or auto_pad, dilations. at must hold 4 more entries; the
 * arrays must outlive the em_apply. */
typedef struct window {
  int64_t k[MAX_SP], s[MAX_SP], d[MAX_SP], pads[2 * MAX_SP];
} window;

static em_status window_attrs(const char *what, const char *name, int nsp, int64_t kernel, const int64_t *kernel_shape,
                              int64_t stride, const int64_t *strides, int64_t stride_dflt_is_kernel, int64_t padding,
                              const int64_t *pads, int same, int64_t dilation, const int64_t *dilations, window *w,
                              em_attr *at, int *n_at) {
  for (int i = 0; i < nsp; i++) {
    w->k[i] = kernel_shape ? kernel_shape[i] : kernel;
    w->s[i] = axis_value(strides, i, stride, stride_dflt_is_kernel ? w->k[i] : 1);
    w->d[i] = axis_value(dilations, i, dilation, 1);
  }
  em_status s = check_axes(what, name, "the kernel", w->k, nsp, 1);
  if (!s) s = check_axes(what, name, "the stride", w->s, nsp, 1);
  if (!s) s = check_axes(what, name, "the dilation", w->d, nsp, 1);
  if (s) return s;
  if (padding < 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: padding is %" PRId64 "; it must be >= 0", label_of(what, name).text,
                   padding);
  if (same && (padding || pads))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: both same padding and explicit padding given; choose one",
                   label_of(what, name).text);
  at[(*n_at)++] = attr_ints("kernel_shape", w->k, nsp);
  at[(*n_at)++] = attr_ints("strides", w->s, nsp);
  at[(*n_at)++] = attr_ints("dilations", w->d, nsp);
  if (same) {
    at[(*n_at)++] = attr_str("auto_pad", "SAME_UPPER");
  } else {
    for (int i = 0; i < 2 * nsp; i++) w->pads[i] = pads ? pads[i] : padding;
    if ((s = check_axes(what, name, "the padding", w->pads, 2 * nsp, 0))) return s;
    at[(*n_at)++] = attr_ints("pads", w->pads, 2 * nsp);
  }
  return EM_OK;
}

API em_status em_conv(const em_layers *L, const char *name, em_var x, int64_t out_channels, int64_t kernel,
                      const em_conv_opts *opts, em_var *out) {
  static const em_conv_opts none = {0};
  const em_conv_opts *o = opts ? opts : &none;
  em_status s = check_context(L, "conv");
  if (s) return s;
  char full[NAME_CAP], buf[128];
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  if ((s = layer_name(L, name, "conv", full))) return s;
  if ((s = input_info(L, "conv", full, x, 3, 2 + MAX_SP, &ndim, shape))) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "conv '%s': out is NULL", full);
  int nsp = ndim - 2;
  int64_t c = shape[1], groups = o->groups ? o->groups : 1;
  if (c < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "conv '%s': the input %s has no known channel count (axis 1)", full,
                   shape_str(ndim, shape, buf, sizeof buf));
  if (out_channels < 1 || groups < 1 || c % groups || out_channels % groups)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "conv '%s': %" PRId64 " input and %" PRId64 " output channels in %" PRId64
                   " groups: both must be >= 1 and divisible by the groups", full, c, out_channels, groups);
  window w;
  em_attr at[8];
  int n_at = 0;
  if ((s = window_attrs("conv", full, nsp, kernel, o->kernel_shape, o->stride, o->strides, 0, o->padding, o->pads,
                        o->same, o->dilation, o->dilations, &w, at, &n_at)))
    return s;
  at[n_at++] = attr_int("group", groups);
  int64_t wshape[2 + MAX_SP] = {out_channels, c / groups}, receptive = 1;
  for (int i = 0; i < nsp; i++) receptive *= wshape[2 + i] = w.k[i];
  double fan_in = (double)(c / groups * receptive);
  em_var in[3] = {x};
  if ((s = make_param(L, full, "weight", 0, ROLE_WEIGHT, fan_in, o->weight_init, 2 + nsp, wshape, &in[1]))) return s;
  if (!o->no_bias && (s = make_param(L, full, "bias", 0, ROLE_BIAS, fan_in, o->bias_init, 1, &out_channels, &in[2])))
    return s;
  em_var y;
  if ((s = apply1(L->graph, "convolution", in, o->no_bias ? 2 : 3, at, n_at, &y)))
    return em_fail_context(s, "conv '%s' on input %s", full, shape_str(ndim, shape, buf, sizeof buf));
  return finish(L, full, y, o->activation, out);
}

/* ------------------------------------------------------------ pooling --- */

static em_status pool(const em_layers *L, const char *op, const char *what, em_var x, int64_t kernel,
                      const em_pool_opts *opts, em_var *out) {
  static const em_pool_opts none = {0};
  const em_pool_opts *o = opts ? opts : &none;
  em_status s = check_context(L, what);
  if (s) return s;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  char buf[128];
  if ((s = input_info(L, what, "", x, 3, 2 + MAX_SP, &ndim, shape))) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: out is NULL", what);
  window w;
  em_attr at[8];
  int n_at = 0;
  int is_max = !strcmp(op, "max_pool");
  if (!is_max && o->dilation > 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: dilation is for max pooling", what);
  if ((s = window_attrs(what, "", ndim - 2, kernel, o->kernel_shape, o->stride, o->strides, 1, o->padding, o->pads,
                        o->same, is_max ? o->dilation : 0, NULL, &w, at, &n_at)))
    return s;
  at[n_at++] = attr_int("ceil_mode", o->ceil_mode ? 1 : 0);
  if (!is_max) at[n_at++] = attr_int("count_include_pad", o->exclude_padding ? 0 : 1);
  s = apply1(L->graph, op, &x, 1, at, n_at, out);
  return s ? em_fail_context(s, "%s on input %s", what, shape_str(ndim, shape, buf, sizeof buf)) : EM_OK;
}

API em_status em_max_pool(const em_layers *L, em_var x, int64_t kernel, const em_pool_opts *opts, em_var *out) {
  return pool(L, "max_pool", "max pool", x, kernel, opts, out);
}

API em_status em_avg_pool(const em_layers *L, em_var x, int64_t kernel, const em_pool_opts *opts, em_var *out) {
  return pool(L, "average_pool", "average pool", x, kernel, opts, out);
}

API em_status em_global_avg_pool(const em_layers *L, em_var x, em_var *out) {
  em_status s = check_context(L, "global average pool");
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  if (!s) s = input_info(L, "global average pool", "", x, 3, EM_MAX_DIMS, &ndim, shape);
  if (s) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "global average pool: out is NULL");
  em_var y;
  s = apply1(L->graph, "global_average_pool", &x, 1, NULL, 0, &y);
  em_attr ax = attr_int("axis", 1);
  if (!s) s = apply1(L->graph, "flatten", &y, 1, &ax, 1, out);
  return s;
}

/* ------------------------------------------------------ normalisation --- */

API em_status em_batch_norm(const em_layers *L, const char *name, em_var x, const em_batch_norm_opts *opts,
                            em_var *out) {
  static const em_batch_norm_opts none = {0};
  const em_batch_norm_opts *o = opts ? opts : &none;
  em_status s = check_context(L, "batch norm");
  if (s) return s;
  char full[NAME_CAP], buf[128];
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  if ((s = layer_name(L, name, "bn", full))) return s;
  if ((s = input_info(L, "batch norm", full, x, 2, EM_MAX_DIMS, &ndim, shape))) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "batch norm '%s': out is NULL", full);
  double momentum = o->momentum ? o->momentum : 0.1, eps = o->epsilon ? o->epsilon : 1e-5;
  if (!(momentum > 0 && momentum <= 1) || !(eps > 0))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "batch norm '%s': momentum %g must be in (0, 1] and epsilon %g > 0", full,
                   momentum, eps);
  /* Per element: the op's per-channel statistics over [N, C * prod(s)]. */
  int64_t features = 1;
  for (int i = 1; i < (o->per_element ? ndim : 2); i++) {
    if (shape[i] < 1)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "batch norm '%s': the input %s: axis %d must be known", full,
                     shape_str(ndim, shape, buf, sizeof buf), i);
    features *= shape[i];
  }
  em_var in[5], y = x;
  if ((s = make_param(L, full, "weight", 0, ROLE_ONES, 0, NULL, 1, &features, &in[1])) ||
      (s = make_param(L, full, "bias", 0, ROLE_ZEROS, 0, NULL, 1, &features, &in[2])) ||
      (s = make_param(L, full, "running_mean", 1, ROLE_ZEROS, 0, NULL, 1, &features, &in[3])) ||
      (s = make_param(L, full, "running_var", 1, ROLE_ONES, 0, NULL, 1, &features, &in[4])))
    return s;
  int flat = o->per_element && ndim > 2;
  if (flat) {
    em_attr sh = attr_ints("shape", (int64_t[]){0, features}, 2);
    if ((s = apply1(L->graph, "reshape", &x, 1, &sh, 1, &y))) return s;
  }
  in[0] = y;
  em_attr at[2] = {attr_float("epsilon", eps), attr_float("momentum", 1 - momentum)};
  if ((s = apply1(L->graph, "batch_normalization", in, 5, at, 2, &y)))
    return em_fail_context(s, "batch norm '%s' on input %s", full, shape_str(ndim, shape, buf, sizeof buf));
  if (flat) {
    int64_t back[EM_MAX_DIMS];
    memcpy(back, shape, sizeof(int64_t) * (size_t)ndim);
    back[0] = 0; /* reshape copies the batch axis */
    em_attr sh = attr_ints("shape", back, ndim);
    if ((s = apply1(L->graph, "reshape", &y, 1, &sh, 1, &y))) return s;
  }
  return finish(L, full, y, o->activation, out);
}

API em_status em_layer_norm(const em_layers *L, const char *name, em_var x, const em_layer_norm_opts *opts,
                            em_var *out) {
  static const em_layer_norm_opts none = {0};
  const em_layer_norm_opts *o = opts ? opts : &none;
  em_status s = check_context(L, "layer norm");
  if (s) return s;
  char full[NAME_CAP], buf[128];
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  if ((s = layer_name(L, name, "ln", full))) return s;
  if ((s = input_info(L, "layer norm", full, x, 1, EM_MAX_DIMS, &ndim, shape))) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "layer norm '%s': out is NULL", full);
  int dims = o->dims ? o->dims : 1;
  double eps = o->epsilon ? o->epsilon : 1e-5;
  if (dims < 1 || dims > ndim)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "layer norm '%s': dims is %d for an input of rank %d", full, dims, ndim);
  for (int i = ndim - dims; i < ndim; i++)
    if (shape[i] < 1)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "layer norm '%s': the input %s: the normalised axis %d must be known",
                     full, shape_str(ndim, shape, buf, sizeof buf), i);
  const int64_t *nshape = shape + ndim - dims;
  em_var in[3] = {x};
  if ((s = make_param(L, full, "weight", 0, ROLE_ONES, 0, NULL, dims, nshape, &in[1]))) return s;
  if (!o->no_bias && (s = make_param(L, full, "bias", 0, ROLE_ZEROS, 0, NULL, dims, nshape, &in[2]))) return s;
  em_attr at[2] = {attr_int("axis", -dims), attr_float("epsilon", eps)};
  em_var y;
  if ((s = apply1(L->graph, "layer_normalization", in, o->no_bias ? 2 : 3, at, 2, &y))) return s;
  return finish(L, full, y, EM_ACT_NONE, out);
}

/* ------------------------------------------------------------- others --- */

API em_status em_dropout(const em_layers *L, const char *name, em_var x, double rate, em_var *out) {
  em_status s = check_context(L, "dropout");
  if (s) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "dropout: out is NULL");
  if (!(rate >= 0 && rate < 1)) return em_fail(EM_ERR_INVALID_ARGUMENT, "dropout: rate %g must be in [0, 1)", rate);
  if ((s = em_var_info(L->graph, x, NULL, NULL, NULL))) return em_fail_context(s, "dropout");
  if (rate == 0) {
    *out = x;
    return EM_OK;
  }
  char full[NAME_CAP];
  if ((s = layer_name(L, name, "dropout", full))) return s;
  em_attr at[2] = {attr_float("ratio", rate), attr_int("seed", (int64_t)em_layers_seed(L->seed, full))};
  em_var y;
  if ((s = apply1(L->graph, "dropout", &x, 1, at, 2, &y))) return em_fail_context(s, "dropout '%s'", full);
  return finish(L, full, y, EM_ACT_NONE, out);
}

API em_status em_embedding(const em_layers *L, const char *name, em_var indices, int64_t vocab, int64_t dim,
                           const em_embedding_opts *opts, em_var *out) {
  em_status s = check_context(L, "embedding");
  if (s) return s;
  char full[NAME_CAP];
  em_dtype dt;
  if ((s = layer_name(L, name, "embedding", full))) return s;
  if ((s = em_var_info(L->graph, indices, &dt, NULL, NULL))) return em_fail_context(s, "embedding '%s'", full);
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "embedding '%s': out is NULL", full);
  if (dt != EM_I32 && dt != EM_I64)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "embedding '%s': the indices are %s; they must be i32 or i64", full,
                   em_dtype_name(dt));
  if (vocab < 1 || dim < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "embedding '%s': vocab %" PRId64 " and dim %" PRId64 " must be >= 1",
                   full, vocab, dim);
  em_var w, y;
  if ((s = make_param(L, full, "weight", 0, ROLE_EMBEDDING, (double)dim, opts ? opts->weight_init : NULL, 2,
                      (int64_t[]){vocab, dim}, &w)))
    return s;
  em_attr ax = attr_int("axis", 0);
  if ((s = apply1(L->graph, "gather", (em_var[]){w, indices}, 2, &ax, 1, &y))) return s;
  return finish(L, full, y, EM_ACT_NONE, out);
}

API em_status em_flatten(const em_layers *L, em_var x, em_var *out) {
  em_status s = check_context(L, "flatten");
  if (s) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "flatten: out is NULL");
  em_attr ax = attr_int("axis", 1);
  return apply1(L->graph, "flatten", &x, 1, &ax, 1, out);
}

/* ---------------------------------------------------------- recurrent --- */

/* The weights of a recurrent layer (ONNX layouts), then em_recurrent_apply. */
static em_status recurrent_layer(const em_layers *L, const char *kind, em_recurrent_cell cell, const char *name,
                                 em_var x, int64_t hidden, const em_recurrent_layer_opts *opts,
                                 em_recurrent_outputs *out) {
  static const em_recurrent_layer_opts none = {0};
  const em_recurrent_layer_opts *o = opts ? opts : &none;
  em_status s = check_context(L, kind);
  if (s) return s;
  char full[NAME_CAP];
  int ndim;
  int64_t xs[EM_MAX_DIMS];
  if ((s = layer_name(L, name, kind, full)) || (s = input_info(L, kind, full, x, 3, 3, &ndim, xs))) return s;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': out is NULL", kind, full);
  const int64_t I = xs[2], D = o->rnn.direction == EM_DIR_BIDIRECTIONAL ? 2 : 1;
  const int64_t G = cell == EM_CELL_LSTM ? 4 : cell == EM_CELL_GRU ? 3 : 1;
  if (hidden < 1 || I < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': hidden %" PRId64 " and the input size %" PRId64
                   " must be known and >= 1", kind, full, hidden, I);
  if (o->peepholes && cell != EM_CELL_LSTM)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': peepholes are an LSTM option", kind, full);
  /* PyTorch: every weight and bias U(-1/sqrt(hidden), 1/sqrt(hidden)); CNTK:
   * glorot_uniform over each matrix's own fans (the engine's rule would read
   * [D, G H, I] as a convolution's kernel), zero biases. */
  const int cntk = L->init == EM_LAYERS_INIT_CNTK;
  const double k = 1 / sqrt((double)hidden);
  em_init wi = {.kind = EM_INIT_UNIFORM, .scale = cntk ? sqrt(6.0 / (double)(I + hidden)) : k};
  em_init ri = {.kind = EM_INIT_UNIFORM, .scale = cntk ? sqrt(3.0 / (double)hidden) : k};
  em_init bi = cntk ? (em_init){.kind = EM_INIT_CONSTANT} : (em_init){.kind = EM_INIT_UNIFORM, .scale = k};
  em_init zero = {.kind = EM_INIT_CONSTANT};
  /* The recurrence is built on unnamed placeholders and the parameters are
   * made only once it is accepted: a layer that em_recurrent_apply refuses
   * (an initial state of another size, an unknown activation) leaves no
   * parameters behind to train or count, and its name stays free. */
  const int64_t ws[3] = {D, G * hidden, I}, rs[3] = {D, G * hidden, hidden}, bs[2] = {D, 2 * G * hidden},
                ps[2] = {D, 3 * hidden};
  em_recurrent_inputs in = EM_RECURRENT_INPUTS(x, EM_NO_VAR, EM_NO_VAR);
  if ((s = em_placeholder(L->graph, NULL, L->dtype, 3, ws, &in.w)) ||
      (s = em_placeholder(L->graph, NULL, L->dtype, 3, rs, &in.r)) ||
      (!o->no_bias && (s = em_placeholder(L->graph, NULL, L->dtype, 2, bs, &in.b))) ||
      (o->peepholes && (s = em_placeholder(L->graph, NULL, L->dtype, 2, ps, &in.p))))
    return s;
  if (o->sequence_lens) in.sequence_lens = *o->sequence_lens;
  if (o->initial_h) in.initial_h = *o->initial_h;
  if (o->initial_c) in.initial_c = *o->initial_c;
  em_recurrent_outputs r;
  if ((s = em_recurrent_apply(L->graph, cell, &in, &o->rnn, &r))) return em_fail_context(s, "%s '%s'", kind, full);
  em_var w, rr, b = EM_NO_VAR, p = EM_NO_VAR;
  if ((s = make_param(L, full, "W", 0, ROLE_WEIGHT, 1, o->weight_init ? o->weight_init : &wi, 3, ws, &w)) ||
      (s = make_param(L, full, "R", 0, ROLE_WEIGHT, 1, o->weight_init ? o->weight_init : &ri, 3, rs, &rr)) ||
      (!o->no_bias && (s = make_param(L, full, "B", 0, ROLE_BIAS, 1, o->bias_init ? o->bias_init : &bi, 2, bs, &b))) ||
      (o->peepholes && (s = make_param(L, full, "P", 0, ROLE_ZEROS, 1, &zero, 2, ps, &p))))
    return s;
  if ((s = em_graph_replace(L->graph, in.w, w)) || (s = em_graph_replace(L->graph, in.r, rr)) ||
      (b != EM_NO_VAR && (s = em_graph_replace(L->graph, in.b, b))) ||
      (p != EM_NO_VAR && (s = em_graph_replace(L->graph, in.p, p))))
    return em_fail_context(s, "%s '%s'", kind, full);
  if ((s = em_var_set_name(L->graph, r.y, full))) return s;
  *out = r;
  return EM_OK;
}

API em_status em_lstm(const em_layers *L, const char *name, em_var x, int64_t hidden,
                      const em_recurrent_layer_opts *opts, em_recurrent_outputs *out) {
  return recurrent_layer(L, "lstm", EM_CELL_LSTM, name, x, hidden, opts, out);
}

API em_status em_gru(const em_layers *L, const char *name, em_var x, int64_t hidden,
                     const em_recurrent_layer_opts *opts, em_recurrent_outputs *out) {
  return recurrent_layer(L, "gru", EM_CELL_GRU, name, x, hidden, opts, out);
}

API em_status em_rnn(const em_layers *L, const char *name, em_var x, int64_t hidden,
                     const em_recurrent_layer_opts *opts, em_recurrent_outputs *out) {
  return recurrent_layer(L, "rnn", EM_CELL_RNN, name, x, hidden, opts, out);
}

API em_status em_layers_parameter_count(const em_graph *g, int64_t *out) {
  if (!g || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_layers_parameter_count: NULL argument");
  size_t n;
  em_status s = em_graph_parameters(g, NULL, 0, &n);
  if (s) return s;
  em_var *vars = malloc(sizeof(em_var) * (n ? n : 1));
  if (!vars) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_layers_parameter_count: %zu parameters", n);
  s = em_graph_parameters(g, vars, n, &n);
  int64_t total = 0;
  for (size_t i = 0; i < n && !s; i++) {
    int ndim;
    int64_t shape[EM_MAX_DIMS], numel = 1;
    s = em_var_info(g, vars[i], NULL, &ndim, shape);
    for (int d = 0; d < ndim && !s; d++) numel *= shape[d];
    total += numel;
  }
  free(vars);
  if (!s) *out = total;
  return s;
}

/* --------------------------------------------------------- sequential --- */

static const char *kind_name(em_layer_kind k) {
  static const char *const names[] = {
    [EM_LAYER_DENSE] = "dense", [EM_LAYER_CONV] = "conv", [EM_LAYER_MAX_POOL] = "max pool",
    [EM_LAYER_AVG_POOL] = "average pool", [EM_LAYER_GLOBAL_AVG_POOL] = "global average pool",
    [EM_LAYER_BATCH_NORM] = "batch norm", [EM_LAYER_LAYER_NORM] = "layer norm", [EM_LAYER_DROPOUT] = "dropout",
    [EM_LAYER_EMBEDDING] = "embedding", [EM_LAYER_ACTIVATION] = "activation", [EM_LAYER_FLATTEN] = "flatten",
  };
  return (unsigned)k < sizeof names / sizeof names[0] && names[k] ? names[k] : "unknown";
}

/* One spec applied; the spec's activation goes into dense, conv and batch
 * norm's own options (when they have none), so the layer's named output is
 * the activated one, as when called directly. *acted says it was. */
static em_status one_layer(const em_layers *L, em_var x, const em_layer *l, em_var *y, int *acted) {
  em_dense_opts d = l->dense;
  em_conv_opts c = l->conv;
  em_batch_norm_opts b = l->bn;
  *acted = 1;
  switch (l->kind) {
  case EM_LAYER_DENSE:
    if (!d.activation) d.activation = l->act; else *acted = !l->act;
    return em_dense(L, l->name, x, l->size, &d, y);
  case EM_LAYER_CONV:
    if (!c.activation) c.activation = l->act; else *acted = !l->act;
    return em_conv(L, l->name, x, l->size, l->kernel, &c, y);
  case EM_LAYER_BATCH_NORM:
    if (!b.activation) b.activation = l->act; else *acted = !l->act;
    return em_batch_norm(L, l->name, x, &b, y);
  default: *acted = l->kind == EM_LAYER_ACTIVATION || !l->act;
  }
  switch (l->kind) {
  case EM_LAYER_MAX_POOL: return em_max_pool(L, x, l->kernel, &l->pool, y);
  case EM_LAYER_AVG_POOL: return em_avg_pool(L, x, l->kernel, &l->pool, y);
  case EM_LAYER_GLOBAL_AVG_POOL: return em_global_avg_pool(L, x, y);
  case EM_LAYER_LAYER_NORM: return em_layer_norm(L, l->name, x, &l->ln, y);
  case EM_LAYER_DROPOUT: return em_dropout(L, l->name, x, l->rate, y);
  case EM_LAYER_EMBEDDING: return em_embedding(L, l->name, x, l->vocab, l->size, &l->embedding, y);
  case EM_LAYER_ACTIVATION: return em_activation_apply(L, x, l->act, y);
  case EM_LAYER_FLATTEN: return em_flatten(L, x, y);
  default: break;
  }
  return em_fail(EM_ERR_INVALID_ARGUMENT, "kind %d is not an em_layer_kind", (int)l->kind);
}

API em_status em_sequential(const em_layers *L, em_var x, const em_layer *layers, int n_layers, em_var *out) {
  em_status s = check_context(L, "em_sequential");
  if (s) return s;
  if (!out || (n_layers && !layers) || n_layers < 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequential: NULL argument or negative count");
  em_var y = x;
  for (int i = 0; i < n_layers; i++) {
    const em_layer *l = &layers[i];
    int acted;
    s = one_layer(L, y, l, &y, &acted);
    if (!s && !acted) s = em_activation_apply(L, y, l->act, &y);
    if (s) return em_fail_context(s, "em_sequential: layer %d (%s)", i, kind_name(l->kind));
  }
  *out = y;
  return EM_OK;
}
