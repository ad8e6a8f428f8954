/* ONNX graph -> Ember graph (see onnx_import.h).
 *
 * One translation per ONNX op_type (the table `trs` at the end, sorted by
 * name). Most map to one Ember op with the same attributes; the others:
 *   - ONNX inputs that Ember takes as attributes (Reshape shape, Slice
 *     starts/ends/axes/steps, Squeeze/Unsqueeze axes, the axes of every
 *     Reduce op, Clip min/max, Pad pads/constant_value/axes, Expand shape,
 *     Tile repeats, TopK K, OneHot depth/values, Split split, Dropout
 *     ratio/training_mode) are read at build time (value_of: initializers,
 *     Constant nodes, fed inputs, or a run of the graph built so far);
 *   - ONNX defaults that differ from Ember's are passed explicitly (keepdims
 *     defaults to 1 in ONNX, 0 in Ember);
 *   - opset-dependent semantics: Softmax, LogSoftmax and Hardmax before opset
 *     13 flatten the input to 2-D at `axis` (flatten, op on the last axis,
 *     reshape_like back). Attributes that became inputs (Squeeze, Unsqueeze,
 *     Split and ReduceSum at 13, Pad at 11, the other reductions at 18) are
 *     read from whichever form the node has, so one translation serves every
 *     opset. Reductions: empty axes reduce every axis, or, with
 *     noop_with_empty_axes=1 (ReduceSum 13, others 18), none: the identity
 *     for Sum/Mean/Max/Min/Prod, the element-wise step for the composite
 *     ones (ReduceSumSquare x^2, ReduceL1 |x|, ReduceLogSum log x), as a
 *     reduction over a new size-1 axis. Split-18's num_outputs cuts chunks
 *     of ceil(dim / n), the last one smaller (7 in 3: 3 3 1); Pad-18's axes
 *     input says which axes `pads` covers; Pad-19's mode "wrap" is a gather
 *     of constant indices per padded axis;
 *   - variadic Sum/Max/Min/Mean chain the binary op (Mean then divides);
 *   - lowerings onto several Ember ops, where Ember has no single op:
 *       Pow with an integer base or mixed types  cast to the base's float type,
 *                                                pow (ints go through f64 and back)
 *       Hardmax            argmax + one_hot
 *       PRelu              where(x < 0, slope * x, x)
 *       Celu               alpha * elu(x / alpha)
 *       Mish               x * tanh(softplus(x))
 *       Einsum             diagonals: where(eye, x, 0) + reduce_sum; labels no later
 *                          operand needs: reduce_sum; each pair: transpose, reshape,
 *                          one batched matmul; transpose to the output's order
 *       Shrink             where(x < -lambd, x + bias, where(x > lambd, x - bias, 0))
 *       Trilu              where(mask, x, 0) with a constant mask from the static shape and k
 *       GatherElements     where(one_hot(indices, axis), data, 0) summed over the one-hot axis
 *       NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
 *                          (log_softmax +) one_hot of the targets (ignore_index mapped
 *                          out of range), reductions for the weights and reductions
 *       MeanVarianceNormalization  (x - mean) / sqrt(mean((x - mean)^2) + 1e-9)
 *       LayerNormalization's Mean and InvStdDev outputs   reduce_mean, rsqrt
 *   - cases ONNX defines and Ember's ops refuse: Clip with min > max (every
 *     value becomes max: clip with min = max); ReduceMax/ReduceMin over an
 *     axis of size 0 (-inf / +inf, or the integer type's extreme: a
 *     constant, from the static shape);
 *   - Shape, Size and ConstantOfShape become constants (shapes are static
 *     once the inputs' shapes are known), and so does Range (its inputs read
 *     at build time); Constant becomes a constant.
 *   - sequences (SplitToSequence, SequenceConstruct/At/Insert/Erase/Length/
 *     Empty, ConcatFromSequence) exist only in the importer, as lists of
 *     Ember values, positions read at build time: torch.split exported
 *     without the optimiser becomes SplitToSequence + SequenceAt, i.e. the
 *     slices; a sequence cannot be a graph input or output;
 *   - LSTM, GRU, RNN: em_recurrent_apply (training/recurrent.c), the
 *     recurrence unrolled over the static sequence length;
 *   - Dropout in inference (or with ratio 0) is the identity, its mask all
 *     true; BatchNormalization is inference mode only.
 * Anything else (an unknown attribute, a training-mode flag, an element
 * type Ember lacks, an optional output not produced) is refused with
 * EM_ERR_UNSUPPORTED naming it, never silently ignored. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "onnx_import.h"

/* dtype masks for the translation table (input 0's dtype). */
#define D(t) (1u << (t))
#define DT_FLT (D(EM_F32) | D(EM_F64))
#define DT_HALF (D(EM_F16) | D(EM_BF16)) /* the ops that compute them through f32 (engine/half.c) */
#define DT_INT (D(EM_I32) | D(EM_I64))
#define DT_NUM (DT_FLT | DT_INT)
#define DT_CMP (DT_NUM | D(EM_U8) | D(EM_BOOL))
#define DT_BOOL D(EM_BOOL)
#define DT_ANY 0u
#define DT_SEQ (1u << 31) /* input 0 is a sequence (no dtype check) */

/* ------------------------------------------------------------- dtypes --- */

em_status em_onnx_dtype_to_em(em_onnx_dtype t, em_dtype *out) {
  switch (t) {
  case EM_ONNX_FLOAT: *out = EM_F32; return EM_OK;
  case EM_ONNX_DOUBLE: *out = EM_F64; return EM_OK;
  case EM_ONNX_FLOAT16: *out = EM_F16; return EM_OK;
  case EM_ONNX_BFLOAT16: *out = EM_BF16; return EM_OK;
  case EM_ONNX_INT32: *out = EM_I32; return EM_OK;
  case EM_ONNX_INT64: *out = EM_I64; return EM_OK;
  case EM_ONNX_UINT8: *out = EM_U8; return EM_OK;
  case EM_ONNX_BOOL: *out = EM_BOOL; return EM_OK;
  default:
    return em_fail(EM_ERR_UNSUPPORTED, "ONNX element type %s has no Ember dtype", em_onnx_dtype_name(t));
  }
}

