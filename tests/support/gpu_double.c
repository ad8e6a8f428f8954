/* The driver of the CPU-versus-GPU tests (gpu_double.h). */
#include "gpu_double.h"

#include <stdlib.h>

#include "ember.h"

int ts_use_gpu(void) {
  const char *fake = getenv("FAKECUDA_LIB");
  if (!getenv("EMBER_LIBCUDA") && fake && *fake) {
    setenv("EMBER_LIBCUDA", fake, 1);
    setenv("FAKECUDA_DEVICES", "9.0=NVIDIA H100 80GB HBM3 (test double)", 1);
    setenv("FAKECUDA_DRIVER", "13000", 1);
    em_shutdown(); /* the runtime reads the variables when it starts */
  }
  int n;
  return em_cuda_device_count(&n) ? 0 : n;
}
