/* NumPy's .npy files (format 1.0, 2.0 and 3.0) to and from Ember tensors,
 * for `ember run` (run_cmd.c).
 *
 * Read: little-endian (or byte-order-free) f16, f32, f64, i32, i64, u8 and
 * bool arrays of up to EM_MAX_DIMS dimensions in C order. Refused, with a
 * message naming the file and the byte offset: a bad magic or header,
 * Fortran order, object arrays and other dtypes, big-endian data, a data
 * size that disagrees with the shape. Written: format 1.0, C order, '<' dtypes, the header padded to 64 bytes as
 * NumPy writes it. */
#ifndef EMBER_TOOL_NPY_H
#define EMBER_TOOL_NPY_H

#include <stddef.h>

#include "ember.h"

typedef enum npy_status {
  NPY_OK = 0,
  NPY_ERR_IO,          /* the file cannot be opened, read or written */
  NPY_ERR_FORMAT,      /* not a .npy file, or a malformed one */
  NPY_ERR_UNSUPPORTED, /* a valid .npy that Ember has no tensor for (dtype, order, rank) */
  NPY_ERR_MEMORY
} npy_status;

/* The tensor (on the CPU) that the .npy bytes hold; what names them in
 * messages. On failure err (cap bytes) says why and *out is NULL. */
npy_status npy_parse(const void *bytes, size_t size, const char *what, em_tensor **out, char *err, size_t cap);
/* npy_parse of a file's contents. */
npy_status npy_load(const char *path, em_tensor **out, char *err, size_t cap);

/* The .npy bytes of t (any device; copied to the host), in *bytes (malloc'd,
 * the caller frees) of *size bytes. */
npy_status npy_encode(const em_tensor *t, void **bytes, size_t *size, char *err, size_t cap);
/* npy_encode written to path (replaced if it exists). */
npy_status npy_save(const char *path, const em_tensor *t, char *err, size_t cap);

#endif
