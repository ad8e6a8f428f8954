/* Tensors (include/ember/tensor.h): strided views over reference-counted
 * storage. Shapes and strides are in elements; the storage knows its device.
 * Host storage may keep resident copies on devices, with versions
 * (tensor_internal.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "error.h"
#include "op.h"
#include "tensor_internal.h"

#define API __attribute__((visibility("default")))

struct em_storage;

/* A copy of a host storage's bytes on one device (tensor_internal.h). */
typedef struct em_resident {
  struct em_resident *next;
  em_device dev;
  struct em_storage *copy;    /* on dev, as many bytes as the host storage */
  uint64_t version;           /* the version it holds; 0: never uploaded */
  int holders;                /* executors using it */
} em_resident;

typedef struct em_storage {
  atomic_int refs;
  em_device dev;
  void *ptr;      /* em_malloc'd on dev (64-byte aligned host memory on the CPU) */
  size_t bytes;
  /* Host storage only, guarded by g_resident_lock: */
  em_resident *resident;
  uint64_t version;           /* the newest value's version, wherever it is */
  uint64_t host_version;      /* the version ptr holds */
  atomic_int host_stale;      /* host_version != version (read without the lock on every copy out) */
  struct em_derived *derived; /* forms of the value made from the host bytes at host_version */
} em_storage;

/* A form of a versioned host value made by an op (tensor_internal.h). */
struct em_derived {
  atomic_int refs;            /* the storage's list holds one; each user one */
  struct em_derived *next;
  void *data;
  void (*free_fn)(void *data);
  uint64_t version;           /* the storage's version it was made from */
  size_t key_len;
  unsigned char key[];
};

static pthread_mutex_t g_resident_lock = PTHREAD_MUTEX_INITIALIZER;

struct em_tensor {
  atomic_int refs;
  atomic_int versioned; /* a graph value's own tensor: every change of its bytes makes a new version
                         * (em_tensor_mark_versioned). A flag of this object, not of the storage: a
                         * caller's tensor sharing the storage (em_constant's argument) stays theirs */
  em_storage *st;
  em_dtype dtype;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  int64_t strides[EM_MAX_DIMS];
  int64_t offset; /* elements from the start of the storage */
};

static const struct { size_t size; const char *name; } dtypes[] = {
  [EM_F32] = {4, "f32"}, [EM_F64] = {8, "f64"}, [EM_F16] = {2, "f16"}, [EM_BF16] = {2, "bf16"},
  [EM_I32] = {4, "i32"}, [EM_I64] = {8, "i64"}, [EM_U8] = {1, "u8"}, [EM_BOOL] = {1, "bool"},
};

API size_t em_dtype_size(em_dtype t) { return (unsigned)t <= EM_BOOL ? dtypes[t].size : 0; }
API const char *em_dtype_name(em_dtype t) { return (unsigned)t <= EM_BOOL ? dtypes[t].name : "unknown-dtype"; }

/* ------------------------------------------------------------ storage --- */

void em_derived_release(em_derived *d) {
  if (!d || atomic_fetch_sub(&d->refs, 1) != 1) return;
  if (d->free_fn) d->free_fn(d->data);
  free(d);
}

void *em_derived_data(const em_derived *d) { return d->data; }

/* With the lock held (or the storage unreachable): drops every derived form. */
static void drop_derived(em_storage *s) {
  for (em_derived *d = s->derived, *next; d; d = next) {
    next = d->next;
    em_derived_release(d);
  }
  s->derived = NULL;
}

static void storage_release(em_storage *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  drop_derived(s);
  /* The last reference: nobody can reach the copies any more. */
  for (em_resident *r = s->resident, *next; r; r = next) {
    next = r->next;
    storage_release(r->copy);
    free(r);
  }
  if (s->ptr) em_free(s->dev, s->ptr);
  free(s);
}

static em_status storage_new(em_device dev, size_t bytes, em_storage **out) {
  em_storage *s = calloc(1, sizeof *s);
  if (!s) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a tensor");
  atomic_init(&s->refs, 1);
  atomic_init(&s->host_stale, 0);
  s->dev = dev;
  s->bytes = bytes;
  s->version = s->host_version = 1;
  em_status st = em_malloc(dev, bytes ? bytes : 1, &s->ptr);
  if (st) {
    free(s);
    return em_fail_context(st, "allocating %zu bytes for a tensor", bytes);
  }
  *out = s;
  return EM_OK;
}

