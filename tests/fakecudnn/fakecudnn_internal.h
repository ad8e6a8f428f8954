/* Internal declarations shared by the files of the fake libcudnn (a test
 * double of cuDNN's legacy C API, see README.md). Nothing here is exported.
 *
 * The ABI values below (status codes, enumerants, the layout of the
 * algorithm performance records) were read from cuDNN 9.19.0's
 * cudnn_graph_v9.h, cudnn_ops_v9.h and cudnn_cnn_v9.h (/usr/local/cuda/include)
 * and are written here independently; no NVIDIA header is included. */
#ifndef FAKECUDNN_INTERNAL_H
#define FAKECUDNN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_abi.h"
#include "fakecuda.h"

#define FD_EXPORT __attribute__((visibility("default")))

/* cudnnStatus_t is an enum (an int) in the ABI. */
typedef int cudnnStatus_t;

/* cuDNN 9 status numbers (cudnn_graph_v9.h). The double works in these and
 * renumbers at the API boundary when it pretends to be cuDNN 8 (fd_public). */
enum {
  FD_SUCCESS = 0,
  FD_NOT_INITIALIZED = 1001,
  FD_SUBLIBRARY_VERSION_MISMATCH = 1002,
  FD_BAD_PARAM = 2000,
  FD_BAD_PARAM_NULL_POINTER = 2002,
  FD_BAD_PARAM_SIZE_INSUFFICIENT = 2006,
  FD_BAD_PARAM_STREAM_MISMATCH = 2007,
  FD_NOT_SUPPORTED = 3000,
  FD_NOT_SUPPORTED_SHAPE = 3002,
  FD_NOT_SUPPORTED_DATA_TYPE = 3003,
  FD_NOT_SUPPORTED_LAYOUT = 3004,
  FD_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER = 3005,
  FD_NOT_SUPPORTED_ARCH_MISMATCH = 3007,
  FD_INTERNAL_ERROR = 4000,
  FD_INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 4003, /* CUDNN_STATUS_ALLOC_FAILED in 9.x */
  FD_EXECUTION_FAILED = 5000,
  FD_EXECUTION_FAILED_CUDA_DRIVER = 5001,
};
#define FD_ALLOC_FAILED FD_INTERNAL_ERROR_HOST_ALLOCATION_FAILED

/* cudnnDataType_t, cudnnTensorFormat_t, cudnnMathType_t, cudnnConvolutionMode_t,
 * cudnnDeterminism_t, cudnnPoolingMode_t, cudnnNanPropagation_t, cudnnBatchNormMode_t. */
enum { FD_FLOAT = 0, FD_DOUBLE = 1, FD_HALF = 2, FD_INT8 = 3, FD_BFLOAT16 = 9, FD_N_DTYPES = 22 };
enum { FD_NCHW = 0, FD_NHWC = 1, FD_NCHW_VECT_C = 2 };
enum { FD_DEFAULT_MATH = 0, FD_TENSOR_OP_MATH = 1, FD_TENSOR_OP_MATH_ALLOW_CONVERSION = 2, FD_FMA_MATH = 3 };
enum { FD_CONVOLUTION = 0, FD_CROSS_CORRELATION = 1 };
enum { FD_NON_DETERMINISTIC = 0, FD_DETERMINISTIC = 1 };
enum { FD_POOL_MAX = 0, FD_POOL_AVG_INCLUDE = 1, FD_POOL_AVG_EXCLUDE = 2, FD_POOL_MAX_DETERMINISTIC = 3 };
enum { FD_NOT_PROPAGATE_NAN = 0, FD_PROPAGATE_NAN = 1 };
enum { FD_BN_PER_ACTIVATION = 0, FD_BN_SPATIAL = 1, FD_BN_SPATIAL_PERSISTENT = 2 };

#define FD_DIM_MAX 8 /* CUDNN_DIM_MAX */

/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout. */
typedef struct fd_algo_perf {
  int algo;
  cudnnStatus_t status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
} fd_algo_perf;

/* ------------------------------------------------------------- objects --- */

struct cudnnContext {
  CUcontext ctx; /* current when the handle was made */
  CUdevice device;
  int cc;        /* 10 * major + minor */
  CUstream stream;
};

