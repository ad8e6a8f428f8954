/* `ember eval`: the loss, classification error and accuracy of a checkpoint
 * written by `ember train`, on the test images of an IDX data set, on any
 * device. The checkpoint's graph is used as it is: its values "x", "label",
 * "loss" and "error" (train_model.h) are found by name and one executor
 * computes the per-sample loss and error, summed here in float64. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "train_cmd.h"
#include "train_data.h"
#include "train_model.h"
#include "train_opts.h"

#define SETTINGS_SECTION "ember-train"

/* loaded: the file was read, so a part it lacks (EM_ERR_NOT_FOUND: no graph,
 * no settings section) makes it malformed for eval, not missing. */
static int load_error(const char *path, em_status s, int loaded) {
  fprintf(stderr, "ember eval: --checkpoint %s: %s\n", path, em_last_error());
  if (s == EM_ERR_CORRUPT || s == EM_ERR_UNSUPPORTED || (loaded && s == EM_ERR_NOT_FOUND)) return EXIT_DATA;
  if (s == EM_ERR_IO || s == EM_ERR_NOT_FOUND) return EXIT_NO_INPUT;
  return ember_exit_code(s);
}

/* The sums of per-sample f32 values. */
static double sum_of(const em_tensor *v, int64_t n, em_status *s) {
  float stack[1024], *buf = n <= 1024 ? stack : malloc(sizeof(float) * (size_t)n);
  double sum = 0;
  if (!buf) {
    *s = EM_ERR_OUT_OF_MEMORY;
    return 0;
  }
  *s = em_tensor_to_host(v, buf, sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n && !*s; i++) sum += buf[i];
  if (buf != stack) free(buf);
  return sum;
}

int ember_eval(int argc, char **argv) {
  train_opts o;
  train_opts_defaults(&o);
  if (train_opts_parse(CMD_EVAL, argc, argv, &o)) return EXIT_USAGE;
  if (o.help) {
    train_opts_help(CMD_EVAL, stdout);
    return 0;
  }
  /* Not on a terminal, stdout is JSON lines only; the rest goes to stderr. */
  if (!isatty(fileno(stdout))) o.json = 1;
  FILE *info = o.json ? stderr : stdout;
  em_checkpoint *c = NULL;
  em_graph *g = NULL;
  em_exec *e = NULL;
  json_t *settings = NULL;
  cli_data data = {0};
  int rc = 0;
  em_status s = em_checkpoint_load(o.checkpoint, &c);
  if (s) return load_error(o.checkpoint, s, 0);
  em_checkpoint_manifest man;
  const void *b;
  size_t n;
  json_error_t je;
  if ((s = em_checkpoint_get_manifest(c, &man)) || (s = em_checkpoint_find(c, SETTINGS_SECTION, &b, &n)) ||
      !(settings = json_loadb(b, n, 0, &je)) ||
      json_unpack(settings, "{s:s, s:[F,F]}", "model", &o.model, "norm", &o.norm_mean, &o.norm_std)) {
    if (!s) fprintf(stderr, "ember eval: --checkpoint %s: its \"" SETTINGS_SECTION "\" section is malformed\n",
                    o.checkpoint);
    rc = s ? load_error(o.checkpoint, s, 1) : EXIT_DATA;
    goto done;
  }
  /* The standardisation the test images get, in float32 as the reader
   * takes it: a crafted or damaged value is the file's fault (65), not a
   * usage error of the reader's options. */
  if (!isfinite((float)o.norm_mean) || !isfinite((float)o.norm_std) || !((float)o.norm_std > 0)) {
    fprintf(stderr,
            "ember eval: --checkpoint %s: its \"" SETTINGS_SECTION "\" section is malformed: \"norm\" [%g, %g] is "
            "not a finite mean and a positive standard deviation\n",
            o.checkpoint, o.norm_mean, o.norm_std);
    rc = EXIT_DATA;
    goto done;
  }
  char when[32];
  time_t created = (time_t)man.created;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&created));
  fprintf(info, "checkpoint: %s, model %s, written %s by Ember %s on %s in %s mode\n", o.checkpoint, o.model, when,
          man.ember_version, man.device_name, man.mode == EM_MODE_PORTABLE ? "portable" : "fast");
  em_device dev;
  if ((rc = ember_parse_device("eval", o.device, info, &dev))) goto done;
  if (o.threads > 0) em_set_num_threads((int)o.threads);
  if ((s = em_checkpoint_take_graph(c, &g))) {
    rc = load_error(o.checkpoint, s, 1);
    goto done;
  }
  cli_model m;
  const char *missing = cli_model_find(g, &m);
  if (missing) {
    fprintf(stderr, "ember eval: --checkpoint %s: its graph has no value named '%s': not written by `ember train`\n",
            o.checkpoint, missing);
    rc = EXIT_DATA;
    goto done;
  }
  if (m.lengths != EM_NO_VAR) {
    /* An lstm's sequences are shaped as its graph's x [N, T, D] and logits [N, K]. */
    int64_t xs[EM_MAX_DIMS], ls[EM_MAX_DIMS];
    int xn, ln;
    if ((s = em_var_info(g, m.x, NULL, &xn, xs)) || (s = em_var_info(g, m.logits, NULL, &ln, ls)) || xn != 3 || ln != 2) {
      fprintf(stderr, "ember eval: --checkpoint %s: its sequence model's x or logits has an unexpected shape\n",
              o.checkpoint);
      rc = EXIT_DATA;
      goto done;
    }
    o.max_steps = xs[1], o.input_dim = xs[2], o.classes = ls[1];
  }
  if ((rc = cli_data_open(&o, CMD_EVAL, &data))) goto done;
  em_var outs[2] = {m.loss, m.error};
  if ((s = em_exec_create(g, outs, 2, dev, &e)) ||
      (s = em_exec_set_mode(e, !strcmp(o.mode, "portable") ? EM_MODE_PORTABLE : EM_MODE_FAST))) {
    fprintf(stderr, "ember eval: %s\n", em_last_error());
    rc = ember_exit_code(s);
    goto done;
  }
  double loss = 0, errors = 0;
  uint64_t samples = 0;
  for (;;) {
    em_minibatch mb = {0};
    if ((s = em_minibatch_next(data.test_src, &mb))) break;
    if (mb.end_of_data) break;
    /* sequences: the third stream is features.lengths */
    em_feed feeds[3] = {{m.x, mb.features}, {m.label, mb.labels}, {m.lengths, mb.values[2]}};
    em_tensor *res[2] = {NULL, NULL};
    s = em_exec_run(e, feeds, m.lengths != EM_NO_VAR ? 3 : 2, res);
    if (!s) loss += sum_of(res[0], mb.samples, &s);
    if (!s) errors += sum_of(res[1], mb.samples, &s);
    samples += (uint64_t)mb.samples;
    em_tensor_release(res[0]);
    em_tensor_release(res[1]);
    em_minibatch_clear(&mb);
    if (s) break;
  }
  if (s) {
    fprintf(stderr, "ember eval: %s\n", em_last_error());
    rc = ember_exit_code(s);
    goto done;
  }
  cli_print_test(stdout, o.json, samples, loss / (double)samples, errors / (double)samples);
  ember_print_kernel_sources(info, dev);
done:
  em_exec_free(e);
  cli_data_free(&data);
  em_graph_free(g);
  json_decref(settings); /* after the last use of o.model, a string inside it */
  em_checkpoint_free(c);
  return rc;
}
