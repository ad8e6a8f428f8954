/* cuDNN for the fast mode: the library loaded once per process, one handle
 * per device, the decision whether a device may use it (with the reason),
 * and convolutions with their algorithm chosen once per problem and
 * remembered in memory and on disk (cudnn.c). Ops call em_cudnn_conv
 * (ops/conv_gpu.c); portable mode never comes here. */
#ifndef EMBER_RUNTIME_CUDNN_H
#define EMBER_RUNTIME_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include "ember/runtime.h"
#include "ember/tensor.h"

/* A convolution in NCHW (NCDHW) memory, 1 to 3 spatial axes, cross-
 * correlation (what every framework calls convolution), symmetric padding. */
typedef struct em_cudnn_geom {
  em_dtype dt;              /* EM_F32, EM_F64, or EM_F16 / EM_BF16 (f32 accumulation on tensor cores) */
  int nd;                   /* spatial axes, 1..3 */
  int64_t n, ci, co, groups;
  int64_t img[3], out[3], k[3], stride[3], dil[3], pad[3];
} em_cudnn_geom;

typedef enum em_cudnn_dir {
  EM_CUDNN_FWD = 0,         /* y = conv(x, w) */
  EM_CUDNN_BWD_DATA = 1,    /* dx = conv^T(dy, w) */
  EM_CUDNN_BWD_FILTER = 2,  /* dw = corr(x, dy) */
} em_cudnn_dir;

/* Whether convolutions of dtype dt on dev go through cuDNN: 1, or 0 with the
 * reason (for f16 and bf16 also em_cudnn_half_supports). Loads the library
 * and makes the device's handle on first call. */
int em_cudnn_usable(em_device dev, em_dtype dt, char *why, size_t cap);

/* The rule for f16 and bf16 convolutions alone, a pure function of the compute capability:
 * 1 where the device has tensor cores for dt (f16 from 7.0, bf16 from 8.0), else 0 and why
 * (the convolution then runs on f32 copies: engine/half.c). */
int em_cudnn_half_supports(em_dtype dt, int cc, char *why, size_t cap);

/* Whether cuDNN takes this geometry (it has no asymmetric or negative
 * padding, needs at least 2 spatial axes in its descriptors, int dimensions
 * and element counts): 1, or 0 and why. */
int em_cudnn_takes(const em_cudnn_geom *g, char *why, size_t cap);

/* Runs one direction: fwd (a = x, b = w, out = y), bwd data (a = dy,
 * b = w, out = dx), bwd filter (a = x, b = dy, out = dw); out is
 * overwritten. The algorithm comes from the memory or disk cache, or a
 * search on first sight (the search runs the candidates on these
 * buffers). tf32 allows TF32 math for f32; deterministic-only restricts the
 * choice to deterministic algorithms (EMBER_CUDNN_DETERMINISTIC=1).
 * *algo_out (may be NULL) receives the algorithm's number for reports.
 * EM_ERR_UNSUPPORTED when cuDNN DECLINES the problem (a NOT_SUPPORTED status from the
 * descriptors, the search or the run, or no algorithm within the workspace limit): nothing was
 * written, the message says why, and the caller takes Ember's kernels; remembered for the
 * process, so later calls decline without asking cuDNN again. Other failures: EM_ERR_CUDA. */
em_status em_cudnn_conv(em_device dev, em_stream *s, em_cudnn_dir dir, const em_cudnn_geom *g, const void *a,
                        const void *b, void *out, int tf32, int *algo_out);
/* The same with out = result + beta * out (cuDNN's blend, computed in the convolution's f32
 * or f64 before out's one rounding): a half convolution's bias, put into out first. With
 * beta != 0 a search runs its trials on a scratch output, so out keeps what it holds. f16 and
 * bf16 descriptors take PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG (a FLOAT convolution
 * descriptor) with CUDNN_TENSOR_OP_MATH. */
em_status em_cudnn_conv_blend(em_device dev, em_stream *s, em_cudnn_dir dir, const em_cudnn_geom *g, const void *a,
                              const void *b, void *out, double beta, int tf32, int *algo_out);

/* Whether a cuDNN status of the loaded release says it DECLINES the problem (NOT_SUPPORTED and
 * its kinds, ARCH_MISMATCH) rather than failing at it: see cudnn.c. */
int em_cudnn_declines(int status);

/* The support rule alone: cuDNN major.minor.patch built for CUDA
 * `built_for` (cudnnGetCudartVersion) against a driver and a device of
 * compute capability cc. 1 when supported, else 0 and why. */
int em_cudnn_supports(int major, int minor, int patch, int built_for, int driver_version, int cc, char *why,
                      size_t cap);

/* cudnnGetVersion's number as major, minor, patch (cuDNN 9 counts
 * major*10000 + minor*100 + patch, earlier ones major*1000 + minor*100 +
 * patch). */
void em_cudnn_version_split(size_t v, int *major, int *minor, int *patch);

/* Algorithm searches this process ran (the rest came from a cache). */
uint64_t em_cudnn_searches(void);

struct em_runtime;
void em_cudnn_shutdown(struct em_runtime *rt);

/* For the rest of Ember's cuDNN glue (cudnn_norm_pool.c): the library and a device's handle.
 * em_cudnn_library: the loaded library's dlopen handle (NULL before em_cudnn_usable said yes;
 * a new one after em_shutdown may be another file, so bindings are keyed on it);
 * em_cudnn_version_text: "9.19.0"; em_cudnn_status_text: cudnnGetErrorString's name of a status.
 * em_cudnn_enter makes dev's context current, locks its handle (one call at a time: the
 * handle's stream is per call) and sets the stream; em_cudnn_leave undoes it. */
typedef struct em_cudnn_use {
  void *handle;      /* cudnnHandle_t */
  int ordinal;       /* the CUDA device, for messages */
  void *priv, *priv_gpu;
} em_cudnn_use;
void *em_cudnn_library(void);
const char *em_cudnn_version_text(void);
const char *em_cudnn_status_text(int status);
em_status em_cudnn_enter(em_device dev, em_stream *s, em_cudnn_use *u);
void em_cudnn_leave(em_cudnn_use *u);

#endif
