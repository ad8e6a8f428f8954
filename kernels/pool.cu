/* The pooling family's kernels (ops/pool.c, launched by ops/pool_gpu.c):
 * max_pool, average_pool, global_max_pool, global_average_pool and their
 * gradients, f32 and f64.
 *
 * Forward: one thread per output element (a window, or a whole plane for the
 * global pools) runs kernels/pool_math.h's loop, as the CPU does. Gradients
 * gather instead of scattering (no atomics): one thread per input element
 * adds the gradients of the windows that read it, in increasing window
 * order, which is the order in which the CPU's scatter reaches it, so the
 * bits are the CPU's. Max pooling's gradient first writes each window's
 * argmax (em_pool_argmax_*) and the gather compares against it, so the
 * tie and NaN rules are the forward's by construction. Launch: 1-D
 * grid-stride, any grid and block size. */
#include "em_kernel.h"
#include "pool_math.h"

#define PK_LOOP(count, stmt)                                                                    \
  do {                                                                                          \
    em_i64 total_ = (count), stride_ = (em_i64)EM_BDIM_X * EM_GDIM_X;                            \
    for (em_i64 i = (em_i64)EM_BID_X * EM_BDIM_X + EM_TID_X; i < total_; i += stride_) { stmt; } \
  } while (0)

/* Window i of all planes' outputs: its plane, position and taps per axis. */
typedef struct pk_window {
  em_i64 pl, o[3], lo[3], hi[3], padded[3];
} pk_window;

EM_DEVICE pk_window pk_window_of(const pm_geom *gm, em_i64 i) {
  pk_window w;
  em_i64 P = pm_prod3(gm->col), p = i % P;
  w.pl = i / P;
  w.o[2] = p % gm->col[2], w.o[1] = p / gm->col[2] % gm->col[1], w.o[0] = p / gm->col[2] / gm->col[1];
  for (int j = 0; j < 3; j++)
    pm_taps(w.o[j], gm->img[j], gm->k[j], gm->s[j], gm->d[j], gm->pb[j], gm->pe[j], &w.lo[j], &w.hi[j],
            &w.padded[j]);
  return w;
}

/* Input element i of all planes: its plane, flat position in the plane, and per axis its
 * coordinate and the windows [o0, o1) that may read it. */
typedef struct pk_input {
  em_i64 pl, q, c[3], o0[3], o1[3];
} pk_input;

EM_DEVICE pk_input pk_input_of(const pm_geom *gm, em_i64 i) {
  pk_input u;
  em_i64 Q = pm_prod3(gm->img);
  u.pl = i / Q, u.q = i % Q;
  u.c[2] = u.q % gm->img[2], u.c[1] = u.q / gm->img[2] % gm->img[1], u.c[0] = u.q / gm->img[2] / gm->img[1];
  for (int j = 0; j < 3; j++) pm_windows(u.c[j], gm->k[j], gm->s[j], gm->d[j], gm->pb[j], gm->col[j], &u.o0[j], &u.o1[j]);
  return u;
}

/* Loops `body` over the windows (od, oh, ow) that read input u, in increasing order; j is the
 * window's flat index over all planes' outputs. */
#define PK_FOR_WINDOWS(gm, u, body)                                                                 \
  for (em_i64 od = (u).o0[0]; od < (u).o1[0]; od++) {                                               \
    if (!pm_reads((u).c[0], od, (gm).s[0], (gm).d[0], (gm).pb[0])) continue;                        \
    for (em_i64 oh = (u).o0[1]; oh < (u).o1[1]; oh++) {                                             \
      if (!pm_reads((u).c[1], oh, (gm).s[1], (gm).d[1], (gm).pb[1])) continue;                      \
      for (em_i64 ow = (u).o0[2]; ow < (u).o1[2]; ow++) {                                           \
        if (!pm_reads((u).c[2], ow, (gm).s[2], (gm).d[2], (gm).pb[2])) continue;                    \
        em_i64 j = (u).pl * pm_prod3((gm).col) + (od * (gm).col[1] + oh) * (gm).col[2] + ow;        \
        body;                                                                                       \
      }                                                                                             \
    }                                                                                               \
  }

