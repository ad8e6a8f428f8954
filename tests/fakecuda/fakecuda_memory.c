/* Device memory of the fake libcuda. Each allocation is backed by host
 * memory, so copies really copy and kernels (run from their host builds)
 * really compute; every copy must lie inside one live allocation. Device
 * addresses are synthetic (never host addresses, never reused), so a host
 * dereference of a device pointer, a host pointer handed to a kernel, or a
 * use after free cannot pass by accident: kernel parameters are checked
 * against the live allocations and translated to their host backing.
 *
 * Copies and memsets are operations on a stream (fakecuda_queue.c) and run
 * when the queue gets to them. What the host gives is taken when the call is
 * made (the driver stages pageable memory the same way: "for transfers from
 * pageable host memory to device memory, ... the function will return once
 * the pageable buffer has been copied to the staging memory", CUDA Driver
 * API, API synchronization behavior); what the host gets is written when the
 * copy runs. A synchronous device-to-host copy runs the queue up to itself,
 * and so does a synchronous host-to-device one (same section: "a stream sync
 * is performed before the copy is initiated"; from pinned memory the copy is
 * synchronous).
 * An asynchronous one is left for a synchronisation point even for pageable
 * memory (where the real driver returns only once it is done): the double
 * behaves like pinned memory, the case where reading before synchronising
 * really does read stale data.
 *
 * Pinned host memory (cuMemHostAlloc) is host memory the caller reads and
 * writes directly. Allocated with CU_MEMHOSTALLOC_DEVICEMAP it is mapped:
 * cuMemHostGetDevicePointer gives a synthetic device address (in its own
 * region, above every device's) that kernels and copies may use like device
 * memory, translated to the same host bytes, so what a kernel writes there
 * the host sees once the kernel ran, without a copy. The real driver's
 * device address equals the host one under unified addressing; the double's
 * differs, so a host pointer handed to a kernel still fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "fakecuda_internal.h"

#define ALLOC_ALIGN 256u                /* cudaMalloc guarantees at least 256-byte alignment */
/* Device addresses start at 2^56, above every address a Linux process gets
 * for its own memory (47 bits of user space, 56 with 5-level paging only on
 * request), so a host pointer is never mistaken for device memory. */
#define DEVICE_BASE 0x0100000000000000ull
#define DEVICE_SPAN 0x100000000000ull   /* 16 TiB of address space per device ordinal */
#define MAPPED_BASE (DEVICE_BASE + DEVICE_SPAN * FC_MAX_DEVICES) /* mapped host memory, after every device */
#define MAPPED_SPAN DEVICE_SPAN
#define POISON_LIMIT ((size_t)1 << 30)  /* fill new allocations up to this size */
#define POISON_BYTE 0xFF                /* all-ones floats are NaN: uninitialised reads show */
#define FREED_MAX 4096                  /* freed ranges remembered, for messages */
/* Guard zones before and after each allocation's bytes, filled with a
 * pattern and checked after every kernel that was handed a pointer into
 * it: a kernel writing a little out of bounds fails with 700 and a message,
 * in every build (AddressSanitizer builds also catch reads, and writes
 * beyond the zones). */
#define GUARD 256u
#define GUARD_BYTE 0xA5

typedef struct fc_alloc {
  CUdeviceptr base;
  size_t size;    /* as requested */
  size_t charged; /* rounded up to ALLOC_ALIGN, counted against the device */
  unsigned char *host; /* the bytes; GUARD bytes of pattern lie on each side */
  const struct CUctx_st *ctx;
  int pinned;          /* cuMemHostAlloc: host memory (charged nothing), base its device address */
  unsigned flags;      /* ... and its CU_MEMHOSTALLOC_* flags */
} fc_alloc;

typedef struct fc_freed {
  CUdeviceptr base;
  size_t size;
} fc_freed;

static fc_alloc *allocs;
static size_t n_allocs, cap_allocs;
static CUdeviceptr next_offset[FC_MAX_DEVICES];
static CUdeviceptr next_mapped; /* offset of the next pinned allocation from MAPPED_BASE */
static fc_freed freed[FREED_MAX]; /* a ring of the latest frees */
static size_t n_freed;

/* ------------------------------------------------------------ lookup --- */

/* The allocation holding [p, p+n), n >= 1, or NULL. */
static fc_alloc *find_range(CUdeviceptr p, size_t n) {
  for (size_t i = 0; i < n_allocs; i++) {
    fc_alloc *a = &allocs[i];
    if (a->base && p >= a->base && p - a->base < a->size && n <= a->size - (size_t)(p - a->base)) return a;
  }
  return NULL;
}

