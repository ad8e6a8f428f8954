/* Convolutions of the fake libcudnn: what each call checks, the modelled
 * algorithms (what they support, the workspace they need, their pretend
 * time, determinism and summation order), the heuristic and search
 * answers, and the calls that issue the work (fakecudnn_conv_math.c).
 *
 * The checks follow the API reference of cudnnConvolutionForward /
 * BackwardData / BackwardFilter (BAD_PARAM: NULL arguments, dimension
 * counts that differ, fewer than 3 dimensions, channels that do not match
 * the groups, data types that differ, a filter wider than the padded input,
 * an output of the wrong size; NOT_SUPPORTED: negative strides, not 4 or 5
 * dimensions, an algorithm that does not support the problem). The
 * algorithms are the double's own model (README.md, "Algorithms"): real
 * cuDNN's support tables are larger and change between versions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_conv.h"

/* ---------------------------------------------------------- algorithms --- */

/* Tensor-core kernels exist for forward IMPLICIT_PRECOMP_GEMM and
 * WINOGRAD_NONFUSED, backward data and filter ALGO_1 and WINOGRAD_NONFUSED
 * (cuDNN 7 Developer Guide, "Tensor Core Operations"). ALGO_0 and ALGO_3 of
 * the backward directions are non-deterministic (cudnn_ops_v9.h). The pretend
 * times are the double's: a fixed cost and a rate (README.md). */
static const fd_algo fwd_algos[] = {
    {"IMPLICIT_GEMM", FD_FAM_IMPLICIT, 1, 0, FD_ORD_NATURAL, 5, 500},
    {"IMPLICIT_PRECOMP_GEMM", FD_FAM_PRECOMP, 1, 1, FD_ORD_SWAPPED, 8, 1000},
    {"GEMM", FD_FAM_GEMM, 1, 0, FD_ORD_CHUNKED, 12, 1200},
    {"DIRECT", FD_FAM_NEVER, 1, 0, FD_ORD_NATURAL, 0, 1},
    {"FFT", FD_FAM_FFT, 1, 0, FD_ORD_REVERSED, 40, 6000},
    {"FFT_TILING", FD_FAM_FFT_TILING, 1, 0, FD_ORD_PAIRWISE, 25, 3000},
    {"WINOGRAD", FD_FAM_WINOGRAD, 1, 0, FD_ORD_REVERSED_SWAPPED, 10, 1800},
    {"WINOGRAD_NONFUSED", FD_FAM_WINOGRAD_NONFUSED, 1, 1, FD_ORD_PARTIALS, 20, 2500},
};

static const fd_algo data_algos[] = {
    {"ALGO_0", FD_FAM_IMPLICIT, 0, 0, FD_ORD_ROTATED, 6, 700},
    {"ALGO_1", FD_FAM_IMPLICIT, 1, 1, FD_ORD_NATURAL, 7, 800},
    {"FFT", FD_FAM_FFT, 1, 0, FD_ORD_REVERSED, 40, 6000},
    {"FFT_TILING", FD_FAM_FFT_TILING, 1, 0, FD_ORD_PAIRWISE, 25, 3000},
    {"WINOGRAD", FD_FAM_WINOGRAD, 1, 0, FD_ORD_SWAPPED, 10, 1800},
    {"WINOGRAD_NONFUSED", FD_FAM_WINOGRAD_NONFUSED, 1, 1, FD_ORD_PARTIALS, 20, 2500},
};

static const fd_algo filter_algos[] = {
    {"ALGO_0", FD_FAM_IMPLICIT, 0, 0, FD_ORD_ROTATED, 6, 700},
    {"ALGO_1", FD_FAM_IMPLICIT, 1, 1, FD_ORD_NATURAL, 7, 800},
    {"FFT", FD_FAM_FFT, 1, 0, FD_ORD_REVERSED, 40, 6000},
    {"ALGO_3", FD_FAM_PARTIAL_FILTERS, 0, 0, FD_ORD_ROTATED_PARTIALS, 9, 1000},
    {"WINOGRAD", FD_FAM_NEVER, 1, 0, FD_ORD_NATURAL, 0, 1},
    {"WINOGRAD_NONFUSED", FD_FAM_WINOGRAD_NONFUSED, 1, 1, FD_ORD_PARTIALS, 20, 2500},
    {"FFT_TILING", FD_FAM_FFT_TILING, 1, 0, FD_ORD_PAIRWISE, 25, 3000},
};

const fd_algo *fd_algos(fd_dir dir, int *count) {
  switch (dir) {
  case FD_FWD: *count = (int)(sizeof fwd_algos / sizeof fwd_algos[0]); return fwd_algos;
  case FD_BWD_DATA: *count = (int)(sizeof data_algos / sizeof data_algos[0]); return data_algos;
  default: *count = (int)(sizeof filter_algos / sizeof filter_algos[0]); return filter_algos;
  }
}

/* The heuristic's preference (cudnnGet*Algorithm_v7), the double's own:
 * the tensor-core algorithms first, then the cheap ones, the transforms last. */
