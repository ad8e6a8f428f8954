/* Modules, functions, the JIT linker and kernel launches of the fake libcuda.
 * Images are judged by fakecuda_images.c; this file keeps the handles, the
 * JIT option and log plumbing, binds each function to its kernel's host
 * build (fakecuda_kernels.h), checks launches and issues them on their
 * stream; fakecuda_exec.c runs them when the queue gets to them. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"
#include "fakecuda_kernels.h"

struct CUfunc_st {
  struct CUmod_st *mod;
  char name[FC_NAME_MAX];
  const fc_kernel_def *def; /* the host build, NULL when the double has none */
};

struct CUmod_st {
  const struct CUctx_st *ctx;
  char *kernels; /* comma-separated */
  void **funcs;  /* struct CUfunc_st * */
  size_t n_funcs, cap_funcs;
};

/* Where the caller wants the JIT's error log (CU_JIT_ERROR_LOG_BUFFER and
 * its size; cuda.h: the size is IN the buffer size, OUT the bytes written). */
typedef struct jit_log {
  char *buf;
  size_t size;
  void **size_slot; /* the option value to overwrite with the bytes written */
} jit_log;

struct CUlinkState_st {
  const struct CUctx_st *ctx;
  int target_sm;
  char variant;
  jit_log log;
  char *kernels;
  size_t kernels_len, n_inputs;
  void *cubin;
  size_t cubin_size;
};

/* Registries of live handles (void * so one push() serves all). A handle is
 * looked up here before it is ever dereferenced. */
static void **modules; /* struct CUmod_st * */
static size_t n_modules, cap_modules;
static void **links; /* struct CUlinkState_st * */
static size_t n_links, cap_links;

#define MODULE(i) ((struct CUmod_st *)modules[i])
#define LINK(i) ((struct CUlinkState_st *)links[i])

/* ---------------------------------------------------------- registry --- */

static size_t index_of(void *const *list, size_t n, const void *item) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == item) return i;
  return SIZE_MAX;
}

static int push(void ***list, size_t *n, size_t *cap, void *item) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    void **grown = realloc(*list, c * sizeof *grown);
    if (!grown) return -1;
    *list = grown;
    *cap = c;
  }
  (*list)[(*n)++] = item;
  return 0;
}

static void free_module(struct CUmod_st *m) {
  for (size_t i = 0; i < m->n_funcs; i++) free(m->funcs[i]);
  free(m->funcs);
  free(m->kernels);
  free(m);
}

static void free_link(struct CUlinkState_st *l) {
  free(l->kernels);
  free(l->cubin);
  free(l);
}

void fc_modules_release(const struct CUctx_st *ctx) {
  for (size_t i = n_modules; i-- > 0;) {
    if (!ctx || MODULE(i)->ctx == ctx) {
      free_module(MODULE(i));
      modules[i] = modules[--n_modules];
    }
  }
  for (size_t i = n_links; i-- > 0;) {
    if (!ctx || LINK(i)->ctx == ctx) {
      free_link(LINK(i));
      links[i] = links[--n_links];
    }
  }
  if (!ctx) {
    free(modules);
    free(links);
    modules = NULL;
    links = NULL;
    n_modules = cap_modules = n_links = cap_links = 0;
  }
}

static struct CUmod_st *live_module(CUmodule m) {
  size_t i = index_of(modules, n_modules, m);
  return i == SIZE_MAX || !fc_ctx_is_live(MODULE(i)->ctx) ? NULL : MODULE(i);
}

static struct CUfunc_st *live_function(CUfunction f) {
  for (size_t i = 0; i < n_modules; i++) {
    size_t k = index_of(MODULE(i)->funcs, MODULE(i)->n_funcs, f);
    if (k != SIZE_MAX) return fc_ctx_is_live(MODULE(i)->ctx) ? MODULE(i)->funcs[k] : NULL;
  }
  return NULL;
}

static struct CUlinkState_st *live_link(CUlinkState l) {
  size_t i = index_of(links, n_links, l);
  return i == SIZE_MAX || !fc_ctx_is_live(LINK(i)->ctx) ? NULL : LINK(i);
}

