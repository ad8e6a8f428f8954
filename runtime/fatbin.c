/* Reader of NVIDIA fatbin containers. Layout facts (header sizes, field
 * offsets, flag bits, compression) come from shared/reference/cuda-compat.md
 * section 4, checked against CUDA 13.0.88 output (tests/fixtures/README.md).
 * Every size read from the input is checked against the bytes that remain
 * before it is used, so no read goes past [data, data+size). */
#include "fatbin.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <lz4.h>
#include <zstd.h>

#include "error.h"

#define CONTAINER_HEADER_SIZE 16u /* magic, version, header size, payload size */
#define ENTRY_HEADER_MIN 64u      /* the base entry header; extensions follow it */
#define CONTAINER_VERSION 1u      /* the only version any toolkit is known to write */

/* Field offsets inside an entry header (cuda-compat.md 4.3). */
enum {
  ENTRY_KIND = 0x00,
  ENTRY_HEADER_SIZE = 0x04,
  ENTRY_PAYLOAD_SIZE = 0x08,
  ENTRY_COMPRESSED_SIZE = 0x10,
  ENTRY_MINOR = 0x18,
  ENTRY_MAJOR = 0x1A,
  ENTRY_ARCH = 0x1C,
  ENTRY_FLAGS = 0x28,
  ENTRY_UNCOMPRESSED_SIZE = 0x38
};

/* The format is little-endian; assemble bytes so host order and alignment do not matter. */
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* Fills the decoded fields of one entry whose header was already checked to lie
 * inside the container. Returns EM_ERR_CORRUPT for contradictory flags or sizes. */
static em_status decode_entry(const uint8_t *base, size_t off, uint32_t header_size, uint64_t payload_size,
                              em_fatbin_entry *e) {
  const uint8_t *h = base + off;
  e->offset = off;
  e->kind = rd16(h + ENTRY_KIND);
  e->version_minor = rd16(h + ENTRY_MINOR);
  e->version_major = rd16(h + ENTRY_MAJOR);
  uint32_t arch = rd32(h + ENTRY_ARCH);
  e->flags = rd64(h + ENTRY_FLAGS);
  e->payload = h + header_size;
  e->payload_size = payload_size;
  if (arch > INT_MAX)
    return em_fail(EM_ERR_CORRUPT, "fatbin entry at offset %zu: arch field 0x%08X is not an SM number; the image is damaged",
                   off, arch);
  e->arch = (int)arch;

  int is_a = (e->flags & EM_FATBIN_FLAG_ARCH_SPECIFIC) != 0;
  int is_f = (e->flags & EM_FATBIN_FLAG_FAMILY_SPECIFIC) != 0;
  if (is_a && is_f)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: flags 0x%llx mark it both arch-specific (a) and "
                   "family-specific (f); the image is damaged, rebuild it",
                   off, (unsigned long long)e->flags);
  e->variant = is_a ? 'a' : is_f ? 'f' : 0;

  int lz4 = (e->flags & EM_FATBIN_FLAG_LZ4) != 0;
  int zstd = (e->flags & EM_FATBIN_FLAG_ZSTD) != 0;
  if (lz4 && zstd)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: flags 0x%llx claim both LZ4 and zstd compression; "
                   "the image is damaged, rebuild it",
                   off, (unsigned long long)e->flags);
  e->compression = lz4 ? EM_FATBIN_LZ4 : zstd ? EM_FATBIN_ZSTD : EM_FATBIN_UNCOMPRESSED;
  if (e->compression == EM_FATBIN_UNCOMPRESSED) {
    /* The size fields are 0 in uncompressed entries; report them as the header promises. */
    e->compressed_size = 0;
    e->uncompressed_size = 0;
    return EM_OK;
  }
  e->compressed_size = rd32(h + ENTRY_COMPRESSED_SIZE);
  e->uncompressed_size = rd64(h + ENTRY_UNCOMPRESSED_SIZE);
  if (e->compressed_size == 0 || e->compressed_size > payload_size)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: compressed size %llu does not fit its payload of %llu "
                   "bytes; the image is truncated or damaged",
                   off, (unsigned long long)e->compressed_size, (unsigned long long)payload_size);
  if (e->uncompressed_size == 0)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: compressed entry has an uncompressed size of 0; "
                   "the image is damaged",
                   off);
  return EM_OK;
}

