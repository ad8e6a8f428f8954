/* Shape and indexing ops: they move elements (bytes, em_dtype_size at a
 * time) and so take every dtype (f32 f64 f16 bf16 i32 i64 u8 bool) unless
 * said otherwise. Gradients flow into float inputs only.
 *
 *   reshape        x; "shape" INTS: 0 copies x's dim at that position (ONNX),
 *                  one -1 is inferred. With a dynamic input axis, output dims
 *                  that cannot be known yet stay -1 until the run.
 *   reshape_like   x, like: x's elements in like's shape (same numel).
 *   transpose      x; "perm" INTS (output axis i is input axis perm[i];
 *                  default: reversed axes).
 *   squeeze        x; "axes" INTS (absent: every size-1 axis; then no axis
 *                  may be dynamic, since the run could make it 1).
 *   unsqueeze      x; "axes" INTS: positions of the new size-1 axes in the
 *   expand_dims    OUTPUT (negative count from the output's end).
 *   flatten        x; "axis" INT (default 1, in [-r, r]): 2-D
 *                  [prod(dims[:axis]), prod(dims[axis:])].
 *   slice          x; "starts", "ends" INTS, "axes" INTS (default 0..n-1),
 *                  "steps" INTS (default 1): ONNX Slice (negative starts and
 *                  ends count from the end and are clamped; negative steps
 *                  walk backwards; step 0 is refused).
 *   concat         x0..x15 (1 to 16 inputs, CNTK's splice); "axis" INT
 *                  (default 0): every other dim must match.
 *   pad            x; "pads" INTS [begin_0.., end_0..] (ONNX; negative pads
 *                  crop), "mode" STRING constant (default) | reflect | edge,
 *                  "value" FLOAT (default 0, constant mode). reflect mirrors
 *                  without repeating the edge (numpy), folding again when a
 *                  pad is wider than the axis.
 *   gather         data, indices (i32/i64); "axis" INT (default 0). Output
 *                  data.shape[:axis] + indices.shape + data.shape[axis+1:].
 *                  Negative indices count from the end; one out of range is
 *                  an error of the run naming the index and its position.
 *   one_hot        indices (i32/i64); "depth" INT (>= 1, required), "axis"
 *                  INT (default -1: the new axis is last), "dtype" INT
 *                  (em_dtype, default f32), "on_value"/"off_value" FLOAT
 *                  (1/0). Negative indices count from the end (index+depth);
 *                  indices outside [-depth, depth) give an all-off row (ONNX).
 *   top_k          x (any dtype but bool); "k" INT (required, 0 <= k <= dim),
 *                  "axis" INT (default -1), "largest" INT (default 1),
 *                  "sorted" INT (default 1; the output is sorted either way).
 *                  Outputs values (x's dtype) and indices (i64). Ties: the
 *                  lower index first; NaN ranks above +inf.
 *   depth_to_space x [N,C,H,W]; "blocksize" INT, "mode" STRING DCR (default)
 *                  | CRD (ONNX). Output [N, C/b^2, H*b, W*b].
 *   space_to_depth x [N,C,H,W]; "blocksize" INT, "mode" STRING DCR (default,
 *                  ONNX's only order) | CRD: the exact inverse of
 *                  depth_to_space with the same mode (CRD is Ember's).
 *   cast           x; "to" INT (em_dtype). Every dtype to every dtype:
 *                  float -> integer truncates toward zero, NaN -> 0, values
 *                  out of range saturate to the type's min/max (u8: 0..255);
 *                  integer -> narrower integer keeps the low bits (two's
 *                  complement wrap, as C and numpy); anything -> bool is
 *                  "nonzero" (NaN -> 1); -> f32/f16/bf16 rounds to nearest
 *                  even (once: f64 and i64 go through a round-to-odd f32,
 *                  so there is no double rounding).
 *   expand         x; "shape" INTS: numpy broadcast of x and shape (ONNX
 *                  Expand, both ways: a 1 in shape keeps x's dim).
 *   tile           x; "repeats" INTS (one per axis, >= 0).
 *
 * Internal gradient ops (infer + cpu, no backward):
 *   _slice_grad(dy, x)           slice's attributes: dy scattered into zeros of x's shape.
 *   _concat_grad(dy, xs...)      "axis", "from_end": the piece of dy belonging to the last
 *                                given x (from_end 0: offset = sum of the others' sizes) or the
 *                                first given x (from_end 1: the others follow it to dy's end).
 *                                Used when a concat axis is dynamic, so offsets are known per run.
 *   _pad_grad(dy, x)             pad's "pads", "mode": every dy element added to the x element it
 *                                came from (none for constant padding), in a fixed order.
 *   _gather_grad(dy, idx, data)  "axis": scatter-add of dy into zeros of data's shape, indices in
 *                                order (deterministic whatever the thread count).
 *   _top_k_grad(dy, idx, x)      "axis": dy written at top_k's indices (unique per row) in zeros.
 *   _tile_grad(dy, x)            "repeats": the sum over the repeats, in row-major repeat order.
 * The summing gradients run f16/bf16 in f32 (rounded once at the end).
 *
 * On a GPU (the gpu members; launches in shape_gpu.c, kernels in
 * kernels/shape.cu) every op gives the CPU's bits in both modes: data moves
 * bit for bit, cast and pad share their per-element rules and top_k its
 * order with this file (kernels/shape_math.h), and the summing gradients add
 * each element's terms in the order documented above, from +0. Differences:
 * - indices out of range fail gather's run on a GPU as on the CPU, with the
 *   same message (em_index_fail, ops/index.c), through index.cu's check
 *   kernel (deferred to the next synchronisation where the device keeps a
 *   status record, runtime/devcheck.h); the gather kernel then gives zero
 *   bits there. _gather_grad and _top_k_grad on a GPU skip such indices
 *   (their indices are the forward op's, already checked);
 * - these run on the CPU (the gpu member returns EM_ERR_USE_CPU): f16/bf16
 *   summing gradients, and pad, _pad_grad or _tile_grad with more than 6
 *   padded (repeated) axes left after merging. The data-moving copies take
 *   any rank (one launch per index of the axes beyond 6). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "index_gpu.h"
#include "shape_gpu.h"
#include "../kernels/em_math.h"
#include "../kernels/shape_math.h"

#define MAXV EM_SHAPE_MAXV /* axes of an internal copy view: tile and depth_to_space need up to 2 * EM_MAX_DIMS */
#define PAR_MIN 32768  /* elements below which a loop stays on one thread */
#define TILE 32        /* edge of a transpose block */

/* ============================================================ helpers === */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

static void contig_strides(int nd, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    st[i] = s;
    s *= dims[i];
  }
}

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= dims[i];
  return p;
}

/* Product of dims[from:to], -1 when any of them is dynamic. */
static int64_t prod_or_dyn(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) {
    if (dims[i] < 0) return -1;
    p *= dims[i];
  }
  return p;
}

static int shape_known(const em_shape *s) {
  for (int i = 0; i < s->ndim; i++)
    if (s->dims[i] < 0) return 0;
  return 1;
}

/* Same rank and every dim equal, a -1 on either side matching anything. */
static int dims_compatible(const em_shape *x, int nd, const int64_t *dims) {
  if (x->ndim != nd) return 0;
  for (int i = 0; i < nd; i++)
    if (x->dims[i] >= 0 && dims[i] >= 0 && x->dims[i] != dims[i]) return 0;
  return 1;
}

static const char *dims_str(int nd, const int64_t *dims, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < nd && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

static void set_out(em_op_args *a, int k, em_dtype t, int nd, const int64_t *dims) {
  a->out[k].dtype = t;
  a->out[k].ndim = nd;
  for (int i = 0; i < nd; i++) a->out[k].dims[i] = dims[i];
}

static em_status check_dtype(const em_op_args *a, int i) {
  if (em_dtype_size(a->in[i].dtype) == 0) return em_op_fail(a, "input %d has an unknown dtype (%d)", i, (int)a->in[i].dtype);
  return EM_OK;
}

static em_status check_float(const em_op_args *a, int i) {
  if (!em_dtype_is_float(a->in[i].dtype))
    return em_op_fail(a, "input %d is %s: expected a float dtype (f32, f64, f16, bf16)", i, em_dtype_name(a->in[i].dtype));
  return EM_OK;
}

static em_status check_index_dtype(const em_op_args *a, int i, const char *what) {
  if (a->in[i].dtype != EM_I32 && a->in[i].dtype != EM_I64)
    return em_op_fail(a, "%s (input %d) is %s: expected i32 or i64", what, i, em_dtype_name(a->in[i].dtype));
  return EM_OK;
}

static int64_t read_index(const void *p, em_dtype t, int64_t i) {
  return t == EM_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Multi-index of flat position pos within dims, as "[i,j,k]". */
static const char *position_str(int64_t pos, int nd, const int64_t *dims, char *buf, size_t cap) {
  int64_t idx[EM_MAX_DIMS];
  for (int k = nd - 1; k >= 0; k--) {
    idx[k] = dims[k] ? pos % dims[k] : 0;
    pos = dims[k] ? pos / dims[k] : 0;
  }
  return dims_str(nd, idx, buf, cap);
}

static em_status no_memory(const em_op_args *a) {
  return em_fail(EM_ERR_OUT_OF_MEMORY, "op '%s': no memory for a work buffer", a->def->name);
}

/* ================================================= strided copy engine === */

/* Every shape op is a copy dst[sum i_k*ds_k] = src[sum i_k*ss_k] over an
 * index box (strides in elements, possibly negative or, on the source, 0 for
 * broadcasting). The view is simplified first so the inner loop is as long
 * and as contiguous as possible. */
typedef em_shape_view copy_view; /* shape_gpu.h: the GPU's copies simplify their views the same way */

/* Drops size-1 axes, orders axes by decreasing |dst stride| (the innermost
 * loop then writes contiguously; the order of independent element copies
 * does not matter), and merges neighbours contiguous on both sides. Returns
 * 0 for an empty box. */
int em_shape_view_simplify(copy_view *v, int nd, const int64_t *dims, const int64_t *ds, const int64_t *ss) {
  int n = 0;
  for (int i = 0; i < nd; i++) {
    if (dims[i] == 0) return 0;
    if (dims[i] == 1) continue;
    v->dims[n] = dims[i];
    v->ds[n] = ds[i];
    v->ss[n] = ss[i];
    n++;
  }
  for (int i = 1; i < n; i++) { /* stable insertion sort: keeps the caller's order on ties */
    int64_t d = v->dims[i], a = v->ds[i], b = v->ss[i];
    int j = i;
    for (; j > 0 && abs64(v->ds[j - 1]) < abs64(a); j--) {
      v->dims[j] = v->dims[j - 1];
      v->ds[j] = v->ds[j - 1];
      v->ss[j] = v->ss[j - 1];
    }
    v->dims[j] = d;
    v->ds[j] = a;
    v->ss[j] = b;
  }
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (m > 0 && v->ds[m - 1] == v->ds[i] * v->dims[i] && v->ss[m - 1] == v->ss[i] * v->dims[i]) {
      v->dims[m - 1] *= v->dims[i];
      v->ds[m - 1] = v->ds[i];
      v->ss[m - 1] = v->ss[i];
    } else {
      v->dims[m] = v->dims[i];
      v->ds[m] = v->ds[i];
      v->ss[m] = v->ss[i];
      m++;
    }
  }
  v->nd = m;
  return 1;
}

/* Constant-size memcpy compiles to one load and one store, and (unlike a
 * cast to uint32_t *) reads float data without breaking aliasing rules. */
#define COPY_LINE(ES)                                                                                                  \
  for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * (ES), src + i * ss * (ES), (ES))

static void copy_line(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t es) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
  switch (es) {
  case 1: COPY_LINE(1); break;
  case 2: COPY_LINE(2); break;
  case 4: COPY_LINE(4); break;
  case 8: COPY_LINE(8); break;
  default: COPY_LINE(es); break;
  }
}

/* Rows of the innermost axis; threads take contiguous row ranges and step an
 * odometer through them (no division per row). */
static void copy_rows(const copy_view *v, char *dst, const char *src, size_t es) {
  const int nd = v->nd, L = nd - 1;
  const int64_t e = (int64_t)es, inner = v->dims[L], rows = prod(v->dims, 0, L);
#pragma omp parallel num_threads(em_cpu_threads()) if (rows * inner > PAR_MIN)
  {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (rows + nt - 1) / nt, r0 = min64(rows, t * chunk), r1 = min64(rows, r0 + chunk);
    if (r0 < r1) {
      int64_t idx[MAXV], doff = 0, soff = 0, r = r0;
      for (int k = L - 1; k >= 0; k--) {
        idx[k] = r % v->dims[k];
        r /= v->dims[k];
        doff += idx[k] * v->ds[k];
        soff += idx[k] * v->ss[k];
      }
      for (r = r0; r < r1; r++) {
        copy_line(dst + doff * e, v->ds[L], src + soff * e, v->ss[L], inner, es);
        for (int k = L - 1; k >= 0; k--) {
          idx[k]++;
          doff += v->ds[k];
          soff += v->ss[k];
          if (idx[k] < v->dims[k]) break;
          doff -= v->ds[k] * v->dims[k];
          soff -= v->ss[k] * v->dims[k];
          idx[k] = 0;
        }
      }
    }
  }
}

