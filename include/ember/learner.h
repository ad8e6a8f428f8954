/* Learners: the rules that update a model's parameters from their
 * gradients (sgd, momentum, nesterov, adagrad, rmsprop, adadelta, adam,
 * adamw, CNTK's fsadagrad), with CNTK's learning-rate and momentum schedules
 * plus warmup and cosine decay, L1 / L2 regularisation, decoupled weight
 * decay, gradient clipping by value and by global norm, and LARC
 * (layer-wise adaptive rate control) over any of them.
 *
 * How a learner runs (training/README.md): em_learner_attach adds its
 * update to the graph as ONE node of the `learner` op family over all its
 * parameters (plus, with LARC or clipping by global norm, nodes for the
 * sums of squares and the per-tensor factors, summed in an order fixed by
 * the shapes). The node takes the
 * parameters, their gradients and the learner's state and updates the
 * parameters and the state in place, on the executor's device (on a GPU
 * one kernel launch per node whatever the number of parameters, their
 * addresses uploaded in a small table each step). The
 * hyperparameters of a step (the learning rate after the schedules, the
 * momentum, adam's bias corrections, ...) are computed on the host in double
 * and fed as a small f32 vector (em_learner_feed), so the CPU and every GPU
 * see the same f32 values and, in portable mode, give the same bits.
 *
 * State: each rule's per-element state (moments, accumulators) is em_state
 * values of the graph named "<parameter>.<learner>.<slot>" (e.g.
 * "fc1.weight.adam.m", zero-initialised), saved with the graph by
 * em_graph_save. The host state (steps and samples seen, fsadagrad's
 * smoothed count) is em_learner_state_save's bytes, for a checkpoint.
 *
 * Parameters must be f32. Every fallible call returns an em_status and sets
 * em_last_error(); on failure the learner and the graph are as before
 * (except that em_learner_attach may leave unused nodes in the graph).
 *
 * ---------------------------------------------------------------- rules ---
 * Per element, with g the gradient of the minibatch's MEAN loss, p the
 * parameter, lr the learning rate of this step (after schedules, warmup,
 * cosine and LARC), mu the momentum of this step, t = 1, 2, ... the step:
 *
 *   g <- g * c                       clipping by global norm (clip_norm > 0):
 *                                    c = min(1, clip_norm / (||G|| + 1e-6)),
 *                                    ||G|| the L2 norm over all the learner's
 *                                    gradients (PyTorch's clip_grad_norm_).
 *                                    A NaN gradient makes ||G|| and c NaN:
 *                                    every gradient becomes NaN; an inf one
 *                                    (or a norm beyond f32) makes c 0, as in
 *                                    PyTorch; either way the trainer
 *                                    fails such a step (trainer.h,
 *                                    EM_ERR_NOT_FINITE naming the step and
 *                                    the parameter)
 *   g <- min(max(g, -v), v)          clipping by value (clip_value = v > 0)
 *   g <- g + l2 * p + l1 * sign(p)   coupled L2 / L1 (PyTorch's weight_decay
 *                                    of SGD and Adam; CNTK adds L2 likewise)
 *   p <- p - lr * wd * p             decoupled weight decay (wd =
 *                                    weight_decay; AdamW's, Loshchilov & Hutter)
 * then the rule:
 *   SGD        p <- p - lr * g
 *   MOMENTUM   b <- mu * b + k * g;  p <- p - lr * b          (slot "b")
 *   NESTEROV   b <- mu * b + k * g;  p <- p - lr * (k * g + mu * b)
 *              k = 1 (PyTorch, the default) or 1 - mu with unit_gain (CNTK's
 *              unit-gain momentum); b starts at 0, so PyTorch's first step
 *              (b = g) is the same
 *   ADAGRAD    s <- s + g^2;  p <- p - lr * g / (sqrt(s) + eps)  (slot "s";
 *              PyTorch, eps 1e-10)
 *   RMSPROP    v <- rho * v + (1 - rho) * g^2;  p <- p - lr * g / (sqrt(v) + eps)
 *              (slot "v"; PyTorch's, rho = its alpha 0.99, eps 1e-8; CNTK's
 *              rmsprop is a different rule)
 *   ADADELTA   v <- rho * v + (1 - rho) * g^2
 *              d  = sqrt(u + eps) / sqrt(v + eps) * g
 *              u <- rho * u + (1 - rho) * d^2;  p <- p - lr * d
 *              (slots "v", "u"; PyTorch and CNTK: rho 0.9 (CNTK 0.95), eps 1e-6, lr 1)
 *   ADAM,      m <- b1 * m + (1 - b1) * g;  v <- b2 * v + (1 - b2) * g^2
 *   ADAMW      p <- p - (lr / (1 - b1^t)) * m / (sqrt(v) * (1 / sqrt(1 - b2^t)) + eps)
 *              (slots "m", "v"; PyTorch's arithmetic with the bias
 *              corrections computed on the host in double; b1 = the momentum
 *              schedule (0.9), b2 = beta2 (0.999), eps 1e-8. ADAMW is ADAM
 *              with weight_decay 0.01 by default (PyTorch); ADAM's default
 *              is none: its PyTorch weight_decay is l2 here)
 *   FSADAGRAD  CNTK's (Math/GPUMatrixCUDAKernels.cuh _fsadagrad), per step
 *              n <- vm * n + (1 - vm) * N   on the host (N the minibatch's
 *              samples, vm = exp(-N / variance_time_constant), n starts at 0)
 *              a = 1 * sqrt(n)   (CNTK's targetAdagradAvDenom is 1)
 *              s <- vm * s + (1 - vm) * g^2
 *              if s != 0: g <- g * min(a / sqrt(s), 10)
 *              b <- mu * b + (1 - mu) * g  (unit gain, as CNTK; only if mu > 0)
 *              p <- p - lr * b   (or lr * g when mu == 0)
 *              (slots "s", "b"; CNTK's default variance time constant
 *              720000 samples)
 *
 * LARC (NVIDIA's Caffe, You et al.): per parameter tensor, with ||p|| and
 * ||g|| its L2 norms (g after clipping by global norm), the local rate
 *   r = eta * ||p|| / (||g|| + wd_larc * ||p||)   (1 when ||p|| or ||g|| is 0)
 * and the rule uses lr * min(r, lr) / lr ("clip", the default policy) or
 * lr * r ("scale"); wd_larc is the learner's weight_decay + l2.
 * ------------------------------------------------------------------------ */
