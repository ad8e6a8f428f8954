/* `ember train`: a model of the zoo (layers.h) trained on an IDX data set
 * (reader.h) by the trainer (trainer.h) with one learner (learner.h) over
 * every parameter, with progress output (a bar on a terminal, JSON lines
 * otherwise), a checkpoint after every epoch (checkpoint.h), the test
 * accuracy at the end and where each kernel's code came from.
 *
 * The checkpoint carries, beside the trainer's sections, a section
 * "ember-train" with the settings that shape the run (model, widths, seed,
 * learner and its regularisation, schedule, epochs, batch, subset sizes,
 * augmentation, early stopping, mode) as JSON, so --resume
 * rebuilds the same model and learner, and `ember eval` can say what it
 * evaluates. A resumed run is the saved run continued, as a PyTorch script
 * that reloads its optimizer and scheduler state or a CNTK restart from its
 * checkpoint: an option given again must have the saved value, else the
 * command is refused (65) naming both; only --epochs may change, and only
 * with a schedule that does not depend on it. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "train_cmd.h"
#include "train_data.h"
#include "train_model.h"
#include "train_opts.h"

#define SETTINGS_SECTION "ember-train"
/* The meaning of the settings' numbers: 1 (no "settings_version"): a
 * weight_decay of 0 is the learner's default (so adamw's 0.01); 2: -1 is
 * the learner's default, and 0 is 0. */
#define SETTINGS_VERSION 2

/* The settings that shape a run, as JSON (the checkpoint's section). */
static char *settings_json(const train_opts *o, double mean, double std) {
  json_t *j = json_pack("{s:s, s:[I,I], s:[I,I], s:f, s:I, s:s, s:f, s:f, s:f, s:s, s:f, s:I, s:I, s:I, s:I, s:I}",
                        "model", o->model, "channels", (json_int_t)o->channels[0], (json_int_t)o->channels[1],
                        "hidden", (json_int_t)o->hidden[0], (json_int_t)o->hidden[1], "dropout", o->dropout, "seed",
                        (json_int_t)o->seed, "learner", o->learner, "lr", isnan(o->lr) ? -1.0 : o->lr, "momentum",
                        isnan(o->momentum) ? -1.0 : o->momentum, "weight_decay",
                        isnan(o->weight_decay) ? -1.0 : o->weight_decay, "schedule",
                        o->schedule, "warmup", o->warmup, "epochs", (json_int_t)o->epochs, "batch",
                        (json_int_t)o->batch, "train_samples", (json_int_t)o->train_samples, "validation",
                        (json_int_t)o->validation, "patience", (json_int_t)o->patience);
  if (j) json_object_set_new(j, "norm", json_pack("[f,f]", mean, std));
  if (j) json_object_set_new(j, "batch_norm", json_boolean(o->batch_norm));
  if (j) json_object_set_new(j, "mode", json_string(o->mode));
  if (j) json_object_set_new(j, "precision", json_string(o->precision));
  if (j) json_object_set_new(j, "random_crop", json_integer(o->random_crop));
  if (j) json_object_set_new(j, "random_flip", json_boolean(o->random_flip));
  if (j) json_object_set_new(j, "min_delta", json_real(o->min_delta));
  if (j) json_object_set_new(j, "l2", json_real(o->l2));
  if (j && !strcmp(o->model, "lstm")) /* the sequences' shape, which the model is built for */
    json_object_set_new(j, "sequences", json_pack("{s:I, s:I, s:I}", "input_dim", (json_int_t)o->input_dim,
                                                  "max_steps", (json_int_t)o->max_steps, "classes",
                                                  (json_int_t)o->classes));
  if (j) json_object_set_new(j, "settings_version", json_integer(SETTINGS_VERSION));
  char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(j);
  return text;
}

/* The type each key of the settings has. */
typedef enum { KEY_INT, KEY_NUMBER, KEY_BOOL, KEY_STRING, KEY_PAIR } key_type;

static int is_type(const json_t *v, key_type want) {
  switch (want) {
  case KEY_INT: return json_is_integer(v);
  case KEY_NUMBER: return json_is_number(v);
  case KEY_BOOL: return json_is_boolean(v);
  case KEY_STRING: return json_is_string(v);
  case KEY_PAIR:
    return json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
           json_is_integer(json_array_get(v, 1));
  }
  return 0;
}

/* j's key of the type want, or absent when optional (*out NULL: then an
 * older version wrote the file, and the key's older default holds).
 * Returns 0, or -1 with why naming the key and what it holds. */
