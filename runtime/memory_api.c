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

/* ------------------------------------------- records and graph pools --- */

typedef struct rec_live { void *ptr; size_t cls; } rec_live;
typedef struct rec_class { size_t cls; int cur, max; } rec_class;

struct em_alloc_record {
  em_device dev;
  rec_live *live;      /* blocks allocated since the start and not freed yet */
  int n_live, cap_live;
  rec_class *cls;      /* per size class: live now, most live at once */
  int n_cls, cap_cls;
};

typedef struct pool_block { void *ptr; size_t cls; int used; } pool_block;

struct em_alloc_pool {
  em_device dev;
  pool_block *blocks;
  int n_blocks;
  uint64_t bytes;
};

/* This thread's record and pool (a capture is THREAD_LOCAL: other threads
 * allocate as usual). */
static _Thread_local em_alloc_record *t_record;
static _Thread_local em_alloc_pool *t_pool;

static int same_dev(em_device a, em_device b) { return a.kind == b.kind && a.ordinal == b.ordinal; }

em_alloc_record *em_alloc_record_new(em_device dev) {
  em_alloc_record *r = calloc(1, sizeof *r);
  if (r) r->dev = dev;
  return r;
}

void em_alloc_record_free(em_alloc_record *r) {
  if (!r) return;
  if (t_record == r) t_record = NULL;
  free(r->live), free(r->cls), free(r);
}

void em_alloc_record_start(em_alloc_record *r) {
  t_record = r;
  if (!r) return;
  r->n_live = 0;
  r->n_cls = 0;
}

uint64_t em_alloc_record_bytes(const em_alloc_record *r) {
  uint64_t b = 0;
  for (int i = 0; r && i < r->n_cls; i++) b += (uint64_t)r->cls[i].cls * (uint64_t)r->cls[i].max;
  return b;
}

static rec_class *record_class(em_alloc_record *r, size_t cls) {
  for (int i = 0; i < r->n_cls; i++)
    if (r->cls[i].cls == cls) return &r->cls[i];
  if (r->n_cls == r->cap_cls) {
    int cap = r->cap_cls ? 2 * r->cap_cls : 16;
    rec_class *t = realloc(r->cls, sizeof *t * (size_t)cap);
    if (!t) return NULL;
    r->cls = t, r->cap_cls = cap;
  }
  r->cls[r->n_cls] = (rec_class){cls, 0, 0};
  return &r->cls[r->n_cls++];
}

/* A failure to record (no host memory) only makes the reservation smaller:
 * the capture then fails to allocate and the run stays eager. */
static void record_alloc(void *ptr, size_t cls) {
  em_alloc_record *r = t_record;
  rec_class *c = record_class(r, cls);
  if (!c) return;
  if (r->n_live == r->cap_live) {
    int cap = r->cap_live ? 2 * r->cap_live : 64;
    rec_live *t = realloc(r->live, sizeof *t * (size_t)cap);
    if (!t) return;
    r->live = t, r->cap_live = cap;
  }
  r->live[r->n_live++] = (rec_live){ptr, cls};
  if (++c->cur > c->max) c->max = c->cur;
}

static void record_free(void *ptr) {
  em_alloc_record *r = t_record;
  for (int i = r->n_live - 1; i >= 0; i--) {
    if (r->live[i].ptr != ptr) continue;
    rec_class *c = record_class(r, r->live[i].cls);
    if (c) c->cur--;
    r->live[i] = r->live[--r->n_live];
    return;
  }
}

em_status em_alloc_pool_create(const em_alloc_record *r, em_alloc_pool **out) {
  *out = NULL;
  if (!r) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_alloc_pool_create: no record");
  em_alloc_pool *p = calloc(1, sizeof *p);
  int n = 0;
  for (int i = 0; i < r->n_cls; i++) n += r->cls[i].max;
  if (!p || !(p->blocks = calloc((size_t)(n ? n : 1), sizeof *p->blocks))) {
    free(p);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a graph's memory pool of %d blocks", n);
  }
  p->dev = r->dev;
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(r->dev, &a, &g);
  for (int i = 0; i < r->n_cls && !s; i++)
    for (int k = 0; k < r->cls[i].max && !s; k++) {
      if ((s = em_allocator_alloc(a, r->cls[i].cls, &p->blocks[p->n_blocks].ptr))) break;
      p->blocks[p->n_blocks++].cls = r->cls[i].cls;
      p->bytes += r->cls[i].cls;
    }
  if (s) {
    em_alloc_pool_free(p);
    return em_fail_context(s, "reserving a CUDA graph's memory pool (%llu bytes)",
                           (unsigned long long)em_alloc_record_bytes(r));
  }
  *out = p;
  return EM_OK;
}

void em_alloc_pool_enter(em_alloc_pool *p) { t_pool = p; }

uint64_t em_alloc_pool_bytes(const em_alloc_pool *p) { return p ? p->bytes : 0; }

int em_alloc_pool_in_use(const em_alloc_pool *p) {
  int n = 0;
  for (int i = 0; p && i < p->n_blocks; i++) n += p->blocks[i].used;
  return n;
}

void em_alloc_pool_free(em_alloc_pool *p) {
  if (!p) return;
  if (t_pool == p) t_pool = NULL;
  em_allocator *a;
  em_gpu *g;
  if (p->n_blocks && !allocator_of(p->dev, &a, &g))
    for (int i = 0; i < p->n_blocks; i++) (void)em_allocator_free(a, p->blocks[i].ptr);
  free(p->blocks);
  free(p);
}

/* A free block of exactly this class (the capture repeats the eager run's
 * requests, so its classes are the record's). */
