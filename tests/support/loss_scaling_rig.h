/* The rig of the loss-scaling tests (tests/unit/test_loss_scaling.c and
 * test_loss_scaling_review.c): a small regression model whose gradients can be made to overflow
 * f32 (w3_scale, x2_mul), minibatches, snapshots of every parameter and state for bitwise
 * comparisons, learners and trainers with dynamic loss scaling. Uses cmocka (a failure fails
 * the test). */
#ifndef EMBER_TESTS_LOSS_SCALING_RIG_H
#define EMBER_TESTS_LOSS_SCALING_RIG_H

#include <stdint.h>
#include "ember.h"

/* y = tanh(x w1^T + b1) w2^T + x2 w3^T, per-sample loss (y - t)^2.
 * x [N, 4], x2 [N, 2], w1 [5, 4], b1 [5], w2 [1, 5], w3 [1, 2]. */
typedef struct model {
  em_graph *g;
  em_var x, x2, t, w1, b1, w2, w3, loss;
} model;

/* Minibatch `step` (deterministic) of n samples; x2 times x2_mul. */
typedef struct batch {
  em_tensor *x, *x2, *t;
  em_feed f[3];
} batch;

/* Every parameter and state of g (learner slots included), in creation order, as one float array. */
typedef struct snap {
  float v[256];
  size_t n;
} snap;

/* A trainer over all four parameters with one learner. */
typedef struct rig {
  model m;
  em_learner *l[2];
  int n_l;
  em_trainer *t;
} rig;

uint64_t ls_lcg(uint64_t *s);
float ls_uniform(uint64_t *s);
void ls_param(em_graph *g, const char *name, int nd, const int64_t *shape, double scale, uint64_t seed, em_var *out);
void ls_build(model *m, double w3_scale);
void ls_batch_make(const model *m, int step, int n, double x2_mul, batch *b);
void ls_batch_free(batch *b);
em_status ls_train(em_trainer *t, const model *m, int step, double x2_mul, em_minibatch_result *r);
void ls_snapshot(const em_graph *g, snap *out);
void ls_snap_equal(const snap *a, const snap *b, const char *what);
em_learner *ls_learner(em_learner_kind kind, const char *name, const em_var *params, int n, double clip_norm);
em_trainer_options ls_scaled(em_device dev, double init, int64_t interval);
em_trainer_totals ls_totals(const em_trainer *t);
void ls_rig_one(rig *r, em_learner_kind kind, double clip_norm, const em_trainer_options *o);
void ls_rig_two(rig *r, double w3_scale, const em_trainer_options *o);
void ls_rig_free(rig *r);

#endif