em_status em_onnx_tensor_to_em(const em_onnx_tensor *t, em_tensor **out) {
  if (!t || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_tensor_to_em: NULL argument");
  em_dtype dt;
  em_status s = em_onnx_dtype_to_em(t->dtype, &dt);
  if (s) return em_fail_context(s, "tensor '%s'", t->name ? t->name : "");
  if (t->rank > EM_MAX_DIMS)
    return em_fail(EM_ERR_UNSUPPORTED, "tensor '%s' has rank %zu; Ember tensors have at most %d dimensions",
                   t->name ? t->name : "", t->rank, EM_MAX_DIMS);
  return em_tensor_from_host(em_cpu(), dt, (int)t->rank, t->dims, t->data, t->nbytes, out);
}

/* ------------------------------------------------------------ context --- */

typedef struct imp {
  em_graph *g;
  const em_onnx_model *m;
  int64_t opset;
  /* ONNX value names -> Ember values */
  char **names;
  em_var *vars;
  size_t n_names, cap_names;
  /* Values known at build time, by em_var (retained tensors). */
  em_tensor **known;
  size_t n_known;
  /* Graph inputs with values: what a folding run is fed. */
  em_feed *feeds;
  int n_feeds;
  int all_fed;                  /* every graph input has a value */
  const em_onnx_node *node;     /* the node being translated (messages) */
  /* Scratch memory of the node being translated. */
  void **tmp;
  size_t n_tmp, cap_tmp;
  /* ONNX sequence values (lists of tensors): name -> its elements. They live
   * only in the importer: each element is an Ember value. */
  struct seqval {
    char *name;
    em_var *vars;
    int n;
  } *seqs;
  size_t n_seqs, cap_seqs;
} imp;

/* The value of a variable that holds a sequence (in[i], out[j]). */
#define SEQ_VAR ((em_var)-2)

static const char *node_label(const imp *c, char *buf, size_t cap) {
  const em_onnx_node *n = c->node;
  if (!n) return "ONNX graph";
  if (n->name && n->name[0]) snprintf(buf, cap, "ONNX %s node '%s'", n->op_type, n->name);
  else snprintf(buf, cap, "ONNX %s", n->op_type);
  return buf;
}

/* EM_ERR_UNSUPPORTED "ONNX <Op> [node 'name']: <message>". */
static em_status unsup(const imp *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static em_status unsup(const imp *c, const char *fmt, ...) {
  char msg[512], lab[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return em_fail(EM_ERR_UNSUPPORTED, "%s: %s", node_label(c, lab, sizeof lab), msg);
}

static em_status bad(const imp *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static em_status bad(const imp *c, const char *fmt, ...) {
  char msg[512], lab[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %s", node_label(c, lab, sizeof lab), msg);
}

/* Zeroed scratch memory living until the current node is translated. */
static void *tmp(imp *c, size_t bytes) {
  if (c->n_tmp == c->cap_tmp) {
    size_t cap = c->cap_tmp ? 2 * c->cap_tmp : 16;
    void **p = realloc(c->tmp, cap * sizeof *p);
    if (!p) return NULL;
    c->tmp = p, c->cap_tmp = cap;
  }
  void *b = calloc(1, bytes ? bytes : 1);
  if (b) c->tmp[c->n_tmp++] = b;
  return b;
}

static void tmp_free(imp *c) {
  for (size_t i = 0; i < c->n_tmp; i++) free(c->tmp[i]);
  c->n_tmp = 0;
}

#define OOM() em_fail(EM_ERR_OUT_OF_MEMORY, "ONNX import: out of memory")

/* ------------------------------------------------------------- values --- */

static em_status name_set(imp *c, const char *name, em_var v) {
  for (size_t i = 0; i < c->n_names; i++)
    if (strcmp(c->names[i], name) == 0) {
      c->vars[i] = v; /* ONNX forbids redefinition; the last one wins */
      return EM_OK;
    }
  if (c->n_names == c->cap_names) {
    size_t cap = c->cap_names ? 2 * c->cap_names : 32;
    char **nn = realloc(c->names, cap * sizeof *nn);
    if (!nn) return OOM();
    c->names = nn;
    em_var *vv = realloc(c->vars, cap * sizeof *vv);
    if (!vv) return OOM();
    c->vars = vv, c->cap_names = cap;
  }
  char *d = strdup(name);
  if (!d) return OOM();
  c->names[c->n_names] = d;
  c->vars[c->n_names++] = v;
  return EM_OK;
}

static int name_get(const imp *c, const char *name, em_var *v) {
  for (size_t i = c->n_names; i-- > 0;)
    if (strcmp(c->names[i], name) == 0) {
      *v = c->vars[i];
      return 1;
    }
  return 0;
}

/* Records the sequence `name` (vars copied); ONNX forbids redefinition, the
 * last one wins. */
static em_status seq_set(imp *c, const char *name, const em_var *vars, int n) {
  em_var *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  char *d = strdup(name);
  if (!v || !d) {
    free(v), free(d);
    return OOM();
  }
  if (n) memcpy(v, vars, (size_t)n * sizeof *v);
  for (size_t i = 0; i < c->n_seqs; i++)
    if (strcmp(c->seqs[i].name, name) == 0) {
      free(c->seqs[i].vars), free(d);
      c->seqs[i].vars = v, c->seqs[i].n = n;
      return EM_OK;
    }
  if (c->n_seqs == c->cap_seqs) {
    size_t cap = c->cap_seqs ? 2 * c->cap_seqs : 8;
    struct seqval *q = realloc(c->seqs, cap * sizeof *q);
    if (!q) {
      free(v), free(d);
      return OOM();
    }
    c->seqs = q, c->cap_seqs = cap;
  }
  c->seqs[c->n_seqs++] = (struct seqval){d, v, n};
  return EM_OK;
}

static const struct seqval *seq_get(const imp *c, const char *name) {
  for (size_t i = c->n_seqs; i-- > 0;)
    if (strcmp(c->seqs[i].name, name) == 0) return &c->seqs[i];
  return NULL;
}

static em_status known_grow(imp *c) {
  size_t need = em_graph_value_count(c->g);
  if (need <= c->n_known) return EM_OK;
  em_tensor **k = realloc(c->known, need * sizeof *k);
  if (!k) return OOM();
  memset(k + c->n_known, 0, (need - c->n_known) * sizeof *k);
  c->known = k, c->n_known = need;
  return EM_OK;
}

/* Records t (retained) as the build-time value of v. */
static em_status known_set(imp *c, em_var v, em_tensor *t) {
  em_status s = known_grow(c);
  if (s) return s;
  em_tensor_release(c->known[v]);
  c->known[v] = em_tensor_retain(t);
  return EM_OK;
}

static em_status vinfo(const imp *c, em_var v, em_shape *s) {
  memset(s, 0, sizeof *s);
  return em_var_info(c->g, v, &s->dtype, &s->ndim, s->dims);
}

static int static_shape(const em_shape *s) {
  for (int i = 0; i < s->ndim; i++)
    if (s->dims[i] < 0) return 0;
  return 1;
}

/* The value of v while the graph is built (borrowed; owned by c->known):
 * known values as they are, others computed by running the graph built so
 * far on the fed inputs. `what` names it in messages. */
static em_status value_of(imp *c, em_var v, const char *what, em_tensor **out) {
  em_status s = known_grow(c);
  if (s) return s;
  if (v < 0 || (size_t)v >= c->n_known) return bad(c, "%s is missing", what);
  if (c->known[v]) {
    *out = c->known[v];
    return EM_OK;
  }
  em_exec *e = NULL;
  em_tensor *t = NULL;
  s = em_exec_create(c->g, &v, 1, em_cpu(), &e);
  if (!s) s = em_exec_run(e, c->feeds, c->n_feeds, &t);
  em_exec_free(e);
  if (s) {
    char lab[256], why[512];
    snprintf(why, sizeof why, "%s", em_last_error()); /* em_fail writes where em_last_error points */
    if (!c->all_fed)
      return em_fail(EM_ERR_UNSUPPORTED,
                     "%s: %s must be known when the graph is built (Ember takes it as an attribute), and computing "
                     "it failed (are all inputs given values?): %s",
                     node_label(c, lab, sizeof lab), what, why);
    return em_fail_context(s, "%s: computing %s at build time", node_label(c, lab, sizeof lab), what);
  }
  c->known[v] = t;
  *out = t;
  return EM_OK;
}

/* An integer tensor's elements as int64 (scratch memory). */
static em_status ints_of(imp *c, em_var v, const char *what, int64_t **vals, int *n) {
  em_tensor *t;
  em_status s = value_of(c, v, what, &t);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(t);
  int64_t k = em_tensor_numel(t);
  if (dt != EM_I64 && dt != EM_I32) return unsup(c, "%s is %s; integers expected", what, em_dtype_name(dt));
  int64_t *o = tmp(c, (size_t)(k ? k : 1) * sizeof *o);
  void *raw = tmp(c, (size_t)(k ? k : 1) * em_dtype_size(dt));
  if (!o || !raw) return OOM();
  if ((s = em_tensor_to_host(t, raw, (size_t)k * em_dtype_size(dt)))) return s;
  for (int64_t i = 0; i < k; i++) o[i] = dt == EM_I64 ? ((int64_t *)raw)[i] : ((int32_t *)raw)[i];
  *vals = o;
  *n = (int)k;
  return EM_OK;
}

/* Element i of a numeric host buffer as a double. */
static double elem_as_double(em_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case EM_F32: return ((const float *)p)[i];
  case EM_F64: return ((const double *)p)[i];
  case EM_I32: return ((const int32_t *)p)[i];
  case EM_I64: return (double)((const int64_t *)p)[i];
  case EM_U8: case EM_BOOL: return ((const uint8_t *)p)[i];
  default: return NAN;
  }
}

/* Every element of a numeric tensor value as doubles (scratch memory). */
static em_status doubles_of(imp *c, em_var v, const char *what, double **vals, int *n) {
  em_tensor *t;
  em_status s = value_of(c, v, what, &t);
  if (s) return s;
  em_dtype dt = em_tensor_dtype(t);
  if (dt == EM_F16 || dt == EM_BF16)
    return unsup(c, "%s is %s; read as a number only from f32 f64 i32 i64 u8 bool", what, em_dtype_name(dt));
  int64_t k = em_tensor_numel(t);
  void *raw = tmp(c, (size_t)(k ? k : 1) * em_dtype_size(dt));
  double *o = tmp(c, (size_t)(k ? k : 1) * sizeof *o);
  if (!raw || !o) return OOM();
  if ((s = em_tensor_to_host(t, raw, (size_t)k * em_dtype_size(dt)))) return s;
  for (int64_t i = 0; i < k; i++) o[i] = elem_as_double(dt, raw, i);
  *vals = o;
  *n = (int)k;
  return EM_OK;
}

/* A one-element tensor value as a double. */
static em_status scalar_of(imp *c, em_var v, const char *what, double *out) {
  double *d;
  int n;
  em_status s = doubles_of(c, v, what, &d, &n);
  if (s) return s;
  if (n != 1) return unsup(c, "%s has %d elements; one expected", what, n);
  *out = d[0];
  return EM_OK;
}

/* ------------------------------------------------------- graph helpers --- */

static em_status ap(imp *c, const char *op, const em_var *in, int n_in, const em_attr *at, int n_at, em_var *out,
                    int n_out) {
  em_status s = em_apply(c->g, op, in, n_in, at, n_at, out, n_out);
  if (s) {
    char lab[256];
    return em_fail_context(s, "%s", node_label(c, lab, sizeof lab));
  }
  return EM_OK;
}

static em_status ap1(imp *c, const char *op, em_var x, const em_attr *at, int n_at, em_var *out) {
  return ap(c, op, &x, 1, at, n_at, out, 1);
}

static em_status ap2(imp *c, const char *op, em_var x, em_var y, em_var *out) {
  em_var in[2] = {x, y};
  return ap(c, op, in, 2, NULL, 0, out, 1);
}

/* A constant holding t (which stays known at build time). */
static em_status const_of_tensor(imp *c, em_tensor *t, em_var *out) {
  em_status s = em_constant(c->g, t, out);
  if (!s) s = known_set(c, *out, t);
  return s;
}

/* A constant of a dtype and shape from host data (NULL: zeros). */
static em_status const_new(imp *c, em_dtype dt, int ndim, const int64_t *shape, const void *data, em_var *out) {
  em_tensor *t;
  em_status s = em_tensor_zeros(em_cpu(), dt, ndim, shape, &t);
  if (s) return s;
  if (data) memcpy(em_tensor_data(t), data, (size_t)em_tensor_numel(t) * em_dtype_size(dt));
  s = const_of_tensor(c, t, out);
  em_tensor_release(t);
  return s;
}

static em_status const_i64(imp *c, int ndim, const int64_t *shape, const int64_t *data, em_var *out) {
  return const_new(c, EM_I64, ndim, shape, data, out);
}

static em_status scalar(imp *c, em_dtype dt, double v, em_var *out) {
  em_status s = em_scalar(c->g, dt, v, out);
  if (s) {
    char lab[256];
    return em_fail_context(s, "%s", node_label(c, lab, sizeof lab));
  }
  return EM_OK;
}

static em_status cast_to(imp *c, em_var x, em_dtype dt, em_var *out) {
  em_shape s;
  em_status st = vinfo(c, x, &s);
  if (st) return st;
  if (s.dtype == dt) {
    *out = x;
    return EM_OK;
  }
  em_attr a = em_attr_i("to", dt);
  return ap1(c, "cast", x, &a, 1, out);
}

/* ------------------------------------------------------ ONNX attributes --- */

static const em_onnx_attr *oattr(const em_onnx_node *n, const char *name) { return em_onnx_node_attr(n, name); }

static em_status oint(imp *c, const em_onnx_node *n, const char *name, int64_t dflt, int64_t *out) {
  const em_onnx_attr *a = oattr(n, name);
  *out = dflt;
  if (!a) return EM_OK;
  if (a->type != EM_ONNX_ATTR_INT)
    return unsup(c, "attribute '%s' is %s; int expected", name, em_onnx_attr_type_name(a->type));
  *out = a->i;
  return EM_OK;
}

static em_status ofloat(imp *c, const em_onnx_node *n, const char *name, double dflt, double *out) {
  const em_onnx_attr *a = oattr(n, name);
  *out = dflt;
  if (!a) return EM_OK;
  if (a->type == EM_ONNX_ATTR_FLOAT) *out = a->f;
  else if (a->type == EM_ONNX_ATTR_INT) *out = (double)a->i;
  else return unsup(c, "attribute '%s' is %s; float expected", name, em_onnx_attr_type_name(a->type));
  return EM_OK;
}

static em_status ostr(imp *c, const em_onnx_node *n, const char *name, const char *dflt, const char **out) {
  const em_onnx_attr *a = oattr(n, name);
  *out = dflt;
  if (!a) return EM_OK;
  if (a->type != EM_ONNX_ATTR_STRING)
    return unsup(c, "attribute '%s' is %s; string expected", name, em_onnx_attr_type_name(a->type));
  *out = a->s.data;
  return EM_OK;
}

/* INTS attribute; *present = 0 (and *n = 0) when absent. */
static em_status oints(imp *c, const em_onnx_node *n, const char *name, const int64_t **v, int *cnt, int *present) {
  const em_onnx_attr *a = oattr(n, name);
  *v = NULL, *cnt = 0, *present = 0;
  if (!a) return EM_OK;
  if (a->type != EM_ONNX_ATTR_INTS)
    return unsup(c, "attribute '%s' is %s; ints expected", name, em_onnx_attr_type_name(a->type));
  *v = a->ints, *cnt = (int)a->n, *present = 1;
  return EM_OK;
}

/* An ONNX attribute as the Ember attribute of the same name. */
static em_status attr_pass(imp *c, const em_onnx_attr *a, em_attr *out) {
  switch (a->type) {
  case EM_ONNX_ATTR_INT: *out = em_attr_i(a->name, a->i); return EM_OK;
  case EM_ONNX_ATTR_FLOAT: *out = em_attr_f(a->name, a->f); return EM_OK;
  case EM_ONNX_ATTR_INTS: *out = em_attr_is(a->name, a->ints, (int)a->n); return EM_OK;
  case EM_ONNX_ATTR_STRING: *out = em_attr_s(a->name, a->s.data); return EM_OK;
  case EM_ONNX_ATTR_FLOATS: {
    double *d = tmp(c, (a->n ? a->n : 1) * sizeof *d);
    if (!d) return OOM();
    for (size_t i = 0; i < a->n; i++) d[i] = a->floats[i];
    *out = em_attr_fs(a->name, d, (int)a->n);
    return EM_OK;
  }
  default:
    return unsup(c, "attribute '%s' of type %s is not supported", a->name, em_onnx_attr_type_name(a->type));
  }
}

/* 1 when name is one of the comma-separated words of list. */
static int in_list(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == len && strncmp(p, name, len) == 0) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* ---------------------------------------------------- the translations --- */

struct tr;
typedef em_status (*tr_fn)(imp *c, const em_onnx_node *n, const struct tr *t, const em_var *in, em_var *out);
typedef struct tr {
  const char *onnx;     /* op_type */
  tr_fn fn;
  const char *ember;    /* the Ember op (for the generic translations) */
  const char *attrs;    /* the ONNX attributes accepted, comma-separated */
  unsigned dtypes;      /* input 0's dtypes accepted (DT_ANY: the ops decide) */
  const char *how;      /* the Ember ops it becomes, for reports */
} tr;

/* Number of inputs given (omitted trailing ones not counted); fails when an
 * omitted input sits between given ones, which `same` cannot express. */
static em_status given_inputs(imp *c, const em_onnx_node *n, const em_var *in, int *k) {
  int last = -1;
  for (int i = 0; i < (int)n->n_inputs; i++)
    if (in[i] >= 0) last = i;
  for (int i = 0; i < last; i++)
    if (in[i] < 0) return unsup(c, "optional input %d omitted before a given one", i);
  *k = last + 1;
  return EM_OK;
}

/* One Ember op, the same inputs, the attributes passed through by name. */
static em_status tr_same(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  int k;
  em_status s = given_inputs(c, n, in, &k);
  if (s) return s;
  em_attr *at = tmp(c, (n->n_attrs + 1) * sizeof *at);
  if (!at) return OOM();
  for (size_t i = 0; i < n->n_attrs; i++)
    if ((s = attr_pass(c, &n->attrs[i], &at[i]))) return s;
  const em_op_def *def = em_op_find(t->ember);
  if (!def) return unsup(c, "Ember op '%s' is not in this build", t->ember);
  if ((int)n->n_outputs > def->n_outputs)
    return unsup(c, "%zu outputs requested; Ember's '%s' has %d", n->n_outputs, t->ember, def->n_outputs);
  em_var o[8];
  if (def->n_outputs > 8) return unsup(c, "Ember's '%s' has %d outputs", t->ember, def->n_outputs);
  if ((s = ap(c, t->ember, in, k, at, (int)n->n_attrs, o, def->n_outputs))) return s;
  for (size_t j = 0; j < n->n_outputs; j++) out[j] = o[j];
  return EM_OK;
}

/* Sum, Max, Min: the binary op chained left to right (one input: identity). */
static em_status tr_chain(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  if (n->n_inputs < 1 || in[0] < 0) return bad(c, "needs at least one input");
  em_var acc = in[0];
  em_status s;
  if (n->n_inputs == 1) return ap1(c, "identity", acc, NULL, 0, &out[0]);
  for (size_t i = 1; i < n->n_inputs; i++) {
    if (in[i] < 0) return bad(c, "input %zu is empty", i);
    if ((s = ap2(c, t->ember, acc, in[i], &acc))) return s;
  }
  out[0] = acc;
  return EM_OK;
}

/* Mean: the sum (chained adds) divided by the number of inputs. */
static em_status tr_mean(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  em_var sum, k;
  em_shape sh;
  tr add = {"Sum", tr_chain, "add", "", 0, NULL};
  em_status s = tr_chain(c, n, &add, in, &sum);
  if (!s) s = vinfo(c, in[0], &sh);
  if (!s) s = scalar(c, sh.dtype, (double)n->n_inputs, &k);
  if (!s) s = ap2(c, "div", sum, k, &out[0]);
  return s;
}

/* Pow: Ember's pow takes one float dtype. The exponent is cast to the base's
 * type; an integer base goes through f64 and is cast back (exact while the
 * result fits 53 bits), as ONNX's output has the base's type. */
static em_status tr_pow(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)n;
  em_shape xs, ys;
  em_status s = vinfo(c, in[0], &xs);
  if (!s) s = vinfo(c, in[1], &ys);
  if (s) return s;
  if (!(D(ys.dtype) & DT_NUM)) return unsup(c, "exponent of dtype %s", em_dtype_name(ys.dtype));
  em_dtype work = em_dtype_is_float(xs.dtype) ? xs.dtype : EM_F64;
  em_var x, y, r;
  if ((s = cast_to(c, in[0], work, &x)) || (s = cast_to(c, in[1], work, &y)) || (s = ap2(c, "pow", x, y, &r))) return s;
  return cast_to(c, r, xs.dtype, &out[0]);
}

/* --- softmax family --- */

/* Softmax, LogSoftmax (t->ember) and Hardmax (t->ember NULL) along `axis`
 * of a tensor whose axis is already the one to use. */
static em_status softmax_along(imp *c, const tr *t, em_var x, int axis, em_var *out) {
  if (t->ember) {
    em_attr a = em_attr_i("axis", axis);
    return ap1(c, t->ember, x, &a, 1, out);
  }
  em_shape sh;
  em_status s = vinfo(c, x, &sh);
  if (s) return s;
  if (axis < 0) axis += sh.ndim;
  if (sh.dims[axis] < 0) return unsup(c, "Hardmax along a dynamic axis");
  em_var idx;
  em_attr aa[2] = {em_attr_i("axis", axis), em_attr_i("keepdims", 0)};
  if ((s = ap1(c, "argmax", x, aa, 2, &idx))) return s;
  em_attr oh[3] = {em_attr_i("depth", sh.dims[axis]), em_attr_i("axis", axis), em_attr_i("dtype", sh.dtype)};
  return ap1(c, "one_hot", idx, oh, 3, out);
}

static em_status tr_softmax(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  int64_t axis;
  em_shape sh;
  em_status s = oint(c, n, "axis", c->opset >= 13 ? -1 : 1, &axis);
  if (!s) s = vinfo(c, in[0], &sh);
  if (s) return s;
  if (axis < -sh.ndim || axis >= (sh.ndim ? sh.ndim : 1))
    return bad(c, "axis %lld is out of range for rank %d", (long long)axis, sh.ndim);
  if (axis < 0) axis += sh.ndim;
  if (c->opset >= 13 || axis == sh.ndim - 1) return softmax_along(c, t, in[0], (int)axis, out);
  /* Before opset 13 the input is seen as 2-D [prod(dims[:axis]), prod(dims[axis:])]. */
  em_var flat, y;
  em_attr fa = em_attr_i("axis", axis);
  if ((s = ap1(c, "flatten", in[0], &fa, 1, &flat)) || (s = softmax_along(c, t, flat, 1, &y))) return s;
  return ap2(c, "reshape_like", y, in[0], &out[0]);
}

/* An int list from input `idx` (when given) or else attribute `name`;
 * *present says whether either was there. */
static em_status ints_input_or_attr(imp *c, const em_onnx_node *n, const em_var *in, size_t idx, const char *name,
                                    const int64_t **v, int *cnt, int *present) {
  if (idx < n->n_inputs && in[idx] >= 0) {
    char what[64];
    snprintf(what, sizeof what, "input '%s'", name);
    int64_t *vv = NULL;
    em_status s = ints_of(c, in[idx], what, &vv, cnt);
    *v = vv, *present = 1;
    return s;
  }
  return oints(c, n, name, v, cnt, present);
}

/* --- reductions --- */

/* ReduceMax / ReduceMin over an axis of size 0: ONNX defines the result
 * (-inf and +inf, or the integer type's extreme), Ember's ops refuse it. With
 * a static shape the output is that constant (*done = 1); else the op
 * decides. */
static em_status reduce_empty_extreme(imp *c, const tr *t, em_var x, const int64_t *axes, int n_axes,
                                      int64_t keepdims, em_var *out, int *done) {
  int is_max = strcmp(t->ember, "reduce_max") == 0;
  *done = 0;
  if (!is_max && strcmp(t->ember, "reduce_min") != 0) return EM_OK;
  em_shape sh;
  em_status s = vinfo(c, x, &sh);
  if (s) return s;
  if (!static_shape(&sh)) return EM_OK;
  unsigned mask = n_axes ? 0u : (1u << sh.ndim) - 1u;
  for (int i = 0; i < n_axes; i++) {
    if (axes[i] < -sh.ndim || axes[i] >= sh.ndim) return EM_OK; /* the op names the bad axis */
    mask |= 1u << (axes[i] < 0 ? axes[i] + sh.ndim : axes[i]);
  }
  int empty = 0;
  int64_t dims[EM_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < sh.ndim; i++) {
    if (!(mask & (1u << i))) dims[nd++] = sh.dims[i];
    else {
      empty |= sh.dims[i] == 0;
      if (keepdims) dims[nd++] = 1;
    }
  }
  if (!empty) return EM_OK;
  em_tensor *v;
  if ((s = em_tensor_zeros(em_cpu(), sh.dtype, nd, dims, &v))) return s;
  void *d = em_tensor_data(v);
  for (int64_t i = 0; i < em_tensor_numel(v); i++) {
    switch (sh.dtype) {
    case EM_F32: ((float *)d)[i] = is_max ? -INFINITY : INFINITY; break;
    case EM_F64: ((double *)d)[i] = is_max ? -INFINITY : INFINITY; break;
    case EM_I32: ((int32_t *)d)[i] = is_max ? INT32_MIN : INT32_MAX; break;
    case EM_I64: ((int64_t *)d)[i] = is_max ? INT64_MIN : INT64_MAX; break;
    default: em_tensor_release(v); return EM_OK; /* the dtype check refused the others before */
    }
  }
  s = const_of_tensor(c, v, out);
  em_tensor_release(v);
  if (!s) *done = 1;
  return s;
}

/* Every ONNX reduction. Axes come from input 1 (ReduceSum from opset 13, the
 * others from 18) or else the attribute (earlier opsets); absent or empty
 * axes reduce every axis, unless noop_with_empty_axes (same opsets as the
 * input) is 1: then ONNX reduces over the empty set of axes, which is the
 * identity for the plain reductions but keeps the element-wise step of the
 * composite ones (ReduceSumSquare gives x^2, ReduceL1 |x|, ReduceLogSum
 * log x). Each output element is then the reduction of one input element:
 * a reduction over a new size-1 axis, exactly that. */
static em_status tr_reduce(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  int64_t keepdims, noop;
  em_status s = oint(c, n, "keepdims", 1, &keepdims);
  if (!s) s = oint(c, n, "noop_with_empty_axes", 0, &noop);
  if (s) return s;
  const int64_t *axes;
  int n_axes, present;
  if ((s = ints_input_or_attr(c, n, in, 1, "axes", &axes, &n_axes, &present))) return s;
  if (n_axes == 0 && noop) {
    if (in_list("reduce_sum,reduce_mean,reduce_max,reduce_min,reduce_prod", t->ember))
      return ap1(c, "identity", in[0], NULL, 0, &out[0]);
    int64_t zero = 0;
    em_attr ua = em_attr_is("axes", &zero, 1);
    em_attr ra[2] = {em_attr_is("axes", &zero, 1), em_attr_i("keepdims", 0)};
    em_var one;
    if ((s = ap1(c, "unsqueeze", in[0], &ua, 1, &one))) return s;
    return ap1(c, t->ember, one, ra, 2, &out[0]);
  }
  int done = 0;
  if ((s = reduce_empty_extreme(c, t, in[0], axes, n_axes, keepdims, &out[0], &done)) || done) return s;
  em_attr at[2] = {em_attr_i("keepdims", keepdims), em_attr_is("axes", axes, n_axes)};
  return ap1(c, t->ember, in[0], at, n_axes ? 2 : 1, &out[0]);
}

static em_status tr_arg(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  int64_t axis, keepdims, last;
  em_status s = oint(c, n, "axis", 0, &axis);
  if (!s) s = oint(c, n, "keepdims", 1, &keepdims);
  if (!s) s = oint(c, n, "select_last_index", 0, &last);
  if (s) return s;
  em_attr at[3] = {em_attr_i("axis", axis), em_attr_i("keepdims", keepdims), em_attr_i("select_last_index", last)};
  return ap1(c, t->ember, in[0], at, 3, &out[0]);
}

/* --- shapes --- */

static em_status tr_reshape(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  const int64_t *shape;
  int k, present;
  int64_t allowzero;
  em_status s = ints_input_or_attr(c, n, in, 1, "shape", &shape, &k, &present);
  if (!s) s = oint(c, n, "allowzero", 0, &allowzero);
  if (s) return s;
  if (!present) return bad(c, "no shape given");
  int has_zero = 0;
  for (int i = 0; i < k; i++) has_zero |= shape[i] == 0;
  if (allowzero && has_zero) {
    /* A literal 0 (allowzero=1): Ember's reshape copies the input's dim for
     * 0, so the exact shape is given by a constant to reshape_like. */
    if (k > EM_MAX_DIMS) return unsup(c, "rank %d", k);
    for (int i = 0; i < k; i++)
      if (shape[i] < 0) return bad(c, "allowzero=1 with both 0 and -1 in the shape");
    em_var like;
    if ((s = const_new(c, EM_U8, k, shape, NULL, &like))) return s;
    return ap2(c, "reshape_like", in[0], like, &out[0]);
  }
  em_attr a = em_attr_is("shape", shape, k);
  return ap1(c, "reshape", in[0], &a, 1, &out[0]);
}

/* Squeeze / Unsqueeze: axes from input 1 (opset 13) or the attribute. */
static em_status tr_axes_op(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  const int64_t *axes;
  int k, present;
  em_status s = ints_input_or_attr(c, n, in, 1, "axes", &axes, &k, &present);
  if (s) return s;
  em_attr a = em_attr_is("axes", axes, k);
  return ap1(c, t->ember, in[0], &a, present ? 1 : 0, &out[0]);
}

/* Expand (shape) and Tile (repeats): the list from input 1. */
static em_status tr_list_input(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  const char *name = strcmp(t->ember, "tile") == 0 ? "repeats" : "shape";
  const int64_t *v;
  int k, present;
  em_status s = ints_input_or_attr(c, n, in, 1, name, &v, &k, &present);
  if (s) return s;
  if (!present) return bad(c, "no %s given", name);
  em_attr a = em_attr_is(name, v, k);
  return ap1(c, t->ember, in[0], &a, 1, &out[0]);
}

static em_status tr_slice(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  static const char *const names[4] = {"starts", "ends", "axes", "steps"};
  em_attr at[4];
  int na = 0;
  for (int i = 0; i < 4; i++) {
    const int64_t *v;
    int k, present;
    em_status s = ints_input_or_attr(c, n, in, (size_t)i + 1, names[i], &v, &k, &present);
    if (s) return s;
    if (present) at[na++] = em_attr_is(names[i], v, k);
    else if (i < 2) return bad(c, "no %s given", names[i]);
  }
  return ap1(c, "slice", in[0], at, na, &out[0]);
}

static em_status tr_concat(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis;
  em_status s = oint(c, n, "axis", 0, &axis);
  if (s) return s;
  if (!oattr(n, "axis") && c->opset >= 4) return bad(c, "attribute 'axis' is required");
  em_attr a = em_attr_i("axis", axis);
  em_var acc = -1;
  /* Ember's concat takes up to 16 inputs: longer lists go in pieces. */
  for (size_t i = 0; i < n->n_inputs;) {
    em_var part[16];
    int k = 0;
    if (acc >= 0) part[k++] = acc;
    while (k < 16 && i < n->n_inputs) {
      if (in[i] < 0) return bad(c, "input %zu is empty", i);
      part[k++] = in[i++];
    }
    if ((s = ap(c, "concat", part, k, &a, 1, &acc, 1))) return s;
  }
  if (acc < 0) return bad(c, "no inputs");
  out[0] = acc;
  return EM_OK;
}

/* Pad-18's pads for the axes listed in input `axes_in` ([begins, ends] of
 * those axes) spread over every axis of x (scratch memory). */
static em_status pads_on_axes(imp *c, em_var x, em_var axes_in, const int64_t **pads, int *k) {
  em_shape sh;
  int64_t *axes, *full;
  int na;
  em_status s = vinfo(c, x, &sh);
  if (!s) s = ints_of(c, axes_in, "input 'axes'", &axes, &na);
  if (s) return s;
  if (*k != 2 * na) return bad(c, "'pads' has %d entries for %d axes; 2 per axis expected", *k, na);
  if (!(full = tmp(c, (size_t)(2 * sh.ndim + 1) * sizeof *full))) return OOM();
  unsigned seen = 0;
  for (int i = 0; i < na; i++) {
    int64_t ax = axes[i];
    if (ax < -sh.ndim || ax >= sh.ndim)
      return bad(c, "axes[%d] = %lld is out of range for rank %d", i, (long long)ax, sh.ndim);
    if (ax < 0) ax += sh.ndim;
    if (seen & (1u << ax)) return bad(c, "axes lists axis %lld twice", (long long)ax);
    seen |= 1u << ax;
    full[ax] = (*pads)[i];
    full[sh.ndim + ax] = (*pads)[na + i];
  }
  *pads = full;
  *k = 2 * sh.ndim;
  return EM_OK;
}

static em_status static_shape_of(imp *c, em_var x, em_shape *sh) {
  em_status s = vinfo(c, x, sh);
  if (s) return s;
  if (!static_shape(sh)) return unsup(c, "the input's shape is not static");
  return EM_OK;
}

/* Pad mode "wrap" (opset 19; Ember's pad lacks it): per padded axis of size
 * n, a gather of the indices (i - begin) mod n, i < n + begin + end, which
 * also crops for negative pads and repeats x for pads longer than n. */
static em_status pad_wrap(imp *c, em_var x, const int64_t *pads, int k, em_var *out) {
  em_shape sh;
  em_status s = static_shape_of(c, x, &sh);
  if (s) return s;
  if (k != 2 * sh.ndim) return bad(c, "'pads' has %d entries for rank %d", k, sh.ndim);
  em_var y = x;
  for (int a = 0; a < sh.ndim; a++) {
    int64_t n = sh.dims[a], b = pads[a], e = pads[sh.ndim + a], len = n + b + e;
    if (b == 0 && e == 0) continue;
    if (n == 0) return bad(c, "mode 'wrap' cannot pad axis %d of size 0", a);
    if (b < -n || e < -n || b + e < -n)
      return bad(c, "pads %lld and %lld crop axis %d of size %lld below zero", (long long)b, (long long)e, a,
                 (long long)n);
    if (b > ((int64_t)1 << 31) || e > ((int64_t)1 << 31)) return unsup(c, "pads %lld and %lld on axis %d",
                                                                        (long long)b, (long long)e, a);
    int64_t *idx = tmp(c, (size_t)(len + 1) * sizeof *idx);
    if (!idx) return OOM();
    for (int64_t i = 0; i < len; i++) idx[i] = (((i - b) % n) + n) % n;
    em_var iv;
    em_attr ga = em_attr_i("axis", a);
    if ((s = const_i64(c, 1, &len, idx, &iv))) return s;
    em_var gin[2] = {y, iv};
    if ((s = ap(c, "gather", gin, 2, &ga, 1, &y, 1))) return s;
  }
  if (y == x) return ap1(c, "identity", x, NULL, 0, out);
  *out = y;
  return EM_OK;
}

/* Pad: from opset 11 pads and constant_value are inputs; from opset 18 the
 * optional input `axes` says which axes `pads` ([begins, ends], two per
 * listed axis) applies to, the others unpadded. */
static em_status tr_pad(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  const char *mode;
  const int64_t *pads;
  int k, present;
  double value = 0;
  em_status s = ostr(c, n, "mode", "constant", &mode);
  if (s) return s;
  if (c->opset >= 11) {
    if ((s = ints_input_or_attr(c, n, in, 1, "pads", &pads, &k, &present))) return s;
    if (n->n_inputs > 2 && in[2] >= 0 && (s = scalar_of(c, in[2], "input 'constant_value'", &value))) return s;
    if (present && n->n_inputs > 3 && in[3] >= 0 && (s = pads_on_axes(c, in[0], in[3], &pads, &k))) return s;
  } else {
    if ((s = oints(c, n, c->opset >= 2 ? "pads" : "paddings", &pads, &k, &present))) return s;
    if ((s = ofloat(c, n, "value", 0, &value))) return s;
  }
  if (!present) return bad(c, "no pads given");
  if (strcmp(mode, "wrap") == 0) return pad_wrap(c, in[0], pads, k, &out[0]);
  em_attr at[3] = {em_attr_is("pads", pads, k), em_attr_s("mode", mode), em_attr_f("value", value)};
  return ap1(c, "pad", in[0], at, 3, &out[0]);
}

/* --- Resize and Upsample: ops/resize.c's resize, scales / sizes / roi folded --- */

/* Input idx as doubles when given and not empty (*n = 0 otherwise). */
static em_status optional_doubles(imp *c, const em_onnx_node *n, const em_var *in, size_t idx, const char *what,
                                  double **v, int *cnt) {
  *v = NULL, *cnt = 0;
  if (idx >= n->n_inputs || in[idx] < 0) return EM_OK;
  return doubles_of(c, in[idx], what, v, cnt);
}

/* Resize (opset 10: X, scales; 11 and 13: X, roi, scales, sizes; 18 and 19: also axes,
 * keep_aspect_ratio_policy, antialias, all passed on to the op). Before opset 11 the coordinates
 * are asymmetric and nearest rounds down. Scales, sizes and roi given for `axes` only are spread
 * over every axis (the others keep their size, roi 0..1). */
static em_status resize_node(imp *c, const em_onnx_node *n, em_var x, const double *scales, int nsc,
                             const double *sizes_d, int nsz, const double *roi, int nroi, em_var *out) {
  em_shape sh;
  em_status s = vinfo(c, x, &sh);
  if (s) return s;
  int R = sh.ndim;
  const char *mode, *ctm, *nearest, *policy;
  double a, extrap;
  int64_t exclude, antialias;
  int old = c->opset < 11 || strcmp(n->op_type, "Upsample") == 0;
  if ((s = ostr(c, n, "mode", "nearest", &mode)) ||
      (s = ostr(c, n, "coordinate_transformation_mode", old ? "asymmetric" : "half_pixel", &ctm)) ||
      (s = ostr(c, n, "nearest_mode", old ? "floor" : "round_prefer_floor", &nearest)) ||
      (s = ostr(c, n, "keep_aspect_ratio_policy", "stretch", &policy)) ||
      (s = ofloat(c, n, "cubic_coeff_a", -0.75, &a)) || (s = ofloat(c, n, "extrapolation_value", 0, &extrap)) ||
      (s = oint(c, n, "exclude_outside", 0, &exclude)) || (s = oint(c, n, "antialias", 0, &antialias)))
    return s;
  if (R < 1 || R > 8) return unsup(c, "an input of rank %d (Ember's resize takes rank 1 to 8)", R);
  const int64_t *axes_at;
  int na, present;
  if ((s = oints(c, n, "axes", &axes_at, &na, &present))) return s;
  int axes[8];
  if (!present) na = R;
  if (na > R) return bad(c, "axes lists %d axes for rank %d", na, R);
  unsigned seen = 0;
  for (int i = 0; i < na; i++) {
    int64_t ax = present ? axes_at[i] : i;
    if (ax < -R || ax >= R) return bad(c, "axes[%d] = %lld is out of range for rank %d", i, (long long)ax, R);
    if (ax < 0) ax += R;
    if (seen & (1u << ax)) return bad(c, "axes lists axis %lld twice", (long long)ax);
    seen |= 1u << ax, axes[i] = (int)ax;
  }
  if (nsc && nsz) return bad(c, "both scales and sizes are given; only one may be");
  if (!nsc && !nsz) return bad(c, "neither scales nor sizes is given");
  if ((nsc && nsc != na) || (nsz && nsz != na))
    return bad(c, "%s has %d entries for %d axes", nsc ? "scales" : "sizes", nsc ? nsc : nsz, na);
  if (nroi && nroi != 2 * na) return bad(c, "roi has %d entries; 2 per axis (%d) expected", nroi, 2 * na);
  double *full_sc = tmp(c, sizeof(double) * (size_t)R), *full_roi = tmp(c, sizeof(double) * 2 * (size_t)R);
  int64_t *full_sz = tmp(c, sizeof(int64_t) * (size_t)R);
  if (!full_sc || !full_roi || !full_sz) return OOM();
  for (int i = 0; i < R; i++) full_sc[i] = 1, full_sz[i] = sh.dims[i], full_roi[i] = 0, full_roi[R + i] = 1;
  for (int i = 0; i < na; i++) {
    int ax = axes[i];
    if (nsc) full_sc[ax] = scales[i];
    if (nsz) {
      if (!(sizes_d[i] >= 0) || sizes_d[i] != floor(sizes_d[i])) return bad(c, "sizes[%d] = %g", i, sizes_d[i]);
      /* 2^63 and past do not convert (undefined in C); the op refuses what it cannot make */
      if (sizes_d[i] >= 0x1p62) return bad(c, "sizes[%d] = %g is too large", i, sizes_d[i]);
      full_sz[ax] = (int64_t)sizes_d[i];
    }
    if (nroi) full_roi[ax] = roi[i], full_roi[R + ax] = roi[na + i];
  }
  int use_sizes = nsz > 0, use_scales = nsc > 0;
  if (nsz) {
    for (int i = 0; i < R; i++)
      if (full_sz[i] < 0) return unsup(c, "sizes for the dynamic axis %d of the input", i);
    if (strcmp(policy, "stretch") != 0) {
      int larger = strcmp(policy, "not_smaller") == 0;
      if (!larger && strcmp(policy, "not_larger") != 0)
        return bad(c, "keep_aspect_ratio_policy '%s' is not stretch, not_larger or not_smaller", policy);
      double sc = 0;
      for (int i = 0; i < na; i++) {
        int ax = axes[i];
        if (sh.dims[ax] <= 0) return unsup(c, "keep_aspect_ratio_policy on axis %d of size %lld", ax,
                                          (long long)sh.dims[ax]);
        double r = (double)full_sz[ax] / (double)sh.dims[ax];
        if (i == 0 || (larger ? r > sc : r < sc)) sc = r;
      }
      for (int i = 0; i < na; i++) {
        int ax = axes[i];
        full_sc[ax] = sc;
        double sz = sc * (double)sh.dims[ax] + 0.5; /* ONNX rounds half up here */
        if (!(sz < 0x1p62))
          return bad(c, "keep_aspect_ratio_policy '%s' makes axis %d %g long: too large", policy, ax, floor(sz));
        full_sz[ax] = (int64_t)sz;
      }
      use_scales = sc > 0; /* a scale of 0 (a size of 0) empties every listed axis: sizes say it all */
    }
  }
  em_attr at[10];
  int k = 0;
  if (use_sizes) at[k++] = em_attr_is("sizes", full_sz, R);
  if (use_scales) at[k++] = em_attr_fs("scales", full_sc, R);
  at[k++] = em_attr_s("mode", mode);
  at[k++] = em_attr_s("coordinate_transformation_mode", ctm);
  at[k++] = em_attr_s("nearest_mode", nearest);
  at[k++] = em_attr_f("cubic_coeff_a", a);
  at[k++] = em_attr_i("exclude_outside", exclude);
  at[k++] = em_attr_f("extrapolation_value", extrap);
  at[k++] = em_attr_fs("roi", full_roi, 2 * R);
  if (antialias) at[k++] = em_attr_i("antialias", 1);
  return ap1(c, "resize", x, at, k, out);
}

static em_status tr_resize(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  double *scales, *sizes = NULL, *roi = NULL;
  int nsc, nsz = 0, nroi = 0;
  em_status s;
  if (c->opset < 11) {
    if ((s = optional_doubles(c, n, in, 1, "input 'scales'", &scales, &nsc))) return s;
  } else if ((s = optional_doubles(c, n, in, 1, "input 'roi'", &roi, &nroi)) ||
             (s = optional_doubles(c, n, in, 2, "input 'scales'", &scales, &nsc)) ||
             (s = optional_doubles(c, n, in, 3, "input 'sizes'", &sizes, &nsz)))
    return s;
  return resize_node(c, n, in[0], scales, nsc, sizes, nsz, roi, nroi, &out[0]);
}

/* Upsample (deprecated; opset 7: attribute scales, 9: input scales): Resize-10's semantics. */
static em_status tr_upsample(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  double *scales = NULL;
  int nsc = 0;
  em_status s;
  const em_onnx_attr *at = oattr(n, "scales");
  if (at) {
    if (at->type != EM_ONNX_ATTR_FLOATS) return unsup(c, "attribute 'scales' is not a list of floats");
    if (!(scales = tmp(c, sizeof(double) * (at->n + 1)))) return OOM();
    for (size_t i = 0; i < at->n; i++) scales[i] = at->floats[i];
    nsc = (int)at->n;
  } else if ((s = optional_doubles(c, n, in, 1, "input 'scales'", &scales, &nsc))) {
    return s;
  }
  return resize_node(c, n, in[0], scales, nsc, NULL, 0, NULL, 0, &out[0]);
}

static em_status tr_clip(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  double lo = -INFINITY, hi = INFINITY;
  em_status s;
  if (c->opset >= 11) {
    if (n->n_inputs > 1 && in[1] >= 0 && (s = scalar_of(c, in[1], "input 'min'", &lo))) return s;
    if (n->n_inputs > 2 && in[2] >= 0 && (s = scalar_of(c, in[2], "input 'max'", &hi))) return s;
  } else {
    if ((s = ofloat(c, n, "min", -INFINITY, &lo)) || (s = ofloat(c, n, "max", INFINITY, &hi))) return s;
  }
  /* ONNX: min > max sets every value to max (Min(max, Max(x, min))); Ember's clip refuses it. */
  if (lo > hi) lo = hi;
  em_attr at[2] = {em_attr_f("min", lo), em_attr_f("max", hi)};
  return ap1(c, "clip", in[0], at, 2, &out[0]);
}

static em_status tr_cast(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  em_dtype to;
  em_status s;
  if (strcmp(n->op_type, "CastLike") == 0) {
    em_shape ls;
    if ((s = vinfo(c, in[1], &ls))) return s;
    to = ls.dtype;
  } else {
    int64_t code;
    if ((s = oint(c, n, "to", 0, &code))) return s;
    if (!oattr(n, "to")) return bad(c, "attribute 'to' is required");
    em_onnx_dtype od = em_onnx_dtype_from_onnx((int32_t)code);
    if (od == EM_ONNX_UNDEFINED) return unsup(c, "cast to ONNX element type %lld", (long long)code);
    if ((s = em_onnx_dtype_to_em(od, &to))) return unsup(c, "cast to %s: no Ember dtype", em_onnx_dtype_name(od));
  }
  em_attr a = em_attr_i("to", to);
  return ap1(c, "cast", in[0], &a, 1, &out[0]);
}

static em_status tr_onehot(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis;
  double depth, *vals;
  int nv;
  em_shape vs, is;
  em_status s = oint(c, n, "axis", -1, &axis);
  if (!s) s = scalar_of(c, in[1], "input 'depth'", &depth);
  if (!s) s = doubles_of(c, in[2], "input 'values'", &vals, &nv);
  if (!s) s = vinfo(c, in[2], &vs);
  if (!s) s = vinfo(c, in[0], &is);
  if (s) return s;
  if (nv != 2) return bad(c, "input 'values' has %d elements; [off, on] expected", nv);
  em_var idx = in[0];
  /* ONNX casts non-integer indices to integers (toward zero). */
  if (is.dtype != EM_I32 && is.dtype != EM_I64 && (s = cast_to(c, in[0], EM_I64, &idx))) return s;
  em_attr at[5] = {em_attr_i("depth", (int64_t)depth), em_attr_i("axis", axis), em_attr_i("dtype", vs.dtype),
                   em_attr_f("off_value", vals[0]), em_attr_f("on_value", vals[1])};
  return ap1(c, "one_hot", idx, at, 5, &out[0]);
}

static em_status tr_topk(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis, largest, sorted, k;
  em_status s = oint(c, n, "axis", -1, &axis);
  if (!s) s = oint(c, n, "largest", 1, &largest);
  if (!s) s = oint(c, n, "sorted", 1, &sorted);
  if (s) return s;
  if (c->opset >= 10) {
    int64_t *kv;
    int nk;
    if ((s = ints_of(c, in[1], "input 'K'", &kv, &nk))) return s;
    if (nk != 1) return bad(c, "input 'K' has %d elements; one expected", nk);
    k = kv[0];
  } else if ((s = oint(c, n, "k", -1, &k))) {
    return s;
  }
  em_attr at[4] = {em_attr_i("k", k), em_attr_i("axis", axis), em_attr_i("largest", largest),
                   em_attr_i("sorted", sorted)};
  em_var o[2];
  if ((s = ap(c, "top_k", in, 1, at, 4, o, 2))) return s;
  for (size_t j = 0; j < n->n_outputs && j < 2; j++) out[j] = o[j];
  return EM_OK;
}

/* CumSum: the axis (input 1, a scalar) folded into cumsum's attribute. */
static em_status tr_cumsum(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t exclusive, reverse, *axis;
  int na;
  em_status s = oint(c, n, "exclusive", 0, &exclusive);
  if (!s) s = oint(c, n, "reverse", 0, &reverse);
  if (s) return s;
  if (n->n_inputs < 2 || in[1] < 0) return bad(c, "needs input 'axis'");
  if ((s = ints_of(c, in[1], "input 'axis'", &axis, &na))) return s;
  if (na != 1) return bad(c, "input 'axis' has %d elements; one expected", na);
  em_attr at[3] = {em_attr_i("axis", axis[0]), em_attr_i("exclusive", exclusive), em_attr_i("reverse", reverse)};
  return ap(c, "cumsum", in, 1, at, 3, &out[0], 1);
}

/* Split: one slice per output. The lengths come from input 1 (opset 13) or
 * the attribute `split`; else from `num_outputs` (opset 18): ceil(dim / n)
 * each, the last chunk taking what is left (ONNX's rule: 7 in 3 is 3 3 1,
 * 9 in 4 is 3 3 3 0); else (earlier opsets) equal parts, one per output. */
static em_status tr_split(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis, num_outputs;
  em_shape sh;
  const int64_t *split;
  int k, present;
  em_status s = oint(c, n, "axis", 0, &axis);
  if (!s) s = oint(c, n, "num_outputs", 0, &num_outputs);
  if (!s) s = vinfo(c, in[0], &sh);
  if (!s) s = ints_input_or_attr(c, n, in, 1, "split", &split, &k, &present);
  if (s) return s;
  if (axis < -sh.ndim || axis >= sh.ndim)
    return bad(c, "axis %lld is out of range for rank %d", (long long)axis, sh.ndim);
  if (axis < 0) axis += sh.ndim;
  int64_t dim = sh.dims[axis], n_out = (int64_t)n->n_outputs;
  if (dim < 0) return unsup(c, "Split along a dynamic axis");
  int64_t *len = tmp(c, (size_t)(n_out ? n_out : 1) * sizeof *len);
  if (!len) return OOM();
  if (oattr(n, "num_outputs")) {
    if (present) return bad(c, "both 'split' and 'num_outputs' given");
    if (num_outputs != n_out)
      return bad(c, "num_outputs is %lld, the node has %lld outputs", (long long)num_outputs, (long long)n_out);
  }
  if (present) {
    if (k != n_out) return bad(c, "%d split lengths for %lld outputs", k, (long long)n_out);
    for (int i = 0; i < k; i++) {
      if (split[i] < 0) return bad(c, "split length %d is %lld", i, (long long)split[i]);
      len[i] = split[i];
    }
  } else if (oattr(n, "num_outputs")) {
    int64_t chunk = dim / n_out + (dim % n_out != 0), last = dim - chunk * (n_out - 1);
    if (last < 0)
      return bad(c, "an axis of %lld cannot be split into %lld chunks of %lld and a last, smaller one",
                 (long long)dim, (long long)n_out, (long long)chunk);
    for (int64_t i = 0; i < n_out; i++) len[i] = i < n_out - 1 ? chunk : last;
  } else {
    if (n_out == 0 || dim % n_out)
      return bad(c, "axis of %lld does not split into %lld equal parts", (long long)dim, (long long)n_out);
    for (int64_t i = 0; i < n_out; i++) len[i] = dim / n_out;
  }
  int64_t off = 0;
  for (int64_t i = 0; i < n_out; i++) off += len[i];
  if (off != dim) return bad(c, "split lengths add up to %lld, the axis has %lld", (long long)off, (long long)dim);
  off = 0;
  for (int64_t i = 0; i < n_out; i++) {
    int64_t st = off, en = off + len[i];
    em_attr at[3] = {em_attr_is("starts", &st, 1), em_attr_is("ends", &en, 1), em_attr_is("axes", &axis, 1)};
    if ((s = ap1(c, "slice", in[0], at, 3, &out[i]))) return s;
    off = en;
  }
  return EM_OK;
}

/* --- constants and shape queries --- */

static em_status tr_constant(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)in;
  if (n->n_attrs != 1) return bad(c, "exactly one value attribute expected, %zu given", n->n_attrs);
  const em_onnx_attr *a = &n->attrs[0];
  em_status s;
  if (strcmp(a->name, "value") == 0 && a->type == EM_ONNX_ATTR_TENSOR) {
    em_tensor *v;
    if ((s = em_onnx_tensor_to_em(a->t, &v))) return unsup(c, "%s", em_last_error());
    s = const_of_tensor(c, v, &out[0]);
    em_tensor_release(v);
    return s;
  }
  if (strcmp(a->name, "value_float") == 0 && a->type == EM_ONNX_ATTR_FLOAT)
    return const_new(c, EM_F32, 0, NULL, &a->f, &out[0]);
  if (strcmp(a->name, "value_int") == 0 && a->type == EM_ONNX_ATTR_INT) return const_i64(c, 0, NULL, &a->i, &out[0]);
  if (strcmp(a->name, "value_floats") == 0 && a->type == EM_ONNX_ATTR_FLOATS) {
    int64_t len = (int64_t)a->n;
    return const_new(c, EM_F32, 1, &len, a->floats, &out[0]);
  }
  if (strcmp(a->name, "value_ints") == 0 && a->type == EM_ONNX_ATTR_INTS) {
    int64_t len = (int64_t)a->n;
    return const_i64(c, 1, &len, a->ints, &out[0]);
  }
  return unsup(c, "value attribute '%s' (%s)", a->name, em_onnx_attr_type_name(a->type));
}

static em_status tr_shape(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  em_shape sh;
  int64_t start, end;
  em_status s = static_shape_of(c, in[0], &sh);
  if (!s) s = oint(c, n, "start", 0, &start);
  if (!s) s = oint(c, n, "end", sh.ndim, &end);
  if (s) return s;
  /* Negative start/end count from the end; both are clamped to [0, rank]. */
  if (start < 0) start += sh.ndim;
  if (end < 0) end += sh.ndim;
  start = start < 0 ? 0 : start > sh.ndim ? sh.ndim : start;
  end = end < 0 ? 0 : end > sh.ndim ? sh.ndim : end;
  int64_t len = end > start ? end - start : 0;
  return const_i64(c, 1, &len, sh.dims + start, &out[0]);
}

static em_status tr_size(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)n;
  em_shape sh;
  em_status s = static_shape_of(c, in[0], &sh);
  if (s) return s;
  int64_t k = em_shape_numel(&sh);
  return const_i64(c, 0, NULL, &k, &out[0]);
}

static em_status tr_constant_of_shape(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t *shape;
  int k;
  em_status s = ints_of(c, in[0], "input 'input' (the shape)", &shape, &k);
  if (s) return s;
  if (k > EM_MAX_DIMS) return unsup(c, "rank %d", k);
  const em_onnx_attr *a = oattr(n, "value");
  em_dtype dt = EM_F32;
  const void *fill = NULL;
  if (a) {
    if (a->type != EM_ONNX_ATTR_TENSOR || a->t->n_elements != 1) return bad(c, "'value' must be a one-element tensor");
    if ((s = em_onnx_dtype_to_em(a->t->dtype, &dt))) return unsup(c, "%s", em_last_error());
    fill = a->t->data;
  }
  em_tensor *v;
  if ((s = em_tensor_zeros(em_cpu(), dt, k, shape, &v))) return s;
  size_t es = em_dtype_size(dt);
  if (fill)
    for (int64_t i = 0; i < em_tensor_numel(v); i++) memcpy((char *)em_tensor_data(v) + (size_t)i * es, fill, es);
  s = const_of_tensor(c, v, &out[0]);
  em_tensor_release(v);
  return s;
}

/* Range: a constant from start, limit and delta known at build time,
 * max(ceil((limit - start) / delta), 0) elements start + i * delta
 * (integers exactly in int64; floats in double, then rounded once). */
static em_status tr_range(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  if (n->n_inputs != 3 || in[1] < 0 || in[2] < 0) return bad(c, "3 inputs expected (start, limit, delta)");
  em_shape sh;
  em_status s = vinfo(c, in[0], &sh);
  if (s) return s;
  for (int i = 1; i < 3; i++) {
    em_shape o;
    if ((s = vinfo(c, in[i], &o))) return s;
    if (o.dtype != sh.dtype)
      return bad(c, "input %d is %s, start is %s", i, em_dtype_name(o.dtype), em_dtype_name(sh.dtype));
  }
  static const char *const what[3] = {"input 'start'", "input 'limit'", "input 'delta'"};
  em_tensor *v;
  int64_t len;
  if (sh.dtype == EM_I32 || sh.dtype == EM_I64) {
    int64_t a[3];
    for (int i = 0; i < 3; i++) {
      int64_t *iv;
      int k;
      if ((s = ints_of(c, in[i], what[i], &iv, &k))) return s;
      if (k != 1) return bad(c, "%s has %d elements; one expected", what[i], k);
      a[i] = iv[0];
    }
    if (a[2] == 0) return bad(c, "delta is 0");
    /* ceil((limit - start) / delta) in integers */
    int64_t d, q;
    if (__builtin_sub_overflow(a[1], a[0], &d) || d / a[2] > (int64_t)1e12)
      return bad(c, "start %lld, limit %lld, delta %lld: too many elements", (long long)a[0], (long long)a[1],
                 (long long)a[2]);
    q = d / a[2];
    if (q * a[2] != d && ((d < 0) == (a[2] < 0))) q++;
    len = q > 0 ? q : 0;
    if ((s = em_tensor_zeros(em_cpu(), sh.dtype, 1, &len, &v))) return s;
    for (int64_t i = 0; i < len; i++) {
      int64_t x = a[0] + i * a[2];
      if (sh.dtype == EM_I32) ((int32_t *)em_tensor_data(v))[i] = (int32_t)x;
      else ((int64_t *)em_tensor_data(v))[i] = x;
    }
  } else if (sh.dtype == EM_F32 || sh.dtype == EM_F64) {
    double a[3];
    for (int i = 0; i < 3; i++)
      if ((s = scalar_of(c, in[i], what[i], &a[i]))) return s;
    double cnt = ceil((a[1] - a[0]) / a[2]);
    if (!(a[2] != 0) || !(cnt < 1e12)) return bad(c, "start %g, limit %g, delta %g", a[0], a[1], a[2]);
    len = cnt > 0 ? (int64_t)cnt : 0;
    if ((s = em_tensor_zeros(em_cpu(), sh.dtype, 1, &len, &v))) return s;
    for (int64_t i = 0; i < len; i++) {
      double x = a[0] + (double)i * a[2];
      if (sh.dtype == EM_F32) ((float *)em_tensor_data(v))[i] = (float)x;
      else ((double *)em_tensor_data(v))[i] = x;
    }
  } else {
    return unsup(c, "Range of %s", em_dtype_name(sh.dtype));
  }
  s = const_of_tensor(c, v, &out[0]);
  em_tensor_release(v);
  return s;
}

/* --- Einsum --- */

/* Einsum lowered onto reduce_sum, transpose, reshape and matmul. Labels are
 * letters; "..." stands for the leading dims not labelled, right-aligned
 * across operands (codes ELL + k). Operands are contracted left to right:
 * labels no later operand or the output needs are summed out first, then
 * the pair becomes one batched matmul [batch, free_a, k] x [batch, k,
 * free_b]; the result is transposed to the output's order. A label repeated
 * in one operand takes the diagonal first (where(eye, x, 0) summed).
 * Refused: sizes that differ for one label across operands (broadcasting),
 * dynamic dims. */
#define ELL 256
typedef struct {
  em_var v;
  int n;
  int lab[EM_MAX_DIMS];
  int64_t dim[EM_MAX_DIMS];
} labelled;

static int lab_has(const labelled *x, int l) {
  for (int i = 0; i < x->n; i++)
    if (x->lab[i] == l) return 1;
  return 0;
}

/* Sums x over its labels for which keep[label] is 0. */
static em_status lab_sum_out(imp *c, labelled *x, const unsigned char *keep) {
  int64_t axes[EM_MAX_DIMS];
  int na = 0, n = 0;
  for (int i = 0; i < x->n; i++) {
    if (!keep[x->lab[i]]) axes[na++] = i;
    else x->lab[n] = x->lab[i], x->dim[n++] = x->dim[i];
  }
  if (!na) return EM_OK;
  x->n = n;
  em_attr at[2] = {em_attr_is("axes", axes, na), em_attr_i("keepdims", 0)};
  return ap1(c, "reduce_sum", x->v, at, 2, &x->v);
}

/* Transposes x so its labels are `order` (a permutation of them). */
static em_status lab_permute(imp *c, labelled *x, const int *order) {
  int64_t perm[EM_MAX_DIMS], dim[EM_MAX_DIMS];
  int moved = 0;
  for (int i = 0; i < x->n; i++) {
    for (int j = 0; j < x->n; j++)
      if (x->lab[j] == order[i]) perm[i] = j;
    moved |= perm[i] != i;
    dim[i] = x->dim[perm[i]];
  }
  if (!moved) return EM_OK;
  memcpy(x->lab, order, (size_t)x->n * sizeof *order);
  memcpy(x->dim, dim, (size_t)x->n * sizeof *dim);
  em_attr a = em_attr_is("perm", perm, x->n);
  return ap1(c, "transpose", x->v, &a, 1, &x->v);
}

static em_status reshape_to(imp *c, em_var x, int nd, const int64_t *dims, em_var *out) {
  em_attr a = em_attr_is("shape", dims, nd);
  return ap1(c, "reshape", x, &a, 1, out);
}

/* a and b (labels summed out already) into one value labelled batch, free
 * a, free b; labels in both that keep marks are batch, the others summed. */
static em_status lab_contract(imp *c, labelled *a, labelled *b, const unsigned char *keep, labelled *r) {
  int bat[EM_MAX_DIMS], fa[EM_MAX_DIMS], fb[EM_MAX_DIMS], con[EM_MAX_DIMS];
  int nb = 0, nfa = 0, nfb = 0, nc = 0;
  int64_t m = 1, n = 1, k = 1;
  for (int i = 0; i < a->n; i++) {
    int l = a->lab[i];
    if (!lab_has(b, l)) fa[nfa++] = l, m *= a->dim[i];
    else if (keep[l]) bat[nb++] = l;
    else con[nc++] = l, k *= a->dim[i];
  }
  for (int i = 0; i < b->n; i++)
    if (!lab_has(a, b->lab[i])) fb[nfb++] = b->lab[i], n *= b->dim[i];
  int oa[EM_MAX_DIMS], ob[EM_MAX_DIMS], na = 0, nbb = 0;
  for (int i = 0; i < nb; i++) oa[na++] = bat[i], ob[nbb++] = bat[i];
  for (int i = 0; i < nfa; i++) oa[na++] = fa[i];
  for (int i = 0; i < nc; i++) oa[na++] = con[i], ob[nbb++] = con[i];
  for (int i = 0; i < nfb; i++) ob[nbb++] = fb[i];
  em_status s;
  if ((s = lab_permute(c, a, oa)) || (s = lab_permute(c, b, ob))) return s;
  if (nb + 2 > EM_MAX_DIMS || nb + nfa + nfb > EM_MAX_DIMS) return unsup(c, "Einsum with %d batch labels", nb);
  int64_t sa[EM_MAX_DIMS], sb[EM_MAX_DIMS];
  for (int i = 0; i < nb; i++) sa[i] = sb[i] = a->dim[i];
  sa[nb] = m, sa[nb + 1] = k, sb[nb] = k, sb[nb + 1] = n;
  em_var ra, rb, p;
  if ((s = reshape_to(c, a->v, nb + 2, sa, &ra)) || (s = reshape_to(c, b->v, nb + 2, sb, &rb)) ||
      (s = ap2(c, "matmul", ra, rb, &p)))
    return s;
  r->n = 0;
  for (int i = 0; i < nb; i++) r->lab[r->n] = bat[i], r->dim[r->n++] = a->dim[i];
  for (int i = 0; i < nfa; i++) r->lab[r->n] = fa[i], r->dim[r->n++] = a->dim[nb + i];
  for (int i = 0; i < nfb; i++) r->lab[r->n] = fb[i], r->dim[r->n++] = b->dim[nb + nc + i];
  return reshape_to(c, p, r->n, r->dim, &r->v);
}

/* Takes the diagonal of x along its axes p < q (same size): where(eye, x, 0)
 * summed over q, the eye a bool constant broadcast over the other axes. */
static em_status lab_diagonal(imp *c, labelled *x, int p, int q) {
  int64_t n = x->dim[p], shape[EM_MAX_DIMS];
  for (int i = 0; i < x->n; i++) shape[i] = i == p || i == q ? n : 1;
  if (n > 4096) return unsup(c, "Einsum diagonal of size %lld", (long long)n);
  uint8_t *eye = tmp(c, (size_t)(n * n) + 1);
  if (!eye) return OOM();
  for (int64_t i = 0; i < n; i++) eye[i * n + i] = 1;
  em_shape sh;
  em_var m, zero, w[3], sel;
  em_status s = vinfo(c, x->v, &sh);
  if (!s) s = const_new(c, EM_BOOL, x->n, shape, eye, &m);
  if (!s) s = scalar(c, sh.dtype, 0, &zero);
  if (s) return s;
  w[0] = m, w[1] = x->v, w[2] = zero;
  if ((s = ap(c, "where", w, 3, NULL, 0, &sel, 1))) return s;
  int64_t ax = q;
  em_attr at[2] = {em_attr_is("axes", &ax, 1), em_attr_i("keepdims", 0)};
  if ((s = ap1(c, "reduce_sum", sel, at, 2, &x->v))) return s;
  for (int i = q; i + 1 < x->n; i++) x->lab[i] = x->lab[i + 1], x->dim[i] = x->dim[i + 1];
  x->n--;
  return EM_OK;
}

/* One term of the equation ("ij", "...k", "b...") for a value of rank
 * ndim (ndim < 0: the output, whose "..." has `ell` dims). */
static em_status einsum_term(imp *c, const char *t, size_t len, int ndim, int ell, labelled *x) {
  int letters = 0, dots = 0;
  for (size_t i = 0; i < len; i++) {
    if (t[i] == '.') {
      if (dots || i + 3 > len || strncmp(t + i, "...", 3) != 0) return bad(c, "malformed '...' in the equation");
      dots = 1, i += 2;
    } else if ((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z')) {
      letters++;
    } else {
      return bad(c, "character '%c' in the equation", t[i]);
    }
  }
  int e = ndim < 0 ? (dots ? ell : 0) : ndim - letters;
  if (ndim >= 0 && (e < 0 || (!dots && e != 0)))
    return bad(c, "term '%.*s' has %d labels for an operand of rank %d", (int)len, t, letters, ndim);
  if (letters + e > EM_MAX_DIMS) return unsup(c, "term '%.*s' of rank %d", (int)len, t, letters + e);
  x->n = 0;
  for (size_t i = 0; i < len; i++) {
    if (t[i] == '.') {
      for (int j = 0; j < e; j++) x->lab[x->n++] = ELL + (ell - e) + j;
      i += 2;
    } else {
      x->lab[x->n++] = (unsigned char)t[i];
    }
  }
  return EM_OK;
}

static em_status tr_einsum(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  const char *eq;
  em_status s = ostr(c, n, "equation", NULL, &eq);
  if (s) return s;
  if (!eq) return bad(c, "attribute 'equation' is required");
  /* without spaces */
  size_t L = strlen(eq);
  char *e = tmp(c, L + 1);
  if (!e) return OOM();
  size_t el = 0;
  for (size_t i = 0; i < L; i++)
    if (eq[i] != ' ') e[el++] = eq[i];
  e[el] = 0;
  const char *arrow = strstr(e, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - e) : el;
  int n_ops = (int)n->n_inputs;
  if (n_ops < 1 || n_ops > 8) return unsup(c, "Einsum of %d operands", n_ops);
  labelled *x = tmp(c, (size_t)n_ops * sizeof *x);
  if (!x) return OOM();
  /* the terms; the widest "..." first (right alignment needs it) */
  const char *term[8];
  size_t tlen[8];
  int ell = 0;
  {
    const char *p = e;
    for (int i = 0; i < n_ops; i++) {
      const char *q = memchr(p, ',', (size_t)(e + lhs_len - p));
      const char *end = q ? q : e + lhs_len;
      if ((i < n_ops - 1) != (q != NULL)) {
        int terms = 1;
        for (size_t k = 0; k < lhs_len; k++) terms += e[k] == ',';
        return bad(c, "the equation '%s' has %d operand terms for %d inputs", eq, terms, n_ops);
      }
      term[i] = p, tlen[i] = (size_t)(end - p);
      p = end + 1;
    }
  }
  for (int i = 0; i < n_ops; i++) {
    em_shape sh;
    if (in[i] < 0) return bad(c, "input %d is empty", i);
    if ((s = static_shape_of(c, in[i], &sh))) return s;
    int letters = 0;
    for (size_t k = 0; k < tlen[i]; k++) letters += term[i][k] != '.';
    if (memchr(term[i], '.', tlen[i]) && sh.ndim - letters > ell) ell = sh.ndim - letters;
  }
  int64_t size[ELL + EM_MAX_DIMS];
  unsigned char seen[ELL + EM_MAX_DIMS] = {0}, count[ELL + EM_MAX_DIMS] = {0};
  for (int i = 0; i < n_ops; i++) {
    em_shape sh;
    if ((s = vinfo(c, in[i], &sh)) || (s = einsum_term(c, term[i], tlen[i], sh.ndim, ell, &x[i]))) return s;
    x[i].v = in[i];
    for (int d = 0; d < x[i].n; d++) x[i].dim[d] = sh.dims[d];
    /* a label repeated in one operand takes the diagonal ("ii->i", "bii->bi") */
    for (int d = 0; d < x[i].n; d++)
      for (int q = d + 1; q < x[i].n; q++)
        if (x[i].lab[q] == x[i].lab[d]) {
          if (x[i].dim[q] != x[i].dim[d])
            return bad(c, "label '%c' of operand %d has sizes %lld and %lld", x[i].lab[d] < ELL ? x[i].lab[d] : '.',
                       i, (long long)x[i].dim[d], (long long)x[i].dim[q]);
          if ((s = lab_diagonal(c, &x[i], d, q))) return s;
          q--;
        }
    for (int d = 0; d < x[i].n; d++) {
      int l = x[i].lab[d];
      if (seen[l] && size[l] != x[i].dim[d])
        return unsup(c, "label '%c' has sizes %lld and %lld (broadcasting)", l < ELL ? l : '.',
                     (long long)size[l], (long long)x[i].dim[d]);
      seen[l] = 1, size[l] = x[i].dim[d], count[l]++;
    }
  }
  labelled o;
  if (arrow) {
    if ((s = einsum_term(c, arrow + 2, strlen(arrow + 2), -1, ell, &o))) return s;
    unsigned char here[ELL + EM_MAX_DIMS] = {0};
    for (int d = 0; d < o.n; d++) {
      if (!seen[o.lab[d]]) return bad(c, "output label '%c' is in no operand", o.lab[d] < ELL ? o.lab[d] : '.');
      if (here[o.lab[d]]++) return bad(c, "output label '%c' repeated", o.lab[d] < ELL ? o.lab[d] : '.');
    }
  } else { /* implicit: "..." then the labels used once, in alphabetical (ASCII) order */
    o.n = 0;
    for (int j = 0; j < ell; j++) o.lab[o.n++] = ELL + j;
    for (int l = 0; l < ELL; l++)
      if (count[l] == 1) {
        if (o.n == EM_MAX_DIMS) return unsup(c, "output of rank > %d", EM_MAX_DIMS);
        o.lab[o.n++] = l;
      }
  }
  unsigned char keep[ELL + EM_MAX_DIMS];
  labelled cur = x[0];
  for (int k = 1; k <= n_ops; k++) {
    /* what is needed after this step: the output and the operands after k */
    memset(keep, 0, sizeof keep);
    for (int d = 0; d < o.n; d++) keep[o.lab[d]] = 1;
    for (int j = k + 1; j < n_ops; j++)
      for (int d = 0; d < x[j].n; d++) keep[x[j].lab[d]] = 1;
    if (k == n_ops) {
      if ((s = lab_sum_out(c, &cur, keep))) return s;
      break;
    }
    unsigned char keep_a[ELL + EM_MAX_DIMS], keep_b[ELL + EM_MAX_DIMS];
    memcpy(keep_a, keep, sizeof keep), memcpy(keep_b, keep, sizeof keep);
    for (int d = 0; d < x[k].n; d++) keep_a[x[k].lab[d]] = 1;
    for (int d = 0; d < cur.n; d++) keep_b[cur.lab[d]] = 1;
    labelled b = x[k], r;
    if ((s = lab_sum_out(c, &cur, keep_a)) || (s = lab_sum_out(c, &b, keep_b)) ||
        (s = lab_contract(c, &cur, &b, keep, &r)))
      return s;
    cur = r;
  }
  if ((s = lab_permute(c, &cur, o.lab))) return s;
  if (cur.v == in[0]) return ap1(c, "identity", cur.v, NULL, 0, &out[0]);
  out[0] = cur.v;
  return EM_OK;
}

/* --- sequences --- */

/* ONNX sequences exist only while importing (a list of Ember values): the
 * forms PyTorch writes (SplitToSequence + SequenceAt for torch.split in
 * unoptimised exports, SequenceConstruct + ConcatFromSequence for stacks)
 * become the slices and concats they stand for. Positions must be known at
 * build time; a sequence cannot be a graph input or output. */

/* A position input (scalar, negative from the end) in [0, len] (insert) or
 * [0, len) (others). */
static em_status seq_position(imp *c, em_var v, int len, int for_insert, int *pos) {
  int64_t *p;
  int k;
  em_status s = ints_of(c, v, "input 'position'", &p, &k);
  if (s) return s;
  if (k != 1) return bad(c, "input 'position' has %d elements; one expected", k);
  int64_t q = p[0] < 0 ? p[0] + len : p[0];
  if (q < 0 || q > len - (for_insert ? 0 : 1))
    return bad(c, "position %lld is out of range for a sequence of %d", (long long)p[0], len);
  *pos = (int)q;
  return EM_OK;
}

static em_status tr_seq_construct(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  for (size_t i = 0; i < n->n_inputs; i++)
    if (in[i] < 0) return bad(c, "input %zu is empty", i);
  em_status s = seq_set(c, n->outputs[0], in, (int)n->n_inputs);
  if (!s) out[0] = SEQ_VAR;
  return s;
}

static em_status tr_seq_empty(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)in;
  em_status s = seq_set(c, n->outputs[0], NULL, 0);
  if (!s) out[0] = SEQ_VAR;
  return s;
}

static em_status tr_seq_at(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  const struct seqval *q = seq_get(c, n->inputs[0]);
  int pos;
  if (n->n_inputs < 2 || in[1] < 0) return bad(c, "input 'position' is required");
  em_status s = seq_position(c, in[1], q->n, 0, &pos);
  if (s) return s;
  return ap1(c, "identity", q->vars[pos], NULL, 0, &out[0]);
}

static em_status tr_seq_length(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)in;
  int64_t len = seq_get(c, n->inputs[0])->n;
  return const_i64(c, 0, NULL, &len, &out[0]);
}