/* ------------------------------------------------------------- shapes --- */

/* numel of a shape, or -1 on a negative dimension or overflow. The product
 * of the non-zero dimensions must fit too, even when a zero makes the tensor
 * empty: strides are computed over them (contiguous_strides). */
static int64_t shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  int empty = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (shape[i] == 0) {
      empty = 1;
      continue;
    }
    if (n > INT64_MAX / shape[i]) return -1;
    n *= shape[i];
  }
  return empty ? 0 : n;
}

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

API const char *em_tensor_describe(const em_tensor *t, char *buf, size_t cap) {
  char s[200];
  snprintf(buf, cap, "%s%s", em_dtype_name(t->dtype), shape_str(t->ndim, t->shape, s, sizeof s));
  return buf;
}

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i] ? shape[i] : 1;
  }
}

static em_status check_shape(const char *what, em_dtype dtype, int ndim, const int64_t *shape, int64_t *numel) {
  *numel = 0;
  if (em_dtype_size(dtype) == 0) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", what, (int)dtype);
  if (ndim < 0 || ndim > EM_MAX_DIMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %d dimensions; Ember tensors have 0 to %d", what, ndim, EM_MAX_DIMS);
  if (ndim && !shape) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: shape is NULL for %d dimensions", what, ndim);
  *numel = shape_numel(ndim, shape);
  char s[200];
  if (*numel < 0)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: shape %s has a negative dimension or too many elements", what,
                   shape_str(ndim, shape, s, sizeof s));
  if ((uint64_t)*numel > SIZE_MAX / em_dtype_size(dtype))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: shape %s of %s is too large", what, shape_str(ndim, shape, s, sizeof s),
                   em_dtype_name(dtype));
  return EM_OK;
}

static em_tensor *tensor_alloc(void) {
  em_tensor *t = calloc(1, sizeof *t);
  if (t) atomic_init(&t->refs, 1);
  return t;
}

/* A view sharing t's storage; caller fills shape/strides/offset. */
static em_status view_of(em_tensor *t, em_tensor **out) {
  em_tensor *v = tensor_alloc();
  if (!v) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a tensor view");
  atomic_fetch_add(&t->st->refs, 1);
  v->st = t->st;
  v->dtype = t->dtype;
  v->offset = t->offset;
  *out = v;
  return EM_OK;
}

static em_status new_contiguous(em_device dev, em_dtype dtype, int ndim, const int64_t *shape, const char *what,
                                em_tensor **out) {
  int64_t numel = 0;
  em_status st = check_shape(what, dtype, ndim, shape, &numel);
  if (!st && (st = em_device_check(dev))) return em_fail_context(st, "%s", what);
  if (st) return st;
  em_tensor *t = tensor_alloc();
  if (!t) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a tensor");
  st = storage_new(dev, (size_t)numel * em_dtype_size(dtype), &t->st);
  if (st) {
    free(t);
    return st;
  }
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  contiguous_strides(ndim, t->shape, t->strides);
  *out = t;
  return EM_OK;
}

/* The executor's outputs (op.h): no zero fill, the op writes every element.
 * Sanitizer builds fill with 0xff bytes (NaN for floats) so that an op that
 * leaves elements unwritten fails its tests instead of reading zeros. */
em_status em_tensor_empty(em_device dev, const em_shape *s, em_tensor **out) {
  em_status st = new_contiguous(dev, s->dtype, s->ndim, s->dims, "em_tensor_empty", out);
#ifdef EM_POISON_OUTPUTS
  if (!st && dev.kind == EM_DEVICE_CPU) memset((*out)->st->ptr, 0xff, (*out)->st->bytes);
#endif
  return st;
}

API em_status em_tensor_from_host(em_device dev, em_dtype dtype, int ndim, const int64_t *shape, const void *data,
                                  size_t bytes, em_tensor **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_from_host: out is NULL");
  em_tensor *t;
  em_status st = new_contiguous(dev, dtype, ndim, shape, "em_tensor_from_host", &t);
  if (st) return st;
  if (bytes != t->st->bytes) {
    char d[256];
    em_tensor_describe(t, d, sizeof d);
    em_tensor_release(t);
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_from_host: %s needs %zu bytes, %zu given", d,
                   (size_t)shape_numel(ndim, shape) * em_dtype_size(dtype), bytes);
  }
  if (bytes && !data) {
    em_tensor_release(t);
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_from_host: data is NULL");
  }
  st = em_memcpy_h2d(dev, t->st->ptr, data, bytes, NULL);
  if (st) {
    em_tensor_release(t);
    return st;
  }
  *out = t;
  return EM_OK;
}

