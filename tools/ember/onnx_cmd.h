/* `ember inspect` (inspect_cmd.c), `ember run` (run_cmd.c) and `ember export`: ONNX models
 * through the public API (include/ember/onnx.h), called by main.c. */
#ifndef EMBER_TOOL_ONNX_CMD_H
#define EMBER_TOOL_ONNX_CMD_H

#include <stdio.h>

#include "ember.h"

int ember_inspect(int argc, char **argv); /* argv[0] = "inspect"; returns the exit code */
int ember_run(int argc, char **argv);     /* argv[0] = "run" */
int ember_export(int argc, char **argv);  /* argv[0] = "export" (export_cmd.c) */

/* Shared by both: "[N, 3, 224, 224]" (a symbolic dimension by its name, an
 * unknown one as "?", an undeclared shape as "unknown") into buf. */
const char *ember_io_shape_text(const em_onnx_io *io, char *buf, size_t cap);
/* The exit code for a failed load: 1 for what Ember lacks (an op, a dtype),
 * else as ember_exit_code (65 malformed, 66 missing, ...). */
int ember_onnx_exit_code(em_status s);

#endif
