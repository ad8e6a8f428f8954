/* Tests of NVRTC loading and compilation (runtime/nvrtc.h) with the real
 * NVRTC of this machine. Where no NVRTC can be found at all every test skips
 * with a message, so a machine without a CUDA toolkit passes; where the file
 * /usr/local/cuda/lib64/libnvrtc.so.13 exists, not finding it is a failure.
 *
 * Expected values: the NVRTC 13.0 facts of cuda-compat.md section 7 (its
 * supported-arch list, cubin output since 11.1), the cubin facts of section
 * 5.1/5.2 (ABI V2 = EI_ABIVERSION 8 and EI_OSABI 0x41 for every CUDA 13 cubin,
 * toolkit 13.0 in .note.nv.cuinfo), the library's version read from the
 * companion libnvrtc-builtins.so.MAJOR.MINOR file name beside it, and the
 * kernel names written below from reading kernels/ *.cu. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cubin.h"
#include "error.h"
#include "nvrtc.h"

#define TOOLKIT_NVRTC13 "/usr/local/cuda/lib64/libnvrtc.so.13"

/* Kernels each module of kernels/ defines (EM_GLOBAL functions, by reading
 * the .cu files). */
static const struct { const char *module, *kernels[4]; } MODULE_KERNELS[] = {
    {"elementwise", {"em_fill_f32", "em_axpy_f32"}},
    {"reduce", {"em_sum_f32_stage1", "em_sum_f32_stage2"}},
    {"transpose", {"em_transpose_f32"}},
};
#define N_MODULES (sizeof MODULE_KERNELS / sizeof MODULE_KERNELS[0])

/* ---- helpers ------------------------------------------------------------ */

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 14, n = 0, got;
  char *buf = malloc(cap);
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static const char *src_dir(void) {
  const char *d = getenv("EMBER_SRC_DIR");
  return d && *d ? d : ".";
}

static char *read_src(const char *rel) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", src_dir(), rel);
  char *t = read_text(path);
  if (!t) fail_msg("cannot read %s (set EMBER_SRC_DIR to the repository)", path);
  return t;
}

/* Loads every NVRTC with a clean environment, or skips when there is none. */
static void load_or_skip(em_nvrtc_set *set) {
  unsetenv("EMBER_NVRTC");
  em_nvrtc_load_all(set);
  if (set->n == 0) {
    if (access(TOOLKIT_NVRTC13, F_OK) == 0)
      fail_msg("%s exists but no NVRTC was loaded: %s", TOOLKIT_NVRTC13, set->tried);
    print_message("no NVRTC on this machine (%s): skipped\n", set->tried);
    skip();
  }
}

/* The newest NVRTC 13.x of the set, or skips when there is none. */
static const em_nvrtc_lib *nvrtc13(em_nvrtc_set *set) {
  load_or_skip(set);
  for (size_t i = 0; i < set->n; i++)
    if (set->libs[i].version / 1000 == 13) return &set->libs[i];
  if (access(TOOLKIT_NVRTC13, F_OK) == 0) fail_msg("%s exists but was not loaded: %s", TOOLKIT_NVRTC13, set->tried);
  em_nvrtc_unload_all(set);
  print_message("no NVRTC 13 on this machine: skipped\n");
  skip();
  return NULL;
}

/* The version of a loaded libnvrtc, read from the name of the companion
 * libnvrtc-builtins.so.MAJOR.MINOR in the same folder (cuda-compat.md 7);
 * 0 when there is no such file. */
static int version_from_builtins(void *handle) {
  struct link_map *lm = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name) return 0;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", lm->l_name);
  char *slash = strrchr(dir, '/');
  if (!slash) return 0;
  *slash = '\0';
  DIR *d = opendir(dir);
  if (!d) return 0;
  int version = 0, major, minor;
  struct dirent *e;
  while ((e = readdir(d)))
    if (sscanf(e->d_name, "libnvrtc-builtins.so.%d.%d", &major, &minor) == 2) version = major * 1000 + minor * 10;
  closedir(d);
  return version;
}

/* Whether the comma-separated list holds exactly these names, in any order. */
static int same_kernels(const char *list, const char *const *names) {
  size_t want = 0, got = 0;
  for (; want < 4 && names[want]; want++) {
    char pat[128], wrapped[1100];
    snprintf(pat, sizeof pat, ",%s,", names[want]);
    snprintf(wrapped, sizeof wrapped, ",%s,", list);
    if (!strstr(wrapped, pat)) return 0;
  }
  for (const char *p = list; *p; p++) got += *p == ',';
  return list[0] && got + 1 == want;
}

