/* Reverse-mode automatic differentiation, symbolic: em_gradients appends to
 * the graph the nodes that compute the gradients, so the executor plans,
 * frees and runs them like any other node (forward and backward in one
 * pass, one plan).
 *
 * Walk: the nodes y needs, in reverse topological order; each node that
 * lies on a path from some x to y gets the sum of its outputs' gradient
 * contributions and its op's backward adds the vector-Jacobian products for
 * its inputs. Contributions to one value are summed with a single add_n, in
 * the order they were produced (fixed, so runs are deterministic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

/* Gradient contributions per value, gathered before they are summed. */
typedef struct contrib {
  em_var *v;
  int n, cap;
} contrib;

static em_status contrib_add(contrib *c, em_var v) {
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 2;
    em_var *t = realloc(c->v, sizeof(em_var) * (size_t)cap);
    if (!t) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for gradient bookkeeping");
    c->v = t;
    c->cap = cap;
  }
  c->v[c->n++] = v;
  return EM_OK;
}

/* The gradient of a value: -1 when none reached it; one add_n (chunks of 16)
 * when several did. */
static em_status contrib_sum(em_graph *g, contrib *c, em_var *out) {
  *out = -1;
  if (c->n == 0) return EM_OK;
  while (c->n > 1) {
    int k = c->n < 16 ? c->n : 16;
    em_var sum;
    em_status s = em_apply(g, "add_n", c->v, k, NULL, 0, &sum, 1);
    if (s) return em_fail_context(s, "summing %d gradient contributions", k);
    memmove(c->v + 1, c->v + k, sizeof(em_var) * (size_t)(c->n - k));
    c->v[0] = sum;
    c->n -= k - 1;
  }
  *out = c->v[0];
  return EM_OK;
}

static int var_numel_is_one(const em_graph *g, em_var y) {
  const em_shape *s = &g->values[y].shape;
  for (int i = 0; i < s->ndim; i++)
    if (s->dims[i] != 1) return 0;
  return 1;
}

/* Runs one node's backward and records what it gives each input. */
static em_status backprop_node(em_graph *g, int node, contrib *grads, const unsigned char *dep) {
  /* Copy what we need: em_apply inside backward may move g->nodes. */
  em_node n = g->nodes[node];
  em_var x[16], y[8], dy[8], din[16];
  em_shape in_shapes[16], out_shapes[8];
  int any = 0;
  for (int i = 0; i < n.n_out; i++) {
    y[i] = (em_var)(n.first_value + i);
    em_status s = contrib_sum(g, &grads[y[i]], &dy[i]);
    if (s) return s;
    any |= dy[i] >= 0;
    out_shapes[i] = g->values[y[i]].shape;
  }
  if (!any) return EM_OK;
  if (n.n_in > 16) /* only the learner family's updates take more, and they have no gradient */
    return em_fail(EM_ERR_UNSUPPORTED, "op '%s' (node %d) has %d inputs: gradients flow through ops of at most 16",
                   n.op->name, node, n.n_in);
  for (int i = 0; i < n.n_in; i++) {
    x[i] = n.inputs[i];
    in_shapes[i] = g->values[x[i]].shape;
    din[i] = -1;
  }
  int wants = 0;
  for (int i = 0; i < n.n_in; i++) wants |= dep[x[i]] && !em_op_no_grad(n.op, i);
  if (!wants) return EM_OK;
  if (!n.op->backward)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "op '%s' (node %d) has no gradient, and it lies between the differentiated value and a variable "
                   "(wrap its input in em_stop_gradient if no gradient should flow there)",
                   n.op->name, node);
  em_op_args a = {.def = n.op, .attrs = n.attrs, .n_attrs = n.n_attrs, .n_in = n.n_in, .in = in_shapes,
                  .n_out = n.n_out, .out = out_shapes, .node = node};
  em_status s = n.op->backward(g, &a, x, y, dy, din);
  if (s) return em_fail_context(s, "gradient of op '%s' (node %d)", n.op->name, node);
  for (int i = 0; i < n.n_in; i++) {
    if (din[i] < 0 || !dep[x[i]] || em_op_no_grad(n.op, i)) continue;
    if (!em_shape_equal(&g->values[din[i]].shape, &in_shapes[i])) {
      char want[128], have[128];
      return em_fail(EM_ERR_INTERNAL, "op '%s' (node %d): the gradient of input %d is %s, not %s (a bug in the op)",
                     n.op->name, node, i, em_shape_str(&g->values[din[i]].shape, have, sizeof have),
                     em_shape_str(&in_shapes[i], want, sizeof want));
    }
    if ((s = contrib_add(&grads[x[i]], din[i]))) return s;
  }
  return EM_OK;
}

