/* Ember graph -> ONNX model (include/ember/onnx.h: em_onnx_export).
 *
 * The nodes the requested outputs need (em_graph_schedule) are written in
 * that order: inputs become graph inputs, parameters, states and constants
 * initializers (raw_data, little endian), each op one ONNX node or a few
 * through the table `xops` at the end (one entry per Ember op that has an
 * ONNX form). It is the inverse of onnx_import.c's translations:
 *   - most ops keep their attributes, whose names and meanings Ember took
 *     from ONNX; where Ember's default differs from ONNX's the value is
 *     written explicitly (keepdims of the reductions and argmax/argmin is 0
 *     in Ember, 1 in ONNX; concat's axis is required in ONNX);
 *   - attributes that ONNX takes as inputs become int64 (or typed)
 *     initializers: Reshape's shape, Slice's starts/ends/axes/steps,
 *     Squeeze/Unsqueeze's axes, Expand's shape, Tile's repeats, TopK's K,
 *     Clip's min/max, Pad's pads and constant_value, OneHot's depth and
 *     values, CumSum's axis, Resize's sizes or scales (and roi), the
 *     reductions' axes (ReduceSum from opset 13, the others from 18;
 *     attributes before);
 *   - a few Ember ops are written as two ONNX nodes: matmul with
 *     transpose_a/b (Transpose + MatMul), rsqrt (Sqrt + Reciprocal),
 *     reshape_like (Shape + Reshape), broadcast_like (Shape + Expand),
 *     zeros_like/ones_like (Shape + ConstantOfShape), pow_scalar (Pow with a
 *     constant exponent); dropout is ONNX's Dropout, the identity outside
 *     training, as Ember's is in inference;
 *   - an op with no ONNX form (the losses, gradient helpers, learner
 *     updates, sum_to, log1p, ...), or a form the chosen opset lacks (Gelu
 *     before 20, LayerNormalization before 17, HardSwish before 14,
 *     AveragePool dilations before 19, ScatterND/ScatterElements reductions
 *     before 16 (max, min: 18), Resize's antialias before 18,
 *     half_pixel_symmetric before 19 and
 *     tf_half_pixel_for_nn (opset 11 only), Mod of floats with numpy's
 *     sign), is refused with EM_ERR_UNSUPPORTED naming the node and the op:
 *     never a file that computes something else.
 * A recurrence (em_lstm / em_gru / em_rnn / an imported LSTM, GRU, RNN:
 * em_recurrent_apply unrolls it into ~20 nodes per step and records a block,
 * engine/graph_internal.h) is written as its ONE ONNX node where the model
 * reads nothing inside it (section "recurrences" below).
 * Ember's dynamic axis (-1 in a shape) is a dim_param. Tensors go into the
 * model unless the model would pass protobuf's 2 GB, or the caller asks:
 * then tensors of 1 KiB and more go to one data file beside the model
 * (external_data location/offset/length, as the reader reads them). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "file_atomic.h"
#include "graph_internal.h"
#include "onnx/onnx.pb-c.h" /* generated at build time into build/gen/onnx/ */
#include "ember/onnx.h"
#include "onnx_export.h"

#define API __attribute__((visibility("default")))

#define STR2(x) #x
#define STR(x) STR2(x)
#define EXPORT_VERSION STR(EMBER_VERSION_MAJOR) "." STR(EMBER_VERSION_MINOR) "." STR(EMBER_VERSION_PATCH)
#define EXPORT_DEFAULT_OPSET 17
#define EXPORT_MIN_OPSET 13
#define EXPORT_MAX_OPSET 20
/* Tensors of at least this many bytes go to the data file when external data is on. */
#define EXTERNAL_MIN_BYTES 1024
/* protobuf's limit on one message (what readers accept). */
#define PROTOBUF_LIMIT ((size_t)2147483647)

/* ------------------------------------------------------------ context --- */

typedef struct ex {
  const em_graph *g;
  int opset;
  const char *dyn_name;         /* dim_param of Ember's dynamic axis */
  int node;                     /* the Ember node being written (messages) */
  /* Everything allocated for the protobuf-c structures: freed together. */
  void **mem;
  size_t n_mem, cap_mem;
  /* ONNX names by em_var (NULL: not written) and the set of names used. */
  char **vname;
  char **used;                  /* open addressing, cap_used a power of two */
  size_t n_used, cap_used;
  Onnx__NodeProto **nodes;
  size_t n_nodes, cap_nodes;
  Onnx__TensorProto **inits;
  size_t n_inits, cap_inits;
  Onnx__ValueInfoProto **inputs, **outputs;
  size_t n_inputs, n_outputs;
  unsigned long fresh;          /* counter for generated names */
  const char *node_base;        /* set: the name onode gives the next ONNX node (else the Ember node's) */
  /* Blocks written as one ONNX node (LSTM, GRU, RNN): owner[node] is the
   * block whose interior the node is in, -1 for a node written itself. */
  int *owner;
} ex;

static em_status oom(void) { return em_fail(EM_ERR_OUT_OF_MEMORY, "em_onnx_export: out of memory"); }

