/* Loading the CUDA driver (libcuda) with dlopen and finding its devices.
 * Entry points are resolved by name, preferring the _v2 symbols; everything
 * used at load and launch exists in R418-era drivers, so old fleets work. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

static void *sym(void *h, const char *v2, const char *plain) {
  void *p = v2 ? dlsym(h, v2) : NULL;
  return p ? p : dlsym(h, plain);
}

/* Resolves every entry point; returns the first missing required one. */
static const char *resolve(em_cuda_api *a) {
  void *h = a->handle;
#define REQ(field, v2, plain) \
  if (!(*(void **)&a->field = sym(h, v2, plain))) return plain;
#define OPT(field, v2, plain) *(void **)&a->field = sym(h, v2, plain);
  REQ(cuInit, NULL, "cuInit")
  REQ(cuDriverGetVersion, NULL, "cuDriverGetVersion")
  OPT(cuGetErrorName, NULL, "cuGetErrorName")
  REQ(cuDeviceGetCount, NULL, "cuDeviceGetCount")
  REQ(cuDeviceGet, NULL, "cuDeviceGet")
  REQ(cuDeviceGetName, NULL, "cuDeviceGetName")
  REQ(cuDeviceGetAttribute, NULL, "cuDeviceGetAttribute")
  REQ(cuDeviceTotalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem")
  OPT(cuDeviceGetUuid, NULL, "cuDeviceGetUuid")
  OPT(cuDeviceGetPCIBusId, NULL, "cuDeviceGetPCIBusId")
  REQ(cuDevicePrimaryCtxRetain, NULL, "cuDevicePrimaryCtxRetain")
  REQ(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
  REQ(cuCtxPushCurrent, "cuCtxPushCurrent_v2", "cuCtxPushCurrent")
  REQ(cuCtxPopCurrent, "cuCtxPopCurrent_v2", "cuCtxPopCurrent")
  OPT(cuCtxGetCurrent, NULL, "cuCtxGetCurrent")
  REQ(cuCtxSynchronize, NULL, "cuCtxSynchronize")
  REQ(cuModuleLoadData, NULL, "cuModuleLoadData")
  REQ(cuModuleGetFunction, NULL, "cuModuleGetFunction")
  REQ(cuModuleUnload, NULL, "cuModuleUnload")
  REQ(cuLinkCreate, "cuLinkCreate_v2", "cuLinkCreate")
  REQ(cuLinkAddData, "cuLinkAddData_v2", "cuLinkAddData")
  REQ(cuLinkComplete, NULL, "cuLinkComplete")
  REQ(cuLinkDestroy, NULL, "cuLinkDestroy")
  REQ(cuMemAlloc, "cuMemAlloc_v2", "cuMemAlloc")
  REQ(cuMemFree, "cuMemFree_v2", "cuMemFree")
  OPT(cuMemHostAlloc, NULL, "cuMemHostAlloc")
  /* Only the _v2 symbol: the plain name is the 32-bit CUdeviceptr ABI of CUDA 3.x. */
  OPT(cuMemHostGetDevicePointer, NULL, "cuMemHostGetDevicePointer_v2")
  OPT(cuMemFreeHost, NULL, "cuMemFreeHost")
  REQ(cuMemcpyHtoD, "cuMemcpyHtoD_v2", "cuMemcpyHtoD")
  REQ(cuMemcpyDtoH, "cuMemcpyDtoH_v2", "cuMemcpyDtoH")
  REQ(cuMemcpyDtoD, "cuMemcpyDtoD_v2", "cuMemcpyDtoD")
  REQ(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync")
  REQ(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync")
  REQ(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync")
  REQ(cuStreamCreate, NULL, "cuStreamCreate")
  REQ(cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy")
  REQ(cuStreamSynchronize, NULL, "cuStreamSynchronize")
  REQ(cuLaunchKernel, NULL, "cuLaunchKernel")
  /* Capture: the plain cuStreamBeginCapture symbol keeps the 10.0 ABI
   * without a mode, so each name goes to its own field. */
  OPT(cuStreamBeginCapture, NULL, "cuStreamBeginCapture_v2")
  OPT(cuStreamBeginCapture_v1, NULL, "cuStreamBeginCapture")
  OPT(cuStreamEndCapture, NULL, "cuStreamEndCapture")
  OPT(cuStreamIsCapturing, NULL, "cuStreamIsCapturing")
  OPT(cuGraphInstantiate, "cuGraphInstantiate_v2", "cuGraphInstantiate")
  OPT(cuGraphInstantiateWithFlags, NULL, "cuGraphInstantiateWithFlags")
  OPT(cuGraphLaunch, NULL, "cuGraphLaunch")
  OPT(cuGraphExecDestroy, NULL, "cuGraphExecDestroy")
  OPT(cuGraphDestroy, NULL, "cuGraphDestroy")
  OPT(cuEventCreate, NULL, "cuEventCreate")
  OPT(cuEventRecord, NULL, "cuEventRecord")
  OPT(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy")
  OPT(cuStreamWaitEvent, NULL, "cuStreamWaitEvent")
#undef REQ
#undef OPT
  return NULL;
}

/* The file the loader actually mapped, so reports name the real driver (a
 * forward-compat copy, a stub, or the host's). */
static void loaded_path(void *h, char *out, size_t cap) {
  struct link_map *lm = NULL;
  out[0] = '\0';
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
    char real[PATH_MAX];
    snprintf(out, cap, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
  }
}

static void set_state(em_driver_info *d, em_driver_state s, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_state(em_driver_info *d, em_driver_state s, int err, const char *fmt, ...) {
  va_list ap;
  d->state = s;
  d->cuda_error = err;
  va_start(ap, fmt);
  vsnprintf(d->message, sizeof d->message, fmt, ap);
  va_end(ap);
  em_log(EM_LOG_DRIVER, "%s", d->message);
}

static void describe_gpu(em_runtime *rt, em_gpu *g) {
  em_cuda_api *cu = &rt->cu;
  em_device_info *i = &g->info;
  int major = 0, minor = 0, sms = 0, bus = 0, dev = 0, dom = 0;
  size_t mem = 0;
  i->device = em_cuda(g->ordinal);
  if (cu->cuDeviceGetName(i->name, (int)sizeof i->name, g->dev)) snprintf(i->name, sizeof i->name, "CUDA device %d", g->ordinal);
  cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
  cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev);
  cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev);
  cu->cuDeviceTotalMem(&mem, g->dev);
  i->cc_major = major;
  i->cc_minor = minor;
  i->sm_count = sms;
  i->total_memory = mem;
  i->driver_version = rt->driver.driver_version;
  g->cc = major * 10 + minor;
  if (!cu->cuDeviceGetPCIBusId || cu->cuDeviceGetPCIBusId(i->pci_bus_id, (int)sizeof i->pci_bus_id, g->dev)) {
    cu->cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, g->dev);
    cu->cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, g->dev);
    cu->cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, g->dev);
    snprintf(i->pci_bus_id, sizeof i->pci_bus_id, "%04x:%02x:%02x.0", dom, bus, dev);
  }
  CUuuid u;
  if (cu->cuDeviceGetUuid && cu->cuDeviceGetUuid(&u, g->dev) == CUDA_SUCCESS) {
    const unsigned char *b = u.bytes;
    snprintf(i->uuid, sizeof i->uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  }
}

void em_driver_load(em_runtime *rt) {
  em_driver_info *d = &rt->driver;
  const char *want = getenv("EMBER_LIBCUDA");
  const char *name = want && *want ? want : "libcuda.so.1";
  memset(d, 0, sizeof *d);

  rt->cu.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!rt->cu.handle) {
    const char *why = dlerror();
    set_state(d, EM_DRIVER_NOT_FOUND, 0,
              "no CUDA driver: cannot load %s (%s). Running on the CPU. Fix: install the NVIDIA driver; in a container "
              "start it with --gpus all (nvidia-container-toolkit)",
              name, why ? why : "not found");
    return;
  }
  loaded_path(rt->cu.handle, d->library_path, sizeof d->library_path);
  const char *missing = resolve(&rt->cu);
  if (missing) {
    set_state(d, EM_DRIVER_TOO_OLD, 0, "the CUDA driver %s lacks %s: it is too old for Ember. Fix: install an R418 or newer driver",
              d->library_path, missing);
    return;
  }
  CUresult r = rt->cu.cuInit(0);
  rt->cu.cuDriverGetVersion(&d->driver_version);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    set_state(d, EM_DRIVER_STUB, r, "%s is the CUDA toolkit's stub driver (CUDA_ERROR_STUB_LIBRARY, 34). Fix: %s",
              d->library_path, em_cuda_error_fix(r));
    return;
  }
  if (r == CUDA_ERROR_NO_DEVICE) {
    set_state(d, EM_DRIVER_NO_DEVICE, r, "the CUDA driver sees no GPU (CUDA_ERROR_NO_DEVICE, 100). Fix: %s", em_cuda_error_fix(r));
    return;
  }
  if (r != CUDA_SUCCESS) {
    set_state(d, EM_DRIVER_INIT_FAILED, r, "cuInit failed: %s (%d). Fix: %s", em_cuda_error_name(r), r, em_cuda_error_fix(r));
    return;
  }
  int n = 0;
  r = rt->cu.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n <= 0) {
    set_state(d, EM_DRIVER_NO_DEVICE, r, "the CUDA driver sees no GPU%s. Fix: %s",
              getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES is set)" : "", em_cuda_error_fix(CUDA_ERROR_NO_DEVICE));
    return;
  }
  rt->gpus = calloc((size_t)n, sizeof *rt->gpus);
  if (!rt->gpus) {
    set_state(d, EM_DRIVER_INIT_FAILED, 0, "no host memory for %d devices", n);
    return;
  }
  /* A device the driver cannot hand out is skipped (and logged) so the rest
   * stay usable; Ember's ordinals then count only the usable ones. */
  int usable = 0;
  for (int i = 0; i < n; i++) {
    em_gpu *g = &rt->gpus[usable];
    CUresult e = rt->cu.cuDeviceGet(&g->dev, i);
    if (e != CUDA_SUCCESS) {
      em_log(EM_LOG_DRIVER, "cuDeviceGet(%d) failed: %s (%d): device skipped", i, em_cuda_error_name(e), e);
      continue;
    }
    g->ordinal = usable++;
    describe_gpu(rt, g);
  }
  rt->n_gpus = n = usable;
  if (!usable) {
    set_state(d, EM_DRIVER_NO_DEVICE, 0, "cuDeviceGet failed for every device the driver reported (EMBER_LOG=driver shows why)");
    return;
  }
  set_state(d, EM_DRIVER_OK, 0, "CUDA driver %d.%d (%s), %d device%s", d->driver_version / 1000,
            (d->driver_version % 1000) / 10, d->library_path, n, n == 1 ? "" : "s");
}

void em_driver_unload(em_runtime *rt) {
  if (rt->cu.handle) dlclose(rt->cu.handle);
  memset(&rt->cu, 0, sizeof rt->cu);
}
