/* Graphs (include/ember/graph.h). Nodes are appended in creation order and
 * take only existing values as inputs, so the node order is a topological
 * order and no cycle can be built through this API. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"
#include "tensor_internal.h"

#define API __attribute__((visibility("default")))

API em_status em_graph_create(em_graph **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_create: out is NULL");
  *out = calloc(1, sizeof **out);
  return *out ? EM_OK : em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a graph");
}

const char *em_node_kind_name(em_node_kind k) {
  static const char *names[] = {"input", "parameter", "constant", "op", "state", "placeholder"};
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

void em_attrs_free(em_attr *a, int n) {
  for (int i = 0; i < n; i++) {
    free((char *)a[i].name);
    free((int64_t *)a[i].ints);
    free((double *)a[i].floats);
    free((char *)a[i].s);
  }
  free(a);
}

API void em_graph_free(em_graph *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_nodes; i++) {
    em_node *n = &g->nodes[i];
    free(n->name);
    free(n->inputs);
    em_attrs_free(n->attrs, n->n_attrs);
    em_tensor_unmark_versioned(n->tensor); /* its kept forms go with the graph (tensor_internal.h) */
    em_tensor_release(n->tensor);
  }
  for (size_t i = 0; i < g->n_values; i++) free(g->values[i].name);
  for (size_t i = 0; i < g->n_blocks; i++) em_block_clear(&g->blocks[i]);
  free(g->nodes);
  free(g->values);
  free(g->blocks);
  free(g);
}

em_status em_graph_check_var(const em_graph *g, em_var v, const char *what) {
  if (!g) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: graph is NULL", what);
  if (v < 0 || (size_t)v >= g->n_values)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %d is not a value of this graph (it has %zu)", what, (int)v, g->n_values);
  return EM_OK;
}

int em_graph_add_node(em_graph *g, em_node_kind kind, int n_out) {
  if (g->n_nodes == g->cap_nodes) {
    size_t cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
    em_node *t = realloc(g->nodes, cap * sizeof *t);
    if (!t) return -1;
    g->nodes = t;
    g->cap_nodes = cap;
  }
  while (g->n_values + (size_t)n_out > g->cap_values) {
    size_t cap = g->cap_values ? g->cap_values * 2 : 64;
    em_value *t = realloc(g->values, cap * sizeof *t);
    if (!t) return -1;
    g->values = t;
    g->cap_values = cap;
  }
  int id = (int)g->n_nodes++;
  em_node *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->first_value = (int)g->n_values;
  n->n_out = n_out;
  for (int i = 0; i < n_out; i++) {
    em_value *v = &g->values[g->n_values++];
    memset(v, 0, sizeof *v);
    v->node = id;
    v->index = i;
  }
  return id;
}

static em_status leaf(em_graph *g, em_node_kind kind, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                      const char *what, em_var *out) {
  if (!g || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: NULL argument", what);
  if (em_dtype_size(dtype) == 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': unknown dtype", what, name ? name : "");
  if (ndim < 0 || ndim > EM_MAX_DIMS || (ndim && !shape))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': %d dimensions (0 to %d allowed)", what, name ? name : "", ndim, EM_MAX_DIMS);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < (kind == EM_NODE_INPUT || kind == EM_NODE_PLACEHOLDER ? -1 : 0))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': dimension %d is %lld%s", what, name ? name : "", i,
                     (long long)shape[i], kind == EM_NODE_INPUT ? " (-1 marks the dynamic axis)" : "");
  /* The byte size must fit in int64 (a dynamic axis counts as 1 here and is
   * checked again when the run's tensors are made; so does an empty axis,
   * since strides span the others). */
  int64_t bytes = (int64_t)em_dtype_size(dtype);
  for (int i = 0; i < ndim; i++) {
    int64_t d = shape[i] <= 0 ? 1 : shape[i]; /* zeros too: strides span the other dimensions */
    if (bytes > INT64_MAX / d)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s '%s': the shape's byte size overflows 64 bits (dimension %d is %lld)",
                     what, name ? name : "", i, (long long)shape[i]);
    bytes *= d;
  }
  int id = em_graph_add_node(g, kind, 1);
  if (id < 0) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a graph node");
  em_value *v = &g->values[g->nodes[id].first_value];
  v->shape.dtype = dtype;
  v->shape.ndim = ndim;
  if (ndim) memcpy(v->shape.dims, shape, sizeof(int64_t) * (size_t)ndim);
  if (name) {
    v->name = strdup(name);
    g->nodes[id].name = strdup(name);
  }
  *out = (em_var)g->nodes[id].first_value;
  return EM_OK;
}