static void *al(ex *c, size_t bytes) {
  if (c->n_mem == c->cap_mem) {
    size_t cap = c->cap_mem ? 2 * c->cap_mem : 256;
    void **m = realloc(c->mem, cap * sizeof *m);
    if (!m) return NULL;
    c->mem = m, c->cap_mem = cap;
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (p) c->mem[c->n_mem++] = p;
  return p;
}

static char *sdup(ex *c, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = al(c, n);
  if (p) memcpy(p, s, n);
  return p;
}

/* "node 7 'conv1' (op convolution)" for messages: the node's name, else its
 * first output's. */
static const char *node_label(const ex *c, char *buf, size_t cap) {
  const em_node *n = &c->g->nodes[c->node];
  const char *name = n->name && n->name[0] ? n->name : n->n_out > 0 ? c->g->values[n->first_value].name : NULL;
  int named = name && name[0];
  snprintf(buf, cap, "node %d%s%s%s (op %s)", c->node, named ? " '" : "", named ? name : "", named ? "'" : "",
           n->op ? n->op->name : em_node_kind_name(n->kind));
  return buf;
}

static em_status refuse(const ex *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static em_status refuse(const ex *c, const char *fmt, ...) {
  char why[512], lab[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return em_fail(EM_ERR_UNSUPPORTED, "em_onnx_export: %s: %s", node_label(c, lab, sizeof lab), why);
}

/* --------------------------------------------------------------- names --- */

static size_t hash(const char *s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int name_used(const ex *c, const char *s) {
  if (!c->cap_used) return 0;
  for (size_t i = hash(s) & (c->cap_used - 1);; i = (i + 1) & (c->cap_used - 1)) {
    if (!c->used[i]) return 0;
    if (!strcmp(c->used[i], s)) return 1;
  }
}

/* Records s (arena memory) as used. */
static em_status name_take(ex *c, char *s) {
  if (2 * (c->n_used + 1) > c->cap_used) {
    size_t cap = c->cap_used ? 2 * c->cap_used : 256;
    char **u = calloc(cap, sizeof *u);
    if (!u) return oom();
    for (size_t j = 0; j < c->cap_used; j++)
      if (c->used[j]) {
        size_t i = hash(c->used[j]) & (cap - 1);
        while (u[i]) i = (i + 1) & (cap - 1);
        u[i] = c->used[j];
      }
    free(c->used);
    c->used = u, c->cap_used = cap;
  }
  size_t i = hash(s) & (c->cap_used - 1);
  while (c->used[i]) i = (i + 1) & (c->cap_used - 1);
  c->used[i] = s;
  c->n_used++;
  return EM_OK;
}

/* A new name not used yet: base itself when free, else base_1, base_2, ... */
static char *fresh(ex *c, const char *base) {
  char buf[300];
  snprintf(buf, sizeof buf, "%s", base);
  while (name_used(c, buf)) snprintf(buf, sizeof buf, "%.280s_%lu", base, ++c->fresh);
  char *s = sdup(c, buf);
  if (!s || name_take(c, s)) return NULL;
  return s;
}

/* ---------------------------------------------------------- protobuf --- */

static int32_t onnx_type(em_dtype t) {
  switch (t) {
  case EM_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  case EM_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  case EM_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
  case EM_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
  case EM_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
  case EM_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  case EM_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
  case EM_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  }
  return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
}

#define GROW(c, arr, n, cap)                                  \
  do {                                                        \
    if ((n) == (cap)) {                                       \
      size_t cap2_ = (cap) ? 2 * (cap) : 64;                  \
      void *p_ = realloc((arr), cap2_ * sizeof *(arr));       \
      if (!p_) return oom();                                  \
      (arr) = p_, (cap) = cap2_;                              \
    }                                                         \
  } while (0)

/* An ONNX node op_type(in...) -> out..., named after the Ember node. */
static em_status onode(ex *c, const char *op_type, const char *const *in, int n_in, char *const *out, int n_out,
                       Onnx__NodeProto **made) {
  GROW(c, c->nodes, c->n_nodes, c->cap_nodes);
  Onnx__NodeProto *p = al(c, sizeof *p);
  if (!p) return oom();
  *p = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  const em_node *n = &c->g->nodes[c->node];
  char base[256];
  if (c->node_base) snprintf(base, sizeof base, "%.200s", c->node_base);
  else if (n->name && n->name[0]) snprintf(base, sizeof base, "%.200s", n->name);
  else snprintf(base, sizeof base, "%s_%s", n->op ? n->op->name : em_node_kind_name(n->kind), op_type);
  if (!(p->name = fresh(c, base)) || !(p->op_type = sdup(c, op_type))) return oom();
  p->domain = (char *)"";
  p->input = al(c, sizeof(char *) * (size_t)(n_in ? n_in : 1));
  p->output = al(c, sizeof(char *) * (size_t)n_out);
  if (!p->input || !p->output) return oom();
  for (int i = 0; i < n_in; i++) p->input[i] = (char *)in[i];
  for (int i = 0; i < n_out; i++) p->output[i] = out[i];
  p->n_input = (size_t)n_in, p->n_output = (size_t)n_out;
  p->attribute = al(c, sizeof(Onnx__AttributeProto *) * 16);
  if (!p->attribute) return oom();
  c->nodes[c->n_nodes++] = p;
  if (made) *made = p;
  return EM_OK;
}

static Onnx__AttributeProto *oattr(ex *c, Onnx__NodeProto *p, const char *name, Onnx__AttributeProto__AttributeType t) {
  if (p->n_attribute == 16) return NULL; /* no Ember op has more */
  Onnx__AttributeProto *a = al(c, sizeof *a);
  if (!a) return NULL;
  *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
  if (!(a->name = sdup(c, name))) return NULL;
  a->has_type = 1, a->type = t;
  p->attribute[p->n_attribute++] = a;
  return a;
}

static em_status attr_int(ex *c, Onnx__NodeProto *p, const char *name, int64_t v) {
  Onnx__AttributeProto *a = oattr(c, p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a) return oom();
  a->has_i = 1, a->i = v;
  return EM_OK;
}

static em_status attr_ints(ex *c, Onnx__NodeProto *p, const char *name, const int64_t *v, int n) {
  Onnx__AttributeProto *a = oattr(c, p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  if (!a || !(a->ints = al(c, sizeof(int64_t) * (size_t)(n ? n : 1)))) return oom();
  if (n) memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
  a->n_ints = (size_t)n;
  return EM_OK;
}

/* An Ember attribute as it is (names and meanings are ONNX's). */
static em_status attr_copy(ex *c, Onnx__NodeProto *p, const em_attr *e) {
  Onnx__AttributeProto *a;
  switch (e->type) {
  case EM_ATTR_INT: return attr_int(c, p, e->name, e->i);
  case EM_ATTR_INTS: return attr_ints(c, p, e->name, e->ints, e->n);
  case EM_ATTR_FLOAT:
    if (!(a = oattr(c, p, e->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT))) return oom();
    a->has_f = 1, a->f = (float)e->f;
    return EM_OK;
  case EM_ATTR_FLOATS:
    if (!(a = oattr(c, p, e->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS)) ||
        !(a->floats = al(c, sizeof(float) * (size_t)(e->n ? e->n : 1))))
      return oom();
    for (int i = 0; i < e->n; i++) a->floats[i] = (float)e->floats[i];
    a->n_floats = (size_t)e->n;
    return EM_OK;
  case EM_ATTR_STRING:
    if (!(a = oattr(c, p, e->name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING))) return oom();
    a->has_s = 1, a->s.data = (uint8_t *)e->s, a->s.len = strlen(e->s);
    return EM_OK;
  }
  return refuse(c, "attribute '%s' has an unknown type", e->name);
}

static Onnx__TensorProto *tensor_proto(ex *c, em_dtype dt, int ndim, const int64_t *dims, const void *data,
                                       size_t nbytes) {
  Onnx__TensorProto *t = al(c, sizeof *t);
  if (!t) return NULL;
  *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  t->has_data_type = 1, t->data_type = onnx_type(dt);
  if (!(t->dims = al(c, sizeof(int64_t) * (size_t)(ndim ? ndim : 1)))) return NULL;
  if (ndim) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)ndim);
  t->n_dims = (size_t)ndim;
  t->has_raw_data = 1, t->raw_data.data = (uint8_t *)data, t->raw_data.len = nbytes;
  return t;
}

/* An initializer named after base holding a copy of data; its name, or NULL (no memory). */
static const char *init_copy(ex *c, const char *base, em_dtype dt, int ndim, const int64_t *dims, const void *data,
                             size_t nbytes) {
  void *copy = al(c, nbytes);
  if (!copy) return NULL;
  memcpy(copy, data, nbytes);
  if (c->n_inits == c->cap_inits) {
    size_t cap = c->cap_inits ? 2 * c->cap_inits : 64;
    void *p = realloc(c->inits, cap * sizeof *c->inits);
    if (!p) return NULL;
    c->inits = p, c->cap_inits = cap;
  }
  Onnx__TensorProto *t = tensor_proto(c, dt, ndim, dims, copy, nbytes);
  if (!t || !(t->name = fresh(c, base))) return NULL;
  c->inits[c->n_inits++] = t;
  return t->name;
}

/* A 1-D int64 initializer. */
static const char *init_i64s(ex *c, const char *base, const int64_t *v, int n) {
  int64_t d = n;
  return init_copy(c, base, EM_I64, 1, &d, v, sizeof(int64_t) * (size_t)n);
}

/* A scalar (rank 0) of dtype dt holding v. */
/* ----------------------------------------------------- Ember node info --- */

static size_t scalar_bytes(em_dtype dt, double v, unsigned char *buf);

static em_status refuse(const ex *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A scalar (rank 0) initializer of dtype dt holding v, named in *out. */
static em_status init_scalar(ex *c, const char *base, em_dtype dt, double v, const char **out) {
  unsigned char buf[8];
  size_t es = scalar_bytes(dt, v, buf);
  if (!es) return refuse(c, "a %s scalar for '%s' (Ember writes f32, f64, i32, i64, u8, bool)", em_dtype_name(dt), base);
  return (*out = init_copy(c, base, dt, 0, NULL, buf, es)) ? EM_OK : oom();
}

static const em_attr *eattr(const em_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

static int64_t eint(const em_node *n, const char *name, int64_t dflt) {
  const em_attr *a = eattr(n, name);
  if (!a) return dflt;
  return a->type == EM_ATTR_FLOAT ? (int64_t)a->f : a->i;
}

static double efloat(const em_node *n, const char *name, double dflt) {
  const em_attr *a = eattr(n, name);
  if (!a) return dflt;
  return a->type == EM_ATTR_INT ? (double)a->i : a->f;
}

static const em_shape *in_shape(const ex *c, const em_node *n, int i) { return &c->g->values[n->inputs[i]].shape; }

/* ------------------------------------------------------- translations --- */

typedef struct xop xop;
/* Writes node n as ONNX nodes reading in[] and writing out[]. */
typedef em_status (*xfn)(ex *c, const em_node *n, const xop *t, const char **in, char **out);
struct xop {
  const char *ember, *onnx;
  xfn fn;
  int min_opset;                /* the ONNX form written exists from this opset */
  const char *skip;             /* Ember attributes not written, comma-separated (with the reason in the table) */
};

static int listed(const char *list, const char *name) {
  size_t k = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == k && !strncmp(p, name, k)) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* The op with its attributes, except those in t->skip. */
static em_status same(ex *c, const em_node *n, const xop *t, const char **in, int n_in, char **out,
                      Onnx__NodeProto **made) {
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, in, n_in, out, n->n_out, &p);
  for (int i = 0; i < n->n_attrs && !s; i++)
    if (!listed(t->skip, n->attrs[i].name)) s = attr_copy(c, p, &n->attrs[i]);
  if (!s && made) *made = p;
  return s;
}

static em_status x_same(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  return same(c, n, t, in, n->n_in, out, NULL);
}

/* argmax/argmin: keepdims defaults to 0 in Ember, 1 in ONNX. */
static em_status x_keepdims(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  Onnx__NodeProto *p;
  em_status s = same(c, n, t, in, n->n_in, out, &p);
  if (!s && !eattr(n, "keepdims")) s = attr_int(c, p, "keepdims", 0);
  return s;
}

static em_status x_concat(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  Onnx__NodeProto *p;
  em_status s = same(c, n, t, in, n->n_in, out, &p);
  if (!s && !eattr(n, "axis")) s = attr_int(c, p, "axis", 0);
  return s;
}

/* Axes: an input for ReduceSum from opset 13 and for every reduction from
 * 18, an attribute before; keepdims written (Ember's default is 0). */
static em_status x_reduce(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const em_attr *axes = eattr(n, "axes");
  if (axes && axes->n == 0) return refuse(c, "an empty 'axes' list");
  int as_input = c->opset >= 18 || !strcmp(t->onnx, "ReduceSum");
  const char *ins[2] = {in[0], NULL};
  if (axes && as_input && !(ins[1] = init_i64s(c, "axes", axes->ints, axes->n))) return oom();
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, ins, ins[1] ? 2 : 1, out, 1, &p);
  if (!s && axes && !as_input) s = attr_ints(c, p, "axes", axes->ints, axes->n);
  if (!s) s = attr_int(c, p, "keepdims", eint(n, "keepdims", 0));
  return s;
}

static em_status transposed_last2(ex *c, const char *x, int ndim, const char **out) {
  if (ndim < 2) return EM_OK; /* a vector: the flag changes nothing */
  int64_t perm[EM_MAX_DIMS];
  for (int i = 0; i < ndim; i++) perm[i] = i;
  perm[ndim - 2] = ndim - 1, perm[ndim - 1] = ndim - 2;
  char *o = fresh(c, "transposed");
  Onnx__NodeProto *p;
  if (!o) return oom();
  em_status s = onode(c, "Transpose", &x, 1, &o, 1, &p);
  if (!s) s = attr_ints(c, p, "perm", perm, ndim);
  *out = o;
  return s;
}

static em_status x_matmul(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const char *ins[2] = {in[0], in[1]};
  em_status s = EM_OK;
  if (eint(n, "transpose_a", 0)) s = transposed_last2(c, in[0], in_shape(c, n, 0)->ndim, &ins[0]);
  if (!s && eint(n, "transpose_b", 0)) s = transposed_last2(c, in[1], in_shape(c, n, 1)->ndim, &ins[1]);
  if (!s) s = onode(c, t->onnx, ins, 2, out, 1, NULL);
  return s;
}

/* An Ember INTS attribute that ONNX takes as an int64 input (required or not). */
static em_status ints_as_input(ex *c, const em_node *n, const char *name, int required, const char **out) {
  const em_attr *a = eattr(n, name);
  *out = "";
  if (!a) return required ? refuse(c, "attribute '%s' is missing", name) : EM_OK;
  if (a->type != EM_ATTR_INTS) return refuse(c, "attribute '%s' is not a list of ints", name);
  return (*out = init_i64s(c, name, a->ints, a->n)) ? EM_OK : oom();
}

/* Ops whose listed attributes are ONNX inputs 1.. in that order (trailing
 * absent ones left out): Reshape, Expand, Tile, Slice, Squeeze, Unsqueeze. */
static em_status x_inputs(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  static const struct { const char *op, *names[4]; int required; } forms[] = {
      {"reshape", {"shape"}, 1},         {"expand", {"shape"}, 1},      {"tile", {"repeats"}, 1},
      {"slice", {"starts", "ends", "axes", "steps"}, 2},               {"squeeze", {"axes"}, 0},
      {"unsqueeze", {"axes"}, 1},        {"expand_dims", {"axes"}, 1},
  };
  const char *ins[5] = {in[0]};
  int k = 1, last = 0;
  em_status s = EM_OK;
  for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
    if (strcmp(forms[f].op, n->op->name)) continue;
    for (int j = 0; j < 4 && forms[f].names[j] && !s; j++, k++) {
      s = ints_as_input(c, n, forms[f].names[j], j < forms[f].required, &ins[k]);
      if (ins[k][0]) last = k;
    }
  }
  if (s) return s;
  return onode(c, t->onnx, ins, last + 1, out, 1, NULL);
}

static em_status shape_of(ex *c, const char *x, const char **out) {
  char *o = fresh(c, "shape");
  if (!o) return oom();
  *out = o;
  return onode(c, "Shape", &x, 1, &o, 1, NULL);
}

/* reshape_like -> Reshape(x, Shape(like)); broadcast_like -> Expand(x, Shape(like)). */
static em_status x_like_shape(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const char *ins[2] = {in[0], NULL};
  em_status s = shape_of(c, in[1], &ins[1]);
  Onnx__NodeProto *p;
  if (!s) s = onode(c, t->onnx, ins, 2, out, 1, &p);
  if (s || strcmp(n->op->name, "reshape_like")) return s;
  /* A 0 in the shape is a 0, not "copy x's dimension" (allowzero, opset 14). */
  if (c->opset >= 14) return attr_int(c, p, "allowzero", 1);
  const em_shape *like = in_shape(c, n, 1);
  for (int i = 0; i < like->ndim; i++)
    if (like->dims[i] <= 0) return refuse(c, "a shape that may hold 0 needs Reshape's allowzero (opset 14)");
  return EM_OK;
}

/* ConstantOfShape's value attribute: one element of dtype dt. */
static em_status const_of_shape(ex *c, const char *shape, em_dtype dt, double v, char *out) {
  Onnx__NodeProto *p;
  em_status s = onode(c, "ConstantOfShape", &shape, 1, &out, 1, &p);
  if (s) return s;
  unsigned char buf[8] = {0};
  int64_t one = 1;
  if (!scalar_bytes(dt, v, buf)) return refuse(c, "dtype %s for a constant fill", em_dtype_name(dt));
  void *data = al(c, 8);
  Onnx__AttributeProto *a = oattr(c, p, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  if (!data || !a) return oom();
  memcpy(data, buf, 8);
  if (!(a->t = tensor_proto(c, dt, 1, &one, data, em_dtype_size(dt)))) return oom();
  return EM_OK;
}

/* zeros_like / ones_like: ConstantOfShape(Shape(x)) in the output's dtype. */
static em_status x_fill_like(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  (void)t;
  const char *sh;
  em_status s = shape_of(c, in[0], &sh);
  em_dtype dt = c->g->values[n->first_value].shape.dtype;
  return s ? s : const_of_shape(c, sh, dt, !strcmp(n->op->name, "ones_like") ? 1 : 0, out[0]);
}

static em_status x_zeros(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  (void)t, (void)in;
  const em_shape *sh = &c->g->values[n->first_value].shape;
  for (int i = 0; i < sh->ndim; i++)
    if (sh->dims[i] < 0) return refuse(c, "a fill of a dynamic shape");
  int64_t nd = sh->ndim;
  const char *shape = init_copy(c, "shape", EM_I64, 1, &nd, sh->dims, sizeof(int64_t) * (size_t)sh->ndim);
  return shape ? const_of_shape(c, shape, sh->dtype, 0, out[0]) : oom();
}

/* Clip's bounds are inputs of x's dtype (opset 11 on). */
static em_status x_clip(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  em_dtype dt = in_shape(c, n, 0)->dtype;
  const char *ins[3] = {in[0], "", ""};
  /* An infinite bound is no bound (the importer writes both). */
  double lo = efloat(n, "min", -INFINITY), hi = efloat(n, "max", INFINITY);
  em_status s = EM_OK;
  if (isfinite(lo) || (dt != EM_I32 && dt != EM_I64 && lo > 0)) s = init_scalar(c, "min", dt, lo, &ins[1]);
  if (!s && (isfinite(hi) || (dt != EM_I32 && dt != EM_I64 && hi < 0))) s = init_scalar(c, "max", dt, hi, &ins[2]);
  if (s) return s;
  return onode(c, t->onnx, ins, ins[2][0] ? 3 : ins[1][0] ? 2 : 1, out, 1, NULL);
}

static em_status x_pad(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const char *ins[3] = {in[0], NULL, ""};
  em_status s = ints_as_input(c, n, "pads", 1, &ins[1]);
  if (s) return s;
  const em_attr *mode = eattr(n, "mode");
  double value = efloat(n, "value", 0);
  if (value != 0 && (s = init_scalar(c, "constant_value", in_shape(c, n, 0)->dtype, value, &ins[2]))) return s;
  Onnx__NodeProto *p;
  if ((s = onode(c, t->onnx, ins, ins[2][0] ? 3 : 2, out, 1, &p))) return s;
  return mode ? attr_copy(c, p, mode) : EM_OK;
}

static em_status x_topk(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  int64_t k = eint(n, "k", -1);
  if (!eattr(n, "k")) return refuse(c, "attribute 'k' is missing");
  const char *ins[2] = {in[0], init_i64s(c, "k", &k, 1)};
  if (!ins[1]) return oom();
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, ins, 2, out, 2, &p);
  for (int i = 0; i < n->n_attrs && !s; i++)
    if (strcmp(n->attrs[i].name, "k")) s = attr_copy(c, p, &n->attrs[i]);
  return s;
}

/* Bytes of v in dtype dt (8 bytes at most); 0 for a dtype without a fill. */
static size_t scalar_bytes(em_dtype dt, double v, unsigned char *buf) {
  float f = (float)v;
  int32_t i32 = (int32_t)v;
  int64_t i64 = (int64_t)v;
  switch (dt) {
  case EM_F32: memcpy(buf, &f, 4); return 4;
  case EM_F64: memcpy(buf, &v, 8); return 8;
  case EM_I32: memcpy(buf, &i32, 4); return 4;
  case EM_I64: memcpy(buf, &i64, 8); return 8;
  case EM_U8: case EM_BOOL: buf[0] = (uint8_t)v; return 1;
  default: return 0;
  }
}

/* one_hot: depth and [off, on] are inputs; the values' dtype is the
 * output's. ONNX allows any types there, but runtimes implement a few
 * combinations (onnxruntime: int64 indices with int64 or float values and
 * an int64 depth, int32 values with a float depth; int32 indices with float
 * values): those are written, and another output dtype (bool, uint8,
 * double) is float values and a Cast, when both values are exact in float. */
static em_status x_onehot(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  em_dtype dt = c->g->values[n->first_value].shape.dtype, idx = in_shape(c, n, 0)->dtype;
  double vals[2] = {efloat(n, "off_value", 0), efloat(n, "on_value", 1)};
  em_dtype vdt = dt, ddt = idx == EM_I32 ? EM_I32 : EM_I64;
  if (idx == EM_I64 && dt == EM_I32) ddt = EM_F32;
  int direct = dt == EM_F32 || (idx == EM_I64 && (dt == EM_I64 || dt == EM_I32));
  if (!direct && (double)(float)vals[0] == vals[0] && (double)(float)vals[1] == vals[1]) vdt = EM_F32;
  unsigned char buf[16];
  size_t es = scalar_bytes(vdt, vals[0], buf);
  if (!es || !scalar_bytes(vdt, vals[1], buf + es)) return refuse(c, "output dtype %s", em_dtype_name(dt));
  unsigned char dbuf[8];
  int64_t two = 2;
  scalar_bytes(ddt, (double)eint(n, "depth", -1), dbuf);
  const char *ins[3] = {in[0], init_copy(c, "depth", ddt, 0, NULL, dbuf, em_dtype_size(ddt)),
                        init_copy(c, "values", vdt, 1, &two, buf, 2 * es)};
  char *mid = vdt == dt ? out[0] : fresh(c, "one_hot");
  if (!ins[1] || !ins[2] || !mid) return oom();
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, ins, 3, &mid, 1, &p);
  if (!s) s = attr_int(c, p, "axis", eint(n, "axis", -1));
  if (s || vdt == dt) return s;
  const char *mid_in = mid;
  if (!(s = onode(c, "Cast", &mid_in, 1, out, 1, &p))) s = attr_int(c, p, "to", onnx_type(dt));
  return s;
}

static em_status x_cast(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, in, 1, out, 1, &p);
  if (!s) s = attr_int(c, p, "to", onnx_type(c->g->values[n->first_value].shape.dtype));
  return s;
}

