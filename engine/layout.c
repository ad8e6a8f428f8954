/* Channels-last values (op.h): an N x C x spatial tensor whose channel axis
 * is innermost in memory, NHWC under an NCHW shape. The CPU executor keeps a
 * chain of fast-mode convolutions and element-wise ops in this layout
 * (exec.c), as oneDNN's NHWC kernels take it directly: without it every
 * convolution paid two reorders and its pointwise layers an OpenBLAS GEMM
 * that packs both operands on every call. Such a tensor is an ordinary
 * strided view (em_tensor_permute of an N x spatial x C tensor), so anything
 * that walks strides reads it correctly; ops that want contiguous inputs
 * get a copy from the executor (em_tensor_from_channels_last). */
#include <string.h>

#include "op.h"

int em_tensor_is_channels_last(const em_tensor *t) {
  const int nd = em_tensor_ndim(t);
  if (nd < 3) return 0;
  const int64_t *sh = em_tensor_shape(t), *st = em_tensor_strides(t);
  for (int i = 0; i < nd; i++)
    if (sh[i] == 0) return 0;
  /* Expected strides, innermost first: C, then the spatial axes from the last, then N. Axes of
   * size 1 take any stride (nothing steps along them). */
  int64_t want = 1;
  if (sh[1] != 1 && st[1] != 1) return 0;
  want *= sh[1];
  for (int i = nd - 1; i >= 2; i--) {
    if (sh[i] != 1 && st[i] != want) return 0;
    want *= sh[i];
  }
  return sh[0] == 1 || st[0] == want;
}

em_status em_tensor_empty_channels_last(em_device dev, const em_shape *s, em_tensor **out) {
  if (s->ndim < 3 || s->ndim > EM_MAX_DIMS) return em_tensor_empty(dev, s, out);
  /* Allocated as N x spatial x C, then viewed as N x C x spatial. */
  em_shape nhwc = *s;
  int perm[EM_MAX_DIMS];
  nhwc.dims[s->ndim - 1] = s->dims[1];
  for (int i = 2; i < s->ndim; i++) nhwc.dims[i - 1] = s->dims[i];
  perm[0] = 0, perm[1] = s->ndim - 1;
  for (int i = 2; i < s->ndim; i++) perm[i] = i - 1;
  em_tensor *base = NULL;
  em_status st = em_tensor_empty(dev, &nhwc, &base);
  if (!st) st = em_tensor_permute(base, perm, out);
  em_tensor_release(base);
  return st;
}

/* Tiles of the [planes x c] -> [c x planes] transpose: small enough that a
 * tile's rows stay in L1 while its columns are written. */
#define TILE 32

static void transpose_tile(size_t esz, const char *x, char *y, int64_t planes, int64_t c, int64_t p0, int64_t c0) {
  const int64_t p1 = p0 + TILE < planes ? p0 + TILE : planes, c1 = c0 + TILE < c ? c0 + TILE : c;
  if (esz == 4) {
    const float *xf = (const float *)(const void *)x;
    float *yf = (float *)(void *)y;
    for (int64_t ci = c0; ci < c1; ci++)
      for (int64_t p = p0; p < p1; p++) yf[ci * planes + p] = xf[p * c + ci];
    return;
  }
  for (int64_t ci = c0; ci < c1; ci++)
    for (int64_t p = p0; p < p1; p++) memcpy(y + (size_t)(ci * planes + p) * esz, x + (size_t)(p * c + ci) * esz, esz);
}

em_status em_tensor_from_channels_last(em_tensor *t, em_tensor **out) {
  if (em_tensor_is_contiguous(t) || !em_tensor_is_channels_last(t) ||
      em_tensor_device(t).kind != EM_DEVICE_CPU)
    return em_tensor_contiguous(t, out);
  em_shape s = {.dtype = em_tensor_dtype(t), .ndim = em_tensor_ndim(t)};
  memcpy(s.dims, em_tensor_shape(t), sizeof(int64_t) * (size_t)s.ndim);
  em_status st = em_tensor_empty(em_tensor_device(t), &s, out);
  if (st) return st;
  const int64_t n = s.dims[0], c = s.dims[1];
  int64_t planes = 1;
  for (int i = 2; i < s.ndim; i++) planes *= s.dims[i];
  const size_t esz = em_dtype_size(s.dtype);
  const char *x = em_tensor_data(t);
  char *y = em_tensor_data(*out);
  const int64_t pt = (planes + TILE - 1) / TILE, ct = (c + TILE - 1) / TILE, tiles = n * pt * ct;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (tiles > 8 && n * c * planes > 32768)
  for (int64_t k = 0; k < tiles; k++) {
    const int64_t b = k / (pt * ct), r = k % (pt * ct);
    const size_t item = (size_t)(c * planes) * esz * (size_t)b;
    transpose_tile(esz, x + item, y + item, planes, c, r / ct * TILE, r % ct * TILE);
  }
  return EM_OK;
}
