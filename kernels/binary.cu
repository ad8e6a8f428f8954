/* The binary op family's kernels (ops/binary.c, launched by ops/binary_gpu.c):
 * one generic broadcasting kernel per dtype that takes the op as a code
 * (EM_BIN_* / EM_BGRAD_* of binary_math.h), rather than one kernel per op.
 * The per-element arithmetic is binary_math.h's, the same the CPU loops call,
 * so every device gives the CPU's bits.
 *
 * Launch: 1-D grid-stride, over tiles of 4 * block output elements where
 * the map has one axis (EM_BIN_LOOP3T), any grid and block (ops/binary_gpu.c:
 * em_ops_launch_wide).
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

/* The offsets of element i (oa, ob, oc, declared here) by the map. */
#define EM_BIN_OFFS(i, oa, ob, oc)                                                                   \
  em_i64 oa = 0, ob = 0, oc = 0;                                                                     \
  {                                                                                                  \
    em_i64 r_ = (i);                                                                                 \
    em_bin_axis(&r_, d5, a5, b5, c5, &oa, &ob, &oc);                                                 \
    em_bin_axis(&r_, d4, a4, b4, c4, &oa, &ob, &oc);                                                 \
    em_bin_axis(&r_, d3, a3, b3, c3, &oa, &ob, &oc);                                                 \
    em_bin_axis(&r_, d2, a2, b2, c2, &oa, &ob, &oc);                                                 \
    em_bin_axis(&r_, d1, a1, b1, c1, &oa, &ob, &oc);                                                 \
    oa += r_ * a0; /* the outermost coordinate is what is left of i */                              \
    ob += r_ * b0;                                                                                   \
    oc += r_ * c0;                                                                                   \
  }
/* One-axis maps (every same-shape op: contiguous operands merge into one
 * axis): an operand's offset is i or, broadcast, 0; no division. */
#define EM_BIN_OFFS_FLAT(i, oa, ob, oc)                                                              \
  const em_i64 oa = a5 ? (i) : 0, ob = b5 ? (i) : 0, oc = c5 ? (i) : 0;

/* Element k of a tile: its operands' values from pa, pb, pc (types TA, TB,
 * TC) into va##k, vb##k, vc##k ... */
