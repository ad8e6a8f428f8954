// fuzz-sources: training/reader_emb.c runtime/file_atomic.c training/reader_io.c training/dataset.c runtime/error.c -Itraining -lz
/* libFuzzer target for the EMB reader (training/reader_emb.c). The input's
 * last 8 bytes are replaced by the XXH3-64 of the rest (when it is long
 * enough), so the fuzzer gets past the checksum into the stream table and
 * the sizes. Each input is parsed twice, copying the data and adopting the
 * buffer; an accepted data set is written back (em_emb_serialize) and must
 * have the input's size. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "reader_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *b = malloc(size ? size : 1);
  if (!b) return 0;
  memcpy(b, data, size);
  if (size >= 8) {
    uint64_t h = XXH3_64bits(b, size - 8);
    for (int i = 0; i < 8; i++) b[size - 8 + i] = (unsigned char)(h >> (8 * i));
  }
  /* Once copying the streams, once adopting the buffer (a second copy of it). */
  for (int adopt = 0; adopt < 2; adopt++) {
    unsigned char *own = NULL;
    if (adopt) {
      own = malloc(size ? size : 1);
      if (!own) break;
      memcpy(own, b, size);
    }
    em_dataset *d;
    if (em_emb_parse("fuzz", adopt ? own : b, size, own, &d) == EM_OK) {
      unsigned char *again;
      size_t n;
      if (em_emb_serialize(d, &again, &n) != EM_OK) abort();
      /* The same size (padding bytes, zero in the output, may differ). */
      if (n != size) abort();
      free(again);
      em_dataset_free(d); /* frees own when adopted */
    } else {
      free(own);
    }
  }
  free(b);
  return 0;
}
