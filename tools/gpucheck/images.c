/* The GPU code inside a file and whether it runs on a GPU and driver
 * (images.h), shared by `gpucheck inspect`, `whatif --binary` and `fleet
 * --binary`.
 *
 * Reading. The file type is decided by its bytes, never by its name: an ELF
 * (an Ember library or program: section .ember_images; else every fatbin
 * container in section .nv_fatbin; an ELF with e_machine EM_CUDA is itself a
 * cubin), a raw fatbin (magic 0xBA55ED50), or PTX text (.version and
 * .target). The file is mapped read-only and libelf hands back the section
 * bytes in place (elf_memory + elf_getdata on a byte section converts
 * nothing), so a 500 MB library costs page faults on its fatbin section, not
 * a copy of the file. The byte-level readers are Ember's own (runtime/
 * fatbin.h, cubin.h, ptx_header.h, image_blob.h); this file only decides.
 *
 * Details and speed. What the fatbin entry headers say (kind, arch, a/f,
 * PTX ISA, compression, sizes) is always read. Kernel names, cubin ABI and
 * the toolkit that made a cubin need the entry's bytes: uncompressed entries
 * are read in place for free, compressed ones must be decompressed.
 * libcublasLt.so.13 holds ~2,800 zstd containers; decompressing all of them
 * is what `inspect --kernels` asks for, not what a plain `inspect` should
 * cost. Hence gc_images_read_ex's mode: GC_READ_ALL decompresses every entry
 * (at most GC_ENTRY_MAX bytes each), GC_READ_HEADERS never decompresses, and
 * GC_READ_AUTO (what gc_images_read does) decompresses when the file's GPU
 * code is small (GC_AUTO_MAX_STORED bytes stored, GC_AUTO_MAX_ENTRIES
 * entries), which covers every program built by a user, and says in
 * set->note when it did not. A cubin whose toolkit was not read has
 * toolkit 0, and the verdict says so instead of guessing.
 *
 * Verdict. The driver's rules of cuda-compat.md 3.2 and 0.1, per fatbin
 * container (each container is loaded as one module), then summed up over
 * the file; see gc_images_verdict below. */
#include "images.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch_table.h"
#include "cubin.h"
#include "error.h"
#include "fatbin.h"
#include "image_blob.h"
#include "ptx_header.h"

#ifndef GC_ENTRY_MAX /* the fuzz target lowers it */
#define GC_ENTRY_MAX ((size_t)256 << 20)        /* largest decompressed entry we accept */
#endif
#define GC_AUTO_MAX_STORED ((uint64_t)32 << 20) /* AUTO decompresses up to this much stored GPU code */
#define GC_AUTO_MAX_ENTRIES 2048
#define EM_CUDA_MACHINE 190                     /* e_machine of a cubin (cuda-compat.md 5.1) */
#define FATBIN_SECTION ".nv_fatbin"             /* cuda-compat.md 4.1 */
#define PTX_SNIFF 65536                         /* PTX directives sit at the top of the text */

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static int elf_ready;
static void init_libelf(void) { elf_ready = elf_version(EV_CURRENT) != EV_NONE; }

/* ------------------------------------------------------------ helpers --- */

static int failf(char *err, size_t cap, const char *origin, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int failf(char *err, size_t cap, const char *origin, const char *fmt, ...) {
  if (err && cap) {
    int n = snprintf(err, cap, "%s: ", origin);
    if (n < 0) n = 0;
    if ((size_t)n < cap) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + n, cap - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return -1;
}

static gc_image *push_image(gc_image_set *s) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    gc_image *t = realloc(s->images, cap * sizeof *t);
    if (!t) return NULL;
    s->images = t;
    s->cap = cap;
  }
  gc_image *img = &s->images[s->n++];
  memset(img, 0, sizeof *img);
  return img;
}