#define EM_BIN_LOAD(OFFS, k, TA, TB, TC, pa, pb, pc)                                                 \
  OFFS(i##k##_, oa##k##_, ob##k##_, oc##k##_)                                                        \
  const TA va##k##_ = pa[oa##k##_];                                                                  \
  const TB vb##k##_ = pb[ob##k##_];                                                                  \
  const TC vc##k##_ = pc[oc##k##_];
/* ... then out[i] = EXPR of a_, b_, c_ (the element's operand values). */
#define EM_BIN_PUT(k, TA, TB, TC, EXPR)                                                              \
  {                                                                                                  \
    const TA a_ = va##k##_;                                                                          \
    const TB b_ = vb##k##_;                                                                          \
    const TC c_ = vc##k##_;                                                                          \
    (void)a_, (void)b_, (void)c_;                                                                    \
    out[i##k##_] = (EXPR);                                                                           \
  }
/* One element per step, any map: each element unravelled over the six axes
 * (32-bit division where the index fits; none on a one-axis map). */
#define EM_BIN_LOOP1T(TA, TB, TC, pa, pb, pc, EXPR)                                                  \
  {                                                                                                  \
    const em_i64 stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                                            \
    (void)d0;                                                                                        \
    for (em_i64 i0_ = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i0_ < n; i0_ += stride_) {            \
      EM_BIN_LOAD(EM_BIN_OFFS, 0, TA, TB, TC, pa, pb, pc)                                            \
      EM_BIN_PUT(0, TA, TB, TC, EXPR)                                                                \
    }                                                                                                \
  }
/* The streaming loop. One-axis maps: thread t of a block takes elements
 * t, t + B, t + 2B, t + 3B of each tile of EM_BIN_U * B (B = EM_BDIM_X;
 * grid-stride over the tiles; every warp access coalesced), with all their
 * loads issued before the first store (out may alias an operand, so the
 * compiler could not reorder them itself): a thread keeps 8 or 12 loads in
 * flight, not 2 or 3; the last tile, partly past n, goes one element at a
 * time. Other maps: EM_BIN_LOOP1T. The loads EXPR does not use are dead
 * code, which every compiler drops; 2-operand kernels pass pb as pc (with
 * c's zero strides). Only cheap EXPRs take this loop (EM_BIN_CASE): the
 * expensive ones (pow, mod, integer division) are compute-bound anyway,
 * and their code written out six times over made the module take over ten
 * times as long to compile. */
#define EM_BIN_U 4
#define EM_BIN_LOOP3T(TA, TB, TC, pa, pb, pc, EXPR)                                                  \
  if (d1 == 1 && d2 == 1 && d3 == 1 && d4 == 1) {                                                    \
    const em_i64 bd_ = EM_BDIM_X, step_ = bd_ * EM_BIN_U * EM_GDIM_X;                                \
    em_i64 i_ = (em_i64)EM_BID_X * bd_ * EM_BIN_U + EM_TID_X;                                        \
    for (; i_ + 3 * bd_ < n; i_ += step_) {                                                          \
      const em_i64 i0_ = i_, i1_ = i_ + bd_, i2_ = i_ + 2 * bd_, i3_ = i_ + 3 * bd_;                 \
      EM_BIN_LOAD(EM_BIN_OFFS_FLAT, 0, TA, TB, TC, pa, pb, pc)                                       \
      EM_BIN_LOAD(EM_BIN_OFFS_FLAT, 1, TA, TB, TC, pa, pb, pc)                                       \
      EM_BIN_LOAD(EM_BIN_OFFS_FLAT, 2, TA, TB, TC, pa, pb, pc)                                       \
      EM_BIN_LOAD(EM_BIN_OFFS_FLAT, 3, TA, TB, TC, pa, pb, pc)                                       \
      EM_BIN_PUT(0, TA, TB, TC, EXPR)                                                                \
      EM_BIN_PUT(1, TA, TB, TC, EXPR)                                                                \
      EM_BIN_PUT(2, TA, TB, TC, EXPR)                                                                \
      EM_BIN_PUT(3, TA, TB, TC, EXPR)                                                                \
    }                                                                                                \
    for (; i_ < n; i_ += bd_) {                                                                      \
      const em_i64 i0_ = i_;                                                                         \
      EM_BIN_LOAD(EM_BIN_OFFS_FLAT, 0, TA, TB, TC, pa, pb, pc)                                       \
      EM_BIN_PUT(0, TA, TB, TC, EXPR)                                                                \
    }                                                                                                \
  } else                                                                                             \
    EM_BIN_LOOP1T(TA, TB, TC, pa, pb, pc, EXPR)
/* With the operand types of the kernel's typedefs bt_a_, bt_b_, bt_c_. */
#define EM_BIN_LOOP3(pa, pb, pc, EXPR) EM_BIN_LOOP3T(bt_a_, bt_b_, bt_c_, pa, pb, pc, EXPR)
#define EM_BIN_LOOP(pa, pb, EXPR) EM_BIN_LOOP3T(bt_a_, bt_b_, bt_b_, pa, pb, pb, EXPR)
#define EM_BIN_LOOP1(pa, pb, EXPR) EM_BIN_LOOP1T(bt_a_, bt_b_, bt_b_, pa, pb, pb, EXPR)
#define EM_BIN_LOOP31(pa, pb, pc, EXPR) EM_BIN_LOOP1T(bt_a_, bt_b_, bt_c_, pa, pb, pc, EXPR)

/* Two-operand kernels have no third operand: its strides are 0. */
#define EM_BIN_NO_C em_i64 c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0

/* out[i] = F(x, y) for arithmetic op codes; switch outside the loop so each
 * op's loop is straight-line code. */
#define EM_BIN_CASE(CODE, F) \
  case CODE: EM_BIN_LOOP(x, y, F(a_, b_)) break;
/* ... and the expensive ones, one element per step (see EM_BIN_LOOP3T). */
#define EM_BIN_CASE1(CODE, F) \
  case CODE: EM_BIN_LOOP1(x, y, F(a_, b_)) break;

/* ------------------------------------------------------------ arithmetic --- */

EM_GLOBAL void em_binary_f32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const float *x,
                             const float *y, float *out) {
  typedef float bt_a_;
  typedef float bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_f32)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_f32)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_f32)
    EM_BIN_CASE(EM_BIN_DIV, em_bin_div_f32)
    EM_BIN_CASE1(EM_BIN_POW, em_powf)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_f32)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_f32)
    EM_BIN_CASE1(EM_BIN_MOD, em_bin_pymod_f32)
    EM_BIN_CASE1(EM_BIN_FMOD, em_bin_fmod_f32)
  default: break;
  }
}

