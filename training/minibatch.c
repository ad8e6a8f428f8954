/* The minibatch source (reader.h): cuts a data set into minibatches of host
 * tensors, shuffled per sweep, with seeded image transforms, prepared by a
 * background thread while the caller trains on the previous one.
 *
 * The position is one number, the samples delivered so far (`seen`): the
 * samples form an endless series of sweeps, sample g of the series being
 * position g % N of sweep g / N, and minibatches take them in order (cut
 * at each epoch's end). Everything random is a function of (seed, sweep,
 * position), never of a generator's running state:
 *   mix(z)     SplitMix64's output function: z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9,
 *              z = (z ^ z >> 27) * 0x94D049BB133111EB, z ^ z >> 31
 *   next(s)    s += 0x9E3779B97F4A7C15, return mix(s)  (SplitMix64)
 *   below(s,m) uniform in [0, m): r = next(s) until r >= 2^64 mod m, then r % m
 *   sweep s's order (shuffle): a generator seeded mix(seed ^ mix(s + 1));
 *              identity, then for i = N-1 down to 1: swap(i, below(i + 1))
 *   the transform draws of the sample at position p of sweep s: a generator
 *              seeded mix(seed ^ mix(s + 1) ^ mix(p ^ 0xD1B54A32D192ED03)):
 *              crop offset y = below(H' - h + 1), then x = below(W' - w + 1)
 *              (random crop only), then flip = next() >> 63 (random flip only)
 * So a checkpoint holds `seen` (and what it depends on), prefetching cannot
 * change a minibatch, and a resumed run draws what an unbroken one would.
 *
 * Prefetch: one worker thread and one slot. em_minibatch_next takes the
 * slot when it holds the minibatch for the current position (waiting for
 * it if it is being built), then asks the worker for the one after. A
 * rewind or a state load waits for a build in progress and discards it. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "reader_internal.h"

#define API __attribute__((visibility("default")))

/* ----------------------------------------------------------- randomness --- */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t next_u64(uint64_t *s) {
  *s += 0x9E3779B97F4A7C15ull;
  return mix(*s);
}

static uint64_t below(uint64_t *s, uint64_t m) {
  uint64_t threshold = (0 - m) % m;
  for (;;) {
    uint64_t r = next_u64(s);
    if (r >= threshold) return r % m;
  }
}

/* ----------------------------------------------------------- the source --- */

typedef struct slot {
  enum { SLOT_EMPTY, SLOT_REQUESTED, SLOT_BUILDING, SLOT_READY } state;
  uint64_t pos;                /* the position it is built from */
  em_minibatch mb;
  em_status st;
  char err[1024];
} slot;

struct em_minibatch_source {
  const em_dataset *d;
  em_minibatch_options o;
  int64_t n;                   /* samples in a sweep */
  uint64_t epoch_size;
  uint64_t data_end;           /* max_sweeps * n, or UINT64_MAX */
  int image;                   /* the image stream's index, or -1 */
  int64_t C, H, W;             /* its per-sample shape (C = 1 for [H, W]) */
  int64_t OH, OW;              /* after pad and crop */
  float scale;
  float mean[EM_TRANSFORM_MAX_CHANNELS], std[EM_TRANSFORM_MAX_CHANNELS];
  float *scratch;              /* the builder's: one image sample as floats (C * H * W) */
  int labels, features;        /* stream indices of the aliases, or -1 */
  uint64_t pos;                /* samples delivered */
  /* The builder's permutation cache (two sweeps: a minibatch spans at most
   * two when the batch is no larger than a sweep, else it is rebuilt). */
  int64_t *perm[2];
  int64_t perm_sweep[2];
  /* Prefetch. */
  int threaded;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  slot s;
};

