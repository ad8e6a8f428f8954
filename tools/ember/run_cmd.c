/* `ember run MODEL.onnx [--input name=file.npy ...] [--device D] [--mode M]
 * [--output-dir DIR] [--json]`: loads an ONNX model through the public API
 * (include/ember/onnx.h), runs it once on the inputs given as .npy files
 * (npy.c), writes each output to DIR/<output name>.npy and prints per
 * output its shape, dtype, sum, min, max and XXH3-64 of its bytes, and the
 * load and run times.
 *
 * Every input is given to the model at load time (em_onnx_options.
 * input_values), so inputs that Ember takes as attributes (a Reshape's
 * shape, ...) are known while the graph is built: the graph is made for
 * exactly these inputs.
 *
 * Exit codes: 0 ran; 1 the model uses what Ember lacks; 64 usage (and an
 * input missing or unknown); 65 malformed model or .npy; 66 missing model or
 * .npy; 69 device not usable; 70 internal error; 73 an output cannot be
 * written. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "npy.h"
#include "onnx_cmd.h"
#include "train_cmd.h"

static const char USAGE[] =
    "usage: ember run MODEL.onnx [--input NAME=FILE.npy ...] [--device auto|cpu|cuda:N]\n"
    "                 [--mode fast|portable] [--output-dir DIR] [--json]\n"
    "\n"
    "Loads the ONNX model, runs it once and writes each output to DIR/<name>.npy\n"
    "(DIR defaults to the current directory; characters of the name other than\n"
    "letters, digits, '.', '_' and '-' become '_'). Every model input without a\n"
    "default value in the file needs an --input (NumPy .npy: f16, f32, f64, i32,\n"
    "i64, u8, bool; C order); the graph is built for exactly those inputs. Prints\n"
    "per output its dtype, shape, sum, min, max and the XXH3-64 of its bytes, and\n"
    "the load and run times. --device: auto (the best GPU, else the CPU; the\n"
    "default), cpu or cuda:N. --mode: fast (default) or portable (bitwise the same\n"
    "on the CPU and every GPU). --json prints one JSON object.\n"
    "\n"
    "Exit codes: 0 ran; 1 the model uses an op or form Ember lacks (see `ember\n"
    "inspect`); 64 usage error or an input missing/unknown; 65 malformed model or\n"
    ".npy; 66 model or .npy missing; 69 device not usable; 70 internal error;\n"
    "73 an output cannot be written.\n";

typedef struct run_args {
  const char *model, *device, *mode, *out_dir;
  int json;
  int n_inputs;
  char **names;        /* --input NAME (malloc'd) */
  const char **files;  /* --input ...=FILE (points into argv) */
} run_args;

static void args_free(run_args *a) {
  for (int i = 0; i < a->n_inputs; i++) free(a->names[i]);
  free(a->names);
  free(a->files);
}

static int usage_error(const char *why, const char *arg) {
  fprintf(stderr, "ember run: %s%s%s\n%s", why, arg ? ": " : "", arg ? arg : "", USAGE);
  return EXIT_USAGE;
}

static int add_input(run_args *a, const char *spec) {
  const char *eq = strchr(spec, '=');
  if (!eq || eq == spec || !eq[1]) return usage_error("--input expects NAME=FILE.npy", spec);
  char **nn = realloc(a->names, (size_t)(a->n_inputs + 1) * sizeof *nn);
  if (nn) a->names = nn;
  const char **nf = realloc(a->files, (size_t)(a->n_inputs + 1) * sizeof *nf);
  if (nf) a->files = nf;
  if (!nn || !nf || !(a->names[a->n_inputs] = strndup(spec, (size_t)(eq - spec)))) return EXIT_SOFTWARE;
  a->files[a->n_inputs++] = eq + 1;
  return 0;
}

static int parse_args(int argc, char **argv, run_args *a) {
  *a = (run_args){.device = "auto", .mode = "fast", .out_dir = "."};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    int has_value = i + 1 < argc;
    int rc = 0;
    if (!strcmp(o, "--json")) a->json = 1;
    else if (!strcmp(o, "--input") && has_value) rc = add_input(a, argv[++i]);
    else if (!strcmp(o, "--device") && has_value) a->device = argv[++i];
    else if (!strcmp(o, "--mode") && has_value) a->mode = argv[++i];
    else if (!strcmp(o, "--output-dir") && has_value) a->out_dir = argv[++i];
    else if (o[0] == '-') rc = usage_error(has_value ? "unknown option" : "option without a value", o);
    else if (a->model) rc = usage_error("more than one model given", o);
    else a->model = o;
    if (rc) return rc;
  }
  if (!a->model) return usage_error("no model given", NULL);
  if (strcmp(a->mode, "fast") && strcmp(a->mode, "portable"))
    return usage_error("--mode expects fast or portable", a->mode);
  return 0;
}

/* ---------------------------------------------------------------- inputs --- */

