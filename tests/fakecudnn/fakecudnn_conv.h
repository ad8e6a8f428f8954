/* Convolutions of the fake libcudnn: the problem an operation describes,
 * the modelled algorithms and their properties (fakecudnn_conv.c), and the
 * work that computes them (fakecudnn_conv_math.c). */
#ifndef FAKECUDNN_CONV_H
#define FAKECUDNN_CONV_H

#include "fakecudnn_work.h"

typedef enum { FD_FWD, FD_BWD_DATA, FD_BWD_FILTER, FD_N_DIRS } fd_dir;

/* One convolution, whatever the direction: x [n, c, in...], w [k, c / g,
 * ker...], y [n, k, out...]; 2 or 3 spatial axes (4-D or 5-D tensors; a 1-D
 * convolution is a 4-D one with a size-1 axis, as cuDNN wants it). */
typedef struct fd_problem {
  int nsp;
  int64_t n, c, k, g;
  int64_t in[3], out[3], ker[3];
  int pad[3], stride[3], dil[3];
  int flip;    /* CUDNN_CONVOLUTION: the filter is mirrored */
  int dtype;   /* of x, w and y */
  int compute; /* the convolution descriptor's data type */
  int math;    /* its math type */
  int cc;      /* the handle's device */
} fd_problem;

/* The order in which an algorithm sums an output's terms. The terms form a
 * grid: u is the outer index of the plain order, v the inner one (forward:
 * u the input channel of the group, v the filter tap; backward data: u the
 * output channel, v the tap; backward filter: u the image of the batch, v
 * the output position). Invalid terms (in the padding) are skipped. */
typedef enum {
  FD_ORD_NATURAL,          /* u, then v, one running sum */
  FD_ORD_SWAPPED,          /* v, then u */
  FD_ORD_REVERSED,         /* the natural order backwards */
  FD_ORD_REVERSED_SWAPPED, /* the swapped order backwards */
  FD_ORD_CHUNKED,          /* natural order in runs of 8 terms, the runs' sums added in order (split-K GEMM) */
  FD_ORD_PAIRWISE,         /* natural order, summed as a balanced tree */
  FD_ORD_PARTIALS,         /* a sum per u, the sums added in u order */
  FD_ORD_ROTATED,          /* u backwards from a start drawn per run, one running sum: atomics */
  FD_ORD_ROTATED_PARTIALS, /* a sum per u, added backwards from a start drawn per run */
} fd_order;

/* How f32 inputs are rounded before they are multiplied: tensor-core
 * kernels take TF32 (CC >= 8.0) or, when told to convert, f16 (CC 7.x). */
typedef enum { FD_IN_EXACT, FD_IN_TF32, FD_IN_F16 } fd_inround;

/* Families of algorithms: what they support and the workspace they need. */
typedef enum {
  FD_FAM_IMPLICIT,          /* no workspace, every problem */
  FD_FAM_PRECOMP,           /* an index table */
  FD_FAM_GEMM,              /* im2col of one image */
  FD_FAM_FFT,               /* whole-image transforms */
  FD_FAM_FFT_TILING,        /* 32-wide tiles */
  FD_FAM_WINOGRAD,          /* fused 3x3 */
  FD_FAM_WINOGRAD_NONFUSED, /* transformed 3x3 / 5x5 tiles */
  FD_FAM_PARTIAL_FILTERS,   /* backward filter ALGO_3: partial filter sums */
  FD_FAM_NEVER,             /* not implemented in cuDNN */
} fd_family;

typedef struct fd_algo {
  const char *name;
  fd_family family;
  int deterministic; /* cudnnDeterminism_t of its perf record */
  int tensor_ops;    /* has tensor-core kernels: the math type applies */
  fd_order order;
  double fixed_us, macs_per_us; /* the pretend time (README.md) */
} fd_algo;

/* The algorithms of a direction (indexed by the cuDNN enumerant) and their count. */
const fd_algo *fd_algos(fd_dir dir, int *count);

typedef struct fd_conv_work {
  fd_work hdr;
  fd_dir dir;
  fd_problem p;
  fd_view x, w, y; /* y is dy for the backward directions; the output is y, x or w by direction */
  int algo;
  fd_order order;
  fd_inround inround;
  unsigned long long draw; /* start of a rotated order */
  double alpha, beta;
  CUdeviceptr ws;
  size_t ws_bytes;  /* what the algorithm uses (checked and scribbled) */
  int find;         /* a Find*Ex trial: check everything, leave NaN in the output */
  /* While it runs: each tap's per-axis index as read (plain) and as the
   * filter holds it (mirrored for CUDNN_CONVOLUTION), 3 per tap. */
  int64_t *tap_plain, *tap_filter;
} fd_conv_work;

CUresult fd_conv_run(void *payload, char *msg, size_t cap);

/* Sum of the terms of one output in an order; the terms are rounded
 * products, kept with a validity flag in a u-major grid of nu x nv;
 * scratch holds nu * nv doubles. */
double fd_sum_terms(int compute, fd_order order, unsigned long long draw, const double *terms, const unsigned char *valid,
                    int64_t nu, int64_t nv, double *scratch);

#endif
