/* Tests of Ember's portable math (kernels/em_math.h), its elementwise maps
 * (ops/math_map.c) and the committed PTX of kernels/math.cu and
 * kernels/unary.cu (the unary op family, built on em_math.h).
 *
 * References are independent of the code under test:
 *  - accuracy: glibc's binary64 functions (exp, log, tanh, erf, sin, pow, ...;
 *    errors far below a float ulp), the error measured in ulps of the float
 *    result and checked against the bound em_math.h documents (EM_ULP_*);
 *  - special values: C99 Annex F (F.9) and IEEE 754, written out by hand;
 *  - half / bfloat16: decoders and encoders written here in another style
 *    (binary64 arithmetic, frexp and nearbyint in round-to-nearest-even
 *    mode), compared over all 65536 codes and a sweep of floats.
 *
 * Sweep size: EMBER_MATH_SWEEP=k takes 2^k bit patterns spread over all 2^32
 * floats per function (default 18; 32 is the exhaustive sweep the bounds in
 * em_math.h were measured with, minutes per function), plus dense runs of
 * 2^(k-6) consecutive floats around each function's branch points.
 * EMBER_MATH_TEST=<cmocka pattern> runs only the matching tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <dirent.h>

#include <cmocka.h>

#include "ember.h"
#include "../../kernels/em_math.h"

/* ------------------------------------------------------------- helpers --- */

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static int sweep_log2(void) {
  const char *e = getenv("EMBER_MATH_SWEEP");
  int k = e && *e ? atoi(e) : 18;
  return k < 8 ? 8 : k > 32 ? 32 : k;
}

/* |y - ref| in ulps of the float nearest ref (subnormal ulp 2^-149 below
 * 2^-126). A NaN, infinite or overflowing reference must be matched exactly. */