/* A device allocation (cuMemAlloc) starting at p, for cuMemFree. */
static size_t find_base(CUdeviceptr p) {
  for (size_t i = 0; i < n_allocs; i++)
    if (!allocs[i].pinned && allocs[i].base == p) return i;
  return SIZE_MAX;
}

static void drop_alloc(size_t i) {
  fc_alloc *a = &allocs[i];
  fc_device *d = fc_ctx_device(a->ctx);
  d->mem_used -= a->charged < d->mem_used ? a->charged : d->mem_used;
  free(a->host - GUARD);
  if (a->base) freed[n_freed++ % FREED_MAX] = (fc_freed){a->base, a->size};
  allocs[i] = allocs[--n_allocs];
}

void fc_memory_release(const struct CUctx_st *ctx) {
  for (size_t i = n_allocs; i-- > 0;)
    if (!ctx || allocs[i].ctx == ctx) drop_alloc(i);
  if (!ctx) {
    free(allocs);
    allocs = NULL;
    n_allocs = cap_allocs = 0;
    n_freed = 0;
    memset(next_offset, 0, sizeof next_offset); /* a new configuration starts a new address space */
    next_mapped = 0;
  }
}

/* The allocation p points into, or else the one p points just past (a
 * pointer C lets a kernel form). */
static fc_alloc *holding(CUdeviceptr p) {
  for (size_t i = 0; i < n_allocs; i++)
    if (allocs[i].base && p >= allocs[i].base && p - allocs[i].base < allocs[i].size) return &allocs[i];
  for (size_t i = 0; i < n_allocs; i++)
    if (allocs[i].base && p == allocs[i].base + allocs[i].size) return &allocs[i];
  return NULL;
}

