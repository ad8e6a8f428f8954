/* Readers and the minibatch source: data sets in memory, read from IDX
 * files (MNIST, Fashion-MNIST; gzipped or not), the CNTK Text Format (CTF)
 * or Ember's own binary format (EMB, docs/dataset-format.md), and a source
 * that cuts them into shuffled, transformed minibatches of host tensors,
 * prepared by a background thread while the trainer computes.
 *
 * A data set (em_dataset) is a table of named streams over N samples, all
 * in host memory (Fashion-MNIST's training set is 47 MB as bytes). Each
 * stream has a dtype and a per-sample shape; a stream with `classes` > 0
 * holds class labels: one i32 per sample in [0, classes).
 *
 * Sparse inputs: the engine has no sparse tensors yet, so a sparse CTF
 * stream is stored and delivered DENSE (f32, zeros where the file gives no
 * value), and a class stream written one-hot in CTF ("|labels 3:1") is
 * stored as its class id.
 *
 * Errors: every fallible call returns an em_status and sets em_last_error().
 * Bad input fails with EM_ERR_CORRUPT (or EM_ERR_IO for a file that cannot
 * be read) and a message naming the file and the byte offset (IDX, EMB) or
 * the line (CTF): "train-labels-idx1-ubyte.gz: byte 1041: label 12 is out of
 * range for 10 classes". Nothing the caller had is changed on a failure.
 *
 * Ownership: a source borrows its data set (free the sources first); a
 * minibatch's tensors are the caller's (em_minibatch_clear releases them).
 * Data sets are read-only once built: any number of sources and threads may
 * read one. A source is used by one thread at a time. */
#ifndef EMBER_READER_H
#define EMBER_READER_H

#include <stddef.h>
#include <stdint.h>
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ data sets --- */

typedef struct em_dataset em_dataset;

#define EM_STREAM_NAME_MAX 64

/* One stream of a data set. */
typedef struct em_stream_desc {
  char name[EM_STREAM_NAME_MAX]; /* "features", "labels", ... (unique in a data set) */
  em_dtype dtype;              /* element type as stored (u8 pixels, f32, i32 classes) */
  int ndim;                    /* per-sample dimensions (0: a scalar per sample) */
  int64_t shape[EM_MAX_DIMS];  /* per-sample shape */
  int64_t classes;             /* > 0: a class stream (i32, ndim 0, values in [0, classes); a sequence
                                * class stream: ndim 1, [T_max], a class per step) */
  int sequence;                /* 1: a padded sequence stream: axis 0 of the per-sample shape is time,
                                * T_max steps, zeros past each sample's length (the lengths are another
                                * stream, i64 ndim 0: the CTF reader's "<name>.lengths") */
} em_stream_desc;

/* An empty data set (no streams, 0 samples), to fill with
 * em_dataset_add_stream / em_dataset_add_idx. */
EM_API em_status em_dataset_create(em_dataset **out);
EM_API void em_dataset_free(em_dataset *d); /* NULL is fine */

/* Adds a stream from host memory (copied): `samples` samples of desc's
 * dtype and per-sample shape, row-major, `bytes` = samples * sample bytes.
 * A class stream (desc->classes > 0) must be i32 with ndim 0 (or ndim 1
 * with desc->sequence: a class per step), every value in [0, classes). A
 * sequence stream (desc->sequence) needs ndim >= 1. The first stream sets
 * the data set's sample count; every later one must have the same. A data
 * set holds up to EM_MINIBATCH_MAX_STREAMS (16) streams of u8, i32, i64,
 * f32 or f64, with up to 7 per-sample dimensions. Fails (EM_ERR_INVALID_ARGUMENT) naming the stream
 * on a duplicate name, a size or count mismatch, or a label out of range
 * (with its sample index). */
EM_API em_status em_dataset_add_stream(em_dataset *d, const em_stream_desc *desc, int64_t samples,
                                       const void *data, size_t bytes);

/* Adds the IDX file at `path` (gzipped or not: a gzip stream is recognised
 * by its magic bytes) as stream `name`. Dimension 0 counts the samples; the
 * rest is the per-sample shape. Element types: 0x08 unsigned byte -> u8;
 * 0x09 signed byte, 0x0B short, 0x0C int -> i32; 0x0D float -> f32;
 * 0x0E double -> f64 (big-endian in the file, converted). With classes > 0
 * the file must be integer-typed with one value per sample (IDX1), each in
 * [0, classes): a class stream. Errors name the file and the byte offset
 * (in the uncompressed stream for a gzip file): a wrong magic, an unknown
 * type, a file shorter than its header says (or with bytes beyond it), a
 * label out of range, a gzip error (zlib's message). */
EM_API em_status em_dataset_add_idx(em_dataset *d, const char *path, const char *name, int64_t classes);

