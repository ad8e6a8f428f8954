/* Layout of the embedded image table: one blob in the ELF section
 * ".ember_images" of libember, written at build time by build-tools/pack_images.c
 * and read by the runtime (runtime/runtime.c, load.c) and, from the file with
 * libelf, by gpucheck and `ember images`. All integers little-endian; all
 * offsets are from the start of the blob.
 *
 *   em_blob_header
 *   em_blob_entry[count]
 *   string table (NUL-terminated strings)
 *   payloads, each 16-byte aligned
 *
 * Version 2 stores each image as its own zstd frame (EM_IMAGE_ZSTD), so one
 * image is read without touching the others: the full build's table went
 * from 160 MB to 24.5 MB, and with it libember and every test program linked
 * against libember.a. An entry records the image's size and hash (XXH3-64 of
 * the uncompressed bytes, what the JIT cache keys on) and the payload's hash,
 * so the parser checks the stored bytes at startup and em_image_read checks
 * what it decompressed. Version 1 (every payload stored as it is, 64-byte
 * entries) is still read, so tools can look at an older library. */
#ifndef EMBER_RUNTIME_IMAGE_BLOB_H
#define EMBER_RUNTIME_IMAGE_BLOB_H

#include <stddef.h>
#include <stdint.h>
#include "ember/dispatch.h"

#define EM_BLOB_MAGIC "EMBIMGS\0"
#define EM_BLOB_VERSION 2u          /* what pack_images writes */
#define EM_BLOB_MIN_VERSION 1u      /* the oldest version readers take */
#define EM_BLOB_SECTION ".ember_images"
#define EM_BLOB_ENTRY_V1_SIZE 64u   /* em_blob_entry up to `hash` */
/* No kernel image comes near this (the largest cubin is ~3 MB); a table that
 * claims more is corrupt, and nothing allocates what a bad entry claims. */
#define EM_BLOB_IMAGE_MAX ((uint64_t)1 << 30)

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
  uint64_t data_offset;   /* the payload: the bytes the table holds */
  uint64_t data_size;
  uint64_t hash;          /* XXH3-64 of the image (the uncompressed bytes) */
  /* version 2 */
  uint32_t storage;       /* em_image_storage of the payload */
  uint32_t reserved;      /* 0 */
  uint64_t size;          /* bytes of the image once decompressed */
  uint64_t data_hash;     /* XXH3-64 of the payload */
} em_blob_entry;

/* A parsed view of a blob: entries point into the blob's memory. */
typedef struct em_blob_view {
  size_t count;
  em_image_info *images;  /* malloc'd array of count */
} em_blob_view;

/* Checks every header field, offset, string and payload hash against the
 * blob's size, and that a zstd payload is exactly one frame of the image's
 * size (its header says so: nothing is decompressed); names the entry and
 * field on failure (EM_ERR_CORRUPT). `origin` names the bytes in messages (a
 * file path, or "the library"). */
em_status em_blob_parse(const void *blob, size_t size, const char *origin, em_blob_view *out);
void em_blob_view_free(em_blob_view *v);

/* The first bytes of an image (up to cap; fewer when the image is shorter),
 * decompressing only as far as they need: a tool that wants a cubin's ELF
 * header reads it without inflating the cubin. Nothing is checked against the
 * hash (the image is not whole); EM_ERR_CORRUPT when the frame is bad. */
em_status em_blob_image_head(const em_image_info *img, void *buf, size_t cap, size_t *got);



/* Reads the image table out of a library or executable file with libelf,
 * without loading it: the bytes of section EM_BLOB_SECTION, into a malloc'd
 * buffer (caller frees). EM_ERR_NOT_FOUND when the file has no such section. */
em_status em_blob_read_file(const char *path, void **blob, size_t *size);

#endif
