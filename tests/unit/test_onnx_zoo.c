/* The model zoo: small PyTorch models exported to ONNX, run through Ember.
 *
 * tests/onnx_zoo/zoo.sh (run once per build folder by the Makefile) has
 * torch export an MLP, a CNN with batch norm and max-pool,
 * a MobileNet style depthwise-separable block, a transformer encoder layer,
 * LSTMs and a GRU (plain, bidirectional, and packed with sequence lengths),
 * and an upsampling decoder (ConvTranspose, Resize nearest and bilinear),
 * each by torch's legacy exporter (opset 13, 17), its dynamo exporter
 * (opset 18) and with its defaults (opset 20 in torch 2.15, the weights in
 * an external data file), with fixed inputs and onnxruntime's outputs as the expected
 * values (tests/onnx_zoo/zoo_models.py). Where torch is missing (CI) the
 * models are the committed export in tests/onnx_zoo/models; onnxruntime
 * computes the expected values either way. The manifest's first line says
 * which torch exported them and which onnxruntime computed the values; it
 * is printed. The zoo is found at $EMBER_ONNX_ZOO (else
 * $EMBER_BUILD_DIR/onnx_zoo); when it could not be made (no onnxruntime: no
 * PyPI) every test is skipped with the reason.
 *
 * Each model runs through the public API (em_onnx_load, em_onnx_run) on the
 * CPU and on the libcuda test double's GPU ($FAKECUDA_LIB), and through
 * `ember run` ($EMBER_CLI) on both, and in portable mode on both, whose
 * outputs must be bitwise equal; the largest error relative to the
 * output's largest magnitude, max|ember - ort| / max|ort|, is printed per
 * model and must stay under TOLERANCE.
 *
 * Round trip (test_api_cpu, test_export_onnxruntime): each model loaded by
 * Ember is exported by em_onnx_export (at its own opset) and reloaded: the
 * outputs must be bitwise those of the original load (portable mode), and
 * onnxruntime's on the exported file must match the expected values
 * within TOLERANCE (tests/support/onnx_check.py).
 *
 * Models whose ops Ember lacks are listed in expected_failures with the
 * reason (none since a8b4d22: LSTM and GRU import): their load must fail with
 * EM_ERR_UNSUPPORTED naming the op (and `ember run` exit with 1). One that
 * starts loading fails the test, so the list is shortened as the ops land
 * and never hides a regression. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember.h"
#include "gpu_double.h"
#include "npy.h"
#include "ort_check.h"

/* float32 models of at most a few hundred terms per sum: Ember and
 * onnxruntime round differently (order of sums, exp, tanh), by about 4e-7
 * of the output's scale here (2026-11). */
#define TOLERANCE 1e-5

/* Models Ember cannot import yet: the model name (the zoo directory without
 * its _<exporter><opset> suffix), the word the load error must name, why. */
typedef struct expected_failure {
  const char *model;
  const char *names;
  const char *reason;
} expected_failure;
static const expected_failure expected_failures[] = {
    {NULL, NULL, NULL}, /* none now (LSTM and GRU import since training/recurrent.c); the list ends here */
};

#define MAX_MODELS 64
#define MAX_IO 8
typedef struct zoo_model {
  char dir[128];
  int n_in, n_out;
  char in_names[MAX_IO][64];
  char out_names[MAX_IO][64];
} zoo_model;

static char zoo_dir[1024];
static const char *skip_reason; /* non-NULL: no zoo, every test skips saying why */
static char skip_text[2048];
static zoo_model models[MAX_MODELS];
static int n_models;
static int have_gpu;
static char tmp_root[64];

static const expected_failure *expected_failure_of(const zoo_model *m) {
  for (size_t i = 0; expected_failures[i].model; i++) {
    size_t n = strlen(expected_failures[i].model);
    const char *rest = m->dir + n;
    /* the name then "_legacy13", "_dynamo18", "_default20": "lstm" must not match "lstm_packed_legacy13" */
    if (!strncmp(m->dir, expected_failures[i].model, n) &&
        (!strncmp(rest, "_legacy", 7) || !strncmp(rest, "_dynamo", 7) || !strncmp(rest, "_default", 8)))
      return &expected_failures[i];
  }
  return NULL;
}

