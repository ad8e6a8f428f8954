/* Module loading along a plan (load.h). */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

em_jit_cache *em_rt_cache(em_runtime *rt) {
  if (!rt->cache_opened) {
    rt->cache_opened = 1;
    em_status s = em_jit_cache_open(NULL, 0, &rt->cache, rt->cache_why, sizeof rt->cache_why);
    if (s) snprintf(rt->cache_why, sizeof rt->cache_why, "%s", em_last_error());
    if (!rt->cache) em_log(EM_LOG_CACHE, "JIT cache not used: %s", rt->cache_why);
    else em_log(EM_LOG_CACHE, "JIT cache at %s", em_jit_cache_dir(rt->cache));
  }
  return rt->cache;
}

/* Runs PTX through the driver's JIT linker and hands back the cubin. */
static em_status jit_ptx(em_runtime *rt, em_gpu *g, const char *ptx, size_t size, const char *what, void **out,
                         size_t *out_size) {
  char errlog[4096] = "";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {errlog, (void *)(uintptr_t)sizeof errlog};
  CUlinkState st = NULL;
  CUresult r = rt->cu.cuLinkCreate(2, opts, vals, &st);
  if (r) return em_cuda_fail(r, "cuLinkCreate", "JIT of %s", what);
  r = rt->cu.cuLinkAddData(st, CU_JIT_INPUT_PTX, (void *)ptx, size, what, 0, NULL, NULL);
  const char *call = "cuLinkAddData"; /* the message names the call that failed */
  void *cubin = NULL;
  size_t n = 0;
  if (!r) {
    call = "cuLinkComplete";
    r = rt->cu.cuLinkComplete(st, &cubin, &n);
  }
  if (r) {
    em_status s = em_cuda_fail(r, call, "JIT of %s for sm_%d%s%s", what, g->cc, errlog[0] ? "; JIT log: " : "",
                               errlog);
    rt->cu.cuLinkDestroy(st);
    return s;
  }
  *out = malloc(n);
  if (*out) memcpy(*out, cubin, n);
  *out_size = n;
  rt->cu.cuLinkDestroy(st);
  return *out ? EM_OK : em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a %zu-byte cubin", n);
}

/* A cubin for PTX: from the cache, or JIT-compiled and then cached. The PTX
 * is `ptx`, or when that is NULL the image `img`, decompressed only when the
 * cache does not have its cubin (the key is the image's hash). */
static em_status cubin_from_ptx(em_runtime *rt, em_gpu *g, const char *ptx, size_t size, const em_image_info *img,
                                uint64_t hash, int nvrtc_version, const char *what, void **out, size_t *out_size,
                                int *hit) {
  em_jit_key key = {.kind = "ptx-jit", .input_hash = hash, .options = "", .sm = g->cc,
                    .driver_version = rt->driver.driver_version, .tool_version = nvrtc_version};
  em_jit_cache *c = em_rt_cache(rt);
  if (c && em_jit_cache_get(c, &key, out, out_size) == EM_OK) {
    *hit = 1;
    return EM_OK;
  }
  void *owned = NULL;
  if (!ptx) {
    em_status s = em_image_read(img, &owned);
    if (s) return s;
    ptx = owned;
    size = strlen(ptx) + 1;
  }
  em_status s = jit_ptx(rt, g, ptx, size, what, out, out_size);
  free(owned);
  if (!s && c && em_jit_cache_put(c, &key, *out, *out_size))
    em_log(EM_LOG_CACHE, "could not store %s: %s", what, em_last_error());
  return s;
}

/* The images NVRTC needs for a module: its source and every embedded header
 * (room for one per image of the table, so none is ever left out). */
static em_status gather_source(em_runtime *rt, const char *module, const em_image_info **src,
                               const em_image_info **hdrs, int *n_hdrs) {
  *src = NULL;
  *n_hdrs = 0;
  for (size_t i = 0; i < rt->images.count; i++) {
    const em_image_info *img = &rt->images.images[i];
    if (img->kind == EM_IMAGE_SOURCE && !strcmp(img->module, module)) *src = img;
    if (img->kind == EM_IMAGE_HEADER) hdrs[(*n_hdrs)++] = img;
  }
  return *src ? EM_OK : em_fail(EM_ERR_NOT_FOUND, "no source of module '%s' is embedded", module);
}

/* The text of the source and headers, decompressed for NVRTC; *texts holds
 * n_hdrs + 1 malloc'd strings (the source last) for free_texts. */
