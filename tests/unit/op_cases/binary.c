/* Cases of the binary family (ops/binary.c) for the every-op-every-device
 * test: every op, every dtype it takes, shapes that exercise the kernels'
 * index map (one element, a rank-0 operand, odd sizes, broadcasting of either
 * or both operands, more than one grid of 256 x 65535 is not needed: the
 * kernels stride), and the gradients (.grad: the _binary_grad and
 * _where_grad kernels, each fn and which). Divisors stay away from 0 where
 * the op's gradient divides by them; the integer cases include 0 divisors
 * (x/0 = 0, x mod 0 = 0). */
#include "op_cases.h"

/* x / 0, INT_MIN / -1 and friends, fixed: random values rarely hit them. */
static const double int_x[] = {7, -7, 7, -7, 0, -2147483648.0, -2147483648.0, 5, -5, 3, 13, -13};
static const double int_y[] = {2, 2, -2, -2, 3, -1, 1, 0, 0, -1, 5, 5};
static const double cond3[] = {1, 0, 1};

static const oc_case cases[] = {
  /* add: every dtype; shapes: 1 element, rank 0, odd, both operands broadcast, large. */
  {"add", "1", 2, {OC_F32(-2, 2, 1), OC_F32(-2, 2, 1)}, .grad = 1},
  {"add", "scalar", 2, {OC_F32(-2, 2, 3, 5), OC_SCALAR(EM_F32, -2, 2)}, .grad = 1},
  {"add", "odd", 2, {OC_F32(-2, 2, 3, 5, 7), OC_F32(-2, 2, 3, 5, 7)}, .grad = 1},
  {"add", "broadcast", 2, {OC_F32(-2, 2, 4, 1, 5), OC_F32(-2, 2, 3, 1)}, .grad = 1},
  {"add", "6 axes", 2, {OC_F32(-2, 2, 2, 1, 3, 1, 2, 1), OC_F32(-2, 2, 1, 2, 1, 2, 1, 3)}, .grad = 1},
  {"add", "large", 2, {OC_F32(-2, 2, 97, 1031), OC_F32(-2, 2, 1031)}, .grad = 1},
  {"add", "f64", 2, {OC_F64(-2, 2, 5, 1), OC_F64(-2, 2, 1, 7)}, .grad = 1},
  {"add", "i32", 2, {OC_I32(-1000, 1000, 3, 257), OC_I32(-1000, 1000, 257)}},
  {"add", "i64", 2, {OC_I64(-1000, 1000, 2, 3, 5), OC_I64(-1000, 1000, 3, 1)}},
  {"sub", "broadcast", 2, {OC_F32(-2, 2, 3, 1), OC_F32(-2, 2, 4, 1, 5)}, .grad = 1},
  {"sub", "f64", 2, {OC_F64(-2, 2, 6, 7), OC_F64(-2, 2, 7)}, .grad = 1},
  {"sub", "i32", 2, {OC_I32(-1000, 1000, 17), OC_I32(-1000, 1000, 1)}},
  {"sub", "i64", 2, {OC_I64(-1000, 1000, 4, 9), OC_I64(-1000, 1000, 4, 1)}},
  {"mul", "broadcast", 2, {OC_F32(-2, 2, 2, 3, 4), OC_F32(-2, 2, 3, 1)}, .grad = 1},
  {"mul", "large", 2, {OC_F32(-2, 2, 33, 1031), OC_F32(-2, 2, 33, 1)}, .grad = 1},
  {"mul", "f64", 2, {OC_F64(-2, 2, 33), OC_F64(-2, 2, 33)}, .grad = 1},
  {"mul", "i32", 2, {OC_I32(-70000, 70000, 5, 7), OC_I32(-70000, 70000, 7)}},
  {"mul", "i64", 2, {OC_I64(-100000, 100000, 5, 7), OC_I64(-100000, 100000, 5, 7)}},
  /* div: float divisors away from 0 (the gradient divides by y^2). */
  {"div", "broadcast", 2, {OC_F32(-2, 2, 4, 1, 5), OC_F32(0.5, 2, 3, 1)}, .grad = 1},
  {"div", "f64", 2, {OC_F64(-2, 2, 3, 5), OC_F64(-2, -0.5, 5)}, .grad = 1},
  {"div", "i32", 2, {OC_I32(-50, 50, 7, 11), OC_I32(-3, 4, 11)}},
  {"div", "i64", 2, {OC_I64(-50, 50, 7, 11), OC_I64(-3, 4, 7, 1)}},
  {"div", "i32 edges", 2, {OC_VALUES(EM_I32, int_x, 12), OC_VALUES(EM_I32, int_y, 12)}},
  {"div", "i64 edges", 2, {OC_VALUES(EM_I64, int_x, 12), OC_VALUES(EM_I64, int_y, 12)}},
  /* pow: a positive base, so the exponent's gradient (log x) is defined. f64
   * runs on the CPU (libm's pow; ops/binary_gpu.c). */
  {"pow", "broadcast", 2, {OC_F32(0.25, 3, 3, 1, 5), OC_F32(-2, 2, 4, 1)}, .grad = 1},
  {"pow", "odd", 2, {OC_F32(-3, 3, 7, 9), OC_F32(-3, 3, 7, 9)}},
  {"pow", "f64", 2, {OC_F64(0.25, 3, 5), OC_F64(-2, 2, 5)}, .grad = 1},
  {"max", "broadcast", 2, {OC_F32(-2, 2, 3, 7), OC_F32(-2, 2, 7)}, .grad = 1},
  {"max", "f64", 2, {OC_F64(-2, 2, 2, 5), OC_F64(-2, 2, 2, 1)}, .grad = 1},
  {"max", "i32", 2, {OC_I32(-5, 5, 9), OC_I32(-5, 5, 9)}},
  {"max", "i64", 2, {OC_I64(-5, 5, 3, 3), OC_I64(-5, 5, 3)}},
  {"min", "broadcast", 2, {OC_F32(-2, 2, 7), OC_F32(-2, 2, 3, 7)}, .grad = 1},
  {"min", "f64", 2, {OC_F64(-2, 2, 11), OC_F64(-2, 2, 11)}, .grad = 1},
  {"min", "i32", 2, {OC_I32(-5, 5, 9), OC_I32(-5, 5, 1)}},
  {"min", "i64", 2, {OC_I64(-5, 5, 13), OC_I64(-5, 5, 13)}},
  /* mod: both sign conventions, divisors of both signs (away from 0 for floats). */
  {"mod", "py", 2, {OC_F32(-20, 20, 5, 7), OC_F32(0.5, 3, 7)}, .grad = 1},
  {"mod", "py neg", 2, {OC_F32(-20, 20, 5, 7), OC_F32(-3, -0.5, 5, 1)}, .grad = 1},
  {"mod", "fmod", 2, {OC_F32(-20, 20, 5, 7), OC_F32(-3, -0.5, 7)}, 1, {OC_ATTR_I("fmod", 1)}, .grad = 1},
  {"mod", "wide", 2, {OC_F32(-1e30, 1e30, 33), OC_F32(1e-3, 2e-3, 33)}},
  {"mod", "py f64", 2, {OC_F64(-20, 20, 9), OC_F64(0.5, 3, 9)}, .grad = 1},
  {"mod", "fmod f64", 2, {OC_F64(-20, 20, 3, 3), OC_F64(0.5, 3, 3)}, 1, {OC_ATTR_I("fmod", 1)}, .grad = 1},
  {"mod", "wide f64", 2, {OC_F64(-1e300, 1e300, 17), OC_F64(1e-200, 2e-200, 17)}},
  {"mod", "i32", 2, {OC_VALUES(EM_I32, int_x, 12), OC_VALUES(EM_I32, int_y, 12)}},
  {"mod", "i64 fmod", 2, {OC_VALUES(EM_I64, int_x, 12), OC_VALUES(EM_I64, int_y, 12)}, 1, {OC_ATTR_I("fmod", 1)}},
  {"mod", "i64", 2, {OC_I64(-50, 50, 5, 9), OC_I64(-4, 5, 9)}},
  {"mod", "i32 fmod", 2, {OC_I32(-50, 50, 5, 9), OC_I32(-4, 5, 5, 1)}, 1, {OC_ATTR_I("fmod", 1)}},
  /* comparisons: every dtype; small integer ranges so ties happen. */
  {"equal", "f32", 2, {OC_F32(-2, 2, 3, 5), OC_F32(-2, 2, 5)}},
  {"equal", "i32", 2, {OC_I32(-2, 2, 3, 5), OC_I32(-2, 2, 3, 1)}},
  {"equal", "bool", 2, {OC_BOOL(4, 5), OC_BOOL(5)}},
  {"less", "f64", 2, {OC_F64(-2, 2, 7), OC_F64(-2, 2, 7)}},
  {"less", "i64", 2, {OC_I64(-2, 2, 3, 5), OC_I64(-2, 2, 5)}},
  {"less", "u8", 2, {OC_IN(EM_U8, 0, 4, 2, 9), OC_IN(EM_U8, 0, 4, 9)}},
  {"greater", "f32", 2, {OC_F32(-2, 2, 1), OC_F32(-2, 2, 1)}},
  {"greater", "bool", 2, {OC_BOOL(3, 1), OC_BOOL(3, 4)}},
  {"greater", "i32", 2, {OC_I32(-2, 2, 263), OC_I32(-2, 2, 263)}},
  {"less_equal", "i32", 2, {OC_I32(-2, 2, 2, 3, 4), OC_I32(-2, 2, 4)}},
  {"less_equal", "f64", 2, {OC_F64(-2, 2, 6), OC_F64(-2, 2, 6)}},
  {"greater_equal", "i64", 2, {OC_I64(-2, 2, 6, 1), OC_I64(-2, 2, 6)}},
  {"greater_equal", "u8", 2, {OC_IN(EM_U8, 0, 3, 11), OC_IN(EM_U8, 0, 3, 11)}},
  {"greater_equal", "large", 2, {OC_F32(-2, 2, 301, 257), OC_F32(-2, 2, 257)}},
  /* logic */
  {"and", "broadcast", 2, {OC_BOOL(3, 1, 5), OC_BOOL(4, 1)}},
  {"or", "odd", 2, {OC_BOOL(7, 9), OC_BOOL(7, 9)}},
  {"xor", "scalar", 2, {OC_BOOL(13), OC_SCALAR(EM_BOOL, 0, 2)}},
  {"not", "odd", 1, {OC_BOOL(5, 53)}},
  {"not", "1", 1, {OC_BOOL(1)}},
  /* where: every element size (1, 4, 8 bytes), all three operands broadcast. */
  {"where", "broadcast", 3, {OC_BOOL(3, 1, 5), OC_F32(-2, 2, 4, 1), OC_F32(-2, 2, 5)}, .grad = 1},
  {"where", "f64", 3, {OC_VALUES(EM_BOOL, cond3, 3), OC_F64(-2, 2, 2, 3), OC_F64(-2, 2, 2, 1)}, .grad = 1},
  {"where", "i32", 3, {OC_BOOL(7), OC_I32(-9, 9, 7), OC_I32(-9, 9, 1)}},
  {"where", "i64", 3, {OC_BOOL(2, 7), OC_I64(-9, 9, 7), OC_I64(-9, 9, 2, 7)}},
  {"where", "bool", 3, {OC_BOOL(9), OC_BOOL(9), OC_BOOL(1)}},
  {"where", "large", 3, {OC_BOOL(301, 1), OC_F32(-2, 2, 301, 257), OC_F32(-2, 2, 257)}, .grad = 1},
};
OC_REGISTER(binary, cases)
