/* Convolution family: N-d convolution and transposed convolution on NCHW
 * data (1, 2 or 3 spatial axes), with their fused gradient ops.
 *
 *   convolution(x, w[, b])            x [N, C, s...], w [M, C/group, k...], b [M] -> y [N, M, o...]
 *   convolution_transpose(x, w[, b])  x [N, C, s...], w [C, M/group, k...], b [M] -> y [N, M, o...]
 *                                     (ONNX ConvTranspose: the adjoint of convolution with respect to
 *                                     its input, plus a bias)
 *   _conv_grad_input(dy, w, x)        the gradient for x, shaped like x (x's values are not read)
 *   _conv_grad_weight(x, dy, w)       the gradient for w, shaped like w (w's values are not read)
 *   _conv_grad_bias(dy)               dy summed over N and the spatial axes -> [dy's axis 1]
 *
 * Attributes (ONNX names and defaults):
 *   strides INTS      one per spatial axis, >= 1 (default 1s)
 *   dilations INTS    one per spatial axis, >= 1 (default 1s)
 *   pads INTS         [begin..., end...], >= 0 (default 0s); only with auto_pad NOTSET
 *   auto_pad STRING   NOTSET (use pads) | VALID (no padding) | SAME_UPPER | SAME_LOWER |
 *                     SAME_SYMMETRIC (CNTK's auto-padding: kernel centres spread evenly; ops/spatial.h)
 *   group INT         >= 1, divides C and M (default 1; depthwise: group == C)
 *   kernel_shape INTS optional; must equal the weights' spatial dims
 *   convolution_transpose only:
 *   output_padding INTS  added at the end of each output axis, 0 <= v < max(stride, dilation) (0s)
 *   output_shape INTS    the output's spatial sizes (or N, C and the spatial sizes); pads are then
 *                        derived from it (and may not be given)
 *   gradient ops only: transpose INT  0: the geometry is convolution's, 1: convolution_transpose's
 *
 * Padding. SAME_UPPER / SAME_LOWER follow ONNX exactly. Convolution: output = ceil(in / stride),
 * total padding = max(0, (output - 1) * stride + (k - 1) * dilation + 1 - in), the odd unit at the
 * end (SAME_UPPER) or at the beginning (SAME_LOWER). ConvTranspose: output = in * stride (or
 * output_shape), total = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - output,
 * begin = floor(total / 2) for SAME_UPPER and total - floor(total / 2) otherwise (as ONNX's
 * reference implementation; total may be negative when stride exceeds the kernel). CNTK 2.6's
 * "symmetric" same padding for even kernels is NOT offered as a separate mode: Ember's reference
 * notes (shared/reference/engine-anchors.md) give no precise rule for it, so only ONNX's modes
 * exist.
 *
 * Layout of the work. Spatial axes are handled as 3-D (missing leading axes have size 1). The
 * "image" side is convolution's input (convolution_transpose's output), the "column" side
 * convolution's output (convolution_transpose's input); weights are [column channels, image
 * channels / group, k...] in both ops, so three kernels serve all five ops:
 *   image -> column   (convolution forward, convolution_transpose's input gradient)
 *   column -> image   (convolution's input gradient, convolution_transpose forward)
 *   weight gradient   (column-side gradient times the image, summed over the batch)
 * General case, image -> column and the weight gradient: fused im2col + GEMM, work items
 * (item, tile of output positions, group, channel tiles) that build their window of the
 * column matrix in a per-thread buffer and multiply it at once (img_to_col_tiled,
 * weight_grad_tiled); the forward's tiles start as the bias and the GEMM adds to them (no
 * pass over y for the bias). Column -> image: at stride 1, when the image side is not much
 * larger than the column side (same padding), a convolution with the flipped kernel through
 * the same fused code (col_to_img_as_conv); otherwise, per (item, group), one GEMM into a
 * per-thread column matrix and col2im from it (col_to_img_fused), or, when one item's column
 * matrix exceeds FUSED_COL_BYTES, one GEMM per group over a chunk of batch items, then col2im.
 * 1x1 stride-1 unpadded kernels skip im2col; im2col without padding at stride 1 copies whole
 * runs without bounds tests. Depthwise (one image channel per group, any channel multiplier) uses
 * direct loops: gathers over zero-padded rows that keep 64 outputs in registers and add
 * each element's taps in one fixed order (column strides > 1 in the input gradient scatter
 * instead, plane by plane, also in a fixed order).
 *
 * oneDNN. In the fast mode a forward f32 convolution other than a pointwise one goes to oneDNN
 * first where it is installed (ops/dnnl.c: direct convolutions on blocked layouts, 1.4-1.7x the
 * im2col + OpenBLAS path on ResNet's layers); when it is absent or declines, the paths above
 * run.
 *
 * Determinism. Work is split by output element (planes, rows, GEMM tiles) or by reduction
 * segments whose extents depend on the shapes alone, so results are the same bits whatever the
 * thread count (oneDNN's too: ops/dnnl.c uses a plan for several threads only where its sums
 * are the one-thread plan's; test_conv_thread_determinism and test_conv_dnnl check it).
 * OpenBLAS's own threading does not give that (see the GEMM section), so these ops set OpenBLAS
 * to one thread (em_blas_ready, ops/blas.c: process-wide, as ops/linalg.c does) and run tiles in
 * parallel themselves.
 *
 * Portable mode and the GPU. OpenBLAS's sums cannot be reproduced on a GPU, so in portable mode
 * (a->portable) the CPU skips all of the above and computes each output element through
 * kernels/conv_math.h, one fixed order per computation (cm_fwd, cm_adj, cm_wgrad: over the
 * channels of the group, then the kernel taps, or over the batch, then the positions, acc =
 * acc + a * b in the dtype, bias added last), exactly as kernels/conv.cu does on the GPU (one
 * thread per output element, no atomics): the two give the same bits. The gpu members run
 * those kernels in both modes, so in the fast mode the GPU equals the CPU within rounding. The
 * bias gradient is one order in both modes (a sum in double, cm_bias_grad). */
#ifndef CONV_T
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "dnnl.h"
#include "error.h"
#include "op.h"
#include "spatial.h"
#include "conv_gpu.h"
#include "gpu_glue.h"
#include "../kernels/conv_math.h"

#define SP 3                    /* spatial axes as handled internally */
#define GATHER_BLOCK 64         /* outputs a depthwise gather keeps in registers (independent vector sums) */
#define GATHER_CHUNK 256        /* outputs a depthwise gather sums at a time on the stack, in L1 */
#define DW_SCRATCH_BYTES ((int64_t)256 << 20) /* padded planes a depthwise gather may keep (all threads) */
#define DW_MAX_TAPS 4096        /* larger depthwise kernels go through im2col (the gathers keep tap lists on the stack) */
#define CHUNK_ELEMS (1 << 22)   /* col2im buffer budget (elements) when batching items into one GEMM */

/* One application's geometry, spatial axes right-aligned into SP. */
typedef struct conv_geom {
  int nsp;                      /* spatial axes of the tensors: 1..3 */
  int64_t n;                    /* batch */
  int64_t ci, co, g;            /* image-side channels, column-side channels, groups */
  int64_t img[SP], col[SP];     /* spatial sizes; -1 while unknown */
  int64_t k[SP], s[SP], d[SP], pb[SP]; /* kernel, stride, dilation, begin padding (may be < 0 for transpose) */
} conv_geom;

