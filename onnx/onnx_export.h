/* Internal to the ONNX layer: what onnx_export.c can write (the public
 * export API is include/ember/onnx.h). */
#ifndef EMBER_ONNX_EXPORT_H
#define EMBER_ONNX_EXPORT_H

/* 1 when the Ember op `op` has an entry in the export table (it may still
 * refuse a form or an opset), else 0. tests/unit/test_onnx_export.c checks
 * that every public op has one or is on its list of ops without an ONNX form. */
int em_onnx_export_has_op(const char *op);

/* 1 when block b of g (interior: its nodes, em_block_interior) computes what
 * its record says: em_recurrent_apply, given the record's op, attributes and
 * input shapes, builds the same nodes (onnx/export_block_check.c). */
#include "graph_internal.h"
int em_onnx_block_matches(const em_graph *g, const em_block *b, const unsigned char *interior);

#endif
