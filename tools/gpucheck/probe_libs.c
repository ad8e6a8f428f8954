/* What the dynamic loader would find (probe.h): its search path under a root,
 * the libcuda.so.1 it resolves, forward-compat copies, the CUDA libraries on
 * the path, and NVML's view of the driver (live system only). */
#include <dirent.h>
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "probe.h"

static int is_live(const char *root) { return !root || !*root || !strcmp(root, "/"); }

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* ------------------------------------------------------------ loader path --- */

static void add_dir(gc_ldpath *o, const char *dir, const char *from) {
  if (!dir || dir[0] != '/') return; /* relative entries depend on the working directory: not modelled */
  char d[256];
  if (snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d) return;
  size_t n = strlen(d);
  while (n > 1 && d[n - 1] == '/') d[--n] = '\0';
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->dirs[i], d)) return;
  if (o->n >= GC_PROBE_MAX_DIRS) return;
  memcpy(o->dirs[o->n], d, sizeof d);
  snprintf(o->from[o->n], sizeof o->from[o->n], "%s", from);
  o->n++;
}

typedef struct conf_ctx {
  const char *root;
  gc_ldpath *out;
  const char *file; /* the conf file being read, as seen inside the root */
  int depth;
} conf_ctx;

static void read_conf(const char *root, gc_ldpath *out, const char *file, int depth);

static void on_conf(void *vctx, int is_include, const char *value) {
  conf_ctx *c = vctx;
  if (!is_include) {
    add_dir(c->out, value, c->file);
    return;
  }
  /* A relative include is relative to the including file's directory (ldconfig). */
  char pattern[GC_PROBE_PATH];
  if (value[0] == '/') snprintf(pattern, sizeof pattern, "%s", value);
  else {
    const char *slash = strrchr(c->file, '/');
    int dn = slash ? (int)(slash - c->file) : 0;
    snprintf(pattern, sizeof pattern, "%.*s/%s", dn, c->file, value);
  }
  char full[GC_PROBE_PATH];
  gc_probe_path(c->root, pattern, full, sizeof full);
  glob_t g;
  if (glob(full, 0, NULL, &g) != 0) return;
  size_t skip = is_live(c->root) ? 0 : strlen(full) - strlen(pattern);
  for (size_t i = 0; i < g.gl_pathc; i++)
    if (strlen(g.gl_pathv[i]) > skip) read_conf(c->root, c->out, g.gl_pathv[i] + skip, c->depth + 1);
  globfree(&g);
}

static void read_conf(const char *root, gc_ldpath *out, const char *file, int depth) {
  if (depth > 8) return; /* include loops */
  char buf[16384];
  long n = gc_probe_read(root, file, buf, sizeof buf);
  if (n < 0) return;
  conf_ctx c = {root, out, file, depth};
  gc_probe_parse_ld_conf(buf, (size_t)n, on_conf, &c);
}

#if defined(__aarch64__)
#define TRIPLET "aarch64-linux-gnu"
#elif defined(__powerpc64__)
#define TRIPLET "powerpc64le-linux-gnu"
#else
#define TRIPLET "x86_64-linux-gnu"
#endif

void gc_probe_loader_dirs(const char *root, const char *ld_library_path, gc_ldpath *out) {
  memset(out, 0, sizeof *out);
  if (ld_library_path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", ld_library_path);
    char *save = NULL;
    for (char *d = strtok_r(tmp, ":;", &save); d; d = strtok_r(NULL, ":;", &save)) add_dir(out, d, "LD_LIBRARY_PATH");
  }
  read_conf(root, out, "/etc/ld.so.conf", 0);
  static const char *const defaults[] = {"/lib/" TRIPLET, "/usr/lib/" TRIPLET, "/lib64", "/usr/lib64", "/lib", "/usr/lib"};
  for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) add_dir(out, defaults[i], "default");
}

/* ----------------------------------------------------------------- libcuda --- */

const char *gc_probe_libcuda_kind_name(gc_libcuda_kind k) {
  switch (k) {
  case GC_LIBCUDA_NONE: return "none";
  case GC_LIBCUDA_DRIVER: return "driver";
  case GC_LIBCUDA_COMPAT: return "compat";
  case GC_LIBCUDA_STUB: return "stub";
  case GC_LIBCUDA_WSL: return "wsl";
  }
  return "unknown";
}