/* nb == 0: created, never set (every operation refuses it). */
struct cudnnTensorStruct {
  int nb;
  int dtype;
  int dims[FD_DIM_MAX];
  int strides[FD_DIM_MAX];
};

struct cudnnFilterStruct {
  int nb;
  int dtype;
  int format; /* NCHW: K C R S packed; NHWC: K R S C packed */
  int dims[FD_DIM_MAX];
};

struct cudnnConvolutionStruct {
  int nsp; /* spatial dimensions, 0 until set */
  int pad[FD_DIM_MAX - 2], stride[FD_DIM_MAX - 2], dilation[FD_DIM_MAX - 2];
  int mode;
  int compute; /* the "convolution data type" */
  int groups;
  int math;
};

struct cudnnPoolingStruct {
  int nsp;
  int mode, nan_opt;
  int window[FD_DIM_MAX - 2], pad[FD_DIM_MAX - 2], stride[FD_DIM_MAX - 2];
};

typedef struct cudnnContext *fd_handle;
typedef struct cudnnTensorStruct *fd_tensor;
typedef struct cudnnFilterStruct *fd_filter;
typedef struct cudnnConvolutionStruct *fd_conv;
typedef struct cudnnPoolingStruct *fd_pool;

typedef enum { FD_OBJ_HANDLE, FD_OBJ_TENSOR, FD_OBJ_FILTER, FD_OBJ_CONV, FD_OBJ_POOL, FD_N_KINDS } fd_kind;

/* The registry of live objects (fakecudnn.c): a pointer that is not in it
 * (destroyed, never made, of another kind) is refused with BAD_PARAM. */
int fd_register(void *obj, fd_kind kind);
int fd_unregister(void *obj, fd_kind kind);
int fd_is_live(const void *obj, fd_kind kind);
size_t fd_live_count(fd_kind kind);

/* ------------------------------------------------------- entry points --- */

/* Every exported cuDNN entry point: (name, 1 when it returns a status and so
 * can be failed by FAKECUDNN_FAIL). */
#define FD_ENTRY_LIST(X)                                  \
  X(cudnnGetVersion, 0)                                   \
  X(cudnnGetCudartVersion, 0)                             \
  X(cudnnGetErrorString, 0)                               \
  X(cudnnCreate, 1)                                       \
  X(cudnnDestroy, 1)                                      \
  X(cudnnSetStream, 1)                                    \
  X(cudnnGetStream, 1)                                    \
  X(cudnnCreateTensorDescriptor, 1)                       \
  X(cudnnSetTensor4dDescriptor, 1)                        \
  X(cudnnSetTensor4dDescriptorEx, 1)                      \
  X(cudnnSetTensorNdDescriptor, 1)                        \
  X(cudnnSetTensorNdDescriptorEx, 1)                      \
  X(cudnnGetTensorNdDescriptor, 1)                        \
  X(cudnnGetTensorSizeInBytes, 1)                         \
  X(cudnnDestroyTensorDescriptor, 1)                      \
  X(cudnnCreateFilterDescriptor, 1)                       \
  X(cudnnSetFilter4dDescriptor, 1)                        \
  X(cudnnSetFilterNdDescriptor, 1)                        \
  X(cudnnDestroyFilterDescriptor, 1)                      \
  X(cudnnCreateConvolutionDescriptor, 1)                  \
  X(cudnnSetConvolution2dDescriptor, 1)                   \
  X(cudnnSetConvolutionNdDescriptor, 1)                   \
  X(cudnnSetConvolutionGroupCount, 1)                     \
  X(cudnnSetConvolutionMathType, 1)                       \
  X(cudnnGetConvolutionNdForwardOutputDim, 1)             \
  X(cudnnDestroyConvolutionDescriptor, 1)                 \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount, 1)       \
  X(cudnnGetConvolutionForwardAlgorithm_v7, 1)            \
  X(cudnnFindConvolutionForwardAlgorithmEx, 1)            \
  X(cudnnGetConvolutionForwardWorkspaceSize, 1)           \
  X(cudnnConvolutionForward, 1)                           \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount, 1)  \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7, 1)       \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx, 1)       \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize, 1)      \
  X(cudnnConvolutionBackwardData, 1)                      \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, 1) \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7, 1)     \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx, 1)     \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize, 1)    \
  X(cudnnConvolutionBackwardFilter, 1)                    \
  X(cudnnConvolutionBackwardBias, 1)                      \
  X(cudnnCreatePoolingDescriptor, 1)                      \
  X(cudnnSetPoolingNdDescriptor, 1)                       \
  X(cudnnGetPoolingNdForwardOutputDim, 1)                 \
  X(cudnnDestroyPoolingDescriptor, 1)                     \
  X(cudnnPoolingForward, 1)                               \
  X(cudnnPoolingBackward, 1)                              \
  X(cudnnDeriveBNTensorDescriptor, 1)                     \
  X(cudnnBatchNormalizationForwardTraining, 1)            \
  X(cudnnBatchNormalizationForwardInference, 1)           \
  X(cudnnBatchNormalizationBackward, 1)                   \
  X(cudnnSetTensor, 1)                                    \
  X(cudnnAddTensor, 1)