/* SequenceInsert (tensor at position, default the end) and SequenceErase
 * (position, default the last): a new sequence. */
static em_status tr_seq_edit(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  const struct seqval *q = seq_get(c, n->inputs[0]);
  int insert = strcmp(n->op_type, "SequenceInsert") == 0, len = q->n, pos;
  size_t pi = insert ? 2 : 1;
  em_var *v = tmp(c, (size_t)(len + 1) * sizeof *v);
  if (!v) return OOM();
  if (insert && (n->n_inputs < 2 || in[1] < 0)) return bad(c, "input 'tensor' is required");
  em_status s = EM_OK;
  if (pi < n->n_inputs && in[pi] >= 0) s = seq_position(c, in[pi], len, insert, &pos);
  else if (!insert && len == 0) return bad(c, "erasing from an empty sequence");
  else pos = insert ? len : len - 1;
  if (s) return s;
  int k = 0;
  for (int i = 0; i <= len; i++) {
    if (insert && i == pos) v[k++] = in[1];
    if (i < len && !(!insert && i == pos)) v[k++] = q->vars[i];
  }
  if ((s = seq_set(c, n->outputs[0], v, k))) return s;
  out[0] = SEQ_VAR;
  return EM_OK;
}

/* SplitToSequence: slices along axis, lengths from input `split` (a scalar:
 * chunks of that size, the last smaller; 1-D: the lengths) or else size-1
 * chunks, squeezed away when keepdims=0. */
