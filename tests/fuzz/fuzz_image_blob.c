/* libFuzzer target for runtime/image_blob.c (em_blob_parse). Besides "no
 * crash, no leak, no UB", an accepted table must keep its promises: every
 * payload and string lies inside the bytes, every string ends there, kinds
 * and variants are known, and each hash is the XXH3-64 of its payload.
 * Seeds in tests/fuzz/corpus/image_blob/, written by the packer from the
 * fixtures (F=tests/fixtures):
 *   pack_images legacy_ptx_and_source.bin --ptx-legacy k "clang 14.0.6" $F/k_sm35_clang.ptx --source k $F/k_clang.cu
 *   pack_images cubin_ptx_header.bin --cubin k - "nvcc 13.0.88" $F/k_sm75.cubin
 *               --ptx k 13000 "nvcc 13.0.88" $F/k_compute90a.ptx --header em_kernel.h kernels/em_kernel.h
 *   pack_images empty.bin */
// fuzz-sources: runtime/image_blob.c runtime/error.c
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "image_blob.h"

static int inside(const uint8_t *b, size_t size, const void *p, uint64_t len) {
  const uint8_t *q = p;
  return q >= b && q <= b + size && len <= (uint64_t)(b + size - q);
}

static int string_inside(const uint8_t *b, size_t size, const char *s) {
  return s && inside(b, size, s, 1) && memchr(s, '\0', (size_t)(b + size - (const uint8_t *)s)) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_blob_view v;
  if (em_blob_parse(data, size, "fuzz", &v) != EM_OK) {
    if (v.images || v.count) abort(); /* a failure leaves nothing behind */
    return 0;
  }
  for (size_t i = 0; i < v.count; i++) {
    const em_image_info *img = &v.images[i];
    if (!inside(data, size, img->data, img->size)) abort();
    if (!string_inside(data, size, img->module) || !string_inside(data, size, img->producer) ||
        !string_inside(data, size, img->kernels))
      abort();
    if (img->kind < EM_IMAGE_CUBIN || img->kind > EM_IMAGE_HEADER) abort();
    if (img->variant != 0 && img->variant != 'a' && img->variant != 'f') abort();
    if (XXH3_64bits(img->data, (size_t)img->size) != img->hash) abort();
  }
  em_blob_view_free(&v);
  return 0;
}
