/* Reader of NVIDIA fatbin containers (magic 0xBA55ED50), format facts in
 * shared/reference/cuda-compat.md section 4. Entries may be zstd- or
 * LZ4-compressed; decompression uses libzstd and liblz4. Outside bytes:
 * bounded, never crashes (tests/fuzz/fuzz_fatbin.c). */
#ifndef EMBER_RUNTIME_FATBIN_H
#define EMBER_RUNTIME_FATBIN_H

#include <stddef.h>
#include <stdint.h>
#include "ember/status.h"

#define EM_FATBIN_MAGIC 0xBA55ED50u
#define EM_FATBIN_KIND_PTX 1
#define EM_FATBIN_KIND_ELF 2
#define EM_FATBIN_KIND_LTOIR 8

#define EM_FATBIN_FLAG_64BIT 0x1ull
#define EM_FATBIN_FLAG_DEBUG 0x2ull
#define EM_FATBIN_FLAG_LINUX 0x10ull
#define EM_FATBIN_FLAG_LZ4 0x2000ull
#define EM_FATBIN_FLAG_ZSTD 0x8000ull
#define EM_FATBIN_FLAG_ARCH_SPECIFIC 0x100000ull   /* 'a' */
#define EM_FATBIN_FLAG_FAMILY_SPECIFIC 0x200000ull /* 'f' */

typedef enum em_fatbin_compression {
  EM_FATBIN_UNCOMPRESSED = 0, EM_FATBIN_LZ4 = 1, EM_FATBIN_ZSTD = 2
} em_fatbin_compression;

typedef struct em_fatbin_entry {
  int container;          /* index of the container (0-based) within the walked bytes */
  int index;              /* index of the entry within its container */
  size_t offset;          /* byte offset of the entry header from the start of the input */
  int kind;               /* EM_FATBIN_KIND_* (other values are reported, not interpreted) */
  int arch;               /* SM / compute number: 75, 90, 120 */
  char variant;           /* 'a', 'f' or 0, from the flags */
  int version_major, version_minor; /* PTX ISA for PTX; 1.7 / 1.8 for ELF */
  uint64_t flags;
  em_fatbin_compression compression;
  const uint8_t *payload; /* points into the input */
  uint64_t payload_size;  /* bytes stored (padded, or the compressed stream) */
  uint64_t compressed_size;   /* 0 when not compressed */
  uint64_t uncompressed_size; /* 0 when not compressed */
} em_fatbin_entry;

/* Called per entry; return nonzero to stop the walk early. */
typedef int (*em_fatbin_visit_fn)(const em_fatbin_entry *e, void *ctx);

/* Walks every container laid back to back in [data, data+size) and every entry
 * in them. Returns EM_ERR_CORRUPT naming the offset when a header or size does
 * not fit; the entries visited before that point were reported. */
em_status em_fatbin_walk(const void *data, size_t size, em_fatbin_visit_fn visit, void *ctx);

/* The entry's payload as plain bytes: decompressed into a new malloc'd buffer
 * (caller frees), or copied when not compressed. Refuses outputs over max_size. */
em_status em_fatbin_entry_bytes(const em_fatbin_entry *e, size_t max_size, void **out,
                                size_t *out_size);

#endif