typedef enum fd_entry {
#define FD_ENUM(name, fails) FD_##name,
  FD_ENTRY_LIST(FD_ENUM)
#undef FD_ENUM
      FD_N_ENTRIES
} fd_entry;

/* Name of an entry, and the entry of a name (-1 when unknown). */
const char *fd_entry_name(fd_entry e);
int fd_entry_lookup(const char *name, size_t len, fd_entry *out);
int fd_entry_can_fail(fd_entry e);

/* Locks the double, reads the environment again when it changed, counts the
 * call and applies FAKECUDNN_FAIL: FD_SUCCESS, or the status to return (an
 * injected one is already in the public numbering: *raw is then 1). The lock
 * is held until fd_leave, which renumbers a status for cuDNN 8. */
cudnnStatus_t fd_enter(fd_entry e, int *raw);
cudnnStatus_t fd_leave(cudnnStatus_t s, int raw);
/* A status as the configured version numbers it (perf records carry one). */
cudnnStatus_t fd_public(cudnnStatus_t s);

#define FD_CALL(id, expr)                              \
  do {                                                 \
    int fd_raw_ = 0;                                   \
    cudnnStatus_t fd_r_ = fd_enter(FD_##id, &fd_raw_); \
    if (fd_r_ == FD_SUCCESS && !fd_raw_) fd_r_ = (expr); \
    return fd_leave(fd_r_, fd_raw_);                   \
  } while (0)

/* Compile-time check that an export keeps the signature the glue calls. */
#define FD_SAME_TYPE(fn, pfn) _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), pfn), #fn " != " #pfn)

/* A refusal with its reason: the reason goes to stderr ("fakecudnn: ...")
 * and to fakecudnn_last_error(), as cuDNN's error log would say it. */
cudnnStatus_t fd_refuse(cudnnStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What the last operation was (fakecudnn_last_call). */
void fd_note_call(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------- config --- */

#define FD_MAX_FAIL_RULES 64

typedef struct fd_fail_rule {
  fd_entry entry;
  int code;          /* returned as is (public numbering) */
  unsigned long nth; /* 0: every call; N: only the N-th */
} fd_fail_rule;

typedef struct fd_config {
  int major, minor, patch; /* FAKECUDNN_VERSION */
  int cudart;              /* FAKECUDNN_CUDART, or the version's default */
  int n_rules;             /* FAKECUDNN_FAIL */
  fd_fail_rule rules[FD_MAX_FAIL_RULES];
  int tf32_off;            /* NVIDIA_TF32_OVERRIDE=0 */
  unsigned long long seed; /* FAKECUDA_SEED, or 1: the orders of non-deterministic algorithms */
} fd_config;

/* Reads every variable: 0, or -1 with a message naming the variable. */
int fd_config_read(fd_config *cfg, char *err, size_t cap);
/* A text that changes whenever a variable the double reads changes. */
char *fd_config_snapshot(void);
/* The lowest compute capability (10 * major + minor) of the configured
 * version (cuda-compat.md section 9.1). */
int fd_lowest_cc(const fd_config *cfg);

typedef struct fd_state {
  int configured;
  char *snapshot;
  fd_config cfg;
  char config_error[256];
  unsigned long counters[FD_N_ENTRIES];
  unsigned long long order_state; /* draws of the non-deterministic orders */
} fd_state;

extern fd_state fd_g;

/* The next draw of the non-deterministic algorithms' orders (xorshift64*). */
unsigned long long fd_random(void);

/* ------------------------------------------------------------- driver --- */

/* The loaded libcuda (the double) found with dlopen(RTLD_NOLOAD), as cuDNN
 * finds the driver; its work hooks are how operations run (README.md). */
typedef struct fd_driver {
  void *lib;
  PFN_cuCtxGetCurrent ctx_get_current;
  PFN_cuCtxGetDevice ctx_get_device;
  PFN_cuDeviceGetAttribute device_attribute;
  PFN_cuDriverGetVersion driver_version;
  PFN_cuCtxSynchronize ctx_synchronize;
  PFN_cuStreamSynchronize stream_synchronize;
  fakecuda_enqueue_work_fn enqueue_work;
  fakecuda_device_span_fn device_span;
} fd_driver;

extern fd_driver fd_drv;

/* Checks a handle for an operation that issues work: live, its context
 * current (else BAD_PARAM with the reason). */
cudnnStatus_t fd_check_handle(fd_handle h, const char *op);
/* Checks a handle for a query: live. */
cudnnStatus_t fd_handle_live(fd_handle h, const char *op);

/* ------------------------------------------------------------ numbers --- */

/* Size in bytes of an element of a data type the double computes with (f32,
 * f64, f16, bf16), 0 for any other. */
size_t fd_dtype_size(int dtype);
const char *fd_dtype_name(int dtype);
/* Rounding of a value to the precision of a type (the value is kept in a
 * double): f32, f16 (IEEE binary16, round to nearest even, overflow to inf),
 * bf16, TF32 (f32 with 10 mantissa bits). */
double fd_round_f32(double v);
double fd_round_f16(double v);
double fd_round_bf16(double v);
double fd_round_tf32(double v);
/* The rounding of a computation type (FD_FLOAT, FD_DOUBLE, FD_HALF). */
double fd_round_to(int compute, double v);

/* A strided tensor of device memory as an operation sees it: its logical
 * dimensions (n, c, spatial... or k, c, spatial... for a filter) with their
 * strides in elements. host is set inside a run function. */
typedef struct fd_view {
  CUdeviceptr dptr;
  void *host;
  int nd;
  int dtype;
  int64_t dims[FD_DIM_MAX];
  int64_t strides[FD_DIM_MAX];
} fd_view;

void fd_view_of_tensor(fd_view *v, fd_tensor t, const void *dptr);
/* A filter as a view in K, C, spatial... order, whatever its format. */
void fd_view_of_filter(fd_view *v, fd_filter f, const void *dptr);
/* Bytes from the first element to the end of the last (the exact extent an
 * operation reads or writes). */
size_t fd_view_extent(const fd_view *v);
int64_t fd_view_count(const fd_view *v);
/* Offset in elements of the element at index idx[0..nd). */
int64_t fd_view_offset(const fd_view *v, const int64_t *idx);
double fd_load(const fd_view *v, int64_t off);
void fd_store(const fd_view *v, int64_t off, double value);
/* Next index in row-major order over v's dims; 0 after the last. */
int fd_next_index(const fd_view *v, int64_t *idx);
/* Reads alpha and beta (host memory): double for double data, else float
 * (the cuDNN rule for scaling parameters). */
void fd_read_scalars(int dtype, const void *alpha, const void *beta, double *a, double *b);
/* dst = alpha * value + beta * prior in the computation type; prior is not
 * read when beta is 0 (cuDNN: the output may then hold anything, NaN too). */
double fd_blend(int compute, double alpha, double value, double beta, const fd_view *dst, int64_t off);

/* ------------------------------------------------------- descriptors --- */

/* Validity checks of a set descriptor, for operations. */
cudnnStatus_t fd_tensor_ready(fd_tensor t, const char *what);
cudnnStatus_t fd_filter_ready(fd_filter f, const char *what);
int fd_tensor_has_negative_stride(fd_tensor t);
/* "[2,3,8,8]f32" for the last-call text. */
void fd_tensor_text(fd_tensor t, char *buf, size_t cap);
void fd_filter_text(fd_filter f, char *buf, size_t cap);
/* The output size of spatial axis i (cudnnGetConvolutionNdForwardOutputDim's
 * formula: 1 + (in + 2 pad - ((k - 1) dilation + 1)) / stride). */
int64_t fd_conv_out_size(int64_t in, int64_t k, int pad, int stride, int dilation);

#endif
