/* Tests of arch_table: the lookups over the generated tables and the
 * generator's refusal of malformed data.
 *
 * Every expected value below is written by hand from
 * /work/shared/reference/cuda-compat.md (the section is cited next to each
 * check), not taken from running the code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch_table.h"

/* ---- compute capabilities (reference §3.1) ---- */

static void test_cc_kepler_k80(void **state) {
  (void)state;
  const em_arch_row *r = em_arch_lookup(37);
  assert_non_null(r);
  assert_int_equal(r->cc, 37);
  assert_string_equal(r->arch, "Kepler");
  assert_non_null(strstr(r->gpus, "K80"));
  assert_int_equal(r->tegra, 0);
  assert_int_equal(r->last_toolkit, 11080); /* §3.1: last offline compile 11.8 */
  assert_int_equal(r->conf, 'C');
  assert_true(strlen(r->source) > 0);
}

static void test_cc_turing_t4_features(void **state) {
  (void)state;
  const em_arch_row *r = em_arch_lookup(75);
  assert_non_null(r);
  assert_string_equal(r->arch, "Turing");
  assert_non_null(strstr(r->gpus, "T4")); /* §3.1: T4 = 7.5 */
  assert_true(r->features & EM_FEAT_TENSOR_CORES);
  assert_true(r->features & EM_FEAT_FP16_ARITH);
  assert_true(r->features & EM_FEAT_INT8_DP4A);
  assert_false(r->features & EM_FEAT_BF16); /* bf16/tf32 need 8.0 */
  assert_false(r->features & EM_FEAT_TF32);
  assert_false(r->features & EM_FEAT_FP8);
  assert_int_equal(r->first_toolkit, 10000); /* §3.1: first CUDA 10.0 */
  assert_int_equal(r->last_toolkit, 0);      /* still current */
}

static void test_cc_feature_thresholds(void **state) {
  (void)state;
  /* Thresholds of the EM_FEAT_* comments in arch_table.h. */
  assert_true(em_arch_lookup(89)->features & EM_FEAT_FP8);
  assert_true(em_arch_lookup(90)->features & EM_FEAT_FP8);
  assert_false(em_arch_lookup(87)->features & EM_FEAT_FP8);
  assert_true(em_arch_lookup(80)->features & EM_FEAT_BF16);
  assert_true(em_arch_lookup(80)->features & EM_FEAT_TF32);
  assert_false(em_arch_lookup(80)->features & EM_FEAT_FP8);
  assert_true(em_arch_lookup(70)->features & EM_FEAT_TENSOR_CORES);
  assert_false(em_arch_lookup(61)->features & EM_FEAT_TENSOR_CORES);
  assert_true(em_arch_lookup(61)->features & EM_FEAT_INT8_DP4A);
  assert_false(em_arch_lookup(60)->features & EM_FEAT_INT8_DP4A); /* dp4a is 6.1+ */
  assert_true(em_arch_lookup(53)->features & EM_FEAT_FP16_ARITH);
  assert_false(em_arch_lookup(52)->features & EM_FEAT_FP16_ARITH);
  assert_int_equal(em_arch_lookup(35)->features, 0u);
  assert_true(em_arch_lookup(120)->features & EM_FEAT_FP8);
}

static void test_cc_tegra_and_toolkit_range(void **state) {
  (void)state;
  /* §3.1: Jetson parts. */
  assert_int_equal(em_arch_lookup(53)->tegra, 1);
  assert_int_equal(em_arch_lookup(62)->tegra, 1);
  assert_int_equal(em_arch_lookup(72)->tegra, 1);
  assert_int_equal(em_arch_lookup(87)->tegra, 1);
  assert_int_equal(em_arch_lookup(110)->tegra, 1);
  assert_int_equal(em_arch_lookup(86)->tegra, 0);
  /* §3.1: sm_101 was renamed sm_110 in 13.0, so 12.9 is its last toolkit. */
  assert_int_equal(em_arch_lookup(101)->last_toolkit, 12090);
  assert_int_equal(em_arch_lookup(110)->first_toolkit, 13000);
  assert_int_equal(em_arch_lookup(30)->last_toolkit, 10020);
  assert_int_equal(em_arch_lookup(50)->last_toolkit, 12090);
  assert_int_equal(em_arch_lookup(100)->first_toolkit, 12080);
}

static void test_cc_uncertain_rows(void **state) {
  (void)state;
  /* §3.1 / §1 note 6: sm_88 has no public device. */
  assert_int_equal(em_arch_lookup(88)->conf, 'U');
  /* §1 note 1: the first toolkit of sm_72 is disputed (9.0 vs 9.1). */
  assert_int_equal(em_arch_lookup(72)->conf, 'S');
  assert_int_equal(em_arch_lookup(72)->first_toolkit, 9010);
}

