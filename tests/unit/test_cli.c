/* Tests of the `ember` command line ($EMBER_CLI) against the fake libcuda
 * ($FAKECUDA_LIB): each test runs the binary with popen under an environment
 * built on its command line (env -u ... VAR=value), and parses its JSON with
 * jansson. Without $EMBER_CLI or $FAKECUDA_LIB every test is skipped.
 *
 * Expected values come from outside the CLI: the kernel modules are the files
 * kernels/<module>.cu of the source tree ($EMBER_SRC_DIR); the build always embeds
 * clang's legacy compute_35 PTX and the source of every module (DESIGN.md,
 * "What the build embeds"); a K80 (CC 3.7) on an R470 driver (11040) has no
 * cubin (nvcc 13 starts at sm_75) and cannot JIT ISA 9.0 PTX (needs CUDA 13,
 * cuda-compat.md 1 note 3), so its plan is the legacy PTX; exit codes are
 * tools/ember's contract: 0 fine, 1 a check failed or EMBER_STRICT=1 refused
 * a fallback, 64 a usage error. */
#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <limits.h>
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
#include <jansson.h>
#include <zlib.h>

#include "fake_openblas.h"
#include "ember.h"
#include "onnx_reader.h"
#include "ort_check.h"

static const char *cli, *fake, *src_dir, *build_dir;
static char tmp_root[PATH_MAX];
static int serial;

/* The variables Ember and the fake read: unset unless a test sets them. */
static const char *const managed_vars[] = {
    "EMBER_LIBCUDA",    "EMBER_STRICT",         "EMBER_FORCE",        "EMBER_CACHE_DIR",
    "EMBER_LOG",        "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_PTX_JIT", "CUDA_VISIBLE_DEVICES",
    "FAKECUDA_DEVICES", "FAKECUDA_DRIVER",      "FAKECUDA_FAIL",      "FAKECUDA_STUB",
    "FAKECUDA_NO_JIT",  "FAKECUDA_MEM_MB"};

static int group_setup(void **state) {
  (void)state;
  cli = getenv("EMBER_CLI");
  fake = getenv("FAKECUDA_LIB");
  src_dir = getenv("EMBER_SRC_DIR");
  build_dir = getenv("EMBER_BUILD_DIR");
  if (!cli || !*cli || !fake || !*fake || !src_dir || !*src_dir || !build_dir || !*build_dir) {
    fprintf(stderr, "test_cli: EMBER_CLI, FAKECUDA_LIB, EMBER_SRC_DIR and EMBER_BUILD_DIR must be set (run through "
                    "build-tools/run_tests.sh): skipping every test\n");
    cli = NULL;
    return 0;
  }
  const char *t = getenv("TMPDIR");
  snprintf(tmp_root, sizeof tmp_root, "%s/ember-cli-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmp_root)) {
    fprintf(stderr, "test_cli: mkdtemp %s: %s\n", tmp_root, strerror(errno));
    return -1;
  }
  return 0;
}

static ts_ort_cases exports; /* exported models for onnxruntime (tests/support/ort_check.h) */

static int group_teardown(void **state) {
  (void)state;
  if (exports.root[0]) ts_ort_remove(&exports);
  if (tmp_root[0]) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "test_cli: could not remove %s\n", tmp_root);
  }
  return 0;
}

/* What a test allocated: freed by the teardown, also when an assertion
 * jumps out of the test (no leak reports under the sanitizers). */
static char *owned_text[256];
static json_t *owned_json[128];
static size_t n_text, n_json;

static char *own_text(char *p) {
  assert_non_null(p);
  assert_true(n_text < sizeof owned_text / sizeof owned_text[0]);
  return owned_text[n_text++] = p;
}

static json_t *own_json(json_t *j) {
  assert_true(n_json < sizeof owned_json / sizeof owned_json[0]);
  return owned_json[n_json++] = j;
}

static int free_owned(void **state) {
  (void)state;
  while (n_text) free(owned_text[--n_text]);
  while (n_json) json_decref(owned_json[--n_json]);
  return 0;
}

#define NEED_CLI()       \
  do {                   \
    if (!cli) skip();    \
  } while (0)

/* Appends s to the command in single quotes (a quote inside becomes '\''). */
static void append_quoted(char *cmd, size_t cap, const char *s) {
  size_t n = strlen(cmd);
  if (n + 1 < cap) cmd[n++] = '\'';
  for (; *s && n + 5 < cap; s++) {
    if (*s == '\'') {
      memcpy(cmd + n, "'\\''", 4);
      n += 4;
    } else {
      cmd[n++] = *s;
    }
  }
  if (n + 2 < cap) {
    cmd[n++] = '\'';
    cmd[n++] = ' ';
  }
  cmd[n] = '\0';
}

typedef struct run_result {
  int status;   /* exit status, or -1 if it did not exit normally */
  char *out;    /* stdout, malloc'd */
  char *err;    /* stderr, malloc'd */
} run_result;

static char *slurp(FILE *f) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    if (n + 1 >= cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    if (!got) break;
    n += got;
  }
  buf[n] = '\0';
  return buf;
}

/* Runs `ember ARGS...` with EMBER_LIBCUDA = the fake, a fresh EMBER_CACHE_DIR,
 * every other managed variable unset, then the settings ("NAME=value"). */
static run_result run_cli(const char *const *settings, const char *const *args) {
  char cmd[8192] = "env ";
  for (size_t i = 0; i < sizeof managed_vars / sizeof managed_vars[0]; i++) {
    strcat(cmd, "-u ");
    strcat(cmd, managed_vars[i]);
    strcat(cmd, " ");
  }
  char setting[PATH_MAX + 64];
  snprintf(setting, sizeof setting, "EMBER_LIBCUDA=%s", fake);
  append_quoted(cmd, sizeof cmd, setting);
  snprintf(setting, sizeof setting, "EMBER_CACHE_DIR=%s/cache%d", tmp_root, ++serial);
  append_quoted(cmd, sizeof cmd, setting);
  for (; *settings; settings++) append_quoted(cmd, sizeof cmd, *settings);
  append_quoted(cmd, sizeof cmd, cli);
  for (; *args; args++) append_quoted(cmd, sizeof cmd, *args);
  char errfile[PATH_MAX + 32];
  snprintf(errfile, sizeof errfile, "%s/stderr%d", tmp_root, serial);
  size_t n = strlen(cmd);
  snprintf(cmd + n, sizeof cmd - n, "2>'%s'", errfile);
  assert_true(strlen(cmd) + 1 < sizeof cmd);

  run_result r = {-1, NULL, NULL};
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  r.out = own_text(slurp(p));
  int ws = pclose(p);
  r.status = ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  FILE *e = fopen(errfile, "r");
  assert_non_null(e);
  r.err = own_text(slurp(e));
  fclose(e);
  return r;
}
#define SETTINGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_SETTINGS ((const char *const[]){NULL})

static json_t *parse(const run_result *r) {
  json_error_t e;
  json_t *j = json_loads(r->out, 0, &e);
  if (!j) fail_msg("not JSON (%s, line %d): %.400s\nstderr: %.400s", e.text, e.line, r->out, r->err);
  return own_json(j);
}

static void expect_status(const run_result *r, int want) {
  if (r->status != want)
    fail_msg("exit status %d, expected %d\nstdout: %.600s\nstderr: %.600s", r->status, want, r->out, r->err);
}

static const char *str_at(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) fail_msg("\"%s\" is not a string", key);
  return json_string_value(v);
}

static json_int_t int_at(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) fail_msg("\"%s\" is not an integer", key);
  return json_integer_value(v);
}

static json_t *array_at(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_array(v)) fail_msg("\"%s\" is not an array", key);
  return v;
}

/* The kernel modules: kernels/<module>.cu in the source tree. */
#define MAX_MODULES 64
typedef struct modules {
  char name[MAX_MODULES][64];
  size_t n;
} modules;

static void source_modules(modules *m) {
  char pattern[PATH_MAX];
  snprintf(pattern, sizeof pattern, "%s/kernels/*.cu", src_dir);
  glob_t g;
  assert_int_equal(glob(pattern, 0, NULL, &g), 0);
  memset(m, 0, sizeof *m);
  if (g.gl_pathc > MAX_MODULES) fail_msg("%zu kernel modules; this test holds %d", g.gl_pathc, MAX_MODULES);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    const char *base = strrchr(g.gl_pathv[i], '/') + 1;
    snprintf(m->name[m->n++], 64, "%.*s", (int)(strlen(base) - 3), base);
  }
  globfree(&g);
  assert_true(m->n > 0);
}

static int has_module(const modules *m, const char *name) {
  for (size_t i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) return 1;
  return 0;
}

static int is_path_name(const char *p) {
  static const char *const names[] = {"cubin", "ptx", "ptx-legacy", "nvrtc", "cpu", "none"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(p, names[i])) return 1;
  return 0;
}

/* Whether `ember images` lists a CUDA 11.x cubin for sm_<arch> of the module
 * (ptxas 11.8 makes sm_37, NVRTC 11.8 sm_90): a K80 or an H100 on a CUDA 11.x
 * or newer driver runs it (step 1; minor-version compatibility,
 * cuda-compat.md 2.2). On R470 (CUDA 11.4) no 12.x or 13.x cubin loads and
 * nvcc's PTX (ISA 9.0) needs CUDA 13, so without one it takes the legacy PTX. */
static int has_cubin_cuda11(const char *module, int arch) {
  run_result r = run_cli(NO_SETTINGS, ARGS("images", "--json"));
  expect_status(&r, 0);
  json_t *imgs = array_at(parse(&r), "images");
  for (size_t i = 0; i < json_array_size(imgs); i++) {
    json_t *img = json_array_get(imgs, i);
    if (!strcmp(str_at(img, "module"), module) && !strcmp(str_at(img, "kind"), "cubin") &&
        int_at(img, "arch") == arch && int_at(img, "toolkit") / 1000 == 11)
      return 1;
  }
  return 0;
}

/* ------------------------------------------------------------- devices --- */

#define FLEET "FAKECUDA_DEVICES=3.7=Tesla K80,9.0=NVIDIA H100 80GB HBM3"

static void test_devices_json_mixed_fleet(void **state) {
  (void)state;
  NEED_CLI();
  modules mods;
  source_modules(&mods);
  run_result r = run_cli(SETTINGS(FLEET, "FAKECUDA_DRIVER=11040"), ARGS("devices", "--json"));
  expect_status(&r, 0);
  json_t *root = parse(&r);
  assert_string_equal(str_at(root, "schema"), "ember.devices/1");
  json_t *drv = json_object_get(root, "driver");
  assert_true(json_is_object(drv));
  assert_string_equal(str_at(drv, "state"), "ok");
  assert_int_equal(int_at(drv, "version"), 11040);
  assert_true(json_is_array(json_object_get(root, "libraries")));
  json_t *devs = array_at(root, "devices");
  assert_int_equal(json_array_size(devs), 2);
  static const struct { const char *name; int major, minor; } want[] = {{"Tesla K80", 3, 7},
                                                                        {"NVIDIA H100 80GB HBM3", 9, 0}};
  for (size_t d = 0; d < 2; d++) {
    json_t *dev = json_array_get(devs, d);
    assert_int_equal(int_at(dev, "ordinal"), (json_int_t)d);
    assert_string_equal(str_at(dev, "name"), want[d].name);
    assert_int_equal(int_at(dev, "cc_major"), want[d].major);
    assert_int_equal(int_at(dev, "cc_minor"), want[d].minor);
    json_t *plans = array_at(dev, "plans");
    /* One plan per module, each module once. */
    assert_int_equal(json_array_size(plans), mods.n);
    for (size_t m = 0; m < json_array_size(plans); m++) {
      json_t *p = json_array_get(plans, m);
      const char *module = str_at(p, "module");
      if (!has_module(&mods, module)) fail_msg("plan for unknown module '%s'", module);
      for (size_t k = 0; k < m; k++) assert_string_not_equal(str_at(json_array_get(plans, k), "module"), module);
      const char *path = str_at(p, "path");
      assert_true(is_path_name(path));
      assert_true(strlen(str_at(p, "reason")) > 0);
      assert_true(json_array_size(array_at(p, "candidates")) > 0);
      const char *want_path = has_cubin_cuda11(module, d == 0 ? 37 : 90) ? "cubin" : "ptx-legacy";
      if (strcmp(path, want_path))
        fail_msg("%s on R470, module %s: path %s (%s), expected %s", want[d].name, module, path, str_at(p, "reason"),
                 want_path);
    }
  }
}

static void test_devices_text(void **state) {
  (void)state;
  NEED_CLI();
  run_result r = run_cli(SETTINGS(FLEET, "FAKECUDA_DRIVER=11040"), ARGS("devices"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.out, "Tesla K80"));
  assert_non_null(strstr(r.out, "NVIDIA H100 80GB HBM3"));
  /* The paths test_devices_json_mixed_fleet expects, as the text shows them. */
  int cubins = 0, legacy = 0;
  modules mods;
  source_modules(&mods);
  for (size_t m = 0; m < mods.n; m++)
    for (int arch = 37; arch; arch = arch == 37 ? 90 : 0) {
      if (has_cubin_cuda11(mods.name[m], arch)) cubins++;
      else legacy++;
    }
  assert_true(!cubins == !strstr(r.out, "-> cubin"));
  assert_true(!legacy == !strstr(r.out, "-> ptx-legacy"));
}