/* A libcuda version counts only when it is a driver release (branch >= 100):
 * WSL and Jetson name theirs libcuda.so.1.1. */
static void driver_version_of(const char *file, char *ver, size_t cap) {
  gc_version v;
  if (gc_probe_soname_version(file, "libcuda", ver, cap) || gc_probe_parse_version(ver, strlen(ver), &v) || v.major < 100)
    ver[0] = '\0';
}

void gc_probe_libcuda_classify(const char *root, gc_libcuda *l) {
  const char *file = base_name(l->path);
  memset(&l->note, 0, sizeof l->note);
  l->version[0] = '\0';
  if (!l->path[0]) {
    l->kind = GC_LIBCUDA_NONE;
    return;
  }
  /* The toolkit's stub: lib64/stubs/libcuda.so (a libcuda.so.1 link to it keeps the name). */
  if (strstr(l->path, "/stubs/") || !strcmp(file, "libcuda.so")) {
    l->kind = GC_LIBCUDA_STUB;
    return;
  }
  if (!strncmp(l->path, "/usr/lib/wsl/", 13)) {
    l->kind = GC_LIBCUDA_WSL;
    return;
  }
  driver_version_of(file, l->version, sizeof l->version);
  char full[GC_PROBE_PATH];
  gc_probe_path(root, l->path, full, sizeof full);
  gc_probe_fwd_note_file(full, &l->note);
  /* The note marks compat copies since 2025 drivers; older cuda-compat packages
   * are known by their directory. */
  l->kind = l->note.found || strstr(l->path, "/compat/") ? GC_LIBCUDA_COMPAT : GC_LIBCUDA_DRIVER;
}

void gc_probe_libcuda(const char *root, const gc_ldpath *dirs, gc_libcuda *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < dirs->n; i++) {
    char link[GC_PROBE_PATH], real[GC_PROBE_PATH];
    snprintf(link, sizeof link, "%s/libcuda.so.1", dirs->dirs[i]);
    if (gc_probe_resolve(root, link, real, sizeof real) != 0) continue;
    if (!out->link[0]) {
      snprintf(out->link, sizeof out->link, "%s", link);
      snprintf(out->path, sizeof out->path, "%s", real);
      snprintf(out->from, sizeof out->from, "%s", dirs->from[i]);
    } else if (strcmp(real, out->path) && !out->shadowed[0]) {
      snprintf(out->shadowed, sizeof out->shadowed, "%s", real);
    }
  }
  if (!out->link[0]) {
    /* A bare libcuda.so (the toolkit's stub, or a development link) cannot
     * satisfy libcuda.so.1, but saying it was seen explains link-time success. */
    for (size_t i = 0; i < dirs->n && !out->stub_seen[0]; i++) {
      char link[GC_PROBE_PATH], real[GC_PROBE_PATH];
      snprintf(link, sizeof link, "%s/libcuda.so", dirs->dirs[i]);
      if (gc_probe_resolve(root, link, real, sizeof real) == 0) snprintf(out->stub_seen, sizeof out->stub_seen, "%s", real);
    }
    out->kind = GC_LIBCUDA_NONE;
    return;
  }
  gc_probe_libcuda_classify(root, out);
}

size_t gc_probe_compat_copies(const char *root, gc_compat_copy *out, size_t cap) {
  char full[GC_PROBE_PATH];
  const char *pattern = "/usr/local/cuda*/compat/libcuda.so.*";
  gc_probe_path(root, pattern, full, sizeof full);
  glob_t g;
  if (glob(full, 0, NULL, &g) != 0) return 0;
  size_t skip = strlen(full) - strlen(pattern), n = 0;
  for (size_t i = 0; i < g.gl_pathc && n < cap; i++) {
    const char *inside = g.gl_pathv[i] + skip;
    char real[GC_PROBE_PATH], ver[32];
    /* Links (libcuda.so.1 -> libcuda.so.575.57.08) lead to the same file: keep real files once. */
    if (gc_probe_resolve(root, inside, real, sizeof real) != 0) continue;
    int dup = 0;
    for (size_t k = 0; k < n; k++) dup |= !strcmp(out[k].path, real);
    if (dup) continue;
    driver_version_of(base_name(real), ver, sizeof ver);
    if (!ver[0]) continue;
    gc_compat_copy *c = &out[n++];
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", real);
    snprintf(c->version, sizeof c->version, "%s", ver);
    char file[GC_PROBE_PATH];
    gc_probe_path(root, real, file, sizeof file);
    gc_probe_fwd_note_file(file, &c->note);
  }
  globfree(&g);
  return n;
}

