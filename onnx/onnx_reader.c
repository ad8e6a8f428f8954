/* ONNX model and tensor reader: protobuf-c does the decoding; this file checks
 * the wire format first (bounded nesting, lengths inside the buffer), then
 * copies what Ember needs into plain structures owned by one arena, so that
 * no protobuf-c type or allocation outlives a load. */
#include "onnx_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "onnx/onnx.pb-c.h" /* generated at build time into build/gen/onnx/ */

/* ------------------------------------------------------------ arena --- */

/* Every allocation of a loaded model or tensor comes from one arena, so a
 * failure half-way through a load frees everything with one call. */
typedef struct arena_chunk {
  struct arena_chunk *next;
  size_t cap, used;
} arena_chunk;

typedef struct arena {
  arena_chunk *head;
  /* Where tensors with external data find their files (the model file's
   * directory), or NULL when the load has none (then they are refused).
   * Kept here because every tensor read of a load has the arena at hand. */
  const char *external_dir;
} arena;

#define ARENA_HEADER 64 /* chunk header rounded up so data starts 64-aligned */
#define ARENA_CHUNK (64u * 1024u)

static void *arena_alloc(arena *a, size_t size, size_t align) {
  arena_chunk *c = a->head;
  if (size == 0) size = 1; /* callers get a valid pointer even for no bytes */
  if (c) {
    size_t at = (c->used + align - 1) & ~(align - 1);
    if (at <= c->cap && size <= c->cap - at) {
      c->used = at + size;
      return (unsigned char *)c + ARENA_HEADER + at;
    }
  }
  size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
  if (cap > SIZE_MAX - ARENA_HEADER - 64) return NULL;
  size_t total = (ARENA_HEADER + cap + 63) & ~(size_t)63;
  c = aligned_alloc(64, total);
  if (!c) return NULL;
  c->cap = total - ARENA_HEADER;
  c->used = size;
  /* A chunk made for one big block goes behind the current one, so the
   * current chunk's free space stays in use for small allocations. */
  if (a->head && size > ARENA_CHUNK) {
    c->next = a->head->next;
    a->head->next = c;
  } else {
    c->next = a->head;
    a->head = c;
  }
  return (unsigned char *)c + ARENA_HEADER;
}

static void arena_free(arena *a) {
  if (!a) return;
  for (arena_chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

/* Zeroed array of n elements of `size` bytes; NULL on overflow or no memory. */
static void *arena_array(arena *a, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  void *p = arena_alloc(a, n * size, 16);
  if (p) memset(p, 0, n * size);
  return p;
}

static char *arena_strndup(arena *a, const char *s, size_t n) {
  char *d = arena_alloc(a, n + 1, 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* protobuf-c gives NULL for an absent string field; Ember sees "". */
static char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s ? s : "", s ? strlen(s) : 0); }

static em_status oom(void) { return em_fail(EM_ERR_OUT_OF_MEMORY, "out of memory while copying the ONNX data"); }

/* ------------------------------------------------------- wire check --- */

/* Deeper nesting than this is refused before protobuf-c (which recurses
 * without a limit) sees the bytes. Each graph nested in an attribute costs 3
 * levels (graph, node, attribute) and a declared type about 5 more, so 100
 * leaves room for some 30 nested graphs, far beyond real models. */
#define MAX_NESTING 100

/* Reads a varint at p[*at] (at most 10 bytes, as the wire format allows). */
static int read_varint(const uint8_t *p, size_t n, size_t *at, uint64_t *v) {
  uint64_t r = 0;
  for (unsigned i = 0; i < 10; i++) {
    if (*at >= n) return 0;
    uint8_t b = p[(*at)++];
    r |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      *v = r;
      return 1;
    }
  }
  return 0;
}

/* Checks that p[0..n) is a well-formed protobuf message of descriptor d
 * (NULL: contents unknown, only the framing is checked): every tag, varint
 * and length lies inside its parent, nesting of known sub-messages stays
 * within MAX_NESTING. `base` is the offset of p in the file, for messages. */
static em_status wire_check(const uint8_t *p, size_t n, size_t base, const ProtobufCMessageDescriptor *d,
                            int depth) {
  size_t at = 0;
  while (at < n) {
    size_t start = at;
    uint64_t key, len;
    if (!read_varint(p, n, &at, &key))
      return em_fail(EM_ERR_CORRUPT, "truncated or overlong field key at byte %zu", base + start);
    uint64_t field = key >> 3;
    unsigned wire = (unsigned)(key & 7);
    if (field == 0 || field > 0x1fffffff)
      return em_fail(EM_ERR_CORRUPT, "field number %llu at byte %zu is outside 1..2^29-1",
                     (unsigned long long)field, base + start);
    switch (wire) {
    case 0:
      if (!read_varint(p, n, &at, &len))
        return em_fail(EM_ERR_CORRUPT, "truncated varint of field %llu at byte %zu", (unsigned long long)field,
                       base + start);
      break;
    case 1:
    case 5: {
      size_t w = wire == 1 ? 8 : 4;
      if (n - at < w)
        return em_fail(EM_ERR_CORRUPT, "field %llu at byte %zu needs %zu bytes, %zu left",
                       (unsigned long long)field, base + start, w, n - at);
      at += w;
      break;
    }
    case 2: {
      if (!read_varint(p, n, &at, &len))
        return em_fail(EM_ERR_CORRUPT, "truncated length of field %llu at byte %zu", (unsigned long long)field,
                       base + start);
      if (len > n - at)
        return em_fail(EM_ERR_CORRUPT, "field %llu at byte %zu claims %llu bytes but only %zu remain",
                       (unsigned long long)field, base + start, (unsigned long long)len, n - at);
      const ProtobufCFieldDescriptor *f = d ? protobuf_c_message_descriptor_get_field(d, (unsigned)field) : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (depth + 1 > MAX_NESTING)
          return em_fail(EM_ERR_CORRUPT, "messages nest deeper than %d levels at byte %zu", MAX_NESTING,
                         base + start);
        em_status s = wire_check(p + at, (size_t)len, base + at, f->descriptor, depth + 1);
        if (s != EM_OK) return s;
      }
      at += (size_t)len;
      break;
    }
    default:
      /* 3 and 4 are proto2 groups, which onnx.proto never uses; 6 and 7 do not exist. */
      return em_fail(EM_ERR_CORRUPT, "field %llu at byte %zu has wire type %u, which ONNX never uses",
                     (unsigned long long)field, base + start, wire);
    }
  }
  return EM_OK;
}

