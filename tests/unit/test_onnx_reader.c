/* Tests of onnx/onnx_reader.c.
 *
 * Expected values come from outside the reader:
 *  - for files of Debian's libonnx-testdata (ONNX 1.12 backend node tests),
 *    from a hand reading of their protobuf bytes (a plain varint walk printed
 *    every field; the values are written below next to the field numbers of
 *    onnx.proto), from a small protobuf walk inside this file, or from
 *    recomputing an op's output from its input (Abs, Conv);
 *  - for malformed or unusual tensors, from messages encoded by hand here with
 *    the protobuf wire format (varint keys, field numbers from onnx.proto).
 * The survey loads every model and tensor file of the node tests, checks each
 * tensor against the type its model declares, and prints (and, with
 * EMBER_ONNX_NODE_TABLE=path, writes) the table of op types in onnx/NODE_TESTS.md.
 * Tests needing the data skip when libonnx-testdata is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "error.h"
#include "onnx_reader.h"

/* ------------------------------------------------------------ helpers --- */

static const char *node_dir(void) {
  const char *d = getenv("EMBER_ONNX_TESTDATA");
  return d && *d ? d : "/usr/share/libonnx-testdata/data/node";
}

static int have_testdata(void) {
  char p[1024];
  snprintf(p, sizeof p, "%s/test_abs/model.onnx", node_dir());
  struct stat st;
  if (stat(p, &st) == 0) return 1;
  print_message("libonnx-testdata not found under %s (apt-get install libonnx-testdata): skipped\n", node_dir());
  return 0;
}

static const char *tpath(const char *test, const char *file) {
  static char p[1024];
  snprintf(p, sizeof p, "%s/%s/%s", node_dir(), test, file);
  return p;
}

static em_onnx_model *load_model(const char *test) {
  em_onnx_model *m = NULL;
  em_status s = em_onnx_model_load(tpath(test, "model.onnx"), &m);
  if (s != EM_OK) fail_msg("%s: %s", test, em_last_error());
  assert_non_null(m);
  return m;
}

static em_onnx_tensor *load_tensor(const char *test, const char *file) {
  em_onnx_tensor *t = NULL;
  em_status s = em_onnx_tensor_load(tpath(test, file), &t);
  if (s != EM_OK) fail_msg("%s/%s: %s", test, file, em_last_error());
  assert_non_null(t);
  return t;
}

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long l = ftell(f);
  rewind(f);
  uint8_t *b = malloc((size_t)l + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)l, f), (size_t)l);
  fclose(f);
  *n = (size_t)l;
  return b;
}

static float f32_at(const em_onnx_tensor *t, size_t i) {
  float v;
  memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
  return v;
}

static void assert_dims(const int64_t *dims, size_t rank, const int64_t *want, size_t want_rank) {
  assert_int_equal(rank, want_rank);
  for (size_t i = 0; i < rank; i++) assert_int_equal(dims[i], want[i]);
}

static void assert_type_dims(const em_onnx_type *t, em_onnx_dtype dtype, const int64_t *want, size_t rank) {
  assert_int_equal(t->kind, EM_ONNX_VALUE_TENSOR);
  assert_int_equal(t->dtype, dtype);
  assert_true(t->has_shape);
  assert_int_equal(t->rank, rank);
  for (size_t i = 0; i < rank; i++) {
    assert_int_equal(t->dims[i].value, want[i]);
    assert_null(t->dims[i].param);
  }
}

static void assert_msg_has(const char *needle) {
  if (!strstr(em_last_error(), needle)) fail_msg("message \"%s\" lacks \"%s\"", em_last_error(), needle);
}

/* ------------------------------------ a hand protobuf encoder and walk --- */

typedef struct pb {
  uint8_t *b;
  size_t n, cap;
} pb;

static void pb_raw(pb *p, const void *d, size_t n) {
  if (p->n + n > p->cap) {
    p->cap = (p->n + n) * 2 + 64;
    p->b = realloc(p->b, p->cap);
    assert_non_null(p->b);
  }
  if (n) memcpy(p->b + p->n, d, n);
  p->n += n;
}

static void pb_varint(pb *p, uint64_t v) {
  uint8_t t[10];
  size_t k = 0;
  do {
    t[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) t[k] |= 0x80;
    k++;
  } while (v);
  pb_raw(p, t, k);
}

