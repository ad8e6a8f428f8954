/* oneDNN for the fast CPU mode's convolutions (ops/conv.c): loaded on first
 * use, optional. See dnnl.c for why and how. */
#ifndef EMBER_OPS_DNNL_H
#define EMBER_OPS_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "ember.h"

/* One forward convolution on NC<spatial> f32 tensors: x [n, ci, img...],
 * w [co, ci / groups, k...], y [n, co, col...]; arrays hold the nsp spatial
 * axes in order (1 <= nsp <= 3). Padding: pb at the beginning of each axis,
 * the end's follows from the sizes. */
typedef struct em_dnnl_conv_geom {
  int nsp;
  int64_t n, ci, co, groups;
  int64_t img[3], col[3], k[3], s[3], d[3], pb[3];
} em_dnnl_conv_geom;

/* y = convolution(x, w) + bias (bias may be NULL) through oneDNN; x and y are
 * contiguous NC<spatial>, or channels-last where x_cl / y_cl (N<spatial>C in
 * memory: engine/layout.c). *done = 0
 * (and EM_OK) when it did nothing: oneDNN is absent or switched off
 * (EMBER_DNNL=0), or has no kernel for this case; the caller computes y
 * itself. w is the weights' tensor (its data is read): when it is a graph
 * value, its reordered form is kept with it between runs (em_tensor_derived).
 * Call outside parallel regions. Errors: out of memory, oneDNN failing after
 * it accepted the case. */
/* An element-wise op oneDNN applies to y as it writes it (a post-op): kind is
 * op.h's em_post_kind; only EM_POST_SWISH (x * sigmoid(x)) has a kernel here
 * (conv.c's dnnl_post_of says why); NULL: none. */
typedef struct em_dnnl_post {
  int kind;
} em_dnnl_post;

em_status em_dnnl_conv_fwd(const em_dnnl_conv_geom *gm, const em_tensor *w, const float *x, int x_cl,
                           const float *bias, float *y, int y_cl, const em_dnnl_post *post, int *done);

/* Whether em_dnnl_conv_fwd runs this case with these layouts (*yes), building
 * its plan: for the executor's choice of layouts (ops/conv.c's conv_layout). */
em_status em_dnnl_conv_takes(const em_dnnl_conv_geom *gm, int has_bias, int x_cl, int y_cl,
                             const em_dnnl_post *post, int *yes);

/* One matrix product y [m, n] = x [m, k] w (+ bias [n]), row-major and
 * contiguous; w is [k, n], or [n, k] used transposed where tw. */
typedef struct em_dnnl_matmul_geom {
  int64_t m, k, n;
  int tw;
} em_dnnl_matmul_geom;

/* The product through oneDNN's matmul (fast mode, f32: ops/linalg.c), its
 * weights reordered once into the layout its kernel prefers and kept with w
 * when w is a graph value (em_tensor_derived); *done = 0 where it did
 * nothing (as em_dnnl_conv_fwd). Same bits for every thread count (the
 * probe below). Call outside parallel regions. */
em_status em_dnnl_matmul(const em_dnnl_matmul_geom *mm, const em_tensor *w, const float *x, const float *bias,
                         float *y, int *done);

/* How many plans (primitives for one geometry and thread count) were built so
 * far in this process: tests check that the cache keeps what a model uses. */
uint64_t em_dnnl_plan_builds(void);

/* The public em_cpu_conv_info (include/ember/device.h) is defined in dnnl.c. */

#endif
