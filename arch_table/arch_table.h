/* Ember's compatibility knowledge, as data with a source and a confidence per
 * row (the TSV files in arch_table/data, generated into C at build time).
 * Pure lookups: no CUDA calls. Used by the runtime's selection policy and by
 * gpucheck.
 *
 * Encodings used throughout:
 *   CUDA version  1000*major + 10*minor (13.0 -> 13000), as cuDriverGetVersion.
 *   CC / SM       10*major + minor (3.5 -> 35, 12.0 -> 120).
 *   PTX ISA       10*major + minor (3.2 -> 32, 9.0 -> 90).
 *   conf          'C' confirmed, 'S' secondary, 'U' unconfirmed (carried, never asserted). */
#ifndef EMBER_ARCH_TABLE_H
#define EMBER_ARCH_TABLE_H

#include <stddef.h>

/* Feature flags of a compute capability. */
#define EM_FEAT_FP16_ARITH 0x01u  /* native half arithmetic (CC >= 5.3) */
#define EM_FEAT_TENSOR_CORES 0x02u /* CC >= 7.0 */
#define EM_FEAT_BF16 0x04u        /* CC >= 8.0 */
#define EM_FEAT_TF32 0x08u        /* CC >= 8.0 */
#define EM_FEAT_FP8 0x10u         /* CC >= 8.9 */
#define EM_FEAT_INT8_DP4A 0x20u   /* CC >= 6.1 */

typedef struct em_arch_row {
  int cc;                 /* 35 */
  const char *arch;       /* "Kepler", "Blackwell" */
  const char *codename;   /* "GK110", "GB100"; "" if not recorded */
  const char *gpus;       /* representative GPUs, "; "-separated */
  int tegra;              /* 1 for Jetson / Drive parts */
  unsigned features;      /* EM_FEAT_* */
  int first_toolkit;      /* first CUDA whose nvcc targets it */
  int last_toolkit;       /* last CUDA whose nvcc targets it; 0 = still current */
  char conf;
  const char *source;     /* source key(s), see arch_table/README.md */
} em_arch_row;

size_t em_arch_count(void);
const em_arch_row *em_arch_at(size_t i);
const em_arch_row *em_arch_lookup(int cc);   /* NULL when unknown */
/* Architecture name for any CC. For a CC the table does not know it returns
 * "unknown (CC X.Y)" from a thread-local buffer that the next call on the same
 * thread overwrites. Never NULL. */
const char *em_arch_name(int cc);

typedef struct em_toolkit_row {
  int cuda;               /* 11080 */
  int ptx_isa;            /* PTX ISA its nvcc emits: 78 */
  const char *targets;    /* real targets nvcc accepts, comma-separated: "35,37,50,...,90" ("90a", "100f") */
  const char *linux_driver;   /* minimum Linux driver of the GA release: "520.61.05" */
  const char *windows_driver; /* "" when not bundled */
  char conf;
  const char *source;
} em_toolkit_row;

size_t em_toolkit_count(void);
const em_toolkit_row *em_toolkit_at(size_t i);
const em_toolkit_row *em_toolkit_lookup(int cuda);       /* exact major.minor, NULL if unknown */
/* 1 if that toolkit's nvcc (and NVRTC) can target sm (variant 0, 'a' or 'f'). */
int em_toolkit_supports_sm(int cuda, int sm, char variant);

/* Lowest driver CUDA version (cuDriverGetVersion) able to JIT PTX of this ISA;
 * 0 for an ISA the table does not know (treat as not loadable). */
int em_ptx_isa_min_driver(int ptx_isa);
/* PTX ISA emitted by a toolkit (e.g. 13000 -> 90); 0 unknown. */
int em_toolkit_ptx_isa(int cuda);

/* Lowest cuDriverGetVersion that loads a cubin made by toolkit `cuda`:
 * CUDA 11+ is covered by minor-version compatibility within its major
 * (12.8 -> 12000), older toolkits need a driver of at least their own version. */
int em_cubin_min_driver(int cuda);

/* Minor-version-compatibility floor of a CUDA major (11, 12, 13): the lowest
 * Linux driver version string, e.g. "525.60.13"; NULL for majors without MVC. */
const char *em_mvc_floor_linux(int cuda_major);
const char *em_mvc_floor_windows(int cuda_major);

/* Driver branch -> the CUDA version it reports. */
typedef struct em_driver_branch_row {
  int branch;             /* 535 */
  int cuda;               /* 12020 */
  char conf;
  const char *source;
} em_driver_branch_row;
size_t em_driver_branch_count(void);
const em_driver_branch_row *em_driver_branch_at(size_t i);
/* CUDA version reported by a driver "535.104.05" (or "535"): exact branch row,
 * else the highest branch below it with *estimated = 1. 0 if unparseable or older than every row. */
int em_driver_cuda_version(const char *driver_version, int *estimated);
/* Minimum Linux driver string for a toolkit release (e.g. 12020 -> "535.54.03"). */
const char *em_toolkit_min_linux_driver(int cuda);

/* NVRTC sonames, newest first, with the CUDA version each belongs to
 * (CUDA 11.3-11.8 share "libnvrtc.so.11.2"; the real version comes from nvrtcVersion). */
