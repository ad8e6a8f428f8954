/* The trainer (trainer.h): one training executor and one evaluation
 * executor over a model graph, and the accounting of loss and metric.
 *
 * At creation the trainer adds to the graph what a step needs: the means of
 * a per-sample loss and metric, the gradients of the mean loss for every
 * parameter (em_gradients), and each learner's update nodes (learner.h: the
 * `learner` op family updates parameters and state in place where they
 * live). The training executor fetches the loss, the metric and the update
 * nodes' outputs, so one run does forward, backward and update; the
 * evaluation executor fetches the loss and the metric only. A step's
 * hyperparameters (learning rate, momentum, ... from the schedules) are a
 * small input the learners fill per step on the host.
 *
 * The accounting is CNTK's: each minibatch's mean loss and metric weighted
 * by its samples, summed in float64 in step order, so a resumed run
 * (trainer_checkpoint.c) reports the same numbers as one that never
 * stopped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/learner.h"
#include "ember/trainer.h"
#include "error.h"
#include "trainer_internal.h"

#define API __attribute__((visibility("default")))

double em_trainer_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The mean of a per-sample value, or the value itself when it is a scalar.
 * what: "loss" or "metric", for the message. */
static em_status mean_of(em_graph *g, em_var v, const char *what, em_var *out) {
  em_dtype dt;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  em_status s = em_var_info(g, v, &dt, &nd, shape);
  if (s) return em_fail_context(s, "em_trainer_create: the %s (value %d)", what, (int)v);
  if (dt != EM_F32 && dt != EM_F64)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: the %s (value %d) is %s; it must be f32 or f64", what,
                   (int)v, em_dtype_name(dt));
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  if (n == 1) {
    *out = v;
    return EM_OK;
  }
  if (nd != 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_trainer_create: the %s (value %d) has %d dimensions; it must be a scalar (the minibatch's "
                   "mean) or a per-sample vector [N]",
                   what, (int)v, nd);
  s = em_apply(g, "reduce_mean", &v, 1, NULL, 0, out, 1);
  return s ? em_fail_context(s, "em_trainer_create: the mean of the %s", what) : EM_OK;
}

API em_status em_trainer_create(em_graph *graph, em_var loss, em_var metric, em_learner *const *learners,
                                int n_learners, const em_trainer_options *options, em_trainer **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: NULL out");
  *out = NULL;
  if (!graph) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: NULL graph");
  if (n_learners < 1 || !learners)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: no learners (%d); give at least one", n_learners);
  for (int i = 0; i < n_learners; i++)
    if (!learners[i]) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: learner %d is NULL", i);
  em_trainer_options opt = options ? *options : (em_trainer_options){0};
  em_status s = em_device_check(opt.device);
  if (s) return em_fail_context(s, "em_trainer_create");
  if (opt.mode != EM_MODE_FAST && opt.mode != EM_MODE_PORTABLE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: unknown mode %d", (int)opt.mode);
  if (opt.precision != EM_F32 && opt.precision != EM_F16 && opt.precision != EM_BF16)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: precision %s (%d); it must be f32, f16 or bf16",
                   em_dtype_name(opt.precision), (int)opt.precision);

  em_trainer *t = calloc(1, sizeof *t);
  if (!t) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
  /* Checked before anything changes (the thread count, the graph). */
  if ((s = em_trainer_scaling_options(t, &opt))) {
    free(t);
    return s;
  }
  if (opt.threads > 0 && (s = em_set_num_threads(opt.threads))) {
    free(t);
    return s;
  }
  t->g = graph;
  t->opt = opt;
  t->loss = loss;
  t->has_metric = metric >= 0;
  t->learners = malloc(sizeof *t->learners * (size_t)n_learners);
  if (!t->learners) {
    free(t);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
  }
  memcpy(t->learners, learners, sizeof *t->learners * (size_t)n_learners);
  t->n_learners = n_learners;

  /* The loss and the metric are checked first (a bad one changes nothing); then mixed
   * precision, before the gradients: the products and convolutions of the model and the loss
   * run in half, the parameters stay f32 (the learners' master weights). The means added by
   * mean_of are reductions, which the pass leaves in f32. */
  if ((s = mean_of(graph, loss, "loss", &t->loss_mean))) goto fail;
  t->metric_mean = -1;
  if (t->has_metric && (s = mean_of(graph, metric, "metric", &t->metric_mean))) goto fail;
  if (opt.precision != EM_F32 && (s = em_graph_autocast(graph, opt.precision, NULL))) {
    s = em_fail_context(s, "em_trainer_create: precision %s", em_dtype_name(opt.precision));
    goto fail;
  }
  if ((s = em_trainer_build_updates(t))) goto fail;

  /* The training executor: loss, metric, every update node, then each
   * learner's gradients' sums of squares. */
  int n_out = 1 + t->has_metric + 2 * t->n_updates;
  em_var *outs = malloc(sizeof *outs * (size_t)n_out);
  if (!outs) {
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
    goto fail;
  }
  int k = 0;
  outs[k++] = t->loss_mean;
  if (t->has_metric) outs[k++] = t->metric_mean;
  for (int i = 0; i < t->n_updates; i++) outs[k++] = t->updates[i];
  for (int i = 0; i < t->n_updates; i++) outs[k++] = t->gsumsq[i];
  s = em_exec_create(graph, outs, n_out, opt.device, &t->train);
  free(outs);
  if (s) goto fail;
  t->n_train_out = n_out;
  em_var evals[2] = {t->loss_mean, t->metric_mean};
  if ((s = em_exec_create(graph, evals, 1 + t->has_metric, opt.device, &t->eval))) goto fail;
  if ((s = em_exec_set_training(t->train, 1)) || (s = em_exec_set_training(t->eval, 0)) ||
      (s = em_exec_set_mode(t->train, opt.mode)) || (s = em_exec_set_mode(t->eval, opt.mode)))
    goto fail;
  t->epoch_start = em_trainer_now();
  t->best_metric = INFINITY;
  *out = t;
  return EM_OK;
fail:
  em_trainer_free(t);
  return s;
}