/* The usual image/label pair: streams "features" (the images, u8 [H, W]
 * per sample as stored) and "labels" (a class stream of `classes` classes;
 * 10 for MNIST and Fashion-MNIST). */
EM_API em_status em_dataset_open_idx(const char *images_path, const char *labels_path, int64_t classes,
                                     em_dataset **out);

/* The pair of one split in a directory laid out as the MNIST distributions
 * are: split "train" or "t10k" opens DIR/SPLIT-images-idx3-ubyte[.gz] and
 * DIR/SPLIT-labels-idx1-ubyte[.gz] (the uncompressed file first when both
 * exist). Fails (EM_ERR_NOT_FOUND) naming the paths tried when a file is
 * missing. Debian's dataset-fashion-mnist installs them in
 * /usr/share/datasets/fashion-mnist. */
EM_API em_status em_dataset_open_idx_dir(const char *dir, const char *split, int64_t classes, em_dataset **out);

/* One input stream of a CTF file, as CNTK's reader configuration declares it
 * (input = [ features = [ dim = 784; format = "dense" ] ... ]). */
typedef struct em_ctf_stream {
  const char *name;            /* the input name after '|' in the file, and the stream's name */
  int64_t dim;                 /* values per sample (per step of a sequence stream) */
  int sparse;                  /* 0: dense, exactly dim values "0.5 1 2"; 1: "index:value" pairs, index < dim */
  int is_class;                /* 1: a class stream of dim classes: the sample must hold a single 1
                                * and zeros (one-hot, dense or sparse; any other mark is refused),
                                * delivered as its index */
  /* Sequence streams (CNTK's dynamic axis, padded to a static maximum):
   * max_steps > 0 makes this a SEQUENCE stream of at most max_steps steps;
   * 0 (the default) is a stream given once per sequence, as before. */
  int64_t max_steps;
  int truncate;                /* a sequence longer than max_steps: 0 (default) is an error, 1 keeps
                                * its first max_steps steps (the rest is still parsed and checked) */
} em_ctf_stream;

/* Reads a CTF file: lines "[sequence id] |name values |name values |# comment".
 * Every declared stream becomes a data set stream of the same name: f32
 * [dim] per sample, or a class stream. A sample is one sequence: the lines
 * with the same sequence id, consecutive in the file (a line without an id
 * is a sequence of its own). A stream that is not a sequence stream is
 * given at most once per sequence; a dense stream must appear in every
 * sample, a sparse one missing from a sample is all zeros, a class stream
 * must appear. A name not declared is an error (CNTK would ignore it; here
 * it is most often a typo). Comments ("|#" to the end of the line or the
 * next '|') and blank lines are skipped.
 *
 * Sequence streams (max_steps > 0), as CNTK's CTF reader reads them: each
 * line of a sequence that gives the stream adds its next step (at most one
 * step per line), so
 *     7 |x 1 2 |y 0:1
 *     7 |x 3 4
 *     7 |x 5 6
 * is one sample whose x has 3 steps (and y, a non-sequence stream, once).
 * Streams count their steps independently (a line need not give every
 * sequence stream). A sequence stream "x" becomes the data set stream "x"
 * of f32 [max_steps, dim] per sample (class: i32 [max_steps] with classes
 * = dim), zeros (class 0) past the sequence's length, with desc.sequence
 * = 1, and its lengths become the stream "x.lengths": i64, one value per
 * sample (feed it to a recurrent layer's sequence_lens). The lengths
 * streams follow ALL declared streams, in declaration order, so declared
 * stream i stays data set stream i. A dense or class sequence stream needs
 * at least one step in every sample; a sparse one may have none (length
 * 0). A sequence stream's name leaves room for ".lengths" (at most 55
 * characters), and the declared streams plus their lengths streams are at
 * most EM_MINIBATCH_MAX_STREAMS.
 *
 * Errors name the file, the line and the column: a malformed number, a
 * dense stream with too many or too few values, a sparse index >= dim, a
 * stream given twice in a sequence (a non-sequence stream) or twice on one
 * line (a sequence stream), a sequence longer than max_steps without
 * truncate (also naming the sequence id), a class stream that is not
 * one-hot (a mark other than 1). */
EM_API em_status em_dataset_open_ctf(const char *path, const em_ctf_stream *streams, int n_streams,
                                     em_dataset **out);

/* Reads an EMB file (em_dataset_write's; docs/dataset-format.md). The
 * whole file is checked (magic, version, stream table, sizes, XXH3-64
 * checksum) before anything is returned; errors name the file and the byte
 * offset. */
EM_API em_status em_dataset_open_emb(const char *path, em_dataset **out);

