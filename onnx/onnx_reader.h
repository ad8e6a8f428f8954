/* Reader of ONNX models (ModelProto) and tensors (TensorProto .pb files).
 *
 * The result is a plain C structure that owns all its memory and exposes no
 * protobuf-c type: the rest of Ember (the engine's import, the conformance
 * runner) maps nodes to ops without knowing about protobuf. Field meanings
 * follow onnx.proto (ONNX 1.12, /usr/include/onnx/onnx.proto from libonnx-dev).
 *
 * Every load returns an em_status; on failure the thread's message (see
 * em_last_error) names the file and what is wrong in it:
 *   EM_ERR_IO           the file cannot be read;
 *   EM_ERR_CORRUPT      the bytes are not a valid ONNX message (or sizes disagree);
 *   EM_ERR_UNSUPPORTED  valid ONNX that this reader does not represent (string or
 *                       complex tensor data, external data, sparse tensors,
 *                       SequenceProto / OptionalProto / MapProto values, ...);
 *   EM_ERR_OUT_OF_MEMORY.
 * No input bytes crash the reader. Internal to the library (hidden symbols). */
#ifndef EMBER_ONNX_READER_H
#define EMBER_ONNX_READER_H

#include <stddef.h>
#include <stdint.h>

#include "ember/status.h"

/* Element types. ONNX's TensorProto.DataType numbers differ; see
 * em_onnx_dtype_from_onnx. STRING, COMPLEX64 and COMPLEX128 can be declared in
 * a model's types, but tensors holding them are not read (EM_ERR_UNSUPPORTED). */
typedef enum em_onnx_dtype {
  EM_ONNX_UNDEFINED = 0,
  EM_ONNX_FLOAT,
  EM_ONNX_DOUBLE,
  EM_ONNX_FLOAT16,
  EM_ONNX_BFLOAT16,
  EM_ONNX_INT8,
  EM_ONNX_INT16,
  EM_ONNX_INT32,
  EM_ONNX_INT64,
  EM_ONNX_UINT8,
  EM_ONNX_UINT16,
  EM_ONNX_UINT32,
  EM_ONNX_UINT64,
  EM_ONNX_BOOL, /* one byte per element, 0 or 1 */
  EM_ONNX_STRING,
  EM_ONNX_COMPLEX64,
  EM_ONNX_COMPLEX128,
  EM_ONNX_DTYPE_COUNT
} em_onnx_dtype;

/* The enum for ONNX's TensorProto.DataType code; EM_ONNX_UNDEFINED for 0 and
 * for codes this reader does not know. */
em_onnx_dtype em_onnx_dtype_from_onnx(int32_t onnx_code);
/* Lower-case name ("float", "int64", ...). Never NULL. */
const char *em_onnx_dtype_name(em_onnx_dtype t);
/* Bytes per element; 0 for UNDEFINED and STRING. */
size_t em_onnx_dtype_size(em_onnx_dtype t);

/* A dense tensor. `data` holds n_elements elements, contiguous, row-major,
 * little-endian, `nbytes` = n_elements * em_onnx_dtype_size(dtype); it is
 * never NULL (a zero-element tensor points at a valid empty buffer) and is
 * aligned to 64 bytes. */
typedef struct em_onnx_tensor {
  char *name; /* "" when the file gives none */
  em_onnx_dtype dtype;
  size_t rank;
  int64_t *dims; /* rank entries, each >= 0; NULL when rank is 0 (a scalar) */
  size_t n_elements;
  size_t nbytes;
  void *data;
  void *arena_; /* private: set only on tensors from em_onnx_tensor_load* */
} em_onnx_tensor;

/* Kinds of value a graph input/output may declare (TypeProto's oneof). */
typedef enum em_onnx_value_kind {
  EM_ONNX_VALUE_UNSET = 0, /* no type given */
  EM_ONNX_VALUE_TENSOR,
  EM_ONNX_VALUE_SEQUENCE,
  EM_ONNX_VALUE_MAP,
  EM_ONNX_VALUE_OPTIONAL,
  EM_ONNX_VALUE_SPARSE_TENSOR
} em_onnx_value_kind;

/* One dimension of a declared shape: value >= 0, or -1 when it is symbolic
 * (param is then its dim_param name) or unknown (param NULL). */
typedef struct em_onnx_dim {
  int64_t value;
  char *param;
} em_onnx_dim;

/* A declared type (TypeProto). */
typedef struct em_onnx_type {
  em_onnx_value_kind kind;
  /* TENSOR and SPARSE_TENSOR: the element type (onnx_elem_type is the
   * file's code, kept for messages when dtype is UNDEFINED) and the shape.
   * MAP: dtype / onnx_elem_type describe the key type. */
  em_onnx_dtype dtype;
  int32_t onnx_elem_type;
  int has_shape; /* 0: rank unknown */
  size_t rank;
  em_onnx_dim *dims;
  /* SEQUENCE and OPTIONAL: the element type; MAP: the value type. May be
   * NULL when the file leaves it out. */
  struct em_onnx_type *elem;
} em_onnx_type;

typedef struct em_onnx_value_info {
  char *name;
  em_onnx_type type;
} em_onnx_value_info;