/* Walks the entries of one container occupying [begin, end). */
static em_status walk_entries(const uint8_t *base, size_t begin, size_t end, int container,
                              em_fatbin_visit_fn visit, void *ctx, int *stopped) {
  size_t off = begin;
  for (int index = 0; off < end; index++) {
    size_t left = end - off;
    if (left < ENTRY_HEADER_MIN)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin container %d: entry %d at offset %zu has only %zu bytes left in its "
                     "container, less than the %u-byte entry header; the image is truncated",
                     container, index, off, left, ENTRY_HEADER_MIN);
    uint32_t header_size = rd32(base + off + ENTRY_HEADER_SIZE);
    if (header_size < ENTRY_HEADER_MIN || header_size > left)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin entry at offset %zu: header size %u is outside [%u, %zu] (the bytes left "
                     "in its container); the image is damaged",
                     off, header_size, ENTRY_HEADER_MIN, left);
    uint64_t payload_size = rd64(base + off + ENTRY_PAYLOAD_SIZE);
    if (payload_size == 0 || payload_size > left - header_size)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin entry at offset %zu: payload size %llu is 0 or runs past the end of its "
                     "container (%zu bytes left after the header); the image is truncated or damaged",
                     off, (unsigned long long)payload_size, left - header_size);

    em_fatbin_entry e;
    memset(&e, 0, sizeof e);
    e.container = container;
    e.index = index;
    em_status s = decode_entry(base, off, header_size, payload_size, &e);
    if (s != EM_OK) return s;
    if (visit && visit(&e, ctx)) {
      *stopped = 1;
      return EM_OK;
    }
    off += header_size + (size_t)payload_size;
  }
  return EM_OK;
}

em_status em_fatbin_walk(const void *data, size_t size, em_fatbin_visit_fn visit, void *ctx) {
  if (!data && size)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_fatbin_walk: data is NULL but size is %zu", size);
  if (size == 0)
    return em_fail(EM_ERR_CORRUPT, "fatbin: input is empty, expected a container starting with magic 0x%08X",
                   EM_FATBIN_MAGIC);
  const uint8_t *base = data;
  size_t off = 0;
  for (int container = 0; off < size; container++) {
    size_t left = size - off;
    if (left < CONTAINER_HEADER_SIZE)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin container %d at offset %zu: only %zu bytes left, less than the %u-byte "
                     "container header; the image is truncated",
                     container, off, left, CONTAINER_HEADER_SIZE);
    uint32_t magic = rd32(base + off);
    if (magic != EM_FATBIN_MAGIC)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin container %d at offset %zu: magic 0x%08X, expected 0x%08X; this is not a "
                     "fatbin or the previous container's size is wrong",
                     container, off, magic, EM_FATBIN_MAGIC);
    uint16_t version = rd16(base + off + 4);
    if (version != CONTAINER_VERSION)
      return em_fail(EM_ERR_UNSUPPORTED,
                     "fatbin container %d at offset %zu: version %u, this reader knows version %u; a "
                     "newer toolkit may have made it, please report it",
                     container, off, version, CONTAINER_VERSION);
    uint16_t header_size = rd16(base + off + 6);
    uint64_t body_size = rd64(base + off + 8);
    if (header_size < CONTAINER_HEADER_SIZE || header_size > left)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin container %d at offset %zu: header size %u is outside [%u, %zu]; the image "
                     "is damaged",
                     container, off, header_size, CONTAINER_HEADER_SIZE, left);
    if (body_size == 0 || body_size > left - header_size)
      return em_fail(EM_ERR_CORRUPT,
                     "fatbin container %d at offset %zu: size %llu is 0 or runs past the end of the input "
                     "(%zu bytes left after the header); the image is truncated or damaged",
                     container, off, (unsigned long long)body_size, left - header_size);
    size_t begin = off + header_size;
    size_t end = begin + (size_t)body_size;
    int stopped = 0;
    em_status s = walk_entries(base, begin, end, container, visit, ctx, &stopped);
    if (s != EM_OK || stopped) return s;
    off = end;
  }
  return EM_OK;
}

static em_status copy_payload(const em_fatbin_entry *e, size_t max_size, void **out, size_t *out_size) {
  if (e->payload_size > max_size)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "fatbin entry at offset %zu: payload of %llu bytes is over the limit of %zu bytes; "
                   "raise the limit if the image is trusted",
                   e->offset, (unsigned long long)e->payload_size, max_size);
  void *buf = malloc((size_t)e->payload_size);
  if (!buf)
    return em_fail(EM_ERR_OUT_OF_MEMORY, "fatbin entry at offset %zu: cannot allocate %llu bytes", e->offset,
                   (unsigned long long)e->payload_size);
  memcpy(buf, e->payload, (size_t)e->payload_size);
  *out = buf;
  *out_size = (size_t)e->payload_size;
  return EM_OK;
}

