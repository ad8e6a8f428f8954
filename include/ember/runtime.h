/* What the operators use: kernels by name, launches, device memory (a caching
 * allocator), copies and streams. */
#ifndef EMBER_RUNTIME_H
#define EMBER_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include "ember/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_stream em_stream; /* NULL means the device's default stream */
typedef struct em_kernel em_kernel; /* owned by the runtime; valid until em_shutdown */

typedef struct em_dim3 { unsigned x, y, z; } em_dim3;

/* Finds a kernel by name on a device, loading its module on first use through
 * the selection policy. Returns EM_ERR_USE_CPU when the device's plan for the
 * module is the CPU (the reason is in em_last_error), EM_ERR_STRICT when that
 * happens under EMBER_STRICT=1, EM_ERR_NOT_FOUND for an unknown name. */
EM_API em_status em_kernel_get(em_device dev, const char *name, em_kernel **out);

/* Launches with the CUDA kernel-parameter convention: args[i] points at the
 * i-th argument's value. */
EM_API em_status em_kernel_launch(em_kernel *k, em_dim3 grid, em_dim3 block,
                                  size_t shared_bytes, em_stream *stream, void **args);

/* Device memory, from a per-device caching allocator. A CPU device gets
 * 64-byte-aligned host memory; its cache holds at most 1 GiB of freed blocks. */
EM_API em_status em_malloc(em_device dev, size_t bytes, void **ptr);
EM_API em_status em_free(em_device dev, void *ptr);

typedef struct em_alloc_stats {
  uint64_t bytes_in_use;      /* handed out to callers */
  uint64_t bytes_cached;      /* held for reuse */
  uint64_t peak_bytes_in_use;
  uint64_t device_allocs;     /* calls to cuMemAlloc */
  uint64_t cache_hits;
} em_alloc_stats;

EM_API em_status em_alloc_stats_get(em_device dev, em_alloc_stats *out);
/* Returns every cached block of the device to the driver. */
EM_API em_status em_alloc_trim(em_device dev);

EM_API em_status em_memcpy_h2d(em_device dev, void *dst, const void *src, size_t bytes,
                               em_stream *stream);
/* A synchronous copy to the host (stream NULL) waits for the device; like
 * em_stream_sync it then reports an input check on the device that failed
 * since the last report (the bytes are copied all the same). */
EM_API em_status em_memcpy_d2h(em_device dev, void *dst, const void *src, size_t bytes,
                               em_stream *stream);
EM_API em_status em_memcpy_d2d(em_device dev, void *dst, const void *src, size_t bytes,
                               em_stream *stream);

EM_API em_status em_stream_create(em_device dev, em_stream **out);
EM_API em_status em_stream_destroy(em_stream *s);
/* Waits for the stream (NULL: the whole device) to finish. The whole device
 * cannot be waited for while another thread's executor captures a CUDA graph
 * on it (em_exec_set_graphs): CUDA refuses that (900,
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and the capture fails, so such a
 * thread waits for its own work instead (reading a value does). Ops check some
 * input values on the device (a class label outside [0, c), a probability
 * outside [0, 1]) without a copy of their own: a check that failed since the
 * last report is reported here, or at the next synchronous copy to the host,
 * with the op's message, its node and run (once; the device stays usable). */
EM_API em_status em_stream_sync(em_device dev, em_stream *s);

/* Releases every module, CUDA buffer and stream and closes the driver. NVRTC,
 * cuBLAS and cuDNN stay mapped (RTLD_NODELETE): their C++ runtimes leak on
 * each unload. CPU tensors stay valid (the CPU allocator only returns its
 * cache); tensors on a CUDA device lose their memory with the context, and
 * releasing them afterwards is safe. The next Ember call initialises the
 * runtime again. */
EM_API void em_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