/* Refuses, before anything is built, inputs the model does not have and
 * inputs it needs but was not given (all named), reading the model's
 * description only. */
static int check_inputs(const run_args *a) {
  em_onnx *m;
  em_onnx_options o = {.metadata_only = 1};
  em_status s = em_onnx_load(a->model, &o, &m);
  if (s) {
    fprintf(stderr, "ember run: %s\n", em_last_error());
    return ember_onnx_exit_code(s);
  }
  int rc = 0;
  for (int j = 0; j < a->n_inputs; j++) {
    size_t i;
    if (em_onnx_find_input(m, a->names[j], &i)) rc = fprintf(stderr, "ember run: --input: %s\n", em_last_error());
    for (int k = 0; k < j; k++)
      if (!strcmp(a->names[k], a->names[j])) rc = fprintf(stderr, "ember run: --input %s given twice\n", a->names[j]);
    if (rc) rc = EXIT_USAGE;
  }
  char missing[1024] = "";
  for (size_t i = 0; !rc && i < em_onnx_input_count(m); i++) {
    em_onnx_io io;
    int given = 0;
    if (em_onnx_input_get(m, i, &io)) continue; /* the full load reports it */
    for (int j = 0; j < a->n_inputs; j++) given |= !strcmp(a->names[j], io.name);
    if (!given && !io.has_initializer)
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s", io.name);
  }
  if (!rc && missing[0]) {
    fprintf(stderr, "ember run: %s: no --input for the model input(s):%s\n", a->model, missing);
    rc = EXIT_USAGE;
  }
  em_onnx_free(m);
  return rc;
}

static int read_inputs(const run_args *a, em_named_tensor *values) {
  for (int j = 0; j < a->n_inputs; j++) {
    char err[512];
    npy_status s = npy_load(a->files[j], &values[j].value, err, sizeof err);
    values[j].name = a->names[j];
    if (s) {
      fprintf(stderr, "ember run: --input %s: %s\n", a->names[j], err);
      return s == NPY_ERR_IO ? EXIT_NO_INPUT : s == NPY_ERR_MEMORY ? EXIT_SOFTWARE : EXIT_DATA;
    }
  }
  return 0;
}

/* --------------------------------------------------------------- outputs --- */

typedef struct summary {
  double sum, min, max;
  uint64_t hash;
} summary;

static double element(const void *p, em_dtype t, size_t i) {
  switch (t) {
  case EM_F32: return ((const float *)p)[i];
  case EM_F64: return ((const double *)p)[i];
  case EM_I32: return ((const int32_t *)p)[i];
  case EM_I64: return (double)((const int64_t *)p)[i];
  case EM_U8:
  case EM_BOOL: return ((const uint8_t *)p)[i];
  default: return NAN; /* f16, bf16: summed as NaN rather than misread */
  }
}

static int summarise(const em_tensor *t, summary *out) {
  size_t n = (size_t)em_tensor_numel(t), nb = n * em_dtype_size(em_tensor_dtype(t));
  void *b = malloc(nb ? nb : 1);
  if (!b || em_tensor_to_host(t, b, nb)) {
    free(b);
    return -1;
  }
  *out = (summary){0, n ? INFINITY : NAN, n ? -INFINITY : NAN, XXH3_64bits(b, nb)};
  for (size_t i = 0; i < n; i++) {
    double v = element(b, em_tensor_dtype(t), i);
    out->sum += v;
    out->min = v < out->min ? v : out->min; /* NaNs are left out of min and max */
    out->max = v > out->max ? v : out->max;
  }
  free(b);
  return 0;
}

/* DIR/<name>.npy with every character outside [A-Za-z0-9._-] replaced, and
 * the output's index added when the name becomes an earlier output's file
 * (paths[0..index) are those). */
static void output_path(const em_onnx *m, size_t index, const char *dir, char (*paths)[1024]) {
  char clean[256];
  em_onnx_io io;
  em_onnx_output_get(m, index, &io);
  size_t n = 0;
  for (const char *c = io.name; *c && n + 1 < sizeof clean; c++)
    clean[n++] = (strchr("._-", *c) || (*c >= '0' && *c <= '9') || ((*c | 32) >= 'a' && (*c | 32) <= 'z')) ? *c : '_';
  clean[n] = 0;
  if (!n || !strcmp(clean, ".") || !strcmp(clean, "..")) snprintf(clean, sizeof clean, "output_%zu", index);
  snprintf(paths[index], sizeof paths[index], "%s/%s.npy", dir, clean);
  for (size_t k = 0; k < index; k++)
    if (!strcmp(paths[k], paths[index]))
      snprintf(paths[index], sizeof paths[index], "%s/%s_%zu.npy", dir, clean, index);
}

