/* Tests of `gpucheck whatif` (tools/gpucheck/whatif.c): the classic cases of
 * issue 3 and each compatibility rule, called directly (gc_cmd_whatif) and
 * through the binary ($GPUCHECK_CLI, else $EMBER_BUILD_DIR/bin/gpucheck) for
 * the exit codes and the JSON.
 *
 * Every expected verdict and remedy is derived by hand from
 * shared/reference/cuda-compat.md (section in the comment of each test), not
 * from running the tool. Numbers used below, with their section:
 *   2.3  driver branch -> CUDA: R418 10.1, R450 11.0, R470 11.4, R535 12.2,
 *        R550 12.4, R570 12.8, R580 13.0
 *   2.1  minimum Linux drivers: 10.2 440.33, 12.1 530.30.02, 12.4 550.54.14,
 *        12.8 570.26, 13.0 580.65.06
 *   2.2  MVC floors: 11.x 450.80.02, 12.x 525.60.13, 13.x 580.65.06; no MVC
 *        before 11; newer API -> 36, newer PTX -> 222, major mismatch -> 35
 *   1    CUDA 12.0 dropped sm_35/sm_37; 12.4 targets end at 90a; PTX ISA of
 *        12.4 is 8.4, of 13.0 is 9.0; note 3: ISA 8.4 needs 12.4, 9.0 needs 13.0
 *   3.1  K80 = CC 3.7 (last toolkit 11.8), A100 = 8.0 (first 11.0),
 *        RTX 5090 = 12.0 (first 12.8), H100 = 9.0, RTX 40xx = 8.9
 *   8.2  torch 1.12 cu102: 3.7;5.0;6.0;7.0, cu113/cu116: ...;8.0;8.6;
 *        2.9 cu126 ...;9.0, cu128 ...;12.0, cu130 7.5;...;12.0+PTX
 * and R470 as the last Kepler branch is the secondary fact whatif.c carries.
 * The image-requirement cases follow libnvidia-container's grammar
 * (gpucheck-anchors.md 1.4). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gpucheck.h"
#include "images.h"

static char tmp_dir[PATH_MAX];
static char cli[PATH_MAX];

static int group_setup(void **state) {
  (void)state;
  const char *t = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/gc-whatif-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmp_dir)) {
    fprintf(stderr, "test_gc_whatif: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  const char *c = getenv("GPUCHECK_CLI"), *b = getenv("EMBER_BUILD_DIR");
  if (c && *c) snprintf(cli, sizeof cli, "%s", c);
  else if (b && *b) snprintf(cli, sizeof cli, "%s/bin/gpucheck", b);
  if (cli[0] && access(cli, X_OK) != 0) {
    fprintf(stderr, "test_gc_whatif: %s not executable: CLI tests skipped\n", cli);
    cli[0] = 0;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) fprintf(stderr, "test_gc_whatif: could not remove %s\n", tmp_dir);
  return 0;
}

/* The report of the last run, freed by the teardown (also after a failed assertion). */
static gc_report *last;

static int free_last(void **state) {
  (void)state;
  gc_report_free(last);
  last = NULL;
  return 0;
}

/* Runs `whatif ARGS... NULL` in-process; asserts its return code. */
static gc_report *whatif(int expect_rc, ...) {
  char *argv[40] = {"whatif"};
  int argc = 1;
  va_list ap;
  va_start(ap, expect_rc);
  for (const char *a; (a = va_arg(ap, const char *)) && argc < 39;) argv[argc++] = (char *)a;
  va_end(ap);
  gc_opts o = {0};
  gc_report_free(last);
  last = NULL;
  int rc = gc_cmd_whatif(argc, argv, &o, &last);
  if (rc != expect_rc) fail_msg("whatif %s ...: returned %d, expected %d", argc > 1 ? argv[1] : "", rc, expect_rc);
  if (rc == 0) assert_non_null(last);
  else assert_null(last);
  return last;
}

static const gc_check *find(const gc_report *r, const char *id) {
  for (size_t i = 0; i < r->n; i++)
    for (size_t j = 0; j < r->sections[i].n; j++)
      if (!strcmp(r->sections[i].checks[j].id, id)) return &r->sections[i].checks[j];
  return NULL;
}

/* The check `id` exists with verdict v, and its fix (or, for "detail:x", its
 * detail; "title:x", its title) contains every string given, NULL-terminated. */
