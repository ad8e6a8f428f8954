/* Graph editing: replacing a value everywhere it is used (binding
 * placeholders, swapping a subgraph), and cloning a graph with its
 * parameters shared or copied. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

#define API __attribute__((visibility("default")))

/* -------------------------------------------------------------- replace --- */

typedef struct use {
  int node, input;
} use;

static int shapes_compatible(const em_shape *a, const em_shape *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i] && a->dims[i] != -1 && b->dims[i] != -1) return 0;
  return 1;
}

/* Infers every op node again, in topological order (Kahn's algorithm over
 * all nodes). Nodes downstream of a still-unbound placeholder keep their
 * shapes (they are inferred when it is bound), and so do nodes on a cycle
 * (the executor refuses those, naming them). On failure restores every
 * shape from `saved`. */
static em_status reinfer_all(em_graph *g, em_shape *saved) {
  size_t nn = g->n_nodes, n_edges = 0;
  for (size_t v = 0; v < g->n_values; v++) saved[v] = g->values[v].shape;
  for (size_t i = 0; i < nn; i++) n_edges += (size_t)g->nodes[i].n_in;
  int *pending = calloc(nn ? nn : 1, sizeof(int));
  size_t *first = calloc(nn + 1, sizeof(size_t));
  int *consumers = malloc(sizeof(int) * (n_edges ? n_edges : 1));
  int *queue = malloc(sizeof(int) * (nn ? nn : 1));
  unsigned char *tainted = calloc(nn ? nn : 1, 1);
  em_status s = EM_OK;
  if (!pending || !first || !consumers || !queue || !tainted) {
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to re-check the graph");
    goto done;
  }
  /* consumers of node p: consumers[first[p] .. first[p+1]) */
  for (size_t i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) first[g->values[g->nodes[i].inputs[k]].node + 1]++;
  for (size_t p = 0; p < nn; p++) first[p + 1] += first[p];
  size_t *fill = calloc(nn ? nn : 1, sizeof(size_t));
  if (!fill) {
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to re-check the graph");
    goto done;
  }
  for (size_t i = 0; i < nn; i++) {
    pending[i] = g->nodes[i].n_in;
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int p = g->values[g->nodes[i].inputs[k]].node;
      consumers[first[p] + fill[p]++] = (int)i;
    }
  }
  free(fill);
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < nn; i++)
    if (!pending[i]) queue[tail++] = (int)i;
  while (head < tail && !s) {
    int i = queue[head++];
    em_node *n = &g->nodes[i];
    if (n->kind == EM_NODE_PLACEHOLDER) tainted[i] = 1;
    for (int k = 0; k < n->n_in; k++) tainted[i] |= tainted[g->values[n->inputs[k]].node];
    if (n->kind == EM_NODE_OP && !tainted[i]) {
      em_shape out[8];
      s = em_node_infer(g, i, NULL, out);
      if (s) s = em_fail_context(s, "after the replacement, node %d", i);
      for (int k = 0; k < n->n_out && !s; k++) g->values[n->first_value + k].shape = out[k];
    }
    for (size_t c = first[i]; c < first[i + 1]; c++)
      if (--pending[consumers[c]] == 0) queue[tail++] = consumers[c];
  }
  if (s)
    for (size_t v = 0; v < g->n_values; v++) g->values[v].shape = saved[v];
done:
  free(pending), free(first), free(consumers), free(queue), free(tainted);
  return s;
}

/* Blocks (graph_internal.h) whose interior the rewiring of `uses` changes:
 * *drop[b] = 1 (NULL when the graph has no blocks). A block input that is
 * replaced is not interior: its uses inside follow, and so does the block. */
static em_status blocks_to_drop(const em_graph *g, em_var old, const use *uses, size_t n_uses, unsigned char **drop) {
  *drop = NULL;
  if (!g->n_blocks || !n_uses) return EM_OK;
  unsigned char *d = calloc(g->n_blocks, 1), *interior = malloc(g->n_nodes ? g->n_nodes : 1);
  if (!d || !interior) {
    free(d), free(interior);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for em_graph_replace");
  }
  for (size_t b = 0; b < g->n_blocks; b++) {
    const em_block *blk = &g->blocks[b];
    int is_input = 0;
    for (int i = 0; i < blk->n_in; i++) is_input |= blk->inputs[i] == old;
    if (is_input) continue;
    memset(interior, 0, g->n_nodes ? g->n_nodes : 1);
    if (em_block_interior(g, blk, interior)) {
      d[b] = 1; /* no longer true (or no memory to tell): forgotten */
      continue;
    }
    for (size_t i = 0; i < n_uses && !d[b]; i++) d[b] = interior[uses[i].node];
  }
  free(interior);
  *drop = d;
  return EM_OK;
}

/* After a replacement: dropped blocks go, block inputs follow. */
static void update_blocks(em_graph *g, em_var old, em_var replacement, const unsigned char *drop) {
  size_t k = 0;
  for (size_t b = 0; b < g->n_blocks; b++) {
    if (drop && drop[b]) {
      em_block_clear(&g->blocks[b]);
      continue;
    }
    em_block *blk = &g->blocks[k];
    if (k != b) *blk = g->blocks[b];
    for (int i = 0; i < blk->n_in; i++)
      if (blk->inputs[i] == old) blk->inputs[i] = replacement;
    k++;
  }
  g->n_blocks = k;
}

