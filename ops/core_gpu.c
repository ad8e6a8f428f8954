/* GPU members of the core op family (ops/core.c), with kernels/core.cu.
 * Every sum follows the CPU loop's order (the kernels say how), so the GPU
 * gives the CPU's bits in both numeric modes. identity and stop_gradient
 * are device-to-device copies. */
#include "core_gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/core_math.h"

/* ------------------------------------------------------------- copies --- */

em_status em_core_copy_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  size_t bytes = (size_t)em_shape_numel(&a->out[0]) * em_dtype_size(a->out[0].dtype);
  void *dst = em_tensor_data(out[0]);
  const void *src = em_tensor_data(in[0]);
  if (!bytes || dst == src) return EM_OK;
  em_status s = em_memcpy_d2d(a->dev, dst, src, bytes, a->stream);
  return s ? em_fail_context(s, "op '%s': copying %zu bytes on the device", a->def->name, bytes) : EM_OK;
}

/* -------------------------------------------------------------- fills --- */

/* The bits of 0 or 1 in dtype t (what core.c's fill_value writes). */
static unsigned long long fill_bits(em_dtype t, int one) {
  if (!one) return 0;
  switch (t) {
  case EM_F32: return 0x3f800000ull;
  case EM_F64: return 0x3ff0000000000000ull;
  case EM_F16: return 0x3c00ull;
  case EM_BF16: return 0x3f80ull;
  default: return 1; /* i32 i64 u8 bool */
  }
}

static em_status fill_gpu(const em_op_args *a, em_tensor *out, int one) {
  long long n = em_shape_numel(&a->out[0]);
  unsigned long long v = fill_bits(a->out[0].dtype, one);
  void *y = em_tensor_data(out);
  char kernel[32];
  snprintf(kernel, sizeof kernel, "em_core_fill_%zu", em_dtype_size(a->out[0].dtype));
  void *args[] = {&n, &v, &y};
  return em_ops_launch_1d(a, kernel, (size_t)n, args);
}

em_status em_core_zeros_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)in;
  return fill_gpu(a, out[0], 0);
}

em_status em_core_ones_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)in;
  return fill_gpu(a, out[0], 1);
}

/* -------------------------------------------------------------- add_n --- */

/* "f32" ... for the summing kernels (core.c refuses other dtypes). */
static const char *math_suffix(em_dtype t) {
  switch (t) {
  case EM_F32: return "f32";
  case EM_F64: return "f64";
  case EM_I32: return "i32";
  case EM_I64: return "i64";
  default: return NULL;
  }
}

#define ADD_N_MAX 16

em_status em_core_add_n_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const char *suf = math_suffix(a->out[0].dtype);
  if (!suf || a->n_in < 1 || a->n_in > ADD_N_MAX) return em_op_fail(a, "no GPU kernel for this dtype or input count");
  long long n = em_shape_numel(&a->out[0]);
  int k = a->n_in;
  void *ptr[ADD_N_MAX + 1], *args[ADD_N_MAX + 3];
  args[0] = &n;
  args[1] = &k;
  for (int i = 0; i < ADD_N_MAX; i++) {
    ptr[i] = em_tensor_data(in[i < k ? i : 0]); /* the unused ones are never read */
    args[2 + i] = &ptr[i];
  }
  ptr[ADD_N_MAX] = em_tensor_data(out[0]);
  args[2 + ADD_N_MAX] = &ptr[ADD_N_MAX];
  char kernel[32];
  snprintf(kernel, sizeof kernel, "em_core_add_n_%s", suf);
  return em_ops_launch_wide(a, kernel, (size_t)n, args);
}

/* ------------------------------------------------------------- sum_to --- */

/* x's axes in groups for em_core_sum_to_*: kept (the target has them) and
 * reduced (the target has 1 there), each group a run of adjacent axes of one
 * kind, with its stride in the contiguous x. Axes of size 1 go. With
 * EM_MAX_DIMS = 8 axes alternating at worst, 4 groups of each kind suffice. */