/* Writes d as an EMB file, atomically (a temporary file beside it, fsync,
 * rename, fsync of the directory): a crash leaves the old file or the new
 * one, never a mix. Convert an IDX or CTF data set once, then open the EMB
 * file in a fraction of the time (no gzip, no text parsing). EMB version 1
 * has no sequence or i64 streams: a data set with one is refused
 * (EM_ERR_UNSUPPORTED, naming the stream) and no file is written. */
EM_API em_status em_dataset_write(const em_dataset *d, const char *path);

/* A new data set holding samples [first, first + count) of d (copied): a
 * subset for a quick run, or a train/validation split. */
EM_API em_status em_dataset_slice(const em_dataset *d, int64_t first, int64_t count, em_dataset **out);

EM_API int64_t em_dataset_samples(const em_dataset *d);
EM_API int em_dataset_n_streams(const em_dataset *d);
/* Stream i's description (EM_ERR_INVALID_ARGUMENT when i is out of range). */
EM_API em_status em_dataset_stream(const em_dataset *d, int i, em_stream_desc *out);
/* The index of the stream called name, or -1. */
EM_API int em_dataset_find_stream(const em_dataset *d, const char *name);
/* Stream i's samples, row-major, samples * sample bytes (borrowed; NULL
 * when i is out of range). */
EM_API const void *em_dataset_stream_data(const em_dataset *d, int i);

/* ---------------------------------------------------- minibatch source --- */

/* Per-sample image transforms, applied in this order to the image stream
 * (a per-sample shape [C, H, W], or [H, W] taken as C = 1), in f32:
 *   x = raw * scale                        (scale 0 means 1; 1/255 for bytes)
 *   x = (x - mean[c]) / std[c]             (norm_channels 1: one mean and std
 *                                           for all channels; C: one each)
 *   zero padding of `pad` on every side    (after normalisation: pads are 0)
 *   a crop to crop_h x crop_w              (random offset with random_crop,
 *                                           else the centre; 0: no crop)
 *   a horizontal flip with probability 1/2 (random_flip)
 * The output image is [C, crop_h, crop_w] (no crop: [C, H + 2 pad, W + 2 pad]).
 * The random draws of a sample come from a generator seeded by (seed,
 * sweep, position in the sweep) (see em_minibatch_options), so they do not
 * depend on prefetching, on the batch size or on where a run was resumed. */
#define EM_TRANSFORM_MAX_CHANNELS 16
typedef struct em_image_transform {
  float scale;
  int norm_channels;           /* 0: no mean / std step */
  float mean[EM_TRANSFORM_MAX_CHANNELS];
  float std[EM_TRANSFORM_MAX_CHANNELS]; /* each > 0 */
  int pad;
  int crop_h, crop_w;
  int random_crop;
  int random_flip;
} em_image_transform;

typedef enum em_layout {
  EM_LAYOUT_NCHW = 0,          /* the image stream as [B, C, H, W] (an [H, W] sample gets C = 1) */
  EM_LAYOUT_FLAT = 1           /* the image stream as [B, C*H*W] (an MLP's input) */
} em_layout;

/* Zero-initialised options give: no shuffle, seed 0, an epoch = a sweep,
 * endless sweeps, prefetch on, no transform, NCHW. batch_size is required.
 *
 * Order and randomness. The samples form an endless series of sweeps (a
 * sweep = every sample once). With shuffle, sweep s visits the samples in
 * the order of a permutation drawn by Fisher-Yates (i from n-1 down to 1,
 * j uniform in [0, i] by rejection sampling) from SplitMix64 seeded with
 * mix(seed ^ mix(s + 1)), where mix is SplitMix64's output function; without
 * shuffle, in stored order. Same seed, same order, on every machine.
 *
 * Epochs, as CNTK counts them: an epoch is epoch_size samples (0: one
 * sweep), which need not be a sweep: an epoch of 2.5 sweeps takes the
 * second half of sweep 2 into epoch 1. A minibatch holds batch_size samples
 * except that it never crosses an epoch's end (the epoch's last minibatch
 * may be short: 60000 samples in batches of 64 end with one of 32), nor the
 * end of the data with max_sweeps. It MAY cross a sweep's end inside an
 * epoch, when the epoch size differs from the sweep size (CNTK does the
 * same); with the default epoch (one sweep) it never does.
 *
 * For evaluation: shuffle 0, max_sweeps 1: one pass in stored order, the
 * last minibatch short, then end_of_data; em_minibatch_rewind runs it again. */
typedef struct em_minibatch_options {
  int64_t batch_size;          /* samples per minibatch, >= 1 */
  uint64_t seed;               /* shuffling and the random transforms */
  int shuffle;                 /* 1: a new permutation each sweep */
  uint64_t epoch_size;         /* samples per epoch; 0: the data set's sample count */
  int64_t max_sweeps;          /* end of data after this many sweeps; 0: never */
  int no_prefetch;             /* 1: prepare each minibatch inside em_minibatch_next */
  const char *image_stream;    /* the stream transform and layout apply to; NULL: "features" when the
                                * data set has a stream of that name, else none */
  em_image_transform transform;
  em_layout layout;
} em_minibatch_options;

