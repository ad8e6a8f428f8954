/* Executors (include/ember/exec.h). A plan is the topological schedule of
 * the op nodes the outputs need, with, per value, the step after which no
 * one reads it. A run infers concrete shapes step by step (the dynamic axis
 * is known once the inputs are fed), allocates each output, writes into an
 * input's buffer instead when the op allows it and that input dies at this
 * step, and frees every intermediate after its last reader, so buffers are
 * recycled (on a device through its caching allocator) and the peak stays low.
 *
 * Devices: an op runs through its `gpu` member on a CUDA device when it has
 * one; otherwise (no member, or it answers EM_ERR_USE_CPU: the device's plan
 * for the kernel's module is the CPU) its `cpu` member runs on host copies,
 * and the step is marked (em_exec_describe, EMBER_LOG=dispatch). Parameters,
 * states and constants stay on the device between runs (resident copies,
 * tensor_internal.h): a run copies its feeds, the values it delivers to the
 * host, parameters that changed since the last run, and the host-copy
 * fallbacks; em_exec_stats counts every copy. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_graph.h"
#include "devcheck.h"
#include "error.h"
#include "exec_graphs.h"
#include "graph_internal.h"
#include "kernel_cache.h"
#include "memory.h"
#include "runtime.h"
#include "tensor_internal.h"

#define API __attribute__((visibility("default")))

/* --------------------------------------------------------------- threads --- */

static atomic_int g_threads; /* 0: the default */

/* The CPUs this process may run on (the affinity mask honours taskset and container
 * cpusets, which the online count would oversubscribe), else the online CPUs; at most 256.
 * Counted once: the call costs a system call, and every parallel loop asks. */
static int allowed_cpus(void) {
  static atomic_int cached;
  int n = atomic_load(&cached);
  if (n > 0) return n;
  cpu_set_t set;
  long c = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (c <= 0) c = sysconf(_SC_NPROCESSORS_ONLN);
  n = c > 0 ? (int)(c < 256 ? c : 256) : 1;
  atomic_store(&cached, n);
  return n;
}

/* The default count: OMP_NUM_THREADS when it holds a count from 1 to 4096 (as OpenMP reads
 * it: "4", " 4 ", or the first level of "4,2"; anything else is ignored, as libgomp does),
 * else allowed_cpus(). The variable is read at each call, so a change takes effect. */
static int default_threads(void) {
  const char *env = getenv("OMP_NUM_THREADS");
  if (env) {
    char *end;
    long v = strtol(env, &end, 10); /* skips leading blanks */
    while (end != env && (*end == ' ' || *end == '\t')) end++;
    if (end != env && v >= 1 && v <= 4096 && (*end == '\0' || *end == ',')) return (int)v;
  }
  return allowed_cpus();
}

int em_cpu_threads(void) {
  int n = atomic_load(&g_threads);
  return n > 0 ? n : default_threads();
}

API em_status em_set_num_threads(int n) {
  if (n > 4096) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_set_num_threads: %d threads is not sensible", n);
  /* OpenBLAS is not told: its own threading splits products differently per
   * thread count and changes the bits (measured: OpenBLAS 0.3.21, sgemm
   * 300x500x400, 1 vs 2 threads). Ops run it single-threaded inside their
   * own fixed tiling (ops/linalg.c). */
  atomic_store(&g_threads, n > 0 ? n : 0);
  return EM_OK;
}

API int em_get_num_threads(void) { return em_cpu_threads(); }

/* ------------------------------------------------------------------ plan --- */

/* A step is placed when the executor is created: its device and stream are
 * fixed there. Its kernel handles are resolved on its first launch of each
 * kernel (the op's gpu member names its kernels only as it launches them)
 * and kept in the step's cache: later runs launch with no lookup by name
 * and no lock (em_exec_stats.kernel_lookups counts the lookups). */
typedef struct step {
  int node;
  int inplace_from;           /* the input whose buffer output 0 may take, or -1 */
  em_device dev;              /* where it runs: the executor's device */
  em_stream *stream;          /* the stream its gpu member launches on (NULL: the device's default) */
  em_kernel_cache kernels;    /* CUDA: the kernel handles its gpu member resolved */
  char *host_why;             /* CUDA: why the step runs on host copies (NULL: it ran on the device, or has not run) */
  em_op_report road;          /* CUDA: the library its gpu member called, or why not (em_op_report_path) */
  int writes;                 /* its op writes some inputs in place on every run (em_op_def.writes_input) */
  em_var out0;                /* where output 0 goes: the node's own value, or the last fused op's */
  em_post_op *post;           /* the ops fused into it (plan_fusions), or NULL */
  int fused_into;             /* a fused op's step: the convolution's step that runs it; else -1 */
  int logged;                 /* EMBER_LOG=dispatch has said so (once per executor) */
} step;

struct em_exec {
  em_graph *g;
  uint64_t graph_version;
  em_device dev;
  int training;
  em_mode mode;
  int tf32;                  /* em_exec_set_tf32 */
  uint64_t runs;
  int n_outputs;
  em_var *outputs;
  int n_steps;
  step *steps;
  int *leaf_nodes;            /* inputs, parameters, states, constants the plan reads */
  int n_leaves;
  em_tensor **held;           /* per leaf, CUDA: the host value whose device copy this executor holds (retained) */
  int *last_use;              /* per value: the last step that reads it; -1 if none */
  unsigned char *is_output;   /* per value */
  unsigned char *cl_may;      /* per value: may live channels-last (op.h's layout: every reader takes it) */
  int cl_off;                 /* EMBER_CHANNELS_LAST=0: every value contiguous */
  size_t n_values;
  /* A step's per-input arrays, sized at plan time for the step with the most
   * inputs (a learner's update takes a whole parameter set), reused by every
   * step of every run. */
  int max_in;
  em_shape *sc_shapes;
  em_tensor **sc_in, **sc_copies, **sc_hin, **sc_lay;
  unsigned char *sc_wr;       /* per input: the step writes it in place in this run */
  em_exec_stats stats;
  /* CUDA graphs (exec_graphs.c): NULL when off or on the CPU. */
  em_exec_graphs *graphs;
  int graphs_on;              /* em_exec_set_graphs (a CPU executor remembers it, and runs as before) */
  int capturing;              /* this run is being captured: steps check the capture after each launch */
  /* CUDA, a plan with dropout: 8 bytes of device memory holding `runs` for the run under way
   * (op.h's step_dev), written on the run's stream before each eager run and before each
   * capture or replay (step_upload), so a replayed dropout draws this run's mask. */
  void *step_dev;
};

static int node_is_leaf(const em_node *n) { return n->kind != EM_NODE_OP; }

/* Steps whose op writes inputs in place on every run (a learner's update of
 * its parameters and state) must be the last to read those values: a later
 * reader would see the updated value in this run. Marks the steps. */
static em_status check_writers(em_exec *e) {
  const em_graph *g = e->g;
  for (int st = 0; st < e->n_steps; st++) {
    const em_node *n = &g->nodes[e->steps[st].node];
    if (!n->op->writes_input) continue;
    em_op_args a = {.def = n->op, .attrs = n->attrs, .n_attrs = n->n_attrs, .n_in = n->n_in, .n_out = n->n_out};
    for (int i = 0; i < n->n_in; i++) {
      if (!n->op->writes_input(&a, i)) continue;
      e->steps[st].writes = 1;
      em_var x = n->inputs[i];
      if (e->last_use[x] <= st) continue;
      const em_node *later = &g->nodes[e->steps[e->last_use[x]].node];
      const char *name = g->nodes[g->values[x].node].name;
      return em_fail(EM_ERR_INVALID_ARGUMENT,
                     "em_exec_create: node %d (op '%s') updates value %d ('%s') in place, but node %d (op '%s') reads "
                     "it later in the plan (a second update of the value, or a node that reads the update's output)",
                     e->steps[st].node, n->op->name, (int)x, name ? name : "", e->steps[e->last_use[x]].node,
                     later->op->name);
    }
  }
  return EM_OK;
}

/* Moves the nodes that write inputs in place on every run (writes_input: a
 * learner's update) and whose outputs no other node of the plan reads to
 * the end of the order, keeping their relative order. The schedule is a
 * depth-first walk from the outputs, so with two learners the first one's
 * update could come before a gradient of the second's that reads the first
 * one's parameters (a layer's weight is read by the gradients of the layers
 * below it); nothing depends on these nodes, so any later place is valid. */
