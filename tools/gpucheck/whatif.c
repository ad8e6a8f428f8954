/* gpucheck whatif: would this combination of GPU, driver, CUDA runtime,
 * container image requirement, PyTorch wheel and binary run? Offline: every
 * answer comes from arch_table's data and the rules of cuda-compat.md, never
 * from a GPU. Each rule is its own check, with the reason and the fix; the
 * output cites the public page that states the rule (gc_check_source with a
 * sources.tsv key: MVC, FWD, PTXMAP, ...), never the notes below.
 *
 * Rules and where they come from (shared/reference, for developers):
 *   compat.backward  a driver runs any runtime up to the CUDA version it reports   cuda-compat.md 0.1, 2.2
 *   compat.minor     CUDA 11+: same major and driver >= the major's MVC floor; newer
 *                    APIs fail with 36, newer PTX fails to JIT with 222            cuda-compat.md 2.2
 *   compat.major     a runtime of a newer major (or < 11 and newer) fails with 35  cuda-compat.md 2.2, 6
 *   compat.forward   cuda-compat: data-center GPUs and select RTX, not GeForce     cuda-compat.md 2.2; anchors P3, P5
 *   gpuN.toolkit     can the runtime's toolkit build SASS, or only PTX, for the CC  cuda-compat.md 1, 3.1, 3.2
 *   gpuN.driver      is the GPU newer than the driver, or past its last branch    cuda-compat.md 3.1, 2.1
 *   gpuN.ptx         PTX runs on newer GPUs only through the JIT, and only when the
 *                    driver knows its ISA                                          cuda-compat.md 1 note 3, 3.2
 *   gpuN.torch       the wheel's TORCH_CUDA_ARCH_LIST covers the CC               cuda-compat.md 8.2, 3.2
 *   torch.driver.*   the wheel's CUDA variant against the driver                  (the compat.* rules)
 *   image.require    NVIDIA_REQUIRE_CUDA as libnvidia-container evaluates it       anchors 1.4, P4 (require.h)
 *   image.disable_require  what NVIDIA_DISABLE_REQUIRE=true leads to              anchors P4
 *   gpuN.binaryK     the code in a file on this GPU and driver (images.h)          anchors P1, P6 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "arch_table.h"
#include "gpucheck.h"
#include "images.h"
#include "require.h"

#define MAX_GPUS 16
#define MAX_REQS 8
#define MAX_BINS 8

typedef struct wi_gpu {
  int cc;
  char name[160];
  const em_arch_row *row; /* NULL: a CC arch_table does not know */
  const gc_brand *brand;  /* NULL: not given */
} wi_gpu;

typedef struct wi_driver {
  int given;
  char version[48]; /* "550.54.15", a branch "535", or "" when only a CUDA version was given */
  int is_branch;
  int branch;       /* for a CUDA version: the lowest branch that reports it */
  int cuda;         /* the CUDA version it reports */
  int estimated;    /* branch not in the table: CUDA taken from the highest listed branch below */
  int cuda_only;    /* --driver 12.2 */
} wi_driver;

typedef struct wi_torch {
  int given, cpu;
  char spec[64], release[32], variant[24];
  const em_torch_row *row;
} wi_torch;

typedef struct wi_in {
  wi_gpu gpus[MAX_GPUS];
  size_t n_gpus;
  const char *brand_args[MAX_GPUS];
  size_t n_brands;
  wi_driver drv;
  int runtime; /* --cuda-runtime; 0 none */
  gc_req reqs[MAX_REQS];
  size_t n_reqs;
  int disable_require;
  wi_torch torch;
  const char *bins[MAX_BINS];
  size_t n_bins;
} wi_in;

/* ------------------------------------------------------------ formatting --- */

/* CUDA version text; a few rotating buffers so one printf can use several. */
static const char *cv(int v) {
  static char bufs[8][16];
  static unsigned k;
  return gc_cuda_str(v, bufs[k++ % 8]);
}

static const char *cc_str(int cc) {
  static char bufs[8][16];
  static unsigned k;
  char *b = bufs[k++ % 8];
  snprintf(b, 16, "%d.%d", cc / 10, cc % 10);
  return b;
}

/* Lowest driver branch reporting at least CUDA `cuda`; 0 if none does. */
static int branch_for_cuda(int cuda) {
  int best = 0;
  for (size_t i = 0; i < em_driver_branch_count(); i++) {
    const em_driver_branch_row *r = em_driver_branch_at(i);
    if (r->cuda >= cuda && (!best || r->branch < best)) best = r->branch;
  }
  return best;
}

/* The newest CUDA version any known driver reports. */
static int newest_driver_cuda(void) {
  int best = 0;
  for (size_t i = 0; i < em_driver_branch_count(); i++)
    if (em_driver_branch_at(i)->cuda > best) best = em_driver_branch_at(i)->cuda;
  return best;
}

/* "R570+ (>= 570.26, the CUDA 12.8 minimum)": what a driver for CUDA `cuda` is. */
static const char *min_driver_text(int cuda) {
  static char bufs[4][160];
  static unsigned k;
  char *b = bufs[k++ % 4];
  int br = branch_for_cuda(cuda);
  const char *tk = em_toolkit_min_linux_driver(cuda);
  if (br && tk && *tk && strcmp(tk, "-"))
    snprintf(b, 160, "R%d+ (>= %s, the CUDA %s minimum on Linux)", br, tk, cv(cuda));
  else if (br)
    snprintf(b, 160, "R%d+ (the first branch reporting CUDA %s)", br, cv(cuda));
  else
    snprintf(b, 160, "a driver reporting CUDA >= %s (newer than every branch arch_table knows)", cv(cuda));
  return b;
}

static const char *driver_label(const wi_driver *d) {
  static char b[128];
  if (d->cuda_only) snprintf(b, sizeof b, "a driver reporting CUDA %s", cv(d->cuda));
  else if (d->is_branch) snprintf(b, sizeof b, "driver R%d (CUDA %s%s)", d->branch, cv(d->cuda), d->estimated ? ", estimated" : "");
  else snprintf(b, sizeof b, "driver %s (CUDA %s%s)", d->version, cv(d->cuda), d->estimated ? ", estimated" : "");
  return b;
}

static const char *gpu_label(const wi_in *in, size_t i) {
  static char bufs[4][200];
  static unsigned k;
  char *b = bufs[k++ % 4];
  snprintf(b, 200, "GPU%zu %s", i, in->gpus[i].name);
  return b;
}

/* Appends to a growing text buffer (checks' details are built piecewise). */
typedef struct sbuf {
  char s[4096];
  size_t n;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->n >= sizeof b->s - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
  va_end(ap);
  if (k > 0) b->n = b->n + (size_t)k < sizeof b->s ? b->n + (size_t)k : sizeof b->s - 1;
}

/* ---------------------------------------------------------------- inputs --- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: gpucheck whatif [--gpu NAME|CC]... [--brand BRAND]... [--driver VERSION|BRANCH|CUDA]\n"
          "                       [--cuda-runtime X.Y] [--image-require 'REQ'] [--disable-require]\n"
          "                       [--torch RELEASE+VARIANT] [--binary FILE]... [--json] [--no-color]\n"
          "\n"
          "  --gpu NAME|CC        a GPU by model (A100, 'RTX 5090', 'Tesla K80') or CC (8.6, sm_86); repeatable\n"
          "  --brand BRAND        its NVML brand (tesla, geforce, nvidiartx, ... as nvidia-container-cli info\n"
          "                       or nvidia-smi -q 'Product Brand' shows it): once for all GPUs, or once per --gpu\n"
          "  --driver V           a driver version (460.32.03), a branch (535) or the CUDA version it reports (12.2)\n"
          "  --cuda-runtime X.Y   the CUDA runtime an application ships or links (libcudart X.Y)\n"
          "  --image-require REQ  an image's NVIDIA_REQUIRE_CUDA, e.g. 'cuda>=12.8 brand=tesla,driver>=535,driver<536'\n"
          "  --disable-require    the container sets NVIDIA_DISABLE_REQUIRE=true\n"
          "  --torch R+V          a PyTorch wheel as torch.__version__ prints it, e.g. 2.5.1+cu124\n"
          "  --binary FILE        an executable, library, .fatbin, .cubin or .ptx: does its GPU code run?\n"
          "\n"
          "exit: 0 runs, 1 something will fail, 2 warnings only, 64 usage, 65 unreadable --binary\n");
}

/* A version written as digits and dots: "12.4" -> 12040 (major.minor only; a
 * patch is ignored). -1 when it is not one. */
static int parse_cuda_version(const char *s) {
  int major, minor, n = 0;
  if (!s || !isdigit((unsigned char)s[0])) return -1;
  if (sscanf(s, "%d.%d%n", &major, &minor, &n) != 2) return -1;
  for (const char *p = s + n; *p; p++)
    if (!isdigit((unsigned char)*p) && *p != '.') return -1;
  if (major <= 0 || major > 99 || minor < 0 || minor > 9) return -1;
  return major * 1000 + minor * 10;
}

static void list_toolkits(char *b, size_t cap) {
  size_t n = 0;
  b[0] = 0;
  for (size_t i = 0; i < em_toolkit_count() && n + 8 < cap; i++)
    n += (size_t)snprintf(b + n, cap - n, "%s%s", i ? " " : "", cv(em_toolkit_at(i)->cuda));
}

