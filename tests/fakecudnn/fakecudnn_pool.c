/* Pooling of the fake libcudnn: cudnnPoolingForward and cudnnPoolingBackward
 * (max, max deterministic, average counting or not counting the padding),
 * 2-D and 3-D, run as work on the handle's stream.
 *
 * Max backward finds the element that produced each output as cuDNN does:
 * from x and y, the first x of the window equal to y (the gradient goes to
 * one element of a tie, [S] Theano#5404; the first one [U]); a y that is no
 * element of its window sends no gradient. CUDNN_POOLING_MAX adds the
 * contributions of overlapping windows in an order drawn per run (atomics);
 * MAX_DETERMINISTIC and the averages in output order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_work.h"

typedef struct pool_work {
  fd_work hdr;
  int backward;
  int nsp, mode, nan_opt;
  int window[3], pad[3], stride[3];
  fd_view x, y, dy, dx;
  int compute;
  double alpha, beta;
  unsigned long long draw;
} pool_work;

/* --------------------------------------------------------------- math --- */

/* The positions of output position o's window, row-major, padding
 * included (in_range tells them apart). */
typedef struct window_iter {
  int64_t first[3], pos[3];
  int started;
} window_iter;

static void window_start(const pool_work *pw, const int64_t *o, window_iter *it) {
  for (int i = 0; i < pw->nsp; i++) it->first[i] = o[i] * pw->stride[i] - pw->pad[i];
  it->started = 0;
}

/* The next window position (all of them, in range or not). */
static int window_next(const pool_work *pw, window_iter *it) {
  if (!it->started) {
    for (int i = 0; i < pw->nsp; i++) it->pos[i] = it->first[i];
    it->started = 1;
    return 1;
  }
  for (int i = pw->nsp - 1; i >= 0; i--) {
    if (++it->pos[i] < it->first[i] + pw->window[i]) return 1;
    it->pos[i] = it->first[i];
  }
  return 0;
}

static int in_range(const pool_work *pw, const int64_t *pos) {
  for (int i = 0; i < pw->nsp; i++)
    if (pos[i] < 0 || pos[i] >= pw->x.dims[2 + i]) return 0;
  return 1;
}

static int64_t offset(const fd_view *v, int64_t n, int64_t c, const int64_t *sp, int nsp) {
  int64_t off = n * v->strides[0] + c * v->strides[1];
  for (int i = 0; i < nsp; i++) off += sp[i] * v->strides[2 + i];
  return off;
}

/* The pooled value of output (n, c, o). */
static double pool_value(const pool_work *pw, int64_t n, int64_t c, const int64_t *o) {
  window_iter it;
  window_start(pw, o, &it);
  int is_max = pw->mode == FD_POOL_MAX || pw->mode == FD_POOL_MAX_DETERMINISTIC;
  double best = -INFINITY, sum = 0.0;
  int64_t count = 0, volume = 0;
  int saw_nan = 0;
  while (window_next(pw, &it)) {
    volume++;
    if (!in_range(pw, it.pos)) continue;
    double v = fd_load(&pw->x, offset(&pw->x, n, c, it.pos, pw->nsp));
    count++;
    if (is_max) {
      saw_nan |= isnan(v);
      if (v > best) best = v; /* a NaN never wins a comparison */
    } else {
      sum = fd_round_to(pw->compute, sum + v);
    }
  }
  if (is_max) return saw_nan && pw->nan_opt == FD_PROPAGATE_NAN ? NAN : best;
  return fd_round_to(pw->compute, sum / (double)(pw->mode == FD_POOL_AVG_INCLUDE ? volume : count));
}

static CUresult forward(pool_work *pw) {
  int64_t idx[FD_DIM_MAX] = {0};
  do {
    int64_t off = fd_view_offset(&pw->y, idx);
    double v = pool_value(pw, idx[0], idx[1], idx + 2);
    fd_store(&pw->y, off, fd_blend(pw->compute, pw->alpha, v, pw->beta, &pw->y, off));
  } while (fd_next_index(&pw->y, idx));
  return CUDA_SUCCESS;
}

