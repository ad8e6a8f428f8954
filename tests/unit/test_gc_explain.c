/* Tests of `gpucheck explain`: numbers, names, parts of names and pasted
 * messages lead to the right codes; unknown codes and usage errors give the
 * documented exit codes.
 *
 * Expected values are written by hand from the CUDA 13.0 headers
 * (/usr/local/cuda/include/cuda.h enum cudaError_enum, driver_types.h enum
 * cudaError, read with a pager), from the runtime messages quoted in
 * shared/reference/cuda-compat.md section 6, and from the pains of
 * shared/reference/gpucheck-anchors.md section 2; not from running the code.
 * The command runs in-process (gc_cmd_explain, its facts read as JSON) and,
 * for exit codes, as the real binary ($EMBER_BUILD_DIR/bin/gpucheck; those
 * tests are skipped without it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "arch_table.h"
#include "gpucheck.h"
#include "runtime.h"

/* ---- running explain in-process ---- */

typedef struct answer {
  int rc;         /* what gc_cmd_explain returned */
  int exit_code;  /* the report's exit code (rc == 0) */
  gc_report *rep;
  json_t *json;   /* gc_report_json of it */
  json_t *facts;
} answer;

static answer last; /* freed by the teardown, also when an assertion jumps out */

static int free_answer(void **state) {
  (void)state;
  json_decref(last.json);
  gc_report_free(last.rep);
  memset(&last, 0, sizeof last);
  return 0;
}

/* explain with the words of a query as separate arguments, as a shell passes
 * an unquoted paste. */
static answer *explain_argv(int n, const char *const *words) {
  free_answer(NULL);
  char *argv[16] = {"explain"};
  assert_true(n < 15);
  for (int i = 0; i < n; i++) argv[i + 1] = (char *)words[i];
  gc_opts o = {.json = 1};
  last.rc = gc_cmd_explain(n + 1, argv, &o, &last.rep);
  if (last.rc == 0) {
    assert_non_null(last.rep);
    last.exit_code = gc_report_exit_code(last.rep);
    last.json = gc_report_json(last.rep);
    assert_non_null(last.json);
    last.facts = json_object_get(last.json, "facts");
    assert_true(json_is_object(last.facts));
  }
  return &last;
}

static answer *explain(const char *query) { return explain_argv(1, &query); }

static const char *fact_str(const char *key) {
  json_t *v = json_object_get(last.facts, key);
  if (!json_is_string(v)) fail_msg("facts.%s is not a string", key);
  return json_string_value(v);
}

static size_t n_codes(void) {
  json_t *codes = json_object_get(last.facts, "codes");
  assert_true(json_is_array(codes));
  return json_array_size(codes);
}

/* The code of the answer with this api and number, or fails. */
static json_t *code(const char *api, int number) {
  json_t *codes = json_object_get(last.facts, "codes");
  for (size_t i = 0; i < json_array_size(codes); i++) {
    json_t *c = json_array_get(codes, i);
    if (!strcmp(json_string_value(json_object_get(c, "api")), api) &&
        json_integer_value(json_object_get(c, "number")) == number)
      return c;
  }
  fail_msg("the answer has no %s code %d", api, number);
  return NULL;
}

static const char *code_str(json_t *c, const char *key) {
  json_t *v = json_object_get(c, key);
  if (!json_is_string(v)) fail_msg("code.%s is not a string", key);
  return json_string_value(v);
}

/* Every check of the answer has this verdict. */
static void all_checks(gc_verdict want) {
  assert_true(last.rep->n > 0);
  for (size_t i = 0; i < last.rep->n; i++)
    for (size_t j = 0; j < last.rep->sections[i].n; j++)
      if (last.rep->sections[i].checks[j].verdict != want)
        fail_msg("check %s has verdict %s, expected %s", last.rep->sections[i].checks[j].id,
                 gc_verdict_name(last.rep->sections[i].checks[j].verdict), gc_verdict_name(want));
}

/* Driver and runtime rows of 209, as in cuda.h and driver_types.h. */
static void expect_209(void) {
  assert_int_equal(last.rc, 0);
  assert_int_equal(last.exit_code, GC_EXIT_OK);
  assert_int_equal(n_codes(), 2);
  assert_string_equal(code_str(code("driver", 209), "name"), "CUDA_ERROR_NO_BINARY_FOR_GPU");
  assert_string_equal(code_str(code("runtime", 209), "name"), "cudaErrorNoKernelImageForDevice");
  assert_string_equal(code_str(code("runtime", 209), "message"), "no kernel image is available for execution on the device");
  all_checks(GC_INFO);
}

/* ---- numbers ---- */

