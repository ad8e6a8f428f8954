/* The ONNX op forms of opsets 13 to 18 that PyTorch's exporter writes
 * (onnx/onnx_import.c): the reductions with `axes` as an input and
 * `noop_with_empty_axes`, Split with `split` as an input and `num_outputs`,
 * Pad with `pads`, `constant_value` and `axes` as inputs, Squeeze and
 * Unsqueeze with `axes` as an input, Mish and Gelu; and two definitions
 * of newer ONNX texts the importer supplies: ReduceMax/ReduceMin over an
 * empty axis, Clip with min > max; Range of constant inputs, which
 * unoptimised exports write (GroupNorm); Einsum, lowered; the sequence ops
 * (SplitToSequence + SequenceAt is torch.split in unoptimised exports).
 *
 * Each model is built here with protobuf-c (one node, or a short chain for
 * the sequences; attribute-like inputs are initializers), serialised, read
 * back through the reader,
 * imported, and run on the CPU and on a GPU (the libcuda test double, or a
 * real driver), both in portable mode: the GPU must give the CPU's bits, and
 * the CPU must match a float64 reference computed here by plain loops from
 * ONNX's operator definitions. Refusals are checked by status and message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"
#include "onnx/onnx.pb-c.h"
#include "onnx_import.h"

#define CHECK(call)                                                   \
  do {                                                                \
    em_status s_ = (call);                                            \
    if (s_) fail_msg("%s: %s", #call, em_last_error());               \
  } while (0)

#define MAXT 8 /* inputs, outputs, attributes, initializers per model */

static int g_gpus;

/* ---------------------------------------------------- a model builder --- */

static int64_t numel(int nd, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  return n;
}

/* One node of op `op` at opset `opset` reading the f32 graph input "x" of
 * shape xdims and initializers (int64 or f32 tensors), writing n_out
 * outputs "y0".."yN". Everything lives in the struct (no allocation). */
typedef struct {
  int64_t opset;
  const char *op;
  int xnd;
  int64_t xdims[EM_MAX_DIMS];
  const char *in[MAXT]; /* node inputs; "" omits one */
  int n_in;
  int n_out;
  struct {
    const char *name;
    int is_ints, is_str;
    int64_t i;
    int64_t ints[MAXT];
    int n;
    const char *s;
  } attr[MAXT];
  int n_attr;
  struct {
    const char *name;
    int is_float, nd; /* nd 0: scalar */
    int64_t len;      /* elements of a 1-D one */
    int64_t ivals[MAXT];
    float fval;
    const float *fdata; /* a float tensor of dims fdims[0..fnd) instead of fval */
    int fnd;
    int64_t fdims[EM_MAX_DIMS];
  } init[MAXT];
  int n_init;
  /* Nodes after the main one (sequence tests): the main node then has one
   * output, `main_out`; a later node writes `out`, or when NULL the next
   * graph output y<k> (n_out counts those). */
  const char *main_out;
  struct {
    const char *op, *in[4], *out;
    int n_in, n_attr;
    const char *a_name[2];
    int64_t a_val[2];
  } next[4];
  int n_next;
} spec;

static void sp_attr_i(spec *p, const char *name, int64_t v) {
  p->attr[p->n_attr].name = name;
  p->attr[p->n_attr++].i = v;
}

static void sp_attr_s(spec *p, const char *name, const char *v) {
  p->attr[p->n_attr].name = name;
  p->attr[p->n_attr].is_str = 1;
  p->attr[p->n_attr++].s = v;
}

/* An int64 1-D initializer (n may be 0: an empty tensor). */
static void sp_ints(spec *p, const char *name, const int64_t *v, int n) {
  p->init[p->n_init].name = name;
  p->init[p->n_init].nd = 1;
  p->init[p->n_init].len = n;
  memcpy(p->init[p->n_init++].ivals, v, (size_t)n * sizeof *v);
}

static void sp_int_scalar(spec *p, const char *name, int64_t v) {
  p->init[p->n_init].name = name;
  p->init[p->n_init++].ivals[0] = v;
}

static void sp_float_scalar(spec *p, const char *name, float v) {
  p->init[p->n_init].name = name;
  p->init[p->n_init].is_float = 1;
  p->init[p->n_init++].fval = v;
}