/* Dropout is the identity outside training in both; the ratio goes along. */
static em_status x_dropout(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const char *ins[2] = {in[0], NULL};
  em_status s = init_scalar(c, "ratio", EM_F32, efloat(n, "ratio", 0.5), &ins[1]);
  return s ? s : onode(c, t->onnx, ins, 2, out, 1, NULL);
}

static em_status x_pow_scalar(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const char *ins[2] = {in[0], NULL};
  em_status s = init_scalar(c, "exponent", in_shape(c, n, 0)->dtype, efloat(n, "exponent", 1), &ins[1]);
  return s ? s : onode(c, t->onnx, ins, 2, out, 1, NULL);
}

static em_status x_rsqrt(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  (void)n;
  char *sq = fresh(c, "sqrt");
  if (!sq) return oom();
  em_status s = onode(c, "Sqrt", in, 1, &sq, 1, NULL);
  const char *sq_in = sq;
  return s ? s : onode(c, t->onnx, &sq_in, 1, out, 1, NULL);
}

/* Float Mod in ONNX must be fmod=1 (C's sign); numpy's sign has no ONNX form. */
static em_status x_mod(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  em_dtype dt = in_shape(c, n, 0)->dtype;
  if ((dt == EM_F32 || dt == EM_F64) && !eint(n, "fmod", 0))
    return refuse(c, "floating-point mod with fmod=0 (the sign of y, as numpy): ONNX's Mod of floats is C's fmod only");
  return x_same(c, n, t, in, out);
}