static em_status tr_split_to_seq(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis, keepdims;
  em_shape sh;
  em_status s = oint(c, n, "axis", 0, &axis);
  if (!s) s = oint(c, n, "keepdims", 1, &keepdims);
  if (!s) s = vinfo(c, in[0], &sh);
  if (s) return s;
  if (axis < -sh.ndim || axis >= sh.ndim)
    return bad(c, "axis %lld is out of range for rank %d", (long long)axis, sh.ndim);
  if (axis < 0) axis += sh.ndim;
  int64_t dim = sh.dims[axis];
  if (dim < 0) return unsup(c, "SplitToSequence along a dynamic axis");
  int64_t *len = NULL, n_out;
  int given = n->n_inputs > 1 && in[1] >= 0;
  if (given) {
    em_shape ss;
    int64_t *sv;
    int k;
    if ((s = vinfo(c, in[1], &ss)) || (s = ints_of(c, in[1], "input 'split'", &sv, &k))) return s;
    if (ss.ndim == 0) {
      if (sv[0] <= 0) return bad(c, "split %lld; a positive chunk size expected", (long long)sv[0]);
      n_out = dim / sv[0] + (dim % sv[0] != 0);
      if (!(len = tmp(c, (size_t)(n_out + 1) * sizeof *len))) return OOM();
      for (int64_t i = 0; i < n_out; i++) len[i] = i < n_out - 1 || dim % sv[0] == 0 ? sv[0] : dim % sv[0];
    } else {
      int64_t sum = 0;
      for (int i = 0; i < k; i++) {
        if (sv[i] < 0) return bad(c, "split length %d is %lld", i, (long long)sv[i]);
        sum += sv[i];
      }
      if (sum != dim) return bad(c, "split lengths add up to %lld, the axis has %lld", (long long)sum, (long long)dim);
      len = sv, n_out = k;
    }
  } else {
    n_out = dim;
    if (!(len = tmp(c, (size_t)(n_out + 1) * sizeof *len))) return OOM();
    for (int64_t i = 0; i < n_out; i++) len[i] = 1;
  }
  if (n_out > 65536) return unsup(c, "a sequence of %lld tensors", (long long)n_out);
  em_var *v = tmp(c, (size_t)(n_out + 1) * sizeof *v);
  if (!v) return OOM();
  int64_t off = 0;
  for (int64_t i = 0; i < n_out; i++) {
    int64_t st = off, en = off + len[i];
    em_attr at[3] = {em_attr_is("starts", &st, 1), em_attr_is("ends", &en, 1), em_attr_is("axes", &axis, 1)};
    if ((s = ap1(c, "slice", in[0], at, 3, &v[i]))) return s;
    if (!given && !keepdims) {
      em_attr a = em_attr_is("axes", &axis, 1);
      if ((s = ap1(c, "squeeze", v[i], &a, 1, &v[i]))) return s;
    }
    off = en;
  }
  if ((s = seq_set(c, n->outputs[0], v, (int)n_out))) return s;
  out[0] = SEQ_VAR;
  return EM_OK;
}