static void read_manifest(void) {
  const char *d = getenv("EMBER_ONNX_ZOO");
  if (d && *d) {
    snprintf(zoo_dir, sizeof zoo_dir, "%s", d);
  } else {
    const char *b = getenv("EMBER_BUILD_DIR");
    snprintf(zoo_dir, sizeof zoo_dir, "%s/onnx_zoo", b && *b ? b : "build");
  }
  char p[1100];
  snprintf(p, sizeof p, "%s/manifest.txt", zoo_dir);
  FILE *f = fopen(p, "r");
  if (!f) {
    /* zoo.sh says why it made no zoo in UNAVAILABLE. */
    snprintf(p, sizeof p, "%s/UNAVAILABLE", zoo_dir);
    FILE *u = fopen(p, "r");
    char why[1024] = "";
    if (u) {
      size_t n = fread(why, 1, sizeof why - 1, u);
      why[n] = '\0';
      while (n && (why[n - 1] == '\n' || why[n - 1] == ' ')) why[--n] = '\0';
      fclose(u);
    }
    snprintf(skip_text, sizeof skip_text, "no ONNX model zoo in %s: %s", zoo_dir,
             *why ? why : "not generated (bash tests/onnx_zoo/zoo.sh DIR makes it; make test-unit runs that)");
    skip_reason = skip_text;
    return;
  }
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') {
      print_message("zoo %s: %s", zoo_dir, line + 1 + (line[1] == ' '));
      continue;
    }
    if (line[0] == '\n') continue;
    if (n_models == MAX_MODELS) fail_msg("more than %d models in %s", MAX_MODELS, p);
    zoo_model *m = &models[n_models++];
    char *save = NULL, *tok = strtok_r(line, " \n", &save);
    assert_non_null(tok);
    snprintf(m->dir, sizeof m->dir, "%s", tok);
    tok = strtok_r(NULL, " \n", &save);
    assert_non_null(tok);
    m->n_in = atoi(tok);
    assert_true(m->n_in > 0 && m->n_in <= MAX_IO);
    for (int i = 0; i < m->n_in; i++) {
      tok = strtok_r(NULL, " \n", &save);
      assert_non_null(tok);
      snprintf(m->in_names[i], sizeof m->in_names[i], "%s", tok);
    }
    tok = strtok_r(NULL, " \n", &save);
    assert_non_null(tok);
    m->n_out = atoi(tok);
    assert_true(m->n_out > 0 && m->n_out <= MAX_IO);
    for (int i = 0; i < m->n_out; i++) {
      tok = strtok_r(NULL, " \n", &save);
      assert_non_null(tok);
      snprintf(m->out_names[i], sizeof m->out_names[i], "%s", tok);
    }
  }
  fclose(f);
  if (!n_models) fail_msg("%s lists no model", p);
}

#define NEED_ZOO()                                      \
  do {                                                  \
    if (skip_reason) {                                  \
      print_message("SKIPPED: %s\n", skip_reason);      \
      skip();                                           \
    }                                                   \
  } while (0)

static em_tensor *load_npy(const char *path) {
  em_tensor *t;
  char err[512];
  if (npy_load(path, &t, err, sizeof err) != NPY_OK) fail_msg("%s", err);
  return t;
}

static void model_file(const zoo_model *m, const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s/%s", zoo_dir, m->dir, name);
}

/* max|got - want| / max|want| over one output: shapes and dtype must match. */
static double relative_error(const zoo_model *m, int index, const em_tensor *got_any) {
  char p[1400], name[32];
  snprintf(name, sizeof name, "output_%d.npy", index);
  model_file(m, name, p, sizeof p);
  em_tensor *want = load_npy(p);
  if (em_tensor_dtype(got_any) != EM_F32 || em_tensor_dtype(want) != EM_F32)
    fail_msg("%s output %d: dtype %d, onnxruntime's %d (f32 expected)", m->dir, index, em_tensor_dtype(got_any),
             em_tensor_dtype(want));
  if (em_tensor_ndim(got_any) != em_tensor_ndim(want))
    fail_msg("%s output %d: rank %d, onnxruntime's %d", m->dir, index, em_tensor_ndim(got_any), em_tensor_ndim(want));
  for (int d = 0; d < em_tensor_ndim(want); d++)
    if (em_tensor_shape(got_any)[d] != em_tensor_shape(want)[d])
      fail_msg("%s output %d: dim %d is %lld, onnxruntime's %lld", m->dir, index, d,
               (long long)em_tensor_shape(got_any)[d], (long long)em_tensor_shape(want)[d]);
  size_t n = (size_t)em_tensor_numel(want);
  float *got = malloc(n * sizeof *got + 1);
  assert_non_null(got);
  if (em_tensor_to_host(got_any, got, n * sizeof *got)) fail_msg("%s", em_last_error());
  const float *w = em_tensor_data(want);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)got[i] - (double)w[i];
    if (e != e) fail_msg("%s output %d: element %zu is NaN (onnxruntime: %g)", m->dir, index, i, (double)w[i]);
    if (e < 0) e = -e;
    if (e > diff) diff = e;
    double a = w[i] < 0 ? -(double)w[i] : (double)w[i];
    if (a > scale) scale = a;
  }
  free(got);
  em_tensor_release(want);
  return diff / (scale > 0 ? scale : 1);
}

