/* `gpucheck inspect FILE... [--gpu NAME|CC]... [--driver VER] [--kernels] [--all]`:
 * the GPU code inside files (images.h) and, per target GPU and driver,
 * whether it runs natively, through the PTX JIT, or not at all, with the
 * rule that decides and the fix.
 *
 * Targets: each --gpu, else every local GPU through Ember's public API
 * (em_driver_get_info / em_device_get_info, so EMBER_LIBCUDA points it at
 * the fake driver in tests). Driver: --driver, else the local one.
 *
 * Cost: files are read in gc_images_read_ex's AUTO mode (compressed entries
 * are decompressed only when the file's GPU code is small). A large library
 * (libcublasLt: 2,782 containers, 133 MiB of zstd) is then listed from its
 * entry headers in ~0.1 s. Only when an answer depends on what the headers
 * do not say (the toolkit of a compressed cubin, which matters on a driver
 * older than the newest toolkit arch_table knows) is the file read again
 * with every entry decompressed (~1.2 s for libcublasLt); --kernels always
 * does that. Large files are summarised per (kind, arch, variant, ISA,
 * compression); --all lists every entry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "arch_table.h"
#include "ember/device.h"
#include "gpucheck.h"
#include "images.h"

#define MAX_TARGETS 64
#define LIST_MAX 40 /* files with more images are summarised unless --all */

typedef struct target {
  char name[320];
  int cc;
} target;

typedef struct inspect_args {
  const char **files;
  int n_files;
  target targets[MAX_TARGETS];
  int n_targets;
  int gpus_given;
  const char *driver_arg;
  int driver;          /* CUDA version (cuDriverGetVersion encoding), 0 unknown */
  int driver_estimated;
  char driver_from[96];
  int kernels, all;
} inspect_args;

static void usage(void) {
  fprintf(stderr, "usage: gpucheck inspect FILE... [--gpu NAME|CC]... [--driver VER] [--kernels] [--all]\n"
                  "  FILE       ELF executable or library, .fatbin, .cubin, .ptx, or an Ember library\n"
                  "  --gpu      check against this GPU (\"8.6\", \"sm_90\", \"A100\"); repeatable; default: the local GPUs\n"
                  "  --driver   driver as \"535.104.05\", \"535\", \"12.2\" or \"12020\"; default: the local driver\n"
                  "  --kernels  decompress every image and list its kernels\n"
                  "  --all      list every image of large files instead of a summary\n");
}

/* "535.104.05" / "535" (a driver release), "12.2" (a CUDA version), "12020"
 * (cuDriverGetVersion). Returns the CUDA version or 0. */
static int parse_driver(const char *s, int *estimated) {
  *estimated = 0;
  int a, b, n = 0;
  char tail;
  if (sscanf(s, "%d%n", &a, &n) != 1 || a <= 0) return 0;
  if (a >= 1000 && s[n] == '\0') return a; /* 12020 */
  if (a >= 100) return em_driver_cuda_version(s, estimated); /* 535 or 535.104.05 */
  if (sscanf(s, "%d.%d%c", &a, &b, &tail) == 2 && b >= 0 && b < 100) return a * 1000 + b * 10;
  if (s[n] == '\0') return a * 1000; /* "13" */
  return 0;
}

