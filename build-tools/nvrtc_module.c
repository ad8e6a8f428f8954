/* One kernel module through NVRTC to a checked cubin (nvrtc_module.h). */
#include "nvrtc_module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubin.h"
#include "error.h"

#define KLIST_CAP 8192

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "b,a,c" -> "a,b,c": kernel lists compare as sets. */
static void sorted_list(const char *in, char *out, size_t cap) {
  char buf[KLIST_CAP], *parts[512];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", in);
  for (char *save = NULL, *p = strtok_r(buf, ",", &save); p && n < 512; p = strtok_r(NULL, ",", &save)) parts[n++] = p;
  qsort(parts, (size_t)n, sizeof parts[0], name_cmp);
  out[0] = '\0';
  size_t len = 0;
  for (int i = 0; i < n && len < cap; i++) len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", parts[i]);
}

int nm_check_cubin(const void *data, size_t size, int sm, char variant, int cuda, const char *want_kernels,
                   char *why, size_t cap) {
  em_cubin_info ci;
  char got[KLIST_CAP], a[KLIST_CAP], b[KLIST_CAP];
  if (em_cubin_read(data, size, &ci, got, sizeof got)) {
    snprintf(why, cap, "the cubin reader rejects the output: %s", em_last_error());
    return 1;
  }
  if (ci.sm != sm) {
    snprintf(why, cap, "cubin is for sm_%d, not sm_%d", ci.sm, sm);
    return 1;
  }
  /* 'f' is not visible in a cubin (cubin.h); 'a' is. */
  if ((variant == 'a') != (ci.variant == 'a')) {
    snprintf(why, cap, "cubin variant '%c' for target sm_%d%c", ci.variant ? ci.variant : '-', sm,
             variant ? variant : ' ');
    return 1;
  }
  if (ci.toolkit && ci.toolkit != cuda) {
    snprintf(why, cap, "cubin says CUDA %d.%d, the tool is %d.%d", ci.toolkit / 1000, ci.toolkit % 1000 / 10,
             cuda / 1000, cuda % 1000 / 10);
    return 1;
  }
  if (!want_kernels) {
    if (ci.n_kernels > 0) return 0;
    snprintf(why, cap, "cubin defines no kernel");
    return 1;
  }
  sorted_list(got, a, sizeof a);
  sorted_list(want_kernels, b, sizeof b);
  if (strcmp(a, b)) {
    snprintf(why, cap, "cubin kernels {%.180s}, expected {%.180s}", a, b);
    return 1;
  }
  return 0;
}

em_status nm_compile_module(const em_nvrtc_lib *lib, const char *module, const char *source, int n_headers,
                            const char *const *headers, const char *const *header_names, int sm,
                            const char *want_kernels, void **out, size_t *out_size) {
  char name[96], why[480];
  snprintf(name, sizeof name, "%s.cu", module);
  *out = NULL;
  *out_size = 0;
  if (!lib->has_cubin)
    return em_fail(EM_ERR_UNSUPPORTED, "%s: NVRTC %d.%d (%s) has no nvrtcGetCUBIN", module, lib->version / 1000,
                   lib->version % 1000 / 10, lib->path);
  void *bin = NULL;
  size_t size = 0;
  /* want_cubin = 1, as the runtime's step 4 (runtime/load.c, via_nvrtc). */
  if (em_nvrtc_compile(lib, name, source, n_headers, headers, header_names, sm, 1, &bin, &size))
    return em_fail_context(EM_ERR_NVRTC, "%s", module);
  if (nm_check_cubin(bin, size, sm, 0, lib->version, want_kernels, why, sizeof why)) {
    free(bin);
    return em_fail(EM_ERR_NVRTC, "%s: NVRTC %d.%d (%s), sm_%d: %s", module, lib->version / 1000,
                   lib->version % 1000 / 10, lib->path, sm, why);
  }
  *out = bin;
  *out_size = size;
  return EM_OK;
}

char *nm_read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      char *b = realloc(buf, cap);
      if (!b) {
        free(buf);
        fclose(f);
        errno = ENOMEM;
        return NULL;
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, 4096, f);
    n += got;
    if (got < 4096) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    errno = EIO;
    return NULL;
  }
  buf[n] = '\0';
  if (size) *size = n;
  return buf;
}
