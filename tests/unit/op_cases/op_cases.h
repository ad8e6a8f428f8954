/* Cases of the one every-op-every-device test (tests/unit/test_ops_devices.c,
 * in the manner of ggml's test-backend-ops). Each op family lists its cases in
 * tests/unit/op_cases/<family>.c:
 *
 *   static const oc_case cases[] = {
 *     {"exp", "odd", 1, {OC_F32(-4, 4, 3, 5, 7)}, .grad = 1},
 *     {"leaky_relu", "attr", 1, {OC_F64(-2, 2, 2, 33)}, 1, {OC_ATTR_F("alpha", 0.3)}, .grad = 1},
 *   };
 *   OC_REGISTER(unary, cases)
 *
 * The test runs every case on the CPU and on every GPU present (each GPU of
 * the test double with each path forced in turn), in both numeric modes, and
 * compares the outputs and, with .grad, the gradients of
 * L = sum_k sum(y_k * w_k) (w_k fixed random) with respect to every float
 * input the op differentiates: bitwise in portable mode, within .tol in the
 * fast mode. Give each op cases for the shapes that matter to its kernels: a
 * single element, odd sizes, one above a block or tile size, broadcasting,
 * every dtype the op takes (f32, f64, ints, bool). Values are fresh random
 * numbers each run (the seed is printed; EMBER_TEST_SEED repeats it). */
#ifndef EMBER_TESTS_OP_CASES_H
#define EMBER_TESTS_OP_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "ember.h"

#define OC_MAX_INPUTS 16
#define OC_MAX_ATTRS 8

typedef struct oc_input {
  em_dtype dtype;
  int ndim;
  int64_t dims[EM_MAX_DIMS];
  double lo, hi;          /* uniform in [lo, hi); integer and bool dtypes: whole numbers in [lo, hi) */
  const double *values;   /* fixed values instead (numel of them, converted), e.g. indices */
} oc_input;

typedef struct oc_case {
  const char *op;
  const char *label;      /* what the case is about: "1", "odd", "large", "broadcast", "i64" ... */
  int n_in;
  oc_input in[OC_MAX_INPUTS];
  int n_attrs;
  em_attr attrs[OC_MAX_ATTRS];
  int grad;               /* also compare the gradients */
  int training;           /* run in training mode (dropout, batch normalisation) */
  double tol;             /* fast mode: |gpu - cpu| <= tol * (1 + |cpu|); 0: 1e-5 (f32) or 1e-12 (f64) */
  int ties;               /* max pool windows with ties: where cuDNN ran _max_pool_grad (its road), the fast mode
                           * compares the outputs but not the gradients, which cuDNN gives to one maximum of a
                           * tied window, not necessarily Ember's first (ops/README.md; test_cudnn_norm_pool checks
                           * them tie-aware); Ember's kernels and portable mode: compared as any case */
  unsigned state;         /* bit k: input k is an em_state value holding the input's values (not fed), compared
                           * after the run like an output: ops that update inputs in place (the learner
                           * family's updates of parameters and their state) */
} oc_case;

/* An input: OC_F32(lo, hi, dims...) is a random f32 tensor of those dims. */
#define OC_NDIM(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define OC_IN(dt, lo_, hi_, ...) \
  { .dtype = (dt), .ndim = OC_NDIM(__VA_ARGS__), .dims = {__VA_ARGS__}, .lo = (lo_), .hi = (hi_) }
#define OC_F32(lo, hi, ...) OC_IN(EM_F32, lo, hi, __VA_ARGS__)
#define OC_F64(lo, hi, ...) OC_IN(EM_F64, lo, hi, __VA_ARGS__)
#define OC_I32(lo, hi, ...) OC_IN(EM_I32, lo, hi, __VA_ARGS__)
#define OC_I64(lo, hi, ...) OC_IN(EM_I64, lo, hi, __VA_ARGS__)
#define OC_BOOL(...) OC_IN(EM_BOOL, 0, 2, __VA_ARGS__)
/* A scalar (rank 0) input. */
#define OC_SCALAR(dt, lo_, hi_) { .dtype = (dt), .ndim = 0, .lo = (lo_), .hi = (hi_) }
/* Fixed values: OC_VALUES(EM_I64, ((const double[]){0, 2, 1}), 3) is an i64[3]. */
#define OC_VALUES(dt, vals, ...) \
  { .dtype = (dt), .ndim = OC_NDIM(__VA_ARGS__), .dims = {__VA_ARGS__}, .values = (vals) }

#define OC_ATTR_I(nm, v) { .name = (nm), .type = EM_ATTR_INT, .i = (v) }
#define OC_ATTR_F(nm, v) { .name = (nm), .type = EM_ATTR_FLOAT, .f = (v) }
#define OC_ATTR_S(nm, v) { .name = (nm), .type = EM_ATTR_STRING, .s = (v) }
#define OC_ATTR_IS(nm, ...) \
  { .name = (nm), .type = EM_ATTR_INTS, .ints = (const int64_t[]){__VA_ARGS__}, .n = OC_NDIM(__VA_ARGS__) }
#define OC_ATTR_FS(nm, ...) \
  { .name = (nm), .type = EM_ATTR_FLOATS, .floats = (const double[]){__VA_ARGS__}, \
    .n = (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)) }

/* A family's case table, found by the test through a linker section. */
typedef struct oc_table {
  const char *family;
  const oc_case *cases;
  size_t n;
} oc_table;
#define OC_REGISTER(fam, arr)                                                                  \
  static const oc_table oc_table_##fam = {#fam, arr, sizeof arr / sizeof arr[0]};            \
  __attribute__((used, section("oc_tables"))) static const oc_table *const oc_table_ptr_##fam = \
      &oc_table_##fam;

#endif
