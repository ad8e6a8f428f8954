/* Cases of the core family (ops/core.c) for the every-op-every-device test:
 * every op and dtype, fills of every element size (1, 2, 4, 8 bytes), add_n
 * with 1 to 8 inputs, sum_to over alternating kept and summed axes (the
 * kernel's four groups of each), to a scalar, and above one _weighted_sum
 * chunk (4096). Every .grad case also runs _weighted_sum, add_n and
 * _scale_by on the GPU (the test's loss and its gradient). */
#include "op_cases.h"

static const oc_case cases[] = {
  {"identity", "odd", 1, {OC_F32(-2, 2, 3, 5, 7)}, .grad = 1},
  {"identity", "i64", 1, {OC_I64(-9, 9, 13)}},
  {"identity", "bool", 1, {OC_BOOL(2, 9)}},
  {"stop_gradient", "f64", 1, {OC_F64(-2, 2, 5, 3)}},
  {"zeros", "f32", 0, {{0}}, 1, {OC_ATTR_IS("shape", 3, 5)}},
  {"zeros", "i64", 0, {{0}}, 2, {OC_ATTR_IS("shape", 2, 1, 7), OC_ATTR_I("dtype", EM_I64)}},
  {"zeros", "scalar f64", 0, {{0}}, 2, {OC_ATTR_IS("shape", 1), OC_ATTR_I("dtype", EM_F64)}},
  {"zeros_like", "odd", 1, {OC_F32(-2, 2, 7, 9)}},
  {"zeros_like", "bool", 1, {OC_F64(-2, 2, 3, 3)}, 1, {OC_ATTR_I("dtype", EM_BOOL)}},
  {"ones_like", "f32", 1, {OC_F32(-2, 2, 1)}},
  {"ones_like", "f64", 1, {OC_F64(-2, 2, 4, 5)}},
  {"ones_like", "i32", 1, {OC_I32(-2, 2, 11)}},
  {"ones_like", "f16", 1, {OC_F32(-2, 2, 3, 7)}, 1, {OC_ATTR_I("dtype", EM_F16)}},
  {"ones_like", "bf16", 1, {OC_F32(-2, 2, 5)}, 1, {OC_ATTR_I("dtype", EM_BF16)}},
  {"ones_like", "u8", 1, {OC_I64(-2, 2, 257)}, 1, {OC_ATTR_I("dtype", EM_U8)}},
  {"add_n", "1", 1, {OC_F32(-2, 2, 5)}, .grad = 1},
  {"add_n", "3", 3, {OC_F32(-2, 2, 3, 7), OC_F32(-2, 2, 3, 7), OC_F32(-2, 2, 3, 7)}, .grad = 1},
  {"add_n", "8 f64", 8, {OC_F64(-2, 2, 9), OC_F64(-2, 2, 9), OC_F64(-2, 2, 9), OC_F64(-2, 2, 9),
                         OC_F64(-2, 2, 9), OC_F64(-2, 2, 9), OC_F64(-2, 2, 9), OC_F64(-2, 2, 9)}, .grad = 1},
  {"add_n", "i32", 2, {OC_I32(-2147483647.0, 2147483647.0, 257), OC_I32(-2147483647.0, 2147483647.0, 257)}},
  {"add_n", "i64", 4, {OC_I64(-1e6, 1e6, 3, 5), OC_I64(-1e6, 1e6, 3, 5), OC_I64(-1e6, 1e6, 3, 5),
                       OC_I64(-1e6, 1e6, 3, 5)}},
  {"add_n", "large", 2, {OC_F32(-2, 2, 70001), OC_F32(-2, 2, 70001)}},
  /* sum_to: input 1 gives only the target shape. */
  {"sum_to", "rows", 2, {OC_F32(-2, 2, 37, 11), OC_F32(0, 1, 11)}, .grad = 1},
  {"sum_to", "middle", 2, {OC_F32(-2, 2, 4, 3, 5), OC_F32(0, 1, 3, 1)}, .grad = 1},
  {"sum_to", "alternating", 2, {OC_F64(-2, 2, 2, 3, 2, 3, 2, 3, 2, 3), OC_F64(0, 1, 3, 1, 3, 1, 3, 1, 3)},
   .grad = 1},
  {"sum_to", "to scalar", 2, {OC_F32(-2, 2, 3, 7, 5), OC_SCALAR(EM_F32, 0, 1)}, .grad = 1},
  {"sum_to", "same", 2, {OC_F32(-2, 2, 6, 5), OC_F32(0, 1, 6, 5)}},
  {"sum_to", "i32", 2, {OC_I32(-2147483647.0, 2147483647.0, 9, 4), OC_I32(0, 1, 9, 1)}},
  {"sum_to", "i64", 2, {OC_I64(-1000, 1000, 5, 6, 7), OC_I64(0, 1, 6, 1)}},
  {"sum_to", "large", 2, {OC_F32(-2, 2, 517, 193), OC_F32(0, 1, 1, 193)}, .grad = 1},
  {"broadcast_like", "middle", 2, {OC_F32(-2, 2, 3, 1), OC_F32(0, 1, 4, 3, 5)}, .grad = 1},
  {"broadcast_like", "f64", 2, {OC_F64(-2, 2, 7), OC_F64(0, 1, 2, 3, 7)}, .grad = 1},
  {"broadcast_like", "scalar", 2, {OC_SCALAR(EM_F32, -2, 2), OC_F32(0, 1, 5, 3)}, .grad = 1},
  {"broadcast_like", "8 axes", 2, {OC_F32(-2, 2, 3, 1, 3, 1, 3, 1, 3), OC_F32(0, 1, 2, 3, 2, 3, 2, 3, 2, 3)}, .grad = 1},
  {"broadcast_like", "bool", 2, {OC_BOOL(5, 1), OC_BOOL(5, 6)}},
  {"broadcast_like", "i64", 2, {OC_I64(-9, 9, 1, 4), OC_I64(0, 1, 3, 4)}},
  {"broadcast_like", "i32", 2, {OC_I32(-9, 9, 3, 1), OC_F32(0, 1, 3, 3)}},
  {"_weighted_sum", "1", 2, {OC_F32(-2, 2, 1), OC_F32(-2, 2, 1)}, .grad = 1},
  {"_weighted_sum", "chunks", 2, {OC_F32(-2, 2, 3, 4099), OC_F32(-2, 2, 3, 4099)}, .grad = 1},
  {"_weighted_sum", "f64", 2, {OC_F64(-2, 2, 9001), OC_F64(-2, 2, 9001)}, .grad = 1},
  {"_scale_by", "f32", 2, {OC_F32(-2, 2, 5, 7), OC_SCALAR(EM_F32, -2, 2)}},
  {"_scale_by", "f64", 2, {OC_F64(-2, 2, 300), OC_SCALAR(EM_F64, -2, 2)}},
};
OC_REGISTER(core, cases)
