/* Internal state of the dispatch layer: the driver and NVRTC libraries it
 * loaded, each CUDA device with its context, plans and modules, the image
 * table and the JIT cache. One process-wide instance, created on first use
 * and torn down by em_shutdown. */
#ifndef EMBER_RUNTIME_RUNTIME_H
#define EMBER_RUNTIME_RUNTIME_H

#include <pthread.h>
#include <stddef.h>

#include "cuda_abi.h"
#include "ember/dispatch.h"
#include "ember/runtime.h"
#include "error.h"
#include "image_blob.h"
#include "jit_cache.h"
#include "memory.h"
#include "nvrtc.h"

/* Entry points resolved from libcuda. Optional ones may be NULL. */
typedef struct em_cuda_api {
  void *handle;
  PFN_cuInit cuInit;
  PFN_cuDriverGetVersion cuDriverGetVersion;
  PFN_cuGetErrorName cuGetErrorName;               /* optional (CUDA 6.0+) */
  PFN_cuDeviceGetCount cuDeviceGetCount;
  PFN_cuDeviceGet cuDeviceGet;
  PFN_cuDeviceGetName cuDeviceGetName;
  PFN_cuDeviceGetAttribute cuDeviceGetAttribute;
  PFN_cuDeviceTotalMem cuDeviceTotalMem;
  PFN_cuDeviceGetUuid cuDeviceGetUuid;             /* optional (CUDA 9.2+) */
  PFN_cuDeviceGetPCIBusId cuDeviceGetPCIBusId;     /* optional */
  PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease;
  PFN_cuCtxPushCurrent cuCtxPushCurrent;
  PFN_cuCtxPopCurrent cuCtxPopCurrent;
  PFN_cuCtxGetCurrent cuCtxGetCurrent;             /* optional: a launch skips the push and pop when its context is current */
  PFN_cuCtxSynchronize cuCtxSynchronize;
  PFN_cuModuleLoadData cuModuleLoadData;
  PFN_cuModuleGetFunction cuModuleGetFunction;
  PFN_cuModuleUnload cuModuleUnload;
  PFN_cuLinkCreate cuLinkCreate;
  PFN_cuLinkAddData cuLinkAddData;
  PFN_cuLinkComplete cuLinkComplete;
  PFN_cuLinkDestroy cuLinkDestroy;
  PFN_cuMemAlloc cuMemAlloc;
  PFN_cuMemFree cuMemFree;
  /* Mapped pinned host memory (devcheck.c's status records); optional: without
   * them device checks copy their result back instead. */
  PFN_cuMemHostAlloc cuMemHostAlloc;
  PFN_cuMemHostGetDevicePointer cuMemHostGetDevicePointer;
  PFN_cuMemFreeHost cuMemFreeHost;
  PFN_cuMemcpyHtoD cuMemcpyHtoD;
  PFN_cuMemcpyDtoH cuMemcpyDtoH;
  PFN_cuMemcpyDtoD cuMemcpyDtoD;
  PFN_cuMemcpyHtoDAsync cuMemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync cuMemcpyDtoHAsync;
  PFN_cuMemcpyDtoDAsync cuMemcpyDtoDAsync;
  PFN_cuStreamCreate cuStreamCreate;
  PFN_cuStreamDestroy cuStreamDestroy;
  PFN_cuStreamSynchronize cuStreamSynchronize;
  PFN_cuLaunchKernel cuLaunchKernel;
  /* Stream capture and graphs (cuda_graph.c), all optional: absent before
   * CUDA 10.0; the begin with a mode (_v2) and the flags instantiate later. */
  PFN_cuStreamBeginCapture cuStreamBeginCapture;        /* cuStreamBeginCapture_v2, CUDA 10.1 */
  PFN_cuStreamBeginCapture_v1 cuStreamBeginCapture_v1;  /* the CUDA 10.0 ABI: no mode (GLOBAL) */
  PFN_cuStreamEndCapture cuStreamEndCapture;
  PFN_cuStreamIsCapturing cuStreamIsCapturing;
  PFN_cuGraphInstantiate cuGraphInstantiate;            /* _v2 (11.0) or the plain 10.0 symbol: one ABI */
  PFN_cuGraphInstantiateWithFlags cuGraphInstantiateWithFlags; /* CUDA 11.4 */
  PFN_cuGraphLaunch cuGraphLaunch;
  PFN_cuGraphExecDestroy cuGraphExecDestroy;
  PFN_cuGraphDestroy cuGraphDestroy;
  /* Events, to order two streams (em_stream_join); optional: without them
   * the host waits instead. */
  PFN_cuEventCreate cuEventCreate;
  PFN_cuEventRecord cuEventRecord;
  PFN_cuEventDestroy cuEventDestroy;
  PFN_cuStreamWaitEvent cuStreamWaitEvent;
} em_cuda_api;

