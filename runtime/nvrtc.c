/* Finding and using NVRTC (nvrtc.h). */
#include "nvrtc.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_table.h"
#include "error.h"

static void note_tried(em_nvrtc_set *set, const char *what) {
  size_t len = strlen(set->tried);
  if (len + 2 < sizeof set->tried) snprintf(set->tried + len, sizeof set->tried - len, "%s%s", len ? "; " : "", what);
}

/* NVRTC opens its builtins library (libnvrtc-builtins.so.X.Y) by bare name
 * when it compiles. That finds the copy beside it only through NVRTC's own
 * $ORIGIN run path, which a dlopen interposer (AddressSanitizer's, say) hides;
 * and a NVRTC of a pip wheel or unpacked toolkit is off the loader path. So
 * the builtins beside a NVRTC opened by path are opened first: the later
 * lookup by name then finds them already loaded. (The 'alt' builtins of
 * NVRTC 12.x are its own business.) */
static void open_builtins_beside(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return;
  char pattern[1100];
  snprintf(pattern, sizeof pattern, "%.*s/libnvrtc-builtins.so.*", (int)(slash - path), path);
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0) return;
  for (size_t i = 0; i < g.gl_pathc; i++)
    if (!strstr(g.gl_pathv[i], ".alt.")) dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  globfree(&g);
}

/* Opens one candidate; fills the entry and returns 1 if usable. A path the
 * user named (named_by says how: "$EMBER_NVRTC entry") that cannot be opened
 * is noted in set->tried; the sonames and folders searched by default
 * (named_by NULL) are not, as most are absent. */
static int open_one(em_nvrtc_set *set, const char *path, const char *named_by, em_nvrtc_lib *lib) {
  memset(lib, 0, sizeof *lib);
  /* RTLD_NODELETE: NVRTC pulls in C++ runtimes (libnvrtc-builtins, libstdc++)
   * whose one-time allocations are lost on every unload; dlclose only drops
   * the reference, so em_shutdown and re-initialisation cycles leak nothing. */
  open_builtins_beside(path);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    if (named_by) {
      char msg[600];
      const char *why = dlerror();
      snprintf(msg, sizeof msg, "%s %s cannot be opened: %s", named_by, path, why ? why : "unknown error");
      note_tried(set, msg);
    }
    return 0;
  }
  snprintf(lib->path, sizeof lib->path, "%s", path);
  lib->handle = h;
#define LOAD(field, name) *(void **)&lib->field = dlsym(h, name);
  LOAD(Version, "nvrtcVersion")
  LOAD(GetErrorString, "nvrtcGetErrorString")
  LOAD(CreateProgram, "nvrtcCreateProgram")
  LOAD(CompileProgram, "nvrtcCompileProgram")
  LOAD(GetProgramLogSize, "nvrtcGetProgramLogSize")
  LOAD(GetProgramLog, "nvrtcGetProgramLog")
  LOAD(GetPTXSize, "nvrtcGetPTXSize")
  LOAD(GetPTX, "nvrtcGetPTX")
  LOAD(GetCUBINSize, "nvrtcGetCUBINSize")
  LOAD(GetCUBIN, "nvrtcGetCUBIN")
  LOAD(DestroyProgram, "nvrtcDestroyProgram")
#undef LOAD
  int major = 0, minor = 0;
  if (!lib->Version || !lib->CreateProgram || !lib->CompileProgram || !lib->GetPTX || !lib->GetPTXSize ||
      !lib->DestroyProgram || !lib->GetProgramLog || !lib->GetProgramLogSize || lib->Version(&major, &minor)) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s lacks the NVRTC entry points", path);
    note_tried(set, msg);
    dlclose(h);
    return 0;
  }
  lib->version = major * 1000 + minor * 10;
  lib->has_cubin = lib->GetCUBIN && lib->GetCUBINSize;
  nvrtcResult (*num)(int *) = (nvrtcResult(*)(int *))dlsym(h, "nvrtcGetNumSupportedArchs");
  nvrtcResult (*archs)(int *) = (nvrtcResult(*)(int *))dlsym(h, "nvrtcGetSupportedArchs");
  int n = 0;
  if (num && archs && num(&n) == 0 && n > 0 && n <= 64) {
    int buf[64];
    if (archs(buf) == 0) {
      memcpy(lib->archs, buf, sizeof(int) * (size_t)n);
      lib->n_archs = (size_t)n;
      lib->has_archs = 1;
    }
  }
  return 1;
}

em_status em_nvrtc_open_file(const char *path, em_nvrtc_lib *out) {
  em_nvrtc_set why; /* only its `tried` is used: why open_one refused the file */
  why.tried[0] = '\0';
  if (open_one(&why, path, "NVRTC library", out)) return EM_OK;
  return em_fail(EM_ERR_NOT_FOUND, "%s", why.tried[0] ? why.tried : "NVRTC library not loaded, no reason given");
}