static const gc_check *expect(const gc_report *r, const char *id, gc_verdict v, ...) {
  const gc_check *c = find(r, id);
  if (!c) fail_msg("no check '%s'", id);
  if (c->verdict != v)
    fail_msg("check '%s' is %s, expected %s: %s", id, gc_verdict_name(c->verdict), gc_verdict_name(v), c->title);
  va_list ap;
  va_start(ap, v);
  for (const char *want; (want = va_arg(ap, const char *));) {
    const char *text = c->fix;
    if (!strncmp(want, "detail:", 7)) text = c->detail, want += 7;
    else if (!strncmp(want, "title:", 6)) text = c->title, want += 6;
    if (!text || !strstr(text, want)) fail_msg("check '%s': '%s' not in '%s'", id, want, text ? text : "(none)");
  }
  va_end(ap);
  return c;
}

/* ------------------------------------------------------- the classic cases --- */

/* A PyTorch wheel without the GPU's SM and no PTX. 8.2: torch 1.12 cu102 is
 * 3.7;5.0;6.0;7.0 -- nothing of major 8, no +PTX -- so A100 (8.0, 3.1) is
 * not covered (3.2: same major, minor >=); cu113 and cu116 list 8.0. A source
 * build needs CUDA >= 11.0, the first toolkit for 8.0 (3.1). */
static void test_torch_wheel_without_sm(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--torch", "1.12.1+cu102", "--gpu", "A100", NULL);
  expect(r, "gpu0.torch", GC_FAIL, "cu113", "cu116", "TORCH_CUDA_ARCH_LIST=\"8.0\"", "CUDA >= 11.0", "detail:3.7;5.0;6.0;7.0",
         "title:209", NULL);
  expect(r, "torch.wheel", GC_INFO, NULL);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  /* The same wheel on a V100 (7.0, in the list): SASS. */
  r = whatif(0, "--torch", "1.12.1+cu102", "--gpu", "V100", NULL);
  expect(r, "gpu0.torch", GC_OK, NULL);
}

/* A runtime newer than the driver within MVC. 2.3: 535.104.05 reports 12.2;
 * 2.2: 12.4 > 12.2, same major, 535.104.05 >= 525.60.13 -> runs with the 36
 * and 222 limits; full support needs the 12.4 driver 550.54.14 (2.1). */
static void test_runtime_newer_within_mvc(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--cuda-runtime", "12.4", "--driver", "535.104.05", NULL);
  expect(r, "compat.minor", GC_WARN, "550.54.14", "SASS", "detail:(36)", "detail:(222)", "detail:525.60.13", NULL);
  assert_null(find(r, "compat.backward"));
  assert_null(find(r, "compat.major"));
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_WARN);
}

/* Writes a PTX file declaring `isa` for compute_90 (a .ptx is one of the
 * inputs images.h reads). */
static void write_ptx(const char *path, const char *isa) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, ".version %s\n.target sm_90\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n", isa);
  fclose(f);
}

/* --binary needs images.c; skip while it cannot read the file. */
static void need_images(const char *path) {
  gc_image_set s;
  char err[256];
  memset(&s, 0, sizeof s);
  int rc = gc_images_read(path, &s, err, sizeof err);
  gc_images_free(&s);
  if (rc < 0) {
    fprintf(stderr, "test_gc_whatif: gc_images_read(%s): %s: skipped\n", path, err);
    skip();
  }
}

/* PTX newer than the driver. 1 note 3: PTX ISA 9.0 needs CUDA 13.0; 2.3:
 * R570 reports 12.8 -> 222; R580 reports 13.0 -> JIT (3.2: compute_90 PTX
 * runs on 12.0). Fix: R580+. */
static void test_ptx_newer_than_driver(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/isa90.ptx", tmp_dir);
  write_ptx(path, "9.0");
  need_images(path);
  gc_report *r = whatif(0, "--binary", path, "--gpu", "12.0", "--driver", "570", NULL);
  const gc_check *c = expect(r, "gpu0.binary0", GC_FAIL, "R580", "580.65.06", NULL);
  assert_string_equal(json_string_value(json_object_get(c->data, "run")), "ptx-too-new");
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  r = whatif(0, "--binary", path, "--gpu", "12.0", "--driver", "580.65.06", NULL);
  c = expect(r, "gpu0.binary0", GC_WARN, "sm_120", NULL);
  assert_string_equal(json_string_value(json_object_get(c->data, "run")), "ptx-jit");
  /* An ISA 8.7 PTX (CUDA 12.8) is JIT-compiled by R570. */
  write_ptx(path, "8.7");
  r = whatif(0, "--binary", path, "--gpu", "12.0", "--driver", "570", NULL);
  expect(r, "gpu0.binary0", GC_WARN, NULL);
}

