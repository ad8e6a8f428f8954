/* Reader of the header of PTX text: .version, .target, .address_size and the
 * .entry names. Outside bytes: bounded, never crashes (tests/fuzz/fuzz_ptx.c). */
#ifndef EMBER_RUNTIME_PTX_HEADER_H
#define EMBER_RUNTIME_PTX_HEADER_H

#include <stddef.h>
#include "ember/status.h"

typedef struct em_ptx_info {
  int isa;            /* .version as 10*major+minor: "3.2" -> 32, "9.0" -> 90, "8.10" is invalid */
  int target_sm;      /* first .target sm_XY as a number: sm_35 -> 35, sm_90a -> 90 */
  char target_variant;/* 'a', 'f' or 0 */
  int address_size;   /* 32 or 64; 0 if the directive is absent (PTX default is 32) */
  int n_entries;      /* number of .entry (kernel) definitions */
} em_ptx_info;

/* Parses PTX text of `size` bytes (NUL not required). `kernels`, when not
 * NULL, receives the .entry names separated by commas (truncated, always
 * NUL-terminated). Comments (// and block) are skipped. Returns EM_ERR_CORRUPT
 * naming the line for a missing or malformed .version or .target. */
em_status em_ptx_read_header(const char *text, size_t size, em_ptx_info *out,
                             char *kernels, size_t kernels_cap);

#endif
