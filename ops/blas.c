/* OpenBLAS, loaded by Ember on first use rather than linked.
 *
 * Why: OpenBLAS picks its kernels when it is loaded (DYNAMIC_ARCH builds,
 * as Debian's), from the CPU and the OPENBLAS_CORETYPE variable, and the
 * 0.3.21 of Debian 12 picks its AVX2 (Haswell) kernels on AMD CPUs with
 * AVX-512 (Zen 4, Zen 5). Upstream later maps those CPUs to their AVX-512
 * Intel counterparts, SkylakeX, or Cooperlake where AVX512_BF16 is present
 * (OpenMathLib/OpenBLAS pull 4303 for Zen 3/4, 6033 for Zen 5). Measured here
 * (AMD EPYC with AVX-512, 0.3.21, one thread, sgemm 64 x 3136 x 576, a
 * ResNet convolution's product): Haswell kernels 114 GFLOP/s, SkylakeX 205.
 * A linked OpenBLAS is initialised before any of Ember's code runs, so the
 * only way to ask for those kernels is to set OPENBLAS_CORETYPE before the
 * library is loaded: Ember does that (only where the user has not set it,
 * and only for the CPUs upstream maps), loads it with dlopen, and restores
 * the environment.
 *
 * If the process already has OpenBLAS loaded (linked by the program, or by
 * another library), Ember uses that copy as it is. setenv / unsetenv happen
 * once, under pthread_once, at the first product; a program that reads the
 * environment from other threads at that moment should set
 * OPENBLAS_CORETYPE itself (then Ember leaves the environment alone). */
#include "blas.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "error.h"

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         float, const float *, blasint, const float *, blasint, float, float *, blasint);
typedef void (*dgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         double, const double *, blasint, const double *, blasint, double, double *, blasint);

static struct {
  pthread_once_t once;
  em_status status;
  char error[512];   /* why it could not be loaded */
  char how[256];     /* how the core type was chosen */
  const char *asked; /* the core type Ember asked for, or NULL */
  void *lib;
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  int (*get_threads)(void);
  void (*set_threads)(int);
  char *(*corename)(void);
  char *(*config)(void);
} B = {.once = PTHREAD_ONCE_INIT};

/* Debian's name first (the alternatives link), then the development link. */
static const char *const LIB_NAMES[] = {"libopenblas.so.0", "libopenblas.so"};

const char *em_blas_core_choice(const char *vendor, int avx512, int bf16, const char *env) {
  if (env && env[0]) return NULL; /* the user's choice stands */
  if (!vendor || strcmp(vendor, "AuthenticAMD") || !avx512) return NULL;
  return bf16 ? "Cooperlake" : "SkylakeX";
}

#if defined(__x86_64__) || defined(__i386__)
/* The CPU's vendor and whether it has AVX-512 F/CD/BW/DQ/VL (SkylakeX's set)
 * with the opmask and zmm state enabled by the OS (XCR0 bits 1, 2, 5, 6, 7),
 * and AVX512_BF16 (leaf 7 subleaf 1, EAX bit 5). Under valgrind the CPUID it
 * reports lacks AVX-512, so no kernel it cannot run is asked for. */
static void cpu_features(char vendor[13], int *avx512, int *bf16) {
  unsigned a, b, c, d;
  *avx512 = *bf16 = 0;
  vendor[0] = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  unsigned max_leaf = a;
  memcpy(vendor, &b, 4);
  memcpy(vendor + 4, &d, 4);
  memcpy(vendor + 8, &c, 4);
  vendor[12] = 0;
  if (max_leaf < 7 || !__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* OSXSAVE */
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0xE6u) != 0xE6u) return;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned need = (1u << 16) | (1u << 28) | (1u << 30) | (1u << 17) | (1u << 31); /* F CD BW DQ VL */
  const unsigned max_subleaf = a; /* subleaf 1 exists only where subleaf 0's EAX says so */
  *avx512 = (b & need) == need;
  if (max_subleaf < 1) return;
  __cpuid_count(7, 1, a, b, c, d);
  *bf16 = *avx512 && (a & (1u << 5));
}
#else
static void cpu_features(char vendor[13], int *avx512, int *bf16) {
  vendor[0] = 0;
  *avx512 = *bf16 = 0;
}
#endif

/* The first of LIB_NAMES that dlopen gives with these flags (RTLD_NOLOAD: only one the
 * process already has), its name in *name. When loading, the first name's dlerror() goes
 * to B.error: it says why the library Ember asks for could not be loaded (not ELF, a
 * dependency such as libgfortran missing, ...), where the fallback's would only say that
 * the development link is absent. */
