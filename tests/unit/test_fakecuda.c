/* Tests of the fake libcuda (tests/fakecuda, README.md there). The fake is
 * dlopen()ed from $FAKECUDA_LIB (the Makefile sets it to the absolute path of
 * build/tests/fakecuda/libcuda.so.1); without it every test is skipped.
 *
 * Every expected code below is derived by hand from the driver's rules, never
 * from running the fake:
 *   cubin sm_XY runs on CC X.Z, Z >= Y, same major; sm_XYa only on X.Y
 *     (cuda-compat.md 3.2); a cubin from toolkit T >= 11 needs a driver of
 *     major >= T's major (MVC, 2.2), else CUDA_ERROR_INVALID_IMAGE (200, the
 *     answer reported for newer-toolkit cubins, see fakecuda_images.c);
 *   PTX compute_XY is JIT-compiled for any CC >= X.Y; .target above the device
 *     or 'a' on another SM: CUDA_ERROR_INVALID_PTX (218); the driver must be
 *     >= the first CUDA of the PTX ISA (1 note 3: 9.0 -> 13.0, 3.2 -> 5.5),
 *     else CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222) from CUDA 11 on and 218
 *     before; CUDA_DISABLE_PTX_JIT -> 223; no JIT library -> 221;
 *   fatbin: a fitting cubin, else fitting PTX, else CUDA_ERROR_NO_BINARY_FOR_GPU
 *     (209); a zstd entry on a driver before 12.4 -> 200 (4.3);
 *   codes and names: cuda.h of CUDA 13.0 (section 6).
 * Fixtures (tests/fixtures/fakecuda/README.md): k.cu has kernels fc_axpy and
 * fc_fill; nvcc 13.0 made sm_75, sm_80, sm_90a cubins (toolkit 13.0),
 * compute_75 PTX (.version 9.0) and a fatbin of sm_75 cubin + zstd compute_75
 * PTX; clang 14 made sm_35 PTX (.version 3.2). */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "fake_driver.h"

