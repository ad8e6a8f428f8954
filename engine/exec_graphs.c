/* CUDA graphs for an executor (exec_graphs.h).
 *
 * Per feed-shape key (the executor's configuration, then the dtype and shape
 * of each feed, in value order):
 *   - the first two runs stay eager: cuDNN's searches, module loading and the
 *     allocator's growth happen there, and the second records the sizes it
 *     allocated (em_alloc_record) to reserve the graph's pool from;
 *   - the third captures: the pool is reserved, the feeds are copied into
 *     fixed buffers the graph owns, the resident leaves are brought up to date,
 *     then the plan runs inside a capture with every allocation served by the
 *     pool; the graph is instantiated and launched for this run's results;
 *   - later runs copy the feeds into the fixed buffers (on the stream, before
 *     the launch), check that no leaf moved, cuGraphLaunch, and copy each output
 *     out of the graph's buffer into a fresh tensor (on the stream).
 * A replay runs no host code: it repeats the capture's kernels, with their
 * parameters and addresses, which is why the buffers must stay the graph's.
 * What host code did during the capture must be repeated around each
 * launch by the caller: uploads are staged in page-locked memory the graph
 * owns (em_exec_graphs_staging, sized from the warm-up runs' count), so the
 * recorded copies read the same bytes again; in-place writes of leaves the
 * captured run noted go to the hooks' written after each launch; anything
 * that must change per run (dropout's step) the caller writes to device
 * memory in its leaves hook, before the launch.
 * A capture that fails (a forbidden call invalidated it, the pool ran short)
 * records why, the run is done again eagerly, and the key stays eager. */
#include "exec_graphs.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_graph.h"
#include "error.h"
#include "op.h"
#include "memory.h"
#include "runtime.h"

typedef struct entry {
  int64_t *key;
  size_t key_len;
  int seen;                 /* eager runs with this key */
  int refused;              /* a capture failed: eager from now on */
  char why[512];            /* ... and why */
  uint64_t last_used;
  em_alloc_record *rec;     /* the last eager run's allocations */
  em_cuda_graph *graph;
  em_alloc_pool *pool;
  int n_feeds;
  em_var *feed_var;         /* in key order */
  em_tensor **feed_buf;     /* the graph's fixed feed buffers */
  em_tensor **outs;         /* the graph's output buffers (on the pool) */
  const void **leaf_addr;   /* the leaves' device addresses at the capture */
  size_t staged;            /* bytes the warm-up runs staged for uploads (the most in one run) */
  unsigned char *pinned;    /* the graph's page-locked staging, `staged` bytes (NULL: none) */
  size_t pinned_used;
  int *written;             /* leaves the captured run wrote in place */
  int n_written;
} entry;

/* What em_exec_graphs_staging hands out (see there). */
enum { STAGE_OFF, STAGE_COUNT, STAGE_CAPTURE };
#define STAGE_ALIGN 64 /* each table on its own cache line [U: any alignment is legal for a copy's source] */

struct em_exec_graphs {
  em_device dev;
  em_stream *stream;        /* the executor's own stream (non-blocking) */
  int supported;
  char unsupported[320];
  entry ent[EM_EXEC_GRAPHS_KEYS];
  int n_ent;
  uint64_t tick;
  int n_outputs;            /* of the entries' outs */
  em_exec_graphs_info info;
  char why[512];
  char logged[512];         /* the last reason put on EMBER_LOG=dispatch: each once, not every run */
  em_op_staging staging;    /* handed to ops; stage_take finds gs from its address */
  int stage_mode;           /* STAGE_* */
  size_t stage_count;       /* STAGE_COUNT: bytes staged in this run */
  entry *capturing;         /* STAGE_CAPTURE: the entry being captured */
};