static void test_devices_without_driver(void **state) {
  (void)state;
  NEED_CLI();
  char missing[PATH_MAX + 32];
  snprintf(missing, sizeof missing, "EMBER_LIBCUDA=%s/none/libcuda.so.1", tmp_root);
  run_result r = run_cli(SETTINGS(missing), ARGS("devices", "--json"));
  expect_status(&r, 0); /* no GPU is not an error: the CPU runs everything */
  json_t *root = parse(&r);
  assert_string_equal(str_at(json_object_get(root, "driver"), "state"), "not-found");
  assert_int_equal(json_array_size(array_at(root, "devices")), 0);
}

/* ember devices names the CPU's BLAS and how its kernels were chosen; a
 * core type the user sets in OPENBLAS_CORETYPE is the one OpenBLAS runs
 * (ops/blas.c sets its own only where the variable is unset). */
static void test_devices_cpu_blas(void **state) {
  (void)state;
  NEED_CLI();
  char missing[PATH_MAX + 32];
  snprintf(missing, sizeof missing, "EMBER_LIBCUDA=%s/none/libcuda.so.1", tmp_root);
  run_result r = run_cli(SETTINGS(missing, "OPENBLAS_CORETYPE=Haswell"), ARGS("devices", "--json"));
  expect_status(&r, 0);
  json_t *root = parse(&r);
  const char *blas = str_at(root, "cpu_blas");
  assert_non_null(strstr(blas, "core Haswell (OPENBLAS_CORETYPE=Haswell)"));
  r = run_cli(SETTINGS(missing), ARGS("devices"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.out, "\ncpu blas: OpenBLAS"));
  assert_non_null(strstr(r.out, ", core "));
}

/* ember devices says what runs the CPU's convolutions: oneDNN where libdnnl.so.2 loads (this
 * process tries it itself), and why not where it is switched off. */
static void test_devices_cpu_convolution(void **state) {
  (void)state;
  NEED_CLI();
  char missing[PATH_MAX + 32];
  snprintf(missing, sizeof missing, "EMBER_LIBCUDA=%s/none/libcuda.so.1", tmp_root);
  void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  run_result r = run_cli(SETTINGS(missing), ARGS("devices", "--json"));
  expect_status(&r, 0);
  const char *conv = str_at(parse(&r), "cpu_convolution");
  if (lib ? strncmp(conv, "oneDNN 2.", 9) != 0 : strncmp(conv, "not used: ", 10) != 0)
    fail_msg("cpu_convolution with libdnnl.so.2 %s: %s", lib ? "loadable" : "absent", conv);
  if (lib) dlclose(lib);
  r = run_cli(SETTINGS(missing, "EMBER_DNNL=0"), ARGS("devices"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.out, "\ncpu convolution: not used: switched off (EMBER_DNNL=0)\n"));
}

/* An OpenBLAS that cannot be loaded: the message gives the reason of the library Ember asks
 * for first (here libopenblas.so.0 is not ELF), not that of the fallback name tried after it
 * (here an empty libopenblas.so), which would send a user after the wrong file. */
static void test_devices_cpu_blas_load_error(void **state) {
  (void)state;
  NEED_CLI();
  char dir[PATH_MAX + 16], libpath[PATH_MAX + 48];
  snprintf(dir, sizeof dir, "%s/badblas", tmp_root);
  assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
  assert_int_equal(ts_write_unloadable_openblas(dir), 0);
  snprintf(libpath, sizeof libpath, "LD_LIBRARY_PATH=%s", dir);
  run_result r = run_cli(SETTINGS(libpath), ARGS("devices", "--json"));
  expect_status(&r, 0);
  json_t *root = parse(&r);
  const char *blas = str_at(root, "cpu_blas");
  if (!strstr(blas, "not loaded: ") || !strstr(blas, "libopenblas.so.0: invalid ELF header"))
    fail_msg("cpu_blas: %s", blas);
}

static void test_devices_strict_refusal(void **state) {
  (void)state;
  NEED_CLI();
  /* What the plans say, without strict: their reasons. R418 (CUDA 10.1) loads
   * no CUDA 11.x cubin, and the JIT is off: every module ends on the CPU. */
  run_result plain = run_cli(
      SETTINGS("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", "CUDA_DISABLE_PTX_JIT=1"),
      ARGS("devices", "--json"));
  expect_status(&plain, 0);
  json_t *root = parse(&plain);
  json_t *plans = array_at(json_array_get(array_at(root, "devices"), 0), "plans");
  assert_true(json_array_size(plans) > 0);
  for (int json = 0; json < 2; json++) {
    run_result r = run_cli(
        SETTINGS("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", "CUDA_DISABLE_PTX_JIT=1", "EMBER_STRICT=1"),
        json ? ARGS("devices", "--json") : ARGS("devices"));
    expect_status(&r, 1);
    assert_non_null(strstr(r.err, "EMBER_STRICT"));
    /* Each refused plan's reason is on stderr, where a script sees it. */
    for (size_t m = 0; m < json_array_size(plans); m++) {
      json_t *p = json_array_get(plans, m);
      assert_string_equal(str_at(p, "path"), "cpu");
      if (!strstr(r.err, str_at(p, "reason")))
        fail_msg("stderr does not give the reason \"%s\": %s", str_at(p, "reason"), r.err);
    }
  }
}

/* -------------------------------------------------------------- images --- */

static void test_images_json(void **state) {
  (void)state;
  NEED_CLI();
  modules mods;
  source_modules(&mods);
  run_result r = run_cli(NO_SETTINGS, ARGS("images", "--json"));
  expect_status(&r, 0);
  json_t *root = parse(&r);
  assert_string_equal(str_at(root, "schema"), "ember.images/1");
  json_t *imgs = array_at(root, "images");
  assert_int_equal(int_at(root, "count"), (json_int_t)json_array_size(imgs));
  for (size_t m = 0; m < mods.n; m++) {
    int legacy = 0, source = 0;
    for (size_t i = 0; i < json_array_size(imgs); i++) {
      json_t *img = json_array_get(imgs, i);
      if (strcmp(str_at(img, "module"), mods.name[m])) continue;
      const char *kind = str_at(img, "kind");
      if (!strcmp(kind, "ptx") && json_is_true(json_object_get(img, "legacy")) && int_at(img, "arch") == 35) {
        legacy = 1;
        assert_true(strlen(str_at(img, "kernels")) > 0);
      }
      if (!strcmp(kind, "source")) source = 1;
    }
    if (!legacy) fail_msg("module %s: no legacy compute_35 PTX listed", mods.name[m]);
    if (!source) fail_msg("module %s: no source listed", mods.name[m]);
  }
  for (size_t i = 0; i < json_array_size(imgs); i++) {
    json_t *img = json_array_get(imgs, i);
    assert_int_equal(int_at(img, "index"), (json_int_t)i);
    assert_true(int_at(img, "size") > 0);
    assert_int_equal(strlen(str_at(img, "hash")), 16);
  }
}

static void test_images_of_file_equal_own_table(void **state) {
  (void)state;
  NEED_CLI();
  char lib[PATH_MAX];
  snprintf(lib, sizeof lib, "%s/lib/libember.so", build_dir);
  run_result own = run_cli(NO_SETTINGS, ARGS("images", "--json"));
  run_result file = run_cli(NO_SETTINGS, ARGS("images", "--file", lib, "--json"));
  run_result file2 = run_cli(NO_SETTINGS, ARGS("images", "--json", "--file", lib));
  expect_status(&own, 0);
  expect_status(&file, 0);
  expect_status(&file2, 0);
  json_t *a = parse(&own), *b = parse(&file), *c = parse(&file2);
  assert_true(json_array_size(array_at(a, "images")) > 0);
  if (!json_equal(a, b)) fail_msg("the table read from %s differs from the loaded library's", lib);
  assert_true(json_equal(b, c));
}

static void test_images_of_non_ember_file(void **state) {
  (void)state;
  NEED_CLI();
  run_result r = run_cli(NO_SETTINGS, ARGS("images", "--file", "/bin/ls"));
  assert_true(r.status != 0 && r.status != -1);
  assert_non_null(strstr(r.err, "/bin/ls"));
  assert_non_null(strstr(r.err, "not an Ember library"));
  char missing[PATH_MAX + 16];
  snprintf(missing, sizeof missing, "%s/none.so", tmp_root);
  r = run_cli(NO_SETTINGS, ARGS("images", "--file", missing, "--json"));
  assert_true(r.status != 0 && r.status != -1);
  assert_non_null(strstr(r.err, missing));
}

/* ------------------------------------------------------------ selftest --- */

static void test_selftest_through_fake(void **state) {
  (void)state;
  NEED_CLI();
  modules mods;
  source_modules(&mods);
  run_result r = run_cli(SETTINGS("FAKECUDA_DEVICES=3.7=Tesla K80,8.6,9.0", "FAKECUDA_DRIVER=13000",
                                  "EMBER_SELFTEST_SEED=7"),
                         ARGS("selftest", "--json"));
  expect_status(&r, 0);
  json_t *root = parse(&r);
  assert_string_equal(str_at(root, "schema"), "ember.selftest/1");
  assert_int_equal(int_at(root, "failures"), 0);
  assert_int_equal(int_at(root, "seed"), 7);
  assert_true(json_is_true(json_object_get(root, "kernels_run"))); /* the double runs every kernel */
  json_t *devs = array_at(root, "devices");
  assert_int_equal(json_array_size(devs), 3);
  for (size_t d = 0; d < 3; d++) {
    json_t *results = array_at(json_array_get(devs, d), "results");
    int seen[MAX_MODULES] = {0};
    for (size_t i = 0; i < json_array_size(results); i++) {
      json_t *res = json_array_get(results, i);
      assert_true(json_is_true(json_object_get(res, "ok")));
      assert_true(json_is_true(json_object_get(res, "ran"))); /* compared with the CPU bit for bit */
      const char *path = str_at(res, "path");
      /* Loaded on the GPU (through the fake), not sent to the CPU. */
      if (!strcmp(path, "cpu") || !strcmp(path, "none"))
        fail_msg("device %zu %s: path %s (%s)", d, str_at(res, "kernel"), path, str_at(res, "error"));
      const char *module = str_at(res, "module");
      for (size_t m = 0; m < mods.n; m++) seen[m] |= !strcmp(mods.name[m], module);
    }
    for (size_t m = 0; m < mods.n; m++)
      if (!seen[m]) fail_msg("device %zu: module %s was not loaded", d, mods.name[m]);
  }
  /* The K80 on R580 takes the CUDA 11.x sm_37 cubin when the build has one,
   * else the legacy PTX through the driver's JIT. */
  json_t *k80 = array_at(json_array_get(devs, 0), "results");
  for (size_t i = 0; i < json_array_size(k80); i++) {
    json_t *res = json_array_get(k80, i);
    assert_string_equal(str_at(res, "path"), has_cubin_cuda11(str_at(res, "module"), 37) ? "cubin" : "ptx-legacy");
  }

  r = run_cli(SETTINGS("FAKECUDA_DEVICES=8.6"), ARGS("selftest"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.out, "0 failures"));
}

/* Every kernel through every path, each forced in turn (EMBER_FORCE, with
 * EMBER_STRICT=1 so nothing falls back), on a fake fleet chosen from this
 * build's own image table: a GPU of every SM a cubin targets, of every arch
 * of nvcc's PTX and one between them, a spread for the legacy PTX, and for
 * NVRTC every SM from Kepler to Blackwell (those the NVRTCs found support).
 * The self-test compares every result with the CPU twin bit for bit. */
typedef struct fleet {
  char devices[512];
  int n;
} fleet;

static void fleet_add(fleet *f, int cc) {
  for (const char *p = f->devices; *p;) { /* once each */
    int major, minor;
    if (sscanf(p, "%d.%d", &major, &minor) == 2 && major * 10 + minor == cc) return;
    p = strchr(p, ',');
    p = p ? p + 1 : "";
  }
  size_t n = strlen(f->devices);
  snprintf(f->devices + n, sizeof f->devices - n, "%s%d.%d", n ? "," : "", cc / 10, cc % 10);
  f->n++;
}

/* The NVRTCs of the project's tools folder (build-tools/pypi_tools.sh), for
 * EMBER_NVRTC: NVRTC 11.8 is the one that still targets Kepler. */
static void tools_nvrtc(char *out, size_t cap) {
  char pattern[PATH_MAX];
  snprintf(pattern, sizeof pattern, "%s/.tools/nvrtc-*/nvidia/cuda_nvrtc/lib/libnvrtc.so.[0-9]*", src_dir);
  glob_t g;
  out[0] = '\0';
  if (glob(pattern, 0, NULL, &g) != 0) return;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    size_t n = strlen(out);
    snprintf(out + n, cap - n, "%s%s", n ? ":" : "", g.gl_pathv[i]);
  }
  globfree(&g);
}

/* The cubin that step 1 runs for `module` on CC cc with a driver of CUDA
 * version `driver`, from the image table (`ember images --json`): a plain cubin
 * for exactly this SM that the driver loads (from CUDA 11 on, any driver of
 * the toolkit's major or later: minor-version compatibility, cuda-compat.md
 * 2.2; before, a driver of at least the toolkit), and of those the one from
 * the newest toolkit (DESIGN.md, the selection policy). Its index, or -1. */
static int expected_cubin(json_t *imgs, const char *module, int cc, int driver) {
  int best = -1;
  json_int_t best_tk = -1;
  for (size_t i = 0; i < json_array_size(imgs); i++) {
    json_t *img = json_array_get(imgs, i);
    if (strcmp(str_at(img, "kind"), "cubin") || *str_at(img, "variant") || strcmp(str_at(img, "module"), module) ||
        int_at(img, "arch") != cc)
      continue;
    json_int_t tk = int_at(img, "toolkit");
    if ((tk >= 11000 ? tk / 1000 * 1000 : tk) > driver) continue;
    if (tk > best_tk) best = (int)int_at(img, "index"), best_tk = tk;
  }
  return best;
}

