/* Checkpoint files (include/ember/checkpoint.h; the format byte by byte and
 * the compatibility promise are in docs/checkpoint-format.md).
 *
 * Layout (version 1, little-endian):
 *   header   32 bytes  "EMBRCKPT", u32 version, u32 section count n,
 *                      u64 file size, u64 XXH3-64 of the 24 bytes before it
 *   table    80 n      per section: name (56 bytes, NUL-padded), u64 offset,
 *                      u64 size, u64 XXH3-64 of its bytes
 *            8         XXH3-64 of the table
 *   sections           in table order, each at a multiple of 8, zero padding
 *                      between and after; "manifest" (JSON) first, then
 *                      "graph" (em_graph_to_bytes) when there is one, then
 *                      the caller's
 *   trailer  8         XXH3-64 of every byte before it
 *
 * The loader checks in an order that names the damage: magic (a foreign
 * file), the header's own checksum (so a damaged version field is never
 * mistaken for a newer format), the version, the size (truncation), the
 * table's checksum and entries, each section's checksum (which section is
 * damaged), the whole file's, then parses the manifest and the graph. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ember.h"
#include "error.h"
#include "checkpoint_internal.h"
#include "file_atomic.h"

#define API __attribute__((visibility("default")))

static const char MAGIC[8] = {'E', 'M', 'B', 'R', 'C', 'K', 'P', 'T'};
static const char GRAPH_MAGIC[8] = {'E', 'M', 'B', 'R', 'G', 'R', 'P', 'H'};
#define HEADER_SIZE 32u
#define ENTRY_SIZE 80u
#define NAME_FIELD 56u
#define MAX_SECTIONS 65536u

typedef struct section {
  char name[NAME_FIELD];
  uint64_t offset, size, checksum;
} section;

struct em_checkpoint {
  char *path;
  unsigned char *data;
  size_t size;
  section *sections;
  size_t n;
  em_checkpoint_manifest manifest;
  char *ember_version, *device_name;
  em_graph *graph;
};

/* ------------------------------------------------------------- helpers --- */

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static uint64_t pad8(uint64_t n) { return (8 - (n & 7)) & 7; }

static int name_ok(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > EM_CHECKPOINT_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return 0;
  }
  return 1;
}

static const char *mode_name(em_mode m) { return m == EM_MODE_PORTABLE ? "portable" : "fast"; }

/* -------------------------------------------------------------- saving --- */

/* The manifest's JSON text (malloc'd). */
static char *manifest_json(const em_checkpoint_save_options *o) {
  char device_name[256] = "cpu";
  if (o->device.kind == EM_DEVICE_CUDA) {
    em_device_info info;
    if (em_device_get_info(o->device, &info) == EM_OK) snprintf(device_name, sizeof device_name, "%s", info.name);
    else snprintf(device_name, sizeof device_name, "cuda:%d", o->device.ordinal);
    em_clear_error();
  }
  time_t now = time(NULL);
  struct tm tm;
  char utc[32] = "";
  if (gmtime_r(&now, &tm)) strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
  json_t *j = json_pack("{s:i, s:I, s:s, s:s, s:s, s:i, s:s, s:s}", "format", EM_CHECKPOINT_FORMAT_VERSION,
                        "created", (json_int_t)now, "created_utc", utc, "ember_version", em_version(), "device",
                        o->device.kind == EM_DEVICE_CUDA ? "cuda" : "cpu", "device_ordinal", o->device.ordinal,
                        "device_name", device_name, "mode", mode_name(o->mode));
  char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  return text;
}

static em_status check_sections(const em_checkpoint_section *s, int n) {
  if (n < 0 || (n && !s)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_save: bad section list");
  for (int i = 0; i < n; i++) {
    if (!s[i].name || !name_ok(s[i].name))
      return em_fail(EM_ERR_INVALID_ARGUMENT,
                     "em_checkpoint_save: section %d's name '%s' is not 1 to %d characters of A-Z a-z 0-9 . _ -", i,
                     s[i].name ? s[i].name : "(null)", EM_CHECKPOINT_NAME_MAX);
    if (!strcmp(s[i].name, "manifest") || !strcmp(s[i].name, "graph"))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_save: section name '%s' is the library's own", s[i].name);
    if (!s[i].bytes && s[i].size)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_save: section '%s' has %zu bytes at NULL", s[i].name,
                     s[i].size);
    for (int k = 0; k < i; k++)
      if (!strcmp(s[i].name, s[k].name))
        return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_save: two sections are named '%s'", s[i].name);
  }
  return EM_OK;
}