static int have_version(const em_nvrtc_set *set, int version) {
  for (size_t i = 0; i < set->n; i++)
    if (set->libs[i].version == version) return 1;
  return 0;
}

static void try_path(em_nvrtc_set *set, const char *path, const char *named_by) {
  if (set->n == EM_NVRTC_MAX) return;
  em_nvrtc_lib lib;
  if (!open_one(set, path, named_by, &lib)) return;
  if (have_version(set, lib.version)) {
    dlclose(lib.handle);
    return;
  }
  set->libs[set->n++] = lib;
  em_log(EM_LOG_DISPATCH, "NVRTC %d.%d loaded from %s (%zu supported archs%s)", lib.version / 1000,
         (lib.version % 1000) / 10, path, lib.n_archs, lib.has_cubin ? ", cubin output" : ", PTX output only");
}

void em_nvrtc_load_all(em_nvrtc_set *set) {
  memset(set, 0, sizeof *set);
  const char *env = getenv("EMBER_NVRTC");
  if (env && *env) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save))
      try_path(set, p, "$EMBER_NVRTC entry");
  }
  const char *dirs[] = {NULL, getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (size_t i = 0; i < em_nvrtc_count(); i++) {
    const char *soname = em_nvrtc_at(i)->soname;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
      char path[1024];
      if (d == 0) snprintf(path, sizeof path, "%s", soname);
      else if (dirs[d] && *dirs[d]) snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], soname);
      else continue;
      size_t before = set->n;
      try_path(set, path, NULL);
      if (set->n > before) break;
    }
  }
  /* Newest first. */
  for (size_t i = 1; i < set->n; i++)
    for (size_t j = i; j > 0 && set->libs[j].version > set->libs[j - 1].version; j--) {
      em_nvrtc_lib t = set->libs[j];
      set->libs[j] = set->libs[j - 1];
      set->libs[j - 1] = t;
    }
  if (!set->n) note_tried(set, "no libnvrtc found on the loader path, $EMBER_NVRTC, $CUDA_HOME, $CUDA_PATH or /usr/local/cuda");
}

void em_nvrtc_unload_all(em_nvrtc_set *set) {
  for (size_t i = 0; i < set->n; i++)
    if (set->libs[i].handle) dlclose(set->libs[i].handle);
  memset(set, 0, sizeof *set);
}

static em_status nvrtc_fail(const em_nvrtc_lib *lib, nvrtcProgram prog, nvrtcResult r, const char *call) {
  char log[1024] = "";
  size_t n = 0;
  if (prog && lib->GetProgramLogSize(prog, &n) == 0 && n > 1) {
    char *full = malloc(n);
    if (full && lib->GetProgramLog(prog, full) == 0) snprintf(log, sizeof log, "%s", full);
    free(full);
  }
  return em_fail(EM_ERR_NVRTC, "NVRTC %d.%d (%s): %s failed: %s (%d)%s%s", lib->version / 1000,
                 (lib->version % 1000) / 10, lib->path, call,
                 lib->GetErrorString ? lib->GetErrorString(r) : "error", r, log[0] ? "; log: " : "", log);
}

em_status em_nvrtc_compile(const em_nvrtc_lib *lib, const char *name, const char *source, int n_headers,
                           const char *const *headers, const char *const *header_names, int sm, int want_cubin,
                           void **out, size_t *out_size) {
  nvrtcProgram prog = NULL;
  int cubin = want_cubin && lib->has_cubin;
  char arch[64];
  snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d", cubin ? "sm" : "compute", sm);
  /* --fmad=false: the portable numeric mode never contracts a*b+c. */
  const char *opts[] = {arch, "--fmad=false"};
  nvrtcResult r = lib->CreateProgram(&prog, source, name, n_headers, headers, header_names);
  if (r) return nvrtc_fail(lib, NULL, r, "nvrtcCreateProgram");
  r = lib->CompileProgram(prog, 2, opts);
  if (r) {
    em_status s = nvrtc_fail(lib, prog, r, "nvrtcCompileProgram");
    lib->DestroyProgram(&prog);
    return s;
  }
  size_t n = 0;
  r = cubin ? lib->GetCUBINSize(prog, &n) : lib->GetPTXSize(prog, &n);
  if (r || n == 0) {
    em_status s = nvrtc_fail(lib, prog, r, cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize");
    lib->DestroyProgram(&prog);
    return s;
  }
  char *buf = malloc(n);
  if (!buf) {
    lib->DestroyProgram(&prog);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for %zu bytes of NVRTC output", n);
  }
  r = cubin ? lib->GetCUBIN(prog, buf) : lib->GetPTX(prog, buf);
  lib->DestroyProgram(&prog);
  if (r) {
    free(buf);
    return nvrtc_fail(lib, NULL, r, cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX");
  }
  *out = buf;
  *out_size = n;
  return EM_OK;
}
