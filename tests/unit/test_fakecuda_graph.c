/* The test double of libcuda captures streams into graphs and replays them
 * (tests/fakecuda/README.md, "Stream capture and graphs"): what a capture
 * records and when it runs, that a replay reads what the rules say it reads
 * (kernel parameters from the capture, pinned host memory at the replay),
 * the library doubles' work captured with its closure kept, every illegal
 * call refused with the driver's code and the capture invalidated, the
 * three capture modes, and a driver too old to export the entry points.
 * Expected values are computed here, never read back from the double. */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "fake_driver.h"

/* The capture entry points, looked up after the driver version is set
 * (the double exports them only on drivers that have them). */
static struct {
  PFN_cuStreamBeginCapture_v1 Begin1;
  PFN_cuStreamBeginCapture Begin;
  PFN_cuStreamEndCapture End;
  PFN_cuStreamIsCapturing IsCapturing;
  PFN_cuStreamGetCaptureInfo Info;
  PFN_cuGraphInstantiate Instantiate;
  PFN_cuGraphInstantiateWithFlags InstantiateFlags;
  PFN_cuGraphLaunch Launch;
  PFN_cuGraphExecDestroy ExecDestroy;
  PFN_cuGraphDestroy Destroy;
  fakecuda_size_fn live_graphs;
} g;

static void bind_graph_api(void) {
  *(void **)&g.Begin1 = dlsym(fk.handle, "cuStreamBeginCapture");
  *(void **)&g.Begin = dlsym(fk.handle, "cuStreamBeginCapture_v2");
  *(void **)&g.End = dlsym(fk.handle, "cuStreamEndCapture");
  *(void **)&g.IsCapturing = dlsym(fk.handle, "cuStreamIsCapturing");
  *(void **)&g.Info = dlsym(fk.handle, "cuStreamGetCaptureInfo");
  *(void **)&g.Instantiate = dlsym(fk.handle, "cuGraphInstantiate");
  *(void **)&g.InstantiateFlags = dlsym(fk.handle, "cuGraphInstantiateWithFlags");
  *(void **)&g.Launch = dlsym(fk.handle, "cuGraphLaunch");
  *(void **)&g.ExecDestroy = dlsym(fk.handle, "cuGraphExecDestroy");
  *(void **)&g.Destroy = dlsym(fk.handle, "cuGraphDestroy");
  *(void **)&g.live_graphs = dlsym(fk.handle, "fakecuda_live_graphs");
}

/* One fake GPU of CC 7.5 under the default (CUDA 13) driver, its context
 * current, the graph API bound, and fc_test_affine (y = y * a + b). */
