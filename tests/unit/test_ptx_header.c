/* Tests of runtime/ptx_header.c: real PTX from nvcc 13.0 and clang 14
 * (expected values read by hand, tests/fixtures/README.md) and hand-written
 * snippets for the syntax corners. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "ptx_header.h"

#include "unit/test_files.h"

/* Parses a string literal without its NUL, from an exact-size copy. */
static em_status parse(const char *text, em_ptx_info *info, char *kernels, size_t cap) {
  size_t n = strlen(text);
  char *copy = malloc(n ? n : 1);
  memcpy(copy, text, n);
  em_status s = em_ptx_read_header(copy, n, info, kernels, cap);
  free(copy);
  return s;
}

static void check_fixture(const char *file, size_t size, int isa, int sm, char variant) {
  blob b = load_fixture(file);
  assert_int_equal(b.size, size);
  em_ptx_info info;
  char k[128];
  em_status s = em_ptx_read_header(b.text, b.size, &info, k, sizeof k);
  if (s != EM_OK) fail_msg("%s: %s", file, em_last_error());
  assert_int_equal(info.isa, isa);
  assert_int_equal(info.target_sm, sm);
  assert_int_equal(info.target_variant, variant);
  assert_int_equal(info.address_size, 64);
  assert_int_equal(info.n_entries, 2);
  assert_string_equal(k, "ember_saxpy,ember_fill");
  free(b.text);
}

static void test_nvcc_compute90(void **state) {
  (void)state;
  check_fixture("k_compute90.ptx", 1751, 90, 90, 0);
}

static void test_nvcc_compute90a(void **state) {
  (void)state;
  check_fixture("k_compute90a.ptx", 1752, 90, 90, 'a');
}

static void test_clang_sm35(void **state) {
  (void)state;
  check_fixture("k_sm35_clang.ptx", 1621, 32, 35, 0);
}

static void test_target_list_and_defaults(void **state) {
  (void)state;
  em_ptx_info info;
  assert_int_equal(parse(".version 7.8\n.target sm_35, texmode_independent\n", &info, NULL, 0), EM_OK);
  assert_int_equal(info.isa, 78);
  assert_int_equal(info.target_sm, 35);
  assert_int_equal(info.target_variant, 0);
  assert_int_equal(info.address_size, 0); /* absent: the PTX default (32) is the caller's to apply */
  assert_int_equal(info.n_entries, 0);
  assert_int_equal(parse(".version 8.8 .target debug, sm_100f , map_f64_to_f32 .address_size 32", &info, NULL, 0),
                   EM_OK);
  assert_int_equal(info.isa, 88);
  assert_int_equal(info.target_sm, 100);
  assert_int_equal(info.target_variant, 'f');
  assert_int_equal(info.address_size, 32);
  assert_int_equal(parse(".version 9.0\n.target sm_120a", &info, NULL, 0), EM_OK); /* ends without newline */
  assert_int_equal(info.target_sm, 120);
  assert_int_equal(info.target_variant, 'a');
}

static void test_comments_and_strings_hide_directives(void **state) {
  (void)state;
  const char *text =
      "// .version 1.0\n"
      "/* .target sm_10\n"
      "   .entry not_a_kernel( */\n"
      ".version /* inline */ 8.0 // trailing\n"
      ".target sm_80\n"
      ".address_size 64\n"
      ".file 1 \"/src/a/*weird*/.entry fake(//x.cu\"\n"
      ".visible .entry k_one(\n"
      "  .param .u64 p\n"
      ") { ret; }\n"
      ".entry k_two { ret; }\n";
  em_ptx_info info;
  char k[64];
  assert_int_equal(parse(text, &info, k, sizeof k), EM_OK);
  assert_int_equal(info.isa, 80);
  assert_int_equal(info.target_sm, 80);
  assert_int_equal(info.n_entries, 2);
  assert_string_equal(k, "k_one,k_two");
}

static void test_extern_entry_is_not_a_definition(void **state) {
  (void)state;
  em_ptx_info info;
  char k[64];
  assert_int_equal(parse(".version 8.0\n.target sm_80\n.extern .entry ext_k(.param .u32 a);\n"
                         ".visible .entry mine()\n{\nret;\n}\n",
                         &info, k, sizeof k),
                   EM_OK);
  assert_int_equal(info.n_entries, 1);
  assert_string_equal(k, "mine");
}

static void test_kernel_list_truncated(void **state) {
  (void)state;
  blob b = load_fixture("k_compute90.ptx");
  em_ptx_info info;
  char k[8];
  memset(k, 'x', sizeof k);
  assert_int_equal(em_ptx_read_header(b.text, b.size, &info, k, sizeof k), EM_OK);
  assert_string_equal(k, "ember_s");
  assert_int_equal(info.n_entries, 2);
  free(b.text);
}