/* Bytes of an ONNX string (attributes hold bytes, not always text): `data`
 * is NUL-terminated for convenience, `len` excludes that NUL. */
typedef struct em_onnx_str {
  char *data;
  size_t len;
} em_onnx_str;

typedef enum em_onnx_attr_type {
  EM_ONNX_ATTR_FLOAT = 1,
  EM_ONNX_ATTR_INT,
  EM_ONNX_ATTR_STRING,
  EM_ONNX_ATTR_TENSOR,
  EM_ONNX_ATTR_GRAPH,
  EM_ONNX_ATTR_FLOATS,
  EM_ONNX_ATTR_INTS,
  EM_ONNX_ATTR_STRINGS,
  EM_ONNX_ATTR_TENSORS,
  EM_ONNX_ATTR_GRAPHS,
  EM_ONNX_ATTR_TYPE, /* a TypeProto, e.g. Optional's `type` */
  EM_ONNX_ATTR_TYPES
} em_onnx_attr_type;

/* "float", "ints", ...; never NULL. */
const char *em_onnx_attr_type_name(em_onnx_attr_type t);

struct em_onnx_graph;

/* A node attribute. The member that matches `type` holds the value; list
 * types use n plus the matching array. Sparse-tensor attributes are not read
 * (the load fails with EM_ERR_UNSUPPORTED). */
typedef struct em_onnx_attr {
  char *name;
  em_onnx_attr_type type;
  float f;
  int64_t i;
  em_onnx_str s;
  em_onnx_tensor *t;
  struct em_onnx_graph *g;
  em_onnx_type *tp;
  size_t n;
  float *floats;
  int64_t *ints;
  em_onnx_str *strings;
  em_onnx_tensor *tensors;
  struct em_onnx_graph *graphs;
  em_onnx_type *types;
} em_onnx_attr;

typedef struct em_onnx_node {
  char *op_type;
  char *domain; /* "" for the default domain (ai.onnx) */
  char *name;   /* "" when unnamed */
  size_t n_inputs;
  char **inputs; /* "" marks an omitted optional input */
  size_t n_outputs;
  char **outputs;
  size_t n_attrs;
  em_onnx_attr *attrs;
} em_onnx_node;

typedef struct em_onnx_graph {
  char *name;
  size_t n_nodes;
  em_onnx_node *nodes; /* in file order (ONNX requires topological order) */
  size_t n_initializers;
  em_onnx_tensor *initializers;
  size_t n_inputs;
  em_onnx_value_info *inputs;
  size_t n_outputs;
  em_onnx_value_info *outputs;
  size_t n_value_infos; /* declared types of intermediate values */
  em_onnx_value_info *value_infos;
} em_onnx_graph;

typedef struct em_onnx_opset {
  char *domain; /* "" for the default domain */
  int64_t version;
} em_onnx_opset;

typedef struct em_onnx_model {
  int64_t ir_version;
  char *producer_name;
  size_t n_opsets;
  em_onnx_opset *opsets;
  em_onnx_graph graph;
  void *arena_; /* private: owns every pointer above */
} em_onnx_model;

/* Loads a model file. On success *out is a new model to free with
 * em_onnx_model_free; on failure *out is NULL. */
em_status em_onnx_model_load(const char *path, em_onnx_model **out);
/* The same from bytes in memory; `what` names them in messages (a path, or
 * NULL for "<buffer>"). The bytes are not kept. Tensors whose data is in
 * external files (TensorProto.external_data: location, offset, length) are
 * read from external_dir/<location> (em_onnx_model_load: the model file's
 * directory); without external_dir they are refused (EM_ERR_UNSUPPORTED).
 * A location must stay inside that directory (relative, no ".."); a missing
 * file is EM_ERR_IO, a length or range that does not fit EM_ERR_CORRUPT. */
em_status em_onnx_model_from_buffer(const void *bytes, size_t size, const char *what, em_onnx_model **out);
em_status em_onnx_model_from_buffer_dir(const void *bytes, size_t size, const char *what, const char *external_dir,
                                        em_onnx_model **out);
void em_onnx_model_free(em_onnx_model *m);

/* Attribute `name` of a node, or NULL. */
const em_onnx_attr *em_onnx_node_attr(const em_onnx_node *n, const char *name);
/* The opset version the model imports for `domain` ("" or "ai.onnx" for the
 * default domain), or -1 when it imports none. */
int64_t em_onnx_model_opset(const em_onnx_model *m, const char *domain);

/* Loads a TensorProto file (a test's input_N.pb / output_N.pb). A file that
 * holds a SequenceProto, OptionalProto or MapProto instead gives
 * EM_ERR_UNSUPPORTED "unsupported value type"; the model's declared input and
 * output kinds (em_onnx_type.kind) say beforehand which files those are. */
em_status em_onnx_tensor_load(const char *path, em_onnx_tensor **out);
em_status em_onnx_tensor_from_buffer(const void *bytes, size_t size, const char *what, em_onnx_tensor **out);
/* Frees a tensor from em_onnx_tensor_load*; tensors inside a model belong to
 * the model and must not be passed here (that is a no-op). */
void em_onnx_tensor_free(em_onnx_tensor *t);

#endif