static void pb_key(pb *p, unsigned field, unsigned wire) { pb_varint(p, ((uint64_t)field << 3) | wire); }
static void pb_int(pb *p, unsigned field, uint64_t v) { pb_key(p, field, 0), pb_varint(p, v); }
static void pb_bytes(pb *p, unsigned field, const void *d, size_t n) {
  pb_key(p, field, 2), pb_varint(p, n), pb_raw(p, d, n);
}
static void pb_str(pb *p, unsigned field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
static void pb_msg(pb *p, unsigned field, const pb *m) { pb_bytes(p, field, m->b, m->n); }
static void pb_f32(pb *p, unsigned field, float f) {
  uint8_t b[4];
  memcpy(b, &f, 4); /* x86-64 and every ONNX target are little-endian */
  pb_key(p, field, 5), pb_raw(p, b, 4);
}
static void pb_free(pb *p) { free(p->b), p->b = NULL, p->n = p->cap = 0; }

/* The first length-delimited top-level field `field` of a message. */
static int walk_len_field(const uint8_t *b, size_t n, unsigned field, const uint8_t **out, size_t *len) {
  size_t i = 0;
  while (i < n) {
    uint64_t key = 0, v = 0;
    for (int s = 0;; s += 7) { key |= (uint64_t)(b[i] & 0x7f) << s; if (!(b[i++] & 0x80)) break; }
    unsigned f = (unsigned)(key >> 3), w = (unsigned)(key & 7);
    if (w == 0) {
      while (b[i++] & 0x80) {}
    } else if (w == 5) {
      i += 4;
    } else if (w == 1) {
      i += 8;
    } else if (w == 2) {
      for (int s = 0;; s += 7) { v |= (uint64_t)(b[i] & 0x7f) << s; if (!(b[i++] & 0x80)) break; }
      if (f == field) {
        *out = b + i;
        *len = (size_t)v;
        return 1;
      }
      i += (size_t)v;
    } else {
      return 0;
    }
  }
  return 0;
}

/* ------------------------------------------------- node-test models --- */

/* test_abs/model.onnx, read by hand: ir_version (1) 7; graph (7): node (1)
 * {input 'x', output 'y', op_type 'Abs'}, name 'test_abs', input (11) 'x' and
 * output (12) 'y', both tensor_type elem_type 1 (float), dims 3,4,5;
 * opset_import (8) {domain '', version 13}. */
static void test_abs_model(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_model *m = load_model("test_abs");
  assert_int_equal(m->ir_version, 7);
  assert_string_equal(m->producer_name, "backend-test");
  assert_int_equal(m->n_opsets, 1);
  assert_string_equal(m->opsets[0].domain, "");
  assert_int_equal(m->opsets[0].version, 13);
  assert_int_equal(em_onnx_model_opset(m, ""), 13);
  assert_int_equal(em_onnx_model_opset(m, "ai.onnx"), 13);
  assert_int_equal(em_onnx_model_opset(m, "ai.onnx.ml"), -1);
  const em_onnx_graph *g = &m->graph;
  assert_string_equal(g->name, "test_abs");
  assert_int_equal(g->n_nodes, 1);
  assert_string_equal(g->nodes[0].op_type, "Abs");
  assert_string_equal(g->nodes[0].domain, "");
  assert_string_equal(g->nodes[0].name, "");
  assert_int_equal(g->nodes[0].n_inputs, 1);
  assert_string_equal(g->nodes[0].inputs[0], "x");
  assert_int_equal(g->nodes[0].n_outputs, 1);
  assert_string_equal(g->nodes[0].outputs[0], "y");
  assert_int_equal(g->nodes[0].n_attrs, 0);
  assert_int_equal(g->n_initializers, 0);
  static const int64_t d345[] = {3, 4, 5};
  assert_int_equal(g->n_inputs, 1);
  assert_string_equal(g->inputs[0].name, "x");
  assert_type_dims(&g->inputs[0].type, EM_ONNX_FLOAT, d345, 3);
  assert_int_equal(g->n_outputs, 1);
  assert_string_equal(g->outputs[0].name, "y");
  assert_type_dims(&g->outputs[0].type, EM_ONNX_FLOAT, d345, 3);
  em_onnx_model_free(m);
}

/* test_abs data: the reader's buffer is exactly the file's raw_data (field 9,
 * found by the walk above), its dims are the file's 3,4,5, and the output is
 * fabsf of the input element by element. */
static void test_abs_data(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_tensor *x = load_tensor("test_abs", "test_data_set_0/input_0.pb");
  em_onnx_tensor *y = load_tensor("test_abs", "test_data_set_0/output_0.pb");
  static const int64_t d345[] = {3, 4, 5};
  assert_string_equal(x->name, "x");
  assert_string_equal(y->name, "y");
  assert_int_equal(x->dtype, EM_ONNX_FLOAT);
  assert_dims(x->dims, x->rank, d345, 3);
  assert_dims(y->dims, y->rank, d345, 3);
  assert_int_equal(x->n_elements, 60);
  assert_int_equal(x->nbytes, 240);
  assert_int_equal((uintptr_t)x->data % 64, 0);

  size_t n;
  uint8_t *file = read_all(tpath("test_abs", "test_data_set_0/input_0.pb"), &n);
  const uint8_t *raw;
  size_t raw_len;
  assert_true(walk_len_field(file, n, 9, &raw, &raw_len));
  assert_int_equal(raw_len, 240);
  assert_memory_equal(x->data, raw, 240);
  free(file);

  int negatives = 0;
  for (size_t i = 0; i < 60; i++) {
    negatives += f32_at(x, i) < 0;
    assert_true(f32_at(y, i) == fabsf(f32_at(x, i)));
  }
  assert_true(negatives > 0); /* the check above would be vacuous on |x| == x */
  em_onnx_tensor_free(x);
  em_onnx_tensor_free(y);
}

/* test_add_bcast: inputs x [3,4,5] and y [5] (broadcast along the last axis). */
static void test_add_bcast(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_model *m = load_model("test_add_bcast");
  const em_onnx_graph *g = &m->graph;
  assert_int_equal(g->n_nodes, 1);
  assert_string_equal(g->nodes[0].op_type, "Add");
  assert_int_equal(g->nodes[0].n_inputs, 2);
  assert_string_equal(g->nodes[0].inputs[0], "x");
  assert_string_equal(g->nodes[0].inputs[1], "y");
  static const int64_t d345[] = {3, 4, 5}, d5[] = {5};
  assert_type_dims(&g->inputs[0].type, EM_ONNX_FLOAT, d345, 3);
  assert_type_dims(&g->inputs[1].type, EM_ONNX_FLOAT, d5, 1);
  em_onnx_tensor *a = load_tensor("test_add_bcast", "test_data_set_0/input_0.pb");
  em_onnx_tensor *b = load_tensor("test_add_bcast", "test_data_set_0/input_1.pb");
  em_onnx_tensor *c = load_tensor("test_add_bcast", "test_data_set_0/output_0.pb");
  assert_dims(b->dims, b->rank, d5, 1);
  for (size_t i = 0; i < 60; i++) assert_true(f32_at(c, i) == f32_at(a, i) + f32_at(b, i % 5));
  em_onnx_tensor_free(a);
  em_onnx_tensor_free(b);
  em_onnx_tensor_free(c);
  em_onnx_model_free(m);
}

/* test_conv_with_strides_padding, read by hand: node Conv (x, W) -> y with
 * kernel_shape ints 3,3 (type 7), pads ints 1,1,1,1, strides ints 2,2;
 * x [1,1,7,5], W [1,1,3,3], y [1,1,4,3]; ir_version 6, opset 11. The output
 * is recomputed with a naive convolution from the loaded x and W. */
static void test_conv_strides_padding(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  const char *t = "test_conv_with_strides_padding";
  em_onnx_model *m = load_model(t);
  assert_int_equal(m->ir_version, 6);
  assert_int_equal(em_onnx_model_opset(m, ""), 11);
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "Conv");
  assert_int_equal(n->n_attrs, 3);
  static const struct { const char *name; size_t n; int64_t v[4]; } want[] = {
    {"kernel_shape", 2, {3, 3}}, {"pads", 4, {1, 1, 1, 1}}, {"strides", 2, {2, 2}}};
  for (size_t i = 0; i < 3; i++) {
    const em_onnx_attr *a = em_onnx_node_attr(n, want[i].name);
    assert_non_null(a);
    assert_ptr_equal(a, &n->attrs[i]); /* file order is kept */
    assert_int_equal(a->type, EM_ONNX_ATTR_INTS);
    assert_int_equal(a->n, want[i].n);
    for (size_t k = 0; k < want[i].n; k++) assert_int_equal(a->ints[k], want[i].v[k]);
  }
  assert_null(em_onnx_node_attr(n, "dilations"));
  static const int64_t dx[] = {1, 1, 7, 5}, dw[] = {1, 1, 3, 3}, dy[] = {1, 1, 4, 3};
  assert_type_dims(&m->graph.inputs[0].type, EM_ONNX_FLOAT, dx, 4);
  assert_type_dims(&m->graph.inputs[1].type, EM_ONNX_FLOAT, dw, 4);
  assert_type_dims(&m->graph.outputs[0].type, EM_ONNX_FLOAT, dy, 4);

  em_onnx_tensor *x = load_tensor(t, "test_data_set_0/input_0.pb");
  em_onnx_tensor *w = load_tensor(t, "test_data_set_0/input_1.pb");
  em_onnx_tensor *y = load_tensor(t, "test_data_set_0/output_0.pb");
  assert_dims(x->dims, x->rank, dx, 4);
  assert_dims(w->dims, w->rank, dw, 4);
  assert_dims(y->dims, y->rank, dy, 4);
  for (int oh = 0; oh < 4; oh++)
    for (int ow = 0; ow < 3; ow++) {
      double acc = 0;
      for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) {
          int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
          if (ih < 0 || ih >= 7 || iw < 0 || iw >= 5) continue;
          acc += (double)f32_at(x, (size_t)(ih * 5 + iw)) * f32_at(w, (size_t)(kh * 3 + kw));
        }
      assert_float_equal(f32_at(y, (size_t)(oh * 3 + ow)), acc, 1e-4);
    }
  em_onnx_tensor_free(x);
  em_onnx_tensor_free(w);
  em_onnx_tensor_free(y);
  em_onnx_model_free(m);
}

/* test_reduce_sum_keepdims_example, read by hand: ReduceSum(data, axes) ->
 * reduced, keepdims int 1 (type 2). input_0: dims 3,2,2, float raw 1..12;
 * input_1: dims 1, data_type 7, raw 01 00.. (axes = [1]); output_0: dims
 * 3,1,2, raw 0x40800000 0x40c00000 0x41400000 0x41600000 0x41a00000
 * 0x41b00000 = 4 6 12 14 20 22. */
