/* The CPU-plan fallback and launch sizing shared by the kernel ops. */
#include "device_fallback.h"

#include <stdlib.h>

#include "error.h"

unsigned em_ops_grid_1d(size_t n) {
  size_t g = (n + EM_OPS_BLOCK - 1) / EM_OPS_BLOCK;
  if (g < 1) g = 1;
  if (g > 65535) g = 65535; /* the kernels stride; 65535 is every CC's x limit before 3.0 too */
  return (unsigned)g;
}

em_status em_ops_on_host_copies(em_device dev, em_host_copy *c, int n, em_stream *s, void (*run)(void *), void *arg) {
  em_status st = em_stream_sync(dev, s);
  for (int i = 0; i < n; i++) c[i].host = NULL;
  for (int i = 0; i < n && !st; i++) {
    c[i].host = malloc(c[i].bytes ? c[i].bytes : 1);
    if (!c[i].host) st = em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a %zu-byte copy", c[i].bytes);
    else if (c[i].copy_in) st = em_memcpy_d2h(dev, c[i].host, c[i].dev, c[i].bytes, NULL);
  }
  if (!st) run(arg);
  for (int i = 0; i < n && !st; i++)
    if (c[i].write_back) st = em_memcpy_h2d(dev, (void *)c[i].dev, c[i].host, c[i].bytes, NULL);
  for (int i = 0; i < n; i++) free(c[i].host);
  return st;
}
