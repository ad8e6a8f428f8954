/* Names and one-line fixes of CUresult codes for Ember's error messages. The
 * toolkit's stub driver returns NULL names, so Ember carries its own: the
 * arch_table error table (arch_table/data/cuda_errors.tsv, every CUresult of
 * the CUDA 13.0 cuda.h), whose check column is also what `gpucheck explain`
 * prints, so the runtime and gpucheck give the same advice. */
#include <stdarg.h>
#include <stdio.h>

#include "arch_table.h"
#include "runtime.h"

const char *em_cuda_error_name(CUresult r) {
  const em_cuda_error_row *row = em_cuda_error_lookup("driver", (int)r);
  return row ? row->name : "CUDA_ERROR_(unlisted)";
}

const char *em_cuda_error_fix(CUresult r) {
  const em_cuda_error_row *row = em_cuda_error_lookup("driver", (int)r);
  if (row && row->check[0]) return row->check;
  /* Thread-local: the text names the code, and callers on other threads may
   * ask about other codes at the same time. */
  static _Thread_local char fallback[64];
  snprintf(fallback, sizeof fallback, "see `gpucheck explain %d` for this code", (int)r);
  return fallback;
}

em_status em_cuda_fail(CUresult r, const char *call, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  em_status s = EM_ERR_CUDA;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) s = EM_ERR_OUT_OF_MEMORY;
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) s = EM_ERR_NO_KERNEL_IMAGE;
  return em_fail(s, "%s: %s failed: %s (%d). Fix: %s", what, call, em_cuda_error_name(r), r, em_cuda_error_fix(r));
}