static void test_reduce_sum_keepdims(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  const char *t = "test_reduce_sum_keepdims_example";
  em_onnx_model *m = load_model(t);
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "ReduceSum");
  assert_int_equal(n->n_inputs, 2);
  assert_string_equal(n->inputs[1], "axes");
  assert_string_equal(n->outputs[0], "reduced");
  const em_onnx_attr *k = em_onnx_node_attr(n, "keepdims");
  assert_non_null(k);
  assert_int_equal(k->type, EM_ONNX_ATTR_INT);
  assert_int_equal(k->i, 1);
  assert_int_equal(m->graph.inputs[1].type.dtype, EM_ONNX_INT64);

  em_onnx_tensor *data = load_tensor(t, "test_data_set_0/input_0.pb");
  em_onnx_tensor *axes = load_tensor(t, "test_data_set_0/input_1.pb");
  em_onnx_tensor *out = load_tensor(t, "test_data_set_0/output_0.pb");
  static const int64_t d322[] = {3, 2, 2}, d1[] = {1}, d312[] = {3, 1, 2};
  assert_dims(data->dims, data->rank, d322, 3);
  for (size_t i = 0; i < 12; i++) assert_true(f32_at(data, i) == (float)(i + 1));
  assert_int_equal(axes->dtype, EM_ONNX_INT64);
  assert_dims(axes->dims, axes->rank, d1, 1);
  static const uint8_t one64[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  assert_memory_equal(axes->data, one64, 8);
  assert_dims(out->dims, out->rank, d312, 3);
  static const float sums[] = {4, 6, 12, 14, 20, 22};
  for (size_t i = 0; i < 6; i++) assert_true(f32_at(out, i) == sums[i]);
  em_onnx_tensor_free(data);
  em_onnx_tensor_free(axes);
  em_onnx_tensor_free(out);
  em_onnx_model_free(m);
}

/* Float and string attributes, by hand: test_leakyrelu alpha f (field 2,
 * fixed32 0x3dcccccd = 0.1f), type 1; test_averagepool_2d_same_upper auto_pad
 * s (field 4) 'SAME_UPPER', type 3, kernel_shape ints 2,2; x [1,3,32,32]. */
static void test_float_and_string_attrs(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_model *m = load_model("test_leakyrelu");
  assert_int_equal(m->ir_version, 8);
  const em_onnx_attr *a = em_onnx_node_attr(&m->graph.nodes[0], "alpha");
  assert_non_null(a);
  assert_int_equal(a->type, EM_ONNX_ATTR_FLOAT);
  assert_true(a->f == 0.1f);
  em_onnx_model_free(m);

  m = load_model("test_averagepool_2d_same_upper");
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "AveragePool");
  a = em_onnx_node_attr(n, "auto_pad");
  assert_non_null(a);
  assert_int_equal(a->type, EM_ONNX_ATTR_STRING);
  assert_int_equal(a->s.len, 10);
  assert_string_equal(a->s.data, "SAME_UPPER");
  a = em_onnx_node_attr(n, "kernel_shape");
  assert_int_equal(a->type, EM_ONNX_ATTR_INTS);
  assert_int_equal(a->n, 2);
  static const int64_t dx[] = {1, 3, 32, 32};
  assert_type_dims(&m->graph.inputs[0].type, EM_ONNX_FLOAT, dx, 4);
  em_onnx_model_free(m);
}

/* test_constant: Constant -> 'values' with value tensor (type 4) dims 5,5,
 * data_type 1, the 25 floats in float_data (field 4, packed), name
 * 'const_tensor'. The test's output_0.pb holds the same numbers in raw_data:
 * the two encodings must give the same bytes. */
static void test_constant_float_data(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_model *m = load_model("test_constant");
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "Constant");
  assert_int_equal(n->n_inputs, 0);
  assert_string_equal(n->outputs[0], "values");
  const em_onnx_attr *a = em_onnx_node_attr(n, "value");
  assert_non_null(a);
  assert_int_equal(a->type, EM_ONNX_ATTR_TENSOR);
  static const int64_t d55[] = {5, 5};
  assert_string_equal(a->t->name, "const_tensor");
  assert_int_equal(a->t->dtype, EM_ONNX_FLOAT);
  assert_dims(a->t->dims, a->t->rank, d55, 2);
  assert_int_equal(a->t->nbytes, 100);
  em_onnx_tensor *out = load_tensor("test_constant", "test_data_set_0/output_0.pb");
  assert_dims(out->dims, out->rank, d55, 2);
  assert_memory_equal(a->t->data, out->data, 100);
  /* The first float, by hand from the file: 78 cc e1 3f = 1.7640524f. */
  assert_float_equal(f32_at(a->t, 0), 1.7640524, 1e-6);
  em_onnx_tensor_free(out);
  em_onnx_tensor_free(a->t); /* a model's tensor: must be a no-op */
  em_onnx_model_free(m);
}

/* test_if, by hand: If(cond) -> res with else_branch (field 5 of the node's
 * attribute 1, type 5) = graph 'else_body' {Constant -> 'else_out', value
 * dims 5, float raw 5 4 3 2 1; output 'else_out' float [5]} and then_branch =
 * 'then_body' {Constant -> 'then_out', raw 1 2 3 4 5}. */
static void test_if_graph_attrs(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_model *m = load_model("test_if");
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "If");
  assert_string_equal(n->attrs[0].name, "else_branch");
  assert_string_equal(n->attrs[1].name, "then_branch");
  static const struct { const char *attr, *graph, *out; float first; } want[] = {
    {"else_branch", "else_body", "else_out", 5}, {"then_branch", "then_body", "then_out", 1}};
  for (size_t i = 0; i < 2; i++) {
    const em_onnx_attr *a = em_onnx_node_attr(n, want[i].attr);
    assert_int_equal(a->type, EM_ONNX_ATTR_GRAPH);
    const em_onnx_graph *g = a->g;
    assert_string_equal(g->name, want[i].graph);
    assert_int_equal(g->n_nodes, 1);
    assert_string_equal(g->nodes[0].op_type, "Constant");
    assert_string_equal(g->nodes[0].outputs[0], want[i].out);
    const em_onnx_tensor *v = em_onnx_node_attr(&g->nodes[0], "value")->t;
    assert_int_equal(v->n_elements, 5);
    for (size_t k = 0; k < 5; k++)
      assert_true(f32_at(v, k) == (i == 0 ? want[i].first - (float)k : want[i].first + (float)k));
    assert_int_equal(g->n_outputs, 1);
    static const int64_t d5[] = {5};
    assert_type_dims(&g->outputs[0].type, EM_ONNX_FLOAT, d5, 1);
  }
  em_onnx_model_free(m);
}

/* test_loop11, by hand: Loop(trip_count, cond, y) -> res_y, res_scan, body
 * 'loop_body' with nodes Identity Constant Constant Add Unsqueeze Unsqueeze
 * Slice Add Identity; Constant 'one' = value {data_type 7, int64_data (field
 * 7) [1], no dims: a scalar}; Constant 'x' = {dims 5, float_data 1..5};
 * Unsqueeze axes ints [0]; body input iter_count int64 with an empty shape
 * (rank 0), y_in float [1]; res_scan [5,1]; opset 11. */
static void test_loop_body(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  em_onnx_model *m = load_model("test_loop11");
  assert_int_equal(em_onnx_model_opset(m, ""), 11);
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "Loop");
  static const char *const ins[] = {"trip_count", "cond", "y"};
  assert_int_equal(n->n_inputs, 3);
  for (size_t i = 0; i < 3; i++) assert_string_equal(n->inputs[i], ins[i]);
  assert_string_equal(n->outputs[0], "res_y");
  assert_string_equal(n->outputs[1], "res_scan");
  const em_onnx_attr *body = em_onnx_node_attr(n, "body");
  assert_int_equal(body->type, EM_ONNX_ATTR_GRAPH);
  const em_onnx_graph *g = body->g;
  assert_string_equal(g->name, "loop_body");
  static const char *const ops[] = {"Identity", "Constant", "Constant", "Add", "Unsqueeze",
                                    "Unsqueeze", "Slice", "Add", "Identity"};
  assert_int_equal(g->n_nodes, 9);
  for (size_t i = 0; i < 9; i++) assert_string_equal(g->nodes[i].op_type, ops[i]);
  const em_onnx_tensor *one = em_onnx_node_attr(&g->nodes[2], "value")->t;
  assert_string_equal(one->name, "const_tensor_one");
  assert_int_equal(one->dtype, EM_ONNX_INT64);
  assert_int_equal(one->rank, 0);
  assert_null(one->dims);
  assert_int_equal(one->n_elements, 1);
  static const uint8_t one64[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  assert_memory_equal(one->data, one64, 8);
  const em_onnx_tensor *x = em_onnx_node_attr(&g->nodes[1], "value")->t;
  for (size_t k = 0; k < 5; k++) assert_true(f32_at(x, k) == (float)(k + 1));
  const em_onnx_attr *axes = em_onnx_node_attr(&g->nodes[4], "axes");
  assert_int_equal(axes->type, EM_ONNX_ATTR_INTS);
  assert_int_equal(axes->n, 1);
  assert_int_equal(axes->ints[0], 0);
  assert_int_equal(g->n_inputs, 3);
  assert_string_equal(g->inputs[0].name, "iter_count");
  assert_type_dims(&g->inputs[0].type, EM_ONNX_INT64, NULL, 0);
  assert_int_equal(g->inputs[1].type.dtype, EM_ONNX_BOOL);
  static const int64_t d1[] = {1}, d51[] = {5, 1};
  assert_type_dims(&g->inputs[2].type, EM_ONNX_FLOAT, d1, 1);
  assert_type_dims(&m->graph.outputs[1].type, EM_ONNX_FLOAT, d51, 2);
  em_onnx_model_free(m);
}