/* The bytes of an output on the host (malloc'd), for bitwise comparisons. */
static void *host_bytes(const em_tensor *t, size_t *size) {
  *size = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
  void *b = malloc(*size + 1);
  assert_non_null(b);
  if (em_tensor_to_host(t, b, *size)) fail_msg("%s", em_last_error());
  return b;
}

/* One model through the API on dev in mode: the largest relative error over
 * its outputs, or -1 when the load failed with EM_ERR_UNSUPPORTED (message in
 * why). Any other failure fails the test. With kept non-NULL, the outputs'
 * bytes (in onnxruntime's order) are left there for the caller to free. */
/* The model's fixed inputs (input_<i>.npy), named as the manifest names them. */
static void load_inputs(const zoo_model *m, em_named_tensor *in) {
  char p[1400];
  for (int i = 0; i < m->n_in; i++) {
    char name[32];
    snprintf(name, sizeof name, "input_%d.npy", i);
    model_file(m, name, p, sizeof p);
    in[i].name = m->in_names[i];
    in[i].value = load_npy(p);
  }
}

static double run_api(const zoo_model *m, em_device dev, em_onnx_mode mode, char *why, size_t cap, void **kept,
                      size_t *kept_size) {
  char p[1400];
  model_file(m, "model.onnx", p, sizeof p);
  em_onnx_options o = {.device = dev, .mode = mode};
  em_onnx *om;
  em_status s = em_onnx_load(p, &o, &om);
  if (s == EM_ERR_UNSUPPORTED) {
    snprintf(why, cap, "%s", em_last_error());
    return -1;
  }
  if (s) fail_msg("%s: load on %s: %s: %s", m->dir, dev.kind == EM_DEVICE_CPU ? "cpu" : "cuda:0", em_status_name(s),
                  em_last_error());
  em_named_tensor in[MAX_IO];
  load_inputs(m, in);
  if ((int)em_onnx_output_count(om) != m->n_out)
    fail_msg("%s: %zu outputs, onnxruntime %d", m->dir, em_onnx_output_count(om), m->n_out);
  em_tensor *out[MAX_IO] = {0};
  s = em_onnx_run(om, in, m->n_in, out);
  if (s) fail_msg("%s: run: %s: %s", m->dir, em_status_name(s), em_last_error());
  double worst = 0;
  for (int i = 0; i < m->n_out; i++) {
    /* em_onnx_run gives the outputs in the file's order: find each by name */
    size_t k;
    if (em_onnx_find_output(om, m->out_names[i], &k)) fail_msg("%s: %s", m->dir, em_last_error());
    double e = relative_error(m, i, out[k]);
    if (e > worst) worst = e;
    if (kept) kept[i] = host_bytes(out[k], &kept_size[i]);
  }
  for (int i = 0; i < m->n_out; i++) em_tensor_release(out[i]);
  for (int i = 0; i < m->n_in; i++) em_tensor_release(in[i].value);
  em_onnx_free(om);
  return worst;
}

/* ------------------------------------------------------- round trip --- */

static ts_ort_cases exports; /* the exported models, for onnxruntime (tests/support/ort_check.h) */

/* The opset of the model's default domain, for the export: the same (13 to
 * 20), so its forms are the ones the model used. */
static int model_opset(const em_onnx *om) {
  for (size_t i = 0; i < em_onnx_opset_count(om); i++) {
    const char *domain;
    int64_t v;
    if (!em_onnx_opset_get(om, i, &domain, &v) && (!domain[0] || !strcmp(domain, "ai.onnx")))
      return v < 13 ? 13 : v > 20 ? 20 : (int)v;
  }
  return 0;
}

