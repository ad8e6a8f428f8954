/* f16 and bf16 through f32 (op.h's em_op_def.half), the running half (em_op_infer, the
 * checking half, is in op_registry.c so that the graph alone links without the kernels): how the products and convolutions take
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
  em_status s = em_op_f32_view(a, h, few_in, 16, &in32);
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