static CUfunction setup_affine(void) {
  assert_int_equal(fake_init_with("7.5", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  bind_graph_api();
  assert_non_null(g.Begin);
  const char *ptx = ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry fc_test_affine()\n{\n\tret;\n}\n";
  CUmodule m;
  assert_int_equal(fk.ModuleLoadData(&m, ptx), CUDA_SUCCESS);
  CUfunction f;
  assert_int_equal(fk.ModuleGetFunction(&f, m, "fc_test_affine"), CUDA_SUCCESS);
  return f;
}

static CUresult affine(CUfunction f, CUstream s, CUdeviceptr *y, float *a, float *b, int *n) {
  void *args[] = {y, a, b, n};
  return fk.LaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, NULL);
}

static int status_of(CUstream s) {
  CUstreamCaptureStatus st = -1;
  assert_int_equal(g.IsCapturing(s, &st), CUDA_SUCCESS);
  return st;
}

static int contains(const char *text, const char *part) { return text && strstr(text, part) != NULL; }

#define ASSERT_LAST_ERROR_HAS(part)                                                                              \
  do {                                                                                                           \
    if (!contains(fk.last_error(), part)) fail_msg("last error \"%s\" lacks \"%s\"", fk.last_error(), part); \
  } while (0)

/* ------------------------------------------------------------ replay --- */

/* A captured pinned copy in, a kernel and a pinned copy out: nothing runs
 * while capturing; each launch runs them again in order on the launch
 * stream; the kernel's parameters are those of the capture, the pinned
 * input is read at each replay; cuLaunchKernel is not called again. */
static void capture_records_and_replays(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = setup_affine();
  enum { N = 64 };
  float *in, *out;
  assert_int_equal(fk.MemHostAlloc((void **)&in, N * sizeof *in, 0), CUDA_SUCCESS);
  assert_int_equal(fk.MemHostAlloc((void **)&out, N * sizeof *out, 0), CUDA_SUCCESS);
  CUdeviceptr y;
  assert_int_equal(fk.MemAlloc(&y, N * sizeof(float)), CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 1), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) in[i] = (float)i, out[i] = -1.0f;

  float a = 2.0f, b = 1.0f;
  int n = N;
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  unsigned long launches = fk.call_count("cuLaunchKernel");
  assert_int_equal(fk.MemcpyHtoDAsync(y, in, N * sizeof(float), s), CUDA_SUCCESS);
  assert_int_equal(affine(f, s, &y, &a, &b, &n), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyDtoHAsync(out, y, N * sizeof(float), s), CUDA_SUCCESS);
  assert_int_equal(fk.pending_ops(), 0); /* recorded, not issued */
  CUgraph graph = NULL;
  assert_int_equal(g.End(s, &graph), CUDA_SUCCESS);
  assert_non_null(graph);
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  assert_true(out[0] == -1.0f); /* the capture ran nothing */

  CUgraphExec exec = NULL;
  char log[64] = "x";
  assert_int_equal(g.Instantiate(&exec, graph, NULL, log, sizeof log), CUDA_SUCCESS);
  assert_string_equal(log, "");
  a = 100.0f; /* parameters were copied at the capture */
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) in[i] = (float)(i + round); /* read at the replay */
    assert_int_equal(g.Launch(exec, s), CUDA_SUCCESS);
    assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
    for (int i = 0; i < N; i++) {
      float want = (float)(i + round) * 2.0f + 1.0f;
      if (out[i] != want) fail_msg("round %d, element %d: %g, want %g", round, i, (double)out[i], (double)want);
    }
  }
  assert_int_equal(fk.call_count("cuLaunchKernel"), launches + 1);
  assert_int_equal(fk.call_count("cuGraphLaunch"), 3);

  /* Two launches queued, then the executable graph destroyed: in-flight
   * launches complete (cuGraphExecDestroy). The kernel then runs twice on
   * what the copy brought in. */
  for (int i = 0; i < N; i++) in[i] = 1.0f;
  assert_int_equal(g.Launch(exec, s), CUDA_SUCCESS);
  assert_int_equal(g.Launch(exec, s), CUDA_SUCCESS);
  assert_int_equal(g.ExecDestroy(exec), CUDA_SUCCESS);
  assert_int_equal(g.Destroy(graph), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  assert_true(out[5] == 3.0f);
  assert_int_equal(g.live_graphs(), 0);
  assert_int_equal(g.Launch(exec, s), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(g.ExecDestroy(exec), CUDA_ERROR_INVALID_VALUE);

  /* The pinned input freed while a graph still reads it: the replay faults. */
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(fk.MemcpyHtoDAsync(y, in, N * sizeof(float), s), CUDA_SUCCESS);
  assert_int_equal(g.End(s, &graph), CUDA_SUCCESS);
  assert_int_equal(g.Instantiate(&exec, graph, NULL, NULL, 0), CUDA_SUCCESS);
  assert_int_equal(g.Destroy(graph), CUDA_SUCCESS); /* the executable graph keeps its nodes */
  assert_int_equal(fk.MemFreeHost(in), CUDA_SUCCESS);
  assert_int_equal(g.Launch(exec, s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_LAST_ERROR_HAS("pinned host memory was freed");
}

typedef struct lib_work {
  CUdeviceptr p;
  int ran, released;
} lib_work;

static fakecuda_device_span_fn lib_span;

/* Adds 1 to the first byte: a replay that runs it twice shows 2. */
static CUresult lib_work_run(void *payload, char *msg, size_t cap) {
  lib_work *w = payload;
  unsigned char *host = NULL;
  w->ran++;
  CUresult r = lib_span(w->p, 1, (void **)&host, msg, cap);
  if (r == CUDA_SUCCESS) host[0]++;
  return r;
}

static void lib_work_release(void *payload) { ((lib_work *)payload)->released++; }

/* Work of the cuBLAS / cuDNN doubles is captured like a launch; its payload
 * lives as long as the graph or an executable graph made from it. */
static void library_work_is_captured(void **state) {
  (void)state;
  FAKE_NEED();
  fakecuda_enqueue_work_fn enqueue = (fakecuda_enqueue_work_fn)dlsym(fk.handle, "fakecuda_enqueue_work");
  lib_span = (fakecuda_device_span_fn)dlsym(fk.handle, "fakecuda_device_span");
  assert_non_null(enqueue);
  setup_affine();
  CUdeviceptr p;
  assert_int_equal(fk.MemAlloc(&p, 16), CUDA_SUCCESS);
  assert_int_equal(fk.MemsetD8(p, 0, 16), CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  lib_work w = {p, 0, 0};
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  assert_int_equal(enqueue(s, lib_work_run, lib_work_release, &w, "library work"), CUDA_SUCCESS);
  CUgraph graph;
  assert_int_equal(g.End(s, &graph), CUDA_SUCCESS);
  CUgraphExec exec;
  assert_int_equal(g.InstantiateFlags(&exec, graph, 0), CUDA_SUCCESS);
  assert_int_equal(g.Launch(exec, s), CUDA_SUCCESS);
  assert_int_equal(g.Launch(exec, s), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(w.ran, 2);
  unsigned char got = 0;
  assert_int_equal(fk.MemcpyDtoH(&got, p, 1), CUDA_SUCCESS);
  assert_int_equal(got, 2);
  assert_int_equal(g.Destroy(graph), CUDA_SUCCESS);
  assert_int_equal(w.released, 0); /* the executable graph still holds it */
  assert_int_equal(g.ExecDestroy(exec), CUDA_SUCCESS);
  assert_int_equal(w.released, 1);
  /* Flags are not modelled: refused with a message rather than ignored. */
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(g.End(s, &graph), CUDA_SUCCESS);
  assert_int_equal(g.InstantiateFlags(&exec, graph, 1), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_LAST_ERROR_HAS("not modelled");
  assert_int_equal(g.Destroy(graph), CUDA_SUCCESS);
}

/* ------------------------------------------------------ illegal calls --- */

enum {
  SYNC_STREAM,
  QUERY_STREAM,
  SYNC_CTX,
  SYNC_COPY_TO_HOST,
  SYNC_COPY_TO_DEVICE,
  SYNC_MEMSET,
  LAUNCH_ON_LEGACY,
  MEM_ALLOC,
  MEM_FREE,
  PAGEABLE_TO_DEVICE,
  PAGEABLE_TO_HOST,
  N_ILLEGAL
};

static const char *const illegal_name[N_ILLEGAL] = {
    "cuStreamSynchronize", "cuStreamQuery",   "cuCtxSynchronize", "cuMemcpyDtoH",      "cuMemcpyHtoD",      "cuMemsetD8",
    "legacy launch",       "cuMemAlloc",      "cuMemFree",        "pageable HtoDAsync", "pageable DtoHAsync",
};

/* Each call that stream capture forbids, on a blocking stream capturing in
 * GLOBAL mode: refused with its code, the capture invalidated, every later
 * operation on the stream CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, the end a
 * NULL graph with that code, and the stream usable again afterwards. */
static void illegal_calls_invalidate_the_capture(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = setup_affine();
  CUdeviceptr y, spare;
  assert_int_equal(fk.MemAlloc(&y, 64 * sizeof(float)), CUDA_SUCCESS);
  float host[64] = {0}, a = 1.0f, b = 0.0f;
  int n = 64;
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  for (int k = 0; k < N_ILLEGAL; k++) {
    assert_int_equal(fk.MemAlloc(&spare, 256), CUDA_SUCCESS);
    assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    assert_int_equal(affine(f, s, &y, &a, &b, &n), CUDA_SUCCESS);
    CUresult r = CUDA_SUCCESS, want = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUdeviceptr p = 0;
    switch (k) {
    case SYNC_STREAM: r = fk.StreamSynchronize(s); break;
    case QUERY_STREAM: r = fk.StreamQuery(s); break;
    case SYNC_CTX: r = fk.CtxSynchronize(); break;
    case SYNC_COPY_TO_HOST: r = fk.MemcpyDtoH(host, y, sizeof host), want = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; break;
    case SYNC_COPY_TO_DEVICE: r = fk.MemcpyHtoD(y, host, sizeof host), want = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; break;
    case SYNC_MEMSET: r = fk.MemsetD8(y, 0, 4), want = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; break;
    case LAUNCH_ON_LEGACY: r = affine(f, NULL, &y, &a, &b, &n), want = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; break;
    case MEM_ALLOC: r = fk.MemAlloc(&p, 256); break;
    case MEM_FREE: r = fk.MemFree(spare); break;
    case PAGEABLE_TO_DEVICE: r = fk.MemcpyHtoDAsync(y, host, sizeof host, s); break;
    case PAGEABLE_TO_HOST: r = fk.MemcpyDtoHAsync(host, y, sizeof host, s); break;
    }
    if (r != want) fail_msg("%s during capture: %d, want %d", illegal_name[k], r, want);
    assert_int_equal(p, 0);
    assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    assert_int_equal(affine(f, s, &y, &a, &b, &n), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUgraph graph = (CUgraph)1;
    assert_int_equal(g.End(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    assert_null(graph);
    assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);
    assert_int_equal(affine(f, s, &y, &a, &b, &n), CUDA_SUCCESS);
    assert_int_equal(fk.StreamSynchronize(s), CUDA_SUCCESS);
    assert_int_equal(fk.MemFree(spare), CUDA_SUCCESS); /* a refused free left it allocated */
  }
  assert_int_equal(g.live_graphs(), 0);
}

/* The beginning and the end, and what stays legal. */
static void begin_and_end_rules(void **state) {
  (void)state;
  FAKE_NEED();
  CUfunction f = setup_affine();
  CUstream s, quiet;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(fk.StreamCreate(&quiet, 1), CUDA_SUCCESS); /* CU_STREAM_NON_BLOCKING */
  CUgraph graph;
  assert_int_equal(g.Begin(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(g.Begin(s, 3), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(g.End(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  CUstreamCaptureStatus st;
  cuuint64_t id1 = 0, id2 = 0;
  assert_int_equal(g.Info(s, &st, &id1), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  /* The legacy stream's status is refused, and that does not invalidate. */
  assert_int_equal(g.IsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  /* Events and cross-stream capture are not modelled: refused, capture kept. */
  CUevent e;
  assert_int_equal(fk.EventCreate(&e, 0), CUDA_SUCCESS);
  assert_int_equal(fk.EventRecord(e, s), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_LAST_ERROR_HAS("not modelled");
  assert_int_equal(g.End(s, &graph), CUDA_SUCCESS);
  assert_int_equal(g.Destroy(graph), CUDA_SUCCESS);
  assert_int_equal(g.Destroy(graph), CUDA_ERROR_INVALID_VALUE);

  /* A non-blocking stream's capture leaves the legacy stream usable. */
  CUdeviceptr y;
  assert_int_equal(fk.MemAlloc(&y, 256), CUDA_SUCCESS);
  float host[64] = {0}, a = 1.0f, b = 0.0f;
  int n = 64;
  assert_int_equal(g.Begin(quiet, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(g.Info(quiet, &st, &id2), CUDA_SUCCESS);
  assert_true(id2 != id1 && id2 != 0);
  assert_int_equal(fk.MemcpyHtoD(y, host, sizeof host), CUDA_SUCCESS);
  assert_int_equal(affine(f, NULL, &y, &a, &b, &n), CUDA_SUCCESS);
  assert_int_equal(fk.StreamSynchronize(NULL), CUDA_SUCCESS);
  assert_int_equal(status_of(quiet), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  /* A graph cannot be launched into a capturing stream here (child graphs). */
  assert_int_equal(g.End(quiet, &graph), CUDA_SUCCESS);
  CUgraphExec exec;
  assert_int_equal(g.Instantiate(&exec, graph, NULL, NULL, 0), CUDA_SUCCESS);
  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(g.Launch(exec, s), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(g.End(s, &graph), CUDA_SUCCESS);
  /* A stream destroyed while capturing takes its capture with it. */
  assert_int_equal(g.Begin(quiet, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(fk.StreamDestroy(quiet), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&y, 256), CUDA_SUCCESS); /* no capture forbids it any more */
}

typedef struct other_thread {
  CUcontext ctx;
  CUstream s;
  int do_end;
  CUresult r;
  CUdeviceptr p;
} other_thread;

static void *other_main(void *arg) {
  other_thread *t = arg;
  if (fk.CtxPushCurrent(t->ctx) != CUDA_SUCCESS) return NULL;
  if (t->do_end) {
    CUgraph graph = NULL;
    t->r = g.End(t->s, &graph);
    if (graph) g.Destroy(graph);
  } else {
    t->r = fk.MemAlloc(&t->p, 256);
  }
  CUcontext popped;
  fk.CtxPopCurrent(&popped);
  return NULL;
}

static CUresult in_other_thread(CUcontext ctx, CUstream s, int do_end) {
  other_thread t = {ctx, s, do_end, -1, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, other_main, &t), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  return t.r;
}

/* GLOBAL forbids unsafe calls from every thread of the context, THREAD_LOCAL
 * only from the capturing thread, RELAXED from none; the end of a capture
 * that is not RELAXED must come from its own thread. */
static void capture_modes(void **state) {
  (void)state;
  FAKE_NEED();
  setup_affine();
  CUcontext ctx;
  assert_int_equal(fk.CtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(fk.StreamCreate(&s, 0), CUDA_SUCCESS);
  CUdeviceptr p;

  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  assert_int_equal(fk.MemAlloc(&p, 256), CUDA_SUCCESS);
  assert_int_equal(fk.MemFree(p), CUDA_SUCCESS);
  assert_int_equal(in_other_thread(ctx, s, 0), CUDA_SUCCESS);
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_int_equal(in_other_thread(ctx, s, 1), CUDA_SUCCESS); /* RELAXED: any thread may end it */
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);

  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  assert_int_equal(in_other_thread(ctx, s, 0), CUDA_SUCCESS);
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_int_equal(in_other_thread(ctx, s, 1), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE); /* still capturing */
  assert_int_equal(fk.MemAlloc(&p, 256), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph;
  assert_int_equal(g.End(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  assert_int_equal(g.Begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(in_other_thread(ctx, s, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_LAST_ERROR_HAS("cuMemAlloc is potentially unsafe");
  assert_int_equal(status_of(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(g.End(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  /* The CUDA 10.0 entry point has no mode: GLOBAL. */
  assert_int_equal(g.Begin1(s), CUDA_SUCCESS);
  assert_int_equal(in_other_thread(ctx, s, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(g.End(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_int_equal(fk.call_count("cuStreamBeginCapture"), fk.call_count("cuStreamBeginCapture_v2"));
}

/* ------------------------------------------------------- old drivers --- */

/* A driver exports an entry point only from the release that introduced
 * it: CUDA 9.2 has no capture at all, 10.0 the mode-less begin and no
 * capture info, 11.4 the first cuGraphInstantiateWithFlags. */
static void old_drivers_lack_the_entry_points(void **state) {
  (void)state;
  FAKE_NEED();
  static const struct {
    const char *driver;
    int begin1, begin2, info, instantiate, with_flags;
  } rows[] = {
      {"9020", 0, 0, 0, 0, 0},
      {"10000", 1, 0, 0, 1, 0},
      {"10010", 1, 1, 1, 1, 0},
      {"11030", 1, 1, 1, 1, 0},
      {"11040", 1, 1, 1, 1, 1},
      {"13000", 1, 1, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    fake_set("FAKECUDA_DRIVER", rows[i].driver);
    bind_graph_api();
    if ((g.Begin1 != NULL) != rows[i].begin1 || (g.Begin != NULL) != rows[i].begin2 || (g.Info != NULL) != rows[i].info ||
        (g.Instantiate != NULL) != rows[i].instantiate || (g.Launch != NULL) != rows[i].instantiate ||
        (g.End != NULL) != rows[i].instantiate || (g.InstantiateFlags != NULL) != rows[i].with_flags)
      fail_msg("driver %s exports the wrong capture entry points", rows[i].driver);
  }
  fake_set("FAKECUDA_DRIVER", NULL);
  assert_int_equal(fake_init_with("7.5", "9020"), CUDA_SUCCESS); /* everything else still works */
  assert_null(dlsym(fk.handle, "cuGraphLaunch"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(capture_records_and_replays, fake_test_setup),
      cmocka_unit_test_setup(library_work_is_captured, fake_test_setup),
      cmocka_unit_test_setup(illegal_calls_invalidate_the_capture, fake_test_setup),
      cmocka_unit_test_setup(begin_and_end_rules, fake_test_setup),
      cmocka_unit_test_setup(capture_modes, fake_test_setup),
      cmocka_unit_test_setup(old_drivers_lack_the_entry_points, fake_test_setup),
  };
  return cmocka_run_group_tests(tests, fake_group_setup, fake_group_teardown);
}