static void test_malformed_version(void **state) {
  (void)state;
  em_ptx_info info;
  const char *bad[] = {
      ".version 8.10\n.target sm_80\n", /* two-digit minor is refused */
      ".version 8\n.target sm_80\n",
      ".version .target sm_80\n",
      ".version 8.x\n.target sm_80\n",
      ".version\n9.0\n.target sm_80\n", /* operand must be on the directive's line */
      ".version 0.9\n.target sm_80\n",
      ".version 123.0\n.target sm_80\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (parse(bad[i], &info, NULL, 0) != EM_ERR_CORRUPT) fail_msg("accepted: %s", bad[i]);
  }
  assert_int_equal(parse("\n\n.version 8.10\n", &info, NULL, 0), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "line 3"));
}

static void test_missing_or_bad_target(void **state) {
  (void)state;
  em_ptx_info info;
  char k[16] = "junk";
  assert_int_equal(parse(".version 8.0\n.entry k()\n", &info, k, sizeof k), EM_ERR_CORRUPT);
  assert_string_equal(k, ""); /* nothing is reported from a failed parse */
  assert_int_equal(info.isa, 0);
  assert_int_equal(parse(".version 8.0\n\n.target texmode_independent\n", &info, NULL, 0), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "line 3"));
  assert_int_equal(parse(".version 8.0\n.target sm_80x\n", &info, NULL, 0), EM_ERR_CORRUPT);
  assert_int_equal(parse(".version 8.0\n.target sm_\n", &info, NULL, 0), EM_ERR_CORRUPT);
  assert_int_equal(parse(".target sm_80\n", &info, NULL, 0), EM_ERR_CORRUPT); /* no .version */
  assert_int_equal(parse("", &info, NULL, 0), EM_ERR_CORRUPT);
  assert_int_equal(parse(".version 8.0\n.target sm_80\n.address_size 48\n", &info, NULL, 0), EM_ERR_CORRUPT);
  assert_int_equal(parse("/* .version 8.0 .target sm_80", &info, NULL, 0), EM_ERR_CORRUPT); /* open comment */
  assert_int_equal(em_ptx_read_header(NULL, 5, &info, NULL, 0), EM_ERR_INVALID_ARGUMENT);
}

/* Prefixes of a real file: never a crash. README: line 9 ".version 9.0",
 * line 10 ".target sm_90", line 11 ".address_size 64". A prefix is refused
 * until ".target sm_9" is complete ("sm_9" is a well-formed if wrong target),
 * and while it ends inside ".address_size 64" after the directive name. */
static void test_every_prefix(void **state) {
  (void)state;
  blob b = load_fixture("k_compute90.ptx");
  const char *target = memmem(b.text, b.size, ".target sm_90\n", strlen(".target sm_90\n"));
  const char *asize = memmem(b.text, b.size, ".address_size 64\n", strlen(".address_size 64\n"));
  assert_non_null(target);
  assert_non_null(asize);
  size_t first_ok = (size_t)(target - b.text) + strlen(".target sm_9");
  size_t as_name_end = (size_t)(asize - b.text) + strlen(".address_size");
  size_t as_value_end = (size_t)(asize - b.text) + strlen(".address_size 64");
  for (size_t len = 0; len <= b.size; len++) {
    char *copy = malloc(len ? len : 1);
    memcpy(copy, b.text, len);
    em_ptx_info info;
    char k[64];
    em_status s = em_ptx_read_header(copy, len, &info, k, sizeof k);
    int refused = len < first_ok || (len >= as_name_end && len < as_value_end);
    if (s != (refused ? EM_ERR_CORRUPT : EM_OK)) fail_msg("prefix %zu: status %d", len, s);
    if (!refused) {
      assert_int_equal(info.isa, 90);
      assert_true(info.n_entries <= 2);
    }
    free(copy);
  }
  free(b.text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nvcc_compute90),
      cmocka_unit_test(test_nvcc_compute90a),
      cmocka_unit_test(test_clang_sm35),
      cmocka_unit_test(test_target_list_and_defaults),
      cmocka_unit_test(test_comments_and_strings_hide_directives),
      cmocka_unit_test(test_extern_entry_is_not_a_definition),
      cmocka_unit_test(test_kernel_list_truncated),
      cmocka_unit_test(test_malformed_version),
      cmocka_unit_test(test_missing_or_bad_target),
      cmocka_unit_test(test_every_prefix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
