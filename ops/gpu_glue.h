/* Launch glue shared by the ops that run Ember's own kernels: the graph ops'
 * gpu members (ops/<family>_gpu.c) and the public primitives (primitives.c,
 * math_map.c). One naming chain: the op `exp` (ops/unary.c) runs the kernel
 * `em_unary_f32` of kernels/unary.cu through ops/unary_gpu.c. */
#ifndef EMBER_OPS_GPU_GLUE_H
#define EMBER_OPS_GPU_GLUE_H

#include <stddef.h>
#include "ember.h"
#include "../engine/op.h"

#define EM_OPS_BLOCK 256

/* Blocks for a grid-stride kernel over n elements (65535: every CC's x limit). */
unsigned em_ops_grid_1d(size_t n);

/* The elementwise kernels of kernels/unary.cu, binary.cu and core.cu take
 * tiles of EM_OPS_WIDE * EM_OPS_BLOCK contiguous elements, each thread
 * EM_OPS_WIDE of them with all its loads in flight together. Blocks for n
 * elements on a->dev: one tile each, up to EM_OPS_WAVES_PER_SM blocks per
 * multiprocessor (at most 8 blocks of 256 threads are resident on one, so
 * that is 8 or more full waves: the last, partial one costs little), past
 * which each block takes several tiles. Only speed depends on it. */
#define EM_OPS_WIDE 4
#define EM_OPS_WAVES_PER_SM 64
unsigned em_ops_grid_wide(const em_op_args *a, size_t n);
/* em_ops_launch_1d for those kernels (block EM_OPS_BLOCK, grid em_ops_grid_wide). */
em_status em_ops_launch_wide(const em_op_args *a, const char *kernel, size_t n, void **args);

/* A gpu member's launch of `kernel` on a->dev and a->stream. Returns
 * EM_ERR_USE_CPU, untouched, when the device's plan for the kernel's module is
 * the CPU (the executor then runs the op's cpu member on host copies); any
 * other failure names the op and the kernel. */
em_status em_ops_launch(const em_op_args *a, const char *kernel, em_dim3 grid, em_dim3 block, size_t shared_bytes,
                        void **args);
/* The same with a 1-D grid-stride launch over n elements (nothing when n is 0). */
em_status em_ops_launch_1d(const em_op_args *a, const char *kernel, size_t n, void **args);

/* Device scratch memory for one op's temporaries (partial sums, index maps),
 * from the device's caching allocator. Free it with em_ops_scratch_free as
 * soon as the kernels are launched: everything an executor launches goes to
 * one stream, so a block freed here is reused only by later work on it. */
em_status em_ops_scratch(const em_op_args *a, size_t bytes, void **ptr);
void em_ops_scratch_free(const em_op_args *a, void *ptr);
/* Scratch holding a copy of `bytes` host bytes (a table of device addresses
 * and sizes that a multi-tensor kernel reads: kernels/em_kernel.h
 * EM_DEVICE_ADDR), copied by one h2d copy on a->stream, ordered before the
 * kernels launched after it. The host bytes may be freed as soon as it
 * returns: the driver takes pageable memory at the call (staging it).
 * Free it with em_ops_scratch_free once the kernels that read it are
 * launched. Under a CUDA graph's capture the bytes go through a->staging
 * (op.h's em_op_staging): a caller must upload only bytes fixed for the
 * graph, and say why its table is in a comment. */
em_status em_ops_scratch_upload(const em_op_args *a, const void *host, size_t bytes, void **ptr);

/* Whether `kernel` will run on a->dev: EM_OK, or EM_ERR_USE_CPU untouched
 * when the device's plan for its module is the CPU (as em_ops_launch would
 * return), or the failure. For a gpu member that prepares device memory
 * for the launch (em_ops_scratch_upload) only when the launch will happen. */
em_status em_ops_kernel_ready(const em_op_args *a, const char *kernel);

/* Whether a library's answer s (cuDNN, cuBLAS) DECLINED the work: EM_ERR_UNSUPPORTED, meaning
 * this release or this GPU does not support the case and nothing was written. Then 1, with the
 * library's message reported as the road "Ember's kernels: <why>" and the error cleared, and
 * the gpu member continues with Ember's kernels; 0 for success or a real failure (returned). */
int em_ops_declined(const em_op_args *a, em_status s);

/* The f32 road of a half application in an EM_HALF_GPU_NATIVE op's gpu member, where its
 * library (cuBLAS, cuDNN) does not take it: em_half_via_f32 with k (the member itself, which
 * sees f32 then), and in fast mode the road reported as "f16 on f32 copies (why): <the f32
 * road>". Portable mode reports nothing, as for every op. */
em_status em_ops_half_via_f32(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel k,
                              const char *why);

/* Up to EM_OPS_MAX_DIMS dims of an elementwise op's output, with each
 * operand's strides in elements (0 on a broadcast axis), coalesced: adjacent
 * axes that are contiguous for every operand merge, size-1 axes go. A kernel
 * takes the dims and strides as scalars (kernels/README: no arrays). */
#define EM_OPS_MAX_DIMS 6
typedef struct em_ops_index_map {
  int ndim;                          /* after coalescing, 1 ... EM_OPS_MAX_DIMS */
  long long dims[EM_OPS_MAX_DIMS];   /* padded with 1 at the front to EM_OPS_MAX_DIMS */
  long long strides[3][EM_OPS_MAX_DIMS];
  long long numel;
} em_ops_index_map;
/* Fills m for an output of shape out from up to 3 operands (numpy
 * broadcasting: in[k] has at most out's rank, aligned at the end). Fails
 * (EM_ERR_USE_CPU) when more than EM_OPS_MAX_DIMS axes remain. */
em_status em_ops_index_map_make(const em_shape *out, const em_shape *in, int n_in, em_ops_index_map *m);

/* One device buffer the twin needs on the host. */
typedef struct em_host_copy {
  void *host;          /* filled in */
  const void *dev;
  size_t bytes;
  int copy_in;         /* the twin reads it: copy it to the host first */
  int write_back;      /* the twin writes it: copy it back afterwards */
} em_host_copy;

/* For the public primitives: waits for the stream, copies the buffers in,
 * runs run(arg), copies the written ones back, frees the host copies. */
em_status em_ops_on_host_copies(em_device dev, em_host_copy *c, int n, em_stream *s, void (*run)(void *), void *arg);

#endif