static int parse_args(int argc, char **argv, inspect_args *a) {
  a->files = calloc((size_t)argc, sizeof *a->files);
  if (!a->files) return GC_EXIT_INTERNAL;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--gpu") || !strcmp(arg, "--driver")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "gpucheck inspect: %s needs a value\n", arg);
        usage();
        return GC_EXIT_USAGE;
      }
      const char *v = argv[++i];
      if (!strcmp(arg, "--driver")) {
        a->driver_arg = v;
        continue;
      }
      if (a->n_targets == MAX_TARGETS) {
        fprintf(stderr, "gpucheck inspect: at most %d --gpu\n", MAX_TARGETS);
        return GC_EXIT_USAGE;
      }
      target *t = &a->targets[a->n_targets];
      char err[256];
      if (gc_gpu_parse(v, &t->cc, t->name, sizeof t->name, err, sizeof err) != 0) {
        fprintf(stderr, "gpucheck inspect: --gpu %s: %s\n", v, err);
        return GC_EXIT_USAGE;
      }
      a->n_targets++;
      a->gpus_given = 1;
    } else if (!strcmp(arg, "--kernels")) {
      a->kernels = 1;
    } else if (!strcmp(arg, "--all")) {
      a->all = 1;
    } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      usage();
      return GC_EXIT_USAGE;
    } else if (arg[0] == '-' && arg[1]) {
      fprintf(stderr, "gpucheck inspect: unknown option '%s'\n", arg);
      usage();
      return GC_EXIT_USAGE;
    } else {
      a->files[a->n_files++] = arg;
    }
  }
  if (a->n_files == 0) {
    fprintf(stderr, "gpucheck inspect: no FILE given\n");
    usage();
    return GC_EXIT_USAGE;
  }
  if (a->driver_arg) {
    a->driver = parse_driver(a->driver_arg, &a->driver_estimated);
    if (a->driver <= 0) {
      fprintf(stderr,
              "gpucheck inspect: --driver %s: not a driver version (\"535.104.05\", \"535\") or a CUDA version "
              "(\"12.2\", \"12020\") that arch_table knows\n",
              a->driver_arg);
      return GC_EXIT_USAGE;
    }
    snprintf(a->driver_from, sizeof a->driver_from, "--driver %s%s", a->driver_arg,
             a->driver_estimated ? ", estimated from its branch" : "");
  }
  return 0;
}

/* The local driver and, when no --gpu was given, the local GPUs. Fills why
 * there are none into `none` (a CPU-only host is not an error). */
static void local_targets(inspect_args *a, char *none, size_t none_cap) {
  em_driver_info di;
  memset(&di, 0, sizeof di);
  if (em_driver_get_info(&di) != EM_OK) {
    snprintf(none, none_cap, "the CUDA driver could not be queried: %s", em_last_error());
    return;
  }
  if (!a->driver_arg && di.driver_version > 0) {
    a->driver = di.driver_version;
    snprintf(a->driver_from, sizeof a->driver_from, "the local driver");
  }
  if (a->gpus_given) return;
  int n = 0;
  if (di.state != EM_DRIVER_OK || em_cuda_device_count(&n) != EM_OK || n <= 0) {
    snprintf(none, none_cap, "%s", di.message[0] ? di.message : "no CUDA device is visible");
    return;
  }
  for (int i = 0; i < n && a->n_targets < MAX_TARGETS; i++) {
    em_device_info info;
    if (em_device_get_info(em_cuda(i), &info) != EM_OK) continue;
    target *t = &a->targets[a->n_targets++];
    t->cc = info.cc_major * 10 + info.cc_minor;
    snprintf(t->name, sizeof t->name, "%s (GPU %d, CC %d.%d)", info.name, i, info.cc_major, info.cc_minor);
  }
}

/* ------------------------------------------------------------ naming --- */

static const char *comp_name(int c) { return c == 1 ? "lz4" : c == 2 || c == GC_COMP_EMBER_ZSTD ? "zstd" : ""; }
static const char *vstr(char v) { return v == 'a' ? "a" : v == 'f' ? "f" : ""; }

/* "sm_90a" / "compute_90" / "lto_90" */
static void arch_str(const gc_image *m, char *buf, size_t cap) {
  const char *p = m->kind == GC_IMG_CUBIN ? "sm" : m->kind == GC_IMG_PTX ? "compute" : m->kind == GC_IMG_LTOIR ? "lto" : "arch";
  if (m->kind == GC_IMG_OTHER && m->arch == 0) snprintf(buf, cap, "(any GPU)");
  else snprintf(buf, cap, "%s_%d%s", p, m->arch, vstr(m->variant));
}

static void bytes_str(uint64_t n, char *buf, size_t cap) {
  if (n < 1024) snprintf(buf, cap, "%llu B", (unsigned long long)n);
  else if (n < (1u << 20)) snprintf(buf, cap, "%.1f KiB", n / 1024.0);
  else snprintf(buf, cap, "%.1f MiB", n / 1048576.0);
}