#define COPY_TILE(ES)                                                                                                  \
  for (int64_t i = b0; i < b1; i++)                                                                                    \
    for (int64_t j = l0; j < l1; j++)                                                                                  \
  memcpy(dst + (doff + i * dsb + j) * (ES), src + (soff + i + j * ssl) * (ES), (ES))

/* A transpose: the destination is contiguous along the last axis L, the
 * source along axis b. Square tiles keep both sides in cache. */
static void copy_blocked(const copy_view *v, int b, char *dst, const char *src, size_t es) {
  const int L = v->nd - 1;
  const int64_t tb = (v->dims[b] + TILE - 1) / TILE, tl = (v->dims[L] + TILE - 1) / TILE;
  const int64_t dsb = v->ds[b], ssl = v->ss[L];
  int64_t outer = 1;
  for (int k = 0; k < L; k++)
    if (k != b) outer *= v->dims[k];
  const int64_t items = outer * tb * tl, total = outer * v->dims[b] * v->dims[L];
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (total > PAR_MIN)
  for (int64_t it = 0; it < items; it++) {
    int64_t o = it / (tb * tl), rest = it % (tb * tl), doff = 0, soff = 0;
    for (int k = L - 1; k >= 0; k--) {
      if (k == b) continue;
      int64_t ik = o % v->dims[k];
      o /= v->dims[k];
      doff += ik * v->ds[k];
      soff += ik * v->ss[k];
    }
    int64_t b0 = rest / tl * TILE, l0 = rest % tl * TILE;
    int64_t b1 = min64(b0 + TILE, v->dims[b]), l1 = min64(l0 + TILE, v->dims[L]);
    switch (es) {
    case 1: COPY_TILE(1); break;
    case 2: COPY_TILE(2); break;
    case 4: COPY_TILE(4); break;
    case 8: COPY_TILE(8); break;
    default: COPY_TILE(es); break;
    }
  }
}

/* dst[sum i_k*ds_k] = src[sum i_k*ss_k] for every i < dims (strides in
 * elements). dst and src point at index 0 (which may not be the lowest
 * address when a stride is negative). Each destination element is written
 * by exactly one thread. */
static void strided_copy(void *dst, const void *src, int nd, const int64_t *dims, const int64_t *ds, const int64_t *ss,
                         size_t es) {
  copy_view v;
  if (!em_shape_view_simplify(&v, nd, dims, ds, ss)) return;
  if (v.nd == 0) {
    memcpy(dst, src, es);
    return;
  }
  const int L = v.nd - 1;
  if (v.ds[L] == 1 && v.ss[L] != 1 && v.dims[L] >= 8)
    for (int b = 0; b < L; b++)
      if (v.ss[b] == 1 && v.dims[b] >= 8) {
        copy_blocked(&v, b, dst, src, es);
        return;
      }
  copy_rows(&v, dst, src, es);
}

/* A plain copy between contiguous buffers of n elements; nothing when the
 * executor gave the output the input's storage (inplace ops). */
static void copy_all(void *dst, const void *src, int64_t n, size_t es) {
  if (dst != src && n > 0) memcpy(dst, src, (size_t)n * es);
}

/* ================================================================ movers === */

/* The ops that only move data work out their geometry once and hand it to a
 * mover: the strided copy and fill above on the CPU, the kernels of
 * kernels/shape.cu on a GPU (shape_gpu.h). Each such op's cpu and gpu
 * members are its _run function with one or the other. */
typedef struct mover {
  em_status (*copy)(const em_op_args *a, void *dst, const void *src, int nd, const int64_t *dims, const int64_t *ds,
                    const int64_t *ss, size_t es);
  em_status (*fill)(const em_op_args *a, void *dst, int64_t n, size_t es, const unsigned char *val);
} mover;

static em_status cpu_copy(const em_op_args *a, void *dst, const void *src, int nd, const int64_t *dims,
                          const int64_t *ds, const int64_t *ss, size_t es) {
  (void)a;
  strided_copy(dst, src, nd, dims, ds, ss, es);
  return EM_OK;
}

static void fill_elems(char *dst, const unsigned char *val, int64_t n, size_t es);

static em_status cpu_fill(const em_op_args *a, void *dst, int64_t n, size_t es, const unsigned char *val) {
  (void)a;
  fill_elems(dst, val, n, es);
  return EM_OK;
}

static const mover cpu_mover = {cpu_copy, cpu_fill};
static const mover gpu_mover = {em_shape_gpu_copy, em_shape_gpu_fill};

/* The cpu and gpu members of an op computed by op_run(a, in, out, mover). */
#define MOVER_MEMBERS(op)                                                                 \
  static em_status op##_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) { \
    return op##_run(a, in, out, &cpu_mover);                                              \
  }                                                                                       \
  static em_status op##_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) { \
    return op##_run(a, in, out, &gpu_mover);                                              \
  }

static const unsigned char zero_bytes[8];

/* ========================================= scalar and dtype conversions === */

/* The per-element conversions (round to odd, saturation) are
 * kernels/shape_math.h's, which the cast kernel compiles too. */
/* Float dtypes load exactly into double, the others into int64. */
static void load_f64(em_dtype t, const void *src, int64_t n, double *buf) {
  switch (t) {
  case EM_F32: for (int64_t i = 0; i < n; i++) buf[i] = ((const float *)src)[i]; break;
  case EM_F64: memcpy(buf, src, (size_t)n * sizeof(double)); break;
  case EM_F16: for (int64_t i = 0; i < n; i++) buf[i] = em_f16_bits_to_f32(((const uint16_t *)src)[i]); break;
  case EM_BF16: for (int64_t i = 0; i < n; i++) buf[i] = em_bf16_bits_to_f32(((const uint16_t *)src)[i]); break;
  default: break;
  }
}

static void load_i64(em_dtype t, const void *src, int64_t n, int64_t *buf) {
  switch (t) {
  case EM_I32: for (int64_t i = 0; i < n; i++) buf[i] = ((const int32_t *)src)[i]; break;
  case EM_I64: memcpy(buf, src, (size_t)n * sizeof(int64_t)); break;
  case EM_U8: for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)src)[i]; break;
  case EM_BOOL: for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)src)[i] != 0; break;
  default: break;
  }
}

static void store_f64(em_dtype t, const double *buf, int64_t n, void *dst) {
  switch (t) {
  case EM_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)buf[i]; break;
  case EM_F64: memcpy(dst, buf, (size_t)n * sizeof(double)); break;
  case EM_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = em_f32_to_f16_bits(em_shape_f64_to_f32_odd(buf[i])); break;
  case EM_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = em_f32_to_bf16_bits(em_shape_f64_to_f32_odd(buf[i])); break;
  case EM_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = em_shape_sat_i32(buf[i]); break;
  case EM_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] = em_shape_sat_i64(buf[i]); break;
  case EM_U8: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = em_shape_sat_u8(buf[i]); break;
  case EM_BOOL: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = buf[i] != 0; break;
  }
}

static void store_i64(em_dtype t, const int64_t *buf, int64_t n, void *dst) {
  switch (t) {
  case EM_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)buf[i]; break;
  case EM_F64: for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = (double)buf[i]; break;
  case EM_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = em_f32_to_f16_bits(em_shape_i64_to_f32_odd(buf[i])); break;
  case EM_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = em_f32_to_bf16_bits(em_shape_i64_to_f32_odd(buf[i])); break;
  case EM_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)(uint32_t)(uint64_t)buf[i]; break;
  case EM_I64: memcpy(dst, buf, (size_t)n * sizeof(int64_t)); break;
  case EM_U8: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)(uint64_t)buf[i]; break;
  case EM_BOOL: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = buf[i] != 0; break;
  }
}

/* The common float pairs in one step each (no double buffer): the same
 * results as the general path, since an f32 source needs no round-to-odd. */
static int convert_direct(em_dtype from, const void *src, em_dtype to, void *dst, int64_t n) {
  const int par = n > PAR_MIN, nt = em_cpu_threads();
  const float *f = src;
  const uint16_t *h = src;
  float *fo = dst;
  uint16_t *ho = dst;
  if (from == EM_F32 && to == EM_F16) {
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t i = 0; i < n; i++) ho[i] = em_f32_to_f16_bits(f[i]);
  } else if (from == EM_F32 && to == EM_BF16) {
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t i = 0; i < n; i++) ho[i] = em_f32_to_bf16_bits(f[i]);
  } else if (from == EM_F16 && to == EM_F32) {
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t i = 0; i < n; i++) fo[i] = em_f16_bits_to_f32(h[i]);
  } else if (from == EM_BF16 && to == EM_F32) {
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t i = 0; i < n; i++) fo[i] = em_bf16_bits_to_f32(h[i]);
  } else if (from == EM_F32 && to == EM_F64) {
    double *d = dst;
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
  } else if (from == EM_F64 && to == EM_F32) {
    const double *d = src;
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t i = 0; i < n; i++) fo[i] = (float)d[i];
  } else {
    return 0;
  }
  return 1;
}

/* n elements of dtype `from` at src converted to `to` at dst, in chunks
 * through a stack buffer. */
#define CAST_CHUNK 1024
static void convert(em_dtype from, const void *src, em_dtype to, void *dst, int64_t n) {
  const size_t fs = em_dtype_size(from), ts = em_dtype_size(to);
  if (from == to) {
    copy_all(dst, src, n, fs);
    return;
  }
  if (convert_direct(from, src, to, dst, n)) return;
  const int64_t chunks = (n + CAST_CHUNK - 1) / CAST_CHUNK;
  const int from_float = em_dtype_is_float(from);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > PAR_MIN)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t i0 = c * CAST_CHUNK, m = min64(CAST_CHUNK, n - i0);
    const char *s = (const char *)src + (size_t)i0 * fs;
    char *d = (char *)dst + (size_t)i0 * ts;
    if (from_float) {
      double buf[CAST_CHUNK];
      load_f64(from, s, m, buf);
      store_f64(to, buf, m, d);
    } else {
      int64_t buf[CAST_CHUNK];
      load_i64(from, s, m, buf);
      store_i64(to, buf, m, d);
    }
  }
}

/* v as one element of dtype t (the bytes, in out[0..size)). */
static void scalar_bytes(em_dtype t, double v, unsigned char out[8]) {
  memset(out, 0, 8);
  store_f64(t, &v, 1, out);
}

/* Fills n elements at dst with the element `val`. */
static void fill_elems(char *dst, const unsigned char *val, int64_t n, size_t es) {
  int zero = 1;
  for (size_t b = 0; b < es; b++) zero &= val[b] == 0;
  if (zero) {
    memset(dst, 0, (size_t)n * es);
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, val, es);
}

/* dst[i] += src[i] for f32 or f64 rows (the summing gradients). */
static void add_row(em_dtype t, void *dst, const void *src, int64_t n) {
  if (t == EM_F32) {
    float *d = dst;
    const float *s = src;
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
  } else {
    double *d = dst;
    const double *s = src;
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
  }
}

/* Runs an f32/f64 kernel on f16/bf16 data: the inputs in `mask` converted to
 * f32, output 0 computed in f32 and rounded once into the real output. */
static em_status run_in_f32(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, unsigned mask,
                            em_op_kernel k) {
  em_shape ins[16], outs[1];
  em_tensor *tin[16] = {0}, *tout = NULL;
  em_status s = EM_OK;
  em_op_args b = *a;
  for (int i = 0; i < a->n_in && i < 16; i++) {
    ins[i] = a->in[i];
    tin[i] = in[i];
    if (!(mask & (1u << i))) continue;
    ins[i].dtype = EM_F32;
    em_tensor *t = NULL;
    if ((s = em_tensor_empty(em_cpu(), &ins[i], &t))) goto done;
    convert(a->in[i].dtype, em_tensor_data(in[i]), EM_F32, em_tensor_data(t), em_tensor_numel(t));
    tin[i] = t;
  }
  outs[0] = a->out[0];
  outs[0].dtype = EM_F32;
  if ((s = em_tensor_empty(em_cpu(), &outs[0], &tout))) goto done;
  b.in = ins;
  b.out = outs;
  b.n_out = 1;
  if ((s = k(&b, tin, &tout))) goto done;
  convert(EM_F32, em_tensor_data(tout), a->out[0].dtype, em_tensor_data(out[0]), em_tensor_numel(tout));
done:
  for (int i = 0; i < a->n_in && i < 16; i++)
    if (mask & (1u << i)) em_tensor_release(tin[i] == in[i] ? NULL : tin[i]);
  em_tensor_release(tout);
  return s;
}

static int is_half(em_dtype t) { return t == EM_F16 || t == EM_BF16; }

/* ================================================ reshape and friends === */

