/* The binary op family's kernels (ops/binary.c, launched by ops/binary_gpu.c):
 * one generic broadcasting kernel per dtype that takes the op as a code
 * (EM_BIN_* / EM_BGRAD_* of binary_math.h), rather than one kernel per op.
 * The per-element arithmetic is binary_math.h's, the same the CPU loops call,
 * so every device gives the CPU's bits.
 *
 * Launch: 1-D grid-stride over the n output elements, any grid and block.
 * Operand layout: the index map of ops/gpu_glue.h (em_ops_index_map_make):
 * six output dims d0..d5 (d5 innermost, padded with 1 in front) and each
 * operand's stride in elements along each (0 where it broadcasts), as
 * scalars. Output element i unravels over the dims into one offset per
 * operand; axes of size 1 cost nothing. */
#include "em_kernel.h"
#include "binary_math.h"

/* The map's parameters: dims, then the strides of operands a, b (and c). */
#define EM_BIN_DIMS em_i64 d0, em_i64 d1, em_i64 d2, em_i64 d3, em_i64 d4, em_i64 d5
#define EM_BIN_STRIDES(p) em_i64 p##0, em_i64 p##1, em_i64 p##2, em_i64 p##3, em_i64 p##4, em_i64 p##5

/* One axis of the unravel: the coordinate along a dim of size d is r mod d;
 * the rest of r goes on to the outer axes. */
EM_DEVICE void em_bin_axis(em_i64 *r, em_i64 d, em_i64 sa, em_i64 sb, em_i64 sc, em_i64 *oa, em_i64 *ob,
                           em_i64 *oc) {
  if (d == 1) return;
  em_i64 q = 0, c = *r;
  if (c >= d) { /* no division for the coordinates of a short innermost run */
    /* 64-bit division is several times slower than 32-bit on a GPU */
    q = c <= 0xffffffffll ? (em_i64)((unsigned int)c / (unsigned int)d) : c / d;
    c -= q * d;
  }
  *oa += c * sa;
  *ob += c * sb;
  *oc += c * sc;
  *r = q;
}

/* The grid-stride loop with oa, ob, oc the operands' offsets of element i
 * (strides a*, b*, c*: 0 for an operand a kernel does not have); the body
 * may hold commas. */
#define EM_BIN_LOOP(...)                                                                             \
  {                                                                                                  \
    em_i64 stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                                                  \
    (void)d0; /* the outermost coordinate is what is left of i */                                   \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += stride_) {                  \
      em_i64 r_ = i, oa = 0, ob = 0, oc = 0;                                                         \
      em_bin_axis(&r_, d5, a5, b5, c5, &oa, &ob, &oc);                                               \
      em_bin_axis(&r_, d4, a4, b4, c4, &oa, &ob, &oc);                                               \
      em_bin_axis(&r_, d3, a3, b3, c3, &oa, &ob, &oc);                                               \
      em_bin_axis(&r_, d2, a2, b2, c2, &oa, &ob, &oc);                                               \
      em_bin_axis(&r_, d1, a1, b1, c1, &oa, &ob, &oc);                                               \
      oa += r_ * a0;                                                                                 \
      ob += r_ * b0;                                                                                 \
      oc += r_ * c0;                                                                                 \
      __VA_ARGS__;                                                                                   \
    }                                                                                                \
  }

/* Two-operand kernels have no third operand: its strides are 0. */
#define EM_BIN_NO_C em_i64 c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0

/* out[i] = F(x, y) for arithmetic op codes; switch outside the loop so each
 * op's loop is straight-line code. */
#define EM_BIN_CASE(CODE, F) \
  case CODE: EM_BIN_LOOP(out[i] = F(x[oa], y[ob])) break;

/* ------------------------------------------------------------ arithmetic --- */

EM_GLOBAL void em_binary_f32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const float *x,
                             const float *y, float *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_f32)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_f32)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_f32)
    EM_BIN_CASE(EM_BIN_DIV, em_bin_div_f32)
    EM_BIN_CASE(EM_BIN_POW, em_powf)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_f32)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_f32)
    EM_BIN_CASE(EM_BIN_MOD, em_bin_pymod_f32)
    EM_BIN_CASE(EM_BIN_FMOD, em_bin_fmod_f32)
  default: break;
  }
}

