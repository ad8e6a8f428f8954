/* The dispatch layer's view from outside: the kernel images embedded in the
 * library and, per device and kernel module, the plan that says which image runs
 * and why. See DESIGN.md "The selection policy". */
#ifndef EMBER_DISPATCH_H
#define EMBER_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include "ember/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum em_image_kind {
  EM_IMAGE_CUBIN = 1,  /* ELF for one SM (or an a/f variant) */
  EM_IMAGE_PTX = 2,    /* PTX text for a compute_XY virtual architecture */
  EM_IMAGE_SOURCE = 3, /* CUDA C kernel source, for NVRTC */
  EM_IMAGE_HEADER = 4  /* a header the sources include (passed to NVRTC) */
} em_image_kind;

/* How the image table holds an image's bytes. The library keeps its kernel
 * images zstd-compressed (a cubin shrinks 6-7 times) and decompresses the one
 * a module load needs, when it needs it. */
typedef enum em_image_storage {
  EM_IMAGE_STORED = 0, /* the bytes as they are */
  EM_IMAGE_ZSTD = 1    /* one zstd frame of the bytes */
} em_image_storage;

/* Flags of an image. */
#define EM_IMAGE_LEGACY 0x1u /* legacy PTX from clang's NVPTX back end (old ISA) */

typedef struct em_image_info {
  const char *module;      /* kernel module, e.g. "elementwise" (header: its file name) */
  em_image_kind kind;
  int arch;                /* SM or compute arch as a number: 35, 90, 120; 0 for sources */
  char variant;            /* 0, 'a' (arch-specific) or 'f' (family-specific) */
  int ptx_isa;             /* PTX ISA as 10*major+minor (32 = 3.2, 90 = 9.0); 0 if none */
  int toolkit;             /* CUDA version of the tool that made it, 1000*major+10*minor; 0 unknown */
  int min_driver;          /* lowest cuDriverGetVersion able to load it; 0 for sources */
  unsigned flags;          /* EM_IMAGE_LEGACY ... */
  const char *producer;    /* "nvcc 13.0.88", "clang 14.0.6", "source" */
  const char *kernels;     /* comma-separated kernel names */
  uint64_t size;           /* bytes of the image (as the driver or NVRTC takes them) */
  uint64_t hash;           /* XXH3-64 of those bytes */
  em_image_storage storage;/* how the table holds them: as they are, or zstd-compressed */
  uint64_t stored_size;    /* bytes the table holds for the image (= size when stored as is) */
  const void *stored;      /* those bytes (inside the library, or the opened table): read the
                              image itself with em_image_read */
} em_image_info;

/* The table of images embedded in this library. */
EM_API em_status em_image_count(size_t *count);
EM_API em_status em_image_get(size_t index, em_image_info *out);

/* The bytes of an image of either table (em_image_get, em_image_table_get),
 * decompressed when the table holds them compressed, and checked against the
 * image's size and hash: *bytes is a malloc'd buffer of img->size bytes and
 * one NUL more (PTX and sources already end in theirs), the caller frees it.
 * EM_ERR_CORRUPT naming the image when they do not decompress or do not
 * match; EM_ERR_OUT_OF_MEMORY. */
EM_API em_status em_image_read(const em_image_info *img, void **bytes);

/* The image table of another Ember library or program file, read with libelf
 * without loading it (tools use this: `ember images --file`, gpucheck). */
typedef struct em_image_table em_image_table;
EM_API em_status em_image_table_open(const char *path, em_image_table **out);
EM_API size_t em_image_table_count(const em_image_table *t);
/* The strings and data of *out stay valid until em_image_table_close. */
EM_API em_status em_image_table_get(const em_image_table *t, size_t index, em_image_info *out);
EM_API void em_image_table_close(em_image_table *t);

/* One of the five paths of the selection policy. */
typedef enum em_path {
  EM_PATH_NONE = 0,
  EM_PATH_CUBIN = 1,      /* a prebuilt cubin (steps 1 and 2) */
  EM_PATH_PTX = 2,        /* embedded PTX from nvcc, JIT by the driver (step 3) */
  EM_PATH_PTX_LEGACY = 3, /* embedded legacy PTX from clang, JIT by the driver (step 3) */
  EM_PATH_NVRTC = 4,      /* kernel source compiled by NVRTC to a cubin (step 4) */
  EM_PATH_CPU = 5         /* the CPU twin (step 5) */
} em_path;

EM_API const char *em_path_name(em_path p); /* "cubin", "ptx", "ptx-legacy", "nvrtc", "cpu" */

/* Room for every image of a module (about 40 today) and every NVRTC. When
 * more come, the rejected ones are dropped first and counted in n_omitted;
 * a viable candidate and the CPU entry are always kept. */
#define EM_PLAN_MAX_CANDIDATES 128

/* One image or route the policy looked at, and what it made of it. */
typedef struct em_plan_candidate {
  em_path path;
  int image_index;      /* index into the image table, or -1 (NVRTC, CPU) */
  int arch;             /* the image's arch, or the SM NVRTC would compile for */
  char variant;
  int nvrtc_version;    /* for EM_PATH_NVRTC: the NVRTC library's version */
  int viable;           /* 1 if it can run here; the plan tries viable ones in order */
  char reason[200];     /* why it is viable or rejected */
} em_plan_candidate;

typedef struct em_plan {
  em_path path;         /* the chosen path (first viable candidate) */
  int chosen;           /* index into candidates[] of the choice, -1 if none */
  int step;             /* the policy step (1..5) that decided */
  int strict_error;     /* 1 if EMBER_STRICT=1 refused this plan's fallback */
  char reason[400];     /* one line: why this path */
  int n_candidates;
  em_plan_candidate candidates[EM_PLAN_MAX_CANDIDATES];
  int n_omitted;        /* rejected candidates not listed for lack of room */
} em_plan;

/* The plan for a kernel module on a device, computed from the embedded images,
 * the driver version and the loadable NVRTC libraries. Pure with respect to
 * the GPU: nothing is loaded. */
EM_API em_status em_dispatch_plan(em_device dev, const char *module, em_plan *out);

/* What happened when the module was actually loaded on the device. */
typedef struct em_load_record {
  int loaded;            /* 1 once loaded */
  em_path path;          /* the path that succeeded */
  int image_index;
  int from_cache;        /* 1 if the JIT output came from the disk cache */
  double load_ms;        /* wall time to get a loaded module */
  char detail[400];      /* each failed attempt before the success, and why */
} em_load_record;

EM_API em_status em_dispatch_load_record(em_device dev, const char *module,
                                         em_load_record *out);

/* Names of the kernel modules embedded in this library. */
EM_API em_status em_module_count(size_t *count);
EM_API em_status em_module_name(size_t index, const char **name);

#ifdef __cplusplus
}
#endif
#endif
