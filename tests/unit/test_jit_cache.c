/* Tests of the JIT disk cache (runtime/jit_cache.h).
 *
 * Each test runs in a fresh directory made with mkdtemp under /tmp. Expected
 * values come from the entry layout documented at the top of
 * runtime/jit_cache.c (checked here by an independent parser that uses
 * xxHash directly), from stat() of the files, and from payloads the test
 * generates itself; never from the cache's own answers. Times are set with
 * utimensat, never waited for. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "jit_cache.h"
#include "error.h"

#define HDR 40 /* magic 8, version 4, key length 4, payload length 8, checksum 16 */
#define T0 1000000000L /* 2001-09-09: older than any real use */

/* ---- helpers ----------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void rm_rf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int setup_dir(void **state) {
  char tmpl[] = "/tmp/tjc.XXXXXX";
  if (!mkdtemp(tmpl)) return -1;
  *state = strdup(tmpl);
  return *state ? 0 : -1;
}

static int teardown_dir(void **state) {
  rm_rf(*state);
  free(*state);
  return 0;
}

static char *path_join(const char *a, const char *b) {
  char *p;
  assert_true(asprintf(&p, "%s/%s", a, b) > 0);
  return p;
}

static em_jit_key base_key(void) {
  em_jit_key k = {.kind = "ptx-jit",
                  .input_hash = 0x0123456789abcdefull,
                  .options = "-O3",
                  .sm = 86,
                  .variant = 0,
                  .driver_version = 12040,
                  .tool_version = 0};
  return k;
}

static em_jit_key numbered_key(uint64_t i) {
  em_jit_key k = base_key();
  k.input_hash = 0x1000 + i;
  return k;
}

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static unsigned char *make_payload(size_t n, uint64_t seed) {
  unsigned char *p = malloc(n ? n : 1);
  assert_non_null(p);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)xorshift(&s);
  return p;
}

static em_jit_cache *open_ok(const char *dir, uint64_t cap) {
  em_jit_cache *c = NULL;
  char why[512] = "";
  assert_int_equal(em_jit_cache_open(dir, cap, &c, why, sizeof why), EM_OK);
  if (!c) fail_msg("cache unexpectedly disabled: %s", why);
  return c;
}

static int is_hex32(const char *s) {
  for (int i = 0; i < 32; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return s[32] == '\0';
}

/* Names in dir that look like entries (want_tmp 0) or temp files (1). */
static size_t list_names(const char *dir, int want_tmp, char names[][64], size_t cap) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int match = want_tmp ? !strncmp(e->d_name, ".tmp.", 5) : is_hex32(e->d_name);
    if (!match) continue;
    if (names && n < cap) snprintf(names[n], 64, "%.63s", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

/* Path of the one entry in dir (fails the test otherwise). */
static char *only_entry(const char *dir) {
  char names[4][64];
  assert_int_equal(list_names(dir, 0, names, 4), 1);
  return path_join(dir, names[0]);
}

/* Puts key and returns the name of the file that appeared for it. */
static void put_and_name(em_jit_cache *c, const char *dir, const em_jit_key *k, const void *data, size_t n,
                         char out[64]) {
  char before[64][64], after[64][64];
  size_t nb = list_names(dir, 0, before, 64);
  assert_int_equal(em_jit_cache_put(c, k, data, n), EM_OK);
  size_t na = list_names(dir, 0, after, 64);
  assert_true(na <= 64 && nb <= 64);
  out[0] = '\0';
  for (size_t i = 0; i < na; i++) {
    int seen = 0;
    for (size_t j = 0; j < nb; j++) seen |= !strcmp(after[i], before[j]);
    if (!seen) snprintf(out, 64, "%.63s", after[i]);
  }
  assert_true(out[0] != '\0');
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long len = ftell(f);
  assert_true(len >= 0);
  rewind(f);
  unsigned char *b = malloc((size_t)len + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void patch_file(const char *path, long off, const void *bytes, size_t n) {
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
  close(fd);
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void set_mtime(const char *path, time_t sec) {
  struct timespec t[2] = {{sec, 0}, {sec, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static void expect_miss(em_jit_cache *c, const em_jit_key *k) {
  void *d = (void *)1;
  size_t n = 7;
  assert_int_equal(em_jit_cache_get(c, k, &d, &n), EM_ERR_NOT_FOUND);
  assert_null(d);
  assert_int_equal(n, 0);
}

static void expect_hit(em_jit_cache *c, const em_jit_key *k, const void *want, size_t want_n) {
  void *d = NULL;
  size_t n = 0;
  em_status s = em_jit_cache_get(c, k, &d, &n);
  if (s != EM_OK) fail_msg("expected a hit, got %s: %s", em_status_name(s), em_last_error());
  assert_int_equal(n, want_n);
  assert_memory_equal(d, want, want_n);
  free(d);
}

/* ---- basic round trip and the on-disk layout --------------------------- */

static void test_miss_put_hit(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  assert_string_equal(em_jit_cache_dir(c), dir);
  em_jit_key k = base_key();
  expect_miss(c, &k);
  unsigned char *p = make_payload(5000, 1);
  assert_int_equal(em_jit_cache_put(c, &k, p, 5000), EM_OK);
  expect_hit(c, &k, p, 5000);
  /* A second handle (another process in real use) sees the same entry. */
  em_jit_cache *c2 = open_ok(dir, 0);
  expect_hit(c2, &k, p, 5000);
  /* Replacing an entry keeps one file and serves the new bytes. */
  unsigned char *q = make_payload(123, 2);
  assert_int_equal(em_jit_cache_put(c, &k, q, 123), EM_OK);
  expect_hit(c2, &k, q, 123);
  assert_int_equal(list_names(dir, 0, NULL, 0), 1);
  /* An empty payload is a valid entry, distinct from a miss. */
  em_jit_key e = numbered_key(99);
  assert_int_equal(em_jit_cache_put(c, &e, NULL, 0), EM_OK);
  void *d = NULL;
  size_t n = 1;
  assert_int_equal(em_jit_cache_get(c, &e, &d, &n), EM_OK);
  assert_int_equal(n, 0);
  free(d);
  free(p);
  free(q);
  em_jit_cache_close(c);
  em_jit_cache_close(c2);
}

/* Parses the file by the documented layout, with xxHash called here. */
static void test_entry_layout(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  k.variant = 'a';
  k.sm = 90;
  k.tool_version = 12080;
  k.kind = "nvrtc";
  unsigned char *p = make_payload(777, 3);
  assert_int_equal(em_jit_cache_put(c, &k, p, 777), EM_OK);
  char *path = only_entry(dir);
  size_t n;
  unsigned char *f = read_file(path, &n);
  assert_true(n >= HDR);
  assert_memory_equal(f, "EMBERJIT", 8);
  assert_int_equal(le32(f + 8), EM_JIT_CACHE_FORMAT);
  uint32_t klen = le32(f + 12);
  uint64_t plen = le64(f + 16);
  assert_int_equal(plen, 777);
  assert_int_equal(n, HDR + klen + plen);
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits(p, 777));
  assert_memory_equal(f + 24, canon.digest, 16);
  assert_memory_equal(f + HDR + klen, p, 777);
  /* The key text names every field. */
  char *text = strndup((char *)f + HDR, klen);
  const char *want[] = {"kind=5:nvrtc", "input=0123456789abcdef", "options=3:-O3", "sm=90",
                        "variant=a", "driver=12040", "tool=12080", "format=1"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(text, want[i])) fail_msg("key text lacks \"%s\":\n%s", want[i], text);
  /* File name = XXH3-128 of the key text, high half first. */
  XXH128_hash_t h = XXH3_128bits(f + HDR, klen);
  char name[64];
  snprintf(name, sizeof name, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
  assert_string_equal(path + strlen(dir) + 1, name);
  /* Entries are private to the user. */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 077, 0);
  free(text);
  free(f);
  free(path);
  free(p);
  em_jit_cache_close(c);
}

/* ---- key sensitivity --------------------------------------------------- */

static void test_key_sensitivity(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  unsigned char *p = make_payload(300, 4);
  assert_int_equal(em_jit_cache_put(c, &k, p, 300), EM_OK);
  expect_hit(c, &k, p, 300);

  em_jit_key v[10];
  size_t nv = 0;
  v[nv] = k, v[nv++].kind = "nvrtc";
  v[nv] = k, v[nv++].input_hash ^= 1;
  v[nv] = k, v[nv++].options = "-O2";
  v[nv] = k, v[nv++].options = NULL;
  v[nv] = k, v[nv++].sm = 87;
  v[nv] = k, v[nv++].variant = 'a';
  v[nv] = k, v[nv++].variant = 'f';
  v[nv] = k, v[nv++].driver_version = 12050;
  v[nv] = k, v[nv++].tool_version = 12040;
  for (size_t i = 0; i < nv; i++) expect_miss(c, &v[i]);
  /* Misses of other keys leave the base entry alone. */
  expect_hit(c, &k, p, 300);
  /* Each variant gets a file of its own. */
  for (size_t i = 0; i < nv; i++) assert_int_equal(em_jit_cache_put(c, &v[i], p, i), EM_OK);
  assert_int_equal(list_names(dir, 0, NULL, 0), nv + 1);
  for (size_t i = 0; i < nv; i++) expect_hit(c, &v[i], p, i);
  expect_hit(c, &k, p, 300);

  /* Fields must not run into each other: kind "ab" + options "c" differs
   * from kind "a" + options "bc". */
  em_jit_key x = k, y = k;
  x.kind = "ab", x.options = "c";
  y.kind = "a", y.options = "bc";
  assert_int_equal(em_jit_cache_put(c, &x, p, 10), EM_OK);
  expect_miss(c, &y);
  /* Options with a newline cannot forge another field. */
  em_jit_key z = k, w = k;
  z.options = "-O3\nsm=75";
  w.sm = 75;
  assert_int_equal(em_jit_cache_put(c, &z, p, 11), EM_OK);
  expect_miss(c, &w);

  free(p);
  em_jit_cache_close(c);
}

static void test_invalid_arguments(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  void *d;
  size_t n;
  k.variant = 'x';
  assert_int_equal(em_jit_cache_put(c, &k, "a", 1), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "variant"));
  assert_int_equal(em_jit_cache_get(c, &k, &d, &n), EM_ERR_INVALID_ARGUMENT);
  k = base_key();
  k.kind = NULL;
  assert_int_equal(em_jit_cache_put(c, &k, "a", 1), EM_ERR_INVALID_ARGUMENT);
  k = base_key();
  assert_int_equal(em_jit_cache_put(c, &k, NULL, 1), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_jit_cache_put(NULL, &k, "a", 1), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_jit_cache_get(NULL, &k, &d, &n), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(em_jit_cache_open(dir, 0, NULL, NULL, 0), EM_ERR_INVALID_ARGUMENT);
  assert_int_equal(list_names(dir, 0, NULL, 0), 0);
  em_jit_cache_close(c);
  em_jit_cache_close(NULL);
}

/* ---- damaged entries ----------------------------------------------------- */

/* Puts base_key with a 600-byte payload; returns the entry path and sizes. */
static char *put_base(em_jit_cache *c, const char *dir, unsigned char **payload, uint32_t *klen) {
  em_jit_key k = base_key();
  *payload = make_payload(600, 5);
  assert_int_equal(em_jit_cache_put(c, &k, *payload, 600), EM_OK);
  char *path = only_entry(dir);
  size_t n;
  unsigned char *f = read_file(path, &n);
  *klen = le32(f + 12);
  assert_int_equal(n, HDR + *klen + 600);
  free(f);
  return path;
}

static void flip_byte(const char *path, long off) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char b;
  assert_int_equal(pread(fd, &b, 1, off), 1);
  b ^= 0x40;
  assert_int_equal(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

static void test_corrupt_entry(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  unsigned char *p;
  uint32_t klen;
  /* Payload bytes at the start, middle and end; a checksum byte; a key byte. */
  long offs[] = {-1, -300, -600, 24, 39, HDR + 5};
  for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
    char *path = put_base(c, dir, &p, &klen);
    long off = offs[i] < 0 ? (long)(HDR + klen + 600) + offs[i] : offs[i];
    flip_byte(path, off);
    expect_miss(c, &k);
    if (exists(path)) fail_msg("corrupt entry (byte %ld flipped) was not deleted", off);
    assert_non_null(strstr(em_last_error(), "rejected"));
    free(path);
    free(p);
  }
  em_jit_cache_close(c);
}

static void test_truncated_entry(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  unsigned char *p;
  uint32_t klen;
  char *path = put_base(c, dir, &p, &klen);
  free(path);
  free(p);
  off_t full = HDR + klen + 600;
  off_t lens[] = {0, 1, 8, HDR - 1, HDR, HDR + klen / 2, HDR + klen, HDR + klen + 1, full - 1};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    path = put_base(c, dir, &p, &klen);
    assert_int_equal(truncate(path, lens[i]), 0);
    expect_miss(c, &k);
    if (exists(path)) fail_msg("entry truncated to %lld bytes was not deleted", (long long)lens[i]);
    free(path);
    free(p);
  }
  /* Trailing garbage is as wrong as a missing tail. */
  path = put_base(c, dir, &p, &klen);
  patch_file(path, full, "x", 1);
  expect_miss(c, &k);
  assert_false(exists(path));
  free(path);
  free(p);
  em_jit_cache_close(c);
}

static void test_foreign_entry(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  unsigned char *p;
  uint32_t klen;

  /* Other magic, everything else intact. */
  char *path = put_base(c, dir, &p, &klen);
  patch_file(path, 0, "\x7f" "ELF\2\1\1\0", 8);
  expect_miss(c, &k);
  assert_false(exists(path));
  free(path);
  free(p);

  /* Another format version. */
  path = put_base(c, dir, &p, &klen);
  unsigned char v[4] = {EM_JIT_CACHE_FORMAT + 1, 0, 0, 0};
  patch_file(path, 8, v, 4);
  expect_miss(c, &k);
  assert_false(exists(path));
  free(path);
  free(p);

  /* Arbitrary bytes under the right name. */
  path = put_base(c, dir, &p, &klen);
  write_file(path, "hello, world\n", 13);
  expect_miss(c, &k);
  assert_false(exists(path));
  free(path);
  free(p);

  /* A symlink under the right name is removed, its target untouched. */
  path = put_base(c, dir, &p, &klen);
  char *target = path_join(dir, "target");
  write_file(target, "keep", 4);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(symlink(target, path), 0);
  expect_miss(c, &k);
  assert_false(exists(path));
  assert_true(exists(target));
  free(target);
  free(path);
  free(p);

  /* A header announcing more than 1 GiB is refused before any allocation
   * (the file is sparse, so the test costs no disk). */
  path = put_base(c, dir, &p, &klen);
  unsigned char big[8];
  uint64_t plen = (1ull << 30) + 1;
  for (int i = 0; i < 8; i++) big[i] = (unsigned char)(plen >> (8 * i));
  patch_file(path, 16, big, 8);
  assert_int_equal(truncate(path, (off_t)(HDR + klen + plen)), 0);
  expect_miss(c, &k);
  assert_false(exists(path));
  free(path);
  free(p);

  em_jit_cache_close(c);
}

/* A valid entry of key A stored under key B's name (what a hash collision
 * looks like) is a miss for B and is removed; A is unaffected. */
static void test_entry_of_other_key(void **state) {
  const char *dir = *state;
  char *dir_a = path_join(dir, "a"), *dir_b = path_join(dir, "b");
  em_jit_cache *ca = open_ok(dir_a, 0), *cb = open_ok(dir_b, 0);
  em_jit_key ka = numbered_key(1), kb = numbered_key(2);
  unsigned char *p = make_payload(100, 6);
  char name_a[64], name_b[64];
  put_and_name(ca, dir_a, &ka, p, 100, name_a);
  put_and_name(cb, dir_b, &kb, p, 100, name_b);
  assert_string_not_equal(name_a, name_b);
  /* Put A's bytes under B's name in dir_b. */
  char *src = path_join(dir_a, name_a), *dst = path_join(dir_b, name_b);
  size_t n;
  unsigned char *f = read_file(src, &n);
  write_file(dst, f, n);
  expect_miss(cb, &kb);
  assert_false(exists(dst));
  assert_non_null(strstr(em_last_error(), "key"));
  expect_hit(ca, &ka, p, 100);
  free(f);
  free(src);
  free(dst);
  free(p);
  em_jit_cache_close(ca);
  em_jit_cache_close(cb);
  free(dir_a);
  free(dir_b);
}

/* ---- directory safety -------------------------------------------------- */

static void expect_disabled(const char *dir, const char *reason_part) {
  em_jit_cache *c = (em_jit_cache *)1;
  char why[512] = "";
  assert_int_equal(em_jit_cache_open(dir, 0, &c, why, sizeof why), EM_OK);
  assert_null(c);
  if (!strstr(why, reason_part)) fail_msg("reason \"%s\" does not mention \"%s\"", why, reason_part);
  assert_non_null(strstr(why, dir));
}

static void test_world_writable_dir(void **state) {
  const char *dir = *state;
  assert_int_equal(chmod(dir, 0777), 0);
  expect_disabled(dir, "writable by group or others");
  assert_int_equal(chmod(dir, 0770), 0);
  expect_disabled(dir, "writable by group or others");
  assert_int_equal(chmod(dir, 0755), 0);
  em_jit_cache_close(open_ok(dir, 0)); /* readable by others is fine */
}

static void test_dir_of_other_user(void **state) {
  const char *dir = *state;
  if (geteuid() != 0) {
    print_message("skipped: chown to another user needs root (running as uid %u)\n", (unsigned)geteuid());
    skip();
  }
  assert_int_equal(chown(dir, 65534, 65534), 0);
  expect_disabled(dir, "owned by uid 65534");
}

static void test_symlinked_dir(void **state) {
  const char *dir = *state;
  char *real = path_join(dir, "real"), *link = path_join(dir, "link");
  assert_int_equal(mkdir(real, 0700), 0);
  assert_int_equal(symlink(real, link), 0);
  expect_disabled(link, "symlink");
  /* With a trailing slash too, which would make a plain open follow it. */
  char *slash;
  assert_true(asprintf(&slash, "%s/", link) > 0);
  em_jit_cache *c = (em_jit_cache *)1;
  char why[512] = "";
  assert_int_equal(em_jit_cache_open(slash, 0, &c, why, sizeof why), EM_OK);
  assert_null(c);
  assert_non_null(strstr(why, "symlink"));
  /* Nothing was written through the link. */
  assert_int_equal(list_names(real, 0, NULL, 0) + list_names(real, 1, NULL, 0), 0);
  free(slash);
  free(real);
  free(link);
}

static void test_not_a_directory(void **state) {
  char *file = path_join(*state, "file");
  write_file(file, "x", 1);
  expect_disabled(file, "not a directory");
  char *below = path_join(file, "sub");
  expect_disabled(below, "cannot create");
  free(below);
  free(file);
}

static void test_creates_missing_dirs_0700(void **state) {
  const char *base = *state;
  char *a = path_join(base, "a"), *ab = path_join(a, "b"), *abc = path_join(ab, "c");
  em_jit_cache *c = open_ok(abc, 0);
  const char *made[] = {a, ab, abc};
  for (int i = 0; i < 3; i++) {
    struct stat st;
    assert_int_equal(stat(made[i], &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
  }
  em_jit_cache_close(c);
  free(a);
  free(ab);
  free(abc);
}

/* ---- default location -------------------------------------------------- */

static const char *env_names[] = {"EMBER_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "EMBER_CACHE_MAX_MB"};
static char *env_saved[4];

static int setup_env(void **state) {
  for (int i = 0; i < 4; i++) {
    const char *v = getenv(env_names[i]);
    env_saved[i] = v ? strdup(v) : NULL;
    unsetenv(env_names[i]);
  }
  return setup_dir(state);
}

static int teardown_env(void **state) {
  for (int i = 0; i < 4; i++) {
    if (env_saved[i]) setenv(env_names[i], env_saved[i], 1);
    else unsetenv(env_names[i]);
    free(env_saved[i]);
    env_saved[i] = NULL;
  }
  return teardown_dir(state);
}

static void expect_default(const char *want) {
  em_jit_cache *c = open_ok(NULL, 0);
  assert_string_equal(em_jit_cache_dir(c), want);
  struct stat st;
  assert_int_equal(lstat(want, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0700);
  em_jit_cache_close(c);
}

static void test_default_dir(void **state) {
  const char *base = *state;
  char *home = path_join(base, "home"), *xdg = path_join(base, "xdg"), *mine = path_join(base, "mine");
  char *home_cache = path_join(home, ".cache"), *home_ember = path_join(home_cache, "ember");
  char *xdg_ember = path_join(xdg, "ember");

  /* HOME alone: ~/.cache/ember, with ~/.cache created 0700 as well. */
  setenv("HOME", home, 1);
  expect_default(home_ember);
  struct stat st;
  assert_int_equal(stat(home_cache, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);

  /* XDG_CACHE_HOME wins over HOME; a relative one is ignored (XDG spec). */
  setenv("XDG_CACHE_HOME", "relative/dir", 1);
  expect_default(home_ember);
  setenv("XDG_CACHE_HOME", xdg, 1);
  expect_default(xdg_ember);

  /* EMBER_CACHE_DIR wins over both; empty counts as unset. */
  setenv("EMBER_CACHE_DIR", "", 1);
  expect_default(xdg_ember);
  setenv("EMBER_CACHE_DIR", mine, 1);
  expect_default(mine);
  /* An explicit dir wins over everything. */
  em_jit_cache *c = open_ok(home_ember, 0);
  assert_string_equal(em_jit_cache_dir(c), home_ember);
  em_jit_cache_close(c);

  /* Nothing set: disabled, with the variables named. */
  unsetenv("EMBER_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  c = (em_jit_cache *)1;
  char why[512] = "";
  assert_int_equal(em_jit_cache_open(NULL, 0, &c, why, sizeof why), EM_OK);
  assert_null(c);
  assert_non_null(strstr(why, "EMBER_CACHE_DIR"));

  free(home);
  free(xdg);
  free(mine);
  free(home_cache);
  free(home_ember);
  free(xdg_ember);
}

/* ---- eviction ----------------------------------------------------------- */

static uint64_t sum_entry_sizes(const char *dir) {
  char names[64][64];
  size_t n = list_names(dir, 0, names, 64);
  assert_true(n <= 64);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    char *p = path_join(dir, names[i]);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    total += (uint64_t)st.st_size;
    free(p);
  }
  return total;
}

static void test_eviction_lru(void **state) {
  const char *dir = *state;
  em_jit_cache *big = open_ok(dir, 1ull << 30);
  char names[7][64];
  char *paths[7];
  unsigned char *p[7];
  for (int i = 0; i < 6; i++) {
    em_jit_key k = numbered_key((uint64_t)i);
    p[i] = make_payload(1000, 100 + (uint64_t)i);
    put_and_name(big, dir, &k, p[i], 1000, names[i]);
    paths[i] = path_join(dir, names[i]);
    set_mtime(paths[i], T0 + 100 * i);
  }
  struct stat st;
  assert_int_equal(stat(paths[0], &st), 0);
  uint64_t S = (uint64_t)st.st_size;
  for (int i = 1; i < 6; i++) {
    assert_int_equal(stat(paths[i], &st), 0);
    assert_int_equal((uint64_t)st.st_size, S);
  }
  assert_int_equal(em_jit_cache_size(big), 6 * S);

  /* Reading entry 1 makes it the most recently used. */
  em_jit_key k1 = numbered_key(1);
  expect_hit(big, &k1, p[1], 1000);
  assert_int_equal(stat(paths[1], &st), 0);
  assert_true(st.st_mtim.tv_sec > T0 + 100000);

  /* A cap of 4.5 entries: after the 7th put, 7 entries must shrink to 4, the
   * three least recently used going first: 0, 2, 3 (times T0, T0+200, T0+300). */
  em_jit_cache *small = open_ok(dir, 4 * S + S / 2);
  em_jit_key k6 = numbered_key(6);
  p[6] = make_payload(1000, 106);
  put_and_name(small, dir, &k6, p[6], 1000, names[6]);
  paths[6] = path_join(dir, names[6]);
  int survives[7] = {0, 1, 0, 0, 1, 1, 1};
  for (int i = 0; i < 7; i++)
    if (exists(paths[i]) != survives[i])
      fail_msg("entry %d (mtime rank) %s, expected %s", i, exists(paths[i]) ? "kept" : "evicted",
               survives[i] ? "kept" : "evicted");
  assert_int_equal(sum_entry_sizes(dir), 4 * S);
  assert_int_equal(em_jit_cache_size(small), 4 * S);
  for (int i = 0; i < 7; i++) {
    em_jit_key k = numbered_key((uint64_t)i);
    if (survives[i]) expect_hit(small, &k, p[i], 1000);
    else expect_miss(small, &k);
  }
  for (int i = 0; i < 7; i++) {
    free(paths[i]);
    free(p[i]);
  }
  em_jit_cache_close(big);
  em_jit_cache_close(small);
}

/* An entry larger than the cap cannot stay, but others go before it does. */
static void test_eviction_entry_over_cap(void **state) {
  const char *dir = *state;
  em_jit_cache *c = open_ok(dir, 2048);
  em_jit_key a = numbered_key(1), b = numbered_key(2);
  unsigned char *p = make_payload(4096, 7);
  assert_int_equal(em_jit_cache_put(c, &a, p, 100), EM_OK);
  assert_int_equal(list_names(dir, 0, NULL, 0), 1);
  assert_int_equal(em_jit_cache_put(c, &b, p, 4096), EM_OK);
  assert_int_equal(list_names(dir, 0, NULL, 0), 0);
  assert_int_equal(em_jit_cache_size(c), 0);
  free(p);
  em_jit_cache_close(c);
}

/* The entry a put just wrote is the most recently used even when another
 * entry carries a later mtime (clock skew, a cache shared over NFS). */
static void test_eviction_keeps_just_written(void **state) {
  const char *dir = *state;
  em_jit_cache *big = open_ok(dir, 1ull << 30);
  unsigned char *p = make_payload(1000, 9);
  char na[64], nb[64], nc[64];
  em_jit_key a = numbered_key(1), b = numbered_key(2), k = numbered_key(3);
  put_and_name(big, dir, &a, p, 1000, na);
  put_and_name(big, dir, &b, p, 1000, nb);
  char *pa = path_join(dir, na), *pb = path_join(dir, nb);
  set_mtime(pa, time(NULL) + 86400);
  set_mtime(pb, T0);
  struct stat st;
  assert_int_equal(stat(pa, &st), 0);
  em_jit_cache *small = open_ok(dir, (uint64_t)st.st_size * 3 / 2);
  put_and_name(small, dir, &k, p, 1000, nc);
  char *pc = path_join(dir, nc);
  assert_true(exists(pc));
  assert_false(exists(pa));
  assert_false(exists(pb));
  free(pa);
  free(pb);
  free(pc);
  free(p);
  em_jit_cache_close(big);
  em_jit_cache_close(small);
}

static void test_stale_tmp_removed(void **state) {
  const char *dir = *state;
  char *old = path_join(dir, ".tmp.old123"), *young = path_join(dir, ".tmp.young1"),
       *other = path_join(dir, "README");
  write_file(old, "partial", 7);
  write_file(young, "partial", 7);
  write_file(other, "not ours", 8);
  set_mtime(old, time(NULL) - 2 * 3600);
  em_jit_cache *c = open_ok(dir, 0);
  em_jit_key k = base_key();
  assert_int_equal(em_jit_cache_put(c, &k, "abc", 3), EM_OK);
  assert_false(exists(old));
  assert_true(exists(young));   /* may be a live writer's */
  assert_true(exists(other));   /* not an entry: neither counted nor touched */
  assert_int_equal(em_jit_cache_size(c), sum_entry_sizes(dir));
  em_jit_cache_close(c);
  free(old);
  free(young);
  free(other);
}

static void test_cap_from_env(void **state) {
  const char *dir = *state;
  const size_t n = 400 << 10; /* three of these exceed 1 MiB, two do not */
  unsigned char *p = make_payload(n, 8);
  char names[3][64];
  setenv("EMBER_CACHE_MAX_MB", "1", 1);
  /* An explicit max_bytes overrides the variable. */
  em_jit_cache *c = open_ok(dir, 10u << 20);
  for (int i = 0; i < 3; i++) {
    em_jit_key k = numbered_key((uint64_t)i);
    put_and_name(c, dir, &k, p, n, names[i]);
  }
  assert_int_equal(list_names(dir, 0, NULL, 0), 3);
  em_jit_cache_close(c);
  rm_rf(dir);
  assert_int_equal(mkdir(dir, 0700), 0);

  c = open_ok(dir, 0);
  for (int i = 0; i < 3; i++) {
    em_jit_key k = numbered_key((uint64_t)i);
    put_and_name(c, dir, &k, p, n, names[i]);
    char *path = path_join(dir, names[i]);
    set_mtime(path, T0 + i);
    free(path);
  }
  char *first = path_join(dir, names[0]), *second = path_join(dir, names[1]), *third = path_join(dir, names[2]);
  assert_false(exists(first));
  assert_true(exists(second));
  assert_true(exists(third));
  assert_true(em_jit_cache_size(c) <= (1u << 20));
  free(first);
  free(second);
  free(third);
  free(p);
  em_jit_cache_close(c);
}

/* ---- concurrent writers ------------------------------------------------- */

#define N_CHILDREN 4
#define N_KEYS 6

/* Self-describing payload: "TJCP", key index, length, writer seed, then a
 * stream derived from the seed. Any mix of two writers' bytes fails check. */
static unsigned char *concurrent_payload(int key, uint64_t seed, size_t *n) {
  size_t len = 24 + (size_t)(seed % 50000);
  unsigned char *p = malloc(len);
  if (!p) return NULL;
  memcpy(p, "TJCP", 4);
  uint32_t k = (uint32_t)key, l = (uint32_t)len;
  memcpy(p + 4, &k, 4);
  memcpy(p + 8, &l, 4);
  memset(p + 12, 0, 4);
  memcpy(p + 16, &seed, 8);
  uint64_t s = seed | 1;
  for (size_t i = 24; i < len; i++) p[i] = (unsigned char)xorshift(&s);
  *n = len;
  return p;
}

static int concurrent_payload_ok(int key, const unsigned char *p, size_t n) {
  if (n < 24 || memcmp(p, "TJCP", 4)) return 0;
  uint32_t k, l;
  uint64_t seed;
  memcpy(&k, p + 4, 4);
  memcpy(&l, p + 8, 4);
  memcpy(&seed, p + 16, 8);
  if (k != (uint32_t)key || l != n) return 0;
  size_t want_n;
  unsigned char *want = concurrent_payload(key, seed, &want_n);
  int ok = want && want_n == n && !memcmp(want, p, n);
  free(want);
  return ok;
}

/* Child: puts keys in a loop, reading back after each put. Plain checks and
 * _exit, never cmocka's assertions (they would unwind into the parent's
 * copy of the test runner). */
static void child_writer(const char *dir, uint64_t cap, int id, int iters, int no_eviction) {
  em_jit_cache *c = NULL;
  char why[256];
  if (em_jit_cache_open(dir, cap, &c, why, sizeof why) != EM_OK || !c) _exit(10);
  for (int i = 0; i < iters; i++) {
    int key = (i % 2) ? 0 : (i / 2) % N_KEYS; /* key 0 is shared by everyone, half the time */
    em_jit_key k = numbered_key((uint64_t)key);
    size_t n;
    uint64_t seed = ((uint64_t)id << 40) ^ ((uint64_t)i << 8) ^ (uint64_t)key ^ 0x5bd1e995u;
    seed = seed * 0x9e3779b97f4a7c15ull + (uint64_t)id;
    unsigned char *p = concurrent_payload(key, seed, &n);
    if (!p) _exit(11);
    if (em_jit_cache_put(c, &k, p, n) != EM_OK) {
      fprintf(stderr, "child %d: put failed: %s\n", id, em_last_error());
      _exit(12);
    }
    free(p);
    void *d = NULL;
    size_t dn = 0;
    em_status s = em_jit_cache_get(c, &k, &d, &dn);
    if (s == EM_OK) {
      if (!concurrent_payload_ok(key, d, dn)) _exit(13);
      free(d);
    } else if (s != EM_ERR_NOT_FOUND || no_eviction) {
      fprintf(stderr, "child %d: get after put: %s: %s\n", id, em_status_name(s), em_last_error());
      _exit(14);
    }
  }
  em_jit_cache_close(c);
  _exit(0);
}

/* With no_eviction, an entry seen once must stay readable: a miss afterwards
 * means the cache found a torn entry and deleted it. */
static void run_concurrent(const char *dir, uint64_t cap, int iters, int no_eviction) {
  pid_t pids[N_CHILDREN];
  for (int i = 0; i < N_CHILDREN; i++) {
    fflush(NULL);
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) child_writer(dir, cap, i, iters, no_eviction);
  }
  em_jit_cache *c = open_ok(dir, cap);
  int seen[N_KEYS] = {0}, alive = N_CHILDREN, status[N_CHILDREN];
  long hits = 0;
  char failure[512] = "";
  while (alive > 0) {
    for (int key = 0; key < N_KEYS && !failure[0]; key++) {
      em_jit_key k = numbered_key((uint64_t)key);
      void *d = NULL;
      size_t n = 0;
      em_status s = em_jit_cache_get(c, &k, &d, &n);
      if (s == EM_OK) {
        if (!concurrent_payload_ok(key, d, n))
          snprintf(failure, sizeof failure, "key %d: torn payload of %zu bytes", key, n);
        seen[key] = 1;
        hits++;
        free(d);
      } else if (s != EM_ERR_NOT_FOUND) {
        snprintf(failure, sizeof failure, "key %d: %s: %s", key, em_status_name(s), em_last_error());
      } else if (no_eviction && seen[key]) {
        snprintf(failure, sizeof failure, "key %d vanished after a hit: %s", key, em_last_error());
      }
    }
    for (int i = 0; i < N_CHILDREN; i++) {
      if (pids[i] <= 0) continue;
      pid_t r = waitpid(pids[i], &status[i], failure[0] ? 0 : WNOHANG);
      if (r == pids[i]) {
        pids[i] = 0;
        alive--;
      }
    }
  }
  if (failure[0]) fail_msg("%s", failure);
  for (int i = 0; i < N_CHILDREN; i++)
    if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
      fail_msg("writer %d ended with status 0x%x", i, status[i]);
  assert_true(hits > 0);
  if (no_eviction) {
    for (int key = 0; key < N_KEYS; key++) {
      em_jit_key k = numbered_key((uint64_t)key);
      void *d = NULL;
      size_t n = 0;
      assert_int_equal(em_jit_cache_get(c, &k, &d, &n), EM_OK);
      assert_true(concurrent_payload_ok(key, d, n));
      free(d);
    }
  }
  assert_int_equal(list_names(dir, 1, NULL, 0), 0);
  assert_true(sum_entry_sizes(dir) <= cap);
  em_jit_cache_close(c);
}

static void test_concurrent_writers(void **state) { run_concurrent(*state, 1ull << 30, 200, 1); }

/* A cap of about three entries: writers evict each other's files while
 * others read them. Every hit must still be intact. */
static void test_concurrent_writers_evicting(void **state) { run_concurrent(*state, 150000, 150, 0); }

int main(void) {
  umask(022);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_miss_put_hit, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_entry_layout, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_key_sensitivity, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_invalid_arguments, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_corrupt_entry, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_truncated_entry, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_foreign_entry, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_entry_of_other_key, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_world_writable_dir, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_dir_of_other_user, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_symlinked_dir, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_not_a_directory, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_creates_missing_dirs_0700, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_default_dir, setup_env, teardown_env),
    cmocka_unit_test_setup_teardown(test_eviction_lru, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_eviction_entry_over_cap, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_eviction_keeps_just_written, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_stale_tmp_removed, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_cap_from_env, setup_env, teardown_env),
    cmocka_unit_test_setup_teardown(test_concurrent_writers, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_concurrent_writers_evicting, setup_dir, teardown_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
