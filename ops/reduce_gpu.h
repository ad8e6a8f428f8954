/* The reduce family's plan of a reduction (ops/reduce.c builds it; the CPU
 * loops and the kernels both follow it) and the launches of its kernels
 * (kernels/reduce_ops.cu, ops/reduce_gpu.c) for the gpu members in reduce.c.
 * Each launch function returns EM_ERR_USE_CPU untouched when the device's
 * plan for the module is the CPU. Pointers are device memory on a->dev. */
#ifndef EMBER_OPS_REDUCE_GPU_H
#define EMBER_OPS_REDUCE_GPU_H

#include <stdint.h>
#include "../engine/op.h"

/* Row-major walk over a few (size, stride) axes of x. */
typedef struct rd_walk {
  int n;
  int64_t dim[EM_MAX_DIMS], stride[EM_MAX_DIMS];
} rd_walk;

/* How a reduction traverses x (see the top of the file): axes of size 1 are
 * dropped and neighbours of the same kind (kept / reduced) merged. */
typedef struct rd_plan {
  int64_t n_out, n_red;       /* outputs; reduced elements per output */
  int empty;                  /* x has no elements */
  int inner_reduced;          /* 1: case A, 0: case B */
  int64_t inner;              /* A: contiguous reduced run L; B: contiguous kept width K */
  rd_walk outer;              /* A: output bases (kept axes); B: block bases (kept axes but the innermost) */
  rd_walk rows;               /* A: run starts (reduced axes but the innermost); B: all reduced axes */
  int64_t n_rows;
  int64_t nchunk, n_seg, seg_per_blk; /* A: segments per run, per output, per block */
  int64_t rows_per_blk;       /* B: rows per block */
  int64_t jc, n_jc;           /* B: column chunk width, chunks per block base (the thread split only) */
  int64_t n_blk;              /* fixed blocks per output (A) or per group (B) */
  int64_t n_groups;           /* A: n_out; B: block bases * column chunks */
} rd_plan;


/* One pass (RDM_PASS_*) over x (dtype dt: f32 f64 i32 i64) for every output
 * of plan p, each finished into y as dst says (RDM_DST_*; fn and p->n_red
 * for rdm_finish). shift: log_sum_exp's per-output shift (device doubles) or
 * NULL. */
em_status em_reduce_gpu_pass(const em_op_args *a, em_dtype dt, int pass, int fn, int dst, const rd_plan *p,
                             const void *x, const double *shift, void *y);

/* argmax / argmin over plan p (one reduced axis, or _reduce_grad's max and
 * min): pos[o] (i64) is the position among the output's reduced elements,
 * or with `offsets` the element's offset in x. */
em_status em_reduce_gpu_arg(const em_op_args *a, em_dtype dt, const rd_plan *p, int want_max, int last, int offsets,
                            const void *x, int64_t *pos);

/* _reduce_grad: dx over every element of x (shape dims[ndim], reduced axes in
 * mask) for reduction fn; a1, a2 (doubles per output) and pos (max / min)
 * as rdm_grad and the kernel take them, NULL where unused. */
em_status em_reduce_gpu_grad(const em_op_args *a, em_dtype dt, int fn, const int64_t *dims, int ndim, unsigned mask,
                             const void *x, const void *y, const void *dy, const double *a1, const double *a2,
                             const int64_t *pos, void *dx);

#endif
