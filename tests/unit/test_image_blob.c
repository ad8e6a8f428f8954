/* Tests of the image table parser (runtime/image_blob.h) and of the table
 * embedded in this build (include/ember/dispatch.h).
 *
 * The blobs are written by a small writer in this file that follows the
 * layout documented in image_blob.h byte by byte (little-endian fields at
 * fixed offsets: header 40 bytes, entry 88 bytes (version 1: 64), then the
 * string table, then the payloads 16-byte aligned), with the hashes computed
 * by xxHash and the zstd frames made by libzstd directly. Corruptions patch
 * those known offsets. The embedded table is checked against
 * the files it was built from (kernels/, ptx/, $EMBER_BUILD_DIR/kernels/),
 * read here with stdio, and against kernel names scanned from the sources. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include "ember/dispatch.h"
#include "error.h"
#include "image_blob.h"

/* ---- the layout, as documented ---------------------------------------- */

enum {
  H_MAGIC = 0, H_VERSION = 8, H_COUNT = 12, H_HEADER_SIZE = 16, H_ENTRY_SIZE = 20, H_TOTAL = 24,
  H_STRTAB_OFF = 32, H_STRTAB_SIZE = 36, HEADER_BYTES = 40,
  E_KIND = 0, E_ARCH = 4, E_VARIANT = 8, E_ISA = 12, E_TOOLKIT = 16, E_MIN_DRIVER = 20, E_FLAGS = 24,
  E_MODULE = 28, E_PRODUCER = 32, E_KERNELS = 36, E_DATA_OFF = 40, E_DATA_SIZE = 48, E_HASH = 56,
  ENTRY_V1_BYTES = 64, E_STORAGE = 64, E_RESERVED = 68, E_SIZE = 72, E_DATA_HASH = 80, ENTRY_BYTES = 88
};

/* The header's structs must have exactly this layout, since they are the
 * format (the parser copies bytes into them). */
_Static_assert(sizeof(em_blob_header) == HEADER_BYTES, "header layout");
_Static_assert(offsetof(em_blob_header, total_size) == H_TOTAL, "header layout");
_Static_assert(offsetof(em_blob_header, strtab_size) == H_STRTAB_SIZE, "header layout");
_Static_assert(sizeof(em_blob_entry) == ENTRY_BYTES, "entry layout");
_Static_assert(offsetof(em_blob_entry, kernels) == E_KERNELS, "entry layout");
_Static_assert(offsetof(em_blob_entry, hash) == E_HASH, "entry layout");
_Static_assert(offsetof(em_blob_entry, storage) == E_STORAGE, "entry layout");
_Static_assert(offsetof(em_blob_entry, size) == E_SIZE, "entry layout");
_Static_assert(offsetof(em_blob_entry, data_hash) == E_DATA_HASH, "entry layout");
_Static_assert(EM_BLOB_ENTRY_V1_SIZE == ENTRY_V1_BYTES, "entry layout");

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

typedef struct spec {
  uint32_t kind, arch, variant, ptx_isa, toolkit, min_driver, flags;
  const char *module, *producer, *kernels;
  const void *data;
  size_t size;
  int zstd;               /* stored as one zstd frame (version 2 only) */
} spec;

#define MAX_SPECS 8

typedef struct blob {
  uint8_t *b;
  size_t size;
  size_t entry[MAX_SPECS]; /* offset of each entry */
  size_t data[MAX_SPECS];  /* offset of each payload */
  size_t data_size[MAX_SPECS];
  void *payload[MAX_SPECS]; /* what was written: the zstd frame, or the spec's bytes */
  size_t str_module[MAX_SPECS];  /* offset of each module string, from the string table */
  size_t strtab, strtab_size;
} blob;

static void free_blob(blob *o) {
  for (size_t i = 0; i < MAX_SPECS; i++) free(o->payload[i]);
  free(o->b);
}

/* Writes n specs in table version `version` (1: 64-byte entries, every
 * payload as it is). header_size/entry_size larger than 40/88 (64) add
 * unknown trailing fields (filled with 0xAA), which readers must skip. */