/* Header, table and the table's checksum for the sections all[0..n), laid
 * out from the end of the table on; *out malloc'd, *file_size the total. */
static em_status build_head(const em_checkpoint_section *all, size_t n, unsigned char **out, size_t *head_size,
                            uint64_t *file_size) {
  size_t hs = HEADER_SIZE + ENTRY_SIZE * n + 8;
  unsigned char *h = calloc(1, hs);
  if (!h) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_checkpoint_save: no memory");
  uint64_t off = hs;
  for (size_t i = 0; i < n; i++) {
    unsigned char *e = h + HEADER_SIZE + ENTRY_SIZE * i;
    memcpy(e, all[i].name, strlen(all[i].name));
    put_u64(e + 56, off);
    put_u64(e + 64, all[i].size);
    put_u64(e + 72, XXH3_64bits(all[i].bytes, all[i].size));
    off += all[i].size + pad8(all[i].size);
  }
  memcpy(h, MAGIC, 8);
  put_u32(h + 8, EM_CHECKPOINT_FORMAT_VERSION);
  put_u32(h + 12, (uint32_t)n);
  put_u64(h + 16, off + 8);
  put_u64(h + 24, XXH3_64bits(h, 24));
  put_u64(h + hs - 8, XXH3_64bits(h + HEADER_SIZE, ENTRY_SIZE * n));
  *out = h;
  *head_size = hs;
  *file_size = off + 8;
  return EM_OK;
}

static em_status save(const char *path, const em_graph *graph, const em_checkpoint_section *user, int n_user,
                      const char *manifest, const void *graph_bytes, size_t graph_size) {
  size_t n = 1 + (graph ? 1 : 0) + (size_t)n_user;
  em_checkpoint_section *all = malloc(sizeof *all * n);
  em_write_part *parts = malloc(sizeof *parts * (2 * n + 2));
  unsigned char *head = NULL;
  em_status s = all && parts ? EM_OK : em_fail(EM_ERR_OUT_OF_MEMORY, "em_checkpoint_save: no memory");
  if (!s) {
    size_t k = 0;
    all[k++] = (em_checkpoint_section){"manifest", manifest, strlen(manifest)};
    if (graph) all[k++] = (em_checkpoint_section){"graph", graph_bytes, graph_size};
    for (int i = 0; i < n_user; i++) all[k++] = user[i];
    size_t head_size = 0;
    uint64_t file_size = 0;
    s = build_head(all, n, &head, &head_size, &file_size);
    if (!s) {
      static const unsigned char zeros[8];
      XXH3_state_t st;
      XXH3_64bits_reset(&st);
      int np = 0;
      parts[np++] = (em_write_part){head, head_size};
      for (size_t i = 0; i < n; i++) {
        parts[np++] = (em_write_part){all[i].bytes, all[i].size};
        parts[np++] = (em_write_part){zeros, (size_t)pad8(all[i].size)};
      }
      for (int i = 0; i < np; i++)
        if (parts[i].size) XXH3_64bits_update(&st, parts[i].bytes, parts[i].size);
      unsigned char trailer[8];
      put_u64(trailer, XXH3_64bits_digest(&st));
      parts[np++] = (em_write_part){trailer, 8};
      s = em_write_file_atomic(path, parts, np);
      if (s) em_fail_context(s, "em_checkpoint_save");
    }
  }
  free(head);
  free(parts);
  free(all);
  return s;
}

