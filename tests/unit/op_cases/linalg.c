/* Cases of the every-op-every-device test for the linalg family (ops/linalg.c,
 * kernels/gemm.cu). Sizes around the kernel's tiles (128 x 128 for the 4-byte
 * types, 64 x 64 for the 8-byte ones, K in slices of 16: one above each), a
 * single element, 1-D operands, every transpose, batches that broadcast on
 * either side (their gradients sum over the broadcast axes in batch order),
 * the folded batch of a dense layer, gemm's c in each broadcast shape with
 * alpha and beta. "interior" cases have whole 128 x 128 tiles and K > 32, so
 * the kernel's unchecked loads run (every transpose), then its checked last
 * slices. "-0 sums" makes every acc -0 (each fma of 1e-30 and -1e-30 rounds to
 * -0) with K = 5: the kernel pads K to 16 with products that must keep -0.
 * .grad covers _matmul_grad and _gemm_c_grad. */
#include <math.h>

#include "op_cases.h"

/* 1e-30 and -1e-30, for the -0 sums. */
static const double tiny_a[3 * 5] = {1e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30,
                                     1e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30, 1e-30};
static const double tiny_b[5 * 2] = {-1e-30, -1e-30, -1e-30, -1e-30, -1e-30, -1e-30, -1e-30, -1e-30, -1e-30, -1e-30};

/* NaN, infinities, -0 and a product of +inf and 0 (NaN) among ordinary values, for propagation. */
static const double special_a[3 * 5] = {NAN, 1, -2, 0.5, 3, INFINITY, -0.0, 1, 2, -1, -0.0, -0.0, -0.0, -0.0, -0.0};
static const double special_b[5 * 4] = {1, -1, 0, 2, 0.25, 0.5, -0.0, 1, 1, 1, 1, -INFINITY, 2, 0, 1, 1, -3, 1, 1, 0};

