/* Loading and binding the test double of libcuda for the tests
 * (fake_driver.h). */
#include "fake_driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>


fake_driver fk;

static char fixture_dir[4096];

static void *sym(const char *name) {
  void *p = dlsym(fk.handle, name);
  if (!p) fprintf(stderr, "%s: %s does not export %s\n", program_invocation_short_name, getenv("FAKECUDA_LIB"), name);
  return p;
}

#define BIND(field, name) (*(void **)&fk.field = sym(name), fk.field != NULL)

static int bind_all(void) {
  return BIND(Init, "cuInit") & BIND(DriverGetVersion, "cuDriverGetVersion") & BIND(GetErrorName, "cuGetErrorName") &
         BIND(GetErrorString, "cuGetErrorString") & BIND(DeviceGetCount, "cuDeviceGetCount") &
         BIND(DeviceGet, "cuDeviceGet") & BIND(DeviceGetName, "cuDeviceGetName") &
         BIND(DeviceGetAttribute, "cuDeviceGetAttribute") & BIND(DeviceTotalMem, "cuDeviceTotalMem_v2") &
         BIND(DeviceGetUuid, "cuDeviceGetUuid_v2") & BIND(DeviceGetPCIBusId, "cuDeviceGetPCIBusId") &
         BIND(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain") & BIND(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &
         BIND(CtxPushCurrent, "cuCtxPushCurrent_v2") & BIND(CtxPushCurrentPlain, "cuCtxPushCurrent") &
         BIND(CtxPopCurrent, "cuCtxPopCurrent_v2") & BIND(CtxSetCurrent, "cuCtxSetCurrent") &
         BIND(CtxGetCurrent, "cuCtxGetCurrent") & BIND(CtxSynchronize, "cuCtxSynchronize") &
         BIND(ModuleLoadData, "cuModuleLoadData") & BIND(ModuleLoadDataEx, "cuModuleLoadDataEx") &
         BIND(ModuleGetFunction, "cuModuleGetFunction") & BIND(ModuleUnload, "cuModuleUnload") &
         BIND(LinkCreate, "cuLinkCreate_v2") & BIND(LinkAddData, "cuLinkAddData_v2") &
         BIND(LinkComplete, "cuLinkComplete") & BIND(LinkDestroy, "cuLinkDestroy") & BIND(MemAlloc, "cuMemAlloc_v2") &
         BIND(MemFree, "cuMemFree_v2") & BIND(MemGetInfo, "cuMemGetInfo_v2") &
         BIND(MemHostAlloc, "cuMemHostAlloc") & BIND(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2") &
         BIND(MemFreeHost, "cuMemFreeHost") & BIND(pinned_allocations, "fakecuda_pinned_allocations") & BIND(MemcpyHtoD, "cuMemcpyHtoD_v2") &
         BIND(MemcpyDtoH, "cuMemcpyDtoH_v2") & BIND(MemcpyDtoD, "cuMemcpyDtoD_v2") &
         BIND(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") & BIND(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2") &
         BIND(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") & BIND(MemsetD8, "cuMemsetD8_v2") &
         BIND(MemsetD32, "cuMemsetD32_v2") & BIND(MemsetD8Async, "cuMemsetD8Async") &
         BIND(MemsetD32Async, "cuMemsetD32Async") & BIND(StreamCreate, "cuStreamCreate") &
         BIND(StreamQuery, "cuStreamQuery") & BIND(StreamWaitEvent, "cuStreamWaitEvent") &
         BIND(EventCreate, "cuEventCreate") & BIND(EventRecord, "cuEventRecord") &
         BIND(EventSynchronize, "cuEventSynchronize") & BIND(EventQuery, "cuEventQuery") &
         BIND(EventElapsedTime, "cuEventElapsedTime_v2") & BIND(EventDestroy, "cuEventDestroy_v2") &
         BIND(StreamDestroy, "cuStreamDestroy_v2") & BIND(StreamDestroyPlain, "cuStreamDestroy") &
         BIND(StreamSynchronize, "cuStreamSynchronize") & BIND(LaunchKernel, "cuLaunchKernel") &
         BIND(LegacyMemAlloc, "cuMemAlloc") & BIND(reset, "fakecuda_reset") &
         BIND(launch_count, "fakecuda_launch_count") & BIND(jit_count, "fakecuda_jit_count") &
         BIND(bytes_allocated, "fakecuda_bytes_allocated") & BIND(live_allocations, "fakecuda_live_allocations") &
         BIND(last_launch, "fakecuda_last_launch") & BIND(config_error, "fakecuda_config_error") &
         BIND(call_count, "fakecuda_call_count") & BIND(pending_ops, "fakecuda_pending_ops") &
         BIND(last_error, "fakecuda_last_error") & BIND(seed, "fakecuda_seed") & BIND(set_seed, "fakecuda_set_seed");
}

static int has_fixtures(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/k.cu", dir);
  return access(p, R_OK) == 0;
}

/* Looks for tests/fixtures/fakecuda in dir and up to 8 of its parents. */
static int find_up(const char *start) {
  char dir[2048];
  snprintf(dir, sizeof dir, "%s", start);
  for (int up = 0; up < 9; up++) {
    snprintf(fixture_dir, sizeof fixture_dir, "%s/tests/fixtures/fakecuda", dir);
    if (has_fixtures(fixture_dir)) return 1;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) break;
    *slash = '\0';
  }
  return 0;
}

/* $FAKECUDA_FIXTURES, else found from the working directory, the test
 * binary (build/tests/unit/) or the library (build/tests/fakecuda/). */
static int find_fixtures(void) {
  const char *env = getenv("FAKECUDA_FIXTURES");
  if (env) {
    snprintf(fixture_dir, sizeof fixture_dir, "%s", env);
    return has_fixtures(fixture_dir);
  }
  char buf[2048];
  if (getcwd(buf, sizeof buf) && find_up(buf)) return 1;
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = '\0';
    if (find_up(buf)) return 1;
  }
  return find_up(getenv("FAKECUDA_LIB"));
}

int fake_group_setup(void **state) {
  (void)state;
  const char *path = getenv("FAKECUDA_LIB");
  if (!path || !*path) {
    fprintf(stderr,
            "%s: FAKECUDA_LIB is not set (the path of build/tests/fakecuda/libcuda.so.1); "
            "skipping every test that needs the test double of libcuda\n",
            program_invocation_short_name);
    return 0;
  }
  fk.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!fk.handle) {
    fprintf(stderr, "%s: cannot load FAKECUDA_LIB=%s: %s\n", program_invocation_short_name, path, dlerror());
    return -1;
  }
  if (!bind_all()) return -1;
  if (!find_fixtures()) {
    fprintf(stderr, "%s: fixtures (tests/fixtures/fakecuda) not found; set FAKECUDA_FIXTURES\n",
            program_invocation_short_name);
    return -1;
  }
  return 0;
}

