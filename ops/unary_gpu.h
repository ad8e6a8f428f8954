/* What the unary op family (ops/unary.c) shares with its launch glue
 * (ops/unary_gpu.c): the op code and the per-op constants the CPU loops and
 * the kernels (kernels/unary.cu) both take, resolved once from the
 * attributes by one function, so both sides round them the same way. */
#ifndef EMBER_OPS_UNARY_GPU_H
#define EMBER_OPS_UNARY_GPU_H

#include <stdint.h>
#include "../engine/op.h"

typedef struct em_unary_launch {
  int op;          /* EM_UNARY_* (kernels/unary_math.h) */
  double a, b;     /* the per-op constants (unary_math.h's table); f32 rounds each once */
  int mode;        /* gelu: 1 for the tanh form; isinf: bit 0 detect_negative, bit 1 detect_positive */
  int64_t ia, ib;  /* clip on i32/i64: min and max clamped to the dtype's range */
} em_unary_launch;

/* Reads and checks the attributes of a's op (grad: of _unary_grad, whose
 * "fn" names the op) for input dtype dt; fails through em_op_fail. */
em_status em_unary_launch_of(const em_op_args *a, int grad, em_dtype dt, em_unary_launch *l);

/* The gpu members (ops/unary_gpu.c). */
em_status em_unary_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_unary_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

#endif
