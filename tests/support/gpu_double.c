/* The driver of the CPU-versus-GPU tests (gpu_double.h). */
#include "gpu_double.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "fakecuda/fakecuda.h"
#include "fakecublas/fakecublas.h"
#include "fakecudnn/fakecudnn.h"
#include "op_testkit.h"

int ts_use_gpu(void) {
  const char *fake = getenv("FAKECUDA_LIB");
  if (!getenv("EMBER_LIBCUDA") && fake && *fake) {
    setenv("EMBER_LIBCUDA", fake, 1);
    setenv("FAKECUDA_DEVICES", "9.0=NVIDIA H100 80GB HBM3 (test double)", 1);
    setenv("FAKECUDA_DRIVER", "13000", 1);
    /* The fast mode's libraries are the doubles too (a real cuBLAS or cuDNN
     * cannot run on the double's devices); without them, Ember's kernels. */
    const char *blas = getenv("FAKECUBLAS_LIB");
    if (blas && *blas) setenv("EMBER_LIBCUBLAS", blas, 1);
    else setenv("EMBER_CUBLAS", "0", 1);
    const char *lt = getenv("FAKECUBLASLT_LIB"); /* without it, no cuBLASLt: GemmEx and Ember's kernels */
    if (lt && *lt) setenv("EMBER_LIBCUBLASLT", lt, 1);
    else setenv("EMBER_CUBLASLT", "0", 1);
    const char *dnn = getenv("FAKECUDNN_LIB");
    if (dnn && *dnn) setenv("EMBER_LIBCUDNN", dnn, 1);
    else setenv("EMBER_CUDNN", "0", 1);
    em_shutdown(); /* the runtime reads the variables when it starts */
  }
  int n;
  return em_cuda_device_count(&n) ? 0 : n;
}

long ts_double_calls(const char *entry) {
  const char *lib = getenv("EMBER_LIBCUDA"), *fake = getenv("FAKECUDA_LIB");
  if (!lib || !fake || strcmp(lib, fake)) return -1;
  void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); /* the library's own load of it, if it made one */
  fakecuda_call_count_fn count = h ? (fakecuda_call_count_fn)dlsym(h, "fakecuda_call_count") : NULL;
  long n = count ? (long)count(entry) : -1;
  if (h) dlclose(h);
  return n;
}

/* ---------------------------------------------- the fast mode's doubles --- */

static struct {
  fakecudnn_call_count_fn calls;
  fakecudnn_text_fn last_call;
  fakecudnn_reset_fn reset;
  fakecudnn_count_fn live_descriptors, live_handles;
} dnn;
static struct {
  fakecublas_call_count_fn calls;
  fakecublas_text_fn last_gemm;
  fakecublas_reset_fn reset;
} blas;
static char cache_dir[512];

static void *hook(void *h, const char *lib, const char *name) {
  void *f = h ? dlsym(h, name) : NULL;
  if (!f) fail_msg("the double %s lacks its test hook %s", lib, name);
  return f;
}

