/* Parser of the embedded image table (layout in image_blob.h), and the
 * reader of one image's bytes (em_image_read). Shared by the runtime, which
 * reads its own section, and the tools, which read the section out of a
 * file; so it trusts nothing in the bytes. */
#include "image_blob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"

/* The string at `off` must start and end inside the string table; *why says
 * which rule it broke when it does not. */
static const char *blob_string(const uint8_t *b, const em_blob_header *h, uint32_t off, const char **why) {
  if (off >= h->strtab_size) {
    *why = "lies past the end of the string table";
    return NULL;
  }
  const char *s = (const char *)b + h->strtab_offset + off;
  if (!memchr(s, '\0', h->strtab_size - off)) {
    *why = "has no NUL before the end of the string table";
    return NULL;
  }
  return s;
}

/* Resolves one string field of entry i, naming the field on failure. */
static em_status entry_string(const uint8_t *b, const em_blob_header *h, size_t i, size_t at, const char *origin,
                              const char *field, uint32_t off, const char **out) {
  const char *why = "";
  *out = blob_string(b, h, off, &why);
  if (!*out)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (offset %zu): %s string at offset %u %s (%u bytes)", origin, i,
                   at, field, off, why, h->strtab_size);
  return EM_OK;
}

static em_status check_header(const uint8_t *b, size_t size, const char *origin, em_blob_header *h) {
  if (size < sizeof *h) return em_fail(EM_ERR_CORRUPT, "%s: image table is %zu bytes, shorter than its header", origin, size);
  memcpy(h, b, sizeof *h);
  if (memcmp(h->magic, EM_BLOB_MAGIC, 8) != 0)
    return em_fail(EM_ERR_CORRUPT, "%s: image table magic is wrong at offset 0", origin);
  if (h->version < EM_BLOB_MIN_VERSION || h->version > EM_BLOB_VERSION)
    return em_fail(EM_ERR_UNSUPPORTED, "%s: image table version %u, this Ember reads versions %u to %u", origin,
                   h->version, EM_BLOB_MIN_VERSION, EM_BLOB_VERSION);
  uint32_t entry_min = h->version == 1 ? EM_BLOB_ENTRY_V1_SIZE : (uint32_t)sizeof(em_blob_entry);
  if (h->header_size < sizeof *h || h->entry_size < entry_min)
    return em_fail(EM_ERR_CORRUPT, "%s: image table header/entry sizes %u/%u are too small", origin,
                   h->header_size, h->entry_size);
  if (h->total_size > size)
    return em_fail(EM_ERR_CORRUPT, "%s: image table claims %llu bytes, only %zu present", origin,
                   (unsigned long long)h->total_size, size);
  uint64_t entries_end = (uint64_t)h->header_size + (uint64_t)h->count * h->entry_size;
  if (entries_end > h->total_size || h->strtab_offset < entries_end ||
      (uint64_t)h->strtab_offset + h->strtab_size > h->total_size)
    return em_fail(EM_ERR_CORRUPT, "%s: image table entries or strings run past its end (offset %llu)", origin,
                   (unsigned long long)entries_end);
  return EM_OK;
}

/* Entry i as version 2 sees it: a version 1 entry (64 bytes) held every
 * payload as it is. */
static void read_entry(const uint8_t *b, const em_blob_header *h, size_t i, em_blob_entry *e) {
  memset(e, 0, sizeof *e);
  memcpy(e, b + h->header_size + i * h->entry_size, h->version == 1 ? EM_BLOB_ENTRY_V1_SIZE : sizeof *e);
  if (h->version == 1) {
    e->storage = EM_IMAGE_STORED;
    e->size = e->data_size;
    e->data_hash = e->hash;
  }
}

/* The payload must be what the entry says it is: the image itself, or one
 * zstd frame filling the payload whose header gives the image's size. */
