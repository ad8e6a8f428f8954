/* The fast CPU convolutions through oneDNN (ops/dnnl.c) and the derived forms
 * of graph values that keep their reordered weights (engine/tensor.c):
 *  - derived forms: made once per version, kept, dropped on a new version and
 *    with the storage, never kept for values that are not versioned;
 *  - em_dnnl_conv_fwd against a plain convolution written here (double sums),
 *    over 1-3 spatial axes, groups, channel multipliers, strides, dilations,
 *    asymmetric padding and a last window that stops short of the end; the
 *    common layers must be taken by oneDNN where it is loaded, the others may
 *    be declined;
 *  - a parameter used as weights and changed between runs (em_parameter_set,
 *    a write through em_parameter_value announced by em_parameter_set): each
 *    run uses the new weights, not the kept form of the old ones;
 *  - without oneDNN (EMBER_LIBDNNL naming a missing file, EMBER_DNNL=0, in a
 *    child process): nothing is done, the reason is reported, and the
 *    convolution op still computes the right values.
 * Where libdnnl.so.2 is absent the oneDNN cases skip, saying so (deps.sh
 * installs it); the fallback and derived-form tests run everywhere. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dnnl.h"
#include "ember.h"
#include "conv_reference.h"
#include "op_testkit.h"
#include "run_self.h"
#include "tensor_internal.h"

#define OK(x) assert_int_equal((x), EM_OK)

static em_attr AI(const char *name, int64_t v) { return (em_attr){.name = name, .type = EM_ATTR_INT, .i = v}; }
static em_attr AIS(const char *name, const int64_t *v, int n) {
  return (em_attr){.name = name, .type = EM_ATTR_INTS, .ints = v, .n = n};
}

/* ------------------------------------------------------ derived forms --- */

static int made, freed;

static void count_free(void *data) {
  freed++;
  free(data);
}

/* em_derive_fn: a copy of the tensor's first float, so a form shows which value it came from. */
static em_status make_copy(void *ctx, void **data, void (**free_fn)(void *)) {
  float *f = malloc(sizeof *f);
  if (!f) return EM_ERR_OUT_OF_MEMORY;
  *f = *(const float *)em_tensor_data(ctx);
  made++;
  *data = f;
  *free_fn = count_free;
  return EM_OK;
}

static void derived_forms_follow_versions(void **state) {
  (void)state;
  made = freed = 0;
  int64_t shape[1] = {4};
  em_tensor *t = ot_rand(EM_F32, 1, shape, 1, -1, 1);
  float *v = em_tensor_data(t);
  v[0] = 1.0f;
  const char key[] = "layout A", other[] = "layout B";
  em_derived *d = NULL;
  /* not versioned: nothing is kept, nothing made */
  OK(em_tensor_derived(t, key, sizeof key, make_copy, t, &d));
  assert_null(d);
  assert_int_equal(made, 0);
  em_tensor_mark_versioned(t);
  OK(em_tensor_derived(t, key, sizeof key, make_copy, t, &d));
  assert_non_null(d);
  assert_int_equal(made, 1);
  assert_true(*(float *)em_derived_data(d) == 1.0f);
  em_derived *again = NULL;
  OK(em_tensor_derived(t, key, sizeof key, make_copy, t, &again)); /* kept: the same form, not made again */
  assert_ptr_equal(again, d);
  assert_int_equal(made, 1);
  em_derived_release(again);
  em_derived *b = NULL;
  OK(em_tensor_derived(t, other, sizeof other, make_copy, t, &b)); /* another key: its own form */
  assert_ptr_not_equal(b, d);
  assert_int_equal(made, 2);
  em_derived_release(b);
  /* a new value: the old forms are dropped (the one still held lives until released) */
  v[0] = 2.0f;
  em_tensor_host_written(t);
  assert_int_equal(freed, 1);
  OK(em_tensor_derived(t, key, sizeof key, make_copy, t, &again));
  assert_int_equal(made, 3);
  assert_true(*(float *)em_derived_data(again) == 2.0f);
  em_derived_release(d);
  assert_int_equal(freed, 2);
  em_derived_release(again);
  assert_int_equal(freed, 2); /* the storage still keeps it */
  em_tensor_release(t);
  assert_int_equal(freed, 3); /* gone with the storage */
}

