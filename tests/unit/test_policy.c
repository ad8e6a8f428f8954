/* Table-driven tests of the selection policy (runtime/policy.h, DESIGN.md "The
 * selection policy"). Every expected plan below was derived by hand from the
 * rules, never by running the policy:
 *
 *   1. a cubin for exactly this SM ('a' only on exactly its SM; 'f' on its own SM);
 *   2. else a cubin of the same major and the highest lower minor (plain or 'f',
 *      never 'a'; an 'f' cubin runs within its family = same major, minor >= its own),
 *      and only between desktop SMs: never from or to a Tegra SM (3.2, 5.3, 6.2,
 *      7.2, 8.7, 10.1, 11.0; reference §3.1). NVIDIA, CUDA C++ Programming Guide,
 *      "Binary Compatibility": "Binary compatibility is supported only for the
 *      desktop. It is not supported for Tegra. Also, the binary compatibility
 *      between desktop and Tegra is not supported.";
 *      in 1 and 2, of several cubins of one SM from different toolkits (the default
 *      build has sm_80 from nvcc 13.0, NVRTC 12.9 and NVRTC 11.8) the newest
 *      toolkit that the driver loads is chosen, the others listed after it; in 2 the
 *      highest lower minor comes first, whatever its toolkit; an unknown toolkit
 *      counts as the oldest;
 *   3. else PTX: the highest compute_XY not above the device whose PTX ISA the driver
 *      can JIT (nvcc PTX -> EM_PATH_PTX, clang legacy PTX -> EM_PATH_PTX_LEGACY);
 *      never with jit_disabled;
 *   4. else NVRTC: the newest loadable NVRTC that supports this SM and whose output
 *      the driver can load (cubin: driver major >= NVRTC major; NVRTC < 11.1 makes PTX
 *      of its own version: driver >= that version, and it needs the JIT); needs the
 *      module's source;
 *   5. else the CPU; strict=1 then sets strict_error.
 * An image the driver cannot load is never viable. force restricts the plan to one
 * path, with no fallback (EM_PATH_NONE when that path has nothing viable).
 *
 * Facts used (reference/cuda-compat.md):
 *   driver branch -> cuDriverGetVersion (§2.3): R418 10010, R450 11000, R470 11040,
 *     R520 11080, R525 12000, R535 12020, R550 12040, R570 12080, R580 13000.
 *   cubin from toolkit T >= 11.0 loads on a driver of T's major or newer (§2.2, MVC);
 *     before 11.0 the driver must be >= T.
 *   PTX ISA -> minimum driver (§1 note 3): 7.0 -> 11.0, 7.8 -> 11.8, 8.0 -> 12.0,
 *     8.5 -> 12.5, 8.6 -> 12.7, 8.7 -> 12.8, 9.0 -> 13.0; 3.2 -> 5.5 (PTX ISA 3.2 came
 *     with CUDA 5.5: older rows of the same NVIDIA mapping [PTXMAP]).
 *   CC of each GPU (§3.1); a/f rules (§3.2); NVRTC 13.0 archs (§7, LOCAL);
 *   NVRTC 12.2 / 11.8 / 11.0 targets = nvcc targets of that toolkit (§1, §7). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember/dispatch.h"
#include "policy.h"

/* ---------------------------------------------------------------- drivers */

enum {
  DRV_UNKNOWN = 0,  /* cuDriverGetVersion unknown / no driver */
  R418 = 10010,
  DRV102 = 10020,   /* a CUDA 10.2 driver */
  R450 = 11000,
  R470 = 11040,
  R520 = 11080,
  R525 = 12000,
  R535 = 12020,
  JP60 = 12020,     /* Jetson Linux 36 (JetPack 6.0) on an Orin: a CUDA 12.2 driver */
  R550 = 12040,
  R570 = 12080,
  R580 = 13000,
  DRV14 = 14000     /* a future CUDA 14 driver */
};

/* ---------------------------------------------------------------- images */

#define EW "elementwise"
#define AS "archspec" /* sm_90a and sm_100f cubins only */
#define TU "tuned"    /* sm_100a and sm_120f cubins only */
#define NOSUCH "nosuch"
#define ST "step2"    /* sm_86 cubins of CUDA 11.8 and of an unknown toolkit, an sm_80 one of 12.9 */

/* Which images of module "elementwise" a build embeds. */
enum {
  B_CUBIN13 = 1u << 0,   /* nvcc 13.0 cubins sm_75 80 86 89 90 100 120 */
  B_PTX120 = 1u << 1,    /* nvcc 13.0 PTX compute_120, ISA 9.0 */
  B_CLANG = 1u << 2,     /* clang legacy PTX compute_35, ISA 3.2, EM_IMAGE_LEGACY */
  B_SOURCE = 1u << 3,    /* the kernel source (for NVRTC) */
  B_L118CUBIN = 1u << 4, /* NVCC_LEGACY=cuda-11.8: cubins sm_35 37 50 52 60 61 70 */
  B_L118PTX = 1u << 5,   /* NVCC_LEGACY=cuda-11.8: PTX compute_35, ISA 7.8 */
  B_PTX75 = 1u << 6,     /* nvcc 13.0 PTX compute_75, ISA 9.0 */
  B_PTXAS118 = 1u << 7,  /* clang's legacy PTX through ptxas 11.8 (the PyPI one in .tools/):
                            cubins sm_35 37 50 52 53 60 61 62 70 72, toolkit 11.8 */
  B_NVRTC118 = 1u << 8,  /* kernels/ through the PyPI NVRTC 11.8 at build time:
                            cubins sm_75 80 86 87 89 90, toolkit 11.8 */
  B_NVRTC129 = 1u << 9   /* the same through NVRTC 12.9: cubins sm_75 80 86 87 89 90 100 120 */
};
/* The default build without the PyPI tools (no network when it was built). */
#define NOPY (B_CUBIN13 | B_PTX75 | B_PTX120 | B_CLANG | B_SOURCE)
/* The default build: what `ember images` lists. */
#define DEF (NOPY | B_PTXAS118 | B_NVRTC118 | B_NVRTC129)
#define NONV (NOPY | B_PTXAS118)                        /* DEF without the NVRTC cubins */
#define NOCL (NOPY & ~(unsigned)B_CLANG)                /* NOPY minus the legacy PTX */
#define L118 (NOPY | B_L118CUBIN | B_L118PTX)           /* NOPY + NVCC_LEGACY 11.8 */

typedef struct image_table {
  em_image_info img[64];
  size_t n;
} image_table;

static const unsigned char k_bytes[16] = {0};

static void add_image(image_table *t, const char *module, em_image_kind kind, int arch, char variant,
                      int ptx_isa, int toolkit, int min_driver, unsigned flags) {
  em_image_info *im;
  assert_true(t->n < sizeof t->img / sizeof t->img[0]);
  im = &t->img[t->n++];
  memset(im, 0, sizeof *im);
  im->module = module;
  im->kind = kind;
  im->arch = arch;
  im->variant = variant;
  im->ptx_isa = ptx_isa;
  im->toolkit = toolkit;
  im->min_driver = min_driver;
  im->flags = flags;
  im->producer = kind == EM_IMAGE_SOURCE ? "source" : (flags & EM_IMAGE_LEGACY) ? "clang" : "nvcc";
  im->kernels = "add,mul,relu";
  im->size = sizeof k_bytes;
  im->stored_size = sizeof k_bytes;
  im->stored = k_bytes;
}

/* min_driver values are written by hand from the rules in the header comment. */
static void add_cubin(image_table *t, const char *m, int sm, char variant, int toolkit, int min_driver) {
  add_image(t, m, EM_IMAGE_CUBIN, sm, variant, 0, toolkit, min_driver, 0);
}

/* Images of other modules, placed around the module under test. Each one would
 * change some plan below if the policy looked at it (a 10.0 sm_61 cubin for the
 * GTX 1080 on R418, a 12.x sm_75 / sm_90 cubin for the T4 on R525 / H100 on R535,
 * a compute_30 legacy PTX for CC 3.2, sources for NVRTC). */
