/* Launch glue of the unary op family: the gpu members of ops/unary.c's
 * table, running kernels/unary.cu (one generic kernel per dtype, the op code
 * a parameter). Each resolves the op and its constants through
 * em_unary_launch_of, as the CPU loops do, and rounds them to the dtype the
 * same way, so the kernels give the CPU's bits.
 *
 * Handed back to the CPU (EM_ERR_USE_CPU, the executor runs `cpu` on host
 * copies): f64 ops that need a transcendental function (exp, log, tanh, erf,
 * sin, pow, ... and their gradients where those need one: see
 * em_unary_f64_portable in kernels/unary_math.h). The CPU computes them with
 * glibc's libm, whose bits no GPU can reproduce, and Ember has no binary64
 * versions of its own yet. Also EM_ERR_USE_CPU, unchanged, when the device's
 * plan for the module is the CPU. */
#include "unary_gpu.h"

#include "gpu_glue.h"
#include "error.h"
#include "../kernels/unary_math.h"

/* f64 ops that are not exact arithmetic run on the CPU (see the top). */
static em_status f64_on_cpu(const em_op_args *a, int op, int grad) {
  if (em_unary_f64_portable(op, grad)) return EM_OK;
  return em_fail(EM_ERR_USE_CPU, "op '%s': f64 needs libm, which runs on the CPU only", a->def->name);
}

/* The f32 ops of em_unary_f32_ext (kernels/unary.cu: those that need more
 * registers than the rest). */
static int f32_ext_op(int op) {
  switch (op) {
  case EM_UNARY_GELU:
  case EM_UNARY_TAN:
  case EM_UNARY_ATAN:
  case EM_UNARY_ASINH:
  case EM_UNARY_POW_SCALAR:
  case EM_UNARY_ASIN:
  case EM_UNARY_ACOS:
  case EM_UNARY_ACOSH:
  case EM_UNARY_ATANH: return 1;
  default: return 0;
  }
}

em_status em_unary_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_dtype dt = em_tensor_dtype(in[0]);
  em_unary_launch l;
  em_status s = em_unary_launch_of(a, 0, dt, &l);
  if (s) return s;
  int op = l.op, mode = l.mode;
  long long n = (long long)em_tensor_numel(in[0]);
  const void *x = em_tensor_data(in[0]);
  void *y = em_tensor_data(out[0]);
  if (op == EM_UNARY_ISNAN || op == EM_UNARY_ISINF) {
    void *args[] = {&op, &x, &y, &n, &mode};
    return em_ops_launch_wide(a, dt == EM_F32 ? "em_unary_bool_f32" : "em_unary_bool_f64", (size_t)n, args);
  }
  switch (dt) {
  case EM_F32: {
    float fa = (float)l.a, fb = (float)l.b;
    void *args[] = {&op, &x, &y, &n, &fa, &fb, &mode};
    return em_ops_launch_wide(a, f32_ext_op(op) ? "em_unary_f32_ext" : "em_unary_f32", (size_t)n, args);
  }
  case EM_F64: {
    if ((s = f64_on_cpu(a, op, 0))) return s;
    void *args[] = {&op, &x, &y, &n, &l.a, &l.b, &mode};
    return em_ops_launch_wide(a, "em_unary_f64", (size_t)n, args);
  }
  case EM_I32: {
    int ia = (int)l.ia, ib = (int)l.ib;
    void *args[] = {&op, &x, &y, &n, &ia, &ib};
    return em_ops_launch_wide(a, "em_unary_i32", (size_t)n, args);
  }
  case EM_I64: {
    long long ia = (long long)l.ia, ib = (long long)l.ib;
    void *args[] = {&op, &x, &y, &n, &ia, &ib};
    return em_ops_launch_wide(a, "em_unary_i64", (size_t)n, args);
  }
  default: return em_op_fail(a, "dtype %s reached the GPU kernel", em_dtype_name(dt));
  }
}

em_status em_unary_grad_gpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  em_dtype dt = em_tensor_dtype(in[0]);
  em_unary_launch l;
  em_status s = em_unary_launch_of(a, 1, dt, &l);
  if (s) return s;
  int op = l.op, mode = l.mode;
  long long n = (long long)em_tensor_numel(in[0]);
  const void *x = em_tensor_data(in[0]), *y = em_tensor_data(in[1]), *dy = em_tensor_data(in[2]);
  void *dx = em_tensor_data(out[0]);
  if (dt == EM_F32) {
    float fa = (float)l.a, fb = (float)l.b;
    void *args[] = {&op, &x, &y, &dy, &dx, &n, &fa, &fb, &mode};
    return em_ops_launch_wide(a, "em_unary_grad_f32", (size_t)n, args);
  }
  if (dt != EM_F64) return em_op_fail(a, "dtype %s reached the GPU kernel", em_dtype_name(dt));
  if ((s = f64_on_cpu(a, op, 1))) return s;
  void *args[] = {&op, &x, &y, &dy, &dx, &n, &l.a, &l.b, &mode};
  return em_ops_launch_wide(a, "em_unary_grad_f64", (size_t)n, args);
}

/* A gemm's fused tail (op.h) where cuBLASLt did not apply it: the unary op's own kernel, in
 * place on y (element i read, then written, by one thread), on the gemm's stream, so the bits
 * are those of the separate step. */
em_status em_post_apply_gpu(const em_op_args *a, const em_post_op *post, em_tensor *y) {
  if (post->kind == EM_POST_SWISH) return em_op_fail(a, "internal: a fused x * sigmoid(x) reached the GPU");
  em_shape sh;
  em_shape_of(y, &sh);
  em_op_args u = post->unary;
  u.in = &sh, u.out = &sh;
  u.dev = a->dev, u.stream = a->stream, u.portable = a->portable, u.tf32 = a->tf32;
  u.training = a->training, u.step = a->step;
  u.kernels = NULL, u.report = NULL, u.post = NULL; /* kernels: the gemm step's cache is the gemm's */
  em_tensor *io[1] = {y};
  return em_unary_gpu(&u, io, io);
}