/* test_sequence_map_add_1_sequence_1_tensor, by hand: input x0 type
 * sequence_type (field 4) of tensor float with dim_param 'N'; input x1 tensor
 * float [N]; output y0 sequence like x0; opset 17. input_0.pb is a
 * SequenceProto (field 1 name 'x0', 2 elem_type 1, 3 tensor values). */
static void test_sequence_types(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  const char *t = "test_sequence_map_add_1_sequence_1_tensor";
  em_onnx_model *m = load_model(t);
  assert_int_equal(em_onnx_model_opset(m, ""), 17);
  const em_onnx_graph *g = &m->graph;
  assert_string_equal(g->inputs[0].name, "x0");
  assert_int_equal(g->inputs[0].type.kind, EM_ONNX_VALUE_SEQUENCE);
  const em_onnx_type *e = g->inputs[0].type.elem;
  assert_non_null(e);
  assert_int_equal(e->kind, EM_ONNX_VALUE_TENSOR);
  assert_int_equal(e->dtype, EM_ONNX_FLOAT);
  assert_int_equal(e->rank, 1);
  assert_int_equal(e->dims[0].value, -1);
  assert_string_equal(e->dims[0].param, "N");
  assert_int_equal(g->inputs[1].type.kind, EM_ONNX_VALUE_TENSOR);
  assert_int_equal(g->inputs[1].type.dims[0].value, -1);
  assert_string_equal(g->inputs[1].type.dims[0].param, "N");
  assert_int_equal(g->outputs[0].type.kind, EM_ONNX_VALUE_SEQUENCE);
  const em_onnx_attr *body = em_onnx_node_attr(&g->nodes[0], "body");
  assert_int_equal(body->type, EM_ONNX_ATTR_GRAPH);
  em_onnx_model_free(m);

  em_onnx_tensor *x = NULL;
  const char *p = tpath(t, "test_data_set_0/input_0.pb");
  assert_int_equal(em_onnx_tensor_load(p, &x), EM_ERR_UNSUPPORTED);
  assert_null(x);
  assert_msg_has("unsupported value type");
  assert_msg_has(p);
  x = load_tensor(t, "test_data_set_0/input_1.pb");
  assert_int_equal(x->dtype, EM_ONNX_FLOAT);
  em_onnx_tensor_free(x);
}

/* test_optional_has_element_empty: input an empty OptionalProto (field 1
 * 'optional_input', field 2 elem_type 0): unsupported; output_0.pb: bool
 * scalar (data_type 9, no dims, raw 00). test_if_opt: then_branch's Optional
 * node has attribute 'type' (type 13, TypeProto field 14) = sequence of tensor
 * float [5]; the else branch's output is optional(sequence(tensor float [5])). */
static void test_optional_types(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  const char *t = "test_optional_has_element_empty";
  em_onnx_model *m = load_model(t);
  assert_int_equal(m->graph.inputs[0].type.kind, EM_ONNX_VALUE_OPTIONAL);
  em_onnx_model_free(m);
  em_onnx_tensor *x = NULL;
  assert_int_equal(em_onnx_tensor_load(tpath(t, "test_data_set_0/input_0.pb"), &x), EM_ERR_UNSUPPORTED);
  assert_msg_has("unsupported value type");
  x = load_tensor(t, "test_data_set_0/output_0.pb");
  assert_int_equal(x->dtype, EM_ONNX_BOOL);
  assert_int_equal(x->rank, 0);
  assert_int_equal(x->n_elements, 1);
  assert_int_equal(((uint8_t *)x->data)[0], 0);
  em_onnx_tensor_free(x);

  m = load_model("test_if_opt");
  const em_onnx_attr *then_b = em_onnx_node_attr(&m->graph.nodes[0], "then_branch");
  const em_onnx_node *opt = &then_b->g->nodes[0];
  assert_string_equal(opt->op_type, "Optional");
  const em_onnx_attr *ty = em_onnx_node_attr(opt, "type");
  assert_int_equal(ty->type, EM_ONNX_ATTR_TYPE);
  assert_int_equal(ty->tp->kind, EM_ONNX_VALUE_SEQUENCE);
  assert_int_equal(ty->tp->elem->kind, EM_ONNX_VALUE_TENSOR);
  assert_int_equal(ty->tp->elem->dtype, EM_ONNX_FLOAT);
  assert_int_equal(ty->tp->elem->dims[0].value, 5);
  const em_onnx_graph *eb = em_onnx_node_attr(&m->graph.nodes[0], "else_branch")->g;
  const em_onnx_type *o = &eb->outputs[0].type;
  assert_int_equal(o->kind, EM_ONNX_VALUE_OPTIONAL);
  assert_int_equal(o->elem->kind, EM_ONNX_VALUE_SEQUENCE);
  assert_int_equal(o->elem->elem->kind, EM_ONNX_VALUE_TENSOR);
  em_onnx_model_free(m);
}

/* ------------------------------------------- hand-encoded tensors --- */

/* TensorProto fields (onnx.proto): 1 dims, 2 data_type, 3 segment, 4
 * float_data, 5 int32_data, 6 string_data, 7 int64_data, 8 name, 9 raw_data,
 * 10 double_data, 11 uint64_data, 13 external_data, 14 data_location. */
static em_status tensor_of(const pb *p, em_onnx_tensor **t) {
  return em_onnx_tensor_from_buffer(p->b, p->n, "hand.pb", t);
}

