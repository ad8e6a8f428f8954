/* Before the exporter writes a recurrence block (engine/graph_internal.h) as
 * one ONNX LSTM / GRU / RNN node, it checks that the block's record says what
 * the nodes it covers compute: a graph file carries its blocks, and a file
 * edited by hand (or damaged in a way that still parses) could record an
 * LSTM whose attributes or inputs differ from the nodes, and the exported
 * model would then compute something else than the graph, silently.
 *
 * The check rebuilds the recurrence the record describes with
 * em_recurrent_apply, in a scratch graph whose inputs have the block inputs'
 * shapes and dtypes, and compares the two interiors node by node in graph
 * order (em_recurrent_apply adds its nodes in a fixed order): the same op,
 * attributes and input count; each input the same block input, the same
 * output of the same interior node, or a constant with the same dtype,
 * shape and bytes; and the block outputs the same interior outputs. A block
 * that fails is written unrolled, node by node, which is what the graph
 * computes. */
#include <stdlib.h>
#include <string.h>

#include "ember/graph.h"
#include "ember/layers.h"
#include "ember/tensor.h"
#include "error.h"
#include "graph_internal.h"
#include "onnx_export.h"

static int attr_equal(const em_attr *a, const em_attr *b) {
  if (strcmp(a->name, b->name) || a->type != b->type) return 0;
  switch (a->type) {
  case EM_ATTR_INT: return a->i == b->i;
  case EM_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
  case EM_ATTR_STRING: return a->s && b->s && !strcmp(a->s, b->s);
  case EM_ATTR_INTS: return a->n == b->n && (a->n == 0 || !memcmp(a->ints, b->ints, sizeof *a->ints * (size_t)a->n));
  case EM_ATTR_FLOATS:
    return a->n == b->n && (a->n == 0 || !memcmp(a->floats, b->floats, sizeof *a->floats * (size_t)a->n));
  }
  return 0;
}

static int attrs_equal(const em_attr *a, int na, const em_attr *b, int nb) {
  if (na != nb) return 0;
  for (int i = 0; i < na; i++)
    if (!attr_equal(&a[i], &b[i])) return 0;
  return 1;
}

static const em_attr *find_attr(const em_block *b, const char *name, em_attr_type type) {
  for (int i = 0; i < b->n_attrs; i++)
    if (!strcmp(b->attrs[i].name, name)) return b->attrs[i].type == type ? &b->attrs[i] : NULL;
  return NULL;
}

/* The block's attributes as em_recurrent_apply's options (record_block in
 * training/recurrent.c writes them: ONNX's names, activations as one
 * comma-separated string). names receives the split activations (its
 * storage, acts, at most 6 names). 0 when an attribute is malformed. */
static int opts_of(const em_block *b, em_recurrent_opts *o, char *acts, size_t acts_size, const char *names[6]) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < b->n_attrs; i++) {
    const char *n = b->attrs[i].name;
    if (strcmp(n, "hidden_size") && strcmp(n, "direction") && strcmp(n, "layout") && strcmp(n, "clip") &&
        strcmp(n, "linear_before_reset") && strcmp(n, "input_forget") && strcmp(n, "activations") &&
        strcmp(n, "activation_alpha") && strcmp(n, "activation_beta"))
      return 0; /* record_block writes no other */
  }
  const em_attr *a;
  if ((a = find_attr(b, "direction", EM_ATTR_STRING))) {
    if (!strcmp(a->s, "reverse")) o->direction = EM_DIR_REVERSE;
    else if (!strcmp(a->s, "bidirectional")) o->direction = EM_DIR_BIDIRECTIONAL;
    else return 0; /* forward is never written */
  }
  if ((a = find_attr(b, "layout", EM_ATTR_INT))) o->layout = (int)a->i;
  if ((a = find_attr(b, "clip", EM_ATTR_FLOAT))) o->clip = a->f;
  if ((a = find_attr(b, "linear_before_reset", EM_ATTR_INT))) o->linear_before_reset = (int)a->i;
  if ((a = find_attr(b, "input_forget", EM_ATTR_INT))) o->input_forget = (int)a->i;
  if ((a = find_attr(b, "activations", EM_ATTR_STRING))) {
    if (strlen(a->s) >= acts_size) return 0;
    strcpy(acts, a->s);
    int n = 0;
    for (char *p = acts, *save = NULL, *t; (t = strtok_r(p, ",", &save)); p = NULL) {
      if (n == 6) return 0;
      names[n++] = t;
    }
    o->activations = names, o->n_activations = n;
  }
  if ((a = find_attr(b, "activation_alpha", EM_ATTR_FLOATS))) o->activation_alpha = a->floats, o->n_alpha = a->n;
  if ((a = find_attr(b, "activation_beta", EM_ATTR_FLOATS))) o->activation_beta = a->floats, o->n_beta = a->n;
  return 1;
}