static blob build_v(const spec *s, size_t n, uint32_t version, uint32_t header_size, uint32_t entry_size) {
  blob o;
  memset(&o, 0, sizeof o);
  assert_true(n <= MAX_SPECS);
  for (size_t i = 0; i < n; i++) {
    size_t cap = ZSTD_compressBound(s[i].size);
    o.payload[i] = malloc(s[i].zstd ? cap : s[i].size + 1);
    assert_non_null(o.payload[i]);
    if (s[i].zstd) {
      assert_int_equal(version, 2);
      o.data_size[i] = ZSTD_compress(o.payload[i], cap, s[i].data, s[i].size, 3);
      assert_false(ZSTD_isError(o.data_size[i]));
    } else {
      memcpy(o.payload[i], s[i].data, s[i].size);
      o.data_size[i] = s[i].size;
    }
  }
  /* String table: "" at 0, then module, producer, kernels of each entry. */
  char strtab[4096];
  size_t sl = 1, soff[MAX_SPECS][3];
  strtab[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const char *str[3] = {s[i].module, s[i].producer, s[i].kernels};
    for (int k = 0; k < 3; k++) {
      size_t len = strlen(str[k]) + 1;
      assert_true(sl + len <= sizeof strtab);
      memcpy(strtab + sl, str[k], len);
      soff[i][k] = sl;
      sl += len;
    }
    o.str_module[i] = soff[i][0];
  }
  o.strtab = header_size + n * entry_size;
  o.strtab_size = sl;
  size_t end = o.strtab + sl;
  for (size_t i = 0; i < n; i++) {
    end = (end + 15) & ~(size_t)15;
    o.data[i] = end;
    end += o.data_size[i];
  }
  o.size = end;
  o.b = malloc(o.size ? o.size : 1);
  assert_non_null(o.b);
  memset(o.b, 0xAA, o.size);
  memcpy(o.b + H_MAGIC, "EMBIMGS\0", 8);
  put32(o.b + H_VERSION, version);
  put32(o.b + H_COUNT, (uint32_t)n);
  put32(o.b + H_HEADER_SIZE, header_size);
  put32(o.b + H_ENTRY_SIZE, entry_size);
  put64(o.b + H_TOTAL, o.size);
  put32(o.b + H_STRTAB_OFF, (uint32_t)o.strtab);
  put32(o.b + H_STRTAB_SIZE, (uint32_t)sl);
  for (size_t i = 0; i < n; i++) {
    uint8_t *e = o.b + header_size + i * entry_size;
    o.entry[i] = (size_t)(e - o.b);
    put32(e + E_KIND, s[i].kind);
    put32(e + E_ARCH, s[i].arch);
    put32(e + E_VARIANT, s[i].variant);
    put32(e + E_ISA, s[i].ptx_isa);
    put32(e + E_TOOLKIT, s[i].toolkit);
    put32(e + E_MIN_DRIVER, s[i].min_driver);
    put32(e + E_FLAGS, s[i].flags);
    put32(e + E_MODULE, (uint32_t)soff[i][0]);
    put32(e + E_PRODUCER, (uint32_t)soff[i][1]);
    put32(e + E_KERNELS, (uint32_t)soff[i][2]);
    put64(e + E_DATA_OFF, o.data[i]);
    put64(e + E_DATA_SIZE, o.data_size[i]);
    put64(e + E_HASH, XXH3_64bits(s[i].data, s[i].size));
    if (version >= 2) {
      put32(e + E_STORAGE, s[i].zstd ? EM_IMAGE_ZSTD : EM_IMAGE_STORED);
      put32(e + E_RESERVED, 0);
      put64(e + E_SIZE, s[i].size);
      put64(e + E_DATA_HASH, XXH3_64bits(o.payload[i], o.data_size[i]));
    }
  }
  memcpy(o.b + o.strtab, strtab, sl);
  for (size_t i = 0; i < n; i++) {
    /* Padding between payloads is zero, as a writer would leave it. */
    size_t pad_from = i == 0 ? o.strtab + sl : o.data[i - 1] + o.data_size[i - 1];
    memset(o.b + pad_from, 0, o.data[i] - pad_from);
    memcpy(o.b + o.data[i], o.payload[i], o.data_size[i]);
  }
  return o;
}

static blob build_ex(const spec *s, size_t n, uint32_t header_size, uint32_t entry_size) {
  return build_v(s, n, 2, header_size, entry_size);
}
static blob build(const spec *s, size_t n) { return build_ex(s, n, HEADER_BYTES, ENTRY_BYTES); }

/* Rewrites entry i's payload hash after a patch of its payload, so that the
 * check under test is the one that sees it. */
static void rehash_payload(blob *o, size_t i) {
  uint8_t *e = o->b + o->entry[i];
  uint64_t off = 0, size = 0;
  for (int k = 7; k >= 0; k--) off = off << 8 | e[E_DATA_OFF + k], size = size << 8 | e[E_DATA_SIZE + k];
  put64(e + E_DATA_HASH, XXH3_64bits(o->b + off, (size_t)size));
}

/* Payloads and the four specs of the standard blob. */
static const uint8_t CUBIN_BYTES[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x41, 8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3};
static const char PTX_TEXT[] = ".version 3.2\n.target sm_35\n.address_size 64\n.visible .entry k1()\n{\nret;\n}\n";
static const char SRC_TEXT[] = "extern \"C\" __global__ void k1() {}\nextern \"C\" __global__ void k2() {}\n";
static const char HDR_TEXT[] = "#define EM_X 1\n";

static size_t standard_specs(spec *s) {
  s[0] = (spec){EM_IMAGE_CUBIN, 90, 'a', 0, 13000, 13000, 0, "mod_a", "nvcc 13.0.88", "k1,k2",
                CUBIN_BYTES, sizeof CUBIN_BYTES, 1};
  s[1] = (spec){EM_IMAGE_PTX, 35, 0, 32, 0, 4000, EM_IMAGE_LEGACY, "mod_a", "clang 14.0.6", "k1",
                PTX_TEXT, sizeof PTX_TEXT, 1};
  s[2] = (spec){EM_IMAGE_SOURCE, 0, 0, 0, 0, 0, 0, "mod_b", "source", "k1,k2", SRC_TEXT, sizeof SRC_TEXT, 0};
  s[3] = (spec){EM_IMAGE_HEADER, 100, 'f', 0, 0, 0, 0x80000000u, "em_kernel.h", "", "", HDR_TEXT,
                sizeof HDR_TEXT, 0};
  return 4;
}

static blob standard_blob(void) {
  spec s[MAX_SPECS];
  size_t n = standard_specs(s);
  return build(s, n);
}

static void check_image(const em_image_info *img, const spec *s, const uint8_t *expect_data) {
  assert_string_equal(img->module, s->module);
  assert_int_equal(img->kind, s->kind);
  assert_int_equal(img->arch, s->arch);
  assert_int_equal((unsigned char)img->variant, s->variant);
  assert_int_equal(img->ptx_isa, s->ptx_isa);
  assert_int_equal(img->toolkit, s->toolkit);
  assert_int_equal(img->min_driver, s->min_driver);
  assert_int_equal(img->flags, s->flags);
  assert_string_equal(img->producer, s->producer);
  assert_string_equal(img->kernels, s->kernels);
  assert_int_equal(img->size, s->size);
  assert_int_equal(img->hash, XXH3_64bits(s->data, s->size));
  assert_int_equal(img->storage, s->zstd ? EM_IMAGE_ZSTD : EM_IMAGE_STORED);
  if (!s->zstd) assert_int_equal(img->stored_size, s->size);
  /* The view points into the blob, not at a copy. */
  assert_ptr_equal(img->stored, expect_data);
  /* The image itself, decompressed when it is a frame, NUL after its bytes. */
  void *bytes = NULL;
  if (em_image_read(img, &bytes) != EM_OK) fail_msg("em_image_read: %s", em_last_error());
  assert_memory_equal(bytes, s->data, s->size);
  assert_int_equal(((const uint8_t *)bytes)[s->size], 0);
  free(bytes);
}

