/* ONNX models: load a model file (or bytes) into an Ember graph and run it.
 *
 * A model is read (ONNX's protobuf, IR 3 and later), its graph imported into
 * a new em_graph (one Ember op or a few per ONNX node: onnx/README.md and
 * onnx/CONFORMANCE.md say which ops and forms), and an executor is planned
 * for its outputs on the device asked for. The model's inputs and outputs
 * are found by name; their declared dtypes and shapes are kept, with -1 and
 * the dim_param name for a symbolic dimension (a dynamic axis).
 *
 * Some ONNX ops take as inputs what Ember takes as attributes (Reshape's
 * shape, Slice's starts, ReduceSum's axes, ...). Those must be known while
 * the graph is built: initializers and Constant nodes are, and so are graph
 * inputs given a value in em_onnx_options.input_values. The graph is then
 * specialised to those values; they are fed again on every run and cannot
 * be given to em_onnx_run.
 *
 * Tensors kept in external data files (ONNX's external_data: a location
 * relative to the model's directory, an offset and a length) are read at
 * load; a location outside that directory (absolute, or with "..") is
 * refused.
 *
 * Errors (em_last_error says more): the message names the model (its path,
 * or the name given to em_onnx_load_buffer), and for a node its index in
 * the graph, its name, its op and the reason, e.g.
 *   "model.onnx: node 3 of 12: ONNX Resize node 'up1': no Ember translation for this op".
 * Nothing is returned on failure; nothing aborts.
 *
 * Typical use:
 *   em_onnx *m;
 *   em_onnx_options o = {.device = em_cuda(0)};     // zero: the CPU, fast mode
 *   if (em_onnx_load("model.onnx", &o, &m)) { puts(em_last_error()); ... }
 *   em_named_tensor in[] = {{"x", x}};
 *   em_tensor *out[1];                               // em_onnx_output_count(m)
 *   em_onnx_run(m, in, 1, out);                      // out[0] is on cuda:0
 *   ...
 *   em_tensor_release(out[0]);
 *   em_onnx_free(m);
 */
#ifndef EMBER_ONNX_H
#define EMBER_ONNX_H

#include <stddef.h>
#include <stdint.h>
#include "ember/exec.h"
#include "ember/graph.h"
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model loaded into Ember: its graph, executor and description. */
typedef struct em_onnx em_onnx;

/* A tensor with the name of the model input it is the value of. */
typedef struct em_named_tensor {
  const char *name;
  em_tensor *value; /* borrowed: the callee retains (or copies) what it keeps */
} em_named_tensor;

/* Which numeric mode the model runs in (exec.h, em_mode). */
typedef enum em_onnx_mode {
  EM_ONNX_MODE_DEFAULT = 0, /* the executor's default: EMBER_MODE when set, else fast */
  EM_ONNX_MODE_FAST = 1,
  EM_ONNX_MODE_PORTABLE = 2
} em_onnx_mode;

/* Options of a load. Zero-initialised (or a NULL pointer): the CPU, the
 * default mode, no input values, the graph imported. */
typedef struct em_onnx_options {
  em_device device;     /* where em_onnx_run runs (import-time folding always runs on the CPU) */
  em_onnx_mode mode;
  /* Values for graph inputs that must be known while building (see above),
   * by input name; an input given here has exactly this value's dtype and
   * shape. Borrowed: the model keeps its own reference. Refused
   * (EM_ERR_INVALID_ARGUMENT): a name that is not an input of the model, and
   * a value whose dtype, rank or a fixed dimension differs from what the
   * file declares (symbolic dimensions take any size). */
  const em_named_tensor *input_values;
  int n_input_values;
  /* 1: read and describe the model only, without importing its graph (what
   * `ember inspect` does, also for models with ops Ember lacks):
   * em_onnx_graph is NULL, em_onnx_run refuses, inputs' vars are -1. */
  int metadata_only;
  /* em_onnx_load_buffer only: the directory of the model's external data
   * files (tensors stored outside the model, as exporters write models over
   * 2 GB). NULL: such tensors are refused. em_onnx_load reads them from the
   * model file's directory. */
  const char *external_data_dir;
} em_onnx_options;

/* Reads, imports and plans the model in the file at path.
 * Errors: EM_ERR_IO (cannot read path or an external data file),
 * EM_ERR_CORRUPT (not an ONNX model, truncated: the message names the byte
 * offset; external data that does not fit its tensor), EM_ERR_UNSUPPORTED (valid
 * ONNX that Ember cannot import: an op, attribute, dtype or domain it lacks,
 * ... naming the node), EM_ERR_INVALID_ARGUMENT (a bad option,
 * an Ember op refusing the node's shapes or attributes, a malformed graph),
 * and the device's errors (em_exec_create). On success *out is the caller's,
 * to free with em_onnx_free; on failure it is NULL. */
