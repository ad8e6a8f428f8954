/* The process-wide runtime: created on first use, torn down by em_shutdown.
 * Also the device queries of include/ember/device.h. */
#include "runtime.h"
#include "cublas.h"
#include "cublaslt.h"
#include "cudnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devcheck.h"
#include "ember.h"

#define API __attribute__((visibility("default")))

extern const unsigned char em_image_blob_start[];
extern const unsigned char em_image_blob_end[];

/* Recursive: a module load (under the lock) may retain a context (which locks). */
static pthread_mutex_t rt_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static em_runtime *rt_instance;

void em_rt_lock(void) { pthread_mutex_lock(&rt_lock); }
void em_rt_unlock(void) { pthread_mutex_unlock(&rt_lock); }

/* EMBER_FORCE: one of the path names. A value that is none of them is kept
 * (rt->force_invalid) so every plan can refuse with that reason: silently
 * ignoring a typo would run something the user did not ask for. */
static em_path parse_force(const char *v, char *invalid, size_t cap) {
  static const em_path paths[] = {EM_PATH_CUBIN, EM_PATH_PTX, EM_PATH_PTX_LEGACY, EM_PATH_NVRTC, EM_PATH_CPU};
  invalid[0] = '\0';
  if (!v || !*v) return EM_PATH_NONE;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
    if (!strcmp(v, em_path_name(paths[i]))) return paths[i];
  snprintf(invalid, cap, "%s", v);
  return EM_PATH_NONE;
}

static int env_flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* Distinct module names, in table order. */
static int collect_modules(em_runtime *rt) {
  rt->modules = calloc(rt->images.count + 1, sizeof *rt->modules);
  if (!rt->modules) return -1;
  for (size_t i = 0; i < rt->images.count; i++) {
    const em_image_info *img = &rt->images.images[i];
    if (img->kind == EM_IMAGE_HEADER) continue;
    size_t j = 0;
    while (j < rt->n_modules && strcmp(rt->modules[j], img->module)) j++;
    if (j == rt->n_modules) rt->modules[rt->n_modules++] = img->module;
  }
  return 0;
}

static int cpu_alloc(void *ctx, size_t bytes, void **ptr) {
  (void)ctx;
  *ptr = aligned_alloc(64, bytes); /* em_alloc_class keeps bytes a multiple of 512 */
  return *ptr ? 0 : 1;
}
static void cpu_release(void *ctx, void *ptr) {
  (void)ctx;
  free(ptr);
}

/* The CPU's allocator belongs to the process, not to the runtime: CPU
 * tensors outlive em_shutdown (the user's data is not lost, and releasing
 * them later frees their blocks instead of leaking them). The CPU caches
 * too: glibc returns large blocks to the kernel on free (mmap), so each run
 * of a graph paid page faults and zeroing for every big buffer (a 2048^2
 * matmul through an executor: 186 vs 201 GFLOP/s). Capped at 1 GiB;
 * em_alloc_trim(em_cpu()) and em_shutdown return the cache. */
static em_allocator cpu_allocator;
static pthread_once_t cpu_allocator_once = PTHREAD_ONCE_INIT;
static void cpu_allocator_init(void) {
  em_allocator_init(&cpu_allocator, (em_alloc_backend){cpu_alloc, cpu_release, NULL, 1, (size_t)1 << 30, 0});
}
em_allocator *em_cpu_allocator(void) {
  pthread_once(&cpu_allocator_once, cpu_allocator_init);
  return &cpu_allocator;
}

static int gpu_alloc(void *ctx, size_t bytes, void **ptr) {
  em_gpu *g = ctx;
  em_runtime *rt = rt_instance;
  CUdeviceptr p = 0;
  if (em_gpu_enter(g)) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = rt->cu.cuMemAlloc(&p, bytes);
  em_gpu_leave(g);
  *ptr = (void *)(uintptr_t)p;
  /* The allocator puts this message (call, error name and number) into its own. */
  if (r) em_cuda_fail(r, "cuMemAlloc", "a block of %zu bytes", bytes);
  return r;
}
static void gpu_release(void *ctx, void *ptr) {
  em_gpu *g = ctx;
  if (em_gpu_enter(g)) return;
  rt_instance->cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
  em_gpu_leave(g);
}

static em_runtime *rt_create(void) {
  em_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) {
    em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for the Ember runtime");
    return NULL;
  }
  if (em_blob_parse(em_image_blob_start, (size_t)(em_image_blob_end - em_image_blob_start), "libember image table",
                    &rt->images) ||
      collect_modules(rt)) {
    em_fail_context(EM_ERR_INTERNAL, "reading the embedded image table");
    free(rt);
    return NULL;
  }
  rt->strict = env_flag("EMBER_STRICT");
  rt->force = parse_force(getenv("EMBER_FORCE"), rt->force_invalid, sizeof rt->force_invalid);
  rt->jit_disabled = env_flag("CUDA_DISABLE_PTX_JIT");
  rt_instance = rt;
  em_driver_load(rt);
  for (int i = 0; i < rt->n_gpus; i++) {
    em_gpu *g = &rt->gpus[i];
    g->modules = calloc(rt->n_modules ? rt->n_modules : 1, sizeof *g->modules);
    for (size_t m = 0; g->modules && m < rt->n_modules; m++) g->modules[m].name = rt->modules[m];
    em_allocator_init(&g->alloc, (em_alloc_backend){gpu_alloc, gpu_release, g, 1, 0, 1});
  }
  return rt;
}

