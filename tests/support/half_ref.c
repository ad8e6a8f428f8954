/* f16 / bf16 references (half_ref.h): the formats' definitions written out, no library code. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "half_ref.h"

double ts_f16_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return sign ? -v : v;
}

double ts_bf16_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 7) & 255, m = h & 127;
  double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
  return sign ? -v : v;
}

double ts_half_value(em_dtype t, uint16_t h) { return t == EM_F16 ? ts_f16_value(h) : ts_bf16_value(h); }

double ts_half_ulp(em_dtype t, double v) {
  int e;
  frexp(fabs(v) > 0 ? fabs(v) : 1e-30, &e);
  /* 11 significant bits for f16 (subnormal spacing 2^-24), 8 for bf16 (f32's range) */
  return t == EM_F16 ? ldexp(1.0, e - 11 > -24 ? e - 11 : -24) : ldexp(1.0, e - 8 > -133 ? e - 8 : -133);
}

double *ts_half_decoded(const em_tensor *x) {
  int64_t n = em_tensor_numel(x);
  double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
  if (!v) fail_msg("ts_half_decoded: no memory for %lld values", (long long)n);
  const uint16_t *p = em_tensor_data(x);
  for (int64_t i = 0; i < n; i++) v[i] = ts_half_value(em_tensor_dtype(x), p[i]);
  return v;
}

void ts_expect_one_rounding(const em_tensor *got, em_dtype t, const double *want, int64_t n, const char *what) {
  if (em_tensor_dtype(got) != t || em_tensor_numel(got) != n)
    fail_msg("%s: got %s with %lld elements, want %s with %lld", what, em_dtype_name(em_tensor_dtype(got)),
             (long long)em_tensor_numel(got), em_dtype_name(t), (long long)n);
  double *v = ts_half_decoded(got);
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(v[i] - want[i]) <= 0.5 * ts_half_ulp(t, want[i]) * 1.001 + 1e-6 * fabs(want[i]) + ldexp(1.0, -22)))
      fail_msg("%s (%s): element %lld is %.9g, want %.9g within one rounding", what, em_dtype_name(t), (long long)i,
               v[i], want[i]);
  free(v);
}
