/* Tests of runtime/fatbin.c against fatbins made by nvcc 13.0. Every
 * expected value comes from the hand reading in tests/fixtures/README.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "fatbin.h"

/* ---- fixtures ---- */

#include "unit/test_files.h"

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- collecting visitor ---- */

#define MAX_SEEN 16
typedef struct seen {
  int n;
  int stop_after; /* 0 = never stop */
  em_fatbin_entry e[MAX_SEEN];
} seen;

static int collect(const em_fatbin_entry *e, void *ctx) {
  seen *s = ctx;
  if (s->n < MAX_SEEN) s->e[s->n] = *e;
  s->n++;
  return s->stop_after && s->n >= s->stop_after;
}

/* One expected entry, straight from the README table. */
typedef struct want {
  size_t offset;
  int kind;
  uint32_t hdr;
  uint64_t payload;
  uint64_t csize;
  int major, minor, arch;
  uint64_t flags;
  uint64_t usize;
  em_fatbin_compression comp;
  char variant;
} want;

static void check_entries(const char *file, const want *w, int n, size_t container_size) {
  blob b = load_fixture(file);
  assert_int_equal(b.size, container_size + 16);
  seen s = {0};
  assert_int_equal(em_fatbin_walk(b.data, b.size, collect, &s), EM_OK);
  assert_int_equal(s.n, n);
  for (int i = 0; i < n; i++) {
    const em_fatbin_entry *e = &s.e[i];
    assert_int_equal(e->container, 0);
    assert_int_equal(e->index, i);
    assert_int_equal(e->offset, w[i].offset);
    assert_int_equal(e->kind, w[i].kind);
    assert_int_equal(e->version_major, w[i].major);
    assert_int_equal(e->version_minor, w[i].minor);
    assert_int_equal(e->arch, w[i].arch);
    assert_int_equal(e->flags, w[i].flags);
    assert_int_equal(e->compression, w[i].comp);
    assert_int_equal(e->variant, w[i].variant);
    assert_ptr_equal(e->payload, b.data + w[i].offset + w[i].hdr);
    assert_int_equal(e->payload_size, w[i].payload);
    assert_int_equal(e->compressed_size, w[i].csize);
    assert_int_equal(e->uncompressed_size, w[i].usize);
  }
  free(b.data);
}

#define ZSTD_F 0x8011u
#define LZ4_F 0x2011u
#define PLAIN_F 0x11u

