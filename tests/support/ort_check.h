/* The independent check of exported ONNX models: a test keeps each model
 * with its inputs and the outputs expected of it in a folder of cases
 * (ts_ort_keep), then runs tests/support/onnx_check.py over the folder once
 * (ts_ort_check): every model must pass onnx.checker (full_check) and
 * onnxruntime's outputs must match the expected ones. Python, onnx and
 * onnxruntime come from $EMBER_ONNXPY or $EMBER_SRC_DIR/.tools/onnxpy (pip
 * install --target); where they are absent the check is skipped saying so.
 * Uses cmocka (a failed write fails the test). */
#ifndef EMBER_TESTS_ORT_CHECK_H
#define EMBER_TESTS_ORT_CHECK_H

#include <stddef.h>
#include "ember.h"

typedef struct ts_ort_cases {
  char root[64];                /* the folder, made by ts_ort_init */
  int n;                        /* cases kept */
} ts_ort_cases;

/* Makes the folder (mkdtemp under /tmp); 0, or -1 with errno. */
int ts_ort_init(ts_ort_cases *c, const char *prefix);
/* Keeps one case: the model bytes, the inputs (by name) and the outputs
 * expected, in the model's output order. origin (or NULL): the node-test
 * folder the model came from (onnxruntime's own result on it is the
 * fallback reference there). scaled > 0: outputs compare by
 * max|ort - want| / max|want| <= scaled; 0: |ort - want| <= 1e-5 + 1e-4 |want|.
 * Integer and bool outputs compare exactly. */
void ts_ort_keep(ts_ort_cases *c, const char *label, const char *origin, double scaled, const void *model, size_t size,
                 const em_named_tensor *in, int n_in, em_tensor *const *want, int n_want);
/* The two halves of ts_ort_keep, for a test that writes model.onnx itself
 * (with external data beside it): makes the next case's folder (its path
 * in dir), then writes the rest (model NULL: model.onnx is there). */
void ts_ort_new_case(ts_ort_cases *c, const char *label, char *dir, size_t cap);
void ts_ort_write_case(const char *dir, const char *origin, double scaled, const void *model, size_t size,
                       const em_named_tensor *in, int n_in, em_tensor *const *want, int n_want);
/* Runs the check over every case kept: fails the test where the checker or
 * onnxruntime disagrees, skips it (with the reason) without Python. */
void ts_ort_check(const ts_ort_cases *c);
/* Removes the folder (unless EMBER_KEEP_EXPORTS is set). */
void ts_ort_remove(const ts_ort_cases *c);

#endif
