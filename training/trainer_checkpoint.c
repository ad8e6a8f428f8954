/* A trainer's checkpoints (trainer.h): the graph and the host state of the
 * trainer, its learners and its train source, in one checkpoint file
 * (checkpoint.h), and the restore into a trainer built as the writer was.
 *
 * Restoring copies VALUES by name, not the graph: the trainer keeps the
 * graph its caller built (with the caller's handles, executors and learner
 * nodes) and each parameter and state takes the value of the same name in
 * the checkpoint's graph. Names are unique (layers.h, learner.h), so this
 * needs nothing of how the checkpoint's graph was put together, and a
 * checkpoint from any device restores onto any other: values are host
 * tensors in the file and em_parameter_set uploads them at the next run.
 * Everything is checked first (every name, dtype and shape, every section's
 * record by a dry load into a scratch copy where the part allows it), then
 * applied, so a refused checkpoint changes nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/learner.h"
#include "error.h"
#include "trainer_internal.h"

#define API __attribute__((visibility("default")))

#define SECTION_TRAINER "trainer"
#define SECTION_READER "reader"

static void learner_section_name(int i, char *buf, size_t cap) { snprintf(buf, cap, "learner.%d", i); }

/* Every parameter and state of g, in creation order. */
static em_status leaves(const em_graph *g, em_var **vars, size_t *n) {
  size_t np, ns;
  em_status s = em_graph_parameters(g, NULL, 0, &np);
  if (!s) s = em_graph_states(g, NULL, 0, &ns);
  if (s) return s;
  *vars = malloc(sizeof **vars * (np + ns + 1));
  if (!*vars) return em_fail(EM_ERR_OUT_OF_MEMORY, "restoring a checkpoint: out of memory");
  if (!s) s = em_graph_parameters(g, *vars, np, &np);
  if (!s) s = em_graph_states(g, *vars + np, ns, &ns);
  *n = np + ns;
  return s;
}

/* A checkpoint is what a run resumes from: one holding NaN or inf (a step
 * diverged after its loss was computed: the update itself overflowed)
 * would replace the last good one with a model nothing can continue from.
 * Every f32 / f64 parameter and state is scanned on the host (once per
 * checkpoint, beside the copy the save makes anyway). */
static em_status check_finite_values(const em_trainer *t) {
  em_var *vars = NULL;
  size_t n = 0;
  em_status s = leaves(t->g, &vars, &n);
  for (size_t i = 0; i < n && !s; i++) {
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    if ((s = em_var_info(t->g, vars[i], &dt, &nd, shape)) || (dt != EM_F32 && dt != EM_F64)) continue;
    em_tensor *v;
    if ((s = em_parameter_get(t->g, vars[i], em_cpu(), &v))) break;
    const int64_t count = em_tensor_numel(v);
    const void *data = em_tensor_data(v);
    for (int64_t j = 0; j < count; j++) {
      double x = dt == EM_F32 ? (double)((const float *)data)[j] : ((const double *)data)[j];
      if (isfinite(x)) continue;
      const char *name = NULL;
      if (em_var_name(t->g, vars[i], &name) || !name) name = "?";
      s = em_fail(EM_ERR_NOT_FINITE,
                  "'%s' element %lld is %g after step %llu (training diverged): not saved, so the previous "
                  "checkpoint stays",
                  name, (long long)j, x, (unsigned long long)t->steps);
      break;
    }
    em_tensor_release(v);
  }
  free(vars);
  return s;
}