/* The outputs o in [0, n_out) whose input position o * s + off lies in [0, n_in): [*lo, *hi). */
static void valid_range(int64_t off, int64_t s, int64_t n_in, int64_t n_out, int64_t *lo, int64_t *hi) {
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t h = n_in - 1 - off < 0 ? 0 : (n_in - 1 - off) / s + 1;
  if (h > n_out) h = n_out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

static int64_t prod3(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* Stride 1, dilation 1 and no tap of any output outside the image (no padding is read): im2col
 * then copies runs of an output row's length without bounds tests (LeNet's conv2). */
static int reads_no_padding(const conv_geom *gm) {
  for (int j = 0; j < SP; j++)
    if (gm->s[j] != 1 || gm->d[j] != 1 || gm->pb[j] != 0 || gm->col[j] + gm->k[j] - 1 > gm->img[j]) return 0;
  return 1;
}

static em_status oom(const char *what) { return em_fail(EM_ERR_OUT_OF_MEMORY, "convolution: no memory for %s", what); }

/* The zero-padded copies a depthwise gather reads: `each` planes (per thread) of `rows`
 * rows, `width` wide, the source row starting at column `left` (may be < 0: cut). */
typedef struct dw_pad {
  int64_t rows, width, left, each, elems; /* elems = each * rows * width */
} dw_pad;

/* Fills p->elems; refuses (0) a padded plane that overflows or dwarfs the rows it pads
 * (huge pads or dilations): the caller then takes the general im2col path. */
static int dw_pad_fits(dw_pad *p, int64_t src_width, int64_t out_width) {
  int64_t limit = 4 * (src_width + out_width) + 64, e;
  if (p->width < 1 || p->width > limit) return 0;
  if (__builtin_mul_overflow(p->rows, p->width, &e) || __builtin_mul_overflow(e, p->each, &e)) return 0;
  p->elems = e;
  return 1;
}

/* dw_fwd reads image rows: image column ic at ic + pb2, output column o's taps at
 * o * s2 + kw * d2, the last one at (out2 - 1) * s2 + (k2 - 1) * d2. */
static int dw_fwd_pad(const conv_geom *gm, dw_pad *p) {
  int64_t a, b, w;
  if (__builtin_mul_overflow(gm->col[2] - 1, gm->s[2], &a) || __builtin_mul_overflow(gm->k[2] - 1, gm->d[2], &b) ||
      __builtin_add_overflow(a, b, &w) || __builtin_add_overflow(w, 1, &w))
    return 0;
  *p = (dw_pad){.rows = gm->img[0] * gm->img[1], .width = w, .left = gm->pb[2], .each = 1};
  if (!dw_pad_fits(p, gm->img[2], gm->col[2])) return 0;
  /* zeros after the plane: a flat run's last (discarded) outputs read up to (k2 - 1) d2 beyond it */
  return !__builtin_add_overflow(p->elems, b + 1, &p->elems);
}

/* The output rows [*a, *b) of a 2-D depthwise convolution of stride 1 whose kernel rows all
 * read image rows (none in the row padding); none for other geometries. dw_fwd computes them
 * as one flat run: output (oh, c) reads the padded plane (width Wp) at
 * (oh - pb1 + kh d1) Wp + kw d2 + c, which is toff(kh, kw) + j for j = (oh - a) Wp + c. So
 * the rows are one gather_row of (b - a) Wp outputs, each with the same taps in the same
 * order as row by row (the same bits), whose columns c >= out2 are discarded: one long
 * vector run instead of a short row and its scalar tail each (MobileNet's 14 and 7 wide
 * planes). With a stride s the flat step would be s columns while rows lie s Wp apart:
 * s times the work, so strided convolutions keep the rows. */
static void dw_flat_rows(const conv_geom *gm, int64_t *a, int64_t *b) {
  *a = *b = 0;
  /* col[0] == 1: the run is the one output depth (depth padding adds output depths) */
  if (gm->k[0] != 1 || gm->img[0] != 1 || gm->col[0] != 1 || gm->s[1] != 1 || gm->s[2] != 1 || gm->col[2] < 2)
    return;
  valid_range(-gm->pb[1], gm->s[1], gm->img[1], gm->col[1], a, b); /* first kernel row inside */
  int64_t a2, b2;
  valid_range((gm->k[1] - 1) * gm->d[1] - gm->pb[1], gm->s[1], gm->img[1], gm->col[1], &a2, &b2); /* last */
  if (a2 > *a) *a = a2;
  if (b2 < *b) *b = b2;
  if (*b < *a + 2) *a = *b = 0; /* one row: no gain */
}

/* dw_adj_gather reads dy rows: image column iw's taps read dy column iw + pb2 - kw * d2;
 * with dy column oc at oc + left, left = max(0, (k2 - 1) * d2 - pb2), the reads run from
 * column >= 0 to in2 - 1 + pb2 + left. One plane per output channel of the group. */
static int dw_adj_pad(const conv_geom *gm, dw_pad *p) {
  int64_t reach, left, w;
  if (__builtin_mul_overflow(gm->k[2] - 1, gm->d[2], &reach) || __builtin_sub_overflow(reach, gm->pb[2], &left)) return 0;
  if (left < 0) left = 0;
  if (__builtin_add_overflow(gm->img[2], gm->pb[2], &w) || __builtin_add_overflow(w, left, &w)) return 0;
  *p = (dw_pad){.rows = gm->col[0] * gm->col[1], .width = w, .left = left, .each = gm->co / gm->g};
  return dw_pad_fits(p, gm->col[2], gm->img[2]);
}

/* Threads for a depthwise gather that keeps `elems` padded elements of `es` bytes per
 * thread: all of them when the work is large enough to split, but no more than there are
 * planes, and only as many as DW_SCRATCH_BYTES of scratch allow (at least one). Which
 * thread computes a plane never changes its bits. */
static int dw_threads(int64_t work, int64_t planes, int64_t elems, int64_t es) {
  int64_t t = work > 32768 ? em_cpu_threads() : 1, bytes;
  if (t > planes) t = planes;
  if (__builtin_mul_overflow(elems, es, &bytes) || bytes > DW_SCRATCH_BYTES) t = 1;
  else if (bytes > 0 && t > DW_SCRATCH_BYTES / bytes) t = DW_SCRATCH_BYTES / bytes;
  return t < 1 ? 1 : (int)t;
}

/* Kernels for each float type: this file includes itself with CONV_T set. */
#define CONV_T float
#define CONV_NAME(f) f##_f32
#include "conv.c"
#undef CONV_T
#undef CONV_NAME
#define CONV_T double
#define CONV_NAME(f) f##_f64
#include "conv.c"
#undef CONV_T
#undef CONV_NAME

/* --------------------------------------------------------- attributes --- */

static int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

/* --------------------------------------------------------------- shapes --- */

/* Channels and groups from x and w for convolution (transpose 0) or convolution_transpose (1). */
static em_status resolve_channels(const em_op_args *a, int transpose, const em_shape *x, const em_shape *w,
                                  conv_geom *gm) {
  char ws[128];
  em_shape_str(w, ws, sizeof ws);
  int64_t c = x->dims[1];
  if (c >= 0 && c % gm->g)
    return em_op_fail(a, "group %lld does not divide the input's %lld channels", (long long)gm->g, (long long)c);
  if (!transpose) {
    gm->co = w->dims[0];
    gm->ci = w->dims[1] * gm->g;
    if (gm->co % gm->g)
      return em_op_fail(a, "group %lld does not divide the %lld output channels of the weights %s", (long long)gm->g,
                        (long long)gm->co, ws);
    if (c >= 0 && c != gm->ci)
      return em_op_fail(a, "channel mismatch: the input has %lld channels (axis 1) but the weights %s take %lld per "
                        "group x %lld group(s) = %lld", (long long)c, ws, (long long)w->dims[1], (long long)gm->g,
                        (long long)gm->ci);
  } else {
    gm->co = w->dims[0];
    gm->ci = w->dims[1] * gm->g;
    if (c >= 0 && c != gm->co)
      return em_op_fail(a, "channel mismatch: the input has %lld channels (axis 1) but the weights %s have %lld on "
                        "axis 0 (convolution_transpose weights are [C, M/group, k...])", (long long)c, ws,
                        (long long)gm->co);
    if (gm->co % gm->g)
      return em_op_fail(a, "group %lld does not divide the %lld input channels of the weights %s", (long long)gm->g,
                        (long long)gm->co, ws);
  }
  return EM_OK;
}

/* The full geometry of convolution (transpose 0) or convolution_transpose (1) applied to x and w,
 * and the op's output shape y. Dims of -1 propagate. */
static em_status geom_resolve(const em_op_args *a, int transpose, const em_shape *x, const em_shape *w,
                              conv_geom *gm, em_shape *y) {
  if (x->ndim < 3 || x->ndim > 5)
    return em_op_fail(a, "the input must be [N, C, spatial...] with 1 to 3 spatial axes (rank 3 to 5), not rank %d",
                      x->ndim);
  if (w->ndim != x->ndim)
    return em_op_fail(a, "the weights must have the input's rank %d ([%s, k...]), not rank %d", x->ndim,
                      transpose ? "C, M/group" : "M, C/group", w->ndim);
  for (int i = 0; i < w->ndim; i++)
    if (w->dims[i] < 1)
      return em_op_fail(a, "the weights' axis %d is %lld; every weight dim must be >= 1", i, (long long)w->dims[i]);
  memset(gm, 0, sizeof *gm);
  int nsp = x->ndim - 2;
  gm->nsp = nsp;
  gm->n = x->dims[0];
  em_status st = em_spatial_int_attr(a, "group", 1, 1, INT64_MAX, &gm->g);
  if (!st) st = resolve_channels(a, transpose, x, w, gm);
  em_spatial_attrs sa;
  if (!st) st = em_spatial_attrs_read(a, nsp, 0, &sa);
  if (st) return st;
  const int64_t *strides = sa.strides, *dil = sa.dilations, *pads = sa.pads, *ks = sa.kernel_shape, *opad = NULL,
                *oshape = NULL;
  int mode = sa.auto_pad;
  if (transpose) {
    int n = 0;
    if (!st) st = em_spatial_ints_attr(a, "output_padding", nsp, 0, &opad);
    if (!st && em_attr_ints(a, "output_shape", &n) && n == nsp + 2)
      st = em_spatial_ints_attr(a, "output_shape", nsp + 2, 1, &oshape);
    else if (!st) st = em_spatial_ints_attr(a, "output_shape", nsp, 1, &oshape);
    if (st) return st;
    if (oshape && n == nsp + 2) oshape += 2;
    if (oshape && pads) return em_op_fail(a, "pads and output_shape are both given; output_shape decides the padding");
  } else if (em_attr_has(a, "output_padding") || em_attr_has(a, "output_shape")) {
    return em_op_fail(a, "output_padding and output_shape apply to convolution_transpose only");
  }
  for (int i = 0; i < nsp; i++) {
    int j = SP - nsp + i;
    int64_t k = w->dims[2 + i];
    if (ks && ks[i] != k)
      return em_op_fail(a, "kernel_shape[%d] is %lld but the weights' kernel is %lld on that axis", i, (long long)ks[i],
                        (long long)k);
    gm->k[j] = k;
    gm->s[j] = strides ? strides[i] : 1;
    gm->d[j] = dil ? dil[i] : 1;
    int64_t dk = (k - 1) * gm->d[j] + 1, in = x->dims[2 + i], s = gm->s[j], pb, pe;
    if (!transpose) {
      gm->img[j] = in;
      if (in < 0) {
        gm->col[j] = -1;
        continue;
      }
      em_spatial_pads(mode, pads, nsp, i, in, s, dk, &pb, &pe);
      if (pb < 0 || pe < 0)
        return em_op_fail(a, "auto_pad SAME_SYMMETRIC on spatial axis %d gives pads %lld, %lld: the stride %lld is "
                          "larger than the kernel (%lld), where CNTK would crop; give pads instead",
                          i, (long long)pb, (long long)pe, (long long)s, (long long)dk);
      if (in + pb + pe < dk)
        return em_op_fail(a,
                          "the kernel (%lld taps, dilation %lld: spans %lld) is larger than the padded input "
                          "(%lld + pads %lld + %lld) on spatial axis %d",
                          (long long)k, (long long)gm->d[j], (long long)dk, (long long)in, (long long)pb, (long long)pe,
                          i);
      gm->pb[j] = pb;
      gm->col[j] = (in + pb + pe - dk) / s + 1;
    } else {
      int64_t op = opad ? opad[i] : 0;
      if (op >= s && op >= gm->d[j])
        return em_op_fail(a, "output_padding[%d] is %lld; it must be below the stride %lld or the dilation %lld", i,
                          (long long)op, (long long)s, (long long)gm->d[j]);
      gm->col[j] = in;
      if (in < 0) {
        gm->img[j] = oshape ? oshape[i] : -1;
        continue;
      }
      if (mode == EM_PAD_SAME_SYMMETRIC)
        return em_op_fail(a, "auto_pad SAME_SYMMETRIC is defined for convolution and pooling, not for "
                          "convolution_transpose");
      int64_t full = s * (in - 1) + op + dk, out;
      if (oshape || mode == EM_PAD_SAME_UPPER || mode == EM_PAD_SAME_LOWER) {
        out = oshape ? oshape[i] : in * s;
        int64_t total = full - out;
        pb = mode == EM_PAD_SAME_UPPER ? floor_div2(total) : total - floor_div2(total);
      } else {
        /* NOTSET or VALID: the forward rule (the input size is unused by those modes) */
        em_spatial_pads(mode, pads, nsp, i, in, s, dk, &pb, &pe);
        out = full - pb - pe;
      }
      if (out < 1)
        return em_op_fail(a, "the output would have %lld elements on spatial axis %d (stride * (in - 1) + "
                          "output_padding + dilated kernel - pads)", (long long)out, i);
      gm->pb[j] = pb;
      gm->img[j] = out;
    }
  }
  for (int j = 0; j < SP - nsp; j++) gm->img[j] = gm->col[j] = gm->k[j] = gm->s[j] = gm->d[j] = 1;
  y->dtype = x->dtype;
  y->ndim = x->ndim;
  y->dims[0] = x->dims[0];
  y->dims[1] = transpose ? gm->ci : gm->co;
  for (int i = 0; i < nsp; i++) y->dims[2 + i] = transpose ? gm->img[SP - nsp + i] : gm->col[SP - nsp + i];
  return EM_OK;
}

static em_status check_bias(const em_op_args *a, const em_shape *b, int64_t channels) {
  if (b->ndim != 1 || (b->dims[0] >= 0 && channels >= 0 && b->dims[0] != channels))
    return em_op_fail(a, "the bias must be [%lld] (one value per output channel)", (long long)channels);
  return EM_OK;
}

/* One image channel per group: direct loops (their tap lists live on the stack, hence the bound). */
static int is_depthwise(const conv_geom *gm) {
  return gm->g > 1 && gm->ci == gm->g && prod3(gm->k) * (gm->co / gm->g) <= DW_MAX_TAPS;
}

static int is_pointwise(const conv_geom *gm) {
  for (int j = 0; j < SP; j++)
    if (gm->k[j] != 1 || gm->s[j] != 1 || gm->pb[j] != 0 || gm->img[j] != gm->col[j]) return 0;
  return 1;
}

/* Batch items per col2im chunk: as many as fit CHUNK_ELEMS, at least one. */
static int64_t chunk_items(const conv_geom *gm) {
  int64_t per = gm->ci * prod3(gm->k) * prod3(gm->col);
  int64_t b = per > 0 ? CHUNK_ELEMS / per : gm->n;
  if (b < 1) b = 1;
  if (b > gm->n) b = gm->n;
  return b;
}

/* ------------------------------------------------------------- kernels --- */

static const void *cat(const void *p, int64_t i, size_t es) { return (const char *)p + (size_t)i * es; }
static void *at(void *p, int64_t i, size_t es) { return (char *)p + (size_t)i * es; }

/* ---------------------------------------------------------------- GEMMs ---
 * OpenBLAS's own threading is not thread-count independent: its partition decides
 * which kernel (full tile or edge) computes an element, and the bits differ (measured on
 * 0.3.21 with its Haswell and Zen kernels, i.e. every AVX2 CPU: sgemm 4x2640x27 differs
 * between 1 and 2 threads). So OpenBLAS runs single-threaded and every product is split
 * here into tiles, and weight-gradient reductions into segments, whose extents depend on
 * the shapes alone; the pieces run in parallel. */

#define TILE_M 128
#define TILE_N 256
#define TILE_WORK 2097152.0     /* products below this many multiply-adds are not tiled */
#define PAR_WORK 262144.0       /* nor run in parallel below this */
#define KSEG 8192               /* reduction segment of the weight-gradient products */
#define PARTIAL_ELEMS (1 << 22) /* bound on the segments' partial results (elements) */
#define WGRAD_PARTIALS (1 << 19) /* the fused weight gradient's partials: written and read back once
                                  * per step, beyond this they cost more than the parallelism gives */

/* About `unit`, balanced over the tiles, a multiple of 16: a function of len alone. */
static int64_t tile_extent(int64_t len, int64_t unit) {
  if (len <= unit) return len > 0 ? len : 1;
  int64_t tiles = (len + unit - 1) / unit, e = (len + tiles - 1) / tiles;
  return (e + 15) / 16 * 16;
}

/* C (m x n, ldc) = op(A) (m x k) * op(B) (k x n) [+ C]; ta / tb: the operand is stored transposed. */
typedef struct gemm_op {
  em_dtype dt;
  int ta, tb;
  int64_t m, n, k;
  const void *A;
  int64_t lda;
  const void *B;
  int64_t ldb;
} gemm_op;

/* One single-threaded BLAS call: rows [i0, i0+h), columns [j0, j0+w), reduction [k0, k0+kk) into C. */
static void blas_block(const gemm_op *g, int64_t i0, int64_t h, int64_t j0, int64_t w, int64_t k0, int64_t kk,
                       int acc, void *C, int64_t ldc) {
  size_t es = em_dtype_size(g->dt);
  if (kk <= 0) {
    if (!acc)
      for (int64_t r = 0; r < h; r++) memset((char *)C + (size_t)(r * ldc) * es, 0, (size_t)w * es);
    return;
  }
  const char *A = (const char *)g->A + (size_t)(g->ta ? k0 * g->lda + i0 : i0 * g->lda + k0) * es;
  const char *B = (const char *)g->B + (size_t)(g->tb ? j0 * g->ldb + k0 : k0 * g->ldb + j0) * es;
  if (g->dt == EM_F32)
    em_blas_sgemm(g->ta, g->tb, (int)h, (int)w, (int)kk, 1.0f, (const float *)A, (int)g->lda, (const float *)B,
                  (int)g->ldb, acc ? 1.0f : 0.0f, C, (int)ldc);
  else
    em_blas_dgemm(g->ta, g->tb, (int)h, (int)w, (int)kk, 1.0, (const double *)A, (int)g->lda, (const double *)B,
                  (int)g->ldb, acc ? 1.0 : 0.0, C, (int)ldc);
}

static em_status blas_limits(const gemm_op *g, int64_t ldc) {
  if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || g->lda > INT_MAX || g->ldb > INT_MAX || ldc > INT_MAX)
    return em_fail(EM_ERR_UNSUPPORTED, "convolution: a product of %lld x %lld x %lld exceeds BLAS's int sizes",
                   (long long)g->m, (long long)g->n, (long long)g->k);
  return EM_OK;
}

