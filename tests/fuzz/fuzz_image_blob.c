/* libFuzzer target for runtime/image_blob.c (em_blob_parse, em_image_read,
 * em_blob_image_head). Besides "no crash, no leak, no UB", an accepted table
 * must keep its promises: every payload and string lies inside the bytes,
 * every string ends there, kinds, variants and storages are known, an image
 * stored as it is has its size and hash, and reading an image either gives
 * bytes of its size and hash or fails with EM_ERR_CORRUPT.
 * Seeds in tests/fuzz/corpus/image_blob/, written by the packer from the
 * fixtures (F=tests/fixtures; v2_* by the packer of table version 2, the
 * others by version 1's, which readers still take):
 *   pack_images legacy_ptx_and_source.bin --ptx-legacy k "clang 14.0.6" $F/k_sm35_clang.ptx --source k $F/k_clang.cu
 *   pack_images cubin_ptx_header.bin --cubin k - "nvcc 13.0.88" $F/k_sm75.cubin
 *               --ptx k 13000 "nvcc 13.0.88" $F/k_compute90a.ptx --header em_kernel.h kernels/em_kernel.h
 *   pack_images empty.bin
 *   v2_legacy_ptx_and_source.bin, v2_cubin_ptx_header.bin: the same two, zstd level 3 (the default)
 *   v2_stored.bin: pack_images v2_stored.bin --zstd-level 0 --cubin k - "nvcc 13.0.88" $F/k_sm75.cubin */
// fuzz-sources: runtime/image_blob.c runtime/error.c
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "image_blob.h"

/* Images larger than this are not decompressed here: a frame header may
 * claim up to EM_BLOB_IMAGE_MAX, which would be slow, not wrong. */
#define FUZZ_READ_MAX ((uint64_t)1 << 20)

static int inside(const uint8_t *b, size_t size, const void *p, uint64_t len) {
  const uint8_t *q = p;
  return q >= b && q <= b + size && len <= (uint64_t)(b + size - q);
}

static int string_inside(const uint8_t *b, size_t size, const char *s) {
  return s && inside(b, size, s, 1) && memchr(s, '\0', (size_t)(b + size - (const uint8_t *)s)) != NULL;
}

static void check_read(const em_image_info *img) {
  uint8_t head[64];
  size_t got = 0;
  if (em_blob_image_head(img, head, sizeof head, &got) == EM_OK && got > sizeof head) abort();
  if (img->size > FUZZ_READ_MAX) return;
  void *bytes = NULL;
  em_status s = em_image_read(img, &bytes);
  if (s == EM_OK) {
    if (!bytes || XXH3_64bits(bytes, (size_t)img->size) != img->hash || ((uint8_t *)bytes)[img->size] != 0) abort();
    if (got != (img->size < sizeof head ? img->size : sizeof head) || memcmp(head, bytes, got)) abort();
  } else if (s != EM_ERR_CORRUPT || bytes) {
    abort();
  }
  free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_blob_view v;
  if (em_blob_parse(data, size, "fuzz", &v) != EM_OK) {
    if (v.images || v.count) abort(); /* a failure leaves nothing behind */
    return 0;
  }
  for (size_t i = 0; i < v.count; i++) {
    const em_image_info *img = &v.images[i];
    if (!inside(data, size, img->stored, img->stored_size)) abort();
    if (!string_inside(data, size, img->module) || !string_inside(data, size, img->producer) ||
        !string_inside(data, size, img->kernels))
      abort();
    if (img->kind < EM_IMAGE_CUBIN || img->kind > EM_IMAGE_HEADER) abort();
    if (img->variant != 0 && img->variant != 'a' && img->variant != 'f') abort();
    if (img->storage != EM_IMAGE_STORED && img->storage != EM_IMAGE_ZSTD) abort();
    if (img->size > EM_BLOB_IMAGE_MAX) abort();
    if (img->storage == EM_IMAGE_STORED &&
        (img->stored_size != img->size || XXH3_64bits(img->stored, (size_t)img->size) != img->hash))
      abort();
    check_read(img);
  }
  em_blob_view_free(&v);
  return 0;
}