/* Keeps the first problem worth telling (notes are one line). */
static void note(gc_image_set *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(gc_image_set *s, const char *fmt, ...) {
  if (s->note[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->note, sizeof s->note, fmt, ap);
  va_end(ap);
}

static int count_names(const char *list) {
  if (!list || !*list) return 0;
  int n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  return n;
}

/* ------------------------------------------------------ entry details --- */

/* Kernel names, ABI and toolkit from an entry's plain bytes. An entry that
 * does not parse is kept with those fields unread and the first such problem
 * goes to the note: the headers already said what it is, and one odd cubin
 * must not hide the rest of a library. */
static void decode_bytes(gc_image_set *s, gc_image *img, const void *bytes, size_t n) {
  if (img->kind == GC_IMG_CUBIN) {
    em_cubin_info ci;
    if (em_cubin_read(bytes, n, &ci, img->kernels, sizeof img->kernels) == EM_OK) {
      img->abi_version = ci.abi_version;
      img->toolkit = ci.toolkit;
      img->n_kernels = ci.n_kernels;
      /* The fatbin flags carry a and f; a V1 cubin can also say 'a' itself. */
      if (!img->variant && ci.variant) img->variant = ci.variant;
    } else {
      note(s, "cubin at offset %zu unreadable: %s", img->offset, em_last_error());
    }
  } else if (img->kind == GC_IMG_PTX) {
    em_ptx_info pi;
    if (em_ptx_read_header(bytes, n, &pi, img->kernels, sizeof img->kernels) == EM_OK)
      img->n_kernels = pi.n_entries;
    else
      note(s, "PTX at offset %zu unreadable: %s", img->offset, em_last_error());
  }
}

/* Returns 0, or -1 (err set) when a compressed entry does not decompress:
 * the file is damaged. An entry over GC_ENTRY_MAX is only noted. */
static int entry_details(gc_image_set *s, gc_image *img, const em_fatbin_entry *e, int decompress, char *err,
                         size_t cap) {
  if (img->kind != GC_IMG_CUBIN && img->kind != GC_IMG_PTX) return 0;
  if (e->compression == EM_FATBIN_UNCOMPRESSED) {
    decode_bytes(s, img, e->payload, (size_t)e->payload_size);
    return 0;
  }
  if (!decompress) return 0;
  void *bytes = NULL;
  size_t n = 0;
  em_status st = em_fatbin_entry_bytes(e, GC_ENTRY_MAX, &bytes, &n);
  if (st == EM_ERR_UNSUPPORTED) {
    note(s, "entry at offset %zu not decompressed: %s", img->offset, em_last_error());
    return 0;
  }
  if (st != EM_OK) return failf(err, cap, s->path, "%s", em_last_error());
  decode_bytes(s, img, bytes, n);
  free(bytes);
  return 0;
}

/* ------------------------------------------------------------ fatbins --- */

typedef struct entry_list {
  em_fatbin_entry *e;
  size_t n, cap;
  int containers;
  int oom;
  uint64_t stored;
} entry_list;

static int collect(const em_fatbin_entry *e, void *ctx) {
  entry_list *l = ctx;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    em_fatbin_entry *t = realloc(l->e, cap * sizeof *t);
    if (!t) {
      l->oom = 1;
      return 1; /* stops the walk */
    }
    l->e = t;
    l->cap = cap;
  }
  l->e[l->n++] = *e;
  if (e->container + 1 > l->containers) l->containers = e->container + 1;
  l->stored += e->payload_size;
  return 0;
}

static gc_image_kind kind_of(int fatbin_kind) {
  switch (fatbin_kind) {
  case EM_FATBIN_KIND_ELF: return GC_IMG_CUBIN;
  case EM_FATBIN_KIND_PTX: return GC_IMG_PTX;
  case EM_FATBIN_KIND_LTOIR: return GC_IMG_LTOIR;
  default: return GC_IMG_OTHER;
  }
}

/* Walks the fatbin bytes [data, data+size) that sit at file offset `base`. */
static int read_fatbin(gc_image_set *s, const uint8_t *data, size_t size, size_t base, int mode, char *err,
                       size_t cap) {
  entry_list l = {0};
  if (em_fatbin_walk(data, size, collect, &l) != EM_OK) {
    free(l.e);
    if (base) return failf(err, cap, s->path, "section %s at file offset %zu: %s", FATBIN_SECTION, base, em_last_error());
    return failf(err, cap, s->path, "%s", em_last_error());
  }
  if (l.oom) {
    free(l.e);
    return failf(err, cap, s->path, "out of memory listing %zu fatbin entries", l.n);
  }
  int decompress = mode == GC_READ_ALL ||
                   (mode == GC_READ_AUTO && l.stored <= GC_AUTO_MAX_STORED && l.n <= GC_AUTO_MAX_ENTRIES);
  size_t skipped = 0;
  for (size_t i = 0; i < l.n; i++) {
    const em_fatbin_entry *e = &l.e[i];
    gc_image *img = push_image(s);
    if (!img) {
      free(l.e);
      return failf(err, cap, s->path, "out of memory after %zu images", s->n);
    }
    img->kind = kind_of(e->kind);
    img->arch = e->arch;
    img->variant = e->variant;
    img->ptx_isa = img->kind == GC_IMG_PTX ? e->version_major * 10 + e->version_minor : 0;
    img->compression = (int)e->compression;
    img->size = e->compression ? e->compressed_size : e->payload_size;
    img->uncompressed = e->compression ? e->uncompressed_size : e->payload_size;
    img->container = (size_t)s->containers + (size_t)e->container;
    img->offset = base + e->offset;
    if (entry_details(s, img, e, decompress, err, cap) != 0) {
      free(l.e);
      return -1;
    }
    if (!decompress && e->compression && (img->kind == GC_IMG_CUBIN || img->kind == GC_IMG_PTX)) skipped++;
  }
  s->containers += (size_t)l.containers;
  if (skipped)
    note(s, "%zu compressed entries not decompressed (%.0f MiB of GPU code): their kernel names and cubin toolkits "
            "are unread; --kernels reads them",
         skipped, (double)l.stored / (1 << 20));
  free(l.e);
  return 0;
}

/* ---------------------------------------------------------------- ELF --- */

static gc_image_kind kind_from_ember(em_image_kind k) {
  switch (k) {
  case EM_IMAGE_CUBIN: return GC_IMG_CUBIN;
  case EM_IMAGE_PTX: return GC_IMG_PTX;
  default: return GC_IMG_OTHER; /* NVRTC sources and headers */
  }
}

/* A cubin's ABI from its ELF header: of a compressed image only the header
 * is decompressed (the table gives everything else; inflating the full
 * build's 140 MB of cubins per inspect would cost half a second). */
static int ember_cubin_abi(const em_image_info *m) {
  uint8_t head[64];
  size_t got = 0;
  em_cubin_info ci;
  if (m->storage == EM_IMAGE_STORED)
    return em_cubin_read(m->stored, (size_t)m->stored_size, &ci, NULL, 0) == EM_OK ? ci.abi_version : 0;
  if (em_blob_image_head(m, head, sizeof head, &got) != EM_OK) return 0;
  return em_cubin_read_header(head, got, &ci) == EM_OK ? ci.abi_version : 0;
}

/* Ember's image table (runtime/image_blob.h). Each kernel module plays the
 * part of a fatbin container: the runtime loads one image per module. Its
 * images are zstd frames that Ember, not the driver, decompresses
 * (GC_COMP_EMBER_ZSTD): no driver rule applies to them. */
static int read_ember(gc_image_set *s, const void *sec, size_t size, size_t base, int mode, char *err, size_t cap) {
  /* em_blob_parse reads fields in place: give it its own aligned copy. */
  void *blob = malloc(size);
  if (!blob) return failf(err, cap, s->path, "out of memory for %zu bytes of %s", size, EM_BLOB_SECTION);
  memcpy(blob, sec, size);
  em_blob_view v;
  if (em_blob_parse(blob, size, s->path, &v) != EM_OK) {
    free(blob);
    return failf(err, cap, s->path, "section %s: %s", EM_BLOB_SECTION, em_last_error());
  }
  snprintf(s->format, sizeof s->format, "ember");
  /* Module names in order of first appearance; at most one per image. */
  const char **modules = calloc(v.count ? v.count : 1, sizeof *modules);
  size_t n_modules = 0;
  for (size_t i = 0; i < v.count; i++) {
    const em_image_info *m = &v.images[i];
    gc_image *img = modules ? push_image(s) : NULL;
    if (!img) {
      free(modules);
      em_blob_view_free(&v);
      free(blob);
      return failf(err, cap, s->path, "out of memory after %zu images", s->n);
    }
    img->kind = kind_from_ember(m->kind);
    img->arch = m->arch;
    img->variant = m->variant;
    img->ptx_isa = m->ptx_isa;
    img->toolkit = m->toolkit;
    img->compression = m->storage == EM_IMAGE_ZSTD ? GC_COMP_EMBER_ZSTD : 0;
    img->size = m->stored_size;
    img->uncompressed = m->size;
    snprintf(img->kernels, sizeof img->kernels, "%s", m->kernels ? m->kernels : "");
    img->n_kernels = count_names(m->kernels);
    img->offset = base + (size_t)((const uint8_t *)m->stored - (const uint8_t *)blob);
    if (img->kind == GC_IMG_CUBIN && mode != GC_READ_HEADERS) img->abi_version = ember_cubin_abi(m);
    const char *name = m->module ? m->module : "";
    size_t k = 0;
    while (k < n_modules && strcmp(modules[k], name)) k++;
    if (k == n_modules) modules[n_modules++] = name;
    img->container = k;
  }
  s->containers = n_modules;
  free(modules);
  em_blob_view_free(&v);
  free(blob);
  return 0;
}

static int read_elf(gc_image_set *s, const uint8_t *data, size_t size, int mode, char *err, size_t cap) {
  if (size < 64)
    return failf(err, cap, s->path, "ELF file of %zu bytes is shorter than an ELF header: truncated", size);
  if (data[5] != ELFDATA2LSB)
    return failf(err, cap, s->path, "big-endian ELF (EI_DATA %u): CUDA host code is little-endian, no GPU code to read",
                 data[5]);
  unsigned machine = (unsigned)(data[18] | (data[19] << 8));
  pthread_once(&elf_once, init_libelf);
  if (!elf_ready) return failf(err, cap, s->path, "libelf refused EV_CURRENT: %s", elf_errmsg(-1));

  if (machine == EM_CUDA_MACHINE) { /* the file is itself one cubin */
    snprintf(s->format, sizeof s->format, "cubin");
    em_cubin_info ci;
    gc_image *img = push_image(s);
    if (!img) return failf(err, cap, s->path, "out of memory");
    if (em_cubin_read(data, size, &ci, img->kernels, sizeof img->kernels) != EM_OK)
      return failf(err, cap, s->path, "%s", em_last_error());
    img->kind = GC_IMG_CUBIN;
    img->arch = ci.sm;
    img->variant = ci.variant;
    img->toolkit = ci.toolkit;
    img->abi_version = ci.abi_version;
    img->n_kernels = ci.n_kernels;
    img->size = img->uncompressed = size;
    return 0;
  }

  snprintf(s->format, sizeof s->format, "elf");
  /* elf_memory never writes a little-endian image opened for reading. */
  Elf *e = elf_memory((char *)(uintptr_t)data, size);
  if (!e || elf_kind(e) != ELF_K_ELF) {
    int rc = failf(err, cap, s->path, "not a readable ELF file (libelf: %s)", elf_errmsg(-1));
    if (e) elf_end(e);
    return rc;
  }
  /* libelf quietly shows no sections when the section header table lies
   * past the end of the image: a truncated file must not read as "no GPU code". */
  GElf_Ehdr eh;
  size_t shnum = 0;
  if (!gelf_getehdr(e, &eh) || elf_getshdrnum(e, &shnum) != 0) {
    int rc = failf(err, cap, s->path, "ELF header unreadable, the file is truncated or damaged (libelf: %s)",
                   elf_errmsg(-1));
    elf_end(e);
    return rc;
  }
  /* Checked from the header itself: libelf reports 0 sections when it
   * cannot reach the table. (e_shnum 0 with e_shoff set means the count is
   * in section 0: at least that one header must be there.) */
  uint64_t table = (uint64_t)(eh.e_shnum ? eh.e_shnum : 1) * eh.e_shentsize;
  if (eh.e_shoff != 0 && (eh.e_shoff > size || table > size - eh.e_shoff || shnum == 0)) {
    int rc = failf(err, cap, s->path,
                   "ELF section headers (%u at file offset %llu) run past the end of the file (%zu bytes): the file "
                   "is truncated",
                   (unsigned)eh.e_shnum, (unsigned long long)eh.e_shoff, size);
    elf_end(e);
    return rc;
  }
  if (eh.e_shoff == 0) {
    note(s, "ELF has no section headers: its %s section, if any, cannot be found", FATBIN_SECTION);
    elf_end(e);
    return 0;
  }
  size_t shstrndx;
  if (elf_getshdrstrndx(e, &shstrndx) != 0) {
    int rc = failf(err, cap, s->path, "ELF section headers unreadable, the file is truncated or damaged (libelf: %s)",
                   elf_errmsg(-1));
    elf_end(e);
    return rc;
  }
  Elf_Scn *ember = NULL, *fatbin = NULL;
  for (Elf_Scn *scn = elf_nextscn(e, NULL); scn; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char *name = elf_strptr(e, shstrndx, sh.sh_name);
    if (!name) continue;
    if (!strcmp(name, EM_BLOB_SECTION)) ember = scn;
    else if (!strcmp(name, FATBIN_SECTION)) fatbin = scn;
  }
  Elf_Scn *pick = ember ? ember : fatbin;
  int rc = 0;
  if (!pick) {
    note(s, "ELF has no %s section: no CUDA GPU code", FATBIN_SECTION);
  } else {
    GElf_Shdr sh;
    Elf_Data *d = gelf_getshdr(pick, &sh) ? elf_getdata(pick, NULL) : NULL;
    if (sh.sh_type == SHT_NOBITS || (d && d->d_size == 0)) {
      note(s, "section %s is empty: no GPU code", ember ? EM_BLOB_SECTION : FATBIN_SECTION);
    } else if (!d || !d->d_buf || sh.sh_offset > size || d->d_size > size - sh.sh_offset) {
      rc = failf(err, cap, s->path, "section %s (file offset %llu, %llu bytes) lies outside the file: truncated (libelf: %s)",
                 ember ? EM_BLOB_SECTION : FATBIN_SECTION, (unsigned long long)sh.sh_offset,
                 (unsigned long long)sh.sh_size, elf_errmsg(-1));
    } else if (ember) {
      rc = read_ember(s, d->d_buf, d->d_size, (size_t)sh.sh_offset, mode, err, cap);
    } else {
      rc = read_fatbin(s, d->d_buf, d->d_size, (size_t)sh.sh_offset, mode, err, cap);
    }
  }
  elf_end(e);
  return rc;
}

/* ---------------------------------------------------------------- PTX --- */

static int looks_like_ptx(const uint8_t *data, size_t size) {
  size_t n = size < PTX_SNIFF ? size : PTX_SNIFF;
  return memmem(data, n, ".version", 8) && memmem(data, n, ".target", 7);
}

static int read_ptx(gc_image_set *s, const uint8_t *data, size_t size, char *err, size_t cap) {
  snprintf(s->format, sizeof s->format, "ptx");
  gc_image *img = push_image(s);
  if (!img) return failf(err, cap, s->path, "out of memory");
  em_ptx_info pi;
  if (em_ptx_read_header((const char *)data, size, &pi, img->kernels, sizeof img->kernels) != EM_OK)
    return failf(err, cap, s->path, "%s", em_last_error());
  img->kind = GC_IMG_PTX;
  img->arch = pi.target_sm;
  img->variant = pi.target_variant;
  img->ptx_isa = pi.isa;
  img->n_kernels = pi.n_entries;
  img->size = img->uncompressed = size;
  return 0;
}

/* ------------------------------------------------------- entry points --- */

int gc_images_read_mem(const void *data, size_t size, const char *origin, int mode, gc_image_set *out, char *err,
                       size_t err_cap) {
  memset(out, 0, sizeof *out);
  if (err && err_cap) err[0] = '\0';
  snprintf(out->path, sizeof out->path, "%s", origin ? origin : "(memory)");
  const uint8_t *b = data;
  int rc;
  if (!b || size == 0) {
    rc = failf(err, err_cap, out->path, "empty file: no GPU code to read");
  } else if (size >= 4 && !memcmp(b, ELFMAG, SELFMAG)) {
    rc = read_elf(out, b, size, mode, err, err_cap);
  } else if (size >= 4 && (uint32_t)(b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24) == EM_FATBIN_MAGIC) {
    snprintf(out->format, sizeof out->format, "fatbin");
    rc = read_fatbin(out, b, size, 0, mode, err, err_cap);
  } else if (looks_like_ptx(b, size)) {
    rc = read_ptx(out, b, size, err, err_cap);
  } else {
    rc = failf(err, err_cap, out->path,
               "not an ELF file, a fatbin (magic 0x%08X) or PTX text (.version/.target); it starts with bytes "
               "%02X %02X %02X %02X",
               EM_FATBIN_MAGIC, b[0], size > 1 ? b[1] : 0, size > 2 ? b[2] : 0, size > 3 ? b[3] : 0);
  }
  if (rc) {
    char path[sizeof out->path];
    memcpy(path, out->path, sizeof path);
    gc_images_free(out);
    memcpy(out->path, path, sizeof path);
  }
  return rc;
}

int gc_images_read_ex(const char *path, int mode, gc_image_set *out, char *err, size_t err_cap) {
  memset(out, 0, sizeof *out);
  if (!path) return failf(err, err_cap, "(null)", "no file name");
  snprintf(out->path, sizeof out->path, "%s", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failf(err, err_cap, path, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = failf(err, err_cap, path, "cannot stat: %s", strerror(errno));
    close(fd);
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return failf(err, err_cap, path, "not a regular file");
  }
  if (st.st_size == 0) {
    close(fd);
    return failf(err, err_cap, path, "empty file: no GPU code to read");
  }
  size_t size = (size_t)st.st_size;
  /* Mapped, not read: only the pages of the headers and the GPU-code
   * section are touched, however large the library. */
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return failf(err, err_cap, path, "cannot map %zu bytes: %s", size, strerror(errno));
  int rc = gc_images_read_mem(map, size, path, mode, out, err, err_cap);
  munmap(map, size);
  return rc;
}

int gc_images_read(const char *path, gc_image_set *out, char *err, size_t err_cap) {
  return gc_images_read_ex(path, GC_READ_AUTO, out, err, err_cap);
}

void gc_images_free(gc_image_set *s) {
  if (!s) return;
  free(s->images);
  memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ verdict --- */

const char *gc_run_name(gc_run r) {
  switch (r) {
  case GC_RUN_NATIVE: return "runs natively";
  case GC_RUN_PTX_JIT: return "runs through PTX JIT";
  case GC_RUN_PTX_TOO_NEW: return "PTX too new for the driver (222)";
  case GC_RUN_NO_IMAGE: return "no usable image (209)";
  case GC_RUN_CUBIN_TOO_NEW: return "cubin too new for the driver (200)";
  }
  return "?";
}

const char *gc_run_sources(gc_run r) {
  switch (r) {
  case GC_RUN_NATIVE: return NULL;
  case GC_RUN_PTX_JIT: return "BW-COMPAT,PTXMAP";
  case GC_RUN_PTX_TOO_NEW: return "PTXMAP";
  case GC_RUN_NO_IMAGE: return "BW-COMPAT";
  case GC_RUN_CUBIN_TOO_NEW: return "MVC";
  }
  return NULL;
}

static int is_tegra(int cc) {
  const em_arch_row *row = em_arch_lookup(cc);
  return row && row->tegra;
}

/* cuda-compat.md 3.2: a cubin sm_XY runs on CC X.Z with Z >= Y (same major);
 * sm_XYa only on exactly X.Y; sm_XYf within its family, i.e. the same major
 * with a minor >= Y (sm_100f -> 10.0, 10.3; sm_120f -> 12.0, 12.1). The
 * higher-minor rule holds between desktop GPUs only: "Binary compatibility is
 * supported only for the desktop. It is not supported for Tegra. Also, the
 * binary compatibility between desktop and Tegra is not supported." (CUDA C++
 * Programming Guide, Binary Compatibility): an sm_86 cubin does not run on an
 * Orin (8.7), nor an sm_70 one on a Xavier (7.2). */
static int cubin_fits(const gc_image *m, int cc) {
  if (m->variant == 'a' || m->arch == cc) return m->arch == cc;
  if (is_tegra(m->arch) || is_tegra(cc)) return 0;
  return m->arch / 10 == cc / 10 && m->arch % 10 <= cc % 10;
}

/* PTX compute_XY is JIT-compiled for any CC >= X.Y, later majors included;
 * compute_XYa only for X.Y; compute_XYf within the family [S]. */
static int ptx_fits(const gc_image *m, int cc) {
  if (m->variant == 'a') return m->arch == cc;
  if (m->variant == 'f') return m->arch / 10 == cc / 10 && m->arch % 10 <= cc % 10;
  return m->arch <= cc;
}

/* A cubin from a toolkit newer than the driver: minor-version compatibility
 * from CUDA 11 (same major), the exact version before (cuda-compat.md 2.2;
 * arch_table's em_cubin_min_driver). Unknown toolkit or driver: assumed fine. */
static int cubin_too_new(const gc_image *m, int driver) {
  return m->toolkit > 0 && driver > 0 && em_cubin_min_driver(m->toolkit) > driver;
}

/* 0 when the driver's JIT takes this PTX ISA; else the driver it needs (-1: an ISA arch_table does not know). */
static int ptx_needs(const gc_image *m, int driver) {
  int need = em_ptx_isa_min_driver(m->ptx_isa);
  if (need == 0) return -1;
  return driver > 0 && driver < need ? need : 0;
}

/* Which of two fitting images the driver prefers [U: undocumented tie-break,
 * the fake driver's choice]: the higher arch, then 'a' over plain over 'f'. */
static int variant_rank(char v) { return v == 'a' ? 2 : v == 0 ? 1 : 0; }
static int better(const gc_image *c, const gc_image *best) {
  if (!best) return 1;
  if (c->arch != best->arch) return c->arch > best->arch;
  return variant_rank(c->variant) > variant_rank(best->variant);
}

/* Ember's own policy (format "ember", runtime/policy.c) also ranks cubins of
 * one SM by the toolkit that made them: of those the driver loads, the newest
 * (libember embeds sm_90 from nvcc 13.0, NVRTC 12.9 and NVRTC 11.8; an H100 on
 * R535 runs the 12.9 one). A driver handed one fat binary has no such choice. */
static int better_ember(const gc_image *c, const gc_image *best) {
  if (!best || c->arch != best->arch || c->variant != best->variant) return better(c, best);
  return c->toolkit > best->toolkit;
}

static const char *vname(char v) { return v == 'a' ? "a" : v == 'f' ? "f" : ""; }

typedef struct outcome {
  gc_run run;
  int image;
} outcome;

/* The driver's choice inside one container (one module): the best fitting
 * cubin, else the best fitting PTX, else nothing (cuda-compat.md 0.1 steps
 * 3-4). Ember's own policy (format "ember") never picks an image the driver
 * cannot load, so there the unloadable ones are skipped first. */
static outcome container_outcome(const gc_image_set *s, size_t c, int cc, int driver, int skip_unloadable) {
  const gc_image *cubin = NULL, *ptx = NULL;
  for (size_t i = 0; i < s->n; i++) {
    const gc_image *m = &s->images[i];
    if (m->container != c) continue;
    if (m->kind == GC_IMG_CUBIN && cubin_fits(m, cc) && !(skip_unloadable && cubin_too_new(m, driver)) &&
        (skip_unloadable ? better_ember(m, cubin) : better(m, cubin)))
      cubin = m;
    if (m->kind == GC_IMG_PTX && ptx_fits(m, cc) && !(skip_unloadable && ptx_needs(m, driver)) && better(m, ptx))
      ptx = m;
  }
  if (cubin) return (outcome){cubin_too_new(cubin, driver) ? GC_RUN_CUBIN_TOO_NEW : GC_RUN_NATIVE, (int)(cubin - s->images)};
  if (ptx) return (outcome){ptx_needs(ptx, driver) ? GC_RUN_PTX_TOO_NEW : GC_RUN_PTX_JIT, (int)(ptx - s->images)};
  return (outcome){GC_RUN_NO_IMAGE, -1};
}

/* How bad an outcome is when summing containers up. */
static int severity(gc_run r) {
  switch (r) {
  case GC_RUN_NATIVE: return 0;
  case GC_RUN_PTX_JIT: return 1;
  case GC_RUN_NO_IMAGE: return 2;
  default: return 3; /* a fitting image the driver cannot load */
  }
}

typedef struct text {
  char *buf;
  size_t cap, len;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->len + 1 >= t->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n > 0) t->len = t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
}

/* "sm_80, sm_90a" or "compute_90 (PTX 9.0)": the distinct archs of one kind, lowest first. */
static void list_archs(text *t, const gc_image_set *s, gc_image_kind kind) {
  int seen[64][2];
  size_t n = 0, more = 0;
  for (size_t i = 0; i < s->n; i++) {
    const gc_image *m = &s->images[i];
    if (m->kind != kind) continue;
    size_t k = 0;
    while (k < n && !(seen[k][0] == m->arch && seen[k][1] == m->variant)) k++;
    if (k < n) continue;
    if (n < 64) seen[n][0] = m->arch, seen[n][1] = m->variant, n++;
    else more++;
  }
  for (size_t i = 1; i < n; i++) /* insertion sort: few entries */
    for (size_t j = i; j > 0 && (seen[j][0] < seen[j - 1][0] ||
                                 (seen[j][0] == seen[j - 1][0] && seen[j][1] < seen[j - 1][1]));
         j--) {
      int a = seen[j][0], v = seen[j][1];
      seen[j][0] = seen[j - 1][0], seen[j][1] = seen[j - 1][1];
      seen[j - 1][0] = a, seen[j - 1][1] = v;
    }
  if (n == 0) {
    put(t, "none");
    return;
  }
  for (size_t i = 0; i < n && i < 12; i++)
    put(t, "%s%s_%d%s", i ? ", " : "", kind == GC_IMG_CUBIN ? "sm" : "compute", seen[i][0], vname((char)seen[i][1]));
  if (n > 12 || more) put(t, ", ...");
}

static void ver(char buf[16], int cuda) {
  if (cuda <= 0) snprintf(buf, 16, "unknown");
  else snprintf(buf, 16, "%d.%d", cuda / 1000, (cuda % 1000) / 10);
}

/* The lowest driver that loads a cubin of every toolkit arch_table knows:
 * at or above it an unread toolkit cannot change the answer. */
static int driver_loads_every_cubin(int driver) {
  int newest = 0;
  for (size_t i = 0; i < em_toolkit_count(); i++)
    if (em_toolkit_at(i)->cuda > newest) newest = em_toolkit_at(i)->cuda;
  return driver > 0 && driver >= em_cubin_min_driver(newest);
}

static void explain_native(text *t, const gc_image *m, int cc, int driver) {
  char tk[16];
  put(t, "sm_%d%s cubin runs on CC %d.%d (", m->arch, vname(m->variant), cc / 10, cc % 10);
  if (m->variant == 'a') put(t, "arch-specific: exactly its SM)");
  else if (m->arch == cc) put(t, "%sexact match)", m->variant == 'f' ? "family-specific, " : "");
  else put(t, "%ssame major, lower minor)", m->variant == 'f' ? "family-specific: " : "");
  if (m->toolkit > 0) {
    ver(tk, m->toolkit);
    put(t, "; made by CUDA %s", tk);
    if (driver > 0) put(t, ", which this driver loads");
  } else if (gc_driver_decompresses(m) && !driver_loads_every_cubin(driver)) {
    put(t, "; its toolkit was not read (compressed entry), so whether this driver loads it is unknown");
  }
}

/* Names the best fitting image of a kind that the policy skipped because the
 * driver cannot load it (format "ember" only; the driver itself does not skip).
 * Of several cubins of that SM (CUDA 13.0 and 12.9, say) it names the one that
 * needs the lowest driver: the smallest upgrade that runs it. */
static void explain_skipped(text *t, const gc_image_set *s, int cc, int driver, gc_image_kind kind) {
  const gc_image *best = NULL;
  for (size_t i = 0; i < s->n; i++) {
    const gc_image *m = &s->images[i];
    if (m->kind != kind) continue;
    int fits = kind == GC_IMG_CUBIN ? cubin_fits(m, cc) && cubin_too_new(m, driver)
                                    : ptx_fits(m, cc) && ptx_needs(m, driver) != 0;
    if (!fits) continue;
    if (kind == GC_IMG_CUBIN && best && m->arch == best->arch && m->variant == best->variant) {
      if (em_cubin_min_driver(m->toolkit) < em_cubin_min_driver(best->toolkit)) best = m;
    } else if (better(m, best)) {
      best = m;
    }
  }
  if (!best) return;
  char need[16];
  if (kind == GC_IMG_CUBIN) {
    ver(need, em_cubin_min_driver(best->toolkit));
    put(t, "; the sm_%d%s cubin fits but needs a driver >= %s (skipped)", best->arch, vname(best->variant), need);
  } else {
    int req = em_ptx_isa_min_driver(best->ptx_isa);
    ver(need, req);
    put(t, "; compute_%d%s PTX ISA %d.%d fits but needs a driver >= %s (skipped)", best->arch, vname(best->variant),
        best->ptx_isa / 10, best->ptx_isa % 10, req ? need : "newer than any known");
  }
}

static void explain_no_cubin(text *t, const gc_image_set *s, int cc) {
  size_t cubins = 0;
  for (size_t i = 0; i < s->n; i++) cubins += s->images[i].kind == GC_IMG_CUBIN;
  if (!cubins) {
    put(t, "no cubin in the file");
    return;
  }
  put(t, "no cubin for CC %d.%d (cubins: ", cc / 10, cc % 10);
  list_archs(t, s, GC_IMG_CUBIN);
  put(t, ")");
}

/* A container of cubins that were read and define no kernel (nvcc links one
 * into every executable): nothing in it can fail to launch. */
static int kernel_less(const gc_image_set *s, size_t c) {
  for (size_t i = 0; i < s->n; i++) {
    const gc_image *m = &s->images[i];
    if (m->container != c || (m->kind != GC_IMG_CUBIN && m->kind != GC_IMG_PTX)) continue;
    if (m->kind != GC_IMG_CUBIN || m->abi_version == 0 || m->n_kernels > 0) return 0;
  }
  return 1;
}

void gc_images_verdict(const gc_image_set *s, int cc, int driver, gc_run_verdict *out) {
  memset(out, 0, sizeof *out);
  out->image = -1;
  text t = {out->why, sizeof out->why, 0};
  out->why[0] = '\0';
  size_t n_containers = s->containers ? s->containers : 1;
  int skip_unloadable = !strcmp(s->format, "ember");

  /* Per container, then the worst outcome among containers that hold code
   * for this GPU. A container with no image for it is counted apart: a
   * library often keeps kernels for one GPU in a container of their own and
   * loads it only there (libcublasLt's sm_90a and sm_100a containers). */
  outcome worst = {GC_RUN_NO_IMAGE, -1};
  size_t counted = 0, none = 0;
  int have_worst = 0;
  for (size_t c = 0; c < n_containers; c++) {
    int has_code = 0;
    for (size_t i = 0; i < s->n && !has_code; i++)
      has_code = s->images[i].container == c && (s->images[i].kind == GC_IMG_CUBIN || s->images[i].kind == GC_IMG_PTX);
    if (!has_code) continue;
    counted++;
    outcome o = container_outcome(s, c, cc, driver, skip_unloadable);
    if (o.run == GC_RUN_NO_IMAGE) {
      none += !kernel_less(s, c);
      continue;
    }
    if (!have_worst || severity(o.run) > severity(worst.run)) worst = o, have_worst = 1;
  }
  out->run = worst.run;
  out->image = worst.image;
  char dv[16], need[16];
  ver(dv, driver);

  if (counted == 0) {
    put(&t, "the file holds no cubin or PTX at all → nothing can run on CC %d.%d", cc / 10, cc % 10);
    return;
  }
  const gc_image *m = worst.image >= 0 ? &s->images[worst.image] : NULL;
  switch (worst.run) {
  case GC_RUN_NATIVE:
    explain_native(&t, m, cc, driver);
    break;
  case GC_RUN_CUBIN_TOO_NEW:
    ver(need, em_cubin_min_driver(m->toolkit));
    {
      char tk[16];
      ver(tk, m->toolkit);
      put(&t, "sm_%d%s cubin fits CC %d.%d but was made by CUDA %s; a CUDA %s driver cannot load it (needs >= %s) → "
              "CUDA_ERROR_INVALID_IMAGE (200)",
          m->arch, vname(m->variant), cc / 10, cc % 10, tk, dv, need);
    }
    break;
  case GC_RUN_PTX_JIT:
  case GC_RUN_PTX_TOO_NEW: {
    explain_no_cubin(&t, s, cc);
    if (skip_unloadable) explain_skipped(&t, s, cc, driver, GC_IMG_CUBIN);
    if (skip_unloadable) explain_skipped(&t, s, cc, driver, GC_IMG_PTX);
    int req = em_ptx_isa_min_driver(m->ptx_isa);
    put(&t, "; compute_%d%s PTX ISA %d.%d ", m->arch, vname(m->variant), m->ptx_isa / 10, m->ptx_isa % 10);
    if (req == 0) {
      put(&t, "is newer than any ISA arch_table knows: no driver it knows can JIT it → "
              "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)");
    } else {
      ver(need, req);
      if (worst.run == GC_RUN_PTX_JIT)
        put(&t, "needs driver >= %s, this one is %s → JIT-compiled at first load (slow first start, then cached)", need,
            driver > 0 ? dv : "unknown (assumed new enough)");
      else
        put(&t, "needs driver >= %s, this one is %s → CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)", need, dv);
    }
    break;
  }
  case GC_RUN_NO_IMAGE:
    explain_no_cubin(&t, s, cc);
    put(&t, " and no PTX for compute_%d or lower (PTX: ", cc);
    list_archs(&t, s, GC_IMG_PTX);
    put(&t, ")");
    if (skip_unloadable) {
      explain_skipped(&t, s, cc, driver, GC_IMG_CUBIN);
      explain_skipped(&t, s, cc, driver, GC_IMG_PTX);
    }
    put(&t, " → CUDA_ERROR_NO_BINARY_FOR_GPU (209)");
    for (size_t i = 0; i < s->n; i++)
      if (s->images[i].kind == GC_IMG_CUBIN && s->images[i].variant == 'a' && s->images[i].arch / 10 == cc / 10) {
        put(&t, "; an 'a' cubin runs only on exactly its SM");
        break;
      }
    break;
  }
  if (m && m->compression == 2 && driver > 0 && driver < 12040 &&
      (worst.run == GC_RUN_NATIVE || worst.run == GC_RUN_PTX_JIT))
    put(&t, "; but the entry is zstd-compressed, which drivers before R550 (CUDA 12.4) are reported not to read [S]: "
            "likely CUDA_ERROR_INVALID_IMAGE (200)");
  if (driver <= 0 && worst.run != GC_RUN_NO_IMAGE) put(&t, "; driver version unknown, assumed new enough");
  if (none && worst.run != GC_RUN_NO_IMAGE)
    put(&t, "; %zu of %zu containers hold no image for CC %d.%d (their kernels fail with 209 if used on it)", none,
        counted, cc / 10, cc % 10);
}
