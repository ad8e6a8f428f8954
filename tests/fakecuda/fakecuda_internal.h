/* Internal declarations shared by the files of the fake libcuda (a test
 * double of the CUDA driver, see README.md). Nothing here is exported. */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_abi.h"

#define FC_EXPORT __attribute__((visibility("default")))

#define FC_MAX_DEVICES 64
#define FC_MAX_FAIL_RULES 64
#define FC_NAME_MAX 128
#define FC_LOG_MAX 512

/* Every entry point with a fault-injection counter: (counter name, plain
 * alias or NULL). A plain alias shares the counter of its _v2 name. */
#define FC_ENTRY_LIST(X)                                       \
  X(cuInit, NULL)                                              \
  X(cuDriverGetVersion, NULL)                                  \
  X(cuGetErrorName, NULL)                                      \
  X(cuGetErrorString, NULL)                                    \
  X(cuDeviceGetCount, NULL)                                    \
  X(cuDeviceGet, NULL)                                         \
  X(cuDeviceGetName, NULL)                                     \
  X(cuDeviceGetAttribute, NULL)                                \
  X(cuDeviceTotalMem_v2, "cuDeviceTotalMem")                   \
  X(cuDeviceGetUuid_v2, "cuDeviceGetUuid")                     \
  X(cuDeviceGetPCIBusId, NULL)                                 \
  X(cuDevicePrimaryCtxRetain, NULL)                            \
  X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease") \
  X(cuCtxPushCurrent_v2, "cuCtxPushCurrent")                   \
  X(cuCtxPopCurrent_v2, "cuCtxPopCurrent")                     \
  X(cuCtxSetCurrent, NULL)                                     \
  X(cuCtxGetCurrent, NULL)                                     \
  X(cuCtxGetDevice, NULL)                                      \
  X(cuCtxSynchronize, NULL)                                    \
  X(cuModuleLoadData, NULL)                                    \
  X(cuModuleLoadDataEx, NULL)                                  \
  X(cuModuleGetFunction, NULL)                                 \
  X(cuModuleUnload, NULL)                                      \
  X(cuLinkCreate_v2, "cuLinkCreate")                           \
  X(cuLinkAddData_v2, "cuLinkAddData")                         \
  X(cuLinkComplete, NULL)                                      \
  X(cuLinkDestroy, NULL)                                       \
  X(cuMemAlloc_v2, "cuMemAlloc")                               \
  X(cuMemFree_v2, "cuMemFree")                                 \
  X(cuMemGetInfo_v2, "cuMemGetInfo")                           \
  X(cuMemHostAlloc, NULL)                                      \
  X(cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer") \
  X(cuMemFreeHost, NULL)                                       \
  X(cuPointerGetAttribute, NULL)                               \
  X(cuMemcpyHtoD_v2, "cuMemcpyHtoD")                           \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH")                           \
  X(cuMemcpyDtoD_v2, "cuMemcpyDtoD")                           \
  X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync")                 \
  X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync")                 \
  X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync")                 \
  X(cuMemsetD8_v2, "cuMemsetD8")                               \
  X(cuMemsetD32_v2, "cuMemsetD32")                             \
  X(cuMemsetD8Async, NULL)                                     \
  X(cuMemsetD32Async, NULL)                                    \
  X(cuStreamCreate, NULL)                                      \
  X(cuStreamDestroy_v2, "cuStreamDestroy")                     \
  X(cuStreamSynchronize, NULL)                                 \
  X(cuStreamQuery, NULL)                                       \
  X(cuStreamWaitEvent, NULL)                                   \
  X(cuEventCreate, NULL)                                       \
  X(cuEventRecord, NULL)                                       \
  X(cuEventSynchronize, NULL)                                  \
  X(cuEventQuery, NULL)                                        \
  X(cuEventElapsedTime_v2, "cuEventElapsedTime")               \
  X(cuEventDestroy_v2, "cuEventDestroy")                       \
  X(cuLaunchKernel, NULL)                                      \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture")          \
  X(cuStreamEndCapture, NULL)                                  \
  X(cuStreamIsCapturing, NULL)                                 \
  X(cuStreamGetCaptureInfo, NULL)                              \
  X(cuGraphInstantiate_v2, "cuGraphInstantiate")               \
  X(cuGraphInstantiateWithFlags, NULL)                         \
  X(cuGraphLaunch, NULL)                                       \
  X(cuGraphExecDestroy, NULL)                                  \
  X(cuGraphDestroy, NULL)

