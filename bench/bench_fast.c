/* GPU benchmarks of issue 13 (the fast mode: cuBLAS/cuDNN, TF32 when asked,
 * FP16/BF16 mixed precision), Ember's side. bench/fast_torch.py is PyTorch's
 * twin; bench/run_fast.sh runs both on one GPU and writes the result file
 * with the ratios. Everything goes through the public API on one CUDA device
 * in the fast mode (the default), with tensors resident on it:
 *
 *   gemm   C = A B, square N x N, N = 1024 ... 8192, one matmul through an
 *          executor: f32 (TF32 off, the default), tf32 (em_exec_set_tf32),
 *          bf16 and f16 (half inputs, f32 accumulation, half output), bf16
 *          with TF32 allowed. TFLOP/s. Each variant is first checked against
 *          a double-precision product of 64 sampled entries.
 *   conv   the 3x3 convolutions of ResNet-20 at batch 128 (stem 3->16 at
 *          32x32, 16->16 at 32x32, 16->32 stride 2, 32->32 at 16x16, 32->64
 *          stride 2, 64->64 at 8x8) and CNTK 2.6's group convolution (x
 *          [1,32,128,128], 32 groups, 5x5, pad 2), forward alone and forward
 *          + backward (y, then dx and dw from a fed dy: the convolution and
 *          its two gradient ops, what torch.autograd.grad(y, (x, w), dy)
 *          runs), in f32, tf32 and f16. ms per call. Checked first against
 *          the same graph in f32 on the CPU.
 *   train  training steps with the trainer (em_trainer_train_minibatch,
 *          Adam lr 1e-3, loss = mean cross entropy with softmax): the MLP
 *          784-512-512-10 (em_model_mlp) at batch 64 and 256, ResNet-20
 *          (em_model_resnet20, option A, 3x32x32 inputs) at batch 128, each
 *          at precision fp32, fp16 (dynamic loss scaling) and bf16
 *          (em_trainer_options.precision). Samples/s over 8 random
 *          minibatches kept on the device. Checked first: 20 steps on one
 *          minibatch lower the loss.
 *   start  (a) process start to first kernel: this program re-executed with
 *          --child first-kernel (EMBER_FORCE=cubin, an empty
 *          EMBER_CACHE_DIR), which plans a one-op graph (relu of one
 *          float) on the GPU, runs it and waits for it; the time from just
 *          before posix_spawn to the child's clock after that wait
 *          (CLOCK_MONOTONIC is one clock for every process), split into
 *          exec -> main (the loader, libember.so), driver (libcuda, cuInit),
 *          context (the first allocation creates it) and plan + module load
 *          + run.
 *          (b) the cuDNN algorithm search: --child conv twice on one fresh
 *          EMBER_CACHE_DIR, the first process searching and writing its
 *          choices to the disk cache, the second reading them: time from
 *          exec to the first convolution result (ResNet-20's 16->16 layer,
 *          forward). Medians over several fresh processes.
 *
 * Timing as bench_gpu: a warm-up run, then batches of `reps` runs with
 * em_stream_sync(dev, NULL) before the clock stops; the median of the
 * batches. Output: "R key value" lines (bench_common.h); a failed check
 * prints "R <key>_check FAIL", goes on with the rest and exits 1 at the end.
 *
 *   bench_fast [--device N] [--quick | --tiny] [--only gemm,conv,train,start]
 *
 * --quick: fewer sizes (GEMM up to 2048) and repetitions. --tiny: toy sizes
 * for the libcuda/cuBLAS/cuDNN test doubles, which run kernels on the host:
 * it runs every code path once and its timings mean nothing. */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "ember.h"

extern char **environ;

enum { FULL = 0, QUICK = 1, TINY = 2 };
static em_device g_dev;
static int g_size = FULL;
static int g_batches = 5;     /* timed batches per measurement (median) */
static int g_failed;          /* a check failed: exit 1 at the end */

/* ------------------------------------------------------------ helpers --- */

/* IEEE binary16 and bfloat16 from f32, rounding to nearest even, and back.
 * The benchmark rounds its inputs itself, so its references use exactly the
 * values the device holds. */
static uint16_t f32_to_f16(float f) {
  uint32_t u, a;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;         /* NaN */
  if (a >= 0x477ff000u) return sign | 0x7c00u;        /* rounds to or beyond 65520: inf */
  if (a < 0x38800000u) {                              /* below 2^-14: subnormal in f16 */
    float af;
    memcpy(&af, &a, 4);
    return sign | (uint16_t)lrintf(af * 16777216.0f); /* exact product; lrintf rounds to even */
  }
  uint32_t r = a - 0x38000000u + 0xfffu + ((a >> 13) & 1u); /* rebias 127 -> 15, round */
  return sign | (uint16_t)(r >> 13);
}
static float f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Rounds v[0..n) to dtype's values in place (f32: unchanged). */
static void round_to(em_dtype dt, float *v, int64_t n) {
  for (int64_t i = 0; i < n && dt != EM_F32; i++)
    v[i] = dt == EM_F16 ? f16_to_f32(f32_to_f16(v[i])) : bf16_to_f32(f32_to_bf16(v[i]));
}

