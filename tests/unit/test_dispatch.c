/* Integration tests of the dispatch runtime against the fake libcuda
 * (tests/fakecuda). The runtime reads EMBER_LIBCUDA, EMBER_STRICT, EMBER_FORCE
 * and CUDA_DISABLE_PTX_JIT when it initialises, and em_shutdown() makes the
 * next call initialise again; the fake reads FAKECUDA_* and
 * CUDA_VISIBLE_DEVICES at cuInit. So each test starts a new "process
 * lifetime" with configure(): set the environment, em_shutdown(), reset the
 * fake, then call the API. Without $FAKECUDA_LIB every test is skipped.
 *
 * Expected outcomes come from the rules, not from running the runtime:
 *   the selection policy of DESIGN.md, applied by expected_plan() below to the
 *   image table this library embeds (which cubins exist depends on whether the
 *   build had nvcc, so expectations are computed from the table's contents);
 *   an image loads only on a driver >= the first CUDA of its toolkit (cubin,
 *   minor-version compatibility from CUDA 11: cuda-compat.md 2.2) or of its PTX
 *   ISA (cuda-compat.md 1 note 3, [PTXMAP]);
 *   a cubin runs on a higher minor of its major only between desktop GPUs, never
 *   to or from a Tegra SM (CUDA C++ Programming Guide, "Binary Compatibility":
 *   "Binary compatibility is supported only for the desktop. It is not supported
 *   for Tegra."; Tegra CCs from cuda-compat.md 3.1);
 *   of several cubins of one SM (the build embeds sm_75 ... sm_90 from nvcc 13.0,
 *   NVRTC 12.9 and NVRTC 11.8) the policy takes the newest toolkit the driver
 *   loads (DESIGN.md, runtime/policy.c; the newest compiler's code and fixes);
 *   NVRTC 13 targets sm_75 and up (cuda-compat.md 1: CUDA 13.0 targets) and its
 *   cubins need a CUDA 13 driver (2.2);
 *   CUresult names and numbers: cuda.h of CUDA 13.0 (cuda-compat.md 6);
 *   driver states, EMBER_STRICT / EMBER_FORCE / fallbacks: DESIGN.md and
 *   include/ember/device.h, dispatch.h, runtime.h. */
#include <dlfcn.h>
#include <errno.h>
#include <float.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <valgrind/valgrind.h>

#include "ember.h"
#include "fakecuda/fakecuda.h"
#include "kernel_cache.h"

/* ----------------------------------------------------------- the fake --- */

static struct {
  void *handle; /* our own reference: the fake stays loaded across em_shutdown */
  char real[PATH_MAX];
  fakecuda_reset_fn reset;
  fakecuda_call_count_fn calls;
  fakecuda_count_fn jits, launches;
} fk;

static char tmp_root[PATH_MAX];
static int cache_serial;

/* Every variable the runtime or the fake reads. */
static const char *const managed_vars[] = {
    "EMBER_LIBCUDA",    "EMBER_STRICT",         "EMBER_FORCE",        "EMBER_CACHE_DIR",
    "EMBER_LOG",        "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_PTX_JIT", "CUDA_VISIBLE_DEVICES",
    "FAKECUDA_DEVICES", "FAKECUDA_DRIVER",      "FAKECUDA_FAIL",      "FAKECUDA_STUB",
    "FAKECUDA_NO_JIT",  "FAKECUDA_MEM_MB"};

static void *hook(const char *name) {
  void *p = dlsym(fk.handle, name);
  if (!p) fprintf(stderr, "test_dispatch: %s does not export %s\n", fk.real, name);
  return p;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int group_setup(void **state) {
  (void)state;
  const char *lib = getenv("FAKECUDA_LIB");
  if (!lib || !*lib) {
    fprintf(stderr, "test_dispatch: FAKECUDA_LIB is not set (run through build-tools/run_tests.sh): "
                    "skipping every test\n");
    return 0;
  }
  if (!realpath(lib, fk.real)) {
    fprintf(stderr, "test_dispatch: FAKECUDA_LIB=%s: %s\n", lib, strerror(errno));
    return -1;
  }
  fk.handle = dlopen(fk.real, RTLD_NOW | RTLD_LOCAL);
  if (!fk.handle) {
    fprintf(stderr, "test_dispatch: cannot load %s: %s\n", fk.real, dlerror());
    return -1;
  }
  *(void **)&fk.reset = hook("fakecuda_reset");
  *(void **)&fk.calls = hook("fakecuda_call_count");
  *(void **)&fk.jits = hook("fakecuda_jit_count");
  *(void **)&fk.launches = hook("fakecuda_launch_count");
  if (!fk.reset || !fk.calls || !fk.jits || !fk.launches) return -1;
  const char *t = getenv("TMPDIR");
  snprintf(tmp_root, sizeof tmp_root, "%s/ember-dispatch-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmp_root)) {
    fprintf(stderr, "test_dispatch: mkdtemp %s: %s\n", tmp_root, strerror(errno));
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  em_shutdown();
  if (tmp_root[0]) nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  /* The fake's state is freed, but the fake stays loaded: what it keeps in
   * its globals must stay reachable for the leak checker at exit. */
  if (fk.handle) fk.reset();
  return 0;
}

static int test_teardown(void **state) {
  (void)state;
  em_shutdown();
  return 0;
}

#define NEED_FAKE()          \
  do {                       \
    if (!fk.handle) skip();  \
  } while (0)

/* A fresh, not yet existing cache directory (the runtime creates it). */
static void fresh_cache_dir(char *out, size_t cap) {
  snprintf(out, cap, "%s/cache%d", tmp_root, ++cache_serial);
}

/* Starts a new process lifetime: every managed variable unset, then
 * EMBER_LIBCUDA = the fake, EMBER_CACHE_DIR = a fresh directory, then the
 * "NAME=value" settings given (which may override both). */
static void configure_list(const char *const *settings) {
  em_shutdown();
  for (size_t i = 0; i < sizeof managed_vars / sizeof managed_vars[0]; i++) unsetenv(managed_vars[i]);
  char cache[PATH_MAX];
  fresh_cache_dir(cache, sizeof cache);
  setenv("EMBER_LIBCUDA", fk.real, 1);
  setenv("EMBER_CACHE_DIR", cache, 1);
  for (; *settings; settings++) {
    const char *eq = strchr(*settings, '=');
    assert_non_null(eq);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(eq - *settings), *settings);
    setenv(name, eq + 1, 1);
  }
  fk.reset();
}
#define configure(...) configure_list((const char *const[]){__VA_ARGS__, NULL})

/* Ends this lifetime but keeps the environment (and the cache directory). */
static void relaunch(void) {
  em_shutdown();
  fk.reset();
}

/* assert that s is in the message, printing the message when it is not. */
#define assert_contains(msg, s)                                                            \
  do {                                                                                     \
    const char *m_ = (msg), *s_ = (s);                                                     \
    if (!strstr(m_, s_)) fail_msg("expected \"%s\" in the message: \"%s\"", s_, m_);       \
  } while (0)

#define assert_ok(call)                                                                      \
  do {                                                                                       \
    em_status st_ = (call);                                                                  \
    if (st_ != EM_OK) fail_msg("%s -> %s: %s", #call, em_status_name(st_), em_last_error()); \
  } while (0)

#define assert_status(call, want)                                                             \
  do {                                                                                        \
    em_status st_ = (call);                                                                   \
    if (st_ != (want))                                                                        \
      fail_msg("%s -> %s, expected %s: %s", #call, em_status_name(st_), em_status_name(want), \
               em_last_error());                                                              \
  } while (0)

/* ---------------------------------------------------- the image table --- */

/* Sized for the full build (14 modules x 14 SMs x 2 toolkits, PTX, legacy PTX
 * and sources: about 550 images today), with room to grow. */
#define TABLE_MAX_IMAGES 4096
#define TABLE_MAX_MODULES 64

typedef struct table {
  em_image_info img[TABLE_MAX_IMAGES];
  size_t n;
  const char *modules[TABLE_MAX_MODULES];
  size_t n_modules;
} table;

static void read_table(table *t) {
  memset(t, 0, sizeof *t);
  assert_ok(em_image_count(&t->n));
  assert_true(t->n > 0 && t->n <= TABLE_MAX_IMAGES);
  for (size_t i = 0; i < t->n; i++) assert_ok(em_image_get(i, &t->img[i]));
  assert_ok(em_module_count(&t->n_modules));
  assert_true(t->n_modules > 0 && t->n_modules <= TABLE_MAX_MODULES);
  for (size_t i = 0; i < t->n_modules; i++) assert_ok(em_module_name(i, &t->modules[i]));
}

/* First CUDA release (cuDriverGetVersion form) of a PTX ISA: cuda-compat.md
 * section 1 note 3, from NVIDIA's own mapping [PTXMAP]; 3.2 -> 5.5 is an older
 * row of the same mapping (PTX ISA 3.2 came with CUDA 5.5). */
static int isa_first_cuda(int isa) {
  static const int rows[][2] = {
      {32, 5050},  {50, 8000},  {60, 9000},  {61, 9010},  {62, 9020},  {63, 10000}, {64, 10010},
      {65, 10020}, {70, 11000}, {71, 11010}, {72, 11020}, {73, 11030}, {74, 11040}, {75, 11050},
      {76, 11060}, {77, 11070}, {78, 11080}, {80, 12000}, {81, 12010}, {82, 12020}, {83, 12030},
      {84, 12040}, {85, 12050}, {86, 12070}, {87, 12080}, {88, 12090}, {90, 13000}, {91, 13010}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i][0] == isa) return rows[i][1];
  fail_msg("PTX ISA %d.%d is not in this test's table: add its row from cuda-compat.md", isa / 10, isa % 10);
  return 0;
}

/* Lowest driver that loads an image: cubins by minor-version compatibility
 * (a CUDA 11+ toolkit needs a driver of its major), PTX by its ISA. */
static int rule_min_driver(const em_image_info *img) {
  if (img->kind == EM_IMAGE_CUBIN) {
    if (!img->toolkit) return 0;
    return img->toolkit >= 11000 ? img->toolkit / 1000 * 1000 : img->toolkit;
  }
  if (img->kind == EM_IMAGE_PTX) return isa_first_cuda(img->ptx_isa);
  return 0;
}

static int of_module(const em_image_info *img, const char *module) { return !strcmp(img->module, module); }

/* Jetson / Drive compute capabilities (cuda-compat.md 3.1). */
static int tegra_cc(int cc) {
  static const int tegra[] = {32, 53, 62, 72, 87, 101, 110};
  for (size_t i = 0; i < sizeof tegra / sizeof tegra[0]; i++)
    if (tegra[i] == cc) return 1;
  return 0;
}

/* The NVRTC this process can load, as the policy's step 4 needs it: 0 none,
 * else its version. Only NVRTC 13 has known rules here; the tests that depend
 * on step 4 skip when another version (or several) is installed. */
static int nvrtc_version_here(int *several) {
  size_t n = 0;
  assert_ok(em_cuda_library_count(&n));
  for (size_t i = 0; i < n; i++) {
    em_cuda_library L;
    assert_ok(em_cuda_library_get(i, &L));
    if (strcmp(L.name, "nvrtc")) continue;
    if (!L.found) return 0;
    int major = 0, minor = 0;
    sscanf(L.version, "%d.%d", &major, &minor);
    *several = L.note[0] != '\0';
    return major * 1000 + minor * 10;
  }
  return 0;
}

typedef struct expectation {
  em_path path;
  int step;
  int image; /* -1 for NVRTC, CPU, none */
  int known; /* 0: step 4 would decide with an NVRTC whose rules this test lacks */
} expectation;

/* DESIGN.md's five steps for one module on one device, over the embedded
 * table, written independently of runtime/policy.c. */
static expectation expected_plan(const table *t, const char *module, int cc, int driver, int jit_disabled,
                                 em_path force, int nvrtc, int nvrtc_several) {
  expectation e = {EM_PATH_NONE, 0, -1, 1};
  int best = -1;
  /* Step 1: a cubin for exactly this SM (the default build has no a/f cubins),
   * of the newest toolkit the driver loads. */
  if (force == EM_PATH_NONE || force == EM_PATH_CUBIN) {
    for (size_t i = 0; i < t->n; i++) {
      const em_image_info *img = &t->img[i];
      if (of_module(img, module) && img->kind == EM_IMAGE_CUBIN && img->arch == cc && rule_min_driver(img) <= driver &&
          (best < 0 || img->toolkit > t->img[best].toolkit))
        best = (int)i;
    }
    if (best >= 0) return (expectation){EM_PATH_CUBIN, 1, best, 1};
    /* Step 2: same major, the highest lower minor, never an 'a' cubin, never to
     * or from Tegra; at that minor the newest toolkit the driver loads. */
    for (size_t i = 0; i < t->n; i++) {
      const em_image_info *img = &t->img[i];
      if (of_module(img, module) && img->kind == EM_IMAGE_CUBIN && img->arch / 10 == cc / 10 && img->arch < cc &&
          img->variant != 'a' && !tegra_cc(img->arch) && !tegra_cc(cc) && rule_min_driver(img) <= driver &&
          (best < 0 || img->arch > t->img[best].arch ||
           (img->arch == t->img[best].arch && img->toolkit > t->img[best].toolkit)))
        best = (int)i;
    }
    if (best >= 0) return (expectation){EM_PATH_CUBIN, 2, best, 1};
  }
  /* Step 3: PTX, the highest compute_XY not above the device whose ISA the
   * driver compiles; at equal arch nvcc's PTX before clang's legacy one. */
  if (!jit_disabled) {
    for (size_t i = 0; i < t->n; i++) {
      const em_image_info *img = &t->img[i];
      int legacy = (img->flags & EM_IMAGE_LEGACY) != 0;
      em_path p = legacy ? EM_PATH_PTX_LEGACY : EM_PATH_PTX;
      if (!of_module(img, module) || img->kind != EM_IMAGE_PTX || img->variant || img->arch > cc ||
          isa_first_cuda(img->ptx_isa) > driver || (force != EM_PATH_NONE && force != p))
        continue;
      if (best < 0 || img->arch > t->img[best].arch ||
          (img->arch == t->img[best].arch && !legacy && (t->img[best].flags & EM_IMAGE_LEGACY)))
        best = (int)i;
    }
    if (best >= 0)
      return (expectation){(t->img[best].flags & EM_IMAGE_LEGACY) ? EM_PATH_PTX_LEGACY : EM_PATH_PTX, 3, best, 1};
  }
  /* Step 4: NVRTC to a cubin for this SM. */
  if (force == EM_PATH_NONE || force == EM_PATH_NVRTC) {
    int source = 0;
    for (size_t i = 0; i < t->n; i++) source |= of_module(&t->img[i], module) && t->img[i].kind == EM_IMAGE_SOURCE;
    if (nvrtc && source) {
      if (nvrtc / 1000 != 13 || nvrtc_several) {
        e.known = 0;
        return e;
      }
      if (cc >= 75 && driver >= 13000) return (expectation){EM_PATH_NVRTC, 4, -1, 1};
    }
  }
  /* Step 5: the CPU, unless a path other than the CPU is forced. */
  if (force == EM_PATH_NONE || force == EM_PATH_CPU) return (expectation){EM_PATH_CPU, 5, -1, 1};
  return e;
}

/* Kernel names of a module: every name in its images' lists. */
static size_t module_kernels(const table *t, const char *module, char names[][64], size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (!of_module(&t->img[i], module) || !t->img[i].kernels) continue;
    const char *p = t->img[i].kernels;
    while (*p) {
      size_t len = strcspn(p, ",");
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)len, p);
      size_t k = 0;
      while (k < n && strcmp(names[k], name)) k++;
      if (k == n && n < cap) snprintf(names[n++], 64, "%s", name);
      p += len + (p[len] == ',');
    }
  }
  return n;
}