CUresult fc_mem_translate(const struct CUctx_st *ctx, CUdeviceptr p, void **host, char *msg, size_t cap) {
  if (!p) {
    *host = NULL;
    return CUDA_SUCCESS;
  }
  fc_alloc *a = holding(p);
  if (a && a->ctx != ctx && !(a->pinned && (a->flags & CU_MEMHOSTALLOC_PORTABLE))) {
    snprintf(msg, cap, "0x%llx is memory of CUDA device %d, not of device %d that runs the kernel", p, a->ctx->ordinal,
             ctx->ordinal);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  if (a) {
    *host = a->host + (p - a->base);
    return CUDA_SUCCESS;
  }
  for (size_t k = 0; k < n_freed && k < FREED_MAX; k++) {
    const fc_freed *f = &freed[k];
    if (p >= f->base && p - f->base <= f->size) {
      snprintf(msg, cap, "0x%llx points into freed memory (an allocation of %zu bytes at 0x%llx, freed)", p, f->size,
               f->base);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  if (p >= DEVICE_BASE && p - DEVICE_BASE < DEVICE_SPAN * FC_MAX_DEVICES)
    snprintf(msg, cap, "0x%llx is in no allocation of any device (out of bounds, or never allocated)", p);
  else if (p >= MAPPED_BASE && p - MAPPED_BASE < MAPPED_SPAN)
    snprintf(msg, cap, "0x%llx is in no mapped host allocation (out of bounds, or never allocated)", p);
  else
    snprintf(msg, cap, "0x%llx is not device memory (a host pointer?)", p);
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

CUresult fc_mem_span(const struct CUctx_st *ctx, CUdeviceptr p, size_t bytes, void **host, char *msg, size_t cap) {
  if (!p) {
    snprintf(msg, cap, "a NULL device pointer for %zu bytes", bytes);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  CUresult r = fc_mem_translate(ctx, p, host, msg, cap);
  if (r != CUDA_SUCCESS) return r;
  const fc_alloc *a = holding(p);
  if (bytes > a->size - (size_t)(p - a->base)) {
    snprintf(msg, cap, "%zu bytes at 0x%llx run %zu bytes past the end of their allocation (%zu bytes at 0x%llx)", bytes,
             p, bytes - (a->size - (size_t)(p - a->base)), a->size, a->base);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return CUDA_SUCCESS;
}

CUdeviceptr fc_mem_base_of(CUdeviceptr p) {
  fc_alloc *a = p ? holding(p) : NULL;
  return a ? a->base : 0;
}

CUdeviceptr fc_mem_device_of(const void *host, CUdeviceptr *base) {
  const unsigned char *h = host;
  for (size_t i = 0; i < n_allocs; i++) {
    const fc_alloc *a = &allocs[i];
    if (a->base && h >= a->host && h < a->host + a->size) {
      *base = a->base;
      return a->base + (CUdeviceptr)(h - a->host);
    }
  }
  *base = 0;
  return 0;
}

/* The first and last guard bytes that differ from the pattern, or -1. */
static void guard_damage(const unsigned char *g, long *first, long *last) {
  *first = *last = -1;
  for (long i = 0; i < (long)GUARD; i++) {
    if (g[i] == GUARD_BYTE) continue;
    if (*first < 0) *first = i;
    *last = i;
  }
}

CUresult fc_mem_check_guards(CUdeviceptr p, char *msg, size_t cap) {
  fc_alloc *a = p ? holding(p) : NULL;
  if (!a) return CUDA_SUCCESS;
  long f0, l0, f1, l1;
  guard_damage(a->host - GUARD, &f0, &l0);
  guard_damage(a->host + a->size, &f1, &l1);
  if (f0 < 0 && f1 < 0) return CUDA_SUCCESS;
  if (f1 >= 0)
    snprintf(msg, cap, "wrote past the end of its allocation (%zu bytes at 0x%llx): bytes %ld to %ld after the end", a->size,
             a->base, f1, l1);
  else
    snprintf(msg, cap, "wrote before the start of its allocation (%zu bytes at 0x%llx): bytes %ld to %ld before it",
             a->size, a->base, (long)GUARD - l0, (long)GUARD - f0);
  memset(a->host - GUARD, GUARD_BYTE, GUARD);
  memset(a->host + a->size, GUARD_BYTE, GUARD);
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* -------------------------------------------------------- allocation --- */

static CUresult mem_alloc(CUdeviceptr *p, size_t bytes) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  /* cuda.h: "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE". */
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  /* cudaMalloc is the driver documentation's example of a "potentially
   * unsafe" call during capture (cuThreadExchangeStreamCaptureMode). */
  if ((r = fc_capture_unsafe_check(ctx, "cuMemAlloc")) != CUDA_SUCCESS) return r;
  fc_device *d = fc_ctx_device(ctx);
  if (bytes > d->mem_total) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t charged = (bytes + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN;
  if (charged > d->mem_total - d->mem_used) return CUDA_ERROR_OUT_OF_MEMORY;
  if (n_allocs == cap_allocs) {
    size_t cap = cap_allocs ? cap_allocs * 2 : 64;
    fc_alloc *grown = realloc(allocs, cap * sizeof *grown);
    if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
    allocs = grown;
    cap_allocs = cap;
  }
  if (bytes > SIZE_MAX - 2 * GUARD) return CUDA_ERROR_OUT_OF_MEMORY;
  unsigned char *block = malloc(bytes + 2 * GUARD), *host = block + GUARD;
  if (!block) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(block, GUARD_BYTE, GUARD);
  memset(host + bytes, GUARD_BYTE, GUARD);
  if (bytes <= POISON_LIMIT) memset(host, POISON_BYTE, bytes);
  /* Addresses only grow: a freed range is never handed out again. A gap of
   * ALLOC_ALIGN unallocated bytes follows each allocation, so a pointer one
   * past the end of one (which a kernel may be handed) is never the start
   * of the next: it can only mean the first. */
  int ord = ctx->ordinal;
  CUdeviceptr base = DEVICE_BASE + DEVICE_SPAN * (CUdeviceptr)ord + next_offset[ord];
  next_offset[ord] += charged + ALLOC_ALIGN;
  allocs[n_allocs++] = (fc_alloc){base, bytes, charged, host, ctx, 0, 0};
  d->mem_used += charged;
  *p = base;
  return CUDA_SUCCESS;
}

/* A pointer that is not the start of a live allocation (0, an interior
 * pointer, a double free) is CUDA_ERROR_INVALID_VALUE [U for 0: cudaFree(NULL)
 * succeeds in the runtime; the driver's answer for cuMemFree(0) is unconfirmed].
 * The context's pending work runs first: freeing waits for the device, as
 * cudaFree does [S: documented for the runtime's cudaFree ("implicit
 * synchronization"), and the reason caching allocators exist]. */
static CUresult mem_free(CUdeviceptr p) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  size_t i = find_base(p);
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_VALUE;
  /* Unsafe like cuMemAlloc [U: as the allocating call's twin; it also waits
   * for the device, which the modes' rule covers in GLOBAL and THREAD_LOCAL]. */
  if ((r = fc_capture_unsafe_check(ctx, "cuMemFree")) != CUDA_SUCCESS) return r;
  r = fc_run_ctx(ctx);
  if (ctx->sticky) return ctx->sticky;
  i = find_base(p);
  if (i != SIZE_MAX) drop_alloc(i);
  return r;
}

static CUresult mem_info(size_t *free_bytes, size_t *total_bytes) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  fc_device *d = fc_ctx_device(ctx);
  *free_bytes = d->mem_total - d->mem_used;
  *total_bytes = d->mem_total;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------ pinned host memory --- */

/* Room for one more allocation record. */
static int grow_allocs(void) {
  if (n_allocs < cap_allocs) return 1;
  size_t cap = cap_allocs ? cap_allocs * 2 : 64;
  fc_alloc *grown = realloc(allocs, cap * sizeof *grown);
  if (!grown) return 0;
  allocs = grown;
  cap_allocs = cap;
  return 1;
}

/* cuMemHostAlloc: flags of CU_MEMHOSTALLOC_PORTABLE | DEVICEMAP |
 * WRITECOMBINED only, else CUDA_ERROR_INVALID_VALUE, and so for 0 bytes
 * [U: cuda.h does not say]. Charged to no device. Guard zones as for device
 * memory (checked after kernels that were handed the mapped address). */
static CUresult host_alloc(void **pp, size_t bytes, unsigned flags) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!pp || bytes == 0 || (flags & ~0x7u)) return CUDA_ERROR_INVALID_VALUE;
  if ((r = fc_capture_unsafe_check(ctx, "cuMemHostAlloc")) != CUDA_SUCCESS) return r; /* [U] as cuMemAlloc */
  if (bytes > SIZE_MAX - 2 * GUARD || !grow_allocs()) return CUDA_ERROR_OUT_OF_MEMORY;
  unsigned char *block = malloc(bytes + 2 * GUARD), *host = block + GUARD;
  if (!block) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(block, GUARD_BYTE, GUARD);
  memset(host + bytes, GUARD_BYTE, GUARD);
  if (bytes <= POISON_LIMIT) memset(host, POISON_BYTE, bytes);
  CUdeviceptr base = 0;
  if (flags & CU_MEMHOSTALLOC_DEVICEMAP) {
    size_t span = (bytes + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN;
    base = MAPPED_BASE + next_mapped;
    next_mapped += span + ALLOC_ALIGN;
  }
  allocs[n_allocs++] = (fc_alloc){base, bytes, 0, host, ctx, 1, flags};
  *pp = host;
  return CUDA_SUCCESS;
}

/* The pinned allocation whose host bytes hold p. */
static fc_alloc *pinned_holding(const void *p) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n_allocs; i++)
    if (allocs[i].pinned && c >= allocs[i].host && (size_t)(c - allocs[i].host) < allocs[i].size) return &allocs[i];
  return NULL;
}

int fc_mem_is_pinned(const void *p, size_t n) {
  const fc_alloc *a = p ? pinned_holding(p) : NULL;
  return a && n <= a->size - (size_t)((const unsigned char *)p - a->host);
}

/* cuMemHostGetDevicePointer_v2 (cuda.h): flags must be 0 ("for now, it must
 * be set to 0"); p anywhere inside a pinned allocation made with DEVICEMAP,
 * in the current context unless PORTABLE; it "will fail if the
 * CU_MEMHOSTALLOC_DEVICEMAP flag was not specified ..., or if the function
 * is called on a GPU that does not support mapped pinned memory"
 * (FAKECUDA_NO_MAP_HOST). Every failure is CUDA_ERROR_INVALID_VALUE, the only
 * error cuda.h lists beyond the context ones [U: which one the driver gives;
 * and under unified addressing it maps every pinned allocation]. */
static CUresult host_device_pointer(CUdeviceptr *dp, void *p, unsigned flags) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!dp || !p || flags) return CUDA_ERROR_INVALID_VALUE;
  if (fc_g.cfg.no_map_host) return CUDA_ERROR_INVALID_VALUE;
  fc_alloc *a = pinned_holding(p);
  if (!a || !(a->flags & CU_MEMHOSTALLOC_DEVICEMAP)) return CUDA_ERROR_INVALID_VALUE;
  if (a->ctx != ctx && !(a->flags & CU_MEMHOSTALLOC_PORTABLE)) return CUDA_ERROR_INVALID_VALUE;
  *dp = a->base + (CUdeviceptr)((unsigned char *)p - a->host);
  return CUDA_SUCCESS;
}

/* cuMemFreeHost: p must be the start of a pinned allocation, else
 * CUDA_ERROR_INVALID_VALUE. Pending work of its context runs first (a kernel
 * may still write there). */
static CUresult host_free(void *p) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  fc_alloc *a = p ? pinned_holding(p) : NULL;
  if (!a || a->host != p) return CUDA_ERROR_INVALID_VALUE;
  if ((r = fc_capture_unsafe_check(ctx, "cuMemFreeHost")) != CUDA_SUCCESS) return r; /* [U] as cuMemFree */
  r = fc_run_ctx(a->ctx);
  a = pinned_holding(p); /* the work run may not free it, but look again */
  if (a) drop_alloc((size_t)(a - allocs));
  return r;
}