static em_status reshape_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  const em_shape *x = &a->in[0];
  int n;
  const int64_t *shape = em_attr_ints(a, "shape", &n);
  if (!em_attr_has(a, "shape")) return em_op_fail(a, "attribute 'shape' (INTS) is required");
  if (n > EM_MAX_DIMS) return em_op_fail(a, "'shape' has %d entries: at most %d dimensions", n, EM_MAX_DIMS);
  int64_t out[EM_MAX_DIMS];
  int infer_at = -1, cancelled[EM_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    if (shape[i] == -1) {
      if (infer_at >= 0) return em_op_fail(a, "'shape' has more than one -1 (entries %d and %d)", infer_at, i);
      infer_at = i;
      out[i] = -1;
    } else if (shape[i] == 0) {
      if (i >= x->ndim) return em_op_fail(a, "'shape'[%d] is 0 (copy the input's dim) but the input has %d dimensions", i, x->ndim);
      out[i] = x->dims[i];
      if (x->dims[i] < 0) cancelled[i] = 1; /* a dynamic dim carried over: it cancels from both sides */
    } else if (shape[i] < 0) {
      return em_op_fail(a, "'shape'[%d] is %lld: dims must be >= 0, or -1 (inferred), or 0 (copied)", i, (long long)shape[i]);
    } else {
      out[i] = shape[i];
    }
  }
  int unresolved = 0;
  int64_t in_rest = 1, out_rest = 1;
  for (int i = 0; i < x->ndim; i++) {
    if (cancelled[i]) continue;
    if (x->dims[i] < 0) unresolved = 1;
    else in_rest *= x->dims[i];
  }
  for (int i = 0; i < n; i++)
    if (i != infer_at && !cancelled[i]) out_rest *= out[i];
  char want[160], got[160];
  if (!unresolved) {
    if (infer_at >= 0) {
      if (out_rest == 0 || in_rest % out_rest)
        return em_op_fail(a, "cannot reshape %lld elements to 'shape' %s: the -1 cannot be inferred", (long long)in_rest,
                          dims_str(n, shape, want, sizeof want));
      out[infer_at] = in_rest / out_rest;
    } else if (in_rest != out_rest) {
      return em_op_fail(a, "cannot reshape %s (%lld elements) to 'shape' %s (%lld elements)",
                        em_shape_str(x, got, sizeof got), (long long)in_rest, dims_str(n, out, want, sizeof want),
                        (long long)out_rest);
    }
  }
  set_out(a, 0, x->dtype, n, out);
  return EM_OK;
}

static em_status copy_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  copy_all(em_tensor_data(out[0]), em_tensor_data(in[0]), em_tensor_numel(in[0]), em_dtype_size(a->in[0].dtype));
  return EM_OK;
}

/* On a GPU the executor gives the output its own buffer: one contiguous copy. */
static em_status copy_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int64_t n = em_tensor_numel(in[0]), one = 1;
  return em_shape_gpu_copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), 1, &n, &one, &one,
                           em_dtype_size(a->in[0].dtype));
}

/* The backward of an op whose gradient is one op on `in` (dy first) with the forward's
 * attributes: nothing when dy is absent, and integer data has no gradient. */
static em_status attrs_grad(em_graph *g, const char *grad_op, const em_op_args *a, const em_var *in, int n_in,
                            em_var *din) {
  if (in[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  return em_apply(g, grad_op, in, n_in, a->attrs, a->n_attrs, &din[0], 1);
}

/* The backward of a gradient op g_op(dy, ...) = A^T dy (A linear: the
 * forward op's map, possibly through indices) with respect to dy, which a
 * second-order gradient needs: A applied to the incoming gradient, i.e. the
 * forward op `fwd_op` on dy[0] (with the indices `idx`, if any) and the
 * attributes forwarded to g_op, less `drop` (NULL: none). Its other inputs
 * (shapes, indices) take no gradient (no_grad). */
static em_status forward_again(em_graph *g, const char *fwd_op, const em_op_args *a, em_var idx, const em_var *dy,
                               const char *drop, em_var *din) {
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  em_attr at[8]; /* the ops here take at most 4 */
  int n = 0;
  if (a->n_attrs > 8) return em_op_fail(a, "%d attributes: at most 8 here", a->n_attrs);
  for (int i = 0; i < a->n_attrs; i++)
    if (!drop || strcmp(a->attrs[i].name, drop)) at[n++] = a->attrs[i];
  em_var in[2] = {dy[0], idx};
  return em_apply(g, fwd_op, in, idx >= 0 ? 2 : 1, at, n, &din[0], 1);
}

/* Backward of every op that only re-labels x's elements: dy in x's shape. */
static em_status reshape_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                              em_var *din) {
  (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  return em_apply2(g, "reshape_like", dy[0], x[0], &din[0]);
}

static em_status reshape_like_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (!s) s = check_dtype(a, 1);
  if (s) return s;
  int64_t nx = em_shape_numel(&a->in[0]), nl = em_shape_numel(&a->in[1]);
  if (shape_known(&a->in[0]) && shape_known(&a->in[1]) && nx != nl)
    return em_op_fail(a, "cannot reshape %lld elements to the %lld of 'like' (input 1)", (long long)nx, (long long)nl);
  set_out(a, 0, a->in[0].dtype, a->in[1].ndim, a->in[1].dims);
  return EM_OK;
}

static em_status squeeze_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  const em_shape *x = &a->in[0];
  int n, drop[EM_MAX_DIMS] = {0};
  const int64_t *axes = em_attr_ints(a, "axes", &n);
  if (em_attr_has(a, "axes")) {
    for (int i = 0; i < n; i++) {
      int ax;
      if ((s = em_norm_axis(a, axes[i], x->ndim, &ax))) return s;
      if (drop[ax]) return em_op_fail(a, "axis %d appears twice in 'axes'", ax);
      if (x->dims[ax] > 1 || x->dims[ax] == 0)
        return em_op_fail(a, "'axes' names axis %d of size %lld: only size-1 axes can be squeezed", ax, (long long)x->dims[ax]);
      drop[ax] = 1;
    }
  } else {
    for (int i = 0; i < x->ndim; i++) {
      if (x->dims[i] < 0)
        return em_op_fail(a, "without 'axes', squeeze would depend on the run's size of dynamic axis %d: give 'axes'", i);
      drop[i] = x->dims[i] == 1;
    }
  }
  int64_t out[EM_MAX_DIMS];
  int m = 0;
  for (int i = 0; i < x->ndim; i++)
    if (!drop[i]) out[m++] = x->dims[i];
  set_out(a, 0, x->dtype, m, out);
  return EM_OK;
}

static em_status unsqueeze_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  const em_shape *x = &a->in[0];
  int n;
  const int64_t *axes = em_attr_ints(a, "axes", &n);
  if (!em_attr_has(a, "axes") || n == 0) return em_op_fail(a, "attribute 'axes' (INTS, positions in the output) is required");
  int r = x->ndim + n;
  if (r > EM_MAX_DIMS) return em_op_fail(a, "%d new axes make %d dimensions: at most %d", n, r, EM_MAX_DIMS);
  int added[EM_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    int ax;
    if ((s = em_norm_axis(a, axes[i], r, &ax))) return s;
    if (added[ax]) return em_op_fail(a, "axis %d appears twice in 'axes'", ax);
    added[ax] = 1;
  }
  int64_t out[EM_MAX_DIMS];
  for (int i = 0, j = 0; i < r; i++) out[i] = added[i] ? 1 : x->dims[j++];
  set_out(a, 0, x->dtype, r, out);
  return EM_OK;
}

static em_status flatten_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  const em_shape *x = &a->in[0];
  int64_t axis = em_attr_int(a, "axis", 1);
  if (axis < -x->ndim || axis > x->ndim)
    return em_op_fail(a, "'axis' %lld is out of range [%d, %d]", (long long)axis, -x->ndim, x->ndim);
  int k = (int)(axis < 0 ? axis + x->ndim : axis);
  int64_t out[2] = {prod_or_dyn(x->dims, 0, k), prod_or_dyn(x->dims, k, x->ndim)};
  set_out(a, 0, x->dtype, 2, out);
  return EM_OK;
}

/* ========================================================== transpose === */

/* perm from the attribute, or reversed axes; fails unless a permutation. */
static em_status get_perm(const em_op_args *a, int nd, int *perm) {
  int n;
  const int64_t *p = em_attr_ints(a, "perm", &n);
  if (!em_attr_has(a, "perm")) {
    for (int i = 0; i < nd; i++) perm[i] = nd - 1 - i;
    return EM_OK;
  }
  char buf[160];
  if (n != nd) return em_op_fail(a, "'perm' %s has %d entries for %d dimensions", dims_str(n, p, buf, sizeof buf), n, nd);
  int seen[EM_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    if (p[i] < 0 || p[i] >= nd || seen[p[i]])
      return em_op_fail(a, "'perm' %s is not a permutation of 0..%d", dims_str(n, p, buf, sizeof buf), nd - 1);
    seen[p[i]] = 1;
    perm[i] = (int)p[i];
  }
  return EM_OK;
}

static em_status transpose_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  int perm[EM_MAX_DIMS];
  const em_shape *x = &a->in[0];
  if ((s = get_perm(a, x->ndim, perm))) return s;
  int64_t out[EM_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) out[i] = x->dims[perm[i]];
  set_out(a, 0, x->dtype, x->ndim, out);
  return EM_OK;
}

static em_status transpose_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *x = &a->in[0];
  int perm[EM_MAX_DIMS];
  em_status s = get_perm(a, x->ndim, perm);
  if (s) return s;
  int64_t xs[EM_MAX_DIMS], ds[EM_MAX_DIMS], ss[EM_MAX_DIMS];
  contig_strides(x->ndim, x->dims, xs);
  contig_strides(a->out[0].ndim, a->out[0].dims, ds);
  for (int i = 0; i < x->ndim; i++) ss[i] = xs[perm[i]];
  return m->copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), x->ndim, a->out[0].dims, ds, ss,
                 em_dtype_size(x->dtype));
}
MOVER_MEMBERS(transpose)

static em_status transpose_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                em_var *din) {
  (void)x, (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  int perm[EM_MAX_DIMS], nd = a->in[0].ndim;
  em_status s = get_perm(a, nd, perm);
  if (s) return s;
  int64_t inv[EM_MAX_DIMS];
  for (int i = 0; i < nd; i++) inv[perm[i]] = i;
  em_attr at = em_attr_is("perm", inv, nd);
  return em_apply(g, "transpose", &dy[0], 1, &at, 1, &din[0], 1);
}

/* ============================================================== slice === */

typedef struct slice_plan {
  int64_t start[EM_MAX_DIMS], step[EM_MAX_DIMS], count[EM_MAX_DIMS]; /* count -1: the axis is dynamic */
} slice_plan;

/* ONNX Slice's rules applied to shape x. */
static em_status slice_plan_make(const em_op_args *a, const em_shape *x, slice_plan *p) {
  int ns, ne, na, nst;
  const int64_t *starts = em_attr_ints(a, "starts", &ns), *ends = em_attr_ints(a, "ends", &ne);
  const int64_t *axes = em_attr_ints(a, "axes", &na), *steps = em_attr_ints(a, "steps", &nst);
  if (!em_attr_has(a, "starts") || !em_attr_has(a, "ends")) return em_op_fail(a, "attributes 'starts' and 'ends' (INTS) are required");
  if (ns != ne) return em_op_fail(a, "'starts' has %d entries, 'ends' %d: they must match", ns, ne);
  if (em_attr_has(a, "axes") && na != ns) return em_op_fail(a, "'axes' has %d entries, 'starts' %d: they must match", na, ns);
  if (em_attr_has(a, "steps") && nst != ns) return em_op_fail(a, "'steps' has %d entries, 'starts' %d: they must match", nst, ns);
  if (!em_attr_has(a, "axes") && ns > x->ndim)
    return em_op_fail(a, "'starts' has %d entries for %d dimensions", ns, x->ndim);
  for (int i = 0; i < x->ndim; i++) {
    p->start[i] = 0;
    p->step[i] = 1;
    p->count[i] = x->dims[i];
  }
  int seen[EM_MAX_DIMS] = {0};
  for (int k = 0; k < ns; k++) {
    int ax = k;
    em_status s;
    if (em_attr_has(a, "axes") && (s = em_norm_axis(a, axes[k], x->ndim, &ax))) return s;
    if (seen[ax]) return em_op_fail(a, "axis %d appears twice in 'axes'", ax);
    seen[ax] = 1;
    int64_t step = em_attr_has(a, "steps") ? steps[k] : 1, dim = x->dims[ax];
    if (step == 0) return em_op_fail(a, "'steps'[%d] is 0 (axis %d): a slice step must be nonzero", k, ax);
    p->step[ax] = step;
    if (dim < 0) {
      p->count[ax] = -1;
      continue;
    }
    int64_t st = starts[k] < 0 ? starts[k] + dim : starts[k], en = ends[k] < 0 ? ends[k] + dim : ends[k];
    if (step > 0) {
      st = min64(max64(st, 0), dim);
      en = min64(max64(en, 0), dim);
      p->start[ax] = st;
      p->count[ax] = en > st ? (en - st - 1) / step + 1 : 0;
    } else {
      uint64_t mag = (uint64_t)(-(step + 1)) + 1u; /* |step| without overflow at INT64_MIN */
      st = min64(max64(st, 0), dim - 1);
      en = min64(max64(en, -1), dim - 1);
      p->start[ax] = dim ? st : 0;
      p->count[ax] = dim && st > en ? (int64_t)((uint64_t)(st - en - 1) / mag) + 1 : 0;
    }
  }
  return EM_OK;
}

static em_status slice_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  slice_plan p;
  if ((s = slice_plan_make(a, &a->in[0], &p))) return s;
  set_out(a, 0, a->in[0].dtype, a->in[0].ndim, p.count);
  return EM_OK;
}