static em_status defer_writers(const em_graph *g, int *order, int n_order) {
  unsigned char *read = calloc(g->n_values ? g->n_values : 1, 1);
  int *tail = malloc(sizeof(int) * (size_t)(n_order ? n_order : 1));
  if (!read || !tail) {
    free(read), free(tail);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a plan of %d nodes", n_order);
  }
  for (int k = 0; k < n_order; k++) {
    const em_node *n = &g->nodes[order[k]];
    for (int i = 0; i < n->n_in; i++) read[n->inputs[i]] = 1;
  }
  int kept = 0, n_tail = 0;
  for (int k = 0; k < n_order; k++) {
    const em_node *n = &g->nodes[order[k]];
    int defer = !node_is_leaf(n) && n->op->writes_input;
    for (int v = 0; defer && v < n->n_out; v++) defer = !read[n->first_value + v];
    if (defer) tail[n_tail++] = order[k];
    else order[kept++] = order[k];
  }
  memcpy(order + kept, tail, sizeof(int) * (size_t)n_tail);
  free(read), free(tail);
  return EM_OK;
}

/* Fusions (CPU; on CUDA devices gemm -> gelu, gpu_fusion below): a convolution whose output only relu or clip reads, or only x * sigmoid(x)
 * (a sigmoid of it and a mul of the two, EfficientNet's SiLU), runs those ops itself as it
 * writes its output (op.h's em_post_op: x * sigmoid(x) as oneDNN's post-op in fast mode, else
 * the ops' own kernels right after), saving a step and, for x * sigmoid(x), passes over the
 * tensor. The fused steps are skipped;
 * the convolution's output goes to the last one's value. Only where the intermediate values
 * are read by nothing else and handed to nobody (outputs, gradients). */
static int is_op(const em_node *n, const char *name) { return n->kind == EM_NODE_OP && !strcmp(n->op->name, name); }

/* CUDA, fast mode (portable mode at creation plans none; a switch to it later is still exact,
 * the op then applying the fused op with its own kernel: ops/linalg.c): an f32 gemm whose
 * output only a gelu with approximate "tanh" reads runs the gelu itself, as cuBLASLt's GELU
 * epilogue (the tanh form: observed on an H200, cuBLASLt 13.1.0; tests/fakecublas/README.md) where cuBLASLt takes the
 * product, else with the gelu op's kernel right after. Relu is not fused: cuBLASLt's would
 * turn a NaN into 0 (ops/linalg_gpu.c). */
static int gpu_fusion(const em_exec *e, const em_node *n, const em_node *tail) {
  if (e->mode != EM_MODE_FAST || !is_op(n, "gemm") || !is_op(tail, "gelu")) return 0;
  em_op_args ta = {.def = tail->op, .attrs = tail->attrs, .n_attrs = tail->n_attrs};
  return !strcmp(em_attr_str(&ta, "approximate", "none"), "tanh");
}

static em_status plan_fusions(em_exec *e) {
  if ((e->dev.kind != EM_DEVICE_CPU && e->dev.kind != EM_DEVICE_CUDA) || e->n_steps == 0) return EM_OK;
  const int gpu = e->dev.kind == EM_DEVICE_CUDA;
  const em_graph *g = e->g;
  int *reads = calloc(e->n_values ? e->n_values : 1, sizeof(int)), *reader = malloc(sizeof(int) * (e->n_values ? e->n_values : 1));
  if (!reads || !reader) {
    free(reads), free(reader);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to plan %d steps", e->n_steps);
  }
  for (int st = 0; st < e->n_steps; st++) {
    const em_node *n = &g->nodes[e->steps[st].node];
    for (int i = 0; i < n->n_in; i++) reads[n->inputs[i]]++, reader[n->inputs[i]] = st;
  }
  em_status s = EM_OK;
  for (int c = 0; c < e->n_steps && !s; c++) {
    const em_node *conv = &g->nodes[e->steps[c].node];
    const em_var y = conv->first_value;
    if (g->values[y].shape.dtype != EM_F32 || e->is_output[y]) continue;
    em_post_op post = {0};
    int tail[2] = {-1, -1}, last = -1;
    if (gpu) { /* gemm -> gelu(tanh) */
      if (reads[y] == 1 && gpu_fusion(e, conv, &g->nodes[e->steps[reader[y]].node]))
        post.kind = EM_POST_GELU, tail[0] = last = reader[y];
    } else if (!is_op(conv, "convolution")) {
      continue;
    } else if (reads[y] == 1) { /* relu(y), clip(y) */
      const int r = reader[y];
      const em_node *n = &g->nodes[e->steps[r].node];
      if (is_op(n, "relu") || is_op(n, "clip")) {
        post.kind = is_op(n, "relu") ? EM_POST_RELU : EM_POST_CLIP;
        tail[0] = last = r;
      }
    } else if (reads[y] == 2) { /* mul(y, sigmoid(y)) or mul(sigmoid(y), y) */
      const int m = reader[y];
      const em_node *mn = &g->nodes[e->steps[m].node];
      if (is_op(mn, "mul") && mn->n_in == 2 && (mn->inputs[0] == y) != (mn->inputs[1] == y)) {
        const em_var sv = mn->inputs[0] == y ? mn->inputs[1] : mn->inputs[0];
        const em_node *sn = &g->nodes[g->values[sv].node];
        if (is_op(sn, "sigmoid") && sn->inputs[0] == y && reads[sv] == 1 && !e->is_output[sv]) {
          for (int k = 0; k < m; k++)
            if (e->steps[k].node == g->values[sv].node) tail[0] = k;
          if (tail[0] > c) post.kind = EM_POST_SWISH, tail[1] = last = m;
        }
      }
    }
    if (!post.kind || last <= c) continue;
    const em_node *u = &g->nodes[e->steps[tail[0]].node];
    post.unary = (em_op_args){.def = u->op, .attrs = u->attrs, .n_attrs = u->n_attrs, .n_in = 1, .n_out = 1,
                              .node = e->steps[tail[0]].node};
    if (!(e->steps[c].post = malloc(sizeof post))) s = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to plan %d steps", e->n_steps);
    else {
      *e->steps[c].post = post;
      e->steps[c].out0 = g->nodes[e->steps[last].node].first_value;
      for (int k = 0; k < 2; k++)
        if (tail[k] >= 0) e->steps[tail[k]].fused_into = c;
    }
  }
  free(reads), free(reader);
  return s;
}

/* Which values may live channels-last (op.h, engine/layout.c): on the CPU, an op's output 0
 * that the plan reads, only through ops that take channels-last inputs, and that is no output
 * of the executor (the caller gets contiguous tensors). Whether one does is decided per run by
 * the op that makes it (its layout member; in fast mode only). */
static void plan_layouts(em_exec *e) {
  const char *env = getenv("EMBER_CHANNELS_LAST");
  e->cl_off = env && !strcmp(env, "0");
  if (e->dev.kind != EM_DEVICE_CPU) return;
  const em_graph *g = e->g;
  for (int st = 0; st < e->n_steps; st++) {
    const em_node *n = &g->nodes[e->steps[st].node];
    if (n->op->layout && e->steps[st].out0 >= 0 && e->steps[st].fused_into < 0) e->cl_may[e->steps[st].out0] = 1;
  }
  for (int st = 0; st < e->n_steps; st++) {
    const em_node *n = &g->nodes[e->steps[st].node];
    if (e->steps[st].fused_into >= 0) continue; /* its inputs are the fused group's own */
    for (int i = 0; i < n->n_in; i++)
      if (!n->op->layout || i >= 64) e->cl_may[n->inputs[i]] = 0;
  }
  for (size_t v = 0; v < e->n_values; v++)
    if (e->is_output[v] || e->last_use[v] < 0) e->cl_may[v] = 0;
}

