/* Cases of the learner op family (ops/learner.c) for test_ops_devices: the
 * parameters and slots are em_state values the update ops write in place
 * (.state), compared after the run, bitwise in portable mode. The
 * hyperparameter vector h is fixed (kernels/learner_math.h EM_LRN_H_*:
 * lr, mu, k, rho, 1 - rho, eps, c1, c2, l1, l2, wd, clip value, clip norm,
 * eta, LARC's wd), with every option on; "plain" turns the options off.
 * Slots that take a square root start non-negative, as a real run's do.
 * Sizes: one element, odd sizes above a block (257, 1000), two tensors in
 * one node of different sizes, and nodes of 3 and 7 tensors around the
 * kernel's chunk of 2048 elements a block (learner_math.h EM_LRN_CHUNK: a
 * tensor takes blocks of its own, found through the launch's table).
 * _learner_sumsq: sizes below, at and above its 256 lanes, and 16 tensors
 * in one launch. Dynamic loss scaling (trainer.h): h's entry 15 is 1 / S
 * ("scaled"); _learner_scales with skip = 1 (a third column of skip flags)
 * over finite sums and over sums holding inf or NaN, and updates whose
 * scales f32[n, 3] skip some tensors (left as they were) and not others. */
#include <math.h>

#include "op_cases.h"

static const double H_ALL[16] = {0.1, 0.9, 0.1, 0.99, 0.01, 1e-8, 1.5, 1.2,
                                 0.01, 0.02, 0.03, 0.7, 2.0, 0.01, 0.05, 0};
static const double H_PLAIN[16] = {0.05, 0.9, 1.0, 0.9, 0.1, 1e-6, 1.1, 1.01, 0, 0, 0, 0, 0, 0, 0, 0};

static const double H_SCALED[16] = {0.1, 0.9, 0.1, 0.99, 0.01, 1e-8, 1.5, 1.2,
                                    0.01, 0.02, 0.03, 0.7, 2.0, 0.01, 0.05, 1.0 / 1024};
/* Sums of squares of scaled gradients: finite, with an inf, with a NaN. */
static const double SG_INF[3] = {4.0, INFINITY, 1.0};
static const double SG_NAN[2] = {NAN, 2.0};
/* Scales with skip flags: tensor 0 steps, tensor 1 is skipped. */
static const double SC_SKIP[6] = {0.5, 1.25, 0, 0.75, 1.0, 1};

#define H(v) OC_VALUES(EM_F32, v, 16)
#define N(k) OC_ATTR_I("n", k)
/* scales: clipping's gradient multiplier and LARC's rate factor per tensor */
#define SC(k) OC_F32(0.25, 1.5, k, 2)
#define P(...) OC_F32(-2, 2, __VA_ARGS__)
#define G(...) OC_F32(-3, 3, __VA_ARGS__)
#define POS(...) OC_F32(0, 1, __VA_ARGS__)