static em_status stage_take(em_op_staging *st, size_t bytes, void **host) {
  em_exec_graphs *gs = (em_exec_graphs *)((char *)st - offsetof(em_exec_graphs, staging));
  size_t need = (bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
  *host = NULL;
  if (gs->stage_mode == STAGE_COUNT) gs->stage_count += need;
  if (gs->stage_mode != STAGE_CAPTURE) return EM_OK;
  entry *en = gs->capturing;
  if (!en->pinned || en->pinned_used + need > en->staged)
    return em_fail(EM_ERR_UNSUPPORTED,
                   "the capture staged more bytes of uploads (%zu so far) than the warm-up runs did (%zu)",
                   en->pinned_used + need, en->staged);
  *host = en->pinned + en->pinned_used;
  en->pinned_used += need;
  return EM_OK;
}

em_op_staging *em_exec_graphs_staging(em_exec_graphs *gs) {
  return gs && gs->stage_mode != STAGE_OFF ? &gs->staging : NULL;
}

em_status em_exec_graphs_note_written(em_exec_graphs *gs, int leaf) {
  entry *en = gs && gs->stage_mode == STAGE_CAPTURE ? gs->capturing : NULL;
  if (!en) return EM_OK;
  for (int i = 0; i < en->n_written; i++)
    if (en->written[i] == leaf) return EM_OK;
  int *w = realloc(en->written, sizeof *w * (size_t)(en->n_written + 1));
  if (!w) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to note a CUDA graph's in-place writes");
  en->written = w;
  w[en->n_written++] = leaf;
  return EM_OK;
}

static uint64_t bytes_of(const em_tensor *t) { return (uint64_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t)); }

static void entry_drop_graph(em_exec_graphs *gs, entry *en) {
  /* Blocks go back to the shared cache: whoever takes one next must come
   * after the replays still pending on the stream. */
  if (en->graph || en->outs || en->feed_buf) (void)em_stream_join(gs->dev, NULL, gs->stream);
  if (en->outs) {
    em_alloc_pool_enter(en->pool); /* the outputs' blocks go back to the pool, not the allocator */
    for (int i = 0; i < gs->n_outputs; i++) em_tensor_release(en->outs[i]);
    em_alloc_pool_enter(NULL);
    free(en->outs);
    en->outs = NULL;
  }
  em_cuda_graph_free(en->graph); /* pending launches complete first */
  en->graph = NULL;
  em_alloc_pool_free(en->pool);
  en->pool = NULL;
  em_cuda_graph_host_free(gs->dev, en->pinned); /* after the graph: its replays read it */
  en->pinned = NULL, en->pinned_used = 0;
  free(en->written);
  en->written = NULL, en->n_written = 0;
  for (int i = 0; en->feed_buf && i < en->n_feeds; i++) em_tensor_release(en->feed_buf[i]);
  free(en->feed_buf), free(en->feed_var), free(en->leaf_addr);
  en->feed_buf = NULL, en->feed_var = NULL, en->leaf_addr = NULL;
  en->n_feeds = 0;
}

static void entry_clear(em_exec_graphs *gs, entry *en) {
  entry_drop_graph(gs, en);
  em_alloc_record_free(en->rec);
  free(en->key);
  memset(en, 0, sizeof *en);
}

em_status em_exec_graphs_create(em_device dev, em_exec_graphs **out) {
  *out = NULL;
  em_exec_graphs *gs = calloc(1, sizeof *gs);
  if (!gs) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for an executor's CUDA graphs");
  gs->dev = dev;
  gs->staging.take = stage_take;
  gs->supported = em_cuda_graph_supported(dev, gs->unsupported, sizeof gs->unsupported);
  if (gs->supported) {
    em_status s = em_stream_create_nonblocking(dev, &gs->stream);
    if (s) {
      free(gs);
      return em_fail_context(s, "an executor's stream on cuda:%d", dev.ordinal);
    }
  }
  *out = gs;
  return EM_OK;
}

void em_exec_graphs_free(em_exec_graphs *gs) {
  if (!gs) return;
  for (int i = 0; i < gs->n_ent; i++) entry_clear(gs, &gs->ent[i]);
  /* the legacy stream waits for it, and becomes the owner of the blocks cached under it (the
   * next stream may be given its address: memory.h em_alloc_stream_retire) */
  (void)em_stream_join(gs->dev, NULL, gs->stream);
  em_alloc_stream_retire(gs->dev, gs->stream);
  (void)em_stream_destroy(gs->stream);
  free(gs);
}