static int settings_key(json_t *j, const char *key, key_type want, int optional, json_t **out, char *why,
                        size_t cap) {
  static const char *const wanted[] = {"a whole number", "a number", "true or false", "a string",
                                       "two whole numbers, as [32,64]"};
  json_t *v = *out = json_object_get(j, key);
  if (v ? is_type(v, want) : optional) return 0;
  if (!v) {
    snprintf(why, cap, "no \"%s\"", key);
    return -1;
  }
  char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  snprintf(why, cap, "\"%s\" is %.40s%s, not %s", key, text ? text : "?", text && strlen(text) > 40 ? "..." : "",
           wanted[want]);
  free(text);
  return -1;
}

/* The strings of a loaded settings object live in it: keep it while o is
 * used. Returns 0, or -1 with why saying what is wrong. */
static int settings_apply(json_t *j, train_opts *o, char *why, size_t cap) {
  if (!json_is_object(j)) {
    snprintf(why, cap, "not a JSON object");
    return -1;
  }
  static const struct {
    const char *key;
    key_type type;
  } required[] = {{"model", KEY_STRING},  {"channels", KEY_PAIR},   {"hidden", KEY_PAIR},   {"dropout", KEY_NUMBER},
                  {"seed", KEY_INT},      {"learner", KEY_STRING},  {"lr", KEY_NUMBER},     {"momentum", KEY_NUMBER},
                  {"weight_decay", KEY_NUMBER}, {"schedule", KEY_STRING}, {"warmup", KEY_NUMBER}, {"epochs", KEY_INT},
                  {"batch", KEY_INT},     {"train_samples", KEY_INT}, {"validation", KEY_INT}, {"patience", KEY_INT}};
  json_t *v;
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
    if (settings_key(j, required[i].key, required[i].type, 0, &v, why, cap)) return -1;
  /* Keys later versions added: an older checkpoint has no batch_norm (off),
   * no mode (the command line's is taken), no precision (fp32), no augmentation (off), no
   * min_delta, no l2 (0). One of another type is refused, not read as
   * absent: a run saved with flips must not resume without them. */
  json_t *bn, *mode, *precision, *crop, *flip, *min_delta, *l2, *version, *seqs;
  if (settings_key(j, "settings_version", KEY_INT, 1, &version, why, cap) ||
      settings_key(j, "batch_norm", KEY_BOOL, 1, &bn, why, cap) ||
      settings_key(j, "mode", KEY_STRING, 1, &mode, why, cap) ||
      settings_key(j, "precision", KEY_STRING, 1, &precision, why, cap) ||
      settings_key(j, "random_crop", KEY_INT, 1, &crop, why, cap) ||
      settings_key(j, "random_flip", KEY_BOOL, 1, &flip, why, cap) ||
      settings_key(j, "min_delta", KEY_NUMBER, 1, &min_delta, why, cap) ||
      settings_key(j, "l2", KEY_NUMBER, 1, &l2, why, cap))
    return -1;
  /* lstm: {"input_dim", "max_steps", "classes"}, all whole numbers. */
  seqs = json_object_get(j, "sequences");
  json_int_t dim = 0, steps = 0, classes = 10;
  if (seqs && json_unpack(seqs, "{s:I, s:I, s:I}", "input_dim", &dim, "max_steps", &steps, "classes", &classes)) {
    snprintf(why, cap, "\"sequences\" is not {\"input_dim\", \"max_steps\", \"classes\"} of whole numbers");
    return -1;
  }
  o->input_dim = dim;
  o->max_steps = steps;
  o->classes = classes;
  json_int_t ver = version ? json_integer_value(version) : 1;
  if (ver < 1 || ver > SETTINGS_VERSION) {
    snprintf(why, cap, "settings version %lld; this ember train reads 1 to %d", (long long)ver, SETTINGS_VERSION);
    return -1;
  }
  /* (the types are checked: the unpacking cannot fail) */
  double lr, mom;
  json_int_t c0, c1, h0, h1, seed, epochs, batch, train_samples, validation, patience;
  if (json_unpack(j, "{s:s, s:[I,I], s:[I,I], s:F, s:I, s:s, s:F, s:F, s:F, s:s, s:F, s:I, s:I, s:I, s:I, s:I}",
                  "model", &o->model, "channels", &c0, &c1, "hidden", &h0, &h1, "dropout", &o->dropout, "seed", &seed,
                  "learner", &o->learner, "lr", &lr, "momentum", &mom, "weight_decay", &o->weight_decay, "schedule",
                  &o->schedule, "warmup", &o->warmup, "epochs", &epochs, "batch", &batch, "train_samples",
                  &train_samples, "validation", &validation, "patience", &patience)) {
    snprintf(why, cap, "unreadable");
    return -1;
  }
  o->batch_norm = json_is_true(bn);
  if (mode) o->mode = json_string_value(mode);
  o->precision = precision ? json_string_value(precision) : "fp32";
  o->l2 = l2 ? json_number_value(l2) : 0;
  o->random_crop = crop ? json_integer_value(crop) : 0;
  o->random_flip = json_is_true(flip);
  o->min_delta = min_delta ? json_number_value(min_delta) : 0;
  o->channels[0] = c0;
  o->channels[1] = c1;
  o->hidden[0] = h0;
  o->hidden[1] = h1;
  o->seed = seed;
  o->lr = lr == -1 ? NAN : lr; /* -1: the learner's default (settings_json) */
  o->momentum = mom == -1 ? NAN : mom;
  /* Version 1 wrote 0 for adamw's default (and trained a 0 given with 0.01). */
  if (o->weight_decay == -1 || (ver < 2 && o->weight_decay == 0 && !strcmp(o->learner, "adamw")))
    o->weight_decay = NAN;
  o->batch = batch;
  o->train_samples = train_samples;
  o->validation = validation;
  o->patience = patience;
  o->epochs = epochs;
  return 0;
}