/* f64 pow is not here (binary_math.h: the CPU's is libm's). */
EM_GLOBAL void em_binary_f64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const double *x,
                             const double *y, double *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_f64)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_f64)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_f64)
    EM_BIN_CASE(EM_BIN_DIV, em_bin_div_f64)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_f64)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_f64)
    EM_BIN_CASE(EM_BIN_MOD, em_bin_pymod_f64)
    EM_BIN_CASE(EM_BIN_FMOD, em_bin_fmod_f64)
  default: break;
  }
}

EM_GLOBAL void em_binary_i32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const int *x,
                             const int *y, int *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_i32)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_i32)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_i32)
    EM_BIN_CASE(EM_BIN_DIV, em_bin_div_i32)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_i32)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_i32)
    EM_BIN_CASE(EM_BIN_MOD, em_bin_pymod_i32)
    EM_BIN_CASE(EM_BIN_FMOD, em_bin_cmod_i32)
  default: break;
  }
}

EM_GLOBAL void em_binary_i64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const em_i64 *x,
                             const em_i64 *y, em_i64 *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_i64)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_i64)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_i64)
    EM_BIN_CASE(EM_BIN_DIV, em_bin_div_i64)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_i64)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_i64)
    EM_BIN_CASE(EM_BIN_MOD, em_bin_pymod_i64)
    EM_BIN_CASE(EM_BIN_FMOD, em_bin_cmod_i64)
  default: break;
  }
}

/* ---------------------------------------------- comparisons (bool out) --- */

/* out[i] = (x OP y) as 0/1 for the comparison codes. */
#define EM_CMP_CASES(A, B)                                            \
  case EM_BIN_EQ: EM_BIN_LOOP(out[i] = (A) == (B)) break;            \
  case EM_BIN_LT: EM_BIN_LOOP(out[i] = (A) < (B)) break;             \
  case EM_BIN_GT: EM_BIN_LOOP(out[i] = (A) > (B)) break;             \
  case EM_BIN_LE: EM_BIN_LOOP(out[i] = (A) <= (B)) break;            \
  case EM_BIN_GE: EM_BIN_LOOP(out[i] = (A) >= (B)) break;

EM_GLOBAL void em_binary_cmp_f32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                 const float *x, const float *y, unsigned char *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(x[oa], y[ob])
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_f64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                 const double *x, const double *y, unsigned char *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(x[oa], y[ob])
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_i32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const int *x,
                                 const int *y, unsigned char *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(x[oa], y[ob])
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_i64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                 const em_i64 *x, const em_i64 *y, unsigned char *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(x[oa], y[ob])
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_u8(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                const unsigned char *x, const unsigned char *y, unsigned char *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(x[oa], y[ob])
  default: break;
  }
}

/* bool: any nonzero byte is true, so the truth values are compared; the
 * logic ops live here too. */
EM_GLOBAL void em_binary_cmp_bool(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                  const unsigned char *x, const unsigned char *y, unsigned char *out) {
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(x[oa] != 0, y[ob] != 0)
  case EM_BIN_AND: EM_BIN_LOOP(out[i] = (x[oa] != 0) & (y[ob] != 0)) break;
  case EM_BIN_OR: EM_BIN_LOOP(out[i] = (x[oa] != 0) | (y[ob] != 0)) break;
  case EM_BIN_XOR: EM_BIN_LOOP(out[i] = (x[oa] != 0) ^ (y[ob] != 0)) break;
  default: break;
  }
}

/* not: flat, one bool operand. */
EM_GLOBAL void em_binary_not(em_i64 n, const unsigned char *x, unsigned char *out) {
  em_i64 stride = (em_i64)EM_BDIM_X * EM_GDIM_X;
  for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < n; i += stride) out[i] = x[i] == 0;
}

/* ----------------------------------------------------------------- where --- */

/* out = cond ? x : y, copied by element size (every bit kept, NaN payloads
 * too). Operand a is cond, b is x, c is y. */
#define EM_WHERE_KERNEL(NAME, T)                                                                            \
  EM_GLOBAL void NAME(em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), EM_BIN_STRIDES(c),        \
                      const unsigned char *cond, const T *x, const T *y, T *out) {                           \
    EM_BIN_LOOP(out[i] = cond[oa] ? x[ob] : y[oc])                                                           \
  }
EM_WHERE_KERNEL(em_binary_where_1, unsigned char)
EM_WHERE_KERNEL(em_binary_where_2, unsigned short)
EM_WHERE_KERNEL(em_binary_where_4, unsigned int)
EM_WHERE_KERNEL(em_binary_where_8, unsigned long long)

