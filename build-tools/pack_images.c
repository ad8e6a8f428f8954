/* pack_images: writes the embedded image table (runtime/image_blob.h) from
 * the cubins, PTX and sources the build produced.
 *
 *   pack_images OUT.bin [--zstd-level N] ITEM...
 *   --zstd-level: 0 stores the images as they are; 1-19 compresses each into
 *                 its own zstd frame (default 3, the Makefile's EMBER_IMAGE_ZSTD)
 *   ITEM: --cubin MODULE VARIANT(-|a|f) PRODUCER FILE
 *         --ptx MODULE TOOLKIT PRODUCER FILE        (TOOLKIT as 13000)
 *         --ptx-legacy MODULE PRODUCER FILE
 *         --source MODULE FILE
 *         --header NAME FILE
 *
 * What can be read from the bytes is read from the bytes (SM, ABI toolkit,
 * PTX ISA and target, kernel names) rather than taken from the command line,
 * so the table cannot disagree with the images it describes.
 *
 * Each image is compressed on its own, so the runtime decompresses only the
 * one a module load needs. Level 3 is the knee on the full build's 502
 * images (154 MB): level 1 gives 24.2 MB in 1.0 s, 3 gives 23.2 MB in 2.0 s,
 * 9 gives 20.2 MB in 11 s, 12 gives 19.9 MB in 25 s. A dictionary trained on
 * the images (39 s more) or each module's images compressed against its
 * first one save 2-10% more: not worth a second lookup per image. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include "cubin.h"
#include "error.h"
#include "image_blob.h"
#include "policy.h"
#include "ptx_header.h"

#define KERNELS_CAP 4096

typedef struct item {
  em_image_info info;
  char module[128], producer[128], kernels[KERNELS_CAP];
  void *bytes;
  size_t size;
  void *stored; /* the payload: the compressed bytes, or NULL when stored as is */
  size_t stored_size;
} item;

static int zstd_level = 3;
static item *items; /* grown as images come: about 40 per kernel module */
static size_t n_items, cap_items;

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "pack_images: cannot open %s: %s\n", path, strerror(errno));
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "pack_images: cannot read %s\n", path);
    fclose(f);
    free(buf);
    return NULL;
  }
  fclose(f);
  ((char *)buf)[n] = '\0';
  *size = (size_t)n;
  return buf;
}

static item *new_item(const char *module, const char *producer, const char *path) {
  if (n_items == cap_items) {
    size_t cap = cap_items ? 2 * cap_items : 256;
    item *grown = realloc(items, cap * sizeof *grown);
    if (!grown) {
      fprintf(stderr, "pack_images: no memory for %zu images\n", cap);
      return NULL;
    }
    items = grown;
    cap_items = cap;
  }
  item *it = &items[n_items];
  memset(it, 0, sizeof *it);
  snprintf(it->module, sizeof it->module, "%s", module);
  snprintf(it->producer, sizeof it->producer, "%s", producer);
  it->bytes = read_file(path, &it->size);
  if (!it->bytes) return NULL;
  n_items++;
  return it;
}

static int add_cubin(const char *module, const char *variant, const char *producer, const char *path) {
  item *it = new_item(module, producer, path);
  if (!it) return 1;
  em_cubin_info ci;
  if (em_cubin_read(it->bytes, it->size, &ci, it->kernels, sizeof it->kernels)) {
    fprintf(stderr, "pack_images: %s: %s\n", path, em_last_error());
    return 1;
  }
  it->info.kind = EM_IMAGE_CUBIN;
  it->info.arch = ci.sm;
  it->info.variant = variant[0] == '-' ? ci.variant : variant[0];
  if (ci.variant == 'a' && it->info.variant != 'a') {
    fprintf(stderr, "pack_images: %s is an 'a' cubin but was declared '%s'\n", path, variant);
    return 1;
  }
  it->info.toolkit = ci.toolkit;
  return 0;
}