static void test_cc_all_listed(void **state) {
  (void)state;
  static const int ccs[] = {30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75,
                            80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121};
  for (size_t i = 0; i < sizeof ccs / sizeof ccs[0]; i++) {
    const em_arch_row *r = em_arch_lookup(ccs[i]);
    if (!r) fail_msg("CC %d missing from cc.tsv", ccs[i]);
    assert_int_equal(r->cc, ccs[i]);
  }
  assert_int_equal(em_arch_count(), sizeof ccs / sizeof ccs[0]);
}

static void test_cc_names_and_unknown(void **state) {
  (void)state;
  assert_string_equal(em_arch_name(90), "Hopper");
  assert_string_equal(em_arch_name(120), "Blackwell");
  assert_string_equal(em_arch_name(61), "Pascal");
  assert_string_equal(em_arch_name(99), "unknown (CC 9.9)");
  assert_string_equal(em_arch_name(140), "unknown (CC 14.0)");
  assert_null(em_arch_lookup(99));
  assert_null(em_arch_lookup(0));
  assert_null(em_arch_lookup(-35));
  assert_null(em_arch_at(em_arch_count()));
  assert_non_null(em_arch_at(0));
}

/* ---- toolkits (reference §1, §2.1) ---- */

static void test_toolkit_13_0_targets(void **state) {
  (void)state;
  assert_true(em_toolkit_supports_sm(13000, 75, 0));
  assert_true(em_toolkit_supports_sm(13000, 88, 0));
  assert_true(em_toolkit_supports_sm(13000, 100, 'f'));
  assert_true(em_toolkit_supports_sm(13000, 100, 'a'));
  assert_true(em_toolkit_supports_sm(13000, 100, 0));
  assert_true(em_toolkit_supports_sm(13000, 110, 'f'));
  assert_true(em_toolkit_supports_sm(13000, 90, 'a'));
  assert_false(em_toolkit_supports_sm(13000, 90, 'f')); /* there is no 90f */
  assert_false(em_toolkit_supports_sm(13000, 70, 0));   /* Volta removed in 13.0 */
  assert_false(em_toolkit_supports_sm(13000, 101, 0));  /* renamed sm_110 */
  assert_false(em_toolkit_supports_sm(13000, 89, 'a')); /* 'a' needs its own entry */
}

static void test_toolkit_12_x_targets(void **state) {
  (void)state;
  assert_true(em_toolkit_supports_sm(12000, 90, 'a'));
  assert_true(em_toolkit_supports_sm(12000, 90, 0));
  assert_true(em_toolkit_supports_sm(12000, 50, 0));
  assert_false(em_toolkit_supports_sm(12000, 35, 0)); /* Kepler removed in 12.0 */
  assert_false(em_toolkit_supports_sm(12000, 100, 0));
  assert_true(em_toolkit_supports_sm(12080, 120, 'a'));
  assert_false(em_toolkit_supports_sm(12080, 100, 'f')); /* f arrives in 12.9 */
  assert_true(em_toolkit_supports_sm(12090, 121, 'f'));
  assert_true(em_toolkit_supports_sm(12090, 103, 'a'));
  assert_true(em_toolkit_supports_sm(11080, 35, 0));
  assert_true(em_toolkit_supports_sm(11080, 90, 0));
  assert_false(em_toolkit_supports_sm(11080, 90, 'a'));
  assert_true(em_toolkit_supports_sm(11010, 86, 0));
  assert_false(em_toolkit_supports_sm(11000, 86, 0));
  assert_false(em_toolkit_supports_sm(11000, 30, 0)); /* sm_30 removed in 11.0 */
  assert_true(em_toolkit_supports_sm(10020, 30, 0));
  assert_true(em_toolkit_supports_sm(9010, 72, 0));
  assert_false(em_toolkit_supports_sm(9000, 72, 0)); /* §1 note 1: treat as 9.1+ */
  assert_true(em_toolkit_supports_sm(8000, 20, 0));
}

static void test_toolkit_malformed(void **state) {
  (void)state;
  assert_false(em_toolkit_supports_sm(13000, 75, 'x'));
  assert_false(em_toolkit_supports_sm(13000, 0, 0));
  assert_false(em_toolkit_supports_sm(13000, -75, 0));
  assert_false(em_toolkit_supports_sm(12070, 75, 0)); /* no public 12.7 toolkit */
  assert_false(em_toolkit_supports_sm(0, 75, 0));
  assert_false(em_toolkit_supports_sm(13000, 7, 0));    /* prefix of 75 */
  assert_false(em_toolkit_supports_sm(13000, 1000, 0)); /* 100 with a trailing 0 */
  assert_null(em_toolkit_lookup(12070));
  assert_null(em_toolkit_lookup(-1));
  assert_null(em_toolkit_at(em_toolkit_count()));
  assert_int_equal(em_toolkit_ptx_isa(12070), 0);
  assert_null(em_toolkit_min_linux_driver(7050));
}

