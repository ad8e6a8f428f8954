/* Cases of the every-op-every-device test for the loss family (ops/loss.c,
 * kernels/loss.cu). Row lengths around the kernels' lane counts (1, odd, one
 * above a power of two, above the 256 lanes of a block), the class axis last
 * and inside (inner > 1), dense and sparse (i32, i64) labels, ignore_index.
 * .grad covers the fused gradient ops. Probabilities stay inside (0, 1). */
#include "op_cases.h"

static const double labels_i32[] = {0, 4, 2, 6, 1, 3};
static const double labels_i64[] = {2, 0, 1, 2, 0, 1, 1, 2, 0, 2, 1, 0, 0, 1, 2};
static const double labels_ign[] = {0, 9, 2, 9, 1, 9};
static const double labels_big[] = {5, 300, 0, 256, 299};

static const oc_case cases[] = {
  {"softmax", "1", 1, {OC_F32(-3, 3, 1)}, .grad = 1},
  {"softmax", "odd", 1, {OC_F32(-5, 5, 3, 7)}, .grad = 1},
  {"softmax", "lanes+1", 1, {OC_F32(-5, 5, 4, 17)}, .grad = 1},
  {"softmax", "long rows", 1, {OC_F32(-8, 8, 3, 1000)}, .grad = 1},
  {"softmax", "axis 1", 1, {OC_F32(-4, 4, 2, 5, 3)}, 1, {OC_ATTR_I("axis", 1)}, .grad = 1},
  {"softmax", "many rows", 1, {OC_F32(-4, 4, 700, 33)}},
  {"softmax", "f64", 1, {OC_F64(-6, 6, 5, 9)}, .grad = 1},
  {"softmax", "f64 axis 0", 1, {OC_F64(-6, 6, 4, 3, 2)}, 1, {OC_ATTR_I("axis", 0)}, .grad = 1},
  {"log_softmax", "1", 1, {OC_F32(-3, 3, 1, 1)}, .grad = 1},
  {"log_softmax", "odd", 1, {OC_F32(-20, 20, 5, 11)}, .grad = 1},
  {"log_softmax", "long rows", 1, {OC_F32(-30, 30, 2, 513)}, .grad = 1},
  {"log_softmax", "axis 0", 1, {OC_F32(-4, 4, 6, 3)}, 1, {OC_ATTR_I("axis", 0)}, .grad = 1},
  {"log_softmax", "f64", 1, {OC_F64(-50, 50, 3, 17)}, .grad = 1},
  {"cross_entropy_with_softmax", "dense", 2, {OC_F32(-4, 4, 4, 10), OC_F32(0, 1, 4, 10)}, .grad = 1},
  {"cross_entropy_with_softmax", "dense f64 axis 1", 2, {OC_F64(-4, 4, 2, 5, 3), OC_F64(0, 1, 2, 5, 3)}, 1,
   {OC_ATTR_I("axis", 1)}, .grad = 1},
  {"cross_entropy_with_softmax", "sparse i32", 2, {OC_F32(-6, 6, 6, 7), OC_VALUES(EM_I32, labels_i32, 6)},
   .grad = 1},
  {"cross_entropy_with_softmax", "sparse i64 f64", 2, {OC_F64(-6, 6, 15, 3), OC_VALUES(EM_I64, labels_i64, 15)},
   .grad = 1},
  {"cross_entropy_with_softmax", "ignore_index", 2, {OC_F32(-3, 3, 6, 5), OC_VALUES(EM_I64, labels_ign, 6)}, 1,
   {OC_ATTR_I("ignore_index", 9)}, .grad = 1},
  {"cross_entropy_with_softmax", "long rows", 2, {OC_F32(-10, 10, 5, 301), OC_VALUES(EM_I32, labels_big, 5)},
   .grad = 1},
  {"binary_cross_entropy", "1", 2, {OC_F32(0.01, 0.99, 1), OC_F32(0, 1, 1)}, .grad = 1},
  {"binary_cross_entropy", "odd", 2, {OC_F32(0.01, 0.99, 3, 37), OC_F32(0, 1, 3, 37)}, .grad = 1},
  {"binary_cross_entropy", "f64", 2, {OC_F64(0.001, 0.999, 2, 129), OC_F64(0, 1, 2, 129)}, .grad = 1},
  {"binary_cross_entropy", "large", 2, {OC_F32(0.001, 0.999, 40000), OC_F32(0, 1, 40000)}},
  {"squared_error", "scalar", 2, {OC_F32(-2, 2, 7), OC_F32(-2, 2, 7)}, .grad = 1},
  {"squared_error", "samples", 2, {OC_F32(-2, 2, 5, 3, 11), OC_F32(-2, 2, 5, 3, 11)}, .grad = 1},
  {"squared_error", "long samples", 2, {OC_F32(-2, 2, 3, 1025), OC_F32(-2, 2, 3, 1025)}, .grad = 1},
  {"squared_error", "f64", 2, {OC_F64(-2, 2, 9, 17), OC_F64(-2, 2, 9, 17)}, .grad = 1},
  {"classification_error", "dense", 2, {OC_F32(-1, 1, 6, 5), OC_F32(0, 1, 6, 5)}},
  {"classification_error", "sparse top2", 2, {OC_F32(-1, 1, 6, 7), OC_VALUES(EM_I32, labels_i32, 6)}, 1,
   {OC_ATTR_I("topN", 2)}},
  {"classification_error", "f64 ignore", 2, {OC_F64(-1, 1, 6, 10), OC_VALUES(EM_I64, labels_ign, 6)}, 1,
   {OC_ATTR_I("ignore_index", 9)}},
  {"classification_error", "axis 0", 2, {OC_F64(-1, 1, 4, 3), OC_F64(0, 1, 4, 3)}, 1, {OC_ATTR_I("axis", 0)}},
};
OC_REGISTER(loss, cases)
