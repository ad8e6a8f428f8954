/* Tests that compare the CPU with a GPU: where no driver is chosen
 * (EMBER_LIBCUDA unset) and the libcuda test double is built
 * ($FAKECUDA_LIB, set by build-tools/run_tests.sh), the library is pointed
 * at the double as an H100 on a CUDA 13.0 driver, and the fast mode at the
 * cuBLAS double ($FAKECUBLAS_LIB; cuBLAS off without it); with EMBER_LIBCUDA set
 * (a real driver, tests/gpu/run.sh) it is left alone. */
#ifndef EMBER_TESTS_GPU_DOUBLE_H
#define EMBER_TESTS_GPU_DOUBLE_H

#include <stddef.h>

/* Chooses the driver as above and returns the CUDA devices it shows (0:
 * none, and the GPU tests skip). */
int ts_use_gpu(void);

/* Where the library runs on the test double: its count of calls of one
 * driver entry point since it was configured (fakecuda_call_count, e.g.
 * "cuLaunchKernel", "cuMemcpyHtoDAsync_v2"), to count a step's launches and
 * copies; -1 on a real driver or none (it counts nothing). */
long ts_double_calls(const char *entry);

/* Tests of the fast mode's glue steer the doubles themselves: which devices on which driver,
 * the cuDNN double ($FAKECUDNN_LIB) at a version and the CUDA it was built for, the cuBLAS
 * double ($FAKECUBLAS_LIB) at a version or cuBLAS off, the double's memory size, and a fresh
 * algorithm-cache directory (EMBER_CACHE_DIR) unless keep_cache (a second process of the same
 * user). Every fast-mode variable a test may have set (EMBER_CUDNN, EMBER_MODE, EMBER_TF32,
 * the doubles' FAIL lists, the workspace and determinism settings) is cleared, the doubles'
 * counters are reset, and the runtime restarts, as a new process would. Returns the devices
 * shown; 0 when the doubles are not built (the test then skips, saying so). */
typedef struct ts_doubles {
  const char *devices; /* FAKECUDA_DEVICES */
  const char *driver;  /* FAKECUDA_DRIVER; NULL: "13000" */
  const char *cudnn;   /* FAKECUDNN_VERSION; NULL: "9.19.0" */
  const char *cudart;  /* FAKECUDNN_CUDART; NULL: "13000" */
  const char *cublas;  /* FAKECUBLAS_VERSION; NULL: cuBLAS off (EMBER_CUBLAS=0) */
  const char *mem_mb;  /* FAKECUDA_MEM_MB; NULL: the double's default */
  const char *cache;   /* EMBER_CACHE_DIR; NULL: a fresh directory, or with keep_cache the last one */
  int keep_cache;
} ts_doubles;
int ts_use_doubles(const ts_doubles *d);
/* The cache directory ts_use_doubles chose last. */
const char *ts_doubles_cache_dir(void);

/* The doubles' test hooks (tests/fakecudnn/fakecudnn.h, tests/fakecublas/fakecublas.h), valid
 * after ts_use_doubles: calls of one entry point, the last call's text, live objects. */
unsigned long ts_dnn_calls(const char *entry);
const char *ts_dnn_last_call(void);
size_t ts_dnn_live_descriptors(void);
size_t ts_dnn_live_handles(void);
void ts_dnn_reset(void);
unsigned long ts_blas_calls(const char *entry);
const char *ts_blas_last_gemm(void);

#endif
