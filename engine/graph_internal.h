/* The graph's representation, shared by graph.c, autodiff.c and exec.c. */
#ifndef EMBER_ENGINE_GRAPH_INTERNAL_H
#define EMBER_ENGINE_GRAPH_INTERNAL_H

#include "op.h"

/* Saved files store these numbers: append only. */
typedef enum em_node_kind {
  EM_NODE_INPUT = 0,
  EM_NODE_PARAM = 1,
  EM_NODE_CONST = 2,
  EM_NODE_OP = 3,
  EM_NODE_STATE = 4,
  EM_NODE_PLACEHOLDER = 5
} em_node_kind;

typedef struct em_node {
  em_node_kind kind;
  char *name;
  const em_op_def *op;        /* EM_NODE_OP */
  em_attr *attrs;             /* deep copies */
  int n_attrs;
  em_var *inputs;
  int n_in;
  int first_value, n_out;     /* the node's outputs are values first_value .. + n_out */
  em_tensor *tensor;          /* the value of a parameter, state or constant (CPU, contiguous) */
} em_node;

typedef struct em_value {
  int node, index;
  em_shape shape;             /* may hold -1 on the dynamic axis */
  char *name;
} em_value;

/* A block (CNTK's block function): a record that the values `outputs` are
 * what the ONNX op `op` (attributes `attrs`, ONNX's names and meanings)
 * computes from `inputs`, built out of ordinary nodes of the graph. The
 * nodes themselves are not listed: they are whatever lies between the
 * inputs and the outputs (em_block_interior), so a block stays true however
 * its builder composes them. em_recurrent_apply records each LSTM, GRU and
 * RNN it unrolls, so that em_onnx_export can write the op itself instead of
 * the unrolled nodes. An absent optional input or output is EM_BLOCK_NONE.
 * em_graph_replace keeps blocks true: a block input that is replaced
 * follows the replacement; a block whose interior is rewired is dropped.
 * Saved with the graph (format version 2), copied by em_graph_clone. */
#define EM_BLOCK_NONE ((em_var)-1)
#define EM_BLOCK_MAX_IO 16
typedef struct em_block {
  char *op;
  em_var inputs[EM_BLOCK_MAX_IO], outputs[EM_BLOCK_MAX_IO];
  int n_in, n_out;
  em_attr *attrs;             /* deep copies */
  int n_attrs;
} em_block;

struct em_graph {
  uint64_t version;           /* bumped by edits that invalidate plans (em_graph_replace) */
  em_node *nodes;
  size_t n_nodes, cap_nodes;
  em_value *values;
  size_t n_values, cap_values;
  em_block *blocks;           /* in creation order */
  size_t n_blocks, cap_blocks;
};

em_status em_graph_check_var(const em_graph *g, em_var v, const char *what);

/* Records a block (above): checks every present value and that every
 * output is an op's; copies op and attrs. */
em_status em_graph_add_block(em_graph *g, const char *op, const em_var *inputs, int n_in, const em_var *outputs,
                             int n_out, const em_attr *attrs, int n_attrs);
/* Marks in interior[node] (n_nodes entries, zeroed by the caller) the op
 * nodes between b's inputs and its outputs: the nodes its outputs need,
 * not looking past its inputs or into leaves. Returns 0, or -1 where that
 * walk reaches an input, parameter, state or placeholder that is not one
 * of b's inputs (the block no longer describes its nodes), or no memory. */
int em_block_interior(const em_graph *g, const em_block *b, unsigned char *interior);
/* Frees a block's members. */
void em_block_clear(em_block *b);
/* A deep copy of src into dst (EM_OK or out of memory). */
em_status em_block_copy(const em_block *src, em_block *dst);

/* Appends a node with n_out values; returns its index or -1 (no memory). */
int em_graph_add_node(em_graph *g, em_node_kind kind, int n_out);
/* Deep copies of attribute arrays (names, strings, lists), and their release. */
em_status em_attrs_copy(const em_attr *src, int n, em_attr **out);
void em_attrs_free(em_attr *a, int n);
/* "input", "parameter", ... */
const char *em_node_kind_name(em_node_kind k);
/* Runs the node's infer on its current input shapes (also with concrete
 * shapes per run, when in is given). */
em_status em_node_infer(const em_graph *g, int node, const em_shape *in, em_shape *out);

/* EM_ERR_INVALID_ARGUMENT naming the op, the attribute and the ones it takes
 * when def declares its attributes and `name` is not one of them. */
em_status em_op_check_attr_name(const em_op_def *def, const char *name);

/* Brings every parameter, state and constant's host bytes up to date where
 * a device copy holds a newer value (engine/tensor_internal.h). */
em_status em_graph_sync_host(const em_graph *g);

/* The op and leaf nodes the roots need, each after the nodes it reads, in
 * *order (malloc'd, *count entries). Fails naming the nodes of a cycle, or
 * a placeholder that was never bound. */
em_status em_graph_schedule(const em_graph *g, const em_var *roots, int n_roots, int **order, int *count);

#endif
