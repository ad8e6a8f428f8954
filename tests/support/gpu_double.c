/* The driver of the CPU-versus-GPU tests (gpu_double.h). */
#include "gpu_double.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
#include "fakecuda/fakecuda.h"

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
