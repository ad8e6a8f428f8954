/* ONNX import: builds an Ember graph from an ONNX graph (internal API).
 *
 * Graph inputs become em_input values, initializers and Constant nodes
 * em_constant values, and each node one or more em_apply calls through a
 * table from ONNX op_type to a translation (onnx_import.c lists the ops and
 * how each maps; onnx/CONFORMANCE.md gives the conformance of each).
 *
 * Values Ember takes as attributes where ONNX takes input tensors (Reshape's
 * shape, Slice's starts, ReduceSum's axes, Clip's bounds, ...) must be known
 * while the graph is built: they come from initializers and Constant nodes,
 * from the values the caller gives for graph inputs (`input_values`), or are
 * computed from those by running the part of the graph built so far
 * ("constant folding"). Shape, Size and ConstantOfShape fold into constants
 * from the static shapes. A graph imported with input values is therefore
 * specialised to the values of such inputs (the backend node tests feed their
 * shape and axes inputs from input_N.pb files).
 *
 * Failures (em_last_error names the ONNX op and node):
 *   EM_ERR_UNSUPPORTED       an op_type without translation, a domain other than
 *                            the default one, an attribute, attribute value,
 *                            element type, optional input or output that the
 *                            translation does not handle, or an attribute-like
 *                            input whose value cannot be known at build time;
 *   EM_ERR_INVALID_ARGUMENT  Ember refused the translated op (shapes, dtypes,
 *                            attribute values: the op's own message follows), or
 *                            the ONNX graph is malformed (an undefined input name);
 *   others                   as em_apply / em_exec report them.
 * Symbols are hidden in the shared library (internal to libember). */
#ifndef EMBER_ONNX_IMPORT_H
#define EMBER_ONNX_IMPORT_H

#include <stddef.h>

#include "ember.h"
#include "onnx_reader.h"

/* Ember's dtype for an ONNX element type; EM_ERR_UNSUPPORTED naming it when
 * Ember has none (int8, int16, uint16, uint32, uint64, string, complex). */
em_status em_onnx_dtype_to_em(em_onnx_dtype t, em_dtype *out);

/* A new contiguous CPU tensor holding a copy of t (rank <= EM_MAX_DIMS). */
em_status em_onnx_tensor_to_em(const em_onnx_tensor *t, em_tensor **out);

/* Adds m's graph to g (normally a new, empty graph).
 * input_values: NULL, or one entry per m->graph.inputs (NULL entries allowed):
 *   the value of that input for folding, whose shape then also becomes the
 *   input's declared shape (else the model's declared shape, -1 for symbolic
 *   or unknown dims).
 * input_vars (m->graph.n_inputs entries): the em_input of each graph input,
 *   or -1 for an input that names an initializer (IR < 4) and has no value.
 * output_vars (m->graph.n_outputs entries): the value of each graph output.
 * On failure g may hold a partial graph (free it). */
em_status em_onnx_import(const em_onnx_model *m, em_graph *g, em_tensor *const *input_values, em_var *input_vars,
                         em_var *output_vars);

/* As em_onnx_import; on failure *failed_node is the index (in
 * m->graph.nodes) of the node whose translation failed, or (size_t)-1 when
 * the failure was elsewhere (an input, an initializer, an output), so a
 * caller can name the node by its position too. */
em_status em_onnx_import_at(const em_onnx_model *m, em_graph *g, em_tensor *const *input_values, em_var *input_vars,
                            em_var *output_vars, size_t *failed_node);

/* The ONNX op types (default domain) that have a translation, sorted. */
size_t em_onnx_import_op_count(void);
const char *em_onnx_import_op_at(size_t i);
/* 1 when op_type has a translation; 0 otherwise. */
int em_onnx_import_has_op(const char *op_type);
/* A short description of the Ember ops op_type becomes ("add", "lowered:
 * ...", "constant (import time)"), or NULL without translation. */
const char *em_onnx_import_op_how(const char *op_type);

#endif