static em_status plan(em_exec *e) {
  em_graph *g = e->g;
  int *order, n_order;
  em_status s = em_graph_schedule(g, e->outputs, e->n_outputs, &order, &n_order);
  if (!s && (s = defer_writers(g, order, n_order))) free(order);
  if (s) return s;
  e->n_values = g->n_values;
  e->steps = calloc((size_t)(n_order ? n_order : 1), sizeof(step));
  e->leaf_nodes = malloc(sizeof(int) * (size_t)(n_order ? n_order : 1));
  e->held = calloc((size_t)(n_order ? n_order : 1), sizeof(em_tensor *));
  e->last_use = malloc(sizeof(int) * (e->n_values ? e->n_values : 1));
  e->is_output = calloc(e->n_values ? e->n_values : 1, 1);
  e->cl_may = calloc(e->n_values ? e->n_values : 1, 1);
  if (!e->steps || !e->leaf_nodes || !e->held || !e->last_use || !e->is_output || !e->cl_may) {
    free(order);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a plan of %d nodes", n_order);
  }
  for (size_t v = 0; v < e->n_values; v++) e->last_use[v] = -1;
  for (int i = 0; i < e->n_outputs; i++) e->is_output[e->outputs[i]] = 1;
  for (int k = 0; k < n_order; k++) {
    const em_node *n = &g->nodes[order[k]];
    if (node_is_leaf(n)) {
      e->leaf_nodes[e->n_leaves++] = order[k];
      continue;
    }
    if (!n->op->cpu) {
      free(order);
      return em_fail(EM_ERR_UNSUPPORTED, "op '%s' (node %d) has no CPU implementation", n->op->name, order[k]);
    }
    if (n->n_in > e->max_in) e->max_in = n->n_in;
    int st = e->n_steps++;
    e->steps[st].node = order[k];
    e->steps[st].inplace_from = -1;
    e->steps[st].out0 = n->n_out >= 1 ? (em_var)n->first_value : -1;
    e->steps[st].fused_into = -1;
    e->steps[st].dev = e->dev;
    e->steps[st].stream = NULL;
    if (e->dev.kind == EM_DEVICE_CUDA && !n->op->gpu && !(e->steps[st].host_why = strdup("no GPU implementation"))) {
      free(order);
      return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a plan of %d nodes", n_order);
    }
    for (int i = 0; i < n->n_in; i++) e->last_use[n->inputs[i]] = st;
  }
  free(order);
  size_t mi = (size_t)(e->max_in ? e->max_in : 1);
  e->sc_shapes = malloc(sizeof(em_shape) * mi);
  e->sc_in = calloc(mi, sizeof(em_tensor *));
  e->sc_copies = calloc(mi, sizeof(em_tensor *));
  e->sc_hin = calloc(mi, sizeof(em_tensor *));
  e->sc_lay = calloc(mi, sizeof(em_tensor *));
  e->sc_wr = calloc(mi, 1);
  if (!e->sc_shapes || !e->sc_in || !e->sc_copies || !e->sc_hin || !e->sc_lay || !e->sc_wr)
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a plan's step arrays (%d inputs)", e->max_in);
  em_status ws = check_writers(e);
  if (ws) return ws;
  /* In place: output 0 takes input 0's buffer when the op allows it, input 0
   * is an intermediate (never a leaf or an output: those belong to the
   * caller or the graph) read for the last time here, and read only once by
   * this node (x + x must not overwrite x while reading it). */
  for (int st = 0; st < e->n_steps; st++) {
    const em_node *n = &g->nodes[e->steps[st].node];
    if (!n->op->inplace || n->n_in < 1) continue;
    em_var x = n->inputs[0];
    if (node_is_leaf(&g->nodes[g->values[x].node]) || e->is_output[x] || e->last_use[x] != st) continue;
    int reads = 0;
    for (int i = 0; i < n->n_in; i++) reads += n->inputs[i] == x;
    if (reads == 1) e->steps[st].inplace_from = 0;
  }
  if ((s = plan_fusions(e))) return s;
  plan_layouts(e);
  e->stats.steps = e->n_steps;
  return EM_OK;
}

API em_status em_exec_set_mode(em_exec *e, em_mode mode) {
  if (!e) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_set_mode: NULL executor");
  if (mode != EM_MODE_FAST && mode != EM_MODE_PORTABLE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_set_mode: unknown mode %d (EM_MODE_FAST or EM_MODE_PORTABLE)",
                   (int)mode);
  e->mode = mode;
  return EM_OK;
}

API em_mode em_exec_get_mode(const em_exec *e) { return e ? e->mode : EM_MODE_FAST; }

API em_status em_exec_set_tf32(em_exec *e, int allow) {
  if (!e) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_set_tf32: NULL executor");
  e->tf32 = allow != 0;
  return EM_OK;
}

API int em_exec_get_tf32(const em_exec *e) { return e ? e->tf32 : 0; }

/* EMBER_TF32: "1" allows TF32, "0" or unset/empty does not. */
static em_status tf32_from_env(int *out) {
  const char *v = getenv("EMBER_TF32");
  *out = v && !strcmp(v, "1");
  if (!v || !*v || !strcmp(v, "0") || *out) return EM_OK;
  return em_fail(EM_ERR_INVALID_ARGUMENT, "EMBER_TF32=%.40s: use 1 (allow TF32) or 0 (or unset it)", v);
}

/* EMBER_CUDA_GRAPHS: "1" on, "0" or unset/empty off. Off by default: the capture path has
 * run on the libcuda double only, and it moves an executor onto its own stream. */
static em_status graphs_from_env(int *out) {
  const char *v = getenv("EMBER_CUDA_GRAPHS");
  *out = v && !strcmp(v, "1");
  if (*out || !v || !*v || !strcmp(v, "0")) return EM_OK;
  return em_fail(EM_ERR_INVALID_ARGUMENT, "EMBER_CUDA_GRAPHS=%.40s: use 1 (CUDA graphs) or 0 (the default; or unset it)",
                 v);
}

/* Graphs on or off: a CUDA executor's steps move to the device's executors'
 * stream (or back to the default stream) and its graphs are made or freed. */
static em_status graphs_switch(em_exec *e, int on) {
  e->graphs_on = on != 0;
  if (e->dev.kind != EM_DEVICE_CUDA || (on != 0) == (e->graphs != NULL)) return EM_OK;
  if (on) {
    em_status s = em_exec_graphs_create(e->dev, &e->graphs);
    if (s) return s;
  } else {
    em_exec_graphs_free(e->graphs); /* the legacy stream waits for its stream first */
    e->graphs = NULL;
  }
  for (int st = 0; st < e->n_steps; st++) e->steps[st].stream = em_exec_graphs_stream(e->graphs);
  return EM_OK;
}

API em_status em_exec_set_graphs(em_exec *e, int on) {
  if (!e) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_set_graphs: NULL executor");
  return graphs_switch(e, on);
}

API int em_exec_get_graphs(const em_exec *e) { return e ? e->graphs_on : 0; }

/* EMBER_MODE: "fast", "portable", or unset/empty (fast). */
static em_status mode_from_env(em_mode *out) {
  const char *v = getenv("EMBER_MODE");
  *out = EM_MODE_FAST;
  if (!v || !*v || !strcmp(v, "fast")) return EM_OK;
  if (!strcmp(v, "portable")) {
    *out = EM_MODE_PORTABLE;
    return EM_OK;
  }
  return em_fail(EM_ERR_INVALID_ARGUMENT, "EMBER_MODE=%.40s is not a mode: use fast or portable (or unset it)", v);
}

static em_status step_dev_alloc(em_exec *e) {
  if (e->dev.kind != EM_DEVICE_CUDA) return EM_OK;
  int any = 0;
  for (int st = 0; st < e->n_steps && !any; st++) any = e->g->nodes[e->steps[st].node].op->reads_step;
  em_status s = any ? em_malloc(e->dev, sizeof(uint64_t), &e->step_dev) : EM_OK;
  return s ? em_fail_context(s, "em_exec_create: the run counter's device copy") : EM_OK;
}

/* The run counter into its device copy, on stream st (outside any capture):
 * pageable and asynchronous, so the driver takes the value at the call and
 * later runs' writes queue behind the kernels that read this one. With
 * graphs off st is the legacy stream, where the copy is synchronous (as
 * the learners' table uploads are): only training runs pay it, since
 * dropout reads the step only then. */
static em_status step_upload(em_exec *e, em_stream *st) {
  if (!e->step_dev || !e->training) return EM_OK;
  uint64_t v = e->runs;
  em_status s = em_memcpy_h2d(e->dev, e->step_dev, &v, sizeof v, st);
  return s ? em_fail_context(s, "writing the run counter (%llu) for dropout", (unsigned long long)v) : EM_OK;
}