#ifndef EMBER_LEARNER_H
#define EMBER_LEARNER_H

#include <stddef.h>
#include <stdint.h>
#include "ember/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ schedules --- */

/* How a schedule's values are meant (CNTK's UnitType and
 * MomentumAsTimeConstantSchedule). The gradients are those of the
 * minibatch's mean loss, so:
 *   PER_MINIBATCH   the value is used as is (PyTorch's learning rate);
 *   PER_SAMPLE      a learning rate per sample is multiplied by the
 *                   minibatch's samples N (CNTK's per-sample rate on summed
 *                   gradients); a momentum per sample becomes mu^N;
 *   TIME_CONSTANT   (momentum only) the value is a time constant T in
 *                   samples: mu = exp(-N / T) (T == 0: mu = 0). */
typedef enum em_schedule_unit {
  EM_UNIT_PER_MINIBATCH = 0,
  EM_UNIT_PER_SAMPLE = 1,
  EM_UNIT_TIME_CONSTANT = 2
} em_schedule_unit;

/* A value over training, indexed by the samples seen before the step (as
 * CNTK's learners index theirs). Zero-initialised with .value set: that
 * value throughout, per minibatch.
 *
 * Piecewise (CNTK's schedule [(n0, v0), (n1, v1), ...] with epoch_size):
 * values[i] holds for counts[i] * epoch_size samples, one after another,
 * and the last value holds for ever after. counts NULL: 1 each. epoch_size
 * 0: 1 sample (CNTK's default when none is given).
 *
 * Then warmup and cosine decay multiply the piecewise value v(s), s the
 * samples seen:
 *   warmup_samples W > 0:  v * min(1, (s + N) / W)   (linear from N / W; N
 *                          the step's samples, so the first step is not 0)
 *   cosine_samples C > 0:  v * (f + (1 - f) * (1 + cos(pi * min(s', C) / C)) / 2)
 *                          with s' = max(0, s - W), f = cosine_floor (the
 *                          final fraction of v, default 0)
 * The learner copies the arrays: they may be freed after em_learner_create. */