static void test_typed_fields(void **state) {
  (void)state;
  em_onnx_tensor *t;
  pb p = {0}, packed = {0};

  /* float_data packed: 1.5f = 0x3fc00000, -2.0f = 0xc0000000. */
  pb_int(&p, 1, 2), pb_int(&p, 2, 1), pb_str(&p, 8, "f");
  static const uint8_t fl[] = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0};
  pb_bytes(&p, 4, fl, 8);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_string_equal(t->name, "f");
  assert_int_equal(t->dtype, EM_ONNX_FLOAT);
  assert_memory_equal(t->data, fl, 8);
  em_onnx_tensor_free(t), pb_free(&p);

  /* The same floats unpacked (one fixed32 field each) read the same. */
  pb_int(&p, 1, 2), pb_int(&p, 2, 1), pb_f32(&p, 4, 1.5f), pb_f32(&p, 4, -2.0f);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_memory_equal(t->data, fl, 8);
  em_onnx_tensor_free(t), pb_free(&p);

  /* int8 in int32_data: -1 is a 10-byte varint; 127. */
  pb_int(&p, 1, 2), pb_int(&p, 2, 3), pb_int(&p, 5, (uint64_t)-1), pb_int(&p, 5, 127);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->dtype, EM_ONNX_INT8);
  assert_int_equal(t->nbytes, 2);
  static const uint8_t i8[] = {0xff, 0x7f};
  assert_memory_equal(t->data, i8, 2);
  em_onnx_tensor_free(t), pb_free(&p);

  /* float16 bits in int32_data: 0x3c00 (1.0) -> bytes 00 3c; bfloat16 0x3f80. */
  pb_int(&p, 1, 1), pb_int(&p, 2, 10), pb_int(&p, 5, 0x3c00);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->dtype, EM_ONNX_FLOAT16);
  static const uint8_t h1[] = {0x00, 0x3c};
  assert_memory_equal(t->data, h1, 2);
  em_onnx_tensor_free(t), pb_free(&p);
  pb_int(&p, 1, 1), pb_int(&p, 2, 16), pb_int(&p, 5, 0x3f80);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->dtype, EM_ONNX_BFLOAT16);
  static const uint8_t b1[] = {0x80, 0x3f};
  assert_memory_equal(t->data, b1, 2);
  em_onnx_tensor_free(t), pb_free(&p);

  /* bool in int32_data, packed: 1 0 1. */
  pb_int(&p, 1, 3), pb_int(&p, 2, 9);
  pb_varint(&packed, 1), pb_varint(&packed, 0), pb_varint(&packed, 1);
  pb_msg(&p, 5, &packed);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  static const uint8_t bools[] = {1, 0, 1};
  assert_memory_equal(t->data, bools, 3);
  em_onnx_tensor_free(t), pb_free(&p), pb_free(&packed);

  /* int64_data -2 (10-byte varint) -> fe ff ff ff ff ff ff ff. */
  pb_int(&p, 2, 7), pb_int(&p, 7, (uint64_t)-2);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->rank, 0);
  static const uint8_t m2[8] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  assert_memory_equal(t->data, m2, 8);
  em_onnx_tensor_free(t), pb_free(&p);

  /* uint32 in uint64_data: 0xffffffff fits; uint64 keeps all 64 bits. */
  pb_int(&p, 1, 1), pb_int(&p, 2, 12), pb_int(&p, 11, 0xffffffffu);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->dtype, EM_ONNX_UINT32);
  static const uint8_t u32[4] = {0xff, 0xff, 0xff, 0xff};
  assert_memory_equal(t->data, u32, 4);
  em_onnx_tensor_free(t), pb_free(&p);

  /* double_data 0.25 = 0x3fd0000000000000, as a fixed64 field. */
  pb_int(&p, 1, 1), pb_int(&p, 2, 11), pb_key(&p, 10, 1);
  static const uint8_t d25[8] = {0, 0, 0, 0, 0, 0, 0xd0, 0x3f};
  pb_raw(&p, d25, 8);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->dtype, EM_ONNX_DOUBLE);
  assert_memory_equal(t->data, d25, 8);
  em_onnx_tensor_free(t), pb_free(&p);

  /* A zero-element tensor without data is valid and has a usable pointer. */
  pb_int(&p, 1, 2), pb_int(&p, 1, 0), pb_int(&p, 2, 1);
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->n_elements, 0);
  assert_int_equal(t->nbytes, 0);
  assert_non_null(t->data);
  em_onnx_tensor_free(t), pb_free(&p);
}

static void expect_tensor_error(pb *p, em_status want, const char *n1, const char *n2) {
  em_onnx_tensor *t = (em_onnx_tensor *)(uintptr_t)1;
  em_clear_error();
  em_status s = tensor_of(p, &t);
  if (s != want) fail_msg("status %d, expected %d (%s)", s, want, em_last_error());
  assert_null(t);
  assert_msg_has("hand.pb");
  if (n1) assert_msg_has(n1);
  if (n2) assert_msg_has(n2);
  pb_free(p);
}

static void test_tensor_errors(void **state) {
  (void)state;
  pb p = {0};
  uint8_t twenty[20] = {0};

  /* dims 2,3 float: 24 bytes expected, 20 given. */
  pb_int(&p, 1, 2), pb_int(&p, 1, 3), pb_int(&p, 2, 1), pb_str(&p, 8, "w"), pb_bytes(&p, 9, twenty, 20);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "24 bytes expected", "raw_data holds 20");
  /* dims 3 float, float_data 2 values. */
  pb_int(&p, 1, 3), pb_int(&p, 2, 1), pb_f32(&p, 4, 1), pb_f32(&p, 4, 2);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "3 elements expected", "float_data holds 2");
  /* dims 3 float, no data at all. */
  pb_int(&p, 1, 3), pb_int(&p, 2, 1);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "3 elements expected", "no raw_data");
  /* int64 tensor with its values in float_data. */
  pb_int(&p, 2, 7), pb_f32(&p, 4, 1);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "float_data", "int64");
  /* raw_data and int64_data both. */
  pb_int(&p, 2, 7), pb_int(&p, 7, 1), pb_bytes(&p, 9, twenty, 8);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "both raw_data and int64_data", NULL);
  /* int8 out of range in int32_data. */
  pb_int(&p, 1, 1), pb_int(&p, 2, 3), pb_int(&p, 5, 128);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "int32_data[0] = 128", "int8");
  /* uint32 too big in uint64_data. */
  pb_int(&p, 2, 12), pb_int(&p, 11, 0x100000000ull);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "4294967296", "uint32");
  /* no data_type; an unknown one; string and complex elements. */
  pb_int(&p, 1, 1), pb_bytes(&p, 9, twenty, 4);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "data_type 0", NULL);
  pb_int(&p, 2, 99);
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "data_type 99", NULL);
  pb_int(&p, 1, 1), pb_int(&p, 2, 8), pb_str(&p, 6, "hello"), pb_str(&p, 8, "s");
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "string", NULL);
  pb_int(&p, 2, 14), pb_bytes(&p, 9, twenty, 8);
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "complex64", NULL);
  /* A negative dimension; dims whose product overflows 64 bits. */
  pb_int(&p, 1, (uint64_t)-4), pb_int(&p, 2, 1);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "[-4]", "negative");
  pb_int(&p, 1, 1ull << 33), pb_int(&p, 1, 1ull << 33), pb_int(&p, 2, 1);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "overflow", NULL);
  /* Dims that claim 2^40 elements with no data: refused before any allocation. */
  pb_int(&p, 1, 1ull << 20), pb_int(&p, 1, 1ull << 20), pb_int(&p, 2, 1);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "1099511627776 elements expected", NULL);
  /* External data (data_location 1). */
  pb_int(&p, 2, 1), pb_int(&p, 14, 1);
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "external", NULL);

  /* Framing: a varint cut short, a length past the end, a group. */
  static const uint8_t cut[] = {0x08, 0x80};
  pb_raw(&p, cut, 2);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "truncated varint of field 1 at byte 0", NULL);
  pb_int(&p, 2, 1), pb_key(&p, 9, 2), pb_varint(&p, 100), pb_raw(&p, twenty, 4);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "claims 100 bytes but only 4 remain", NULL);
  pb_key(&p, 1, 3);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "wire type 3", NULL);
  /* Right framing, wrong wire type for the field: protobuf-c refuses it. */
  pb_key(&p, 2, 1), pb_raw(&p, twenty, 8);
  expect_tensor_error(&p, EM_ERR_CORRUPT, "protobuf-c rejected", NULL);
}

/* SequenceProto / OptionalProto (onnx-data.proto: 1 name, 2 elem_type, 3
 * tensor_values / tensor_value, 5 sequence_value) must be refused as values. */