/* The options a checkpoint's run was started with; --epochs apart. */
static const char *const run_settings[] = {
    "--model",      "--channels",   "--hidden",   "--batch-norm", "--dropout",       "--random-crop",
    "--random-flip", "--seed",      "--learner",  "--lr",         "--momentum",      "--weight-decay", "--l2",
    "--schedule",   "--warmup",     "--batch",    "--train-samples", "--validation", "--patience",
    "--min-delta",  "--mode",       "--precision", "--epochs",   "--input-dim", "--max-steps", "--classes", NULL};

/* The saved settings, checked as the command line's are, replace o's; an
 * option the command line gave with another value is refused. Returns 0 or
 * an exit code (EXIT_DATA, after saying why). */
static int resume_settings(json_t *j, train_opts *o) {
  train_opts saved = *o;
  char msg[256], what[160];
  const char *why = NULL;
  if (settings_apply(j, &saved, what, sizeof what)) {
    snprintf(msg, sizeof msg, "the \"" SETTINGS_SECTION "\" section is malformed: %s", what);
    why = msg;
  } else if ((why = train_opts_invalid(&saved, run_settings, msg, sizeof msg))) {
    char inner[200];
    snprintf(inner, sizeof inner, "%s", why);
    snprintf(msg, sizeof msg, "its settings are invalid: %s", inner);
    why = msg;
  }
  if (why) {
    fprintf(stderr, "ember train: --resume %s: %s\n", o->checkpoint, why);
    return EXIT_DATA;
  }
  /* --epochs may move the end of a run whose learning rate does not
   * depend on it (constant); cosine and step are shaped by the planned
   * epochs, so changing them would change every step's rate. */
  const int epochs_free = !strcmp(saved.schedule, "constant");
  const int64_t planned = saved.epochs;
  if (epochs_free) saved.epochs = o->epochs; /* no conflict */
  if ((why = train_opts_conflict(o, &saved, run_settings, msg, sizeof msg))) {
    fprintf(stderr,
            "ember train: --resume %s: %s%s; a resumed run keeps the settings it was started with: drop the "
            "option, or start a new run with another --checkpoint\n",
            o->checkpoint, why,
            !epochs_free && o->epochs != planned ? " (the --schedule's length is the run's planned --epochs)" : "");
    return EXIT_DATA;
  }
  saved.epochs = epochs_free && train_opts_given(o, "--epochs") ? o->epochs : planned;
  saved.given = o->given;
  *o = saved;
  return 0;
}

/* --resume with an existing checkpoint: its settings replace the command
 * line's. Returns 0 (*saved set, or NULL when there is no file to resume),
 * or an exit code. */
static int load_settings(train_opts *o, json_t **saved) {
  *saved = NULL;
  struct stat st;
  if (!o->resume || stat(o->checkpoint, &st) != 0) return 0;
  em_checkpoint *c;
  em_status s = em_checkpoint_info(o->checkpoint, &c);
  if (s) {
    fprintf(stderr, "ember train: --resume %s: %s\n", o->checkpoint, em_last_error());
    return s == EM_ERR_CORRUPT || s == EM_ERR_UNSUPPORTED ? EXIT_DATA : ember_exit_code(s);
  }
  const void *b;
  size_t n;
  if (em_checkpoint_find(c, SETTINGS_SECTION, &b, &n)) {
    fprintf(stderr, "ember train: --resume %s: no \"" SETTINGS_SECTION "\" section: not written by `ember train`\n",
            o->checkpoint);
    em_checkpoint_free(c);
    return EXIT_DATA;
  }
  json_error_t e;
  json_t *j = json_loadb(b, n, 0, &e);
  em_checkpoint_free(c);
  int rc = j ? resume_settings(j, o) : EXIT_DATA;
  if (!j)
    fprintf(stderr, "ember train: --resume %s: the \"" SETTINGS_SECTION "\" section is malformed: not JSON (%s)\n",
            o->checkpoint, e.text);
  if (rc) {
    json_decref(j);
    return rc;
  }
  *saved = j;
  return 0;
}

