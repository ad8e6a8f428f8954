// fuzz-sources: onnx/*.c runtime/*.c arch_table/*.c ops/*.c engine/*.c training/*.c build/gen/onnx/onnx.pb-c.c build/gen/arch_table_data.c -Ionnx -Iengine -Iops -fopenmp -Wno-pass-failed -lprotobuf-c -lz -ldl
/* libFuzzer target for the ONNX loader through the public API
 * (include/ember/onnx.h): every input is loaded with em_onnx_load_buffer on
 * the CPU, once for its metadata and once imported in full (for half the
 * inputs with small integer inputs given values at load, as `ember run`
 * --input does, so Reshape's shape or Slice's starts are known while
 * building). A model that imports, and whose values are all small, is run
 * once with inputs made from its declared shapes (symbolic and unknown
 * dimensions 1 or 2, picked by the input's hash), and freed. Errors are
 * fine; a crash, leak, hang or sanitizer report is not.
 * fuzz_onnx.c covers the reader's bytes; this covers the importer, the ops'
 * shape checks at build time and the executor's plan and run.
 *
 * The whole library is compiled in (with coverage) except the packed GPU
 * images: the blob is empty here, as the fuzzed models only run on the CPU. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/onnx.h"

/* The packed image table (runtime/image_section.S in the library): empty,
 * so a CUDA device would find no kernels; none is asked for. */
const unsigned char em_image_blob_start[1] __attribute__((visibility("hidden")));
const unsigned char em_image_blob_end[1] __attribute__((visibility("hidden")));

/* Inputs are made only when the model's inputs hold at most this many
 * elements in all, so a declared [1e9, 1e9] is refused, not allocated. */
#define MAX_INPUT_ELEMENTS 4096

static volatile size_t sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("OMP_NUM_THREADS", "1", 0); /* single-threaded runs: reproducible, and no pool kept between inputs */
  return 0;
}

/* A small deterministic value pattern for element i: indices 0..2, floats
 * -1..1 in halves, so Gather/Slice/Range-style inputs meet both valid and
 * out-of-range values. */
static void fill(em_dtype dt, void *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
    case EM_F32: ((float *)p)[i] = (float)(i % 5) * 0.5f - 1.0f; break;
    case EM_F64: ((double *)p)[i] = (double)(i % 5) * 0.5 - 1.0; break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)(i % 3); break;
    case EM_I64: ((int64_t *)p)[i] = (int64_t)(i % 3); break;
    case EM_U8: case EM_BOOL: ((uint8_t *)p)[i] = (uint8_t)(i % 2); break;
    default: break; /* F16/BF16: left zero (calloc) */
    }
  }
}

/* Makes the value of input i, or NULL when it cannot be made (an unknown
 * dtype or rank, a shape too large): the run is then skipped. */
static em_tensor *make_input(const em_onnx_io *io, size_t *budget, uint8_t seed) {
  if (!io->dtype_known || io->ndim < 0 || io->ndim > EM_MAX_DIMS) return NULL;
  int64_t shape[EM_MAX_DIMS];
  size_t n = 1;
  for (int d = 0; d < io->ndim; d++) {
    shape[d] = io->shape[d] >= 0 ? io->shape[d] : 1 + ((seed >> (d % 8)) & 1);
    if (shape[d] > (int64_t)MAX_INPUT_ELEMENTS) return NULL;
    n *= (size_t)shape[d];
    if (n > *budget) return NULL;
  }
  *budget -= n;
  size_t es = em_dtype_size(io->dtype);
  if (es == 0) return NULL;
  void *host = calloc(n ? n : 1, es);
  if (!host) return NULL;
  fill(io->dtype, host, n);
  em_tensor *t = NULL;
  if (em_tensor_from_host(em_cpu(), io->dtype, io->ndim, shape, host, n * es, &t) != EM_OK) t = NULL;
  free(host);
  return t;
}

static void describe(const em_onnx *m) {
  em_onnx_model_info info;
  if (em_onnx_get_info(m, &info) != EM_OK) abort();
  sink += strlen(info.source) + strlen(info.producer_name) + strlen(info.graph_name);
  for (size_t i = 0; i < info.n_nodes; i++) {
    em_onnx_node_info ni;
    if (em_onnx_node_get(m, i, &ni) != EM_OK) abort();
    sink += strlen(ni.name) + strlen(ni.op_type) + strlen(ni.domain) + (size_t)ni.supported;
  }
  for (size_t i = 0; i < em_onnx_opset_count(m); i++) {
    const char *domain;
    int64_t version;
    if (em_onnx_opset_get(m, i, &domain, &version) != EM_OK) abort();
    sink += strlen(domain);
  }
  em_onnx_io io;
  for (size_t i = 0; i < em_onnx_input_count(m); i++)
    if (em_onnx_input_get(m, i, &io) == EM_OK) sink += strlen(io.name) + strlen(io.onnx_dtype);
  for (size_t i = 0; i < em_onnx_output_count(m); i++)
    if (em_onnx_output_get(m, i, &io) == EM_OK) sink += strlen(io.name) + strlen(io.onnx_dtype);
}

/* 1 when every value of the imported graph holds at most MAX_VALUE_ELEMENTS
 * (a symbolic dimension counted as 2): a valid model may still ask for
 * gigabytes (a Conv with pads of 2^27, say), which is the model's right and
 * not a bug, but no fuzzer can run it. */
