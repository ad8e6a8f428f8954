/* ops/blas.c: which OpenBLAS core type Ember asks for (the mapping upstream
 * OpenBLAS uses for AMD CPUs with AVX-512, pull requests 4303 and 6033,
 * written out here), that loading leaves the environment as it was, that
 * the products are right (small integer products worked out by hand) and
 * that the description names the core type chosen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "blas.h"
#include "run_self.h"
#include "fake_openblas.h"
#include "op_testkit.h"

static void core_choice_follows_upstream_mapping(void **state) {
  (void)state;
  /* AMD with AVX-512 (Zen 4, Zen 5): SkylakeX, or Cooperlake with BF16. */
  assert_string_equal(em_blas_core_choice("AuthenticAMD", 1, 0, NULL), "SkylakeX");
  assert_string_equal(em_blas_core_choice("AuthenticAMD", 1, 1, NULL), "Cooperlake");
  /* An empty variable is no choice. */
  assert_string_equal(em_blas_core_choice("AuthenticAMD", 1, 0, ""), "SkylakeX");
  /* AMD without AVX-512 (Zen 1-3): OpenBLAS's own Zen choice. */
  assert_null(em_blas_core_choice("AuthenticAMD", 0, 0, NULL));
  /* Intel: OpenBLAS 0.3.21 already knows its AVX-512 parts. */
  assert_null(em_blas_core_choice("GenuineIntel", 1, 1, NULL));
  assert_null(em_blas_core_choice("", 1, 0, NULL));
  assert_null(em_blas_core_choice(NULL, 1, 0, NULL));
  /* The user's setting always stands. */
  assert_null(em_blas_core_choice("AuthenticAMD", 1, 0, "Haswell"));
}

/* The expected choice on this machine, from the compiler's CPU model (not
 * from blas.c's CPUID reading). */
static const char *expected_core_here(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
  if (!__builtin_cpu_is("amd") || !avx512) return NULL;
  return "SkylakeX or Cooperlake";
#else
  return NULL;
#endif
}

static void loads_and_restores_environment(void **state) {
  (void)state;
  const char *before = getenv("OPENBLAS_CORETYPE");
  char saved[64] = "";
  if (before) snprintf(saved, sizeof saved, "%s", before);
  assert_int_equal(em_blas_ready(), EM_OK);
  const char *after = getenv("OPENBLAS_CORETYPE");
  if (before) {
    assert_non_null(after);
    assert_string_equal(after, saved);
  } else {
    assert_null(after);
  }
  char line[1024];
  em_cpu_blas_info(line, sizeof line);
  printf("# blas: %s\n", line);
  assert_non_null(strstr(line, "core "));
  const char *want = before && before[0] ? NULL : expected_core_here();
  if (want) {
    assert_true(strstr(line, "core SkylakeX") || strstr(line, "core Cooperlake"));
    assert_non_null(strstr(line, "chosen by Ember"));
  } else {
    assert_null(strstr(line, "chosen by Ember"));
  }
}

/* An OPENBLAS_CORETYPE set to the empty string is no choice (Ember may choose), but it is
 * still the user's variable: after loading it is there, empty, as before. In a child process,
 * which loads OpenBLAS afresh (this test runs before any other loads it in this one). */
static void empty_variable_stays_set(void **state) {
  (void)state;
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("OPENBLAS_CORETYPE", "", 1);
    if (em_blas_ready() != EM_OK) _exit(2);
    const char *after = getenv("OPENBLAS_CORETYPE");
    _exit(after && !after[0] ? 0 : 3);
  }
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  if (WEXITSTATUS(ws) == 3) fail_msg("OPENBLAS_CORETYPE was set empty before OpenBLAS was loaded, unset after");
  assert_int_equal(WEXITSTATUS(ws), 0);
}

/* [1 2 3; 4 5 6] @ [7 8; 9 10; 11 12] = [58 64; 139 154], and with beta = 1
 * on a C that starts at [1 1; 1 1]; the transposed forms read the same
 * matrices stored transposed. */
