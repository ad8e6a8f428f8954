// fuzz-sources: onnx/onnx_reader.c build/gen/onnx/onnx.pb-c.c runtime/error.c -Ionnx -lprotobuf-c
/* libFuzzer target for onnx/onnx_reader.c: every input goes through both the
 * model reader and the tensor reader. Accepted results are walked in full so
 * that the sanitizers see any pointer or size that does not hold. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_reader.h"

static volatile size_t sink;

static void touch(const void *p, size_t n) {
  const unsigned char *b = p;
  size_t acc = 0;
  for (size_t i = 0; i < n; i++) acc += b[i];
  sink += acc;
}

static void check_tensor(const em_onnx_tensor *t) {
  size_t count = 1;
  if (!t->data || !t->name) abort();
  for (size_t i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) abort();
    count *= (size_t)t->dims[i];
  }
  if (count != t->n_elements) abort();
  if (t->nbytes != t->n_elements * em_onnx_dtype_size(t->dtype)) abort();
  touch(t->data, t->nbytes);
  sink += strlen(t->name);
}

static void check_type(const em_onnx_type *ty) {
  for (; ty; ty = ty->elem) {
    for (size_t i = 0; i < ty->rank; i++) {
      if (ty->dims[i].value < -1) abort();
      if (ty->dims[i].param) sink += strlen(ty->dims[i].param);
    }
  }
}

static void check_graph(const em_onnx_graph *g);

static void check_attr(const em_onnx_attr *a) {
  sink += strlen(a->name);
  switch (a->type) {
  case EM_ONNX_ATTR_STRING: if (strlen(a->s.data) > a->s.len) abort(); touch(a->s.data, a->s.len); break;
  case EM_ONNX_ATTR_TENSOR: check_tensor(a->t); break;
  case EM_ONNX_ATTR_GRAPH: check_graph(a->g); break;
  case EM_ONNX_ATTR_TYPE: check_type(a->tp); break;
  case EM_ONNX_ATTR_FLOATS: touch(a->floats, a->n * sizeof *a->floats); break;
  case EM_ONNX_ATTR_INTS: touch(a->ints, a->n * sizeof *a->ints); break;
  case EM_ONNX_ATTR_STRINGS:
    for (size_t i = 0; i < a->n; i++) touch(a->strings[i].data, a->strings[i].len + 1);
    break;
  case EM_ONNX_ATTR_TENSORS: for (size_t i = 0; i < a->n; i++) check_tensor(&a->tensors[i]); break;
  case EM_ONNX_ATTR_GRAPHS: for (size_t i = 0; i < a->n; i++) check_graph(&a->graphs[i]); break;
  case EM_ONNX_ATTR_TYPES: for (size_t i = 0; i < a->n; i++) check_type(&a->types[i]); break;
  case EM_ONNX_ATTR_FLOAT: case EM_ONNX_ATTR_INT: break;
  default: abort(); /* the reader only returns known types */
  }
}

static void check_graph(const em_onnx_graph *g) {
  sink += strlen(g->name);
  for (size_t i = 0; i < g->n_nodes; i++) {
    const em_onnx_node *n = &g->nodes[i];
    if (!n->op_type[0]) abort();
    sink += strlen(n->domain) + strlen(n->name);
    for (size_t k = 0; k < n->n_inputs; k++) sink += strlen(n->inputs[k]);
    for (size_t k = 0; k < n->n_outputs; k++) sink += strlen(n->outputs[k]);
    for (size_t k = 0; k < n->n_attrs; k++) check_attr(&n->attrs[k]);
  }
  for (size_t i = 0; i < g->n_initializers; i++) check_tensor(&g->initializers[i]);
  for (size_t i = 0; i < g->n_inputs; i++) check_type(&g->inputs[i].type);
  for (size_t i = 0; i < g->n_outputs; i++) check_type(&g->outputs[i].type);
  for (size_t i = 0; i < g->n_value_infos; i++) check_type(&g->value_infos[i].type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_onnx_model *m = NULL;
  if (em_onnx_model_from_buffer(data, size, "fuzz", &m) == EM_OK) {
    for (size_t i = 0; i < m->n_opsets; i++) sink += strlen(m->opsets[i].domain);
    check_graph(&m->graph);
    em_onnx_model_free(m);
  } else if (m) {
    abort(); /* a failed load leaves *out NULL */
  }
  em_onnx_tensor *t = NULL;
  if (em_onnx_tensor_from_buffer(data, size, "fuzz", &t) == EM_OK) {
    check_tensor(t);
    em_onnx_tensor_free(t);
  } else if (t) {
    abort();
  }
  return 0;
}
