// fuzz-sources: training/checkpoint.c engine/graph_io.c runtime/file_atomic.c engine/graph.c engine/schedule.c engine/op_registry.c engine/graph_edit.c engine/graph_block.c ops/core.c engine/tensor.c runtime/error.c -Iops -Iengine -Itraining -DEM_OP_FAMILIES(X)=X(core)
/* libFuzzer target for the checkpoint loader (training/checkpoint.c,
 * em_checkpoint_from_bytes: what em_checkpoint_load and em_checkpoint_info
 * run on a file's bytes). Before parsing, every checksum the input's own
 * layout points at is recomputed (the header's, each section's where its
 * table entry lies inside the input, the table's, the whole file's), so the
 * fuzzer gets past them into the table, the manifest's JSON and the graph
 * parser; the checks of the checksums themselves are covered by
 * test_checkpoint. The engine runs with the core ops only and CPU-only
 * runtime stand-ins (cpu_only_runtime.h). Accepted checkpoints are walked
 * through every accessor. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "checkpoint_internal.h"
#include "cpu_only_runtime.h"

/* What checkpoint.c asks of the runtime beyond the graph parts. */
const char *em_version(void) { return "0.1.0"; }
em_device em_cuda(int ordinal) { return (em_device){EM_DEVICE_CUDA, ordinal}; }
em_status em_device_get_info(em_device dev, em_device_info *out) {
  (void)dev, (void)out;
  return EM_ERR_NO_DEVICE;
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static void set64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Header 32 bytes, table of 80-byte entries and its checksum, trailer. */
static void reseal(unsigned char *f, size_t size) {
  if (size < 32 + 8) return;
  uint64_t n = (uint64_t)f[12] | (uint64_t)f[13] << 8 | (uint64_t)f[14] << 16 | (uint64_t)f[15] << 24;
  if (n <= (size - 32 - 8) / 80) {
    for (uint64_t i = 0; i < n; i++) {
      unsigned char *e = f + 32 + 80 * i;
      uint64_t off = le64(e + 56), len = le64(e + 64);
      if (off <= size && len <= size - off) set64(e + 72, XXH3_64bits(f + off, (size_t)len));
    }
    if (32 + 80 * n + 8 <= size) set64(f + 32 + 80 * n, XXH3_64bits(f + 32, (size_t)(80 * n)));
  }
  set64(f + 24, XXH3_64bits(f, 24));
  set64(f + size - 8, XXH3_64bits(f, size - 8));
}

static void walk(em_checkpoint *c) {
  em_checkpoint_manifest m;
  if (em_checkpoint_get_manifest(c, &m) || !m.ember_version || !m.device_name) abort();
  size_t n = em_checkpoint_section_count(c);
  for (size_t i = 0; i < n; i++) {
    em_checkpoint_section_info s;
    if (em_checkpoint_section_get(c, i, &s)) abort();
    const void *b;
    size_t len;
    if (em_checkpoint_find(c, s.name, &b, &len) || b != s.bytes || len != s.size) abort();
    if (XXH3_64bits(b, len) != s.checksum) abort(); /* every byte readable, and verified */
  }
  em_graph *g = em_checkpoint_graph(c);
  if (g) {
    size_t count;
    if (em_graph_parameters(g, NULL, 0, &count) || em_graph_states(g, NULL, 0, &count)) abort();
    if (em_checkpoint_take_graph(c, &g)) abort();
    em_graph_free(g);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20)) return 0;
  for (int with_graph = 0; with_graph < 2; with_graph++) {
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    reseal(copy, size);
    em_checkpoint *c = NULL;
    if (!em_checkpoint_from_bytes(copy, size, "fuzz", with_graph, &c)) { /* takes copy */
      walk(c);
      em_checkpoint_free(c);
    }
  }
  return 0;
}
