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
 * fakecuda_live_allocations: their number. */
typedef size_t (*fakecuda_size_fn)(void);

/* fakecuda_last_launch: name of the last kernel launched ("" if none);
 * fakecuda_config_error: why the last cuInit refused the environment ("" if
 * it did not). */
typedef const char *(*fakecuda_text_fn)(void);

/* fakecuda_call_count: calls of one entry point (exported name, _v2 and
 * plain names share a counter) since the last configuration. */
typedef unsigned long (*fakecuda_call_count_fn)(const char *name);

#endif