static int add_ptx(const char *module, int toolkit, unsigned flags, const char *producer, const char *path) {
  item *it = new_item(module, producer, path);
  if (!it) return 1;
  em_ptx_info pi;
  if (em_ptx_read_header(it->bytes, it->size, &pi, it->kernels, sizeof it->kernels)) {
    fprintf(stderr, "pack_images: %s: %s\n", path, em_last_error());
    return 1;
  }
  it->info.kind = EM_IMAGE_PTX;
  it->info.arch = pi.target_sm;
  it->info.variant = pi.target_variant;
  it->info.ptx_isa = pi.isa;
  it->info.toolkit = toolkit;
  it->info.flags = flags;
  /* The driver's JIT wants a NUL-terminated string: keep the terminator. */
  it->size += 1;
  return 0;
}

static int add_text(em_image_kind kind, const char *module, const char *path) {
  item *it = new_item(module, "source", path);
  if (!it) return 1;
  it->info.kind = kind;
  it->size += 1; /* NVRTC takes C strings */
  return 0;
}

/* Sources list the kernels their compiled forms define. */
static void fill_source_kernels(void) {
  for (size_t i = 0; i < n_items; i++) {
    if (items[i].info.kind != EM_IMAGE_SOURCE) continue;
    for (size_t j = 0; j < n_items; j++)
      if (items[j].info.kind == EM_IMAGE_PTX && !strcmp(items[j].module, items[i].module))
        memcpy(items[i].kernels, items[j].kernels, sizeof items[i].kernels); /* i != j: a source is no PTX */
  }
}

/* Appends a string to the table, returning its offset. */
static uint32_t put_string(char *tab, size_t *len, size_t cap, const char *s) {
  size_t n = strlen(s) + 1;
  if (*len + n > cap) return 0;
  memcpy(tab + *len, s, n);
  uint32_t off = (uint32_t)*len;
  *len += n;
  return off;
}

/* Each image into its own zstd frame (with its size in the frame header,
 * which the parser checks against the entry). */
static int compress_items(void) {
  if (zstd_level == 0) return 0;
  ZSTD_CCtx *cc = ZSTD_createCCtx();
  if (!cc) return 1;
  int bad = 0;
  for (size_t i = 0; i < n_items && !bad; i++) {
    item *it = &items[i];
    size_t cap = ZSTD_compressBound(it->size);
    it->stored = malloc(cap ? cap : 1);
    if (!it->stored) {
      fprintf(stderr, "pack_images: no memory to compress %s (%zu bytes)\n", it->module, it->size);
      bad = 1;
      break;
    }
    size_t n = ZSTD_compressCCtx(cc, it->stored, cap, it->bytes, it->size, zstd_level);
    if (ZSTD_isError(n)) {
      fprintf(stderr, "pack_images: compressing %s: %s\n", it->module, ZSTD_getErrorName(n));
      bad = 1;
    }
    it->stored_size = n;
  }
  ZSTD_freeCCtx(cc);
  return bad;
}

static const void *payload(const item *it) { return it->stored ? it->stored : it->bytes; }
static size_t payload_size(const item *it) { return it->stored ? it->stored_size : it->size; }