#define MAX_VALUE_ELEMENTS ((int64_t)1 << 20)
static int small_enough(const em_onnx *m) {
  const em_graph *g = em_onnx_graph_of(m);
  for (size_t v = 0; v < em_graph_value_count(g); v++) {
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS], n = 1;
    if (em_var_info(g, (em_var)v, &dt, &nd, shape) != EM_OK) return 0;
    for (int d = 0; d < nd; d++) {
      if (shape[d] > MAX_VALUE_ELEMENTS) return 0;
      n *= shape[d] < 0 ? 2 : shape[d] > 0 ? shape[d] : 1;
      if (n > MAX_VALUE_ELEMENTS) return 0;
    }
  }
  return 1;
}

static void run_once(em_onnx *m, uint8_t seed) {
  size_t n_in = em_onnx_input_count(m), n_out = em_onnx_output_count(m);
  em_named_tensor *in = calloc(n_in ? n_in : 1, sizeof *in);
  em_tensor **out = calloc(n_out ? n_out : 1, sizeof *out);
  size_t budget = MAX_INPUT_ELEMENTS, given = 0;
  int ok = in && out;
  for (size_t i = 0; ok && i < n_in; i++) {
    em_onnx_io io;
    if (em_onnx_input_get(m, i, &io) != EM_OK) { ok = 0; break; }
    if (io.has_initializer || io.given_at_load || io.var < 0) continue; /* a constant: not fed */
    em_tensor *t = make_input(&io, &budget, seed);
    if (!t) { ok = 0; break; }
    in[given++] = (em_named_tensor){io.name, t};
  }
  if (ok && em_onnx_run(m, in, (int)given, out) == EM_OK) {
    for (size_t i = 0; i < n_out; i++) {
      if (!out[i]) abort(); /* a run that succeeds fills every output */
      sink += (size_t)em_tensor_numel(out[i]);
    }
  } else if (ok) {
    for (size_t i = 0; i < n_out; i++)
      if (out[i]) abort(); /* a failed run leaves the outputs NULL */
  }
  for (size_t i = 0; out && i < n_out; i++) em_tensor_release(out[i]);
  for (size_t i = 0; in && i < given; i++) em_tensor_release(in[i].value);
  free(in);
  free(out);
}

/* Small integer inputs of known shape (at most MAX_LOAD_VALUE elements, rank
 * 0 or 1: the shape, starts, axes, pads, split of Reshape, Slice, ReduceSum,
 * Pad, Split, Range...) are given a value at load when the seed asks, so the
 * importer's build-time paths see values: -2..5, from a generator seeded
 * by the input's hash, so mutations explore them. */
#define MAX_LOAD_VALUE 8

static uint64_t next(uint64_t *x) {
  *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17; /* xorshift64 */
  return *x;
}

/* Fills values[] with tensors for the inputs to give at load; returns how many. */
static int load_values(const em_onnx *meta, uint64_t x, em_named_tensor *values, int cap) {
  int n = 0;
  for (size_t i = 0; i < em_onnx_input_count(meta) && n < cap; i++) {
    em_onnx_io io;
    if (em_onnx_input_get(meta, i, &io) != EM_OK || io.has_initializer || !io.dtype_known) continue;
    if ((io.dtype != EM_I64 && io.dtype != EM_I32) || io.ndim < 0 || io.ndim > 1) continue;
    int64_t count = io.ndim ? io.shape[0] : 1;
    if (count < 0 || count > MAX_LOAD_VALUE) continue;
    int64_t v64[MAX_LOAD_VALUE];
    int32_t v32[MAX_LOAD_VALUE];
    for (int64_t k = 0; k < count; k++) v32[k] = (int32_t)(v64[k] = (int64_t)(next(&x) % 8) - 2);
    em_tensor *t = NULL;
    int es = io.dtype == EM_I64 ? 8 : 4;
    if (em_tensor_from_host(em_cpu(), io.dtype, io.ndim, &count, io.dtype == EM_I64 ? (void *)v64 : (void *)v32,
                            (size_t)count * (size_t)es, &t) == EM_OK)
      values[n++] = (em_named_tensor){io.name, t};
  }
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The choices (values at load or not, symbolic dims 1 or 2, the values)
   * follow an FNV-1a hash of the whole input, never a byte of it: a model's
   * last bytes are protobuf framing that a change would break. */
  uint64_t h = 0xcbf29ce484222325u;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3u;
  if (!h) h = 1;
  uint8_t seed = (uint8_t)(h >> 56);
  em_named_tensor values[8];
  int n_values = 0;
  em_onnx_options meta_options = {.metadata_only = 1};
  em_onnx *meta = NULL, *m = NULL;
  if (em_onnx_load_buffer(data, size, "fuzz", &meta_options, &meta) == EM_OK) {
    if (em_onnx_graph_of(meta) || em_onnx_exec_of(meta)) abort(); /* metadata only: nothing imported */
    describe(meta);
    if (seed & 0x80) n_values = load_values(meta, h, values, 8); /* names borrowed from meta */
  } else if (meta) {
    abort(); /* a failed load leaves *out NULL */
  }
  em_onnx_options full = {.input_values = values, .n_input_values = n_values};
  em_status s = em_onnx_load_buffer(data, size, "fuzz", &full, &m);
  for (int i = 0; i < n_values; i++) em_tensor_release(values[i].value); /* the model keeps its own */
  em_onnx_free(meta);
  if (s == EM_OK) {
    if (!em_onnx_graph_of(m) || !em_onnx_exec_of(m)) abort();
    describe(m);
    if (small_enough(m)) run_once(m, seed);
    em_onnx_free(m);
  } else if (m) {
    abort();
  }
  return 0;
}