/* A tensor of dtype dt on dev holding v (already representable in dt). */
static em_tensor *tensor_of(em_device dev, em_dtype dt, int ndim, const int64_t *shape, const float *v) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  em_tensor *t;
  if (dt == EM_F32) {
    BC_CHECK(em_tensor_from_host(dev, EM_F32, ndim, shape, v, sizeof(float) * (size_t)n, &t));
    return t;
  }
  uint16_t *h = malloc(sizeof *h * (size_t)(n ? n : 1));
  if (!h) exit(1);
  for (int64_t i = 0; i < n; i++) h[i] = dt == EM_F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
  BC_CHECK(em_tensor_from_host(dev, dt, ndim, shape, h, sizeof *h * (size_t)n, &t));
  free(h);
  return t;
}

/* The values of t (any float dtype, any device) as floats, malloc'd. */
static float *values_of(const em_tensor *t) {
  int64_t n = em_tensor_numel(t);
  em_dtype dt = em_tensor_dtype(t);
  float *v = bc_alloc_f32(n ? n : 1);
  if (dt == EM_F32) {
    BC_CHECK(em_tensor_to_host(t, v, sizeof(float) * (size_t)n));
    return v;
  }
  uint16_t *h = malloc(sizeof *h * (size_t)(n ? n : 1));
  if (!h) exit(1);
  BC_CHECK(em_tensor_to_host(t, h, sizeof *h * (size_t)n));
  for (int64_t i = 0; i < n; i++) v[i] = dt == EM_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
  free(h);
  return v;
}

/* Seconds per run of e, median of g_batches batches of reps runs after one
 * warm-up run (which loads modules, runs cuDNN's search and fills the
 * caching allocator). */
static double time_exec(em_exec *e, const em_feed *feeds, int n_feeds, int n_out, int reps) {
  double t[16];
  bc_run_once(e, feeds, n_feeds, n_out);
  BC_CHECK(em_stream_sync(g_dev, NULL));
  for (int b = 0; b < g_batches; b++) {
    double t0 = bc_now();
    for (int i = 0; i < reps; i++) bc_run_once(e, feeds, n_feeds, n_out);
    BC_CHECK(em_stream_sync(g_dev, NULL));
    t[b] = (bc_now() - t0) / reps;
  }
  return bc_median(t, g_batches);
}

/* What ran the first plan step applying `op`, as em_exec_describe says it
 * ("cuBLAS 13.1.0 (TF32 allowed)", "cuDNN, forward algorithm 1"), printed
 * as "<tag> <key>_path ...": the proof that the fast mode took the library path
 * (and TF32 when asked). Returns 0, printing nothing, when no step applies op. */
static int print_path(const em_exec *e, const char *op, const char *tag, const char *key) {
  size_t need = em_exec_describe(e, NULL, 0);
  char *buf = malloc(need + 1);
  if (!buf) exit(1);
  em_exec_describe(e, buf, need + 1);
  char pat[64];
  snprintf(pat, sizeof pat, " %s(", op);
  /* the report is the bracket after two spaces; "f32[64,64]" is a shape */
  const char *line = strstr(buf, pat), *open = line ? strstr(line, "  [") : NULL, *eol = line ? strchr(line, '\n') : NULL;
  if (!line) {
    free(buf);
    return 0; /* no such step */
  }
  if (open && (!eol || open < eol)) {
    open += 2;
    const char *close = strchr(open, ']');
    printf("%s %s_path %.*s\n", tag, key, close ? (int)(close - open - 1) : 0, open + 1);
  } else {
    printf("%s %s_path none reported\n", tag, key);
  }
  free(buf);
  return 1;
}

static void check_result(const char *key, double err, double tol) {
  printf("R %s_relerr %.3g\n", key, err);
  if (!(err <= tol)) {
    printf("R %s_check FAIL\n", key);
    fprintf(stderr, "bench_fast: %s: relative error %.3g above %.3g\n", key, err, tol);
    g_failed = 1;
  }
}

/* --------------------------------------------------------------- gemm --- */

typedef struct variant {
  const char *name;
  em_dtype dt;
  int tf32;
  double tol; /* of max |C - ref| / max over sampled (i,j) of sum_k |a_ik b_kj| */
} variant;