API em_status em_tensor_zeros(em_device dev, em_dtype dtype, int ndim, const int64_t *shape, em_tensor **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_zeros: out is NULL");
  em_tensor *t;
  em_status st = new_contiguous(dev, dtype, ndim, shape, "em_tensor_zeros", &t);
  if (st) return st;
  if (dev.kind == EM_DEVICE_CPU) {
    memset(t->st->ptr, 0, t->st->bytes);
  } else if (t->st->bytes) {
    /* Zero bits are 0 in every dtype; copy them up (the runtime has no memset yet). */
    void *z = calloc(1, t->st->bytes);
    st = z ? em_memcpy_h2d(dev, t->st->ptr, z, t->st->bytes, NULL)
           : em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory to zero %zu bytes", t->st->bytes);
    free(z);
    if (st) {
      em_tensor_release(t);
      return st;
    }
  }
  *out = t;
  return EM_OK;
}

API em_tensor *em_tensor_retain(em_tensor *t) {
  if (t) atomic_fetch_add(&t->refs, 1);
  return t;
}

API void em_tensor_release(em_tensor *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  storage_release(t->st);
  free(t);
}

API int em_tensor_ndim(const em_tensor *t) { return t->ndim; }
API const int64_t *em_tensor_shape(const em_tensor *t) { return t->shape; }
API const int64_t *em_tensor_strides(const em_tensor *t) { return t->strides; }
API int64_t em_tensor_numel(const em_tensor *t) { return shape_numel(t->ndim, t->shape); }
API em_dtype em_tensor_dtype(const em_tensor *t) { return t->dtype; }
API em_device em_tensor_device(const em_tensor *t) { return t->st->dev; }
API void *em_tensor_data(const em_tensor *t) {
  return (char *)t->st->ptr + (size_t)t->offset * em_dtype_size(t->dtype);
}

API int em_tensor_is_contiguous(const em_tensor *t) {
  /* An empty tensor touches no element: contiguous whatever its strides
   * (contiguous_strides gives a 0-size axis stride 1 to its neighbours, which
   * the walk below would call a gap, failing an in-place reshape). */
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) return 1;
  int64_t want = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != want) return 0;
    want *= t->shape[i];
  }
  return 1;
}

/* --------------------------------------------------------------- copy --- */

/* Range [lo, hi) of storage elements a view touches (strides may be 0). */
static void view_span(const em_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t a = t->offset, b = t->offset;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 0) {
      *lo = *hi = t->offset;
      return;
    }
    int64_t ext = (t->shape[i] - 1) * t->strides[i];
    if (ext < 0) a += ext;
    else b += ext;
  }
  *lo = a;
  *hi = b + 1;
}

/* Gathers a strided view of `src` (the view's storage starting at element
 * `base`) into contiguous dst, row-major over the shape. */
static void gather(const em_tensor *t, const char *src, int64_t base, char *dst) {
  size_t es = em_dtype_size(t->dtype);
  int64_t n = em_tensor_numel(t), idx[EM_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t off = t->offset - base;
    for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
    memcpy(dst + (size_t)k * es, src + (size_t)off * es, es);
    for (int i = t->ndim - 1; i >= 0; i--) {
      if (++idx[i] < t->shape[i]) break;
      idx[i] = 0;
    }
  }
}

API em_status em_tensor_to_host(const em_tensor *t, void *data, size_t bytes) {
  if (!t || (!data && bytes)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_to_host: NULL argument");
  size_t es = em_dtype_size(t->dtype), need = (size_t)em_tensor_numel(t) * es;
  if (bytes != need) {
    char d[256];
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_to_host: %s holds %zu bytes, the buffer has %zu",
                   em_tensor_describe(t, d, sizeof d), need, bytes);
  }
  if (!need) return EM_OK;
  em_status synced = em_tensor_sync_host(t); /* a device copy may hold a newer value */
  if (synced) return synced;
  em_device dev = t->st->dev;
  if (em_tensor_is_contiguous(t)) return em_memcpy_d2h(dev, data, em_tensor_data(t), need, NULL);
  int64_t lo, hi;
  view_span(t, &lo, &hi);
  if (dev.kind == EM_DEVICE_CPU) {
    gather(t, t->st->ptr, 0, data);
    return EM_OK;
  }
  /* A strided view on a GPU: bring the span it touches over, gather here. */
  size_t span = (size_t)(hi - lo) * es;
  char *tmp = malloc(span);
  if (!tmp) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for %zu bytes", span);
  em_status st = em_memcpy_d2h(dev, tmp, (char *)t->st->ptr + (size_t)lo * es, span, NULL);
  if (!st) gather(t, tmp, lo, data);
  free(tmp);
  return st;
}

