/* Streams, events and the work queue of the fake libcuda.
 *
 * Every copy, memset and launch is an operation on a stream. Nothing runs
 * when it is issued: operations run only at a synchronisation point
 * (cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize, a synchronous
 * copy to or from the host, cuMemFree, a query that finds work pending), which is
 * all a program can count on with a real GPU. So a host read of a result
 * without synchronising first reads what was there before, as it often
 * would on a real GPU, and a test sees it.
 *
 * Ordering is CUDA's ("Stream synchronization behavior" in the CUDA Driver
 * API reference, and the Programming Guide's "Implicit Synchronization"):
 * - operations on one stream run in issue order;
 * - the legacy default stream (NULL, CU_STREAM_LEGACY) waits for all earlier
 *   work on every blocking stream of the context, and every blocking stream
 *   (created with flags 0) waits for earlier work on the legacy stream;
 *   streams made with CU_STREAM_NON_BLOCKING (1) do neither;
 * - cuStreamWaitEvent makes later work on a stream wait for the work the
 *   event captured when it was recorded.
 * Among operations that do not depend on each other, the order is drawn from
 * FAKECUDA_SEED, so two streams that race without an event show it.
 *
 * An operation that fails while running (a kernel's pointer into freed
 * memory, barrier divergence) leaves its context with a sticky error, as a
 * real device fault does: every later call that needs the context returns it
 * until the primary context is released (fakecuda_internal.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"
#include "fakecuda_internal.h"

struct CUstream_st {
  const struct CUctx_st *ctx;
  unsigned flags;
  unsigned long long last; /* seq of the last operation issued on it (0: none) */
};

struct CUevent_st {
  const struct CUctx_st *ctx;
  unsigned flags;
  unsigned long long seq; /* the record operation, 0 if never recorded */
  int done;               /* that operation ran */
  double time_ms;         /* when it ran */
};

typedef struct fc_op {
  unsigned long long seq;
  const struct CUctx_st *ctx;
  fc_op_fn run;
  void (*release)(void *payload);
  void *payload;
  unsigned long long *deps;
  size_t n_deps;
  unsigned long long mark; /* the collection pass that wants it */
  /* Scratch of run_marked: pending dependencies, dependents, ran. */
  size_t waiting, first_dependent, n_dependents;
  int ran;
  char what[96];
} fc_op;

/* Pending operations, in issue (seq) order; finished ones are removed. */
static fc_op **ops;
static size_t n_ops, cap_ops;
static unsigned long long next_seq = 1, pass;

static struct CUstream_st **streams;
static size_t n_streams, cap_streams;
static struct CUevent_st **events;
static size_t n_events, cap_events;

static char last_error[512];

/* ------------------------------------------------------------ lookup --- */

static int grow(void ***list, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap * 2 : 32;
  while (c < need) c *= 2;
  void **g = realloc(*list, c * sizeof *g);
  if (!g) return -1;
  *list = g;
  *cap = c;
  return 0;
}

