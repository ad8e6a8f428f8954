#include "conv_reference.h"

#include <stdlib.h>

int64_t ts_conv_out_size(const ts_conv *c, int i) {
  return (c->in[i] + c->pb[i] + c->pe[i] - ((c->k[i] - 1) * c->d[i] + 1)) / c->s[i] + 1;
}

void ts_conv_shapes(const ts_conv *c, int64_t *xs, int64_t *ws, int64_t *ys) {
  xs[0] = c->n, xs[1] = c->c, ws[0] = c->m, ws[1] = c->c / c->g, ys[0] = c->n, ys[1] = c->m;
  for (int i = 0; i < c->nsp; i++) xs[2 + i] = c->in[i], ws[2 + i] = c->k[i], ys[2 + i] = ts_conv_out_size(c, i);
}

int64_t ts_prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

double *ts_conv_reference(const ts_conv *c, const float *x, const float *w, const float *b) {
  /* spatial axes right-aligned into three (missing leading ones of size 1) */
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, o[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, p[3] = {0, 0, 0};
  for (int i = 0; i < c->nsp; i++) {
    const int j = 3 - c->nsp + i;
    in[j] = c->in[i], k[j] = c->k[i], o[j] = ts_conv_out_size(c, i), s[j] = c->s[i], d[j] = c->d[i], p[j] = c->pb[i];
  }
  const int64_t cg = c->c / c->g, mg = c->m / c->g;
  double *y = calloc((size_t)(c->n * c->m * o[0] * o[1] * o[2]) + 1, sizeof *y);
  if (!y) return NULL;
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t m = 0; m < c->m; m++)
      for (int64_t o0 = 0; o0 < o[0]; o0++)
        for (int64_t o1 = 0; o1 < o[1]; o1++)
          for (int64_t o2 = 0; o2 < o[2]; o2++) {
            double acc = b ? b[m] : 0.0;
            for (int64_t ci = 0; ci < cg; ci++)
              for (int64_t a0 = 0; a0 < k[0]; a0++)
                for (int64_t a1 = 0; a1 < k[1]; a1++)
                  for (int64_t a2 = 0; a2 < k[2]; a2++) {
                    const int64_t i0 = o0 * s[0] - p[0] + a0 * d[0], i1 = o1 * s[1] - p[1] + a1 * d[1],
                                  i2 = o2 * s[2] - p[2] + a2 * d[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const int64_t cin = m / mg * cg + ci;
                    acc += (double)x[(((n * c->c + cin) * in[0] + i0) * in[1] + i1) * in[2] + i2] *
                           (double)w[(((m * cg + ci) * k[0] + a0) * k[1] + a1) * k[2] + a2];
                  }
            y[(((n * c->m + m) * o[0] + o0) * o[1] + o1) * o[2] + o2] = acc;
          }
  return y;
}
