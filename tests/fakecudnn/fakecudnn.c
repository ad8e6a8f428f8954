/* Fake libcudnn: a test double of cuDNN's legacy C API (README.md) for
 * machines without a GPU. It runs on the libcuda double (tests/fakecuda):
 * operations are work on the handle's stream, reading and writing that
 * double's device memory, so they run in stream order and a bad operand
 * fails at the synchronisation like a faulting kernel.
 *
 * This file: the lock and the rules every call obeys (configuration, call
 * counts, fault injection, cuDNN 8 numbering), the registry of live objects,
 * versions and error strings, handles and the binding to the driver, and
 * the test hooks. */
#include "fakecudnn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_internal.h"

fd_state fd_g;
fd_driver fd_drv;

static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;

/* The last operation (fakecudnn_last_call) and, per thread as
 * cudnnGetLastErrorString has it, why the last call was refused. */
static char last_call[768];
static _Thread_local char last_error[512];
static _Thread_local char hook_text[768];

/* --------------------------------------------------------- registry --- */

typedef struct fd_obj {
  void *p;
  fd_kind kind;
} fd_obj;

static fd_obj *objs;
static size_t n_objs, cap_objs;

int fd_register(void *obj, fd_kind kind) {
  if (n_objs == cap_objs) {
    size_t c = cap_objs ? cap_objs * 2 : 64;
    fd_obj *g = realloc(objs, c * sizeof *g);
    if (!g) return -1;
    objs = g;
    cap_objs = c;
  }
  objs[n_objs++] = (fd_obj){obj, kind};
  return 0;
}

static size_t find_obj(const void *obj, fd_kind kind) {
  for (size_t i = n_objs; i-- > 0;)
    if (objs[i].p == obj && objs[i].kind == kind) return i;
  return SIZE_MAX;
}

int fd_unregister(void *obj, fd_kind kind) {
  size_t i = find_obj(obj, kind);
  if (i == SIZE_MAX) return -1;
  objs[i] = objs[--n_objs];
  return 0;
}

int fd_is_live(const void *obj, fd_kind kind) { return obj && find_obj(obj, kind) != SIZE_MAX; }

size_t fd_live_count(fd_kind kind) {
  size_t n = 0;
  for (size_t i = 0; i < n_objs; i++) n += objs[i].kind == kind;
  return n;
}

/* ------------------------------------------------------------ guard --- */

static void release_driver(void);

/* Reads the environment when it changed since the configuration in force
 * (or after fakecudnn_reset), so a test can setenv between calls. Live
 * handles and descriptors stay; counters restart with the configuration. */
static void refresh_config(void) {
  char *snap = fd_config_snapshot();
  if (fd_g.configured && snap && fd_g.snapshot && strcmp(snap, fd_g.snapshot) == 0) {
    free(snap);
    return;
  }
  free(fd_g.snapshot);
  fd_g.snapshot = snap;
  fd_g.configured = 1;
  memset(fd_g.counters, 0, sizeof fd_g.counters);
  fd_g.config_error[0] = '\0';
  if (fd_config_read(&fd_g.cfg, fd_g.config_error, sizeof fd_g.config_error) != 0)
    fprintf(stderr, "fakecudnn: %s\n", fd_g.config_error);
  fd_g.order_state = fd_g.cfg.seed;
}

cudnnStatus_t fd_enter(fd_entry e, int *raw) {
  pthread_mutex_lock(&fd_lock);
  refresh_config();
  unsigned long n = ++fd_g.counters[e];
  last_error[0] = '\0';
  if (fd_g.config_error[0])
    return fd_refuse(FD_NOT_INITIALIZED, "the environment was refused: %s", fd_g.config_error);
  for (int i = 0; i < fd_g.cfg.n_rules; i++) {
    const fd_fail_rule *r = &fd_g.cfg.rules[i];
    if (r->entry == e && (r->nth == 0 || r->nth == n)) {
      snprintf(last_error, sizeof last_error, "%s: status %d injected by FAKECUDNN_FAIL (call %lu)",
               fd_entry_name(e), r->code, n);
      *raw = 1;
      return r->code;
    }
  }
  return FD_SUCCESS;
}