/* --------------------------------------------- convolution vs reference --- */

typedef struct conv_case {
  const char *name;
  int bias;
  int required; /* oneDNN must take it (a common layer); else it may decline (then conv.c runs it) */
  ts_conv c;
} conv_case;

static const conv_case cases[] = {
  {"3x3 same (ResNet)", 1, 1, {2, 2, 16, 32, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}},
  {"7x7 stride 2 stem, odd size", 1, 1, {2, 1, 3, 8, 1, {23, 23}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}}},
  {"grouped, dilated, strided, asymmetric pads", 1, 1, {2, 2, 32, 32, 2, {13, 11}, {3, 3}, {2, 1}, {2, 1}, {0, 1}, {2, 0}}},
  {"depthwise, multiplier 2, 5x5", 1, 0, {2, 1, 8, 16, 8, {12, 9}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}}},
  {"depthwise 3x3 stride 2 (MobileNet)", 1, 1, {2, 2, 24, 24, 24, {15, 15}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}},
  {"last window short of the end", 0, 0, {2, 1, 4, 5, 1, {8, 8}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}},
  {"1x1 stride 2 (downsample)", 0, 1, {2, 2, 8, 16, 1, {9, 9}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}},
  {"pointwise (NCHW as it is)", 1, 1, {2, 2, 24, 16, 1, {7, 9}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}},
  {"grouped pointwise", 0, 0, {2, 1, 8, 12, 4, {5, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}},
  {"pointwise 1-D", 1, 0, {1, 2, 6, 10, 1, {33}, {1}, {1}, {1}, {0}, {0}}},
  {"1-D", 1, 1, {1, 3, 4, 6, 1, {17}, {5}, {2}, {1}, {2}, {1}}},
  {"3-D", 1, 1, {3, 1, 3, 4, 1, {5, 6, 7}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}},
  {"kernel wider than the input", 1, 0, {2, 1, 2, 3, 1, {3, 4}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}}},
};

/* A case's geometry as ops/dnnl.h takes it. */
static em_dnnl_conv_geom geom_of(const ts_conv *c) {
  em_dnnl_conv_geom g = {.nsp = c->nsp, .n = c->n, .ci = c->c, .co = c->m, .groups = c->g};
  for (int i = 0; i < c->nsp; i++) {
    g.img[i] = c->in[i], g.col[i] = ts_conv_out_size(c, i), g.k[i] = c->k[i];
    g.s[i] = c->s[i], g.d[i] = c->d[i], g.pb[i] = c->pb[i];
  }
  return g;
}

static double *reference(const ts_conv *c, const float *x, const float *w, const float *b) {
  double *y = ts_conv_reference(c, x, w, b);
  assert_non_null(y);
  return y;
}

static int dnnl_loaded(void) {
  char line[600];
  em_cpu_conv_info(line, sizeof line);
  printf("# cpu convolution: %s\n", line);
  return !strncmp(line, "oneDNN ", 7);
}