typedef enum fc_entry {
#define FC_ENUM(name, plain) FC_##name,
  FC_ENTRY_LIST(FC_ENUM)
#undef FC_ENUM
  FC_N_ENTRIES
} fc_entry;

/* ------------------------------------------------------------ config --- */

typedef struct fc_device_cfg {
  int major, minor;
  char name[FC_NAME_MAX];
} fc_device_cfg;

typedef struct fc_fail_rule {
  fc_entry entry;
  CUresult code;
  unsigned long nth; /* 0: every call; N: only the N-th call (1-based) */
} fc_fail_rule;

typedef struct fc_config {
  int n_phys; /* FAKECUDA_DEVICES */
  fc_device_cfg phys[FC_MAX_DEVICES];
  int n_visible;               /* after CUDA_VISIBLE_DEVICES */
  int visible[FC_MAX_DEVICES]; /* ordinal -> physical index */
  int driver;                  /* FAKECUDA_DRIVER */
  size_t mem_bytes;            /* FAKECUDA_MEM_MB */
  int n_rules;                 /* FAKECUDA_FAIL */
  fc_fail_rule rules[FC_MAX_FAIL_RULES];
  unsigned long long seed; /* FAKECUDA_SEED, or drawn from the clock when unset */
  int no_jit;        /* FAKECUDA_NO_JIT */
  int jit_disabled;  /* CUDA_DISABLE_PTX_JIT */
  int force_ptx_jit; /* CUDA_FORCE_PTX_JIT */
  int no_map_host;   /* FAKECUDA_NO_MAP_HOST: canMapHostMemory 0 */
} fc_config;

/* Reads the whole configuration from the environment. Returns 0, or -1 with
 * a message naming the variable and the bad text in err. */
int fc_config_read(fc_config *cfg, char *err, size_t errcap);

/* FAKECUDA_DRIVER alone (cuDriverGetVersion works before cuInit). */
int fc_config_driver(int *out, char *err, size_t errcap);

/* A text that changes whenever any variable the fake reads changes. */
char *fc_config_snapshot(void);

/* The deterministic UUID of physical device `phys`, and its nvidia-smi
 * spelling "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with NUL). */
void fc_uuid_of(int phys, CUuuid *u);
void fc_uuid_string(const CUuuid *u, char out[41]);

/* Multiprocessor count the fake reports for a compute capability. */
int fc_sm_count_for(int major, int minor);

/* Entry-point names, for FAKECUDA_FAIL and messages. */
const char *fc_entry_name(fc_entry e);
int fc_entry_lookup(const char *name, size_t len, fc_entry *out);

/* ------------------------------------------------------------ images --- */

typedef enum fc_input_kind { FC_IN_ANY, FC_IN_CUBIN, FC_IN_PTX, FC_IN_FATBIN } fc_input_kind;

typedef struct fc_jit_env {
  int driver;
  int no_jit, jit_disabled, force_ptx_jit;
} fc_jit_env;

typedef struct fc_image_result {
  int sm;               /* SM the loaded code runs as (the target's, for JIT output) */
  char variant;         /* 'a' when the code is arch-specific */
  int jitted;           /* PTX went through the (pretend) JIT */
  char *kernels;        /* malloc'd comma-separated kernel names; caller frees */
  char log[FC_LOG_MAX]; /* why it failed ("" on success) */
} fc_image_result;

/* Validates an image the way the driver would for a device (or link target)
 * of SM `target_sm` (10*major+minor). size is the image size (the caller
 * derives it with fc_image_size when the API gives none). On success fills
 * out (kernels malloc'd); on failure out->log says why. */
CUresult fc_image_check(const void *data, size_t size, fc_input_kind kind, const fc_jit_env *env, int target_sm,
                        fc_image_result *out);

/* The size of an image given only its address, as cuModuleLoadData must
 * find it: from the ELF or fatbin headers, the FAKECUBIN header, or the NUL
 * of PTX text. Never more than FC_IMAGE_MAX. */
#define FC_IMAGE_MAX ((size_t)1 << 30)
size_t fc_image_size(const void *data);

/* Builds the synthetic cubin cuLinkComplete hands back (format in README.md). */
int fc_fakecubin_build(int sm, char variant, int driver, const char *kernels, void **out, size_t *size);

/* ------------------------------------------------------------- state --- */

struct CUctx_st {
  int ordinal;  /* visible ordinal of the device */
  int refcount; /* primary-context retains; 0 = inactive */
  unsigned long long legacy_last; /* last operation issued on its legacy default stream */
  /* A fault while work ran (fakecuda_queue.c): every later call that needs
   * the context returns it, as after a real device fault, until the primary
   * context is released. */
  CUresult sticky;
};

