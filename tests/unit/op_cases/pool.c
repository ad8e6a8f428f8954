/* The pooling family's cases (ops/pool.c, kernels/pool.cu): window pools with
 * 1 to 3 spatial axes, strides, dilations, pads, auto_pad, ceil_mode,
 * count_include_pad; ties and NaNs for the max pools (the gradient goes to the
 * first maximum, a NaN wins); global pools. .grad runs _max_pool_grad,
 * _avg_pool_grad and _global_pool_grad on the GPU. Ember's kernels follow the
 * CPU's order in both modes, so both compare bit for bit in practice; in the
 * fast mode cuDNN runs the window pools it can express (ops/pool_gpu.c):
 * within tolerance, and the tie cases' gradients, where cuDNN ran them, are
 * compared in portable mode only (.ties: cuDNN sends a tie's gradient to one
 * maximum, not necessarily the first). The NaN case's asymmetric pads keep
 * Ember's kernels, so it is compared in both modes. The random cases
 * are tie-free in practice: two random f32 values sharing a window's maximum
 * is below a 1e-3 chance per run even for "large". */
#include <math.h>

#include "op_cases.h"

/* Few distinct values: every window has ties. */
static const double ties[40] = {1, 2, 2, 0, 1, 2, 2, 1, 0, 2, 0, 0, 1, 1, 2, 2, 2, 1, 0, 1,
                                1, 0, 2, 2, 2, 1, 1, 0, 2, 1, 0, 1, 2, 2, 0, 0, 1, 2, 1, 2};
/* NaNs among the values: a NaN is the maximum of every window holding one. */
static const double nans[40] = {0.5, NAN, 0.25, 1,   -1,  0.75, 2,    NAN, 0,   1,   3, -2,   0.5, 0.5,
                                NAN, 1,   -3,   2,   2,   0,    1,    1,   NAN, NAN, 0, 0.25, -1,  4,
                                1,   2,   3,    0.5, 0.5, -2,   -0.5, 1,   2,   NAN, 1, 0};