static void *open_library(int flags, const char **name) {
  for (size_t i = 0; i < sizeof LIB_NAMES / sizeof *LIB_NAMES; i++) {
    void *h = dlopen(LIB_NAMES[i], RTLD_NOW | flags);
    if (h) {
      *name = LIB_NAMES[i];
      return h;
    }
    const char *why = dlerror();
    if (i == 0 && !(flags & RTLD_NOLOAD)) snprintf(B.error, sizeof B.error, "%s", why ? why : "not found");
  }
  return NULL;
}

static void load(void) {
  const char *name = LIB_NAMES[0];
  if ((B.lib = open_library(RTLD_NOLOAD, &name))) {
    snprintf(B.how, sizeof B.how, "%s was already loaded in this process: its own choice", name);
  } else {
    char vendor[13];
    int avx512, bf16;
    cpu_features(vendor, &avx512, &bf16);
    const char *env = getenv("OPENBLAS_CORETYPE");
    const char *core = em_blas_core_choice(vendor, avx512, bf16, env);
    int was_set = env != NULL; /* set but empty: no choice, but the variable is put back */
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    B.asked = core;
    B.lib = open_library(RTLD_LOCAL, &name);
    if (core && was_set) setenv("OPENBLAS_CORETYPE", "", 1);
    else if (core) unsetenv("OPENBLAS_CORETYPE");
    if (core)
      snprintf(B.how, sizeof B.how, "chosen by Ember: %s CPU with AVX-512%s, as upstream OpenBLAS maps it", vendor,
               bf16 ? " and AVX512_BF16" : "");
    else if (env && env[0])
      snprintf(B.how, sizeof B.how, "OPENBLAS_CORETYPE=%s", env);
    else
      snprintf(B.how, sizeof B.how, "OpenBLAS's own choice");
  }
  if (!B.lib) {
    char why[sizeof B.error];
    snprintf(why, sizeof why, "%s", B.error[0] ? B.error : "not found");
    snprintf(B.error, sizeof B.error,
             "the fast CPU mode's matrix products need OpenBLAS, and %s could not be loaded: %s (Debian: apt install "
             "libopenblas0; or use portable mode, which does not need it)",
             LIB_NAMES[0], why);
    B.status = EM_ERR_UNSUPPORTED;
    return;
  }
  B.sgemm = (sgemm_fn)dlsym(B.lib, "cblas_sgemm");
  B.dgemm = (dgemm_fn)dlsym(B.lib, "cblas_dgemm");
  *(void **)&B.get_threads = dlsym(B.lib, "openblas_get_num_threads");
  *(void **)&B.set_threads = dlsym(B.lib, "openblas_set_num_threads");
  *(void **)&B.corename = dlsym(B.lib, "openblas_get_corename");
  *(void **)&B.config = dlsym(B.lib, "openblas_get_config");
  /* A build without that core ("Core not found" on its stderr) falls back to its own choice: say so. */
  if (B.asked && B.corename && strcasecmp(B.corename(), B.asked)) {
    size_t used = strlen(B.how);
    snprintf(B.how + used, sizeof B.how - used, "; this OpenBLAS lacks %s and chose %s itself", B.asked,
             B.corename());
  }
  if (!B.sgemm || !B.dgemm || !B.get_threads || !B.set_threads) {
    snprintf(B.error, sizeof B.error,
             "%s lacks cblas_sgemm, cblas_dgemm or openblas_set_num_threads: not an OpenBLAS Ember can use", name);
    B.status = EM_ERR_UNSUPPORTED;
  }
}

em_status em_blas_ready(void) {
  pthread_once(&B.once, load);
  if (B.status) return em_fail(B.status, "%s", B.error);
  if (B.get_threads() != 1) B.set_threads(1);
  return EM_OK;
}

static enum CBLAS_TRANSPOSE trans(int t) { return t ? CblasTrans : CblasNoTrans; }

void em_blas_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *Bm,
                   int ldb, float beta, float *C, int ldc) {
  B.sgemm(CblasRowMajor, trans(ta), trans(tb), m, n, k, alpha, A, lda, Bm, ldb, beta, C, ldc);
}

void em_blas_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda, const double *Bm,
                   int ldb, double beta, double *C, int ldc) {
  B.dgemm(CblasRowMajor, trans(ta), trans(tb), m, n, k, alpha, A, lda, Bm, ldb, beta, C, ldc);
}

EM_API void em_cpu_blas_info(char *buf, size_t n) {
  pthread_once(&B.once, load);
  if (B.status) {
    snprintf(buf, n, "not loaded: %s", B.error);
    return;
  }
  snprintf(buf, n, "%s, core %s (%s)", B.config ? B.config() : "OpenBLAS", B.corename ? B.corename() : "?", B.how);
}