#define SUM_TO_GROUPS 4
typedef struct sum_to_plan {
  long long kd[SUM_TO_GROUPS], ks[SUM_TO_GROUPS], rd[SUM_TO_GROUPS], rs[SUM_TO_GROUPS];
  long long m;
} sum_to_plan;

static em_status sum_to_plan_make(const em_op_args *a, sum_to_plan *p) {
  const em_shape *big = &a->in[0], *small = &a->out[0];
  long long kd[EM_MAX_DIMS], ks[EM_MAX_DIMS], rd[EM_MAX_DIMS], rs[EM_MAX_DIMS], stride = 1;
  int nk = 0, nr = 0, last = -1; /* last: kind of the group the previous axis joined (0 kept, 1 reduced) */
  /* Innermost axis first; groups are reversed into place below. */
  for (int i = big->ndim - 1; i >= 0; i--) {
    long long bd = big->dims[i];
    int j = i - (big->ndim - small->ndim);
    long long sd = j >= 0 ? small->dims[j] : 1;
    if (bd != 1) {
      int red = sd == 1;
      long long *d = red ? rd : kd, *s = red ? rs : ks;
      int *cnt = red ? &nr : &nk;
      if (last == red) d[*cnt - 1] *= bd; /* x is contiguous: the outer axis continues the group */
      else {
        d[*cnt] = bd;
        s[*cnt] = stride;
        ++*cnt;
      }
      last = red;
    }
    stride *= bd;
  }
  if (nk > SUM_TO_GROUPS || nr > SUM_TO_GROUPS)
    return em_fail(EM_ERR_USE_CPU, "op '%s': %d kept and %d summed axis groups; the kernel takes %d of each",
                   a->def->name, nk, nr, SUM_TO_GROUPS);
  /* Group g of the kernel (0 outermost) is the (n-1-(g-pad))-th found; pads have dim 1. */
  p->m = 1;
  for (int g = 0; g < SUM_TO_GROUPS; g++) {
    int k = g - (SUM_TO_GROUPS - nk), r = g - (SUM_TO_GROUPS - nr);
    p->kd[g] = k >= 0 ? kd[nk - 1 - k] : 1;
    p->ks[g] = k >= 0 ? ks[nk - 1 - k] : 0;
    p->rd[g] = r >= 0 ? rd[nr - 1 - r] : 1;
    p->rs[g] = r >= 0 ? rs[nr - 1 - r] : 0;
    p->m *= p->kd[g];
  }
  return EM_OK;
}

em_status em_core_sum_to_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  const char *suf = math_suffix(a->in[0].dtype);
  if (!suf) return em_op_fail(a, "no GPU kernel for this dtype");
  sum_to_plan p;
  em_status s = sum_to_plan_make(a, &p);
  if (s) return s;
  void *x = em_tensor_data(in[0]), *y = em_tensor_data(out[0]);
  void *args[4 * SUM_TO_GROUPS + 3];
  int n = 0;
  args[n++] = &p.m;
  for (int g = 0; g < SUM_TO_GROUPS; g++) args[n++] = &p.kd[g];
  for (int g = 0; g < SUM_TO_GROUPS; g++) args[n++] = &p.ks[g];
  for (int g = 0; g < SUM_TO_GROUPS; g++) args[n++] = &p.rd[g];
  for (int g = 0; g < SUM_TO_GROUPS; g++) args[n++] = &p.rs[g];
  args[n++] = &x;
  args[n++] = &y;
  char kernel[32];
  snprintf(kernel, sizeof kernel, "em_core_sum_to_%s", suf);
  return em_ops_launch_1d(a, kernel, (size_t)p.m, args);
}

/* ----------------------------------------------------- broadcast_like --- */

/* y's axes for em_core_broadcast_*: size-1 axes dropped, neighbours merged
 * where x steps through them as through one axis, padded in front to
 * EM_MAX_DIMS (8, what the kernel takes), with x's strides (0: broadcast). */