EM_API em_status em_onnx_load(const char *path, const em_onnx_options *options, em_onnx **out);

/* The same from size bytes in memory (not kept: they may be freed once this
 * returns). name says what they are in messages (NULL: "<buffer>"). */
EM_API em_status em_onnx_load_buffer(const void *bytes, size_t size, const char *name, const em_onnx_options *options,
                                     em_onnx **out);

/* Frees the model, its graph and executor (NULL is fine). Tensors returned by
 * em_onnx_run stay valid: they are the caller's. */
EM_API void em_onnx_free(em_onnx *m);

/* The imported graph (NULL with metadata_only). Borrowed: it lives until
 * em_onnx_free. Nodes may be added to it (a loss, say) and run with an
 * executor of one's own; em_onnx_run runs the plan made at load. */
EM_API em_graph *em_onnx_graph_of(const em_onnx *m);

/* The executor em_onnx_run uses (NULL with metadata_only); borrowed, for
 * em_exec_stats_get, em_exec_describe and the like. */
EM_API em_exec *em_onnx_exec_of(const em_onnx *m);

/* Where the model came from. Strings belong to the model. */
typedef struct em_onnx_model_info {
  const char *source;           /* the path, or the buffer's name */
  int64_t ir_version;
  const char *producer_name;    /* "" when the file gives none */
  const char *graph_name;       /* "" when the file gives none */
  size_t n_nodes;               /* nodes of the main graph (em_onnx_node_get) */
  size_t n_initializers;
} em_onnx_model_info;
EM_API em_status em_onnx_get_info(const em_onnx *m, em_onnx_model_info *out);

/* One input or output of the model as the file declares it. An input given
 * in em_onnx_options.input_values has that value's dtype and shape. Strings
 * belong to the model. */
typedef struct em_onnx_io {
  const char *name;
  em_var var;                   /* its value in em_onnx_graph_of(m); -1 when not imported (metadata_only,
                                 * or an input whose initializer gives its value: a constant) */
  int dtype_known;              /* 0: the element type is one Ember lacks (see onnx_dtype) */
  em_dtype dtype;
  const char *onnx_dtype;       /* ONNX's element type name: "float", "int64", "string", ... */
  int ndim;                     /* -1: the file does not declare a shape */
  int64_t shape[EM_MAX_DIMS];   /* -1 for a symbolic or unknown dimension */
  const char *dim_names[EM_MAX_DIMS]; /* the dim_param of a symbolic dimension, else NULL */
  int has_initializer;          /* an input with a default value in the file (IR < 4 style) */
  int given_at_load;            /* an input whose value came with the options (fed on every run) */
} em_onnx_io;

EM_API size_t em_onnx_input_count(const em_onnx *m);
EM_API size_t em_onnx_output_count(const em_onnx *m);
/* EM_ERR_INVALID_ARGUMENT for an index out of range (naming the count); an
 * input or output of rank above EM_MAX_DIMS is EM_ERR_UNSUPPORTED. */
EM_API em_status em_onnx_input_get(const em_onnx *m, size_t index, em_onnx_io *out);
EM_API em_status em_onnx_output_get(const em_onnx *m, size_t index, em_onnx_io *out);
/* The index of the input (output) with that name; EM_ERR_NOT_FOUND naming
 * the model's inputs (outputs) when there is none. */
EM_API em_status em_onnx_find_input(const em_onnx *m, const char *name, size_t *index);
EM_API em_status em_onnx_find_output(const em_onnx *m, const char *name, size_t *index);

/* The opsets the model imports: domain ("" for the default, ai.onnx) and
 * version. Strings belong to the model. */
EM_API size_t em_onnx_opset_count(const em_onnx *m);
EM_API em_status em_onnx_opset_get(const em_onnx *m, size_t index, const char **domain, int64_t *version);

/* A node of the main graph, in file order. Strings belong to the model. */
typedef struct em_onnx_node_info {
  const char *name;             /* "" when unnamed */
  const char *op_type;
  const char *domain;           /* "" for the default domain */
  int supported;                /* em_onnx_op_supported(op_type, domain) */
} em_onnx_node_info;
EM_API em_status em_onnx_node_get(const em_onnx *m, size_t index, em_onnx_node_info *out);

/* 1 when Ember's importer has a translation for op_type in domain ("" or
 * "ai.onnx"; other domains have none), else 0. A supported op may still
 * refuse a form it does not handle (an attribute, a dtype) at load. */
EM_API int em_onnx_op_supported(const char *op_type, const char *domain);