static void test_number_209_both_apis(void **state) {
  (void)state;
  explain("209");
  expect_209();
  assert_string_equal(fact_str("matched_by"), "number");
  /* The header's comment above the value, first sentence. */
  assert_string_equal(code_str(code("driver", 209), "description"),
                      "This indicates that there is no kernel image available that is suitable for the device.");
  /* Ember's advice names the tool that answers the question: which SMs a binary has. */
  assert_non_null(strstr(code_str(code("driver", 209), "check"), "gpucheck inspect"));
  assert_non_null(strstr(code_str(code("driver", 209), "causes"), "PTX"));
}

static void test_number_35_runtime_only(void **state) {
  (void)state;
  explain("35");
  assert_int_equal(last.rc, 0);
  assert_int_equal(n_codes(), 1);
  json_t *c = code("runtime", 35);
  assert_string_equal(code_str(c, "name"), "cudaErrorInsufficientDriver");
  assert_string_equal(code_str(c, "message"), "CUDA driver version is insufficient for CUDA runtime version");
  /* The heading says the driver API has no 35 (cuda.h jumps from 34 to 36). */
  assert_non_null(strstr(last.rep->sections[0].name, "driver API has no code 35"));
  /* P3: the MVC floors of the reference, section 3.6 of the anchors. */
  assert_non_null(strstr(code_str(c, "causes"), "525.60.13"));
  assert_int_equal(last.exit_code, GC_EXIT_OK);
}

static void test_number_shared_by_nvml(void **state) {
  (void)state;
  /* 18 is cudaErrorInvalidTexture in the runtime (no driver 18) and
   * NVML_ERROR_LIB_RM_VERSION_MISMATCH in NVML: both are shown. */
  explain("18");
  assert_int_equal(n_codes(), 2);
  assert_string_equal(code_str(code("runtime", 18), "name"), "cudaErrorInvalidTexture");
  assert_string_equal(code_str(code("nvml", 18), "name"), "NVML_ERROR_LIB_RM_VERSION_MISMATCH");
  /* 999 exists in all three. */
  explain("999");
  assert_int_equal(n_codes(), 3);
  assert_string_equal(code_str(code("driver", 999), "name"), "CUDA_ERROR_UNKNOWN");
  assert_string_equal(code_str(code("runtime", 999), "name"), "cudaErrorUnknown");
  assert_string_equal(code_str(code("nvml", 999), "name"), "NVML_ERROR_UNKNOWN");
}

static void test_number_names_from_header(void **state) {
  (void)state;
  /* Pairs whose names differ between the APIs (read in the headers). */
  static const struct {
    int n;
    const char *driver, *runtime;
  } pairs[] = {
      {3, "CUDA_ERROR_NOT_INITIALIZED", "cudaErrorInitializationError"},
      {34, "CUDA_ERROR_STUB_LIBRARY", "cudaErrorStubLibrary"},
      {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "cudaErrorDevicesUnavailable"},
      {100, "CUDA_ERROR_NO_DEVICE", "cudaErrorNoDevice"},
      {200, "CUDA_ERROR_INVALID_IMAGE", "cudaErrorInvalidKernelImage"},
      {201, "CUDA_ERROR_INVALID_CONTEXT", "cudaErrorDeviceUninitialized"},
      {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "cudaErrorUnsupportedPtxVersion"},
      {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "cudaErrorUnsupportedDevSideSync"},
      {400, "CUDA_ERROR_INVALID_HANDLE", "cudaErrorInvalidResourceHandle"},
      {719, "CUDA_ERROR_LAUNCH_FAILED", "cudaErrorLaunchFailure"},
      {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "cudaErrorCompatNotSupportedOnDevice"},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    char q[16];
    snprintf(q, sizeof q, "%d", pairs[i].n);
    explain(q);
    assert_string_equal(code_str(code("driver", pairs[i].n), "name"), pairs[i].driver);
    assert_string_equal(code_str(code("runtime", pairs[i].n), "name"), pairs[i].runtime);
  }
}

/* ---- names ---- */

static void test_names_any_case(void **state) {
  (void)state;
  explain("CUDA_ERROR_NO_BINARY_FOR_GPU");
  expect_209();
  assert_string_equal(fact_str("matched_by"), "name");
  explain("cudaErrorNoKernelImageForDevice");
  expect_209();
  explain("cuda_error_no_binary_for_gpu");
  expect_209();
  explain("CUDAERRORNOKERNELIMAGEFORDEVICE");
  expect_209();
  explain("cudaErrorInsufficientDriver");
  assert_int_equal(n_codes(), 1);
  code("runtime", 35);
  explain("NVML_ERROR_DRIVER_NOT_LOADED");
  assert_int_equal(n_codes(), 1);
  code("nvml", 9);
}

