/* `ember export CHECKPOINT -o MODEL.onnx`: the model of a checkpoint that
 * `ember train` wrote, as an ONNX model (em_onnx_export, include/ember/onnx.h).
 * The checkpoint's graph is used as it is: its value "logits" (or the one
 * --output names) and what it needs; the loss, the metric and the
 * learners' nodes are left out. The model's input is the graph's "x".
 *
 * Exit codes: 0 written; 1 the graph holds an op with no ONNX form (named);
 * 64 usage; 65 malformed checkpoint; 66 missing checkpoint; 73 the model
 * cannot be written. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx_cmd.h"
#include "train_cmd.h"

#define SETTINGS_SECTION "ember-train"

static const char USAGE[] =
    "usage: ember export CHECKPOINT -o MODEL.onnx [--model NAME] [--output VALUE] [--opset N]\n"
    "                    [--external-data]\n"
    "\n"
    "Writes the model of a checkpoint written by `ember train` as an ONNX model:\n"
    "the graph's value VALUE (default \"logits\") and what it depends on, with the\n"
    "trained parameters and batch-norm statistics as initializers, in inference\n"
    "form (dropout off, batch norm on its running statistics). The model's input\n"
    "is \"x\" [N, 1, 28, 28] f32, the images standardised as training read them:\n"
    "(pixel / 255 - mean) / std with the checkpoint's \"norm\" (printed here); N is\n"
    "a dynamic axis. onnxruntime and `ember run` run the file.\n"
    "\n"
    "  -o, --out FILE     the ONNX file to write (atomically)\n"
    "  --model NAME       check that the checkpoint holds this model (mlp, lenet, resnet20)\n"
    "  --output VALUE     the graph value to export (default logits)\n"
    "  --opset N          ai.onnx opset, 13 to 20 (default 17)\n"
    "  --external-data    tensors of 1 KiB and more in FILE.data beside FILE (automatic\n"
    "                     past protobuf's 2 GB)\n"
    "\n"
    "Exit codes: 0 written; 1 an op has no ONNX form (named); 64 usage error;\n"
    "65 malformed checkpoint; 66 checkpoint missing; 73 the model cannot be written.\n";

static int usage(FILE *f, int rc) {
  fputs(USAGE, f);
  return rc;
}

static int load_error(const char *path, em_status s, int loaded) {
  fprintf(stderr, "ember export: %s: %s\n", path, em_last_error());
  if (s == EM_ERR_CORRUPT || s == EM_ERR_UNSUPPORTED || (loaded && s == EM_ERR_NOT_FOUND)) return EXIT_DATA;
  if (s == EM_ERR_IO || s == EM_ERR_NOT_FOUND) return EXIT_NO_INPUT;
  return ember_exit_code(s);
}

int ember_export(int argc, char **argv) {
  const char *ckpt = NULL, *out = NULL, *model = NULL, *value = "logits";
  em_onnx_export_options eo = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout, 0);
    if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && next) out = argv[++i];
    else if (!strcmp(a, "--model") && next) model = argv[++i];
    else if (!strcmp(a, "--output") && next) value = argv[++i];
    else if (!strcmp(a, "--opset") && next) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 13 || v > 20) {
        fprintf(stderr, "ember export: --opset %s: expected 13 to 20\n", argv[i]);
        return EXIT_USAGE;
      }
      eo.opset = (int)v;
    } else if (!strcmp(a, "--external-data")) eo.external_data = EM_ONNX_EXTERNAL_ALWAYS;
    else if (a[0] != '-' && !ckpt) ckpt = a;
    else {
      fprintf(stderr, "ember export: unexpected argument '%s'\n", a);
      return usage(stderr, EXIT_USAGE);
    }
  }
  if (!ckpt || !out) {
    fprintf(stderr, "ember export: %s\n", !ckpt ? "no CHECKPOINT given" : "no output file given (-o MODEL.onnx)");
    return usage(stderr, EXIT_USAGE);
  }
  /* The model replaces whatever is at -o: never the checkpoint being read
   * (cp refuses a file onto itself the same way). */
  struct stat in_st, out_st;
  if (stat(ckpt, &in_st) == 0 && stat(out, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
      in_st.st_ino == out_st.st_ino) {
    fprintf(stderr, "ember export: -o %s is the checkpoint itself; the model would replace it\n", out);
    return EXIT_USAGE;
  }
  em_checkpoint *c = NULL;
  em_graph *g = NULL;
  json_t *settings = NULL;
  int rc = 0;
  em_status s = em_checkpoint_load(ckpt, &c);
  if (s) return load_error(ckpt, s, 0);
  const void *b;
  size_t n;
  json_error_t je;
  const char *trained = NULL;
  double mean = 0, std = 1;
  if ((s = em_checkpoint_find(c, SETTINGS_SECTION, &b, &n)) || !(settings = json_loadb(b, n, 0, &je)) ||
      json_unpack(settings, "{s:s, s:[F,F]}", "model", &trained, "norm", &mean, &std)) {
    if (!s) fprintf(stderr, "ember export: %s: its \"" SETTINGS_SECTION "\" section is malformed\n", ckpt);
    rc = s ? load_error(ckpt, s, 1) : EXIT_DATA;
    goto done;
  }
  if (model && strcmp(model, trained)) {
    fprintf(stderr, "ember export: %s holds a %s model, not %s\n", ckpt, trained, model);
    rc = EXIT_DATA;
    goto done;
  }
  if ((s = em_checkpoint_take_graph(c, &g))) {
    rc = load_error(ckpt, s, 1);
    goto done;
  }
  em_var y;
  if (em_graph_lookup(g, value, &y)) {
    fprintf(stderr, "ember export: %s: its graph has no value named '%s'\n", ckpt, value);
    rc = EXIT_DATA;
    goto done;
  }
  if ((s = em_onnx_export(g, &y, 1, &eo, out))) {
    fprintf(stderr, "ember export: %s\n", em_last_error());
    rc = s == EM_ERR_IO ? EXIT_CANT_CREATE : ember_onnx_exit_code(s);
    goto done;
  }
  printf("%s: the %s model of %s, output '%s', opset %d; input 'x' standardised with mean %.9g, std %.9g\n", out,
         trained, ckpt, value, eo.opset ? eo.opset : 17, mean, std);
done:
  json_decref(settings);
  em_graph_free(g);
  em_checkpoint_free(c);
  return rc;
}
