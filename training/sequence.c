/* Masks and masked means over padded sequences (include/ember/sequence.h),
 * built from the engine's ops: a constant of step indices compared with
 * the lengths, where, reduce_sum, max and div. */
#include <stdint.h>
#include <stdlib.h>

#include "ember/sequence.h"
#include "ember/tensor.h"
#include "error.h"
#include "op.h"

#define API __attribute__((visibility("default")))

static em_status apply_n(em_graph *g, const char *op, const em_var *in, int n, const em_attr *at, int n_at,
                         em_var *out) {
  return em_apply(g, op, in, n, at, n_at, out, 1);
}

/* The step indices 0 .. T-1 as a constant [T] of dtype dt (i32 or i64). */
static em_status step_indices(em_graph *g, int64_t T, em_dtype dt, em_var *out) {
  em_tensor *t;
  em_status s = em_tensor_zeros(em_cpu(), dt, 1, &T, &t);
  if (s) return s;
  void *p = em_tensor_data(t);
  for (int64_t i = 0; i < T; i++) {
    if (dt == EM_I64) ((int64_t *)p)[i] = i;
    else ((int32_t *)p)[i] = (int32_t)i;
  }
  s = em_constant(g, t, out);
  em_tensor_release(t);
  return s;
}

API em_status em_sequence_mask(em_graph *g, em_var lengths, int64_t T, em_dtype dtype, em_var *out) {
  if (!g || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequence_mask: NULL graph or out");
  em_dtype dt;
  int nd;
  int64_t sh[EM_MAX_DIMS];
  em_status s = em_var_info(g, lengths, &dt, &nd, sh);
  if (s) return em_fail_context(s, "em_sequence_mask: lengths");
  if ((dt != EM_I32 && dt != EM_I64) || nd != 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequence_mask: lengths is %s of rank %d; a vector [N] of i32 or i64 "
                   "expected", em_dtype_name(dt), nd);
  if (T < 1 || (dt == EM_I32 && T > INT32_MAX))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequence_mask: T %lld; at least 1 (and at most 2^31 - 1 with i32 "
                   "lengths)", (long long)T);
  if (dtype != EM_BOOL && dtype != EM_F32 && dtype != EM_F64)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequence_mask: mask dtype %s; bool, f32 or f64 expected",
                   em_dtype_name(dtype));
  em_var steps, lens, mask;
  int64_t axis = 1;
  em_attr un = em_attr_is("axes", &axis, 1);
  if ((s = step_indices(g, T, dt, &steps)) || (s = apply_n(g, "stop_gradient", &lengths, 1, NULL, 0, &lens)) ||
      (s = apply_n(g, "unsqueeze", &lens, 1, &un, 1, &lens)) ||
      (s = apply_n(g, "less", (em_var[]){steps, lens}, 2, NULL, 0, &mask))) /* [T] < [N, 1]: [N, T] */
    return em_fail_context(s, "em_sequence_mask");
  if (dtype != EM_BOOL) {
    em_attr to = em_attr_i("to", dtype);
    if ((s = apply_n(g, "cast", &mask, 1, &to, 1, &mask))) return em_fail_context(s, "em_sequence_mask");
  }
  *out = mask;
  return EM_OK;
}

API em_status em_masked_mean(em_graph *g, em_var values, em_var mask, em_var *out) {
  if (!g || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_masked_mean: NULL graph or out");
  em_dtype vt, mt;
  int vn, mn;
  int64_t vs[EM_MAX_DIMS], ms[EM_MAX_DIMS];
  em_status s = em_var_info(g, values, &vt, &vn, vs);
  if (s) return em_fail_context(s, "em_masked_mean: values");
  if ((s = em_var_info(g, mask, &mt, &mn, ms))) return em_fail_context(s, "em_masked_mean: mask");
  if (vt != EM_F32 && vt != EM_F64)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_masked_mean: values are %s; f32 or f64 expected", em_dtype_name(vt));
  if (mt != EM_BOOL && mt != vt)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_masked_mean: the mask is %s; bool or the values' %s expected",
                   em_dtype_name(mt), em_dtype_name(vt));
  int same = vn == mn;
  for (int i = 0; same && i < vn; i++) same = vs[i] == ms[i] || vs[i] < 0 || ms[i] < 0;
  if (!same)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_masked_mean: values of rank %d and a mask of rank %d differ in shape "
                   "(the mask must have the values' shape)", vn, mn);
  em_var valid = mask, zero, one, kept, total, count, denom, mean;
  em_attr to = em_attr_i("to", vt);
  if (mt != EM_BOOL) {
    em_var z;
    if ((s = em_scalar(g, mt, 0, &z)) || (s = apply_n(g, "stop_gradient", &mask, 1, NULL, 0, &valid)) ||
        (s = apply_n(g, "greater", (em_var[]){valid, z}, 2, NULL, 0, &valid)))
      return em_fail_context(s, "em_masked_mean");
  }
  if ((s = em_scalar(g, vt, 0, &zero)) || (s = em_scalar(g, vt, 1, &one)) ||
      (s = apply_n(g, "where", (em_var[]){valid, values, zero}, 3, NULL, 0, &kept)) ||
      (s = apply_n(g, "reduce_sum", &kept, 1, NULL, 0, &total)) ||
      (s = apply_n(g, "cast", &valid, 1, &to, 1, &count)) || (s = apply_n(g, "reduce_sum", &count, 1, NULL, 0, &count)) ||
      (s = apply_n(g, "max", (em_var[]){count, one}, 2, NULL, 0, &denom)) ||
      (s = apply_n(g, "div", (em_var[]){total, denom}, 2, NULL, 0, &mean)))
    return em_fail_context(s, "em_masked_mean");
  *out = mean;
  return EM_OK;
}

API em_status em_sequence_cross_entropy(em_graph *g, em_var logits, em_var labels, em_var lengths, em_var *loss,
                                        em_var *error) {
  if (!g || (!loss && !error)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequence_cross_entropy: NULL graph or no output");
  em_dtype dt;
  int nd;
  int64_t sh[EM_MAX_DIMS];
  em_status s = em_var_info(g, logits, &dt, &nd, sh);
  if (s) return em_fail_context(s, "em_sequence_cross_entropy: logits");
  if (nd != 3 || sh[1] < 1)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_sequence_cross_entropy: logits of rank %d; [N, T, C] with a known T "
                   "expected", nd);
  em_var mask, ce, wrong, l = 0, e = 0;
  if ((s = em_sequence_mask(g, lengths, sh[1], EM_BOOL, &mask))) return em_fail_context(s, "em_sequence_cross_entropy");
  if (loss && ((s = apply_n(g, "cross_entropy_with_softmax", (em_var[]){logits, labels}, 2, NULL, 0, &ce)) ||
               (s = em_masked_mean(g, ce, mask, &l))))
    return em_fail_context(s, "em_sequence_cross_entropy");
  if (error && ((s = apply_n(g, "classification_error", (em_var[]){logits, labels}, 2, NULL, 0, &wrong)) ||
                (s = em_masked_mean(g, wrong, mask, &e))))
    return em_fail_context(s, "em_sequence_cross_entropy");
  if (loss) *loss = l;
  if (error) *error = e;
  return EM_OK;
}
