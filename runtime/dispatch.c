/* Plans and kernels: the dispatch layer's public face (include/ember/dispatch.h
 * and the kernel half of include/ember/runtime.h). Plans are computed once
 * per device and module; modules are loaded on the first use of one of their
 * kernels, trying the plan's viable candidates in order (load.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Which module defines a kernel: its name is in the module's kernels list. */
static const char *module_of_kernel(em_runtime *rt, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < rt->images.count; i++) {
    const em_image_info *img = &rt->images.images[i];
    for (const char *p = img->kernels; p && *p;) {
      const char *end = strchr(p, ',');
      size_t len = end ? (size_t)(end - p) : strlen(p);
      if (len == n && !strncmp(p, name, n)) return img->module;
      p = end ? end + 1 : p + len;
    }
  }
  return NULL;
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
  const char *module = module_of_kernel(rt, name);
  if (!module) return em_fail(EM_ERR_NOT_FOUND, "no kernel named '%s' in this library", name);
  if (dev.kind == EM_DEVICE_CPU) return em_fail(EM_ERR_USE_CPU, "kernel '%s': the CPU device runs the CPU twin", name);
  em_gpu *g;
  em_status s = em_rt_gpu(dev, &g);
  if (s) return s;

  em_rt_lock();
  em_module_state *ms = find_module(g, module);
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
  em_runtime *rt = em_rt();
  em_status s = em_gpu_enter(k->gpu);
  if (s) return s;
  CUresult r = rt->cu.cuLaunchKernel(k->fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared_bytes,
                                     em_stream_handle(stream), args, NULL);
  em_gpu_leave(k->gpu);
  if (r)
    return em_cuda_fail(r, "cuLaunchKernel", "kernel '%s' grid (%u,%u,%u) block (%u,%u,%u) on CUDA device %d", k->name,
                        grid.x, grid.y, grid.z, block.x, block.y, block.z, k->gpu->ordinal);
  return EM_OK;
}