/* Runs the self-test with one path forced on a driver of CUDA version
 * `driver`; returns the devices on which the path ran every kernel (all of
 * them bit-exact), and fails on anything else except, when `may_be_unviable`,
 * a device no candidate of the path fits. With `imgs` (the image table) every
 * module must have run the cubin expected_cubin() names. */
/* NVRTC compiles every module for every SM of a fleet for real (about 90 s of
 * CPU for all 14 modules on one SM): the fleets of many SMs run the four
 * primitive modules only, and one SM runs them all (EMBER_SELFTEST_MODULES). */
static const char *g_selftest_modules = "EMBER_SELFTEST_MODULES=";
static int selftest_forced(const char *path, const fleet *f, const char *nvrtc, int may_be_unviable, int driver,
                           json_t *imgs) {
  char devs[600], force[64], nv[PATH_MAX * 4], drv[64];
  snprintf(devs, sizeof devs, "FAKECUDA_DEVICES=%s", f->devices);
  snprintf(force, sizeof force, "EMBER_FORCE=%s", path);
  snprintf(nv, sizeof nv, "EMBER_NVRTC=%s", nvrtc);
  snprintf(drv, sizeof drv, "FAKECUDA_DRIVER=%d", driver);
  run_result r = run_cli(SETTINGS(devs, drv, force, "EMBER_STRICT=1", nv, g_selftest_modules), ARGS("selftest", "--json"));
  json_t *root = parse(&r);
  assert_true(json_is_true(json_object_get(root, "kernels_run")));
  json_t *devices = array_at(root, "devices");
  assert_int_equal((int)json_array_size(devices), f->n);
  int ran_all = 0;
  for (size_t d = 0; d < json_array_size(devices); d++) {
    json_t *dev = json_array_get(devices, d), *results = array_at(dev, "results");
    size_t ok = 0, unviable = 0;
    for (size_t i = 0; i < json_array_size(results); i++) {
      json_t *res = json_array_get(results, i);
      int good = json_is_true(json_object_get(res, "ok")) && json_is_true(json_object_get(res, "ran")) &&
                 !strcmp(str_at(res, "path"), path);
      char no_candidate[64];
      snprintf(no_candidate, sizeof no_candidate, "no %s candidate", path);
      if (good) ok++;
      else if (may_be_unviable && strstr(str_at(res, "error"), no_candidate)) unviable++;
      else
        fail_msg("EMBER_FORCE=%s, %s (CC %d.%d), %s: path %s, mismatches %d: %s (FAKECUDA_SEED in stderr: %.300s)", path,
                 str_at(dev, "name"), (int)int_at(dev, "cc_major"), (int)int_at(dev, "cc_minor"), str_at(res, "kernel"),
                 str_at(res, "path"), (int)int_at(res, "mismatches"), str_at(res, "error"), r.err);
      if (good && imgs) {
        int cc = (int)(int_at(dev, "cc_major") * 10 + int_at(dev, "cc_minor"));
        int want = expected_cubin(imgs, str_at(res, "module"), cc, driver);
        if (int_at(res, "image") != want)
          fail_msg("driver %d, CC %d.%d, %s: ran image %d, expected image %d (the newest toolkit's sm_%d cubin this "
                   "driver loads)", driver, cc / 10, cc % 10, str_at(res, "kernel"), (int)int_at(res, "image"), want, cc);
      }
    }
    if (unviable && ok)
      fail_msg("EMBER_FORCE=%s, CC %d.%d: some modules ran and others had no candidate", path,
               (int)int_at(dev, "cc_major"), (int)int_at(dev, "cc_minor"));
    ran_all += ok == json_array_size(results) && ok > 0;
  }
  return ran_all;
}

static void test_selftest_every_path_through_fake(void **state) {
  (void)state;
  NEED_CLI();
  run_result r = run_cli(NO_SETTINGS, ARGS("images", "--json"));
  expect_status(&r, 0);
  json_t *imgs = array_at(parse(&r), "images");
  fleet cubin = {"", 0}, ptx = {"", 0}, legacy = {"", 0}, nvrtc = {"", 0};
  for (size_t i = 0; i < json_array_size(imgs); i++) {
    json_t *img = json_array_get(imgs, i);
    const char *kind = str_at(img, "kind"), *variant = str_at(img, "variant");
    int arch = (int)int_at(img, "arch"), is_legacy = json_is_true(json_object_get(img, "legacy"));
    if (!strcmp(kind, "cubin") && !*variant) fleet_add(&cubin, arch);
    if (!strcmp(kind, "ptx") && !*variant && !is_legacy) fleet_add(&ptx, arch);
  }
  if (ptx.n >= 2) fleet_add(&ptx, 90); /* between nvcc's two PTX arches: JITs the older one */
  /* Cubins of one SM from several toolkits (nvcc 13.0, NVRTC 12.9, NVRTC 11.8):
   * on R580 the newest runs; on R535 (CUDA 12.2) and R470 (CUDA 11.4) the
   * newest the driver loads. Each older driver's fleet is made of the SMs where
   * that is another cubin than on R580, so every toolkit's cubins run. */
  static const int older[] = {12020, 11040};
  fleet by_driver[2] = {{"", 0}, {"", 0}};
  modules mods;
  source_modules(&mods);
  for (size_t d = 0; d < 2; d++)
    for (size_t i = 0; i < json_array_size(imgs); i++) {
      json_t *img = json_array_get(imgs, i);
      if (strcmp(str_at(img, "kind"), "cubin") || *str_at(img, "variant")) continue;
      int arch = (int)int_at(img, "arch");
      for (size_t m = 0; m < mods.n; m++) {
        int then = expected_cubin(imgs, mods.name[m], arch, older[d]);
        if (then >= 0 && then != expected_cubin(imgs, mods.name[m], arch, 13000)) fleet_add(&by_driver[d], arch);
      }
    }
  static const int spread[] = {35, 52, 61, 86, 120};
  for (size_t i = 0; i < sizeof spread / sizeof spread[0]; i++) fleet_add(&legacy, spread[i]);
  static const int every[] = {35, 37, 50, 52, 60, 61, 70, 75, 80, 86, 89, 90, 100, 120};
  for (size_t i = 0; i < sizeof every / sizeof every[0]; i++) fleet_add(&nvrtc, every[i]);
  char nv[PATH_MAX * 4];
  tools_nvrtc(nv, sizeof nv);

  /* The build always embeds clang's legacy PTX. */
  assert_int_equal(selftest_forced("ptx-legacy", &legacy, nv, 0, 13000, NULL), legacy.n);
  if (cubin.n) assert_int_equal(selftest_forced("cubin", &cubin, nv, 0, 13000, imgs), cubin.n);
  else fprintf(stderr, "test_cli: no cubin in this build (no CUDA compiler): the cubin path is not run\n");
  for (size_t d = 0; d < 2; d++) {
    if (by_driver[d].n) assert_int_equal(selftest_forced("cubin", &by_driver[d], nv, 0, older[d], imgs), by_driver[d].n);
    else fprintf(stderr, "test_cli: no cubin that a CUDA %d.%d driver runs instead of R580's: not run\n",
                 older[d] / 1000, older[d] % 1000 / 10);
  }
  if (ptx.n) assert_int_equal(selftest_forced("ptx", &ptx, nv, 0, 13000, NULL), ptx.n);
  else fprintf(stderr, "test_cli: no nvcc PTX in ptx/: the ptx path is not run\n");
  g_selftest_modules = "EMBER_SELFTEST_MODULES=elementwise,reduce,transpose,math";
  int ran = selftest_forced("nvrtc", &nvrtc, nv, 1, 13000, NULL);
  g_selftest_modules = "EMBER_SELFTEST_MODULES=";
  if (ran) {
    fleet h100 = {"", 0};
    fleet_add(&h100, 90);
    assert_int_equal(selftest_forced("nvrtc", &h100, nv, 0, 13000, NULL), 1);
  }
  if (!ran) fprintf(stderr, "test_cli: no NVRTC found (none on the loader path, none in .tools/): the nvrtc path is not run\n");
  /* NVRTC 11.8 of the tools folder still targets Kepler. */
  if (strstr(nv, "libnvrtc.so.11")) {
    fleet k80 = {"", 0};
    fleet_add(&k80, 37);
    g_selftest_modules = "EMBER_SELFTEST_MODULES=elementwise,reduce,transpose,math";
    assert_int_equal(selftest_forced("nvrtc", &k80, nv, 0, 13000, NULL), 1);
    g_selftest_modules = "EMBER_SELFTEST_MODULES=";
  }
}

/* --------------------------------------------------------------- usage --- */

/* `ember ops --json` lists the core ops the engine relies on, with the
 * arity and gradient flags of their definitions and where they run (gpu),
 * and hides internal ones. */
static void test_ops_json(void **state) {
  (void)state;
  NEED_CLI();
  run_result r = run_cli(NO_SETTINGS, ARGS("ops", "--json"));
  expect_status(&r, 0);
  json_t *root = parse(&r);
  assert_string_equal(str_at(root, "schema"), "ember.ops/1");
  json_t *ops = array_at(root, "ops"), *op;
  size_t i;
  int saw_add_n = 0, saw_zeros_like = 0;
  /* An op runs on the GPU only through the launch glue of its family
   * (ops/<family>_gpu.c, DESIGN.md): with none in the tree, no op may claim it. */
  char pattern[PATH_MAX];
  snprintf(pattern, sizeof pattern, "%s/ops/*_gpu.c", src_dir ? src_dir : ".");
  glob_t g;
  int any_glue = glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  json_array_foreach(ops, i, op) {
    const char *name = str_at(op, "name");
    assert_true(name[0] != '_');
    json_t *gpu = json_object_get(op, "gpu");
    if (!json_is_boolean(gpu)) fail_msg("op %s: \"gpu\" is not a boolean", name);
    if (!any_glue && json_is_true(gpu)) fail_msg("op %s claims a GPU implementation, but ops/ has no *_gpu.c", name);
    if (!strcmp(name, "add_n")) {
      saw_add_n = 1;
      assert_int_equal(int_at(op, "min_inputs"), 1);
      assert_int_equal(int_at(op, "max_inputs"), 16);
      assert_true(json_is_true(json_object_get(op, "differentiable")));
    }
    if (!strcmp(name, "zeros_like")) {
      saw_zeros_like = 1;
      assert_true(json_is_false(json_object_get(op, "differentiable")));
    }
  }
  assert_true(saw_add_n && saw_zeros_like);
}

