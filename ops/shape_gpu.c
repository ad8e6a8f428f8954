/* Launches of the shape family's kernels (kernels/shape.cu) for the gpu
 * members of ops/shape.c, which work out each op's geometry (shape_gpu.h).
 * Kernels that only move data come in one variant per element size, chosen
 * here; the rest take the dtype as a scalar. */
#include "shape_gpu.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/shape_math.h"

_Static_assert(EM_SHAPE_F32 == EM_F32 && EM_SHAPE_F64 == EM_F64 && EM_SHAPE_F16 == EM_F16 && EM_SHAPE_BF16 == EM_BF16 &&
                   EM_SHAPE_I32 == EM_I32 && EM_SHAPE_I64 == EM_I64 && EM_SHAPE_U8 == EM_U8 && EM_SHAPE_BOOL == EM_BOOL,
               "kernels/shape_math.h's dtype codes must be em_dtype's");

#define KDIMS 6 /* axes a kernel takes */

/* The kernel `stem`_u8/_u16/_u32/_u64 for es-byte elements, into buf. */
static em_status kernel_for_size(const em_op_args *a, const char *stem, size_t es, char *buf, size_t cap) {
  const char *suffix = es == 1 ? "u8" : es == 2 ? "u16" : es == 4 ? "u32" : es == 8 ? "u64" : NULL;
  if (!suffix) return em_fail(EM_ERR_INVALID_ARGUMENT, "op '%s': no %s kernel for %zu-byte elements", a->def->name, stem, es);
  snprintf(buf, cap, "%s_%s", stem, suffix);
  return EM_OK;
}

/* The kernel `stem`_f32 or _f64 of a summing gradient. f16/bf16 gradients
 * stay on the CPU (it sums them in f32 and rounds once; no kernel does yet). */
static em_status kernel_for_float(const em_op_args *a, const char *stem, em_dtype t, char *buf, size_t cap) {
  if (t != EM_F32 && t != EM_F64)
    return em_fail(EM_ERR_USE_CPU, "op '%s': %s gradients run on the CPU", a->def->name, em_dtype_name(t));
  snprintf(buf, cap, "%s_%s", stem, t == EM_F32 ? "f32" : "f64");
  return EM_OK;
}

/* The element whose bytes are val[0..es), as the kernels' 64-bit scalar (low bytes first). */
static unsigned long long element_bits(const unsigned char *val, size_t es) {
  unsigned long long bits = 0;
  memcpy(&bits, val, es < sizeof bits ? es : sizeof bits);
  return bits;
}

/* ---------------------------------------------------------- strided copy --- */

/* One launch over v's axes from `from` on (at most KDIMS of them, padded in
 * front with size-1 axes), dst and src pointing at the box's first element. */
static em_status copy_launch(const em_op_args *a, const char *kernel, char *dst, const char *src,
                             const em_shape_view *v, int from) {
  long long d[KDIMS], ds[KDIMS], ss[KDIMS], n = 1;
  const int pad = KDIMS - (v->nd - from);
  for (int i = 0; i < KDIMS; i++) {
    int j = from + i - pad;
    d[i] = i >= pad ? v->dims[j] : 1;
    ds[i] = i >= pad ? v->ds[j] : 0;
    ss[i] = i >= pad ? v->ss[j] : 0;
    n *= d[i];
  }
  void *dp = dst, *sp = (void *)src;
  void *args[] = {&dp, &sp, &n, &d[1], &d[2], &d[3], &d[4], &d[5], &ds[0], &ds[1], &ds[2], &ds[3], &ds[4], &ds[5],
                  &ss[0], &ss[1], &ss[2], &ss[3], &ss[4], &ss[5]};
  return em_ops_launch_1d(a, kernel, (size_t)n, args);
}

