/* Binary op family: elementwise ops on two (where: three) inputs under numpy
 * broadcasting (shapes aligned on the right; an axis of size 1 or a missing
 * one stretches). All inputs of an arithmetic or comparison op share one
 * dtype: a mismatch is an error naming both dtypes (no implicit promotion).
 *
 *   add sub mul max min (x, y)   f32 f64 i32 i64. Integer add/sub/mul wrap around (two's complement).
 *                                max/min propagate NaN. Gradient of max goes to x where x >= y and to y
 *                                elsewhere (a tie sends it to x only); min: to x where x <= y.
 *   div (x, y)                   f32 f64 (IEEE: x/0 is ±inf or NaN) and i32 i64, where the quotient is
 *                                truncated toward zero as in C; an integer x/0 gives 0 and INT_MIN/-1
 *                                gives INT_MIN (wraps), so no input can trap.
 *   pow (x, y)                   f32 f64 only. Gradient: dx = dy*y*x^(y-1) (0 where y == 0),
 *                                dy_exp = dy*x^y*log(x) where x > 0, defined as 0 where x <= 0.
 *   mod (x, y)  attr fmod=0|1    ONNX Mod. fmod=0 (default): the remainder has the sign of y (numpy,
 *                                Python); fmod=1: the sign of x (C fmod / %). f32 f64 i32 i64 (fmod=0 is
 *                                also accepted for floats, numpy style). Integer x mod 0 gives 0.
 *                                Gradient: dx = dy, dy_mod = -dy*floor(x/y) (fmod=1: trunc(x/y)).
 *   equal less greater less_equal greater_equal (x, y)
 *                                any of f32 f64 i32 i64 u8 bool, same dtype; output bool; no gradient.
 *   and or xor (x, y), not (x)   bool inputs (0 false, anything else true), bool output.
 *   where (cond, x, y)           cond bool; x and y one dtype (any); all three broadcast together.
 *                                Gradient: to x where cond, to y elsewhere.
 *
 * Internal gradient ops (no backward of their own):
 *   _binary_grad (dy, x, y) attrs fn ("div" "pow" "max" "min" "mod"), which (0: d/dx, 1: d/dy),
 *                fmod (mod only); or (dy) with fn "neg": -dy. The product of dy with the partial
 *                derivative, at the broadcast shape; the caller reduces it with sum_to.
 *   _where_grad (cond, dy) attr which: dy where cond (which=0) or where not cond (which=1), else 0.
 *
 * Speed: the CPU kernels first merge the output axes along which every input
 * is laid out contiguously (or stays broadcast), so a same-shape op is one flat
 * loop, tensor-with-scalar is a flat loop with a scalar, [N,C] + [C] is rows
 * with a contiguous inner vector. Inner loops are specialised for unit and
 * zero strides so the compiler vectorises them; the general N-d case walks an
 * odometer over the outer axes. Output elements are split in fixed chunks
 * among threads: no op here reduces, so results never depend on the thread
 * count.
 *
 * Devices: every element is computed by kernels/binary_math.h, which these
 * loops and the GPU kernels (kernels/binary.cu, launched by ops/binary_gpu.c)
 * share, so a GPU gives the CPU's bits in both modes (NaN payloads of + - * /
 * aside: the hardware picks them). f32 pow is em_math's em_powf, fmod /
 * floor / trunc are binary_math.h's exact ones; f64 pow (and log in its
 * gradient) stay libm's and run on the CPU whatever the device. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "op.h"
#include "binary_gpu.h"
#include "../kernels/binary_math.h"

/* ================================================= broadcasting engine === */

#define BC_MAX_IN 3
/* Output elements per parallel work item: big enough to amortise the start
 * (an unravel of the first index), small enough to balance threads. */
#define BC_CHUNK 16384

/* Computes out[i] for `len` consecutive output elements; in[k] points at
 * input k's element for the first of them and st[k] is its stride (in
 * elements) from one output element to the next. */
typedef void (*bc_inner_fn)(char *out, const char *const *in, const int64_t *st, int64_t len);

typedef struct bc_plan {
  int n_in, ndim;
  int64_t numel;
  int64_t dims[EM_MAX_DIMS];              /* merged output axes */
  int64_t st[BC_MAX_IN][EM_MAX_DIMS];     /* input strides along them (0: broadcast) */
  size_t isz[BC_MAX_IN], osz;
} bc_plan;

/* Plans the walk of a dense output (contiguous, or channels-last: exec.c) in its memory order
 * over inputs that broadcast to it, each with its own strides: strides per output axis, then
 * axes of size 1 dropped and neighbouring axes merged wherever every input steps through them
 * as one. */
