/* .npy reading and writing (npy.h). The header is a Python dict literal;
 * NumPy writes exactly three keys ('descr', 'fortran_order', 'shape'), so
 * the parser accepts those and nothing else, which keeps it small. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6

static npy_status fail(npy_status s, char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static npy_status fail(npy_status s, char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && cap) vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return s;
}

/* ----------------------------------------------------------- dtypes --- */

static const struct {
  const char *descr;
  em_dtype dtype;
} descrs[] = {
    {"<f2", EM_F16}, {"<f4", EM_F32}, {"<f8", EM_F64}, {"<i4", EM_I32}, {"<i8", EM_I64},
    {"|u1", EM_U8},  {"<u1", EM_U8},  {"|b1", EM_BOOL}, {"<b1", EM_BOOL},
};

static int descr_to_dtype(const char *d, em_dtype *out) {
  for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
    if (!strcmp(descrs[i].descr, d)) {
      *out = descrs[i].dtype;
      return 1;
    }
  return 0;
}

static const char *dtype_to_descr(em_dtype t) {
  for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
    if (descrs[i].dtype == t) return descrs[i].descr;
  return NULL; /* bf16: NumPy has no such dtype */
}

/* ----------------------------------------------------- header parser --- */

typedef struct hdr {
  const char *s, *end; /* the dict's text */
  size_t base;         /* file offset of s's first byte (messages) */
  const char *p;
  char descr[32];
  int fortran, has_descr, has_fortran, has_shape;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
} hdr;

static void skip_ws(hdr *h) {
  while (h->p < h->end && isspace((unsigned char)*h->p)) h->p++;
}

static size_t at(const hdr *h) { return h->base + (size_t)(h->p - h->s); }

static int eat(hdr *h, char c) {
  skip_ws(h);
  if (h->p < h->end && *h->p == c) {
    h->p++;
    return 1;
  }
  return 0;
}

/* A quoted string ('...' or "...") without escapes into buf. */
static int quoted(hdr *h, char *buf, size_t cap) {
  skip_ws(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return 0;
  char q = *h->p++;
  size_t n = 0;
  while (h->p < h->end && *h->p != q) {
    if (*h->p == '\\' || n + 1 >= cap) return 0;
    buf[n++] = *h->p++;
  }
  if (h->p >= h->end) return 0;
  h->p++;
  buf[n] = 0;
  return 1;
}

static int word(hdr *h, const char *w) {
  skip_ws(h);
  size_t n = strlen(w);
  if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n) != 0) return 0;
  h->p += n;
  return 1;
}

/* (d0, d1, ...) with an optional trailing comma; () is a scalar. */
static int shape_tuple(hdr *h) {
  if (!eat(h, '(')) return 0;
  h->ndim = 0;
  while (!eat(h, ')')) {
    skip_ws(h);
    if (h->ndim == EM_MAX_DIMS || h->p >= h->end || !isdigit((unsigned char)*h->p)) return 0;
    int64_t v = 0;
    while (h->p < h->end && isdigit((unsigned char)*h->p)) {
      if (v > (INT64_MAX - 9) / 10) return 0;
      v = v * 10 + (*h->p++ - '0');
    }
    h->shape[h->ndim++] = v;
    if (!eat(h, ',')) {
      if (!eat(h, ')')) return 0;
      break;
    }
  }
  return 1;
}

static npy_status header_value(hdr *h, const char *key, const char *what, char *err, size_t cap) {
  if (!strcmp(key, "descr")) {
    h->has_descr = 1;
    if (quoted(h, h->descr, sizeof h->descr)) return NPY_OK;
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "%s: byte %zu: 'descr' is not a simple dtype string (structured arrays "
                "are not supported)", what, at(h));
  }
  if (!strcmp(key, "fortran_order")) {
    h->has_fortran = 1;
    if (word(h, "True")) h->fortran = 1;
    else if (!word(h, "False"))
      return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: 'fortran_order' is not True or False", what, at(h));
    return NPY_OK;
  }
  if (!strcmp(key, "shape")) {
    h->has_shape = 1;
    if (shape_tuple(h)) return NPY_OK;
    return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: 'shape' is not a tuple of at most %d sizes", what, at(h),
                EM_MAX_DIMS);
  }
  return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: unknown header key '%s'", what, at(h), key);
}