static const int fwd_heuristic[] = {1, 0, 7, 2, 5, 4, 6, 3};
static const int data_heuristic[] = {1, 0, 5, 3, 2, 4};
static const int filter_heuristic[] = {1, 0, 3, 5, 6, 2, 4};

static const int *heuristic_order(fd_dir dir) {
  return dir == FD_FWD ? fwd_heuristic : dir == FD_BWD_DATA ? data_heuristic : filter_heuristic;
}

static const char *const dir_names[FD_N_DIRS] = {"forward", "backward data", "backward filter"};

/* ------------------------------------------------------------ problem --- */

static int64_t taps_of(const fd_problem *p) {
  int64_t n = 1;
  for (int i = 0; i < p->nsp; i++) n *= p->ker[i];
  return n;
}

static int64_t outs_of(const fd_problem *p) {
  int64_t n = 1;
  for (int i = 0; i < p->nsp; i++) n *= p->out[i];
  return n;
}

/* The data type and computation type pairs of the reference's supported
 * configurations: FLOAT_CONFIG, DOUBLE_CONFIG, PSEUDO_HALF_CONFIG,
 * TRUE_HALF_CONFIG (CC 5.3 and later), PSEUDO_BFLOAT16_CONFIG (CC 8.0 and
 * later [U]). */
static cudnnStatus_t check_config(const fd_problem *p, const char *op) {
  int ok = (p->dtype == FD_FLOAT && p->compute == FD_FLOAT) || (p->dtype == FD_DOUBLE && p->compute == FD_DOUBLE) ||
           (p->dtype == FD_HALF && p->compute == FD_FLOAT) || (p->dtype == FD_HALF && p->compute == FD_HALF && p->cc >= 53) ||
           (p->dtype == FD_BFLOAT16 && p->compute == FD_FLOAT && p->cc >= 80);
  if (!ok)
    return fd_refuse(FD_NOT_SUPPORTED_DATA_TYPE, "%s: %s data with a %s convolution descriptor on CC %d.%d is no supported configuration",
                     op, fd_dtype_name(p->dtype), fd_dtype_name(p->compute), p->cc / 10, p->cc % 10);
  return FD_SUCCESS;
}

/* The descriptors of one convolution, checked: x is the input side (dx for
 * backward data), w the filter (dw for backward filter), y the output side
 * (dy for both backward directions). */
static cudnnStatus_t make_problem(const char *op, fd_dir dir, fd_handle h, fd_tensor x, fd_filter w, fd_conv cd, fd_tensor y,
                                  fd_problem *p) {
  cudnnStatus_t s = fd_tensor_ready(x, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(y, op);
  if (s == FD_SUCCESS) s = fd_filter_ready(w, op);
  if (s != FD_SUCCESS) return s;
  if (!cd) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: convDesc is NULL", op);
  if (!fd_is_live(cd, FD_OBJ_CONV) || cd->nsp == 0) return fd_refuse(FD_BAD_PARAM, "%s: the convolution descriptor is not set", op);
  if (x->nb != y->nb || x->nb != w->nb)
    return fd_refuse(FD_BAD_PARAM, "%s: the tensors have %d, %d and %d dimensions", op, x->nb, w->nb, y->nb);
  if (x->nb != cd->nsp + 2)
    return fd_refuse(FD_BAD_PARAM, "%s: %d dimensions for a convolution of %d spatial axes", op, x->nb, cd->nsp);
  if (x->dtype != y->dtype || x->dtype != w->dtype) return fd_refuse(FD_BAD_PARAM, "%s: the data types differ", op);
  if (x->dims[1] != w->dims[1] * cd->groups)
    return fd_refuse(FD_BAD_PARAM, "%s: %d input channels, the filter has %d per group and %d groups", op, x->dims[1],
                     w->dims[1], cd->groups);
  if (w->dims[0] % cd->groups != 0)
    return fd_refuse(dir == FD_FWD ? FD_BAD_PARAM : FD_NOT_SUPPORTED, "%s: %d output channels are not a multiple of %d groups",
                     op, w->dims[0], cd->groups);
  if (fd_tensor_has_negative_stride(x) || fd_tensor_has_negative_stride(y))
    return fd_refuse(FD_NOT_SUPPORTED, "%s: negative tensor strides", op);
  if (x->nb != 4 && x->nb != 5) return fd_refuse(FD_NOT_SUPPORTED, "%s: %d-D tensors (4-D or 5-D)", op, x->nb);
  memset(p, 0, sizeof *p);
  p->nsp = cd->nsp;
  p->n = x->dims[0];
  p->c = x->dims[1];
  p->k = w->dims[0];
  p->g = cd->groups;
  for (int i = 0; i < p->nsp; i++) {
    p->in[i] = x->dims[2 + i];
    p->ker[i] = w->dims[2 + i];
    p->pad[i] = cd->pad[i];
    p->stride[i] = cd->stride[i];
    p->dil[i] = cd->dilation[i];
    if ((p->ker[i] - 1) * p->dil[i] + 1 > p->in[i] + 2 * p->pad[i])
      return fd_refuse(FD_BAD_PARAM, "%s: the filter is wider than the padded input on axis %d", op, i);
    p->out[i] = fd_conv_out_size(p->in[i], p->ker[i], p->pad[i], p->stride[i], p->dil[i]);
  }
  if (y->dims[0] != p->n || y->dims[1] != p->k)
    return fd_refuse(FD_BAD_PARAM, "%s: the output side has n %d and %d channels; expected %lld and %lld", op, y->dims[0],
                     y->dims[1], (long long)p->n, (long long)p->k);
  for (int i = 0; i < p->nsp; i++)
    if (y->dims[2 + i] != p->out[i])
      return fd_refuse(FD_BAD_PARAM, "%s: output axis %d is %d; cudnnGetConvolutionNdForwardOutputDim says %lld", op, i,
                       y->dims[2 + i], (long long)p->out[i]);
  p->flip = cd->mode == FD_CONVOLUTION;
  p->dtype = x->dtype;
  p->compute = cd->compute;
  p->math = cd->math;
  p->cc = h->cc;
  return check_config(p, op);
}

/* --------------------------------------------------- algorithm model --- */

static int all_ones(const int *v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i] != 1) return 0;
  return 1;
}

