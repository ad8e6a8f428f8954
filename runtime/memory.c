/* The caching allocator (memory.h). */
#include "memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

size_t em_alloc_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t r = (bytes + 511) & ~(size_t)511;
  if (r <= 4096) return r;
  /* Four steps per octave: p, 1.25p, 1.5p, 1.75p (p the power of two below r). */
  size_t p = (size_t)1 << (63 - __builtin_clzll((unsigned long long)r));
  for (int q = 0; q <= 4; q++) {
    size_t step = p + (p / 4) * (size_t)q;
    if (step >= r) return step;
  }
  /* The next step (2p) overflows size_t: no class holds the request. 0 is
   * smaller than any request, which em_allocator_alloc refuses. */
  return 0;
}

static size_t hash_ptr(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static int live_grow(em_allocator *a) {
  size_t cap = a->live_cap ? a->live_cap * 2 : 256;
  em_alloc_block *t = calloc(cap, sizeof *t);
  if (!t) return -1;
  for (size_t i = 0; i < a->live_cap; i++) {
    if (!a->live[i].ptr) continue;
    size_t h = hash_ptr(a->live[i].ptr, cap);
    while (t[h].ptr) h = (h + 1) & (cap - 1);
    t[h] = a->live[i];
  }
  free(a->live);
  a->live = t;
  a->live_cap = cap;
  return 0;
}

static int live_insert(em_allocator *a, void *ptr, size_t size) {
  if ((a->live_count + 1) * 2 > a->live_cap && live_grow(a)) return -1;
  size_t h = hash_ptr(ptr, a->live_cap);
  while (a->live[h].ptr) h = (h + 1) & (a->live_cap - 1);
  a->live[h].ptr = ptr;
  a->live[h].size = size;
  a->live_count++;
  return 0;
}

/* Removes ptr, returning its size, or 0 if it is not a live block. Uses
 * backward-shift deletion so probe chains stay intact. */
static size_t live_remove(em_allocator *a, void *ptr) {
  if (!a->live_cap) return 0;
  size_t mask = a->live_cap - 1, h = hash_ptr(ptr, a->live_cap);
  while (a->live[h].ptr && a->live[h].ptr != ptr) h = (h + 1) & mask;
  if (!a->live[h].ptr) return 0;
  size_t size = a->live[h].size;
  a->live[h].ptr = NULL;
  a->live_count--;
  for (size_t j = (h + 1) & mask; a->live[j].ptr; j = (j + 1) & mask) {
    size_t home = hash_ptr(a->live[j].ptr, a->live_cap);
    /* Move j back into the hole if its home is not in (h, j]. */
    if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
      a->live[h] = a->live[j];
      a->live[j].ptr = NULL;
      h = j;
    }
  }
  return size;
}

void em_allocator_init(em_allocator *a, em_alloc_backend backend) {
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->lock, NULL);
  a->backend = backend;
  a->initialized = 1;
}

static void release_cached(em_allocator *a) {
  for (size_t i = 0; i < a->cached_count; i++) {
    a->backend.release(a->backend.ctx, a->cached[i].ptr);
    a->stats.bytes_cached -= a->cached[i].size;
  }
  a->cached_count = 0;
}

uint64_t em_allocator_window_peak(em_allocator *a, int reset) {
  pthread_mutex_lock(&a->lock);
  uint64_t peak = a->window_peak;
  if (reset) a->window_peak = a->stats.bytes_in_use;
  pthread_mutex_unlock(&a->lock);
  return peak;
}

void em_allocator_trim(em_allocator *a) {
  pthread_mutex_lock(&a->lock);
  release_cached(a);
  pthread_mutex_unlock(&a->lock);
}

void em_allocator_destroy(em_allocator *a) {
  if (!a->initialized) return;
  release_cached(a);
  free(a->cached);
  free(a->live);
  pthread_mutex_destroy(&a->lock);
  memset(a, 0, sizeof *a);
}

/* Calls the backend. A failing backend may say what failed in the thread's
 * message (the CUDA one names cuMemAlloc, the error name and number): that
 * text comes back in why[] ("" if it said nothing), and the caller's earlier
 * message is left as it was. */
static int backend_alloc(em_allocator *a, size_t bytes, void **p, char *why, size_t cap) {
  char before[2048]; /* error.c keeps messages of up to 2047 bytes */
  snprintf(before, sizeof before, "%s", em_last_error());
  em_clear_error();
  int err = a->backend.alloc(a->backend.ctx, bytes, p);
  snprintf(why, cap, "%s", err ? em_last_error() : "");
  if (before[0]) em_fail(EM_OK, "%s", before);
  else em_clear_error();
  return err;
}

static _Thread_local const void *t_stream;

const void *em_alloc_stream(const void *stream) {
  const void *old = t_stream;
  t_stream = stream;
  return old;
}