/* ------------------------------------------------------------- gradients --- */

/* _binary_grad: out = dy * d(fn)/d(input) for the EM_BGRAD_* codes; G_, A_, B_
 * are dy, x, y at the element (operands a, b, c of the map). fn "neg"
 * passes one operand three times. f64 has no pow codes (see em_binary_f64). */
#define EM_BGRAD_LOOP(EXPR) EM_BIN_LOOP(out[i] = (EXPR))
#define G_ dy[oa]
#define A_ x[ob]
#define B_ y[oc]

EM_GLOBAL void em_binary_grad_f32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                  EM_BIN_STRIDES(c), const float *dy, const float *x, const float *y, float *out) {
  switch (op) {
  case EM_BGRAD_NEG: EM_BGRAD_LOOP(-G_) break;
  case EM_BGRAD_DIV0: EM_BGRAD_LOOP(G_ / B_) break;
  case EM_BGRAD_DIV1: EM_BGRAD_LOOP(em_bgrad_div1_f32(G_, A_, B_)) break;
  case EM_BGRAD_POW0: EM_BGRAD_LOOP(em_bgrad_pow0_f32(G_, A_, B_)) break;
  case EM_BGRAD_POW1: EM_BGRAD_LOOP(em_bgrad_pow1_f32(G_, A_, B_)) break;
  case EM_BGRAD_MAX0: EM_BGRAD_LOOP(A_ >= B_ ? G_ : 0.0f) break;
  case EM_BGRAD_MAX1: EM_BGRAD_LOOP(A_ >= B_ ? 0.0f : G_) break;
  case EM_BGRAD_MIN0: EM_BGRAD_LOOP(A_ <= B_ ? G_ : 0.0f) break;
  case EM_BGRAD_MIN1: EM_BGRAD_LOOP(A_ <= B_ ? 0.0f : G_) break;
  case EM_BGRAD_MOD0: EM_BGRAD_LOOP(G_) break;
  case EM_BGRAD_PYMOD1: EM_BGRAD_LOOP(em_bgrad_pymod1_f32(G_, A_, B_)) break;
  case EM_BGRAD_FMOD1: EM_BGRAD_LOOP(em_bgrad_fmod1_f32(G_, A_, B_)) break;
  default: break;
  }
}

EM_GLOBAL void em_binary_grad_f64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                  EM_BIN_STRIDES(c), const double *dy, const double *x, const double *y,
                                  double *out) {
  switch (op) {
  case EM_BGRAD_NEG: EM_BGRAD_LOOP(-G_) break;
  case EM_BGRAD_DIV0: EM_BGRAD_LOOP(G_ / B_) break;
  case EM_BGRAD_DIV1: EM_BGRAD_LOOP(em_bgrad_div1_f64(G_, A_, B_)) break;
  case EM_BGRAD_MAX0: EM_BGRAD_LOOP(A_ >= B_ ? G_ : 0.0) break;
  case EM_BGRAD_MAX1: EM_BGRAD_LOOP(A_ >= B_ ? 0.0 : G_) break;
  case EM_BGRAD_MIN0: EM_BGRAD_LOOP(A_ <= B_ ? G_ : 0.0) break;
  case EM_BGRAD_MIN1: EM_BGRAD_LOOP(A_ <= B_ ? 0.0 : G_) break;
  case EM_BGRAD_MOD0: EM_BGRAD_LOOP(G_) break;
  case EM_BGRAD_PYMOD1: EM_BGRAD_LOOP(em_bgrad_pymod1_f64(G_, A_, B_)) break;
  case EM_BGRAD_FMOD1: EM_BGRAD_LOOP(em_bgrad_fmod1_f64(G_, A_, B_)) break;
  default: break;
  }
}

/* _where_grad: out = dy where cond (which 0) or where not cond (which 1),
 * else 0. Operand a is cond, b is dy. */
EM_GLOBAL void em_binary_where_grad_f32(int which, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                        const unsigned char *cond, const float *dy, float *out) {
  EM_BIN_NO_C;
  EM_BIN_LOOP(out[i] = (cond[oa] != 0) != (which != 0) ? dy[ob] : 0.0f)
}

EM_GLOBAL void em_binary_where_grad_f64(int which, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                        const unsigned char *cond, const double *dy, double *out) {
  EM_BIN_NO_C;
  EM_BIN_LOOP(out[i] = (cond[oa] != 0) != (which != 0) ? dy[ob] : 0.0)
}
