/* Blocks (graph_internal.h): records that some values are what one ONNX op
 * computes from others, kept true through em_graph_replace and carried by
 * em_graph_clone and em_graph_save. The nodes between a block's inputs and
 * outputs are found by walking the graph, never listed, so the builder may
 * compose them as it likes. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

void em_block_clear(em_block *b) {
  free(b->op);
  em_attrs_free(b->attrs, b->n_attrs);
  memset(b, 0, sizeof *b);
}

em_status em_block_copy(const em_block *src, em_block *dst) {
  *dst = *src;
  dst->op = NULL, dst->attrs = NULL, dst->n_attrs = 0;
  if (!(dst->op = strdup(src->op))) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a block");
  em_status s = em_attrs_copy(src->attrs, src->n_attrs, &dst->attrs);
  if (s) {
    em_block_clear(dst);
    return s;
  }
  dst->n_attrs = src->n_attrs;
  return EM_OK;
}

em_status em_graph_add_block(em_graph *g, const char *op, const em_var *inputs, int n_in, const em_var *outputs,
                             int n_out, const em_attr *attrs, int n_attrs) {
  if (!g || !op || !op[0] || n_in < 0 || n_in > EM_BLOCK_MAX_IO || n_out < 1 || n_out > EM_BLOCK_MAX_IO)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_add_block: bad arguments");
  em_block b = {.n_in = n_in, .n_out = n_out};
  int any_out = 0;
  for (int i = 0; i < n_in + n_out; i++) {
    em_var v = i < n_in ? inputs[i] : outputs[i - n_in];
    if (v == EM_BLOCK_NONE) continue;
    em_status s = em_graph_check_var(g, v, "em_graph_add_block");
    if (s) return s;
    if (i >= n_in) {
      if (g->nodes[g->values[v].node].kind != EM_NODE_OP)
        return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_add_block: %s output %d is a leaf, not computed", op, i - n_in);
      any_out = 1;
    }
  }
  if (!any_out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_add_block: %s has no output", op);
  if (n_in) memcpy(b.inputs, inputs, sizeof(em_var) * (size_t)n_in);
  memcpy(b.outputs, outputs, sizeof(em_var) * (size_t)n_out);
  if (g->n_blocks == g->cap_blocks) {
    size_t cap = g->cap_blocks ? 2 * g->cap_blocks : 8;
    em_block *t = realloc(g->blocks, cap * sizeof *t);
    if (!t) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a block");
    g->blocks = t, g->cap_blocks = cap;
  }
  if (!(b.op = strdup(op))) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a block");
  em_status s = em_attrs_copy(attrs, n_attrs, &b.attrs);
  if (s) {
    free(b.op);
    return s;
  }
  b.n_attrs = n_attrs;
  g->blocks[g->n_blocks++] = b;
  return EM_OK;
}

static int is_block_input(const em_block *b, em_var v) {
  for (int i = 0; i < b->n_in; i++)
    if (b->inputs[i] == v) return 1;
  return 0;
}

int em_block_interior(const em_graph *g, const em_block *b, unsigned char *interior) {
  int *stack = malloc(sizeof(int) * (g->n_nodes ? g->n_nodes : 1));
  if (!stack) return -1;
  int depth = 0, stale = 0;
  for (int i = 0; i < b->n_out; i++) {
    em_var v = b->outputs[i];
    if (v == EM_BLOCK_NONE || is_block_input(b, v)) continue;
    int node = g->values[v].node;
    if (!interior[node]) interior[node] = 1, stack[depth++] = node;
  }
  while (depth > 0 && !stale) {
    const em_node *n = &g->nodes[stack[--depth]];
    for (int k = 0; k < n->n_in; k++) {
      em_var v = n->inputs[k];
      int p = g->values[v].node;
      if (interior[p] || is_block_input(b, v)) continue;
      em_node_kind kind = g->nodes[p].kind;
      if (kind == EM_NODE_CONST) continue; /* the builder's own constants; shared ones are harmless */
      if (kind != EM_NODE_OP) stale = 1;
      else interior[p] = 1, stack[depth++] = p;
    }
  }
  free(stack);
  return stale ? -1 : 0;
}