/* --momentum with a learner that has none (sgd, adagrad, rmsprop,
 * adadelta) changed nothing: PyTorch's SGD(momentum=0.9) is --learner
 * momentum here, and `--learner sgd --momentum 0.9` trained plain SGD.
 * Checked as given on the command line only, so an older checkpoint that
 * saved such a value still resumes. Returns 0 or EXIT_USAGE after saying why. */
static int check_momentum(const train_opts *o) {
  em_learner_kind kind;
  em_learner_config cfg;
  if (!train_opts_given(o, "--momentum") || o->momentum == 0 || em_learner_kind_parse(o->learner, &kind) ||
      em_learner_defaults(kind, 1, &cfg) || cfg.momentum.value != 0)
    return 0;
  fprintf(stderr,
          "ember train: --momentum %.15g: the %s learner has no momentum (PyTorch's SGD with momentum is --learner "
          "momentum, or nesterov); the learners with one: momentum, nesterov, adam and adamw (beta1), fsadagrad\n",
          o->momentum, o->learner);
  return EXIT_USAGE;
}

/* A resumed run trains on the images it started with: their mean and
 * standard deviation (computed the same way, to the bit) are the saved
 * "norm". --data may move; the reader's saved state checks only the
 * count, and MNIST and Fashion-MNIST have the same counts. (A file
 * without "norm" is not checked.) Returns 0 or EXIT_DATA after saying why. */
static int check_same_images(json_t *saved, const train_opts *o, const cli_data *d) {
  double mean, std;
  if (!saved || json_unpack(json_object_get(saved, "norm"), "[F,F]", &mean, &std)) return 0;
  if (mean == d->mean && std == d->std) return 0;
  fprintf(stderr,
          "ember train: --resume %s: the training images of --data %s are not the run's: their mean and standard "
          "deviation are %.9g and %.9g, the run's %.9g and %.9g; resume with the run's data set\n",
          o->checkpoint, o->data, d->mean, d->std, mean, std);
  return EXIT_DATA;
}