static em_status x_space_to_depth(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const em_attr *mode = eattr(n, "mode");
  if (mode && strcmp(mode->s, "DCR"))
    return refuse(c, "mode '%s': ONNX's SpaceToDepth has the DCR order only", mode->s);
  return x_same(c, n, t, in, out);
}

/* AveragePool's dilations came in opset 19; all ones are dropped. */
static em_status x_avgpool(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const em_attr *d = eattr(n, "dilations");
  int ones = 1;
  for (int i = 0; d && i < d->n; i++) ones &= d->ints[i] == 1;
  if (!ones && c->opset < 19) return refuse(c, "dilations need AveragePool of opset 19 (exporting at %d)", c->opset);
  if (!ones) return x_same(c, n, t, in, out);
  xop t2 = *t;
  t2.skip = "dilations";
  return x_same(c, n, &t2, in, out);
}

/* CumSum's axis is an input (a scalar). */
static em_status x_cumsum(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  int64_t axis = eint(n, "axis", 0);
  const char *ins[2] = {in[0], init_copy(c, "axis", EM_I64, 0, NULL, &axis, sizeof axis)};
  if (!ins[1]) return oom();
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, ins, 2, out, 1, &p);
  if (!s && eint(n, "exclusive", 0)) s = attr_int(c, p, "exclusive", 1);
  if (!s && eint(n, "reverse", 0)) s = attr_int(c, p, "reverse", 1);
  return s;
}

/* ScatterND / ScatterElements: reduction add and mul came in opset 16, max
 * and min in 18; "none" is the default and is left out. */
static em_status x_scatter(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const em_attr *r = eattr(n, "reduction");
  const char *red = r && r->type == EM_ATTR_STRING ? r->s : "none";
  int need = !strcmp(red, "none") ? 0 : (!strcmp(red, "add") || !strcmp(red, "mul")) ? 16 : 18;
  if (c->opset < need)
    return refuse(c, "reduction '%s' needs %s of opset %d (exporting at %d)", red, t->onnx, need, c->opset);
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, in, 3, out, 1, &p);
  if (!s && eattr(n, "axis")) s = attr_copy(c, p, eattr(n, "axis"));
  if (!s && need) s = attr_copy(c, p, r);
  return s;
}

/* Resize: sizes or scales as inputs (ONNX takes one of them: Ember keeps
 * both where the importer derived one from the other), roi for
 * tf_crop_and_resize; the string and number attributes as they are. */
static em_status x_resize(ex *c, const em_node *n, const xop *t, const char **in, char **out) {
  const em_shape *x = in_shape(c, n, 0);
  const em_attr *sizes = eattr(n, "sizes"), *scales = eattr(n, "scales"), *roi = eattr(n, "roi");
  const em_attr *ctm = eattr(n, "coordinate_transformation_mode");
  const char *ct = ctm ? ctm->s : "half_pixel";
  if (!strcmp(ct, "tf_half_pixel_for_nn"))
    return refuse(c, "coordinate_transformation_mode tf_half_pixel_for_nn exists in Resize of opset 11 only");
  if (!strcmp(ct, "half_pixel_symmetric") && c->opset < 19)
    return refuse(c, "coordinate_transformation_mode half_pixel_symmetric needs Resize of opset 19 (exporting at %d)",
                  c->opset);
  int R = x->ndim, use_sizes = sizes != NULL;
  if (sizes && scales) {
    /* Both: the scales are what the coordinates use; sizes alone say the same when scale = size / dim. */
    for (int i = 0; i < R && use_sizes; i++)
      use_sizes = x->dims[i] > 0 && scales->floats[i] == (double)sizes->ints[i] / (double)x->dims[i];
    for (int i = 0; i < R && !use_sizes; i++)
      if (x->dims[i] < 0 || sizes->ints[i] != (int64_t)((double)x->dims[i] * scales->floats[i]))
        return refuse(c, "sizes and scales that ONNX's Resize cannot both express (keep_aspect_ratio_policy)");
  }
  const char *ins[4] = {in[0], "", "", ""};
  int n_in = 3;
  if (use_sizes) {
    if (!(ins[3] = init_i64s(c, "sizes", sizes->ints, sizes->n))) return oom();
    n_in = 4;
  } else {
    float *f = al(c, sizeof(float) * (size_t)(R ? R : 1));
    if (!f || !scales) return f ? refuse(c, "neither sizes nor scales") : oom();
    for (int i = 0; i < R; i++) {
      f[i] = (float)scales->floats[i];
      if ((double)f[i] != scales->floats[i])
        return refuse(c, "scale %.17g is not a float32 (ONNX's Resize scales are float)", scales->floats[i]);
    }
    int64_t nr = R;
    if (!(ins[2] = init_copy(c, "scales", EM_F32, 1, &nr, f, sizeof(float) * (size_t)R))) return oom();
  }
  if (!strcmp(ct, "tf_crop_and_resize") && roi) {
    float *f = al(c, sizeof(float) * (size_t)(R > 0 ? 2 * R : 1));
    if (!f) return oom();
    for (int i = 0; i < roi->n && i < 2 * R; i++) f[i] = (float)roi->floats[i];
    int64_t nr = 2 * R;
    if (!(ins[1] = init_copy(c, "roi", EM_F32, 1, &nr, f, sizeof(float) * (size_t)(2 * R)))) return oom();
  }
  /* antialias (Resize-18) widens linear and cubic filters; nearest ignores it. */
  const em_attr *mode = eattr(n, "mode");
  int antialias = eint(n, "antialias", 0) && mode && strcmp(mode->s, "nearest");
  if (antialias && c->opset < 18) return refuse(c, "antialias needs Resize of opset 18 (exporting at %d)", c->opset);
  Onnx__NodeProto *p;
  em_status s = onode(c, t->onnx, ins, n_in, out, 1, &p);
  for (int i = 0; i < n->n_attrs && !s; i++)
    if (!listed("sizes,scales,roi,antialias", n->attrs[i].name)) s = attr_copy(c, p, &n->attrs[i]);
  if (!s && antialias) s = attr_int(c, p, "antialias", 1);
  return s;
}

