/* gc_gpu_parse: GPUs named on gpucheck's command line. Expected compute
 * capabilities from shared/reference/cuda-compat.md §3.1 (the table the
 * arch_table rows were written from), not from the parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gpucheck.h"

static void expect_cc(const char *spec, int want) {
  int cc = -1;
  char name[128], err[256] = "";
  if (gc_gpu_parse(spec, &cc, name, sizeof name, err, sizeof err) != 0)
    fail_msg("'%s' was refused: %s", spec, err);
  if (cc != want) fail_msg("'%s' gave CC %d.%d, expected %d.%d", spec, cc / 10, cc % 10, want / 10, want % 10);
}

static void expect_refused(const char *spec, const char *why) {
  int cc = -1;
  char name[128], err[256] = "";
  assert_int_equal(gc_gpu_parse(spec, &cc, name, sizeof name, err, sizeof err), -1);
  if (!strstr(err, why)) fail_msg("'%s': message '%s' lacks '%s'", spec, err, why);
}

static void test_numbers(void **state) {
  (void)state;
  expect_cc("8.6", 86);
  expect_cc("12.0", 120);
  expect_cc("sm_90", 90);
  expect_cc("sm_121", 121);
  expect_cc("75", 75);
}

/* Names as people write them and as drivers report them. */
static void test_model_names(void **state) {
  (void)state;
  expect_cc("Tesla K80", 37);
  expect_cc("K80", 37);
  expect_cc("T4", 75);
  expect_cc("GTX 1080", 61);        /* "GeForce GTX 10xx" */
  expect_cc("RTX 3090", 86);        /* "GeForce RTX 30xx" */
  expect_cc("RTX 4090", 89);        /* "GeForce RTX 40xx", not the Quadro RTX 4000-8000 range */
  expect_cc("RTX A6000", 86);       /* "RTX A2000-A6000" */
  expect_cc("Quadro RTX 6000", 75); /* Turing Quadro, not the RTX 6000 Ada */
  expect_cc("RTX 5070 Ti", 120);
  expect_cc("A100", 80);
  expect_cc("A10", 86);
  expect_cc("H100", 90);
  expect_cc("B200", 100);
  expect_cc("Jetson AGX Orin", 87);
  expect_cc("NVIDIA H100 80GB HBM3", 90);
  expect_cc("NVIDIA A100-SXM4-80GB", 80);
  expect_cc("Tesla V100-SXM2-16GB", 70);
  expect_cc("NVIDIA GeForce RTX 4090", 89);
  expect_cc("NVIDIA RTX 6000 Ada Generation", 89);
  expect_cc("nvidia geforce rtx 5090", 120);
}

static void test_refusals(void **state) {
  (void)state;
  expect_refused("", "empty");
  expect_refused("Voodoo 5", "unknown GPU");
  expect_refused("Titan X", "several compute capabilities"); /* Maxwell 5.2 and Pascal 6.1 both sold as Titan X */
  expect_refused("RTX 4000", "several compute capabilities"); /* RTX 4000 Ada (8.9) and RTX PRO 4000 (12.0) */
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_numbers),
    cmocka_unit_test(test_model_names),
    cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
