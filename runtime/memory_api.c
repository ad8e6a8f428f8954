/* Device memory, copies and streams: the memory half of include/ember/runtime.h. */
#include <stdlib.h>
#include <string.h>

#include "devcheck.h"
#include "load.h"
#include "runtime.h"

#define API __attribute__((visibility("default")))

struct em_stream {
  em_device dev;
  CUstream handle; /* NULL on the CPU */
};

CUstream em_stream_handle(em_stream *s) { return s ? s->handle : NULL; }

/* The allocator of a device. */
static em_status allocator_of(em_device dev, em_allocator **out, em_gpu **gpu) {
  *gpu = NULL;
  /* The CPU's allocator is the process's (em_cpu_allocator), so without the
   * runtime: a CPU tensor released after em_shutdown frees its block without
   * starting the runtime again (the driver loaded, the image table read). */
  if (dev.kind == EM_DEVICE_CPU) {
    *out = em_cpu_allocator();
    return EM_OK;
  }
  if (!em_rt()) return EM_ERR_INTERNAL;
  em_status s = em_rt_gpu(dev, gpu);
  if (!s) *out = &(*gpu)->alloc;
  /* A device that does not exist: say which do (or why the driver is unusable). */
  else {
    em_status c = em_device_check(dev);
    if (c) return c;
  }
  return s;
}

API em_status em_malloc(em_device dev, size_t bytes, void **ptr) {
  if (!ptr) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_malloc: ptr is NULL");
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(dev, &a, &g);
  if (s) return s;
  s = em_allocator_alloc(a, bytes, ptr);
  if (s && g) em_fail_context(s, "CUDA device %d (%s)", g->ordinal, g->info.name);
  return s;
}

API em_status em_free(em_device dev, void *ptr) {
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(dev, &a, &g);
  return s ? s : em_allocator_free(a, ptr);
}

API em_status em_alloc_stats_get(em_device dev, em_alloc_stats *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_alloc_stats_get: out is NULL");
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(dev, &a, &g);
  if (s) return s;
  pthread_mutex_lock(&a->lock);
  *out = a->stats;
  pthread_mutex_unlock(&a->lock);
  return EM_OK;
}

API em_status em_alloc_trim(em_device dev) {
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(dev, &a, &g);
  if (!s) em_allocator_trim(a);
  return s;
}

typedef enum { H2D = EM_COPY_H2D, D2H = EM_COPY_D2H, D2D = EM_COPY_D2D } copy_kind;

/* Per thread: an executor's run makes its copies on the calling thread. */
static _Thread_local em_copy_counts t_copies;

void em_copy_counts_get(em_copy_counts *out) { *out = t_copies; }

em_status em_alloc_window_peak(em_device dev, int reset, uint64_t *peak) {
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(dev, &a, &g);
  if (!s) *peak = em_allocator_window_peak(a, reset);
  return s;
}

static em_status copy(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s, copy_kind kind) {
  static const char *const names[] = {"em_memcpy_h2d", "em_memcpy_d2h", "em_memcpy_d2d"};
  /* The driver call each copy makes, synchronous and on a stream: the message names it. */
  static const char *const calls[][2] = {{"cuMemcpyHtoD", "cuMemcpyHtoDAsync"},
                                         {"cuMemcpyDtoH", "cuMemcpyDtoHAsync"},
                                         {"cuMemcpyDtoD", "cuMemcpyDtoDAsync"}};
  if ((!dst || !src) && bytes) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: NULL pointer", names[kind]);
  if (!bytes) return EM_OK;
  if (dev.kind == EM_DEVICE_CPU) {
    memmove(dst, src, bytes);
    return EM_OK;
  }
  em_gpu *g;
  em_status st = em_rt_gpu(dev, &g);
  if (st) return st;
  em_cuda_api *cu = &em_rt()->cu;
  CUstream h = em_stream_handle(s);
  if ((st = em_gpu_enter(g))) return st;
  CUresult r;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
  switch (kind) {
  case H2D: r = h ? cu->cuMemcpyHtoDAsync(d, src, bytes, h) : cu->cuMemcpyHtoD(d, src, bytes); break;
  case D2H: r = h ? cu->cuMemcpyDtoHAsync(dst, sp, bytes, h) : cu->cuMemcpyDtoH(dst, sp, bytes); break;
  default: r = h ? cu->cuMemcpyDtoDAsync(d, sp, bytes, h) : cu->cuMemcpyDtoD(d, sp, bytes); break;
  }
  em_gpu_leave(g);
  if (r) return em_cuda_fail(r, calls[kind][h != NULL], "%s: %zu bytes on CUDA device %d", names[kind], bytes, g->ordinal);
  t_copies.copies[kind]++;
  t_copies.bytes[kind] += bytes;
  /* A synchronous copy to the host waited for every earlier kernel: a device
   * check that failed is reported here, where a value is read. */
  return kind == D2H && !h ? em_devcheck_collect(dev) : EM_OK;
}

API em_status em_memcpy_h2d(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s) {
  return copy(dev, dst, src, bytes, s, H2D);
}
API em_status em_memcpy_d2h(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s) {
  return copy(dev, dst, src, bytes, s, D2H);
}
API em_status em_memcpy_d2d(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s) {
  return copy(dev, dst, src, bytes, s, D2D);
}

API em_status em_stream_create(em_device dev, em_stream **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_stream_create: out is NULL");
  em_stream *s = calloc(1, sizeof *s);
  if (!s) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a stream");
  s->dev = dev;
  if (dev.kind == EM_DEVICE_CUDA) {
    em_gpu *g;
    em_status st = em_rt_gpu(dev, &g);
    if (!st) st = em_gpu_enter(g);
    if (st) {
      free(s);
      return st;
    }
    CUresult r = em_rt()->cu.cuStreamCreate(&s->handle, 0);
    em_gpu_leave(g);
    if (r) {
      free(s);
      return em_cuda_fail(r, "cuStreamCreate", "CUDA device %d", dev.ordinal);
    }
  }
  *out = s;
  return EM_OK;
}

API em_status em_stream_destroy(em_stream *s) {
  if (!s) return EM_OK;
  em_status st = EM_OK;
  if (s->handle) {
    em_gpu *g;
    st = em_rt_gpu(s->dev, &g);
    if (!st) st = em_gpu_enter(g);
    if (!st) {
      CUresult r = em_rt()->cu.cuStreamDestroy(s->handle);
      em_gpu_leave(g);
      if (r) st = em_cuda_fail(r, "cuStreamDestroy", "CUDA device %d", s->dev.ordinal);
    }
  }
  free(s);
  return st;
}

API em_status em_stream_sync(em_device dev, em_stream *s) {
  if (dev.kind == EM_DEVICE_CPU) return EM_OK;
  em_gpu *g;
  em_status st = em_rt_gpu(dev, &g);
  if (!st) st = em_gpu_enter(g);
  if (st) return st;
  em_cuda_api *cu = &em_rt()->cu;
  CUresult r = s ? cu->cuStreamSynchronize(s->handle) : cu->cuCtxSynchronize();
  em_gpu_leave(g);
  if (r) return em_cuda_fail(r, s ? "cuStreamSynchronize" : "cuCtxSynchronize", "CUDA device %d", dev.ordinal);
  return em_devcheck_collect(dev); /* the device checks that ran meanwhile */
}
