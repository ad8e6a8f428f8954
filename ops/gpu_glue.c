/* Launch glue shared by the kernel ops (gpu_glue.h). */
#include "gpu_glue.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "memory.h"
#include "kernel_cache.h"

unsigned em_ops_grid_1d(size_t n) {
  size_t g = (n + EM_OPS_BLOCK - 1) / EM_OPS_BLOCK;
  if (g < 1) g = 1;
  if (g > 65535) g = 65535; /* the kernels stride; 65535 is every CC's x limit before 3.0 too */
  return (unsigned)g;
}

/* Multiprocessors of each CUDA device by ordinal, asked once per device
 * (0: not yet known) rather than on every launch. */
#define EM_OPS_MAX_DEVICES 64
static _Atomic int em_ops_sm_counts[EM_OPS_MAX_DEVICES];

static int em_ops_sm_count(em_device dev) { /* 0 if the runtime cannot say */
  int cached = dev.ordinal >= 0 && dev.ordinal < EM_OPS_MAX_DEVICES;
  int sms = cached ? atomic_load_explicit(&em_ops_sm_counts[dev.ordinal], memory_order_relaxed) : 0;
  if (sms > 0) return sms;
  em_device_info info;
  if (em_device_get_info(dev, &info) != EM_OK || info.sm_count <= 0) return 0;
  if (cached) atomic_store_explicit(&em_ops_sm_counts[dev.ordinal], info.sm_count, memory_order_relaxed);
  return info.sm_count;
}

unsigned em_ops_grid_wide(const em_op_args *a, size_t n) {
  size_t tile = (size_t)EM_OPS_WIDE * EM_OPS_BLOCK, g = (n + tile - 1) / tile;
  size_t sms = (size_t)em_ops_sm_count(a->dev);
  if (sms && g > sms * EM_OPS_WAVES_PER_SM) g = sms * EM_OPS_WAVES_PER_SM;
  if (g > 65535) g = 65535;
  return g < 1 ? 1u : (unsigned)g;
}

em_status em_ops_launch_wide(const em_op_args *a, const char *kernel, size_t n, void **args) {
  if (!n) return EM_OK;
  return em_ops_launch(a, kernel, (em_dim3){em_ops_grid_wide(a, n), 1, 1}, (em_dim3){EM_OPS_BLOCK, 1, 1}, 0, args);
}

/* An executor's step passes its kernel cache: the handle is looked up by
 * name on the step's first launch only. */
static em_status kernel_of(const em_op_args *a, const char *kernel, em_kernel **k) {
  return a->kernels ? em_kernel_get_cached(a->kernels, a->dev, kernel, k) : em_kernel_get(a->dev, kernel, k);
}

em_status em_ops_launch(const em_op_args *a, const char *kernel, em_dim3 grid, em_dim3 block, size_t shared_bytes,
                        void **args) {
  em_kernel *k;
  em_status s = kernel_of(a, kernel, &k);
  if (s == EM_ERR_USE_CPU) return s;
  if (!s) s = em_kernel_launch(k, grid, block, shared_bytes, a->stream, args);
  return s ? em_fail_context(s, "op '%s', kernel %s", a->def->name, kernel) : EM_OK;
}

em_status em_ops_kernel_ready(const em_op_args *a, const char *kernel) {
  em_kernel *k;
  em_status s = kernel_of(a, kernel, &k);
  if (s == EM_ERR_USE_CPU) return s;
  return s ? em_fail_context(s, "op '%s', kernel %s", a->def->name, kernel) : EM_OK;
}

em_status em_ops_launch_1d(const em_op_args *a, const char *kernel, size_t n, void **args) {
  if (!n) return EM_OK;
  return em_ops_launch(a, kernel, (em_dim3){em_ops_grid_1d(n), 1, 1}, (em_dim3){EM_OPS_BLOCK, 1, 1}, 0, args);
}

em_status em_ops_scratch(const em_op_args *a, size_t bytes, void **ptr) {
  em_status s = em_malloc(a->dev, bytes ? bytes : 1, ptr);
  return s ? em_fail_context(s, "op '%s': %zu bytes of scratch memory", a->def->name, bytes) : EM_OK;
}

void em_ops_scratch_free(const em_op_args *a, void *ptr) {
  if (ptr) em_free(a->dev, ptr);
}

/* Under a CUDA graph's capture (a->staging hands out page-locked memory) the
 * bytes are first put there, and the h2d copy the graph records reads them
 * again at each replay; the scratch comes from the capture's pool like every
 * allocation then (runtime/memory.h). Otherwise the driver stages the
 * pageable bytes at the call. */