API em_status em_exec_create(em_graph *g, const em_var *outputs, int n, em_device dev, em_exec **out) {
  if (!g || !outputs || n <= 0 || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_create: NULL argument or no outputs");
  *out = NULL;
  for (int i = 0; i < n; i++) {
    em_status s = em_graph_check_var(g, outputs[i], "em_exec_create");
    if (s) return s;
  }
  em_status ds = em_device_check(dev);
  if (ds) return em_fail_context(ds, "em_exec_create");
  em_mode mode;
  int tf32, graphs;
  em_status ms = mode_from_env(&mode);
  if (!ms) ms = tf32_from_env(&tf32);
  if (!ms) ms = graphs_from_env(&graphs);
  if (ms) return ms;
  em_exec *e = calloc(1, sizeof *e);
  if (!e) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for an executor");
  e->mode = mode;
  e->tf32 = tf32;
  e->g = g;
  e->graph_version = g->version;
  e->dev = dev;
  e->n_outputs = n;
  e->outputs = malloc(sizeof(em_var) * (size_t)n);
  if (!e->outputs) {
    free(e);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for an executor");
  }
  memcpy(e->outputs, outputs, sizeof(em_var) * (size_t)n);
  em_status s = plan(e);
  if (!s) s = step_dev_alloc(e);
  if (!s) s = graphs_switch(e, graphs);
  if (s) {
    em_exec_free(e);
    return s;
  }
  *out = e;
  return EM_OK;
}

API void em_exec_free(em_exec *e) {
  if (!e) return;
  /* Device copies of parameters and states: the last executor's drop brings
   * the host up to date and frees them. A failure keeps the copy (and its
   * newer value, read back later), and is only logged: free cannot fail.
   * A device check that failed and was not reported yet (this executor's or
   * another's on the device) is held over the drop's reads: free cannot
   * report it, and the caller may still hold the outputs it spoils, so their
   * next read does. */
  em_exec_graphs_free(e->graphs); /* before the leaves: a pending replay still reads them */
  if (e->step_dev) em_free(e->dev, e->step_dev); /* the legacy stream waited for the executor's above */
  em_devcheck_hold_begin();
  for (int i = 0; i < e->n_leaves; i++) {
    if (!e->held[i]) continue;
    if (em_resident_drop(e->held[i], e->dev))
      em_log(EM_LOG_MEMORY, "em_exec_free: a value stays on cuda:%d: %s", e->dev.ordinal, em_last_error());
    em_tensor_release(e->held[i]);
  }
  em_devcheck_hold_end();
  for (int st = 0; st < e->n_steps; st++) free(e->steps[st].host_why), free(e->steps[st].post);
  free(e->held);
  free(e->outputs);
  free(e->steps);
  free(e->leaf_nodes);
  free(e->last_use);
  free(e->is_output);
  free(e->cl_may);
  free(e->sc_shapes);
  free(e->sc_in);
  free(e->sc_copies);
  free(e->sc_lay);
  free(e->sc_hin);
  free(e->sc_wr);
  free(e);
}

API em_status em_exec_set_training(em_exec *e, int training) {
  if (!e) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_set_training: NULL executor");
  e->training = training != 0;
  return EM_OK;
}

API em_status em_exec_set_runs(em_exec *e, uint64_t runs) {
  if (!e) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_set_runs: NULL executor");
  e->runs = runs;
  e->stats.runs = runs;
  return EM_OK;
}

API em_status em_exec_stats_get(const em_exec *e, em_exec_stats *out) {
  if (!e || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_stats_get: NULL argument");
  *out = e->stats;
  return EM_OK;
}

/* ------------------------------------------------------------------- run --- */

/* The values of one run: a tensor per value, and the byte accounting. */
typedef struct run_state {
  em_tensor **val;
  uint64_t live, peak, total;
} run_state;

static uint64_t tensor_bytes(const em_tensor *t) {
  return (uint64_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
}

static em_status bind_feed(em_exec *e, run_state *r, const em_feed *f) {
  em_graph *g = e->g;
  em_status s = em_graph_check_var(g, f->var, "em_exec_run (feed)");
  if (s) return s;
  if ((size_t)f->var >= e->n_values)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_exec_run: value %d was added to the graph after this executor was planned; it cannot be fed "
                   "here (plan a new executor)", (int)f->var);
  const em_node *n = &g->nodes[g->values[f->var].node];
  const em_shape *want = &g->values[f->var].shape;
  const char *name = n->name ? n->name : "";
  if (n->kind != EM_NODE_INPUT)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run: value %d ('%s') is a %s, not an input; only inputs are fed",
                   (int)f->var, name, em_node_kind_name(n->kind));
  if (!f->value) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run: input '%s' is fed NULL", name);
  int ok = em_tensor_dtype(f->value) == want->dtype && em_tensor_ndim(f->value) == want->ndim;
  for (int i = 0; ok && i < want->ndim; i++)
    ok = want->dims[i] < 0 || want->dims[i] == em_tensor_shape(f->value)[i];
  if (!ok) {
    char have[128], need[128];
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run: input '%s' is declared %s but fed %s", name,
                   em_shape_str(want, need, sizeof need), em_tensor_describe(f->value, have, sizeof have));
  }
  em_tensor *t = (em_tensor *)f->value;
  int same_dev = em_tensor_device(t).kind == e->dev.kind && em_tensor_device(t).ordinal == e->dev.ordinal;
  em_stream *own = e->graphs && !e->capturing ? em_exec_graphs_stream(e->graphs) : NULL;
  if (same_dev && em_tensor_is_contiguous(t)) t = em_tensor_retain(t);
  else if (own && em_tensor_device(t).kind == EM_DEVICE_CPU && em_tensor_is_contiguous(t)) {
    /* on the executor's stream, without waiting: the driver stages pageable
     * memory at the call, so the caller may reuse its tensor at once */
    em_shape sh;
    em_shape_of(f->value, &sh);
    if (!(s = em_tensor_empty(e->dev, &sh, &t)) &&
        (s = em_memcpy_h2d(e->dev, em_tensor_data(t), em_tensor_data(f->value), (size_t)tensor_bytes(t), own)))
      em_tensor_release(t);
    if (s) return em_fail_context(s, "feeding input '%s'", name);
  } else if ((s = em_tensor_to_device(f->value, e->dev, &t))) return em_fail_context(s, "feeding input '%s'", name);
  em_tensor_release(r->val[f->var]);
  r->val[f->var] = t;
  return EM_OK;
}

/* Parameters, states and constants: on the CPU their stored tensors (brought
 * up to date where a device executor wrote a newer value); on a CUDA device
 * their resident copies, held from the first run to em_exec_free and
 * uploaded only when the value changed since. */
static em_status bind_leaves(em_exec *e, run_state *r, int inputs_fed) {
  em_graph *g = e->g;
  for (int i = 0; i < e->n_leaves; i++) {
    const em_node *n = &g->nodes[e->leaf_nodes[i]];
    em_var v = (em_var)n->first_value;
    if (n->kind == EM_NODE_INPUT) {
      if (inputs_fed && !r->val[v])
        return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run: input '%s' (value %d) is needed but not fed",
                       n->name ? n->name : "", (int)v);
      continue;
    }
    em_status s = EM_OK;
    if (e->dev.kind == EM_DEVICE_CPU) {
      /* every change of a graph value makes a new version (em_parameter_set, a learner's
       * update): ops may keep forms of it between runs (em_tensor_derived) */
      em_tensor_mark_versioned(n->tensor);
      if (!(s = em_tensor_sync_host(n->tensor))) r->val[v] = em_tensor_retain(n->tensor);
    } else {
      if (!e->held[i] && !(s = em_resident_hold(n->tensor, e->dev))) {
        e->held[i] = em_tensor_retain(n->tensor);
        e->stats.resident_bytes += tensor_bytes(n->tensor);
      }
      if (!s) s = em_resident_get(n->tensor, e->dev, &r->val[v]);
    }
    if (s)
      return em_fail_context(s, "%s '%s' on %s", em_node_kind_name(n->kind), n->name ? n->name : "",
                             e->dev.kind == EM_DEVICE_CPU ? "the CPU" : "the device");
  }
  return EM_OK;
}

/* Names an output that could not be allocated: which, its shape and bytes
 * (the allocator's message says what was in use and cached). */
static em_status output_failed(em_status s, int i, const em_shape *sh) {
  char buf[160];
  return em_fail_context(s, "output %d, %s (%llu bytes)", i, em_shape_str(sh, buf, sizeof buf),
                         (unsigned long long)(em_shape_numel(sh) * (int64_t)em_dtype_size(sh->dtype)));
}

/* Runs the op's cpu member on host copies of device tensors; inputs in
 * write_back (state the op updates in place) are copied back afterwards. */
