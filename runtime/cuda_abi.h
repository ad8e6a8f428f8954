/* The slice of the CUDA Driver API ABI that Ember uses, declared here so the
 * library builds without the CUDA toolkit and never links libcuda.
 *
 * Source of every value: the CUDA 13.0 toolkit's cuda.h (enum values and
 * prototypes are ABI-stable across driver versions; the _v2 names are the
 * symbols exported since CUDA 3.2/4.0/11.0 as noted). */
#ifndef EMBER_CUDA_ABI_H
#define EMBER_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUlinkState_st *CUlinkState;
typedef struct CUevent_st *CUevent;
typedef struct { unsigned char bytes[16]; } CUuuid;
/* Graphs (CUDA 10.0+): a captured graph, its executable form, a node. */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef uint64_t cuuint64_t;

/* CUresult values (cuda.h, enum cudaError_enum). */
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36,
  CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_JIT_COMPILATION_DISABLED = 223,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
  CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
  CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
  CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
  CUDA_ERROR_CAPTURED_EVENT = 907,
  CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
  CUDA_ERROR_UNKNOWN = 999
};

/* CUdevice_attribute values used by Ember. */
enum {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
};

/* cuMemHostAlloc flags (cuda.h CU_MEMHOSTALLOC_*). */
enum { CU_MEMHOSTALLOC_PORTABLE = 0x01, CU_MEMHOSTALLOC_DEVICEMAP = 0x02, CU_MEMHOSTALLOC_WRITECOMBINED = 0x04 };

/* CUstreamCaptureMode (CUDA 10.1+: the argument of cuStreamBeginCapture_v2;
 * the CUDA 10.0 cuStreamBeginCapture has none and behaves as GLOBAL). */
enum { CU_STREAM_CAPTURE_MODE_GLOBAL = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1, CU_STREAM_CAPTURE_MODE_RELAXED = 2 };
typedef int CUstreamCaptureMode;
/* CUstreamCaptureStatus. */
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1, CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2 };
typedef int CUstreamCaptureStatus;

/* CUjit_option values. */
enum {
  CU_JIT_MAX_REGISTERS = 0,
  CU_JIT_THREADS_PER_BLOCK = 1,
  CU_JIT_WALL_TIME = 2,
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_OPTIMIZATION_LEVEL = 7,
  CU_JIT_TARGET_FROM_CUCONTEXT = 8,
  CU_JIT_TARGET = 9,
  CU_JIT_LOG_VERBOSE = 12
};
typedef int CUjit_option;

/* CUjitInputType values. */
enum { CU_JIT_INPUT_CUBIN = 0, CU_JIT_INPUT_PTX = 1, CU_JIT_INPUT_FATBINARY = 2 };
typedef int CUjitInputType;

#define EM_CUDAAPI /* cdecl on Linux */

/* Function-pointer types of every entry point Ember resolves. */
typedef CUresult (*PFN_cuInit)(unsigned flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int *version);
typedef CUresult (*PFN_cuGetErrorName)(CUresult e, const char **name);
typedef CUresult (*PFN_cuGetErrorString)(CUresult e, const char **str);
typedef CUresult (*PFN_cuDeviceGetCount)(int *count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice *dev, int ordinal);
typedef CUresult (*PFN_cuDeviceGetName)(char *name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int *value, int attrib, CUdevice dev);
typedef CUresult (*PFN_cuDeviceTotalMem)(size_t *bytes, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetPCIBusId)(char *id, int len, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease)(CUdevice dev);
typedef CUresult (*PFN_cuCtxPushCurrent)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxPopCurrent)(CUcontext *ctx);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext *ctx);
typedef CUresult (*PFN_cuCtxSynchronize)(void);
typedef CUresult (*PFN_cuModuleLoadData)(CUmodule *mod, const void *image);
typedef CUresult (*PFN_cuModuleLoadDataEx)(CUmodule *mod, const void *image, unsigned n,
                                           CUjit_option *opts, void **vals);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction *f, CUmodule mod, const char *name);
