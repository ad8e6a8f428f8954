/* Tests that compare the CPU with a GPU: where no driver is chosen
 * (EMBER_LIBCUDA unset) and the libcuda test double is built
 * ($FAKECUDA_LIB, set by build-tools/run_tests.sh), the library is pointed
 * at the double as an H100 on a CUDA 13.0 driver, and the fast mode at the
 * cuBLAS double ($FAKECUBLAS_LIB; cuBLAS off without it); with EMBER_LIBCUDA set
 * (a real driver, tests/gpu/run.sh) it is left alone. */
#ifndef EMBER_TESTS_GPU_DOUBLE_H
#define EMBER_TESTS_GPU_DOUBLE_H

/* Chooses the driver as above and returns the CUDA devices it shows (0:
 * none, and the GPU tests skip). */
int ts_use_gpu(void);

/* Where the library runs on the test double: its count of calls of one
 * driver entry point since it was configured (fakecuda_call_count, e.g.
 * "cuLaunchKernel", "cuMemcpyHtoDAsync_v2"), to count a step's launches and
 * copies; -1 on a real driver or none (it counts nothing). */
long ts_double_calls(const char *entry);

#endif
