/* onednn_conv_probe: how fast oneDNN (Debian 12's libdnnl-dev 2.6) runs one
 * convolution on the CPU, for planning a fast-mode convolution through it
 * (issue 12's note). Not built by make and not part of Ember: a probe.
 *
 *   apt install libdnnl-dev
 *   gcc -O2 bench/onednn_conv_probe.c -o build/bench/onednn_conv_probe -ldnnl
 *   OMP_NUM_THREADS=1 build/bench/onednn_conv_probe N C H OC K S BLOCKED
 *
 * x [N, C, H, H] f32, w [OC, C, K, K], padding K/2, stride S, a zero bias,
 * forward inference, direct algorithm. BLOCKED 1: oneDNN chooses the layouts
 * of x and y ("any", its blocked formats) and the timing includes reordering
 * x from NCHW and y back to NCHW, as a per-op use from Ember's NCHW tensors
 * would; 0: plain NCHW in and out (oneDNN then picks another kernel). The
 * weights are reordered once, outside the timing. Best of 30 runs.
 *
 * Prints: the implementation oneDNN chose, total ms (reorders + convolution),
 * convolution ms alone, and GFLOP/s for both (2 N OC C K K OH OW flops). */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x)                                                \
  do {                                                          \
    dnnl_status_t s_ = (x);                                     \
    if (s_ != dnnl_success) {                                   \
      fprintf(stderr, "onednn_conv_probe: %s: status %d\n", #x, (int)s_); \
      exit(1);                                                  \
    }                                                           \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static dnnl_memory_desc_t md(int nd, const dnnl_dims_t dims, dnnl_format_tag_t tag) {
  dnnl_memory_desc_t d;
  CHECK(dnnl_memory_desc_init_by_tag(&d, nd, dims, dnnl_f32, tag));
  return d;
}

static dnnl_primitive_t reorder(dnnl_engine_t eng, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t p;
  CHECK(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL));
  CHECK(dnnl_primitive_create(&p, pd));
  dnnl_primitive_desc_destroy(pd);
  return p;
}

static void run2(dnnl_primitive_t p, dnnl_stream_t st, dnnl_memory_t from, dnnl_memory_t to) {
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  CHECK(dnnl_primitive_execute(p, st, 2, a));
}

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: onednn_conv_probe N C H OC K S BLOCKED\n");
    return 2;
  }
  const long N = atol(argv[1]), C = atol(argv[2]), H = atol(argv[3]), OC = atol(argv[4]), K = atol(argv[5]),
             S = atol(argv[6]);
  const int blocked = atoi(argv[7]);
  const long P = K / 2, OH = (H + 2 * P - K) / S + 1;
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_dims_t xd = {N, C, H, H}, wd = {OC, C, K, K}, bd = {OC}, yd = {N, OC, OH, OH}, strides = {S, S}, pads = {P, P};
  dnnl_memory_desc_t x_md = md(4, xd, dnnl_nchw), w_md = md(4, wd, dnnl_oihw), b_md = md(1, bd, dnnl_x),
                     y_md = md(4, yd, dnnl_nchw);
  dnnl_memory_desc_t x_any = md(4, xd, blocked ? dnnl_format_tag_any : dnnl_nchw), w_any = md(4, wd, dnnl_format_tag_any),
                     y_any = md(4, yd, blocked ? dnnl_format_tag_any : dnnl_nchw);
  dnnl_convolution_desc_t cd;
  CHECK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &x_any, &w_any, &b_md,
                                           &y_any, strides, pads, pads));
  dnnl_primitive_desc_t pd;
  CHECK(dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL));
  const char *impl = "?";
  CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
  const dnnl_memory_desc_t *xc = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                           *wc = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                           *yc = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  dnnl_primitive_t conv;
  CHECK(dnnl_primitive_create(&conv, pd));
  size_t xs = dnnl_memory_desc_get_size(&x_md), ws = dnnl_memory_desc_get_size(&w_md),
         ys = dnnl_memory_desc_get_size(&y_md);
  float *x = malloc(xs), *w = malloc(ws), *b = calloc((size_t)OC, sizeof(float)), *y = malloc(ys);
  if (!x || !w || !b || !y) return 1;
  for (size_t i = 0; i < xs / sizeof(float); i++) x[i] = (float)(i % 13) * 0.1f;
  for (size_t i = 0; i < ws / sizeof(float); i++) w[i] = (float)(i % 7) * 0.01f;
  dnnl_memory_t mx, mw, mb, my, mxc, mwc, myc;
  CHECK(dnnl_memory_create(&mx, &x_md, eng, x));
  CHECK(dnnl_memory_create(&mw, &w_md, eng, w));
  CHECK(dnnl_memory_create(&mb, &b_md, eng, b));
  CHECK(dnnl_memory_create(&my, &y_md, eng, y));
  CHECK(dnnl_memory_create(&mxc, xc, eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_create(&mwc, wc, eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_create(&myc, yc, eng, DNNL_MEMORY_ALLOCATE));
  dnnl_primitive_t rx = reorder(eng, &x_md, xc), rw = reorder(eng, &w_md, wc), ry = reorder(eng, yc, &y_md);
  run2(rw, st, mw, mwc); /* weights once, as a model's would be */
  double best = 1e30, best_conv = 1e30;
  for (int r = 0; r < 30; r++) {
    double t0 = now();
    run2(rx, st, mx, mxc);
    CHECK(dnnl_stream_wait(st));
    double t1 = now();
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, mxc}, {DNNL_ARG_WEIGHTS, mwc}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, myc}};
    CHECK(dnnl_primitive_execute(conv, st, 4, a));
    CHECK(dnnl_stream_wait(st));
    double t2 = now();
    run2(ry, st, myc, my);
    CHECK(dnnl_stream_wait(st));
    double t3 = now();
    if (t3 - t0 < best) best = t3 - t0;
    if (t2 - t1 < best_conv) best_conv = t2 - t1;
  }
  double flops = 2.0 * (double)N * (double)OC * (double)C * (double)(K * K) * (double)(OH * OH);
  printf("%s N%ld C%ld H%ld OC%ld K%ld S%ld: total %.3f ms %.0f GFLOP/s, convolution alone %.3f ms %.0f GFLOP/s\n",
         impl, N, C, H, OC, K, S, best * 1e3, flops / best * 1e-9, best_conv * 1e3, flops / best_conv * 1e-9);
  return 0;
}