static void test_toolkit_ptx_isa_and_drivers(void **state) {
  (void)state;
  /* §1 table */
  assert_int_equal(em_toolkit_ptx_isa(13000), 90);
  assert_int_equal(em_toolkit_ptx_isa(12060), 85); /* 12.6 did not bump the ISA */
  assert_int_equal(em_toolkit_ptx_isa(12080), 87);
  assert_int_equal(em_toolkit_ptx_isa(11080), 78);
  assert_int_equal(em_toolkit_ptx_isa(8000), 50);
  /* §2.1 Table 3, GA rows */
  assert_string_equal(em_toolkit_min_linux_driver(12020), "535.54.03");
  assert_string_equal(em_toolkit_min_linux_driver(13000), "580.65.06");
  assert_string_equal(em_toolkit_min_linux_driver(11000), "450.51.05");
  assert_string_equal(em_toolkit_min_linux_driver(8000), "367.48");
  const em_toolkit_row *t = em_toolkit_lookup(13000);
  assert_non_null(t);
  assert_string_equal(t->windows_driver, ""); /* not bundled from 13.0 */
  assert_string_equal(em_toolkit_lookup(11080)->windows_driver, "520.06");
  /* 13.1 targets were not checked (§1): carried as unconfirmed. */
  assert_int_equal(em_toolkit_lookup(13010)->conf, 'U');
  /* 8.0 … 13.1 without the unreleased 12.7: 8.0, 9.0-9.2, 10.0-10.2,
   * 11.0-11.8, 12.0-12.6, 12.8, 12.9, 13.0, 13.1. */
  assert_int_equal(em_toolkit_count(), 1 + 3 + 3 + 9 + 7 + 2 + 2);
}

/* ---- PTX ISA (reference §1 note 3; older rows: PTX ISA release history) ---- */

static void test_ptx_isa_min_driver(void **state) {
  (void)state;
  assert_int_equal(em_ptx_isa_min_driver(90), 13000);
  assert_int_equal(em_ptx_isa_min_driver(91), 13010);
  assert_int_equal(em_ptx_isa_min_driver(86), 12070);
  assert_int_equal(em_ptx_isa_min_driver(85), 12050);
  assert_int_equal(em_ptx_isa_min_driver(78), 11080);
  assert_int_equal(em_ptx_isa_min_driver(65), 10020);
  assert_int_equal(em_ptx_isa_min_driver(50), 8000);
  assert_int_equal(em_ptx_isa_min_driver(43), 7050);
  assert_int_equal(em_ptx_isa_min_driver(40), 6000);
  assert_int_equal(em_ptx_isa_min_driver(32), 5050); /* clang's legacy sm_35 PTX */
  assert_int_equal(em_ptx_isa_min_driver(30), 4010);
  assert_int_equal(em_ptx_isa_min_driver(99), 0);
  assert_int_equal(em_ptx_isa_min_driver(0), 0);
  assert_int_equal(em_ptx_isa_min_driver(-32), 0);
}

/* ---- minor-version compatibility (reference §2.2, §0) ---- */

static void test_cubin_min_driver(void **state) {
  (void)state;
  assert_int_equal(em_cubin_min_driver(12080), 12000);
  assert_int_equal(em_cubin_min_driver(13000), 13000);
  assert_int_equal(em_cubin_min_driver(13010), 13000);
  assert_int_equal(em_cubin_min_driver(11080), 11000);
  assert_int_equal(em_cubin_min_driver(11000), 11000);
  assert_int_equal(em_cubin_min_driver(10020), 10020); /* no MVC before 11 */
  assert_int_equal(em_cubin_min_driver(9020), 9020);
  assert_int_equal(em_cubin_min_driver(0), 0);
  assert_int_equal(em_cubin_min_driver(-1), 0);
}

static void test_mvc_floors(void **state) {
  (void)state;
  assert_string_equal(em_mvc_floor_linux(11), "450.80.02");
  assert_string_equal(em_mvc_floor_linux(12), "525.60.13");
  assert_string_equal(em_mvc_floor_linux(13), "580.65.06");
  assert_string_equal(em_mvc_floor_windows(11), "452.39");
  assert_string_equal(em_mvc_floor_windows(12), "527.41");
  assert_null(em_mvc_floor_linux(10));
  assert_null(em_mvc_floor_windows(10));
  assert_null(em_mvc_floor_linux(0));
  assert_null(em_mvc_floor_linux(12000)); /* a version, not a major */
}

/* ---- driver branches (reference §2.3) ---- */

static void test_driver_branch_exact(void **state) {
  (void)state;
  int est = -1;
  assert_int_equal(em_driver_cuda_version("535.104.05", &est), 12020);
  assert_int_equal(est, 0);
  est = -1;
  assert_int_equal(em_driver_cuda_version("470.82.01", &est), 11040);
  assert_int_equal(est, 0);
  assert_int_equal(em_driver_cuda_version("580.65.06", &est), 13000);
  assert_int_equal(em_driver_cuda_version("565.57.01", &est), 12070);
  assert_int_equal(em_driver_cuda_version("390.46", &est), 9010);
  assert_int_equal(em_driver_cuda_version("535", &est), 12020);
  assert_int_equal(est, 0);
  assert_int_equal(em_driver_cuda_version("575.51.03\n", &est), 12090);
  assert_int_equal(em_driver_cuda_version("470.82.01", NULL), 11040);
}