/* Round trip of one model: loaded by Ember (portable mode, CPU), exported
 * by em_onnx_export_buffer, reloaded: the outputs must be bitwise those of
 * the first load. The exported model is kept for onnxruntime, whose outputs
 * on it must match the zoo's expected ones (onnxruntime's on the original)
 * within TOLERANCE (test_export_onnxruntime). 0, or 1 after print_error. */
static int export_round_trip(const zoo_model *m) {
  char p[1400];
  model_file(m, "model.onnx", p, sizeof p);
  em_onnx_options o = {.device = em_cpu(), .mode = EM_ONNX_MODE_PORTABLE};
  em_onnx *om, *back;
  if (em_onnx_load(p, &o, &om)) fail_msg("%s: load: %s", m->dir, em_last_error());
  em_named_tensor in[MAX_IO];
  em_tensor *want[MAX_IO], *got[MAX_IO], *all[MAX_IO], *expected[MAX_IO];
  em_var outs[MAX_IO];
  load_inputs(m, in);
  if (em_onnx_run(om, in, m->n_in, all)) fail_msg("%s: run: %s", m->dir, em_last_error());
  for (int i = 0; i < m->n_out; i++) {
    size_t k;
    em_onnx_io io;
    if (em_onnx_find_output(om, m->out_names[i], &k) || em_onnx_output_get(om, k, &io))
      fail_msg("%s: %s", m->dir, em_last_error());
    want[i] = all[k], outs[i] = io.var;
  }
  em_onnx_model_info info;
  if (em_onnx_get_info(om, &info)) fail_msg("%s: %s", m->dir, em_last_error());
  size_t n_original = info.n_nodes;
  void *bytes = NULL;
  size_t size = 0;
  em_onnx_export_options eo = {.opset = model_opset(om), .output_names = (const char *const[]){
      m->out_names[0], m->out_names[1], m->out_names[2], m->out_names[3], m->out_names[4], m->out_names[5],
      m->out_names[6], m->out_names[7]}};
  int bad = 0;
  if (em_onnx_export_buffer(em_onnx_graph_of(om), outs, m->n_out, &eo, &bytes, &size)) {
    print_error("%-24s export: %s\n", m->dir, em_last_error());
    bad = 1;
  } else if (em_onnx_load_buffer(bytes, size, m->dir, &o, &back)) {
    print_error("%-24s reload of the export: %s\n", m->dir, em_last_error());
    bad = 1;
  } else {
    if (em_onnx_get_info(back, &info)) fail_msg("%s: %s", m->dir, em_last_error());
    /* An input the outputs do not depend on is not exported. */
    em_named_tensor used[MAX_IO];
    int n_used = 0;
    size_t at;
    for (int i = 0; i < m->n_in; i++)
      if (!em_onnx_find_input(back, in[i].name, &at)) used[n_used++] = in[i];
    if (em_onnx_run(back, used, n_used, got)) fail_msg("%s: run of the export: %s", m->dir, em_last_error());
    for (int i = 0; i < m->n_out && !bad; i++) {
      size_t k, a, b;
      if (em_onnx_find_output(back, m->out_names[i], &k)) fail_msg("%s: %s", m->dir, em_last_error());
      void *x = host_bytes(got[k], &a), *y = host_bytes(want[i], &b);
      if (a != b || memcmp(x, y, a)) {
        print_error("%-24s export: output %d (%s) differs from the original's after the round trip\n", m->dir, i,
                    m->out_names[i]);
        bad = 1;
      }
      free(x), free(y);
    }
    for (int i = 0; i < m->n_out; i++) em_tensor_release(got[i]);
    if (!bad) {
      print_message("%-24s export: %zu ONNX nodes (the original %zu), reloaded bitwise equal\n", m->dir, info.n_nodes,
                    n_original);
      for (int i = 0; i < m->n_out; i++) {
        char name[32];
        snprintf(name, sizeof name, "output_%d.npy", i);
        model_file(m, name, p, sizeof p);
        expected[i] = load_npy(p);
      }
      ts_ort_keep(&exports, m->dir, NULL, TOLERANCE, bytes, size, used, n_used, expected, m->n_out);
      for (int i = 0; i < m->n_out; i++) em_tensor_release(expected[i]);
    }
    em_onnx_free(back);
  }
  free(bytes);
  for (int i = 0; i < m->n_out; i++) em_tensor_release(all[i]);
  for (int i = 0; i < m->n_in; i++) em_tensor_release(in[i].value);
  em_onnx_free(om);
  return bad;
}