/* Whether a cubin for CC 3.5 or 3.7 of the module loads on a K80 with this driver. */
static int kepler_cubin_loads(const table *t, const char *module, int driver) {
  for (size_t i = 0; i < t->n; i++) {
    const em_image_info *img = &t->img[i];
    if (of_module(img, module) && img->kind == EM_IMAGE_CUBIN && (img->arch == 35 || img->arch == 37) &&
        rule_min_driver(img) <= driver)
      return 1;
  }
  return 0;
}

static int has_image(const table *t, const char *module, em_image_kind kind, int arch, int legacy) {
  for (size_t i = 0; i < t->n; i++) {
    const em_image_info *img = &t->img[i];
    if (of_module(img, module) && img->kind == kind && (arch < 0 || img->arch == arch) &&
        (legacy < 0 || ((img->flags & EM_IMAGE_LEGACY) != 0) == legacy))
      return 1;
  }
  return 0;
}

/* CUresult names, cuda.h of CUDA 13.0 (cuda-compat.md section 6). */
static const char *cu_name(int code) {
  switch (code) {
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 34: return "CUDA_ERROR_STUB_LIBRARY";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 200: return "CUDA_ERROR_INVALID_IMAGE";
  case 201: return "CUDA_ERROR_INVALID_CONTEXT";
  case 218: return "CUDA_ERROR_INVALID_PTX";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 500: return "CUDA_ERROR_NOT_FOUND";
  case 719: return "CUDA_ERROR_LAUNCH_FAILED";
  case 999: return "CUDA_ERROR_UNKNOWN";
  default: fail_msg("no name for CUresult %d in this test", code); return "";
  }
}

/* "CUDA_ERROR_OUT_OF_MEMORY (2)" */
static const char *cu_named(int code) {
  static char buf[96];
  snprintf(buf, sizeof buf, "%s (%d)", cu_name(code), code);
  return buf;
}

static int matches(const char *re, const char *s) {
  regex_t r;
  assert_int_equal(regcomp(&r, re, REG_EXTENDED | REG_NOSUB), 0);
  int ok = regexec(&r, s, 0, NULL, 0) == 0;
  regfree(&r);
  return ok;
}

/* -------------------------------------------------------- driver states --- */

static void test_driver_missing_file(void **state) {
  (void)state;
  NEED_FAKE();
  char missing[PATH_MAX + 32];
  snprintf(missing, sizeof missing, "%s/no-such-dir/libcuda.so.1", tmp_root);
  char setting[PATH_MAX + 64];
  snprintf(setting, sizeof setting, "EMBER_LIBCUDA=%s", missing);
  configure(setting);
  em_driver_info d;
  assert_ok(em_driver_get_info(&d));
  assert_int_equal(d.state, EM_DRIVER_NOT_FOUND);
  assert_contains(d.message, missing);
  assert_string_equal(d.library_path, "");
  int n = -1;
  assert_ok(em_cuda_device_count(&n));
  assert_int_equal(n, 0);
  /* No GPU: CUDA devices are refused, the CPU works. */
  em_device_info info;
  assert_true(em_device_get_info(em_cuda(0), &info) != EM_OK);
  void *p = NULL;
  assert_true(em_malloc(em_cuda(0), 64, &p) != EM_OK);
  float y[37];
  assert_ok(em_fill_f32(em_cpu(), y, 2.5f, 37, NULL));
  for (int i = 0; i < 37; i++) assert_true(y[i] == 2.5f);
  assert_ok(em_device_get_info(em_cpu(), &info));
  assert_int_equal(info.device.kind, EM_DEVICE_CPU);
  assert_true(info.sm_count >= 1);
}

static void test_driver_stub(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_STUB=1", "FAKECUDA_DEVICES=8.6");
  em_driver_info d;
  assert_ok(em_driver_get_info(&d));
  assert_int_equal(d.state, EM_DRIVER_STUB);
  assert_int_equal(d.cuda_error, 34);
  assert_contains(d.message, "CUDA_ERROR_STUB_LIBRARY");
  int n = -1;
  assert_ok(em_cuda_device_count(&n));
  assert_int_equal(n, 0);
}

static void test_driver_no_device(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=");
  em_driver_info d;
  assert_ok(em_driver_get_info(&d));
  assert_int_equal(d.state, EM_DRIVER_NO_DEVICE);
  assert_int_equal(d.cuda_error, 100); /* cuInit with no GPU: CUDA_ERROR_NO_DEVICE */
  int n = -1;
  assert_ok(em_cuda_device_count(&n));
  assert_int_equal(n, 0);
  assert_true(em_kernel_get(em_cuda(0), "em_fill_f32", &(em_kernel *){NULL}) != EM_OK);
}