static void bench_gemm(void) {
  /* Tolerances: f32 accumulation error; TF32 rounds inputs to 10 mantissa
   * bits (~1e-3 per product); half outputs are rounded once (bf16 2^-9,
   * f16 2^-12 relative), inputs are exact half values. */
  static const variant vs[] = {{"f32", EM_F32, 0, 1e-4}, {"tf32", EM_F32, 1, 5e-3}, {"bf16", EM_BF16, 0, 8e-3},
                               {"f16", EM_F16, 0, 2e-3}, {"bf16tf32", EM_BF16, 1, 8e-3}};
  static const int64_t full[] = {1024, 2048, 4096, 8192}, quick[] = {1024, 2048}, tiny[] = {64, 128};
  const int64_t *sizes = g_size == FULL ? full : g_size == QUICK ? quick : tiny;
  int n_sizes = g_size == FULL ? 4 : 2;
  for (int s = 0; s < n_sizes; s++) {
    int64_t n = sizes[s], shape[2] = {n, n};
    float *a = bc_alloc_f32(n * n), *b = bc_alloc_f32(n * n);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    int reps = g_size == TINY ? 1 : n >= 8192 ? 3 : n >= 4096 ? 5 : 20;
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
      bc_fill_uniform(a, n * n, 10);
      bc_fill_uniform(b, n * n, 11);
      round_to(vs[v].dt, a, n * n);
      round_to(vs[v].dt, b, n * n);
      em_graph *g;
      em_var va, vb, vc;
      BC_CHECK(em_graph_create(&g));
      BC_CHECK(em_input(g, "a", vs[v].dt, 2, shape, &va));
      BC_CHECK(em_input(g, "b", vs[v].dt, 2, shape, &vb));
      em_var in[2] = {va, vb};
      BC_CHECK(em_apply(g, "matmul", in, 2, NULL, 0, &vc, 1));
      em_exec *e;
      BC_CHECK(em_exec_create(g, &vc, 1, g_dev, &e));
      BC_CHECK(em_exec_set_tf32(e, vs[v].tf32));
      em_tensor *ta = tensor_of(g_dev, vs[v].dt, 2, shape, a), *tb = tensor_of(g_dev, vs[v].dt, 2, shape, b);
      em_feed f[2] = {{va, ta}, {vb, tb}};
      char key[64];
      snprintf(key, sizeof key, "gemm_%s_%lld", vs[v].name, (long long)n);
      /* Check 64 sampled entries against a double-precision product. */
      em_tensor *out;
      BC_CHECK(em_exec_run(e, f, 2, &out));
      float *c = values_of(out);
      em_tensor_release(out);
      uint64_t st = 99;
      double err = 0, scale = 0;
      for (int k = 0; k < 64; k++) {
        int64_t i = (int64_t)(bc_rand_u64(&st) % (uint64_t)n), j = (int64_t)(bc_rand_u64(&st) % (uint64_t)n);
        double ref = 0, mag = 0;
        for (int64_t q = 0; q < n; q++) {
          ref += (double)a[i * n + q] * (double)b[q * n + j];
          mag += fabs((double)a[i * n + q] * (double)b[q * n + j]);
        }
        err = fmax(err, fabs((double)c[i * n + j] - ref));
        scale = fmax(scale, mag);
      }
      free(c);
      check_result(key, err / scale, vs[v].tol);
      print_path(e, "matmul", "R", key);
      printf("R %s_tflops %.4g\n", key, flop / time_exec(e, f, 2, 1, reps) / 1e12);
      fflush(stdout);
      em_tensor_release(ta);
      em_tensor_release(tb);
      em_exec_free(e);
      em_graph_free(g);
    }
    free(a);
    free(b);
  }
}

/* --------------------------------------------------------------- conv --- */

typedef struct conv_case {
  const char *name;
  int64_t n, c, h, w, m, k, stride, pad, group;
} conv_case;

/* ResNet-20 (He et al. 2016, 4.2, CIFAR 32x32) at batch 128, and CNTK's case. */
static const conv_case conv_cases[] = {
    {"r20_stem", 128, 3, 32, 32, 16, 3, 1, 1, 1},    {"r20_s1", 128, 16, 32, 32, 16, 3, 1, 1, 1},
    {"r20_s2down", 128, 16, 32, 32, 32, 3, 2, 1, 1}, {"r20_s2", 128, 32, 16, 16, 32, 3, 1, 1, 1},
    {"r20_s3down", 128, 32, 16, 16, 64, 3, 2, 1, 1}, {"r20_s3", 128, 64, 8, 8, 64, 3, 1, 1, 1},
    {"cntk_group", 1, 32, 128, 128, 32, 5, 1, 2, 32},
};

/* Toy sizes for the test doubles: batch 2, a quarter of each side. */
static conv_case shrink(conv_case c) {
  if (g_size != TINY) return c;
  c.n = c.n > 2 ? 2 : c.n;
  c.h /= 4;
  c.w /= 4;
  return c;
}

static int64_t conv_out(int64_t in, const conv_case *c) { return (in + 2 * c->pad - c->k) / c->stride + 1; }

typedef struct conv_net {
  em_graph *g;
  em_var x, w, dy;
  em_var outs[3];             /* y; with backward dx, dw */
  int n_out;
  em_exec *e;
} conv_net;

/* y = convolution(x, w); with bwd also dx = _conv_grad_input(dy, w, x) and
 * dw = _conv_grad_weight(x, dy, w) from a fed dy: the work of PyTorch's
 * autograd.grad(y, (x, w), dy), op for op, with no loss ops on either side. */