void em_allocator_retire_stream(em_allocator *a, const void *stream) {
  if (!stream) return;
  pthread_mutex_lock(&a->lock);
  for (size_t i = 0; i < a->cached_count; i++)
    if (a->cached[i].stream == stream) a->cached[i].stream = NULL;
  pthread_mutex_unlock(&a->lock);
}

/* The stream a block is cached under (stream-aware allocators only). */
static const void *stream_of(const em_allocator *a) { return a->backend.streams ? t_stream : NULL; }

/* Takes a cached block of exactly this class, freed under this thread's
 * stream, if any. */
static void *take_cached(em_allocator *a, size_t cls) {
  const void *stream = stream_of(a);
  for (size_t i = 0; i < a->cached_count; i++) {
    if (a->cached[i].size != cls || a->cached[i].stream != stream) continue;
    void *p = a->cached[i].ptr;
    a->cached[i] = a->cached[--a->cached_count];
    a->stats.bytes_cached -= cls;
    a->stats.cache_hits++;
    return p;
  }
  return NULL;
}

em_status em_allocator_alloc(em_allocator *a, size_t bytes, void **ptr) {
  size_t cls = em_alloc_class(bytes);
  if (cls < bytes) return em_fail(EM_ERR_OUT_OF_MEMORY, "allocation of %zu bytes is too large", bytes);
  pthread_mutex_lock(&a->lock);
  void *p = a->backend.caching ? take_cached(a, cls) : NULL;
  if (!p) {
    char why[768];
    int err = backend_alloc(a, cls, &p, why, sizeof why);
    uint64_t returned = 0; /* cached bytes handed back to the driver before the retry */
    if (err && a->cached_count) {
      returned = a->stats.bytes_cached;
      em_log(EM_LOG_MEMORY, "allocation of %zu bytes failed (%d): returning %llu cached bytes and retrying", cls,
             err, (unsigned long long)returned);
      release_cached(a);
      err = backend_alloc(a, cls, &p, why, sizeof why);
    }
    if (err) {
      uint64_t in_use = a->stats.bytes_in_use, cached = a->stats.bytes_cached;
      pthread_mutex_unlock(&a->lock);
      char what[800];
      if (why[0]) snprintf(what, sizeof what, "%s", why);
      else snprintf(what, sizeof what, "error %d", err);
      em_log(EM_LOG_MEMORY, "cannot allocate %zu bytes (%s): %llu bytes in use, %llu cached, %llu returned before a retry",
             bytes, what, (unsigned long long)in_use, (unsigned long long)cached, (unsigned long long)returned);
      return em_fail(EM_ERR_OUT_OF_MEMORY,
                     "cannot allocate %zu bytes (%s); %llu bytes are in use on this device and %llu cached (%s)", bytes,
                     what, (unsigned long long)in_use, (unsigned long long)cached,
                     returned ? "the cache was returned to the driver and the allocation retried once"
                              : "there was no cache to return");
    }
    a->stats.device_allocs++;
  }
  if (live_insert(a, p, cls)) {
    a->backend.release(a->backend.ctx, p);
    pthread_mutex_unlock(&a->lock);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory to track an allocation");
  }
  a->stats.bytes_in_use += cls;
  if (a->stats.bytes_in_use > a->stats.peak_bytes_in_use) a->stats.peak_bytes_in_use = a->stats.bytes_in_use;
  if (a->stats.bytes_in_use > a->window_peak) a->window_peak = a->stats.bytes_in_use;
  pthread_mutex_unlock(&a->lock);
  *ptr = p;
  return EM_OK;
}

em_status em_allocator_free(em_allocator *a, void *ptr) {
  if (!ptr) return EM_OK;
  pthread_mutex_lock(&a->lock);
  size_t cls = live_remove(a, ptr);
  if (!cls) {
    pthread_mutex_unlock(&a->lock);
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_free: %p was not allocated by em_malloc on this device (or was freed twice)", ptr);
  }
  a->stats.bytes_in_use -= cls;
  int cached = 0;
  if (a->backend.caching) {
    if (a->cached_count == a->cached_cap) {
      size_t cap = a->cached_cap ? a->cached_cap * 2 : 64;
      em_alloc_block *t = realloc(a->cached, cap * sizeof *t);
      if (t) {
        a->cached = t;
        a->cached_cap = cap;
      }
    }
    int room = !a->backend.cache_limit || a->stats.bytes_cached + cls <= a->backend.cache_limit;
    if (room && a->cached_count < a->cached_cap) {
      a->cached[a->cached_count].ptr = ptr;
      a->cached[a->cached_count].size = cls;
      a->cached[a->cached_count].stream = stream_of(a);
      a->cached_count++;
      a->stats.bytes_cached += cls;
      cached = 1;
    }
  }
  if (!cached) a->backend.release(a->backend.ctx, ptr);
  pthread_mutex_unlock(&a->lock);
  return EM_OK;
}