/* Checks the framing of bytes meant as message d. */
static em_status check_bytes(const ProtobufCMessageDescriptor *d, const void *bytes, size_t size) {
  em_status s = wire_check(bytes, size, 0, d, 0);
  return s == EM_OK ? EM_OK : em_fail_context(s, "not a valid %s", d->name);
}

/* Decodes bytes that passed check_bytes. */
static em_status decode(const ProtobufCMessageDescriptor *d, const void *bytes, size_t size, ProtobufCMessage **out) {
  *out = protobuf_c_message_unpack(d, NULL, size, bytes);
  if (!*out)
    return em_fail(EM_ERR_CORRUPT,
                   "not a valid %s: protobuf-c rejected it (a field has the wrong wire type for %s, "
                   "or a packed array or string is malformed)",
                   d->name, d->name);
  return EM_OK;
}

/* -------------------------------------------------------- dtypes --- */

/* TensorProto.DataType codes, from onnx.proto (ONNX 1.12):
 * FLOAT=1 UINT8=2 INT8=3 UINT16=4 INT16=5 INT32=6 INT64=7 STRING=8 BOOL=9
 * FLOAT16=10 DOUBLE=11 UINT32=12 UINT64=13 COMPLEX64=14 COMPLEX128=15 BFLOAT16=16. */
em_onnx_dtype em_onnx_dtype_from_onnx(int32_t code) {
  static const em_onnx_dtype map[] = {
    [1] = EM_ONNX_FLOAT,       [2] = EM_ONNX_UINT8,      [3] = EM_ONNX_INT8,    [4] = EM_ONNX_UINT16,
    [5] = EM_ONNX_INT16,       [6] = EM_ONNX_INT32,      [7] = EM_ONNX_INT64,   [8] = EM_ONNX_STRING,
    [9] = EM_ONNX_BOOL,        [10] = EM_ONNX_FLOAT16,   [11] = EM_ONNX_DOUBLE, [12] = EM_ONNX_UINT32,
    [13] = EM_ONNX_UINT64,     [14] = EM_ONNX_COMPLEX64, [15] = EM_ONNX_COMPLEX128,
    [16] = EM_ONNX_BFLOAT16,
  };
  if (code < 0 || (size_t)code >= sizeof map / sizeof map[0]) return EM_ONNX_UNDEFINED;
  return map[code];
}

static const struct {
  const char *name;
  size_t size;
} dtype_info[EM_ONNX_DTYPE_COUNT] = {
  [EM_ONNX_UNDEFINED] = {"undefined", 0}, [EM_ONNX_FLOAT] = {"float", 4},
  [EM_ONNX_DOUBLE] = {"double", 8},       [EM_ONNX_FLOAT16] = {"float16", 2},
  [EM_ONNX_BFLOAT16] = {"bfloat16", 2},   [EM_ONNX_INT8] = {"int8", 1},
  [EM_ONNX_INT16] = {"int16", 2},         [EM_ONNX_INT32] = {"int32", 4},
  [EM_ONNX_INT64] = {"int64", 8},         [EM_ONNX_UINT8] = {"uint8", 1},
  [EM_ONNX_UINT16] = {"uint16", 2},       [EM_ONNX_UINT32] = {"uint32", 4},
  [EM_ONNX_UINT64] = {"uint64", 8},       [EM_ONNX_BOOL] = {"bool", 1},
  [EM_ONNX_STRING] = {"string", 0},       [EM_ONNX_COMPLEX64] = {"complex64", 8},
  [EM_ONNX_COMPLEX128] = {"complex128", 16},
};

const char *em_onnx_dtype_name(em_onnx_dtype t) {
  return (unsigned)t < EM_ONNX_DTYPE_COUNT ? dtype_info[t].name : "invalid";
}

size_t em_onnx_dtype_size(em_onnx_dtype t) { return (unsigned)t < EM_ONNX_DTYPE_COUNT ? dtype_info[t].size : 0; }

const char *em_onnx_attr_type_name(em_onnx_attr_type t) {
  static const char *const names[] = {
    [EM_ONNX_ATTR_FLOAT] = "float",   [EM_ONNX_ATTR_INT] = "int",       [EM_ONNX_ATTR_STRING] = "string",
    [EM_ONNX_ATTR_TENSOR] = "tensor", [EM_ONNX_ATTR_GRAPH] = "graph",   [EM_ONNX_ATTR_FLOATS] = "floats",
    [EM_ONNX_ATTR_INTS] = "ints",     [EM_ONNX_ATTR_STRINGS] = "strings", [EM_ONNX_ATTR_TENSORS] = "tensors",
    [EM_ONNX_ATTR_GRAPHS] = "graphs", [EM_ONNX_ATTR_TYPE] = "type_proto", [EM_ONNX_ATTR_TYPES] = "type_protos",
  };
  if ((unsigned)t < sizeof names / sizeof names[0] && names[t]) return names[t];
  return "invalid";
}

/* ------------------------------------------------------- tensors --- */

