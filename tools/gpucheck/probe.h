/* Readers of the system for `gpucheck host`: the NVIDIA kernel module, the
 * GPUs it drives, the libcuda.so.1 a process would load, CUDA libraries on the
 * loader path, containers, WSL, and the environment variables that change what
 * CUDA sees. Nothing here creates a CUDA context.
 *
 * Every reader works relative to a root directory (gpucheck --root DIR or
 * $GPUCHECK_ROOT; NULL means "/"), so tests and offline diagnosis can point it
 * at a copied or hand-built tree. Under a root, /dev entries are only tested
 * for existence: a regular file stands in for a device node.
 *
 * Parsers of outside text take a buffer and its length (no NUL needed), never
 * read past it, and never fail on odd contents: they are fuzzed by
 * tests/fuzz/fuzz_gc_proc.c and fuzz_gc_fwdnote.c.
 *
 * Files: probe_parse.c (text parsers), probe_fwd.c (forward-compat ELF note),
 * probe.c (files under the root: module, GPUs, containers, WSL),
 * probe_libs.c (loader path, libcuda, libraries, NVML), probe_rules.c (what
 * the facts imply: compat eligibility, driver needs of libraries). */
#ifndef GPUCHECK_PROBE_H
#define GPUCHECK_PROBE_H

#include <stddef.h>

#define GC_PROBE_PATH 1024
#define GC_PROBE_MAX_GPUS 64
#define GC_PROBE_MAX_DIRS 64
#define GC_PROBE_MAX_LIBS 96
#define GC_PROBE_MAX_COMPAT 8
#define GC_PROBE_MAX_LIST 32

/* ------------------------------------------------------------ versions --- */

/* A dotted driver or library version: "550.54.15", "535.104", "35.3.1". */
typedef struct gc_version {
  int major, minor, patch; /* minor and patch -1 when absent */
  char text[32];           /* as written */
} gc_version;

/* Parses the whole of s[0..len) (blanks around it allowed) as 1 to 4 dotted
 * decimal numbers. Returns 0, or -1 (out zeroed) when it is not one. */
int gc_probe_parse_version(const char *s, size_t len, gc_version *out);
/* -1, 0, 1 comparing major, minor, patch (absent parts count as 0). */
int gc_probe_version_cmp(const gc_version *a, const gc_version *b);

/* The version after "<stem>.so." in a file name: ("libcuda.so.550.54.15",
 * "libcuda") -> "550.54.15"; "" and -1 when the name is not <stem>.so.VERSION
 * (a bare "libcuda.so", "libcuda.so.1.1" gives "1.1"). */
int gc_probe_soname_version(const char *file, const char *stem, char *ver, size_t cap);

/* ------------------------------------------------------- kernel module --- */

typedef struct gc_kmod {
  int found;
  gc_version v;
  int l4t;          /* a Jetson Linux (L4T) release number, not a driver branch */
  int open;         /* 1 open kernel module, 0 proprietary, -1 not said */
  char arch[16];    /* "x86_64", "aarch64"; "" when not said */
  char source[40];  /* the file the version came from */
  char note[200];   /* why it was not found, or what was odd */
} gc_kmod;

/* /proc/driver/nvidia/version. Formats (gpucheck-anchors.md 3.1):
 *   NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...
 *   NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58.02  Release Build ...
 *   NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  ... (Jetson L4T)
 * Returns 0 with out->found = 1, or -1 with out->note saying why. */
int gc_probe_parse_proc_version(const char *buf, size_t len, gc_kmod *out);
/* /sys/module/nvidia/version: "550.54.15\n". */
int gc_probe_parse_sys_version(const char *buf, size_t len, gc_kmod *out);

/* ----------------------------------------------- /proc/driver/nvidia/gpus --- */

typedef struct gc_proc_gpu {
  char bdf[32];     /* the directory name, e.g. "0000:3b:00.0" */
  char model[128];  /* "Model:" */
  char uuid[80];    /* "GPU UUID:" */
  char bus[32];     /* "Bus Location:" */
  int minor;        /* "Device Minor:", -1 when absent */
} gc_proc_gpu;

/* One gpus/<bdf>/information file. Returns 0 when a Model or a UUID was
 * found, -1 otherwise (fields that were found are still filled). */
int gc_probe_parse_gpu_information(const char *buf, size_t len, gc_proc_gpu *out);

/* -------------------------------------------------------------- cgroups --- */

/* The container runtime a /proc/<pid>/cgroup names in its paths: "kubernetes"
 * (kubepods), "docker", "podman" (libpod), "containerd", "lxc"; NULL when none
 * (cgroup v2 "0::/" inside a private namespace says nothing). */