static int float_or_half(const fd_problem *p) { return p->dtype == FD_FLOAT || p->dtype == FD_HALF; }

/* What a family supports (README.md): NULL, or why not. */
static const char *unsupported(const fd_algo *a, const fd_problem *p) {
  int unit = all_ones(p->stride, p->nsp) && all_ones(p->dil, p->nsp);
  switch (a->family) {
  case FD_FAM_NEVER: return "not implemented";
  case FD_FAM_GEMM: return p->nsp == 2 ? NULL : "2-D convolutions only";
  case FD_FAM_FFT:
    if (p->nsp != 2 || !unit || p->g != 1 || !float_or_half(p)) return "2-D, stride 1, no dilation, one group, f32 or f16 only";
    for (int i = 0; i < 2; i++)
      if (p->in[i] + 2 * p->pad[i] > 256) return "padded input larger than 256";
    return NULL;
  case FD_FAM_FFT_TILING:
    if (!unit || p->g != 1 || !float_or_half(p)) return "stride 1, no dilation, one group, f32 or f16 only";
    for (int i = 0; i < p->nsp; i++)
      if (p->ker[i] > 32) return "filter larger than 32";
    return NULL;
  case FD_FAM_WINOGRAD:
    if (p->nsp != 2 || !unit || p->dtype != FD_FLOAT || p->ker[0] != 3 || p->ker[1] != 3) return "3x3, stride 1, no dilation, f32 only";
    return NULL;
  case FD_FAM_WINOGRAD_NONFUSED:
    if (p->nsp != 2 || !unit || !float_or_half(p) || p->ker[0] != p->ker[1] || (p->ker[0] != 3 && p->ker[0] != 5))
      return "3x3 or 5x5, stride 1, no dilation, f32 or f16 only";
    return NULL;
  default: return NULL;
  }
}

static int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

/* The workspace of a family, in bytes (README.md gives the same formulas). */
static size_t workspace_of(const fd_algo *a, const fd_problem *p) {
  int64_t e = (int64_t)fd_dtype_size(p->dtype), cg = p->c / p->g, kv = taps_of(p), ov = outs_of(p);
  switch (a->family) {
  case FD_FAM_PRECOMP: return (size_t)(4 * cg * kv);
  case FD_FAM_GEMM: return (size_t)(e * cg * kv * ov);
  case FD_FAM_PARTIAL_FILTERS: return (size_t)(4 * p->k * cg * kv * (p->n < 4 ? p->n : 4));
  case FD_FAM_FFT: {
    int64_t f0 = next_pow2(p->in[0] + 2 * p->pad[0]), f1 = next_pow2(p->in[1] + 2 * p->pad[1]);
    return (size_t)(8 * f0 * (f1 / 2 + 1) * (p->n * p->c + p->k * cg + p->n * p->k));
  }
  case FD_FAM_FFT_TILING: {
    int64_t tile = p->nsp == 3 ? 32 * 32 * 17 : 32 * 17;
    return (size_t)(8 * tile * (p->k * cg + p->c + p->k));
  }
  case FD_FAM_WINOGRAD_NONFUSED: {
    int64_t a2 = p->ker[0] == 3 ? 36 : 64, tiles = p->n * ((p->out[0] + 3) / 4) * ((p->out[1] + 3) / 4);
    return (size_t)(4 * a2 * (p->k * cg + tiles * (p->c + p->k)));
  }
  default: return 0;
  }
}