/* ------------------------------------------------------------ copies --- */

/* Which of a copy's pointers are device pointers. */
enum { HTOD, DTOH, DTOD };

typedef struct copy_op {
  int dir;
  CUdeviceptr dst, src;
  void *host_dst;         /* DTOH: written when the copy runs */
  unsigned char *staged;  /* HTOD: the host bytes, taken at the call */
  size_t n;
  /* Captured into a graph: the pinned host bytes are read (HTOD) when the
   * copy runs, at every replay, as a graph's memcpy node does. */
  const void *host_src;
  int captured;
} copy_op;

static void copy_release(void *p) {
  copy_op *c = p;
  free(c->staged);
  free(c);
}

/* Device ranges were checked when the copy was issued, and memory is freed
 * only after its context's work ran; another context's free can still pull
 * a buffer from under pending work, which is a device fault. */
static CUresult copy_run(void *p, char *msg, size_t cap) {
  copy_op *c = p;
  fc_alloc *d = c->dir != DTOH ? find_range(c->dst, c->n) : NULL;
  fc_alloc *s = c->dir != HTOD ? find_range(c->src, c->n) : NULL;
  if ((c->dir != DTOH && !d) || (c->dir != HTOD && !s)) {
    snprintf(msg, cap, "a copy of %zu bytes: its device memory was freed before the copy ran", c->n);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  const void *pinned = !c->captured ? NULL : c->dir == HTOD ? c->host_src : c->host_dst;
  if (pinned && !fc_mem_is_pinned(pinned, c->n)) {
    snprintf(msg, cap, "a graph's copy of %zu bytes: its pinned host memory was freed before the copy ran", c->n);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  if (c->dir == HTOD) memcpy(d->host + (c->dst - d->base), c->captured ? c->host_src : c->staged, c->n);
  else if (c->dir == DTOH) memcpy(c->host_dst, s->host + (c->src - s->base), c->n);
  else memmove(d->host + (c->dst - d->base), s->host + (c->src - s->base), c->n);
  return CUDA_SUCCESS;
}

/* Every copy: a current context; a live stream; zero bytes do nothing [U];
 * host pointers non-NULL; device ranges inside one live allocation (of any
 * device: the address space is unified) else CUDA_ERROR_INVALID_VALUE.
 * `wait`: a synchronous copy to or from the host, which returns when its
 * stream has run up to it. */
static CUresult copy(int dir, void *host_dst, const void *host_src, CUdeviceptr dst, CUdeviceptr src, size_t n,
                     CUstream stream, int wait) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!fc_stream_is_valid(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if ((dir == HTOD && !host_src) || (dir == DTOH && !host_dst)) return CUDA_ERROR_INVALID_VALUE;
  if ((dir != DTOH && !find_range(dst, n)) || (dir != HTOD && !find_range(src, n))) return CUDA_ERROR_INVALID_VALUE;
  /* Captured: the graph keeps the host address and uses it at every
   * replay, which only pinned memory allows [S: an asynchronous copy from
   * pageable memory is staged and waited for by the driver, a
   * synchronisation that capture refuses: "operation not permitted when
   * stream is capturing" (PyTorch, CUDA.jl reports); cudaGraphs need
   * pinned host buffers]. */
  int captured = !wait && fc_capture_status(stream) == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (captured && dir != DTOD && !fc_mem_is_pinned(dir == HTOD ? host_src : host_dst, n))
    return fc_capture_refuse(stream, "%s of %zu bytes %s pageable host memory during stream capture",
                             dir == HTOD ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync", n, dir == HTOD ? "from" : "to");
  copy_op *c = calloc(1, sizeof *c);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  *c = (copy_op){dir, dst, src, host_dst, NULL, n, captured && dir == HTOD ? host_src : NULL, captured};
  if (dir == HTOD && !captured) {
    c->staged = malloc(n);
    if (!c->staged) {
      free(c);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(c->staged, host_src, n);
  }
  static const char *const what[] = {"cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD"};
  unsigned long long seq;
  r = fc_enqueue(stream, copy_run, copy_release, c, what[dir], &seq);
  if (r != CUDA_SUCCESS || !wait) return r;
  return fc_sync_op(seq);
}

/* ----------------------------------------------------------- memsets --- */

typedef struct memset_op {
  CUdeviceptr dst;
  unsigned value;
  size_t elem, count;
} memset_op;

static CUresult memset_run(void *p, char *msg, size_t cap) {
  memset_op *m = p;
  fc_alloc *a = find_range(m->dst, m->elem * m->count);
  if (!a) {
    snprintf(msg, cap, "a memset of %zu bytes: its device memory was freed before it ran", m->elem * m->count);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  unsigned char *d = a->host + (m->dst - a->base);
  if (m->elem == 1) {
    memset(d, (int)(m->value & 0xff), m->count);
  } else {
    for (size_t i = 0; i < m->count; i++) memcpy(d + 4 * i, &m->value, 4);
  }
  return CUDA_SUCCESS;
}

/* cuda.h: cuMemsetD32's destination must be 4-byte aligned
 * (CUDA_ERROR_INVALID_VALUE otherwise [U: the documentation says only that
 * it "must be four byte aligned"]). The synchronous forms are asynchronous
 * with respect to the host ("The synchronous memset functions are
 * asynchronous with respect to the host except when the target is pinned
 * host memory", API synchronization behavior): they go on the legacy
 * stream like the others. */
static CUresult memset_issue(CUdeviceptr dst, unsigned value, size_t elem, size_t count, CUstream s) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!fc_stream_is_valid(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (count == 0) return CUDA_SUCCESS;
  if (count > SIZE_MAX / elem || (elem == 4 && dst % 4) || !find_range(dst, elem * count)) return CUDA_ERROR_INVALID_VALUE;
  memset_op *m = malloc(sizeof *m);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *m = (memset_op){dst, value, elem, count};
  return fc_enqueue(s, memset_run, free, m, elem == 1 ? "cuMemsetD8" : "cuMemsetD32", NULL);
}

/* ----------------------------------------------------------- exports --- */

FC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) { FC_CALL(cuMemAlloc_v2, mem_alloc(p, bytes)); }
FC_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { FC_CALL(cuMemFree_v2, mem_free(p)); }
FC_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  FC_CALL(cuMemGetInfo_v2, mem_info(free_bytes, total_bytes));
}
FC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  FC_CALL(cuMemcpyHtoD_v2, copy(HTOD, NULL, src, dst, 0, n, NULL, 1));
}
FC_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  FC_CALL(cuMemcpyDtoH_v2, copy(DTOH, dst, NULL, 0, src, n, NULL, 1));
}
FC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  FC_CALL(cuMemcpyDtoD_v2, copy(DTOD, NULL, NULL, dst, src, n, NULL, 0));
}
FC_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  FC_CALL(cuMemcpyHtoDAsync_v2, copy(HTOD, NULL, src, dst, 0, n, s, 0));
}
FC_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  FC_CALL(cuMemcpyDtoHAsync_v2, copy(DTOH, dst, NULL, 0, src, n, s, 0));
}
FC_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FC_CALL(cuMemcpyDtoDAsync_v2, copy(DTOD, NULL, NULL, dst, src, n, s, 0));
}
FC_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  FC_CALL(cuMemsetD8_v2, memset_issue(dst, v, 1, n, NULL));
}
FC_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n) {
  FC_CALL(cuMemsetD32_v2, memset_issue(dst, v, 4, n, NULL));
}
FC_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  FC_CALL(cuMemsetD8Async, memset_issue(dst, v, 1, n, s));
}
FC_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  FC_CALL(cuMemsetD32Async, memset_issue(dst, v, 4, n, s));
}