const char *gc_probe_parse_cgroup(const char *buf, size_t len);

/* ----------------------------------------------------------- ld.so.conf --- */

/* Calls fn for each directory line and each "include PATTERN" of an
 * ld.so.conf file (comments, blank lines and "hwcap" lines skipped; an
 * old-style "dir=type" suffix dropped). */
typedef void (*gc_ldconf_fn)(void *ctx, int is_include, const char *value);
void gc_probe_parse_ld_conf(const char *buf, size_t len, gc_ldconf_fn fn, void *ctx);

/* ------------------------------------------------- CUDA_VISIBLE_DEVICES --- */

typedef struct gc_cvd {
  int set;              /* the variable exists */
  int empty;            /* set to "" (hides every device) */
  int n_items;          /* items in the value */
  int n_valid;          /* items before the first invalid one */
  int visible;          /* devices CUDA will show: n_valid, or -1 when unknown (no physical count) */
  int truncated_at;     /* index of the first invalid item, -1 if none */
  char invalid[64];     /* that item */
  char why[160];        /* why it is invalid */
  int mig;              /* an item names a MIG instance (MIG-...) */
} gc_cvd;

/* Evaluates CUDA_VISIBLE_DEVICES as the driver does (gpucheck-anchors.md
 * 3.5): comma-separated ordinals or GPU-UUID prefixes, the list ends at the
 * first invalid item, "" hides all. n_phys < 0 means the number of physical
 * GPUs is unknown (ordinals then count as valid); uuids (n_phys entries, may
 * be NULL) are the physical GPUs' UUIDs. value NULL = unset. */
void gc_probe_cvd(const char *value, int n_phys, const char *const *uuids, gc_cvd *out);

/* ----------------------------------------------- NVIDIA_VISIBLE_DEVICES --- */

typedef enum gc_nvd {
  GC_NVD_UNSET = 0, /* no variable */
  GC_NVD_EMPTY,     /* "" */
  GC_NVD_VOID,      /* "void": the runtime hook does nothing */
  GC_NVD_NONE,      /* "none": driver libraries but no GPU */
  GC_NVD_ALL,       /* "all" */
  GC_NVD_LIST       /* indices, UUIDs or MIG-... */
} gc_nvd;
gc_nvd gc_probe_nvd(const char *value);
const char *gc_probe_nvd_name(gc_nvd k);

/* ------------------------------------------------- forward-compat note --- */

/* The JSON of the ELF note ".note.cuda.fwd_compatibility" (owner "NVIDIA
 * Corporation") of a cuda-compat libcuda, e.g.
 *   {"Format":1,"CUDA Version":"12.9","Driver":[535,550,...],"Device":[1,2,7,...]}
 * (NVIDIA/nvidia-container-toolkit cmd/nvidia-cdi-hook/cudacompat/
 * cuda-elf-header.go and its test data). Driver = host kernel-module branches
 * it runs on, Device = NVML brand ids it runs on (gpucheck-anchors.md 1.4). */
typedef struct gc_fwd_note {
  int found;            /* the note exists and its JSON was read */
  int format;           /* "Format", 0 when absent */
  char cuda[16];        /* "CUDA Version" as written */
  int cuda_version;     /* 1000*major + 10*minor, 0 when unparseable */
  int has_drivers, n_drivers;
  int drivers[GC_PROBE_MAX_LIST];
  int has_devices, n_devices;
  int devices[GC_PROBE_MAX_LIST];
  char error[200];      /* why it was not read ("" when found or absent) */
} gc_fwd_note;

/* The JSON text alone. Returns 0, or -1 with out->error. */
int gc_probe_fwd_note_json(const char *json, size_t len, gc_fwd_note *out);
/* An ELF image in memory (libelf): finds the note section and reads it.
 * Returns 0 (out->found says whether the note exists), -1 when the ELF or
 * the note is malformed (out->error). */
int gc_probe_fwd_note_elf(const void *image, size_t size, gc_fwd_note *out);
/* The same for a file. */
int gc_probe_fwd_note_file(const char *path, gc_fwd_note *out);

/* ---------------------------------------------------------- NVML brands --- */

/* NVML brand ids (nvmlBrandType_t, NVIDIA's pynvml: NVML_BRAND_QUADRO = 1 ...
 * NVML_BRAND_TITAN_RTX = 16). */
const char *gc_probe_brand_name(int brand); /* "GeForce", "Tesla", ...; "unknown" */
/* A brand guessed from a product name when NVML cannot say: "GeForce" -> 5,
 * "TITAN" -> 6, "Quadro" -> 1, "Tesla" -> 2; -1 when the name does not say. */
