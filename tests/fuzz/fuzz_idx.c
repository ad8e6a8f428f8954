// fuzz-sources: training/reader_idx.c training/reader_io.c runtime/file_atomic.c training/dataset.c runtime/error.c -Itraining -lz
/* libFuzzer target for the IDX reader (training/reader_idx.c): every input
 * goes through the gzip recogniser (reader_io.c) and, decompressed or as
 * is, through em_idx_parse as a plain stream and as a class stream of 10.
 * An accepted file is walked in full so the sanitizers see any size that
 * does not hold. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "reader_internal.h"

static volatile size_t sink;

static void parse(const unsigned char *b, size_t n, int64_t classes) {
  em_stream_desc desc;
  int64_t samples;
  void *data;
  if (em_idx_parse("fuzz", b, n, classes, &desc, &samples, &data) != EM_OK) return;
  int64_t elems = em_ds_sample_elems(&desc, INT32_MAX);
  size_t bytes = (size_t)samples * (size_t)elems * em_ds_dtype_size(desc.dtype);
  if (elems < 0 || !em_ds_dtype_size(desc.dtype)) abort();
  const unsigned char *p = data;
  size_t acc = 0;
  for (size_t i = 0; i < bytes; i++) acc += p[i];
  if (classes > 0)
    for (int64_t i = 0; i < samples; i++)
      if (((const int32_t *)data)[i] < 0 || ((const int32_t *)data)[i] >= classes) abort();
  sink += acc;
  /* The data set takes it over and checks it again. */
  em_dataset *d;
  if (em_dataset_create(&d) != EM_OK) {
    free(data);
    return;
  }
  snprintf(desc.name, sizeof desc.name, "x");
  if (em_ds_add_owned(d, &desc, samples, data, "fuzz") != EM_OK) abort();
  em_dataset_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *plain;
  size_t plain_size;
  int gz;
  /* 64 MiB: enough for any corpus entry, small enough for ASan. */
  if (em_gunzip("fuzz", data, size, (size_t)1 << 26, &plain, &plain_size, &gz) != EM_OK) return 0;
  const unsigned char *b = gz ? plain : data;
  size_t n = gz ? plain_size : size;
  parse(b, n, 0);
  parse(b, n, 10);
  free(plain);
  return 0;
}