/* The doubles' hooks, resolved once: the library dlopens the same files, so these are its copies. */
static void load_hooks(const char *dnn_lib, const char *blas_lib) {
  if (!dnn.calls) {
    void *h = dlopen(dnn_lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("cannot load FAKECUDNN_LIB=%s: %s", dnn_lib, dlerror());
    dnn.calls = (fakecudnn_call_count_fn)hook(h, dnn_lib, "fakecudnn_call_count");
    dnn.last_call = (fakecudnn_text_fn)hook(h, dnn_lib, "fakecudnn_last_call");
    dnn.reset = (fakecudnn_reset_fn)hook(h, dnn_lib, "fakecudnn_reset");
    dnn.live_descriptors = (fakecudnn_count_fn)hook(h, dnn_lib, "fakecudnn_live_descriptors");
    dnn.live_handles = (fakecudnn_count_fn)hook(h, dnn_lib, "fakecudnn_live_handles");
  }
  if (blas_lib && !blas.calls) {
    void *h = dlopen(blas_lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("cannot load FAKECUBLAS_LIB=%s: %s", blas_lib, dlerror());
    blas.calls = (fakecublas_call_count_fn)hook(h, blas_lib, "fakecublas_call_count");
    blas.last_gemm = (fakecublas_text_fn)hook(h, blas_lib, "fakecublas_last_gemm");
    blas.reset = (fakecublas_reset_fn)hook(h, blas_lib, "fakecublas_reset");
  }
}

static void set_or_unset(const char *name, const char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

int ts_use_doubles(const ts_doubles *d) {
  const char *cuda = getenv("FAKECUDA_LIB"), *dnn_lib = getenv("FAKECUDNN_LIB"), *blas_lib = getenv("FAKECUBLAS_LIB");
  if (!cuda || !*cuda || !dnn_lib || !*dnn_lib || (d->cublas && (!blas_lib || !*blas_lib))) {
    fprintf(stderr, "skipped: FAKECUDA_LIB, FAKECUDNN_LIB%s (the doubles) are not set\n",
            d->cublas ? " and FAKECUBLAS_LIB" : "");
    return 0;
  }
  load_hooks(dnn_lib, d->cublas ? blas_lib : NULL);
  setenv("EMBER_LIBCUDA", cuda, 1);
  setenv("FAKECUDA_DEVICES", d->devices, 1);
  setenv("FAKECUDA_DRIVER", d->driver ? d->driver : "13000", 1);
  set_or_unset("FAKECUDA_MEM_MB", d->mem_mb);
  setenv("EMBER_LIBCUDNN", dnn_lib, 1);
  setenv("FAKECUDNN_VERSION", d->cudnn ? d->cudnn : "9.19.0", 1);
  setenv("FAKECUDNN_CUDART", d->cudart ? d->cudart : "13000", 1);
  if (d->cublas) {
    setenv("EMBER_LIBCUBLAS", blas_lib, 1);
    setenv("FAKECUBLAS_VERSION", d->cublas, 1);
    unsetenv("EMBER_CUBLAS");
  } else
    setenv("EMBER_CUBLAS", "0", 1);
  static const char *const cleared[] = {"EMBER_CUDNN",     "EMBER_MODE",       "EMBER_TF32",
                                        "FAKECUBLAS_FAIL", "FAKECUDNN_FAIL",   "EMBER_CUDNN_WORKSPACE_MB",
                                        "EMBER_CUDNN_DETERMINISTIC"};
  for (size_t i = 0; i < sizeof cleared / sizeof *cleared; i++) unsetenv(cleared[i]);
  if (d->cache) snprintf(cache_dir, sizeof cache_dir, "%s", d->cache);
  else if (!d->keep_cache || !cache_dir[0]) {
    static int serial;
    ot_tmp_path(cache_dir, sizeof cache_dir, "fast_cache");
    size_t n = strlen(cache_dir);
    snprintf(cache_dir + n, sizeof cache_dir - n, "_%d", ++serial);
  }
  setenv("EMBER_CACHE_DIR", cache_dir, 1);
  em_shutdown();
  dnn.reset();
  if (d->cublas) blas.reset();
  int count = 0;
  if (em_cuda_device_count(&count) || count < 1) fail_msg("the libcuda double shows no device: %s", em_last_error());
  return count;
}

const char *ts_doubles_cache_dir(void) { return cache_dir; }
unsigned long ts_dnn_calls(const char *entry) { return dnn.calls(entry); }
const char *ts_dnn_last_call(void) { return dnn.last_call(); }
size_t ts_dnn_live_descriptors(void) { return dnn.live_descriptors(); }
size_t ts_dnn_live_handles(void) { return dnn.live_handles(); }
void ts_dnn_reset(void) { dnn.reset(); }
unsigned long ts_blas_calls(const char *entry) { return blas.calls(entry); }
const char *ts_blas_last_gemm(void) { return blas.last_gemm(); }
