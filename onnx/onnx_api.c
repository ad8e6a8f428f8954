/* The public ONNX API (include/ember/onnx.h) over the internal reader
 * (onnx_reader.h) and importer (onnx_import.h): this file only matches names,
 * keeps the model's description and adds the model and node to messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "onnx_import.h"

#define API __attribute__((visibility("default")))

struct em_onnx {
  char *source;
  em_onnx_model *model; /* the reader's model: owns every string we hand out */
  em_graph *graph;      /* NULL with metadata_only */
  em_exec *exec;
  em_var *input_vars;   /* per graph input: its em_input, or -1 */
  em_var *output_vars;
  em_tensor **given;    /* per graph input: the value from the options (CPU), or NULL */
};

static em_status oom(void) { return em_fail(EM_ERR_OUT_OF_MEMORY, "out of memory loading an ONNX model"); }

API void em_onnx_free(em_onnx *m) {
  if (!m) return;
  em_exec_free(m->exec);
  em_graph_free(m->graph);
  for (size_t i = 0; m->given && m->model && i < m->model->graph.n_inputs; i++) em_tensor_release(m->given[i]);
  free(m->given);
  free(m->input_vars);
  free(m->output_vars);
  em_onnx_model_free(m->model);
  free(m->source);
  free(m);
}

static int has_initializer(const em_onnx_graph *g, const char *name) {
  for (size_t k = 0; k < g->n_initializers; k++)
    if (!strcmp(g->initializers[k].name, name)) return 1;
  return 0;
}

/* "'a', 'b', 'c'" (at most cap bytes) for messages that list what exists. */
static const char *name_list(const em_onnx_value_info *v, size_t n, char *buf, size_t cap) {
  buf[0] = 0;
  for (size_t i = 0; i < n; i++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s'%s'", i ? ", " : "", v[i].name);
  if (!n) snprintf(buf, cap, "none");
  return buf;
}

static int find_value(const em_onnx_value_info *v, size_t n, const char *name, size_t *index) {
  for (size_t i = 0; name && i < n; i++)
    if (!strcmp(v[i].name, name)) {
      *index = i;
      return 1;
    }
  return 0;
}

/* A value given for input v must have its declared dtype and, where the
 * file declares a shape, its rank and every fixed dimension: the importer
 * builds the graph for the value's shape, so a mismatch would otherwise run
 * a different model than the file describes. */
static em_status check_declared(const em_onnx_value_info *v, const em_tensor *t) {
  const em_onnx_type *ty = &v->type;
  em_dtype want;
  char got[128];
  em_tensor_describe(t, got, sizeof got);
  if (ty->kind != EM_ONNX_VALUE_TENSOR) return EM_OK; /* the importer refuses it, naming it */
  if (em_onnx_dtype_to_em(ty->dtype, &want) == EM_OK && want != em_tensor_dtype(t))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' is declared %s; the value given is %s", v->name,
                   em_onnx_dtype_name(ty->dtype), got);
  int ok = !ty->has_shape || (size_t)em_tensor_ndim(t) == ty->rank;
  for (size_t d = 0; ok && ty->has_shape && d < ty->rank; d++)
    ok = ty->dims[d].value < 0 || ty->dims[d].value == em_tensor_shape(t)[d];
  if (ok) return EM_OK;
  char decl[256] = "[";
  for (size_t d = 0; d < ty->rank; d++) {
    size_t n = strlen(decl);
    if (ty->dims[d].value >= 0) snprintf(decl + n, sizeof decl - n, "%s%lld", d ? "," : "", (long long)ty->dims[d].value);
    else snprintf(decl + n, sizeof decl - n, "%s%s", d ? "," : "", ty->dims[d].param ? ty->dims[d].param : "?");
  }
  snprintf(decl + strlen(decl), sizeof decl - strlen(decl), "]");
  return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' is declared with shape %s; the value given is %s", v->name, decl,
                 got);
}

/* Matches the options' input values to graph inputs, keeping a CPU copy of
 * each: the importer folds with them on the CPU and every run feeds them. */