static em_status check_payload(const em_blob_entry *e, const void *data, size_t i, const char *origin,
                               const char *module) {
  if (e->storage == EM_IMAGE_STORED) {
    if (e->size != e->data_size)
      return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s) is stored as it is but its size %llu is not its payload's %llu",
                     origin, i, module, (unsigned long long)e->size, (unsigned long long)e->data_size);
    if (e->hash != e->data_hash)
      return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s) fails its checksum: stored as it is, its hash is not its "
                     "payload's", origin, i, module);
    return EM_OK;
  }
  if (e->storage != EM_IMAGE_ZSTD)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s) has unknown storage %u", origin, i, module, e->storage);
  if (e->size > EM_BLOB_IMAGE_MAX)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s) claims %llu bytes, more than any image (%llu)", origin, i,
                   module, (unsigned long long)e->size, (unsigned long long)EM_BLOB_IMAGE_MAX);
  size_t framed = ZSTD_findFrameCompressedSize(data, (size_t)e->data_size);
  if (ZSTD_isError(framed) || framed != e->data_size)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s): its %llu-byte payload is not one zstd frame (%s)", origin, i,
                   module, (unsigned long long)e->data_size,
                   ZSTD_isError(framed) ? ZSTD_getErrorName(framed) : "the frame ends before the payload");
  unsigned long long content = ZSTD_getFrameContentSize(data, (size_t)e->data_size);
  if (content != e->size)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s): its zstd frame holds %s%llu bytes, the entry says %llu", origin,
                   i, module, content >= ZSTD_CONTENTSIZE_ERROR ? "an unknown number of " : "", 
                   content >= ZSTD_CONTENTSIZE_ERROR ? 0ull : content, (unsigned long long)e->size);
  return EM_OK;
}

static em_status parse_entry(const uint8_t *b, const em_blob_header *h, size_t i, const char *origin,
                             em_image_info *img) {
  em_blob_entry e;
  size_t at = h->header_size + i * h->entry_size;
  read_entry(b, h, i, &e);
  memset(img, 0, sizeof *img);
  em_status st = entry_string(b, h, i, at, origin, "module_name", e.module_name, &img->module);
  if (!st) st = entry_string(b, h, i, at, origin, "producer", e.producer, &img->producer);
  if (!st) st = entry_string(b, h, i, at, origin, "kernels", e.kernels, &img->kernels);
  if (st) return st;
  if (e.kind < EM_IMAGE_CUBIN || e.kind > EM_IMAGE_HEADER)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu has unknown kind %u", origin, i, e.kind);
  if (e.variant != 0 && e.variant != 'a' && e.variant != 'f')
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu has unknown variant %u", origin, i, e.variant);
  if (e.data_offset > h->total_size || e.data_size > h->total_size - e.data_offset)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu payload [%llu, +%llu) lies outside the table", origin, i,
                   (unsigned long long)e.data_offset, (unsigned long long)e.data_size);
  img->stored = b + e.data_offset;
  if (XXH3_64bits(img->stored, (size_t)e.data_size) != e.data_hash)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s) fails its checksum", origin, i, img->module);
  st = check_payload(&e, img->stored, i, origin, img->module);
  if (st) return st;
  img->kind = (em_image_kind)e.kind;
  img->arch = (int)e.arch;
  img->variant = (char)e.variant;
  img->ptx_isa = (int)e.ptx_isa;
  img->toolkit = (int)e.toolkit;
  img->min_driver = (int)e.min_driver;
  img->flags = e.flags;
  img->size = e.size;
  img->hash = e.hash;
  img->storage = (em_image_storage)e.storage;
  img->stored_size = e.data_size;
  return EM_OK;
}

em_status em_blob_parse(const void *blob, size_t size, const char *origin, em_blob_view *out) {
  const uint8_t *b = blob;
  em_blob_header h;
  memset(out, 0, sizeof *out);
  em_status st = check_header(b, size, origin, &h);
  if (st) return st;
  em_image_info *imgs = calloc(h.count ? h.count : 1, sizeof *imgs);
  if (!imgs) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: no memory for %u image entries", origin, h.count);
  for (size_t i = 0; i < h.count; i++) {
    st = parse_entry(b, &h, i, origin, &imgs[i]);
    if (st) {
      free(imgs);
      return st;
    }
  }
  out->count = h.count;
  out->images = imgs;
  return EM_OK;
}

void em_blob_view_free(em_blob_view *v) {
  free(v->images);
  v->images = NULL;
  v->count = 0;
}

/* "elementwise sm_90 cubin", for messages. */
static void image_name(const em_image_info *img, char *buf, size_t cap) {
  static const char *kinds[] = {"image", "cubin", "PTX", "source", "header"};
  const char *kind = img->kind >= EM_IMAGE_CUBIN && img->kind <= EM_IMAGE_HEADER ? kinds[img->kind] : kinds[0];
  const char *module = img->module ? img->module : "?";
  if (img->kind == EM_IMAGE_CUBIN)
    snprintf(buf, cap, "%s sm_%d%s cubin", module, img->arch, img->variant == 'a' ? "a" : img->variant == 'f' ? "f" : "");
  else if (img->kind == EM_IMAGE_PTX)
    snprintf(buf, cap, "%s compute_%d%s PTX", module, img->arch, (img->flags & EM_IMAGE_LEGACY) ? " legacy" : "");
  else
    snprintf(buf, cap, "%s %s", module, kind);
}