static double ulp_error(float y, double ref) {
  if (isnan(ref)) return isnan(y) ? 0.0 : INFINITY;
  float rf = (float)ref;
  if (isinf(rf) || isinf(y)) return y == rf ? 0.0 : INFINITY;
  int e;
  frexp(fabs(ref), &e);
  return fabs((double)y - ref) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

typedef struct unary {
  const char *name;
  float (*f)(float);
  double (*ref)(double);
  double bound;        /* EM_ULP_* */
  float dense[12];     /* centres of dense runs (0 ends the list early; 0 itself is always included) */
} unary;

typedef struct worst {
  double err;
  float x;
} worst;

static void check_point(const unary *u, float x, worst *w) {
  float y = u->f(x);
  double err = ulp_error(y, u->ref((double)x));
  if (err > w->err || (isnan(err) && !isnan(w->err))) {
    w->err = err;
    w->x = x;
  }
}

static void sweep_unary(const unary *u) {
  int k = sweep_log2();
  uint64_t count = 1ull << k, stride = 1ull << (32 - k);
  worst w = {0.0, 0.0f};
  for (uint64_t i = 0; i < count; i++) {
    /* Patterns spread evenly, with low bits that vary from point to point. */
    uint64_t jitter = stride > 1 ? (i * 2654435761u) & (stride - 1) : 0;
    check_point(u, float_of((uint32_t)(i * stride + jitter)), &w);
  }
  int run = 1 << (k - 6);
  for (int d = -1; d < 12; d++) {
    float c = d < 0 ? 0.0f : u->dense[d];
    if (d >= 0 && c == 0.0f) break;
    for (int s = 0; s < 2; s++) { /* the centre and its negation */
      uint32_t cb = bits_of(s ? -c : c);
      for (int j = -run / 2; j < run / 2; j++) {
        uint32_t b = cb + (uint32_t)j;
        if (((b ^ cb) & 0x80000000u) == 0) check_point(u, float_of(b), &w);
      }
    }
  }
  float y = u->f(w.x);
  print_message("%-9s max error %.4f ulp (bound %.1f) at %a: got %a, reference %.17g\n", u->name, w.err, u->bound,
                (double)w.x, (double)y, u->ref((double)w.x));
  if (!(w.err <= u->bound))
    fail_msg("%s: %.4f ulp at x = %a (got %a, reference %.17g), above the documented %.1f", u->name, w.err,
             (double)w.x, (double)y, u->ref((double)w.x), u->bound);
}

/* The references: binary64 glibc, with sigmoid and softplus written stably. */
static double ref_sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static double ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
/* x Phi(x) = x erfc(-x/sqrt 2)/2: no cancellation for x < 0. */
static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

#define LN2 0.693147182f
static const unary unaries[] = {
    {"expf", em_expf, exp, EM_ULP_EXPF, {0.3466f, 1.0397f, 88.7228f, -87.3365f, -103.972f, 10.0f, 1e-7f}},
    {"logf", em_logf, log, EM_ULP_LOGF, {1.0f, 0.7071068f, 1.4142135f, 2.0f, 0.5f, 1e-40f, 1.1754944e-38f}},
    {"log1pf", em_log1pf, log1p, EM_ULP_LOG1PF, {-0.2928932f, 0.4142135f, 1.0f, 6e-8f, -0.999f, 1e-3f, 2.0f}},
    {"expm1f", em_expm1f, expm1, EM_ULP_EXPM1F, {0.3466f, 1.0397f, 2.7726f, 17.3f, 88.72f, 3e-8f, 1e-4f}},
    {"tanhf", em_tanhf, tanh, EM_ULP_TANHF, {0.55f, 9.01f, 2.44e-4f, 0.1f, 1.0f, 4.0f}},
    {"sigmoidf", em_sigmoidf, ref_sigmoid, EM_ULP_SIGMOIDF, {1.0f, 4.0f, 16.6f, 87.3f, 103.0f}},
    {"softplusf", em_softplusf, ref_softplus, EM_ULP_SOFTPLUSF, {1.0f, 16.0f, 87.3f, 103.0f, 0.3f}},
    {"erff", em_erff, erf, EM_ULP_ERFF, {1.0f, 2.0f, 3.92f, 0.5f, 1e-3f, 1e-38f}},
    {"sqrtf", em_sqrtf, sqrt, EM_ULP_SQRTF, {1.0f, 2.0f, 1e-40f, 1.1754944e-38f}},
    {"rsqrtf", em_rsqrtf, ref_rsqrt, EM_ULP_RSQRTF, {1.0f, 2.0f, 1e-40f, 3e38f}},
    {"sinf", em_sinf, sin, EM_ULP_SINF, {0.785398f, 1.570796f, 3.141592f, 33554432.0f, 1e6f, 1e-4f}},
    {"cosf", em_cosf, cos, EM_ULP_COSF, {0.785398f, 1.570796f, 3.141592f, 33554432.0f, 1e6f, 1e-4f}},
    {"tanf", em_tanf, tan, EM_ULP_TANF, {0.785398f, 1.570796f, 3.141592f, 33554432.0f, 1e6f, 1e-4f}},
    {"atanf", em_atanf, atan, EM_ULP_ATANF, {1.0f, 0.4142136f, 2.4142136f, 1e-4f, 1e7f}},
    {"asinhf", em_asinhf, asinh, EM_ULP_ASINHF, {2.44e-4f, 1.0f, 1e10f, 1e30f}},
    {"asinf", em_asinf, asin, EM_ULP_ASINF, {2.44e-4f, 0.5f, 0.99999f, 1.0f, 0.7071068f}},
    {"acosf", em_acosf, acos, EM_ULP_ACOSF, {2.44e-4f, 0.5f, 0.99999f, 1.0f, 0.7071068f}},
    {"sinhf", em_sinhf, sinh, EM_ULP_SINHF, {2.44e-4f, 0.5f, 1.0f, 89.4159851f, 20.0f}},
    {"coshf", em_coshf, cosh, EM_ULP_COSHF, {2.44e-4f, 0.5f, 1.0f, 89.4159851f, 20.0f}},
    {"acoshf", em_acoshf, acosh, EM_ULP_ACOSHF, {1.0f, 1.0001f, 2.0f, 1e19f, 3e38f}},
    {"atanhf", em_atanhf, atanh, EM_ULP_ATANHF, {2.44e-4f, 0.5f, 0.99999f, 1.0f, 1e-3f}},
    {"geluf", em_geluf, ref_gelu, EM_ULP_GELUF, {2.8284271f, 1.0f, 5.0f, 10.0f, 14.5f, 37.0f}},
};
#define N_UNARY (sizeof unaries / sizeof unaries[0])

/* --------------------------------------------------------- accuracy sweep --- */

static void test_accuracy(void **state) {
  (void)state;
  for (size_t i = 0; i < N_UNARY; i++) sweep_unary(&unaries[i]);
}

/* x^y over pairs: x from every scale (and negative), y from small integers,
 * halves and random magnitudes; the bound must hold wherever the result is
 * finite, and overflow/underflow must match. */
static void test_pow_accuracy(void **state) {
  (void)state;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  uint64_t count = 1ull << (sweep_log2() + 2);
  worst w = {0.0, 0.0f};
  float wy = 0.0f;
  for (uint64_t i = 0; i < count; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    uint32_t r1 = (uint32_t)rng, r2 = (uint32_t)(rng >> 32);
    float x = float_of((r1 & 0x807fffffu) | ((uint32_t)(97 + (r1 >> 23) % 61) << 23)); /* |x| in [2^-30, 2^31) */
    if (i % 8 == 0) x = float_of(r1);                                                     /* anything */
    float y;
    switch (i % 4) {
    case 0: y = (float)((int)(r2 % 41) - 20); break;         /* integers: negative x allowed */
    case 1: y = (float)((int)(r2 % 81) - 40) * 0.5f; break;  /* halves */
    case 2: y = float_of((r2 & 0x807fffffu) | 0x3f000000u) * (float)(1 << (r2 >> 28)); break;
    default: y = float_of(r2); break;
    }
    float got = em_powf(x, y);
    double err = ulp_error(got, pow((double)x, (double)y));
    if (err > w.err) w.err = err, w.x = x, wy = y;
  }
  print_message("powf      max error %.4f ulp (bound %.1f) at %a ^ %a\n", w.err, EM_ULP_POWF, (double)w.x, (double)wy);
  if (!(w.err <= EM_ULP_POWF))
    fail_msg("powf: %.4f ulp at %a ^ %a (got %a, reference %.17g)", w.err, (double)w.x, (double)wy,
             (double)em_powf(w.x, wy), pow((double)w.x, (double)wy));
}

/* --------------------------------------------------------- special values --- */

#define NAN_BITS 0x7fc00000u
#define INF_BITS 0x7f800000u
#define NINF_BITS 0xff800000u
#define NZERO_BITS 0x80000000u
#define DENORM_MIN_BITS 0x00000001u /* 2^-149 */
#define DENORM_BITS 0x00012345u

typedef struct special {
  float (*f)(float);
  const char *name;
  uint32_t in, out;
} special;

/* Exact results by IEEE 754 and C99 F.9 (exp(-inf) = +0, log(0) = -inf,
 * tanh(+-inf) = +-1, odd functions keep -0, ...), plus Ember's rule that every
 * NaN result is 0x7fc00000, and that tiny odd-function arguments come back
 * unchanged (the exact result rounds to x). */
static const special specials[] = {
    {em_expf, "expf", INF_BITS, INF_BITS},          {em_expf, "expf", NINF_BITS, 0x00000000u},
    {em_expf, "expf", 0x00000000u, 0x3f800000u},    {em_expf, "expf", NZERO_BITS, 0x3f800000u},
    {em_expf, "expf", 0x42b20000u, INF_BITS},       /* 89 */
    {em_expf, "expf", 0xc2d00000u, 0x00000000u},    /* -104 */
    {em_expf, "expf", DENORM_BITS, 0x3f800000u},    {em_expf, "expf", 0x3f800000u, 0x402df854u}, /* e */
    {em_logf, "logf", 0x00000000u, NINF_BITS},      {em_logf, "logf", NZERO_BITS, NINF_BITS},
    {em_logf, "logf", 0x3f800000u, 0x00000000u},    {em_logf, "logf", INF_BITS, INF_BITS},
    {em_logf, "logf", NINF_BITS, NAN_BITS},         {em_logf, "logf", 0xbf800000u, NAN_BITS},
    {em_logf, "logf", DENORM_MIN_BITS, 0xc2ce8ed0u}, /* -149 ln 2 = -103.2789... */
    {em_log1pf, "log1pf", 0xbf800000u, NINF_BITS},  {em_log1pf, "log1pf", 0xc0000000u, NAN_BITS},
    {em_log1pf, "log1pf", NZERO_BITS, NZERO_BITS},  {em_log1pf, "log1pf", INF_BITS, INF_BITS},
    {em_log1pf, "log1pf", DENORM_BITS, DENORM_BITS},
    {em_expm1f, "expm1f", NINF_BITS, 0xbf800000u},  {em_expm1f, "expm1f", INF_BITS, INF_BITS},
    {em_expm1f, "expm1f", NZERO_BITS, NZERO_BITS},  {em_expm1f, "expm1f", DENORM_BITS, DENORM_BITS},
    {em_expm1f, "expm1f", 0xc1a00000u, 0xbf800000u}, /* -20 */
    {em_tanhf, "tanhf", INF_BITS, 0x3f800000u},     {em_tanhf, "tanhf", NINF_BITS, 0xbf800000u},
    {em_tanhf, "tanhf", NZERO_BITS, NZERO_BITS},    {em_tanhf, "tanhf", 0x80012345u, 0x80012345u},
    {em_tanhf, "tanhf", 0x41200000u, 0x3f800000u},  /* tanh 10 rounds to 1 */
    {em_sigmoidf, "sigmoidf", 0x00000000u, 0x3f000000u}, {em_sigmoidf, "sigmoidf", NZERO_BITS, 0x3f000000u},
    {em_sigmoidf, "sigmoidf", INF_BITS, 0x3f800000u},    {em_sigmoidf, "sigmoidf", NINF_BITS, 0x00000000u},
    {em_sigmoidf, "sigmoidf", 0xc3000000u, 0x00000000u}, /* -128 */
    {em_softplusf, "softplusf", INF_BITS, INF_BITS},     {em_softplusf, "softplusf", NINF_BITS, 0x00000000u},
    {em_softplusf, "softplusf", 0x00000000u, 0x3f317218u}, /* ln 2 */
    {em_softplusf, "softplusf", 0x7f7fffffu, 0x7f7fffffu}, /* FLT_MAX: no overflow */
    {em_erff, "erff", INF_BITS, 0x3f800000u},       {em_erff, "erff", NINF_BITS, 0xbf800000u},
    {em_erff, "erff", NZERO_BITS, NZERO_BITS},      {em_erff, "erff", 0x40800000u, 0x3f800000u}, /* 4 */
    {em_sqrtf, "sqrtf", NZERO_BITS, NZERO_BITS},    {em_sqrtf, "sqrtf", INF_BITS, INF_BITS},
    {em_sqrtf, "sqrtf", 0xbf800000u, NAN_BITS},     {em_sqrtf, "sqrtf", NINF_BITS, NAN_BITS},
    {em_sqrtf, "sqrtf", 0x40800000u, 0x40000000u},  {em_sqrtf, "sqrtf", DENORM_MIN_BITS, 0x1a3504f3u},
    {em_rsqrtf, "rsqrtf", 0x00000000u, INF_BITS},   {em_rsqrtf, "rsqrtf", NZERO_BITS, NINF_BITS},
    {em_rsqrtf, "rsqrtf", INF_BITS, 0x00000000u},   {em_rsqrtf, "rsqrtf", 0xbf800000u, NAN_BITS},
    {em_rsqrtf, "rsqrtf", 0x40800000u, 0x3f000000u},
    {em_sinf, "sinf", NZERO_BITS, NZERO_BITS},      {em_sinf, "sinf", INF_BITS, NAN_BITS},
    {em_sinf, "sinf", NINF_BITS, NAN_BITS},         {em_sinf, "sinf", DENORM_BITS, DENORM_BITS},
    {em_cosf, "cosf", NZERO_BITS, 0x3f800000u},     {em_cosf, "cosf", INF_BITS, NAN_BITS},
    {em_cosf, "cosf", DENORM_BITS, 0x3f800000u},
    {em_tanf, "tanf", NZERO_BITS, NZERO_BITS},      {em_tanf, "tanf", NINF_BITS, NAN_BITS},
    {em_tanf, "tanf", DENORM_BITS, DENORM_BITS},
    {em_atanf, "atanf", INF_BITS, 0x3fc90fdbu},     {em_atanf, "atanf", NINF_BITS, 0xbfc90fdbu}, /* +-pi/2 */
    {em_atanf, "atanf", NZERO_BITS, NZERO_BITS},    {em_atanf, "atanf", 0x3f800000u, 0x3f490fdbu}, /* pi/4 */
    {em_atanf, "atanf", DENORM_BITS, DENORM_BITS},
    {em_asinhf, "asinhf", INF_BITS, INF_BITS},      {em_asinhf, "asinhf", NINF_BITS, NINF_BITS},
    {em_asinhf, "asinhf", NZERO_BITS, NZERO_BITS},  {em_asinhf, "asinhf", DENORM_BITS, DENORM_BITS},
    {em_asinf, "asinf", 0x3f800000u, 0x3fc90fdbu},  {em_asinf, "asinf", 0xbf800000u, 0xbfc90fdbu}, /* +-pi/2 */
    {em_asinf, "asinf", NZERO_BITS, NZERO_BITS},    {em_asinf, "asinf", DENORM_BITS, DENORM_BITS},
    {em_asinf, "asinf", 0x3f800001u, NAN_BITS},     {em_asinf, "asinf", INF_BITS, NAN_BITS},
    {em_acosf, "acosf", 0x3f800000u, 0x00000000u},  {em_acosf, "acosf", 0xbf800000u, 0x40490fdbu}, /* 0, pi */
    {em_acosf, "acosf", NZERO_BITS, 0x3fc90fdbu},   {em_acosf, "acosf", NINF_BITS, NAN_BITS},
    {em_sinhf, "sinhf", INF_BITS, INF_BITS},        {em_sinhf, "sinhf", NINF_BITS, NINF_BITS},
    {em_sinhf, "sinhf", NZERO_BITS, NZERO_BITS},    {em_sinhf, "sinhf", DENORM_BITS, DENORM_BITS},
    {em_sinhf, "sinhf", 0x42c80000u, INF_BITS},     {em_sinhf, "sinhf", 0xc2c80000u, NINF_BITS}, /* +-100 */
    {em_coshf, "coshf", INF_BITS, INF_BITS},        {em_coshf, "coshf", NINF_BITS, INF_BITS},
    {em_coshf, "coshf", NZERO_BITS, 0x3f800000u},   {em_coshf, "coshf", 0xc2c80000u, INF_BITS},
    {em_acoshf, "acoshf", 0x3f800000u, 0x00000000u}, {em_acoshf, "acoshf", INF_BITS, INF_BITS},
    {em_acoshf, "acoshf", 0x3f7fffffu, NAN_BITS},   {em_acoshf, "acoshf", NINF_BITS, NAN_BITS},
    {em_atanhf, "atanhf", 0x3f800000u, INF_BITS},   {em_atanhf, "atanhf", 0xbf800000u, NINF_BITS},
    {em_atanhf, "atanhf", NZERO_BITS, NZERO_BITS},  {em_atanhf, "atanhf", DENORM_BITS, DENORM_BITS},
    {em_atanhf, "atanhf", 0x3f800001u, NAN_BITS},
    {em_geluf, "geluf", INF_BITS, INF_BITS},        {em_geluf, "geluf", NINF_BITS, NAN_BITS},
    {em_geluf, "geluf", NZERO_BITS, NZERO_BITS},    {em_geluf, "geluf", 0xc1a00000u, NZERO_BITS}, /* -20 */
    {em_geluf, "geluf", 0x41a00000u, 0x41a00000u}, /* 20 */
};

static void test_special_values(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
    const special *s = &specials[i];
    uint32_t got = bits_of(s->f(float_of(s->in)));
    if (got != s->out)
      fail_msg("%s(%a = 0x%08x) = 0x%08x (%a), expected 0x%08x (%a)", s->name, (double)float_of(s->in), s->in, got,
               (double)float_of(got), s->out, (double)float_of(s->out));
  }
}