FC_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned flags) {
  FC_CALL(cuMemHostAlloc, host_alloc(pp, bytes, flags));
}
FC_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dp, void *p, unsigned flags) {
  FC_CALL(cuMemHostGetDevicePointer_v2, host_device_pointer(dp, p, flags));
}
FC_EXPORT CUresult cuMemFreeHost(void *p) { FC_CALL(cuMemFreeHost, host_free(p)); }

/* What a library asks about a buffer it is handed (the cuBLAS double checks
 * a workspace with it): the context an address belongs to
 * (CU_POINTER_ATTRIBUTE_CONTEXT 1, a CUcontext) and its allocation's start
 * and size (RANGE_START_ADDR 11, a CUdeviceptr; RANGE_SIZE 12, a size_t),
 * for device addresses of live allocations and mapped pinned memory. An
 * address in no allocation is CUDA_ERROR_INVALID_VALUE (cuda.h: "If ptr was
 * not allocated by, mapped by, or registered with a CUcontext which uses
 * unified virtual addressing then CUDA_ERROR_INVALID_VALUE is returned");
 * so is any other attribute, so that a gap in the double shows [U]. */
static CUresult pointer_attribute(void *data, int attribute, CUdeviceptr p) {
  const fc_alloc *a = find_range(p, 1);
  if (!data || !a) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
  case 1:
    *(CUcontext *)data = (CUcontext)a->ctx;
    return CUDA_SUCCESS;
  case 11:
    *(CUdeviceptr *)data = a->base;
    return CUDA_SUCCESS;
  case 12:
    *(size_t *)data = a->size;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

FC_EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p) {
  FC_CALL(cuPointerGetAttribute, pointer_attribute(data, attribute, p));
}
FC_SAME_TYPE(cuPointerGetAttribute, PFN_fc_cuPointerGetAttribute);