static void test_visible_devices_hide_all(void **state) {
  (void)state;
  NEED_FAKE();
  /* Set but empty hides every device; an invalid first item ends the list. */
  static const char *const hide[] = {"CUDA_VISIBLE_DEVICES=", "CUDA_VISIBLE_DEVICES=-1", "CUDA_VISIBLE_DEVICES=2"};
  for (size_t i = 0; i < sizeof hide / sizeof hide[0]; i++) {
    configure("FAKECUDA_DEVICES=8.6,9.0", hide[i]);
    em_driver_info d;
    assert_ok(em_driver_get_info(&d));
    if (d.state != EM_DRIVER_NO_DEVICE) fail_msg("%s: state %d (%s)", hide[i], (int)d.state, d.message);
    int n = -1;
    assert_ok(em_cuda_device_count(&n));
    assert_int_equal(n, 0);
  }
}

static void test_visible_devices_select(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=3.7=Tesla K80,9.0=NVIDIA H100 80GB HBM3");
  em_device_info all[2];
  assert_ok(em_device_get_info(em_cuda(0), &all[0]));
  assert_ok(em_device_get_info(em_cuda(1), &all[1]));

  configure("FAKECUDA_DEVICES=3.7=Tesla K80,9.0=NVIDIA H100 80GB HBM3", "CUDA_VISIBLE_DEVICES=1");
  int n = -1;
  assert_ok(em_cuda_device_count(&n));
  assert_int_equal(n, 1);
  em_device_info info;
  assert_ok(em_device_get_info(em_cuda(0), &info));
  assert_int_equal(info.cc_major, 9);
  assert_int_equal(info.cc_minor, 0);
  assert_string_equal(info.name, "NVIDIA H100 80GB HBM3");
  assert_string_equal(info.uuid, all[1].uuid); /* the same physical GPU, renumbered 0 */
  assert_int_equal(info.device.ordinal, 0);
  assert_status(em_device_get_info(em_cuda(1), &info), EM_ERR_NOT_FOUND);

  /* By UUID, as nvidia-smi prints it. */
  char setting[128];
  snprintf(setting, sizeof setting, "CUDA_VISIBLE_DEVICES=%s", all[0].uuid);
  configure("FAKECUDA_DEVICES=3.7=Tesla K80,9.0=NVIDIA H100 80GB HBM3", setting);
  assert_ok(em_cuda_device_count(&n));
  assert_int_equal(n, 1);
  assert_ok(em_device_get_info(em_cuda(0), &info));
  assert_int_equal(info.cc_major * 10 + info.cc_minor, 37);
}

static void test_library_path_is_resolved(void **state) {
  (void)state;
  NEED_FAKE();
  /* Loaded through a symbolic link, the report names the real file. */
  char link[PATH_MAX + 32], setting[PATH_MAX + 64];
  snprintf(link, sizeof link, "%s/libcuda-link.so.1", tmp_root);
  unlink(link);
  assert_int_equal(symlink(fk.real, link), 0);
  snprintf(setting, sizeof setting, "EMBER_LIBCUDA=%s", link);
  configure("FAKECUDA_DEVICES=8.6", setting);
  em_driver_info d;
  assert_ok(em_driver_get_info(&d));
  assert_int_equal(d.state, EM_DRIVER_OK);
  assert_string_equal(d.library_path, fk.real);
  assert_int_equal(d.cuda_error, 0);
}

static void test_driver_init_failure(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6", "FAKECUDA_FAIL=cuInit=999");
  em_driver_info d;
  assert_ok(em_driver_get_info(&d));
  assert_int_equal(d.state, EM_DRIVER_INIT_FAILED);
  assert_int_equal(d.cuda_error, 999);
  assert_contains(d.message, "cuInit");
  assert_contains(d.message, cu_named(999));
  int n = -1;
  assert_ok(em_cuda_device_count(&n));
  assert_int_equal(n, 0);
  float y[3];
  assert_ok(em_fill_f32(em_cpu(), y, 1.0f, 3, NULL));
}

/* ---------------------------------------------------------- device info --- */

static void test_device_info(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6=NVIDIA GeForce RTX 3080,9.0=NVIDIA H100 80GB HBM3", "FAKECUDA_DRIVER=12080",
            "FAKECUDA_MEM_MB=10240");
  em_driver_info d;
  assert_ok(em_driver_get_info(&d));
  assert_int_equal(d.state, EM_DRIVER_OK);
  assert_int_equal(d.driver_version, 12080);
  static const struct { const char *name; int major, minor; } want[] = {{"NVIDIA GeForce RTX 3080", 8, 6},
                                                                        {"NVIDIA H100 80GB HBM3", 9, 0}};
  em_device_info info[2];
  for (int i = 0; i < 2; i++) {
    assert_ok(em_device_get_info(em_cuda(i), &info[i]));
    assert_int_equal(info[i].device.kind, EM_DEVICE_CUDA);
    assert_int_equal(info[i].device.ordinal, i);
    assert_string_equal(info[i].name, want[i].name);
    assert_int_equal(info[i].cc_major, want[i].major);
    assert_int_equal(info[i].cc_minor, want[i].minor);
    assert_true(info[i].sm_count > 0);
    assert_true(info[i].total_memory == (uint64_t)10240 << 20);
    /* cuDeviceGetPCIBusId: "[domain]:[bus]:[device].[function]" in hexadecimal. */
    if (!matches("^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9a-fA-F]$", info[i].pci_bus_id))
      fail_msg("pci_bus_id '%s'", info[i].pci_bus_id);
    if (!matches("^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", info[i].uuid))
      fail_msg("uuid '%s'", info[i].uuid);
    assert_int_equal(info[i].driver_version, 12080);
  }
  assert_string_not_equal(info[0].uuid, info[1].uuid);
  assert_string_not_equal(info[0].pci_bus_id, info[1].pci_bus_id);
  em_device_info cpu;
  assert_ok(em_device_get_info(em_cpu(), &cpu));
  assert_int_equal(cpu.cc_major, 0);
  assert_int_equal(cpu.driver_version, 0);
  assert_string_equal(cpu.pci_bus_id, "");
}

/* ----------------------------------------------------------------- plans --- */

/* Every module's plan on every device of the configuration matches the rules;
 * the chosen candidate is the expected image and every plan has a reason. */
static void check_plans(const char *devices, int driver, int jit_disabled, em_path force) {
  char s_dev[256], s_drv[64];
  snprintf(s_dev, sizeof s_dev, "FAKECUDA_DEVICES=%s", devices);
  snprintf(s_drv, sizeof s_drv, "FAKECUDA_DRIVER=%d", driver);
  configure(s_dev, s_drv, jit_disabled ? "CUDA_DISABLE_PTX_JIT=1" : "CUDA_DISABLE_PTX_JIT=0",
            force == EM_PATH_NONE ? "EMBER_FORCE=" : force == EM_PATH_CUBIN ? "EMBER_FORCE=cubin"
                                                   : force == EM_PATH_PTX   ? "EMBER_FORCE=ptx"
                                                   : force == EM_PATH_NVRTC ? "EMBER_FORCE=nvrtc"
                                                   : force == EM_PATH_CPU   ? "EMBER_FORCE=cpu"
                                                                            : "EMBER_FORCE=ptx-legacy");
  table t;
  read_table(&t);
  int several = 0, nvrtc = nvrtc_version_here(&several);
  int n = 0;
  assert_ok(em_cuda_device_count(&n));
  assert_true(n > 0);
  for (int d = 0; d < n; d++) {
    em_device_info info;
    assert_ok(em_device_get_info(em_cuda(d), &info));
    int cc = info.cc_major * 10 + info.cc_minor;
    for (size_t m = 0; m < t.n_modules; m++) {
      em_plan p;
      assert_ok(em_dispatch_plan(em_cuda(d), t.modules[m], &p));
      expectation e = expected_plan(&t, t.modules[m], cc, driver, jit_disabled, force, nvrtc, several);
      if (!e.known) continue;
      if (p.path != e.path || (e.path != EM_PATH_NONE && p.step != e.step))
        fail_msg("CC %d driver %d module %s: plan %s step %d (%s), expected %s step %d", cc, driver, t.modules[m],
                 em_path_name(p.path), p.step, p.reason, em_path_name(e.path), e.step);
      assert_true(p.reason[0] != '\0');
      assert_int_equal(p.strict_error, 0);
      if (e.path == EM_PATH_NONE) {
        assert_int_equal(p.chosen, -1);
        continue;
      }
      assert_true(p.chosen >= 0 && p.chosen < p.n_candidates);
      const em_plan_candidate *c = &p.candidates[p.chosen];
      assert_int_equal(c->path, e.path);
      assert_true(c->viable);
      if (e.image >= 0 && c->image_index != e.image)
        fail_msg("CC %d driver %d module %s: chose image %d, expected %d", cc, driver, t.modules[m], c->image_index,
                 e.image);
      for (int i = 0; i < p.n_candidates; i++) assert_true(p.candidates[i].reason[0] != '\0');
    }
  }
}

#define ALL_CCS "3.5,3.7,5.0,5.2,6.0,6.1,7.0,7.2,7.5,8.0,8.6,8.7,8.9,9.0,10.0,10.3,12.0,12.1"

static void test_plans_follow_policy(void **state) {
  (void)state;
  NEED_FAKE();
  /* R470, R535, R570, R580 (cuda-compat.md 2.3). */
  static const int drivers[] = {11040, 12020, 12080, 13000};
  for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++) check_plans(ALL_CCS, drivers[i], 0, EM_PATH_NONE);
}

static void test_plans_forced_and_jit_disabled(void **state) {
  (void)state;
  NEED_FAKE();
  static const em_path forced[] = {EM_PATH_CUBIN, EM_PATH_PTX, EM_PATH_PTX_LEGACY, EM_PATH_CPU};
  for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
    check_plans(ALL_CCS, 13000, 0, forced[i]);
    check_plans(ALL_CCS, 12020, 0, forced[i]);
  }
  check_plans(ALL_CCS, 13000, 1, EM_PATH_NONE);
  check_plans(ALL_CCS, 11040, 1, EM_PATH_NONE);
}