static void test_walk_nocomp(void **state) {
  (void)state;
  const want w[] = {
      {0x10, 2, 64, 0x12e8, 0, 1, 8, 80, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
      {0x1338, 1, 80, 0x5c8, 0, 9, 0, 90, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
      {0x1950, 2, 64, 0x15e8, 0, 1, 8, 90, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
  };
  check_entries("k_nocomp.fatbin", w, 3, 0x2f68);
}

static void test_walk_default_zstd_ptx(void **state) {
  (void)state;
  const want w[] = {
      {0x10, 2, 64, 0x12e8, 0, 1, 8, 80, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
      {0x1338, 1, 80, 0x1c8, 0x1c5, 9, 0, 90, ZSTD_F, 0x5c2, EM_FATBIN_ZSTD, 0},
      {0x1550, 2, 64, 0x15e8, 0, 1, 8, 90, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
  };
  check_entries("k_default.fatbin", w, 3, 0x2b68);
}

static void test_walk_compress_all(void **state) {
  (void)state;
  const want w[] = {
      {0x10, 2, 64, 0x450, 0x44a, 1, 8, 80, ZSTD_F, 0x12e8, EM_FATBIN_ZSTD, 0},
      {0x4a0, 1, 80, 0x1c8, 0x1c5, 9, 0, 90, ZSTD_F, 0x5c2, EM_FATBIN_ZSTD, 0},
      {0x6b8, 2, 64, 0x4c8, 0x4c7, 1, 8, 90, ZSTD_F, 0x15e8, EM_FATBIN_ZSTD, 0},
  };
  check_entries("k_all.fatbin", w, 3, 0xbb0);
}

static void test_walk_lz4(void **state) {
  (void)state;
  const want w[] = {
      {0x10, 2, 64, 0x630, 0x62f, 1, 8, 80, LZ4_F, 0x12e8, EM_FATBIN_LZ4, 0},
      {0x680, 1, 80, 0x278, 0x274, 9, 0, 90, LZ4_F, 0x5c2, EM_FATBIN_LZ4, 0},
      {0x948, 2, 64, 0x6d8, 0x6d3, 1, 8, 90, LZ4_F, 0x15e8, EM_FATBIN_LZ4, 0},
  };
  check_entries("k_lz4.fatbin", w, 3, 0x1050);
}

static void test_walk_speed(void **state) {
  (void)state;
  const want w[] = {
      {0x10, 2, 64, 0x12e8, 0, 1, 8, 80, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
      {0x1338, 1, 80, 0x278, 0x274, 9, 0, 90, LZ4_F, 0x5c2, EM_FATBIN_LZ4, 0},
      {0x1600, 2, 64, 0x15e8, 0, 1, 8, 90, PLAIN_F, 0, EM_FATBIN_UNCOMPRESSED, 0},
  };
  check_entries("k_speed.fatbin", w, 3, 0x2c18);
}

static void test_walk_family_and_arch_variants(void **state) {
  (void)state;
  const want w[] = {
      {0x10, 2, 112, 0x2108, 0, 1, 8, 100, 0x1200011u, 0, EM_FATBIN_UNCOMPRESSED, 'f'},
      {0x2188, 1, 80, 0x1d8, 0x1d1, 9, 0, 120, 0x108011u, 0x5e7, EM_FATBIN_ZSTD, 'a'},
      {0x23b0, 2, 112, 0x2108, 0, 1, 8, 120, 0x1100011u, 0, EM_FATBIN_UNCOMPRESSED, 'a'},
  };
  check_entries("k_fa.fatbin", w, 3, 0x4518);
}

/* ---- payload bytes ---- */

/* Returns entry `index` of a fixture already walked into s. */
static em_fatbin_entry entry_of(const blob *b, int index) {
  seen s = {0};
  assert_int_equal(em_fatbin_walk(b->data, b->size, collect, &s), EM_OK);
  assert_true(index < s.n);
  return s.e[index];
}

/* The decompressed payload must equal the bytes nvcc stored uncompressed in
 * k_nocomp.fatbin (README: zstd -d and a separate LZ4 decoder agreed). */
static void check_same_as_nocomp(const char *file, int index, size_t nocomp_off, size_t len) {
  blob b = load_fixture(file), plain = load_fixture("k_nocomp.fatbin");
  em_fatbin_entry e = entry_of(&b, index);
  void *out = NULL;
  size_t n = 0;
  assert_int_equal(em_fatbin_entry_bytes(&e, 1u << 20, &out, &n), EM_OK);
  assert_int_equal(n, len);
  assert_memory_equal(out, plain.data + nocomp_off, len);
  free(out);
  free(b.data);
  free(plain.data);
}

static void test_bytes_zstd(void **state) {
  (void)state;
  check_same_as_nocomp("k_all.fatbin", 0, 0x50, 0x12e8);    /* sm_80 cubin */
  check_same_as_nocomp("k_all.fatbin", 2, 0x1990, 0x15e8);  /* sm_90 cubin */
  check_same_as_nocomp("k_default.fatbin", 1, 0x1388, 0x5c2); /* PTX text */
}

static void test_bytes_lz4(void **state) {
  (void)state;
  check_same_as_nocomp("k_lz4.fatbin", 0, 0x50, 0x12e8);
  check_same_as_nocomp("k_lz4.fatbin", 1, 0x1388, 0x5c2);
  check_same_as_nocomp("k_lz4.fatbin", 2, 0x1990, 0x15e8);
  check_same_as_nocomp("k_speed.fatbin", 1, 0x1388, 0x5c2);
}

static void test_bytes_uncompressed_copy(void **state) {
  (void)state;
  blob b = load_fixture("k_nocomp.fatbin"), cubin = load_fixture("k_sm90.cubin");
  em_fatbin_entry e = entry_of(&b, 2);
  void *out = NULL;
  size_t n = 0;
  assert_int_equal(em_fatbin_entry_bytes(&e, 1u << 20, &out, &n), EM_OK);
  assert_int_equal(n, cubin.size); /* README: this payload is k_sm90.cubin, 5608 bytes */
  assert_memory_equal(out, cubin.data, n);
  assert_ptr_not_equal(out, e.payload); /* a copy, not the input */
  free(out);
  /* The PTX payload holds the text, a NUL and padding: README says 8 newlines then .version. */
  e = entry_of(&b, 1);
  assert_int_equal(em_fatbin_entry_bytes(&e, 1u << 20, &out, &n), EM_OK);
  assert_int_equal(n, 0x5c8);
  static const char head[] = "\n\n\n\n\n\n\n\n.version 9.0\n.target sm_90\n";
  assert_memory_equal(out, head, sizeof head - 1);
  assert_int_equal(((char *)out)[0x5c2], '\0');
  free(out);
  free(b.data);
  free(cubin.data);
}

static void test_bytes_refuses_over_max(void **state) {
  (void)state;
  blob b = load_fixture("k_all.fatbin");
  em_fatbin_entry e = entry_of(&b, 0);
  void *out = (void *)1;
  size_t n = 7;
  assert_int_not_equal(em_fatbin_entry_bytes(&e, 0x12e8 - 1, &out, &n), EM_OK);
  assert_null(out);
  assert_int_equal(n, 0);
  assert_int_equal(em_fatbin_entry_bytes(&e, 0x12e8, &out, &n), EM_OK);
  free(out);
  blob p = load_fixture("k_nocomp.fatbin");
  e = entry_of(&p, 0);
  assert_int_not_equal(em_fatbin_entry_bytes(&e, 0x12e8 - 1, &out, &n), EM_OK);
  assert_null(out);
  free(b.data);
  free(p.data);
}

static void test_bytes_bad_sizes(void **state) {
  (void)state;
  const char *files[] = {"k_all.fatbin", "k_lz4.fatbin"};
  for (int f = 0; f < 2; f++) {
    blob b = load_fixture(files[f]);
    em_fatbin_entry e = entry_of(&b, 0), bad;
    void *out = NULL;
    size_t n = 0;
    /* Header claims one byte more than the stream holds. */
    bad = e;
    bad.uncompressed_size += 1;
    assert_int_equal(em_fatbin_entry_bytes(&bad, 1u << 20, &out, &n), EM_ERR_CORRUPT);
    assert_null(out);
    /* ... one byte less. */
    bad = e;
    bad.uncompressed_size -= 1;
    assert_int_equal(em_fatbin_entry_bytes(&bad, 1u << 20, &out, &n), EM_ERR_CORRUPT);
    /* Stream cut short. */
    bad = e;
    bad.compressed_size -= 16;
    assert_int_equal(em_fatbin_entry_bytes(&bad, 1u << 20, &out, &n), EM_ERR_CORRUPT);
    /* Compressed size larger than the stored payload. */
    bad = e;
    bad.compressed_size = bad.payload_size + 1;
    assert_int_equal(em_fatbin_entry_bytes(&bad, 1u << 20, &out, &n), EM_ERR_CORRUPT);
    assert_null(out);
    free(b.data);
  }
}

static void test_bytes_garbage_stream(void **state) {
  (void)state;
  blob b = load_fixture("k_all.fatbin");
  em_fatbin_entry e = entry_of(&b, 0);
  put32(b.data + 0x50, 0xdeadbeef); /* destroy the zstd magic 28 B5 2F FD */
  void *out = NULL;
  size_t n = 0;
  assert_int_equal(em_fatbin_entry_bytes(&e, 1u << 20, &out, &n), EM_ERR_CORRUPT);
  assert_null(out);
  free(b.data);
}

/* ---- walking: several containers, early stop ---- */

static void test_walk_back_to_back_containers(void **state) {
  (void)state;
  blob a = load_fixture("k_all.fatbin"), c = load_fixture("k_fa.fatbin");
  size_t n = a.size + c.size;
  uint8_t *both = malloc(n);
  memcpy(both, a.data, a.size);
  memcpy(both + a.size, c.data, c.size);
  seen s = {0};
  assert_int_equal(em_fatbin_walk(both, n, collect, &s), EM_OK);
  assert_int_equal(s.n, 6);
  assert_int_equal(s.e[3].container, 1);
  assert_int_equal(s.e[3].index, 0);
  assert_int_equal(s.e[3].offset, a.size + 0x10);
  assert_int_equal(s.e[3].arch, 100);
  assert_int_equal(s.e[5].offset, a.size + 0x23b0);
  assert_ptr_equal(s.e[5].payload, both + a.size + 0x23b0 + 112);
  free(both);
  free(a.data);
  free(c.data);
}

static void test_walk_stops_when_asked(void **state) {
  (void)state;
  blob b = load_fixture("k_default.fatbin");
  seen s = {0};
  s.stop_after = 2;
  assert_int_equal(em_fatbin_walk(b.data, b.size, collect, &s), EM_OK);
  assert_int_equal(s.n, 2);
  assert_int_equal(em_fatbin_walk(b.data, b.size, NULL, NULL), EM_OK);
  free(b.data);
}

/* ---- malformed input ---- */

/* Every proper prefix must be refused: the container size always claims the whole file. */
static void test_truncated_at_every_length(void **state) {
  (void)state;
  const char *files[] = {"k_all.fatbin", "k_lz4.fatbin"};
  for (int f = 0; f < 2; f++) {
    blob b = load_fixture(files[f]);
    for (size_t len = 0; len < b.size; len++) {
      uint8_t *copy = malloc(len ? len : 1); /* exact size, so a sanitizer sees any overread */
      memcpy(copy, b.data, len);
      seen s = {0};
      em_status st = em_fatbin_walk(copy, len, collect, &s);
      if (st != EM_ERR_CORRUPT) fail_msg("%s prefix %zu: status %d, expected EM_ERR_CORRUPT", files[f], len, st);
      assert_int_equal(s.n, 0);
      free(copy);
    }
    free(b.data);
  }
}

static em_status walk_patched(const char *file, size_t off, int width, uint64_t value, int *entries) {
  blob b = load_fixture(file);
  if (width == 2) {
    b.data[off] = (uint8_t)value;
    b.data[off + 1] = (uint8_t)(value >> 8);
  } else if (width == 4) {
    put32(b.data + off, (uint32_t)value);
  } else {
    put64(b.data + off, value);
  }
  seen s = {0};
  em_status st = em_fatbin_walk(b.data, b.size, collect, &s);
  if (entries) *entries = s.n;
  free(b.data);
  return st;
}

static void test_bad_magic(void **state) {
  (void)state;
  assert_int_equal(walk_patched("k_default.fatbin", 0, 4, 0xBA55ED51u, NULL), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "offset 0"));
  assert_int_equal(walk_patched("k_default.fatbin", 0, 4, 0x464c457fu, NULL), EM_ERR_CORRUPT); /* an ELF */
}

static void test_sizes_past_the_end(void **state) {
  (void)state;
  int n = -1;
  /* container size one byte over the file */
  assert_int_equal(walk_patched("k_all.fatbin", 8, 8, 0xbb1, &n), EM_ERR_CORRUPT);
  assert_int_equal(walk_patched("k_all.fatbin", 8, 8, UINT64_MAX, &n), EM_ERR_CORRUPT);
  /* container header size past the end / too small */
  assert_int_equal(walk_patched("k_all.fatbin", 6, 2, 0xffff, &n), EM_ERR_CORRUPT);
  assert_int_equal(walk_patched("k_all.fatbin", 6, 2, 8, &n), EM_ERR_CORRUPT);
  /* first entry's payload size: huge, and one past its container */
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 8, 8, UINT64_MAX, &n), EM_ERR_CORRUPT);
  assert_non_null(strstr(em_last_error(), "offset 16"));
  assert_int_equal(n, 0);
  /* last entry (0x6b8, hdr 64): payload may be at most 0xbc0 - 0x6f8 = 0x4c8 */
  assert_int_equal(walk_patched("k_all.fatbin", 0x6b8 + 8, 8, 0x4c9, &n), EM_ERR_CORRUPT);
  assert_int_equal(n, 2); /* the two entries before were reported */
  /* entry header size: below 64, and past the container */
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 4, 4, 63, &n), EM_ERR_CORRUPT);
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 4, 4, 0xffffffffu, &n), EM_ERR_CORRUPT);
  /* compressed size larger than the payload */
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 0x10, 4, 0x451, &n), EM_ERR_CORRUPT);
}