#define SAME(e, o) {e, o, x_same, EXPORT_MIN_OPSET, NULL}

/* One entry per Ember op with an ONNX form, in Ember's registry order. */
static const xop xops[] = {
    SAME("add", "Add"), SAME("sub", "Sub"), SAME("mul", "Mul"), SAME("div", "Div"), SAME("pow", "Pow"),
    SAME("max", "Max"), SAME("min", "Min"), {"mod", "Mod", x_mod, EXPORT_MIN_OPSET, NULL},
    SAME("equal", "Equal"), SAME("less", "Less"), SAME("greater", "Greater"), SAME("less_equal", "LessOrEqual"),
    SAME("greater_equal", "GreaterOrEqual"), SAME("and", "And"), SAME("or", "Or"), SAME("xor", "Xor"),
    SAME("not", "Not"), SAME("where", "Where"), SAME("convolution", "Conv"),
    SAME("convolution_transpose", "ConvTranspose"), SAME("identity", "Identity"),
    SAME("stop_gradient", "Identity"),
    {"zeros", "ConstantOfShape", x_zeros, EXPORT_MIN_OPSET, NULL},
    {"zeros_like", "ConstantOfShape", x_fill_like, EXPORT_MIN_OPSET, NULL},
    {"ones_like", "ConstantOfShape", x_fill_like, EXPORT_MIN_OPSET, NULL},
    SAME("add_n", "Sum"),
    {"broadcast_like", "Expand", x_like_shape, EXPORT_MIN_OPSET, NULL},
    {"matmul", "MatMul", x_matmul, EXPORT_MIN_OPSET, NULL}, SAME("gemm", "Gemm"),
    SAME("softmax", "Softmax"), SAME("log_softmax", "LogSoftmax"),
    SAME("batch_normalization", "BatchNormalization"),
    {"layer_normalization", "LayerNormalization", x_same, 17, NULL},
    SAME("instance_normalization", "InstanceNormalization"), SAME("local_response_normalization", "LRN"),
    {"dropout", "Dropout", x_dropout, EXPORT_MIN_OPSET, NULL}, SAME("max_pool", "MaxPool"),
    {"average_pool", "AveragePool", x_avgpool, EXPORT_MIN_OPSET, NULL},
    SAME("global_max_pool", "GlobalMaxPool"), SAME("global_average_pool", "GlobalAveragePool"),
    {"reduce_sum", "ReduceSum", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_mean", "ReduceMean", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_max", "ReduceMax", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_min", "ReduceMin", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_prod", "ReduceProd", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_log_sum_exp", "ReduceLogSumExp", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_log_sum", "ReduceLogSum", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_l1", "ReduceL1", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_l2", "ReduceL2", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"reduce_sum_square", "ReduceSumSquare", x_reduce, EXPORT_MIN_OPSET, NULL},
    {"argmax", "ArgMax", x_keepdims, EXPORT_MIN_OPSET, NULL},
    {"argmin", "ArgMin", x_keepdims, EXPORT_MIN_OPSET, NULL},
    {"reshape", "Reshape", x_inputs, EXPORT_MIN_OPSET, NULL},
    {"reshape_like", "Reshape", x_like_shape, EXPORT_MIN_OPSET, NULL}, SAME("transpose", "Transpose"),
    {"squeeze", "Squeeze", x_inputs, EXPORT_MIN_OPSET, NULL},
    {"unsqueeze", "Unsqueeze", x_inputs, EXPORT_MIN_OPSET, NULL},
    {"expand_dims", "Unsqueeze", x_inputs, EXPORT_MIN_OPSET, NULL}, SAME("flatten", "Flatten"),
    {"slice", "Slice", x_inputs, EXPORT_MIN_OPSET, NULL},
    {"concat", "Concat", x_concat, EXPORT_MIN_OPSET, NULL},
    {"pad", "Pad", x_pad, EXPORT_MIN_OPSET, NULL}, SAME("gather", "Gather"),
    {"one_hot", "OneHot", x_onehot, EXPORT_MIN_OPSET, NULL},
    {"top_k", "TopK", x_topk, EXPORT_MIN_OPSET, NULL}, SAME("depth_to_space", "DepthToSpace"),
    {"space_to_depth", "SpaceToDepth", x_space_to_depth, EXPORT_MIN_OPSET, "mode"},
    {"cast", "Cast", x_cast, EXPORT_MIN_OPSET, NULL},
    {"expand", "Expand", x_inputs, EXPORT_MIN_OPSET, NULL},
    {"tile", "Tile", x_inputs, EXPORT_MIN_OPSET, NULL}, SAME("neg", "Neg"), SAME("abs", "Abs"),
    SAME("sign", "Sign"), SAME("exp", "Exp"), SAME("log", "Log"), SAME("sqrt", "Sqrt"),
    {"rsqrt", "Reciprocal", x_rsqrt, EXPORT_MIN_OPSET, NULL}, SAME("reciprocal", "Reciprocal"),
    SAME("sigmoid", "Sigmoid"), SAME("tanh", "Tanh"), SAME("relu", "Relu"), SAME("leaky_relu", "LeakyRelu"),
    SAME("elu", "Elu"), SAME("selu", "Selu"), SAME("softplus", "Softplus"), SAME("softsign", "Softsign"),
    SAME("hard_sigmoid", "HardSigmoid"), {"gelu", "Gelu", x_same, 20, NULL}, SAME("sin", "Sin"),
    SAME("cos", "Cos"), SAME("tan", "Tan"), SAME("atan", "Atan"), SAME("asinh", "Asinh"), SAME("floor", "Floor"),
    SAME("ceil", "Ceil"), SAME("round", "Round"), {"clip", "Clip", x_clip, EXPORT_MIN_OPSET, NULL},
    {"pow_scalar", "Pow", x_pow_scalar, EXPORT_MIN_OPSET, NULL}, SAME("erf", "Erf"), SAME("asin", "Asin"),
    SAME("acos", "Acos"), SAME("sinh", "Sinh"), SAME("cosh", "Cosh"), SAME("acosh", "Acosh"),
    SAME("atanh", "Atanh"), SAME("thresholded_relu", "ThresholdedRelu"),
    {"hard_swish", "HardSwish", x_same, 14, NULL}, SAME("isnan", "IsNaN"), SAME("isinf", "IsInf"),
    {"cumsum", "CumSum", x_cumsum, EXPORT_MIN_OPSET, NULL}, SAME("gather_nd", "GatherND"),
    {"scatter_nd", "ScatterND", x_scatter, EXPORT_MIN_OPSET, NULL},
    {"scatter_elements", "ScatterElements", x_scatter, EXPORT_MIN_OPSET, NULL},
    {"resize", "Resize", x_resize, EXPORT_MIN_OPSET, NULL},
};

static const xop *xop_find(const char *ember) {
  for (size_t i = 0; i < sizeof xops / sizeof xops[0]; i++)
    if (!strcmp(xops[i].ember, ember)) return &xops[i];
  return NULL;
}

int em_onnx_export_has_op(const char *op) { return op && xop_find(op) != NULL; }

/* -------------------------------------------------------- recurrences --- */

/* em_recurrent_apply records each recurrence it unrolls as a block
 * (engine/graph_internal.h): outputs = LSTM / GRU / RNN (inputs; attributes,
 * ONNX's). Such a block is written as that one node, and the nodes inside
 * it are not written, when the export needs one of its outputs and nothing
 * else the export writes reads a value inside (else, say where the caller
 * exports a gate, it is written unrolled, node by node, as any graph). */

static const struct {
  const char *op;
  int n_in, n_out;
} block_ops[] = {{"LSTM", 8, 3}, {"GRU", 6, 2}, {"RNN", 6, 2}};

static const em_block *block_of(const ex *c, int unit) { return &c->g->blocks[unit - (int)c->g->n_nodes]; }