static void test_non_tensor_values(void **state) {
  (void)state;
  pb p = {0}, inner = {0};
  /* A sequence of one float scalar tensor. */
  pb_int(&inner, 2, 1), pb_bytes(&inner, 9, "\0\0\x80\x3f", 4);
  pb_str(&p, 1, "seq"), pb_int(&p, 2, 1), pb_msg(&p, 3, &inner);
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "unsupported value type", NULL);
  /* An empty sequence: name and elem_type only. */
  pb_str(&p, 1, "empty_seq"), pb_int(&p, 2, 1);
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "unsupported value type", NULL);
  /* An optional holding a sequence (elem_type 3, field 5). */
  pb_str(&p, 1, "opt"), pb_int(&p, 2, 3), pb_msg(&p, 5, &inner);
  expect_tensor_error(&p, EM_ERR_UNSUPPORTED, "unsupported value type", NULL);
  pb_free(&inner);
  /* A tensor with packed dims and a name reads as a tensor: dims 2 (0x02 is
   * not a printable name byte), float, raw 8 bytes. */
  static const uint8_t dims[] = {2};
  pb_bytes(&p, 1, dims, 1), pb_int(&p, 2, 1), pb_str(&p, 8, "t"), pb_bytes(&p, 9, "\0\0\0\0\0\0\0\0", 8);
  em_onnx_tensor *t;
  assert_int_equal(tensor_of(&p, &t), EM_OK);
  assert_int_equal(t->rank, 1);
  assert_int_equal(t->dims[0], 2);
  em_onnx_tensor_free(t), pb_free(&p);
}

/* --------------------------------------------- hand-encoded models --- */

/* ModelProto: 1 ir_version, 7 graph, 8 opset_import, 25 functions.
 * GraphProto: 1 node, 2 name, 5 initializer, 11 input, 12 output.
 * NodeProto: 1 input, 2 output, 3 name, 4 op_type, 5 attribute, 7 domain.
 * AttributeProto: 1 name, 2 f, 3 i, 5 t, 6 g, 20 type, 22 sparse_tensor. */
static em_status model_of(const pb *p, em_onnx_model **m) {
  return em_onnx_model_from_buffer(p->b, p->n, "hand.onnx", m);
}

static void expect_model_error(pb *p, em_status want, const char *n1) {
  em_onnx_model *m = (em_onnx_model *)(uintptr_t)1;
  em_status s = model_of(p, &m);
  if (s != want) fail_msg("status %d, expected %d (%s)", s, want, em_last_error());
  assert_null(m);
  assert_msg_has("hand.onnx");
  if (n1) assert_msg_has(n1);
  pb_free(p);
}

/* A model around one node's bytes. */
static void model_with_node(pb *model, const pb *node) {
  pb g = {0}, ops = {0};
  pb_msg(&g, 1, node), pb_str(&g, 2, "g");
  pb_str(&ops, 1, "com.example"), pb_int(&ops, 2, 3);
  pb_int(model, 1, 8), pb_msg(model, 7, &g), pb_msg(model, 8, &ops);
  pb_free(&g), pb_free(&ops);
}

static void test_model_hand(void **state) {
  (void)state;
  pb node = {0}, attr = {0}, model = {0};
  /* An attribute without `type` (IR version 1 style) whose only value is f. */
  pb_str(&attr, 1, "alpha"), pb_f32(&attr, 2, 0.5f);
  pb_str(&node, 1, "a"), pb_str(&node, 1, ""), pb_str(&node, 2, "b"), pb_str(&node, 3, "n0");
  pb_str(&node, 4, "Foo"), pb_str(&node, 7, "com.example"), pb_msg(&node, 5, &attr);
  model_with_node(&model, &node);
  em_onnx_model *m;
  if (model_of(&model, &m) != EM_OK) fail_msg("%s", em_last_error());
  assert_int_equal(m->ir_version, 8);
  assert_int_equal(em_onnx_model_opset(m, "com.example"), 3);
  assert_int_equal(em_onnx_model_opset(m, ""), -1);
  const em_onnx_node *n = &m->graph.nodes[0];
  assert_string_equal(n->op_type, "Foo");
  assert_string_equal(n->domain, "com.example");
  assert_string_equal(n->name, "n0");
  assert_int_equal(n->n_inputs, 2);
  assert_string_equal(n->inputs[1], ""); /* an omitted optional input */
  assert_int_equal(n->attrs[0].type, EM_ONNX_ATTR_FLOAT);
  assert_true(n->attrs[0].f == 0.5f);
  assert_int_equal(m->graph.n_inputs, 0);
  em_onnx_model_free(m);
  pb_free(&model), pb_free(&attr), pb_free(&node);

  /* Attribute type 11 (sparse_tensor): unsupported, naming the attribute. */
  pb_str(&attr, 1, "sp"), pb_int(&attr, 20, 11);
  pb_str(&node, 4, "Foo"), pb_msg(&node, 5, &attr);
  model_with_node(&model, &node);
  expect_model_error(&model, EM_ERR_UNSUPPORTED, "attribute 'sp' is of type sparse_tensor");
  pb_free(&attr), pb_free(&node);
  /* Attribute type 42: corrupt. */
  pb_str(&attr, 1, "odd"), pb_int(&attr, 20, 42);
  pb_str(&node, 4, "Foo"), pb_msg(&node, 5, &attr);
  model_with_node(&model, &node);
  expect_model_error(&model, EM_ERR_CORRUPT, "type 42");
  pb_free(&attr), pb_free(&node);
  /* A tensor attribute with a size mismatch: the message names the path. */
  pb t = {0};
  pb_int(&t, 1, 4), pb_int(&t, 2, 1), pb_bytes(&t, 9, "\0\0\0\0", 4);
  pb_str(&attr, 1, "value"), pb_int(&attr, 20, 4), pb_msg(&attr, 5, &t);
  pb_str(&node, 4, "Constant"), pb_str(&node, 3, "c1"), pb_msg(&node, 5, &attr);
  model_with_node(&model, &node);
  expect_model_error(&model, EM_ERR_CORRUPT, "node 0 (Constant 'c1'): attribute 'value'");
  pb_free(&t), pb_free(&attr), pb_free(&node);
  /* A node without op_type. */
  pb_str(&node, 1, "x");
  model_with_node(&model, &node);
  expect_model_error(&model, EM_ERR_CORRUPT, "no op_type");
  pb_free(&node);
  /* No graph; empty bytes; local functions. */
  pb_int(&model, 1, 8);
  expect_model_error(&model, EM_ERR_CORRUPT, "no graph");
  em_onnx_model *none = NULL;
  assert_int_equal(em_onnx_model_from_buffer("", 0, "hand.onnx", &none), EM_ERR_CORRUPT);
  assert_null(none);
  pb fn = {0};
  pb_str(&fn, 1, "f");
  pb_str(&node, 4, "Foo");
  model_with_node(&model, &node);
  pb_msg(&model, 25, &fn);
  expect_model_error(&model, EM_ERR_UNSUPPORTED, "local functions");
  pb_free(&fn), pb_free(&node);
}

/* Graphs nested through graph attributes: 20 levels load; 40 levels
 * (3 messages each, 120 > the reader's limit) are refused before protobuf-c
 * would recurse through them. */
static void nested_model(pb *model, int levels) {
  pb g = {0};
  pb_str(&g, 2, "leaf");
  for (int i = 0; i < levels; i++) {
    pb attr = {0}, node = {0}, outer = {0};
    pb_str(&attr, 1, "body"), pb_int(&attr, 20, 5), pb_msg(&attr, 6, &g);
    pb_str(&node, 4, "Loop"), pb_msg(&node, 5, &attr);
    pb_msg(&outer, 1, &node), pb_str(&outer, 2, "level");
    pb_free(&g), pb_free(&attr), pb_free(&node);
    g = outer;
  }
  pb_int(model, 1, 8), pb_msg(model, 7, &g);
  pb_free(&g);
}

static void test_nesting(void **state) {
  (void)state;
  pb model = {0};
  nested_model(&model, 20);
  em_onnx_model *m;
  if (model_of(&model, &m) != EM_OK) fail_msg("%s", em_last_error());
  const em_onnx_graph *g = &m->graph;
  int depth = 0;
  while (g->n_nodes) g = em_onnx_node_attr(&g->nodes[0], "body")->g, depth++;
  assert_int_equal(depth, 20);
  assert_string_equal(g->name, "leaf");
  em_onnx_model_free(m);
  pb_free(&model);
  nested_model(&model, 40);
  expect_model_error(&model, EM_ERR_CORRUPT, "nest deeper than");
}