em_status em_ops_scratch_upload(const em_op_args *a, const void *host, size_t bytes, void **ptr) {
  void *pinned = NULL;
  em_status s = a->staging ? a->staging->take(a->staging, bytes, &pinned) : EM_OK;
  if (s) return em_fail_context(s, "op '%s': staging a %zu-byte table", a->def->name, bytes);
  if (pinned) memcpy(pinned, host, bytes), host = pinned;
  s = em_ops_scratch(a, bytes, ptr);
  if (s) return s;
  s = em_memcpy_h2d(a->dev, *ptr, host, bytes, a->stream);
  if (s) {
    em_ops_scratch_free(a, *ptr);
    *ptr = NULL;
    return em_fail_context(s, "op '%s': uploading a %zu-byte table", a->def->name, bytes);
  }
  return EM_OK;
}

em_status em_ops_index_map_make(const em_shape *out, const em_shape *in, int n_in, em_ops_index_map *m) {
  int r = out->ndim;
  long long dims[EM_MAX_DIMS], st[3][EM_MAX_DIMS];
  for (int k = 0; k < n_in; k++) {
    long long contiguous = 1;
    int off = r - in[k].ndim; /* numpy: aligned at the last axis */
    for (int i = r - 1; i >= 0; i--) {
      long long d = i >= off ? in[k].dims[i - off] : 1;
      st[k][i] = d == 1 ? 0 : contiguous;
      contiguous *= d;
    }
  }
  /* Drop size-1 axes, then merge an axis into the next inner one wherever
   * every operand steps over it as over one longer axis. */
  int n = 0;
  for (int i = 0; i < r; i++) {
    if (out->dims[i] == 1) continue;
    int merge = n > 0;
    for (int k = 0; k < n_in && merge; k++) merge = st[k][n - 1] == st[k][i] * out->dims[i];
    if (merge) {
      dims[n - 1] *= out->dims[i];
      for (int k = 0; k < n_in; k++) st[k][n - 1] = st[k][i];
      continue;
    }
    dims[n] = out->dims[i];
    for (int k = 0; k < n_in; k++) st[k][n] = st[k][i];
    n++;
  }
  if (n > EM_OPS_MAX_DIMS)
    return em_fail(EM_ERR_USE_CPU, "%d axes remain after merging; the kernels take %d", n, EM_OPS_MAX_DIMS);
  memset(m, 0, sizeof *m);
  m->ndim = n ? n : 1;
  m->numel = 1;
  int pad = EM_OPS_MAX_DIMS - n;
  for (int i = 0; i < EM_OPS_MAX_DIMS; i++) {
    m->dims[i] = i < pad ? 1 : dims[i - pad];
    m->numel *= m->dims[i];
    for (int k = 0; k < n_in; k++) m->strides[k][i] = i < pad ? 0 : st[k][i - pad];
  }
  return EM_OK;
}

em_status em_ops_on_host_copies(em_device dev, em_host_copy *c, int n, em_stream *s, void (*run)(void *), void *arg) {
  em_status st = em_stream_wait(dev, s); /* not the whole context: another thread may be capturing */
  for (int i = 0; i < n; i++) c[i].host = NULL;
  for (int i = 0; i < n && !st; i++) {
    c[i].host = malloc(c[i].bytes ? c[i].bytes : 1);
    if (!c[i].host) st = em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a %zu-byte copy", c[i].bytes);
    else if (c[i].copy_in) st = em_memcpy_d2h(dev, c[i].host, c[i].dev, c[i].bytes, NULL);
  }
  if (!st) run(arg);
  for (int i = 0; i < n && !st; i++)
    if (c[i].write_back) st = em_memcpy_h2d(dev, (void *)c[i].dev, c[i].host, c[i].bytes, NULL);
  for (int i = 0; i < n; i++) free(c[i].host);
  return st;
}

int em_ops_declined(const em_op_args *a, em_status s) {
  if (s != EM_ERR_UNSUPPORTED) return 0;
  em_op_report_path(a, "Ember's kernels: %s", em_last_error());
  em_clear_error();
  return 1;
}

em_status em_ops_half_via_f32(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel k,
                              const char *why) {
  if (a->report) a->report->path[0] = '\0'; /* so only the f32 member's own report is taken below */
  em_status s = em_half_via_f32(a, in, out, k);
  if (!s && !a->portable && a->report) {
    char inner[sizeof a->report->path];
    memcpy(inner, a->report->path, sizeof inner); /* what the f32 member reported */
    em_op_report_path(a, "%s on f32 copies (%s)%s%s", em_dtype_name(em_op_half_dtype(a)), why, inner[0] ? ": " : "",
                      inner);
  }
  return s;
}