em_stream *em_exec_graphs_stream(const em_exec_graphs *gs) { return gs ? gs->stream : NULL; }

void em_exec_graphs_info_get(const em_exec_graphs *gs, em_exec_graphs_info *out) {
  memset(out, 0, sizeof *out);
  if (!gs) return;
  *out = gs->info;
  out->graphs = 0;
  out->pool_bytes = 0;
  for (int i = 0; i < gs->n_ent; i++)
    if (gs->ent[i].graph) out->graphs++, out->pool_bytes += em_alloc_pool_bytes(gs->ent[i].pool);
}

const char *em_exec_graphs_why(const em_exec_graphs *gs) { return gs ? gs->why : ""; }

/* --------------------------------------------------------------- keys --- */

/* Feed indices in value order (a caller may list feeds in any order). */
static void feed_order(const em_feed *feeds, int n, int *order) {
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && feeds[order[j - 1]].var > feeds[order[j]].var; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
}

static int64_t *make_key(uint64_t config, const em_feed *feeds, int n, const int *order, size_t *len) {
  size_t cap = 2 + (size_t)n * (3 + EM_MAX_DIMS);
  int64_t *k = malloc(sizeof *k * cap);
  if (!k) return NULL;
  size_t m = 0;
  k[m++] = (int64_t)config, k[m++] = n;
  for (int i = 0; i < n; i++) {
    const em_tensor *t = feeds[order[i]].value;
    k[m++] = feeds[order[i]].var, k[m++] = em_tensor_dtype(t), k[m++] = em_tensor_ndim(t);
    for (int d = 0; d < em_tensor_ndim(t); d++) k[m++] = em_tensor_shape(t)[d];
  }
  *len = m;
  return k;
}

static entry *find(em_exec_graphs *gs, const int64_t *key, size_t len) {
  for (int i = 0; i < gs->n_ent; i++)
    if (gs->ent[i].key_len == len && !memcmp(gs->ent[i].key, key, sizeof *key * len)) return &gs->ent[i];
  return NULL;
}

/* A new entry (taking key), evicting the least recently used one when full. */
static entry *insert(em_exec_graphs *gs, int64_t *key, size_t len) {
  entry *en;
  if (gs->n_ent < EM_EXEC_GRAPHS_KEYS) en = &gs->ent[gs->n_ent++];
  else {
    en = &gs->ent[0];
    for (int i = 1; i < gs->n_ent; i++)
      if (gs->ent[i].last_used < en->last_used) en = &gs->ent[i];
    entry_clear(gs, en);
  }
  en->key = key, en->key_len = len;
  return en;
}

/* ---------------------------------------------------------------- runs --- */

/* Copies a feed's value into the graph's buffer on the stream (a host value
 * through a contiguous host copy when it is strided; the driver stages
 * pageable memory at the call, so the caller may change it afterwards). */
static em_status copy_feed(em_exec_graphs *gs, const em_tensor *src, em_tensor *dst) {
  size_t bytes = (size_t)bytes_of(dst);
  em_device sd = em_tensor_device(src);
  if (em_tensor_is_contiguous(src) && sd.kind == EM_DEVICE_CUDA && sd.ordinal == gs->dev.ordinal)
    return em_memcpy_d2d(gs->dev, em_tensor_data(dst), em_tensor_data(src), bytes, gs->stream);
  if (em_tensor_is_contiguous(src) && sd.kind == EM_DEVICE_CPU)
    return em_memcpy_h2d(gs->dev, em_tensor_data(dst), em_tensor_data(src), bytes, gs->stream);
  em_tensor *h = NULL;
  em_status s = em_tensor_to_device(src, em_cpu(), &h);
  if (!s) s = em_memcpy_h2d(gs->dev, em_tensor_data(dst), em_tensor_data(h), bytes, gs->stream);
  em_tensor_release(h);
  return s;
}

