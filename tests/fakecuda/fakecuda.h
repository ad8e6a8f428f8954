/* Test hooks of the fake libcuda (tests/fakecuda, README.md), for tests that
 * dlopen() it: resolve them with dlsym by name and call through these types.
 * They take the fake's lock and are not subject to FAKECUDA_STUB,
 * FAKECUDA_FAIL or the cuInit rule. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>

/* fakecuda_reset: forget every device, context, allocation, module, counter
 * and the configuration, as if the library had been unloaded; the next cuInit
 * reads the environment again. */
typedef void (*fakecuda_reset_fn)(void);

/* fakecuda_launch_count: successful cuLaunchKernel calls since the last
 * configuration. fakecuda_jit_count: PTX inputs the pretend JIT compiled
 * (module loads and cuLinkAddData). */
typedef unsigned long (*fakecuda_count_fn)(void);

/* fakecuda_bytes_allocated: bytes of live device allocations (as requested);
 * fakecuda_live_allocations: their number; fakecuda_pinned_allocations: the
 * number of live pinned host allocations (cuMemHostAlloc), which the other
 * two leave out. */
typedef size_t (*fakecuda_size_fn)(void);

/* fakecuda_last_launch: name of the last kernel launched ("" if none);
 * fakecuda_config_error: why the last cuInit refused the environment ("" if
 * it did not). */
typedef const char *(*fakecuda_text_fn)(void);

/* fakecuda_call_count: calls of one entry point (exported name, _v2 and
 * plain names share a counter) since the last configuration. */
typedef unsigned long (*fakecuda_call_count_fn)(const char *name);

/* fakecuda_seed: the seed of the orders the double draws (threads within a
 * block, blocks, independent streams), FAKECUDA_SEED or the clock's;
 * fakecuda_set_seed: restart the sequence from another seed. */
typedef unsigned long long (*fakecuda_seed_fn)(void);
typedef void (*fakecuda_set_seed_fn)(unsigned long long seed);

/* fakecuda_pending_ops: operations issued on streams that have not run yet
 * (they run at synchronisation points). fakecuda_last_error: what went wrong
 * in the last operation that failed while running ("" if none). Both use
 * the types above (fakecuda_size_fn, fakecuda_text_fn). */

/* For the doubles of the CUDA libraries (tests/fakecublas, tests/fakecudnn),
 * which find the loaded double with dlopen("libcuda.so.1", RTLD_NOLOAD) as
 * the real libraries find the driver:
 * fakecuda_enqueue_work: issue work on a stream of the current context,
 * ordered like a kernel launch; run(payload, msg, cap) does it when the
 * queue gets there (CUDA_SUCCESS, or an error with a message, which becomes
 * the context's sticky error as a faulting kernel's would); release frees
 * the payload afterwards (may be NULL; also called when issuing fails).
 * fakecuda_device_span: inside run only, the host bytes behind [p, p+bytes)
 * of the work's context's device memory, or CUDA_ERROR_ILLEGAL_ADDRESS with
 * the reason. CUresult and CUstream are cuda.h's (an int and a pointer). */
#include "cuda_abi.h"
typedef CUresult (*fakecuda_work_fn)(void *payload, char *msg, size_t cap);
typedef CUresult (*fakecuda_enqueue_work_fn)(CUstream s, fakecuda_work_fn run, void (*release)(void *), void *payload,
                                             const char *what);
typedef CUresult (*fakecuda_device_span_fn)(CUdeviceptr p, size_t bytes, void **host, char *msg, size_t cap);
/* cuCtxGetDevice (cuda.h), exported for those doubles: runtime/cuda_abi.h
 * does not declare it (Ember's runtime does not call it). */
typedef CUresult (*PFN_cuCtxGetDevice)(CUdevice *dev);

#endif