static void conv_build(conv_net *cn, const conv_case *c, em_dtype dt, int bwd, em_device dev) {
  memset(cn, 0, sizeof *cn);
  const int64_t xs[4] = {c->n, c->c, c->h, c->w}, ws[4] = {c->m, c->c / c->group, c->k, c->k},
                ys[4] = {c->n, c->m, conv_out(c->h, c), conv_out(c->w, c)};
  const int64_t pads[4] = {c->pad, c->pad, c->pad, c->pad}, strides[2] = {c->stride, c->stride};
  em_attr at[3] = {{.name = "group", .type = EM_ATTR_INT, .i = c->group},
                   {.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 4},
                   {.name = "strides", .type = EM_ATTR_INTS, .ints = strides, .n = 2}};
  BC_CHECK(em_graph_create(&cn->g));
  BC_CHECK(em_input(cn->g, "x", dt, 4, xs, &cn->x));
  BC_CHECK(em_input(cn->g, "w", dt, 4, ws, &cn->w));
  em_var in[3] = {cn->x, cn->w};
  BC_CHECK(em_apply(cn->g, "convolution", in, 2, at, 3, &cn->outs[0], 1));
  cn->n_out = 1;
  if (bwd) {
    BC_CHECK(em_input(cn->g, "dy", dt, 4, ys, &cn->dy));
    em_var gi[3] = {cn->dy, cn->w, cn->x}, gw[3] = {cn->x, cn->dy, cn->w};
    BC_CHECK(em_apply(cn->g, "_conv_grad_input", gi, 3, at, 3, &cn->outs[1], 1));
    BC_CHECK(em_apply(cn->g, "_conv_grad_weight", gw, 3, at, 3, &cn->outs[2], 1));
    cn->n_out = 3;
  }
  BC_CHECK(em_exec_create(cn->g, cn->outs, cn->n_out, dev, &cn->e));
}

static void conv_free(conv_net *cn) {
  em_exec_free(cn->e);
  em_graph_free(cn->g);
}

static void bench_conv(void) {
  static const variant vs[] = {{"f32", EM_F32, 0, 1e-4}, {"tf32", EM_F32, 1, 1e-2}, {"f16", EM_F16, 0, 1e-2}};
  for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++) {
    conv_case c = shrink(conv_cases[ci]);
    const int64_t xs[4] = {c.n, c.c, c.h, c.w}, ws[4] = {c.m, c.c / c.group, c.k, c.k},
                  ys[4] = {c.n, c.m, conv_out(c.h, &c), conv_out(c.w, &c)};
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3], ny = ys[0] * ys[1] * ys[2] * ys[3];
    float *x = bc_alloc_f32(nx), *w = bc_alloc_f32(nw), *dy = bc_alloc_f32(ny);
    for (int bwd = 0; bwd < 2; bwd++) {
      /* The reference: the same graph in f32 on the CPU, from inputs rounded
       * to f16 (exact in f32 too), so every variant is compared with it. */
      bc_fill_uniform(x, nx, 20);
      bc_fill_uniform(w, nw, 21);
      bc_fill_uniform(dy, ny, 22);
      round_to(EM_F16, x, nx);
      round_to(EM_F16, w, nw);
      round_to(EM_F16, dy, ny);
      conv_net ref;
      conv_build(&ref, &c, EM_F32, bwd, em_cpu());
      em_tensor *rx = tensor_of(em_cpu(), EM_F32, 4, xs, x), *rw = tensor_of(em_cpu(), EM_F32, 4, ws, w),
                *rdy = tensor_of(em_cpu(), EM_F32, 4, ys, dy), *rout[3];
      em_feed rf[3] = {{ref.x, rx}, {ref.w, rw}, {ref.dy, rdy}};
      BC_CHECK(em_exec_run(ref.e, rf, 2 + bwd, rout));
      float *rv[3];
      for (int o = 0; o < ref.n_out; o++) rv[o] = values_of(rout[o]);
      for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        conv_net cn;
        conv_build(&cn, &c, vs[v].dt, bwd, g_dev);
        BC_CHECK(em_exec_set_tf32(cn.e, vs[v].tf32));
        em_tensor *tx = tensor_of(g_dev, vs[v].dt, 4, xs, x), *tw = tensor_of(g_dev, vs[v].dt, 4, ws, w),
                  *tdy = tensor_of(g_dev, vs[v].dt, 4, ys, dy), *out[3];
        em_feed f[3] = {{cn.x, tx}, {cn.w, tw}, {cn.dy, tdy}};
        char key[96];
        snprintf(key, sizeof key, "conv_%s_%s_%s", c.name, bwd ? "fwdbwd" : "fwd", vs[v].name);
        BC_CHECK(em_exec_run(cn.e, f, 2 + bwd, out));
        double err = 0;
        for (int o = 0; o < cn.n_out; o++) { /* each output: max |diff| / max |ref| */
          float *ov = values_of(out[o]);
          int64_t n = em_tensor_numel(out[o]);
          double d = 0, mag = 0;
          for (int64_t i = 0; i < n; i++) {
            d = fmax(d, fabs((double)ov[i] - (double)rv[o][i]));
            mag = fmax(mag, fabs((double)rv[o][i]));
          }
          err = fmax(err, mag > 0 ? d / mag : d);
          free(ov);
          em_tensor_release(out[o]);
        }
        check_result(key, err, vs[v].tol);
        print_path(cn.e, "convolution", "R", key);
        if (bwd) { /* the gradients' algorithms too: all three ran through cuDNN, or not */
          char k2[128];
          snprintf(k2, sizeof k2, "%s_dx", key);
          print_path(cn.e, "_conv_grad_input", "R", k2);
          snprintf(k2, sizeof k2, "%s_dw", key);
          print_path(cn.e, "_conv_grad_weight", "R", k2);
        }
        int reps = g_size == TINY ? 1 : g_size == QUICK ? 10 : 20;
        printf("R %s_ms %.4f\n", key, time_exec(cn.e, f, 2 + bwd, cn.n_out, reps) * 1e3);
        fflush(stdout);
        em_tensor_release(tx);
        em_tensor_release(tw);
        em_tensor_release(tdy);
        conv_free(&cn);
      }
      for (int o = 0; o < ref.n_out; o++) {
        free(rv[o]);
        em_tensor_release(rout[o]);
      }
      em_tensor_release(rx);
      em_tensor_release(rw);
      em_tensor_release(rdy);
      conv_free(&ref);
    }
    free(x);
    free(w);
    free(dy);
  }
}