/* -------------------------------------------------------------- libraries --- */

/* The library a file name belongs to: its stem ("libcudnn_ops") in stem, or -1. */
static int lib_stem(const char *file, char *stem, size_t cap) {
  static const char *const fixed[] = {"libcudart", "libnvrtc", "libcublasLt", "libcublas", "libnccl"};
  const char *so = strstr(file, ".so");
  if (!so || (so[3] != '\0' && so[3] != '.')) return -1;
  size_t n = (size_t)(so - file);
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    if (n == strlen(fixed[i]) && !strncmp(file, fixed[i], n)) {
      snprintf(stem, cap, "%s", fixed[i]);
      return 0;
    }
  /* cuDNN 9 is split: libcudnn_ops, libcudnn_cnn, libcudnn_engines_precompiled, ... */
  if (n >= 8 && n < cap && !strncmp(file, "libcudnn", 8)) {
    for (size_t i = 8; i < n; i++)
      if (!(file[i] == '_' || (file[i] >= 'a' && file[i] <= 'z'))) return -1;
    memcpy(stem, file, n);
    stem[n] = '\0';
    return 0;
  }
  return -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

size_t gc_probe_libraries(const char *root, const gc_ldpath *dirs, gc_lib *out, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < dirs->n && n < cap; i++) {
    char full[GC_PROBE_PATH];
    gc_probe_path(root, dirs->dirs[i], full, sizeof full);
    DIR *d = opendir(full);
    if (!d) continue;
    /* Sorted names: readdir order is arbitrary and reports must not flicker. */
    char *names[512];
    size_t nn = 0;
    struct dirent *e;
    char stem[64];
    while ((e = readdir(d)) != NULL && nn < 512)
      if (lib_stem(e->d_name, stem, sizeof stem) == 0) names[nn] = strdup(e->d_name), nn += names[nn] != NULL;
    closedir(d);
    qsort(names, nn, sizeof *names, cmp_str);
    for (size_t k = 0; k < nn; k++) {
      char link[GC_PROBE_PATH], real[GC_PROBE_PATH], ver[32] = "";
      snprintf(link, sizeof link, "%s/%s", dirs->dirs[i], names[k]);
      int dup = 0;
      if (n < cap && lib_stem(names[k], stem, sizeof stem) == 0 && gc_probe_resolve(root, link, real, sizeof real) == 0) {
        for (size_t j = 0; j < n; j++) dup |= !strcmp(out[j].path, real);
        if (!dup) {
          /* The real file's name carries the full version (libcudart.so.12.4.127);
           * wheels ship the soname file itself (libcudart.so.12). */
          if (gc_probe_soname_version(base_name(real), stem, ver, sizeof ver)) gc_probe_soname_version(names[k], stem, ver, sizeof ver);
          gc_lib *l = &out[n++];
          memset(l, 0, sizeof *l);
          snprintf(l->name, sizeof l->name, "%s", stem + 3);
          snprintf(l->link, sizeof l->link, "%s", link);
          snprintf(l->path, sizeof l->path, "%s", real);
          snprintf(l->version, sizeof l->version, "%s", ver);
          snprintf(l->from, sizeof l->from, "%s", dirs->from[i]);
          if (ver[0]) gc_probe_parse_version(ver, strlen(ver), &l->v);
          else l->v.minor = l->v.patch = -1;
          l->shadowed_by = -1;
          for (size_t j = 0; j + 1 < n; j++)
            if (!strcmp(out[j].name, l->name) && out[j].shadowed_by < 0 && ver[0] && out[j].version[0] && out[j].v.major == l->v.major) {
              l->shadowed_by = (int)j;
              break;
            }
        }
      }
      free(names[k]);
    }
  }
  return n;
}

/* -------------------------------------------------------------------- NVML --- */