/* Compiles kernels/<module>.cu with kernels/em_kernel.h as its header. */
static em_status compile_module(const em_nvrtc_lib *lib, const char *module, int sm, int want_cubin, void **out,
                                size_t *size) {
  char rel[256];
  snprintf(rel, sizeof rel, "kernels/%s.cu", module);
  char *src = read_src(rel), *hdr = read_src("kernels/em_kernel.h");
  const char *headers[] = {hdr}, *names[] = {"em_kernel.h"};
  em_status st = em_nvrtc_compile(lib, rel, src, 1, headers, names, sm, want_cubin, out, size);
  free(src);
  free(hdr);
  return st;
}

/* Compiles with NVRTC's defaults (FMA contraction on), bypassing
 * em_nvrtc_compile: the control that shows the PTX checks can fail. */
static char *ptx_with_defaults(const em_nvrtc_lib *lib, const char *src, int n_headers, const char *const *headers,
                               const char *const *names) {
  nvrtcProgram prog;
  assert_int_equal(lib->CreateProgram(&prog, src, "control.cu", n_headers, headers, names), 0);
  const char *opts[] = {"--gpu-architecture=compute_75"};
  assert_int_equal(lib->CompileProgram(prog, 1, opts), 0);
  size_t n = 0;
  assert_int_equal(lib->GetPTXSize(prog, &n), 0);
  char *ptx = malloc(n + 1);
  assert_int_equal(lib->GetPTX(prog, ptx), 0);
  ptx[n] = '\0';
  lib->DestroyProgram(&prog);
  return ptx;
}

/* A contracted multiply-add in PTX: fma.rn.f32/f64 (or the old mad.f32). */
static int has_float_fma(const char *ptx) {
  return strstr(ptx, "fma.rn.f") || strstr(ptx, "fma.rz.f") || strstr(ptx, "mad.f") || strstr(ptx, "mad.rn.f");
}

/* ---- loading ---------------------------------------------------------------- */

static void test_finds_nvrtc13_with_its_version(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  assert_non_null(lib->handle);
  assert_true(lib->path[0] != '\0');
  int expect = version_from_builtins(lib->handle);
  if (expect) assert_int_equal(lib->version, expect);
  else print_message("no libnvrtc-builtins.so.X.Y beside %s: version %d not cross-checked\n", lib->path, lib->version);
  assert_true(lib->has_cubin); /* nvrtcGetCUBIN exists since 11.1 */
  assert_true(lib->has_archs); /* nvrtcGetSupportedArchs since 11.2 */
  /* Newest first, one library per version. */
  for (size_t i = 1; i < set.n; i++) assert_true(set.libs[i - 1].version > set.libs[i].version);
  em_nvrtc_unload_all(&set);
  assert_int_equal(set.n, 0);
}

static void test_supported_archs(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  if (lib->version == 13000) {
    /* cuda-compat.md 7: NVRTC 13.0 reports these twelve. */
    static const int want[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};
    assert_int_equal(lib->n_archs, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < lib->n_archs; i++) assert_int_equal(lib->archs[i], want[i]);
  } else {
    /* A later 13.x: the reference has no list; 13.0's floor and sm_90 stay. */
    print_message("NVRTC %d: arch list not in the reference, checking 75 and 90 only\n", lib->version);
    int has75 = 0, has90 = 0;
    for (size_t i = 0; i < lib->n_archs; i++) {
      has75 |= lib->archs[i] == 75;
      has90 |= lib->archs[i] == 90;
      assert_true(lib->archs[i] >= 75);
    }
    assert_true(has75 && has90);
  }
  em_nvrtc_unload_all(&set);
}

/* $EMBER_NVRTC entries that cannot be used (missing, not a library, a library
 * without NVRTC in it) are passed over and said in `tried`; the real NVRTC
 * is still found after them. */
static void test_bad_env_paths_are_tolerated(void **state) {
  (void)state;
  em_nvrtc_set base;
  load_or_skip(&base);
  int newest = base.libs[0].version;
  size_t n = base.n;
  em_nvrtc_unload_all(&base);

  setenv("EMBER_NVRTC", "/nonexistent/libnvrtc.so.99:/dev/null::libm.so.6", 1);
  em_nvrtc_set set;
  em_nvrtc_load_all(&set);
  unsetenv("EMBER_NVRTC");
  assert_int_equal(set.n, n);
  assert_int_equal(set.libs[0].version, newest);
  if (!strstr(set.tried, "/nonexistent/libnvrtc.so.99"))
    fail_msg("tried does not mention the missing path: %s", set.tried);
  if (!strstr(set.tried, "/dev/null")) fail_msg("tried does not mention /dev/null: %s", set.tried);
  if (!strstr(set.tried, "libm.so.6")) fail_msg("tried does not mention libm.so.6: %s", set.tried);
  em_nvrtc_unload_all(&set);
}

