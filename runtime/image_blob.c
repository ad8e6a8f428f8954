/* Parser of the embedded image table (layout in image_blob.h). Shared by the
 * runtime, which reads its own section, and the tools, which read the section
 * out of a file; so it trusts nothing in the bytes. */
#include "image_blob.h"

#include <stdlib.h>
#include <string.h>

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
  if (h->version != EM_BLOB_VERSION)
    return em_fail(EM_ERR_UNSUPPORTED, "%s: image table version %u, this Ember reads version %u", origin,
                   h->version, EM_BLOB_VERSION);
  if (h->header_size < sizeof *h || h->entry_size < sizeof(em_blob_entry))
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

static em_status parse_entry(const uint8_t *b, const em_blob_header *h, size_t i, const char *origin,
                             em_image_info *img) {
  em_blob_entry e;
  size_t at = h->header_size + i * h->entry_size;
  memcpy(&e, b + at, sizeof e);
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
  img->data = b + e.data_offset;
  if (XXH3_64bits(img->data, (size_t)e.data_size) != e.hash)
    return em_fail(EM_ERR_CORRUPT, "%s: image %zu (%s) fails its checksum", origin, i, img->module);
  img->kind = (em_image_kind)e.kind;
  img->arch = (int)e.arch;
  img->variant = (char)e.variant;
  img->ptx_isa = (int)e.ptx_isa;
  img->toolkit = (int)e.toolkit;
  img->min_driver = (int)e.min_driver;
  img->flags = e.flags;
  img->size = e.data_size;
  img->hash = e.hash;
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
