/* The GPU code inside a file, as gpucheck sees it: every cubin and PTX image
 * of every fatbin in an ELF executable or library (section .nv_fatbin), of a
 * .fatbin, a .cubin, a .ptx, or Ember's own image table; and whether that
 * code can run on a given GPU and driver. */
#ifndef GPUCHECK_IMAGES_H
#define GPUCHECK_IMAGES_H

#include <stddef.h>
#include <stdint.h>

typedef enum gc_image_kind { GC_IMG_CUBIN = 1, GC_IMG_PTX = 2, GC_IMG_LTOIR = 3, GC_IMG_OTHER = 4 } gc_image_kind;

#define GC_COMP_EMBER_ZSTD 3

typedef struct gc_image {
  gc_image_kind kind;
  int arch;              /* 75, 90, 120 */
  char variant;          /* 0, 'a', 'f' */
  int ptx_isa;           /* PTX: 10*major+minor; 0 for cubins */
  int toolkit;           /* CUDA version that made it when known (cubin notes / e_version), else 0 */
  int compression;       /* 0 none, 1 LZ4, 2 zstd (a fatbin entry: the driver decompresses it),
                            GC_COMP_EMBER_ZSTD (an Ember image: Ember decompresses it) */
  uint64_t size;         /* stored bytes */
  uint64_t uncompressed; /* bytes once decompressed (= size when not compressed) */
  int abi_version;       /* cubin ELF ABI (7 = V1, 8 = V2); 0 if not a cubin or unread */
  char kernels[256];     /* kernel names, comma-separated, truncated; "" when unread */
  int n_kernels;
  size_t container;      /* fatbin container index within the file */
  size_t offset;         /* offset of the entry in the file */
} gc_image;

typedef struct gc_image_set {
  char path[1024];
  char format[32];       /* "elf", "fatbin", "cubin", "ptx", "ember" */
  gc_image *images;
  size_t n, cap;
  size_t containers;     /* fatbin containers found */
  char note[256];        /* e.g. "ELF has no .nv_fatbin section: no GPU code" */
} gc_image_set;

/* Reads every image of a file. Returns 0, or -1 with a message naming the
 * file and offset in err (unreadable, malformed). Decompresses entries only
 * when the GPU code is small (GC_READ_AUTO). */
int gc_images_read(const char *path, gc_image_set *out, char *err, size_t err_cap);

/* How much of each entry to read: */
#define GC_READ_AUTO 0    /* decompress everything when the GPU code is small, else headers */
#define GC_READ_ALL 1     /* decompress every entry: kernels, ABI and toolkit of all */
#define GC_READ_HEADERS 2 /* never decompress: uncompressed entries are still read in place */

int gc_images_read_ex(const char *path, int mode, gc_image_set *out, char *err, size_t err_cap);
/* The same over bytes in memory; `origin` names them in messages. */
int gc_images_read_mem(const void *data, size_t size, const char *origin, int mode, gc_image_set *out, char *err,
                       size_t err_cap);
void gc_images_free(gc_image_set *s);

/* Can this code run on a GPU of compute capability cc with a driver of CUDA
 * version driver (cuDriverGetVersion encoding)? Follows the driver's rules:
 * a compatible cubin runs natively; else PTX with compute_XY <= cc is JIT-
 * compiled if the driver knows its ISA; else nothing runs. */
typedef enum gc_run {
  GC_RUN_NATIVE = 0,      /* a cubin for this GPU */
  GC_RUN_PTX_JIT = 1,     /* only PTX fits: JIT-compiled at first load (slow start, cached) */
  GC_RUN_PTX_TOO_NEW = 2, /* PTX fits the GPU but its ISA is newer than the driver: 222 */
  GC_RUN_NO_IMAGE = 3,    /* no cubin and no PTX for this GPU: 209 */
  GC_RUN_CUBIN_TOO_NEW = 4 /* a cubin fits but was made by a toolkit newer than the driver (200) */
} gc_run;

typedef struct gc_run_verdict {
  gc_run run;
  int image;              /* index of the deciding image, -1 if none */
  char why[400];          /* one line naming the images and rules involved */
} gc_run_verdict;

void gc_images_verdict(const gc_image_set *s, int cc, int driver, gc_run_verdict *out);
const char *gc_run_name(gc_run r); /* "runs natively", "runs through PTX JIT", ... */
/* The sources.tsv keys of the public pages behind a verdict's rule (for
 * gc_check_source): the binary-compatibility rules, the PTX ISA -> driver
 * table, minor-version compatibility. NULL for a native run. */
const char *gc_run_sources(gc_run r);

/* Whether the driver itself must decompress the image (a compressed fatbin
 * entry), which the driver rules and unread toolkits depend on. */
static inline int gc_driver_decompresses(const gc_image *m) { return m->compression == 1 || m->compression == 2; }

/* images_json.c: the shapes of SCHEMA.md, shared by inspect, whatif, fleet. */
#include <jansson.h>
const char *gc_run_key(gc_run r);               /* "native", "ptx-jit", "ptx-too-new", ... */
const char *gc_image_kind_name(gc_image_kind k); /* "cubin", "ptx", "ltoir", "other" */
json_t *gc_image_json(const gc_image *m);        /* new reference */

#endif