/* ------------------------------------------------------------ listing --- */

static void image_check(gc_section *sec, const gc_image_set *s, size_t i, int show_kernels) {
  const gc_image *m = &s->images[i];
  char arch[32], sz[32], un[32], tk[16], id[48], extra[160] = "";
  arch_str(m, arch, sizeof arch);
  bytes_str(m->size, sz, sizeof sz);
  bytes_str(m->uncompressed, un, sizeof un);
  size_t e = 0;
  if (m->kind == GC_IMG_PTX && m->ptx_isa > 0)
    e += (size_t)snprintf(extra + e, sizeof extra - e, ", PTX ISA %d.%d", m->ptx_isa / 10, m->ptx_isa % 10);
  if (m->abi_version > 0 && e < sizeof extra)
    e += (size_t)snprintf(extra + e, sizeof extra - e, ", ELF ABI %s", m->abi_version >= 8 ? "V2" : "V1");
  if (m->toolkit > 0 && e < sizeof extra)
    e += (size_t)snprintf(extra + e, sizeof extra - e, ", CUDA %s", gc_cuda_str(m->toolkit, tk));
  if (m->n_kernels > 0 && e < sizeof extra)
    snprintf(extra + e, sizeof extra - e, ", %d kernel%s", m->n_kernels, m->n_kernels == 1 ? "" : "s");
  const char *kn = m->kind == GC_IMG_OTHER && !strcmp(s->format, "ember") ? "NVRTC source/header"
                   : m->kind == GC_IMG_PTX                                  ? "PTX"
                                                                            : gc_image_kind_name(m->kind);
  snprintf(id, sizeof id, "image.%zu", i);
  gc_check *c;
  if (m->compression)
    c = gc_check_add(sec, GC_INFO, id, "%s %s: %s %s -> %s%s", kn, arch, comp_name(m->compression), sz, un, extra);
  else
    c = gc_check_add(sec, GC_INFO, id, "%s %s: %s%s", kn, arch, sz, extra);
  if (show_kernels && m->kernels[0])
    gc_check_detail(c, "kernels: %s%s", m->kernels, strlen(m->kernels) + 1 >= sizeof m->kernels ? " ..." : "");
}

/* Summary of a large file: one line per (kind, arch, variant, PTX ISA, compression). */
typedef struct group {
  gc_image_kind kind;
  int arch, isa, comp;
  char variant;
  size_t count;
  uint64_t stored, plain;
} group;

static int group_cmp(const void *pa, const void *pb) {
  const group *a = pa, *b = pb;
  if (a->kind != b->kind) return (int)a->kind - (int)b->kind;
  if (a->arch != b->arch) return a->arch - b->arch;
  if (a->variant != b->variant) return a->variant - b->variant;
  if (a->isa != b->isa) return a->isa - b->isa;
  return a->comp - b->comp;
}

