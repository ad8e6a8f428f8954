/* Cases of the every-op-every-device test for the norm family (ops/norm.c,
 * kernels/norm.cu): batch norm in inference and training (training also
 * updates the running statistics on the device, and differentiates through
 * the batch statistics), layer norm over one or several axes with and
 * without bias, instance norm, LRN windows wider and narrower than C, dropout
 * in training (the counter-based mask must match the CPU's bit for bit) and
 * in inference. .grad covers the fused gradient ops. */
#include "op_cases.h"

/* running variances must be positive */
#define BN_IN(DT, ...) \
  OC_IN(DT, -2, 2, __VA_ARGS__), OC_IN(DT, 0.5, 1.5, C_), OC_IN(DT, -1, 1, C_), OC_IN(DT, -1, 1, C_), \
      OC_IN(DT, 0.5, 2, C_)

static const oc_case cases[] = {
#define C_ 3
  {"batch_normalization", "inference", 5, {BN_IN(EM_F32, 4, 3, 5)}, .grad = 1},
  {"batch_normalization", "training", 5, {BN_IN(EM_F32, 4, 3, 5)}, .grad = 1, .training = 1},
  {"batch_normalization", "training 2-D", 5, {BN_IN(EM_F32, 7, 3)}, .grad = 1, .training = 1},
  {"batch_normalization", "f64 training", 5, {BN_IN(EM_F64, 2, 3, 2, 3)}, 2,
   {OC_ATTR_F("epsilon", 1e-3), OC_ATTR_F("momentum", 0.8)}, .grad = 1, .training = 1},
  {"batch_normalization", "f64 inference", 5, {BN_IN(EM_F64, 3, 3, 4)}, .grad = 1},
#undef C_
#define C_ 1
  {"batch_normalization", "1 channel", 5, {BN_IN(EM_F32, 2, 1, 1)}, .grad = 1, .training = 1},
#undef C_
#define C_ 17
  {"batch_normalization", "large", 5, {BN_IN(EM_F32, 8, 17, 300)}, .training = 1},
#undef C_
  {"layer_normalization", "last axis", 3, {OC_F32(-2, 2, 5, 7), OC_F32(0.5, 1.5, 7), OC_F32(-1, 1, 7)}, .grad = 1},
  {"layer_normalization", "no bias", 2, {OC_F32(-2, 2, 3, 9), OC_F32(0.5, 1.5, 9)}, .grad = 1},
  {"layer_normalization", "axis 1", 3, {OC_F32(-2, 2, 2, 3, 4), OC_F32(0.5, 1.5, 3, 4), OC_F32(-1, 1, 3, 4)}, 1,
   {OC_ATTR_I("axis", 1)}, .grad = 1},
  {"layer_normalization", "f64", 3, {OC_F64(-2, 2, 4, 257), OC_F64(0.5, 1.5, 257), OC_F64(-1, 1, 257)}, 1,
   {OC_ATTR_F("epsilon", 1e-3)}, .grad = 1},
  {"layer_normalization", "1", 3, {OC_F32(-2, 2, 1, 1), OC_F32(0.5, 1.5, 1), OC_F32(-1, 1, 1)}, .grad = 1},
  {"instance_normalization", "odd", 3, {OC_F32(-2, 2, 2, 3, 5), OC_F32(0.5, 1.5, 3), OC_F32(-1, 1, 3)}, .grad = 1},
  {"instance_normalization", "f64 2-D spatial", 3,
   {OC_F64(-2, 2, 3, 2, 3, 3), OC_F64(0.5, 1.5, 2), OC_F64(-1, 1, 2)}, .grad = 1},
  {"local_response_normalization", "size 3", 1, {OC_F32(-2, 2, 2, 5, 3)}, 1, {OC_ATTR_I("size", 3)}, .grad = 1},
  {"local_response_normalization", "wide window f64", 1, {OC_F64(-2, 2, 2, 4, 2, 2)}, 4,
   {OC_ATTR_I("size", 7), OC_ATTR_F("alpha", 0.01), OC_ATTR_F("beta", 0.6), OC_ATTR_F("bias", 2)}, .grad = 1},
  {"local_response_normalization", "size 1 2-D", 1, {OC_F32(-3, 3, 3, 6)}, 2,
   {OC_ATTR_I("size", 1), OC_ATTR_F("alpha", 0.5)}, .grad = 1},
  {"dropout", "training", 1, {OC_F32(-2, 2, 4, 33)}, 1, {OC_ATTR_F("ratio", 0.3)}, .grad = 1, .training = 1},
  {"dropout", "training f64 seed", 1, {OC_F64(-2, 2, 3, 7)}, 2, {OC_ATTR_F("ratio", 0.5), OC_ATTR_I("seed", 42)},
   .grad = 1, .training = 1},
  {"dropout", "large", 1, {OC_F32(-2, 2, 50000)}, 1, {OC_ATTR_F("ratio", 0.9)}, .training = 1},
  {"dropout", "inference", 1, {OC_F32(-2, 2, 5, 3)}, .grad = 1},
  {"dropout", "ratio 0", 1, {OC_F32(-2, 2, 9)}, 1, {OC_ATTR_F("ratio", 0)}, .grad = 1, .training = 1},
};
OC_REGISTER(norm, cases)
