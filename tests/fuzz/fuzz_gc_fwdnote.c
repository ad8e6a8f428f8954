// fuzz-sources: tools/gpucheck/probe_fwd.c tools/gpucheck/probe_parse.c -ljansson
/* libFuzzer target for the forward-compatibility note reader of gpucheck
 * (tools/gpucheck/probe_fwd.c): the bytes as the note's JSON, and as a whole
 * ELF file walked with libelf to the .note.cuda.fwd_compatibility section.
 * The `-ljansson` on the sources line links jansson, which the JSON needs. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/gpucheck/probe.h"

static void check(const gc_fwd_note *n, int rc) {
  if (n->n_drivers < 0 || n->n_drivers > GC_PROBE_MAX_LIST || n->n_devices < 0 || n->n_devices > GC_PROBE_MAX_LIST) abort();
  if (!memchr(n->cuda, '\0', sizeof n->cuda) || !memchr(n->error, '\0', sizeof n->error)) abort();
  if (n->found && (n->cuda_version < 1000 || rc != 0)) abort();
  if (rc != 0 && !n->error[0]) abort();
  for (int i = 0; i < n->n_drivers; i++)
    if (n->drivers[i] < 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gc_fwd_note n;
  int rc = gc_probe_fwd_note_json((const char *)data, size, &n);
  check(&n, rc);
  rc = gc_probe_fwd_note_elf(data, size, &n);
  check(&n, rc);
  return 0;
}
