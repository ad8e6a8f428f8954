/* mlp_profile: where one training step of bench_mlp's MLP spends its time,
 * op by op.
 *
 * The executor's plan (em_exec_describe: one line per step, naming the
 * node) is replayed one step at a time: each step's node becomes a graph of
 * its own (inputs of the same dtypes and shapes, the same op and the same
 * attributes), fed the values that step saw in a real run, and run many
 * times. The sum over the steps is set against the whole executor run (the
 * difference is what the executor itself costs), and the SGD update is
 * timed on its own.
 *
 * Reading a node's op and attributes needs the engine's internal graph
 * layout (engine/graph_internal.h): this tool only reads it. It is built by
 * bench/run.sh with the engine's include paths.
 *
 * Output: "R prof.<batch>.* ..." lines (see bench_common.h). */
#include "graph_internal.h"
#include "mlp_graph.h"

#define MAX_STEPS 256

/* The node index of every plan step, from the executor's listing. */
static int plan_nodes(const em_exec *e, int *nodes) {
  size_t len = em_exec_describe(e, NULL, 0);
  char *buf = malloc(len + 1);
  if (!buf) exit(1);
  em_exec_describe(e, buf, len + 1);
  int n = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    int st, node;
    if (sscanf(line, " %d node %d", &st, &node) == 2 && n < MAX_STEPS) nodes[n++] = node;
  }
  free(buf);
  return n;
}

/* Median microseconds per run of e over `batches` batches of `calls` runs. */
static double time_exec(em_exec *e, const em_feed *f, int nf, int n_out, int batches, int calls) {
  em_tensor *out[8];
  double t[32];
  for (int i = 0; i < 3; i++) {
    BC_CHECK(em_exec_run(e, f, nf, out));
    for (int k = 0; k < n_out; k++) em_tensor_release(out[k]);
  }
  for (int b = 0; b < batches; b++) {
    double t0 = bc_now();
    for (int i = 0; i < calls; i++) {
      BC_CHECK(em_exec_run(e, f, nf, out));
      for (int k = 0; k < n_out; k++) em_tensor_release(out[k]);
    }
    t[b] = (bc_now() - t0) / calls * 1e6;
  }
  return bc_median(t, batches);
}

/* The value v of m's graph as seen in a run: an op's output from vals, or a
 * leaf's tensor (a fed input or a parameter's storage). */
static em_tensor *value_of(const mlp *m, em_var v, em_tensor **vals, em_tensor *x, em_tensor *l) {
  if (v == m->x) return x;
  if (v == m->labels) return l;
  if (vals[v]) return vals[v];
  const em_node *n = &m->g->nodes[m->g->values[v].node];
  return n->tensor;
}

typedef struct op_total {
  const char *name;
  double us;
  int count;
} op_total;