/* Every NaN in gives exactly 0x7fc00000 out, whatever its sign and payload:
 * the CPU and the GPUs make different NaN bits on their own. */
static void test_nan_is_canonical(void **state) {
  (void)state;
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu, 0xffffffffu};
  for (size_t n = 0; n < sizeof nans / sizeof nans[0]; n++) {
    float x = float_of(nans[n]);
    for (size_t i = 0; i < N_UNARY; i++) {
      uint32_t got = bits_of(unaries[i].f(x));
      if (got != NAN_BITS) fail_msg("%s(NaN 0x%08x) = 0x%08x, expected 0x%08x", unaries[i].name, nans[n], got, NAN_BITS);
    }
    assert_int_equal(bits_of(em_powf(x, 2.0f)), NAN_BITS);
    assert_int_equal(bits_of(em_powf(2.0f, x)), NAN_BITS);
  }
  /* Domain errors too. */
  assert_int_equal(bits_of(em_powf(-2.0f, 0.5f)), NAN_BITS);
  assert_int_equal(bits_of(em_log1pf(-1.5f)), NAN_BITS);
  assert_int_equal(bits_of(em_cosf(-INFINITY)), NAN_BITS);
}

/* C99 F.9.4.4, case by case. */
static void test_pow_special_values(void **state) {
  (void)state;
  const float inf = INFINITY, nan = float_of(0x7fc00000u);
  const struct { float x, y; uint32_t out; } cases[] = {
      {nan, 0.0f, 0x3f800000u},   {nan, -0.0f, 0x3f800000u},  {1.0f, nan, 0x3f800000u},
      {1.0f, inf, 0x3f800000u},   {-1.0f, inf, 0x3f800000u},  {-1.0f, -inf, 0x3f800000u},
      {0.5f, -inf, INF_BITS},     {2.0f, -inf, 0x00000000u},  {0.5f, inf, 0x00000000u},
      {2.0f, inf, INF_BITS},      {-0.5f, inf, 0x00000000u},  {-2.0f, inf, INF_BITS},
      {0.0f, -3.0f, INF_BITS},    {-0.0f, -3.0f, NINF_BITS},  {-0.0f, -2.0f, INF_BITS},
      {-0.0f, -0.5f, INF_BITS},   {0.0f, -inf, INF_BITS},     {-0.0f, -inf, INF_BITS},
      {0.0f, 3.0f, 0x00000000u},  {-0.0f, 3.0f, NZERO_BITS},  {-0.0f, 2.0f, 0x00000000u},
      {-0.0f, 0.5f, 0x00000000u}, {-0.0f, inf, 0x00000000u},
      {-inf, -3.0f, NZERO_BITS},  {-inf, -2.0f, 0x00000000u}, {-inf, 3.0f, NINF_BITS},
      {-inf, 2.0f, INF_BITS},     {-inf, 0.5f, INF_BITS},     {inf, -1.0f, 0x00000000u},
      {inf, 0.5f, INF_BITS},      {-2.0f, 0.5f, NAN_BITS},    {-2.0f, 3.0f, 0xc1000000u}, /* -8 */
      {-2.0f, 2.0f, 0x40800000u}, {-2.0f, -1.0f, 0xbf000000u},
      {2.0f, 128.0f, INF_BITS},   {2.0f, -149.0f, DENORM_MIN_BITS}, {2.0f, -151.0f, 0x00000000u},
      {-1.0f, 16777217.0f, 0x3f800000u}, /* 2^24 + 1 rounds to an even float */
      {4.0f, 0.5f, 0x40000000u},  {10.0f, 3.0f, 0x447a0000u}, /* 1000: exact results stay exact */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t got = bits_of(em_powf(cases[i].x, cases[i].y));
    if (got != cases[i].out)
      fail_msg("powf(%a, %a) = 0x%08x, expected 0x%08x", (double)cases[i].x, (double)cases[i].y, got, cases[i].out);
  }
}