/* Missing files and directories fail with EM_ERR_IO naming the path. */
static void test_io_errors(void **state) {
  (void)state;
  em_onnx_model *m = NULL;
  em_onnx_tensor *t = NULL;
  assert_int_equal(em_onnx_model_load("/nonexistent/model.onnx", &m), EM_ERR_IO);
  assert_null(m);
  assert_msg_has("/nonexistent/model.onnx");
  assert_int_equal(em_onnx_tensor_load("/", &t), EM_ERR_IO);
  assert_msg_has("directory");
  assert_int_equal(em_onnx_model_load(NULL, &m), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_onnx_tensor_from_buffer(NULL, 4, NULL, &t), EM_ERR_INVALID_ARGUMENT);
}

/* Spot checks of the type table against onnx.proto's TensorProto.DataType. */
static void test_dtype_table(void **state) {
  (void)state;
  assert_int_equal(em_onnx_dtype_from_onnx(1), EM_ONNX_FLOAT);
  assert_int_equal(em_onnx_dtype_from_onnx(2), EM_ONNX_UINT8);
  assert_int_equal(em_onnx_dtype_from_onnx(3), EM_ONNX_INT8);
  assert_int_equal(em_onnx_dtype_from_onnx(7), EM_ONNX_INT64);
  assert_int_equal(em_onnx_dtype_from_onnx(9), EM_ONNX_BOOL);
  assert_int_equal(em_onnx_dtype_from_onnx(10), EM_ONNX_FLOAT16);
  assert_int_equal(em_onnx_dtype_from_onnx(11), EM_ONNX_DOUBLE);
  assert_int_equal(em_onnx_dtype_from_onnx(12), EM_ONNX_UINT32);
  assert_int_equal(em_onnx_dtype_from_onnx(13), EM_ONNX_UINT64);
  assert_int_equal(em_onnx_dtype_from_onnx(16), EM_ONNX_BFLOAT16);
  assert_int_equal(em_onnx_dtype_from_onnx(0), EM_ONNX_UNDEFINED);
  assert_int_equal(em_onnx_dtype_from_onnx(17), EM_ONNX_UNDEFINED);
  assert_int_equal(em_onnx_dtype_from_onnx(-1), EM_ONNX_UNDEFINED);
  assert_int_equal(em_onnx_dtype_size(EM_ONNX_BFLOAT16), 2);
  assert_int_equal(em_onnx_dtype_size(EM_ONNX_BOOL), 1);
  assert_int_equal(em_onnx_dtype_size(EM_ONNX_UINT64), 8);
  assert_int_equal(em_onnx_dtype_size(EM_ONNX_STRING), 0);
  assert_string_equal(em_onnx_dtype_name(EM_ONNX_FLOAT16), "float16");
  assert_string_equal(em_onnx_attr_type_name(EM_ONNX_ATTR_INTS), "ints");
}

/* Every prefix and 3000 byte-mutations of two real models and one tensor
 * give a status, never a crash (the sanitizer build checks memory too). */
static void test_damaged_files(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  static const char *const files[][2] = {
    {"test_loop11", "model.onnx"}, {"test_conv_with_strides_padding", "model.onnx"},
    {"test_abs", "test_data_set_0/input_0.pb"}};
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (size_t f = 0; f < 3; f++) {
    size_t n;
    uint8_t *orig = read_all(tpath(files[f][0], files[f][1]), &n);
    int is_model = strcmp(files[f][1], "model.onnx") == 0;
    uint8_t *buf = malloc(n);
    int ok = 0, failed = 0;
    for (size_t round = 0; round < n + 1000; round++) {
      size_t len = n;
      memcpy(buf, orig, n);
      if (round <= n) {
        len = round; /* every prefix */
      } else {
        for (int k = 0; k < 1 + (int)(rng % 4); k++) {
          rng = rng * 6364136223846793005ull + 1442695040888963407ull;
          buf[(rng >> 33) % n] = (uint8_t)(rng >> 17);
        }
      }
      em_status s;
      if (is_model) {
        em_onnx_model *m;
        s = em_onnx_model_from_buffer(buf, len, "damaged", &m);
        if (s == EM_OK) em_onnx_model_free(m);
      } else {
        em_onnx_tensor *t;
        s = em_onnx_tensor_from_buffer(buf, len, "damaged", &t);
        if (s == EM_OK) em_onnx_tensor_free(t);
      }
      if (s == EM_OK) {
        ok++;
      } else {
        failed++;
        assert_true(s == EM_ERR_CORRUPT || s == EM_ERR_UNSUPPORTED);
        assert_true(strncmp(em_last_error(), "damaged", 7) == 0);
      }
    }
    assert_true(failed > 0); /* damage was noticed at least sometimes */
    assert_true(ok > 0);     /* the whole file (prefix n) still loads */
    free(buf);
    free(orig);
  }
}

/* ------------------------------------------------------------ survey --- */

typedef struct op_count {
  char key[128];
  int single, multi;
} op_count;