FC_SAME_TYPE(cuMemHostAlloc, PFN_cuMemHostAlloc);
FC_SAME_TYPE(cuMemHostGetDevicePointer_v2, PFN_cuMemHostGetDevicePointer);
FC_SAME_TYPE(cuMemFreeHost, PFN_cuMemFreeHost);
FC_SAME_TYPE(cuMemAlloc_v2, PFN_cuMemAlloc);
FC_SAME_TYPE(cuMemFree_v2, PFN_cuMemFree);
FC_SAME_TYPE(cuMemGetInfo_v2, PFN_cuMemGetInfo);
FC_SAME_TYPE(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD);
FC_SAME_TYPE(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH);
FC_SAME_TYPE(cuMemcpyDtoD_v2, PFN_cuMemcpyDtoD);
FC_SAME_TYPE(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync);
FC_SAME_TYPE(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync);
FC_SAME_TYPE(cuMemcpyDtoDAsync_v2, PFN_cuMemcpyDtoDAsync);
FC_SAME_TYPE(cuMemsetD8_v2, PFN_cuMemsetD8);
FC_SAME_TYPE(cuMemsetD32_v2, PFN_cuMemsetD32);
FC_SAME_TYPE(cuMemsetD8Async, PFN_cuMemsetD8Async);
FC_SAME_TYPE(cuMemsetD32Async, PFN_cuMemsetD32Async);

