/* CUDA graphs for the executor (internal): capture the work issued on a
 * stream, instantiate it once, replay it with one cuGraphLaunch. Capture
 * needs a driver of CUDA 10.1 or newer (capture modes) and a stream of Ember's own (the
 * legacy default stream cannot capture). While a capture runs, the calls
 * stream capture forbids (a synchronisation, a synchronous or pageable
 * copy, cuMemAlloc / cuMemFree) invalidate it: em_cuda_graph_end then fails
 * naming the rule, and the caller runs eagerly instead. */
#ifndef EMBER_CUDA_GRAPH_H
#define EMBER_CUDA_GRAPH_H

#include <stddef.h>

#include "ember/device.h"
#include "ember/runtime.h"
#include "ember/status.h"

typedef struct em_cuda_graph em_cuda_graph;

/* 1 when device dev can capture and replay graphs; else 0 with the reason
 * in why ("the driver (CUDA 9.2) has no stream capture: cuStreamBeginCapture
 * needs CUDA 10.0 ..."). */
int em_cuda_graph_supported(em_device dev, char *why, size_t cap);

/* Starts capturing stream s (not NULL: Ember's own stream) of dev, in
 * THREAD_LOCAL mode (10.1+): other threads' allocations do not disturb it.
 * A 10.0 driver is not supported: its capture is GLOBAL only, which fails
 * other threads' allocations while it runs. */
em_status em_cuda_graph_begin(em_device dev, em_stream *s);

/* Ends the capture of s and instantiates it. On failure (an invalidated
 * capture: EM_ERR_UNSUPPORTED, the message naming the rule; a driver error:
 * EM_ERR_CUDA) nothing is returned and s is no longer capturing. */
em_status em_cuda_graph_end(em_device dev, em_stream *s, em_cuda_graph **out);

/* Whether s is capturing now: 1 active, 0 not capturing, -1 invalidated (a
 * forbidden call since em_cuda_graph_begin), or -1 when the driver cannot
 * say. Lets the caller name the step that invalidated a capture. */
int em_cuda_graph_capturing(em_device dev, em_stream *s);

/* Replays the graph on s (the work runs in capture order, after what s
 * already holds). */
em_status em_cuda_graph_launch(em_cuda_graph *g, em_stream *s);

/* Frees the graph (launches still pending complete). NULL is a no-op. */
void em_cuda_graph_free(em_cuda_graph *g);

/* Page-locked host memory for a graph's host-to-device copies: a copy
 * captured from pageable memory invalidates the capture (the driver stages
 * pageable bytes at the call, which a replay cannot repeat), while one from
 * cuMemHostAlloc memory is recorded and reads the bytes again at every
 * replay. Allocate before the capture begins (cuMemHostAlloc may
 * synchronise [U]) and free only after the graph: pending replays read it.
 * EM_ERR_UNSUPPORTED where the driver lacks cuMemHostAlloc / cuMemFreeHost. */
em_status em_cuda_graph_host_alloc(em_device dev, size_t bytes, void **out);
void em_cuda_graph_host_free(em_device dev, void *p); /* NULL is a no-op */

#endif