em_status em_shape_gpu_copy(const em_op_args *a, void *dst, const void *src, int nd, const int64_t *dims,
                            const int64_t *ds, const int64_t *ss, size_t es) {
  char kernel[64];
  em_status s = kernel_for_size(a, "em_shape_copy", es, kernel, sizeof kernel);
  if (s) return s;
  em_shape_view v;
  if (!em_shape_view_simplify(&v, nd, dims, ds, ss)) return EM_OK; /* empty */
  const int outer = v.nd > KDIMS ? v.nd - KDIMS : 0;
  /* More than KDIMS axes (a rank-6+ tile or transpose that nothing merges):
   * one launch per index of the outer axes, an odometer over them. */
  int64_t idx[EM_SHAPE_MAXV] = {0}, doff = 0, soff = 0;
  const int64_t e = (int64_t)es;
  for (;;) {
    if ((s = copy_launch(a, kernel, (char *)dst + doff * e, (const char *)src + soff * e, &v, outer))) return s;
    int k = outer - 1;
    for (; k >= 0; k--) {
      idx[k]++;
      doff += v.ds[k];
      soff += v.ss[k];
      if (idx[k] < v.dims[k]) break;
      doff -= v.ds[k] * v.dims[k];
      soff -= v.ss[k] * v.dims[k];
      idx[k] = 0;
    }
    if (k < 0) return EM_OK;
  }
}

em_status em_shape_gpu_fill(const em_op_args *a, void *dst, int64_t n, size_t es, const unsigned char *val) {
  char kernel[64];
  em_status s = kernel_for_size(a, "em_shape_fill", es, kernel, sizeof kernel);
  if (s) return s;
  long long count = n;
  unsigned long long bits = element_bits(val, es);
  void *args[] = {&dst, &count, &bits};
  return em_ops_launch_1d(a, kernel, (size_t)n, args);
}

/* ------------------------------------------------------------------ cast --- */

em_status em_shape_gpu_cast(const em_op_args *a, const void *x, em_dtype from, void *y, em_dtype to, int64_t n) {
  int f = (int)from, t = (int)to;
  long long count = n;
  void *xp = (void *)x;
  void *args[] = {&xp, &f, &y, &t, &count};
  return em_ops_launch_1d(a, "em_shape_cast", (size_t)n, args);
}

/* ------------------------------------------------------------------- pad --- */

/* pad's axes for a kernel: size-1 axes without pads dropped, neighbours
 * without pads merged (each is the identity there, so the merged axis is
 * too, and row-major order is kept), padded in front to KDIMS. Fails
 * (EM_ERR_USE_CPU) when more than KDIMS padded axes remain. */
static em_status pad_axes(const em_op_args *a, int nd, const int64_t *xd, const int64_t *yd, const int64_t *pb,
                          long long *x, long long *y, long long *p) {
  long long mx[EM_MAX_DIMS], my[EM_MAX_DIMS], mp[EM_MAX_DIMS];
  int m = 0;
  for (int i = 0; i < nd; i++) {
    int plain = pb[i] == 0 && xd[i] == yd[i];
    if (plain && xd[i] == 1) continue;
    if (plain && m > 0 && mp[m - 1] == 0 && mx[m - 1] == my[m - 1]) {
      mx[m - 1] *= xd[i];
      my[m - 1] *= yd[i];
      continue;
    }
    mx[m] = xd[i];
    my[m] = yd[i];
    mp[m] = pb[i];
    m++;
  }
  if (m > KDIMS)
    return em_fail(EM_ERR_USE_CPU, "op '%s': %d padded axes remain, the kernels take %d", a->def->name, m, KDIMS);
  for (int i = 0; i < KDIMS; i++) {
    int j = i - (KDIMS - m);
    x[i] = j >= 0 ? mx[j] : 1;
    y[i] = j >= 0 ? my[j] : 1;
    p[i] = j >= 0 ? mp[j] : 0;
  }
  return EM_OK;
}