/* How f32 inputs reach the multiplier (cudnnMathType_t's reference): FMA
 * math is exact f32; default and tensor-op math permit TF32 on CC >= 8.0
 * (what PyTorch turns off with FMA math); ALLOW_CONVERSION also permits
 * f16 on CC 7.x. NVIDIA_TF32_OVERRIDE=0 forbids TF32 (then ALLOW_CONVERSION
 * converts to f16 [U]). Only algorithms with tensor-core kernels do any of
 * it; the double always takes what is permitted [U: cuDNN picks per kernel]. */
static fd_inround input_rounding(const fd_algo *a, const fd_problem *p) {
  if (p->dtype != FD_FLOAT || !a->tensor_ops || p->math == FD_FMA_MATH) return FD_IN_EXACT;
  int tf32 = p->cc >= 80 && !fd_g.cfg.tf32_off;
  if (tf32) return FD_IN_TF32;
  if (p->math == FD_TENSOR_OP_MATH_ALLOW_CONVERSION && p->cc >= 70) return FD_IN_F16;
  return FD_IN_EXACT;
}

static int uses_tensor_cores(const fd_algo *a, const fd_problem *p) {
  if (!a->tensor_ops || p->math == FD_FMA_MATH) return 0;
  if (p->dtype == FD_FLOAT) return input_rounding(a, p) != FD_IN_EXACT;
  return (p->dtype == FD_HALF || p->dtype == FD_BFLOAT16) && p->cc >= 70;
}

/* The pretend time in ms: fixed_us + MACs / (rate, x4 on tensor cores) +
 * workspace bytes / 20000, over 1000 (README.md). MACs are the same in the
 * three directions: n k out-positions (c / g) taps. */
static float pretend_ms(const fd_algo *a, const fd_problem *p) {
  double macs = (double)p->n * (double)p->k * (double)outs_of(p) * (double)(p->c / p->g) * (double)taps_of(p);
  double rate = a->macs_per_us * (uses_tensor_cores(a, p) ? 4.0 : 1.0);
  return (float)((a->fixed_us + macs / rate + (double)workspace_of(a, p) / 20000.0) / 1000.0);
}

static const char *math_name(int m) {
  static const char *const names[] = {"DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH"};
  return m >= 0 && m <= 3 ? names[m] : "?";
}

static const char *inround_name(fd_inround r) { return r == FD_IN_TF32 ? "TF32" : r == FD_IN_F16 ? "f16" : "exact"; }

/* --------------------------------------------------------- perf records --- */

static fd_algo_perf record_of(fd_dir dir, int i, const fd_problem *p, size_t limit) {
  int n;
  const fd_algo *a = fd_algos(dir, &n) + i;
  fd_algo_perf r;
  memset(&r, 0, sizeof r);
  r.algo = i;
  r.determinism = a->deterministic ? FD_DETERMINISTIC : FD_NON_DETERMINISTIC;
  r.mathType = p->math; /* the math type given to the algorithm [U] */
  r.time = -1.0f;       /* no time for a record that did not run [U] */
  if (unsupported(a, p)) {
    r.status = FD_NOT_SUPPORTED;
    return r;
  }
  r.memory = workspace_of(a, p);
  /* "CUDNN_STATUS_ALLOC_FAILED if ... the provided workspace is insufficient"
   * (cudnnConvolution*AlgoPerf_t's reference). */
  if (r.memory > limit) {
    r.status = FD_ALLOC_FAILED;
    return r;
  }
  r.status = FD_SUCCESS;
  r.time = pretend_ms(a, p);
  return r;
}

/* Successes by time (then by algorithm), the others after them in
 * algorithm order, as a search that sorts what it measured. */
static int by_time(const void *pa, const void *pb) {
  const fd_algo_perf *a = pa, *b = pb;
  int fa = a->status != FD_SUCCESS, fb = b->status != FD_SUCCESS;
  if (fa != fb) return fa - fb;
  if (!fa && a->time != b->time) return a->time < b->time ? -1 : 1;
  return a->algo - b->algo;
}

/* Copies the first `requested` records out, statuses in the configured numbering. */
static void hand_out(fd_algo_perf *all, int n, int requested, int *returned, void *out) {
  int m = requested < n ? requested : n;
  for (int i = 0; i < m; i++) all[i].status = fd_public(all[i].status);
  memcpy(out, all, (size_t)m * sizeof *all);
  *returned = m;
}

static cudnnStatus_t check_request(int requested, const int *returned, const void *results, const char *op) {
  if (!returned || !results) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: returnedAlgoCount or perfResults is NULL", op);
  if (requested <= 0) return fd_refuse(FD_BAD_PARAM, "%s: requestedAlgoCount %d", op, requested);
  return FD_SUCCESS;
}

/* ------------------------------------------------------------ queries --- */

static cudnnStatus_t max_count(fd_handle h, int *count, fd_dir dir, const char *op) {
  cudnnStatus_t s = fd_handle_live(h, op);
  if (s != FD_SUCCESS) return s;
  if (!count) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: count is NULL", op);
  fd_algos(dir, count);
  return FD_SUCCESS;
}

/* cudnnGet*Algorithm_v7: every algorithm in the heuristic's order, the
 * supported ones first; their memory filled in, no time [U]. */