static void test_partial_names(void **state) {
  (void)state;
  explain("NoKernelImage");
  expect_209();
  assert_string_equal(fact_str("matched_by"), "partial");
  explain("no_binary");
  expect_209();
  explain("STUB_LIBRARY");
  assert_int_equal(n_codes(), 2);
  code("driver", 34);
  /* A name inside a longer line (TensorFlow's cuInit failure). */
  explain("failed call to cuInit: CUDA_ERROR_NO_DEVICE");
  assert_int_equal(n_codes(), 2);
  code("driver", 100);
}

static void test_partial_ambiguous_lists_candidates(void **state) {
  (void)state;
  /* "PEER_ACCESS" is part of the names of three codes in both headers (217
   * PEER_ACCESS_UNSUPPORTED, 704 ..._ALREADY_ENABLED, 705 ..._NOT_ENABLED):
   * several numbers, so a list of candidates, not an explanation. */
  explain("PEER_ACCESS");
  assert_int_equal(last.rc, 0);
  assert_true(json_is_true(json_object_get(last.facts, "ambiguous")));
  code("driver", 217);
  code("driver", 704);
  code("driver", 705);
  assert_int_equal(last.exit_code, GC_EXIT_OK);
}

/* ---- pasted messages ---- */

static void test_messages(void **state) {
  (void)state;
  explain("no kernel image is available for execution on the device");
  expect_209();
  assert_string_equal(fact_str("matched_by"), "message");
  /* A whole PyTorch line, split into words by the shell. */
  static const char *const words[] = {"RuntimeError:", "CUDA", "error:", "no", "kernel", "image", "is", "available",
                                      "for", "execution", "on", "the", "device"};
  explain_argv(13, words);
  expect_209();
  explain("CUDA driver version is insufficient for CUDA runtime version");
  assert_int_equal(n_codes(), 1);
  code("runtime", 35);
  explain("cudaGetDeviceCount() failed: forward compatibility was attempted on non supported HW");
  code("driver", 804);
  code("runtime", 804);
  explain("Failed to initialize NVML: Driver/library version mismatch");
  assert_int_equal(n_codes(), 1);
  code("nvml", 18);
  /* Part of a message. */
  explain("insufficient for CUDA runtime");
  code("runtime", 35);
}

static void test_number_inside_text(void **state) {
  (void)state;
  /* ollama's line (anchors P10); "570.169" is a version, not a code. */
  explain("Unable to load cudart library /usr/lib/libcuda.so.570.169: cuda driver library init failure: 802");
  assert_int_equal(n_codes(), 2);
  assert_string_equal(code_str(code("driver", 802), "name"), "CUDA_ERROR_SYSTEM_NOT_READY");
  explain("CUDA error 209");
  expect_209();
}

/* ---- unknown and usage ---- */

static void expect_unknown(const char *q) {
  explain(q);
  assert_int_equal(last.rc, 0);
  assert_int_equal(last.exit_code, GC_EXIT_FAIL);
  assert_int_equal(n_codes(), 0);
  assert_string_equal(fact_str("matched_by"), "none");
  assert_int_equal(last.rep->n, 1);
  assert_int_equal(last.rep->sections[0].n, 1);
  gc_check *c = &last.rep->sections[0].checks[0];
  assert_int_equal(c->verdict, GC_FAIL);
  assert_string_equal(c->id, "explain.unknown");
  assert_non_null(strstr(c->title, "not a CUDA error code Ember knows"));
  assert_non_null(c->fix);
}

static void test_unknown(void **state) {
  (void)state;
  expect_unknown("12345");   /* no API has it: the highest CUresult is 999, cudaErrorApiFailureBase 10000 */
  expect_unknown("42");      /* a gap in both enums (cuda.h: 36 then 46; driver_types.h: 37 then 43) */
  expect_unknown("hello world");
  expect_unknown("CUBLAS_STATUS_NOT_INITIALIZED");
  assert_non_null(strstr(last.rep->sections[0].checks[0].detail, "cuBLAS"));
  expect_unknown("\xff\xfe");  /* not UTF-8: still a JSON-safe answer */
}

static void test_usage(void **state) {
  (void)state;
  explain_argv(0, NULL);
  assert_int_equal(last.rc, GC_EXIT_USAGE);
  assert_null(last.rep);
  explain("   ");
  assert_int_equal(last.rc, GC_EXIT_USAGE);
  explain("--frobnicate");
  assert_int_equal(last.rc, GC_EXIT_USAGE);
}

/* ---- the table behind it ---- */

