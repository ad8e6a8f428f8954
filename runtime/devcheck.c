/* Device checks that report without a copy or a synchronisation
 * (devcheck.h): one status record per device in mapped, pinned host memory,
 * and a ring of the armed checks' payloads for their messages.
 *
 * The record is cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP) memory, addressed
 * on the device through cuMemHostGetDevicePointer (equal to the host address
 * under unified addressing, but asked for, so a system where it differs
 * works too). Kernels write it over the bus; the host reads it with a plain
 * load, which is not a copy and is not counted as one. A device without
 * canMapHostMemory (or a driver without the entry points) has no record:
 * its checks copy their result back and synchronise, counted as copies.
 *
 * Tags: a per-device counter from 1; the ring keeps the payloads of the
 * last DC_RING armed checks. A record whose tag has left the ring (more than
 * DC_RING checks armed between the failure and its collection, which the
 * executor's settle at every run start makes rare) is still reported, with
 * the position and value but without the op's details.
 *
 * Several threads driving one device: the record belongs to the device, so
 * a thread that synchronises may report a check another thread's run armed;
 * a check that fails while another thread clears the record after its own
 * synchronisation can be lost. Executors on one device from several threads
 * at once are not synchronised with each other anyway. */
#include "devcheck.h"

#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define DC_RING 256
#define DC_RECORD_BYTES 4096 /* one page: pinned allocations are page-granular anyway */

typedef struct dc_entry {
  int64_t tag;
  em_devcheck_report report;
  alignas(max_align_t) unsigned char payload[EM_DEVCHECK_PAYLOAD];
} dc_entry;

enum { DC_UNKNOWN = 0, DC_MAPPED = 1, DC_NONE = -1 };

typedef struct dc_device {
  int state;
  volatile int64_t *host; /* the record, as the host sees it */
  CUdeviceptr dptr;       /* ... and the device */
  int64_t next_tag;
  dc_entry *ring;
} dc_device;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dc_device *g_devs;
static int g_n_devs;

/* The device's slot (with the lock held), growing the table; NULL without memory. */
static dc_device *slot(int ordinal) {
  if (ordinal < 0) return NULL;
  if (ordinal >= g_n_devs) {
    int n = ordinal + 1;
    dc_device *grown = realloc(g_devs, sizeof *grown * (size_t)n);
    if (!grown) return NULL;
    memset(grown + g_n_devs, 0, sizeof *grown * (size_t)(n - g_n_devs));
    g_devs = grown;
    g_n_devs = n;
  }
  return &g_devs[ordinal];
}

/* A device's record, made at its first check (without the lock: making the
 * context current may take the runtime's). Returns the state: DC_MAPPED
 * with *host and *dptr set, or DC_NONE, the reason logged. */
static int map_record(em_gpu *g, volatile int64_t **host_out, CUdeviceptr *dptr) {
  em_cuda_api *cu = &em_rt()->cu;
  const char *why = NULL;
  int can_map = 0;
  void *host = NULL;
  if (!cu->cuMemHostAlloc || !cu->cuMemHostGetDevicePointer || !cu->cuMemFreeHost)
    why = "the driver lacks cuMemHostAlloc / cuMemHostGetDevicePointer_v2 / cuMemFreeHost";
  else if (cu->cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, g->dev) || !can_map)
    why = "the device cannot map host memory (canMapHostMemory is 0)";
  else if (em_gpu_enter(g))
    why = "its context could not be made current";
  if (!why) {
    CUresult r = cu->cuMemHostAlloc(&host, DC_RECORD_BYTES, CU_MEMHOSTALLOC_DEVICEMAP);
    if (!r) r = cu->cuMemHostGetDevicePointer(dptr, host, 0);
    if (r && host) cu->cuMemFreeHost(host);
    em_gpu_leave(g);
    if (!r) {
      memset(host, 0, DC_RECORD_BYTES);
      *host_out = host;
      return DC_MAPPED;
    }
    why = "cuMemHostAlloc / cuMemHostGetDevicePointer failed";
  }
  em_log(EM_LOG_MEMORY, "cuda:%d: input checks on the device copy their result back (a copy and a synchronisation "
         "each): %s", g->ordinal, why);
  return DC_NONE;
}

/* With the lock held: installs a record map_record made, unless another
 * thread was first (then it is freed). */
static void install(em_gpu *g, dc_device *d, int state, volatile int64_t *host, CUdeviceptr dptr) {
  if (d->state != DC_UNKNOWN || (state == DC_MAPPED && !(d->ring = calloc(DC_RING, sizeof *d->ring)))) {
    if (state == DC_MAPPED && !em_gpu_enter(g)) {
      em_rt()->cu.cuMemFreeHost((void *)host);
      em_gpu_leave(g);
    }
    if (d->state == DC_UNKNOWN) d->state = DC_NONE; /* no memory for the ring */
    return;
  }
  d->state = state;
  d->host = host;
  d->dptr = dptr;
  d->next_tag = 1;
}