/* ConcatFromSequence: concat along axis, or (new_axis=1) stacked along a new
 * axis (each element unsqueezed, then concat). */
static em_status tr_concat_from_seq(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)in;
  const struct seqval *q = seq_get(c, n->inputs[0]);
  int64_t axis, new_axis;
  em_status s = oint(c, n, "axis", 0, &axis);
  if (!s) s = oint(c, n, "new_axis", 0, &new_axis);
  if (s) return s;
  if (!oattr(n, "axis")) return bad(c, "attribute 'axis' is required");
  if (q->n == 0) return bad(c, "the sequence is empty");
  em_var *v = tmp(c, (size_t)q->n * sizeof *v);
  if (!v) return OOM();
  em_shape sh;
  if ((s = vinfo(c, q->vars[0], &sh))) return s;
  int rank = sh.ndim + (new_axis ? 1 : 0);
  if (axis < -rank || axis >= rank) return bad(c, "axis %lld is out of range for rank %d", (long long)axis, rank);
  if (axis < 0) axis += rank;
  for (int i = 0; i < q->n; i++) {
    v[i] = q->vars[i];
    if (new_axis) {
      em_attr a = em_attr_is("axes", &axis, 1);
      if ((s = ap1(c, "unsqueeze", v[i], &a, 1, &v[i]))) return s;
    }
  }
  /* Concat's translation chains past 16 inputs */
  em_onnx_node cn = *n;
  const char **names = tmp(c, (size_t)q->n * sizeof *names);
  if (!names) return OOM();
  for (int i = 0; i < q->n; i++) names[i] = "-";
  cn.n_inputs = (size_t)q->n, cn.inputs = (char **)names;
  em_onnx_attr ax = {.name = "axis", .type = EM_ONNX_ATTR_INT, .i = axis};
  cn.attrs = &ax, cn.n_attrs = 1;
  const em_onnx_node *keep = c->node;
  c->node = &cn;
  s = tr_concat(c, &cn, t, v, out);
  c->node = keep;
  return s;
}

