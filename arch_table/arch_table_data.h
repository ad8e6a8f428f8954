/* Internal: the row arrays that arch_table/gen.sh generates from
 * the TSV files in arch_table/data (build/gen/arch_table_data.c), and the two row types
 * that only the lookups in arch_table.c need. Not part of the API. */
#ifndef EMBER_ARCH_TABLE_DATA_H
#define EMBER_ARCH_TABLE_DATA_H

#include <stddef.h>
#include "arch_table.h"

/* ptx_isa.tsv: lowest driver CUDA version that JIT-compiles a PTX ISA. */
typedef struct em_at_ptx_isa_row {
  int ptx_isa;  /* 32 for ISA 3.2 */
  int min_cuda; /* 5050 */
  char conf;
  const char *source;
} em_at_ptx_isa_row;

/* mvc.tsv: minor-version-compatibility driver floor of a CUDA major, per OS. */
typedef struct em_at_mvc_row {
  int cuda_major;         /* 12 */
  const char *os;         /* "linux" or "windows" */
  const char *min_driver; /* "525.60.13" */
  char conf;
  const char *source;
} em_at_mvc_row;

/* Every array has at least one row (gen.sh refuses an empty table). */
extern const em_source_row em_at_source_rows[];
extern const size_t em_at_source_count;
extern const em_arch_row em_at_arch_rows[];
extern const size_t em_at_arch_count;
extern const em_toolkit_row em_at_toolkit_rows[];
extern const size_t em_at_toolkit_count;
extern const em_at_ptx_isa_row em_at_ptx_isa_rows[];
extern const size_t em_at_ptx_isa_count;
extern const em_at_mvc_row em_at_mvc_rows[];
extern const size_t em_at_mvc_count;
extern const em_driver_branch_row em_at_driver_branch_rows[];
extern const size_t em_at_driver_branch_count;
extern const em_nvrtc_row em_at_nvrtc_rows[];
extern const size_t em_at_nvrtc_count;
extern const em_libreq_row em_at_libreq_rows[];
extern const size_t em_at_libreq_count;
extern const em_arch_support_row em_at_arch_support_rows[];
extern const size_t em_at_arch_support_count;
extern const em_torch_row em_at_torch_rows[];
extern const size_t em_at_torch_count;
extern const em_cuda_error_row em_at_cuda_error_rows[];
extern const size_t em_at_cuda_error_count;

#endif