API em_status em_input(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape, em_var *out) {
  return leaf(g, EM_NODE_INPUT, name, dtype, ndim, shape, "em_input", out);
}

API em_status em_constant(em_graph *g, em_tensor *t, em_var *out) {
  if (!t) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_constant: tensor is NULL");
  em_tensor *copy;
  em_status s;
  /* a view of the caller's tensor, not the tensor itself: the graph's own tensor is marked
   * versioned when run (engine/tensor_internal.h), and the caller's must not be, as it is
   * theirs again once the graph is gone */
  if (em_tensor_device(t).kind == EM_DEVICE_CPU && em_tensor_is_contiguous(t))
    s = em_tensor_reshape(t, em_tensor_ndim(t), em_tensor_shape(t), &copy);
  else s = em_tensor_to_device(t, em_cpu(), &copy);
  if (s) return s;
  s = leaf(g, EM_NODE_CONST, NULL, em_tensor_dtype(t), em_tensor_ndim(t), em_tensor_shape(t), "em_constant", out);
  if (s) em_tensor_release(copy);
  else g->nodes[g->values[*out].node].tensor = copy;
  return s;
}

/* ------------------------------------------------------- initialisers --- */

/* splitmix64: a small generator with a fixed, documented sequence per seed. */
static uint64_t splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *st) { return (double)(splitmix(st) >> 11) * (1.0 / 9007199254740992.0); }

/* Box-Muller, one value per call (the second is dropped for simplicity). */
static double normal01(uint64_t *st) {
  double u1 = uniform01(st), u2 = uniform01(st);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fans(int ndim, const int64_t *shape, double *fan_in, double *fan_out) {
  if (ndim == 0) {
    *fan_in = *fan_out = 1;
    return;
  }
  if (ndim == 1) {
    *fan_in = *fan_out = (double)shape[0];
    return;
  }
  double receptive = 1;
  for (int i = 2; i < ndim; i++) receptive *= (double)shape[i];
  *fan_out = (double)shape[0] * receptive;
  *fan_in = (double)shape[1] * receptive;
}

static em_status fill_init(em_tensor *t, const em_init *init, const char *name) {
  int64_t n = em_tensor_numel(t);
  em_dtype dt = em_tensor_dtype(t);
  if (dt != EM_F32 && dt != EM_F64)
    return em_fail(EM_ERR_UNSUPPORTED, "parameter '%s': initialisers fill f32 and f64 parameters (not %s)", name, em_dtype_name(dt));
  double fi, fo;
  fans(em_tensor_ndim(t), em_tensor_shape(t), &fi, &fo);
  uint64_t st = init->seed;
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!v) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to initialise '%s'", name);
  for (int64_t i = 0; i < n; i++) {
    double x;
    switch (init->kind) {
    case EM_INIT_CONSTANT: x = init->value; break;
    case EM_INIT_UNIFORM: x = (2 * uniform01(&st) - 1) * init->scale; break;
    case EM_INIT_NORMAL: x = normal01(&st) * init->scale; break;
    case EM_INIT_TRUNCATED_NORMAL:
      do x = normal01(&st); while (fabs(x) > 2);
      x *= init->scale;
      break;
    case EM_INIT_GLOROT_UNIFORM: x = (2 * uniform01(&st) - 1) * sqrt(6.0 / (fi + fo)); break;
    case EM_INIT_GLOROT_NORMAL: x = normal01(&st) * sqrt(2.0 / (fi + fo)); break;
    case EM_INIT_HE_UNIFORM: x = (2 * uniform01(&st) - 1) * sqrt(6.0 / fi); break;
    case EM_INIT_HE_NORMAL: x = normal01(&st) * sqrt(2.0 / fi); break;
    default:
      free(v);
      return em_fail(EM_ERR_INVALID_ARGUMENT, "parameter '%s': unknown initialiser %d", name, (int)init->kind);
    }
    v[i] = x;
  }
  if (dt == EM_F32) {
    float *d = em_tensor_data(t);
    for (int64_t i = 0; i < n; i++) d[i] = (float)v[i];
  } else {
    memcpy(em_tensor_data(t), v, sizeof(double) * (size_t)n);
  }
  free(v);
  return EM_OK;
}

