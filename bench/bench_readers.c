/* How fast the readers load Fashion-MNIST's training set (60,000 images),
 * side by side in one run: the gzipped IDX files as Debian installs them
 * (zlib inflate, then the IDX parse), the same files uncompressed, and the
 * EMB file em_dataset_write makes of them (one read, one XXH3 checksum);
 * then one shuffled sweep through the minibatch source (batch 64, scale
 * 1/255, flat) without and with the prefetch thread, the consumer doing
 * nothing (the source's own rate) and spinning 0.5 ms per minibatch (a
 * training step's stand-in: what prefetching hides).
 *
 *   gcc -std=c11 -O2 -Iinclude bench/bench_readers.c build/lib/libember.a -fopenmp \
 *       -lelf -lzstd -llz4 -lz -ljansson -ldl -lpthread -lm -o build/bin/bench_readers
 *   build/bin/bench_readers [--quick] [DIR]
 *
 * Prints "R key value" lines (bench_common.h) and a readable echo; the
 * medians of 5 repetitions (1 with --quick), each after the page cache has
 * the files (a first untimed read). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "bench_common.h"
#include "ember/reader.h"

#define REPS 5

static void check(em_status st, const char *what) {
  if (st != EM_OK) {
    fprintf(stderr, "bench_readers: %s: %s\n", what, em_last_error());
    exit(1);
  }
}

/* Inflates src (gzip) into dst. */
static void gunzip_file(const char *src, const char *dst) {
  gzFile in = gzopen(src, "rb");
  FILE *out = fopen(dst, "wb");
  if (!in || !out) {
    fprintf(stderr, "bench_readers: cannot copy %s to %s\n", src, dst);
    exit(1);
  }
  char buf[1 << 16];
  int n;
  while ((n = gzread(in, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, out);
  gzclose(in);
  fclose(out);
}

typedef em_status (*open_fn)(const char *a, em_dataset **out);
static const char *g_dir;
static em_status open_gz(const char *dir, em_dataset **out) { return em_dataset_open_idx_dir(dir, "train", 10, out); }
static em_status open_emb(const char *path, em_dataset **out) { return em_dataset_open_emb(path, out); }

/* This process's CPU seconds (all threads): on a shared, loaded machine the
 * wall time measures the neighbours as much as the reader. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median wall seconds; *cpu gets the median CPU seconds. */
static double time_open(open_fn f, const char *arg, int reps, double *cpu) {
  double t[REPS], c[REPS];
  em_dataset *d;
  check(f(arg, &d), arg); /* warm the page cache */
  em_dataset_free(d);
  for (int r = 0; r < reps; r++) {
    double t0 = bc_now(), c0 = cpu_now();
    check(f(arg, &d), arg);
    t[r] = bc_now() - t0;
    c[r] = cpu_now() - c0;
    em_dataset_free(d);
  }
  *cpu = bc_median(c, reps);
  return bc_median(t, reps);
}

/* The consumer's stand-in for a training step: spins for `work` seconds. */
static void spin(double work) {
  double t0 = bc_now();
  while (bc_now() - t0 < work) {
  }
}

static double time_sweep(const em_dataset *d, int prefetch, double work, int reps, double *cpu) {
  double t[REPS], c[REPS];
  for (int r = 0; r < reps; r++) {
    em_minibatch_options o = {.batch_size = 64, .seed = 1, .shuffle = 1, .max_sweeps = 1,
                              .no_prefetch = !prefetch, .transform = {.scale = 1.0f / 255},
                              .layout = EM_LAYOUT_FLAT};
    em_minibatch_source *s;
    double t0 = bc_now(), c0 = cpu_now();
    check(em_minibatch_source_create(d, &o, &s), "source");
    for (;;) {
      em_minibatch mb = {0};
      check(em_minibatch_next(s, &mb), "next");
      int end = mb.end_of_data;
      em_minibatch_clear(&mb);
      if (work > 0) spin(work);
      if (end) break;
    }
    em_minibatch_source_free(s);
    t[r] = bc_now() - t0;
    c[r] = cpu_now() - c0;
  }
  *cpu = bc_median(c, reps);
  return bc_median(t, reps);
}

int main(int argc, char **argv) {
  int reps = REPS;
  g_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) reps = 1;
    else g_dir = argv[i];
  }
  char tmp[] = "/tmp/bench_readers_XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  char path[600], a[600], b[600];
  /* The uncompressed pair and the EMB file. */
  snprintf(a, sizeof a, "%s/train-images-idx3-ubyte.gz", g_dir);
  snprintf(b, sizeof b, "%s/train-images-idx3-ubyte", tmp);
  gunzip_file(a, b);
  snprintf(a, sizeof a, "%s/train-labels-idx1-ubyte.gz", g_dir);
  snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte", tmp);
  gunzip_file(a, b);
  em_dataset *d;
  check(open_gz(g_dir, &d), "open");
  snprintf(path, sizeof path, "%s/train.emb", tmp);
  check(em_dataset_write(d, path), "write");
  double n = (double)em_dataset_samples(d);

  double c_gz, c_raw, c_emb, c_sweep, c_pre, c_work, c_work_pre;
  double t_gz = time_open(open_gz, g_dir, reps, &c_gz);
  double t_raw = time_open(open_gz, tmp, reps, &c_raw);
  double t_emb = time_open(open_emb, path, reps, &c_emb);
  double t_sweep = time_sweep(d, 0, 0, reps, &c_sweep), t_pre = time_sweep(d, 1, 0, reps, &c_pre);
  /* A step of 0.5 ms per minibatch of 64 (a small MLP's on this machine). */
  double t_work = time_sweep(d, 0, 5e-4, reps, &c_work), t_work_pre = time_sweep(d, 1, 5e-4, reps, &c_work_pre);
  printf("R samples %.0f\n", n);
  printf("R open_idx_gz_s %.4f\nR open_idx_gz_cpu_s %.4f\n", t_gz, c_gz);
  printf("R open_idx_raw_s %.4f\nR open_idx_raw_cpu_s %.4f\n", t_raw, c_raw);
  printf("R open_emb_s %.4f\nR open_emb_cpu_s %.4f\n", t_emb, c_emb);
  printf("R sweep_no_prefetch_s %.4f\nR sweep_no_prefetch_cpu_s %.4f\n", t_sweep, c_sweep);
  printf("R sweep_prefetch_s %.4f\nR sweep_prefetch_cpu_s %.4f\n", t_pre, c_pre);
  printf("R sweep_step_no_prefetch_s %.4f\nR sweep_step_prefetch_s %.4f\n", t_work, t_work_pre);
  printf("Fashion-MNIST train (%.0f images), median of %d; wall, then CPU of this process:\n", n, reps);
  printf("  open, gzipped IDX:      %6.3f s %9.0f samples/s | cpu %6.3f s %9.0f samples/s\n", t_gz, n / t_gz, c_gz,
         n / c_gz);
  printf("  open, uncompressed IDX: %6.3f s %9.0f samples/s | cpu %6.3f s %9.0f samples/s\n", t_raw, n / t_raw,
         c_raw, n / c_raw);
  printf("  open, EMB:              %6.3f s %9.0f samples/s | cpu %6.3f s %9.0f samples/s (cpu %.1fx gzip's)\n",
         t_emb, n / t_emb, c_emb, n / c_emb, c_gz / c_emb);
  printf("  sweep, batch 64, shuffled, no prefetch: %6.3f s %9.0f samples/s | cpu %6.3f s\n", t_sweep, n / t_sweep,
         c_sweep);
  printf("  sweep, batch 64, shuffled, prefetch:    %6.3f s %9.0f samples/s | cpu %6.3f s\n", t_pre, n / t_pre, c_pre);
  printf("  with a 0.5 ms step per minibatch (938 steps = %.3f s of steps):\n", 938 * 5e-4);
  printf("    no prefetch: %6.3f s   prefetch: %6.3f s  (%.2fx)\n", t_work, t_work_pre, t_work / t_work_pre);
  em_dataset_free(d);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  return system(cmd) == 0 ? 0 : 1;
}
