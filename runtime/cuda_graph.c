/* CUDA graphs: stream capture, instantiation, replay (cuda_graph.h).
 *
 * Version facts (cuda.h of each release; the driver exports an entry point
 * from the release that introduced it): stream capture and graphs arrived in
 * CUDA 10.0 (cuStreamBeginCapture without a mode, cuStreamEndCapture,
 * cuGraphInstantiate with an error node and a log, cuGraphLaunch,
 * cuGraphExecDestroy, cuGraphDestroy); CUDA 10.1 added capture modes
 * (cuStreamBeginCapture_v2); CUDA 11.4 cuGraphInstantiateWithFlags, which
 * CUDA 12.0's cuda.h maps cuGraphInstantiate to. The 5-argument symbol stays
 * exported with its ABI, so Ember calls it when the flags form is absent. */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_graph.h"
#include "load.h"
#include "runtime.h"

struct em_cuda_graph {
  em_device dev;
  CUgraph graph;
  CUgraphExec exec;
};

/* "CUDA 9.2" from 9020. */
static void version_text(int v, char *out, size_t cap) { snprintf(out, cap, "CUDA %d.%d", v / 1000, (v % 1000) / 10); }

int em_cuda_graph_supported(em_device dev, char *why, size_t cap) {
  if (dev.kind != EM_DEVICE_CUDA) {
    snprintf(why, cap, "CUDA graphs need a CUDA device (this one is the CPU)");
    return 0;
  }
  em_runtime *rt = em_rt();
  em_gpu *g;
  if (!rt || em_rt_gpu(dev, &g) != EM_OK) {
    snprintf(why, cap, "CUDA device %d is not usable: %s", dev.ordinal, rt ? rt->driver.message : "no runtime");
    return 0;
  }
  const em_cuda_api *cu = &rt->cu;
  char ver[32];
  version_text(rt->driver.driver_version, ver, sizeof ver);
  const char *missing = !cu->cuStreamBeginCapture && !cu->cuStreamBeginCapture_v1 ? "cuStreamBeginCapture"
                        : !cu->cuStreamEndCapture                                  ? "cuStreamEndCapture"
                        : !cu->cuGraphInstantiate && !cu->cuGraphInstantiateWithFlags ? "cuGraphInstantiate"
                        : !cu->cuGraphLaunch                                       ? "cuGraphLaunch"
                        : !cu->cuGraphExecDestroy                                  ? "cuGraphExecDestroy"
                        : !cu->cuGraphDestroy                                      ? "cuGraphDestroy"
                                                                                   : NULL;
  if (missing) {
    snprintf(why, cap,
             "the driver (%s) has no stream capture: %s needs CUDA 10.0 (an R410 driver) or newer. Fix: update the "
             "NVIDIA driver; until then runs stay eager",
             ver, missing);
    return 0;
  }
  /* CUDA 10.0's capture has no mode: it is GLOBAL, which forbids every
   * other thread's "potentially unsafe" calls (cuMemAlloc, cuMemFree) in
   * the context while it runs (cuThreadExchangeStreamCaptureMode): one
   * executor capturing would fail another thread's allocations. Ember
   * captures only where it can say THREAD_LOCAL (cuStreamBeginCapture_v2). */
  if (!cu->cuStreamBeginCapture) {
    snprintf(why, cap,
             "the driver (%s) captures only in GLOBAL mode, which would fail other threads' allocations during a "
             "capture: CUDA graphs need cuStreamBeginCapture_v2 (capture modes, CUDA 10.1) or newer. Fix: update the "
             "NVIDIA driver; until then runs stay eager",
             ver);
    return 0;
  }
  if (why && cap) why[0] = '\0';
  return 1;
}

/* The device's context current for the call; the caller leaves. */
static em_status enter(em_device dev, em_gpu **g) {
  em_status st = em_rt_gpu(dev, g);
  return st ? st : em_gpu_enter(*g);
}