typedef struct survey {
  op_count ops[512];
  int n_ops;
  int tests, models_ok, models_unsupported;
  int tensors_ok, tensors_non_tensor, tensors_string;
  int single_node_tests;
  int bf16_as_u16;
  int n_shape_diffs;
  char shape_diffs[64][160];
} survey;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names of a directory's entries that start with `prefix`. */
static char **list_dir(const char *dir, const char *prefix, size_t *n) {
  DIR *d = opendir(dir);
  *n = 0;
  if (!d) return NULL;
  size_t cap = 64;
  char **v = malloc(cap * sizeof *v);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    if (*n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
    v[(*n)++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(v, *n, sizeof *v, cmp_str);
  return v;
}

static void free_list(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

static void count_op(survey *s, const em_onnx_node *n, int single) {
  char key[128];
  snprintf(key, sizeof key, "%s%s%s", n->domain[0] ? n->domain : "", n->domain[0] ? ":" : "", n->op_type);
  int i;
  for (i = 0; i < s->n_ops; i++)
    if (strcmp(s->ops[i].key, key) == 0) break;
  if (i == s->n_ops) {
    assert_true(s->n_ops < 512);
    snprintf(s->ops[s->n_ops].key, sizeof s->ops[0].key, "%s", key);
    s->n_ops++;
  }
  if (single) s->ops[i].single++;
  else s->ops[i].multi++;
}

/* Checks one test data file against the type the model declares for it. */
static void check_value_file(survey *s, const char *path, const em_onnx_value_info *decl) {
  em_onnx_tensor *t = NULL;
  em_status st = em_onnx_tensor_load(path, &t);
  if (decl->type.kind != EM_ONNX_VALUE_TENSOR) {
    if (st != EM_ERR_UNSUPPORTED || !strstr(em_last_error(), "unsupported value type"))
      fail_msg("%s: declared kind %d: status %d (%s)", path, decl->type.kind, st, em_last_error());
    s->tensors_non_tensor++;
    return;
  }
  if (decl->type.dtype == EM_ONNX_STRING) {
    if (st != EM_ERR_UNSUPPORTED || !strstr(em_last_error(), "string"))
      fail_msg("%s: string tensor: status %d (%s)", path, st, em_last_error());
    s->tensors_string++;
    return;
  }
  if (st != EM_OK) fail_msg("%s: %s", path, em_last_error());
  /* numpy has no bfloat16: ONNX's generator stores bfloat16 test data as its
   * uint16 bit patterns (data_type 4) where the model declares bfloat16. */
  if (t->dtype == EM_ONNX_UINT16 && decl->type.dtype == EM_ONNX_BFLOAT16) {
    s->bf16_as_u16++;
  } else if (t->dtype != decl->type.dtype)
    fail_msg("%s: dtype %s, the model declares %s", path, em_onnx_dtype_name(t->dtype),
             em_onnx_dtype_name(decl->type.dtype));
  /* Shapes are compared but a difference is listed, not failed: the data of
   * a few ONNX 1.12 tests disagrees with its own model (test_castlike_*'s
   * `like` input is [1] where [3,4] is declared). */
  if (decl->type.has_shape) {
    int differs = t->rank != decl->type.rank;
    for (size_t i = 0; !differs && i < t->rank; i++)
      differs = decl->type.dims[i].value >= 0 && decl->type.dims[i].value != t->dims[i];
    if (differs && s->n_shape_diffs < 64) {
      const char *rel = path + strlen(node_dir()) + 1;
      snprintf(s->shape_diffs[s->n_shape_diffs++], sizeof s->shape_diffs[0], "%s (rank %zu, declared rank %zu)",
               rel, t->rank, decl->type.rank);
    } else if (differs) {
      s->n_shape_diffs++;
    }
  }
  size_t prod = 1;
  for (size_t i = 0; i < t->rank; i++) prod *= (size_t)t->dims[i];
  assert_int_equal(prod, t->n_elements);
  assert_int_equal(t->nbytes, t->n_elements * em_onnx_dtype_size(t->dtype));
  s->tensors_ok++;
  em_onnx_tensor_free(t);
}

/* The data files of one test set: input_N.pb matches graph input N, output_N.pb output N. */
static void check_data_set(survey *s, const char *dir, const em_onnx_model *m) {
  size_t n;
  char **files = list_dir(dir, "", &n);
  for (size_t i = 0; i < n; i++) {
    unsigned idx;
    int is_in = sscanf(files[i], "input_%u.pb", &idx) == 1, is_out = sscanf(files[i], "output_%u.pb", &idx) == 1;
    if (!is_in && !is_out) continue;
    size_t count = is_in ? m->graph.n_inputs : m->graph.n_outputs;
    if (idx >= count) fail_msg("%s/%s: the model has only %zu %s", dir, files[i], count, is_in ? "inputs" : "outputs");
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    check_value_file(s, path, is_in ? &m->graph.inputs[idx] : &m->graph.outputs[idx]);
  }
  free_list(files, n);
}

static int cmp_op(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  int tx = x->single + x->multi, ty = y->single + y->multi;
  if (tx != ty) return ty - tx;
  return strcmp(x->key, y->key);
}

static void print_table(const survey *s, FILE *f) {
  fprintf(f, "# ONNX backend node tests by op type\n\n"
             "Counted by the survey in tests/unit/test_onnx_reader.c over %s\n"
             "(Debian's libonnx-testdata; regenerate with\n"
             "`EMBER_ONNX_NODE_TABLE=onnx/NODE_TESTS.md build/tests/unit/test_onnx_reader`).\n\n",
          node_dir());
  fprintf(f, "- %d node tests; %d models load, %d are refused as unsupported.\n", s->tests, s->models_ok,
          s->models_unsupported);
  fprintf(f, "- %d tests are a single node; the other %d are small graphs (mostly the `_expanded`\n"
             "  function-body versions of an op).\n", s->single_node_tests, s->tests - s->single_node_tests);
  fprintf(f, "- Test data files: %d tensors read; %d hold sequences or optionals and %d string\n"
             "  tensors, which the reader refuses as unsupported.\n",
          s->tensors_ok, s->tensors_non_tensor, s->tensors_string);
  fprintf(f, "- %d tensor files declared bfloat16 by their model are stored as uint16 (data_type 4):\n"
             "  numpy has no bfloat16, so ONNX's generator writes the bit patterns. A runner must\n"
             "  read such data as bfloat16.\n", s->bf16_as_u16);
  fprintf(f, "- %d tensor files have a shape other than the one their model declares (the file\n"
             "  is what the reference output was computed from):\n", s->n_shape_diffs);
  for (int i = 0; i < s->n_shape_diffs && i < 64; i++) fprintf(f, "  - `%s`\n", s->shape_diffs[i]);
  fprintf(f, "- %d distinct op types (domain-qualified when not the default domain) appear in the\n"
             "  top-level graphs. Ops used only inside If/Loop/Scan bodies are not counted.\n\n", s->n_ops);
  fprintf(f, "`single` = tests whose graph is that one node; `in graphs` = multi-node tests whose\n"
             "top-level graph uses it (each test counted once per op).\n\n");
  fprintf(f, "| op_type | single | in graphs | total |\n|---|---:|---:|---:|\n");
  for (int i = 0; i < s->n_ops; i++)
    fprintf(f, "| %s | %d | %d | %d |\n", s->ops[i].key, s->ops[i].single, s->ops[i].multi,
            s->ops[i].single + s->ops[i].multi);
}

static void test_survey_all_node_tests(void **state) {
  (void)state;
  if (!have_testdata()) skip();
  survey *s = calloc(1, sizeof *s);
  size_t n_tests;
  char **tests = list_dir(node_dir(), "test_", &n_tests);
  assert_true(n_tests > 0);
  for (size_t i = 0; i < n_tests; i++) {
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", node_dir(), tests[i]);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    s->tests++;
    em_onnx_model *m = NULL;
    em_status st = em_onnx_model_load(path, &m);
    if (st == EM_ERR_UNSUPPORTED) {
      print_message("unsupported: %s\n", em_last_error());
      s->models_unsupported++;
      continue;
    }
    if (st != EM_OK) fail_msg("%s: %s", path, em_last_error());
    s->models_ok++;
    int single = m->graph.n_nodes == 1;
    s->single_node_tests += single;
    for (size_t k = 0; k < m->graph.n_nodes; k++) {
      int seen = 0; /* count an op once per test */
      for (size_t j = 0; j < k; j++)
        seen |= strcmp(m->graph.nodes[j].op_type, m->graph.nodes[k].op_type) == 0 &&
                strcmp(m->graph.nodes[j].domain, m->graph.nodes[k].domain) == 0;
      if (!seen) count_op(s, &m->graph.nodes[k], single);
    }
    size_t n_sets;
    char **sets = list_dir(dir, "test_data_set_", &n_sets);
    for (size_t k = 0; k < n_sets; k++) {
      char sd[1200];
      snprintf(sd, sizeof sd, "%s/%s", dir, sets[k]);
      check_data_set(s, sd, m);
    }
    free_list(sets, n_sets);
    em_onnx_model_free(m);
  }
  free_list(tests, n_tests);
  qsort(s->ops, (size_t)s->n_ops, sizeof s->ops[0], cmp_op);
  print_table(s, stdout);
  const char *out = getenv("EMBER_ONNX_NODE_TABLE");
  if (out && *out) {
    FILE *f = fopen(out, "w");
    if (!f) fail_msg("cannot write %s", out);
    print_table(s, f);
    fclose(f);
  }
  /* Every test is accounted for, and the data of every loaded test was read. */
  assert_int_equal(s->models_ok + s->models_unsupported, (int)n_tests);
  assert_true(s->tensors_ok > 0);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_abs_model),
    cmocka_unit_test(test_abs_data),
    cmocka_unit_test(test_add_bcast),
    cmocka_unit_test(test_conv_strides_padding),
    cmocka_unit_test(test_reduce_sum_keepdims),
    cmocka_unit_test(test_float_and_string_attrs),
    cmocka_unit_test(test_constant_float_data),
    cmocka_unit_test(test_if_graph_attrs),
    cmocka_unit_test(test_loop_body),
    cmocka_unit_test(test_sequence_types),
    cmocka_unit_test(test_optional_types),
    cmocka_unit_test(test_typed_fields),
    cmocka_unit_test(test_tensor_errors),
    cmocka_unit_test(test_non_tensor_values),
    cmocka_unit_test(test_model_hand),
    cmocka_unit_test(test_nesting),
    cmocka_unit_test(test_io_errors),
    cmocka_unit_test(test_dtype_table),
    cmocka_unit_test(test_damaged_files),
    cmocka_unit_test(test_survey_all_node_tests),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
