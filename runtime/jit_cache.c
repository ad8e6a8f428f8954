/* Disk cache for JIT output: key serialisation, entry format, directory
 * safety checks, atomic writes and LRU eviction (contract in jit_cache.h).
 *
 * Entry file, named by the 32 lowercase hex digits of XXH3-128 of the key text
 * (high 64 bits first, i.e. the canonical big-endian form):
 *
 *   offset  size  field
 *        0     8  magic "EMBERJIT"
 *        8     4  format version, little-endian (EM_JIT_CACHE_FORMAT)
 *       12     4  key text length K, little-endian
 *       16     8  payload length P, little-endian
 *       24    16  XXH3-128 of the payload, canonical (big-endian) form
 *       40     K  key text (no terminator)
 *     40+K     P  payload
 *
 * The file size must be exactly 40+K+P. The struct is immutable after open and
 * every operation works on its own descriptors, so one cache may be shared by
 * threads; separate processes coordinate only through atomic renames. */
#include "jit_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"

#define HEADER_SIZE 40
#define NAME_LEN 32                      /* hex digits of a 128-bit hash */
#define TMP_PREFIX ".tmp."
#define PAYLOAD_MAX (1ull << 30)         /* a cubin is megabytes; anything larger is not ours */
#define KEY_TEXT_MAX (1u << 20)          /* bounds a read driven by the header's length field */
#define STALE_TMP_SECONDS 3600           /* a writer that has not renamed within an hour died */

static const unsigned char entry_magic[8] = {'E', 'M', 'B', 'E', 'R', 'J', 'I', 'T'};

struct em_jit_cache {
  char *dir;       /* as resolved, for messages and mkstemp templates */
  int dirfd;       /* opened O_NOFOLLOW after the safety checks; all lookups go through it */
  uint64_t cap;    /* bytes */
};

/* ---- small helpers ---------------------------------------------------- */

static void put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint64_t get_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void checksum(const void *data, size_t size, unsigned char out[16]) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits(data, size));
  memcpy(out, canon.digest, 16);
}

/* Writes everything or returns the errno of the failing write. */
static int write_all(int fd, const void *buf, size_t len) {
  const unsigned char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Reads up to len bytes at off; returns the count (short only at end of file)
 * or -1 with errno set. */
static ssize_t pread_all(int fd, void *buf, size_t len, off_t off) {
  unsigned char *p = buf;
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd, p + done, len - done, off + (off_t)done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += (size_t)n;
  }
  return (ssize_t)done;
}

static int is_entry_name(const char *s) {
  for (int i = 0; i < NAME_LEN; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return s[NAME_LEN] == '\0';
}

static int timespec_cmp(struct timespec a, struct timespec b) {
  if (a.tv_sec != b.tv_sec) return a.tv_sec < b.tv_sec ? -1 : 1;
  if (a.tv_nsec != b.tv_nsec) return a.tv_nsec < b.tv_nsec ? -1 : 1;
  return 0;
}

/* ---- key ---------------------------------------------------------------- */

/* Canonical text of a key. Strings are length-prefixed so no choice of kind or
 * options can make two different keys serialise alike; the format version is
 * part of the text so a layout change also changes every file name. */
static em_status key_text_build(const em_jit_key *key, char **text, size_t *len) {
  if (!key->kind || !key->kind[0])
    return em_fail(EM_ERR_INVALID_ARGUMENT, "jit cache key: kind is empty (expected \"ptx-jit\", \"nvrtc\" or \"cudnn-algo\")");
  if (key->variant != 0 && key->variant != 'a' && key->variant != 'f')
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "jit cache key: variant is 0x%02x (expected 0, 'a' or 'f')",
                   (unsigned)(unsigned char)key->variant);
  if (key->sm <= 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "jit cache key: sm is %d (expected 10*major+minor, e.g. 86)",
                   key->sm);
  const char *opts = key->options ? key->options : ""; /* no options and "" compile alike */
  char variant[2] = {key->variant ? key->variant : '-', '\0'};
  const char *fmt = "ember-jit-cache-key format=%d\nkind=%zu:%s\ninput=%016llx\noptions=%zu:%s\n"
                    "sm=%d\nvariant=%s\ndriver=%d\ntool=%d\n";
  size_t klen = strlen(key->kind), olen = strlen(opts);
  if (klen + olen > KEY_TEXT_MAX - 256)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "jit cache key: options are %zu bytes (limit %u)", olen,
                   KEY_TEXT_MAX - 256);
  int n = snprintf(NULL, 0, fmt, EM_JIT_CACHE_FORMAT, klen, key->kind,
                   (unsigned long long)key->input_hash, olen, opts, key->sm, variant,
                   key->driver_version, key->tool_version);
  if (n < 0) return em_fail(EM_ERR_INTERNAL, "jit cache key: snprintf failed");
  char *buf = malloc((size_t)n + 1);
  if (!buf) return em_fail(EM_ERR_OUT_OF_MEMORY, "jit cache key: cannot allocate %d bytes", n + 1);
  snprintf(buf, (size_t)n + 1, fmt, EM_JIT_CACHE_FORMAT, klen, key->kind,
           (unsigned long long)key->input_hash, olen, opts, key->sm, variant, key->driver_version,
           key->tool_version);
  *text = buf;
  *len = (size_t)n;
  return EM_OK;
}