/* Fresh tensors with the graph's outputs, copied on the stream after the
 * launch (the next launch, on the same stream, overwrites the buffers only
 * after these copies). */
static em_status fetch_outputs(em_exec_graphs *gs, entry *en, em_tensor **outputs) {
  em_status s = EM_OK;
  for (int i = 0; i < gs->n_outputs; i++) outputs[i] = NULL;
  for (int i = 0; i < gs->n_outputs && !s; i++) {
    em_shape sh;
    em_shape_of(en->outs[i], &sh);
    s = em_tensor_empty(gs->dev, &sh, &outputs[i]);
  }
  /* the new blocks came from the legacy stream's side of the cache */
  if (!s) s = em_stream_join(gs->dev, gs->stream, NULL);
  for (int i = 0; i < gs->n_outputs && !s; i++) {
    s = em_memcpy_d2d(gs->dev, em_tensor_data(outputs[i]), em_tensor_data(en->outs[i]), (size_t)bytes_of(en->outs[i]),
                        gs->stream);
  }
  if (s)
    for (int i = 0; i < gs->n_outputs; i++) {
      em_tensor_release(outputs[i]);
      outputs[i] = NULL;
    }
  return s;
}

/* After the feeds' copies (the caller joined the stream to the legacy
 * stream before them): the graph runs, its outputs are copied out, and the
 * legacy stream (the caller's reads, other executors) waits for all of it. */
static em_status launch(em_exec_graphs *gs, entry *en, em_tensor **outputs, int *ran) {
  em_status s = em_cuda_graph_launch(en->graph, gs->stream);
  if (ran) *ran = !s; /* the graph's writes are queued even if fetching its outputs fails below */
  if (!s) s = fetch_outputs(gs, en, outputs);
  em_status j = em_stream_join(gs->dev, NULL, gs->stream);
  if (!s) s = j;
  if (!s) gs->info.replays++;
  return s;
}

static void refuse(em_exec_graphs *gs, entry *en, const char *why) {
  snprintf(en->why, sizeof en->why, "%s", why);
  en->refused = 1;
  gs->info.capture_failures++;
  snprintf(gs->logged, sizeof gs->logged, "%s", en->why); /* logged here: not again as the reason to stay eager */
  em_log(EM_LOG_DISPATCH, "executor on cuda:%d: CUDA graph capture failed, runs with these feed shapes stay eager: %s",
         gs->dev.ordinal, why);
}

/* The capture of one run (see the top). Returns EM_OK with the graph
 * launched and outputs filled; EM_ERR_UNSUPPORTED when the capture failed
 * (the entry refused, nothing left over: the caller runs eagerly); another
 * error when the run itself cannot be made. */