typedef struct em_schedule {
  double value;               /* when n == 0 */
  int n;                      /* pieces (0: the constant `value`) */
  const double *values;       /* n values */
  const uint64_t *counts;     /* n counts in epoch_size units; NULL: 1 each */
  uint64_t epoch_size;        /* samples per count (0: 1) */
  em_schedule_unit unit;
  uint64_t warmup_samples;    /* 0: none */
  uint64_t cosine_samples;    /* 0: none */
  double cosine_floor;        /* fraction of the value at the end of the cosine (0 .. 1) */
} em_schedule;

/* The value a schedule gives a step of minibatch_samples (> 0) samples
 * after samples_seen samples, unit conversion included: for a rate
 * (momentum 0) PER_SAMPLE gives v * N; for a momentum (momentum 1)
 * PER_SAMPLE gives v^N and TIME_CONSTANT exp(-N / v). Fails on a malformed
 * schedule (negative or NaN values, a count of 0, a floor outside 0 .. 1)
 * and on a time constant for a rate. */
EM_API em_status em_schedule_value(const em_schedule *s, int momentum, uint64_t samples_seen,
                                   uint64_t minibatch_samples, double *out);

/* ------------------------------------------------------------- learners --- */

typedef enum em_learner_kind {
  EM_LEARNER_SGD = 0,
  EM_LEARNER_MOMENTUM = 1,
  EM_LEARNER_NESTEROV = 2,
  EM_LEARNER_ADAGRAD = 3,
  EM_LEARNER_RMSPROP = 4,
  EM_LEARNER_ADADELTA = 5,
  EM_LEARNER_ADAM = 6,
  EM_LEARNER_ADAMW = 7,
  EM_LEARNER_FSADAGRAD = 8
} em_learner_kind;

/* "sgd", "momentum", ..., "fsadagrad" (the slot names' middle part); NULL
 * for an unknown kind. */
EM_API const char *em_learner_kind_name(em_learner_kind kind);
/* The kind named so (case-sensitive); EM_ERR_INVALID_ARGUMENT listing the
 * names otherwise. */
EM_API em_status em_learner_kind_parse(const char *name, em_learner_kind *out);

typedef enum em_larc_policy {
  EM_LARC_NONE = 0,
  EM_LARC_CLIP = 1,           /* lr * min(r, lr) / lr (NVIDIA Caffe's "clip") */
  EM_LARC_SCALE = 2           /* lr * r ("scale") */
} em_larc_policy;

/* A learner's settings. Fill with em_learner_defaults, then change fields. */
typedef struct em_learner_config {
  em_learner_kind kind;
  em_schedule lr;             /* learning rate */
  em_schedule momentum;       /* momentum, nesterov, fsadagrad: mu (0.9); adam(w): beta1 (0.9); others:
                               * unused */
  double beta2;               /* adam(w): 0.999; rmsprop, adadelta: rho (0.99, 0.9); fsadagrad: the
                               * variance time constant in samples (720000); others: unused */
  double epsilon;             /* adagrad 1e-10, rmsprop 1e-8, adadelta 1e-6, adam(w) 1e-8 */
  int unit_gain;              /* momentum, nesterov: CNTK's unit-gain momentum (k = 1 - mu); default 0 */
  double l1, l2;              /* coupled regularisation, added to the gradient (default 0) */
  double weight_decay;        /* decoupled (default 0; adamw 0.01) */
  double clip_value;          /* > 0: each gradient element clamped to [-v, v] (default 0: none) */
  double clip_norm;           /* > 0: gradients scaled to a global L2 norm of at most this (default 0) */
  em_larc_policy larc;        /* default none; em_learner_larc sets it */
  double larc_eta;            /* LARC's trust coefficient (default 0.002, NVIDIA Caffe's) */
} em_learner_config;

