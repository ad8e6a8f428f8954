/* Data sets in memory (reader.h): a table of named streams over the same
 * samples, each stream one contiguous array. The readers build them; the
 * minibatch source reads them. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "reader_internal.h"

#define API __attribute__((visibility("default")))

size_t em_ds_dtype_size(em_dtype t) {
  switch (t) {
  case EM_U8: return 1;
  case EM_I32: case EM_F32: return 4;
  case EM_F64: case EM_I64: return 8;
  default: return 0;
  }
}

/* The engine's names, kept here so the readers' fuzz targets need no engine. */
static const char *dtype_name(em_dtype t) {
  static const char *names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "an unknown dtype";
}

int64_t em_ds_sample_elems(const em_stream_desc *desc, int64_t limit) {
  int64_t n = 1;
  for (int i = 0; i < desc->ndim; i++) {
    if (desc->shape[i] < 0) return -1;
    if (desc->shape[i] != 0 && n > limit / desc->shape[i]) return -1;
    n *= desc->shape[i];
  }
  return n;
}

static em_status check_desc(const em_dataset *d, const em_stream_desc *desc, int64_t samples, const char *where) {
  if (!memchr(desc->name, 0, sizeof desc->name) || !desc->name[0])
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: a stream needs a name of 1 to %d characters", where,
                   EM_STREAM_NAME_MAX - 1);
  if (d->n_streams >= EM_MINIBATCH_MAX_STREAMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': a data set holds at most %d streams", where,
                   desc->name, EM_MINIBATCH_MAX_STREAMS);
  for (int i = 0; i < d->n_streams; i++)
    if (!strcmp(d->streams[i].desc.name, desc->name))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the data set already has a stream named '%s'", where, desc->name);
  if (!em_ds_dtype_size(desc->dtype))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': dtype %s; a data set holds u8, i32, i64, f32 or f64", where,
                   desc->name, dtype_name(desc->dtype));
  if (desc->ndim < 0 || desc->ndim > EM_MAX_DIMS - 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': %d per-sample dimensions; at most %d", where, desc->name,
                   desc->ndim, EM_MAX_DIMS - 1);
  if (em_ds_sample_elems(desc, INT32_MAX) < 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': a per-sample shape with a negative or huge dimension",
                   where, desc->name);
  /* A class stream holds one class per sample, or one per step of a sequence. */
  if (desc->classes < 0 || (desc->classes > 0 && (desc->dtype != EM_I32 || desc->ndim != (desc->sequence ? 1 : 0))))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': a class stream is i32 with one value per sample "
                   "(a sequence class stream: one per step, [T]) (here %s with %d dimensions, %lld classes)", where,
                   desc->name, dtype_name(desc->dtype), desc->ndim, (long long)desc->classes);
  if (desc->sequence && (desc->sequence != 1 || desc->ndim < 1))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': sequence %d with %d dimensions; a sequence stream "
                   "(sequence 1) has a time axis first (ndim >= 1)", where, desc->name, desc->sequence, desc->ndim);
  if (samples < 0 || (d->samples >= 0 && samples != d->samples))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s' has %lld samples; the data set has %lld", where,
                   desc->name, (long long)samples, (long long)d->samples);
  return EM_OK;
}

static em_status check_classes(const em_stream_desc *desc, int64_t samples, const void *data, const char *where) {
  if (desc->classes <= 0) return EM_OK;
  const int32_t *v = data;
  int64_t per = em_ds_sample_elems(desc, INT32_MAX); /* 1, or T for a sequence class stream */
  for (int64_t i = 0; i < samples * per; i++)
    if (v[i] < 0 || v[i] >= desc->classes)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: stream '%s': sample %lld: label %d is out of range for %lld classes",
                     where, desc->name, (long long)(i / per), (int)v[i], (long long)desc->classes);
  return EM_OK;
}

em_status em_ds_add_owned(em_dataset *d, const em_stream_desc *desc, int64_t samples, void *data, const char *where) {
  return em_ds_add_data(d, desc, samples, data, 0, where);
}

