/* The arithmetic of the fake libcudnn's convolutions, run as work on a
 * stream (fakecuda_enqueue_work): every output element is the sum of its
 * terms (products of two operands, in the padding skipped), summed in the
 * algorithm's own order in the computation type, so two algorithms may
 * differ in the last bits as on a GPU, and a non-deterministic one differs
 * from run to run. Then alpha and beta blend it with the output.
 *
 * Runs under the libcuda double's lock (fakecudnn_work.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecudnn_conv.h"

/* ------------------------------------------------------------- orders --- */

static double add(int compute, double acc, double term) { return fd_round_to(compute, acc + term); }

/* The valid terms of the grid in natural order, packed (for the chunked and
 * pairwise orders). Returns their count. */
static int64_t pack_valid(const double *terms, const unsigned char *valid, int64_t n, double *out) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (valid[i]) out[m++] = terms[i];
  return m;
}

static double sum_pairwise(int compute, const double *t, int64_t n) {
  if (n == 0) return 0.0;
  if (n == 1) return t[0];
  int64_t h = n / 2;
  return add(compute, sum_pairwise(compute, t, h), sum_pairwise(compute, t + h, n - h));
}

/* A sum per u (v in order); u's sum is left in part[u]. */
static void sums_per_u(int compute, const double *terms, const unsigned char *valid, int64_t nu, int64_t nv, double *part) {
  for (int64_t u = 0; u < nu; u++) {
    double acc = 0.0;
    for (int64_t v = 0; v < nv; v++)
      if (valid[u * nv + v]) acc = add(compute, acc, terms[u * nv + v]);
    part[u] = acc;
  }
}

/* The u visited i-th by a rotated order: backwards, starting at a drawn u
 * (so even a draw of 0 is not the natural order). */
static int64_t rotated_u(int64_t i, int64_t nu, unsigned long long draw) {
  return nu - 1 - (int64_t)((draw + (unsigned long long)i) % (unsigned long long)nu);
}

double fd_sum_terms(int compute, fd_order order, unsigned long long draw, const double *terms, const unsigned char *valid,
                    int64_t nu, int64_t nv, double *scratch) {
  int64_t n = nu * nv;
  double acc = 0.0;
  switch (order) {
  case FD_ORD_NATURAL:
    for (int64_t i = 0; i < n; i++)
      if (valid[i]) acc = add(compute, acc, terms[i]);
    return acc;
  case FD_ORD_REVERSED:
    for (int64_t i = n; i-- > 0;)
      if (valid[i]) acc = add(compute, acc, terms[i]);
    return acc;
  case FD_ORD_SWAPPED:
  case FD_ORD_REVERSED_SWAPPED:
    for (int64_t j = 0; j < n; j++) {
      int64_t k = order == FD_ORD_SWAPPED ? j : n - 1 - j, v = k / nu, u = k % nu;
      if (valid[u * nv + v]) acc = add(compute, acc, terms[u * nv + v]);
    }
    return acc;
  case FD_ORD_ROTATED:
    for (int64_t i = 0; i < nu; i++) {
      int64_t u = rotated_u(i, nu, draw);
      for (int64_t v = 0; v < nv; v++)
        if (valid[u * nv + v]) acc = add(compute, acc, terms[u * nv + v]);
    }
    return acc;
  default: break;
  }
  /* The orders that need scratch: the terms packed, or the sums per u. */
  if (order == FD_ORD_CHUNKED) {
    int64_t m = pack_valid(terms, valid, n, scratch);
    for (int64_t b = 0; b < m; b += 8) {
      double part = 0.0;
      for (int64_t i = b; i < m && i < b + 8; i++) part = add(compute, part, scratch[i]);
      acc = add(compute, acc, part);
    }
  } else if (order == FD_ORD_PAIRWISE) {
    acc = sum_pairwise(compute, scratch, pack_valid(terms, valid, n, scratch));
  } else {
    sums_per_u(compute, terms, valid, nu, nv, scratch);
    for (int64_t i = 0; i < nu; i++)
      acc = add(compute, acc, scratch[order == FD_ORD_PARTIALS ? i : rotated_u(i, nu, draw)]);
  }
  return acc;
}