static em_status take_input_values(em_onnx *m, const em_onnx_options *o) {
  const em_onnx_graph *g = &m->model->graph;
  char list[512];
  for (int j = 0; j < o->n_input_values; j++) {
    const em_named_tensor *nt = &o->input_values[j];
    size_t i;
    if (!nt->value)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "input value %d ('%s') is NULL", j, nt->name ? nt->name : "");
    if (!find_value(g->inputs, g->n_inputs, nt->name, &i))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "a value was given for '%s', which is not an input of the model "
                     "(its inputs: %s)", nt->name ? nt->name : "(null)",
                     name_list(g->inputs, g->n_inputs, list, sizeof list));
    if (m->given[i]) return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' is given twice", nt->name);
    em_status s = check_declared(&g->inputs[i], nt->value);
    if (s) return s;
    if (em_tensor_device(nt->value).kind == EM_DEVICE_CPU) m->given[i] = em_tensor_retain(nt->value);
    else if ((s = em_tensor_to_device(nt->value, em_cpu(), &m->given[i])))
      return em_fail_context(s, "copying the value of input '%s' to the host", nt->name);
  }
  return EM_OK;
}

/* Imports the graph and plans its outputs on the device. */
static em_status build(em_onnx *m, const em_onnx_options *o) {
  const em_onnx_graph *g = &m->model->graph;
  size_t bad_node;
  em_status s = em_graph_create(&m->graph);
  if (s) return s;
  s = em_onnx_import_at(m->model, m->graph, m->given, m->input_vars, m->output_vars, &bad_node);
  if (s && bad_node != (size_t)-1) return em_fail_context(s, "node %zu of %zu", bad_node, g->n_nodes);
  if (s) return s;
  if ((s = em_exec_create(m->graph, m->output_vars, (int)g->n_outputs, o->device, &m->exec)))
    return em_fail_context(s, "planning the model's outputs");
  if (o->mode != EM_ONNX_MODE_DEFAULT)
    s = em_exec_set_mode(m->exec, o->mode == EM_ONNX_MODE_PORTABLE ? EM_MODE_PORTABLE : EM_MODE_FAST);
  return s;
}

static em_status check_options(const em_onnx_options *o) {
  if (o->mode < EM_ONNX_MODE_DEFAULT || o->mode > EM_ONNX_MODE_PORTABLE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_options.mode %d is not an em_onnx_mode", (int)o->mode);
  if (o->n_input_values < 0 || (o->n_input_values && !o->input_values))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_options: %d input values at %p", o->n_input_values,
                   (const void *)o->input_values);
  return o->metadata_only ? EM_OK : em_device_check(o->device);
}

/* The steps after reading: everything fails with the source's name in front
 * (the reader's own messages already name it). */
static em_status finish_load(em_onnx *m, const em_onnx_options *o) {
  const em_onnx_graph *g = &m->model->graph;
  m->input_vars = malloc((g->n_inputs + 1) * sizeof *m->input_vars);
  m->output_vars = malloc((g->n_outputs + 1) * sizeof *m->output_vars);
  m->given = calloc(g->n_inputs + 1, sizeof *m->given);
  if (!m->input_vars || !m->output_vars || !m->given) return oom();
  for (size_t i = 0; i < g->n_inputs; i++) m->input_vars[i] = -1;
  for (size_t i = 0; i < g->n_outputs; i++) m->output_vars[i] = -1;
  em_status s = take_input_values(m, o);
  if (!s && !o->metadata_only) s = build(m, o);
  return s ? em_fail_context(s, "%s", m->source) : EM_OK;
}

static em_status load(const char *path, const void *bytes, size_t size, const char *name,
                      const em_onnx_options *options, em_onnx **out) {
  static const em_onnx_options defaults;
  const em_onnx_options *o = options ? options : &defaults;
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_load: out is NULL");
  *out = NULL;
  em_status s = check_options(o);
  if (s) return em_fail_context(s, "loading %s", path ? path : name ? name : "<buffer>");
  em_onnx *m = calloc(1, sizeof *m);
  if (!m || !(m->source = strdup(path ? path : name ? name : "<buffer>"))) {
    free(m);
    return oom();
  }
  s = path ? em_onnx_model_load(path, &m->model)
           : em_onnx_model_from_buffer_dir(bytes, size, m->source, o->external_data_dir, &m->model);
  if (!s) s = finish_load(m, o);
  if (s) {
    em_onnx_free(m);
    return s;
  }
  *out = m;
  return EM_OK;
}

