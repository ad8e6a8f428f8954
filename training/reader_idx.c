/* The IDX reader (reader.h): the format of MNIST and Fashion-MNIST, as
 * LeCun's MNIST page describes it. A file is
 *   0x00 0x00 TYPE NDIM, NDIM big-endian u32 dimensions, then the elements,
 *   big-endian, row-major,
 * TYPE 0x08 unsigned byte, 0x09 signed byte, 0x0B short (2 bytes), 0x0C int
 * (4), 0x0D float (4), 0x0E double (8). Dimension 0 counts the samples. The
 * distributions gzip each file; a gzip file is inflated first (reader_io.c)
 * and offsets in messages are then those of the uncompressed bytes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "file_atomic.h"
#include "reader_internal.h"

#define API __attribute__((visibility("default")))

/* Decompressed IDX files above this are refused (Fashion-MNIST's largest is
 * 47 MB; a gzip bomb is not a data set). */
#define IDX_MAX_BYTES ((size_t)1 << 34)

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct idx_type {
  unsigned char code;
  size_t size;                 /* bytes per element in the file */
  em_dtype dtype;              /* what it is stored as */
  const char *name;
} idx_type;

static const idx_type idx_types[] = {
  {0x08, 1, EM_U8, "unsigned byte"}, {0x09, 1, EM_I32, "signed byte"}, {0x0B, 2, EM_I32, "short"},
  {0x0C, 4, EM_I32, "int"},          {0x0D, 4, EM_F32, "float"},       {0x0E, 8, EM_F64, "double"},
};

/* Element i of the file (big-endian) into the stored dtype at out. */
static void convert(const idx_type *t, const unsigned char *p, void *out) {
  switch (t->code) {
  case 0x08: *(uint8_t *)out = p[0]; break;
  case 0x09: *(int32_t *)out = (int8_t)p[0]; break;
  case 0x0B: *(int32_t *)out = (int16_t)(uint16_t)(p[0] << 8 | p[1]); break;
  case 0x0C: *(int32_t *)out = (int32_t)be32(p); break;
  case 0x0D: {
    uint32_t u = be32(p);
    memcpy(out, &u, 4);
    break;
  }
  default: {
    uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
    memcpy(out, &u, 8);
  }
  }
}

em_status em_idx_parse(const char *name, const unsigned char *b, size_t n, int64_t classes, em_stream_desc *desc,
                       int64_t *samples, void **data) {
  if (n < 4) return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: the file ends inside the 4-byte IDX magic", name, n);
  if (b[0] != 0 || b[1] != 0)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 0: not an IDX file (magic %02x %02x %02x %02x; IDX starts 00 00 TYPE NDIM)",
                   name, b[0], b[1], b[2], b[3]);
  const idx_type *t = NULL;
  for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
    if (idx_types[i].code == b[2]) t = &idx_types[i];
  if (!t)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 2: unknown IDX element type 0x%02x (0x08, 0x09, 0x0B-0x0E are defined)",
                   name, b[2]);
  int ndim = b[3];
  if (ndim < 1 || ndim > EM_MAX_DIMS)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 3: %d dimensions; Ember reads IDX files of 1 to %d", name, ndim,
                   EM_MAX_DIMS);
  size_t header = 4 + 4 * (size_t)ndim;
  if (n < header)
    return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: the file ends inside its header of %zu bytes (%d dimensions)", name,
                   n, header, ndim);
  memset(desc, 0, sizeof *desc);
  *samples = be32(b + 4);
  if (*samples > INT32_MAX)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 4: %lld samples is more than Ember reads", name, (long long)*samples);
  desc->ndim = ndim - 1;
  desc->dtype = t->dtype;
  for (int i = 1; i < ndim; i++) desc->shape[i - 1] = be32(b + 4 + 4 * (size_t)i);
  int64_t elems = em_ds_sample_elems(desc, INT32_MAX);
  if (elems < 0)
    return em_fail(EM_ERR_CORRUPT, "%s: byte 8: a sample of more than 2^31 elements is more than Ember reads", name);
  /* Both factors are below 2^31, so the product fits 64 bits. */
  uint64_t count = (uint64_t)*samples * (uint64_t)elems;
  if (count > (n - header) / t->size)
    return em_fail(EM_ERR_CORRUPT, "%s: byte %zu: the file is truncated: its header announces %llu elements of %zu "
                   "bytes (%llu bytes of data from byte %zu), it holds %zu", name, n, (unsigned long long)count,
                   t->size, (unsigned long long)count * t->size, header, n - header);
  if (n - header != count * t->size)
    return em_fail(EM_ERR_CORRUPT, "%s: byte %llu: %llu bytes after the %llu elements the header announces", name,
                   (unsigned long long)(header + count * t->size), (unsigned long long)(n - header - count * t->size),
                   (unsigned long long)count);
  if (classes > 0) {
    if (ndim != 1 || (t->code != 0x08 && t->dtype != EM_I32))
      return em_fail(EM_ERR_CORRUPT, "%s: byte 2: labels must be one integer per sample (IDX1 of bytes or ints); "
                     "this file holds %s with %d dimensions", name, t->name, ndim);
    desc->dtype = EM_I32;
    desc->classes = classes;
  }
  size_t out_size = em_ds_dtype_size(desc->dtype);
  void *out = malloc(count ? (size_t)count * out_size : 1);
  if (!out) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory for %llu elements", name, (unsigned long long)count);
  const unsigned char *p = b + header;
  if (t->code == 0x08 && classes <= 0) {
    memcpy(out, p, (size_t)count);
  } else if (classes > 0) {
    int32_t *v = out;
    for (uint64_t i = 0; i < count; i++) {
      if (t->code == 0x08) v[i] = p[i];
      else convert(t, p + i * t->size, &v[i]);
      if (v[i] < 0 || v[i] >= classes) {
        em_status st = em_fail(EM_ERR_CORRUPT, "%s: byte %llu: label %d (sample %llu) is out of range for %lld classes",
                               name, (unsigned long long)(header + i * t->size), (int)v[i], (unsigned long long)i,
                               (long long)classes);
        free(out);
        return st;
      }
    }
  } else {
    for (uint64_t i = 0; i < count; i++) convert(t, p + i * t->size, (unsigned char *)out + i * out_size);
  }
  *data = out;
  return EM_OK;
}

