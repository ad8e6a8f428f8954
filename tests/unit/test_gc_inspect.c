/* Tests of `gpucheck inspect` and its image layer (tools/gpucheck/images.c,
 * inspect.c).
 *
 * Where the expected values come from (never from the code under test):
 * - nvcc fixtures, built at test time into a temp dir when nvcc is present:
 *   the images expected are the ones the command line asked nvcc for
 *   (-gencode lists), the kernel names are the ones written in the source
 *   below, the toolkit is nvcc's own `--version`, the PTX ISA is the
 *   `.version` line of the PTX nvcc writes (read here with sscanf).
 * - libcublasLt.so (the CUDA toolkit's, a file nobody here wrote): a walk of
 *   its .nv_fatbin section by hand, in this file, with pread and the layouts
 *   of cuda-compat.md 4.2/4.3 (see hand_walk below) — no libelf, no Ember code.
 * - build/lib/libember.so: Ember's public em_image_count/em_image_get.
 * - the verdict table: the rules of cuda-compat.md 3.2 (which CC a cubin or
 *   PTX runs on), 2.2 (a cubin from CUDA >= 11 loads on any driver of its
 *   major; before 11 the driver must be at least the toolkit) and 1 note 3
 *   (PTX ISA 9.0 needs a CUDA 13.0 driver, 8.7 needs 12.8), applied by hand.
 * - the committed fixtures tests/fixtures/k_*.fatbin: what tests/fixtures/
 *   README.md says they hold (sm_80 + sm_90 cubins + compute_90 PTX).
 * - malformed files: ELF files written here byte by byte (<elf.h> structs).
 *
 * CLI tests run $EMBER_BUILD_DIR/bin/gpucheck (set by run_tests.sh) and skip
 * when it is missing. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
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

#include "ember/dispatch.h"
#include "images.h"

static const char *src_dir, *build_dir, *fake_lib;
static char cli[PATH_MAX];   /* "" when the binary is missing */
static char tmp[PATH_MAX];   /* scratch directory of this run */
static int nvcc_toolkit;     /* CUDA version of nvcc (13000), 0 when there is no nvcc */
static int nvcc_ptx_isa;     /* .version of the PTX nvcc wrote, 10*major+minor */
static int serial;

/* The kernels of the nvcc fixture source. */
static const char *const kernel_names[] = {"gc_add", "gc_mul", "gc_fill"};
static const char fixture_cu[] =
    "extern \"C\" __global__ void gc_add(float *x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += a; }\n"
    "extern \"C\" __global__ void gc_mul(float *x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }\n"
    "extern \"C\" __global__ void gc_fill(float *x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = a; }\n"
    "int main(void) { return 0; }\n";

#define GENCODE_A \
  "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"

/* Each fixture: the file, how it is made, and the images asked for. */
typedef struct want {
  gc_image_kind kind;
  int arch;
  char variant;
} want;

typedef struct fixture {
  const char *file, *args;
  const char *format;
  want images[4];
  int n_images;
  int compression; /* -1: not asserted; else every image's */
} fixture;

static const fixture fixtures[] = {
    {"app", "-o app k.cu " GENCODE_A, "elf",
     {{GC_IMG_CUBIN, 80, 0}, {GC_IMG_CUBIN, 90, 0}, {GC_IMG_PTX, 90, 0}}, 3, -1},
    {"app_zstd", "-o app_zstd k.cu " GENCODE_A " -Xfatbin -compress-all", "elf",
     {{GC_IMG_CUBIN, 80, 0}, {GC_IMG_CUBIN, 90, 0}, {GC_IMG_PTX, 90, 0}}, 3, 2},
    {"app_lz4", "-o app_lz4 k.cu " GENCODE_A " -Xfatbin -compress-all --compress-mode=speed", "elf",
     {{GC_IMG_CUBIN, 80, 0}, {GC_IMG_CUBIN, 90, 0}, {GC_IMG_PTX, 90, 0}}, 3, 1},
    {"libk.so",
     "-shared -Xcompiler -fPIC -o libk.so k.cu -gencode arch=compute_90a,code=sm_90a "
     "-gencode arch=compute_100f,code=sm_100f -gencode arch=compute_100f,code=compute_100f",
     "elf", {{GC_IMG_CUBIN, 90, 'a'}, {GC_IMG_CUBIN, 100, 'f'}, {GC_IMG_PTX, 100, 'f'}}, 3, -1},
    {"k.fatbin", "-fatbin -o k.fatbin k.cu " GENCODE_A, "fatbin",
     {{GC_IMG_CUBIN, 80, 0}, {GC_IMG_CUBIN, 90, 0}, {GC_IMG_PTX, 90, 0}}, 3, -1},
    {"k.cubin", "-cubin -arch=sm_86 -o k.cubin k.cu", "cubin", {{GC_IMG_CUBIN, 86, 0}}, 1, 0},
    {"k.ptx", "-ptx -arch=compute_80 -o k.ptx k.cu", "ptx", {{GC_IMG_PTX, 80, 0}}, 1, 0},
};
#define N_FIXTURES (sizeof fixtures / sizeof fixtures[0])

/* ------------------------------------------------------------ helpers --- */

static char *path_in_tmp(const char *name, char *buf, size_t cap) {
  if (snprintf(buf, cap, "%s/%s", tmp, name) >= (int)cap) fail_msg("path too long: %s/%s", tmp, name);
  return buf;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("cannot write %s: %s", path, strerror(errno));
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot read %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  assert_true(len > 0);
  uint8_t *b = malloc((size_t)len);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static const char *fixture_path(const char *name, char *buf, size_t cap) {
  if (snprintf(buf, cap, "%s/tests/fixtures/%s", src_dir, name) >= (int)cap) fail_msg("path too long");
  return buf;
}

/* Reads stdout of a shell command; rc gets its exit status. */
static char *run(const char *cmd, int *rc) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  size_t got;
  while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (len + 1 == cap) {
      cap *= 2;
      out = realloc(out, cap);
      assert_non_null(out);
    }
  }
  out[len] = '\0';
  int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return out;
}

/* The environment of every CLI run: nothing of the caller's driver setup
 * leaks in unless the test sets it (env_extra: "VAR=value ..."). */
static char *run_cli(const char *env_extra, const char *args, int *rc, char *err_out, size_t err_cap) {
  char errfile[PATH_MAX + 32], cmd[16384];
  snprintf(errfile, sizeof errfile, "%s/stderr.%d", tmp, serial++);
  if (snprintf(cmd, sizeof cmd,
           "env -u EMBER_LIBCUDA -u FAKECUDA_DEVICES -u FAKECUDA_DRIVER -u CUDA_VISIBLE_DEVICES -u GPUCHECK_ROOT "
           "EMBER_LIBCUDA=/nonexistent/libcuda.so.1 %s '%s' inspect %s 2>'%s'",
           env_extra ? env_extra : "", cli, args, errfile) >= (int)sizeof cmd)
    fail_msg("command too long");
  char *out = run(cmd, rc);
  if (err_out) {
    err_out[0] = '\0';
    FILE *f = fopen(errfile, "r");
    if (f) {
      size_t n = fread(err_out, 1, err_cap - 1, f);
      err_out[n] = '\0';
      fclose(f);
    }
  }
  return out;
}

static json_t *run_json(const char *env_extra, const char *args, int *rc) {
  char a[4096], err[2048];
  snprintf(a, sizeof a, "--json %s", args);
  char *out = run_cli(env_extra, a, rc, err, sizeof err);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  if (!j) fail_msg("gpucheck inspect %s: not JSON (%s) rc=%d stderr=%s out=%.300s", args, je.text, *rc, err, out);
  free(out);
  return j;
}

#define SKIP_WITHOUT_CLI()                                                       \
  do {                                                                           \
    if (!cli[0]) {                                                               \
      fprintf(stderr, "skipped: %s/bin/gpucheck not built\n", build_dir);        \
      skip();                                                                    \
    }                                                                            \
  } while (0)

#define SKIP_WITHOUT_NVCC()                                                          \
  do {                                                                               \
    if (!nvcc_toolkit) {                                                             \
      fprintf(stderr, "skipped: no nvcc on this host (fixtures are built with it)\n"); \
      skip();                                                                        \
    }                                                                                \
  } while (0)

/* ------------------------------------------------------------- set-up --- */

static const char *find_nvcc(void) {
  static char path[PATH_MAX];
  const char *env = getenv("NVCC");
  if (env && *env && access(env, X_OK) == 0) return env;
  int rc;
  char *out = run("command -v nvcc 2>/dev/null", &rc);
  size_t n = strcspn(out, "\n");
  out[n] = '\0';
  if (rc == 0 && n > 0) snprintf(path, sizeof path, "%s", out);
  else if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0) snprintf(path, sizeof path, "/usr/local/cuda/bin/nvcc");
  free(out);
  return path[0] ? path : NULL;
}

