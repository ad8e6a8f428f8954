/* Stream capture and graphs of the fake libcuda (README.md, "Stream
 * capture and graphs").
 *
 * A stream in capture records what is issued on it instead of queueing it:
 * every operation goes through fc_enqueue (fakecuda_queue.c), which hands
 * it here first, so kernel launches (their parameters were copied at the
 * call), asynchronous copies and memsets, and the work of the library
 * doubles (fakecuda_enqueue_work) are all recorded the same way, each with
 * its payload, which the graph then owns: a closure stays valid for every
 * replay and is released when the last graph or executable graph holding it
 * goes. cuGraphLaunch issues the recorded operations again, in capture
 * order, on the launch stream, where they run like any other work.
 *
 * The rules, from the CUDA Driver API reference (cuStreamBeginCapture,
 * cuStreamEndCapture, cuStreamIsCapturing, cuThreadExchangeStreamCaptureMode)
 * and the CUDA Programming Guide ("Prohibited and Unhandled Operations"):
 * - capture may not begin on the legacy stream, nor on a stream already
 *   capturing; it must end on the stream it began on, from the same thread
 *   unless the mode is RELAXED (else CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
 * - waiting for a capturing stream (cuStreamSynchronize, cuStreamQuery), or
 *   for a context with one (cuCtxSynchronize), is refused with
 *   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture;
 * - while a blocking stream captures, any use of the legacy stream (the
 *   synchronous copies and memsets use it) is refused with
 *   CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates the capture;
 * - "potentially unsafe" calls (cuMemAlloc is the documentation's example)
 *   are refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating the
 *   captures that forbid them: the calling thread's own capture unless it
 *   is RELAXED, and a GLOBAL capture of another thread in the same context
 *   (a capture on another device is not disturbed [S: ROCm/rocm-systems#4508
 *   measured CUDA on two GPUs]);
 * - an asynchronous copy to or from pageable host memory is refused and
 *   invalidates the capture; pinned memory is read and written at replay;
 * - once invalidated, every operation issued on the stream returns
 *   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and cuStreamEndCapture returns it
 *   with a NULL graph, ending the capture.
 * Codes the documentation leaves open are marked [U].
 *
 * A driver older than an entry point does not export it (CUDA 9.x has no
 * capture at all): each entry point here is a GNU indirect function whose
 * resolver reads FAKECUDA_DRIVER when it is looked up, and answers NULL
 * below the release that introduced it, so dlsym finds nothing, as on an
 * old driver. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "fakecuda_internal.h"

#define STREAM_LEGACY ((CUstream)0x1)
#define STREAM_PER_THREAD ((CUstream)0x2)

/* One recorded operation; `release` frees the payload when the last holder goes. */
typedef struct fc_node {
  fc_op_fn run;
  void (*release)(void *);
  void *payload;
  char what[96];
} fc_node;

/* The operations of one capture, shared by its graph, every executable
 * graph made from it and every replay still pending on a stream. */
typedef struct fc_nodes {
  unsigned long refs;
  size_t n, cap;
  fc_node *v;
} fc_nodes;

typedef struct fc_capture {
  CUstream stream;
  const struct CUctx_st *ctx;
  unsigned stream_flags;
  int mode;
  pthread_t thread;
  int status; /* ACTIVE or INVALIDATED */
  cuuint64_t id;
  fc_nodes *nodes;
} fc_capture;

struct CUgraph_st {
  const struct CUctx_st *ctx;
  fc_nodes *nodes;
};

struct CUgraphExec_st {
  const struct CUctx_st *ctx;
  fc_nodes *nodes;
  unsigned long long last; /* the last operation of its latest launch */
};

static fc_capture **captures;
static size_t n_captures;
static struct CUgraph_st **graphs;
static size_t n_graphs;
static struct CUgraphExec_st **execs;
static size_t n_execs;
static cuuint64_t next_capture_id = 1;

/* ------------------------------------------------------------- lists --- */

static int push(void ***list, size_t *n, void *item) {
  void **g = realloc(*list, (*n + 1) * sizeof *g);
  if (!g) return -1;
  *list = g;
  g[(*n)++] = item;
  return 0;
}

static size_t index_of(void **list, size_t n, const void *item) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == item) return i;
  return SIZE_MAX;
}

static void remove_at(void **list, size_t *n, size_t i) { list[i] = list[--*n]; }