static em_status capture(em_exec_graphs *gs, const em_exec_graphs_hooks *h, entry *en, const em_feed *feeds,
                         const int *order, em_tensor **outputs) {
  int n = (int)en->key[1];
  em_feed *fixed = calloc((size_t)(n ? n : 1), sizeof *fixed);
  en->n_feeds = n;
  en->feed_var = calloc((size_t)(n ? n : 1), sizeof *en->feed_var);
  en->feed_buf = calloc((size_t)(n ? n : 1), sizeof *en->feed_buf);
  en->outs = calloc((size_t)(gs->n_outputs ? gs->n_outputs : 1), sizeof *en->outs);
  en->leaf_addr = calloc((size_t)(h->n_leaves ? h->n_leaves : 1), sizeof *en->leaf_addr);
  em_status s = fixed && en->feed_var && en->feed_buf && en->outs && en->leaf_addr
                    ? EM_OK
                    : em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for a CUDA graph's buffers");
  if (!s) s = em_alloc_pool_create(en->rec, &en->pool);
  /* before the capture: cuMemHostAlloc is no call to make inside one. Without
   * it (an optional entry point, or no pinned memory left) the plan's uploads
   * cannot be recorded: the key stays eager, with the reason, and the run
   * goes on eagerly rather than failing. */
  if (!s && en->staged && em_cuda_graph_host_alloc(gs->dev, en->staged, (void **)&en->pinned)) {
    char why[400];
    snprintf(why, sizeof why, "no page-locked memory for the %zu bytes of uploads the plan makes: %s", en->staged,
             em_last_error());
    free(fixed);
    refuse(gs, en, why);
    entry_drop_graph(gs, en);
    em_clear_error();
    return EM_ERR_UNSUPPORTED;
  }
  if (!s) s = h->leaves(h->ctx, en->leaf_addr);
  for (int i = 0; i < n && !s; i++) {
    const em_feed *f = &feeds[order[i]];
    em_shape sh;
    em_shape_of(f->value, &sh);
    en->feed_var[i] = f->var;
    s = em_tensor_empty(gs->dev, &sh, &en->feed_buf[i]);
    fixed[i] = (em_feed){f->var, en->feed_buf[i]};
  }
  /* the stream waits for the legacy stream: uploads, feeds made there, the
   * last users of the blocks just taken */
  if (!s) s = em_stream_join(gs->dev, gs->stream, NULL);
  for (int i = 0; i < n && !s; i++) s = copy_feed(gs, feeds[order[i]].value, en->feed_buf[i]);
  if (s) { /* no capture began: the run itself failed or memory ran out */
    free(fixed);
    entry_drop_graph(gs, en);
    return s;
  }
  char why[512] = "";
  em_alloc_pool_enter(en->pool);
  em_status b = em_cuda_graph_begin(gs->dev, gs->stream);
  if (b) snprintf(why, sizeof why, "%s", em_last_error());
  else {
    gs->stage_mode = STAGE_CAPTURE, gs->capturing = en;
    em_status r = h->run(h->ctx, fixed, n, 1, en->outs);
    gs->stage_mode = STAGE_OFF, gs->capturing = NULL;
    if (r) snprintf(why, sizeof why, "%s", em_last_error());
    em_status e = em_cuda_graph_end(gs->dev, gs->stream, &en->graph);
    if (e && !r) snprintf(why, sizeof why, "%s", em_last_error());
  }
  em_alloc_pool_enter(NULL);
  free(fixed);
  if (why[0] || !en->graph) {
    refuse(gs, en, why[0] ? why : "the capture produced no graph");
    entry_drop_graph(gs, en);
    em_clear_error();
    return EM_ERR_UNSUPPORTED;
  }
  gs->info.captures++;
  em_log(EM_LOG_DISPATCH, "executor on cuda:%d: captured a CUDA graph (pool of %llu bytes)", gs->dev.ordinal,
         (unsigned long long)em_alloc_pool_bytes(en->pool));
  s = launch(gs, en, outputs, NULL);
  if (s) entry_drop_graph(gs, en);
  return s;
}

/* A replay: feeds into the fixed buffers, leaves checked, launch, outputs.
 * EM_ERR_UNSUPPORTED when a leaf moved (the graph is dropped and the key
 * warms up again). */
static em_status replay(em_exec_graphs *gs, const em_exec_graphs_hooks *h, entry *en, const em_feed *feeds,
                        const int *order, em_tensor **outputs) {
  const void *addr[64], **a = h->n_leaves <= 64 ? addr : malloc(sizeof *a * (size_t)h->n_leaves);
  if (!a) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory to check %d leaves", h->n_leaves);
  em_status s = h->leaves(h->ctx, a);
  int moved = !s && h->n_leaves && memcmp(a, en->leaf_addr, sizeof *a * (size_t)h->n_leaves);
  if (a != addr) free(a);
  if (s) return s;
  if (moved) {
    snprintf(gs->why, sizeof gs->why, "a parameter's, state's or constant's device copy moved since the capture");
    em_log(EM_LOG_DISPATCH, "executor on cuda:%d: CUDA graph dropped: %s", gs->dev.ordinal, gs->why);
    entry_drop_graph(gs, en);
    en->seen = 0;
    return EM_ERR_UNSUPPORTED;
  }
  s = em_stream_join(gs->dev, gs->stream, NULL); /* uploads of changed parameters, feeds made on the legacy stream */
  for (int i = 0; i < en->n_feeds && !s; i++) s = copy_feed(gs, feeds[order[i]].value, en->feed_buf[i]);
  int ran = 0;
  if (!s) s = launch(gs, en, outputs, &ran);
  /* the replay wrote what the capture's run wrote: told whenever the graph
   * was launched, even when copying its outputs then failed, as the eager
   * run tells the host of each step's writes whatever follows; else a host
   * read would return the value from before the update, and a later upload
   * of that stale host copy would undo it */
  if (ran && en->n_written && h->written) h->written(h->ctx, en->written, en->n_written);
  return s;
}