API em_status em_trainer_save_checkpoint(em_trainer *t, const char *path, const em_minibatch_source *source,
                                         const em_checkpoint_section *extra, int n_extra) {
  if (!t || !path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_save_checkpoint: NULL argument");
  if (n_extra < 0 || (n_extra && !extra))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_save_checkpoint: %d extra sections and no array", n_extra);
  em_status s = check_finite_values(t);
  if (s) return em_fail_context(s, "em_trainer_save_checkpoint %s", path);
  int n = 1 + t->n_learners + (source ? 1 : 0) + n_extra;
  em_checkpoint_section *sec = calloc((size_t)n, sizeof *sec);
  void **owned = calloc((size_t)n, sizeof *owned);
  char (*names)[24] = calloc((size_t)t->n_learners + 1, sizeof *names);
  if (!sec || !owned || !names) {
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_save_checkpoint: out of memory");
    goto done;
  }
  int k = 0;
  size_t size;
  if ((s = em_trainer_state_save(t, &owned[k], &size))) goto done;
  sec[k++] = (em_checkpoint_section){SECTION_TRAINER, owned[0], size};
  for (int i = 0; i < t->n_learners; i++) {
    if ((s = em_learner_state_save(t->learners[i], &owned[k], &size))) goto done;
    learner_section_name(i, names[i], sizeof names[i]);
    sec[k] = (em_checkpoint_section){names[i], owned[k], size};
    k++;
  }
  if (source) {
    if ((s = em_minibatch_state_save(source, &owned[k], &size))) goto done;
    sec[k] = (em_checkpoint_section){SECTION_READER, owned[k], size};
    k++;
  }
  for (int i = 0; i < n_extra; i++) sec[k++] = extra[i];
  em_checkpoint_save_options so = {.device = t->opt.device, .mode = t->opt.mode};
  s = em_checkpoint_save(path, t->g, sec, k, &so);
done:
  for (int i = 0; owned && i < n; i++) free(owned[i]);
  free(owned);
  free(sec);
  free(names);
  return s ? em_fail_context(s, "em_trainer_save_checkpoint %s", path) : EM_OK;
}

/* The value of `name` in the checkpoint's graph, checked against the
 * trainer's own value v. */
static em_status saved_value(const em_graph *saved, const em_graph *g, em_var v, const char *path, em_tensor **out) {
  const char *name = NULL;
  em_status s = em_var_name(g, v, &name);
  if (s || !name) return em_fail(EM_ERR_INVALID_ARGUMENT, "value %d of the trainer's graph has no name", (int)v);
  em_var sv;
  if (em_graph_lookup(saved, name, &sv))
    return em_fail(EM_ERR_CORRUPT, "%s: the checkpoint has no value '%s' (was it written by another model?)", path,
                   name);
  em_dtype d0, d1;
  int n0, n1;
  int64_t s0[EM_MAX_DIMS], s1[EM_MAX_DIMS];
  em_var_info(g, v, &d0, &n0, s0);
  em_var_info(saved, sv, &d1, &n1, s1);
  if (d0 != d1 || n0 != n1 || memcmp(s0, s1, sizeof(int64_t) * (size_t)n0))
    return em_fail(EM_ERR_CORRUPT, "%s: '%s' is %s with %d dimensions there, %s with %d here (another model?)", path,
                   name, em_dtype_name(d1), n1, em_dtype_name(d0), n0);
  if ((s = em_parameter_get(saved, sv, em_cpu(), out)))
    return em_fail_context(s, "%s: reading '%s'", path, name);
  return EM_OK;
}

API em_status em_trainer_restore_checkpoint(em_trainer *t, const char *path, em_minibatch_source *source) {
  if (!t || !path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_restore_checkpoint: NULL argument");
  em_checkpoint *c = NULL;
  em_var *vars = NULL;
  em_tensor **values = NULL;
  size_t n = 0;
  void *reader_backup = NULL, *trainer_backup = NULL;
  void **learner_backup = calloc((size_t)t->n_learners, sizeof *learner_backup);
  size_t reader_backup_size = 0, trainer_backup_size = 0, *learner_backup_size =
                                                              calloc((size_t)t->n_learners, sizeof(size_t));
  em_status s = learner_backup && learner_backup_size ? EM_OK
                                                      : em_fail(EM_ERR_OUT_OF_MEMORY, "restoring: out of memory");
  if (!s) s = em_checkpoint_load(path, &c);
  if (s) goto done;
  const em_graph *saved = em_checkpoint_graph(c);
  if (!saved) {
    s = em_fail(EM_ERR_CORRUPT, "%s: the checkpoint holds no graph", path);
    goto done;
  }
  /* Check and read everything first. */
  const void *tb, *rb = NULL;
  size_t tn, rn = 0;
  if ((s = em_checkpoint_find(c, SECTION_TRAINER, &tb, &tn))) goto done;
  const void **lb = calloc((size_t)t->n_learners, sizeof *lb);
  size_t *ln = calloc((size_t)t->n_learners, sizeof *ln);
  if (!lb || !ln) {
    free(lb);
    free(ln);
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "restoring: out of memory");
    goto done;
  }
  for (int i = 0; i < t->n_learners && !s; i++) {
    char name[24];
    learner_section_name(i, name, sizeof name);
    s = em_checkpoint_find(c, name, &lb[i], &ln[i]);
  }
  if (!s && source) s = em_checkpoint_find(c, SECTION_READER, &rb, &rn);
  if (!s) s = leaves(t->g, &vars, &n);
  if (!s && !(values = calloc(n ? n : 1, sizeof *values)))
    s = em_fail(EM_ERR_OUT_OF_MEMORY, "restoring: out of memory");
  for (size_t i = 0; i < n && !s; i++) s = saved_value(saved, t->g, vars[i], path, &values[i]);
  /* The host records: each part's load checks its record and changes
   * nothing on a refusal; the ones loaded before a refusal are put back
   * from backups, so a refused checkpoint changes nothing. */
  if (!s) s = em_trainer_state_save(t, &trainer_backup, &trainer_backup_size);
  for (int i = 0; i < t->n_learners && !s; i++)
    s = em_learner_state_save(t->learners[i], &learner_backup[i], &learner_backup_size[i]);
  if (!s && source) s = em_minibatch_state_save(source, &reader_backup, &reader_backup_size);
  int loaded_trainer = 0, loaded_learners = 0;
  if (!s && !(s = em_trainer_state_load(t, tb, tn))) loaded_trainer = 1;
  for (int i = 0; i < t->n_learners && !s; i++)
    if (!(s = em_learner_state_load(t->learners[i], lb[i], ln[i]))) loaded_learners = i + 1;
  if (!s && source) s = em_minibatch_state_load(source, rb, rn);
  if (s) {
    em_status keep = s;
    if (loaded_trainer) em_trainer_state_load(t, trainer_backup, trainer_backup_size);
    for (int i = 0; i < loaded_learners; i++)
      em_learner_state_load(t->learners[i], learner_backup[i], learner_backup_size[i]);
    s = keep;
  }
  free(lb);
  free(ln);
  /* Then the values (these cannot fail for a checked dtype and shape but
   * for memory, which is reported). */
  for (size_t i = 0; i < n && !s; i++) s = em_parameter_set(t->g, vars[i], values[i]);
done:
  for (size_t i = 0; values && i < n; i++) em_tensor_release(values[i]);
  free(values);
  free(vars);
  free(trainer_backup);
  free(reader_backup);
  for (int i = 0; learner_backup && i < t->n_learners; i++) free(learner_backup[i]);
  free(learner_backup);
  free(learner_backup_size);
  em_checkpoint_free(c);
  return s ? em_fail_context(s, "em_trainer_restore_checkpoint") : EM_OK;
}