/* Subnormal inputs and results are kept (no flush to zero), the same on every
 * device. */
static void test_subnormals_kept(void **state) {
  (void)state;
  /* e^-100 = 26.547 * 2^-149: subnormal, correctly rounded to 27 * 2^-149. */
  assert_int_equal(bits_of(em_expf(-100.0f)), 0x0000001bu);
  /* log of the smallest normal and of a subnormal are distinct, finite. */
  assert_true(em_logf(float_of(0x00400000u)) < em_logf(float_of(0x00800000u)));
  assert_int_equal(bits_of(em_sqrtf(float_of(0x00000004u))), 0x1ab504f3u); /* sqrt(2^-147) = 2^-74 sqrt(2) */
  assert_true(em_sigmoidf(-100.0f) > 0.0f && em_sigmoidf(-100.0f) < 1.1754944e-38f);
  assert_true(em_softplusf(-100.0f) > 0.0f && em_softplusf(-100.0f) < 1.1754944e-38f);
  float d = float_of(0x00000100u);
  assert_true(em_erff(d) > d); /* erf x = 1.128 x: a larger subnormal */
}

/* ---------------------------------------------------- half and bfloat16 --- */

/* Reference decoders: the formats' definitions, in binary64. */
static double ref_f16_value(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

static double ref_bf16_value(uint16_t h) {
  int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
  double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
  return s ? -v : v;
}

/* Reference encoder for a finite float: round |x| to `mant` fraction bits
 * with nearbyint (ties to even in the default mode) at the binade's scale, or
 * at the subnormal scale 2^(emin - mant) below 2^emin; inf once the rounded
 * value passes the largest finite one. */
static uint16_t ref_encode(float x, int mant, int emin, int emax, int bias) {
  uint16_t sign = signbit(x) ? (uint16_t)(1u << 15) : 0;
  double a = fabs((double)x);
  uint16_t inf = (uint16_t)(sign | (((1u << (15 - mant)) - 1u) << mant));
  if (a == 0.0) return sign;
  int e;
  frexp(a, &e);
  e -= 1; /* a in [2^e, 2^(e+1)) */
  if (e < emin) {
    double q = nearbyint(ldexp(a, mant - emin)); /* units of 2^(emin - mant) */
    return (uint16_t)(sign | (uint16_t)q);       /* q = 2^mant lands on the smallest normal */
  }
  double q = nearbyint(ldexp(a, mant - e)); /* in [2^mant, 2^(mant+1)] */
  if (q == ldexp(1.0, mant + 1)) q /= 2, e += 1;
  if (e > emax) return inf;
  return (uint16_t)(sign | (uint16_t)((e + bias) << mant) | (uint16_t)(q - ldexp(1.0, mant)));
}

static uint16_t ref_f32_to_f16(float x) {
  if (isnan(x)) return (uint16_t)((bits_of(x) >> 16 & 0x8000u) | 0x7e00u | (bits_of(x) >> 13 & 0x3ffu));
  if (isinf(x)) return signbit(x) ? 0xfc00 : 0x7c00;
  return ref_encode(x, 10, -14, 15, 15);
}

static uint16_t ref_f32_to_bf16(float x) {
  if (isnan(x)) return (uint16_t)((bits_of(x) >> 16) | 0x40u);
  if (isinf(x)) return signbit(x) ? 0xff80 : 0x7f80;
  return ref_encode(x, 7, -126, 127, 127);
}

static void test_f16_all_codes(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = em_f16_bits_to_f32((uint16_t)h);
    int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31 && m) { /* NaN: quiet, payload kept in the top bits */
      uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)m << 13);
      if (bits_of(f) != want) fail_msg("f16 0x%04x -> 0x%08x, expected 0x%08x", h, bits_of(f), want);
      assert_int_equal(em_f32_to_f16_bits(f), h | 0x0200u);
      continue;
    }
    double want = e == 31 ? ((h & 0x8000u) ? -INFINITY : INFINITY) : ref_f16_value((uint16_t)h);
    if ((double)f != want || !signbit(f) != !signbit(want))
      fail_msg("f16 0x%04x -> %a, expected %a", h, (double)f, want);
    if (em_f32_to_f16_bits(f) != h) fail_msg("f16 0x%04x does not round-trip: 0x%04x", h, em_f32_to_f16_bits(f));
  }
}