static void test_driver_branch_estimated(void **state) {
  (void)state;
  int est = 0;
  /* R430 is not listed: the highest listed branch below it is R418 (10.1). */
  assert_int_equal(em_driver_cuda_version("430.64", &est), 10010);
  assert_int_equal(est, 1);
  est = 0;
  /* Newer than every row: R590 reports 13.1. */
  assert_int_equal(em_driver_cuda_version("600.10", &est), 13010);
  assert_int_equal(est, 1);
  est = 0;
  assert_int_equal(em_driver_cuda_version("540.1", &est), 12020);
  assert_int_equal(est, 1);
  assert_int_equal(em_driver_cuda_version("540.1", NULL), 12020);
}

static void test_driver_branch_malformed(void **state) {
  (void)state;
  int est = 7;
  assert_int_equal(em_driver_cuda_version("340.29", &est), 0); /* older than R367 */
  assert_int_equal(est, 0);
  est = 7;
  assert_int_equal(em_driver_cuda_version(NULL, &est), 0);
  assert_int_equal(est, 0);
  assert_int_equal(em_driver_cuda_version("", &est), 0);
  assert_int_equal(em_driver_cuda_version("abc", &est), 0);
  assert_int_equal(em_driver_cuda_version("R535", &est), 0);
  assert_int_equal(em_driver_cuda_version("535..1", &est), 0);
  assert_int_equal(em_driver_cuda_version("535.", &est), 0);
  assert_int_equal(em_driver_cuda_version("535.104.05x", &est), 0);
  assert_int_equal(em_driver_cuda_version("-535", &est), 0);
  assert_int_equal(em_driver_cuda_version("99999999999999", &est), 0);
  assert_null(em_driver_branch_at(em_driver_branch_count()));
}

/* ---- NVRTC (reference §7) ---- */

static void test_nvrtc_sonames(void **state) {
  (void)state;
  static const char *const want[] = {
      "libnvrtc.so.13",   "libnvrtc.so.12",   "libnvrtc.so.11.2", "libnvrtc.so.11.1",
      "libnvrtc.so.11.0", "libnvrtc.so.10.2", "libnvrtc.so.10.1", "libnvrtc.so.10.0",
      "libnvrtc.so.9.2",  "libnvrtc.so.9.1",  "libnvrtc.so.9.0"};
  assert_int_equal(em_nvrtc_count(), sizeof want / sizeof want[0]);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    assert_string_equal(em_nvrtc_at(i)->soname, want[i]);
  assert_null(em_nvrtc_at(em_nvrtc_count()));

  const em_nvrtc_row *r112 = em_nvrtc_at(2);
  assert_int_equal(r112->cuda_low, 11020); /* 11.3-11.8 ship .so.11.2 too */
  assert_int_equal(r112->cuda_high, 11080);
  assert_int_equal(r112->has_get_cubin, 1);
  assert_int_equal(r112->has_supported_archs, 1);
  assert_int_equal(r112->conf, 'S'); /* 11.2 (CuPy) vs 11.3 (cuda-python) */
  assert_int_equal(em_nvrtc_at(3)->has_get_cubin, 1); /* 11.1 added GetCUBIN */
  assert_int_equal(em_nvrtc_at(3)->has_supported_archs, 0);
  assert_int_equal(em_nvrtc_at(4)->has_get_cubin, 0); /* 11.0 */
  assert_int_equal(em_nvrtc_at(5)->cuda_low, 10020);
  assert_int_equal(em_nvrtc_at(5)->cuda_high, 10020);
  assert_true(em_nvrtc_at(0)->cuda_high >= 13010); /* every 13.x minor */
  assert_true(em_nvrtc_at(0)->cuda_high < 14000);
}

/* ---- cuDNN / cuBLAS (reference §9) ---- */

static const em_libreq_row *find_libreq(const char *lib, const char *version, int cuda) {
  for (size_t i = 0; i < em_libreq_count(); i++) {
    const em_libreq_row *r = em_libreq_at(i);
    if (!strcmp(r->library, lib) && !strcmp(r->version, version) && r->built_for_cuda == cuda)
      return r;
  }
  return NULL;
}

static void test_libreq(void **state) {
  (void)state;
  const em_libreq_row *r = find_libreq("cudnn", "9.17.0", 13000);
  assert_non_null(r);
  assert_int_equal(r->lowest_cc, 75);
  assert_string_equal(r->linux_driver, "580.65.06");
  assert_int_equal(r->conf, 'C');
  r = find_libreq("cudnn", "8.2.2", 10020);
  assert_non_null(r);
  assert_int_equal(r->lowest_cc, 30);
  r = find_libreq("cublas", "13", 13000);
  assert_non_null(r);
  assert_int_equal(r->lowest_cc, 75);
  r = find_libreq("cublas", "12", 12000);
  assert_non_null(r);
  assert_int_equal(r->lowest_cc, 50);
  assert_int_equal(r->conf, 'S'); /* inferred from the toolkit, §9.2 */
  assert_null(em_libreq_at(em_libreq_count()));
}