typedef struct em_minibatch_source em_minibatch_source;

/* A source over d (borrowed: free the source before d). Fails
 * (EM_ERR_INVALID_ARGUMENT) naming the option: batch_size < 1, an empty
 * data set, an image_stream that does not exist or is not [H, W] / [C, H, W],
 * a crop larger than the padded image, a NaN or inf scale, mean or std, a
 * std <= 0, norm_channels not 1 or C.
 * Starts the prefetch thread unless no_prefetch. */
EM_API em_status em_minibatch_source_create(const em_dataset *d, const em_minibatch_options *options,
                                            em_minibatch_source **out);
EM_API void em_minibatch_source_free(em_minibatch_source *s); /* NULL is fine; stops the thread */

#define EM_MINIBATCH_MAX_STREAMS 16

/* One minibatch: a tensor per stream of the data set, in its order, on the
 * CPU: the image stream f32 in the layout chosen, after the transforms;
 * every class stream i32 [B] (a sequence class stream i32 [B, T_max]);
 * every i64 stream (sequence lengths) i64 [B, per-sample shape] as stored;
 * every other stream f32 [B, per-sample shape] (converted from its stored
 * dtype; a sequence stream [B, T_max, dim]). A sequence stream is never
 * taken as the default image stream. */
typedef struct em_minibatch {
  int n_streams;
  em_tensor *values[EM_MINIBATCH_MAX_STREAMS]; /* the caller's: em_minibatch_clear */
  em_tensor *features;         /* borrowed alias of the stream "features" (NULL if none) */
  em_tensor *labels;           /* borrowed alias of the stream "labels" (NULL if none) */
  int64_t samples;             /* B: batch_size, or fewer at an epoch's end or the data's end; 0 at end_of_data */
  int64_t epoch;               /* 0-based epoch this minibatch belongs to */
  int64_t sweep;               /* 0-based sweep of its first sample */
  int end_of_epoch;            /* it completes an epoch */
  int end_of_sweep;            /* it holds the last sample of a sweep */
  int end_of_data;             /* max_sweeps reached: no samples, no tensors */
  uint64_t samples_seen;       /* samples delivered by the source, this minibatch included */
} em_minibatch;

/* The next minibatch into *out (overwritten: clear the previous one
 * first). With prefetch it is usually ready; the thread then starts on the
 * one after. A failure (out of memory) is reported here, for the minibatch
 * it concerns, and the position does not move. */
EM_API em_status em_minibatch_next(em_minibatch_source *s, em_minibatch *out);
/* Releases the minibatch's tensors and zeroes it (NULL or a zeroed one is fine). */
EM_API void em_minibatch_clear(em_minibatch *mb);

/* Where the source is (what the next minibatch will start from). */
typedef struct em_minibatch_position {
  uint64_t samples_seen;       /* samples delivered so far */
  int64_t epoch;               /* the epoch the next minibatch belongs to (= epochs completed) */
  int64_t sweep;               /* the sweep the next sample comes from */
  int64_t sweep_position;      /* its index in that sweep's order */
  uint64_t epoch_size;         /* samples per epoch (the option, or the sweep size) */
  int64_t sweep_size;          /* the data set's sample count */
} em_minibatch_position;
EM_API em_status em_minibatch_get_position(const em_minibatch_source *s, em_minibatch_position *out);

/* Back to the very start (sample 0 of sweep 0, epoch 0): an evaluation
 * source runs its pass again. */
EM_API em_status em_minibatch_rewind(em_minibatch_source *s);

/* The position and random state for a checkpoint: *bytes (malloc'd, the
 * caller frees) holds the samples seen, the sweep and position in it, and
 * what they depend on (seed, shuffle, epoch size, sample count). The random
 * state IS the position: every draw is a function of (seed, sweep,
 * position), so restoring and continuing yields exactly the minibatches of
 * a run that never stopped, even with another batch size. load fails
 * (EM_ERR_CORRUPT) on bytes that are not a state of this version or hold a
 * position past the end of the data (max_sweeps) or past 2^32 sweeps, and
 * (EM_ERR_INVALID_ARGUMENT) naming the field when the source's seed,
 * shuffle, epoch size or sample count differ from the saved ones; the
 * source is then unchanged. */
EM_API em_status em_minibatch_state_save(const em_minibatch_source *s, void **bytes, size_t *size);
EM_API em_status em_minibatch_state_load(em_minibatch_source *s, const void *bytes, size_t size);

#ifdef __cplusplus
}
#endif
#endif