static void products_are_right(void **state) {
  (void)state;
  assert_int_equal(em_blas_ready(), EM_OK);
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  const float at[6] = {1, 4, 2, 5, 3, 6}, bt[6] = {7, 9, 11, 8, 10, 12};
  const float want[4] = {58, 64, 139, 154};
  float c[4];
  em_blas_sgemm(0, 0, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);
  for (int i = 0; i < 4; i++) assert_true(c[i] == want[i]);
  em_blas_sgemm(1, 1, 2, 2, 3, 1.0f, at, 2, bt, 3, 0.0f, c, 2);
  for (int i = 0; i < 4; i++) assert_true(c[i] == want[i]);
  for (int i = 0; i < 4; i++) c[i] = 1;
  em_blas_sgemm(0, 1, 2, 2, 3, 2.0f, a, 3, bt, 3, 1.0f, c, 2);
  for (int i = 0; i < 4; i++) assert_true(c[i] == 2 * want[i] + 1);
  const double ad[6] = {1, 2, 3, 4, 5, 6}, bd[6] = {7, 8, 9, 10, 11, 12};
  double cd[4];
  em_blas_dgemm(0, 0, 2, 2, 3, 1.0, ad, 3, bd, 2, 0.0, cd, 2);
  for (int i = 0; i < 4; i++) assert_true(cd[i] == want[i]);
}

/* ---- without OpenBLAS: this program again, with LD_LIBRARY_PATH naming a directory whose
 * libopenblas.so.0 is not a library (and whose libopenblas.so is empty), so it cannot load. */

/* [1 2 3; 4 5 6] @ [7 8; 9 10; 11 12] through the executor: 0 when right, else its status. */
static int child_matmul(int64_t m) {
  int64_t as[2] = {m, 3}, bs[2] = {3, 2};
  const double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12}, want[4] = {58, 64, 139, 154};
  em_tensor *in[2] = {ot_tensor(EM_F32, 2, as, a), ot_tensor(EM_F32, 2, bs, b)}, *y = NULL;
  em_status st = ot_run("matmul", in, 2, NULL, 0, &y, 1);
  if (!st)
    for (int64_t i = 0; i < 2 * m; i++)
      if (((const float *)em_tensor_data(y))[i] != want[i]) st = EM_ERR_INTERNAL;
  em_tensor_release(y), em_tensor_release(in[0]), em_tensor_release(in[1]);
  return (int)st;
}

/* The child's checks; its exit status says which failed. */
static int child_without_blas(void) {
  int r = 0;
  /* oneDNN (ops/dnnl.c) computes the fast mode's products by itself where it is installed:
   * switched off here, so that OpenBLAS's absence shows */
  setenv("EMBER_DNNL", "0", 1);
  setenv("EMBER_MODE", "portable", 1); /* portable mode never needs OpenBLAS */
  if (child_matmul(2)) r = 10;
  unsetenv("EMBER_MODE");
  if (!r && child_matmul(0)) r = 11; /* an empty product in the fast mode computes nothing */
  if (!r && child_matmul(2) != EM_ERR_UNSUPPORTED) r = 12; /* the fast mode's product: refused, naming why */
  if (!r && !strstr(em_last_error(), "libopenblas.so.0: invalid ELF header")) r = 13;
  if (r) fprintf(stderr, "without OpenBLAS: %s\n", em_last_error());
  return r;
}

static void works_and_explains_without_openblas(void **state) {
  (void)state;
  char dir[] = "/tmp/ember-test-blas-XXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_int_equal(ts_write_unloadable_openblas(dir), 0);
  const int status = ts_run_self("--child-without-openblas", "LD_LIBRARY_PATH", dir);
  ts_remove_unloadable_openblas(dir);
  rmdir(dir);
  switch (status) {
  case 0: break;
  case 10: fail_msg("portable mode's matmul failed without OpenBLAS"); break;
  case 11: fail_msg("an empty fast-mode matmul failed without OpenBLAS"); break;
  case 12: fail_msg("a fast-mode matmul without OpenBLAS did not fail with EM_ERR_UNSUPPORTED"); break;
  case 13: fail_msg("the error does not give libopenblas.so.0's own reason (see the child's stderr)"); break;
  default: fail_msg("child exit status %d (-1: not started or killed)", status);
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--child-without-openblas")) return child_without_blas();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(core_choice_follows_upstream_mapping),
      cmocka_unit_test(empty_variable_stays_set),
      cmocka_unit_test(works_and_explains_without_openblas),
      cmocka_unit_test(loads_and_restores_environment),
      cmocka_unit_test(products_are_right),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
