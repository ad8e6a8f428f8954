/* The core family's GPU members (ops/core_gpu.c, kernels/core.cu). */
#ifndef EMBER_OPS_CORE_GPU_H
#define EMBER_OPS_CORE_GPU_H

#include "../engine/op.h"

em_status em_core_copy_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_zeros_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_ones_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_add_n_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_sum_to_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_broadcast_like_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_weighted_sum_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_core_scale_by_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

#endif