/* The model's bytes (malloc'd) and their size. */
static uint8_t *sp_pack(const spec *p, size_t *size) {
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
  Onnx__NodeProto node = ONNX__NODE_PROTO__INIT, nx[4], *nodes[5] = {&node};
  Onnx__AttributeProto nx_attrs[4][2], *nx_attr_p[4][2];
  char *nx_in[4][4], *nx_out[4];
  Onnx__AttributeProto attrs[MAXT], *attr_p[MAXT];
  Onnx__TensorProto inits[MAXT], *init_p[MAXT];
  Onnx__ValueInfoProto vin = ONNX__VALUE_INFO_PROTO__INIT, vout[MAXT], *vin_p[1] = {&vin}, *vout_p[MAXT];
  Onnx__TypeProto tin = ONNX__TYPE_PROTO__INIT, tout[MAXT];
  Onnx__TypeProto__Tensor ttin = ONNX__TYPE_PROTO__TENSOR__INIT, ttout[MAXT];
  Onnx__TensorShapeProto shin = ONNX__TENSOR_SHAPE_PROTO__INIT;
  Onnx__TensorShapeProto__Dimension dims[EM_MAX_DIMS], *dim_p[EM_MAX_DIMS];
  char onames[MAXT][8], *out_names[MAXT], *in_names[MAXT];
  float fvals[MAXT];

  model.has_ir_version = 1, model.ir_version = 8;
  opset.domain = "", opset.has_version = 1, opset.version = p->opset;
  model.n_opset_import = 1, model.opset_import = opsets;
  model.graph = &graph;
  graph.name = "g";
  graph.n_node = 1 + (size_t)p->n_next, graph.node = nodes;
  node.op_type = (char *)p->op;
  node.name = "n";
  for (int i = 0; i < p->n_in; i++) in_names[i] = (char *)p->in[i];
  node.n_input = (size_t)p->n_in, node.input = in_names;
  for (int j = 0; j < p->n_out; j++) {
    snprintf(onames[j], sizeof onames[j], "y%d", j);
    out_names[j] = onames[j];
    vout[j] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
    tout[j] = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
    ttout[j] = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
    ttout[j].has_elem_type = 1, ttout[j].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tout[j].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tout[j].tensor_type = &ttout[j];
    vout[j].name = onames[j], vout[j].type = &tout[j];
    vout_p[j] = &vout[j];
  }
  node.n_output = (size_t)p->n_out, node.output = out_names;
  char *main_out[1] = {(char *)p->main_out};
  if (p->n_next) node.n_output = 1, node.output = main_out;
  for (int k = 0, g = 0; k < p->n_next; k++) {
    nx[k] = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    nodes[1 + k] = &nx[k];
    nx[k].op_type = (char *)p->next[k].op;
    nx[k].name = "";
    for (int i = 0; i < p->next[k].n_in; i++) nx_in[k][i] = (char *)p->next[k].in[i];
    nx[k].n_input = (size_t)p->next[k].n_in, nx[k].input = nx_in[k];
    nx_out[k] = p->next[k].out ? (char *)p->next[k].out : onames[g++];
    nx[k].n_output = 1, nx[k].output = &nx_out[k];
    for (int a = 0; a < p->next[k].n_attr; a++) {
      nx_attrs[k][a] = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
      nx_attrs[k][a].name = (char *)p->next[k].a_name[a];
      nx_attrs[k][a].has_type = 1, nx_attrs[k][a].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
      nx_attrs[k][a].has_i = 1, nx_attrs[k][a].i = p->next[k].a_val[a];
      nx_attr_p[k][a] = &nx_attrs[k][a];
    }
    nx[k].n_attribute = (size_t)p->next[k].n_attr, nx[k].attribute = nx_attr_p[k];
  }
  for (int a = 0; a < p->n_attr; a++) {
    attrs[a] = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    attrs[a].name = (char *)p->attr[a].name;
    attrs[a].has_type = 1;
    if (p->attr[a].is_ints) {
      attrs[a].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
      attrs[a].n_ints = (size_t)p->attr[a].n, attrs[a].ints = (int64_t *)p->attr[a].ints;
    } else if (p->attr[a].is_str) {
      attrs[a].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
      attrs[a].has_s = 1;
      attrs[a].s = (ProtobufCBinaryData){strlen(p->attr[a].s), (uint8_t *)p->attr[a].s};
    } else {
      attrs[a].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
      attrs[a].has_i = 1, attrs[a].i = p->attr[a].i;
    }
    attr_p[a] = &attrs[a];
  }
  node.n_attribute = (size_t)p->n_attr, node.attribute = attr_p;
  for (int k = 0; k < p->n_init; k++) {
    inits[k] = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
    inits[k].name = (char *)p->init[k].name;
    inits[k].has_data_type = 1;
    if (p->init[k].fdata) {
      inits[k].data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
      inits[k].n_dims = (size_t)p->init[k].fnd, inits[k].dims = (int64_t *)p->init[k].fdims;
      inits[k].n_float_data = (size_t)numel(p->init[k].fnd, p->init[k].fdims);
      inits[k].float_data = (float *)p->init[k].fdata;
    } else if (p->init[k].is_float) {
      fvals[k] = p->init[k].fval;
      inits[k].data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
      inits[k].n_float_data = 1, inits[k].float_data = &fvals[k];
    } else {
      inits[k].data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
      inits[k].n_dims = (size_t)p->init[k].nd, inits[k].dims = (int64_t *)&p->init[k].len;
      inits[k].n_int64_data = p->init[k].nd ? (size_t)p->init[k].len : 1;
      inits[k].int64_data = (int64_t *)p->init[k].ivals;
    }
    init_p[k] = &inits[k];
  }
  graph.n_initializer = (size_t)p->n_init, graph.initializer = init_p;
  for (int d = 0; d < p->xnd; d++) {
    dims[d] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    dims[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    dims[d].dim_value = p->xdims[d];
    dim_p[d] = &dims[d];
  }
  shin.n_dim = (size_t)p->xnd, shin.dim = dim_p;
  ttin.has_elem_type = 1, ttin.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ttin.shape = &shin;
  tin.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tin.tensor_type = &ttin;
  vin.name = "x", vin.type = &tin;
  graph.n_input = 1, graph.input = vin_p;
  graph.n_output = (size_t)p->n_out, graph.output = vout_p;

  *size = onnx__model_proto__get_packed_size(&model);
  uint8_t *buf = malloc(*size ? *size : 1);
  assert_non_null(buf);
  assert_int_equal(onnx__model_proto__pack(&model, buf), *size);
  return buf;
}

/* ------------------------------------------------- import and running --- */

/* Reads back and imports p; EM_OK or the import's status (message in
 * em_last_error). On success *g, the input var (when xv) and the output
 * vars are set. */
static em_status sp_import(const spec *p, em_graph **g, em_var *xv, em_var *outs) {
  size_t size;
  uint8_t *buf = sp_pack(p, &size);
  em_onnx_model *m;
  em_status s = em_onnx_model_from_buffer(buf, size, "test model", &m);
  free(buf);
  if (s) fail_msg("reader: %s", em_last_error());
  CHECK(em_graph_create(g));
  em_var iv[1];
  s = em_onnx_import(m, *g, NULL, iv, outs);
  em_onnx_model_free(m);
  if (xv) *xv = iv[0];
  if (s) {
    em_graph_free(*g);
    *g = NULL;
  }
  return s;
}

/* The outputs of the graph on dev (host copies, the caller releases them). */
static void run_on(em_graph *g, em_var xv, const em_var *outs, int n_out, em_device dev, const em_tensor *x,
                   em_tensor **res) {
  em_exec *e;
  CHECK(em_exec_create(g, outs, n_out, dev, &e));
  CHECK(em_exec_set_mode(e, EM_MODE_PORTABLE));
  em_feed f = {xv, x};
  em_tensor *r[MAXT];
  CHECK(em_exec_run(e, &f, 1, r));
  for (int j = 0; j < n_out; j++) {
    CHECK(em_tensor_to_device(r[j], em_cpu(), &res[j]));
    em_tensor_release(r[j]);
  }
  em_exec_free(e);
}

/* An expected output: its shape and float64 values. */
typedef struct {
  int nd;
  int64_t dims[EM_MAX_DIMS];
  double *v;
} expect;

static void check_close(const char *what, int j, const em_tensor *got, const expect *w) {
  if (em_tensor_dtype(got) != EM_F32) fail_msg("%s: output %d is %s", what, j, em_dtype_name(em_tensor_dtype(got)));
  if (em_tensor_ndim(got) != w->nd) fail_msg("%s: output %d has rank %d, want %d", what, j, em_tensor_ndim(got), w->nd);
  for (int d = 0; d < w->nd; d++)
    if (em_tensor_shape(got)[d] != w->dims[d])
      fail_msg("%s: output %d dim %d is %lld, want %lld", what, j, d, (long long)em_tensor_shape(got)[d],
               (long long)w->dims[d]);
  const float *y = em_tensor_data(got);
  for (int64_t i = 0; i < numel(w->nd, w->dims); i++) {
    double want = w->v[i];
    int ok = isfinite(want) ? fabs((double)y[i] - want) <= 1e-6 + 2e-6 * fabs(want)
                            : isnan(want) ? isnan(y[i]) : (double)y[i] == want;
    if (!ok)
      fail_msg("%s: output %d element %lld: %.9g, want %.9g", what, j, (long long)i, (double)y[i], want);
  }
}

static void check_same_bits(const char *what, int j, const em_tensor *cpu, const em_tensor *gpu) {
  int64_t n = em_tensor_numel(cpu);
  assert_int_equal(n, em_tensor_numel(gpu));
  if (memcmp(em_tensor_data(cpu), em_tensor_data(gpu), (size_t)n * sizeof(float))) {
    const float *a = em_tensor_data(cpu), *b = em_tensor_data(gpu);
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&a[i], &b[i], sizeof *a))
        fail_msg("%s: output %d element %lld: %.9g on cuda:0, %.9g on the CPU (portable mode: same bits)", what, j,
                 (long long)i, (double)b[i], (double)a[i]);
  }
}

/* Imports p, runs it with input values xv (shape p->xdims) on the CPU and
 * the GPU, and compares every output with want[]. */
