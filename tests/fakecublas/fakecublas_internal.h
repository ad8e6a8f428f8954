/* Internal declarations shared by the files of the fake libcublas (a test
 * double of cuBLAS, see README.md). Nothing here is exported.
 *
 * The cuBLAS types and values are written here from cublas_api.h and
 * library_types.h of the CUDA 13.0 toolkit (cuBLAS 13.1.0) and NVIDIA's
 * cuBLAS documentation; no NVIDIA header is included. The driver types come
 * from Ember's runtime/cuda_abi.h, through the libcuda double's hook header. */
#ifndef FAKECUBLAS_INTERNAL_H
#define FAKECUBLAS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fakecublas.h"
#include "fakecuda/fakecuda.h"

/* The test hooks (fakecublas_*) are exported by both doubles built from these files; the
 * cuBLAS entry points only by libcublas.so.13: the cuBLASLt double (libcublasLt.so.13, built
 * with FCB_LT_DOUBLE) uses them inside and exports only cuBLASLt's names. */
#define FCB_HOOK __attribute__((visibility("default")))
#ifdef FCB_LT_DOUBLE
#define FCB_EXPORT
#else
#define FCB_EXPORT FCB_HOOK
#endif

/* ------------------------------------------------------- cuBLAS ABI --- */

typedef struct cublasContext *cublasHandle_t; /* opaque (cublas_api.h) */
typedef int cublasStatus_t;                   /* every enum below is an int in the ABI */

enum { /* cublasStatus_t, cublas_api.h */
       CUBLAS_STATUS_SUCCESS = 0,
       CUBLAS_STATUS_NOT_INITIALIZED = 1,
       CUBLAS_STATUS_ALLOC_FAILED = 3,
       CUBLAS_STATUS_INVALID_VALUE = 7,
       CUBLAS_STATUS_ARCH_MISMATCH = 8,
       CUBLAS_STATUS_MAPPING_ERROR = 11,
       CUBLAS_STATUS_EXECUTION_FAILED = 13,
       CUBLAS_STATUS_INTERNAL_ERROR = 14,
       CUBLAS_STATUS_NOT_SUPPORTED = 15,
       CUBLAS_STATUS_LICENSE_ERROR = 16 };

enum { /* cublasOperation_t; CUBLAS_OP_CONJG (3) is "not supported in the current release" */
       CUBLAS_OP_N = 0,
       CUBLAS_OP_T = 1,
       CUBLAS_OP_C = 2 };

enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 }; /* cublasPointerMode_t */

enum { /* cublasMath_t: a base mode, optionally or-ed with the flag 16 */
       CUBLAS_DEFAULT_MATH = 0,
       CUBLAS_TENSOR_OP_MATH = 1, /* "deprecated, same effect as using CUBLAS_COMPUTE_32F_FAST_16F" */
       CUBLAS_PEDANTIC_MATH = 2,
       CUBLAS_TF32_TENSOR_OP_MATH = 3,
       CUBLAS_FP32_EMULATED_BF16X9_MATH = 4,
       CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH = 8,
       CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16 };

enum { /* cublasComputeType_t */
       CUBLAS_COMPUTE_16F = 64,
       CUBLAS_COMPUTE_16F_PEDANTIC = 65,
       CUBLAS_COMPUTE_32F = 68,
       CUBLAS_COMPUTE_32F_PEDANTIC = 69,
       CUBLAS_COMPUTE_64F = 70,
       CUBLAS_COMPUTE_64F_PEDANTIC = 71,
       CUBLAS_COMPUTE_32I = 72,
       CUBLAS_COMPUTE_32I_PEDANTIC = 73,
       CUBLAS_COMPUTE_32F_FAST_16F = 74,
       CUBLAS_COMPUTE_32F_FAST_16BF = 75,
       CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
       CUBLAS_COMPUTE_32F_EMULATED_16BFX9 = 78,
       CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT = 79 };

enum { /* cudaDataType_t, library_types.h: the values 0 ... 33 are all defined in CUDA 13.0 */
       CUDA_R_32F = 0,
       CUDA_R_64F = 1,
       CUDA_R_16F = 2,
       CUDA_R_16BF = 14,
       FCB_DATA_TYPE_LAST = 33 };

enum { MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 }; /* libraryPropertyType, library_types.h */

/* ---------------------------------------------------- entry points --- */

/* Every exported cuBLAS entry point, each with a call counter and subject to
 * FAKECUBLAS_FAIL (the two status-text functions return no status: they are
 * counted, and a rule naming them is refused). */
