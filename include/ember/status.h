/* Ember status codes and error reporting.
 *
 * Every fallible Ember call returns an em_status. On failure a thread-local
 * message (em_last_error) says what failed, the CUDA/NVRTC error name and number
 * where one is involved, and what to do about it. The library never aborts or
 * exits the process. */
#ifndef EMBER_STATUS_H
#define EMBER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(EMBER_BUILDING_LIBRARY)
#define EM_API __attribute__((visibility("default")))
#else
#define EM_API
#endif

typedef enum em_status {
  EM_OK = 0,
  EM_ERR_INVALID_ARGUMENT = 1,  /* a caller passed a bad value (NULL, out of range) */
  EM_ERR_OUT_OF_MEMORY = 2,     /* host or device allocation failed */
  EM_ERR_NO_DRIVER = 3,         /* libcuda.so.1 could not be loaded */
  EM_ERR_STUB_DRIVER = 4,       /* the toolkit's stub libcuda was loaded (CUDA_ERROR_STUB_LIBRARY) */
  EM_ERR_INSUFFICIENT_DRIVER = 5, /* the driver is too old for what was asked */
  EM_ERR_NO_DEVICE = 6,         /* driver present, no visible CUDA device */
  EM_ERR_CUDA = 7,              /* a CUDA driver call failed; the message names it */
  EM_ERR_NVRTC = 8,             /* an NVRTC call failed; the message carries the log */
  EM_ERR_NO_KERNEL_IMAGE = 9,   /* no embedded image can run on the device */
  EM_ERR_STRICT = 10,           /* EMBER_STRICT=1 refused a fallback */
  EM_ERR_NOT_FOUND = 11,        /* a name (kernel, module, device) does not exist */
  EM_ERR_IO = 12,               /* a file could not be read or written */
  EM_ERR_CORRUPT = 13,          /* outside bytes are malformed (file, offset in the message) */
  EM_ERR_UNSUPPORTED = 14,      /* valid request that this build or device cannot do */
  EM_ERR_USE_CPU = 15,          /* the device's plan for this kernel is the CPU; run the CPU twin */
  EM_ERR_INTERNAL = 16,         /* a bug in Ember; please report it with the message */
  EM_ERR_NOT_FINITE = 17        /* a value that must be finite is NaN or inf: training diverged (the loss or a
                                 * gradient of a step; the message names the step and the value) */
} em_status;

/* Name of a status, e.g. "EM_ERR_NO_DRIVER". Never NULL. */
EM_API const char *em_status_name(em_status s);

/* The message of the last failure on this thread ("" if none). The pointer
 * stays valid until the next failing Ember call on the same thread. */
EM_API const char *em_last_error(void);

/* Forget the last failure on this thread. */
EM_API void em_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
