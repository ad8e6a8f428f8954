/* Tests of runtime/cubin.c against cubins made by nvcc 13.0. Every expected
 * value comes from the hand reading (readelf, xxd) in tests/fixtures/README.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cubin.h"
#include "error.h"

#include "unit/test_files.h"

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#define TOOL_PREFIX \
  "ptxas; Cuda compilation tools, release 13.0, V13.0.88; Build cuda_13.0.r13.0/compiler.36424714_0; "

typedef struct want {
  const char *file;
  size_t size;
  int sm;
  char variant;
  int relocatable;
  const char *arch_option; /* end of the tool strings */
  int n_kernels;
  const char *kernels;
} want;

static void check_v2(const want *w) {
  blob b = load_fixture(w->file);
  assert_int_equal(b.size, w->size);
  em_cubin_info info;
  char kernels[256];
  em_status s = em_cubin_read(b.data, b.size, &info, kernels, sizeof kernels);
  if (s != EM_OK) fail_msg("%s: %s", w->file, em_last_error());
  assert_int_equal(info.sm, w->sm);
  assert_int_equal(info.abi_version, 8);
  assert_int_equal(info.os_abi, 0x41);
  assert_int_equal(info.variant, w->variant);
  assert_int_equal(info.toolkit, 13000); /* cuinfo desc bytes 4-5: 0x82 = 130 */
  assert_int_equal(info.is_relocatable, w->relocatable);
  char tool[200];
  snprintf(tool, sizeof tool, "%s%s", TOOL_PREFIX, w->arch_option);
  assert_string_equal(info.tool_info, tool);
  assert_int_equal(info.n_kernels, w->n_kernels);
  assert_string_equal(kernels, w->kernels);
  free(b.data);
}

static void test_sm75(void **state) {
  (void)state;
  const want w = {"k_sm75.cubin", 4584, 75, 0, 0, "-arch sm_75 -m 64", 2, "ember_fill,ember_saxpy"};
  check_v2(&w);
}

static void test_sm90_plain(void **state) {
  (void)state;
  const want w = {"k_sm90.cubin", 5608, 90, 0, 0, "-arch sm_90 -m 64", 2, "ember_fill,ember_saxpy"};
  check_v2(&w);
}

/* Same e_flags as sm_90: only .nv.compat attribute 9 = 1 says 'a'. */
static void test_sm90a(void **state) {
  (void)state;
  const want w = {"k_sm90a.cubin", 5608, 90, 'a', 0, "-arch sm_90a -m 64", 2, "ember_fill,ember_saxpy"};
  check_v2(&w);
}

static void test_sm100(void **state) {
  (void)state;
  const want w = {"k_sm100.cubin", 8456, 100, 0, 0, "-arch sm_100 -m 64", 2, "ember_fill,ember_saxpy"};
  check_v2(&w);
}

/* NVRTC 12.9's V2 cubin (sm_100): no cuinfo note, a tkinfo note whose first
 * word is 0x81; the CUDA version comes from its "release 12.9" string
 * (tests/fixtures/README.md). */
static void test_sm100_nvrtc129(void **state) {
  (void)state;
  blob b = load_fixture("k_sm100_nvrtc129.cubin");
  assert_int_equal(b.size, 8400);
  em_cubin_info info;
  char kernels[256];
  em_status s = em_cubin_read(b.data, b.size, &info, kernels, sizeof kernels);
  if (s != EM_OK) fail_msg("k_sm100_nvrtc129.cubin: %s", em_last_error());
  assert_int_equal(info.sm, 100);
  assert_int_equal(info.abi_version, 8);
  assert_int_equal(info.os_abi, 0x41);
  assert_int_equal(info.variant, 0);
  assert_int_equal(info.toolkit, 12090);
  assert_int_equal(info.is_relocatable, 0);
  assert_string_equal(info.tool_info, "ptxas; Cuda compilation tools, release 12.9, V12.9.86; Build system must define "
                                      "TOOLS_VERSION_EXTENDED; -arch sm_100 -fmad false");
  assert_int_equal(info.n_kernels, 2);
  assert_string_equal(kernels, "ember_fill,ember_saxpy");
  /* The version string is all there is: spoil it and the toolkit is unknown,
   * not guessed (offset of "release 12.9": tkinfo data at 0x648, desc at
   * +0x18, strings at desc+24, the string at +7, "release " 24 bytes in). */
  size_t at = 0x648 + 0x18 + 24 + 7 + 24;
  assert_memory_equal(b.data + at, "release 12.9,", 13);
  b.data[at + 8] = 'x';
  assert_int_equal(em_cubin_read(b.data, b.size, &info, NULL, 0), EM_OK);
  assert_int_equal(info.toolkit, 0);
  free(b.data);
}