static cudnnStatus_t heuristic(const char *op, fd_dir dir, fd_handle h, fd_tensor x, fd_filter w, fd_conv cd, fd_tensor y,
                               int requested, int *returned, void *results) {
  fd_problem p;
  cudnnStatus_t s = fd_handle_live(h, op);
  if (s == FD_SUCCESS) s = make_problem(op, dir, h, x, w, cd, y, &p);
  if (s == FD_SUCCESS) s = check_request(requested, returned, results, op);
  if (s != FD_SUCCESS) return s;
  int n, m = 0;
  fd_algos(dir, &n);
  const int *order = heuristic_order(dir);
  fd_algo_perf all[8];
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      fd_algo_perf r = record_of(dir, order[i], &p, SIZE_MAX);
      if ((r.status == FD_SUCCESS) == (pass == 0)) {
        r.time = -1.0f;
        all[m++] = r;
      }
    }
  hand_out(all, n, requested, returned, results);
  fd_note_call("%s heuristic: %s first", op, fd_algos(dir, &n)[all[0].algo].name);
  return FD_SUCCESS;
}

static cudnnStatus_t workspace_size(const char *op, fd_dir dir, fd_handle h, fd_tensor x, fd_filter w, fd_conv cd,
                                    fd_tensor y, int algo, size_t *size) {
  fd_problem p;
  cudnnStatus_t s = fd_handle_live(h, op);
  if (s == FD_SUCCESS) s = make_problem(op, dir, h, x, w, cd, y, &p);
  if (s != FD_SUCCESS) return s;
  if (!size) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: sizeInBytes is NULL", op);
  int n;
  const fd_algo *a = fd_algos(dir, &n);
  if (algo < 0 || algo >= n) return fd_refuse(FD_BAD_PARAM, "%s: %d is no %s algorithm", op, algo, dir_names[dir]);
  const char *why = unsupported(a + algo, &p);
  if (why) return fd_refuse(FD_NOT_SUPPORTED, "%s: %s does not support this problem (%s)", op, a[algo].name, why);
  *size = workspace_of(a + algo, &p);
  return FD_SUCCESS;
}

/* ---------------------------------------------------------------- work --- */

static void describe(char *buf, size_t cap, fd_tensor x, fd_filter w, fd_tensor y, fd_dir dir) {
  char xs[192], ws[128], ys[192];
  fd_tensor_text(x, xs, sizeof xs);
  fd_filter_text(w, ws, sizeof ws);
  fd_tensor_text(y, ys, sizeof ys);
  snprintf(buf, cap, "%s=%s %s=%s %s=%s", dir == FD_BWD_DATA ? "dx" : "x", xs, dir == FD_BWD_FILTER ? "dw" : "w", ws,
           dir == FD_FWD ? "y" : "dy", ys);
}

static fd_conv_work *new_work(const char *op, fd_dir dir, const fd_problem *p, fd_tensor x, const void *xp, fd_filter w,
                              const void *wp, fd_tensor y, const void *yp) {
  fd_conv_work *cw = fd_work_alloc(sizeof *cw, op);
  if (!cw) return NULL;
  cw->dir = dir;
  cw->p = *p;
  fd_view_of_tensor(&cw->x, x, xp);
  fd_view_of_filter(&cw->w, w, wp);
  fd_view_of_tensor(&cw->y, y, yp);
  return cw;
}

typedef struct conv_args {
  const char *op;
  fd_dir dir;
  fd_handle h;
  fd_tensor x;
  const void *xp;
  fd_filter w;
  const void *wp;
  fd_conv cd;
  fd_tensor y;
  const void *yp;
} conv_args;

/* cudnnConvolutionForward / BackwardData / BackwardFilter. Less workspace
 * than the algorithm needs is BAD_PARAM [U: the reference names no status;
 * the double answers with the 9.x sub-code BAD_PARAM_SIZE_INSUFFICIENT]. */
