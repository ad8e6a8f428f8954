/* Tests of `gpucheck fleet`: host reports in, one verdict per host and GPU
 * out, with or without a binary; malformed reports refused with exit 65.
 *
 * The three host reports of the acceptance test (a K80 host on a CUDA 11.4
 * driver, a T4 host on 12.2, an H100 host on 13.0) are made at test time by
 * the real `gpucheck --json` with the fake libcuda ($FAKECUDA_LIB); where the
 * host command cannot make them, the hand-written reports of
 * tests/fixtures/fleet/ (written from tools/gpucheck/SCHEMA.md) stand in.
 * The binary is built at test time with nvcc: cubins for sm_75 and sm_90
 * only, no PTX. Expected verdicts, from the rules of
 * shared/reference/cuda-compat.md (3.2: a cubin sm_XY runs on CC X.Z, Z >= Y,
 * same major; PTX compute_XY on any CC >= X.Y if the driver knows its ISA;
 * 2.2: a driver loads cubins of its own CUDA major or older):
 *   K80, CC 3.7:  no cubin of major 3, no PTX                 -> no-image (209), cannot run
 *   T4, CC 7.5:   sm_75 cubin fits, but made by CUDA 13.0 and the driver
 *                 is 12.2 (another major)                      -> cubin-too-new, cannot run
 *   H100, CC 9.0: sm_90 cubin, CUDA 13.0 on a 13.0 driver      -> native, runs
 * so "1 of 3 hosts can run" it, and the exit code is 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpucheck.h"
#include "images.h"

static const char *src_dir = ".", *fake;
/* Sizes bounded well below PATH_MAX so that every command line built from them fits. */
static char cli[1024], tmp[512];
static char reports[3][1100]; /* the K80, T4 and H100 host reports */
static int generated;             /* 1: made by `gpucheck --json`; 0: the hand-written fixtures */

/* ---- helpers ---- */

static char *slurp(FILE *f) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (;;) {
    if (n + 1 >= cap) {
      char *t = realloc(buf, cap *= 2);
      if (!t) return free(buf), NULL;
      buf = t;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    if (!got) break;
    n += got;
  }
  buf[n] = '\0';
  return buf;
}

typedef struct run_result {
  int status;
  char *out, *err;
} run_result;

static run_result ran; /* freed by the teardown */

static int free_run(void **state) {
  (void)state;
  free(ran.out), free(ran.err);
  memset(&ran, 0, sizeof ran);
  return 0;
}

/* Runs a shell command line; stdout and stderr are kept in `ran`. */
static run_result *run(const char *cmdline) {
  free_run(NULL);
  char cmd[8192], errfile[PATH_MAX + 16];
  snprintf(errfile, sizeof errfile, "%s/stderr", tmp);
  snprintf(cmd, sizeof cmd, "%s 2>'%s'", cmdline, errfile);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  ran.out = slurp(p);
  int ws = pclose(p);
  ran.status = ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  FILE *e = fopen(errfile, "r");
  ran.err = e ? slurp(e) : strdup("");
  if (e) fclose(e);
  assert_non_null(ran.out);
  assert_non_null(ran.err);
  return &ran;
}

static void write_file(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  fclose(f);
}

/* tmp/<name> holding text; returns its path (static slots, reused). */
static const char *tmp_file(const char *name, const char *text) {
  static char paths[16][PATH_MAX];
  static int next;
  char *p = paths[next++ % 16];
  snprintf(p, PATH_MAX, "%s/%s", tmp, name);
  write_file(p, text, strlen(text));
  return p;
}

/* A minimal valid host report (SCHEMA.md) with these GPUs and checks. */
static const char *host_report(const char *name, const char *hostname, const char *driver, const char *gpus,
                               const char *checks) {
  char text[8192];
  snprintf(text, sizeof text,
           "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"verdict\":\"ok\",\"exit_code\":0,"
           "\"facts\":{\"hostname\":\"%s\",\"driver\":%s,\"gpus\":[%s]},"
           "\"sections\":[{\"name\":\"checks\",\"checks\":[%s]}]}",
           hostname, driver, gpus, checks);
  return tmp_file(name, text);
}

/* ---- running fleet in-process ---- */

