/* Inside the linalg family: what ops/linalg.c (shapes, CPU, the gpu members)
 * hands to its GPU launcher ops/linalg_gpu.c (kernels/gemm.cu). */
#ifndef EMBER_OPS_LINALG_H
#define EMBER_OPS_LINALG_H

#include <stdint.h>

#include "op.h"

/* A batch of products C = alpha * op(X) op(Y) (+ beta * cin), row-major with
 * leading dimensions, all in elements. The batch axes (before coalescing)
 * give each operand's stride per axis; an axis of size > 1 along which C's
 * stride is 0 is summed over (the gradient of a broadcast operand): its
 * products are added into C in batch order (row-major over those axes), the
 * first one replacing what C held. */
typedef struct em_linalg_gemm {
  em_dtype dt;                  /* f32, f64, i32, i64 (integers: wrapping, alpha 1, beta 0); f16 and bf16
                                 * through cuBLAS only (em_linalg_half_takes) */
  int tx, ty;
  int64_t m, n, k, ldx, ldy, ldc;
  double alpha, beta;           /* beta != 0 only with cin (a single product) */
  const void *x, *y;
  void *c;
  const void *cin;              /* gemm's c: cin[i * cin_rs + j * cin_cs] (0: broadcast) */
  int64_t cin_rs, cin_cs;
  int nd;
  int64_t dims[EM_MAX_DIMS], sx[EM_MAX_DIMS], sy[EM_MAX_DIMS], sc[EM_MAX_DIMS];
} em_linalg_gemm;

/* One product (g->nd 0) on the CPU, as the matmul op computes it: OpenBLAS
 * in tiles fixed by the shape in the fast mode, the portable GEMM under
 * a->portable, so the bits match kernels/gemm.cu's there. beta != 0 reads C's
 * own contents as c (g->cin is ignored: the caller puts c into C first). For
 * ops of other families that need products inside (ops/recurrent.c). */
em_status em_linalg_gemm_cpu(const em_op_args *a, const em_linalg_gemm *g);

/* Runs g on a->dev and a->stream: through cuBLAS in the fast mode where
 * em_linalg_uses_cublas says so, else with em_gemm_<dtype>. EM_ERR_USE_CPU
 * when the kernel is needed and the device's plan for kernels/gemm.cu is the
 * CPU. */
em_status em_linalg_gemm_gpu(const em_op_args *a, const em_linalg_gemm *g);
/* The gemm op's road: em_linalg_gemm_gpu, except that in the fast mode a single f32 product
 * whose c is a row of biases added with beta 1 ([n] or [1, n]), or that carries a fused gelu
 * (a->post, EM_POST_GELU), runs as one cuBLASLt matmul whose epilogue adds the bias and applies
 * the gelu (runtime/cublaslt.h). *post_done: whether a->post was applied; when not, the caller
 * applies it (em_post_apply_gpu). Where cuBLASLt is absent or declines, the road says why. */
em_status em_linalg_gemm_gpu_epilogue(const em_op_args *a, const em_linalg_gemm *g, int *post_done);
/* Whether a's products of dtype dt go through cuBLAS (1), or why not (0). */
int em_linalg_uses_cublas(const em_op_args *a, em_dtype dt, char *why, size_t cap);
/* For g of dtype f16 or bf16 (the gpu members of EM_HALF_GPU_NATIVE ops): 1 when
 * em_linalg_gemm_gpu runs it through cuBLAS as it is (fast mode, the device has tensor cores
 * for the dtype, cuBLAS takes the sizes); else 0 and why, and the member computes on f32
 * copies instead (em_ops_half_via_f32), as portable mode always does. */
int em_linalg_half_takes(const em_op_args *a, const em_linalg_gemm *g, char *why, size_t cap);

/* dc[rows, cols] = beta * dy[m, n] summed to c's broadcast shape (em_gemm_c_grad_<dtype>). */
em_status em_linalg_c_grad_gpu(const em_op_args *a, const void *dy, void *dc, int64_t m, int64_t n, int64_t rows,
                               int64_t cols, double beta);

#endif