API em_status em_tensor_contiguous(em_tensor *t, em_tensor **out) {
  if (!t || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_contiguous: NULL argument");
  if (em_tensor_is_contiguous(t)) {
    *out = em_tensor_retain(t);
    return EM_OK;
  }
  return em_tensor_to_device(t, t->st->dev, out);
}

API em_status em_tensor_to_device(const em_tensor *t, em_device dev, em_tensor **out) {
  if (!t || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_to_device: NULL argument");
  size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(t->dtype);
  /* Within one GPU: a device-to-device copy, no trip through the host. */
  if (dev.kind == EM_DEVICE_CUDA && t->st->dev.kind == EM_DEVICE_CUDA && t->st->dev.ordinal == dev.ordinal &&
      em_tensor_is_contiguous(t)) {
    em_status st = new_contiguous(dev, t->dtype, t->ndim, t->shape, "em_tensor_to_device", out);
    if (!st) st = em_memcpy_d2d(dev, (*out)->st->ptr, em_tensor_data(t), bytes, NULL);
    if (st) {
      em_tensor_release(*out);
      *out = NULL;
    }
    return st;
  }
  void *host = malloc(bytes ? bytes : 1);
  if (!host) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for %zu bytes", bytes);
  em_status st = em_tensor_to_host(t, host, bytes);
  if (!st) st = em_tensor_from_host(dev, t->dtype, t->ndim, t->shape, host, bytes, out);
  free(host);
  return st;
}

/* -------------------------------------------------------------- views --- */

API em_status em_tensor_reshape(em_tensor *t, int ndim, const int64_t *shape, em_tensor **out) {
  if (!t || !out || (ndim && !shape)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_reshape: NULL argument");
  char d[256], s[200];
  if (ndim < 0 || ndim > EM_MAX_DIMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "reshape of %s: %d dimensions (0 to %d allowed)", em_tensor_describe(t, d, sizeof d),
                   ndim, EM_MAX_DIMS);
  int64_t want[EM_MAX_DIMS], known = 1, numel = em_tensor_numel(t);
  int infer = -1;
  for (int i = 0; i < ndim; i++) {
    want[i] = shape[i];
    if (shape[i] == -1 && infer < 0) infer = i;
    else if (shape[i] < 0)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "reshape of %s to %s: only one -1 and no other negative size", em_tensor_describe(t, d, sizeof d),
                     shape_str(ndim, shape, s, sizeof s));
    else known *= shape[i];
  }
  if (infer >= 0) {
    if (known == 0 || numel % known)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "reshape of %s to %s: %lld elements do not divide into that shape",
                     em_tensor_describe(t, d, sizeof d), shape_str(ndim, shape, s, sizeof s), (long long)numel);
    want[infer] = numel / known;
  }
  if (shape_numel(ndim, want) != numel)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "reshape of %s to %s: %lld elements cannot take that shape", em_tensor_describe(t, d, sizeof d),
                   shape_str(ndim, want, s, sizeof s), (long long)numel);
  if (!em_tensor_is_contiguous(t))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "reshape of %s: the view is not contiguous; call em_tensor_contiguous first",
                   em_tensor_describe(t, d, sizeof d));
  em_status st = view_of(t, out);
  if (st) return st;
  (*out)->ndim = ndim;
  memcpy((*out)->shape, want, sizeof(int64_t) * (size_t)ndim);
  contiguous_strides(ndim, (*out)->shape, (*out)->strides);
  return EM_OK;
}

