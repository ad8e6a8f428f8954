/* EMB, Ember's binary data set format (reader.h; the layout is
 * docs/dataset-format.md): a header, a stream table, each stream's samples
 * as one array (8-byte aligned, little-endian), and the XXH3-64 of all the
 * bytes before it. Opening one is a read and a checksum: no gzip, no text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"
#include "file_atomic.h"
#include "reader_internal.h"

#define API __attribute__((visibility("default")))

static const unsigned char emb_magic[8] = {'E', 'M', 'B', 'D', 'A', 'T', 'A', 0};
#define EMB_VERSION 1u
#define EMB_HEADER 24          /* magic, version, stream count, sample count */
#define EMB_MAX_FILE ((uint64_t)1 << 40)

static int host_is_little(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* Reverses each element's bytes in place (a big-endian host). */
static void swap_elements(unsigned char *p, size_t n, size_t size) {
  if (size <= 1) return;
  for (size_t i = 0; i < n; i++, p += size)
    for (size_t a = 0, z = size - 1; a < z; a++, z--) {
      unsigned char t = p[a];
      p[a] = p[z];
      p[z] = t;
    }
}

static uint64_t get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++, v >>= 8) p[i] = (unsigned char)v;
}

static size_t align8(size_t x) { return (x + 7) & ~(size_t)7; }

/* --------------------------------------------------------------- writer --- */

static size_t table_bytes(const em_dataset *d) {
  size_t n = 0;
  for (int i = 0; i < d->n_streams; i++)
    n += 1 + strlen(d->streams[i].desc.name) + 2 + 8 * (size_t)d->streams[i].desc.ndim + 8;
  return n;
}

em_status em_emb_serialize(const em_dataset *d, unsigned char **out, size_t *size) {
  /* Version 1's stream table has no sequence flag and no i64 code: refused
   * rather than written as something that reads back differently. */
  for (int i = 0; i < d->n_streams; i++)
    if (d->streams[i].desc.sequence || d->streams[i].desc.dtype == EM_I64)
      return em_fail(EM_ERR_UNSUPPORTED, "EMB writer: stream '%s' is a %s; EMB version 1 holds neither (keep the "
                     "CTF file)", d->streams[i].desc.name, d->streams[i].desc.sequence ? "sequence stream" :
                     "stream of i64 (sequence lengths)");
  int64_t samples = d->samples < 0 ? 0 : d->samples;
  size_t total = align8(EMB_HEADER + table_bytes(d));
  for (int i = 0; i < d->n_streams; i++) total += align8((size_t)samples * d->streams[i].sample_bytes);
  total += 8;
  unsigned char *b = calloc(1, total);
  if (!b) return em_fail(EM_ERR_OUT_OF_MEMORY, "EMB writer: out of memory for %zu bytes", total);
  memcpy(b, emb_magic, 8);
  put_le(b + 8, EMB_VERSION, 4);
  put_le(b + 12, (uint64_t)d->n_streams, 4);
  put_le(b + 16, (uint64_t)samples, 8);
  size_t at = EMB_HEADER;
  for (int i = 0; i < d->n_streams; i++) {
    const em_stream_desc *s = &d->streams[i].desc;
    size_t len = strlen(s->name);
    b[at++] = (unsigned char)len;
    memcpy(b + at, s->name, len);
    at += len;
    b[at++] = (unsigned char)s->dtype;
    b[at++] = (unsigned char)s->ndim;
    for (int k = 0; k < s->ndim; k++, at += 8) put_le(b + at, (uint64_t)s->shape[k], 8);
    put_le(b + at, (uint64_t)s->classes, 8);
    at += 8;
  }
  at = align8(at);
  for (int i = 0; i < d->n_streams; i++) {
    size_t bytes = (size_t)samples * d->streams[i].sample_bytes;
    if (bytes) memcpy(b + at, d->streams[i].data, bytes);
    if (!host_is_little())
      swap_elements(b + at, bytes / em_ds_dtype_size(d->streams[i].desc.dtype), em_ds_dtype_size(d->streams[i].desc.dtype));
    at += align8(bytes);
  }
  put_le(b + at, XXH3_64bits(b, at), 8);
  *out = b;
  *size = total;
  return EM_OK;
}

