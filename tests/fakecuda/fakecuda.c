/* Fake libcuda: a test double of the CUDA driver for machines without a GPU.
 * Ember loads it with EMBER_LIBCUDA=<path>. It pretends to be the devices and
 * driver version the environment names (README.md), validates module images
 * the way the driver does (fakecuda_images.c), keeps device memory in host
 * memory (fakecuda_memory.c), runs no kernels (fakecuda_modules.c), and fails
 * any entry point on demand (FAKECUDA_FAIL).
 *
 * This file: the global lock and the rules every call obeys (stub library,
 * cuInit first, fault injection), cuInit and its configuration, error names,
 * devices, primary contexts and the per-thread context stack, test hooks. */
#include "fakecuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"

#define CTX_STACK_MAX 64

fc_state fc_g;

static pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;

/* The per-thread context stack of the driver API. Stacks of a previous
 * configuration (generation) are dropped on first use. */
static _Thread_local struct {
  unsigned generation;
  int depth;
  struct CUctx_st *stack[CTX_STACK_MAX];
} tls;

/* ------------------------------------------------------------- guard --- */

/* FAKECUDA_STUB=1: the toolkit's stubs/libcuda.so, where every entry point
 * returns CUDA_ERROR_STUB_LIBRARY (34) and writes no output (checked LOCAL
 * against CUDA 13.0's stub: cuInit, cuDriverGetVersion, cuDeviceGetCount,
 * cuGetErrorName and cuGetErrorString all return 34 and leave their
 * outputs untouched). Read on every call, as the choice of library would be. */
static int stub_mode(void) {
  const char *s = getenv("FAKECUDA_STUB");
  return s && *s && strcmp(s, "0") != 0;
}

/* The calls the real driver answers before cuInit (cuda.h documents
 * cuDriverGetVersion, cuGetErrorName and cuGetErrorString as usable without it). */
static int works_before_init(fc_entry e) {
  return e == FC_cuDriverGetVersion || e == FC_cuGetErrorName || e == FC_cuGetErrorString;
}

/* Counts call e and returns the code a FAKECUDA_FAIL rule gives it, or 0. */
static CUresult injected(fc_entry e) {
  unsigned long n = ++fc_g.counters[e];
  for (int i = 0; i < fc_g.cfg.n_rules; i++) {
    const fc_fail_rule *r = &fc_g.cfg.rules[i];
    if (r->entry == e && (r->nth == 0 || r->nth == n)) return r->code;
  }
  return CUDA_SUCCESS;
}