/* --- neural-network ops --- */

static em_status tr_maxpool(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  int64_t order;
  em_status s = oint(c, n, "storage_order", 0, &order);
  if (s) return s;
  if (order != 0) return unsup(c, "storage_order=%lld (only 0, row-major)", (long long)order);
  if (n->n_outputs > 1 && n->outputs[1][0]) return unsup(c, "output 'Indices' (Ember's max_pool has one output)");
  em_attr *at = tmp(c, (n->n_attrs + 1) * sizeof *at);
  int k = 0;
  if (!at) return OOM();
  for (size_t i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, "storage_order") != 0 && (s = attr_pass(c, &n->attrs[i], &at[k++]))) return s;
  return ap1(c, t->ember, in[0], at, k, &out[0]);
}

static em_status tr_dropout(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  double ratio = 0.5, training = 0;
  int64_t is_test = 0;
  em_status s;
  if (c->opset >= 12) {
    if (n->n_inputs > 1 && in[1] >= 0 && (s = scalar_of(c, in[1], "input 'ratio'", &ratio))) return s;
    if (n->n_inputs > 2 && in[2] >= 0 && (s = scalar_of(c, in[2], "input 'training_mode'", &training))) return s;
  } else {
    if ((s = ofloat(c, n, "ratio", 0.5, &ratio)) || (s = oint(c, n, "is_test", 0, &is_test))) return s;
    /* Before opset 7 the graph said whether it was training (is_test=0). */
    if (c->opset < 7 && !is_test) training = 1;
  }
  if (training != 0 && ratio != 0)
    return unsup(c, "training-mode dropout (ratio %g) draws a random mask; ONNX's reference numbers cannot be "
                    "reproduced", ratio);
  if ((s = ap1(c, "identity", in[0], NULL, 0, &out[0]))) return s;
  if (n->n_outputs > 1 && n->outputs[1][0]) {
    em_attr a = em_attr_i("dtype", EM_BOOL);
    if ((s = ap1(c, "ones_like", in[0], &a, 1, &out[1]))) return s;
  }
  return EM_OK;
}

static em_status tr_batchnorm(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t training, spatial;
  double eps, momentum;
  em_status s = oint(c, n, "training_mode", 0, &training);
  if (!s) s = oint(c, n, "spatial", 1, &spatial);
  if (!s) s = ofloat(c, n, "epsilon", 1e-5, &eps);
  if (!s) s = ofloat(c, n, "momentum", 0.9, &momentum);
  if (s) return s;
  if (training) return unsup(c, "training_mode=1 (the running statistics as outputs)");
  if (!spatial) return unsup(c, "spatial=0 (per-activation statistics)");
  if (n->n_inputs != 5) return bad(c, "5 inputs expected, %zu given", n->n_inputs);
  int64_t is_test;
  if ((s = oint(c, n, "is_test", 0, &is_test))) return s;
  /* Before opset 7 the graph said whether it was training (is_test=0). */
  if (c->opset < 7 && !is_test) return unsup(c, "training mode (is_test=0, opset %lld)", (long long)c->opset);
  for (size_t j = 1; j < n->n_outputs; j++)
    if (n->outputs[j][0]) return unsup(c, "output %zu (training statistics)", j);
  em_attr at[2] = {em_attr_f("epsilon", eps), em_attr_f("momentum", momentum)};
  return ap(c, "batch_normalization", in, 5, at, 2, &out[0], 1);
}

static em_status tr_layernorm(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis, stash;
  double eps;
  em_shape sh;
  int k;
  em_status s = oint(c, n, "axis", -1, &axis);
  if (!s) s = ofloat(c, n, "epsilon", 1e-5, &eps);
  if (!s) s = oint(c, n, "stash_type", 1, &stash);
  if (!s) s = vinfo(c, in[0], &sh);
  if (!s) s = given_inputs(c, n, in, &k);
  if (s) return s;
  if (axis < -sh.ndim || axis >= sh.ndim)
    return bad(c, "axis %lld is out of range for rank %d", (long long)axis, sh.ndim);
  if (axis < 0) axis += sh.ndim;
  em_attr at[2] = {em_attr_i("axis", axis), em_attr_f("epsilon", eps)};
  if ((s = ap(c, "layer_normalization", in, k, at, 2, &out[0], 1))) return s;
  int want_mean = n->n_outputs > 1 && n->outputs[1][0], want_inv = n->n_outputs > 2 && n->outputs[2][0];
  if (!want_mean && !want_inv) return EM_OK;
  /* Mean and InvStdDev (kept as [d0..d(axis-1), 1, ...]) from reductions. */
  int64_t axes[EM_MAX_DIMS];
  int na = 0;
  for (int64_t i = axis; i < sh.ndim; i++) axes[na++] = i;
  em_attr ra[2] = {em_attr_is("axes", axes, na), em_attr_i("keepdims", 1)};
  em_var mean, dev, sq, var, epsv, ve;
  if ((s = ap1(c, "reduce_mean", in[0], ra, 2, &mean))) return s;
  if (want_mean) out[1] = mean;
  if (!want_inv) return EM_OK;
  if ((s = ap2(c, "sub", in[0], mean, &dev)) || (s = ap2(c, "mul", dev, dev, &sq)) ||
      (s = ap1(c, "reduce_mean", sq, ra, 2, &var)) || (s = scalar(c, sh.dtype, eps, &epsv)) ||
      (s = ap2(c, "add", var, epsv, &ve)))
    return s;
  return ap1(c, "rsqrt", ve, NULL, 0, &out[2]);
}

/* LSTM, GRU, RNN: em_recurrent_apply (training/recurrent.c) unrolls the
 * recurrence over the static sequence length. */
static em_status tr_recurrent(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  const em_recurrent_cell cell = !strcmp(n->op_type, "LSTM") ? EM_CELL_LSTM
                                 : !strcmp(n->op_type, "GRU") ? EM_CELL_GRU : EM_CELL_RNN;
  const char *dir;
  int64_t hidden, layout, lbr, input_forget;
  double clip;
  em_status s = ostr(c, n, "direction", "forward", &dir);
  if (!s) s = oint(c, n, "hidden_size", -1, &hidden);
  if (!s) s = oint(c, n, "layout", 0, &layout);
  if (!s) s = oint(c, n, "linear_before_reset", 0, &lbr);
  if (!s) s = oint(c, n, "input_forget", 0, &input_forget);
  if (!s) s = ofloat(c, n, "clip", 0, &clip);
  if (s) return s;
  em_recurrent_opts o = {.layout = (int)layout, .linear_before_reset = (int)lbr, .input_forget = (int)input_forget,
                         .clip = clip};
  if (!strcmp(dir, "forward")) o.direction = EM_DIR_FORWARD;
  else if (!strcmp(dir, "reverse")) o.direction = EM_DIR_REVERSE;
  else if (!strcmp(dir, "bidirectional")) o.direction = EM_DIR_BIDIRECTIONAL;
  else return bad(c, "direction '%s' (forward, reverse or bidirectional)", dir);
  if (oattr(n, "clip") && !(clip > 0)) return bad(c, "clip %g must be > 0", clip);
  const em_onnx_attr *acts = oattr(n, "activations");
  if (acts) {
    if (acts->type != EM_ONNX_ATTR_STRINGS) return unsup(c, "attribute 'activations' is not a list of strings");
    const char **names = tmp(c, (acts->n + 1) * sizeof *names);
    if (!names) return OOM();
    for (size_t i = 0; i < acts->n; i++) names[i] = acts->strings[i].data;
    o.activations = names, o.n_activations = (int)acts->n;
  }
  const char *ab[2] = {"activation_alpha", "activation_beta"};
  for (int k = 0; k < 2; k++) {
    const em_onnx_attr *a = oattr(n, ab[k]);
    if (!a) continue;
    if (a->type != EM_ONNX_ATTR_FLOATS) return unsup(c, "attribute '%s' is not a list of floats", ab[k]);
    double *d = tmp(c, (a->n + 1) * sizeof *d);
    if (!d) return OOM();
    for (size_t i = 0; i < a->n; i++) d[i] = a->floats[i];
    if (k == 0) o.activation_alpha = d, o.n_alpha = (int)a->n;
    else o.activation_beta = d, o.n_beta = (int)a->n;
  }
  /* X W R B sequence_lens initial_h [initial_c P] */
  const size_t max_in = cell == EM_CELL_LSTM ? 8 : 6;
  if (n->n_inputs < 3 || n->n_inputs > max_in)
    return bad(c, "%zu inputs; 3 to %zu expected", n->n_inputs, max_in);
  if (in[1] < 0 || in[2] < 0) return bad(c, "inputs W and R are required");
  em_recurrent_inputs ri = EM_RECURRENT_INPUTS(in[0], in[1], in[2]);
  em_var *opt[5] = {&ri.b, &ri.sequence_lens, &ri.initial_h, &ri.initial_c, &ri.p};
  for (size_t i = 3; i < n->n_inputs; i++)
    if (in[i] >= 0) *opt[i - 3] = in[i];
  if (hidden >= 0) {
    em_shape rs;
    if ((s = vinfo(c, in[2], &rs))) return s;
    if (rs.ndim == 3 && rs.dims[2] != hidden)
      return bad(c, "hidden_size %lld but R is [%lld, %lld, %lld]", (long long)hidden, (long long)rs.dims[0],
                 (long long)rs.dims[1], (long long)rs.dims[2]);
  }
  em_recurrent_outputs r;
  if ((s = em_recurrent_apply(c->g, cell, &ri, &o, &r))) {
    char lab[256];
    return em_fail_context(s, "%s", node_label(c, lab, sizeof lab));
  }
  const em_var outs[3] = {r.y, r.y_h, r.y_c};
  for (size_t j = 0; j < n->n_outputs && j < 3; j++) out[j] = outs[j];
  return EM_OK;
}

/* MeanVarianceNormalization: (x - mean) / sqrt(mean((x - mean)^2) + 1e-9)
 * over `axes` (default [0, 2, 3]), the epsilon of ONNX's function body. */
static em_status tr_mvn(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  static const int64_t dflt[3] = {0, 2, 3};
  const int64_t *axes;
  int na, present;
  em_shape sh;
  em_status s = oints(c, n, "axes", &axes, &na, &present);
  if (!s) s = vinfo(c, in[0], &sh);
  if (s) return s;
  if (!present) axes = dflt, na = 3;
  em_attr ra[2] = {em_attr_is("axes", axes, na), em_attr_i("keepdims", 1)};
  em_var mean, dev, sq, var, epsv, ve, sd;
  if ((s = ap1(c, "reduce_mean", in[0], ra, 2, &mean)) || (s = ap2(c, "sub", in[0], mean, &dev)) ||
      (s = ap2(c, "mul", dev, dev, &sq)) || (s = ap1(c, "reduce_mean", sq, ra, 2, &var)) ||
      (s = scalar(c, sh.dtype, 1e-9, &epsv)) || (s = ap2(c, "add", var, epsv, &ve)) ||
      (s = ap1(c, "sqrt", ve, NULL, 0, &sd)))
    return s;
  return ap2(c, "div", dev, sd, &out[0]);
}

/* --- lowerings onto several Ember ops --- */

/* PRelu: where(x < 0, slope * x, x); slope broadcasts to x. */
static em_status tr_prelu(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)n;
  em_shape sh;
  em_var zero, neg, scaled;
  em_status s = vinfo(c, in[0], &sh);
  if (!s) s = scalar(c, sh.dtype, 0, &zero);
  if (!s) s = ap2(c, "less", in[0], zero, &neg);
  if (!s) s = ap2(c, "mul", in[1], in[0], &scaled);
  if (s) return s;
  em_var w[3] = {neg, scaled, in[0]};
  return ap(c, "where", w, 3, NULL, 0, &out[0], 1);
}

