/* Image validation of the fake libcuda: what a real driver accepts for
 * cuModuleLoadData(Ex) and cuLinkAddData, and the CUresult it gives when it
 * refuses. Written from the reference document (shared/reference/
 * cuda-compat.md sections 1, 3.2, 4, 5, 6) and the evidence quoted below,
 * independently of Ember's arch_table and selection policy, because the fake
 * is the oracle that policy is tested against. The byte-level readers
 * (cubin.h, ptx_header.h, fatbin.h) are Ember's: they only decode fields. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubin.h"
#include "fakecuda_internal.h"
#include "fatbin.h"
#include "ptx_header.h"

#define KERNELS_CAP 65536
#define FATBIN_MAX_ENTRIES 512
#define FATBIN_ENTRY_MAX ((size_t)256 << 20)

static const char FAKECUBIN_MAGIC[16] = "FAKECUBIN1";
#define FAKECUBIN_HEADER 36u /* magic[16], u32 total, sm, variant, driver, n_kernels */

/* ------------------------------------------------------------- rules --- */

/* PTX ISA -> first CUDA release (1000*major + 10*minor) whose driver JIT
 * accepts it. Source: NVIDIA's get_minimal_required_cuda_ver_from_ptx_ver
 * (NVIDIA/cuda-python cuda_bindings/cuda/bindings/utils/_ptx_utils.py,
 * "based on the official PTX ISA <-> CUDA Release table"; cuda-compat.md
 * section 1 note 3 quotes the rows from 5.0 on). The rows before 5.0 are the
 * same table's, i.e. the PTX ISA release history. */
static const struct {
  int isa, cuda;
} ptx_isa_table[] = {
    {10, 1000},  {11, 1010},  {12, 2000},  {13, 2010},  {14, 2020},  {20, 3000},  {21, 3010},  {22, 3020},  {23, 4000},
    {30, 4010},  {31, 5000},  {32, 5050},  {40, 6000},  {41, 6050},  {42, 7000},  {43, 7050},  {50, 8000},  {60, 9000},
    {61, 9010},  {62, 9020},  {63, 10000}, {64, 10010}, {65, 10020}, {70, 11000}, {71, 11010}, {72, 11020}, {73, 11030},
    {74, 11040}, {75, 11050}, {76, 11060}, {77, 11070}, {78, 11080}, {80, 12000}, {81, 12010}, {82, 12020}, {83, 12030},
    {84, 12040}, {85, 12050}, {86, 12070}, {87, 12080}, {88, 12090}, {90, 13000}, {91, 13010}};

/* Minimum driver for a PTX ISA; 0 when the ISA is not in the table (newer
 * than anything known, or never released): no driver the fake models takes it. */
static int ptx_isa_min_driver(int isa) {
  for (size_t i = 0; i < sizeof ptx_isa_table / sizeof ptx_isa_table[0]; i++)
    if (ptx_isa_table[i].isa == isa) return ptx_isa_table[i].cuda;
  return 0;
}

/* Highest PTX ISA a driver's JIT knows, for the log ("current version is"). */
static int ptx_isa_max_for_driver(int driver) {
  int best = 0;
  for (size_t i = 0; i < sizeof ptx_isa_table / sizeof ptx_isa_table[0]; i++)
    if (ptx_isa_table[i].cuda <= driver && ptx_isa_table[i].isa > best) best = ptx_isa_table[i].isa;
  return best;
}

/* cuda-compat.md 3.2: a cubin sm_XY runs on CC X.Z with Z >= Y (same major);
 * sm_XYa only on X.Y; sm_XYf within its family, which for every family listed
 * there is the same as the plain rule (sm_100f -> 10.0, 10.3; sm_120f ->
 * 12.0, 12.1). SM numbers are 10*major + minor (sm_120 -> 12.0). */