/* The same with a binary nvcc builds now: only compute_90 PTX. Its ISA is
 * the one nvcc's release emits (1: 12.0 8.0 ... 12.9 8.8, 13.0 9.0, 13.1
 * 9.1; 12.6 kept 8.5), JIT-able by a driver of CUDA >= that release (note 3);
 * R570 reports 12.8 (2.3). */
static void test_ptx_newer_than_driver_nvcc(void **state) {
  (void)state;
  const char *nvcc = getenv("NVCC");
  if (!nvcc || !*nvcc) nvcc = access("/usr/local/cuda/bin/nvcc", X_OK) == 0 ? "/usr/local/cuda/bin/nvcc" : "nvcc";
  char cmd[PATH_MAX * 3], src[PATH_MAX + 16], bin[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", nvcc);
  FILE *p = popen(cmd, "r");
  int major = 0, minor = 0;
  char line[256];
  while (p && fgets(line, sizeof line, p)) {
    const char *rel = strstr(line, "release ");
    if (rel) sscanf(rel, "release %d.%d", &major, &minor);
  }
  if (p) pclose(p);
  if (!major) skip(); /* no nvcc */
  /* Release -> the driver CUDA its PTX needs (1, note 3: ISA N.M of release X.Y needs X.Y; 12.6 emits 8.5 = 12.5). */
  int need = major * 1000 + minor * 10;
  if (need == 12060) need = 12050;
  snprintf(src, sizeof src, "%s/k.cu", tmp_dir);
  snprintf(bin, sizeof bin, "%s/k90.fatbin", tmp_dir);
  FILE *f = fopen(src, "w");
  assert_non_null(f);
  fprintf(f, "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n");
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' -fatbin -gencode arch=compute_90,code=compute_90 '%s' -o '%s' 2>&1", nvcc, src, bin);
  if (system(cmd) != 0) skip(); /* this nvcc cannot target compute_90 */
  need_images(bin);
  gc_report *r = whatif(0, "--binary", bin, "--gpu", "12.0", "--driver", "570", NULL);
  const gc_check *c = find(r, "gpu0.binary0");
  assert_non_null(c);
  if (need > 12080) {
    assert_int_equal(c->verdict, GC_FAIL);
    assert_string_equal(json_string_value(json_object_get(c->data, "run")), "ptx-too-new");
    assert_non_null(strstr(c->fix, "R580"));
  } else {
    assert_int_equal(c->verdict, GC_WARN);
    assert_string_equal(json_string_value(json_object_get(c->data, "run")), "ptx-jit");
  }
}

/* Kepler with a CUDA 12 runtime. 1: CUDA 12.0 removed sm_35/sm_37 and its
 * lowest target is sm_50 > 3.7, and PTX never runs on a lower CC (3.2): fail.
 * 3.1: the last toolkit for 3.7 is 11.8; R470 is the last Kepler branch. */
static void test_kepler_cuda12(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--gpu", "K80", "--cuda-runtime", "12.0", NULL);
  expect(r, "gpu0.toolkit", GC_FAIL, "11.8", "R470", "sm_37", "detail:sm_35/sm_37", "title:209", NULL);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
  /* CUDA 11.8 still targets sm_37 (1). */
  r = whatif(0, "--gpu", "K80", "--cuda-runtime", "11.8", NULL);
  expect(r, "gpu0.toolkit", GC_OK, NULL);
}

/* An image requirement the driver does not meet. 2.3: 550.54.15 reports
 * 12.4 < 12.8, so term 1 fails; term 2 fails on driver<536. libnvidia-
 * container names the first term. Fix: R570 (12.8, 2.3). With
 * NVIDIA_DISABLE_REQUIRE: 12.8 on 12.4 is same major above 525.60.13 -> MVC:
 * SASS works, PTX 222 (2.2). */
static void check_image_case(gc_report *r) {
  expect(r, "image.require", GC_FAIL, "R570", "570.26", "NVIDIA_DISABLE_REQUIRE",
         "detail:unsatisfied condition: cuda>=12.8, please update your driver", "detail:driver<536", NULL);
  expect(r, "image.disable_require", GC_INFO, "title:minor-version", "title:222", "title:SASS", NULL);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_FAIL);
}