/* Runs the model once on its device: inputs[0..n_inputs) by name, every
 * input without a value from the file or the options given exactly once.
 * outputs receives em_onnx_output_count(m) new tensors, in the model's
 * output order, on the model's device (em_tensor_to_host reads them); the
 * caller releases them. Errors: EM_ERR_INVALID_ARGUMENT naming an input that
 * is missing, unknown, given twice, given at load time, or of the wrong
 * dtype or shape; the executor's errors (naming the node and op). On failure
 * outputs hold NULL. */
EM_API em_status em_onnx_run(em_onnx *m, const em_named_tensor *inputs, int n_inputs, em_tensor **outputs);

/* ------------------------------------------------------------- export --- */

/* Where an exported model's tensors go. */
typedef enum em_onnx_external {
  EM_ONNX_EXTERNAL_AUTO = 0,    /* in the model, unless it would pass protobuf's 2 GB: then as ALWAYS */
  EM_ONNX_EXTERNAL_ALWAYS = 1,  /* tensors of 1 KiB and more in "<model file>.data" beside the model */
  EM_ONNX_EXTERNAL_NEVER = 2    /* in the model; a model over 2 GB is refused */
} em_onnx_external;

/* Options of an export. Zero-initialised (or a NULL pointer): opset 17,
 * producer and graph name "ember", the values' own names, tensors in the
 * model unless it passes 2 GB, Ember's dynamic axis named "N". */
typedef struct em_onnx_export_options {
  int opset;                    /* ai.onnx opset, 13 to 20 (0: 17); ir_version follows (7, 8 from 15, 9 from 19) */
  const char *producer_name;
  const char *graph_name;
  /* n_outputs names for the model's outputs (NULL, or a NULL or "" entry:
   * the value's name). */
  const char *const *output_names;
  em_onnx_external external_data;
  const char *dynamic_axis_name; /* the dim_param written for Ember's dynamic (-1) axis */
  /* A recurrence (em_lstm, em_gru, em_rnn, em_recurrent_apply, an imported
   * LSTM / GRU / RNN) is written as ONE ONNX LSTM, GRU or RNN node where
   * it can be (0); 1 writes the ops it is unrolled into instead. It is
   * written unrolled anyway where the model reads a value inside the
   * recurrence (say a gate) or where the graph was edited inside it
   * (em_graph_replace). Layout 1 is written as layout 0 between Transposes
   * (onnxruntime refuses layout 1). Except a FUSED LSTM (the default LSTM:
   * default activations, no peepholes, clip or input_forget, which runs as
   * one fused op per direction): it has no unrolled form, so in those three
   * cases its export fails with EM_ERR_UNSUPPORTED saying so. */
  int unroll_recurrent;
} em_onnx_export_options;

/* Writes the part of graph g that outputs[0..n_outputs) need as an ONNX
 * model at path (atomically, as em_graph_save; with external data the data
 * file "<path>.data", named in the model relative to its directory, is
 * written as "<path>.data.new" first and renamed once the model is written,
 * so a failed export leaves an existing model and its data file as they were).
 * - g's inputs (em_input) that the outputs depend on become the model's
 *   inputs, in creation order, by their names; a -1 dimension is the
 *   dim_param dynamic_axis_name. Parameters, states and constants become
 *   initializers (their current values, brought from a device first; raw
 *   little-endian data). Values keep their names where they have one (ONNX
 *   names are unique: a clash gets a suffix "_N").
 * - Each Ember op is written as its ONNX op (or a few: onnx/README.md lists
 *   the forms), so em_onnx_load of the file builds a graph computing the
 *   same values. The graph is inference: batch normalization uses its
 *   running statistics, dropout is the identity.
 * Errors: EM_ERR_UNSUPPORTED naming the node and the op for an op with no
 * ONNX form (losses, gradients, learner updates, sum_to, log1p, ...), or a
 * form the opset lacks (Gelu before opset 20, LayerNormalization before 17,
 * HardSwish before 14, ScatterND's reductions before 16, ...; onnx/README.md
 * lists them): export the model's inference outputs, before
 * the loss; EM_ERR_INVALID_ARGUMENT (bad arguments or options, an output
 * name that is already a value's name, an unbound placeholder in the way:
 * em_graph_schedule's message); EM_ERR_IO (the file). Nothing is written
 * on failure; g is not changed. */
EM_API em_status em_onnx_export(const em_graph *g, const em_var *outputs, int n_outputs,
                                const em_onnx_export_options *options, const char *path);

/* The same into memory: *bytes (malloc'd: free() it) holds *size bytes of
 * ONNX model. External data is refused (EM_ERR_INVALID_ARGUMENT for
 * EM_ONNX_EXTERNAL_ALWAYS; a model over 2 GB is EM_ERR_UNSUPPORTED). */
EM_API em_status em_onnx_export_buffer(const em_graph *g, const em_var *outputs, int n_outputs,
                                       const em_onnx_export_options *options, void **bytes, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
