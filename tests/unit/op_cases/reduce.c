/* Cases of the every-op-every-device test for the reduce family (ops/reduce.c,
 * kernels/reduce_ops.cu). The shapes walk the plan of ops/reduce.c:
 *  - case A (innermost axis reduced): runs shorter than 8 (one thread per
 *    segment, in order), of 8 and more (8 lanes), above one 4096-element
 *    segment (segments folded in blocks of 8 by the fold kernel), and enough
 *    rows of short runs for two fixed blocks of segments;
 *  - case B (innermost axis kept): few and many columns, enough rows for two
 *    fixed blocks of rows (rows_per_blk = max(32768 / columns, 16));
 *  - walks of two axes on each side ([2,3,4,5,6] over alternating axes),
 *    keepdims, negative axes, every axis, a single element, a scalar, an
 *    empty reduced axis (outputs are the identity, finished);
 *  - every dtype each op takes; integer sums and products that wrap;
 *  - argmax / argmin: ties (first or select_last_index), NaN, long rows
 *    (up to 256 threads per output), the kept-innermost case.
 * .grad covers _reduce_grad for every fn: max / min with ties (all of dy to
 * the first), prod with one and with two zeros in a row. */
#include <math.h>

#include "op_cases.h"

/* Rows of 4 with ties, NaN, zeros: [3, 4]. */
static const double ties[] = {1, 3, 3, -2, 5, 5, 5, 5, -1, NAN, 2, NAN};
static const double ties_i[] = {1, 3, 3, -2, 5, 5, 5, 5, -1, 7, 2, 7};
/* prod: row 0 has no zero, row 1 one zero, row 2 two zeros. */
static const double zeros[] = {0.5, 1.5, -2, 0.75, 1.25, 0, -0.5, 2, 0, 3, 0, 1};

#define AX(...) OC_ATTR_IS("axes", __VA_ARGS__)
#define KEEP OC_ATTR_I("keepdims", 1)

