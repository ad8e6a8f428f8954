/* The model and learner of `ember train`, and finding the model again in a
 * checkpoint's graph for `ember eval` and --resume: the values a run needs
 * carry fixed names ("x", "label", "logits", "loss", "error"), so a graph
 * loaded from a file is understood without knowing which model made it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_model.h"

#define CLASSES 10

/* The learning rate each learner starts from when --lr is not given: the
 * usual defaults for a minibatch mean loss (PyTorch's where it has one). */
static double default_lr(em_learner_kind k) {
  switch (k) {
  case EM_LEARNER_SGD: return 0.05;
  case EM_LEARNER_MOMENTUM:
  case EM_LEARNER_NESTEROV: return 0.02;
  case EM_LEARNER_ADAGRAD: return 0.01;
  case EM_LEARNER_RMSPROP: return 0.001;
  case EM_LEARNER_ADADELTA: return 1.0;
  case EM_LEARNER_FSADAGRAD: return 0.01;
  default: return 0.001; /* adam, adamw */
  }
}

static em_status name(em_graph *g, em_var v, const char *n) { return em_var_set_name(g, v, n); }

/* lstm: x [N, T, D] and its lengths through an LSTM (layout 1) whose last
 * valid state (Y_h) a dense layer classifies. */
static em_status sequence_model(const train_opts *o, cli_model *m) {
  int64_t hidden = o->hidden[0] > 0 ? o->hidden[0] : 64;
  em_layers L = {.graph = m->g, .seed = (uint64_t)o->seed};
  em_recurrent_outputs r;
  em_var h;
  em_attr shape = {.name = "shape", .type = EM_ATTR_INTS, .ints = (const int64_t[]){-1, hidden}, .n = 2};
  em_status s;
  if ((s = em_input(m->g, "x", EM_F32, 3, (int64_t[]){-1, o->max_steps, o->input_dim}, &m->x)) ||
      (s = em_input(m->g, "x.lengths", EM_I64, 1, (int64_t[]){-1}, &m->lengths)) ||
      (s = em_lstm(&L, "lstm", m->x, hidden,
                   &(em_recurrent_layer_opts){.rnn.layout = 1, .sequence_lens = &m->lengths}, &r)) ||
      (s = em_apply(m->g, "reshape", &r.y_h, 1, &shape, 1, &h, 1))) /* [N, 1, H] -> [N, H] */
    return s;
  return em_dense(&L, "classifier", h, o->classes, NULL, &m->logits);
}

em_status cli_model_build(const train_opts *o, cli_model *m) {
  memset(m, 0, sizeof *m);
  em_status s = em_graph_create(&m->g);
  if (s) return s;
  em_model_opts mo = {0};
  mo.channels[0] = o->channels[0];
  mo.channels[1] = o->channels[1];
  mo.fc[0] = o->hidden[0];
  mo.fc[1] = o->hidden[1];
  int64_t hidden[2] = {o->hidden[0], o->hidden[1]};
  if (!strcmp(o->model, "mlp") && hidden[0] > 0) {
    mo.hidden = hidden;
    mo.n_hidden = hidden[1] > 0 ? 2 : 1;
  }
  mo.dropout = o->dropout;
  mo.batch_norm = o->batch_norm;
  em_var per_sample_loss, per_sample_error;
  m->lengths = EM_NO_VAR;
  int lstm = !strcmp(o->model, "lstm");
  if ((s = lstm ? sequence_model(o, m)
                : em_input(m->g, "x", EM_F32, 4, (int64_t[]){-1, 1, CLI_IMAGE_SIDE, CLI_IMAGE_SIDE}, &m->x)) ||
      (s = em_input(m->g, "label", EM_I32, 1, (int64_t[]){-1}, &m->label)) ||
      (!lstm && (s = em_model_build(m->g, o->model, m->x, CLASSES, (uint64_t)o->seed, &mo, &m->logits))) ||
      (s = name(m->g, m->logits, "logits")) ||
      (s = em_apply(m->g, "cross_entropy_with_softmax", (em_var[]){m->logits, m->label}, 2, NULL, 0,
                    &per_sample_loss, 1)) ||
      (s = name(m->g, per_sample_loss, "loss")) ||
      (s = em_apply(m->g, "classification_error", (em_var[]){m->logits, m->label}, 2, NULL, 0, &per_sample_error,
                    1)) ||
      (s = name(m->g, per_sample_error, "error"))) {
    em_graph_free(m->g);
    m->g = NULL;
    return s;
  }
  m->loss = per_sample_loss;
  m->error = per_sample_error;
  return EM_OK;
}

const char *cli_model_find(em_graph *g, cli_model *m) {
  memset(m, 0, sizeof *m);
  m->g = g;
  static const char *const names[] = {"x", "label", "logits", "loss", "error"};
  em_var *slots[] = {&m->x, &m->label, &m->logits, &m->loss, &m->error};
  for (int i = 0; i < 5; i++)
    if (em_graph_lookup(g, names[i], slots[i])) return names[i];
  if (em_graph_lookup(g, "x.lengths", &m->lengths)) m->lengths = EM_NO_VAR; /* images */
  return NULL;
}

em_status cli_learner_create(const train_opts *o, em_graph *g, uint64_t epoch_samples, em_learner **out) {
  em_learner_kind kind;
  em_status s = em_learner_kind_parse(o->learner, &kind);
  if (s) return s;
  em_learner_config cfg;
  double lr = isnan(o->lr) ? default_lr(kind) : o->lr;
  if ((s = em_learner_defaults(kind, lr, &cfg))) return s;
  if (!isnan(o->momentum)) cfg.momentum.value = o->momentum;
  if (!isnan(o->weight_decay)) cfg.weight_decay = o->weight_decay; /* 0 too: adamw's default is 0.01 */
  if (o->l2 > 0) cfg.l2 = o->l2;
  uint64_t total = epoch_samples * (uint64_t)o->epochs;
  cfg.lr.warmup_samples = (uint64_t)(o->warmup * (double)epoch_samples);
  /* step: x0.1 after half the epochs, x0.01 after three quarters (the
   * learner copies the arrays). */
  double step_values[3] = {lr, lr * 0.1, lr * 0.01};
  uint64_t half = (uint64_t)(o->epochs / 2), quarter = (uint64_t)(o->epochs / 4);
  uint64_t step_counts[3] = {half ? half : 1, quarter ? quarter : 1, 1};
  if (!strcmp(o->schedule, "cosine")) {
    cfg.lr.cosine_samples = total > cfg.lr.warmup_samples ? total - cfg.lr.warmup_samples : 1;
  } else if (!strcmp(o->schedule, "step")) {
    cfg.lr.n = 3;
    cfg.lr.values = step_values;
    cfg.lr.counts = step_counts;
    cfg.lr.epoch_size = epoch_samples;
  }
  size_t np;
  if ((s = em_graph_parameters(g, NULL, 0, &np))) return s;
  em_var *params = malloc(sizeof *params * (np ? np : 1));
  if (!params) return EM_ERR_OUT_OF_MEMORY;
  if (!(s = em_graph_parameters(g, params, np, &np))) s = em_learner_create(&cfg, NULL, params, (int)np, out);
  free(params);
  return s;
}