static void check_api_on(em_device dev, const char *where) {
  int failures = 0;
  for (int i = 0; i < n_models; i++) {
    const zoo_model *m = &models[i];
    const expected_failure *x = expected_failure_of(m);
    char why[1024] = "";
    double e = run_api(m, dev, EM_ONNX_MODE_FAST, why, sizeof why, NULL, NULL);
    if (x) {
      if (e >= 0) {
        print_error("%-24s %s: loads now (max relative error %.2e): remove \"%s\" from expected_failures\n", m->dir,
                    where, e, x->model);
        failures++;
      } else if (!strstr(why, x->names)) {
        print_error("%-24s %s: expected to fail naming %s (%s), but: %s\n", m->dir, where, x->names, x->reason, why);
        failures++;
      } else {
        print_message("%-24s %s: expected failure (%s)\n", m->dir, where, x->reason);
      }
      continue;
    }
    if (e < 0) {
      print_error("%-24s %s: %s\n", m->dir, where, why);
      failures++;
      continue;
    }
    print_message("%-24s %s: max relative error %.2e\n", m->dir, where, e);
    if (e > TOLERANCE) {
      print_error("%-24s %s: max relative error %.2e above %.0e\n", m->dir, where, e, TOLERANCE);
      failures++;
    }
    if (dev.kind == EM_DEVICE_CPU) failures += export_round_trip(m);
  }
  if (failures) fail_msg("%d of %d zoo models failed on %s", failures, n_models, where);
}

/* What torch could not export (make_zoo.py leaves those out), for the log. */
static void print_export_notes(void) {
  char p[1100], line[512];
  snprintf(p, sizeof p, "%s/exporters.txt", zoo_dir);
  FILE *f = fopen(p, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) print_message("not in the zoo: %s", line);
  fclose(f);
}

static void test_api_cpu(void **state) {
  (void)state;
  NEED_ZOO();
  print_export_notes();
  check_api_on(em_cpu(), "api cpu");
}

/* The models test_api_cpu exported, through onnx.checker and onnxruntime:
 * onnxruntime's outputs on each must be the zoo's expected ones (its own on
 * the original model) within TOLERANCE of the output's scale. */
static void test_export_onnxruntime(void **state) {
  (void)state;
  NEED_ZOO();
  if (!exports.n) fail_msg("no exported model to check (test_api_cpu exports them)");
  ts_ort_check(&exports);
}

static void test_api_gpu(void **state) {
  (void)state;
  NEED_ZOO();
  if (!have_gpu) {
    print_message("SKIPPED: no GPU of the libcuda test double (FAKECUDA_LIB unset)\n");
    skip();
  }
  check_api_on(em_cuda(0), "api cuda:0");
}

/* Portable mode: every output bitwise the same on the CPU and the test
 * double's GPU (and still within TOLERANCE of onnxruntime). */
static void test_api_portable_bitwise(void **state) {
  (void)state;
  NEED_ZOO();
  if (!have_gpu) {
    print_message("SKIPPED: no GPU of the libcuda test double (FAKECUDA_LIB unset)\n");
    skip();
  }
  int failures = 0;
  for (int i = 0; i < n_models; i++) {
    const zoo_model *m = &models[i];
    if (expected_failure_of(m)) continue;
    void *cpu[MAX_IO], *gpu[MAX_IO];
    size_t cpu_size[MAX_IO], gpu_size[MAX_IO];
    char why[1024] = "";
    double ec = run_api(m, em_cpu(), EM_ONNX_MODE_PORTABLE, why, sizeof why, cpu, cpu_size);
    if (ec < 0) fail_msg("%s portable cpu: %s", m->dir, why);
    double eg = run_api(m, em_cuda(0), EM_ONNX_MODE_PORTABLE, why, sizeof why, gpu, gpu_size);
    if (eg < 0) fail_msg("%s portable cuda:0: %s", m->dir, why);
    int same = 1;
    for (int k = 0; k < m->n_out; k++) {
      if (cpu_size[k] != gpu_size[k] || memcmp(cpu[k], gpu[k], cpu_size[k])) {
        print_error("%-24s portable: output %d (%s) differs between cpu and cuda:0\n", m->dir, k, m->out_names[k]);
        same = 0;
      }
      free(cpu[k]);
      free(gpu[k]);
    }
    print_message("%-24s portable: max relative error %.2e, cpu and cuda:0 %s\n", m->dir, ec,
                  same ? "bitwise equal" : "DIFFER");
    if (!same || ec > TOLERANCE) failures++;
  }
  if (failures) fail_msg("%d of %d zoo models failed in portable mode", failures, n_models);
}

