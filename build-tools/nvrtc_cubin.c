/* nvrtc_cubin: compiles one kernel module to a cubin for one SM with one
 * NVRTC library, at build time, exactly as the runtime's step 4 would on a
 * user's machine (nvrtc_module.h: em_nvrtc_compile, the module named
 * "<module>.cu", every kernel header by its include name). The Makefile runs
 * it with the PyPI NVRTC 11.8 and 12.9 of .tools/ so that GPUs on CUDA 11.x
 * and 12.x drivers get cubins of their own SM (a CUDA 13 cubin needs R580).
 *
 *   nvrtc_cubin --nvrtc LIB --sm SM --out OUT.cubin [--header NAME FILE]... MODULE.cu
 *
 * The module's name is the file name without ".cu". The cubin is checked with
 * the cubin reader (that SM, the NVRTC's CUDA version, at least one kernel)
 * and written to a temporary file renamed over OUT, so a failed or interrupted
 * compile never leaves a cubin that make would take as up to date. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "nvrtc.h"
#include "nvrtc_module.h"

#define MAX_HEADERS 16

/* The file's text, or NULL after saying why. */
static char *read_text(const char *path) {
  char *text = nm_read_file(path, NULL);
  if (!text) fprintf(stderr, "nvrtc_cubin: cannot read %s: %s\n", path, strerror(errno));
  return text;
}

static int write_atomic(const char *path, const void *data, size_t size) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    fprintf(stderr, "nvrtc_cubin: cannot write %s: %s\n", tmp, strerror(errno));
    return 1;
  }
  int bad = fwrite(data, 1, size, f) != size;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    fprintf(stderr, "nvrtc_cubin: cannot write %s: %s\n", path, strerror(errno));
    unlink(tmp);
    return 1;
  }
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: nvrtc_cubin --nvrtc LIB --sm SM --out OUT.cubin [--header NAME FILE]... MODULE.cu\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *lib_path = NULL, *out_path = NULL, *src_path = NULL;
  const char *hdr_name[MAX_HEADERS], *hdr_path[MAX_HEADERS];
  int n_hdr = 0, sm = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int left = argc - i - 1;
    if (!strcmp(a, "--nvrtc") && left >= 1) lib_path = argv[++i];
    else if (!strcmp(a, "--sm") && left >= 1) sm = atoi(argv[++i]);
    else if (!strcmp(a, "--out") && left >= 1) out_path = argv[++i];
    else if (!strcmp(a, "--header") && left >= 2) {
      if (n_hdr == MAX_HEADERS) {
        fprintf(stderr, "nvrtc_cubin: more than %d headers\n", MAX_HEADERS);
        return 2;
      }
      hdr_name[n_hdr] = argv[++i];
      hdr_path[n_hdr++] = argv[++i];
    } else if (a[0] != '-' && !src_path) src_path = a;
    else return usage();
  }
  if (!lib_path || !out_path || !src_path || sm <= 0) return usage();

  /* The module: the file name without its folder and ".cu". */
  const char *base = strrchr(src_path, '/') ? strrchr(src_path, '/') + 1 : src_path;
  size_t len = strlen(base);
  if (len < 4 || strcmp(base + len - 3, ".cu")) {
    fprintf(stderr, "nvrtc_cubin: %s: a kernel module is a .cu file\n", src_path);
    return 2;
  }
  char module[256];
  snprintf(module, sizeof module, "%.*s", (int)(len - 3), base);

  em_nvrtc_lib lib;
  if (em_nvrtc_open_file(lib_path, &lib)) {
    fprintf(stderr, "nvrtc_cubin: %s\n", em_last_error());
    return 1;
  }
  char *source = read_text(src_path), *headers[MAX_HEADERS] = {0};
  int bad = !source;
  for (int i = 0; i < n_hdr && !bad; i++) bad = !(headers[i] = read_text(hdr_path[i]));
  void *cubin = NULL;
  size_t size = 0;
  if (!bad && nm_compile_module(&lib, module, source, n_hdr, (const char *const *)headers, hdr_name, sm, NULL,
                                &cubin, &size)) {
    fprintf(stderr, "nvrtc_cubin: %s\n", em_last_error());
    bad = 1;
  }
  if (!bad) bad = write_atomic(out_path, cubin, size);
  free(cubin);
  free(source);
  for (int i = 0; i < n_hdr; i++) free(headers[i]);
  return bad ? 1 : 0;
}