/* "[2,3,4]" into buf, cut short when long. */
static const char *dims_text(const int64_t *dims, size_t rank, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  at += (size_t)snprintf(buf, cap, "[");
  for (size_t i = 0; i < rank && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
  return buf;
}

static void put_le(uint8_t *dst, uint64_t v, size_t size) {
  for (size_t i = 0; i < size; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

/* The typed field a data type's values go in when raw_data is not used
 * (onnx.proto's comments on each *_data field). */
typedef enum data_field { F_NONE, F_FLOAT, F_INT32, F_STRING, F_INT64, F_DOUBLE, F_UINT64 } data_field;

static const char *const data_field_name[] = {
  [F_NONE] = "-", [F_FLOAT] = "float_data", [F_INT32] = "int32_data", [F_STRING] = "string_data",
  [F_INT64] = "int64_data", [F_DOUBLE] = "double_data", [F_UINT64] = "uint64_data",
};

static data_field field_for(em_onnx_dtype t) {
  switch (t) {
  case EM_ONNX_FLOAT: return F_FLOAT;
  /* bfloat16 in int32_data is what onnx.helper.make_tensor writes (the
   * comment in 1.12's proto lists only float16; later versions add bfloat16). */
  case EM_ONNX_INT32: case EM_ONNX_INT16: case EM_ONNX_INT8: case EM_ONNX_UINT16: case EM_ONNX_UINT8:
  case EM_ONNX_BOOL: case EM_ONNX_FLOAT16: case EM_ONNX_BFLOAT16: return F_INT32;
  case EM_ONNX_INT64: return F_INT64;
  case EM_ONNX_DOUBLE: return F_DOUBLE;
  case EM_ONNX_UINT32: case EM_ONNX_UINT64: return F_UINT64;
  default: return F_NONE;
  }
}

/* Range of an element type's values when carried in int32_data. */
static void int32_range(em_onnx_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case EM_ONNX_INT8: *lo = -128, *hi = 127; break;
  case EM_ONNX_UINT8: *lo = 0, *hi = 255; break;
  case EM_ONNX_INT16: *lo = -32768, *hi = 32767; break;
  case EM_ONNX_UINT16: case EM_ONNX_FLOAT16: case EM_ONNX_BFLOAT16: *lo = 0, *hi = 65535; break;
  case EM_ONNX_BOOL: *lo = 0, *hi = 1; break;
  default: *lo = INT32_MIN, *hi = INT32_MAX; break;
  }
}

/* Copies the typed field's values into t->data as little-endian elements. */
static em_status copy_typed(const Onnx__TensorProto *tp, data_field f, em_onnx_tensor *t) {
  size_t es = em_onnx_dtype_size(t->dtype);
  uint8_t *dst = t->data;
  for (size_t i = 0; i < t->n_elements; i++) {
    uint64_t bits = 0;
    switch (f) {
    case F_FLOAT: memcpy(&bits, &tp->float_data[i], 4); break;
    case F_DOUBLE: memcpy(&bits, &tp->double_data[i], 8); break;
    case F_INT64: bits = (uint64_t)tp->int64_data[i]; break;
    case F_UINT64:
      bits = tp->uint64_data[i];
      if (t->dtype == EM_ONNX_UINT32 && bits > UINT32_MAX)
        return em_fail(EM_ERR_CORRUPT, "uint64_data[%zu] = %llu does not fit a uint32 element", i,
                       (unsigned long long)bits);
      break;
    case F_INT32: {
      int64_t lo, hi, v = tp->int32_data[i];
      int32_range(t->dtype, &lo, &hi);
      if (v < lo || v > hi)
        return em_fail(EM_ERR_CORRUPT, "int32_data[%zu] = %lld is outside %lld..%lld for a %s element", i,
                       (long long)v, (long long)lo, (long long)hi, em_onnx_dtype_name(t->dtype));
      bits = (uint64_t)v;
      break;
    }
    default: return em_fail(EM_ERR_INTERNAL, "copy_typed: no field for %s", em_onnx_dtype_name(t->dtype));
    }
    put_le(dst + i * es, bits, es);
  }
  return EM_OK;
}

/* Number of values each typed field holds, indexed by data_field. */
static void typed_counts(const Onnx__TensorProto *tp, size_t counts[7]) {
  counts[F_NONE] = 0;
  counts[F_FLOAT] = tp->n_float_data;
  counts[F_INT32] = tp->n_int32_data;
  counts[F_STRING] = tp->n_string_data;
  counts[F_INT64] = tp->n_int64_data;
  counts[F_DOUBLE] = tp->n_double_data;
  counts[F_UINT64] = tp->n_uint64_data;
}

/* ------------------------------------------------- external data --- */

/* A location relative to the model's directory that stays inside it (ONNX's
 * checker rules: no absolute path, no ".." component), so a model cannot
 * make the loader read /etc/passwd or a sibling's files. */
static int location_ok(const char *loc) {
  if (!loc[0] || loc[0] == '/') return 0;
  for (const char *p = loc; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
    p += n + (p[n] == '/');
  }
  return 1;
}

/* The external_data entries: location (required), offset and length
 * (decimal, optional); "checksum" and unknown keys are ignored, as ONNX's
 * own loader does. */
static em_status external_fields(const Onnx__TensorProto *tp, const char *name, const char **loc, uint64_t *offset,
                                 int64_t *length) {
  *loc = NULL, *offset = 0, *length = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const char *k = tp->external_data[i]->key ? tp->external_data[i]->key : "";
    const char *v = tp->external_data[i]->value ? tp->external_data[i]->value : "";
    char *end;
    errno = 0;
    if (!strcmp(k, "location")) {
      *loc = v;
    } else if (!strcmp(k, "offset") || !strcmp(k, "length")) {
      unsigned long long n = strtoull(v, &end, 10);
      if (!v[0] || *end || errno || v[0] == '-' || n > INT64_MAX)
        return em_fail(EM_ERR_CORRUPT, "tensor '%s': external_data %s '%s' is not a byte count", name, k, v);
      if (k[0] == 'o') *offset = n;
      else *length = (int64_t)n;
    }
  }
  if (!*loc) return em_fail(EM_ERR_CORRUPT, "tensor '%s' is external but its external_data has no location", name);
  if (!location_ok(*loc))
    return em_fail(EM_ERR_CORRUPT, "tensor '%s': external data location '%s' must be a relative path inside the "
                   "model's directory (no '/' at the start, no '..')", name, *loc);
  return EM_OK;
}

/* nbytes at offset of a file, read into the arena. */
static em_status read_range(arena *a, const char *path, uint64_t offset, em_onnx_tensor *t) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return em_fail(EM_ERR_IO, "tensor '%s': cannot open its external data %s: %s", t->name, path,
                             strerror(errno));
  struct stat st;
  em_status s = EM_OK;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) s = em_fail(EM_ERR_IO, "tensor '%s': %s is not a readable file",
                                                              t->name, path);
  else if (offset > (uint64_t)st.st_size || t->nbytes > (uint64_t)st.st_size - offset)
    s = em_fail(EM_ERR_CORRUPT, "tensor '%s': its %zu bytes at offset %llu of %s run past the file's end (%lld "
                "bytes)", t->name, t->nbytes, (unsigned long long)offset, path, (long long)st.st_size);
  else if (!(t->data = arena_alloc(a, t->nbytes, 64)))
    s = oom();
  for (size_t got = 0; !s && got < t->nbytes;) {
    ssize_t r = pread(fd, (char *)t->data + got, t->nbytes - got, (off_t)(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) s = em_fail(EM_ERR_IO, "tensor '%s': cannot read %s: %s", t->name, path,
                            r < 0 ? strerror(errno) : "the file shrank while read");
    else got += (size_t)r;
  }
  close(fd);
  return s;
}