/* ---- valid blobs ---------------------------------------------------------- */

static void test_round_trip(void **state) {
  (void)state;
  spec s[MAX_SPECS];
  size_t n = standard_specs(s);
  blob o = build(s, n);
  em_blob_view v;
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  assert_int_equal(v.count, n);
  for (size_t i = 0; i < n; i++) check_image(&v.images[i], &s[i], o.b + o.data[i]);
  em_blob_view_free(&v);
  assert_null(v.images);
  assert_int_equal(v.count, 0);
  free_blob(&o);
}

static void test_empty_table(void **state) {
  (void)state;
  blob o = build(NULL, 0);
  em_blob_view v;
  assert_int_equal(o.size, 41); /* header + the one-byte string table */
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  assert_int_equal(v.count, 0);
  em_blob_view_free(&v);
  free_blob(&o);
}

/* A newer writer may grow the header and the entries; "readers skip fields
 * they do not know". */
static void test_larger_header_and_entries_are_skipped(void **state) {
  (void)state;
  spec s[MAX_SPECS];
  size_t n = standard_specs(s);
  blob o = build_ex(s, n, HEADER_BYTES + 24, ENTRY_BYTES + 16);
  em_blob_view v;
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  assert_int_equal(v.count, n);
  for (size_t i = 0; i < n; i++) check_image(&v.images[i], &s[i], o.b + o.data[i]);
  em_blob_view_free(&v);
  free_blob(&o);
}

/* Bytes after total_size (section padding) are not part of the table. */
static void test_trailing_bytes_are_ignored(void **state) {
  (void)state;
  blob o = standard_blob();
  uint8_t *big = calloc(1, o.size + 64);
  memcpy(big, o.b, o.size);
  em_blob_view v;
  assert_int_equal(em_blob_parse(big, o.size + 64, "test", &v), EM_OK);
  assert_int_equal(v.count, 4);
  em_blob_view_free(&v);
  free(big);
  free_blob(&o);
}

/* ---- corruptions ---------------------------------------------------------- */

/* Parses a copy of exactly `size` bytes (so ASan sees any read past it) and
 * checks the status and that the message names the origin and `word`. */
static void expect_error(const uint8_t *bytes, size_t size, em_status want, const char *word) {
  uint8_t *copy = malloc(size ? size : 1);
  assert_non_null(copy);
  memcpy(copy, bytes, size);
  em_blob_view v;
  memset(&v, 0xff, sizeof v); /* a failed parse must leave nothing to free */
  em_clear_error();
  em_status st = em_blob_parse(copy, size, "origin.bin", &v);
  free(copy);
  if (st != want) fail_msg("status %s, expected %s (%s)", em_status_name(st), em_status_name(want), em_last_error());
  assert_null(v.images); /* nothing to free after a failure */
  assert_int_equal(v.count, 0);
  const char *msg = em_last_error();
  if (!strstr(msg, "origin.bin")) fail_msg("message does not name the origin: %s", msg);
  if (word && !strstr(msg, word)) fail_msg("message does not say \"%s\": %s", word, msg);
}

typedef void (*patch_fn)(blob *o);

static void corrupt(patch_fn patch, em_status want, const char *word) {
  blob o = standard_blob();
  patch(&o);
  expect_error(o.b, o.size, want, word);
  free_blob(&o);
}

