/* ember selftest: for every device, runs each primitive on fresh random
 * inputs and compares the bits with the CPU twin; reports, per kernel module,
 * the path its plan took and how long the load took (cold or from the JIT
 * cache). A driver that runs no kernels (Ember's test double) gets the loads
 * checked and the comparisons reported as not run. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember.h"

typedef struct case_result {
  const char *kernel;
  const char *module;
  int ran;          /* 0: not executed (test double) */
  int ok;
  size_t mismatches;
  char error[300];
} case_result;

static uint64_t rng_state;
static float rand_float(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill_random(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = rand_float();
}

static size_t count_mismatches(const float *a, const float *b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

/* Device buffers for one case, freed on every path out. */
typedef struct bufs { em_device dev; void *p[3]; } bufs;
static void bufs_free(bufs *b) {
  for (int i = 0; i < 3; i++)
    if (b->p[i]) em_free(b->dev, b->p[i]);
}

static int upload(em_device dev, void **dst, const float *src, size_t n) {
  if (em_malloc(dev, n * sizeof(float), dst)) return 1;
  return src ? em_memcpy_h2d(dev, *dst, src, n * sizeof(float), NULL) != EM_OK : 0;
}

static void record_error(case_result *r) {
  r->ok = 0;
  snprintf(r->error, sizeof r->error, "%s", em_last_error());
}

/* Each case: run on dev, run the twin on the CPU, compare. */
static void case_axpy(em_device dev, int run, case_result *r) {
  size_t n = 1000003;
  float *x = malloc(n * 4), *y = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  float a = rand_float();
  fill_random(x, n);
  fill_random(y, n);
  memcpy(want, y, n * 4);
  em_axpy_f32(em_cpu(), a, x, want, n, NULL);
  if (upload(dev, &b.p[0], x, n) || upload(dev, &b.p[1], y, n) || em_axpy_f32(dev, a, b.p[0], b.p[1], n, NULL) ||
      em_memcpy_d2h(dev, got, b.p[1], n * 4, NULL))
    record_error(r);
  else if (run)
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(x), free(y), free(want), free(got);
}

static void case_fill(em_device dev, int run, case_result *r) {
  size_t n = 777777;
  float v = rand_float(), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  em_fill_f32(em_cpu(), want, v, n, NULL);
  if (upload(dev, &b.p[0], NULL, n) || em_fill_f32(dev, b.p[0], v, n, NULL) || em_memcpy_d2h(dev, got, b.p[0], n * 4, NULL))
    record_error(r);
  else if (run)
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(want), free(got);
}

static void case_sum(em_device dev, int run, case_result *r) {
  size_t n = 3000017;
  float *x = malloc(n * 4), want = 0, got = 0;
  bufs b = {dev, {0}};
  fill_random(x, n);
  em_sum_f32(em_cpu(), x, n, &want, NULL);
  if (upload(dev, &b.p[0], x, n) || upload(dev, &b.p[1], NULL, 1) || em_sum_f32(dev, b.p[0], n, b.p[1], NULL) ||
      em_memcpy_d2h(dev, &got, b.p[1], 4, NULL))
    record_error(r);
  else if (run)
    r->ok = (r->mismatches = count_mismatches(&want, &got, 1)) == 0;
  bufs_free(&b);
  free(x);
}

static void case_transpose(em_device dev, int run, case_result *r) {
  size_t rows = 1023, cols = 517, n = rows * cols;
  float *in = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
  bufs b = {dev, {0}};
  fill_random(in, n);
  em_transpose_f32(em_cpu(), in, want, rows, cols, NULL);
  if (upload(dev, &b.p[0], in, n) || upload(dev, &b.p[1], NULL, n) ||
      em_transpose_f32(dev, b.p[0], b.p[1], rows, cols, NULL) || em_memcpy_d2h(dev, got, b.p[1], n * 4, NULL))
    record_error(r);
  else if (run)
    r->ok = (r->mismatches = count_mismatches(want, got, n)) == 0;
  bufs_free(&b);
  free(in), free(want), free(got);
}

static const struct {
  const char *kernel, *module;
  void (*run)(em_device, int, case_result *);
} cases[] = {
  {"em_fill_f32", "elementwise", case_fill},
  {"em_axpy_f32", "elementwise", case_axpy},
  {"em_sum_f32", "reduce", case_sum},
  {"em_transpose_f32", "transpose", case_transpose},
};
#define N_CASES (sizeof cases / sizeof cases[0])

int ember_selftest(int json) {
  em_driver_info drv;
  int n_gpu = 0, failures = 0;
  if (em_driver_get_info(&drv) || em_cuda_device_count(&n_gpu)) {
    fprintf(stderr, "ember: %s\n", em_last_error());
    return 1;
  }
  /* Ember's test double of libcuda validates and loads images but runs no kernels. */
  int runs_kernels = strstr(drv.library_path, "fakecuda") == NULL;
  const char *seed_env = getenv("EMBER_SELFTEST_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
  rng_state = seed ? seed : 1;

  json_t *devs = json_array();
  if (!json) printf("selftest: seed %llu (EMBER_SELFTEST_SEED=%llu repeats it)\n", (unsigned long long)seed, (unsigned long long)seed);
  for (int d = 0; d < n_gpu; d++) {
    em_device dev = em_cuda(d);
    em_device_info info;
    em_device_get_info(dev, &info);
    json_t *rows = json_array();
    if (!json) printf("\ncuda:%d %s (CC %d.%d)\n", d, info.name, info.cc_major, info.cc_minor);
    for (size_t c = 0; c < N_CASES; c++) {
      case_result r = {cases[c].kernel, cases[c].module, runs_kernels, 1, 0, ""};
      cases[c].run(dev, runs_kernels, &r);
      em_load_record rec;
      memset(&rec, 0, sizeof rec);
      em_dispatch_load_record(dev, cases[c].module, &rec);
      const char *verdict = !r.ok ? "FAIL" : r.ran ? "ok" : "loaded (kernels not run: test double driver)";
      failures += !r.ok;
      if (json) {
        json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:b, s:b, s:b, s:I, s:f, s:s, s:s}", "kernel", r.kernel,
                                              "module", r.module, "path", em_path_name(rec.path), "ran", r.ran, "ok",
                                              r.ok, "from_cache", rec.from_cache, "mismatches", (json_int_t)r.mismatches,
                                              "load_ms", rec.load_ms, "error", r.error, "detail", rec.detail));
      } else {
        printf("  %-18s %-11s %-10s load %8.2f ms%s  %s", r.kernel, r.module, em_path_name(rec.path), rec.load_ms,
               rec.from_cache ? " (cache)" : "        ", verdict);
        if (r.mismatches) printf(" (%zu values differ from the CPU twin)", r.mismatches);
        if (r.error[0]) printf(": %s", r.error);
        putchar('\n');
      }
    }
    if (json)
      json_array_append_new(devs, json_pack("{s:i, s:s, s:i, s:i, s:o}", "ordinal", d, "name", info.name, "cc_major",
                                            info.cc_major, "cc_minor", info.cc_minor, "results", rows));
    else json_decref(rows);
  }
  if (json) {
    json_t *root = json_pack("{s:s, s:I, s:s, s:i, s:b, s:i, s:o}", "schema", "ember.selftest/1", "seed", (json_int_t)seed,
                             "driver", drv.message, "driver_version", drv.driver_version, "kernels_run", runs_kernels,
                             "failures", failures, "devices", devs);
    json_dumpf(root, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(root);
  } else {
    json_decref(devs);
    if (!n_gpu) printf("no CUDA device: %s\n", drv.message);
    printf("\nselftest: %d failure%s\n", failures, failures == 1 ? "" : "s");
  }
  return failures ? 1 : 0;
}