static const oc_case cases[] = {
  /* reduce_sum: every plan shape, every dtype */
  {"reduce_sum", "1", 1, {OC_F32(-2, 2, 1)}, .grad = 1},
  {"reduce_sum", "scalar", 1, {OC_SCALAR(EM_F32, -2, 2)}, .grad = 1},
  {"reduce_sum", "all odd", 1, {OC_F32(-2, 2, 7, 13)}, .grad = 1},
  {"reduce_sum", "A run < 8", 1, {OC_F32(-2, 2, 9, 5)}, 1, {AX(1)}, .grad = 1},
  {"reduce_sum", "A run 8+", 1, {OC_F32(-2, 2, 5, 37)}, 1, {AX(-1)}, .grad = 1},
  {"reduce_sum", "A 2 segments", 1, {OC_F32(-2, 2, 3, 4097)}, 1, {AX(1)}, .grad = 1},
  {"reduce_sum", "A fold blocks", 1, {OC_F32(-2, 2, 5, 4097)}, .grad = 1},
  {"reduce_sum", "A short rows, 2 blocks", 1, {OC_F32(-2, 2, 17000, 2, 2)}, 1, {AX(0, 2)}},
  {"reduce_sum", "B few columns", 1, {OC_F32(-2, 2, 37, 3)}, 1, {AX(0)}, .grad = 1},
  {"reduce_sum", "B 2 row blocks", 1, {OC_F32(-2, 2, 11000, 3)}, 1, {AX(0)}},
  {"reduce_sum", "B wide, 2 row blocks", 1, {OC_F32(-2, 2, 17, 2100)}, 1, {AX(0)}, .grad = 1},
  {"reduce_sum", "A walks", 1, {OC_F32(-2, 2, 2, 3, 4, 5, 6)}, 1, {AX(0, 2, 4)}, .grad = 1},
  {"reduce_sum", "B walks keepdims", 1, {OC_F32(-2, 2, 2, 3, 4, 5, 6)}, 2, {AX(1, 3), KEEP}, .grad = 1},
  {"reduce_sum", "size-1 axes", 1, {OC_F32(-2, 2, 1, 6, 1, 5)}, 1, {AX(0, 1)}, .grad = 1},
  {"reduce_sum", "empty axis", 1, {OC_F32(-2, 2, 0, 3)}, 1, {AX(0)}},
  {"reduce_sum", "f64", 1, {OC_F64(-2, 2, 6, 4099)}, 1, {AX(1)}, .grad = 1},
  {"reduce_sum", "f64 B", 1, {OC_F64(-2, 2, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}, .grad = 1},
  {"reduce_sum", "i32 wraps", 1, {OC_I32(-2000000000, 2000000000, 7, 9)}, 1, {AX(1)}},
  {"reduce_sum", "i32 B", 1, {OC_I32(-100, 100, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}},
  {"reduce_sum", "i64", 1, {OC_I64(-1000000, 1000000, 3, 4100)}, 1, {AX(1)}},
  {"reduce_sum", "i64 empty", 1, {OC_I64(-10, 10, 4, 0)}, 1, {AX(1)}},

  /* reduce_mean */
  {"reduce_mean", "A", 1, {OC_F32(-2, 2, 6, 33)}, 1, {AX(1)}, .grad = 1},
  {"reduce_mean", "B walks", 1, {OC_F32(-2, 2, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}, .grad = 1},
  {"reduce_mean", "all", 1, {OC_F64(-2, 2, 5, 4097)}, .grad = 1},
  {"reduce_mean", "empty (NaN)", 1, {OC_F32(-2, 2, 3, 0)}, 1, {AX(1)}},

  /* reduce_max / reduce_min: NaN propagates; the gradient goes to the first */
  {"reduce_max", "A", 1, {OC_F32(-2, 2, 6, 4100)}, 1, {AX(1)}, .grad = 1},
  {"reduce_max", "B", 1, {OC_F32(-2, 2, 2, 3, 4, 5, 6)}, 1, {AX(0, 2)}, .grad = 1},
  {"reduce_max", "ties NaN", 1, {OC_VALUES(EM_F32, ties, 3, 4)}, 1, {AX(1)}, .grad = 1},
  {"reduce_max", "ties B", 1, {OC_VALUES(EM_F64, ties, 3, 4)}, 1, {AX(0)}, .grad = 1},
  {"reduce_max", "f64 all", 1, {OC_F64(-2, 2, 9, 11)}, .grad = 1},
  {"reduce_max", "i32", 1, {OC_I32(-1000, 1000, 9, 11)}, 1, {AX(1)}},
  {"reduce_max", "i64 B", 1, {OC_I64(-1000, 1000, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}},
  {"reduce_min", "A", 1, {OC_F32(-2, 2, 6, 41)}, 1, {AX(1)}, .grad = 1},
  {"reduce_min", "ties NaN", 1, {OC_VALUES(EM_F32, ties, 3, 4)}, 2, {AX(1), KEEP}, .grad = 1},
  {"reduce_min", "f64 B", 1, {OC_F64(-2, 2, 37, 3)}, 1, {AX(0)}, .grad = 1},
  {"reduce_min", "i32 walks", 1, {OC_I32(-1000, 1000, 2, 3, 4, 5, 6)}, 1, {AX(0, 2, 4)}},
  {"reduce_min", "i64", 1, {OC_I64(-1000, 1000, 9, 11)}, 1, {AX(1)}},

  /* reduce_prod: exact gradients with zeros */
  {"reduce_prod", "A", 1, {OC_F32(0.5, 1.5, 6, 37)}, 1, {AX(1)}, .grad = 1},
  {"reduce_prod", "B walks", 1, {OC_F64(0.5, 1.5, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}, .grad = 1},
  {"reduce_prod", "zeros", 1, {OC_VALUES(EM_F32, zeros, 3, 4)}, 1, {AX(1)}, .grad = 1},
  {"reduce_prod", "zeros f64 B", 1, {OC_VALUES(EM_F64, zeros, 3, 4)}, 1, {AX(0)}, .grad = 1},
  {"reduce_prod", "long", 1, {OC_F32(0.9, 1.1, 2, 5000)}, 1, {AX(1)}, .grad = 1},
  {"reduce_prod", "i32 wraps", 1, {OC_I32(-1000, 1000, 4, 9)}, 1, {AX(1)}},
  {"reduce_prod", "i64", 1, {OC_I64(-5, 5, 3, 4, 5)}, 1, {AX(0, 2)}},
  {"reduce_prod", "empty (1)", 1, {OC_F32(-2, 2, 0, 4)}, 1, {AX(0)}},

  /* reduce_log_sum_exp: shift pass, then exp */
  {"reduce_log_sum_exp", "A", 1, {OC_F32(-30, 30, 6, 39)}, 1, {AX(1)}, .grad = 1},
  {"reduce_log_sum_exp", "A 2 segments", 1, {OC_F32(-5, 5, 2, 4500)}, 1, {AX(1)}, .grad = 1},
  {"reduce_log_sum_exp", "B walks", 1, {OC_F32(-5, 5, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}, .grad = 1},
  {"reduce_log_sum_exp", "f64", 1, {OC_F64(-700, 700, 7, 13)}, 1, {AX(0)}, .grad = 1},
  {"reduce_log_sum_exp", "all", 1, {OC_F64(-5, 5, 3, 5)}, .grad = 1},
  {"reduce_log_sum_exp", "empty (-inf)", 1, {OC_F32(-2, 2, 3, 0)}, 1, {AX(1)}},

  /* reduce_log_sum: positive inputs */
  {"reduce_log_sum", "A", 1, {OC_F32(0.1, 2, 6, 39)}, 1, {AX(1)}, .grad = 1},
  {"reduce_log_sum", "B", 1, {OC_F64(0.1, 2, 2, 3, 4, 5, 6)}, 1, {AX(0, 2)}, .grad = 1},
  {"reduce_log_sum", "1", 1, {OC_F32(0.1, 2, 1)}, .grad = 1},

  /* norms */
  {"reduce_l1", "A", 1, {OC_F32(-2, 2, 6, 39)}, 1, {AX(1)}, .grad = 1},
  {"reduce_l1", "B", 1, {OC_F64(-2, 2, 2, 3, 4, 5, 6)}, 1, {AX(1, 3)}, .grad = 1},
  {"reduce_l1", "all", 1, {OC_F32(-2, 2, 5, 4097)}, .grad = 1},
  {"reduce_l2", "A", 1, {OC_F32(-2, 2, 6, 39)}, 1, {AX(-1)}, .grad = 1},
  {"reduce_l2", "B", 1, {OC_F64(-2, 2, 37, 3)}, 1, {AX(0)}, .grad = 1},
  {"reduce_l2", "walks", 1, {OC_F32(-2, 2, 2, 3, 4, 5, 6)}, 1, {AX(0, 2, 4)}, .grad = 1},
  {"reduce_sum_square", "A", 1, {OC_F32(-2, 2, 6, 39)}, 1, {AX(1)}, .grad = 1},
  {"reduce_sum_square", "B", 1, {OC_F64(-2, 2, 17, 2100)}, 1, {AX(0)}, .grad = 1},
  {"reduce_sum_square", "1", 1, {OC_F32(-2, 2, 1, 1)}, .grad = 1},

  /* argmax / argmin */
  {"argmax", "1", 1, {OC_F32(-2, 2, 1)}},
  {"argmax", "A", 1, {OC_F32(-2, 2, 7, 33)}, 1, {OC_ATTR_I("axis", 1)}},
  {"argmax", "B", 1, {OC_F32(-2, 2, 33, 7)}, 1, {OC_ATTR_I("axis", 0)}},
  {"argmax", "middle axis keepdims", 1, {OC_F64(-2, 2, 3, 9, 5)}, 2, {OC_ATTR_I("axis", -2), KEEP}},
  {"argmax", "long rows", 1, {OC_F32(-2, 2, 3, 9000)}, 1, {OC_ATTR_I("axis", 1)}},
  {"argmax", "ties NaN", 1, {OC_VALUES(EM_F32, ties, 3, 4)}, 1, {OC_ATTR_I("axis", 1)}},
  {"argmax", "ties last", 1, {OC_VALUES(EM_F64, ties, 3, 4)}, 2,
   {OC_ATTR_I("axis", 1), OC_ATTR_I("select_last_index", 1)}},
  {"argmax", "i32 ties", 1, {OC_I32(0, 3, 5, 700)}, 1, {OC_ATTR_I("axis", 1)}},
  {"argmax", "i64 ties last", 1, {OC_VALUES(EM_I64, ties_i, 3, 4)}, 2,
   {OC_ATTR_I("axis", 0), OC_ATTR_I("select_last_index", 1)}},
  {"argmax", "u8", 1, {OC_IN(EM_U8, 0, 256, 4, 300)}, 1, {OC_ATTR_I("axis", 1)}},
  {"argmin", "A", 1, {OC_F32(-2, 2, 7, 33)}, 1, {OC_ATTR_I("axis", -1)}},
  {"argmin", "B", 1, {OC_F64(-2, 2, 33, 7)}},
  {"argmin", "ties NaN last", 1, {OC_VALUES(EM_F32, ties, 3, 4)}, 2,
   {OC_ATTR_I("axis", 1), OC_ATTR_I("select_last_index", 1)}},
  {"argmin", "i32 ties long", 1, {OC_I32(0, 2, 2, 5000)}, 1, {OC_ATTR_I("axis", 1)}},
  {"argmin", "i64", 1, {OC_I64(-100, 100, 6, 8)}, 1, {OC_ATTR_I("axis", 1)}},
};
OC_REGISTER(reduce, cases)
