/* The learners' part of a training step (trainer_internal.h): the
 * gradients of the mean loss for every learner's parameters, each learner's
 * update node (learner.h: one node of the `learner` family per learner,
 * updating parameters and state in place on the executor's device), the
 * per-step hyperparameter feeds and the learners' counters after a step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/learner.h"
#include "error.h"
#include "learner_internal.h"
#include "trainer_internal.h"

/* Each learner's gradients' sums of squares, for the check after a step
 * (one pass over the gradients; without loss scaling the learner's own
 * clipping by global norm keeps its sums inside its node). */
static em_status gradient_sums(em_trainer *t) {
  int k = 0;
  for (int i = 0; i < t->n_learners; i++) {
    int n = 0;
    em_learner_params(t->learners[i], &n);
    em_status s = em_apply(t->g, "_learner_sumsq", t->grads + k, n, NULL, 0, &t->gsumsq[i], 1);
    if (s) return em_fail_context(s, "em_trainer_create: learner %d's gradient norms", i);
    k += n;
  }
  return EM_OK;
}

em_status em_trainer_build_updates(em_trainer *t) {
  if (t->n_learners > EM_TRAINER_MAX_LEARNERS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: %d learners; at most %d", t->n_learners,
                   EM_TRAINER_MAX_LEARNERS);
  int total = 0;
  for (int i = 0; i < t->n_learners; i++) {
    int n = 0;
    em_learner_params(t->learners[i], &n);
    total += n;
  }
  if (total == 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_create: the learners have no parameters");
  t->params = malloc(sizeof *t->params * (size_t)total);
  t->grads = malloc(sizeof *t->grads * (size_t)total);
  t->updates = malloc(sizeof *t->updates * (size_t)t->n_learners);
  if (!t->params || !t->grads || !t->updates) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
  int k = 0;
  for (int i = 0; i < t->n_learners; i++) {
    int n = 0;
    const em_var *p = em_learner_params(t->learners[i], &n);
    for (int j = 0; j < n; j++) {
      for (int q = 0; q < k; q++)
        if (t->params[q] == p[j]) {
          const char *name = "?";
          em_var_name(t->g, p[j], &name);
          return em_fail(EM_ERR_INVALID_ARGUMENT,
                         "em_trainer_create: parameter '%s' (value %d) belongs to two learners; give each parameter "
                         "to one",
                         name ? name : "?", (int)p[j]);
        }
      t->params[k++] = p[j];
    }
  }
  t->n_params = k;
  /* One em_gradients call for all of them: one backward pass in the plan.
   * With loss scaling, of loss_mean * S (trainer_scaling.c). */
  em_var loss;
  em_status s = em_trainer_scaling_loss(t, &loss);
  if (s) return s;
  s = em_gradients(t->g, loss, t->params, t->n_params, t->grads);
  if (s) return em_fail_context(s, "em_trainer_create: the gradients of the loss");
  t->gsumsq = malloc(sizeof *t->gsumsq * (size_t)t->n_learners);
  t->gsumsq_host = malloc(sizeof *t->gsumsq_host * (size_t)t->n_params);
  if (!t->gsumsq || !t->gsumsq_host) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
  /* With loss scaling the sums come first: each learner's skip decision on
   * the device reads the very node the trainer fetches (learner_internal.h). */
  if (t->scaling && (s = gradient_sums(t))) return s;
  k = 0;
  for (int i = 0; i < t->n_learners; i++) {
    int n = 0;
    em_learner_params(t->learners[i], &n);
    s = t->scaling ? em_learner_attach_scaled(t->learners[i], t->g, t->grads + k, t->gsumsq[i], &t->updates[i])
                   : em_learner_attach(t->learners[i], t->g, t->grads + k, &t->updates[i]);
    if (s) return em_fail_context(s, "em_trainer_create: learner %d", i);
    k += n;
  }
  /* Learners of one name share the graph's "<name>.hyperparameters" input
   * (attach finds it by name, as in a graph loaded from a checkpoint): the
   * last feed would win and every such learner would step with its rates. */
  em_var *h = malloc(sizeof *h * (size_t)t->n_learners);
  if (!h) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_create: out of memory");
  for (int i = 0; i < t->n_learners && !s; i++) {
    em_feed f;
    if ((s = em_learner_feed(t->learners[i], 1, &f))) break;
    h[i] = f.var;
    for (int j = 0; j < i && !s; j++)
      if (h[j] == h[i]) {
        const char *name = "?";
        em_var_name(t->g, h[i], &name);
        s = em_fail(EM_ERR_INVALID_ARGUMENT,
                    "em_trainer_create: learners %d and %d have the same name (their hyperparameters are both '%s'); "
                    "give each learner its own name (em_learner_create)",
                    j, i, name ? name : "?");
      }
  }
  free(h);
  if (s) return s;
  t->n_updates = t->n_learners;
  /* Without loss scaling the sums come after the updates, as they always
   * have (the graph is the one of before). */
  return t->scaling ? EM_OK : gradient_sums(t);
}

void em_trainer_free_updates(em_trainer *t) {
  free(t->params);
  free(t->grads);
  free(t->updates);
  free(t->gsumsq);
  free(t->gsumsq_host);
}

em_status em_trainer_check_finite(const em_trainer *t, double loss, uint64_t step) {
  if (!isfinite(loss))
    return em_fail(EM_ERR_NOT_FINITE,
                   "step %llu: the loss is %g (training diverged: try a smaller learning rate, clipping, or look for "
                   "NaN or inf in the data); the step's updates ran, so the parameters may hold NaN or inf: restore "
                   "the last checkpoint",
                   (unsigned long long)step, loss);
  if (t->scaling) return EM_OK; /* a gradient that is not finite is a skip (em_trainer_scaling_step) */
  int k = 0;
  for (int i = 0; i < t->n_learners; i++) {
    int n = 0;
    em_learner_params(t->learners[i], &n);
    for (int j = 0; j < n; j++, k++) {
      if (isfinite(t->gsumsq_host[k])) continue;
      const char *name = NULL;
      if (em_var_name(t->g, t->params[k], &name) || !name) name = "?";
      return em_fail(EM_ERR_NOT_FINITE,
                     "step %llu: the gradient of parameter '%s' (learner %d) is not finite, or its norm is beyond "
                     "float32's range (its sum of squares is %g; the loss was %g); the step's updates ran, so the parameters may hold NaN or inf: restore "
                     "the last checkpoint",
                     (unsigned long long)step, name, i, (double)t->gsumsq_host[k], loss);
    }
  }
  return EM_OK;
}

em_status em_trainer_hyper_feeds(em_trainer *t, uint64_t samples, em_feed *feeds, int *n) {
  for (int i = 0; i < t->n_learners; i++) {
    em_status s = em_learner_feed(t->learners[i], samples, &feeds[i]);
    if (s) return em_fail_context(s, "learner %d's hyperparameters", i);
  }
  *n = t->n_learners;
  return EM_OK;
}

/* The feeds' tensors are the learners' own. */
void em_trainer_release_hyper_feeds(em_feed *feeds, int n) {
  (void)feeds;
  (void)n;
}

em_status em_trainer_learners_stepped(em_trainer *t, uint64_t samples) {
  for (int i = 0; i < t->n_learners; i++) {
    em_status s = em_learner_step_done(t->learners[i], samples);
    if (s) return em_fail_context(s, "learner %d after a step", i);
  }
  return EM_OK;
}
