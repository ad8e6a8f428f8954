/* NVRTC, loaded with dlopen: every loadable version, newest first, with its
 * real version (nvrtcVersion) and the SMs it supports. */
#ifndef EMBER_RUNTIME_NVRTC_H
#define EMBER_RUNTIME_NVRTC_H

#include <stddef.h>
#include "ember/status.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef struct em_nvrtc_lib {
  void *handle;
  char path[512];          /* what was loaded: a soname or a file */
  int version;             /* 1000*major + 10*minor */
  int archs[64];           /* nvrtcGetSupportedArchs, when the library has it */
  size_t n_archs;
  int has_archs;
  int has_cubin;           /* nvrtcGetCUBIN (11.1+) */
  nvrtcResult (*Version)(int *major, int *minor);
  const char *(*GetErrorString)(nvrtcResult r);
  nvrtcResult (*CreateProgram)(nvrtcProgram *p, const char *src, const char *name, int n_headers,
                               const char *const *headers, const char *const *include_names);
  nvrtcResult (*CompileProgram)(nvrtcProgram p, int n_opts, const char *const *opts);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram p, size_t *size);
  nvrtcResult (*GetProgramLog)(nvrtcProgram p, char *log);
  nvrtcResult (*GetPTXSize)(nvrtcProgram p, size_t *size);
  nvrtcResult (*GetPTX)(nvrtcProgram p, char *ptx);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram p, size_t *size);
  nvrtcResult (*GetCUBIN)(nvrtcProgram p, char *cubin);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *p);
} em_nvrtc_lib;

#define EM_NVRTC_MAX 12

typedef struct em_nvrtc_set {
  em_nvrtc_lib libs[EM_NVRTC_MAX];
  size_t n;                /* sorted newest first */
  char tried[1024];        /* what was tried and why it failed, for the log and gpucheck */
} em_nvrtc_set;

/* Loads every NVRTC it can find: the paths in $EMBER_NVRTC (colon-separated)
 * first, then each soname of arch_table (libnvrtc.so.13, .12, .11.2, ...) on
 * the loader path, then in $CUDA_HOME/lib64, $CUDA_PATH/lib64 and
 * /usr/local/cuda/lib64. One library per distinct version. */
void em_nvrtc_load_all(em_nvrtc_set *set);
void em_nvrtc_unload_all(em_nvrtc_set *set);

/* Opens exactly the NVRTC library at `path` with the loader's rules (the
 * builtins beside it first, every entry point, nvrtcVersion, the supported
 * archs), as an $EMBER_NVRTC entry would be: for the build's NVRTC cubins
 * (build-tools/nvrtc_cubin.c) and the compiler sweeps. EM_ERR_NOT_FOUND,
 * with the loader's reason, when the file is no usable NVRTC. */
em_status em_nvrtc_open_file(const char *path, em_nvrtc_lib *out);

/* Compiles `source` for sm (as a cubin when want_cubin and the library can,
 * else PTX for compute_<sm>) with FMA contraction off (portable numerics).
 * On failure the message carries NVRTC's log. *out is malloc'd. */
em_status em_nvrtc_compile(const em_nvrtc_lib *lib, const char *name, const char *source,
                           int n_headers, const char *const *headers, const char *const *header_names,
                           int sm, int want_cubin, void **out, size_t *out_size);

#endif