/* ---- PyTorch (reference §8.2) ---- */

static void test_torch(void **state) {
  (void)state;
  const em_torch_row *r = em_torch_lookup("2.9", "cu130");
  assert_non_null(r);
  assert_string_equal(r->arch_list, "7.5;8.0;8.6;9.0;10.0;12.0+PTX");
  assert_int_equal(r->cuda, 13000);
  assert_int_equal(r->conf, 'C');
  r = em_torch_lookup("1.12.1", "cu102");
  assert_non_null(r);
  assert_string_equal(r->arch_list, "3.7;5.0;6.0;7.0");
  assert_string_equal(r->release, "1.12");
  r = em_torch_lookup("2.3.1", "cu118");
  assert_non_null(r);
  assert_string_equal(r->arch_list, "5.0;6.0;7.0;7.5;8.0;8.6;3.7;9.0");
  r = em_torch_lookup("2.7.0", "cu128");
  assert_non_null(r);
  assert_int_equal(r->conf, 'U'); /* +PTX on the 2.7 stable build is unknown */
  assert_null(em_torch_lookup("2.10", "cu128")); /* must not match the 2.1 rows */
  assert_null(em_torch_lookup("2.9", "cu999"));
  assert_null(em_torch_lookup("2", "cu130"));
  assert_null(em_torch_lookup(NULL, "cu130"));
  assert_null(em_torch_lookup("2.9", NULL));
  assert_null(em_torch_at(em_torch_count()));
}

/* ---- every row carries a confidence and a source ---- */

static int conf_ok(char c) { return c == 'C' || c == 'S' || c == 'U'; }

static void test_every_row_has_conf_and_source(void **state) {
  (void)state;
  for (size_t i = 0; i < em_arch_count(); i++)
    assert_true(conf_ok(em_arch_at(i)->conf) && em_arch_at(i)->source[0]);
  for (size_t i = 0; i < em_toolkit_count(); i++)
    assert_true(conf_ok(em_toolkit_at(i)->conf) && em_toolkit_at(i)->source[0]);
  for (size_t i = 0; i < em_driver_branch_count(); i++)
    assert_true(conf_ok(em_driver_branch_at(i)->conf) && em_driver_branch_at(i)->source[0]);
  for (size_t i = 0; i < em_nvrtc_count(); i++)
    assert_true(conf_ok(em_nvrtc_at(i)->conf) && em_nvrtc_at(i)->source[0]);
  for (size_t i = 0; i < em_libreq_count(); i++)
    assert_true(conf_ok(em_libreq_at(i)->conf) && em_libreq_at(i)->source[0]);
  for (size_t i = 0; i < em_torch_count(); i++)
    assert_true(conf_ok(em_torch_at(i)->conf) && em_torch_at(i)->source[0]);
}

/* ---- the generator ---- */

typedef struct gen_env {
  char dir[256];  /* temp dir holding data/, out.c, err.txt */
  char src[1024]; /* source tree root (EMBER_SRC_DIR or ".") */
} gen_env;

static int gen_setup(void **state) {
  gen_env *e = calloc(1, sizeof *e);
  if (!e) return -1;
  snprintf(e->dir, sizeof e->dir, "/tmp/ember_test_arch_table_XXXXXX");
  if (!mkdtemp(e->dir)) {
    free(e);
    return -1;
  }
  const char *src = getenv("EMBER_SRC_DIR");
  snprintf(e->src, sizeof e->src, "%s", src && *src ? src : ".");
  *state = e;
  return 0;
}

static int gen_teardown(void **state) {
  gen_env *e = *state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
  int rc = system(cmd);
  free(e);
  return rc == 0 ? 0 : -1;
}

/* Fresh copy of the real data files into <dir>/data. */
static void copy_data(const gen_env *e) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/data' && cp -R '%s/arch_table/data' '%s/data'", e->dir,
           e->src, e->dir);
  assert_int_equal(system(cmd), 0);
}

/* Runs gen.sh over <dir>/data; returns its exit status, stderr in <dir>/err.txt. */
static int run_gen(const gen_env *e) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "sh '%s/arch_table/gen.sh' '%s/out.c' '%s/data' 2> '%s/err.txt'",
           e->src, e->dir, e->dir, e->dir);
  int st = system(cmd);
  assert_true(st != -1 && WIFEXITED(st));
  return WEXITSTATUS(st);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 20);
  if (buf) {
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
  }
  fclose(f);
  return buf;
}

static int count_lines(const char *path) {
  char *s = read_file(path);
  assert_non_null(s);
  int n = 0;
  for (const char *p = s; *p; p++)
    if (*p == '\n') n++;
  free(s);
  return n;
}

/* Appends `row` to data/<table>.tsv, runs the generator and checks that it
 * fails with a message naming the file and the new row's line. */