/* The tiles of an m x n result: extents th x tw, rt x ct of them. */
static void tiles_of(const gemm_op *g, int64_t *th, int64_t *tw, int64_t *rt, int64_t *ct) {
  int split = (double)g->m * (double)g->n * (double)g->k >= TILE_WORK;
  *th = split ? tile_extent(g->m, TILE_M) : (g->m > 0 ? g->m : 1);
  *tw = split ? tile_extent(g->n, TILE_N) : (g->n > 0 ? g->n : 1);
  *rt = (g->m + *th - 1) / *th;
  *ct = (g->n + *tw - 1) / *tw;
}

static em_status gemm(em_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                      const void *B, int64_t ldb, int accumulate, void *C, int64_t ldc) {
  gemm_op g = {dt, ta, tb, m, n, k, A, lda, B, ldb};
  if (m <= 0 || n <= 0) return EM_OK;
  em_status st = blas_limits(&g, ldc);
  if (st || (st = em_blas_ready())) return st;
  int64_t th, tw, rt, ct;
  tiles_of(&g, &th, &tw, &rt, &ct);
  size_t es = em_dtype_size(dt);
  int par = rt * ct > 1 && (double)m * (double)n * (double)k >= PAR_WORK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(em_cpu_threads()) if (par)
  for (int64_t t = 0; t < rt * ct; t++) {
    int64_t i0 = t / ct * th, j0 = t % ct * tw, h = m - i0 < th ? m - i0 : th, w = n - j0 < tw ? n - j0 : tw;
    blas_block(&g, i0, h, j0, w, 0, k, accumulate, (char *)C + (size_t)(i0 * ldc + j0) * es, ldc);
  }
  return EM_OK;
}

/* C [+]= the sum of the products over nseg reduction segments, added in segment order. */
static void add_partials(em_dtype dt, const void *part, int64_t nseg, int64_t m, int64_t n, int acc, void *C,
                         int64_t ldc) {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (m * n * nseg > 32768)
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      if (dt == EM_F32) {
        const float *p = (const float *)part + i * n + j;
        float *c = (float *)C + i * ldc + j, v = acc ? *c : 0.0f;
        for (int64_t s = 0; s < nseg; s++) v += p[s * m * n];
        *c = v;
      } else {
        const double *p = (const double *)part + i * n + j;
        double *c = (double *)C + i * ldc + j, v = acc ? *c : 0.0;
        for (int64_t s = 0; s < nseg; s++) v += p[s * m * n];
        *c = v;
      }
    }
}

/* A product with a long reduction and a small result (weight gradients): the reduction is cut
 * into segments (by length alone) computed in parallel, then added in order. */
static em_status gemm_reduce(em_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A,
                             int64_t lda, const void *B, int64_t ldb, int accumulate, void *C, int64_t ldc) {
  int64_t nseg = k / KSEG, cap = PARTIAL_ELEMS / (m * n > 0 ? m * n : 1);
  if (nseg > 64) nseg = 64;
  if (nseg > cap) nseg = cap;
  if (nseg <= 1 || m <= 0 || n <= 0) return gemm(dt, ta, tb, m, n, k, A, lda, B, ldb, accumulate, C, ldc);
  gemm_op g = {dt, ta, tb, m, n, k, A, lda, B, ldb};
  em_status st = blas_limits(&g, ldc);
  if (st || (st = em_blas_ready())) return st;
  int64_t seg = (k + nseg - 1) / nseg, th, tw, rt, ct;
  nseg = (k + seg - 1) / seg;
  gemm_op one = g;
  one.k = seg;
  tiles_of(&one, &th, &tw, &rt, &ct);
  size_t es = em_dtype_size(dt);
  void *part = malloc((size_t)(nseg * m * n) * es);
  if (!part) return em_fail(EM_ERR_OUT_OF_MEMORY, "convolution: no memory for partial weight gradients");
#pragma omp parallel for schedule(dynamic, 1) num_threads(em_cpu_threads())
  for (int64_t t = 0; t < nseg * rt * ct; t++) {
    int64_t s = t / (rt * ct), r = t % (rt * ct), i0 = r / ct * th, j0 = r % ct * tw;
    int64_t h = m - i0 < th ? m - i0 : th, w = n - j0 < tw ? n - j0 : tw, k0 = s * seg;
    blas_block(&g, i0, h, j0, w, k0, k - k0 < seg ? k - k0 : seg, 0,
               (char *)part + (size_t)(s * m * n + i0 * n + j0) * es, n);
  }
  add_partials(dt, part, nseg, m, n, accumulate, C, ldc);
  free(part);
  return EM_OK;
}

/* Items n0..n0+nb-1 of a [N, ch, P] tensor into [ch, nb * P]. */
static void pack_items(const void *src, int64_t n0, int64_t nb, int64_t ch, int64_t P, size_t es, void *dst) {
  int64_t rows = ch * nb;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (rows * P > 32768)
  for (int64_t r = 0; r < rows; r++) {
    int64_t c = r / nb, b = r % nb;
    memcpy(at(dst, c * nb * P + b * P, es), cat(src, ((n0 + b) * ch + c) * P, es), (size_t)P * es);
  }
}

static void col2im(em_dtype dt, const conv_geom *gm, const void *col, int64_t nb, void *img) {
  if (dt == EM_F32) col2im_f32(gm, col, nb, img);
  else col2im_f64(gm, col, nb, img);
}


/* The buffers of the batched col2im path: B items' column matrix and, when B > 1, room for
 * B items of the column side in the packed [co, B * P] layout (+ 1: malloc(0) may be NULL). */
static em_status chunk_buffers(const conv_geom *gm, size_t es, const char *what, int64_t *B, void **col, void **tmp) {
  int64_t P = prod3(gm->col);
  *B = chunk_items(gm);
  *col = malloc((size_t)(gm->ci * prod3(gm->k) * *B * P) * es + 1);
  *tmp = *B > 1 ? malloc((size_t)(gm->co * *B * P) * es + 1) : NULL;
  return !*col || (*B > 1 && !*tmp) ? oom(what) : EM_OK;
}

/* Items n0..n0+nb-1 of the column side dy [N, co, P] as a packed [co, nb * P] matrix: one item
 * already has that layout in place, more are packed into tmp. */
static const void *packed_items(const conv_geom *gm, const void *dy, int64_t n0, int64_t nb, size_t es, void *tmp) {
  int64_t P = prod3(gm->col);
  if (nb == 1) return cat(dy, n0 * gm->co * P, es);
  pack_items(dy, n0, nb, gm->co, P, es, tmp);
  return tmp;
}

/* Threads for a fused pass (img_to_col_tiled, weight_grad_tiled) of `items` work items: one
 * below PAR_WORK multiply-adds in all, else up to one per item. */
static int fused_threads(const conv_geom *gm, int64_t items) {
  double work = (double)gm->n * (double)prod3(gm->col) * (double)gm->co * (double)(gm->ci / gm->g * prod3(gm->k));
  int t = em_cpu_threads();
  if (work < PAR_WORK || items <= 1) return 1;
  return items < t ? (int)items : t;
}

/* The general forward, fused: work items are (item, tile of output positions, group, tile
 * of the group's output channels); each builds its window of the group's column matrix in
 * a per-thread buffer (kept when the thread's next item shares it) and multiplies it into
 * y at once. A whole batch's column matrix (taps times the image) went through memory
 * before; now the window stays in cache. Tile extents depend on the shapes alone and
 * every element comes from one single-threaded BLAS call, so the bits do not depend on
 * the thread count. */
static em_status img_to_col_tiled(const conv_geom *gm, em_dtype dt, const void *x, const void *w, const void *bias,
                                  void *y) {
  size_t es = em_dtype_size(dt);
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img);
  const int64_t cig = gm->ci / gm->g, cog = gm->co / gm->g, kc = cig * nt;
  const int64_t tw = tile_extent(P, TILE_N), th = tile_extent(cog, TILE_M), ct = (P + tw - 1) / tw;
  const int64_t rt = (cog + th - 1) / th, items = gm->n * ct * gm->g * rt;
  gemm_op probe = {dt, 0, 0, cog, tw, kc, w, kc, NULL, tw};
  em_status st = blas_limits(&probe, P);
  if (st || (st = em_blas_ready())) return st;
  const int threads = fused_threads(gm, items);
  void *buf = malloc((size_t)(kc * tw) * es * (size_t)threads + 1);
  if (!buf) return oom("im2col windows");
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    void *col = at(buf, (int64_t)omp_get_thread_num() * kc * tw, es);
    int64_t built = -1; /* the (item, position tile, group) whose window col holds */
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      int64_t win = it / rt, i0 = it % rt * th, g = win % gm->g, n = win / gm->g / ct;
      int64_t p0 = win / gm->g % ct * tw, wd = P - p0 < tw ? P - p0 : tw;
      if (win != built) {
        if (dt == EM_F32) im2col_window_f32(gm, (const float *)x + n * gm->ci * Q, g * cig, (g + 1) * cig, p0, wd, col);
        else im2col_window_f64(gm, (const double *)x + n * gm->ci * Q, g * cig, (g + 1) * cig, p0, wd, col);
        built = win;
      }
      gemm_op op = {dt, 0, 0, cog, wd, kc, cat(w, g * cog * kc, es), kc, col, wd};
      const int64_t h = cog - i0 < th ? cog - i0 : th;
      void *C = at(y, (n * gm->co + g * cog + i0) * P + p0, es);
      if (bias) { /* the tile starts as its channels' biases and the product adds to it */
        if (dt == EM_F32) fill_rows_f32((const float *)bias + g * cog + i0, h, wd, P, C);
        else fill_rows_f64((const double *)bias + g * cog + i0, h, wd, P, C);
      }
      blas_block(&op, i0, h, 0, wd, 0, kc, bias != NULL, C, P);
    }
  }
  free(buf);
  return EM_OK;
}