static void p_magic(blob *o) { o->b[3] ^= 0x20; }
static void p_magic_last(blob *o) { o->b[7] = '!'; } /* the magic includes its NUL */
static void p_version(blob *o) { put32(o->b + H_VERSION, 3); }
static void p_version0(blob *o) { put32(o->b + H_VERSION, 0); }
static void p_header_small(blob *o) { put32(o->b + H_HEADER_SIZE, HEADER_BYTES - 1); }
static void p_entry_small(blob *o) { put32(o->b + H_ENTRY_SIZE, ENTRY_BYTES - 1); }
static void p_count_big(blob *o) { put32(o->b + H_COUNT, 1000); }
static void p_count_max(blob *o) { put32(o->b + H_COUNT, UINT32_MAX); }
static void p_entry_size_huge(blob *o) { put32(o->b + H_ENTRY_SIZE, UINT32_MAX); }
static void p_header_size_huge(blob *o) { put32(o->b + H_HEADER_SIZE, UINT32_MAX); }
static void p_total_big(blob *o) { put64(o->b + H_TOTAL, o->size + 1); }
static void p_total_huge(blob *o) { put64(o->b + H_TOTAL, UINT64_MAX); }
static void p_strtab_past_end(blob *o) { put32(o->b + H_STRTAB_SIZE, (uint32_t)(o->size - o->strtab + 1)); }
static void p_strtab_offset_huge(blob *o) { put32(o->b + H_STRTAB_OFF, UINT32_MAX); }
static void p_strtab_over_entries(blob *o) { put32(o->b + H_STRTAB_OFF, (uint32_t)(o->entry[3] + 8)); }
static void p_module_off(blob *o) { put32(o->b + o->entry[1] + E_MODULE, (uint32_t)o->strtab_size); }
static void p_producer_off(blob *o) { put32(o->b + o->entry[2] + E_PRODUCER, UINT32_MAX); }
static void p_kernels_off(blob *o) { put32(o->b + o->entry[0] + E_KERNELS, (uint32_t)o->strtab_size + 100); }
static void p_no_nul(blob *o) {
  /* Entry 3's kernels is "" at the table's last byte. Overwrite that NUL:
   * the string then runs off the end of the table. */
  o->b[o->strtab + o->strtab_size - 1] = 'X';
}
static void p_module_no_nul(blob *o) {
  /* Shrink the table so it ends in the middle of entry 0's module name. */
  put32(o->b + H_STRTAB_SIZE, (uint32_t)(o->str_module[0] + 3));
}
static void p_kind0(blob *o) { put32(o->b + o->entry[0] + E_KIND, 0); }
static void p_kind5(blob *o) { put32(o->b + o->entry[2] + E_KIND, 5); }
static void p_variant(blob *o) { put32(o->b + o->entry[1] + E_VARIANT, 'b'); }
static void p_variant_high(blob *o) { put32(o->b + o->entry[1] + E_VARIANT, 0x100 + 'a'); }
static void p_payload_past(blob *o) { put64(o->b + o->entry[3] + E_DATA_SIZE, sizeof HDR_TEXT + 1); }
static void p_payload_offset(blob *o) { put64(o->b + o->entry[0] + E_DATA_OFF, o->size + 16); }
static void p_payload_wrap(blob *o) {
  /* offset + size wraps around 2^64 to a small number */
  put64(o->b + o->entry[0] + E_DATA_OFF, 64);
  put64(o->b + o->entry[0] + E_DATA_SIZE, UINT64_MAX - 32);
}
static void p_hash(blob *o) { o->b[o->entry[2] + E_HASH] ^= 1; } /* entry 2 is stored as it is */
static void p_payload_byte(blob *o) { o->b[o->data[1] + 5] ^= 0x40; }
static void p_data_hash(blob *o) { o->b[o->entry[0] + E_DATA_HASH] ^= 1; }
static void p_storage(blob *o) { put32(o->b + o->entry[0] + E_STORAGE, 7); }
static void p_stored_size(blob *o) { put64(o->b + o->entry[2] + E_SIZE, sizeof SRC_TEXT + 1); }
static void p_frame_size(blob *o) { put64(o->b + o->entry[0] + E_SIZE, sizeof CUBIN_BYTES + 1); }
static void p_frame_size_huge(blob *o) { put64(o->b + o->entry[1] + E_SIZE, (uint64_t)1 << 40); }
static void p_not_a_frame(blob *o) {
  memcpy(o->b + o->data[0], "ELF!", 4); /* over the zstd magic */
  rehash_payload(o, 0);
}
static void p_frame_cut(blob *o) {
  put64(o->b + o->entry[1] + E_DATA_SIZE, o->data_size[1] - 1);
  rehash_payload(o, 1);
}
static void p_frame_padded(blob *o) {
  /* One byte of the padding after entry 0's frame counted in: the frame ends
   * before its payload does. */
  assert_true(o->data[0] + o->data_size[0] < o->data[1]);
  put64(o->b + o->entry[0] + E_DATA_SIZE, o->data_size[0] + 1);
  rehash_payload(o, 0);
}

static void test_short_header(void **state) {
  (void)state;
  blob o = standard_blob();
  expect_error(o.b, 0, EM_ERR_CORRUPT, "header");
  expect_error(o.b, HEADER_BYTES - 1, EM_ERR_CORRUPT, "header");
  free_blob(&o);
}

static void test_bad_header_fields(void **state) {
  (void)state;
  corrupt(p_magic, EM_ERR_CORRUPT, "magic");
  corrupt(p_magic_last, EM_ERR_CORRUPT, "magic");
  corrupt(p_version, EM_ERR_UNSUPPORTED, "version 3");
  corrupt(p_version0, EM_ERR_UNSUPPORTED, "version 0");
  corrupt(p_header_small, EM_ERR_CORRUPT, "header");
  corrupt(p_entry_small, EM_ERR_CORRUPT, "entry");
  corrupt(p_count_big, EM_ERR_CORRUPT, "entries");
  corrupt(p_count_max, EM_ERR_CORRUPT, "entries");
  corrupt(p_entry_size_huge, EM_ERR_CORRUPT, "entries");
  corrupt(p_header_size_huge, EM_ERR_CORRUPT, "entries");
  corrupt(p_total_big, EM_ERR_CORRUPT, NULL);
  corrupt(p_total_huge, EM_ERR_CORRUPT, NULL);
  corrupt(p_strtab_past_end, EM_ERR_CORRUPT, "strings");
  corrupt(p_strtab_offset_huge, EM_ERR_CORRUPT, "strings");
  corrupt(p_strtab_over_entries, EM_ERR_CORRUPT, NULL);
}

/* image_blob.h: the parser "names the entry and field on failure". */
static void test_bad_strings(void **state) {
  (void)state;
  corrupt(p_module_off, EM_ERR_CORRUPT, "image 1");
  corrupt(p_module_off, EM_ERR_CORRUPT, "module");
  corrupt(p_producer_off, EM_ERR_CORRUPT, "image 2");
  corrupt(p_producer_off, EM_ERR_CORRUPT, "producer");
  corrupt(p_kernels_off, EM_ERR_CORRUPT, "kernels");
  corrupt(p_no_nul, EM_ERR_CORRUPT, "image 3");
  corrupt(p_no_nul, EM_ERR_CORRUPT, "NUL");
  corrupt(p_module_no_nul, EM_ERR_CORRUPT, "image 0");
  corrupt(p_module_no_nul, EM_ERR_CORRUPT, "NUL");
}

