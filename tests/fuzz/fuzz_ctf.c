// fuzz-sources: training/reader_ctf.c training/reader_io.c runtime/file_atomic.c training/dataset.c runtime/error.c -Itraining -lz
/* libFuzzer target for the CNTK Text Format reader (training/reader_ctf.c):
 * every input is parsed with a fixed declaration of a dense, a sparse and a
 * class stream (the names the seed corpus uses), and an accepted data set
 * is checked: three streams, every label in range, every value finite.
 * The same text is parsed once more with those names as sequence streams
 * (one truncating), checking the padded streams and the lengths. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "reader_internal.h"

static const em_ctf_stream decl[] = {
  {.name = "features", .dim = 4},
  {.name = "sp", .dim = 6, .sparse = 1},
  {.name = "labels", .dim = 3, .sparse = 1, .is_class = 1},
  {.name = "y", .dim = 2, .is_class = 1},
};

static const em_ctf_stream seq_decl[] = {
  {.name = "features", .dim = 4, .max_steps = 3, .truncate = 1},
  {.name = "sp", .dim = 6, .sparse = 1, .max_steps = 2},
  {.name = "labels", .dim = 3, .sparse = 1, .is_class = 1, .max_steps = 4},
  {.name = "y", .dim = 2, .is_class = 1},
};
static const int64_t seq_steps[3] = {3, 2, 4};

static void check_sequences(const uint8_t *data, size_t size) {
  em_dataset *d;
  if (em_ctf_parse("fuzz", (const char *)data, size, seq_decl, 4, &d) != EM_OK) return;
  int64_t n = em_dataset_samples(d);
  if (em_dataset_n_streams(d) != 7) abort();
  const float *f = em_dataset_stream_data(d, 0), *sp = em_dataset_stream_data(d, 1);
  const int32_t *labels = em_dataset_stream_data(d, 2), *y = em_dataset_stream_data(d, 3);
  for (int k = 0; k < 3; k++) {
    const int64_t *len = em_dataset_stream_data(d, 4 + k);
    for (int64_t i = 0; i < n; i++)
      if (len[i] < (k == 1 ? 0 : 1) || len[i] > seq_steps[k]) abort();
  }
  const int64_t *flen = em_dataset_stream_data(d, 4), *slen = em_dataset_stream_data(d, 5);
  for (int64_t i = 0; i < n; i++) {
    for (int64_t t = 0; t < 3 * 4; t++)
      if (!isfinite(f[i * 12 + t]) || (t >= flen[i] * 4 && f[i * 12 + t] != 0)) abort(); /* zero padding */
    for (int64_t t = 0; t < 2 * 6; t++)
      if (!isfinite(sp[i * 12 + t]) || (t >= slen[i] * 6 && sp[i * 12 + t] != 0)) abort();
    for (int64_t t = 0; t < 4; t++)
      if (labels[i * 4 + t] < 0 || labels[i * 4 + t] >= 3) abort();
    if (y[i] < 0 || y[i] >= 2) abort();
  }
  em_dataset_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_sequences(data, size);
  for (int n_decl = 3; n_decl <= 4; n_decl++) {
    em_dataset *d;
    if (em_ctf_parse("fuzz", (const char *)data, size, decl, n_decl, &d) != EM_OK) continue;
    int64_t n = em_dataset_samples(d);
    if (em_dataset_n_streams(d) != n_decl) abort();
    const float *f = em_dataset_stream_data(d, 0), *sp = em_dataset_stream_data(d, 1);
    for (int64_t i = 0; i < n * 4; i++)
      if (!isfinite(f[i])) abort();
    for (int64_t i = 0; i < n * 6; i++)
      if (!isfinite(sp[i])) abort();
    const int32_t *y = em_dataset_stream_data(d, 2);
    for (int64_t i = 0; i < n; i++)
      if (y[i] < 0 || y[i] >= 3) abort();
    em_dataset_free(d);
  }
  return 0;
}