/* image [N, ci, img] -> column [N, co, col] (+ bias per column channel). */
static em_status img_to_col(const conv_geom *gm, em_dtype dt, const void *x, const void *w, const void *bias, void *y) {
  size_t es = em_dtype_size(dt);
  int64_t P = prod3(gm->col), Q = prod3(gm->img);
  int64_t cig = gm->ci / gm->g, cog = gm->co / gm->g;
  em_status st = EM_OK;
  dw_pad pad;
  if (is_depthwise(gm) && dw_fwd_pad(gm, &pad))
    return dt == EM_F32 ? dw_fwd_f32(gm, &pad, x, w, bias, y) : dw_fwd_f64(gm, &pad, x, w, bias, y);
  if (is_pointwise(gm)) {
    /* the products add to the biases (as img_to_col_tiled's do): OpenBLAS with beta 0 first
     * zeroes its output, a pass as long as add_bias's (8% of MobileNet-V2's inference) */
    if (bias && dt == EM_F32) set_bias_f32(bias, gm->n, gm->co, P, y);
    else if (bias) set_bias_f64(bias, gm->n, gm->co, P, y);
    for (int64_t n = 0; n < gm->n && !st; n++)
      for (int64_t g = 0; g < gm->g && !st; g++)
        st = gemm(dt, 0, 0, cog, P, cig, cat(w, g * cog * cig, es), cig, cat(x, (n * gm->ci + g * cig) * Q, es), Q,
                  bias != NULL, at(y, (n * gm->co + g * cog) * P, es), P);
    return st;
  } else if (gm->n > 0 && P > 0) {
    return img_to_col_tiled(gm, dt, x, w, bias, y); /* adds the bias itself */
  }
  if (!st && bias) {
    if (dt == EM_F32) add_bias_f32(bias, gm->n, gm->co, P, y);
    else add_bias_f64(bias, gm->n, gm->co, P, y);
  }
  return st;
}

/* Whether col_to_img_as_conv applies and pays: every stride 1, (k - 1) d - pb within int64, and
 * the image side at most 5/4 of the column side. Its products then do about the multiply-adds
 * of col2im's (image positions x co x taps against column positions x co x taps) in larger
 * reductions, and nothing is scattered. A convolution without padding has a larger image side
 * (LeNet's conv2: 14x14 from 10x10), whose adjoint as a convolution multiplies that much
 * padding: there the GEMM into the column matrix and col2im do half the work. */
static int adjoint_as_conv(const conv_geom *gm) {
  if (4 * (double)prod3(gm->img) > 5 * (double)prod3(gm->col)) return 0;
  for (int i = 0; i < SP; i++) {
    int64_t reach, pb;
    if (gm->s[i] != 1 || __builtin_mul_overflow(gm->k[i] - 1, gm->d[i], &reach) ||
        __builtin_sub_overflow(reach, gm->pb[i], &pb))
      return 0;
  }
  return 1;
}

/* With every stride 1, the adjoint of img_to_col is itself a convolution: over the column
 * side (dy, co channels) with the kernel flipped and its channel axes swapped, the same
 * dilations, begin pads (k - 1) d - pb, giving the image side. Run through the fused
 * forward, its products reduce over co x taps (576 for a 3x3 layer of 64 channels)
 * instead of co alone (64), and no whole column matrix goes through memory. */
static em_status col_to_img_as_conv(const conv_geom *gm, em_dtype dt, const void *dy, const void *w, void *dx) {
  size_t es = em_dtype_size(dt);
  const int64_t nt = prod3(gm->k), cig = gm->ci / gm->g, cog = gm->co / gm->g;
  conv_geom f = *gm;
  f.ci = gm->co, f.co = gm->ci;
  for (int i = 0; i < SP; i++) {
    f.img[i] = gm->col[i], f.col[i] = gm->img[i], f.s[i] = 1;
    f.pb[i] = (gm->k[i] - 1) * gm->d[i] - gm->pb[i]; /* no overflow: adjoint_as_conv */
  }
  /* w [co, cig, taps] -> w' [ci, cog, taps]: w'[g cig + c, m, t] = w[g cog + m, c, taps - 1 - t] */
  void *wf = malloc((size_t)(gm->co * cig * nt) * es + 1);
  if (!wf) return oom("flipped weights");
  for (int64_t g = 0; g < gm->g; g++)
    for (int64_t c = 0; c < cig; c++)
      for (int64_t m = 0; m < cog; m++)
        for (int64_t t = 0; t < nt; t++)
          memcpy(at(wf, ((g * cig + c) * cog + m) * nt + t, es), cat(w, ((g * cog + m) * cig + c) * nt + nt - 1 - t, es),
                 es);
  em_status st = img_to_col_tiled(&f, dt, dy, wf, NULL, dx);
  free(wf);
  return st;
}

/* The general adjoint, fused: work items are (item, group); each multiplies the group's weights
 * (transposed) by the item's column side into a per-thread column matrix [cig x taps, P] and
 * scatters it into the item's image planes (col2im), so the column matrix stays in cache
 * instead of a batch's going through memory. One single-threaded BLAS call per item and group
 * and a fixed scatter order: the bits do not depend on the thread count. Taken when a column
 * matrix of one item is at most FUSED_COL_BYTES. */
#define FUSED_COL_BYTES ((int64_t)4 << 20)
static int col_to_img_fits(const conv_geom *gm, size_t es) {
  double bytes = (double)(gm->ci / gm->g) * (double)prod3(gm->k) * (double)prod3(gm->col) * (double)es;
  return bytes <= (double)FUSED_COL_BYTES;
}

static em_status col_to_img_fused(const conv_geom *gm, em_dtype dt, const void *dy, const void *w, void *dx) {
  size_t es = em_dtype_size(dt);
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img);
  const int64_t cig = gm->ci / gm->g, cog = gm->co / gm->g, kc = cig * nt, items = gm->n * gm->g;
  gemm_op probe = {dt, 1, 0, kc, P, cog, w, kc, dy, P};
  em_status st = blas_limits(&probe, P);
  if (st || (st = em_blas_ready())) return st;
  const int threads = fused_threads(gm, items);
  void *buf = malloc((size_t)(kc * P) * es * (size_t)threads + 1);
  if (!buf) return oom("col2im windows");
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    void *col = at(buf, (int64_t)omp_get_thread_num() * kc * P, es);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      int64_t n = it / gm->g, g = it % gm->g;
      gemm_op op = {dt, 1, 0, kc, P, cog, cat(w, g * cog * kc, es), kc, cat(dy, (n * gm->co + g * cog) * P, es), P};
      blas_block(&op, 0, kc, 0, P, 0, cog, 0, col, P);
      for (int64_t c = 0; c < cig; c++) {
        void *plane = at(dx, (n * gm->ci + g * cig + c) * Q, es);
        if (dt == EM_F32) col2im_plane_f32(gm, (const float *)col + c * nt * P, P, plane);
        else col2im_plane_f64(gm, (const double *)col + c * nt * P, P, plane);
      }
    }
  }
  free(buf);
  return EM_OK;
}

/* column [N, co, col] -> image [N, ci, img] (+ bias per image channel): the adjoint of img_to_col. */
static em_status col_to_img(const conv_geom *gm, em_dtype dt, const void *dy, const void *w, const void *bias, void *dx) {
  size_t es = em_dtype_size(dt);
  int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img);
  int64_t cig = gm->ci / gm->g, cog = gm->co / gm->g, kc = cig * nt;
  em_status st = EM_OK;
  dw_pad pad = {0};
  if (is_depthwise(gm) && (gm->s[2] != 1 || dw_adj_pad(gm, &pad))) { /* strides > 1 scatter, no padding */
    st = dt == EM_F32 ? dw_adj_f32(gm, &pad, dy, w, dx) : dw_adj_f64(gm, &pad, dy, w, dx);
  } else if (is_pointwise(gm)) {
    for (int64_t n = 0; n < gm->n && !st; n++)
      for (int64_t g = 0; g < gm->g && !st; g++)
        st = gemm(dt, 1, 0, cig, P, cog, cat(w, g * cog * cig, es), cig, cat(dy, (n * gm->co + g * cog) * P, es), P, 0,
                  at(dx, (n * gm->ci + g * cig) * Q, es), Q);
  } else if (gm->n > 0 && Q > 0 && adjoint_as_conv(gm)) {
    st = col_to_img_as_conv(gm, dt, dy, w, dx);
  } else if (gm->n > 0 && Q > 0 && P > 0 && col_to_img_fits(gm, es)) {
    st = col_to_img_fused(gm, dt, dy, w, dx);
  } else if (gm->n > 0) {
    int64_t B;
    void *col, *tmp;
    st = chunk_buffers(gm, es, "col2im", &B, &col, &tmp);
    for (int64_t n0 = 0; n0 < gm->n && !st; n0 += B) {
      int64_t nb = gm->n - n0 < B ? gm->n - n0 : B, ld = nb * P;
      const void *src = packed_items(gm, dy, n0, nb, es, tmp);
      for (int64_t g = 0; g < gm->g && !st; g++)
        st = gemm(dt, 1, 0, kc, ld, cog, cat(w, g * cog * kc, es), kc, cat(src, g * cog * ld, es), ld, 0,
                  at(col, g * kc * ld, es), ld);
      if (!st) col2im(dt, gm, col, nb, at(dx, n0 * gm->ci * Q, es));
    }
    free(col);
    free(tmp);
  }
  if (!st && bias) {
    if (dt == EM_F32) add_bias_f32(bias, gm->n, gm->ci, Q, dx);
    else add_bias_f64(bias, gm->n, gm->ci, Q, dx);
  }
  return st;
}

/* The general weight gradient, fused like the forward: dw [co, cig x taps] sums, over the
 * windows (item, tile of positions), dy's window times the window of the column matrix.
 * The windows are cut into segments (by the shapes alone); a work item (segment, group,
 * tile of output channels, tile of image channels) builds each of its windows' columns
 * for its channels in a per-thread buffer and accumulates the product into the segment's
 * partial result, window after window; the partials are then added in segment order. So
 * every sum has a fixed order, and no whole column matrix goes through memory. */
static em_status weight_grad_tiled(const conv_geom *gm, em_dtype dt, const void *x, const void *dy, void *dw) {
  size_t es = em_dtype_size(dt);
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img);
  const int64_t cig = gm->ci / gm->g, cog = gm->co / gm->g, kc = cig * nt, whole = gm->co * kc;
  const int64_t tw = tile_extent(P, TILE_N), ct = (P + tw - 1) / tw, windows = gm->n * ct;
  const int64_t th = tile_extent(cog, TILE_M), rt = (cog + th - 1) / th;
  const int64_t cc = tile_extent(cig, nt < 2 * TILE_N ? 2 * TILE_N / nt : 1), crt = (cig + cc - 1) / cc;
  int64_t nseg = PARTIAL_ELEMS / (whole > 0 ? whole : 1), few = WGRAD_PARTIALS / (whole > 0 ? whole : 1);
  if (nseg > few) nseg = few;
  if (nseg > 64) nseg = 64;
  if (nseg > windows) nseg = windows;
  if (nseg < 1) nseg = 1;
  const int64_t seg = (windows + nseg - 1) / nseg;
  nseg = (windows + seg - 1) / seg;
  gemm_op probe = {dt, 0, 1, cog, kc, tw, dy, P, NULL, tw};
  em_status st = blas_limits(&probe, kc);
  if (st || (st = em_blas_ready())) return st;
  void *part = nseg > 1 ? malloc((size_t)(nseg * whole) * es) : dw; /* one segment: straight into dw */
  if (!part) return oom("partial weight gradients");
  const int64_t items = nseg * gm->g * rt * crt;
  const int threads = fused_threads(gm, items);
  void *buf = malloc((size_t)(cc * nt * tw) * es * (size_t)threads + 1);
  if (!buf) {
    if (part != dw) free(part);
    return oom("im2col windows");
  }
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    void *col = at(buf, (int64_t)omp_get_thread_num() * cc * nt * tw, es);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      int64_t s = it / (gm->g * rt * crt), rest = it % (gm->g * rt * crt);
      int64_t g = rest / (rt * crt), i0 = rest / crt % rt * th, c0 = rest % crt * cc;
      int64_t h = cog - i0 < th ? cog - i0 : th, cw = cig - c0 < cc ? cig - c0 : cc;
      void *C = at(part, (nseg > 1 ? s * whole : 0) + (g * cog + i0) * kc + c0 * nt, es);
      for (int64_t win = s * seg; win < (s + 1) * seg && win < windows; win++) {
        int64_t n = win / ct, p0 = win % ct * tw, wd = P - p0 < tw ? P - p0 : tw;
        const int64_t ch = g * cig + c0;
        if (dt == EM_F32) im2col_window_f32(gm, (const float *)x + n * gm->ci * Q, ch, ch + cw, p0, wd, col);
        else im2col_window_f64(gm, (const double *)x + n * gm->ci * Q, ch, ch + cw, p0, wd, col);
        gemm_op op = {dt, 0, 1, h, cw * nt, wd, cat(dy, (n * gm->co + g * cog + i0) * P + p0, es), P, col, wd};
        blas_block(&op, 0, h, 0, cw * nt, 0, wd, win > s * seg, C, kc);
      }
    }
  }
  free(buf);
  if (part != dw) {
    add_partials(dt, part, nseg, gm->co, kc, 0, dw, kc);
    free(part);
  }
  return EM_OK;
}