/* JSON has no NaN or infinity: those become null. */
static json_t *number_json(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static json_t *output_json(const em_onnx_io *io, const em_tensor *t, const char *file, const summary *s) {
  json_t *shape = json_array();
  for (int d = 0; d < em_tensor_ndim(t); d++) json_array_append_new(shape, json_integer(em_tensor_shape(t)[d]));
  char hash[17];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)s->hash);
  return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s}", "name", io->name, "file", file, "dtype",
                   em_dtype_name(em_tensor_dtype(t)), "shape", shape, "sum", number_json(s->sum), "min",
                   number_json(s->min), "max", number_json(s->max), "xxh3", hash);
}

/* Writes and describes every output; returns the exit code. */
static int write_outputs(const run_args *a, const em_onnx *m, em_tensor **outs, json_t *jouts) {
  if (mkdir(a->out_dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "ember run: --output-dir %s: %s\n", a->out_dir, strerror(errno));
    return EXIT_CANT_CREATE;
  }
  size_t n = em_onnx_output_count(m);
  char(*paths)[1024] = calloc(n + 1, sizeof *paths);
  int rc = paths ? 0 : EXIT_SOFTWARE;
  for (size_t i = 0; !rc && i < n; i++) {
    char err[512], desc[128];
    const char *path = paths[i];
    em_onnx_io io;
    summary s;
    em_onnx_output_get(m, i, &io);
    output_path(m, i, a->out_dir, paths);
    if (summarise(outs[i], &s)) {
      fprintf(stderr, "ember run: reading output '%s': %s\n", io.name, em_last_error());
      rc = EXIT_SOFTWARE;
    } else if (npy_save(path, outs[i], err, sizeof err)) {
      fprintf(stderr, "ember run: output '%s': %s\n", io.name, err);
      rc = EXIT_CANT_CREATE;
    } else if (jouts) {
      json_array_append_new(jouts, output_json(&io, outs[i], path, &s));
    } else {
      printf("output %s: %s  sum %.9g  min %.9g  max %.9g  xxh3 %016llx  -> %s\n", io.name,
             em_tensor_describe(outs[i], desc, sizeof desc), s.sum, s.min, s.max, (unsigned long long)s.hash, path);
    }
  }
  free(paths);
  return rc;
}

/* ------------------------------------------------------------------- run --- */

static int load_and_run(const run_args *a, em_device dev, em_named_tensor *values) {
  em_onnx_options o = {.device = dev,
                       .mode = !strcmp(a->mode, "portable") ? EM_ONNX_MODE_PORTABLE : EM_ONNX_MODE_FAST,
                       .input_values = values,
                       .n_input_values = a->n_inputs};
  em_onnx *m;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  em_status s = em_onnx_load(a->model, &o, &m);
  if (s) {
    fprintf(stderr, "ember run: %s\n", em_last_error());
    return ember_onnx_exit_code(s);
  }
  double load_ms = ms_since(&t0);
  size_t n_out = em_onnx_output_count(m);
  em_tensor **outs = calloc(n_out + 1, sizeof *outs);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  s = outs ? em_onnx_run(m, NULL, 0, outs) : EM_ERR_OUT_OF_MEMORY;
  if (!s && dev.kind == EM_DEVICE_CUDA) s = em_stream_sync(dev, NULL); /* the run's kernels are queued, not done */
  double run_ms = ms_since(&t0);
  int rc = s ? ember_onnx_exit_code(s) : 0;
  if (s) fprintf(stderr, "ember run: %s\n", em_last_error());
  json_t *jouts = a->json ? json_array() : NULL;
  if (!rc) rc = write_outputs(a, m, outs, jouts);
  if (!rc && a->json) {
    char dev_label[32];
    if (dev.kind == EM_DEVICE_CUDA) snprintf(dev_label, sizeof dev_label, "cuda:%d", dev.ordinal);
    else snprintf(dev_label, sizeof dev_label, "cpu");
    json_t *root = json_pack("{s:s, s:s, s:s, s:f, s:f, s:o}", "model", a->model, "device", dev_label, "mode",
                             a->mode, "load_ms", load_ms, "run_ms", run_ms, "outputs", jouts);
    jouts = NULL;
    json_dumpf(root, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(root);
  } else if (!rc) {
    printf("load %.3f ms, run %.3f ms\n", load_ms, run_ms);
  }
  json_decref(jouts);
  for (size_t i = 0; outs && i < n_out; i++) em_tensor_release(outs[i]);
  free(outs);
  em_onnx_free(m);
  return rc;
}

int ember_run(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(USAGE, stdout), 0;
  run_args a;
  int rc = parse_args(argc, argv, &a);
  if (!rc) rc = check_inputs(&a);
  em_named_tensor *values = calloc((size_t)a.n_inputs + 1, sizeof *values);
  if (!rc && !values) rc = EXIT_SOFTWARE;
  if (!rc) rc = read_inputs(&a, values);
  em_device dev;
  if (!rc) rc = ember_parse_device("run", a.device, a.json ? stderr : stdout, &dev);
  if (!rc) rc = load_and_run(&a, dev, values);
  for (int j = 0; values && j < a.n_inputs; j++) em_tensor_release(values[j].value);
  free(values);
  args_free(&a);
  return rc;
}
