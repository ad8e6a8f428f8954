/* The library's one way to read a whole user's file, and its one way to
 * write one: atomically, so a crash
 * during the write leaves the previous file whole (DESIGN.md, "Writes of
 * user data are atomic"). em_graph_save and em_checkpoint_save use it.
 *
 * How: the bytes go to "<path>.tmp" (created 0666 less the umask, never
 * through a symbolic link), locked with flock for the duration, truncated,
 * written, fsynced, renamed over path while still locked, and the directory
 * is fsynced so the rename itself survives a power loss. A "<path>.tmp"
 * that a killed writer left behind is unlocked (the kernel drops a dead
 * process's locks), so the next write to path reuses and replaces it: at
 * most one temporary file per path ever exists. While another writer holds
 * the lock, the write fails at once and path is untouched. */
#ifndef EMBER_RUNTIME_FILE_ATOMIC_H
#define EMBER_RUNTIME_FILE_ATOMIC_H

#include <stddef.h>
#include "ember/status.h"

/* One run of bytes of the file, written in the order given. */
typedef struct em_write_part {
  const void *bytes;
  size_t size;
} em_write_part;

/* Writes the parts, one after another, to path as above. On failure
 * (EM_ERR_IO naming the file and the system's reason; EM_ERR_OUT_OF_MEMORY)
 * path is as it was and no temporary file is left, except where the rename
 * succeeded and only the directory's fsync failed (the message says so). */
em_status em_write_file_atomic(const char *path, const em_write_part *parts, int n_parts);

/* Reads the whole file into *data (malloc'd, plus a terminating 0 byte not
 * counted in *size; the caller frees) and its size into *size: a regular
 * file's buffer is sized from fstat, a pipe is read to its end. `what`
 * starts the messages ("em_graph_load", "checkpoint", "em_dataset_open_ctf"):
 * EM_ERR_IO naming the file and the system's reason (a directory: "it is a
 * directory"), EM_ERR_OUT_OF_MEMORY. The graph, checkpoint and data set
 * readers all read their files through it. */
em_status em_read_file(const char *path, const char *what, unsigned char **data, size_t *size);

#endif