static void test_bf16_all_codes(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = em_bf16_bits_to_f32((uint16_t)h);
    int e = (h >> 7) & 255, m = h & 127;
    if (e == 255 && m) {
      uint32_t want = (h << 16) | 0x00400000u;
      if (bits_of(f) != want) fail_msg("bf16 0x%04x -> 0x%08x, expected 0x%08x", h, bits_of(f), want);
      assert_int_equal(em_f32_to_bf16_bits(f), h | 0x0040u);
      continue;
    }
    double want = e == 255 ? ((h & 0x8000u) ? -INFINITY : INFINITY) : ref_bf16_value((uint16_t)h);
    if ((double)f != want || !signbit(f) != !signbit(want))
      fail_msg("bf16 0x%04x -> %a, expected %a", h, (double)f, want);
    if (em_f32_to_bf16_bits(f) != h) fail_msg("bf16 0x%04x does not round-trip: 0x%04x", h, em_f32_to_bf16_bits(f));
  }
}

/* Floats spread over all patterns, and every float in the ranges where half
 * rounds into subnormals, the normal range's edge and overflow. */
static void check_f16(float x) {
  uint16_t got = em_f32_to_f16_bits(x), want = ref_f32_to_f16(x);
  if (got != want) fail_msg("f32 %a (0x%08x) -> f16 0x%04x, expected 0x%04x", (double)x, bits_of(x), got, want);
}