/* The build always embeds clang's legacy compute_35 PTX and the sources
 * (DESIGN.md "What the build embeds"), whatever nvcc was there. */
static void test_table_has_legacy_ptx_and_sources(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6");
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    if (!has_image(&t, t.modules[m], EM_IMAGE_PTX, 35, 1)) fail_msg("module %s has no legacy PTX", t.modules[m]);
    if (!has_image(&t, t.modules[m], EM_IMAGE_SOURCE, -1, -1)) fail_msg("module %s has no source", t.modules[m]);
  }
  /* The table's own min_driver agrees with the rules. */
  for (size_t i = 0; i < t.n; i++)
    if (t.img[i].kind == EM_IMAGE_CUBIN || t.img[i].kind == EM_IMAGE_PTX)
      assert_int_equal(t.img[i].min_driver, rule_min_driver(&t.img[i]));
}

/* A K80 on R470 (CUDA 11.4) runs the CUDA 11.x sm_37 cubin when the build has
 * one (ptxas 11.8 or NVCC_LEGACY; minor-version compatibility), else the legacy
 * PTX; on R418 (CUDA 10.1) no 11.x cubin loads, and the legacy PTX (ISA 3.2,
 * CUDA 5.5) remains. */
static void test_k80_on_r470_and_r418(void **state) {
  (void)state;
  NEED_FAKE();
  static const int drivers[] = {11040, 10010};
  for (size_t k = 0; k < 2; k++) {
    char setting[64];
    snprintf(setting, sizeof setting, "FAKECUDA_DRIVER=%d", drivers[k]);
    configure("FAKECUDA_DEVICES=3.7=Tesla K80", setting);
    table t;
    read_table(&t);
    for (size_t m = 0; m < t.n_modules; m++) {
      int cubin37 = -1;
      for (size_t i = 0; i < t.n; i++)
        if (of_module(&t.img[i], t.modules[m]) && t.img[i].kind == EM_IMAGE_CUBIN && t.img[i].arch == 37 &&
            t.img[i].toolkit / 1000 == 11)
          cubin37 = (int)i;
      em_plan p;
      assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
      const em_image_info *img = &t.img[p.candidates[p.chosen].image_index];
      if (drivers[k] == 11040 && cubin37 >= 0) {
        assert_int_equal(p.path, EM_PATH_CUBIN);
        assert_int_equal(p.step, 1);
        assert_int_equal(p.candidates[p.chosen].image_index, cubin37);
        continue;
      }
      assert_int_equal(p.path, EM_PATH_PTX_LEGACY);
      assert_int_equal(p.step, 3);
      assert_int_equal(img->kind, EM_IMAGE_PTX);
      assert_int_equal(img->arch, 35);
      assert_true(img->flags & EM_IMAGE_LEGACY);
    }
  }
}

static void test_h100_plans_by_driver(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000");
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    /* An sm_90 cubin (nvcc 13) loads on R580: step 1. Without one, PTX. */
    if (has_image(&t, t.modules[m], EM_IMAGE_CUBIN, 90, -1)) {
      assert_int_equal(p.path, EM_PATH_CUBIN);
      assert_int_equal(p.step, 1);
    } else {
      assert_int_equal(p.step, 3);
    }
  }
  /* On R535 (CUDA 12.2) no CUDA 13 cubin or ISA 9.0 PTX loads. An sm_90
   * cubin of a CUDA 12.x or 11.x toolkit does (the build's NVRTC 12.9 and 11.8
   * ones): the newest of them, at step 1. Without one, the legacy PTX. */
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=12020");
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    int newer_than_r535 = 1, sm90 = -1;
    for (size_t i = 0; i < t.n; i++) {
      const em_image_info *img = &t.img[i];
      if (!of_module(img, t.modules[m]) || (img->kind != EM_IMAGE_CUBIN && img->kind != EM_IMAGE_PTX) ||
          (img->flags & EM_IMAGE_LEGACY) || rule_min_driver(img) > 12020)
        continue;
      newer_than_r535 = 0;
      if (img->kind == EM_IMAGE_CUBIN && img->arch == 90 && img->toolkit / 1000 <= 12 &&
          (sm90 < 0 || img->toolkit > t.img[sm90].toolkit))
        sm90 = (int)i;
    }
    if (sm90 >= 0) {
      assert_int_equal(p.path, EM_PATH_CUBIN);
      assert_int_equal(p.step, 1);
      assert_int_equal(p.candidates[p.chosen].image_index, sm90);
    } else if (newer_than_r535) {
      assert_int_equal(p.path, EM_PATH_PTX_LEGACY);
      assert_int_equal(p.step, 3);
    }
    /* Every rejected image says why. */
    for (int i = 0; i < p.n_candidates; i++)
      if (!p.candidates[i].viable && p.candidates[i].image_index >= 0) assert_true(p.candidates[i].reason[0]);
  }
}

static void test_two_gpus_have_independent_plans(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=3.7=Tesla K80,9.0=NVIDIA H100 80GB HBM3", "FAKECUDA_DRIVER=13000");
  table t;
  read_table(&t);
  int several = 0, nvrtc = nvrtc_version_here(&several);
  /* Ask the H100 first: the K80's plan must not inherit anything from it. */
  for (int pass = 0; pass < 2; pass++) {
    for (int d = 1; d >= 0; d--) {
      int cc = d ? 90 : 37;
      for (size_t m = 0; m < t.n_modules; m++) {
        em_plan p;
        assert_ok(em_dispatch_plan(em_cuda(d), t.modules[m], &p));
        expectation e = expected_plan(&t, t.modules[m], cc, 13000, 0, EM_PATH_NONE, nvrtc, several);
        assert_int_equal(p.path, e.path);
        if (e.image >= 0) assert_int_equal(p.candidates[p.chosen].image_index, e.image);
      }
    }
  }
  em_plan k80, h100;
  assert_ok(em_dispatch_plan(em_cuda(0), t.modules[0], &k80));
  assert_ok(em_dispatch_plan(em_cuda(1), t.modules[0], &h100));
  /* R580 loads any cubin of CUDA 13 or older: an sm_37 one if the build has it. */
  assert_int_equal(k80.path, has_image(&t, t.modules[0], EM_IMAGE_CUBIN, 37, -1) ? EM_PATH_CUBIN : EM_PATH_PTX_LEGACY);
  if (has_image(&t, t.modules[0], EM_IMAGE_CUBIN, 90, -1)) assert_int_equal(h100.path, EM_PATH_CUBIN);
  /* Loading on one device leaves the other's record untouched. */
  char names[8][64];
  assert_true(module_kernels(&t, t.modules[0], names, 8) > 0);
  em_kernel *k;
  assert_ok(em_kernel_get(em_cuda(1), names[0], &k));
  em_load_record r0, r1;
  assert_ok(em_dispatch_load_record(em_cuda(0), t.modules[0], &r0));
  assert_ok(em_dispatch_load_record(em_cuda(1), t.modules[0], &r1));
  assert_int_equal(r0.loaded, 0);
  assert_int_equal(r1.loaded, 1);
  assert_int_equal(r1.path, h100.path);
}

static void test_unknown_names(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6");
  em_plan p;
  em_kernel *k;
  assert_status(em_dispatch_plan(em_cuda(0), "no_such_module", &p), EM_ERR_NOT_FOUND);
  assert_status(em_kernel_get(em_cuda(0), "no_such_kernel", &k), EM_ERR_NOT_FOUND);
  assert_contains(em_last_error(), "no_such_kernel");
  assert_status(em_dispatch_plan(em_cuda(5), "elementwise", &p), EM_ERR_NOT_FOUND);
}

/* Every name in every image's kernel list is found (the runtime indexes the
 * names once): on the CPU device a known kernel answers "use the CPU twin",
 * an unknown one "not found", also a real name with something appended. */
static void test_every_kernel_name_is_known(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0");
  table t;
  read_table(&t);
  size_t names = 0;
  em_kernel *k;
  for (size_t i = 0; i < t.n; i++) {
    for (const char *p = t.img[i].kernels; p && *p;) {
      size_t len = strcspn(p, ",");
      char name[128];
      snprintf(name, sizeof name, "%.*s", (int)len, p);
      assert_status(em_kernel_get(em_cpu(), name, &k), EM_ERR_USE_CPU);
      snprintf(name, sizeof name, "%.*s_x", (int)len, p);
      assert_status(em_kernel_get(em_cpu(), name, &k), EM_ERR_NOT_FOUND);
      names++;
      p += len + (p[len] == ',');
    }
  }
  assert_true(names > 0);
}

/* A kernel cache (runtime/kernel_cache.h, what each executor step holds)
 * looks a kernel up once and then hands out the runtime's own handle; a
 * name written into the same buffer later is looked up anew, not confused
 * with the first; after em_shutdown the cache looks up again instead of
 * handing out a freed handle. */
static void test_kernel_cache(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0");
  table t;
  read_table(&t);
  char names[16][64];
  size_t m = 0;
  while (m < t.n_modules && module_kernels(&t, t.modules[m], names, 16) <= EM_KERNEL_CACHE_SLOTS) m++;
  if (m == t.n_modules) skip(); /* no module with more kernels than a cache holds */
  size_t nk = module_kernels(&t, t.modules[m], names, 16);
  em_kernel_cache c = {0};
  em_kernel *a, *a2, *b, *direct;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", names[0]);
  assert_ok(em_kernel_get_cached(&c, em_cuda(0), buf, &a));
  assert_int_equal(c.lookups, 1);
  assert_ok(em_kernel_get(em_cuda(0), names[0], &direct));
  assert_ptr_equal(a, direct);
  assert_ok(em_kernel_get_cached(&c, em_cuda(0), names[0], &a2));
  assert_ptr_equal(a2, a);
  assert_int_equal(c.lookups, 1);
  snprintf(buf, sizeof buf, "%s", names[1]); /* the same buffer, another kernel */
  assert_ok(em_kernel_get_cached(&c, em_cuda(0), buf, &b));
  assert_int_equal(c.lookups, 2);
  assert_ok(em_kernel_get(em_cuda(0), names[1], &direct));
  assert_ptr_equal(b, direct);
  assert_ok(em_kernel_get_cached(&c, em_cuda(0), names[0], &a2));
  assert_ptr_equal(a2, a);
  assert_int_equal(c.lookups, 2);
  /* Failures are not kept. */
  assert_status(em_kernel_get_cached(&c, em_cuda(0), "no_such_kernel", &a2), EM_ERR_NOT_FOUND);
  assert_status(em_kernel_get_cached(&c, em_cuda(0), "no_such_kernel", &a2), EM_ERR_NOT_FOUND);
  assert_int_equal(c.lookups, 4);
  /* More kernels than slots: older ones are replaced, every answer stays right. */
  for (int round = 0; round < 2; round++)
    for (size_t i = 0; i < nk; i++) {
      assert_ok(em_kernel_get_cached(&c, em_cuda(0), names[i], &a2));
      assert_ok(em_kernel_get(em_cuda(0), names[i], &direct));
      assert_ptr_equal(a2, direct);
    }
  assert_true(c.lookups > 4 + nk); /* the second round missed too: it cycles through more than the slots */
  relaunch();
  uint64_t before = c.lookups;
  assert_ok(em_kernel_get_cached(&c, em_cuda(0), names[0], &a2));
  assert_int_equal(c.lookups, before + 1);
  assert_ok(em_kernel_get(em_cuda(0), names[0], &direct));
  assert_ptr_equal(a2, direct);
}