/* Whether block b can be written as its ONNX op given the nodes the export
 * needs (needed[node]); marks its interior in c->owner if so. */
static em_status try_collapse(ex *c, int b, const unsigned char *needed, const em_var *outs, int n_outs,
                              unsigned char *interior) {
  const em_graph *g = c->g;
  const em_block *blk = &g->blocks[b];
  int known = 0, wanted = 0;
  for (size_t k = 0; k < sizeof block_ops / sizeof block_ops[0]; k++)
    known |= !strcmp(block_ops[k].op, blk->op) && blk->n_in == block_ops[k].n_in && blk->n_out == block_ops[k].n_out;
  for (int i = 0; i < blk->n_out; i++)
    if (blk->outputs[i] != EM_BLOCK_NONE) wanted |= needed[g->values[blk->outputs[i]].node];
  if (!known || !wanted) return EM_OK;
  memset(interior, 0, g->n_nodes ? g->n_nodes : 1);
  if (em_block_interior(g, blk, interior)) return EM_OK;
  /* A record that does not describe its nodes (a graph file edited by hand) is written unrolled. */
  if (!em_onnx_block_matches(g, blk, interior)) return EM_OK;
  /* A value inside that another written node or an output reads keeps the
   * block unrolled: the ONNX op has no name for it. */
  unsigned char *is_out = calloc(g->n_values ? g->n_values : 1, 1);
  if (!is_out) return oom();
  for (int i = 0; i < blk->n_out; i++)
    if (blk->outputs[i] != EM_BLOCK_NONE) is_out[blk->outputs[i]] = 1;
  int ok = 1;
  for (size_t i = 0; i < g->n_nodes && ok; i++) {
    if (interior[i] && c->owner[i] >= 0) ok = 0; /* inside another block already written whole */
    if (!needed[i] || interior[i]) continue;
    for (int k = 0; k < g->nodes[i].n_in && ok; k++) {
      em_var v = g->nodes[i].inputs[k];
      ok = !interior[g->values[v].node] || is_out[v];
    }
  }
  for (int i = 0; i < n_outs && ok; i++) ok = !interior[g->values[outs[i]].node] || is_out[outs[i]];
  free(is_out);
  for (size_t i = 0; i < g->n_nodes && ok; i++)
    if (interior[i]) c->owner[i] = b;
  return EM_OK;
}

/* What is written, in order: "units", node indices (a node written
 * itself) and n_nodes + b (block b written as one node), each after the
 * units it reads (a depth-first walk from the outputs, as em_graph_schedule,
 * over the graph with each written block contracted to one unit). */
static em_status plan_units(ex *c, const em_var *outs, int n_outs, const int *order, int count, int unrolled,
                            int **units_out, int *n_units) {
  const em_graph *g = c->g;
  size_t nn = g->n_nodes, nu = nn + g->n_blocks;
  em_status s = EM_OK;
  c->owner = malloc(sizeof(int) * (nn ? nn : 1));
  unsigned char *needed = calloc(nn ? nn : 1, 1), *interior = malloc(nn ? nn : 1), *state = calloc(nu ? nu : 1, 1);
  int *units = malloc(sizeof(int) * (nu ? nu : 1)), *stack = malloc(sizeof(int) * (nu ? nu : 1)),
      *next = malloc(sizeof(int) * (nu ? nu : 1));
  if (!c->owner || !needed || !interior || !state || !units || !stack || !next) s = oom();
  for (size_t i = 0; !s && i < nn; i++) c->owner[i] = -1;
  for (int k = 0; !s && k < count; k++) needed[order[k]] = 1;
  for (size_t b = 0; !s && !unrolled && b < g->n_blocks; b++) s = try_collapse(c, (int)b, needed, outs, n_outs, interior);
  int n = 0;
  /* The unit writing value v. */
#define UNIT_OF(v) (c->owner[g->values[v].node] >= 0 ? (int)nn + c->owner[g->values[v].node] : g->values[v].node)
  for (int r = 0; r < n_outs && !s; r++) {
    int root = UNIT_OF(outs[r]), depth = 0;
    if (state[root]) continue;
    stack[depth] = root, next[depth++] = 0, state[root] = 1;
    while (depth > 0 && !s) {
      int u = stack[depth - 1], n_in;
      const em_var *in;
      if ((size_t)u >= nn) in = block_of(c, u)->inputs, n_in = block_of(c, u)->n_in;
      else in = g->nodes[u].inputs, n_in = g->nodes[u].n_in;
      while (next[depth - 1] < n_in && in[next[depth - 1]] == EM_BLOCK_NONE) next[depth - 1]++;
      if (next[depth - 1] < n_in) {
        em_var v = in[next[depth - 1]++];
        int child = UNIT_OF(v);
        if (state[child] == 1) s = em_fail(EM_ERR_INTERNAL, "em_onnx_export: a cycle through a recurrence");
        else if (!state[child]) stack[depth] = child, next[depth++] = 0, state[child] = 1;
        continue;
      }
      state[u] = 2, units[n++] = u, depth--;
    }
  }
#undef UNIT_OF
  free(needed), free(interior), free(state), free(stack), free(next);
  if (s) {
    free(units);
    return s;
  }
  *units_out = units, *n_units = n;
  return EM_OK;
}