/* Celu: alpha * elu(x / alpha) (elu with alpha 1). */
static em_status tr_celu(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  double alpha;
  em_shape sh;
  em_var a, xs, e;
  em_status s = ofloat(c, n, "alpha", 1.0, &alpha);
  if (!s) s = vinfo(c, in[0], &sh);
  if (s) return s;
  if (alpha == 0) return bad(c, "alpha must be nonzero");
  em_attr one = em_attr_f("alpha", 1.0);
  if ((s = scalar(c, sh.dtype, alpha, &a)) || (s = ap2(c, "div", in[0], a, &xs)) ||
      (s = ap1(c, "elu", xs, &one, 1, &e)))
    return s;
  return ap2(c, "mul", a, e, &out[0]);
}

/* Mish (opset 18): x * tanh(softplus(x)), its definition in ONNX. */
static em_status tr_mish(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t, (void)n;
  em_var sp, th;
  em_status s;
  if ((s = ap1(c, "softplus", in[0], NULL, 0, &sp)) || (s = ap1(c, "tanh", sp, NULL, 0, &th))) return s;
  return ap2(c, "mul", in[0], th, &out[0]);
}

/* Shrink: x + bias below -lambd, x - bias above lambd, 0 between. */
static em_status tr_shrink(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  double lambd, bias;
  em_shape sh;
  em_status s = ofloat(c, n, "lambd", 0.5, &lambd);
  if (!s) s = ofloat(c, n, "bias", 0.0, &bias);
  if (!s) s = vinfo(c, in[0], &sh);
  if (s) return s;
  em_var lo, hi, b, zero, below, above, xp, xm, inner;
  if ((s = scalar(c, sh.dtype, -lambd, &lo)) || (s = scalar(c, sh.dtype, lambd, &hi)) ||
      (s = scalar(c, sh.dtype, bias, &b)) || (s = scalar(c, sh.dtype, 0, &zero)) ||
      (s = ap2(c, "less", in[0], lo, &below)) || (s = ap2(c, "greater", in[0], hi, &above)) ||
      (s = ap2(c, "add", in[0], b, &xp)) || (s = ap2(c, "sub", in[0], b, &xm)))
    return s;
  em_var w1[3] = {above, xm, zero};
  if ((s = ap(c, "where", w1, 3, NULL, 0, &inner, 1))) return s;
  em_var w2[3] = {below, xp, inner};
  return ap(c, "where", w2, 3, NULL, 0, &out[0], 1);
}

/* Trilu: where(mask, x, 0), the mask a bool constant over the last two axes
 * (j - i >= k keeps the upper part, j - i <= k the lower). */
static em_status tr_trilu(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t upper, k = 0;
  em_shape sh;
  em_status s = oint(c, n, "upper", 1, &upper);
  if (!s) s = static_shape_of(c, in[0], &sh);
  if (s) return s;
  if (n->n_inputs > 1 && in[1] >= 0) {
    int64_t *kv;
    int nk;
    if ((s = ints_of(c, in[1], "input 'k'", &kv, &nk))) return s;
    if (nk != 1) return bad(c, "input 'k' has %d elements; one expected", nk);
    k = kv[0];
  }
  if (sh.ndim < 2) return bad(c, "rank %d; at least 2 expected", sh.ndim);
  int64_t rows = sh.dims[sh.ndim - 2], cols = sh.dims[sh.ndim - 1], dims[2] = {rows, cols};
  uint8_t *mask = tmp(c, (size_t)(rows * cols));
  if (!mask) return OOM();
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) mask[i * cols + j] = upper ? j - i >= k : j - i <= k;
  em_var m, zero;
  if ((s = const_new(c, EM_BOOL, 2, dims, mask, &m)) || (s = scalar(c, sh.dtype, 0, &zero))) return s;
  em_var w[3] = {m, in[0], zero};
  return ap(c, "where", w, 3, NULL, 0, &out[0], 1);
}

/* GatherElements(data, indices, axis): out = sum over a one-hot axis of
 * where(one_hot(indices), data, 0). data is first cut to indices' dims on
 * the other axes; the one-hot axis is inserted after `axis`. */
static em_status gather_elements(imp *c, em_var data, em_var indices, int64_t axis, em_var *out) {
  em_shape ds, is;
  em_status s = static_shape_of(c, data, &ds);
  if (!s) s = static_shape_of(c, indices, &is);
  if (s) return s;
  if (ds.ndim != is.ndim) return bad(c, "data rank %d, indices rank %d", ds.ndim, is.ndim);
  if (axis < -ds.ndim || axis >= ds.ndim) return bad(c, "axis %lld out of range", (long long)axis);
  if (axis < 0) axis += ds.ndim;
  if (ds.ndim + 1 > EM_MAX_DIMS) return unsup(c, "rank %d (one more axis is needed)", ds.ndim);
  int64_t starts[EM_MAX_DIMS], ends[EM_MAX_DIMS], axes[EM_MAX_DIMS];
  int nc = 0;
  for (int i = 0; i < ds.ndim; i++)
    if (i != axis && is.dims[i] != ds.dims[i]) starts[nc] = 0, ends[nc] = is.dims[i], axes[nc++] = i;
  em_var d = data;
  if (nc) {
    em_attr sa[3] = {em_attr_is("starts", starts, nc), em_attr_is("ends", ends, nc), em_attr_is("axes", axes, nc)};
    if ((s = ap1(c, "slice", data, sa, 3, &d))) return s;
  }
  /* one_hot(indices) puts the class axis at axis+1: [.., J(axis), D, ..];
   * data gets a size-1 axis at `axis`: [.., 1, D, ..]. */
  em_var oh, du, zero, picked;
  em_attr oa[3] = {em_attr_i("depth", ds.dims[axis]), em_attr_i("axis", axis + 1), em_attr_i("dtype", EM_BOOL)};
  int64_t ua = axis, ra = axis + 1;
  em_attr uat = em_attr_is("axes", &ua, 1);
  em_attr rat[2] = {em_attr_is("axes", &ra, 1), em_attr_i("keepdims", 0)};
  if ((s = ap1(c, "one_hot", indices, oa, 3, &oh)) || (s = ap1(c, "unsqueeze", d, &uat, 1, &du)) ||
      (s = scalar(c, ds.dtype, 0, &zero)))
    return s;
  em_var w[3] = {oh, du, zero};
  if ((s = ap(c, "where", w, 3, NULL, 0, &picked, 1))) return s;
  return ap1(c, "reduce_sum", picked, rat, 2, out);
}

static em_status tr_gather_elements(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  int64_t axis;
  em_status s = oint(c, n, "axis", 0, &axis);
  if (s) return s;
  return gather_elements(c, in[0], in[1], axis, &out[0]);
}

/* Negative log-likelihood of log-probabilities lp [N, C, d...] at targets
 * [N, d...], with optional class weights [C], ignore_index and reduction;
 * the loss of ONNX's NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
 * Ignored targets are mapped to C, whose one-hot row is all off, so they
 * pick nothing and weigh 0. */
static em_status nll(imp *c, const em_onnx_node *n, em_var lp, em_var target, em_var weight, em_var *out) {
  const char *reduction;
  int64_t ii;
  em_shape ls, ts;
  em_status s = ostr(c, n, "reduction", "mean", &reduction);
  if (!s) s = oint(c, n, "ignore_index", 0, &ii);
  if (!s) s = static_shape_of(c, lp, &ls);
  if (!s) s = vinfo(c, target, &ts);
  if (s) return s;
  int has_ii = oattr(n, "ignore_index") != NULL;
  if (ls.ndim < 2) return bad(c, "input rank %d; [N, C, ...] expected", ls.ndim);
  if (strcmp(reduction, "none") && strcmp(reduction, "sum") && strcmp(reduction, "mean"))
    return bad(c, "reduction '%s'", reduction);
  int64_t classes = ls.dims[1];
  em_var t = target;
  if (has_ii) {
    em_var iiv, cv, is_ii;
    if ((s = scalar(c, ts.dtype, (double)ii, &iiv)) || (s = scalar(c, ts.dtype, (double)classes, &cv)) ||
        (s = ap2(c, "equal", target, iiv, &is_ii)))
      return s;
    em_var w[3] = {is_ii, cv, target};
    if ((s = ap(c, "where", w, 3, NULL, 0, &t, 1))) return s;
  }
  em_var oh, prod, picked, wsel, loss, neg;
  em_attr oa[3] = {em_attr_i("depth", classes), em_attr_i("axis", 1), em_attr_i("dtype", ls.dtype)};
  int64_t one = 1;
  em_attr ra[2] = {em_attr_is("axes", &one, 1), em_attr_i("keepdims", 0)};
  if ((s = ap1(c, "one_hot", t, oa, 3, &oh)) || (s = ap2(c, "mul", oh, lp, &prod)) ||
      (s = ap1(c, "reduce_sum", prod, ra, 2, &picked)) || (s = ap1(c, "neg", picked, NULL, 0, &neg)))
    return s;
  /* The weight of each sample: weight[target] (1 without weights), 0 when ignored. */
  if (weight >= 0) {
    int64_t wshape[EM_MAX_DIMS];
    wshape[0] = 1, wshape[1] = classes;
    for (int i = 2; i < ls.ndim; i++) wshape[i] = 1;
    em_var wr, wp;
    em_attr sa = em_attr_is("shape", wshape, ls.ndim);
    if ((s = ap1(c, "reshape", weight, &sa, 1, &wr)) || (s = ap2(c, "mul", oh, wr, &wp)) ||
        (s = ap1(c, "reduce_sum", wp, ra, 2, &wsel)) || (s = ap2(c, "mul", neg, wsel, &loss)))
      return s;
  } else {
    loss = neg;
    if ((s = ap1(c, "reduce_sum", oh, ra, 2, &wsel))) return s;
  }
  if (strcmp(reduction, "none") == 0) {
    out[0] = loss;
    return EM_OK;
  }
  em_var total, wsum;
  if ((s = ap1(c, "reduce_sum", loss, NULL, 0, &total))) return s;
  if (strcmp(reduction, "sum") == 0) {
    out[0] = total;
    return EM_OK;
  }
  if ((s = ap1(c, "reduce_sum", wsel, NULL, 0, &wsum))) return s;
  return ap2(c, "div", total, wsum, &out[0]);
}

static em_status tr_nll(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  return nll(c, n, in[0], in[1], n->n_inputs > 2 ? in[2] : -1, &out[0]);
}

static em_status tr_sce(imp *c, const em_onnx_node *n, const tr *t, const em_var *in, em_var *out) {
  (void)t;
  em_var lp;
  em_attr a = em_attr_i("axis", 1);
  em_status s = ap1(c, "log_softmax", in[0], &a, 1, &lp);
  if (!s) s = nll(c, n, lp, in[1], n->n_inputs > 2 ? in[2] : -1, &out[0]);
  if (!s && n->n_outputs > 1) out[1] = lp;
  return s;
}

/* ------------------------------------------------------------- table --- */

#define SAME(onnx, ember, attrs, dt) {onnx, tr_same, ember, attrs, dt, ember}
#define POOL_ATTRS "kernel_shape,strides,dilations,pads,auto_pad,ceil_mode"
#define CONV_ATTRS "strides,dilations,pads,auto_pad,group,kernel_shape"
/* Every ONNX reduction, whatever its opset: axes as an attribute (before
 * opset 18; ReduceSum before 13) or as input 1, and noop_with_empty_axes. */
#define REDUCE(onnx, ember, dt) \
  {onnx, tr_reduce, ember, "axes,keepdims,noop_with_empty_axes", dt, ember " (axes input folded)"}

