/* The trainer's hooks into a learner (training/learner.c) for dynamic loss
 * scaling (trainer.h em_loss_scaling): not public API, the trainer is the
 * only caller. */
#ifndef EMBER_TRAINING_LEARNER_INTERNAL_H
#define EMBER_TRAINING_LEARNER_INTERNAL_H

#include "ember/learner.h"

/* em_learner_attach for gradients of the loss times S. grad_sumsq is the
 * trainer's _learner_sumsq node over exactly these gradients (f32[n]): the
 * learner's _learner_scales reads it (always present then, also without
 * clipping or LARC) with skip = 1, so the update skips on the device when
 * a sum is inf or NaN, and the trainer, fetching the same node, decides on
 * the host from the same bits. */
em_status em_learner_attach_scaled(em_learner *l, em_graph *g, const em_var *grads, em_var grad_sumsq,
                                   em_var *update);
/* 1 / S for the next em_learner_feed (h[EM_LRN_H_UNSCALE], rounded to f32
 * there). Only a learner attached by em_learner_attach_scaled uses it;
 * others feed 1. */
void em_learner_set_grad_unscale(em_learner *l, double unscale);

#endif