/* -------------------------------------------------------------- train --- */

enum { TRAIN_BATCHES = 8 };

/* Training throughput of one model at one batch size and precision, each step run eagerly or
 * (graphs) replayed as one CUDA graph (em_exec_set_graphs on the trainer's executor: after two
 * eager warm-up steps the third is captured). */
static void bench_train_one(const char *model, int64_t batch, em_dtype prec, int graphs) {
  int resnet = !strcmp(model, "resnet20");
  int64_t side = g_size == TINY ? 8 : 32;
  int64_t xs[4] = {batch, 3, side, side}, xs_mlp[2] = {batch, 784}, ls[1] = {batch};
  const int64_t *xshape = resnet ? xs : xs_mlp;
  int xnd = resnet ? 4 : 2;
  int64_t nx = resnet ? batch * 3 * side * side : batch * 784;
  em_graph *g;
  em_var x, labels, logits, ce, loss;
  BC_CHECK(em_graph_create(&g));
  BC_CHECK(em_input(g, "x", EM_F32, xnd, xshape, &x));
  BC_CHECK(em_input(g, "labels", EM_I32, 1, ls, &labels));
  if (resnet) {
    BC_CHECK(em_model_resnet20(g, x, 10, 1, NULL, &logits));
  } else {
    static const int64_t hidden[2] = {512, 512};
    em_model_opts o = {.hidden = hidden, .n_hidden = 2};
    BC_CHECK(em_model_mlp(g, x, 10, 1, &o, &logits));
  }
  em_var ce_in[2] = {logits, labels};
  BC_CHECK(em_apply(g, "cross_entropy_with_softmax", ce_in, 2, NULL, 0, &ce, 1));
  BC_CHECK(em_apply(g, "reduce_mean", &ce, 1, NULL, 0, &loss, 1));
  em_var params[128];
  size_t np = 0;
  BC_CHECK(em_graph_parameters(g, params, 128, &np));
  em_learner_config cfg;
  BC_CHECK(em_learner_defaults(EM_LEARNER_ADAM, 1e-3, &cfg));
  em_learner *l;
  BC_CHECK(em_learner_create(&cfg, NULL, params, (int)np, &l));
  em_trainer_options to = {.device = g_dev, .precision = prec};
  em_trainer *t;
  BC_CHECK(em_trainer_create(g, loss, -1, &l, 1, &to, &t));
  if (graphs) BC_CHECK(em_exec_set_graphs(em_trainer_train_exec(t), 1));

  /* Random minibatches, uploaded once: the benchmark times the steps, not
   * the host-to-device copies (bench/train_bench.sh times those). */
  em_tensor *xd[TRAIN_BATCHES], *ld[TRAIN_BATCHES];
  float *xb = bc_alloc_f32(nx);
  int32_t *lb = malloc(sizeof *lb * (size_t)batch);
  if (!lb) exit(1);
  uint64_t s = 7;
  for (int k = 0; k < TRAIN_BATCHES; k++) {
    bc_fill_uniform(xb, nx, 300 + (uint64_t)k);
    for (int64_t i = 0; i < batch; i++) lb[i] = (int32_t)(bc_rand_u64(&s) % 10);
    BC_CHECK(em_tensor_from_host(g_dev, EM_F32, xnd, xshape, xb, sizeof(float) * (size_t)nx, &xd[k]));
    BC_CHECK(em_tensor_from_host(g_dev, EM_I32, 1, ls, lb, sizeof *lb * (size_t)batch, &ld[k]));
  }
  free(xb);
  free(lb);

  char key[64];
  snprintf(key, sizeof key, "train_%s_b%lld_%s%s", model, (long long)batch,
           prec == EM_F16 ? "fp16" : prec == EM_BF16 ? "bf16" : "fp32", graphs ? "+graphs" : "");
  /* Training works (and warms up: modules, cuDNN's searches, the allocator). */
  int check_steps = g_size == TINY ? 5 : 20;
  double first = 0, last = 0;
  for (int i = 0; i < check_steps; i++) {
    em_feed f[2] = {{x, xd[0]}, {labels, ld[0]}};
    em_minibatch_result r;
    BC_CHECK(em_trainer_train_minibatch(t, f, 2, &r));
    if (i == 0) first = r.loss;
    last = r.loss;
  }
  printf("R %s_loss_first %.5f\nR %s_loss_last %.5f\n", key, first, key, last);
  /* What ran the products: after autocast a half product still says cuBLAS or cuDNN. */
  if (!print_path(em_trainer_train_exec(t), resnet ? "convolution" : "matmul", "R", key))
    print_path(em_trainer_train_exec(t), "gemm", "R", key);
  if (!(last < first)) {
    printf("R %s_check FAIL\n", key);
    fprintf(stderr, "bench_fast: %s: %d Adam steps on one minibatch did not lower the loss (%g -> %g)\n", key,
            check_steps, first, last);
    g_failed = 1;
  }
  int steps = g_size == TINY ? 2 : g_size == QUICK ? 10 : resnet ? 20 : 50;
  double tb[16];
  int k = 0;
  for (int b = 0; b < g_batches; b++) {
    BC_CHECK(em_stream_sync(g_dev, NULL));
    double t0 = bc_now();
    for (int i = 0; i < steps; i++, k++) {
      em_feed f[2] = {{x, xd[k % TRAIN_BATCHES]}, {labels, ld[k % TRAIN_BATCHES]}};
      BC_CHECK(em_trainer_train_minibatch(t, f, 2, NULL));
    }
    BC_CHECK(em_stream_sync(g_dev, NULL));
    tb[b] = (bc_now() - t0) / steps;
  }
  printf("R %s_sps %.1f\n", key, (double)batch / bc_median(tb, g_batches));
  if (graphs) { /* that the steps did replay (else the reason the plan stayed eager) */
    em_exec_stats st;
    BC_CHECK(em_exec_stats_get(em_trainer_train_exec(t), &st));
    printf("R %s_replays %llu\n", key, (unsigned long long)st.graph_replays);
    if (!st.graph_replays) {
      char plan[8192];
      em_exec_describe(em_trainer_train_exec(t), plan, sizeof plan);
      const char *why = strstr(plan, "CUDA graph");
      fprintf(stderr, "bench_fast: %s: no step replayed: %.300s\n", key, why ? why : plan);
    }
  }
  fflush(stdout);
  for (int i = 0; i < TRAIN_BATCHES; i++) {
    em_tensor_release(xd[i]);
    em_tensor_release(ld[i]);
  }
  em_trainer_free(t);
  em_learner_free(l);
  em_graph_free(g);
}