/* Strides into x of the sliced box, and the offset of its first element. */
static int64_t slice_geometry(const em_shape *x, const slice_plan *p, int64_t *xstr) {
  int64_t cs[EM_MAX_DIMS], base = 0;
  contig_strides(x->ndim, x->dims, cs);
  for (int i = 0; i < x->ndim; i++) {
    base += p->start[i] * cs[i];
    xstr[i] = cs[i] * p->step[i];
  }
  return base;
}

static em_status slice_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *x = &a->in[0];
  slice_plan p;
  em_status s = slice_plan_make(a, x, &p);
  if (s) return s;
  const size_t es = em_dtype_size(x->dtype);
  int64_t xstr[EM_MAX_DIMS], os[EM_MAX_DIMS];
  int64_t base = slice_geometry(x, &p, xstr);
  contig_strides(x->ndim, p.count, os);
  if (em_shape_numel(&a->out[0]) == 0) return EM_OK;
  return m->copy(a, em_tensor_data(out[0]), (const char *)em_tensor_data(in[0]) + base * (int64_t)es, x->ndim, p.count,
                 os, xstr, es);
}
MOVER_MEMBERS(slice)

static em_status slice_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                            em_var *din) {
  (void)y;
  em_var in[2] = {dy[0], x[0]};
  return attrs_grad(g, "_slice_grad", a, in, 2, din);
}

/* Second order: d _slice_grad(dy) / d dy is slice again. */
static em_status slice_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                 em_var *din) {
  (void)x, (void)y;
  return forward_again(g, "slice", a, -1, dy, NULL, din);
}

static em_status slice_grad_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (!s) s = check_dtype(a, 1);
  if (s) return s;
  if (a->in[0].dtype != a->in[1].dtype) return em_op_fail(a, "dy and x must have the same dtype");
  slice_plan p;
  if ((s = slice_plan_make(a, &a->in[1], &p))) return s;
  if (!dims_compatible(&a->in[0], a->in[1].ndim, p.count)) {
    char buf[160];
    return em_op_fail(a, "dy must have the slice's shape %s", dims_str(a->in[1].ndim, p.count, buf, sizeof buf));
  }
  set_out(a, 0, a->in[0].dtype, a->in[1].ndim, a->in[1].dims);
  return EM_OK;
}

static em_status slice_grad_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *x = &a->in[1];
  slice_plan p;
  em_status s = slice_plan_make(a, x, &p);
  if (s) return s;
  const size_t es = em_dtype_size(x->dtype);
  char *o = em_tensor_data(out[0]);
  if ((s = m->fill(a, o, em_shape_numel(x), es, zero_bytes))) return s;
  int64_t xstr[EM_MAX_DIMS], ds[EM_MAX_DIMS];
  int64_t base = slice_geometry(x, &p, xstr);
  contig_strides(x->ndim, p.count, ds);
  if (em_shape_numel(&a->in[0]) == 0) return EM_OK;
  return m->copy(a, o + base * (int64_t)es, em_tensor_data(in[0]), x->ndim, p.count, xstr, ds, es);
}
MOVER_MEMBERS(slice_grad)

/* ============================================================= concat === */

static em_status concat_infer(em_op_args *a) {
  em_status s;
  const em_shape *x0 = &a->in[0];
  for (int i = 0; i < a->n_in; i++) {
    if ((s = check_dtype(a, i))) return s;
    if (a->in[i].dtype != x0->dtype)
      return em_op_fail(a, "input %d is %s, input 0 %s: every input must have the same dtype", i,
                        em_dtype_name(a->in[i].dtype), em_dtype_name(x0->dtype));
    if (a->in[i].ndim != x0->ndim)
      return em_op_fail(a, "input %d has %d dimensions, input 0 %d: ranks must match", i, a->in[i].ndim, x0->ndim);
  }
  if (x0->ndim == 0) return em_op_fail(a, "scalars cannot be concatenated: inputs need at least one dimension");
  int ax;
  if ((s = em_norm_axis(a, em_attr_int(a, "axis", 0), x0->ndim, &ax))) return s;
  int64_t out[EM_MAX_DIMS], total = 0;
  memcpy(out, x0->dims, sizeof(int64_t) * (size_t)x0->ndim);
  for (int i = 0; i < a->n_in; i++) {
    const em_shape *xi = &a->in[i];
    for (int d = 0; d < x0->ndim; d++) {
      if (d == ax) continue;
      if (xi->dims[d] >= 0 && out[d] >= 0 && xi->dims[d] != out[d])
        return em_op_fail(a, "input %d has size %lld on axis %d where input 0 has %lld: all dims but the concat axis %d must match",
                          i, (long long)xi->dims[d], d, (long long)out[d], ax);
      if (out[d] < 0) out[d] = xi->dims[d];
    }
    total = total < 0 || xi->dims[ax] < 0 ? -1 : total + xi->dims[ax];
  }
  out[ax] = total;
  set_out(a, 0, x0->dtype, x0->ndim, out);
  return EM_OK;
}

static em_status concat_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *y = &a->out[0];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), y->ndim, &ax);
  if (s) return s;
  const size_t es = em_dtype_size(y->dtype);
  /* each tensor's own strides: contiguous, or channels-last ones (concat_layout) */
  const int64_t *ys = em_tensor_strides(out[0]);
  int64_t off = 0;
  char *o = em_tensor_data(out[0]);
  for (int i = 0; i < a->n_in && !s; i++) {
    s = m->copy(a, o + off * ys[ax] * (int64_t)es, em_tensor_data(in[i]), y->ndim, a->in[i].dims, ys,
                em_tensor_strides(in[i]), es);
    off += a->in[i].dims[ax];
  }
  return s;
}
MOVER_MEMBERS(concat)

/* The copies follow each tensor's strides, so inputs may come in any layout; the output is
 * channels-last where an input is and it may be (SqueezeNet's fire modules join two
 * convolutions' channels-last outputs for the next convolution). */
static em_status concat_layout(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c) {
  c->as_is = a->n_in >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << a->n_in) - 1;
  c->out_channels_last = 0;
  for (int i = 0; i < a->n_in && out_may; i++)
    if (!em_tensor_is_contiguous(in[i]) && em_tensor_is_channels_last(in[i])) c->out_channels_last = 1;
  return EM_OK;
}

static em_status concat_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  const int n = a->n_in, nd = a->in[0].ndim;
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), nd, &ax);
  if (s) return s;
  int dynamic = 0;
  for (int i = 0; i < n; i++) dynamic |= a->in[i].dims[ax] < 0;
  int64_t off = 0;
  for (int i = 0; i < n && !s; i++) {
    if (!dynamic) {
      /* Sizes are known: a plain slice of dy. */
      int64_t st = off, en = off + a->in[i].dims[ax], axis = ax;
      em_attr at[3] = {em_attr_is("starts", &st, 1), em_attr_is("ends", &en, 1), em_attr_is("axes", &axis, 1)};
      s = em_apply(g, "slice", &dy[0], 1, at, 3, &din[i], 1);
      off = en;
      /* concat's output takes a known size where some inputs have -1 on
       * another axis; the gradient must carry x's exact (dynamic) shape. */
      em_shape got;
      if (!s) s = em_var_info(g, din[i], &got.dtype, &got.ndim, got.dims);
      got.dtype = a->in[i].dtype;
      if (!s && !em_shape_equal(&got, &a->in[i])) s = em_apply2(g, "reshape_like", din[i], x[i], &din[i]);
      continue;
    }
    /* The offset depends on the run: locate piece i from whichever end
     * needs fewer inputs (at most 1 + 9 of them). */
    em_var in[17];
    int m = 0, from_end = n - i < i + 1;
    in[m++] = dy[0];
    if (from_end)
      for (int j = i; j < n; j++) in[m++] = x[j];
    else
      for (int j = 0; j <= i; j++) in[m++] = x[j];
    em_attr at[2] = {em_attr_i("axis", ax), em_attr_i("from_end", from_end)};
    s = em_apply(g, "_concat_grad", in, m, at, 2, &din[i], 1);
  }
  return s;
}

static em_status concat_grad_infer(em_op_args *a) {
  em_status s;
  for (int i = 0; i < a->n_in; i++)
    if ((s = check_dtype(a, i))) return s;
  const em_shape *dy = &a->in[0];
  int from_end = em_attr_int(a, "from_end", 0) != 0;
  const em_shape *piece = from_end ? &a->in[1] : &a->in[a->n_in - 1];
  if (piece->ndim != dy->ndim || dy->ndim == 0) return em_op_fail(a, "dy and the inputs must have the same rank (>= 1)");
  int ax;
  if ((s = em_norm_axis(a, em_attr_int(a, "axis", 0), dy->ndim, &ax))) return s;
  set_out(a, 0, dy->dtype, piece->ndim, piece->dims);
  return EM_OK;
}

static em_status concat_grad_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *dy = &a->in[0];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), dy->ndim, &ax);
  if (s) return s;
  int from_end = em_attr_int(a, "from_end", 0) != 0;
  const em_shape *piece = from_end ? &a->in[1] : &a->in[a->n_in - 1];
  int64_t off = 0;
  if (from_end) {
    off = dy->dims[ax];
    for (int j = 1; j < a->n_in; j++) off -= a->in[j].dims[ax];
  } else {
    for (int j = 1; j < a->n_in - 1; j++) off += a->in[j].dims[ax];
  }
  if (off < 0 || off + piece->dims[ax] > dy->dims[ax])
    return em_op_fail(a, "the inputs' sizes on axis %d do not fit in dy's %lld", ax, (long long)dy->dims[ax]);
  const size_t es = em_dtype_size(dy->dtype);
  int64_t ys[EM_MAX_DIMS], ps[EM_MAX_DIMS];
  contig_strides(dy->ndim, dy->dims, ys);
  contig_strides(piece->ndim, piece->dims, ps);
  return m->copy(a, em_tensor_data(out[0]), (const char *)em_tensor_data(in[0]) + off * ys[ax] * (int64_t)es, dy->ndim,
                 piece->dims, ps, ys, es);
}
MOVER_MEMBERS(concat_grad)

/* ================================================================ pad === */

/* shape_math.h's codes: the kernels take the mode as a scalar. */
enum { PAD_CONSTANT = EM_SHAPE_PAD_CONSTANT, PAD_REFLECT = EM_SHAPE_PAD_REFLECT, PAD_EDGE = EM_SHAPE_PAD_EDGE };

static em_status pad_attrs(const em_op_args *a, int nd, const int64_t **pads, int *mode) {
  int n;
  *pads = em_attr_ints(a, "pads", &n);
  if (!em_attr_has(a, "pads")) return em_op_fail(a, "attribute 'pads' (INTS [begin..., end...]) is required");
  if (n != 2 * nd) return em_op_fail(a, "'pads' has %d entries: expected 2 * %d (begins, then ends)", n, nd);
  const char *m = em_attr_str(a, "mode", "constant");
  if (!strcmp(m, "constant")) *mode = PAD_CONSTANT;
  else if (!strcmp(m, "reflect")) *mode = PAD_REFLECT;
  else if (!strcmp(m, "edge")) *mode = PAD_EDGE;
  else return em_op_fail(a, "'mode' is '%s': expected constant, reflect or edge", m);
  return EM_OK;
}

/* Output dims of pad (or fails); -1 for a dynamic axis. */
static em_status pad_shape(const em_op_args *a, const em_shape *x, int64_t *out) {
  const int64_t *pads;
  int mode;
  em_status s = pad_attrs(a, x->ndim, &pads, &mode);
  if (s) return s;
  for (int i = 0; i < x->ndim; i++) {
    int64_t d = x->dims[i], pb = pads[i], pe = pads[x->ndim + i];
    if (d < 0) {
      out[i] = -1;
      continue;
    }
    out[i] = d + pb + pe;
    if (out[i] < 0)
      return em_op_fail(a, "'pads' %lld and %lld crop axis %d of size %lld below zero", (long long)pb, (long long)pe, i, (long long)d);
    if (mode != PAD_CONSTANT && d == 0 && out[i] > 0)
      return em_op_fail(a, "'mode' %s cannot pad axis %d of size 0", mode == PAD_REFLECT ? "reflect" : "edge", i);
  }
  return EM_OK;
}

static em_status pad_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  int64_t out[EM_MAX_DIMS];
  if ((s = pad_shape(a, &a->in[0], out))) return s;
  set_out(a, 0, a->in[0].dtype, a->in[0].ndim, out);
  return EM_OK;
}