/* dw [co, ci/g, k] = sum over the batch of column-side dy times the image x. */
static em_status weight_grad(const conv_geom *gm, em_dtype dt, const void *x, const void *dy, void *dw) {
  size_t es = em_dtype_size(dt);
  int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img);
  int64_t cig = gm->ci / gm->g, cog = gm->co / gm->g, kc = cig * nt;
  em_status st = EM_OK;
  if (gm->n == 0) {
    memset(dw, 0, (size_t)(gm->co * kc) * es);
  } else if (is_depthwise(gm)) {
    if (dt == EM_F32) dw_wgrad_f32(gm, x, dy, dw);
    else dw_wgrad_f64(gm, x, dy, dw);
  } else if (is_pointwise(gm)) {
    for (int64_t n = 0; n < gm->n && !st; n++)
      for (int64_t g = 0; g < gm->g && !st; g++)
        st = gemm_reduce(dt, 0, 1, cog, cig, P, cat(dy, (n * gm->co + g * cog) * P, es), P,
                         cat(x, (n * gm->ci + g * cig) * Q, es), Q, n > 0, at(dw, g * cog * cig, es), cig);
  } else if (P == 0) {
    memset(dw, 0, (size_t)(gm->co * kc) * es); /* no positions: an empty sum */
  } else {
    st = weight_grad_tiled(gm, dt, x, dy, dw);
  }
  return st;
}

/* -------------------------------------------------------- portable mode ---
 * One loop per computation over its output elements, each element through
 * kernels/conv_math.h exactly as kernels/conv.cu computes it: the same sum in
 * the same order, so portable mode gives the GPU's bits. Split by output
 * element only, so the thread count does not matter. */

static cm_geom to_cm(const conv_geom *gm) {
  cm_geom c = {.n = gm->n, .ci = gm->ci, .co = gm->co, .g = gm->g};
  for (int i = 0; i < SP; i++) {
    c.img[i] = gm->img[i], c.col[i] = gm->col[i], c.k[i] = gm->k[i];
    c.s[i] = gm->s[i], c.d[i] = gm->d[i], c.pb[i] = gm->pb[i];
  }
  return c;
}

/* Whether `count` elements of `per` multiply-adds each are worth splitting over threads. */
static int portable_par(int64_t count, int64_t per) { return (double)count * (double)(per > 0 ? per : 1) > 32768.0; }

/* image -> column (+ bias per column channel): cm_fwd, a row of outputs at a time (cm_fwd_row:
 * the same additions per element, vectorised along the row). */
static void portable_fwd(const conv_geom *gm, em_dtype dt, const void *x, const void *w, const void *bias, void *y) {
  const cm_geom c = to_cm(gm);
  const int64_t rows = gm->n * gm->co * gm->col[0] * gm->col[1], W = gm->col[2];
  const int par = portable_par(rows * W, gm->ci / gm->g * prod3(gm->k));
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (par)
  for (int64_t r = 0; r < rows; r++) {
    int64_t oh = r % gm->col[1], od = r / gm->col[1] % gm->col[0], m = r / (gm->col[0] * gm->col[1]) % gm->co;
    int64_t n = r / (gm->col[0] * gm->col[1] * gm->co);
    if (dt == EM_F32) cm_fwd_row_f32(&c, x, w, bias, n, m, od, oh, (float *)y + r * W);
    else cm_fwd_row_f64(&c, x, w, bias, n, m, od, oh, (double *)y + r * W);
  }
}

/* column -> image (+ bias per image channel): cm_adj. */
static void portable_adj(const conv_geom *gm, em_dtype dt, const void *dy, const void *w, const void *bias, void *dx) {
  const cm_geom c = to_cm(gm);
  const int64_t count = cm_adj_count(&c);
  const int par = portable_par(count, gm->co / gm->g * prod3(gm->k));
  if (dt == EM_F32) {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (par)
    for (int64_t i = 0; i < count; i++) ((float *)dx)[i] = cm_adj_f32(&c, dy, w, bias, i);
  } else {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (par)
    for (int64_t i = 0; i < count; i++) ((double *)dx)[i] = cm_adj_f64(&c, dy, w, bias, i);
  }
}

/* The weight gradient from the image side and the column side: cm_wgrad. */
static void portable_wgrad(const conv_geom *gm, em_dtype dt, const void *img, const void *col, void *dw) {
  const cm_geom c = to_cm(gm);
  const int64_t count = cm_wgrad_count(&c);
  const int par = portable_par(count, gm->n * prod3(gm->col));
  if (dt == EM_F32) {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (par)
    for (int64_t i = 0; i < count; i++) ((float *)dw)[i] = cm_wgrad_f32(&c, img, col, i);
  } else {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (par)
    for (int64_t i = 0; i < count; i++) ((double *)dw)[i] = cm_wgrad_f64(&c, img, col, i);
  }
}

/* ------------------------------------------------------------------ ops --- */

static em_status conv_infer_common(em_op_args *a, int transpose) {
  conv_geom gm;
  em_status st = em_spatial_check_float(a);
  if (!st) st = geom_resolve(a, transpose, &a->in[0], &a->in[1], &gm, &a->out[0]);
  if (!st && a->n_in == 3) st = check_bias(a, &a->in[2], a->out[0].dims[1]);
  return st;
}

static em_status conv_infer(em_op_args *a) { return conv_infer_common(a, 0); }
static em_status conv_transpose_infer(em_op_args *a) { return conv_infer_common(a, 1); }

/* conv_geom's right-aligned spatial axes as oneDNN's nsp axes. */
static em_dnnl_conv_geom to_dnnl(const conv_geom *gm) {
  em_dnnl_conv_geom d = {.nsp = gm->nsp, .n = gm->n, .ci = gm->ci, .co = gm->co, .groups = gm->g};
  for (int i = 0; i < gm->nsp; i++) {
    const int j = SP - gm->nsp + i;
    d.img[i] = gm->img[j], d.col[i] = gm->col[j], d.k[i] = gm->k[j];
    d.s[i] = gm->s[j], d.d[i] = gm->d[j], d.pb[i] = gm->pb[j];
  }
  return d;
}

/* The geometry of the op's own inputs x (index ix) and w (index iw) at run time. */
static em_status run_geom(const em_op_args *a, int transpose, em_tensor *const *in, int ix, int iw, conv_geom *gm,
                          em_shape *y) {
  em_shape xs, ws;
  em_shape_of(in[ix], &xs);
  em_shape_of(in[iw], &ws);
  return geom_resolve(a, transpose, &xs, &ws, gm, y);
}

/* The ops fused into this convolution (a->post) as oneDNN's post-op; NULL where none, and for
 * relu and clip: oneDNN's turn a NaN into 0 (a max with 0), where Ember's, like the unfused
 * steps, keep it (a NaN must not vanish in fast mode); those run as em_post_apply right after
 * the convolution. Its x * sigmoid(x) keeps NaNs and infinities as Ember's does. */
static const em_dnnl_post *dnnl_post_of(const em_op_args *a, em_dnnl_post *out) {
  if (!a->post || a->post->kind != EM_POST_SWISH) return NULL;
  out->kind = (int)a->post->kind;
  return out;
}

/* Channels-last x and y (op.h, engine/layout.c) in fast mode, where oneDNN takes the case:
 * its NHWC kernels read and write them with no reorder, so a chain of convolutions and
 * element-wise ops stays in that layout (the executor allows y to be channels-last only where
 * every reader of it takes that). */
static em_status conv_layout(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c) {
  c->as_is = 0, c->out_channels_last = 0;
  if (a->portable || em_tensor_dtype(in[0]) != EM_F32) return EM_OK;
  const int x_cl = !em_tensor_is_contiguous(in[0]) && em_tensor_is_channels_last(in[0]);
  if (!x_cl && !out_may) return EM_OK;
  conv_geom gm;
  em_shape y;
  em_status st = run_geom(a, 0, in, 0, 1, &gm, &y);
  if (st) return st;
  const em_dnnl_conv_geom dg = to_dnnl(&gm);
  em_dnnl_post post;
  int yes = 0;
  if ((st = em_dnnl_conv_takes(&dg, a->n_in == 3, x_cl, out_may, dnnl_post_of(a, &post), &yes)) || !yes) return st;
  c->as_is = (uint64_t)x_cl;
  c->out_channels_last = out_may;
  return EM_OK;
}

static em_status conv_own(const em_op_args *a, const conv_geom *gm, em_tensor *const *in, em_tensor *const *out,
                          const void *bias);

/* The ops fused into this convolution (if any), as they would have run after it. */
static em_status fused_tail(const em_op_args *a, em_tensor *y) { return a->post ? em_post_apply(a->post, y) : EM_OK; }

static em_status conv_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  conv_geom gm;
  em_shape y;
  em_status st = run_geom(a, 0, in, 0, 1, &gm, &y);
  if (st) return st;
  const void *bias = a->n_in == 3 ? em_tensor_data(in[2]) : NULL;
  const int x_cl = !em_tensor_is_contiguous(in[0]), y_cl = !em_tensor_is_contiguous(out[0]);
  /* Pointwise convolutions on contiguous tensors stay here: one GEMM over the NCHW data as it
   * is, where oneDNN's blocked kernels need reorders in and out that cost more than they save
   * (MobileNet-V2, one thread: 9.2 ms through them, 7.9 here); channels-last ones go to its
   * NHWC kernels, which need none, and so do those on single pixels (the squeeze-excitation
   * blocks' layers: NCHW is NHWC there, and OpenBLAS would pack the weights on every call). */
  if (!a->portable && em_tensor_dtype(in[0]) == EM_F32 &&
      (x_cl || y_cl || !is_pointwise(&gm) || (a->post && a->post->kind == EM_POST_SWISH) || prod3(gm.img) == 1)) {
    int done;
    const em_dnnl_conv_geom dg = to_dnnl(&gm);
    em_dnnl_post post;
    const em_dnnl_post *dp = dnnl_post_of(a, &post);
    st = em_dnnl_conv_fwd(&dg, in[1], em_tensor_data(in[0]), x_cl, bias, em_tensor_data(out[0]), y_cl, dp, &done);
    if (st) return st;
    if (done) return dp ? EM_OK : fused_tail(a, out[0]); /* dp: oneDNN applied the fused ops */
  }
  if (x_cl || y_cl) /* conv_layout asked oneDNN, which took the case then */
    return em_op_fail(a, "oneDNN declined a channels-last convolution it took when the layouts were chosen");
  st = conv_own(a, &gm, in, out, bias);
  return st ? st : fused_tail(a, out[0]);
}

