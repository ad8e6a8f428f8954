/* Devices: the CPU, always present, and each visible CUDA device. */
#ifndef EMBER_DEVICE_H
#define EMBER_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include "ember/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum em_device_kind { EM_DEVICE_CPU = 0, EM_DEVICE_CUDA = 1 } em_device_kind;

/* A device handle: the CPU (ordinal 0) or a CUDA device by its ordinal after
 * CUDA_VISIBLE_DEVICES is applied (as the driver numbers them). */
typedef struct em_device {
  em_device_kind kind;
  int ordinal;
} em_device;

EM_API em_device em_cpu(void);
EM_API em_device em_cuda(int ordinal);

/* Why the CUDA side is or is not usable. */
typedef enum em_driver_state {
  EM_DRIVER_OK = 0,          /* loaded, initialised, at least one device */
  EM_DRIVER_NOT_FOUND = 1,   /* no libcuda.so.1 on the loader path */
  EM_DRIVER_STUB = 2,        /* only the toolkit stub libcuda was found */
  EM_DRIVER_INIT_FAILED = 3, /* cuInit failed (error in message) */
  EM_DRIVER_NO_DEVICE = 4,   /* no visible device (CUDA_VISIBLE_DEVICES, none installed) */
  EM_DRIVER_TOO_OLD = 5      /* missing the entry points Ember needs */
} em_driver_state;

typedef struct em_driver_info {
  em_driver_state state;
  int driver_version;        /* cuDriverGetVersion: 1000*major + 10*minor; 0 if unknown */
  int cuda_error;            /* CUresult of the failing call, 0 if none */
  char library_path[512];    /* the file actually loaded (resolved), "" if none */
  char message[512];         /* what happened and the fix */
} em_driver_info;

/* Initialises the runtime on first use (thread-safe, idempotent) and reports
 * the driver. Returns EM_OK even when there is no GPU: the CPU always works. */
EM_API em_status em_driver_get_info(em_driver_info *out);

/* Number of CUDA devices (0 when there is no usable driver). */
EM_API em_status em_cuda_device_count(int *count);

typedef struct em_device_info {
  em_device device;
  char name[256];
  int cc_major, cc_minor;    /* compute capability; 0.0 for the CPU */
  int sm_count;              /* multiprocessors (CUDA) or online cores (CPU) */
  uint64_t total_memory;     /* bytes */
  char pci_bus_id[32];       /* "0000:3b:00.0"; "" for the CPU */
  char uuid[48];             /* "GPU-xxxxxxxx-..."; "" if the driver cannot say */
  int driver_version;        /* the driver's CUDA version, 0 for the CPU */
} em_device_info;

EM_API em_status em_device_get_info(em_device dev, em_device_info *out);

/* The BLAS that the fast CPU mode's products use, as one line: OpenBLAS's
 * configuration, its core type (the kernels it runs) and how that was
 * chosen, e.g. "OpenBLAS 0.3.21 ... SkylakeX ..., core SkylakeX (chosen by
 * Ember: AuthenticAMD CPU with AVX-512, ...)"; or why it could not be
 * loaded. Loads OpenBLAS if it is not loaded yet (ops/blas.c says how). */
EM_API void em_cpu_blas_info(char *buf, size_t n);

/* What runs the fast CPU mode's convolutions, as one line: "oneDNN 2.6.3
 * (libdnnl.so.2), ISA avx512_core", or why oneDNN is not used ("not used:
 * ..."; then Ember's own im2col + BLAS path runs them, ops/conv.c). Loads
 * oneDNN if it is not loaded yet (ops/dnnl.c). */
EM_API void em_cpu_conv_info(char *buf, size_t n);

/* EM_OK when dev exists: the CPU (ordinal 0) or a visible CUDA device. Else
 * fails naming the devices that do exist (EM_ERR_INVALID_ARGUMENT for an
 * unknown kind or a CPU ordinal other than 0, EM_ERR_NOT_FOUND for a CUDA
 * ordinal out of range), or, for a CUDA device on a machine without a usable
 * driver, saying why the driver is not usable. Every call that takes a
 * device (em_exec_create, em_tensor_zeros, ...) checks it this way. */
EM_API em_status em_device_check(em_device dev);

/* The device to use when the application has no preference: the CUDA device
 * with the highest compute capability (ties: more multiprocessors, then more
 * memory, then the lower ordinal), else the CPU. Says which and why on
 * EMBER_LOG=dispatch. */
EM_API em_device em_device_best(void);

/* The CUDA libraries Ember can use, found the way the driver is: dlopen of
 * their sonames, newest first (then $CUDA_HOME/lib64, /usr/local/cuda/lib64). */
typedef struct em_cuda_library {
  char name[16];          /* "nvrtc", "cublas", "cublasLt", "cudnn" */
  int found;
  char path[512];         /* what was loaded */
  char version[32];       /* as the library reports it: "13.0", "13.1.0", "9.19.0" */
  char note[256];         /* what was tried when not found */
} em_cuda_library;

EM_API em_status em_cuda_library_count(size_t *count);
EM_API em_status em_cuda_library_get(size_t index, em_cuda_library *out);

/* Whether the fast mode uses `library` ("cublas", "cudnn") on dev: *used 1 or 0, and
 * why (the library and version and what it supports, or the reason it is
 * not used: none found, EMBER_CUBLAS=0 or EMBER_CUDNN=0, too old a device or
 * driver). Loads
 * the library on first use. */
EM_API em_status em_device_library_use(em_device dev, const char *library, int *used, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