static const oc_case cases[] = {
  {"matmul", "1", 2, {OC_F32(-1, 1, 1, 1), OC_F32(-1, 1, 1, 1)}, .grad = 1},
  {"matmul", "dot", 2, {OC_F32(-1, 1, 7), OC_F32(-1, 1, 7)}, .grad = 1},
  {"matmul", "vec @ mat", 2, {OC_F32(-1, 1, 5), OC_F32(-1, 1, 5, 3)}, .grad = 1},
  {"matmul", "mat @ vec", 2, {OC_F32(-1, 1, 4, 6), OC_F32(-1, 1, 6)}, .grad = 1},
  {"matmul", "odd", 2, {OC_F32(-1, 1, 13, 17), OC_F32(-1, 1, 17, 11)}, .grad = 1},
  {"matmul", "tile+1", 2, {OC_F32(-1, 1, 129, 9), OC_F32(-1, 1, 9, 130)}, .grad = 1, .tol = 1e-4},
  {"matmul", "large", 2, {OC_F32(-1, 1, 130, 90), OC_F32(-1, 1, 90, 70)}, .grad = 1, .tol = 1e-4},
  {"matmul", "transpose_a", 2, {OC_F32(-1, 1, 9, 5), OC_F32(-1, 1, 9, 4)}, 1, {OC_ATTR_I("transpose_a", 1)},
   .grad = 1},
  {"matmul", "transpose_b", 2, {OC_F32(-1, 1, 5, 9), OC_F32(-1, 1, 4, 9)}, 1, {OC_ATTR_I("transpose_b", 1)},
   .grad = 1},
  {"matmul", "both transposed", 2, {OC_F32(-1, 1, 17, 131), OC_F32(-1, 1, 3, 17)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}, .grad = 1, .tol = 1e-4},
  {"matmul", "batch", 2, {OC_F32(-1, 1, 3, 4, 5), OC_F32(-1, 1, 3, 5, 6)}, .grad = 1},
  {"matmul", "broadcast", 2, {OC_F32(-1, 1, 2, 1, 3, 4), OC_F32(-1, 1, 5, 4, 6)}, .grad = 1},
  {"matmul", "broadcast both ways", 2, {OC_F32(-1, 1, 3, 1, 2, 5, 4), OC_F32(-1, 1, 1, 4, 1, 4, 3)}, .grad = 1},
  {"matmul", "dense layer fold", 2, {OC_F32(-1, 1, 4, 3, 5), OC_F32(-1, 1, 5, 7)}, .grad = 1},
  {"matmul", "batch @ vec", 2, {OC_F32(-1, 1, 3, 4, 5), OC_F32(-1, 1, 5)}, .grad = 1},
  {"matmul", "vec @ batch", 2, {OC_F32(-1, 1, 5), OC_F32(-1, 1, 3, 5, 4)}, .grad = 1},
  {"matmul", "broadcast transposed", 2, {OC_F32(-1, 1, 2, 7, 3), OC_F32(-1, 1, 5, 1, 4, 7)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}, .grad = 1},
  {"matmul", "K = 0", 2, {OC_F32(-1, 1, 3, 0), OC_F32(-1, 1, 0, 4)}, .grad = 1},
  {"matmul", "empty broadcast batch", 2, {OC_F32(-1, 1, 1, 3, 4), OC_F32(-1, 1, 0, 4, 2)}, .grad = 1},
  {"matmul", "interior", 2, {OC_F32(-1, 1, 130, 40), OC_F32(-1, 1, 40, 129)}, .tol = 1e-4},
  {"matmul", "interior transposed", 2, {OC_F32(-1, 1, 37, 129), OC_F32(-1, 1, 130, 37)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}, .tol = 1e-4},
  {"matmul", "-0 sums", 2, {OC_VALUES(EM_F32, tiny_a, 3, 5), OC_VALUES(EM_F32, tiny_b, 5, 2)}},
  {"matmul", "NaN, inf and -0", 2, {OC_VALUES(EM_F32, special_a, 3, 5), OC_VALUES(EM_F32, special_b, 5, 4)}},
  {"matmul", "f64 NaN, inf and -0", 2, {OC_VALUES(EM_F64, special_a, 3, 5), OC_VALUES(EM_F64, special_b, 5, 4)}},
  /* K on the slice edges (16, 32: the last unchecked slice; 17, 15) with whole tiles and without. */
  {"matmul", "whole tiles, K = 32", 2, {OC_F32(-1, 1, 128, 32), OC_F32(-1, 1, 32, 128)}, .tol = 1e-4},
  {"matmul", "whole tiles, K = 16", 2, {OC_F32(-1, 1, 128, 16), OC_F32(-1, 1, 16, 256)}, 1,
   {OC_ATTR_I("transpose_b", 0)}, .tol = 1e-4},
  {"matmul", "whole tiles transposed, K = 48", 2, {OC_F32(-1, 1, 48, 256), OC_F32(-1, 1, 128, 48)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}, .tol = 1e-4},
  {"matmul", "K = 15 and 17", 2, {OC_F32(-1, 1, 2, 127, 17), OC_F32(-1, 1, 17, 15)}, .grad = 1, .tol = 1e-4},
  {"matmul", "broadcast interior", 2, {OC_F32(-1, 1, 2, 1, 130, 33), OC_F32(-1, 1, 3, 33, 129)}, .grad = 1,
   .tol = 1e-4},
  {"matmul", "f64 whole tiles, K = 32", 2, {OC_F64(-1, 1, 64, 32), OC_F64(-1, 1, 32, 128)}, 1,
   {OC_ATTR_I("transpose_a", 0)}},
  {"matmul", "f64 whole tiles transposed, K = 33", 2, {OC_F64(-1, 1, 33, 128), OC_F64(-1, 1, 64, 33)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}},
  {"matmul", "i64 whole tiles transposed", 2, {OC_I64(-1000, 1000, 40, 64), OC_I64(-1000, 1000, 65, 40)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}, .grad = 0},
  {"matmul", "f64 interior", 2, {OC_F64(-1, 1, 65, 35), OC_F64(-1, 1, 35, 66)}},
  {"matmul", "f64 1", 2, {OC_F64(-1, 1, 1, 1), OC_F64(-1, 1, 1, 1)}, .grad = 1},
  {"matmul", "f64 tile+1", 2, {OC_F64(-1, 1, 65, 33), OC_F64(-1, 1, 33, 66)}, .grad = 1},
  {"matmul", "f64 large", 2, {OC_F64(-1, 1, 130, 90), OC_F64(-1, 1, 90, 70)}, .grad = 0},
  {"matmul", "f64 broadcast transposed", 2, {OC_F64(-1, 1, 2, 1, 9, 6), OC_F64(-1, 1, 3, 5, 9)}, 2,
   {OC_ATTR_I("transpose_a", 1), OC_ATTR_I("transpose_b", 1)}, .grad = 1},
  {"matmul", "f64 fold", 2, {OC_F64(-1, 1, 2, 3, 8), OC_F64(-1, 1, 8, 9)}, .grad = 1},
  {"matmul", "i32", 2, {OC_I32(-50, 50, 5, 7), OC_I32(-50, 50, 7, 3)}, .grad = 0},
  {"matmul", "i32 wraps", 2, {OC_I32(-2000000000, 2000000000, 3, 9), OC_I32(-2000000000, 2000000000, 9, 2)},
   .grad = 0},
  {"matmul", "i64 broadcast", 2, {OC_I64(-1000, 1000, 2, 3, 4), OC_I64(-1000, 1000, 4, 5)}, .grad = 0},
  {"matmul", "i32 interior", 2, {OC_I32(-50, 50, 129, 33), OC_I32(-50, 50, 33, 130)}, .grad = 0},
  {"matmul", "i64 transposed", 2, {OC_I64(-9, 9, 2, 1, 4, 3), OC_I64(-9, 9, 3, 4, 5)}, 1,
   {OC_ATTR_I("transpose_a", 1)}, .grad = 0},

  {"gemm", "plain", 2, {OC_F32(-1, 1, 6, 5), OC_F32(-1, 1, 5, 7)}, .grad = 1},
  {"gemm", "c full", 3, {OC_F32(-1, 1, 6, 5), OC_F32(-1, 1, 5, 7), OC_F32(-1, 1, 6, 7)}, 2,
   {OC_ATTR_F("alpha", 0.5), OC_ATTR_F("beta", 2)}, .grad = 1},
  {"gemm", "c row transA", 3, {OC_F32(-1, 1, 9, 6), OC_F32(-1, 1, 9, 7), OC_F32(-1, 1, 7)}, 2,
   {OC_ATTR_I("transA", 1), OC_ATTR_F("beta", -1.5)}, .grad = 1},
  {"gemm", "c column transB", 3, {OC_F32(-1, 1, 6, 9), OC_F32(-1, 1, 7, 9), OC_F32(-1, 1, 6, 1)}, 2,
   {OC_ATTR_I("transB", 1), OC_ATTR_F("alpha", -3)}, .grad = 1},
  {"gemm", "c scalar both transposed", 3, {OC_F32(-1, 1, 9, 129), OC_F32(-1, 1, 131, 9), OC_F32(-1, 1, 1)}, 2,
   {OC_ATTR_I("transA", 1), OC_ATTR_I("transB", 1)}, .grad = 1, .tol = 1e-4},
  {"gemm", "beta 0", 3, {OC_F32(-1, 1, 4, 3), OC_F32(-1, 1, 3, 5), OC_F32(-1, 1, 4, 5)}, 1,
   {OC_ATTR_F("beta", 0)}, .grad = 1},
  {"gemm", "alpha int", 2, {OC_F32(-1, 1, 3, 4), OC_F32(-1, 1, 4, 2)}, 1, {OC_ATTR_I("alpha", 2)}, .grad = 1},
  {"gemm", "large", 3, {OC_F32(-1, 1, 100, 80), OC_F32(-1, 1, 80, 120), OC_F32(-1, 1, 120)}, .grad = 1,
   .tol = 1e-4},
  {"gemm", "whole tiles, c column, transposed", 3,
   {OC_F32(-1, 1, 33, 256), OC_F32(-1, 1, 128, 33), OC_F32(-1, 1, 256, 1)}, 4,
   {OC_ATTR_I("transA", 1), OC_ATTR_I("transB", 1), OC_ATTR_F("alpha", 0.75), OC_ATTR_F("beta", -1.25)},
   .grad = 1, .tol = 1e-4},
  {"gemm", "NaN, inf and -0 with c", 3,
   {OC_VALUES(EM_F32, special_a, 3, 5), OC_VALUES(EM_F32, special_b, 5, 4), OC_VALUES(EM_F32, special_b, 4)}, 2,
   {OC_ATTR_F("alpha", -1), OC_ATTR_F("beta", 0.5)}},
  {"gemm", "f64", 3, {OC_F64(-1, 1, 65, 9), OC_F64(-1, 1, 9, 66), OC_F64(-1, 1, 1, 66)}, 2,
   {OC_ATTR_F("alpha", -1.5), OC_ATTR_F("beta", 0.25)}, .grad = 1},
  {"gemm", "f64 transposed c full", 3, {OC_F64(-1, 1, 5, 4), OC_F64(-1, 1, 3, 5), OC_F64(-1, 1, 4, 3)}, 2,
   {OC_ATTR_I("transA", 1), OC_ATTR_I("transB", 1)}, .grad = 1},
  /* f16 and bf16 (engine/half.c: f32 accumulation, one rounding; cuBLAS GemmEx in fast mode):
   * the fast mode may differ from the CPU by one rounding of the result */
  {"matmul", "f16", 2, {OC_IN(EM_F16, -1, 1, 13, 17), OC_IN(EM_F16, -1, 1, 17, 11)}, .tol = 2e-3},
  {"matmul", "bf16 batch broadcast", 2, {OC_IN(EM_BF16, -1, 1, 2, 1, 9, 40), OC_IN(EM_BF16, -1, 1, 3, 40, 6)},
   .tol = 1e-2},
  {"gemm", "f16 c row transB", 3, {OC_IN(EM_F16, -1, 1, 6, 33), OC_IN(EM_F16, -1, 1, 7, 33), OC_IN(EM_F16, -1, 1, 7)},
   3, {OC_ATTR_I("transB", 1), OC_ATTR_F("alpha", 0.5), OC_ATTR_F("beta", -2)}, .tol = 2e-3},
};
OC_REGISTER(linalg, cases)
