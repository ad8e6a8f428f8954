/* Layout of the embedded image table: one blob in the ELF section
 * ".ember_images" of libember, written at build time by build-tools/pack_images.c
 * and read by the runtime (runtime/images.c) and, from the file with libelf,
 * by gpucheck and `ember images`. All integers little-endian; all offsets are
 * from the start of the blob.
 *
 *   em_blob_header
 *   em_blob_entry[count]
 *   string table (NUL-terminated strings)
 *   payloads, each 16-byte aligned
 */
#ifndef EMBER_RUNTIME_IMAGE_BLOB_H
#define EMBER_RUNTIME_IMAGE_BLOB_H

#include <stddef.h>
#include <stdint.h>
#include "ember/dispatch.h"

#define EM_BLOB_MAGIC "EMBIMGS\0"
#define EM_BLOB_VERSION 1u
#define EM_BLOB_SECTION ".ember_images"

typedef struct em_blob_header {
  char magic[8];
  uint32_t version;
  uint32_t count;
  uint32_t header_size;   /* sizeof(em_blob_header) */
  uint32_t entry_size;    /* sizeof(em_blob_entry): readers skip fields they do not know */
  uint64_t total_size;    /* the whole blob */
  uint32_t strtab_offset;
  uint32_t strtab_size;
} em_blob_header;

typedef struct em_blob_entry {
  uint32_t kind;          /* em_image_kind */
  uint32_t arch;
  uint32_t variant;       /* 0, 'a', 'f' */
  uint32_t ptx_isa;
  uint32_t toolkit;
  uint32_t min_driver;
  uint32_t flags;
  uint32_t module_name;   /* string table offsets */
  uint32_t producer;
  uint32_t kernels;
  uint64_t data_offset;
  uint64_t data_size;
  uint64_t hash;          /* XXH3-64 of the payload */
} em_blob_entry;

/* A parsed view of a blob: entries point into the blob's memory. */
typedef struct em_blob_view {
  size_t count;
  em_image_info *images;  /* malloc'd array of count */
} em_blob_view;

/* Checks every header field, offset, string and hash against the blob's size;
 * names the entry and field on failure (EM_ERR_CORRUPT). `origin` names the
 * bytes in messages (a file path, or "the library"). */
em_status em_blob_parse(const void *blob, size_t size, const char *origin, em_blob_view *out);
void em_blob_view_free(em_blob_view *v);



/* Reads the image table out of a library or executable file with libelf,
 * without loading it: the bytes of section EM_BLOB_SECTION, into a malloc'd
 * buffer (caller frees). EM_ERR_NOT_FOUND when the file has no such section. */
em_status em_blob_read_file(const char *path, void **blob, size_t *size);

#endif