/* An ONNX STRINGS attribute from a comma-separated list. */
static em_status attr_strings_csv(ex *c, Onnx__NodeProto *p, const char *name, const char *csv) {
  Onnx__AttributeProto *a = oattr(c, p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  size_t n = 1;
  for (const char *q = csv; *q; q++) n += *q == ',';
  if (!a || !(a->strings = al(c, n * sizeof *a->strings))) return oom();
  for (const char *q = csv; q;) {
    const char *e = strchr(q, ',');
    size_t len = e ? (size_t)(e - q) : strlen(q);
    char *one = al(c, len + 1);
    if (!one) return oom();
    memcpy(one, q, len);
    a->strings[a->n_strings++] = (ProtobufCBinaryData){len, (uint8_t *)one};
    q = e ? e + 1 : NULL;
  }
  return EM_OK;
}

/* Transpose(name, perm) -> a fresh value, named in *out. */
static em_status transposed(ex *c, const char *name, const int64_t *perm, int n, const char **out) {
  char *mid = fresh(c, "layout0");
  Onnx__NodeProto *p;
  if (!mid) return oom();
  em_status s = onode(c, "Transpose", &name, 1, &mid, 1, &p);
  if (!s) s = attr_ints(c, p, "perm", perm, n);
  *out = mid;
  return s;
}

/* Block unit u as its ONNX node. ONNX's sequence_lens is int32: an int64
 * one goes through a Cast (lengths are at most T). Layout 1 (batch-major)
 * is written as layout 0 between Transposes: onnxruntime (1.32) refuses
 * LSTM / GRU / RNN with layout 1, and LSTM-7 (opset 13) has no layout. */
static em_status write_block(ex *c, int u) {
  const em_block *b = block_of(c, u);
  const em_graph *g = c->g;
  const char *in[EM_BLOCK_MAX_IO];
  char *out[EM_BLOCK_MAX_IO] = {0};
  int n_in = 0, n_out = 0, layout = 0;
  for (int i = 0; i < b->n_attrs; i++)
    if (!strcmp(b->attrs[i].name, "layout")) layout = b->attrs[i].i != 0;
  for (int i = 0; i < b->n_out; i++)
    if (b->outputs[i] != EM_BLOCK_NONE) c->node = g->values[b->outputs[i]].node, n_out = i + 1;
  for (int i = 0; i < b->n_in; i++) {
    em_var v = b->inputs[i];
    in[i] = v == EM_BLOCK_NONE ? "" : c->vname[v];
    if (v != EM_BLOCK_NONE) n_in = i + 1;
  }
  em_status s = EM_OK;
  em_var lens = b->inputs[4];
  if (lens != EM_BLOCK_NONE && g->values[lens].shape.dtype != EM_I32) {
    char *cast = fresh(c, "sequence_lens_i32");
    Onnx__NodeProto *p;
    if (!cast) return oom();
    if ((s = onode(c, "Cast", &in[4], 1, &cast, 1, &p)) || (s = attr_int(c, p, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32)))
      return s;
    in[4] = cast;
  }
  static const int64_t p102[3] = {1, 0, 2}, p2013[4] = {2, 0, 1, 3};
  /* X, initial_h, initial_c: [N, T|D, .] -> [T|D, N, .] */
  for (int i = 0; layout && i < n_in && !s; i++)
    if ((i == 0 || i == 5 || i == 6) && in[i][0]) s = transposed(c, in[i], p102, 3, &in[i]);
  if (s) return s;
  char *final[EM_BLOCK_MAX_IO]; /* with layout 1 the node writes fresh values, transposed into these */
  for (int i = 0; i < n_out; i++) {
    out[i] = final[i] = b->outputs[i] == EM_BLOCK_NONE ? (char *)"" : c->vname[b->outputs[i]];
    if (layout && out[i][0] && !(out[i] = fresh(c, "layout0"))) return oom();
  }
  Onnx__NodeProto *p;
  c->node_base = b->op;
  s = onode(c, b->op, in, n_in, out, n_out, &p);
  c->node_base = NULL;
  /* Y: [T, D, N, H] -> [N, T, D, H]; Y_h, Y_c: [D, N, H] -> [N, D, H] */
  for (int i = 0; layout && i < n_out && !s; i++) {
    if (!out[i][0]) continue;
    const char *src = out[i];
    Onnx__NodeProto *t;
    s = onode(c, "Transpose", &src, 1, &final[i], 1, &t);
    if (!s) s = attr_ints(c, t, "perm", i == 0 ? p2013 : p102, i == 0 ? 4 : 3);
  }
  for (int i = 0; i < b->n_attrs && !s; i++) {
    const em_attr *a = &b->attrs[i];
    if (!strcmp(a->name, "layout")) continue;
    s = !strcmp(a->name, "activations") && a->type == EM_ATTR_STRING ? attr_strings_csv(c, p, a->name, a->s)
                                                                     : attr_copy(c, p, a);
  }
  return s;
}

/* ------------------------------------------------------------ the graph --- */

static em_status value_info(ex *c, const char *name, const em_shape *sh, Onnx__ValueInfoProto **out) {
  Onnx__ValueInfoProto *v = al(c, sizeof *v);
  Onnx__TypeProto *tp = al(c, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = al(c, sizeof *tt);
  Onnx__TensorShapeProto *shp = al(c, sizeof *shp);
  Onnx__TensorShapeProto__Dimension **dims = al(c, sizeof *dims * (size_t)(sh->ndim ? sh->ndim : 1));
  if (!v || !tp || !tt || !shp || !dims) return oom();
  *v = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  *tp = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  *tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  *shp = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  for (int i = 0; i < sh->ndim; i++) {
    Onnx__TensorShapeProto__Dimension *d = al(c, sizeof *d);
    if (!d) return oom();
    *d = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    if (sh->dims[i] < 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = (char *)c->dyn_name;
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = sh->dims[i];
    }
    dims[i] = d;
  }
  shp->dim = dims, shp->n_dim = (size_t)sh->ndim;
  tt->has_elem_type = 1, tt->elem_type = onnx_type(sh->dtype), tt->shape = shp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  v->name = (char *)name, v->type = tp;
  *out = v;
  return EM_OK;
}

/* A leaf: a graph input, or an initializer holding the tensor itself (not copied). */
static em_status leaf(ex *c, const em_node *n) {
  const em_value *val = &c->g->values[n->first_value];
  const char *name = c->vname[n->first_value];
  if (n->kind == EM_NODE_INPUT) return value_info(c, name, &val->shape, &c->inputs[c->n_inputs++]);
  if (n->kind == EM_NODE_PLACEHOLDER) return refuse(c, "an unbound placeholder");
  em_tensor *t = n->tensor;
  if (!t || !em_tensor_is_contiguous(t)) return refuse(c, "its value is not a contiguous host tensor");
  if (onnx_type(em_tensor_dtype(t)) == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
    return refuse(c, "dtype %s has no ONNX element type", em_dtype_name(em_tensor_dtype(t)));
  GROW(c, c->inits, c->n_inits, c->cap_inits);
  size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
  Onnx__TensorProto *p =
      tensor_proto(c, em_tensor_dtype(t), em_tensor_ndim(t), em_tensor_shape(t), em_tensor_data(t), bytes);
  if (!p) return oom();
  p->name = (char *)name;
  c->inits[c->n_inits++] = p;
  return EM_OK;
}

static em_status op_node(ex *c, const em_node *n) {
  const xop *t = xop_find(n->op->name);
  /* The fused LSTM recurrence (ops/recurrent.c) is written only as its
   * recurrence's one ONNX LSTM node (the block): here it was not collapsed. */
  if (!t && !strcmp(n->op->name, "_lstm_seq"))
    return refuse(c, "a fused LSTM recurrence (em_lstm, em_recurrent_apply with the default activations and no "
                     "peepholes, clip or input_forget) is written only as one ONNX LSTM node, and here it cannot "
                     "be: unroll_recurrent was asked for, the model reads a value inside it, or the graph was "
                     "edited inside it");
  if (!t)
    return refuse(c, "Ember op '%s' has no ONNX equivalent (export the graph's inference outputs, before "
                     "losses and training steps)", n->op->name);
  if (c->opset < t->min_opset)
    return refuse(c, "ONNX %s needs opset %d or later (exporting at opset %d)", t->onnx, t->min_opset, c->opset);
  const char *in_stack[16];
  const char **in = n->n_in <= 16 ? in_stack : al(c, sizeof(char *) * (size_t)n->n_in);
  if (!in) return oom();
  for (int i = 0; i < n->n_in; i++) in[i] = c->vname[n->inputs[i]];
  return t->fn(c, n, t, in, &c->vname[n->first_value]);
}

/* ONNX names for the values the nodes write: the Ember name where it is set
 * and free, else one made from the op's name. Named values first, so a made
 * name never takes a name the graph gave. */
static em_status name_values(ex *c, const int *order, int count) {
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < count; k++) {
      int block = order[k] >= (int)c->g->n_nodes;
      const em_block *b = block ? block_of(c, order[k]) : NULL;
      const em_node *n = block ? NULL : &c->g->nodes[order[k]];
      for (int j = 0; j < (block ? b->n_out : n->n_out); j++) {
        int v = block ? b->outputs[j] : n->first_value + j;
        if (v == EM_BLOCK_NONE) continue;
        if (block) n = &c->g->nodes[c->g->values[v].node];
        const char *nm = c->g->values[v].name;
        if (c->vname[v]) continue;
        int named = nm && nm[0] && !name_used(c, nm);
        if (pass == 0 && named) {
          if (!(c->vname[v] = sdup(c, nm)) || name_take(c, c->vname[v])) return oom();
        } else if (pass == 1) {
          char base[64];
          snprintf(base, sizeof base, "%s_%d", n->op ? n->op->name : em_node_kind_name(n->kind), v);
          if (!(c->vname[v] = fresh(c, base))) return oom();
        }
      }
    }
  return EM_OK;
}

/* The graph outputs: an op's value keeps its name; a leaf, a value asked
 * twice, or one given another name goes through an Identity node. */
static em_status outputs(ex *c, const em_var *outs, int n_outs, const em_onnx_export_options *o) {
  unsigned char *seen = calloc(c->g->n_values ? c->g->n_values : 1, 1);
  if (!seen) return oom();
  em_status s = EM_OK;
  for (int i = 0; i < n_outs && !s; i++) {
    em_var v = outs[i];
    const em_value *val = &c->g->values[v];
    const em_node *n = &c->g->nodes[val->node];
    const char *want = o && o->output_names ? o->output_names[i] : NULL;
    const char *name = c->vname[v];
    if (want && !want[0]) want = NULL;
    if (n->kind != EM_NODE_OP || seen[v] || (want && strcmp(want, name))) {
      char *id = want ? (name_used(c, want) ? NULL : sdup(c, want)) : fresh(c, name);
      if (want && !id) {
        free(seen);
        return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export: output name '%s' is already the name of a value",
                       want);
      }
      if (!id || (want && name_take(c, id))) s = oom();
      c->node = val->node;
      const char *src = name;
      if (!s) s = onode(c, "Identity", &src, 1, &id, 1, NULL);
      name = id;
    }
    seen[v] = 1;
    if (!s) s = value_info(c, name, &val->shape, &c->outputs[i]);
  }
  free(seen);
  return s;
}

static int64_t ir_version_of(int opset) { return opset >= 19 ? 9 : opset >= 15 ? 8 : 7; }

static em_status build(ex *c, const em_var *outs, int n_outs, const em_onnx_export_options *o,
                       Onnx__ModelProto *model, Onnx__GraphProto *graph, Onnx__OperatorSetIdProto *opset,
                       Onnx__OperatorSetIdProto **opsets) {
  int *order = NULL, count = 0, *units = NULL, n_units = 0;
  em_status s = em_graph_sync_host(c->g);
  if (!s) s = em_graph_schedule(c->g, outs, n_outs, &order, &count);
  if (s) return em_fail_context(s, "em_onnx_export");
  s = plan_units(c, outs, n_outs, order, count, o && o->unroll_recurrent, &units, &n_units);
  free(order);
  if (s) return s;
  order = units, count = n_units;
  c->vname = calloc(c->g->n_values ? c->g->n_values : 1, sizeof *c->vname);
  c->inputs = calloc((size_t)count + 1, sizeof *c->inputs);
  c->outputs = calloc((size_t)n_outs, sizeof *c->outputs);
  if (!c->vname || !c->inputs || !c->outputs) s = oom();
  if (!s) s = name_values(c, order, count);
  for (int k = 0; k < count && !s; k++) {
    if (order[k] >= (int)c->g->n_nodes) {
      s = write_block(c, order[k]);
      continue;
    }
    c->node = order[k];
    const em_node *n = &c->g->nodes[order[k]];
    s = n->kind == EM_NODE_OP ? op_node(c, n) : leaf(c, n);
  }
  free(order);
  if (!s) s = outputs(c, outs, n_outs, o);
  if (s) return s;
  *opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
  opset->domain = (char *)"", opset->has_version = 1, opset->version = c->opset;
  *opsets = opset;
  *graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  graph->name = (char *)(o && o->graph_name ? o->graph_name : "ember");
  graph->node = c->nodes, graph->n_node = c->n_nodes;
  graph->initializer = c->inits, graph->n_initializer = c->n_inits;
  graph->input = c->inputs, graph->n_input = c->n_inputs;
  graph->output = c->outputs, graph->n_output = (size_t)n_outs;
  *model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
  model->has_ir_version = 1, model->ir_version = ir_version_of(c->opset);
  model->opset_import = opsets, model->n_opset_import = 1;
  model->producer_name = (char *)(o && o->producer_name ? o->producer_name : "ember");
  model->producer_version = (char *)EXPORT_VERSION;
  model->graph = graph;
  return EM_OK;
}

static void ex_free(ex *c) {
  for (size_t i = 0; i < c->n_mem; i++) free(c->mem[i]);
  free(c->mem), free(c->vname), free(c->used), free(c->nodes), free(c->inits), free(c->inputs), free(c->outputs);
  free(c->owner);
}

static em_status check_args(const em_graph *g, const em_var *outs, int n_outs, const em_onnx_export_options *o,
                            int *opset) {
  if (!g || !outs || n_outs < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export: %s", !g ? "graph is NULL" : "no outputs given");
  *opset = o && o->opset ? o->opset : EXPORT_DEFAULT_OPSET;
  if (*opset < EXPORT_MIN_OPSET || *opset > EXPORT_MAX_OPSET)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export: opset %d (Ember writes opsets %d to %d)", *opset,
                   EXPORT_MIN_OPSET, EXPORT_MAX_OPSET);
  if (o && (o->external_data < EM_ONNX_EXTERNAL_AUTO || o->external_data > EM_ONNX_EXTERNAL_NEVER))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export: external_data %d is not an em_onnx_external",
                   (int)o->external_data);
  for (int i = 0; i < n_outs; i++) {
    em_status s = em_graph_check_var(g, outs[i], "em_onnx_export");
    if (s) return s;
  }
  const uint16_t probe = 1;
  if (*(const uint8_t *)&probe != 1)
    return em_fail(EM_ERR_UNSUPPORTED, "em_onnx_export: big-endian hosts (ONNX's raw_data is little endian)");
  return EM_OK;
}