#define POOL_KERNELS(T, S)                                                                                      \
  /* y = the first maximum of each window of x. */                                                             \
  EM_GLOBAL void em_pool_max_##S(const T *x, T *y, PM_GEOM_PARAMS) {                                           \
    PM_GEOM_FROM_PARAMS(gm);                                                                                   \
    PK_LOOP(gm.planes * pm_prod3(gm.col), {                                                                    \
      pk_window w = pk_window_of(&gm, i);                                                                      \
      const T *src = x + w.pl * pm_prod3(gm.img);                                                              \
      y[i] = src[pm_argmax_##S(src, gm.img, gm.s, gm.d, gm.pb, w.o[0], w.o[1], w.o[2], w.lo, w.hi)];           \
    });                                                                                                        \
  }                                                                                                            \
                                                                                                               \
  /* arg = the plane index of each window's first maximum (for the gradient). */                              \
  EM_GLOBAL void em_pool_argmax_##S(const T *x, em_i64 *arg, PM_GEOM_PARAMS) {                                 \
    PM_GEOM_FROM_PARAMS(gm);                                                                                   \
    PK_LOOP(gm.planes * pm_prod3(gm.col), {                                                                    \
      pk_window w = pk_window_of(&gm, i);                                                                      \
      arg[i] = pm_argmax_##S(x + w.pl * pm_prod3(gm.img), gm.img, gm.s, gm.d, gm.pb, w.o[0], w.o[1], w.o[2],  \
                             w.lo, w.hi);                                                                      \
    });                                                                                                        \
  }                                                                                                            \
                                                                                                               \
  /* dx = the dy of every window whose argmax is this input, in window order. */                               \
  EM_GLOBAL void em_pool_max_grad_##S(const em_i64 *arg, const T *dy, T *dx, PM_GEOM_PARAMS) {                 \
    PM_GEOM_FROM_PARAMS(gm);                                                                                   \
    PK_LOOP(gm.planes * pm_prod3(gm.img), {                                                                    \
      pk_input u = pk_input_of(&gm, i);                                                                        \
      T acc = 0;                                                                                               \
      PK_FOR_WINDOWS(gm, u, if (arg[j] == u.q) acc = acc + dy[j]);                                             \
      dx[i] = acc;                                                                                             \
    });                                                                                                        \
  }                                                                                                            \
                                                                                                               \
  /* y = the mean of each window of x (count_include_pad: cip). */                                             \
  EM_GLOBAL void em_pool_avg_##S(const T *x, T *y, int cip, PM_GEOM_PARAMS) {                                  \
    PM_GEOM_FROM_PARAMS(gm);                                                                                   \
    PK_LOOP(gm.planes * pm_prod3(gm.col), {                                                                    \
      pk_window w = pk_window_of(&gm, i);                                                                      \
      y[i] = pm_avg_##S(x + w.pl * pm_prod3(gm.img), gm.img, gm.s, gm.d, gm.pb, w.o[0], w.o[1], w.o[2], w.lo, \
                        w.hi, pm_divisor(cip, w.lo, w.hi, w.padded));                                          \
    });                                                                                                        \
  }                                                                                                            \
                                                                                                               \
  /* dx = each reading window's share of its dy, in window order. */                                           \
  EM_GLOBAL void em_pool_avg_grad_##S(const T *dy, T *dx, int cip, PM_GEOM_PARAMS) {                           \
    PM_GEOM_FROM_PARAMS(gm);                                                                                   \
    PK_LOOP(gm.planes * pm_prod3(gm.img), {                                                                    \
      pk_input u = pk_input_of(&gm, i);                                                                        \
      T acc = 0;                                                                                               \
      PK_FOR_WINDOWS(gm, u, {                                                                                  \
        pk_window w = pk_window_of(&gm, j);                                                                    \
        acc = acc + pm_avg_share_##S(dy[j], pm_divisor(cip, w.lo, w.hi, w.padded));                            \
      });                                                                                                      \
      dx[i] = acc;                                                                                             \
    });                                                                                                        \
  }                                                                                                            \
                                                                                                               \
  /* y [planes] = the first maximum (is_max) or the mean of each plane of size elements. */                    \
  EM_GLOBAL void em_pool_global_##S(const T *x, T *y, em_i64 planes, em_i64 size, int is_max) {                \
    PK_LOOP(planes, {                                                                                          \
      const T *p = x + i * size;                                                                               \
      if (size == 0) y[i] = (T)(is_max ? pm_neg_inf_d() : pm_nan_d());                                         \
      else y[i] = is_max ? p[pm_plane_argmax_##S(p, size)] : pm_plane_mean_##S(p, size);                       \
    });                                                                                                        \
  }                                                                                                            \
                                                                                                               \
  /* arg [planes] = the index of each plane's first maximum (-1: empty). */                                    \
  EM_GLOBAL void em_pool_global_argmax_##S(const T *x, em_i64 *arg, em_i64 planes, em_i64 size) {              \
    PK_LOOP(planes, arg[i] = size ? pm_plane_argmax_##S(x + i * size, size) : -1);                             \
  }                                                                                                            \
                                                                                                               \
  /* dx: dy at each plane's argmax, 0 elsewhere (is_max, arg from em_pool_global_argmax), or dy's share. */    \
  EM_GLOBAL void em_pool_global_grad_##S(const em_i64 *arg, const T *dy, T *dx, em_i64 planes, em_i64 size,    \
                                         int is_max) {                                                         \
    PK_LOOP(planes * size, {                                                                                   \
      em_i64 pl = i / size;                                                                                    \
      if (is_max) dx[i] = i % size == arg[pl] ? dy[pl] : (T)0;                                                 \
      else dx[i] = pm_avg_share_##S(dy[pl], (double)size);                                                     \
    });                                                                                                        \
  }

POOL_KERNELS(float, f32)
POOL_KERNELS(double, f64)
