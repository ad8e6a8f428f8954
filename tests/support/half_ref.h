/* References for f16 and bf16 results, independent of Ember's conversions: the two formats
 * decoded bit by bit, the spacing of their values, and the check that a result is within
 * one rounding of a float64 reference (what an op that accumulates in f32 and rounds once
 * to the half dtype must meet: engine/half.c, cuBLAS's and cuDNN's half roads). Uses cmocka
 * (a miss fails the test). */
#ifndef EMBER_TESTS_HALF_REF_H
#define EMBER_TESTS_HALF_REF_H

#include <stdint.h>
#include "ember.h"

double ts_f16_value(uint16_t h);  /* IEEE binary16 */
double ts_bf16_value(uint16_t h); /* bfloat16 */
double ts_half_value(em_dtype t, uint16_t h);
/* The spacing of dtype t's values near v (subnormal spacing below the normal range). */
double ts_half_ulp(em_dtype t, double v);
/* The decoded values of a half tensor on the CPU (malloc'd; free it). */
double *ts_half_decoded(const em_tensor *x);
/* got (dtype t, n elements) each within half an ulp of want, plus the f32 sum's own error
 * where terms near 1 cancel (2^-22 absolute, 1e-6 relative); fails naming `what`, the
 * element and both values. */
void ts_expect_one_rounding(const em_tensor *got, em_dtype t, const double *want, int64_t n, const char *what);

#endif