/* 1 when name is one of the comma-separated names. */
static int list_has(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* ------------------------------------------------------- JIT options --- */

/* Reads the options the fake acts on; the others (optimisation level,
 * register limits ...) are accepted and ignored, as they change nothing it
 * models. An option number the driver does not define is INVALID_VALUE. */
static CUresult read_options(unsigned n, CUjit_option *opts, void **vals, jit_log *log, int *target, char *variant) {
  if (n > 0 && (!opts || !vals)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    switch (opts[i]) {
      case CU_JIT_ERROR_LOG_BUFFER:
        log->buf = vals[i];
        break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        log->size = (size_t)(uintptr_t)vals[i];
        log->size_slot = &vals[i];
        break;
      case CU_JIT_TARGET:
        if (target) {
          /* CUjit_target: XY, 0x10000 + XY for 'a', 0x20000 + XY for 'f' (cuda.h). */
          unsigned v = (unsigned)(uintptr_t)vals[i];
          if ((v & 0xffffu) < 10 || (v & ~0x3ffffu) || (v & 0x30000u) == 0x30000u) return CUDA_ERROR_INVALID_VALUE;
          *target = (int)(v & 0xffffu);
          *variant = (v & 0x10000u) ? 'a' : 0;
        }
        break;
      default:
        /* CU_JIT_NUM_OPTIONS is 35 in cuda.h of CUDA 13.0. */
        if (opts[i] < 0 || opts[i] >= 35) return CUDA_ERROR_INVALID_VALUE;
        break;
    }
  }
  return CUDA_SUCCESS;
}

static void write_log(jit_log *log, const char *text) {
  if (!log->buf || log->size == 0) return;
  snprintf(log->buf, log->size, "%s", text);
  size_t written = strlen(log->buf) + 1;
  if (log->size_slot) *log->size_slot = (void *)(uintptr_t)written;
}

/* ----------------------------------------------------------- modules --- */

static CUresult module_load(CUmodule *out, const void *image, unsigned n, CUjit_option *opts, void **vals) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  jit_log log = {0};
  r = read_options(n, opts, vals, &log, NULL, NULL);
  if (r != CUDA_SUCCESS) return r;
  fc_device *d = fc_ctx_device(ctx);
  fc_jit_env env = fc_jit_env_now();
  fc_image_result res;
  r = fc_image_check(image, fc_image_size(image), FC_IN_ANY, &env, d->major * 10 + d->minor, &res);
  write_log(&log, res.log);
  if (r != CUDA_SUCCESS) return r;
  struct CUmod_st *m = calloc(1, sizeof *m);
  if (!m || push(&modules, &n_modules, &cap_modules, m) != 0) {
    free(m);
    free(res.kernels);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  m->ctx = ctx;
  m->kernels = res.kernels;
  if (res.jitted) fc_g.jits++;
  *out = m;
  return CUDA_SUCCESS;
}

static CUresult module_get_function(CUfunction *out, CUmodule hmod, const char *name) {
  struct CUmod_st *m = live_module(hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < m->n_funcs; i++) {
    struct CUfunc_st *f = m->funcs[i];
    if (strcmp(f->name, name) == 0) {
      *out = f;
      return CUDA_SUCCESS;
    }
  }
  if (strlen(name) >= FC_NAME_MAX || !list_has(m->kernels, name)) return CUDA_ERROR_NOT_FOUND;
  struct CUfunc_st *f = calloc(1, sizeof *f);
  if (!f || push(&m->funcs, &m->n_funcs, &m->cap_funcs, f) != 0) {
    free(f);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  f->mod = m;
  snprintf(f->name, sizeof f->name, "%s", name);
  f->def = fc_kernel_find(name);
  *out = f;
  return CUDA_SUCCESS;
}

const fc_kernel_def *fc_kernel_find(const char *name) {
  for (size_t i = 0; i < fc_kernel_def_count; i++)
    if (strcmp(fc_kernel_defs[i].name, name) == 0) return &fc_kernel_defs[i];
  return NULL;
}

static CUresult module_unload(CUmodule hmod) {
  size_t i = index_of(modules, n_modules, hmod);
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_HANDLE;
  free_module(MODULE(i));
  modules[i] = modules[--n_modules];
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  FC_CALL(cuModuleLoadData, module_load(m, image, 0, NULL, NULL));
}
FC_EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *opts, void **vals) {
  FC_CALL(cuModuleLoadDataEx, module_load(m, image, n, opts, vals));
}
FC_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  FC_CALL(cuModuleGetFunction, module_get_function(f, m, name));
}
FC_EXPORT CUresult cuModuleUnload(CUmodule m) { FC_CALL(cuModuleUnload, module_unload(m)); }
FC_SAME_TYPE(cuModuleLoadData, PFN_cuModuleLoadData);
FC_SAME_TYPE(cuModuleLoadDataEx, PFN_cuModuleLoadDataEx);
FC_SAME_TYPE(cuModuleGetFunction, PFN_cuModuleGetFunction);
FC_SAME_TYPE(cuModuleUnload, PFN_cuModuleUnload);

