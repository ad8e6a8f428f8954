/* The trainer: CNTK's Trainer in C. It takes a model graph, a loss, an
 * optional metric (classification error, say) and learners, and runs
 * training and evaluation minibatches on one device, aggregating the loss and
 * the metric over samples the way CNTK reports them. The progress output
 * (a bar on a terminal, JSON lines otherwise) plugs into its callbacks.
 *
 * How a step runs (training/README.md): the trainer builds ONE executor per
 * step kind on its device. The training executor computes the loss, the
 * metric, the gradients and the learners' in-place updates of the
 * parameters (and their state) in one run, in training mode (dropout drops,
 * batch normalisation uses batch statistics); the evaluation executor
 * computes the loss and the metric only, in inference mode. A step copies
 * its feeds, the learners' hyperparameter vector and the two fetched
 * scalars; the parameters stay on the device.
 *
 * Ownership: the trainer borrows the graph and the learners; free the
 * trainer first. Creating a trainer adds nodes to the graph (the means of a
 * per-sample loss and metric, the gradients, the learners' update nodes).
 *
 * Errors: every call returns an em_status and sets em_last_error(); a
 * failed minibatch leaves the trainer's accounting as it was before it.
 *
 * A training loop over a minibatch source (reader.h) with validation,
 * early stopping, callbacks and a checkpoint per epoch is em_trainer_fit;
 * em_trainer_save_checkpoint / em_trainer_restore_checkpoint write and read
 * everything a run needs to continue bit for bit (checkpoint.h). */
#ifndef EMBER_TRAINER_H
#define EMBER_TRAINER_H

#include <stdint.h>
#include <stdio.h>
#include "ember/checkpoint.h"
#include "ember/exec.h"
#include "ember/reader.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_trainer em_trainer;
typedef struct em_learner em_learner; /* learner.h */

/* Dynamic loss scaling for half-precision training: the gradients are taken of the loss times
 * a scale S, so that small gradients survive f16's range, and divided by S before the
 * learners use them. A step whose scaled gradients are not all finite (S too large) is
 * skipped by the learners it concerns (their parameters, state and counters stay as they
 * were), and S is multiplied by backoff_factor; after growth_interval consecutive clean
 * steps S is multiplied by growth_factor. The defaults are PyTorch's GradScaler's. The
 * state (S, the clean-step count, the skipped steps) is saved in checkpoints.
 *
 * How Ember does it (training/trainer_scaling.c): S is a graph input ("trainer.loss_scale")
 * fed each step; each learner multiplies its gradients by 1 / S before clipping (by value or
 * global norm: the norm is that of the unscaled gradients), LARC and its rule see them; a
 * learner skips when any of its gradients' sums of squares (the trainer's divergence check's
 * sums) is inf or NaN, decided on the device in the step's own executor run, so a skip costs
 * no extra run or copy. The reported loss is the unscaled one. A skipped step still counts in
 * the trainer's accounting (em_trainer_totals.skipped_steps says how many); a learner that
 * skipped does not count it (em_learner_steps, its schedules, adam's bias correction). With S
 * a power of two (the defaults keep it one) scaling and unscaling are exact, so an f32 run
 * with scaling gives bitwise the parameters of one without, absent overflow and subnormals.
 * S never grows above FLT_MAX (it is fed as f32). Every field is checked whatever the mode
 * (em_trainer_create fails naming it): growth_factor > 1, backoff_factor in (0, 1),
 * growth_interval >= 1, init_scale and min_scale at least FLT_MIN (2^-126: S and 1 / S are both
 * fed as f32), init_scale >= min_scale, init_scale <= FLT_MAX. A checkpoint of a trainer with
 * scaling restores only into a trainer with scaling (the settings are the restoring trainer's;
 * S, the clean count and the skips the checkpoint's, S refused outside [FLT_MIN, FLT_MAX]); one
 * without scaling, or written before it existed, restores into a trainer with scaling with S
 * starting fresh at init_scale. */
typedef enum em_loss_scale_mode {
  EM_LOSS_SCALE_AUTO = 0,     /* dynamic when precision is EM_F16, none otherwise */
  EM_LOSS_SCALE_DYNAMIC = 1,
  EM_LOSS_SCALE_NONE = 2
} em_loss_scale_mode;
typedef struct em_loss_scaling {
  em_loss_scale_mode mode;
  double init_scale;          /* 0: 65536 (2^16) */
  double growth_factor;       /* 0: 2 (> 1) */
  double backoff_factor;      /* 0: 0.5 (in (0, 1)) */
  int64_t growth_interval;    /* 0: 2000 clean steps */
  double min_scale;           /* 0: 1. A skip that would take S below it fails the step with
                               * EM_ERR_NOT_FINITE: gradients that overflow even unscaled are
                               * divergence, not underflow protection */
} em_loss_scaling;