static cudnnStatus_t run_conv(const conv_args *c, const void *alpha, const void *beta, int algo, void *ws, size_t ws_bytes) {
  fd_problem p;
  cudnnStatus_t s = fd_check_handle(c->h, c->op);
  if (s == FD_SUCCESS) s = make_problem(c->op, c->dir, c->h, c->x, c->w, c->cd, c->y, &p);
  if (s != FD_SUCCESS) return s;
  if (!alpha || !beta || !c->xp || !c->wp || !c->yp)
    return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: alpha, beta or a data pointer is NULL", c->op);
  int n;
  const fd_algo *a = fd_algos(c->dir, &n);
  if (algo < 0 || algo >= n) return fd_refuse(FD_BAD_PARAM, "%s: %d is no %s algorithm", c->op, algo, dir_names[c->dir]);
  const char *why = unsupported(a + algo, &p);
  if (why) return fd_refuse(FD_NOT_SUPPORTED, "%s: %s does not support this problem (%s)", c->op, a[algo].name, why);
  size_t need = workspace_of(a + algo, &p);
  if (ws_bytes < need)
    return fd_refuse(FD_BAD_PARAM_SIZE_INSUFFICIENT, "%s: %s needs %zu bytes of workspace, %zu given", c->op, a[algo].name,
                     need, ws_bytes);
  if (need && !ws) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: workSpace is NULL", c->op);
  fd_conv_work *cw = new_work(c->op, c->dir, &p, c->x, c->xp, c->w, c->wp, c->y, c->yp);
  if (!cw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", c->op);
  cw->algo = algo;
  cw->order = a[algo].order;
  cw->inround = input_rounding(a + algo, &p);
  if (cw->order == FD_ORD_ROTATED || cw->order == FD_ORD_ROTATED_PARTIALS) cw->draw = fd_random();
  fd_read_scalars(p.dtype, alpha, beta, &cw->alpha, &cw->beta);
  cw->ws = (CUdeviceptr)(uintptr_t)ws;
  cw->ws_bytes = need;
  char shapes[600];
  describe(shapes, sizeof shapes, c->x, c->w, c->y, c->dir);
  s = fd_issue(c->h, fd_conv_run, &cw->hdr);
  if (s == FD_SUCCESS)
    fd_note_call("%s algo=%s(%d) math=%s inputs=%s %s workspace=%zu given %zu needed", c->op, a[algo].name, algo,
                 math_name(p.math), inround_name(cw->inround), shapes, ws_bytes, need);
  return s;
}

/* cudnnFind*AlgorithmEx: every algorithm "runs" on the given buffers (one
 * work item that checks every operand and the workspace the fitting
 * algorithms use, and leaves NaN in the output [U]), synchronously as the
 * real search is; the records are sorted by the pretend time. Algorithms
 * needing more workspace than given are reported ALLOC_FAILED. */
static cudnnStatus_t find(const conv_args *c, int requested, int *returned, void *results, void *ws, size_t ws_bytes) {
  fd_problem p;
  cudnnStatus_t s = fd_check_handle(c->h, c->op);
  if (s == FD_SUCCESS) s = make_problem(c->op, c->dir, c->h, c->x, c->w, c->cd, c->y, &p);
  if (s == FD_SUCCESS) s = check_request(requested, returned, results, c->op);
  if (s != FD_SUCCESS) return s;
  if (!c->xp || !c->wp || !c->yp) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: a data pointer is NULL", c->op);
  if (ws_bytes && !ws) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: workSpace is NULL with %zu bytes", c->op, ws_bytes);
  int n;
  fd_algos(c->dir, &n);
  fd_algo_perf all[8];
  size_t touched = 0;
  for (int i = 0; i < n; i++) {
    all[i] = record_of(c->dir, i, &p, ws_bytes);
    if (all[i].status == FD_SUCCESS && all[i].memory > touched) touched = all[i].memory;
  }
  qsort(all, (size_t)n, sizeof all[0], by_time);
  fd_conv_work *cw = new_work(c->op, c->dir, &p, c->x, c->xp, c->w, c->wp, c->y, c->yp);
  if (!cw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", c->op);
  cw->find = 1;
  cw->ws = (CUdeviceptr)(uintptr_t)ws;
  cw->ws_bytes = touched;
  s = fd_issue(c->h, fd_conv_run, &cw->hdr);
  if (s != FD_SUCCESS) return s;
  CUresult r = fd_drv.stream_synchronize(c->h->stream);
  if (r != CUDA_SUCCESS)
    return fd_refuse(FD_EXECUTION_FAILED_CUDA_DRIVER, "%s: the trial runs failed on the stream (CUresult %d)", c->op, r);
  char shapes[600];
  describe(shapes, sizeof shapes, c->x, c->w, c->y, c->dir);
  fd_note_call("%s winner=%s(%d) math=%s %s workspace=%zu given", c->op,
               all[0].status == FD_SUCCESS ? fd_algos(c->dir, &n)[all[0].algo].name : "none", all[0].algo,
               math_name(p.math), shapes, ws_bytes);
  hand_out(all, n, requested, returned, results);
  return FD_SUCCESS;
}

/* ------------------------------------------------------------ exports --- */

FD_EXPORT cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(fd_handle h, int *count) {
  FD_CALL(cudnnGetConvolutionForwardAlgorithmMaxCount, max_count(h, count, FD_FWD, "cudnnGetConvolutionForwardAlgorithmMaxCount"));
}
FD_EXPORT cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(fd_handle h, int *count) {
  FD_CALL(cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
          max_count(h, count, FD_BWD_DATA, "cudnnGetConvolutionBackwardDataAlgorithmMaxCount"));
}
FD_EXPORT cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(fd_handle h, int *count) {
  FD_CALL(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,
          max_count(h, count, FD_BWD_FILTER, "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount"));
}

FD_EXPORT cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(fd_handle h, fd_tensor x, fd_filter w, fd_conv cd, fd_tensor y,
                                                               int requested, int *returned, fd_algo_perf *results) {
  FD_CALL(cudnnGetConvolutionForwardAlgorithm_v7,
          heuristic("cudnnGetConvolutionForwardAlgorithm_v7", FD_FWD, h, x, w, cd, y, requested, returned, results));
}
FD_EXPORT cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(fd_handle h, fd_filter w, fd_tensor dy, fd_conv cd,
                                                                    fd_tensor dx, int requested, int *returned,
                                                                    fd_algo_perf *results) {
  FD_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7,
          heuristic("cudnnGetConvolutionBackwardDataAlgorithm_v7", FD_BWD_DATA, h, dx, w, cd, dy, requested, returned, results));
}
FD_EXPORT cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(fd_handle h, fd_tensor x, fd_tensor dy, fd_conv cd,
                                                                      fd_filter dw, int requested, int *returned,
                                                                      fd_algo_perf *results) {
  FD_CALL(cudnnGetConvolutionBackwardFilterAlgorithm_v7,
          heuristic("cudnnGetConvolutionBackwardFilterAlgorithm_v7", FD_BWD_FILTER, h, x, dw, cd, dy, requested, returned,
                    results));
}

FD_EXPORT cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(fd_handle h, fd_tensor x, fd_filter w, fd_conv cd, fd_tensor y,
                                                                int algo, size_t *size) {
  FD_CALL(cudnnGetConvolutionForwardWorkspaceSize,
          workspace_size("cudnnGetConvolutionForwardWorkspaceSize", FD_FWD, h, x, w, cd, y, algo, size));
}
FD_EXPORT cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(fd_handle h, fd_filter w, fd_tensor dy, fd_conv cd,
                                                                     fd_tensor dx, int algo, size_t *size) {
  FD_CALL(cudnnGetConvolutionBackwardDataWorkspaceSize,
          workspace_size("cudnnGetConvolutionBackwardDataWorkspaceSize", FD_BWD_DATA, h, dx, w, cd, dy, algo, size));
}
FD_EXPORT cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(fd_handle h, fd_tensor x, fd_tensor dy, fd_conv cd,
                                                                       fd_filter dw, int algo, size_t *size) {
  FD_CALL(cudnnGetConvolutionBackwardFilterWorkspaceSize,
          workspace_size("cudnnGetConvolutionBackwardFilterWorkspaceSize", FD_BWD_FILTER, h, x, dw, cd, dy, algo, size));
}

FD_EXPORT cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(fd_handle h, fd_tensor x, const void *xp, fd_filter w,
                                                               const void *wp, fd_conv cd, fd_tensor y, void *yp,
                                                               int requested, int *returned, fd_algo_perf *results,
                                                               void *ws, size_t ws_bytes) {
  conv_args c = {"cudnnFindConvolutionForwardAlgorithmEx", FD_FWD, h, x, xp, w, wp, cd, y, yp};
  FD_CALL(cudnnFindConvolutionForwardAlgorithmEx, find(&c, requested, returned, results, ws, ws_bytes));
}
FD_EXPORT cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(fd_handle h, fd_filter w, const void *wp, fd_tensor dy,
                                                                    const void *dyp, fd_conv cd, fd_tensor dx, void *dxp,
                                                                    int requested, int *returned, fd_algo_perf *results,
                                                                    void *ws, size_t ws_bytes) {
  conv_args c = {"cudnnFindConvolutionBackwardDataAlgorithmEx", FD_BWD_DATA, h, dx, dxp, w, wp, cd, dy, dyp};
  FD_CALL(cudnnFindConvolutionBackwardDataAlgorithmEx, find(&c, requested, returned, results, ws, ws_bytes));
}
FD_EXPORT cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(fd_handle h, fd_tensor x, const void *xp, fd_tensor dy,
                                                                      const void *dyp, fd_conv cd, fd_filter dw, void *dwp,
                                                                      int requested, int *returned, fd_algo_perf *results,
                                                                      void *ws, size_t ws_bytes) {
  conv_args c = {"cudnnFindConvolutionBackwardFilterAlgorithmEx", FD_BWD_FILTER, h, x, xp, dw, dwp, cd, dy, dyp};
  FD_CALL(cudnnFindConvolutionBackwardFilterAlgorithmEx, find(&c, requested, returned, results, ws, ws_bytes));
}

FD_EXPORT cudnnStatus_t cudnnConvolutionForward(fd_handle h, const void *alpha, fd_tensor x, const void *xp, fd_filter w,
                                                const void *wp, fd_conv cd, int algo, void *ws, size_t ws_bytes,
                                                const void *beta, fd_tensor y, void *yp) {
  conv_args c = {"cudnnConvolutionForward", FD_FWD, h, x, xp, w, wp, cd, y, yp};
  FD_CALL(cudnnConvolutionForward, run_conv(&c, alpha, beta, algo, ws, ws_bytes));
}
FD_EXPORT cudnnStatus_t cudnnConvolutionBackwardData(fd_handle h, const void *alpha, fd_filter w, const void *wp, fd_tensor dy,
                                                     const void *dyp, fd_conv cd, int algo, void *ws, size_t ws_bytes,
                                                     const void *beta, fd_tensor dx, void *dxp) {
  conv_args c = {"cudnnConvolutionBackwardData", FD_BWD_DATA, h, dx, dxp, w, wp, cd, dy, dyp};
  FD_CALL(cudnnConvolutionBackwardData, run_conv(&c, alpha, beta, algo, ws, ws_bytes));
}
FD_EXPORT cudnnStatus_t cudnnConvolutionBackwardFilter(fd_handle h, const void *alpha, fd_tensor x, const void *xp,
                                                       fd_tensor dy, const void *dyp, fd_conv cd, int algo, void *ws,
                                                       size_t ws_bytes, const void *beta, fd_filter dw, void *dwp) {
  conv_args c = {"cudnnConvolutionBackwardFilter", FD_BWD_FILTER, h, x, xp, dw, dwp, cd, dy, dyp};
  FD_CALL(cudnnConvolutionBackwardFilter, run_conv(&c, alpha, beta, algo, ws, ws_bytes));
}

/* ------------------------------------------------------ backward bias --- */

typedef struct bias_work {
  fd_work hdr;
  fd_view dy, db;
  int compute;
  double alpha, beta;
} bias_work;

/* db[k] = the sum of dy[n, k, ...] over n and the positions, in that order. */
static CUresult bias_run(void *payload, char *msg, size_t cap) {
  bias_work *bw = payload;
  CUresult r = fd_view_span(&bw->hdr, &bw->dy, "dy", msg, cap);
  if (r == CUDA_SUCCESS) r = fd_view_span(&bw->hdr, &bw->db, "db", msg, cap);
  if (r != CUDA_SUCCESS) return r;
  for (int64_t k = 0; k < bw->db.dims[1]; k++) {
    /* dy's channel k: the same view with one channel, starting there. */
    fd_view ch = bw->dy;
    ch.dims[1] = 1;
    ch.host = (unsigned char *)bw->dy.host + (size_t)(k * bw->dy.strides[1]) * fd_dtype_size(bw->dy.dtype);
    int64_t idx[FD_DIM_MAX] = {0};
    double acc = 0.0;
    do acc = fd_round_to(bw->compute, acc + fd_load(&ch, fd_view_offset(&ch, idx)));
    while (fd_next_index(&ch, idx));
    int64_t at[FD_DIM_MAX] = {0, k};
    int64_t off = fd_view_offset(&bw->db, at);
    fd_store(&bw->db, off, fd_blend(bw->compute, bw->alpha, acc, bw->beta, &bw->db, off));
  }
  return CUDA_SUCCESS;
}

/* cudnnConvolutionBackwardBias: db is 1 x K x 1 x 1 (x 1) of dy's type. */
static cudnnStatus_t backward_bias(fd_handle h, const void *alpha, fd_tensor dy, const void *dyp, const void *beta, fd_tensor db,
                                   void *dbp) {
  const char *op = "cudnnConvolutionBackwardBias";
  cudnnStatus_t s = fd_check_handle(h, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(dy, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(db, op);
  if (s != FD_SUCCESS) return s;
  if (!alpha || !beta || !dyp || !dbp) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: alpha, beta or a data pointer is NULL", op);
  if (dy->nb != db->nb || dy->dtype != db->dtype || db->dims[0] != 1 || db->dims[1] != dy->dims[1])
    return fd_refuse(FD_BAD_PARAM, "%s: db must be 1 x %d x 1 ... of dy's data type", op, dy->dims[1]);
  for (int i = 2; i < db->nb; i++)
    if (db->dims[i] != 1) return fd_refuse(FD_BAD_PARAM, "%s: db must be 1 x %d x 1 ...", op, dy->dims[1]);
  if (!fd_dtype_size(dy->dtype)) return fd_refuse(FD_NOT_SUPPORTED_DATA_TYPE, "%s: %s data", op, fd_dtype_name(dy->dtype));
  bias_work *bw = fd_work_alloc(sizeof *bw, op);
  if (!bw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  fd_view_of_tensor(&bw->dy, dy, dyp);
  fd_view_of_tensor(&bw->db, db, dbp);
  bw->compute = dy->dtype == FD_DOUBLE ? FD_DOUBLE : FD_FLOAT;
  fd_read_scalars(dy->dtype, alpha, beta, &bw->alpha, &bw->beta);
  char shapes[200];
  fd_tensor_text(dy, shapes, sizeof shapes);
  s = fd_issue(h, bias_run, &bw->hdr);
  if (s == FD_SUCCESS) fd_note_call("%s dy=%s", op, shapes);
  return s;
}

FD_EXPORT cudnnStatus_t cudnnConvolutionBackwardBias(fd_handle h, const void *alpha, fd_tensor dy, const void *dyp,
                                                     const void *beta, fd_tensor db, void *dbp) {
  FD_CALL(cudnnConvolutionBackwardBias, backward_bias(h, alpha, dy, dyp, beta, db, dbp));
}