typedef CUresult (*PFN_cuModuleUnload)(CUmodule mod);
typedef CUresult (*PFN_cuLinkCreate)(unsigned n, CUjit_option *opts, void **vals, CUlinkState *st);
typedef CUresult (*PFN_cuLinkAddData)(CUlinkState st, CUjitInputType type, void *data, size_t size,
                                      const char *name, unsigned n, CUjit_option *opts, void **vals);
typedef CUresult (*PFN_cuLinkComplete)(CUlinkState st, void **cubin, size_t *size);
typedef CUresult (*PFN_cuLinkDestroy)(CUlinkState st);
typedef CUresult (*PFN_cuMemAlloc)(CUdeviceptr *p, size_t bytes);
typedef CUresult (*PFN_cuMemFree)(CUdeviceptr p);
typedef CUresult (*PFN_cuMemHostAlloc)(void **p, size_t bytes, unsigned flags);
typedef CUresult (*PFN_cuMemHostGetDevicePointer)(CUdeviceptr *dptr, void *p, unsigned flags);
typedef CUresult (*PFN_cuMemFreeHost)(void *p);
typedef CUresult (*PFN_cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
typedef CUresult (*PFN_cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
typedef CUresult (*PFN_cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
typedef CUresult (*PFN_cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
typedef CUresult (*PFN_cuStreamCreate)(CUstream *s, unsigned flags);
typedef CUresult (*PFN_cuStreamDestroy)(CUstream s);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream s);
typedef CUresult (*PFN_cuStreamQuery)(CUstream s);
typedef CUresult (*PFN_cuStreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
typedef CUresult (*PFN_cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t n);
typedef CUresult (*PFN_cuMemsetD32)(CUdeviceptr dst, unsigned value, size_t n);
typedef CUresult (*PFN_cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream s);
typedef CUresult (*PFN_cuMemsetD32Async)(CUdeviceptr dst, unsigned value, size_t n, CUstream s);
typedef CUresult (*PFN_cuEventCreate)(CUevent *e, unsigned flags);
typedef CUresult (*PFN_cuEventRecord)(CUevent e, CUstream s);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent e);
typedef CUresult (*PFN_cuEventQuery)(CUevent e);
typedef CUresult (*PFN_cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
typedef CUresult (*PFN_cuEventDestroy)(CUevent e);
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                       CUstream s, void **params, void **extra);
/* Stream capture and graphs, each with the driver that first exports it
 * (cuda.h of that release): cuStreamBeginCapture(hStream) 10.0, its _v2 with
 * a mode 10.1 (cuda.h then maps the plain name to _v2; the plain symbol keeps
 * the 10.0 ABI); cuStreamEndCapture, cuStreamIsCapturing, cuGraphLaunch,
 * cuGraphExecDestroy, cuGraphDestroy 10.0; cuStreamGetCaptureInfo 10.1 (this
 * three-argument ABI; the _v2/_v3 symbols add outputs); cuGraphInstantiate
 * with the error node and log 10.0 (_v2, same ABI, 11.0; cuda.h 12.0 maps the
 * name to cuGraphInstantiateWithFlags, the symbols keep their ABI);
 * cuGraphInstantiateWithFlags 11.4. */
typedef CUresult (*PFN_cuStreamBeginCapture_v1)(CUstream s);
typedef CUresult (*PFN_cuStreamBeginCapture)(CUstream s, CUstreamCaptureMode mode);
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream s, CUgraph *graph);
typedef CUresult (*PFN_cuStreamIsCapturing)(CUstream s, CUstreamCaptureStatus *status);
typedef CUresult (*PFN_cuStreamGetCaptureInfo)(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id);
typedef CUresult (*PFN_cuGraphInstantiate)(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                           size_t log_size);
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec exec, CUstream s);
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec exec);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph graph);

#endif
