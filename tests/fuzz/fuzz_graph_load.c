// fuzz-sources: engine/graph_io.c engine/graph.c engine/schedule.c engine/op_registry.c engine/graph_edit.c ops/core.c engine/tensor.c runtime/error.c -Iops -Iengine -DEM_OP_FAMILIES(X)=X(core)
/* libFuzzer target for em_graph_load's parser (engine/graph_io.c,
 * em_graph_from_bytes). The input's last 8 bytes are replaced by the XXH3-64
 * of the rest, so the fuzzer gets past the checksum and into the parser.
 * The engine is built with the core ops only (the registry's family list is
 * given on the command line) and with the CPU parts of the runtime stubbed
 * below, so the target needs neither the kernels nor a driver: the fuzzed
 * graphs live on the CPU, and anything that asks for a CUDA device or a core
 * op's GPU member gets EM_ERR_NO_DEVICE. Accepted
 * graphs are walked, cloned, scheduled and re-checked, so the sanitizers see
 * any handle, shape or pointer that does not hold. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core_gpu.h"
#include "graph_internal.h"

/* ------------------------------------------- CPU-only runtime stand-ins --- */

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

/* ------------------------------------------------------------- target --- */

static void walk(em_graph *g) {
  size_t n = em_graph_value_count(g);
  for (size_t v = 0; v < n; v++) {
    em_dtype dt;
    int nd;
    int64_t dims[EM_MAX_DIMS];
    const char *name;
    if (em_var_info(g, (em_var)v, &dt, &nd, dims) || em_var_name(g, (em_var)v, &name)) abort();
    if (nd < 0 || nd > EM_MAX_DIMS || !name) abort();
    for (int i = 0; i < nd; i++)
      if (dims[i] < -1) abort();
  }
  size_t count;
  if (em_graph_parameters(g, NULL, 0, &count) || em_graph_states(g, NULL, 0, &count)) abort();
  /* Scheduling everything meets any cycle or unbound placeholder: an error, never a crash. */
  em_var *all = malloc(sizeof(em_var) * (n ? n : 1));
  if (!all) return;
  for (size_t v = 0; v < n; v++) all[v] = (em_var)v;
  int *order = NULL, n_order = 0;
  if (!em_graph_schedule(g, all, (int)n, &order, &n_order) && (n_order < 0 || (size_t)n_order > n)) abort();
  free(order);
  free(all);
  em_graph *c;
  if (!em_graph_clone(g, EM_CLONE_COPY, &c)) {
    if (em_graph_value_count(c) != n) abort();
    em_graph_free(c);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8 || size > (1u << 20)) return 0;
  unsigned char *copy = malloc(size);
  if (!copy) return 0;
  memcpy(copy, data, size);
  uint64_t h = XXH3_64bits(copy, size - 8);
  for (int i = 0; i < 8; i++) copy[size - 8 + (size_t)i] = (unsigned char)(h >> (8 * i));
  em_graph *g = NULL;
  if (!em_graph_from_bytes(copy, size, "fuzz", &g)) {
    walk(g);
    em_graph_free(g);
  }
  free(copy);
  return 0;
}