static void bench_train(void) {
  static const em_dtype precs[] = {EM_F32, EM_F16, EM_BF16};
  for (int graphs = 0; graphs < 2; graphs++)
    for (int p = 0; p < 3; p++) {
      bench_train_one("mlp", g_size == TINY ? 8 : 64, precs[p], graphs);
      if (g_size != TINY) bench_train_one("mlp", 256, precs[p], graphs);
      bench_train_one("resnet20", g_size == TINY ? 4 : 128, precs[p], graphs);
    }
}

/* -------------------------------------------------------------- start --- */

/* The child processes of bench_start. Each prints its clock readings
 * (CLOCK_MONOTONIC seconds, one clock for every process) as "C key value". */
static int child_main(const char *what) {
  double t_main = bc_now();
  em_device_info info;
  BC_CHECK(em_device_get_info(g_dev, &info)); /* loads libcuda, cuInit (the context comes later) */
  double t_driver = bc_now();
  void *p;
  BC_CHECK(em_malloc(g_dev, 256, &p)); /* the first allocation creates the context */
  BC_CHECK(em_free(g_dev, p));
  double t_ready = bc_now();
  em_graph *g;
  em_var x, y;
  em_exec *e;
  em_tensor *xt, *out;
  if (!strcmp(what, "first-kernel")) {
    const int64_t shape[1] = {1};
    BC_CHECK(em_graph_create(&g));
    const float one = 1;
    BC_CHECK(em_input(g, "x", EM_F32, 1, shape, &x));
    BC_CHECK(em_apply(g, "relu", &x, 1, NULL, 0, &y, 1));
    BC_CHECK(em_exec_create(g, &y, 1, g_dev, &e));
    BC_CHECK(em_tensor_from_host(em_cpu(), EM_F32, 1, shape, &one, sizeof one, &xt));
  } else { /* conv: ResNet-20's 16 -> 16 layer, forward */
    conv_case c = shrink(conv_cases[1]);
    conv_net cn;
    conv_build(&cn, &c, EM_F32, 0, g_dev);
    g = cn.g;
    e = cn.e;
    const int64_t xs[4] = {c.n, c.c, c.h, c.w}, ws[4] = {c.m, c.c, c.k, c.k};
    float *xv = bc_alloc_f32(c.n * c.c * c.h * c.w), *wv = bc_alloc_f32(c.m * c.c * c.k * c.k);
    bc_fill_uniform(xv, c.n * c.c * c.h * c.w, 1);
    bc_fill_uniform(wv, c.m * c.c * c.k * c.k, 2);
    xt = tensor_of(em_cpu(), EM_F32, 4, xs, xv);
    em_tensor *wt = tensor_of(em_cpu(), EM_F32, 4, ws, wv);
    em_feed f[2] = {{cn.x, xt}, {cn.w, wt}};
    BC_CHECK(em_exec_run(e, f, 2, &out));
    BC_CHECK(em_stream_sync(g_dev, NULL));
    double t_first = bc_now();
    em_tensor_release(out);
    BC_CHECK(em_exec_run(e, f, 2, &out)); /* a second run: what the search cost the first */
    BC_CHECK(em_stream_sync(g_dev, NULL));
    double t_second = bc_now();
    printf("C t_main %.6f\nC t_driver %.6f\nC t_ready %.6f\nC t_first %.6f\nC t_second %.6f\n", t_main, t_driver,
           t_ready, t_first, t_second);
    print_path(e, "convolution", "C", "conv");
    em_tensor_release(out);
    em_tensor_release(wt);
    free(xv);
    free(wv);
    goto done;
  }
  em_feed f = {x, xt};
  BC_CHECK(em_exec_run(e, &f, 1, &out));
  BC_CHECK(em_stream_sync(g_dev, NULL));
  double t_first = bc_now();
  printf("C t_main %.6f\nC t_driver %.6f\nC t_ready %.6f\nC t_first %.6f\n", t_main, t_driver, t_ready, t_first);
  /* Which path each loaded module took, and its load time. */
  size_t nm = 0;
  BC_CHECK(em_module_count(&nm));
  for (size_t i = 0; i < nm; i++) {
    const char *name;
    em_load_record rec;
    if (em_module_name(i, &name) == EM_OK && em_dispatch_load_record(g_dev, name, &rec) == EM_OK && rec.loaded)
      printf("C module %s %s %.3f\n", name, em_path_name(rec.path), rec.load_ms);
  }
  em_tensor_release(out);
done:
  em_tensor_release(xt);
  em_exec_free(e);
  em_graph_free(g);
  fflush(stdout);
  em_shutdown();
  return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* Runs this program again as a child (--child what), with the environment
 * plus `env` (NAME=value entries overriding); co gets the time just before
 * the spawn and the child's "C key value" lines. A child that fails is
 * reported (R start_<what>_check FAIL) and -1 returned: the benchmarks
 * already measured stay in the output. */
typedef struct child_out {
  double t_spawn;
  int n;
  char key[64][32];
  char val[64][160];
} child_out;

static int spawn_child(const char *what, const char *const *env, int n_env, child_out *co) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    perror("bench_fast: readlink /proc/self/exe");
    exit(1);
  }
  self[len] = 0;
  char ordinal[16];
  snprintf(ordinal, sizeof ordinal, "%d", g_dev.ordinal);
  /* The child needs the size only for its convolution's shape (--tiny). */
  char *argv[] = {self, "--device", ordinal, "--child", (char *)what, g_size == TINY ? "--tiny" : NULL, NULL};
  /* The environment: ours minus the names env sets, then env. */
  int n = 0;
  while (environ[n]) n++;
  char **envp = calloc((size_t)(n + n_env + 1), sizeof *envp);
  if (!envp) exit(1);
  int m = 0;
  for (int i = 0; i < n; i++) {
    int overridden = 0;
    for (int j = 0; j < n_env; j++) {
      size_t nl = strcspn(env[j], "=");
      if (!strncmp(environ[i], env[j], nl) && environ[i][nl] == '=') overridden = 1;
    }
    if (!overridden) envp[m++] = environ[i];
  }
  for (int j = 0; j < n_env; j++) envp[m++] = (char *)env[j];
  int pipefd[2];
  if (pipe(pipefd)) exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  posix_spawn_file_actions_addclose(&fa, pipefd[1]);
  fflush(stdout);
  pid_t pid;
  co->t_spawn = bc_now();
  int rc = posix_spawn(&pid, self, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  free(envp);
  if (rc) {
    fprintf(stderr, "bench_fast: posix_spawn: %s\n", strerror(rc));
    exit(1);
  }
  FILE *in = fdopen(pipefd[0], "r");
  char line[256];
  co->n = 0;
  while (in && fgets(line, sizeof line, in)) {
    char k[32], v[160];
    if (co->n < 64 && sscanf(line, "C %31s %159[^\n]", k, v) == 2) {
      snprintf(co->key[co->n], sizeof co->key[0], "%s", k);
      snprintf(co->val[co->n], sizeof co->val[0], "%s", v);
      co->n++;
    }
  }
  if (in) fclose(in);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) { /* its stderr said why */
    fprintf(stderr, "bench_fast: the child (%s) failed (status %d)\n", what, status);
    printf("R start_%s_check FAIL\n", what);
    g_failed = 1;
    return -1;
  }
  return 0;
}