/* A path in $EMBER_NVRTC is tried before the usual places; a second library
 * of the same version is not added. */
static void test_env_path_comes_first(void **state) {
  (void)state;
  em_nvrtc_set base;
  const em_nvrtc_lib *lib13 = nvrtc13(&base);
  int v = lib13->version;
  size_t n = base.n;
  em_nvrtc_unload_all(&base);
  if (access(TOOLKIT_NVRTC13, F_OK) != 0) {
    print_message("%s not present: skipped\n", TOOLKIT_NVRTC13);
    skip();
  }
  setenv("EMBER_NVRTC", TOOLKIT_NVRTC13 ":" TOOLKIT_NVRTC13, 1);
  em_nvrtc_set set;
  em_nvrtc_load_all(&set);
  unsetenv("EMBER_NVRTC");
  assert_int_equal(set.n, n);
  int found = 0;
  for (size_t i = 0; i < set.n; i++)
    if (set.libs[i].version == v) {
      found++;
      assert_string_equal(set.libs[i].path, TOOLKIT_NVRTC13);
    }
  assert_int_equal(found, 1);
  em_nvrtc_unload_all(&set);
}

/* ---- compiling -------------------------------------------------------------- */

static void test_kernels_compile_to_cubins(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  static const int sms[] = {75, 90};
  for (size_t m = 0; m < N_MODULES; m++)
    for (size_t k = 0; k < 2; k++) {
      void *cubin = NULL;
      size_t size = 0;
      em_status st = compile_module(lib, MODULE_KERNELS[m].module, sms[k], 1, &cubin, &size);
      if (st) fail_msg("%s for sm_%d: %s", MODULE_KERNELS[m].module, sms[k], em_last_error());
      assert_true(size > 64);
      assert_memory_equal(cubin, "\x7f" "ELF", 4);
      em_cubin_info info;
      char kernels[512];
      st = em_cubin_read(cubin, size, &info, kernels, sizeof kernels);
      if (st) fail_msg("%s sm_%d cubin: %s", MODULE_KERNELS[m].module, sms[k], em_last_error());
      assert_int_equal(info.sm, sms[k]);
      assert_int_equal(info.abi_version, 8); /* V2: every CUDA 13 cubin (cuda-compat.md 5.1) */
      assert_int_equal(info.os_abi, 0x41);
      assert_int_equal(info.variant, 0);
      assert_int_equal(info.is_relocatable, 0);
      /* .note.nv.cuinfo carries the toolkit: 13.0 for NVRTC 13.0. */
      assert_int_equal(info.toolkit, lib->version == 13000 ? 13000 : lib->version);
      if (!same_kernels(kernels, MODULE_KERNELS[m].kernels))
        fail_msg("%s sm_%d cubin defines \"%s\"", MODULE_KERNELS[m].module, sms[k], kernels);
      free(cubin);
    }
  em_nvrtc_unload_all(&set);
}

/* NVRTC 13.0 rejects sm_70 (cuda-compat.md 7): EM_ERR_NVRTC, and the
 * message says which option. */
static void test_unsupported_sm_is_an_nvrtc_error(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  void *out = NULL;
  size_t size = 0;
  em_clear_error();
  assert_int_equal(compile_module(lib, "elementwise", 70, 1, &out, &size), EM_ERR_NVRTC);
  assert_null(out);
  const char *msg = em_last_error();
  if (!strstr(msg, "gpu-architecture") && !strstr(msg, "-arch")) fail_msg("message does not name the option: %s", msg);
  em_nvrtc_unload_all(&set);
}

static const char TINY[] =
    "extern \"C\" __global__ void madd(float *o, const float *a, const float *b, const float *c) {\n"
    "  o[0] = a[0] * b[0] + c[0];\n"
    "}\n";

/* want_cubin = 0 gives PTX for compute_<sm>; --fmad=false leaves a*b+c as a
 * rounded multiply and a rounded add. The control (NVRTC's defaults) fuses it. */