API em_status em_checkpoint_save(const char *path, const em_graph *graph, const em_checkpoint_section *sections,
                                 int n_sections, const em_checkpoint_save_options *options) {
  if (!path || !*path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_save: no path");
  em_status s = check_sections(sections, n_sections);
  if (s) return s;
  em_checkpoint_save_options o = options ? *options : (em_checkpoint_save_options){0};
  void *gb = NULL;
  size_t gn = 0;
  if (graph && (s = em_graph_to_bytes(graph, &gb, &gn))) return em_fail_context(s, "em_checkpoint_save %s", path);
  char *manifest = manifest_json(&o);
  if (!manifest) s = em_fail(EM_ERR_OUT_OF_MEMORY, "em_checkpoint_save: no memory for the manifest");
  else s = save(path, graph, sections, n_sections, manifest, gb, gn);
  free(manifest);
  free(gb);
  return s;
}

/* ------------------------------------------------------------- loading --- */

/* Magic, header checksum, version, size. */
static em_status check_header(const em_checkpoint *c) {
  const unsigned char *d = c->data;
  size_t n = c->size;
  if (n >= 8 && !memcmp(d, GRAPH_MAGIC, 8))
    return em_fail(EM_ERR_CORRUPT, "%s: offset 0: an Ember graph file (em_graph_save), not a checkpoint: load it with "
                                   "em_graph_load",
                   c->path);
  if (n < 8 || memcmp(d, MAGIC, 8)) {
    if (n < 8 && !memcmp(d, MAGIC, n))
      return em_fail(EM_ERR_CORRUPT, "%s: truncated at byte %zu, inside the 32-byte header", c->path, n);
    return em_fail(EM_ERR_CORRUPT, "%s: offset 0: not an Ember checkpoint (it does not begin with \"EMBRCKPT\")",
                   c->path);
  }
  if (n < HEADER_SIZE)
    return em_fail(EM_ERR_CORRUPT, "%s: truncated at byte %zu, inside the 32-byte header", c->path, n);
  if (get_u64(d + 24) != XXH3_64bits(d, 24))
    return em_fail(EM_ERR_CORRUPT, "%s: header (bytes 0-31): checksum mismatch at offset 24: the header is damaged",
                   c->path);
  uint32_t version = get_u32(d + 8);
  if (version > EM_CHECKPOINT_FORMAT_VERSION)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "%s: checkpoint format version %u is newer than this build of Ember (%s) reads (version %d): "
                   "load it with a newer Ember",
                   c->path, version, em_version(), EM_CHECKPOINT_FORMAT_VERSION);
  if (version == 0) return em_fail(EM_ERR_CORRUPT, "%s: header: offset 8: format version 0 does not exist", c->path);
  uint64_t want = get_u64(d + 16);
  if (n < want)
    return em_fail(EM_ERR_CORRUPT, "%s: truncated at byte %zu: the header says the file has %llu bytes", c->path, n,
                   (unsigned long long)want);
  if (n > want)
    return em_fail(EM_ERR_CORRUPT, "%s: offset %llu: %zu bytes after the end the header gives (%llu bytes)", c->path,
                   (unsigned long long)want, n - (size_t)want, (unsigned long long)want);
  return EM_OK;
}

/* The table: its checksum, then each entry's name, place and order. */
static em_status read_table(em_checkpoint *c) {
  const unsigned char *d = c->data;
  uint64_t n = get_u32(d + 12), size = c->size;
  if (n < 1 || n > MAX_SECTIONS || HEADER_SIZE + ENTRY_SIZE * n + 8 + 8 > size)
    return em_fail(EM_ERR_CORRUPT, "%s: header: offset 12: %llu sections do not fit a file of %llu bytes", c->path,
                   (unsigned long long)n, (unsigned long long)size);
  uint64_t table_end = HEADER_SIZE + ENTRY_SIZE * n;
  if (get_u64(d + table_end) != XXH3_64bits(d + HEADER_SIZE, (size_t)(ENTRY_SIZE * n)))
    return em_fail(EM_ERR_CORRUPT, "%s: section table (bytes %u-%llu): checksum mismatch at offset %llu: the table is "
                                   "damaged",
                   c->path, HEADER_SIZE, (unsigned long long)table_end + 7, (unsigned long long)table_end);
  c->sections = calloc((size_t)n, sizeof *c->sections);
  if (!c->sections) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to read checkpoint %s", c->path);
  c->n = (size_t)n;
  uint64_t next = table_end + 8, data_end = size - 8;
  for (size_t i = 0; i < c->n; i++) {
    const unsigned char *e = d + HEADER_SIZE + ENTRY_SIZE * i;
    section *s = &c->sections[i];
    size_t at = HEADER_SIZE + ENTRY_SIZE * i;
    if (!memchr(e, 0, NAME_FIELD))
      return em_fail(EM_ERR_CORRUPT, "%s: section table entry %zu (offset %zu): the name has no end", c->path, i, at);
    memcpy(s->name, e, NAME_FIELD);
    size_t len = strlen(s->name);
    for (size_t k = len; k < NAME_FIELD; k++)
      if (e[k]) return em_fail(EM_ERR_CORRUPT, "%s: section table entry %zu (offset %zu): bytes after the name", c->path, i, at + k);
    if (!name_ok(s->name))
      return em_fail(EM_ERR_CORRUPT, "%s: section table entry %zu (offset %zu): '%s' is not a section name", c->path, i,
                     at, s->name);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(s->name, c->sections[k].name))
        return em_fail(EM_ERR_CORRUPT, "%s: section table entry %zu (offset %zu): a second section '%s'", c->path, i, at,
                       s->name);
    s->offset = get_u64(e + 56);
    s->size = get_u64(e + 64);
    s->checksum = get_u64(e + 72);
    if (s->offset != next || s->size > data_end - s->offset)
      return em_fail(EM_ERR_CORRUPT,
                     "%s: section table entry %zu (offset %zu): section '%s' at %llu with %llu bytes is not where "
                     "the previous one ends (%llu) or runs past the end",
                     c->path, i, at + 56, s->name, (unsigned long long)s->offset, (unsigned long long)s->size,
                     (unsigned long long)next);
    next = s->offset + s->size + pad8(s->size);
  }
  if (next != data_end)
    return em_fail(EM_ERR_CORRUPT, "%s: offset %llu: the sections end at %llu, not 8 bytes before the end of the file",
                   c->path, (unsigned long long)next, (unsigned long long)next);
  if (strcmp(c->sections[0].name, "manifest"))
    return em_fail(EM_ERR_CORRUPT, "%s: section table entry 0 (offset %u): the first section is '%s', not 'manifest'",
                   c->path, HEADER_SIZE, c->sections[0].name);
  for (size_t i = 2; i < c->n; i++)
    if (!strcmp(c->sections[i].name, "graph"))
      return em_fail(EM_ERR_CORRUPT, "%s: section table entry %zu: 'graph' must be the second section", c->path, i);
  return EM_OK;
}