/* `ember run` of one model on device into its own folder: the exit status,
 * its stderr's first line in why. */
static int run_cli(const zoo_model *m, const char *device, char *outdir, size_t cap, char *why, size_t why_cap) {
  static int serial;
  const char *cli = getenv("EMBER_CLI");
  snprintf(outdir, cap, "%s/run%d", tmp_root, ++serial);
  char cmd[8192], p[1400];
  model_file(m, "model.onnx", p, sizeof p);
  int n = snprintf(cmd, sizeof cmd, "'%s' run '%s' --device %s --output-dir '%s'", cli, p, device, outdir);
  for (int i = 0; i < m->n_in; i++) {
    char name[32];
    snprintf(name, sizeof name, "input_%d.npy", i);
    model_file(m, name, p, sizeof p);
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --input '%s=%s'", m->in_names[i], p);
  }
  n += snprintf(cmd + n, sizeof cmd - (size_t)n, " >/dev/null 2>'%s.err'", outdir);
  assert_true((size_t)n < sizeof cmd);
  if (mkdir(outdir, 0755)) fail_msg("cannot make %s", outdir);
  int ws = system(cmd);
  snprintf(p, sizeof p, "%s.err", outdir);
  FILE *f = fopen(p, "r");
  why[0] = '\0';
  if (f) {
    if (!fgets(why, (int)why_cap, f)) why[0] = '\0';
    fclose(f);
  }
  return ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void check_cli_on(const char *device) {
  int failures = 0;
  for (int i = 0; i < n_models; i++) {
    const zoo_model *m = &models[i];
    const expected_failure *x = expected_failure_of(m);
    char dir[1100], why[1024];
    int rc = run_cli(m, device, dir, sizeof dir, why, sizeof why);
    if (x) {
      if (rc != 1) {
        print_error("%-24s ember run %s: exit %d, expected 1 (%s): %s\n", m->dir, device, rc, x->reason, why);
        failures++;
      }
      continue;
    }
    if (rc != 0) {
      print_error("%-24s ember run %s: exit %d: %s\n", m->dir, device, rc, why);
      failures++;
      continue;
    }
    double worst = 0;
    for (int k = 0; k < m->n_out; k++) {
      /* ember run names the file for the output (a name of letters and digits here) */
      char p[1400];
      snprintf(p, sizeof p, "%s/%s.npy", dir, m->out_names[k]);
      em_tensor *got = load_npy(p);
      double e = relative_error(m, k, got);
      em_tensor_release(got);
      if (e > worst) worst = e;
    }
    print_message("%-24s ember run %s: max relative error %.2e\n", m->dir, device, worst);
    if (worst > TOLERANCE) {
      print_error("%-24s ember run %s: max relative error %.2e above %.0e\n", m->dir, device, worst, TOLERANCE);
      failures++;
    }
  }
  if (failures) fail_msg("%d of %d zoo models failed in ember run --device %s", failures, n_models, device);
}

static void test_cli_cpu(void **state) {
  (void)state;
  NEED_ZOO();
  if (!getenv("EMBER_CLI")) {
    print_message("SKIPPED: EMBER_CLI (the ember tool) unset\n");
    skip();
  }
  check_cli_on("cpu");
}

static void test_cli_gpu(void **state) {
  (void)state;
  NEED_ZOO();
  if (!getenv("EMBER_CLI") || !have_gpu) {
    print_message("SKIPPED: EMBER_CLI unset or no GPU of the libcuda test double\n");
    skip();
  }
  check_cli_on("cuda:0");
}

int main(void) {
  /* The test double as an H100 where no real driver is chosen (gpu_double.h);
   * `ember run` inherits the variables. */
  have_gpu = ts_use_gpu() > 0;
  read_manifest();
  snprintf(tmp_root, sizeof tmp_root, "/tmp/ember_zoo_XXXXXX");
  if (!mkdtemp(tmp_root) || ts_ort_init(&exports, "ember_zoo_export")) {
    perror("mkdtemp");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_api_cpu),
      cmocka_unit_test(test_export_onnxruntime),
      cmocka_unit_test(test_api_gpu),
      cmocka_unit_test(test_api_portable_bitwise),
      cmocka_unit_test(test_cli_cpu),
      cmocka_unit_test(test_cli_gpu),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
  ts_ort_remove(&exports);
  em_shutdown();
  return rc;
}