int gc_probe_brand_from_name(const char *name);

/* A CC guessed from a product name by arch_table's representative GPUs
 * ("NVIDIA H100 80GB HBM3" -> 90, "NVIDIA GeForce RTX 3090" -> 86, "xx" in the
 * table matching digits). 0 when no row names it. */
int gc_probe_cc_from_name(const char *name);

/* ------------------------------------------------- files under the root --- */

/* root + path into out ("/" or NULL root: path itself). */
void gc_probe_path(const char *root, const char *path, char *out, size_t cap);
/* Reads at most cap-1 bytes of root/path, NUL-terminates; bytes read or -1. */
long gc_probe_read(const char *root, const char *path, char *buf, size_t cap);
int gc_probe_exists(const char *root, const char *path);
/* Follows symlinks of path inside the root (an absolute link target is taken
 * relative to the root, ".." never climbs above it). out is the final path as
 * seen inside the root. Returns 0 when it names an existing regular file, 1
 * when it exists but is not a regular file, -1 when it does not resolve. */
int gc_probe_resolve(const char *root, const char *path, char *out, size_t cap);

void gc_probe_kmod(const char *root, gc_kmod *out);
/* Entries of /proc/driver/nvidia/gpus, sorted by directory name. */
size_t gc_probe_proc_gpus(const char *root, gc_proc_gpu *out, size_t cap);
/* "/proc/driver/nvidia" exists (the driver's proc tree, even without GPUs). */
int gc_probe_proc_driver(const char *root);

typedef struct gc_container {
  int inside;
  char runtime[24];        /* "docker", "podman", "kubernetes", "containerd", "lxc", "" */
  char evidence[200];      /* what told: "/.dockerenv", "/proc/1/cgroup: docker" */
  int nvidiactl, uvm;      /* /dev/nvidiactl, /dev/nvidia-uvm exist */
  int n_dev_gpus;          /* /dev/nvidia0, /dev/nvidia1, ... */
  char dev_gpus[160];      /* "nvidia0 nvidia1" */
  int wsl;                 /* 0 not WSL, 1 WSL1 (no /dev/dxg), 2 WSL2 */
  int dxg;                 /* /dev/dxg exists */
  int wsl_lib;             /* /usr/lib/wsl/lib/libcuda.so.1 exists */
  char kernel[200];        /* /proc/version, first line */
} gc_container;
void gc_probe_container(const char *root, gc_container *out);

/* ---------------------------------------------------------- loader path --- */

typedef struct gc_ldpath {
  size_t n;
  char dirs[GC_PROBE_MAX_DIRS][256];  /* as seen inside the root */
  char from[GC_PROBE_MAX_DIRS][64];   /* "LD_LIBRARY_PATH", "/etc/ld.so.conf.d/x.conf", "default" */
} gc_ldpath;

/* The directories the dynamic loader searches, in order: LD_LIBRARY_PATH
 * (ld_library_path, may be NULL), the directories of /etc/ld.so.conf and the
 * files it includes (what ldconfig puts in ld.so.cache), then the default
 * directories (/lib/<triplet>, /usr/lib/<triplet>, /lib64, /usr/lib64, /lib,
 * /usr/lib). Duplicates are dropped. The real loader consults ld.so.cache
 * rather than these directories; the order is the same except when the cache
 * is stale (then ldconfig needs to run). */
void gc_probe_loader_dirs(const char *root, const char *ld_library_path, gc_ldpath *out);

typedef enum gc_libcuda_kind {
  GC_LIBCUDA_NONE = 0,   /* none on the path */
  GC_LIBCUDA_DRIVER = 1, /* the driver's own user-mode library */
  GC_LIBCUDA_COMPAT = 2, /* a forward-compatibility copy (cuda-compat) */
  GC_LIBCUDA_STUB = 3,   /* the toolkit's link-time stub: cuInit returns 34 */
  GC_LIBCUDA_WSL = 4     /* WSL2's /usr/lib/wsl/lib forwarder */
} gc_libcuda_kind;
const char *gc_probe_libcuda_kind_name(gc_libcuda_kind k);

typedef struct gc_libcuda {
  gc_libcuda_kind kind;
  char link[GC_PROBE_PATH];    /* the libcuda.so.1 the loader finds */
  char path[GC_PROBE_PATH];    /* the file it resolves to */
  char from[64];               /* which part of the search found it */
  char version[32];            /* from the file name: "550.54.15"; "" when not encoded */
  gc_fwd_note note;            /* for a compat copy */
  char shadowed[GC_PROBE_PATH];/* a different libcuda.so.1 later on the path, "" if none */
  char stub_seen[GC_PROBE_PATH]; /* when none was found: a stub libcuda.so seen on the path */
} gc_libcuda;