/* cuDNN 8 numbers its statuses 0 to 14 (cudnn.h of 8.x: NOT_INITIALIZED 1,
 * ALLOC_FAILED 2, BAD_PARAM 3, INTERNAL_ERROR 4, INVALID_VALUE 5,
 * ARCH_MISMATCH 6, MAPPING_ERROR 7, EXECUTION_FAILED 8, NOT_SUPPORTED 9,
 * LICENSE_ERROR 10, RUNTIME_PREREQUISITE_MISSING 11, RUNTIME_IN_PROGRESS 12,
 * RUNTIME_FP_OVERFLOW 13, VERSION_MISMATCH 14); cuDNN 9 groups them by
 * thousands. The 9.x sub-codes fall back to their category's 8.x code. */
static cudnnStatus_t to_v8(cudnnStatus_t s) {
  switch (s) {
  case FD_SUCCESS: return 0;
  case FD_NOT_INITIALIZED: return 1;
  case FD_SUBLIBRARY_VERSION_MISMATCH: return 14;
  case FD_NOT_SUPPORTED_ARCH_MISMATCH: return 6;
  /* cuDNN 8 reports a runtime that cannot start (the driver too old for
   * it) as NOT_INITIALIZED ("CUDA Runtime API initialization failed") [U]. */
  case FD_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER: return 1;
  case FD_BAD_PARAM_STREAM_MISMATCH: return 7; /* 8.x cudnnSetStream: MAPPING_ERROR */
  case FD_ALLOC_FAILED: return 2;
  default: break;
  }
  switch (s / 1000) {
  case 2: return 3;
  case 3: return 9;
  case 4: return 4;
  case 5: return 8;
  default: return s;
  }
}

cudnnStatus_t fd_public(cudnnStatus_t s) { return fd_g.cfg.major == 8 ? to_v8(s) : s; }

cudnnStatus_t fd_leave(cudnnStatus_t s, int raw) {
  cudnnStatus_t out = raw ? s : fd_public(s);
  pthread_mutex_unlock(&fd_lock);
  return out;
}

/* cuDNN prints its reasons only when asked (CUDNN_LOGLEVEL_DBG >= 1, the
 * 9.x variable; CUDNN_LOGERR_DBG=1, the 8.x one); so does the double. */
static int log_errors(void) {
  const char *l = getenv("CUDNN_LOGLEVEL_DBG"), *e = getenv("CUDNN_LOGERR_DBG");
  return (l && atoi(l) >= 1) || (e && atoi(e) >= 1);
}

cudnnStatus_t fd_refuse(cudnnStatus_t s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (log_errors()) fprintf(stderr, "fakecudnn: %s (status %d)\n", last_error, (int)fd_public(s));
  return s;
}

void fd_note_call(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_call, sizeof last_call, fmt, ap);
  va_end(ap);
}