static em_status make_parameter(em_graph *g, em_node_kind kind, const char *name, em_dtype dtype, int ndim,
                                const int64_t *shape, const em_init *init, em_var *out) {
  if (!init) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_parameter '%s': init is NULL", name ? name : "");
  em_tensor *t;
  em_status s;
  if (init->kind == EM_INIT_FROM_DATA) {
    if (!init->data) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_parameter '%s': EM_INIT_FROM_DATA without data", name ? name : "");
    s = em_tensor_to_device(init->data, em_cpu(), &t);
    if (!s && (em_tensor_dtype(t) != dtype || em_tensor_ndim(t) != ndim ||
               (ndim && memcmp(em_tensor_shape(t), shape, sizeof(int64_t) * (size_t)ndim)))) {
      char d[128];
      em_tensor_describe(t, d, sizeof d);
      em_tensor_release(t);
      return em_fail(EM_ERR_INVALID_ARGUMENT, "em_parameter '%s': the data is %s, not the declared dtype and shape", name ? name : "", d);
    }
  } else {
    s = em_tensor_zeros(em_cpu(), dtype, ndim, shape, &t);
    if (!s) {
      s = fill_init(t, init, name ? name : "");
      if (s) em_tensor_release(t);
    }
  }
  if (s) return s;
  s = leaf(g, kind, name, dtype, ndim, shape, kind == EM_NODE_PARAM ? "em_parameter" : "em_state", out);
  if (s) {
    em_tensor_release(t);
    return s;
  }
  g->nodes[g->values[*out].node].tensor = t;
  return EM_OK;
}

API em_status em_parameter(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                           const em_init *init, em_var *out) {
  return make_parameter(g, EM_NODE_PARAM, name, dtype, ndim, shape, init, out);
}

API em_status em_state(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                       const em_init *init, em_var *out) {
  return make_parameter(g, EM_NODE_STATE, name, dtype, ndim, shape, init, out);
}

API em_status em_placeholder(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                             em_var *out) {
  return leaf(g, EM_NODE_PLACEHOLDER, name, dtype, ndim, shape, "em_placeholder", out);
}

/* ---------------------------------------------------------- functions --- */

em_status em_attrs_copy(const em_attr *src, int n, em_attr **out) {
  *out = NULL;
  if (!n) return EM_OK;
  em_attr *a = calloc((size_t)n, sizeof *a);
  if (!a) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for attributes");
  for (int i = 0; i < n; i++) {
    a[i] = src[i];
    a[i].name = src[i].name ? strdup(src[i].name) : NULL;
    a[i].s = src[i].s ? strdup(src[i].s) : NULL;
    a[i].ints = NULL;
    a[i].floats = NULL;
    int bad = (src[i].name && !a[i].name) || (src[i].s && !a[i].s);
    if (src[i].n > 0 && src[i].ints) {
      int64_t *p = malloc(sizeof(int64_t) * (size_t)src[i].n);
      if (p) memcpy(p, src[i].ints, sizeof(int64_t) * (size_t)src[i].n);
      a[i].ints = p;
      bad |= !p;
    }
    if (src[i].n > 0 && src[i].floats) {
      double *p = malloc(sizeof(double) * (size_t)src[i].n);
      if (p) memcpy(p, src[i].floats, sizeof(double) * (size_t)src[i].n);
      a[i].floats = p;
      bad |= !p;
    }
    if (bad) {
      em_attrs_free(a, i + 1);
      return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for attributes");
    }
  }
  *out = a;
  return EM_OK;
}

/* An attribute name the op does not take is refused, listing the ones it
 * does (ops that declare their list in em_op_def.attrs). */