CUresult fc_enter(fc_entry e) {
  if (stub_mode()) return CUDA_ERROR_STUB_LIBRARY;
  pthread_mutex_lock(&fc_lock);
  CUresult r = CUDA_SUCCESS;
  if (!fc_g.initialized)
    r = works_before_init(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; /* counted only after cuInit */
  else
    r = injected(e);
  if (r != CUDA_SUCCESS) pthread_mutex_unlock(&fc_lock);
  return r;
}

void fc_leave(void) { pthread_mutex_unlock(&fc_lock); }

void fc_lock_raw(void) { pthread_mutex_lock(&fc_lock); }

/* ------------------------------------------------------ configuration --- */

static void teardown(void) {
  fc_queue_release(NULL);
  fc_graph_release(NULL);
  fc_modules_release(NULL);
  fc_memory_release(NULL);
  for (int i = 0; i < FC_MAX_DEVICES; i++) free(fc_g.dev[i].primary);
  free(fc_g.snapshot);
  unsigned generation = fc_g.generation;
  memset(&fc_g, 0, sizeof fc_g);
  fc_g.generation = generation + 1;
}

/* Replaces the whole state with the configuration the environment names. */
static CUresult configure(char *snapshot) {
  teardown();
  char err[sizeof fc_g.config_error];
  if (fc_config_read(&fc_g.cfg, err, sizeof err) != 0) {
    free(snapshot);
    memset(&fc_g.cfg, 0, sizeof fc_g.cfg);
    snprintf(fc_g.config_error, sizeof fc_g.config_error, "%s", err);
    fprintf(stderr, "fakecuda: %s\n", err);
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (int i = 0; i < fc_g.cfg.n_visible; i++) {
    fc_device *d = &fc_g.dev[i];
    const fc_device_cfg *c = &fc_g.cfg.phys[fc_g.cfg.visible[i]];
    d->phys = fc_g.cfg.visible[i];
    d->major = c->major;
    d->minor = c->minor;
    memcpy(d->name, c->name, sizeof d->name);
    d->mem_total = fc_g.cfg.mem_bytes;
    d->primary = calloc(1, sizeof *d->primary);
    if (!d->primary) {
      free(snapshot);
      teardown();
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->primary->ordinal = i;
  }
  fc_g.snapshot = snapshot;
  fc_g.configured = 1;
  fc_g.seed = fc_g.cfg.seed;
  fc_exec_seed(fc_g.seed);
  return CUDA_SUCCESS;
}

/* cuInit reads the environment when it changed since the last configuration
 * (or after fakecuda_reset), so one test process can reconfigure; calling it
 * again under the same environment is a no-op as with the real driver, and
 * keeps state and fault-injection counters. */
FC_EXPORT CUresult cuInit(unsigned flags) {
  if (stub_mode()) return CUDA_ERROR_STUB_LIBRARY;
  pthread_mutex_lock(&fc_lock);
  CUresult r = CUDA_SUCCESS;
  char *snap = fc_config_snapshot();
  if (!snap) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else if (!fc_g.configured || strcmp(snap, fc_g.snapshot) != 0) {
    r = configure(snap);
  } else {
    free(snap);
  }
  if (r == CUDA_SUCCESS) r = injected(FC_cuInit);
  if (r == CUDA_SUCCESS && flags != 0) r = CUDA_ERROR_INVALID_VALUE; /* cuda.h: "Flags ... must be 0" */
  /* A driver with no visible GPU fails cuInit with CUDA_ERROR_NO_DEVICE (cuda-compat.md section 6). */
  if (r == CUDA_SUCCESS && fc_g.cfg.n_visible == 0) r = CUDA_ERROR_NO_DEVICE;
  fc_g.initialized = r == CUDA_SUCCESS;
  pthread_mutex_unlock(&fc_lock);
  return r;
}
FC_SAME_TYPE(cuInit, PFN_cuInit);

static CUresult driver_version(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (fc_g.initialized) {
    *v = fc_g.cfg.driver;
    return CUDA_SUCCESS;
  }
  int d;
  if (fc_config_driver(&d, fc_g.config_error, sizeof fc_g.config_error) != 0) return CUDA_ERROR_INVALID_VALUE;
  *v = d;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuDriverGetVersion(int *version) { FC_CALL(cuDriverGetVersion, driver_version(version)); }
FC_SAME_TYPE(cuDriverGetVersion, PFN_cuDriverGetVersion);

/* ------------------------------------------------------------ errors --- */

/* Names as cuda.h (CUDA 13.0) spells them. Texts: the CUDA 13.0 runtime's
 * cudaGetErrorString for the same number (checked LOCAL with libcudart 13.0;
 * cuda-compat.md section 6), which is the wording users see. */
static const struct {
  CUresult code;
  const char *name, *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
     "API call is not supported in the installed CUDA driver"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_JIT_COMPILATION_DISABLED, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility was attempted on non supported HW"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE",
     "operation would result in a merge of separate capture sequences"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* Unknown codes: *str = NULL and CUDA_ERROR_INVALID_VALUE (cuda.h, cuGetErrorName). */
static CUresult error_lookup(CUresult e, const char **str, int want_name) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++) {
    if (error_table[i].code == e) {
      *str = want_name ? error_table[i].name : error_table[i].text;
      return CUDA_SUCCESS;
    }
  }
  *str = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

FC_EXPORT CUresult cuGetErrorName(CUresult e, const char **name) { FC_CALL(cuGetErrorName, error_lookup(e, name, 1)); }
FC_SAME_TYPE(cuGetErrorName, PFN_cuGetErrorName);

FC_EXPORT CUresult cuGetErrorString(CUresult e, const char **str) {
  FC_CALL(cuGetErrorString, error_lookup(e, str, 0));
}
FC_SAME_TYPE(cuGetErrorString, PFN_cuGetErrorString);

/* ----------------------------------------------------------- devices --- */

static fc_device *device_at(CUdevice d) { return d >= 0 && d < fc_g.cfg.n_visible ? &fc_g.dev[d] : NULL; }

static CUresult device_count(int *count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = fc_g.cfg.n_visible;
  return CUDA_SUCCESS;
}

static CUresult device_get(CUdevice *dev, int ordinal) {
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (!device_at(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

static CUresult device_name(char *name, int len, CUdevice dev) {
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", d->name);
  return CUDA_SUCCESS;
}

/* Attribute values: compute capability and PCI location from the
 * configuration; launch limits of every CC >= 3.0 (CUDA Programming Guide,
 * "Technical Specifications per Compute Capability": 1024 threads per block,
 * block 1024 x 1024 x 64, grid (2^31-1) x 65535 x 65535, warp 32, 48 KiB
 * static shared memory per block, 64 KiB constant memory). Anything else is
 * CUDA_ERROR_INVALID_VALUE so a gap in the fake is visible. */
static CUresult device_attribute(int *value, int attrib, CUdevice dev) {
  static const struct {
    int attrib, value;
  } fixed[] = {
      {1, 1024},       /* MAX_THREADS_PER_BLOCK */
      {2, 1024},       /* MAX_BLOCK_DIM_X */
      {3, 1024},       /* MAX_BLOCK_DIM_Y */
      {4, 64},         /* MAX_BLOCK_DIM_Z */
      {5, 2147483647}, /* MAX_GRID_DIM_X */
      {6, 65535},      /* MAX_GRID_DIM_Y */
      {7, 65535},      /* MAX_GRID_DIM_Z */
      {8, 49152},      /* MAX_SHARED_MEMORY_PER_BLOCK */
      {9, 65536},      /* TOTAL_CONSTANT_MEMORY */
      {10, 32},        /* WARP_SIZE */
      {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
      {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
  };
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    if (fixed[i].attrib == attrib) {
      *value = fixed[i].value;
      return CUDA_SUCCESS;
    }
  }
  if (attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    *value = fc_sm_count_for(d->major, d->minor);
  else if (attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
    *value = d->phys + 1;
  else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    *value = d->major;
  else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    *value = d->minor;
  else if (attrib == CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)
    *value = !fc_g.cfg.no_map_host;
  else if (attrib == CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
    *value = 1; /* every 64-bit process on CC >= 2.0 */
  else
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static CUresult device_total_mem(size_t *bytes, CUdevice dev) {
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = d->mem_total;
  return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev) {
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  fc_uuid_of(d->phys, uuid);
  return CUDA_SUCCESS;
}

/* "[domain]:[bus]:[device].[function]", all hexadecimal, 13 bytes with the
 * NUL (cuda.h, cuDeviceGetPCIBusId). Lower-case hex is [U]. */
static CUresult device_pci_bus_id(char *id, int len, CUdevice dev) {
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(id, (size_t)len, "%04x:%02x:%02x.0", 0, d->phys + 1, 0);
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuDeviceGetCount(int *count) { FC_CALL(cuDeviceGetCount, device_count(count)); }
FC_SAME_TYPE(cuDeviceGetCount, PFN_cuDeviceGetCount);
FC_EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) { FC_CALL(cuDeviceGet, device_get(dev, ordinal)); }
FC_SAME_TYPE(cuDeviceGet, PFN_cuDeviceGet);
FC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  FC_CALL(cuDeviceGetName, device_name(name, len, dev));
}
FC_SAME_TYPE(cuDeviceGetName, PFN_cuDeviceGetName);
FC_EXPORT CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
  FC_CALL(cuDeviceGetAttribute, device_attribute(value, attrib, dev));
}
FC_SAME_TYPE(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute);
FC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  FC_CALL(cuDeviceTotalMem_v2, device_total_mem(bytes, dev));
}
FC_SAME_TYPE(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem);
FC_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
  FC_CALL(cuDeviceGetUuid_v2, device_uuid(uuid, dev));
}
FC_SAME_TYPE(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid);
/* Same signature as _v2 (the versions differ only for MIG instances, which the fake has none of). */
FC_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { FC_CALL(cuDeviceGetUuid_v2, device_uuid(uuid, dev)); }
FC_SAME_TYPE(cuDeviceGetUuid, PFN_cuDeviceGetUuid);
FC_EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
  FC_CALL(cuDeviceGetPCIBusId, device_pci_bus_id(id, len, dev));
}
FC_SAME_TYPE(cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId);

/* ---------------------------------------------------------- contexts --- */

int fc_ctx_is_live(const struct CUctx_st *ctx) {
  if (!ctx) return 0;
  for (int i = 0; i < fc_g.cfg.n_visible; i++)
    if (fc_g.dev[i].primary == ctx) return ctx->refcount > 0;
  return 0;
}

fc_device *fc_ctx_device(const struct CUctx_st *ctx) { return &fc_g.dev[ctx->ordinal]; }

fc_jit_env fc_jit_env_now(void) {
  fc_jit_env env = {fc_g.cfg.driver, fc_g.cfg.no_jit, fc_g.cfg.jit_disabled, fc_g.cfg.force_ptx_jit};
  return env;
}

static void tls_sync(void) {
  if (tls.generation != fc_g.generation) {
    tls.generation = fc_g.generation;
    tls.depth = 0;
  }
}

CUresult fc_current_ctx(struct CUctx_st **ctx) {
  tls_sync();
  if (tls.depth == 0 || !fc_ctx_is_live(tls.stack[tls.depth - 1])) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = tls.stack[tls.depth - 1];
  return (*ctx)->sticky; /* a context that faulted stays unusable */
}

static CUresult primary_retain(CUcontext *pctx, CUdevice dev) {
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  d->primary->refcount++;
  *pctx = d->primary;
  return CUDA_SUCCESS;
}

/* The last release destroys the primary context and everything made in it
 * (pending work, memory, modules, streams, events, link states) after its
 * work has run, as the driver does; the next retain makes a fresh one,
 * without the old one's sticky error. A release with no retain outstanding
 * is CUDA_ERROR_INVALID_CONTEXT [U]. */
static CUresult primary_release(CUdevice dev) {
  fc_device *d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  struct CUctx_st *c = d->primary;
  if (c->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->refcount == 1) fc_run_ctx(c);
  if (--c->refcount == 0) {
    fc_queue_release(c);
    fc_graph_release(c);
    fc_modules_release(c);
    fc_memory_release(c);
    c->sticky = CUDA_SUCCESS;
    c->legacy_last = 0;
  }
  return CUDA_SUCCESS;
}

static CUresult ctx_push(CUcontext ctx) {
  tls_sync();
  if (!fc_ctx_is_live(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls.depth == CTX_STACK_MAX) return CUDA_ERROR_INVALID_VALUE; /* the fake's own limit */
  tls.stack[tls.depth++] = ctx;
  return CUDA_SUCCESS;
}

static CUresult ctx_pop(CUcontext *pctx) {
  tls_sync();
  if (tls.depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext top = tls.stack[--tls.depth];
  if (pctx) *pctx = top;
  return CUDA_SUCCESS;
}

/* cuda.h: replaces the top of the stack (pushes on an empty one); NULL pops. */
static CUresult ctx_set(CUcontext ctx) {
  tls_sync();
  if (!ctx) {
    if (tls.depth > 0) tls.depth--;
    return CUDA_SUCCESS;
  }
  if (!fc_ctx_is_live(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls.depth == 0) tls.depth = 1;
  tls.stack[tls.depth - 1] = ctx;
  return CUDA_SUCCESS;
}

static CUresult ctx_get(CUcontext *pctx) {
  tls_sync();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = tls.depth ? tls.stack[tls.depth - 1] : NULL;
  return CUDA_SUCCESS;
}

FC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  FC_CALL(cuDevicePrimaryCtxRetain, primary_retain(pctx, dev));
}
FC_SAME_TYPE(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain);
FC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FC_CALL(cuDevicePrimaryCtxRelease_v2, primary_release(dev));
}
FC_SAME_TYPE(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease);
FC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  FC_CALL(cuDevicePrimaryCtxRelease_v2, primary_release(dev));
}
FC_SAME_TYPE(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease);
FC_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) { FC_CALL(cuCtxPushCurrent_v2, ctx_push(ctx)); }
FC_SAME_TYPE(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent);
FC_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { FC_CALL(cuCtxPushCurrent_v2, ctx_push(ctx)); }
FC_SAME_TYPE(cuCtxPushCurrent, PFN_cuCtxPushCurrent);
FC_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) { FC_CALL(cuCtxPopCurrent_v2, ctx_pop(pctx)); }
FC_SAME_TYPE(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent);
FC_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx) { FC_CALL(cuCtxPopCurrent_v2, ctx_pop(pctx)); }
FC_SAME_TYPE(cuCtxPopCurrent, PFN_cuCtxPopCurrent);
FC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { FC_CALL(cuCtxSetCurrent, ctx_set(ctx)); }
FC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) { FC_CALL(cuCtxGetCurrent, ctx_get(pctx)); }

/* The device of the current context (cuda.h: CUDA_ERROR_INVALID_CONTEXT
 * without one). Not used by Ember's runtime; the double of cuDNN learns its
 * handle's device with it, as cuDNN does through the runtime. */
static CUresult ctx_device(CUdevice *dev) {
  struct CUctx_st *ctx;
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  tls_sync();
  if (tls.depth == 0 || !fc_ctx_is_live(tls.stack[tls.depth - 1])) return CUDA_ERROR_INVALID_CONTEXT;
  ctx = tls.stack[tls.depth - 1];
  *dev = ctx->ordinal;
  return CUDA_SUCCESS;
}
FC_EXPORT CUresult cuCtxGetDevice(CUdevice *dev) { FC_CALL(cuCtxGetDevice, ctx_device(dev)); }
FC_SAME_TYPE(cuCtxGetDevice, PFN_cuCtxGetDevice);

/* -------------------------------------------------------- test hooks --- */

FC_EXPORT void fakecuda_reset(void) {
  pthread_mutex_lock(&fc_lock);
  teardown();
  pthread_mutex_unlock(&fc_lock);
}

FC_EXPORT unsigned long fakecuda_launch_count(void) {
  pthread_mutex_lock(&fc_lock);
  unsigned long n = fc_g.launches;
  pthread_mutex_unlock(&fc_lock);
  return n;
}

FC_EXPORT unsigned long fakecuda_jit_count(void) {
  pthread_mutex_lock(&fc_lock);
  unsigned long n = fc_g.jits;
  pthread_mutex_unlock(&fc_lock);
  return n;
}

/* The returned text stays valid until the next call into the fake. */
FC_EXPORT const char *fakecuda_last_launch(void) { return fc_g.last_kernel; }
FC_EXPORT const char *fakecuda_config_error(void) { return fc_g.config_error; }

FC_EXPORT unsigned long fakecuda_call_count(const char *name) {
  fc_entry e;
  if (!name || fc_entry_lookup(name, strlen(name), &e) != 0) return 0;
  pthread_mutex_lock(&fc_lock);
  unsigned long n = fc_g.counters[e];
  pthread_mutex_unlock(&fc_lock);
  return n;
}

/* The seed of the orders the double draws (threads, blocks, streams):
 * FAKECUDA_SEED, or the clock's when it is unset. Setting it restarts the
 * sequence, so a test can replay or vary a launch. */
FC_EXPORT unsigned long long fakecuda_seed(void) {
  pthread_mutex_lock(&fc_lock);
  unsigned long long s = fc_g.seed;
  pthread_mutex_unlock(&fc_lock);
  return s;
}

FC_EXPORT void fakecuda_set_seed(unsigned long long seed) {
  pthread_mutex_lock(&fc_lock);
  fc_g.seed = seed;
  fc_exec_seed(seed);
  pthread_mutex_unlock(&fc_lock);
}

/* Work of a sibling double (tests/fakecublas, tests/fakecudnn) on stream s
 * of the current context, ordered like a kernel launch on it; run does it
 * when the queue gets there, and may then reach device memory through
 * fakecuda_device_span. Needs cuInit; not counted, not subject to
 * FAKECUDA_FAIL (the library entry point that issued it has its own). */
FC_EXPORT CUresult fakecuda_enqueue_work(CUstream s, fakecuda_work_fn run, void (*release)(void *), void *payload,
                                         const char *what) {
  if (!run) {
    if (release) release(payload);
    return CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_lock(&fc_lock);
  struct CUctx_st *ctx = NULL;
  CUresult r = fc_g.initialized ? fc_current_ctx(&ctx) : CUDA_ERROR_NOT_INITIALIZED;
  /* A stream of another context is refused as cuLaunchKernel refuses it. */
  if (r == CUDA_SUCCESS && fc_stream_is_valid(s) && fc_stream_ctx(s) != ctx) r = CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS)
    r = fc_enqueue(s, run, release, payload, what ? what : "library work", NULL);
  else if (release)
    release(payload); /* as fc_enqueue does when issuing fails */
  pthread_mutex_unlock(&fc_lock);
  return r;
}

/* The host bytes behind [p, p + bytes) of device memory, for a run function
 * of fakecuda_enqueue_work only (it runs under the fake's lock, in the
 * work's context): CUDA_ERROR_ILLEGAL_ADDRESS with the reason in msg when
 * the range is not inside one live allocation of that context, which then
 * fails the work as a kernel's bad access would. */
FC_EXPORT CUresult fakecuda_device_span(CUdeviceptr p, size_t bytes, void **host, char *msg, size_t cap) {
  const struct CUctx_st *ctx = fc_running_ctx();
  if (!ctx) {
    snprintf(msg, cap, "fakecuda_device_span called outside a run function of fakecuda_enqueue_work");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return fc_mem_span(ctx, p, bytes, host, msg, cap);
}

FC_SAME_TYPE(fakecuda_enqueue_work, fakecuda_enqueue_work_fn);
FC_SAME_TYPE(fakecuda_device_span, fakecuda_device_span_fn);
FC_SAME_TYPE(fakecuda_reset, fakecuda_reset_fn);
FC_SAME_TYPE(fakecuda_seed, fakecuda_seed_fn);
FC_SAME_TYPE(fakecuda_set_seed, fakecuda_set_seed_fn);
FC_SAME_TYPE(fakecuda_launch_count, fakecuda_count_fn);
FC_SAME_TYPE(fakecuda_jit_count, fakecuda_count_fn);
FC_SAME_TYPE(fakecuda_last_launch, fakecuda_text_fn);
FC_SAME_TYPE(fakecuda_config_error, fakecuda_text_fn);
FC_SAME_TYPE(fakecuda_call_count, fakecuda_call_count_fn);

/* ---------------------------------------------------- what it lacks --- */

/* The driver's private tables. NVRTC 13 opens libcuda.so.1 itself during
 * compilation and asks for these; the real driver hands out function tables
 * we do not model, so the fake says "not supported" and NVRTC carries on
 * without them (it does not need the driver to make a cubin). */
FC_EXPORT CUresult cuGetExportTable(const void **table, const void *id) {
  (void)id;
  if (table) *table = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* Unloading the fake frees what it holds, so leak checkers see a clean exit. */
__attribute__((destructor)) static void fakecuda_unload(void) {
  pthread_mutex_lock(&fc_lock);
  teardown();
  fc_exec_release();
  pthread_mutex_unlock(&fc_lock);
}
