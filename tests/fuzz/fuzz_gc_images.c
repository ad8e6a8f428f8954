// fuzz-sources: runtime/fatbin.c runtime/cubin.c runtime/ptx_header.c runtime/image_blob.c runtime/error.c arch_table/arch_table.c build/gen/arch_table_data.c
/* libFuzzer target for gpucheck's image layer (tools/gpucheck/images.c):
 * the bytes go through the file-type detection (ELF with .ember_images or
 * .nv_fatbin, an ELF cubin, a raw fatbin, PTX text) and every parser behind
 * it, with every entry decompressed, then through the verdict for a few
 * GPUs and drivers. images.c is compiled into this file so that the
 * decompression limit can be lowered: a header claiming 256 MiB must cost
 * nothing here. The seed corpus (tests/fuzz/corpus/gc_images/README.md)
 * holds one file of each type. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GC_ENTRY_MAX ((size_t)1 << 20)
#include "../../tools/gpucheck/images.c"

static const int ccs[] = {35, 75, 86, 90, 100, 103, 120};
static const int drivers[] = {0, 11040, 12020, 12080, 13000};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gc_image_set s;
  char err[512];
  if (gc_images_read_mem(data, size, "fuzz", GC_READ_ALL, &s, err, sizeof err) != 0) {
    /* A failure names the input and hands back nothing. */
    if (strncmp(err, "fuzz: ", 6) != 0 || s.images || s.n) abort();
    return 0;
  }
  for (size_t i = 0; i < s.n; i++) {
    const gc_image *m = &s.images[i];
    if (memchr(m->kernels, '\0', sizeof m->kernels) == NULL) abort();
    if (m->offset > size) abort();
    if (s.containers && m->container >= s.containers) abort();
  }
  for (size_t c = 0; c < sizeof ccs / sizeof ccs[0]; c++)
    for (size_t d = 0; d < sizeof drivers / sizeof drivers[0]; d++) {
      gc_run_verdict v;
      gc_images_verdict(&s, ccs[c], drivers[d], &v);
      if (v.image < -1 || (v.image >= 0 && (size_t)v.image >= s.n)) abort();
      if (memchr(v.why, '\0', sizeof v.why) == NULL || !v.why[0]) abort();
      if (strcmp(gc_run_name(v.run), "?") == 0) abort();
    }
  gc_images_free(&s);
  return 0;
}