int ember_train(int argc, char **argv) {
  train_opts o;
  train_opts_defaults(&o);
  if (train_opts_parse(CMD_TRAIN, argc, argv, &o)) return EXIT_USAGE;
  if (o.help) {
    train_opts_help(CMD_TRAIN, stdout);
    return 0;
  }
  /* Not on a terminal, stdout is JSON lines only; the rest goes to stderr. */
  if (!isatty(fileno(stdout))) o.json = 1;
  FILE *info = o.json ? stderr : stdout;
  json_t *saved = NULL;
  int rc = load_settings(&o, &saved);
  if (!rc) rc = check_momentum(&o);
  if (!rc && !strcmp(o.model, "lstm") && (!o.input_dim || !o.max_steps)) { /* --resume of no checkpoint yet */
    fprintf(stderr, "ember train: --model lstm needs --input-dim D and --max-steps T (the sequences' shape)\n");
    rc = EXIT_USAGE;
  }
  if (rc) {
    json_decref(saved);
    return rc;
  }
  em_device dev;
  if ((rc = ember_parse_device("train", o.device, info, &dev))) {
    json_decref(saved);
    return rc;
  }
  if (o.threads > 0) em_set_num_threads((int)o.threads);

  cli_data data = {0};
  cli_model m = {0};
  em_learner *learner = NULL;
  em_trainer *t = NULL;
  em_progress *progress = NULL;
  char *settings = NULL;
  em_status s;
  if ((rc = cli_data_open(&o, CMD_TRAIN, &data)) || (rc = check_same_images(saved, &o, &data))) goto done;
  if ((s = cli_model_build(&o, &m))) {
    fprintf(stderr, "ember train: building %s: %s\n", o.model, em_last_error());
    rc = EXIT_SOFTWARE;
    goto done;
  }
  if ((s = cli_learner_create(&o, m.g, (uint64_t)em_dataset_samples(data.train), &learner))) {
    fprintf(stderr, "ember train: the learner: %s\n", em_last_error());
    rc = s == EM_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_SOFTWARE;
    goto done;
  }
  em_trainer_options to = {.device = dev, .mode = !strcmp(o.mode, "portable") ? EM_MODE_PORTABLE : EM_MODE_FAST,
                           .precision = !strcmp(o.precision, "fp16")   ? EM_F16
                                        : !strcmp(o.precision, "bf16") ? EM_BF16
                                                                       : EM_F32};
  if ((s = em_trainer_create(m.g, m.loss, m.error, &learner, 1, &to, &t))) {
    fprintf(stderr, "ember train: the trainer: %s\n", em_last_error());
    rc = ember_exit_code(s);
    goto done;
  }
  int64_t params = 0;
  em_layers_parameter_count(m.g, &params);
  fprintf(info, "model: %s, %lld parameters; learner %s; %lld training images in minibatches of %lld", o.model,
          (long long)params, o.learner, (long long)em_dataset_samples(data.train), (long long)o.batch);
  if (data.validation) fprintf(info, "; %lld held out for validation", (long long)em_dataset_samples(data.validation));
  if (o.random_crop) fprintf(info, "; random crops (padding %lld)", (long long)o.random_crop);
  if (o.random_flip) fprintf(info, "; random flips");
  fprintf(info, "; %s mode, %s\n", o.mode, o.precision);
  if (saved) {
    if ((s = em_trainer_restore_checkpoint(t, o.checkpoint, data.train_src))) {
      fprintf(stderr, "ember train: --resume: %s\n", em_last_error());
      rc = s == EM_ERR_CORRUPT || s == EM_ERR_UNSUPPORTED || s == EM_ERR_INVALID_ARGUMENT ? EXIT_DATA
                                                                                          : ember_exit_code(s);
      goto done;
    }
    em_trainer_totals tot;
    em_trainer_get_totals(t, &tot);
    fprintf(info, "resumed from %s: %lld epochs and %llu steps done\n", o.checkpoint, (long long)tot.epoch,
            (unsigned long long)tot.steps);
  }
  if ((s = em_progress_create(stdout, o.json ? EM_PROGRESS_JSON : EM_PROGRESS_AUTO, (uint64_t)o.report_every, "error",
                              &progress))) {
    rc = EXIT_SOFTWARE;
    goto done;
  }
  settings = settings_json(&o, data.mean, data.std);
  em_checkpoint_section extra = {SETTINGS_SECTION, settings, settings ? strlen(settings) : 0};
  /* The data set's streams in order: features, labels (and, for sequences, features.lengths). */
  em_var inputs[3] = {m.x, m.label, m.lengths};
  em_fit_options fo = {.epochs = o.epochs,
                       .train = data.train_src,
                       .inputs = inputs,
                       .n_inputs = m.lengths != EM_NO_VAR ? 3 : 2,
                       .validation = data.validation_src,
                       .checkpoint = o.checkpoint,
                       .checkpoint_extra = &extra,
                       .n_checkpoint_extra = 1,
                       /* progress output; a step whose loss or gradient is not finite
                        * fails em_trainer_fit (EM_ERR_NOT_FINITE) before a checkpoint of it */
                       .on_minibatch = em_progress_minibatch,
                       .on_epoch = em_progress_epoch,
                       .user = progress,
                       .patience = o.patience,
                       .min_delta = o.min_delta};
  em_fit_result fr = {0};
  s = em_trainer_fit(t, &fo, &fr);
  if (s) {
    fprintf(stderr, "ember train: %s\n", em_last_error());
    if (s == EM_ERR_NOT_FINITE && o.checkpoint && fr.epochs > 0)
      fprintf(stderr, "ember train: training diverged; try a smaller --lr (%s holds epoch %lld, the last good one)\n",
              o.checkpoint, (long long)fr.epochs);
    else if (s == EM_ERR_NOT_FINITE)
      fprintf(stderr, "ember train: training diverged; try a smaller --lr%s\n",
              o.checkpoint ? " (no epoch was complete: no checkpoint was written)" : "");
    rc = s == EM_ERR_IO ? EXIT_CANT_CREATE : ember_exit_code(s);
    goto done;
  }
  if (fr.early_stopped)
    fprintf(info, "early stopping: no better validation error than %.4f (epoch %lld) for %lld epochs\n", fr.best_val,
            (long long)fr.best_epoch, (long long)o.patience);
  rc = cli_report_test(t, &m, &data, o.json, dev);
done:
  free(settings);
  em_progress_free(progress);
  em_trainer_free(t);
  em_learner_free(learner);
  em_graph_free(m.g);
  cli_data_free(&data);
  json_decref(saved);
  return rc;
}
