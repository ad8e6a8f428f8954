/* Cases of the recurrent family (ops/recurrent.c) for test_ops_devices: the
 * fused LSTM recurrence _lstm_seq forward and reversed, with initial states
 * and sequence lengths (0, partial, T; i32 and i64), and its gradient
 * _lstm_seq_grad through .grad (the loss weighs every output, so the
 * workspace's own gradient, has_dws, runs too). f32: f64 runs on the CPU
 * (libm's tanh and exp), as the unary family's f64 transcendentals. */
#include "op_cases.h"

static const double lens4[] = {5, 0, 2, 3};
static const double lens3[] = {1, 6, 6};
static const double lens_odd[] = {9, -2, 3, 4}; /* past T, negative (an empty sequence) */

#define LSTM_ATTRS(rev, h0, c0, lens) \
  4, {OC_ATTR_I("reverse", rev), OC_ATTR_I("has_h0", h0), OC_ATTR_I("has_c0", c0), OC_ATTR_I("has_lens", lens)}

static const oc_case cases[] = {
  {"_lstm_seq", "f32 forward", 2, {OC_F32(-2, 2, 5, 3, 16), OC_F32(-0.5, 0.5, 16, 4)}, LSTM_ATTRS(0, 0, 0, 0),
   .grad = 1},
  {"_lstm_seq", "f32 reverse h0 c0 lengths", 5,
   {OC_F32(-2, 2, 5, 4, 12), OC_F32(-0.5, 0.5, 12, 3), OC_F32(-1, 1, 4, 3), OC_F32(-1, 1, 4, 3),
    OC_VALUES(EM_I32, lens4, 4)},
   LSTM_ATTRS(1, 1, 1, 1), .grad = 1},
  {"_lstm_seq", "f32 lengths i64 h0", 4,
   {OC_F32(-2, 2, 6, 3, 20), OC_F32(-0.5, 0.5, 20, 5), OC_F32(-1, 1, 3, 5), OC_VALUES(EM_I64, lens3, 3)},
   LSTM_ATTRS(0, 1, 0, 1), .grad = 1},
  {"_lstm_seq", "f32 wide", 3, {OC_F32(-2, 2, 3, 8, 256), OC_F32(-0.2, 0.2, 256, 64), OC_F32(-1, 1, 8, 64)},
   LSTM_ATTRS(0, 0, 1, 0), .grad = 1},
  {"_lstm_seq", "f32 reverse lengths past T and negative, i32, h0 c0", 5,
   {OC_F32(-2, 2, 4, 4, 8), OC_F32(-0.5, 0.5, 8, 2), OC_F32(-1, 1, 4, 2), OC_F32(-1, 1, 4, 2),
    OC_VALUES(EM_I32, lens_odd, 4)},
   LSTM_ATTRS(1, 1, 1, 1), .grad = 1},
  {"_lstm_seq", "f32 empty batch (N 0) h0", 3, {OC_F32(-2, 2, 3, 0, 8), OC_F32(-0.5, 0.5, 8, 2), OC_F32(-1, 1, 0, 2)},
   LSTM_ATTRS(0, 1, 0, 0), .grad = 1},
};

OC_REGISTER(recurrent, cases)