/* ------------------------------------------------- legacy plain names --- */

/* In the real libcuda the plain names of these entry points are the CUDA 3.x
 * ABI with 32-bit sizes and device pointers (cuda.h, CUDA 13.0, the
 * __CUDA_API_VERSION_INTERNAL section: cuMemAlloc(CUdeviceptr_v1 *, unsigned
 * int), cuDeviceTotalMem(unsigned int *, ...)); cuda.h maps every use of the
 * plain name to the _v2 symbol. A caller that dlsym()s the plain name and calls
 * it with 64-bit arguments has a bug the real driver would not report, so the
 * fake exports them with their legacy types and refuses every call with
 * CUDA_ERROR_NOT_SUPPORTED plus a message naming the _v2 symbol to use. They
 * share the _v2 name's fault-injection counter. */
typedef unsigned int legacy_ptr; /* CUdeviceptr_v1 */

static CUresult legacy(const char *plain) {
  fprintf(stderr, "fakecuda: %s is the legacy 32-bit entry point; resolve %s_v2 (cuda.h maps %s to it)\n", plain, plain,
          plain);
  return CUDA_ERROR_NOT_SUPPORTED;
}

FC_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
  (void)bytes, (void)dev;
  FC_CALL(cuDeviceTotalMem_v2, legacy("cuDeviceTotalMem"));
}
FC_EXPORT CUresult cuMemAlloc(legacy_ptr *p, unsigned int bytes) {
  (void)p, (void)bytes;
  FC_CALL(cuMemAlloc_v2, legacy("cuMemAlloc"));
}
FC_EXPORT CUresult cuMemFree(legacy_ptr p) {
  (void)p;
  FC_CALL(cuMemFree_v2, legacy("cuMemFree"));
}
FC_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes) {
  (void)free_bytes, (void)total_bytes;
  FC_CALL(cuMemGetInfo_v2, legacy("cuMemGetInfo"));
}
FC_EXPORT CUresult cuMemHostGetDevicePointer(legacy_ptr *dp, void *p, unsigned int flags) {
  (void)dp, (void)p, (void)flags;
  FC_CALL(cuMemHostGetDevicePointer_v2, legacy("cuMemHostGetDevicePointer"));
}
FC_EXPORT CUresult cuMemcpyHtoD(legacy_ptr dst, const void *src, unsigned int n) {
  (void)dst, (void)src, (void)n;
  FC_CALL(cuMemcpyHtoD_v2, legacy("cuMemcpyHtoD"));
}
FC_EXPORT CUresult cuMemcpyDtoH(void *dst, legacy_ptr src, unsigned int n) {
  (void)dst, (void)src, (void)n;
  FC_CALL(cuMemcpyDtoH_v2, legacy("cuMemcpyDtoH"));
}
FC_EXPORT CUresult cuMemcpyDtoD(legacy_ptr dst, legacy_ptr src, unsigned int n) {
  (void)dst, (void)src, (void)n;
  FC_CALL(cuMemcpyDtoD_v2, legacy("cuMemcpyDtoD"));
}
FC_EXPORT CUresult cuMemcpyHtoDAsync(legacy_ptr dst, const void *src, unsigned int n, CUstream s) {
  (void)dst, (void)src, (void)n, (void)s;
  FC_CALL(cuMemcpyHtoDAsync_v2, legacy("cuMemcpyHtoDAsync"));
}
FC_EXPORT CUresult cuMemcpyDtoHAsync(void *dst, legacy_ptr src, unsigned int n, CUstream s) {
  (void)dst, (void)src, (void)n, (void)s;
  FC_CALL(cuMemcpyDtoHAsync_v2, legacy("cuMemcpyDtoHAsync"));
}
FC_EXPORT CUresult cuMemcpyDtoDAsync(legacy_ptr dst, legacy_ptr src, unsigned int n, CUstream s) {
  (void)dst, (void)src, (void)n, (void)s;
  FC_CALL(cuMemcpyDtoDAsync_v2, legacy("cuMemcpyDtoDAsync"));
}
FC_EXPORT CUresult cuMemsetD8(legacy_ptr dst, unsigned char v, unsigned int n) {
  (void)dst, (void)v, (void)n;
  FC_CALL(cuMemsetD8_v2, legacy("cuMemsetD8"));
}
FC_EXPORT CUresult cuMemsetD32(legacy_ptr dst, unsigned v, unsigned int n) {
  (void)dst, (void)v, (void)n;
  FC_CALL(cuMemsetD32_v2, legacy("cuMemsetD32"));
}

/* -------------------------------------------------------- test hooks --- */

FC_EXPORT size_t fakecuda_bytes_allocated(void) {
  size_t total = 0;
  fc_lock_raw();
  for (size_t i = 0; i < n_allocs; i++) total += allocs[i].pinned ? 0 : allocs[i].size; /* device memory only */
  fc_leave();
  return total;
}

FC_EXPORT size_t fakecuda_live_allocations(void) {
  fc_lock_raw();
  size_t n = 0;
  for (size_t i = 0; i < n_allocs; i++) n += !allocs[i].pinned; /* device memory only */
  fc_leave();
  return n;
}

FC_EXPORT size_t fakecuda_pinned_allocations(void) {
  fc_lock_raw();
  size_t n = 0;
  for (size_t i = 0; i < n_allocs; i++) n += allocs[i].pinned;
  fc_leave();
  return n;
}

FC_SAME_TYPE(fakecuda_bytes_allocated, fakecuda_size_fn);
FC_SAME_TYPE(fakecuda_live_allocations, fakecuda_size_fn);
FC_SAME_TYPE(fakecuda_pinned_allocations, fakecuda_size_fn);