static void check_bf16(float x) {
  uint16_t got = em_f32_to_bf16_bits(x), want = ref_f32_to_bf16(x);
  if (got != want) fail_msg("f32 %a (0x%08x) -> bf16 0x%04x, expected 0x%04x", (double)x, bits_of(x), got, want);
}

static void test_f32_to_16_sweep(void **state) {
  (void)state;
  int k = sweep_log2();
  uint64_t count = 1ull << k, stride = 1ull << (32 - k);
  for (uint64_t i = 0; i < count; i++) {
    uint64_t jitter = stride > 1 ? (i * 2654435761u) & (stride - 1) : 0;
    float x = float_of((uint32_t)(i * stride + jitter));
    check_f16(x);
    check_bf16(x);
  }
  /* Around 2^-25 .. 2^-14 (half subnormals), 65504 .. 65536 (overflow), 1.0,
   * and float subnormals / FLT_MAX for bfloat16. */
  const uint32_t centres[] = {0x33000000u, 0x38800000u, 0x387fc000u, 0x477fe000u, 0x477ff000u, 0x3f800000u,
                              0x00800000u, 0x7f7fffffu, 0x7f7f8000u};
  int run = 1 << (k - 4);
  for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++)
    for (int j = -run / 2; j < run / 2; j++)
      for (int s = 0; s < 2; s++) {
        float x = float_of((centres[c] + (uint32_t)j) | (s ? 0x80000000u : 0u));
        check_f16(x);
        check_bf16(x);
      }
}

