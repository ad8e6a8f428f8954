/* The resize family's cases (ops/resize.c, kernels/resize.cu): nearest with its rounding modes,
 * N-linear, cubic with exclude_outside, every coordinate transform, tf_crop_and_resize's
 * extrapolation, antialias (widened filters), sizes and scales, rank 1 to 5, an empty output.
 * .grad runs _resize_grad on the GPU, which gathers per input element in the CPU's order: both
 * compare bit for bit. */
#include "op_cases.h"

#define SZ(...) OC_ATTR_IS("sizes", __VA_ARGS__)
#define SC(...) OC_ATTR_FS("scales", __VA_ARGS__)
#define MODE(m) OC_ATTR_S("mode", m)
#define CTM(m) OC_ATTR_S("coordinate_transformation_mode", m)

static const oc_case cases[] = {
  {"resize", "1", 1, {OC_F32(-1, 1, 1)}, 1, {SZ(1)}, .grad = 1},
  {"resize", "nearest up", 1, {OC_F32(-1, 1, 2, 3, 4, 5)}, 1, {SC(1, 1, 2, 3)}, .grad = 1},
  {"resize", "nearest down ceil asym", 1, {OC_F64(-1, 1, 2, 3, 9, 7)},
   3, {SZ(2, 3, 4, 3), CTM("asymmetric"), OC_ATTR_S("nearest_mode", "ceil")}, .grad = 1},
  {"resize", "nearest prefer_ceil align", 1, {OC_F32(-1, 1, 1, 2, 5, 6)},
   3, {SZ(1, 2, 8, 11), CTM("align_corners"), OC_ATTR_S("nearest_mode", "round_prefer_ceil")}, .grad = 1},
  {"resize", "bilinear", 1, {OC_F32(-1, 1, 2, 3, 5, 6)}, 2, {SZ(2, 3, 9, 4), MODE("linear")}, .grad = 1},
  {"resize", "bilinear pytorch f64", 1, {OC_F64(-1, 1, 2, 3, 5, 6)},
   3, {SC(1, 1, 0.5, 1.75), MODE("linear"), CTM("pytorch_half_pixel")}, .grad = 1},
  {"resize", "trilinear symmetric", 1, {OC_F32(-1, 1, 1, 2, 3, 4, 5)},
   3, {SZ(1, 2, 5, 7, 3), MODE("linear"), CTM("half_pixel_symmetric")}, .grad = 1},
  {"resize", "linear every axis 1d", 1, {OC_F64(-1, 1, 13)}, 2, {SZ(29), MODE("linear")}, .grad = 1},
  {"resize", "cubic", 1, {OC_F32(-1, 1, 2, 2, 6, 5)}, 2, {SZ(2, 2, 11, 4), MODE("cubic")}, .grad = 1},
  {"resize", "cubic exclude a f64", 1, {OC_F64(-1, 1, 1, 3, 4, 7)},
   4, {SC(1, 1, 2.5, 0.6), MODE("cubic"), OC_ATTR_F("cubic_coeff_a", -0.5), OC_ATTR_I("exclude_outside", 1)},
   .grad = 1},
  {"resize", "tf crop extrapolate", 1, {OC_F32(-1, 1, 2, 2, 6, 5)},
   5, {SZ(2, 2, 7, 8), MODE("linear"), CTM("tf_crop_and_resize"),
       OC_ATTR_FS("roi", 0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3), OC_ATTR_F("extrapolation_value", 2.5)}, .grad = 1},
  {"resize", "antialias linear down", 1, {OC_F64(-1, 1, 2, 2, 11, 9)},
   3, {SC(1, 1, 0.3, 0.5), MODE("linear"), OC_ATTR_I("antialias", 1)}, .grad = 1},
  {"resize", "antialias cubic down", 1, {OC_F32(-1, 1, 1, 2, 12, 9)},
   3, {SZ(1, 2, 5, 4), MODE("cubic"), OC_ATTR_I("antialias", 1)}, .grad = 1},
  {"resize", "empty output", 1, {OC_F32(-1, 1, 2, 3, 4)}, 1, {SZ(2, 0, 4)}, .grad = 1},
  {"resize", "large", 1, {OC_F32(-1, 1, 2, 8, 40, 40)}, 2, {SC(1, 1, 2, 2), MODE("linear")}, .grad = 1},
};
OC_REGISTER(resize, cases)