static void test_force_cpu(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=3.7,8.6,9.0", "EMBER_FORCE=cpu");
  table t;
  read_table(&t);
  for (int d = 0; d < 3; d++)
    for (size_t m = 0; m < t.n_modules; m++) {
      em_plan p;
      assert_ok(em_dispatch_plan(em_cuda(d), t.modules[m], &p));
      assert_int_equal(p.path, EM_PATH_CPU);
      assert_int_equal(p.strict_error, 0);
      char names[8][64];
      size_t nk = module_kernels(&t, t.modules[m], names, 8);
      for (size_t k = 0; k < nk; k++) {
        em_kernel *kern;
        assert_status(em_kernel_get(em_cuda(d), names[k], &kern), EM_ERR_USE_CPU);
      }
    }
  assert_int_equal(fk.calls("cuModuleLoadData"), 0);
}

/* A misspelt EMBER_FORCE must not be ignored: every plan refuses, naming it. */
static void test_force_misspelt_is_refused(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000", "EMBER_FORCE=cubn");
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    assert_int_equal(p.path, EM_PATH_NONE);
    assert_int_equal(p.chosen, -1);
    assert_non_null(strstr(p.reason, "EMBER_FORCE=cubn"));
  }
  em_kernel *k;
  assert_status(em_kernel_get(em_cuda(0), "em_axpy_f32", &k), EM_ERR_NO_KERNEL_IMAGE);
  assert_non_null(strstr(em_last_error(), "EMBER_FORCE=cubn"));
  assert_int_equal(fk.calls("cuModuleLoadData"), 0);
}

static void test_force_cubin_on_k80(void **state) {
  (void)state;
  NEED_FAKE();
  /* R418 (CUDA 10.1): the build's Kepler cubins (CUDA 11.x) do not load. */
  configure("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", "EMBER_FORCE=cubin");
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    assert_false(kepler_cubin_loads(&t, t.modules[m], 10010)); /* only a CUDA <= 10.1 toolkit would make one */
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    assert_int_equal(p.path, EM_PATH_NONE);
    assert_int_equal(p.chosen, -1);
    assert_contains(p.reason, "EMBER_FORCE");
    char names[8][64];
    assert_true(module_kernels(&t, t.modules[m], names, 8) > 0);
    em_kernel *k;
    assert_status(em_kernel_get(em_cuda(0), names[0], &k), EM_ERR_NO_KERNEL_IMAGE);
    assert_contains(em_last_error(), "EMBER_FORCE");
  }
}

static void test_jit_disabled_k80_runs_on_cpu(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", "CUDA_DISABLE_PTX_JIT=1");
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    /* R418: no Kepler cubin loads (CUDA 11.x ones need a CUDA 11 driver), PTX
     * cannot be JIT-compiled, NVRTC 13 has no sm_37. */
    assert_false(kepler_cubin_loads(&t, t.modules[m], 10010));
    assert_int_equal(p.path, EM_PATH_CPU);
    assert_int_equal(p.step, 5);
    assert_int_equal(p.strict_error, 0);
    int said_why = 0;
    for (int i = 0; i < p.n_candidates; i++)
      said_why |= p.candidates[i].path == EM_PATH_PTX_LEGACY && strstr(p.candidates[i].reason, "CUDA_DISABLE_PTX_JIT");
    assert_true(said_why);
    char names[8][64];
    assert_true(module_kernels(&t, t.modules[m], names, 8) > 0);
    em_kernel *k;
    assert_status(em_kernel_get(em_cuda(0), names[0], &k), EM_ERR_USE_CPU);
    assert_contains(em_last_error(), p.reason);
  }
}

static void test_jit_disabled_k80_strict(void **state) {
  (void)state;
  NEED_FAKE();
  /* R418 (CUDA 10.1): no CUDA 11.x cubin loads (minor-version compatibility
   * starts at a CUDA 11 driver), and with the JIT off no PTX either. */
  configure("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", "CUDA_DISABLE_PTX_JIT=1", "EMBER_STRICT=1");
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    assert_false(kepler_cubin_loads(&t, t.modules[m], 10010)); /* only a CUDA <= 10.1 toolkit would make one */
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    assert_int_equal(p.path, EM_PATH_CPU);
    assert_int_equal(p.strict_error, 1);
    char names[8][64];
    assert_true(module_kernels(&t, t.modules[m], names, 8) > 0);
    em_kernel *k;
    assert_status(em_kernel_get(em_cuda(0), names[0], &k), EM_ERR_STRICT);
    assert_contains(em_last_error(), "EMBER_STRICT");
  }
  /* The primitives refuse too, instead of running the CPU twin. */
  float *y;
  assert_ok(em_malloc(em_cuda(0), 16 * sizeof(float), (void **)&y));
  assert_status(em_fill_f32(em_cuda(0), y, 1.0f, 16, NULL), EM_ERR_STRICT);
  assert_ok(em_free(em_cuda(0), y));
}

/* --------------------------------------------------------------- loading --- */

/* Every kernel of every module on every device loads along its plan. */
/* Whether a test compiles this module with the real NVRTC. Under valgrind
 * (make test-valgrind) NVRTC's own compiler runs 30-50x slower: every module
 * took the better part of an hour. The modules of the primitives exercise all
 * of Ember's side of the path (compile, cache, load); the plain and ASan runs
 * compile every module. */
static int nvrtc_compiles(const char *module) {
  return !RUNNING_ON_VALGRIND || !strcmp(module, "elementwise") || !strcmp(module, "reduce");
}

static void check_loads(const char *devices, int driver) {
  char s_dev[256], s_drv[64];
  snprintf(s_dev, sizeof s_dev, "FAKECUDA_DEVICES=%s", devices);
  snprintf(s_drv, sizeof s_drv, "FAKECUDA_DRIVER=%d", driver);
  configure(s_dev, s_drv);
  table t;
  read_table(&t);
  int n = 0;
  assert_ok(em_cuda_device_count(&n));
  for (int d = 0; d < n; d++) {
    for (size_t m = 0; m < t.n_modules; m++) {
      em_plan p;
      em_load_record r;
      assert_ok(em_dispatch_plan(em_cuda(d), t.modules[m], &p));
      if (p.path == EM_PATH_NVRTC && !nvrtc_compiles(t.modules[m])) continue;
      assert_ok(em_dispatch_load_record(em_cuda(d), t.modules[m], &r));
      assert_int_equal(r.loaded, 0);
      char names[8][64];
      size_t nk = module_kernels(&t, t.modules[m], names, 8);
      assert_true(nk > 0);
      for (size_t k = 0; k < nk; k++) {
        em_kernel *a = NULL, *b = NULL;
        em_status s = em_kernel_get(em_cuda(d), names[k], &a);
        if (p.path == EM_PATH_CPU) {
          assert_int_equal(s, EM_ERR_USE_CPU);
          continue;
        }
        if (s != EM_OK)
          fail_msg("driver %d device %d kernel %s (plan %s): %s: %s", driver, d, names[k], em_path_name(p.path),
                   em_status_name(s), em_last_error());
        assert_ok(em_kernel_get(em_cuda(d), names[k], &b));
        assert_ptr_equal(a, b);
      }
      assert_ok(em_dispatch_load_record(em_cuda(d), t.modules[m], &r));
      if (p.path == EM_PATH_CPU) {
        assert_int_equal(r.loaded, 0);
        continue;
      }
      assert_int_equal(r.loaded, 1);
      assert_int_equal(r.path, p.path);
      assert_int_equal(r.image_index, p.candidates[p.chosen].image_index);
      assert_int_equal(r.from_cache, 0); /* a fresh cache directory */
      assert_string_equal(r.detail, "");  /* nothing failed before the success */
      assert_true(r.load_ms >= 0.0);
    }
  }
}

static void test_every_kernel_loads_along_its_plan(void **state) {
  (void)state;
  NEED_FAKE();
  static const int drivers[] = {11040, 12020, 13000};
  for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++)
    check_loads("3.7,6.1,7.0,7.5,8.6,8.7,9.0,12.0", drivers[i]);
}