/* f64 pow is not here (binary_math.h: the CPU's is libm's). */
EM_GLOBAL void em_binary_f64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const double *x,
                             const double *y, double *out) {
  typedef double bt_a_;
  typedef double bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_f64)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_f64)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_f64)
    EM_BIN_CASE(EM_BIN_DIV, em_bin_div_f64)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_f64)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_f64)
    EM_BIN_CASE1(EM_BIN_MOD, em_bin_pymod_f64)
    EM_BIN_CASE1(EM_BIN_FMOD, em_bin_fmod_f64)
  default: break;
  }
}

EM_GLOBAL void em_binary_i32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const int *x,
                             const int *y, int *out) {
  typedef int bt_a_;
  typedef int bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_i32)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_i32)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_i32)
    EM_BIN_CASE1(EM_BIN_DIV, em_bin_div_i32)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_i32)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_i32)
    EM_BIN_CASE1(EM_BIN_MOD, em_bin_pymod_i32)
    EM_BIN_CASE1(EM_BIN_FMOD, em_bin_cmod_i32)
  default: break;
  }
}

EM_GLOBAL void em_binary_i64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const em_i64 *x,
                             const em_i64 *y, em_i64 *out) {
  typedef em_i64 bt_a_;
  typedef em_i64 bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_BIN_CASE(EM_BIN_ADD, em_bin_add_i64)
    EM_BIN_CASE(EM_BIN_SUB, em_bin_sub_i64)
    EM_BIN_CASE(EM_BIN_MUL, em_bin_mul_i64)
    EM_BIN_CASE1(EM_BIN_DIV, em_bin_div_i64)
    EM_BIN_CASE(EM_BIN_MAX, em_bin_max_i64)
    EM_BIN_CASE(EM_BIN_MIN, em_bin_min_i64)
    EM_BIN_CASE1(EM_BIN_MOD, em_bin_pymod_i64)
    EM_BIN_CASE1(EM_BIN_FMOD, em_bin_cmod_i64)
  default: break;
  }
}

/* ---------------------------------------------- comparisons (bool out) --- */

/* out[i] = (x OP y) as 0/1 for the comparison codes. */
#define EM_CMP_CASES(A, B)                                            \
  case EM_BIN_EQ: EM_BIN_LOOP(x, y, (A) == (B)) break;            \
  case EM_BIN_LT: EM_BIN_LOOP(x, y, (A) < (B)) break;             \
  case EM_BIN_GT: EM_BIN_LOOP(x, y, (A) > (B)) break;             \
  case EM_BIN_LE: EM_BIN_LOOP(x, y, (A) <= (B)) break;            \
  case EM_BIN_GE: EM_BIN_LOOP(x, y, (A) >= (B)) break;

EM_GLOBAL void em_binary_cmp_f32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                 const float *x, const float *y, unsigned char *out) {
  typedef float bt_a_;
  typedef float bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(a_, b_)
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_f64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                 const double *x, const double *y, unsigned char *out) {
  typedef double bt_a_;
  typedef double bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(a_, b_)
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_i32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), const int *x,
                                 const int *y, unsigned char *out) {
  typedef int bt_a_;
  typedef int bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(a_, b_)
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_i64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                 const em_i64 *x, const em_i64 *y, unsigned char *out) {
  typedef em_i64 bt_a_;
  typedef em_i64 bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(a_, b_)
  default: break;
  }
}