static void run_and_check(const char *what, const spec *p, const double *xv, const expect *want) {
  em_graph *g;
  em_var xv_, outs[MAXT];
  if (sp_import(p, &g, &xv_, outs)) fail_msg("%s: import: %s", what, em_last_error());
  int64_t n = numel(p->xnd, p->xdims);
  float *xf = malloc((size_t)(n ? n : 1) * sizeof *xf);
  assert_non_null(xf);
  for (int64_t i = 0; i < n; i++) xf[i] = (float)xv[i]; /* xv may be NULL when n is 0 */
  em_tensor *x, *cpu[MAXT], *gpu[MAXT];
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, p->xnd, p->xdims, xf, (size_t)n * sizeof *xf, &x));
  free(xf);
  run_on(g, xv_, outs, p->n_out, em_cpu(), x, cpu);
  for (int j = 0; j < p->n_out; j++) check_close(what, j, cpu[j], &want[j]);
  if (g_gpus) {
    run_on(g, xv_, outs, p->n_out, em_cuda(0), x, gpu);
    for (int j = 0; j < p->n_out; j++) {
      check_same_bits(what, j, cpu[j], gpu[j]);
      em_tensor_release(gpu[j]);
    }
  }
  for (int j = 0; j < p->n_out; j++) em_tensor_release(cpu[j]);
  em_tensor_release(x);
  em_graph_free(g);
}

/* The import must fail with `want`, the message naming each `needle`. */
static void expect_refused(const char *what, const spec *p, em_status want, const char *n1, const char *n2) {
  em_graph *g;
  em_var outs[MAXT];
  em_status s = sp_import(p, &g, NULL, outs);
  if (s == EM_OK) {
    em_graph_free(g);
    fail_msg("%s: imported; %s expected", what, em_status_name(want));
  }
  if (s != want) fail_msg("%s: %s (%s); %s expected", what, em_status_name(s), em_last_error(), em_status_name(want));
  if (n1 && !strstr(em_last_error(), n1)) fail_msg("%s: message lacks \"%s\": %s", what, n1, em_last_error());
  if (n2 && !strstr(em_last_error(), n2)) fail_msg("%s: message lacks \"%s\": %s", what, n2, em_last_error());
}

/* x values: a fixed sequence in [lo, lo + 2) with distinct elements. */
static void fill(double *x, int64_t n, double lo) {
  for (int64_t i = 0; i < n; i++) x[i] = lo + (double)((i * 7 + 3) % 23) / 11.5;
}

/* ------------------------------------------------ the reductions' reference --- */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQ, R_N };
static const char *const reduce_op[R_N] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                           "ReduceSumSquare"};

/* ONNX's reduction r of x (shape nd/dims) over the axes in mask (bit i:
 * axis i; 0 reduces nothing: each output element is the reduction of the
 * one input element at its place), output shape per keepdims. */
static void reduce_ref(int r, int nd, const int64_t *dims, const double *x, unsigned mask, int keepdims, expect *w) {
  int64_t odims_keep[EM_MAX_DIMS], n = numel(nd, dims);
  w->nd = 0;
  for (int d = 0; d < nd; d++) {
    odims_keep[d] = mask & (1u << d) ? 1 : dims[d];
    if (!(mask & (1u << d))) w->dims[w->nd++] = dims[d];
    else if (keepdims) w->dims[w->nd++] = 1;
  }
  int64_t on = numel(nd, odims_keep);
  double *acc = calloc((size_t)on, sizeof *acc), *cnt = calloc((size_t)on, sizeof *cnt);
  w->v = calloc((size_t)on, sizeof *w->v);
  assert_true(acc && cnt && w->v);
  for (int64_t i = 0; i < n; i++) {
    /* the output element of input element i: its index with the reduced axes at 0 */
    int64_t rem = i, o = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
      int64_t id = rem % dims[d];
      rem /= dims[d];
      if (!(mask & (1u << d))) o += id * stride;
      stride *= odims_keep[d];
    }
    double v = x[i], *a = &acc[o];
    if (cnt[o] == 0) *a = r == R_PROD ? 1 : r == R_MAX ? -INFINITY : r == R_MIN ? INFINITY : 0;
    cnt[o] += 1;
    switch (r) {
    case R_SUM: case R_MEAN: case R_LOGSUM: *a += v; break;
    case R_MAX: *a = v > *a ? v : *a; break;
    case R_MIN: *a = v < *a ? v : *a; break;
    case R_PROD: *a *= v; break;
    case R_L1: *a += fabs(v); break;
    case R_L2: case R_SUMSQ: *a += v * v; break;
    case R_LOGSUMEXP: *a += exp(v); break;
    }
  }
  for (int64_t o = 0; o < on; o++) {
    double a = acc[o];
    w->v[o] = r == R_MEAN ? a / cnt[o] : r == R_L2 ? sqrt(a) : r == R_LOGSUM || r == R_LOGSUMEXP ? log(a) : a;
  }
  free(acc);
  free(cnt);
}

/* A reduction node reading "x" and (unless axes is NULL) input "axes". */
static spec reduce_spec(int r, int64_t opset, const int64_t *xdims, int nd, const int64_t *axes, int n_axes,
                        int keepdims, int noop) {
  spec p = {.opset = opset, .op = reduce_op[r], .xnd = nd, .n_out = 1};
  memcpy(p.xdims, xdims, (size_t)nd * sizeof *xdims);
  p.in[p.n_in++] = "x";
  if (axes) {
    p.in[p.n_in++] = "axes";
    sp_ints(&p, "axes", axes, n_axes);
  }
  if (keepdims >= 0) sp_attr_i(&p, "keepdims", keepdims);
  if (noop >= 0) sp_attr_i(&p, "noop_with_empty_axes", noop);
  return p;
}

static unsigned axes_mask(const int64_t *axes, int n, int nd) {
  unsigned m = 0;
  for (int i = 0; i < n; i++) m |= 1u << (axes[i] < 0 ? axes[i] + nd : axes[i]);
  return m;
}

/* -------------------------------------------------------------- tests --- */

static int setup(void **state) {
  (void)state;
  g_gpus = ts_use_gpu();
  if (!g_gpus) print_message("no CUDA driver, real or test double: the GPU runs are skipped\n");
  return 0;
}

/* Every reduction at opset 18 with axes as an input (ReduceSum also at 13):
 * one axis, two axes given negative and out of order, keepdims 1 (ONNX's
 * default, the attribute omitted) and 0. */
static void test_reduce_axes_input(void **state) {
  (void)state;
  static const int64_t dims[3] = {2, 3, 4};
  static const struct {
    int64_t axes[2];
    int n;
  } sets[] = {{{1}, 1}, {{-1, 0}, 2}};
  double x[24];
  char what[128];
  for (int r = 0; r < R_N; r++) {
    /* LogSum needs positive sums; Prod and LogSumExp moderate values. */
    fill(x, 24, r == R_LOGSUM ? 0.25 : -1);
    for (int a = 0; a < 2; a++)
      for (int kd = -1; kd <= 0; kd++)
        for (int64_t opset = r == R_SUM ? 13 : 18; opset <= 18; opset += 5) {
          spec p = reduce_spec(r, opset, dims, 3, sets[a].axes, sets[a].n, kd, -1);
          expect w;
          reduce_ref(r, 3, dims, x, axes_mask(sets[a].axes, sets[a].n, 3), kd != 0, &w);
          snprintf(what, sizeof what, "%s-%lld axes %s keepdims %d", reduce_op[r], (long long)opset,
                   a ? "[-1, 0]" : "[1]", kd ? 1 : 0);
          run_and_check(what, &p, x, &w);
          free(w.v);
        }
  }
}

/* Empty axes (the input omitted, given as "", or an empty tensor):
 * noop_with_empty_axes 0 (or absent) reduces every axis; 1 reduces over no
 * axis, leaving the element-wise step of the composite reductions (x^2,
 * |x|, sqrt(x^2), log x; ONNX's definition of ReduceSumSquare etc. as
 * ReduceSum of Mul/Abs with the same attribute). */