/* Builds every fixture with nvcc (in parallel; each independent). */
static void build_fixtures(void) {
  const char *nvcc = find_nvcc();
  if (!nvcc) {
    fprintf(stderr, "test_gc_inspect: no nvcc: the tests of nvcc-built fixtures are skipped\n");
    return;
  }
  char p[PATH_MAX + 16], cmd[8192];
  write_file(path_in_tmp("k.cu", p, sizeof p), fixture_cu, strlen(fixture_cu));
  snprintf(cmd, sizeof cmd, "'%s' --version", nvcc);
  int rc, major = 0, minor = 0;
  char *out = run(cmd, &rc);
  const char *rel = strstr(out, "release ");
  if (rc == 0 && rel && sscanf(rel, "release %d.%d", &major, &minor) == 2) nvcc_toolkit = major * 1000 + minor * 10;
  free(out);
  if (!nvcc_toolkit) {
    fprintf(stderr, "test_gc_inspect: %s --version unreadable: nvcc fixtures skipped\n", nvcc);
    return;
  }
  size_t len = (size_t)snprintf(cmd, sizeof cmd, "cd '%s' && {", tmp);
  for (size_t i = 0; i < N_FIXTURES; i++)
    len += (size_t)snprintf(cmd + len, sizeof cmd - len, " '%s' %s >/dev/null 2>&1 &", nvcc, fixtures[i].args);
  snprintf(cmd + len, sizeof cmd - len, " wait; }");
  if (system(cmd) != 0) fprintf(stderr, "test_gc_inspect: some nvcc fixture builds failed\n");
  for (size_t i = 0; i < N_FIXTURES; i++)
    if (!exists(path_in_tmp(fixtures[i].file, p, sizeof p)))
      fprintf(stderr, "test_gc_inspect: nvcc could not build %s (%s): its test is skipped\n", fixtures[i].file,
              fixtures[i].args);
  /* The PTX ISA nvcc emits, from its own output. */
  FILE *f = fopen(path_in_tmp("k.ptx", p, sizeof p), "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    int a, b;
    if (sscanf(line, " .version %d.%d", &a, &b) == 2) {
      nvcc_ptx_isa = a * 10 + b;
      break;
    }
  }
  if (f) fclose(f);
}

static int group_setup(void **state) {
  (void)state;
  src_dir = getenv("EMBER_SRC_DIR");
  build_dir = getenv("EMBER_BUILD_DIR");
  fake_lib = getenv("FAKECUDA_LIB");
  if (!src_dir || !*src_dir) src_dir = ".";
  if (!build_dir || !*build_dir) build_dir = "build";
  snprintf(cli, sizeof cli, "%s/bin/gpucheck", build_dir);
  if (access(cli, X_OK) != 0) {
    fprintf(stderr, "test_gc_inspect: %s missing: the CLI tests are skipped\n", cli);
    cli[0] = '\0';
  }
  const char *t = getenv("TMPDIR");
  snprintf(tmp, sizeof tmp, "%s/gc-inspect-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "test_gc_inspect: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  build_fixtures();
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (tmp[0] && system(cmd) != 0) fprintf(stderr, "test_gc_inspect: could not remove %s\n", tmp);
  return 0;
}

/* ------------------------------------------------- nvcc fixtures: read --- */

static int has_kernel(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

static void check_fixture(const fixture *fx) {
  char p[PATH_MAX + 16], err[1024];
  if (!exists(path_in_tmp(fx->file, p, sizeof p))) {
    fprintf(stderr, "skipped: nvcc did not build %s\n", fx->file);
    skip();
  }
  gc_image_set s;
  if (gc_images_read_ex(p, GC_READ_ALL, &s, err, sizeof err) != 0) fail_msg("%s", err);
  assert_string_equal(s.format, fx->format);
  /* The images that hold our kernels are exactly the ones asked for.
   * (nvcc's executables carry a second, kernel-less container of cubins for
   * the same SMs, from its link step: allowed, but it adds no other arch.) */
  int matched[4] = {0};
  for (size_t i = 0; i < s.n; i++) {
    const gc_image *m = &s.images[i];
    int k = -1;
    for (int w = 0; w < fx->n_images; w++)
      if (fx->images[w].kind == m->kind && fx->images[w].arch == m->arch && fx->images[w].variant == m->variant) k = w;
    if (k < 0) fail_msg("%s: image %zu (kind %d, arch %d%c) was not asked for", fx->file, i, m->kind, m->arch,
                        m->variant ? m->variant : ' ');
    if (fx->compression >= 0) assert_int_equal(m->compression, fx->compression);
    if (m->compression) assert_true(m->size < m->uncompressed);
    else assert_true(m->size == m->uncompressed);
    if (m->kind == GC_IMG_PTX) {
      assert_int_equal(m->ptx_isa, nvcc_ptx_isa);
    } else {
      assert_int_equal(m->toolkit, nvcc_toolkit);
      if (nvcc_toolkit >= 13000) assert_int_equal(m->abi_version, 8); /* CUDA 13: ABI V2 for every SM (5.1) */
    }
    if (m->n_kernels == 0) {
      assert_true(m->kind == GC_IMG_CUBIN && !strcmp(fx->format, "elf"));
      continue;
    }
    matched[k]++;
    assert_int_equal(m->n_kernels, 3);
    for (int n = 0; n < 3; n++)
      if (!has_kernel(m->kernels, kernel_names[n])) fail_msg("%s image %zu: kernels '%s' lack %s", fx->file, i, m->kernels, kernel_names[n]);
  }
  for (int w = 0; w < fx->n_images; w++)
    if (matched[w] != 1) fail_msg("%s: image %d of the -gencode list found %d times with kernels", fx->file, w, matched[w]);
  gc_images_free(&s);
}

static void test_fixture_app(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[0]); }
static void test_fixture_app_zstd(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[1]); }
static void test_fixture_app_lz4(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[2]); }
static void test_fixture_shared_af(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[3]); }
static void test_fixture_fatbin(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[4]); }
static void test_fixture_cubin(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[5]); }
static void test_fixture_ptx(void **state) { (void)state; SKIP_WITHOUT_NVCC(); check_fixture(&fixtures[6]); }

/* CUDA 13's default compresses PTX and leaves cubins alone (cuda-compat.md
 * 4.3); the headers-only read still knows kind/arch/ISA/compression, and
 * reads uncompressed cubins in place. */
static void test_fixture_headers_mode(void **state) {
  (void)state;
  SKIP_WITHOUT_NVCC();
  char p[PATH_MAX + 16], err[1024];
  if (!exists(path_in_tmp("app_zstd", p, sizeof p))) skip();
  gc_image_set s;
  if (gc_images_read_ex(p, GC_READ_HEADERS, &s, err, sizeof err) != 0) fail_msg("%s", err);
  assert_true(s.n >= 3);
  for (size_t i = 0; i < s.n; i++) {
    assert_int_equal(s.images[i].compression, 2);
    assert_int_equal(s.images[i].n_kernels, 0); /* not decompressed */
    assert_int_equal(s.images[i].toolkit, 0);
  }
  assert_non_null(strstr(s.note, "not decompressed"));
  gc_images_free(&s);
}

/* Verdicts on real nvcc output, by the rules (see test_verdict_table). */
static void test_fixture_verdicts(void **state) {
  (void)state;
  SKIP_WITHOUT_NVCC();
  char p[PATH_MAX + 16], err[1024];
  gc_image_set s;
  gc_run_verdict v;
  if (!exists(path_in_tmp("app", p, sizeof p))) skip();
  if (gc_images_read(p, &s, err, sizeof err) != 0) fail_msg("%s", err);
  gc_images_verdict(&s, 86, 13000, &v);
  assert_int_equal(v.run, GC_RUN_NATIVE);
  assert_int_equal(s.images[v.image].arch, 80);
  gc_images_verdict(&s, 120, 13000, &v);
  assert_int_equal(v.run, nvcc_ptx_isa <= 90 ? GC_RUN_PTX_JIT : GC_RUN_PTX_TOO_NEW);
  gc_images_verdict(&s, 75, 13000, &v);
  assert_int_equal(v.run, GC_RUN_NO_IMAGE);
  gc_images_verdict(&s, 90, 12020, &v);
  /* A CUDA >= 13 cubin needs a CUDA 13 driver (minor-version compatibility is per major). */
  assert_int_equal(v.run, nvcc_toolkit >= 13000 ? GC_RUN_CUBIN_TOO_NEW : GC_RUN_NATIVE);
  gc_images_free(&s);

  if (!exists(path_in_tmp("libk.so", p, sizeof p))) skip();
  if (gc_images_read(p, &s, err, sizeof err) != 0) fail_msg("%s", err);
  gc_images_verdict(&s, 90, 13000, &v);
  assert_int_equal(v.run, GC_RUN_NATIVE);
  assert_int_equal(s.images[v.image].variant, 'a');
  gc_images_verdict(&s, 103, 13000, &v);
  assert_int_equal(v.run, GC_RUN_NATIVE);
  assert_int_equal(s.images[v.image].arch, 100);
  assert_int_equal(s.images[v.image].variant, 'f');
  gc_images_verdict(&s, 120, 13000, &v); /* f PTX stays in its family */
  assert_int_equal(v.run, GC_RUN_NO_IMAGE);
  gc_images_verdict(&s, 89, 13000, &v);
  assert_int_equal(v.run, GC_RUN_NO_IMAGE);
  gc_images_free(&s);
}