static double child_time(const child_out *co, const char *key) {
  for (int i = 0; i < co->n; i++)
    if (!strcmp(co->key[i], key)) return atof(co->val[i]);
  fprintf(stderr, "bench_fast: the child did not report %s\n", key);
  exit(1);
}

static int count_files(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "find '%s' -type f | wc -l", dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

static void bench_start(void) {
  int runs = g_size == FULL ? 7 : g_size == QUICK ? 3 : 2;
  double total[16], to_main[16], driver[16], ctx[16], kernel[16];
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int r = 0; r < runs; r++) {
    char dir[4096], cache_env[4200];
    snprintf(dir, sizeof dir, "%s/ember-bench-fast-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
      perror("bench_fast: mkdtemp");
      exit(1);
    }
    snprintf(cache_env, sizeof cache_env, "EMBER_CACHE_DIR=%s", dir);
    const char *env[] = {"EMBER_FORCE=cubin", cache_env};
    child_out co;
    if (spawn_child("first-kernel", env, 2, &co)) { /* reported; the cuDNN part may still run */
      nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
      runs = 0;
      break;
    }
    total[r] = (child_time(&co, "t_first") - co.t_spawn) * 1e3;
    to_main[r] = (child_time(&co, "t_main") - co.t_spawn) * 1e3;
    driver[r] = (child_time(&co, "t_driver") - child_time(&co, "t_main")) * 1e3;
    ctx[r] = (child_time(&co, "t_ready") - child_time(&co, "t_driver")) * 1e3;
    kernel[r] = (child_time(&co, "t_first") - child_time(&co, "t_ready")) * 1e3;
    printf("R start_first_kernel_sample_ms %.2f\n", total[r]);
    if (r == 0)
      for (int i = 0; i < co.n; i++)
        if (!strcmp(co.key[i], "module")) printf("R start_module %s\n", co.val[i]);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  }
  if (runs) {
    printf("R start_first_kernel_ms %.2f\n", bc_median(total, runs));
    printf("R start_exec_to_main_ms %.2f\n", bc_median(to_main, runs));
    printf("R start_driver_init_ms %.2f\n", bc_median(driver, runs));
    printf("R start_context_ms %.2f\n", bc_median(ctx, runs));
    printf("R start_plan_load_run_ms %.2f\n", bc_median(kernel, runs));
  }
  fflush(stdout);

  /* The cuDNN search: a cold process (empty cache) then a warm one (the
   * cache the first wrote), on a fresh directory each round. */
  int pairs = g_size == FULL ? 3 : g_size == QUICK ? 2 : 1;
  double cold[8], warm[8], cold_run[8], warm_run[8], cold_second[8];
  for (int r = 0; r < pairs; r++) {
    char dir[4096], cache_env[4200];
    snprintf(dir, sizeof dir, "%s/ember-bench-fast-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
      perror("bench_fast: mkdtemp");
      exit(1);
    }
    snprintf(cache_env, sizeof cache_env, "EMBER_CACHE_DIR=%s", dir);
    const char *env[] = {cache_env};
    child_out c1, c2;
    int files = -1;
    if (spawn_child("conv", env, 1, &c1) || (files = count_files(dir), spawn_child("conv", env, 1, &c2))) {
      nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
      return;
    }
    cold[r] = (child_time(&c1, "t_first") - c1.t_spawn) * 1e3;
    warm[r] = (child_time(&c2, "t_first") - c2.t_spawn) * 1e3;
    cold_run[r] = (child_time(&c1, "t_first") - child_time(&c1, "t_ready")) * 1e3;
    warm_run[r] = (child_time(&c2, "t_first") - child_time(&c2, "t_ready")) * 1e3;
    cold_second[r] = (child_time(&c1, "t_second") - child_time(&c1, "t_first")) * 1e3;
    printf("R start_cudnn_cold_sample_ms %.2f\nR start_cudnn_warm_sample_ms %.2f\n", cold[r], warm[r]);
    if (r == 0) {
      printf("R start_cudnn_cache_files %d\n", files);
      for (int i = 0; i < c1.n; i++)
        if (!strcmp(c1.key[i], "conv_path")) printf("R start_cudnn_cold_path %s\n", c1.val[i]);
      for (int i = 0; i < c2.n; i++)
        if (!strcmp(c2.key[i], "conv_path")) printf("R start_cudnn_warm_path %s\n", c2.val[i]);
    }
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  }
  printf("R start_cudnn_cold_ms %.2f\nR start_cudnn_warm_ms %.2f\n", bc_median(cold, pairs), bc_median(warm, pairs));
  printf("R start_cudnn_cold_plan_run_ms %.2f\nR start_cudnn_warm_plan_run_ms %.2f\n", bc_median(cold_run, pairs),
         bc_median(warm_run, pairs));
  printf("R start_cudnn_steady_run_ms %.2f\n", bc_median(cold_second, pairs));
  fflush(stdout);
}

