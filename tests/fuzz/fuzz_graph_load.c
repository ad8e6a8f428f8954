// fuzz-sources: engine/graph_io.c runtime/file_atomic.c engine/graph.c engine/schedule.c engine/op_registry.c engine/graph_edit.c engine/graph_block.c ops/core.c engine/tensor.c runtime/error.c -Iops -Iengine -DEM_OP_FAMILIES(X)=X(core)
/* libFuzzer target for em_graph_load's parser (engine/graph_io.c,
 * em_graph_from_bytes). The input's last 8 bytes are replaced by the XXH3-64
 * of the rest, so the fuzzer gets past the checksum and into the parser.
 * The engine is built with the core ops only (the registry's family list is
 * given on the command line) and with the CPU parts of the runtime stubbed
 * (cpu_only_runtime.h), so the target needs neither the kernels nor a driver: the fuzzed
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

#include "cpu_only_runtime.h"

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