static void test_bad_entry_fields(void **state) {
  (void)state;
  corrupt(p_kind0, EM_ERR_CORRUPT, "kind 0");
  corrupt(p_kind5, EM_ERR_CORRUPT, "kind 5");
  corrupt(p_kind5, EM_ERR_CORRUPT, "image 2");
  corrupt(p_variant, EM_ERR_CORRUPT, "variant");
  corrupt(p_variant_high, EM_ERR_CORRUPT, "variant");
  corrupt(p_payload_past, EM_ERR_CORRUPT, "image 3");
  corrupt(p_payload_past, EM_ERR_CORRUPT, "payload");
  corrupt(p_payload_offset, EM_ERR_CORRUPT, "payload");
  corrupt(p_payload_wrap, EM_ERR_CORRUPT, "payload");
  corrupt(p_hash, EM_ERR_CORRUPT, "checksum");
  corrupt(p_hash, EM_ERR_CORRUPT, "image 2");
  corrupt(p_payload_byte, EM_ERR_CORRUPT, "checksum");
  corrupt(p_payload_byte, EM_ERR_CORRUPT, "image 1");
}

/* Version 2's fields: the payload's hash, the storage, the image's size and
 * the zstd frame (checked from its header and block headers at parse time). */
static void test_bad_storage_fields(void **state) {
  (void)state;
  corrupt(p_data_hash, EM_ERR_CORRUPT, "checksum");
  corrupt(p_data_hash, EM_ERR_CORRUPT, "image 0 (mod_a)");
  corrupt(p_storage, EM_ERR_CORRUPT, "storage 7");
  corrupt(p_stored_size, EM_ERR_CORRUPT, "image 2 (mod_b)");
  corrupt(p_stored_size, EM_ERR_CORRUPT, "size");
  corrupt(p_frame_size, EM_ERR_CORRUPT, "frame holds 19 bytes, the entry says 20");
  corrupt(p_frame_size_huge, EM_ERR_CORRUPT, "more than any image");
  corrupt(p_not_a_frame, EM_ERR_CORRUPT, "not one zstd frame");
  corrupt(p_not_a_frame, EM_ERR_CORRUPT, "image 0 (mod_a)");
  corrupt(p_frame_cut, EM_ERR_CORRUPT, "not one zstd frame");
  corrupt(p_frame_padded, EM_ERR_CORRUPT, "frame ends before the payload");
}

/* A version 1 table (what libraries before the compressed table carry):
 * 64-byte entries, every payload the image itself. Tools read it. */
static void test_version1_table_is_read(void **state) {
  (void)state;
  spec s[MAX_SPECS];
  size_t n = standard_specs(s);
  for (size_t i = 0; i < n; i++) s[i].zstd = 0;
  blob o = build_v(s, n, 1, HEADER_BYTES, ENTRY_V1_BYTES);
  em_blob_view v;
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  assert_int_equal(v.count, n);
  for (size_t i = 0; i < n; i++) check_image(&v.images[i], &s[i], o.b + o.data[i]);
  em_blob_view_free(&v);
  /* Its entries may grow too; smaller than 64 bytes they are corrupt. */
  free_blob(&o);
  o = build_v(s, n, 1, HEADER_BYTES, ENTRY_V1_BYTES + 8);
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  for (size_t i = 0; i < n; i++) check_image(&v.images[i], &s[i], o.b + o.data[i]);
  em_blob_view_free(&v);
  put32(o.b + H_ENTRY_SIZE, ENTRY_V1_BYTES - 1);
  expect_error(o.b, o.size, EM_ERR_CORRUPT, "entry");
  free_blob(&o);
}

/* What the parser cannot see without decompressing: the image's own hash.
 * em_image_read checks it and names the image. */
static void test_read_checks_the_image_hash(void **state) {
  (void)state;
  blob o = standard_blob();
  o.b[o.entry[0] + E_HASH] ^= 1;
  em_blob_view v;
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  void *bytes = (void *)1;
  assert_int_equal(em_image_read(&v.images[0], &bytes), EM_ERR_CORRUPT);
  assert_null(bytes);
  if (!strstr(em_last_error(), "mod_a sm_90a cubin") || !strstr(em_last_error(), "checksum"))
    fail_msg("message: %s", em_last_error());
  em_image_info bad = v.images[2];
  bad.storage = (em_image_storage)9;
  assert_int_equal(em_image_read(&bad, &bytes), EM_ERR_CORRUPT);
  bad = v.images[2];
  bad.stored_size--;
  assert_int_equal(em_image_read(&bad, &bytes), EM_ERR_CORRUPT);
  bad = v.images[1];
  bad.size = EM_BLOB_IMAGE_MAX + 1;
  assert_int_equal(em_image_read(&bad, &bytes), EM_ERR_CORRUPT);
  assert_int_equal(em_image_read(NULL, &bytes), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_image_read(&v.images[0], NULL), EM_ERR_INVALID_ARGUMENT);
  em_blob_view_free(&v);
  free_blob(&o);
}

/* Every one-byte change of a zstd payload (its hash rewritten, so the parser
 * takes it when the frame's structure holds) is refused by the parser or by
 * em_image_read, or changes nothing: never wrong bytes, never a crash. */
static void test_every_frame_byte_flip(void **state) {
  (void)state;
  spec s[MAX_SPECS];
  size_t n = standard_specs(s);
  blob o = build(s, n);
  size_t caught_by_parse = 0, caught_by_read = 0;
  for (size_t k = 0; k < o.data_size[1]; k++) {
    for (int bit = 0; bit < 8; bit++) {
      uint8_t *c = malloc(o.size);
      memcpy(c, o.b, o.size);
      c[o.data[1] + k] ^= (uint8_t)(1u << bit);
      put64(c + o.entry[1] + E_DATA_HASH, XXH3_64bits(c + o.data[1], o.data_size[1]));
      em_blob_view v;
      if (em_blob_parse(c, o.size, "test", &v) != EM_OK) {
        caught_by_parse++;
      } else {
        void *bytes = NULL;
        em_status st = em_image_read(&v.images[1], &bytes);
        if (st == EM_OK) {
          assert_memory_equal(bytes, s[1].data, s[1].size);
        } else {
          assert_int_equal(st, EM_ERR_CORRUPT);
          if (!strstr(em_last_error(), "mod_a compute_35 legacy PTX")) fail_msg("message: %s", em_last_error());
          caught_by_read++;
        }
        free(bytes);
        em_blob_view_free(&v);
      }
      free(c);
    }
  }
  assert_true(caught_by_parse > 0);
  assert_true(caught_by_read > 0);
  free_blob(&o);
}

