/* The binary family's GPU members (ops/binary_gpu.c, kernels/binary.cu) and
 * what they need from ops/binary.c. */
#ifndef EMBER_OPS_BINARY_GPU_H
#define EMBER_OPS_BINARY_GPU_H

#include "../engine/op.h"

/* binary.c: the kernel op code (EM_BIN_*, kernels/binary_math.h) of an
 * arithmetic, comparison or logic op, mod resolved by its fmod attribute;
 * -1 for any other op. */
int em_binary_op_code(const em_op_args *a);
/* binary.c: the EM_BGRAD_* code of a _binary_grad application (fn, which,
 * fmod); -1 when the attributes name none. */
int em_binary_grad_code(const em_op_args *a);

/* binary_gpu.c: the gpu members. */
em_status em_binary_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_binary_not_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_binary_where_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_binary_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_binary_where_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

#endif
