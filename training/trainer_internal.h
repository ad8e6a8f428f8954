/* The trainer's state, shared by trainer.c (steps and accounting),
 * trainer_updates.c (the learners' part of a step), trainer_fit.c (the loop
 * over a minibatch source) and trainer_checkpoint.c. */
#ifndef EMBER_TRAINER_INTERNAL_H
#define EMBER_TRAINER_INTERNAL_H

#include "ember/trainer.h"

#define EM_TRAINER_MAX_LEARNERS 16

struct em_trainer {
  em_graph *g;
  em_trainer_options opt;
  em_learner **learners;
  int n_learners;
  em_var loss, loss_mean, metric_mean; /* metric_mean < 0: no metric */
  int has_metric;
  em_var *params, *grads;     /* every parameter the loss depends on and its gradient */
  int n_params;
  em_var *updates;            /* the learners' update nodes' outputs, fetched by the training step */
  int n_updates;
  /* Per learner, the sums of squares of its gradients (f32[n] of
   * _learner_sumsq), fetched after the updates: a step whose gradients are
   * not finite fails (trainer.h). gnorm_host: n_params floats. */
  em_var *gsumsq;
  float *gsumsq_host;
  em_exec *train, *eval;
  int n_train_out;
  /* Accounting (float64 sums in step order). */
  int64_t epoch;
  uint64_t steps, samples;
  uint64_t epoch_minibatches, epoch_samples;
  double epoch_loss_sum, epoch_metric_sum;
  double epoch_start;         /* monotonic seconds */
  uint64_t test_samples;
  double test_loss_sum, test_metric_sum;
  /* Early stopping (trainer_fit.c): the best validation value so far
   * (+inf before the first), its epoch (0: none) and the epochs since. */
  double best_metric;
  int64_t best_epoch, epochs_since_best;
  /* Dynamic loss scaling (trainer.h em_loss_scaling, trainer_scaling.c).
   * scaling: on (DYNAMIC, or AUTO with precision EM_F16). ls: the options
   * with their defaults filled in. scale_input: the graph input
   * "trainer.loss_scale" (the loss's dtype, shape []) the gradients' loss is
   * multiplied by, fed from scale_feed. scale: S; scale_clean: clean steps
   * since the last skip or growth; skipped_steps: steps some learner
   * skipped, ever; skipped: per learner, the last step's decision. */
  int scaling;
  em_loss_scaling ls;
  em_var scale_input;
  em_tensor *scale_feed;
  double scale;
  uint64_t scale_clean, skipped_steps;
  unsigned char *skipped;
};

double em_trainer_now(void);

/* trainer_updates.c: the gradients and the learners' update nodes (fills
 * params, grads, updates); the per-step hyperparameter feeds (tensors the
 * caller releases with em_trainer_release_hyper_feeds); the learners'
 * counters after a step that updated. */
em_status em_trainer_build_updates(em_trainer *t);
void em_trainer_free_updates(em_trainer *t);
em_status em_trainer_hyper_feeds(em_trainer *t, uint64_t samples, em_feed *feeds, int *n);
void em_trainer_release_hyper_feeds(em_feed *feeds, int n);
em_status em_trainer_learners_stepped(em_trainer *t, uint64_t samples);
/* EM_ERR_NOT_FINITE naming step and what when the loss or a gradient's sum
 * of squares (gsumsq_host, fetched by the step) is NaN or inf. With loss
 * scaling the loss only: a gradient that is not finite is a skip. */
em_status em_trainer_check_finite(const em_trainer *t, double loss, uint64_t step);

/* trainer_scaling.c: dynamic loss scaling. _options: resolves and checks
 * options->loss_scaling into t (em_trainer_create, before anything is
 * built). _loss: the value whose gradients the learners take (loss_mean,
 * or loss_mean * S with scaling). _feed: before a step, the S feed (out:
 * one feed, or none without scaling: *n = 0) and each learner's 1 / S.
 * _step: after a step's run whose loss is finite: which learners skip
 * (from gsumsq_host), their counters, S; fails (EM_ERR_NOT_FINITE,
 * changing nothing) when S would fall below min_scale. _reset: a fresh
 * state (S = init_scale). */
em_status em_trainer_scaling_options(em_trainer *t, const em_trainer_options *o);
em_status em_trainer_scaling_loss(em_trainer *t, em_var *loss);
em_status em_trainer_scaling_feed(em_trainer *t, em_feed *feed, int *n);
em_status em_trainer_scaling_step(em_trainer *t, uint64_t samples, uint64_t step);
void em_trainer_scaling_reset(em_trainer *t);

#endif