static int write_blob(const char *out_path) {
  size_t strcap = n_items * (KERNELS_CAP + 256) + 1;
  char *strtab = calloc(1, strcap);
  em_blob_entry *entries = calloc(n_items ? n_items : 1, sizeof *entries);
  if (!strtab || !entries) return 1;
  size_t strlen_ = 0;
  put_string(strtab, &strlen_, strcap, ""); /* offset 0 is the empty string */

  size_t header = sizeof(em_blob_header), table = n_items * sizeof(em_blob_entry);
  for (size_t i = 0; i < n_items; i++) {
    item *it = &items[i];
    em_blob_entry *e = &entries[i];
    e->kind = it->info.kind;
    e->arch = (uint32_t)it->info.arch;
    e->variant = (uint32_t)(unsigned char)it->info.variant;
    e->ptx_isa = (uint32_t)it->info.ptx_isa;
    e->toolkit = (uint32_t)it->info.toolkit;
    e->min_driver = (uint32_t)em_image_min_driver(&it->info);
    e->flags = it->info.flags;
    e->module_name = put_string(strtab, &strlen_, strcap, it->module);
    e->producer = put_string(strtab, &strlen_, strcap, it->producer);
    e->kernels = put_string(strtab, &strlen_, strcap, it->kernels);
    e->storage = it->stored ? EM_IMAGE_ZSTD : EM_IMAGE_STORED;
    e->size = it->size;
    e->hash = XXH3_64bits(it->bytes, it->size);
    e->data_size = payload_size(it);
    e->data_hash = XXH3_64bits(payload(it), payload_size(it));
  }
  uint64_t off = header + table + strlen_;
  for (size_t i = 0; i < n_items; i++) {
    off = (off + 15) & ~(uint64_t)15;
    entries[i].data_offset = off;
    off += entries[i].data_size;
  }
  em_blob_header h = {.version = EM_BLOB_VERSION, .count = (uint32_t)n_items,
                      .header_size = sizeof h, .entry_size = sizeof(em_blob_entry),
                      .total_size = off, .strtab_offset = (uint32_t)(header + table),
                      .strtab_size = (uint32_t)strlen_};
  memcpy(h.magic, EM_BLOB_MAGIC, 8);

  FILE *f = fopen(out_path, "wb");
  if (!f) {
    fprintf(stderr, "pack_images: cannot write %s: %s\n", out_path, strerror(errno));
    return 1;
  }
  fwrite(&h, sizeof h, 1, f);
  fwrite(entries, sizeof *entries, n_items, f);
  fwrite(strtab, 1, strlen_, f);
  static const char zeros[16];
  uint64_t pos = header + table + strlen_;
  for (size_t i = 0; i < n_items; i++) {
    fwrite(zeros, 1, (size_t)(entries[i].data_offset - pos), f);
    fwrite(payload(&items[i]), 1, payload_size(&items[i]), f);
    pos = entries[i].data_offset + entries[i].data_size;
  }
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  free(strtab);
  free(entries);
  if (bad) fprintf(stderr, "pack_images: error writing %s\n", out_path);
  return bad;
}

static int usage(void) {
  fprintf(stderr, "usage: pack_images OUT.bin [--zstd-level N] [--cubin MODULE VARIANT PRODUCER FILE | --ptx MODULE TOOLKIT "
                  "PRODUCER FILE | --ptx-legacy MODULE PRODUCER FILE | --source MODULE FILE | --header NAME FILE]...\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  int first = 2;
  if (argc >= 4 && !strcmp(argv[2], "--zstd-level")) {
    char *end;
    long level = strtol(argv[3], &end, 10);
    if (*end || level < 0 || level > ZSTD_maxCLevel()) {
      fprintf(stderr, "pack_images: --zstd-level %s: want 0 (store as is) to %d\n", argv[3], ZSTD_maxCLevel());
      return 2;
    }
    zstd_level = (int)level;
    first = 4;
  }
  for (int i = first; i < argc;) {
    const char *opt = argv[i];
    int left = argc - i - 1, bad;
    if (!strcmp(opt, "--cubin") && left >= 4) {
      bad = add_cubin(argv[i + 1], argv[i + 2], argv[i + 3], argv[i + 4]);
      i += 5;
    } else if (!strcmp(opt, "--ptx") && left >= 4) {
      bad = add_ptx(argv[i + 1], atoi(argv[i + 2]), 0, argv[i + 3], argv[i + 4]);
      i += 5;
    } else if (!strcmp(opt, "--ptx-legacy") && left >= 3) {
      bad = add_ptx(argv[i + 1], 0, EM_IMAGE_LEGACY, argv[i + 2], argv[i + 3]);
      i += 4;
    } else if (!strcmp(opt, "--source") && left >= 2) {
      bad = add_text(EM_IMAGE_SOURCE, argv[i + 1], argv[i + 2]);
      i += 3;
    } else if (!strcmp(opt, "--header") && left >= 2) {
      bad = add_text(EM_IMAGE_HEADER, argv[i + 1], argv[i + 2]);
      i += 3;
    } else {
      return usage();
    }
    if (bad) return 1;
  }
  fill_source_kernels();
  if (compress_items()) return 1;
  return write_blob(argv[1]);
}