static void summary_checks(gc_section *sec, const gc_image_set *s, json_t *groups_json) {
  group *g = calloc(s->n ? s->n : 1, sizeof *g);
  if (!g) return;
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++) {
    const gc_image *m = &s->images[i];
    size_t k = 0;
    while (k < n && !(g[k].kind == m->kind && g[k].arch == m->arch && g[k].variant == m->variant &&
                      g[k].isa == m->ptx_isa && g[k].comp == m->compression))
      k++;
    if (k == n) g[n++] = (group){m->kind, m->arch, m->ptx_isa, m->compression, m->variant, 0, 0, 0};
    g[k].count++;
    g[k].stored += m->size;
    g[k].plain += m->uncompressed;
  }
  qsort(g, n, sizeof *g, group_cmp);
  for (size_t k = 0; k < n; k++) {
    gc_image probe = {.kind = g[k].kind, .arch = g[k].arch, .variant = g[k].variant};
    char arch[32], sz[32], un[32], isa[24] = "", id[64];
    arch_str(&probe, arch, sizeof arch);
    bytes_str(g[k].stored, sz, sizeof sz);
    bytes_str(g[k].plain, un, sizeof un);
    if (g[k].kind == GC_IMG_PTX) snprintf(isa, sizeof isa, ", PTX ISA %d.%d", g[k].isa / 10, g[k].isa % 10);
    snprintf(id, sizeof id, "images.%s.%s%s%s", gc_image_kind_name(g[k].kind), arch, g[k].comp ? "." : "", comp_name(g[k].comp));
    if (g[k].kind == GC_IMG_PTX) snprintf(id + strlen(id), sizeof id - strlen(id), ".isa%d", g[k].isa);
    gc_check_add(sec, GC_INFO, id, "%s %s%s: %zu entr%s, %s%s%s%s%s", g[k].kind == GC_IMG_PTX ? "PTX" : gc_image_kind_name(g[k].kind), arch, isa, g[k].count,
                 g[k].count == 1 ? "y" : "ies", g[k].comp ? comp_name(g[k].comp) : "", g[k].comp ? " " : "", sz,
                 g[k].comp ? " -> " : "", g[k].comp ? un : "");
    json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:I}", "kind", gc_image_kind_name(g[k].kind), "arch", g[k].arch,
                          "variant", vstr(g[k].variant), "compressed", comp_name(g[k].comp), "count",
                          (json_int_t)g[k].count, "size", (json_int_t)g[k].stored, "uncompressed", (json_int_t)g[k].plain);
    if (g[k].kind == GC_IMG_PTX) {
      char b[16];
      snprintf(b, sizeof b, "%d.%d", g[k].isa / 10, g[k].isa % 10);
      json_object_set_new(o, "ptx_isa", json_string(b));
    }
    json_array_append_new(groups_json, o);
  }
  free(g);
}

/* "3 images in 1 fatbin container: 2 cubins, 1 PTX" */
static void overview(const gc_image_set *s, char *buf, size_t cap) {
  size_t cubins = 0, ptx = 0, other = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (s->images[i].kind == GC_IMG_CUBIN) cubins++;
    else if (s->images[i].kind == GC_IMG_PTX) ptx++;
    else other++;
  }
  int ember = !strcmp(s->format, "ember"), single = !strcmp(s->format, "ptx") || !strcmp(s->format, "cubin");
  char where[64] = "";
  if (!single)
    snprintf(where, sizeof where, " in %zu %s%s", s->containers, ember ? "kernel module" : "fatbin container",
             s->containers == 1 ? "" : "s");
  char rest[64] = "";
  if (other) snprintf(rest, sizeof rest, ", %zu %s", other, ember ? "NVRTC sources/headers" : "of other kinds (LTO-IR, ...)");
  snprintf(buf, cap, "%zu image%s%s: %zu cubin%s, %zu PTX%s", s->n, s->n == 1 ? "" : "s", where, cubins,
           cubins == 1 ? "" : "s", ptx, rest);
}

/* ------------------------------------------------------------ verdict --- */

/* Is some cubin's loadability unknown because its toolkit was not read? It
 * matters only below the driver that loads cubins of every toolkit
 * arch_table knows (minor-version compatibility within a major). */
static int toolkit_matters(const gc_image_set *s, int driver) {
  if (driver <= 0) return 0;
  int newest = 0;
  for (size_t i = 0; i < em_toolkit_count(); i++)
    if (em_toolkit_at(i)->cuda > newest) newest = em_toolkit_at(i)->cuda;
  if (driver >= em_cubin_min_driver(newest)) return 0;
  for (size_t i = 0; i < s->n; i++)
    if (s->images[i].kind == GC_IMG_CUBIN && s->images[i].toolkit == 0 && gc_driver_decompresses(&s->images[i])) return 1;
  return 0;
}

/* How to get an Ember cubin for this SM (Makefile knobs EMBER_ARCHS and
 * NVCC_LEGACY; the host nvcc of CUDA 13 starts at sm_75). When the file
 * already carries a cubin of exactly this SM that this driver cannot load (a
 * CUDA 13 one on R535, say: Ember skips it), the fix is the driver that loads
 * it, or a build that also carries the NVRTC 11.8 / 12.9 cubins (.tools/). */