/* Per axis, the source index of each output position (-1: the constant). */
static int64_t *pad_maps(const em_shape *x, const int64_t *ydims, const int64_t *pads, int mode, int64_t **map) {
  int64_t total = 0;
  for (int i = 0; i < x->ndim; i++) total += ydims[i];
  int64_t *buf = malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
  if (!buf) return NULL;
  int64_t at = 0;
  for (int k = 0; k < x->ndim; k++) {
    int64_t n = x->dims[k];
    map[k] = buf + at;
    at += ydims[k];
    for (int64_t o = 0; o < ydims[k]; o++) map[k][o] = em_shape_pad_src(o, pads[k], n, mode); /* the kernels' rule */
  }
  return buf;
}

static em_status pad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *x = &a->in[0], *y = &a->out[0];
  const int64_t *pads;
  int mode;
  em_status s = pad_attrs(a, x->ndim, &pads, &mode);
  if (s) return s;
  const size_t es = em_dtype_size(x->dtype);
  const int64_t e = (int64_t)es, ny = em_shape_numel(y);
  unsigned char val[8];
  scalar_bytes(x->dtype, em_attr_float(a, "value", 0.0), val);
  const char *src = em_tensor_data(in[0]);
  char *dst = em_tensor_data(out[0]);
  if (ny == 0) return EM_OK;
  if (x->ndim == 0) {
    memcpy(dst, src, es);
    return EM_OK;
  }
  int64_t *map[EM_MAX_DIMS], xs[EM_MAX_DIMS];
  int64_t *buf = pad_maps(x, y->dims, pads, mode, map);
  if (!buf) return no_memory(a);
  contig_strides(x->ndim, x->dims, xs);
  const int L = x->ndim - 1;
  const int64_t inner = y->dims[L], rows = ny / inner;
  /* The last axis: positions [lo, hi) copy a contiguous run of x. */
  int64_t lo = max64(0, pads[L]), hi = min64(inner, pads[L] + x->dims[L]);
  if (hi < lo) hi = lo;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (ny > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t rest = r, soff = 0;
    int constant = 0;
    for (int k = L - 1; k >= 0; k--) {
      int64_t o = rest % y->dims[k];
      rest /= y->dims[k];
      if (map[k][o] < 0) constant = 1;
      else soff += map[k][o] * xs[k];
    }
    char *d = dst + r * inner * e;
    if (constant) {
      fill_elems(d, val, inner, es);
      continue;
    }
    const char *srow = src + soff * e;
    for (int64_t j = 0; j < lo; j++) {
      if (map[L][j] < 0) memcpy(d + j * e, val, es);
      else memcpy(d + j * e, srow + map[L][j] * e, es);
    }
    if (hi > lo) memcpy(d + lo * e, srow + map[L][lo] * e, (size_t)(hi - lo) * es);
    for (int64_t j = hi; j < inner; j++) {
      if (map[L][j] < 0) memcpy(d + j * e, val, es);
      else memcpy(d + j * e, srow + map[L][j] * e, es);
    }
  }
  free(buf);
  return EM_OK;
}

static em_status pad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *x = &a->in[0], *y = &a->out[0];
  const int64_t *pads;
  int mode;
  em_status s = pad_attrs(a, x->ndim, &pads, &mode);
  if (s) return s;
  unsigned char val[8];
  scalar_bytes(x->dtype, em_attr_float(a, "value", 0.0), val);
  if (em_shape_numel(y) == 0) return EM_OK;
  return em_shape_gpu_pad(a, em_tensor_data(out[0]), em_tensor_data(in[0]), x->ndim, x->dims, y->dims, pads, mode,
                          em_dtype_size(x->dtype), val);
}

static em_status pad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                          em_var *din) {
  (void)y;
  em_var in[2] = {dy[0], x[0]};
  return attrs_grad(g, "_pad_grad", a, in, 2, din);
}

/* Second order: pad again, with zeros (the value is the affine part of
 * pad, which has no derivative) in constant mode; reflect and edge modes are
 * linear as they are. */
static em_status pad_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                               em_var *din) {
  (void)x, (void)y;
  return forward_again(g, "pad", a, -1, dy, "value", din);
}

static em_status pad_grad_infer(em_op_args *a) {
  em_status s = check_float(a, 0);
  if (!s) s = check_dtype(a, 1);
  if (s) return s;
  if (a->in[0].dtype != a->in[1].dtype) return em_op_fail(a, "dy and x must have the same dtype");
  int64_t yd[EM_MAX_DIMS];
  if ((s = pad_shape(a, &a->in[1], yd))) return s;
  if (!dims_compatible(&a->in[0], a->in[1].ndim, yd)) {
    char buf[160];
    return em_op_fail(a, "dy must have the padded shape %s", dims_str(a->in[1].ndim, yd, buf, sizeof buf));
  }
  set_out(a, 0, a->in[0].dtype, a->in[1].ndim, a->in[1].dims);
  return EM_OK;
}

/* Adds dy's axis-k.. block at dyoff into x's block at xoff, walking dy in
 * row-major order (so each x element sums its sources in a fixed order). */
static void pad_grad_walk(em_dtype t, int k, int nd, int64_t *const *map, const int64_t *ydims, const int64_t *ys,
                          const int64_t *xs, const char *dy, char *x, int64_t dyoff, int64_t xoff, size_t es) {
  if (k == nd - 1) {
    for (int64_t o = 0; o < ydims[k]; o++) {
      int64_t sidx = map[k][o];
      if (sidx < 0) continue;
      add_row(t, x + (xoff + sidx) * (int64_t)es, dy + (dyoff + o) * (int64_t)es, 1);
    }
    return;
  }
  for (int64_t o = 0; o < ydims[k]; o++)
    if (map[k][o] >= 0)
      pad_grad_walk(t, k + 1, nd, map, ydims, ys, xs, dy, x, dyoff + o * ys[k], xoff + map[k][o] * xs[k], es);
}

/* Each x element sums the dy elements it was copied to, in dy's row-major
 * order (the kernel enumerates them per axis, shape_math.h). */
static em_status pad_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *x = &a->in[1];
  const int64_t *pads;
  int mode;
  em_status s = pad_attrs(a, x->ndim, &pads, &mode);
  if (s) return s;
  const size_t es = em_dtype_size(dys->dtype);
  const int64_t nx = em_shape_numel(x);
  void *o = em_tensor_data(out[0]);
  const void *dy = em_tensor_data(in[0]);
  if (nx == 0) return EM_OK;
  if (em_shape_numel(dys) == 0) return em_shape_gpu_fill(a, o, nx, es, zero_bytes);
  if (x->ndim == 0) { /* the CPU copies, so a -0 stays -0 */
    int64_t one = 1;
    return em_shape_gpu_copy(a, o, dy, 1, &one, &one, &one, es);
  }
  return em_shape_gpu_pad_grad(a, o, dy, dys->dtype, x->ndim, x->dims, dys->dims, pads, mode);
}

static em_status pad_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *x = &a->in[1];
  if (is_half(dys->dtype)) return run_in_f32(a, in, out, 1u, pad_grad_cpu);
  const int64_t *pads;
  int mode;
  em_status s = pad_attrs(a, x->ndim, &pads, &mode);
  if (s) return s;
  const size_t es = em_dtype_size(dys->dtype);
  const int64_t nx = em_shape_numel(x);
  char *o = em_tensor_data(out[0]);
  const char *dy = em_tensor_data(in[0]);
  memset(o, 0, (size_t)nx * es);
  if (nx == 0 || em_shape_numel(dys) == 0) return EM_OK;
  if (x->ndim == 0) {
    memcpy(o, dy, es);
    return EM_OK;
  }
  int64_t *map[EM_MAX_DIMS], xs[EM_MAX_DIMS], ys[EM_MAX_DIMS];
  int64_t *buf = pad_maps(x, dys->dims, pads, mode, map);
  if (!buf) return no_memory(a);
  contig_strides(x->ndim, x->dims, xs);
  contig_strides(dys->ndim, dys->dims, ys);
  /* Threads own slices of x's axis 0; each walks the dy positions mapping
   * there in increasing order. */
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (nx > PAR_MIN)
  for (int64_t p = 0; p < x->dims[0]; p++)
    for (int64_t o0 = 0; o0 < dys->dims[0]; o0++) {
      if (map[0][o0] != p) continue;
      if (x->ndim == 1) add_row(dys->dtype, o + p * (int64_t)es, dy + o0 * (int64_t)es, 1);
      else pad_grad_walk(dys->dtype, 1, x->ndim, map, dys->dims, ys, xs, dy, o, o0 * ys[0], p * xs[0], es);
    }
  free(buf);
  return EM_OK;
}

/* ============================================================= gather === */

static em_status gather_shape(const em_op_args *a, const em_shape *data, const em_shape *idx, int *axis, int64_t *out,
                              int *nd) {
  if (data->ndim == 0) return em_op_fail(a, "data must have at least one dimension");
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), data->ndim, axis);
  if (s) return s;
  *nd = data->ndim - 1 + idx->ndim;
  if (*nd > EM_MAX_DIMS) return em_op_fail(a, "the output would have %d dimensions: at most %d", *nd, EM_MAX_DIMS);
  int m = 0;
  for (int i = 0; i < *axis; i++) out[m++] = data->dims[i];
  for (int i = 0; i < idx->ndim; i++) out[m++] = idx->dims[i];
  for (int i = *axis + 1; i < data->ndim; i++) out[m++] = data->dims[i];
  return EM_OK;
}

static em_status gather_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (!s) s = check_index_dtype(a, 1, "indices");
  if (s) return s;
  int ax, nd;
  int64_t out[EM_MAX_DIMS];
  if ((s = gather_shape(a, &a->in[0], &a->in[1], &ax, out, &nd))) return s;
  set_out(a, 0, a->in[0].dtype, nd, out);
  return EM_OK;
}

/* The indices as int64 in [0, n), or a failure naming the first bad one. */
static em_status gather_indices(const em_op_args *a, const em_tensor *t, const em_shape *is, int axis, int64_t n,
                                int64_t **out) {
  int64_t m = em_shape_numel(is);
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
  if (!idx) return no_memory(a);
  const void *p = em_tensor_data(t);
  for (int64_t j = 0; j < m; j++) {
    int64_t v = read_index(p, is->dtype, j), w = v < 0 ? v + n : v;
    if (w < 0 || w >= n) {
      free(idx);
      return em_index_fail(a, &(em_index_bounds){.data_in = 0, .first_axis = axis, .k = 1}, v, j);
    }
    idx[j] = w;
  }
  *out = idx;
  return EM_OK;
}

static em_status gather_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *data = &a->in[0], *is = &a->in[1];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), data->ndim, &ax);
  if (s) return s;
  const int64_t n = data->dims[ax], outer = prod(data->dims, 0, ax), inner = prod(data->dims, ax + 1, data->ndim);
  const int64_t m = em_shape_numel(is);
  int64_t *idx;
  if ((s = gather_indices(a, in[1], is, ax, n, &idx))) return s;
  const size_t row = (size_t)inner * em_dtype_size(data->dtype);
  const char *src = em_tensor_data(in[0]);
  char *dst = em_tensor_data(out[0]);
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (outer * m * inner > PAR_MIN)
  for (int64_t it = 0; it < outer * m; it++) {
    int64_t o = it / (m ? m : 1), j = it % (m ? m : 1);
    memcpy(dst + (size_t)it * row, src + (size_t)(o * n + idx[j]) * row, row);
  }
  free(idx);
  return EM_OK;
}

/* The indices are checked first (index.cu's check kernel): one out of range
 * fails the run with the CPU's message. */
static em_status gather_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *data = &a->in[0], *is = &a->in[1];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), data->ndim, &ax);
  if (s) return s;
  const int64_t n = data->dims[ax], outer = prod(data->dims, 0, ax), inner = prod(data->dims, ax + 1, data->ndim);
  s = em_index_gpu_check_axis(a, em_tensor_data(in[1]), is->dtype == EM_I64, em_shape_numel(is),
                              &(em_index_bounds){.data_in = 0, .first_axis = ax, .k = 1});
  if (s) return s;
  return em_shape_gpu_gather(a, em_tensor_data(out[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), is->dtype, outer,
                             n, em_shape_numel(is), inner, em_dtype_size(data->dtype));
}

static em_status gather_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)y;
  em_var in[3] = {dy[0], x[1], x[0]};
  return attrs_grad(g, "_gather_grad", a, in, 3, din);
}

/* Second order: gather again, with the same indices (input 1). */
static em_status gather_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                  em_var *din) {
  (void)y;
  return forward_again(g, "gather", a, x[1], dy, NULL, din);
}

