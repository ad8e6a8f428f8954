/* Devices where they enter the API (include/ember/device.h): em_device_check
 * refuses a device that does not exist, naming the ones that do, and
 * em_device_best picks the GPU an application should use when it has no
 * preference. */
#include <stdio.h>
#include <string.h>

#include "runtime.h"

#define API __attribute__((visibility("default")))

/* "cpu, cuda:0 (NVIDIA H100, CC 9.0), cuda:1 (...)" into buf. */
static const char *device_list(const em_runtime *rt, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "cpu");
  for (int i = 0; i < rt->n_gpus && n < cap; i++) {
    const em_device_info *d = &rt->gpus[i].info;
    n += (size_t)snprintf(buf + n, cap - n, ", cuda:%d (%s, CC %d.%d)", i, d->name, d->cc_major, d->cc_minor);
  }
  return buf;
}

API em_status em_device_check(em_device dev) {
  /* The CPU needs no runtime: the common case costs two compares. */
  if (dev.kind == EM_DEVICE_CPU && dev.ordinal == 0) return EM_OK;
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  char list[1024];
  if (dev.kind == EM_DEVICE_CPU)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "device cpu:%d does not exist: the CPU is ordinal 0 (devices: %s)",
                   dev.ordinal, device_list(rt, list, sizeof list));
  if (dev.kind != EM_DEVICE_CUDA)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "unknown device kind %d (EM_DEVICE_CPU or EM_DEVICE_CUDA); the devices that exist: %s",
                   (int)dev.kind, device_list(rt, list, sizeof list));
  if (rt->driver.state != EM_DRIVER_OK)
    return em_fail(EM_ERR_NOT_FOUND, "cuda:%d was asked for, but CUDA is not usable on this machine: %s; only the CPU "
                   "exists here", dev.ordinal, rt->driver.message);
  if (dev.ordinal < 0 || dev.ordinal >= rt->n_gpus)
    return em_fail(EM_ERR_NOT_FOUND, "no CUDA device cuda:%d: %d visible (devices: %s)", dev.ordinal, rt->n_gpus,
                   device_list(rt, list, sizeof list));
  return EM_OK;
}

/* 1 when a is a better choice than b: higher compute capability, then more
 * multiprocessors, then more memory (the lower ordinal wins a full tie). */
static int better(const em_gpu *a, const em_gpu *b) {
  if (a->cc != b->cc) return a->cc > b->cc;
  if (a->info.sm_count != b->info.sm_count) return a->info.sm_count > b->info.sm_count;
  return a->info.total_memory > b->info.total_memory;
}

API em_device em_device_best(void) {
  em_runtime *rt = em_rt();
  if (!rt || rt->driver.state != EM_DRIVER_OK || rt->n_gpus == 0) {
    em_log(EM_LOG_DISPATCH, "em_device_best: the CPU, because no GPU is usable: %s",
           rt ? rt->driver.message : "the runtime did not initialise");
    return em_cpu();
  }
  int best = 0;
  for (int i = 1; i < rt->n_gpus; i++)
    if (better(&rt->gpus[i], &rt->gpus[best])) best = i;
  const em_device_info *d = &rt->gpus[best].info;
  em_log(EM_LOG_DISPATCH, "em_device_best: cuda:%d (%s, CC %d.%d, %d SMs), the highest compute capability of %d GPU%s",
         best, d->name, d->cc_major, d->cc_minor, d->sm_count, rt->n_gpus, rt->n_gpus == 1 ? "" : "s");
  return em_cuda(best);
}