/* The interior's nodes in graph order, and each node's position in it (-1 outside). */
static int *order_of(const em_graph *g, const unsigned char *interior, int *pos, int *count) {
  int *list = malloc(sizeof(int) * (g->n_nodes ? g->n_nodes : 1)), n = 0;
  if (!list) return NULL;
  for (size_t i = 0; i < g->n_nodes; i++) {
    pos[i] = interior[i] ? n : -1;
    if (interior[i]) list[n++] = (int)i;
  }
  *count = n;
  return list;
}

static int block_input_index(const em_block *b, em_var v) {
  for (int i = 0; i < b->n_in; i++)
    if (b->inputs[i] == v) return i;
  return -1;
}

static int tensors_equal(const em_tensor *a, const em_tensor *b) {
  if (!a || !b || em_tensor_dtype(a) != em_tensor_dtype(b) || em_tensor_ndim(a) != em_tensor_ndim(b)) return 0;
  int nd = em_tensor_ndim(a);
  if (nd && memcmp(em_tensor_shape(a), em_tensor_shape(b), sizeof(int64_t) * (size_t)nd)) return 0;
  size_t bytes = (size_t)em_tensor_numel(a) * em_dtype_size(em_tensor_dtype(a));
  return bytes == 0 || !memcmp(em_tensor_data(a), em_tensor_data(b), bytes);
}

/* Value v1 of g1 (read by, or output of, interior node) and v2 of g2 stand for the same thing. */
typedef struct side {
  const em_graph *g;
  const em_block *b;
  const int *pos;
} side;

static int same_value(const side *s1, em_var v1, const side *s2, em_var v2) {
  if ((v1 == EM_BLOCK_NONE) != (v2 == EM_BLOCK_NONE)) return 0;
  if (v1 == EM_BLOCK_NONE) return 1;
  int i1 = block_input_index(s1->b, v1), i2 = block_input_index(s2->b, v2);
  if (i1 >= 0 || i2 >= 0) return i1 == i2;
  const em_value *a = &s1->g->values[v1], *b = &s2->g->values[v2];
  const em_node *na = &s1->g->nodes[a->node], *nb = &s2->g->nodes[b->node];
  if (s1->pos[a->node] >= 0 || s2->pos[b->node] >= 0)
    return s1->pos[a->node] == s2->pos[b->node] && a->index == b->index;
  return na->kind == EM_NODE_CONST && nb->kind == EM_NODE_CONST && tensors_equal(na->tensor, nb->tensor);
}

static int interiors_match(const side *s1, const int *l1, const side *s2, const int *l2, int count) {
  for (int k = 0; k < count; k++) {
    const em_node *a = &s1->g->nodes[l1[k]], *b = &s2->g->nodes[l2[k]];
    if (a->kind != EM_NODE_OP || b->kind != EM_NODE_OP || a->op != b->op || a->n_in != b->n_in ||
        a->n_out != b->n_out || !attrs_equal(a->attrs, a->n_attrs, b->attrs, b->n_attrs))
      return 0;
    for (int i = 0; i < a->n_in; i++)
      if (!same_value(s1, a->inputs[i], s2, b->inputs[i])) return 0;
  }
  for (int j = 0; j < s1->b->n_out; j++)
    if (!same_value(s1, s1->b->outputs[j], s2, s2->b->outputs[j])) return 0;
  return 1;
}