static em_status gather_grad_infer(em_op_args *a) {
  em_status s = check_float(a, 0);
  if (!s) s = check_index_dtype(a, 1, "indices");
  if (!s) s = check_dtype(a, 2);
  if (s) return s;
  if (a->in[0].dtype != a->in[2].dtype) return em_op_fail(a, "dy and data must have the same dtype");
  int ax, nd;
  int64_t want[EM_MAX_DIMS];
  if ((s = gather_shape(a, &a->in[2], &a->in[1], &ax, want, &nd))) return s;
  if (!dims_compatible(&a->in[0], nd, want)) {
    char buf[160];
    return em_op_fail(a, "dy must have gather's output shape %s", dims_str(nd, want, buf, sizeof buf));
  }
  set_out(a, 0, a->in[0].dtype, a->in[2].ndim, a->in[2].dims);
  return EM_OK;
}

#define GRAD_BLOCK 1024 /* columns of the inner dims one work item owns */

/* Each dx element sums its terms in index order, as gather_grad_cpu does;
 * indices out of range add nothing (see gather_gpu). */
static em_status gather_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *is = &a->in[1], *data = &a->in[2];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), data->ndim, &ax);
  if (s) return s;
  const int64_t n = data->dims[ax], outer = prod(data->dims, 0, ax), inner = prod(data->dims, ax + 1, data->ndim);
  return em_shape_gpu_gather_grad(a, em_tensor_data(out[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), is->dtype,
                                  dys->dtype, outer, n, em_shape_numel(is), inner);
}

static em_status gather_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *is = &a->in[1], *data = &a->in[2];
  if (is_half(dys->dtype)) return run_in_f32(a, in, out, 1u, gather_grad_cpu);
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", 0), data->ndim, &ax);
  if (s) return s;
  const int64_t n = data->dims[ax], outer = prod(data->dims, 0, ax), inner = prod(data->dims, ax + 1, data->ndim);
  const int64_t m = em_shape_numel(is);
  const int64_t es = (int64_t)em_dtype_size(dys->dtype);
  char *o = em_tensor_data(out[0]);
  const char *dy = em_tensor_data(in[0]);
  memset(o, 0, (size_t)(em_shape_numel(data) * es));
  int64_t *idx;
  if ((s = gather_indices(a, in[1], is, ax, n, &idx))) return s;
  /* Work items are (outer row, column block) pairs: each owns its output
   * columns and adds the indices' rows in index order. */
  const int64_t nblk = (inner + GRAD_BLOCK - 1) / GRAD_BLOCK;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (outer * m * inner > PAR_MIN)
  for (int64_t it = 0; it < outer * nblk; it++) {
    int64_t ob = it / nblk, c0 = it % nblk * GRAD_BLOCK, c1 = min64(inner, c0 + GRAD_BLOCK);
    for (int64_t j = 0; j < m; j++)
      add_row(dys->dtype, o + ((ob * n + idx[j]) * inner + c0) * es, dy + ((ob * m + j) * inner + c0) * es, c1 - c0);
  }
  free(idx);
  return EM_OK;
}

/* ============================================================ one_hot === */

static em_status one_hot_params(const em_op_args *a, int in_nd, int64_t *depth, int *axis, em_dtype *dt) {
  if (!em_attr_has(a, "depth")) return em_op_fail(a, "attribute 'depth' (INT) is required");
  *depth = em_attr_int(a, "depth", 0);
  if (*depth < 1) return em_op_fail(a, "'depth' is %lld: it must be >= 1", (long long)*depth);
  int64_t t = em_attr_int(a, "dtype", EM_F32);
  if (t < 0 || t > EM_BOOL || em_dtype_size((em_dtype)t) == 0) return em_op_fail(a, "'dtype' %lld is not an em_dtype", (long long)t);
  *dt = (em_dtype)t;
  if (in_nd + 1 > EM_MAX_DIMS) return em_op_fail(a, "the output would have %d dimensions: at most %d", in_nd + 1, EM_MAX_DIMS);
  return em_norm_axis(a, em_attr_int(a, "axis", -1), in_nd + 1, axis);
}

static em_status one_hot_infer(em_op_args *a) {
  em_status s = check_index_dtype(a, 0, "indices");
  if (s) return s;
  int64_t depth, out[EM_MAX_DIMS];
  int ax;
  em_dtype dt;
  const em_shape *x = &a->in[0];
  if ((s = one_hot_params(a, x->ndim, &depth, &ax, &dt))) return s;
  for (int i = 0, j = 0; i <= x->ndim; i++) out[i] = i == ax ? depth : x->dims[j++];
  set_out(a, 0, dt, x->ndim + 1, out);
  return EM_OK;
}

static em_status one_hot_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *x = &a->in[0];
  int64_t depth;
  int ax;
  em_dtype dt;
  em_status s = one_hot_params(a, x->ndim, &depth, &ax, &dt);
  if (s) return s;
  unsigned char on[8], off[8];
  scalar_bytes(dt, em_attr_float(a, "on_value", 1.0), on);
  scalar_bytes(dt, em_attr_float(a, "off_value", 0.0), off);
  const size_t es = em_dtype_size(dt);
  const int64_t outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax, x->ndim);
  const void *idx = em_tensor_data(in[0]);
  char *o = em_tensor_data(out[0]);
  /* Output [outer, depth, inner]: element (p, d, q) is on where index (p, q) is d. */
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (outer * depth * inner > PAR_MIN)
  for (int64_t p = 0; p < outer; p++) {
    char *blk = o + (size_t)(p * depth * inner) * es;
    fill_elems(blk, off, depth * inner, es);
    for (int64_t q = 0; q < inner; q++) {
      int64_t v = read_index(idx, x->dtype, p * inner + q);
      if (v < 0) v += depth;
      if (v >= 0 && v < depth) memcpy(blk + (size_t)(v * inner + q) * es, on, es);
    }
  }
  return EM_OK;
}

static em_status one_hot_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *x = &a->in[0];
  int64_t depth;
  int ax;
  em_dtype dt;
  em_status s = one_hot_params(a, x->ndim, &depth, &ax, &dt);
  if (s) return s;
  unsigned char on[8], off[8];
  scalar_bytes(dt, em_attr_float(a, "on_value", 1.0), on);
  scalar_bytes(dt, em_attr_float(a, "off_value", 0.0), off);
  return em_shape_gpu_one_hot(a, em_tensor_data(out[0]), em_tensor_data(in[0]), x->dtype, prod(x->dims, 0, ax), depth,
                              prod(x->dims, ax, x->ndim), em_dtype_size(dt), on, off);
}

/* ============================================================== top_k === */

typedef struct topk_item {
  double f;   /* key of a float dtype */
  int64_t i;  /* key of an integer dtype */
  int64_t at; /* position along the axis: breaks ties */
} topk_item;

/* Orders: larger first (NaN above everything) or smaller first (NaN last),
 * ties lower position first: shape_math.h's order, which the kernel uses. */
static int topk_cmp_f(const topk_item *a, const topk_item *b, int largest) {
  if (em_shape_topk_before_f(a->f, a->at, b->f, b->at, largest)) return -1;
  return em_shape_topk_before_f(b->f, b->at, a->f, a->at, largest);
}
static int topk_cmp_i(const topk_item *a, const topk_item *b, int largest) {
  if (em_shape_topk_before_i(a->i, a->at, b->i, b->at, largest)) return -1;
  return em_shape_topk_before_i(b->i, b->at, a->i, a->at, largest);
}
static int topk_cmp_f_desc(const void *pa, const void *pb) { return topk_cmp_f(pa, pb, 1); }
static int topk_cmp_f_asc(const void *pa, const void *pb) { return topk_cmp_f(pa, pb, 0); }
static int topk_cmp_i_desc(const void *pa, const void *pb) { return topk_cmp_i(pa, pb, 1); }
static int topk_cmp_i_asc(const void *pa, const void *pb) { return topk_cmp_i(pa, pb, 0); }

/* Orders it[0..n) so its first k entries are the k first in cmp's order,
 * sorted. For small k a sorted list of the best k seen so far is kept: most
 * elements fail the one comparison with its last entry. cmp is a total
 * order (ties broken by position), so either path gives the same result. */
static void topk_select(topk_item *it, int64_t n, int64_t k, int (*cmp)(const void *, const void *)) {
  if (k > 64 || k * 16 > n) {
    qsort(it, (size_t)n, sizeof *it, cmp);
    return;
  }
  qsort(it, (size_t)k, sizeof *it, cmp);
  for (int64_t j = k; j < n; j++) {
    if (cmp(&it[j], &it[k - 1]) >= 0) continue;
    topk_item v = it[j];
    int64_t p = k - 1;
    for (; p > 0 && cmp(&v, &it[p - 1]) < 0; p--) it[p] = it[p - 1];
    it[p] = v;
  }
}

static em_status topk_params(const em_op_args *a, const em_shape *x, int *axis, int64_t *k) {
  if (x->ndim == 0) return em_op_fail(a, "x must have at least one dimension");
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", -1), x->ndim, axis);
  if (s) return s;
  if (!em_attr_has(a, "k")) return em_op_fail(a, "attribute 'k' (INT) is required");
  *k = em_attr_int(a, "k", 0);
  int64_t d = x->dims[*axis];
  if (*k < 0 || (d >= 0 && *k > d))
    return em_op_fail(a, "'k' is %lld but axis %d has size %lld", (long long)*k, *axis, (long long)d);
  return EM_OK;
}

static em_status top_k_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  const em_shape *x = &a->in[0];
  if (x->dtype == EM_BOOL) return em_op_fail(a, "x is bool: top_k needs an ordered dtype");
  int ax;
  int64_t k, out[EM_MAX_DIMS];
  if ((s = topk_params(a, x, &ax, &k))) return s;
  memcpy(out, x->dims, sizeof(int64_t) * (size_t)x->ndim);
  out[ax] = k;
  set_out(a, 0, x->dtype, x->ndim, out);
  set_out(a, 1, EM_I64, x->ndim, out);
  return EM_OK;
}

static em_status top_k_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *x = &a->in[0];
  int ax;
  int64_t k;
  em_status s = topk_params(a, x, &ax, &k);
  if (s) return s;
  const int64_t n = x->dims[ax], outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax + 1, x->ndim);
  const int64_t rows = outer * inner;
  const int is_float = em_dtype_is_float(x->dtype), largest = em_attr_int(a, "largest", 1) != 0;
  int (*cmp)(const void *, const void *) = is_float ? (largest ? topk_cmp_f_desc : topk_cmp_f_asc)
                                                    : (largest ? topk_cmp_i_desc : topk_cmp_i_asc);
  const size_t es = em_dtype_size(x->dtype);
  const char *src = em_tensor_data(in[0]);
  char *vals = em_tensor_data(out[0]);
  int64_t *inds = em_tensor_data(out[1]);
  if (k == 0 || rows == 0) return EM_OK;
  int failed = 0;
#pragma omp parallel num_threads(em_cpu_threads()) if (rows * n > PAR_MIN)
  {
    topk_item *it = malloc(sizeof *it * (size_t)n);
    char *line = malloc(es * (size_t)n);
    if (!it || !line) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      if (!it || !line) continue;
      int64_t p = r / inner, q = r % inner, base = p * n * inner + q;
      for (int64_t j = 0; j < n; j++) memcpy(line + (size_t)j * es, src + (size_t)(base + j * inner) * es, es);
      double fk[256];
      int64_t ik[256];
      for (int64_t j0 = 0; j0 < n; j0 += 256) { /* keys through the cast loaders, 256 at a time */
        int64_t m = min64(256, n - j0);
        if (is_float) load_f64(x->dtype, line + (size_t)j0 * es, m, fk);
        else load_i64(x->dtype, line + (size_t)j0 * es, m, ik);
        for (int64_t j = 0; j < m; j++) {
          it[j0 + j].f = is_float ? fk[j] : 0.0;
          it[j0 + j].i = is_float ? 0 : ik[j];
          it[j0 + j].at = j0 + j;
        }
      }
      topk_select(it, n, k, cmp);
      int64_t ob = p * k * inner + q;
      for (int64_t j = 0; j < k; j++) {
        memcpy(vals + (size_t)(ob + j * inner) * es, line + (size_t)it[j].at * es, es);
        inds[ob + j * inner] = it[j].at;
      }
    }
    free(it);
    free(line);
  }
  if (failed) return no_memory(a);
  return EM_OK;
}

/* One thread per element ranks it in its row (the order above). */
static em_status top_k_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *x = &a->in[0];
  int ax;
  int64_t k;
  em_status s = topk_params(a, x, &ax, &k);
  if (s) return s;
  const int64_t n = x->dims[ax], outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax + 1, x->ndim);
  return em_shape_gpu_top_k(a, em_tensor_data(in[0]), x->dtype, outer, n, inner, k, em_attr_int(a, "largest", 1) != 0,
                            em_tensor_data(out[0]), em_tensor_data(out[1]));
}

static em_status top_k_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                            em_var *din) {
  em_var in[3] = {dy[0], y[1], x[0]};
  return attrs_grad(g, "_top_k_grad", a, in, 3, din);
}

