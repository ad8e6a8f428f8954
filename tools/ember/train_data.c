/* The data of `ember train` and `ember eval`: the IDX splits of --data
 * (train-*, t10k-*: the MNIST layout), the subsets and the validation
 * split the options ask for, their minibatch sources, and the test report.
 *
 * Images are scaled to [0, 1] and standardised with the training images'
 * own mean and standard deviation (computed here, one pass over the bytes;
 * Fashion-MNIST's are 0.286 and 0.353): centred inputs let the first
 * layers learn several times faster than raw [0, 1] pixels. The numbers go
 * into the checkpoint's settings, so `ember eval` standardises the test
 * images exactly as training did. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"
#include "train_data.h"

static int data_error(const char *what, em_status s) {
  fprintf(stderr, "ember: %s: %s\n", what, em_last_error());
  if (s == EM_ERR_CORRUPT) return EXIT_DATA;
  if (s == EM_ERR_NOT_FOUND || s == EM_ERR_IO) return EXIT_NO_INPUT;
  return ember_exit_code(s);
}

/* The models take images of CLI_IMAGE_SIDE x CLI_IMAGE_SIDE, one channel:
 * a split of other images, or of none, is the data's fault (EXIT_DATA),
 * said here with the file's shape rather than as a shape error of the first
 * training step. */
static int check_images(const char *what, const em_dataset *d) {
  int i = em_dataset_find_stream(d, "features");
  em_stream_desc s;
  if (i < 0 || em_dataset_stream(d, i, &s)) return data_error(what, EM_ERR_CORRUPT);
  if (em_dataset_samples(d) < 1) {
    fprintf(stderr, "ember: %s: the file holds no images\n", what);
    return EXIT_DATA;
  }
  if (s.ndim != 2 || s.shape[0] != CLI_IMAGE_SIDE || s.shape[1] != CLI_IMAGE_SIDE) {
    char shape[96] = "";
    for (int k = 0; k < s.ndim; k++)
      snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", k ? "x" : "", (long long)s.shape[k]);
    fprintf(stderr, "ember: %s: the images are %s%s; the models take %dx%d images of one channel\n", what,
            s.ndim ? shape : "scalars", s.ndim == 3 ? " (channels x height x width)" : "", CLI_IMAGE_SIDE,
            CLI_IMAGE_SIDE);
    return EXIT_DATA;
  }
  return 0;
}

/* d[0, count) when count > 0 and smaller than d, else d itself. */
static em_status subset(em_dataset **d, int64_t first, int64_t count) {
  if (count <= 0 || (first == 0 && count >= em_dataset_samples(*d))) return EM_OK;
  em_dataset *part;
  em_status s = em_dataset_slice(*d, first, count, &part);
  if (s) return s;
  em_dataset_free(*d);
  *d = part;
  return EM_OK;
}

void cli_image_stats(const em_dataset *d, double *mean, double *std) {
  int i = em_dataset_find_stream(d, "features");
  em_stream_desc desc;
  *mean = 0;
  *std = 1;
  if (i < 0 || em_dataset_stream(d, i, &desc) || desc.dtype != EM_U8) return;
  int64_t per = 1;
  for (int k = 0; k < desc.ndim; k++) per *= desc.shape[k];
  const unsigned char *px = em_dataset_stream_data(d, i);
  uint64_t n = (uint64_t)per * (uint64_t)em_dataset_samples(d), hist[256] = {0};
  for (uint64_t k = 0; k < n; k++) hist[px[k]]++;
  double s1 = 0, s2 = 0;
  for (int v = 0; v < 256; v++) {
    double x = v / 255.0;
    s1 += x * (double)hist[v];
    s2 += x * x * (double)hist[v];
  }
  if (!n) return;
  *mean = s1 / (double)n;
  double var = s2 / (double)n - *mean * *mean;
  *std = var > 1e-12 ? sqrt(var) : 1;
}

static em_status source(const em_dataset *d, const train_opts *o, int train, double mean, double std,
                        em_minibatch_source **out) {
  em_minibatch_options mo = {.batch_size = o->batch, .seed = (uint64_t)o->seed, .shuffle = train,
                             .max_sweeps = train ? 0 : 1};
  if (!strcmp(o->model, "lstm")) return em_minibatch_source_create(d, &mo, out); /* sequences: no transforms */
  mo.transform.scale = 1.0f / 255.0f;
  mo.transform.norm_channels = 1;
  mo.transform.mean[0] = (float)mean;
  mo.transform.std[0] = (float)std;
  if (train && o->random_crop > 0) {
    /* zeros (the mean, after standardising) around the image, then a
     * crop of the original size at a random offset */
    mo.transform.pad = (int)o->random_crop;
    mo.transform.crop_h = mo.transform.crop_w = CLI_IMAGE_SIDE;
    mo.transform.random_crop = 1;
  }
  mo.transform.random_flip = train && o->random_flip;
  return em_minibatch_source_create(d, &mo, out);
}

