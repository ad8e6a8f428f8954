/* `ember inspect MODEL.onnx [--json]`: what an ONNX model declares and
 * whether Ember can run it, read through the public API without importing
 * the graph (em_onnx_options.metadata_only), so a model with ops Ember lacks
 * is still described: inputs and outputs (name, ONNX dtype, shape with the
 * names of symbolic dimensions), opset imports, producer, the ops used with
 * their counts, and the ops Ember has no translation for.
 *
 * Exit codes: 0 every op is supported; 1 some are not (named); 64 usage;
 * 65 malformed file; 66 missing or unreadable file. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_cmd.h"
#include "train_cmd.h"

static const char USAGE[] =
    "usage: ember inspect MODEL.onnx [--json]\n"
    "\n"
    "Describes an ONNX model without running it: its inputs and outputs (name,\n"
    "element type, shape; a symbolic dimension shows its name), opset imports,\n"
    "producer, the ops its graph uses with their counts, and the ops Ember lacks,\n"
    "so you know before `ember run` whether it can run. --json prints one JSON\n"
    "object instead.\n"
    "\n"
    "Exit codes: 0 every op is supported; 1 some ops are missing (named); 64 usage\n"
    "error; 65 malformed model; 66 model missing or unreadable.\n";

const char *ember_io_shape_text(const em_onnx_io *io, char *buf, size_t cap) {
  if (io->ndim < 0) {
    snprintf(buf, cap, "unknown");
    return buf;
  }
  snprintf(buf, cap, "[");
  for (int d = 0; d < io->ndim; d++) {
    size_t n = strlen(buf);
    if (io->dim_names[d]) snprintf(buf + n, cap - n, "%s%s", d ? ", " : "", io->dim_names[d]);
    else if (io->shape[d] < 0) snprintf(buf + n, cap - n, "%s?", d ? ", " : "");
    else snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)io->shape[d]);
  }
  snprintf(buf + strlen(buf), cap - strlen(buf), "]");
  return buf;
}

int ember_onnx_exit_code(em_status s) { return s == EM_ERR_UNSUPPORTED ? EXIT_CHECK_FAILED : ember_exit_code(s); }

/* ------------------------------------------------------------- op counts --- */

typedef struct op_count {
  const char *op, *domain;
  size_t count;
  int supported;
} op_count;

static int op_cmp(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  int c = strcmp(x->domain, y->domain);
  return c ? c : strcmp(x->op, y->op);
}

/* The distinct (domain, op) pairs of the graph with their counts, sorted. */
static op_count *count_ops(const em_onnx *m, size_t *n_out) {
  em_onnx_model_info info;
  em_onnx_get_info(m, &info);
  op_count *v = calloc(info.n_nodes + 1, sizeof *v);
  size_t n = 0;
  for (size_t i = 0; v && i < info.n_nodes; i++) {
    em_onnx_node_info nd;
    if (em_onnx_node_get(m, i, &nd)) continue;
    size_t k = 0;
    while (k < n && (strcmp(v[k].op, nd.op_type) || strcmp(v[k].domain, nd.domain))) k++;
    if (k == n) v[n++] = (op_count){nd.op_type, nd.domain, 0, nd.supported};
    v[k].count++;
  }
  if (v) qsort(v, n, sizeof *v, op_cmp);
  *n_out = n;
  return v;
}

static size_t count_missing(const op_count *ops, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += !ops[i].supported;
  return k;
}

static const char *op_label(const op_count *o, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s%s", o->domain, o->domain[0] ? "." : "", o->op);
  return buf;
}

/* ----------------------------------------------------------------- text --- */

static void print_io(const char *title, const em_onnx *m, int inputs) {
  size_t n = inputs ? em_onnx_input_count(m) : em_onnx_output_count(m);
  printf("%s (%zu):\n", title, n);
  for (size_t i = 0; i < n; i++) {
    em_onnx_io io;
    char shape[256];
    if (inputs ? em_onnx_input_get(m, i, &io) : em_onnx_output_get(m, i, &io)) {
      printf("  #%zu: %s\n", i, em_last_error());
      continue;
    }
    printf("  %-24s %-8s %s%s\n", io.name, io.onnx_dtype, ember_io_shape_text(&io, shape, sizeof shape),
           io.has_initializer ? "  (default value in the file)" : "");
  }
}