static void test_usage_errors(void **state) {
  (void)state;
  NEED_CLI();
  const char *const *const bad[] = {
      (const char *const[]){NULL},
      (const char *const[]){"bogus", NULL},
      (const char *const[]){"devices", "--bogus", NULL},
      (const char *const[]){"devices", "--file", "x", NULL},
      (const char *const[]){"images", "--file", NULL},
      (const char *const[]){"selftest", "extra", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    run_result r = run_cli(NO_SETTINGS, bad[i]);
    if (r.status != 64) fail_msg("case %zu: exit status %d, expected 64 (stderr: %s)", i, r.status, r.err);
    assert_non_null(strstr(r.err, "usage"));
  }
}


/* --help on every command: exit 0, the usage on stdout, nothing on stderr. */
static void test_help_on_every_command(void **state) {
  (void)state;
  NEED_CLI();
  static const struct { const char *cmd, *want; } cases[] = {
      {"devices", "usage: ember devices"}, {"images", "usage: ember images"},  {"selftest", "usage: ember selftest"},
      {"ops", "usage: ember ops"},         {"train", "usage: ember train"},    {"eval", "usage: ember eval"},
      {"checkpoint", "usage: ember checkpoint"}, {"export", "usage: ember export"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_result r = run_cli(NO_SETTINGS, ARGS(cases[i].cmd, "--help"));
    expect_status(&r, 0);
    if (!strstr(r.out, cases[i].want)) fail_msg("ember %s --help: no \"%s\" in %.300s", cases[i].cmd, cases[i].want, r.out);
    assert_string_equal(r.err, "");
  }
  run_result r = run_cli(NO_SETTINGS, ARGS("--help"));
  expect_status(&r, 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) assert_non_null(strstr(r.out, cases[i].cmd));
  assert_non_null(strstr(r.out, "Exit codes"));
  /* train's help lists the options the issue names, and the exit codes. */
  r = run_cli(NO_SETTINGS, ARGS("train", "--help"));
  static const char *const opts[] = {"--model", "--data", "--epochs", "--batch", "--device", "--mode",
                                     "--checkpoint", "--resume", "--json", "--learner", "--lr", "Exit codes"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    if (!strstr(r.out, opts[i])) fail_msg("ember train --help does not mention %s", opts[i]);
}

/* Bad command lines of train and eval: the documented exit code (64 usage,
 * 69 device) and a message naming what is wrong, before any data is read. */
static void test_train_usage_errors(void **state) {
  (void)state;
  NEED_CLI();
  static const struct {
    const char *const args[8];
    int status;
    const char *want;
  } cases[] = {
      {{"train", "--epochs", "0"}, 64, "--epochs 0: out of range"},
      {{"train", "--epochs", "two"}, 64, "--epochs two: not a number"},
      {{"train", "--batch", "1.5"}, 64, "--batch 1.5: not a whole number"},
      {{"train", "--model", "vgg"}, 64, "--model vgg: not one of mlp, lenet, resnet20"},
      {{"train", "--learner", "adamax"}, 64, "--learner adamax: not one of"},
      {{"train", "--mode", "exact"}, 64, "--mode exact: not one of fast, portable"},
      {{"train", "--bogus"}, 64, "unknown option --bogus"},
      {{"train", "--lr"}, 64, "--lr needs a value"},
      {{"train", "--resume"}, 64, "--resume needs --checkpoint"},
      {{"train", "--patience", "3"}, 64, "--patience needs --validation"},
      /* momentum the learner has not: it trained plain SGD (PyTorch's
       * SGD(momentum=0.9) is --learner momentum); refused before the data
       * are read (else: 66) */
      {{"train", "--learner", "sgd", "--momentum", "0.9", "--data", "/nonexistent"},
       64,
       "--momentum 0.9: the sgd learner has no momentum"},
      {{"train", "--momentum", "0.5", "--learner", "rmsprop", "--data", "/nonexistent"},
       64,
       "the rmsprop learner has no momentum"},
      {{"train", "--json=1"}, 64, "--json takes no value"},
      {{"train", "--device", "gpu"}, 64, "--device gpu: expected auto, cpu or cuda:N"},
      {{"train", "--device", "cuda:x"}, 64, "--device cuda:x: expected auto, cpu or cuda:N"},
      {{"train", "--device", "cuda:3"}, 69, "--device cuda:3"},
      {{"eval"}, 64, "--checkpoint FILE is required"},
      {{"eval", "--checkpoint", "x", "--epochs", "3"}, 64, "--epochs is not an option of this command"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_result r = run_cli(SETTINGS("FAKECUDA_DEVICES=9.0=NVIDIA H100 80GB HBM3"), cases[i].args);
    if (r.status != cases[i].status)
      fail_msg("case %zu (%s %s): exit status %d, expected %d (stderr: %s)", i, cases[i].args[0],
               cases[i].args[1] ? cases[i].args[1] : "", r.status, cases[i].status, r.err);
    if (!strstr(r.err, cases[i].want)) fail_msg("case %zu: no \"%s\" in stderr: %s", i, cases[i].want, r.err);
  }
}

/* ------------------------------------------------------- ember train --- */

#define FMNIST "/usr/share/datasets/fashion-mnist"

/* A small IDX data set in DIR: the first n_train training and n_test test
 * images of Fashion-MNIST, uncompressed, with headers written here (read
 * with zlib, not with Ember's reader). 0 when the package is missing. */
static int copy_idx(const char *from, const char *to, int n, int image) {
  gzFile in = gzopen(from, "rb");
  if (!in) return 0;
  int header = image ? 16 : 8, per = image ? 28 * 28 : 1;
  unsigned char head[16];
  if (gzread(in, head, (unsigned)header) != header) {
    gzclose(in);
    return 0;
  }
  head[4] = (unsigned char)(n >> 24), head[5] = (unsigned char)(n >> 16), head[6] = (unsigned char)(n >> 8),
  head[7] = (unsigned char)n;
  size_t body = (size_t)n * (size_t)per;
  unsigned char *buf = malloc(body);
  assert_non_null(buf);
  int ok = gzread(in, buf, (unsigned)body) == (int)body;
  gzclose(in);
  FILE *f = fopen(to, "wb");
  assert_non_null(f);
  ok = ok && fwrite(head, 1, (size_t)header, f) == (size_t)header && fwrite(buf, 1, body, f) == body;
  fclose(f);
  free(buf);
  return ok;
}

static char small_data[PATH_MAX];

static int make_small_data(void) {
  if (small_data[0]) return 1;
  char dir[PATH_MAX], a[PATH_MAX + 64], b[PATH_MAX + 64];
  snprintf(dir, sizeof dir, "%s/fmnist-small", tmp_root);
  if (mkdir(dir, 0755) && errno != EEXIST) return 0;
  static const struct { const char *split; int n; } parts[] = {{"train", 600}, {"t10k", 200}};
  for (int i = 0; i < 2; i++) {
    snprintf(a, sizeof a, FMNIST "/%s-images-idx3-ubyte.gz", parts[i].split);
    snprintf(b, sizeof b, "%s/%s-images-idx3-ubyte", dir, parts[i].split);
    if (!copy_idx(a, b, parts[i].n, 1)) return 0;
    snprintf(a, sizeof a, FMNIST "/%s-labels-idx1-ubyte.gz", parts[i].split);
    snprintf(b, sizeof b, "%s/%s-labels-idx1-ubyte", dir, parts[i].split);
    if (!copy_idx(a, b, parts[i].n, 0)) return 0;
  }
  snprintf(small_data, sizeof small_data, "%s", dir);
  return 1;
}

#define NEED_DATA()                                                                     \
  do {                                                                                  \
    NEED_CLI();                                                                         \
    if (!make_small_data()) {                                                           \
      print_message("SKIPPED: Fashion-MNIST is not installed (" FMNIST ")\n");          \
      skip();                                                                           \
    }                                                                                   \
  } while (0)

/* The JSON lines of a run, by event. */
typedef struct lines {
  json_t *progress[64], *epoch[8], *test;
  int n_progress, n_epoch;
} lines;

static lines parse_lines(const run_result *r) {
  lines L = {0};
  char *text = own_text(strdup(r->out)), *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    json_error_t e;
    json_t *j = json_loads(line, 0, &e);
    if (!j) fail_msg("not a JSON line (%s): %s\nstderr: %.600s", e.text, line, r->err);
    own_json(j);
    const char *ev = json_string_value(json_object_get(j, "event"));
    assert_non_null(ev);
    if (!strcmp(ev, "progress") && L.n_progress < 64) L.progress[L.n_progress++] = j;
    else if (!strcmp(ev, "epoch") && L.n_epoch < 8) L.epoch[L.n_epoch++] = j;
    else if (!strcmp(ev, "test")) L.test = j;
  }
  return L;
}

static double num_at(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_number(v)) fail_msg("\"%s\" is not a number", key);
  return json_number_value(v);
}

/* A short training of the MLP on 600 images, its checkpoint, `ember eval` of
 * it, and a resumed second epoch. Output not on a terminal: JSON lines. */
static void test_train_eval_resume(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/mlp.ckpt", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--model", "mlp", "--hidden", "32", "--data", small_data,
                                           "--epochs", "1", "--batch", "50", "--device", "cpu", "--mode", "portable",
                                           "--report-every", "4", "--checkpoint", ckpt));
  expect_status(&r, 0);
  lines L = parse_lines(&r);
  assert_int_equal(L.n_progress, 3); /* 12 minibatches, a line every 4 */
  assert_int_equal((int)num_at(L.progress[2], "samples"), 600);
  assert_int_equal(L.n_epoch, 1);
  assert_int_equal((int)num_at(L.epoch[0], "samples"), 600);
  assert_int_equal((int)num_at(L.epoch[0], "epoch"), 1);
  assert_non_null(L.test);
  assert_int_equal((int)num_at(L.test, "samples"), 200);
  double acc = num_at(L.test, "accuracy");
  /* One epoch of 600 images already beats chance (10%) by far. */
  if (acc < 0.5) fail_msg("test accuracy %.3f after one epoch; expected >= 0.5", acc);
  assert_non_null(strstr(r.err, "device: cpu"));
  assert_non_null(strstr(r.err, "kernel code"));

  /* eval: the same model, the same test images, the same accuracy. */
  r = run_cli(NO_SETTINGS, ARGS("eval", "--checkpoint", ckpt, "--data", small_data, "--device", "cpu", "--mode",
                                "portable", "--json"));
  expect_status(&r, 0);
  json_t *ev = parse(&r);
  assert_int_equal((int)num_at(ev, "samples"), 200);
  if (fabs(num_at(ev, "accuracy") - acc) > 1e-6)
    fail_msg("eval: accuracy %.6f, training's own test %.6f", num_at(ev, "accuracy"), acc);
  assert_non_null(strstr(r.err, "model mlp"));

  /* --resume continues the saved run: an option given again with another
   * value is refused (65) naming both values, before anything runs, and
   * the checkpoint is untouched. */
  static const struct {
    const char *opt, *value, *want;
  } conflicts[] = {
      {"--model", "lenet", "--model lenet conflicts with the checkpoint's mlp"},
      {"--batch", "32", "--batch 32 conflicts with the checkpoint's 50"},
      {"--mode", "fast", "--mode fast conflicts with the checkpoint's portable"},
      {"--lr", "0.5", "--lr 0.5 conflicts with the checkpoint's (the learner's default)"},
      {"--hidden", "64", "--hidden 64,0 conflicts with the checkpoint's 32,0"},
      {"--learner", "sgd", "--learner sgd conflicts with the checkpoint's adam"},
  };
  for (size_t i = 0; i < sizeof conflicts / sizeof conflicts[0]; i++) {
    r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", ckpt, "--resume",
                                  "--json", conflicts[i].opt, conflicts[i].value));
    expect_status(&r, 65);
    if (!strstr(r.err, conflicts[i].want)) fail_msg("no \"%s\" in: %s", conflicts[i].want, r.err);
  }
  /* The second epoch only, with the saved settings (the mode and the rest
   * not given here): --epochs moves the end of a constant schedule. */
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu", "--model", "mlp",
                                "--checkpoint", ckpt, "--resume", "--json"));
  expect_status(&r, 0);
  L = parse_lines(&r);
  assert_int_equal(L.n_epoch, 1);
  assert_int_equal((int)num_at(L.epoch[0], "epoch"), 2);
  assert_non_null(strstr(r.err, "resumed from"));
  assert_non_null(strstr(r.err, "model: mlp"));
  assert_non_null(strstr(r.err, "portable mode"));
}

/* A run that diverges in its first epoch (sgd at a rate of 1e6) ends with
 * exit code 1, names the step, and says that no checkpoint was written (it
 * said "the checkpoint holds the last good epoch" when there was none). */
static void test_train_diverges(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/diverged.ckpt", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--model", "mlp", "--hidden", "32", "--data", small_data,
                                           "--epochs", "1", "--batch", "50", "--device", "cpu", "--learner", "sgd",
                                           "--lr", "1e6", "--json", "--checkpoint", ckpt));
  expect_status(&r, 1);
  if (!strstr(r.err, "em_trainer_train_minibatch: step ") || !strstr(r.err, "training diverged"))
    fail_msg("no step and 'training diverged' in: %s", r.err);
  if (!strstr(r.err, "no epoch was complete: no checkpoint was written")) fail_msg("stderr: %s", r.err);
  assert_int_equal(access(ckpt, F_OK), -1);
}

/* An MLP run on the small data set in portable mode (1 to 3 epochs, with
 * extra options: NULL-terminated, up to 10 strings); its JSON lines. */
static lines mlp_run(const char *ckpt, const char *epochs, const char *const *extra) {
  const char *args[40] = {"train",    "--model", "mlp",    "--hidden", "32",   "--data",  small_data, "--epochs",
                          epochs,     "--batch", "50",     "--device", "cpu",  "--mode",  "portable", "--json",
                          "--checkpoint", ckpt};
  int n = 18;
  for (; *extra && n < 38; extra++) args[n++] = *extra;
  args[n] = NULL;
  run_result r = run_cli(NO_SETTINGS, args);
  expect_status(&r, 0);
  lines L = parse_lines(&r);
  assert_non_null(L.test);
  return L;
}

/* The first epoch's loss of a one-epoch MLP run (mlp_run). */
static double first_epoch_loss(const char *ckpt, const char *const *extra) {
  lines L = mlp_run(ckpt, "1", extra);
  assert_int_equal(L.n_epoch, 1);
  return num_at(L.epoch[0], "loss");
}

/* --precision: fp16 and bf16 runs train (one epoch of the small set beats chance by far, as fp32
 * does), fp16 with dynamic loss scaling, which the epoch's JSON line reports (a power of two,
 * and the skipped steps), bf16 without (no loss_scale field). The precision reaches the run: its
 * first-epoch loss is not fp32's bit for bit, yet close to it. It is a setting of the run:
 * said on stderr, saved, and a resume giving another is refused naming both. */
static void test_train_precision(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/precision.ckpt", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--precision", "fp8", "--data", small_data));
  expect_status(&r, 64);
  if (!strstr(r.err, "--precision fp8: not one of fp32, fp16, bf16")) fail_msg("stderr: %s", r.err);

  lines L32 = mlp_run(ckpt, "1", ARGS(NULL));
  const double loss32 = num_at(L32.epoch[0], "loss");
  if (json_object_get(L32.epoch[0], "loss_scale")) fail_msg("an fp32 run reported a loss scale");
  static const char *const halves[] = {"fp16", "bf16"};
  for (int h = 0; h < 2; h++) {
    lines L = mlp_run(ckpt, "1", ARGS("--precision", halves[h]));
    assert_int_equal(L.n_epoch, 1);
    const double loss = num_at(L.epoch[0], "loss"), acc = num_at(L.test, "accuracy");
    if (acc < 0.5) fail_msg("%s: test accuracy %.3f after one epoch; expected >= 0.5", halves[h], acc);
    if (loss == loss32 || fabs(loss - loss32) > 0.05 * loss32)
      fail_msg("%s: first-epoch loss %.9g, fp32's %.9g: expected close but not equal", halves[h], loss, loss32);
    json_t *scale = json_object_get(L.epoch[0], "loss_scale");
    if (h == 0) {
      if (!scale) fail_msg("an fp16 run reported no loss scale");
      double sc = json_number_value(scale), m;
      if (!(sc >= 1) || frexp(sc, (int[1]){0}) != 0.5 || (m = num_at(L.epoch[0], "skipped_steps")) < 0 || m > 12)
        fail_msg("fp16: loss scale %g, skipped %g: expected a power of two and at most the 12 steps", sc,
                 num_at(L.epoch[0], "skipped_steps"));
    } else if (scale)
      fail_msg("a bf16 run reported a loss scale (dynamic scaling is for fp16 only)");
  }
  /* the last run (bf16) is the checkpoint's: a resume asking for fp16 is refused */
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", ckpt, "--resume",
                                "--json", "--precision", "fp16"));
  expect_status(&r, 65);
  if (!strstr(r.err, "--precision fp16 conflicts with the checkpoint's bf16")) fail_msg("stderr: %s", r.err);
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu", "--checkpoint",
                                ckpt, "--resume", "--json"));
  expect_status(&r, 0);
  if (!strstr(r.err, "bf16")) fail_msg("the resumed run does not say its precision: %s", r.err);
}