static void test_image_requirement_not_met(void **state) {
  (void)state;
  check_image_case(whatif(0, "--image-require", "cuda>=12.8 brand=tesla,driver>=535,driver<536", "--driver",
                          "550.54.15", "--gpu", "8.9", NULL));
}

/* The same by model name, as in the issue; needs gc_gpu_parse to know "RTX 4090". */
static void test_image_requirement_not_met_by_name(void **state) {
  (void)state;
  int cc;
  char name[64], err[256];
  if (gc_gpu_parse("RTX 4090", &cc, name, sizeof name, err, sizeof err) < 0) {
    fprintf(stderr, "test_gc_whatif: gc_gpu_parse(\"RTX 4090\"): %s: skipped\n", err);
    skip();
  }
  assert_int_equal(cc, 89);
  check_image_case(whatif(0, "--image-require", "cuda>=12.8 brand=tesla,driver>=535,driver<536", "--driver",
                          "550.54.15", "--gpu", "RTX 4090", NULL));
}

/* --disable-require: the check is skipped (info) and MVC decides (warn), 2.2. */
static void test_disable_require(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--image-require", "cuda>=12.8 brand=tesla,driver>=535,driver<536", "--driver",
                        "550.54.15", "--gpu", "8.9", "--disable-require", NULL);
  expect(r, "image.require", GC_INFO, NULL);
  expect(r, "image.disable_require", GC_WARN, "R570", NULL);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_WARN);
  /* A 13.0 image on a 12.4 driver: newer major -> 35 even when started (2.2). */
  r = whatif(0, "--image-require", "cuda>=13.0", "--driver", "550.54.15", "--disable-require", NULL);
  expect(r, "image.disable_require", GC_FAIL, "580.65.06", "title:35", NULL);
}

/* Brand decides the escape-hatch term: 535.104.05 reports 12.2 < 12.8 (2.3),
 * driver>=535,driver<536 holds, so brand=tesla decides. */
static void test_image_brand(void **state) {
  (void)state;
  const char *req = "cuda>=12.8 brand=tesla,driver>=535,driver<536";
  gc_report *r = whatif(0, "--image-require", req, "--driver", "535.104.05", "--gpu", "H100", NULL);
  expect(r, "image.require", GC_WARN, "--brand", "detail:brand=tesla", NULL);
  r = whatif(0, "--image-require", req, "--driver", "535.104.05", "--gpu", "H100", "--brand", "tesla", NULL);
  expect(r, "image.require", GC_OK, "title:term 2", NULL);
  r = whatif(0, "--image-require", req, "--driver", "535.104.05", "--gpu", "H100", "--brand", "geforce", NULL);
  expect(r, "image.require", GC_FAIL, "detail:brand=tesla", NULL);
  /* libnvidia-container calls an NVIDIA RTX brand "Unknown" (src/driver.c): brand=unknown matches it. */
  r = whatif(0, "--image-require", "cuda>=12.8 brand=unknown,driver>=535,driver<536", "--driver", "535.104.05",
             "--gpu", "8.6", "--brand", "NVIDIA RTX", NULL);
  expect(r, "image.require", GC_OK, NULL);
}

/* ------------------------------------------------------ driver x runtime --- */

/* 2.2: a 12.1 runtime on a CUDA 11.4 driver (470.86, 2.3) -> 35; fix: the
 * 12.1 driver 530.30.02 (2.1) or any >= 525.60.13 (MVC floor). Forward
 * compatibility: GeForce not eligible (804), Tesla eligible. */
static void test_runtime_newer_major(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--cuda-runtime", "12.1", "--driver", "470.86", "--gpu", "8.6", "--brand", "geforce",
                        "--gpu", "A100", "--brand", "tesla", NULL);
  expect(r, "compat.major", GC_FAIL, "530.30.02", "525.60.13", "forward compatibility", "title:35", NULL);
  const gc_check *f = expect(r, "compat.forward", GC_INFO, NULL);
  assert_non_null(strstr(f->detail, "GPU0"));
  assert_non_null(strstr(f->detail, "804"));
  assert_non_null(strstr(f->detail, "GPU1 A100 (CC 8.0): eligible"));
  /* The PTX question does not arise when the runtime cannot start. */
  assert_null(find(r, "gpu0.ptx"));
}