static em_status top_k_grad_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (!s) s = check_index_dtype(a, 1, "indices");
  if (!s) s = check_dtype(a, 2);
  if (s) return s;
  const em_shape *dy = &a->in[0], *idx = &a->in[1], *x = &a->in[2];
  if (dy->dtype != x->dtype) return em_op_fail(a, "dy and x must have the same dtype");
  if (!dims_compatible(idx, dy->ndim, dy->dims) || dy->ndim != x->ndim || x->ndim == 0)
    return em_op_fail(a, "dy and indices must have the same shape, of x's rank");
  int ax;
  if ((s = em_norm_axis(a, em_attr_int(a, "axis", -1), x->ndim, &ax))) return s;
  for (int i = 0; i < x->ndim; i++)
    if (i != ax && x->dims[i] >= 0 && dy->dims[i] >= 0 && x->dims[i] != dy->dims[i])
      return em_op_fail(a, "dy and x differ on axis %d (not the top_k axis %d)", i, ax);
  set_out(a, 0, dy->dtype, x->ndim, x->dims);
  return EM_OK;
}

static em_status top_k_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *is = &a->in[1], *x = &a->in[2];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", -1), x->ndim, &ax);
  if (s) return s;
  const size_t es = em_dtype_size(dys->dtype);
  const int64_t n = x->dims[ax], k = dys->dims[ax], outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax + 1, x->ndim);
  char *o = em_tensor_data(out[0]);
  const char *dy = em_tensor_data(in[0]);
  const void *idx = em_tensor_data(in[1]);
  memset(o, 0, (size_t)em_shape_numel(x) * es);
  const int64_t m = em_shape_numel(is);
  for (int64_t j = 0; j < m; j++) { /* checked first, so the scatter below cannot write out of bounds */
    int64_t v = read_index(idx, is->dtype, j);
    if (v < 0 || v >= n) {
      char pos[160];
      return em_op_fail(a, "index %lld at position %s is out of range for axis %d of size %lld", (long long)v,
                        position_str(j, is->ndim, is->dims, pos, sizeof pos), ax, (long long)n);
    }
  }
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (m > PAR_MIN)
  for (int64_t r = 0; r < outer * inner; r++) {
    int64_t p = r / inner, q = r % inner;
    for (int64_t j = 0; j < k; j++) {
      int64_t at = (p * k + j) * inner + q, v = read_index(idx, is->dtype, at);
      memcpy(o + (size_t)((p * n + v) * inner + q) * es, dy + (size_t)at * es, es);
    }
  }
  return EM_OK;
}

/* Indices out of range are skipped on a GPU (the CPU refuses them; a kernel
 * cannot fail the run without a synchronisation). */
static em_status top_k_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *is = &a->in[1], *x = &a->in[2];
  int ax;
  em_status s = em_norm_axis(a, em_attr_int(a, "axis", -1), x->ndim, &ax);
  if (s) return s;
  const int64_t n = x->dims[ax], k = dys->dims[ax], outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax + 1, x->ndim);
  return em_shape_gpu_top_k_grad(a, em_tensor_data(out[0]), em_tensor_data(in[0]), em_tensor_data(in[1]), is->dtype,
                                 em_dtype_size(dys->dtype), outer, n, k, inner);
}

/* ===================================== depth_to_space, space_to_depth === */

static em_status block_params(const em_op_args *a, int64_t *b, int *crd) {
  if (a->in[0].ndim != 4) return em_op_fail(a, "x must be 4-D [N,C,H,W]");
  if (!em_attr_has(a, "blocksize")) return em_op_fail(a, "attribute 'blocksize' (INT) is required");
  *b = em_attr_int(a, "blocksize", 0);
  if (*b < 1) return em_op_fail(a, "'blocksize' is %lld: it must be >= 1", (long long)*b);
  const char *m = em_attr_str(a, "mode", "DCR");
  if (!strcmp(m, "DCR")) *crd = 0;
  else if (!strcmp(m, "CRD")) *crd = 1;
  else return em_op_fail(a, "'mode' is '%s': expected DCR or CRD", m);
  return EM_OK;
}

static em_status d2s_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  int64_t b;
  int crd;
  if (!s) s = block_params(a, &b, &crd);
  if (s) return s;
  const int64_t *d = a->in[0].dims;
  if (d[1] >= 0 && d[1] % (b * b))
    return em_op_fail(a, "channels C = %lld are not divisible by blocksize^2 = %lld", (long long)d[1], (long long)(b * b));
  int64_t out[4] = {d[0], d[1] < 0 ? -1 : d[1] / (b * b), d[2] < 0 ? -1 : d[2] * b, d[3] < 0 ? -1 : d[3] * b};
  set_out(a, 0, a->in[0].dtype, 4, out);
  return EM_OK;
}

static em_status s2d_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  int64_t b;
  int crd;
  if (!s) s = block_params(a, &b, &crd);
  if (s) return s;
  const int64_t *d = a->in[0].dims;
  if ((d[2] >= 0 && d[2] % b) || (d[3] >= 0 && d[3] % b))
    return em_op_fail(a, "H = %lld and W = %lld must be divisible by blocksize %lld", (long long)d[2], (long long)d[3], (long long)b);
  int64_t out[4] = {d[0], d[1] < 0 ? -1 : d[1] * b * b, d[2] < 0 ? -1 : d[2] / b, d[3] < 0 ? -1 : d[3] / b};
  set_out(a, 0, a->in[0].dtype, 4, out);
  return EM_OK;
}

/* Both ops are one copy over the 6-D box [N, C, H, b, W, b] (n, c, h, i, w, j):
 * the spatial tensor [N, C, H*b, W*b] is that box contiguous; the depth
 * tensor [N, C*b*b, H, W] holds it at channel (i*b + j)*C + c (DCR) or
 * c*b*b + i*b + j (CRD). */
static void block_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t b, int crd, int64_t *box,
                           int64_t *spatial, int64_t *depth) {
  int64_t box_[6] = {N, C, H, b, W, b};
  memcpy(box, box_, sizeof box_);
  contig_strides(6, box, spatial);
  int64_t hw = H * W;
  depth[0] = C * b * b * hw;
  depth[2] = W;
  depth[4] = 1;
  depth[1] = crd ? b * b * hw : hw;
  depth[3] = crd ? b * hw : b * C * hw;
  depth[5] = crd ? hw : C * hw;
}

static em_status d2s_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  int64_t b, box[6], sp[6], dp[6];
  int crd;
  em_status s = block_params(a, &b, &crd);
  if (s) return s;
  const int64_t *d = a->in[0].dims;
  block_geometry(d[0], d[1] / (b * b), d[2], d[3], b, crd, box, sp, dp);
  return m->copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), 6, box, sp, dp, em_dtype_size(a->in[0].dtype));
}
MOVER_MEMBERS(d2s)

static em_status s2d_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  int64_t b, box[6], sp[6], dp[6];
  int crd;
  em_status s = block_params(a, &b, &crd);
  if (s) return s;
  const int64_t *d = a->in[0].dims;
  block_geometry(d[0], d[1], d[2] / b, d[3] / b, b, crd, box, sp, dp);
  return m->copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), 6, box, dp, sp, em_dtype_size(a->in[0].dtype));
}
MOVER_MEMBERS(s2d)

static em_status d2s_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                          em_var *din) {
  (void)x, (void)y;
  return attrs_grad(g, "space_to_depth", a, dy, 1, din);
}

static em_status s2d_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                          em_var *din) {
  (void)x, (void)y;
  return attrs_grad(g, "depth_to_space", a, dy, 1, din);
}

/* =============================================================== cast === */

static em_status cast_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  if (!em_attr_has(a, "to")) return em_op_fail(a, "attribute 'to' (INT, an em_dtype) is required");
  int64_t t = em_attr_int(a, "to", -1);
  if (t < 0 || t > EM_BOOL || em_dtype_size((em_dtype)t) == 0) return em_op_fail(a, "'to' %lld is not an em_dtype", (long long)t);
  set_out(a, 0, (em_dtype)t, a->in[0].ndim, a->in[0].dims);
  return EM_OK;
}

static em_status cast_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  convert(a->in[0].dtype, em_tensor_data(in[0]), a->out[0].dtype, em_tensor_data(out[0]), em_tensor_numel(in[0]));
  return EM_OK;
}

static em_status cast_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_dtype from = a->in[0].dtype, to = a->out[0].dtype;
  int64_t n = em_tensor_numel(in[0]), one = 1;
  if (from == to) /* the CPU copies the bytes (NaN payloads, bools other than 0 and 1 included) */
    return em_shape_gpu_copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), 1, &n, &one, &one, em_dtype_size(from));
  return em_shape_gpu_cast(a, em_tensor_data(in[0]), from, em_tensor_data(out[0]), to, n);
}

static em_status cast_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                           em_var *din) {
  (void)x, (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype) || !em_dtype_is_float((em_dtype)em_attr_int(a, "to", -1)))
    return EM_OK;
  em_attr at = em_attr_i("to", a->in[0].dtype);
  return em_apply(g, "cast", &dy[0], 1, &at, 1, &din[0], 1);
}

/* ======================================================= expand, tile === */

static em_status expand_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  if (s) return s;
  int n;
  const int64_t *shape = em_attr_ints(a, "shape", &n);
  if (!em_attr_has(a, "shape")) return em_op_fail(a, "attribute 'shape' (INTS) is required");
  if (n > EM_MAX_DIMS) return em_op_fail(a, "'shape' has %d entries: at most %d dimensions", n, EM_MAX_DIMS);
  em_shape t = {.dtype = a->in[0].dtype, .ndim = n};
  for (int i = 0; i < n; i++) {
    if (shape[i] < 0) return em_op_fail(a, "'shape'[%d] is %lld: dims must be >= 0", i, (long long)shape[i]);
    t.dims[i] = shape[i];
  }
  em_shape out;
  if ((s = em_broadcast_shapes(a, &a->in[0], &t, &out))) return s;
  set_out(a, 0, a->in[0].dtype, out.ndim, out.dims);
  return EM_OK;
}

static em_status expand_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *x = &a->in[0], *y = &a->out[0];
  int64_t xs[EM_MAX_DIMS], ys[EM_MAX_DIMS], ss[EM_MAX_DIMS];
  contig_strides(x->ndim, x->dims, xs);
  contig_strides(y->ndim, y->dims, ys);
  const int lead = y->ndim - x->ndim;
  for (int i = 0; i < y->ndim; i++) {
    int j = i - lead;
    if (j >= 0 && x->dims[j] != y->dims[i] && x->dims[j] != 1)
      return em_op_fail(a, "axis %d of size %lld cannot broadcast to %lld", j, (long long)x->dims[j], (long long)y->dims[i]);
    ss[i] = j < 0 || x->dims[j] == 1 ? 0 : xs[j]; /* stride 0 repeats the element */
  }
  return m->copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), y->ndim, y->dims, ys, ss, em_dtype_size(x->dtype));
}
MOVER_MEMBERS(expand)

static em_status expand_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                             em_var *din) {
  (void)y;
  if (dy[0] < 0 || !em_dtype_is_float(a->in[0].dtype)) return EM_OK;
  return em_sum_to(g, dy[0], x[0], &din[0]);
}

static em_status tile_repeats(const em_op_args *a, int nd, const int64_t **reps) {
  int n;
  *reps = em_attr_ints(a, "repeats", &n);
  if (!em_attr_has(a, "repeats")) return em_op_fail(a, "attribute 'repeats' (INTS, one per axis) is required");
  if (n != nd) return em_op_fail(a, "'repeats' has %d entries for %d dimensions", n, nd);
  for (int i = 0; i < n; i++)
    if ((*reps)[i] < 0) return em_op_fail(a, "'repeats'[%d] is %lld: repeats must be >= 0", i, (long long)(*reps)[i]);
  return EM_OK;
}

static em_status tile_infer(em_op_args *a) {
  em_status s = check_dtype(a, 0);
  const int64_t *reps;
  if (!s) s = tile_repeats(a, a->in[0].ndim, &reps);
  if (s) return s;
  int64_t out[EM_MAX_DIMS];
  for (int i = 0; i < a->in[0].ndim; i++) out[i] = a->in[0].dims[i] < 0 ? -1 : a->in[0].dims[i] * reps[i];
  set_out(a, 0, a->in[0].dtype, a->in[0].ndim, out);
  return EM_OK;
}

/* The tiled tensor seen as the box [r0, d0, r1, d1, ...]: contiguous on the
 * output side; on x's side the repeat axes have stride 0. */
static void tile_geometry(const em_shape *x, const int64_t *reps, int64_t *box, int64_t *ys, int64_t *xs2) {
  int64_t xs[EM_MAX_DIMS];
  contig_strides(x->ndim, x->dims, xs);
  for (int i = 0; i < x->ndim; i++) {
    box[2 * i] = reps[i];
    box[2 * i + 1] = x->dims[i];
    xs2[2 * i] = 0;
    xs2[2 * i + 1] = xs[i];
  }
  contig_strides(2 * x->ndim, box, ys);
}

