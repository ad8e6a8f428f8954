/* CUDA graphs for an executor (exec_graphs.c), internal to the engine.
 *
 * exec.c hands over its runs through two hooks and a refusal; this file
 * owns the executor's stream, the per-feed-shape graphs, their memory pools
 * and fixed feed buffers, and the decisions: warm up eagerly, capture once,
 * replay, or stay eager with a reason. It knows nothing of plans or ops. */
#ifndef EMBER_ENGINE_EXEC_GRAPHS_H
#define EMBER_ENGINE_EXEC_GRAPHS_H

#include <stddef.h>
#include <stdint.h>

#include "ember/exec.h"
#include "ember/runtime.h"

typedef struct em_exec_graphs em_exec_graphs;

typedef struct em_exec_graphs_hooks {
  void *ctx;
  int n_outputs;
  int n_leaves;
  /* One run of the plan on feeds (device tensors or host ones), handing
   * back the outputs (new references). With capturing set it runs inside
   * a capture: it must issue no forbidden call, and may stop at the first
   * step that invalidated the capture, naming it. */
  em_status (*run)(void *ctx, const em_feed *feeds, int n_feeds, int capturing, em_tensor **outputs);
  /* Outside any capture: brings the resident leaves up to date (an upload
   * of a value changed on the host, to the same address), settles earlier
   * device checks, and writes each leaf's device address into addr
   * (n_leaves entries), which a replay needs unchanged. */
  em_status (*leaves)(void *ctx, const void **addr);
  /* After a replay's launch is queued: the leaves (indices as for addr) that
   * the captured run wrote in place (em_exec_graphs_note_written), so the
   * host learns of the writes a replay repeats as it did of the capture's.
   * NULL: none to tell. */
  void (*written)(void *ctx, const int *leaves, int n);
} em_exec_graphs_hooks;

/* Graphs for an executor on dev (a CUDA device): its own non-blocking
 * stream (a blocking stream's capture would make every other thread's
 * synchronous copy on the device fail with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
 * and no graph yet. The stream and the legacy stream are ordered by
 * em_stream_join where work passes between them: exec.c before and after
 * a run's steps and around a step on host copies, this file around a
 * launch. When dev cannot
 * capture (em_cuda_graph_supported), *out still holds the stream-less
 * state and every run stays eager with that reason. */
em_status em_exec_graphs_create(em_device dev, em_exec_graphs **out);
void em_exec_graphs_free(em_exec_graphs *gs);
/* The stream every step launches on (NULL where graphs cannot run). */
em_stream *em_exec_graphs_stream(const em_exec_graphs *gs);

/* A run: eager while its key (config, then dtype and shape of each feed)
 * has been seen fewer than 2 times, or the plan is refused (refusal: why,
 * NULL when capturable); then one capture, kept per key (LRU of
 * EM_EXEC_GRAPHS_KEYS); then replays. *replayed: 1 when a graph ran
 * (captured now or before), 0 for an eager run. */
#define EM_EXEC_GRAPHS_KEYS 8
em_status em_exec_graphs_run(em_exec_graphs *gs, const em_exec_graphs_hooks *h, const char *refusal, uint64_t config,
                             const em_feed *feeds, int n_feeds, em_tensor **outputs, int *replayed);

/* The staging of uploads (op.h's em_op_staging) for the run under way: while
 * a warm-up run of a key records, it counts the bytes staged; while a capture
 * runs, it hands out page-locked memory reserved from that count before the
 * capture began and freed with the graph. NULL when neither (the run uploads
 * from pageable memory as it would without graphs). */
struct em_op_staging *em_exec_graphs_staging(em_exec_graphs *gs);
/* During a capture: the captured run wrote leaf `leaf` in place (a parameter
 * or state); each replay then passes it to the hooks' written. */
em_status em_exec_graphs_note_written(em_exec_graphs *gs, int leaf);

/* Counters and the last reason a run stayed eager. */
typedef struct em_exec_graphs_info {
  uint64_t captures, replays, eager_runs, capture_failures;
  int graphs;           /* graphs held now */
  uint64_t pool_bytes;  /* their pools' bytes */
} em_exec_graphs_info;
void em_exec_graphs_info_get(const em_exec_graphs *gs, em_exec_graphs_info *out);
/* Why the last run stayed eager ("" when it replayed or is warming up). */
const char *em_exec_graphs_why(const em_exec_graphs *gs);

#endif