/* dep[v] = 1 when value v is one of xs or is computed from one of them
 * along inputs that carry gradients. */
static void mark_dependents(const em_graph *g, const int *order, int n_order, const em_var *xs, int n,
                            unsigned char *dep) {
  for (int i = 0; i < n; i++) dep[xs[i]] = 1;
  for (int k = 0; k < n_order; k++) {
    const em_node *node = &g->nodes[order[k]];
    /* Only through inputs that take a gradient: what flows through a
     * no_grad input (a shape, an index, the seed's `like`) is not on a path. */
    int d = 0;
    for (int i = 0; i < node->n_in; i++)
      d |= dep[node->inputs[i]] && !(node->kind == EM_NODE_OP && em_op_no_grad(node->op, i));
    if (d)
      for (int i = 0; i < node->n_out; i++) dep[node->first_value + i] = 1;
  }
}

static em_status zero_gradient(em_graph *g, em_var x, em_var *out) {
  em_shape sh = g->values[x].shape;
  if (em_shape_numel(&sh) < 0) return em_apply1(g, "zeros_like", x, out);
  em_attr attrs[2] = {em_attr_is("shape", sh.dims, sh.ndim), em_attr_i("dtype", sh.dtype)};
  return em_apply(g, "zeros", NULL, 0, attrs, 2, out, 1);
}

EM_API em_status em_gradients(em_graph *g, em_var y, const em_var *xs, int n, em_var *grads) {
  if (!g || (n && (!xs || !grads)) || n < 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_gradients: NULL argument");
  em_status s = em_graph_check_var(g, y, "em_gradients (y)");
  for (int i = 0; i < n && !s; i++) s = em_graph_check_var(g, xs[i], "em_gradients (x)");
  if (s) return s;
  const em_shape *ys = &g->values[y].shape;
  if (!em_dtype_is_float(ys->dtype) || !var_numel_is_one(g, y)) {
    char b[128];
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_gradients: y must be a float value with one element, not %s",
                   em_shape_str(ys, b, sizeof b));
  }
  int *order = NULL, n_order = 0;
  if ((s = em_graph_schedule(g, &y, 1, &order, &n_order))) return s;

  size_t n_values = g->n_values; /* values created below need no gradient slots */
  unsigned char *dep = calloc(n_values, 1);
  contrib *c = calloc(n_values, sizeof *c);
  if (!dep || !c) {
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for gradients over %zu values", n_values);
    goto done;
  }
  mark_dependents(g, order, n_order, xs, n, dep);

  em_var seed;
  if ((s = em_apply1(g, "ones_like", y, &seed)) || (s = contrib_add(&c[y], seed))) goto done;
  for (int k = n_order - 1; k >= 0 && !s; k--) {
    int node = order[k];
    if (g->nodes[node].kind != EM_NODE_OP) continue;
    int on_path = 0;
    for (int i = 0; i < g->nodes[node].n_out; i++) on_path |= dep[g->nodes[node].first_value + i];
    if (on_path) s = backprop_node(g, node, c, dep);
  }
  for (int i = 0; i < n && !s; i++) {
    /* An x may appear twice in xs: sum once, reuse the result. */
    if ((s = contrib_sum(g, &c[xs[i]], &grads[i]))) break;
    if (grads[i] >= 0) {
      c[xs[i]].n = 1;
      c[xs[i]].v[0] = grads[i];
      continue;
    }
    /* Not reached: a zero gradient of x's shape and dtype, made without
     * reading x when its shape is static (so x need not be fed). */
    if ((s = zero_gradient(g, xs[i], &grads[i]))) break;
  }
done:
  if (c)
    for (size_t i = 0; i < n_values; i++) free(c[i].v);
  free(c);
  free(dep);
  free(order);
  return s;
}