/* 2.2 / 0.1: 11.8 <= 12.2 (R535) -> backward compatibility. */
static void test_backward(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--cuda-runtime", "11.8", "--driver", "535", NULL);
  expect(r, "compat.backward", GC_OK, NULL);
  assert_int_equal(gc_report_exit_code(r), GC_EXIT_OK);
}

/* 2.2: no MVC before 11: 10.2 on R418 (10.1) -> 35; fix 440.33 (2.1). */
static void test_pre11(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--cuda-runtime", "10.2", "--driver", "418.39", NULL);
  expect(r, "compat.backward", GC_FAIL, "440.33", NULL);
}

/* 2.2: 11.4 on 450.51.05 (R450 = 11.0): same major, below the 450.80.02 floor -> 35. */
static void test_below_mvc_floor(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--cuda-runtime", "11.4", "--driver", "450.51.05", NULL);
  expect(r, "compat.minor", GC_FAIL, "450.80.02", NULL);
  /* 450.80.02 itself is at the floor: MVC. */
  r = whatif(0, "--cuda-runtime", "11.4", "--driver", "450.80.02", NULL);
  expect(r, "compat.minor", GC_WARN, NULL);
}

/* ------------------------------------------------------------ GPU rules --- */

/* 3.1: RTX 5090 is CC 12.0, first toolkit 12.8; R550 reports 12.4 (2.3):
 * the GPU is newer than the driver; fix: 12.8's driver 570.26 (2.1). */
static void test_gpu_newer_than_driver(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--gpu", "RTX 5090", "--driver", "550.54.15", NULL);
  expect(r, "gpu0.driver", GC_FAIL, "R570", "570.26", NULL);
  r = whatif(0, "--gpu", "RTX 5090", "--driver", "570.124.06", NULL);
  expect(r, "gpu0.driver", GC_OK, NULL);
}

/* R470 is the last Kepler branch: a K80 on R535 fails; on 470.82.01 it is fine. */
static void test_kepler_driver_too_new(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--gpu", "K80", "--driver", "535.104.05", NULL);
  expect(r, "gpu0.driver", GC_FAIL, "R470", NULL);
  r = whatif(0, "--gpu", "K80", "--driver", "470.82.01", NULL);
  expect(r, "gpu0.driver", GC_OK, NULL);
}

/* 1: CUDA 12.4 targets end at sm_90a: no SASS for 12.0, only PTX (3.2).
 * Its PTX is ISA 8.4 -> needs CUDA 12.4 (note 3): R570 (12.8) JITs it; a
 * driver reporting 12.2 cannot (222), though MVC lets the runtime start
 * (12.2 >= 12.0, 2.2). */
static void test_ptx_forward_compat(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--gpu", "12.0", "--cuda-runtime", "12.4", "--driver", "570.86.10", NULL);
  expect(r, "gpu0.toolkit", GC_WARN, "12.8", NULL);
  expect(r, "gpu0.ptx", GC_WARN, "sm_120", NULL);
  r = whatif(0, "--gpu", "12.0", "--cuda-runtime", "12.4", "--driver", "12.2", NULL);
  expect(r, "gpu0.ptx", GC_FAIL, "R550", "title:222", NULL);
  /* With SASS (an A100 and 12.4) the PTX point is only a warning about PTX-only kernels. */
  r = whatif(0, "--gpu", "A100", "--cuda-runtime", "12.4", "--driver", "535.104.05", NULL);
  expect(r, "gpu0.toolkit", GC_OK, NULL);
  expect(r, "gpu0.ptx", GC_WARN, "-arch=sm_80", NULL);
}

/* ----------------------------------------------------------- torch rules --- */

/* 8.2: 2.9 cu130 ends in 12.0+PTX; a CC 13.0 GPU is reached only through
 * that PTX (3.2). It is ISA 9.0 (CUDA 13.0, 1): R580 JITs it, R570 (12.8)
 * cannot (222) -- and R570 cannot run the 13.0 runtime at all (2.2, 35). */