static int parse_driver(const char *s, wi_driver *d) {
  memset(d, 0, sizeof *d);
  if (gc_req_version_cmp(s, s) == GC_REQ_NOT_A_VERSION || strlen(s) >= sizeof d->version) {
    fprintf(stderr, "gpucheck whatif: --driver '%s': expected a driver version (550.54.15), a branch (535) "
                    "or the CUDA version a driver reports (12.2)\n", s);
    return GC_EXIT_USAGE;
  }
  int first = atoi(s);
  d->given = 1;
  if (first >= 100) { /* a driver: branches start at 367 */
    snprintf(d->version, sizeof d->version, "%s", s);
    d->is_branch = strchr(s, '.') == NULL;
    d->branch = first;
    d->cuda = em_driver_cuda_version(s, &d->estimated);
    if (d->cuda == 0) {
      fprintf(stderr, "gpucheck whatif: --driver '%s': older than every driver branch arch_table knows "
                      "(the oldest is R%d)\n", s, em_driver_branch_at(0)->branch);
      return GC_EXIT_USAGE;
    }
    return 0;
  }
  int cuda = parse_cuda_version(s);
  d->cuda_only = 1;
  d->cuda = cuda;
  for (size_t i = 0; cuda > 0 && i < em_driver_branch_count(); i++) {
    const em_driver_branch_row *r = em_driver_branch_at(i);
    if (r->cuda == cuda && (!d->branch || r->branch < d->branch)) d->branch = r->branch;
  }
  if (!d->branch) {
    char known[512] = "";
    size_t n = 0;
    int last = 0;
    for (size_t i = 0; i < em_driver_branch_count() && n + 8 < sizeof known; i++) {
      int c = em_driver_branch_at(i)->cuda;
      if (c != last) n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? " " : "", cv(c));
      last = c;
    }
    fprintf(stderr, "gpucheck whatif: --driver '%s': no driver branch reports this CUDA version (known: %s)\n", s,
            known);
    return GC_EXIT_USAGE;
  }
  return 0;
}

static int parse_runtime(const char *s, int *out) {
  int v = parse_cuda_version(s);
  if (v < 0 || !em_toolkit_lookup(v)) {
    char known[512];
    list_toolkits(known, sizeof known);
    fprintf(stderr, "gpucheck whatif: --cuda-runtime '%s': %s (known CUDA releases: %s)\n", s,
            v < 0 ? "expected MAJOR.MINOR, e.g. 12.4" : "no CUDA toolkit of that version", known);
    return GC_EXIT_USAGE;
  }
  *out = v;
  return 0;
}

/* "2.5.1+cu124": release and variant, looked up in arch_table's wheel table. */
static int parse_torch(const char *s, wi_torch *t) {
  memset(t, 0, sizeof *t);
  const char *plus = strchr(s, '+');
  if (!plus || plus == s || !plus[1] || (size_t)(plus - s) >= sizeof t->release || strlen(plus + 1) >= sizeof t->variant) {
    fprintf(stderr, "gpucheck whatif: --torch '%s': expected RELEASE+VARIANT as torch.__version__ prints it, "
                    "e.g. 2.5.1+cu124 (python -c 'import torch; print(torch.__version__)')\n", s);
    return GC_EXIT_USAGE;
  }
  t->given = 1;
  snprintf(t->spec, sizeof t->spec, "%s", s);
  snprintf(t->release, sizeof t->release, "%.*s", (int)(plus - s), s);
  snprintf(t->variant, sizeof t->variant, "%s", plus + 1);
  if (!strcmp(t->variant, "cpu")) {
    t->cpu = 1;
    return 0;
  }
  t->row = em_torch_lookup(t->release, t->variant);
  if (t->row) return 0;
  char known[512] = "";
  size_t n = 0;
  for (size_t i = 0; i < em_torch_count() && n + 24 < sizeof known; i++) {
    const em_torch_row *r = em_torch_at(i);
    size_t rl = strlen(r->release);
    if (!strncmp(t->release, r->release, rl) && (t->release[rl] == 0 || t->release[rl] == '.'))
      n += (size_t)snprintf(known + n, sizeof known - n, "%s+%s", n ? ", " : "", r->variant);
  }
  if (n)
    fprintf(stderr, "gpucheck whatif: --torch '%s': arch_table knows this release only as %s\n", s, known);
  else
    fprintf(stderr, "gpucheck whatif: --torch '%s': release %s is not in arch_table's wheel table "
                    "(arch_table/data/torch.tsv: %s ... %s)\n", s, t->release, em_torch_at(0)->release,
            em_torch_at(em_torch_count() - 1)->release);
  return GC_EXIT_USAGE;
}

static int brand_arg(const char *s, const gc_brand **out) {
  *out = gc_brand_lookup(s);
  if (*out) return 0;
  char known[400] = "";
  size_t n = 0;
  for (size_t i = 0; i < gc_brand_count(); i++)
    n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? " " : "", gc_brand_at(i)->name);
  fprintf(stderr, "gpucheck whatif: --brand '%s': not an NVML brand (known: %s)\n", s, known);
  return GC_EXIT_USAGE;
}

/* Takes "--opt VALUE" or "--opt=VALUE"; NULL when opt does not match argv[*i]. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, int *missing) {
  size_t n = strlen(opt);
  if (strncmp(argv[*i], opt, n)) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != 0) return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

static void free_inputs(wi_in *in) {
  for (size_t i = 0; i < in->n_reqs; i++) gc_req_free(&in->reqs[i]);
}

static int parse_args(int argc, char **argv, wi_in *in, int *help) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int missing = 0;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      *help = 1;
    } else if (!strcmp(argv[i], "--disable-require")) {
      in->disable_require = 1;
    } else if ((v = opt_value(argc, argv, &i, "--gpu", &missing))) {
      if (in->n_gpus == MAX_GPUS) {
        fprintf(stderr, "gpucheck whatif: --gpu: at most %d GPUs\n", MAX_GPUS);
        return GC_EXIT_USAGE;
      }
      wi_gpu *g = &in->gpus[in->n_gpus];
      char err[256];
      if (gc_gpu_parse(v, &g->cc, g->name, sizeof g->name, err, sizeof err) < 0) {
        fprintf(stderr, "gpucheck whatif: --gpu '%s': %s\n", v, err);
        return GC_EXIT_USAGE;
      }
      g->row = em_arch_lookup(g->cc);
      in->n_gpus++;
    } else if ((v = opt_value(argc, argv, &i, "--brand", &missing))) {
      const gc_brand *b;
      if (brand_arg(v, &b)) return GC_EXIT_USAGE;
      if (in->n_brands == MAX_GPUS) {
        fprintf(stderr, "gpucheck whatif: --brand: at most %d\n", MAX_GPUS);
        return GC_EXIT_USAGE;
      }
      in->brand_args[in->n_brands++] = v;
    } else if ((v = opt_value(argc, argv, &i, "--driver", &missing))) {
      if (in->drv.given) {
        fprintf(stderr, "gpucheck whatif: --driver given twice: one driver per question\n");
        return GC_EXIT_USAGE;
      }
      int rc = parse_driver(v, &in->drv);
      if (rc) return rc;
    } else if ((v = opt_value(argc, argv, &i, "--cuda-runtime", &missing))) {
      int rc = parse_runtime(v, &in->runtime);
      if (rc) return rc;
    } else if ((v = opt_value(argc, argv, &i, "--image-require", &missing))) {
      gc_req_error e;
      if (in->n_reqs == MAX_REQS) {
        fprintf(stderr, "gpucheck whatif: --image-require: at most %d\n", MAX_REQS);
        return GC_EXIT_USAGE;
      }
      if (gc_req_parse(v, &in->reqs[in->n_reqs], &e) < 0) {
        fprintf(stderr, "gpucheck whatif: --image-require: offset %zu: %s\n  %s\n  %*s^\n", e.offset, e.msg, v,
                (int)e.offset, "");
        return GC_EXIT_USAGE;
      }
      in->n_reqs++;
    } else if ((v = opt_value(argc, argv, &i, "--torch", &missing))) {
      int rc = parse_torch(v, &in->torch);
      if (rc) return rc;
    } else if ((v = opt_value(argc, argv, &i, "--binary", &missing))) {
      if (in->n_bins == MAX_BINS) {
        fprintf(stderr, "gpucheck whatif: --binary: at most %d files\n", MAX_BINS);
        return GC_EXIT_USAGE;
      }
      in->bins[in->n_bins++] = v;
    } else if (missing) {
      fprintf(stderr, "gpucheck whatif: %s needs a value\n", argv[i]);
      return GC_EXIT_USAGE;
    } else {
      fprintf(stderr, "gpucheck whatif: unknown %s '%s'\n", argv[i][0] == '-' ? "option" : "argument", argv[i]);
      usage(stderr);
      return GC_EXIT_USAGE;
    }
    if (missing) {
      fprintf(stderr, "gpucheck whatif: %s needs a value\n", argv[i]);
      return GC_EXIT_USAGE;
    }
  }
  if (in->n_brands > 1 && in->n_brands != in->n_gpus) {
    fprintf(stderr, "gpucheck whatif: --brand given %zu times for %zu --gpu: give it once (all GPUs) or once per --gpu\n",
            in->n_brands, in->n_gpus);
    return GC_EXIT_USAGE;
  }
  if (in->n_brands && !in->n_gpus) {
    fprintf(stderr, "gpucheck whatif: --brand describes a --gpu: give the GPU too (e.g. --gpu A100 --brand tesla)\n");
    return GC_EXIT_USAGE;
  }
  for (size_t i = 0; i < in->n_gpus; i++)
    if (in->n_brands) in->gpus[i].brand = gc_brand_lookup(in->brand_args[in->n_brands == 1 ? 0 : i]);
  return 0;
}

/* " (not for GPU0 K80: R470 is the last Kepler branch)": GPUs a driver of
 * CUDA `cuda` or newer would leave behind; "" when none. */