API em_status em_tensor_permute(em_tensor *t, const int *perm, em_tensor **out) {
  if (!t || !out || (t->ndim && !perm)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_permute: NULL argument");
  int seen[EM_MAX_DIMS] = {0};
  char d[256];
  for (int i = 0; i < t->ndim; i++) {
    if (perm[i] < 0 || perm[i] >= t->ndim || seen[perm[i]]++)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "permute of %s: perm[%d] = %d; perm must list each of the %d axes once",
                     em_tensor_describe(t, d, sizeof d), i, perm[i], t->ndim);
  }
  em_status st = view_of(t, out);
  if (st) return st;
  (*out)->ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) {
    (*out)->shape[i] = t->shape[perm[i]];
    (*out)->strides[i] = t->strides[perm[i]];
  }
  return EM_OK;
}

API em_status em_tensor_slice(em_tensor *t, int axis, int64_t start, int64_t stop, int64_t step, em_tensor **out) {
  if (!t || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_slice: NULL argument");
  char d[256];
  if (axis < 0) axis += t->ndim;
  if (axis < 0 || axis >= t->ndim)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "slice of %s: axis out of range", em_tensor_describe(t, d, sizeof d));
  if (step < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "slice of %s: step %lld must be >= 1", em_tensor_describe(t, d, sizeof d), (long long)step);
  int64_t n = t->shape[axis];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  if (start < 0) start = 0;
  if (stop > n) stop = n;
  int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
  em_status st = view_of(t, out);
  if (st) return st;
  em_tensor *v = *out;
  v->ndim = t->ndim;
  memcpy(v->shape, t->shape, sizeof v->shape);
  memcpy(v->strides, t->strides, sizeof v->strides);
  if (len) v->offset += start * t->strides[axis];
  v->shape[axis] = len;
  v->strides[axis] = t->strides[axis] * step;
  return EM_OK;
}

API em_status em_tensor_expand(em_tensor *t, int ndim, const int64_t *shape, em_tensor **out) {
  if (!t || !out || (ndim && !shape)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_tensor_expand: NULL argument");
  char d[256], s[200];
  if (ndim < t->ndim || ndim > EM_MAX_DIMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "expand of %s to %s: the target needs at least as many dimensions (at most %d)",
                   em_tensor_describe(t, d, sizeof d), shape_str(ndim, shape, s, sizeof s), EM_MAX_DIMS);
  int64_t sh[EM_MAX_DIMS], str[EM_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int j = i - (ndim - t->ndim); /* numpy aligns trailing axes */
    int64_t have = j >= 0 ? t->shape[j] : 1;
    if (have != shape[i] && have != 1)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "expand of %s to %s: axis %d has size %lld, not 1 or %lld",
                     em_tensor_describe(t, d, sizeof d), shape_str(ndim, shape, s, sizeof s), j, (long long)have,
                     (long long)shape[i]);
    sh[i] = shape[i];
    str[i] = (j >= 0 && have == shape[i]) ? t->strides[j] : 0;
  }
  em_status st = view_of(t, out);
  if (st) return st;
  (*out)->ndim = ndim;
  memcpy((*out)->shape, sh, sizeof(int64_t) * (size_t)ndim);
  memcpy((*out)->strides, str, sizeof(int64_t) * (size_t)ndim);
  return EM_OK;
}

/* ----------------------------------------------------- resident copies --- */

static em_resident *resident_on(em_storage *s, em_device dev) {
  for (em_resident *r = s->resident; r; r = r->next)
    if (r->dev.kind == dev.kind && r->dev.ordinal == dev.ordinal) return r;
  return NULL;
}

static em_status host_only(const em_tensor *host, const char *what) {
  if (host->st->dev.kind == EM_DEVICE_CPU) return EM_OK;
  return em_fail(EM_ERR_INTERNAL, "%s: the tensor lives on cuda:%d, not on the host", what, host->st->dev.ordinal);
}

/* With the lock held: copies the newest device copy's bytes to the host. */
static em_status sync_host_locked(em_storage *s) {
  if (s->host_version == s->version) return EM_OK;
  for (em_resident *r = s->resident; r; r = r->next) {
    if (r->version != s->version) continue;
    em_status st = em_memcpy_d2h(r->dev, s->ptr, r->copy->ptr, s->bytes, NULL);
    if (st) return em_fail_context(st, "reading a value back from cuda:%d, where it was last written", r->dev.ordinal);
    s->host_version = s->version;
    atomic_store(&s->host_stale, 0);
    return EM_OK;
  }
  return em_fail(EM_ERR_INTERNAL, "a tensor's newest value (version %llu) is on no device", (unsigned long long)s->version);
}

