/* Cases of the every-op-every-device test for the shape family (ops/shape.c,
 * kernels/shape.cu). The data-moving ops run one strided copy per element
 * size, so every element size appears (f64/i64: 8, f32/i32: 4, u8/bool: 1),
 * with views that merge to few axes, views of more than the kernels' 6 axes
 * (rank-8 transpose, rank-4 tile), negative strides (slice steps) and
 * broadcast (expand). The summing gradients (_gather_grad with repeated
 * indices, _pad_grad with reflect folding more than once, _tile_grad) run
 * through .grad in f32 and f64; internal ops that no static-shape graph
 * reaches (_concat_grad) and integer uses of the gradient ops are called
 * directly. cast covers every pair of the six dtypes the test makes, with
 * values out of the target's range (saturation, wrap, NaN -> 0 needs fixed
 * values). */
#include <math.h>

#include "op_cases.h"

#define OC_U8(lo, hi, ...) OC_IN(EM_U8, lo, hi, __VA_ARGS__)
/* An INTS attribute with no entries (the pads or repeats of a scalar). */
static const int64_t no_ints[1];
#define OC_ATTR_NONE_INTS(nm) {.name = (nm), .type = EM_ATTR_INTS, .ints = no_ints, .n = 0}

static const double idx_5[] = {0, 4, -1};
static const double idx_rep[] = {5, 0, 5, 5, -6, 2};
static const double idx_axis_last[] = {2, 0, 2, 1};
static const double topk_special[] = {1, NAN, 3, INFINITY, 3, -INFINITY, 0.0, -0.0, NAN, 1, 2, 3,
                                      -1, -1, -1, 5, -0.0, 0.0, NAN, 2, 1, 1, 1, 1};
static const double topk_grad_idx[] = {2, 0, 1, 3, 3, 1};
static const double cast_special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5,
                                      255.5, 256, -1, -0.99, 2147483647.5, -2147483648.5, 2147483648.0, -2147483649.0,
                                      9.3e18, -9.3e18, 1e300, -1e300, 65504, 65520, 1e-8, 3.0e38, 4.0e38, 1.0000001};
static const double cast_ints[] = {0, 1, -1, 127, 128, 255, 256, -129, 2147483647, -2147483648.0, 4294967297.0,
                                   16777217, -16777217, 33554435, 9007199254740993.0, -9007199254740993.0, 65519,
                                   65520, 3, 1 << 30};

/* cast from one input to dtype `to`. */
#define CAST(label, input, to) {"cast", label, 1, {input}, 1, {OC_ATTR_I("to", to)}}