/* Sorted by op_type (em_onnx_import_has_op searches it with bsearch). */
static const tr trs[] = {
  SAME("Abs", "abs", "", DT_NUM),
  SAME("Acos", "acos", "", DT_FLT),
  SAME("Acosh", "acosh", "", DT_FLT),
  SAME("Add", "add", "", DT_NUM),
  SAME("And", "and", "", DT_BOOL),
  {"ArgMax", tr_arg, "argmax", "axis,keepdims,select_last_index", DT_ANY, "argmax (keepdims default 1 passed)"},
  {"ArgMin", tr_arg, "argmin", "axis,keepdims,select_last_index", DT_ANY, "argmin (keepdims default 1 passed)"},
  SAME("Asin", "asin", "", DT_FLT),
  SAME("Asinh", "asinh", "", DT_FLT),
  SAME("Atan", "atan", "", DT_FLT),
  SAME("Atanh", "atanh", "", DT_FLT),
  SAME("AveragePool", "average_pool", POOL_ATTRS ",count_include_pad", DT_FLT),
  {"BatchNormalization", tr_batchnorm, NULL, "epsilon,momentum,spatial,is_test,training_mode", DT_FLT,
    "batch_normalization, inference only"},
  {"Cast", tr_cast, NULL, "to", DT_ANY, "cast"},
  {"CastLike", tr_cast, NULL, "", DT_ANY, "cast to input 1's dtype"},
  SAME("Ceil", "ceil", "", DT_FLT),
  {"Celu", tr_celu, NULL, "alpha", DT_FLT, "lowered: alpha * elu(x / alpha)"},
  {"Clip", tr_clip, NULL, "min,max", DT_NUM, "clip (min/max inputs folded)"},
  {"Concat", tr_concat, NULL, "axis", DT_ANY, "concat (chained past 16 inputs)"},
  {"ConcatFromSequence", tr_concat_from_seq, NULL, "axis,new_axis", DT_SEQ, "concat (new_axis: unsqueeze, concat)"},
  {"Constant", tr_constant, NULL, "value,value_float,value_floats,value_int,value_ints", DT_ANY,
    "constant (import time)"},
  {"ConstantOfShape", tr_constant_of_shape, NULL, "value", DT_ANY, "constant (import time, shape folded)"},
  SAME("Conv", "convolution", CONV_ATTRS, DT_FLT | DT_HALF),
  SAME("ConvTranspose", "convolution_transpose", CONV_ATTRS ",output_padding,output_shape", DT_FLT | DT_HALF),
  SAME("Cos", "cos", "", DT_FLT),
  SAME("Cosh", "cosh", "", DT_FLT),
  {"CumSum", tr_cumsum, NULL, "exclusive,reverse", DT_NUM, "cumsum (axis folded)"},
  SAME("DepthToSpace", "depth_to_space", "blocksize,mode", DT_ANY),
  SAME("Div", "div", "", DT_NUM),
  {"Dropout", tr_dropout, NULL, "seed,ratio,is_test", DT_FLT, "identity (inference or ratio 0); mask: ones_like"},
  {"Einsum", tr_einsum, NULL, "equation", DT_NUM, "lowered: reduce_sum, transpose, reshape, matmul"},
  SAME("Elu", "elu", "alpha", DT_FLT),
  SAME("Equal", "equal", "", DT_CMP),
  SAME("Erf", "erf", "", DT_FLT),
  SAME("Exp", "exp", "", DT_FLT),
  {"Expand", tr_list_input, "expand", "", DT_ANY, "expand (shape folded)"},
  SAME("Flatten", "flatten", "axis", DT_ANY),
  SAME("Floor", "floor", "", DT_FLT),
  {"GRU", tr_recurrent, NULL, "activation_alpha,activation_beta,activations,clip,direction,hidden_size,layout,linear_before_reset", DT_FLT,
    "unrolled: matmul, slice, sigmoid, tanh, mul, add, where (training/recurrent.c)"},
  SAME("Gather", "gather", "axis", DT_ANY),
  {"GatherElements", tr_gather_elements, NULL, "axis", DT_NUM,
    "lowered: where(one_hot(indices), data, 0) + reduce_sum"},
  SAME("GatherND", "gather_nd", "batch_dims", DT_NUM),
  SAME("Gelu", "gelu", "approximate", DT_FLT),
  SAME("Gemm", "gemm", "alpha,beta,transA,transB", DT_FLT | DT_HALF),
  SAME("GlobalAveragePool", "global_average_pool", "", DT_FLT),
  SAME("GlobalMaxPool", "global_max_pool", "", DT_FLT),
  SAME("Greater", "greater", "", DT_CMP),
  SAME("GreaterOrEqual", "greater_equal", "", DT_CMP),
  SAME("HardSigmoid", "hard_sigmoid", "alpha,beta", DT_FLT),
  SAME("HardSwish", "hard_swish", "", DT_FLT),
  {"Hardmax", tr_softmax, NULL, "axis", DT_FLT, "lowered: argmax + one_hot"},
  SAME("Identity", "identity", "", DT_ANY),
  SAME("InstanceNormalization", "instance_normalization", "epsilon", DT_FLT),
  SAME("IsInf", "isinf", "detect_negative,detect_positive", DT_FLT),
  SAME("IsNaN", "isnan", "", DT_FLT),
  SAME("LRN", "local_response_normalization", "size,alpha,beta,bias", DT_FLT),
  {"LSTM", tr_recurrent, NULL, "activation_alpha,activation_beta,activations,clip,direction,hidden_size,layout,input_forget", DT_FLT,
    "unrolled: matmul, slice, sigmoid, tanh, mul, add, where (training/recurrent.c)"},
  {"LayerNormalization", tr_layernorm, NULL, "axis,epsilon,stash_type", DT_FLT,
    "layer_normalization; Mean, InvStdDev: reduce_mean, rsqrt"},
  SAME("LeakyRelu", "leaky_relu", "alpha", DT_FLT),
  SAME("Less", "less", "", DT_CMP),
  SAME("LessOrEqual", "less_equal", "", DT_CMP),
  SAME("Log", "log", "", DT_FLT),
  {"LogSoftmax", tr_softmax, "log_softmax", "axis", DT_FLT, "log_softmax (opset < 13: flatten, reshape_like)"},
  SAME("MatMul", "matmul", "", DT_NUM | DT_HALF),
  {"Max", tr_chain, "max", "", DT_NUM, "max, chained"},
  {"MaxPool", tr_maxpool, "max_pool", POOL_ATTRS ",storage_order", DT_FLT, "max_pool (no Indices output)"},
  {"Mean", tr_mean, NULL, "", DT_FLT, "add chained, div"},
  {"MeanVarianceNormalization", tr_mvn, NULL, "axes", DT_FLT, "lowered: reduce_mean, sub, mul, sqrt, div"},
  {"Min", tr_chain, "min", "", DT_NUM, "min, chained"},
  {"Mish", tr_mish, NULL, "", DT_FLT, "lowered: x * tanh(softplus(x))"},
  SAME("Mod", "mod", "fmod", DT_NUM),
  SAME("Mul", "mul", "", DT_NUM),
  SAME("Neg", "neg", "", DT_NUM),
  {"NegativeLogLikelihoodLoss", tr_nll, NULL, "reduction,ignore_index", DT_FLT,
    "lowered: one_hot, mul, reduce_sum, where"},
  SAME("Not", "not", "", DT_BOOL),
  {"OneHot", tr_onehot, NULL, "axis", DT_ANY, "one_hot (depth, values folded)"},
  SAME("Or", "or", "", DT_BOOL),
  {"PRelu", tr_prelu, NULL, "", DT_FLT, "lowered: where(x < 0, slope * x, x)"},
  {"Pad", tr_pad, NULL, "mode,pads,paddings,value", DT_ANY, "pad (pads, constant_value, axes folded); wrap: gather"},
  {"Pow", tr_pow, NULL, "", DT_NUM, "pow (exponent cast to the base type; int bases via f64)"},
  {"RNN", tr_recurrent, NULL, "activation_alpha,activation_beta,activations,clip,direction,hidden_size,layout", DT_FLT,
    "unrolled: matmul, add, tanh, where (training/recurrent.c)"},
  {"Range", tr_range, NULL, "", DT_NUM, "constant (import time, inputs folded)"},
  SAME("Reciprocal", "reciprocal", "", DT_FLT),
  REDUCE("ReduceL1", "reduce_l1", DT_FLT),
  REDUCE("ReduceL2", "reduce_l2", DT_FLT),
  REDUCE("ReduceLogSum", "reduce_log_sum", DT_FLT),
  REDUCE("ReduceLogSumExp", "reduce_log_sum_exp", DT_FLT),
  REDUCE("ReduceMax", "reduce_max", DT_NUM),
  REDUCE("ReduceMean", "reduce_mean", DT_FLT),
  REDUCE("ReduceMin", "reduce_min", DT_NUM),
  REDUCE("ReduceProd", "reduce_prod", DT_NUM),
  REDUCE("ReduceSum", "reduce_sum", DT_NUM),
  REDUCE("ReduceSumSquare", "reduce_sum_square", DT_FLT),
  SAME("Relu", "relu", "", DT_NUM),
  {"Reshape", tr_reshape, NULL, "shape,allowzero", DT_ANY, "reshape (shape folded; allowzero: reshape_like)"},
  {"Resize", tr_resize, NULL,
   "mode,coordinate_transformation_mode,nearest_mode,cubic_coeff_a,exclude_outside,extrapolation_value,axes,"
   "keep_aspect_ratio_policy,antialias", DT_FLT, "resize (scales, sizes, roi folded)"},
  SAME("Round", "round", "", DT_FLT),
  {"Scatter", tr_same, "scatter_elements", "axis", DT_NUM, "scatter_elements (opset 9-10 Scatter)"},
  SAME("ScatterElements", "scatter_elements", "axis,reduction", DT_NUM),
  SAME("ScatterND", "scatter_nd", "reduction", DT_NUM),
  SAME("Selu", "selu", "alpha,gamma", DT_FLT),
  {"SequenceAt", tr_seq_at, NULL, "", DT_SEQ, "the sequence's element (position folded)"},
  {"SequenceConstruct", tr_seq_construct, NULL, "", DT_SEQ, "a sequence (import time)"},
  {"SequenceEmpty", tr_seq_empty, NULL, "dtype", DT_SEQ, "a sequence (import time)"},
  {"SequenceErase", tr_seq_edit, NULL, "", DT_SEQ, "a sequence (import time, position folded)"},
  {"SequenceInsert", tr_seq_edit, NULL, "", DT_SEQ, "a sequence (import time, position folded)"},
  {"SequenceLength", tr_seq_length, NULL, "", DT_SEQ, "constant (import time)"},
  {"Shape", tr_shape, NULL, "start,end", DT_ANY, "constant (import time)"},
  {"Shrink", tr_shrink, NULL, "lambd,bias", DT_FLT, "lowered: where, add, sub"},
  SAME("Sigmoid", "sigmoid", "", DT_FLT),
  SAME("Sign", "sign", "", DT_NUM),
  SAME("Sin", "sin", "", DT_FLT),
  SAME("Sinh", "sinh", "", DT_FLT),
  {"Size", tr_size, NULL, "", DT_ANY, "constant (import time)"},
  {"Slice", tr_slice, NULL, "starts,ends,axes", DT_ANY, "slice (starts/ends/axes/steps folded)"},
  {"Softmax", tr_softmax, "softmax", "axis", DT_FLT, "softmax (opset < 13: flatten, reshape_like)"},
  {"SoftmaxCrossEntropyLoss", tr_sce, NULL, "reduction,ignore_index", DT_FLT,
    "lowered: log_softmax + NegativeLogLikelihoodLoss's lowering"},
  SAME("Softplus", "softplus", "", DT_FLT),
  SAME("Softsign", "softsign", "", DT_FLT),
  SAME("SpaceToDepth", "space_to_depth", "blocksize", DT_ANY),
  {"Split", tr_split, NULL, "axis,split,num_outputs", DT_ANY, "slice per output (split folded)"},
  {"SplitToSequence", tr_split_to_seq, NULL, "axis,keepdims", DT_ANY, "a sequence of slices (split folded)"},
  SAME("Sqrt", "sqrt", "", DT_FLT),
  {"Squeeze", tr_axes_op, "squeeze", "axes", DT_ANY, "squeeze (axes folded)"},
  SAME("Sub", "sub", "", DT_NUM),
  {"Sum", tr_chain, "add", "", DT_NUM, "add, chained"},
  SAME("Tan", "tan", "", DT_FLT),
  SAME("Tanh", "tanh", "", DT_FLT),
  SAME("ThresholdedRelu", "thresholded_relu", "alpha", DT_FLT),
  {"Tile", tr_list_input, "tile", "", DT_ANY, "tile (repeats folded)"},
  {"TopK", tr_topk, NULL, "axis,largest,sorted,k", DT_NUM, "top_k (K folded)"},
  SAME("Transpose", "transpose", "perm", DT_ANY),
  {"Trilu", tr_trilu, NULL, "upper", DT_ANY, "lowered: where(constant mask, x, 0)"},
  {"Unsqueeze", tr_axes_op, "unsqueeze", "axes", DT_ANY, "unsqueeze (axes folded)"},
  {"Upsample", tr_upsample, NULL, "mode,scales", DT_FLT, "resize (scales folded; asymmetric, nearest rounds down)"},
  SAME("Where", "where", "", DT_BOOL),
  SAME("Xor", "xor", "", DT_BOOL),
};

#define N_TRS (sizeof trs / sizeof trs[0])

static int tr_cmp(const void *key, const void *elem) { return strcmp((const char *)key, ((const tr *)elem)->onnx); }

static const tr *tr_find(const char *op_type) { return bsearch(op_type, trs, N_TRS, sizeof trs[0], tr_cmp); }

size_t em_onnx_import_op_count(void) { return N_TRS; }
const char *em_onnx_import_op_at(size_t i) { return i < N_TRS ? trs[i].onnx : NULL; }
int em_onnx_import_has_op(const char *op_type) { return op_type && tr_find(op_type) != NULL; }

const char *em_onnx_import_op_how(const char *op_type) {
  const tr *t = op_type ? tr_find(op_type) : NULL;
  return t ? t->how : NULL;
}

/* ------------------------------------------------------------- driver --- */

static const char *dtype_list(unsigned mask, char *buf, size_t cap) {
  buf[0] = 0;
  for (int t = 0; t < 8; t++)
    if (mask & D(t))
      snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? " " : "", em_dtype_name((em_dtype)t));
  return buf;
}

static em_status translate(imp *c, const em_onnx_node *n) {
  c->node = n;
  if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) return unsup(c, "domain '%s' is not supported", n->domain);
  const tr *t = tr_find(n->op_type);
  if (!t) return unsup(c, "no Ember translation for this op");
  for (size_t i = 0; i < n->n_attrs; i++)
    if (!in_list(t->attrs, n->attrs[i].name)) return unsup(c, "attribute '%s' is not supported", n->attrs[i].name);
  em_var *in = tmp(c, (n->n_inputs + 1) * sizeof *in), *out = tmp(c, (n->n_outputs + 1) * sizeof *out);
  if (!in || !out) return OOM();
  for (size_t i = 0; i < n->n_inputs; i++) {
    in[i] = -1;
    if (!n->inputs[i][0]) continue;
    if (name_get(c, n->inputs[i], &in[i])) continue;
    if (!seq_get(c, n->inputs[i])) return bad(c, "input '%s' is not defined before the node", n->inputs[i]);
    if (i != 0 || t->dtypes != DT_SEQ) return unsup(c, "input %zu ('%s') is a sequence", i, n->inputs[i]);
    in[i] = SEQ_VAR;
  }
  for (size_t j = 0; j < n->n_outputs; j++) out[j] = -1;
  int seq_first = t->dtypes == DT_SEQ && t->fn != tr_seq_construct && t->fn != tr_seq_empty;
  if (seq_first && (n->n_inputs == 0 || in[0] != SEQ_VAR)) return bad(c, "input 0 must be a sequence");
  if (t->fn != tr_constant && t->fn != tr_seq_empty && (n->n_inputs == 0 || in[0] == -1))
    return bad(c, "input 0 is missing");
  if (t->dtypes && t->dtypes != DT_SEQ && t->fn != tr_constant) {
    em_shape s0;
    em_status s = vinfo(c, in[0], &s0);
    if (s) return s;
    if (!(t->dtypes & D(s0.dtype))) {
      char buf[96];
      return unsup(c, "input of dtype %s (Ember's translation takes %s)", em_dtype_name(s0.dtype),
                   dtype_list(t->dtypes, buf, sizeof buf));
    }
  }
  em_status s = t->fn(c, n, t, in, out);
  if (s) return s;
  for (size_t j = 0; j < n->n_outputs; j++) {
    if (!n->outputs[j][0] || out[j] == SEQ_VAR) continue; /* a sequence: the translation recorded it */
    if (out[j] < 0) return unsup(c, "output %zu ('%s') is not produced by the translation", j, n->outputs[j]);
    if ((s = name_set(c, n->outputs[j], out[j]))) return s;
  }
  return EM_OK;
}

static em_status add_inputs(imp *c, em_tensor *const *values, em_var *input_vars) {
  const em_onnx_graph *gr = &c->m->graph;
  em_status s;
  c->feeds = calloc(gr->n_inputs + 1, sizeof *c->feeds);
  if (!c->feeds) return OOM();
  c->all_fed = 1;
  for (size_t i = 0; i < gr->n_inputs; i++) {
    const em_onnx_value_info *vi = &gr->inputs[i];
    em_tensor *v = values ? values[i] : NULL;
    input_vars[i] = -1;
    int is_init = 0;
    for (size_t k = 0; k < gr->n_initializers; k++) is_init |= strcmp(gr->initializers[k].name, vi->name) == 0;
    if (is_init && !v) continue; /* IR < 4: the initializer gives its value */
    em_dtype dt;
    int ndim;
    int64_t dims[EM_MAX_DIMS];
    if (v) {
      dt = em_tensor_dtype(v), ndim = em_tensor_ndim(v);
      memcpy(dims, em_tensor_shape(v), (size_t)ndim * sizeof dims[0]);
    } else {
      c->all_fed = 0;
      if (vi->type.kind != EM_ONNX_VALUE_TENSOR)
        return em_fail(EM_ERR_UNSUPPORTED, "ONNX graph input '%s': only tensors are supported", vi->name);
      if ((s = em_onnx_dtype_to_em(vi->type.dtype, &dt))) return em_fail_context(s, "ONNX graph input '%s'", vi->name);
      if (!vi->type.has_shape) return em_fail(EM_ERR_UNSUPPORTED, "ONNX graph input '%s' has no shape", vi->name);
      if (vi->type.rank > EM_MAX_DIMS)
        return em_fail(EM_ERR_UNSUPPORTED, "ONNX graph input '%s' has rank %zu", vi->name, vi->type.rank);
      ndim = (int)vi->type.rank;
      for (int d = 0; d < ndim; d++) dims[d] = vi->type.dims[d].value;
    }
    em_var x;
    if ((s = em_input(c->g, vi->name, dt, ndim, dims, &x))) return s;
    if ((s = name_set(c, vi->name, x))) return s;
    input_vars[i] = x;
    if (v) {
      c->feeds[c->n_feeds++] = (em_feed){x, v};
      if ((s = known_set(c, x, v))) return s;
    }
  }
  return EM_OK;
}

static em_status add_initializers(imp *c) {
  const em_onnx_graph *gr = &c->m->graph;
  for (size_t k = 0; k < gr->n_initializers; k++) {
    const em_onnx_tensor *it = &gr->initializers[k];
    em_var v;
    if (name_get(c, it->name, &v)) continue; /* a graph input with a value overrides it */
    em_tensor *t;
    em_status s = em_onnx_tensor_to_em(it, &t);
    if (s) return s;
    s = const_of_tensor(c, t, &v);
    em_tensor_release(t);
    if (!s) s = name_set(c, it->name, v);
    if (s) return s;
  }
  return EM_OK;
}

em_status em_onnx_import(const em_onnx_model *m, em_graph *g, em_tensor *const *input_values, em_var *input_vars,
                         em_var *output_vars) {
  return em_onnx_import_at(m, g, input_values, input_vars, output_vars, NULL);
}

em_status em_onnx_import_at(const em_onnx_model *m, em_graph *g, em_tensor *const *input_values, em_var *input_vars,
                            em_var *output_vars, size_t *failed_node) {
  if (failed_node) *failed_node = (size_t)-1;
  if (!m || !g || (m->graph.n_inputs && !input_vars) || (m->graph.n_outputs && !output_vars))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_import: NULL argument");
  imp c = {.g = g, .m = m, .opset = em_onnx_model_opset(m, "")};
  if (c.opset < 0) c.opset = 1;
  em_status s = add_inputs(&c, input_values, input_vars);
  if (!s) s = add_initializers(&c);
  for (size_t i = 0; !s && i < m->graph.n_nodes; i++) {
    s = translate(&c, &m->graph.nodes[i]);
    if (s && failed_node) *failed_node = i;
    tmp_free(&c);
  }
  c.node = NULL;
  for (size_t j = 0; !s && j < m->graph.n_outputs; j++)
    if (!name_get(&c, m->graph.outputs[j].name, &output_vars[j]))
      s = seq_get(&c, m->graph.outputs[j].name)
            ? em_fail(EM_ERR_UNSUPPORTED, "ONNX graph output '%s' is a sequence; only tensors can be outputs",
                      m->graph.outputs[j].name)
            : em_fail(EM_ERR_INVALID_ARGUMENT, "ONNX graph output '%s' is not computed by any node",
                      m->graph.outputs[j].name);
  tmp_free(&c);
  free(c.tmp);
  for (size_t i = 0; i < c.n_names; i++) free(c.names[i]);
  free(c.names);
  free(c.vars);
  for (size_t i = 0; i < c.n_known; i++) em_tensor_release(c.known[i]);
  free(c.known);
  free(c.feeds);
  for (size_t i = 0; i < c.n_seqs; i++) free(c.seqs[i].name), free(c.seqs[i].vars);
  free(c.seqs);
  return s;
}
