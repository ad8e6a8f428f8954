/* Loading a kernel module on a device along its plan: cubins directly, PTX
 * through the driver's JIT linker (so the cubin comes back and is cached),
 * sources through NVRTC. */
#ifndef EMBER_RUNTIME_LOAD_H
#define EMBER_RUNTIME_LOAD_H

#include "runtime.h"

/* Tries the plan's viable candidates in order and fills ms->module and
 * ms->record. EM_ERR_USE_CPU when the plan ends on the CPU; EM_ERR_STRICT when
 * EMBER_STRICT=1 refuses a fallback. Caller holds the rt lock. */
em_status em_load_module(em_runtime *rt, em_gpu *g, em_module_state *ms, const em_plan *plan);

/* The CUstream of a stream handle (NULL: the default stream). */
CUstream em_stream_handle(em_stream *s);

#endif
