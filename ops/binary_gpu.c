/* GPU members of the binary op family (ops/binary.c): each launches one of
 * the generic broadcasting kernels of kernels/binary.cu with the op's code.
 * The operands' layout goes to the kernel as the index map of gpu_glue.h
 * (six dims, each operand's strides, as scalars). The kernels compute each
 * element with kernels/binary_math.h, as the CPU loops do, so the GPU gives
 * the CPU's bits in both numeric modes (no op here sums anything).
 *
 * Handed back to the CPU (EM_ERR_USE_CPU): f64 pow and its gradients (the
 * CPU's is libm's, which no kernel can reproduce), and outputs whose shapes
 * keep more than six axes after merging (em_ops_index_map_make). */
#include "binary_gpu.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gpu_glue.h"
#include "../kernels/binary_math.h"

/* Kernel arguments: [op code,] n, the six dims, six strides per operand, the
 * operands' pointers, the output pointer. Holds what args[] points at. */
typedef struct launch {
  int code;
  long long n;
  em_ops_index_map m;
  void *ptr[4];
  void *args[2 + EM_OPS_MAX_DIMS * 4 + 4];
  int n_args;
} launch;

/* Fills l for an output of shape out over n_in operands; with_code: the
 * kernel's first parameter is the op code. */
static em_status launch_init(launch *l, const em_shape *out, const em_shape *in, int n_in, int n_strides,
                             int with_code, int code) {
  em_status s = em_ops_index_map_make(out, in, n_in, &l->m);
  if (s) return s;
  l->code = code;
  l->n = l->m.numel;
  l->n_args = 0;
  if (with_code) l->args[l->n_args++] = &l->code;
  l->args[l->n_args++] = &l->n;
  for (int i = 0; i < EM_OPS_MAX_DIMS; i++) l->args[l->n_args++] = &l->m.dims[i];
  /* Operands beyond n_in (fn "neg" of _binary_grad) keep the map's 0 strides. */
  for (int k = 0; k < n_strides; k++)
    for (int i = 0; i < EM_OPS_MAX_DIMS; i++) l->args[l->n_args++] = &l->m.strides[k][i];
  return EM_OK;
}

static void launch_ptr(launch *l, int k, const em_tensor *t) {
  l->ptr[k] = em_tensor_data(t);
  l->args[l->n_args++] = &l->ptr[k];
}

static em_status launch_run(const em_op_args *a, launch *l, const char *kernel) {
  return em_ops_launch_wide(a, kernel, (size_t)l->n, l->args);
}

/* "f32" ... for a kernel name; NULL where the family has no kernel. */
static const char *dt_suffix(em_dtype t) {
  switch (t) {
  case EM_F32: return "f32";
  case EM_F64: return "f64";
  case EM_I32: return "i32";
  case EM_I64: return "i64";
  case EM_U8: return "u8";
  case EM_BOOL: return "bool";
  default: return NULL;
  }
}

em_status em_binary_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int code = em_binary_op_code(a);
  em_dtype t = a->in[0].dtype;
  const char *suf = dt_suffix(t);
  if (code < 0 || !suf) return em_op_fail(a, "no GPU kernel for this op and dtype");
  if (code == EM_BIN_POW && t == EM_F64)
    return em_fail(EM_ERR_USE_CPU, "op 'pow' on f64 runs on the CPU (libm's pow; no portable f64 pow yet)");
  char kernel[64];
  int cmp = code >= EM_BIN_EQ && code <= EM_BIN_XOR;
  snprintf(kernel, sizeof kernel, cmp ? "em_binary_cmp_%s" : "em_binary_%s", suf);
  launch l;
  em_status s = launch_init(&l, &a->out[0], a->in, 2, 2, 1, code);
  if (s) return s;
  launch_ptr(&l, 0, in[0]);
  launch_ptr(&l, 1, in[1]);
  launch_ptr(&l, 2, out[0]);
  return launch_run(a, &l, kernel);
}

em_status em_binary_not_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  long long n = em_shape_numel(&a->in[0]);
  void *x = em_tensor_data(in[0]), *y = em_tensor_data(out[0]);
  void *args[] = {&n, &x, &y};
  return em_ops_launch_wide(a, "em_binary_not", (size_t)n, args);
}

em_status em_binary_where_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  char kernel[64];
  snprintf(kernel, sizeof kernel, "em_binary_where_%zu", em_dtype_size(a->in[1].dtype));
  launch l;
  em_status s = launch_init(&l, &a->out[0], a->in, 3, 3, 0, 0);
  if (s) return s;
  for (int k = 0; k < 3; k++) launch_ptr(&l, k, in[k]);
  launch_ptr(&l, 3, out[0]);
  return launch_run(a, &l, kernel);
}

em_status em_binary_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int code = em_binary_grad_code(a);
  int d64 = a->in[0].dtype == EM_F64;
  if (code < 0) return em_op_fail(a, "no GPU kernel for these attributes");
  if (d64 && (code == EM_BGRAD_POW0 || code == EM_BGRAD_POW1))
    return em_fail(EM_ERR_USE_CPU, "the f64 gradient of 'pow' runs on the CPU (libm's pow and log)");
  launch l;
  em_status s = launch_init(&l, &a->out[0], a->in, a->n_in, 3, 1, code);
  if (s) return s;
  /* fn "neg" has only dy: it stands in for x and y (never read). */
  for (int k = 0; k < 3; k++) launch_ptr(&l, k, in[k < a->n_in ? k : 0]);
  launch_ptr(&l, 3, out[0]);
  return launch_run(a, &l, d64 ? "em_binary_grad_f64" : "em_binary_grad_f32");
}

em_status em_binary_where_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int which = em_attr_int(a, "which", 0) == 1;
  launch l;
  em_status s = launch_init(&l, &a->out[0], a->in, 2, 2, 1, which);
  if (s) return s;
  launch_ptr(&l, 0, in[0]);
  launch_ptr(&l, 1, in[1]);
  launch_ptr(&l, 2, out[0]);
  return launch_run(a, &l, a->in[1].dtype == EM_F64 ? "em_binary_where_grad_f64" : "em_binary_where_grad_f32");
}
