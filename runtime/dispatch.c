/* Plans and kernels: the dispatch layer's public face (include/ember/dispatch.h
 * and the kernel half of include/ember/runtime.h). Plans are computed once
 * per device and module; modules are loaded on the first use of one of their
 * kernels, trying the plan's viable candidates in order (load.c). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_cache.h"
#include "load.h"
#include "policy.h"
#include "runtime.h"

#define API __attribute__((visibility("default")))

API em_status em_image_count(size_t *count) {
  if (!count) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_image_count: count is NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  *count = rt->images.count;
  return EM_OK;
}

API em_status em_image_get(size_t index, em_image_info *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_image_get: out is NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  if (index >= rt->images.count)
    return em_fail(EM_ERR_NOT_FOUND, "image %zu does not exist (the table has %zu)", index, rt->images.count);
  *out = rt->images.images[index];
  return EM_OK;
}

API em_status em_module_count(size_t *count) {
  if (!count) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_module_count: count is NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  *count = rt->n_modules;
  return EM_OK;
}

API em_status em_module_name(size_t index, const char **name) {
  if (!name) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_module_name: name is NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  if (index >= rt->n_modules) return em_fail(EM_ERR_NOT_FOUND, "module %zu does not exist (%zu modules)", index, rt->n_modules);
  *name = rt->modules[index];
  return EM_OK;
}

static em_module_state *find_module(em_gpu *g, const char *module) {
  em_runtime *rt = em_rt();
  for (size_t i = 0; i < rt->n_modules; i++)
    if (!strcmp(g->modules[i].name, module)) return &g->modules[i];
  return NULL;
}

/* NVRTC is looked for once, the first time a plan needs to know. */
static void ensure_nvrtc(em_runtime *rt) {
  if (rt->nvrtc_loaded) return;
  em_nvrtc_load_all(&rt->nvrtc);
  rt->nvrtc_loaded = 1;
  if (!rt->nvrtc.n) em_log(EM_LOG_DISPATCH, "NVRTC: %s", rt->nvrtc.tried);
}

static void log_plan(const em_gpu *g, const char *module, const em_plan *p) {
  if (!em_log_enabled(EM_LOG_DISPATCH)) return;
  em_log(EM_LOG_DISPATCH, "device %d (%s, CC %d.%d) module %s -> %s: %s", g->ordinal, g->info.name, g->cc / 10,
         g->cc % 10, module, em_path_name(p->path), p->reason);
  for (int i = 0; i < p->n_candidates; i++)
    em_log(EM_LOG_DISPATCH, "  %s %-10s %s", p->candidates[i].viable ? (i == p->chosen ? "*" : "+") : "-",
           em_path_name(p->candidates[i].path), p->candidates[i].reason);
  if (p->n_omitted)
    em_log(EM_LOG_DISPATCH, "  (%d more rejected candidates not listed: the plan holds %d)", p->n_omitted,
           EM_PLAN_MAX_CANDIDATES);
}

/* Computes (once) the plan of a module on a GPU. Caller holds the rt lock. */
static const em_plan *plan_for(em_runtime *rt, em_gpu *g, em_module_state *ms) {
  if (ms->planned) return &ms->plan;
  ensure_nvrtc(rt);
  em_policy_nvrtc libs[EM_NVRTC_MAX];
  for (size_t i = 0; i < rt->nvrtc.n; i++) {
    const em_nvrtc_lib *l = &rt->nvrtc.libs[i];
    libs[i] = (em_policy_nvrtc){l->version, l->has_archs ? l->archs : NULL, l->n_archs, l->has_cubin};
  }
  em_policy_input in = {
    .cc = g->cc, .driver_version = rt->driver.driver_version, .module = ms->name,
    .images = rt->images.images, .n_images = rt->images.count,
    .nvrtc = libs, .n_nvrtc = rt->nvrtc.n,
    .force = rt->force, .strict = rt->strict, .jit_disabled = rt->jit_disabled,
  };
  em_policy_plan(&in, &ms->plan);
  if (rt->force_invalid[0]) {
    ms->plan.path = EM_PATH_NONE;
    ms->plan.chosen = -1;
    ms->plan.step = 0;
    snprintf(ms->plan.reason, sizeof ms->plan.reason,
             "EMBER_FORCE=%s is not a path: use cubin, ptx, ptx-legacy, nvrtc or cpu (or unset it)", rt->force_invalid);
  }
  ms->planned = 1;
  log_plan(g, ms->name, &ms->plan);
  return &ms->plan;
}