/* The Tegra (Jetson) SMs: TK1 3.2, TX1 / Nano 5.3, TX2 6.2, Xavier 7.2,
 * Orin 8.7, Thor 10.1 (CUDA 12.8-12.9 numbering) and 11.0 (NVIDIA's CUDA GPUs
 * page and the Jetson module pages). Kept here, not taken from arch_table:
 * the double's rules are written independently of the code they judge. */
static int tegra_sm(int sm) {
  return sm == 32 || sm == 53 || sm == 62 || sm == 72 || sm == 87 || sm == 101 || sm == 110;
}

/* A cubin sm_XY runs on sm_XZ, Z >= Y, but "binary compatibility is
 * supported only for the desktop. It is not supported for Tegra. Also, the
 * binary compatibility between desktop and Tegra is not supported" (CUDA C++
 * Programming Guide, Binary Compatibility): to or from a Tegra SM only the
 * exact SM loads [S: the driver's code for the refusal is not documented;
 * the double answers as for any cubin that does not fit, 209]. */
static int cubin_fits(int sm, char variant, int target) {
  if (variant == 'a' || sm == target) return sm == target;
  if (tegra_sm(sm) || tegra_sm(target)) return 0;
  return sm / 10 == target / 10 && sm % 10 <= target % 10;
}

/* cuda-compat.md 3.2: PTX compute_XY is JIT-compiled for any CC >= X.Y, later
 * majors included; compute_XYa only for X.Y; compute_XYf within the family. */
static int ptx_fits(int sm, char variant, int target) {
  if (variant == 'a') return sm == target;
  if (variant == 'f') return sm / 10 == target / 10 && sm % 10 <= target % 10;
  return sm <= target;
}

/* Can a driver load a cubin made by toolkit `toolkit`? From CUDA 11 on,
 * minor-version compatibility: any driver of the same or a later major
 * (cuda-compat.md 2.2, [MVC]); before CUDA 11 the driver had to be at least
 * the toolkit. toolkit 0 means the cubin does not say: accepted.
 *
 * What a refusal returns: CUDA_ERROR_INVALID_IMAGE (200), "device kernel image
 * is invalid". Evidence [S], several independent reports of cubins from a
 * newer major toolkit on an older driver, all answering 200:
 * - triton-lang/triton#2971: Triton (ptxas of CUDA 12) on driver 470.182.03
 *   (CUDA 11.4), cuModuleLoadData of the cubin -> "device kernel image is invalid";
 * - triton-lang/triton#3001: triton 2.2 on driver 470.57.02 -> the same, fixed
 *   by moving to driver 535;
 * - pytorch/pytorch#119054: torch 2.2 inductor (Triton cubins) on 470.182.03 -> 200;
 * - StanfordLegion/legion#1690: a CUDA 12.3 fatbin, cuModuleLoadDataEx -> 200,
 *   closed as "not a bug" (driver too old).
 * None of them is an NVIDIA statement; the pre-11 case is [U] (no report
 * found), given the same code for consistency. */
static int toolkit_loadable(int toolkit, int driver) {
  if (toolkit <= 0) return 1;
  if (toolkit >= 11000) return driver / 1000 >= toolkit / 1000;
  return driver >= toolkit;
}

static void set_log(fc_image_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_log(fc_image_result *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->log, sizeof out->log, fmt, ap);
  va_end(ap);
}

static char *new_kernel_list(void) {
  char *k = malloc(KERNELS_CAP);
  if (k) k[0] = '\0';
  return k;
}

/* ------------------------------------------------------------- cubin --- */