em_status em_op_check_attr_name(const em_op_def *def, const char *name) {
  if (!def->attrs || !name) return EM_OK;
  for (const char *const *a = def->attrs; *a; a++)
    if (!strcmp(*a, name)) return EM_OK;
  char list[512] = "";
  size_t n = 0;
  for (const char *const *a = def->attrs; *a && n < sizeof list; a++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", *a);
  return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s' has no attribute '%s' (it takes: %s)", def->name, name,
                 n ? list : "none");
}

static em_status apply_checked(em_graph *g, const em_op_def *def, const char *op, const em_var *inputs, int n_inputs,
                               em_shape *in, const em_attr *attrs, int n_attrs, em_shape *out, em_var *outputs,
                               int n_outputs);

API em_status em_apply(em_graph *g, const char *op, const em_var *inputs, int n_inputs, const em_attr *attrs,
                       int n_attrs, em_var *outputs, int n_outputs) {
  if (!g || !op || (n_inputs && !inputs) || (n_attrs && !attrs) || !outputs)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_apply: NULL argument");
  const em_op_def *def = em_op_find(op);
  if (!def) {
    char hint[256];
    em_op_suggest(op, hint, sizeof hint);
    return em_fail(EM_ERR_NOT_FOUND, "em_apply: no operation named '%s'%s (`ember ops` lists them)", op, hint);
  }
  if (n_inputs < def->min_inputs || n_inputs > def->max_inputs)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s' takes %d to %d inputs, %d given", op, def->min_inputs,
                   def->max_inputs, n_inputs);
  if (n_outputs != def->n_outputs)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s' has %d outputs, %d requested", op, def->n_outputs, n_outputs);
  if (n_inputs > EM_MAX_INPUTS || n_outputs > 8)
    return em_fail(EM_ERR_UNSUPPORTED, "op '%s': too many inputs or outputs (at most %d and 8)", op, EM_MAX_INPUTS);
  for (int i = 0; i < n_inputs; i++) {
    em_status s = em_graph_check_var(g, inputs[i], op);
    if (s) return s;
  }
  em_shape few[16], out[8], *in = n_inputs > 16 ? malloc(sizeof(em_shape) * (size_t)n_inputs) : few;
  if (!in) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for op '%s''s %d input shapes", op, n_inputs);
  for (int i = 0; i < n_inputs; i++) in[i] = g->values[inputs[i]].shape;
  em_status s = apply_checked(g, def, op, inputs, n_inputs, in, attrs, n_attrs, out, outputs, n_outputs);
  if (in != few) free(in);
  return s;
}

/* em_apply once the inputs are checked and their shapes are in `in`. */
static em_status apply_checked(em_graph *g, const em_op_def *def, const char *op, const em_var *inputs, int n_inputs,
                               em_shape *in, const em_attr *attrs, int n_attrs, em_shape *out, em_var *outputs,
                               int n_outputs) {
  if (n_attrs > 256) return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s': %d attributes (at most 256)", op, n_attrs);
  for (int i = 0; i < n_attrs; i++) {
    if ((unsigned)attrs[i].type > EM_ATTR_STRING)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s': attribute '%s' has an unknown type %d", op,
                     attrs[i].name ? attrs[i].name : "?", (int)attrs[i].type);
    for (int k = 0; k < i; k++)
      if (attrs[i].name && attrs[k].name && !strcmp(attrs[i].name, attrs[k].name))
        return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s': attribute '%s' is given twice", op, attrs[i].name);
    em_status s = em_op_check_attr_name(def, attrs[i].name);
    if (s) return s;
  }
  for (int i = 0; i < n_attrs; i++)
    if (!attrs[i].name || (attrs[i].n < 0) || (attrs[i].n > 0 && attrs[i].type == EM_ATTR_INTS && !attrs[i].ints) ||
        (attrs[i].n > 0 && attrs[i].type == EM_ATTR_FLOATS && !attrs[i].floats) ||
        (attrs[i].type == EM_ATTR_STRING && !attrs[i].s))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s': attribute %d ('%s') is malformed (no name, or no data)", op, i,
                     attrs[i].name ? attrs[i].name : "?");
  em_op_args a = {.def = def, .attrs = attrs, .n_attrs = n_attrs, .n_in = n_inputs, .in = in, .n_out = n_outputs,
                  .out = out};
  memset(out, 0, sizeof(em_shape) * 8);
  em_status s = em_op_infer(&a);
  if (s) return s;

  int id = em_graph_add_node(g, EM_NODE_OP, n_outputs);
  if (id < 0) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a graph node");
  em_node *n = &g->nodes[id];
  n->op = def;
  n->n_in = n_inputs;
  n->inputs = malloc(sizeof(em_var) * (size_t)(n_inputs ? n_inputs : 1));
  if (!n->inputs || em_attrs_copy(attrs, n_attrs, &n->attrs)) {
    g->n_nodes--; /* the node was the last one: drop it and its values */
    g->n_values -= (size_t)n_outputs;
    free(n->inputs);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for op '%s'", op);
  }
  n->n_attrs = n_attrs;
  if (n_inputs) memcpy(n->inputs, inputs, sizeof(em_var) * (size_t)n_inputs);
  for (int i = 0; i < n_outputs; i++) {
    g->values[n->first_value + i].shape = out[i];
    outputs[i] = (em_var)(n->first_value + i);
  }
  return EM_OK;
}