typedef struct fleet_answer {
  int rc;
  gc_report *rep;
  json_t *json, *facts;
} fleet_answer;

static fleet_answer fa;

static int free_fleet(void **state) {
  (void)state;
  json_decref(fa.json);
  gc_report_free(fa.rep);
  memset(&fa, 0, sizeof fa);
  return free_run(NULL);
}

/* gpucheck fleet ARGS... (NULL-terminated), as --json so nothing is printed. */
static fleet_answer *fleet(const char *first, ...) {
  free_fleet(NULL);
  char *argv[32] = {"fleet"};
  int argc = 1;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = (char *)a;
  va_end(ap);
  gc_opts o = {.json = 1};
  fa.rc = gc_cmd_fleet(argc, argv, &o, &fa.rep);
  if (fa.rc == 0) {
    assert_non_null(fa.rep);
    fa.json = gc_report_json(fa.rep);
    assert_non_null(fa.json);
    fa.facts = json_object_get(fa.json, "facts");
    assert_true(json_is_object(fa.facts));
  } else {
    assert_null(fa.rep);
  }
  return &fa;
}

static json_t *host_at(json_t *facts, size_t i) {
  json_t *h = json_array_get(json_object_get(facts, "hosts"), i);
  if (!json_is_object(h)) fail_msg("facts.hosts[%zu] missing", i);
  return h;
}

static json_t *gpu_at(json_t *facts, size_t host, size_t gpu) {
  json_t *g = json_array_get(json_object_get(host_at(facts, host), "gpus"), gpu);
  if (!json_is_object(g)) fail_msg("facts.hosts[%zu].gpus[%zu] missing", host, gpu);
  return g;
}

static const char *str(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) fail_msg("\"%s\" is not a string", key);
  return json_string_value(v);
}

static void expect_gpu(json_t *facts, size_t host, size_t gpu, const char *verdict, const char *run_kind) {
  json_t *g = gpu_at(facts, host, gpu);
  if (strcmp(str(g, "verdict"), verdict))
    fail_msg("host %zu GPU %zu: verdict %s, expected %s (why: %s)", host, gpu, str(g, "verdict"), verdict, str(g, "why"));
  if (run_kind) assert_string_equal(str(g, "run"), run_kind);
  else assert_null(json_object_get(g, "run"));
}

static json_int_t summary(json_t *facts, const char *key) {
  json_t *v = json_object_get(json_object_get(facts, "summary"), key);
  if (!json_is_integer(v)) fail_msg("facts.summary.%s is not an integer", key);
  return json_integer_value(v);
}

/* ---- setup: the three host reports ---- */

static int make_report(const char *out, const char *devices, int driver, const char *cc) {
  if (!cli[0] || !fake || access(cli, X_OK)) return -1;
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "env -u CUDA_VISIBLE_DEVICES -u EMBER_FORCE -u EMBER_STRICT -u FAKECUDA_FAIL -u FAKECUDA_STUB "
           "-u GPUCHECK_ROOT EMBER_LIBCUDA='%s' EMBER_CACHE_DIR='%s/cache' 'FAKECUDA_DEVICES=%s' "
           "FAKECUDA_DRIVER=%d '%s' --json > '%s' 2>/dev/null",
           fake, tmp, devices, driver, cli, out);
  int st = system(cmd);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) > 2) return -1;
  /* Use it only if it is the host report SCHEMA.md describes, for this fake GPU. */
  json_error_t e;
  json_t *j = json_load_file(out, 0, &e);
  int ok = j && json_is_string(json_object_get(j, "schema")) &&
           !strcmp(json_string_value(json_object_get(j, "schema")), "gpucheck/1");
  json_t *facts = json_object_get(j, "facts");
  json_t *g0 = json_array_get(json_object_get(facts, "gpus"), 0);
  ok = ok && json_is_string(json_object_get(g0, "cc")) && !strcmp(json_string_value(json_object_get(g0, "cc")), cc) &&
       json_integer_value(json_object_get(json_object_get(facts, "driver"), "cuda")) == driver;
  json_decref(j);
  return ok ? 0 : -1;
}