static void test_reduce_empty_axes(void **state) {
  (void)state;
  static const int64_t dims[2] = {3, 4};
  double x[12];
  char what[160];
  for (int r = 0; r < R_N; r++) {
    fill(x, 12, r == R_LOGSUM ? 0.25 : -1);
    int64_t opset = r == R_SUM ? 13 : 18;
    for (int form = 0; form < 3; form++)
      for (int noop = -1; noop <= 1; noop++)
        for (int kd = 0; kd <= 1; kd++) {
          static const int64_t none[1] = {0};
          spec p = reduce_spec(r, opset, dims, 2, form == 2 ? none : NULL, 0, kd, noop);
          if (form == 1) p.in[p.n_in++] = ""; /* given as the empty name */
          expect w;
          reduce_ref(r, 2, dims, x, noop == 1 ? 0u : 3u, kd, &w);
          snprintf(what, sizeof what, "%s-%lld axes %s, noop_with_empty_axes %s, keepdims %d", reduce_op[r],
                   (long long)opset, form == 0 ? "omitted" : form == 1 ? "named \"\"" : "an empty tensor",
                   noop < 0 ? "absent" : noop ? "1" : "0", kd);
          run_and_check(what, &p, x, &w);
          free(w.v);
        }
  }
}

/* The attribute forms of earlier opsets still import (ReduceMean-13 with
 * axes as an attribute, keepdims 0), and axes out of range are refused by
 * the op, naming the node. */
static void test_reduce_attribute_and_refusals(void **state) {
  (void)state;
  static const int64_t dims[3] = {2, 3, 4};
  double x[24];
  fill(x, 24, -1);
  spec p = reduce_spec(R_MEAN, 13, dims, 3, NULL, 0, 0, -1);
  p.attr[p.n_attr].name = "axes";
  p.attr[p.n_attr].is_ints = 1;
  p.attr[p.n_attr].ints[0] = 2, p.attr[p.n_attr].ints[1] = 0, p.attr[p.n_attr++].n = 2;
  expect w;
  reduce_ref(R_MEAN, 3, dims, x, 5u, 0, &w);
  run_and_check("ReduceMean-13 axes attribute [2, 0]", &p, x, &w);
  free(w.v);

  static const int64_t bad_axes[1] = {3};
  spec q = reduce_spec(R_L2, 18, dims, 3, bad_axes, 1, 1, 0);
  expect_refused("ReduceL2-18 axes [3] of rank 3", &q, EM_ERR_INVALID_ARGUMENT, "ReduceL2", "out of range");
}

/* ReduceMax and ReduceMin over an axis of size 0: -inf and +inf (ONNX's
 * definition since opset 18's text; Ember's ops refuse an empty max). */
static void test_reduce_max_min_empty_set(void **state) {
  (void)state;
  static const int64_t dims[3] = {2, 0, 3}, axes[1] = {1};
  for (int kd = 0; kd <= 1; kd++)
    for (int r = R_MAX; r <= R_MIN; r++) {
      spec p = reduce_spec(r, 18, dims, 3, axes, 1, kd, -1);
      double v[6];
      for (int i = 0; i < 6; i++) v[i] = r == R_MAX ? -INFINITY : INFINITY;
      expect w = {.nd = kd ? 3 : 2, .dims = {2, kd ? 1 : 3, 3}, .v = v}; /* [2, 1, 3] or [2, 3] */
      char what[96];
      snprintf(what, sizeof what, "%s-18 over an empty axis, keepdims %d", reduce_op[r], kd);
      run_and_check(what, &p, NULL, &w);
    }
}

/* Split: ONNX's lengths of each output, given dim and the outputs. */
static void split_ref(const int64_t *xdims, const double *x, int axis, const int64_t *len, int n_out, expect *w) {
  int64_t outer = 1, inner = 1, off = 0;
  for (int d = 0; d < axis; d++) outer *= xdims[d];
  for (int d = axis + 1; d < 2; d++) inner *= xdims[d];
  for (int j = 0; j < n_out; j++) {
    w[j].nd = 2;
    memcpy(w[j].dims, xdims, 2 * sizeof *xdims);
    w[j].dims[axis] = len[j];
    w[j].v = calloc((size_t)(numel(2, w[j].dims) + 1), sizeof *w[j].v);
    assert_non_null(w[j].v);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t a = off; a < off + len[j]; a++)
        for (int64_t in = 0; in < inner; in++) w[j].v[k++] = x[(o * xdims[axis] + a) * inner + in];
    off += len[j];
  }
}

/* Split-18 with num_outputs: even, and uneven by ONNX's rule (chunks of
 * ceil(dim / n), the last smaller: 7 in 3 is 3 3 1; 9 in 4 is 3 3 3 0);
 * Split-13 and 18 with the split input. */
static void test_split(void **state) {
  (void)state;
  static const struct {
    int64_t opset, dim;
    int axis, n_out, num_outputs; /* num_outputs 0: the split input */
    int64_t len[4];
  } cases[] = {
    {18, 6, 1, 3, 3, {2, 2, 2}}, {18, 7, 1, 3, 3, {3, 3, 1}}, {18, 9, 0, 4, 4, {3, 3, 3, 0}},
    {18, 10, -1, 4, 4, {3, 3, 3, 1}}, {13, 7, 1, 2, 0, {2, 5}}, {18, 7, 1, 3, 0, {0, 4, 3}},
  };
  char what[128];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int axis = cases[c].axis < 0 ? cases[c].axis + 2 : cases[c].axis;
    spec p = {.opset = cases[c].opset, .op = "Split", .xnd = 2, .n_out = cases[c].n_out};
    p.xdims[0] = axis == 0 ? cases[c].dim : 2, p.xdims[1] = axis == 1 ? cases[c].dim : 3;
    p.in[p.n_in++] = "x";
    sp_attr_i(&p, "axis", cases[c].axis);
    if (cases[c].num_outputs) {
      sp_attr_i(&p, "num_outputs", cases[c].num_outputs);
    } else {
      p.in[p.n_in++] = "split";
      sp_ints(&p, "split", cases[c].len, cases[c].n_out);
    }
    double x[64];
    fill(x, numel(2, p.xdims), -1);
    expect w[4];
    split_ref(p.xdims, x, axis, cases[c].len, cases[c].n_out, w);
    snprintf(what, sizeof what, "Split-%lld of %lld into %d (%s)", (long long)cases[c].opset, (long long)cases[c].dim,
             cases[c].n_out, cases[c].num_outputs ? "num_outputs" : "split input");
    run_and_check(what, &p, x, w);
    for (int j = 0; j < cases[c].n_out; j++) free(w[j].v);
  }
}

static void test_split_refusals(void **state) {
  (void)state;
  spec p = {.opset = 18, .op = "Split", .xnd = 2, .xdims = {2, 5}, .n_out = 4};
  p.in[p.n_in++] = "x";
  sp_attr_i(&p, "axis", 1);
  sp_attr_i(&p, "num_outputs", 4);
  /* chunks of ceil(5 / 4) = 2: 2 2 2 leave -1 for the last */
  expect_refused("Split-18 5 into 4", &p, EM_ERR_INVALID_ARGUMENT, "Split", "cannot be split into 4");
  p.n_out = 3;
  expect_refused("Split-18 num_outputs 4, 3 outputs", &p, EM_ERR_INVALID_ARGUMENT, "num_outputs is 4",
                 "3 outputs");
  static const int64_t len[3] = {1, 2, 2};
  p.in[p.n_in++] = "split";
  sp_ints(&p, "split", len, 3);
  p.attr[1].i = 3;
  expect_refused("Split-18 split and num_outputs", &p, EM_ERR_INVALID_ARGUMENT, "both 'split' and 'num_outputs'",
                 NULL);
}