static void test_torch_ptx_only(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--torch", "2.9.0+cu130", "--gpu", "13.0", "--driver", "580.65.06", NULL);
  expect(r, "gpu0.torch", GC_WARN, NULL);
  r = whatif(0, "--torch", "2.9.0+cu130", "--gpu", "13.0", "--driver", "570.124.06", NULL);
  expect(r, "gpu0.torch", GC_FAIL, "R580", NULL);
  expect(r, "torch.driver.major", GC_FAIL, NULL);
}

/* 2.2: cu130 (13.0) on R535 (12.2) -> 35; fix 580.65.06; of 2.9's variants
 * cu126 and cu128 run on it (12.x by MVC). */
static void test_torch_variant_vs_driver(void **state) {
  (void)state;
  gc_report *r = whatif(0, "--torch", "2.9.0+cu130", "--driver", "535.104.05", NULL);
  expect(r, "torch.driver.major", GC_FAIL, "580.65.06", "+cu126", "+cu128", NULL);
  r = whatif(0, "--torch", "2.9.0+cu128", "--driver", "535.104.05", NULL);
  expect(r, "torch.driver.minor", GC_WARN, NULL);
  r = whatif(0, "--torch", "2.9.0+cpu", NULL);
  expect(r, "torch.wheel", GC_WARN, NULL);
}

/* ------------------------------------------------------------------ usage --- */

static void test_usage_errors(void **state) {
  (void)state;
  whatif(GC_EXIT_USAGE, NULL);                                           /* nothing to check */
  whatif(GC_EXIT_USAGE, "--bogus", NULL);                                /* unknown option */
  whatif(GC_EXIT_USAGE, "stray", NULL);                                  /* stray argument */
  whatif(GC_EXIT_USAGE, "--gpu", NULL);                                  /* missing value */
  whatif(GC_EXIT_USAGE, "--gpu", "No Such GPU 9000", NULL);              /* unknown GPU */
  whatif(GC_EXIT_USAGE, "--image-require", "cuda>>12", NULL);            /* malformed requirement */
  whatif(GC_EXIT_USAGE, "--torch", "2.5.1", NULL);                       /* no variant */
  whatif(GC_EXIT_USAGE, "--torch", "2.5.1+cu999", NULL);                 /* unknown variant */
  whatif(GC_EXIT_USAGE, "--driver", "abc", NULL);                        /* not a version */
  whatif(GC_EXIT_USAGE, "--driver", "11.9", NULL);                       /* no branch reports 11.9 (2.3) */
  whatif(GC_EXIT_USAGE, "--driver", "300.1", NULL);                      /* older than R367 */
  whatif(GC_EXIT_USAGE, "--cuda-runtime", "12.7", NULL);                 /* no 12.7 toolkit (1) */
  whatif(GC_EXIT_USAGE, "--brand", "radeon", "--gpu", "A100", NULL);     /* not an NVML brand */
  whatif(GC_EXIT_USAGE, "--brand", "tesla", "--brand", "geforce", "--gpu", "A100", NULL); /* 2 brands, 1 GPU */
  whatif(GC_EXIT_USAGE, "--brand", "tesla", "--image-require", "brand=tesla", NULL);         /* a brand of no GPU */
  /* 12.7 is a driver's CUDA version (R565, 2.3) even without a toolkit. */
  gc_report *r = whatif(0, "--driver", "12.7", NULL);
  expect(r, "driver.cuda", GC_INFO, NULL);
}

static void test_unreadable_binary(void **state) {
  (void)state;
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/does-not-exist", tmp_dir);
  whatif(GC_EXIT_INPUT, "--binary", path, "--gpu", "A100", NULL);
}

/* -------------------------------------------------------------------- CLI --- */

typedef struct cli_out {
  int status;
  json_t *json;
} cli_out;

static char *quoted(const char *s, char *buf, size_t cap) {
  size_t n = 0;
  buf[n++] = '\'';
  for (; *s && n + 6 < cap; s++) {
    if (*s == '\'') memcpy(buf + n, "'\\''", 4), n += 4;
    else buf[n++] = *s;
  }
  buf[n++] = '\'';
  buf[n] = 0;
  return buf;
}