static void add_other_modules(image_table *t) {
  add_cubin(t, "reduce", 61, 0, 10000, 10000);           /* pre-11 toolkit: driver >= itself */
  add_cubin(t, "reduce", 90, 0, 12020, 12000);           /* 12.2 cubin: any 12.x driver */
  add_image(t, "reduce", EM_IMAGE_PTX, 30, 0, 32, 0, 5050, EM_IMAGE_LEGACY);
  add_image(t, "reduce", EM_IMAGE_SOURCE, 0, 0, 0, 0, 0, 0);
  add_cubin(t, "elementwise_bwd", 75, 0, 12000, 12000);  /* shares a prefix with the module */
  add_cubin(t, "elementwise_bwd", 61, 0, 10010, 10010);
  add_image(t, "elementwise_bwd", EM_IMAGE_SOURCE, 0, 0, 0, 0, 0, 0);
  add_image(t, "elementwise", EM_IMAGE_HEADER, 0, 0, 0, 0, 0, 0); /* a header, never a candidate */
  /* The a/f modules: nvcc 13.0, so every cubin needs an R580 driver. */
  add_cubin(t, AS, 90, 'a', 13000, 13000);
  add_cubin(t, AS, 100, 'f', 13000, 13000);
  add_cubin(t, TU, 100, 'a', 13000, 13000);
  add_cubin(t, TU, 120, 'f', 13000, 13000);
  /* Step 2's order: the highest lower minor before a newer toolkit, a known
   * toolkit before an unknown one (toolkit 0: nothing bounds the driver). */
  add_cubin(t, ST, 86, 0, 0, 0);
  add_cubin(t, ST, 80, 0, 12090, 12000);
  add_cubin(t, ST, 86, 0, 11080, 11000);
}

/* Builds the whole image table for one build configuration. The elementwise images
 * are in no particular order, so "highest" and "newest" must come from the policy. */
static void build_images(image_table *t, unsigned build) {
  static const int cubins13[] = {120, 75, 90, 86, 100, 80, 89};
  static const int cubins118[] = {61, 35, 70, 52, 37, 60, 50};
  static const int ptxas118[] = {72, 35, 61, 50, 70, 37, 62, 52, 60, 53};
  static const int nvrtc118[] = {89, 75, 90, 87, 80, 86};
  static const int nvrtc129[] = {120, 87, 75, 100, 90, 80, 89, 86};
  size_t i;
  memset(t, 0, sizeof *t);
  add_other_modules(t);
  if (build & B_CLANG) add_image(t, EW, EM_IMAGE_PTX, 35, 0, 32, 0, 5050, EM_IMAGE_LEGACY);
  /* Oldest toolkit first in the table: "newest first" must come from the policy. */
  if (build & B_NVRTC118) /* 11.x cubins: any driver of major 11 or later (MVC) */
    for (i = 0; i < sizeof nvrtc118 / sizeof nvrtc118[0]; i++) add_cubin(t, EW, nvrtc118[i], 0, 11080, 11000);
  if (build & B_CUBIN13)
    for (i = 0; i < sizeof cubins13 / sizeof cubins13[0]; i++) add_cubin(t, EW, cubins13[i], 0, 13000, 13000);
  if (build & B_L118PTX) add_image(t, EW, EM_IMAGE_PTX, 35, 0, 78, 11080, 11080, 0);
  if (build & B_PTX120) add_image(t, EW, EM_IMAGE_PTX, 120, 0, 90, 13000, 13000, 0);
  if (build & B_PTXAS118) /* an 11.x cubin: any driver of major 11 or later (MVC) */
    for (i = 0; i < sizeof ptxas118 / sizeof ptxas118[0]; i++) add_cubin(t, EW, ptxas118[i], 0, 11080, 11000);
  if (build & B_PTX75) add_image(t, EW, EM_IMAGE_PTX, 75, 0, 90, 13000, 13000, 0);
  if (build & B_NVRTC129) /* 12.x cubins: any driver of major 12 or later (MVC) */
    for (i = 0; i < sizeof nvrtc129 / sizeof nvrtc129[0]; i++) add_cubin(t, EW, nvrtc129[i], 0, 12090, 12000);
  if (build & B_L118CUBIN)
    for (i = 0; i < sizeof cubins118 / sizeof cubins118[0]; i++) add_cubin(t, EW, cubins118[i], 0, 11080, 11000);
  if (build & B_SOURCE) add_image(t, EW, EM_IMAGE_SOURCE, 0, 0, 0, 0, 0, 0);
  add_cubin(t, "reduce", 37, 0, 11080, 11000); /* after the module too */
}

/* ---------------------------------------------------------------- NVRTC sets */

enum { N0 = 0, N110 = 1u << 0, N118 = 1u << 1, N122 = 1u << 2, N13 = 1u << 3 };

/* nvrtcGetSupportedArchs of NVRTC 13.0 (reference §7, LOCAL). */
static const int k_archs13[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};
/* NVRTC 12.2 = nvcc 12.2 targets (reference §1: sm_50 ... sm_90, plain numbers). */
static const int k_archs122[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};
/* NVRTC 11.8 = nvcc 11.8 targets (reference §1: sm_35 ... sm_90). */
static const int k_archs118[] = {35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};
/* NVRTC 11.0 has no nvrtcGetSupportedArchs (11.2+), so the policy takes them from
 * arch_table; what arch_table must say is nvcc 11.0's list (reference §1). Used only
 * by this test's own viability check. */
