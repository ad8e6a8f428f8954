/* Numbers and memory of the fake libcudnn: data types and their rounding,
 * strided views of device memory, loads and stores, scaling parameters and
 * the issue of work on a handle's stream. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_work.h"

size_t fd_dtype_size(int dtype) {
  switch (dtype) {
  case FD_FLOAT: return 4;
  case FD_DOUBLE: return 8;
  case FD_HALF:
  case FD_BFLOAT16: return 2;
  default: return 0;
  }
}

const char *fd_dtype_name(int dtype) {
  switch (dtype) {
  case FD_FLOAT: return "f32";
  case FD_DOUBLE: return "f64";
  case FD_HALF: return "f16";
  case FD_BFLOAT16: return "bf16";
  default: return "unmodelled";
  }
}

/* ---------------------------------------------------------- rounding --- */

/* v rounded to nearest (ties to even: nearbyint in the default mode) with
 * `bits` significant bits, normal exponents from emin up; magnitudes from
 * `overflow` up go to infinity. Scaling by a power of two is exact, so the
 * result is the correctly rounded value of that format. */
static double round_bits(double v, int bits, int emin, double overflow) {
  if (!isfinite(v) || v == 0) return v;
  if (fabs(v) >= overflow) return copysign(INFINITY, v);
  int e;
  frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
  int exp = e - 1 < emin ? emin : e - 1;
  double q = ldexp(1.0, exp - (bits - 1));
  return nearbyint(v / q) * q;
}

double fd_round_f32(double v) { return (double)(float)v; }

/* binary16: 11 significant bits, normals from 2^-14, largest 65504; 65520
 * (65504 plus half an ulp) and above round to infinity. */
double fd_round_f16(double v) { return round_bits(v, 11, -14, 65520.0); }

/* bfloat16: 8 significant bits, f32's exponent range. */
double fd_round_bf16(double v) { return round_bits(v, 8, -126, ldexp(2.0 - ldexp(1.0, -8), 127)); }

/* TF32: f32's range with 10 stored mantissa bits ("rounds FP32 inputs to
 * TF32", NVIDIA's TF32 article) [U: round to nearest even]. */
double fd_round_tf32(double v) { return round_bits(v, 11, -126, ldexp(2.0 - ldexp(1.0, -11), 127)); }

double fd_round_to(int compute, double v) {
  switch (compute) {
  case FD_DOUBLE: return v;
  case FD_HALF: return fd_round_f16(v);
  default: return fd_round_f32(v);
  }
}

/* ----------------------------------------------------- element codes --- */

static double half_to_double(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0x1f) v = man ? NAN : INFINITY;
  else if (exp == 0) v = ldexp((double)man, -24);
  else v = ldexp((double)(man | 0x400), exp - 25);
  return sign ? -v : v;
}

/* v must already be a binary16 value (fd_round_f16). */
static uint16_t half_bits(double v) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  if (isnan(v)) return 0x7e00;
  if (isinf(v)) return sign | 0x7c00;
  if (a < ldexp(1.0, -14)) return sign | (uint16_t)(a * ldexp(1.0, 24));
  int e;
  double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((uint32_t)(m * 2048.0) & 0x3ff);
}

static double bf16_to_double(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* v must already be a bfloat16 value: its f32 bits end in 16 zeros. */
static uint16_t bf16_bits(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if (isnan(f)) return 0x7fc0;
  return (uint16_t)(u >> 16);
}

/* -------------------------------------------------------------- views --- */

void fd_view_of_tensor(fd_view *v, fd_tensor t, const void *dptr) {
  memset(v, 0, sizeof *v);
  v->dptr = (CUdeviceptr)(uintptr_t)dptr;
  v->nd = t->nb;
  v->dtype = t->dtype;
  for (int i = 0; i < t->nb; i++) {
    v->dims[i] = t->dims[i];
    v->strides[i] = t->strides[i];
  }
}

void fd_view_of_filter(fd_view *v, fd_filter f, const void *dptr) {
  memset(v, 0, sizeof *v);
  v->dptr = (CUdeviceptr)(uintptr_t)dptr;
  v->nd = f->nb;
  v->dtype = f->dtype;
  for (int i = 0; i < f->nb; i++) v->dims[i] = f->dims[i];
  if (f->format == FD_NHWC) {
    /* K, spatial..., C packed: C is innermost. */
    int64_t s = 1;
    v->strides[1] = s;
    s *= f->dims[1];
    for (int i = f->nb - 1; i >= 2; i--) {
      v->strides[i] = s;
      s *= f->dims[i];
    }
    v->strides[0] = s;
  } else {
    int64_t s = 1;
    for (int i = f->nb - 1; i >= 0; i--) {
      v->strides[i] = s;
      s *= f->dims[i];
    }
  }
}

int64_t fd_view_count(const fd_view *v) {
  int64_t n = 1;
  for (int i = 0; i < v->nd; i++) n *= v->dims[i];
  return n;
}

size_t fd_view_extent(const fd_view *v) {
  if (v->nd == 0 || fd_view_count(v) == 0) return 0;
  int64_t last = 0;
  for (int i = 0; i < v->nd; i++) last += (v->dims[i] - 1) * (v->strides[i] < 0 ? -v->strides[i] : v->strides[i]);
  return (size_t)(last + 1) * fd_dtype_size(v->dtype);
}

int64_t fd_view_offset(const fd_view *v, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < v->nd; i++) off += idx[i] * v->strides[i];
  return off;
}