/* conv_cpu's own paths: portable, or im2col + OpenBLAS. */
static em_status conv_own(const em_op_args *a, const conv_geom *gm, em_tensor *const *in, em_tensor *const *out,
                          const void *bias) {
  if (a->portable) {
    portable_fwd(gm, em_tensor_dtype(in[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), bias,
                 em_tensor_data(out[0]));
    return EM_OK;
  }
  return img_to_col(gm, em_tensor_dtype(in[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), bias,
                    em_tensor_data(out[0]));
}

/* f16 and bf16 in a gpu member (EM_HALF_GPU_NATIVE): 1 when cuDNN takes them as they are;
 * else 0 and *st is the member `self` run on f32 copies, with the reason reported. */
static int half_road(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const cm_geom *c,
                     em_op_kernel self, em_status *st) {
  const em_dtype dt = em_tensor_dtype(in[0]);
  char why[200];
  if ((dt != EM_F16 && dt != EM_BF16) || em_conv_gpu_half_takes(a, c, why, sizeof why)) return 1;
  *st = em_ops_half_via_f32(a, in, out, self, why);
  return 0;
}

/* What a gpu member returns: st, except that a half convolution cuDNN declined at run time
 * (em_conv_gpu_*: EM_ERR_UNSUPPORTED; Ember's kernels have no half form) runs as `self` on f32
 * copies, the decline reported as the reason. f32 and f64 declines never come back here: they
 * take Ember's kernels in ops/conv_gpu.c. */
static em_status half_declined(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel self,
                               em_status st) {
  const em_dtype dt = em_tensor_dtype(in[0]);
  if (st != EM_ERR_UNSUPPORTED || (dt != EM_F16 && dt != EM_BF16)) return st;
  char why[300];
  snprintf(why, sizeof why, "%s", em_last_error());
  em_clear_error();
  return em_ops_half_via_f32(a, in, out, self, why);
}

static em_status conv_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  conv_geom gm;
  em_shape y;
  em_status st = run_geom(a, 0, in, 0, 1, &gm, &y);
  if (st) return st;
  const cm_geom c = to_cm(&gm);
  if (!half_road(a, in, out, &c, conv_gpu, &st)) return st;
  st = em_conv_gpu_fwd(a, em_tensor_dtype(in[0]), &c, em_tensor_data(in[0]), em_tensor_data(in[1]),
                       a->n_in == 3 ? em_tensor_data(in[2]) : NULL, em_tensor_data(out[0]));
  return half_declined(a, in, out, conv_gpu, st);
}

static em_status conv_transpose_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  conv_geom gm;
  em_shape y;
  em_status st = run_geom(a, 1, in, 0, 1, &gm, &y);
  if (st) return st;
  const void *bias = a->n_in == 3 ? em_tensor_data(in[2]) : NULL;
  if (a->portable) {
    portable_adj(&gm, em_tensor_dtype(in[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), bias,
                 em_tensor_data(out[0]));
    return EM_OK;
  }
  return col_to_img(&gm, em_tensor_dtype(in[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), bias,
                    em_tensor_data(out[0]));
}

static em_status conv_transpose_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  conv_geom gm;
  em_shape y;
  em_status st = run_geom(a, 1, in, 0, 1, &gm, &y);
  if (st) return st;
  const cm_geom c = to_cm(&gm);
  if (!half_road(a, in, out, &c, conv_transpose_gpu, &st)) return st;
  st = em_conv_gpu_adj(a, em_tensor_dtype(in[0]), &c, em_tensor_data(in[0]), em_tensor_data(in[1]),
                       a->n_in == 3 ? em_tensor_data(in[2]) : NULL, em_tensor_data(out[0]));
  return half_declined(a, in, out, conv_transpose_gpu, st);
}

/* Backward of both ops: the gradient ops get the forward's attributes plus transpose. */
static em_status conv_family_backward(em_graph *g, const em_op_args *a, int transpose, const em_var *x,
                                      const em_var *dy, em_var *din) {
  if (dy[0] < 0) return EM_OK;
  em_attr *at = malloc(sizeof *at * (size_t)(a->n_attrs + 1));
  if (!at) return oom("gradient attributes");
  int n = 0;
  for (int i = 0; i < a->n_attrs; i++)
    if (!a->attrs[i].name || strcmp(a->attrs[i].name, "transpose")) at[n++] = a->attrs[i];
  at[n++] = em_attr_i("transpose", transpose);
  em_var gi[3] = {dy[0], x[1], x[0]}, gw[3] = {x[0], dy[0], x[1]};
  em_status st = em_apply(g, "_conv_grad_input", gi, 3, at, n, &din[0], 1);
  if (!st) st = em_apply(g, "_conv_grad_weight", gw, 3, at, n, &din[1], 1);
  if (!st && a->n_in == 3) st = em_apply(g, "_conv_grad_bias", &dy[0], 1, NULL, 0, &din[2], 1);
  free(at);
  return st;
}

static em_status conv_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                               em_var *din) {
  (void)y;
  return conv_family_backward(g, a, 0, x, dy, din);
}

static em_status conv_transpose_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y,
                                         const em_var *dy, em_var *din) {
  (void)y;
  return conv_family_backward(g, a, 1, x, dy, din);
}

static em_status transpose_attr(const em_op_args *a, int *t) {
  int64_t v;
  em_status st = em_spatial_int_attr(a, "transpose", 0, 0, INT64_MAX, &v);
  if (!st && v > 1) st = em_op_fail(a, "attribute transpose is %lld; expected 0 or 1", (long long)v);
  *t = (int)v;
  return st;
}

/* The gradient dy (input idy) must have the forward output's shape. */
static em_status grad_infer(em_op_args *a, int idy, int ix, int iw, int iout) {
  int t;
  conv_geom gm;
  em_shape y;
  em_status st = em_spatial_check_float(a);
  if (!st) st = transpose_attr(a, &t);
  if (!st) st = geom_resolve(a, t, &a->in[ix], &a->in[iw], &gm, &y);
  if (!st) st = em_spatial_check_grad(a, &a->in[idy], &y);
  if (st) return st;
  a->out[0] = a->in[iout];
  return EM_OK;
}

/* _conv_grad_input(dy, w, x) */
static em_status grad_input_infer(em_op_args *a) { return grad_infer(a, 0, 2, 1, 2); }

static em_status grad_input_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int t;
  conv_geom gm;
  em_shape y;
  em_status st = transpose_attr(a, &t);
  if (!st) st = run_geom(a, t, in, 2, 1, &gm, &y);
  if (st) return st;
  em_dtype dt = em_tensor_dtype(in[0]);
  const void *dy = em_tensor_data(in[0]), *w = em_tensor_data(in[1]);
  void *dx = em_tensor_data(out[0]);
  if (a->portable) {
    if (!t) portable_adj(&gm, dt, dy, w, NULL, dx);
    else portable_fwd(&gm, dt, dy, w, NULL, dx);
    return EM_OK;
  }
  if (!t) return col_to_img(&gm, dt, dy, w, NULL, dx);
  return img_to_col(&gm, dt, dy, w, NULL, dx);
}

static em_status grad_input_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int t;
  conv_geom gm;
  em_shape y;
  em_status st = transpose_attr(a, &t);
  if (!st) st = run_geom(a, t, in, 2, 1, &gm, &y);
  if (st) return st;
  const cm_geom c = to_cm(&gm);
  if (!half_road(a, in, out, &c, grad_input_gpu, &st)) return st;
  const em_dtype dt = em_tensor_dtype(in[0]);
  const void *dy = em_tensor_data(in[0]), *w = em_tensor_data(in[1]);
  st = t ? em_conv_gpu_fwd(a, dt, &c, dy, w, NULL, em_tensor_data(out[0]))
         : em_conv_gpu_adj(a, dt, &c, dy, w, NULL, em_tensor_data(out[0]));
  return half_declined(a, in, out, grad_input_gpu, st);
}

/* _conv_grad_weight(x, dy, w) */
static em_status grad_weight_infer(em_op_args *a) { return grad_infer(a, 1, 0, 2, 2); }

static em_status grad_weight_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int t;
  conv_geom gm;
  em_shape y;
  em_status st = transpose_attr(a, &t);
  if (!st) st = run_geom(a, t, in, 0, 2, &gm, &y);
  if (st) return st;
  const void *x = em_tensor_data(in[0]), *dy = em_tensor_data(in[1]);
  /* convolution_transpose: its output gradient is the image side, its input the column side */
  if (a->portable) {
    portable_wgrad(&gm, em_tensor_dtype(in[0]), t ? dy : x, t ? x : dy, em_tensor_data(out[0]));
    return EM_OK;
  }
  return weight_grad(&gm, em_tensor_dtype(in[0]), t ? dy : x, t ? x : dy, em_tensor_data(out[0]));
}

static em_status grad_weight_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int t;
  conv_geom gm;
  em_shape y;
  em_status st = transpose_attr(a, &t);
  if (!st) st = run_geom(a, t, in, 0, 2, &gm, &y);
  if (st) return st;
  const cm_geom c = to_cm(&gm);
  if (!half_road(a, in, out, &c, grad_weight_gpu, &st)) return st;
  const void *x = em_tensor_data(in[0]), *dy = em_tensor_data(in[1]);
  st = em_conv_gpu_wgrad(a, em_tensor_dtype(in[0]), &c, t ? dy : x, t ? x : dy, em_tensor_data(out[0]));
  return half_declined(a, in, out, grad_weight_gpu, st);
}

/* _conv_grad_bias(dy) */
static em_status grad_bias_infer(em_op_args *a) {
  em_status st = em_spatial_check_float(a);
  if (st) return st;
  if (a->in[0].ndim < 2) return em_op_fail(a, "the gradient must be [N, C, ...], not rank %d", a->in[0].ndim);
  a->out[0].dtype = a->in[0].dtype;
  a->out[0].ndim = 1;
  a->out[0].dims[0] = a->in[0].dims[1];
  return EM_OK;
}

/* dy's batch, channels and positions (everything after axis 1). */
static void bias_grad_dims(const em_tensor *dy, int64_t *n, int64_t *ch, int64_t *P) {
  const int64_t *sh = em_tensor_shape(dy);
  *n = sh[0], *ch = sh[1], *P = 1;
  for (int i = 2; i < em_tensor_ndim(dy); i++) *P *= sh[i];
}

/* One order in both modes (kernels/conv_math.h, cm_bias_grad): a sum in double is already
 * as fast as the data can be read. */
static em_status grad_bias_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)a;
  int64_t n, ch, P;
  bias_grad_dims(in[0], &n, &ch, &P);
  const void *dy = em_tensor_data(in[0]);
  void *db = em_tensor_data(out[0]);
  if (em_tensor_dtype(in[0]) == EM_F32) {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n * ch * P > 32768)
    for (int64_t c = 0; c < ch; c++) ((float *)db)[c] = cm_bias_grad_f32(dy, n, ch, P, c);
  } else {
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n * ch * P > 32768)
    for (int64_t c = 0; c < ch; c++) ((double *)db)[c] = cm_bias_grad_f64(dy, n, ch, P, c);
  }
  return EM_OK;
}

static em_status grad_bias_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n, ch, P;
  bias_grad_dims(in[0], &n, &ch, &P);
  return em_conv_gpu_bias_grad(a, em_tensor_dtype(in[0]), em_tensor_data(in[0]), n, ch, P,
                               em_tensor_data(out[0]));
}