/* cuModuleLoadData of a fixture on one fake device (CC, driver); unloads on success. */
static CUresult load_on(const char *cc, const char *driver, const char *file) {
  assert_int_equal(fake_init_with(cc, driver), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob b = fake_fixture(file);
  CUmodule m = NULL;
  CUresult r = fk.ModuleLoadData(&m, b.data);
  if (r == CUDA_SUCCESS) assert_int_equal(fk.ModuleUnload(m), CUDA_SUCCESS);
  free(b.data);
  return r;
}

static CUresult load_text_on(const char *cc, const char *driver, const char *text) {
  assert_int_equal(fake_init_with(cc, driver), CUDA_SUCCESS);
  fake_use_device(0);
  CUmodule m = NULL;
  return fk.ModuleLoadData(&m, text);
}

/* ------------------------------------------------------------- cubins --- */

static void cubin_same_major_rule(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(load_on("7.5", "13000", "k.sm_75.cubin"), CUDA_SUCCESS);
  assert_int_equal(load_on("7.0", "13000", "k.sm_75.cubin"), CUDA_ERROR_NO_BINARY_FOR_GPU); /* lower minor */
  assert_int_equal(load_on("8.6", "13000", "k.sm_75.cubin"), CUDA_ERROR_NO_BINARY_FOR_GPU); /* other major */
  assert_int_equal(load_on("8.0", "13000", "k.sm_80.cubin"), CUDA_SUCCESS);
  assert_int_equal(load_on("8.6", "13000", "k.sm_80.cubin"), CUDA_SUCCESS); /* higher minor, same major */
  /* Not to a Tegra SM: no binary compatibility to or from Tegra (Programming
   * Guide, Binary Compatibility); an Orin (8.7) needs an sm_87 cubin. */
  assert_int_equal(load_on("8.7", "13000", "k.sm_80.cubin"), CUDA_ERROR_NO_BINARY_FOR_GPU);
  assert_int_equal(load_on("9.0", "13000", "k.sm_80.cubin"), CUDA_ERROR_NO_BINARY_FOR_GPU);
}

static void cubin_arch_specific_only_on_its_sm(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(load_on("9.0", "13000", "k.sm_90a.cubin"), CUDA_SUCCESS);
  assert_int_equal(load_on("9.1", "13000", "k.sm_90a.cubin"), CUDA_ERROR_NO_BINARY_FOR_GPU);
  assert_int_equal(load_on("10.0", "13000", "k.sm_90a.cubin"), CUDA_ERROR_NO_BINARY_FOR_GPU);
}

static void cubin_from_newer_toolkit_is_invalid_image(void **state) {
  (void)state;
  FAKE_NEED();
  /* A CUDA 13.0 cubin: no CUDA 12 driver loads it. */
  assert_int_equal(load_on("7.5", "12080", "k.sm_75.cubin"), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(load_on("7.5", "12090", "k.sm_75.cubin"), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(load_on("7.5", "13010", "k.sm_75.cubin"), CUDA_SUCCESS);
}

/* NVRTC 12.9's sm_100 cubin (tests/fixtures/k_sm100_nvrtc129.cubin): ABI V2
 * with no cuinfo note, "release 12.9" only in its tool strings
 * (tests/fixtures/README.md). A CUDA 12.x cubin: any driver of CUDA 12 or
 * later loads it (minor-version compatibility, cuda-compat.md 2.2), an 11.x
 * one cannot; on 10.3 it runs as a lower minor of a desktop GPU. */
static void cubin_v2_of_cuda_12_9(void **state) {
  (void)state;
  FAKE_NEED();
  const char *f = "../k_sm100_nvrtc129.cubin";
  assert_int_equal(load_on("10.0", "12000", f), CUDA_SUCCESS);
  assert_int_equal(load_on("10.0", "12040", f), CUDA_SUCCESS);
  assert_int_equal(load_on("10.0", "13000", f), CUDA_SUCCESS);
  assert_int_equal(load_on("10.0", "11080", f), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(load_on("10.3", "12080", f), CUDA_SUCCESS);
  assert_int_equal(load_on("9.0", "12080", f), CUDA_ERROR_NO_BINARY_FOR_GPU);
}

/* The V2 cubin's .note.nv.cuinfo desc is 02 00 <sm u16> <10*major+minor u16>
 * 00 00 (cuda-compat.md 5.2): rewriting 130 (13.0) to 128 (12.8) makes a
 * CUDA 12.8 cubin, which minor-version compatibility lets any 12.x driver load. */
static void cubin_minor_version_compatibility(void **state) {
  (void)state;
  FAKE_NEED();
  fake_blob b = fake_fixture("k.sm_75.cubin");
  static const unsigned char note[8] = {0x02, 0x00, 0x4b, 0x00, 0x82, 0x00, 0x00, 0x00};
  int found = 0;
  for (size_t i = 0; i + sizeof note <= b.size; i++) {
    if (memcmp(b.data + i, note, sizeof note) == 0) {
      b.data[i + 4] = (char)0x80;
      found++;
    }
  }
  assert_int_equal(found, 1);
  CUmodule m;
  const struct {
    const char *driver;
    CUresult want;
  } cases[] = {
      {"12020", CUDA_SUCCESS}, {"12000", CUDA_SUCCESS}, {"13000", CUDA_SUCCESS}, {"11080", CUDA_ERROR_INVALID_IMAGE}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(fake_init_with("7.5", cases[i].driver), CUDA_SUCCESS);
    fake_use_device(0);
    assert_int_equal(fk.ModuleLoadData(&m, b.data), cases[i].want);
  }
  free(b.data);
}

static void cubin_truncated_or_garbage_is_invalid_image(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob b = fake_fixture("k.sm_75.cubin");
  CUlinkState st;
  assert_int_equal(fk.LinkCreate(0, NULL, NULL, &st), CUDA_SUCCESS);
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_CUBIN, b.data, b.size / 2, "half", 0, NULL, NULL),
                   CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_CUBIN, b.data, b.size, "whole", 0, NULL, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.LinkDestroy(st), CUDA_SUCCESS);
  static const char junk[] = "\x01\x02\x03 this is no image at all";
  CUmodule m;
  assert_int_equal(fk.ModuleLoadData(&m, junk), CUDA_ERROR_INVALID_IMAGE);
  free(b.data);
}

/* ---------------------------------------------------------------- PTX --- */

static void ptx_isa_against_driver(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(load_on("7.5", "13000", "k.compute_75.ptx"), CUDA_SUCCESS);
  assert_int_equal(load_on("8.6", "13000", "k.compute_75.ptx"), CUDA_SUCCESS); /* later major: JIT */
  assert_int_equal(load_on("12.0", "13000", "k.compute_75.ptx"), CUDA_SUCCESS);
  assert_int_equal(load_on("8.6", "12080", "k.compute_75.ptx"), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  assert_int_equal(load_on("8.6", "12090", "k.compute_75.ptx"), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  assert_int_equal(load_on("7.5", "11040", "k.compute_75.ptx"), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  /* Before CUDA 11 the same refusal came back as CUDA_ERROR_INVALID_PTX. */
  assert_int_equal(load_on("7.5", "10020", "k.compute_75.ptx"), CUDA_ERROR_INVALID_PTX);
}

static void ptx_target_above_device(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(load_on("7.0", "13000", "k.compute_75.ptx"), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(load_on("5.2", "13000", "k.compute_75.ptx"), CUDA_ERROR_INVALID_PTX);
}

static void ptx_legacy_clang(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(load_on("3.7", "11040", "k.sm_35.clang.ptx"), CUDA_SUCCESS);
  assert_int_equal(load_on("3.5", "13000", "k.sm_35.clang.ptx"), CUDA_SUCCESS);
  assert_int_equal(load_on("9.0", "13000", "k.sm_35.clang.ptx"), CUDA_SUCCESS);
  assert_int_equal(load_on("3.0", "11040", "k.sm_35.clang.ptx"), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(load_on("3.5", "5050", "k.sm_35.clang.ptx"), CUDA_SUCCESS);           /* ISA 3.2 came with 5.5 */
  assert_int_equal(load_on("3.5", "5000", "k.sm_35.clang.ptx"), CUDA_ERROR_INVALID_PTX); /* pre-11 driver */
}

static void ptx_arch_specific_target(void **state) {
  (void)state;
  FAKE_NEED();
  static const char ptx[] =
      "// hand-written\n.version 8.0\n.target sm_90a\n.address_size 64\n"
      ".visible .entry only_on_hopper()\n{\n\tret;\n}\n";
  assert_int_equal(load_text_on("9.0", "13000", ptx), CUDA_SUCCESS);
  assert_int_equal(load_text_on("10.0", "13000", ptx), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(load_text_on("9.0", "11080", ptx), CUDA_ERROR_UNSUPPORTED_PTX_VERSION); /* 8.0 needs 12.0 */
}

/* compute_100f: JIT only within the family, CC 10.0 and 10.3 (cuda-compat.md 3.2). */
static void ptx_family_specific_target(void **state) {
  (void)state;
  FAKE_NEED();
  static const char ptx[] =
      ".version 8.8\n.target sm_100f\n.address_size 64\n"
      ".visible .entry blackwell_family()\n{\n\tret;\n}\n";
  assert_int_equal(load_text_on("10.0", "12090", ptx), CUDA_SUCCESS);
  assert_int_equal(load_text_on("10.3", "13000", ptx), CUDA_SUCCESS);
  assert_int_equal(load_text_on("11.0", "13000", ptx), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(load_text_on("12.0", "13000", ptx), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(load_text_on("9.0", "13000", ptx), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(load_text_on("10.0", "12080", ptx), CUDA_ERROR_UNSUPPORTED_PTX_VERSION); /* 8.8 needs 12.9 */
}

static void ptx_unknown_isa_and_not_ptx(void **state) {
  (void)state;
  FAKE_NEED();
  static const char future[] = ".version 9.9\n.target sm_75\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";
  assert_int_equal(load_text_on("7.5", "13010", future), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  static const char no_target[] = ".version 7.0\n.address_size 64\n";
  assert_int_equal(load_text_on("7.5", "13000", no_target), CUDA_ERROR_INVALID_PTX);
  static const char prose[] = "hello, this is not PTX\n";
  assert_int_equal(load_text_on("7.5", "13000", prose), CUDA_ERROR_INVALID_IMAGE);
}

static void ptx_jit_disabled_or_missing(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("CUDA_DISABLE_PTX_JIT", "1", 1);
  assert_int_equal(load_on("7.5", "13000", "k.compute_75.ptx"), CUDA_ERROR_JIT_COMPILATION_DISABLED);
  assert_int_equal(load_on("7.5", "13000", "k.sm_75.cubin"), CUDA_SUCCESS); /* a cubin needs no JIT */
  unsetenv("CUDA_DISABLE_PTX_JIT");
  setenv("FAKECUDA_NO_JIT", "1", 1);
  assert_int_equal(load_on("7.5", "13000", "k.compute_75.ptx"), CUDA_ERROR_JIT_COMPILER_NOT_FOUND);
}

static void ptx_error_log_buffer(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("8.6", "12080"), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob b = fake_fixture("k.compute_75.ptx");
  char log[256] = "untouched";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule m;
  assert_int_equal(fk.ModuleLoadDataEx(&m, b.data, 2, opts, vals), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  /* PTX ISA 8.7 is the newest a CUDA 12.8 driver knows. */
  assert_non_null(strstr(log, "Unsupported .version 9.0; current version is '8.7'"));
  assert_int_equal((size_t)(uintptr_t)vals[1], strlen(log) + 1);
  free(b.data);
}

/* ------------------------------------------------------------ fatbins --- */

static void fatbin_prefers_cubin_then_ptx(void **state) {
  (void)state;
  FAKE_NEED();
  const char *fb = "k.sm_75_compute_75.fatbin";
  assert_int_equal(load_on("7.5", "13000", fb), CUDA_SUCCESS);
  assert_int_equal(fk.jit_count(), 0); /* the sm_75 cubin was taken */
  assert_int_equal(load_on("8.6", "13000", fb), CUDA_SUCCESS);
  assert_int_equal(fk.jit_count(), 1); /* only the PTX fits CC 8.6 */
  assert_int_equal(load_on("7.0", "13000", fb), CUDA_ERROR_NO_BINARY_FOR_GPU);
  setenv("CUDA_DISABLE_PTX_JIT", "1", 1);
  assert_int_equal(load_on("7.5", "13000", fb), CUDA_SUCCESS);
  assert_int_equal(load_on("8.6", "13000", fb), CUDA_ERROR_JIT_COMPILATION_DISABLED);
  unsetenv("CUDA_DISABLE_PTX_JIT");
  setenv("CUDA_FORCE_PTX_JIT", "1", 1);
  assert_int_equal(load_on("7.5", "13000", fb), CUDA_SUCCESS);
  assert_int_equal(fk.jit_count(), 1);
}

static void fatbin_driver_rules(void **state) {
  (void)state;
  FAKE_NEED();
  const char *fb = "k.sm_75_compute_75.fatbin";
  assert_int_equal(load_on("8.6", "12080", fb), CUDA_ERROR_UNSUPPORTED_PTX_VERSION); /* zstd readable, ISA 9.0 not */
  assert_int_equal(load_on("8.6", "12020", fb), CUDA_ERROR_INVALID_IMAGE);           /* zstd before R550 */
  assert_int_equal(load_on("7.5", "12080", fb), CUDA_ERROR_INVALID_IMAGE);           /* CUDA 13 cubin */
}

/* ------------------------------------------------------------ modules --- */

static void module_functions(void **state) {
  (void)state;
  FAKE_NEED();
  const char *files[] = {"k.sm_75.cubin", "k.compute_75.ptx", "k.sm_75_compute_75.fatbin"};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
    fake_use_device(0);
    fake_blob b = fake_fixture(files[i]);
    CUmodule m;
    CUfunction f1, f2, f3;
    assert_int_equal(fk.ModuleLoadData(&m, b.data), CUDA_SUCCESS);
    assert_int_equal(fk.ModuleGetFunction(&f1, m, "fc_axpy"), CUDA_SUCCESS);
    assert_int_equal(fk.ModuleGetFunction(&f2, m, "fc_fill"), CUDA_SUCCESS);
    assert_ptr_not_equal(f1, f2);
    assert_int_equal(fk.ModuleGetFunction(&f3, m, "fc_axpy"), CUDA_SUCCESS);
    assert_ptr_equal(f1, f3);
    assert_int_equal(fk.ModuleGetFunction(&f3, m, "fc_ax"), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(fk.ModuleGetFunction(&f3, m, "missing"), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(fk.ModuleUnload(m), CUDA_SUCCESS);
    assert_int_equal(fk.ModuleGetFunction(&f3, m, "fc_axpy"), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(fk.ModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    free(b.data);
  }
}

static void module_needs_context(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_blob b = fake_fixture("k.sm_75.cubin");
  CUmodule m;
  assert_int_equal(fk.ModuleLoadData(&m, b.data), CUDA_ERROR_INVALID_CONTEXT);
  CUlinkState st;
  assert_int_equal(fk.LinkCreate(0, NULL, NULL, &st), CUDA_ERROR_INVALID_CONTEXT);
  free(b.data);
}

/* ------------------------------------------------------------- linker --- */

/* Links the compute_75 PTX on a CC 8.6 device of a CUDA 13.0 driver and
 * returns a copy of the FAKECUBIN (sm_86, made by driver 13000). */
static fake_blob link_ptx_for_86(void) {
  assert_int_equal(fake_init_with("8.6", "13000"), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob ptx = fake_fixture("k.compute_75.ptx");
  CUlinkState st;
  void *out = NULL;
  size_t n = 0;
  assert_int_equal(fk.LinkCreate(0, NULL, NULL, &st), CUDA_SUCCESS);
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_PTX, ptx.data, ptx.size + 1, "k.ptx", 0, NULL, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.LinkComplete(st, &out, &n), CUDA_SUCCESS);
  assert_non_null(out);
  assert_true(n > 16);
  assert_memory_equal(out, "FAKECUBIN1", 10);
  /* Loadable while the link state lives. */
  CUmodule m;
  CUfunction f;
  assert_int_equal(fk.ModuleLoadData(&m, out), CUDA_SUCCESS);
  assert_int_equal(fk.ModuleGetFunction(&f, m, "fc_fill"), CUDA_SUCCESS);
  assert_int_equal(fk.ModuleGetFunction(&f, m, "fc_axpy"), CUDA_SUCCESS);
  assert_int_equal(fk.ModuleGetFunction(&f, m, "nope"), CUDA_ERROR_NOT_FOUND);
  fake_blob copy = {malloc(n), n};
  assert_non_null(copy.data);
  memcpy(copy.data, out, n);
  assert_int_equal(fk.LinkDestroy(st), CUDA_SUCCESS);
  free(ptx.data);
  return copy;
}

static void link_output_follows_cubin_rules(void **state) {
  (void)state;
  FAKE_NEED();
  fake_blob fake = link_ptx_for_86();
  const struct {
    const char *cc, *driver;
    CUresult want;
  } cases[] = {
      {"8.6", "13000", CUDA_SUCCESS},
      {"8.9", "13000", CUDA_SUCCESS},                 /* same major, higher minor */
      {"8.0", "13000", CUDA_ERROR_NO_BINARY_FOR_GPU}, /* lower minor */
      {"9.0", "13000", CUDA_ERROR_NO_BINARY_FOR_GPU}, /* other major */
      {"8.6", "12090", CUDA_ERROR_NO_BINARY_FOR_GPU}, /* made by a newer driver */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(fake_init_with(cases[i].cc, cases[i].driver), CUDA_SUCCESS);
    fake_use_device(0);
    CUmodule m;
    assert_int_equal(fk.ModuleLoadData(&m, fake.data), cases[i].want);
  }
  free(fake.data);
}

static void link_inputs_validated(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("8.6", "12080"), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob ptx = fake_fixture("k.compute_75.ptx"), cubin = fake_fixture("k.sm_80.cubin"), fb = fake_fixture("k.sm_75_compute_75.fatbin");
  char log[256] = "";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log, (void *)(uintptr_t)sizeof log};
  CUlinkState st;
  void *out;
  size_t n;
  assert_int_equal(fk.LinkCreate(2, opts, vals, &st), CUDA_SUCCESS);
  assert_int_equal(fk.LinkComplete(st, &out, &n), CUDA_ERROR_INVALID_VALUE); /* nothing added */
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_PTX, ptx.data, ptx.size, "k.ptx", 0, NULL, NULL),
                   CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  assert_non_null(strstr(log, "Unsupported .version 9.0"));
  /* A CUDA 13 cubin on a 12.8 driver, then a fatbin with nothing loadable. */
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_CUBIN, cubin.data, cubin.size, "k.cubin", 0, NULL, NULL),
                   CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_FATBINARY, fb.data, fb.size, "k.fatbin", 0, NULL, NULL),
                   CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_PTX, cubin.data, cubin.size, "wrong type", 0, NULL, NULL),
                   CUDA_ERROR_INVALID_PTX);
  assert_int_equal(fk.LinkAddData(st, (CUjitInputType)3, ptx.data, ptx.size, "object", 0, NULL, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fk.LinkDestroy(st), CUDA_SUCCESS);
  assert_int_equal(fk.LinkDestroy(st), CUDA_ERROR_INVALID_HANDLE);
  free(ptx.data);
  free(cubin.data);
  free(fb.data);
}

/* ------------------------------------------------------------ devices --- */

static void devices_from_environment(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("3.7=Tesla K80, 9.0=NVIDIA H100 80GB HBM3,12.0", "11040"), CUDA_SUCCESS);
  int n = -1, v = -1;
  assert_int_equal(fk.DeviceGetCount(&n), CUDA_SUCCESS);
  assert_int_equal(n, 3);
  char name[128];
  assert_int_equal(fk.DeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  assert_string_equal(name, "Tesla K80");
  assert_int_equal(fk.DeviceGetName(name, sizeof name, 1), CUDA_SUCCESS);
  assert_string_equal(name, "NVIDIA H100 80GB HBM3");
  assert_int_equal(fk.DeviceGetName(name, sizeof name, 2), CUDA_SUCCESS);
  assert_string_equal(name, "Fake GPU (CC 12.0)");
  assert_int_equal(fk.DeviceGetName(name, 6, 1), CUDA_SUCCESS); /* truncated to len - 1 */
  assert_string_equal(name, "NVIDI");
  const int cc[3][2] = {{3, 7}, {9, 0}, {12, 0}};
  for (int d = 0; d < 3; d++) {
    assert_int_equal(fk.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d), CUDA_SUCCESS);
    assert_int_equal(v, cc[d][0]);
    assert_int_equal(fk.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d), CUDA_SUCCESS);
    assert_int_equal(v, cc[d][1]);
    assert_int_equal(fk.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d), CUDA_SUCCESS);
    assert_true(v > 0);
    size_t mem = 0;
    assert_int_equal(fk.DeviceTotalMem(&mem, d), CUDA_SUCCESS);
    assert_int_equal(mem, (size_t)16384 << 20);
  }
  assert_int_equal(fk.DeviceGetAttribute(&v, 123456, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 3), CUDA_ERROR_INVALID_DEVICE);
  CUdevice dev;
  assert_int_equal(fk.DeviceGet(&dev, 3), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(fk.DriverGetVersion(&v), CUDA_SUCCESS);
  assert_int_equal(v, 11040);
}

static void device_pci_and_uuid(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.0", NULL), CUDA_SUCCESS);
  char bus[32];
  assert_int_equal(fk.DeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  assert_string_equal(bus, "0000:01:00.0");
  assert_int_equal(fk.DeviceGetPCIBusId(bus, sizeof bus, 1), CUDA_SUCCESS);
  assert_string_equal(bus, "0000:02:00.0");
  int v;
  assert_int_equal(fk.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), CUDA_SUCCESS);
  assert_int_equal(v, 2);
  /* README: byte i of physical device p's UUID is (37p + 13i + 0x5a) mod 256. */
  for (int d = 0; d < 2; d++) {
    CUuuid u;
    assert_int_equal(fk.DeviceGetUuid(&u, d), CUDA_SUCCESS);
    for (int i = 0; i < 16; i++) assert_int_equal(u.bytes[i], (37 * d + 13 * i + 0x5a) % 256);
  }
}

static void defaults_and_memory_size(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_MEM_MB", "2", 1);
  assert_int_equal(fake_init_with("6.1", NULL), CUDA_SUCCESS);
  int v;
  assert_int_equal(fk.DriverGetVersion(&v), CUDA_SUCCESS);
  assert_int_equal(v, 13000);
  size_t mem;
  assert_int_equal(fk.DeviceTotalMem(&mem, 0), CUDA_SUCCESS);
  assert_int_equal(mem, (size_t)2 << 20);
}

static void no_devices_is_no_device(void **state) {
  (void)state;
  FAKE_NEED();
  int n = -1;
  assert_int_equal(fake_init_with(NULL, NULL), CUDA_ERROR_NO_DEVICE);
  assert_int_equal(fk.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fake_init_with("", NULL), CUDA_ERROR_NO_DEVICE);
}

static void malformed_configuration_refused(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("9", NULL), CUDA_ERROR_INVALID_VALUE);
  assert_non_null(strstr(fk.config_error(), "FAKECUDA_DEVICES"));
  assert_int_equal(fake_init_with("8.6", "12.8"), CUDA_ERROR_INVALID_VALUE);
  assert_non_null(strstr(fk.config_error(), "FAKECUDA_DRIVER"));
  setenv("FAKECUDA_FAIL", "cuNoSuchCall=2", 1);
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_ERROR_INVALID_VALUE);
  assert_non_null(strstr(fk.config_error(), "cuNoSuchCall"));
  setenv("FAKECUDA_FAIL", "cuMemAlloc_v2=2@0", 1);
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_ERROR_INVALID_VALUE);
  unsetenv("FAKECUDA_FAIL");
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  assert_string_equal(fk.config_error(), "");
}

/* Reconfiguring: cuInit re-reads a changed environment without a reset, and
 * is a no-op (state kept) when nothing changed. */
static void cuinit_rereads_changed_environment(void **state) {
  (void)state;
  FAKE_NEED();
  int n;
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 64), CUDA_SUCCESS);
  assert_int_equal(fk.Init(0), CUDA_SUCCESS);
  assert_int_equal(fk.live_allocations(), 1); /* same environment: nothing forgotten */
  setenv("FAKECUDA_DEVICES", "7.5,8.6", 1);
  assert_int_equal(fk.Init(0), CUDA_SUCCESS);
  assert_int_equal(fk.DeviceGetCount(&n), CUDA_SUCCESS);
  assert_int_equal(n, 2);
  assert_int_equal(fk.live_allocations(), 0);
}

/* --------------------------------------------------- visible devices --- */

static int visible_ccs(const char *visible, int out[8]) {
  setenv("CUDA_VISIBLE_DEVICES", visible, 1);
  CUresult r = fake_init_with("7.5,8.0,8.6,9.0", NULL);
  if (r != CUDA_SUCCESS) return -(int)r;
  int n = 0;
  assert_int_equal(fk.DeviceGetCount(&n), CUDA_SUCCESS);
  for (int i = 0; i < n && i < 8; i++) {
    int major, minor;
    assert_int_equal(fk.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, i), CUDA_SUCCESS);
    assert_int_equal(fk.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, i), CUDA_SUCCESS);
    out[i] = major * 10 + minor;
  }
  return n;
}

static void visible_devices_ordinals(void **state) {
  (void)state;
  FAKE_NEED();
  int cc[8];
  assert_int_equal(visible_ccs("2,0", cc), 2);
  assert_int_equal(cc[0], 86);
  assert_int_equal(cc[1], 75);
  assert_int_equal(visible_ccs("1,7,3", cc), 1); /* stops at the invalid 7 */
  assert_int_equal(cc[0], 80);
  assert_int_equal(visible_ccs("3,3,1", cc), 1); /* a repeat is invalid */
  assert_int_equal(cc[0], 90);
  assert_int_equal(visible_ccs("0,x,1", cc), 1);
  assert_int_equal(visible_ccs("", cc), -CUDA_ERROR_NO_DEVICE);
  assert_int_equal(visible_ccs("-1", cc), -CUDA_ERROR_NO_DEVICE);
  assert_int_equal(visible_ccs("MIG-0b1c2d3e", cc), -CUDA_ERROR_NO_DEVICE);
}

static void visible_devices_uuids(void **state) {
  (void)state;
  FAKE_NEED();
  /* Physical device 3: first UUID bytes (111+0x5a)=0xc9, (111+13+0x5a)=0xd6 ... */
  char uuid3[48];
  int pos = snprintf(uuid3, sizeof uuid3, "GPU-");
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) pos += snprintf(uuid3 + pos, sizeof uuid3 - (size_t)pos, "-");
    pos += snprintf(uuid3 + pos, sizeof uuid3 - (size_t)pos, "%02x", (37 * 3 + 13 * i + 0x5a) % 256);
  }
  int cc[8];
  assert_int_equal(visible_ccs(uuid3, cc), 1);
  assert_int_equal(cc[0], 90);
  char prefix[16];
  snprintf(prefix, sizeof prefix, "%.6s", uuid3); /* "GPU-c9" names one device */
  char list[64];
  snprintf(list, sizeof list, "%s,0", prefix);
  assert_int_equal(visible_ccs(list, cc), 2);
  assert_int_equal(cc[0], 90);
  assert_int_equal(cc[1], 75);
  CUuuid u;
  assert_int_equal(fk.DeviceGetUuid(&u, 0), CUDA_SUCCESS);
  assert_int_equal(u.bytes[0], (37 * 3 + 0x5a) % 256); /* the physical device's UUID */
  assert_int_equal(visible_ccs("GPU-", cc), -CUDA_ERROR_NO_DEVICE);
  assert_int_equal(visible_ccs("GPU-ffffffff", cc), -CUDA_ERROR_NO_DEVICE);
  /* With 8 devices, physical 0 starts 0x5a and physical 7 starts (259+0x5a)%256
   * = 0x5d: "GPU-5" is ambiguous and names no device, "GPU-5d" names device 7. */
  int n = -1;
  setenv("CUDA_VISIBLE_DEVICES", "GPU-5", 1);
  assert_int_equal(fake_init_with("5.0,5.2,6.0,6.1,7.0,7.5,8.0,8.6", NULL), CUDA_ERROR_NO_DEVICE);
  setenv("CUDA_VISIBLE_DEVICES", "GPU-5d", 1);
  assert_int_equal(fake_init_with("5.0,5.2,6.0,6.1,7.0,7.5,8.0,8.6", NULL), CUDA_SUCCESS);
  assert_int_equal(fk.DeviceGetCount(&n), CUDA_SUCCESS);
  assert_int_equal(n, 1);
  char name[64];
  assert_int_equal(fk.DeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  assert_string_equal(name, "Fake GPU (CC 8.6)");
}

/* ------------------------------------------------- stub, init, errors --- */

static void stub_library(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_DEVICES", "8.6", 1);
  setenv("FAKECUDA_STUB", "1", 1);
  fk.reset();
  int v = -7;
  const char *s = "untouched";
  assert_int_equal(fk.Init(0), CUDA_ERROR_STUB_LIBRARY);
  assert_int_equal(fk.DriverGetVersion(&v), CUDA_ERROR_STUB_LIBRARY);
  assert_int_equal(v, -7);
  assert_int_equal(fk.DeviceGetCount(&v), CUDA_ERROR_STUB_LIBRARY);
  assert_int_equal(fk.GetErrorName(CUDA_ERROR_NO_BINARY_FOR_GPU, &s), CUDA_ERROR_STUB_LIBRARY);
  assert_string_equal(s, "untouched");
  unsetenv("FAKECUDA_STUB");
  assert_int_equal(fk.Init(0), CUDA_SUCCESS);
}

static void calls_before_cuinit(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_DEVICES", "8.6", 1);
  setenv("FAKECUDA_DRIVER", "12020", 1);
  int v = 0;
  CUdeviceptr p;
  const char *s = NULL;
  assert_int_equal(fk.DeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fk.DriverGetVersion(&v), CUDA_SUCCESS);
  assert_int_equal(v, 12020);
  assert_int_equal(fk.GetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s), CUDA_SUCCESS);
  assert_string_equal(s, "CUDA_ERROR_NOT_INITIALIZED");
  assert_int_equal(fk.Init(1), CUDA_ERROR_INVALID_VALUE); /* flags must be 0 */
  assert_int_equal(fk.Init(0), CUDA_SUCCESS);
  assert_int_equal(fk.DeviceGetCount(&v), CUDA_SUCCESS);
  assert_int_equal(v, 1);
}