/* ONNX's Pad of a 2-D x (pads over every axis: begins, then ends). */
static void pad_ref(const int64_t *xd, const double *x, const int64_t *pads, const char *mode, double value,
                    expect *w) {
  w->nd = 2;
  for (int d = 0; d < 2; d++) w->dims[d] = xd[d] + pads[d] + pads[2 + d];
  w->v = calloc((size_t)numel(2, w->dims), sizeof *w->v);
  assert_non_null(w->v);
  for (int64_t i = 0; i < w->dims[0]; i++)
    for (int64_t j = 0; j < w->dims[1]; j++) {
      int64_t src[2] = {i - pads[0], j - pads[1]};
      int inside = 1;
      for (int d = 0; d < 2; d++) {
        if (src[d] >= 0 && src[d] < xd[d]) continue;
        inside = 0;
        if (!strcmp(mode, "edge")) src[d] = src[d] < 0 ? 0 : xd[d] - 1;
        else if (!strcmp(mode, "wrap")) src[d] = ((src[d] % xd[d]) + xd[d]) % xd[d];
        else if (!strcmp(mode, "reflect")) src[d] = src[d] < 0 ? -src[d] : 2 * (xd[d] - 1) - src[d];
      }
      w->v[i * w->dims[1] + j] = inside || strcmp(mode, "constant") ? x[src[0] * xd[1] + src[1]] : value;
    }
}

/* Pad-18 with axes: pads for the listed axes only (negative, out of
 * order), the others unpadded; constant (with a constant_value input, and
 * without: 0), reflect and edge; Pad-13 with pads over every axis; Pad-19's
 * wrap, longer than the axis and cropping. */
static void test_pad(void **state) {
  (void)state;
  static const struct {
    int64_t opset;
    const char *mode;
    int64_t axes[2];
    int n_axes; /* 0: no axes input */
    int64_t pads[4], full[4];
    int value; /* constant_value input given */
  } cases[] = {
    {18, "constant", {-1}, 1, {2, 1}, {0, 2, 0, 1}, 1},
    {18, "constant", {1, 0}, 2, {1, 0, 0, 2}, {0, 1, 2, 0}, 0},
    {18, "reflect", {0}, 1, {1, 2}, {1, 0, 2, 0}, 0},
    {18, "edge", {-1, -2}, 2, {2, 1, 1, 0}, {1, 2, 0, 1}, 0},
    {13, "constant", {0}, 0, {1, 0, 0, 2}, {1, 0, 0, 2}, 1},
    {19, "wrap", {1}, 1, {2, 5}, {0, 2, 0, 5}, 0},            /* 5 > 4: x repeats */
    {19, "wrap", {0, 1}, 2, {-1, 1, 2, -2}, {-1, 1, 2, -2}, 0}, /* negative pads crop */
  };
  static const int64_t xd[2] = {3, 4};
  double x[12];
  fill(x, 12, -1);
  char what[128];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    spec p = {.opset = cases[c].opset, .op = "Pad", .xnd = 2, .xdims = {3, 4}, .n_out = 1};
    p.in[p.n_in++] = "x";
    p.in[p.n_in++] = "pads";
    sp_ints(&p, "pads", cases[c].pads, cases[c].n_axes ? 2 * cases[c].n_axes : 4);
    p.in[p.n_in++] = cases[c].value ? "value" : "";
    if (cases[c].value) sp_float_scalar(&p, "value", 1.5f);
    if (cases[c].n_axes) {
      p.in[p.n_in++] = "axes";
      sp_ints(&p, "axes", cases[c].axes, cases[c].n_axes);
    }
    sp_attr_s(&p, "mode", cases[c].mode);
    expect w;
    pad_ref(xd, x, cases[c].full, cases[c].mode, cases[c].value ? 1.5 : 0, &w);
    snprintf(what, sizeof what, "Pad-%lld %s case %zu", (long long)cases[c].opset, cases[c].mode, c);
    run_and_check(what, &p, x, &w);
    free(w.v);
  }
}

static void test_pad_refusals(void **state) {
  (void)state;
  static const int64_t pads[4] = {1, 1, 1, 1}, rep[2] = {1, -1}, one[1] = {0};
  spec p = {.opset = 18, .op = "Pad", .xnd = 2, .xdims = {3, 4}, .n_out = 1};
  p.in[0] = "x", p.in[1] = "pads", p.in[2] = "", p.in[3] = "axes", p.n_in = 4;
  sp_ints(&p, "pads", pads, 4);
  sp_ints(&p, "axes", rep, 2);
  expect_refused("Pad-18 axes [1, -1]", &p, EM_ERR_INVALID_ARGUMENT, "Pad", "axis 1 twice");
  p.init[1].len = 1; /* one axis, four pads */
  memcpy(p.init[1].ivals, one, sizeof one);
  expect_refused("Pad-18 4 pads for one axis", &p, EM_ERR_INVALID_ARGUMENT, "4 entries for 1 axes", NULL);
}

/* Clip-13 with min > max: every value becomes max (ONNX: Min(max, Max(x, min))). */
static void test_clip_min_above_max(void **state) {
  (void)state;
  double x[6], y[6];
  fill(x, 6, -1);
  spec p = {.opset = 13, .op = "Clip", .xnd = 1, .xdims = {6}, .n_out = 1};
  p.in[0] = "x", p.in[1] = "lo", p.in[2] = "hi", p.n_in = 3;
  sp_float_scalar(&p, "lo", 0.5f);
  sp_float_scalar(&p, "hi", -0.25f);
  for (int i = 0; i < 6; i++) y[i] = -0.25;
  expect w = {.nd = 1, .dims = {6}, .v = y};
  run_and_check("Clip-13 min 0.5 max -0.25", &p, x, &w);
}

/* Range (11) of constant inputs: a constant of max(ceil((limit - start) /
 * delta), 0) elements start + i * delta. */