/* ---------------------------------------------------------- geometry --- */

static int64_t taps(const fd_problem *p) {
  int64_t n = 1;
  for (int i = 0; i < p->nsp; i++) n *= p->ker[i];
  return n;
}

static int64_t out_positions(const fd_problem *p) {
  int64_t n = 1;
  for (int i = 0; i < p->nsp; i++) n *= p->out[i];
  return n;
}

/* Tap t (row-major over ker) as per-axis indices; mirrored for CUDNN_CONVOLUTION. */
static void tap_index(const fd_problem *p, int64_t t, int mirrored, int64_t *k) {
  for (int i = p->nsp - 1; i >= 0; i--) {
    k[i] = t % p->ker[i];
    t /= p->ker[i];
    if (mirrored) k[i] = p->ker[i] - 1 - k[i];
  }
}

static void position_index(const fd_problem *p, int64_t o, int64_t *idx) {
  for (int i = p->nsp - 1; i >= 0; i--) {
    idx[i] = o % p->out[i];
    o /= p->out[i];
  }
}

/* The input position that output position o reads through tap k, or 0 if it
 * lies in the padding. */
static int input_at(const fd_problem *p, const int64_t *o, const int64_t *k, int64_t *in) {
  for (int i = 0; i < p->nsp; i++) {
    in[i] = o[i] * p->stride[i] - p->pad[i] + k[i] * p->dil[i];
    if (in[i] < 0 || in[i] >= p->in[i]) return 0;
  }
  return 1;
}

/* The output position that reads input position in through tap k, or 0. */
static int output_at(const fd_problem *p, const int64_t *in, const int64_t *k, int64_t *o) {
  for (int i = 0; i < p->nsp; i++) {
    int64_t s = in[i] + p->pad[i] - k[i] * p->dil[i];
    if (s < 0 || s % p->stride[i] != 0 || s / p->stride[i] >= p->out[i]) return 0;
    o[i] = s / p->stride[i];
  }
  return 1;
}

/* Offsets of x[n, c, sp], w[k, c, sp] or y[n, k, sp] in a view. */
static int64_t at(const fd_view *v, int64_t a, int64_t b, const int64_t *sp, int nsp) {
  int64_t off = a * v->strides[0] + b * v->strides[1];
  for (int i = 0; i < nsp; i++) off += sp[i] * v->strides[2 + i];
  return off;
}

/* An operand as the multiplier sees it: TF32 or f16 for tensor-core kernels. */
static double operand(const fd_conv_work *cw, const fd_view *v, int64_t off) {
  double a = fd_load(v, off);
  switch (cw->inround) {
  case FD_IN_TF32: return fd_round_tf32(a);
  case FD_IN_F16: return fd_round_f16(a);
  default: return a;
  }
}

static double product(const fd_conv_work *cw, double a, double b) {
  /* TF32 and f16 products are exact in f32: rounding to the computation
   * type changes nothing there, and is f32 / f64 / f16 arithmetic otherwise. */
  return fd_round_to(cw->p.compute, a * b);
}

/* ---------------------------------------------------- the three sums --- */

/* Forward: y[n, k, o] over the group's input channels (u) and taps (v). */
static void forward_terms(const fd_conv_work *cw, int64_t n, int64_t k, const int64_t *o, double *t, unsigned char *ok) {
  const fd_problem *p = &cw->p;
  int64_t cg = p->c / p->g, g = k / (p->k / p->g), nt = taps(p), in[3];
  for (int64_t u = 0; u < cg; u++)
    for (int64_t v = 0; v < nt; v++) {
      const int64_t *ki = cw->tap_plain + 3 * v, *wi = cw->tap_filter + 3 * v;
      int64_t idx = u * nt + v;
      ok[idx] = (unsigned char)input_at(p, o, ki, in);
      if (ok[idx])
        t[idx] = product(cw, operand(cw, &cw->x, at(&cw->x, n, g * cg + u, in, p->nsp)),
                         operand(cw, &cw->w, at(&cw->w, k, u, wi, p->nsp)));
    }
}