EM_GLOBAL void em_binary_cmp_u8(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                const unsigned char *x, const unsigned char *y, unsigned char *out) {
  typedef unsigned char bt_a_;
  typedef unsigned char bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(a_, b_)
  default: break;
  }
}

/* bool: any nonzero byte is true, so the truth values are compared; the
 * logic ops live here too. */
EM_GLOBAL void em_binary_cmp_bool(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                  const unsigned char *x, const unsigned char *y, unsigned char *out) {
  typedef unsigned char bt_a_;
  typedef unsigned char bt_b_;
  EM_BIN_NO_C;
  switch (op) {
    EM_CMP_CASES(a_ != 0, b_ != 0)
  case EM_BIN_AND: EM_BIN_LOOP(x, y, (a_ != 0) & (b_ != 0)) break;
  case EM_BIN_OR: EM_BIN_LOOP(x, y, (a_ != 0) | (b_ != 0)) break;
  case EM_BIN_XOR: EM_BIN_LOOP(x, y, (a_ != 0) ^ (b_ != 0)) break;
  default: break;
  }
}

/* not: flat, one bool operand; tiles as EM_BIN_LOOP3T's one-axis maps. */
EM_GLOBAL void em_binary_not(em_i64 n, const unsigned char *x, unsigned char *out) {
  const em_i64 bd = EM_BDIM_X, step = bd * EM_BIN_U * EM_GDIM_X;
  em_i64 i = (em_i64)EM_BID_X * bd * EM_BIN_U + EM_TID_X;
  for (; i + 3 * bd < n; i += step) {
    const unsigned char v0 = x[i], v1 = x[i + bd], v2 = x[i + 2 * bd], v3 = x[i + 3 * bd];
    out[i] = v0 == 0;
    out[i + bd] = v1 == 0;
    out[i + 2 * bd] = v2 == 0;
    out[i + 3 * bd] = v3 == 0;
  }
  for (; i < n; i += bd) out[i] = x[i] == 0;
}

/* ----------------------------------------------------------------- where --- */

/* out = cond ? x : y, copied by element size (every bit kept, NaN payloads
 * too). Operand a is cond, b is x, c is y. */
#define EM_WHERE_KERNEL(NAME, T)                                                                            \
  EM_GLOBAL void NAME(em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b), EM_BIN_STRIDES(c),        \
                      const unsigned char *cond, const T *x, const T *y, T *out) {                           \
    typedef unsigned char bt_a_;                                                                             \
    typedef T bt_b_;                                                                                         \
    typedef T bt_c_;                                                                                         \
    EM_BIN_LOOP3(cond, x, y, a_ ? b_ : c_)                                                           \
  }
EM_WHERE_KERNEL(em_binary_where_1, unsigned char)
EM_WHERE_KERNEL(em_binary_where_2, unsigned short)
EM_WHERE_KERNEL(em_binary_where_4, unsigned int)
EM_WHERE_KERNEL(em_binary_where_8, unsigned long long)

/* ------------------------------------------------------------- gradients --- */

/* _binary_grad: out = dy * d(fn)/d(input) for the EM_BGRAD_* codes; G_, A_, B_
 * are dy, x, y at the element (operands a, b, c of the map). fn "neg"
 * passes one operand three times. f64 has no pow codes (see em_binary_f64). */
#define EM_BGRAD_LOOP(EXPR) EM_BIN_LOOP3(dy, x, y, EXPR)
#define EM_BGRAD_LOOP1(EXPR) EM_BIN_LOOP31(dy, x, y, EXPR)
#define G_ a_
#define A_ b_
#define B_ c_