/* ------------------------------------------------- the verdict table --- */

typedef struct set_builder {
  gc_image_set s;
  gc_image img[8];
} set_builder;

static gc_image *add(set_builder *b, gc_image_kind kind, int arch, char variant, int isa_or_toolkit, size_t container) {
  gc_image *m = &b->img[b->s.n++];
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->arch = arch;
  m->variant = variant;
  if (kind == GC_IMG_PTX) m->ptx_isa = isa_or_toolkit;
  else m->toolkit = isa_or_toolkit;
  m->size = m->uncompressed = 1000;
  m->container = container;
  if (container + 1 > b->s.containers) b->s.containers = container + 1;
  return m;
}

static void start(set_builder *b, const char *format) {
  memset(b, 0, sizeof *b);
  b->s.images = b->img;
  b->s.cap = 8;
  snprintf(b->s.format, sizeof b->s.format, "%s", format);
}

typedef struct row {
  int cc, driver;
  gc_run run;
  int image;           /* expected deciding image, -1 none */
  const char *why_has; /* a piece the explanation must name */
} row;

static void check_rows(const gc_image_set *s, const row *rows, size_t n) {
  for (size_t i = 0; i < n; i++) {
    gc_run_verdict v;
    gc_images_verdict(s, rows[i].cc, rows[i].driver, &v);
    if (v.run != rows[i].run || v.image != rows[i].image)
      fail_msg("row %zu (CC %d, driver %d): got %s image %d, want %s image %d; why: %s", i, rows[i].cc, rows[i].driver,
               gc_run_name(v.run), v.image, gc_run_name(rows[i].run), rows[i].image, v.why);
    if (rows[i].why_has && !strstr(v.why, rows[i].why_has))
      fail_msg("row %zu: why '%s' lacks '%s'", i, v.why, rows[i].why_has);
  }
}