/* The first bytes of an image, as gpucheck reads a cubin's ELF header. */
static void test_image_head(void **state) {
  (void)state;
  blob o = standard_blob();
  em_blob_view v;
  assert_int_equal(em_blob_parse(o.b, o.size, "test", &v), EM_OK);
  uint8_t head[256];
  size_t got = 0;
  for (size_t i = 0; i < 4; i++) {
    const uint8_t *want = i == 0 ? CUBIN_BYTES : i == 1 ? (const uint8_t *)PTX_TEXT : i == 2 ? (const uint8_t *)SRC_TEXT
                                                                                             : (const uint8_t *)HDR_TEXT;
    assert_int_equal(em_blob_image_head(&v.images[i], head, 10, &got), EM_OK);
    assert_int_equal(got, 10);
    assert_memory_equal(head, want, 10);
    /* A larger buffer gets the whole image. */
    assert_int_equal(em_blob_image_head(&v.images[i], head, sizeof head, &got), EM_OK);
    assert_int_equal(got, v.images[i].size);
    assert_memory_equal(head, want, got);
  }
  em_image_info bad = v.images[0];
  bad.stored_size = 3; /* the frame cut short */
  assert_int_equal(em_blob_image_head(&bad, head, sizeof head, &got), EM_ERR_CORRUPT);
  if (!strstr(em_last_error(), "mod_a sm_90a cubin")) fail_msg("message: %s", em_last_error());
  em_blob_view_free(&v);
  free_blob(&o);
}

/* Every proper prefix of a valid blob is refused without a crash, both as
 * is (total_size then claims more than is there) and with total_size
 * rewritten to the cut length (a consistent header over missing bytes). */
static void test_every_truncation(void **state) {
  (void)state;
  blob o = standard_blob();
  for (size_t n = 0; n < o.size; n++) {
    expect_error(o.b, n, EM_ERR_CORRUPT, NULL);
    if (n >= HEADER_BYTES) {
      uint8_t *c = malloc(n);
      memcpy(c, o.b, n);
      put64(c + H_TOTAL, n);
      expect_error(c, n, EM_ERR_CORRUPT, NULL);
      free(c);
    }
  }
  free_blob(&o);
}

/* ---- the table embedded in this build -------------------------------------- */

typedef struct file_bytes { uint8_t *data; size_t size; } file_bytes;

static int read_all(const char *path, file_bytes *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  out->data = buf;
  out->size = n;
  return 0;
}

static const char *src_dir(void) {
  const char *d = getenv("EMBER_SRC_DIR");
  return d && *d ? d : ".";
}

static const char *build_dir(void) {
  const char *d = getenv("EMBER_BUILD_DIR");
  return d && *d ? d : "build";
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

/* Names of files in dir ending in suffix, sorted; returns the count. */
static size_t list_files(const char *dir, const char *suffix, char names[][128], size_t cap) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0, sl = strlen(suffix);
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    size_t l = strlen(e->d_name);
    if (l > sl && l < 128 && !strcmp(e->d_name + l - sl, suffix)) snprintf(names[n++], 128, "%s", e->d_name);
  }
  closedir(d);
  qsort(names, n, 128, cmp_names);
  return n;
}

/* The kernels a .cu file defines: every "EM_GLOBAL void NAME(" in it, joined
 * with commas in file order. */
static void scan_kernels(const char *path, char *out, size_t cap) {
  /* The kernels a module defines, as the preprocessor sees them (a module may
   * generate its f32 and f64 kernels from one macro body): em_kernel.h turns
   * EM_GLOBAL into a marker under EM_LIST_KERNELS, as for
   * build-tools/kernel_wrappers.sh. */
  out[0] = '\0';
  char cmd[3000], dir[1400];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  snprintf(cmd, sizeof cmd, "cc -E -P -x c -DEM_LIST_KERNELS -I'%s' '%s' 2>/dev/null", dir, path);
  FILE *f = popen(cmd, "r");
  if (!f) fail_msg("cannot run the preprocessor: %s", cmd);
  size_t cap_text = 1 << 20, len_text = 0, got;
  char *text = malloc(cap_text + 1);
  assert_non_null(text);
  while ((got = fread(text + len_text, 1, cap_text - len_text, f)) > 0) {
    len_text += got;
    if (len_text == cap_text) {
      cap_text *= 2;
      text = realloc(text, cap_text + 1);
      assert_non_null(text);
    }
  }
  text[len_text] = '\0';
  if (pclose(f) != 0) fail_msg("preprocessing %s failed: %s", path, cmd);
  const char *key = "em_kernel_marker";
  for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
    const char *q = p + strlen(key);
    while (*q == ' ' || *q == '\n' || *q == '\t') q++;
    if (strncmp(q, "void", 4)) continue;
    q += 4;
    while (*q == ' ' || *q == '\n' || *q == '\t') q++;
    size_t n = strcspn(q, " \t\n(");
    size_t len = strlen(out);
    snprintf(out + len, cap - len, "%s%.*s", len ? "," : "", (int)n, q);
  }
  free(text);
}

/* Whether two comma-separated lists hold the same names (any order). */
static int same_name_set(const char *a, const char *b) {
  char x[8192], y[8192];
  snprintf(x, sizeof x, "%s", a);
  snprintf(y, sizeof y, "%s", b);
  size_t na = 0, nb = 0;
  for (char *s = NULL, *t = strtok_r(x, ",", &s); t; t = strtok_r(NULL, ",", &s)) {
    na++;
    char pat[300];
    snprintf(pat, sizeof pat, ",%s,", t);
    char wrapped[8200];
    snprintf(wrapped, sizeof wrapped, ",%s,", b);
    if (!strstr(wrapped, pat)) return 0;
  }
  for (char *s = NULL, *t = strtok_r(y, ",", &s); t; t = strtok_r(NULL, ",", &s)) nb++;
  return na == nb;
}