/* --random-crop, --random-flip and --l2 reach the run: the same run twice
 * has the same loss (portable mode, one seed), and each option alone
 * changes it (the images or the gradients differ from the first step).
 * They are settings of the run: saved in the checkpoint, said on stderr,
 * and a resume that gives another value is refused. */
static void test_train_augmentation_and_l2(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/augment.ckpt", tmp_root);
  double plain = first_epoch_loss(ckpt, ARGS(NULL)), again = first_epoch_loss(ckpt, ARGS(NULL));
  if (plain != again) fail_msg("the same run twice: losses %.9g and %.9g", plain, again);
  const char *const *const variants[] = {ARGS("--random-crop", "2"), ARGS("--random-flip"), ARGS("--l2", "0.05")};
  for (size_t i = 0; i < 3; i++) {
    double loss = first_epoch_loss(ckpt, variants[i]);
    if (loss == plain) fail_msg("%s: the loss %.9g is the plain run's: the option had no effect", variants[i][0], loss);
  }
  /* Crop and flip on, as saved; the resume's conflicts name both values. */
  (void)first_epoch_loss(ckpt, ARGS("--random-crop", "2", "--random-flip", "--l2", "0.001"));
  run_result r = run_cli(NO_SETTINGS, ARGS("checkpoint", "inspect", ckpt));
  expect_status(&r, 0);
  if (!strstr(r.out, "\"random_crop\":2") || !strstr(r.out, "\"random_flip\":true"))
    fail_msg("the saved settings lack the augmentation: %s", r.out);
  static const struct {
    const char *opt, *value, *want;
  } conflicts[] = {
      {"--random-crop", "3", "--random-crop 3 conflicts with the checkpoint's 2"},
      {"--l2", "0.5", "--l2 0.5 conflicts with the checkpoint's 0.001"},
  };
  for (size_t i = 0; i < 2; i++) {
    r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", ckpt, "--resume",
                                  "--json", conflicts[i].opt, conflicts[i].value));
    expect_status(&r, 65);
    if (!strstr(r.err, conflicts[i].want)) fail_msg("no \"%s\" in: %s", conflicts[i].want, r.err);
  }
  /* Resumed without the options: the saved ones, said on stderr. */
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu", "--checkpoint", ckpt,
                                "--resume", "--json"));
  expect_status(&r, 0);
  if (!strstr(r.err, "random crops (padding 2); random flips")) fail_msg("stderr: %s", r.err);
  /* A run without flips, resumed with --random-flip: refused. */
  (void)first_epoch_loss(ckpt, ARGS(NULL));
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", ckpt, "--resume",
                                "--json", "--random-flip"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "--random-flip on conflicts with the checkpoint's off"));
}

/* A copy of checkpoint `from` at `to` whose "ember-train" section is edited:
 * key set to the JSON text value (NULL: the key removed), or, with key
 * NULL, the whole section replaced by the bytes of value. The rest (graph,
 * trainer, learner, reader sections, manifest's device and mode) as saved. */
static void craft_settings(const char *from, const char *to, const char *key, const char *value) {
  em_checkpoint *c;
  if (em_checkpoint_load(from, &c)) fail_msg("%s", em_last_error());
  em_checkpoint_manifest man;
  assert_int_equal(em_checkpoint_get_manifest(c, &man), EM_OK);
  size_t n = em_checkpoint_section_count(c), k = 0;
  em_checkpoint_section *sec = calloc(n, sizeof *sec);
  assert_non_null(sec);
  char *text = NULL;
  for (size_t j = 0; j < n; j++) {
    em_checkpoint_section_info info;
    assert_int_equal(em_checkpoint_section_get(c, j, &info), EM_OK);
    if (!strcmp(info.name, "manifest") || !strcmp(info.name, "graph")) continue;
    sec[k] = (em_checkpoint_section){info.name, info.bytes, info.size};
    if (!strcmp(info.name, "ember-train")) {
      if (key) {
        json_error_t e;
        json_t *o = json_loadb(info.bytes, info.size, 0, &e);
        assert_non_null(o);
        if (value) {
          json_t *v = json_loads(value, JSON_DECODE_ANY, &e);
          if (!v) fail_msg("not JSON: %s", value);
          json_object_set_new(o, key, v);
        } else {
          json_object_del(o, key);
        }
        text = json_dumps(o, JSON_COMPACT);
        json_decref(o);
      } else {
        text = strdup(value);
      }
      assert_non_null(text);
      sec[k] = (em_checkpoint_section){info.name, text, strlen(text)};
    }
    k++;
  }
  assert_non_null(text);
  em_checkpoint_save_options so = {.device = man.device, .mode = man.mode};
  if (em_checkpoint_save(to, em_checkpoint_graph(c), sec, (int)k, &so)) fail_msg("%s", em_last_error());
  free(text);
  free(sec);
  em_checkpoint_free(c);
}

/* --epochs of a cosine schedule is the schedule's length: a resume that
 * changes it is refused; one that does not give it trains to the planned
 * end. A checkpoint whose saved settings were edited to invalid values
 * (a model, a batch, a learner the command line would refuse) is malformed
 * data (65), not a usage error or an internal one. */
static void test_train_resume_schedule_and_crafted_settings(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16], crafted[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/cosine.ckpt", tmp_root);
  snprintf(crafted, sizeof crafted, "%s/crafted.ckpt", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--model", "mlp", "--hidden", "16", "--data", small_data,
                                           "--epochs", "2", "--train-samples", "200", "--batch", "100", "--device",
                                           "cpu", "--schedule", "cosine", "--checkpoint", ckpt, "--json"));
  expect_status(&r, 0);
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "3", "--device", "cpu", "--checkpoint", ckpt,
                                "--resume", "--json"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "--epochs 3 conflicts with the checkpoint's 2"));
  assert_non_null(strstr(r.err, "planned --epochs"));
  /* Not given: the planned 2 epochs, done already: nothing more to train. */
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", ckpt, "--resume",
                                "--json"));
  expect_status(&r, 0);
  assert_int_equal(parse_lines(&r).n_epoch, 0);
  assert_non_null(strstr(r.err, "2 epochs and 4 steps done"));

  static const struct {
    const char *key, *text, *want;
  } edits[] = {
      {"model", "\"vgg\"", "--model vgg is not a valid value"},
      {"batch", "0", "--batch 0 is not a valid value"},
      {"learner", "\"adamax\"", "--learner adamax is not a valid value"},
      {"lr", "-5", "--lr -5 is not a valid value"},
      {"epochs", "0", "--epochs 0 is not a valid value"},
      {"hidden", "[-3, 0]", "--hidden -3,0 is not a valid value"},
      {"mode", "\"exact\"", "--mode exact is not a valid value"},
      {"random_crop", "20", "--random-crop 20 is not a valid value"},
      {"random_crop", "-1", "--random-crop -1 is not a valid value"},
      {"random_crop", "\"2\"", "section is malformed: \"random_crop\" is \"2\", not a whole number"},
      {"random_crop", "2.0", "\"random_crop\" is 2.0, not a whole number"},
      {"l2", "-1", "--l2 -1 is not a valid value"},
      {"l2", "\"0.1\"", "\"l2\" is \"0.1\", not a number"},
      {"min_delta", "-0.5", "--min-delta -0.5 is not a valid value"},
      {"min_delta", "null", "\"min_delta\" is null, not a number"},
      /* read as absent before, so a run saved with flips or batch norm
       * resumed without them, and a mode of another type took the command line's */
      {"random_flip", "\"true\"", "\"random_flip\" is \"true\", not true or false"},
      {"random_flip", "1", "\"random_flip\" is 1, not true or false"},
      {"batch_norm", "\"yes\"", "\"batch_norm\" is \"yes\", not true or false"},
      {"mode", "5", "\"mode\" is 5, not a string"},
      {"seed", NULL, "section is malformed: no \"seed\""},
      {"hidden", "[16]", "\"hidden\" is [16], not two whole numbers"},
      {NULL, "[1, 2]", "section is malformed: not a JSON object"},
      {NULL, "{\"model\": ", "section is malformed: not JSON"},
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    craft_settings(ckpt, crafted, edits[i].key, edits[i].text);
    r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", crafted, "--resume",
                                  "--json"));
    if (r.status != 65)
      fail_msg("edit %zu (%s): exit status %d, expected 65: %s", i, edits[i].key ? edits[i].key : "the section",
               r.status, r.err);
    if (!strstr(r.err, edits[i].want)) fail_msg("edit %zu: no \"%s\" in: %s", i, edits[i].want, r.err);
    assert_non_null(strstr(r.err, "crafted.ckpt"));
  }
  /* ember eval standardises the test images with the saved norm: one that
   * is not a finite mean and a positive deviation in float32 is the file's
   * fault (65), not a usage error (the reader's refusal of its options said 64). */
  static const char *const norms[] = {"[0.3, 0]", "[0.3, -1]", "[1e300, 0.3]", "[0.3, 1e-300]"};
  for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
    craft_settings(ckpt, crafted, "norm", norms[i]);
    r = run_cli(NO_SETTINGS, ARGS("eval", "--data", small_data, "--device", "cpu", "--checkpoint", crafted, "--json"));
    if (r.status != 65) fail_msg("eval, norm %s: exit status %d, expected 65: %s", norms[i], r.status, r.err);
    if (!strstr(r.err, "\"norm\"") || !strstr(r.err, "crafted.ckpt")) fail_msg("eval, norm %s: %s", norms[i], r.err);
  }
  unlink(crafted);
}

/* The bytes of checkpoint path's section name (owned: freed by the teardown). */
static const char *section_bytes(const char *path, const char *name, size_t *size) {
  em_checkpoint *c;
  if (em_checkpoint_load(path, &c)) fail_msg("%s", em_last_error());
  const void *b;
  if (em_checkpoint_find(c, name, &b, size)) fail_msg("%s: no section %s", path, name);
  char *copy = own_text(malloc(*size ? *size : 1));
  assert_non_null(copy);
  memcpy(copy, b, *size);
  em_checkpoint_free(c);
  return copy;
}

/* The sections of a and b that hold the run's state are the same bytes:
 * the graph (parameters, batch norm statistics, the learner's moments),
 * the learner's counters, the reader's position and the settings of the
 * run (a setting a resume did not restore is written as the command
 * line's). (The trainer's own section differs: it counts seconds.) */
static void expect_same_state(const char *a, const char *b) {
  static const char *const names[] = {"graph", "learner.0", "reader", "ember-train"};
  for (int i = 0; i < 4; i++) {
    size_t na, nb;
    const char *x = section_bytes(a, names[i], &na), *y = section_bytes(b, names[i], &nb);
    if (na != nb || memcmp(x, y, na)) fail_msg("section %s of %s and %s differs", names[i], a, b);
  }
}

/* --random-crop and --random-flip change the training images only: with a
 * learning rate of 0 the weights stay the initial ones, so the validation
 * and test losses of a run with the widest crop (14) and flips are those
 * of a plain run, while its training loss is not; --random-crop 0 is off.
 * A run with augmentation, stopped after an epoch and resumed, ends in the
 * state of the run that was not stopped, bit for bit (portable mode), as
 * does an older checkpoint without the augmentation keys (off); one of
 * other training images is refused. `ember
 * eval` of an augmented run's checkpoint tests as the run did. `ember
 * checkpoint inspect` shows saved settings only when the section is a JSON
 * object. */