em_status em_cuda_graph_begin(em_device dev, em_stream *s) {
  char why[256];
  if (!em_cuda_graph_supported(dev, why, sizeof why)) return em_fail(EM_ERR_UNSUPPORTED, "em_cuda_graph_begin: %s", why);
  CUstream h = em_stream_handle(s);
  if (!h)
    return em_fail(EM_ERR_INVALID_ARGUMENT,
                   "em_cuda_graph_begin: the legacy default stream cannot be captured (cuStreamBeginCapture refuses "
                   "it); capture a stream made by em_stream_create");
  em_gpu *g;
  em_status st = enter(dev, &g);
  if (st) return st;
  const em_cuda_api *cu = &em_rt()->cu;
  CUresult r;
  const char *call;
  call = "cuStreamBeginCapture_v2"; /* supported: the mode form exists */
  r = cu->cuStreamBeginCapture(h, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  em_gpu_leave(g);
  return r ? em_cuda_fail(r, call, "CUDA device %d", dev.ordinal) : EM_OK;
}

em_status em_cuda_graph_end(em_device dev, em_stream *s, em_cuda_graph **out) {
  if (!out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cuda_graph_end: out is NULL");
  *out = NULL;
  CUstream h = em_stream_handle(s);
  if (!h) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cuda_graph_end: no capture runs on the legacy default stream");
  em_gpu *g;
  em_status st = enter(dev, &g);
  if (st) return st;
  const em_cuda_api *cu = &em_rt()->cu;
  CUgraph graph = NULL;
  CUresult r = cu->cuStreamEndCapture(h, &graph);
  if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
    em_gpu_leave(g);
    if (graph) cu->cuGraphDestroy(graph);
    return em_fail(EM_ERR_UNSUPPORTED,
                   "CUDA device %d: the capture was invalidated by a call that stream capture forbids (a "
                   "synchronisation, a synchronous or pageable copy, an allocation or free): cuStreamEndCapture "
                   "returned CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)",
                   dev.ordinal);
  }
  if (r) {
    em_gpu_leave(g);
    return em_cuda_fail(r, "cuStreamEndCapture", "CUDA device %d", dev.ordinal);
  }
  CUgraphExec exec = NULL;
  char log[256] = "";
  const char *call = cu->cuGraphInstantiateWithFlags ? "cuGraphInstantiateWithFlags" : "cuGraphInstantiate";
  r = cu->cuGraphInstantiateWithFlags ? cu->cuGraphInstantiateWithFlags(&exec, graph, 0)
                                      : cu->cuGraphInstantiate(&exec, graph, NULL, log, sizeof log);
  if (r) {
    cu->cuGraphDestroy(graph);
    em_gpu_leave(g);
    return em_cuda_fail(r, call, "CUDA device %d%s%s", dev.ordinal, log[0] ? ": " : "", log);
  }
  em_cuda_graph *cg = calloc(1, sizeof *cg);
  if (!cg) {
    cu->cuGraphExecDestroy(exec);
    cu->cuGraphDestroy(graph);
    em_gpu_leave(g);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a CUDA graph");
  }
  em_gpu_leave(g);
  *cg = (em_cuda_graph){dev, graph, exec};
  *out = cg;
  return EM_OK;
}

int em_cuda_graph_capturing(em_device dev, em_stream *s) {
  CUstream h = em_stream_handle(s);
  em_gpu *g;
  if (!h || !em_rt() || !em_rt()->cu.cuStreamIsCapturing || enter(dev, &g)) return -1;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = em_rt()->cu.cuStreamIsCapturing(h, &st);
  em_gpu_leave(g);
  if (r) return -1;
  return st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? 1 : st == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : -1;
}

em_status em_cuda_graph_launch(em_cuda_graph *cg, em_stream *s) {
  if (!cg) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_cuda_graph_launch: no graph");
  em_gpu *g;
  em_status st = enter(cg->dev, &g);
  if (st) return st;
  CUresult r = em_rt()->cu.cuGraphLaunch(cg->exec, em_stream_handle(s));
  em_gpu_leave(g);
  return r ? em_cuda_fail(r, "cuGraphLaunch", "CUDA device %d", cg->dev.ordinal) : EM_OK;
}

void em_cuda_graph_free(em_cuda_graph *cg) {
  if (!cg) return;
  em_gpu *g;
  if (enter(cg->dev, &g) == EM_OK) {
    const em_cuda_api *cu = &em_rt()->cu;
    cu->cuGraphExecDestroy(cg->exec);
    cu->cuGraphDestroy(cg->graph);
    em_gpu_leave(g);
  }
  free(cg);
}

em_status em_cuda_graph_host_alloc(em_device dev, size_t bytes, void **out) {
  *out = NULL;
  em_gpu *g;
  em_status st = enter(dev, &g);
  if (st) return st;
  const em_cuda_api *cu = &em_rt()->cu;
  if (!cu->cuMemHostAlloc || !cu->cuMemFreeHost) {
    em_gpu_leave(g);
    return em_fail(EM_ERR_UNSUPPORTED, "the driver lacks cuMemHostAlloc / cuMemFreeHost (pinned memory for a CUDA "
                                       "graph's uploads)");
  }
  CUresult r = cu->cuMemHostAlloc(out, bytes ? bytes : 1, 0);
  em_gpu_leave(g);
  if (r) {
    *out = NULL;
    return em_cuda_fail(r, "cuMemHostAlloc", "%zu bytes of pinned memory for a CUDA graph on device %d", bytes,
                        dev.ordinal);
  }
  return EM_OK;
}

void em_cuda_graph_host_free(em_device dev, void *p) {
  em_gpu *g;
  if (!p || enter(dev, &g)) return;
  em_rt()->cu.cuMemFreeHost(p);
  em_gpu_leave(g);
}