API em_status em_graph_replace(em_graph *g, em_var old, em_var replacement) {
  em_status s = em_graph_check_var(g, old, "em_graph_replace (old)");
  if (!s) s = em_graph_check_var(g, replacement, "em_graph_replace (replacement)");
  if (s) return s;
  if (old == replacement) return EM_OK;
  char a[128], b[128];
  if (!shapes_compatible(&g->values[old].shape, &g->values[replacement].shape))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_replace: value %d is %s but its replacement %d is %s", (int)old,
                   em_shape_str(&g->values[old].shape, a, sizeof a), (int)replacement,
                   em_shape_str(&g->values[replacement].shape, b, sizeof b));
  size_t n_uses = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) n_uses += g->nodes[i].inputs[k] == old;
  use *uses = malloc(sizeof(use) * (n_uses ? n_uses : 1));
  em_shape *saved = malloc(sizeof(em_shape) * (g->n_values ? g->n_values : 1));
  if (!uses || !saved) {
    free(uses), free(saved);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for em_graph_replace");
  }
  size_t u = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].inputs[k] == old) uses[u++] = (use){(int)i, k};
  unsigned char *drop = NULL;
  s = blocks_to_drop(g, old, uses, n_uses, &drop);
  for (size_t i = 0; i < n_uses && !s; i++) g->nodes[uses[i].node].inputs[uses[i].input] = replacement;
  if (!s) s = reinfer_all(g, saved);
  if (s) /* undo the rewiring: the graph is exactly as before */
    for (size_t i = 0; i < n_uses; i++) g->nodes[uses[i].node].inputs[uses[i].input] = old;
  else {
    update_blocks(g, old, replacement, drop);
    g->version++;
  }
  free(drop);
  free(uses);
  free(saved);
  return s;
}

/* ---------------------------------------------------------------- clone --- */

static em_status clone_node(const em_node *src, em_node *dst, em_clone_mode mode) {
  memset(dst, 0, sizeof *dst);
  dst->kind = src->kind;
  dst->op = src->op;
  dst->first_value = src->first_value;
  dst->n_out = src->n_out;
  dst->n_in = src->n_in;
  if (src->name && !(dst->name = strdup(src->name))) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to clone");
  if (src->n_in) {
    dst->inputs = malloc(sizeof(em_var) * (size_t)src->n_in);
    if (!dst->inputs) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to clone");
    memcpy(dst->inputs, src->inputs, sizeof(em_var) * (size_t)src->n_in);
  }
  em_status s = em_attrs_copy(src->attrs, src->n_attrs, &dst->attrs);
  if (s) return s;
  dst->n_attrs = src->n_attrs;
  if (!src->tensor) return EM_OK;
  int copy = mode == EM_CLONE_COPY && (src->kind == EM_NODE_PARAM || src->kind == EM_NODE_STATE);
  if (!copy) {
    dst->tensor = em_tensor_retain(src->tensor);
    return EM_OK;
  }
  return em_tensor_to_device(src->tensor, em_cpu(), &dst->tensor);
}

API em_status em_graph_clone(const em_graph *g, em_clone_mode mode, em_graph **out) {
  if (!g || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_clone: NULL argument");
  if (mode != EM_CLONE_SHARE && mode != EM_CLONE_COPY)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_clone: unknown mode %d", (int)mode);
  em_graph *c;
  em_status s = em_graph_create(&c);
  if (s) return s;
  c->nodes = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *c->nodes);
  c->values = calloc(g->n_values ? g->n_values : 1, sizeof *c->values);
  if (!c->nodes || !c->values) {
    em_graph_free(c);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to clone a graph of %zu nodes", g->n_nodes);
  }
  c->cap_nodes = g->n_nodes ? g->n_nodes : 1;
  c->cap_values = g->n_values ? g->n_values : 1;
  for (size_t i = 0; i < g->n_nodes && !s; i++) {
    s = clone_node(&g->nodes[i], &c->nodes[i], mode);
    c->n_nodes = i + 1; /* freed by em_graph_free even when half made */
  }
  if (g->n_blocks && !s) {
    if (!(c->blocks = calloc(g->n_blocks, sizeof *c->blocks))) s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to clone");
    else c->cap_blocks = g->n_blocks;
  }
  for (size_t b = 0; b < g->n_blocks && !s; b++) {
    s = em_block_copy(&g->blocks[b], &c->blocks[b]);
    if (!s) c->n_blocks = b + 1;
  }
  for (size_t v = 0; v < g->n_values && !s; v++) {
    c->values[v] = g->values[v];
    c->values[v].name = NULL;
    c->n_values = v + 1;
    if (g->values[v].name && !(c->values[v].name = strdup(g->values[v].name)))
      s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to clone");
  }
  if (s) {
    em_graph_free(c);
    return s;
  }
  *out = c;
  return EM_OK;
}