static void expect_rejected(const gen_env *e, const char *table, const char *row, const char *why) {
  char path[600];
  copy_data(e);
  snprintf(path, sizeof path, "%s/data/%s.tsv", e->dir, table);
  int line = count_lines(path) + 1;
  FILE *f = fopen(path, "ab");
  assert_non_null(f);
  fputs(row, f);
  fclose(f);

  char outpath[600];
  snprintf(outpath, sizeof outpath, "%s/out.c", e->dir);
  remove(outpath);
  int rc = run_gen(e);
  if (rc == 0) fail_msg("gen.sh accepted a row with %s", why);
  assert_int_equal(access(outpath, F_OK), -1); /* nothing written on failure */

  char errpath[600], where[128];
  snprintf(errpath, sizeof errpath, "%s/err.txt", e->dir);
  char *err = read_file(errpath);
  assert_non_null(err);
  snprintf(where, sizeof where, "%s.tsv:%d:", table, line);
  if (!strstr(err, where)) fail_msg("message for %s does not name %s: %s", why, where, err);
  free(err);
}

static void test_gen_accepts_real_data(void **state) {
  gen_env *e = *state;
  copy_data(e);
  assert_int_equal(run_gen(e), 0);
  char path[600];
  snprintf(path, sizeof path, "%s/out.c", e->dir);
  char *c = read_file(path);
  assert_non_null(c);
  assert_non_null(strstr(c, "em_at_arch_rows[]"));
  assert_non_null(strstr(c, "em_at_torch_count"));
  free(c);
}

static void test_gen_rejects_malformed(void **state) {
  gen_env *e = *state;
  expect_rejected(e, "cc", "9.9\tTest\t-\t-\t0\t-\t13.0\t-\tC\n", "a missing column");
  expect_rejected(e, "cc", "9.9\tTest\t-\t-\t0\t-\t13.0\t-\tC\tLOCAL\textra\n", "an extra column");
  expect_rejected(e, "cc", "9.9\tTest\t-\t-\t0\t-\t13.0\t-\tX\tLOCAL\n", "conf X");
  expect_rejected(e, "cc", "9.9\tTest\t-\t-\t0\t-\t13.0\t-\tC\t-\n", "no source");
  expect_rejected(e, "cc", "9.9\tTest\t-\t-\t0\t-\t13.0\t-\tC\t\n", "an empty source");
  expect_rejected(e, "cc", "9.9\tTest\t-\t-\t0\t-\t13.0\t-\tC\tNO-SUCH-KEY\n", "an unknown source key");
  expect_rejected(e, "cc", "9.0\tTest\t-\t-\t0\t-\t13.0\t-\tC\tLOCAL\n", "a duplicate CC");
  expect_rejected(e, "toolkit", "14.0\t9.9\t75,90x\t600.1\t-\tU\tLOCAL\n", "a bad target");
  expect_rejected(e, "ptx_isa", "9.9\tthirteen\tU\tLOCAL\n", "a bad version");
  expect_rejected(e, "torch", "3.0\tcu140\t14.0\t7.5;8.0+ptx\tU\tLOCAL\n", "a bad arch list");
}

static void test_gen_escapes_strings(void **state) {
  gen_env *e = *state;
  copy_data(e);
  char path[600];
  snprintf(path, sizeof path, "%s/data/cc.tsv", e->dir);
  FILE *f = fopen(path, "ab");
  assert_non_null(f);
  /* A quote, a backslash and a trigraph ("??=" would become '#'). */
  fputs("9.9\tQuo\"te\tBack\\slash\tWhat?\?=\t0\t-\t13.0\t-\tU\tLOCAL\n", f);
  fclose(f);
  assert_int_equal(run_gen(e), 0);
  snprintf(path, sizeof path, "%s/out.c", e->dir);
  char *c = read_file(path);
  assert_non_null(c);
  assert_non_null(strstr(c, "\"Quo\\\"te\""));
  assert_non_null(strstr(c, "\"Back\\\\slash\""));
  assert_non_null(strstr(c, "\"What\\?\\?=\""));
  free(c);
}

/* ---- CUDA error codes (cuda_errors.tsv) ---- */

/* Values read by hand in the CUDA 13.0 cuda.h / driver_types.h, the runtime
 * messages of reference section 6 and the NVML numbers of gpucheck-anchors 3.1. */