em_runtime *em_rt(void) {
  em_rt_lock();
  em_runtime *rt = rt_instance ? rt_instance : rt_create();
  em_rt_unlock();
  return rt;
}

API void em_shutdown(void) {
  em_rt_lock();
  em_runtime *rt = rt_instance;
  if (!rt) {
    em_rt_unlock();
    return;
  }
  em_devcheck_shutdown(rt);
  em_cublaslt_shutdown(rt); /* before cuBLAS: it loaded the cuBLASLt of cuBLAS's major */
  em_cublas_shutdown(rt);
  em_cudnn_shutdown(rt);
  for (int i = 0; i < rt->n_gpus; i++) {
    em_gpu *g = &rt->gpus[i];
    if (g->ctx && em_gpu_enter(g) == EM_OK) {
      for (size_t m = 0; g->modules && m < rt->n_modules; m++)
        if (g->modules[m].module) rt->cu.cuModuleUnload(g->modules[m].module);
      em_gpu_leave(g);
    }
    em_allocator_destroy(&g->alloc);
    if (g->ctx) rt->cu.cuDevicePrimaryCtxRelease(g->dev);
    for (size_t m = 0; g->modules && m < rt->n_modules; m++) {
      for (int k = 0; k < g->modules[m].n_kernels; k++) free(g->modules[m].kernels[k]);
      free(g->modules[m].kernels);
    }
    free(g->modules);
  }
  free(rt->gpus);
  em_kernel_index_free(rt);
  em_allocator_trim(em_cpu_allocator()); /* live CPU blocks stay: see em_cpu_allocator */
  em_jit_cache_close(rt->cache);
  em_nvrtc_unload_all(&rt->nvrtc);
  em_driver_unload(rt);
  em_blob_view_free(&rt->images);
  free(rt->modules);
  free(rt);
  rt_instance = NULL;
  em_libs_forget();
  em_rt_unlock();
}

em_status em_rt_gpu(em_device dev, em_gpu **out) {
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  if (dev.kind != EM_DEVICE_CUDA)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "device kind %d is not a CUDA device", (int)dev.kind);
  if (dev.ordinal < 0 || dev.ordinal >= rt->n_gpus)
    return em_fail(EM_ERR_NOT_FOUND, "no CUDA device %d: %d visible (%s)", dev.ordinal, rt->n_gpus, rt->driver.message);
  *out = &rt->gpus[dev.ordinal];
  return EM_OK;
}

em_status em_gpu_enter(em_gpu *g) {
  em_runtime *rt = rt_instance;
  CUresult r;
  if (!g->ctx) {
    em_rt_lock();
    r = g->ctx ? CUDA_SUCCESS : rt->cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev);
    em_rt_unlock();
    if (r) return em_cuda_fail(r, "cuDevicePrimaryCtxRetain", "CUDA device %d", g->ordinal);
  }
  r = rt->cu.cuCtxPushCurrent(g->ctx);
  if (r) return em_cuda_fail(r, "cuCtxPushCurrent", "CUDA device %d", g->ordinal);
  return EM_OK;
}

void em_gpu_leave(em_gpu *g) {
  (void)g;
  CUcontext prev;
  rt_instance->cu.cuCtxPopCurrent(&prev);
}

/* ------------------------------------------------------------- devices --- */

API em_device em_cpu(void) { return (em_device){EM_DEVICE_CPU, 0}; }
API em_device em_cuda(int ordinal) { return (em_device){EM_DEVICE_CUDA, ordinal}; }

API em_status em_driver_get_info(em_driver_info *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_driver_get_info: out is NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  *out = rt->driver;
  return EM_OK;
}

API em_status em_cuda_device_count(int *count) {
  if (!count) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cuda_device_count: count is NULL");
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  *count = rt->n_gpus;
  return EM_OK;
}

static void describe_cpu(em_device_info *i) {
  memset(i, 0, sizeof *i);
  i->device = em_cpu();
  snprintf(i->name, sizeof i->name, "CPU");
  long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  i->sm_count = cores > 0 ? (int)cores : 1;
  i->total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

API em_status em_device_get_info(em_device dev, em_device_info *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_device_get_info: out is NULL");
  if (dev.kind == EM_DEVICE_CPU) {
    describe_cpu(out);
    return EM_OK;
  }
  em_gpu *g;
  em_status s = em_rt_gpu(dev, &g);
  if (s) return s;
  *out = g->info;
  return EM_OK;
}

API const char *em_version(void) { return "0.1.0"; }