static void entry_name(const char *text, size_t len, char name[NAME_LEN + 1]) {
  XXH128_hash_t h = XXH3_128bits(text, len);
  snprintf(name, NAME_LEN + 1, "%016llx%016llx", (unsigned long long)h.high64,
           (unsigned long long)h.low64);
}

/* ---- opening: location, creation, safety ------------------------------- */

/* Records why the cache is off, logs it, and returns EM_OK: an unusable cache
 * is not an error, the caller just compiles every time. */
static em_status disable(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static em_status disable(char *why, size_t cap, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (why && cap) snprintf(why, cap, "%s", msg);
  em_log(EM_LOG_CACHE, "cache disabled: %s", msg);
  return EM_OK;
}

/* $EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else $HOME/.cache/ember.
 * Empty variables count as unset; a relative XDG_CACHE_HOME is ignored, as
 * the XDG Base Directory specification requires. Returns NULL with *reason
 * set when no location is available, or on allocation failure (*oom set). */
static char *default_dir(const char **reason, int *oom) {
  const char *v = getenv("EMBER_CACHE_DIR");
  char *out = NULL;
  int n = -1;
  *oom = 0;
  if (v && v[0]) {
    n = asprintf(&out, "%s", v);
  } else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/') {
    n = asprintf(&out, "%s/ember", v);
  } else if ((v = getenv("HOME")) && v[0]) {
    n = asprintf(&out, "%s/.cache/ember", v);
  } else {
    *reason = "no cache location: EMBER_CACHE_DIR, XDG_CACHE_HOME (absolute) and HOME are all unset; "
              "set EMBER_CACHE_DIR to enable the JIT cache";
    return NULL;
  }
  if (n < 0) {
    *oom = 1;
    return NULL;
  }
  return out;
}

/* mkdir -p with mode 0700 for every directory it creates (existing ones are
 * left as they are: ~/.cache may legitimately be shared or a symlink).
 * Returns 0, or the errno with the failing prefix copied into `failed`. */
static int mkdir_p(const char *path, char *failed, size_t failed_cap) {
  size_t len = strlen(path);
  char *p = malloc(len + 1);
  if (!p) return ENOMEM;
  memcpy(p, path, len + 1);
  int err = 0;
  for (size_t i = 1; i <= len && !err; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char saved = p[i];
    p[i] = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      err = errno;
      snprintf(failed, failed_cap, "%s", p);
    }
    p[i] = saved;
  }
  free(p);
  return err;
}

/* Every reason the directory must not be used, checked on the open
 * descriptor so a swap between check and use is impossible. Returns 1 when
 * safe, 0 with the reason in why. */
static int dir_is_safe(const char *dir, int fd, const struct stat *lst, char *why, size_t cap) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    disable(why, cap, "cannot stat cache directory %s: %s", dir, strerror(errno));
    return 0;
  }
  if (st.st_dev != lst->st_dev || st.st_ino != lst->st_ino) {
    disable(why, cap, "cache directory %s was replaced while being opened; not using it", dir);
    return 0;
  }
  if (st.st_uid != geteuid()) {
    disable(why, cap,
            "cache directory %s is owned by uid %u, not by the current user (uid %u); another user "
            "could plant compiled code there. Fix: use a directory you own (EMBER_CACHE_DIR)",
            dir, (unsigned)st.st_uid, (unsigned)geteuid());
    return 0;
  }
  if (st.st_mode & 022) {
    disable(why, cap,
            "cache directory %s is writable by group or others (mode %04o); another user could plant "
            "compiled code there. Fix: chmod 0700 %s",
            dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
  }
  if (faccessat(AT_FDCWD, dir, R_OK | W_OK | X_OK, AT_EACCESS) != 0) {
    disable(why, cap, "cache directory %s is not readable and writable by its owner: %s. Fix: chmod 0700 %s",
            dir, strerror(errno), dir);
    return 0;
  }
  return 1;
}