static void test_cuda_error_lookups(void **state) {
  (void)state;
  const em_cuda_error_row *r = em_cuda_error_lookup("driver", 209);
  assert_non_null(r);
  assert_string_equal(r->name, "CUDA_ERROR_NO_BINARY_FOR_GPU");
  r = em_cuda_error_lookup("runtime", 209);
  assert_non_null(r);
  assert_string_equal(r->name, "cudaErrorNoKernelImageForDevice");
  assert_string_equal(r->message, "no kernel image is available for execution on the device");
  assert_null(em_cuda_error_lookup("driver", 35)); /* cuda.h: 34 STUB_LIBRARY, then 36 */
  r = em_cuda_error_lookup("runtime", 35);
  assert_non_null(r);
  assert_string_equal(r->name, "cudaErrorInsufficientDriver");
  assert_string_equal(r->message, "CUDA driver version is insufficient for CUDA runtime version");
  assert_string_equal(em_cuda_error_lookup("runtime", 222)->message,
                      "the provided PTX was compiled with an unsupported toolchain.");
  assert_string_equal(em_cuda_error_lookup("runtime", 804)->message,
                      "forward compatibility was attempted on non supported HW");
  assert_string_equal(em_cuda_error_lookup("driver", 803)->name, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
  assert_string_equal(em_cuda_error_lookup("driver", 0)->name, "CUDA_SUCCESS");
  assert_string_equal(em_cuda_error_lookup("runtime", 0)->name, "cudaSuccess");
  assert_string_equal(em_cuda_error_lookup("runtime", 10000)->name, "cudaErrorApiFailureBase");
  assert_string_equal(em_cuda_error_lookup("nvml", 9)->name, "NVML_ERROR_DRIVER_NOT_LOADED");
  assert_string_equal(em_cuda_error_lookup("nvml", 12)->name, "NVML_ERROR_LIBRARY_NOT_FOUND");
  assert_string_equal(em_cuda_error_lookup("nvml", 18)->name, "NVML_ERROR_LIB_RM_VERSION_MISMATCH");
  assert_string_equal(em_cuda_error_lookup("nvml", 999)->name, "NVML_ERROR_UNKNOWN");
  /* NVML numbers come from secondary copies of nvml.h: carried as S. */
  assert_int_equal(em_cuda_error_lookup("nvml", 18)->conf, 'S');
  assert_null(em_cuda_error_lookup("nvml", 4)); /* not carried */
  assert_null(em_cuda_error_lookup("runtime", 42));
  assert_null(em_cuda_error_lookup("cuda", 209));
  assert_null(em_cuda_error_lookup(NULL, 209));

  r = em_cuda_error_by_name("cudaerrornokernelimagefordevice");
  assert_non_null(r);
  assert_string_equal(r->api, "runtime");
  assert_int_equal(r->number, 209);
  r = em_cuda_error_by_name("cuda_error_compat_not_supported_on_device");
  assert_non_null(r);
  assert_int_equal(r->number, 804);
  assert_null(em_cuda_error_by_name("CUDA_ERROR_NO_BINARY"));  /* whole names only */
  assert_null(em_cuda_error_by_name(""));
  assert_null(em_cuda_error_by_name(NULL));

  /* "=driver" rows carry the driver row's advice. */
  assert_string_equal(em_cuda_error_lookup("runtime", 804)->causes, em_cuda_error_lookup("driver", 804)->causes);
  assert_string_equal(em_cuda_error_lookup("runtime", 804)->check, em_cuda_error_lookup("driver", 804)->check);
  assert_string_equal(em_cuda_error_lookup("driver", 804)->pains, "P5,P10");
  /* Codes without advice have empty strings, not "-" or NULL. */
  assert_string_equal(em_cuda_error_lookup("driver", 702)->causes, "");
  assert_string_equal(em_cuda_error_lookup("driver", 702)->message, "");
}

static void test_cuda_error_rows_well_formed(void **state) {
  (void)state;
  size_t n = em_cuda_error_count();
  assert_true(n > 200);
  assert_null(em_cuda_error_at(n));
  for (size_t i = 0; i < n; i++) {
    const em_cuda_error_row *r = em_cuda_error_at(i);
    assert_true(conf_ok(r->conf) && r->source[0]);
    assert_true(r->description[0] && r->name[0]);
    assert_true(!strcmp(r->api, "driver") || !strcmp(r->api, "runtime") || !strcmp(r->api, "nvml"));
    assert_true(!r->causes[0] == !r->check[0]);
    assert_ptr_equal(em_cuda_error_lookup(r->api, r->number), r);
    assert_ptr_equal(em_cuda_error_by_name(r->name), r);
  }
}

/* The header's (NAME, number) pairs of one enum, by a plain line scan. */
static int header_enum(const char *path, const char *start, const char *end, const char *prefix, char names[][64],
                       int *numbers, int cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512];
  int inside = 0, n = 0;
  while (fgets(line, sizeof line, f)) {
    if (!inside) {
      inside = strstr(line, start) != NULL;
      continue;
    }
    if (strstr(line, end)) break;
    char name[64];
    int value;
    /* driver_types.h writes its last value as "    , cudaErrorApiFailureBase = 10000". */
    if (sscanf(line + strspn(line, " \t,"), "%63[A-Za-z0-9_] = %d", name, &value) == 2 && !strncmp(name, prefix, strlen(prefix)) && n < cap) {
      snprintf(names[n], 64, "%s", name);
      numbers[n++] = value;
    }
  }
  fclose(f);
  return n;
}

