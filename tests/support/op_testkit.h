/* Test kit for ops: run one op through the engine, check gradients by finite
 * differences in float64, build tensors, compare with tolerances, expect
 * errors. Every unit test links it (tests/support/ → libtestsupport.a).
 * Failures go through cmocka (fail_msg), naming the op, input and element. */
#ifndef EMBER_TESTS_OP_TESTKIT_H
#define EMBER_TESTS_OP_TESTKIT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ember.h"

/* Runs `op` once on the CPU through a graph and an executor (inputs fed as
 * em_input values of their exact shapes). Writes n_out new tensors (release
 * them). Returns the status of the first failing call (message in
 * em_last_error()). */
em_status ot_run(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                 em_tensor **out, int n_out);
/* ot_run, training mode (dropout, batch norm), with the executor's step. */
em_status ot_run_training(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                          em_tensor **out, int n_out);

/* ot_run of a one-output op that must succeed: returns its output (release it); a failure
 * fails the test, naming the op and em_last_error(). */
em_tensor *ot_run1(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs);
/* ot_run1 on dev (a CUDA device of the libcuda double, or the CPU), in portable mode when asked;
 * the output comes back copied to the CPU. With road, also the road the op's step took on a GPU
 * (what em_exec_describe prints in the last "[...]" of the op's line: "cuBLAS ...", "cuDNN ...";
 * empty where it prints none, as in portable mode), cut to cap bytes. */
em_tensor *ot_run1_on(em_device dev, int portable, const char *op, em_tensor *const *in, int n_in,
                      const em_attr *attrs, int n_attrs, char *road, size_t cap);

/* Finite-difference gradient check. Inputs must be f64 tensors (integer
 * inputs such as indices are allowed and never perturbed). Builds
 * L = sum_k sum(y_k * w_k) over the op's float outputs, with fixed
 * pseudo-random weights w_k, takes d L / d x_i with em_gradients for every
 * input not in skip_mask and not in the op's no_grad mask, and compares with
 * central differences (step 1e-6 * max(1, |x|)) on up to 200 elements per
 * input (all of them when fewer, else an evenly spread sample).
 * Fails the test when |analytic - numeric| > tol * max(1, |numeric|). */
void ot_gradcheck(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs, int n_out,
                  unsigned skip_mask, double tol);
/* A gradient op's own gradient with respect to dy (in[dy_in], f64), which a
 * second-order gradient takes: d sum(op(..., dy, ...) * w) / d dy by
 * em_gradients (even where the op marks dy no_grad, which then gives 0 and
 * fails) against central differences of that sum (step 1e-6, tolerance 1e-6
 * relative), w pseudo-random from seed. */
void ot_grad_dy_check(const char *op, em_tensor *const *in, int n_in, int dy_in, const em_attr *at, int n_at,
                      uint64_t seed);
/* The same with training mode on (dropout with a fixed step, batch norm). */
void ot_gradcheck_training(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                           int n_out, unsigned skip_mask, double tol);

/* Tensors on the CPU. Abort the test (cmocka fail) on allocation failure. */
em_tensor *ot_tensor(em_dtype dtype, int ndim, const int64_t *shape, const double *values); /* converted */
em_tensor *ot_rand(em_dtype dtype, int ndim, const int64_t *shape, uint64_t seed, double lo, double hi);
/* All elements as doubles (malloc'd; free it); *n = numel. */
double *ot_values(const em_tensor *t, int64_t *n);

/* Element-wise |got - want| <= atol + rtol * |want| (NaN matches NaN, inf
 * matches the same inf); fails naming `what` and the first bad index. */
void ot_expect_close(const double *got, const double *want, int64_t n, double atol, double rtol, const char *what);
/* t holds exactly n values, each within tol + tol * |want| of want (ot_expect_close). */
void ot_expect_values(const em_tensor *t, const double *want, int64_t n, double tol, const char *what);
/* t's dtype and shape are exactly these. */
void ot_expect_shape(const em_tensor *t, em_dtype dtype, int ndim, const int64_t *shape, const char *what);

/* em_apply(op) on em_input values of the given shapes must fail with
 * EM_ERR_INVALID_ARGUMENT and a message containing the op name and every
 * non-NULL needle (e.g. a shape "f32[2,3]" or an attribute name). */
void ot_expect_apply_fails(const char *op, int n_in, const em_dtype *dtypes, const int *ndims,
                           const int64_t *const *shapes, const em_attr *attrs, int n_attrs, int n_out,
                           const char *needle1, const char *needle2);

/* Files for save/load tests: a per-process path in $TMPDIR (or /tmp), a
 * whole file read (malloc'd; *n its size) or written, failing the test on
 * error; ot_reseal rewrites the trailing XXH3-64 of an Ember graph file so a
 * deliberate edit reaches the parser instead of the checksum. */
void ot_tmp_path(char *buf, size_t cap, const char *name);
unsigned char *ot_read_file(const char *path, size_t *n);
void ot_write_file(const char *path, const unsigned char *p, size_t n);
void ot_reseal(unsigned char *p, size_t n);

/* A fixed pseudo-random sequence for test data (splitmix64), in [lo, hi). */
double ot_uniform(uint64_t *state, double lo, double hi);

#endif
