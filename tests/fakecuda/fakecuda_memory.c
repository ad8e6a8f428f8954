/* Device memory and streams of the fake libcuda. Each allocation is backed by
 * host memory, so copies really copy and tests can check round trips; every
 * copy must lie inside one live allocation. Device addresses are synthetic
 * (never host addresses, never reused), so a host dereference of a device
 * pointer or a use after free cannot pass by accident. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "fakecuda_internal.h"

#define ALLOC_ALIGN 256u                /* cudaMalloc guarantees at least 256-byte alignment */
#define DEVICE_SPAN 0x100000000000ull   /* 16 TiB of address space per device ordinal */
#define POISON_LIMIT ((size_t)16 << 20) /* fill new allocations up to this size */
#define POISON_BYTE 0xFF                /* all-ones floats are NaN: uninitialised reads show */

typedef struct fc_alloc {
  CUdeviceptr base;
  size_t size;    /* as requested */
  size_t charged; /* rounded up to ALLOC_ALIGN, counted against the device */
  unsigned char *host;
  const struct CUctx_st *ctx;
} fc_alloc;

struct CUstream_st {
  const struct CUctx_st *ctx;
  unsigned flags;
};

static fc_alloc *allocs;
static size_t n_allocs, cap_allocs;
static CUdeviceptr next_offset[FC_MAX_DEVICES];
static struct CUstream_st **streams;
static size_t n_streams, cap_streams;

/* ------------------------------------------------------------ lookup --- */

/* The allocation holding [p, p+n), n >= 1, or NULL. */
static fc_alloc *find_range(CUdeviceptr p, size_t n) {
  for (size_t i = 0; i < n_allocs; i++) {
    fc_alloc *a = &allocs[i];
    if (p >= a->base && p - a->base < a->size && n <= a->size - (size_t)(p - a->base)) return a;
  }
  return NULL;
}

static size_t find_base(CUdeviceptr p) {
  for (size_t i = 0; i < n_allocs; i++)
    if (allocs[i].base == p) return i;
  return SIZE_MAX;
}

static void drop_alloc(size_t i) {
  fc_alloc *a = &allocs[i];
  fc_device *d = fc_ctx_device(a->ctx);
  d->mem_used -= a->charged < d->mem_used ? a->charged : d->mem_used;
  free(a->host);
  allocs[i] = allocs[--n_allocs];
}

static size_t stream_index(const struct CUstream_st *s) {
  for (size_t i = 0; i < n_streams; i++)
    if (streams[i] == s) return i;
  return SIZE_MAX;
}

int fc_stream_is_valid(CUstream s) {
  if (!s) return 1;
  size_t i = stream_index(s);
  return i != SIZE_MAX && fc_ctx_is_live(streams[i]->ctx);
}

void fc_memory_release(const struct CUctx_st *ctx) {
  for (size_t i = n_allocs; i-- > 0;)
    if (!ctx || allocs[i].ctx == ctx) drop_alloc(i);
  for (size_t i = n_streams; i-- > 0;) {
    if (!ctx || streams[i]->ctx == ctx) {
      free(streams[i]);
      streams[i] = streams[--n_streams];
    }
  }
  if (!ctx) {
    free(allocs);
    free(streams);
    allocs = NULL;
    streams = NULL;
    n_allocs = cap_allocs = n_streams = cap_streams = 0;
    memset(next_offset, 0, sizeof next_offset); /* a new configuration starts a new address space */
  }
}

/* -------------------------------------------------------- allocation --- */

static CUresult mem_alloc(CUdeviceptr *p, size_t bytes) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  /* cuda.h: "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE". */
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
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
  unsigned char *host = malloc(bytes);
  if (!host) return CUDA_ERROR_OUT_OF_MEMORY;
  if (bytes <= POISON_LIMIT) memset(host, POISON_BYTE, bytes);
  /* Addresses only grow: a freed range is never handed out again. */
  int ord = ctx->ordinal;
  CUdeviceptr base = DEVICE_SPAN * (CUdeviceptr)(ord + 1) + next_offset[ord];
  next_offset[ord] += charged;
  allocs[n_allocs++] = (fc_alloc){base, bytes, charged, host, ctx};
  d->mem_used += charged;
  *p = base;
  return CUDA_SUCCESS;
}

/* A pointer that is not the start of a live allocation (0, an interior
 * pointer, a double free) is CUDA_ERROR_INVALID_VALUE [U for 0: cudaFree(NULL)
 * succeeds in the runtime; the driver's answer for cuMemFree(0) is unconfirmed]. */
static CUresult mem_free(CUdeviceptr p) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  size_t i = find_base(p);
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_VALUE;
  drop_alloc(i);
  return CUDA_SUCCESS;
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

/* ------------------------------------------------------------ copies --- */

/* Which of a copy's pointers are device pointers. */
enum { HTOD, DTOH, DTOD };

/* Every copy: a current context; a live stream; zero bytes do nothing [U];
 * host pointers non-NULL; device ranges inside one live allocation (of any
 * device: the address space is unified) else CUDA_ERROR_INVALID_VALUE. Async
 * copies complete before returning (the fake has no queue). */