static em_status read_texts(const em_image_info *src, const em_image_info **hdrs, int n_hdrs, char **texts) {
  memset(texts, 0, (size_t)(n_hdrs + 1) * sizeof *texts);
  for (int i = 0; i <= n_hdrs; i++) {
    em_status s = em_image_read(i < n_hdrs ? hdrs[i] : src, (void **)&texts[i]);
    if (s) return s;
  }
  return EM_OK;
}

static void free_texts(char **texts, int n) {
  for (int i = 0; texts && i < n; i++) free(texts[i]);
}

/* Step 4 for a module whose source and headers are gathered (via_nvrtc): from the JIT cache, or
 * compiled (and, for an NVRTC that only gives PTX, through the driver's JIT). */
static em_status nvrtc_compile_module(em_runtime *rt, em_gpu *g, const em_nvrtc_lib *lib, const em_image_info *src,
                                      const em_image_info **hdrs, int n_hdrs, int version, const char *module,
                                      void **out, size_t *out_size, int *hit) {
  em_status s;

  /* The key covers the source and every header it may include: their hashes,
   * so a cache hit decompresses nothing. */
  uint64_t hash = src->hash;
  for (int i = 0; i < n_hdrs; i++) hash ^= XXH3_64bits_withSeed(&hdrs[i]->hash, sizeof hdrs[i]->hash, (uint64_t)i + 1);
  em_jit_key key = {.kind = "nvrtc", .input_hash = hash, .options = "--fmad=false", .sm = g->cc,
                    .driver_version = rt->driver.driver_version, .tool_version = version};
  em_jit_cache *c = em_rt_cache(rt);
  if (lib->has_cubin && c && em_jit_cache_get(c, &key, out, out_size) == EM_OK) {
    *hit = 1;
    return EM_OK;
  }
  char name[160];
  snprintf(name, sizeof name, "%s.cu", module);
  char **texts = calloc((size_t)n_hdrs + 1, sizeof *texts);
  const char **names = calloc((size_t)n_hdrs + 1, sizeof *names);
  s = texts && names ? read_texts(src, hdrs, n_hdrs, texts)
                     : em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for the NVRTC headers of module '%s'", module);
  void *code = NULL;
  size_t n = 0;
  if (!s) {
    for (int i = 0; i < n_hdrs; i++) names[i] = hdrs[i]->module;
    s = em_nvrtc_compile(lib, name, texts[n_hdrs], n_hdrs, (const char **)texts, names, g->cc, 1, &code, &n);
  }
  if (texts) free_texts(texts, n_hdrs + 1);
  free(texts);
  free(names);
  if (s) return s;
  if (lib->has_cubin) {
    *out = code;
    *out_size = n;
    if (c && em_jit_cache_put(c, &key, code, n)) em_log(EM_LOG_CACHE, "could not store NVRTC output: %s", em_last_error());
    return EM_OK;
  }
  /* An NVRTC older than 11.1 gives PTX: the driver JIT turns it into a cubin. */
  s = cubin_from_ptx(rt, g, code, strlen(code) + 1, NULL, XXH3_64bits(code, n), version, name, out, out_size, hit);
  free(code);
  return s;
}

static em_status via_nvrtc(em_runtime *rt, em_gpu *g, const em_module_state *ms, int version, void **out,
                           size_t *out_size, int *hit) {
  const em_nvrtc_lib *lib = NULL;
  for (size_t i = 0; i < rt->nvrtc.n; i++)
    if (rt->nvrtc.libs[i].version == version) lib = &rt->nvrtc.libs[i];
  if (!lib) return em_fail(EM_ERR_INTERNAL, "NVRTC %d planned but not loaded", version);
  const em_image_info *src;
  const em_image_info **hdrs = malloc((rt->images.count + 1) * sizeof *hdrs);
  int n_hdrs;
  em_status s = hdrs ? gather_source(rt, ms->name, &src, hdrs, &n_hdrs)
                     : em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for the NVRTC headers of module '%s'", ms->name);
  if (!s) s = nvrtc_compile_module(rt, g, lib, src, hdrs, n_hdrs, version, ms->name, out, out_size, hit);
  free(hdrs);
  return s;
}

static em_status load_bytes(em_runtime *rt, em_gpu *g, const void *image, const char *what, CUmodule *mod) {
  CUresult r = rt->cu.cuModuleLoadData(mod, image);
  return r ? em_cuda_fail(r, "cuModuleLoadData", "%s on CUDA device %d (CC %d.%d)", what, g->ordinal, g->cc / 10, g->cc % 10)
           : EM_OK;
}

