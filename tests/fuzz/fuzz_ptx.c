// fuzz-sources: runtime/ptx_header.c runtime/error.c
/* libFuzzer target for runtime/ptx_header.c. libFuzzer's buffer is exactly
 * `size` bytes with no NUL after it, so any read past the end is caught. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_ptx_info info;
  char kernels[32];
  em_status s = em_ptx_read_header((const char *)data, size, &info, kernels, sizeof kernels);
  if (strnlen(kernels, sizeof kernels) >= sizeof kernels) abort();
  if (s == EM_OK && (info.isa < 10 || info.isa > 999 || info.target_sm <= 0 || info.n_entries < 0)) abort();
  if (s == EM_OK && info.address_size != 0 && info.address_size != 32 && info.address_size != 64) abort();
  return 0;
}