/* PTX-path modules: JIT once, then from the disk cache in the next lifetime. */
static void test_jit_cache_across_lifetimes(void **state) {
  (void)state;
  NEED_FAKE();
  char cache[PATH_MAX], setting[PATH_MAX + 32];
  fresh_cache_dir(cache, sizeof cache);
  snprintf(setting, sizeof setting, "EMBER_CACHE_DIR=%s", cache);
  /* R418: too old for the CUDA 11.x sm_37 cubins, so every module JITs PTX. */
  configure("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", setting);
  table t;
  read_table(&t);
  for (int life = 0; life < 3; life++) {
    if (life == 1) relaunch(); /* same cache directory */
    if (life == 2) {
      char fresh[PATH_MAX];
      fresh_cache_dir(fresh, sizeof fresh);
      setenv("EMBER_CACHE_DIR", fresh, 1);
      relaunch();
    }
    read_table(&t);
    for (size_t m = 0; m < t.n_modules; m++) {
      em_plan p;
      assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
      assert_true(p.path == EM_PATH_PTX || p.path == EM_PATH_PTX_LEGACY);
      char names[8][64];
      assert_true(module_kernels(&t, t.modules[m], names, 8) > 0);
      em_kernel *k;
      assert_ok(em_kernel_get(em_cuda(0), names[0], &k));
      em_load_record r;
      assert_ok(em_dispatch_load_record(em_cuda(0), t.modules[m], &r));
      assert_int_equal(r.loaded, 1);
      assert_int_equal(r.path, p.path);
      if (r.from_cache != (life == 1))
        fail_msg("lifetime %d module %s: from_cache %d", life, t.modules[m], r.from_cache);
    }
    /* A cache hit means the driver's JIT did not run at all. */
    if (life == 1) assert_int_equal(fk.jits(), 0);
    else assert_int_equal(fk.jits(), t.n_modules);
  }
}

static void test_nvrtc_forced_on_r580(void **state) {
  (void)state;
  NEED_FAKE();
  char cache[PATH_MAX], setting[PATH_MAX + 32];
  fresh_cache_dir(cache, sizeof cache);
  snprintf(setting, sizeof setting, "EMBER_CACHE_DIR=%s", cache);
  configure("FAKECUDA_DEVICES=8.6", "FAKECUDA_DRIVER=13000", "EMBER_FORCE=nvrtc", setting);
  int several = 0, nvrtc = nvrtc_version_here(&several);
  if (!nvrtc) {
    print_message("skipped: no NVRTC can be loaded on this machine\n");
    skip();
  }
  if (nvrtc / 1000 != 13) {
    print_message("skipped: the newest NVRTC here is %d, the rules below are NVRTC 13's\n", nvrtc);
    skip();
  }
  /* NVRTC 13's nvrtcCompileProgram itself dlopens libcuda.so.1, which in this
   * process is the fake (same soname), calls cuInit and then uses
   * cuGetExportTable without checking it: a fake without that entry point
   * makes NVRTC crash (and the crash would take the runtime's lock with it). */
  if (!dlsym(fk.handle, "cuGetExportTable"))
    fail_msg("the fake libcuda does not export cuGetExportTable; NVRTC 13 calls it through libcuda.so.1 "
             "during nvrtcCompileProgram and crashes without it (tests/fakecuda must add it, returning an error)");
  table t;
  read_table(&t);
  for (int life = 0; life < 2; life++) {
    if (life) {
      relaunch();
      read_table(&t);
    }
    for (size_t m = 0; m < t.n_modules; m++) {
      em_plan p;
      assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
      assert_int_equal(p.path, EM_PATH_NVRTC);
      assert_int_equal(p.step, 4);
      assert_true(p.candidates[p.chosen].nvrtc_version >= 13000);
      if (!nvrtc_compiles(t.modules[m])) continue;
      char names[8][64];
      size_t nk = module_kernels(&t, t.modules[m], names, 8);
      for (size_t k = 0; k < nk; k++) {
        em_kernel *kern;
        assert_ok(em_kernel_get(em_cuda(0), names[k], &kern));
      }
      em_load_record r;
      assert_ok(em_dispatch_load_record(em_cuda(0), t.modules[m], &r));
      assert_int_equal(r.loaded, 1);
      assert_int_equal(r.path, EM_PATH_NVRTC);
      assert_int_equal(r.image_index, -1);
      assert_int_equal(r.from_cache, life); /* the NVRTC cubin is cached too */
    }
  }
}

static void test_nvrtc_forced_on_r535_fails(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6", "FAKECUDA_DRIVER=12020", "EMBER_FORCE=nvrtc");
  int several = 0, nvrtc = nvrtc_version_here(&several);
  if (nvrtc / 1000 != 13 || several) {
    print_message("skipped: needs exactly NVRTC 13 (found %d)\n", nvrtc);
    skip();
  }
  table t;
  read_table(&t);
  for (size_t m = 0; m < t.n_modules; m++) {
    em_plan p;
    assert_ok(em_dispatch_plan(em_cuda(0), t.modules[m], &p));
    assert_int_equal(p.path, EM_PATH_NONE);
    /* The NVRTC 13 candidate is there, refused because its cubin needs R580. */
    int found = 0;
    for (int i = 0; i < p.n_candidates; i++)
      if (p.candidates[i].path == EM_PATH_NVRTC) {
        found = 1;
        assert_false(p.candidates[i].viable);
        assert_contains(p.candidates[i].reason, "driver");
      }
    assert_true(found);
    char names[8][64];
    assert_true(module_kernels(&t, t.modules[m], names, 8) > 0);
    em_kernel *k;
    assert_status(em_kernel_get(em_cuda(0), names[0], &k), EM_ERR_NO_KERNEL_IMAGE);
    assert_contains(em_last_error(), "EMBER_FORCE");
  }
}

/* ---------------------------------------------- fallback at load time --- */

/* The first viable candidate fails to load: the loader moves on to the next
 * viable one and records why. */
static void test_load_falls_back_to_next_candidate(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000", "FAKECUDA_FAIL=cuModuleLoadData=200@1");
  table t;
  read_table(&t);
  const char *module = t.modules[0];
  em_plan p;
  assert_ok(em_dispatch_plan(em_cuda(0), module, &p));
  assert_true(p.chosen >= 0);
  int next = -1;
  for (int i = p.chosen + 1; i < p.n_candidates && next < 0; i++)
    if (p.candidates[i].viable) next = i;
  assert_true(next >= 0);
  char names[8][64];
  assert_true(module_kernels(&t, module, names, 8) > 0);
  em_kernel *k;
  em_status s = em_kernel_get(em_cuda(0), names[0], &k);
  em_load_record r;
  assert_ok(em_dispatch_load_record(em_cuda(0), module, &r));
  if (p.candidates[next].path == EM_PATH_CPU) {
    assert_int_equal(s, EM_ERR_USE_CPU);
  } else {
    if (s != EM_OK) fail_msg("%s: %s", em_status_name(s), em_last_error());
    assert_int_equal(r.loaded, 1);
    assert_int_equal(r.path, p.candidates[next].path);
    assert_int_equal(r.image_index, p.candidates[next].image_index);
  }
  assert_contains(r.detail, "cuModuleLoadData");
  assert_contains(r.detail, cu_named(200));
}

static void test_load_fallback_refused_when_strict(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000", "FAKECUDA_FAIL=cuModuleLoadData=200@1",
            "EMBER_STRICT=1");
  table t;
  read_table(&t);
  char names[8][64];
  assert_true(module_kernels(&t, t.modules[0], names, 8) > 0);
  em_kernel *k;
  assert_status(em_kernel_get(em_cuda(0), names[0], &k), EM_ERR_STRICT);
  assert_contains(em_last_error(), "EMBER_STRICT");
  assert_contains(em_last_error(), "cuModuleLoadData");
  assert_int_equal(fk.calls("cuModuleLoadData"), 1); /* nothing tried after the refusal */
  /* Later lookups repeat the refusal; nothing is retried. */
  assert_status(em_kernel_get(em_cuda(0), names[0], &k), EM_ERR_STRICT);
  assert_int_equal(fk.calls("cuModuleLoadData"), 1);
}

/* ------------------------------------------------------ fault injection --- */

typedef enum scenario {
  SC_STREAM_CREATE, /* em_stream_create */
  SC_KERNEL_GET,    /* em_kernel_get on the K80, EMBER_FORCE=ptx-legacy (JIT link then load) */
  SC_MALLOC,
  SC_H2D,
  SC_D2H,
  SC_D2D,
  SC_H2D_ASYNC,
  SC_D2H_ASYNC,
  SC_D2D_ASYNC,
  SC_LAUNCH,        /* em_fill_f32 on a GPU plan */
  SC_STREAM_SYNC,
  SC_DEVICE_SYNC,
  SC_STREAM_DESTROY
} scenario;

typedef struct fault {
  const char *entry; /* as FAKECUDA_FAIL names it */
  const char *call;  /* the name the message must carry */
  int code;
  scenario sc;
  em_status want; /* EM_OK: any failure status */
} fault;

static const fault faults[] = {
    {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 999, SC_STREAM_CREATE, EM_ERR_CUDA},
    {"cuCtxPushCurrent_v2", "cuCtxPushCurrent", 201, SC_STREAM_CREATE, EM_ERR_CUDA},
    {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 999, SC_MALLOC, EM_OK},
    {"cuCtxPushCurrent_v2", "cuCtxPushCurrent", 201, SC_KERNEL_GET, EM_OK},
    {"cuModuleLoadData", "cuModuleLoadData", 200, SC_KERNEL_GET, EM_ERR_NO_KERNEL_IMAGE},
    {"cuLinkCreate_v2", "cuLinkCreate", 999, SC_KERNEL_GET, EM_ERR_NO_KERNEL_IMAGE},
    {"cuLinkAddData_v2", "cuLinkAddData", 218, SC_KERNEL_GET, EM_ERR_NO_KERNEL_IMAGE},
    {"cuLinkComplete", "cuLinkComplete", 218, SC_KERNEL_GET, EM_ERR_NO_KERNEL_IMAGE},
    {"cuModuleGetFunction", "cuModuleGetFunction", 500, SC_KERNEL_GET, EM_ERR_CUDA},
    {"cuMemAlloc_v2", "cuMemAlloc", 2, SC_MALLOC, EM_ERR_OUT_OF_MEMORY},
    {"cuMemAlloc_v2", "cuMemAlloc", 999, SC_MALLOC, EM_OK},
    {"cuMemcpyHtoD_v2", "cuMemcpyHtoD", 999, SC_H2D, EM_ERR_CUDA},
    {"cuMemcpyDtoH_v2", "cuMemcpyDtoH", 999, SC_D2H, EM_ERR_CUDA},
    {"cuMemcpyDtoD_v2", "cuMemcpyDtoD", 999, SC_D2D, EM_ERR_CUDA},
    {"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", 400, SC_H2D_ASYNC, EM_ERR_CUDA},
    {"cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync", 400, SC_D2H_ASYNC, EM_ERR_CUDA},
    {"cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync", 400, SC_D2D_ASYNC, EM_ERR_CUDA},
    {"cuLaunchKernel", "cuLaunchKernel", 719, SC_LAUNCH, EM_ERR_CUDA},
    {"cuStreamCreate", "cuStreamCreate", 999, SC_STREAM_CREATE, EM_ERR_CUDA},
    {"cuStreamSynchronize", "cuStreamSynchronize", 719, SC_STREAM_SYNC, EM_ERR_CUDA},
    {"cuCtxSynchronize", "cuCtxSynchronize", 719, SC_DEVICE_SYNC, EM_ERR_CUDA},
    {"cuStreamDestroy_v2", "cuStreamDestroy", 400, SC_STREAM_DESTROY, EM_ERR_CUDA},
};
#define N_FAULTS (sizeof faults / sizeof faults[0])