static em_status read_external(arena *a, const Onnx__TensorProto *tp, em_onnx_tensor *t, const char *dims) {
  const char *loc;
  uint64_t offset;
  int64_t length;
  em_status s = external_fields(tp, t->name, &loc, &offset, &length);
  if (s) return s;
  if (tp->has_raw_data || tp->n_float_data || tp->n_int32_data || tp->n_int64_data || tp->n_double_data ||
      tp->n_uint64_data)
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' is external but also holds values in the model", t->name);
  if (length >= 0 && (uint64_t)length != t->nbytes)
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' (%s, dims %s): %zu bytes expected, external_data length is %lld",
                   t->name, em_onnx_dtype_name(t->dtype), dims, t->nbytes, (long long)length);
  size_t n = strlen(a->external_dir) + strlen(loc) + 2;
  char *path = malloc(n);
  if (!path) return oom();
  snprintf(path, n, "%s/%s", a->external_dir, loc);
  s = read_range(a, path, offset, t);
  free(path);
  return s;
}

static em_status tensor_from_proto(arena *a, const Onnx__TensorProto *tp, em_onnx_tensor *t) {
  memset(t, 0, sizeof *t);
  if (!(t->name = arena_strdup(a, tp->name))) return oom();
  if (tp->segment)
    return em_fail(EM_ERR_UNSUPPORTED, "tensor '%s' is one segment of a larger tensor (TensorProto.segment); "
                   "segmented tensors are not read", t->name);
  int external = (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
                 tp->n_external_data;
  if (external && !a->external_dir)
    return em_fail(EM_ERR_UNSUPPORTED, "tensor '%s' keeps its data in an external file (external_data), which is "
                   "read only for a model loaded from a file or given the directory of its data files", t->name);
  if (!tp->has_data_type || tp->data_type == 0)
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' has data_type 0 (UNDEFINED); a TensorProto must name its "
                   "element type", t->name);
  t->dtype = em_onnx_dtype_from_onnx(tp->data_type);
  if (t->dtype == EM_ONNX_UNDEFINED)
    return em_fail(EM_ERR_UNSUPPORTED, "tensor '%s' has data_type %d, which is not an ONNX 1.12 type (1..16)",
                   t->name, (int)tp->data_type);
  if (t->dtype == EM_ONNX_STRING || t->dtype == EM_ONNX_COMPLEX64 || t->dtype == EM_ONNX_COMPLEX128)
    return em_fail(EM_ERR_UNSUPPORTED, "tensor '%s' holds %s elements; %s tensors are not read", t->name,
                   em_onnx_dtype_name(t->dtype), em_onnx_dtype_name(t->dtype));

  char dbuf[160];
  t->rank = tp->n_dims;
  size_t count = 1;
  if (t->rank) {
    if (!(t->dims = arena_array(a, t->rank, sizeof *t->dims))) return oom();
    for (size_t i = 0; i < t->rank; i++) {
      int64_t d = tp->dims[i];
      if (d < 0)
        return em_fail(EM_ERR_CORRUPT, "tensor '%s' has dims %s: dimension %zu is negative", t->name,
                       dims_text(tp->dims, tp->n_dims, dbuf, sizeof dbuf), i);
      t->dims[i] = d;
      if ((uint64_t)d > SIZE_MAX || __builtin_mul_overflow(count, (size_t)d, &count))
        return em_fail(EM_ERR_CORRUPT, "tensor '%s' has dims %s, whose product overflows", t->name,
                       dims_text(tp->dims, tp->n_dims, dbuf, sizeof dbuf));
    }
  }
  size_t es = em_onnx_dtype_size(t->dtype);
  if (__builtin_mul_overflow(count, es, &t->nbytes))
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' has dims %s: %zu elements of %zu bytes overflow", t->name,
                   dims_text(tp->dims, tp->n_dims, dbuf, sizeof dbuf), count, es);
  t->n_elements = count;
  dims_text(tp->dims, tp->n_dims, dbuf, sizeof dbuf);
  if (external) return read_external(a, tp, t, dbuf);

  /* Exactly one place may hold the values: raw_data or the type's field. */
  size_t counts[7];
  typed_counts(tp, counts);
  data_field want = field_for(t->dtype);
  for (int f = F_FLOAT; f <= F_UINT64; f++) {
    if (!counts[f] || f == (int)want) continue;
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' is %s but holds %zu values in %s (a %s tensor's values go in "
                   "raw_data or %s)", t->name, em_onnx_dtype_name(t->dtype), counts[f], data_field_name[f],
                   em_onnx_dtype_name(t->dtype), data_field_name[want]);
  }
  if (tp->has_raw_data && counts[want])
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' holds values in both raw_data and %s; only one may be used",
                   t->name, data_field_name[want]);

  /* Sizes are checked before allocating: dims alone may claim any size. */
  if (tp->has_raw_data) {
    if (tp->raw_data.len != t->nbytes)
      return em_fail(EM_ERR_CORRUPT, "tensor '%s' (%s, dims %s): %zu elements x %zu bytes = %zu bytes "
                     "expected, raw_data holds %zu", t->name, em_onnx_dtype_name(t->dtype), dbuf, count, es,
                     t->nbytes, tp->raw_data.len);
    if (!(t->data = arena_alloc(a, t->nbytes, 64))) return oom();
    if (t->nbytes) memcpy(t->data, tp->raw_data.data, t->nbytes);
    return EM_OK;
  }
  if (counts[want] != count)
    return em_fail(EM_ERR_CORRUPT, "tensor '%s' (%s, dims %s): %zu elements expected, %s holds %zu%s", t->name,
                   em_onnx_dtype_name(t->dtype), dbuf, count, data_field_name[want], counts[want],
                   counts[want] ? "" : " and there is no raw_data");
  if (!(t->data = arena_alloc(a, t->nbytes, 64))) return oom();
  return copy_typed(tp, want, t);
}