em_status em_shape_gpu_pad(const em_op_args *a, void *y, const void *x, int nd, const int64_t *xd, const int64_t *yd,
                           const int64_t *pb, int mode, size_t es, const unsigned char *val) {
  char kernel[64];
  long long X[KDIMS], Y[KDIMS], P[KDIMS], n = 1;
  em_status s = kernel_for_size(a, "em_shape_pad", es, kernel, sizeof kernel);
  if (!s) s = pad_axes(a, nd, xd, yd, pb, X, Y, P);
  if (s) return s;
  for (int i = 0; i < KDIMS; i++) n *= Y[i];
  unsigned long long bits = element_bits(val, es);
  void *xp = (void *)x;
  void *args[] = {&y, &xp, &n, &mode, &bits, &Y[1], &Y[2], &Y[3], &Y[4], &Y[5], &X[0], &X[1], &X[2], &X[3], &X[4],
                  &X[5], &P[0], &P[1], &P[2], &P[3], &P[4], &P[5]};
  return em_ops_launch_1d(a, kernel, (size_t)n, args);
}

em_status em_shape_gpu_pad_grad(const em_op_args *a, void *dx, const void *dy, em_dtype t, int nd, const int64_t *xd,
                                const int64_t *yd, const int64_t *pb, int mode) {
  char kernel[64];
  long long X[KDIMS], Y[KDIMS], P[KDIMS], n = 1;
  em_status s = kernel_for_float(a, "em_shape_pad_grad", t, kernel, sizeof kernel);
  if (!s) s = pad_axes(a, nd, xd, yd, pb, X, Y, P);
  if (s) return s;
  for (int i = 0; i < KDIMS; i++) n *= X[i];
  void *dyp = (void *)dy;
  void *args[] = {&dx, &dyp, &n, &mode, &Y[0], &Y[1], &Y[2], &Y[3], &Y[4], &Y[5], &X[0], &X[1],
                  &X[2], &X[3], &X[4], &X[5], &P[0], &P[1], &P[2], &P[3], &P[4], &P[5]};
  return em_ops_launch_1d(a, kernel, (size_t)n, args);
}

/* ---------------------------------------------------------------- gather --- */

em_status em_shape_gpu_gather(const em_op_args *a, void *y, const void *data, const void *idx, em_dtype it,
                              int64_t outer, int64_t n, int64_t m, int64_t inner, size_t es) {
  char kernel[64];
  em_status s = kernel_for_size(a, "em_shape_gather", es, kernel, sizeof kernel);
  if (s) return s;
  long long total = outer * m * inner, mm = m, in = inner, nd = n;
  int idx64 = it == EM_I64;
  void *dp = (void *)data, *ip = (void *)idx;
  void *args[] = {&y, &dp, &ip, &idx64, &total, &mm, &in, &nd};
  return em_ops_launch_1d(a, kernel, (size_t)total, args);
}

/* Threads aimed for by the gradient's row chunks: each thread reads every
 * index, so more chunks buy parallelism with index reads. */
#define GATHER_GRAD_THREADS 8192

em_status em_shape_gpu_gather_grad(const em_op_args *a, void *dx, const void *dy, const void *idx, em_dtype it,
                                   em_dtype t, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  char kernel[64];
  em_status s = kernel_for_float(a, "em_shape_gather_grad", t, kernel, sizeof kernel);
  if (s) return s;
  if (outer * n * inner == 0) return EM_OK;
  long long cols = outer * inner, chunks = (GATHER_GRAD_THREADS + cols - 1) / cols;
  if (chunks > n) chunks = n;
  long long rows = (n + chunks - 1) / chunks;
  chunks = (n + rows - 1) / rows;
  long long total = cols * chunks, mm = m, in = inner, nd = n;
  int idx64 = it == EM_I64;
  void *dyp = (void *)dy, *ip = (void *)idx;
  void *args[] = {&dx, &dyp, &ip, &idx64, &total, &mm, &in, &nd, &rows, &chunks};
  return em_ops_launch_1d(a, kernel, (size_t)total, args);
}

/* --------------------------------------------------------------- one_hot --- */