/* Creates, checks and opens dir. Returns the descriptor, or -1 with the
 * reason in why. */
static int dir_open_checked(const char *dir, char *why, size_t cap) {
  char failed[1024] = "";
  int err = mkdir_p(dir, failed, sizeof failed);
  if (err) {
    disable(why, cap, "cannot create cache directory %s (at %s): %s", dir, failed, strerror(err));
    return -1;
  }
  struct stat lst;
  if (lstat(dir, &lst) != 0) {
    disable(why, cap, "cannot stat cache directory %s: %s", dir, strerror(errno));
    return -1;
  }
  if (S_ISLNK(lst.st_mode)) {
    disable(why, cap,
            "cache directory %s is a symlink; it is not followed, since its target could be changed "
            "by someone else. Fix: point EMBER_CACHE_DIR at the real directory",
            dir);
    return -1;
  }
  if (!S_ISDIR(lst.st_mode)) {
    disable(why, cap, "cache location %s exists and is not a directory", dir);
    return -1;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    disable(why, cap, "cannot open cache directory %s: %s%s", dir, strerror(errno),
            errno == ELOOP ? " (it is a symlink)" : "");
    return -1;
  }
  if (!dir_is_safe(dir, fd, &lst, why, cap)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* max_bytes, else $EMBER_CACHE_MAX_MB, else the default. A malformed
 * variable is reported on the log and ignored rather than disabling the cache. */
static uint64_t resolve_cap(uint64_t max_bytes) {
  if (max_bytes) return max_bytes;
  const char *v = getenv("EMBER_CACHE_MAX_MB");
  if (!v || !v[0]) return EM_JIT_CACHE_DEFAULT_CAP;
  char *end;
  errno = 0;
  unsigned long long mb = strtoull(v, &end, 10);
  if (errno || *end || v[0] == '-' || mb == 0 || mb > (UINT64_MAX >> 20)) {
    em_log(EM_LOG_CACHE, "EMBER_CACHE_MAX_MB=\"%s\" is not a positive number of MiB; using %llu MiB", v,
           EM_JIT_CACHE_DEFAULT_CAP >> 20);
    return EM_JIT_CACHE_DEFAULT_CAP;
  }
  return (uint64_t)mb << 20;
}

em_status em_jit_cache_open(const char *dir, uint64_t max_bytes, em_jit_cache **out, char *why_disabled,
                            size_t why_cap) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_jit_cache_open: out is NULL");
  *out = NULL;
  if (why_disabled && why_cap) why_disabled[0] = '\0';
  if (dir && !dir[0]) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_jit_cache_open: dir is \"\" (pass NULL for the default)");

  char *path;
  if (dir) {
    path = strdup(dir);
    if (!path) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_jit_cache_open: cannot copy the path");
  } else {
    const char *reason = NULL;
    int oom;
    path = default_dir(&reason, &oom);
    if (!path && oom) return em_fail(EM_ERR_OUT_OF_MEMORY, "em_jit_cache_open: cannot build the path");
    if (!path) return disable(why_disabled, why_cap, "%s", reason);
  }
  /* Trailing slashes would make the mkstemp template "dir//.tmp." and the
   * O_NOFOLLOW check follow a symlink named "link/", so strip them. */
  for (size_t n = strlen(path); n > 1 && path[n - 1] == '/'; n--) path[n - 1] = '\0';

  int fd = dir_open_checked(path, why_disabled, why_cap);
  if (fd < 0) {
    free(path);
    return EM_OK;
  }
  em_jit_cache *c = malloc(sizeof *c);
  if (!c) {
    close(fd);
    free(path);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "em_jit_cache_open: cannot allocate the cache");
  }
  c->dir = path;
  c->dirfd = fd;
  c->cap = resolve_cap(max_bytes);
  em_log(EM_LOG_CACHE, "cache at %s, cap %llu bytes", path, (unsigned long long)c->cap);
  *out = c;
  return EM_OK;
}

