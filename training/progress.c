/* Progress output of a training run (trainer.h, "progress").
 *
 * Two styles. On a terminal, one bar per epoch redrawn in place ("\r" and
 * erase to the end of the line), at most ten times a second so a fast
 * minibatch loop does not spend its time writing; the epoch's last draw
 * stays, followed by the epoch's summary line. Elsewhere (a pipe, a file, a
 * CI log, or asked for), one JSON object a line: a "progress" line every
 * `every` minibatches and an "epoch" line at each epoch's end, which a
 * script reads with any JSON parser; a line is written whole and flushed, so
 * a reader never sees half of one. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ember/trainer.h"
#include "error.h"

#define API __attribute__((visibility("default")))

#define BAR_WIDTH 24
#define REDRAW_SECONDS 0.1

struct em_progress {
  FILE *out;
  em_progress_style style;
  uint64_t every;
  char metric_name[32];
  double last_draw;           /* monotonic seconds of the last bar drawn (< 0: none this epoch) */
  uint64_t drawn_samples;     /* the samples the bar on the current line shows */
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

API em_status em_progress_create(FILE *stream, em_progress_style style, uint64_t every, const char *metric_name,
                                 em_progress **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_progress_create: NULL out");
  *out = NULL;
  if (!stream && style != EM_PROGRESS_NONE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_progress_create: NULL stream");
  if ((unsigned)style > EM_PROGRESS_NONE)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_progress_create: unknown style %d", (int)style);
  em_progress *p = calloc(1, sizeof *p);
  if (!p) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_progress_create: out of memory");
  p->out = stream;
  if (style == EM_PROGRESS_AUTO) style = isatty(fileno(stream)) ? EM_PROGRESS_BAR : EM_PROGRESS_JSON;
  p->style = style;
  p->every = every ? every : 100;
  snprintf(p->metric_name, sizeof p->metric_name, "%s", metric_name && *metric_name ? metric_name : "metric");
  p->last_draw = -1;
  *out = p;
  return EM_OK;
}

API void em_progress_free(em_progress *p) { free(p); }

API em_progress_style em_progress_get_style(const em_progress *p) { return p ? p->style : EM_PROGRESS_NONE; }

/* "1:05:09" or "4:07". */
static void format_duration(double s, char *buf, size_t cap) {
  if (!(s >= 0) || s > 1e7) {
    snprintf(buf, cap, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static double rate(const em_train_report *r) { return r->seconds > 0 ? (double)r->samples / r->seconds : 0; }

static void draw_bar(em_progress *p, const em_train_report *r) {
  char bar[BAR_WIDTH + 1], eta[24] = "", epochs[24] = "";
  double frac = r->epoch_size ? (double)r->samples / (double)r->epoch_size : 0;
  if (frac > 1) frac = 1;
  int full = (int)(frac * BAR_WIDTH);
  for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < full ? '=' : i == full ? '>' : ' ';
  bar[BAR_WIDTH] = 0;
  if (r->epoch_size && r->samples < r->epoch_size && rate(r) > 0) {
    char d[16];
    format_duration((double)(r->epoch_size - r->samples) / rate(r), d, sizeof d);
    snprintf(eta, sizeof eta, "  ETA %s", d);
  }
  if (r->epochs > 0) snprintf(epochs, sizeof epochs, "/%lld", (long long)r->epochs);
  fprintf(p->out, "\repoch %lld%s [%s] %llu", (long long)r->epoch, epochs, bar, (unsigned long long)r->samples);
  if (r->epoch_size) fprintf(p->out, "/%llu", (unsigned long long)r->epoch_size);
  fprintf(p->out, "  %.0f samples/s  loss %.4f", rate(r), r->loss);
  if (r->has_metric) fprintf(p->out, "  %s %.4f", p->metric_name, r->metric);
  fprintf(p->out, "%s\033[K", eta);
  fflush(p->out);
  p->drawn_samples = r->samples;
}

/* A number, or null for NaN (absent) and infinities (JSON has none). */
static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void emit(em_progress *p, json_t *o) {
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8));
  json_decref(o);
  if (!text) return;
  fprintf(p->out, "%s\n", text);
  fflush(p->out);
  free(text);
}

API int em_progress_minibatch(const em_train_report *r, void *progress) {
  em_progress *p = progress;
  if (!p || !r) return 0;
  if (p->style == EM_PROGRESS_BAR) {
    double t = now_seconds();
    if (p->last_draw < 0 || t - p->last_draw >= REDRAW_SECONDS || (r->epoch_size && r->samples >= r->epoch_size)) {
      draw_bar(p, r);
      p->last_draw = t;
    }
  } else if (p->style == EM_PROGRESS_JSON && r->minibatch % p->every == 0) {
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string("progress"));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "minibatch", json_integer((json_int_t)r->minibatch));
    json_object_set_new(o, "samples", json_integer((json_int_t)r->samples));
    json_object_set_new(o, "loss", number(r->loss));
    json_object_set_new(o, "metric", r->has_metric ? number(r->metric) : json_null());
    json_object_set_new(o, "samples_per_s", number(rate(r)));
    json_object_set_new(o, "seconds", number(r->seconds));
    emit(p, o);
  }
  return 0;
}

API int em_progress_epoch(const em_train_report *r, void *progress) {
  em_progress *p = progress;
  if (!p || !r) return 0;
  if (p->style == EM_PROGRESS_BAR) {
    /* The bar as it ended, kept on its line, then the summary below it. */
    if (p->last_draw < 0 || p->drawn_samples != r->samples) draw_bar(p, r);
    fprintf(p->out, "\nepoch %lld: loss %.4f", (long long)r->epoch, r->loss);
    if (r->has_metric) fprintf(p->out, "  %s %.4f", p->metric_name, r->metric);
    fprintf(p->out, "  %llu samples, %.1f s, %.0f samples/s", (unsigned long long)r->samples, r->seconds, rate(r));
    if (isfinite(r->val_loss)) fprintf(p->out, "  validation loss %.4f", r->val_loss);
    if (isfinite(r->val_metric)) fprintf(p->out, "  validation %s %.4f", p->metric_name, r->val_metric);
    if (r->loss_scale > 0) /* NaN (no scaling) or 0 (a report made without it) print nothing */
      fprintf(p->out, "  loss scale %g (%llu steps skipped)", r->loss_scale, (unsigned long long)r->skipped_steps);
    fputc('\n', p->out);
    fflush(p->out);
    p->last_draw = -1;
  } else if (p->style == EM_PROGRESS_JSON) {
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string("epoch"));
    json_object_set_new(o, "epoch", json_integer(r->epoch));
    json_object_set_new(o, "loss", number(r->loss));
    json_object_set_new(o, "metric", r->has_metric ? number(r->metric) : json_null());
    json_object_set_new(o, "samples", json_integer((json_int_t)r->samples));
    json_object_set_new(o, "seconds", number(r->seconds));
    json_object_set_new(o, "samples_per_s", number(rate(r)));
    json_object_set_new(o, "val_loss", number(r->val_loss));
    json_object_set_new(o, "val_metric", number(r->val_metric));
    if (r->loss_scale > 0) { /* present only with dynamic loss scaling */
      json_object_set_new(o, "loss_scale", number(r->loss_scale));
      json_object_set_new(o, "skipped_steps", json_integer((json_int_t)r->skipped_steps));
    }
    emit(p, o);
  }
  return 0;
}