static const char *ember_rebuild(const gc_image_set *s, int cc, int driver, char *buf, size_t cap) {
  const em_arch_row *row = em_arch_lookup(cc);
  int lowest = 0, nvrtc_cubins = 0;
  for (size_t i = 0; i < s->n; i++) {
    const gc_image *m = &s->images[i];
    int need = m->toolkit > 0 ? em_cubin_min_driver(m->toolkit) : 0;
    if (m->kind == GC_IMG_CUBIN && m->arch == cc && driver > 0 && need > driver && (!lowest || need < lowest))
      lowest = need;
    /* A CUDA 11.x / 12.x cubin of sm_75 or newer: the build had them already. */
    nvrtc_cubins |= m->kind == GC_IMG_CUBIN && m->arch >= 75 && m->toolkit >= 11000 && m->toolkit < 13000;
  }
  if (lowest) {
    char v[16];
    const char *lin = em_mvc_floor_linux(lowest / 1000);
    snprintf(buf, cap, "install a driver for CUDA %s or newer%s%s%s, which loads the sm_%d cubin this file carries%s",
             gc_cuda_str(lowest, v), lin ? " (Linux >= " : "", lin ? lin : "", lin ? ")" : "", cc,
             nvrtc_cubins ? "" : "; or rebuild Ember with the PyPI NVRTCs in .tools/ (bash build-tools/pypi_tools.sh), "
                                 "whose cubins load on CUDA 11.x and 12.x drivers");
  } else if (row && row->last_toolkit > 0) {
    char v[16];
    snprintf(buf, cap, "rebuild Ember with NVCC_LEGACY=/path/to/nvcc of CUDA %s or older (it adds cubins for "
                       "SMs below 7.5)",
             gc_cuda_str(row->last_toolkit, v));
  } else {
    snprintf(buf, cap, "rebuild Ember with %d in EMBER_ARCHS (make EMBER_ARCHS=\"... %d\")", cc, cc);
  }
  return buf;
}

static void fix_for(gc_check *c, const gc_image_set *s, const gc_run_verdict *v, int cc, int driver) {
  const gc_image *m = v->image >= 0 ? &s->images[v->image] : NULL;
  const em_arch_row *row = em_arch_lookup(cc);
  char need[16], dv[16], rb[400];
  int ember = !strcmp(s->format, "ember");
  switch (v->run) {
  case GC_RUN_NATIVE:
    gc_check_fix(c, "upgrade the driver to R550 (550.54.14, CUDA 12.4) or newer, or rebuild without zstd "
                    "compression (-Xfatbin -compress=false, or LZ4 with --compress-mode=speed)");
    break;
  case GC_RUN_PTX_JIT: {
    char tk[48] = "";
    if (row && row->last_toolkit > 0)
      snprintf(tk, sizeof tk, " (needs nvcc of CUDA %s or older)", gc_cuda_str(row->last_toolkit, need));
    if (ember)
      gc_check_fix(c,
                   "expect a slow first load while the driver compiles the PTX; Ember caches the result on disk "
                   "(EMBER_CACHE_DIR). For a native cubin, %s",
                   ember_rebuild(s, cc, driver, rb, sizeof rb));
    else
      gc_check_fix(c,
                   "expect a slow first start while the driver compiles the PTX (then it is cached; raise "
                   "CUDA_CACHE_MAXSIZE for large code); for a native start rebuild with "
                   "-gencode arch=compute_%d,code=sm_%d%s (PyTorch extensions: TORCH_CUDA_ARCH_LIST=\"%d.%d\")",
                   cc, cc, tk, cc / 10, cc % 10);
    break;
  }
  case GC_RUN_PTX_TOO_NEW: {
    int req = em_ptx_isa_min_driver(m->ptx_isa);
    const char *lin = req ? em_toolkit_min_linux_driver(req) : NULL;
    gc_check_fix(c,
                 "install a driver for CUDA %s or newer%s%s%s, or rebuild the PTX with a toolkit no newer than the "
                 "driver (CUDA %s), or add a cubin for this GPU (-gencode arch=compute_%d,code=sm_%d; a cubin needs "
                 "no JIT and, from CUDA 11, loads on any driver of its major)",
                 req ? gc_cuda_str(req, need) : "newer than any known", lin ? " (Linux >= " : "", lin ? lin : "",
                 lin ? ")" : "", gc_cuda_str(driver, dv), cc, cc);
    break;
  }
  case GC_RUN_CUBIN_TOO_NEW: {
    int major = m->toolkit / 1000;
    const char *floor = em_mvc_floor_linux(major);
    gc_check_fix(c, "install a driver for CUDA %d.0 or newer%s%s%s, or rebuild with CUDA %d.x (the driver's major)",
                 major, floor ? " (Linux >= " : "", floor ? floor : "", floor ? ")" : "", driver / 1000);
    break;
  }
  case GC_RUN_NO_IMAGE:
    if (ember) {
      gc_check_fix(c, "Ember falls back to NVRTC (when a CUDA NVRTC that knows sm_%d is installed) or to the CPU; "
                      "`gpucheck` on the host shows the plan. For a native cubin, %s",
                   cc, ember_rebuild(s, cc, driver, rb, sizeof rb));
    } else {
      char tk[48] = "";
      if (row && row->last_toolkit > 0)
        snprintf(tk, sizeof tk, " (needs nvcc of CUDA %s or older)", gc_cuda_str(row->last_toolkit, need));
      gc_check_fix(c,
                   "rebuild with a cubin for this GPU: -gencode arch=compute_%d,code=sm_%d%s (PyTorch extensions: "
                   "TORCH_CUDA_ARCH_LIST=\"%d.%d\"), and add PTX of the lowest arch you support (code=compute_XY, "
                   "or \"+PTX\" in TORCH_CUDA_ARCH_LIST) so newer GPUs can JIT it",
                   cc, cc, tk, cc / 10, cc % 10);
    }
    break;
  }
}

