/* The training loop (trainer.h, em_trainer_fit) and one evaluation pass
 * (em_trainer_evaluate) over minibatch sources (reader.h).
 *
 * The loop continues from wherever the trainer and the source are: the
 * source says where an epoch ends (CNTK's epochs need not be sweeps), the
 * trainer counts complete epochs. At an epoch's end, in this order: the
 * validation pass, early stopping's bookkeeping, the epoch counted, the
 * epoch callback, the checkpoint; so a checkpoint always holds a trainer
 * between epochs whose early-stopping record already includes the epoch,
 * and a run resumed from it decides exactly as the one that wrote it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "trainer_internal.h"

#define API __attribute__((visibility("default")))

/* The feeds of a minibatch: inputs[i] <- values[i]. */
static em_status feeds_of(const em_minibatch *mb, const em_var *inputs, int n_inputs, em_feed *feeds, int *n) {
  *n = 0;
  if (n_inputs > mb->n_streams)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%d inputs for a minibatch of %d streams", n_inputs, mb->n_streams);
  for (int i = 0; i < n_inputs; i++)
    if (inputs[i] >= 0) feeds[(*n)++] = (em_feed){inputs[i], mb->values[i]};
  if (!*n) return em_fail(EM_ERR_INVALID_ARGUMENT, "no input is fed from the minibatch's streams");
  return EM_OK;
}

API em_status em_trainer_evaluate(em_trainer *t, em_minibatch_source *source, const em_var *inputs, int n_inputs,
                                  em_minibatch_result *out) {
  if (!t || !source || !inputs) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_evaluate: NULL argument");
  em_status s = em_minibatch_rewind(source);
  if (s) return em_fail_context(s, "em_trainer_evaluate");
  em_trainer_reset_test(t);
  for (;;) {
    em_minibatch mb = {0};
    if ((s = em_minibatch_next(source, &mb))) return em_fail_context(s, "em_trainer_evaluate: reading");
    if (mb.end_of_data) break;
    em_feed feeds[EM_MINIBATCH_MAX_STREAMS];
    int n;
    s = feeds_of(&mb, inputs, n_inputs, feeds, &n);
    if (!s) s = em_trainer_test_minibatch(t, feeds, n, NULL);
    int last = mb.end_of_sweep || mb.end_of_epoch;
    em_minibatch_clear(&mb);
    if (s) return em_fail_context(s, "em_trainer_evaluate");
    if (last) break;
  }
  if (out) {
    em_trainer_totals tot;
    em_trainer_get_totals(t, &tot);
    *out = (em_minibatch_result){.samples = tot.test_samples, .loss = tot.test_loss, .metric = tot.test_metric};
  }
  return EM_OK;
}

static em_train_report report_of(const em_trainer *t, const em_fit_options *o, const em_minibatch_result *mb,
                                 uint64_t epoch_size) {
  em_trainer_totals tot;
  em_trainer_get_totals(t, &tot);
  return (em_train_report){
      .epoch = t->epoch + 1,
      .epochs = o->epochs,
      .minibatch = tot.epoch_minibatches,
      .samples = tot.epoch_samples,
      .epoch_size = epoch_size,
      .total_samples = tot.samples,
      .loss = tot.epoch_loss,
      .metric = tot.epoch_metric,
      .mb_loss = mb ? mb->loss : NAN,
      .mb_metric = mb ? mb->metric : NAN,
      .seconds = tot.epoch_seconds,
      .val_loss = NAN,
      .val_metric = NAN,
      .has_metric = t->has_metric,
      .loss_scale = tot.loss_scale,
      .skipped_steps = tot.skipped_steps,
  };
}

/* Early stopping's record after an epoch whose validation value is v;
 * returns 1 when patience has run out. */
static int early_stop_update(em_trainer *t, const em_fit_options *o, double v) {
  if (isnan(v)) return 0;
  if (t->best_epoch == 0 || v < t->best_metric - o->min_delta) {
    t->best_metric = v;
    t->best_epoch = t->epoch + 1;
    t->epochs_since_best = 0;
  } else {
    t->epochs_since_best++;
  }
  return o->patience > 0 && t->epochs_since_best >= o->patience;
}