/* Each section's checksum and its padding, then the whole file's. */
static em_status check_sums(const em_checkpoint *c) {
  for (size_t i = 0; i < c->n; i++) {
    const section *s = &c->sections[i];
    if (XXH3_64bits(c->data + s->offset, (size_t)s->size) != s->checksum)
      return em_fail(EM_ERR_CORRUPT, "%s: section '%s' (bytes %llu-%llu): checksum mismatch: the section is damaged",
                     c->path, s->name, (unsigned long long)s->offset, (unsigned long long)(s->offset + s->size) - 1);
    for (uint64_t k = s->offset + s->size; k < s->offset + s->size + pad8(s->size); k++)
      if (c->data[k])
        return em_fail(EM_ERR_CORRUPT, "%s: offset %llu: padding after section '%s' is not zero", c->path,
                       (unsigned long long)k, s->name);
  }
  size_t end = c->size - 8;
  if (get_u64(c->data + end) != XXH3_64bits(c->data, end))
    return em_fail(EM_ERR_CORRUPT, "%s: trailer (offset %zu): whole-file checksum mismatch: the file is damaged",
                   c->path, end);
  return EM_OK;
}

static em_status read_manifest(em_checkpoint *c) {
  const section *s = &c->sections[0];
  json_error_t jerr;
  json_t *j = json_loadb((const char *)c->data + s->offset, (size_t)s->size, JSON_REJECT_DUPLICATES, &jerr);
  if (!j)
    return em_fail(EM_ERR_CORRUPT, "%s: section 'manifest' (offset %llu): byte %d: %s", c->path,
                   (unsigned long long)s->offset, jerr.position, jerr.text);
  json_int_t format = 0, created = 0, ordinal = 0;
  const char *ver = NULL, *dev = NULL, *name = NULL, *mode = NULL;
  em_status st = EM_OK;
  if (json_unpack_ex(j, &jerr, 0, "{s:I, s:I, s:s, s:s, s:I, s:s, s:s}", "format", &format, "created", &created,
                     "ember_version", &ver, "device", &dev, "device_ordinal", &ordinal, "device_name", &name, "mode",
                     &mode))
    st = em_fail(EM_ERR_CORRUPT, "%s: section 'manifest' (offset %llu): %s", c->path, (unsigned long long)s->offset,
                 jerr.text);
  else if (format != (json_int_t)get_u32(c->data + 8) || (strcmp(dev, "cpu") && strcmp(dev, "cuda")) ||
           ordinal < 0 || ordinal > 1 << 20 || (strcmp(mode, "fast") && strcmp(mode, "portable")))
    st = em_fail(EM_ERR_CORRUPT, "%s: section 'manifest' (offset %llu): format, device or mode is not one this build "
                                 "knows",
                 c->path, (unsigned long long)s->offset);
  else {
    c->ember_version = strdup(ver);
    c->device_name = strdup(name);
    if (!c->ember_version || !c->device_name) st = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", c->path);
    em_checkpoint_manifest *m = &c->manifest;
    m->format_version = (uint32_t)format;
    m->created = (int64_t)created;
    m->ember_version = c->ember_version;
    m->device = !strcmp(dev, "cuda") ? em_cuda((int)ordinal) : em_cpu();
    m->device_name = c->device_name;
    m->mode = !strcmp(mode, "portable") ? EM_MODE_PORTABLE : EM_MODE_FAST;
    m->file_size = c->size;
  }
  json_decref(j);
  return st;
}