/* --------------------------------------------------------------- main --- */

static void print_library(const char *lib) {
  int used = 0;
  char why[512] = "";
  em_status s = em_device_library_use(g_dev, lib, &used, why, sizeof why);
  printf("R %s_used %d\nR %s_why %s\n", lib, s == EM_OK && used, lib, s == EM_OK ? why : em_last_error());
}

int main(int argc, char **argv) {
  int ordinal = 0;
  const char *only = "gemm,conv,train,start", *child = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) g_size = QUICK;
    else if (!strcmp(argv[i], "--tiny")) g_size = TINY;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) ordinal = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--child") && i + 1 < argc) child = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--device N] [--quick | --tiny] [--only gemm,conv,train,start]\n", argv[0]);
      return 2;
    }
  }
  g_dev = em_cuda(ordinal);
  if (child) return child_main(child);
  g_batches = g_size == TINY ? 2 : 5;
  em_device_info info;
  BC_CHECK(em_device_get_info(g_dev, &info));
  printf("R gpu %s\nR cc %d.%d\nR sm_count %d\nR driver_cuda %d\n", info.name, info.cc_major, info.cc_minor,
         info.sm_count, info.driver_version);
  printf("R size %s\n", g_size == FULL ? "full" : g_size == QUICK ? "quick" : "tiny");
  print_library("cublas");
  print_library("cudnn");
  fflush(stdout);
  if (strstr(only, "gemm")) bench_gemm();
  if (strstr(only, "conv")) bench_conv();
  if (strstr(only, "train")) bench_train();
  if (strstr(only, "start")) bench_start();
  em_shutdown();
  return g_failed;
}