int fd_next_index(const fd_view *v, int64_t *idx) {
  for (int i = v->nd - 1; i >= 0; i--) {
    if (++idx[i] < v->dims[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

double fd_load(const fd_view *v, int64_t off) {
  const unsigned char *base = v->host;
  switch (v->dtype) {
  case FD_DOUBLE: {
    double d;
    memcpy(&d, base + off * 8, 8);
    return d;
  }
  case FD_HALF: {
    uint16_t h;
    memcpy(&h, base + off * 2, 2);
    return half_to_double(h);
  }
  case FD_BFLOAT16: {
    uint16_t b;
    memcpy(&b, base + off * 2, 2);
    return bf16_to_double(b);
  }
  default: {
    float f;
    memcpy(&f, base + off * 4, 4);
    return f;
  }
  }
}

void fd_store(const fd_view *v, int64_t off, double value) {
  unsigned char *base = v->host;
  switch (v->dtype) {
  case FD_DOUBLE: memcpy(base + off * 8, &value, 8); break;
  case FD_HALF: {
    uint16_t h = half_bits(fd_round_f16(value));
    memcpy(base + off * 2, &h, 2);
    break;
  }
  case FD_BFLOAT16: {
    uint16_t b = bf16_bits(fd_round_bf16(value));
    memcpy(base + off * 2, &b, 2);
    break;
  }
  default: {
    float f = (float)value;
    memcpy(base + off * 4, &f, 4);
    break;
  }
  }
}

/* ------------------------------------------------------------ spans --- */

CUresult fd_bytes_span(const fd_work *w, CUdeviceptr p, size_t bytes, void **host, const char *name, char *msg,
                       size_t cap) {
  if (bytes == 0) {
    *host = NULL;
    return CUDA_SUCCESS;
  }
  char why[384];
  why[0] = '\0';
  CUresult r = w->span(p, bytes, host, why, sizeof why);
  if (r != CUDA_SUCCESS) snprintf(msg, cap, "%s: operand %s: %s", w->op, name, why);
  return r;
}

CUresult fd_view_span(const fd_work *w, fd_view *v, const char *name, char *msg, size_t cap) {
  return fd_bytes_span(w, v->dptr, fd_view_extent(v), &v->host, name, msg, cap);
}

/* -------------------------------------------------------- scalars ---- */

void fd_read_scalars(int dtype, const void *alpha, const void *beta, double *a, double *b) {
  if (dtype == FD_DOUBLE) {
    memcpy(a, alpha, sizeof *a);
    memcpy(b, beta, sizeof *b);
  } else {
    float fa, fb;
    memcpy(&fa, alpha, sizeof fa);
    memcpy(&fb, beta, sizeof fb);
    *a = fa;
    *b = fb;
  }
}

double fd_blend(int compute, double alpha, double value, double beta, const fd_view *dst, int64_t off) {
  double r = alpha == 1.0 ? value : fd_round_to(compute, alpha * value);
  if (beta != 0.0) r = fd_round_to(compute, r + fd_round_to(compute, beta * fd_load(dst, off)));
  return r;
}

/* ------------------------------------------------------------- issue --- */

cudnnStatus_t fd_issue(fd_handle h, fakecuda_work_fn run, fd_work *payload) {
  char op[sizeof payload->op];
  memcpy(op, payload->op, sizeof op); /* a refused payload is freed by the driver */
  payload->span = fd_drv.device_span;
  CUresult r = fd_drv.enqueue_work(h->stream, run, free, payload, op);
  if (r != CUDA_SUCCESS)
    return fd_refuse(FD_EXECUTION_FAILED_CUDA_DRIVER, "%s: the driver refused the work on the handle's stream (CUresult %d)",
                     op, r);
  return FD_SUCCESS;
}

void *fd_work_alloc(size_t size, const char *op) {
  fd_work *w = calloc(1, size);
  if (w) snprintf(w->op, sizeof w->op, "%s", op);
  return w;
}
