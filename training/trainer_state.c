/* The trainer's host state for a checkpoint (trainer.h,
 * em_trainer_state_save / _load): the accounting, the early-stopping record
 * and the executors' run counters (dropout's masks are seeded by them), so
 * a restored trainer reports, stops and draws exactly as one that never
 * stopped. The model and learner state live in the graph; the learners'
 * and the reader's host state have their own records.
 *
 * The record, little-endian:
 *   "EMTRAINR" u32 version (1 or 2) u32 bytes_after_this
 *   i64 epoch  u64 steps  u64 samples  u64 epoch_minibatches  u64 epoch_samples
 *   f64 epoch_loss_sum  f64 epoch_metric_sum  f64 epoch_seconds
 *   u64 train_runs  u64 eval_runs  u8 has_metric
 *   f64 best_metric  i64 best_epoch  i64 epochs_since_best
 * version 2 only, a trainer with dynamic loss scaling (trainer.h):
 *   f64 loss_scale  u64 clean_steps  u64 skipped_steps
 * (S, the clean steps since the last skip or growth, the skipped steps).
 * A trainer without loss scaling writes version 1, byte for byte the
 * record of before, so older builds read its checkpoints.
 * Loading checks the magic, version, length and has_metric (a record of a
 * trainer with a metric does not load into one without) and changes nothing
 * on a refusal. Loss scaling across the two kinds:
 *  - a version 1 record (no loss scaling, or written before it existed)
 *    into a trainer with loss scaling loads, and the scaling starts fresh
 *    (S = init_scale): turning scaling on at a resume is allowed;
 *  - a version 2 record into a trainer without loss scaling is refused:
 *    dropping S would change the run's numerics silently (resume with the
 *    same loss_scaling, or from a checkpoint written without it).
 * The scaling's settings (growth factor, interval, ...) are the restoring
 * trainer's, not the record's. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "trainer_internal.h"

#define API __attribute__((visibility("default")))

#define MAGIC "EMTRAINR"
#define VERSION 1u
#define VERSION_SCALING 2u
#define BODY_BYTES (8 + 8 * 4 + 8 * 3 + 8 * 2 + 1 + 8 * 3)
#define SCALING_BYTES (8 * 3)

static unsigned char *put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
  return p + 8;
}
static unsigned char *put_f64(unsigned char *p, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  return put_u64(p, v);
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static double get_f64(const unsigned char *p) {
  uint64_t v = get_u64(p);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

API em_status em_trainer_state_save(const em_trainer *t, void **bytes, size_t *size) {
  if (!t || !bytes || !size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_state_save: NULL argument");
  const unsigned version = t->scaling ? VERSION_SCALING : VERSION;
  const unsigned body = BODY_BYTES + (t->scaling ? SCALING_BYTES : 0);
  size_t n = 8 + 4 + 4 + body;
  unsigned char *b = malloc(n), *p = b;
  if (!b) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_state_save: out of memory");
  em_exec_stats ts, es;
  em_exec_stats_get(t->train, &ts);
  em_exec_stats_get(t->eval, &es);
  memcpy(p, MAGIC, 8);
  p += 8;
  for (int i = 0; i < 4; i++) *p++ = (unsigned char)(version >> (8 * i));
  for (int i = 0; i < 4; i++) *p++ = (unsigned char)(body >> (8 * i));
  p = put_u64(p, (uint64_t)t->epoch);
  p = put_u64(p, t->steps);
  p = put_u64(p, t->samples);
  p = put_u64(p, t->epoch_minibatches);
  p = put_u64(p, t->epoch_samples);
  p = put_f64(p, t->epoch_loss_sum);
  p = put_f64(p, t->epoch_metric_sum);
  p = put_f64(p, em_trainer_now() - t->epoch_start);
  p = put_u64(p, ts.runs);
  p = put_u64(p, es.runs);
  *p++ = (unsigned char)t->has_metric;
  p = put_f64(p, t->best_metric);
  p = put_u64(p, (uint64_t)t->best_epoch);
  p = put_u64(p, (uint64_t)t->epochs_since_best);
  if (t->scaling) {
    p = put_f64(p, t->scale);
    p = put_u64(p, t->scale_clean);
    p = put_u64(p, t->skipped_steps);
  }
  *bytes = b;
  *size = (size_t)(p - b);
  return EM_OK;
}

API em_status em_trainer_state_load(em_trainer *t, const void *bytes, size_t size) {
  if (!t || (!bytes && size)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_trainer_state_load: NULL argument");
  const unsigned char *b = bytes;
  if (size < 16 || memcmp(b, MAGIC, 8))
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte 0: not a trainer record (magic \"" MAGIC "\" expected)");
  uint32_t version = (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
  uint32_t body = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 | (uint32_t)b[15] << 24;
  if (version != VERSION && version != VERSION_SCALING)
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte 8: version %u; this build reads versions %u and %u", version,
                   VERSION, VERSION_SCALING);
  const unsigned want = BODY_BYTES + (version == VERSION_SCALING ? SCALING_BYTES : 0);
  if (body != want || size != 16 + (size_t)body)
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte 12: %zu bytes with a body of %u; version %u has %u + 16",
                   size, body, version, want);
  const unsigned char *p = b + 16;
  int has_metric = p[8 * 10];
  if (has_metric != t->has_metric)
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte %d: the record is of a trainer %s a metric, this one has %s",
                   16 + 80, has_metric ? "with" : "without", t->has_metric ? "one" : "none");
  if (version == VERSION_SCALING && !t->scaling)
    return em_fail(EM_ERR_CORRUPT,
                   "trainer state: byte 8: the record is of a trainer with dynamic loss scaling (version 2, S = %g), "
                   "this one has none: restore it into a trainer with the same loss_scaling (dropping S would change "
                   "the run's numerics)",
                   get_f64(p + BODY_BYTES));
  if (version == VERSION_SCALING) {
    const double scale = get_f64(p + BODY_BYTES);
    /* as em_trainer_create's options: S and 1 / S are fed as f32 */
    if (!(scale >= FLT_MIN && scale <= FLT_MAX))
      return em_fail(EM_ERR_CORRUPT, "trainer state: byte %d: loss scale %g (it is in [%g, %g])", 16 + BODY_BYTES,
                     scale, (double)FLT_MIN, (double)FLT_MAX);
  }
  em_status s = em_exec_set_runs(t->train, get_u64(p + 64));
  if (!s) s = em_exec_set_runs(t->eval, get_u64(p + 72));
  if (s) return s;
  t->epoch = (int64_t)get_u64(p);
  t->steps = get_u64(p + 8);
  t->samples = get_u64(p + 16);
  t->epoch_minibatches = get_u64(p + 24);
  t->epoch_samples = get_u64(p + 32);
  t->epoch_loss_sum = get_f64(p + 40);
  t->epoch_metric_sum = get_f64(p + 48);
  t->epoch_start = em_trainer_now() - get_f64(p + 56);
  t->best_metric = get_f64(p + 81);
  t->best_epoch = (int64_t)get_u64(p + 89);
  t->epochs_since_best = (int64_t)get_u64(p + 97);
  if (version == VERSION_SCALING) {
    t->scale = get_f64(p + BODY_BYTES);
    t->scale_clean = get_u64(p + BODY_BYTES + 8);
    t->skipped_steps = get_u64(p + BODY_BYTES + 16);
  } else if (t->scaling) {
    em_trainer_scaling_reset(t); /* a record without loss scaling: it starts fresh */
  }
  return EM_OK;
}