static npy_status parse_dict(hdr *h, const char *what, char *err, size_t cap) {
  h->p = h->s;
  if (!eat(h, '{')) return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: the header is not a dict", what, at(h));
  while (!eat(h, '}')) {
    char key[32];
    if (!quoted(h, key, sizeof key) || !eat(h, ':'))
      return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: malformed header dict", what, at(h));
    npy_status s = header_value(h, key, what, err, cap);
    if (s) return s;
    if (!eat(h, ',')) {
      if (!eat(h, '}')) return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: malformed header dict", what, at(h));
      break;
    }
  }
  if (!h->has_descr || !h->has_fortran || !h->has_shape)
    return fail(NPY_ERR_FORMAT, err, cap, "%s: the header lacks '%s'", what,
                !h->has_descr ? "descr" : !h->has_fortran ? "fortran_order" : "shape");
  return NPY_OK;
}

/* ------------------------------------------------------------- read --- */

/* The header's length field: 2 bytes (1.0) or 4 (2.0, 3.0). Sets *start to
 * the dict's offset. */
static npy_status preamble(const unsigned char *b, size_t size, const char *what, size_t *start, size_t *len, char *err,
                           size_t cap) {
  if (size < MAGIC_LEN + 2 || memcmp(b, MAGIC, MAGIC_LEN) != 0)
    return fail(NPY_ERR_FORMAT, err, cap, "%s: byte 0: not a .npy file (no \\x93NUMPY magic)", what);
  int major = b[6];
  size_t field = major == 1 ? 2 : 4;
  if (major < 1 || major > 3)
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "%s: byte 6: .npy format version %d.%d (1.0 to 3.0 are read)", what,
                major, b[7]);
  if (size < 8 + field) return fail(NPY_ERR_FORMAT, err, cap, "%s: byte 8: truncated header length", what);
  *len = (size_t)b[8] | (size_t)b[9] << 8;
  if (field == 4) *len |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
  *start = 8 + field;
  if (*len > size - *start)
    return fail(NPY_ERR_FORMAT, err, cap, "%s: byte 8: the header claims %zu bytes, %zu remain", what, *len,
                size - *start);
  return NPY_OK;
}

static npy_status check_header(const hdr *h, const char *what, em_dtype *dt, char *err, size_t cap) {
  if (h->fortran)
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "%s: byte %zu: Fortran-order arrays are not supported (save a "
                "C-ordered copy: numpy.ascontiguousarray)", what, h->base);
  if (h->descr[0] == 'O' || h->descr[1] == 'O')
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "%s: byte %zu: object arrays ('%s') are not supported", what, h->base,
                h->descr);
  if (h->descr[0] == '>')
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "%s: byte %zu: big-endian dtype '%s' is not supported", what, h->base,
                h->descr);
  if (!descr_to_dtype(h->descr, dt))
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "%s: byte %zu: dtype '%s' is not supported (f2, f4, f8, i4, i8, u1, "
                "b1 are)", what, h->base, h->descr);
  return NPY_OK;
}

npy_status npy_parse(const void *bytes, size_t size, const char *what, em_tensor **out, char *err, size_t cap) {
  const unsigned char *b = bytes;
  size_t start = 0, len = 0;
  *out = NULL;
  what = what ? what : "<buffer>";
  npy_status s = preamble(b, size, what, &start, &len, err, cap);
  if (s) return s;
  hdr h = {.s = (const char *)b + start, .end = (const char *)b + start + len, .base = start};
  em_dtype dt = EM_F32;
  if ((s = parse_dict(&h, what, err, cap)) || (s = check_header(&h, what, &dt, err, cap))) return s;
  size_t data = start + len, n = 1;
  for (int d = 0; d < h.ndim; d++) {
    if (h.shape[d] && n > SIZE_MAX / (size_t)h.shape[d] / em_dtype_size(dt))
      return fail(NPY_ERR_FORMAT, err, cap, "%s: the shape's size overflows", what);
    n *= (size_t)h.shape[d];
  }
  size_t nbytes = n * em_dtype_size(dt);
  if (size - data != nbytes)
    return fail(NPY_ERR_FORMAT, err, cap, "%s: byte %zu: the shape needs %zu data bytes, the file has %zu", what, data,
                nbytes, size - data);
  if (em_tensor_from_host(em_cpu(), dt, h.ndim, h.shape, b + data, nbytes, out))
    return fail(NPY_ERR_MEMORY, err, cap, "%s: %s", what, em_last_error());
  return NPY_OK;
}