static em_status pool_alloc(em_alloc_pool *p, size_t bytes, void **ptr) {
  size_t cls = em_alloc_class(bytes);
  for (int i = 0; i < p->n_blocks; i++)
    if (!p->blocks[i].used && p->blocks[i].cls == cls) {
      p->blocks[i].used = 1;
      *ptr = p->blocks[i].ptr;
      return EM_OK;
    }
  return em_fail(EM_ERR_OUT_OF_MEMORY,
                 "a CUDA graph's memory pool has no free block of %zu bytes (class %zu): the capture asked for more "
                 "than the warm-up run it was reserved from, and cannot reach the driver (cuMemAlloc would "
                 "invalidate the capture)",
                 bytes, cls);
}

static int pool_free(em_alloc_pool *p, void *ptr) {
  for (int i = 0; i < p->n_blocks; i++)
    if (p->blocks[i].ptr == ptr && p->blocks[i].used) {
      p->blocks[i].used = 0;
      return 1;
    }
  return 0;
}

API em_status em_malloc(em_device dev, size_t bytes, void **ptr) {
  if (!ptr) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_malloc: ptr is NULL");
  if (t_pool && same_dev(t_pool->dev, dev)) return pool_alloc(t_pool, bytes, ptr);
  em_allocator *a;
  em_gpu *g;
  em_status s = allocator_of(dev, &a, &g);
  if (s) return s;
  s = em_allocator_alloc(a, bytes, ptr);
  if (s && g) em_fail_context(s, "CUDA device %d (%s)", g->ordinal, g->info.name);
  if (!s && t_record && same_dev(t_record->dev, dev)) record_alloc(*ptr, em_alloc_class(bytes));
  return s;
}

API em_status em_free(em_device dev, void *ptr) {
  if (t_pool && same_dev(t_pool->dev, dev) && pool_free(t_pool, ptr)) return EM_OK;
  if (t_record && same_dev(t_record->dev, dev)) record_free(ptr);
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

static em_status em_stream_create_flags(em_device dev, unsigned flags, em_stream **out);

API em_status em_stream_create(em_device dev, em_stream **out) { return em_stream_create_flags(dev, 0, out); }

static em_status em_stream_create_flags(em_device dev, unsigned flags, em_stream **out) {
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
    CUresult r = em_rt()->cu.cuStreamCreate(&s->handle, flags);
    em_gpu_leave(g);
    if (r) {
      free(s);
      return em_cuda_fail(r, "cuStreamCreate", "CUDA device %d", dev.ordinal);
    }
  }
  *out = s;
  return EM_OK;
}

/* A non-blocking stream (CU_STREAM_NON_BLOCKING): the legacy stream and it
 * do not wait for each other, so another thread's synchronous copy neither
 * waits for this stream's work nor disturbs its capture; em_stream_join
 * orders them where needed. */
em_status em_stream_create_nonblocking(em_device dev, em_stream **out) {
  em_status st = em_stream_create_flags(dev, 1, out);
  return st;
}

/* waiter's later work waits for what waited holds now (either may be NULL:
 * the legacy stream): an event recorded on waited, waited on by waiter.
 * Without the event entry points: the host waits for waited instead. */
em_status em_stream_join(em_device dev, em_stream *waiter, em_stream *waited) {
  if (dev.kind != EM_DEVICE_CUDA || waiter == waited) return EM_OK;
  em_cuda_api *cu = &em_rt()->cu;
  if (!cu->cuEventCreate || !cu->cuEventRecord || !cu->cuStreamWaitEvent || !cu->cuEventDestroy)
    return em_stream_wait(dev, waited);
  em_gpu *g;
  em_status st = em_rt_gpu(dev, &g);
  if (!st) st = em_gpu_enter(g);
  if (st) return st;
  CUevent ev = NULL;
  const char *call = "cuEventCreate";
  CUresult r = cu->cuEventCreate(&ev, 0x2 /* CU_EVENT_DISABLE_TIMING */);
  if (!r) call = "cuEventRecord", r = cu->cuEventRecord(ev, em_stream_handle(waited));
  if (!r) call = "cuStreamWaitEvent", r = cu->cuStreamWaitEvent(em_stream_handle(waiter), ev, 0);
  if (ev) cu->cuEventDestroy(ev); /* released once the wait is done */
  em_gpu_leave(g);
  return r ? em_cuda_fail(r, call, "ordering two streams of CUDA device %d", dev.ordinal) : EM_OK;
}

void em_alloc_stream_retire(em_device dev, const void *stream) {
  em_allocator *a;
  em_gpu *g;
  if (dev.kind == EM_DEVICE_CUDA && !allocator_of(dev, &a, &g)) em_allocator_retire_stream(a, stream);
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

/* whole: NULL means the whole context (cuCtxSynchronize), else the legacy
 * stream (cuStreamSynchronize of stream 0). */
static em_status sync_stream(em_device dev, em_stream *s, int whole) {
  if (dev.kind == EM_DEVICE_CPU) return EM_OK;
  em_gpu *g;
  em_status st = em_rt_gpu(dev, &g);
  if (!st) st = em_gpu_enter(g);
  if (st) return st;
  em_cuda_api *cu = &em_rt()->cu;
  int ctx = !s && whole;
  CUresult r = ctx ? cu->cuCtxSynchronize() : cu->cuStreamSynchronize(s ? s->handle : NULL);
  em_gpu_leave(g);
  if (r) return em_cuda_fail(r, ctx ? "cuCtxSynchronize" : "cuStreamSynchronize", "CUDA device %d", dev.ordinal);
  return em_devcheck_collect(dev); /* the device checks that ran meanwhile */
}

API em_status em_stream_sync(em_device dev, em_stream *s) { return sync_stream(dev, s, 1); }

em_status em_stream_wait(em_device dev, em_stream *s) { return sync_stream(dev, s, 0); }
