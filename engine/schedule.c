/* Scheduling: the nodes a set of values needs, in an order where every node
 * comes after the nodes it reads from. Node creation order is topological
 * until em_graph_replace rewires inputs, so this is a real topological sort,
 * and it is where cycles and unbound placeholders are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

/* "node 12 (op 'matmul', value 'h1')" */
static const char *node_label(const em_graph *g, int node, char *buf, size_t cap) {
  const em_node *n = &g->nodes[node];
  const char *vname = g->values[n->first_value].name;
  if (n->kind == EM_NODE_OP)
    snprintf(buf, cap, "node %d (op '%s'%s%s%s)", node, n->op->name, vname ? ", value '" : "", vname ? vname : "",
             vname ? "'" : "");
  else
    snprintf(buf, cap, "node %d (%s '%s')", node, em_node_kind_name(n->kind), n->name ? n->name : "");
  return buf;
}

/* Describes the cycle that runs from `node` back to itself along `parent`
 * links of the DFS stack. */
static em_status cycle_error(const em_graph *g, const int *stack, int depth, int node) {
  char msg[1024], one[160];
  size_t len = 0;
  int start = depth - 1;
  while (start > 0 && stack[start] != node) start--;
  for (int i = start; i < depth && len < sizeof msg; i++)
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s -> ", node_label(g, stack[i], one, sizeof one));
  if (len < sizeof msg) snprintf(msg + len, sizeof msg - len, "%s", node_label(g, node, one, sizeof one));
  return em_fail(EM_ERR_INVALID_ARGUMENT,
                 "the graph has a cycle: %s (a value may not depend on itself; check em_graph_replace calls)", msg);
}

em_status em_graph_schedule(const em_graph *g, const em_var *roots, int n_roots, int **order_out, int *count) {
  *order_out = NULL;
  *count = 0;
  size_t nn = g->n_nodes;
  unsigned char *state = calloc(nn ? nn : 1, 1); /* 0 new, 1 on the stack, 2 scheduled */
  int *order = malloc(sizeof(int) * (nn ? nn : 1));
  int *stack = malloc(sizeof(int) * (nn ? nn : 1));
  int *next_in = malloc(sizeof(int) * (nn ? nn : 1)); /* per stacked node: the next input to visit */
  if (!state || !order || !stack || !next_in) {
    free(state), free(order), free(stack), free(next_in);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to schedule %zu nodes", nn);
  }
  em_status s = EM_OK;
  int n_order = 0;
  for (int r = 0; r < n_roots && !s; r++) {
    if ((s = em_graph_check_var(g, roots[r], "scheduling"))) break;
    int root = g->values[roots[r]].node;
    if (state[root] == 2) continue;
    int depth = 0;
    stack[depth] = root;
    next_in[depth++] = 0;
    state[root] = 1;
    while (depth > 0 && !s) {
      int node = stack[depth - 1];
      const em_node *n = &g->nodes[node];
      if (n->kind == EM_NODE_PLACEHOLDER) {
        char one[160];
        s = em_fail(EM_ERR_INVALID_ARGUMENT,
                    "%s is never bound: the outputs depend on it (bind it with em_graph_replace first)",
                    node_label(g, node, one, sizeof one));
        break;
      }
      if (next_in[depth - 1] < n->n_in) {
        int child = g->values[n->inputs[next_in[depth - 1]++]].node;
        if (state[child] == 1) s = cycle_error(g, stack, depth, child);
        else if (state[child] == 0) {
          state[child] = 1;
          stack[depth] = child;
          next_in[depth++] = 0;
        }
        continue;
      }
      state[node] = 2;
      order[n_order++] = node;
      depth--;
    }
  }
  free(state), free(stack), free(next_in);
  if (s) {
    free(order);
    return s;
  }
  *order_out = order;
  *count = n_order;
  return EM_OK;
}
