// fuzz-sources: training/reader_ctf.c training/reader_io.c runtime/file_atomic.c training/dataset.c runtime/error.c -Itraining -lz
/* libFuzzer target for the CNTK Text Format reader (training/reader_ctf.c):
 * every input is parsed with a fixed declaration of a dense, a sparse and a
 * class stream (the names the seed corpus uses), and an accepted data set
 * is checked: three streams, every label in range, every value finite. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