/* ------------------------------------------------------------ linker --- */

static CUresult link_create(unsigned n, CUjit_option *opts, void **vals, CUlinkState *out) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  fc_device *d = fc_ctx_device(ctx);
  int target = d->major * 10 + d->minor;
  char variant = 0;
  jit_log log = {0};
  r = read_options(n, opts, vals, &log, &target, &variant);
  if (r != CUDA_SUCCESS) return r;
  struct CUlinkState_st *l = calloc(1, sizeof *l);
  if (!l || push(&links, &n_links, &cap_links, l) != 0) {
    free(l);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  l->ctx = ctx;
  l->target_sm = target;
  l->variant = variant;
  l->log = log;
  *out = l;
  return CUDA_SUCCESS;
}

static CUresult append_kernels(struct CUlinkState_st *l, const char *kernels) {
  size_t add = strlen(kernels);
  if (add == 0) return CUDA_SUCCESS;
  char *grown = realloc(l->kernels, l->kernels_len + add + 2);
  if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
  l->kernels = grown;
  if (l->kernels_len) l->kernels[l->kernels_len++] = ',';
  memcpy(l->kernels + l->kernels_len, kernels, add + 1);
  l->kernels_len += add;
  return CUDA_SUCCESS;
}

/* Inputs are judged as module images are, for the link target. CU_JIT_INPUT_
 * OBJECT, LIBRARY and NVVM (3, 4, 5) exist in cuda.h but are not modelled:
 * CUDA_ERROR_NOT_SUPPORTED, so a test that needs them sees the gap. */
