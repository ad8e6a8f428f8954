/* f16 and bf16 through f32 (op.h's em_op_def.half): how the products and convolutions take
 * half-precision tensors without a half copy of every kernel. The op sees f32 (its infer, its
 * cpu member, its gpu member's Ember kernels), so a half product accumulates in f32 and is
 * rounded once into the half dtype: the arithmetic of tensor cores with f32 accumulation and
 * of PyTorch's autocast. The conversions are em_f16_to_f32 and friends (ops/math_map.c), on
 * the op's device and stream; on a GPU the copies come from the caching allocator and are
 * freed in stream order.
 *
 * One dtype per application: a half input beside an f32 float input is refused (the
 * mixed-precision graph pass, em_graph_autocast, casts every float input of an op it
 * changes), so "f16 x f32" never silently means one of the two. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"

static int is_half(em_dtype t) { return t == EM_F16 || t == EM_BF16; }

em_dtype em_op_half_dtype(const em_op_args *a) {
  for (int i = 0; i < a->n_in; i++)
    if (is_half(a->in[i].dtype)) return a->in[i].dtype;
  return EM_F32;
}

/* The f32 view of the inputs: a copy of a->in with the half dtype as f32. */
static em_status f32_view(const em_op_args *a, em_dtype h, em_shape *few, int n_few, em_shape **out) {
  em_shape *v = a->n_in <= n_few ? few : malloc(sizeof *v * (size_t)a->n_in);
  if (!v) return em_fail(EM_ERR_OUT_OF_MEMORY, "op '%s': no memory for %d input shapes", a->def->name, a->n_in);
  for (int i = 0; i < a->n_in; i++) {
    v[i] = a->in[i];
    if (v[i].dtype == h) v[i].dtype = EM_F32;
  }
  *out = v;
  return EM_OK;
}

em_status em_op_infer(em_op_args *a) {
  const em_dtype h = a->def->half ? em_op_half_dtype(a) : EM_F32;
  if (h == EM_F32) return a->def->infer(a);
  for (int i = 0; i < a->n_in; i++)
    if ((a->in[i].dtype == EM_F32 || a->in[i].dtype == EM_F64 || is_half(a->in[i].dtype)) && a->in[i].dtype != h)
      return em_op_fail(a, "input %d is %s and another input %s: an op computes in one float dtype; cast one of them "
                        "(em_graph_autocast casts every float input of the ops it changes)",
                        i, em_dtype_name(a->in[i].dtype), em_dtype_name(h));
  em_shape few[16], *view;
  em_status s = f32_view(a, h, few, 16, &view);
  if (s) return s;
  em_op_args f = *a;
  f.in = view;
  s = a->def->infer(&f); /* writes a->out (the same array) */
  if (!s)
    for (int i = 0; i < a->n_out; i++)
      if (a->out[i].dtype == EM_F32) a->out[i].dtype = h;
  if (view != few) free(view);
  return s;
}

/* x (half, n elements) into y (f32), or back, on the op's device and stream. */
static em_status widen(const em_op_args *a, em_dtype h, const em_tensor *x, em_tensor *y, size_t n) {
  return h == EM_F16 ? em_f16_to_f32(a->dev, em_tensor_data(x), em_tensor_data(y), n, a->stream)
                     : em_bf16_to_f32(a->dev, em_tensor_data(x), em_tensor_data(y), n, a->stream);
}
static em_status narrow(const em_op_args *a, em_dtype h, const em_tensor *x, em_tensor *y, size_t n) {
  return h == EM_F16 ? em_f32_to_f16(a->dev, em_tensor_data(x), em_tensor_data(y), n, a->stream)
                     : em_f32_to_bf16(a->dev, em_tensor_data(x), em_tensor_data(y), n, a->stream);
}

em_status em_half_via_f32(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel k) {
  const em_dtype h = em_op_half_dtype(a);
  if (h == EM_F32) return k(a, in, out);
  em_shape few_in[16], *in32 = NULL, out32[8];
  em_tensor *fin_few[16], **fin = a->n_in <= 16 ? fin_few : calloc((size_t)a->n_in, sizeof *fin);
  em_tensor *fout[8] = {0};
  if (!fin) return em_fail(EM_ERR_OUT_OF_MEMORY, "op '%s': no memory for %d f32 inputs", a->def->name, a->n_in);
  for (int i = 0; i < a->n_in; i++) fin[i] = NULL;
  em_status s = f32_view(a, h, few_in, 16, &in32);
  for (int i = 0; i < a->n_in && !s; i++) {
    if (a->in[i].dtype != h) continue;
    if (!(s = em_tensor_empty(a->dev, &in32[i], &fin[i])))
      s = widen(a, h, in[i], fin[i], (size_t)em_shape_numel(&in32[i]));
  }
  for (int i = 0; i < a->n_out && !s; i++) {
    out32[i] = a->out[i];
    if (out32[i].dtype == h) {
      out32[i].dtype = EM_F32;
      s = em_tensor_empty(a->dev, &out32[i], &fout[i]);
    }
  }
  if (!s) {
    em_op_args f = *a;
    f.in = in32;
    f.out = out32;
    em_tensor *kin_few[16], **kin = a->n_in <= 16 ? kin_few : malloc(sizeof *kin * (size_t)a->n_in), *kout[8];
    if (!kin) s = em_fail(EM_ERR_OUT_OF_MEMORY, "op '%s': no memory for %d inputs", a->def->name, a->n_in);
    for (int i = 0; i < a->n_in && !s; i++) kin[i] = fin[i] ? fin[i] : in[i];
    for (int i = 0; i < a->n_out; i++) kout[i] = fout[i] ? fout[i] : out[i];
    if (!s) s = k(&f, kin, kout);
    if (kin != kin_few) free(kin);
  }
  for (int i = 0; i < a->n_out && !s; i++)
    if (fout[i]) s = narrow(a, h, fout[i], out[i], (size_t)em_shape_numel(&out32[i]));
  for (int i = 0; i < a->n_in; i++) em_tensor_release(fin[i]);
  for (int i = 0; i < a->n_out; i++) em_tensor_release(fout[i]);
  if (fin != fin_few) free(fin);
  if (in32 && in32 != few_in) free(in32);
  return s;
}

em_status em_op_call(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel k) {
  if (!(a->def->half & EM_HALF_VIA_F32)) return k(a, in, out);
  if (a->dev.kind == EM_DEVICE_CUDA && k == a->def->gpu && (a->def->half & EM_HALF_GPU_NATIVE)) return k(a, in, out);
  return em_half_via_f32(a, in, out, k);
}
