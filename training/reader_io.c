/* gzip decompression in memory (zlib) for the readers. A reader reads its
 * file whole (em_read_file, runtime/file_atomic.c: the library's one
 * whole-file reader), inflates it when it starts with gzip's magic, then
 * parses bytes in memory: one parser for both forms, and a fuzz target can
 * drive it without files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "error.h"
#include "reader_internal.h"

em_status em_gunzip(const char *name, const unsigned char *b, size_t n, size_t limit, unsigned char **out,
                    size_t *out_size, int *gz) {
  *out = NULL;
  *out_size = 0;
  *gz = n >= 2 && b[0] == 0x1f && b[1] == 0x8b;
  if (!*gz) return EM_OK;
  /* The trailer's ISIZE (size mod 2^32) is a good first guess for one
   * member; deflate cannot expand more than 1032:1, which bounds the guess
   * when the "trailer" is really the middle of a truncated file. */
  size_t cap = 1 << 16;
  if (n >= 18) {
    size_t isize = (size_t)b[n - 4] | (size_t)b[n - 3] << 8 | (size_t)b[n - 2] << 16 | (size_t)b[n - 1] << 24;
    if (isize + 1 > cap && isize < limit && isize / 1032 <= n) cap = isize + 1;
  }
  unsigned char *buf = malloc(cap);
  if (!buf) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory", name);
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
    free(buf);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: zlib could not start", name);
  }
  size_t have = 0;
  z.next_in = (unsigned char *)b;
  em_status st = EM_OK;
  size_t in_left = n;
  for (;;) {
    if (have > limit) {
      st = em_fail(EM_ERR_CORRUPT, "%s: gzip: more than %zu bytes decompressed; refused", name, limit);
      break;
    }
    if (have + 1 >= cap) {
      /* Room for limit + 1 bytes at most (and the 0 byte): one byte past the
       * limit is enough to know the output is over it. */
      size_t want = cap > (limit + 2) / 2 ? limit + 2 : cap * 2;
      unsigned char *bigger = realloc(buf, want);
      if (!bigger) {
        st = em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory after %zu decompressed bytes", name, have);
        break;
      }
      buf = bigger;
      cap = want;
    }
    /* zlib counts in uInt: feed at most 1 GiB at a time. */
    uInt chunk_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
    size_t room = cap - 1 - have;
    uInt chunk_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
    z.avail_in = chunk_in;
    z.next_out = buf + have;
    z.avail_out = chunk_out;
    int r = inflate(&z, Z_NO_FLUSH);
    in_left -= chunk_in - z.avail_in;
    have += chunk_out - z.avail_out;
    if (have > limit) continue; /* refused at the top of the loop */
    if (r == Z_STREAM_END) {
      /* Another member may follow (gzip -c a b > c); anything else after the
       * last member is an error rather than bytes silently ignored. */
      if (in_left == 0) break;
      if (in_left >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
        inflateReset(&z);
        continue;
      }
      st = em_fail(EM_ERR_CORRUPT, "%s: byte %zu (compressed): %zu bytes after the end of the gzip stream", name,
                   n - in_left, in_left);
      break;
    }
    if (r == Z_OK) {
      if (in_left == 0 && z.avail_out != 0) {
        st = em_fail(EM_ERR_CORRUPT, "%s: byte %zu (compressed): the gzip stream is truncated", name, n);
        break;
      }
      continue;
    }
    if (r == Z_BUF_ERROR && in_left == 0) {
      st = em_fail(EM_ERR_CORRUPT, "%s: byte %zu (compressed): the gzip stream is truncated", name, n);
      break;
    }
    st = em_fail(EM_ERR_CORRUPT, "%s: byte %zu (compressed): gzip error: %s", name, n - in_left,
                 z.msg ? z.msg : zError(r));
    break;
  }
  inflateEnd(&z);
  if (st != EM_OK) {
    free(buf);
    return st;
  }
  buf[have] = 0;
  *out = buf;
  *out_size = have;
  return EM_OK;
}