static CUresult link_add(CUlinkState hl, CUjitInputType type, void *data, size_t size, unsigned n, CUjit_option *opts,
                         void **vals) {
  struct CUlinkState_st *l = live_link(hl);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  fc_input_kind kind;
  switch (type) {
    case CU_JIT_INPUT_CUBIN:
      kind = FC_IN_CUBIN;
      break;
    case CU_JIT_INPUT_PTX:
      kind = FC_IN_PTX;
      break;
    case CU_JIT_INPUT_FATBINARY:
      kind = FC_IN_FATBIN;
      break;
    case 3:
    case 4:
    case 5:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (!data || size == 0) return CUDA_ERROR_INVALID_VALUE;
  jit_log log = l->log;
  CUresult r = read_options(n, opts, vals, &log, NULL, NULL);
  if (r != CUDA_SUCCESS) return r;
  fc_jit_env env = fc_jit_env_now();
  fc_image_result res;
  r = fc_image_check(data, size, kind, &env, l->target_sm, &res);
  if (r != CUDA_SUCCESS) {
    write_log(&log, res.log);
    return r;
  }
  if (res.jitted) fc_g.jits++;
  if (res.variant == 'a') l->variant = 'a';
  r = append_kernels(l, res.kernels);
  free(res.kernels);
  if (r == CUDA_SUCCESS) l->n_inputs++;
  return r;
}

/* The output is a FAKECUBIN (README.md) that this fake's cuModuleLoadData
 * accepts under the cubin rules; it lives until cuLinkDestroy. Completing a
 * link with no input is CUDA_ERROR_INVALID_VALUE [U]. */
static CUresult link_complete(CUlinkState hl, void **cubin, size_t *size) {
  struct CUlinkState_st *l = live_link(hl);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  if (!cubin || !size) return CUDA_ERROR_INVALID_VALUE;
  if (l->n_inputs == 0) {
    write_log(&l->log, "fakecuda: cuLinkComplete with no input");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!l->cubin && fc_fakecubin_build(l->target_sm, l->variant, fc_g.cfg.driver, l->kernels ? l->kernels : "",
                                      &l->cubin, &l->cubin_size) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *cubin = l->cubin;
  *size = l->cubin_size;
  return CUDA_SUCCESS;
}

static CUresult link_destroy(CUlinkState hl) {
  size_t i = index_of(links, n_links, hl);
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_HANDLE;
  free_link(LINK(i));
  links[i] = links[--n_links];
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuLinkCreate_v2(unsigned n, CUjit_option *opts, void **vals, CUlinkState *st) {
  FC_CALL(cuLinkCreate_v2, link_create(n, opts, vals, st));
}
/* Same signature as _v2. */
FC_EXPORT CUresult cuLinkCreate(unsigned n, CUjit_option *opts, void **vals, CUlinkState *st) {
  FC_CALL(cuLinkCreate_v2, link_create(n, opts, vals, st));
}
FC_EXPORT CUresult cuLinkAddData_v2(CUlinkState st, CUjitInputType type, void *data, size_t size, const char *name,
                                    unsigned n, CUjit_option *opts, void **vals) {
  (void)name; /* only named in logs */
  FC_CALL(cuLinkAddData_v2, link_add(st, type, data, size, n, opts, vals));
}
FC_EXPORT CUresult cuLinkAddData(CUlinkState st, CUjitInputType type, void *data, size_t size, const char *name,
                                 unsigned n, CUjit_option *opts, void **vals) {
  (void)name;
  FC_CALL(cuLinkAddData_v2, link_add(st, type, data, size, n, opts, vals));
}
FC_EXPORT CUresult cuLinkComplete(CUlinkState st, void **cubin, size_t *size) {
  FC_CALL(cuLinkComplete, link_complete(st, cubin, size));
}
FC_EXPORT CUresult cuLinkDestroy(CUlinkState st) { FC_CALL(cuLinkDestroy, link_destroy(st)); }
FC_SAME_TYPE(cuLinkCreate_v2, PFN_cuLinkCreate);
FC_SAME_TYPE(cuLinkCreate, PFN_cuLinkCreate);
FC_SAME_TYPE(cuLinkAddData_v2, PFN_cuLinkAddData);
FC_SAME_TYPE(cuLinkAddData, PFN_cuLinkAddData);
FC_SAME_TYPE(cuLinkComplete, PFN_cuLinkComplete);
FC_SAME_TYPE(cuLinkDestroy, PFN_cuLinkDestroy);

/* ------------------------------------------------------------ launch --- */

/* A launch waiting on its stream: the kernel, the geometry and a copy of
 * every parameter's value taken at the call (cuda.h: kernelParams are read
 * when cuLaunchKernel is called). */
typedef struct launch_op {
  const struct CUctx_st *ctx;
  const fc_kernel_def *def;
  unsigned grid[3], block[3], shmem;
  uint64_t values[FC_KERNEL_MAX_PARAMS][2]; /* 16 bytes each: every subset type fits */
} launch_op;

/* Pointer parameters are checked again when the launch runs (a buffer can
 * be freed in between by another context) and translated to the host
 * memory behind them. */
static CUresult launch_run(void *p, char *msg, size_t cap) {
  launch_op *l = p;
  const fc_kernel_def *d = l->def;
  uint64_t host[FC_KERNEL_MAX_PARAMS][2];
  void *args[FC_KERNEL_MAX_PARAMS];
  memcpy(host, l->values, sizeof host);
  for (int i = 0; i < d->n_params; i++) {
    args[i] = host[i];
    if (!d->param_is_ptr[i]) continue;
    CUdeviceptr dp;
    memcpy(&dp, l->values[i], sizeof dp);
    void *h;
    char why[256];
    if (fc_mem_translate(l->ctx, dp, &h, why, sizeof why) != CUDA_SUCCESS) {
      snprintf(msg, cap, "kernel %s, parameter %d (%s): %s", d->name, i, d->param_name[i], why);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    memcpy(host[i], &h, sizeof h);
  }
  CUresult r = fc_exec_launch(l->ctx, d, (const uint64_t(*)[2])l->values, args, l->grid, l->block, l->shmem, msg, cap);
  for (int i = 0; i < d->n_params && r == CUDA_SUCCESS; i++) {
    if (!d->param_is_ptr[i]) continue;
    CUdeviceptr dp;
    memcpy(&dp, l->values[i], sizeof dp);
    char why[256];
    r = fc_mem_check_guards(dp, why, sizeof why);
    if (r != CUDA_SUCCESS) snprintf(msg, cap, "kernel %s, parameter %d (%s): %s", d->name, i, d->param_name[i], why);
  }
  return r;
}

static void launch_refused(const char *kernel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void launch_refused(const char *kernel, const char *fmt, ...) {
  char why[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  fc_note_error("cuLaunchKernel: kernel %s: %s", kernel, why);
}

/* Launch checks (limits as in device_attribute, fakecuda.c): a function
 * handle that is live (NULL or stale: CUDA_ERROR_INVALID_HANDLE), a current
 * context that owns it (another context's function is
 * CUDA_ERROR_INVALID_CONTEXT [U]); a live stream of that context; every dimension >= 1; block
 * <= 1024 x 1024 x 64 and <= 1024 threads; grid <= (2^31-1) x 65535 x 65535;
 * dynamic shared memory <= 48 KiB [S: larger needs an opt-in attribute the
 * fake does not model]; not both kernelParams and extra (cuda.h). Errors:
 * CUDA_ERROR_INVALID_VALUE [S: the runtime reports these as
 * cudaErrorInvalidConfiguration, "a kernel launch is requesting resources
 * that can never be satisfied by the current device"; the driver's code is
 * not documented].
 *
 * Then the parameters: the double unpacks kernelParams with the kernel's
 * signature; every pointer parameter must be NULL or point into a live
 * allocation of the launch's device, else CUDA_ERROR_ILLEGAL_ADDRESS (700)
 * and a message naming the kernel and the parameter. (A real GPU would fault
 * when the kernel touches the address, report 700 at the next
 * synchronisation and keep the context unusable; the double says it at the
 * launch, where the mistake was made, and leaves the context usable.) */
static CUresult launch(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shmem, CUstream s, void **params, void **extra) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  struct CUfunc_st *f = live_function(hf);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (f->mod->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT;
  /* "A kernel launch will fail if it is issued to a stream that is not
   * associated to the current device" (CUDA C Programming Guide, Stream and
   * Event Behavior; the code is [U]). */
  if (!fc_stream_is_valid(s) || fc_stream_ctx(s) != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if (bx > 1024 || by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (gx > 2147483647u || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (shmem > 49152) return CUDA_ERROR_INVALID_VALUE;
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  const fc_kernel_def *d = f->def;
  if (!d) {
    launch_refused(f->name, "the test double has no host build of it (it builds the kernels/ sources)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (d->n_params > 0 && !params) {
    /* The extra form (CU_LAUNCH_PARAM_BUFFER_POINTER) is not modelled. */
    launch_refused(f->name, "pass the parameters through kernelParams (the double does not read 'extra')");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  launch_op *l = calloc(1, sizeof *l);
  if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
  *l = (launch_op){ctx, d, {gx, gy, gz}, {bx, by, bz}, shmem, {{0}}};
  for (int i = 0; i < d->n_params; i++) {
    if (!params[i]) {
      launch_refused(f->name, "kernelParams[%d] (%s) is NULL", i, d->param_name[i]);
      free(l);
      return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(l->values[i], params[i], d->param_size[i]);
    if (!d->param_is_ptr[i]) continue;
    CUdeviceptr dp = 0;
    memcpy(&dp, l->values[i], sizeof(void *));
    void *h;
    char why[256];
    if (fc_mem_translate(ctx, dp, &h, why, sizeof why) != CUDA_SUCCESS) {
      launch_refused(f->name, "parameter %d (%s): %s", i, d->param_name[i], why);
      snprintf(fc_g.last_kernel, sizeof fc_g.last_kernel, "%s", f->name);
      free(l);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  r = fc_enqueue(s, launch_run, free, l, d->name, NULL);
  if (r != CUDA_SUCCESS) return r;
  fc_g.launches++;
  snprintf(fc_g.last_kernel, sizeof fc_g.last_kernel, "%s", f->name);
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  FC_CALL(cuLaunchKernel, launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}
FC_SAME_TYPE(cuLaunchKernel, PFN_cuLaunchKernel);
