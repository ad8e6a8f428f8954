/* One kernel module through NVRTC to a checked cubin: what the build's NVRTC
 * cubins (build-tools/nvrtc_cubin.c) and the compiler sweep of `make
 * test-toolchains` (tests/toolchains/sweep.c) both do, so that both compile
 * exactly as the runtime's step 4 does (runtime/load.c: em_nvrtc_compile with
 * every embedded header, the module named "<module>.cu") and check the result
 * the same way. Host code; links runtime/nvrtc.c, cubin.c and error.c. */
#ifndef EMBER_BUILD_TOOLS_NVRTC_MODULE_H
#define EMBER_BUILD_TOOLS_NVRTC_MODULE_H

#include <stddef.h>

#include "ember/status.h"
#include "nvrtc.h"

/* Checks a cubin with the cubin reader (runtime/cubin.c): it is for `sm`
 * (variant 'a' exactly when asked for; 'f' is not visible in a cubin), the
 * CUDA version it records is `cuda` (when it records one), and its kernels are
 * exactly the comma-separated `want_kernels` in any order (NULL: at least one
 * kernel). 0 when right; else 1 with the reason in why[]. */
int nm_check_cubin(const void *data, size_t size, int sm, char variant, int cuda, const char *want_kernels,
                   char *why, size_t cap);

/* Compiles module `module` (its source text and the kernel headers, by their
 * include names) with `lib` to a cubin for sm_<sm> and checks it as above
 * against the library's own version. *out is malloc'd. On failure the message
 * (em_last_error) names the module, the NVRTC and why, with NVRTC's log. */
em_status nm_compile_module(const em_nvrtc_lib *lib, const char *module, const char *source, int n_headers,
                            const char *const *headers, const char *const *header_names, int sm,
                            const char *want_kernels, void **out, size_t *out_size);

/* The whole file, NUL-terminated (so text can be used as a string), malloc'd;
 * *size (when not NULL) gets its length. NULL with errno set when it cannot
 * be opened or read, or memory runs out. */
char *nm_read_file(const char *path, size_t *size);

#endif