static int last_branch_of(const em_arch_row *row);
static const char *gpu_caveat(const wi_in *in, int cuda) {
  static char b[400];
  size_t n = 0;
  b[0] = 0;
  int br = branch_for_cuda(cuda);
  for (size_t i = 0; i < in->n_gpus && n + 80 < sizeof b; i++) {
    int lb = last_branch_of(in->gpus[i].row);
    if (lb && br > lb)
      n += (size_t)snprintf(b + n, sizeof b - n, "%sGPU%zu %s: R%d is the last %s branch", n ? "; " : " (not for ", i,
                            in->gpus[i].name, lb, in->gpus[i].row->arch);
  }
  if (n) snprintf(b + n, sizeof b - n, ")");
  return b;
}

/* ------------------------------------------------------------ compat rules --- */

typedef enum compat_kind {
  CP_BACKWARD,     /* driver CUDA >= runtime */
  CP_PRE11,        /* runtime < 11.0 and newer than the driver: no MVC, 35 */
  CP_MVC,          /* same major >= 11, driver >= the floor */
  CP_MVC_UNSURE,   /* same major, driver given as the floor's branch only */
  CP_BELOW_FLOOR,  /* same major, driver below the MVC floor: 35 */
  CP_MAJOR         /* runtime of a newer major: 35 */
} compat_kind;

static compat_kind compat(int rt, const wi_driver *d, const char **floor) {
  *floor = NULL;
  if (d->cuda >= rt) return CP_BACKWARD;
  if (rt < 11000) return CP_PRE11;
  if (d->cuda / 1000 < rt / 1000) return CP_MAJOR;
  *floor = em_mvc_floor_linux(rt / 1000);
  if (!*floor) return CP_MAJOR; /* a major without MVC data: no claim beyond the plain rule */
  /* A driver given as a CUDA version reports at least major.0, and the floor
   * is that major's first (.0 GA) driver. */
  if (d->cuda_only) return CP_MVC;
  if (d->is_branch) {
    int fb = atoi(*floor);
    return d->branch > fb ? CP_MVC : d->branch == fb ? CP_MVC_UNSURE : CP_BELOW_FLOOR;
  }
  return gc_req_version_cmp(d->version, *floor) >= 0 ? CP_MVC : CP_BELOW_FLOOR;
}

/* Whether the driver can run runtime `rt` at all (MVC included). */
static int driver_runs(int rt, const wi_driver *d) {
  const char *floor;
  compat_kind k = compat(rt, d, &floor);
  return k == CP_BACKWARD || k == CP_MVC || k == CP_MVC_UNSURE;
}

static const char *fwd_brand_text(const wi_in *in, size_t i) {
  const wi_gpu *g = &in->gpus[i];
  if (g->row && g->row->tegra) return "eligible (Jetson)";
  if (!g->brand) return "depends on its brand: give --brand (GeForce and Titan are not eligible)";
  if (g->brand->fwd_compat == 1) return "eligible by brand, if the host driver's branch is one the package supports";
  if (g->brand->fwd_compat == 0) return "NOT eligible: the compat libcuda fails with 804 'forward compatibility was attempted on non supported HW'";
  return "cannot tell from brand 'unknown' (libnvidia-container names several brands so)";
}

/* compat.forward: would the cuda-compat package let this runtime run? */
static void check_forward(gc_section *s, const wi_in *in, int rt, const char *id) {
  gc_check *c = gc_check_add(s, GC_INFO, id, "Forward compatibility (cuda-compat-%d-%d package) as a way to run CUDA %s",
                             rt / 1000, rt % 1000 / 10, cv(rt));
  sbuf b = {.n = 0};
  sb_add(&b, "A newer user-mode driver from the image's cuda-compat package runs on an older kernel driver only on "
             "data-center GPUs, select NGC-ready RTX and Jetson, never GeForce; on other GPUs it fails with 804, and a "
             "user-mode/kernel mismatch gives 803.");
  for (size_t i = 0; i < in->n_gpus; i++) sb_add(&b, " %s: %s.", gpu_label(in, i), fwd_brand_text(in, i));
  if (!in->n_gpus) sb_add(&b, " Give --gpu and --brand to check a GPU.");
  gc_check_detail(c, "%s", b.s);
  gc_check_source(c, "FWD");
  gc_check_set(c, "runtime", json_integer(rt));
}

/* One driver x runtime check: which of backward compatibility, MVC or
 * neither decides. `what` names the runtime ("CUDA 12.4 runtime", "torch 2.5.1+cu124"). */
static gc_verdict check_compat(gc_section *s, const wi_in *in, int rt, const char *what, const char *id_prefix,
                               int with_forward) {
  const wi_driver *d = &in->drv;
  const char *floor;
  compat_kind k = compat(rt, d, &floor);
  int isa = em_toolkit_ptx_isa(rt);
  char id[64];
  gc_check *c;
  switch (k) {
  case CP_BACKWARD:
    snprintf(id, sizeof id, "%s.backward", id_prefix);
    c = gc_check_add(s, GC_OK, id, "%s on %s: runs (backward compatibility)", what, driver_label(d));
    gc_check_detail(c, "A driver runs every CUDA runtime up to the version it reports: %s >= %s.", cv(d->cuda),
                    cv(rt));
    break;
  case CP_PRE11:
    snprintf(id, sizeof id, "%s.backward", id_prefix);
    c = gc_check_add(s, GC_FAIL, id, "%s on %s: fails with cudaErrorInsufficientDriver (35)", what, driver_label(d));
    gc_check_detail(c, "Before CUDA 11 there is no minor-version compatibility: the driver must report at least the "
                       "runtime's version, %s > %s. The runtime reports 'CUDA driver version is "
                       "insufficient for CUDA runtime version'.", cv(rt), cv(d->cuda));
    gc_check_fix(c, "Install a driver %s%s, or use a runtime <= CUDA %s.", min_driver_text(rt), gpu_caveat(in, rt),
                 cv(d->cuda));
    break;
  case CP_MVC:
  case CP_MVC_UNSURE:
    snprintf(id, sizeof id, "%s.minor", id_prefix);
    c = gc_check_add(s, GC_WARN, id, "%s on %s: runs through minor-version compatibility, with limits", what,
                     driver_label(d));
    gc_check_detail(c,
                    "Same major (%d) and the driver is at or above the CUDA %d minor-version-compatibility floor %s%s. "
                    "Limits: an API newer than CUDA %s fails with "
                    "cudaErrorCallRequiresNewerDriver (36); PTX made by CUDA %s (PTX ISA %d.%d) cannot be JIT-compiled "
                    "by this driver: cudaErrorUnsupportedPtxVersion (222) -- minor-version compatibility never covers "
                    "PTX.",
                    rt / 1000, rt / 1000, floor ? floor : "?",
                    k == CP_MVC_UNSURE ? " -- only if the R-branch point release is at least that" : "", cv(d->cuda),
                    cv(rt), isa / 10, isa % 10);
    gc_check_fix(c, "Ship SASS (cubins) for every target GPU and no PTX-only kernels (NVRTC: compile to a cubin, "
                    "-arch=sm_XY, not to PTX), avoid APIs newer than CUDA %s -- or install a driver %s for full "
                    "support%s.",
                 cv(d->cuda), min_driver_text(rt), gpu_caveat(in, rt));
    break;
  case CP_BELOW_FLOOR:
    snprintf(id, sizeof id, "%s.minor", id_prefix);
    c = gc_check_add(s, GC_FAIL, id, "%s on %s: fails with cudaErrorInsufficientDriver (35)", what, driver_label(d));
    gc_check_detail(c, "Same major (%d), but minor-version compatibility needs a driver >= %s, the CUDA %d floor "
                       "; %s is below it.",
                    rt / 1000, floor, rt / 1000, d->version);
    gc_check_fix(c, "Install a driver >= %s (runs every CUDA %d.x through minor-version compatibility) or %s for full "
                    "support%s.", floor, rt / 1000, min_driver_text(rt), gpu_caveat(in, rt));
    break;
  default: /* CP_MAJOR */
    snprintf(id, sizeof id, "%s.major", id_prefix);
    floor = em_mvc_floor_linux(rt / 1000);
    c = gc_check_add(s, GC_FAIL, id, "%s on %s: fails with cudaErrorInsufficientDriver (35)", what, driver_label(d));
    gc_check_detail(c, "The runtime's major (%d) is newer than the driver's (CUDA %s). Minor-version compatibility "
                       "works only within a major; the runtime reports 'CUDA driver version is "
                       "insufficient for CUDA runtime version'.", rt / 1000, cv(d->cuda));
    if (floor) {
      char mvc[160] = "", fwd[64] = "";
      const char *tk = em_toolkit_min_linux_driver(rt);
      if (!tk || strcmp(tk, floor))
        snprintf(mvc, sizeof mvc, " (any driver >= %s runs CUDA %d.x through minor-version compatibility)", floor,
                 rt / 1000);
      if (with_forward) snprintf(fwd, sizeof fwd, " (see %s.forward)", id_prefix);
      gc_check_fix(c, "Install a driver %s%s%s, or use a runtime of CUDA %d.x, or forward compatibility (cuda-compat "
                      "package) on a data-center GPU or select RTX -- not GeForce%s.",
                   min_driver_text(rt), mvc, gpu_caveat(in, rt), d->cuda / 1000, fwd);
    } else
      gc_check_fix(c, "Install a driver %s, or use a runtime of CUDA %d.x.", min_driver_text(rt), d->cuda / 1000);
    break;
  }
  /* The MVC page states backward compatibility, the pre-11 rule, the floors and the
   * per-major limit; PTXMAP maps a PTX ISA to the driver that can JIT it. */
  gc_check_source(c, k == CP_MVC || k == CP_MVC_UNSURE ? "MVC,PTXMAP" : "MVC");
  gc_check_set(c, "runtime", json_integer(rt));
  gc_check_set(c, "driver_cuda", json_integer(d->cuda));
  static const char *const kinds[] = {"backward", "none (pre-11)", "minor-version", "minor-version (floor unsure)",
                                      "below MVC floor", "newer major"};
  gc_check_set(c, "rule", json_string(kinds[k]));
  if (with_forward && (k == CP_PRE11 || k == CP_BELOW_FLOOR || k == CP_MAJOR)) {
    snprintf(id, sizeof id, "%s.forward", id_prefix);
    check_forward(s, in, rt, id);
  }
  return c->verdict;
}