/* fsync of the directory holding path, so a rename in it survives a power loss. */
static em_status sync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return oom();
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  em_status s = EM_OK;
  if (fd < 0 || fsync(fd)) s = em_fail(EM_ERR_IO, "syncing the directory %s: %s", dir, strerror(errno));
  if (fd >= 0) close(fd);
  free(dir);
  return s;
}

/* Moves tensors of EXTERNAL_MIN_BYTES and more out of the model: each gets
 * location/offset/length in the data file; parts[] receives their bytes. */
static em_status externalise(ex *c, const char *location, em_write_part **parts, int *n_parts) {
  *parts = calloc(c->n_inits ? c->n_inits : 1, sizeof **parts);
  if (!*parts) return oom();
  uint64_t offset = 0;
  int k = 0;
  for (size_t i = 0; i < c->n_inits; i++) {
    Onnx__TensorProto *t = c->inits[i];
    if (t->raw_data.len < EXTERNAL_MIN_BYTES) continue;
    Onnx__StringStringEntryProto **e = al(c, 3 * sizeof *e);
    char *off = al(c, 24), *len = al(c, 24);
    if (!e || !off || !len) return oom();
    snprintf(off, 24, "%llu", (unsigned long long)offset);
    snprintf(len, 24, "%llu", (unsigned long long)t->raw_data.len);
    const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {location, off, len};
    for (int j = 0; j < 3; j++) {
      if (!(e[j] = al(c, sizeof *e[j]))) return oom();
      *e[j] = (Onnx__StringStringEntryProto)ONNX__STRING_STRING_ENTRY_PROTO__INIT;
      e[j]->key = (char *)keys[j], e[j]->value = (char *)vals[j];
    }
    (*parts)[k++] = (em_write_part){t->raw_data.data, t->raw_data.len};
    offset += t->raw_data.len;
    t->external_data = e, t->n_external_data = 3;
    t->has_data_location = 1, t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->has_raw_data = 0, t->raw_data = (ProtobufCBinaryData){0, NULL};
  }
  *n_parts = k;
  return EM_OK;
}

static em_status pack(const Onnx__ModelProto *model, void **bytes, size_t *size) {
  size_t n = onnx__model_proto__get_packed_size(model);
  if (n > PROTOBUF_LIMIT)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "em_onnx_export: the model is %zu bytes, over protobuf's 2 GB limit: export to a file with "
                   "external data", n);
  uint8_t *b = malloc(n ? n : 1);
  if (!b) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_onnx_export: no memory for %zu bytes", n);
  onnx__model_proto__pack(model, b);
  *bytes = b, *size = n;
  return EM_OK;
}

API em_status em_onnx_export_buffer(const em_graph *g, const em_var *outputs, int n_outputs,
                                    const em_onnx_export_options *options, void **bytes, size_t *size) {
  if (!bytes || !size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export_buffer: bytes or size is NULL");
  *bytes = NULL, *size = 0;
  ex c = {.g = g};
  em_status s = check_args(g, outputs, n_outputs, options, &c.opset);
  if (s) return s;
  if (options && options->external_data == EM_ONNX_EXTERNAL_ALWAYS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export_buffer: external data needs a file (em_onnx_export)");
  c.dyn_name = options && options->dynamic_axis_name ? options->dynamic_axis_name : "N";
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  s = build(&c, outputs, n_outputs, options, &model, &graph, &opset, opsets);
  if (!s) s = pack(&model, bytes, size);
  ex_free(&c);
  return s;
}

/* The model and its data file. The data is written whole as "<data>.new"
 * and takes its name only after the model is written, so a model that
 * cannot be written (a full disk, a directory in the way) leaves an existing
 * data file, which an older model beside it reads, as it was. */
static em_status write_with_data(const char *path, const char *data_path, const void *bytes, size_t size,
                                 const em_write_part *parts, int n_parts) {
  char *fresh_data = malloc(strlen(data_path) + sizeof ".new");
  if (!fresh_data) return oom();
  sprintf(fresh_data, "%s.new", data_path);
  em_status s = em_write_file_atomic(fresh_data, parts, n_parts);
  if (!s) {
    s = em_write_file_atomic(path, &(em_write_part){bytes, size}, 1);
    if (!s && rename(fresh_data, data_path))
      s = em_fail(EM_ERR_IO, "renaming %s to %s: %s", fresh_data, data_path, strerror(errno));
    if (s) unlink(fresh_data);
    else s = sync_parent(data_path);
  }
  free(fresh_data);
  return s;
}

API em_status em_onnx_export(const em_graph *g, const em_var *outputs, int n_outputs,
                             const em_onnx_export_options *options, const char *path) {
  if (!path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_export: path is NULL");
  ex c = {.g = g};
  em_status s = check_args(g, outputs, n_outputs, options, &c.opset);
  if (s) return s;
  c.dyn_name = options && options->dynamic_axis_name ? options->dynamic_axis_name : "N";
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  em_write_part *parts = NULL;
  int n_parts = 0;
  void *bytes = NULL;
  size_t size = 0;
  s = build(&c, outputs, n_outputs, options, &model, &graph, &opset, opsets);
  em_onnx_external mode = options ? options->external_data : EM_ONNX_EXTERNAL_AUTO;
  int external = mode == EM_ONNX_EXTERNAL_ALWAYS ||
                 (!s && mode == EM_ONNX_EXTERNAL_AUTO && onnx__model_proto__get_packed_size(&model) > PROTOBUF_LIMIT);
  char *data_path = NULL;
  if (!s && external) {
    /* The data file: "<model file name>.data" beside it, named relative to the model's directory. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *location = al(&c, strlen(base) + 6);
    data_path = malloc(strlen(path) + 6);
    if (!location || !data_path) s = oom();
    if (!s) {
      sprintf(location, "%s.data", base);
      sprintf(data_path, "%s.data", path);
      s = externalise(&c, location, &parts, &n_parts);
    }
  }
  if (!s) s = pack(&model, &bytes, &size);
  if (!s && external) s = write_with_data(path, data_path, bytes, size, parts, n_parts);
  else if (!s) s = em_write_file_atomic(path, &(em_write_part){bytes, size}, 1);
  if (s) em_fail_context(s, "%s", path);
  free(data_path), free(parts), free(bytes);
  ex_free(&c);
  return s;
}