static void target_check(gc_section *sec, const gc_image_set *s, const target *t, int ti, const inspect_args *a,
                         json_t *targets_json) {
  gc_run_verdict v;
  gc_images_verdict(s, t->cc, a->driver, &v);
  const gc_image *m = v.image >= 0 ? &s->images[v.image] : NULL;
  int zstd_risk = m && m->compression == 2 && a->driver > 0 && a->driver < 12040;
  int ember = !strcmp(s->format, "ember");
  gc_verdict verdict = v.run == GC_RUN_NATIVE ? (zstd_risk ? GC_WARN : GC_OK)
                       : v.run == GC_RUN_PTX_JIT ? GC_WARN
                       : v.run == GC_RUN_NO_IMAGE && ember ? GC_WARN
                                                             : GC_FAIL;
  char id[32], dv[16];
  snprintf(id, sizeof id, "run.%d", ti);
  gc_cuda_str(a->driver, dv);
  gc_check *c = gc_check_add(sec, verdict, id, "%s, driver CUDA %s: %s", t->name, dv,
                             ember && v.run == GC_RUN_NO_IMAGE ? "no prebuilt image (Ember falls back to NVRTC or CPU)"
                                                               : gc_run_name(v.run));
  gc_check_detail(c, "%s%s%s%s", v.why, a->driver_from[0] ? " [driver: " : "", a->driver_from,
                  a->driver_from[0] ? "]" : "");
  gc_check_source(c, gc_run_sources(v.run));
  if (verdict != GC_OK) fix_for(c, s, &v, t->cc, a->driver);
  char cc[16];
  snprintf(cc, sizeof cc, "%d.%d", t->cc / 10, t->cc % 10);
  gc_check_set(c, "cc", json_string(cc));
  gc_check_set(c, "run", json_string(gc_run_key(v.run)));
  json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "gpu", t->name, "cc", cc, "run", gc_run_key(v.run), "why", v.why);
  json_object_set_new(o, "driver_cuda", a->driver > 0 ? json_integer(a->driver) : json_null());
  if (a->driver_estimated) json_object_set_new(o, "driver_estimated", json_true());
  json_object_set_new(o, "image", v.image >= 0 ? json_integer(v.image) : json_null());
  json_object_set_new(o, "verdict", json_string(gc_verdict_name(verdict)));
  json_array_append_new(targets_json, o);
}