/* The last path component, for messages that stay short. */
static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

API em_status em_dataset_add_idx(em_dataset *d, const char *path, const char *name, int64_t classes) {
  if (!d || !path || !name) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_add_idx: NULL data set, path or name");
  if (strlen(name) >= EM_STREAM_NAME_MAX)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_add_idx: stream name '%s' is longer than %d characters", name,
                   EM_STREAM_NAME_MAX - 1);
  unsigned char *raw, *plain;
  size_t raw_size, plain_size;
  int gz;
  em_status st = em_read_file(path, "em_dataset_add_idx", &raw, &raw_size);
  if (st != EM_OK) return st;
  st = em_gunzip(path, raw, raw_size, IDX_MAX_BYTES, &plain, &plain_size, &gz);
  if (st != EM_OK) {
    free(raw);
    return st;
  }
  if (gz) free(raw);
  em_stream_desc desc;
  int64_t samples;
  void *data;
  st = em_idx_parse(path, gz ? plain : raw, gz ? plain_size : raw_size, classes, &desc, &samples, &data);
  free(gz ? plain : raw);
  if (st != EM_OK) return st;
  snprintf(desc.name, sizeof desc.name, "%s", name);
  return em_ds_add_owned(d, &desc, samples, data, base_name(path));
}

API em_status em_dataset_open_idx(const char *images_path, const char *labels_path, int64_t classes,
                                  em_dataset **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_open_idx: out is NULL");
  if (classes <= 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_open_idx: %lld classes; give the label count (10 for MNIST)",
                   (long long)classes);
  em_dataset *d;
  em_status st = em_dataset_create(&d);
  if (st == EM_OK) st = em_dataset_add_idx(d, images_path, "features", 0);
  if (st == EM_OK) st = em_dataset_add_idx(d, labels_path, "labels", classes);
  if (st != EM_OK) {
    em_dataset_free(d);
    return st;
  }
  *out = d;
  return EM_OK;
}

/* DIR/SPLIT-KIND-ubyte, else the same with .gz; tried[] collects the paths for the message. */
static int find_split_file(const char *dir, const char *split, const char *kind, char *path, size_t cap, char *tried,
                           size_t tried_cap) {
  static const char *const suffixes[] = {"", ".gz"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, cap, "%s/%s-%s-ubyte%s", dir, split, kind, suffixes[i]);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) return 1;
    size_t used = strlen(tried);
    snprintf(tried + used, tried_cap - used, "%s%s", used ? ", " : "", path);
  }
  return 0;
}

API em_status em_dataset_open_idx_dir(const char *dir, const char *split, int64_t classes, em_dataset **out) {
  if (!dir || !split || !out)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_open_idx_dir: NULL directory, split or out");
  char images[4096], labels[4096], tried[8192] = "";
  if (!find_split_file(dir, split, "images-idx3", images, sizeof images, tried, sizeof tried) ||
      !find_split_file(dir, split, "labels-idx1", labels, sizeof labels, tried, sizeof tried))
    return em_fail(EM_ERR_NOT_FOUND, "no '%s' IDX files in %s: tried %s (Fashion-MNIST: apt install "
                   "dataset-fashion-mnist, then /usr/share/datasets/fashion-mnist)", split, dir, tried);
  return em_dataset_open_idx(images, labels, classes, out);
}