static void test_train_augmentation_resume_and_splits(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16], full[PATH_MAX + 16], old[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/aug-part.ckpt", tmp_root);
  snprintf(full, sizeof full, "%s/aug-full.ckpt", tmp_root);
  snprintf(old, sizeof old, "%s/aug-old.ckpt", tmp_root);

  const char *const *const frozen[] = {ARGS("--learner", "sgd", "--lr", "0", "--validation", "100"),
                                       ARGS("--learner", "sgd", "--lr", "0", "--validation", "100", "--random-crop",
                                            "14", "--random-flip"),
                                       ARGS("--learner", "sgd", "--lr", "0", "--validation", "100", "--random-crop",
                                            "0")};
  lines F[3];
  for (int i = 0; i < 3; i++) {
    F[i] = mlp_run(ckpt, "1", frozen[i]);
    assert_int_equal(F[i].n_epoch, 1);
    assert_int_equal((int)num_at(F[i].epoch[0], "samples"), 500);
  }
  for (int i = 1; i < 3; i++) {
    static const char *const same[] = {"val_loss", "val_metric"};
    for (int k = 0; k < 2; k++)
      if (num_at(F[i].epoch[0], same[k]) != num_at(F[0].epoch[0], same[k]))
        fail_msg("run %d: %s %.9g, the plain run's %.9g: the validation images were transformed", i, same[k],
                 num_at(F[i].epoch[0], same[k]), num_at(F[0].epoch[0], same[k]));
    if (num_at(F[i].test, "loss") != num_at(F[0].test, "loss"))
      fail_msg("run %d: test loss %.17g, the plain run's %.17g: the test images were transformed", i,
               num_at(F[i].test, "loss"), num_at(F[0].test, "loss"));
  }
  if (num_at(F[1].epoch[0], "loss") == num_at(F[0].epoch[0], "loss"))
    fail_msg("--random-crop 14 --random-flip: the training loss %.9g is the plain run's", num_at(F[1].epoch[0], "loss"));
  if (num_at(F[2].epoch[0], "loss") != num_at(F[0].epoch[0], "loss"))
    fail_msg("--random-crop 0: the training loss %.9g, the plain run's %.9g", num_at(F[2].epoch[0], "loss"),
             num_at(F[0].epoch[0], "loss"));

  /* Stopped after epoch 1 of 2 and resumed (the settings from the file). */
  const char *const *aug = ARGS("--random-crop", "3", "--random-flip", "--l2", "0.01", "--validation", "100",
                                "--patience", "4", "--min-delta", "0.001");
  lines whole = mlp_run(full, "2", aug);
  (void)mlp_run(ckpt, "1", aug);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu",
                                           "--checkpoint", ckpt, "--resume", "--json"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.err, "random crops (padding 3); random flips"));
  lines resumed = parse_lines(&r);
  assert_int_equal(resumed.n_epoch, 1);
  static const char *const keys[] = {"loss", "metric", "val_loss", "val_metric"};
  for (int k = 0; k < 4; k++)
    if (num_at(resumed.epoch[0], keys[k]) != num_at(whole.epoch[1], keys[k]))
      fail_msg("epoch 2 resumed: %s %.9g, unbroken %.9g", keys[k], num_at(resumed.epoch[0], keys[k]),
               num_at(whole.epoch[1], keys[k]));
  expect_same_state(ckpt, full);

  /* eval: the test images as the run's own test saw them (not augmented). */
  r = run_cli(NO_SETTINGS, ARGS("eval", "--checkpoint", full, "--data", small_data, "--device", "cpu", "--mode",
                                "portable", "--json"));
  expect_status(&r, 0);
  json_t *ev = parse(&r);
  if (fabs(num_at(ev, "accuracy") - num_at(whole.test, "accuracy")) > 1e-6 ||
      fabs(num_at(ev, "loss") - num_at(whole.test, "loss")) > 1e-5)
    fail_msg("eval: accuracy %.6f, loss %.6f; the run's test: %.6f, %.6f", num_at(ev, "accuracy"), num_at(ev, "loss"),
             num_at(whole.test, "accuracy"), num_at(whole.test, "loss"));

  /* An older checkpoint: no random_crop, random_flip, min_delta, l2. */
  (void)mlp_run(ckpt, "1", ARGS(NULL));
  craft_settings(ckpt, old, "random_crop", NULL);
  craft_settings(old, old, "random_flip", NULL);
  craft_settings(old, old, "min_delta", NULL);
  craft_settings(old, old, "l2", NULL);
  r = run_cli(NO_SETTINGS, ARGS("checkpoint", "inspect", old));
  expect_status(&r, 0);
  if (strstr(r.out, "random_") || !strstr(r.out, "\"model\":\"mlp\"")) fail_msg("the crafted settings: %s", r.out);
  for (int i = 0; i < 2; i++) {
    r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu", "--checkpoint",
                                  i ? old : ckpt, "--resume", "--json"));
    expect_status(&r, 0);
    if (strstr(r.err, "random")) fail_msg("augmentation on: %s", r.err);
  }
  expect_same_state(old, ckpt);

  /* Other training images (another data set of the same size, as MNIST
   * for Fashion-MNIST): their mean and deviation are not the saved ones. */
  craft_settings(full, old, "norm", "[0.1307, 0.3081]");
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "3", "--device", "cpu", "--checkpoint", old,
                                "--resume", "--json"));
  expect_status(&r, 65);
  if (!strstr(r.err, "are not the run's") || !strstr(r.err, "the run's 0.1307 and 0.3081")) fail_msg("%s", r.err);

  /* inspect: a section that is not JSON, or JSON but not an object, is no settings. */
  static const char *const foreign[] = {"{\"model\": \"mlp\"", "[1, 2]", "\"mlp\"", ""};
  for (int i = 0; i < 4; i++) {
    craft_settings(full, old, NULL, foreign[i]);
    r = run_cli(NO_SETTINGS, ARGS("checkpoint", "inspect", old));
    expect_status(&r, 0);
    if (strstr(r.out, "training settings")) fail_msg("section '%s' shown as settings: %s", foreign[i], r.out);
    assert_non_null(strstr(r.out, "fc1.weight"));
    r = run_cli(NO_SETTINGS, ARGS("checkpoint", "inspect", old, "--json"));
    expect_status(&r, 0);
    json_t *j = parse(&r);
    if (!json_is_null(json_object_get(j, "training_settings")))
      fail_msg("section '%s': training_settings is not null: %s", foreign[i], r.out);
  }
  r = run_cli(NO_SETTINGS, ARGS("checkpoint", "inspect", full, "--json"));
  expect_status(&r, 0);
  json_t *set = json_object_get(parse(&r), "training_settings");
  if (json_integer_value(json_object_get(set, "random_crop")) != 3 ||
      !json_is_true(json_object_get(set, "random_flip")) || json_real_value(json_object_get(set, "l2")) != 0.01)
    fail_msg("the saved settings: %s", r.out);
  unlink(old);
  unlink(full);
  unlink(ckpt);
}

/* --weight-decay 0 is 0, also for adamw, whose default is 0.01 (it was
 * read as "not given": adamw trained with 0.01). The value given is saved
 * and restored by --resume, bit for bit; a checkpoint of version 1 (no
 * "settings_version") keeps its meaning: its weight_decay 0 for adamw
 * trained with 0.01, and resumes so. */
static void test_train_weight_decay_zero(void **state) {
  (void)state;
  NEED_DATA();
  char a[PATH_MAX + 16], b[PATH_MAX + 16], c[PATH_MAX + 16];
  snprintf(a, sizeof a, "%s/wd-a.ckpt", tmp_root);
  snprintf(b, sizeof b, "%s/wd-b.ckpt", tmp_root);
  snprintf(c, sizeof c, "%s/wd-c.ckpt", tmp_root);
  double deflt = num_at(mlp_run(a, "1", ARGS("--learner", "adamw", "--lr", "0.01")).epoch[0], "loss");
  double given = num_at(mlp_run(b, "1", ARGS("--learner", "adamw", "--lr", "0.01", "--weight-decay", "0.01")).epoch[0],
                        "loss");
  double zero = num_at(mlp_run(c, "1", ARGS("--learner", "adamw", "--lr", "0.01", "--weight-decay", "0")).epoch[0],
                       "loss");
  if (given != deflt) fail_msg("adamw: --weight-decay 0.01 (PyTorch's default) %.9g, no option %.9g", given, deflt);
  if (zero == deflt) fail_msg("adamw --weight-decay 0: the loss %.9g is that of the default 0.01", zero);
  /* Resumed: weight decay 0 restored (b: the unbroken run). */
  lines whole = mlp_run(b, "2", ARGS("--learner", "adamw", "--lr", "0.01", "--weight-decay", "0"));
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu",
                                           "--checkpoint", c, "--resume", "--json"));
  expect_status(&r, 0);
  lines L = parse_lines(&r);
  assert_int_equal(L.n_epoch, 1);
  if (num_at(L.epoch[0], "loss") != num_at(whole.epoch[1], "loss"))
    fail_msg("epoch 2 resumed: loss %.9g, unbroken %.9g", num_at(L.epoch[0], "loss"), num_at(whole.epoch[1], "loss"));
  expect_same_state(c, b);
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", c, "--resume",
                                "--json", "--weight-decay", "0.01"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "--weight-decay 0.01 conflicts with the checkpoint's 0"));
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", a, "--resume",
                                "--json", "--weight-decay", "0"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "--weight-decay 0 conflicts with the checkpoint's (the learner's default)"));
  /* Version 1: adamw's default written as 0. Resumed, it trains as the
   * default run resumed (the run it continues trained with 0.01). */
  craft_settings(a, c, "settings_version", NULL);
  craft_settings(c, c, "weight_decay", "0");
  for (int i = 0; i < 2; i++) {
    r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--epochs", "2", "--device", "cpu", "--checkpoint",
                                  i ? c : a, "--resume", "--json"));
    expect_status(&r, 0);
  }
  expect_same_state(c, a);
  craft_settings(a, c, "settings_version", "3");
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", small_data, "--device", "cpu", "--checkpoint", c, "--resume",
                                "--json"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "settings version 3; this ember train reads 1 to 2"));
  unlink(a);
  unlink(b);
  unlink(c);
}

/* Missing or malformed data and checkpoints: the documented exit codes
 * (66 missing, 65 malformed, 73 the checkpoint cannot be written) and a
 * message naming the file. */
static void test_train_data_errors(void **state) {
  (void)state;
  NEED_DATA();
  char missing[PATH_MAX + 16], bad[PATH_MAX + 16], path[PATH_MAX + 64], ckpt[PATH_MAX + 32];
  snprintf(missing, sizeof missing, "%s/no-such-dir", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--data", missing, "--device", "cpu"));
  expect_status(&r, 66);
  assert_non_null(strstr(r.err, "no-such-dir"));

  /* A data set whose training images file is not IDX. */
  snprintf(bad, sizeof bad, "%s/bad-data", tmp_root);
  assert_true(mkdir(bad, 0755) == 0 || errno == EEXIST);
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", bad);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("this is not an IDX file at all", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", bad);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("nor this", f);
  fclose(f);
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", bad, "--device", "cpu"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "train-"));

  /* Well-formed IDX files the models cannot take: 32x32 images, and a
   * training split of no images. 65 and the files' shape, before training
   * starts (they were exit 64, a usage error, from the first step's feed). */
  static const struct { const char *dir; int n, side; const char *want; } unusable[] = {
      {"idx-32x32", 4, 32, "the images are 32x32"},
      {"idx-empty", 0, 28, "no images"},
  };
  for (int k = 0; k < 2; k++) {
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, unusable[k].dir);
    assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
    for (int split = 0; split < 2; split++) {
      const char *name = split ? "t10k" : "train";
      int n = unusable[k].n, side = unusable[k].side;
      unsigned char head[16] = {0, 0, 8, 3, 0, 0, 0, (unsigned char)n, 0, 0, 0, (unsigned char)side,
                                0, 0, 0, (unsigned char)side};
      snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, name);
      f = fopen(path, "wb");
      assert_non_null(f);
      fwrite(head, 1, 16, f);
      for (int i = 0; i < n * side * side; i++) fputc(i & 0xff, f);
      fclose(f);
      head[3] = 1;
      snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, name);
      f = fopen(path, "wb");
      assert_non_null(f);
      fwrite(head, 1, 8, f);
      for (int i = 0; i < n; i++) fputc(i % 10, f);
      fclose(f);
    }
    r = run_cli(NO_SETTINGS, ARGS("train", "--model", "mlp", "--data", dir, "--epochs", "1", "--device", "cpu"));
    expect_status(&r, 65);
    assert_non_null(strstr(r.err, unusable[k].want));
    assert_non_null(strstr(r.err, "training images"));
  }

  /* eval of a missing checkpoint, and of a file that is not one. */
  snprintf(ckpt, sizeof ckpt, "%s/none.ckpt", tmp_root);
  r = run_cli(NO_SETTINGS, ARGS("eval", "--checkpoint", ckpt, "--data", small_data, "--device", "cpu"));
  expect_status(&r, 66);
  assert_non_null(strstr(r.err, "none.ckpt"));
  r = run_cli(NO_SETTINGS, ARGS("eval", "--checkpoint", path, "--data", small_data, "--device", "cpu"));
  expect_status(&r, 65);

  /* A checkpoint in a directory that does not exist cannot be written. */
  snprintf(ckpt, sizeof ckpt, "%s/no-such-dir/x.ckpt", tmp_root);
  r = run_cli(NO_SETTINGS, ARGS("train", "--model", "mlp", "--hidden", "8", "--data", small_data, "--epochs", "1",
                                "--batch", "100", "--device", "cpu", "--checkpoint", ckpt, "--json"));
  expect_status(&r, 73);
  assert_non_null(strstr(r.err, "x.ckpt"));
}

/* ------------------------------------------------- ONNX: inspect and run --- */

/* The ONNX node tests of Debian's libonnx-testdata (as test_onnx_api.c). */
static const char *onnx_node_dir(void) {
  const char *d = getenv("EMBER_ONNX_TESTDATA");
  return d && *d ? d : "/usr/share/libonnx-testdata/data/node";
}

#define NEED_ONNX_TESTDATA()                                                                              \
  do {                                                                                                    \
    char p_[PATH_MAX];                                                                                    \
    struct stat st_;                                                                                      \
    snprintf(p_, sizeof p_, "%s/test_abs/model.onnx", onnx_node_dir());                                   \
    if (stat(p_, &st_) != 0) {                                                                            \
      print_message("SKIPPED: libonnx-testdata not found under %s (apt-get install libonnx-testdata)\n", \
                    onnx_node_dir());                                                                     \
      skip();                                                                                             \
    }                                                                                                     \
  } while (0)

static const char *onnx_model(const char *test) {
  char *p = own_text(malloc(PATH_MAX));
  snprintf(p, PATH_MAX, "%s/%s/model.onnx", onnx_node_dir(), test);
  return p;
}