em_status em_tensor_sync_host(const em_tensor *host) {
  em_storage *s = host->st;
  if (s->dev.kind != EM_DEVICE_CPU || !atomic_load(&s->host_stale)) return EM_OK;
  pthread_mutex_lock(&g_resident_lock);
  em_status st = sync_host_locked(s);
  pthread_mutex_unlock(&g_resident_lock);
  return st;
}

void em_tensor_host_written(const em_tensor *host) {
  em_storage *s = host->st;
  if (s->dev.kind != EM_DEVICE_CPU) return;
  pthread_mutex_lock(&g_resident_lock);
  s->host_version = ++s->version;
  atomic_store(&s->host_stale, 0);
  drop_derived(s); /* made from the old bytes */
  pthread_mutex_unlock(&g_resident_lock);
}

void em_tensor_mark_versioned(em_tensor *t) {
  if (t->st->dev.kind == EM_DEVICE_CPU) atomic_store(&t->versioned, 1);
}

void em_tensor_unmark_versioned(em_tensor *t) {
  if (!t || !atomic_exchange(&t->versioned, 0)) return;
  /* the graph lets go of it: its bytes (a constant's caller's tensor, a parameter's tensor handed
   * out by em_parameter_value) may now change without a new version, so no form may outlive this */
  em_storage *s = t->st;
  pthread_mutex_lock(&g_resident_lock);
  drop_derived(s);
  pthread_mutex_unlock(&g_resident_lock);
}

em_status em_tensor_derived(const em_tensor *t, const void *key, size_t key_len, em_derive_fn make, void *ctx,
                            em_derived **out) {
  em_storage *s = t->st;
  *out = NULL;
  if (s->dev.kind != EM_DEVICE_CPU || !atomic_load(&t->versioned)) return EM_OK;
  pthread_mutex_lock(&g_resident_lock);
  /* a device copy may be newer: the op is about to read the host bytes, which the executor
   * brought up to date (bind_leaves); forms are only made from, and kept for, host_version */
  const uint64_t v = s->host_version;
  const int current = s->host_version == s->version;
  for (em_derived *d = s->derived; d && current; d = d->next)
    if (d->version == v && d->key_len == key_len && !memcmp(d->key, key, key_len)) {
      atomic_fetch_add(&d->refs, 1);
      *out = d;
      break;
    }
  pthread_mutex_unlock(&g_resident_lock);
  if (*out || !current) return EM_OK;
  em_derived *d = calloc(1, sizeof *d + key_len);
  if (!d) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory to keep a derived form of a value");
  atomic_init(&d->refs, 1);
  d->version = v;
  d->key_len = key_len;
  memcpy(d->key, key, key_len);
  em_status st = make(ctx, &d->data, &d->free_fn); /* without the lock: it may take a while */
  if (st) {
    free(d);
    return st;
  }
  pthread_mutex_lock(&g_resident_lock);
  /* kept only if the value did not change meanwhile and no other thread kept one first;
   * forms of older versions (a device wrote a newer value since) go */
  int keep = s->version == v && s->host_version == v;
  for (em_derived **o = &s->derived; *o && keep;) {
    em_derived *e = *o;
    if (e->version != v) {
      *o = e->next;
      em_derived_release(e);
    } else {
      keep = !(e->key_len == key_len && !memcmp(e->key, key, key_len));
      o = &e->next;
    }
  }
  if (keep) {
    atomic_fetch_add(&d->refs, 1);
    d->next = s->derived;
    s->derived = d;
  }
  pthread_mutex_unlock(&g_resident_lock);
  *out = d;
  return EM_OK;
}

em_status em_resident_hold(const em_tensor *host, em_device dev) {
  em_status st = host_only(host, "em_resident_hold");
  if (st) return st;
  em_storage *s = host->st;
  pthread_mutex_lock(&g_resident_lock);
  em_resident *r = resident_on(s, dev);
  if (!r) {
    r = calloc(1, sizeof *r);
    st = r ? storage_new(dev, s->bytes, &r->copy) : em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory");
    if (st) {
      free(r);
      pthread_mutex_unlock(&g_resident_lock);
      return em_fail_context(st, "keeping a copy of %zu bytes on cuda:%d", s->bytes, dev.ordinal);
    }
    r->dev = dev;
    r->next = s->resident;
    s->resident = r;
  }
  r->holders++;
  pthread_mutex_unlock(&g_resident_lock);
  return EM_OK;
}

