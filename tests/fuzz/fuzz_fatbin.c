// fuzz-sources: runtime/fatbin.c runtime/error.c
/* libFuzzer target for runtime/fatbin.c: walks the input and decompresses
 * every entry it reports, under a small output limit so that a header
 * claiming gigabytes costs nothing. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"

#define FUZZ_MAX_OUTPUT (1u << 20)

static int inflate_entry(const em_fatbin_entry *e, void *ctx) {
  const uint8_t *end = ctx;
  /* The walker promises the payload lies inside the input. */
  if (e->payload + e->payload_size > end) abort();
  void *out = NULL;
  size_t n = 0;
  if (em_fatbin_entry_bytes(e, FUZZ_MAX_OUTPUT, &out, &n) == EM_OK) {
    if (!out || n == 0 || n > FUZZ_MAX_OUTPUT) abort();
    volatile uint8_t sink = ((uint8_t *)out)[n - 1]; /* touch the last byte: ASan checks the size */
    (void)sink;
    free(out);
  } else if (out) {
    abort(); /* a failure must not hand back a buffer */
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_fatbin_walk(data, size, inflate_entry, (void *)(data + size));
  return 0;
}