/* The pending operation with this seq, or NULL (finished or never issued). */
static fc_op *find_op(unsigned long long seq) {
  size_t lo = 0, hi = n_ops;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (ops[mid]->seq < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo < n_ops && ops[lo]->seq == seq ? ops[lo] : NULL;
}

static size_t stream_index(const struct CUstream_st *s) {
  for (size_t i = 0; i < n_streams; i++)
    if (streams[i] == s) return i;
  return SIZE_MAX;
}

static struct CUevent_st *live_event(CUevent e) {
  for (size_t i = 0; i < n_events; i++)
    if (events[i] == e) return fc_ctx_is_live(events[i]->ctx) ? events[i] : NULL;
  return NULL;
}

/* CU_STREAM_LEGACY (0x1) is another name of the legacy default stream (cuda.h). */
#define STREAM_LEGACY ((CUstream)0x1)
/* CU_STREAM_PER_THREAD (0x2): not modelled. */
#define STREAM_PER_THREAD ((CUstream)0x2)

int fc_stream_is_valid(CUstream s) {
  if (!s || s == STREAM_LEGACY) return 1;
  size_t i = stream_index(s);
  return i != SIZE_MAX && fc_ctx_is_live(streams[i]->ctx);
}

const struct CUctx_st *fc_stream_ctx(CUstream s) {
  struct CUctx_st *ctx;
  if (!s || s == STREAM_LEGACY) return fc_current_ctx(&ctx) == CUDA_SUCCESS ? ctx : NULL;
  size_t i = stream_index(s);
  return i == SIZE_MAX ? NULL : streams[i]->ctx;
}

/* ------------------------------------------------------------- issue --- */

static int add_dep(fc_op *op, unsigned long long seq) {
  if (!seq || !find_op(seq)) return 0; /* finished work is no dependency */
  for (size_t i = 0; i < op->n_deps; i++)
    if (op->deps[i] == seq) return 0;
  unsigned long long *g = realloc(op->deps, (op->n_deps + 1) * sizeof *g);
  if (!g) return -1;
  op->deps = g;
  op->deps[op->n_deps++] = seq;
  return 0;
}

static void free_op(fc_op *op) {
  if (op->release) op->release(op->payload);
  free(op->deps);
  free(op);
}

CUresult fc_enqueue(CUstream s, fc_op_fn run, void (*release)(void *), void *payload, const char *what,
                    unsigned long long *seq_out) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r == CUDA_SUCCESS && !fc_stream_is_valid(s)) r = CUDA_ERROR_INVALID_HANDLE;
  /* A capturing stream records the operation instead (fakecuda_graph.c). */
  CUresult taken_r = CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && fc_capture_intercept(s, ctx, run, release, payload, what, &taken_r)) {
    if (taken_r != CUDA_SUCCESS && release) release(payload);
    if (seq_out) *seq_out = 0;
    return taken_r;
  }
  fc_op *op = r == CUDA_SUCCESS ? calloc(1, sizeof *op) : NULL;
  if (r == CUDA_SUCCESS && (!op || grow((void ***)&ops, &cap_ops, n_ops + 1) != 0)) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r != CUDA_SUCCESS) {
    free(op);
    if (release) release(payload);
    return r;
  }
  op->seq = next_seq++;
  op->ctx = ctx;
  op->run = run;
  op->release = release;
  op->payload = payload;
  snprintf(op->what, sizeof op->what, "%s", what);
  int bad = 0;
  struct CUstream_st *st = (s && s != STREAM_LEGACY) ? streams[stream_index(s)] : NULL;
  if (st) {
    bad |= add_dep(op, st->last);
    if (!(st->flags & 1)) bad |= add_dep(op, ctx->legacy_last); /* blocking stream: after the legacy stream */
    st->last = op->seq;
  } else {
    bad |= add_dep(op, ctx->legacy_last);
    for (size_t i = 0; i < n_streams; i++) /* legacy stream: after every blocking stream */
      if (streams[i]->ctx == ctx && !(streams[i]->flags & 1)) bad |= add_dep(op, streams[i]->last);
    ctx->legacy_last = op->seq;
  }
  if (bad) {
    free_op(op);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ops[n_ops++] = op;
  if (seq_out) *seq_out = op->seq;
  return CUDA_SUCCESS;
}

unsigned fc_stream_flags(CUstream s) {
  size_t i = s && s != STREAM_LEGACY ? stream_index(s) : SIZE_MAX;
  return i == SIZE_MAX ? 0 : streams[i]->flags;
}

CUresult fc_op_after(unsigned long long seq, unsigned long long dep) {
  fc_op *op = find_op(seq);
  return op && add_dep(op, dep) != 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* --------------------------------------------------------------- run --- */

void fc_note_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakecuda: %s\n", last_error);
}