static void print_text(const em_onnx *m, const op_count *ops, size_t n_ops) {
  em_onnx_model_info info;
  em_onnx_get_info(m, &info);
  printf("model:    %s\nir:       %lld\nproducer: %s\ngraph:    %s (%zu nodes, %zu initializers)\nopsets:  ",
         info.source, (long long)info.ir_version, info.producer_name[0] ? info.producer_name : "(none)",
         info.graph_name[0] ? info.graph_name : "(unnamed)", info.n_nodes, info.n_initializers);
  for (size_t i = 0; i < em_onnx_opset_count(m); i++) {
    const char *d;
    int64_t v;
    if (!em_onnx_opset_get(m, i, &d, &v)) printf(" %s %lld", d[0] ? d : "ai.onnx", (long long)v);
  }
  printf("\n");
  print_io("inputs", m, 1);
  print_io("outputs", m, 0);
  printf("ops (%zu kinds):\n", n_ops);
  char lab[256];
  for (size_t i = 0; i < n_ops; i++)
    printf("  %-28s %6zu  %s\n", op_label(&ops[i], lab, sizeof lab), ops[i].count, ops[i].supported ? "ok" : "MISSING");
  size_t missing = count_missing(ops, n_ops);
  if (!missing) {
    printf("every op has an Ember translation\n");
    return;
  }
  printf("Ember lacks %zu op%s:", missing, missing > 1 ? "s" : "");
  for (size_t i = 0; i < n_ops; i++)
    if (!ops[i].supported) printf(" %s", op_label(&ops[i], lab, sizeof lab));
  printf("\n");
}

/* ----------------------------------------------------------------- json --- */

static json_t *io_json(const em_onnx *m, size_t i, int inputs) {
  em_onnx_io io;
  if (inputs ? em_onnx_input_get(m, i, &io) : em_onnx_output_get(m, i, &io))
    return json_pack("{s:s}", "error", em_last_error());
  json_t *shape = io.ndim < 0 ? json_null() : json_array(), *names = io.ndim < 0 ? json_null() : json_array();
  for (int d = 0; d < io.ndim; d++) {
    json_array_append_new(shape, json_integer(io.shape[d]));
    json_array_append_new(names, io.dim_names[d] ? json_string(io.dim_names[d]) : json_null());
  }
  return json_pack("{s:s, s:s, s:s?, s:o, s:o, s:b}", "name", io.name, "onnx_dtype", io.onnx_dtype, "dtype",
                   io.dtype_known ? em_dtype_name(io.dtype) : NULL, "shape", shape, "dim_names", names,
                   "has_initializer", io.has_initializer);
}

static void print_json(const em_onnx *m, const op_count *ops, size_t n_ops) {
  em_onnx_model_info info;
  em_onnx_get_info(m, &info);
  json_t *opsets = json_array(), *ins = json_array(), *outs = json_array(), *jops = json_array();
  json_t *missing = json_array();
  for (size_t i = 0; i < em_onnx_opset_count(m); i++) {
    const char *d;
    int64_t v;
    if (!em_onnx_opset_get(m, i, &d, &v))
      json_array_append_new(opsets, json_pack("{s:s, s:I}", "domain", d, "version", (json_int_t)v));
  }
  for (size_t i = 0; i < em_onnx_input_count(m); i++) json_array_append_new(ins, io_json(m, i, 1));
  for (size_t i = 0; i < em_onnx_output_count(m); i++) json_array_append_new(outs, io_json(m, i, 0));
  for (size_t i = 0; i < n_ops; i++) {
    json_array_append_new(jops, json_pack("{s:s, s:s, s:I, s:b}", "op", ops[i].op, "domain", ops[i].domain, "count",
                                          (json_int_t)ops[i].count, "supported", ops[i].supported));
    if (!ops[i].supported) json_array_append_new(missing, json_string(ops[i].op));
  }
  json_t *root = json_pack("{s:s, s:I, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:b}", "model", info.source,
                           "ir_version", (json_int_t)info.ir_version, "producer", info.producer_name, "graph",
                           info.graph_name, "nodes", (json_int_t)info.n_nodes, "initializers",
                           (json_int_t)info.n_initializers, "opsets", opsets, "inputs", ins, "outputs", outs, "ops",
                           jops, "missing_ops", missing, "supported", count_missing(ops, n_ops) == 0);
  json_dumpf(root, stdout, JSON_INDENT(2));
  printf("\n");
  json_decref(root);
}

int ember_inspect(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(USAGE, stdout), 0;
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-' || path) return fputs(USAGE, stderr), EXIT_USAGE;
    else path = argv[i];
  }
  if (!path) return fputs(USAGE, stderr), EXIT_USAGE;
  em_onnx *m;
  em_onnx_options o = {.metadata_only = 1};
  em_status s = em_onnx_load(path, &o, &m);
  if (s) {
    fprintf(stderr, "ember inspect: %s\n", em_last_error());
    return ember_onnx_exit_code(s);
  }
  size_t n_ops;
  op_count *ops = count_ops(m, &n_ops);
  if (!ops) {
    em_onnx_free(m);
    fprintf(stderr, "ember inspect: out of memory\n");
    return EXIT_SOFTWARE;
  }
  if (json) print_json(m, ops, n_ops);
  else print_text(m, ops, n_ops);
  int rc = count_missing(ops, n_ops) ? EXIT_CHECK_FAILED : 0;
  free(ops);
  em_onnx_free(m);
  return rc;
}