API em_status em_onnx_load(const char *path, const em_onnx_options *options, em_onnx **out) {
  if (!path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_load: path is NULL");
  return load(path, NULL, 0, NULL, options, out);
}

API em_status em_onnx_load_buffer(const void *bytes, size_t size, const char *name, const em_onnx_options *options,
                                  em_onnx **out) {
  return load(NULL, bytes, size, name, options, out);
}

API em_graph *em_onnx_graph_of(const em_onnx *m) { return m ? m->graph : NULL; }
API em_exec *em_onnx_exec_of(const em_onnx *m) { return m ? m->exec : NULL; }

API em_status em_onnx_get_info(const em_onnx *m, em_onnx_model_info *out) {
  if (!m || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_get_info: NULL argument");
  const em_onnx_model *md = m->model;
  *out = (em_onnx_model_info){.source = m->source,
                              .ir_version = md->ir_version,
                              .producer_name = md->producer_name ? md->producer_name : "",
                              .graph_name = md->graph.name ? md->graph.name : "",
                              .n_nodes = md->graph.n_nodes,
                              .n_initializers = md->graph.n_initializers};
  return EM_OK;
}

API size_t em_onnx_input_count(const em_onnx *m) { return m ? m->model->graph.n_inputs : 0; }
API size_t em_onnx_output_count(const em_onnx *m) { return m ? m->model->graph.n_outputs : 0; }

/* The declared type of v, or (given) the value given at load. */
static em_status describe(const em_onnx *m, const em_onnx_value_info *v, const em_tensor *given, em_onnx_io *out) {
  const em_onnx_type *t = &v->type;
  memset(out, 0, sizeof *out);
  out->name = v->name;
  out->onnx_dtype = t->kind == EM_ONNX_VALUE_TENSOR ? em_onnx_dtype_name(t->dtype) : "(not a tensor)";
  out->dtype_known = t->kind == EM_ONNX_VALUE_TENSOR && em_onnx_dtype_to_em(t->dtype, &out->dtype) == EM_OK;
  em_clear_error();
  out->ndim = t->has_shape ? (int)t->rank : -1;
  if (given) {
    out->dtype = em_tensor_dtype(given), out->dtype_known = 1, out->ndim = em_tensor_ndim(given);
    memcpy(out->shape, em_tensor_shape(given), (size_t)out->ndim * sizeof out->shape[0]);
    return EM_OK;
  }
  if (t->has_shape && t->rank > EM_MAX_DIMS)
    return em_fail(EM_ERR_UNSUPPORTED, "%s: '%s' has rank %zu; Ember tensors have at most %d dimensions", m->source,
                   v->name, t->rank, EM_MAX_DIMS);
  for (int d = 0; d < out->ndim; d++) {
    out->shape[d] = t->dims[d].value;
    out->dim_names[d] = t->dims[d].param;
  }
  return EM_OK;
}

API em_status em_onnx_input_get(const em_onnx *m, size_t index, em_onnx_io *out) {
  if (!m || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_input_get: NULL argument");
  const em_onnx_graph *g = &m->model->graph;
  if (index >= g->n_inputs)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: input %zu asked for, the model has %zu", m->source, index,
                   g->n_inputs);
  em_status s = describe(m, &g->inputs[index], m->given[index], out);
  out->var = m->input_vars[index];
  out->has_initializer = has_initializer(g, g->inputs[index].name);
  out->given_at_load = m->given[index] != NULL;
  return s;
}

API em_status em_onnx_output_get(const em_onnx *m, size_t index, em_onnx_io *out) {
  if (!m || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_output_get: NULL argument");
  const em_onnx_graph *g = &m->model->graph;
  if (index >= g->n_outputs)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: output %zu asked for, the model has %zu", m->source, index,
                   g->n_outputs);
  em_status s = describe(m, &g->outputs[index], NULL, out);
  out->var = m->output_vars[index];
  return s;
}

API em_status em_onnx_find_input(const em_onnx *m, const char *name, size_t *index) {
  if (!m || !name || !index) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_find_input: NULL argument");
  const em_onnx_graph *g = &m->model->graph;
  char list[512];
  if (find_value(g->inputs, g->n_inputs, name, index)) return EM_OK;
  return em_fail(EM_ERR_NOT_FOUND, "%s has no input '%s' (its inputs: %s)", m->source, name,
                 name_list(g->inputs, g->n_inputs, list, sizeof list));
}

API em_status em_onnx_find_output(const em_onnx *m, const char *name, size_t *index) {
  if (!m || !name || !index) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_find_output: NULL argument");
  const em_onnx_graph *g = &m->model->graph;
  char list[512];
  if (find_value(g->outputs, g->n_outputs, name, index)) return EM_OK;
  return em_fail(EM_ERR_NOT_FOUND, "%s has no output '%s' (its outputs: %s)", m->source, name,
                 name_list(g->outputs, g->n_outputs, list, sizeof list));
}

API size_t em_onnx_opset_count(const em_onnx *m) { return m ? m->model->n_opsets : 0; }

API em_status em_onnx_opset_get(const em_onnx *m, size_t index, const char **domain, int64_t *version) {
  if (!m || !domain || !version) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_opset_get: NULL argument");
  if (index >= m->model->n_opsets)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: opset %zu asked for, the model imports %zu", m->source, index,
                   m->model->n_opsets);
  *domain = m->model->opsets[index].domain;
  *version = m->model->opsets[index].version;
  return EM_OK;
}

API int em_onnx_op_supported(const char *op_type, const char *domain) {
  if (domain && domain[0] && strcmp(domain, "ai.onnx") != 0) return 0;
  return em_onnx_import_has_op(op_type);
}

API em_status em_onnx_node_get(const em_onnx *m, size_t index, em_onnx_node_info *out) {
  if (!m || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_node_get: NULL argument");
  const em_onnx_graph *g = &m->model->graph;
  if (index >= g->n_nodes)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: node %zu asked for, the graph has %zu", m->source, index, g->n_nodes);
  const em_onnx_node *n = &g->nodes[index];
  *out = (em_onnx_node_info){n->name, n->op_type, n->domain, em_onnx_op_supported(n->op_type, n->domain)};
  return EM_OK;
}

/* ---------------------------------------------------------------- run --- */

/* Places the caller's inputs in feeds[] by input index (NULL: not given). */
static em_status match_inputs(const em_onnx *m, const em_named_tensor *in, int n, const em_tensor **by_input) {
  const em_onnx_graph *g = &m->model->graph;
  char list[512];
  for (int j = 0; j < n; j++) {
    size_t i;
    const char *name = in[j].name ? in[j].name : "(null)";
    if (!find_value(g->inputs, g->n_inputs, in[j].name, &i))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "'%s' is not an input of the model (its inputs: %s)", name,
                     name_list(g->inputs, g->n_inputs, list, sizeof list));
    if (!in[j].value) return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' has a NULL value", name);
    if (by_input[i]) return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' is given twice", name);
    if (m->given[i])
      return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' was given when the model was loaded (the graph is "
                     "specialised to that value); load the model again to change it", name);
    if (m->input_vars[i] < 0)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "input '%s' has its value from the model's initializer of that name; "
                     "give it in em_onnx_options.input_values to override it", name);
    by_input[i] = in[j].value;
  }
  return EM_OK;
}