typedef struct fc_device {
  int phys;
  int major, minor;
  char name[FC_NAME_MAX];
  size_t mem_total, mem_used;
  struct CUctx_st *primary;
} fc_device;

typedef struct fc_state {
  int configured;  /* cfg and devices hold a parsed configuration */
  int initialized; /* cuInit succeeded for this configuration */
  char *snapshot;  /* environment text the configuration came from */
  char config_error[256];
  fc_config cfg;
  fc_device dev[FC_MAX_DEVICES]; /* by visible ordinal */
  unsigned long counters[FC_N_ENTRIES];
  unsigned long launches, jits;
  unsigned long long seed; /* of this configuration (hooks may change it) */
  char last_kernel[FC_NAME_MAX];
  unsigned generation; /* bumped on every (re)configuration: stale thread stacks are dropped */
} fc_state;

extern fc_state fc_g;

/* Locks the fake, applies the stub / not-initialized / fault-injection rules
 * for entry e and returns CUDA_SUCCESS holding the lock, or the error code
 * with the lock released. */
CUresult fc_enter(fc_entry e);
void fc_leave(void);
/* Takes the lock with none of those rules (test hooks); release with fc_leave. */
void fc_lock_raw(void);

/* Entry points beyond runtime/cuda_abi.h (Ember does not call them; the
 * doubles of the CUDA libraries do), with cuda.h's signatures. */
typedef CUresult (*PFN_fc_cuPointerGetAttribute)(void *data, int attribute, CUdeviceptr ptr);

/* Compile-time check that an export has the type Ember calls it through. */
#define FC_SAME_TYPE(fn, pfn) _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), pfn), #fn " != " #pfn)