static CUresult copy(int dir, void *host_dst, const void *host_src, CUdeviceptr dst, CUdeviceptr src, size_t n,
                     CUstream stream) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!fc_stream_is_valid(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (dir == HTOD) {
    fc_alloc *d = find_range(dst, n);
    if (!host_src || !d) return CUDA_ERROR_INVALID_VALUE;
    memcpy(d->host + (dst - d->base), host_src, n);
  } else if (dir == DTOH) {
    fc_alloc *s = find_range(src, n);
    if (!host_dst || !s) return CUDA_ERROR_INVALID_VALUE;
    memcpy(host_dst, s->host + (src - s->base), n);
  } else {
    fc_alloc *d = find_range(dst, n), *s = find_range(src, n);
    if (!d || !s) return CUDA_ERROR_INVALID_VALUE;
    memmove(d->host + (dst - d->base), s->host + (src - s->base), n);
  }
  return CUDA_SUCCESS;
}

/* ----------------------------------------------------------- streams --- */

static CUresult stream_create(CUstream *out, unsigned flags) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  /* CU_STREAM_DEFAULT 0 and CU_STREAM_NON_BLOCKING 1 are the only flags (cuda.h). */
  if (!out || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
  if (n_streams == cap_streams) {
    size_t cap = cap_streams ? cap_streams * 2 : 16;
    struct CUstream_st **grown = realloc(streams, cap * sizeof *grown);
    if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
    streams = grown;
    cap_streams = cap;
  }
  struct CUstream_st *s = malloc(sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = ctx;
  s->flags = flags;
  streams[n_streams++] = s;
  *out = s;
  return CUDA_SUCCESS;
}

/* Destroying the NULL stream or an unknown handle: CUDA_ERROR_INVALID_HANDLE [U]. */
static CUresult stream_destroy(CUstream s) {
  size_t i = s ? stream_index(s) : SIZE_MAX;
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_HANDLE;
  free(streams[i]);
  streams[i] = streams[--n_streams];
  return CUDA_SUCCESS;
}

static CUresult stream_synchronize(CUstream s) {
  if (!s) {
    struct CUctx_st *ctx;
    return fc_current_ctx(&ctx);
  }
  return fc_stream_is_valid(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ----------------------------------------------------------- exports --- */

FC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) { FC_CALL(cuMemAlloc_v2, mem_alloc(p, bytes)); }
FC_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { FC_CALL(cuMemFree_v2, mem_free(p)); }
FC_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  FC_CALL(cuMemGetInfo_v2, mem_info(free_bytes, total_bytes));
}
FC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  FC_CALL(cuMemcpyHtoD_v2, copy(HTOD, NULL, src, dst, 0, n, NULL));
}
FC_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  FC_CALL(cuMemcpyDtoH_v2, copy(DTOH, dst, NULL, 0, src, n, NULL));
}
FC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  FC_CALL(cuMemcpyDtoD_v2, copy(DTOD, NULL, NULL, dst, src, n, NULL));
}
FC_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  FC_CALL(cuMemcpyHtoDAsync_v2, copy(HTOD, NULL, src, dst, 0, n, s));
}
FC_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  FC_CALL(cuMemcpyDtoHAsync_v2, copy(DTOH, dst, NULL, 0, src, n, s));
}
FC_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FC_CALL(cuMemcpyDtoDAsync_v2, copy(DTOD, NULL, NULL, dst, src, n, s));
}
FC_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) { FC_CALL(cuStreamCreate, stream_create(s, flags)); }
FC_EXPORT CUresult cuStreamDestroy_v2(CUstream s) { FC_CALL(cuStreamDestroy_v2, stream_destroy(s)); }
/* Same signature as _v2. */
FC_EXPORT CUresult cuStreamDestroy(CUstream s) { FC_CALL(cuStreamDestroy_v2, stream_destroy(s)); }
FC_EXPORT CUresult cuStreamSynchronize(CUstream s) { FC_CALL(cuStreamSynchronize, stream_synchronize(s)); }

FC_SAME_TYPE(cuMemAlloc_v2, PFN_cuMemAlloc);
FC_SAME_TYPE(cuMemFree_v2, PFN_cuMemFree);
FC_SAME_TYPE(cuMemGetInfo_v2, PFN_cuMemGetInfo);
FC_SAME_TYPE(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD);
FC_SAME_TYPE(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH);
FC_SAME_TYPE(cuMemcpyDtoD_v2, PFN_cuMemcpyDtoD);
FC_SAME_TYPE(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync);
FC_SAME_TYPE(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync);
FC_SAME_TYPE(cuMemcpyDtoDAsync_v2, PFN_cuMemcpyDtoDAsync);
FC_SAME_TYPE(cuStreamCreate, PFN_cuStreamCreate);
FC_SAME_TYPE(cuStreamDestroy_v2, PFN_cuStreamDestroy);
FC_SAME_TYPE(cuStreamDestroy, PFN_cuStreamDestroy);
FC_SAME_TYPE(cuStreamSynchronize, PFN_cuStreamSynchronize);

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

/* -------------------------------------------------------- test hooks --- */

FC_EXPORT size_t fakecuda_bytes_allocated(void) {
  size_t total = 0;
  fc_lock_raw();
  for (size_t i = 0; i < n_allocs; i++) total += allocs[i].size;
  fc_leave();
  return total;
}

FC_EXPORT size_t fakecuda_live_allocations(void) {
  fc_lock_raw();
  size_t n = n_allocs;
  fc_leave();
  return n;
}

FC_SAME_TYPE(fakecuda_bytes_allocated, fakecuda_size_fn);
FC_SAME_TYPE(fakecuda_live_allocations, fakecuda_size_fn);