static void profile_batch(int64_t batch, int threads, int quick) {
  mlp m;
  mlp_build(&m, batch);
  em_tensor *x, *l;
  mlp_data(batch, 1, &x, &l);
  int nodes[MAX_STEPS], n_steps = plan_nodes(m.e, nodes);
  em_graph *g = m.g;

  /* Every value the steps produce, from one real run. */
  int n_vals = 0;
  em_var *want = malloc(sizeof *want * em_graph_value_count(g));
  em_tensor **vals = calloc(em_graph_value_count(g), sizeof *vals), **got = NULL;
  if (!want || !vals) exit(1);
  for (int s = 0; s < n_steps; s++)
    for (int k = 0; k < g->nodes[nodes[s]].n_out; k++) want[n_vals++] = (em_var)(g->nodes[nodes[s]].first_value + k);
  got = calloc((size_t)n_vals, sizeof *got);
  em_exec *all;
  BC_CHECK(em_exec_create(g, want, n_vals, em_cpu(), &all));
  em_feed feeds[2] = {{m.x, x}, {m.labels, l}};
  BC_CHECK(em_exec_run(all, feeds, 2, got));
  for (int i = 0; i < n_vals; i++) vals[want[i]] = got[i];
  em_exec_free(all);

  int batches = quick ? 3 : 7, calls = quick ? 20 : 50;
  double full = time_exec(m.e, feeds, 2, 1 + MLP_NPARAM, batches, calls / 5 > 0 ? calls / 5 : 1);
  printf("R prof.%lld.exec_us %.2f\n", (long long)batch, full);

  /* The SGD update alone (gradients from the real run). */
  {
    em_tensor *gr[MLP_NPARAM];
    for (int i = 0; i < MLP_NPARAM; i++) gr[i] = vals[m.grads[i]];
    double t[32];
    for (int b = 0; b < batches; b++) {
      double t0 = bc_now();
      for (int i = 0; i < calls; i++) mlp_sgd(&m, gr, 0.0f, threads);
      t[b] = (bc_now() - t0) / calls * 1e6;
    }
    printf("R prof.%lld.sgd_us %.2f\n", (long long)batch, bc_median(t, batches));
  }

  /* An executor run of one trivial op: the per-run fixed cost. */
  {
    em_graph *g1;
    em_var in, out;
    int64_t one[1] = {1};
    BC_CHECK(em_graph_create(&g1));
    BC_CHECK(em_input(g1, "x", EM_F32, 1, one, &in));
    BC_CHECK(em_apply(g1, "identity", &in, 1, NULL, 0, &out, 1));
    em_exec *e1;
    BC_CHECK(em_exec_create(g1, &out, 1, em_cpu(), &e1));
    em_tensor *t1;
    BC_CHECK(em_tensor_zeros(em_cpu(), EM_F32, 1, one, &t1));
    em_feed f1 = {in, t1};
    printf("R prof.%lld.exec_fixed_us %.2f\n", (long long)batch, time_exec(e1, &f1, 1, 1, batches, calls * 10));
    em_tensor_release(t1);
    em_exec_free(e1);
    em_graph_free(g1);
  }

  op_total totals[64];
  int n_totals = 0;
  double sum = 0;
  for (int s = 0; s < n_steps; s++) {
    const em_node *n = &g->nodes[nodes[s]];
    em_graph *g1;
    BC_CHECK(em_graph_create(&g1));
    em_var ins[16], outs[8];
    em_feed f[16];
    char desc[256] = "", one[64];
    for (int i = 0; i < n->n_in; i++) {
      em_tensor *t = value_of(&m, n->inputs[i], vals, x, l);
      char name[16];
      snprintf(name, sizeof name, "in%d", i);
      BC_CHECK(em_input(g1, name, em_tensor_dtype(t), em_tensor_ndim(t), em_tensor_shape(t), &ins[i]));
      f[i] = (em_feed){ins[i], t};
      snprintf(desc + strlen(desc), sizeof desc - strlen(desc), "%s%s", i ? " " : "",
               em_tensor_describe(t, one, sizeof one));
    }
    BC_CHECK(em_apply(g1, n->op->name, ins, n->n_in, n->attrs, n->n_attrs, outs, n->n_out));
    /* The attributes that tell a fused gradient op's variants apart. */
    char attrs[128] = "";
    for (int a = 0; a < n->n_attrs; a++) {
      const em_attr *at = &n->attrs[a];
      if (at->type == EM_ATTR_INT)
        snprintf(attrs + strlen(attrs), sizeof attrs - strlen(attrs), " %s=%lld", at->name, (long long)at->i);
      else if (at->type == EM_ATTR_STRING)
        snprintf(attrs + strlen(attrs), sizeof attrs - strlen(attrs), " %s=%s", at->name, at->s);
    }
    em_exec *e1;
    BC_CHECK(em_exec_create(g1, outs, n->n_out, em_cpu(), &e1));
    double us = time_exec(e1, f, n->n_in, n->n_out, batches, calls);
    sum += us;
    printf("R prof.%lld.step %d|%s|%s|%s|%.2f\n", (long long)batch, s, n->op->name, attrs[0] ? attrs + 1 : "", desc, us);
    int k = 0;
    while (k < n_totals && strcmp(totals[k].name, n->op->name)) k++;
    if (k == n_totals && n_totals < 64) totals[n_totals++] = (op_total){n->op->name, 0, 0};
    if (k < n_totals) {
      totals[k].us += us;
      totals[k].count++;
    }
    em_exec_free(e1);
    em_graph_free(g1);
  }
  printf("R prof.%lld.steps_sum_us %.2f\n", (long long)batch, sum);
  for (int k = 0; k < n_totals; k++)
    printf("R prof.%lld.op %s|%d|%.2f\n", (long long)batch, totals[k].name, totals[k].count, totals[k].us);

  for (int i = 0; i < n_vals; i++) em_tensor_release(got[i]);
  free(got);
  free(vals);
  free(want);
  em_tensor_release(x);
  em_tensor_release(l);
  mlp_free(&m);
}

int main(int argc, char **argv) {
  bc_opts o = bc_parse(argc, argv);
  int threads = bc_threads(&o);
  printf("R threads %d\n", threads);
  profile_batch(64, threads, o.quick);
  profile_batch(256, threads, o.quick);
  return 0;
}