static em_status build_graph(em_checkpoint *c) {
  if (c->n < 2 || strcmp(c->sections[1].name, "graph")) return EM_OK;
  const section *s = &c->sections[1];
  char label[4200];
  snprintf(label, sizeof label, "%.4000s: section 'graph' (at file offset %llu; the offset that follows is within it)", c->path,
           (unsigned long long)s->offset);
  return em_graph_from_bytes(c->data + s->offset, (size_t)s->size, label, &c->graph);
}

em_status em_checkpoint_from_bytes(unsigned char *data, size_t size, const char *name, int with_graph,
                                   em_checkpoint **out) {
  *out = NULL;
  em_checkpoint *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(name))) {
    free(c);
    free(data);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to read checkpoint %s", name);
  }
  c->data = data;
  c->size = size;
  em_status s = check_header(c);
  if (!s) s = read_table(c);
  if (!s) s = check_sums(c);
  if (!s) s = read_manifest(c);
  if (!s && with_graph) s = build_graph(c);
  if (s) {
    em_checkpoint_free(c);
    return s;
  }
  *out = c;
  return EM_OK;
}

static em_status open_checkpoint(const char *path, int with_graph, em_checkpoint **out) {
  if (!path || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_load: NULL argument");
  *out = NULL;
  unsigned char *data;
  size_t size;
  em_status s = em_read_file(path, "checkpoint", &data, &size);
  return s ? s : em_checkpoint_from_bytes(data, size, path, with_graph, out);
}

API em_status em_checkpoint_load(const char *path, em_checkpoint **out) { return open_checkpoint(path, 1, out); }
API em_status em_checkpoint_info(const char *path, em_checkpoint **out) { return open_checkpoint(path, 0, out); }

API void em_checkpoint_free(em_checkpoint *c) {
  if (!c) return;
  em_graph_free(c->graph);
  free(c->sections);
  free(c->data);
  free(c->ember_version);
  free(c->device_name);
  free(c->path);
  free(c);
}

/* ------------------------------------------------------------ accessors --- */

API em_status em_checkpoint_get_manifest(const em_checkpoint *c, em_checkpoint_manifest *out) {
  if (!c || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_get_manifest: NULL argument");
  *out = c->manifest;
  return EM_OK;
}

API size_t em_checkpoint_section_count(const em_checkpoint *c) { return c ? c->n : 0; }

API em_status em_checkpoint_section_get(const em_checkpoint *c, size_t index, em_checkpoint_section_info *out) {
  if (!c || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_section_get: NULL argument");
  if (index >= c->n)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_section_get: %s has %zu sections, not %zu", c->path, c->n,
                   index + 1);
  const section *s = &c->sections[index];
  *out = (em_checkpoint_section_info){s->name, c->data + s->offset, (size_t)s->size, s->offset, s->checksum};
  return EM_OK;
}

API em_status em_checkpoint_find(const em_checkpoint *c, const char *name, const void **bytes, size_t *size) {
  if (!c || !name || !bytes || !size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_find: NULL argument");
  for (size_t i = 0; i < c->n; i++)
    if (!strcmp(c->sections[i].name, name)) {
      *bytes = c->data + c->sections[i].offset;
      *size = (size_t)c->sections[i].size;
      return EM_OK;
    }
  return em_fail(EM_ERR_NOT_FOUND, "checkpoint %s has no section '%s'", c->path, name);
}

API em_graph *em_checkpoint_graph(const em_checkpoint *c) { return c ? c->graph : NULL; }

API em_status em_checkpoint_take_graph(em_checkpoint *c, em_graph **out) {
  if (!c || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_checkpoint_take_graph: NULL argument");
  if (!c->graph) return em_fail(EM_ERR_NOT_FOUND, "checkpoint %s: no graph to take (none saved, not built, or taken)", c->path);
  *out = c->graph;
  c->graph = NULL;
  return EM_OK;
}
