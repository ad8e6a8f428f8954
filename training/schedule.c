/* Schedules (include/ember/learner.h em_schedule): CNTK's piecewise
 * training-parameter schedules indexed by samples seen, their units (per
 * minibatch, per sample, momentum as a time constant), and linear warmup
 * and cosine decay on top. Everything in double on the host; the learner
 * rounds the result to f32 once, for the update op's hyperparameter feed. */
#include <math.h>
#include <stdint.h>

#include "error.h"
#include "schedule_internal.h"

em_status em_schedule_check(const em_schedule *s, const char *what) {
  if (!s) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: NULL schedule", what);
  if ((unsigned)s->unit > EM_UNIT_TIME_CONSTANT)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: unknown unit %d", what, (int)s->unit);
  if (s->n < 0 || (s->n > 0 && !s->values))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %d pieces without values", what, s->n);
  if (s->n == 0 && !(s->value >= 0 && isfinite(s->value)))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: value %g must be finite and >= 0", what, s->value);
  for (int i = 0; i < s->n; i++) {
    if (!(s->values[i] >= 0 && isfinite(s->values[i])))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: values[%d] = %g must be finite and >= 0", what, i, s->values[i]);
    if (s->counts && s->counts[i] == 0)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: counts[%d] is 0 (each piece lasts at least one epoch_size)", what,
                     i);
  }
  if (!(s->cosine_floor >= 0 && s->cosine_floor <= 1))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: cosine_floor %g must be in [0, 1]", what, s->cosine_floor);
  return EM_OK;
}

/* The piecewise value after `seen` samples. */
static double piecewise(const em_schedule *s, uint64_t seen) {
  if (s->n == 0) return s->value;
  uint64_t unit = s->epoch_size ? s->epoch_size : 1, end = 0;
  for (int i = 0; i < s->n; i++) {
    uint64_t c = s->counts ? s->counts[i] : 1;
    uint64_t len = c > UINT64_MAX / unit ? UINT64_MAX : c * unit;
    end = end > UINT64_MAX - len ? UINT64_MAX : end + len;
    if (seen < end) return s->values[i];
  }
  return s->values[s->n - 1];
}

double em_schedule_eval(const em_schedule *s, uint64_t seen, uint64_t mb) {
  double v = piecewise(s, seen);
  if (s->warmup_samples > 0) {
    double f = ((double)seen + (double)mb) / (double)s->warmup_samples;
    if (f < 1) v *= f;
  }
  if (s->cosine_samples > 0) {
    double t = seen > s->warmup_samples ? (double)(seen - s->warmup_samples) : 0.0;
    double c = (double)s->cosine_samples;
    if (t > c) t = c;
    v *= s->cosine_floor + (1 - s->cosine_floor) * (1 + cos(3.14159265358979323846 * t / c)) / 2;
  }
  return v;
}

double em_schedule_rate(const em_schedule *s, uint64_t seen, uint64_t mb) {
  double v = em_schedule_eval(s, seen, mb);
  return s->unit == EM_UNIT_PER_SAMPLE ? v * (double)mb : v;
}

double em_schedule_momentum(const em_schedule *s, uint64_t seen, uint64_t mb) {
  double v = em_schedule_eval(s, seen, mb);
  switch (s->unit) {
  case EM_UNIT_PER_SAMPLE: return pow(v, (double)mb);
  case EM_UNIT_TIME_CONSTANT: return v == 0 ? 0.0 : exp(-(double)mb / v);
  default: return v;
  }
}

__attribute__((visibility("default"))) em_status em_schedule_value(const em_schedule *s, int momentum, uint64_t samples_seen,
                                   uint64_t minibatch_samples, double *out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_schedule_value: NULL out");
  em_status st = em_schedule_check(s, "em_schedule_value");
  if (st) return st;
  if (minibatch_samples == 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_schedule_value: a minibatch of 0 samples");
  if (!momentum && s->unit == EM_UNIT_TIME_CONSTANT)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_schedule_value: a time constant schedules a momentum, not a rate");
  *out = momentum ? em_schedule_momentum(s, samples_seen, minibatch_samples)
                  : em_schedule_rate(s, samples_seen, minibatch_samples);
  return EM_OK;
}