static em_status run_on_host(const em_op_args *a, em_device dev, em_tensor **in, em_tensor **out,
                             const unsigned char *write_back, em_tensor **hin) {
  em_tensor *hout[8] = {0};
  for (int i = 0; i < a->n_in; i++) hin[i] = NULL;
  em_op_args ha = *a; /* the cpu member runs on the host: its own temporaries belong there */
  ha.dev = em_cpu();
  ha.stream = NULL;
  em_status s = EM_OK;
  for (int i = 0; i < a->n_in && !s; i++) s = em_tensor_to_device(in[i], em_cpu(), &hin[i]);
  for (int i = 0; i < a->n_out && !s; i++) s = em_tensor_empty(em_cpu(), &a->out[i], &hout[i]);
  if (!s) s = em_op_call(&ha, hin, hout, a->def->cpu);
  for (int i = 0; i < a->n_out && !s; i++)
    if ((s = em_tensor_to_device(hout[i], dev, &out[i]))) s = output_failed(s, i, &a->out[i]);
  for (int i = 0; i < a->n_in && !s; i++)
    if (write_back && write_back[i])
      s = em_memcpy_h2d(dev, em_tensor_data(in[i]), em_tensor_data(hin[i]), (size_t)tensor_bytes(hin[i]), NULL);
  for (int i = 0; i < a->n_in; i++) em_tensor_release(hin[i]);
  for (int i = 0; i < a->n_out; i++) em_tensor_release(hout[i]);
  return s;
}

/* A step about to run on host copies: remembers why (em_exec_describe) and
 * says so once per executor on EMBER_LOG=dispatch. */
static void note_host_step(em_exec *e, int st, const char *why) {
  step *p = &e->steps[st];
  if (!p->host_why) p->host_why = strdup(why);
  e->stats.host_steps++;
  if (p->logged) return;
  p->logged = 1;
  const em_node *n = &e->g->nodes[p->node];
  em_log(EM_LOG_DISPATCH, "executor on cuda:%d: node %d (op '%s') runs its CPU code on host copies: %s", e->dev.ordinal,
         p->node, n->op->name, why);
}

/* Whether node n writes input i in place in this run, and whether that
 * input's value may be written (else it arrives as a private copy): batch
 * norm's statistics when training, into em_state values; a learner's update
 * (writes_input) always, into parameters and states. */
static int writes_input(const em_exec *e, const em_node *n, const em_op_args *a, int i, int *own_storage) {
  em_node_kind k = e->g->nodes[e->g->values[n->inputs[i]].node].kind;
  if (e->training && em_op_state_input(n->op, i)) {
    *own_storage = k == EM_NODE_STATE;
    return 1;
  }
  if (n->op->writes_input && n->op->writes_input(a, i)) {
    *own_storage = k == EM_NODE_STATE || k == EM_NODE_PARAM;
    return 1;
  }
  *own_storage = 0;
  return 0;
}

/* The inputs of node n whose graph storage the op updates in place in this
 * run: wr[i] = 1 (n->n_in entries). Returns 1 when there is any. */
static int state_writes(const em_exec *e, const em_node *n, const em_op_args *a, unsigned char *wr) {
  int any = 0;
  for (int i = 0; i < n->n_in; i++) {
    int own = 0;
    wr[i] = (unsigned char)(writes_input(e, n, a, i, &own) && own);
    any |= wr[i];
  }
  return any;
}

/* After an op wrote states or parameters in place: the copy it wrote (the
 * host's on the CPU, the device's on a GPU) now holds the newest value.
 * Under a CUDA graph's capture the written leaves are also noted, so that
 * each replay (which runs no host code) tells the host the same
 * (hook_written). */
static em_status states_written(const em_exec *e, const em_node *n, const unsigned char *mask) {
  for (int i = 0; i < n->n_in; i++) {
    if (!mask[i]) continue;
    int node = e->g->values[n->inputs[i]].node;
    const em_tensor *host = e->g->nodes[node].tensor;
    if (e->dev.kind == EM_DEVICE_CPU) em_tensor_host_written(host);
    else em_resident_written(host, e->dev);
    for (int l = 0; e->capturing && l < e->n_leaves; l++) {
      if (e->leaf_nodes[l] != node) continue;
      em_status s = em_exec_graphs_note_written(e->graphs, l);
      if (s) return s;
    }
  }
  return EM_OK;
}

static void release_value(run_state *r, em_var v, int counted) {
  if (!r->val[v]) return;
  if (counted) r->live -= tensor_bytes(r->val[v]);
  em_tensor_release(r->val[v]);
  r->val[v] = NULL;
}

/* Ops that update state in place (batch norm's running statistics) write
 * into em_state values only. Any other value in such a slot (a constant,
 * which may share the caller's tensor; a fed input; an op's output) is given
 * to the op as a private copy when training, so the update is dropped and
 * nobody's data changes. Writes the copies into in[] (NULL where none). */
static em_status protect_state_inputs(const em_exec *e, const em_node *n, const em_op_args *a, em_tensor **in,
                                      em_tensor **copies) {
  for (int i = 0; i < n->n_in; i++) {
    copies[i] = NULL;
    int own = 0;
    if (!writes_input(e, n, a, i, &own) || own) continue;
    em_status s = em_tensor_to_device(in[i], e->dev, &copies[i]);
    if (s) return s;
    in[i] = copies[i];
  }
  return EM_OK;
}

/* The layouts of a step's tensors (op.h's layout member): asks the op, then makes a contiguous
 * copy (in e->sc_lay, released after the step) of every channels-last input it does not take.
 * Channels-last values exist only on the CPU in fast mode; elsewhere every input is already
 * contiguous and nothing is asked. */
static em_status choose_layouts(em_exec *e, const step *p, const em_node *n, const em_op_args *a, em_tensor **in,
                                em_layout_choice *lc) {
  if (e->dev.kind != EM_DEVICE_CPU || e->mode == EM_MODE_PORTABLE || e->cl_off) return EM_OK;
  const int out_may = p->out0 >= 0 && e->cl_may[p->out0];
  /* an op computing half dtypes through f32 (engine/half.c) converts contiguous tensors */
  if (n->op->layout && !((n->op->half & EM_HALF_VIA_F32) && em_op_half_dtype(a) != EM_F32)) {
    em_status s = n->op->layout(a, in, out_may, lc);
    if (s) return s;
    if (lc->out_channels_last && !out_may && a->out[0].ndim >= 3)
      return em_fail(EM_ERR_INTERNAL, "op '%s' (node %d) asked for a channels-last output it was not allowed",
                     n->op->name, a->node);
    if (a->out[0].ndim < 3) lc->out_channels_last = 0;
  }
  for (int i = 0; i < n->n_in; i++) {
    e->sc_lay[i] = NULL;
    if (em_tensor_is_contiguous(in[i]) || (i < 64 && (lc->as_is >> i & 1u))) continue;
    em_status s = em_tensor_from_channels_last(in[i], &e->sc_lay[i]);
    if (s) return em_fail_context(s, "op '%s' (node %d): a contiguous copy of input %d", n->op->name, a->node, i);
    in[i] = e->sc_lay[i];
    e->stats.layout_copies++;
  }
  return EM_OK;
}