static int group_setup(void **state) {
  (void)state;
  const char *s = getenv("EMBER_SRC_DIR");
  if (s && *s) src_dir = s;
  fake = getenv("FAKECUDA_LIB");
  const char *build = getenv("EMBER_BUILD_DIR");
  if (build && *build) snprintf(cli, sizeof cli, "%s/bin/gpucheck", build);
  const char *t = getenv("TMPDIR");
  snprintf(tmp, sizeof tmp, "%s/ember-gc-fleet-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmp)) return -1;

  static const struct {
    const char *file, *devices, *cc;
    int driver;
  } hosts[3] = {{"k80", "3.7=Tesla K80", "3.7", 11040},
                {"t4", "7.5=Tesla T4", "7.5", 12020},
                {"h100", "9.0=NVIDIA H100 80GB HBM3", "9.0", 13000}};
  generated = 1;
  for (int i = 0; i < 3; i++) {
    snprintf(reports[i], sizeof reports[i], "%s/%s.json", tmp, hosts[i].file);
    if (make_report(reports[i], hosts[i].devices, hosts[i].driver, hosts[i].cc)) generated = 0;
  }
  if (!generated) {
    fprintf(stderr, "test_gc_fleet: `gpucheck --json` with the fake driver did not give host reports: using the "
                    "hand-written ones of tests/fixtures/fleet\n");
    for (int i = 0; i < 3; i++)
      snprintf(reports[i], sizeof reports[i], "%s/tests/fixtures/fleet/%s.json", src_dir, hosts[i].file);
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  return system(cmd) == 0 ? 0 : -1;
}

/* 1 if the image reader (images.c) reads this file; the --binary tests need it. */
static int images_work(const char *path) {
  gc_image_set set;
  char err[512];
  int ok = gc_images_read(path, &set, err, sizeof err) == 0 && set.n > 0;
  gc_images_free(&set);
  return ok;
}

static void fixture(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/tests/fixtures/%s", src_dir, name);
}

/* ---- the acceptance test: three hosts, one binary ---- */

static void test_three_hosts_binary(void **state) {
  (void)state;
  if (!cli[0] || access(cli, X_OK)) skip();
  char nvcc[1024] = "";
  run("command -v nvcc || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; }");
  if (sscanf(ran.out, "%1023s", nvcc) != 1) skip(); /* no nvcc here */
  char cmd[8192], bin[520], cu[520];
  snprintf(cu, sizeof cu, "%s/x.cu", tmp);
  snprintf(bin, sizeof bin, "%s/x", tmp);
  const char *source = "__global__ void scale(float *x, float a, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= a;\n}\n"
                       "int main() { return 0; }\n";
  write_file(cu, source, strlen(source));
  snprintf(cmd, sizeof cmd, "'%s' --version", nvcc);
  int major = 0, minor = 0;
  const char *rel = strstr(run(cmd)->out, "release ");
  if (!rel || sscanf(rel, "release %d.%d", &major, &minor) != 2) skip();
  snprintf(cmd, sizeof cmd, "'%s' -gencode arch=compute_75,code=sm_75 -gencode arch=compute_90,code=sm_90 -o '%s' '%s'",
           nvcc, bin, cu);
  if (run(cmd)->status != 0) skip(); /* this nvcc cannot build sm_75 + sm_90 */
  if (!images_work(bin)) skip();     /* images.c not built yet */
  /* A CUDA 13 cubin on a 12.2 driver is another major: too new. A CUDA 12.x
   * cubin would load there (minor-version compatibility). */
  const char *t4_run = major >= 13 ? "cubin-too-new" : "native";
  if (major < 12) skip();

  snprintf(cmd, sizeof cmd, "'%s' fleet --json '%s' '%s' '%s' --binary '%s'", cli, reports[0], reports[1], reports[2],
           bin);
  run(cmd);
  assert_int_equal(ran.status, 1);
  json_error_t e;
  json_t *j = json_loads(ran.out, 0, &e);
  if (!j) fail_msg("not JSON: %s\n%.500s", e.text, ran.out);
  json_t *facts = json_object_get(j, "facts");
  expect_gpu(facts, 0, 0, "fail", "no-image");
  expect_gpu(facts, 1, 0, major >= 13 ? "fail" : "ok", t4_run);
  expect_gpu(facts, 2, 0, "ok", "native");
  assert_true(json_is_false(json_object_get(host_at(facts, 0), "can_run")));
  assert_true(json_is_true(json_object_get(host_at(facts, 2), "can_run")));
  assert_int_equal(summary(facts, "hosts"), 3);
  assert_int_equal(summary(facts, "can_run"), major >= 13 ? 1 : 2);
  assert_string_equal(str(facts, "binary"), bin);
  /* Each host's driver CUDA version made it into the table. */
  assert_int_equal(json_integer_value(json_object_get(host_at(facts, 1), "driver_cuda")), 12020);
  json_decref(j);

  /* The human table, with the summary line. */
  snprintf(cmd, sizeof cmd, "'%s' fleet --no-color '%s' '%s' '%s' --binary '%s'", cli, reports[0], reports[1],
           reports[2], bin);
  run(cmd);
  assert_int_equal(ran.status, 1);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "%d of 3 hosts can run %s", major >= 13 ? 1 : 2, bin);
  if (!strstr(ran.out, want)) fail_msg("no \"%s\" in:\n%s", want, ran.out);
  assert_non_null(strstr(ran.out, "HOST"));
  assert_non_null(strstr(ran.out, "Tesla K80"));
  assert_non_null(strstr(ran.out, "209"));
  if (!generated) fprintf(stderr, "test_three_hosts_binary: ran on the hand-written host reports\n");
}

/* ---- without a binary: the hosts' own verdicts ---- */

static void test_own_verdicts(void **state) {
  (void)state;
  /* The hand-written reports: K80 warns about its GPU (gpu0.arch), T4 is all
   * ok, H100 warns about the whole host (container.libraries: every GPU of it
   * inherits it), the mixed host fails on GPU 0 only. */
  char k80[PATH_MAX], t4[PATH_MAX], h100[PATH_MAX], mixed[PATH_MAX];
  fixture(k80, sizeof k80, "fleet/k80.json");
  fixture(t4, sizeof t4, "fleet/t4.json");
  fixture(h100, sizeof h100, "fleet/h100.json");
  fixture(mixed, sizeof mixed, "fleet/mixed.json");
  fleet(k80, t4, h100, mixed, NULL);
  assert_int_equal(fa.rc, 0);
  expect_gpu(fa.facts, 0, 0, "warn", NULL);
  assert_non_null(strstr(str(gpu_at(fa.facts, 0, 0), "why"), "gpu0.arch"));
  expect_gpu(fa.facts, 1, 0, "ok", NULL);
  expect_gpu(fa.facts, 2, 0, "warn", NULL);
  assert_non_null(strstr(str(gpu_at(fa.facts, 2, 0), "why"), "container.libraries"));
  expect_gpu(fa.facts, 3, 0, "fail", NULL);
  expect_gpu(fa.facts, 3, 1, "ok", NULL);
  assert_string_equal(str(gpu_at(fa.facts, 3, 0), "fix"), "exclude it with CUDA_VISIBLE_DEVICES=1");
  assert_string_equal(str(host_at(fa.facts, 0), "hostname"), "k80-node");
  assert_int_equal(json_integer_value(json_object_get(host_at(fa.facts, 0), "driver_cuda")), 11040);
  assert_true(json_is_null(json_object_get(fa.facts, "binary")));
  /* Warnings still pass; the mixed host passes on some GPUs only. */
  assert_int_equal(summary(fa.facts, "can_run"), 3);
  assert_int_equal(summary(fa.facts, "some_gpus"), 1);
  assert_int_equal(gc_report_exit_code(fa.rep), GC_EXIT_FAIL);
}

static void test_check_ids_name_gpus(void **state) {
  (void)state;
  /* gpu1.* and ember.gpu0 are about one GPU each; gpu10.* is GPU 10's, not
   * GPU 1's; driver.* is about the host (and ok here). */
  const char *r = host_report(
      "ids.json", "ids", "{\"cuda\":13000,\"state\":\"ok\"}",
      "{\"index\":0,\"name\":\"A\",\"cc\":\"9.0\"},{\"index\":1,\"name\":\"B\",\"cc\":\"9.0\"}",
      "{\"id\":\"driver.cuda\",\"verdict\":\"ok\",\"title\":\"t\"},"
      "{\"id\":\"ember.gpu0\",\"verdict\":\"warn\",\"title\":\"plan of 0\"},"
      "{\"id\":\"gpu1.arch\",\"verdict\":\"fail\",\"title\":\"arch of 1\",\"fix\":\"f1\"},"
      "{\"id\":\"gpu10.arch\",\"verdict\":\"fail\",\"title\":\"arch of 10\"},"
      "{\"id\":\"gpu1\",\"verdict\":\"info\",\"title\":\"GPU 1\"}");
  fleet(r, NULL);
  assert_int_equal(fa.rc, 0);
  expect_gpu(fa.facts, 0, 0, "warn", NULL);
  assert_non_null(strstr(str(gpu_at(fa.facts, 0, 0), "why"), "plan of 0"));
  expect_gpu(fa.facts, 0, 1, "fail", NULL);
  assert_non_null(strstr(str(gpu_at(fa.facts, 0, 1), "why"), "arch of 1"));
  assert_string_equal(str(gpu_at(fa.facts, 0, 1), "fix"), "f1");
}

/* ---- --binary with committed fixtures (no nvcc needed) ---- */

static void test_binary_rules(void **state) {
  (void)state;
  /* k_default.fatbin (tests/fixtures/README.md): sm_80 and sm_90 cubins and
   * compute_90 PTX, all from nvcc 13.0 (PTX ISA 9.0, which a CUDA 13.0
   * driver JITs and a 12.8 one does not: reference 1 note 3). */
  char bin[PATH_MAX];
  fixture(bin, sizeof bin, "k_default.fatbin");
  if (!images_work(bin)) skip();
  const char *ok_drv = "{\"kernel_module\":\"580.65.06\",\"cuda\":13000,\"state\":\"ok\"}";
  const char *r[7] = {
      host_report("b200.json", "b200", ok_drv, "{\"index\":0,\"name\":\"NVIDIA B200\",\"cc\":\"10.0\"}", ""),
      host_report("b200old.json", "b200-old", "{\"cuda\":12080,\"state\":\"ok\"}",
                  "{\"index\":0,\"name\":\"NVIDIA B200\",\"cc\":\"10.0\"}", ""),
      host_report("a100.json", "a100", ok_drv, "{\"index\":0,\"name\":\"A100\",\"cc\":\"8.0\"}", ""),
      host_report("a100old.json", "a100-old", "{\"cuda\":12020,\"state\":\"ok\"}",
                  "{\"index\":0,\"name\":\"A100\",\"cc\":\"8.0\"}", ""),
      host_report("stub.json", "stubbed", "{\"cuda\":null,\"state\":\"stub\"}",
                  "{\"index\":0,\"name\":\"H100\",\"cc\":\"9.0\"}", ""),
      host_report("nocc.json", "nocc", ok_drv, "{\"index\":0,\"name\":null,\"cc\":null}", ""),
      host_report("nogpu.json", "nogpu", ok_drv, "", ""),
  };
  fleet(r[0], r[1], r[2], r[3], r[4], r[5], r[6], "--binary", bin, NULL);
  assert_int_equal(fa.rc, 0);
  expect_gpu(fa.facts, 0, 0, "warn", "ptx-jit");        /* CC 10.0: no cubin of major 10; PTX 9.0 <= 10.0, ISA 9.0 on 13.0 */
  expect_gpu(fa.facts, 1, 0, "fail", "ptx-too-new");    /* the same PTX on a 12.8 driver */
  expect_gpu(fa.facts, 2, 0, "ok", "native");           /* sm_80 cubin on CC 8.0 */
  expect_gpu(fa.facts, 3, 0, "fail", "cubin-too-new");  /* CUDA 13.0 cubin, 12.2 driver; PTX 9.0 > CC 8.0 */
  expect_gpu(fa.facts, 4, 0, "fail", NULL);             /* the stub driver runs nothing */
  assert_non_null(strstr(str(gpu_at(fa.facts, 4, 0), "why"), "stub"));
  expect_gpu(fa.facts, 5, 0, "warn", NULL);             /* no CC in the report: cannot tell */
  assert_int_equal(json_array_size(json_object_get(host_at(fa.facts, 6), "gpus")), 0);
  assert_int_equal(summary(fa.facts, "hosts"), 7);
  assert_int_equal(summary(fa.facts, "can_run"), 2);    /* b200 (through JIT) and a100; nocc is in doubt */
  assert_int_equal(gc_report_exit_code(fa.rep), GC_EXIT_FAIL);
  /* The cubin-too-new fix names the CUDA 13 minor-version floor (reference 2.2). */
  assert_non_null(strstr(str(gpu_at(fa.facts, 3, 0), "fix"), "580.65.06"));
}

/* ---- bad input ---- */

static void test_malformed_reports(void **state) {
  (void)state;
  static const struct {
    const char *name, *text;
  } bad[] = {
      {"empty.json", ""},
      {"truncated.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":["},
      {"array.json", "[]"},
      {"noschema.json", "{\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[]}"},
      {"schema2.json", "{\"schema\":\"gpucheck/2\",\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[]}"},
      {"other.json", "{\"schema\":\"ember.devices/1\",\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[]}"},
      {"inspect.json", "{\"schema\":\"gpucheck/1\",\"command\":\"inspect\",\"facts\":{\"files\":[]},\"sections\":[]}"},
      {"nofacts.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"sections\":[]}"},
      {"nogpus.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{},\"sections\":[]}"},
      {"gpusobj.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":{}},\"sections\":[]}"},
      {"idxstr.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[{\"index\":\"0\"}]},\"sections\":[]}"},
      {"idxneg.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[{\"index\":-1}]},\"sections\":[]}"},
      {"cc9.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[{\"index\":0,\"cc\":\"9\"}]},\"sections\":[]}"},
      {"ccnum.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[{\"index\":0,\"cc\":9.0}]},\"sections\":[]}"},
      {"name5.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[{\"index\":0,\"name\":5}]},\"sections\":[]}"},
      {"cudastr.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"driver\":{\"cuda\":\"12.2\"},\"gpus\":[]},\"sections\":[]}"},
      {"drvstr.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"driver\":\"ok\",\"gpus\":[]},\"sections\":[]}"},
      {"host5.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"hostname\":5,\"gpus\":[]},\"sections\":[]}"},
      {"nosections.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[]}}"},
      {"checksobj.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[{\"checks\":{}}]}"},
      {"noid.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[{\"checks\":[{\"verdict\":\"ok\"}]}]}"},
      {"verdict.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[{\"checks\":[{\"id\":\"a\",\"verdict\":\"great\"}]}]}"},
      {"dupkey.json", "{\"schema\":\"gpucheck/1\",\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[]},\"sections\":[]}"},
  };
  char good[PATH_MAX];
  fixture(good, sizeof good, "fleet/t4.json");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *p = tmp_file(bad[i].name, bad[i].text);
    fleet(p, NULL);
    if (fa.rc != GC_EXIT_INPUT) fail_msg("%s: exit %d, expected %d", bad[i].name, fa.rc, GC_EXIT_INPUT);
    fleet(good, p, NULL); /* one bad report among good ones still stops the command */
    assert_int_equal(fa.rc, GC_EXIT_INPUT);
  }
  /* Bytes that are not text at all, and a file that is not there. */
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/binary.json", tmp);
  write_file(path, "\x7f" "ELF\0\0\xff\xfe{", 10);
  assert_int_equal(fleet(path, NULL)->rc, GC_EXIT_INPUT);
  snprintf(path, sizeof path, "%s/missing.json", tmp);
  assert_int_equal(fleet(path, NULL)->rc, GC_EXIT_INPUT);
  /* A binary that is not GPU code. */
  assert_int_equal(fleet(good, "--binary", good, NULL)->rc, GC_EXIT_INPUT);
}

static void test_malformed_messages(void **state) {
  (void)state;
  if (!cli[0] || access(cli, X_OK)) skip();
  /* The message names the file and the field. */
  const char *p = tmp_file("badcc.json", "{\"schema\":\"gpucheck/1\",\"command\":\"host\",\"facts\":{\"gpus\":[{\"index\":0},"
                                         "{\"index\":1,\"cc\":\"sm_90\"}]},\"sections\":[]}");
  char cmd[PATH_MAX * 2];
  snprintf(cmd, sizeof cmd, "'%s' fleet '%s'", cli, p);
  run(cmd);
  assert_int_equal(ran.status, 65);
  assert_non_null(strstr(ran.err, "badcc.json"));
  assert_non_null(strstr(ran.err, "facts.gpus[1].cc"));
  p = tmp_file("notjson.json", "{\"schema\": \"gpucheck/1\",\n  oops }");
  snprintf(cmd, sizeof cmd, "'%s' fleet '%s'", cli, p);
  run(cmd);
  assert_int_equal(ran.status, 65);
  assert_non_null(strstr(ran.err, "notjson.json:2:"));
  assert_non_null(strstr(ran.err, "not valid JSON"));
}

static void test_usage(void **state) {
  (void)state;
  char good[PATH_MAX];
  fixture(good, sizeof good, "fleet/t4.json");
  assert_int_equal(fleet(NULL)->rc, GC_EXIT_USAGE);
  assert_int_equal(fleet("--binary", NULL)->rc, GC_EXIT_USAGE);
  assert_int_equal(fleet(good, "--binary", NULL)->rc, GC_EXIT_USAGE);
  assert_int_equal(fleet(good, "--binary=", NULL)->rc, GC_EXIT_USAGE);
  assert_int_equal(fleet(good, "--frobnicate", NULL)->rc, GC_EXIT_USAGE);
  assert_int_equal(fleet(good, "--binary", good, "--binary", good, NULL)->rc, GC_EXIT_USAGE);
  /* The real binary agrees. */
  if (!cli[0] || access(cli, X_OK)) return;
  char cmd[PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "'%s' fleet", cli);
  assert_int_equal(run(cmd)->status, 64);
}

static void test_text_stays_utf8(void **state) {
  (void)state;
  /* A host name of 200 two-byte characters is cut to fit: never inside a
   * character, so the JSON output stays valid. */
  char name[1024] = "";
  for (int i = 0; i < 200; i++) strcat(name, "\xc3\xa9");
  const char *r = host_report("long.json", name, "{\"cuda\":13000,\"state\":\"ok\"}",
                              "{\"index\":0,\"name\":\"\xe4\xb8\xad\",\"cc\":\"9.0\"}", "");
  fleet(r, NULL);
  assert_int_equal(fa.rc, 0);
  const char *h = str(host_at(fa.facts, 0), "hostname");
  assert_true(strlen(h) > 100 && strlen(h) < 128);
  assert_int_equal(strlen(h) % 2, 0);
  char *dump = json_dumps(fa.json, JSON_ENSURE_ASCII);
  assert_non_null(dump);
  free(dump);
  assert_string_equal(str(gpu_at(fa.facts, 0, 0), "name"), "\xe4\xb8\xad");
}

static void test_same_hostname_told_apart(void **state) {
  (void)state;
  if (!cli[0] || access(cli, X_OK)) skip();
  const char *a = host_report("one.json", "node", "{\"cuda\":13000,\"state\":\"ok\"}", "{\"index\":0,\"cc\":\"9.0\"}", "");
  const char *b = host_report("two.json", "node", "{\"cuda\":13000,\"state\":\"ok\"}", "{\"index\":0,\"cc\":\"8.0\"}", "");
  char cmd[PATH_MAX * 3];
  snprintf(cmd, sizeof cmd, "'%s' fleet --no-color '%s' '%s'", cli, a, b);
  run(cmd);
  assert_int_equal(ran.status, 0);
  assert_non_null(strstr(ran.out, "node (one.json)"));
  assert_non_null(strstr(ran.out, "node (two.json)"));
  assert_non_null(strstr(ran.out, "2 of 2 hosts pass their own checks"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_three_hosts_binary, free_run),
      cmocka_unit_test_teardown(test_own_verdicts, free_fleet),
      cmocka_unit_test_teardown(test_check_ids_name_gpus, free_fleet),
      cmocka_unit_test_teardown(test_binary_rules, free_fleet),
      cmocka_unit_test_teardown(test_malformed_reports, free_fleet),
      cmocka_unit_test_teardown(test_malformed_messages, free_run),
      cmocka_unit_test_teardown(test_usage, free_fleet),
      cmocka_unit_test_teardown(test_text_stays_utf8, free_fleet),
      cmocka_unit_test_teardown(test_same_hostname_told_apart, free_run),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
