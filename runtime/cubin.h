/* Reader of cubin ELF images (libelf): which SM, which ABI, a/f marks, the
 * toolkit that made it, and the kernels it defines. Reads outside bytes: never
 * trusts a size or offset, never crashes (fuzzed by tests/fuzz/fuzz_cubin.c). */
#ifndef EMBER_RUNTIME_CUBIN_H
#define EMBER_RUNTIME_CUBIN_H

#include <stddef.h>
#include "ember/status.h"

typedef struct em_cubin_info {
  int sm;              /* 35, 75, 90, 120 ... from e_flags (V1: bits 0-7, V2: bits 8-15) */
  int abi_version;     /* EI_ABIVERSION: 7 = V1, 8 = V2 */
  int os_abi;          /* EI_OSABI: 0x33 (V1) or 0x41 (V2) */
  char variant;        /* 'a' when marked arch-specific (V1: e_flags 0x800; V2: .nv.compat attr 9 = 1), else 0.
                          'f' is not visible in a cubin (only in a fatbin entry's flags). */
  int toolkit;         /* CUDA version that made it, 1000*major+10*minor (V2: .note.nv.cuinfo, else
                          the "release X.Y" of the tool strings, as in CUDA 12.9's V2 cubins;
                          V1: e_version/10, e.g. 123 -> 12030); 0 if unknown */
  int is_relocatable;  /* e_type == ET_REL (-rdc) */
  char tool_info[160]; /* first line of .note.nv.tkinfo tool strings, "" if absent */
  int n_kernels;       /* number of kernels: STT_FUNC symbols in a .text.<name> section with
                          st_other & 0x10 (STO_CUDA_ENTRY; -rdc device functions lack it) */
} em_cubin_info;

/* Parses a cubin held in memory. `kernels`, when not NULL, receives the kernel
 * names separated by commas (truncated to kernels_cap - 1 bytes, always
 * NUL-terminated). Returns EM_ERR_CORRUPT with the offset in the message for
 * malformed input, EM_ERR_UNSUPPORTED for an ELF that is not a CUDA cubin. */
em_status em_cubin_read(const void *data, size_t size, em_cubin_info *out,
                        char *kernels, size_t kernels_cap);

/* What the 64-byte ELF header alone says (SM, ABI, OS ABI, relocatable; V1:
 * the 'a' mark and toolkit), for a tool that has only a cubin's first bytes
 * (gpucheck, of a compressed image). The same errors for a bad header. */
em_status em_cubin_read_header(const void *data, size_t size, em_cubin_info *out);

#endif