/* The defaults of a kind (above) with learning rate lr per minibatch.
 * Fails on an unknown kind. */
EM_API em_status em_learner_defaults(em_learner_kind kind, double lr, em_learner_config *out);

typedef struct em_learner em_learner;

/* A learner for the parameters params[0..n) of a graph (f32 parameters,
 * each once; the learner keeps the handles and copies cfg, schedules
 * included). Nothing is added to the graph until em_learner_attach. Fails
 * on a bad config (negative rates, a time constant unit on the learning
 * rate, ...) naming the field. `name` labels the state ("<param>.<name>.<slot>";
 * NULL: the kind's name, so two learners of one kind over one graph need
 * distinct names). */
EM_API em_status em_learner_create(const em_learner_config *cfg, const char *name, const em_var *params, int n,
                                   em_learner **out);
/* LARC over the learner's rule (any kind): policy CLIP or SCALE with trust
 * coefficient eta (> 0). Call before em_learner_attach. */
EM_API em_status em_learner_larc(em_learner *l, em_larc_policy policy, double eta);
EM_API void em_learner_free(em_learner *l); /* NULL is fine */

/* The parameters (borrowed; n entries) and the settings. */
EM_API const em_var *em_learner_params(const em_learner *l, int *n);
EM_API const em_learner_config *em_learner_get_config(const em_learner *l);

/* Adds the learner's update to g: its state values (created zero-filled,
 * or found by name when the graph already has them, e.g. loaded from a
 * checkpoint), the hyperparameter input, and the update node(s) reading
 * grads[i], the gradient of params[i] (em_gradients' output). *update is
 * the value to add to the training executor's outputs (in any place: the
 * executor runs the update after every other node of the step, so they all
 * read the parameters before it); fetching it copies nothing (an empty f32
 * tensor).
 * Once per learner. Fails (EM_ERR_INVALID_ARGUMENT, naming the value and
 * its entry) when a params[i] is not a parameter of g (an input, constant,
 * state or computed value: an update of it would be lost), then attaches
 * nothing; em_learner_create cannot check this, as it has no graph. */
EM_API em_status em_learner_attach(em_learner *l, em_graph *g, const em_var *grads, em_var *update);

/* The feed of this step's hyperparameters for a minibatch of
 * minibatch_samples samples (> 0): add it to the executor's feeds. The
 * tensor is the learner's (valid until the next em_learner_feed or
 * em_learner_free); computing it changes nothing. After the run succeeded
 * call em_learner_step_done(l, minibatch_samples), which advances the
 * step and sample counts (and fsadagrad's smoothed count). */
EM_API em_status em_learner_feed(em_learner *l, uint64_t minibatch_samples, em_feed *out);
EM_API em_status em_learner_step_done(em_learner *l, uint64_t minibatch_samples);

/* The learning rate (after schedules, warmup, cosine; before LARC) and the
 * momentum the next step of minibatch_samples samples gets, for progress
 * output. */
EM_API em_status em_learner_rates(const em_learner *l, uint64_t minibatch_samples, double *lr, double *momentum);
/* Steps and samples seen so far. */
EM_API uint64_t em_learner_steps(const em_learner *l);
EM_API uint64_t em_learner_samples(const em_learner *l);

/* Host state for a checkpoint: *bytes (malloc'd, the caller frees) holds a
 * versioned little-endian record of the steps, samples and fsadagrad's
 * smoothed count, with the kind and parameter count it belongs to. load
 * refuses (EM_ERR_CORRUPT, naming the byte offset) a short, foreign or
 * mismatched record and then changes nothing. The per-element state is in
 * the graph (em_graph_save). */
EM_API em_status em_learner_state_save(const em_learner *l, void **bytes, size_t *size);
EM_API em_status em_learner_state_load(em_learner *l, const void *bytes, size_t size);

#ifdef __cplusplus
}
#endif
#endif