static void test_codes_that_matter_have_advice(void **state) {
  (void)state;
  /* The codes the brief and the anchors' pains name, with the pain each cites. */
  static const struct {
    const char *api;
    int n;
    const char *pain; /* NULL: no pain required */
  } want[] = {
      {"driver", 3, "P9"},     {"driver", 34, "P10"},   {"runtime", 35, "P3"},   {"driver", 36, "P3"},
      {"driver", 46, NULL},    {"driver", 100, "P9"},   {"driver", 200, NULL},   {"driver", 209, "P1"},
      {"driver", 218, "P6"},   {"driver", 221, NULL},   {"driver", 222, "P6"},   {"driver", 223, NULL},
      {"driver", 225, NULL},   {"driver", 801, NULL},   {"driver", 802, "P10"},  {"driver", 803, "P7"},
      {"driver", 804, "P5"},   {"driver", 999, "P9"},   {"nvml", 9, "P9"},       {"nvml", 12, NULL},
      {"nvml", 18, "P7"},      {"nvml", 999, "P9"},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const em_cuda_error_row *r = em_cuda_error_lookup(want[i].api, want[i].n);
    if (!r) fail_msg("no %s row %d", want[i].api, want[i].n);
    if (!r->causes[0] || !r->check[0]) fail_msg("%s %d has no causes or check", want[i].api, want[i].n);
    if (want[i].pain && !strstr(r->pains, want[i].pain))
      fail_msg("%s %d cites pains '%s', expected %s", want[i].api, want[i].n, r->pains, want[i].pain);
    /* A runtime row of the same number has the same advice (one text, shared). */
    const em_cuda_error_row *rt = strcmp(want[i].api, "driver") ? NULL : em_cuda_error_lookup("runtime", want[i].n);
    if (rt) assert_string_equal(rt->check, r->check);
  }
}

static void test_runtime_messages_use_the_table(void **state) {
  (void)state;
  /* One source of truth: Ember's own error messages name codes and give the
   * fix from the same rows gpucheck explain prints. */
  assert_string_equal(em_cuda_error_name(209), "CUDA_ERROR_NO_BINARY_FOR_GPU");
  assert_string_equal(em_cuda_error_name(804), "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE");
  assert_string_equal(em_cuda_error_name(916), "CUDA_ERROR_KEY_ROTATION"); /* the last before 999 in cuda.h */
  assert_string_equal(em_cuda_error_name(35), "CUDA_ERROR_(unlisted)");    /* no CUresult 35 */
  assert_string_equal(em_cuda_error_fix(209), em_cuda_error_lookup("driver", 209)->check);
  /* A code without advice points to gpucheck explain with its number. */
  assert_non_null(strstr(em_cuda_error_fix(702), "gpucheck explain 702"));
  em_cuda_fail(34, "cuInit", "loading the driver");
  assert_non_null(strstr(em_last_error(), "CUDA_ERROR_STUB_LIBRARY (34)"));
  assert_non_null(strstr(em_last_error(), "stubs"));
}

/* ---- the real binary ---- */

static int run_status(const char *args) {
  const char *build = getenv("EMBER_BUILD_DIR");
  if (!build || !*build) return -2;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/bin/gpucheck' %s >/dev/null 2>&1", build, args);
  int st = system(cmd);
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli_exit_codes(void **state) {
  (void)state;
  if (run_status("--help") == -2) skip(); /* no EMBER_BUILD_DIR: not run through run_tests.sh */
  assert_int_equal(run_status("explain 209"), 0);
  assert_int_equal(run_status("explain --json cudaErrorInsufficientDriver"), 0);
  assert_int_equal(run_status("explain 'no kernel image is available for execution on the device'"), 0);
  assert_int_equal(run_status("explain 4242"), 1);
  assert_int_equal(run_status("--json explain not-a-code-at-all"), 1);
  assert_int_equal(run_status("explain"), 64);
  assert_int_equal(run_status("explain --bogus"), 64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_number_209_both_apis, free_answer),
      cmocka_unit_test_teardown(test_number_35_runtime_only, free_answer),
      cmocka_unit_test_teardown(test_number_shared_by_nvml, free_answer),
      cmocka_unit_test_teardown(test_number_names_from_header, free_answer),
      cmocka_unit_test_teardown(test_names_any_case, free_answer),
      cmocka_unit_test_teardown(test_partial_names, free_answer),
      cmocka_unit_test_teardown(test_partial_ambiguous_lists_candidates, free_answer),
      cmocka_unit_test_teardown(test_messages, free_answer),
      cmocka_unit_test_teardown(test_number_inside_text, free_answer),
      cmocka_unit_test_teardown(test_unknown, free_answer),
      cmocka_unit_test_teardown(test_usage, free_answer),
      cmocka_unit_test(test_codes_that_matter_have_advice),
      cmocka_unit_test(test_runtime_messages_use_the_table),
      cmocka_unit_test(test_cli_exit_codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