em_status em_blob_image_head(const em_image_info *img, void *buf, size_t cap, size_t *got) {
  *got = 0;
  size_t want = img->size < cap ? (size_t)img->size : cap;
  if (img->storage == EM_IMAGE_STORED) {
    if (want > img->stored_size) want = (size_t)img->stored_size;
    if (want) memcpy(buf, img->stored, want);
    *got = want;
    return EM_OK;
  }
  char name[192];
  image_name(img, name, sizeof name);
  if (img->storage != EM_IMAGE_ZSTD) return em_fail(EM_ERR_CORRUPT, "image %s: unknown storage %d", name, (int)img->storage);
  ZSTD_DStream *ds = ZSTD_createDStream();
  if (!ds) return em_fail(EM_ERR_OUT_OF_MEMORY, "image %s: no memory for a zstd stream", name);
  ZSTD_inBuffer in = {img->stored, (size_t)img->stored_size, 0};
  ZSTD_outBuffer out = {buf, want, 0};
  size_t r = 1;
  int stuck = 0;
  /* Each call decodes at most a block: stop once the head is full or the frame ends. */
  while (out.pos < out.size) {
    size_t in_before = in.pos, out_before = out.pos;
    r = ZSTD_decompressStream(ds, &out, &in);
    if (ZSTD_isError(r) || r == 0) break;
    if (in.pos == in_before && out.pos == out_before) {
      stuck = 1; /* all input consumed, nothing more comes out */
      break;
    }
  }
  ZSTD_freeDStream(ds);
  if (ZSTD_isError(r) || stuck)
    return em_fail(EM_ERR_CORRUPT, "image %s: its zstd frame does not decompress: %s", name,
                   stuck ? "it ends early" : ZSTD_getErrorName(r));
  *got = out.pos;
  return EM_OK;
}

__attribute__((visibility("default"))) em_status em_image_read(const em_image_info *img, void **bytes) {
  if (!img || !bytes || (!img->stored && img->stored_size))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_image_read: NULL argument");
  *bytes = NULL;
  char name[192];
  image_name(img, name, sizeof name);
  if (img->size > EM_BLOB_IMAGE_MAX)
    return em_fail(EM_ERR_CORRUPT, "image %s claims %llu bytes, more than any image (%llu)", name,
                   (unsigned long long)img->size, (unsigned long long)EM_BLOB_IMAGE_MAX);
  uint8_t *out = malloc((size_t)img->size + 1);
  if (!out) return em_fail(EM_ERR_OUT_OF_MEMORY, "image %s: no memory for its %llu bytes", name, (unsigned long long)img->size);
  if (img->storage == EM_IMAGE_STORED) {
    if (img->stored_size != img->size) {
      free(out);
      return em_fail(EM_ERR_CORRUPT, "image %s: %llu bytes stored, its size is %llu", name,
                     (unsigned long long)img->stored_size, (unsigned long long)img->size);
    }
    if (img->size) memcpy(out, img->stored, (size_t)img->size);
  } else if (img->storage == EM_IMAGE_ZSTD) {
    size_t got = ZSTD_decompress(out, (size_t)img->size, img->stored, (size_t)img->stored_size);
    if (ZSTD_isError(got) || got != img->size) {
      free(out);
      return em_fail(EM_ERR_CORRUPT, "image %s: its %llu zstd-compressed bytes %s%s (expected %llu bytes)", name,
                     (unsigned long long)img->stored_size, ZSTD_isError(got) ? "do not decompress: " : "decompress short",
                     ZSTD_isError(got) ? ZSTD_getErrorName(got) : "", (unsigned long long)img->size);
    }
  } else {
    free(out);
    return em_fail(EM_ERR_CORRUPT, "image %s: unknown storage %d", name, (int)img->storage);
  }
  if (XXH3_64bits(out, (size_t)img->size) != img->hash) {
    free(out);
    return em_fail(EM_ERR_CORRUPT, "image %s: its %llu bytes%s fail their checksum", name, (unsigned long long)img->size,
                   img->storage == EM_IMAGE_ZSTD ? " (decompressed)" : "");
  }
  out[img->size] = 0;
  *bytes = out;
  return EM_OK;
}