static void test_fmad_off_tiny(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  char *control = ptx_with_defaults(lib, TINY, 0, NULL, NULL);
  if (!has_float_fma(control)) fail_msg("control PTX has no fma, so the check below proves nothing:\n%s", control);
  free(control);
  void *out = NULL;
  size_t size = 0;
  assert_int_equal(em_nvrtc_compile(lib, "tiny.cu", TINY, 0, NULL, NULL, 75, 0, &out, &size), EM_OK);
  char *ptx = malloc(size + 1);
  memcpy(ptx, out, size);
  ptx[size] = '\0';
  free(out);
  assert_non_null(strstr(ptx, ".target sm_75"));
  assert_non_null(strstr(ptx, ".entry madd"));
  if (has_float_fma(ptx)) fail_msg("--fmad=false PTX still contracts:\n%s", ptx);
  assert_non_null(strstr(ptx, "mul.rn.f32"));
  assert_non_null(strstr(ptx, "add.rn.f32"));
  free(ptx);
  em_nvrtc_unload_all(&set);
}

/* The same for every kernel source: no contraction anywhere. */
static void test_fmad_off_kernels(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  for (size_t m = 0; m < N_MODULES; m++) {
    void *out = NULL;
    size_t size = 0;
    em_status st = compile_module(lib, MODULE_KERNELS[m].module, 75, 0, &out, &size);
    if (st) fail_msg("%s: %s", MODULE_KERNELS[m].module, em_last_error());
    char *ptx = malloc(size + 1);
    memcpy(ptx, out, size);
    ptx[size] = '\0';
    free(out);
    assert_non_null(strstr(ptx, ".target sm_75"));
    if (has_float_fma(ptx)) fail_msg("%s: --fmad=false PTX contracts a multiply-add", MODULE_KERNELS[m].module);
    free(ptx);
  }
  /* Control: axpy's "p = a * x[i]; y[i] = p + y[i]" fuses under the defaults,
   * so the loop above would have caught a compile without --fmad=false. */
  char *src = read_src("kernels/elementwise.cu"), *hdr = read_src("kernels/em_kernel.h");
  const char *headers[] = {hdr}, *names[] = {"em_kernel.h"};
  char *control = ptx_with_defaults(lib, src, 1, headers, names);
  if (!has_float_fma(control)) fail_msg("control: elementwise.cu does not fuse even with the defaults");
  free(control);
  free(src);
  free(hdr);
  em_nvrtc_unload_all(&set);
}

/* A syntax error: EM_ERR_NVRTC, and the message carries NVRTC's log, which
 * is the only place the program's name and the error text appear. */
static void test_syntax_error_carries_the_log(void **state) {
  (void)state;
  em_nvrtc_set set;
  const em_nvrtc_lib *lib = nvrtc13(&set);
  void *out = NULL;
  size_t size = 0;
  em_clear_error();
  em_status st = em_nvrtc_compile(lib, "syntax_probe.cu", "extern \"C\" __global__ void k( { }\n", 0, NULL, NULL, 75,
                                  1, &out, &size);
  assert_int_equal(st, EM_ERR_NVRTC);
  assert_null(out);
  const char *msg = em_last_error();
  if (!strstr(msg, "syntax_probe.cu")) fail_msg("message lacks the log's file name: %s", msg);
  if (!strstr(msg, "error")) fail_msg("message lacks the log's error text: %s", msg);
  em_nvrtc_unload_all(&set);
}

/* NVRTC's static initialisers allocate memory that only its own globals
 * point to; each dlclose then leaves it unreachable, and LeakSanitizer (the
 * SAN=1 build) reports it under "<unknown module>". Holding one extra
 * reference to every NVRTC found keeps it mapped for the whole run, so each
 * load after the first reuses it and nothing is lost (the references are
 * never dropped: unmapping at the end would lose it too). Not Ember's leak. */
static void *pinned[EM_NVRTC_MAX];

static int pin_nvrtc(void **state) {
  (void)state;
  em_nvrtc_set set;
  unsetenv("EMBER_NVRTC");
  em_nvrtc_load_all(&set);
  for (size_t i = 0; i < set.n; i++) pinned[i] = dlopen(set.libs[i].path, RTLD_NOW | RTLD_LOCAL);
  em_nvrtc_unload_all(&set);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_finds_nvrtc13_with_its_version),
      cmocka_unit_test(test_supported_archs),
      cmocka_unit_test(test_bad_env_paths_are_tolerated),
      cmocka_unit_test(test_env_path_comes_first),
      cmocka_unit_test(test_kernels_compile_to_cubins),
      cmocka_unit_test(test_unsupported_sm_is_an_nvrtc_error),
      cmocka_unit_test(test_fmad_off_tiny),
      cmocka_unit_test(test_fmad_off_kernels),
      cmocka_unit_test(test_syntax_error_carries_the_log),
  };
  return cmocka_run_group_tests(tests, pin_nvrtc, NULL);
}