static void bc_plan_make(bc_plan *p, const em_tensor *out, em_tensor *const *in, int n_in) {
  int nd = em_tensor_ndim(out);
  const int64_t *od = em_tensor_shape(out), *ost = em_tensor_strides(out);
  int64_t st[BC_MAX_IN][EM_MAX_DIMS];
  p->n_in = n_in;
  p->osz = em_dtype_size(em_tensor_dtype(out));
  p->numel = em_tensor_numel(out);
  for (int k = 0; k < n_in; k++) {
    int ndk = em_tensor_ndim(in[k]);
    const int64_t *sd = em_tensor_shape(in[k]), *ss = em_tensor_strides(in[k]);
    for (int i = nd - 1; i >= 0; i--) {
      int ik = i - (nd - ndk);
      int64_t d = ik >= 0 ? sd[ik] : 1;
      st[k][i] = d == 1 ? 0 : ss[ik];
    }
    p->isz[k] = em_dtype_size(em_tensor_dtype(in[k]));
  }
  /* The output's axes from its largest stride to its smallest: its memory order (the identity
   * for a contiguous output; N, spatial..., C for a channels-last one). Insertion sort, stable. */
  int ord[EM_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    int j = i;
    for (; j > 0 && ost[ord[j - 1]] < ost[i]; j--) ord[j] = ord[j - 1];
    ord[j] = i;
  }
  int m = 0;
  for (int oi = 0; oi < nd; oi++) {
    const int i = ord[oi];
    if (od[i] == 1) continue;
    int merge = m > 0;
    for (int k = 0; k < n_in && merge; k++) merge = p->st[k][m - 1] == st[k][i] * od[i];
    if (merge) {
      p->dims[m - 1] *= od[i];
      for (int k = 0; k < n_in; k++) p->st[k][m - 1] = st[k][i];
    } else {
      p->dims[m] = od[i];
      for (int k = 0; k < n_in; k++) p->st[k][m] = st[k][i];
      m++;
    }
  }
  if (m == 0) { /* a scalar, or all axes of size 1: one element */
    p->dims[0] = 1;
    for (int k = 0; k < n_in; k++) p->st[k][0] = 0;
    m = 1;
  }
  p->ndim = m;
}

/* Output elements [lo, hi): unravel lo once, then hand the inner kernel runs
 * along the last merged axis, advancing an odometer over the others. */
static void bc_run_range(const bc_plan *p, bc_inner_fn fn, char *out, const char *const *in, int64_t lo, int64_t hi) {
  int last = p->ndim - 1;
  int64_t idx[EM_MAX_DIMS], off[BC_MAX_IN] = {0}, step[BC_MAX_IN];
  int64_t rest = lo;
  for (int d = last; d >= 0; d--) {
    idx[d] = rest % p->dims[d];
    rest /= p->dims[d];
    for (int k = 0; k < p->n_in; k++) off[k] += idx[d] * p->st[k][d];
  }
  for (int k = 0; k < p->n_in; k++) step[k] = p->st[k][last];
  int64_t inner = p->dims[last];
  for (int64_t pos = lo; pos < hi;) {
    int64_t len = inner - idx[last];
    if (len > hi - pos) len = hi - pos;
    const char *ip[BC_MAX_IN];
    for (int k = 0; k < p->n_in; k++) ip[k] = in[k] + off[k] * (int64_t)p->isz[k];
    fn(out + pos * (int64_t)p->osz, ip, step, len);
    pos += len;
    idx[last] += len;
    for (int k = 0; k < p->n_in; k++) off[k] += len * step[k];
    if (idx[last] < inner) continue;
    idx[last] = 0;
    for (int k = 0; k < p->n_in; k++) off[k] -= inner * step[k];
    for (int d = last - 1; d >= 0; d--) {
      idx[d]++;
      for (int k = 0; k < p->n_in; k++) off[k] += p->st[k][d];
      if (idx[d] < p->dims[d]) break;
      for (int k = 0; k < p->n_in; k++) off[k] -= p->dims[d] * p->st[k][d];
      idx[d] = 0;
    }
  }
}

/* Runs fn over the whole output, chunks of it in parallel. */
static void bc_run(const bc_plan *p, bc_inner_fn fn, char *out, const char *const *in) {
  int64_t n = p->numel;
  if (n <= 0) return;
  int64_t chunks = (n + BC_CHUNK - 1) / BC_CHUNK;
#pragma omp parallel for schedule(static) num_threads(em_cpu_threads()) if (n > 32768)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t lo = c * BC_CHUNK, hi = lo + BC_CHUNK < n ? lo + BC_CHUNK : n;
    bc_run_range(p, fn, out, in, lo, hi);
  }
}

/* Plans and runs fn with out[0] as output and in[0..n_in) as inputs. */
static void bc_apply(bc_inner_fn fn, em_tensor *const *in, int n_in, em_tensor *out) {
  bc_plan p;
  const char *ip[BC_MAX_IN];
  bc_plan_make(&p, out, in, n_in);
  for (int k = 0; k < n_in; k++) ip[k] = em_tensor_data(in[k]);
  bc_run(&p, fn, em_tensor_data(out), ip);
}

/* ======================================================= inner kernels === */

/* A two-input inner kernel: EXPR computes the output from `a` (input 0) and
 * `b` (input 1). Unit/zero stride pairs get their own loops so they
 * vectorise; `omp simd` is valid even when the output is input 0's buffer
 * (in place), since element i only reads element i. */