/* How the trainer runs. Zero-initialised: the CPU, fast mode, samples
 * counted from the first feed. */
typedef struct em_trainer_options {
  em_device device;           /* where both executors run */
  em_mode mode;               /* EM_MODE_PORTABLE: bitwise equal on every device (exec.h) */
  int threads;                /* CPU threads (em_set_num_threads); 0: leave as it is */
  /* Mixed precision. EM_F32 (0): the graph runs as it was built. EM_F16 or EM_BF16: before
   * the gradients are taken, em_graph_autocast runs the graph's products and convolutions in
   * that dtype (inputs cast to it, results cast back to f32: softmax, losses, norms and
   * reductions stay f32) while the parameters stay f32 (the learners' master weights). */
  em_dtype precision;
  em_loss_scaling loss_scaling; /* zero-initialised: dynamic for EM_F16, none otherwise */
} em_trainer_options;

/* A trainer for `loss` over `graph`'s parameters.
 *  loss:   a scalar (the minibatch's mean loss) or a per-sample vector [N]
 *          (the trainer takes its mean); the gradients are those of the mean.
 *  metric: a scalar mean or a per-sample vector [N] (classification_error:
 *          the error rate), or < 0 for none. Lower is better.
 *  learners: n_learners >= 1, each over its own parameters (learner.h); every
 *          parameter the loss depends on must belong to exactly one.
 * Fails (EM_ERR_INVALID_ARGUMENT) naming the value when loss or metric is
 * not f32/f64 of one element or [N] elements, or a parameter has two
 * learners; device failures as em_exec_create. */
EM_API em_status em_trainer_create(em_graph *graph, em_var loss, em_var metric, em_learner *const *learners,
                                   int n_learners, const em_trainer_options *options, em_trainer **out);
EM_API void em_trainer_free(em_trainer *t); /* NULL is fine */

/* What one minibatch gave. */
typedef struct em_minibatch_result {
  uint64_t samples;           /* the minibatch's samples: dimension 0 of the first feed */
  double loss;                /* its mean loss */
  double metric;              /* its mean metric (NaN without a metric) */
} em_minibatch_result;

/* One training step: feeds every input the loss and metric need (the
 * first feed's dimension 0 counts the samples), computes the gradients and
 * lets every learner update its parameters, then adds the minibatch to the
 * accounting. out may be NULL. On failure nothing is counted.
 *
 * Divergence: the step also computes each learner's gradients' sums of
 * squares (one pass over the gradients). When the minibatch's loss or any
 * gradient is NaN or inf the step fails with EM_ERR_NOT_FINITE, naming the
 * step (1-based, counting restored ones) and the loss or the parameter
 * whose gradient it is; out is not written. The updates of that step have
 * run (they are part of the same executor run), so the parameters and the
 * learners' state may hold NaN or inf: restore the last checkpoint (which
 * em_trainer_fit never writes from such a step). PyTorch trains on silently
 * (clip_grad_norm_'s error_if_nonfinite is off by default); CNTK stops on a
 * NaN criterion; Ember stops at the step.
 *
 * With dynamic loss scaling (em_loss_scaling) a gradient that is not finite
 * is no error but a skip of the learners it concerns, counted as a step;
 * the step fails (EM_ERR_NOT_FINITE, nothing counted, S as it was) only when
 * the loss itself is not finite or the skip would take S below min_scale. */
EM_API em_status em_trainer_train_minibatch(em_trainer *t, const em_feed *feeds, int n_feeds,
                                            em_minibatch_result *out);
/* One evaluation step (no update, inference mode): the loss and metric of
 * the minibatch; counted in the test accounting only. */
EM_API em_status em_trainer_test_minibatch(em_trainer *t, const em_feed *feeds, int n_feeds,
                                           em_minibatch_result *out);

/* The accounting, as CNTK reports it: means weighted by samples (a
 * minibatch of 10 samples counts ten times one of 1). */
typedef struct em_trainer_totals {
  int64_t epoch;              /* epochs completed (em_trainer_end_epoch) */
  uint64_t steps;             /* training minibatches, ever */
  uint64_t samples;           /* training samples, ever */
  /* The current epoch, since em_trainer_begin_epoch (or creation). */
  uint64_t epoch_minibatches;
  uint64_t epoch_samples;
  double epoch_loss;          /* sample-weighted mean (NaN before the first minibatch) */
  double epoch_metric;        /* ... (NaN without a metric) */
  double epoch_seconds;       /* wall time since the epoch began (training steps and what runs between) */
  /* Evaluation since em_trainer_reset_test. */
  uint64_t test_samples;
  double test_loss, test_metric;
  /* Dynamic loss scaling (em_loss_scaling): S for the next step (NaN when
   * scaling is off) and the training steps some learner skipped, ever (0
   * when off). A skipped step counts in steps, samples and the epoch's
   * loss and metric like any other: its minibatch was consumed and its loss
   * is real; only the learners that skipped do not count it. */
  double loss_scale;
  uint64_t skipped_steps;
} em_trainer_totals;
EM_API em_status em_trainer_get_totals(const em_trainer *t, em_trainer_totals *out);
/* Starts an epoch's accounting (resets the epoch_* fields and the clock). */
EM_API em_status em_trainer_begin_epoch(em_trainer *t);
/* Counts the epoch as completed. */
EM_API em_status em_trainer_end_epoch(em_trainer *t);
EM_API em_status em_trainer_reset_test(em_trainer *t);