static void test_range(void **state) {
  (void)state;
  double x[1] = {0}, y[4] = {1, 1.5, 2, 2.5};
  spec p = {.opset = 18, .op = "Range", .xnd = 1, .xdims = {1}, .n_out = 1};
  p.in[0] = "a", p.in[1] = "b", p.in[2] = "d", p.n_in = 3;
  sp_float_scalar(&p, "a", 1);
  sp_float_scalar(&p, "b", 2.9f);
  sp_float_scalar(&p, "d", 0.5f);
  expect w = {.nd = 1, .dims = {4}, .v = y};
  run_and_check("Range f32 1 to 2.9 by 0.5", &p, x, &w);
  p.init[1].fval = 0.5f; /* limit below start, delta positive: empty */
  expect e = {.nd = 1, .dims = {0}, .v = y};
  run_and_check("Range f32 1 to 0.5 by 0.5", &p, x, &e);

  static const struct {
    int64_t a, b, d, len, first;
  } ic[] = {{10, 3, -3, 3, 10}, {-4, 5, 4, 3, -4}, {0, -1, 1, 0, 0}, {INT64_MAX - 2, INT64_MAX, 1, 2, INT64_MAX - 2}};
  for (size_t k = 0; k < sizeof ic / sizeof ic[0]; k++) {
    spec q = {.opset = 18, .op = "Range", .xnd = 1, .xdims = {1}, .n_out = 1};
    q.in[0] = "a", q.in[1] = "b", q.in[2] = "d", q.n_in = 3;
    sp_int_scalar(&q, "a", ic[k].a);
    sp_int_scalar(&q, "b", ic[k].b);
    sp_int_scalar(&q, "d", ic[k].d);
    em_graph *g;
    em_var xv, o;
    if (sp_import(&q, &g, &xv, &o)) fail_msg("Range i64 case %zu: %s", k, em_last_error());
    em_exec *e;
    em_tensor *r;
    CHECK(em_exec_create(g, &o, 1, em_cpu(), &e));
    CHECK(em_exec_run(e, NULL, 0, &r));
    assert_int_equal(em_tensor_dtype(r), EM_I64);
    assert_int_equal(em_tensor_ndim(r), 1);
    if (em_tensor_shape(r)[0] != ic[k].len)
      fail_msg("Range i64 %lld to %lld by %lld: %lld elements, want %lld", (long long)ic[k].a, (long long)ic[k].b,
               (long long)ic[k].d, (long long)em_tensor_shape(r)[0], (long long)ic[k].len);
    const int64_t *v = em_tensor_data(r);
    for (int64_t i = 0; i < ic[k].len; i++) assert_int_equal(v[i], ic[k].first + i * ic[k].d);
    em_tensor_release(r);
    em_exec_free(e);
    em_graph_free(g);
  }
  spec z = {.opset = 18, .op = "Range", .xnd = 1, .xdims = {1}, .n_out = 1};
  z.in[0] = "a", z.in[1] = "b", z.in[2] = "d", z.n_in = 3;
  sp_int_scalar(&z, "a", 0);
  sp_int_scalar(&z, "b", 4);
  sp_int_scalar(&z, "d", 0);
  expect_refused("Range delta 0", &z, EM_ERR_INVALID_ARGUMENT, "Range", "delta is 0");
  z.init[0].ivals[0] = INT64_MIN, z.init[2].ivals[0] = 1;
  expect_refused("Range INT64_MIN to 4", &z, EM_ERR_INVALID_ARGUMENT, "Range", "too many elements");
}

/* Einsum of `eq` by its definition, in float64: every assignment of the
 * labels (letters; no "...": the cases give the reference its equation with
 * the ellipsis spelt out), the product of the operands' elements added into
 * the output's element. */
static void einsum_ref(const char *eq, int n_ops, int const *nd, int64_t const (*dims)[EM_MAX_DIMS],
                       const double *const *ops, expect *w) {
  char terms[4][16];
  int nt = 0, k = 0;
  for (const char *p = eq;; p++) {
    if (*p == ',' || *p == '-' || !*p) {
      terms[nt++][k] = 0, k = 0;
      if (*p == '-') p++;
      if (!*p) break;
    } else {
      terms[nt][k++] = *p;
    }
  }
  assert_int_equal(nt, n_ops + 1);
  int64_t size[128] = {0};
  for (int i = 0; i < n_ops; i++)
    for (int d = 0; d < nd[i]; d++) size[(int)terms[i][d]] = dims[i][d];
  char labels[32];
  int nl = 0;
  for (int l = 0; l < 128; l++)
    if (size[l]) labels[nl++] = (char)l;
  const char *ot = terms[n_ops];
  w->nd = (int)strlen(ot);
  for (int d = 0; d < w->nd; d++) w->dims[d] = size[(int)ot[d]];
  w->v = calloc((size_t)numel(w->nd, w->dims) + 1, sizeof *w->v);
  assert_non_null(w->v);
  int64_t val[128] = {0};
  for (;;) {
    double prod = 1;
    for (int i = 0; i < n_ops; i++) {
      int64_t at = 0;
      for (int d = 0; d < nd[i]; d++) at = at * dims[i][d] + val[(int)terms[i][d]];
      prod *= ops[i][at];
    }
    int64_t o = 0;
    for (int d = 0; d < w->nd; d++) o = o * w->dims[d] + val[(int)ot[d]];
    w->v[o] += prod;
    int j = nl - 1; /* next assignment */
    while (j >= 0 && ++val[(int)labels[j]] == size[(int)labels[j]]) val[(int)labels[j--]] = 0;
    if (j < 0) break;
  }
}

/* Einsum (12) lowered onto reduce_sum, transpose, reshape and matmul:
 * matrix and batched products (attention's), an outer product, sums, a
 * transpose, the implicit output, "...", a diagonal, three operands. */
static void test_einsum(void **state) {
  (void)state;
  static const struct {
    const char *eq, *ref; /* ref: eq with "..." spelt out and the output explicit */
    int n_ops, nd[3];
    int64_t dims[3][EM_MAX_DIMS];
  } cases[] = {
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{2, 3}, {3, 4}}},
    {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", 2, {4, 4}, {{2, 2, 3, 4}, {2, 2, 5, 4}}},
    {"bhqk,bhkd->bqhd", "bhqk,bhkd->bqhd", 2, {4, 4}, {{2, 2, 3, 5}, {2, 2, 5, 4}}},
    {"i,j->ij", "i,j->ij", 2, {1, 1}, {{3}, {4}}},
    {"ij->", "ij->", 1, {2}, {{3, 4}}},
    {"ij->ji", "ij->ji", 1, {2}, {{3, 4}}},
    {"ijk->ki", "ijk->ki", 1, {3}, {{2, 3, 4}}},
    {"ij,ij->i", "ij,ij->i", 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"kj,ji", "kj,ji->ik", 2, {2, 2}, {{2, 3}, {3, 4}}},
    {"...ij,...jk->...ik", "abij,abjk->abik", 2, {4, 4}, {{2, 2, 3, 4}, {2, 2, 4, 3}}},
    {"b i i -> b i", "bii->bi", 1, {3}, {{2, 3, 3}}},
    {"ij,jk,kl->il", "ij,jk,kl->il", 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 2}}},
    {"ab,cd->", "ab,cd->", 2, {2, 2}, {{2, 3}, {2, 2}}},
  };
  char what[96];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    spec p = {.opset = 12, .op = "Einsum", .xnd = cases[c].nd[0], .n_out = 1};
    memcpy(p.xdims, cases[c].dims[0], sizeof p.xdims);
    p.in[p.n_in++] = "x";
    p.attr[0].name = "equation", p.attr[0].is_str = 1, p.attr[0].s = cases[c].eq, p.n_attr = 1;
    static double vals[3][256];
    static float fv[3][256];
    static const char *const names[3] = {"x", "y", "z"};
    const double *ops[3];
    for (int i = 0; i < cases[c].n_ops; i++) {
      int64_t n = numel(cases[c].nd[i], cases[c].dims[i]);
      assert_true(n <= 256);
      fill(vals[i], n, -1 + 0.25 * i);
      for (int64_t k = 0; k < n; k++) fv[i][k] = (float)vals[i][k];
      ops[i] = vals[i];
      if (i) {
        p.in[p.n_in++] = names[i];
        p.init[p.n_init].name = names[i];
        p.init[p.n_init].fdata = fv[i];
        p.init[p.n_init].fnd = cases[c].nd[i];
        memcpy(p.init[p.n_init++].fdims, cases[c].dims[i], sizeof cases[c].dims[i]);
      }
    }
    expect w;
    einsum_ref(cases[c].ref, cases[c].n_ops, cases[c].nd, cases[c].dims, ops, &w);
    snprintf(what, sizeof what, "Einsum '%s'", cases[c].eq);
    run_and_check(what, &p, vals[0], &w);
    free(w.v);
  }
  /* a label whose sizes differ across operands (numpy would broadcast a 1) */
  spec q = {.opset = 12, .op = "Einsum", .xnd = 2, .xdims = {2, 1}, .n_out = 1};
  static const float ones[6] = {1, 1, 1, 1, 1, 1};
  q.in[0] = "x", q.in[1] = "y", q.n_in = 2;
  q.attr[0].name = "equation", q.attr[0].is_str = 1, q.attr[0].s = "ij,ij->ij", q.n_attr = 1;
  q.init[0].name = "y", q.init[0].fdata = ones, q.init[0].fnd = 2, q.init[0].fdims[0] = 2, q.init[0].fdims[1] = 3;
  q.n_init = 1;
  expect_refused("Einsum 'ij,ij->ij' of [2,1] and [2,3]", &q, EM_ERR_UNSUPPORTED, "label 'j' has sizes 1 and 3",
                 NULL);
  q.attr[0].s = "ij,jk->iq";
  q.init[0].fdims[0] = 1; /* y is [1, 3] */
  expect_refused("Einsum output label in no operand", &q, EM_ERR_INVALID_ARGUMENT, "output label 'q'", NULL);
  /* malformed equations are refused, naming the node (x [2, 1], y [1, 3]) */
  static const char *const bad_eq[] = {"",         "->",        "ij",        "ij,jk,kl->il", "i.j,jk->ik",
                                       "..i.,jk",  "i1,jk->ik", "ij,jk->i,k", "ij,jk->ii",   "ijk,jk->ik",
                                       "ij,jk->ik->i", "......,jk", "ij,jk->...."};
  for (size_t k = 0; k < sizeof bad_eq / sizeof bad_eq[0]; k++) {
    q.attr[0].s = bad_eq[k];
    em_graph *g;
    em_var outs[MAXT];
    em_status st = sp_import(&q, &g, NULL, outs);
    if (st == EM_OK) {
      em_graph_free(g);
      fail_msg("Einsum '%s' imported", bad_eq[k]);
    }
    if ((st != EM_ERR_INVALID_ARGUMENT && st != EM_ERR_UNSUPPORTED) || !strstr(em_last_error(), "Einsum"))
      fail_msg("Einsum '%s': %s (%s)", bad_eq[k], em_status_name(st), em_last_error());
  }
}