static void test_verdict_table(void **state) {
  (void)state;
  set_builder b;
  /* {sm_80, sm_90 cubins of CUDA 13.0, compute_90 PTX ISA 9.0}: a CUDA 13 build. */
  start(&b, "fatbin");
  add(&b, GC_IMG_CUBIN, 80, 0, 13000, 0);
  add(&b, GC_IMG_CUBIN, 90, 0, 13000, 0);
  add(&b, GC_IMG_PTX, 90, 0, 90, 0);
  const row r1[] = {
      {86, 13000, GC_RUN_NATIVE, 0, "sm_80"},         /* same major, 0 <= 6 */
      {89, 13000, GC_RUN_NATIVE, 0, "8.9"},
      {80, 13000, GC_RUN_NATIVE, 0, "exact"},
      {90, 13000, GC_RUN_NATIVE, 1, "sm_90"},
      {120, 13000, GC_RUN_PTX_JIT, 2, "compute_90"},  /* no sm_12x; compute_90 <= 12.0; ISA 9.0 needs 13.0 */
      {100, 13000, GC_RUN_PTX_JIT, 2, NULL},
      {120, 12080, GC_RUN_PTX_TOO_NEW, 2, "222"},     /* 12.8 < 13.0 */
      {75, 13000, GC_RUN_NO_IMAGE, -1, "209"},        /* sm_80 is another minor-above; compute_90 > 7.5 */
      {90, 12020, GC_RUN_CUBIN_TOO_NEW, 1, "200"},    /* CUDA 13 cubin, CUDA 12 driver */
      {86, 12080, GC_RUN_CUBIN_TOO_NEW, 0, "12.8"},
  };
  check_rows(&b.s, r1, sizeof r1 / sizeof r1[0]);

  /* sm_90a: exactly CC 9.0. */
  start(&b, "fatbin");
  add(&b, GC_IMG_CUBIN, 90, 'a', 0, 0);
  const row r2[] = {{90, 13000, GC_RUN_NATIVE, 0, "sm_90a"}, {100, 13000, GC_RUN_NO_IMAGE, -1, NULL},
                    {89, 13000, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r2, sizeof r2 / sizeof r2[0]);

  /* sm_100f: 10.0 and 10.3, not 11.0 or 12.0. */
  start(&b, "fatbin");
  add(&b, GC_IMG_CUBIN, 100, 'f', 0, 0);
  const row r3[] = {{103, 13000, GC_RUN_NATIVE, 0, "sm_100f"}, {100, 13000, GC_RUN_NATIVE, 0, NULL},
                    {110, 13000, GC_RUN_NO_IMAGE, -1, NULL}, {120, 13000, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r3, sizeof r3 / sizeof r3[0]);

  /* compute_100f and compute_90a PTX: only their family / SM. */
  start(&b, "fatbin");
  add(&b, GC_IMG_PTX, 100, 'f', 90, 0);
  add(&b, GC_IMG_PTX, 90, 'a', 90, 0);
  const row r4[] = {{103, 13000, GC_RUN_PTX_JIT, 0, NULL}, {120, 13000, GC_RUN_NO_IMAGE, -1, NULL},
                    {90, 13000, GC_RUN_PTX_JIT, 1, NULL}, {100, 13000, GC_RUN_PTX_JIT, 0, NULL},
                    {89, 13000, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r4, sizeof r4 / sizeof r4[0]);

  /* Cubin toolkit vs driver: from CUDA 11 the major decides, before it the version. */
  start(&b, "cubin");
  add(&b, GC_IMG_CUBIN, 80, 0, 12080, 0);
  const row r5[] = {{80, 12020, GC_RUN_NATIVE, 0, NULL}, {80, 11080, GC_RUN_CUBIN_TOO_NEW, 0, NULL},
                    {80, 0, GC_RUN_NATIVE, 0, "unknown"}};
  check_rows(&b.s, r5, sizeof r5 / sizeof r5[0]);
  start(&b, "cubin");
  add(&b, GC_IMG_CUBIN, 70, 0, 10020, 0);
  /* A Xavier (7.2, Tegra) runs no sm_70 cubin: the higher-minor rule is for
   * desktop GPUs only (Programming Guide, Binary Compatibility). */
  const row r6[] = {{70, 10010, GC_RUN_CUBIN_TOO_NEW, 0, NULL}, {70, 10020, GC_RUN_NATIVE, 0, NULL},
                    {75, 11000, GC_RUN_NATIVE, 0, NULL}, {72, 11000, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r6, sizeof r6 / sizeof r6[0]);

  /* Old PTX JITs everywhere above it; an ISA unknown to every table does not. */
  start(&b, "ptx");
  add(&b, GC_IMG_PTX, 35, 0, 32, 0);
  const row r7[] = {{37, 11040, GC_RUN_PTX_JIT, 0, NULL}, {120, 12080, GC_RUN_PTX_JIT, 0, NULL},
                    {30, 13000, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r7, sizeof r7 / sizeof r7[0]);
  start(&b, "ptx");
  add(&b, GC_IMG_PTX, 80, 0, 99, 0);
  const row r8[] = {{80, 13000, GC_RUN_PTX_TOO_NEW, 0, NULL}};
  check_rows(&b.s, r8, sizeof r8 / sizeof r8[0]);

  /* The driver takes the best fitting cubin: sm_86 over sm_80 on CC 8.6; a
   * 'a' cubin over the plain one of its arch. */
  start(&b, "fatbin");
  add(&b, GC_IMG_CUBIN, 80, 0, 12000, 0);
  add(&b, GC_IMG_CUBIN, 86, 0, 12000, 0);
  add(&b, GC_IMG_CUBIN, 90, 0, 12000, 0);
  add(&b, GC_IMG_CUBIN, 90, 'a', 12000, 0);
  /* An Orin (8.7, Tegra) runs neither: no desktop cubin crosses to Tegra. */
  const row r9[] = {{86, 12020, GC_RUN_NATIVE, 1, "exact"}, {89, 12020, GC_RUN_NATIVE, 1, NULL},
                    {87, 12020, GC_RUN_NO_IMAGE, -1, NULL}, {90, 12020, GC_RUN_NATIVE, 3, NULL}};
  check_rows(&b.s, r9, sizeof r9 / sizeof r9[0]);

  /* zstd on a CUDA 12 driver before R550: still native, with the caveat. */
  start(&b, "fatbin");
  add(&b, GC_IMG_CUBIN, 80, 0, 12000, 0)->compression = 2;
  const row r10[] = {{86, 12020, GC_RUN_NATIVE, 0, "zstd"}};
  check_rows(&b.s, r10, sizeof r10 / sizeof r10[0]);
  gc_run_verdict v;
  gc_images_verdict(&b.s, 86, 12040, &v);
  assert_null(strstr(v.why, "zstd"));

  /* Several containers: one with code only for another GPU does not decide,
   * but is counted; one that cannot load does decide. */
  start(&b, "elf");
  add(&b, GC_IMG_CUBIN, 90, 'a', 12000, 0);
  add(&b, GC_IMG_CUBIN, 80, 0, 12000, 1);
  const row r11[] = {{86, 12020, GC_RUN_NATIVE, 1, "1 of 2 containers"}, {90, 12020, GC_RUN_NATIVE, 0, NULL},
                     {75, 12020, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r11, sizeof r11 / sizeof r11[0]);
  /* A container of kernel-less cubins (read: ABI known, 0 kernels) is not
   * counted as missing code. */
  b.img[0].abi_version = 8;
  gc_images_verdict(&b.s, 86, 12020, &v);
  assert_null(strstr(v.why, "containers"));
  start(&b, "elf");
  add(&b, GC_IMG_CUBIN, 80, 0, 12000, 0);
  add(&b, GC_IMG_CUBIN, 80, 0, 13000, 1);
  const row r12[] = {{86, 12020, GC_RUN_CUBIN_TOO_NEW, 1, NULL}, {86, 13000, GC_RUN_NATIVE, 0, NULL}};
  check_rows(&b.s, r12, sizeof r12 / sizeof r12[0]);

  /* Ember's policy skips what the driver cannot load (DESIGN.md): its
   * legacy PTX runs where the CUDA 13 cubin cannot; a plain fatbin's driver
   * would pick the cubin and fail. */
  start(&b, "ember");
  add(&b, GC_IMG_CUBIN, 120, 0, 13000, 0);
  add(&b, GC_IMG_PTX, 35, 0, 32, 0);
  const row r13[] = {{121, 11040, GC_RUN_PTX_JIT, 1, "skipped"}, {121, 13000, GC_RUN_NATIVE, 0, NULL}};
  check_rows(&b.s, r13, sizeof r13 / sizeof r13[0]);
  snprintf(b.s.format, sizeof b.s.format, "fatbin");
  const row r14[] = {{121, 11040, GC_RUN_CUBIN_TOO_NEW, 0, NULL}};
  check_rows(&b.s, r14, sizeof r14 / sizeof r14[0]);

  /* libember's sm_90 from three toolkits (table order 11.8, 13.0, 12.9): its
   * policy runs the newest the driver loads (runtime/policy.c): 11.x cubins
   * load on any CUDA 11+ driver, 12.x on 12+, 13.x on 13+ (2.2). R470 11040:
   * only 11.8; R535 12020: 12.9 over 11.8; R580 13000: 13.0. */
  start(&b, "ember");
  add(&b, GC_IMG_CUBIN, 90, 0, 11080, 0);
  add(&b, GC_IMG_CUBIN, 90, 0, 13000, 0);
  add(&b, GC_IMG_CUBIN, 90, 0, 12090, 0);
  const row r16[] = {{90, 11040, GC_RUN_NATIVE, 0, "made by CUDA 11.8"},
                     {90, 12020, GC_RUN_NATIVE, 2, "made by CUDA 12.9"},
                     {90, 13000, GC_RUN_NATIVE, 1, "made by CUDA 13.0"}};
  check_rows(&b.s, r16, sizeof r16 / sizeof r16[0]);
  /* sm_120 from 13.0 and 12.9 and the legacy PTX, on R470: both cubins are
   * skipped; the one named is the 12.9 one, which a CUDA 12.0 driver loads. */
  start(&b, "ember");
  add(&b, GC_IMG_CUBIN, 120, 0, 13000, 0);
  add(&b, GC_IMG_CUBIN, 120, 0, 12090, 0);
  add(&b, GC_IMG_PTX, 35, 0, 32, 0);
  const row r17[] = {{120, 11040, GC_RUN_PTX_JIT, 2, "needs a driver >= 12.0 (skipped)"},
                     {120, 12080, GC_RUN_NATIVE, 1, "made by CUDA 12.9"}};
  check_rows(&b.s, r17, sizeof r17 / sizeof r17[0]);

  /* Nothing at all. */
  start(&b, "elf");
  const row r15[] = {{86, 13000, GC_RUN_NO_IMAGE, -1, NULL}};
  check_rows(&b.s, r15, sizeof r15 / sizeof r15[0]);
  assert_string_equal(gc_run_name(GC_RUN_NATIVE), "runs natively");
}

/* --------------------------------------------------- libcublasLt walk --- */

/* The by-hand walk. An ELF64 little-endian file: e_shoff (u64 at 0x28),
 * e_shentsize/e_shnum/e_shstrndx (u16 at 0x3A/0x3C/0x3E); each section
 * header has sh_name (u32 at 0), sh_offset (u64 at 0x18), sh_size (u64 at
 * 0x20). The section named ".nv_fatbin" holds fatbin containers back to back
 * (cuda-compat.md 4.1). A container (4.2) is a 16-byte header {u32 magic
 * 0xBA55ED50, u16 version, u16 header size, u64 size of what follows}; its
 * entries (4.3) follow the header, each a header of at least 64 bytes:
 * u16 kind at 0 (1 PTX, 2 ELF cubin, 8 LTO-IR), u32 header size at 4, u64
 * payload size at 8, u16 minor at 0x18 and major at 0x1A (the PTX ISA for
 * PTX), u32 arch at 0x1C, u64 flags at 0x28 (0x100000 'a', 0x200000 'f');
 * the next entry starts at entry + header size + payload size. Only headers
 * are read (pread), never payloads. */
typedef struct tally_row {
  int kind, arch;
  char variant;
  long count;
} tally_row;

typedef struct tally {
  tally_row rows[128];
  int n;
  int isas[16], n_isas;
  long entries, containers;
} tally;

static void tally_add(tally *t, int kind, int arch, char variant, int isa) {
  int i = 0;
  while (i < t->n && !(t->rows[i].kind == kind && t->rows[i].arch == arch && t->rows[i].variant == variant)) i++;
  if (i == t->n) {
    assert_true(t->n < 128);
    t->rows[t->n++] = (tally_row){kind, arch, variant, 0};
  }
  t->rows[i].count++;
  t->entries++;
  if (kind == 1) {
    int k = 0;
    while (k < t->n_isas && t->isas[k] != isa) k++;
    if (k == t->n_isas && k < 16) t->isas[t->n_isas++] = isa;
  }
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void pread_all(int fd, void *buf, size_t n, uint64_t off) {
  if (pread(fd, buf, n, (off_t)off) != (ssize_t)n) fail_msg("pread %zu bytes at %llu failed", n, (unsigned long long)off);
}

static void hand_walk(const char *path, tally *t) {
  memset(t, 0, sizeof *t);
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  uint8_t eh[64];
  pread_all(fd, eh, 64, 0);
  assert_memory_equal(eh, "\x7f" "ELF\x02\x01", 6);
  uint64_t shoff = le(eh + 0x28, 8);
  unsigned shentsize = (unsigned)le(eh + 0x3A, 2), shnum = (unsigned)le(eh + 0x3C, 2), shstrndx = (unsigned)le(eh + 0x3E, 2);
  uint8_t *sh = malloc((size_t)shentsize * shnum);
  assert_non_null(sh);
  pread_all(fd, sh, (size_t)shentsize * shnum, shoff);
  const uint8_t *strsh = sh + (size_t)shstrndx * shentsize;
  size_t strsize = (size_t)le(strsh + 0x20, 8);
  char *names = malloc(strsize + 1);
  assert_non_null(names);
  pread_all(fd, names, strsize, le(strsh + 0x18, 8));
  names[strsize] = '\0';
  uint64_t off = 0, end = 0;
  for (unsigned i = 0; i < shnum; i++) {
    const uint8_t *s = sh + (size_t)i * shentsize;
    uint32_t name = (uint32_t)le(s, 4);
    if (name < strsize && !strcmp(names + name, ".nv_fatbin")) {
      off = le(s + 0x18, 8);
      end = off + le(s + 0x20, 8);
    }
  }
  free(names);
  free(sh);
  assert_true(end > off);
  while (off < end) {
    uint8_t ch[16];
    pread_all(fd, ch, 16, off);
    assert_int_equal(le(ch, 4), 0xBA55ED50u);
    uint64_t body = off + le(ch + 6, 2), body_end = body + le(ch + 8, 8);
    t->containers++;
    for (uint64_t e = body; e < body_end;) {
      uint8_t h[64];
      pread_all(fd, h, 64, e);
      uint64_t flags = le(h + 0x28, 8);
      char variant = flags & 0x100000 ? 'a' : flags & 0x200000 ? 'f' : 0;
      tally_add(t, (int)le(h, 2), (int)le(h + 0x1C, 4), variant, (int)(le(h + 0x1A, 2) * 10 + le(h + 0x18, 2)));
      e += le(h + 4, 4) + le(h + 8, 8);
    }
    off = body_end;
  }
  close(fd);
}

/* A library of the CUDA toolkit on this machine (a real file, not a symlink):
 * `stem` is e.g. "libcublasLt.so" or "libcudnn_ops.so". 0 if absent. */
static int toolkit_lib(const char *stem, char *out, size_t cap) {
  glob_t g;
  char pats[2][256];
  snprintf(pats[0], sizeof pats[0], "/usr/local/cuda/lib64/%s.*", stem);
  snprintf(pats[1], sizeof pats[1], "/usr/local/cuda/targets/*/lib/%s.*", stem);
  for (size_t i = 0; i < 2; i++) {
    if (glob(pats[i], 0, NULL, &g) != 0) continue;
    for (size_t k = 0; k < g.gl_pathc; k++) {
      char real[PATH_MAX];
      if (realpath(g.gl_pathv[k], real) && exists(real)) {
        snprintf(out, cap, "%s", real);
        globfree(&g);
        return 1;
      }
    }
    globfree(&g);
  }
  return 0;
}

static int cublaslt_path(char *out, size_t cap) { return toolkit_lib("libcublasLt.so", out, cap); }

static int fatbin_kind(gc_image_kind k) { return k == GC_IMG_CUBIN ? 2 : k == GC_IMG_PTX ? 1 : k == GC_IMG_LTOIR ? 8 : -1; }

static void compare_tallies(const tally *want, const tally *got, const char *what) {
  assert_int_equal(got->entries, want->entries);
  assert_int_equal(got->n, want->n);
  for (int i = 0; i < want->n; i++) {
    const tally_row *w = &want->rows[i];
    long g = -1;
    for (int k = 0; k < got->n; k++)
      if (got->rows[k].kind == w->kind && got->rows[k].arch == w->arch && got->rows[k].variant == w->variant)
        g = got->rows[k].count;
    if (g != w->count)
      fail_msg("%s: kind %d arch %d%c: %ld entries, the hand walk found %ld", what, w->kind, w->arch,
               w->variant ? w->variant : ' ', g, w->count);
  }
  assert_int_equal(got->n_isas, want->n_isas);
  for (int i = 0; i < want->n_isas; i++) {
    int found = 0;
    for (int k = 0; k < got->n_isas; k++) found |= got->isas[k] == want->isas[i];
    if (!found) fail_msg("%s: PTX ISA %d.%d missing", what, want->isas[i] / 10, want->isas[i] % 10);
  }
}

/* gc_images_read on a library gives the multiset of (kind, arch, variant) and
 * the PTX ISAs that the plain walk in hand_walk finds. */
static void matches_hand_walk(const char *lib) {
  tally hand, got;
  hand_walk(lib, &hand);
  printf("%s, by hand: %ld containers, %ld entries\n", lib, hand.containers, hand.entries);
  for (int i = 0; i < hand.n; i++)
    printf("  %-5s %d%c: %ld\n", hand.rows[i].kind == 1 ? "PTX" : hand.rows[i].kind == 2 ? "cubin" : "other",
           hand.rows[i].arch, hand.rows[i].variant ? hand.rows[i].variant : ' ', hand.rows[i].count);
  for (int i = 0; i < hand.n_isas; i++) printf("  PTX ISA %d.%d\n", hand.isas[i] / 10, hand.isas[i] % 10);

  gc_image_set s;
  char err[1024];
  if (gc_images_read_ex(lib, GC_READ_HEADERS, &s, err, sizeof err) != 0) fail_msg("%s", err);
  assert_string_equal(s.format, "elf");
  assert_int_equal(s.containers, hand.containers);
  memset(&got, 0, sizeof got);
  for (size_t i = 0; i < s.n; i++)
    tally_add(&got, fatbin_kind(s.images[i].kind), s.images[i].arch, s.images[i].variant, s.images[i].ptx_isa);
  compare_tallies(&hand, &got, lib);
  gc_images_free(&s);
}

static void test_cublaslt_matches_hand_walk(void **state) {
  (void)state;
  char lt[PATH_MAX];
  if (!cublaslt_path(lt, sizeof lt)) {
    fprintf(stderr, "skipped: no libcublasLt.so under /usr/local/cuda\n");
    skip();
  }
  matches_hand_walk(lt);
}

/* cuDNN, the other library nobody here wrote: its 90a-only and 100f/120f
 * cubins and its compute_121 PTX (reference 9.1) exercise the a/f marks. */
static void test_cudnn_matches_hand_walk(void **state) {
  (void)state;
  const char *stems[] = {"libcudnn_ops.so", "libcudnn_cnn.so"};
  int seen = 0;
  for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++) {
    char lib[PATH_MAX];
    if (!toolkit_lib(stems[i], lib, sizeof lib)) continue;
    matches_hand_walk(lib);
    seen++;
  }
  if (!seen) {
    fprintf(stderr, "skipped: no cuDNN library under /usr/local/cuda\n");
    skip();
  }
}

/* The acceptance check through the command: same SM set and counts in its JSON. */
static void test_cli_cublaslt(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  char lt[PATH_MAX], args[PATH_MAX + 64];
  if (!cublaslt_path(lt, sizeof lt)) skip();
  tally hand, got;
  hand_walk(lt, &hand);
  snprintf(args, sizeof args, "'%s' --gpu 9.0 --driver 13.0", lt);
  int rc;
  json_t *j = run_json(NULL, args, &rc);
  json_t *file = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0);
  json_t *images = json_object_get(file, "images");
  memset(&got, 0, sizeof got);
  size_t i;
  json_t *m;
  json_array_foreach(images, i, m) {
    const char *kind = json_string_value(json_object_get(m, "kind"));
    const char *var = json_string_value(json_object_get(m, "variant"));
    const char *isa = json_string_value(json_object_get(m, "ptx_isa"));
    int a = 0, b = 0;
    if (isa) assert_int_equal(sscanf(isa, "%d.%d", &a, &b), 2);
    tally_add(&got, !strcmp(kind, "cubin") ? 2 : !strcmp(kind, "ptx") ? 1 : !strcmp(kind, "ltoir") ? 8 : -1,
              (int)json_integer_value(json_object_get(m, "arch")), var && *var ? var[0] : 0, a * 10 + b);
  }
  compare_tallies(&hand, &got, "gpucheck inspect --json");
  /* The hand walk saw sm_90 cubins, which a CUDA 13.0 driver loads whatever
   * toolkit made them (no newer one exists): native. */
  int has_sm90 = 0;
  for (int k = 0; k < hand.n; k++) has_sm90 |= hand.rows[k].kind == 2 && hand.rows[k].arch == 90 && !hand.rows[k].variant;
  json_t *t0 = json_array_get(json_object_get(file, "targets"), 0);
  if (has_sm90) {
    assert_string_equal(json_string_value(json_object_get(t0, "run")), "native");
    assert_int_equal(rc, 0);
  }
  json_decref(j);
}

/* ------------------------------------------------------------- Ember --- */

static void test_ember_library(void **state) {
  (void)state;
  char lib[PATH_MAX], err[1024];
  snprintf(lib, sizeof lib, "%s/lib/libember.so", build_dir);
  if (!exists(lib)) {
    fprintf(stderr, "skipped: %s not built\n", lib);
    skip();
  }
  setenv("EMBER_LIBCUDA", "/nonexistent/libcuda.so.1", 1); /* the table needs no driver */
  size_t count = 0;
  assert_int_equal(em_image_count(&count), EM_OK);
  gc_image_set s;
  if (gc_images_read(lib, &s, err, sizeof err) != 0) fail_msg("%s", err);
  assert_string_equal(s.format, "ember");
  assert_int_equal(s.n, count);
  /* Each kernel module plays the part of a fatbin container. */
  const char *modules[64];
  size_t n_modules = 0;
  for (size_t i = 0; i < count; i++) {
    em_image_info e;
    assert_int_equal(em_image_get(i, &e), EM_OK);
    size_t k = 0;
    while (k < n_modules && strcmp(modules[k], e.module)) k++;
    if (k == n_modules) {
      assert_true(n_modules < 64);
      modules[n_modules++] = e.module;
    }
    assert_int_equal(s.images[i].container, k);
  }
  assert_int_equal(s.containers, n_modules);
  for (size_t i = 0; i < count; i++) {
    em_image_info e;
    assert_int_equal(em_image_get(i, &e), EM_OK);
    const gc_image *m = &s.images[i];
    gc_image_kind k = e.kind == EM_IMAGE_CUBIN ? GC_IMG_CUBIN : e.kind == EM_IMAGE_PTX ? GC_IMG_PTX : GC_IMG_OTHER;
    assert_int_equal(m->kind, k);
    assert_int_equal(m->arch, e.arch);
    assert_int_equal(m->variant, e.variant);
    assert_int_equal(m->ptx_isa, e.ptx_isa);
    assert_int_equal(m->toolkit, e.toolkit);
    /* Both sizes: what the table holds and the image; Ember, not the driver,
     * decompresses its images. */
    assert_int_equal(m->size, e.stored_size);
    assert_int_equal(m->uncompressed, e.size);
    assert_int_equal(m->compression, e.storage == EM_IMAGE_ZSTD ? GC_COMP_EMBER_ZSTD : 0);
    assert_false(gc_driver_decompresses(m));
    /* The ELF ABI, from the cubin's header (decompressed alone). */
    if (e.kind == EM_IMAGE_CUBIN) {
      void *bytes = NULL;
      assert_int_equal(em_image_read(&e, &bytes), EM_OK);
      assert_int_equal(m->abi_version, ((const uint8_t *)bytes)[8]); /* e_ident[EI_ABIVERSION] */
      assert_true(m->abi_version == 7 || m->abi_version == 8);
      free(bytes);
    }
    assert_int_equal(strncmp(m->kernels, e.kernels ? e.kernels : "", sizeof m->kernels - 1), 0);
  }
  gc_images_free(&s);
}

/* ---------------------------------------------------------------- CLI --- */

static const char *target_run(json_t *j, size_t file, size_t t) {
  json_t *f = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), file);
  return json_string_value(json_object_get(json_array_get(json_object_get(f, "targets"), t), "run"));
}

/* tests/fixtures/k_default.fatbin: sm_80 + sm_90 cubins and compute_90 PTX
 * (ISA 9.0) from nvcc 13.0.88 (tests/fixtures/README.md). */
static void test_cli_verdicts_and_exit_codes(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  char fx[PATH_MAX], args[PATH_MAX + 128];
  fixture_path("k_default.fatbin", fx, sizeof fx);
  int rc;
  static const struct {
    const char *gpu, *driver, *run;
    int rc, driver_cuda;
  } cases[] = {
      {"8.6", "13.0", "native", 0, 13000},
      {"A100", "580.65.06", "native", 0, 13000},      /* R580 -> 13.0 (cuda-compat.md 2.3) */
      {"12.0", "13000", "ptx-jit", 2, 13000},
      {"sm_120", "570.124.04", "ptx-too-new", 1, 12080}, /* R570 -> 12.8 */
      {"7.5", "13.0", "no-image", 1, 13000},
      {"9.0", "12.2", "cubin-too-new", 1, 12020},     /* CUDA 13.0 cubins */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(args, sizeof args, "'%s' --gpu %s --driver %s", fx, cases[i].gpu, cases[i].driver);
    json_t *j = run_json(NULL, args, &rc);
    if (rc != cases[i].rc) fail_msg("%s: exit %d, want %d", args, rc, cases[i].rc);
    assert_string_equal(json_string_value(json_object_get(j, "schema")), "gpucheck/1");
    assert_string_equal(json_string_value(json_object_get(j, "command")), "inspect");
    assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), cases[i].rc);
    json_t *f = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0);
    assert_string_equal(json_string_value(json_object_get(f, "format")), "fatbin");
    assert_int_equal(json_array_size(json_object_get(f, "images")), 3);
    assert_string_equal(target_run(j, 0, 0), cases[i].run);
    json_t *t = json_array_get(json_object_get(f, "targets"), 0);
    assert_int_equal(json_integer_value(json_object_get(t, "driver_cuda")), cases[i].driver_cuda);
    assert_true(strlen(json_string_value(json_object_get(t, "why"))) > 20);
    json_decref(j);
  }
  /* Several GPUs: the worst decides the exit code. */
  snprintf(args, sizeof args, "'%s' --gpu 8.6 --gpu 7.5 --driver 13.0", fx);
  json_t *j = run_json(NULL, args, &rc);
  assert_int_equal(rc, 1);
  assert_string_equal(target_run(j, 0, 0), "native");
  assert_string_equal(target_run(j, 0, 1), "no-image");
  json_decref(j);
  /* The images as the fixture README lists them. */
  snprintf(args, sizeof args, "'%s' --gpu 8.6 --driver 13.0 --kernels", fx);
  j = run_json(NULL, args, &rc);
  json_t *images = json_object_get(json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0), "images");
  int seen80 = 0, seen90 = 0, seen_ptx = 0;
  size_t i;
  json_t *m;
  json_array_foreach(images, i, m) {
    const char *kind = json_string_value(json_object_get(m, "kind"));
    int arch = (int)json_integer_value(json_object_get(m, "arch"));
    assert_int_equal(json_array_size(json_object_get(m, "kernels")), 2); /* ember_saxpy, ember_fill */
    if (!strcmp(kind, "cubin") && arch == 80) seen80++;
    if (!strcmp(kind, "cubin") && arch == 90) seen90++;
    if (!strcmp(kind, "ptx") && arch == 90) {
      seen_ptx++;
      assert_string_equal(json_string_value(json_object_get(m, "ptx_isa")), "9.0");
    }
  }
  assert_true(seen80 == 1 && seen90 == 1 && seen_ptx == 1);
  json_decref(j);
}