npy_status npy_load(const char *path, em_tensor **out, char *err, size_t cap) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return fail(NPY_ERR_IO, err, cap, "%s: %s", path, strerror(errno));
  size_t n = 0, cap_b = 1 << 16;
  unsigned char *buf = malloc(cap_b);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap_b - n, f)) > 0) {
    n += got;
    if (n == cap_b) {
      unsigned char *nb = realloc(buf, cap_b *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf) return fail(NPY_ERR_MEMORY, err, cap, "%s: out of memory", path);
  npy_status s = bad ? fail(NPY_ERR_IO, err, cap, "%s: read error", path) : npy_parse(buf, n, path, out, err, cap);
  free(buf);
  return s;
}

/* ------------------------------------------------------------ write --- */

static void shape_text(const em_tensor *t, char *buf, size_t cap) {
  int nd = em_tensor_ndim(t);
  const int64_t *sh = em_tensor_shape(t);
  snprintf(buf, cap, "(");
  for (int d = 0; d < nd; d++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", d ? ", " : "", (long long)sh[d]);
  snprintf(buf + strlen(buf), cap - strlen(buf), nd == 1 ? ",)" : ")");
}

npy_status npy_encode(const em_tensor *t, void **bytes, size_t *size, char *err, size_t cap) {
  *bytes = NULL, *size = 0;
  const char *descr = dtype_to_descr(em_tensor_dtype(t));
  if (!descr)
    return fail(NPY_ERR_UNSUPPORTED, err, cap, "NumPy has no dtype for Ember's %s", em_dtype_name(em_tensor_dtype(t)));
  char shape[EM_MAX_DIMS * 24 + 8], dict[EM_MAX_DIMS * 24 + 96];
  shape_text(t, shape, sizeof shape);
  int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  /* The dict, padded with spaces and ended by '\n', so that the data starts
   * at a multiple of 64 bytes (NumPy's alignment). */
  size_t pre = 10, hlen = ((pre + (size_t)dl + 1 + 63) / 64) * 64 - pre; /* < 1 KiB: format 1.0 always fits */
  size_t nbytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
  unsigned char *b = malloc(pre + hlen + nbytes + 1);
  if (!b) return fail(NPY_ERR_MEMORY, err, cap, "out of memory");
  memcpy(b, MAGIC, MAGIC_LEN);
  b[6] = 1, b[7] = 0;
  b[8] = (unsigned char)hlen, b[9] = (unsigned char)(hlen >> 8);
  memset(b + pre, ' ', hlen);
  memcpy(b + pre, dict, (size_t)dl);
  b[pre + hlen - 1] = '\n';
  if (nbytes && em_tensor_to_host(t, b + pre + hlen, nbytes)) {
    free(b);
    return fail(NPY_ERR_IO, err, cap, "reading the tensor: %s", em_last_error());
  }
  *bytes = b, *size = pre + hlen + nbytes;
  return NPY_OK;
}

npy_status npy_save(const char *path, const em_tensor *t, char *err, size_t cap) {
  void *b;
  size_t n;
  npy_status s = npy_encode(t, &b, &n, err, cap);
  if (s) return s;
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(b, 1, n, f) == n;
  int e = errno;
  if (f && fclose(f) != 0 && ok) ok = 0, e = errno;
  free(b);
  return ok ? NPY_OK : fail(NPY_ERR_IO, err, cap, "%s: cannot write: %s", path, strerror(e));
}