EM_GLOBAL void em_binary_grad_f32(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                  EM_BIN_STRIDES(c), const float *dy, const float *x, const float *y, float *out) {
  typedef float bt_a_;
  typedef float bt_b_;
  typedef float bt_c_;
  switch (op) {
  case EM_BGRAD_NEG: EM_BGRAD_LOOP(-G_) break;
  case EM_BGRAD_DIV0: EM_BGRAD_LOOP(G_ / B_) break;
  case EM_BGRAD_DIV1: EM_BGRAD_LOOP1(em_bgrad_div1_f32(G_, A_, B_)) break;
  case EM_BGRAD_POW0: EM_BGRAD_LOOP1(em_bgrad_pow0_f32(G_, A_, B_)) break;
  case EM_BGRAD_POW1: EM_BGRAD_LOOP1(em_bgrad_pow1_f32(G_, A_, B_)) break;
  case EM_BGRAD_MAX0: EM_BGRAD_LOOP(A_ >= B_ ? G_ : 0.0f) break;
  case EM_BGRAD_MAX1: EM_BGRAD_LOOP(A_ >= B_ ? 0.0f : G_) break;
  case EM_BGRAD_MIN0: EM_BGRAD_LOOP(A_ <= B_ ? G_ : 0.0f) break;
  case EM_BGRAD_MIN1: EM_BGRAD_LOOP(A_ <= B_ ? 0.0f : G_) break;
  case EM_BGRAD_MOD0: EM_BGRAD_LOOP(G_) break;
  case EM_BGRAD_PYMOD1: EM_BGRAD_LOOP1(em_bgrad_pymod1_f32(G_, A_, B_)) break;
  case EM_BGRAD_FMOD1: EM_BGRAD_LOOP1(em_bgrad_fmod1_f32(G_, A_, B_)) break;
  default: break;
  }
}

EM_GLOBAL void em_binary_grad_f64(int op, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                  EM_BIN_STRIDES(c), const double *dy, const double *x, const double *y,
                                  double *out) {
  typedef double bt_a_;
  typedef double bt_b_;
  typedef double bt_c_;
  switch (op) {
  case EM_BGRAD_NEG: EM_BGRAD_LOOP(-G_) break;
  case EM_BGRAD_DIV0: EM_BGRAD_LOOP(G_ / B_) break;
  case EM_BGRAD_DIV1: EM_BGRAD_LOOP1(em_bgrad_div1_f64(G_, A_, B_)) break;
  case EM_BGRAD_MAX0: EM_BGRAD_LOOP(A_ >= B_ ? G_ : 0.0) break;
  case EM_BGRAD_MAX1: EM_BGRAD_LOOP(A_ >= B_ ? 0.0 : G_) break;
  case EM_BGRAD_MIN0: EM_BGRAD_LOOP(A_ <= B_ ? G_ : 0.0) break;
  case EM_BGRAD_MIN1: EM_BGRAD_LOOP(A_ <= B_ ? 0.0 : G_) break;
  case EM_BGRAD_MOD0: EM_BGRAD_LOOP(G_) break;
  case EM_BGRAD_PYMOD1: EM_BGRAD_LOOP1(em_bgrad_pymod1_f64(G_, A_, B_)) break;
  case EM_BGRAD_FMOD1: EM_BGRAD_LOOP1(em_bgrad_fmod1_f64(G_, A_, B_)) break;
  default: break;
  }
}

/* _where_grad: out = dy where cond (which 0) or where not cond (which 1),
 * else 0. Operand a is cond, b is dy. */
EM_GLOBAL void em_binary_where_grad_f32(int which, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                        const unsigned char *cond, const float *dy, float *out) {
  typedef unsigned char bt_a_;
  typedef float bt_b_;
  EM_BIN_NO_C;
  EM_BIN_LOOP(cond, dy, (a_ != 0) != (which != 0) ? b_ : 0.0f)
}

EM_GLOBAL void em_binary_where_grad_f64(int which, em_i64 n, EM_BIN_DIMS, EM_BIN_STRIDES(a), EM_BIN_STRIDES(b),
                                        const unsigned char *cond, const double *dy, double *out) {
  typedef unsigned char bt_a_;
  typedef double bt_b_;
  EM_BIN_NO_C;
  EM_BIN_LOOP(cond, dy, (a_ != 0) != (which != 0) ? b_ : 0.0)
}
