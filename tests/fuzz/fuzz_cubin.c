// fuzz-sources: runtime/cubin.c runtime/error.c
/* libFuzzer target for runtime/cubin.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cubin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_cubin_info info;
  char kernels[64];
  em_status s = em_cubin_read(data, size, &info, kernels, sizeof kernels);
  /* The outputs are always terminated strings, and in range when accepted. */
  if (strnlen(kernels, sizeof kernels) >= sizeof kernels) abort();
  if (strnlen(info.tool_info, sizeof info.tool_info) >= sizeof info.tool_info) abort();
  if (s == EM_OK && (info.sm < 0 || info.sm > 255 || info.n_kernels < 0)) abort();
  return 0;
}