/* Decompresses into dst of exactly e->uncompressed_size bytes. */
static em_status inflate_zstd(const em_fatbin_entry *e, void *dst, size_t dst_size) {
  size_t src_size = (size_t)e->compressed_size;
  unsigned long long framed = ZSTD_getFrameContentSize(e->payload, src_size);
  if (framed == ZSTD_CONTENTSIZE_ERROR)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: payload is not a zstd frame (expected magic 28 B5 2F FD); "
                   "the image is damaged",
                   e->offset);
  /* A frame may omit its size; the entry header's size is authoritative then. */
  if (framed != ZSTD_CONTENTSIZE_UNKNOWN && framed != (unsigned long long)dst_size)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: zstd frame holds %llu bytes but the entry header says %zu; "
                   "the image is damaged",
                   e->offset, framed, dst_size);
  size_t got = ZSTD_decompress(dst, dst_size, e->payload, src_size);
  if (ZSTD_isError(got))
    return em_fail(EM_ERR_CORRUPT, "fatbin entry at offset %zu: zstd decompression failed: %s", e->offset,
                   ZSTD_getErrorName(got));
  if (got != dst_size)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: zstd gave %zu bytes, the entry header says %zu; the image "
                   "is damaged",
                   e->offset, got, dst_size);
  return EM_OK;
}

/* The LZ4 payload is a raw block with no frame (cuda-compat.md 4.3), so the
 * sizes come only from the entry header. */
static em_status inflate_lz4(const em_fatbin_entry *e, void *dst, size_t dst_size) {
  if (e->compressed_size > INT_MAX || dst_size > INT_MAX)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "fatbin entry at offset %zu: LZ4 block of %llu -> %zu bytes is larger than liblz4 "
                   "accepts (2 GiB)",
                   e->offset, (unsigned long long)e->compressed_size, dst_size);
  int got = LZ4_decompress_safe((const char *)e->payload, dst, (int)e->compressed_size, (int)dst_size);
  if (got < 0)
    return em_fail(EM_ERR_CORRUPT, "fatbin entry at offset %zu: LZ4 block is malformed (liblz4 error %d)",
                   e->offset, got);
  if ((size_t)got != dst_size)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: LZ4 gave %d bytes, the entry header says %zu; the image is "
                   "damaged",
                   e->offset, got, dst_size);
  return EM_OK;
}

em_status em_fatbin_entry_bytes(const em_fatbin_entry *e, size_t max_size, void **out, size_t *out_size) {
  if (!e || !out || !out_size)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_fatbin_entry_bytes: entry, out and out_size must not be NULL");
  *out = NULL;
  *out_size = 0;
  if (!e->payload || e->payload_size == 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_fatbin_entry_bytes: entry has no payload");
  if (e->compression == EM_FATBIN_UNCOMPRESSED) return copy_payload(e, max_size, out, out_size);
  if (e->compression != EM_FATBIN_LZ4 && e->compression != EM_FATBIN_ZSTD)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_fatbin_entry_bytes: unknown compression %d", (int)e->compression);
  if (e->compressed_size == 0 || e->compressed_size > e->payload_size)
    return em_fail(EM_ERR_CORRUPT,
                   "fatbin entry at offset %zu: compressed size %llu does not fit its payload of %llu bytes",
                   e->offset, (unsigned long long)e->compressed_size, (unsigned long long)e->payload_size);
  if (e->uncompressed_size == 0 || e->uncompressed_size > max_size)
    return em_fail(e->uncompressed_size == 0 ? EM_ERR_CORRUPT : EM_ERR_UNSUPPORTED,
                   "fatbin entry at offset %zu: uncompressed size %llu is 0 or over the limit of %zu bytes; "
                   "raise the limit if the image is trusted",
                   e->offset, (unsigned long long)e->uncompressed_size, max_size);

  size_t dst_size = (size_t)e->uncompressed_size;
  void *dst = malloc(dst_size);
  if (!dst)
    return em_fail(EM_ERR_OUT_OF_MEMORY, "fatbin entry at offset %zu: cannot allocate %zu bytes to decompress",
                   e->offset, dst_size);
  em_status s = e->compression == EM_FATBIN_ZSTD ? inflate_zstd(e, dst, dst_size) : inflate_lz4(e, dst, dst_size);
  if (s != EM_OK) {
    free(dst);
    return s;
  }
  *out = dst;
  *out_size = dst_size;
  return EM_OK;
}
