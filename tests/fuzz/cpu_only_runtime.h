/* CPU-only stand-ins for the runtime functions the engine's graph parts
 * call, for fuzz targets that link engine/ sources without the kernels or a
 * driver (fuzz_graph_load.c, fuzz_checkpoint.c): the fuzzed graphs live on
 * the CPU, and anything that asks for a CUDA device or a core op's GPU
 * member gets EM_ERR_NO_DEVICE. Included once per target (it defines). */
#ifndef EMBER_FUZZ_CPU_ONLY_RUNTIME_H
#define EMBER_FUZZ_CPU_ONLY_RUNTIME_H

#include <stdlib.h>
#include <string.h>

#include "core_gpu.h"
#include "graph_internal.h"

em_device em_cpu(void) { return (em_device){EM_DEVICE_CPU, 0}; }
int em_cpu_threads(void) { return 1; }

em_status em_device_check(em_device dev) {
  return dev.kind == EM_DEVICE_CPU && dev.ordinal == 0 ? EM_OK : EM_ERR_NO_DEVICE;
}

em_status em_malloc(em_device dev, size_t bytes, void **ptr) {
  (void)dev;
  *ptr = malloc(bytes ? bytes : 1);
  return *ptr ? EM_OK : EM_ERR_OUT_OF_MEMORY;
}

em_status em_free(em_device dev, void *ptr) {
  (void)dev;
  free(ptr);
  return EM_OK;
}

em_status em_memcpy_h2d(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s) {
  (void)dev, (void)s;
  memmove(dst, src, bytes);
  return EM_OK;
}

em_status em_memcpy_d2h(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s) {
  return em_memcpy_h2d(dev, dst, src, bytes, s);
}

em_status em_memcpy_d2d(em_device dev, void *dst, const void *src, size_t bytes, em_stream *s) {
  return em_memcpy_h2d(dev, dst, src, bytes, s);
}

/* The core ops' GPU members (ops/core_gpu.c) need the kernels: no device here. */
#define NO_GPU_MEMBER(name) \
  em_status name(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) { \
    (void)a, (void)in, (void)out; \
    return EM_ERR_NO_DEVICE; \
  }
NO_GPU_MEMBER(em_core_copy_gpu)
NO_GPU_MEMBER(em_core_zeros_gpu)
NO_GPU_MEMBER(em_core_ones_gpu)
NO_GPU_MEMBER(em_core_add_n_gpu)
NO_GPU_MEMBER(em_core_sum_to_gpu)
NO_GPU_MEMBER(em_core_broadcast_like_gpu)
NO_GPU_MEMBER(em_core_weighted_sum_gpu)
NO_GPU_MEMBER(em_core_scale_by_gpu)

/* Only the test kit and constants of half types reach these: zero is fine. */
em_status em_f32_to_f16(em_device dev, const float *x, uint16_t *y, size_t n, em_stream *s) {
  (void)dev, (void)x, (void)s;
  memset(y, 0, n * sizeof *y);
  return EM_OK;
}

em_status em_f32_to_bf16(em_device dev, const float *x, uint16_t *y, size_t n, em_stream *s) {
  return em_f32_to_f16(dev, x, y, n, s);
}

#endif