void em_jit_cache_close(em_jit_cache *c) {
  if (!c) return;
  close(c->dirfd);
  free(c->dir);
  free(c);
}

const char *em_jit_cache_dir(const em_jit_cache *c) { return c ? c->dir : NULL; }

/* ---- reading an entry --------------------------------------------------- */

/* Removes a bad entry, but only if the name still refers to the file we
 * read: a concurrent writer may have renamed a good entry over it meanwhile. */
static void entry_discard(em_jit_cache *c, const char *name, int fd, const char *reason) {
  struct stat mine, now;
  if (fstat(fd, &mine) != 0 || fstatat(c->dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0) {
    em_log(EM_LOG_CACHE, "%s/%s: %s; already gone", c->dir, name, reason);
    return;
  }
  if (mine.st_dev != now.st_dev || mine.st_ino != now.st_ino) {
    em_log(EM_LOG_CACHE, "%s/%s: %s; a newer entry replaced it, kept", c->dir, name, reason);
    return;
  }
  if (unlinkat(c->dirfd, name, 0) != 0 && errno != ENOENT)
    em_log(EM_LOG_CACHE, "%s/%s: %s; cannot delete it: %s", c->dir, name, reason, strerror(errno));
  else
    em_log(EM_LOG_CACHE, "%s/%s: %s; deleted", c->dir, name, reason);
}

enum { ENTRY_OK, ENTRY_BAD, ENTRY_IO_ERROR };

/* Validates the entry open on fd against the expected key text and reads its
 * payload. ENTRY_BAD: reason says what is wrong; ENTRY_IO_ERROR: em_fail set
 * and the status in *io_status. */
static int entry_read(em_jit_cache *c, const char *name, int fd, const char *text, size_t tlen,
                      void **data, size_t *size, char *reason, size_t rcap, em_status *io_status) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    em_fail(EM_ERR_IO, "cannot stat cache entry %s/%s: %s", c->dir, name, strerror(errno));
    return ENTRY_IO_ERROR;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(reason, rcap, "not a regular file (mode %06o)", (unsigned)st.st_mode);
    return ENTRY_BAD;
  }
  uint64_t fsize = (uint64_t)st.st_size;
  if (fsize < HEADER_SIZE) {
    snprintf(reason, rcap, "truncated: %llu bytes, shorter than the %d-byte header",
             (unsigned long long)fsize, HEADER_SIZE);
    return ENTRY_BAD;
  }
  unsigned char hdr[HEADER_SIZE];
  ssize_t n = pread_all(fd, hdr, HEADER_SIZE, 0);
  if (n < 0) {
    em_fail(EM_ERR_IO, "cannot read cache entry %s/%s: %s", c->dir, name, strerror(errno));
    return ENTRY_IO_ERROR;
  }
  if (n < HEADER_SIZE) {
    snprintf(reason, rcap, "truncated while reading the header (%zd bytes)", n);
    return ENTRY_BAD;
  }
  if (memcmp(hdr, entry_magic, sizeof entry_magic) != 0) {
    snprintf(reason, rcap, "foreign file: bad magic at offset 0 (expected \"EMBERJIT\")");
    return ENTRY_BAD;
  }
  uint32_t version = get_le32(hdr + 8), klen = get_le32(hdr + 12);
  uint64_t plen = get_le64(hdr + 16);
  if (version != EM_JIT_CACHE_FORMAT) {
    snprintf(reason, rcap, "format version %u at offset 8, expected %d", version, EM_JIT_CACHE_FORMAT);
    return ENTRY_BAD;
  }
  if (plen > PAYLOAD_MAX) {
    snprintf(reason, rcap, "payload length %llu at offset 16 exceeds the %llu-byte limit",
             (unsigned long long)plen, PAYLOAD_MAX);
    return ENTRY_BAD;
  }
  if (klen > KEY_TEXT_MAX) {
    snprintf(reason, rcap, "key length %u at offset 12 exceeds the %u-byte limit", klen, KEY_TEXT_MAX);
    return ENTRY_BAD;
  }
  if (HEADER_SIZE + (uint64_t)klen + plen != fsize) {
    snprintf(reason, rcap, "truncated or padded: header says %llu bytes (40 + key %u + payload %llu), file has %llu",
             (unsigned long long)(HEADER_SIZE + (uint64_t)klen + plen), klen, (unsigned long long)plen,
             (unsigned long long)fsize);
    return ENTRY_BAD;
  }
  if (klen != tlen) {
    snprintf(reason, rcap, "key text is %u bytes, expected %zu: another key (hash collision or foreign file)",
             klen, tlen);
    return ENTRY_BAD;
  }
  /* Key first (at most KEY_TEXT_MAX), then the payload straight into the
   * buffer handed back, so a large entry is allocated once. */
  char *ktext = malloc(klen ? klen : 1);
  if (!ktext) {
    *io_status = em_fail(EM_ERR_OUT_OF_MEMORY, "cannot allocate %u bytes for cache entry %s/%s", klen,
                         c->dir, name);
    return ENTRY_IO_ERROR;
  }
  n = pread_all(fd, ktext, klen, HEADER_SIZE);
  int key_ok = n == (ssize_t)klen && memcmp(ktext, text, tlen) == 0;
  int read_errno = errno;
  free(ktext);
  if (n < 0) {
    em_fail(EM_ERR_IO, "cannot read cache entry %s/%s: %s", c->dir, name, strerror(read_errno));
    return ENTRY_IO_ERROR;
  }
  if (n != (ssize_t)klen) {
    snprintf(reason, rcap, "truncated while reading the key: %zd of %u bytes", n, klen);
    return ENTRY_BAD;
  }
  if (!key_ok) {
    snprintf(reason, rcap, "key text differs: another key (hash collision or foreign file)");
    return ENTRY_BAD;
  }
  unsigned char *payload = malloc(plen ? (size_t)plen : 1);
  if (!payload) {
    *io_status = em_fail(EM_ERR_OUT_OF_MEMORY, "cannot allocate %llu bytes for cache entry %s/%s",
                         (unsigned long long)plen, c->dir, name);
    return ENTRY_IO_ERROR;
  }
  n = pread_all(fd, payload, (size_t)plen, HEADER_SIZE + (off_t)klen);
  if (n < 0) {
    em_fail(EM_ERR_IO, "cannot read cache entry %s/%s: %s", c->dir, name, strerror(errno));
    free(payload);
    return ENTRY_IO_ERROR;
  }
  if ((uint64_t)n != plen) {
    snprintf(reason, rcap, "truncated while reading the payload: %zd of %llu bytes", n,
             (unsigned long long)plen);
    free(payload);
    return ENTRY_BAD;
  }
  unsigned char sum[16];
  checksum(payload, (size_t)plen, sum);
  if (memcmp(sum, hdr + 24, 16) != 0) {
    snprintf(reason, rcap, "payload checksum mismatch (XXH3-128 at offset 24): corrupt");
    free(payload);
    return ENTRY_BAD;
  }
  *data = payload;
  *size = (size_t)plen;
  return ENTRY_OK;
}