/* Runs a scenario; the injected failure hits only the step that reaches
 * the failing entry point, so every step before it must succeed. */
static em_status run_scenario(scenario sc) {
  em_device dev = em_cuda(0);
  em_stream *s = NULL;
  em_kernel *k;
  unsigned char host[1024], back[1024];
  void *a = NULL, *b = NULL;
  em_status st;
  memset(host, 0x5a, sizeof host);
  switch (sc) {
  case SC_STREAM_CREATE:
    st = em_stream_create(dev, &s);
    if (!st) em_stream_destroy(s);
    return st;
  case SC_KERNEL_GET: return em_kernel_get(dev, "em_fill_f32", &k);
  case SC_MALLOC:
    st = em_malloc(dev, sizeof host, &a);
    if (!st) em_free(dev, a);
    return st;
  case SC_LAUNCH:
    assert_ok(em_malloc(dev, 64 * sizeof(float), &a));
    st = em_fill_f32(dev, a, 1.0f, 64, NULL);
    assert_ok(em_free(dev, a));
    return st;
  case SC_STREAM_SYNC:
  case SC_STREAM_DESTROY:
    assert_ok(em_stream_create(dev, &s));
    if (sc == SC_STREAM_DESTROY) return em_stream_destroy(s);
    st = em_stream_sync(dev, s);
    em_stream_destroy(s);
    return st;
  case SC_DEVICE_SYNC: return em_stream_sync(dev, NULL);
  default: break;
  }
  /* Copies. */
  int async = sc == SC_H2D_ASYNC || sc == SC_D2H_ASYNC || sc == SC_D2D_ASYNC;
  if (async) assert_ok(em_stream_create(dev, &s));
  assert_ok(em_malloc(dev, sizeof host, &a));
  assert_ok(em_malloc(dev, sizeof host, &b));
  if (sc == SC_H2D || sc == SC_H2D_ASYNC) {
    st = em_memcpy_h2d(dev, a, host, sizeof host, s);
  } else {
    assert_ok(em_memcpy_h2d(dev, a, host, sizeof host, NULL));
    st = sc == SC_D2H || sc == SC_D2H_ASYNC ? em_memcpy_d2h(dev, back, a, sizeof back, s)
                                            : em_memcpy_d2d(dev, b, a, sizeof host, s);
  }
  em_free(dev, a);
  em_free(dev, b);
  if (s) em_stream_destroy(s);
  return st;
}

static void test_fault(void **state) {
  const fault *f = *state;
  NEED_FAKE();
  char rule[128];
  snprintf(rule, sizeof rule, "FAKECUDA_FAIL=%s=%d", f->entry, f->code);
  /* The K80 with the legacy PTX forced: a JIT link, then a module load, and
   * a GPU plan for the launch. */
  configure("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=13000", "EMBER_FORCE=ptx-legacy", rule);
  em_clear_error();
  em_status st = run_scenario(f->sc);
  if (st == EM_OK) fail_msg("%s failing with %d: the Ember call succeeded", f->entry, f->code);
  if (f->want != EM_OK && st != f->want)
    fail_msg("%s failing: %s, expected %s: %s", f->entry, em_status_name(st), em_status_name(f->want), em_last_error());
  char said[96];
  snprintf(said, sizeof said, "%s failed: %s", f->call, cu_named(f->code));
  assert_contains(em_last_error(), said);
  assert_true(fk.calls(f->entry) > 0); /* the failure really came from that entry point */
}

/* Failures at teardown (unload, free, release) never crash, and the next
 * lifetime starts clean. */
static void test_teardown_failures_are_survived(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000",
            "FAKECUDA_FAIL=cuModuleUnload=999,cuMemFree_v2=999,cuDevicePrimaryCtxRelease_v2=999");
  em_kernel *k;
  void *p;
  assert_ok(em_kernel_get(em_cuda(0), "em_fill_f32", &k));
  assert_ok(em_malloc(em_cuda(0), 4096, &p));
  assert_ok(em_free(em_cuda(0), p));
  assert_ok(em_alloc_trim(em_cuda(0)));
  em_shutdown();
  configure("FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000");
  assert_ok(em_kernel_get(em_cuda(0), "em_fill_f32", &k));
  em_alloc_stats st;
  assert_ok(em_alloc_stats_get(em_cuda(0), &st));
  assert_true(st.bytes_in_use == 0 && st.bytes_cached == 0 && st.device_allocs == 0);
}

/* ---------------------------------------------------------------- memory --- */

static void test_memory_round_trip(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=9.0,8.6");
  static const size_t sizes[] = {1, 3, 511, 512, 513, 4096, 65537, 1u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    unsigned char *src = malloc(n), *dst = malloc(n), *dst2 = malloc(n);
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(dst2);
    for (size_t j = 0; j < n; j++) src[j] = (unsigned char)(j * 131 + n);
    memset(dst, 0, n);
    memset(dst2, 0, n);
    for (int d = 0; d < 2; d++) {
      void *a, *b;
      assert_ok(em_malloc(em_cuda(d), n, &a));
      assert_ok(em_malloc(em_cuda(d), n, &b));
      assert_non_null(a);
      assert_ptr_not_equal(a, b);
      assert_ok(em_memcpy_h2d(em_cuda(d), a, src, n, NULL));
      assert_ok(em_memcpy_d2d(em_cuda(d), b, a, n, NULL));
      assert_ok(em_memcpy_d2h(em_cuda(d), dst, a, n, NULL));
      assert_ok(em_memcpy_d2h(em_cuda(d), dst2, b, n, NULL));
      assert_memory_equal(src, dst, n);
      assert_memory_equal(src, dst2, n);
      assert_ok(em_free(em_cuda(d), a));
      assert_ok(em_free(em_cuda(d), b));
    }
    free(src), free(dst), free(dst2);
  }
  /* A zero-byte copy is a no-op, a NULL pointer with bytes is refused. */
  assert_ok(em_memcpy_h2d(em_cuda(0), NULL, NULL, 0, NULL));
  assert_status(em_memcpy_h2d(em_cuda(0), NULL, "x", 1, NULL), EM_ERR_INVALID_ARGUMENT);
  em_alloc_stats st;
  assert_ok(em_alloc_stats_get(em_cuda(0), &st));
  assert_true(st.bytes_in_use == 0);
}

static void test_allocator_reuses_blocks(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6");
  em_device dev = em_cuda(0);
  void *a, *b;
  em_alloc_stats s0, s1, s2;
  assert_ok(em_malloc(dev, 100000, &a));
  assert_ok(em_alloc_stats_get(dev, &s0));
  assert_true(s0.device_allocs == 1);
  assert_true(s0.bytes_in_use >= 100000);
  assert_ok(em_free(dev, a));
  assert_ok(em_alloc_stats_get(dev, &s1));
  assert_true(s1.bytes_in_use == 0);
  assert_true(s1.bytes_cached >= 100000);
  assert_ok(em_malloc(dev, 100000, &b));
  assert_ok(em_alloc_stats_get(dev, &s2));
  assert_ptr_equal(a, b); /* the cached block came back */
  assert_true(s2.device_allocs == s0.device_allocs);
  assert_true(s2.cache_hits == s1.cache_hits + 1);
  assert_true(s2.peak_bytes_in_use == s0.peak_bytes_in_use);
  assert_int_equal(fk.calls("cuMemAlloc_v2"), 1);
  assert_ok(em_free(dev, b));
  assert_ok(em_alloc_trim(dev));
  assert_ok(em_alloc_stats_get(dev, &s2));
  assert_true(s2.bytes_cached == 0);
  assert_int_equal(fk.calls("cuMemFree_v2"), 1);
}

static void test_out_of_memory_mentions_bytes(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6", "FAKECUDA_MEM_MB=1");
  void *p = NULL, *q = NULL;
  assert_status(em_malloc(em_cuda(0), 4u << 20, &p), EM_ERR_OUT_OF_MEMORY);
  assert_contains(em_last_error(), "4194304");
  assert_contains(em_last_error(), "CUDA_ERROR_OUT_OF_MEMORY");
  /* The cache is handed back and the allocation retried before failing. */
  assert_ok(em_malloc(em_cuda(0), 600u << 10, &p));
  assert_ok(em_free(em_cuda(0), p));
  assert_ok(em_malloc(em_cuda(0), 700u << 10, &q)); /* fits only once the cached 600 KiB are returned */
  assert_ok(em_free(em_cuda(0), q));
}

static void test_free_foreign_pointer(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6,9.0");
  int local;
  assert_status(em_free(em_cuda(0), &local), EM_ERR_INVALID_ARGUMENT);
  void *p;
  assert_ok(em_malloc(em_cuda(0), 256, &p));
  assert_status(em_free(em_cuda(1), p), EM_ERR_INVALID_ARGUMENT); /* another device's block */
  assert_ok(em_free(em_cuda(0), p));
  assert_status(em_free(em_cuda(0), p), EM_ERR_INVALID_ARGUMENT); /* twice */
  assert_ok(em_free(em_cuda(0), NULL));
}