/* Appends a node reading in[0..n) (NULL-terminated) to p's chain, with up
 * to two INT attributes; out NULL: the next graph output. */
static void sp_next(spec *p, const char *op, const char *out, const char *const *in, const char *a0, int64_t v0,
                    const char *a1, int64_t v1) {
  int k = p->n_next++;
  p->next[k].op = op, p->next[k].out = out;
  while (in[p->next[k].n_in]) p->next[k].in[p->next[k].n_in] = in[p->next[k].n_in], p->next[k].n_in++;
  if (a0) p->next[k].a_name[p->next[k].n_attr] = a0, p->next[k].a_val[p->next[k].n_attr++] = v0;
  if (a1) p->next[k].a_name[p->next[k].n_attr] = a1, p->next[k].a_val[p->next[k].n_attr++] = v1;
  if (!out) p->n_out++;
}

/* Columns [c0, c1) of a rows x cols row-major matrix. */
static void columns(const double *x, int64_t rows, int64_t cols, int64_t c0, int64_t c1, double *out) {
  for (int64_t r = 0, k = 0; r < rows; r++)
    for (int64_t c = c0; c < c1; c++) out[k++] = x[r * cols + c];
}

/* Sequences as PyTorch writes them (torch.split unoptimised: SplitToSequence
 * + SequenceAt; stacks: ConcatFromSequence), and the other sequence ops,
 * which the importer resolves while building. */
static void test_sequences(void **state) {
  (void)state;
  double x[14], a[8], b[8];
  fill(x, 14, -1);
  /* split into chunks of 3 along axis 1 (7 = 3 3 1): elements 0 and -1 */
  spec p = {.opset = 18, .op = "SplitToSequence", .xnd = 2, .xdims = {2, 7}, .main_out = "s"};
  p.in[0] = "x", p.in[1] = "k", p.n_in = 2;
  sp_int_scalar(&p, "k", 3);
  sp_attr_i(&p, "axis", 1);
  sp_int_scalar(&p, "p0", 0);
  sp_int_scalar(&p, "p1", -1);
  sp_next(&p, "SequenceAt", NULL, (const char *[]){"s", "p0", NULL}, NULL, 0, NULL, 0);
  sp_next(&p, "SequenceAt", NULL, (const char *[]){"s", "p1", NULL}, NULL, 0, NULL, 0);
  columns(x, 2, 7, 0, 3, a);
  columns(x, 2, 7, 6, 7, b);
  expect w[2] = {{.nd = 2, .dims = {2, 3}, .v = a}, {.nd = 2, .dims = {2, 1}, .v = b}};
  run_and_check("SplitToSequence split 3, SequenceAt 0 and -1", &p, x, w);

  /* no split, keepdims 0: rows of [2, 7]; stacked back (new_axis) and concatenated */
  spec q = {.opset = 18, .op = "SplitToSequence", .xnd = 2, .xdims = {2, 7}, .main_out = "s"};
  q.in[0] = "x", q.n_in = 1;
  sp_attr_i(&q, "keepdims", 0);
  sp_next(&q, "ConcatFromSequence", NULL, (const char *[]){"s", NULL}, "axis", 0, "new_axis", 1);
  sp_next(&q, "ConcatFromSequence", NULL, (const char *[]){"s", NULL}, "axis", -1, NULL, 0);
  expect v[2] = {{.nd = 2, .dims = {2, 7}, .v = x}, {.nd = 1, .dims = {14}, .v = x}};
  run_and_check("SplitToSequence rows, ConcatFromSequence new_axis 1 and 0", &q, x, v);

  /* SequenceConstruct(x, y), insert z at 0, erase the last: concat is [z; x] */
  static const float yf[14] = {0}, zf[6] = {9, 8, 7, 6, 5, 4};
  spec r = {.opset = 18, .op = "SequenceConstruct", .xnd = 2, .xdims = {2, 7}, .main_out = "s"};
  r.in[0] = "x", r.in[1] = "y", r.n_in = 2;
  r.init[0].name = "y", r.init[0].fdata = yf, r.init[0].fnd = 2, r.init[0].fdims[0] = 2, r.init[0].fdims[1] = 7;
  r.init[1].name = "z", r.init[1].fdata = zf, r.init[1].fnd = 2, r.init[1].fdims[0] = 1, r.init[1].fdims[1] = 6;
  r.n_init = 2;
  sp_int_scalar(&r, "p0", 0);
  double z6[7] = {9, 8, 7, 6, 5, 4, 0}, want[21];
  /* z is [1, 6]: pad it to 7 columns first, so it concatenates with x on axis 0 */
  static const int64_t zpads[4] = {0, 0, 0, 1};
  sp_ints(&r, "zp", zpads, 4);
  sp_next(&r, "Pad", "zz", (const char *[]){"z", "zp", NULL}, NULL, 0, NULL, 0);
  sp_next(&r, "SequenceInsert", "s2", (const char *[]){"s", "zz", "p0", NULL}, NULL, 0, NULL, 0);
  sp_next(&r, "SequenceErase", "s3", (const char *[]){"s2", NULL}, NULL, 0, NULL, 0);
  sp_next(&r, "ConcatFromSequence", NULL, (const char *[]){"s3", NULL}, "axis", 0, NULL, 0);
  memcpy(want, z6, sizeof z6);
  memcpy(want + 7, x, sizeof x);
  expect u = {.nd = 2, .dims = {3, 7}, .v = want};
  run_and_check("SequenceConstruct, SequenceInsert at 0, SequenceErase, ConcatFromSequence", &r, x, &u);

  /* refusals: a position out of range, a sequence as a graph output, a
   * sequence given to an op that takes tensors */
  p.init[2].ivals[0] = 3; /* p0: the sequence has 3 elements */
  expect_refused("SequenceAt 3 of 3", &p, EM_ERR_INVALID_ARGUMENT, "SequenceAt", "position 3 is out of range");
  spec o = {.opset = 18, .op = "SequenceConstruct", .xnd = 1, .xdims = {2}, .main_out = "s"};
  o.in[0] = "x", o.n_in = 1;
  sp_next(&o, "SequenceErase", "y0", (const char *[]){"s", NULL}, NULL, 0, NULL, 0);
  o.n_out = 1; /* y0, a sequence, is the graph output */
  expect_refused("a sequence as the graph output", &o, EM_ERR_UNSUPPORTED, "'y0' is a sequence", NULL);
  spec t = {.opset = 18, .op = "SequenceConstruct", .xnd = 1, .xdims = {2}, .main_out = "s"};
  t.in[0] = "x", t.n_in = 1;
  sp_next(&t, "Relu", NULL, (const char *[]){"s", NULL}, NULL, 0, NULL, 0);
  expect_refused("Relu of a sequence", &t, EM_ERR_UNSUPPORTED, "Relu", "is a sequence");
}