const em_op_def em_ops_conv[] = {
  {.name = "convolution",
   .doc = "N-d convolution of x [N,C,s...] with w [M,C/group,k...] (+ bias [M]); attrs strides, dilations, "
          "pads, auto_pad, group, kernel_shape",
   .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0,
   /* output_padding and output_shape are read only to refuse them with a precise message */
   .attrs = EM_ATTRS("group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding",
                     "output_shape"),
   .infer = conv_infer, .cpu = conv_cpu, .gpu = conv_gpu, .backward = conv_backward, .layout = conv_layout,
   .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  {.name = "convolution_transpose",
   .doc = "transposed convolution of x [N,C,s...] with w [C,M/group,k...] (+ bias [M]); attrs "
          "strides, dilations, pads, auto_pad, group, kernel_shape, output_padding, output_shape",
   .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0,
   .attrs = EM_ATTRS("group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding",
                     "output_shape"),
   .infer = conv_transpose_infer, .cpu = conv_transpose_cpu, .gpu = conv_transpose_gpu,
   .backward = conv_transpose_backward, .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  /* the gradient ops receive the forward's attributes wholesale, plus transpose */
  {.name = "_conv_grad_input",
   .doc = "gradient of convolution (transpose 0) or convolution_transpose (1) for x: (dy, w, x); "
          "the forward's attrs + transpose",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0,
   .attrs = EM_ATTRS("group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding",
                     "output_shape", "transpose"),
   .infer = grad_input_infer, .cpu = grad_input_cpu, .gpu = grad_input_gpu, .backward = NULL,
   .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  {.name = "_conv_grad_weight",
   .doc = "gradient of convolution (transpose 0) or convolution_transpose (1) for w: (x, dy, w); "
          "the forward's attrs + transpose",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0,
   .attrs = EM_ATTRS("group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding",
                     "output_shape", "transpose"),
   .infer = grad_weight_infer, .cpu = grad_weight_cpu, .gpu = grad_weight_gpu, .backward = NULL,
   .half = EM_HALF_VIA_F32 | EM_HALF_GPU_NATIVE},
  {.name = "_conv_grad_bias", .doc = "gradient of a convolution's bias: dy summed over N and the spatial axes",
   .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .no_grad = 0, .state_inputs = 0, .inplace = 0,
   /* a sum of dy, no convolution: nothing for cuDNN, so its half form is the f32 one */
   .attrs = EM_NO_ATTRS, .infer = grad_bias_infer, .cpu = grad_bias_cpu, .gpu = grad_bias_gpu, .backward = NULL,
   .half = EM_HALF_VIA_F32},
};
const size_t em_ops_conv_count = sizeof em_ops_conv / sizeof em_ops_conv[0];

#else /* ------------------------------------ type-generic kernels (CONV_T) --- */

#define R CONV_T

/* Columns [p0, p0 + w) of one item's column matrix, for image channels [c0, c1):
 * col[((c - c0) * taps + t) * w + (p - p0)], zero where a tap reads padding; the window of
 * output positions may span output rows. */
static void CONV_NAME(im2col_window)(const conv_geom *gm, const R *img, int64_t c0, int64_t c1, int64_t p0, int64_t w,
                                     R *col) {
  const int64_t nt = prod3(gm->k), Q = prod3(gm->img), rows = (c1 - c0) * nt;
  const int64_t *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;
  if (reads_no_padding(gm)) { /* every tap in the image: each output row's run is one plain copy */
    for (int64_t r = 0; r < rows; r++) {
      int64_t c = c0 + r / nt, t = r % nt, kd = t / (k[1] * k[2]), kh = t / k[2] % k[1], kw = t % k[2];
      const R *src = img + c * Q + (kd * in[1] + kh) * in[2] + kw;
      R *dst = col + r * w;
      int64_t p = p0, plane = out[1] * out[2], od = p / plane, oh = p % plane / out[2], ow = p % out[2];
      while (p < p0 + w) {
        int64_t seg = out[2] - ow < p0 + w - p ? out[2] - ow : p0 + w - p;
        const R *from = src + (od * in[1] + oh) * in[2] + ow;
        R *to = dst + (p - p0);
        for (int64_t o = 0; o < seg; o++) to[o] = from[o];
        p += seg;
        ow = 0;
        if (++oh == out[1]) oh = 0, od++;
      }
    }
    return;
  }
  for (int64_t r = 0; r < rows; r++) {
    int64_t c = c0 + r / nt, t = r % nt;
    int64_t kd = t / (k[1] * k[2]), kh = t / k[2] % k[1], kw = t % k[2], off = kw * d[2] - pb[2], lo, hi;
    valid_range(off, s[2], in[2], out[2], &lo, &hi);
    const R *src = img + c * Q;
    R *dst = col + r * w;
    int64_t p = p0, plane = out[1] * out[2];
    int64_t od = p / plane, oh = p % plane / out[2], ow = p % out[2];
    while (p < p0 + w) {
      int64_t seg = out[2] - ow < p0 + w - p ? out[2] - ow : p0 + w - p; /* to the end of the output row */
      int64_t id = od * s[0] - pb[0] + kd * d[0], ih = oh * s[1] - pb[1] + kh * d[1];
      R *drow = dst + (p - p0) - ow; /* indexed by ow */
      if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1]) {
        for (int64_t o = ow; o < ow + seg; o++) drow[o] = 0;
      } else {
        const R *srow = src + (id * in[1] + ih) * in[2];
        int64_t a = lo > ow ? lo : ow, b = hi < ow + seg ? hi : ow + seg;
        if (b < a) b = a;
        for (int64_t o = ow; o < a && o < ow + seg; o++) drow[o] = 0;
        if (s[2] == 1 && a < b) { /* a contiguous run: plain vector loads, not a strided gather (nor a memcpy
                                   * call: the runs are short, a row of the output). The pointers start at a:
                                   * srow + off alone can lie far outside the plane (a dilation of 2^62). */
          const R *from = srow + (a + off);
          R *to = drow + a;
#pragma omp simd
          for (int64_t o = 0; o < b - a; o++) to[o] = from[o];
        } else if (s[2] != 1) {
#pragma omp simd
          for (int64_t o = a; o < b; o++) drow[o] = srow[o * s[2] + off];
        }
        for (int64_t o = b > ow ? b : ow; o < ow + seg; o++) drow[o] = 0;
      }
      p += seg;
      ow = 0;
      if (++oh == out[1]) oh = 0, od++;
    }
  }
}

/* One image plane of the adjoint of im2col: dst (the plane, Q elements) is zeroed, then
 * accumulates its column rows col[t * ld + p] (t the taps, p the positions) tap by tap,
 * position by position (a fixed order). */
static void CONV_NAME(col2im_plane)(const conv_geom *gm, const R *col, int64_t ld, R *dst) {
  const int64_t nt = prod3(gm->k);
  const int64_t *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;
  memset(dst, 0, sizeof(R) * (size_t)prod3(gm->img));
  for (int64_t t = 0; t < nt; t++) {
    int64_t kd = t / (k[1] * k[2]), kh = t / k[2] % k[1], kw = t % k[2], off = kw * d[2] - pb[2], lo, hi;
    valid_range(off, s[2], in[2], out[2], &lo, &hi);
    const R *src = col + t * ld;
    for (int64_t od = 0; od < out[0]; od++) {
      int64_t id = od * s[0] - pb[0] + kd * d[0];
      if (id < 0 || id >= in[0]) continue;
      for (int64_t oh = 0; oh < out[1]; oh++) {
        int64_t ih = oh * s[1] - pb[1] + kh * d[1];
        if (ih < 0 || ih >= in[1]) continue;
        R *drow = dst + (id * in[1] + ih) * in[2];
        const R *srow = src + (od * out[1] + oh) * out[2];
        if (s[2] == 1) { /* contiguous: a plain vector loop, not a scatter */
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ow++) drow[ow + off] += srow[ow];
        } else {
#pragma omp simd /* distinct ow write distinct elements */
          for (int64_t ow = lo; ow < hi; ow++) drow[ow * s[2] + off] += srow[ow];
        }
      }
    }
  }
}

/* The adjoint of im2col for nb items (column matrix [ci * taps, nb * P]), plane by plane. */
static void CONV_NAME(col2im)(const conv_geom *gm, const R *col, int64_t nb, R *img) {
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img), planes = nb * gm->ci, ld = nb * P;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * P * nt > 32768)
  for (int64_t pl = 0; pl < planes; pl++) {
    int64_t b = pl / gm->ci, c = pl % gm->ci;
    CONV_NAME(col2im_plane)(gm, col + c * nt * ld + b * P, ld, img + pl * Q);
  }
}

/* For each kernel column kw: the valid output columns [lo[kw], hi[kw]). */
static void CONV_NAME(col_ranges)(const conv_geom *gm, int64_t *lo, int64_t *hi) {
  for (int64_t kw = 0; kw < gm->k[2]; kw++)
    valid_range(kw * gm->d[2] - gm->pb[2], gm->s[2], gm->img[2], gm->col[2], &lo[kw], &hi[kw]);
}

/* irow[o * s + off] += w * orow[o] for o in [lo, hi). */
static void CONV_NAME(scatter_row)(R *restrict irow, const R *restrict orow, R w, int64_t lo, int64_t hi, int64_t s,
                                   int64_t off) {
  if (s == 1) {
#pragma omp simd
    for (int64_t o = lo; o < hi; o++) irow[o + off] += w * orow[o];
  } else {
#pragma omp simd /* distinct o write distinct elements */
    for (int64_t o = lo; o < hi; o++) irow[o * s + off] += w * orow[o];
  }
}

/* A row segment [o0, o0 + GATHER_BLOCK) with its sums in registers: out[j] = b0 + the taps
 * t in order, tap t reading src[toff[t] + (o0 + j) * s] with weight tw[t]. GATHER_BLOCK
 * outputs make several independent vector sums at any vector width, so the adds overlap
 * instead of waiting on one register's latency. */
EM_INLINE static void CONV_NAME(gather_block)(R *restrict out, const R *restrict src, const int64_t *toff,
                                              const R *tw, int nt, int64_t o0, int64_t s, R b0, const int B) {
  R acc[GATHER_BLOCK];
#pragma GCC unroll 64
  for (int j = 0; j < B; j++) acc[j] = b0;
  if (s == 1) {
    for (int t = 0; t < nt; t++) {
      const R *p = src + (toff[t] + o0), wv = tw[t];
#pragma GCC unroll 64
      for (int j = 0; j < B; j++) acc[j] += wv * p[j];
    }
  } else {
    for (int t = 0; t < nt; t++) {
      const R *p = src + (toff[t] + o0 * s), wv = tw[t];
#pragma GCC unroll 64
      for (int j = 0; j < B; j++) acc[j] += wv * p[j * s];
    }
  }
#pragma GCC unroll 64
  for (int j = 0; j < B; j++) out[j] = acc[j];
}

/* The last len < GATHER_BLOCK outputs of a row, as gather_block but with the sums in memory. */
EM_INLINE static void CONV_NAME(gather_tail)(R *restrict out, const R *restrict src, const int64_t *toff,
                                             const R *tw, int nt, int64_t o0, int64_t len, int64_t s, R b0) {
  R acc[GATHER_BLOCK];
  for (int64_t j = 0; j < len; j++) acc[j] = b0;
  for (int t = 0; t < nt; t++) {
    const int64_t base = toff[t] + o0 * s;
    const R wv = tw[t];
    for (int64_t j = 0; j < len; j++) acc[j] += wv * src[base + j * s];
  }
  for (int64_t j = 0; j < len; j++) out[j] = acc[j];
}

/* One row of a depthwise gather over zero-padded source rows (pad_rows), where no tap
 * leaves its row: whole blocks, then the tail. This loop is where a depthwise convolution
 * spends its time, so it is cloned per vector ISA. Before the padding, row ends went
 * element by element with a branch per tap, and a 16-output block was one dependent chain
 * of adds at AVX-512 width: a 5x5 depthwise layer on 128x128 planes took 1.9 ms on one
 * thread, now 0.58 ms (bench_groupconv, 2026-11-21). */
EM_SIMD_CLONES static void CONV_NAME(gather_row)(R *out, int64_t n_out, const R *src, const int64_t *toff,
                                                 const R *tw, int nt, int64_t s, R b0) {
  int64_t o = 0;
  for (; o + GATHER_BLOCK <= n_out; o += GATHER_BLOCK)
    CONV_NAME(gather_block)(out + o, src, toff, tw, nt, o, s, b0, GATHER_BLOCK);
  /* then 16 at a time: the rows of MobileNet's 28, 14 and 7 wide planes were all tail */
  for (; o + 16 <= n_out; o += 16) CONV_NAME(gather_block)(out + o, src, toff, tw, nt, o, s, b0, 16);
  if (o == n_out) return;
  /* The rest as one more block that overlaps the one before: an output is computed from the
   * source alone, so computing it twice writes the same bits (rows of 56 and 28 outputs had
   * scalar tails of 8 and 12). Rows under 8 outputs go element by element. */
  if (n_out >= 16) CONV_NAME(gather_block)(out + n_out - 16, src, toff, tw, nt, n_out - 16, s, b0, 16);
  else if (n_out >= 8) {
    CONV_NAME(gather_block)(out, src, toff, tw, nt, 0, s, b0, 8);
    CONV_NAME(gather_block)(out + n_out - 8, src, toff, tw, nt, n_out - 8, s, b0, 8);
  } else CONV_NAME(gather_tail)(out + o, src, toff, tw, nt, o, n_out - o, s, b0);
}

/* rows rows of w values -> rows of Wp values: source column c at column c + left (columns
 * that fall outside are cut), zeros elsewhere. */
static void CONV_NAME(pad_rows)(const R *src, int64_t rows, int64_t w, int64_t left, int64_t Wp, R *dst) {
  int64_t c0 = left < 0 ? -left : 0, c1 = Wp - left < w ? Wp - left : w; /* source columns kept */
  for (int64_t r = 0; r < rows; r++) {
    R *d = dst + r * Wp;
    if (c1 <= c0) {
      for (int64_t c = 0; c < Wp; c++) d[c] = 0;
      continue;
    }
    for (int64_t c = 0; c < c0 + left; c++) d[c] = 0;
    memcpy(d + c0 + left, src + r * w + c0, sizeof(R) * (size_t)(c1 - c0));
    for (int64_t c = c1 + left; c < Wp; c++) d[c] = 0;
  }
}

/* One scratch area of `each` elements per thread that may run (one without OpenMP). */
static R *CONV_NAME(thread_scratch)(int64_t each, int threads) {
  return malloc(sizeof(R) * (size_t)(each > 0 ? each : 1) * (size_t)threads);
}

/* Depthwise image -> column, as a gather: each output element starts from its bias and adds
 * its taps in (kd, kh, kw) order; taps outside the image rows are skipped, those outside
 * its columns read the zeros of a padded copy of the plane (as im2col's zeros do in the
 * general path). Output channel m reads image channel m / (co / g). */