static em_onnx_tensor *onnx_pb(const char *test, const char *file) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/%s/test_data_set_0/%s", onnx_node_dir(), test, file);
  em_onnx_tensor *t;
  if (em_onnx_tensor_load(p, &t)) fail_msg("%s", em_last_error());
  return t;
}

/* A .npy file of a test's input_N.pb, written here from NumPy's format
 * description (not with the tool's npy.c); returns its path. */
static const char *npy_of_pb(const char *test, const char *file, const char *name) {
  em_onnx_tensor *t = onnx_pb(test, file);
  const char *descr = t->dtype == EM_ONNX_FLOAT   ? "<f4"
                      : t->dtype == EM_ONNX_DOUBLE ? "<f8"
                      : t->dtype == EM_ONNX_INT64 ? "<i8"
                      : t->dtype == EM_ONNX_INT32 ? "<i4"
                                                  : NULL;
  assert_non_null(descr);
  char dict[256], shape[128] = "";
  for (size_t d = 0; d < t->rank; d++)
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld, ", (long long)t->dims[d]);
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  size_t len = (10 + strlen(dict) + 1 + 63) / 64 * 64 - 10;
  char *path = own_text(malloc(PATH_MAX));
  snprintf(path, PATH_MAX, "%s/%s.npy", tmp_root, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)len, (unsigned char)(len >> 8)};
  fwrite(pre, 1, 10, f);
  fprintf(f, "%-*s\n", (int)len - 1, dict);
  fwrite(t->data, 1, t->nbytes, f);
  assert_int_equal(fclose(f), 0);
  em_onnx_tensor_free(t);
  return path;
}

/* The f32 data of a .npy file `ember run` wrote, checked against the test's
 * output_0.pb: the header's dtype and shape text, then every value. */
static void expect_npy_matches(const char *path, const char *test, const char *shape_text) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("ember run wrote no %s", path);
  unsigned char buf[1 << 14];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_true(n > 10 && !memcmp(buf, "\x93NUMPY\x01\x00", 8));
  size_t hlen = buf[8] | (size_t)buf[9] << 8;
  assert_int_equal((10 + hlen) % 64, 0);
  char want_dict[160];
  snprintf(want_dict, sizeof want_dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape_text);
  assert_memory_equal(buf + 10, want_dict, strlen(want_dict));
  em_onnx_tensor *want = onnx_pb(test, "output_0.pb");
  assert_int_equal(n - 10 - hlen, want->nbytes);
  for (size_t i = 0; i < want->n_elements; i++) {
    float g, w = ((const float *)want->data)[i];
    memcpy(&g, buf + 10 + hlen + 4 * i, 4);
    if (!(fabsf(g - w) <= 1e-5f + 1e-4f * fabsf(w))) fail_msg("%s: element %zu is %.9g, expected %.9g", path, i, g, w);
  }
  em_onnx_tensor_free(want);
}

/* Sequences of 3 to 12 one-hot symbols of 4 in CTF ("|features" a step a
 * line, "|labels k:1" once), the class being the FIRST symbol: written by
 * the test from a fixed LCG, `count` sequences. */
static void write_sequences(const char *path, int count, uint64_t seed) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int s = 0; s < count; s++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    int len = 3 + (int)((seed >> 33) % 10), first = 0;
    for (int t = 0; t < len; t++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      int sym = (int)((seed >> 33) % 4);
      if (t == 0) first = sym;
      fprintf(f, "%d |features %d %d %d %d", s, sym == 0, sym == 1, sym == 2, sym == 3);
      if (t == 0) fprintf(f, " |labels %d:1", first);
      fputc('\n', f);
    }
  }
  assert_int_equal(fclose(f), 0);
}

/* ember train --model lstm: an LSTM classifier of variable-length sequences
 * read from DIR/train.ctf and DIR/test.ctf (padded minibatches with their
 * lengths), its checkpoint evaluated by ember eval, resumed, and the
 * sequence errors of the command line. */
static void test_train_lstm_sequences(void **state) {
  (void)state;
  NEED_CLI();
  char dir[PATH_MAX + 16], path[PATH_MAX + 64], ckpt[PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s/sequences", tmp_root);
  assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
  snprintf(path, sizeof path, "%s/train.ctf", dir);
  write_sequences(path, 512, 1);
  snprintf(path, sizeof path, "%s/test.ctf", dir);
  write_sequences(path, 256, 2);
  snprintf(ckpt, sizeof ckpt, "%s/lstm.ckpt", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--model", "lstm", "--data", dir, "--input-dim", "4", "--max-steps",
                                           "12", "--classes", "4", "--hidden", "32", "--lr", "0.02", "--epochs", "7",
                                           "--batch", "32", "--device", "cpu", "--mode", "portable", "--report-every",
                                           "1000", "--checkpoint", ckpt));
  expect_status(&r, 0);
  lines L = parse_lines(&r);
  assert_int_equal(L.n_epoch, 7);
  assert_int_equal((int)num_at(L.epoch[0], "samples"), 512);
  assert_non_null(L.test);
  assert_int_equal((int)num_at(L.test, "samples"), 256);
  assert_non_null(strstr(r.err, "model: lstm"));

  /* The sequences' shape is a setting of the run. */
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", dir, "--device", "cpu", "--checkpoint", ckpt, "--resume", "--json",
                                "--max-steps", "20"));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "--max-steps 20 conflicts with the checkpoint's 12"));
  /* Resumed to 14 epochs (the settings, the shape included, from the checkpoint). */
  r = run_cli(NO_SETTINGS, ARGS("train", "--data", dir, "--epochs", "14", "--device", "cpu", "--checkpoint", ckpt,
                                "--resume", "--report-every", "1000", "--json"));
  expect_status(&r, 0);
  L = parse_lines(&r);
  assert_int_equal(L.n_epoch, 7);
  assert_int_equal((int)num_at(L.epoch[0], "epoch"), 8);
  assert_non_null(L.test);
  double acc = num_at(L.test, "accuracy");
  /* Chance is 25%; the first symbol must be carried over up to 11 steps. */
  if (acc < 0.9) fail_msg("test accuracy %.3f after 14 epochs; expected >= 0.9", acc);
  print_message("ember train --model lstm: test accuracy %.3f after 14 epochs (chance 0.25)\n", acc);

  r = run_cli(NO_SETTINGS, ARGS("eval", "--checkpoint", ckpt, "--data", dir, "--device", "cpu", "--mode", "portable",
                                "--json"));
  expect_status(&r, 0);
  json_t *ev = parse(&r);
  assert_int_equal((int)num_at(ev, "samples"), 256);
  if (fabs(num_at(ev, "accuracy") - acc) > 1e-6)
    fail_msg("eval: accuracy %.6f, training's own test %.6f", num_at(ev, "accuracy"), acc);
  assert_non_null(strstr(r.err, "model lstm"));

  /* Errors: the shape missing (64), a sequence longer than --max-steps
   * (65, naming the file, the line and the sequence), a missing file (66). */
  r = run_cli(NO_SETTINGS, ARGS("train", "--model", "lstm", "--data", dir, "--device", "cpu"));
  expect_status(&r, 64);
  assert_non_null(strstr(r.err, "--input-dim"));
  r = run_cli(NO_SETTINGS, ARGS("train", "--model", "lstm", "--data", dir, "--input-dim", "4", "--max-steps", "3",
                                "--device", "cpu"));
  expect_status(&r, 65);
  if (!strstr(r.err, "train.ctf: line ") || !strstr(r.err, "sequence too long")) fail_msg("stderr: %s", r.err);
  r = run_cli(NO_SETTINGS, ARGS("train", "--model", "lstm", "--data", tmp_root, "--input-dim", "4", "--max-steps",
                                "12", "--device", "cpu"));
  expect_status(&r, 66);
  assert_non_null(strstr(r.err, "train.ctf"));
}

static void test_onnx_inspect(void **state) {
  (void)state;
  NEED_CLI();
  NEED_ONNX_TESTDATA();
  run_result r = run_cli(NO_SETTINGS, ARGS("inspect", onnx_model("test_add_bcast"), "--json"));
  expect_status(&r, 0);
  json_t *j = parse(&r);
  json_t *in = array_at(j, "inputs"), *ops = array_at(j, "ops");
  assert_int_equal(json_array_size(in), 2);
  assert_string_equal(str_at(json_array_get(in, 0), "name"), "x");
  assert_string_equal(str_at(json_array_get(in, 1), "onnx_dtype"), "float");
  json_t *shape = array_at(json_array_get(in, 0), "shape");
  assert_int_equal(json_array_size(shape), 3);
  assert_int_equal(json_integer_value(json_array_get(shape, 2)), 5);
  assert_string_equal(str_at(json_array_get(array_at(j, "outputs"), 0), "name"), "sum");
  assert_int_equal(int_at(json_array_get(array_at(j, "opsets"), 0), "version"), 14); /* the file's opset_import */
  assert_string_equal(str_at(j, "producer"), "backend-test");
  assert_int_equal(json_array_size(ops), 1);
  assert_string_equal(str_at(json_array_get(ops, 0), "op"), "Add");
  assert_int_equal(int_at(json_array_get(ops, 0), "count"), 1);
  assert_true(json_is_true(json_object_get(json_array_get(ops, 0), "supported")));
  assert_int_equal(json_array_size(array_at(j, "missing_ops")), 0);

  /* Bernoulli (random draws): Ember has no translation; inspect says so and exits 1. */
  r = run_cli(NO_SETTINGS, ARGS("inspect", onnx_model("test_bernoulli")));
  expect_status(&r, 1);
  if (!strstr(r.out, "Bernoulli") || !strstr(r.out, "MISSING") || !strstr(r.out, "lacks 1 op"))
    fail_msg("inspect of a Bernoulli model does not name the missing op: %.600s", r.out);
  r = run_cli(NO_SETTINGS, ARGS("inspect", onnx_model("test_bernoulli"), "--json"));
  expect_status(&r, 1);
  json_t *missing = array_at(parse(&r), "missing_ops");
  assert_int_equal(json_array_size(missing), 1);
  assert_string_equal(json_string_value(json_array_get(missing, 0)), "Bernoulli");

  /* Malformed (a TensorProto is not a model), missing, usage. */
  char pb[PATH_MAX];
  snprintf(pb, sizeof pb, "%s/test_abs/test_data_set_0/input_0.pb", onnx_node_dir());
  r = run_cli(NO_SETTINGS, ARGS("inspect", pb));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, pb));
  r = run_cli(NO_SETTINGS, ARGS("inspect", "/nonexistent/m.onnx"));
  expect_status(&r, 66);
  assert_non_null(strstr(r.err, "/nonexistent/m.onnx"));
  r = run_cli(NO_SETTINGS, ARGS("inspect"));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("inspect", pb, pb));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("inspect", "--bogus", pb));
  expect_status(&r, 64);
}

/* ember run on the CPU and on the test double's GPU: the .npy written
 * holds the node test's expected output, the summary its shape and sum. */
static void test_onnx_run(void **state) {
  (void)state;
  NEED_CLI();
  NEED_ONNX_TESTDATA();
  const char *x = npy_of_pb("test_add_bcast", "input_0.pb", "add_x");
  const char *y = npy_of_pb("test_add_bcast", "input_1.pb", "add_y");
  char xa[PATH_MAX + 8], ya[PATH_MAX + 8], dir[PATH_MAX], out[PATH_MAX + 16];
  snprintf(xa, sizeof xa, "x=%s", x);
  snprintf(ya, sizeof ya, "y=%s", y);
  static const char *const devices[] = {"cpu", "cuda:0"};
  for (int d = 0; d < 2; d++) {
    snprintf(dir, sizeof dir, "%s/run_out_%d", tmp_root, d);
    run_result r = run_cli(SETTINGS("FAKECUDA_DEVICES=9.0=NVIDIA H100 80GB HBM3"),
                           ARGS("run", onnx_model("test_add_bcast"), "--input", xa, "--input", ya, "--device",
                                devices[d], "--output-dir", dir, "--json"));
    expect_status(&r, 0);
    json_t *j = parse(&r);
    assert_string_equal(str_at(j, "device"), devices[d]);
    json_t *o = json_array_get(array_at(j, "outputs"), 0);
    assert_string_equal(str_at(o, "name"), "sum");
    assert_string_equal(str_at(o, "dtype"), "f32");
    snprintf(out, sizeof out, "%s/sum.npy", dir);
    assert_string_equal(str_at(o, "file"), out);
    expect_npy_matches(out, "test_add_bcast", "(3, 4, 5)");
    em_onnx_tensor *want = onnx_pb("test_add_bcast", "output_0.pb");
    double sum = 0;
    for (size_t i = 0; i < want->n_elements; i++) sum += ((const float *)want->data)[i];
    em_onnx_tensor_free(want);
    double got = json_real_value(json_object_get(o, "sum"));
    if (fabs(got - sum) > 1e-3 * (1 + fabs(sum))) fail_msg("summary sum %.9g, expected %.9g", got, sum);
  }
  /* Reshape's shape comes in as an int64 .npy and is folded at load. */
  const char *data = npy_of_pb("test_reshape_reordered_all_dims", "input_0.pb", "rs_data");
  const char *shape = npy_of_pb("test_reshape_reordered_all_dims", "input_1.pb", "rs_shape");
  snprintf(xa, sizeof xa, "data=%s", data);
  snprintf(ya, sizeof ya, "shape=%s", shape);
  snprintf(dir, sizeof dir, "%s/run_reshape", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("run", onnx_model("test_reshape_reordered_all_dims"), "--input", xa, "--input",
                                           ya, "--device", "cpu", "--mode", "portable", "--output-dir", dir));
  expect_status(&r, 0);
  if (!strstr(r.out, "output reshaped: f32[4,2,3]") || !strstr(r.out, "run ")) fail_msg("summary: %.600s", r.out);
  snprintf(out, sizeof out, "%s/reshaped.npy", dir);
  expect_npy_matches(out, "test_reshape_reordered_all_dims", "(4, 2, 3)");
}

