/* Inside the recurrent family: what ops/recurrent.c (shapes, CPU) shares
 * with its GPU launcher ops/recurrent_gpu.c (kernels/recurrent.cu). */
#ifndef EMBER_OPS_RECURRENT_GPU_H
#define EMBER_OPS_RECURRENT_GPU_H

#include <stdint.h>

#include "op.h"

/* The sizes and options of a _lstm_seq or _lstm_seq_grad node. */
typedef struct em_lstm_geo {
  em_dtype dt;
  int64_t T, N, H;                    /* N may be -1 while a graph is built */
  int reverse, has_h0, has_c0, has_lens, lens64;
  int has_dws;                        /* the gradient op: a gradient of the workspace is given */
  int i_h0, i_c0, i_lens, i_dws;      /* their input indices, -1 when absent */
} em_lstm_geo;

/* Reads and checks a node's attributes and input shapes (grad: the
 * gradient op's inputs). Fails through em_op_fail. */
em_status em_lstm_geometry(const em_op_args *a, int grad, em_lstm_geo *g);

/* The gpu members: f32 on the device, f64 handed to the CPU (EM_ERR_USE_CPU). */
em_status em_recurrent_lstm_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);
em_status em_recurrent_lstm_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

#endif
