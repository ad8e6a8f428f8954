/* What the readers share inside the library (and with their fuzz targets):
 * the data set's layout, gzip recognised by its magic (files are read
 * whole by runtime/file_atomic.c's em_read_file), and each format's parser
 * over bytes in memory, so a fuzz target drives a parser without touching
 * the file system. */
#ifndef EMBER_TRAINING_READER_INTERNAL_H
#define EMBER_TRAINING_READER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "ember/reader.h"

typedef struct em_ds_stream {
  em_stream_desc desc;
  size_t sample_bytes;         /* dtype size * per-sample element count */
  unsigned char *data;         /* samples * sample_bytes (malloc'd, or inside the data set's block) */
  int in_block;                /* data points into the block: not freed on its own */
} em_ds_stream;

struct em_dataset {
  int64_t samples;             /* -1 until the first stream fixes it */
  int n_streams;
  em_ds_stream streams[EM_MINIBATCH_MAX_STREAMS];
  unsigned char *block;        /* a whole file the streams point into (EMB), or NULL */
};

/* Bytes per element of the dtypes a data set holds (u8, i32, f32, f64; 0
 * for any other: the readers store only these). */
size_t em_ds_dtype_size(em_dtype t);
/* Elements per sample of desc, or -1 when a dimension is negative or the
 * product overflows `limit`. */
int64_t em_ds_sample_elems(const em_stream_desc *desc, int64_t limit);
/* Adds a stream whose data the data set takes over (freed on failure too).
 * Checks what em_dataset_add_stream checks; `where` prefixes the message
 * (the file name). */
em_status em_ds_add_owned(em_dataset *d, const em_stream_desc *desc, int64_t samples, void *data,
                          const char *where);
/* The same for data inside d->block (in_block 1: never freed by itself). */
em_status em_ds_add_data(em_dataset *d, const em_stream_desc *desc, int64_t samples, void *data, int in_block,
                         const char *where);

/* When b starts with gzip's magic (1f 8b), *out is its decompressed
 * content (every member of a multi-member file, malloc'd, plus a 0 byte not
 * counted) and *gz = 1; else *out = NULL, *gz = 0. Errors: EM_ERR_CORRUPT
 * naming `name`, the compressed byte offset and zlib's message; outputs over
 * `limit` bytes are refused (a fuzzer's tiny input can claim gigabytes). */
em_status em_gunzip(const char *name, const unsigned char *b, size_t n, size_t limit, unsigned char **out,
                    size_t *out_size, int *gz);

/* An IDX file's bytes (already decompressed) as a stream description,
 * sample count and converted data (malloc'd). classes > 0: a class stream. */
em_status em_idx_parse(const char *name, const unsigned char *b, size_t n, int64_t classes,
                       em_stream_desc *desc, int64_t *samples, void **data);

/* A CTF text's bytes as a new data set. */
em_status em_ctf_parse(const char *name, const char *text, size_t n, const em_ctf_stream *streams,
                       int n_streams, em_dataset **out);

/* An EMB file's bytes as a new data set, and a data set as EMB bytes.
 * With owned == b (a malloc'd buffer) the data set takes the buffer over on
 * success and its streams point into it (no copy of the data); with owned
 * NULL the streams are copies. */
em_status em_emb_parse(const char *name, const unsigned char *b, size_t n, unsigned char *owned, em_dataset **out);
em_status em_emb_serialize(const em_dataset *d, unsigned char **out, size_t *size);

#endif