/* --------------------------------------------------------- types --- */

static em_status type_from_proto(arena *a, const Onnx__TypeProto *tp, em_onnx_type *t);

static em_status shape_from_proto(arena *a, const Onnx__TensorShapeProto *sp, em_onnx_type *t) {
  if (!sp) return EM_OK; /* no shape: rank unknown */
  t->has_shape = 1;
  t->rank = sp->n_dim;
  if (!t->rank) return EM_OK;
  if (!(t->dims = arena_array(a, t->rank, sizeof *t->dims))) return oom();
  for (size_t i = 0; i < t->rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = sp->dim[i];
    t->dims[i].value = -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return em_fail(EM_ERR_CORRUPT, "dimension %zu of the shape has dim_value %lld; sizes are >= 0 "
                       "(an unknown size uses dim_param or nothing)", i, (long long)d->dim_value);
      t->dims[i].value = d->dim_value;
    } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
      if (!(t->dims[i].param = arena_strdup(a, d->dim_param))) return oom();
    }
  }
  return EM_OK;
}

/* The nested element type of a sequence, optional or map, when given. */
static em_status elem_from_proto(arena *a, const Onnx__TypeProto *tp, em_onnx_type *t) {
  if (!tp) return EM_OK;
  if (!(t->elem = arena_array(a, 1, sizeof *t->elem))) return oom();
  return type_from_proto(a, tp, t->elem);
}

/* Recursion depth is bounded by the wire check's MAX_NESTING. */
static em_status type_from_proto(arena *a, const Onnx__TypeProto *tp, em_onnx_type *t) {
  memset(t, 0, sizeof *t);
  if (!tp) return EM_OK;
  switch (tp->value_case) {
  case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
  case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: {
    int sparse = tp->value_case == ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE;
    t->kind = sparse ? EM_ONNX_VALUE_SPARSE_TENSOR : EM_ONNX_VALUE_TENSOR;
    /* Both messages have the same two fields; read them one by one. */
    int32_t elem = sparse ? (tp->sparse_tensor_type ? tp->sparse_tensor_type->elem_type : 0)
                          : (tp->tensor_type ? tp->tensor_type->elem_type : 0);
    const Onnx__TensorShapeProto *shape = sparse ? (tp->sparse_tensor_type ? tp->sparse_tensor_type->shape : NULL)
                                                 : (tp->tensor_type ? tp->tensor_type->shape : NULL);
    t->onnx_elem_type = elem;
    t->dtype = em_onnx_dtype_from_onnx(elem);
    return shape_from_proto(a, shape, t);
  }
  case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
    t->kind = EM_ONNX_VALUE_SEQUENCE;
    return elem_from_proto(a, tp->sequence_type ? tp->sequence_type->elem_type : NULL, t);
  case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
    t->kind = EM_ONNX_VALUE_OPTIONAL;
    return elem_from_proto(a, tp->optional_type ? tp->optional_type->elem_type : NULL, t);
  case ONNX__TYPE_PROTO__VALUE_MAP_TYPE:
    t->kind = EM_ONNX_VALUE_MAP;
    if (tp->map_type) {
      t->onnx_elem_type = tp->map_type->key_type;
      t->dtype = em_onnx_dtype_from_onnx(tp->map_type->key_type);
    }
    return elem_from_proto(a, tp->map_type ? tp->map_type->value_type : NULL, t);
  default:
    t->kind = EM_ONNX_VALUE_UNSET;
    return EM_OK;
  }
}

static em_status value_infos_from_proto(arena *a, Onnx__ValueInfoProto *const *vp, size_t n, const char *role,
                                        em_onnx_value_info **out) {
  *out = NULL;
  if (!n) return EM_OK;
  if (!(*out = arena_array(a, n, sizeof **out))) return oom();
  for (size_t i = 0; i < n; i++) {
    em_onnx_value_info *v = &(*out)[i];
    if (!(v->name = arena_strdup(a, vp[i]->name))) return oom();
    em_status s = type_from_proto(a, vp[i]->type, &v->type);
    if (s != EM_OK) return em_fail_context(s, "%s %zu ('%s')", role, i, v->name);
  }
  return EM_OK;
}

/* ---------------------------------------------------- attributes --- */

static em_status graph_from_proto(arena *a, const Onnx__GraphProto *gp, em_onnx_graph *g);

/* The type of an attribute written before IR version 2 made `type`
 * mandatory: the one value field that is set. 0 when none or several are. */
