/* Resolved kernel handles for callers that launch the same kernels again and
 * again: each step of an executor's plan (engine/exec.c) holds one, and the
 * launch glue (ops/gpu_glue.c em_ops_launch) finds its handle there with no
 * lookup by name in the runtime and no lock. Internal to libember.
 *
 * A cache is filled on the first launch of each kernel through it (the op's
 * gpu member names its kernels only when it launches them: the executor
 * cannot know them before), then serves every later launch. em_shutdown
 * ends the handles' generation; a cache filled before it looks its kernels
 * up again instead of using a freed handle. One thread at a time uses a
 * cache (an executor is not run by two threads at once). */
#ifndef EMBER_RUNTIME_KERNEL_CACHE_H
#define EMBER_RUNTIME_KERNEL_CACHE_H

#include <stdint.h>

#include "ember.h"

/* Kernels per cache: the ops launch one to five kernels per step (the fused
 * LSTM's gradient cycles through five, step after step: four slots missed
 * every time); a step that alternates between more (shapes that change per
 * run) replaces the oldest and looks it up again, which is only slower. */
#define EM_KERNEL_CACHE_SLOTS 8

typedef struct em_kernel_cache {
  unsigned generation;     /* of the handles held (em_shutdown starts a new one) */
  em_device dev;           /* the device they belong to */
  int n, next;             /* slots filled; the one to replace when all are */
  em_kernel *slot[EM_KERNEL_CACHE_SLOTS];
  uint64_t lookups;        /* lookups by name this cache made in the runtime (em_kernel_get) */
} em_kernel_cache;

/* em_kernel_get through the cache c: a kernel it holds for dev is returned
 * at once (its name compared with strcmp: callers may build names in
 * buffers they reuse); any other is looked up and kept. Failures are
 * em_kernel_get's, and are not kept (EM_ERR_USE_CPU is asked again). */
em_status em_kernel_get_cached(em_kernel_cache *c, em_device dev, const char *name, em_kernel **out);

/* Makes dev's context current on this thread until em_device_leave (nothing
 * on the CPU), so the launches in between skip their own push and pop.
 * Returns 1 when it pushed a context (pass that to em_device_leave), 0 when
 * not (the CPU, or a failure, which is cleared: each launch then enters the
 * context itself and reports the error with the op's name). */
int em_device_enter(em_device dev);
void em_device_leave(em_device dev, int entered);

#endif