/* Runs the operation (or skips it under its context's sticky error). */
static const struct CUctx_st *running_ctx; /* of the operation running now, else NULL */

const struct CUctx_st *fc_running_ctx(void) { return running_ctx; }

static CUresult run_one(fc_op *op) {
  struct CUctx_st *ctx = (struct CUctx_st *)op->ctx;
  CUresult r = ctx->sticky;
  if (r == CUDA_SUCCESS) {
    char msg[sizeof last_error];
    msg[0] = '\0';
    running_ctx = ctx;
    r = op->run(op->payload, msg, sizeof msg);
    running_ctx = NULL;
    if (r != CUDA_SUCCESS) {
      fc_note_error("%s (FAKECUDA_SEED=%llu repeats this run's orders)", msg[0] ? msg : op->what,
                    (unsigned long long)fc_g.seed);
      ctx->sticky = r;
    }
  }
  op->ran = 1;
  return r;
}

/* Runs every operation marked with the current pass, each after its
 * dependencies, picking at random among those ready. Linear in the
 * operations and their dependencies (a long queue run at one
 * synchronisation point must stay cheap): each marked operation counts its
 * pending dependencies, and running one releases its dependents. Every
 * pending dependency of a marked operation is marked (mark_closure). */
static CUresult run_marked(void) {
  size_t n = 0, n_edges = 0;
  for (size_t i = 0; i < n_ops; i++)
    if (ops[i]->mark == pass) n++;
  if (!n) return CUDA_SUCCESS;
  fc_op **marked = malloc(n * sizeof *marked), **ready = malloc(n * sizeof *ready), **edges = NULL;
  if (!marked || !ready) {
    free(marked), free(ready);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  n = 0;
  for (size_t i = 0; i < n_ops; i++) {
    fc_op *o = ops[i];
    if (o->mark != pass) continue;
    marked[n++] = o;
    o->waiting = o->n_dependents = o->first_dependent = 0;
    o->ran = 0;
  }
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0; i < marked[k]->n_deps; i++) {
      fc_op *d = find_op(marked[k]->deps[i]);
      if (!d) continue; /* finished */
      marked[k]->waiting++;
      if (d->mark == pass) d->n_dependents++, n_edges++;
    }
  if (n_edges) {
    edges = malloc(n_edges * sizeof *edges);
    if (!edges) {
      free(marked), free(ready);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  size_t at = 0;
  for (size_t k = 0; k < n; k++) {
    marked[k]->first_dependent = at;
    at += marked[k]->n_dependents;
    marked[k]->n_dependents = 0;
  }
  size_t n_ready = 0;
  for (size_t k = 0; k < n; k++) {
    fc_op *o = marked[k];
    for (size_t i = 0; i < o->n_deps; i++) {
      fc_op *d = find_op(o->deps[i]);
      if (d && d->mark == pass) edges[d->first_dependent + d->n_dependents++] = o;
    }
    if (!o->waiting) ready[n_ready++] = o;
  }

  CUresult first = CUDA_SUCCESS;
  size_t done = 0;
  while (n_ready) {
    size_t pick = (size_t)(fc_random() % n_ready);
    fc_op *op = ready[pick];
    ready[pick] = ready[--n_ready];
    CUresult r = run_one(op);
    if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
    done++;
    for (size_t i = 0; i < op->n_dependents; i++) {
      fc_op *o = edges[op->first_dependent + i];
      if (--o->waiting == 0) ready[n_ready++] = o;
    }
  }
  /* Drop what ran, keeping the others in issue order. */
  size_t kept = 0;
  for (size_t i = 0; i < n_ops; i++) {
    if (ops[i]->mark == pass && ops[i]->ran) free_op(ops[i]);
    else ops[kept++] = ops[i];
  }
  n_ops = kept;
  free(marked), free(ready), free(edges);
  /* Cannot happen: dependencies point only to earlier operations, and every
   * pending one of a marked operation is marked. */
  if (done < n && first == CUDA_SUCCESS) first = CUDA_ERROR_UNKNOWN;
  return first;
}

/* Marks seq and everything it depends on. */
static int mark_closure(unsigned long long seq) {
  fc_op *op = find_op(seq);
  if (!op || op->mark == pass) return 0;
  size_t n = 0, cap = 16;
  fc_op **stack = malloc(cap * sizeof *stack);
  if (!stack) return -1;
  op->mark = pass;
  stack[n++] = op;
  while (n) {
    fc_op *o = stack[--n];
    for (size_t i = 0; i < o->n_deps; i++) {
      fc_op *d = find_op(o->deps[i]);
      if (!d || d->mark == pass) continue;
      if (n == cap) {
        fc_op **g = realloc(stack, (cap *= 2) * sizeof *g);
        if (!g) {
          free(stack);
          return -1;
        }
        stack = g;
      }
      d->mark = pass;
      stack[n++] = d;
    }
  }
  free(stack);
  return 0;
}

static CUresult run_until(unsigned long long seq) {
  pass++;
  if (mark_closure(seq) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  return run_marked();
}

/* Every pending operation of ctx (NULL: of all), and what they depend on in
 * other contexts (a cuStreamWaitEvent on another context's event): a real
 * GPU runs that work by itself, the double only at a synchronisation. */
CUresult fc_run_ctx(const struct CUctx_st *ctx) {
  pass++;
  for (size_t i = 0; i < n_ops; i++)
    if ((!ctx || ops[i]->ctx == ctx) && ops[i]->mark != pass && mark_closure(ops[i]->seq) != 0)
      return CUDA_ERROR_OUT_OF_MEMORY;
  return run_marked();
}

/* Runs up to seq; the current context's sticky error, if any. */
CUresult fc_sync_op(unsigned long long seq) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  r = run_until(seq);
  return ctx->sticky ? ctx->sticky : r;
}

/* ----------------------------------------------------------- streams --- */

static CUresult stream_create(CUstream *out, unsigned flags) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  /* CU_STREAM_DEFAULT 0 and CU_STREAM_NON_BLOCKING 1 are the only flags (cuda.h). */
  if (!out || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
  if (grow((void ***)&streams, &cap_streams, n_streams + 1) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = ctx;
  s->flags = flags;
  streams[n_streams++] = s;
  *out = s;
  return CUDA_SUCCESS;
}

/* cuda.h: "In case the device is still doing work in the stream hStream when
 * cuStreamDestroy() is called, the function will return immediately and the
 * resources associated with hStream will be released automatically once the
 * device has completed all work": pending work stays queued (it refers to the
 * stream by seq only). The NULL stream or an unknown handle: 400 [U]. */
static CUresult stream_destroy(CUstream s) {
  size_t i = s ? stream_index(s) : SIZE_MAX;
  if (i == SIZE_MAX) return CUDA_ERROR_INVALID_HANDLE;
  fc_capture_forget_stream(s); /* [U: what the driver does with a capture whose stream goes] */
  free(streams[i]);
  streams[i] = streams[--n_streams];
  return CUDA_SUCCESS;
}

/* The last operation issued on stream s of the current context (the legacy
 * stream for NULL), for a synchronize or a query. */
static CUresult stream_last(CUstream s, unsigned long long *last) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (s == STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
  if (!fc_stream_is_valid(s)) return CUDA_ERROR_INVALID_HANDLE;
  *last = !s || s == STREAM_LEGACY ? ctx->legacy_last : streams[stream_index(s)]->last;
  return CUDA_SUCCESS;
}

/* Waiting for a capturing stream (or for the legacy stream while a blocking
 * stream captures) is refused and invalidates the capture (CUDA Programming
 * Guide, "Prohibited and Unhandled Operations": "It is invalid to
 * synchronize or query the execution status of a stream which is being
 * captured"). */
static CUresult stream_wait_check(CUstream s, const char *call) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  return r != CUDA_SUCCESS ? r : fc_capture_sync_check(s, ctx, 0, call);
}

static CUresult stream_synchronize(CUstream s) {
  unsigned long long last;
  CUresult r = stream_last(s, &last);
  if (r == CUDA_SUCCESS) r = stream_wait_check(s, "cuStreamSynchronize");
  return r != CUDA_SUCCESS ? r : fc_sync_op(last);
}

/* A query is no synchronisation point, but work cannot stay pending forever
 * either: the first query that finds work pending answers NOT_READY and lets
 * the work run, so a caller polling in a loop sees it finish. */
static CUresult stream_query(CUstream s) {
  unsigned long long last;
  CUresult r = stream_last(s, &last);
  if (r == CUDA_SUCCESS) r = stream_wait_check(s, "cuStreamQuery");
  if (r != CUDA_SUCCESS) return r;
  if (!find_op(last)) return CUDA_SUCCESS;
  r = fc_sync_op(last);
  return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_READY;
}

static CUresult ctx_synchronize(void) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  /* "It is also invalid to ... synchronize a broader handle which
   * encompasses an active stream capture, such as a device or context
   * handle" (Programming Guide, as above). */
  r = fc_capture_sync_check(NULL, ctx, 1, "cuCtxSynchronize");
  if (r != CUDA_SUCCESS) return r;
  r = fc_run_ctx(ctx);
  return ctx->sticky ? ctx->sticky : r;
}

/* ------------------------------------------------------------ events --- */

/* Flags: CU_EVENT_DEFAULT 0, BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (cuda.h). */
#define EVENT_DISABLE_TIMING 2u

static CUresult event_create(CUevent *out, unsigned flags) {
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!out || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
  /* cuda.h: INTERPROCESS requires DISABLE_TIMING. */
  if ((flags & 4u) && !(flags & EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  if (grow((void ***)&events, &cap_events, n_events + 1) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->ctx = ctx;
  e->flags = flags;
  e->done = 1; /* an event never recorded counts as complete (cuEventQuery: CUDA_SUCCESS) */
  events[n_events++] = e;
  *out = e;
  return CUDA_SUCCESS;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A record operation names its event and itself: when it runs, the event
 * completes only if this is still its latest record (cuda.h: a later
 * cuEventRecord overwrites what the event captured) and the event still
 * exists (cuEventDestroy with records pending returns at once). */
typedef struct record_op {
  CUevent event;
  unsigned long long seq;
} record_op;

static CUresult record_run(void *payload, char *msg, size_t cap) {
  (void)msg, (void)cap;
  const record_op *rec = payload;
  for (size_t i = 0; i < n_events; i++) {
    struct CUevent_st *e = events[i];
    if (e != rec->event || e->seq != rec->seq) continue;
    e->done = 1;
    e->time_ms = now_ms();
  }
  return CUDA_SUCCESS;
}

/* cuda.h: "hEvent and hStream must be from the same context otherwise
 * CUDA_ERROR_INVALID_HANDLE is returned". The legacy stream (NULL) is the
 * current context's. An event of a context that is not current: 201 [U]. */
static CUresult event_record(CUevent he, CUstream s) {
  struct CUevent_st *e = live_event(he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  struct CUctx_st *ctx;
  CUresult r = fc_current_ctx(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (s == STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
  if (!fc_stream_is_valid(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (fc_stream_ctx(s) != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (e->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT; /* [U] */
  /* Event nodes, cross-stream forks and joins of a capture are not modelled:
   * refused so that a gap shows (README, "Stream capture"). */
  if (fc_capture_status(s) != CU_STREAM_CAPTURE_STATUS_NONE) {
    fc_note_error("cuEventRecord on a capturing stream: event nodes are not modelled by the double");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  record_op *rec = malloc(sizeof *rec);
  if (!rec) return CUDA_ERROR_OUT_OF_MEMORY;
  *rec = (record_op){he, 0};
  unsigned long long seq;
  r = fc_enqueue(s, record_run, free, rec, "cuEventRecord", &seq);
  if (r != CUDA_SUCCESS) return r;
  rec->seq = seq;
  e->seq = seq;
  e->done = 0;
  return CUDA_SUCCESS;
}

static CUresult wait_run(void *payload, char *msg, size_t cap) {
  (void)payload, (void)msg, (void)cap;
  return CUDA_SUCCESS;
}

/* The stream's next work waits for what the event captured: a no-op
 * operation on the stream that depends on the record operation. An event
 * never recorded makes nothing wait. */
static CUresult stream_wait_event(CUstream s, CUevent he, unsigned flags) {
  struct CUevent_st *e = live_event(he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  /* CU_EVENT_WAIT_DEFAULT 0; CU_EVENT_WAIT_EXTERNAL 1 "is invalid outside of
   * stream capture" (cuda.h), which the double does not model. */
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  if (s == STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
  if (fc_capture_status(s) != CU_STREAM_CAPTURE_STATUS_NONE) {
    fc_note_error("cuStreamWaitEvent on a capturing stream: cross-stream capture is not modelled by the double");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  unsigned long long seq;
  CUresult r = fc_enqueue(s, wait_run, NULL, NULL, "cuStreamWaitEvent", &seq);
  if (r != CUDA_SUCCESS || e->done) return r;
  fc_op *op = find_op(seq);
  return op && add_dep(op, e->seq) != 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static CUresult event_synchronize(CUevent he) {
  struct CUevent_st *e = live_event(he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->done) return CUDA_SUCCESS;
  return fc_sync_op(e->seq);
}

static CUresult event_query(CUevent he) {
  struct CUevent_st *e = live_event(he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->done) return CUDA_SUCCESS;
  CUresult r = fc_sync_op(e->seq); /* see stream_query */
  return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_READY;
}

/* cuda.h: NOT_READY when either event has not completed; INVALID_HANDLE when
 * either was made with DISABLE_TIMING or never recorded. */
static CUresult event_elapsed(float *ms, CUevent hs, CUevent he) {
  struct CUevent_st *a = live_event(hs), *b = live_event(he);
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!a || !b || !a->seq || !b->seq || ((a->flags | b->flags) & EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->done || !b->done) return CUDA_ERROR_NOT_READY;
  *ms = (float)(b->time_ms - a->time_ms);
  return CUDA_SUCCESS;
}

/* An event destroyed with records still pending: they run later and find
 * it gone (record_run). */
static CUresult event_destroy(CUevent he) {
  size_t i = 0;
  while (i < n_events && events[i] != he) i++;
  if (i == n_events) return CUDA_ERROR_INVALID_HANDLE;
  free(events[i]);
  events[i] = events[--n_events];
  return CUDA_SUCCESS;
}

/* ----------------------------------------------------------- release --- */

void fc_queue_release(const struct CUctx_st *ctx) {
  for (size_t i = n_ops; i-- > 0;) {
    if (ctx && ops[i]->ctx != ctx) continue;
    free_op(ops[i]);
    memmove(&ops[i], &ops[i + 1], (n_ops - i - 1) * sizeof *ops);
    n_ops--;
  }
  for (size_t i = n_streams; i-- > 0;) {
    if (ctx && streams[i]->ctx != ctx) continue;
    free(streams[i]);
    streams[i] = streams[--n_streams];
  }
  for (size_t i = n_events; i-- > 0;) {
    if (ctx && events[i]->ctx != ctx) continue;
    free(events[i]);
    events[i] = events[--n_events];
  }
  if (!ctx) {
    free(ops), free(streams), free(events);
    ops = NULL, streams = NULL, events = NULL;
    n_ops = cap_ops = n_streams = cap_streams = n_events = cap_events = 0;
    last_error[0] = '\0';
  }
}

/* ----------------------------------------------------------- exports --- */

FC_EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) { FC_CALL(cuStreamCreate, stream_create(s, flags)); }
FC_EXPORT CUresult cuStreamDestroy_v2(CUstream s) { FC_CALL(cuStreamDestroy_v2, stream_destroy(s)); }
/* Same signature as _v2. */
FC_EXPORT CUresult cuStreamDestroy(CUstream s) { FC_CALL(cuStreamDestroy_v2, stream_destroy(s)); }
FC_EXPORT CUresult cuStreamSynchronize(CUstream s) { FC_CALL(cuStreamSynchronize, stream_synchronize(s)); }
FC_EXPORT CUresult cuStreamQuery(CUstream s) { FC_CALL(cuStreamQuery, stream_query(s)); }
FC_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  FC_CALL(cuStreamWaitEvent, stream_wait_event(s, e, flags));
}
FC_EXPORT CUresult cuCtxSynchronize(void) { FC_CALL(cuCtxSynchronize, ctx_synchronize()); }
FC_EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) { FC_CALL(cuEventCreate, event_create(e, flags)); }
FC_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { FC_CALL(cuEventRecord, event_record(e, s)); }
FC_EXPORT CUresult cuEventSynchronize(CUevent e) { FC_CALL(cuEventSynchronize, event_synchronize(e)); }
FC_EXPORT CUresult cuEventQuery(CUevent e) { FC_CALL(cuEventQuery, event_query(e)); }
FC_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
  FC_CALL(cuEventElapsedTime_v2, event_elapsed(ms, a, b));
}
/* Same signature as _v2. */
FC_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  FC_CALL(cuEventElapsedTime_v2, event_elapsed(ms, a, b));
}
FC_EXPORT CUresult cuEventDestroy_v2(CUevent e) { FC_CALL(cuEventDestroy_v2, event_destroy(e)); }
FC_EXPORT CUresult cuEventDestroy(CUevent e) { FC_CALL(cuEventDestroy_v2, event_destroy(e)); }

FC_SAME_TYPE(cuStreamCreate, PFN_cuStreamCreate);
FC_SAME_TYPE(cuStreamDestroy_v2, PFN_cuStreamDestroy);
FC_SAME_TYPE(cuStreamDestroy, PFN_cuStreamDestroy);
FC_SAME_TYPE(cuStreamSynchronize, PFN_cuStreamSynchronize);
FC_SAME_TYPE(cuStreamQuery, PFN_cuStreamQuery);
FC_SAME_TYPE(cuStreamWaitEvent, PFN_cuStreamWaitEvent);
FC_SAME_TYPE(cuCtxSynchronize, PFN_cuCtxSynchronize);
FC_SAME_TYPE(cuEventCreate, PFN_cuEventCreate);
FC_SAME_TYPE(cuEventRecord, PFN_cuEventRecord);
FC_SAME_TYPE(cuEventSynchronize, PFN_cuEventSynchronize);
FC_SAME_TYPE(cuEventQuery, PFN_cuEventQuery);
FC_SAME_TYPE(cuEventElapsedTime_v2, PFN_cuEventElapsedTime);
FC_SAME_TYPE(cuEventElapsedTime, PFN_cuEventElapsedTime);
FC_SAME_TYPE(cuEventDestroy_v2, PFN_cuEventDestroy);
FC_SAME_TYPE(cuEventDestroy, PFN_cuEventDestroy);

/* -------------------------------------------------------- test hooks --- */

FC_EXPORT size_t fakecuda_pending_ops(void) {
  fc_lock_raw();
  size_t n = n_ops;
  fc_leave();
  return n;
}

FC_EXPORT const char *fakecuda_last_error(void) { return last_error; }

FC_SAME_TYPE(fakecuda_pending_ops, fakecuda_size_fn);
FC_SAME_TYPE(fakecuda_last_error, fakecuda_text_fn);