/* --model lstm: DIR/<file>, a CTF file of sequences: the sequence stream
 * "features" (--input-dim values a step, at most --max-steps steps; its
 * lengths "features.lengths" follow) and the class "labels" ("k:1"). */
static int open_sequences(const train_opts *o, const char *file, const char *what, em_dataset **out) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", o->data, file);
  const em_ctf_stream decl[2] = {{.name = "features", .dim = o->input_dim, .max_steps = o->max_steps},
                                 {.name = "labels", .dim = o->classes, .sparse = 1, .is_class = 1}};
  em_status s = em_dataset_open_ctf(path, decl, 2, out);
  if (s) return data_error(what, s);
  if (em_dataset_samples(*out) < 1) {
    fprintf(stderr, "ember: %s: %s holds no sequences\n", what, path);
    return EXIT_DATA;
  }
  return 0;
}

/* d's images (IDX) or sequences (CTF, --model lstm) of a split. */
static int open_split(const train_opts *o, const char *split, const char *what, em_dataset **out) {
  if (!strcmp(o->model, "lstm")) return open_sequences(o, !strcmp(split, "train") ? "train.ctf" : "test.ctf", what, out);
  em_status s = em_dataset_open_idx_dir(o->data, split, 10, out);
  if (s) return data_error(what, s);
  return check_images(what, *out);
}

int cli_data_open(const train_opts *o, unsigned cmd, cli_data *d) {
  memset(d, 0, sizeof *d);
  em_status s;
  char what[1100];
  int seqs = !strcmp(o->model, "lstm");
  if (cmd == CMD_TRAIN) {
    snprintf(what, sizeof what, "--data %s: the training %s", o->data, seqs ? "sequences" : "images");
    int rc = open_split(o, "train", what, &d->train);
    if (rc) return rc;
    int64_t n = em_dataset_samples(d->train);
    if (o->train_samples > 0 && o->train_samples < n) n = o->train_samples;
    if (o->validation >= n) {
      fprintf(stderr, "ember train: --validation %lld leaves no training images of %lld\n", (long long)o->validation,
              (long long)n);
      return EXIT_USAGE;
    }
    if (o->validation > 0) {
      if ((s = em_dataset_slice(d->train, n - o->validation, o->validation, &d->validation)))
        return data_error(what, s);
      n -= o->validation;
    }
    if ((s = subset(&d->train, 0, n))) return data_error(what, s);
    cli_image_stats(d->train, &d->mean, &d->std);
  }
  snprintf(what, sizeof what, "--data %s: the test %s", o->data, seqs ? "sequences" : "images");
  int rc = open_split(o, "t10k", what, &d->test);
  if (rc) return rc;
  if ((s = subset(&d->test, 0, o->test_samples))) return data_error(what, s);
  if (cmd == CMD_EVAL) {
    d->mean = o->norm_mean;
    d->std = o->norm_std;
  }
  if ((d->train && (s = source(d->train, o, 1, d->mean, d->std, &d->train_src))) ||
      (d->validation && (s = source(d->validation, o, 0, d->mean, d->std, &d->validation_src))) ||
      (s = source(d->test, o, 0, d->mean, d->std, &d->test_src))) {
    fprintf(stderr, "ember: the minibatch source: %s\n", em_last_error());
    return s == EM_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_SOFTWARE;
  }
  return 0;
}

void cli_data_free(cli_data *d) {
  em_minibatch_source_free(d->train_src);
  em_minibatch_source_free(d->validation_src);
  em_minibatch_source_free(d->test_src);
  em_dataset_free(d->train);
  em_dataset_free(d->validation);
  em_dataset_free(d->test);
  memset(d, 0, sizeof *d);
}

void cli_print_test(FILE *out, int json, uint64_t samples, double loss, double error) {
  if (json) {
    json_t *j = json_pack("{s:s, s:I, s:f, s:f, s:f}", "event", "test", "samples", (json_int_t)samples, "loss", loss,
                          "error", error, "accuracy", 1 - error);
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fprintf(out, "%s\n", text ? text : "{}");
    free(text);
    json_decref(j);
  } else {
    fprintf(out, "test: %llu images, loss %.4f, error %.4f: accuracy %.2f%%\n", (unsigned long long)samples, loss, error,
            100 * (1 - error));
  }
}

int cli_report_test(em_trainer *t, const cli_model *m, cli_data *d, int json, em_device dev) {
  em_var inputs[3] = {m->x, m->label, m->lengths}; /* lengths: the CTF sequences' third stream */
  em_minibatch_result r;
  em_status s = em_trainer_evaluate(t, d->test_src, inputs, m->lengths != EM_NO_VAR ? 3 : 2, &r);
  if (s) return data_error("testing", s);
  cli_print_test(stdout, json, r.samples, r.loss, r.metric);
  ember_print_kernel_sources(json ? stderr : stdout, dev);
  return 0;
}