/* Rebuilds the recurrence blk records into g2; its block is g2's last. 0 when the record cannot be built. */
static int rebuild(const em_graph *g, const em_block *blk, em_graph *g2) {
  em_recurrent_cell cell;
  if (!strcmp(blk->op, "LSTM") && blk->n_in == 8 && blk->n_out == 3) cell = EM_CELL_LSTM;
  else if (!strcmp(blk->op, "GRU") && blk->n_in == 6 && blk->n_out == 2) cell = EM_CELL_GRU;
  else if (!strcmp(blk->op, "RNN") && blk->n_in == 6 && blk->n_out == 2) cell = EM_CELL_RNN;
  else return 0;
  em_var ins[8];
  for (int i = 0; i < blk->n_in; i++) {
    ins[i] = EM_NO_VAR;
    if (blk->inputs[i] == EM_BLOCK_NONE) continue;
    int same = -1; /* one value given for two inputs (initial_h and initial_c both zeros): one leaf for both */
    for (int j = 0; j < i && same < 0; j++)
      if (blk->inputs[j] == blk->inputs[i]) same = j;
    if (same >= 0) {
      ins[i] = ins[same];
      continue;
    }
    const em_shape *sh = &g->values[blk->inputs[i]].shape;
    if (em_input(g2, NULL, sh->dtype, sh->ndim, sh->dims, &ins[i])) return 0;
  }
  if (ins[0] == EM_NO_VAR || ins[1] == EM_NO_VAR || ins[2] == EM_NO_VAR) return 0;
  em_recurrent_inputs ri = EM_RECURRENT_INPUTS(ins[0], ins[1], ins[2]);
  ri.b = ins[3], ri.sequence_lens = ins[4], ri.initial_h = ins[5];
  if (cell == EM_CELL_LSTM) ri.initial_c = ins[6], ri.p = ins[7];
  em_recurrent_opts o;
  char acts[256];
  const char *names[6];
  if (!opts_of(blk, &o, acts, sizeof acts, names)) return 0;
  const em_attr *hs = find_attr(blk, "hidden_size", EM_ATTR_INT);
  const em_shape *r = &g->values[blk->inputs[2]].shape;
  if (!hs || r->ndim != 3 || r->dims[2] != hs->i) return 0;
  em_recurrent_outputs out;
  em_status s = em_recurrent_apply(g2, cell, &ri, &o, &out);
  em_clear_error();
  return !s && g2->n_blocks > 0;
}

int em_onnx_block_matches(const em_graph *g, const em_block *blk, const unsigned char *interior) {
  em_graph *g2 = NULL;
  int ok = 0, n1 = 0, n2 = 0;
  int *pos1 = malloc(sizeof(int) * (g->n_nodes ? g->n_nodes : 1)), *l1 = NULL, *l2 = NULL, *pos2 = NULL;
  unsigned char *interior2 = NULL;
  if (!pos1 || em_graph_create(&g2) || !rebuild(g, blk, g2)) goto done;
  const em_block *blk2 = &g2->blocks[g2->n_blocks - 1];
  interior2 = calloc(g2->n_nodes ? g2->n_nodes : 1, 1);
  pos2 = malloc(sizeof(int) * (g2->n_nodes ? g2->n_nodes : 1));
  if (!interior2 || !pos2 || em_block_interior(g2, blk2, interior2)) goto done;
  if (!(l1 = order_of(g, interior, pos1, &n1)) || !(l2 = order_of(g2, interior2, pos2, &n2)) || n1 != n2) goto done;
  const side s1 = {g, blk, pos1}, s2 = {g2, blk2, pos2};
  ok = interiors_match(&s1, l1, &s2, l2, n1);
done:
  em_clear_error();
  free(pos1), free(pos2), free(l1), free(l2), free(interior2);
  em_graph_free(g2);
  return ok;
}