static size_t image_count(void) {
  size_t n = 0;
  assert_int_equal(em_image_count(&n), EM_OK);
  return n;
}

static em_image_info image_at(size_t i) {
  em_image_info img;
  assert_int_equal(em_image_get(i, &img), EM_OK);
  return img;
}

/* The image's bytes (em_image_read, which checks them against the hash). */
static uint8_t *image_bytes(const em_image_info *img) {
  void *bytes = NULL;
  if (em_image_read(img, &bytes) != EM_OK) fail_msg("em_image_read: %s", em_last_error());
  return bytes;
}

/* Text images are handed to NVRTC and the driver's JIT as C strings, so the
 * image is the file followed by its terminating NUL. */
static int is_file_text(const em_image_info *img, const file_bytes *f) {
  if (img->size != f->size + 1) return 0;
  uint8_t *d = image_bytes(img);
  int same = !memcmp(d, f->data, f->size) && d[f->size] == 0;
  free(d);
  return same;
}

static void test_embedded_table_integrity(void **state) {
  (void)state;
  size_t n = image_count();
  assert_true(n > 0);
  for (size_t i = 0; i < n; i++) {
    em_image_info img = image_at(i);
    assert_non_null(img.module);
    assert_non_null(img.producer);
    assert_non_null(img.kernels);
    assert_non_null(img.stored);
    assert_true(img.size > 0);
    assert_true(img.storage == EM_IMAGE_STORED || img.storage == EM_IMAGE_ZSTD);
    if (img.storage == EM_IMAGE_STORED) assert_int_equal(img.stored_size, img.size);
    char *d = (char *)image_bytes(&img);
    if (XXH3_64bits(d, (size_t)img.size) != img.hash)
      fail_msg("image %zu (%s) hash does not match its bytes", i, img.module);
    switch (img.kind) {
    case EM_IMAGE_CUBIN:
      assert_memory_equal(d, "\x7f" "ELF", 4);
      assert_true(img.kernels[0] != '\0');
      assert_true(img.arch >= 30);
      assert_true(img.min_driver > 0);
      break;
    case EM_IMAGE_PTX:
      assert_int_equal(d[img.size - 1], '\0');
      assert_non_null(strstr(d, ".version"));
      assert_true(img.kernels[0] != '\0');
      assert_true(img.ptx_isa > 0);
      assert_true(img.min_driver > 0);
      break;
    case EM_IMAGE_SOURCE:
    case EM_IMAGE_HEADER:
      assert_int_equal(d[img.size - 1], '\0');
      assert_int_equal(img.arch, 0);
      assert_int_equal(img.min_driver, 0); /* dispatch.h: 0 for sources */
      break;
    default:
      fail_msg("image %zu has kind %d", i, (int)img.kind);
    }
    free(d);
  }
  /* Past the end: not found, with a message. */
  em_image_info img;
  assert_int_equal(em_image_get(n, &img), EM_ERR_NOT_FOUND);
  assert_int_equal(em_image_count(NULL), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_image_get(0, NULL), EM_ERR_INVALID_ARGUMENT);
}

/* For each kernels/<m>.cu: its source, byte for byte; a legacy compute_35
 * PTX (EM_IMAGE_LEGACY, ISA 3.2); and every compiled image lists exactly the
 * kernels the source defines. */
static void test_embedded_table_per_module(void **state) {
  (void)state;
  char dir[1024], names[64][128];
  snprintf(dir, sizeof dir, "%s/kernels", src_dir());
  size_t n_mod = list_files(dir, ".cu", names, 64);
  assert_true(n_mod > 0);
  size_t n = image_count();
  for (size_t m = 0; m < n_mod; m++) {
    char module[128], path[1400], expect_kernels[8192];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(names[m]) - 3), names[m]);
    snprintf(path, sizeof path, "%s/%s", dir, names[m]);
    file_bytes src;
    assert_int_equal(read_all(path, &src), 0);
    scan_kernels(path, expect_kernels, sizeof expect_kernels);
    assert_true(expect_kernels[0] != '\0');
    int sources = 0, legacy = 0, compiled = 0;
    for (size_t i = 0; i < n; i++) {
      em_image_info img = image_at(i);
      if (strcmp(img.module, module)) continue;
      if (img.kind == EM_IMAGE_SOURCE) {
        sources++;
        if (!is_file_text(&img, &src)) fail_msg("the embedded source of %s differs from %s", module, path);
        assert_string_equal(img.producer, "source");
      }
      if (img.kind == EM_IMAGE_PTX && (img.flags & EM_IMAGE_LEGACY)) {
        legacy++;
        assert_int_equal(img.arch, 35);
        assert_int_equal(img.ptx_isa, 32);
        assert_int_equal(img.variant, 0);
        char *text = (char *)image_bytes(&img);
        assert_non_null(strstr(text, ".version 3.2\n"));
        assert_non_null(strstr(text, ".target sm_35\n"));
        free(text);
      }
      if (img.kind == EM_IMAGE_PTX || img.kind == EM_IMAGE_CUBIN || img.kind == EM_IMAGE_SOURCE) {
        compiled += img.kind != EM_IMAGE_SOURCE;
        if (!same_name_set(img.kernels, expect_kernels))
          fail_msg("%s image %zu lists kernels \"%s\"; %s defines \"%s\"", module, i, img.kernels, path,
                   expect_kernels);
      }
    }
    if (sources != 1) fail_msg("module %s has %d source images, expected 1", module, sources);
    if (legacy != 1) fail_msg("module %s has %d legacy PTX images, expected 1", module, legacy);
    assert_true(compiled >= 1);
    free(src.data);
  }
  /* Every header kernels/ has is there too, under its file name. */
  size_t n_hdr = list_files(dir, ".h", names, 64);
  for (size_t h = 0; h < n_hdr; h++) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, names[h]);
    file_bytes f;
    assert_int_equal(read_all(path, &f), 0);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
      em_image_info img = image_at(i);
      if (img.kind == EM_IMAGE_HEADER && !strcmp(img.module, names[h])) found += is_file_text(&img, &f);
    }
    if (found != 1) fail_msg("header %s: %d matching images, expected 1", names[h], found);
    free(f.data);
  }
}