static const oc_case cases[] = {
  {"max_pool", "1", 1, {OC_F32(-1, 1, 1, 1, 1, 1)}, 1, {OC_ATTR_IS("kernel_shape", 1, 1)}, .grad = 1},
  {"max_pool", "2d stride pads", 1, {OC_F32(-1, 1, 2, 3, 9, 11)},
   3, {OC_ATTR_IS("kernel_shape", 3, 3), OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1},
  {"max_pool", "overlap dilation f64", 1, {OC_F64(-1, 1, 2, 4, 9, 11)},
   2, {OC_ATTR_IS("kernel_shape", 3, 2), OC_ATTR_IS("dilations", 2, 1)}, .grad = 1},
  {"max_pool", "ties", 1, {OC_VALUES(EM_F32, ties, 1, 2, 4, 5)}, 1, {OC_ATTR_IS("kernel_shape", 2, 3)},
   .grad = 1, .ties = 1},
  {"max_pool", "ties f64 stride", 1, {OC_VALUES(EM_F64, ties, 2, 1, 4, 5)},
   3, {OC_ATTR_IS("kernel_shape", 3, 3), OC_ATTR_IS("strides", 1, 2), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1,
   .ties = 1},
  {"max_pool", "nan", 1, {OC_VALUES(EM_F32, nans, 1, 2, 4, 5)},
   2, {OC_ATTR_IS("kernel_shape", 2, 2), OC_ATTR_IS("pads", 0, 1, 1, 0)}, .grad = 1},
  {"max_pool", "1d ceil_mode", 1, {OC_F32(-1, 1, 2, 3, 17)},
   3, {OC_ATTR_IS("kernel_shape", 4), OC_ATTR_IS("strides", 3), OC_ATTR_I("ceil_mode", 1)}, .grad = 1},
  {"max_pool", "3d", 1, {OC_F64(-1, 1, 2, 2, 5, 6, 7)},
   2, {OC_ATTR_IS("kernel_shape", 2, 3, 2), OC_ATTR_IS("strides", 2, 2, 1)}, .grad = 1},
  {"max_pool", "same_upper", 1, {OC_F32(-1, 1, 2, 3, 9, 11)},
   3, {OC_ATTR_IS("kernel_shape", 3, 3), OC_ATTR_IS("strides", 2, 2), OC_ATTR_S("auto_pad", "SAME_UPPER")},
   .grad = 1},
  {"max_pool", "empty batch", 1, {OC_F32(-1, 1, 0, 3, 5, 6)}, 1, {OC_ATTR_IS("kernel_shape", 2, 2)}, .grad = 1},
  {"max_pool", "large", 1, {OC_F32(-1, 1, 2, 8, 56, 56)},
   3, {OC_ATTR_IS("kernel_shape", 3, 3), OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1},

  {"average_pool", "1", 1, {OC_F32(-1, 1, 1, 1, 1, 1)}, 1, {OC_ATTR_IS("kernel_shape", 1, 1)}, .grad = 1},
  {"average_pool", "2d stride pads", 1, {OC_F32(-1, 1, 2, 3, 9, 11)},
   3, {OC_ATTR_IS("kernel_shape", 3, 3), OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1},
  {"average_pool", "count_include_pad ceil_mode f64", 1, {OC_F64(-1, 1, 2, 3, 9, 11)},
   5, {OC_ATTR_IS("kernel_shape", 3, 2), OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 0, 1, 1),
       OC_ATTR_I("count_include_pad", 1), OC_ATTR_I("ceil_mode", 1)}, .grad = 1},
  {"average_pool", "ceil_mode no pad count", 1, {OC_F32(-1, 1, 2, 3, 10, 11)},
   4, {OC_ATTR_IS("kernel_shape", 3, 3), OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 1, 0, 0),
       OC_ATTR_I("ceil_mode", 1)}, .grad = 1},
  {"average_pool", "1d dilation", 1, {OC_F32(-1, 1, 2, 3, 17)},
   3, {OC_ATTR_IS("kernel_shape", 3), OC_ATTR_IS("dilations", 2), OC_ATTR_IS("pads", 2, 1)}, .grad = 1},
  {"average_pool", "3d", 1, {OC_F64(-1, 1, 2, 2, 5, 6, 7)},
   3, {OC_ATTR_IS("kernel_shape", 2, 2, 3), OC_ATTR_IS("strides", 1, 2, 2), OC_ATTR_I("count_include_pad", 1)},
   .grad = 1},
  {"average_pool", "same_lower", 1, {OC_F32(-1, 1, 2, 3, 9, 11)},
   3, {OC_ATTR_IS("kernel_shape", 2, 3), OC_ATTR_IS("strides", 2, 2), OC_ATTR_S("auto_pad", "SAME_LOWER")},
   .grad = 1},
  {"average_pool", "large", 1, {OC_F32(-1, 1, 2, 8, 56, 56)},
   2, {OC_ATTR_IS("kernel_shape", 2, 2), OC_ATTR_IS("strides", 2, 2)}, .grad = 1},

  {"global_max_pool", "1", 1, {OC_F32(-1, 1, 1, 1, 1)}, .grad = 1},
  {"global_max_pool", "2d", 1, {OC_F32(-1, 1, 2, 5, 7, 9)}, .grad = 1},
  {"global_max_pool", "1d f64", 1, {OC_F64(-1, 1, 3, 4, 10)}, .grad = 1},
  {"global_max_pool", "3d", 1, {OC_F32(-1, 1, 2, 2, 3, 4, 5)}, .grad = 1},
  {"global_max_pool", "ties", 1, {OC_VALUES(EM_F32, ties, 2, 4, 5)}, .grad = 1},
  {"global_max_pool", "nan", 1, {OC_VALUES(EM_F64, nans, 4, 2, 5)}, .grad = 1},
  {"global_max_pool", "empty plane", 1, {OC_F32(-1, 1, 2, 3, 0)}, .grad = 1},
  {"global_average_pool", "empty plane", 1, {OC_F64(-1, 1, 2, 3, 4, 0)}, .grad = 1},
  {"global_average_pool", "1", 1, {OC_F32(-1, 1, 1, 1, 1)}, .grad = 1},
  {"global_average_pool", "2d", 1, {OC_F32(-1, 1, 2, 5, 7, 9)}, .grad = 1},
  {"global_average_pool", "1d f64", 1, {OC_F64(-1, 1, 2, 3, 17)}, .grad = 1},
  {"global_average_pool", "3d", 1, {OC_F64(-1, 1, 2, 2, 3, 4, 5)}, .grad = 1},
  {"global_average_pool", "large", 1, {OC_F32(-1, 1, 4, 16, 32, 32)}, .grad = 1},
  {"global_average_pool", "f64 groups of 8 planes", 1, {OC_F64(-1, 1, 3, 5, 6, 7)}, .grad = 1},
};
OC_REGISTER(pool, cases)