static fc_nodes *nodes_new(void) {
  fc_nodes *ns = calloc(1, sizeof *ns);
  if (ns) ns->refs = 1;
  return ns;
}

static void nodes_unref(fc_nodes *ns) {
  if (!ns || --ns->refs) return;
  for (size_t i = 0; i < ns->n; i++)
    if (ns->v[i].release) ns->v[i].release(ns->v[i].payload);
  free(ns->v);
  free(ns);
}

static fc_capture *capture_of(CUstream s) {
  if (!s || s == STREAM_LEGACY || s == STREAM_PER_THREAD) return NULL;
  for (size_t i = 0; i < n_captures; i++)
    if (captures[i]->stream == s) return captures[i];
  return NULL;
}

static void capture_drop(fc_capture *c) {
  size_t i = index_of((void **)captures, n_captures, c);
  if (i != SIZE_MAX) remove_at((void **)captures, &n_captures, i);
  nodes_unref(c->nodes);
  free(c);
}

static void invalidate(fc_capture *c) { c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED; }

/* Blocking streams of ctx that capture: the legacy stream depends on them. */
static int invalidate_blocking(const struct CUctx_st *ctx) {
  int hit = 0;
  for (size_t i = 0; i < n_captures; i++)
    if (captures[i]->ctx == ctx && !(captures[i]->stream_flags & 1)) invalidate(captures[i]), hit = 1;
  return hit;
}

/* ------------------------------------------- hooks for the other files --- */

int fc_capture_status(CUstream s) {
  const fc_capture *c = capture_of(s);
  return c ? c->status : CU_STREAM_CAPTURE_STATUS_NONE;
}

int fc_capture_intercept(CUstream s, const struct CUctx_st *ctx, fc_op_fn run, void (*release)(void *), void *payload,
                         const char *what, CUresult *r) {
  if (!s || s == STREAM_LEGACY) {
    if (!invalidate_blocking(ctx)) return 0;
    fc_note_error("%s on the legacy stream while a blocking stream of its context captures: the capture is invalidated",
                  what);
    *r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return 1;
  }
  fc_capture *c = capture_of(s);
  if (!c) return 0;
  if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    *r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return 1;
  }
  fc_nodes *ns = c->nodes;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? ns->cap * 2 : 16;
    fc_node *g = realloc(ns->v, cap * sizeof *g);
    if (!g) {
      invalidate(c);
      *r = CUDA_ERROR_OUT_OF_MEMORY;
      return 1;
    }
    ns->v = g;
    ns->cap = cap;
  }
  fc_node *nd = &ns->v[ns->n++];
  *nd = (fc_node){run, release, payload, {0}};
  snprintf(nd->what, sizeof nd->what, "%s", what);
  *r = CUDA_SUCCESS;
  return 1;
}