typedef struct em_nvrtc_row {
  const char *soname;     /* "libnvrtc.so.12" */
  int cuda_low, cuda_high;/* range of CUDA versions shipping it */
  int has_get_cubin;      /* nvrtcGetCUBIN available (>= 11.1) */
  int has_supported_archs;/* nvrtcGetSupportedArchs available (>= 11.2) */
  char conf;
  const char *source;
} em_nvrtc_row;
size_t em_nvrtc_count(void);
const em_nvrtc_row *em_nvrtc_at(size_t i);

/* Library requirement rows (cuDNN, cuBLAS): lowest CC per major. */
typedef struct em_libreq_row {
  const char *library;    /* "cudnn", "cublas" */
  const char *version;    /* "9.17", "13" */
  int built_for_cuda;     /* 13000, or 0 when any */
  int lowest_cc;          /* 75 */
  const char *linux_driver; /* "580.65.06" or "" */
  char conf;
  const char *source;
} em_libreq_row;
size_t em_libreq_count(void);
const em_libreq_row *em_libreq_at(size_t i);
/* Lowest CC that `library` ("cudnn", "cublas") of version major.minor.patch
 * supports (minor -1 when only the major is known), from the rows whose
 * version range holds it, else from the nearest row below it in its major.
 * 0 when no row matches. *highest: the highest such CC (rows for different
 * CUDA builds can differ); *row_version: the matching row's version text.
 * Either may be NULL. */
int em_libreq_lowest_cc(const char *library, int major, int minor, int patch, int *highest, const char **row_version);

/* PyTorch wheel variants: release, CUDA variant, TORCH_CUDA_ARCH_LIST (Linux x86_64). */
typedef struct em_torch_row {
  const char *release;    /* "2.9" */
  const char *variant;    /* "cu130" */
  int cuda;               /* 13000 */
  const char *arch_list;  /* "7.5;8.0;8.6;9.0;10.0;12.0+PTX" */
  char conf;
  const char *source;
} em_torch_row;
size_t em_torch_count(void);
const em_torch_row *em_torch_at(size_t i);
/* Row for "2.9" + "cu130" (a patch release "1.12.1" matches "1.12"), NULL if unknown. */
const em_torch_row *em_torch_lookup(const char *release, const char *variant);

/* CUDA error codes: every CUresult (api "driver") and cudaError_t ("runtime")
 * of the CUDA 13.0 headers, and the NVML return codes users meet ("nvml"),
 * with the header's description and, for the codes that matter, Ember's
 * usual causes and what to check (cuda_errors.tsv). Used by the runtime's
 * error messages and by `gpucheck explain`. */
typedef struct em_cuda_error_row {
  const char *api;         /* "driver", "runtime" or "nvml" */
  int number;              /* 209 */
  const char *name;        /* "CUDA_ERROR_NO_BINARY_FOR_GPU" */
  const char *description; /* the header's doc comment, first sentence */
  const char *message;     /* cudaGetErrorString text (runtime), nvmlErrorString as quoted (nvml); "" unknown */
  const char *causes;      /* usual causes; "" when Ember has written none */
  const char *check;       /* what to check and the fix; "" when Ember has written none */
  const char *pains;       /* "P1,P2": user-pain categories of Ember's research notes (gpucheck-anchors.md
                              section 2; labels, not citations: the public threads are in source); "" none */
  char conf;
  const char *source;
} em_cuda_error_row;
size_t em_cuda_error_count(void);
const em_cuda_error_row *em_cuda_error_at(size_t i);
/* The row of a number in one API ("driver", "runtime", "nvml"); NULL if that
 * API has no such code (the driver API has no 35, for instance). */
const em_cuda_error_row *em_cuda_error_lookup(const char *api, int number);
/* The row of a name of any API, compared case-insensitively
 * ("cudaerrornokernelimagefordevice" finds cudaErrorNoKernelImageForDevice); NULL if unknown. */
const em_cuda_error_row *em_cuda_error_by_name(const char *name);

/* Sources (sources.tsv): the key every row's `source` names, what it is, and
 * the address a user can open. gpucheck cites sources by their url, never by
 * the research notes the rows were written from. */
typedef struct em_source_row {
  const char *key;   /* "MVC" */
  const char *where; /* what the source is (a URL with notes, or repo:path) */
  const char *url;   /* "https://docs.nvidia.com/..."; "" when there is none (LOCAL, notes) */
} em_source_row;
size_t em_source_count(void);
const em_source_row *em_source_at(size_t i);
const em_source_row *em_source_lookup(const char *key); /* exact key; NULL if unknown */
/* The url of the first key in a comma-separated list ("CUDA13-HDR,MVC") that
 * has one; NULL when none has (or keys is NULL). */
const char *em_source_url(const char *keys);
/* Calls fn with the url of each key of the list that has one, in order;
 * returns how many. */
size_t em_source_urls(const char *keys, void (*fn)(const char *url, void *ctx), void *ctx);

/* The last driver branch that supports an architecture ("Kepler" -> 470). */
typedef struct em_arch_support_row {
  const char *arch;
  int last_branch;
  char conf;
  const char *source;
} em_arch_support_row;
size_t em_arch_support_count(void);
const em_arch_support_row *em_arch_support_at(size_t i);
/* NULL when the architecture is still supported by current branches. */
const em_arch_support_row *em_arch_support_lookup(const char *arch);

#endif