/* Backward data: dx[n, c, i] over the group's output channels (u) and taps (v). */
static void data_terms(const fd_conv_work *cw, int64_t n, int64_t c, const int64_t *i, double *t, unsigned char *ok) {
  const fd_problem *p = &cw->p;
  int64_t cg = p->c / p->g, kg = p->k / p->g, g = c / cg, nt = taps(p), o[3];
  for (int64_t u = 0; u < kg; u++)
    for (int64_t v = 0; v < nt; v++) {
      const int64_t *ki = cw->tap_plain + 3 * v, *wi = cw->tap_filter + 3 * v;
      int64_t idx = u * nt + v;
      ok[idx] = (unsigned char)output_at(p, i, ki, o);
      if (ok[idx])
        t[idx] = product(cw, operand(cw, &cw->y, at(&cw->y, n, g * kg + u, o, p->nsp)),
                         operand(cw, &cw->w, at(&cw->w, g * kg + u, c % cg, wi, p->nsp)));
    }
}

/* Backward filter: dw[k, cl, tap] over the images (u) and output positions (v). */
static void filter_terms(const fd_conv_work *cw, int64_t k, int64_t cl, const int64_t *wt, double *t, unsigned char *ok) {
  const fd_problem *p = &cw->p;
  int64_t cg = p->c / p->g, c = k / (p->k / p->g) * cg + cl, no = out_positions(p), xi[3], o[3], in[3];
  /* dw at filter index wt multiplies x through tap xi: the mirror for CUDNN_CONVOLUTION. */
  for (int i = 0; i < p->nsp; i++) xi[i] = p->flip ? p->ker[i] - 1 - wt[i] : wt[i];
  /* The grid is filled position by position (each position's index once). */
  for (int64_t v = 0; v < no; v++) {
    position_index(p, v, o);
    for (int64_t u = 0; u < p->n; u++) {
      int64_t idx = u * no + v;
      ok[idx] = (unsigned char)input_at(p, o, xi, in);
      if (ok[idx])
        t[idx] = product(cw, operand(cw, &cw->x, at(&cw->x, u, c, in, p->nsp)),
                         operand(cw, &cw->y, at(&cw->y, u, k, o, p->nsp)));
    }
  }
}

/* ------------------------------------------------------------- run ----- */

static const fd_view *output_of(const fd_conv_work *cw) {
  return cw->dir == FD_FWD ? &cw->y : cw->dir == FD_BWD_DATA ? &cw->x : &cw->w;
}

static int64_t grid_size(const fd_conv_work *cw, int64_t *nu, int64_t *nv) {
  const fd_problem *p = &cw->p;
  switch (cw->dir) {
  case FD_FWD: *nu = p->c / p->g, *nv = taps(p); break;
  case FD_BWD_DATA: *nu = p->k / p->g, *nv = taps(p); break;
  default: *nu = p->n, *nv = out_positions(p); break;
  }
  return *nu * *nv;
}

/* The sum of one output element at index idx (n/k, c/k, spatial...). */
static double one_output(const fd_conv_work *cw, const int64_t *idx, double *t, unsigned char *ok, double *scratch) {
  int64_t nu, nv;
  grid_size(cw, &nu, &nv);
  memset(ok, 0, (size_t)(nu * nv));
  switch (cw->dir) {
  case FD_FWD: forward_terms(cw, idx[0], idx[1], idx + 2, t, ok); break;
  case FD_BWD_DATA: data_terms(cw, idx[0], idx[1], idx + 2, t, ok); break;
  default: filter_terms(cw, idx[0], idx[1], idx + 2, t, ok); break;
  }
  return fd_sum_terms(cw->p.compute, cw->order, cw->draw, t, ok, nu, nv, scratch);
}

