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
  int streams;            /* stream-aware (a CUDA device's): see em_alloc_stream */
} em_alloc_backend;

typedef struct em_alloc_block { void *ptr; size_t size; const void *stream; } em_alloc_block;

/* The stream this thread's work is issued on now (NULL: the legacy stream),
 * for stream-aware allocators: a block freed while it is set is cached
 * under that stream and handed out again only to requests made under the
 * same stream, because work queued on it may still read the block. Work
 * of two streams is ordered only where someone joins them (em_stream_join);
 * an executor with CUDA graphs sets its stream around its steps, so a block
 * one of its steps freed never goes to another thread's legacy-stream
 * work still racing with it (nor the other way round). Returns the
 * previous value. */
const void *em_alloc_stream(const void *stream);
/* A stream's end: device dev's blocks cached under `stream` move to the legacy stream's side (NULL).
 * Call it once the legacy stream waits for the stream's work (em_stream_join) and before the
 * stream is destroyed: its tag is the em_stream's address, which a later stream may be given
 * again, and that stream's work would then take blocks the old stream's kernels may still be
 * reading (nothing orders the two); stranded, they would also never be used again. */
void em_alloc_stream_retire(em_device dev, const void *stream);

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
/* em_alloc_stream_retire on one allocator. */
void em_allocator_retire_stream(em_allocator *a, const void *stream);
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

/* CUDA graphs (engine/exec_graphs.c). A replay of a captured run runs no
 * host code, so it uses exactly the device addresses the capture's
 * allocations got: those blocks must belong to the graph for as long as it
 * lives, and no allocation during a capture may reach the driver
 * (cuMemAlloc / cuMemFree invalidate it). PyTorch's private pools answer
 * the same need.
 *
 * A record: the size classes one eager run on this thread allocated on a
 * device, as the most blocks of each class live at once. A pool: blocks
 * taken from the device's allocator before the capture (em_alloc_pool_create
 * from a record, so this may call the driver), then, between
 * em_alloc_pool_enter and _leave, the only source and sink of this thread's
 * em_malloc / em_free on that device: a free returns its block to the pool
 * (later allocations of the same capture reuse it, as the eager run reused
 * the cache); a request no free block of its class answers fails (never the
 * driver). em_alloc_pool_free gives the blocks back to the allocator: every
 * tensor on them must be released before, with the pool entered. */
typedef struct em_alloc_record em_alloc_record;
typedef struct em_alloc_pool em_alloc_pool;

em_alloc_record *em_alloc_record_new(em_device dev);
void em_alloc_record_free(em_alloc_record *r);
/* Records this thread's allocations on r's device (NULL: stop); the counts
 * restart at each start. */
void em_alloc_record_start(em_alloc_record *r);
/* Bytes the record asks a pool to reserve. */
uint64_t em_alloc_record_bytes(const em_alloc_record *r);

em_status em_alloc_pool_create(const em_alloc_record *r, em_alloc_pool **out);
/* This thread's allocations on the pool's device come from p (NULL: leave). */
void em_alloc_pool_enter(em_alloc_pool *p);
uint64_t em_alloc_pool_bytes(const em_alloc_pool *p);
/* Blocks of p in use now (0 once every tensor on it is released). */
int em_alloc_pool_in_use(const em_alloc_pool *p);
void em_alloc_pool_free(em_alloc_pool *p);

/* The host waits for stream s (NULL: the legacy default stream, which every
 * executor's stream joins at the end of a run), then reports a failed device
 * check as em_stream_sync does. Never the whole context: synchronising a
 * context while another thread captures one of its streams is invalid
 * ("Prohibited and Unhandled Operations", CUDA Programming Guide), failing
 * the wait and the other thread's capture; Ember's own waits use this. */
em_status em_stream_wait(em_device dev, em_stream *s);

#endif