API void em_trainer_free(em_trainer *t) {
  if (!t) return;
  em_exec_free(t->train);
  em_exec_free(t->eval);
  em_trainer_free_updates(t);
  em_tensor_release(t->scale_feed);
  free(t->skipped);
  free(t->learners);
  free(t);
}

/* Dimension 0 of the first feed: the minibatch's samples. */
static em_status count_samples(const em_feed *feeds, int n_feeds, const char *fn, uint64_t *samples) {
  if (n_feeds < 1 || !feeds || !feeds[0].value)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: no feeds (the first feed's dimension 0 counts the samples)", fn);
  const em_tensor *x = feeds[0].value;
  if (em_tensor_ndim(x) < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the first feed (value %d) is a scalar; its dimension 0 counts the "
                   "minibatch's samples", fn, (int)feeds[0].var);
  *samples = (uint64_t)em_tensor_shape(x)[0];
  if (*samples == 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: an empty minibatch (0 samples)", fn);
  return EM_OK;
}

/* A fetched scalar as a double (f32 or f64, on any device). */
static em_status scalar(const em_tensor *v, double *out) {
  if (em_tensor_dtype(v) == EM_F64) return em_tensor_to_host(v, out, sizeof *out);
  float f;
  em_status s = em_tensor_to_host(v, &f, sizeof f);
  *out = f;
  return s;
}

/* Runs an executor with the caller's feeds and extra ones, reading the
 * loss (output 0) and the metric (output 1); with gsumsq (the training
 * executor), the learners' gradients' sums of squares too (the last
 * n_learners outputs, n_params floats in all). */
static em_status run_step(em_trainer *t, em_exec *e, int n_out, const em_feed *feeds, int n_feeds,
                          const em_feed *extra, int n_extra, float *gsumsq, em_minibatch_result *r) {
  em_feed stack[32], *all = stack;
  int n_all = n_feeds + n_extra;
  if (n_all > (int)(sizeof stack / sizeof stack[0])) {
    all = malloc(sizeof *all * (size_t)n_all);
    if (!all) return em_fail(EM_ERR_OUT_OF_MEMORY, "a training step: out of memory");
  }
  memcpy(all, feeds, sizeof *all * (size_t)n_feeds);
  if (n_extra) memcpy(all + n_feeds, extra, sizeof *all * (size_t)n_extra);
  em_tensor *res_stack[64], **res = res_stack;
  if (n_out > (int)(sizeof res_stack / sizeof res_stack[0])) res = calloc((size_t)n_out, sizeof *res);
  em_status s = res ? em_exec_run(e, all, n_all, res) : em_fail(EM_ERR_OUT_OF_MEMORY, "a training step: out of memory");
  if (all != stack) free(all);
  if (s) {
    if (res != res_stack) free(res);
    return s;
  }
  s = scalar(res[0], &r->loss);
  r->metric = NAN;
  if (!s && t->has_metric) s = scalar(res[1], &r->metric);
  for (int i = 0, k = 0; gsumsq && i < t->n_learners && !s; i++) {
    int n = 0;
    em_learner_params(t->learners[i], &n);
    s = em_tensor_to_host(res[n_out - t->n_learners + i], gsumsq + k, sizeof *gsumsq * (size_t)n);
    k += n;
  }
  for (int i = 0; i < n_out; i++) em_tensor_release(res[i]);
  if (res != res_stack) free(res);
  return s;
}

API em_status em_trainer_train_minibatch(em_trainer *t, const em_feed *feeds, int n_feeds, em_minibatch_result *out) {
  if (!t) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_train_minibatch: NULL trainer");
  em_minibatch_result r = {0};
  em_status s = count_samples(feeds, n_feeds, "em_trainer_train_minibatch", &r.samples);
  if (s) return s;
  em_feed extra[EM_TRAINER_MAX_LEARNERS + 1];
  int n_extra = 0, n_scale = 0;
  /* The loss scale first: it sets the learners' 1 / S that their feeds carry. */
  if ((s = em_trainer_scaling_feed(t, extra, &n_scale))) return s;
  if ((s = em_trainer_hyper_feeds(t, r.samples, extra + n_scale, &n_extra))) return s;
  s = run_step(t, t->train, t->n_train_out, feeds, n_feeds, extra, n_scale + n_extra, t->gsumsq_host, &r);
  em_trainer_release_hyper_feeds(extra + n_scale, n_extra);
  if (s) return em_fail_context(s, "em_trainer_train_minibatch (step %llu)", (unsigned long long)t->steps + 1);
  /* A diverged step is not counted, so the accounting (and a checkpoint
   * of it) stays finite; its updates ran, which the message says. */
  if ((s = em_trainer_check_finite(t, r.loss, t->steps + 1))) return em_fail_context(s, "em_trainer_train_minibatch");
  /* The updates happened: the learners' host counters move on. With loss
   * scaling, only those of the learners that did not skip, and S moves;
   * a skipped step still counts below (its minibatch was consumed and its
   * loss is real; trainer.h). */
  if (t->scaling) {
    if ((s = em_trainer_scaling_step(t, r.samples, t->steps + 1)))
      return em_fail_context(s, "em_trainer_train_minibatch");
  } else if ((s = em_trainer_learners_stepped(t, r.samples))) {
    return s;
  }
  t->steps++;
  t->samples += r.samples;
  t->epoch_minibatches++;
  t->epoch_samples += r.samples;
  t->epoch_loss_sum += r.loss * (double)r.samples;
  if (t->has_metric) t->epoch_metric_sum += r.metric * (double)r.samples;
  if (out) *out = r;
  return EM_OK;
}

API em_status em_trainer_test_minibatch(em_trainer *t, const em_feed *feeds, int n_feeds, em_minibatch_result *out) {
  if (!t) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_test_minibatch: NULL trainer");
  em_minibatch_result r = {0};
  em_status s = count_samples(feeds, n_feeds, "em_trainer_test_minibatch", &r.samples);
  if (s) return s;
  s = run_step(t, t->eval, 1 + t->has_metric, feeds, n_feeds, NULL, 0, NULL, &r);
  if (s) return em_fail_context(s, "em_trainer_test_minibatch");
  t->test_samples += r.samples;
  t->test_loss_sum += r.loss * (double)r.samples;
  if (t->has_metric) t->test_metric_sum += r.metric * (double)r.samples;
  if (out) *out = r;
  return EM_OK;
}

API em_status em_trainer_get_totals(const em_trainer *t, em_trainer_totals *out) {
  if (!t || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_get_totals: NULL argument");
  *out = (em_trainer_totals){
      .epoch = t->epoch,
      .steps = t->steps,
      .samples = t->samples,
      .epoch_minibatches = t->epoch_minibatches,
      .epoch_samples = t->epoch_samples,
      .epoch_loss = t->epoch_samples ? t->epoch_loss_sum / (double)t->epoch_samples : NAN,
      .epoch_metric = t->has_metric && t->epoch_samples ? t->epoch_metric_sum / (double)t->epoch_samples : NAN,
      .epoch_seconds = em_trainer_now() - t->epoch_start,
      .test_samples = t->test_samples,
      .test_loss = t->test_samples ? t->test_loss_sum / (double)t->test_samples : NAN,
      .test_metric = t->has_metric && t->test_samples ? t->test_metric_sum / (double)t->test_samples : NAN,
      .loss_scale = t->scaling ? t->scale : NAN,
      .skipped_steps = t->scaling ? t->skipped_steps : 0,
  };
  return EM_OK;
}

API em_status em_trainer_begin_epoch(em_trainer *t) {
  if (!t) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_begin_epoch: NULL trainer");
  t->epoch_minibatches = t->epoch_samples = 0;
  t->epoch_loss_sum = t->epoch_metric_sum = 0;
  t->epoch_start = em_trainer_now();
  return EM_OK;
}

API em_status em_trainer_end_epoch(em_trainer *t) {
  if (!t) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_end_epoch: NULL trainer");
  t->epoch++;
  return EM_OK;
}

API em_status em_trainer_reset_test(em_trainer *t) {
  if (!t) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_reset_test: NULL trainer");
  t->test_samples = 0;
  t->test_loss_sum = t->test_metric_sum = 0;
  return EM_OK;
}

API em_exec *em_trainer_train_exec(const em_trainer *t) { return t ? t->train : NULL; }
API em_exec *em_trainer_eval_exec(const em_trainer *t) { return t ? t->eval : NULL; }