static em_status CONV_NAME(dw_fwd)(const conv_geom *gm, const dw_pad *pad, const R *x, const R *w, const R *bias,
                                   R *y) {
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img), planes = gm->n * gm->co, mult = gm->co / gm->g;
  const int64_t *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;
  if (planes == 0 || P == 0) return EM_OK;
  const int64_t Wp = pad->width, flat_w = Wp; /* a flat run's outputs per row */
  int64_t fa, fb;
  dw_flat_rows(gm, &fa, &fb);
  /* A column stride s: the padded plane is also split into its s column phases (rows of
   * s * wq), so each tap of a row of outputs reads contiguous elements (a strided gather was
   * most of MobileNet's depthwise time); stride 1 reads the padded plane itself, and so does
   * a single output column, whose stride never matters (Wp > s2 once out2 > 1, so the phases
   * take under 2 Wp per row; with out2 = 1 a stride like 2^40 or 2^62 would ask rows * s2). */
  const int64_t s2 = out[2] > 1 ? s[2] : 1, wq = (Wp + s2 - 1) / s2, phased = s2 > 1 ? pad->rows * s2 * wq : 0;
  const int64_t rw = s2 * wq; /* the distance between rows that the row path reads (Wp for stride 1) */
  int64_t kcol[k[2]]; /* kernel column kw's first element in a row: column kw d2's phase, then index */
  for (int64_t kw = 0; kw < k[2]; kw++) kcol[kw] = kw * d[2] % s2 * wq + kw * d[2] / s2;
  /* the padded plane, then a flat run's outputs or the phase-split plane */
  const int64_t plane = pad->elems + (fb - fa) * flat_w + phased;
  const int threads = dw_threads(planes * P * nt, planes, plane, (int64_t)sizeof(R));
  R *scratch = CONV_NAME(thread_scratch)(plane, threads);
  if (!scratch) return oom("a padded image plane");
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    R *xp = scratch + (size_t)omp_get_thread_num() * (size_t)plane, *run = xp + pad->elems;
    R *xs = s2 > 1 ? run : xp; /* what the row path reads */
    const R *padded = NULL; /* the image plane xp holds */
    const int64_t used = pad->rows * Wp;
    memset(xp + used, 0, sizeof(R) * (size_t)(pad->elems - used)); /* the zeros after the plane */
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
      int64_t n = pl / gm->co, m = pl % gm->co, toff[nt];
      R tw[nt];
      const R *src = x + (n * gm->ci + m / mult) * Q, *wm = w + m * nt, b0 = bias ? bias[m] : 0;
      if (src != padded) { /* multipliers share it */
        CONV_NAME(pad_rows)(src, pad->rows, in[2], pad->left, Wp, xp);
        if (s2 > 1) em_split_phases(xp, pad->rows, Wp, s2, wq, xs);
      }
      padded = src;
      if (fb > fa) {
        int ntap = 0;
        for (int64_t kh = 0; kh < k[1]; kh++)
          for (int64_t kw = 0; kw < k[2]; kw++, ntap++) {
            toff[ntap] = (fa * s[1] - pb[1] + kh * d[1]) * Wp + kw * d[2];
            tw[ntap] = wm[kh * k[2] + kw];
          }
        CONV_NAME(gather_row)(run, (fb - fa) * flat_w, xp, toff, tw, ntap, s[2], b0);
        for (int64_t oh = fa; oh < fb; oh++)
          memcpy(y + pl * P + oh * out[2], run + (oh - fa) * flat_w, sizeof(R) * (size_t)out[2]);
      }
      for (int64_t od = 0; od < out[0]; od++)
        for (int64_t oh = 0; oh < out[1]; oh++) {
          if (oh >= fa && oh < fb) continue; /* in the flat run */
          int ntap = 0; /* the taps of the kernel rows (kd, kh) that read image rows */
          for (int64_t kd = 0; kd < k[0]; kd++) {
            int64_t id = od * s[0] - pb[0] + kd * d[0];
            if (id < 0 || id >= in[0]) continue;
            for (int64_t kh = 0; kh < k[1]; kh++) {
              int64_t ih = oh * s[1] - pb[1] + kh * d[1];
              if (ih < 0 || ih >= in[1]) continue;
              for (int64_t kw = 0; kw < k[2]; kw++, ntap++) { /* column kw d2 + ow s2: phase, then element */
                toff[ntap] = (id * in[1] + ih) * rw + kcol[kw];
                tw[ntap] = wm[(kd * k[1] + kh) * k[2] + kw];
              }
            }
          }
          CONV_NAME(gather_row)(y + pl * P + (od * out[1] + oh) * out[2], out[2], xs, toff, tw, ntap, 1, b0);
        }
    }
  }
  free(scratch);
  return EM_OK;
}

/* Depthwise column -> image with a column stride of 1, as a gather: each image element adds
 * its group's output channels' taps in (m, kd, kh, kw) order, reading zero-padded copies
 * of those channels' dy planes (as dw_fwd reads the image). */
static em_status CONV_NAME(dw_adj_gather)(const conv_geom *gm, const dw_pad *pad, const R *dy, const R *w, R *dx) {
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img), planes = gm->n * gm->ci, mult = gm->co / gm->g;
  const int64_t *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;
  if (planes == 0 || Q == 0) return EM_OK;
  const int64_t left = pad->left, Wq = pad->width, plane = pad->rows * Wq; /* dw_adj_pad */
  const int threads = dw_threads(planes * Q * nt * mult, planes, pad->elems, (int64_t)sizeof(R));
  R *scratch = CONV_NAME(thread_scratch)(pad->elems, threads);
  if (!scratch) return oom("padded gradient planes");
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    R *dyp = scratch + (size_t)omp_get_thread_num() * (size_t)pad->elems;
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
      int64_t n = pl / gm->ci, c = pl % gm->ci, toff[mult * nt];
      R tw[mult * nt];
      for (int64_t j = 0; j < mult; j++)
        CONV_NAME(pad_rows)(dy + (n * gm->co + c * mult + j) * P, pad->rows, out[2], left, Wq, dyp + j * plane);
      for (int64_t id = 0; id < in[0]; id++)
        for (int64_t ih = 0; ih < in[1]; ih++) {
          int ntap = 0; /* the taps of the (m, kd, kh) whose output rows read this image row */
          for (int64_t j = 0; j < mult; j++)
            for (int64_t kd = 0; kd < k[0]; kd++) {
              int64_t td = id + pb[0] - kd * d[0], od = td / s[0];
              if (td < 0 || td % s[0] || od >= out[0]) continue;
              for (int64_t kh = 0; kh < k[1]; kh++) {
                int64_t th = ih + pb[1] - kh * d[1], oh = th / s[1];
                if (th < 0 || th % s[1] || oh >= out[1]) continue;
                for (int64_t kw = 0; kw < k[2]; kw++, ntap++) {
                  toff[ntap] = j * plane + (od * out[1] + oh) * Wq + pb[2] - kw * d[2] + left;
                  tw[ntap] = w[(c * mult + j) * nt + (kd * k[1] + kh) * k[2] + kw];
                }
              }
            }
          CONV_NAME(gather_row)(dx + pl * Q + (id * in[1] + ih) * in[2], in[2], dyp, toff, tw, ntap, 1, 0);
        }
    }
  }
  free(scratch);
  return EM_OK;
}

/* Depthwise column -> image for column strides > 1: each image plane is zeroed, then
 * accumulates its group's output channels tap by tap (a fixed order). */
static void CONV_NAME(dw_adj_scatter)(const conv_geom *gm, const R *dy, const R *w, R *dx) {
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img), planes = gm->n * gm->ci, mult = gm->co / gm->g;
  const int64_t *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;
  int64_t lo[k[2]], hi[k[2]];
  CONV_NAME(col_ranges)(gm, lo, hi);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * P * nt * mult > 32768)
  for (int64_t pl = 0; pl < planes; pl++) {
    int64_t n = pl / gm->ci, c = pl % gm->ci;
    R *dst = dx + pl * Q;
    memset(dst, 0, sizeof(R) * (size_t)Q);
    for (int64_t m = c * mult; m < (c + 1) * mult; m++) {
      const R *src = dy + (n * gm->co + m) * P, *wm = w + m * nt;
      for (int64_t od = 0; od < out[0]; od++)
        for (int64_t oh = 0; oh < out[1]; oh++) {
          const R *orow = src + (od * out[1] + oh) * out[2];
          for (int64_t kd = 0; kd < k[0]; kd++) {
            int64_t id = od * s[0] - pb[0] + kd * d[0];
            if (id < 0 || id >= in[0]) continue;
            for (int64_t kh = 0; kh < k[1]; kh++) {
              int64_t ih = oh * s[1] - pb[1] + kh * d[1];
              if (ih < 0 || ih >= in[1]) continue;
              R *irow = dst + (id * in[1] + ih) * in[2];
              for (int64_t kw = 0; kw < k[2]; kw++)
                CONV_NAME(scatter_row)(irow, orow, wm[(kd * k[1] + kh) * k[2] + kw], lo[kw], hi[kw], s[2],
                                       kw * d[2] - pb[2]);
            }
          }
        }
    }
  }
}

static em_status CONV_NAME(dw_adj)(const conv_geom *gm, const dw_pad *pad, const R *dy, const R *w, R *dx) {
  if (gm->s[2] == 1) return CONV_NAME(dw_adj_gather)(gm, pad, dy, w, dx);
  CONV_NAME(dw_adj_scatter)(gm, dy, w, dx);
  return EM_OK;
}

/* Depthwise weight gradient: one work item per (m, kd, kh) sums, in double, all its kernel
 * columns over the batch, then the rows, each row's dot product in vector lanes. */
static void CONV_NAME(dw_wgrad)(const conv_geom *gm, const R *x, const R *dy, R *dw) {
  const int64_t nt = prod3(gm->k), P = prod3(gm->col), Q = prod3(gm->img), mult = gm->co / gm->g;
  const int64_t *k = gm->k, *s = gm->s, *d = gm->d, *pb = gm->pb, *in = gm->img, *out = gm->col;
  const int64_t items = gm->co * k[0] * k[1], k2 = k[2], s2 = s[2];
  int64_t lo[k2], hi[k2];
  CONV_NAME(col_ranges)(gm, lo, hi);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (items * k2 * gm->n * P > 32768)
  for (int64_t e = 0; e < items; e++) {
    int64_t m = e / (k[0] * k[1]), kd = e / k[1] % k[0], kh = e % k[1];
    double acc[k2];
    for (int64_t kw = 0; kw < k2; kw++) acc[kw] = 0;
    for (int64_t n = 0; n < gm->n; n++) {
      const R *src = x + (n * gm->ci + m / mult) * Q, *g = dy + (n * gm->co + m) * P;
      for (int64_t od = 0; od < out[0]; od++) {
        int64_t id = od * s[0] - pb[0] + kd * d[0];
        if (id < 0 || id >= in[0]) continue;
        for (int64_t oh = 0; oh < out[1]; oh++) {
          int64_t ih = oh * s[1] - pb[1] + kh * d[1];
          if (ih < 0 || ih >= in[1]) continue;
          const R *irow = src + (id * in[1] + ih) * in[2], *grow = g + (od * out[1] + oh) * out[2];
          for (int64_t kw = 0; kw < k2; kw++) {
            int64_t off = kw * d[2] - pb[2];
            double part = 0; /* one row in vector lanes: a fixed order, whatever the thread count */
#pragma omp simd reduction(+ : part)
            for (int64_t ow = lo[kw]; ow < hi[kw]; ow++) part += (double)grow[ow] * (double)irow[ow * s2 + off];
            acc[kw] += part;
          }
        }
      }
    }
    for (int64_t kw = 0; kw < k2; kw++) dw[m * nt + (kd * k[1] + kh) * k2 + kw] = (R)acc[kw];
  }
}

/* Rows r < h of a tile (w wide, rows ld apart) set to b[r]. */
static void CONV_NAME(fill_rows)(const R *b, int64_t h, int64_t w, int64_t ld, R *C) {
  for (int64_t r = 0; r < h; r++) {
    R v = b[r], *row = C + r * ld;
#pragma omp simd
    for (int64_t p = 0; p < w; p++) row[p] = v;
  }
}

/* y[n, c, :] += b[c] */
static void CONV_NAME(add_bias)(const R *b, int64_t n, int64_t ch, int64_t P, R *y) {
  int64_t planes = n * ch;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * P > 32768)
  for (int64_t pl = 0; pl < planes; pl++) {
    R v = b[pl % ch], *row = y + pl * P;
#pragma omp simd
    for (int64_t p = 0; p < P; p++) row[p] += v;
  }
}

/* y[n, c, :] = b[c] */
static void CONV_NAME(set_bias)(const R *b, int64_t n, int64_t ch, int64_t P, R *y) {
  int64_t planes = n * ch;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (planes * P > 32768)
  for (int64_t pl = 0; pl < planes; pl++) CONV_NAME(fill_rows)(b + pl % ch, 1, P, P, y + pl * P);
}

#undef R
#endif
