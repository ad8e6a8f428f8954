/* A plain convolution for the tests of ops/conv.c's fast paths (test_dnnl,
 * test_conv_dnnl): every output a sum in double over its group's channels
 * and the kernel taps, in the obvious order. Written here, not in Ember,
 * so the expected values do not come from the code under test. */
#ifndef EMBER_TESTS_CONV_REFERENCE_H
#define EMBER_TESTS_CONV_REFERENCE_H

#include <stdint.h>

/* x [n, c, in...], w [m, c / g, k...] -> y [n, m, out...]; nsp spatial axes
 * (1..3), padding pb at the beginning and pe at the end of each. */
typedef struct ts_conv {
  int nsp;
  int64_t n, c, m, g;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
} ts_conv;

/* The output's size on spatial axis i (ONNX's floor). */
int64_t ts_conv_out_size(const ts_conv *c, int i);
/* x's, w's and y's shapes (2 + nsp dimensions each). */
void ts_conv_shapes(const ts_conv *c, int64_t *xs, int64_t *ws, int64_t *ys);
/* The product of v's n entries. */
int64_t ts_prod(const int64_t *v, int n);
/* y (malloc'd, free it) for x, w and bias b (may be NULL). */
double *ts_conv_reference(const ts_conv *c, const float *x, const float *w, const float *b);

#endif