/* Each committed PTX file ptx/<m>.<arch>.ptx is embedded byte for byte. */
static void test_embedded_ptx_matches_committed_files(void **state) {
  (void)state;
  char dir[1024], names[128][128];
  snprintf(dir, sizeof dir, "%s/ptx", src_dir());
  size_t n_ptx = list_files(dir, ".ptx", names, 128), n = image_count();
  assert_true(n_ptx > 0);
  for (size_t k = 0; k < n_ptx; k++) {
    char path[1400], module[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    snprintf(module, sizeof module, "%.*s", (int)strcspn(names[k], "."), names[k]);
    file_bytes f;
    assert_int_equal(read_all(path, &f), 0);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
      em_image_info img = image_at(i);
      if (img.kind == EM_IMAGE_PTX && !strcmp(img.module, module)) found += is_file_text(&img, &f);
    }
    if (found != 1) fail_msg("%s: %d embedded PTX images with its bytes, expected 1", path, found);
    free(f.data);
  }
}

/* With nvcc at build time the build folder holds kernels/<m>.sm_<N>.cubin:
 * each one is in the table with the same bytes, module and SM, and every
 * cubin in the table is one of them (or of kernels/legacy/, NVCC_LEGACY's,
 * kernels/ptxas/, the legacy PTX through PTXAS_LEGACY, or kernels/nvrtc-X.Y/,
 * the build's NVRTC X.Y cubins, whose toolkit must then be X.Y). */
static void test_embedded_cubins_match_build(void **state) {
  (void)state;
  char dirs[8][1024], names[256][128];
  int dir_toolkit[8] = {0}, n_dirs = 3;
  snprintf(dirs[0], sizeof dirs[0], "%s/kernels", build_dir());
  snprintf(dirs[1], sizeof dirs[1], "%s/kernels/legacy", build_dir());
  snprintf(dirs[2], sizeof dirs[2], "%s/kernels/ptxas", build_dir());
  DIR *kd = opendir(dirs[0]);
  for (struct dirent *e; kd && (e = readdir(kd)) != NULL;) {
    int major, minor;
    char tail;
    if (sscanf(e->d_name, "nvrtc-%d.%d%c", &major, &minor, &tail) != 2 || n_dirs == 8) continue;
    snprintf(dirs[n_dirs], sizeof dirs[n_dirs], "%s/kernels/%s", build_dir(), e->d_name);
    dir_toolkit[n_dirs++] = major * 1000 + minor * 10;
  }
  if (kd) closedir(kd);
  size_t n = image_count(), files = 0;
  int *matched = calloc(n ? n : 1, sizeof *matched);
  for (int d = 0; d < n_dirs; d++) {
    size_t nc = list_files(dirs[d], ".cubin", names, 256);
    for (size_t k = 0; k < nc; k++, files++) {
      char path[1400], module[128];
      snprintf(path, sizeof path, "%s/%s", dirs[d], names[k]);
      snprintf(module, sizeof module, "%.*s", (int)strcspn(names[k], "."), names[k]);
      const char *sm = strstr(names[k], ".sm_");
      assert_non_null(sm);
      int arch = atoi(sm + 4);
      file_bytes f;
      assert_int_equal(read_all(path, &f), 0);
      int found = 0;
      for (size_t i = 0; i < n; i++) {
        em_image_info img = image_at(i);
        if (img.kind != EM_IMAGE_CUBIN || img.size != f.size) continue;
        uint8_t *bytes = image_bytes(&img);
        int same = !memcmp(bytes, f.data, f.size);
        free(bytes);
        if (!same) continue;
        found++;
        matched[i] = 1;
        assert_string_equal(img.module, module);
        assert_int_equal(img.arch, arch);
        if (dir_toolkit[d]) assert_int_equal(img.toolkit, dir_toolkit[d]);
      }
      if (found != 1) fail_msg("%s: %d embedded cubins with its bytes, expected 1", path, found);
      free(f.data);
    }
  }
  if (files == 0) {
    free(matched);
    skip(); /* built without nvcc: no cubins to compare */
  }
  for (size_t i = 0; i < n; i++) {
    em_image_info img = image_at(i);
    if (img.kind == EM_IMAGE_CUBIN && !matched[i])
      fail_msg("embedded cubin %zu (%s sm_%d) matches no file under %s or its legacy/, ptxas/ or nvrtc-*/", i,
               img.module, img.arch, dirs[0]);
  }
  free(matched);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_empty_table),
      cmocka_unit_test(test_larger_header_and_entries_are_skipped),
      cmocka_unit_test(test_trailing_bytes_are_ignored),
      cmocka_unit_test(test_short_header),
      cmocka_unit_test(test_bad_header_fields),
      cmocka_unit_test(test_bad_strings),
      cmocka_unit_test(test_bad_entry_fields),
      cmocka_unit_test(test_bad_storage_fields),
      cmocka_unit_test(test_version1_table_is_read),
      cmocka_unit_test(test_read_checks_the_image_hash),
      cmocka_unit_test(test_every_frame_byte_flip),
      cmocka_unit_test(test_image_head),
      cmocka_unit_test(test_every_truncation),
      cmocka_unit_test(test_embedded_table_integrity),
      cmocka_unit_test(test_embedded_table_per_module),
      cmocka_unit_test(test_embedded_ptx_matches_committed_files),
      cmocka_unit_test(test_embedded_cubins_match_build),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