API em_status em_stop_gradient(em_graph *g, em_var x, em_var *out) {
  return em_apply(g, "stop_gradient", &x, 1, NULL, 0, out, 1);
}

/* ------------------------------------------------------------ queries --- */

API em_status em_var_info(const em_graph *g, em_var v, em_dtype *dtype, int *ndim, int64_t *shape) {
  em_status s = em_graph_check_var(g, v, "em_var_info");
  if (s) return s;
  const em_shape *sh = &g->values[v].shape;
  if (dtype) *dtype = sh->dtype;
  if (ndim) *ndim = sh->ndim;
  if (shape) memcpy(shape, sh->dims, sizeof(int64_t) * (size_t)sh->ndim);
  return EM_OK;
}

API em_status em_var_name(const em_graph *g, em_var v, const char **name) {
  if (!name) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_var_name: name is NULL");
  em_status s = em_graph_check_var(g, v, "em_var_name");
  if (!s) *name = g->values[v].name ? g->values[v].name : "";
  return s;
}

API em_status em_var_set_name(em_graph *g, em_var v, const char *name) {
  em_status s = em_graph_check_var(g, v, "em_var_set_name");
  if (s) return s;
  char *copy = name ? strdup(name) : NULL;
  free(g->values[v].name);
  g->values[v].name = copy;
  return EM_OK;
}

API em_status em_graph_lookup(const em_graph *g, const char *name, em_var *out) {
  if (!g || !name || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_lookup: NULL argument");
  for (size_t i = 0; i < g->n_values; i++)
    if (g->values[i].name && !strcmp(g->values[i].name, name)) {
      *out = (em_var)i;
      return EM_OK;
    }
  return em_fail(EM_ERR_NOT_FOUND, "no value named '%s' in the graph", name);
}

static em_status list_kind(const em_graph *g, em_node_kind kind, em_var *vars, size_t cap, size_t *count) {
  if (!g || !count) return em_fail(EM_ERR_INVALID_ARGUMENT, "listing %ss: NULL argument", em_node_kind_name(kind));
  size_t k = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == kind) {
      if (vars && k < cap) vars[k] = (em_var)g->nodes[i].first_value;
      k++;
    }
  *count = k;
  return EM_OK;
}

API em_status em_graph_parameters(const em_graph *g, em_var *vars, size_t cap, size_t *count) {
  return list_kind(g, EM_NODE_PARAM, vars, cap, count);
}

API em_status em_graph_states(const em_graph *g, em_var *vars, size_t cap, size_t *count) {
  return list_kind(g, EM_NODE_STATE, vars, cap, count);
}

API size_t em_graph_value_count(const em_graph *g) { return g ? g->n_values : 0; }

static em_status param_node(const em_graph *g, em_var p, const char *what, em_node **out) {
  em_status s = em_graph_check_var(g, p, what);
  if (s) return s;
  em_node *n = &g->nodes[g->values[p].node];
  if (n->kind != EM_NODE_PARAM && n->kind != EM_NODE_STATE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: value %d is a%s %s, not a parameter or state", what, (int)p,
                   n->kind == EM_NODE_INPUT || n->kind == EM_NODE_OP ? "n" : "", em_node_kind_name(n->kind));
  *out = n;
  return EM_OK;
}