/* The libcuda.so.1 the loader would pick from dirs (file view). */
void gc_probe_libcuda(const char *root, const gc_ldpath *dirs, gc_libcuda *out);
/* Fills kind, version and note of out->path (set by the caller, e.g. the
 * file Ember loaded). */
void gc_probe_libcuda_classify(const char *root, gc_libcuda *out);

typedef struct gc_compat_copy {
  char path[GC_PROBE_PATH];    /* /usr/local/cuda-12.9/compat/libcuda.so.575.57.08 */
  char version[32];
  gc_fwd_note note;
} gc_compat_copy;
/* Every /usr/local/cuda*\/compat/libcuda.so.<version> (real files). */
size_t gc_probe_compat_copies(const char *root, gc_compat_copy *out, size_t cap);

/* ------------------------------------------------------- CUDA libraries --- */

typedef struct gc_lib {
  char name[32];               /* "cudart", "nvrtc", "cublas", "cublasLt", "cudnn", "cudnn_ops", "nccl" */
  char link[GC_PROBE_PATH];    /* the name on the path: .../libcudart.so.12 */
  char path[GC_PROBE_PATH];    /* the file behind it */
  char version[32];            /* from the file name: "12.4.127"; "12" when only the major is encoded */
  gc_version v;
  char from[64];               /* which part of the search */
  int shadowed_by;             /* index of the library of the same name and major the loader finds first, -1 */
} gc_lib;

/* Every libcudart/libnvrtc/libcublas/libcublasLt/libcudnn*\/libnccl .so.* in
 * dirs, one entry per distinct file, in search order. */
size_t gc_probe_libraries(const char *root, const gc_ldpath *dirs, gc_lib *out, size_t cap);

/* ----------------------------------------------------------------- NVML --- */

typedef struct gc_nvml_gpu {
  char uuid[96];
  int brand;                   /* nvmlBrandType_t, -1 unread */
  int mig_rc;                  /* nvmlDeviceGetMigMode's return: 0 read, 3 not supported, ... */
  unsigned mig_current, mig_pending; /* 1 enabled */
} gc_nvml_gpu;

typedef struct gc_nvml {
  int loaded;                  /* libnvidia-ml.so.1 loaded */
  int init_rc;                 /* nvmlInit_v2's return, -1 not called */
  char path[GC_PROBE_PATH];
  char driver[80];             /* nvmlSystemGetDriverVersion */
  size_t n;
  gc_nvml_gpu gpus[GC_PROBE_MAX_GPUS];
  char note[200];
} gc_nvml;

/* Loads libnvidia-ml.so.1 (live system only; never creates a CUDA context)
 * and reads the driver version, brands and MIG modes. Absent NVML is not an
 * error: out->loaded = 0 with a note. */
void gc_probe_nvml(gc_nvml *out);
const char *gc_probe_nvml_error_name(int rc);

/* ---------------------------------------------------------------- rules --- */

/* Whether a forward-compat libcuda may run here (cuda-compat.md 2.2 and 6,
 * gpucheck-anchors.md P5). Returns 0 eligible, 803 when the host kernel-module
 * branch is not in the note's Driver list, 804 when the GPU's brand is not in
 * its Device list, -1 when it cannot be decided (why says what is missing).
 * kmod_branch <= 0 and brand < 0 mean unknown. */
int gc_rule_fwd(const gc_fwd_note *n, int kmod_branch, int brand, char *why, size_t cap);

/* Driver needs of a runtime-side library of CUDA version lib_cuda
 * (1000*major+10*minor; minor may be unknown: lib_minor_known = 0) on a driver
 * of CUDA version drv_cuda and version text drv (NULL when unknown):
 * cuda-compat.md 0.1 step 2 and 2.2. Returns 0 fine, 1 runs under
 * minor-version compatibility only (newer APIs 36, newer PTX 222), 35 will fail
 * with cudaErrorInsufficientDriver. why and need_driver (the Linux driver
 * version that would make it fine) are filled. */
int gc_rule_runtime(int lib_cuda, int lib_minor_known, int drv_cuda, const char *drv, char *why, size_t cap,
                    char *need_driver, size_t need_cap);

/* Lowest CC of a cuDNN or cuBLAS version per arch_table's libreq rows
 * (library "cudnn" or "cublas"). Returns the lowest CC over the rows that
 * match (0 when none), *highest the highest such CC (rows for different CUDA
 * builds can differ), *row_version the row's version text. */
int gc_rule_lib_lowest_cc(const char *library, const gc_version *v, int *highest, const char **row_version);

#endif