static void expect_enum_in_table(const char *api, const char *path, const char *start, const char *end,
                                 const char *prefix) {
  static char names[512][64];
  static int numbers[512];
  int n = header_enum(path, start, end, prefix, names, numbers, 512);
  if (n < 0) skip(); /* no CUDA toolkit headers on this machine */
  assert_true(n > 50);
  size_t rows = 0;
  for (size_t i = 0; i < em_cuda_error_count(); i++) rows += !strcmp(em_cuda_error_at(i)->api, api);
  if (rows != (size_t)n) fail_msg("%s: the header has %d values, the table %zu rows", path, n, rows);
  for (int i = 0; i < n; i++) {
    const em_cuda_error_row *r = em_cuda_error_lookup(api, numbers[i]);
    if (!r || strcmp(r->name, names[i])) fail_msg("%s = %d: table has %s", names[i], numbers[i], r ? r->name : "nothing");
  }
}

/* Every CUresult and cudaError_t of the installed headers is in the table
 * (and nothing else is): a new toolkit's codes show up here. */
static void test_cuda_error_header_complete(void **state) {
  (void)state;
  expect_enum_in_table("driver", "/usr/local/cuda/include/cuda.h", "typedef enum cudaError_enum", "} CUresult;", "CUDA_");
  expect_enum_in_table("runtime", "/usr/local/cuda/include/driver_types.h", "enum __device_builtin__ cudaError", "};",
                       "cuda");
}

static void test_gen_rejects_cuda_errors(void **state) {
  gen_env *e = *state;
  const char *t = "cuda_errors";
  expect_rejected(e, t, "cuda\t5000\tCUDA_ERROR_X\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "an unknown api");
  expect_rejected(e, t, "driver\t5000\tcudaErrorX\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "a runtime name on a driver row");
  expect_rejected(e, t, "runtime\t5000\tCUDA_ERROR_X\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "a driver name on a runtime row");
  expect_rejected(e, t, "nvml\t5000\tNVML_X\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "a bad nvml name");
  expect_rejected(e, t, "driver\t5000\tCUDA_ERROR_X-Y\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "a name that is no identifier");
  expect_rejected(e, t, "runtime\t5000\tcudaErrorNOKERNELIMAGEFORDEVICE\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n",
                  "a name repeated in another case");
  expect_rejected(e, t, "driver\t209\tCUDA_ERROR_X\td\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "a repeated api and number");
  expect_rejected(e, t, "driver\t5000\tCUDA_ERROR_X\td\t-\tcause\t-\t-\tC\tCUDA13-HDR\n", "causes without check");
  expect_rejected(e, t, "driver\t5000\tCUDA_ERROR_X\td\t-\t=driver\t=driver\t-\tC\tCUDA13-HDR\n", "=driver on a driver row");
  expect_rejected(e, t, "runtime\t5000\tcudaErrorX\td\t-\t=driver\t=driver\t-\tC\tCUDA13-HDR\n",
                  "=driver without a driver row");
  expect_rejected(e, t, "runtime\t5000\tcudaErrorX\td\t-\t-\t-\tP11\tC\tCUDA13-HDR\n", "a pain beyond P10");
  expect_rejected(e, t, "runtime\t5000\tcudaErrorX\t-\t-\t-\t-\t-\tC\tCUDA13-HDR\n", "no description");
}


int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cc_kepler_k80),
      cmocka_unit_test(test_cc_turing_t4_features),
      cmocka_unit_test(test_cc_feature_thresholds),
      cmocka_unit_test(test_cc_tegra_and_toolkit_range),
      cmocka_unit_test(test_cc_uncertain_rows),
      cmocka_unit_test(test_cc_all_listed),
      cmocka_unit_test(test_cc_names_and_unknown),
      cmocka_unit_test(test_toolkit_13_0_targets),
      cmocka_unit_test(test_toolkit_12_x_targets),
      cmocka_unit_test(test_toolkit_malformed),
      cmocka_unit_test(test_toolkit_ptx_isa_and_drivers),
      cmocka_unit_test(test_ptx_isa_min_driver),
      cmocka_unit_test(test_cubin_min_driver),
      cmocka_unit_test(test_mvc_floors),
      cmocka_unit_test(test_driver_branch_exact),
      cmocka_unit_test(test_driver_branch_estimated),
      cmocka_unit_test(test_driver_branch_malformed),
      cmocka_unit_test(test_nvrtc_sonames),
      cmocka_unit_test(test_libreq),
      cmocka_unit_test(test_torch),
      cmocka_unit_test(test_every_row_has_conf_and_source),
      cmocka_unit_test_setup_teardown(test_gen_accepts_real_data, gen_setup, gen_teardown),
      cmocka_unit_test_setup_teardown(test_gen_rejects_malformed, gen_setup, gen_teardown),
      cmocka_unit_test_setup_teardown(test_gen_escapes_strings, gen_setup, gen_teardown),
      cmocka_unit_test(test_cuda_error_lookups),
      cmocka_unit_test(test_cuda_error_rows_well_formed),
      cmocka_unit_test(test_cuda_error_header_complete),
      cmocka_unit_test_setup_teardown(test_gen_rejects_cuda_errors, gen_setup, gen_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
