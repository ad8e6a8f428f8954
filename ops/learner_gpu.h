/* What the learner op family (ops/learner.c) shares with its launch glue
 * (ops/learner_gpu.c). */
#ifndef EMBER_OPS_LEARNER_GPU_H
#define EMBER_OPS_LEARNER_GPU_H

#include "../engine/op.h"

/* The rule (EM_LRN_*, kernels/learner_math.h) of an _update_ op. */
int em_learner_rule_of(const em_op_def *d);

/* The gpu members (ops/learner_gpu.c). */
em_status em_learner_update_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_learner_scales_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_learner_sumsq_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

#endif