_Static_assert(EM_MAX_DIMS == 8, "em_core_broadcast_* take eight axes");
typedef struct bcast_plan {
  long long d[EM_MAX_DIMS], s[EM_MAX_DIMS], n;
} bcast_plan;

static void bcast_plan_make(const em_shape *big, const em_shape *small, bcast_plan *p) {
  long long d[EM_MAX_DIMS], s[EM_MAX_DIMS], contiguous = 1, st[EM_MAX_DIMS];
  for (int i = big->ndim - 1; i >= 0; i--) {
    int j = i - (big->ndim - small->ndim);
    long long sd = j >= 0 ? small->dims[j] : 1;
    st[i] = sd == 1 ? 0 : contiguous;
    contiguous *= sd;
  }
  int m = 0;
  for (int i = 0; i < big->ndim; i++) {
    if (big->dims[i] == 1) continue;
    if (m > 0 && s[m - 1] == st[i] * big->dims[i]) {
      d[m - 1] *= big->dims[i];
      s[m - 1] = st[i];
      continue;
    }
    d[m] = big->dims[i];
    s[m++] = st[i];
  }
  p->n = 1;
  for (int i = 0; i < EM_MAX_DIMS; i++) {
    int k = i - (EM_MAX_DIMS - m);
    p->d[i] = k >= 0 ? d[k] : 1;
    p->s[i] = k >= 0 ? s[k] : 0;
    p->n *= p->d[i];
  }
}

em_status em_core_broadcast_like_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bcast_plan p;
  bcast_plan_make(&a->out[0], &a->in[0], &p);
  void *x = em_tensor_data(in[0]), *y = em_tensor_data(out[0]);
  void *args[2 * EM_MAX_DIMS + 3];
  int n = 0;
  args[n++] = &p.n;
  for (int i = 0; i < EM_MAX_DIMS; i++) args[n++] = &p.d[i];
  for (int i = 0; i < EM_MAX_DIMS; i++) args[n++] = &p.s[i];
  args[n++] = &x;
  args[n++] = &y;
  char kernel[32];
  snprintf(kernel, sizeof kernel, "em_core_broadcast_%zu", em_dtype_size(a->out[0].dtype));
  return em_ops_launch_1d(a, kernel, (size_t)p.n, args);
}

/* ------------------------------------------------------ _weighted_sum --- */

em_status em_core_weighted_sum_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int d64 = a->in[0].dtype == EM_F64;
  long long n = em_shape_numel(&a->in[0]);
  long long chunks = (n + EM_CORE_WSUM_CHUNK - 1) / EM_CORE_WSUM_CHUNK;
  void *part = NULL;
  em_status s = em_ops_scratch(a, (size_t)chunks * sizeof(double), &part);
  if (s) return s;
  void *y = em_tensor_data(in[0]), *w = em_tensor_data(in[1]), *o = em_tensor_data(out[0]);
  void *args1[] = {&n, &chunks, &y, &w, &part};
  s = em_ops_launch_1d(a, d64 ? "em_core_wsum_partial_f64" : "em_core_wsum_partial_f32", (size_t)chunks, args1);
  void *args2[] = {&chunks, &part, &o};
  if (!s)
    s = em_ops_launch(a, d64 ? "em_core_wsum_final_f64" : "em_core_wsum_final_f32", (em_dim3){1, 1, 1},
                      (em_dim3){1, 1, 1}, 0, args2);
  em_ops_scratch_free(a, part);
  return s;
}

/* ---------------------------------------------------------- _scale_by --- */

em_status em_core_scale_by_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  long long n = em_shape_numel(&a->in[0]);
  void *x = em_tensor_data(in[0]), *sc = em_tensor_data(in[1]), *y = em_tensor_data(out[0]);
  void *args[] = {&n, &x, &sc, &y};
  return em_ops_launch_wide(a, a->in[0].dtype == EM_F64 ? "em_core_scale_f64" : "em_core_scale_f32", (size_t)n, args);
}