#define BC_BIN(NAME, T0, T1, TO, EXPR)                                                                     \
  static void NAME(char *o_, const char *const *in, const int64_t *st, int64_t n) {                        \
    TO *o = (TO *)(void *)o_;                                                                              \
    const T0 *x0 = (const T0 *)(const void *)in[0];                                                        \
    const T1 *x1 = (const T1 *)(const void *)in[1];                                                        \
    if (st[0] == 1 && st[1] == 1) {                                                                        \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                \
        T0 a = x0[i];                                                                                      \
        T1 b = x1[i];                                                                                      \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    } else if (st[0] == 1 && st[1] == 0) {                                                                 \
      const T1 b = x1[0];                                                                                  \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                \
        T0 a = x0[i];                                                                                      \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    } else if (st[0] == 0 && st[1] == 1) {                                                                 \
      const T0 a = x0[0];                                                                                  \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                \
        T1 b = x1[i];                                                                                      \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    } else {                                                                                               \
      for (int64_t i = 0; i < n; i++) {                                                                    \
        T0 a = x0[i * st[0]];                                                                              \
        T1 b = x1[i * st[1]];                                                                              \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    }                                                                                                      \
  }

/* A three-input inner kernel: EXPR reads `g` (input 0), `a` (input 1) and
 * `b` (input 2). Fast paths: all contiguous, and one of a/b a scalar run. */
#define BC_TER(NAME, T0, T1, T2, TO, EXPR)                                                                 \
  static void NAME(char *o_, const char *const *in, const int64_t *st, int64_t n) {                        \
    TO *o = (TO *)(void *)o_;                                                                              \
    const T0 *x0 = (const T0 *)(const void *)in[0];                                                        \
    const T1 *x1 = (const T1 *)(const void *)in[1];                                                        \
    const T2 *x2 = (const T2 *)(const void *)in[2];                                                        \
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {                                                          \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                \
        T0 g = x0[i];                                                                                      \
        T1 a = x1[i];                                                                                      \
        T2 b = x2[i];                                                                                      \
        (void)g, (void)a, (void)b; /* an EXPR need not use all three */                                    \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {                                                   \
      const T2 b = x2[0];                                                                                  \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                \
        T0 g = x0[i];                                                                                      \
        T1 a = x1[i];                                                                                      \
        (void)g, (void)a, (void)b; /* an EXPR need not use all three */                                    \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {                                                   \
      const T1 a = x1[0];                                                                                  \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                \
        T0 g = x0[i];                                                                                      \
        T2 b = x2[i];                                                                                      \
        (void)g, (void)a, (void)b; /* an EXPR need not use all three */                                    \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    } else {                                                                                               \
      for (int64_t i = 0; i < n; i++) {                                                                    \
        T0 g = x0[i * st[0]];                                                                              \
        T1 a = x1[i * st[1]];                                                                              \
        T2 b = x2[i * st[2]];                                                                              \
        (void)g, (void)a, (void)b; /* an EXPR need not use all three */                                    \
        o[i] = (TO)(EXPR);                                                                                 \
      }                                                                                                    \
    }                                                                                                      \
  }

/* ---- per-element arithmetic: kernels/binary_math.h, shared with the kernels ---- */

/* f64 pow stays libm's (binary_math.h: no portable f64 pow; the GPU hands it
 * back to the CPU). */
static inline double pow_libm_f64(double a, double b) { return pow(a, b); }

/* ---- arithmetic ---- */

#define FLOAT_ARITH(SUF, T, POW)                                                                           \
  BC_BIN(add_##SUF, T, T, T, em_bin_add_##SUF(a, b))                                                       \
  BC_BIN(sub_##SUF, T, T, T, em_bin_sub_##SUF(a, b))                                                       \
  BC_BIN(mul_##SUF, T, T, T, em_bin_mul_##SUF(a, b))                                                       \
  BC_BIN(div_k_##SUF, T, T, T, em_bin_div_##SUF(a, b))                                                     \
  BC_BIN(pow_##SUF, T, T, T, POW(a, b))                                                                    \
  BC_BIN(max_##SUF, T, T, T, em_bin_max_##SUF(a, b))                                                       \
  BC_BIN(min_##SUF, T, T, T, em_bin_min_##SUF(a, b))                                                       \
  BC_BIN(mod_##SUF, T, T, T, em_bin_pymod_##SUF(a, b))                                                     \
  BC_BIN(fmod_##SUF, T, T, T, em_bin_fmod_##SUF(a, b))
FLOAT_ARITH(f32, float, em_powf)
FLOAT_ARITH(f64, double, pow_libm_f64)

/* Integers wrap (add/sub/mul) and never trap (div, mod): binary_math.h. */
#define INT_ARITH(SUF, T)                                                                                  \
  BC_BIN(add_##SUF, T, T, T, em_bin_add_##SUF(a, b))                                                       \
  BC_BIN(sub_##SUF, T, T, T, em_bin_sub_##SUF(a, b))                                                       \
  BC_BIN(mul_##SUF, T, T, T, em_bin_mul_##SUF(a, b))                                                       \
  BC_BIN(div_k_##SUF, T, T, T, em_bin_div_##SUF(a, b))                                                     \
  BC_BIN(max_##SUF, T, T, T, em_bin_max_##SUF(a, b))                                                       \
  BC_BIN(min_##SUF, T, T, T, em_bin_min_##SUF(a, b))                                                       \
  BC_BIN(mod_##SUF, T, T, T, em_bin_pymod_##SUF(a, b))                                                     \
  BC_BIN(fmod_##SUF, T, T, T, em_bin_cmod_##SUF(a, b))
INT_ARITH(i32, int32_t)
INT_ARITH(i64, int64_t)

/* ---- comparisons (bool output) ---- */

#define COMPARE(SUF, T)                                                                                    \
  BC_BIN(eq_##SUF, T, T, uint8_t, a == b)                                                                  \
  BC_BIN(lt_##SUF, T, T, uint8_t, a < b)                                                                   \
  BC_BIN(gt_##SUF, T, T, uint8_t, a > b)                                                                   \
  BC_BIN(le_##SUF, T, T, uint8_t, a <= b)                                                                  \
  BC_BIN(ge_##SUF, T, T, uint8_t, a >= b)
COMPARE(f32, float)
COMPARE(f64, double)
COMPARE(i32, int32_t)
COMPARE(i64, int64_t)
COMPARE(u8, uint8_t)
/* bool: any nonzero byte is true, so compare truth values. */
BC_BIN(eq_bool, uint8_t, uint8_t, uint8_t, (a != 0) == (b != 0))
BC_BIN(lt_bool, uint8_t, uint8_t, uint8_t, (a != 0) < (b != 0))
BC_BIN(gt_bool, uint8_t, uint8_t, uint8_t, (a != 0) > (b != 0))
BC_BIN(le_bool, uint8_t, uint8_t, uint8_t, (a != 0) <= (b != 0))
BC_BIN(ge_bool, uint8_t, uint8_t, uint8_t, (a != 0) >= (b != 0))

/* ---- logic ---- */

BC_BIN(and_bool, uint8_t, uint8_t, uint8_t, (a != 0) & (b != 0))
BC_BIN(or_bool, uint8_t, uint8_t, uint8_t, (a != 0) | (b != 0))
BC_BIN(xor_bool, uint8_t, uint8_t, uint8_t, (a != 0) ^ (b != 0))

/* ---- where: a copy by element size keeps every bit (NaN payloads) ---- */

BC_TER(where_1, uint8_t, uint8_t, uint8_t, uint8_t, g ? a : b)
BC_TER(where_2, uint8_t, uint16_t, uint16_t, uint16_t, g ? a : b)
BC_TER(where_4, uint8_t, uint32_t, uint32_t, uint32_t, g ? a : b)
BC_TER(where_8, uint8_t, uint64_t, uint64_t, uint64_t, g ? a : b)

/* ---- gradients (float only): g = dy, a = x, b = y ---- */

#define FLOAT_GRADS(SUF, T)                                                                                \
  BC_TER(g_div0_##SUF, T, T, T, T, g / b)                                                                  \
  BC_TER(g_div1_##SUF, T, T, T, T, em_bgrad_div1_##SUF(g, a, b))                                           \
  BC_TER(g_max0_##SUF, T, T, T, T, a >= b ? g : (T)0)                                                      \
  BC_TER(g_max1_##SUF, T, T, T, T, a >= b ? (T)0 : g)                                                      \
  BC_TER(g_min0_##SUF, T, T, T, T, a <= b ? g : (T)0)                                                      \
  BC_TER(g_min1_##SUF, T, T, T, T, a <= b ? (T)0 : g)                                                      \
  BC_TER(g_mod0_##SUF, T, T, T, T, g)                                                                      \
  BC_TER(g_pymod1_##SUF, T, T, T, T, em_bgrad_pymod1_##SUF(g, a, b))                                       \
  BC_TER(g_fmod1_##SUF, T, T, T, T, em_bgrad_fmod1_##SUF(g, a, b))                                         \
  BC_BIN(g_wh0_##SUF, uint8_t, T, T, a ? b : (T)0)                                                         \
  BC_BIN(g_wh1_##SUF, uint8_t, T, T, a ? (T)0 : b)
FLOAT_GRADS(f32, float)
FLOAT_GRADS(f64, double)
BC_TER(g_pow0_f32, float, float, float, float, em_bgrad_pow0_f32(g, a, b))
BC_TER(g_pow1_f32, float, float, float, float, em_bgrad_pow1_f32(g, a, b))
/* f64: libm's pow and log, CPU only (see pow_libm_f64). */
BC_TER(g_pow0_f64, double, double, double, double, b == 0 ? 0.0 : g * b * pow(a, b - 1))
BC_TER(g_pow1_f64, double, double, double, double, a > 0 ? g * pow(a, b) * log(a) : 0.0)

/* ====================================================== op catalogue === */

/* The kernels' op codes (binary_math.h), so the GPU members pass them on. */
typedef enum bop {
  OP_ADD = EM_BIN_ADD, OP_SUB = EM_BIN_SUB, OP_MUL = EM_BIN_MUL, OP_DIV = EM_BIN_DIV, OP_POW = EM_BIN_POW,
  OP_MAX = EM_BIN_MAX, OP_MIN = EM_BIN_MIN, OP_MOD = EM_BIN_MOD,
  OP_EQ = EM_BIN_EQ, OP_LT = EM_BIN_LT, OP_GT = EM_BIN_GT, OP_LE = EM_BIN_LE, OP_GE = EM_BIN_GE,
  OP_AND = EM_BIN_AND, OP_OR = EM_BIN_OR, OP_XOR = EM_BIN_XOR,
  OP_COUNT
} bop;
_Static_assert(OP_COUNT == EM_BIN_XOR + 1, "the op codes are binary_math.h's, in order");

static const char *const op_names[OP_COUNT] = {
  "add", "sub", "mul", "div", "pow", "max", "min", "mod",
  "equal", "less", "greater", "less_equal", "greater_equal",
  "and", "or", "xor",
};

static bop op_code(const em_op_args *a) {
  for (int i = 0; i < OP_COUNT; i++)
    if (!strcmp(a->def->name, op_names[i])) return (bop)i;
  return OP_COUNT;
}

/* Column of a dtype in the kernel tables; -1: none. */
enum { DT_F32, DT_F64, DT_I32, DT_I64, DT_U8, DT_BOOL, DT_COUNT };
static int dt_col(em_dtype t) {
  switch (t) {
  case EM_F32: return DT_F32;
  case EM_F64: return DT_F64;
  case EM_I32: return DT_I32;
  case EM_I64: return DT_I64;
  case EM_U8: return DT_U8;
  case EM_BOOL: return DT_BOOL;
  default: return -1;
  }
}

/* Kernels per op and dtype; NULL: the dtype is refused (by infer). The mod
 * row is fmod=0; fmod=1 uses fmod_kernels. */
static const bc_inner_fn kernels[OP_COUNT][DT_COUNT] = {
  [OP_ADD] = {add_f32, add_f64, add_i32, add_i64},
  [OP_SUB] = {sub_f32, sub_f64, sub_i32, sub_i64},
  [OP_MUL] = {mul_f32, mul_f64, mul_i32, mul_i64},
  [OP_DIV] = {div_k_f32, div_k_f64, div_k_i32, div_k_i64},
  [OP_POW] = {pow_f32, pow_f64},
  [OP_MAX] = {max_f32, max_f64, max_i32, max_i64},
  [OP_MIN] = {min_f32, min_f64, min_i32, min_i64},
  [OP_MOD] = {mod_f32, mod_f64, mod_i32, mod_i64},
  [OP_EQ] = {eq_f32, eq_f64, eq_i32, eq_i64, eq_u8, eq_bool},
  [OP_LT] = {lt_f32, lt_f64, lt_i32, lt_i64, lt_u8, lt_bool},
  [OP_GT] = {gt_f32, gt_f64, gt_i32, gt_i64, gt_u8, gt_bool},
  [OP_LE] = {le_f32, le_f64, le_i32, le_i64, le_u8, le_bool},
  [OP_GE] = {ge_f32, ge_f64, ge_i32, ge_i64, ge_u8, ge_bool},
  [OP_AND] = {[DT_BOOL] = and_bool},
  [OP_OR] = {[DT_BOOL] = or_bool},
  [OP_XOR] = {[DT_BOOL] = xor_bool},
};
static const bc_inner_fn fmod_kernels[DT_COUNT] = {fmod_f32, fmod_f64, fmod_i32, fmod_i64};

/* What each op accepts, for the error message. */
static const char *accepted(bop op) {
  switch (op) {
  case OP_POW: return "f32 or f64";
  case OP_AND: case OP_OR: case OP_XOR: return "bool";
  case OP_EQ: case OP_LT: case OP_GT: case OP_LE: case OP_GE: return "f32, f64, i32, i64, u8 or bool";
  default: return "f32, f64, i32 or i64";
  }
}

static int is_float(em_dtype t) { return t == EM_F32 || t == EM_F64; }

/* ================================================== the public ops === */

/* Both inputs one dtype, one this op has a kernel for. */
static em_status check_dtypes(const em_op_args *a, bop op) {
  em_dtype tx = a->in[0].dtype, ty = a->in[1].dtype;
  if (tx != ty)
    return em_op_fail(a, "dtype mismatch: %s vs %s (both inputs must have the same dtype, one of %s)",
                      em_dtype_name(tx), em_dtype_name(ty), accepted(op));
  int c = dt_col(tx);
  if (c < 0 || !kernels[op][c])
    return em_op_fail(a, "dtype %s is not supported (expected %s)", em_dtype_name(tx), accepted(op));
  return EM_OK;
}

static em_status binary_infer(em_op_args *a) {
  bop op = op_code(a);
  if (op == OP_COUNT) return em_op_fail(a, "not an op of the binary family");
  em_status s = check_dtypes(a, op);
  if (s) return s;
  if (op == OP_MOD) {
    int64_t f = em_attr_int(a, "fmod", 0);
    if (f != 0 && f != 1) return em_op_fail(a, "attribute fmod = %lld, expected 0 or 1", (long long)f);
  }
  s = em_broadcast_shapes(a, &a->in[0], &a->in[1], &a->out[0]);
  if (s) return s;
  a->out[0].dtype = op >= OP_EQ ? EM_BOOL : a->in[0].dtype;
  return EM_OK;
}

static em_status binary_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bop op = op_code(a);
  int c = dt_col(em_tensor_dtype(in[0]));
  if (op == OP_COUNT || c < 0 || !kernels[op][c]) return em_op_fail(a, "no CPU kernel");
  bc_inner_fn fn = op == OP_MOD && em_attr_int(a, "fmod", 0) == 1 ? fmod_kernels[c] : kernels[op][c];
  bc_apply(fn, in, 2, out[0]);
  return EM_OK;
}

/* Element-wise with broadcasting: the walk (bc_plan_make) follows the output's memory order
 * and each input's own strides, so inputs may come in any layout; the output is channels-last
 * where an input of the output's shape is (a residual add of two such values, x * sigmoid(x)),
 * so that element-wise chains keep the layout the convolutions gave them. */
static em_status binary_layout(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c) {
  c->as_is = a->n_in >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << a->n_in) - 1;
  c->out_channels_last = 0;
  for (int k = 0; k < a->n_in && out_may; k++)
    if (!em_tensor_is_contiguous(in[k]) && em_tensor_is_channels_last(in[k]) &&
        em_tensor_ndim(in[k]) == a->out[0].ndim &&
        !memcmp(em_tensor_shape(in[k]), a->out[0].dims, sizeof(int64_t) * (size_t)a->out[0].ndim))
      c->out_channels_last = 1;
  return EM_OK;
}

int em_binary_op_code(const em_op_args *a) {
  bop op = op_code(a);
  if (op == OP_COUNT) return -1;
  return op == OP_MOD && em_attr_int(a, "fmod", 0) == 1 ? EM_BIN_FMOD : (int)op;
}

/* not: one bool input, flat. */
static em_status not_infer(em_op_args *a) {
  if (a->in[0].dtype != EM_BOOL)
    return em_op_fail(a, "dtype %s is not supported (expected bool)", em_dtype_name(a->in[0].dtype));
  a->out[0] = a->in[0];
  return EM_OK;
}

static em_status not_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  (void)a;
  int64_t n = em_tensor_numel(in[0]);
  const uint8_t *x = em_tensor_data(in[0]);
  uint8_t *y = em_tensor_data(out[0]);
#pragma omp parallel for simd schedule(static) num_threads(em_cpu_threads()) if (n > 32768)
  for (int64_t i = 0; i < n; i++) y[i] = x[i] == 0;
  return EM_OK;
}

static em_status where_infer(em_op_args *a) {
  if (a->in[0].dtype != EM_BOOL)
    return em_op_fail(a, "the condition (input 0) must be bool, not %s", em_dtype_name(a->in[0].dtype));
  if (a->in[1].dtype != a->in[2].dtype)
    return em_op_fail(a, "dtype mismatch: %s vs %s (x and y must have the same dtype)", em_dtype_name(a->in[1].dtype),
                      em_dtype_name(a->in[2].dtype));
  if (!em_dtype_size(a->in[1].dtype))
    return em_op_fail(a, "unknown dtype %d", (int)a->in[1].dtype);
  em_shape t;
  em_status s = em_broadcast_shapes(a, &a->in[0], &a->in[1], &t);
  if (!s) s = em_broadcast_shapes(a, &t, &a->in[2], &a->out[0]);
  if (s) return s;
  a->out[0].dtype = a->in[1].dtype;
  return EM_OK;
}

static em_status where_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  bc_inner_fn fn;
  switch (em_dtype_size(em_tensor_dtype(in[1]))) {
  case 1: fn = where_1; break;
  case 2: fn = where_2; break;
  case 4: fn = where_4; break;
  case 8: fn = where_8; break;
  default: return em_op_fail(a, "no CPU kernel for this element size");
  }
  bc_apply(fn, in, 3, out[0]);
  return EM_OK;
}

/* ============================================ internal gradient ops === */

typedef enum gfn { G_NEG, G_DIV, G_POW, G_MAX, G_MIN, G_MOD, G_COUNT } gfn;
static const char *const gfn_names[G_COUNT] = {"neg", "div", "pow", "max", "min", "mod"};

static gfn gfn_code(const char *s) {
  for (int i = 0; i < G_COUNT; i++)
    if (s && !strcmp(s, gfn_names[i])) return (gfn)i;
  return G_COUNT;
}

/* [fn][which][f64?]; mod's which=1 depends on fmod and is picked apart. */
static const bc_inner_fn grad_kernels[G_COUNT][2][2] = {
  [G_DIV] = {{g_div0_f32, g_div0_f64}, {g_div1_f32, g_div1_f64}},
  [G_POW] = {{g_pow0_f32, g_pow0_f64}, {g_pow1_f32, g_pow1_f64}},
  [G_MAX] = {{g_max0_f32, g_max0_f64}, {g_max1_f32, g_max1_f64}},
  [G_MIN] = {{g_min0_f32, g_min0_f64}, {g_min1_f32, g_min1_f64}},
  [G_MOD] = {{g_mod0_f32, g_mod0_f64}, {g_pymod1_f32, g_pymod1_f64}},
};

static em_status binary_grad_infer(em_op_args *a) {
  const char *fs = em_attr_str(a, "fn", NULL);
  gfn f = gfn_code(fs);
  if (f == G_COUNT)
    return em_op_fail(a, "attribute fn = '%s', expected neg, div, pow, max, min or mod", fs ? fs : "(absent)");
  int want = f == G_NEG ? 1 : 3;
  if (a->n_in != want) return em_op_fail(a, "fn '%s' takes %d inputs, %d given", fs, want, a->n_in);
  int64_t which = em_attr_int(a, "which", 0), fm = em_attr_int(a, "fmod", 0);
  if (which != 0 && which != 1) return em_op_fail(a, "attribute which = %lld, expected 0 or 1", (long long)which);
  if (fm != 0 && fm != 1) return em_op_fail(a, "attribute fmod = %lld, expected 0 or 1", (long long)fm);
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i].dtype != a->in[0].dtype || !is_float(a->in[i].dtype))
      return em_op_fail(a, "inputs must all be f32 or all be f64");
  a->out[0] = a->in[0];
  for (int i = 1; i < a->n_in; i++) {
    em_shape t = a->out[0];
    em_status s = em_broadcast_shapes(a, &t, &a->in[i], &a->out[0]);
    if (s) return s;
  }
  a->out[0].dtype = a->in[0].dtype;
  return EM_OK;
}

static em_status binary_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  gfn f = gfn_code(em_attr_str(a, "fn", NULL));
  int which = em_attr_int(a, "which", 0) == 1, d64 = em_tensor_dtype(in[0]) == EM_F64;
  if (f == G_NEG) {
    int64_t n = em_tensor_numel(in[0]);
    if (d64) {
      const double *x = em_tensor_data(in[0]);
      double *y = em_tensor_data(out[0]);
#pragma omp parallel for simd schedule(static) num_threads(em_cpu_threads()) if (n > 32768)
      for (int64_t i = 0; i < n; i++) y[i] = -x[i];
    } else {
      const float *x = em_tensor_data(in[0]);
      float *y = em_tensor_data(out[0]);
#pragma omp parallel for simd schedule(static) num_threads(em_cpu_threads()) if (n > 32768)
      for (int64_t i = 0; i < n; i++) y[i] = -x[i];
    }
    return EM_OK;
  }
  if (f == G_COUNT) return em_op_fail(a, "no CPU kernel");
  bc_inner_fn fn = grad_kernels[f][which][d64];
  if (f == G_MOD && which && em_attr_int(a, "fmod", 0) == 1) fn = d64 ? g_fmod1_f64 : g_fmod1_f32;
  bc_apply(fn, in, 3, out[0]);
  return EM_OK;
}

int em_binary_grad_code(const em_op_args *a) {
  gfn f = gfn_code(em_attr_str(a, "fn", NULL));
  int which = em_attr_int(a, "which", 0) == 1;
  switch (f) {
  case G_NEG: return EM_BGRAD_NEG;
  case G_DIV: return which ? EM_BGRAD_DIV1 : EM_BGRAD_DIV0;
  case G_POW: return which ? EM_BGRAD_POW1 : EM_BGRAD_POW0;
  case G_MAX: return which ? EM_BGRAD_MAX1 : EM_BGRAD_MAX0;
  case G_MIN: return which ? EM_BGRAD_MIN1 : EM_BGRAD_MIN0;
  case G_MOD:
    if (!which) return EM_BGRAD_MOD0;
    return em_attr_int(a, "fmod", 0) == 1 ? EM_BGRAD_FMOD1 : EM_BGRAD_PYMOD1;
  default: return -1;
  }
}

static em_status where_grad_infer(em_op_args *a) {
  int64_t which = em_attr_int(a, "which", 0);
  if (which != 0 && which != 1) return em_op_fail(a, "attribute which = %lld, expected 0 or 1", (long long)which);
  if (a->in[0].dtype != EM_BOOL || !is_float(a->in[1].dtype))
    return em_op_fail(a, "expects a bool condition and an f32 or f64 gradient");
  em_status s = em_broadcast_shapes(a, &a->in[0], &a->in[1], &a->out[0]);
  a->out[0].dtype = a->in[1].dtype;
  return s;
}

static em_status where_grad_cpu(const em_op_args *a, em_tensor *const *in, em_tensor *const *out) {
  int which = em_attr_int(a, "which", 0) == 1, d64 = em_tensor_dtype(in[1]) == EM_F64;
  static const bc_inner_fn k[2][2] = {{g_wh0_f32, g_wh0_f64}, {g_wh1_f32, g_wh1_f64}};
  bc_apply(k[which][d64], in, 2, out[0]);
  return EM_OK;
}

/* =========================================================== backward === */

/* t = op(inputs) with the given attributes, then reduced to like's shape. */
static em_status apply_sum_to(em_graph *g, const char *op, const em_var *in, int n_in, const em_attr *at, int n_at,
                              em_var like, em_var *out) {
  em_var t;
  em_status s = em_apply(g, op, in, n_in, at, n_at, &t, 1);
  return s ? s : em_sum_to(g, t, like, out);
}

/* Second order: _where_grad masks dy, and masking is its own adjoint: the
 * incoming gradient masked the same way, reduced to dy's shape. */
static em_status where_grad_back(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                 em_var *din) {
  (void)y;
  if (dy[0] < 0) return EM_OK;
  em_var in[2] = {x[0], dy[0]};
  return apply_sum_to(g, "_where_grad", in, 2, a->attrs, a->n_attrs, x[1], &din[1]);
}

/* _binary_grad(dy, x, y) for fn/which, reduced to the shape of input `which`. */
static em_status fused_grad(em_graph *g, const char *fn, int which, int64_t fmod, const em_var *x, em_var dy,
                            em_var *out) {
  em_attr at[3] = {
    {.name = "fn", .type = EM_ATTR_STRING, .s = fn},
    {.name = "which", .type = EM_ATTR_INT, .i = which},
    {.name = "fmod", .type = EM_ATTR_INT, .i = fmod},
  };
  em_var in[3] = {dy, x[0], x[1]};
  return apply_sum_to(g, "_binary_grad", in, 3, at, 3, x[which], out);
}

static em_status binary_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                 em_var *din) {
  (void)y;
  if (dy[0] < 0 || !is_float(a->in[0].dtype)) return EM_OK; /* integer results carry no gradient */
  em_status s = EM_OK;
  em_var t;
  switch (op_code(a)) {
  case OP_ADD:
    s = em_sum_to(g, dy[0], x[0], &din[0]);
    if (!s) s = em_sum_to(g, dy[0], x[1], &din[1]);
    break;
  case OP_SUB: {
    /* Reduce first, then negate: the negation touches the smaller tensor. */
    em_attr at = {.name = "fn", .type = EM_ATTR_STRING, .s = "neg"};
    s = em_sum_to(g, dy[0], x[0], &din[0]);
    if (!s) s = em_sum_to(g, dy[0], x[1], &t);
    if (!s) s = em_apply(g, "_binary_grad", &t, 1, &at, 1, &din[1], 1);
    break;
  }
  case OP_MUL: {
    em_var p0[2] = {dy[0], x[1]}, p1[2] = {dy[0], x[0]};
    s = apply_sum_to(g, "mul", p0, 2, NULL, 0, x[0], &din[0]);
    if (!s) s = apply_sum_to(g, "mul", p1, 2, NULL, 0, x[1], &din[1]);
    break;
  }
  case OP_DIV: {
    em_var p0[2] = {dy[0], x[1]};
    s = apply_sum_to(g, "div", p0, 2, NULL, 0, x[0], &din[0]);
    if (!s) s = fused_grad(g, "div", 1, 0, x, dy[0], &din[1]);
    break;
  }
  case OP_POW:
  case OP_MAX:
  case OP_MIN: {
    const char *fn = op_code(a) == OP_POW ? "pow" : op_code(a) == OP_MAX ? "max" : "min";
    s = fused_grad(g, fn, 0, 0, x, dy[0], &din[0]);
    if (!s) s = fused_grad(g, fn, 1, 0, x, dy[0], &din[1]);
    break;
  }
  case OP_MOD:
    s = em_sum_to(g, dy[0], x[0], &din[0]);
    if (!s) s = fused_grad(g, "mod", 1, em_attr_int(a, "fmod", 0), x, dy[0], &din[1]);
    break;
  default: break; /* comparisons and logic: no gradient */
  }
  return s;
}

static em_status where_backward(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                                em_var *din) {
  (void)y;
  if (dy[0] < 0 || !is_float(a->in[1].dtype)) return EM_OK;
  em_var in[2] = {x[0], dy[0]};
  em_status s = EM_OK;
  for (int which = 0; which < 2 && !s; which++) {
    em_attr at = {.name = "which", .type = EM_ATTR_INT, .i = which};
    s = apply_sum_to(g, "_where_grad", in, 2, &at, 1, x[1 + which], &din[1 + which]);
  }
  return s;
}

/* ============================================================== table === */

#define ARITH(NAME, DOC)                                                                                   \
  {.name = NAME, .doc = DOC, .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .inplace = 1,               \
   .infer = binary_infer, .cpu = binary_cpu, .gpu = em_binary_gpu, .backward = binary_backward,              \
   .attrs = EM_NO_ATTRS, .layout = binary_layout}
#define PREDICATE(NAME, DOC)                                                                               \
  {.name = NAME, .doc = DOC, .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 3,               \
   .infer = binary_infer, .cpu = binary_cpu, .gpu = em_binary_gpu, .attrs = EM_NO_ATTRS, .layout = binary_layout}

const em_op_def em_ops_binary[] = {
  ARITH("add", "x + y, numpy broadcasting (f32 f64 i32 i64; ints wrap)"),
  ARITH("sub", "x - y, numpy broadcasting (f32 f64 i32 i64; ints wrap)"),
  ARITH("mul", "x * y, numpy broadcasting (f32 f64 i32 i64; ints wrap)"),
  ARITH("div", "x / y, numpy broadcasting (f32 f64; i32 i64 truncate toward zero, x/0 = 0)"),
  ARITH("pow", "x ^ y, numpy broadcasting (f32 f64); d/dy taken as 0 where x <= 0"),
  ARITH("max", "elementwise maximum, numpy broadcasting (f32 f64 i32 i64; NaN propagates; tie gradient to x)"),
  ARITH("min", "elementwise minimum, numpy broadcasting (f32 f64 i32 i64; NaN propagates; tie gradient to x)"),
  {.name = "mod", .doc = "remainder (attr fmod: 0 sign of y as numpy, 1 sign of x as C fmod); integer x mod 0 = 0",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .inplace = 1, .infer = binary_infer, .cpu = binary_cpu,
   .gpu = em_binary_gpu, .backward = binary_backward, .attrs = EM_ATTRS("fmod"), .layout = binary_layout},
  PREDICATE("equal", "x == y as bool, numpy broadcasting (f32 f64 i32 i64 u8 bool)"),
  PREDICATE("less", "x < y as bool, numpy broadcasting (f32 f64 i32 i64 u8 bool)"),
  PREDICATE("greater", "x > y as bool, numpy broadcasting (f32 f64 i32 i64 u8 bool)"),
  PREDICATE("less_equal", "x <= y as bool, numpy broadcasting (f32 f64 i32 i64 u8 bool)"),
  PREDICATE("greater_equal", "x >= y as bool, numpy broadcasting (f32 f64 i32 i64 u8 bool)"),
  PREDICATE("and", "logical and of bools, numpy broadcasting"),
  PREDICATE("or", "logical or of bools, numpy broadcasting"),
  PREDICATE("xor", "logical xor of bools, numpy broadcasting"),
  {.name = "not", .doc = "logical not of a bool", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .no_grad = 1,
   .inplace = 1, .infer = not_infer, .cpu = not_cpu, .gpu = em_binary_not_gpu, .attrs = EM_NO_ATTRS},
  {.name = "where", .doc = "x where cond else y; cond bool, x and y one dtype; all three broadcast (numpy)",
   .min_inputs = 3, .max_inputs = 3, .n_outputs = 1, .no_grad = 1, .infer = where_infer, .cpu = where_cpu,
   .gpu = em_binary_where_gpu, .backward = where_backward, .attrs = EM_NO_ATTRS},
  {.name = "_binary_grad", .doc = "dy times d(fn)/d(input `which`) at the broadcast shape (attrs fn, which, fmod; "
                                  "fn neg: -dy)",
   .min_inputs = 1, .max_inputs = 3, .n_outputs = 1, .inplace = 1, .infer = binary_grad_infer,
   .cpu = binary_grad_cpu, .gpu = em_binary_grad_gpu, .attrs = EM_ATTRS("fn", "which", "fmod")},
  {.name = "_where_grad", .doc = "dy where cond (attr which=0) or where not cond (which=1), else 0",
   .min_inputs = 2, .max_inputs = 2, .n_outputs = 1, .no_grad = 1, .infer = where_grad_infer,
   .cpu = where_grad_cpu, .gpu = em_binary_where_grad_gpu, .backward = where_grad_back, .attrs = EM_ATTRS("which")},
};
const size_t em_ops_binary_count = sizeof em_ops_binary / sizeof em_ops_binary[0];