#define FCB_ENTRY_LIST(X)        \
  X(cublasCreate_v2)             \
  X(cublasDestroy_v2)            \
  X(cublasSetStream_v2)          \
  X(cublasGetStream_v2)          \
  X(cublasSetWorkspace_v2)       \
  X(cublasSetMathMode)           \
  X(cublasGetMathMode)           \
  X(cublasSetPointerMode_v2)     \
  X(cublasGetPointerMode_v2)     \
  X(cublasGetProperty)           \
  X(cublasGetVersion_v2)         \
  X(cublasGetStatusName)         \
  X(cublasGetStatusString)       \
  X(cublasSgemm_v2)              \
  X(cublasDgemm_v2)              \
  X(cublasGemmEx)                \
  X(cublasGemmStridedBatchedEx)  \
  X(cublasSgemmStridedBatched)   \
  X(cublasDgemmStridedBatched)   \
  X(cublasSgemv_v2)              \
  X(cublasDgemv_v2)              \
  X(cublasSgemvStridedBatched)   \
  X(cublasDgemvStridedBatched)   \
  X(cublasLtCreate)              \
  X(cublasLtDestroy)             \
  X(cublasLtGetProperty)         \
  X(cublasLtMatmulDescCreate)    \
  X(cublasLtMatmulDescDestroy)   \
  X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate)  \
  X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmul)

typedef enum fcb_entry {
#define FCB_ENUM(name) FCB_##name,
  FCB_ENTRY_LIST(FCB_ENUM)
#undef FCB_ENUM
      FCB_N_ENTRIES
} fcb_entry;

const char *fcb_entry_name(fcb_entry e);

/* ------------------------------------------------------ the driver --- */

/* The loaded libcuda (found with dlopen RTLD_NOLOAD, as the real library
 * finds the driver) and what the double calls in it. */
typedef struct fcb_driver {
  void *lib; /* a dlopen reference, held by a handle for its lifetime */
  CUresult (*ctx_get_current)(CUcontext *ctx);
  CUresult (*ctx_get_device)(CUdevice *dev);
  CUresult (*ctx_synchronize)(void);
  CUresult (*device_attribute)(int *value, int attrib, CUdevice dev);
  CUresult (*driver_version)(int *version);
  CUresult (*pointer_attribute)(void *data, int attribute, CUdeviceptr ptr);
  fakecuda_enqueue_work_fn enqueue_work;
  fakecuda_device_span_fn device_span;
} fcb_driver;

/* ----------------------------------------------------------- state --- */

/* What a cuBLAS call needs of its handle, copied out under the lock so the
 * call goes on without it. */
typedef struct fcb_handle_state {
  CUcontext ctx;          /* current at cublasCreate_v2: the handle belongs to it */
  int device;             /* its device (cuCtxGetDevice) */
  int cc;                 /* the device's compute capability, 10 * major + minor */
  CUstream stream;        /* cublasSetStream_v2; NULL = the legacy default stream */
  CUdeviceptr workspace;  /* cublasSetWorkspace_v2; 0 = the default pool */
  size_t workspace_bytes;
  int math_mode;          /* cublasSetMathMode */
  int pointer_mode;       /* cublasSetPointerMode_v2 */
  fcb_driver drv;
} fcb_handle_state;

/* The library version of the configuration (FAKECUBLAS_VERSION). */
typedef struct fcb_version {
  int major, minor, patch;
} fcb_version;

/* Takes the lock, counts call e, applies the configuration and fault
 * injection rules. Returns CUBLAS_STATUS_SUCCESS with *v set, else the
 * status to return (injected, or NOT_INITIALIZED under a malformed
 * configuration); the lock is released either way. */
cublasStatus_t fcb_enter(fcb_entry e, fcb_version *v);

/* The state of a live handle: CUBLAS_STATUS_SUCCESS, or NOT_INITIALIZED for
 * NULL, a destroyed or an unknown handle (with the reason noted). */
cublasStatus_t fcb_handle_get(cublasHandle_t h, const char *entry, fcb_handle_state *out);

/* Records why a call was refused (fakecublas_last_error) and returns st. */
cublasStatus_t fcb_refuse(cublasStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the description of the last product (fakecublas_last_gemm). */
void fcb_note_product(const char *text);

/* A cublasLtMatmul as a product of the double (fakecublaslt.c calls it after its own checks):
 * D = epilogue(alpha op(A) op(B) + beta C), D at C (the double does not model an out-of-place
 * D), all CUDA_R_32F, on `stream` with `workspace`, whatever the handle's settings. epilogue:
 * cublasLtEpilogue_t (1 DEFAULT, 2 RELU, 4 BIAS, 32 GELU and their BIAS combinations); bias: m
 * floats, one per row of D, when the BIAS bit is set. */
typedef struct fcb_lt_call {
  cublasHandle_t handle;
  CUstream stream;
  CUdeviceptr workspace;
  size_t workspace_bytes;
  int transa, transb, m, n, k;
  const float *alpha, *beta;
  CUdeviceptr a, b, c;
  int lda, ldb, ldc;
  int compute;
  int epilogue;
  CUdeviceptr bias;
} fcb_lt_call;
cublasStatus_t fcb_lt_product(const fcb_lt_call *c);
/* fakecublas.c's handles, which the cuBLASLt double's handles are. */
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);


/* ------------------------------------------------------- numerics --- */

/* Rounding to narrower formats, round-to-nearest-even, with infinities,
 * NaNs and subnormals (fakecublas_numeric.c). */
uint16_t fcb_f32_to_f16(float f);
float fcb_f16_to_f32(uint16_t h);
uint16_t fcb_f32_to_bf16(float f);
float fcb_bf16_to_f32(uint16_t b);
float fcb_round_tf32(float f);

#endif