static const int64_t *perm_of(em_minibatch_source *src, int64_t sweep) {
  for (int i = 0; i < 2; i++)
    if (src->perm_sweep[i] == sweep) return src->perm[i];
  /* Replace the older sweep. */
  int k = src->perm_sweep[0] < src->perm_sweep[1] ? 0 : 1;
  int64_t *p = src->perm[k];
  for (int64_t i = 0; i < src->n; i++) p[i] = i;
  uint64_t g = mix(src->o.seed ^ mix((uint64_t)sweep + 1));
  for (int64_t i = src->n - 1; i >= 1; i--) {
    int64_t j = (int64_t)below(&g, (uint64_t)i + 1);
    int64_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  src->perm_sweep[k] = sweep;
  return p;
}

static float load_as_float(em_dtype t, const unsigned char *base, int64_t i) {
  switch (t) {
  case EM_U8: return (float)base[i];
  case EM_I32: {
    int32_t v;
    memcpy(&v, base + 4 * i, 4);
    return (float)v;
  }
  case EM_F64: {
    double v;
    memcpy(&v, base + 8 * i, 8);
    return (float)v;
  }
  default: {
    float v;
    memcpy(&v, base + 4 * i, 4);
    return v;
  }
  }
}

/* Elements [0, n) of a u8 / i32 / f32 / f64 array as floats. */
static void to_float(em_dtype t, const unsigned char *base, int64_t n, float *out) {
  switch (t) {
  case EM_U8:
    for (int64_t i = 0; i < n; i++) out[i] = (float)base[i];
    break;
  case EM_F32:
    memcpy(out, base, (size_t)n * sizeof(float));
    break;
  default:
    for (int64_t i = 0; i < n; i++) out[i] = load_as_float(t, base, i);
  }
}

/* One sample of the image stream, transformed, into out (C * OH * OW).
 * The sample is first converted, scaled and normalised whole into the
 * builder's scratch plane (tight loops), then each output row is a copy of
 * the part of a source row the crop window sees, between zeros of the
 * padding, reversed for a flip. */
static void image_sample(em_minibatch_source *src, const unsigned char *raw, uint64_t sweep, int64_t p,
                         float *out) {
  const em_image_transform *t = &src->o.transform;
  const int64_t C = src->C, H = src->H, W = src->W, OH = src->OH, OW = src->OW;
  int64_t PH = H + 2 * t->pad, PW = W + 2 * t->pad;
  int64_t cy = (PH - OH) / 2, cx = (PW - OW) / 2;
  int flip = 0;
  if (t->random_crop || t->random_flip) {
    uint64_t g = mix(src->o.seed ^ mix(sweep + 1) ^ mix((uint64_t)p ^ 0xD1B54A32D192ED03ull));
    if (t->random_crop) {
      cy = (int64_t)below(&g, (uint64_t)(PH - OH + 1));
      cx = (int64_t)below(&g, (uint64_t)(PW - OW + 1));
    }
    if (t->random_flip) flip = (int)(next_u64(&g) >> 63);
  }
  float *x = src->scratch;
  to_float(src->d->streams[src->image].desc.dtype, raw, C * H * W, x);
  for (int64_t c = 0; c < C; c++) {
    float *plane = x + c * H * W;
    if (src->scale != 1.0f)
      for (int64_t i = 0; i < H * W; i++) plane[i] *= src->scale;
    if (t->norm_channels) {
      float mean = src->mean[t->norm_channels == 1 ? 0 : c], sd = src->std[t->norm_channels == 1 ? 0 : c];
      for (int64_t i = 0; i < H * W; i++) plane[i] = (plane[i] - mean) / sd;
    }
  }
  /* Output column ox (before a flip) reads source column ox + cx - pad:
   * inside the image for ox in [x0, x1). */
  int64_t x0 = t->pad - cx, x1 = t->pad - cx + W;
  if (x0 < 0) x0 = 0;
  if (x1 > OW) x1 = OW;
  for (int64_t c = 0; c < C; c++)
    for (int64_t oy = 0; oy < OH; oy++) {
      float *row = out + (c * OH + oy) * OW;
      int64_t iy = oy + cy - t->pad;
      if (iy < 0 || iy >= H || x0 >= x1) {
        memset(row, 0, (size_t)OW * sizeof(float));
        continue;
      }
      const float *srow = x + (c * H + iy) * W;
      int64_t off = cx - t->pad; /* output column j (before a flip) is srow[j + off] */
      if (!flip) {
        memset(row, 0, (size_t)x0 * sizeof(float));
        memcpy(row + x0, srow + x0 + off, (size_t)(x1 - x0) * sizeof(float));
        memset(row + x1, 0, (size_t)(OW - x1) * sizeof(float));
      } else {
        for (int64_t ox = 0; ox < OW; ox++) {
          int64_t j = OW - 1 - ox;
          row[ox] = j >= x0 && j < x1 ? srow[j + off] : 0.0f;
        }
      }
    }
}

/* The minibatch that starts at position `pos`. */
static em_status build(em_minibatch_source *src, uint64_t pos, em_minibatch *mb) {
  memset(mb, 0, sizeof *mb);
  const em_dataset *d = src->d;
  uint64_t n = (uint64_t)src->n, E = src->epoch_size;
  mb->n_streams = d->n_streams;
  mb->epoch = (int64_t)(pos / E);
  mb->sweep = (int64_t)(pos / n);
  if (pos >= src->data_end) {
    mb->end_of_data = 1;
    mb->samples_seen = pos;
    mb->n_streams = 0;
    return EM_OK;
  }
  uint64_t limit = pos + (uint64_t)src->o.batch_size, epoch_end = (pos / E + 1) * E;
  if (limit > epoch_end) limit = epoch_end;
  if (limit > src->data_end) limit = src->data_end;
  int64_t B = (int64_t)(limit - pos);
  mb->samples = B;
  mb->samples_seen = limit;
  mb->end_of_epoch = limit == epoch_end;
  mb->end_of_sweep = limit / n > pos / n;
  for (int i = 0; i < d->n_streams; i++) {
    const em_stream_desc *desc = &d->streams[i].desc;
    int64_t shape[EM_MAX_DIMS];
    int ndim = 1;
    shape[0] = B;
    em_dtype dt = EM_F32;
    if (desc->classes > 0 || desc->dtype == EM_I64) {
      /* Classes (one, or one per step) and i64 lengths are delivered as stored. */
      dt = desc->dtype;
      for (int k = 0; k < desc->ndim; k++) shape[ndim++] = desc->shape[k];
    } else if (i == src->image && src->o.layout == EM_LAYOUT_FLAT) {
      shape[ndim++] = src->C * src->OH * src->OW;
    } else if (i == src->image) {
      shape[1] = src->C, shape[2] = src->OH, shape[3] = src->OW;
      ndim = 4;
    } else {
      for (int k = 0; k < desc->ndim; k++) shape[ndim++] = desc->shape[k];
    }
    em_status st = em_tensor_zeros(em_cpu(), dt, ndim, shape, &mb->values[i]);
    if (st != EM_OK) {
      em_minibatch_clear(mb);
      return st;
    }
  }
  int64_t per_image = src->image >= 0 ? src->C * src->OH * src->OW : 0;
  for (int64_t k = 0; k < B; k++) {
    uint64_t g = pos + (uint64_t)k, sweep = g / n;
    int64_t p = (int64_t)(g % n);
    int64_t sample = src->o.shuffle ? perm_of(src, (int64_t)sweep)[p] : p;
    for (int i = 0; i < d->n_streams; i++) {
      const em_ds_stream *s = &d->streams[i];
      const unsigned char *raw = s->data + (size_t)sample * s->sample_bytes;
      unsigned char *dst = em_tensor_data(mb->values[i]);
      if (s->desc.classes > 0 || s->desc.dtype == EM_I64) {
        memcpy(dst + s->sample_bytes * (size_t)k, raw, s->sample_bytes);
      } else if (i == src->image) {
        image_sample(src, raw, sweep, p, (float *)dst + k * per_image);
      } else {
        int64_t elems = (int64_t)(s->sample_bytes / em_ds_dtype_size(s->desc.dtype));
        to_float(s->desc.dtype, raw, elems, (float *)dst + k * elems);
      }
    }
  }
  int fi = src->features, li = src->labels;
  mb->features = fi >= 0 ? mb->values[fi] : NULL;
  mb->labels = li >= 0 ? mb->values[li] : NULL;
  return EM_OK;
}

static void *worker(void *arg) {
  em_minibatch_source *src = arg;
  pthread_mutex_lock(&src->lock);
  for (;;) {
    while (!src->stop && src->s.state != SLOT_REQUESTED) pthread_cond_wait(&src->cond, &src->lock);
    if (src->stop) break;
    src->s.state = SLOT_BUILDING;
    uint64_t pos = src->s.pos;
    pthread_mutex_unlock(&src->lock);
    em_minibatch mb;
    em_status st = build(src, pos, &mb);
    pthread_mutex_lock(&src->lock);
    src->s.mb = mb;
    src->s.st = st;
    if (st != EM_OK) snprintf(src->s.err, sizeof src->s.err, "%s", em_last_error());
    src->s.state = SLOT_READY;
    pthread_cond_broadcast(&src->cond);
  }
  pthread_mutex_unlock(&src->lock);
  return NULL;
}

/* With the lock held: waits for a build in progress, then empties the slot. */
static void discard_slot(em_minibatch_source *src) {
  while (src->s.state == SLOT_BUILDING) pthread_cond_wait(&src->cond, &src->lock);
  if (src->s.state == SLOT_READY) em_minibatch_clear(&src->s.mb);
  src->s.state = SLOT_EMPTY;
}

/* With the lock held: asks the worker for the minibatch at pos. */
static void request(em_minibatch_source *src, uint64_t pos) {
  src->s.state = SLOT_REQUESTED;
  src->s.pos = pos;
  pthread_cond_broadcast(&src->cond);
}

static em_status check_options(const em_dataset *d, const em_minibatch_options *o, em_minibatch_source *src) {
  const char *w = "em_minibatch_source_create";
  if (o->batch_size < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: batch_size %lld; at least 1", w, (long long)o->batch_size);
  if (em_dataset_samples(d) < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the data set has no samples", w);
  if (o->max_sweeps < 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: max_sweeps %lld", w, (long long)o->max_sweeps);
  if (o->layout != EM_LAYOUT_NCHW && o->layout != EM_LAYOUT_FLAT)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: unknown layout %d", w, (int)o->layout);
  const em_image_transform *t = &o->transform;
  src->image = -1;
  if (o->image_stream) {
    src->image = em_dataset_find_stream(d, o->image_stream);
    if (src->image < 0)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: image_stream '%s': the data set has no stream of that name", w,
                     o->image_stream);
  } else {
    int f = em_dataset_find_stream(d, "features");
    /* A sequence stream [T, dim] has two dimensions too, but is no image. */
    if (f >= 0 && d->streams[f].desc.classes == 0 && !d->streams[f].desc.sequence &&
        (d->streams[f].desc.ndim == 2 || d->streams[f].desc.ndim == 3))
      src->image = f;
  }
  int has_transform = t->scale != 0 || t->norm_channels || t->pad || t->crop_h || t->crop_w || t->random_crop ||
                      t->random_flip;
  if (src->image < 0) {
    if (has_transform)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: image transforms given but no image stream (name one [H, W] or "
                     "[C, H, W] stream in image_stream)", w);
    return EM_OK;
  }
  const em_stream_desc *desc = &d->streams[src->image].desc;
  if (desc->classes > 0 || desc->sequence || desc->dtype == EM_I64 || (desc->ndim != 2 && desc->ndim != 3))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: image stream '%s' must be [H, W] or [C, H, W] per sample (it has %d "
                   "dimensions%s)", w, desc->name, desc->ndim, desc->classes > 0 ? ", classes" :
                   desc->sequence ? ", a sequence" : desc->dtype == EM_I64 ? ", i64" : "");
  src->C = desc->ndim == 3 ? desc->shape[0] : 1;
  src->H = desc->shape[desc->ndim - 2];
  src->W = desc->shape[desc->ndim - 1];
  if (t->pad < 0 || t->pad > 4096) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: pad %d", w, t->pad);
  int64_t PH = src->H + 2 * t->pad, PW = src->W + 2 * t->pad;
  if ((t->crop_h == 0) != (t->crop_w == 0) || t->crop_h < 0 || t->crop_w < 0 || t->crop_h > PH || t->crop_w > PW)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: crop %dx%d of a padded image of %lldx%lld (give both, at most the "
                   "padded size)", w, t->crop_h, t->crop_w, (long long)PH, (long long)PW);
  if (t->random_crop && !t->crop_h)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: random_crop needs crop_h and crop_w", w);
  src->OH = t->crop_h ? t->crop_h : PH;
  src->OW = t->crop_w ? t->crop_w : PW;
  if (t->norm_channels < 0 || t->norm_channels > EM_TRANSFORM_MAX_CHANNELS ||
      (t->norm_channels > 1 && t->norm_channels != src->C))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: norm_channels %d for an image of %lld channels (0, 1 or %lld; "
                   "one mean and std per channel for at most %d channels)", w, t->norm_channels, (long long)src->C,
                   (long long)src->C, EM_TRANSFORM_MAX_CHANNELS);
  /* A NaN or inf scale, mean or std would turn every image into NaN (or
   * zeros), which trains on silently: refused here, naming the field. */
  if (!isfinite(t->scale))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: transform scale = %g; it must be finite (0 means 1)", w,
                   (double)t->scale);
  for (int c = 0; c < t->norm_channels; c++) {
    if (!isfinite(t->mean[c]))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: mean[%d] = %g; it must be finite", w, c, (double)t->mean[c]);
    if (!(t->std[c] > 0) || !isfinite(t->std[c]))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: std[%d] = %g; it must be finite and > 0", w, c,
                     (double)t->std[c]);
    src->mean[c] = t->mean[c];
    src->std[c] = t->std[c];
  }
  src->scale = t->scale != 0 ? t->scale : 1.0f;
  return EM_OK;
}

API em_status em_minibatch_source_create(const em_dataset *d, const em_minibatch_options *options,
                                         em_minibatch_source **out) {
  if (!d || !options || !out)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_minibatch_source_create: NULL data set, options or out");
  em_minibatch_source *src = calloc(1, sizeof *src);
  if (!src) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_minibatch_source_create: out of memory");
  em_status st = check_options(d, options, src);
  if (st != EM_OK) {
    free(src);
    return st;
  }
  src->d = d;
  src->o = *options;
  src->o.image_stream = NULL; /* the caller's string is not kept */
  src->n = d->samples;
  src->epoch_size = options->epoch_size ? options->epoch_size : (uint64_t)src->n;
  src->data_end = options->max_sweeps ? (uint64_t)options->max_sweeps * (uint64_t)src->n : UINT64_MAX;
  src->features = em_dataset_find_stream(d, "features");
  src->labels = em_dataset_find_stream(d, "labels");
  src->perm_sweep[0] = src->perm_sweep[1] = -1;
  if (options->shuffle) {
    src->perm[0] = malloc((size_t)src->n * sizeof(int64_t));
    src->perm[1] = malloc((size_t)src->n * sizeof(int64_t));
    if (!src->perm[0] || !src->perm[1]) {
      free(src->perm[0]), free(src->perm[1]), free(src);
      return em_fail(EM_ERR_OUT_OF_MEMORY, "em_minibatch_source_create: out of memory for the shuffle");
    }
  }
  if (src->image >= 0) {
    src->scratch = malloc((size_t)(src->C * src->H * src->W) * sizeof(float) + 1);
    if (!src->scratch) {
      free(src->perm[0]), free(src->perm[1]), free(src);
      return em_fail(EM_ERR_OUT_OF_MEMORY, "em_minibatch_source_create: out of memory for an image");
    }
  }
  pthread_mutex_init(&src->lock, NULL);
  pthread_cond_init(&src->cond, NULL);
  if (!options->no_prefetch) {
    if (pthread_create(&src->thread, NULL, worker, src) != 0) {
      /* No thread: work without prefetching rather than fail. */
      src->threaded = 0;
    } else {
      src->threaded = 1;
      pthread_mutex_lock(&src->lock);
      request(src, 0);
      pthread_mutex_unlock(&src->lock);
    }
  }
  *out = src;
  return EM_OK;
}

API void em_minibatch_source_free(em_minibatch_source *src) {
  if (!src) return;
  if (src->threaded) {
    pthread_mutex_lock(&src->lock);
    src->stop = 1;
    pthread_cond_broadcast(&src->cond);
    pthread_mutex_unlock(&src->lock);
    pthread_join(src->thread, NULL);
    if (src->s.state == SLOT_READY) em_minibatch_clear(&src->s.mb);
  }
  pthread_mutex_destroy(&src->lock);
  pthread_cond_destroy(&src->cond);
  free(src->perm[0]);
  free(src->perm[1]);
  free(src->scratch);
  free(src);
}

API em_status em_minibatch_next(em_minibatch_source *src, em_minibatch *out) {
  if (!src || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_minibatch_next: NULL source or out");
  if (!src->threaded) {
    em_status st = build(src, src->pos, out);
    if (st == EM_OK) src->pos = out->samples_seen;
    return st;
  }
  pthread_mutex_lock(&src->lock);
  if (src->s.state == SLOT_EMPTY || src->s.pos != src->pos) {
    discard_slot(src);
    request(src, src->pos);
  }
  while (src->s.state != SLOT_READY) pthread_cond_wait(&src->cond, &src->lock);
  em_status st = src->s.st;
  char err[sizeof src->s.err];
  if (st == EM_OK) {
    *out = src->s.mb;
    src->pos = out->samples_seen;
    request(src, src->pos);
  } else {
    memcpy(err, src->s.err, sizeof err);
    src->s.state = SLOT_EMPTY;
  }
  pthread_mutex_unlock(&src->lock);
  return st == EM_OK ? EM_OK : em_fail(st, "%s", err);
}

API void em_minibatch_clear(em_minibatch *mb) {
  if (!mb) return;
  for (int i = 0; i < EM_MINIBATCH_MAX_STREAMS; i++) em_tensor_release(mb->values[i]);
  memset(mb, 0, sizeof *mb);
}

API em_status em_minibatch_get_position(const em_minibatch_source *src, em_minibatch_position *out) {
  if (!src || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_minibatch_get_position: NULL source or out");
  out->samples_seen = src->pos;
  out->epoch = (int64_t)(src->pos / src->epoch_size);
  out->sweep = (int64_t)(src->pos / (uint64_t)src->n);
  out->sweep_position = (int64_t)(src->pos % (uint64_t)src->n);
  out->epoch_size = src->epoch_size;
  out->sweep_size = src->n;
  return EM_OK;
}

/* Moves the source to pos, dropping a prefetched minibatch of another. */
static void seek(em_minibatch_source *src, uint64_t pos) {
  if (!src->threaded) {
    src->pos = pos;
    return;
  }
  pthread_mutex_lock(&src->lock);
  if (src->s.pos != pos) {
    discard_slot(src);
    src->pos = pos;
    request(src, pos);
  }
  src->pos = pos;
  pthread_mutex_unlock(&src->lock);
}

API em_status em_minibatch_rewind(em_minibatch_source *src) {
  if (!src) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_minibatch_rewind: NULL source");
  seek(src, 0);
  return EM_OK;
}

/* ---------------------------------------------------------------- state --- */

/* 64 bytes, little-endian: magic "EMBMBPOS", version u32, 0 u32, then u64s:
 * seed, shuffle, epoch size, sample count, max sweeps, samples seen. */
static const unsigned char state_magic[8] = {'E', 'M', 'B', 'M', 'B', 'P', 'O', 'S'};
#define STATE_VERSION 1u
#define STATE_BYTES 64

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++, v >>= 8) p[i] = (unsigned char)v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

API em_status em_minibatch_state_save(const em_minibatch_source *src, void **bytes, size_t *size) {
  if (!src || !bytes || !size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_minibatch_state_save: NULL argument");
  unsigned char *b = calloc(1, STATE_BYTES);
  if (!b) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_minibatch_state_save: out of memory");
  memcpy(b, state_magic, 8);
  put64(b + 8, STATE_VERSION);
  put64(b + 16, src->o.seed);
  put64(b + 24, (uint64_t)(src->o.shuffle != 0));
  put64(b + 32, src->epoch_size);
  put64(b + 40, (uint64_t)src->n);
  put64(b + 48, (uint64_t)src->o.max_sweeps);
  put64(b + 56, src->pos);
  *bytes = b;
  *size = STATE_BYTES;
  return EM_OK;
}

API em_status em_minibatch_state_load(em_minibatch_source *src, const void *bytes, size_t size) {
  if (!src || (!bytes && size)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_minibatch_state_load: NULL argument");
  const unsigned char *b = bytes;
  if (size != STATE_BYTES || memcmp(b, state_magic, 8) != 0)
    return em_fail(EM_ERR_CORRUPT, "minibatch source state: %zu bytes that are not a saved position (%d bytes "
                   "starting \"EMBMBPOS\")", size, STATE_BYTES);
  if (get64(b + 8) != STATE_VERSION)
    return em_fail(EM_ERR_CORRUPT, "minibatch source state: byte 8: version %llu; this Ember reads %u",
                   (unsigned long long)get64(b + 8), STATE_VERSION);
  static const char *const names[] = {"seed", "shuffle", "epoch size", "sample count"};
  uint64_t mine[4] = {src->o.seed, (uint64_t)(src->o.shuffle != 0), src->epoch_size, (uint64_t)src->n};
  for (int i = 0; i < 4; i++)
    if (get64(b + 16 + 8 * i) != mine[i])
      return em_fail(EM_ERR_INVALID_ARGUMENT, "minibatch source state: the saved %s is %llu, this source's is %llu; "
                     "create the source with the options of the saved run", names[i],
                     (unsigned long long)get64(b + 16 + 8 * i), (unsigned long long)mine[i]);
  /* A position past the end of the data (max_sweeps), or past 2^32 sweeps
   * (far beyond any run, and where pos + batch_size and the epoch
   * arithmetic near 2^64 would wrap), is a damaged or edited record. */
  const uint64_t pos = get64(b + 56), n = (uint64_t)src->n;
  const uint64_t sweeps_cap = n < ((uint64_t)1 << 30) ? n << 32 : (uint64_t)1 << 62;
  const uint64_t limit = src->data_end < sweeps_cap ? src->data_end : sweeps_cap;
  if (pos > limit)
    return em_fail(EM_ERR_CORRUPT, "minibatch source state: byte 56: position %llu is past %s (%llu samples: %s of "
                   "%llu samples); the record is damaged", (unsigned long long)pos,
                   limit == src->data_end ? "the end of the data" : "the last position a run can reach",
                   (unsigned long long)limit, limit == src->data_end ? "max_sweeps sweeps" : "2^32 sweeps",
                   (unsigned long long)n);
  seek(src, pos);
  return EM_OK;
}