API em_status em_trainer_fit(em_trainer *t, const em_fit_options *o, em_fit_result *out) {
  if (!t || !o) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_fit: NULL argument");
  if (!o->train) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_fit: no train source");
  if (!o->inputs || o->n_inputs < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_fit: no inputs (the graph inputs the streams feed)");
  if (o->epochs < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_fit: epochs %lld; at least 1",
                                    (long long)o->epochs);
  if (o->patience < 0 || o->min_delta < 0 || isnan(o->min_delta))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_fit: patience %lld and min_delta %g must be >= 0",
                   (long long)o->patience, o->min_delta);
  if (o->patience > 0 && !o->validation)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_fit: early stopping (patience %lld) needs a validation source",
                   (long long)o->patience);
  em_fit_result res = {.val_loss = NAN, .val_metric = NAN};
  em_minibatch_position pos;
  em_status s = em_minibatch_get_position(o->train, &pos);
  if (s) return em_fail_context(s, "em_trainer_fit");
  /* A trainer between epochs starts the next one's clock now. */
  if (t->epoch_minibatches == 0) em_trainer_begin_epoch(t);
  /* A trainer whose patience ran out already (a run that stopped early,
   * restored from its last checkpoint) stops before training another
   * epoch, as the run that wrote it did. */
  int stop = o->patience > 0 && t->best_epoch > 0 && t->epochs_since_best >= o->patience;
  res.early_stopped = stop;
  while (!stop && t->epoch < o->epochs) {
    /* The source's position before the minibatch: a step that fails (a
     * diverged one above all) puts the source back, so that it is where
     * the last good step left it, as the trainer's accounting is. */
    void *before = NULL;
    size_t before_size = 0;
    if ((s = em_minibatch_state_save(o->train, &before, &before_size))) {
      s = em_fail_context(s, "em_trainer_fit: epoch %lld", (long long)t->epoch + 1);
      break;
    }
    em_minibatch mb = {0};
    if ((s = em_minibatch_next(o->train, &mb))) {
      free(before);
      s = em_fail_context(s, "em_trainer_fit: epoch %lld: reading", (long long)t->epoch + 1);
      break;
    }
    if (mb.end_of_data) {
      free(before);
      res.end_of_data = 1;
      break;
    }
    em_feed feeds[EM_MINIBATCH_MAX_STREAMS];
    int n;
    em_minibatch_result r;
    s = feeds_of(&mb, o->inputs, o->n_inputs, feeds, &n);
    if (!s) s = em_trainer_train_minibatch(t, feeds, n, &r);
    int end_of_epoch = mb.end_of_epoch;
    em_minibatch_clear(&mb);
    if (s) {
      /* A state read from this source a moment ago loads (and a load that
       * succeeds leaves the step's message as it is). */
      em_status back = em_minibatch_state_load(o->train, before, before_size);
      free(before);
      if (back) s = back;
      s = em_fail_context(s, "em_trainer_fit: epoch %lld", (long long)t->epoch + 1);
      break;
    }
    free(before);
    if (o->on_minibatch) {
      em_train_report rep = report_of(t, o, &r, pos.epoch_size);
      if (o->on_minibatch(&rep, o->user)) res.callback_stopped = stop = 1;
    }
    if (!end_of_epoch) continue;

    /* The epoch's end. */
    em_train_report rep = report_of(t, o, &r, pos.epoch_size);
    if (o->validation) {
      em_minibatch_result v;
      if ((s = em_trainer_evaluate(t, o->validation, o->inputs, o->n_inputs, &v))) {
        s = em_fail_context(s, "em_trainer_fit: epoch %lld: validation", (long long)t->epoch + 1);
        break;
      }
      rep.val_loss = res.val_loss = v.loss;
      rep.val_metric = res.val_metric = v.metric;
      if (early_stop_update(t, o, t->has_metric ? v.metric : v.loss)) res.early_stopped = stop = 1;
    }
    em_trainer_end_epoch(t);
    if (o->on_epoch && o->on_epoch(&rep, o->user)) res.callback_stopped = stop = 1;
    em_trainer_begin_epoch(t);
    if (o->checkpoint && (s = em_trainer_save_checkpoint(t, o->checkpoint, o->train, o->checkpoint_extra,
                                                                o->n_checkpoint_extra))) {
      s = em_fail_context(s, "em_trainer_fit: after epoch %lld (step %llu)", (long long)t->epoch,
                          (unsigned long long)t->steps);
      break;
    }
  }
  res.epochs = t->epoch;
  res.best_val = t->best_metric;
  res.best_epoch = t->best_epoch;
  if (out) *out = res;
  return s;
}
