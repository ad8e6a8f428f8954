/* The test double of libcuda (tests/fakecuda) as the tests see it: dlopen()ed
 * from $FAKECUDA_LIB (build-tools/run_tests.sh sets it to the absolute path
 * of build/tests/fakecuda/libcuda.so.1), every driver entry point and test
 * hook bound by name, and the fixture images of tests/fixtures/fakecuda.
 * Without FAKECUDA_LIB every test that needs the double is skipped with a
 * message. Used by test_fakecuda.c (images, devices, memory) and
 * test_fakecuda_exec.c (kernels, streams, the mistakes it catches). */
#ifndef EMBER_TESTS_FAKE_DRIVER_H
#define EMBER_TESTS_FAKE_DRIVER_H

#include <stddef.h>

#include "cuda_abi.h"
#include "fakecuda/fakecuda.h"

typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext *);
typedef CUresult (*PFN_legacy_cuMemAlloc)(unsigned int *, unsigned int);

typedef struct fake_driver {
  void *handle; /* NULL: no double, tests skip */
  PFN_cuInit Init;
  PFN_cuDriverGetVersion DriverGetVersion;
  PFN_cuGetErrorName GetErrorName;
  PFN_cuGetErrorString GetErrorString;
  PFN_cuDeviceGetCount DeviceGetCount;
  PFN_cuDeviceGet DeviceGet;
  PFN_cuDeviceGetName DeviceGetName;
  PFN_cuDeviceGetAttribute DeviceGetAttribute;
  PFN_cuDeviceTotalMem DeviceTotalMem;
  PFN_cuDeviceGetUuid DeviceGetUuid;
  PFN_cuDeviceGetPCIBusId DeviceGetPCIBusId;
  PFN_cuDevicePrimaryCtxRetain PrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease PrimaryCtxRelease;
  PFN_cuCtxPushCurrent CtxPushCurrent, CtxPushCurrentPlain;
  PFN_cuCtxPopCurrent CtxPopCurrent;
  PFN_cuCtxSetCurrent CtxSetCurrent;
  PFN_cuCtxGetCurrent CtxGetCurrent;
  PFN_cuCtxSynchronize CtxSynchronize;
  PFN_cuModuleLoadData ModuleLoadData;
  PFN_cuModuleLoadDataEx ModuleLoadDataEx;
  PFN_cuModuleGetFunction ModuleGetFunction;
  PFN_cuModuleUnload ModuleUnload;
  PFN_cuLinkCreate LinkCreate;
  PFN_cuLinkAddData LinkAddData;
  PFN_cuLinkComplete LinkComplete;
  PFN_cuLinkDestroy LinkDestroy;
  PFN_cuMemAlloc MemAlloc;
  PFN_cuMemFree MemFree;
  PFN_cuMemGetInfo MemGetInfo;
  PFN_cuMemHostAlloc MemHostAlloc;
  PFN_cuMemHostGetDevicePointer MemHostGetDevicePointer;
  PFN_cuMemFreeHost MemFreeHost;
  PFN_cuMemcpyHtoD MemcpyHtoD;
  PFN_cuMemcpyDtoH MemcpyDtoH;
  PFN_cuMemcpyDtoD MemcpyDtoD;
  PFN_cuMemcpyHtoDAsync MemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync MemcpyDtoHAsync;
  PFN_cuMemcpyDtoDAsync MemcpyDtoDAsync;
  PFN_cuMemsetD8 MemsetD8;
  PFN_cuMemsetD32 MemsetD32;
  PFN_cuMemsetD8Async MemsetD8Async;
  PFN_cuMemsetD32Async MemsetD32Async;
  PFN_cuStreamCreate StreamCreate;
  PFN_cuStreamDestroy StreamDestroy, StreamDestroyPlain;
  PFN_cuStreamSynchronize StreamSynchronize;
  PFN_cuStreamQuery StreamQuery;
  PFN_cuStreamWaitEvent StreamWaitEvent;
  PFN_cuEventCreate EventCreate;
  PFN_cuEventRecord EventRecord;
  PFN_cuEventSynchronize EventSynchronize;
  PFN_cuEventQuery EventQuery;
  PFN_cuEventElapsedTime EventElapsedTime;
  PFN_cuEventDestroy EventDestroy;
  PFN_cuLaunchKernel LaunchKernel;
  PFN_legacy_cuMemAlloc LegacyMemAlloc;
  fakecuda_reset_fn reset;
  fakecuda_count_fn launch_count, jit_count;
  fakecuda_size_fn bytes_allocated, live_allocations, pinned_allocations, pending_ops;
  fakecuda_text_fn last_launch, config_error, last_error;
  fakecuda_call_count_fn call_count;
  fakecuda_seed_fn seed;
  fakecuda_set_seed_fn set_seed;
} fake_driver;

extern fake_driver fk;

/* cmocka group setup / teardown: load and bind the double (skip when
 * FAKECUDA_LIB is unset, fail when it is set but unusable), find the
 * fixtures; unload. */
int fake_group_setup(void **state);
int fake_group_teardown(void **state);
/* Test setup: a clean environment (no FAKECUDA_* or CUDA_* variable) and a
 * forgotten double. */
int fake_test_setup(void **state);

#define FAKE_NEED()         \
  do {                      \
    if (!fk.handle) skip(); \
  } while (0)

/* A fixture file of tests/fixtures/fakecuda, NUL-terminated; caller frees data. */
typedef struct fake_blob {
  char *data;
  size_t size;
} fake_blob;
fake_blob fake_fixture(const char *name);

/* setenv, or unsetenv for NULL. */
void fake_set(const char *var, const char *value);
/* Configures the double (devices, driver version or NULL for the default)
 * and calls cuInit. */
CUresult fake_init_with(const char *devices, const char *driver);
/* Retains and pushes the primary context of device `ordinal`. */
CUcontext fake_use_device(int ordinal);

#endif