/* The few NVML entry points used, declared here from NVIDIA's nvml.h as
 * mirrored by pynvml (ray-project/ray python/ray/_private/thirdparty/pynvml/
 * pynvml.py) and NVIDIA/libnvidia-container src/driver.c: every function
 * returns nvmlReturn_t (an int enum, NVML_SUCCESS = 0); nvmlDevice_t is an
 * opaque pointer. */
typedef int nvml_return;
typedef void *nvml_device;
#define NVML_SUCCESS 0

const char *gc_probe_nvml_error_name(int rc) {
  switch (rc) {
  case 0: return "NVML_SUCCESS";
  case 1: return "NVML_ERROR_UNINITIALIZED";
  case 2: return "NVML_ERROR_INVALID_ARGUMENT";
  case 3: return "NVML_ERROR_NOT_SUPPORTED";
  case 4: return "NVML_ERROR_NO_PERMISSION";
  case 6: return "NVML_ERROR_NOT_FOUND";
  case 9: return "NVML_ERROR_DRIVER_NOT_LOADED";
  case 12: return "NVML_ERROR_LIBRARY_NOT_FOUND";
  case 13: return "NVML_ERROR_FUNCTION_NOT_FOUND";
  case 15: return "NVML_ERROR_GPU_IS_LOST";
  case 17: return "NVML_ERROR_OPERATING_SYSTEM";
  case 18: return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
  case 999: return "NVML_ERROR_UNKNOWN";
  }
  return "NVML error";
}

void gc_probe_nvml(gc_nvml *out) {
  memset(out, 0, sizeof *out);
  out->init_rc = -1;
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(out->note, sizeof out->note, "libnvidia-ml.so.1 (NVML) cannot be loaded");
    return;
  }
  out->loaded = 1;
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
    char real[PATH_MAX];
    snprintf(out->path, sizeof out->path, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
  }
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  nvml_return (*drv)(char *, unsigned);
  nvml_return (*count)(unsigned *);
  nvml_return (*by_index)(unsigned, nvml_device *);
  nvml_return (*uuid)(nvml_device, char *, unsigned);
  nvml_return (*brand)(nvml_device, int *);
  nvml_return (*mig)(nvml_device, unsigned *, unsigned *);
  *(void **)&init = dlsym(h, "nvmlInit_v2");
  *(void **)&shutdown = dlsym(h, "nvmlShutdown");
  *(void **)&drv = dlsym(h, "nvmlSystemGetDriverVersion");
  *(void **)&count = dlsym(h, "nvmlDeviceGetCount_v2");
  *(void **)&by_index = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&uuid = dlsym(h, "nvmlDeviceGetUUID");
  *(void **)&brand = dlsym(h, "nvmlDeviceGetBrand");
  *(void **)&mig = dlsym(h, "nvmlDeviceGetMigMode");
  if (!init || !shutdown || !count || !by_index) {
    snprintf(out->note, sizeof out->note, "%s lacks nvmlInit_v2/nvmlDeviceGetCount_v2: too old to read", out->path);
    dlclose(h);
    return;
  }
  out->init_rc = init();
  if (out->init_rc != NVML_SUCCESS) {
    snprintf(out->note, sizeof out->note, "nvmlInit_v2 failed: %s (%d)", gc_probe_nvml_error_name(out->init_rc), out->init_rc);
    dlclose(h);
    return;
  }
  if (drv && drv(out->driver, sizeof out->driver) != NVML_SUCCESS) out->driver[0] = '\0';
  unsigned n = 0;
  if (count(&n) == NVML_SUCCESS) {
    for (unsigned i = 0; i < n && out->n < GC_PROBE_MAX_GPUS; i++) {
      nvml_device dev = NULL;
      if (by_index(i, &dev) != NVML_SUCCESS) continue;
      gc_nvml_gpu *g = &out->gpus[out->n++];
      g->brand = -1;
      if (uuid && uuid(dev, g->uuid, sizeof g->uuid) != NVML_SUCCESS) g->uuid[0] = '\0';
      int b = -1;
      if (brand && brand(dev, &b) == NVML_SUCCESS) g->brand = b;
      g->mig_rc = mig ? mig(dev, &g->mig_current, &g->mig_pending) : 13;
    }
  }
  shutdown();
  dlclose(h);
}
