/* A per-device caching allocator. Freed blocks are kept in size classes (four
 * per power of two: at most 25% wasted above 4 KiB, 512-byte granules below)
 * and handed out again, since cuMemAlloc/cuMemFree synchronise the device and
 * cost far more than a launch. When the driver runs out of memory the cache is returned to it and
 * the allocation is tried once more. */
#ifndef EMBER_RUNTIME_MEMORY_H
#define EMBER_RUNTIME_MEMORY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "ember/runtime.h"

typedef struct em_alloc_backend {
  /* Returns 0 on success, else a backend error code (CUresult for CUDA). */
  int (*alloc)(void *ctx, size_t bytes, void **ptr);
  void (*release)(void *ctx, void *ptr);
  void *ctx;
  int caching;            /* keep freed blocks for reuse */
  size_t cache_limit;     /* most bytes the cache holds (beyond: released at once); 0: no limit */
} em_alloc_backend;

typedef struct em_alloc_block { void *ptr; size_t size; } em_alloc_block;

typedef struct em_allocator {
  pthread_mutex_t lock;
  em_alloc_backend backend;
  /* live blocks: open-addressing hash of ptr -> size class */
  em_alloc_block *live;
  size_t live_cap, live_count;
  /* cached free blocks, unsorted; the list is short in practice */
  em_alloc_block *cached;
  size_t cached_cap, cached_count;
  em_alloc_stats stats;
  uint64_t window_peak;   /* highest bytes_in_use since the last em_allocator_window_peak(.., 1) */
  int initialized;
} em_allocator;

void em_allocator_init(em_allocator *a, em_alloc_backend backend);
/* Frees every cached block; live blocks are leaked to the backend's teardown
 * (the context is destroyed with them). */
void em_allocator_destroy(em_allocator *a);
/* Size class of a request: a multiple of 512 bytes, rounded up to one of four
 * steps per power of two. */
size_t em_alloc_class(size_t bytes);
em_status em_allocator_alloc(em_allocator *a, size_t bytes, void **ptr);
em_status em_allocator_free(em_allocator *a, void *ptr);
void em_allocator_trim(em_allocator *a);
/* The highest bytes in use since the window was last reset (reset: start a
 * new window now): an executor's peak over one run. */
uint64_t em_allocator_window_peak(em_allocator *a, int reset);

/* The same for a device's allocator (memory_api.c). */
em_status em_alloc_window_peak(em_device dev, int reset, uint64_t *peak);

/* Copies between the host and CUDA devices this thread has made through
 * em_memcpy_* since it started (CPU-to-CPU moves are not counted): an
 * executor subtracts two readings to count what one run copied. */
enum { EM_COPY_H2D = 0, EM_COPY_D2H = 1, EM_COPY_D2D = 2 };
typedef struct em_copy_counts {
  uint64_t copies[3], bytes[3]; /* indexed by EM_COPY_* */
} em_copy_counts;
void em_copy_counts_get(em_copy_counts *out);

#endif
