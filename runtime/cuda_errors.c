/* Names and one-line fixes for the CUresult codes Ember meets. Ember keeps its
 * own table because the toolkit's stub driver returns NULL names, and because
 * the fix is what a user needs. Codes and names: CUDA 13.0 cuda.h; causes:
 * shared/reference/cuda-compat.md section 6. */
#include <stdarg.h>
#include <stdio.h>

#include "runtime.h"

typedef struct cuda_error_row {
  CUresult code;
  const char *name;
  const char *fix;
} cuda_error_row;

static const cuda_error_row rows[] = {
  {CUDA_SUCCESS, "CUDA_SUCCESS", "nothing to fix"},
  {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "a bad argument reached the driver: please report it as an Ember bug"},
  {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "free device memory (other processes: nvidia-smi) or use smaller batches"},
  {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "cuInit failed earlier: see `gpucheck`"},
  {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "the driver is shutting down (called during process exit)"},
  {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "the CUDA toolkit's stub libcuda.so was loaded: remove .../lib64/stubs from LD_LIBRARY_PATH and install the NVIDIA driver"},
  {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "the driver is older than the API used: upgrade the NVIDIA driver"},
  {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "the GPU is busy or in exclusive/prohibited compute mode: check nvidia-smi -q -d COMPUTE"},
  {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no visible GPU: check CUDA_VISIBLE_DEVICES and, in a container, --gpus / NVIDIA_VISIBLE_DEVICES"},
  {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "the device ordinal does not exist"},
  {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "the driver cannot read this image (corrupt, or from a newer toolkit): upgrade the driver"},
  {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "no current context: please report it as an Ember bug"},
  {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image for this GPU: Ember moves to the next path of its plan (see EMBER_LOG=dispatch)"},
  {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "the driver's PTX JIT failed: the JIT log follows; try EMBER_FORCE=nvrtc"},
  {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "the driver's PTX JIT library (libnvidia-ptxjitcompiler.so.1) is missing: reinstall the driver or mount it into the container"},
  {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the PTX is newer than this driver can compile: upgrade the driver"},
  {CUDA_ERROR_JIT_COMPILATION_DISABLED, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "CUDA_DISABLE_PTX_JIT is set: unset it or use an image with a cubin for this GPU"},
  {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "a stale handle reached the driver: please report it as an Ember bug"},
  {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "the kernel is not in the loaded image: rebuild Ember (image table and kernels disagree)"},
  {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "work is still running"},
  {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "a kernel faulted; the context is unusable: restart the process (run compute-sanitizer to find it)"},
  {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "the operation is not supported on this device or driver"},
  {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "the user-mode libcuda does not match the kernel module (cuda-compat package or a partial upgrade): run `gpucheck`"},
  {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward-compatibility libraries used on a GPU that does not support them: remove cuda-compat from the library path"},
  {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown driver error: check dmesg for Xid messages"},
};

static const cuda_error_row *find(CUresult r) {
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].code == r) return &rows[i];
  return NULL;
}

const char *em_cuda_error_name(CUresult r) {
  const cuda_error_row *row = find(r);
  return row ? row->name : "CUDA_ERROR_(unlisted)";
}

const char *em_cuda_error_fix(CUresult r) {
  const cuda_error_row *row = find(r);
  return row ? row->fix : "see `gpucheck explain` for this code";
}

em_status em_cuda_fail(CUresult r, const char *call, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  em_status s = EM_ERR_CUDA;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) s = EM_ERR_OUT_OF_MEMORY;
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) s = EM_ERR_NO_KERNEL_IMAGE;
  return em_fail(s, "%s: %s failed: %s (%d). Fix: %s", what, call, em_cuda_error_name(r), r, em_cuda_error_fix(r));
}
