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

struct em_graph {
  uint64_t version;           /* bumped by edits that invalidate plans (em_graph_replace) */
  em_node *nodes;
  size_t n_nodes, cap_nodes;
  em_value *values;
  size_t n_values, cap_values;
};

em_status em_graph_check_var(const em_graph *g, em_var v, const char *what);

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