em_status em_shape_gpu_one_hot(const em_op_args *a, void *y, const void *idx, em_dtype it, int64_t outer,
                               int64_t depth, int64_t inner, size_t es, const unsigned char *on,
                               const unsigned char *off) {
  char kernel[64];
  em_status s = kernel_for_size(a, "em_shape_one_hot", es, kernel, sizeof kernel);
  if (s) return s;
  long long total = outer * depth * inner, d = depth, in = inner;
  unsigned long long onb = element_bits(on, es), offb = element_bits(off, es);
  int idx64 = it == EM_I64;
  void *ip = (void *)idx;
  void *args[] = {&y, &ip, &idx64, &total, &d, &in, &onb, &offb};
  return em_ops_launch_1d(a, kernel, (size_t)total, args);
}

/* ----------------------------------------------------------------- top_k --- */

em_status em_shape_gpu_top_k(const em_op_args *a, const void *x, em_dtype t, int64_t outer, int64_t n, int64_t inner,
                             int64_t k, int largest, void *vals, int64_t *inds) {
  if (k == 0) return EM_OK;
  long long total = outer * n * inner, nd = n, in = inner, kk = k;
  int dt = (int)t;
  void *xp = (void *)x;
  void *args[] = {&xp, &dt, &total, &nd, &in, &kk, &largest, &vals, &inds};
  return em_ops_launch_1d(a, "em_shape_top_k", (size_t)total, args);
}

em_status em_shape_gpu_top_k_grad(const em_op_args *a, void *dx, const void *dy, const void *idx, em_dtype it,
                                  size_t es, int64_t outer, int64_t n, int64_t k, int64_t inner) {
  char kernel[64];
  em_status s = kernel_for_size(a, "em_shape_top_k_grad", es, kernel, sizeof kernel);
  if (s) return s;
  if (n == 0) return EM_OK;
  long long rows = outer * inner, nd = n, kk = k, in = inner;
  int idx64 = it == EM_I64;
  void *dyp = (void *)dy, *ip = (void *)idx;
  void *args[] = {&dx, &dyp, &ip, &idx64, &rows, &nd, &kk, &in};
  return em_ops_launch_1d(a, kernel, (size_t)rows, args);
}

/* ------------------------------------------------------------- tile grad --- */

em_status em_shape_gpu_tile_grad(const em_op_args *a, void *dx, const void *dy, em_dtype t, int nd,
                                 const int64_t *xd, const int64_t *reps) {
  char kernel[64];
  em_status s = kernel_for_float(a, "em_shape_tile_grad", t, kernel, sizeof kernel);
  if (s) return s;
  /* Size-1 axes repeated once drop out; neighbours repeated once merge (one
   * repeat index value: the order of the sum is unchanged). */
  long long mx[EM_MAX_DIMS], mr[EM_MAX_DIMS], X[KDIMS], R[KDIMS], n = 1;
  int m = 0;
  for (int i = 0; i < nd; i++) {
    if (reps[i] == 1 && xd[i] == 1) continue;
    if (reps[i] == 1 && m > 0 && mr[m - 1] == 1) {
      mx[m - 1] *= xd[i];
      continue;
    }
    mx[m] = xd[i];
    mr[m] = reps[i];
    m++;
  }
  if (m > KDIMS)
    return em_fail(EM_ERR_USE_CPU, "op '%s': %d repeated axes remain, the kernels take %d", a->def->name, m, KDIMS);
  for (int i = 0; i < KDIMS; i++) {
    int j = i - (KDIMS - m);
    X[i] = j >= 0 ? mx[j] : 1;
    R[i] = j >= 0 ? mr[j] : 1;
    n *= X[i];
  }
  void *dyp = (void *)dy;
  void *args[] = {&dx, &dyp, &n, &X[0], &X[1], &X[2], &X[3], &X[4], &X[5], &R[0], &R[1], &R[2], &R[3], &R[4], &R[5]};
  return em_ops_launch_1d(a, kernel, (size_t)n, args);
}