/* Every output's sum first, then the blend: the sums never read what the
 * blend wrote. */
static CUresult compute(fd_conv_work *cw, char *msg, size_t cap) {
  const fd_view *out = output_of(cw);
  int64_t count = fd_view_count(out), nu, nv, g = grid_size(cw, &nu, &nv);
  /* The grid of terms, its validity, and scratch for the orders that need
   * it (the packed terms or the sums per u: at most the grid). */
  double *sums = malloc((size_t)count * sizeof *sums + 1), *t = malloc((size_t)g * sizeof *t + 1);
  double *scratch = malloc((size_t)g * sizeof *scratch + 1);
  unsigned char *ok = malloc((size_t)g + 1);
  int64_t nt = taps(&cw->p);
  cw->tap_plain = malloc((size_t)(3 * nt) * sizeof *cw->tap_plain);
  cw->tap_filter = malloc((size_t)(3 * nt) * sizeof *cw->tap_filter);
  if (!sums || !t || !ok || !scratch || !cw->tap_plain || !cw->tap_filter) {
    free(sums), free(t), free(ok), free(scratch), free(cw->tap_plain), free(cw->tap_filter);
    snprintf(msg, cap, "%s: out of host memory", cw->hdr.op);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int64_t v = 0; v < nt; v++) {
    tap_index(&cw->p, v, 0, cw->tap_plain + 3 * v);
    tap_index(&cw->p, v, cw->p.flip, cw->tap_filter + 3 * v);
  }
  int64_t idx[FD_DIM_MAX] = {0}, i = 0;
  do sums[i++] = one_output(cw, idx, t, ok, scratch);
  while (fd_next_index(out, idx));
  memset(idx, 0, sizeof idx);
  i = 0;
  do {
    int64_t off = fd_view_offset(out, idx);
    fd_store(out, off, fd_blend(cw->p.compute, cw->alpha, sums[i++], cw->beta, out, off));
  } while (fd_next_index(out, idx));
  free(sums), free(t), free(ok), free(scratch), free(cw->tap_plain), free(cw->tap_filter);
  cw->tap_plain = cw->tap_filter = NULL;
  return CUDA_SUCCESS;
}

/* A Find*Ex trial leaves what its last trial wrote in the output; the double
 * leaves NaN (all-ones bytes), so nothing can take it for a result [U]. */
static void poison(const fd_view *v) {
  int64_t idx[FD_DIM_MAX] = {0};
  do fd_store(v, fd_view_offset(v, idx), NAN);
  while (fd_next_index(v, idx));
}

CUresult fd_conv_run(void *payload, char *msg, size_t cap) {
  fd_conv_work *cw = payload;
  CUresult r = fd_view_span(&cw->hdr, &cw->x, cw->dir == FD_BWD_DATA ? "dx" : "x", msg, cap);
  if (r == CUDA_SUCCESS) r = fd_view_span(&cw->hdr, &cw->w, cw->dir == FD_BWD_FILTER ? "dw" : "w", msg, cap);
  if (r == CUDA_SUCCESS) r = fd_view_span(&cw->hdr, &cw->y, cw->dir == FD_FWD ? "y" : "dy", msg, cap);
  void *ws = NULL;
  if (r == CUDA_SUCCESS) r = fd_bytes_span(&cw->hdr, cw->ws, cw->ws_bytes, &ws, "workSpace", msg, cap);
  if (r != CUDA_SUCCESS) return r;
  if (cw->find) {
    poison(output_of(cw));
  } else {
    r = compute(cw, msg, cap);
  }
  /* What an algorithm leaves in its workspace is garbage to the caller. */
  if (ws) memset(ws, 0xff, cw->ws_bytes);
  return r;
}
