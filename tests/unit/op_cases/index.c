/* Cases of the index family (ops/index.c) for test_ops_devices: cumsum in
 * every direction and dtype (a long axis, an inner stride), gather_nd with
 * repeated tuples and batch_dims, and the scatters with duplicate indices
 * under every reduction (none: the last in index order wins; the gradients
 * of none and add through .grad, so _gather_nd_grad, _scatter_nd_grad and
 * _scatter_elements_grad run too), negative indices, and indices smaller than
 * data (scatter_elements). */
#include "op_cases.h"

/* gather_nd / scatter_nd tuples into a [4, 3, ...] data (k = 1 and k = 2). */
static const double k1_rep[] = {3, 0, -1, 3, 1};
static const double k2_rep[] = {0, 2, 3, 1, -4, -1, 0, 2, 2, 0, 3, 1};
/* batch_dims 1: data [2, 5, 3], indices [2, 3, 1]. */
static const double b1[] = {4, 0, 4, -1, 2, 0};
/* scatter_elements: indices [3, 2] into data [4, 3] along axis 0 (duplicates in each column). */
static const double el_ax0[] = {1, 2, -3, 2, 1, 0};
/* along axis 1 of data [2, 5]: indices [2, 4]. */
static const double el_ax1[] = {4, 0, 4, -1, 2, 2, 0, 2};

#define RED(r) OC_ATTR_S("reduction", r)