/* Index of x's element (n, c, pos) in a dense row-major gradient buffer. */
static int64_t dense_index(const fd_view *v, int64_t n, int64_t c, const int64_t *pos, int nsp) {
  int64_t i = n * v->dims[1] + c;
  for (int k = 0; k < nsp; k++) i = i * v->dims[2 + k] + pos[k];
  return i;
}

/* Adds output (n, c, o)'s gradient to grad (a dense copy of dx). */
static void spread(const pool_work *pw, const int64_t *idx, double *grad) {
  int64_t n = idx[0], c = idx[1];
  const int64_t *o = idx + 2;
  double g = fd_load(&pw->dy, fd_view_offset(&pw->dy, idx));
  window_iter it;
  window_start(pw, o, &it);
  if (pw->mode == FD_POOL_MAX || pw->mode == FD_POOL_MAX_DETERMINISTIC) {
    double y = fd_load(&pw->y, fd_view_offset(&pw->y, idx));
    while (window_next(pw, &it)) {
      if (!in_range(pw, it.pos)) continue;
      double v = fd_load(&pw->x, offset(&pw->x, n, c, it.pos, pw->nsp));
      if (v == y || (isnan(v) && isnan(y))) {
        int64_t d = dense_index(&pw->dx, n, c, it.pos, pw->nsp);
        grad[d] = fd_round_to(pw->compute, grad[d] + g);
        return;
      }
    }
    return;
  }
  int64_t volume = 1, count = 0;
  for (int i = 0; i < pw->nsp; i++) volume *= pw->window[i];
  while (window_next(pw, &it)) count += in_range(pw, it.pos);
  double share = fd_round_to(pw->compute, g / (double)(pw->mode == FD_POOL_AVG_INCLUDE ? volume : count));
  window_start(pw, o, &it);
  while (window_next(pw, &it))
    if (in_range(pw, it.pos)) {
      int64_t d = dense_index(&pw->dx, n, c, it.pos, pw->nsp);
      grad[d] = fd_round_to(pw->compute, grad[d] + share);
    }
}

/* The outputs in row-major order, or for CUDNN_POOLING_MAX from a drawn
 * start, wrapping: overlapping windows then add up in another order. */