static void test_cli_local_gpus_through_fake_driver(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  if (!fake_lib || !*fake_lib || access(fake_lib, R_OK) != 0) {
    fprintf(stderr, "skipped: FAKECUDA_LIB not set\n");
    skip();
  }
  char fx[PATH_MAX], args[PATH_MAX + 64], env[PATH_MAX + 128];
  fixture_path("k_default.fatbin", fx, sizeof fx);
  snprintf(env, sizeof env, "EMBER_LIBCUDA='%s' FAKECUDA_DEVICES='8.6,7.5' FAKECUDA_DRIVER=13000", fake_lib);
  snprintf(args, sizeof args, "'%s'", fx);
  int rc;
  json_t *j = run_json(env, args, &rc);
  assert_int_equal(rc, 1);
  json_t *targets = json_object_get(json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0), "targets");
  assert_int_equal(json_array_size(targets), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(targets, 0), "cc")), "8.6");
  assert_string_equal(json_string_value(json_object_get(json_array_get(targets, 1), "cc")), "7.5");
  assert_int_equal(json_integer_value(json_object_get(json_array_get(targets, 0), "driver_cuda")), 13000);
  assert_string_equal(target_run(j, 0, 0), "native");
  assert_string_equal(target_run(j, 0, 1), "no-image");
  json_decref(j);
  /* --driver overrides the local driver, the GPUs stay local. */
  snprintf(args, sizeof args, "'%s' --driver 12.2", fx);
  j = run_json(env, args, &rc);
  assert_int_equal(rc, 1);
  assert_string_equal(target_run(j, 0, 0), "cubin-too-new");
  json_decref(j);
}