static em_status run_step(em_exec *e, run_state *r, int st) {
  em_graph *g = e->g;
  step *p = &e->steps[st];
  const em_node *n = &g->nodes[p->node];
  if (p->fused_into >= 0) return EM_OK; /* its convolution ran it (plan_fusions) */
  em_shape *in_shapes = e->sc_shapes, out_shapes[8];
  em_tensor **in = e->sc_in, *out[8] = {0}, **copies = e->sc_copies;
  for (int i = 0; i < n->n_in; i++) {
    copies[i] = NULL;
    in[i] = r->val[n->inputs[i]];
    em_shape_of(in[i], &in_shapes[i]);
  }
  em_op_args a = {.def = n->op, .attrs = n->attrs, .n_attrs = n->n_attrs, .n_in = n->n_in, .in = in_shapes,
                  .n_out = n->n_out, .out = out_shapes, .training = e->training, .step = e->runs,
                  .node = p->node, .dev = p->dev, .stream = p->stream, .kernels = &p->kernels,
                  .portable = e->mode == EM_MODE_PORTABLE, .tf32 = e->tf32, .post = p->post,
                  .staging = em_exec_graphs_staging(e->graphs), .step_dev = e->step_dev,
                  .captured = e->capturing};
  em_op_report road = {""};
  if (e->dev.kind == EM_DEVICE_CUDA) a.report = &road;
  memset(out_shapes, 0, sizeof out_shapes);
  em_status s = em_op_infer(&a);
  em_layout_choice lc = {0, 0};
  if (!s) s = choose_layouts(e, p, n, &a, in, &lc);
  if (!s && ((e->training && n->op->state_inputs) || p->writes)) s = protect_state_inputs(e, n, &a, in, copies);
  if (s) {
    for (int i = 0; i < n->n_in; i++) {
      em_tensor_release(copies[i]), em_tensor_release(e->sc_lay[i]);
      e->sc_lay[i] = NULL;
    }
    return s;
  }
  int from = e->steps[st].inplace_from;
  int inplace = from >= 0 && e->dev.kind == EM_DEVICE_CPU && in_shapes[from].dtype == out_shapes[0].dtype &&
                em_shape_numel(&in_shapes[from]) == em_shape_numel(&out_shapes[0]);
  /* in place keeps the buffer's layout: a channels-last output takes a channels-last input's
   * buffer of the same shape, a contiguous one a contiguous one */
  if (inplace && lc.out_channels_last)
    inplace = !em_tensor_is_contiguous(in[from]) && !memcmp(in_shapes[from].dims, out_shapes[0].dims,
                                                            sizeof(int64_t) * (size_t)out_shapes[0].ndim) &&
              in_shapes[from].ndim == out_shapes[0].ndim;
  else if (inplace) inplace = em_tensor_is_contiguous(in[from]);
  int any_states = ((e->training && n->op->state_inputs) || p->writes) && state_writes(e, n, &a, e->sc_wr);
  const unsigned char *states = any_states ? e->sc_wr : NULL;
  if (inplace && lc.out_channels_last) out[0] = em_tensor_retain(in[from]);
  else if (inplace) s = em_tensor_reshape(in[from], out_shapes[0].ndim, out_shapes[0].dims, &out[0]);
  for (int i = inplace ? 1 : 0; i < n->n_out && !s; i++)
    if (e->dev.kind == EM_DEVICE_CPU || n->op->gpu) {
      s = i == 0 && lc.out_channels_last ? em_tensor_empty_channels_last(e->dev, &out_shapes[i], &out[i])
                                         : em_tensor_empty(e->dev, &out_shapes[i], &out[i]);
      if (s) s = output_failed(s, i, &out_shapes[i]);
    }
  e->stats.channels_last_steps += lc.out_channels_last;
  if (!s) {
    if (e->dev.kind == EM_DEVICE_CPU) s = em_op_call(&a, in, out, n->op->cpu);
    else {
      uint64_t lookups = p->kernels.lookups;
      s = n->op->gpu ? em_op_call(&a, in, out, n->op->gpu) : EM_ERR_USE_CPU;
      e->stats.kernel_lookups += p->kernels.lookups - lookups;
      /* The road of this run, none included (portable mode reports none): a road of an earlier
       * run in another mode must not stay in em_exec_describe. */
      if (!s && strcmp(road.path, p->road.path)) {
        p->road = road;
        if (road.path[0])
          em_log(EM_LOG_DISPATCH, "executor on cuda:%d: node %d (op '%s'): %s", e->dev.ordinal, p->node, n->op->name,
                 road.path);
      }
      if (s == EM_ERR_USE_CPU) { /* no GPU implementation, or the device's plan for its module is the CPU */
        char why[256];
        snprintf(why, sizeof why, "%s", n->op->gpu ? em_last_error() : "no GPU implementation");
        for (int i = 0; i < n->n_out; i++) {
          em_tensor_release(out[i]);
          out[i] = NULL;
        }
        em_clear_error();
        note_host_step(e, st, why[0] ? why : "its gpu member handed it to the CPU");
        /* its copies use the legacy stream: ordered with the step's stream both ways */
        s = p->stream ? em_stream_join(e->dev, NULL, p->stream) : EM_OK;
        if (!s) s = run_on_host(&a, e->dev, in, out, states, e->sc_hin);
        if (!s && p->stream) s = em_stream_join(e->dev, p->stream, NULL);
      }
    }
  }
  if (!s && any_states) s = states_written(e, n, states);
  for (int i = 0; i < n->n_in; i++) {
    em_tensor_release(copies[i]), em_tensor_release(e->sc_lay[i]);
    e->sc_lay[i] = NULL;
  }
  if (s) {
    for (int i = 0; i < n->n_out; i++) em_tensor_release(out[i]);
    return s;
  }
  e->stats.inplace_steps += inplace;
  for (int i = 0; i < n->n_out; i++) {
    em_var v = i == 0 ? p->out0 : (em_var)(n->first_value + i);
    uint64_t b = tensor_bytes(out[i]);
    em_tensor_release(r->val[v]);
    r->val[v] = out[i];
    r->total += b;
    if (!(inplace && i == 0)) r->live += b;
  }
  if (r->live > r->peak) r->peak = r->live;
  /* Free what dies here; an in-place input's bytes now belong to output 0. */
  for (int i = 0; i < n->n_in; i++) {
    em_var x = n->inputs[i];
    if (e->last_use[x] != st || e->is_output[x] || !r->val[x]) continue;
    int leaf = node_is_leaf(&g->nodes[g->values[x].node]);
    if (inplace && i == from) {
      em_tensor_release(r->val[x]);
      r->val[x] = NULL;
    } else if (!leaf) {
      release_value(r, x, 1);
    }
  }
  return EM_OK;
}

static em_status run_plan(em_exec *e, const em_feed *feeds, int n_feeds, run_state *r) {
  if (e->graph_version != e->g->version)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_exec_run: the graph was edited (em_graph_replace, em_graph_autocast) after this executor was "
                   "planned; create a new executor");
  if (n_feeds < 0 || (n_feeds && !feeds)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run: bad feeds");
  em_status settled = em_devcheck_settle(e->dev); /* an earlier run's failed device check, if visible already */
  if (settled) return settled;
  r->val = calloc(e->n_values ? e->n_values : 1, sizeof *r->val);
  if (!r->val) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a run over %zu values", e->n_values);
  /* With CUDA graphs on, the run issues on the executor's non-blocking
   * stream: host feeds are copied there, the steps launch there, and the
   * blocks it takes and frees are its stream's (em_alloc_stream). The
   * stream waits for the legacy stream's copies (uploads of parameters,
   * feeds made there) before the steps, and the legacy stream (the
   * caller's reads, leaf outputs' copies, other executors) waits for the
   * steps after. Inside a capture the graph module orders the stream. */
  em_stream *own = e->graphs && !e->capturing ? em_exec_graphs_stream(e->graphs) : NULL;
  const void *was = own ? em_alloc_stream(own) : NULL;
  em_status s = EM_OK;
  for (int i = 0; i < n_feeds && !s; i++) s = bind_feed(e, r, &feeds[i]);
  if (!s) s = bind_leaves(e, r, 1);
  /* The device's context stays current through the steps: each launch then
   * skips its own push and pop (dispatch.c em_kernel_launch). */
  int entered = em_device_enter(e->dev);
  if (!s && own) s = em_stream_join(e->dev, own, NULL);
  /* (a capture's counter was written before it began: hook_leaves) */
  if (!s && !e->capturing) s = step_upload(e, own);
  for (int st = 0; st < e->n_steps && !s; st++) {
    s = run_step(e, r, st);
    const em_node *n = &e->g->nodes[e->steps[st].node];
    if (s) s = em_fail_context(s, "running node %d (op '%s')", e->steps[st].node, n->op->name);
    /* A capture some call of this step invalidated (a synchronisation, a
     * synchronous or pageable copy, an allocation): name the step, since the
     * end of the capture can only say that something did. */
    else if (e->capturing && em_cuda_graph_capturing(e->dev, e->steps[st].stream) != 1)
      s = em_fail(EM_ERR_UNSUPPORTED,
                  "node %d (op '%s') made a call stream capture forbids (a synchronisation, a synchronous or "
                  "pageable copy, an allocation or free of device memory), invalidating the capture",
                  e->steps[st].node, n->op->name);
  }
  if (own) {
    em_alloc_stream(was);
    em_status j = em_stream_join(e->dev, NULL, own);
    if (!s) s = j;
  }
  em_device_leave(e->dev, entered);
  e->stats.peak_bytes = r->peak;
  e->stats.total_bytes = r->total;
  return s;
}

/* A run's accounting starts: the thread's copy counters are read (a run makes
 * its copies on the calling thread) and the device's peak window restarts. */