static void convolutions_match_reference(void **state) {
  (void)state;
  if (!dnnl_loaded()) skip(); /* the reason is printed above */
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const conv_case *cc = &cases[ci];
    const ts_conv *c = &cc->c;
    int64_t xs[5], ws[5], ys[5], bs[1] = {c->m};
    ts_conv_shapes(c, xs, ws, ys);
    em_tensor *x = ot_rand(EM_F32, 2 + c->nsp, xs, 10 + ci, -1, 1), *w = ot_rand(EM_F32, 2 + c->nsp, ws, 20 + ci, -1, 1);
    em_tensor *b = ot_rand(EM_F32, 1, bs, 30 + ci, -1, 1);
    const int64_t ny = ts_prod(ys, 2 + c->nsp);
    float *y = malloc(sizeof *y * (size_t)ny);
    assert_non_null(y);
    const em_dnnl_conv_geom g = geom_of(c);
    int done = -1;
    const float *bias = cc->bias ? em_tensor_data(b) : NULL;
    if (em_dnnl_conv_fwd(&g, w, em_tensor_data(x), 0, bias, y, 0, NULL, &done)) fail_msg("%s: %s", cc->name, em_last_error());
    if (!done && cc->required) fail_msg("%s: oneDNN declined a common layer", cc->name);
    if (!done) { /* declined (e.g. a kernel whose sums would depend on the thread count): nothing to check */
      printf("# %s: declined, conv.c runs it\n", cc->name);
      free(y);
      em_tensor_release(x), em_tensor_release(w), em_tensor_release(b);
      continue;
    }
    double *want = reference(c, em_tensor_data(x), em_tensor_data(w), bias);
    double *got = malloc(sizeof *got * (size_t)ny);
    assert_non_null(got);
    for (int64_t i = 0; i < ny; i++) got[i] = y[i];
    ot_expect_close(got, want, ny, 1e-5, 1e-5, cc->name);
    free(got), free(want), free(y);
    em_tensor_release(x), em_tensor_release(w), em_tensor_release(b);
  }
}

/* --------------------------------------------- weights changed between runs --- */

/* y = convolution(x, w) + b with w a parameter; three runs with three weights. */
static void changed_weights_are_used(void **state) {
  (void)state;
  if (!dnnl_loaded()) skip();
  const ts_conv *c = &cases[0].c;
  int64_t xs[4], ws[4], ys[4], bs[1] = {c->m}, pads[4] = {1, 1, 1, 1};
  ts_conv_shapes(c, xs, ws, ys);
  em_tensor *x = ot_rand(EM_F32, 4, xs, 1, -1, 1), *w1 = ot_rand(EM_F32, 4, ws, 2, -1, 1),
            *w2 = ot_rand(EM_F32, 4, ws, 3, -1, 1), *b = ot_rand(EM_F32, 1, bs, 4, -1, 1);
  em_graph *gr;
  OK(em_graph_create(&gr));
  em_var vx, vw, vb, vy;
  em_init from_w = {.kind = EM_INIT_FROM_DATA, .data = w1}, from_b = {.kind = EM_INIT_FROM_DATA, .data = b};
  OK(em_input(gr, "x", EM_F32, 4, xs, &vx));
  OK(em_parameter(gr, "w", EM_F32, 4, ws, &from_w, &vw));
  OK(em_parameter(gr, "b", EM_F32, 1, bs, &from_b, &vb));
  em_attr at[1] = {AIS("pads", pads, 4)};
  em_var in[3] = {vx, vw, vb};
  if (em_apply(gr, "convolution", in, 3, at, 1, &vy, 1)) fail_msg("convolution: %s", em_last_error());
  em_exec *e;
  OK(em_exec_create(gr, &vy, 1, em_cpu(), &e));
  em_feed feed = {vx, x};
  const int64_t ny = ts_prod(ys, 4);
  for (int run = 0; run < 4; run++) {
    em_tensor *weights = run < 2 ? w1 : w2; /* runs 0 and 1: w1 (the second from the kept form) */
    if (run == 2) OK(em_parameter_set(gr, vw, w2));
    if (run == 3) { /* written in place through the parameter's own tensor, then announced */
      em_tensor *own;
      OK(em_parameter_value(gr, vw, &own));
      em_tensor *between = NULL; /* a run after the hand-out keeps a form of the value before the write */
      OK(em_exec_run(e, &feed, 1, &between));
      em_tensor_release(between);
      float *p = em_tensor_data(own);
      for (int64_t i = 0; i < ts_prod(ws, 4); i++) p[i] = -p[i];
      OK(em_parameter_set(gr, vw, own));
      weights = own;
    }
    em_tensor *y = NULL;
    if (em_exec_run(e, &feed, 1, &y)) fail_msg("run %d: %s", run, em_last_error());
    double *want = reference(c, em_tensor_data(x), em_tensor_data(weights), em_tensor_data(b));
    int64_t n;
    double *got = ot_values(y, &n);
    assert_int_equal(n, ny);
    char what[64];
    snprintf(what, sizeof what, "run %d", run);
    ot_expect_close(got, want, ny, 1e-5, 1e-5, what);
    free(got), free(want);
    em_tensor_release(y);
    if (run == 3) em_tensor_release(weights);
  }
  em_exec_free(e);
  em_graph_free(gr);
  em_tensor_release(x), em_tensor_release(w1), em_tensor_release(w2), em_tensor_release(b);
}