static const oc_case cases[] = {
  {"_update_sgd", "1", 4, {H(H_ALL), SC(1), P(1), G(1)}, 1, {N(1)}, .state = 0x4},
  {"_update_sgd", "plain odd", 4, {H(H_PLAIN), SC(1), P(257), G(257)}, 1, {N(1)}, .state = 0x4},
  {"_update_sgd", "two tensors", 6, {H(H_ALL), SC(2), P(3, 5), P(1000), G(3, 5), G(1000)}, 1, {N(2)},
   .state = 0xc},
  {"_update_sgd", "7 tensors", 16,
   {H(H_ALL), SC(7), P(1), P(2049), P(3, 5), P(2048), P(1), P(4100), P(9), G(1), G(2049), G(3, 5), G(2048), G(1),
    G(4100), G(9)},
   1, {N(7)}, .state = 0x1fc},
  {"_update_adam", "3 tensors", 14,
   {H(H_ALL), SC(3), P(2049), P(1), P(300), G(2049), G(1), G(300), P(2049), P(1), P(300), POS(2049), POS(1),
    POS(300)},
   1, {N(3)}, .state = 0x3f1c},
  {"_update_momentum", "two tensors", 8, {H(H_ALL), SC(2), P(7), P(33, 9), G(7), G(33, 9), P(7), P(33, 9)}, 1,
   {N(2)}, .state = 0xcc},
  {"_update_nesterov", "odd", 5, {H(H_ALL), SC(1), P(257), G(257), P(257)}, 1, {N(1)}, .state = 0x14},
  {"_update_nesterov", "plain", 5, {H(H_PLAIN), SC(1), P(1000), G(1000), P(1000)}, 1, {N(1)}, .state = 0x14},
  {"_update_adagrad", "odd", 5, {H(H_ALL), SC(1), P(257), G(257), POS(257)}, 1, {N(1)}, .state = 0x14},
  {"_update_rmsprop", "odd", 5, {H(H_PLAIN), SC(1), P(3, 11), G(3, 11), POS(3, 11)}, 1, {N(1)}, .state = 0x14},
  {"_update_adadelta", "odd", 6, {H(H_ALL), SC(1), P(257), G(257), POS(257), POS(257)}, 1, {N(1)},
   .state = 0x34},
  {"_update_adam", "odd", 6, {H(H_ALL), SC(1), P(1000), G(1000), P(1000), POS(1000)}, 1, {N(1)}, .state = 0x34},
  {"_update_adam", "plain 1", 6, {H(H_PLAIN), SC(1), P(1), G(1), P(1), POS(1)}, 1, {N(1)}, .state = 0x34},
  {"_update_adamw", "odd", 6, {H(H_ALL), SC(1), P(5, 7), G(5, 7), P(5, 7), POS(5, 7)}, 1, {N(1)},
   .state = 0x34},
  {"_update_fsadagrad", "odd", 6, {H(H_ALL), SC(1), P(257), G(257), POS(257), P(257)}, 1, {N(1)},
   .state = 0x34},
  {"_update_fsadagrad", "no momentum", 6, {H(H_PLAIN), SC(1), P(64), G(64), POS(64), P(64)}, 1, {N(1)},
   .state = 0x34},
  {"_learner_scales", "clip", 2, {H(H_ALL), POS(3)}, 2, {N(3), OC_ATTR_I("larc", 0)}},
  {"_learner_scales", "larc clip", 3, {H(H_ALL), POS(2), OC_F32(0, 0.01, 2)}, 2, {N(2), OC_ATTR_I("larc", 1)}},
  {"_learner_scales", "larc scale", 3, {H(H_PLAIN), POS(1), POS(1)}, 2, {N(1), OC_ATTR_I("larc", 2)}},
  {"_learner_scales", "skip finite", 2, {H(H_SCALED), POS(3)}, 3, {N(3), OC_ATTR_I("larc", 0), OC_ATTR_I("skip", 1)}},
  {"_learner_scales", "skip inf", 2, {H(H_SCALED), OC_VALUES(EM_F32, SG_INF, 3)}, 3,
   {N(3), OC_ATTR_I("larc", 0), OC_ATTR_I("skip", 1)}},
  {"_learner_scales", "larc skip nan", 3, {H(H_SCALED), POS(2), OC_VALUES(EM_F32, SG_NAN, 2)}, 3,
   {N(2), OC_ATTR_I("larc", 1), OC_ATTR_I("skip", 1)}},
  {"_learner_scales", "larc scaled", 3, {H(H_SCALED), POS(2), OC_F32(0, 0.01, 2)}, 3,
   {N(2), OC_ATTR_I("larc", 2), OC_ATTR_I("skip", 1)}},
  {"_update_adam", "skip one of two", 10,
   {H(H_SCALED), OC_VALUES(EM_F32, SC_SKIP, 2, 3), P(7), P(2049), G(7), G(2049), P(7), P(2049), POS(7), POS(2049)},
   1, {N(2)}, .state = 0x3cc},
  {"_update_momentum", "skip one of two", 8,
   {H(H_SCALED), OC_VALUES(EM_F32, SC_SKIP, 2, 3), P(300), P(5), G(300), G(5), P(300), P(5)}, 1, {N(2)},
   .state = 0xcc},
  {"_learner_sumsq", "1", 1, {P(1)}},
  {"_learner_sumsq", "odd sizes", 3, {P(255), P(3, 7, 11), P(5000)}},
  {"_learner_sumsq", "8 tensors", 8, {P(1), P(300), P(2, 2), P(257), G(9), P(1), P(600), P(17)}},
  {"_learner_sumsq", "16 tensors", 16,
   {P(1), P(300), P(2, 2), P(257), G(9), P(1), P(600), P(17), P(256), P(255), P(4100), G(3), P(2), P(512), P(7, 3),
    P(1)}},
};
OC_REGISTER(learner, cases)