/* The executors, for em_exec_describe / em_exec_stats_get (owned by the
 * trainer). */
EM_API em_exec *em_trainer_train_exec(const em_trainer *t);
EM_API em_exec *em_trainer_eval_exec(const em_trainer *t);

/* ----------------------------------------------------------- progress --- */

/* A report handed to callbacks and to the progress output. */
typedef struct em_train_report {
  int64_t epoch;              /* 1-based: the epoch running or just finished */
  int64_t epochs;             /* epochs planned (0: unknown) */
  uint64_t minibatch;         /* minibatches in this epoch so far */
  uint64_t samples;           /* samples in this epoch so far */
  uint64_t epoch_size;        /* samples an epoch has (0: unknown; no ETA then) */
  uint64_t total_samples;     /* training samples, ever */
  double loss, metric;        /* the epoch's sample-weighted means so far (metric NaN: none) */
  double mb_loss, mb_metric;  /* the last minibatch's */
  double seconds;             /* since the epoch began */
  /* At the end of an epoch with a validation source (else NaN). */
  double val_loss, val_metric;
  int has_metric;
  /* Dynamic loss scaling (em_loss_scaling): the scale S now (NaN without scaling) and the
   * training steps skipped so far, ever (em_trainer_totals). */
  double loss_scale;
  uint64_t skipped_steps;
} em_train_report;

/* A callback; returns 0 to go on, anything else to stop training after this
 * minibatch or epoch (em_trainer_fit then returns EM_OK with stopped set). */
typedef int (*em_train_callback)(const em_train_report *r, void *user);

typedef enum em_progress_style {
  EM_PROGRESS_AUTO = 0,       /* a bar when the stream is a terminal, else JSON lines */
  EM_PROGRESS_BAR = 1,        /* a bar per epoch, redrawn in place at most 10 times a second */
  EM_PROGRESS_JSON = 2,       /* one JSON object a line per report interval, one per epoch */
  EM_PROGRESS_NONE = 3
} em_progress_style;

/* Progress output on a stream (not closed by em_progress_free). JSON lines:
 *   {"event":"progress","epoch":1,"minibatch":100,"samples":6400,"loss":..,
 *    "metric":..,"samples_per_s":..,"seconds":..}
 * every `every` minibatches (0: 100), and at each epoch's end
 *   {"event":"epoch","epoch":1,"loss":..,"metric":..,"samples":..,"seconds":..,
 *    "samples_per_s":..,"val_loss":..,"val_metric":..[,"loss_scale":..,"skipped_steps":..]}
 * (absent values are null; the last two only with dynamic loss scaling). metric_name labels the metric in the bar
 * ("error"; NULL: "metric"). */
typedef struct em_progress em_progress;
EM_API em_status em_progress_create(FILE *stream, em_progress_style style, uint64_t every, const char *metric_name,
                                    em_progress **out);
EM_API void em_progress_free(em_progress *p);
/* The style chosen (AUTO resolved). */
EM_API em_progress_style em_progress_get_style(const em_progress *p);
/* Callbacks to pass to em_trainer_fit with the progress as `user`; both
 * return 0. */
EM_API int em_progress_minibatch(const em_train_report *r, void *progress);
EM_API int em_progress_epoch(const em_train_report *r, void *progress);

/* ------------------------------------------------------- the loop --- */

/* em_trainer_fit's settings. Zero-initialised fields take the defaults. */
typedef struct em_fit_options {
  int64_t epochs;             /* train until this many epochs are complete, counting restored ones (>= 1) */
  em_minibatch_source *train; /* required; its epochs are the trainer's (em_minibatch_options.epoch_size) */
  /* The graph inputs the minibatch's streams feed, in the data set's stream
   * order: inputs[i] gets values[i]; an entry < 0 skips that stream. The
   * first fed stream counts the samples. */
  const em_var *inputs;
  int n_inputs;
  /* Evaluated after every epoch (one pass; build it with shuffle 0 and
   * max_sweeps 1): its loss and metric go to the epoch's report and to early
   * stopping. NULL: none. */
  em_minibatch_source *validation;
  /* Written after every epoch (em_trainer_save_checkpoint with the train
   * source). NULL: none. */
  const char *checkpoint;
  const em_checkpoint_section *checkpoint_extra; /* the caller's sections in every checkpoint (may be NULL) */
  int n_checkpoint_extra;
  /* Called after every training minibatch and after every epoch; a
   * non-zero return stops the loop there (after the epoch's checkpoint). */
  em_train_callback on_minibatch, on_epoch;
  void *user;
  /* Early stopping: stop when the validation metric (the loss without a
   * metric) has not fallen below its best minus min_delta for `patience`
   * epochs in a row. 0: never. Needs a validation source. */
  int64_t patience;
  double min_delta;
} em_fit_options;