static void run_begin(em_exec *e, em_copy_counts *mark) {
  em_copy_counts_get(mark);
  uint64_t ignored;
  (void)em_alloc_window_peak(e->dev, 1, &ignored); /* the device was checked at em_exec_create */
  e->stats.inplace_steps = 0;
  e->stats.host_steps = 0;
  e->stats.channels_last_steps = 0;
  e->stats.layout_copies = 0;
  e->stats.kernel_lookups = 0;
}

static const char *dev_name(em_device d, char *buf, size_t cap) {
  if (d.kind == EM_DEVICE_CPU) snprintf(buf, cap, "cpu");
  else snprintf(buf, cap, "cuda:%d", d.ordinal);
  return buf;
}

/* ... and ends: the copies it made, the device's memory, and a line on
 * EMBER_LOG=memory. */
static void run_end(em_exec *e, const em_copy_counts *mark, em_status result) {
  em_copy_counts now;
  em_copy_counts_get(&now);
  em_exec_stats *st = &e->stats;
  st->h2d_copies = now.copies[EM_COPY_H2D] - mark->copies[EM_COPY_H2D];
  st->h2d_bytes = now.bytes[EM_COPY_H2D] - mark->bytes[EM_COPY_H2D];
  st->d2h_copies = now.copies[EM_COPY_D2H] - mark->copies[EM_COPY_D2H];
  st->d2h_bytes = now.bytes[EM_COPY_D2H] - mark->bytes[EM_COPY_D2H];
  st->d2d_copies = now.copies[EM_COPY_D2D] - mark->copies[EM_COPY_D2D];
  st->d2d_bytes = now.bytes[EM_COPY_D2D] - mark->bytes[EM_COPY_D2D];
  em_alloc_stats a;
  if (!em_alloc_stats_get(e->dev, &a)) {
    st->device_bytes_in_use = a.bytes_in_use;
    st->device_bytes_cached = a.bytes_cached;
  }
  (void)em_alloc_window_peak(e->dev, 0, &st->device_peak_bytes);
  if (!em_log_enabled(EM_LOG_MEMORY)) return;
  char d[32];
  em_log(EM_LOG_MEMORY,
         "executor on %s, run %llu%s: intermediates peak %llu bytes; device %llu bytes in use (peak %llu this run), "
         "%llu cached, %llu held for parameters/states/constants; copies h2d %llu (%llu bytes), d2h %llu (%llu "
         "bytes), d2d %llu (%llu bytes); %d step%s on host copies",
         dev_name(e->dev, d, sizeof d), (unsigned long long)(e->runs + (result ? 1 : 0)), result ? " (failed)" : "",
         (unsigned long long)st->peak_bytes, (unsigned long long)st->device_bytes_in_use,
         (unsigned long long)st->device_peak_bytes, (unsigned long long)st->device_bytes_cached,
         (unsigned long long)st->resident_bytes, (unsigned long long)st->h2d_copies, (unsigned long long)st->h2d_bytes,
         (unsigned long long)st->d2h_copies, (unsigned long long)st->d2h_bytes, (unsigned long long)st->d2d_copies,
         (unsigned long long)st->d2d_bytes, st->host_steps, st->host_steps == 1 ? "" : "s");
}

static void run_free(em_exec *e, run_state *r) {
  if (!r->val) return;
  for (size_t v = 0; v < e->n_values; v++) em_tensor_release(r->val[v]);
  free(r->val);
}

/* A run's results for v: computed values are handed over; a leaf (parameter,
 * state, constant, fed input) is copied, so the caller never holds the
 * graph's own storage and CPU and GPU executors behave alike. */
static em_status output_of(em_exec *e, run_state *r, em_var v, em_tensor **out) {
  if (!node_is_leaf(&e->g->nodes[e->g->values[v].node])) {
    *out = em_tensor_retain(r->val[v]);
    return EM_OK;
  }
  return em_tensor_to_device(r->val[v], e->dev, out);
}

/* One run of the plan handing back every output (new references), or none
 * on failure; capturing: inside a CUDA graph capture (exec_graphs.c). */
static em_status plan_fetch(em_exec *e, const em_feed *feeds, int n_feeds, int capturing, em_tensor **outputs) {
  run_state r = {0};
  e->capturing = capturing;
  em_status s = run_plan(e, feeds, n_feeds, &r);
  e->capturing = 0;
  for (int i = 0; i < e->n_outputs; i++) outputs[i] = NULL;
  for (int i = 0; i < e->n_outputs && !s; i++) s = output_of(e, &r, e->outputs[i], &outputs[i]);
  if (s)
    for (int i = 0; i < e->n_outputs; i++) {
      em_tensor_release(outputs[i]);
      outputs[i] = NULL;
    }
  run_free(e, &r);
  return s;
}

static em_status hook_run(void *ctx, const em_feed *feeds, int n_feeds, int capturing, em_tensor **outputs) {
  return plan_fetch(ctx, feeds, n_feeds, capturing, outputs);
}

/* Outside a capture: the leaves up to date on the device (bind_leaves'
 * uploads), an earlier run's failed device check reported, and where each
 * leaf lives. */
static em_status hook_leaves(void *ctx, const void **addr) {
  em_exec *e = ctx;
  em_status s = em_devcheck_settle(e->dev);
  if (s) return s;
  run_state r = {0};
  if (!(r.val = calloc(e->n_values ? e->n_values : 1, sizeof *r.val)))
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a run over %zu values", e->n_values);
  s = bind_leaves(e, &r, 0);
  for (int i = 0; i < e->n_leaves && !s; i++) {
    const em_node *n = &e->g->nodes[e->leaf_nodes[i]];
    addr[i] = n->kind == EM_NODE_INPUT ? NULL : em_tensor_data(r.val[n->first_value]);
  }
  run_free(e, &r);
  /* before a capture or a replay: the run's step for the graph's dropout
   * kernels, on the graph's stream behind the previous launch's readers */
  if (!s) s = step_upload(e, em_exec_graphs_stream(e->graphs));
  return s;
}

/* After a replay: the leaves its captured run wrote in place (a learner's
 * parameters and slots, batch norm's running statistics) now hold their
 * newest value on the device, as after the eager run's states_written: a
 * host read copies them back, and no upload goes over them. */
static void hook_written(void *ctx, const int *leaves, int n) {
  em_exec *e = ctx;
  for (int i = 0; i < n; i++) em_resident_written(e->g->nodes[e->leaf_nodes[leaves[i]]].tensor, e->dev);
}

/* Why this plan cannot be captured now (NULL: it can): what exec_graphs
 * must not put in a graph. Host steps are known once a run has met them. */
static const char *graph_refusal(const em_exec *e, char *buf, size_t cap) {
  const em_graph *g = e->g;
  for (int st = 0; st < e->n_steps; st++) {
    const step *p = &e->steps[st];
    const em_node *n = &g->nodes[p->node];
    /* Captured now, no longer refused: in-place writes of parameters and
     * states (the captured run notes them, each replay tells the host:
     * hook_written), uploads of small tables (staged in page-locked memory
     * the graph owns: em_ops_scratch_upload), dropout (its step read from
     * e->step_dev, written before each replay). */
    const char *why = p->host_why ? "runs its CPU code on host copies (host code cannot be replayed)" : NULL;
    if (why) {
      snprintf(buf, cap, "node %d (op '%s') %s", p->node, n->op->name, why);
      return buf;
    }
  }
  for (int i = 0; i < e->n_outputs; i++)
    if (node_is_leaf(&g->nodes[g->values[e->outputs[i]].node])) {
      snprintf(buf, cap, "output %d (value %d) is a leaf: its copy is made outside the plan", i, (int)e->outputs[i]);
      return buf;
    }
  return NULL;
}

/* The outputs of one run: through the executor's CUDA graphs when on,
 * else one eager run. */
static em_status run_fetch(em_exec *e, const em_feed *feeds, int n_feeds, em_tensor **outputs) {
  e->stats.graph_replayed = 0;
  if (!e->graphs) return plan_fetch(e, feeds, n_feeds, 0, outputs);
  char why[512];
  const char *refusal = graph_refusal(e, why, sizeof why);
  uint64_t config = (uint64_t)e->mode | (uint64_t)e->training << 2 | (uint64_t)e->tf32 << 3;
  em_exec_graphs_hooks h = {e, e->n_outputs, e->n_leaves, hook_run, hook_leaves, hook_written};
  int replayed = 0;
  em_status s = em_exec_graphs_run(e->graphs, &h, refusal, config, feeds, n_feeds, outputs, &replayed);
  e->stats.graph_replayed = replayed;
  em_exec_graphs_info info;
  em_exec_graphs_info_get(e->graphs, &info);
  e->stats.graph_captures = info.captures;
  e->stats.graph_replays = info.replays;
  e->stats.graphs_held = info.graphs;
  e->stats.graph_pool_bytes = info.pool_bytes;
  return s;
}

