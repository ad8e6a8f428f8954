/* Shared helpers of the C benchmarks (bench/bench_*.c): a monotonic clock, the
 * median of a sample, failing loudly on an Ember error, a deterministic
 * random fill and the common command line (--threads N, --quick).
 *
 * Every benchmark prints machine-readable lines "R key value" on stdout
 * (one per measured sample or fact); bench/report.py turns them into the
 * Markdown result file. Anything else on stdout is a human-readable echo. */
#ifndef EMBER_BENCH_COMMON_H
#define EMBER_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/exec.h"
#include "ember/graph.h"
#include "ember/tensor.h"

static inline double bc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bc_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (v is sorted in place). */
static inline double bc_median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, bc_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A benchmark that cannot run its workload has nothing to report: stop with
 * the call that failed and Ember's message. */
#define BC_CHECK(call)                                                                                 \
  do {                                                                                                 \
    em_status bc_s_ = (call);                                                                          \
    if (bc_s_ != EM_OK) {                                                                              \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, em_status_name(bc_s_), \
              em_last_error());                                                                        \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

/* xorshift64*: the same data every run, independent of libc. */
/* One executor run with its outputs released. */
static inline void bc_run_once(em_exec *e, const em_feed *feeds, int n_feeds, int n_out) {
  em_tensor *out[8];
  if (n_out > 8) {
    fprintf(stderr, "bc_run_once: at most 8 outputs\n");
    exit(1);
  }
  BC_CHECK(em_exec_run(e, feeds, n_feeds, out));
  for (int k = 0; k < n_out; k++) em_tensor_release(out[k]);
}

/* `warmup` untimed runs, then `batches` batches of `calls` runs: one line
 * "R <key> <ms per run>" per batch. */
static inline void bc_time_runs(em_exec *e, const em_feed *feeds, int n_feeds, int n_out, int warmup, int batches,
                                int calls, const char *key) {
  for (int i = 0; i < warmup; i++) bc_run_once(e, feeds, n_feeds, n_out);
  for (int b = 0; b < batches; b++) {
    double t0 = bc_now();
    for (int i = 0; i < calls; i++) bc_run_once(e, feeds, n_feeds, n_out);
    printf("R %s %.4f\n", key, (bc_now() - t0) / calls * 1e3);
    fflush(stdout);
  }
}

static inline uint64_t bc_rand_u64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [-1, 1). */
static inline void bc_fill_uniform(float *p, int64_t n, uint64_t seed) {
  uint64_t s = seed ? seed : 1;
  for (int64_t i = 0; i < n; i++) p[i] = (float)((double)(bc_rand_u64(&s) >> 11) * 0x1.0p-52 - 1.0);
}

static inline float *bc_alloc_f32(int64_t n) {
  float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
  if (!p) {
    fprintf(stderr, "out of memory (%lld floats)\n", (long long)n);
    exit(1);
  }
  return p;
}

typedef struct bc_opts {
  int threads;                /* 0: Ember's default (the online CPUs) */
  int quick;
  int profile;                /* bench_mlp: per-op breakdown */
} bc_opts;

static inline bc_opts bc_parse(int argc, char **argv) {
  bc_opts o = {0, 0, 0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) o.quick = 1;
    else if (!strcmp(argv[i], "--profile")) o.profile = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) o.threads = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--threads N] [--quick] [--profile]\n", argv[0]);
      exit(2);
    }
  }
  return o;
}

/* Applies the thread count to Ember (which also sets OpenBLAS's) and
 * returns the count in force. */
static inline int bc_threads(const bc_opts *o) {
  BC_CHECK(em_set_num_threads(o->threads));
  return em_get_num_threads();
}

#endif
