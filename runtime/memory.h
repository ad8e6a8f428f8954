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

#endif
