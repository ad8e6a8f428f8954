/* Work of the fake libcudnn on a stream (fakecuda_enqueue_work): every
 * payload starts with an fd_work, and its run function reaches device
 * memory only through the span function recorded in it at issue time, so
 * work still pending when the last handle goes (and the driver binding with
 * it) runs as it would on a GPU. Run functions run under the libcuda
 * double's lock: they must not take the cuDNN double's lock, nor call
 * anything of the driver but the span function. */
#ifndef FAKECUDNN_WORK_H
#define FAKECUDNN_WORK_H

#include "fakecudnn_internal.h"

typedef struct fd_work {
  fakecuda_device_span_fn span;
  char op[64]; /* the entry point that issued it */
} fd_work;

/* A zeroed payload of `size` bytes (a struct that starts with fd_work),
 * named after the entry point op; NULL when out of memory. */
void *fd_work_alloc(size_t size, const char *op);

/* Issues the payload on the handle's stream: run does it when the queue
 * gets there, and the payload is freed after (also when issuing fails). A
 * refusal (a faulted context, a stale stream) is
 * EXECUTION_FAILED_CUDA_DRIVER [U]. */
cudnnStatus_t fd_issue(fd_handle h, fakecuda_work_fn run, fd_work *payload);

/* Inside a run function: the host bytes behind v (its exact extent) or
 * behind [p, p + bytes), checked by fakecuda_device_span. A failure writes
 * "<op>: operand <name>: <why>" into msg and fails the work. */
CUresult fd_view_span(const fd_work *w, fd_view *v, const char *name, char *msg, size_t cap);
CUresult fd_bytes_span(const fd_work *w, CUdeviceptr p, size_t bytes, void **host, const char *name, char *msg,
                       size_t cap);

#endif