static const oc_case cases[] = {
  /* reshape and friends: one contiguous copy */
  {"reshape", "f32 odd", 1, {OC_F32(-2, 2, 3, 5, 7)}, 1, {OC_ATTR_IS("shape", 7, -1)}, .grad = 1},
  {"reshape", "1", 1, {OC_F64(-2, 2, 1)}, 1, {OC_ATTR_IS("shape", 1, 1, 1)}, .grad = 1},
  {"reshape", "i64", 1, {OC_I64(-1000, 1000, 2, 3)}, 1, {OC_ATTR_IS("shape", 3, -1)}},
  {"reshape", "bool", 1, {OC_BOOL(4, 1, 3)}, 1, {OC_ATTR_IS("shape", -1)}},
  {"reshape", "u8 block+1", 1, {OC_U8(0, 256, 257)}, 1, {OC_ATTR_IS("shape", 257, 1)}},
  {"reshape_like", "f32", 2, {OC_F32(-2, 2, 6, 5), OC_I32(0, 5, 3, 10)}, .grad = 1},
  {"reshape_like", "i32", 2, {OC_I32(-9, 9, 4, 2), OC_BOOL(8)}},
  {"squeeze", "axes", 1, {OC_F32(-2, 2, 3, 1, 5, 1)}, 1, {OC_ATTR_IS("axes", 1, -1)}, .grad = 1},
  {"squeeze", "all bool", 1, {OC_BOOL(1, 3, 1)}},
  {"unsqueeze", "f64", 1, {OC_F64(-2, 2, 4, 3)}, 1, {OC_ATTR_IS("axes", 0, 2)}, .grad = 1},
  {"unsqueeze", "scalar i32", 1, {OC_SCALAR(EM_I32, -50, 50)}, 1, {OC_ATTR_IS("axes", 0)}},
  {"expand_dims", "f32", 1, {OC_F32(-2, 2, 5)}, 1, {OC_ATTR_IS("axes", -1)}, .grad = 1},
  {"expand_dims", "u8", 1, {OC_U8(0, 256, 3, 2)}, 1, {OC_ATTR_IS("axes", 1)}},
  {"flatten", "f32", 1, {OC_F32(-2, 2, 2, 3, 4)}, 1, {OC_ATTR_I("axis", 2)}, .grad = 1},
  {"flatten", "i64 axis 0", 1, {OC_I64(-5, 5, 3, 4)}, 1, {OC_ATTR_I("axis", 0)}},

  /* transpose: the generic strided copy */
  {"transpose", "f32 3-D", 1, {OC_F32(-2, 2, 3, 5, 7)}, 1, {OC_ATTR_IS("perm", 2, 0, 1)}, .grad = 1},
  {"transpose", "f64 reversed tiles+1", 1, {OC_F64(-2, 2, 33, 65)}, .grad = 1},
  {"transpose", "1", 1, {OC_F32(-2, 2, 1, 1)}, .grad = 1},
  {"transpose", "i32 6-D", 1, {OC_I32(-99, 99, 2, 3, 2, 3, 2, 3)}, 1, {OC_ATTR_IS("perm", 5, 4, 3, 2, 1, 0)}},
  {"transpose", "i64 8-D", 1, {OC_I64(-99, 99, 2, 2, 3, 2, 2, 3, 2, 2)}, 1,
   {OC_ATTR_IS("perm", 7, 5, 3, 1, 6, 4, 2, 0)}},
  {"transpose", "f32 8-D", 1, {OC_F32(-2, 2, 2, 3, 1, 2, 2, 3, 2, 2)}, 1,
   {OC_ATTR_IS("perm", 1, 0, 3, 2, 5, 4, 7, 6)}, .grad = 1},
  {"transpose", "u8", 1, {OC_U8(0, 256, 2, 3)}},
  {"transpose", "bool 3-D", 1, {OC_BOOL(3, 4, 5)}, 1, {OC_ATTR_IS("perm", 1, 0, 2)}},
  {"transpose", "large", 1, {OC_F32(-2, 2, 300, 257)}, .grad = 1},

  /* slice (and _slice_grad through .grad) */
  {"slice", "negative steps", 1, {OC_F32(-2, 2, 7, 9)}, 3,
   {OC_ATTR_IS("starts", 1, -2), OC_ATTR_IS("ends", 6, 0), OC_ATTR_IS("steps", 2, -3)}, .grad = 1},
  {"slice", "f64 one axis clamped", 1, {OC_F64(-2, 2, 5, 6, 7)}, 3,
   {OC_ATTR_IS("starts", 1), OC_ATTR_IS("ends", 100), OC_ATTR_IS("axes", 1)}, .grad = 1},
  {"slice", "f32 step -1 to start", 1, {OC_F32(-2, 2, 4, 6)}, 4,
   {OC_ATTR_IS("starts", -1), OC_ATTR_IS("ends", -100), OC_ATTR_IS("axes", -1), OC_ATTR_IS("steps", -1)},
   .grad = 1},
  {"slice", "1", 1, {OC_F32(-2, 2, 3, 3)}, 2, {OC_ATTR_IS("starts", 1, 2), OC_ATTR_IS("ends", 2, 3)}, .grad = 1},
  {"slice", "i32", 1, {OC_I32(-9, 9, 10)}, 2, {OC_ATTR_IS("starts", -3), OC_ATTR_IS("ends", 10)}},
  {"slice", "bool", 1, {OC_BOOL(4, 4)}, 2, {OC_ATTR_IS("starts", 0, 0), OC_ATTR_IS("ends", 2, 4)}},
  {"slice", "i64 step 3", 1, {OC_I64(-9, 9, 5, 11)}, 4,
   {OC_ATTR_IS("starts", 1), OC_ATTR_IS("ends", 11), OC_ATTR_IS("axes", 1), OC_ATTR_IS("steps", 3)}},
  {"_slice_grad", "i32", 2, {OC_I32(-9, 9, 2, 3), OC_I32(0, 1, 4, 6)}, 3,
   {OC_ATTR_IS("starts", 1, 5), OC_ATTR_IS("ends", 3, 0), OC_ATTR_IS("steps", 1, -2)}},
  {"_slice_grad", "u8", 2, {OC_U8(0, 256, 3), OC_U8(0, 1, 7)}, 3,
   {OC_ATTR_IS("starts", 2), OC_ATTR_IS("ends", 7), OC_ATTR_IS("steps", 2)}},

  /* concat: one strided copy per input */
  {"concat", "f32 axis 1", 3, {OC_F32(-2, 2, 2, 3), OC_F32(-2, 2, 2, 5), OC_F32(-2, 2, 2, 1)}, 1,
   {OC_ATTR_I("axis", 1)}, .grad = 1},
  {"concat", "f64 axis 0", 2, {OC_F64(-2, 2, 3, 2), OC_F64(-2, 2, 1, 2)}, .grad = 1},
  {"concat", "1 input", 1, {OC_F32(-2, 2, 4)}, .grad = 1},
  {"concat", "i64 axis -1", 2, {OC_I64(-9, 9, 2, 2, 2), OC_I64(-9, 9, 2, 2, 3)}, 1, {OC_ATTR_I("axis", -1)}},
  {"concat", "bool middle", 3, {OC_BOOL(2, 1, 3), OC_BOOL(2, 4, 3), OC_BOOL(2, 2, 3)}, 1, {OC_ATTR_I("axis", 1)}},
  {"concat", "u8", 2, {OC_U8(0, 256, 5), OC_U8(0, 256, 3)}},
  {"_concat_grad", "last piece", 3, {OC_F32(-2, 2, 2, 7), OC_F32(0, 1, 2, 3), OC_F32(0, 1, 2, 4)}, 2,
   {OC_ATTR_I("axis", 1), OC_ATTR_I("from_end", 0)}},
  {"_concat_grad", "from end f64", 3, {OC_F64(-2, 2, 9, 2), OC_F64(0, 1, 4, 2), OC_F64(0, 1, 2, 2)}, 2,
   {OC_ATTR_I("axis", 0), OC_ATTR_I("from_end", 1)}},
  {"_concat_grad", "i32", 2, {OC_I32(-9, 9, 3, 5), OC_I32(0, 1, 3, 5)}, 1, {OC_ATTR_I("axis", 1)}},

  /* pad (and _pad_grad through .grad) */
  {"pad", "constant", 1, {OC_F32(-2, 2, 3, 4)}, 2, {OC_ATTR_IS("pads", 1, 2, 0, 3), OC_ATTR_F("value", 1.5)},
   .grad = 1},
  {"pad", "reflect folding", 1, {OC_F64(-2, 2, 4, 5)}, 2,
   {OC_ATTR_IS("pads", 3, 6, 2, 9), OC_ATTR_S("mode", "reflect")}, .grad = 1},
  {"pad", "reflect size 1", 1, {OC_F32(-2, 2, 1, 3)}, 2,
   {OC_ATTR_IS("pads", 2, 1, 1, 2), OC_ATTR_S("mode", "reflect")}, .grad = 1},
  {"pad", "edge", 1, {OC_F32(-2, 2, 3, 1, 4)}, 2, {OC_ATTR_IS("pads", 2, 0, 1, 1, 3, 0), OC_ATTR_S("mode", "edge")},
   .grad = 1},
  {"pad", "crop", 1, {OC_F64(-2, 2, 6, 7)}, 1, {OC_ATTR_IS("pads", -1, 2, 1, -3)}, .grad = 1},
  {"pad", "edge crop", 1, {OC_F64(-2, 2, 6, 7)}, 2, {OC_ATTR_IS("pads", -2, 3, 2, -4), OC_ATTR_S("mode", "edge")},
   .grad = 1},
  {"pad", "reflect crop", 1, {OC_F32(-2, 2, 5, 6)}, 2,
   {OC_ATTR_IS("pads", 4, -2, -1, 7), OC_ATTR_S("mode", "reflect")}, .grad = 1},
  {"pad", "i32 value", 1, {OC_I32(-9, 9, 2, 3)}, 2, {OC_ATTR_IS("pads", 0, 1, 2, 0), OC_ATTR_F("value", -7)}},
  {"pad", "u8 edge", 1, {OC_U8(0, 256, 4)}, 2, {OC_ATTR_IS("pads", 2, 3), OC_ATTR_S("mode", "edge")}},
  {"pad", "bool", 1, {OC_BOOL(2, 2)}, 2, {OC_ATTR_IS("pads", 1, 1, 1, 1), OC_ATTR_F("value", 1)}},
  {"pad", "i64 7-D", 1, {OC_I64(-9, 9, 2, 1, 2, 3, 2, 2, 2)}, 1,
   {OC_ATTR_IS("pads", 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0)}},
  {"pad", "large reflect", 1, {OC_F32(-2, 2, 3, 64, 64)}, 2,
   {OC_ATTR_IS("pads", 0, 3, 3, 0, 3, 3), OC_ATTR_S("mode", "reflect")}, .grad = 1},
  {"_pad_grad", "f32 edge direct", 2, {OC_F32(-2, 2, 5, 9), OC_F32(0, 1, 2, 3)}, 2,
   {OC_ATTR_IS("pads", 1, 2, 2, 4), OC_ATTR_S("mode", "edge")}},

  /* gather (and _gather_grad through .grad) */
  {"gather", "f32 rows", 2, {OC_F32(-2, 2, 5, 4), OC_VALUES(EM_I64, idx_5, 3)}, .grad = 1},
  {"gather", "f64 repeated", 2, {OC_F64(-2, 2, 3, 6, 2), OC_VALUES(EM_I32, idx_rep, 2, 3)}, 1,
   {OC_ATTR_I("axis", 1)}, .grad = 1},
  {"gather", "f32 axis -1", 2, {OC_F32(-2, 2, 3, 3), OC_VALUES(EM_I32, idx_axis_last, 4)}, 1,
   {OC_ATTR_I("axis", -1)}, .grad = 1},
  {"gather", "embedding", 2, {OC_F32(-2, 2, 1000, 16), OC_I64(-1000, 1000, 40, 9)}, .grad = 1},
  {"gather", "i32", 2, {OC_I32(-99, 99, 4, 3), OC_VALUES(EM_I64, idx_axis_last, 2, 2)}, 1, {OC_ATTR_I("axis", 1)}},
  {"gather", "bool", 2, {OC_BOOL(5, 2), OC_VALUES(EM_I32, idx_5, 3)}},
  {"gather", "u8", 2, {OC_U8(0, 256, 6), OC_VALUES(EM_I64, idx_rep, 6)}},
  {"gather", "i64 scalar index", 2, {OC_I64(-99, 99, 5, 3), OC_SCALAR(EM_I64, 0, 5)}},

  /* one_hot */
  {"one_hot", "f32", 1, {OC_I64(-7, 8, 3, 4)}, 1, {OC_ATTR_I("depth", 5)}},
  {"one_hot", "axis 0 i32", 1, {OC_I32(-3, 3, 6)}, 4,
   {OC_ATTR_I("depth", 3), OC_ATTR_I("axis", 0), OC_ATTR_I("dtype", EM_I32), OC_ATTR_F("on_value", 3)}},
  {"one_hot", "f64 middle", 1, {OC_I32(0, 4, 2, 5)}, 5,
   {OC_ATTR_I("depth", 4), OC_ATTR_I("axis", 1), OC_ATTR_I("dtype", EM_F64), OC_ATTR_F("on_value", 0.25),
    OC_ATTR_F("off_value", -1)}},
  {"one_hot", "bool", 1, {OC_I64(0, 9, 7)}, 2, {OC_ATTR_I("depth", 9), OC_ATTR_I("dtype", EM_BOOL)}},
  {"one_hot", "u8", 1, {OC_I64(0, 300, 33)}, 3,
   {OC_ATTR_I("depth", 300), OC_ATTR_I("dtype", EM_U8), OC_ATTR_F("on_value", 200)}},
  {"one_hot", "i64 1", 1, {OC_I64(0, 1, 1)}, 2, {OC_ATTR_I("depth", 1), OC_ATTR_I("dtype", EM_I64)}},

  /* top_k (and _top_k_grad through .grad) */
  {"top_k", "f32", 1, {OC_F32(-2, 2, 4, 37)}, 1, {OC_ATTR_I("k", 5)}, .grad = 1},
  {"top_k", "f64 all axis 0", 1, {OC_F64(-2, 2, 9, 3)}, 2, {OC_ATTR_I("k", 9), OC_ATTR_I("axis", 0)}, .grad = 1},
  {"top_k", "smallest", 1, {OC_F32(-2, 2, 3, 4, 5)}, 3,
   {OC_ATTR_I("k", 2), OC_ATTR_I("axis", 1), OC_ATTR_I("largest", 0)}, .grad = 1},
  {"top_k", "NaN inf ties", 1, {OC_VALUES(EM_F32, topk_special, 2, 12)}, 1, {OC_ATTR_I("k", 12)}, .grad = 1},
  {"top_k", "NaN smallest f64", 1, {OC_VALUES(EM_F64, topk_special, 4, 6)}, 2,
   {OC_ATTR_I("k", 4), OC_ATTR_I("largest", 0)}, .grad = 1},
  {"top_k", "i32 ties", 1, {OC_I32(0, 3, 5, 20)}, 2, {OC_ATTR_I("k", 7), OC_ATTR_I("largest", 0)}},
  {"top_k", "i64 ties axis 0", 1, {OC_I64(-2, 2, 10, 3)}, 2, {OC_ATTR_I("k", 4), OC_ATTR_I("axis", 0)}},
  {"top_k", "u8", 1, {OC_U8(0, 256, 6, 10)}, 2, {OC_ATTR_I("k", 4), OC_ATTR_I("axis", 0)}},
  {"top_k", "long row", 1, {OC_F32(-2, 2, 2, 3000)}, 1, {OC_ATTR_I("k", 3)}, .grad = 1},
  {"_top_k_grad", "i32", 3, {OC_I32(-9, 9, 2, 3), OC_VALUES(EM_I64, topk_grad_idx, 2, 3), OC_I32(0, 1, 2, 4)}, 1,
   {OC_ATTR_I("axis", 1)}},

  /* depth_to_space, space_to_depth */
  {"depth_to_space", "DCR", 1, {OC_F32(-2, 2, 2, 8, 3, 5)}, 1, {OC_ATTR_I("blocksize", 2)}, .grad = 1},
  {"depth_to_space", "CRD f64", 1, {OC_F64(-2, 2, 1, 18, 2, 3)}, 2,
   {OC_ATTR_I("blocksize", 3), OC_ATTR_S("mode", "CRD")}, .grad = 1},
  {"depth_to_space", "i32", 1, {OC_I32(-9, 9, 1, 4, 2, 2)}, 1, {OC_ATTR_I("blocksize", 2)}},
  {"space_to_depth", "DCR", 1, {OC_F32(-2, 2, 2, 3, 4, 6)}, 1, {OC_ATTR_I("blocksize", 2)}, .grad = 1},
  {"space_to_depth", "CRD f64", 1, {OC_F64(-2, 2, 1, 2, 6, 3)}, 2,
   {OC_ATTR_I("blocksize", 3), OC_ATTR_S("mode", "CRD")}, .grad = 1},
  {"space_to_depth", "u8", 1, {OC_U8(0, 256, 1, 1, 4, 4)}, 1, {OC_ATTR_I("blocksize", 2)}},

  /* expand, tile (and _tile_grad through .grad) */
  {"expand", "f32", 1, {OC_F32(-2, 2, 3, 1)}, 1, {OC_ATTR_IS("shape", 2, 3, 4)}, .grad = 1},
  {"expand", "f64 both ways", 1, {OC_F64(-2, 2, 2, 1, 3)}, 1, {OC_ATTR_IS("shape", 2, 4, 1)}, .grad = 1},
  {"expand", "i32", 1, {OC_I32(-9, 9, 1)}, 1, {OC_ATTR_IS("shape", 5)}},
  {"expand", "bool", 1, {OC_BOOL(2, 1, 3)}, 1, {OC_ATTR_IS("shape", 2, 4, 1)}},
  {"tile", "f32", 1, {OC_F32(-2, 2, 2, 3)}, 1, {OC_ATTR_IS("repeats", 3, 2)}, .grad = 1},
  {"tile", "f64 size-1 axes", 1, {OC_F64(-2, 2, 1, 4, 1)}, 1, {OC_ATTR_IS("repeats", 2, 1, 3)}, .grad = 1},
  {"tile", "f32 4-D", 1, {OC_F32(-2, 2, 2, 2, 3, 2)}, 1, {OC_ATTR_IS("repeats", 2, 3, 2, 2)}, .grad = 1},
  {"tile", "i64 8 axes", 1, {OC_I64(-9, 9, 2, 2, 2, 2)}, 1, {OC_ATTR_IS("repeats", 2, 2, 2, 2)}},
  {"tile", "u8 zero repeats", 1, {OC_U8(0, 256, 3, 2)}, 1, {OC_ATTR_IS("repeats", 0, 2)}},
  {"tile", "large", 1, {OC_F32(-2, 2, 50, 40)}, 1, {OC_ATTR_IS("repeats", 3, 5)}, .grad = 1},

  /* cast: every pair of f32 f64 i32 i64 u8 bool, and to f16 / bf16 */
  CAST("f32 -> f64", OC_F32(-300, 300, 7, 9), EM_F64),
  CAST("f32 -> i32", OC_F32(-3e9, 3e9, 33), EM_I32),
  CAST("f32 -> i64", OC_F32(-1e19, 1e19, 33), EM_I64),
  CAST("f32 -> u8", OC_F32(-300, 300, 33), EM_U8),
  CAST("f32 -> bool", OC_F32(-1, 1, 33), EM_BOOL),
  CAST("f32 -> f16", OC_F32(-70000, 70000, 65), EM_F16),
  CAST("f32 -> bf16", OC_F32(-300, 300, 65), EM_BF16),
  CAST("f64 -> f32", OC_F64(-1e39, 1e39, 33), EM_F32),
  CAST("f64 -> i32", OC_F64(-3e9, 3e9, 33), EM_I32),
  CAST("f64 -> i64", OC_F64(-1e19, 1e19, 33), EM_I64),
  CAST("f64 -> u8", OC_F64(-300, 300, 33), EM_U8),
  CAST("f64 -> bool", OC_F64(-1, 1, 33), EM_BOOL),
  CAST("f64 -> f16", OC_F64(-70000, 70000, 65), EM_F16),
  CAST("f64 -> bf16", OC_F64(-1e5, 1e5, 65), EM_BF16),
  CAST("i32 -> f32", OC_I32(-2147483647.0, 2147483647.0, 33), EM_F32),
  CAST("i32 -> f64", OC_I32(-2147483647.0, 2147483647.0, 33), EM_F64),
  CAST("i32 -> i64", OC_I32(-2147483647.0, 2147483647.0, 33), EM_I64),
  CAST("i32 -> u8", OC_I32(-1000, 1000, 33), EM_U8),
  CAST("i32 -> bool", OC_I32(-2, 2, 33), EM_BOOL),
  CAST("i32 -> f16", OC_I32(-100000, 100000, 33), EM_F16),
  CAST("i64 -> f32", OC_I64(-9e18, 9e18, 33), EM_F32),
  CAST("i64 -> f64", OC_I64(-9e18, 9e18, 33), EM_F64),
  CAST("i64 -> i32", OC_I64(-9e18, 9e18, 33), EM_I32),
  CAST("i64 -> u8", OC_I64(-9e18, 9e18, 33), EM_U8),
  CAST("i64 -> bool", OC_I64(-2, 2, 33), EM_BOOL),
  CAST("i64 -> bf16", OC_I64(-9e18, 9e18, 33), EM_BF16),
  CAST("u8 -> f32", OC_U8(0, 256, 33), EM_F32),
  CAST("u8 -> f64", OC_U8(0, 256, 33), EM_F64),
  CAST("u8 -> i32", OC_U8(0, 256, 33), EM_I32),
  CAST("u8 -> i64", OC_U8(0, 256, 33), EM_I64),
  CAST("u8 -> bool", OC_U8(0, 3, 33), EM_BOOL),
  CAST("bool -> f32", OC_BOOL(33), EM_F32),
  CAST("bool -> f64", OC_BOOL(33), EM_F64),
  CAST("bool -> i32", OC_BOOL(33), EM_I32),
  CAST("bool -> i64", OC_BOOL(33), EM_I64),
  CAST("bool -> u8", OC_BOOL(33), EM_U8),
  CAST("same dtype f32", OC_F32(-2, 2, 9), EM_F32),
  CAST("same dtype bool", OC_BOOL(9), EM_BOOL),
  CAST("special f64 -> i32", OC_VALUES(EM_F64, cast_special, 28), EM_I32),
  CAST("special f64 -> i64", OC_VALUES(EM_F64, cast_special, 28), EM_I64),
  CAST("special f64 -> u8", OC_VALUES(EM_F64, cast_special, 28), EM_U8),
  CAST("special f64 -> bool", OC_VALUES(EM_F64, cast_special, 28), EM_BOOL),
  CAST("special f64 -> f32", OC_VALUES(EM_F64, cast_special, 28), EM_F32),
  CAST("special f64 -> f16", OC_VALUES(EM_F64, cast_special, 28), EM_F16),
  CAST("special f64 -> bf16", OC_VALUES(EM_F64, cast_special, 28), EM_BF16),
  CAST("special f32 -> i32", OC_VALUES(EM_F32, cast_special, 28), EM_I32),
  CAST("special f32 -> u8", OC_VALUES(EM_F32, cast_special, 28), EM_U8),
  CAST("special f32 -> i64", OC_VALUES(EM_F32, cast_special, 28), EM_I64),
  CAST("special i64 -> f32", OC_VALUES(EM_I64, cast_ints, 20), EM_F32),
  CAST("special i64 -> f16", OC_VALUES(EM_I64, cast_ints, 20), EM_F16),
  CAST("special i64 -> i32", OC_VALUES(EM_I64, cast_ints, 20), EM_I32),
  CAST("special i64 -> u8", OC_VALUES(EM_I64, cast_ints, 20), EM_U8),
  CAST("large f32 -> f64", OC_F32(-2, 2, 70000), EM_F64),
  {"cast", "f32 -> f64 grad", 1, {OC_F32(-2, 2, 3, 5)}, 1, {OC_ATTR_I("to", EM_F64)}, .grad = 1},
  {"cast", "f64 -> f32 grad", 1, {OC_F64(-2, 2, 3, 5)}, 1, {OC_ATTR_I("to", EM_F32)}, .grad = 1},

  /* review: empty tensors (0-size dims) and rank 0 on every path */
  {"transpose", "empty", 1, {OC_F32(-2, 2, 0, 3)}, .grad = 1},
  {"transpose", "scalar", 1, {OC_SCALAR(EM_F64, -2, 2)}, .grad = 1},
  {"reshape", "empty", 1, {OC_F32(-2, 2, 3, 0)}, 1, {OC_ATTR_IS("shape", 2, 0)}, .grad = 1},
  {"reshape", "scalar to 1", 1, {OC_SCALAR(EM_F32, -2, 2)}, 1, {OC_ATTR_IS("shape", 1)}, .grad = 1},
  {"slice", "empty result", 1, {OC_F32(-2, 2, 4, 5)}, 2, {OC_ATTR_IS("starts", 3), OC_ATTR_IS("ends", 1)},
   .grad = 1},
  {"slice", "of empty", 1, {OC_F64(-2, 2, 0, 5)}, 3,
   {OC_ATTR_IS("starts", 1), OC_ATTR_IS("ends", 4), OC_ATTR_IS("axes", 1)}, .grad = 1},
  {"slice", "8-D negative steps", 1, {OC_F64(-2, 2, 2, 3, 2, 3, 2, 3, 2, 3)}, 3,
   {OC_ATTR_IS("starts", -1, -1, -1, -1, -1, -1, -1, -1), OC_ATTR_IS("ends", -100, -100, -100, -100, -100, -100, -100, -100),
    OC_ATTR_IS("steps", -1, -2, -1, -2, -1, -2, -1, -2)}, .grad = 1},
  {"concat", "empty piece", 3, {OC_F32(-2, 2, 2, 3), OC_F32(-2, 2, 2, 0), OC_F32(-2, 2, 2, 2)}, 1,
   {OC_ATTR_I("axis", 1)}, .grad = 1},
  {"concat", "all empty", 2, {OC_F64(-2, 2, 0, 3), OC_F64(-2, 2, 0, 3)}, .grad = 1},
  {"pad", "empty axis constant", 1, {OC_F32(-2, 2, 0, 3)}, 2, {OC_ATTR_IS("pads", 1, 0, 2, 1), OC_ATTR_F("value", 3)},
   .grad = 1},
  {"pad", "empty last axis constant", 1, {OC_F64(-2, 2, 2, 0)}, 2, {OC_ATTR_IS("pads", 0, 1, 0, 2), OC_ATTR_F("value", -1)},
   .grad = 1},
  {"pad", "scalar", 1, {OC_SCALAR(EM_F32, -2, 2)}, 1, {OC_ATTR_NONE_INTS("pads")}, .grad = 1},
  {"pad", "crop to empty", 1, {OC_F32(-2, 2, 3, 4)}, 1, {OC_ATTR_IS("pads", -1, 0, -2, 0)}, .grad = 1},
  {"gather", "no indices", 2, {OC_F32(-2, 2, 5, 3), OC_I64(0, 5, 0)}, .grad = 1},
  {"gather", "empty rows", 2, {OC_F64(-2, 2, 4, 0), OC_VALUES(EM_I32, idx_axis_last, 4)}, .grad = 1},
  {"one_hot", "empty", 1, {OC_I64(0, 3, 0, 2)}, 1, {OC_ATTR_I("depth", 3)}},
  {"top_k", "k 0", 1, {OC_F32(-2, 2, 3, 4)}, 1, {OC_ATTR_I("k", 0)}, .grad = 1},
  {"top_k", "empty rows", 1, {OC_F64(-2, 2, 0, 4)}, 1, {OC_ATTR_I("k", 2)}, .grad = 1},
  {"expand", "scalar", 1, {OC_SCALAR(EM_F64, -2, 2)}, 1, {OC_ATTR_IS("shape", 2, 3)}, .grad = 1},
  {"expand", "to empty", 1, {OC_F32(-2, 2, 3, 1)}, 1, {OC_ATTR_IS("shape", 3, 0)}, .grad = 1},
  {"tile", "zero repeats grad", 1, {OC_F32(-2, 2, 3, 2)}, 1, {OC_ATTR_IS("repeats", 2, 0)}, .grad = 1},
  {"tile", "scalar", 1, {OC_SCALAR(EM_F64, -2, 2)}, 1, {OC_ATTR_NONE_INTS("repeats")}, .grad = 1},
  {"tile", "f64 7-D grad", 1, {OC_F64(-2, 2, 2, 1, 2, 1, 2, 1, 2)}, 1, {OC_ATTR_IS("repeats", 2, 3, 2, 3, 2, 3, 2)},
   .grad = 1},
  {"pad", "f64 7 padded axes grad", 1, {OC_F64(-2, 2, 2, 2, 2, 2, 2, 2, 2)}, 1,
   {OC_ATTR_IS("pads", 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0)}, .grad = 1},
  CAST("empty", OC_F32(-2, 2, 0, 4), EM_I32),
  CAST("scalar", OC_SCALAR(EM_F64, -2, 2), EM_F16),
};
OC_REGISTER(shape, cases)