unsigned long long fd_random(void) {
  unsigned long long x = fd_g.order_state ? fd_g.order_state : 1;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  fd_g.order_state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* --------------------------------------------------- version, errors --- */

static size_t version_number(void) {
  const fd_config *c = &fd_g.cfg;
  if (fd_g.config_error[0]) return 0;
  /* cudnn_version_v9.h: CUDNN_VERSION = major * 10000 + minor * 100 + patch;
   * cuDNN 8's cudnn_version.h: major * 1000 + minor * 100 + patch (8.9.7 is 8907). */
  return c->major == 8 ? (size_t)(c->major * 1000 + c->minor * 100 + c->patch)
                       : (size_t)(c->major * 10000 + c->minor * 100 + c->patch);
}

FD_EXPORT size_t cudnnGetVersion(void) {
  int raw = 0;
  fd_enter(FD_cudnnGetVersion, &raw);
  size_t v = version_number();
  fd_leave(FD_SUCCESS, 0);
  return v;
}

/* The CUDA runtime version the library was built with (1000 major + 10 minor). */
FD_EXPORT size_t cudnnGetCudartVersion(void) {
  int raw = 0;
  fd_enter(FD_cudnnGetCudartVersion, &raw);
  size_t v = fd_g.config_error[0] ? 0 : (size_t)fd_g.cfg.cudart;
  fd_leave(FD_SUCCESS, 0);
  return v;
}

typedef struct fd_status_name {
  int code;
  const char *name;
} fd_status_name;

/* cudnn_graph_v9.h's names; the deprecated aliases (ALLOC_FAILED,
 * ARCH_MISMATCH, ...) share the numbers of these. */
static const fd_status_name v9_names[] = {
    {0, "CUDNN_STATUS_SUCCESS"},
    {1001, "CUDNN_STATUS_NOT_INITIALIZED"},
    {1002, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"},
    {1003, "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH"},
    {1004, "CUDNN_STATUS_DEPRECATED"},
    {1005, "CUDNN_STATUS_LICENSE_ERROR"},
    {1006, "CUDNN_STATUS_RUNTIME_IN_PROGRESS"},
    {1007, "CUDNN_STATUS_RUNTIME_FP_OVERFLOW"},
    {1008, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"},
    {2000, "CUDNN_STATUS_BAD_PARAM"},
    {2001, "CUDNN_STATUS_INVALID_VALUE"},
    {2002, "CUDNN_STATUS_BAD_PARAM_NULL_POINTER"},
    {2003, "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER"},
    {2004, "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED"},
    {2005, "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND"},
    {2006, "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT"},
    {2007, "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH"},
    {2008, "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH"},
    {2009, "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES"},
    {2010, "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE"},
    {2011, "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH"},
    {2012, "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE"},
    {3000, "CUDNN_STATUS_NOT_SUPPORTED"},
    {3001, "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN"},
    {3002, "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"},
    {3003, "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE"},
    {3004, "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT"},
    {3005, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER"},
    {3006, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART"},
    {3007, "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH"},
    {3008, "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING"},
    {3009, "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE"},
    {3010, "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT"},
    {3011, "CUDNN_STATUS_NOT_SUPPORTED_PADDING"},
    {3012, "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM"},
    {3013, "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API"},
    {3014, "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE"},
    {4000, "CUDNN_STATUS_INTERNAL_ERROR"},
    {4001, "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED"},
    {4002, "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE"},
    {4003, "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"},
    {4004, "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"},
    {4005, "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM"},
    {4006, "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED"},
    {5000, "CUDNN_STATUS_EXECUTION_FAILED"},
    {5001, "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER"},
    {5002, "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS"},
    {5003, "CUDNN_STATUS_EXECUTION_FAILED_CUDART"},
    {5004, "CUDNN_STATUS_EXECUTION_FAILED_CURAND"},
};

static const char *const v8_names[] = {
    "CUDNN_STATUS_SUCCESS",          "CUDNN_STATUS_NOT_INITIALIZED",
    "CUDNN_STATUS_ALLOC_FAILED",     "CUDNN_STATUS_BAD_PARAM",
    "CUDNN_STATUS_INTERNAL_ERROR",   "CUDNN_STATUS_INVALID_VALUE",
    "CUDNN_STATUS_ARCH_MISMATCH",    "CUDNN_STATUS_MAPPING_ERROR",
    "CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_NOT_SUPPORTED",
    "CUDNN_STATUS_LICENSE_ERROR",    "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING",
    "CUDNN_STATUS_RUNTIME_IN_PROGRESS", "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
    "CUDNN_STATUS_VERSION_MISMATCH",
};

/* The enumerant's name, as cudnnGetErrorString gives it; an unknown number
 * gives "CUDNN_UNKNOWN_STATUS" [U]. */
static const char *status_name(int code) {
  if (fd_g.cfg.major == 8) return code >= 0 && code <= 14 ? v8_names[code] : "CUDNN_UNKNOWN_STATUS";
  for (size_t i = 0; i < sizeof v9_names / sizeof v9_names[0]; i++)
    if (v9_names[i].code == code) return v9_names[i].name;
  return "CUDNN_UNKNOWN_STATUS";
}

FD_EXPORT const char *cudnnGetErrorString(cudnnStatus_t status) {
  int raw = 0;
  fd_enter(FD_cudnnGetErrorString, &raw);
  const char *s = status_name(status);
  fd_leave(FD_SUCCESS, 0);
  return s;
}

/* cuDNN 9: the last error message of the calling thread (not counted). */
FD_EXPORT void cudnnGetLastErrorString(char *message, size_t max_size) {
  if (message && max_size) snprintf(message, max_size, "%s", last_error);
}

/* ----------------------------------------------------------- driver --- */

static int live_handles(void) { return (int)fd_live_count(FD_OBJ_HANDLE); }

static void release_driver(void) {
  if (fd_drv.lib) dlclose(fd_drv.lib);
  memset(&fd_drv, 0, sizeof fd_drv);
}

#define BIND(field, name) (*(void **)&fd_drv.field = dlsym(fd_drv.lib, name), fd_drv.field != NULL)

/* cuDNN finds the driver loaded in the process; so does the double, with
 * RTLD_NOLOAD (a libcuda.so.1 loaded by path answers to its soname). The
 * reference it takes is dropped when the last handle goes. */
static cudnnStatus_t bind_driver(void) {
  if (fd_drv.lib) return FD_SUCCESS;
  fd_drv.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!fd_drv.lib)
    return fd_refuse(FD_NOT_INITIALIZED, "cudnnCreate: no CUDA driver (libcuda.so.1 is not loaded in the process)");
  int ok = BIND(ctx_get_current, "cuCtxGetCurrent") & BIND(ctx_get_device, "cuCtxGetDevice") &
           BIND(device_attribute, "cuDeviceGetAttribute") & BIND(driver_version, "cuDriverGetVersion") &
           BIND(ctx_synchronize, "cuCtxSynchronize") & BIND(stream_synchronize, "cuStreamSynchronize") &
           BIND(enqueue_work, "fakecuda_enqueue_work") & BIND(device_span, "fakecuda_device_span");
  if (!ok) {
    release_driver();
    return fd_refuse(FD_NOT_INITIALIZED,
                     "cudnnCreate: the loaded libcuda.so.1 is not the test double (no fakecuda_enqueue_work); "
                     "the double of cuDNN runs only on tests/fakecuda");
  }
  return FD_SUCCESS;
}

/* ---------------------------------------------------------- handles --- */

/* What cudnnCreate checks (its documentation: NOT_INITIALIZED for no
 * compatible GPU, driver missing or the runtime failing to start;
 * ARCH_MISMATCH for a GPU too old), in this order: a driver, a current
 * context [U: cudart would make device 0's primary context current; the
 * double refuses, so Ember must push its own first], a driver new enough for
 * the runtime the library was built with (minor-version compatibility: the
 * same major or newer) [U for the status], the device's CC. */
static cudnnStatus_t create_handle(fd_handle *out) {
  if (!out) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "cudnnCreate: handle is NULL");
  cudnnStatus_t s = bind_driver();
  if (s != FD_SUCCESS) return s;
  CUcontext ctx = NULL;
  CUresult r = fd_drv.ctx_get_current(&ctx);
  if (r != CUDA_SUCCESS || !ctx) {
    s = fd_refuse(FD_NOT_INITIALIZED, "cudnnCreate: %s", r != CUDA_SUCCESS ? "the driver is not initialised (cuInit)"
                                                                           : "no current CUDA context");
    goto fail;
  }
  int drv = 0;
  fd_drv.driver_version(&drv);
  if (drv / 1000 < fd_g.cfg.cudart / 1000) {
    s = fd_refuse(FD_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER,
                  "cudnnCreate: the driver supports CUDA %d.%d; this cuDNN was built with CUDA %d.%d", drv / 1000,
                  drv % 1000 / 10, fd_g.cfg.cudart / 1000, fd_g.cfg.cudart % 1000 / 10);
    goto fail;
  }
  CUdevice dev = 0;
  int major = 0, minor = 0;
  if (fd_drv.ctx_get_device(&dev) != CUDA_SUCCESS || fd_drv.device_attribute(&major, 75, dev) != CUDA_SUCCESS ||
      fd_drv.device_attribute(&minor, 76, dev) != CUDA_SUCCESS) {
    s = fd_refuse(FD_NOT_INITIALIZED, "cudnnCreate: the current context's device cannot be queried");
    goto fail;
  }
  int cc = major * 10 + minor, lowest = fd_lowest_cc(&fd_g.cfg);
  if (cc < lowest) {
    s = fd_refuse(FD_NOT_SUPPORTED_ARCH_MISMATCH, "cudnnCreate: cuDNN %d.%d.%d needs compute capability %d.%d; device %d is %d.%d",
                  fd_g.cfg.major, fd_g.cfg.minor, fd_g.cfg.patch, lowest / 10, lowest % 10, dev, major, minor);
    goto fail;
  }
  fd_handle h = calloc(1, sizeof *h);
  if (!h || fd_register(h, FD_OBJ_HANDLE) != 0) {
    free(h);
    s = fd_refuse(FD_ALLOC_FAILED, "cudnnCreate: out of host memory");
    goto fail;
  }
  h->ctx = ctx;
  h->device = dev;
  h->cc = cc;
  h->stream = NULL;
  *out = h;
  return FD_SUCCESS;
fail:
  if (live_handles() == 0) release_driver();
  return s;
}

/* cudnnCreate's documentation: destroying a handle implies a device
 * synchronisation; the double synchronises the handle's context when it is
 * current (its pending work then runs). */
static cudnnStatus_t destroy_handle(fd_handle h) {
  if (!fd_is_live(h, FD_OBJ_HANDLE)) return fd_refuse(FD_BAD_PARAM, "cudnnDestroy: %p is not a live handle", (void *)h);
  CUcontext cur = NULL;
  if (fd_drv.ctx_get_current && fd_drv.ctx_get_current(&cur) == CUDA_SUCCESS && cur == h->ctx)
    fd_drv.ctx_synchronize();
  fd_unregister(h, FD_OBJ_HANDLE);
  free(h);
  if (live_handles() == 0) release_driver();
  return FD_SUCCESS;
}

cudnnStatus_t fd_check_handle(fd_handle h, const char *op) {
  if (!h) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: handle is NULL", op);
  if (!fd_is_live(h, FD_OBJ_HANDLE)) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live cudnnHandle_t", op, (void *)h);
  CUcontext cur = NULL;
  if (fd_drv.ctx_get_current(&cur) != CUDA_SUCCESS || cur != h->ctx)
    return fd_refuse(FD_BAD_PARAM, "%s: the handle belongs to another CUDA context than the current one [U]", op);
  return FD_SUCCESS;
}

cudnnStatus_t fd_handle_live(fd_handle h, const char *op) {
  if (!h) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: handle is NULL", op);
  if (!fd_is_live(h, FD_OBJ_HANDLE)) return fd_refuse(FD_BAD_PARAM, "%s: %p is not a live cudnnHandle_t", op, (void *)h);
  return FD_SUCCESS;
}

static cudnnStatus_t set_stream(fd_handle h, CUstream s) {
  if (!fd_is_live(h, FD_OBJ_HANDLE)) return fd_refuse(FD_BAD_PARAM, "cudnnSetStream: not a live handle");
  h->stream = s;
  return FD_SUCCESS;
}

static cudnnStatus_t get_stream(fd_handle h, CUstream *s) {
  if (!fd_is_live(h, FD_OBJ_HANDLE)) return fd_refuse(FD_BAD_PARAM, "cudnnGetStream: not a live handle");
  if (!s) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "cudnnGetStream: streamId is NULL");
  *s = h->stream;
  return FD_SUCCESS;
}

FD_EXPORT cudnnStatus_t cudnnCreate(fd_handle *handle) { FD_CALL(cudnnCreate, create_handle(handle)); }
FD_EXPORT cudnnStatus_t cudnnDestroy(fd_handle handle) { FD_CALL(cudnnDestroy, destroy_handle(handle)); }
FD_EXPORT cudnnStatus_t cudnnSetStream(fd_handle handle, CUstream s) { FD_CALL(cudnnSetStream, set_stream(handle, s)); }
FD_EXPORT cudnnStatus_t cudnnGetStream(fd_handle handle, CUstream *s) { FD_CALL(cudnnGetStream, get_stream(handle, s)); }

/* ------------------------------------------------------- test hooks --- */

static const char *hook_copy(const char *s) {
  snprintf(hook_text, sizeof hook_text, "%s", s);
  return hook_text;
}

FD_EXPORT unsigned long fakecudnn_call_count(const char *name) {
  fd_entry e;
  if (!name || fd_entry_lookup(name, strlen(name), &e) != 0) return 0;
  pthread_mutex_lock(&fd_lock);
  unsigned long n = fd_g.counters[e];
  pthread_mutex_unlock(&fd_lock);
  return n;
}

FD_EXPORT void fakecudnn_reset(void) {
  pthread_mutex_lock(&fd_lock);
  for (size_t i = 0; i < n_objs; i++) free(objs[i].p);
  free(objs);
  objs = NULL;
  n_objs = cap_objs = 0;
  free(fd_g.snapshot);
  memset(&fd_g, 0, sizeof fd_g);
  last_call[0] = '\0';
  last_error[0] = '\0';
  release_driver();
  pthread_mutex_unlock(&fd_lock);
}

FD_EXPORT const char *fakecudnn_last_call(void) {
  pthread_mutex_lock(&fd_lock);
  const char *s = hook_copy(last_call);
  pthread_mutex_unlock(&fd_lock);
  return s;
}

FD_EXPORT const char *fakecudnn_last_error(void) { return hook_copy(last_error); }

FD_EXPORT const char *fakecudnn_config_error(void) {
  pthread_mutex_lock(&fd_lock);
  refresh_config();
  const char *s = hook_copy(fd_g.config_error);
  pthread_mutex_unlock(&fd_lock);
  return s;
}

FD_EXPORT size_t fakecudnn_live_handles(void) {
  pthread_mutex_lock(&fd_lock);
  size_t n = fd_live_count(FD_OBJ_HANDLE);
  pthread_mutex_unlock(&fd_lock);
  return n;
}

FD_EXPORT size_t fakecudnn_live_descriptors(void) {
  pthread_mutex_lock(&fd_lock);
  size_t n = 0;
  for (int k = 0; k < FD_N_KINDS; k++)
    if (k != FD_OBJ_HANDLE) n += fd_live_count((fd_kind)k);
  pthread_mutex_unlock(&fd_lock);
  return n;
}

FD_SAME_TYPE(fakecudnn_call_count, fakecudnn_call_count_fn);
FD_SAME_TYPE(fakecudnn_reset, fakecudnn_reset_fn);
FD_SAME_TYPE(fakecudnn_last_call, fakecudnn_text_fn);
FD_SAME_TYPE(fakecudnn_last_error, fakecudnn_text_fn);
FD_SAME_TYPE(fakecudnn_config_error, fakecudnn_text_fn);
FD_SAME_TYPE(fakecudnn_live_handles, fakecudnn_count_fn);
FD_SAME_TYPE(fakecudnn_live_descriptors, fakecudnn_count_fn);