/* The -rdc device function ember_twice is FUNC in .text.ember_twice but has
 * no STO_CUDA_ENTRY bit: it is not a kernel. */
static void test_rdc_device_function_is_not_a_kernel(void **state) {
  (void)state;
  const want w = {"k_rdc_sm80.cubin", 4160, 80, 0, 1, "-arch sm_80 -m 64 -c", 1, "ember_scale2"};
  check_v2(&w);
}

static void test_kernel_list_truncated_and_optional(void **state) {
  (void)state;
  blob b = load_fixture("k_sm90.cubin");
  em_cubin_info info;
  char small[8];
  memset(small, 'x', sizeof small);
  assert_int_equal(em_cubin_read(b.data, b.size, &info, small, sizeof small), EM_OK);
  assert_string_equal(small, "ember_f");
  assert_int_equal(info.n_kernels, 2);
  char one[1] = {'x'};
  assert_int_equal(em_cubin_read(b.data, b.size, &info, one, sizeof one), EM_OK);
  assert_int_equal(one[0], '\0');
  assert_int_equal(em_cubin_read(b.data, b.size, &info, NULL, 0), EM_OK);
  assert_int_equal(info.n_kernels, 2);
  free(b.data);
}

/* ---- V1 (hand-derived from cuda-compat.md 5.1, README "V1 by hand") ---- */

static blob make_v1(uint32_t e_flags) {
  blob b = load_fixture("k_sm75.cubin");
  b.data[7] = 0x33;           /* EI_OSABI */
  b.data[8] = 7;              /* EI_ABIVERSION */
  put32(b.data + 0x14, 123);  /* e_version: CUDA 12.3 */
  put32(b.data + 0x30, e_flags);
  return b;
}

static void test_v1_header(void **state) {
  (void)state;
  blob b = make_v1(0x00500550u);
  em_cubin_info info;
  assert_int_equal(em_cubin_read(b.data, b.size, &info, NULL, 0), EM_OK);
  assert_int_equal(info.sm, 80);
  assert_int_equal(info.abi_version, 7);
  assert_int_equal(info.os_abi, 0x33);
  assert_int_equal(info.variant, 0);
  assert_int_equal(info.toolkit, 12030); /* e_version, not the 13.0 note left in the file */
  assert_int_equal(info.n_kernels, 2);
  free(b.data);
  b = make_v1(0x00500d50u); /* + 0x800 ACCELERATORS */
  assert_int_equal(em_cubin_read(b.data, b.size, &info, NULL, 0), EM_OK);
  assert_int_equal(info.sm, 80);
  assert_int_equal(info.variant, 'a');
  free(b.data);
}

/* ---- not a cubin ---- */

static em_status read_patched(const char *file, size_t off, int width, uint64_t value) {
  blob b = load_fixture(file);
  if (width == 1) b.data[off] = (uint8_t)value;
  else if (width == 2) put16(b.data + off, (uint16_t)value);
  else if (width == 4) put32(b.data + off, (uint32_t)value);
  else put64(b.data + off, value);
  em_cubin_info info;
  char k[64];
  em_status s = em_cubin_read(b.data, b.size, &info, k, sizeof k);
  if (s != EM_OK) {
    assert_int_equal(info.sm, 0); /* nothing half-filled is left behind */
    assert_string_equal(k, "");
  }
  free(b.data);
  return s;
}

static void test_other_elf_is_unsupported(void **state) {
  (void)state;
  assert_int_equal(read_patched("k_sm75.cubin", 18, 2, 62), EM_ERR_UNSUPPORTED); /* EM_X86_64 */
  assert_non_null(strstr(em_last_error(), "e_machine 62"));
  assert_int_equal(read_patched("k_sm75.cubin", 7, 1, 0), EM_ERR_UNSUPPORTED);   /* OSABI SYSV */
  assert_int_equal(read_patched("k_sm75.cubin", 4, 1, 1), EM_ERR_UNSUPPORTED);   /* ELFCLASS32 */
}

static void test_bad_magic_and_tiny(void **state) {
  (void)state;
  assert_int_equal(read_patched("k_sm75.cubin", 0, 1, 0x7e), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "offset 0"));
  em_cubin_info info;
  assert_int_equal(em_cubin_read("\x7f" "ELF", 4, &info, NULL, 0), EM_ERR_CORRUPT);
  assert_int_equal(em_cubin_read("", 0, &info, NULL, 0), EM_ERR_CORRUPT);
  assert_int_equal(em_cubin_read(NULL, 0, NULL, NULL, 0), EM_ERR_INVALID_ARGUMENT);
}