em_status em_resident_get(const em_tensor *host, em_device dev, em_tensor **out) {
  em_storage *s = host->st;
  em_tensor *v = tensor_alloc();
  if (!v) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a tensor view");
  pthread_mutex_lock(&g_resident_lock);
  em_resident *r = resident_on(s, dev);
  em_status st = r ? EM_OK : em_fail(EM_ERR_INTERNAL, "em_resident_get: no copy held on cuda:%d", dev.ordinal);
  if (!st && r->version != s->version) {
    /* Upload the newest value, through the host when another device has it. */
    st = sync_host_locked(s);
    if (!st) st = em_memcpy_h2d(dev, r->copy->ptr, s->ptr, s->bytes, NULL);
    if (!st) r->version = s->version;
  }
  if (!st) {
    atomic_fetch_add(&r->copy->refs, 1);
    v->st = r->copy;
  }
  pthread_mutex_unlock(&g_resident_lock);
  if (st) {
    free(v);
    return st;
  }
  v->dtype = host->dtype;
  v->ndim = host->ndim;
  v->offset = host->offset;
  memcpy(v->shape, host->shape, sizeof v->shape);
  memcpy(v->strides, host->strides, sizeof v->strides);
  *out = v;
  return EM_OK;
}

void em_resident_written(const em_tensor *host, em_device dev) {
  em_storage *s = host->st;
  pthread_mutex_lock(&g_resident_lock);
  em_resident *r = resident_on(s, dev);
  if (r) {
    r->version = ++s->version;
    atomic_store(&s->host_stale, 1);
  }
  pthread_mutex_unlock(&g_resident_lock);
}

em_status em_resident_drop(const em_tensor *host, em_device dev) {
  em_storage *s = host->st;
  pthread_mutex_lock(&g_resident_lock);
  em_resident *r = resident_on(s, dev);
  em_status st = EM_OK;
  if (r && --r->holders == 0) {
    if (r->version == s->version) st = sync_host_locked(s);
    if (!st) {
      em_resident **link = &s->resident;
      while (*link != r) link = &(*link)->next;
      *link = r->next;
      storage_release(r->copy);
      free(r);
    }
  }
  pthread_mutex_unlock(&g_resident_lock);
  return st;
}

em_status em_resident_set(const em_tensor *host, const em_tensor *value, int *done) {
  em_storage *s = host->st;
  size_t bytes = (size_t)em_tensor_numel(host) * em_dtype_size(host->dtype);
  *done = 0;
  /* Only a whole, contiguous value replaces the whole copy. */
  if (value->st->dev.kind != EM_DEVICE_CUDA || !em_tensor_is_contiguous(value) || !em_tensor_is_contiguous(host) ||
      host->offset || bytes != s->bytes)
    return EM_OK;
  pthread_mutex_lock(&g_resident_lock);
  em_resident *r = resident_on(s, value->st->dev);
  em_status st = EM_OK;
  if (r) {
    st = em_memcpy_d2d(r->dev, r->copy->ptr, em_tensor_data(value), bytes, NULL);
    if (!st) {
      r->version = ++s->version;
      atomic_store(&s->host_stale, 1);
      *done = 1;
    }
  }
  pthread_mutex_unlock(&g_resident_lock);
  return st;
}

em_status em_resident_read(const em_tensor *host, em_device dev, em_tensor **out) {
  em_storage *s = host->st;
  *out = NULL;
  if (dev.kind == EM_DEVICE_CUDA && em_tensor_is_contiguous(host)) {
    pthread_mutex_lock(&g_resident_lock);
    em_resident *r = resident_on(s, dev);
    em_status st = EM_OK;
    if (r && r->version == s->version) {
      em_tensor *t = NULL;
      size_t es = em_dtype_size(host->dtype), bytes = (size_t)em_tensor_numel(host) * es;
      st = new_contiguous(dev, host->dtype, host->ndim, host->shape, "em_parameter_get", &t);
      if (!st) st = em_memcpy_d2d(dev, t->st->ptr, (char *)r->copy->ptr + (size_t)host->offset * es, bytes, NULL);
      if (st) em_tensor_release(t);
      else *out = t;
    }
    pthread_mutex_unlock(&g_resident_lock);
    if (st || *out) return st;
  }
  return em_tensor_to_device(host, dev, out);
}