/* The host tensor is the graph's value; executors on devices keep copies
 * (engine/tensor_internal.h). Handing out the host tensor itself first brings
 * it up to date, then counts as a write: the caller may write through it, so
 * device copies are uploaded again before their next use. */
API em_status em_parameter_value(const em_graph *g, em_var p, em_tensor **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_parameter_value: out is NULL");
  em_node *n;
  em_status s = param_node(g, p, "em_parameter_value", &n);
  if (!s) s = em_tensor_sync_host(n->tensor);
  if (s) return s;
  em_tensor_host_written(n->tensor);
  *out = em_tensor_retain(n->tensor);
  return EM_OK;
}

API em_status em_parameter_get(const em_graph *g, em_var p, em_device dev, em_tensor **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_parameter_get: out is NULL");
  *out = NULL;
  em_node *n;
  em_status s = param_node(g, p, "em_parameter_get", &n);
  if (s) return s;
  if (!(s = em_device_check(dev))) s = em_resident_read(n->tensor, dev, out);
  return s ? em_fail_context(s, "em_parameter_get '%s'", n->name ? n->name : "") : EM_OK;
}

em_status em_graph_sync_host(const em_graph *g) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const em_node *n = &g->nodes[i];
    em_status s = n->tensor ? em_tensor_sync_host(n->tensor) : EM_OK;
    if (s) return em_fail_context(s, "%s '%s'", em_node_kind_name(n->kind), n->name ? n->name : "");
  }
  return EM_OK;
}

API em_status em_parameter_set(em_graph *g, em_var p, const em_tensor *value) {
  em_node *n;
  em_status s = param_node(g, p, "em_parameter_set", &n);
  if (s) return s;
  const em_shape *sh = &g->values[p].shape;
  if (!value || em_tensor_dtype(value) != sh->dtype || em_tensor_ndim(value) != sh->ndim ||
      (sh->ndim && memcmp(em_tensor_shape(value), sh->dims, sizeof(int64_t) * (size_t)sh->ndim))) {
    char want[128], have[128] = "NULL";
    if (value) em_tensor_describe(value, have, sizeof have);
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_parameter_set '%s': value %s does not match %s", n->name ? n->name : "",
                   have, em_shape_str(sh, want, sizeof want));
  }
  /* Written in place, so graphs sharing the storage (EM_CLONE_SHARE) and
   * tensors obtained from em_parameter_value see the new value. The value
   * itself (written through em_parameter_value's tensor): only the versions
   * change, so device copies are uploaded again. */
  if (em_tensor_data(value) == em_tensor_data(n->tensor) && em_tensor_is_contiguous(value)) {
    em_tensor_host_written(n->tensor);
    return EM_OK;
  }
  /* A value on a device where an executor keeps the parameter: copied there
   * directly; the host catches up when it is read. */
  int done;
  if ((s = em_resident_set(n->tensor, value, &done)) || done) return s;
  size_t bytes = (size_t)em_tensor_numel(value) * em_dtype_size(sh->dtype);
  s = em_tensor_to_host(value, em_tensor_data(n->tensor), bytes);
  /* The whole value is replaced: no need to read a newer device copy back first. */
  if (!s) em_tensor_host_written(n->tensor);
  return s;
}

em_status em_node_infer(const em_graph *g, int node, const em_shape *in, em_shape *out) {
  const em_node *n = &g->nodes[node];
  em_shape few[16], *own = NULL;
  if (!in) {
    own = n->n_in > 16 ? malloc(sizeof(em_shape) * (size_t)n->n_in) : few;
    if (!own) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for node %d's %d input shapes", node, n->n_in);
    for (int i = 0; i < n->n_in; i++) own[i] = g->values[n->inputs[i]].shape;
    in = own;
  }
  em_op_args a = {.def = n->op, .attrs = n->attrs, .n_attrs = n->n_attrs, .n_in = n->n_in, .in = in,
                  .n_out = n->n_out, .out = out, .node = node};
  memset(out, 0, sizeof(em_shape) * (size_t)n->n_out);
  em_status s = em_op_infer(&a);
  if (own && own != few) free(own);
  return s;
}