/* ---------------------------------------------------------------- main --- */

static int inspect_file(gc_report *r, const char *path, const inspect_args *a, const char *no_target_why,
                        json_t *files_json) {
  gc_image_set s;
  char err[1200];
  if (gc_images_read_ex(path, a->kernels ? GC_READ_ALL : GC_READ_AUTO, &s, err, sizeof err) != 0) {
    fprintf(stderr, "gpucheck inspect: %s\n", err);
    return GC_EXIT_INPUT;
  }
  if (!a->kernels && a->n_targets > 0 && toolkit_matters(&s, a->driver)) {
    gc_images_free(&s);
    if (gc_images_read_ex(path, GC_READ_ALL, &s, err, sizeof err) != 0) {
      fprintf(stderr, "gpucheck inspect: %s\n", err);
      return GC_EXIT_INPUT;
    }
  }
  gc_section *sec = gc_section_add(r, path);
  char ov[256];
  overview(&s, ov, sizeof ov);
  gc_check *c = gc_check_add(sec, GC_INFO, "images", "%s (%s): %s", path, s.format, ov);
  if (s.note[0]) gc_check_detail(c, "%s", s.note);

  json_t *images = json_array();
  for (size_t i = 0; i < s.n; i++) json_array_append_new(images, gc_image_json(&s.images[i]));
  json_t *file = json_pack("{s:s, s:s, s:o, s:I}", "path", path, "format", s.format, "images", images, "containers",
                           (json_int_t)s.containers);
  if (s.note[0]) json_object_set_new(file, "note", json_string(s.note));
  if (s.n <= LIST_MAX || a->all) {
    for (size_t i = 0; i < s.n; i++) image_check(sec, &s, i, a->kernels);
  } else {
    json_t *groups = json_array();
    summary_checks(sec, &s, groups);
    json_object_set_new(file, "groups", groups);
  }
  json_t *targets = json_array();
  size_t code = 0;
  for (size_t i = 0; i < s.n; i++) code += s.images[i].kind == GC_IMG_CUBIN || s.images[i].kind == GC_IMG_PTX;
  if (code == 0) {
    /* A CPU-only program, or one that loads its GPU code from elsewhere:
     * nothing here can fail on a GPU. */
    c = gc_check_add(sec, GC_INFO, "run.no-gpu-code", "no cubin or PTX in this file: nothing in it runs on a GPU");
    gc_check_detail(c, "a CUDA program's kernels may live in a shared library it loads: inspect that library");
  } else {
    for (int t = 0; t < a->n_targets; t++) target_check(sec, &s, &a->targets[t], t, a, targets);
  }
  if (code > 0 && a->n_targets == 0) {
    c = gc_check_add(sec, GC_INFO, "run.none", "no GPU to check against");
    gc_check_detail(c, "%s", no_target_why);
    gc_check_fix(c, "give --gpu NAME|CC (repeatable) and --driver VERSION to check offline");
  }
  json_object_set_new(file, "targets", targets);
  json_array_append_new(files_json, file);
  gc_images_free(&s);
  return 0;
}

int gc_cmd_inspect(int argc, char **argv, const gc_opts *o, gc_report **out) {
  (void)o; /* --root does not apply: files are named on the command line */
  inspect_args a;
  memset(&a, 0, sizeof a);
  int rc = parse_args(argc, argv, &a);
  if (rc) {
    free(a.files);
    return rc;
  }
  char none[600] = "";
  if (!a.gpus_given || !a.driver_arg) local_targets(&a, none, sizeof none);
  if (a.n_targets == 0 && !none[0]) snprintf(none, sizeof none, "no CUDA device is visible");
  gc_report *r = gc_report_new("inspect");
  if (!r) {
    free(a.files);
    return GC_EXIT_INTERNAL;
  }
  json_t *files = json_array();
  json_object_set_new(r->facts, "files", files);
  for (int i = 0; i < a.n_files; i++) {
    rc = inspect_file(r, a.files[i], &a, none, files);
    if (rc) {
      gc_report_free(r);
      free(a.files);
      return rc;
    }
  }
  free(a.files);
  *out = r;
  return 0;
}
