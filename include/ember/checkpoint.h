/* Checkpoints: a model and the host state of a training in one file.
 *
 * A checkpoint holds the graph (parameters and states with their values,
 * em_graph_save's format: the learners' moments are states of the graph,
 * training/README.md) and named opaque sections of host state that each
 * part of a training serialises itself (the learners' counters, the
 * minibatch source's position and random state, the trainer's accounting,
 * the executor's run counter), with a manifest saying when, by which Ember,
 * on which device and in which numeric mode it was written. The format is
 * in docs/checkpoint-format.md: versioned, a checksum (XXH3-64) per section
 * and one over the whole file.
 *
 * Saving is atomic: the bytes go to "<path>.tmp" in the same directory,
 * which is fsynced and renamed over path, then the directory is fsynced. A
 * crash during a save leaves the previous checkpoint at path, whole; the
 * next save to the same path reuses (and replaces) a "<path>.tmp" that a
 * killed save left behind, so at most one temporary file per checkpoint
 * path ever exists. Two saves to one path at the same time: the second
 * fails (EM_ERR_IO, "another save ... is in progress") and changes nothing.
 *
 * Loading checks everything before building anything: a file that is not a
 * checkpoint, is truncated, or has a damaged byte anywhere is refused with
 * EM_ERR_CORRUPT and a message naming the file, the section and the byte
 * offset; a file of a newer format version is refused with
 * EM_ERR_UNSUPPORTED naming both versions. Nothing is returned on failure.
 *
 * Typical use (a trainer):
 *   em_checkpoint_section s[] = {{"trainer", tb, tn}, {"learner.0", lb, ln},
 *                                {"reader", rb, rn}};
 *   em_checkpoint_save_options o = {.device = dev, .mode = EM_MODE_PORTABLE};
 *   em_checkpoint_save("run.ckpt", graph, s, 3, &o);
 *   ...
 *   em_checkpoint *c;
 *   em_checkpoint_load("run.ckpt", &c);
 *   em_graph *g;  em_checkpoint_take_graph(c, &g);   // now the caller's
 *   const void *b; size_t n;
 *   em_checkpoint_find(c, "trainer", &b, &n);        // valid until the free
 *   em_checkpoint_free(c);
 */
#ifndef EMBER_CHECKPOINT_H
#define EMBER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "ember/exec.h"
#include "ember/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest checkpoint format version this build writes and reads. */
#define EM_CHECKPOINT_FORMAT_VERSION 1

/* A section name: 1 to EM_CHECKPOINT_NAME_MAX bytes of [A-Za-z0-9._-].
 * "manifest" and "graph" are the library's own and cannot be given. */
#define EM_CHECKPOINT_NAME_MAX 55

/* A named run of opaque bytes. */
typedef struct em_checkpoint_section {
  const char *name;
  const void *bytes;      /* may be NULL when size is 0 */
  size_t size;
} em_checkpoint_section;

/* What the manifest records of where the checkpoint was written.
 * Zero-initialised: the CPU, fast mode. */
typedef struct em_checkpoint_save_options {
  em_device device;       /* the device the training ran on */
  em_mode mode;           /* its numeric mode */
} em_checkpoint_save_options;

/* Writes graph (its parameters' and states' current values; values an
 * executor updated on a device are brought to the host first) and the
 * sections, in the order given, to path, atomically (above). graph may be
 * NULL (a checkpoint of host state only); options may be NULL (defaults).
 * The caller keeps everything it passed.
 * Errors: EM_ERR_INVALID_ARGUMENT naming the section for a bad or repeated
 * name; EM_ERR_IO naming the file and the system's reason (path is then
 * unchanged); EM_ERR_OUT_OF_MEMORY. */
EM_API em_status em_checkpoint_save(const char *path, const em_graph *graph, const em_checkpoint_section *sections,
                                    int n_sections, const em_checkpoint_save_options *options);

/* A checkpoint read from a file; owns its bytes and (until taken) its graph. */
typedef struct em_checkpoint em_checkpoint;

/* Reads and checks path, and builds its graph (on the CPU, as em_graph_load).
 * Errors as above, plus those of the graph's parser (an op this build does
 * not have, say: EM_ERR_CORRUPT naming the node and the section's offset). */
EM_API em_status em_checkpoint_load(const char *path, em_checkpoint **out);

/* Reads and checks path (every checksum, the section table, the manifest)
 * without building the graph: for inspection, and for files whose graph
 * this build cannot build. em_checkpoint_graph gives NULL for it. */
EM_API em_status em_checkpoint_info(const char *path, em_checkpoint **out);

EM_API void em_checkpoint_free(em_checkpoint *c); /* NULL is fine */

/* The manifest. Strings belong to the checkpoint. */
typedef struct em_checkpoint_manifest {
  uint32_t format_version;
  int64_t created;            /* when it was written: seconds since 1970-01-01 UTC */
  const char *ember_version;  /* em_version() of the writer, "0.1.0" */
  em_device device;           /* as given to em_checkpoint_save */
  const char *device_name;    /* "cpu", or the GPU's name ("NVIDIA H100 80GB HBM3") */
  em_mode mode;
  uint64_t file_size;         /* bytes, all included */
} em_checkpoint_manifest;
EM_API em_status em_checkpoint_get_manifest(const em_checkpoint *c, em_checkpoint_manifest *out);

/* The sections as stored, the library's ("manifest", "graph") included, in
 * file order. offset and checksum are for inspection (all verified by the
 * load); bytes point into the checkpoint and live until em_checkpoint_free. */
typedef struct em_checkpoint_section_info {
  const char *name;
  const void *bytes;
  size_t size;
  uint64_t offset;            /* of the section's first byte in the file */
  uint64_t checksum;          /* its XXH3-64 */
} em_checkpoint_section_info;
EM_API size_t em_checkpoint_section_count(const em_checkpoint *c);
EM_API em_status em_checkpoint_section_get(const em_checkpoint *c, size_t index, em_checkpoint_section_info *out);

/* A section by name: EM_ERR_NOT_FOUND (naming it and the file) when absent.
 * *bytes lives until em_checkpoint_free. */
EM_API em_status em_checkpoint_find(const em_checkpoint *c, const char *name, const void **bytes, size_t *size);

/* The graph (NULL after em_checkpoint_info, for a checkpoint saved without
 * one, or once taken). Borrowed: it is freed with the checkpoint. */
EM_API em_graph *em_checkpoint_graph(const em_checkpoint *c);
/* Hands the graph to the caller (who frees it with em_graph_free); the
 * checkpoint keeps its sections. EM_ERR_NOT_FOUND when there is none. */
EM_API em_status em_checkpoint_take_graph(em_checkpoint *c, em_graph **out);

#ifdef __cplusplus
}
#endif
#endif