em_status em_jit_cache_get(em_jit_cache *c, const em_jit_key *key, void **data, size_t *size) {
  if (!c || !key || !data || !size)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_jit_cache_get: NULL argument");
  *data = NULL;
  *size = 0;
  char *text;
  size_t tlen;
  em_status s = key_text_build(key, &text, &tlen);
  if (s != EM_OK) return s;
  char name[NAME_LEN + 1];
  entry_name(text, tlen, name);

  /* O_NONBLOCK: a FIFO planted under an entry name must not hang the load. */
  int fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    free(text);
    if (err == ENOENT) return em_fail(EM_ERR_NOT_FOUND, "no cache entry %s/%s", c->dir, name);
    if (err == ELOOP) {
      if (unlinkat(c->dirfd, name, 0) == 0 || errno == ENOENT)
        em_log(EM_LOG_CACHE, "%s/%s: a symlink, not an entry; deleted", c->dir, name);
      return em_fail(EM_ERR_NOT_FOUND, "cache entry %s/%s was a symlink (deleted)", c->dir, name);
    }
    return em_fail(EM_ERR_IO, "cannot open cache entry %s/%s: %s", c->dir, name, strerror(err));
  }
  char reason[256];
  em_status io_status = EM_ERR_IO;
  int r = entry_read(c, name, fd, text, tlen, data, size, reason, sizeof reason, &io_status);
  free(text);
  if (r == ENTRY_BAD) {
    entry_discard(c, name, fd, reason);
    close(fd);
    return em_fail(EM_ERR_NOT_FOUND, "cache entry %s/%s rejected: %s", c->dir, name, reason);
  }
  if (r == ENTRY_IO_ERROR) {
    close(fd);
    return io_status;
  }
  /* mtime = last use, so eviction is least-recently-used. A failure only
   * makes the entry look older than it is. */
  if (futimens(fd, NULL) != 0)
    em_log(EM_LOG_CACHE, "%s/%s: cannot update its time: %s", c->dir, name, strerror(errno));
  close(fd);
  return EM_OK;
}