em_status em_ds_add_data(em_dataset *d, const em_stream_desc *desc, int64_t samples, void *data, int in_block,
                         const char *where) {
  em_status st = check_desc(d, desc, samples, where);
  if (st == EM_OK) st = check_classes(desc, samples, data, where);
  if (st != EM_OK) {
    if (!in_block) free(data);
    return st;
  }
  em_ds_stream *s = &d->streams[d->n_streams++];
  s->in_block = in_block;
  s->desc = *desc;
  for (int i = desc->ndim; i < EM_MAX_DIMS; i++) s->desc.shape[i] = 0;
  s->sample_bytes = (size_t)em_ds_sample_elems(desc, INT32_MAX) * em_ds_dtype_size(desc->dtype);
  s->data = data;
  d->samples = samples;
  return EM_OK;
}

API em_status em_dataset_create(em_dataset **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_create: out is NULL");
  em_dataset *d = calloc(1, sizeof *d);
  if (!d) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_dataset_create: out of memory");
  d->samples = -1;
  *out = d;
  return EM_OK;
}

API void em_dataset_free(em_dataset *d) {
  if (!d) return;
  for (int i = 0; i < d->n_streams; i++)
    if (!d->streams[i].in_block) free(d->streams[i].data);
  free(d->block);
  free(d);
}

API em_status em_dataset_add_stream(em_dataset *d, const em_stream_desc *desc, int64_t samples, const void *data,
                                    size_t bytes) {
  if (!d || !desc || (!data && bytes))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_add_stream: NULL data set, description or data");
  em_status st = check_desc(d, desc, samples, "em_dataset_add_stream");
  if (st != EM_OK) return st;
  size_t sample_bytes = (size_t)em_ds_sample_elems(desc, INT32_MAX) * em_ds_dtype_size(desc->dtype);
  if (sample_bytes && (uint64_t)samples > SIZE_MAX / sample_bytes)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_add_stream: stream '%s' is too large", desc->name);
  if (bytes != (size_t)samples * sample_bytes)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_add_stream: stream '%s': %zu bytes for %lld samples of %zu bytes",
                   desc->name, bytes, (long long)samples, sample_bytes);
  void *copy = NULL;
  if (bytes) {
    copy = malloc(bytes);
    if (!copy) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_dataset_add_stream: stream '%s': out of memory for %zu bytes",
                              desc->name, bytes);
    memcpy(copy, data, bytes);
  }
  return em_ds_add_owned(d, desc, samples, copy, "em_dataset_add_stream");
}

API em_status em_dataset_slice(const em_dataset *d, int64_t first, int64_t count, em_dataset **out) {
  if (!d || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_slice: NULL data set or out");
  int64_t n = d->samples < 0 ? 0 : d->samples;
  if (first < 0 || count < 0 || first > n || count > n - first)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_slice: samples [%lld, %lld) of a data set of %lld",
                   (long long)first, (long long)(first + count), (long long)n);
  em_dataset *s;
  em_status st = em_dataset_create(&s);
  if (st != EM_OK) return st;
  for (int i = 0; i < d->n_streams; i++) {
    const em_ds_stream *src = &d->streams[i];
    st = em_dataset_add_stream(s, &src->desc, count, src->data ? src->data + (size_t)first * src->sample_bytes : NULL,
                               (size_t)count * src->sample_bytes);
    if (st != EM_OK) {
      em_dataset_free(s);
      return st;
    }
  }
  *out = s;
  return EM_OK;
}

API int64_t em_dataset_samples(const em_dataset *d) { return d && d->samples > 0 ? d->samples : 0; }
API int em_dataset_n_streams(const em_dataset *d) { return d ? d->n_streams : 0; }

API em_status em_dataset_stream(const em_dataset *d, int i, em_stream_desc *out) {
  if (!d || !out || i < 0 || i >= d->n_streams)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_stream: no stream %d (the data set has %d)", i,
                   d ? d->n_streams : 0);
  *out = d->streams[i].desc;
  return EM_OK;
}

API int em_dataset_find_stream(const em_dataset *d, const char *name) {
  if (!d || !name) return -1;
  for (int i = 0; i < d->n_streams; i++)
    if (!strcmp(d->streams[i].desc.name, name)) return i;
  return -1;
}

API const void *em_dataset_stream_data(const em_dataset *d, int i) {
  return d && i >= 0 && i < d->n_streams ? d->streams[i].data : NULL;
}