em_status em_exec_graphs_run(em_exec_graphs *gs, const em_exec_graphs_hooks *h, const char *refusal, uint64_t config,
                             const em_feed *feeds, int n_feeds, em_tensor **outputs, int *replayed) {
  *replayed = 0;
  gs->n_outputs = h->n_outputs;
  gs->why[0] = '\0';
  entry *en = NULL;
  int order_small[16], *order = NULL;
  if (!gs->supported) snprintf(gs->why, sizeof gs->why, "%s", gs->unsupported);
  else if (refusal) snprintf(gs->why, sizeof gs->why, "%s", refusal);
  else if (n_feeds < 0 || (n_feeds && !feeds)) { /* the run says what is wrong */
  } else {
    order = n_feeds <= 16 ? order_small : malloc(sizeof(int) * (size_t)n_feeds);
    if (!order) return em_fail(EM_ERR_OUT_OF_MEMORY, "no memory for %d feeds", n_feeds);
    int ok = 1;
    for (int i = 0; i < n_feeds; i++) ok &= feeds[i].value != NULL;
    size_t len = 0;
    int64_t *key = NULL;
    if (ok) feed_order(feeds, n_feeds, order);
    if (ok && (key = make_key(config, feeds, n_feeds, order, &len))) {
      if ((en = find(gs, key, len))) free(key);
      else if (!(en = insert(gs, key, len))) free(key);
    }
  }
  em_status s = EM_ERR_UNSUPPORTED;
  if (en) {
    en->last_used = ++gs->tick;
    if (en->refused) snprintf(gs->why, sizeof gs->why, "%s", en->why);
    else if (en->graph) s = replay(gs, h, en, feeds, order, outputs);
    else if (en->seen >= 2) s = capture(gs, h, en, feeds, order, outputs);
  }
  if (en && en->refused) snprintf(gs->why, sizeof gs->why, "%s", en->why);
  if (s != EM_ERR_UNSUPPORTED) {
    if (order != order_small) free(order);
    if (!s) *replayed = 1;
    return s;
  }
  /* exec.h promises the reason on EMBER_LOG=dispatch as well as in
   * em_exec_describe: each new one once. */
  if (gs->why[0] && strcmp(gs->why, gs->logged)) {
    snprintf(gs->logged, sizeof gs->logged, "%s", gs->why);
    em_log(EM_LOG_DISPATCH, "executor on cuda:%d: runs stay eager: %s", gs->dev.ordinal, gs->why);
  }
  /* Eager: the warm-up runs record their allocations for the pool. */
  if (en && !en->refused && !en->rec && !(en->rec = em_alloc_record_new(gs->dev))) en = NULL;
  int record = en && !en->refused;
  if (record) em_alloc_record_start(en->rec), gs->stage_mode = STAGE_COUNT, gs->stage_count = 0;
  s = h->run(h->ctx, feeds, n_feeds, 0, outputs);
  if (record) em_alloc_record_start(NULL), gs->stage_mode = STAGE_OFF;
  if (!s && record && gs->stage_count > en->staged) en->staged = gs->stage_count;
  if (!s && record) en->seen++;
  if (!s) gs->info.eager_runs++;
  if (order != order_small) free(order);
  return s;
}