int fake_group_teardown(void **state) {
  (void)state;
  if (fk.handle) {
    fk.reset(); /* frees everything the fake still holds, so leak checkers see only real leaks */
    dlclose(fk.handle);
  }
  return 0;
}

/* Every test starts from a clean environment and a forgotten fake. */
int fake_test_setup(void **state) {
  (void)state;
  static const char *const vars[] = {"FAKECUDA_DEVICES",     "FAKECUDA_DRIVER",    "FAKECUDA_MEM_MB",
                                     "FAKECUDA_FAIL",        "FAKECUDA_NO_JIT",    "FAKECUDA_STUB",
                                     "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_PTX_JIT", "CUDA_VISIBLE_DEVICES",
                                     "FAKECUDA_NO_MAP_HOST"};
  /* FAKECUDA_SEED stays: run_tests.sh sets one per run and prints it. */
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  if (fk.handle) fk.reset();
  return 0;
}



fake_blob fake_fixture(const char *name) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", fixture_dir, name);
  fake_blob b = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n > 0);
  rewind(f);
  b.data = malloc((size_t)n + 1);
  assert_non_null(b.data);
  assert_int_equal(fread(b.data, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  b.data[n] = '\0';
  b.size = (size_t)n;
  return b;
}

void fake_set(const char *var, const char *value) {
  if (value)
    setenv(var, value, 1);
  else
    unsetenv(var);
}

CUresult fake_init_with(const char *devices, const char *driver) {
  fake_set("FAKECUDA_DEVICES", devices);
  fake_set("FAKECUDA_DRIVER", driver);
  fk.reset();
  return fk.Init(0);
}

CUcontext fake_use_device(int ordinal) {
  CUdevice dev;
  CUcontext ctx = NULL;
  assert_int_equal(fk.DeviceGet(&dev, ordinal), CUDA_SUCCESS);
  assert_int_equal(fk.PrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  assert_int_equal(fk.CtxPushCurrent(ctx), CUDA_SUCCESS);
  return ctx;
}