static void test_cli_no_gpu(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  char fx[PATH_MAX], args[PATH_MAX + 16];
  fixture_path("k_default.fatbin", fx, sizeof fx);
  snprintf(args, sizeof args, "'%s'", fx);
  int rc;
  json_t *j = run_json(NULL, args, &rc); /* EMBER_LIBCUDA points nowhere */
  assert_int_equal(rc, 0);
  assert_string_equal(json_string_value(json_object_get(j, "verdict")), "info");
  json_t *f = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0);
  assert_int_equal(json_array_size(json_object_get(f, "targets")), 0);
  json_t *checks = json_object_get(json_array_get(json_object_get(j, "sections"), 0), "checks");
  int found = 0;
  size_t i;
  json_t *c;
  json_array_foreach(checks, i, c) found |= !strcmp(json_string_value(json_object_get(c, "id")), "run.none");
  assert_true(found);
  json_decref(j);
}

static void test_cli_usage(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  int rc;
  char fx[PATH_MAX], args[PATH_MAX + 64], err[2048];
  fixture_path("k_default.fatbin", fx, sizeof fx);
  free(run_cli(NULL, "", &rc, err, sizeof err));
  assert_int_equal(rc, 64);
  snprintf(args, sizeof args, "'%s' --gpu 'Voodoo 5'", fx);
  free(run_cli(NULL, args, &rc, err, sizeof err));
  assert_int_equal(rc, 64);
  assert_non_null(strstr(err, "Voodoo 5"));
  snprintf(args, sizeof args, "'%s' --driver banana", fx);
  free(run_cli(NULL, args, &rc, err, sizeof err));
  assert_int_equal(rc, 64);
  snprintf(args, sizeof args, "'%s' --frobnicate", fx);
  free(run_cli(NULL, args, &rc, err, sizeof err));
  assert_int_equal(rc, 64);
}

