/* Atomic file writes (file_atomic.h): a locked "<path>.tmp", written,
 * fsynced and renamed over path, then the directory fsynced. */
#include "file_atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno;
    if (k == 0) return EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Opens and locks tmp. The file may be one a killed writer left (reused) or
 * one that a writer who held the lock has just renamed to path (it is path
 * now, not tmp: open again). Returns the fd, or -1 with the status set. */
static int open_locked(const char *tmp, const char *path, em_status *st) {
  for (int attempt = 0; attempt < 8; attempt++) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
      *st = em_fail(EM_ERR_IO, "cannot create %s (to write %s): %s", tmp, path, strerror(errno));
      return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
      int err = errno;
      close(fd);
      if (err == EWOULDBLOCK)
        *st = em_fail(EM_ERR_IO, "cannot write %s: another save to it is in progress (%s is locked)", path, tmp);
      else
        *st = em_fail(EM_ERR_IO, "cannot lock %s (to write %s): %s", tmp, path, strerror(err));
      return -1;
    }
    struct stat held, named;
    if (fstat(fd, &held) == 0 && lstat(tmp, &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      return fd;
    close(fd);
  }
  *st = em_fail(EM_ERR_IO, "cannot write %s: %s keeps being replaced by other writers", path, tmp);
  return -1;
}

/* The rename is durable only once the directory holding it is on disk. */
static em_status sync_dir(const char *path) {
  char *copy = strdup(path);
  if (!copy) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to write %s", path);
  const char *dir = dirname(copy);
  em_status s = EM_OK;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  /* EINVAL: a file system that cannot sync directories (nothing to do). */
  if (fd < 0 || (fsync(fd) && errno != EINVAL))
    s = em_fail(EM_ERR_IO, "%s is written, but syncing its directory %s failed (a power loss now may lose it): %s",
                path, dir, strerror(errno));
  if (fd >= 0) close(fd);
  free(copy);
  return s;
}

em_status em_write_file_atomic(const char *path, const em_write_part *parts, int n_parts) {
  if (!path || !*path || (n_parts && !parts) || n_parts < 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_write_file_atomic: bad argument");
  size_t len = strlen(path);
  char *tmp = malloc(len + sizeof ".tmp");
  if (!tmp) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to write %s", path);
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".tmp", sizeof ".tmp");
  em_status s = EM_OK;
  int fd = open_locked(tmp, path, &s);
  if (fd < 0) {
    free(tmp);
    return s;
  }
  int err = ftruncate(fd, 0) ? errno : 0;
  for (int i = 0; i < n_parts && !err; i++) err = write_all(fd, parts[i].bytes, parts[i].size);
  if (!err && fsync(fd)) err = errno;
  if (err) s = em_fail(EM_ERR_IO, "writing %s (for %s): %s", tmp, path, strerror(err));
  /* Renamed while the lock is held: nobody can truncate it in between. */
  if (!s && rename(tmp, path)) s = em_fail(EM_ERR_IO, "renaming %s to %s: %s", tmp, path, strerror(errno));
  if (s) unlink(tmp);
  if (close(fd) && !s) s = em_fail(EM_ERR_IO, "closing %s: %s", path, strerror(errno));
  free(tmp);
  return s ? s : sync_dir(path);
}

em_status em_read_file(const char *path, const char *what, unsigned char **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return em_fail(EM_ERR_IO, "%s: cannot open %s: %s", what, path, strerror(errno));
  /* A directory opens but is no data (reading it fails with EISDIR, and
   * seeking to its end can give 2^63 - 1 on ext4): refused by name. A
   * regular file's size sizes the buffer at once; anything else (a pipe) is
   * read until its end, the buffer doubling. */
  struct stat sb;
  const int known = fstat(fileno(f), &sb) == 0;
  if (known && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return em_fail(EM_ERR_IO, "%s: cannot read %s: it is a directory", what, path);
  }
  size_t cap = 1 << 16, n = 0;
  if (known && S_ISREG(sb.st_mode) && (unsigned long long)sb.st_size >= cap) {
    if ((unsigned long long)sb.st_size >= SIZE_MAX - 1) {
      fclose(f);
      return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: no memory to read %s (%lld bytes)", what, path,
                     (long long)sb.st_size);
    }
    cap = (size_t)sb.st_size + 1;
  }
  unsigned char *p = malloc(cap);
  while (p) {
    if (n + 1 < cap) {
      size_t k = fread(p + n, 1, cap - 1 - n, f);
      n += k;
      if (k == 0) break;
      continue;
    }
    /* Full (a regular file read whole, or a pipe): one more byte says
     * whether it goes on before the buffer doubles. */
    int c = fgetc(f);
    if (c == EOF) break;
    unsigned char *t = cap > SIZE_MAX / 2 ? NULL : realloc(p, cap * 2);
    if (!t) free(p);
    p = t;
    cap *= 2;
    if (p) p[n++] = (unsigned char)c;
  }
  if (!p) {
    fclose(f);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: no memory to read %s (after %zu bytes)", what, path, n);
  }
  const int bad = ferror(f), err = errno;
  fclose(f);
  if (bad) {
    free(p);
    return em_fail(EM_ERR_IO, "%s: cannot read %s: %s (after %zu bytes)", what, path, strerror(err), n);
  }
  p[n] = 0;
  *data = p;
  *size = n;
  return EM_OK;
}
