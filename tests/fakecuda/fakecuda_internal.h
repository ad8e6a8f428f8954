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
  X(cuMemcpyHtoD_v2, "cuMemcpyHtoD")                           \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH")                           \
  X(cuMemcpyDtoD_v2, "cuMemcpyDtoD")                           \
  X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync")                 \
  X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync")                 \
  X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync")                 \
  X(cuStreamCreate, NULL)                                      \
  X(cuStreamDestroy_v2, "cuStreamDestroy")                     \
  X(cuStreamSynchronize, NULL)                                 \
  X(cuLaunchKernel, NULL)

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
  int no_jit;        /* FAKECUDA_NO_JIT */
  int jit_disabled;  /* CUDA_DISABLE_PTX_JIT */
  int force_ptx_jit; /* CUDA_FORCE_PTX_JIT */
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

/* 1 when s is NULL (the current context's default stream) or a live stream
 * of a live context. */
int fc_stream_is_valid(CUstream s);

#endif