static void error_names_and_strings(void **state) {
  (void)state;
  FAKE_NEED();
  const struct {
    CUresult code;
    const char *name, *text;
  } cases[] = {
      {0, "CUDA_SUCCESS", "no error"},
      {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
      {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
      {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
      {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
      {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
      {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
      {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
      {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
      {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
      {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *s = NULL;
    assert_int_equal(fk.GetErrorName(cases[i].code, &s), CUDA_SUCCESS);
    assert_string_equal(s, cases[i].name);
    assert_int_equal(fk.GetErrorString(cases[i].code, &s), CUDA_SUCCESS);
    assert_string_equal(s, cases[i].text);
  }
  const char *s = "x";
  assert_int_equal(fk.GetErrorName(12345, &s), CUDA_ERROR_INVALID_VALUE);
  assert_null(s);
}

/* ---------------------------------------------------- fault injection --- */

static void fault_injection_nth_call(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_FAIL", "cuMemAlloc_v2=2@3,cuLinkComplete=218", 1);
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_SUCCESS);
  assert_int_equal(fk.live_allocations(), 3);
  assert_int_equal(fk.call_count("cuMemAlloc_v2"), 4);
  fake_blob ptx = fake_fixture("k.compute_75.ptx");
  CUlinkState st;
  void *out;
  size_t n;
  assert_int_equal(fk.LinkCreate(0, NULL, NULL, &st), CUDA_SUCCESS);
  assert_int_equal(fk.LinkAddData(st, CU_JIT_INPUT_PTX, ptx.data, ptx.size, "k", 0, NULL, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.LinkComplete(st, &out, &n), CUDA_ERROR_INVALID_PTX);
  assert_int_equal(fk.LinkComplete(st, &out, &n), CUDA_ERROR_INVALID_PTX);
  free(ptx.data);
}

static void fault_injection_plain_name_shares_counter(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_FAIL", "cuCtxPushCurrent=201@2", 1); /* plain name in the rule */
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  CUcontext ctx;
  assert_int_equal(fk.PrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  assert_int_equal(fk.CtxPushCurrentPlain(ctx), CUDA_SUCCESS);          /* call 1 */
  assert_int_equal(fk.CtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT); /* call 2, _v2 name */
  assert_int_equal(fk.CtxPushCurrentPlain(ctx), CUDA_SUCCESS);          /* call 3 */
  assert_int_equal(fk.call_count("cuCtxPushCurrent"), 3);
}

static void fault_injection_on_cuinit(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_FAIL", "cuInit=999", 1);
  int n;
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_ERROR_UNKNOWN);
  assert_int_equal(fk.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  setenv("FAKECUDA_FAIL", "cuInit=100@1", 1);
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_ERROR_NO_DEVICE);
  assert_int_equal(fk.Init(0), CUDA_SUCCESS); /* same environment: the counter went on to 2 */
}

/* ------------------------------------------------------------- memory --- */

static void memory_round_trip(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f - 3.0f;
  CUdeviceptr a, b;
  assert_int_equal(fk.MemAlloc(&a, sizeof in), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&b, sizeof in), CUDA_SUCCESS);
  assert_true(a != 0 && b != 0 && a != b);
  assert_int_equal(a % 256, 0);
  assert_int_equal(fk.bytes_allocated(), 2 * sizeof in);
  assert_int_equal(fk.live_allocations(), 2);
  assert_int_equal(fk.MemcpyHtoD(a, in, sizeof in), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoD(b, a, sizeof in), CUDA_SUCCESS);
  memset(out, 0, sizeof out);
  assert_int_equal(fk.MemcpyDtoH(out, b, sizeof out), CUDA_SUCCESS);
  assert_memory_equal(in, out, sizeof in);
  /* Offsets inside an allocation: copy elements 10..19 to the front of b. */
  assert_int_equal(fk.MemcpyDtoD(b, a + 10 * sizeof(float), 10 * sizeof(float)), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(out, b, 10 * sizeof(float)), CUDA_SUCCESS);
  assert_memory_equal(out, in + 10, 10 * sizeof(float));
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoDAsync(a, in, 4, s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamDestroyPlain(s), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoDAsync(a, in, 4, s), CUDA_ERROR_INVALID_HANDLE); /* destroyed stream */
  assert_int_equal(fk.StreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.MemFree(a), CUDA_SUCCESS);
  assert_int_equal(fk.bytes_allocated(), sizeof in);
  assert_int_equal(fk.MemFree(b), CUDA_SUCCESS);
  assert_int_equal(fk.live_allocations(), 0);
}

static void memory_bounds_checked(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  char buf[512] = {0};
  CUdeviceptr a, b;
  assert_int_equal(fk.MemAlloc(&a, 100), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&b, 100), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoD(a, buf, 100), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoD(a, buf, 101), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemcpyHtoD(a + 50, buf, 51), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemcpyDtoH(buf, a + 99, 1), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoH(buf, a - 1, 2), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemcpyDtoD(b, a, 101), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemcpyDtoH(buf, a, 300), CUDA_ERROR_INVALID_VALUE); /* would run into b */
  assert_int_equal(fk.MemcpyHtoD(a, NULL, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemcpyDtoH(buf, 0x1234, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.MemFree(a + 8), CUDA_ERROR_INVALID_VALUE); /* interior pointer */
  assert_int_equal(fk.MemFree(a), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(a), CUDA_ERROR_INVALID_VALUE);            /* double free */
  assert_int_equal(fk.MemcpyDtoH(buf, a, 4), CUDA_ERROR_INVALID_VALUE); /* use after free */
  CUdeviceptr c;
  assert_int_equal(fk.MemAlloc(&c, 100), CUDA_SUCCESS);
  assert_true(c != a); /* addresses are not reused */
  assert_int_equal(fk.MemAlloc(&c, 0), CUDA_ERROR_INVALID_VALUE);
}

static void memory_limit(void **state) {
  (void)state;
  FAKE_NEED();
  setenv("FAKECUDA_MEM_MB", "1", 1);
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  CUdeviceptr a, b;
  size_t free_b, total_b;
  assert_int_equal(fk.MemAlloc(&a, (1u << 20) + 1), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(fk.MemAlloc(&a, 1u << 19), CUDA_SUCCESS);
  assert_int_equal(fk.MemGetInfo(&free_b, &total_b), CUDA_SUCCESS);
  assert_int_equal(total_b, 1u << 20);
  assert_int_equal(free_b, 1u << 19);
  assert_int_equal(fk.MemAlloc(&b, (1u << 19) + 1), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(fk.MemAlloc(&b, 1u << 19), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(fk.MemFree(a), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&a, 1), CUDA_SUCCESS);
}

static void legacy_plain_memory_names_refused(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("8.6", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  unsigned int p32 = 0;
  assert_int_equal(fk.LegacyMemAlloc(&p32, 16), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(fk.live_allocations(), 0);
  assert_int_equal(fk.call_count("cuMemAlloc_v2"), 1);
}

/* ----------------------------------------------------------- contexts --- */

static void contexts_stack_and_release(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  CUcontext c0, c1, cur = (CUcontext)1;
  CUdeviceptr p;
  assert_int_equal(fk.CtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur);
  assert_int_equal(fk.MemAlloc(&p, 8), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fk.CtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fk.PrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  assert_int_equal(fk.PrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  assert_ptr_not_equal(c0, c1);
  assert_int_equal(fk.CtxPushCurrent(c0), CUDA_SUCCESS);
  assert_int_equal(fk.CtxPushCurrent(c1), CUDA_SUCCESS);
  assert_int_equal(fk.CtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, c1);
  assert_int_equal(fk.CtxPopCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, c1);
  assert_int_equal(fk.CtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, c0);
  assert_int_equal(fk.CtxSetCurrent(c1), CUDA_SUCCESS); /* replaces the top */
  assert_int_equal(fk.CtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, c1);
  assert_int_equal(fk.CtxSetCurrent(NULL), CUDA_SUCCESS); /* pops */
  assert_int_equal(fk.CtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur);
  /* The last release destroys the context and its memory. */
  assert_int_equal(fk.CtxPushCurrent(c1), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&p, 8), CUDA_SUCCESS);
  assert_int_equal(fk.live_allocations(), 1);
  assert_int_equal(fk.PrimaryCtxRelease(1), CUDA_SUCCESS);
  assert_int_equal(fk.live_allocations(), 0);
  assert_int_equal(fk.MemAlloc(&p, 8), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fk.PrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fk.CtxPushCurrent(c1), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(fk.PrimaryCtxRelease(5), CUDA_ERROR_INVALID_DEVICE);
}

/* Entry points the CUDA libraries' doubles call (Ember does not):
 * cuCtxGetDevice, and cuPointerGetAttribute for a buffer's context and
 * allocation range. */
typedef CUresult (*ctx_get_device_fn)(CUdevice *);
typedef CUresult (*pointer_attribute_fn)(void *, int, CUdeviceptr);

static void library_entry_points(void **state) {
  (void)state;
  FAKE_NEED();
  ctx_get_device_fn ctx_get_device = (ctx_get_device_fn)dlsym(fk.handle, "cuCtxGetDevice");
  pointer_attribute_fn pointer_attribute = (pointer_attribute_fn)dlsym(fk.handle, "cuPointerGetAttribute");
  assert_non_null(ctx_get_device);
  assert_non_null(pointer_attribute);
  CUdevice dev = -1;
  assert_int_equal(ctx_get_device(&dev), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  assert_int_equal(ctx_get_device(&dev), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext c1 = fake_use_device(1);
  assert_int_equal(ctx_get_device(&dev), CUDA_SUCCESS);
  assert_int_equal(dev, 1);
  assert_int_equal(ctx_get_device(NULL), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 1000), CUDA_SUCCESS);
  CUcontext owner = NULL;
  CUdeviceptr start = 0;
  size_t size = 0;
  assert_int_equal(pointer_attribute(&owner, 1, p + 999), CUDA_SUCCESS); /* CU_POINTER_ATTRIBUTE_CONTEXT */
  assert_ptr_equal(owner, c1);
  assert_int_equal(pointer_attribute(&start, 11, p + 500), CUDA_SUCCESS); /* RANGE_START_ADDR */
  assert_int_equal(start, p);
  assert_int_equal(pointer_attribute(&size, 12, p + 500), CUDA_SUCCESS); /* RANGE_SIZE */
  assert_int_equal(size, 1000);
  assert_int_equal(pointer_attribute(&owner, 1, p + 1000), CUDA_ERROR_INVALID_VALUE); /* past the end */
  assert_int_equal(pointer_attribute(&owner, 1, 0x1000), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(pointer_attribute(&owner, 2, p), CUDA_ERROR_INVALID_VALUE); /* not modelled */
  assert_int_equal(pointer_attribute(NULL, 1, p), CUDA_ERROR_INVALID_VALUE);
  /* from another context too (unified addressing); not once freed */
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  fake_use_device(0);
  assert_int_equal(pointer_attribute(&owner, 1, p), CUDA_SUCCESS);
  assert_ptr_equal(owner, c1);
  assert_int_equal(fk.MemFree(p), CUDA_SUCCESS);
  assert_int_equal(pointer_attribute(&owner, 1, p), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.call_count("cuPointerGetAttribute"), 9);
  assert_int_equal(fk.call_count("cuCtxGetDevice"), 3);
}

/* ------------------------------------------------------------- launch --- */

static void launch_checks(void **state) {
  (void)state;
  FAKE_NEED();
  assert_int_equal(fake_init_with("7.5,8.6", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  fake_blob b = fake_fixture("k.sm_75.cubin");
  CUmodule m;
  CUfunction f;
  assert_int_equal(fk.ModuleLoadData(&m, b.data), CUDA_SUCCESS);
  assert_int_equal(fk.ModuleGetFunction(&f, m, "fc_fill"), CUDA_SUCCESS);
  float v = 1.0f;
  int n = 10;
  CUdeviceptr y;
  assert_int_equal(fk.MemAlloc(&y, 40), CUDA_SUCCESS);
  void *args[] = {&y, &v, &n};
  assert_int_equal(fk.launch_count(), 0);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.LaunchKernel(f, 65535, 65535, 1, 1024, 1, 1, 49152, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(fk.launch_count(), 2);
  assert_string_equal(fk.last_launch(), "fc_fill");
  const unsigned bad[][7] = {{0, 1, 1, 32, 1, 1, 0},     {1, 1, 1, 0, 1, 1, 0},     {1, 1, 1, 1025, 1, 1, 0},
                             {1, 1, 1, 32, 32, 2, 0},    {1, 1, 1, 1, 1, 65, 0},    {1, 65536, 1, 32, 1, 1, 0},
                             {1, 1, 65536, 32, 1, 1, 0}, {1, 1, 1, 32, 1, 1, 49153}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(fk.LaunchKernel(f, bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], bad[i][5], bad[i][6],
                                     NULL, args, NULL),
                     CUDA_ERROR_INVALID_VALUE);
  void *extra[] = {NULL};
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, extra), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(fk.LaunchKernel((CUfunction)&v, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)&n, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  /* Another device's context is current: the function is not its own. */
  fake_use_device(1);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext popped;
  assert_int_equal(fk.CtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_int_equal(fk.ModuleUnload(m), CUDA_SUCCESS);
  assert_int_equal(fk.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(fk.launch_count(), 2);
  free(b.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(cubin_same_major_rule, fake_test_setup),
      cmocka_unit_test_setup(cubin_arch_specific_only_on_its_sm, fake_test_setup),
      cmocka_unit_test_setup(cubin_from_newer_toolkit_is_invalid_image, fake_test_setup),
      cmocka_unit_test_setup(cubin_v2_of_cuda_12_9, fake_test_setup),
      cmocka_unit_test_setup(cubin_minor_version_compatibility, fake_test_setup),
      cmocka_unit_test_setup(cubin_truncated_or_garbage_is_invalid_image, fake_test_setup),
      cmocka_unit_test_setup(ptx_isa_against_driver, fake_test_setup),
      cmocka_unit_test_setup(ptx_target_above_device, fake_test_setup),
      cmocka_unit_test_setup(ptx_legacy_clang, fake_test_setup),
      cmocka_unit_test_setup(ptx_arch_specific_target, fake_test_setup),
      cmocka_unit_test_setup(ptx_family_specific_target, fake_test_setup),
      cmocka_unit_test_setup(ptx_unknown_isa_and_not_ptx, fake_test_setup),
      cmocka_unit_test_setup(ptx_jit_disabled_or_missing, fake_test_setup),
      cmocka_unit_test_setup(ptx_error_log_buffer, fake_test_setup),
      cmocka_unit_test_setup(fatbin_prefers_cubin_then_ptx, fake_test_setup),
      cmocka_unit_test_setup(fatbin_driver_rules, fake_test_setup),
      cmocka_unit_test_setup(module_functions, fake_test_setup),
      cmocka_unit_test_setup(module_needs_context, fake_test_setup),
      cmocka_unit_test_setup(link_output_follows_cubin_rules, fake_test_setup),
      cmocka_unit_test_setup(link_inputs_validated, fake_test_setup),
      cmocka_unit_test_setup(devices_from_environment, fake_test_setup),
      cmocka_unit_test_setup(device_pci_and_uuid, fake_test_setup),
      cmocka_unit_test_setup(defaults_and_memory_size, fake_test_setup),
      cmocka_unit_test_setup(no_devices_is_no_device, fake_test_setup),
      cmocka_unit_test_setup(malformed_configuration_refused, fake_test_setup),
      cmocka_unit_test_setup(cuinit_rereads_changed_environment, fake_test_setup),
      cmocka_unit_test_setup(visible_devices_ordinals, fake_test_setup),
      cmocka_unit_test_setup(visible_devices_uuids, fake_test_setup),
      cmocka_unit_test_setup(stub_library, fake_test_setup),
      cmocka_unit_test_setup(calls_before_cuinit, fake_test_setup),
      cmocka_unit_test_setup(error_names_and_strings, fake_test_setup),
      cmocka_unit_test_setup(fault_injection_nth_call, fake_test_setup),
      cmocka_unit_test_setup(fault_injection_plain_name_shares_counter, fake_test_setup),
      cmocka_unit_test_setup(fault_injection_on_cuinit, fake_test_setup),
      cmocka_unit_test_setup(memory_round_trip, fake_test_setup),
      cmocka_unit_test_setup(memory_bounds_checked, fake_test_setup),
      cmocka_unit_test_setup(memory_limit, fake_test_setup),
      cmocka_unit_test_setup(legacy_plain_memory_names_refused, fake_test_setup),
      cmocka_unit_test_setup(contexts_stack_and_release, fake_test_setup),
      cmocka_unit_test_setup(library_entry_points, fake_test_setup),
      cmocka_unit_test_setup(launch_checks, fake_test_setup),
  };
  return cmocka_run_group_tests(tests, fake_group_setup, fake_group_teardown);
}