typedef struct em_fit_result {
  int64_t epochs;             /* complete epochs, restored ones included */
  int early_stopped;          /* early stopping ended the loop */
  int callback_stopped;       /* a callback ended it */
  int end_of_data;            /* the train source ran out (max_sweeps) */
  double val_loss, val_metric;/* of the last epoch (NaN: no validation) */
  double best_val;            /* the best validation value early stopping saw (+inf: none) */
  int64_t best_epoch;         /* its epoch, 1-based (0: none) */
} em_fit_result;

/* Trains over o->train until o->epochs epochs are complete, a callback or
 * early stopping says stop, or the source ends. Continues where the trainer
 * and the source are: after em_trainer_restore_checkpoint mid-epoch it
 * finishes that epoch first. out may be NULL. Errors: a step's, a reader's,
 * a checkpoint's (the loop stops at the failure; the trainer's accounting
 * and the source are as after the last good step), each naming the epoch
 * and the step. A diverged step (EM_ERR_NOT_FINITE, em_trainer_train_minibatch)
 * or a model holding NaN or inf at an epoch's end (an update that
 * overflowed) stops the loop without writing a checkpoint: the file keeps
 * the last good epoch. */
EM_API em_status em_trainer_fit(em_trainer *t, const em_fit_options *o, em_fit_result *out);

/* One pass over source (rewound first; it ends at end_of_data or at the end
 * of its first sweep or epoch): the sample-weighted loss and metric with the
 * evaluation executor. inputs as em_fit_options'. Resets the test
 * accounting (em_trainer_reset_test) first and leaves the pass in it. */
EM_API em_status em_trainer_evaluate(em_trainer *t, em_minibatch_source *source, const em_var *inputs, int n_inputs,
                                     em_minibatch_result *out);

/* ------------------------------------------------------- checkpoints --- */

/* Writes a checkpoint (checkpoint.h) of the graph (model and learner state)
 * and the host state: sections "trainer" (em_trainer_state_save),
 * "learner.<i>" per learner, "reader" when source is not NULL (its position
 * and random state), then `extra` sections of the caller's (the CLI keeps
 * its settings in one). Atomic; the manifest names the trainer's device and
 * mode. Refuses (EM_ERR_NOT_FINITE, naming the value and the element) a
 * model whose f32 / f64 parameters or states hold NaN or inf: a checkpoint
 * is what a run resumes from, and the previous file stays as it was. */
EM_API em_status em_trainer_save_checkpoint(em_trainer *t, const char *path, const em_minibatch_source *source,
                                            const em_checkpoint_section *extra, int n_extra);
/* Restores a checkpoint into this trainer, built as the one that wrote it
 * was (the same model code and learners; any device): every parameter and
 * state of the trainer's graph takes the value of the same name in the
 * checkpoint's graph (shapes and dtypes must match), then the sections load
 * into the trainer, the learners and (when not NULL) the source.
 * Continuing then gives the bits of a run that never stopped, in portable
 * mode on any device. Everything is checked before anything changes: a
 * missing value or section, a shape mismatch or a damaged file fails
 * (EM_ERR_CORRUPT or the checkpoint's error, naming it) and leaves the
 * trainer, the graph and the source as they were. Loss scaling: a
 * checkpoint written with it is refused (EM_ERR_CORRUPT) by a trainer
 * without it; the other way S starts at init_scale (em_loss_scaling). */
EM_API em_status em_trainer_restore_checkpoint(em_trainer *t, const char *path, em_minibatch_source *source);

/* The trainer's own host state (accounting, early stopping, the executors'
 * run counters) as a versioned record (trainer_state.c): *bytes is
 * malloc'd, the caller frees. load refuses (EM_ERR_CORRUPT, naming the
 * byte) a foreign, truncated or mismatched record and then changes nothing. */
EM_API em_status em_trainer_state_save(const em_trainer *t, void **bytes, size_t *size);
EM_API em_status em_trainer_state_load(em_trainer *t, const void *bytes, size_t size);

#ifdef __cplusplus
}
#endif
#endif