struct em_kernel {
  struct em_gpu *gpu;
  const em_cuda_api *cu;  /* the runtime's entry points: a launch takes no lock to find them */
  CUfunction fn;
  char name[96];
};

/* A kernel module on one device: its plan, and once loaded, the module. */
typedef struct em_module_state {
  const char *name;
  int planned;
  em_plan plan;
  int load_attempted;
  em_status load_status;  /* of the first load; later lookups repeat it */
  char load_error[512];
  em_load_record record;
  CUmodule module;
  struct em_kernel **kernels; /* looked up so far; each malloc'd, so handles stay put as the list grows */
  int n_kernels, cap_kernels;
} em_module_state;

typedef struct em_gpu {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;          /* primary context, retained on first use */
  int cc;
  em_device_info info;
  em_module_state *modules;  /* one per module of the image table */
  em_allocator alloc;
} em_gpu;

/* Streams of executors running CUDA graphs (memory_api.c): a non-blocking
 * stream, and one stream's later work made to wait for another's (NULL:
 * the legacy stream) without the host waiting. */
struct em_stream;
em_status em_stream_create_nonblocking(em_device dev, struct em_stream **out);
em_status em_stream_join(em_device dev, struct em_stream *waiter, struct em_stream *waited);

typedef struct em_runtime {
  em_driver_info driver;
  em_cuda_api cu;
  em_nvrtc_set nvrtc;
  int nvrtc_loaded;
  em_gpu *gpus;
  int n_gpus;
  em_blob_view images;
  const char **modules;   /* distinct module names of the image table */
  size_t n_modules;
  em_jit_cache *cache;
  int cache_opened;
  char cache_why[256];
  int strict;             /* EMBER_STRICT=1 */
  em_path force;          /* EMBER_FORCE */
  char force_invalid[64]; /* EMBER_FORCE's value when it names no path, else "" */
  int jit_disabled;       /* CUDA_DISABLE_PTX_JIT=1 */
  struct em_kernel_index *kernel_index; /* kernel name -> module, built on the first lookup (dispatch.c) */
} em_runtime;

/* The CPU's caching allocator: one per process, kept across em_shutdown. */
em_allocator *em_cpu_allocator(void);

/* The runtime, initialised on first call; NULL only if even the CPU side could
 * not be set up (then em_last_error says why). Holds no lock on return. */
em_runtime *em_rt(void);
/* The process-wide lock for lazy work (module loads, NVRTC loading). */
void em_rt_lock(void);
void em_rt_unlock(void);

em_status em_rt_gpu(em_device dev, em_gpu **out);

/* Makes the device's primary context current on this thread (retaining it on
 * first use); em_gpu_leave restores the previous one. */
em_status em_gpu_enter(em_gpu *g);
void em_gpu_leave(em_gpu *g);

/* Frees the kernel index and ends the kernel handles' generation: a kernel
 * cache (kernel_cache.h) filled before em_shutdown looks its handles up again. */
void em_kernel_index_free(em_runtime *rt);

/* Name of a CUresult from Ember's own table (the stub driver returns NULL
 * names), and the one-line fix for it. */
const char *em_cuda_error_name(CUresult r);
const char *em_cuda_error_fix(CUresult r);
/* em_fail(EM_ERR_CUDA, "<call> failed: NAME (number): <fix>") with context. */
em_status em_cuda_fail(CUresult r, const char *call, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The JIT cache of the runtime, opened on first use (NULL when it is not
 * used: EMBER_LOG=cache says why). Call with the runtime's lock held. */
em_jit_cache *em_rt_cache(em_runtime *rt);

/* Loads libcuda (EMBER_LIBCUDA or libcuda.so.1), initialises it and fills rt->driver. */
void em_driver_load(em_runtime *rt);
void em_driver_unload(em_runtime *rt);

/* dlopen of a CUDA library by soname: as named (the loader's search), then
 * under $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (lib64/), kept mapped
 * (RTLD_NODELETE). NULL when none loads; path holds the last one tried. */
void *em_libs_open(const char *soname, char *path, size_t cap);
/* Whether CC cc has tensor cores for half dtype dt (f16 from Volta, 7.0; bf16 from Ampere,
 * 8.0), where the fast mode sends f16/bf16 `what` ("products", "convolutions") to cuBLAS or
 * cuDNN: elsewhere such a call is no faster than Ember's f32 road, which rounds the same way.
 * The reason, either way, in why (runtime/libs.c). */
int em_libs_half_supports(int dt /* em_dtype */, int cc, const char *what, char *why, size_t cap);

/* Forgets the CUDA library probe (libs.c), so the next query looks again. */
void em_libs_forget(void);

#endif