/* Squeeze-13 and Unsqueeze-13 with axes as an input. */
static void test_squeeze_unsqueeze_axes_input(void **state) {
  (void)state;
  double x[6];
  fill(x, 6, -1);
  static const int64_t sq_axes[2] = {-1, 1}, usq_axes[2] = {0, 3};
  spec p = {.opset = 13, .op = "Squeeze", .xnd = 4, .xdims = {2, 1, 3, 1}, .n_out = 1};
  p.in[0] = "x", p.in[1] = "axes", p.n_in = 2;
  sp_ints(&p, "axes", sq_axes, 2);
  expect w = {.nd = 2, .dims = {2, 3}, .v = x};
  run_and_check("Squeeze-13 axes input [-1, 1]", &p, x, &w);
  spec q = {.opset = 13, .op = "Unsqueeze", .xnd = 2, .xdims = {2, 3}, .n_out = 1};
  q.in[0] = "x", q.in[1] = "axes", q.n_in = 2;
  sp_ints(&q, "axes", usq_axes, 2);
  expect v = {.nd = 4, .dims = {1, 2, 3, 1}, .v = x};
  run_and_check("Unsqueeze-13 axes input [0, 3]", &q, x, &v);
}

/* Mish (opset 18) and Gelu (opset 20, both forms), from their formulas. */
static void test_mish_gelu(void **state) {
  (void)state;
  double x[12], y[12];
  fill(x, 12, -1);
  for (int i = 0; i < 12; i++) x[i] *= 3; /* -3 .. 3 */
  spec p = {.opset = 18, .op = "Mish", .xnd = 2, .xdims = {3, 4}, .n_out = 1};
  p.in[p.n_in++] = "x";
  for (int i = 0; i < 12; i++) y[i] = x[i] * tanh(log1p(exp(x[i])));
  expect w = {.nd = 2, .dims = {3, 4}, .v = y};
  run_and_check("Mish-18", &p, x, &w);
  for (int form = 0; form < 2; form++) {
    spec q = {.opset = 20, .op = "Gelu", .xnd = 2, .xdims = {3, 4}, .n_out = 1};
    q.in[q.n_in++] = "x";
    if (form) sp_attr_s(&q, "approximate", "tanh");
    for (int i = 0; i < 12; i++) {
      double v = x[i];
      y[i] = form ? 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                  : 0.5 * v * (1 + erf(v / sqrt(2)));
    }
    run_and_check(form ? "Gelu-20 tanh" : "Gelu-20", &q, x, &w);
  }
}


/* Resize with sizes that do not fit 64 bits, or that keep_aspect_ratio_policy scales past them:
 * refused naming the input, not converted (undefined in C) into a negative size taken for a
 * dynamic axis. */
static void test_resize_huge_sizes(void **state) {
  (void)state;
  spec p = {.opset = 19, .op = "Resize", .xnd = 2, .xdims = {1, 1000}, .n_out = 1};
  p.in[p.n_in++] = "x";
  p.in[p.n_in++] = "";
  p.in[p.n_in++] = "";
  p.in[p.n_in++] = "sizes";
  static const int64_t max[2] = {1, INT64_MAX};
  sp_ints(&p, "sizes", max, 2);
  expect_refused("Resize sizes INT64_MAX", &p, EM_ERR_INVALID_ARGUMENT, "sizes[1]", "too large");
  static const int64_t big[2] = {(int64_t)1 << 61, 1};
  memcpy(p.init[0].ivals, big, sizeof big);
  sp_attr_s(&p, "keep_aspect_ratio_policy", "not_smaller");
  expect_refused("Resize not_smaller past 64 bits", &p, EM_ERR_INVALID_ARGUMENT, "keep_aspect_ratio_policy",
                 "too large");
}

/* keep_aspect_ratio_policy not_larger with a size of 0: the scale is 0, so every listed axis has
 * size 0 (ONNX's reference gives an empty [0, 0] output); it was refused as 'scales[0] = 0'. */
static void test_resize_keep_aspect_zero(void **state) {
  (void)state;
  spec p = {.opset = 19, .op = "Resize", .xnd = 2, .xdims = {2, 3}, .n_out = 1};
  p.in[p.n_in++] = "x";
  p.in[p.n_in++] = "";
  p.in[p.n_in++] = "";
  p.in[p.n_in++] = "sizes";
  static const int64_t sz[2] = {0, 6};
  sp_ints(&p, "sizes", sz, 2);
  sp_attr_s(&p, "mode", "linear");
  sp_attr_s(&p, "keep_aspect_ratio_policy", "not_larger");
  double xv[6] = {1, 2, 3, 4, 5, 6};
  expect w = {.nd = 2, .dims = {0, 0}, .v = NULL};
  run_and_check("Resize not_larger to size 0", &p, xv, &w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reduce_axes_input),
    cmocka_unit_test(test_reduce_empty_axes),
    cmocka_unit_test(test_reduce_attribute_and_refusals),
    cmocka_unit_test(test_reduce_max_min_empty_set),
    cmocka_unit_test(test_split),
    cmocka_unit_test(test_split_refusals),
    cmocka_unit_test(test_pad),
    cmocka_unit_test(test_pad_refusals),
    cmocka_unit_test(test_clip_min_above_max),
    cmocka_unit_test(test_range),
    cmocka_unit_test(test_einsum),
    cmocka_unit_test(test_sequences),
    cmocka_unit_test(test_squeeze_unsqueeze_axes_input),
    cmocka_unit_test(test_mish_gelu),
    cmocka_unit_test(test_resize_huge_sizes),
    cmocka_unit_test(test_resize_keep_aspect_zero),
  };
  int rc = cmocka_run_group_tests(tests, setup, NULL);
  em_shutdown();
  return rc;
}