static const oc_case cases[] = {
  /* cumsum (its gradient is a cumsum the other way) */
  {"cumsum", "f32 axis 0", 1, {OC_F32(-2, 2, 5, 3)}, .grad = 1},
  {"cumsum", "f64 exclusive reverse", 1, {OC_F64(-2, 2, 3, 7, 2)}, 3,
   {OC_ATTR_I("axis", 1), OC_ATTR_I("exclusive", 1), OC_ATTR_I("reverse", 1)}, .grad = 1},
  {"cumsum", "f32 exclusive", 1, {OC_F32(-2, 2, 4, 6)}, 2, {OC_ATTR_I("axis", -1), OC_ATTR_I("exclusive", 1)},
   .grad = 1},
  {"cumsum", "f32 reverse long", 1, {OC_F32(-2, 2, 2, 1000)}, 2, {OC_ATTR_I("axis", 1), OC_ATTR_I("reverse", 1)},
   .grad = 1},
  {"cumsum", "i32", 1, {OC_I32(-1000, 1000, 6, 5)}},
  {"cumsum", "i64 axis -1", 1, {OC_I64(-1000000, 1000000, 3, 4, 9)}, 1, {OC_ATTR_I("axis", -1)}},
  {"cumsum", "1", 1, {OC_F64(-2, 2, 1)}, .grad = 1},
  {"cumsum", "empty", 1, {OC_F32(-2, 2, 0, 3)}, 1, {OC_ATTR_I("axis", 1)}, .grad = 1},

  /* gather_nd (and _gather_nd_grad through .grad) */
  {"gather_nd", "f32 k 1 repeated", 2, {OC_F32(-2, 2, 4, 3), OC_VALUES(EM_I64, k1_rep, 5, 1)}, .grad = 1},
  {"gather_nd", "f64 k 2 repeated", 2, {OC_F64(-2, 2, 4, 3, 2), OC_VALUES(EM_I32, k2_rep, 2, 3, 2)}, .grad = 1},
  {"gather_nd", "f32 batch_dims 1", 2, {OC_F32(-2, 2, 2, 5, 3), OC_VALUES(EM_I64, b1, 2, 3, 1)}, 1,
   {OC_ATTR_I("batch_dims", 1)}, .grad = 1},
  {"gather_nd", "i32 full tuples", 2, {OC_I32(-99, 99, 4, 3), OC_VALUES(EM_I64, k2_rep, 6, 2)}},
  {"gather_nd", "i64", 2, {OC_I64(-99, 99, 4, 3, 5), OC_VALUES(EM_I64, k1_rep, 5, 1)}},
  {"gather_nd", "no tuples", 2, {OC_F32(-2, 2, 4, 3), OC_I64(0, 4, 0, 1)}, .grad = 1},

  /* scatter_nd (and _scatter_nd_grad through .grad) */
  {"scatter_nd", "f32 none duplicates", 3,
   {OC_F32(-2, 2, 4, 3), OC_VALUES(EM_I64, k1_rep, 5, 1), OC_F32(-2, 2, 5, 3)}, .grad = 1},
  {"scatter_nd", "f64 add k 2", 3,
   {OC_F64(-2, 2, 4, 3, 2), OC_VALUES(EM_I32, k2_rep, 2, 3, 2), OC_F64(-2, 2, 2, 3, 2)}, 1, {RED("add")}, .grad = 1},
  {"scatter_nd", "f64 none k 2", 3,
   {OC_F64(-2, 2, 4, 3, 2), OC_VALUES(EM_I32, k2_rep, 6, 2), OC_F64(-2, 2, 6, 2)}, .grad = 1},
  {"scatter_nd", "f32 mul", 3, {OC_F32(-2, 2, 4, 3), OC_VALUES(EM_I64, k1_rep, 5, 1), OC_F32(-2, 2, 5, 3)}, 1,
   {RED("mul")}},
  {"scatter_nd", "f32 max", 3, {OC_F32(-2, 2, 4, 3), OC_VALUES(EM_I64, k1_rep, 5, 1), OC_F32(-2, 2, 5, 3)}, 1,
   {RED("max")}},
  {"scatter_nd", "i32 mul", 3, {OC_I32(-9, 9, 4, 3), OC_VALUES(EM_I64, k1_rep, 5, 1), OC_I32(-9, 9, 5, 3)}, 1,
   {RED("mul")}},
  {"scatter_nd", "i64 min", 3, {OC_I64(-99, 99, 4, 3), OC_VALUES(EM_I32, k2_rep, 6, 2), OC_I64(-99, 99, 6)}, 1,
   {RED("min")}},

  /* scatter_elements (and _scatter_elements_grad through .grad) */
  {"scatter_elements", "f32 axis 0 none", 3,
   {OC_F32(-2, 2, 4, 3), OC_VALUES(EM_I64, el_ax0, 3, 2), OC_F32(-2, 2, 3, 2)}, .grad = 1},
  {"scatter_elements", "f64 axis 1 add", 3,
   {OC_F64(-2, 2, 2, 5), OC_VALUES(EM_I32, el_ax1, 2, 4), OC_F64(-2, 2, 2, 4)}, 2,
   {OC_ATTR_I("axis", 1), RED("add")}, .grad = 1},
  {"scatter_elements", "f64 axis -1 none", 3,
   {OC_F64(-2, 2, 2, 5), OC_VALUES(EM_I64, el_ax1, 2, 4), OC_F64(-2, 2, 2, 4)}, 1, {OC_ATTR_I("axis", -1)},
   .grad = 1},
  {"scatter_elements", "f32 max", 3, {OC_F32(-2, 2, 4, 3), OC_VALUES(EM_I64, el_ax0, 3, 2), OC_F32(-2, 2, 3, 2)}, 1,
   {RED("max")}},
  {"scatter_elements", "f64 mul", 3, {OC_F64(-2, 2, 4, 3), OC_VALUES(EM_I32, el_ax0, 3, 2), OC_F64(-2, 2, 3, 2)}, 1,
   {RED("mul")}},
  {"scatter_elements", "i32 min", 3, {OC_I32(-99, 99, 2, 5), OC_VALUES(EM_I64, el_ax1, 2, 4), OC_I32(-99, 99, 2, 4)},
   2, {OC_ATTR_I("axis", 1), RED("min")}},
  {"scatter_elements", "i64 add", 3, {OC_I64(-99, 99, 4, 3), OC_VALUES(EM_I64, el_ax0, 3, 2), OC_I64(-99, 99, 3, 2)},
   1, {RED("add")}},
  {"scatter_elements", "random indices", 3, {OC_F32(-2, 2, 7, 300), OC_I64(-7, 7, 9, 300), OC_F32(-2, 2, 9, 300)},
   .grad = 1},
};
OC_REGISTER(index, cases)
