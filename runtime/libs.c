/* Probing the CUDA math libraries (cuBLAS, cuBLASLt, cuDNN) and reporting
 * NVRTC, for `ember devices` and gpucheck; the fast mode loads them through
 * the same search (em_libs_open; cublas.c). EMBER_LIBCUBLAS, EMBER_LIBCUBLASLT
 * and EMBER_LIBCUDNN name one file to load instead (the test doubles).
 * Sonames: shared/reference/cuda-compat.md section 9 (libcublas.so.MAJOR,
 * libcublasLt.so.MAJOR; libcudnn.so.8 / .9). The .11 cuBLAS soname is [U] in
 * the reference: it is only tried, never assumed. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn.h"
#include "runtime.h"

#define API __attribute__((visibility("default")))

typedef struct lib_spec {
  const char *name;
  const char *env;   /* the variable naming the one file to load instead */
  const char *sonames[4];
  const char *probe; /* a symbol that tells its version */
} lib_spec;

static const lib_spec specs[] = {
  {"cublas", "EMBER_LIBCUBLAS", {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", NULL}, "cublasGetProperty"},
  {"cublasLt", "EMBER_LIBCUBLASLT", {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", NULL},
   "cublasLtGetProperty"},
  {"cudnn", "EMBER_LIBCUDNN", {"libcudnn.so.9", "libcudnn.so.8", NULL, NULL}, "cudnnGetVersion"},
};
#define N_SPECS (sizeof specs / sizeof specs[0])
#define N_LIBS (N_SPECS + 1) /* + NVRTC */

static em_cuda_library found[N_LIBS];
static int probed;

void *em_libs_open(const char *soname, char *path, size_t cap) {
  const char *dirs[] = {NULL, getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    if (d == 0) snprintf(path, cap, "%s", soname);
    else if (dirs[d] && *dirs[d]) snprintf(path, cap, "%s/lib64/%s", dirs[d], soname);
    else continue;
    /* RTLD_NODELETE: these C++ libraries lose their one-time allocations
     * (libstdc++'s exception pool) on every unload; keep them mapped. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h) return h;
  }
  return NULL;
}

/* cublas(Lt)GetProperty(MAJOR=0, MINOR=1, PATCH=2, int*) and cudnnGetVersion()
 * (em_cudnn_version_split). */
static void version_of(const lib_spec *s, void *h, char *out, size_t cap) {
  void *sym = dlsym(h, s->probe);
  snprintf(out, cap, "unknown");
  if (!sym) return;
  if (!strcmp(s->name, "cudnn")) {
    int major, minor, patch;
    em_cudnn_version_split(((size_t(*)(void))sym)(), &major, &minor, &patch);
    snprintf(out, cap, "%d.%d.%d", major, minor, patch);
    return;
  }
  int (*prop)(int, int *) = (int (*)(int, int *))sym;
  int major = 0, minor = 0, patch = 0;
  if (!prop(0, &major) && !prop(1, &minor) && !prop(2, &patch)) snprintf(out, cap, "%d.%d.%d", major, minor, patch);
}

static void probe_all(em_runtime *rt) {
  em_cuda_library *n = &found[0];
  snprintf(n->name, sizeof n->name, "nvrtc");
  if (!rt->nvrtc_loaded) {
    em_nvrtc_load_all(&rt->nvrtc);
    rt->nvrtc_loaded = 1;
  }
  if (rt->nvrtc.n) {
    const em_nvrtc_lib *l = &rt->nvrtc.libs[0];
    n->found = 1;
    snprintf(n->path, sizeof n->path, "%s", l->path);
    snprintf(n->version, sizeof n->version, "%d.%d", l->version / 1000, (l->version % 1000) / 10);
    if (rt->nvrtc.n > 1) snprintf(n->note, sizeof n->note, "%zu NVRTC versions loadable", rt->nvrtc.n);
  } else {
    snprintf(n->note, sizeof n->note, "%s", rt->nvrtc.tried);
  }
  for (size_t i = 0; i < N_SPECS; i++) {
    em_cuda_library *L = &found[i + 1];
    snprintf(L->name, sizeof L->name, "%s", specs[i].name);
    const char *forced = getenv(specs[i].env);
    if (forced && *forced) {
      void *h = dlopen(forced, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
      snprintf(L->path, sizeof L->path, "%s", forced);
      if (h) {
        L->found = 1;
        version_of(&specs[i], h, L->version, sizeof L->version);
        snprintf(L->note, sizeof L->note, "%s", specs[i].env);
        dlclose(h);
      } else {
        snprintf(L->note, sizeof L->note, "%s=%s cannot be loaded", specs[i].env, forced);
        L->path[0] = '\0';
      }
      continue;
    }
    for (size_t k = 0; specs[i].sonames[k] && !L->found; k++) {
      void *h = em_libs_open(specs[i].sonames[k], L->path, sizeof L->path);
      if (!h) continue;
      L->found = 1;
      version_of(&specs[i], h, L->version, sizeof L->version);
      dlclose(h);
    }
    if (!L->found) {
      L->path[0] = '\0';
      snprintf(L->note, sizeof L->note, "none of %s%s%s found", specs[i].sonames[0],
               specs[i].sonames[1] ? ", " : "", specs[i].sonames[1] ? specs[i].sonames[1] : "");
    }
  }
  probed = 1;
}

API em_status em_cuda_library_count(size_t *count) {
  if (!count) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cuda_library_count: count is NULL");
  *count = N_LIBS;
  return EM_OK;
}

API em_status em_cuda_library_get(size_t index, em_cuda_library *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cuda_library_get: out is NULL");
  if (index >= N_LIBS) return em_fail(EM_ERR_NOT_FOUND, "library %zu does not exist (%zu)", index, (size_t)N_LIBS);
  em_runtime *rt = em_rt();
  if (!rt) return EM_ERR_INTERNAL;
  em_rt_lock();
  if (!probed) probe_all(rt);
  *out = found[index];
  em_rt_unlock();
  return EM_OK;
}

void em_libs_forget(void) {
  memset(found, 0, sizeof found);
  probed = 0;
}

int em_libs_half_supports(int dt, int cc, const char *what, char *why, size_t cap) {
  const int need = dt == EM_F16 ? 70 : 80;
  if (cc < need) {
    snprintf(why, cap, "%s %s take the f32 road on CC %d.%d: tensor cores for %s start at CC %d.%d (%s)",
             em_dtype_name(dt), what, cc / 10, cc % 10, em_dtype_name(dt), need / 10, need % 10,
             dt == EM_F16 ? "Volta" : "Ampere");
    return 0;
  }
  snprintf(why, cap, "CC %d.%d has %s tensor cores", cc / 10, cc % 10, em_dtype_name(dt));
  return 1;
}
