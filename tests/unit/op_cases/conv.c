/* The convolution family's cases (ops/conv.c, kernels/conv.cu): convolution and
 * convolution_transpose with 1 to 3 spatial axes, strides, dilations,
 * asymmetric and automatic pads, groups, depthwise (with a channel multiplier),
 * pointwise, bias; .grad runs _conv_grad_input, _conv_grad_weight and
 * _conv_grad_bias on the GPU too. Fast mode: the CPU goes through OpenBLAS
 * (its own sum order), the GPU through the fixed-order kernels, hence the f32
 * tolerance; portable mode compares bit for bit. */
#include "op_cases.h"

#define CONV_TOL 1e-4 /* f32, fast mode: sums of up to a few hundred products in two orders */

static const oc_case cases[] = {
  /* convolution: x [N, C, s...], w [M, C/group, k...], b [M] */
  {"convolution", "1", 2, {OC_F32(-1, 1, 1, 1, 1, 1), OC_F32(-1, 1, 1, 1, 1, 1)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "2d pads bias", 3, {OC_F32(-1, 1, 2, 3, 9, 11), OC_F32(-1, 1, 4, 3, 3, 3), OC_F32(-1, 1, 4)},
   1, {OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "2d f64", 3, {OC_F64(-1, 1, 2, 3, 9, 11), OC_F64(-1, 1, 4, 3, 3, 3), OC_F64(-1, 1, 4)},
   1, {OC_ATTR_IS("pads", 1, 0, 2, 1)}, .grad = 1},
  {"convolution", "strides dilations", 2, {OC_F32(-1, 1, 2, 4, 9, 11), OC_F32(-1, 1, 6, 4, 3, 3)},
   3, {OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("dilations", 2, 1), OC_ATTR_IS("pads", 1, 0, 2, 1)}, .grad = 1,
   .tol = CONV_TOL},
  {"convolution", "groups", 3, {OC_F32(-1, 1, 2, 6, 9, 11), OC_F32(-1, 1, 4, 3, 3, 3), OC_F32(-1, 1, 4)},
   2, {OC_ATTR_I("group", 2), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "groups f64 stride", 2, {OC_F64(-1, 1, 2, 6, 9, 11), OC_F64(-1, 1, 6, 2, 3, 2)},
   2, {OC_ATTR_I("group", 3), OC_ATTR_IS("strides", 2, 3)}, .grad = 1},
  {"convolution", "depthwise x2 stride", 3, {OC_F32(-1, 1, 2, 4, 9, 11), OC_F32(-1, 1, 8, 1, 3, 3),
   OC_F32(-1, 1, 8)}, 3, {OC_ATTR_I("group", 4), OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 1, 1, 1)},
   .grad = 1, .tol = CONV_TOL},
  {"convolution", "depthwise f64", 2, {OC_F64(-1, 1, 2, 3, 9, 11), OC_F64(-1, 1, 3, 1, 3, 3)},
   2, {OC_ATTR_I("group", 3), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1},
  {"convolution", "depthwise dilated", 2, {OC_F32(-1, 1, 2, 5, 9, 11), OC_F32(-1, 1, 5, 1, 3, 3)},
   3, {OC_ATTR_I("group", 5), OC_ATTR_IS("dilations", 2, 2), OC_ATTR_S("auto_pad", "SAME_UPPER")}, .grad = 1,
   .tol = CONV_TOL},
  {"convolution", "pointwise", 3, {OC_F32(-1, 1, 2, 5, 9, 11), OC_F32(-1, 1, 7, 5, 1, 1), OC_F32(-1, 1, 7)},
   0, .grad = 1, .tol = CONV_TOL},
  {"convolution", "same_upper stride", 2, {OC_F32(-1, 1, 2, 3, 9, 11), OC_F32(-1, 1, 4, 3, 3, 3)},
   2, {OC_ATTR_S("auto_pad", "SAME_UPPER"), OC_ATTR_IS("strides", 2, 2)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "same_lower even kernel", 2, {OC_F64(-1, 1, 2, 3, 9, 11), OC_F64(-1, 1, 4, 3, 2, 4)},
   1, {OC_ATTR_S("auto_pad", "SAME_LOWER")}, .grad = 1},
  {"convolution", "pads wider than the kernel", 2, {OC_F32(-1, 1, 1, 2, 4, 5), OC_F32(-1, 1, 3, 2, 2, 2)},
   1, {OC_ATTR_IS("pads", 3, 0, 2, 4)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "1d", 3, {OC_F32(-1, 1, 2, 3, 17), OC_F32(-1, 1, 5, 3, 4), OC_F32(-1, 1, 5)},
   2, {OC_ATTR_IS("strides", 2), OC_ATTR_IS("pads", 1, 2)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "1d f64 dilated", 2, {OC_F64(-1, 1, 2, 4, 19), OC_F64(-1, 1, 3, 4, 3)},
   1, {OC_ATTR_IS("dilations", 3)}, .grad = 1},
  {"convolution", "3d", 3, {OC_F32(-1, 1, 2, 2, 5, 6, 7), OC_F32(-1, 1, 3, 2, 2, 3, 2), OC_F32(-1, 1, 3)},
   2, {OC_ATTR_IS("strides", 1, 2, 2), OC_ATTR_IS("pads", 1, 0, 1, 0, 1, 1)}, .grad = 1, .tol = CONV_TOL},
  {"convolution", "3d f64 groups", 2, {OC_F64(-1, 1, 1, 4, 4, 5, 3), OC_F64(-1, 1, 4, 2, 2, 2, 2)},
   1, {OC_ATTR_I("group", 2)}, .grad = 1},
  {"convolution", "empty batch", 3, {OC_F32(-1, 1, 0, 3, 5, 6), OC_F32(-1, 1, 4, 3, 3, 3), OC_F32(-1, 1, 4)},
   0, .grad = 1, .tol = CONV_TOL},
  {"convolution", "large", 3, {OC_F32(-1, 1, 2, 8, 30, 30), OC_F32(-1, 1, 16, 8, 3, 3), OC_F32(-1, 1, 16)},
   1, {OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1, .tol = CONV_TOL},

  /* convolution_transpose: x [N, C, s...], w [C, M/group, k...], b [M] */
  {"convolution_transpose", "1", 2, {OC_F32(-1, 1, 1, 1, 1, 1), OC_F32(-1, 1, 1, 1, 1, 1)}, .grad = 1,
   .tol = CONV_TOL},
  {"convolution_transpose", "2d stride output_padding bias", 3,
   {OC_F32(-1, 1, 2, 4, 5, 6), OC_F32(-1, 1, 4, 3, 3, 3), OC_F32(-1, 1, 3)},
   3, {OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("pads", 1, 1, 1, 1), OC_ATTR_IS("output_padding", 1, 0)},
   .grad = 1, .tol = CONV_TOL},
  {"convolution_transpose", "groups f64", 3, {OC_F64(-1, 1, 2, 4, 5, 6), OC_F64(-1, 1, 4, 2, 3, 3),
   OC_F64(-1, 1, 4)}, 2, {OC_ATTR_I("group", 2), OC_ATTR_IS("strides", 2, 1)}, .grad = 1},
  {"convolution_transpose", "depthwise", 2, {OC_F32(-1, 1, 2, 3, 6, 7), OC_F32(-1, 1, 3, 2, 3, 3)},
   2, {OC_ATTR_I("group", 3), OC_ATTR_IS("pads", 1, 1, 1, 1)}, .grad = 1, .tol = CONV_TOL},
  {"convolution_transpose", "1d stride dilation", 2, {OC_F32(-1, 1, 2, 3, 7), OC_F32(-1, 1, 3, 2, 3)},
   2, {OC_ATTR_IS("strides", 3), OC_ATTR_IS("dilations", 2)}, .grad = 1, .tol = CONV_TOL},
  {"convolution_transpose", "3d", 2, {OC_F64(-1, 1, 1, 2, 3, 4, 3), OC_F64(-1, 1, 2, 3, 2, 2, 2)},
   1, {OC_ATTR_IS("strides", 2, 2, 1)}, .grad = 1},
  {"convolution_transpose", "same_lower", 2, {OC_F32(-1, 1, 2, 3, 4, 5), OC_F32(-1, 1, 3, 2, 3, 3)},
   2, {OC_ATTR_S("auto_pad", "SAME_LOWER"), OC_ATTR_IS("strides", 2, 2)}, .grad = 1, .tol = CONV_TOL},
  {"convolution_transpose", "output_shape", 2, {OC_F32(-1, 1, 2, 2, 4, 4), OC_F32(-1, 1, 2, 3, 3, 3)},
   2, {OC_ATTR_IS("strides", 2, 2), OC_ATTR_IS("output_shape", 8, 9)}, .grad = 1, .tol = CONV_TOL},
  /* f16 and bf16 (engine/half.c; cuDNN in fast mode): within one rounding of the result */
  {"convolution", "2d f16 pads bias", 3,
   {OC_IN(EM_F16, -1, 1, 2, 3, 9, 11), OC_IN(EM_F16, -1, 1, 4, 3, 3, 3), OC_IN(EM_F16, -1, 1, 4)}, 1,
   {OC_ATTR_IS("pads", 1, 1, 1, 1)}, .tol = 2e-3},
  {"convolution", "2d bf16 strides groups", 2, {OC_IN(EM_BF16, -1, 1, 2, 4, 8, 8), OC_IN(EM_BF16, -1, 1, 6, 2, 3, 3)},
   2, {OC_ATTR_IS("strides", 2, 2), OC_ATTR_I("group", 2)}, .tol = 1e-2},
  {"convolution_transpose", "2d f16", 2, {OC_IN(EM_F16, -1, 1, 1, 4, 5, 5), OC_IN(EM_F16, -1, 1, 4, 3, 3, 3)}, 1,
   {OC_ATTR_IS("strides", 2, 2)}, .tol = 2e-3},
};
OC_REGISTER(conv, cases)