API em_status em_exec_run(em_exec *e, const em_feed *feeds, int n_feeds, em_tensor **outputs) {
  if (!e || !outputs) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run: NULL argument");
  em_copy_counts mark;
  run_begin(e, &mark);
  em_status s = run_fetch(e, feeds, n_feeds, outputs);
  if (!s) e->runs++;
  e->stats.runs = e->runs;
  run_end(e, &mark, s);
  return s;
}

/* dst += src elementwise for the float and integer math dtypes (host). */
static em_status accumulate_host(void *dst, const void *src, em_dtype t, int64_t n) {
  switch (t) {
  case EM_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] += ((const float *)src)[i]; break;
  case EM_F64: for (int64_t i = 0; i < n; i++) ((double *)dst)[i] += ((const double *)src)[i]; break;
  case EM_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] += ((const int32_t *)src)[i]; break;
  case EM_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] += ((const int64_t *)src)[i]; break;
  default: return em_fail(EM_ERR_UNSUPPORTED, "accumulating %s values is not supported", em_dtype_name(t));
  }
  return EM_OK;
}

static int same_device(em_device a, em_device b) { return a.kind == b.kind && a.ordinal == b.ordinal; }

/* dst += v through the host: v and dst are brought over (when on a device),
 * added there, and dst written back. No accumulate kernel exists yet: on a
 * device this costs two copies down and one up, which em_exec_stats counts. */
static em_status accumulate_via_host(em_tensor *v, em_tensor *dst) {
  em_tensor *hv = NULL, *hd = NULL;
  int dst_on_host = em_tensor_device(dst).kind == EM_DEVICE_CPU;
  em_status s = em_tensor_to_device(v, em_cpu(), &hv);
  if (!s && !dst_on_host) s = em_tensor_to_device(dst, em_cpu(), &hd);
  em_tensor *acc = dst_on_host ? dst : hd;
  if (!s) s = accumulate_host(em_tensor_data(acc), em_tensor_data(hv), em_tensor_dtype(v), em_tensor_numel(v));
  if (!s && !dst_on_host)
    s = em_memcpy_h2d(em_tensor_device(dst), em_tensor_data(dst), em_tensor_data(hd), (size_t)tensor_bytes(hd), NULL);
  em_tensor_release(hv);
  em_tensor_release(hd);
  return s;
}

/* Stores or adds v into the caller's tensor dst (any device, contiguous).
 * A store takes one copy, in the direction it needs: device to device when
 * both are on one GPU, never a trip through the host. */
static em_status deliver(em_tensor *v, em_tensor *dst, em_run_mode mode, int index) {
  char a[128], b[128];
  if (!dst) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run_into: output %d is NULL", index);
  int same = em_tensor_dtype(v) == em_tensor_dtype(dst) && em_tensor_ndim(v) == em_tensor_ndim(dst) &&
             !memcmp(em_tensor_shape(v), em_tensor_shape(dst), sizeof(int64_t) * (size_t)em_tensor_ndim(v));
  if (!same)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run_into: output %d is %s but the tensor given is %s", index,
                   em_tensor_describe(v, a, sizeof a), em_tensor_describe(dst, b, sizeof b));
  if (!em_tensor_is_contiguous(dst))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run_into: output %d's tensor is not contiguous", index);
  if (mode == EM_RUN_ACCUMULATE) return accumulate_via_host(v, dst);
  size_t bytes = (size_t)tensor_bytes(v);
  em_device vd = em_tensor_device(v), dd = em_tensor_device(dst);
  if (dd.kind == EM_DEVICE_CPU) return em_tensor_to_host(v, em_tensor_data(dst), bytes); /* one copy down (or a memcpy) */
  if (em_tensor_is_contiguous(v)) {
    if (vd.kind == EM_DEVICE_CPU) return em_memcpy_h2d(dd, em_tensor_data(dst), em_tensor_data(v), bytes, NULL);
    if (same_device(vd, dd)) return em_memcpy_d2d(dd, em_tensor_data(dst), em_tensor_data(v), bytes, NULL);
  }
  /* Another GPU (or a strided value): through the host. */
  em_tensor *hv = NULL;
  em_status s = em_tensor_to_device(v, em_cpu(), &hv);
  if (!s) s = em_memcpy_h2d(dd, em_tensor_data(dst), em_tensor_data(hv), bytes, NULL);
  em_tensor_release(hv);
  return s;
}

API em_status em_exec_run_into(em_exec *e, const em_feed *feeds, int n_feeds, em_tensor *const *outputs,
                               em_run_mode mode) {
  if (!e || !outputs) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run_into: NULL argument");
  if (mode != EM_RUN_STORE && mode != EM_RUN_ACCUMULATE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_exec_run_into: unknown mode %d", (int)mode);
  em_copy_counts mark;
  run_begin(e, &mark);
  em_status s;
  if (e->graphs) { /* the graph's outputs, then delivered as an eager run's */
    em_tensor *got[64] = {0}, **v = e->n_outputs <= 64 ? got : calloc((size_t)e->n_outputs, sizeof *v);
    if (!v) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for %d outputs", e->n_outputs);
    s = run_fetch(e, feeds, n_feeds, v);
    for (int i = 0; i < e->n_outputs && !s; i++) s = deliver(v[i], outputs[i], mode, i);
    for (int i = 0; i < e->n_outputs; i++) em_tensor_release(v[i]);
    if (v != got) free(v);
  } else {
    run_state r = {0};
    e->stats.graph_replayed = 0;
    s = run_plan(e, feeds, n_feeds, &r);
    for (int i = 0; i < e->n_outputs && !s; i++) s = deliver(r.val[e->outputs[i]], outputs[i], mode, i);
    run_free(e, &r);
  }
  if (!s) e->runs++;
  e->stats.runs = e->runs;
  run_end(e, &mark, s);
  return s;
}

API size_t em_exec_describe(const em_exec *e, char *buf, size_t cap) {
  if (!e) return 0;
  size_t len = 0;
  char one[160];
#define PUT(...) len += (size_t)snprintf(buf && len < cap ? buf + len : NULL, buf && len < cap ? cap - len : 0, __VA_ARGS__)
  char d[32];
  PUT("plan: %d steps, %d leaves, %d outputs, device %s\n", e->n_steps, e->n_leaves, e->n_outputs,
      dev_name(e->dev, d, sizeof d));
  for (int st = 0; st < e->n_steps; st++) {
    const em_node *n = &e->g->nodes[e->steps[st].node];
    PUT("%4d  node %d %s(", st, e->steps[st].node, n->op->name);
    for (int i = 0; i < n->n_in; i++) PUT("%s%d", i ? ", " : "", (int)n->inputs[i]);
    PUT(") -> ");
    for (int i = 0; i < n->n_out; i++)
      PUT("%s%d:%s", i ? ", " : "", n->first_value + i, em_shape_str(&e->g->values[n->first_value + i].shape, one, sizeof one));
    if (e->steps[st].inplace_from >= 0) PUT("  [in place of %d]", (int)n->inputs[e->steps[st].inplace_from]);
    if (e->steps[st].host_why) PUT("  [on host copies: %s]", e->steps[st].host_why);
    else if (e->steps[st].road.path[0]) PUT("  [%s]", e->steps[st].road.path);
    if (e->steps[st].fused_into >= 0) PUT("  [fused into step %d]", e->steps[st].fused_into);
    if (e->steps[st].post) PUT("  [output 0 is %d: runs the fused steps]", (int)e->steps[st].out0);
    PUT("\n");
  }
  if (e->graphs_on) {
    em_exec_graphs_info gi;
    em_exec_graphs_info_get(e->graphs, &gi);
    const char *why = e->dev.kind == EM_DEVICE_CPU ? "CUDA graphs need a CUDA device: runs stay eager"
                                                   : em_exec_graphs_why(e->graphs);
    PUT("graphs: on, %d held (pools %llu bytes), %llu captured, %llu replays, %llu eager runs, %llu failed captures%s%s\n",
        gi.graphs, (unsigned long long)gi.pool_bytes, (unsigned long long)gi.captures, (unsigned long long)gi.replays,
        (unsigned long long)gi.eager_runs, (unsigned long long)gi.capture_failures, why[0] ? "; eager: " : "", why);
  }
#undef PUT
  return len;
}