/* ember export: a checkpoint of `ember train` as an ONNX model that
 * `ember inspect` describes (the numbers of exported models are checked in
 * test_onnx_export); the refusals name the problem. */
static void test_export_checkpoint(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16], model[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/export_mlp.ckpt", tmp_root);
  snprintf(model, sizeof model, "%s/export_mlp.onnx", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--model", "mlp", "--hidden", "8", "--data", small_data,
                                           "--epochs", "1", "--batch", "100", "--device", "cpu", "--checkpoint", ckpt));
  expect_status(&r, 0);
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "--model", "mlp", "-o", model, "--opset", "13"));
  expect_status(&r, 0);
  if (!strstr(r.out, "output 'logits', opset 13") || !strstr(r.out, "standardised with mean"))
    fail_msg("export summary: %.600s", r.out);
  r = run_cli(NO_SETTINGS, ARGS("inspect", model));
  expect_status(&r, 0);
  if (!strstr(r.out, "[N, 1, 28, 28]") || !strstr(r.out, "[N, 10]") || !strstr(r.out, "ai.onnx 13") ||
      !strstr(r.out, "producer: ember"))
    fail_msg("inspect of the exported model: %.900s", r.out);
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "--model", "lenet", "-o", model));
  expect_status(&r, 65);
  assert_non_null(strstr(r.err, "holds a mlp model, not lenet"));
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "--output", "loss", "-o", model));
  expect_status(&r, 1);
  assert_non_null(strstr(r.err, "cross_entropy_with_softmax"));
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "--output", "nothing", "-o", model));
  expect_status(&r, 65);
  r = run_cli(NO_SETTINGS, ARGS("export", "/nonexistent/x.ckpt", "-o", model));
  expect_status(&r, 66);
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "-o", model, "--opset", "12"));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "-o", "/nonexistent-dir/m.onnx"));
  expect_status(&r, 73);
  /* -o naming the checkpoint itself is refused: the trained model stays. */
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "-o", ckpt));
  expect_status(&r, 64);
  assert_non_null(strstr(r.err, "is the checkpoint itself"));
  r = run_cli(NO_SETTINGS, ARGS("checkpoint", "inspect", ckpt));
  expect_status(&r, 0);
}

/* The LeNet of `ember train --model lenet` (batch norm, dropout), exported
 * by `ember export`: the model loaded back by Ember computes the
 * checkpoint's logits bit for bit (its graph run here on the same images),
 * and onnxruntime gets them within 1e-5 + 1e-4 |x| (test_export_lenet_onnxruntime). */
static void test_export_lenet_round_trip(void **state) {
  (void)state;
  NEED_DATA();
  char ckpt[PATH_MAX + 16], model[PATH_MAX + 16];
  snprintf(ckpt, sizeof ckpt, "%s/export_lenet.ckpt", tmp_root);
  snprintf(model, sizeof model, "%s/export_lenet.onnx", tmp_root);
  run_result r = run_cli(NO_SETTINGS, ARGS("train", "--model", "lenet", "--channels", "4,6", "--hidden", "16,12",
                                           "--batch-norm", "--dropout", "0.25", "--data", small_data, "--epochs", "1",
                                           "--batch", "100", "--device", "cpu", "--checkpoint", ckpt));
  expect_status(&r, 0);
  r = run_cli(NO_SETTINGS, ARGS("export", ckpt, "--model", "lenet", "-o", model));
  expect_status(&r, 0);
  if (!strstr(r.out, "the lenet model of")) fail_msg("export summary: %.600s", r.out);
  /* The checkpoint's own graph on a few images (any values: standardised pixels). */
  em_checkpoint *c;
  em_graph *g;
  em_var x, logits;
  if (em_checkpoint_load(ckpt, &c) || em_checkpoint_take_graph(c, &g)) fail_msg("%s", em_last_error());
  em_checkpoint_free(c);
  if (em_graph_lookup(g, "x", &x) || em_graph_lookup(g, "logits", &logits)) fail_msg("%s", em_last_error());
  float px[3 * 28 * 28];
  uint32_t st = 12345;
  for (size_t i = 0; i < sizeof px / sizeof px[0]; i++) {
    st ^= st << 13, st ^= st >> 17, st ^= st << 5;
    px[i] = (float)((double)(st % 2000) / 1000.0 - 1.0);
  }
  em_tensor *xv, *want, *got;
  if (em_tensor_from_host(em_cpu(), EM_F32, 4, (int64_t[]){3, 1, 28, 28}, px, sizeof px, &xv)) fail_msg("%s", em_last_error());
  /* Portable mode on both sides: the same ops in the same order give the
   * same bits (fast mode promises a tolerance only: the export writes the
   * dense layers as Gemm, whose OpenBLAS call may sum in another order). */
  em_exec *e;
  if (em_exec_create(g, &logits, 1, em_cpu(), &e) || em_exec_set_mode(e, EM_MODE_PORTABLE) ||
      em_exec_run(e, &(em_feed){x, xv}, 1, &want))
    fail_msg("the checkpoint's graph: %s", em_last_error());
  em_onnx *m;
  em_named_tensor in = {"x", xv};
  if (em_onnx_load(model, &(em_onnx_options){.mode = EM_ONNX_MODE_PORTABLE}, &m) || em_onnx_run(m, &in, 1, &got))
    fail_msg("the exported model: %s", em_last_error());
  assert_int_equal(em_tensor_numel(got), 3 * 10);
  assert_int_equal(em_tensor_numel(want), 3 * 10);
  float a[30], b[30];
  if (em_tensor_to_host(got, a, sizeof a) || em_tensor_to_host(want, b, sizeof b)) fail_msg("%s", em_last_error());
  assert_memory_equal(a, b, sizeof a);
  /* For onnxruntime: the file as `ember export` wrote it. */
  if (!exports.root[0] && ts_ort_init(&exports, "ember_cli_export")) fail_msg("mkdtemp: %s", strerror(errno));
  FILE *f = fopen(model, "rb");
  assert_non_null(f);
  static unsigned char bytes[1 << 20];
  size_t size = fread(bytes, 1, sizeof bytes, f);
  fclose(f);
  assert_true(size > 0 && size < sizeof bytes);
  ts_ort_keep(&exports, "lenet_ember_export", NULL, 0, bytes, size, &in, 1, &want, 1);
  em_tensor_release(got), em_tensor_release(want), em_tensor_release(xv);
  em_onnx_free(m);
  em_exec_free(e);
  em_graph_free(g);
}

static void test_export_lenet_onnxruntime(void **state) {
  (void)state;
  NEED_DATA();
  if (!exports.n) fail_msg("no exported LeNet (test_export_lenet_round_trip makes it)");
  ts_ort_check(&exports);
}

static void test_onnx_run_errors(void **state) {
  (void)state;
  NEED_CLI();
  NEED_ONNX_TESTDATA();
  const char *model = onnx_model("test_add_bcast");
  const char *x = npy_of_pb("test_add_bcast", "input_0.pb", "err_x");
  char xa[PATH_MAX + 8], dir[PATH_MAX], bad[PATH_MAX];
  snprintf(xa, sizeof xa, "x=%s", x);
  snprintf(dir, sizeof dir, "%s/run_err", tmp_root);
  /* y not given: refused before anything runs, naming it. */
  run_result r = run_cli(NO_SETTINGS, ARGS("run", model, "--input", xa, "--device", "cpu", "--output-dir", dir));
  expect_status(&r, 64);
  if (!strstr(r.err, "no --input") || !strstr(r.err, " y")) fail_msg("missing input not named: %.400s", r.err);
  char za[PATH_MAX + 8];
  snprintf(za, sizeof za, "z=%s", x);
  r = run_cli(NO_SETTINGS, ARGS("run", model, "--input", xa, "--input", za, "--device", "cpu"));
  expect_status(&r, 64);
  assert_non_null(strstr(r.err, "'z'"));
  /* x's file for y: y is declared [5], the file holds [3, 4, 5]. */
  snprintf(za, sizeof za, "y=%s", x);
  r = run_cli(NO_SETTINGS, ARGS("run", model, "--input", xa, "--input", za, "--device", "cpu", "--output-dir", dir));
  expect_status(&r, 64);
  if (!strstr(r.err, "'y'") || !strstr(r.err, "shape [5]")) fail_msg("shape mismatch not named: %.400s", r.err);
  r = run_cli(NO_SETTINGS, ARGS("run", model, "--input", "x"));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("run", model, "--mode", "quick"));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("run"));
  expect_status(&r, 64);
  r = run_cli(NO_SETTINGS, ARGS("run", "/nonexistent/m.onnx"));
  expect_status(&r, 66);
  /* A missing .npy (66), a malformed one (65), a Fortran-order one (65). */
  char ya[PATH_MAX + 8];
  snprintf(ya, sizeof ya, "y=%s/none.npy", tmp_root);
  r = run_cli(NO_SETTINGS, ARGS("run", model, "--input", xa, "--input", ya, "--device", "cpu"));
  expect_status(&r, 66);
  assert_non_null(strstr(r.err, "none.npy"));
  snprintf(bad, sizeof bad, "%s/fortran.npy", tmp_root);
  FILE *f = fopen(bad, "wb");
  assert_non_null(f);
  fwrite("\x93NUMPY\x01\x00\x76\x00", 1, 10, f); /* a 118-byte header */
  fprintf(f, "%-117s\n", "{'descr': '<f4', 'fortran_order': True, 'shape': (5,), }");
  fwrite("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 1, 20, f);
  fclose(f);
  snprintf(ya, sizeof ya, "y=%s", bad);
  r = run_cli(NO_SETTINGS, ARGS("run", model, "--input", xa, "--input", ya, "--device", "cpu"));
  expect_status(&r, 65);
  if (!strstr(r.err, "Fortran") || !strstr(r.err, "fortran.npy")) fail_msg("%.400s", r.err);
  /* A model with an op Ember lacks, every input given: exit 1 naming it. */
  const char *bx = npy_of_pb("test_bernoulli", "input_0.pb", "b_x");
  char a0[PATH_MAX + 8];
  snprintf(a0, sizeof a0, "x=%s", bx);
  r = run_cli(NO_SETTINGS, ARGS("run", onnx_model("test_bernoulli"), "--input", a0, "--device", "cpu", "--output-dir",
                                dir));
  expect_status(&r, 1);
  if (!strstr(r.err, "Bernoulli") || !strstr(r.err, "node 0 of 1")) fail_msg("%.400s", r.err);
  /* --help of both commands. */
  r = run_cli(NO_SETTINGS, ARGS("run", "--help"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.out, "usage: ember run"));
  assert_non_null(strstr(r.out, "Exit codes"));
  r = run_cli(NO_SETTINGS, ARGS("inspect", "--help"));
  expect_status(&r, 0);
  assert_non_null(strstr(r.out, "usage: ember inspect"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_devices_json_mixed_fleet, free_owned),
      cmocka_unit_test_teardown(test_devices_text, free_owned),
      cmocka_unit_test_teardown(test_devices_without_driver, free_owned),
      cmocka_unit_test_teardown(test_devices_cpu_blas, free_owned),
      cmocka_unit_test_teardown(test_devices_cpu_blas_load_error, free_owned),
      cmocka_unit_test_teardown(test_devices_cpu_convolution, free_owned),
      cmocka_unit_test_teardown(test_devices_strict_refusal, free_owned),
      cmocka_unit_test_teardown(test_images_json, free_owned),
      cmocka_unit_test_teardown(test_images_of_file_equal_own_table, free_owned),
      cmocka_unit_test_teardown(test_images_of_non_ember_file, free_owned),
      cmocka_unit_test_teardown(test_selftest_through_fake, free_owned),
      cmocka_unit_test_teardown(test_selftest_every_path_through_fake, free_owned),
      cmocka_unit_test_teardown(test_ops_json, free_owned),
      cmocka_unit_test_teardown(test_usage_errors, free_owned),
      cmocka_unit_test_teardown(test_help_on_every_command, free_owned),
      cmocka_unit_test_teardown(test_train_usage_errors, free_owned),
      cmocka_unit_test_teardown(test_train_eval_resume, free_owned),
      cmocka_unit_test_teardown(test_train_diverges, free_owned),
      cmocka_unit_test_teardown(test_train_augmentation_and_l2, free_owned),
      cmocka_unit_test_teardown(test_train_precision, free_owned),
      cmocka_unit_test_teardown(test_train_resume_schedule_and_crafted_settings, free_owned),
      cmocka_unit_test_teardown(test_train_augmentation_resume_and_splits, free_owned),
      cmocka_unit_test_teardown(test_train_weight_decay_zero, free_owned),
      cmocka_unit_test_teardown(test_train_data_errors, free_owned),
      cmocka_unit_test_teardown(test_train_lstm_sequences, free_owned),
      cmocka_unit_test_teardown(test_onnx_inspect, free_owned),
      cmocka_unit_test_teardown(test_onnx_run, free_owned),
      cmocka_unit_test_teardown(test_onnx_run_errors, free_owned),
      cmocka_unit_test_teardown(test_export_checkpoint, free_owned),
      cmocka_unit_test_teardown(test_export_lenet_round_trip, free_owned),
      cmocka_unit_test_teardown(test_export_lenet_onnxruntime, free_owned),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