/* ---- scanning and eviction ---------------------------------------------- */

typedef struct scan_item {
  char name[NAME_LEN + 1];
  uint64_t size;
  struct timespec mtime;
  int pinned;   /* the entry just written: most recently used by definition */
} scan_item;

typedef struct scan_list {
  scan_item *items;
  size_t n, cap;
  uint64_t total;
} scan_list;

static int scan_push(scan_list *l, const char *name, const struct stat *st, int pinned) {
  if (l->n == l->cap) {
    size_t ncap = l->cap ? 2 * l->cap : 64;
    scan_item *p = realloc(l->items, ncap * sizeof *p);
    if (!p) return -1;
    l->items = p;
    l->cap = ncap;
  }
  scan_item *it = &l->items[l->n++];
  memcpy(it->name, name, NAME_LEN + 1);
  it->size = (uint64_t)st->st_size;
  it->mtime = st->st_mtim;
  it->pinned = pinned;
  l->total += it->size;
  return 0;
}

static void tmp_remove_if_stale(em_jit_cache *c, const char *name, const struct stat *st) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec - st->st_mtim.tv_sec <= STALE_TMP_SECONDS) return;
  if (unlinkat(c->dirfd, name, 0) == 0)
    em_log(EM_LOG_CACHE, "%s/%s: stale temporary file of a writer that died; deleted", c->dir, name);
}

/* Lists the entries of the directory; files vanishing meanwhile (another
 * process evicting) are skipped. With clean_tmp, stale temp files go too. */
static em_status scan_dir(em_jit_cache *c, const char *pinned, int clean_tmp, scan_list *l) {
  memset(l, 0, sizeof *l);
  /* A descriptor of its own: a dup of dirfd would share its offset with
   * other threads scanning the same cache. */
  int fd = openat(c->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return em_fail(EM_ERR_IO, "cannot open cache directory %s: %s", c->dir, strerror(errno));
  DIR *d = fdopendir(fd);
  if (!d) {
    int err = errno;
    close(fd);
    return em_fail(EM_ERR_IO, "cannot read cache directory %s: %s", c->dir, strerror(err));
  }
  em_status s = EM_OK;
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
      if (errno) s = em_fail(EM_ERR_IO, "cannot read cache directory %s: %s", c->dir, strerror(errno));
      break;
    }
    int is_entry = is_entry_name(e->d_name);
    int is_tmp = !strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX));
    if (!is_entry && !(is_tmp && clean_tmp)) continue;
    struct stat st;
    if (fstatat(c->dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      s = em_fail(EM_ERR_IO, "cannot stat %s/%s: %s", c->dir, e->d_name, strerror(errno));
      break;
    }
    if (!S_ISREG(st.st_mode)) continue;
    if (is_tmp) {
      tmp_remove_if_stale(c, e->d_name, &st);
      continue;
    }
    if (scan_push(l, e->d_name, &st, pinned && !strcmp(pinned, e->d_name)) != 0) {
      s = em_fail(EM_ERR_OUT_OF_MEMORY, "cannot list cache directory %s: out of memory", c->dir);
      break;
    }
  }
  closedir(d);
  if (s != EM_OK) {
    free(l->items);
    memset(l, 0, sizeof *l);
  }
  return s;
}

static int lru_cmp(const void *a, const void *b) {
  const scan_item *x = a, *y = b;
  if (x->pinned != y->pinned) return x->pinned - y->pinned;
  int t = timespec_cmp(x->mtime, y->mtime);
  return t ? t : strcmp(x->name, y->name);
}

static em_status evict(em_jit_cache *c, const char *just_written) {
  scan_list l;
  em_status s = scan_dir(c, just_written, 1, &l);
  if (s != EM_OK) return s;
  if (l.total > c->cap) {
    qsort(l.items, l.n, sizeof *l.items, lru_cmp);
    for (size_t i = 0; i < l.n && l.total > c->cap; i++) {
      if (unlinkat(c->dirfd, l.items[i].name, 0) != 0 && errno != ENOENT) {
        s = em_fail(EM_ERR_IO, "cannot evict %s/%s: %s", c->dir, l.items[i].name, strerror(errno));
        break;
      }
      /* ENOENT: another process evicted it first; it is gone either way. */
      l.total -= l.items[i].size;
      em_log(EM_LOG_CACHE, "%s/%s: evicted (%llu bytes, least recently used)", c->dir, l.items[i].name,
             (unsigned long long)l.items[i].size);
    }
  }
  free(l.items);
  return s;
}