/* ------------------------------------------------------------- GPU rules --- */

/* Highest plain SM in a toolkit's target list that a cubin for this CC could
 * come from (same major, minor <= the CC's), and the lowest SM overall. */
static void toolkit_fit(int rt, int cc, int *same_major, int *lowest) {
  *same_major = 0, *lowest = 0;
  const em_toolkit_row *t = em_toolkit_lookup(rt);
  if (!t) return;
  for (const char *p = t->targets; *p;) {
    char *end;
    long sm = strtol(p, &end, 10);
    int plain = end != p && (*end == ',' || *end == 0);
    if (plain && sm > 0) {
      if (!*lowest || sm < *lowest) *lowest = (int)sm;
      if (sm / 10 == cc / 10 && sm <= cc && sm > *same_major) *same_major = (int)sm;
    }
    p = end;
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
}

/* The first toolkit after `last` (the one that dropped an architecture). */
static int toolkit_after(int last) {
  int best = 0;
  for (size_t i = 0; i < em_toolkit_count(); i++) {
    int v = em_toolkit_at(i)->cuda;
    if (v > last && (!best || v < best)) best = v;
  }
  return best;
}

static int last_branch_of(const em_arch_row *row) {
  if (!row) return 0;
  /* arch_table/data/arch_support.tsv: secondary sources (NVIDIA's roadmap as reported). */
  const em_arch_support_row *s = em_arch_support_lookup(row->arch);
  return s ? s->last_branch : 0;
}

/* "sm_35/sm_37": every CC whose last toolkit is `last`. */
static void dropped_sms(int last, char *b, size_t cap) {
  size_t n = 0;
  b[0] = 0;
  for (size_t i = 0; i < em_arch_count() && n + 8 < cap; i++)
    if (em_arch_at(i)->last_toolkit == last)
      n += (size_t)snprintf(b + n, cap - n, "%ssm_%d", n ? "/" : "", em_arch_at(i)->cc);
}

/* What to run an old GPU with: its last toolkit and, when known, its last
 * driver branch (whose CUDA version may be below that toolkit: then MVC). */
static void old_gpu_fix(const wi_gpu *g, char *b, size_t cap) {
  int last = g->row->last_toolkit;
  int lb = last_branch_of(g->row);
  if (!lb) {
    snprintf(b, cap, "Build and run with CUDA <= %s (-gencode arch=compute_%d,code=sm_%d) on a driver %s.", cv(last),
             g->cc, g->cc, min_driver_text(last));
    return;
  }
  char bs[16];
  snprintf(bs, sizeof bs, "%d", lb);
  int lbc = em_driver_cuda_version(bs, NULL);
  const char *floor = em_mvc_floor_linux(last / 1000);
  size_t n = (size_t)snprintf(b, cap, "Build and run with CUDA <= %s (-gencode arch=compute_%d,code=sm_%d) on an R%d "
                                      "driver, the last branch for %s [secondary source]; it reports CUDA %s",
                              cv(last), g->cc, g->cc, lb, g->row->arch, cv(lbc));
  if (n < cap && lbc < last && lbc / 1000 == last / 1000 && floor)
    snprintf(b + n, cap - n, ", so CUDA %s-%s runtimes run on it through minor-version compatibility (driver >= %s; "
                             "SASS only, no PTX newer than CUDA %s).", cv(lbc + 10), cv(last), floor, cv(lbc));
  else if (n < cap)
    snprintf(b + n, cap - n, ".");
}

static void check_gpu_arch(gc_section *s, const wi_in *in, size_t i) {
  const wi_gpu *g = &in->gpus[i];
  char id[32];
  snprintf(id, sizeof id, "gpu%zu.arch", i);
  if (!g->row) {
    gc_check *c = gc_check_add(s, GC_WARN, id, "%s: CC %s is not in arch_table", gpu_label(in, i), cc_str(g->cc));
    gc_check_detail(c, "No toolkit, driver or wheel facts are known for this compute capability; only the general "
                       "rules (same-major SASS, PTX forward compatibility) apply.");
    gc_check_fix(c, "Check the CC (nvidia-smi --query-gpu=compute_cap --format=csv), or update arch_table/data/cc.tsv.");
    return;
  }
  int named = strstr(g->name, g->row->arch) != NULL;
  gc_check *c = gc_check_add(s, GC_INFO, id, "%s: %s%s%snvcc targets it from CUDA %s%s%s", gpu_label(in, i),
                             named ? "" : g->row->arch, g->row->tegra ? " (Jetson)" : "", named && !g->row->tegra ? "" : ", ", cv(g->row->first_toolkit),
                             g->row->last_toolkit ? " to " : " on (still current)",
                             g->row->last_toolkit ? cv(g->row->last_toolkit) : "");
  gc_check_detail(c, "Brand: %s; arch_table cc.tsv, conf %c.", g->brand ? g->brand->name : "not given (--brand)",
                  g->row->conf);
  gc_check_source(c, g->row->source);
  gc_check_set(c, "cc", json_string(cc_str(g->cc)));
  if (g->row->conf == 'U') c->verdict = GC_WARN, gc_check_fix(c, "This CC's row is unconfirmed [U]; check it.");
}

static void check_gpu_driver(gc_section *s, const wi_in *in, size_t i) {
  const wi_gpu *g = &in->gpus[i];
  const wi_driver *d = &in->drv;
  if (!d->given || !g->row) return;
  char id[32], fix[600];
  snprintf(id, sizeof id, "gpu%zu.driver", i);
  if (g->row->tegra) {
    gc_check *c = gc_check_add(s, GC_INFO, id, "%s: Jetson drivers come with JetPack (L4T)", gpu_label(in, i));
    gc_check_detail(c, "The desktop and data-center driver branches do not apply to Jetson modules.");
    return;
  }
  int ft = g->row->first_toolkit;
  int lb = last_branch_of(g->row);
  if (d->cuda < ft) {
    gc_check *c = gc_check_add(s, GC_FAIL, id, "%s is newer than %s: it needs a driver for CUDA >= %s",
                               gpu_label(in, i), driver_label(d), cv(ft));
    gc_check_detail(c, "nvcc targets CC %s from CUDA %s; a driver older than the first toolkit of an architecture "
                       "does not support its GPUs [inference: the first driver for an architecture ships with that "
                       "toolkit].", cc_str(g->cc), cv(ft));
    /* The toolkit -> driver table (RN13.1), then the row's first toolkit. */
    gc_check_source(c, "RN13.1,CLANG-CUDA");
    gc_check_source(c, g->row->source);
    gc_check_fix(c, "Install a driver %s.", min_driver_text(ft));
  } else if (lb && d->branch > lb) {
    gc_check *c = gc_check_add(s, GC_FAIL, id, "%s: %s GPUs are not supported after driver branch R%d; %s is newer",
                               gpu_label(in, i), g->row->arch, lb, driver_label(d));
    gc_check_detail(c, "R%d is the last driver branch for %s [secondary source: NVIDIA's driver roadmap and "
                       "deprecation notices as quoted by the press].", lb, g->row->arch);
    gc_check_source(c, em_arch_support_lookup(g->row->arch)->source);
    char bs[16];
    snprintf(bs, sizeof bs, "%d", lb);
    int lbc = em_driver_cuda_version(bs, NULL);
    snprintf(fix, sizeof fix, "Use an R%d driver (it reports CUDA %s; CUDA %d.x runtimes run on it%s).", lb, cv(lbc),
             lbc / 1000, lbc >= 11000 ? " through minor-version compatibility" : "");
    gc_check_fix(c, "%s", fix);
  } else {
    gc_check *c = gc_check_add(s, GC_OK, id, "%s is supported by %s", gpu_label(in, i), driver_label(d));
    char past[96] = "";
    if (lb) snprintf(past, sizeof past, ", and R%d is not past R%d, the last %s branch", d->branch, lb, g->row->arch);
    gc_check_detail(c, "The driver reports CUDA %s >= %s, the first toolkit for CC %s%s.", cv(d->cuda), cv(ft),
                    cc_str(g->cc), past);
  }
}

/* gpuN.toolkit: can the runtime's toolkit make code for this GPU? Returns
 * 2 SASS fits, 1 only PTX, 0 nothing. */
static int check_gpu_toolkit(gc_section *s, const wi_in *in, size_t i) {
  const wi_gpu *g = &in->gpus[i];
  int rt = in->runtime;
  char id[32], drop[64], fix[700];
  snprintf(id, sizeof id, "gpu%zu.toolkit", i);
  int same, lowest;
  toolkit_fit(rt, g->cc, &same, &lowest);
  if (same == g->cc) {
    gc_check *c = gc_check_add(s, GC_OK, id, "CUDA %s builds SASS for %s (sm_%d)", cv(rt), gpu_label(in, i), g->cc);
    gc_check_detail(c, "sm_%d is among CUDA %s's nvcc targets.", g->cc, cv(rt));
    gc_check_source(c, "CLANG-CUDA");
    return 2;
  }
  if (same) {
    gc_check *c = gc_check_add(s, GC_OK, id, "CUDA %s has no sm_%d target; its sm_%d SASS runs on %s", cv(rt), g->cc,
                               same, gpu_label(in, i));
    gc_check_detail(c, "A cubin for sm_XY runs on CC X.Z with Z >= Y, same major; nvcc targets sm_%d from CUDA %s.",
                    g->cc, g->row ? cv(g->row->first_toolkit) : "?");
    gc_check_source(c, "BW-COMPAT,CLANG-CUDA");
    return 2;
  }
  if (lowest && lowest < g->cc) {
    gc_check *c = gc_check_add(s, GC_WARN, id, "CUDA %s cannot build SASS for %s: only PTX JIT-compiled by the driver "
                                               "runs on it", cv(rt), gpu_label(in, i));
    gc_check_detail(c, "CUDA %s targets nothing of major %d%s; PTX for compute_XY runs on any newer CC through the "
                       "driver's JIT -- if the application ships PTX at all (see gpu%zu.ptx).",
                    cv(rt), g->cc / 10,
                    g->row ? (g->row->first_toolkit > rt ? " (its first toolkit is newer)" : " any more") : "", i);
    gc_check_source(c, "BW-COMPAT,CLANG-CUDA");
    if (g->row && g->row->first_toolkit > rt)
      gc_check_fix(c, "Build with CUDA >= %s for sm_%d (-gencode arch=compute_%d,code=sm_%d), or embed PTX of the "
                      "highest target (code=compute_XY) so the driver can JIT it.",
                   cv(g->row->first_toolkit), g->cc, g->cc, g->cc);
    else
      gc_check_fix(c, "Embed PTX (code=compute_XY) so the driver can JIT it, or use a toolkit that targets sm_%d.",
                   g->cc);
    return 1;
  }
  /* Nothing the toolkit makes runs here: the GPU is older than every target. */
  gc_check *c = gc_check_add(s, GC_FAIL, id, "CUDA %s cannot make code for %s: no kernel image (209)", cv(rt),
                             gpu_label(in, i));
  if (g->row && g->row->last_toolkit && g->row->last_toolkit < rt) {
    int after = toolkit_after(g->row->last_toolkit);
    dropped_sms(g->row->last_toolkit, drop, sizeof drop);
    gc_check_detail(c, "CUDA %s dropped %s; the last toolkit for CC %s is %s. Its lowest "
                       "target is sm_%d, and PTX never runs on a lower CC, so neither SASS nor PTX fits.",
                    cv(after), drop, cc_str(g->cc), cv(g->row->last_toolkit), lowest);
    gc_check_source(c, "CLANG-CUDA,BW-COMPAT");
    old_gpu_fix(g, fix, sizeof fix);
    gc_check_fix(c, "%s", fix);
  } else {
    gc_check_detail(c, "CUDA %s's lowest target is sm_%d, above CC %s; PTX never runs on a lower CC.", cv(rt), lowest,
                    cc_str(g->cc));
    gc_check_source(c, "CLANG-CUDA,BW-COMPAT");
    gc_check_fix(c, "Use a toolkit that targets sm_%d.", g->cc);
  }
  return 0;
}

/* gpuN.ptx: PTX from the runtime's toolkit on this GPU and driver. */
static void check_gpu_ptx(gc_section *s, const wi_in *in, size_t i, int fit) {
  const wi_gpu *g = &in->gpus[i];
  const wi_driver *d = &in->drv;
  int rt = in->runtime, isa = em_toolkit_ptx_isa(rt), need = em_ptx_isa_min_driver(isa);
  /* A runtime the driver cannot run at all fails with 35 first (compat.*): no PTX question then. */
  if (!d->given || fit == 0 || !isa || !driver_runs(rt, d)) return;
  char id[32];
  snprintf(id, sizeof id, "gpu%zu.ptx", i);
  gc_check *c;
  if (fit == 1 && d->cuda >= need) {
    c = gc_check_add(s, GC_WARN, id, "%s runs CUDA %s code only through PTX JIT; %s can JIT PTX ISA %d.%d",
                     gpu_label(in, i), cv(rt), driver_label(d), isa / 10, isa % 10);
    gc_check_detail(c, "The first launch JIT-compiles every kernel (slow start; the driver caches the result). PTX ISA "
                       "%d.%d needs a driver reporting CUDA >= %s.", isa / 10, isa % 10,
                    cv(need));
    gc_check_fix(c, "Ship SASS for sm_%d (needs CUDA >= %s) to avoid the JIT.", g->cc,
                 g->row ? cv(g->row->first_toolkit) : "?");
  } else if (fit == 1) {
    c = gc_check_add(s, GC_FAIL, id, "%s needs PTX JIT, but %s cannot JIT PTX ISA %d.%d from CUDA %s: 222",
                     gpu_label(in, i), driver_label(d), isa / 10, isa % 10, cv(rt));
    gc_check_detail(c, "PTX ISA %d.%d needs a driver reporting CUDA >= %s; older drivers "
                       "fail with cudaErrorUnsupportedPtxVersion (222) 'the provided PTX was compiled with an "
                       "unsupported toolchain'. Minor-version compatibility does not cover PTX.",
                    isa / 10, isa % 10, cv(need));
    gc_check_fix(c, "Install a driver %s, or ship SASS for sm_%d (needs CUDA >= %s).", min_driver_text(need), g->cc,
                 g->row ? cv(g->row->first_toolkit) : "?");
  } else if (d->cuda < need) {
    c = gc_check_add(s, GC_WARN, id, "%s: SASS runs; PTX from CUDA %s (ISA %d.%d) would not JIT on %s (222)",
                     gpu_label(in, i), cv(rt), isa / 10, isa % 10, driver_label(d));
    gc_check_detail(c, "Kernels with SASS for this GPU load natively; any kernel present only as PTX (or made at run "
                       "time by NVRTC as PTX) fails with 222, because PTX ISA %d.%d needs a driver reporting CUDA >= "
                       "%s.", isa / 10, isa % 10, cv(need));
    gc_check_fix(c, "Build SASS for sm_%d for every kernel; NVRTC users compile to a cubin (-arch=sm_%d); or install "
                    "a driver %s%s.", g->cc, g->cc, min_driver_text(need), gpu_caveat(in, need));
  } else {
    c = gc_check_add(s, GC_OK, id, "%s: PTX from CUDA %s (ISA %d.%d) can also be JIT-compiled by %s", gpu_label(in, i),
                     cv(rt), isa / 10, isa % 10, driver_label(d));
  }
  if (c->detail) gc_check_source(c, "PTXMAP");
  gc_check_set(c, "ptx_isa", json_integer(isa));
  gc_check_set(c, "min_driver_cuda", json_integer(need));
}

/* ----------------------------------------------------------- PyTorch rules --- */

/* Does a TORCH_CUDA_ARCH_LIST cover a CC? 2 by SASS (same major, minor >=),
 * 1 only through a +PTX entry <= cc, 0 not; *by is the deciding entry (CC). */
static int torch_covers(const char *list, int cc, int *by) {
  int sass = 0, ptx = 0;
  for (const char *p = list; *p;) {
    int major = 0, minor = 0, n = 0;
    if (sscanf(p, "%d.%d%n", &major, &minor, &n) != 2) break;
    int e = major * 10 + minor, plus = !strncmp(p + n, "+PTX", 4);
    if (major == cc / 10 && e <= cc && e > sass) sass = e;
    if (plus && e <= cc && e > ptx) ptx = e;
    p += n + (plus ? 4 : 0);
    if (*p == ';') p++;
  }
  *by = sass ? sass : ptx;
  return sass ? 2 : ptx ? 1 : 0;
}

/* "cu113, cu116" of release r that cover the CC (plus, when a driver is
 * known, whether it runs them). */
static size_t torch_variants(const wi_in *in, const char *release, int cc, char *b, size_t cap) {
  size_t n = 0, found = 0;
  b[0] = 0;
  for (size_t i = 0; i < em_torch_count() && n + 40 < cap; i++) {
    const em_torch_row *r = em_torch_at(i);
    int by;
    if (strcmp(r->release, release) || !torch_covers(r->arch_list, cc, &by)) continue;
    n += (size_t)snprintf(b + n, cap - n, "%s+%s", found++ ? ", " : "", r->variant);
    if (in->drv.given && !driver_runs(r->cuda, &in->drv))
      n += (size_t)snprintf(b + n, cap - n, " (needs a driver %s)", min_driver_text(r->cuda));
  }
  return found;
}

/* Newest release in the table with a variant covering the CC; NULL if none. */
static const char *newest_covering_release(int cc) {
  const char *best = NULL;
  for (size_t i = 0; i < em_torch_count(); i++) {
    const em_torch_row *r = em_torch_at(i);
    int by;
    if (torch_covers(r->arch_list, cc, &by) && (!best || gc_req_version_cmp(r->release, best) > 0)) best = r->release;
  }
  return best;
}

static void check_gpu_torch(gc_section *s, const wi_in *in, size_t i) {
  const wi_gpu *g = &in->gpus[i];
  const wi_torch *t = &in->torch;
  if (!t->given || t->cpu || !t->row) return;
  char id[32], same[400], newer[400], fix[1400];
  snprintf(id, sizeof id, "gpu%zu.torch", i);
  if (g->row && g->row->tegra) {
    gc_check *c = gc_check_add(s, GC_WARN, id, "torch %s on %s: not judged (Jetson)", t->spec, gpu_label(in, i));
    gc_check_detail(c, "arch_table's wheel table lists the Linux x86_64 wheels; Jetson uses NVIDIA's JetPack builds "
                       "of PyTorch.");
    gc_check_fix(c, "Use the PyTorch build for your JetPack release.");
    return;
  }
  int by, how = torch_covers(t->row->arch_list, g->cc, &by);
  gc_check *c;
  if (how == 2) {
    c = gc_check_add(s, GC_OK, id, "torch %s has SASS for %s (sm_%d)", t->spec, gpu_label(in, i), by);
    gc_check_detail(c, "TORCH_CUDA_ARCH_LIST %s: %s covers CC %s (same major, minor <=).", t->row->arch_list,
                    cc_str(by), cc_str(g->cc));
    gc_check_source(c, t->row->source);
    gc_check_source(c, "BW-COMPAT");
  } else if (how == 1) {
    int isa = em_toolkit_ptx_isa(t->row->cuda), need = em_ptx_isa_min_driver(isa);
    if (in->drv.given && in->drv.cuda < need) {
      c = gc_check_add(s, GC_FAIL, id, "torch %s reaches %s only through PTX, which %s cannot JIT (222)", t->spec,
                       gpu_label(in, i), driver_label(&in->drv));
      gc_check_detail(c, "TORCH_CUDA_ARCH_LIST %s: no SASS for CC %s, PTX compute_%d made by CUDA %s (ISA %d.%d) "
                         "needs a driver reporting CUDA >= %s.",
                      t->row->arch_list, cc_str(g->cc), by, cv(t->row->cuda), isa / 10, isa % 10, cv(need));
      gc_check_source(c, t->row->source);
      gc_check_source(c, "PTXMAP");
      gc_check_fix(c, "Install a driver %s.", min_driver_text(need));
    } else {
      c = gc_check_add(s, GC_WARN, id, "torch %s runs on %s only through PTX JIT (compute_%d)", t->spec,
                       gpu_label(in, i), by);
      gc_check_detail(c, "TORCH_CUDA_ARCH_LIST %s: no SASS for CC %s; the driver JIT-compiles the compute_%d PTX on "
                         "first use (slow start, cached).", t->row->arch_list, cc_str(g->cc), by);
      gc_check_source(c, t->row->source);
      gc_check_source(c, "BW-COMPAT");
      gc_check_fix(c, "Use a wheel variant with SASS for CC %s if one exists, or build with TORCH_CUDA_ARCH_LIST=\"%s\".",
                   cc_str(g->cc), cc_str(g->cc));
    }
  } else {
    c = gc_check_add(s, GC_FAIL, id, "torch %s has no code for %s: 'no kernel image is available' (209)", t->spec,
                     gpu_label(in, i));
    gc_check_detail(c, "The wheel's TORCH_CUDA_ARCH_LIST is %s (conf %c): no SASS of major %d with minor <= %d and "
                       "no +PTX entry <= %s. PyTorch warns '... with CUDA "
                       "capability sm_%d is not compatible with the current PyTorch installation', then kernels fail.",
                    t->row->arch_list, t->row->conf, g->cc / 10, g->cc % 10, cc_str(g->cc), g->cc);
    gc_check_source(c, t->row->source);
    gc_check_source(c, "BW-COMPAT");
    size_t n = 0;
    char rel[32];
    snprintf(rel, sizeof rel, "%s", t->row->release);
    if (torch_variants(in, rel, g->cc, same, sizeof same))
      n += (size_t)snprintf(fix + n, sizeof fix - n, "Install torch %s with a variant that covers CC %s: %s "
                                                     "(index https://download.pytorch.org/whl/<variant>). ",
                            t->release, cc_str(g->cc), same);
    const char *nr = newest_covering_release(g->cc);
    if (nr && strcmp(nr, rel) && torch_variants(in, nr, g->cc, newer, sizeof newer) && n < sizeof fix)
      n += (size_t)snprintf(fix + n, sizeof fix - n, "%s torch %s: %s. ", n ? "Or" : "Use", nr, newer);
    if (!nr && n < sizeof fix)
      n += (size_t)snprintf(fix + n, sizeof fix - n, "No official Linux x86_64 wheel in arch_table covers CC %s. ",
                            cc_str(g->cc));
    if (g->row && n < sizeof fix) {
      if (g->row->last_toolkit)
        snprintf(fix + n, sizeof fix - n, "Or build from source with CUDA %s-%s and TORCH_CUDA_ARCH_LIST=\"%s\".",
                 cv(g->row->first_toolkit), cv(g->row->last_toolkit), cc_str(g->cc));
      else
        snprintf(fix + n, sizeof fix - n, "Or build from source with CUDA >= %s and TORCH_CUDA_ARCH_LIST=\"%s\".",
                 cv(g->row->first_toolkit), cc_str(g->cc));
    }
    gc_check_fix(c, "%s", fix);
  }
  gc_check_set(c, "arch_list", json_string(t->row->arch_list));
  gc_check_set(c, "covered_by", how ? json_string(cc_str(by)) : json_null());
  gc_check_set(c, "via", json_string(how == 2 ? "sass" : how == 1 ? "ptx" : "none"));
}

static void check_torch(gc_report *r, const wi_in *in) {
  const wi_torch *t = &in->torch;
  gc_section *s = gc_section_add(r, "PyTorch wheel");
  if (t->cpu) {
    gc_check *c = gc_check_add(s, GC_WARN, "torch.wheel", "torch %s is a CPU-only wheel: it never uses the GPU", t->spec);
    gc_check_fix(c, "Install a CUDA variant (+cuXYZ) from https://download.pytorch.org/whl/.");
    return;
  }
  gc_check *c = gc_check_add(s, t->row->conf == 'U' ? GC_WARN : GC_INFO, "torch.wheel",
                             "torch %s: CUDA %s runtime, TORCH_CUDA_ARCH_LIST %s", t->spec, cv(t->row->cuda),
                             t->row->arch_list);
  gc_check_detail(c, "Linux x86_64 wheel; arch_table torch.tsv, conf %c.", t->row->conf);
  gc_check_source(c, t->row->source);
  if (t->row->conf == 'U') gc_check_fix(c, "This row is unconfirmed [U]: check with cuobjdump --list-elf on libtorch_cuda.so.");
  gc_check_set(c, "variant", json_string(t->row->variant));
  gc_check_set(c, "cuda", json_integer(t->row->cuda));
  if (!in->drv.given) return;
  char what[96];
  snprintf(what, sizeof what, "torch %s (CUDA %s runtime)", t->spec, cv(t->row->cuda));
  gc_verdict v = check_compat(s, in, t->row->cuda, what, "torch.driver", 0);
  if (v == GC_FAIL) {
    char ok[400];
    size_t n = 0, k = 0;
    ok[0] = 0;
    for (size_t i = 0; i < em_torch_count() && n + 24 < sizeof ok; i++) {
      const em_torch_row *w = em_torch_at(i);
      if (!strcmp(w->release, t->row->release) && driver_runs(w->cuda, &in->drv))
        n += (size_t)snprintf(ok + n, sizeof ok - n, "%s+%s", k++ ? ", " : "", w->variant);
    }
    gc_check *last = &s->checks[s->n - 1];
    if (k) {
      char fix[900];
      snprintf(fix, sizeof fix, "%s Wheel variants of torch %s this driver runs: %s.", last->fix ? last->fix : "",
               t->release, ok);
      gc_check_fix(last, "%s", fix);
    }
  }
}

/* ------------------------------------------------------ image requirement --- */

/* Why a condition came out as it did, for this GPU (NULL: none). */
static void cond_why(const gc_req *q, size_t ci, gc_tri v, const wi_in *in, const wi_gpu *g, char *b, size_t cap) {
  const gc_req_cond *c = &q->conds[ci];
  char cs[96];
  gc_req_cond_str(q, ci, cs, sizeof cs);
  const char *have;
  char hb[96];
  switch (c->rule) {
  case GC_REQ_CUDA:
    if (in->drv.given) snprintf(hb, sizeof hb, "the driver reports CUDA %s", cv(in->drv.cuda)), have = hb;
    else have = "no --driver given";
    break;
  case GC_REQ_DRIVER:
    if (in->drv.given && !in->drv.cuda_only)
      snprintf(hb, sizeof hb, "the driver is %s%s", in->drv.is_branch ? "branch " : "", in->drv.version), have = hb;
    else have = in->drv.given ? "only the driver's CUDA version was given" : "no --driver given";
    break;
  case GC_REQ_ARCH:
    if (g) snprintf(hb, sizeof hb, "the GPU is CC %s", cc_str(g->cc)), have = hb;
    else have = "no --gpu given";
    break;
  default:
    if (g && g->brand) snprintf(hb, sizeof hb, "libnvidia-container reports the brand as '%s'", g->brand->libnvc), have = hb;
    else have = g ? "no --brand given" : "no --gpu given";
  }
  int want = c->rule == GC_REQ_CUDA && v == GC_TRI_FALSE && (c->op == GC_REQ_GE || c->op == GC_REQ_GT)
                 ? parse_cuda_version(c->value) : -1;
  if (want > 0 && c->op == GC_REQ_GT) want += 10;
  if (want > 0)
    snprintf(b, cap, "%s (%s; it needs a driver %s)", cs, have, min_driver_text(want));
  else
    snprintf(b, cap, "%s (%s)", cs, have);
}

/* Minimum CUDA a requirement asks for in its cuda>= / cuda> conditions (the
 * image's CUDA version); 0 if it has none. */
static int required_cuda(const gc_req *q) {
  int best = 0;
  for (size_t i = 0; i < q->n_conds; i++) {
    const gc_req_cond *c = &q->conds[i];
    if (c->rule != GC_REQ_CUDA || (c->op != GC_REQ_GE && c->op != GC_REQ_GT && c->op != GC_REQ_EQ)) continue;
    int v = parse_cuda_version(c->value);
    if (v < 0) { /* "12" */
      int major = atoi(c->value);
      v = major > 0 && major < 100 ? major * 1000 : -1;
    }
    if (v > 0 && (!best || v < best)) best = v;
  }
  return best;
}

/* Branches named by driver>=B,driver<B+1 escape hatches: "470, 525, 535". */
static void hatch_branches(const gc_req *q, char *b, size_t cap) {
  int seen[64], n = 0;
  size_t k = 0;
  b[0] = 0;
  for (size_t i = 0; i < q->n_conds; i++) {
    const gc_req_cond *c = &q->conds[i];
    if (c->rule != GC_REQ_DRIVER || c->op != GC_REQ_GE) continue;
    int br = atoi(c->value), dup = 0;
    for (int j = 0; j < n; j++) dup |= seen[j] == br;
    if (dup || n == 64) continue;
    seen[n++] = br;
    if (k + 8 < cap) k += (size_t)snprintf(b + k, cap - k, "%s%d", k ? ", " : "", br);
  }
}

static void check_image(gc_report *r, const wi_in *in, size_t qi) {
  const gc_req *q = &in->reqs[qi];
  gc_section *s = qi == 0 ? gc_section_add(r, "Container image") : &r->sections[r->n - 1];
  char id[48], msg[600], line[400], why[300], ts[300];
  snprintf(id, sizeof id, qi ? "image.require%zu" : "image.require", qi);

  gc_req_gpu gpus[MAX_GPUS];
  for (size_t i = 0; i < in->n_gpus; i++)
    gpus[i].cc = in->gpus[i].cc, gpus[i].brand = in->gpus[i].brand ? in->gpus[i].brand->libnvc : NULL;
  gc_req_ctx ctx = {.cuda = in->drv.given ? in->drv.cuda : 0,
                    .driver = in->drv.given && !in->drv.cuda_only ? in->drv.version : NULL,
                    .driver_is_branch = in->drv.is_branch,
                    .gpus = gpus,
                    .n_gpus = in->n_gpus,
                    .strict = 1};
  gc_req_result res;
  if (gc_req_evaluate(q, &ctx, &res) < 0) {
    gc_check_add(s, GC_WARN, id, "image requirement not evaluated: out of memory");
    return;
  }
  int dec = res.deciding >= 0 ? res.deciding : 0;
  const gc_req_eval *e = &res.per[dec];
  const wi_gpu *g = in->n_gpus ? &in->gpus[dec] : NULL;
  char who[220];
  snprintf(who, sizeof who, "%s", g ? gpu_label(in, (size_t)dec) : "no GPU given");

  /* Per-term reasons: up to 4 terms in words, then a summary of the rest. */
  sbuf b = {.n = 0};
  size_t shown = 0, rest = 0;
  for (size_t t = 0; t < q->n_terms; t++) {
    if (e->term[t] == GC_TRI_TRUE) continue;
    int bc = gc_req_term_blocker(q, e, t);
    if (shown < 4) {
      gc_req_term_str(q, t, ts, sizeof ts);
      if (bc >= 0) cond_why(q, (size_t)bc, e->cond[bc], in, g, why, sizeof why);
      else snprintf(why, sizeof why, "a term of commas only: libnvidia-container stops there");
      sb_add(&b, "%sterm %zu '%s' %s %s", shown ? "; " : "", t + 1, ts,
             e->term[t] == GC_TRI_FALSE ? "fails on" : "is undecided on", why);
      shown++;
    } else {
      rest++;
    }
  }
  if (rest) {
    char br[200];
    hatch_branches(q, br, sizeof br);
    sb_add(&b, "; and %zu more terms%s%s%s", rest, *br ? " (brand escape hatches for driver branches " : "", br,
           *br ? ")" : "");
  }
  gc_req_libnvc_message(q, msg, sizeof msg);
  int img_cuda = required_cuda(q);
  gc_check *c;
  if (res.verdict == GC_TRI_TRUE) {
    gc_req_term_str(q, (size_t)res.per[0].satisfied_term, ts, sizeof ts);
    c = gc_check_add(s, in->disable_require ? GC_INFO : GC_OK, id, "image requirement holds%s: term %d '%s'%s",
                     in->n_gpus > 1 ? " for every GPU" : "", res.per[0].satisfied_term + 1, ts,
                     in->disable_require ? " (not checked: NVIDIA_DISABLE_REQUIRE=true)" : "");
    gc_check_detail(c, "Terms are alternatives, conditions in a term must all hold (libnvidia-container's "
                       "src/cli/dsl.c).");
    gc_check_source(c, "LIBNVC-DSL");
  } else if (res.verdict == GC_TRI_FALSE) {
    snprintf(line, sizeof line, "image requirement not met for %s on %s: the container will not start", who,
             in->drv.given ? driver_label(&in->drv) : "this driver");
    c = gc_check_add(s, in->disable_require ? GC_INFO : GC_FAIL, id, "%s%s", line,
                     in->disable_require ? " (but NVIDIA_DISABLE_REQUIRE=true skips the check)" : "");
    gc_check_detail(c, "nvidia-container-cli: requirement error: %s. It names the first term of the string, not "
                       "what failed: %s.", msg, b.s);
    gc_check_source(c, "LIBNVC-DSL");
    sbuf f = {.n = 0};
    char br[200];
    hatch_branches(q, br, sizeof br);
    if (img_cuda) sb_add(&f, "Install a driver with CUDA >= %s: %s", cv(img_cuda), min_driver_text(img_cuda));
    else sb_add(&f, "Change the driver or GPU so one term holds");
    if (*br) sb_add(&f, "; or, for the brands the image lists, a driver on branch %s", br);
    if (in->drv.given) sb_add(&f, "; or use an image built for CUDA <= %s (e.g. an nvidia/cuda:%s.x tag)", cv(in->drv.cuda),
                              cv(in->drv.cuda));
    sb_add(&f, "; or set NVIDIA_DISABLE_REQUIRE=true and accept what image.disable_require says.");
    gc_check_fix(c, "%s", f.s);
  } else {
    c = gc_check_add(s, GC_WARN, id, "image requirement undecided for %s: it depends on what was not given", who);
    gc_check_detail(c, "No term is sure to hold, and some depend on unknown values: %s.", b.s);
    gc_check_fix(c, "Give %s%s%s to decide.", in->drv.given && !in->drv.cuda_only ? "" : "--driver (a full version) ",
                 in->n_gpus ? "" : "--gpu ", "--brand");
  }
  gc_check_set(c, "requirement", json_string(q->text));
  gc_check_set(c, "satisfied", json_string(gc_tri_name(res.verdict)));
  if (res.verdict == GC_TRI_FALSE) gc_check_set(c, "libnvidia_container_error", json_string(msg));
  json_t *terms = json_array();
  for (size_t t = 0; t < q->n_terms && t < 64; t++) {
    gc_req_term_str(q, t, ts, sizeof ts);
    json_array_append_new(terms, json_pack("{s:s, s:s}", "term", ts, "outcome", gc_tri_name(e->term[t])));
  }
  gc_check_set(c, "terms", terms);
  gc_tri verdict = res.verdict;
  gc_req_result_free(&res);

  /* What NVIDIA_DISABLE_REQUIRE would lead to (or does, with --disable-require). */
  if (qi != 0 || !in->drv.given || (verdict == GC_TRI_TRUE && !in->disable_require)) return;
  if (!img_cuda) {
    gc_check *d = gc_check_add(s, GC_INFO, "image.disable_require", "NVIDIA_DISABLE_REQUIRE=true skips the check; "
                                                                    "the requirement names no CUDA version");
    gc_check_detail(d, "Without a cuda>= condition the image's runtime version is unknown: check it with "
                       "--cuda-runtime.");
    return;
  }
  const char *floor;
  compat_kind k = compat(img_cuda, &in->drv, &floor);
  gc_verdict v = in->disable_require ? (k == CP_BACKWARD ? GC_OK : (k == CP_MVC || k == CP_MVC_UNSURE) ? GC_WARN : GC_FAIL)
                                     : GC_INFO;
  const char *lead = in->disable_require ? "With NVIDIA_DISABLE_REQUIRE=true the container starts"
                                         : "NVIDIA_DISABLE_REQUIRE=true would let the container start";
  gc_check *d;
  if (k == CP_BACKWARD) {
    d = gc_check_add(s, v, "image.disable_require", "%s; its CUDA %s runtime runs on %s", lead, cv(img_cuda),
                     driver_label(&in->drv));
  } else if (k == CP_MVC || k == CP_MVC_UNSURE) {
    d = gc_check_add(s, v, "image.disable_require", "%s; its CUDA %s runtime then runs through minor-version "
                                                    "compatibility: SASS-only code works, newer PTX fails (222)",
                     lead, cv(img_cuda));
    int isa = em_toolkit_ptx_isa(img_cuda);
    gc_check_detail(d, "Driver CUDA %s, same major, at or above the floor %s. Code shipped as SASS for the GPU runs; "
                       "PTX made by CUDA %s (ISA %d.%d) fails to JIT with 222, APIs newer than CUDA %s fail with 36.",
                    cv(in->drv.cuda), floor ? floor : "?", cv(img_cuda), isa / 10, isa % 10, cv(in->drv.cuda));
    gc_check_source(d, "MVC,PTXMAP,NVCT-152");
    gc_check_fix(d, "Prefer a driver %s; keep NVIDIA_DISABLE_REQUIRE only for SASS-only workloads.",
                 min_driver_text(img_cuda));
  } else {
    d = gc_check_add(s, v, "image.disable_require", "%s, but its CUDA %s runtime then fails with 35 on %s", lead,
                     cv(img_cuda), driver_label(&in->drv));
    gc_check_detail(d, "A runtime of a newer major (or below the minor-version floor) needs a newer driver. The "
                       "image's cuda-compat libraries would help only on data-center GPUs and select RTX; on GeForce "
                       "they fail with 804.");
    gc_check_source(d, "MVC,FWD");
    gc_check_fix(d, "Install a driver %s; NVIDIA_DISABLE_REQUIRE does not help here.", min_driver_text(img_cuda));
  }
  gc_check_set(d, "image_cuda", json_integer(img_cuda));
}

/* ---------------------------------------------------------------- binaries --- */

static int check_binary(gc_report *r, const wi_in *in, size_t bi, json_t *files) {
  gc_image_set set;
  char err[512];
  memset(&set, 0, sizeof set);
  if (gc_images_read(in->bins[bi], &set, err, sizeof err) < 0) {
    fprintf(stderr, "gpucheck whatif: --binary %s: %s\n", in->bins[bi], err);
    gc_images_free(&set);
    return GC_EXIT_INPUT;
  }
  char title[1100];
  snprintf(title, sizeof title, "Binary %s", in->bins[bi]);
  gc_section *s = gc_section_add(r, title);
  char id[48];
  snprintf(id, sizeof id, "binary%zu.images", bi);
  size_t cubins = 0, ptx = 0;
  for (size_t i = 0; i < set.n; i++) cubins += set.images[i].kind == GC_IMG_CUBIN, ptx += set.images[i].kind == GC_IMG_PTX;
  gc_check *c = gc_check_add(s, GC_INFO, id, "%s: %zu image(s): %zu cubin, %zu PTX%s%s", set.format, set.n, cubins, ptx,
                             set.note[0] ? "; " : "", set.note);
  json_t *images = json_array(), *targets = json_array();
  for (size_t i = 0; i < set.n; i++) json_array_append_new(images, gc_image_json(&set.images[i]));
  int dcuda = in->drv.given ? in->drv.cuda : newest_driver_cuda();
  if (!in->drv.given)
    gc_check_detail(c, "No --driver: verdicts assume a current driver (CUDA %s, the newest arch_table knows).", cv(dcuda));
  if (!in->n_gpus) gc_check_fix(c, "Give --gpu NAME|CC to get a verdict per GPU.");
  for (size_t g = 0; g < in->n_gpus; g++) {
    gc_run_verdict v;
    memset(&v, 0, sizeof v);
    gc_images_verdict(&set, in->gpus[g].cc, dcuda, &v);
    snprintf(id, sizeof id, "gpu%zu.binary%zu", g, bi);
    gc_verdict verdict = v.run == GC_RUN_NATIVE ? GC_OK : v.run == GC_RUN_PTX_JIT ? GC_WARN : GC_FAIL;
    gc_check *k = gc_check_add(s, verdict, id, "%s: %s", gpu_label(in, g), gc_run_name(v.run));
    if (v.why[0]) gc_check_detail(k, "%s", v.why);
    gc_check_source(k, gc_run_sources(v.run));
    const gc_image *im = v.image >= 0 && (size_t)v.image < set.n ? &set.images[v.image] : NULL;
    switch (v.run) {
    case GC_RUN_NATIVE: break;
    case GC_RUN_PTX_JIT:
      gc_check_fix(k, "Add SASS for sm_%d (-gencode arch=compute_%d,code=sm_%d) to skip the JIT at first launch.",
                   in->gpus[g].cc, in->gpus[g].cc, in->gpus[g].cc);
      break;
    case GC_RUN_PTX_TOO_NEW: {
      int need = im ? em_ptx_isa_min_driver(im->ptx_isa) : 0;
      if (need)
        gc_check_fix(k, "Install a driver %s (PTX ISA %d.%d needs CUDA >= %s), or rebuild with SASS for sm_%d, or "
                        "emit PTX with a toolkit no newer than the driver (CUDA <= %s).",
                     min_driver_text(need), im->ptx_isa / 10, im->ptx_isa % 10, cv(need), in->gpus[g].cc, cv(dcuda));
      else
        gc_check_fix(k, "Rebuild with SASS for sm_%d, or with a toolkit no newer than the driver (CUDA <= %s).",
                     in->gpus[g].cc, cv(dcuda));
      break;
    }
    case GC_RUN_NO_IMAGE:
      gc_check_fix(k, "Rebuild with code for CC %s: -gencode arch=compute_%d,code=sm_%d (or code=compute_XY PTX with "
                      "XY <= %d).", cc_str(in->gpus[g].cc), in->gpus[g].cc, in->gpus[g].cc, in->gpus[g].cc);
      break;
    case GC_RUN_CUBIN_TOO_NEW:
      gc_check_fix(k, "Install a driver that loads cubins of the toolkit that built it%s%s, or rebuild with an older "
                      "toolkit.", im && im->toolkit ? ": " : "", im && im->toolkit ? min_driver_text(em_cubin_min_driver(im->toolkit)) : "");
      break;
    }
    gc_check_set(k, "run", json_string(gc_run_key(v.run)));
    json_array_append_new(targets, json_pack("{s:s, s:s, s:i, s:s, s:s}", "gpu", in->gpus[g].name, "cc",
                                             cc_str(in->gpus[g].cc), "driver_cuda", dcuda, "run", gc_run_key(v.run), "why",
                                             v.why));
  }
  json_array_append_new(files, json_pack("{s:s, s:s, s:o, s:o}", "path", set.path[0] ? set.path : in->bins[bi],
                                         "format", set.format, "images", images, "targets", targets));
  gc_images_free(&set);
  return 0;
}

/* ------------------------------------------------------------------ report --- */

static void inputs_section(gc_report *r, const wi_in *in) {
  json_t *gpus = json_array();
  for (size_t i = 0; i < in->n_gpus; i++) {
    const wi_gpu *g = &in->gpus[i];
    json_array_append_new(gpus, json_pack("{s:s, s:s, s:s, s:s?}", "name", g->name, "cc", cc_str(g->cc), "arch",
                                          g->row ? g->row->arch : "unknown", "brand", g->brand ? g->brand->name : NULL));
  }
  json_object_set_new(r->facts, "gpus", gpus);
  if (in->drv.given) {
    const wi_driver *d = &in->drv;
    gc_section *s = gc_section_add(r, "Driver");
    gc_check *c = gc_check_add(s, d->estimated ? GC_WARN : GC_INFO, "driver.cuda", "%s", driver_label(d));
    const char *floor = em_mvc_floor_linux(d->cuda / 1000);
    char major[128] = "";
    if (floor) snprintf(major, sizeof major, " and every CUDA %d.x runtime through minor-version compatibility", d->cuda / 1000);
    gc_check_detail(c, "It runs CUDA runtimes <= %s directly%s.", cv(d->cuda), major);
    /* The branch -> CUDA table is derived from the release notes' Table 3. */
    gc_check_source(c, floor ? "RN13.1,MVC" : "RN13.1");
    if (d->estimated)
      gc_check_fix(c, "R%d is not in arch_table: its CUDA version is estimated from the branch below; check with "
                      "nvidia-smi (CUDA Version).", d->branch);
    json_object_set_new(r->facts, "driver",
                        json_pack("{s:s?, s:i, s:i, s:b, s:b}", "version", d->cuda_only ? NULL : d->version, "branch",
                                  d->branch, "cuda", d->cuda, "estimated", d->estimated, "branch_only", d->is_branch));
  }
  if (in->runtime) json_object_set_new(r->facts, "cuda_runtime", json_integer(in->runtime));
  if (in->torch.given) json_object_set_new(r->facts, "torch", json_string(in->torch.spec));
  if (in->n_reqs) {
    json_t *a = json_array();
    for (size_t i = 0; i < in->n_reqs; i++) json_array_append_new(a, json_string(in->reqs[i].text));
    json_object_set_new(r->facts, "image_require", a);
    json_object_set_new(r->facts, "disable_require", json_boolean(in->disable_require));
  }
}

int gc_cmd_whatif(int argc, char **argv, const gc_opts *o, gc_report **out) {
  wi_in *in = calloc(1, sizeof *in);
  if (!in) return GC_EXIT_INTERNAL;
  int help = 0, rc = parse_args(argc, argv, in, &help);
  if (rc) goto done;
  if (help) { /* usage as a report, so --json stays one JSON object */
    if (!o->json) usage(stdout);
    gc_report *r = gc_report_new("whatif");
    if (!r) {
      rc = GC_EXIT_INTERNAL;
      goto done;
    }
    gc_check *c = gc_check_add(gc_section_add(r, "Usage"), GC_INFO, "usage", "gpucheck whatif: options");
    gc_check_detail(c, "--gpu NAME|CC, --brand BRAND, --driver VERSION|BRANCH|CUDA, --cuda-runtime X.Y, "
                       "--image-require REQ, --disable-require, --torch RELEASE+VARIANT, --binary FILE");
    *out = r;
    goto done;
  }
  if (!in->n_gpus && !in->drv.given && !in->runtime && !in->n_reqs && !in->torch.given && !in->n_bins) {
    fprintf(stderr, "gpucheck whatif: nothing to check: give at least one of the options below\n");
    usage(stderr);
    rc = GC_EXIT_USAGE;
    goto done;
  }
  gc_report *r = gc_report_new("whatif");
  if (!r) {
    rc = GC_EXIT_INTERNAL;
    goto done;
  }
  inputs_section(r, in);
  if (in->runtime && in->drv.given) {
    char what[64];
    snprintf(what, sizeof what, "CUDA %s runtime", cv(in->runtime));
    check_compat(gc_section_add(r, "Driver and CUDA runtime"), in, in->runtime, what, "compat", 1);
  }
  for (size_t i = 0; i < in->n_gpus; i++) {
    char name[220];
    snprintf(name, sizeof name, "GPU%zu: %s", i, in->gpus[i].name);
    gc_section *s = gc_section_add(r, name);
    check_gpu_arch(s, in, i);
    check_gpu_driver(s, in, i);
    if (in->runtime) {
      int fit = check_gpu_toolkit(s, in, i);
      check_gpu_ptx(s, in, i, fit);
    }
    check_gpu_torch(s, in, i);
  }
  if (in->torch.given) check_torch(r, in);
  for (size_t i = 0; i < in->n_reqs; i++) check_image(r, in, i);
  if (in->n_bins) {
    json_t *files = json_array();
    for (size_t i = 0; i < in->n_bins && !rc; i++) rc = check_binary(r, in, i, files);
    json_object_set_new(r->facts, "files", files);
  }
  if (rc) {
    gc_report_free(r);
    goto done;
  }
  *out = r;
done:
  free_inputs(in);
  free(in);
  return rc;
}