static CUresult check_cubin(const void *data, size_t size, char forced_variant, const fc_jit_env *env, int target,
                            fc_image_result *out) {
  em_cubin_info info;
  char *kernels = new_kernel_list();
  if (!kernels) return CUDA_ERROR_OUT_OF_MEMORY;
  if (em_cubin_read(data, size, &info, kernels, KERNELS_CAP) != EM_OK) {
    free(kernels);
    set_log(out, "fakecuda: the ELF image is not a readable cubin: %s", em_last_error());
    return CUDA_ERROR_INVALID_IMAGE;
  }
  char variant = forced_variant ? forced_variant : info.variant;
  /* The toolkit is checked before the SM [U: order not observed]: an image
   * from a newer toolkit is one the driver cannot read at all. */
  if (!toolkit_loadable(info.toolkit, env->driver)) {
    free(kernels);
    set_log(out, "fakecuda: cubin made by CUDA %d.%d; a driver of CUDA %d.%d cannot load it", info.toolkit / 1000,
            info.toolkit % 1000 / 10, env->driver / 1000, env->driver % 1000 / 10);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (!cubin_fits(info.sm, variant, target)) {
    free(kernels);
    set_log(out, "fakecuda: cubin for sm_%d%s cannot run on sm_%d", info.sm, variant == 'a' ? "a" : "", target);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  out->sm = info.sm;
  out->variant = variant == 'a' ? 'a' : 0;
  out->kernels = kernels;
  return CUDA_SUCCESS;
}

/* --------------------------------------------------------------- PTX --- */

static int looks_like_ptx(const char *text, size_t size) {
  size_t n = size < 65536 ? size : 65536;
  return memmem(text, n, ".version", 8) != NULL;
}

/* The JIT path. Order: CUDA_DISABLE_PTX_JIT is decided before the JIT runs
 * (223); a missing JIT library means nothing can read the PTX (221); the
 * .version check is the JIT's own ("ptxas application ptx input, line 5;
 * fatal : Unsupported .version 9.1; current version is '9.0'", quoted in
 * gwoltman/gpuowl#31 and triton-lang/triton#1246), so it comes after both;
 * then the target. The order is reasoned, not observed [U]. */
static CUresult check_ptx(const char *text, size_t size, const fc_jit_env *env, int target, fc_image_result *out) {
  if (env->jit_disabled) {
    set_log(out, "fakecuda: PTX must be JIT-compiled and CUDA_DISABLE_PTX_JIT is set");
    return CUDA_ERROR_JIT_COMPILATION_DISABLED;
  }
  if (env->no_jit) {
    set_log(out, "fakecuda: PTX must be JIT-compiled and the JIT library is missing (FAKECUDA_NO_JIT)");
    return CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
  }
  em_ptx_info info;
  char *kernels = new_kernel_list();
  if (!kernels) return CUDA_ERROR_OUT_OF_MEMORY;
  if (em_ptx_read_header(text, size, &info, kernels, KERNELS_CAP) != EM_OK) {
    free(kernels);
    set_log(out, "fakecuda: the JIT rejects the PTX header: %s", em_last_error());
    return CUDA_ERROR_INVALID_PTX;
  }
  int need = ptx_isa_min_driver(info.isa);
  if (need == 0 || env->driver < need) {
    int cur = ptx_isa_max_for_driver(env->driver);
    free(kernels);
    set_log(out, "ptxas application ptx input; fatal   : Unsupported .version %d.%d; current version is '%d.%d'",
            info.isa / 10, info.isa % 10, cur / 10, cur % 10);
    /* Drivers before CUDA 11 answered CUDA_ERROR_INVALID_PTX for the same
     * ptxas message [S]: m4rs-mt/ILGPU#36 (JIT "current version is '5.0'",
     * a CUDA 8 driver, cuModuleLoad -> CUDA_ERROR_INVALID_PTX) and ILGPU#29
     * (driver 380, PTX 6.4 -> "PTX JIT compilation failed"). From CUDA 11.0
     * on the answer is 222 (openmm/openmm#3598: driver 450.142, CUDA 11.0 ->
     * CUDA_ERROR_UNSUPPORTED_PTX_VERSION). Which driver between 9.x and 11.0
     * first returned 222 is [U]; 11000 is the earliest one observed. */
    return env->driver < 11000 ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  if (!ptx_fits(info.target_sm, info.target_variant, target)) {
    free(kernels);
    set_log(out, "fakecuda: PTX .target sm_%d%s cannot be compiled for sm_%d", info.target_sm,
            info.target_variant == 'a'   ? "a"
            : info.target_variant == 'f' ? "f"
                                         : "",
            target);
    return CUDA_ERROR_INVALID_PTX;
  }
  out->sm = target;
  out->variant = info.target_variant == 'a' ? 'a' : 0;
  out->jitted = 1;
  out->kernels = kernels;
  return CUDA_SUCCESS;
}

/* --------------------------------------------------------- FAKECUBIN --- */

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int is_fakecubin(const void *data, size_t size) {
  return size >= sizeof FAKECUBIN_MAGIC && memcmp(data, FAKECUBIN_MAGIC, sizeof FAKECUBIN_MAGIC) == 0;
}

int fc_fakecubin_build(int sm, char variant, int driver, const char *kernels, void **out, size_t *size) {
  size_t klen = strlen(kernels);
  size_t total = FAKECUBIN_HEADER + klen + 1;
  uint8_t *b = calloc(1, total);
  if (!b) return -1;
  memcpy(b, FAKECUBIN_MAGIC, sizeof FAKECUBIN_MAGIC);
  uint32_t n = 0;
  uint8_t *names = b + FAKECUBIN_HEADER;
  memcpy(names, kernels, klen);
  /* Stored NUL-separated: commas become NULs. */
  for (size_t i = 0; i < klen; i++)
    if (names[i] == ',') names[i] = '\0';
  for (size_t i = 0; i < klen; i++)
    if (names[i] != '\0' && (i == 0 || names[i - 1] == '\0')) n++;
  wr32(b + 16, (uint32_t)total);
  wr32(b + 20, (uint32_t)sm);
  wr32(b + 24, (uint32_t)(unsigned char)variant);
  wr32(b + 28, (uint32_t)driver);
  wr32(b + 32, n);
  *out = b;
  *size = total;
  return 0;
}

static CUresult check_fakecubin(const uint8_t *b, size_t size, const fc_jit_env *env, int target,
                                fc_image_result *out) {
  if (size < FAKECUBIN_HEADER + 1 || rd32(b + 16) != size || b[size - 1] != '\0') {
    set_log(out, "fakecuda: FAKECUBIN header or size is damaged");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  int sm = (int)rd32(b + 20), driver = (int)rd32(b + 28);
  char variant = (char)rd32(b + 24);
  /* Made by a newer driver: its JIT output is not for this driver (the brief's rule). */
  if (driver > env->driver) {
    set_log(out, "fakecuda: FAKECUBIN made by a CUDA %d.%d driver; this driver is CUDA %d.%d", driver / 1000,
            driver % 1000 / 10, env->driver / 1000, env->driver % 1000 / 10);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  if (!cubin_fits(sm, variant, target)) {
    set_log(out, "fakecuda: FAKECUBIN for sm_%d%s cannot run on sm_%d", sm, variant == 'a' ? "a" : "", target);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  char *kernels = new_kernel_list();
  if (!kernels) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t len = 0;
  for (size_t i = FAKECUBIN_HEADER; i < size - 1 && len + 1 < KERNELS_CAP; i++) {
    char c = (char)b[i];
    if (c == '\0') {
      if (len > 0 && kernels[len - 1] != ',') kernels[len++] = ',';
    } else {
      kernels[len++] = c;
    }
  }
  if (len > 0 && kernels[len - 1] == ',') len--;
  kernels[len] = '\0';
  out->sm = sm;
  out->variant = variant == 'a' ? 'a' : 0;
  out->kernels = kernels;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------ fatbin --- */

typedef struct fatbin_entries {
  em_fatbin_entry e[FATBIN_MAX_ENTRIES];
  int n;
} fatbin_entries;

static int collect_entry(const em_fatbin_entry *e, void *ctx) {
  fatbin_entries *all = ctx;
  if (all->n < FATBIN_MAX_ENTRIES) all->e[all->n++] = *e;
  return 0;
}

/* Preference among entries of the same arch [U: the driver's tie-break is not
 * documented]: 'a' (built for exactly this SM), then plain, then 'f'. */
static int variant_rank(char v) { return v == 'a' ? 2 : v == 0 ? 1 : 0; }

static int better(const em_fatbin_entry *cand, const em_fatbin_entry *best) {
  if (!best) return 1;
  if (cand->arch != best->arch) return cand->arch > best->arch;
  return variant_rank(cand->variant) > variant_rank(best->variant);
}

/* The driver's choice (cuda-compat.md 0.1 step 3-4): the best compatible
 * cubin, else the best compatible PTX, else 209. CUDA_FORCE_PTX_JIT makes it
 * ignore cubins (cuda-compat.md 3.2 [S]). */
static CUresult check_fatbin(const void *data, size_t size, const fc_jit_env *env, int target, fc_image_result *out) {
  fatbin_entries *all = calloc(1, sizeof *all);
  if (!all) return CUDA_ERROR_OUT_OF_MEMORY;
  if (em_fatbin_walk(data, size, collect_entry, all) != EM_OK) {
    free(all);
    set_log(out, "fakecuda: the fatbin is damaged: %s", em_last_error());
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const em_fatbin_entry *cubin = NULL, *ptx = NULL;
  for (int i = 0; i < all->n; i++) {
    const em_fatbin_entry *e = &all->e[i];
    if (e->kind == EM_FATBIN_KIND_ELF && !env->force_ptx_jit && cubin_fits(e->arch, e->variant, target) &&
        better(e, cubin))
      cubin = e;
    if (e->kind == EM_FATBIN_KIND_PTX && ptx_fits(e->arch, e->variant, target) && better(e, ptx)) ptx = e;
  }
  const em_fatbin_entry *pick = cubin ? cubin : ptx;
  if (!pick) {
    free(all);
    set_log(out, "fakecuda: the fatbin holds no cubin or PTX usable on sm_%d", target);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  /* zstd entries need driver R550 (CUDA 12.4) or later [S]: RAPIDS documents
   * driver >= 550.54.14 for its zstd fatbin compression (cuda-compat.md 4.3,
   * [RAPIDS-FATBIN]); ollama/ollama#12258 raised its minimum to 550 because
   * older drivers fail with "device kernel image is invalid". */
  if (pick->compression == EM_FATBIN_ZSTD && env->driver < 12040) {
    free(all);
    set_log(out, "fakecuda: fatbin entry is zstd-compressed; drivers before CUDA 12.4 (R550) cannot read it");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  void *bytes = NULL;
  size_t n = 0;
  if (em_fatbin_entry_bytes(pick, FATBIN_ENTRY_MAX, &bytes, &n) != EM_OK) {
    free(all);
    set_log(out, "fakecuda: the chosen fatbin entry cannot be decompressed: %s", em_last_error());
    return CUDA_ERROR_INVALID_IMAGE;
  }
  CUresult r = pick->kind == EM_FATBIN_KIND_ELF ? check_cubin(bytes, n, pick->variant, env, target, out)
                                                : check_ptx(bytes, n, env, target, out);
  free(bytes);
  free(all);
  return r;
}

/* -------------------------------------------------------------- entry --- */

static int is_elf(const void *data, size_t size) {
  return size >= 4 && memcmp(data,
                             "\x7f"
                             "ELF",
                             4) == 0;
}

static int is_fatbin(const void *data, size_t size) { return size >= 4 && rd32(data) == EM_FATBIN_MAGIC; }

CUresult fc_image_check(const void *data, size_t size, fc_input_kind kind, const fc_jit_env *env, int target,
                        fc_image_result *out) {
  memset(out, 0, sizeof *out);
  if (!data || size == 0) {
    set_log(out, "fakecuda: no image");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (is_fakecubin(data, size) && (kind == FC_IN_ANY || kind == FC_IN_CUBIN))
    return check_fakecubin(data, size, env, target, out);
  if (is_elf(data, size) && (kind == FC_IN_ANY || kind == FC_IN_CUBIN))
    return check_cubin(data, size, 0, env, target, out);
  if (is_fatbin(data, size) && (kind == FC_IN_ANY || kind == FC_IN_FATBIN))
    return check_fatbin(data, size, env, target, out);
  if (kind == FC_IN_PTX || (kind == FC_IN_ANY && looks_like_ptx(data, size)))
    return check_ptx(data, size, env, target, out);
  /* [U] The real driver may hand unrecognised bytes to the PTX JIT (218);
   * the fake follows the brief: anything that is no image at all is 200. */
  set_log(out, "fakecuda: not a cubin, fatbin, FAKECUBIN or PTX text");
  return CUDA_ERROR_INVALID_IMAGE;
}

/* --------------------------------------------------------------- size --- */

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void grow(uint64_t *end, uint64_t off, uint64_t len) {
  if (off < FC_IMAGE_MAX && len < FC_IMAGE_MAX && off + len > *end) *end = off + len;
}

/* An ELF64 image ends at the furthest of its header tables and sections.
 * The pointer comes with no size, as in the real API: the headers are
 * trusted as far as they stay under FC_IMAGE_MAX. */
static size_t elf_size(const uint8_t *b) {
  if (b[4] != 2 /* ELFCLASS64 */ || b[5] != 1 /* little-endian */) return 64;
  uint64_t end = 64;
  uint64_t phoff = rd64(b + 32), shoff = rd64(b + 40);
  unsigned phentsize = rd16(b + 54), phnum = rd16(b + 56), shentsize = rd16(b + 58), shnum = rd16(b + 60);
  grow(&end, phoff, (uint64_t)phentsize * phnum);
  grow(&end, shoff, (uint64_t)shentsize * shnum);
  if (shentsize == 64 && shoff < FC_IMAGE_MAX && shnum > 0) {
    for (unsigned i = 0; i < shnum; i++) {
      const uint8_t *sh = b + shoff + (uint64_t)i * 64;
      uint32_t type = rd32(sh + 4);
      if (type != 8 /* SHT_NOBITS */) grow(&end, rd64(sh + 24), rd64(sh + 32));
    }
  }
  if (phentsize == 56 && phoff < FC_IMAGE_MAX) {
    for (unsigned i = 0; i < phnum; i++) {
      const uint8_t *ph = b + phoff + (uint64_t)i * 56;
      grow(&end, rd64(ph + 8), rd64(ph + 32));
    }
  }
  return (size_t)end;
}

/* Compares a magic byte by byte, stopping at the first difference, so a short
 * NUL-terminated PTX string is never read past its NUL (no magic holds a NUL
 * before its last compared byte). */
static int starts_with(const uint8_t *b, const void *magic, size_t n) {
  const uint8_t *m = magic;
  for (size_t i = 0; i < n; i++)
    if (b[i] != m[i]) return 0;
  return 1;
}

size_t fc_image_size(const void *data) {
  static const uint8_t fatbin_magic[4] = {0x50, 0xED, 0x55, 0xBA};
  const uint8_t *b = data;
  if (!b) return 0;
  if (starts_with(b, FAKECUBIN_MAGIC, sizeof FAKECUBIN_MAGIC)) {
    uint32_t total = rd32(b + 16);
    return total < FAKECUBIN_HEADER + 1 ? FAKECUBIN_HEADER + 1 : (total > FC_IMAGE_MAX ? FC_IMAGE_MAX : total);
  }
  if (starts_with(b,
                  "\x7f"
                  "ELF",
                  4))
    return elf_size(b);
  if (starts_with(b, fatbin_magic, 4)) {
    uint64_t body = rd64(b + 8);
    return body > FC_IMAGE_MAX - 16 ? FC_IMAGE_MAX : (size_t)(16 + body);
  }
  return strnlen(data, FC_IMAGE_MAX);
}