#define FC_CALL(id, expr)               \
  do {                                  \
    CUresult fc_r_ = fc_enter(FC_##id); \
    if (fc_r_ == CUDA_SUCCESS) {        \
      fc_r_ = (expr);                   \
      fc_leave();                       \
    }                                   \
    return fc_r_;                       \
  } while (0)

/* The calling thread's current context: CUDA_SUCCESS with *ctx set, or
 * CUDA_ERROR_INVALID_CONTEXT when there is none or it was released. */
CUresult fc_current_ctx(struct CUctx_st **ctx);
/* 1 when ctx is the live primary context of one of the devices. */
int fc_ctx_is_live(const struct CUctx_st *ctx);
fc_device *fc_ctx_device(const struct CUctx_st *ctx);
fc_jit_env fc_jit_env_now(void);

/* Per-file resource release: everything owned by ctx, or everything (ctx NULL). */
void fc_memory_release(const struct CUctx_st *ctx);
void fc_modules_release(const struct CUctx_st *ctx);
void fc_queue_release(const struct CUctx_st *ctx);
/* Unmaps the fiber stacks of kernel execution. */
void fc_exec_release(void);

/* ------------------------------------------------------------- queue --- */

/* 1 when s is NULL or CU_STREAM_LEGACY (the current context's legacy default
 * stream) or a live stream of a live context. */
int fc_stream_is_valid(CUstream s);
/* The context a valid stream belongs to (the current one for the legacy
 * stream); NULL when there is none. */
const struct CUctx_st *fc_stream_ctx(CUstream s);

/* Work on a stream (fakecuda_queue.c). run does the work when the queue gets
 * to it: CUDA_SUCCESS, or an error with a message in msg; release frees the
 * payload afterwards (may be NULL). */
typedef CUresult (*fc_op_fn)(void *payload, char *msg, size_t cap);

/* Issues an operation on stream s of the current context; nothing runs yet.
 * On failure the payload is released. *seq names it for fc_sync_op. */
CUresult fc_enqueue(CUstream s, fc_op_fn run, void (*release)(void *), void *payload, const char *what,
                    unsigned long long *seq);
/* The context of the operation whose run function is running, else NULL. */
const struct CUctx_st *fc_running_ctx(void);
/* Runs the operation seq and everything it depends on; returns the current
 * context's sticky error, if any. */
CUresult fc_sync_op(unsigned long long seq);
/* Runs every pending operation of ctx (NULL: of every context). */
CUresult fc_run_ctx(const struct CUctx_st *ctx);
/* Says what went wrong, on stderr ("fakecuda: ...") and to the test hook
 * fakecuda_last_error: the driver API has no channel for the why. */
void fc_note_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Flags of a valid stream (CU_STREAM_NON_BLOCKING is 1); 0 for the legacy stream. */
unsigned fc_stream_flags(CUstream s);
/* Makes the pending operation `seq` wait for `dep` as well (no-op when
 * either has run). */
CUresult fc_op_after(unsigned long long seq, unsigned long long dep);

/* --------------------------------------------------- stream capture --- */

/* Stream capture and graphs (fakecuda_graph.c). fc_enqueue asks
 * fc_capture_intercept about every operation: 0 means issue it as usual;
 * 1 means it was taken, with *r CUDA_SUCCESS (recorded into the stream's
 * capture, which now owns the payload) or the error (the caller releases
 * the payload): 901 on an invalidated capture, 906 for the legacy stream
 * while a blocking stream of its context captures. */
int fc_capture_intercept(CUstream s, const struct CUctx_st *ctx, fc_op_fn run, void (*release)(void *), void *payload,
                         const char *what, CUresult *r);
/* CU_STREAM_CAPTURE_STATUS_* of stream s (NONE for the legacy stream). */
int fc_capture_status(CUstream s);
/* Invalidates the capture of s, saying why (fc_note_error), and returns
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED for the call that did it. */
CUresult fc_capture_refuse(CUstream s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A call that waits for stream s (NULL/legacy: the legacy stream) or, with
 * whole_ctx, for all of ctx: the error, with the captures it would wait for
 * invalidated, or CUDA_SUCCESS. */
CUresult fc_capture_sync_check(CUstream s, const struct CUctx_st *ctx, int whole_ctx, const char *call);
/* A "potentially unsafe" call (cuMemAlloc, cuMemFree, ...) under the capture
 * modes' rule: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED with the captures that
 * forbid it invalidated, or CUDA_SUCCESS. */
CUresult fc_capture_unsafe_check(const struct CUctx_st *ctx, const char *call);
/* A destroyed stream's capture is dropped (its handle may be reused). */
void fc_capture_forget_stream(CUstream s);
/* Captures, graphs and executable graphs of ctx (NULL: all). */
void fc_graph_release(const struct CUctx_st *ctx);
/* 1 when [p, p + n) lies in one live pinned host allocation (fakecuda_memory.c). */
int fc_mem_is_pinned(const void *p, size_t n);

/* -------------------------------------------------------- execution --- */

/* Runs a launch of kernel d's host build over the whole grid
 * (fakecuda_exec.c) in context ctx; args[i] points at parameter i's value,
 * device pointers already translated to host addresses; values[i] holds
 * parameter i as the caller passed it (device addresses untranslated: for
 * messages). Addresses the kernel reads from device memory
 * (EM_DEVICE_ADDR) are translated against ctx as it runs, and the guard
 * zones behind them checked afterwards. On failure msg says why. */
struct fc_kernel_def;
CUresult fc_exec_launch(const struct CUctx_st *ctx, const struct fc_kernel_def *d, const uint64_t (*values)[2],
                        void *const *args, const unsigned grid[3], const unsigned block[3], size_t shared_bytes,
                        char *msg, size_t msg_cap);
/* The pseudo-random source of every order the double draws (FAKECUDA_SEED). */
void fc_exec_seed(unsigned long long seed);
unsigned long long fc_random(void);

/* ------------------------------------------------------ device memory --- */

/* Where a launch's pointer parameter points: 0 with *host set (NULL stays
 * NULL); otherwise CUDA_ERROR_ILLEGAL_ADDRESS with msg saying what it is (a
 * host pointer, freed memory, another device's memory). The pointer may
 * point anywhere inside a live allocation of ctx's device, or one past its
 * end. */
/* fc_mem_translate for the bytes [p, p + bytes), which must lie in one
 * allocation (a library double's whole operand). */
CUresult fc_mem_span(const struct CUctx_st *ctx, CUdeviceptr p, size_t bytes, void **host, char *msg, size_t cap);
CUresult fc_mem_translate(const struct CUctx_st *ctx, CUdeviceptr p, void **host, char *msg, size_t cap);
/* After a kernel ran: did it write into the guard zones around the
 * allocation p points into? CUDA_ERROR_ILLEGAL_ADDRESS with msg saying
 * where (the zones are then restored), else CUDA_SUCCESS. */
CUresult fc_mem_check_guards(CUdeviceptr p, char *msg, size_t cap);
/* The start of the live allocation p points into (or just past), or 0. */
CUdeviceptr fc_mem_base_of(CUdeviceptr p);
/* The device address of a host byte inside a live allocation's backing
 * (*base: the allocation's start), or 0 (and *base 0): for messages about
 * what a kernel read from device memory. */
CUdeviceptr fc_mem_device_of(const void *host, CUdeviceptr *base);

#endif
