/* Shared by the ops that launch Ember's own kernels (primitives.c,
 * math_map.c): the 1-D launch size, and running a CPU twin on host copies of
 * device buffers when a device's plan for the kernel is the CPU. */
#ifndef EMBER_OPS_DEVICE_FALLBACK_H
#define EMBER_OPS_DEVICE_FALLBACK_H

#include <stddef.h>
#include "ember.h"

#define EM_OPS_BLOCK 256

/* Blocks for a grid-stride kernel over n elements (65535: every CC's x limit). */
unsigned em_ops_grid_1d(size_t n);

/* One device buffer the twin needs on the host. */
typedef struct em_host_copy {
  void *host;          /* filled in */
  const void *dev;
  size_t bytes;
  int copy_in;         /* the twin reads it: copy it to the host first */
  int write_back;      /* the twin writes it: copy it back afterwards */
} em_host_copy;

/* Waits for the stream, copies the buffers in, runs run(arg), copies the
 * written ones back, frees the host copies. */
em_status em_ops_on_host_copies(em_device dev, em_host_copy *c, int n, em_stream *s, void (*run)(void *), void *arg);

#endif
