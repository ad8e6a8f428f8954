/* The model and learner of `ember train` (train_model.c). */
#ifndef EMBER_TOOL_TRAIN_MODEL_H
#define EMBER_TOOL_TRAIN_MODEL_H

#include "ember.h"
#include "train_opts.h"

/* The images every model of the tool takes: one channel of 28x28 (MNIST's
 * layout); cli_data_open refuses a data set of other images. */
#define CLI_IMAGE_SIDE 28

/* The values of a model graph the tool uses, by their names. */
typedef struct cli_model {
  em_graph *g;
  em_var x;                   /* "x": images [N, 1, 28, 28] f32 in [0, 1]; lstm: sequences [N, T, D] */
  em_var label;               /* "label": classes [N] i32 */
  em_var lengths;             /* lstm: "x.lengths" [N] i64, the sequences' lengths; EM_NO_VAR for images */
  em_var logits;              /* "logits" [N, 10] */
  em_var loss;                /* "loss": per-sample softmax cross entropy [N] */
  em_var error;               /* "error": per-sample classification error [N] */
} cli_model;

/* A new graph with o->model (seeded by o->seed), its loss and error. */
em_status cli_model_build(const train_opts *o, cli_model *m);
/* The named values in a graph loaded from a checkpoint; NULL, or the name
 * that is missing. m->g = g (not owned). */
const char *cli_model_find(em_graph *g, cli_model *m);
/* The learner of o over every parameter of g; epoch_samples sizes the
 * schedules (cosine over the whole run, step, warmup). */
em_status cli_learner_create(const train_opts *o, em_graph *g, uint64_t epoch_samples, em_learner **out);

#endif
