/* The checkpoint loader over bytes in memory, for the fuzz target
 * (tests/fuzz/fuzz_checkpoint.c) and the file loader alike. */
#ifndef EMBER_TRAINING_CHECKPOINT_INTERNAL_H
#define EMBER_TRAINING_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include "ember/checkpoint.h"

/* em_checkpoint_load (with_graph 1) or em_checkpoint_info (0) over data,
 * a malloc'd buffer of size bytes that the checkpoint takes over (freed here
 * on failure); name labels the messages as the path would. */
em_status em_checkpoint_from_bytes(unsigned char *data, size_t size, const char *name, int with_graph,
                                   em_checkpoint **out);

#endif