static int infer_attr_type(const Onnx__AttributeProto *ap) {
  int type = 0, found = 0;
#define CHECK(cond, T) \
  if (cond) type = (T), found++
  CHECK(ap->has_f, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  CHECK(ap->has_i, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  CHECK(ap->has_s, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  CHECK(ap->t, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  CHECK(ap->g, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
  CHECK(ap->n_floats, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  CHECK(ap->n_ints, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  CHECK(ap->n_strings, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  CHECK(ap->n_tensors, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS);
  CHECK(ap->n_graphs, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS);
  CHECK(ap->sparse_tensor, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR);
  CHECK(ap->tp, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO);
  CHECK(ap->n_sparse_tensors, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS);
  CHECK(ap->n_type_protos, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS);
#undef CHECK
  return found == 1 ? type : 0;
}

static em_status str_from_bytes(arena *a, ProtobufCBinaryData b, em_onnx_str *s) {
  s->len = b.len;
  return (s->data = arena_strndup(a, (const char *)b.data, b.len)) ? EM_OK : oom();
}

static em_status attr_from_proto(arena *a, const Onnx__AttributeProto *ap, em_onnx_attr *at) {
  memset(at, 0, sizeof *at);
  if (!(at->name = arena_strdup(a, ap->name))) return oom();
  if (!at->name[0]) return em_fail(EM_ERR_CORRUPT, "an attribute has no name");
  if (ap->ref_attr_name)
    return em_fail(EM_ERR_UNSUPPORTED, "attribute '%s' refers to function attribute '%s' (ref_attr_name, "
                   "valid only inside a FunctionProto); not read", at->name, ap->ref_attr_name);
  int type = ap->has_type && ap->type ? (int)ap->type : infer_attr_type(ap);
  em_status s = EM_OK;
  switch (type) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
    at->type = EM_ONNX_ATTR_FLOAT, at->f = ap->f;
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
    at->type = EM_ONNX_ATTR_INT, at->i = ap->i;
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
    at->type = EM_ONNX_ATTR_STRING;
    s = str_from_bytes(a, ap->s, &at->s);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
    at->type = EM_ONNX_ATTR_TENSOR;
    if (!ap->t) return em_fail(EM_ERR_CORRUPT, "attribute '%s' is of type tensor but has no t", at->name);
    if (!(at->t = arena_array(a, 1, sizeof *at->t))) return oom();
    s = tensor_from_proto(a, ap->t, at->t);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
    at->type = EM_ONNX_ATTR_GRAPH;
    if (!ap->g) return em_fail(EM_ERR_CORRUPT, "attribute '%s' is of type graph but has no g", at->name);
    if (!(at->g = arena_array(a, 1, sizeof *at->g))) return oom();
    s = graph_from_proto(a, ap->g, at->g);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
    at->type = EM_ONNX_ATTR_FLOATS, at->n = ap->n_floats;
    if (!(at->floats = arena_array(a, at->n, sizeof *at->floats))) return oom();
    if (at->n) memcpy(at->floats, ap->floats, at->n * sizeof *at->floats);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
    at->type = EM_ONNX_ATTR_INTS, at->n = ap->n_ints;
    if (!(at->ints = arena_array(a, at->n, sizeof *at->ints))) return oom();
    if (at->n) memcpy(at->ints, ap->ints, at->n * sizeof *at->ints);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
    at->type = EM_ONNX_ATTR_STRINGS, at->n = ap->n_strings;
    if (!(at->strings = arena_array(a, at->n, sizeof *at->strings))) return oom();
    for (size_t i = 0; i < at->n && s == EM_OK; i++) s = str_from_bytes(a, ap->strings[i], &at->strings[i]);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS:
    at->type = EM_ONNX_ATTR_TENSORS, at->n = ap->n_tensors;
    if (!(at->tensors = arena_array(a, at->n, sizeof *at->tensors))) return oom();
    for (size_t i = 0; i < at->n && s == EM_OK; i++) s = tensor_from_proto(a, ap->tensors[i], &at->tensors[i]);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
    at->type = EM_ONNX_ATTR_GRAPHS, at->n = ap->n_graphs;
    if (!(at->graphs = arena_array(a, at->n, sizeof *at->graphs))) return oom();
    for (size_t i = 0; i < at->n && s == EM_OK; i++) s = graph_from_proto(a, ap->graphs[i], &at->graphs[i]);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO:
    at->type = EM_ONNX_ATTR_TYPE;
    if (!ap->tp) return em_fail(EM_ERR_CORRUPT, "attribute '%s' is of type type_proto but has no tp", at->name);
    if (!(at->tp = arena_array(a, 1, sizeof *at->tp))) return oom();
    s = type_from_proto(a, ap->tp, at->tp);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS:
    at->type = EM_ONNX_ATTR_TYPES, at->n = ap->n_type_protos;
    if (!(at->types = arena_array(a, at->n, sizeof *at->types))) return oom();
    for (size_t i = 0; i < at->n && s == EM_OK; i++) s = type_from_proto(a, ap->type_protos[i], &at->types[i]);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS:
    return em_fail(EM_ERR_UNSUPPORTED, "attribute '%s' is of type %s, which is not read", at->name,
                   type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR ? "sparse_tensor" : "sparse_tensors");
  case 0:
    return em_fail(EM_ERR_CORRUPT, "attribute '%s' has no type, and its value fields do not tell one", at->name);
  default:
    return em_fail(EM_ERR_CORRUPT, "attribute '%s' has type %d, which is not an AttributeProto.AttributeType",
                   at->name, type);
  }
  if (s != EM_OK) return em_fail_context(s, "attribute '%s'", at->name);
  return EM_OK;
}

/* --------------------------------------------------- nodes, graphs --- */

static em_status names_copy(arena *a, char *const *src, size_t n, char ***dst) {
  *dst = NULL;
  if (!n) return EM_OK;
  if (!(*dst = arena_array(a, n, sizeof **dst))) return oom();
  for (size_t i = 0; i < n; i++)
    if (!((*dst)[i] = arena_strdup(a, src[i]))) return oom();
  return EM_OK;
}

static em_status node_from_proto(arena *a, const Onnx__NodeProto *np, em_onnx_node *n) {
  memset(n, 0, sizeof *n);
  if (!(n->op_type = arena_strdup(a, np->op_type)) || !(n->domain = arena_strdup(a, np->domain)) ||
      !(n->name = arena_strdup(a, np->name)))
    return oom();
  if (!n->op_type[0]) return em_fail(EM_ERR_CORRUPT, "a node has no op_type");
  em_status s = names_copy(a, np->input, np->n_input, &n->inputs);
  if (s == EM_OK) s = names_copy(a, np->output, np->n_output, &n->outputs);
  if (s != EM_OK) return s;
  n->n_inputs = np->n_input;
  n->n_outputs = np->n_output;
  n->n_attrs = np->n_attribute;
  if (n->n_attrs && !(n->attrs = arena_array(a, n->n_attrs, sizeof *n->attrs))) return oom();
  for (size_t i = 0; i < n->n_attrs; i++)
    if ((s = attr_from_proto(a, np->attribute[i], &n->attrs[i])) != EM_OK) return s;
  return EM_OK;
}

/* Recursion through graph attributes is bounded by the wire check. */
static em_status graph_from_proto(arena *a, const Onnx__GraphProto *gp, em_onnx_graph *g) {
  memset(g, 0, sizeof *g);
  if (!(g->name = arena_strdup(a, gp->name))) return oom();
  if (gp->n_sparse_initializer)
    return em_fail(EM_ERR_UNSUPPORTED, "graph '%s' has %zu sparse initializers, which are not read", g->name,
                   gp->n_sparse_initializer);
  em_status s = EM_OK;
  g->n_nodes = gp->n_node;
  if (g->n_nodes && !(g->nodes = arena_array(a, g->n_nodes, sizeof *g->nodes))) return oom();
  for (size_t i = 0; i < g->n_nodes; i++)
    if ((s = node_from_proto(a, gp->node[i], &g->nodes[i])) != EM_OK)
      return em_fail_context(s, "graph '%s' node %zu (%s '%s')", g->name, i,
                             gp->node[i]->op_type ? gp->node[i]->op_type : "?",
                             gp->node[i]->name ? gp->node[i]->name : "");
  g->n_initializers = gp->n_initializer;
  if (g->n_initializers && !(g->initializers = arena_array(a, g->n_initializers, sizeof *g->initializers)))
    return oom();
  for (size_t i = 0; i < g->n_initializers; i++)
    if ((s = tensor_from_proto(a, gp->initializer[i], &g->initializers[i])) != EM_OK)
      return em_fail_context(s, "graph '%s' initializer %zu", g->name, i);
  if ((s = value_infos_from_proto(a, gp->input, gp->n_input, "input", &g->inputs)) != EM_OK ||
      (s = value_infos_from_proto(a, gp->output, gp->n_output, "output", &g->outputs)) != EM_OK ||
      (s = value_infos_from_proto(a, gp->value_info, gp->n_value_info, "value_info", &g->value_infos)) != EM_OK)
    return em_fail_context(s, "graph '%s'", g->name);
  g->n_inputs = gp->n_input;
  g->n_outputs = gp->n_output;
  g->n_value_infos = gp->n_value_info;
  return EM_OK;
}

static em_status model_from_proto(arena *a, const Onnx__ModelProto *mp, em_onnx_model *m) {
  m->ir_version = mp->ir_version;
  if (!(m->producer_name = arena_strdup(a, mp->producer_name))) return oom();
  if (!mp->graph) return em_fail(EM_ERR_CORRUPT, "the model has no graph (ModelProto.graph)");
  if (mp->n_functions)
    return em_fail(EM_ERR_UNSUPPORTED, "the model defines %zu local functions (ModelProto.functions), "
                   "which are not read", mp->n_functions);
  m->n_opsets = mp->n_opset_import;
  if (m->n_opsets && !(m->opsets = arena_array(a, m->n_opsets, sizeof *m->opsets))) return oom();
  for (size_t i = 0; i < m->n_opsets; i++) {
    if (!(m->opsets[i].domain = arena_strdup(a, mp->opset_import[i]->domain))) return oom();
    m->opsets[i].version = mp->opset_import[i]->version;
  }
  return graph_from_proto(a, mp->graph, &m->graph);
}

/* ---------------------------------------------------- file input --- */

/* Reads a whole file into a malloc'ed buffer (at least 1 byte allocated). */
static em_status read_file(const char *path, uint8_t **data, size_t *size) {
  *data = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return em_fail(EM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return em_fail(EM_ERR_IO, "cannot read %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return em_fail(EM_ERR_IO, "cannot read %s: %s", path, S_ISDIR(st.st_mode) ? "it is a directory"
                                                                             : "not a regular file");
  }
  if ((uint64_t)st.st_size > SIZE_MAX - 1) {
    close(fd);
    return em_fail(EM_ERR_IO, "cannot read %s: %lld bytes do not fit in memory", path, (long long)st.st_size);
  }
  size_t cap = (size_t)st.st_size;
  uint8_t *buf = malloc(cap + 1);
  if (!buf) {
    close(fd);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "cannot read %s: no memory for %zu bytes", path, cap);
  }
  size_t got = 0;
  while (got < cap) {
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      free(buf);
      close(fd);
      return em_fail(EM_ERR_IO, "cannot read %s: %s", path, r < 0 ? strerror(e) : "the file shrank while read");
    }
    got += (size_t)r;
  }
  close(fd);
  *data = buf;
  *size = got;
  return EM_OK;
}

/* ---------------------------------------------------------- models --- */

em_status em_onnx_model_from_buffer(const void *bytes, size_t size, const char *what, em_onnx_model **out) {
  return em_onnx_model_from_buffer_dir(bytes, size, what, NULL, out);
}

em_status em_onnx_model_from_buffer_dir(const void *bytes, size_t size, const char *what, const char *external_dir,
                                        em_onnx_model **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_model_from_buffer: out is NULL");
  *out = NULL;
  if (!what) what = "<buffer>";
  if (!bytes && size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_model_from_buffer(%s): bytes is NULL", what);
  if (!size) return em_fail(EM_ERR_CORRUPT, "%s: empty file, not an ONNX model", what);

  ProtobufCMessage *msg;
  em_status s = check_bytes(&onnx__model_proto__descriptor, bytes, size);
  if (s == EM_OK) s = decode(&onnx__model_proto__descriptor, bytes, size, &msg);
  if (s != EM_OK) return em_fail_context(s, "%s", what);
  arena *a = calloc(1, sizeof *a);
  em_onnx_model *m = a ? arena_array(a, 1, sizeof *m) : NULL;
  if (!m) {
    s = oom();
  } else {
    m->arena_ = a;
    a->external_dir = external_dir; /* used during the load only: not kept */
    s = model_from_proto(a, (const Onnx__ModelProto *)msg, m);
    a->external_dir = NULL;
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  if (s != EM_OK) {
    arena_free(a);
    return em_fail_context(s, "%s", what);
  }
  *out = m;
  return EM_OK;
}

em_status em_onnx_model_load(const char *path, em_onnx_model **out) {
  if (!out || !path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_model_load: path and out must not be NULL");
  *out = NULL;
  uint8_t *data;
  size_t size;
  em_status s = read_file(path, &data, &size);
  if (s != EM_OK) return s;
  /* External data files are relative to the model file's directory. */
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
  s = dir ? em_onnx_model_from_buffer_dir(data, size, path, dir, out) : oom();
  free(dir);
  free(data);
  return s;
}

void em_onnx_model_free(em_onnx_model *m) {
  if (m) arena_free(m->arena_); /* the model itself lives in its arena */
}

const em_onnx_attr *em_onnx_node_attr(const em_onnx_node *n, const char *name) {
  if (!n || !name) return NULL;
  for (size_t i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

int64_t em_onnx_model_opset(const em_onnx_model *m, const char *domain) {
  if (!m || !domain) return -1;
  /* onnx.proto: the default operator set is named "" or "ai.onnx". */
  int want_default = !domain[0] || strcmp(domain, "ai.onnx") == 0;
  for (size_t i = 0; i < m->n_opsets; i++) {
    const char *d = m->opsets[i].domain;
    int is_default = !d[0] || strcmp(d, "ai.onnx") == 0;
    if (want_default ? is_default : strcmp(d, domain) == 0) return m->opsets[i].version;
  }
  return -1;
}

/* --------------------------------------------------- tensor files --- */

/* The ONNX test data writes sequences and optionals as SequenceProto /
 * OptionalProto (onnx-data.proto: field 1 name, 2 elem_type 0..5, 3..7 the
 * values), MapProto likewise. Those bytes can also decode as a TensorProto,
 * so they are recognised before protobuf-c sees them:
 *  - field 3 is TensorProto.segment, which plain tensors never use, but is
 *    where a sequence's or optional's tensor values go;
 *  - otherwise, only fields 1..7, field 1 a printable string (a name; a
 *    TensorProto's field 1 is dims, which ONNX writers never pack, and whose
 *    small values are control bytes), and field 2 a value kind (0..5).
 * Returns 1 for a non-tensor value. The bytes passed the wire check. */
static int looks_like_non_tensor(const uint8_t *p, size_t n) {
  size_t at = 0;
  int high = 0, name_like = 0, kind_ok = 1, has_field3 = 0;
  while (at < n) {
    uint64_t key, v = 0;
    if (!read_varint(p, n, &at, &key)) return 0;
    uint64_t field = key >> 3;
    unsigned wire = (unsigned)(key & 7);
    if (field == 3) has_field3 = 1;
    if (field > 7) high = 1;
    if (wire == 0) {
      if (!read_varint(p, n, &at, &v)) return 0;
      if (field == 2 && v > 5) kind_ok = 0;
    } else if (wire == 1 || wire == 5) {
      at += wire == 1 ? 8 : 4;
    } else if (wire == 2) {
      if (!read_varint(p, n, &at, &v) || v > n - at) return 0;
      if (field == 1) {
        name_like = 1;
        for (size_t i = 0; i < v; i++)
          if (p[at + i] < 0x20 || p[at + i] > 0x7e) name_like = 0;
      }
      at += (size_t)v;
    } else {
      return 0;
    }
  }
  return has_field3 || (!high && name_like && kind_ok);
}

em_status em_onnx_tensor_from_buffer(const void *bytes, size_t size, const char *what, em_onnx_tensor **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_tensor_from_buffer: out is NULL");
  *out = NULL;
  if (!what) what = "<buffer>";
  if (!bytes && size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_tensor_from_buffer(%s): bytes is NULL", what);

  em_status s = check_bytes(&onnx__tensor_proto__descriptor, bytes, size);
  if (s != EM_OK) return em_fail_context(s, "%s", what);
  if (looks_like_non_tensor(bytes, size))
    return em_fail(EM_ERR_UNSUPPORTED, "%s: unsupported value type: a SequenceProto, OptionalProto or "
                   "MapProto (or a segmented tensor), not a plain TensorProto; only tensors are read (the model's "
                   "declared input/output types tell which files hold other values)", what);
  ProtobufCMessage *msg;
  if ((s = decode(&onnx__tensor_proto__descriptor, bytes, size, &msg)) != EM_OK)
    return em_fail_context(s, "%s", what);
  arena *a = calloc(1, sizeof *a);
  em_onnx_tensor *t = a ? arena_array(a, 1, sizeof *t) : NULL;
  if (!t) {
    s = oom();
  } else {
    s = tensor_from_proto(a, (const Onnx__TensorProto *)msg, t);
    t->arena_ = a;
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  if (s != EM_OK) {
    arena_free(a);
    return em_fail_context(s, "%s", what);
  }
  *out = t;
  return EM_OK;
}

em_status em_onnx_tensor_load(const char *path, em_onnx_tensor **out) {
  if (!out || !path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_onnx_tensor_load: path and out must not be NULL");
  *out = NULL;
  uint8_t *data;
  size_t size;
  em_status s = read_file(path, &data, &size);
  if (s != EM_OK) return s;
  s = em_onnx_tensor_from_buffer(data, size, path, out);
  free(data);
  return s;
}

void em_onnx_tensor_free(em_onnx_tensor *t) {
  if (t && t->arena_) arena_free(t->arena_); /* the tensor lives in its own arena */
}