uint64_t em_jit_cache_size(em_jit_cache *c) {
  if (!c) return 0;
  scan_list l;
  if (scan_dir(c, NULL, 0, &l) != EM_OK) return 0;
  free(l.items);
  return l.total;
}

/* ---- writing ------------------------------------------------------------ */

/* Writes header, key and payload to a fresh temp file and renames it over the
 * entry name: readers see the old entry or the new one, never a mix. */
static em_status entry_write(em_jit_cache *c, const char *name, const char *text, size_t tlen,
                             const void *data, size_t size) {
  unsigned char hdr[HEADER_SIZE];
  memcpy(hdr, entry_magic, sizeof entry_magic);
  put_le32(hdr + 8, EM_JIT_CACHE_FORMAT);
  put_le32(hdr + 12, (uint32_t)tlen);
  put_le64(hdr + 16, (uint64_t)size);
  checksum(data, size, hdr + 24);

  size_t dlen = strlen(c->dir);
  char *tmp = malloc(dlen + sizeof "/" TMP_PREFIX "XXXXXX");
  if (!tmp) return em_fail(EM_ERR_OUT_OF_MEMORY, "cannot allocate a temp file name in %s", c->dir);
  memcpy(tmp, c->dir, dlen);
  memcpy(tmp + dlen, "/" TMP_PREFIX "XXXXXX", sizeof "/" TMP_PREFIX "XXXXXX");
  const char *tmp_base = tmp + dlen + 1;

  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    em_status s = em_fail(EM_ERR_IO, "cannot create a temp file in cache directory %s: %s", c->dir,
                          strerror(errno));
    free(tmp);
    return s;
  }
  em_status s = EM_OK;
  int err;
  if ((err = write_all(fd, hdr, sizeof hdr)) || (err = write_all(fd, text, tlen)) ||
      (err = write_all(fd, data, size))) {
    s = em_fail(EM_ERR_IO, "cannot write cache temp file %s: %s", tmp, strerror(err));
  } else if (fsync(fd) != 0) {
    s = em_fail(EM_ERR_IO, "cannot fsync cache temp file %s: %s", tmp, strerror(errno));
  }
  if (close(fd) != 0 && s == EM_OK)
    s = em_fail(EM_ERR_IO, "cannot close cache temp file %s: %s", tmp, strerror(errno));
  if (s == EM_OK && renameat(c->dirfd, tmp_base, c->dirfd, name) != 0)
    s = em_fail(EM_ERR_IO, "cannot rename %s to %s/%s: %s", tmp, c->dir, name, strerror(errno));
  if (s != EM_OK) {
    unlinkat(c->dirfd, tmp_base, 0);
    free(tmp);
    return s;
  }
  free(tmp);
  /* The rename is durable only once the directory itself is on disk. */
  if (fsync(c->dirfd) != 0)
    return em_fail(EM_ERR_IO, "cannot fsync cache directory %s: %s", c->dir, strerror(errno));
  return EM_OK;
}

em_status em_jit_cache_put(em_jit_cache *c, const em_jit_key *key, const void *data, size_t size) {
  if (!c || !key || (!data && size))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_jit_cache_put: NULL argument");
  if ((uint64_t)size > PAYLOAD_MAX)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_jit_cache_put: payload of %zu bytes exceeds the %llu-byte limit",
                   size, PAYLOAD_MAX);
  char *text;
  size_t tlen;
  em_status s = key_text_build(key, &text, &tlen);
  if (s != EM_OK) return s;
  char name[NAME_LEN + 1];
  entry_name(text, tlen, name);
  s = entry_write(c, name, text, tlen, data ? data : "", size);
  free(text);
  if (s != EM_OK) return s;
  s = evict(c, name);
  if (s != EM_OK)
    return em_fail_context(s, "entry %s/%s stored, but evicting over the %llu-byte cap failed", c->dir,
                           name, (unsigned long long)c->cap);
  return EM_OK;
}
