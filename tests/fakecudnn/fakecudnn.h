/* Test hooks of the fake libcudnn (tests/fakecudnn, README.md), for tests
 * that dlopen() it: resolve them with dlsym by name and call through these
 * types. They take the double's lock and are not subject to FAKECUDNN_FAIL. */
#ifndef FAKECUDNN_H
#define FAKECUDNN_H

#include <stddef.h>

/* fakecudnn_call_count: calls of one cuDNN entry point (its exported name)
 * since the configuration in force began, failed ones included; 0 for an
 * unknown name. The count that proves a disk cache spared a Find. */
typedef unsigned long (*fakecudnn_call_count_fn)(const char *name);

/* fakecudnn_reset: destroys every live handle and descriptor, forgets the
 * counters and the configuration (the next call reads the environment). */
typedef void (*fakecudnn_reset_fn)(void);

/* fakecudnn_last_call: what the last operation that passed its checks did,
 * one line: entry point, algorithm, math type and how it was applied,
 * operand shapes, workspace given and needed ("" if none yet).
 * fakecudnn_last_error: why the last refused call was refused ("" if none).
 * fakecudnn_config_error: why the environment was refused ("" if it was not).
 * The text is the calling thread's copy: valid until its next call. */
typedef const char *(*fakecudnn_text_fn)(void);

/* fakecudnn_live_handles / fakecudnn_live_descriptors: handles and
 * descriptors (tensor, filter, convolution, pooling) made and not yet
 * destroyed: a leak check. */
typedef size_t (*fakecudnn_count_fn)(void);

#endif