static void test_zero_sizes(void **state) {
  (void)state;
  int n = -1;
  assert_int_equal(walk_patched("k_all.fatbin", 8, 8, 0, &n), EM_ERR_CORRUPT);        /* empty container */
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 8, 8, 0, &n), EM_ERR_CORRUPT); /* empty payload */
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 0x10, 4, 0, &n), EM_ERR_CORRUPT); /* zstd, csize 0 */
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 0x38, 8, 0, &n), EM_ERR_CORRUPT); /* zstd, usize 0 */
  em_fatbin_entry e;
  memset(&e, 0, sizeof e);
  void *out = NULL;
  size_t sz = 0;
  assert_int_not_equal(em_fatbin_entry_bytes(&e, 100, &out, &sz), EM_OK);
  assert_null(out);
  assert_int_equal(em_fatbin_walk(NULL, 0, collect, NULL), EM_ERR_CORRUPT);
}

static void test_contradictory_flags(void **state) {
  (void)state;
  assert_int_equal(walk_patched("k_all.fatbin", 0x10 + 0x28, 8, 0xa011, NULL), EM_ERR_CORRUPT);   /* LZ4 + zstd */
  assert_int_equal(walk_patched("k_nocomp.fatbin", 0x10 + 0x28, 8, 0x300011, NULL), EM_ERR_CORRUPT); /* a + f */
}