/* ------------------------------------------------------ without oneDNN --- */

/* The child's checks (this program again, oneDNN unavailable): its exit status says which failed. */
static int child_without_dnnl(const char *why) {
  char line[600];
  em_cpu_conv_info(line, sizeof line);
  if (!strstr(line, why)) {
    fprintf(stderr, "without oneDNN: info \"%s\" lacks \"%s\"\n", line, why);
    return 10;
  }
  const ts_conv *c = &cases[2].c;
  int64_t xs[4], ws[4], ys[4], bs[1] = {c->m}, strides[2] = {c->s[0], c->s[1]}, dil[2] = {c->d[0], c->d[1]};
  int64_t pads[4] = {c->pb[0], c->pb[1], c->pe[0], c->pe[1]};
  ts_conv_shapes(c, xs, ws, ys);
  em_tensor *x = ot_rand(EM_F32, 4, xs, 5, -1, 1), *w = ot_rand(EM_F32, 4, ws, 6, -1, 1), *b = ot_rand(EM_F32, 1, bs, 7, -1, 1);
  const em_dnnl_conv_geom g = geom_of(c);
  float y1[1];
  int done = -1;
  if (em_dnnl_conv_fwd(&g, w, em_tensor_data(x), 0, NULL, y1, 0, NULL, &done) || done != 0) return 11; /* nothing done */
  em_attr at[4] = {AIS("strides", strides, 2), AIS("dilations", dil, 2), AIS("pads", pads, 4), AI("group", c->g)};
  em_tensor *in[3] = {x, w, b}, *y = NULL;
  if (ot_run("convolution", in, 3, at, 4, &y, 1)) return 12;
  double *want = reference(c, em_tensor_data(x), em_tensor_data(w), em_tensor_data(b));
  int64_t n;
  double *got = ot_values(y, &n);
  int r = n == ts_prod(ys, 4) ? 0 : 13;
  for (int64_t i = 0; i < n && !r; i++)
    if (fabs(got[i] - want[i]) > 1e-5 + 1e-5 * fabs(want[i])) r = 14;
  free(got), free(want);
  em_tensor_release(y), em_tensor_release(x), em_tensor_release(w), em_tensor_release(b);
  return r;
}

static void run_child(const char *var, const char *value, const char *arg) {
  const int status = ts_run_self(arg, var, value);
  switch (status) {
  case 0: break;
  case 10: fail_msg("%s=%s: em_cpu_conv_info does not give the reason (child's stderr)", var, value); break;
  case 11: fail_msg("%s=%s: em_dnnl_conv_fwd did something without oneDNN", var, value); break;
  case 12: fail_msg("%s=%s: the convolution op failed without oneDNN", var, value); break;
  case -1: fail_msg("%s=%s: the child did not run or did not exit normally", var, value); break;
  default: fail_msg("%s=%s: the convolution's values are wrong without oneDNN (status %d)", var, value, status);
  }
}

static void falls_back_without_library(void **state) {
  (void)state;
  run_child("EMBER_LIBDNNL", "/nonexistent/libdnnl.so.2", "--child-missing");
}

static void falls_back_when_switched_off(void **state) {
  (void)state;
  run_child("EMBER_DNNL", "0", "--child-off");
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--child-missing")) return child_without_dnnl("could not be loaded");
  if (argc == 2 && !strcmp(argv[1], "--child-off")) return child_without_dnnl("switched off (EMBER_DNNL=0)");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(derived_forms_follow_versions),
      cmocka_unit_test(convolutions_match_reference),
      cmocka_unit_test(changed_weights_are_used),
      cmocka_unit_test(falls_back_without_library),
      cmocka_unit_test(falls_back_when_switched_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