/* Writes all of b to fd (write may write less than asked). */
API em_status em_dataset_write(const em_dataset *d, const char *path) {
  if (!d || !path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_write: NULL data set or path");
  unsigned char *b;
  size_t n;
  em_status st = em_emb_serialize(d, &b, &n);
  if (st != EM_OK) return st;
  /* The library's one atomic write (runtime/file_atomic.h): a crash leaves
   * the previous file whole, and no temporary files pile up. */
  st = em_write_file_atomic(path, &(em_write_part){b, n}, 1);
  free(b);
  return st ? em_fail_context(st, "em_dataset_write") : EM_OK;
}

/* --------------------------------------------------------------- reader --- */

em_status em_emb_parse(const char *name, const unsigned char *b, size_t n, unsigned char *owned, em_dataset **out) {
  if (n < EMB_HEADER + 8)
    return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: the file ends inside the EMB header (%d bytes and an 8-byte checksum)",
                   name, n, EMB_HEADER);
  if (memcmp(b, emb_magic, 8) != 0)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 0: not an EMB data set file (its magic is not \"EMBDATA\\0\")", name);
  uint32_t version = (uint32_t)get_le(b + 8, 4);
  if (version != EMB_VERSION)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 8: EMB version %u; this Ember reads version %u", name, version, EMB_VERSION);
  uint32_t n_streams = (uint32_t)get_le(b + 12, 4);
  if (n_streams > EM_MINIBATCH_MAX_STREAMS)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 12: %u streams; at most %d", name, n_streams, EM_MINIBATCH_MAX_STREAMS);
  uint64_t samples = get_le(b + 16, 8);
  if (samples > INT32_MAX)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 16: %llu samples is more than Ember reads", name,
                   (unsigned long long)samples);
  em_stream_desc descs[EM_MINIBATCH_MAX_STREAMS];
  size_t at = EMB_HEADER, end = n - 8;
  for (uint32_t i = 0; i < n_streams; i++) {
    em_stream_desc *s = &descs[i];
    memset(s, 0, sizeof *s);
    if (at + 1 > end) goto truncated;
    size_t len = b[at];
    if (len == 0 || len >= EM_STREAM_NAME_MAX)
      return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream %u's name has %zu bytes (1 to %d)", name, at, i, len,
                     EM_STREAM_NAME_MAX - 1);
    at++;
    if (at + len + 2 > end) goto truncated;
    memcpy(s->name, b + at, len);
    if (memchr(s->name, 0, len))
      return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream %u's name holds a zero byte", name, at, i);
    at += len;
    s->dtype = (em_dtype)b[at];
    if (!em_ds_dtype_size(s->dtype) || s->dtype == EM_I64) /* the data set's i64 is not in version 1 */
      return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream '%s': dtype code %u (u8 6, i32 4, f32 0, f64 1)", name, at,
                     s->name, b[at]);
    s->ndim = b[at + 1];
    if (s->ndim > EM_MAX_DIMS - 1)
      return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream '%s': %d dimensions (at most %d)", name, at + 1, s->name,
                     s->ndim, EM_MAX_DIMS - 1);
    at += 2;
    if (at + 8 * (size_t)s->ndim + 8 > end) goto truncated;
    for (int k = 0; k < s->ndim; k++, at += 8) {
      uint64_t dim = get_le(b + at, 8);
      if (dim > INT32_MAX)
        return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream '%s': dimension %d is %llu", name, at, s->name, k,
                       (unsigned long long)dim);
      s->shape[k] = (int64_t)dim;
    }
    uint64_t classes = get_le(b + at, 8);
    if (classes > INT32_MAX || (classes && (s->dtype != EM_I32 || s->ndim != 0)))
      return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream '%s': %llu classes for %s with %d dimensions", name, at,
                     s->name, (unsigned long long)classes, s->dtype == EM_I32 ? "i32" : "a non-i32 stream", s->ndim);
    s->classes = (int64_t)classes;
    at += 8;
  }
  at = align8(at);
  size_t data_at[EM_MINIBATCH_MAX_STREAMS], data_bytes[EM_MINIBATCH_MAX_STREAMS];
  for (uint32_t i = 0; i < n_streams; i++) {
    int64_t elems = em_ds_sample_elems(&descs[i], INT32_MAX);
    uint64_t bytes = (uint64_t)elems * em_ds_dtype_size(descs[i].dtype);
    if (elems < 0 || (bytes && samples > EMB_MAX_FILE / bytes))
      return em_fail(EM_ERR_CORRUPT, "%s: stream '%s': %llu samples of its shape are too large", name, descs[i].name,
                     (unsigned long long)samples);
    bytes *= samples;
    if (at > end || bytes > end - at)
      return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: the file is truncated: stream '%s' needs %llu bytes from byte %zu, "
                     "%zu are left before the checksum", name, n, descs[i].name, (unsigned long long)bytes, at,
                     at > end ? 0 : end - at);
    data_at[i] = at;
    data_bytes[i] = (size_t)bytes;
    at += align8((size_t)bytes);
  }
  if (at != end)
    return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: %s", name, at > end ? end : at,
                   at > end ? "the file is truncated inside the last stream's padding"
                            : "bytes after the last stream, before the checksum");
  uint64_t stored = get_le(b + end, 8), actual = XXH3_64bits(b, end);
  if (stored != actual)
    return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: checksum mismatch (stored %016llx, computed %016llx): the file is "
                   "corrupt", name, end, (unsigned long long)stored, (unsigned long long)actual);
  em_dataset *d;
  em_status st = em_dataset_create(&d);
  if (st != EM_OK) return st;
  /* Adopting the buffer saves a copy of the data (a page fault per 4 KiB,
   * as much as the read itself); a big-endian host swaps copies. */
  int adopt = owned == b && host_is_little();
  for (uint32_t i = 0; i < n_streams && st == EM_OK; i++) {
    void *copy = adopt ? (void *)(owned + data_at[i]) : malloc(data_bytes[i] ? data_bytes[i] : 1);
    if (!copy) {
      st = em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory for stream '%s'", name, descs[i].name);
      break;
    }
    if (!adopt) {
      memcpy(copy, b + data_at[i], data_bytes[i]);
      size_t es = em_ds_dtype_size(descs[i].dtype);
      if (!host_is_little()) swap_elements(copy, data_bytes[i] / es, es);
    }
    if (descs[i].classes > 0)
      for (uint64_t k = 0; k < samples; k++) {
        int32_t v = ((const int32_t *)copy)[k];
        if (v < 0 || v >= descs[i].classes) {
          if (!adopt) free(copy);
          st = em_fail(EM_ERR_CORRUPT, "%s: byte %zu: stream '%s': label %d (sample %llu) is out of range for %lld "
                       "classes", name, data_at[i] + 4 * (size_t)k, descs[i].name, (int)v, (unsigned long long)k,
                       (long long)descs[i].classes);
          break;
        }
      }
    if (st != EM_OK) break;
    if (em_ds_add_data(d, &descs[i], (int64_t)samples, copy, adopt, name) != EM_OK) st = EM_ERR_CORRUPT;
  }
  if (st != EM_OK) {
    em_dataset_free(d);
    return st;
  }
  if (d->samples < 0) d->samples = (int64_t)samples;
  if (adopt) d->block = owned;
  *out = d;
  return EM_OK;

truncated:
  return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: the file is truncated inside its stream table", name, n);
}

API em_status em_dataset_open_emb(const char *path, em_dataset **out) {
  if (!path || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_open_emb: NULL path or out");
  unsigned char *b;
  size_t n;
  em_status st = em_read_file(path, "em_dataset_open_emb", &b, &n);
  if (st != EM_OK) return st;
  st = em_emb_parse(path, b, n, b, out);
  if (st != EM_OK || !host_is_little()) free(b);
  return st;
}