em_status em_devcheck_arm(em_device dev, em_devcheck_report report, const void *payload, size_t size, void **record,
                          int64_t *tag) {
  *record = NULL;
  *tag = 0;
  if (size > EM_DEVCHECK_PAYLOAD)
    return em_fail(EM_ERR_INTERNAL, "a device check's payload of %zu bytes exceeds %d", size, EM_DEVCHECK_PAYLOAD);
  em_gpu *g;
  em_status s = em_rt_gpu(dev, &g);
  if (s) return s;
  pthread_mutex_lock(&g_lock);
  dc_device *d = slot(dev.ordinal);
  if (d && d->state == DC_UNKNOWN) {
    pthread_mutex_unlock(&g_lock);
    volatile int64_t *host = NULL;
    CUdeviceptr dptr = 0;
    int state = map_record(g, &host, &dptr);
    pthread_mutex_lock(&g_lock);
    d = slot(dev.ordinal); /* the table may have moved */
    if (d) install(g, d, state, host, dptr);
  }
  if (d && d->state == DC_MAPPED) {
    int64_t t = d->next_tag++;
    dc_entry *e = &d->ring[t % DC_RING];
    e->tag = t;
    e->report = report;
    memcpy(e->payload, payload, size);
    *record = (void *)(uintptr_t)d->dptr;
    *tag = t;
  }
  pthread_mutex_unlock(&g_lock);
  return EM_OK;
}

/* With the lock held: the device's mapped slot, or NULL. */
static dc_device *mapped(em_device dev) {
  if (dev.kind != EM_DEVICE_CUDA || dev.ordinal < 0 || dev.ordinal >= g_n_devs) return NULL;
  dc_device *d = &g_devs[dev.ordinal];
  return d->state == DC_MAPPED ? d : NULL;
}

static double double_of(int64_t bits) {
  double v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* em_devcheck_hold_begin's depth on this thread. */
static _Thread_local int t_hold;

void em_devcheck_hold_begin(void) { t_hold++; }
void em_devcheck_hold_end(void) { t_hold--; }

em_status em_devcheck_collect(em_device dev) {
  if (t_hold) return EM_OK; /* held: the record stays for the next collection */
  pthread_mutex_lock(&g_lock);
  dc_device *d = mapped(dev);
  int64_t tag = d ? __atomic_load_n(&d->host[0], __ATOMIC_ACQUIRE) : 0;
  if (!tag) {
    pthread_mutex_unlock(&g_lock);
    return EM_OK;
  }
  em_devcheck_found found = {d->host[1], d->host[2], double_of(d->host[3])};
  __atomic_store_n(&d->host[0], 0, __ATOMIC_RELEASE); /* reported once; the next failing check writes again */
  dc_entry e;
  const dc_entry *in_ring = &d->ring[tag % DC_RING];
  int known = in_ring->tag == tag;
  if (known) memcpy(&e, in_ring, sizeof e);
  pthread_mutex_unlock(&g_lock);
  em_status s;
  if (known) s = e.report(e.payload, &found);
  else
    s = em_fail(EM_ERR_INVALID_ARGUMENT,
                "a check found the invalid value %lld (%g) at flat position %lld; which op ran it is no longer known "
                "(more than %d checks ran before the device was next synchronised: read a value now and then)",
                (long long)found.ivalue, found.fvalue, (long long)found.position, DC_RING);
  return em_fail_context(s, "cuda:%d, an input check that ran on the device", dev.ordinal);
}

em_status em_devcheck_settle(em_device dev) {
  pthread_mutex_lock(&g_lock);
  dc_device *d = mapped(dev);
  int pending = d && __atomic_load_n(&d->host[0], __ATOMIC_RELAXED) != 0;
  pthread_mutex_unlock(&g_lock);
  /* Written (perhaps only in part so far): wait for the device, then read it whole. */
  return pending ? em_stream_wait(dev, NULL) : EM_OK; /* the legacy stream: see em_stream_wait */
}

void em_devcheck_shutdown(struct em_runtime *rt) {
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_n_devs; i++) {
    dc_device *d = &g_devs[i];
    if (d->state == DC_MAPPED && i < rt->n_gpus && em_gpu_enter(&rt->gpus[i]) == EM_OK) {
      rt->cu.cuMemFreeHost((void *)d->host);
      em_gpu_leave(&rt->gpus[i]);
    }
    free(d->ring);
  }
  free(g_devs);
  g_devs = NULL;
  g_n_devs = 0;
  pthread_mutex_unlock(&g_lock);
}