/* Every proper prefix must be refused (README: the program header table ends
 * exactly at the last byte of k_sm75.cubin). */
static void test_truncated_at_every_length(void **state) {
  (void)state;
  const char *files[] = {"k_sm75.cubin", "k_rdc_sm80.cubin"};
  for (int f = 0; f < 2; f++) {
    blob b = load_fixture(files[f]);
    for (size_t len = 0; len < b.size; len++) {
      uint8_t *copy = malloc(len ? len : 1); /* exact size, so a sanitizer sees any overread */
      memcpy(copy, b.data, len);
      em_cubin_info info;
      char k[64];
      em_status s = em_cubin_read(copy, len, &info, k, sizeof k);
      if (s != EM_ERR_CORRUPT) fail_msg("%s prefix %zu: status %d, expected EM_ERR_CORRUPT", files[f], len, s);
      free(copy);
    }
    free(b.data);
  }
}

/* k_sm90a: e_shoff 0x1050, 18 section headers; .nv.compat = section 8 at
 * 0x1250 (sh_offset at +0x18, sh_size at +0x20), data at 0x6c4. */
#define SHDR_COMPAT 0x1250u

static void test_offsets_past_the_end(void **state) {
  (void)state;
  assert_int_equal(read_patched("k_sm90a.cubin", 0x28, 8, 5608), EM_ERR_CORRUPT);       /* e_shoff = size */
  assert_int_equal(read_patched("k_sm90a.cubin", 0x28, 8, UINT64_MAX - 8), EM_ERR_CORRUPT);
  assert_int_equal(read_patched("k_sm90a.cubin", 0x3c, 2, 0xff00), EM_ERR_CORRUPT);     /* e_shnum */
  assert_int_equal(read_patched("k_sm90a.cubin", 0x3e, 2, 200), EM_ERR_CORRUPT);        /* e_shstrndx */
  assert_int_equal(read_patched("k_sm90a.cubin", 0x20, 8, 5600), EM_ERR_CORRUPT);       /* e_phoff */
  assert_int_equal(read_patched("k_sm90a.cubin", SHDR_COMPAT + 0x18, 8, 5600), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "offset 5600"));
  assert_int_equal(read_patched("k_sm90a.cubin", SHDR_COMPAT + 0x20, 8, UINT64_MAX), EM_ERR_CORRUPT);
}

static void test_malformed_compat_records(void **state) {
  (void)state;
  /* The last record (fmt 4 at 0x6c4 + 0x18) claims 0x0100 bytes, 8 are there. */
  assert_int_equal(read_patched("k_sm90a.cubin", 0x6c4 + 0x18 + 2, 2, 0x100), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "offset 1756")); /* 0x6c4 + 0x18 */
  /* Unknown format byte in the first record. */
  assert_int_equal(read_patched("k_sm90a.cubin", 0x6c4, 1, 9), EM_ERR_CORRUPT);
  /* Section size not a whole number of records: 0x24 -> 0x22. */
  assert_int_equal(read_patched("k_sm90a.cubin", SHDR_COMPAT + 0x20, 8, 0x22), EM_ERR_CORRUPT);
  /* attr 9 value 1 -> 0 turns sm_90a into plain sm_90 */
  blob b = load_fixture("k_sm90a.cubin");
  b.data[0x6c4 + 2] = 0;
  em_cubin_info info;
  assert_int_equal(em_cubin_read(b.data, b.size, &info, NULL, 0), EM_OK);
  assert_int_equal(info.variant, 0);
  free(b.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sm75),
      cmocka_unit_test(test_sm90_plain),
      cmocka_unit_test(test_sm90a),
      cmocka_unit_test(test_sm100),
      cmocka_unit_test(test_sm100_nvrtc129),
      cmocka_unit_test(test_rdc_device_function_is_not_a_kernel),
      cmocka_unit_test(test_kernel_list_truncated_and_optional),
      cmocka_unit_test(test_v1_header),
      cmocka_unit_test(test_other_elf_is_unsupported),
      cmocka_unit_test(test_bad_magic_and_tiny),
      cmocka_unit_test(test_truncated_at_every_length),
      cmocka_unit_test(test_offsets_past_the_end),
      cmocka_unit_test(test_malformed_compat_records),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
