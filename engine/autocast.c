/* Mixed precision as a graph pass (em_graph_autocast, graph.h): the products and convolutions
 * of a graph run in f16 or bf16 while everything else stays f32, the policy of PyTorch's
 * autocast and of NVIDIA's mixed-precision training recipe (Micikevicius et al., 2018):
 * the ops that gain from tensor cores take half inputs and accumulate in f32; softmax,
 * losses, norms, reductions and the element-wise ops keep f32's range.
 *
 * Each converted node N (matmul, gemm, convolution, convolution_transpose with f32 inputs)
 * becomes three parts:
 *
 *   cast(x_i -> half) for each float input   the new nodes, one per input slot
 *   N' = the op on the half inputs          a new node: half output (engine/half.c)
 *   N  = cast(N' -> f32)                    the old node, rewritten in place
 *
 * N keeps its value (the same em_var, name and f32 dtype), so every consumer, every fetch
 * and every handle the caller holds is untouched. A parameter used by several ops gets one
 * cast per use: a half value with one consumer never needs its gradients summed in half, and
 * the gradient flowing back through each cast arrives in f32, where autodiff sums the uses
 * of the parameter (f32 master weights: the learner sees f32 parameters and gradients). */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

#define API __attribute__((visibility("default")))

/* The ops the pass converts: the public ops that compute half through f32 (op.h). */
static int converts(const em_graph *g, const em_node *n) {
  if (n->kind != EM_NODE_OP || !(n->op->half & EM_HALF_VIA_F32) || n->op->name[0] == '_' || n->n_out != 1) return 0;
  if (g->values[n->first_value].shape.dtype != EM_F32) return 0;
  for (int i = 0; i < n->n_in; i++) {
    em_dtype t = g->values[n->inputs[i]].shape.dtype;
    if (t == EM_F64 || t == EM_F16 || t == EM_BF16) return 0; /* f64 on purpose, or half already */
  }
  return 1;
}

/* Converts node `id` as the header comment says. */
static em_status convert(em_graph *g, int id, em_dtype to) {
  const em_node *n = &g->nodes[id];
  const int n_in = n->n_in;
  em_var in_few[8], *in = n_in <= 8 ? in_few : malloc(sizeof *in * (size_t)n_in);
  if (!in) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_graph_autocast: no memory for node %d's inputs", id);
  em_status s = EM_OK;
  const em_attr to_half = em_attr_i("to", to), to_f32 = em_attr_i("to", EM_F32);
  for (int i = 0; i < n_in && !s; i++) {
    in[i] = g->nodes[id].inputs[i];
    if (g->values[in[i]].shape.dtype == EM_F32) s = em_apply(g, "cast", &in[i], 1, &to_half, 1, &in[i], 1);
  }
  /* em_apply may move g->nodes: the node is read through its index from here on */
  em_var half_out = -1;
  if (!s)
    s = em_apply(g, g->nodes[id].op->name, in, n_in, g->nodes[id].attrs, g->nodes[id].n_attrs, &half_out, 1);
  em_attr *cast_attrs = NULL;
  em_var *cast_in = NULL;
  if (!s && (em_attrs_copy(&to_f32, 1, &cast_attrs) || !(cast_in = malloc(sizeof *cast_in))))
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "em_graph_autocast: no memory for node %d's cast", id);
  if (!s) {
    em_node *m = &g->nodes[id];
    em_attrs_free(m->attrs, m->n_attrs);
    free(m->inputs);
    m->op = em_op_find("cast");
    m->attrs = cast_attrs;
    m->n_attrs = 1;
    cast_in[0] = half_out;
    m->inputs = cast_in;
    m->n_in = 1;
    g->version++; /* executors planned before read the node's old inputs: they must refuse to run */
  } else {
    em_attrs_free(cast_attrs, cast_attrs ? 1 : 0);
    free(cast_in);
  }
  if (in != in_few) free(in);
  return s;
}

API em_status em_graph_autocast(em_graph *g, em_dtype to, int *converted) {
  if (converted) *converted = 0;
  if (!g) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_autocast: graph is NULL");
  if (to != EM_F16 && to != EM_BF16)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_autocast: dtype %s; the products run in f16 or bf16",
                   em_dtype_name(to));
  /* The nodes the pass adds are not visited: only those that were there. */
  const size_t n_nodes = g->n_nodes;
  int done = 0;
  for (size_t i = 0; i < n_nodes; i++) {
    if (!converts(g, &g->nodes[i])) continue;
    em_status s = convert(g, (int)i, to);
    if (s)
      return em_fail_context(s, "em_graph_autocast: node %zu (op '%s'); the graph stays valid, with %d op(s) converted",
                             i, g->nodes[i].op->name, done);
    done++;
  }
  if (converted) *converted = done;
  return EM_OK;
}