static void test_streams(void **state) {
  (void)state;
  NEED_FAKE();
  configure("FAKECUDA_DEVICES=8.6");
  em_device dev = em_cuda(0);
  em_stream *s1, *s2;
  assert_ok(em_stream_create(dev, &s1));
  assert_ok(em_stream_create(dev, &s2));
  assert_ptr_not_equal(s1, s2);
  float src[300], dst[300];
  for (int i = 0; i < 300; i++) src[i] = (float)i * 0.5f;
  memset(dst, 0, sizeof dst);
  void *a;
  assert_ok(em_malloc(dev, sizeof src, &a));
  assert_ok(em_memcpy_h2d(dev, a, src, sizeof src, s1));
  assert_ok(em_stream_sync(dev, s1));
  assert_ok(em_memcpy_d2h(dev, dst, a, sizeof dst, s2));
  assert_ok(em_stream_sync(dev, s2));
  assert_ok(em_stream_sync(dev, NULL));
  assert_memory_equal(src, dst, sizeof src);
  assert_ok(em_free(dev, a));
  assert_ok(em_stream_destroy(s1));
  assert_ok(em_stream_destroy(s2));
  assert_int_equal(fk.calls("cuStreamCreate"), 2);
  assert_int_equal(fk.calls("cuStreamDestroy_v2"), 2);
  /* CPU streams need no driver. */
  em_stream *cs;
  assert_ok(em_stream_create(em_cpu(), &cs));
  assert_ok(em_stream_sync(em_cpu(), cs));
  assert_ok(em_stream_destroy(cs));
}

/* ------------------------------------------- primitives on a CPU plan --- */

static uint64_t lcg = 88172645463325252ull;
static float rnd(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(lcg >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A K80 on R418 with the JIT disabled plans the CPU: the primitives copy the device
 * buffers (host memory in the fake) to the host, run the twin, copy back. */
static void test_primitives_on_cpu_plan_device(void **state) {
  (void)state;
  NEED_FAKE();
  /* R418 (CUDA 10.1) loads no CUDA 11+ cubin (minor-version compatibility
   * starts at 11.0) and no NVRTC output of 11+; with the JIT disabled no PTX
   * either: every module's plan is the CPU, whatever the build embeds. */
  configure("FAKECUDA_DEVICES=3.7=Tesla K80", "FAKECUDA_DRIVER=10010", "CUDA_DISABLE_PTX_JIT=1");
  em_plan p;
  assert_ok(em_dispatch_plan(em_cuda(0), "elementwise", &p));
  assert_int_equal(p.path, EM_PATH_CPU);
  em_device dev = em_cuda(0);
  const size_t n = 10007;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *want),
        *got = malloc(n * sizeof *got);
  assert_non_null(x), assert_non_null(y), assert_non_null(want), assert_non_null(got);
  for (size_t i = 0; i < n; i++) x[i] = rnd(), y[i] = rnd();
  float *dx, *dy, *dout;
  assert_ok(em_malloc(dev, n * sizeof(float), (void **)&dx));
  assert_ok(em_malloc(dev, n * sizeof(float), (void **)&dy));
  assert_ok(em_malloc(dev, n * sizeof(float), (void **)&dout));

  /* fill */
  assert_ok(em_fill_f32(dev, dy, -3.25f, n, NULL));
  assert_ok(em_memcpy_d2h(dev, got, dy, n * sizeof(float), NULL));
  for (size_t i = 0; i < n; i++) assert_true(got[i] == -3.25f);

  /* axpy: the product rounded to float, then the sum (no contraction). */
  const float a = 0.731f;
  assert_ok(em_memcpy_h2d(dev, dx, x, n * sizeof(float), NULL));
  assert_ok(em_memcpy_h2d(dev, dy, y, n * sizeof(float), NULL));
  assert_ok(em_axpy_f32(dev, a, dx, dy, n, NULL));
  assert_ok(em_memcpy_d2h(dev, got, dy, n * sizeof(float), NULL));
  for (size_t i = 0; i < n; i++) {
    volatile float prod = a * x[i];
    want[i] = prod + y[i];
  }
  assert_memory_equal(got, want, n * sizeof(float));
  /* x is unchanged. */
  assert_ok(em_memcpy_d2h(dev, got, dx, n * sizeof(float), NULL));
  assert_memory_equal(got, x, n * sizeof(float));

  /* sum: any summation order is within n * eps * sum |x| of the exact sum. */
  double exact = 0, mag = 0;
  for (size_t i = 0; i < n; i++) exact += x[i], mag += fabs(x[i]);
  float sum = 0;
  assert_ok(em_sum_f32(dev, dx, n, dout, NULL));
  assert_ok(em_memcpy_d2h(dev, &sum, dout, sizeof sum, NULL));
  if (fabs((double)sum - exact) > (double)n * FLT_EPSILON * mag)
    fail_msg("sum %.9g, exact %.9g", (double)sum, exact);

  /* transpose */
  const size_t rows = 37, cols = 53;
  assert_ok(em_transpose_f32(dev, dx, dout, rows, cols, NULL));
  assert_ok(em_memcpy_d2h(dev, got, dout, rows * cols * sizeof(float), NULL));
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      if (got[c * rows + r] != x[r * cols + c]) fail_msg("transpose (%zu,%zu)", r, c);

  assert_int_equal(fk.launches(), 0); /* nothing went to the (fake) GPU */
  assert_ok(em_free(dev, dx));
  assert_ok(em_free(dev, dy));
  assert_ok(em_free(dev, dout));
  free(x), free(y), free(want), free(got);
}

/* ------------------------------------------------------- thread safety --- */

typedef struct racer {
  pthread_barrier_t *go;
  em_kernel *k;
  em_status st;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  pthread_barrier_wait(r->go);
  r->st = em_kernel_get(em_cuda(0), "em_axpy_f32", &r->k);
  return NULL;
}

static void test_concurrent_kernel_get(void **state) {
  (void)state;
  NEED_FAKE();
  for (int round = 0; round < 2; round++) {
    /* Round 0: the cubin (or whatever the H100 plans); round 1: the K80's JIT. */
    configure(round ? "FAKECUDA_DEVICES=3.7" : "FAKECUDA_DEVICES=9.0", "FAKECUDA_DRIVER=13000");
    em_shutdown(); /* the threads race on initialisation too */
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 4);
    racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
      r[i] = (racer){&go, NULL, EM_ERR_INTERNAL};
      assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < 4; i++) {
      assert_int_equal(r[i].st, EM_OK);
      assert_ptr_equal(r[i].k, r[0].k);
    }
    assert_int_equal(fk.calls("cuModuleLoadData"), 1);
    assert_true(fk.calls("cuLinkCreate_v2") <= 1);
  }
}

/* ------------------------------------------------------------------ main --- */

int main(void) {
  static const struct CMUnitTest fixed[] = {
      cmocka_unit_test_teardown(test_driver_missing_file, test_teardown),
      cmocka_unit_test_teardown(test_driver_stub, test_teardown),
      cmocka_unit_test_teardown(test_driver_no_device, test_teardown),
      cmocka_unit_test_teardown(test_visible_devices_hide_all, test_teardown),
      cmocka_unit_test_teardown(test_visible_devices_select, test_teardown),
      cmocka_unit_test_teardown(test_library_path_is_resolved, test_teardown),
      cmocka_unit_test_teardown(test_driver_init_failure, test_teardown),
      cmocka_unit_test_teardown(test_device_info, test_teardown),
      cmocka_unit_test_teardown(test_table_has_legacy_ptx_and_sources, test_teardown),
      cmocka_unit_test_teardown(test_plans_follow_policy, test_teardown),
      cmocka_unit_test_teardown(test_plans_forced_and_jit_disabled, test_teardown),
      cmocka_unit_test_teardown(test_k80_on_r470_and_r418, test_teardown),
      cmocka_unit_test_teardown(test_h100_plans_by_driver, test_teardown),
      cmocka_unit_test_teardown(test_two_gpus_have_independent_plans, test_teardown),
      cmocka_unit_test_teardown(test_unknown_names, test_teardown),
      cmocka_unit_test_teardown(test_every_kernel_name_is_known, test_teardown),
      cmocka_unit_test_teardown(test_kernel_cache, test_teardown),
      cmocka_unit_test_teardown(test_force_cpu, test_teardown),
      cmocka_unit_test_teardown(test_force_misspelt_is_refused, test_teardown),
      cmocka_unit_test_teardown(test_force_cubin_on_k80, test_teardown),
      cmocka_unit_test_teardown(test_jit_disabled_k80_runs_on_cpu, test_teardown),
      cmocka_unit_test_teardown(test_jit_disabled_k80_strict, test_teardown),
      cmocka_unit_test_teardown(test_every_kernel_loads_along_its_plan, test_teardown),
      cmocka_unit_test_teardown(test_jit_cache_across_lifetimes, test_teardown),
      cmocka_unit_test_teardown(test_nvrtc_forced_on_r580, test_teardown),
      cmocka_unit_test_teardown(test_nvrtc_forced_on_r535_fails, test_teardown),
      cmocka_unit_test_teardown(test_load_falls_back_to_next_candidate, test_teardown),
      cmocka_unit_test_teardown(test_load_fallback_refused_when_strict, test_teardown),
      cmocka_unit_test_teardown(test_teardown_failures_are_survived, test_teardown),
      cmocka_unit_test_teardown(test_memory_round_trip, test_teardown),
      cmocka_unit_test_teardown(test_allocator_reuses_blocks, test_teardown),
      cmocka_unit_test_teardown(test_out_of_memory_mentions_bytes, test_teardown),
      cmocka_unit_test_teardown(test_free_foreign_pointer, test_teardown),
      cmocka_unit_test_teardown(test_streams, test_teardown),
      cmocka_unit_test_teardown(test_primitives_on_cpu_plan_device, test_teardown),
      cmocka_unit_test_teardown(test_concurrent_kernel_get, test_teardown),
  };
  enum { N_FIXED = sizeof fixed / sizeof fixed[0] };
  struct CMUnitTest tests[N_FIXED + N_FAULTS];
  static char names[N_FAULTS][96];
  memcpy(tests, fixed, sizeof fixed);
  for (size_t i = 0; i < N_FAULTS; i++) {
    snprintf(names[i], sizeof names[i], "test_fault_%s_%d_%d", faults[i].entry, faults[i].code, (int)faults[i].sc);
    tests[N_FIXED + i] = (struct CMUnitTest){names[i], test_fault, NULL, test_teardown, (void *)&faults[i]};
  }
  return _cmocka_run_group_tests("test_dispatch", tests, N_FIXED + N_FAULTS, group_setup, group_teardown);
}