static void test_cli_nvcc_fixtures(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  SKIP_WITHOUT_NVCC();
  char a[PATH_MAX], l[PATH_MAX], args[2 * PATH_MAX + 64];
  path_in_tmp("app_lz4", a, sizeof a);
  path_in_tmp("libk.so", l, sizeof l);
  if (!exists(a) || !exists(l)) skip();
  snprintf(args, sizeof args, "'%s' '%s' --gpu 9.0 --gpu 10.3 --driver 13.0 --kernels", a, l);
  int rc;
  json_t *j = run_json(NULL, args, &rc);
  assert_int_equal(rc, 2); /* app has no cubin for 10.3, only its compute_90 PTX: a warning */
  assert_string_equal(target_run(j, 0, 0), "native");
  assert_string_equal(target_run(j, 0, 1), "ptx-jit");
  assert_string_equal(target_run(j, 1, 0), "native"); /* sm_90a */
  assert_string_equal(target_run(j, 1, 1), "native"); /* sm_100f on 10.3 */
  json_t *f = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0);
  json_t *m;
  size_t i;
  int lz4 = 0;
  json_array_foreach(json_object_get(f, "images"), i, m) lz4 += !strcmp(json_string_value(json_object_get(m, "compressed")), "lz4");
  assert_int_equal(lz4, (int)json_array_size(json_object_get(f, "images")));
  json_decref(j);
  /* Nothing for a Turing: exit 1; nvcc's output is all there is to judge. */
  snprintf(args, sizeof args, "'%s' --gpu T4 --driver 13.0", a);
  j = run_json(NULL, args, &rc);
  assert_int_equal(rc, 1);
  assert_string_equal(target_run(j, 0, 0), "no-image");
  json_decref(j);
}

static void test_cli_ember_library(void **state) {
  (void)state;
  SKIP_WITHOUT_CLI();
  char lib[PATH_MAX], args[PATH_MAX + 64];
  snprintf(lib, sizeof lib, "%s/lib/libember.so", build_dir);
  if (!exists(lib)) skip();
  snprintf(args, sizeof args, "'%s' --gpu 8.6 --driver 13.0", lib);
  int rc;
  json_t *j = run_json(NULL, args, &rc);
  json_t *f = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0);
  assert_string_equal(json_string_value(json_object_get(f, "format")), "ember");
  size_t count = 0;
  setenv("EMBER_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  assert_int_equal(em_image_count(&count), EM_OK);
  assert_int_equal(json_array_size(json_object_get(f, "images")), count);
  assert_true(rc == 0 || rc == 2);
  json_decref(j);

  /* Fleet rows. Ember runs, of a module's cubins for exactly this SM, the one
   * of the newest toolkit the driver loads (its policy): a cubin of CUDA 11+
   * loads on any driver of its major or later (minor-version compatibility,
   * cuda-compat.md 2.2). The verdict names the first module's image (every
   * module has the same SMs). R535 = CUDA 12.2, R470 = 11.4 (2.3). */
  em_image_info first;
  assert_int_equal(em_image_get(0, &first), EM_OK);
  static const struct {
    const char *gpu, *driver;
    int cc, cuda;
  } fleet[] = {{"H100", "535.104.05", 90, 12020}, {"A100", "470.256.02", 80, 11040}, {"12.0", "470.256.02", 120, 11040}};
  for (size_t k = 0; k < sizeof fleet / sizeof fleet[0]; k++) {
    int want = -1, want_tk = 0, lowest_unloadable = 0;
    for (size_t i = 0; i < count; i++) {
      em_image_info e;
      assert_int_equal(em_image_get(i, &e), EM_OK);
      if (e.kind != EM_IMAGE_CUBIN || e.variant || e.arch != fleet[k].cc || strcmp(e.module, first.module)) continue;
      int need = e.toolkit >= 11000 ? e.toolkit / 1000 * 1000 : e.toolkit;
      if (need <= fleet[k].cuda && e.toolkit > want_tk) want = (int)i, want_tk = e.toolkit;
      if (need > fleet[k].cuda && (!lowest_unloadable || need < lowest_unloadable)) lowest_unloadable = need;
    }
    snprintf(args, sizeof args, "'%s' --gpu %s --driver %s", lib, fleet[k].gpu, fleet[k].driver);
    j = run_json(NULL, args, &rc);
    f = json_array_get(json_object_get(json_object_get(j, "facts"), "files"), 0);
    json_t *t = json_array_get(json_object_get(f, "targets"), 0);
    if (want >= 0) {
      assert_string_equal(json_string_value(json_object_get(t, "run")), "native");
      assert_int_equal(json_integer_value(json_object_get(t, "image")), want);
    } else if (lowest_unloadable) {
      /* Skipped cubins: the fix names the driver that loads the nearest one. */
      char need[96];
      snprintf(need, sizeof need, "install a driver for CUDA %d.%d or newer", lowest_unloadable / 1000,
               lowest_unloadable % 1000 / 10);
      json_t *sec, *chk;
      size_t a, b;
      int seen = 0;
      json_array_foreach(json_object_get(j, "sections"), a, sec) json_array_foreach(json_object_get(sec, "checks"), b, chk) {
        const char *fix = json_string_value(json_object_get(chk, "fix"));
        seen |= !strcmp(json_string_value(json_object_get(chk, "id")), "run.0") && fix && strstr(fix, need);
      }
      if (!seen) fail_msg("%s on %s: no run.0 fix saying \"%s\"", fleet[k].gpu, fleet[k].driver, need);
    }
    json_decref(j);
  }
}

/* ---------------------------------------------------- malformed input --- */

/* A minimal ELF64 with sections: null, .shstrtab, and `name` holding `data`. */
static uint8_t *make_elf(const char *name, const void *data, size_t n, size_t *out_size, size_t *data_off) {
  char strtab[64];
  size_t slen = 0;
  strtab[slen++] = '\0';
  size_t name_shstrtab = slen;
  memcpy(strtab + slen, ".shstrtab", 10), slen += 10;
  size_t name_data = slen;
  size_t nl = strlen(name) + 1;
  memcpy(strtab + slen, name, nl), slen += nl;
  size_t off_data = sizeof(Elf64_Ehdr);
  size_t off_str = off_data + ((n + 7) & ~(size_t)7);
  size_t off_sh = off_str + ((slen + 7) & ~(size_t)7);
  size_t total = off_sh + 3 * sizeof(Elf64_Shdr);
  uint8_t *b = calloc(1, total);
  assert_non_null(b);
  Elf64_Ehdr *eh = (Elf64_Ehdr *)b;
  memcpy(eh->e_ident, ELFMAG, SELFMAG);
  eh->e_ident[EI_CLASS] = ELFCLASS64;
  eh->e_ident[EI_DATA] = ELFDATA2LSB;
  eh->e_ident[EI_VERSION] = EV_CURRENT;
  eh->e_type = ET_DYN;
  eh->e_machine = EM_X86_64;
  eh->e_version = EV_CURRENT;
  eh->e_shoff = off_sh;
  eh->e_ehsize = sizeof(Elf64_Ehdr);
  eh->e_shentsize = sizeof(Elf64_Shdr);
  eh->e_shnum = 3;
  eh->e_shstrndx = 1;
  memcpy(b + off_data, data, n);
  memcpy(b + off_str, strtab, slen);
  Elf64_Shdr *sh = (Elf64_Shdr *)(b + off_sh);
  sh[1] = (Elf64_Shdr){.sh_name = (Elf64_Word)name_shstrtab, .sh_type = SHT_STRTAB, .sh_offset = off_str,
                       .sh_size = slen, .sh_addralign = 1};
  sh[2] = (Elf64_Shdr){.sh_name = (Elf64_Word)name_data, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                       .sh_offset = off_data, .sh_size = n, .sh_addralign = 8};
  *out_size = total;
  if (data_off) *data_off = off_data;
  return b;
}

