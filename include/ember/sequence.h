/* Sequences in a batch: CNTK's dynamic sequence axis, done the static way.
 *
 * Ember's graphs have static shapes, so a batch of sequences of different
 * lengths is PADDED to a fixed maximum T: values [N, T, ...] with zeros
 * past each sequence's length, plus the lengths [N] (i32 or i64). The CTF
 * reader delivers exactly that for a sequence stream "x": the padded stream
 * "x" and its lengths "x.lengths" (reader.h). The recurrent layers take the
 * lengths as sequence_lens (layers.h: a step past a sequence's length keeps
 * its state and gives zeros in Y, so Y_h is the state at the last VALID
 * step: classify a sequence from it). For a loss per step (tagging, a
 * language model), the functions below make the mask from the lengths and
 * average over the valid steps only, so padded steps change neither the
 * loss nor any gradient (they receive exactly 0).
 *
 * Every function adds ordinary engine ops (so CPU, GPU, portable mode and
 * autodiff come with them). Errors: EM_ERR_INVALID_ARGUMENT naming the
 * argument and its shape or dtype; on failure *out is untouched (nodes added
 * before the failure stay in the graph, unused). */
#ifndef EMBER_SEQUENCE_H
#define EMBER_SEQUENCE_H

#include <stdint.h>
#include "ember/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mask [N, T] of dtype (EM_BOOL, EM_F32 or EM_F64): 1 (true) where
 * t < lengths[n], else 0 (false). lengths: a vector [N] of i32 or i64 (N
 * may be dynamic, -1); T >= 1. A length past T masks all T steps; a length
 * <= 0 masks none. No gradient flows into lengths. */
EM_API em_status em_sequence_mask(em_graph *g, em_var lengths, int64_t T, em_dtype dtype, em_var *out);

/* The mean of values over the valid steps: sum(where(mask, values, 0)) /
 * max(count of valid steps, 1), a scalar of values' dtype (f32 or f64).
 * values and mask have the same shape ([N, T], or any shape); mask is bool
 * or of values' dtype (nonzero = valid). Padded entries are SELECTED away,
 * not multiplied by 0, so a NaN or inf there cannot leak into the result or
 * the gradient; their gradient is exactly 0. A batch without any valid step
 * gives 0. As a trainer loss (trainer.h) it is a scalar: the trainer's
 * sample-weighted accounting then weights each minibatch by its sequences,
 * not its steps. */
EM_API em_status em_masked_mean(em_graph *g, em_var values, em_var mask, em_var *out);

/* Per-step classification over padded sequences: logits [N, T, C] (f32 or
 * f64), labels [N, T] class indices (i32 or i64; any value in [0, C) at a
 * padded step, the reader's 0 included), lengths [N]. *loss (if not NULL)
 * is the mean softmax cross-entropy over the valid steps; *error (if not
 * NULL) the fraction of valid steps whose top class is not the label. */
EM_API em_status em_sequence_cross_entropy(em_graph *g, em_var logits, em_var labels, em_var lengths, em_var *loss,
                                           em_var *error);

#ifdef __cplusplus
}
#endif
#endif