/* The plan of a module on the CPU: trivially the CPU twin. */
static void cpu_plan(const char *module, em_plan *out) {
  memset(out, 0, sizeof *out);
  out->path = EM_PATH_CPU;
  out->chosen = 0;
  out->step = 5;
  out->n_candidates = 1;
  out->candidates[0] = (em_plan_candidate){.path = EM_PATH_CPU, .image_index = -1, .viable = 1};
  snprintf(out->candidates[0].reason, sizeof out->candidates[0].reason, "the CPU device runs the CPU twin");
  snprintf(out->reason, sizeof out->reason, "module '%s' runs on the CPU device itself", module);
}

API em_status em_dispatch_plan(em_device dev, const char *module, em_plan *out) {
  if (!module || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dispatch_plan: module and out must not be NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  if (dev.kind == EM_DEVICE_CPU) {
    cpu_plan(module, out);
    return EM_OK;
  }
  em_gpu *g;
  em_status s = em_rt_gpu(dev, &g);
  if (s) return s;
  em_rt_lock();
  em_module_state *ms = find_module(g, module);
  if (!ms) {
    em_rt_unlock();
    return em_fail(EM_ERR_NOT_FOUND, "no kernel module '%s' in this library", module);
  }
  *out = *plan_for(rt, g, ms);
  em_rt_unlock();
  return EM_OK;
}

API em_status em_dispatch_load_record(em_device dev, const char *module, em_load_record *out) {
  if (!module || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dispatch_load_record: NULL argument");
  em_gpu *g;
  em_status s = em_rt_gpu(dev, &g);
  if (s) return s;
  em_rt_lock();
  em_module_state *ms = find_module(g, module);
  if (ms) *out = ms->record;
  em_rt_unlock();
  return ms ? EM_OK : em_fail(EM_ERR_NOT_FOUND, "no kernel module '%s' in this library", module);
}

/* ---------------------------------------------------------- kernel index --- */

/* Which module defines a kernel: a hash table from every name in the image
 * table's kernel lists to its module's index (rt->modules), built once, on
 * the first lookup. Scanning the lists instead cost every launch a pass over
 * all ~550 images of a full build. A name in two modules' lists keeps the
 * first module in image order, as the scan did. */
typedef struct kernel_name {
  const char *name;       /* into the image table's comma-separated list: not terminated */
  uint32_t len;
  uint32_t module;
} kernel_name;

struct em_kernel_index {
  kernel_name *names;
  size_t n, cap;
  int32_t *table;         /* index into names, -1 empty; open addressing, linear probing */
  size_t mask;            /* table size - 1 (a power of two, at least twice the names) */
};

/* The handles' generation: em_kernel_index_free (em_shutdown) starts a new
 * one, so kernel caches drop handles that em_shutdown freed. */
static _Atomic unsigned kernel_generation = 1;

static uint64_t name_hash(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

static int32_t *index_slot(const struct em_kernel_index *x, const char *name, size_t len) {
  for (size_t i = name_hash(name, len) & x->mask;; i = (i + 1) & x->mask) {
    int32_t *t = &x->table[i];
    if (*t < 0 || (x->names[*t].len == len && !memcmp(x->names[*t].name, name, len))) return t;
  }
}

static int index_grow(struct em_kernel_index *x) {
  size_t size = x->mask ? 2 * (x->mask + 1) : 1024;
  int32_t *table = malloc(size * sizeof *table);
  if (!table) return -1;
  for (size_t i = 0; i < size; i++) table[i] = -1;
  free(x->table);
  x->table = table;
  x->mask = size - 1;
  for (size_t k = 0; k < x->n; k++) *index_slot(x, x->names[k].name, x->names[k].len) = (int32_t)k;
  return 0;
}

static int index_add(struct em_kernel_index *x, const char *name, size_t len, uint32_t module) {
  if (2 * (x->n + 1) > x->mask + 1 && index_grow(x)) return -1;
  int32_t *t = index_slot(x, name, len);
  if (*t >= 0) return 0; /* already there: the first module keeps it */
  if (x->n == x->cap) {
    size_t cap = x->cap ? 2 * x->cap : 512;
    kernel_name *grown = realloc(x->names, cap * sizeof *grown);
    if (!grown) return -1;
    x->names = grown;
    x->cap = cap;
  }
  x->names[x->n] = (kernel_name){name, (uint32_t)len, module};
  *t = (int32_t)x->n++;
  return 0;
}

void em_kernel_index_free(em_runtime *rt) {
  struct em_kernel_index *x = rt->kernel_index;
  if (x) {
    free(x->names);
    free(x->table);
    free(x);
  }
  rt->kernel_index = NULL;
  atomic_fetch_add(&kernel_generation, 1);
}

/* Builds the index (once). Caller holds the rt lock. */
static em_status kernel_index_ready(em_runtime *rt) {
  if (rt->kernel_index) return EM_OK;
  struct em_kernel_index *x = calloc(1, sizeof *x);
  int failed = !x || index_grow(x);
  for (size_t i = 0; i < rt->images.count && !failed; i++) {
    const em_image_info *img = &rt->images.images[i];
    size_t m = 0;
    while (m < rt->n_modules && strcmp(rt->modules[m], img->module)) m++;
    if (m == rt->n_modules) continue; /* not a kernel module (a header) */
    for (const char *p = img->kernels; p && *p && !failed;) {
      const char *end = strchr(p, ',');
      size_t len = end ? (size_t)(end - p) : strlen(p);
      if (len) failed = index_add(x, p, len, (uint32_t)m);
      p = end ? end + 1 : p + len;
    }
  }
  if (failed) {
    if (x) {
      free(x->names);
      free(x->table);
      free(x);
    }
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for the index of the library's kernel names");
  }
  rt->kernel_index = x;
  return EM_OK;
}

/* The module index of a kernel, or -1. Caller holds the rt lock. */
static long module_of_kernel(em_runtime *rt, const char *name) {
  const struct em_kernel_index *x = rt->kernel_index;
  int32_t t = *index_slot(x, name, strlen(name));
  return t < 0 ? -1 : (long)x->names[t].module;
}

/* Loads the module on first use; later calls repeat the first outcome. */
static em_status ensure_loaded(em_runtime *rt, em_gpu *g, em_module_state *ms) {
  if (ms->load_attempted) {
    if (ms->load_status) em_fail(ms->load_status, "%s", ms->load_error);
    return ms->load_status;
  }
  const em_plan *plan = plan_for(rt, g, ms);
  em_status s = em_load_module(rt, g, ms, plan);
  ms->load_attempted = 1;
  ms->load_status = s;
  if (s) snprintf(ms->load_error, sizeof ms->load_error, "%s", em_last_error());
  return s;
}

API em_status em_kernel_get(em_device dev, const char *name, em_kernel **out) {
  if (!name || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_kernel_get: name and out must not be NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  em_rt_lock();
  em_status s = kernel_index_ready(rt);
  long m = s ? -1 : module_of_kernel(rt, name);
  em_rt_unlock();
  if (s) return s;
  if (m < 0) return em_fail(EM_ERR_NOT_FOUND, "no kernel named '%s' in this library", name);
  const char *module = rt->modules[m];
  if (dev.kind == EM_DEVICE_CPU) return em_fail(EM_ERR_USE_CPU, "kernel '%s': the CPU device runs the CPU twin", name);
  em_gpu *g;
  s = em_rt_gpu(dev, &g);
  if (s) return s;

  em_rt_lock();
  em_module_state *ms = &g->modules[m];
  s = ensure_loaded(rt, g, ms);
  if (s) {
    em_rt_unlock();
    return s;
  }
  for (int i = 0; i < ms->n_kernels; i++)
    if (!strcmp(ms->kernels[i]->name, name)) {
      *out = ms->kernels[i];
      em_rt_unlock();
      return EM_OK;
    }
  if (ms->n_kernels == ms->cap_kernels) {
    int cap = ms->cap_kernels ? 2 * ms->cap_kernels : 16;
    em_kernel **grown = realloc(ms->kernels, (size_t)cap * sizeof *grown);
    if (!grown) {
      em_rt_unlock();
      return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to look up kernel '%s'", name);
    }
    ms->kernels = grown;
    ms->cap_kernels = cap;
  }
  em_kernel *k = calloc(1, sizeof *k);
  if (k && strlen(name) >= sizeof k->name) {
    free(k);
    em_rt_unlock();
    return em_fail(EM_ERR_INVALID_ARGUMENT, "kernel name '%.40s...' is %zu characters; Ember's kernel names are at most %zu",
                   name, strlen(name), sizeof k->name - 1);
  }
  if (!k) {
    em_rt_unlock();
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to look up kernel '%s'", name);
  }
  k->gpu = g;
  k->cu = &rt->cu;
  snprintf(k->name, sizeof k->name, "%s", name);
  s = em_gpu_enter(g);
  if (!s) {
    CUresult r = rt->cu.cuModuleGetFunction(&k->fn, ms->module, name);
    em_gpu_leave(g);
    if (r) s = em_cuda_fail(r, "cuModuleGetFunction", "kernel '%s' of module '%s' on CUDA device %d", name, module, g->ordinal);
  }
  if (!s) {
    ms->kernels[ms->n_kernels++] = k;
    *out = k;
  } else {
    free(k);
  }
  em_rt_unlock();
  return s;
}

API em_status em_kernel_launch(em_kernel *k, em_dim3 grid, em_dim3 block, size_t shared_bytes, em_stream *stream,
                               void **args) {
  if (!k) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_kernel_launch: kernel is NULL");
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "kernel '%s': grid (%u,%u,%u) and block (%u,%u,%u) must be non-zero", k->name,
                   grid.x, grid.y, grid.z, block.x, block.y, block.z);
  /* The context is current already inside an executor's run (em_device_enter)
   * or an application's own: then no push and pop, two driver calls fewer. */
  CUcontext cur = NULL;
  int enter = !k->cu->cuCtxGetCurrent || k->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != k->gpu->ctx;
  if (enter) {
    em_status s = em_gpu_enter(k->gpu);
    if (s) return s;
  }
  CUresult r = k->cu->cuLaunchKernel(k->fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared_bytes,
                                     em_stream_handle(stream), args, NULL);
  if (enter) em_gpu_leave(k->gpu);
  if (r)
    return em_cuda_fail(r, "cuLaunchKernel", "kernel '%s' grid (%u,%u,%u) block (%u,%u,%u) on CUDA device %d", k->name,
                        grid.x, grid.y, grid.z, block.x, block.y, block.z, k->gpu->ordinal);
  return EM_OK;
}

/* ----------------------------------------------------------- kernel caches --- */

em_status em_kernel_get_cached(em_kernel_cache *c, em_device dev, const char *name, em_kernel **out) {
  if (!name || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_kernel_get: name and out must not be NULL");
  unsigned gen = atomic_load_explicit(&kernel_generation, memory_order_relaxed);
  if (c->generation != gen || c->dev.kind != dev.kind || c->dev.ordinal != dev.ordinal) {
    c->generation = gen;
    c->dev = dev;
    c->n = c->next = 0;
  }
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->slot[i]->name, name)) {
      *out = c->slot[i];
      return EM_OK;
    }
  c->lookups++;
  em_kernel *k;
  em_status s = em_kernel_get(dev, name, &k);
  if (s) return s;
  if (c->n < EM_KERNEL_CACHE_SLOTS) {
    c->slot[c->n++] = k;
  } else {
    c->slot[c->next] = k;
    c->next = (c->next + 1) % EM_KERNEL_CACHE_SLOTS;
  }
  *out = k;
  return EM_OK;
}

int em_device_enter(em_device dev) {
  em_gpu *g;
  if (dev.kind != EM_DEVICE_CUDA || em_rt_gpu(dev, &g) || em_gpu_enter(g)) {
    if (dev.kind == EM_DEVICE_CUDA) em_clear_error();
    return 0;
  }
  return 1;
}

void em_device_leave(em_device dev, int entered) {
  em_gpu *g;
  if (entered && !em_rt_gpu(dev, &g)) em_gpu_leave(g);
}