/* Three committed fatbins back to back in one .nv_fatbin: three containers
 * holding what each README line says (3 + 3 + 3 images). */
static void test_elf_with_several_containers(void **state) {
  (void)state;
  const char *names[] = {"k_default.fatbin", "k_lz4.fatbin", "k_fa.fatbin"};
  size_t total = 0, n[3];
  uint8_t *parts[3];
  char p[PATH_MAX];
  for (int i = 0; i < 3; i++) {
    parts[i] = read_all(fixture_path(names[i], p, sizeof p), &n[i]);
    total += n[i];
  }
  uint8_t *sec = malloc(total);
  assert_non_null(sec);
  for (size_t i = 0, o = 0; i < 3; o += n[i], i++) memcpy(sec + o, parts[i], n[i]);
  size_t elf_size, data_off;
  uint8_t *elf = make_elf(".nv_fatbin", sec, total, &elf_size, &data_off);
  char path[PATH_MAX + 16], err[1024];
  write_file(path_in_tmp("three.so", path, sizeof path), elf, elf_size);
  gc_image_set s;
  if (gc_images_read_ex(path, GC_READ_ALL, &s, err, sizeof err) != 0) fail_msg("%s", err);
  assert_string_equal(s.format, "elf");
  assert_int_equal(s.containers, 3);
  assert_int_equal(s.n, 9);
  for (size_t i = 0; i < 9; i++) {
    assert_int_equal(s.images[i].container, i / 3);
    assert_int_equal(s.images[i].n_kernels, 2); /* ember_saxpy, ember_fill */
  }
  assert_int_equal(s.images[0].offset, data_off + 16); /* first entry after the 16-byte container header */
  assert_int_equal(s.images[3].compression, 1);     /* k_lz4: LZ4 */
  assert_int_equal(s.images[6].arch, 100);          /* k_fa: sm_100f first */
  assert_int_equal(s.images[6].variant, 'f');
  gc_images_free(&s);
  for (int i = 0; i < 3; i++) free(parts[i]);
  free(sec);
  free(elf);
}

static void expect_exit_65(const char *path, const char *must_say) {
  int rc;
  char args[PATH_MAX + 64], err[4096];
  snprintf(args, sizeof args, "'%s' --gpu 8.6 --driver 13.0", path);
  free(run_cli(NULL, args, &rc, err, sizeof err));
  if (rc != 65) fail_msg("%s: exit %d, want 65 (stderr: %s)", path, rc, err);
  assert_non_null(strstr(err, path));
  if (must_say && !strstr(err, must_say)) fail_msg("%s: stderr '%s' lacks '%s'", path, err, must_say);
}

static void expect_read_error(const char *path) {
  gc_image_set s;
  char err[1024];
  if (gc_images_read(path, &s, err, sizeof err) != -1) fail_msg("%s: read without error (%zu images)", path, s.n);
  assert_non_null(strstr(err, path));
  assert_int_equal(s.n, 0);
  gc_images_free(&s);
}

static void test_malformed_files(void **state) {
  (void)state;
  char p[PATH_MAX], path[PATH_MAX + 16];
  size_t fn;
  uint8_t *fat = read_all(fixture_path("k_default.fatbin", p, sizeof p), &fn);
  size_t elf_size, data_off;
  uint8_t *elf = make_elf(".nv_fatbin", fat, fn, &elf_size, &data_off);

  /* Truncated ELF: the section headers at the end are gone. */
  write_file(path_in_tmp("truncated.so", path, sizeof path), elf, elf_size / 2);
  expect_read_error(path);
  if (cli[0]) expect_exit_65(path, NULL);
  /* Shorter than an ELF header. */
  write_file(path_in_tmp("tiny.so", path, sizeof path), elf, 40);
  expect_read_error(path);

  /* Corrupt .nv_fatbin: the container size (u64 at +8) runs past the section. */
  uint8_t *bad = malloc(elf_size);
  assert_non_null(bad);
  memcpy(bad, elf, elf_size);
  bad[data_off + 8] = 0xff, bad[data_off + 9] = 0xff, bad[data_off + 10] = 0xff;
  write_file(path_in_tmp("badsize.so", path, sizeof path), bad, elf_size);
  expect_read_error(path);
  if (cli[0]) expect_exit_65(path, ".nv_fatbin");
  /* Corrupt magic. */
  memcpy(bad, elf, elf_size);
  bad[data_off] ^= 0xff;
  write_file(path_in_tmp("badmagic.so", path, sizeof path), bad, elf_size);
  expect_read_error(path);
  /* An entry's payload size running past its container. */
  memcpy(bad, elf, elf_size);
  bad[data_off + 16 + 8 + 6] = 0x7f;
  write_file(path_in_tmp("badentry.so", path, sizeof path), bad, elf_size);
  expect_read_error(path);
  /* A zstd payload that is not a zstd frame (entry 1 is the zstd PTX, README). */
  memcpy(bad, elf, elf_size);
  {
    size_t e0 = data_off + 16;
    size_t e1 = e0 + (size_t)le(bad + e0 + 4, 4) + (size_t)le(bad + e0 + 8, 8);
    assert_int_equal(le(bad + e1, 2), 1); /* PTX */
    size_t payload = e1 + (size_t)le(bad + e1 + 4, 4);
    memset(bad + payload, 0xAB, 8);
    write_file(path_in_tmp("badzstd.so", path, sizeof path), bad, elf_size);
    gc_image_set s;
    char err[1024];
    assert_int_equal(gc_images_read_ex(path, GC_READ_ALL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "zstd"));
    if (cli[0]) expect_exit_65(path, "zstd");
  }
  /* Truncated raw fatbin. */
  write_file(path_in_tmp("cut.fatbin", path, sizeof path), fat, fn - 100);
  expect_read_error(path);
  if (cli[0]) expect_exit_65(path, NULL);

  /* Random bytes (a fixed LCG, so the test is the same every run). */
  uint8_t junk[4096];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof junk; i++) x = x * 1664525u + 1013904223u, junk[i] = (uint8_t)(x >> 24);
  write_file(path_in_tmp("junk.bin", path, sizeof path), junk, sizeof junk);
  expect_read_error(path);
  if (cli[0]) expect_exit_65(path, "not an ELF");
  /* Empty, missing, a directory. */
  write_file(path_in_tmp("empty.bin", path, sizeof path), "", 0);
  expect_read_error(path);
  if (cli[0]) expect_exit_65(path, "empty");
  path_in_tmp("no-such-file", path, sizeof path);
  expect_read_error(path);
  if (cli[0]) expect_exit_65(path, "No such file");
  expect_read_error(tmp);

  /* An ELF without GPU code is no error: zero images and a note. */
  size_t plain_size;
  uint8_t *plain = make_elf(".data", "hello", 5, &plain_size, NULL);
  write_file(path_in_tmp("plain.so", path, sizeof path), plain, plain_size);
  gc_image_set s;
  char err[1024];
  assert_int_equal(gc_images_read(path, &s, err, sizeof err), 0);
  assert_int_equal(s.n, 0);
  assert_non_null(strstr(s.note, ".nv_fatbin"));
  gc_images_free(&s);
  free(plain);
  free(bad);
  free(elf);
  free(fat);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_verdict_table),
      cmocka_unit_test(test_fixture_app),
      cmocka_unit_test(test_fixture_app_zstd),
      cmocka_unit_test(test_fixture_app_lz4),
      cmocka_unit_test(test_fixture_shared_af),
      cmocka_unit_test(test_fixture_fatbin),
      cmocka_unit_test(test_fixture_cubin),
      cmocka_unit_test(test_fixture_ptx),
      cmocka_unit_test(test_fixture_headers_mode),
      cmocka_unit_test(test_fixture_verdicts),
      cmocka_unit_test(test_cublaslt_matches_hand_walk),
      cmocka_unit_test(test_cudnn_matches_hand_walk),
      cmocka_unit_test(test_ember_library),
      cmocka_unit_test(test_elf_with_several_containers),
      cmocka_unit_test(test_malformed_files),
      cmocka_unit_test(test_cli_verdicts_and_exit_codes),
      cmocka_unit_test(test_cli_local_gpus_through_fake_driver),
      cmocka_unit_test(test_cli_no_gpu),
      cmocka_unit_test(test_cli_usage),
      cmocka_unit_test(test_cli_nvcc_fixtures),
      cmocka_unit_test(test_cli_ember_library),
      cmocka_unit_test(test_cli_cublaslt),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