static em_status tile_run(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, const mover *m) {
  const em_shape *x = &a->in[0];
  const int64_t *reps;
  em_status s = tile_repeats(a, x->ndim, &reps);
  if (s) return s;
  int64_t box[MAXV], ys[MAXV], xs2[MAXV];
  tile_geometry(x, reps, box, ys, xs2);
  return m->copy(a, em_tensor_data(out[0]), em_tensor_data(in[0]), 2 * x->ndim, box, ys, xs2, em_dtype_size(x->dtype));
}
MOVER_MEMBERS(tile)

static em_status tile_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                           em_var *din) {
  (void)y;
  em_var in[2] = {dy[0], x[0]};
  return attrs_grad(g, "_tile_grad", a, in, 2, din);
}

/* Second order: tile again. */
static em_status tile_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                em_var *din) {
  (void)x, (void)y;
  return forward_again(g, "tile", a, -1, dy, NULL, din);
}

static em_status tile_grad_infer(em_op_args *a) {
  em_status s = check_float(a, 0);
  if (!s) s = check_dtype(a, 1);
  const int64_t *reps;
  if (!s) s = tile_repeats(a, a->in[1].ndim, &reps);
  if (s) return s;
  if (a->in[0].dtype != a->in[1].dtype) return em_op_fail(a, "dy and x must have the same dtype");
  int64_t want[EM_MAX_DIMS];
  for (int i = 0; i < a->in[1].ndim; i++) want[i] = a->in[1].dims[i] < 0 ? -1 : a->in[1].dims[i] * reps[i];
  if (!dims_compatible(&a->in[0], a->in[1].ndim, want)) {
    char buf[160];
    return em_op_fail(a, "dy must have the tiled shape %s", dims_str(a->in[1].ndim, want, buf, sizeof buf));
  }
  set_out(a, 0, a->in[0].dtype, a->in[1].ndim, a->in[1].dims);
  return EM_OK;
}

static em_status tile_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *x = &a->in[1];
  if (is_half(dys->dtype)) return run_in_f32(a, in, out, 1u, tile_grad_cpu);
  const int64_t *reps;
  em_status s = tile_repeats(a, x->ndim, &reps);
  if (s) return s;
  const int64_t es = (int64_t)em_dtype_size(dys->dtype), nx = em_shape_numel(x);
  char *o = em_tensor_data(out[0]);
  const char *dy = em_tensor_data(in[0]);
  memset(o, 0, (size_t)(nx * es));
  if (nx == 0 || em_shape_numel(dys) == 0) return EM_OK;
  if (x->ndim == 0) {
    memcpy(o, dy, (size_t)es);
    return EM_OK;
  }
  int64_t box[MAXV], ys[MAXV], xs2[MAXV];
  tile_geometry(x, reps, box, ys, xs2);
  const int L = x->ndim - 1;
  const int64_t inner = x->dims[L], rows = nx / inner, combos = prod(reps, 0, x->ndim);
  /* Each x row sums its copies in row-major order of the repeat index. */
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (nx * combos > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t base = 0, rest = r;
    for (int k = L - 1; k >= 0; k--) {
      base += rest % x->dims[k] * ys[2 * k + 1];
      rest /= x->dims[k];
    }
    int64_t c[EM_MAX_DIMS] = {0}, off = 0;
    for (int64_t t = 0; t < combos; t++) {
      add_row(dys->dtype, o + r * inner * es, dy + (base + off) * es, inner);
      for (int k = x->ndim - 1; k >= 0; k--) { /* next repeat index, last axis fastest */
        c[k]++;
        off += ys[2 * k];
        if (c[k] < reps[k]) break;
        off -= ys[2 * k] * reps[k];
        c[k] = 0;
      }
    }
  }
  return EM_OK;
}

static em_status tile_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const em_shape *dys = &a->in[0], *x = &a->in[1];
  const int64_t *reps;
  em_status s = tile_repeats(a, x->ndim, &reps);
  if (s) return s;
  const size_t es = em_dtype_size(dys->dtype);
  const int64_t nx = em_shape_numel(x);
  void *o = em_tensor_data(out[0]);
  const void *dy = em_tensor_data(in[0]);
  if (nx == 0) return EM_OK;
  if (em_shape_numel(dys) == 0) return em_shape_gpu_fill(a, o, nx, es, zero_bytes);
  if (x->ndim == 0) { /* the CPU copies, so a -0 stays -0 */
    int64_t one = 1;
    return em_shape_gpu_copy(a, o, dy, 1, &one, &one, &one, es);
  }
  return em_shape_gpu_tile_grad(a, o, dy, dys->dtype, x->ndim, x->dims, reps);
}

/* ============================================================== table === */

const em_op_def em_ops_shape[] = {
    {.name = "reshape",
     .doc = "x in a new shape: attr shape (INTS; 0 copies x's dim, one -1 inferred)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,
     .infer = reshape_infer, .cpu = copy_cpu, .gpu = copy_gpu, .backward = reshape_back,
     .attrs = EM_ATTRS("shape")},
    {.name = "reshape_like",
     .doc = "x's elements in the shape of input 'like' (same element count)",
     .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 1u << 1, .inplace = 1,
     .infer = reshape_like_infer, .cpu = copy_cpu, .gpu = copy_gpu, .backward = reshape_back,
     .attrs = EM_NO_ATTRS},
    {.name = "transpose",
     .doc = "permutes axes: attr perm (INTS; output axis i is input axis perm[i]; default reversed)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = transpose_infer, .cpu = transpose_cpu, .gpu = transpose_gpu, .backward = transpose_back,
     .attrs = EM_ATTRS("perm")},
    {.name = "squeeze",
     .doc = "removes size-1 axes: attr axes (INTS; absent: all of them, static shapes only)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,
     .infer = squeeze_infer, .cpu = copy_cpu, .gpu = copy_gpu, .backward = reshape_back,
     .attrs = EM_ATTRS("axes")},
    {.name = "unsqueeze",
     .doc = "inserts size-1 axes: attr axes (INTS, positions in the output)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,
     .infer = unsqueeze_infer, .cpu = copy_cpu, .gpu = copy_gpu, .backward = reshape_back,
     .attrs = EM_ATTRS("axes")},
    {.name = "expand_dims",
     .doc = "unsqueeze: inserts size-1 axes: attr axes (INTS, positions in the output)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,
     .infer = unsqueeze_infer, .cpu = copy_cpu, .gpu = copy_gpu, .backward = reshape_back,
     .attrs = EM_ATTRS("axes")},
    {.name = "flatten",
     .doc = "2-D [prod(dims[:axis]), prod(dims[axis:])]: attr axis (INT, default 1)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .inplace = 1,
     .infer = flatten_infer, .cpu = copy_cpu, .gpu = copy_gpu, .backward = reshape_back,
     .attrs = EM_ATTRS("axis")},
    {.name = "slice",
     .doc = "ONNX Slice: attrs starts, ends (INTS), axes (INTS, default 0..), steps (INTS, default 1; nonzero)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = slice_infer, .cpu = slice_cpu, .gpu = slice_gpu, .backward = slice_back,
     .attrs = EM_ATTRS("starts", "ends", "axes", "steps")},
    {.name = "_slice_grad",
     .doc = "slice's gradient (dy, x): dy scattered into zeros of x's shape; slice's attrs",
     .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 2u,
     .infer = slice_grad_infer, .cpu = slice_grad_cpu, .gpu = slice_grad_gpu, .backward = slice_grad_back,
     /* slice's attributes, forwarded wholesale by slice_back */
     .attrs = EM_ATTRS("starts", "ends", "axes", "steps")},
    {.name = "concat",
     .doc = "joins 1..16 inputs along attr axis (INT, default 0); other dims must match (CNTK splice)",
     .min_inputs = 1, .max_inputs = 16, .n_outputs = 1,
     .infer = concat_infer, .cpu = concat_cpu, .gpu = concat_gpu, .backward = concat_back,
     .attrs = EM_ATTRS("axis"), .layout = concat_layout},
    {.name = "_concat_grad",
     .doc = "concat's gradient for a dynamic axis (dy, xs...): attrs axis, from_end (piece of the last/first x)",
     .min_inputs = 2, .max_inputs = 16, .n_outputs = 1, .no_grad = 0xfffeu,
     .infer = concat_grad_infer, .cpu = concat_grad_cpu, .gpu = concat_grad_gpu,
     .attrs = EM_ATTRS("axis", "from_end")},
    {.name = "pad",
     .doc = "pads (ONNX): attrs pads (INTS [begins, ends]; negative crops), mode (constant|reflect|edge), value (FLOAT)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = pad_infer, .cpu = pad_cpu, .gpu = pad_gpu, .backward = pad_back,
     .attrs = EM_ATTRS("pads", "mode", "value")},
    {.name = "_pad_grad",
     .doc = "pad's gradient (dy, x): each dy element added to its source in x; attrs pads, mode",
     .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 2u,
     .infer = pad_grad_infer, .cpu = pad_grad_cpu, .gpu = pad_grad_gpu, .backward = pad_grad_back,
     /* pad's attributes, forwarded wholesale by pad_back (value is not read) */
     .attrs = EM_ATTRS("pads", "mode", "value")},
    {.name = "gather",
     .doc = "data[..., indices, ...] along attr axis (INT, default 0); indices i32/i64, negative from the end",
     .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 1u << 1,
     .infer = gather_infer, .cpu = gather_cpu, .gpu = gather_gpu, .backward = gather_back,
     .attrs = EM_ATTRS("axis")},
    {.name = "_gather_grad",
     .doc = "gather's gradient (dy, indices, data): deterministic scatter-add into zeros; attr axis",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 6u,
     .infer = gather_grad_infer, .cpu = gather_grad_cpu, .gpu = gather_grad_gpu, .backward = gather_grad_back,
     /* gather's attributes, forwarded wholesale by gather_back */
     .attrs = EM_ATTRS("axis")},
    {.name = "one_hot",
     .doc = "one-hot of i32/i64 indices: attrs depth (INT), axis (INT, -1), dtype (INT em_dtype, f32), on_value, off_value",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .no_grad = 1u,
     .infer = one_hot_infer, .cpu = one_hot_cpu, .gpu = one_hot_gpu,
     .attrs = EM_ATTRS("depth", "axis", "dtype", "on_value", "off_value")},
    {.name = "top_k",
     .doc = "k largest (or smallest) along axis: attrs k, axis (-1), largest (1), sorted (1); values and i64 indices",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 2,
     .infer = top_k_infer, .cpu = top_k_cpu, .gpu = top_k_gpu, .backward = top_k_back,
     /* sorted is accepted and documented but has no effect (the output is always sorted) */
     .attrs = EM_ATTRS("k", "axis", "largest", "sorted")},
    {.name = "_top_k_grad",
     .doc = "top_k's gradient (dy, indices, x): dy written at the indices in zeros of x's shape; attr axis",
     .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 6u,
     .infer = top_k_grad_infer, .cpu = top_k_grad_cpu, .gpu = top_k_grad_gpu,
     /* top_k's attributes, forwarded wholesale by top_k_back (only axis is read) */
     .attrs = EM_ATTRS("k", "axis", "largest", "sorted")},
    {.name = "depth_to_space",
     .doc = "NCHW [N,C,H,W] -> [N,C/b^2,H*b,W*b]: attrs blocksize (INT), mode (DCR|CRD)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = d2s_infer, .cpu = d2s_cpu, .gpu = d2s_gpu, .backward = d2s_back,
     /* space_to_depth's backward forwards its attributes here, and back */
     .attrs = EM_ATTRS("blocksize", "mode")},
    {.name = "space_to_depth",
     .doc = "NCHW [N,C,H,W] -> [N,C*b^2,H/b,W/b]: attrs blocksize (INT), mode (DCR|CRD: depth_to_space's inverse)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = s2d_infer, .cpu = s2d_cpu, .gpu = s2d_gpu, .backward = s2d_back,
     .attrs = EM_ATTRS("blocksize", "mode")},
    {.name = "cast",
     .doc = "converts to attr to (INT em_dtype): truncation and saturation into integers, NaN->0, RNE into floats",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = cast_infer, .cpu = cast_cpu, .gpu = cast_gpu, .backward = cast_back,
     .attrs = EM_ATTRS("to")},
    {.name = "expand",
     .doc = "numpy broadcast of x and attr shape (INTS) (ONNX Expand)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = expand_infer, .cpu = expand_cpu, .gpu = expand_gpu, .backward = expand_back,
     .attrs = EM_ATTRS("shape")},
    {.name = "tile",
     .doc = "repeats x along each axis: attr repeats (INTS, one per axis, >= 0)",
     .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .infer = tile_infer, .cpu = tile_cpu, .gpu = tile_gpu, .backward = tile_back,
     .attrs = EM_ATTRS("repeats")},
    {.name = "_tile_grad",
     .doc = "tile's gradient (dy, x): the sum over the repeats in a fixed order; attr repeats",
     .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 2u,
     .infer = tile_grad_infer, .cpu = tile_grad_cpu, .gpu = tile_grad_gpu, .backward = tile_grad_back,
     /* tile's attributes, forwarded wholesale by tile_back */
     .attrs = EM_ATTRS("repeats")},
};
const size_t em_ops_shape_count = sizeof em_ops_shape / sizeof em_ops_shape[0];