/* One candidate. Fills ms->module on success. */
static em_status try_candidate(em_runtime *rt, em_gpu *g, em_module_state *ms, const em_plan_candidate *c, int *hit) {
  const em_image_info *img = c->image_index >= 0 ? &rt->images.images[c->image_index] : NULL;
  char what[160];
  void *cubin = NULL;
  size_t n = 0;
  em_status s;
  switch (c->path) {
  case EM_PATH_CUBIN:
    /* The table holds it compressed: decompressed for the driver, which copies it. */
    snprintf(what, sizeof what, "%s sm_%d%c cubin", ms->name, img->arch, img->variant ? img->variant : ' ');
    s = em_image_read(img, &cubin);
    break;
  case EM_PATH_PTX:
  case EM_PATH_PTX_LEGACY:
    snprintf(what, sizeof what, "%s compute_%d PTX", ms->name, img->arch);
    s = cubin_from_ptx(rt, g, NULL, 0, img, img->hash, 0, what, &cubin, &n, hit);
    break;
  case EM_PATH_NVRTC:
    snprintf(what, sizeof what, "%s compiled by NVRTC %d.%d", ms->name, c->nvrtc_version / 1000,
             (c->nvrtc_version % 1000) / 10);
    s = via_nvrtc(rt, g, ms, c->nvrtc_version, &cubin, &n, hit);
    break;
  default:
    return em_fail(EM_ERR_INTERNAL, "path %s cannot be loaded", em_path_name(c->path));
  }
  if (!s) s = load_bytes(rt, g, cubin, what, &ms->module);
  free(cubin);
  return s;
}

static void append(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
  size_t len = strlen(buf);
  if (len < cap) snprintf(buf + len, cap - len, fmt, a, b);
}

em_status em_load_module(em_runtime *rt, em_gpu *g, em_module_state *ms, const em_plan *plan) {
  em_load_record *rec = &ms->record;
  double t0 = now_ms();
  memset(rec, 0, sizeof *rec);
  if (plan->strict_error)
    return em_fail(EM_ERR_STRICT, "EMBER_STRICT=1: module '%s' on CUDA device %d (%s) would fall back to the CPU: %s",
                   ms->name, g->ordinal, g->info.name, plan->reason);
  if (plan->chosen < 0) return em_fail(EM_ERR_NO_KERNEL_IMAGE, "module '%s' on CUDA device %d: %s", ms->name, g->ordinal, plan->reason);

  em_status s = em_gpu_enter(g);
  if (s) return s;
  for (int i = plan->chosen; i < plan->n_candidates; i++) {
    const em_plan_candidate *c = &plan->candidates[i];
    if (!c->viable) continue;
    if (c->path == EM_PATH_CPU) {
      em_gpu_leave(g);
      rec->path = EM_PATH_CPU;
      rec->load_ms = now_ms() - t0;
      return em_fail(EM_ERR_USE_CPU, "module '%s' on CUDA device %d runs on the CPU: %s%s%s", ms->name, g->ordinal,
                     plan->reason, rec->detail[0] ? "; failed: " : "", rec->detail);
    }
    int hit = 0;
    s = try_candidate(rt, g, ms, c, &hit);
    if (!s) {
      em_gpu_leave(g);
      rec->loaded = 1;
      rec->path = c->path;
      rec->image_index = c->image_index;
      rec->from_cache = hit;
      rec->load_ms = now_ms() - t0;
      em_log(EM_LOG_DISPATCH, "device %d module %s loaded via %s%s in %.2f ms", g->ordinal, ms->name,
             em_path_name(c->path), hit ? " (from the JIT cache)" : "", rec->load_ms);
      return EM_OK;
    }
    append(rec->detail, sizeof rec->detail, "%s%s", rec->detail[0] ? "; " : "", em_last_error());
    em_log(EM_LOG_DISPATCH, "device %d module %s: %s failed: %s", g->ordinal, ms->name, em_path_name(c->path), em_last_error());
    if (rt->strict) {
      em_gpu_leave(g);
      return em_fail(EM_ERR_STRICT, "EMBER_STRICT=1: loading module '%s' via %s failed and Ember would fall back: %s",
                     ms->name, em_path_name(c->path), rec->detail);
    }
  }
  em_gpu_leave(g);
  return em_fail(EM_ERR_NO_KERNEL_IMAGE, "module '%s' on CUDA device %d: every planned path failed: %s", ms->name,
                 g->ordinal, rec->detail);
}