static void test_trailing_bytes_after_container(void **state) {
  (void)state;
  blob b = load_fixture("k_all.fatbin");
  uint8_t *more = calloc(1, b.size + 8);
  memcpy(more, b.data, b.size);
  seen s = {0};
  assert_int_equal(em_fatbin_walk(more, b.size + 8, collect, &s), EM_ERR_CORRUPT);
  assert_int_equal(s.n, 3); /* everything before the junk was reported */
  assert_non_null(strstr(em_last_error(), "offset 3008"));
  free(more);
  free(b.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_walk_nocomp),
      cmocka_unit_test(test_walk_default_zstd_ptx),
      cmocka_unit_test(test_walk_compress_all),
      cmocka_unit_test(test_walk_lz4),
      cmocka_unit_test(test_walk_speed),
      cmocka_unit_test(test_walk_family_and_arch_variants),
      cmocka_unit_test(test_bytes_zstd),
      cmocka_unit_test(test_bytes_lz4),
      cmocka_unit_test(test_bytes_uncompressed_copy),
      cmocka_unit_test(test_bytes_refuses_over_max),
      cmocka_unit_test(test_bytes_bad_sizes),
      cmocka_unit_test(test_bytes_garbage_stream),
      cmocka_unit_test(test_walk_back_to_back_containers),
      cmocka_unit_test(test_walk_stops_when_asked),
      cmocka_unit_test(test_truncated_at_every_length),
      cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_sizes_past_the_end),
      cmocka_unit_test(test_zero_sizes),
      cmocka_unit_test(test_contradictory_flags),
      cmocka_unit_test(test_trailing_bytes_after_container),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