static const int k_archs110_ref[] = {35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Passed oldest first: the policy must find the newest itself ("any order"). */
static size_t build_nvrtc(em_policy_nvrtc out[4], unsigned set) {
  size_t n = 0;
  if (set & N110) out[n++] = (em_policy_nvrtc){11000, NULL, 0, 0};
  if (set & N118) out[n++] = (em_policy_nvrtc){11080, k_archs118, COUNT(k_archs118), 1};
  if (set & N122) out[n++] = (em_policy_nvrtc){12020, k_archs122, COUNT(k_archs122), 1};
  if (set & N13) out[n++] = (em_policy_nvrtc){13000, k_archs13, COUNT(k_archs13), 1};
  return n;
}

/* ---------------------------------------------------------------- cases */

#define NOF EM_PATH_NONE
#define CUBIN EM_PATH_CUBIN
#define PTX EM_PATH_PTX
#define PTXL EM_PATH_PTX_LEGACY
#define NVRTC EM_PATH_NVRTC
#define CPU EM_PATH_CPU
#define NONE EM_PATH_NONE
#define ANY_STEP (-1) /* the contract does not say which step a forced plan with no candidate reports */

typedef struct policy_case {
  const char *name;
  int cc, driver;
  const char *module;
  unsigned build, nvrtc;
  em_path force;
  int strict, jit_disabled;
  /* expected */
  em_path path;
  int step;
  int what;     /* the chosen image's arch, or the chosen NVRTC's version; 0 for CPU/NONE */
  char variant; /* the chosen cubin's variant */
  int strict_error;
  int toolkit;  /* the chosen cubin's toolkit (T118, T129, T130); 0 for other paths */
} policy_case;

/* Toolkits of the cubins a build embeds. */
enum { T118 = 11080, T129 = 12090, T130 = 13000 };

/* clang-format off */
static policy_case k_cases[] = {
/*  name                                  cc   driver module build nvrtc            force strict jit  -> path  step what variant serr toolkit */
/* Kepler K80 (3.7), last driver R470 */
  {"K80 R470",                             37, R470, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: cubins are >= 7.5 and need 13000; compute_120 above 3.7; legacy ISA 3.2 needs 5050 */
  {"K80 R470 nvrtc11.8",                   37, R470, EW, NOPY, N118,             NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: PTX precedes NVRTC */
  {"K80 R470 no-legacy nvrtc11.8",         37, R470, EW, NOCL, N118,             NOF,  0, 0,  NVRTC, 4, 11080, 0, 0, 0   }, /* 4: 11.8 targets sm_37; cubin needs driver major 11 */
  {"K80 R470 no-legacy nvrtc13",           37, R470, EW, NOCL, N13,              NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 5: NVRTC 13 has no sm_37 */
  {"K80 R470 no-legacy nvrtc13+11.0",      37, R470, EW, NOCL, N13 | N110,       NOF,  0, 0,  NVRTC, 4, 11000, 0, 0, 0   }, /* 4: 11.0 targets sm_37 (arch_table), its PTX 7.0 needs 11000 <= 11040 */
  {"K80 R470 no-legacy strict",            37, R470, EW, NOCL, N0,               NOF,  1, 0,  CPU,   5, 0,     0, 1, 0   }, /* 5 + strict: ending on the CPU is an error */
  {"K80 R470 nvcc-legacy",                 37, R470, EW, L118, N0,               NOF,  0, 0,  CUBIN, 1, 37,    0, 0, T118}, /* 1: 11.8 sm_37 cubin, driver major 11 */
  {"K80 R418 nvcc-legacy",                 37, R418, EW, L118, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: 11.8 cubins need 11000, compute_35 ISA 7.8 needs 11080; legacy ISA 3.2 ok */
  {"K80 R470 force cubin",                 37, R470, EW, NOPY, N0,               CUBIN,0, 0,  NONE,  ANY_STEP, 0, 0, 0, 0   }, /* force: no cubin runs on 3.7, no fallback */
/* Jetson TK1 (3.2), Jetson Nano (5.3), Xavier (7.2) with the NVCC_LEGACY build */
  {"TK1 3.2 R470 nvcc-legacy nvrtc11.8",   32, R470, EW, L118, N118,             NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 1,2: sm_35/37 have a higher minor; 3: compute_35 above 3.2; 4: 11.8 has no sm_32 */
  {"Nano 5.3 R470 nvcc-legacy",            53, R470, EW, L118, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: no sm_53; 2: sm_50/52 are desktop, 5.3 is Tegra; 3: compute_35 ISA 7.8 needs 11080; legacy */
  {"Xavier 7.2 R470 nvcc-legacy",          72, R470, EW, L118, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 2: sm_70 is desktop, 7.2 is Tegra (sm_75 has a higher minor); 3: compute_75 above 7.2, ISA 7.8 needs 11080; legacy */
/* GTX 1080 (6.1) */
  {"GTX1080 R418",                         61, R418, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: legacy ISA 3.2 needs 5050 <= 10010 */
  {"GTX1080 R418 no-legacy nvrtc11.8+11.0",61, R418, EW, NOCL, N118 | N110,      NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 4: 11.8 cubin needs major 11, 11.0 PTX needs 11000 > 10010 */
  {"GTX1080 R535 nvrtc12.2",               61, R535, EW, NOPY, N122,             NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: PTX precedes NVRTC */
  {"GTX1080 R535 no-legacy nvrtc13+12.2+11.8",61,R535,EW,NOCL, N13 | N122 | N118,NOF,  0, 0,  NVRTC, 4, 12020, 0, 0, 0   }, /* 4: 13 has no sm_61; 12.2 is the newest that has it */
  {"GTX1080 R535 nvcc-legacy",             61, R535, EW, L118, N0,               NOF,  0, 0,  CUBIN, 1, 61,    0, 0, T118}, /* 1: 11.8 sm_61 cubin on a 12.x driver */
/* V100 (7.0) on R450 */
  {"V100 R450",                            70, R450, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1,2: sm_75 has a higher minor; 3: legacy */
  {"V100 R450 nvcc-legacy",                70, R450, EW, L118, N0,               NOF,  0, 0,  CUBIN, 1, 70,    0, 0, T118}, /* 1: 11.8 sm_70 cubin, driver major 11 */
  {"V100 R450 no-legacy nvrtc11.8",        70, R450, EW, NOCL, N118,             NOF,  0, 0,  NVRTC, 4, 11080, 0, 0, 0   }, /* 4: 11.8 on an 11.0 driver (same major) */
  {"V100 R450 no-legacy nvrtc13+12.2",     70, R450, EW, NOCL, N13 | N122,       NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 4: 13 has no sm_70; 12.2 cubin needs major 12 */
  {"V100 R450 jit-off nvrtc11.8",          70, R450, EW, NOPY, N118,             NOF,  0, 1,  NVRTC, 4, 11080, 0, 0, 0   }, /* 3: no JIT; 4: 11.8 makes a cubin, no JIT needed */
  {"V100 R450 jit-off nvrtc11.0",          70, R450, EW, NOPY, N110,             NOF,  0, 1,  CPU,   5, 0,     0, 0, 0   }, /* 4: 11.0 has no GetCUBIN, its PTX needs the JIT */
/* T4 (7.5) */
  {"T4 R525",                              75, R525, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: the 13.0 sm_75 cubin needs 13000; 3: legacy */
  {"T4 R525 nvrtc12.2",                    75, R525, EW, NOPY, N122,             NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: PTX precedes NVRTC */
  {"T4 R525 no-legacy nvrtc12.2",          75, R525, EW, NOCL, N122,             NOF,  0, 0,  NVRTC, 4, 12020, 0, 0, 0   }, /* 4: 12.2 on a 12.0 driver (same major) */
  {"T4 R525 no-legacy nvrtc13+12.2",       75, R525, EW, NOCL, N13 | N122,       NOF,  0, 0,  NVRTC, 4, 12020, 0, 0, 0   }, /* 4: 13's cubin needs 13000; next newest */
  {"T4 R525 no-legacy nvrtc13",            75, R525, EW, NOCL, N13,              NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 4: 13's cubin needs 13000 */
  {"T4 R580",                              75, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 1, 75,    0, 0, T130}, /* 1 */
/* A100 (8.0) */
  {"A100 R450",                            80, R450, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_80 needs 13000; 3: legacy */
  {"A100 R450 no-legacy nvrtc11.8",        80, R450, EW, NOCL, N118,             NOF,  0, 0,  NVRTC, 4, 11080, 0, 0, 0   }, /* 4 */
  {"A100 R520 no-legacy +ptx7.8",          80, R520, EW, NOCL | B_L118PTX, N0,   NOF,  0, 0,  PTX,   3, 35,    0, 0, 0   }, /* 3: compute_120 above 8.0; compute_35 ISA 7.8 needs 11080 */
  {"A100 R470 no-legacy +ptx7.8 nvrtc11.8",80, R470, EW, NOCL | B_L118PTX, N118, NOF,  0, 0,  NVRTC, 4, 11080, 0, 0, 0   }, /* 3: ISA 7.8 needs 11080 > 11040; 4 */
  {"A100 R580",                            80, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 1, 80,    0, 0, T130}, /* 1 */
/* RTX 3090 (8.6), Jetson Orin (8.7), L4 (8.9) */
  {"RTX3090 R580",                         86, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 1, 86,    0, 0, T130}, /* 1 */
  {"RTX3090 R580 nvrtc13",                 86, R580, EW, NOPY, N13,              NOF,  0, 0,  CUBIN, 1, 86,    0, 0, T130}, /* 1 precedes 4 */
  {"Orin 8.7 R580",                        87, R580, EW, NOPY, N0,               NOF,  0, 0,  PTX,   3, 75,    0, 0, 0   }, /* 2: sm_80/86 are desktop, Orin is Tegra; 3: compute_120 above 8.7, compute_75 ISA 9.0 on 13000 */
  {"L4 R580",                              89, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 1, 89,    0, 0, T130}, /* 1 */
  {"L4 R535 nvrtc12.2",                    89, R535, EW, NOPY, N122,             NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_89 needs 13000; 3 precedes 4 */
  {"L4 R535 no-legacy nvrtc12.2",          89, R535, EW, NOCL, N122,             NOF,  0, 0,  NVRTC, 4, 12020, 0, 0, 0   }, /* 4 */
/* H100 (9.0) */
  {"H100 R525",                            90, R525, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_90 needs 13000; 3 */
  {"H100 R535 nvrtc12.2",                  90, R535, EW, NOPY, N122,             NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3 precedes 4 */
  {"H100 R535 no-legacy nvrtc13+12.2",     90, R535, EW, NOCL, N13 | N122,       NOF,  0, 0,  NVRTC, 4, 12020, 0, 0, 0   }, /* 4: 13 needs 13000 */
  {"H100 R580 nvrtc13",                    90, R580, EW, NOPY, N13,              NOF,  0, 0,  CUBIN, 1, 90,    0, 0, T130}, /* 1 */
  {"H100 R580 jit-off",                    90, R580, EW, NOPY, N0,               NOF,  0, 1,  CUBIN, 1, 90,    0, 0, T130}, /* 1: a cubin needs no JIT */
  {"H100 R535 jit-off nvrtc12.2",          90, R535, EW, NOPY, N122,             NOF,  0, 1,  NVRTC, 4, 12020, 0, 0, 0   }, /* 3: no JIT; 4 */
  {"H100 R535 jit-off",                    90, R535, EW, NOPY, N0,               NOF,  0, 1,  CPU,   5, 0,     0, 0, 0   }, /* 3: no JIT; 5 */
  {"H100 R580 force cubin",                90, R580, EW, NOPY, N13,              CUBIN,0, 0,  CUBIN, 1, 90,    0, 0, T130}, /* force = what 1 picks anyway */
  {"H100 R580 force ptx",                  90, R580, EW, NOPY, N13,              PTX,  0, 0,  PTX,   3, 75,    0, 0, 0   }, /* force: compute_120 is above 9.0, compute_75 ISA 9.0 on 13000 */
  {"H100 R580 force ptx, no compute_75",   90, R580, EW, NOPY & ~(unsigned)B_PTX75, N13, PTX, 0, 0, NONE, ANY_STEP, 0, 0, 0, 0   }, /* force: compute_120 is above 9.0; legacy is another path */
  {"H100 R580 force ptx-legacy",           90, R580, EW, NOPY, N13,              PTXL, 0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* force: the legacy compute_35 JITs on Hopper */
  {"H100 R580 force nvrtc",                90, R580, EW, NOPY, N13 | N122,       NVRTC,0, 0,  NVRTC, 4, 13000, 0, 0, 0   }, /* force: newest NVRTC with sm_90 */
  {"H100 R580 force nvrtc, none loadable", 90, R580, EW, NOPY, N0,               NVRTC,0, 0,  NONE,  ANY_STEP, 0, 0, 0, 0   }, /* force: no NVRTC, no fallback */
  {"H100 R580 force cpu",                  90, R580, EW, NOPY, N13,              CPU,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* force cpu always gives the CPU */
  {"H100 R580 strict",                     90, R580, EW, NOPY, N0,               NOF,  1, 0,  CUBIN, 1, 90,    0, 0, T130}, /* 1: no fallback, nothing for strict to refuse */
  {"H100 driver unknown",                  90, DRV_UNKNOWN, EW, NOPY, N13,        NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* no image and no NVRTC output loads on driver 0 */
  {"H100 driver unknown strict",           90, DRV_UNKNOWN, EW, NOPY, N13,        NOF,  1, 0,  CPU,   5, 0,     0, 1, 0   }, /* 5 + strict */
/* Blackwell: B200 (10.0), B300 (10.3), RTX 5090 (12.0), GB10 (12.1) */
  {"B200 R570",                           100, R570, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_100 needs 13000; compute_120 above 10.0; 3 */
  {"B200 R570 no-legacy nvrtc13+12.2",    100, R570, EW, NOCL, N13 | N122,       NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 4: 13 needs 13000; 12.2 has no sm_100 */
  {"B200 R580",                           100, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 1, 100,   0, 0, T130}, /* 1 */
  {"B300 R580",                           103, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 2, 100,   0, 0, T130}, /* 2: sm_100 on 10.3 */
  {"B300 R580 nvrtc13",                   103, R580, EW, NOPY, N13,              NOF,  0, 0,  CUBIN, 2, 100,   0, 0, T130}, /* 2 precedes 4, though NVRTC 13 has sm_103 */
  {"RTX5090 R570",                        120, R570, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_120 needs 13000; compute_120 ISA 9.0 needs 13000; 3 */
  {"RTX5090 R580",                        120, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 1, 120,   0, 0, T130}, /* 1 */
  {"RTX5090 R580 force ptx",              120, R580, EW, NOPY, N0,               PTX,  0, 0,  PTX,   3, 120,   0, 0, 0   }, /* force: compute_120 ISA 9.0 on 13000 */
  {"GB10 12.1 R580",                      121, R580, EW, NOPY, N0,               NOF,  0, 0,  CUBIN, 2, 120,   0, 0, T130}, /* 2: sm_120 on 12.1 */
/* A future CC 13.0 device */
  {"CC13.0 driver13000",                  130, R580, EW, NOPY, N0,               NOF,  0, 0,  PTX,   3, 120,   0, 0, 0   }, /* 3: compute_120 is the highest PTX not above 13.0 */
  {"CC13.0 driver14000 nvrtc13",          130, DRV14,EW, NOPY, N13,              NOF,  0, 0,  PTX,   3, 120,   0, 0, 0   }, /* 3 */
  {"CC13.0 driver12080",                  130, R570, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 3: ISA 9.0 needs 13000, so legacy compute_35 */
  {"CC13.0 driver14000 jit-off nvrtc13",  130, DRV14,EW, NOPY, N13,              NOF,  0, 1,  CPU,   5, 0,     0, 0, 0   }, /* 3: no JIT; 4: 13 has no sm_130 */
  {"CC13.0 driver14000 force cubin",      130, DRV14,EW, NOPY, N13,              CUBIN,0, 0,  NONE,  ANY_STEP, 0, 0, 0, 0   }, /* force: no cubin of major 13 */
/* a/f variants: module archspec = {sm_90a, sm_100f}, module tuned = {sm_100a, sm_120f} */
  {"H100 R580 sm_90a",                     90, R580, AS, 0,    N0,               NOF,  0, 0,  CUBIN, 1, 90,  'a', 0, T130}, /* 1: 'a' on exactly its SM */
  {"B200 R580 sm_100f",                   100, R580, AS, 0,    N0,               NOF,  0, 0,  CUBIN, 1, 100, 'f', 0, T130}, /* 1: 'f' on its own SM; sm_90a not on 10.0 */
  {"B300 R580 sm_100f",                   103, R580, AS, 0,    N0,               NOF,  0, 0,  CUBIN, 2, 100, 'f', 0, T130}, /* 2: 'f' within its family, lower minor */
  {"RTX5090 R580 archspec nvrtc13",       120, R580, AS, 0,    N13,              NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 4: archspec has no source */
  {"B200 R570 archspec",                  100, R570, AS, 0,    N0,               NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 13.0 cubins need 13000 */
  {"Thor 11.0 R580 archspec",             110, R580, AS, 0,    N0,               NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* sm_100f's family is major 10 only */
  {"B200 R580 sm_100a",                   100, R580, TU, 0,    N0,               NOF,  0, 0,  CUBIN, 1, 100, 'a', 0, T130}, /* 1 */
  {"B300 R580 sm_100a",                   103, R580, TU, 0,    N0,               NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 2 never takes 'a' */
  {"RTX5090 R580 sm_120f",                120, R580, TU, 0,    N0,               NOF,  0, 0,  CUBIN, 1, 120, 'f', 0, T130}, /* 1 */
  {"GB10 R580 sm_120f",                   121, R580, TU, 0,    N0,               NOF,  0, 0,  CUBIN, 2, 120, 'f', 0, T130}, /* 2: 'f' within its family */
/* The default build (DEF): 11.8 cubins sm_35 37 50 52 53 60 61 62 70 72 from ptxas and
 * sm_75 80 86 87 89 90 from NVRTC 11.8 (min driver 11000: MVC within major 11, and every
 * later driver), 12.9 cubins sm_75 80 86 87 89 90 100 120 from NVRTC 12.9 (12000: MVC
 * within major 12), 13.0 cubins sm_75 80 86 89 90 100 120 from nvcc (13000), PTX
 * compute_75 and compute_120 (ISA 9.0 -> 13000), legacy PTX compute_35 (ISA 3.2 -> 5050),
 * sources. Where one SM has cubins of several toolkits, step 1 (and 2) takes the newest
 * the driver loads: 13.0 on R580+, 12.9 on a 12.x driver, 11.8 on an 11.x one. */
  {"DEF K80 R470",                         37, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 37,    0, 0, T118}, /* 1: sm_37 cubin, 11000 <= 11040 */
  {"DEF K80 R470 nvrtc11.8",               37, R470, EW, DEF,  N118,             NOF,  0, 0,  CUBIN, 1, 37,    0, 0, T118}, /* 1 precedes 4 */
  {"DEF K80 R418",                         37, R418, EW, DEF,  N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1,2: sm_37/sm_35 need 11000 > 10010; 3: compute_75/120 above 3.7; legacy ISA 3.2 needs 5050 */
  {"DEF K80 R470 force ptx-legacy",        37, R470, EW, DEF,  N0,               PTXL, 0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* force: the legacy PTX still JITs */
  {"DEF GTX1080 R418",                     61, R418, EW, DEF,  N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1,2: sm_61/sm_60 need 11000 > 10010; 3: compute_75 above 6.1; legacy */
  {"DEF GTX1080 R418 jit-off",             61, R418, EW, DEF,  N0,               NOF,  0, 1,  CPU,   5, 0,     0, 0, 0   }, /* 1,2: need 11000; 3: no JIT; 4: no NVRTC */
  {"DEF GTX1080 R535",                     61, R535, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 61,    0, 0, T118}, /* 1: an 11.8 cubin on a 12.2 driver (backward compatibility) */
  {"DEF GTX1080 R535 nvrtc13+12.2",        61, R535, EW, DEF,  N13 | N122,       NOF,  0, 0,  CUBIN, 1, 61,    0, 0, T118}, /* 1 precedes 4 */
  {"DEF TX2 6.2 R470",                     62, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 62,    0, 0, T118}, /* 1: sm_62 cubin */
  {"DEF V100 R450",                        70, R450, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 70,    0, 0, T118}, /* 1: sm_70 cubin, 11000 <= 11000 (the sm_75 ones have a higher minor) */
  {"DEF V100 R418",                        70, R418, EW, DEF,  N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_70 needs 11000 > 10010; 3: compute_75 above 7.0; legacy */
  {"DEF Xavier 7.2 R470",                  72, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 72,    0, 0, T118}, /* 1: sm_72 cubin (a CUDA 11.4 driver) */
  {"DEF Xavier 7.2 CUDA 10.2 driver",      72, DRV102,EW, DEF, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_72 needs 11000 > 10020; 2: sm_70 is desktop, 7.2 Tegra; 3: compute_75 above 7.2; legacy */
  {"DEF Maxwell 5.2 R535",                 52, R535, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 52,    0, 0, T118}, /* 1: sm_52 cubin on a 12.2 driver */
  {"DEF Nano 5.3 R470",                    53, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 53,    0, 0, T118}, /* 1: sm_53 cubin */
/* Turing, Ampere, Ada, Hopper on the drivers fleets run (R450 ... R580) */
  {"DEF T4 R450",                          75, R450, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 75,    0, 0, T118}, /* 1: sm_75 13.0 needs 13000, 12.9 needs 12000 > 11000; 11.8 needs 11000 <= 11000 */
  {"DEF T4 R470",                          75, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 75,    0, 0, T118}, /* 1: sm_75 13.0 and 12.9 rejected (13000, 12000 > 11040); 11.8 (11000) */
  {"DEF T4 R580",                          75, R580, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 75,    0, 0, T130}, /* 1: sm_75 13.0, 12.9, 11.8 all load on 13000: the newest, 13.0 */
  {"DEF A100 R450",                        80, R450, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 80,    0, 0, T118}, /* 1: sm_80 13.0 / 12.9 need 13000 / 12000 > 11000; 11.8 (11000) */
  {"DEF A100 R470",                        80, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 80,    0, 0, T118}, /* 1: sm_80 13.0 / 12.9 need 13000 / 12000 > 11040; 11.8 (11000 <= 11040) */
  {"DEF A100 R535",                        80, R535, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 80,    0, 0, T129}, /* 1: sm_80 13.0 needs 13000 > 12020; 12.9 (12000) newer than 11.8 */
  {"DEF RTX3090 8.6 R470",                 86, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 86,    0, 0, T118}, /* 1: sm_86 11.8 is the only one an 11.4 driver loads */
  {"DEF L4 / RTX4090 8.9 R550",            89, R550, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 89,    0, 0, T129}, /* 1: sm_89 13.0 needs 13000 > 12040; 12.9 (12000) newer than 11.8 */
  {"DEF H100 R470",                        90, R470, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 90,    0, 0, T118}, /* 1: sm_90 11.8 (11000 <= 11040); the rule only: no R470 drives an H100 */
  {"DEF H100 R520",                        90, R520, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 90,    0, 0, T118}, /* 1: sm_90 13.0 / 12.9 need 13000 / 12000 > 11080; 11.8 */
  {"DEF H100 R535",                        90, R535, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 90,    0, 0, T129}, /* 1: sm_90 13.0 needs 13000 > 12020; 12.9 (12000) before 11.8 */
  {"DEF H100 R535 nvrtc13+12.2",           90, R535, EW, DEF,  N13 | N122,       NOF,  0, 0,  CUBIN, 1, 90,    0, 0, T129}, /* 1 precedes 4 */
  {"DEF H100 R535 jit-off",                90, R535, EW, DEF,  N0,               NOF,  0, 1,  CUBIN, 1, 90,    0, 0, T129}, /* 1: a cubin needs no JIT */
  {"DEF H100 R535 force ptx-legacy",       90, R535, EW, DEF,  N0,               PTXL, 0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* force: the legacy PTX instead of the cubins */
  {"DEF H100 R580",                        90, R580, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 90,    0, 0, T130}, /* 1: sm_90 13.0 (13000), the newest of the three */
/* Blackwell */
  {"DEF B200 R550",                       100, R550, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 100,   0, 0, T129}, /* 1: sm_100 13.0 needs 13000 > 12040; 12.9 needs 12000 <= 12040: the cubin, not the legacy PTX (step 3). The rule only: sm_100 came with CUDA 12.8 (R570) */
  {"DEF B200 R570",                       100, R570, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 100,   0, 0, T129}, /* 1: sm_100 13.0 needs 13000 > 12080; 12.9 */
  {"DEF B300 10.3 R570",                  103, R570, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 2, 100,   0, 0, T129}, /* 1: no sm_103; 2: sm_100 13.0 needs 13000 > 12080, 12.9 loads */
  {"DEF B300 10.3 R580",                  103, R580, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 2, 100,   0, 0, T130}, /* 2: sm_100 13.0 and 12.9 both load: the newest */
  {"DEF RTX5090 R470",                    120, R470, EW, DEF,  N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_120 13.0 / 12.9 need 13000 / 12000 > 11040, no 11.8 sm_120; 3: ISA 9.0 needs 13000; legacy */
  {"DEF RTX5090 R570",                    120, R570, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 120,   0, 0, T129}, /* 1: sm_120 13.0 needs 13000 > 12080; 12.9 (12000) */
  {"DEF RTX5090 R580",                    120, R580, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 120,   0, 0, T130}, /* 1: sm_120 13.0 before 12.9 */
  {"DEF GB10 12.1 R570",                  121, R570, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 2, 120,   0, 0, T129}, /* 2: sm_120 12.9 on 12.1 (desktop); 13.0 needs 13000 */
  {"DEF TK1 3.2 R470",                     32, R470, EW, DEF,  N0,               NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* 1,2: sm_35/37 have a higher minor; 3: compute_35 above 3.2 */
/* Jetsons on the drivers their JetPack really ships: Nano and TX2 end at JetPack 4.6
 * (a CUDA 10.2 driver), Orin runs JetPack 6 (CUDA 12.2), Thor reports 10.1 on a 12.8/12.9
 * driver and 11.0 on a CUDA 13 one. The 12.9 sm_87 cubin loads on JetPack 6's 12.2
 * driver by the same minor-version compatibility rule as on a desktop driver. */
  {"DEF Nano 5.3 CUDA 10.2 driver",        53, DRV102,EW, DEF, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_53 needs 11000 > 10020; 2: sm_50/52 desktop, 5.3 Tegra; 3: compute_75/120 above 5.3; legacy ISA 3.2 needs 5050 */
  {"DEF TX2 6.2 CUDA 10.2 driver",         62, DRV102,EW, DEF, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_62 needs 11000 > 10020; 2: sm_60/61 desktop, 6.2 Tegra; 3: legacy */
  {"DEF Orin 8.7 JetPack 6",               87, JP60, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 87,    0, 0, T129}, /* 1: sm_87 from 12.9 (12000 <= 12020) and 11.8; nvcc 13 makes none; the newer */
  {"DEF Orin 8.7 R580",                    87, R580, EW, DEF,  N0,               NOF,  0, 0,  CUBIN, 1, 87,    0, 0, T129}, /* 1: no 13.0 sm_87; 12.9 before 11.8 */
  {"NONV Orin 8.7 JetPack 6",              87, JP60, EW, NONV, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* no NVRTC cubins: 1: no sm_87; 2: sm_80/86 desktop (and 13000); 3: compute_75 ISA 9.0 needs 13000 > 12020; legacy */
  {"NONV Orin 8.7 JetPack 6 no-legacy nvrtc12.2",87,JP60,EW,NONV & ~(unsigned)B_CLANG, N122, NOF, 0, 0, NVRTC, 4, 12020, 0, 0, 0 }, /* 1-3 as above, no legacy PTX; 4: 12.2 has sm_87, its cubin needs major 12 */
  {"DEF Thor 10.1 R570",                  101, R570, EW, DEF,  N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: no sm_101; 2: sm_100 is desktop, 10.1 Tegra; 3: ISA 9.0 needs 13000 > 12080; legacy */
  {"DEF Thor 11.0 R580",                  110, R580, EW, DEF,  N0,               NOF,  0, 0,  PTX,   3, 75,    0, 0, 0   }, /* 1,2: no cubin of major 11; 3: compute_120 above 11.0, compute_75 ISA 9.0 on 13000 */
/* Without .tools/ (NOPY) the same fleet has no cubin below R580 (the rows above without DEF). */
  {"NOPY A100 R470",                       80, R470, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_80 needs 13000; 3: ISA 9.0 needs 13000; legacy */
  {"NOPY H100 R535",                       90, R535, EW, NOPY, N0,               NOF,  0, 0,  PTXL,  3, 35,    0, 0, 0   }, /* 1: sm_90 needs 13000; 3: ISA 9.0 needs 13000; legacy */
/* Step 2's order (module step2: sm_86 from 11.8 and from an unknown toolkit, sm_80 from 12.9) */
  {"step2 RTX4090 8.9 R535",               89, R535, ST, 0,    N0,               NOF,  0, 0,  CUBIN, 2, 86,    0, 0, T118}, /* 2: the highest lower minor (8.6) before sm_80's newer 12.9; at 8.6 the known 11.8 before the unknown toolkit */
  {"step2 RTX4090 8.9 R418",               89, R418, ST, 0,    N0,               NOF,  0, 0,  CUBIN, 2, 86,    0, 0, 0   }, /* 2: sm_86 11.8 needs 11000 > 10010; the unknown toolkit puts no bound on the driver */
  {"step2 A100 8.0 R535",                  80, R535, ST, 0,    N0,               NOF,  0, 0,  CUBIN, 1, 80,    0, 0, T129}, /* 1: sm_80 12.9 (12000 <= 12020) */
/* a module with no images at all */
  {"H100 R580 unknown module nvrtc13",     90, R580, NOSUCH, NOPY, N13,           NOF,  0, 0,  CPU,   5, 0,     0, 0, 0   }, /* other modules' images and sources are ignored */
};
/* clang-format on */

#define N_CASES COUNT(k_cases)

/* ---------------------------------------------------------------- rule-level checks */

/* The path an image would take. */
static em_path image_path(const em_image_info *im) {
  if (im->kind == EM_IMAGE_CUBIN) return EM_PATH_CUBIN;
  return (im->flags & EM_IMAGE_LEGACY) ? EM_PATH_PTX_LEGACY : EM_PATH_PTX;
}

/* Whether the image's code can run on CC cc at all (reference §3.2). */
/* Tegra (Jetson / Drive) compute capabilities, reference §3.1. */
static int tegra_cc(int cc) {
  static const int tegra[] = {32, 53, 62, 72, 87, 101, 110};
  size_t i;
  for (i = 0; i < sizeof tegra / sizeof tegra[0]; i++)
    if (tegra[i] == cc) return 1;
  return 0;
}

static int image_runs_on(const em_image_info *im, int cc) {
  if (im->kind == EM_IMAGE_PTX) return im->arch <= cc;
  if (im->variant == 'a') return im->arch == cc;
  if (im->arch == cc) return 1;
  if (tegra_cc(im->arch) || tegra_cc(cc)) return 0; /* no binary compatibility to or from Tegra */
  return im->arch / 10 == cc / 10 && im->arch % 10 <= cc % 10; /* plain and 'f' */
}

/* Whether an image may be tried on this device: it runs there, the driver loads
 * it, the JIT is allowed if it is PTX, and force allows its path. */
static int image_viable(const em_image_info *im, const policy_case *c) {
  if (!image_runs_on(im, c->cc)) return 0;
  if (im->min_driver > c->driver) return 0;
  if (im->kind == EM_IMAGE_PTX && c->jit_disabled) return 0;
  return c->force == EM_PATH_NONE || c->force == image_path(im);
}

static int contains(const int *v, size_t n, int x) {
  size_t i;
  for (i = 0; i < n; i++)
    if (v[i] == x) return 1;
  return 0;
}

static int module_has_source(const image_table *t, const char *module) {
  size_t i;
  for (i = 0; i < t->n; i++)
    if (t->img[i].kind == EM_IMAGE_SOURCE && strcmp(t->img[i].module, module) == 0) return 1;
  return 0;
}

static int nvrtc_viable(const em_policy_nvrtc *nv, const policy_case *c, const image_table *t) {
  int supports = nv->archs ? contains(nv->archs, nv->n_archs, c->cc)
                           : contains(k_archs110_ref, COUNT(k_archs110_ref), c->cc);
  int loads = nv->has_cubin ? c->driver / 1000 >= nv->version / 1000 : c->driver >= nv->version;
  if (!module_has_source(t, c->module) || !supports || !loads) return 0;
  if (!nv->has_cubin && c->jit_disabled) return 0;
  return c->force == EM_PATH_NONE || c->force == EM_PATH_NVRTC;
}

/* ---------------------------------------------------------------- plan checks */

static const char *path_str(em_path p) {
  static const char *names[] = {"none", "cubin", "ptx", "ptx-legacy", "nvrtc", "cpu"};
  return (unsigned)p < COUNT(names) ? names[p] : "?";
}

/* Prints every candidate, so a failure shows what the policy decided. */
static void dump_plan(const policy_case *c, const em_plan *p) {
  int i;
  print_error("[%s] plan: path=%s chosen=%d step=%d strict_error=%d reason=\"%s\"\n", c->name,
              path_str(p->path), p->chosen, p->step, p->strict_error, p->reason);
  for (i = 0; i < p->n_candidates && i < EM_PLAN_MAX_CANDIDATES; i++) {
    const em_plan_candidate *k = &p->candidates[i];
    print_error("  #%d %s image=%d arch=%d%c nvrtc=%d viable=%d: %s\n", i, path_str(k->path),
                k->image_index, k->arch, k->variant ? k->variant : ' ', k->nvrtc_version, k->viable,
                k->reason);
  }
}

static int g_fail;

#define EXPECT(cond, ...)                        \
  do {                                           \
    if (!(cond)) {                               \
      print_error("[%s] ", c->name);             \
      print_error(__VA_ARGS__);                  \
      print_error("\n");                         \
      g_fail++;                                  \
    }                                            \
  } while (0)

/* The choice itself: path, step, strict_error, which image or NVRTC. */
static void check_choice(const policy_case *c, const image_table *t, const em_plan *p) {
  const em_plan_candidate *k;
  EXPECT(p->path == c->path, "path %s, expected %s", path_str(p->path), path_str(c->path));
  EXPECT(c->step == ANY_STEP || p->step == c->step, "step %d, expected %d", p->step, c->step);
  EXPECT(p->strict_error == c->strict_error, "strict_error %d, expected %d", p->strict_error, c->strict_error);
  EXPECT(p->reason[0] != '\0', "plan.reason is empty");
  if (c->path == EM_PATH_NONE) {
    EXPECT(p->chosen == -1, "chosen %d, expected -1 for a plan with no path", p->chosen);
    return;
  }
  if (p->chosen < 0 || p->chosen >= p->n_candidates) {
    EXPECT(0, "chosen %d out of range [0, %d)", p->chosen, p->n_candidates);
    return;
  }
  k = &p->candidates[p->chosen];
  EXPECT(k->viable == 1, "the chosen candidate is not viable");
  EXPECT(k->path == c->path, "chosen candidate path %s, expected %s", path_str(k->path), path_str(c->path));
  if (c->path == EM_PATH_NVRTC) {
    EXPECT(k->nvrtc_version == c->what, "NVRTC %d chosen, expected %d", k->nvrtc_version, c->what);
    EXPECT(k->arch == c->cc, "NVRTC compiles for %d, expected the device's SM %d", k->arch, c->cc);
  } else if (c->path == EM_PATH_CPU) {
    EXPECT(k->image_index == -1, "CPU candidate has image_index %d", k->image_index);
  } else if (k->image_index < 0 || (size_t)k->image_index >= t->n) {
    EXPECT(0, "chosen image_index %d out of range", k->image_index);
  } else {
    const em_image_info *im = &t->img[k->image_index];
    EXPECT(strcmp(im->module, c->module) == 0, "chosen image of module %s", im->module);
    EXPECT(im->arch == c->what, "chosen image arch %d, expected %d", im->arch, c->what);
    EXPECT(im->variant == c->variant, "chosen image variant '%c', expected '%c'", im->variant ? im->variant : '0',
           c->variant ? c->variant : '0');
    EXPECT(im->kind == (c->path == EM_PATH_CUBIN ? EM_IMAGE_CUBIN : EM_IMAGE_PTX), "chosen image kind %d", im->kind);
    EXPECT(((im->flags & EM_IMAGE_LEGACY) != 0) == (c->path == EM_PATH_PTX_LEGACY), "chosen image flags 0x%x",
           im->flags);
    if (c->path == EM_PATH_CUBIN)
      EXPECT(im->toolkit == c->toolkit, "chosen cubin made by toolkit %d, expected %d", im->toolkit, c->toolkit);
  }
}

/* The candidate list: the choice is the first viable one, force allows no other
 * path, every image of the module is listed once with the verdict the rules give,
 * nothing of another module is listed, every entry says why, and viable cubins of
 * one SM come newest toolkit first (the loader falls back along that order). */
static void check_candidates(const policy_case *c, const image_table *t, const em_policy_nvrtc *nv, size_t n_nv,
                             const em_plan *p) {
  int i;
  size_t j;
  EXPECT(p->n_candidates >= 0 && p->n_candidates <= EM_PLAN_MAX_CANDIDATES, "n_candidates %d", p->n_candidates);
  if (p->n_candidates < 0 || p->n_candidates > EM_PLAN_MAX_CANDIDATES) return;
  for (i = 0; i < p->n_candidates; i++) {
    const em_plan_candidate *k = &p->candidates[i];
    EXPECT(k->reason[0] != '\0', "candidate #%d has no reason", i);
    EXPECT(!(k->viable && p->chosen >= 0 && i < p->chosen), "candidate #%d is viable but comes before the choice", i);
    EXPECT(!(k->viable && p->chosen < 0), "candidate #%d is viable but nothing was chosen", i);
    EXPECT(!(k->viable && c->force != EM_PATH_NONE && k->path != c->force),
           "candidate #%d (%s) is viable under force=%s", i, path_str(k->path), path_str(c->force));
    if (k->image_index >= 0) {
      const em_image_info *im;
      if ((size_t)k->image_index >= t->n) {
        EXPECT(0, "candidate #%d image_index %d out of range", i, k->image_index);
        continue;
      }
      im = &t->img[k->image_index];
      EXPECT(strcmp(im->module, c->module) == 0, "candidate #%d is image %d of module %s", i, k->image_index,
             im->module);
      EXPECT(im->kind == EM_IMAGE_CUBIN || im->kind == EM_IMAGE_PTX, "candidate #%d is an image of kind %d", i,
             im->kind);
      EXPECT(k->path == image_path(im), "candidate #%d path %s for a %s image", i, path_str(k->path),
             path_str(image_path(im)));
      EXPECT(k->arch == im->arch && k->variant == im->variant, "candidate #%d arch %d%c for image arch %d%c", i,
             k->arch, k->variant ? k->variant : ' ', im->arch, im->variant ? im->variant : ' ');
    } else if (k->path == EM_PATH_NVRTC) {
      const em_policy_nvrtc *match = NULL;
      for (j = 0; j < n_nv; j++)
        if (nv[j].version == k->nvrtc_version) match = &nv[j];
      EXPECT(match != NULL, "candidate #%d names NVRTC %d, which was not given", i, k->nvrtc_version);
      if (match)
        EXPECT(k->viable == nvrtc_viable(match, c, t), "candidate #%d NVRTC %d viable=%d, the rules say %d", i,
               k->nvrtc_version, k->viable, nvrtc_viable(match, c, t));
    } else {
      EXPECT(k->path == EM_PATH_CPU, "candidate #%d has no image and path %s", i, path_str(k->path));
      EXPECT(!(k->viable && c->force != EM_PATH_NONE && c->force != EM_PATH_CPU),
             "candidate #%d: CPU viable under force", i);
    }
  }
  for (i = 0; i < p->n_candidates; i++) {
    const em_plan_candidate *k = &p->candidates[i];
    int later;
    if (k->path != EM_PATH_CUBIN || !k->viable || k->image_index < 0 || (size_t)k->image_index >= t->n) continue;
    for (later = i + 1; later < p->n_candidates; later++) {
      const em_plan_candidate *l = &p->candidates[later];
      if (l->path != EM_PATH_CUBIN || !l->viable || l->arch != k->arch || l->image_index < 0 ||
          (size_t)l->image_index >= t->n)
        continue;
      EXPECT(t->img[l->image_index].toolkit <= t->img[k->image_index].toolkit,
             "sm_%d cubins: toolkit %d (#%d) comes after toolkit %d (#%d)", k->arch,
             t->img[l->image_index].toolkit, later, t->img[k->image_index].toolkit, i);
    }
  }
  for (j = 0; j < t->n; j++) {
    const em_image_info *im = &t->img[j];
    int seen = 0, at = -1;
    if (strcmp(im->module, c->module) != 0 || (im->kind != EM_IMAGE_CUBIN && im->kind != EM_IMAGE_PTX)) continue;
    for (i = 0; i < p->n_candidates; i++)
      if (p->candidates[i].image_index == (int)j) seen++, at = i;
    EXPECT(seen == 1, "image %zu (%s arch %d%c) listed %d times, expected once", j, path_str(image_path(im)),
           im->arch, im->variant ? im->variant : ' ', seen);
    if (seen == 1)
      EXPECT(p->candidates[at].viable == image_viable(im, c), "image %zu (%s arch %d%c) viable=%d, the rules say %d",
             j, path_str(image_path(im)), im->arch, im->variant ? im->variant : ' ', p->candidates[at].viable,
             image_viable(im, c));
  }
}

static void plan_case(const policy_case *c, const image_table *t, const em_policy_nvrtc *nv, size_t n_nv,
                      em_plan *out) {
  em_policy_input in;
  memset(&in, 0, sizeof in);
  in.cc = c->cc;
  in.driver_version = c->driver;
  in.module = c->module;
  in.images = t->img;
  in.n_images = t->n;
  in.nvrtc = n_nv ? nv : NULL;
  in.n_nvrtc = n_nv;
  in.force = c->force;
  in.strict = c->strict;
  in.jit_disabled = c->jit_disabled;
  memset(out, 0xA5, sizeof *out); /* garbage: the policy must fill every field it reports */
  em_policy_plan(&in, out);
}

/* Returns the number of failed expectations. */
static int check_case(const policy_case *c) {
  static image_table t;
  em_policy_nvrtc nv[4];
  size_t n_nv = build_nvrtc(nv, c->nvrtc);
  em_plan p;
  int before = g_fail;
  build_images(&t, c->build);
  plan_case(c, &t, nv, n_nv, &p);
  check_choice(c, &t, &p);
  check_candidates(c, &t, nv, n_nv, &p);
  if (g_fail != before) dump_plan(c, &p);
  return g_fail - before;
}

static void test_case(void **state) {
  const policy_case *c = *state;
  assert_int_equal(check_case(c), 0);
}

/* ---------------------------------------------------------------- other tests */

/* Two GPUs of different generations in one process: the same image table, two
 * plans, each right for its device, and the first unchanged when asked again. */
static void test_two_gpus_one_process(void **state) {
  static image_table t;
  em_plan v100, h100, again;
  /* A build without the PyPI ptxas (NOPY): rule 3: no 7.0 cubin, compute_75 is above
   * 7.0, legacy PTX; rule 1: sm_90. R580 drives both. */
  static const policy_case cv = {"mixed: V100 R580", 70, R580, EW, NOPY, N0, NOF, 0, 0, PTXL, 3, 35, 0, 0, 0};
  static const policy_case ch = {"mixed: H100 R580", 90, R580, EW, NOPY, N0, NOF, 0, 0, CUBIN, 1, 90, 0, 0, T130};
  const policy_case *c = &cv;
  int before = g_fail;
  (void)state;
  build_images(&t, NOPY);
  plan_case(&cv, &t, NULL, 0, &v100);
  plan_case(&ch, &t, NULL, 0, &h100);
  plan_case(&cv, &t, NULL, 0, &again);
  check_choice(&cv, &t, &v100);
  check_candidates(&cv, &t, NULL, 0, &v100);
  check_choice(&ch, &t, &h100);
  check_candidates(&ch, &t, NULL, 0, &h100);
  EXPECT(v100.path != h100.path, "the two devices got the same path %s", path_str(v100.path));
  EXPECT(again.path == v100.path && again.chosen == v100.chosen && again.step == v100.step &&
             again.n_candidates == v100.n_candidates,
         "planning the V100 again after the H100 gave a different plan");
  assert_int_equal(g_fail - before, 0);
}

/* More images than a plan holds: 300 cubins for another major (rejected on
 * CC 9.0), then a legacy PTX (viable): the rejected ones past the cap are
 * counted, not listed, and neither the viable PTX nor the CPU entry is lost. */
static void test_plan_overflow_keeps_viable_and_cpu(void **state) {
  static em_image_info img[301];
  em_policy_input in;
  em_plan p;
  int i;
  (void)state;
  for (i = 0; i < 300; i++) {
    memset(&img[i], 0, sizeof img[i]);
    img[i].module = EW, img[i].kind = EM_IMAGE_CUBIN, img[i].arch = 50, img[i].toolkit = 11080;
  }
  memset(&img[300], 0, sizeof img[300]);
  img[300].module = EW, img[300].kind = EM_IMAGE_PTX, img[300].arch = 35, img[300].ptx_isa = 32;
  img[300].flags = EM_IMAGE_LEGACY;
  memset(&in, 0, sizeof in);
  in.cc = 90, in.driver_version = R580, in.module = EW, in.images = img, in.n_images = 301;
  em_policy_plan(&in, &p);
  assert_int_equal(p.n_candidates, EM_PLAN_MAX_CANDIDATES);
  /* 301 images + CPU = 302 candidates; 128 listed. */
  assert_int_equal(p.n_omitted, 302 - EM_PLAN_MAX_CANDIDATES);
  assert_int_equal(p.path, EM_PATH_PTX_LEGACY);
  assert_int_equal(p.candidates[p.chosen].image_index, 300);
  assert_int_equal(p.candidates[p.n_candidates - 1].path, EM_PATH_CPU);
  for (i = 0; i < p.n_candidates - 2; i++) assert_false(p.candidates[i].viable);
}

/* em_image_min_driver: the lowest driver from the toolkit (cubin) or the PTX ISA
 * (PTX), with the stored min_driver left 0 so the answer must be derived. */
static void test_image_min_driver(void **state) {
  static const struct {
    em_image_kind kind;
    int isa, toolkit, want;
    const char *why;
  } rows[] = {
      {EM_IMAGE_CUBIN, 0, 13000, 13000, "13.0 cubin: any 13.x driver (R580)"},
      {EM_IMAGE_CUBIN, 0, 12080, 12000, "12.8 cubin: MVC within major 12"},
      {EM_IMAGE_CUBIN, 0, 11080, 11000, "11.8 cubin: MVC within major 11"},
      {EM_IMAGE_CUBIN, 0, 11000, 11000, "11.0 cubin"},
      {EM_IMAGE_CUBIN, 0, 10020, 10020, "10.2 cubin: no MVC before 11"},
      {EM_IMAGE_PTX, 90, 13000, 13000, "ISA 9.0 -> 13.0"},
      {EM_IMAGE_PTX, 87, 12080, 12080, "ISA 8.7 -> 12.8: PTX has no MVC"},
      {EM_IMAGE_PTX, 86, 0, 12070, "ISA 8.6 -> 12.7"},
      {EM_IMAGE_PTX, 85, 12060, 12050, "ISA 8.5 -> 12.5 (12.6 kept ISA 8.5)"},
      {EM_IMAGE_PTX, 80, 12000, 12000, "ISA 8.0 -> 12.0"},
      {EM_IMAGE_PTX, 78, 11080, 11080, "ISA 7.8 -> 11.8"},
      {EM_IMAGE_PTX, 70, 11000, 11000, "ISA 7.0 -> 11.0"},
      {EM_IMAGE_PTX, 63, 10000, 10000, "ISA 6.3 -> 10.0"},
      {EM_IMAGE_PTX, 32, 0, 5050, "clang legacy ISA 3.2 -> 5.5"},
      {EM_IMAGE_SOURCE, 0, 0, 0, "sources load nowhere by themselves: 0"},
  };
  size_t i;
  int fails = 0;
  (void)state;
  for (i = 0; i < COUNT(rows); i++) {
    em_image_info im;
    int got;
    memset(&im, 0, sizeof im);
    im.module = EW;
    im.kind = rows[i].kind;
    im.arch = rows[i].kind == EM_IMAGE_SOURCE ? 0 : (rows[i].kind == EM_IMAGE_PTX ? 35 : 75);
    im.ptx_isa = rows[i].isa;
    im.toolkit = rows[i].toolkit;
    im.flags = rows[i].isa == 32 ? EM_IMAGE_LEGACY : 0;
    im.producer = "test";
    im.kernels = "add";
    got = em_image_min_driver(&im);
    if (got != rows[i].want) {
      print_error("em_image_min_driver(%s): %d, expected %d\n", rows[i].why, got, rows[i].want);
      fails++;
    }
  }
  assert_int_equal(fails, 0);
}

int main(void) {
  static struct CMUnitTest tests[N_CASES + 3];
  size_t i;
  for (i = 0; i < N_CASES; i++) {
    tests[i].name = k_cases[i].name;
    tests[i].test_func = test_case;
    tests[i].setup_func = NULL;
    tests[i].teardown_func = NULL;
    tests[i].initial_state = &k_cases[i];
  }
  tests[N_CASES] = (struct CMUnitTest)cmocka_unit_test(test_two_gpus_one_process);
  tests[N_CASES + 1] = (struct CMUnitTest)cmocka_unit_test(test_image_min_driver);
  tests[N_CASES + 2] = (struct CMUnitTest)cmocka_unit_test(test_plan_overflow_keeps_viable_and_cpu);
  return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