static CUresult backward(pool_work *pw, char *msg, size_t cap) {
  int64_t nx = fd_view_count(&pw->dx), ny = fd_view_count(&pw->dy);
  double *grad = calloc((size_t)nx + 1, sizeof *grad);
  if (!grad) {
    snprintf(msg, cap, "%s: out of host memory", pw->hdr.op);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int64_t start = pw->mode == FD_POOL_MAX ? (int64_t)(pw->draw % (unsigned long long)ny) : 0;
  for (int64_t j = 0; j < ny; j++) {
    int64_t lin = (start + j) % ny, idx[FD_DIM_MAX] = {0};
    for (int i = pw->dy.nd - 1; i >= 0; i--) {
      idx[i] = lin % pw->dy.dims[i];
      lin /= pw->dy.dims[i];
    }
    spread(pw, idx, grad);
  }
  int64_t idx[FD_DIM_MAX] = {0}, i = 0;
  do {
    int64_t off = fd_view_offset(&pw->dx, idx);
    fd_store(&pw->dx, off, fd_blend(pw->compute, pw->alpha, grad[i++], pw->beta, &pw->dx, off));
  } while (fd_next_index(&pw->dx, idx));
  free(grad);
  return CUDA_SUCCESS;
}

static CUresult pool_run(void *payload, char *msg, size_t cap) {
  pool_work *pw = payload;
  CUresult r = fd_view_span(&pw->hdr, &pw->x, "x", msg, cap);
  if (r == CUDA_SUCCESS) r = fd_view_span(&pw->hdr, &pw->y, "y", msg, cap);
  if (r == CUDA_SUCCESS && pw->backward) r = fd_view_span(&pw->hdr, &pw->dy, "dy", msg, cap);
  if (r == CUDA_SUCCESS && pw->backward) r = fd_view_span(&pw->hdr, &pw->dx, "dx", msg, cap);
  if (r != CUDA_SUCCESS) return r;
  return pw->backward ? backward(pw, msg, cap) : forward(pw);
}

/* ------------------------------------------------------------- checks --- */

static int same_layout(fd_tensor a, fd_tensor b) {
  if (a->nb != b->nb) return 0;
  for (int i = 0; i < a->nb; i++)
    if (a->dims[i] != b->dims[i] || a->strides[i] != b->strides[i]) return 0;
  return 1;
}

/* x against y for a pooling descriptor: BAD_PARAM when n or c differ, the
 * data types differ (cudnnPoolingForward's reference), or y's spatial sizes
 * are not cudnnGetPoolingNdForwardOutputDim's [U]; NOT_SUPPORTED for a
 * tensor that is not 4-D or 5-D, negative strides, an unmodelled type. */
static cudnnStatus_t check_pair(const char *op, fd_pool p, fd_tensor x, fd_tensor y) {
  cudnnStatus_t s = fd_tensor_ready(x, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(y, op);
  if (s != FD_SUCCESS) return s;
  if (!p) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: poolingDesc is NULL", op);
  if (!fd_is_live(p, FD_OBJ_POOL) || p->nsp == 0) return fd_refuse(FD_BAD_PARAM, "%s: the pooling descriptor is not set", op);
  if (x->nb != y->nb || x->nb != p->nsp + 2)
    return fd_refuse(FD_BAD_PARAM, "%s: x has %d dimensions, y %d, the pooling %d spatial axes", op, x->nb, y->nb, p->nsp);
  if (x->dims[0] != y->dims[0] || x->dims[1] != y->dims[1]) return fd_refuse(FD_BAD_PARAM, "%s: n or c of x and y differ", op);
  if (x->dtype != y->dtype) return fd_refuse(FD_BAD_PARAM, "%s: the data types of x and y differ", op);
  if (x->nb != 4 && x->nb != 5) return fd_refuse(FD_NOT_SUPPORTED, "%s: %d-D tensors (4-D or 5-D)", op, x->nb);
  if (fd_tensor_has_negative_stride(x) || fd_tensor_has_negative_stride(y))
    return fd_refuse(FD_NOT_SUPPORTED, "%s: negative strides", op);
  if (!fd_dtype_size(x->dtype)) return fd_refuse(FD_NOT_SUPPORTED_DATA_TYPE, "%s: %s data", op, fd_dtype_name(x->dtype));
  for (int i = 0; i < p->nsp; i++) {
    int room = x->dims[2 + i] + 2 * p->pad[i] - p->window[i];
    if (room < 0 || y->dims[2 + i] != 1 + room / p->stride[i])
      return fd_refuse(FD_BAD_PARAM, "%s: y's axis %d is %d, not the pooled size", op, i, y->dims[2 + i]);
  }
  return FD_SUCCESS;
}

static pool_work *new_work(const char *op, fd_pool p, fd_tensor x, const void *xp, fd_tensor y, const void *yp,
                           const void *alpha, const void *beta) {
  pool_work *pw = fd_work_alloc(sizeof *pw, op);
  if (!pw) return NULL;
  pw->nsp = p->nsp;
  pw->mode = p->mode;
  pw->nan_opt = p->nan_opt;
  for (int i = 0; i < p->nsp; i++) {
    pw->window[i] = p->window[i];
    pw->pad[i] = p->pad[i];
    pw->stride[i] = p->stride[i];
  }
  fd_view_of_tensor(&pw->x, x, xp);
  fd_view_of_tensor(&pw->y, y, yp);
  pw->compute = x->dtype == FD_DOUBLE ? FD_DOUBLE : FD_FLOAT;
  fd_read_scalars(x->dtype, alpha, beta, &pw->alpha, &pw->beta);
  return pw;
}

static const char *mode_name(int m) {
  static const char *const names[] = {"MAX", "AVERAGE_COUNT_INCLUDE_PADDING", "AVERAGE_COUNT_EXCLUDE_PADDING",
                                      "MAX_DETERMINISTIC"};
  return names[m];
}

static cudnnStatus_t pool_forward(fd_handle h, fd_pool p, const void *alpha, fd_tensor x, const void *xp, const void *beta,
                                  fd_tensor y, void *yp) {
  const char *op = "cudnnPoolingForward";
  cudnnStatus_t s = fd_check_handle(h, op);
  if (s == FD_SUCCESS) s = check_pair(op, p, x, y);
  if (s != FD_SUCCESS) return s;
  if (!alpha || !beta || !xp || !yp) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: alpha, beta, x or y is NULL", op);
  pool_work *pw = new_work(op, p, x, xp, y, yp, alpha, beta);
  if (!pw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  char xs[192];
  fd_tensor_text(x, xs, sizeof xs);
  s = fd_issue(h, pool_run, &pw->hdr);
  if (s == FD_SUCCESS) fd_note_call("%s mode=%s x=%s", op, mode_name(p->mode), xs);
  return s;
}

/* cudnnPoolingBackward's reference: BAD_PARAM when y and dy, or x and dx,
 * differ in dimensions or strides, or the four data types differ. */
static cudnnStatus_t pool_backward(fd_handle h, fd_pool p, const void *alpha, fd_tensor y, const void *yp, fd_tensor dy,
                                   const void *dyp, fd_tensor x, const void *xp, const void *beta, fd_tensor dx, void *dxp) {
  const char *op = "cudnnPoolingBackward";
  cudnnStatus_t s = fd_check_handle(h, op);
  if (s == FD_SUCCESS) s = check_pair(op, p, x, y);
  if (s == FD_SUCCESS) s = fd_tensor_ready(dy, op);
  if (s == FD_SUCCESS) s = fd_tensor_ready(dx, op);
  if (s != FD_SUCCESS) return s;
  if (!alpha || !beta || !yp || !dyp || !xp || !dxp) return fd_refuse(FD_BAD_PARAM_NULL_POINTER, "%s: a pointer is NULL", op);
  if (!same_layout(y, dy) || !same_layout(x, dx)) return fd_refuse(FD_BAD_PARAM, "%s: y and dy, or x and dx, differ in shape or strides", op);
  if (dy->dtype != x->dtype || dx->dtype != x->dtype) return fd_refuse(FD_BAD_PARAM, "%s: the data types differ", op);
  pool_work *pw = new_work(op, p, x, xp, y, yp, alpha, beta);
  if (!pw) return fd_refuse(FD_ALLOC_FAILED, "%s: out of host memory", op);
  pw->backward = 1;
  fd_view_of_tensor(&pw->dy, dy, dyp);
  fd_view_of_tensor(&pw->dx, dx, dxp);
  if (p->mode == FD_POOL_MAX) pw->draw = fd_random();
  char xs[192];
  fd_tensor_text(x, xs, sizeof xs);
  s = fd_issue(h, pool_run, &pw->hdr);
  if (s == FD_SUCCESS) fd_note_call("%s mode=%s x=%s", op, mode_name(p->mode), xs);
  return s;
}

FD_EXPORT cudnnStatus_t cudnnPoolingForward(fd_handle h, fd_pool p, const void *alpha, fd_tensor x, const void *xp,
                                            const void *beta, fd_tensor y, void *yp) {
  FD_CALL(cudnnPoolingForward, pool_forward(h, p, alpha, x, xp, beta, y, yp));
}

FD_EXPORT cudnnStatus_t cudnnPoolingBackward(fd_handle h, fd_pool p, const void *alpha, fd_tensor y, const void *yp,
                                             fd_tensor dy, const void *dyp, fd_tensor x, const void *xp, const void *beta,
                                             fd_tensor dx, void *dxp) {
  FD_CALL(cudnnPoolingBackward, pool_backward(h, p, alpha, y, yp, dy, dyp, x, xp, beta, dx, dxp));
}