/* Every imported input needs a value: names all those without one. */
static em_status check_missing(const em_onnx *m, const em_tensor **by_input) {
  const em_onnx_graph *g = &m->model->graph;
  char list[512] = "";
  size_t missing = 0;
  for (size_t i = 0; i < g->n_inputs; i++)
    if (m->input_vars[i] >= 0 && !by_input[i] && !m->given[i])
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", missing++ ? ", " : "", g->inputs[i].name);
  if (!missing) return EM_OK;
  return em_fail(EM_ERR_INVALID_ARGUMENT, "%zu input%s without a value: %s", missing, missing > 1 ? "s" : "", list);
}

static em_status run_feeds(em_onnx *m, const em_tensor **by_input, em_feed *feeds, em_tensor **outputs) {
  const em_onnx_graph *g = &m->model->graph;
  int nf = 0;
  for (size_t i = 0; i < g->n_inputs; i++) {
    const em_tensor *v = m->given[i] ? m->given[i] : by_input[i];
    if (m->input_vars[i] >= 0 && v) feeds[nf++] = (em_feed){m->input_vars[i], v};
  }
  return em_exec_run(m->exec, feeds, nf, outputs);
}

API em_status em_onnx_run(em_onnx *m, const em_named_tensor *inputs, int n_inputs, em_tensor **outputs) {
  if (!m || !outputs || n_inputs < 0 || (n_inputs && !inputs))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_run: NULL argument or negative count");
  const em_onnx_graph *g = &m->model->graph;
  for (size_t i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
  if (!m->exec)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s was loaded with metadata_only: it has no graph to run", m->source);
  const em_tensor **by_input = calloc(g->n_inputs + 1, sizeof *by_input);
  em_feed *feeds = calloc(g->n_inputs + 1, sizeof *feeds);
  em_status s = !by_input || !feeds ? oom() : match_inputs(m, inputs, n_inputs, by_input);
  if (!s) s = check_missing(m, by_input);
  if (!s) s = run_feeds(m, by_input, feeds, outputs);
  free(by_input);
  free(feeds);
  if (s) {
    for (size_t i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
    return em_fail_context(s, "running %s", m->source);
  }
  return EM_OK;
}