CUresult fc_capture_refuse(CUstream s, const char *fmt, ...) {
  fc_capture *c = capture_of(s);
  if (c) invalidate(c);
  char why[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  fc_note_error("%s: the capture is invalidated", why);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult fc_capture_sync_check(CUstream s, const struct CUctx_st *ctx, int whole_ctx, const char *call) {
  if (whole_ctx) {
    int hit = 0;
    for (size_t i = 0; i < n_captures; i++)
      if (captures[i]->ctx == ctx) invalidate(captures[i]), hit = 1;
    if (!hit) return CUDA_SUCCESS;
    fc_note_error("%s while a stream of the context captures: the capture is invalidated", call);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!s || s == STREAM_LEGACY) {
    if (!invalidate_blocking(ctx)) return CUDA_SUCCESS;
    fc_note_error("%s of the legacy stream while a blocking stream of its context captures: the capture is invalidated",
                  call);
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (!capture_of(s)) return CUDA_SUCCESS;
  return fc_capture_refuse(s, "%s of a capturing stream", call);
}

CUresult fc_capture_unsafe_check(const struct CUctx_st *ctx, const char *call) {
  pthread_t self = pthread_self();
  int hit = 0;
  for (size_t i = 0; i < n_captures; i++) {
    fc_capture *c = captures[i];
    int mine = pthread_equal(c->thread, self);
    if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) || (!mine && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->ctx == ctx))
      invalidate(c), hit = 1;
  }
  if (!hit) return CUDA_SUCCESS;
  fc_note_error("%s is potentially unsafe during a GLOBAL or THREAD_LOCAL stream capture: the capture is invalidated "
                "(allocate before capturing, or capture in RELAXED mode)",
                call);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

void fc_capture_forget_stream(CUstream s) {
  fc_capture *c = capture_of(s);
  if (c) capture_drop(c);
}

void fc_graph_release(const struct CUctx_st *ctx) {
  for (size_t i = n_captures; i-- > 0;)
    if (!ctx || captures[i]->ctx == ctx) capture_drop(captures[i]);
  for (size_t i = n_graphs; i-- > 0;) {
    if (ctx && graphs[i]->ctx != ctx) continue;
    nodes_unref(graphs[i]->nodes);
    free(graphs[i]);
    remove_at((void **)graphs, &n_graphs, i);
  }
  for (size_t i = n_execs; i-- > 0;) {
    if (ctx && execs[i]->ctx != ctx) continue;
    nodes_unref(execs[i]->nodes);
    free(execs[i]);
    remove_at((void **)execs, &n_execs, i);
  }
  if (!ctx) {
    free(captures), free(graphs), free(execs);
    captures = NULL, graphs = NULL, execs = NULL;
    n_captures = n_graphs = n_execs = 0;
    next_capture_id = 1;
  }
}

/* ----------------------------------------------------------- capture --- */

/* "Capture may not be initiated if stream is CU_STREAM_LEGACY" (cuda.h,
 * which lists CUDA_ERROR_INVALID_VALUE among the returns [U: the code for
 * this case]); "it may only be initiated if the stream is not already in
 * capture mode" (CUDA_ERROR_ILLEGAL_STATE [U]). */
static CUresult begin_capture(CUstream s, int mode) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (!s || s == STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  if (s == STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED; /* not modelled (README) */
  if (!fc_stream_is_valid(s) || fc_stream_ctx(s) != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (capture_of(s)) return CUDA_ERROR_ILLEGAL_STATE;
  fc_capture *c = calloc(1, sizeof *c);
  if (!c || !(c->nodes = nodes_new()) || push((void ***)&captures, &n_captures, c) != 0) {
    if (c) nodes_unref(c->nodes);
    free(c);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  c->stream = s;
  c->ctx = ctx;
  c->stream_flags = fc_stream_flags(s);
  c->mode = mode;
  c->thread = pthread_self();
  c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  c->id = next_capture_id++;
  return CUDA_SUCCESS;
}

/* A stream that is not capturing: CUDA_ERROR_ILLEGAL_STATE [U]. Another
 * thread ending a GLOBAL or THREAD_LOCAL capture: WRONG_THREAD, and the
 * capture goes on. An invalidated capture ends with a NULL graph and
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (cuda.h: "If capture was
 * invalidated, due to a violation of the rules of stream capture, then a
 * NULL graph will be returned"). */
static CUresult end_capture(CUstream s, CUgraph *out) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (s && s != STREAM_LEGACY && !fc_stream_is_valid(s)) return CUDA_ERROR_INVALID_HANDLE;
  fc_capture *c = capture_of(s);
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    *out = NULL;
    capture_drop(c);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g || push((void ***)&graphs, &n_graphs, g) != 0) {
    free(g);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g->ctx = c->ctx;
  g->nodes = c->nodes;
  g->nodes->refs++;
  capture_drop(c);
  *out = g;
  return CUDA_SUCCESS;
}

/* The legacy stream's status while a blocking stream captures is
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and "The blocking stream capture is
 * not invalidated" (cudaStreamIsCapturing). */
static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  if (s == STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
  if (!fc_stream_is_valid(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!s || s == STREAM_LEGACY) {
    for (size_t i = 0; i < n_captures; i++)
      if (captures[i]->ctx == ctx && !(captures[i]->stream_flags & 1)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  const fc_capture *c = capture_of(s);
  *status = c ? c->status : CU_STREAM_CAPTURE_STATUS_NONE;
  if (c && id) *id = c->id;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------ graphs --- */

static struct CUgraph_st *live_graph(CUgraph g) {
  return index_of((void **)graphs, n_graphs, g) != SIZE_MAX ? g : NULL;
}

static struct CUgraphExec_st *live_exec(CUgraphExec e) {
  return index_of((void **)execs, n_execs, e) != SIZE_MAX ? e : NULL;
}

/* The graph must be of the current context [U: 201 otherwise]. The log, when
 * given, is left empty: instantiating a captured graph cannot fail here. */
static CUresult instantiate(CUgraphExec *out, CUgraph hg, char *log, size_t log_size) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct CUgraph_st *g = live_graph(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE; /* [U] */
  if (g->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT;
  struct CUgraphExec_st *e = calloc(1, sizeof *e);
  if (!e || push((void ***)&execs, &n_execs, e) != 0) {
    free(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  e->ctx = ctx;
  e->nodes = g->nodes;
  e->nodes->refs++;
  if (log && log_size) log[0] = '\0';
  *out = e;
  return CUDA_SUCCESS;
}

/* Flags (AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH, USE_NODE_PRIORITY) are
 * not modelled: refused so that a gap shows. */
static CUresult instantiate_flags(CUgraphExec *out, CUgraph hg, unsigned long long flags) {
  if (flags) {
    fc_note_error("cuGraphInstantiateWithFlags: flags 0x%llx are not modelled by the double", flags);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return instantiate(out, hg, NULL, 0);
}

typedef struct replay_op {
  fc_nodes *nodes;
  size_t i;
} replay_op;

static CUresult replay_run(void *p, char *msg, size_t cap) {
  const replay_op *rp = p;
  const fc_node *nd = &rp->nodes->v[rp->i];
  return nd->run(nd->payload, msg, cap);
}

static void replay_release(void *p) {
  replay_op *rp = p;
  nodes_unref(rp->nodes);
  free(rp);
}

/* The recorded operations, in capture order, on stream s, after any earlier
 * launch of the same executable graph ("Each launch is ordered behind both
 * any previous work in hStream and any previous launches of hGraphExec",
 * cuGraphLaunch). A launch into a capturing stream (a child graph node) is
 * not modelled. */
static CUresult graph_launch(CUgraphExec he, CUstream s) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  struct CUgraphExec_st *e = live_exec(he);
  if (!e) return CUDA_ERROR_INVALID_VALUE; /* [U] */
  if (s == STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
  if (!fc_stream_is_valid(s) || fc_stream_ctx(s) != e->ctx || e->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (fc_capture_status(s) != CU_STREAM_CAPTURE_STATUS_NONE) {
    fc_note_error("cuGraphLaunch into a capturing stream: child graphs are not modelled by the double");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  for (size_t i = 0; i < e->nodes->n; i++) {
    replay_op *rp = malloc(sizeof *rp);
    if (!rp) return CUDA_ERROR_OUT_OF_MEMORY;
    *rp = (replay_op){e->nodes, i};
    e->nodes->refs++;
    unsigned long long seq = 0;
    r = fc_enqueue(s, replay_run, replay_release, rp, e->nodes->v[i].what, &seq);
    if (r != CUDA_SUCCESS) return r;
    if (i == 0 && (r = fc_op_after(seq, e->last)) != CUDA_SUCCESS) return r;
    e->last = seq;
  }
  return CUDA_SUCCESS;
}

/* Pending launches keep what they run ("cuGraphExecDestroy: ... If the
 * executable graph is in-flight, it will not be terminated, but rather
 * freed asynchronously on completion"). */
static CUresult exec_destroy(CUgraphExec he) {
  size_t i = index_of((void **)execs, n_execs, he);
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_VALUE; /* [U] */
  nodes_unref(execs[i]->nodes);
  free(execs[i]);
  remove_at((void **)execs, &n_execs, i);
  return CUDA_SUCCESS;
}

static CUresult graph_destroy(CUgraph hg) {
  size_t i = index_of((void **)graphs, n_graphs, hg);
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_VALUE; /* [U] */
  nodes_unref(graphs[i]->nodes);
  free(graphs[i]);
  remove_at((void **)graphs, &n_graphs, i);
  return CUDA_SUCCESS;
}

/* ----------------------------------------------------------- exports --- */

/* 1 when the configured driver has an entry point introduced in `since`
 * (1000*major + 10*minor). The stub library exports everything; a
 * malformed FAKECUDA_DRIVER is cuInit's to refuse. */
static int driver_has(int since) {
  const char *stub = getenv("FAKECUDA_STUB");
  if (stub && *stub && strcmp(stub, "0") != 0) return 1;
  int v = 0;
  char err[160];
  return fc_config_driver(&v, err, sizeof err) != 0 || v >= since;
}

/* Exports `name` as an indirect function: dlsym runs the resolver, which
 * hands out `impl` only on a driver of `since` or newer. */
#define FC_GATED(name, impl, since)                                                                \
  static __typeof__(&impl) name##_resolver(void) { return driver_has(since) ? &impl : NULL; }     \
  FC_EXPORT __typeof__(impl) name __attribute__((ifunc(#name "_resolver")))

static CUresult begin_v1(CUstream s) { FC_CALL(cuStreamBeginCapture_v2, begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL)); }
static CUresult begin_v2(CUstream s, CUstreamCaptureMode mode) {
  FC_CALL(cuStreamBeginCapture_v2, begin_capture(s, mode));
}
static CUresult end_impl(CUstream s, CUgraph *g) { FC_CALL(cuStreamEndCapture, end_capture(s, g)); }
static CUresult is_capturing_impl(CUstream s, CUstreamCaptureStatus *st) {
  FC_CALL(cuStreamIsCapturing, capture_info(s, st, NULL));
}
static CUresult capture_info_impl(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id) {
  FC_CALL(cuStreamGetCaptureInfo, capture_info(s, st, id));
}
static CUresult instantiate_impl(CUgraphExec *e, CUgraph g, CUgraphNode *err_node, char *log, size_t size) {
  (void)err_node;
  FC_CALL(cuGraphInstantiate_v2, instantiate(e, g, log, size));
}
static CUresult instantiate_flags_impl(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  FC_CALL(cuGraphInstantiateWithFlags, instantiate_flags(e, g, flags));
}
static CUresult launch_impl(CUgraphExec e, CUstream s) { FC_CALL(cuGraphLaunch, graph_launch(e, s)); }
static CUresult exec_destroy_impl(CUgraphExec e) { FC_CALL(cuGraphExecDestroy, exec_destroy(e)); }
static CUresult graph_destroy_impl(CUgraph g) { FC_CALL(cuGraphDestroy, graph_destroy(g)); }

FC_GATED(cuStreamBeginCapture, begin_v1, 10000);
FC_GATED(cuStreamBeginCapture_v2, begin_v2, 10010);
FC_GATED(cuStreamEndCapture, end_impl, 10000);
FC_GATED(cuStreamIsCapturing, is_capturing_impl, 10000);
FC_GATED(cuStreamGetCaptureInfo, capture_info_impl, 10010);
FC_GATED(cuGraphInstantiate, instantiate_impl, 10000);
FC_GATED(cuGraphInstantiate_v2, instantiate_impl, 11000);
FC_GATED(cuGraphInstantiateWithFlags, instantiate_flags_impl, 11040);
FC_GATED(cuGraphLaunch, launch_impl, 10000);
FC_GATED(cuGraphExecDestroy, exec_destroy_impl, 10000);
FC_GATED(cuGraphDestroy, graph_destroy_impl, 10000);

FC_SAME_TYPE(begin_v1, PFN_cuStreamBeginCapture_v1);
FC_SAME_TYPE(begin_v2, PFN_cuStreamBeginCapture);
FC_SAME_TYPE(end_impl, PFN_cuStreamEndCapture);
FC_SAME_TYPE(is_capturing_impl, PFN_cuStreamIsCapturing);
FC_SAME_TYPE(capture_info_impl, PFN_cuStreamGetCaptureInfo);
FC_SAME_TYPE(instantiate_impl, PFN_cuGraphInstantiate);
FC_SAME_TYPE(instantiate_flags_impl, PFN_cuGraphInstantiateWithFlags);
FC_SAME_TYPE(launch_impl, PFN_cuGraphLaunch);
FC_SAME_TYPE(exec_destroy_impl, PFN_cuGraphExecDestroy);
FC_SAME_TYPE(graph_destroy_impl, PFN_cuGraphDestroy);

/* ------------------------------------------------------- test hooks --- */

/* Live graphs and executable graphs (the leak checks of the tests). */
FC_EXPORT size_t fakecuda_live_graphs(void) {
  fc_lock_raw();
  size_t n = n_graphs + n_execs;
  fc_leave();
  return n;
}
FC_SAME_TYPE(fakecuda_live_graphs, fakecuda_size_fn);