/* Ties go to the even neighbour; named cases, derived by hand. */
static void test_ties_to_even(void **state) {
  (void)state;
  assert_int_equal(em_f32_to_f16_bits(1.0f + 0x1p-11f), 0x3c00);       /* 1 + half ulp: to 1.0 (even) */
  assert_int_equal(em_f32_to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3c02);   /* between 0x3c01, 0x3c02 */
  assert_int_equal(em_f32_to_f16_bits(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01); /* just above the tie */
  assert_int_equal(em_f32_to_f16_bits(65504.0f), 0x7bff);              /* largest half */
  assert_int_equal(em_f32_to_f16_bits(65519.996f), 0x7bff);            /* below the tie */
  assert_int_equal(em_f32_to_f16_bits(65520.0f), 0x7c00);              /* tie with 65536: even = inf */
  assert_int_equal(em_f32_to_f16_bits(-65520.0f), 0xfc00);
  assert_int_equal(em_f32_to_f16_bits(0x1p-25f), 0x0000);              /* half the smallest subnormal: to 0 */
  assert_int_equal(em_f32_to_f16_bits(0x1.000002p-25f), 0x0001);       /* just above */
  assert_int_equal(em_f32_to_f16_bits(3 * 0x1p-25f), 0x0002);          /* 1.5 ulp: to 2 (even) */
  assert_int_equal(em_f32_to_f16_bits(5 * 0x1p-25f), 0x0002);          /* 2.5 ulp: to 2 (even) */
  assert_int_equal(em_f32_to_f16_bits(0x1.ff8p-15f), 0x03ff);          /* largest subnormal, 1023 * 2^-24 */
  assert_int_equal(em_f32_to_f16_bits(0x1.ffcp-15f), 0x0400);          /* 1023.5 * 2^-24: tie, to 1024 (even) */
  assert_int_equal(em_f32_to_f16_bits(0x1.ff4p-15f), 0x03fe);          /* 1022.5 * 2^-24: tie, to 1022 (even) */
  assert_int_equal(em_f32_to_f16_bits(-0.0f), 0x8000);
  assert_int_equal(em_f32_to_f16_bits(float_of(0x7f800001u)), 0x7e00); /* signalling NaN: quiet */
  assert_int_equal(em_f32_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80);
  assert_int_equal(em_f32_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3f82);
  assert_int_equal(em_f32_to_bf16_bits(float_of(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds up to inf */
  assert_int_equal(em_f32_to_bf16_bits(float_of(0x7f7f7fffu)), 0x7f7f);
  assert_int_equal(em_f32_to_bf16_bits(float_of(0x00008000u)), 0x0000); /* subnormal tie: to 0 (even) */
  assert_int_equal(em_f32_to_bf16_bits(float_of(0x00018000u)), 0x0002);
  assert_int_equal(em_f32_to_bf16_bits(float_of(0xff800001u)), 0xffc0);
}

/* -------------------------------------------------------- the ops API --- */

/* On the CPU device the maps are the header's functions, element by element. */
static void test_maps_on_cpu(void **state) {
  (void)state;
  enum { N = 1000 };
  float x[N], p[N], y[N];
  uint16_t h[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i - N / 2) * 0.37f, p[i] = (float)(i % 7) - 3.0f;
  float (*const fns[EM_MATH_FN_COUNT])(float) = {
      em_expf, em_logf, em_log1pf, em_expm1f, em_tanhf, em_sigmoidf, em_softplusf, em_erff,
      em_sqrtf, em_rsqrtf, em_sinf, em_cosf, em_tanf, em_atanf, em_asinhf};
  for (int f = 0; f < EM_MATH_FN_COUNT; f++) {
    assert_int_equal(em_map_f32(em_cpu(), (em_math_fn)f, x, y, N, NULL), EM_OK);
    for (int i = 0; i < N; i++)
      if (bits_of(y[i]) != bits_of(fns[f](x[i])))
        fail_msg("em_map_f32(%s) element %d differs from the header's function", em_math_fn_name((em_math_fn)f), i);
  }
  assert_string_equal(em_math_fn_name(EM_MATH_EXP), "exp");
  assert_string_equal(em_math_fn_name(EM_MATH_ASINH), "asinh");
  assert_null(em_math_fn_name(EM_MATH_FN_COUNT));
  assert_int_equal(em_pow_f32(em_cpu(), x, p, y, N, NULL), EM_OK);
  for (int i = 0; i < N; i++) assert_int_equal(bits_of(y[i]), bits_of(em_powf(x[i], p[i])));
  assert_int_equal(em_f32_to_f16(em_cpu(), x, h, N, NULL), EM_OK);
  assert_int_equal(em_f16_to_f32(em_cpu(), h, y, N, NULL), EM_OK);
  for (int i = 0; i < N; i++) assert_int_equal(bits_of(y[i]), bits_of(em_f16_bits_to_f32(em_f32_to_f16_bits(x[i]))));
  assert_int_equal(em_f32_to_bf16(em_cpu(), x, h, N, NULL), EM_OK);
  assert_int_equal(em_bf16_to_f32(em_cpu(), h, y, N, NULL), EM_OK);
  for (int i = 0; i < N; i++) assert_int_equal(bits_of(y[i]), bits_of(em_bf16_bits_to_f32(em_f32_to_bf16_bits(x[i]))));
  /* In place, for same-size elements. */
  memcpy(y, x, sizeof y);
  assert_int_equal(em_map_f32(em_cpu(), EM_MATH_TANH, y, y, N, NULL), EM_OK);
  for (int i = 0; i < N; i++) assert_int_equal(bits_of(y[i]), bits_of(em_tanhf(x[i])));
}

static void test_maps_reject_bad_arguments(void **state) {
  (void)state;
  float x[8] = {0}, y[8];
  assert_int_equal(em_map_f32(em_cpu(), EM_MATH_FN_COUNT, x, y, 8, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "unknown function"));
  assert_int_equal(em_map_f32(em_cpu(), (em_math_fn)-1, x, y, 8, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_map_f32(em_cpu(), EM_MATH_EXP, NULL, y, 8, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_pow_f32(em_cpu(), x, NULL, y, 8, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_map_f32(em_cpu(), EM_MATH_EXP, NULL, NULL, 0, NULL), EM_OK);
  /* A conversion in place would overwrite inputs not yet read. */
  assert_int_equal(em_f32_to_f16(em_cpu(), x, (uint16_t *)x, 8, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "overlap"));
  assert_int_equal(em_f16_to_f32(em_cpu(), (uint16_t *)x + 4, x, 4, NULL), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_f32_to_f16(em_cpu(), x, (uint16_t *)y, 8, NULL), EM_OK);
}

/* ---------------------------------------------------- the committed PTX --- */

/* PTX instructions that would make a GPU's bits differ from the CPU's:
 * approximate or flush-to-zero forms, fused multiply-adds (em_math.h calls
 * no fmaf, so any fma is a contraction), hardware transcendentals, and a
 * float add/sub/mul without an explicit rounding mode (ptxas may fuse those
 * into an fma when it compiles the PTX). Returns a reason or NULL. */
static const char *unportable(const char *op) {
  if (strstr(op, ".approx")) return "approximate instruction";
  if (strstr(op, ".ftz")) return "flushes subnormals to zero";
  if (!strncmp(op, "fma.", 4)) return "fused multiply-add (em_math.h requests none)";
  if (!strncmp(op, "mad.", 4) && (strstr(op, ".f32") || strstr(op, ".f64"))) return "floating-point mad";
  static const char *const hw[] = {"ex2.", "lg2.", "sin.", "cos.", "tanh.", "rsqrt.", "div.full."};
  for (size_t i = 0; i < sizeof hw / sizeof hw[0]; i++)
    if (!strncmp(op, hw[i], strlen(hw[i]))) return "hardware approximation";
  if ((!strncmp(op, "add.", 4) || !strncmp(op, "sub.", 4) || !strncmp(op, "mul.", 4)) &&
      (strstr(op, ".f32") || strstr(op, ".f64")) && !strstr(op, ".rn"))
    return "float arithmetic without .rn (ptxas may contract it into an fma)";
  return NULL;
}

/* Checks one PTX file; returns the number of instructions looked at. */
static size_t check_ptx_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open %s", path);
  char line[4096];
  size_t n = 0, lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '@') { /* predicate guard: skip "@%p1 " */
      while (*p && *p != ' ' && *p != '\t') p++;
      while (*p == ' ' || *p == '\t') p++;
    }
    if (!((*p >= 'a' && *p <= 'z'))) continue; /* directives, labels' '$', comments, braces */
    char op[128];
    size_t k = 0;
    while (p[k] && p[k] != ' ' && p[k] != '\t' && p[k] != ';' && k + 1 < sizeof op) op[k] = p[k], k++;
    op[k] = 0;
    if (op[k - 1] == ':') continue; /* a label */
    n++;
    const char *why = unportable(op);
    if (why) {
      fclose(f);
      fail_msg("%s:%zu: '%s': %s", path, lineno, op, why);
    }
  }
  fclose(f);
  return n;
}

static void test_ptx_is_portable(void **state) {
  (void)state;
  /* The checker itself catches what it must. */
  assert_non_null(unportable("fma.rn.f32"));
  assert_non_null(unportable("ex2.approx.ftz.f32"));
  assert_non_null(unportable("add.f32"));
  assert_non_null(unportable("mul.f64"));
  assert_non_null(unportable("div.full.f32"));
  assert_non_null(unportable("mad.rn.f64"));
  assert_null(unportable("add.rn.f32"));
  assert_null(unportable("mad.lo.s32"));
  assert_null(unportable("div.rn.f64"));
  assert_null(unportable("mul.wide.s32"));

  const char *src = getenv("EMBER_SRC_DIR");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/ptx", src && *src ? src : ".");
  /* The modules built on em_math.h: its maps, and the unary op family
   * (kernels/unary.cu through unary_math.h). */
  static const char *const modules[] = {"math.", "unary."};
  for (size_t m = 0; m < sizeof modules / sizeof modules[0]; m++) {
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s (run from the repository root or set EMBER_SRC_DIR)", dir);
    int files = 0, legacy = 0;
    struct dirent *e;
    size_t lm = strlen(modules[m]);
    while ((e = readdir(d))) {
      size_t len = strlen(e->d_name);
      if (strncmp(e->d_name, modules[m], lm) || len < 4 || strcmp(e->d_name + len - 4, ".ptx")) continue;
      char path[2048];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      size_t n = check_ptx_file(path);
      if (n < 1000) fail_msg("%s: only %zu instructions; is it the %.*s module?", path, n, (int)lm - 1, modules[m]);
      files++;
      legacy += strstr(e->d_name, ".sm_35.") != NULL;
    }
    closedir(d);
    if (files < 2 || !legacy)
      fail_msg("%s: expected %ssm_35.ptx and nvcc's %scompute_*.ptx, found %d files", dir, modules[m], modules[m],
               files);
  }
}

/* em_fmaf / em_fma round once: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 needs 25 bits, so the
 * product alone rounds to 1 + 2^-11 and a * a - (1 + 2^-11) is 0, while the fused
 * operation keeps the 2^-24 (the same for doubles with 2^-27). */
static void test_fma_is_fused(void **state) {
  (void)state;
  const float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
  volatile float p = a * a;
  assert_true(p + c == 0.0f);
  assert_true(em_fmaf(a, a, c) == 0x1p-24f);
  const double ad = 1.0 + 0x1p-27, cd = -(1.0 + 0x1p-26);
  volatile double pd = ad * ad;
  assert_true(pd + cd == 0.0);
  assert_true(em_fma(ad, ad, cd) == 0x1p-54);
  /* Signed zeros and subnormals follow IEEE: -tiny * tiny + 0 rounds to -0; subnormal results are kept. */
  assert_true(signbit(em_fmaf(-1e-30f, 1e-30f, 0.0f)) && em_fmaf(-1e-30f, 1e-30f, 0.0f) == 0.0f);
  assert_true(em_fmaf(0x1p-100f, 0x1p-40f, 0.0f) == 0x1p-140f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_special_values),
      cmocka_unit_test(test_nan_is_canonical),
      cmocka_unit_test(test_pow_special_values),
      cmocka_unit_test(test_subnormals_kept),
      cmocka_unit_test(test_fma_is_fused),
      cmocka_unit_test(test_accuracy),
      cmocka_unit_test(test_pow_accuracy),
      cmocka_unit_test(test_f16_all_codes),
      cmocka_unit_test(test_bf16_all_codes),
      cmocka_unit_test(test_f32_to_16_sweep),
      cmocka_unit_test(test_ties_to_even),
      cmocka_unit_test(test_maps_on_cpu),
      cmocka_unit_test(test_maps_reject_bad_arguments),
      cmocka_unit_test(test_ptx_is_portable),
  };
  /* EMBER_MATH_TEST=test_pow_accuracy (a cmocka pattern) runs only that. */
  const char *only = getenv("EMBER_MATH_TEST");
  if (only && *only) cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