/* Runs the gpucheck binary with `whatif --json ARGS... NULL`. */
static cli_out run_cli(const char *first, ...) {
  char cmd[4096], q[512];
  snprintf(cmd, sizeof cmd, "%s whatif --json", quoted(cli, q, sizeof q));
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a; a = va_arg(ap, const char *)) {
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    strncat(cmd, quoted(a, q, sizeof q), sizeof cmd - strlen(cmd) - 1);
  }
  va_end(ap);
  strncat(cmd, " 2>/dev/null", sizeof cmd - strlen(cmd) - 1);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  json_error_t e;
  cli_out o = {-1, json_loadf(p, JSON_DISABLE_EOF_CHECK, &e)};
  int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

static void test_cli_exit_codes_and_json(void **state) {
  (void)state;
  if (!cli[0]) skip();
  struct {
    int status;
    const char *verdict, *id;
    const char *args[8];
  } cases[] = {
      {1, "fail", "gpu0.torch", {"--torch", "1.12.1+cu102", "--gpu", "A100"}},
      {2, "warn", "compat.minor", {"--cuda-runtime", "12.4", "--driver", "535.104.05"}},
      {0, "ok", "compat.backward", {"--cuda-runtime", "11.8", "--driver", "535"}},
      {1, "fail", "image.require",
       {"--image-require", "cuda>=12.8 brand=tesla,driver>=535,driver<536", "--driver", "550.54.15", "--gpu", "8.9"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *const *a = cases[i].args;
    cli_out o = run_cli(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], NULL);
    if (o.status != cases[i].status) fail_msg("case %zu: exit %d, expected %d", i, o.status, cases[i].status);
    assert_non_null(o.json);
    assert_string_equal(json_string_value(json_object_get(o.json, "schema")), "gpucheck/1");
    assert_string_equal(json_string_value(json_object_get(o.json, "command")), "whatif");
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), cases[i].verdict);
    assert_int_equal(json_integer_value(json_object_get(o.json, "exit_code")), cases[i].status);
    int found = 0;
    size_t si, ci;
    json_t *sec, *chk;
    json_array_foreach(json_object_get(o.json, "sections"), si, sec) {
      json_array_foreach(json_object_get(sec, "checks"), ci, chk) {
        if (!strcmp(json_string_value(json_object_get(chk, "id")), cases[i].id)) found = 1;
      }
    }
    json_decref(o.json);
    if (!found) fail_msg("case %zu: no check %s in the JSON", i, cases[i].id);
  }
  /* Usage errors: 64 and nothing on stdout. */
  cli_out o = run_cli("--gpu", "No Such GPU 9000", NULL);
  assert_int_equal(o.status, 64);
  assert_null(o.json);
  o = run_cli(NULL);
  assert_int_equal(o.status, 64);
  assert_null(o.json);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_torch_wheel_without_sm, free_last),
      cmocka_unit_test_teardown(test_runtime_newer_within_mvc, free_last),
      cmocka_unit_test_teardown(test_ptx_newer_than_driver, free_last),
      cmocka_unit_test_teardown(test_ptx_newer_than_driver_nvcc, free_last),
      cmocka_unit_test_teardown(test_kepler_cuda12, free_last),
      cmocka_unit_test_teardown(test_image_requirement_not_met, free_last),
      cmocka_unit_test_teardown(test_image_requirement_not_met_by_name, free_last),
      cmocka_unit_test_teardown(test_disable_require, free_last),
      cmocka_unit_test_teardown(test_image_brand, free_last),
      cmocka_unit_test_teardown(test_runtime_newer_major, free_last),
      cmocka_unit_test_teardown(test_backward, free_last),
      cmocka_unit_test_teardown(test_pre11, free_last),
      cmocka_unit_test_teardown(test_below_mvc_floor, free_last),
      cmocka_unit_test_teardown(test_gpu_newer_than_driver, free_last),
      cmocka_unit_test_teardown(test_kepler_driver_too_new, free_last),
      cmocka_unit_test_teardown(test_ptx_forward_compat, free_last),
      cmocka_unit_test_teardown(test_torch_ptx_only, free_last),
      cmocka_unit_test_teardown(test_torch_variant_vs_driver, free_last),
      cmocka_unit_test_teardown(test_usage_errors, free_last),
      cmocka_unit_test_teardown(test_unreadable_binary, free_last),
      cmocka_unit_test(test_cli_exit_codes_and_json),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
