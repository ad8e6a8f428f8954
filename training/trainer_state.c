/* The trainer's host state for a checkpoint (trainer.h,
 * em_trainer_state_save / _load): the accounting, the early-stopping record
 * and the executors' run counters (dropout's masks are seeded by them), so
 * a restored trainer reports, stops and draws exactly as one that never
 * stopped. The model and learner state live in the graph; the learners'
 * and the reader's host state have their own records.
 *
 * The record, little-endian:
 *   "EMTRAINR" u32 version=1 u32 bytes_after_this
 *   i64 epoch  u64 steps  u64 samples  u64 epoch_minibatches  u64 epoch_samples
 *   f64 epoch_loss_sum  f64 epoch_metric_sum  f64 epoch_seconds
 *   u64 train_runs  u64 eval_runs  u8 has_metric
 *   f64 best_metric  i64 best_epoch  i64 epochs_since_best
 * Loading checks the magic, version, length and has_metric (a record of a
 * trainer with a metric does not load into one without) and changes nothing
 * on a refusal. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "trainer_internal.h"

#define API __attribute__((visibility("default")))

#define MAGIC "EMTRAINR"
#define VERSION 1u
#define BODY_BYTES (8 + 8 * 4 + 8 * 3 + 8 * 2 + 1 + 8 * 3)

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
  size_t n = 8 + 4 + 4 + BODY_BYTES;
  unsigned char *b = malloc(n), *p = b;
  if (!b) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_trainer_state_save: out of memory");
  em_exec_stats ts, es;
  em_exec_stats_get(t->train, &ts);
  em_exec_stats_get(t->eval, &es);
  memcpy(p, MAGIC, 8);
  p += 8;
  for (int i = 0; i < 4; i++) *p++ = (unsigned char)(VERSION >> (8 * i));
  for (int i = 0; i < 4; i++) *p++ = (unsigned char)((unsigned)BODY_BYTES >> (8 * i));
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
  if (version != VERSION)
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte 8: version %u; this build reads version %u", version,
                   VERSION);
  if (body != BODY_BYTES || size != 16 + (size_t)body)
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte 12: %zu bytes with a body of %u; version 1 has %d + 16",
                   size, body, BODY_BYTES);
  const unsigned char *p = b + 16;
  int has_metric = p[8 * 10];
  if (has_metric != t->has_metric)
    return em_fail(EM_ERR_CORRUPT, "trainer state: byte %d: the record is of a trainer %s a metric, this one has %s",
                   16 + 80, has_metric ? "with" : "without", t->has_metric ? "one" : "none");
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
  return EM_OK;
}
