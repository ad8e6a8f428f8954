/* The loss-scaling tests' rig (loss_scaling_rig.h). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "loss_scaling_rig.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    em_status s_ = (call);                                                 \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                    \
  } while (0)

/* ------------------------------------------------------------ model --- */



uint64_t ls_lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 40;
}
float ls_uniform(uint64_t *s) { return (float)((double)ls_lcg(s) / 8388608.0 - 1.0); } /* [-1, 1) */

void ls_param(em_graph *g, const char *name, int nd, const int64_t *shape, double scale, uint64_t seed,
                  em_var *out) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  float v[32];
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * ls_uniform(&s));
  em_tensor *t;
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, nd, shape, v, sizeof(float) * (size_t)n, &t));
  em_init init = {.kind = EM_INIT_FROM_DATA, .data = t};
  CHECK(em_parameter(g, name, EM_F32, nd, shape, &init, out));
  em_tensor_release(t);
}

/* w3_scale: the size of w3's entries (1e-10 with x2 of 1e10: the two-learner test). */
void ls_build(model *m, double w3_scale) {
  CHECK(em_graph_create(&m->g));
  CHECK(em_input(m->g, "x", EM_F32, 2, (int64_t[]){-1, 4}, &m->x));
  CHECK(em_input(m->g, "x2", EM_F32, 2, (int64_t[]){-1, 2}, &m->x2));
  CHECK(em_input(m->g, "t", EM_F32, 2, (int64_t[]){-1, 1}, &m->t));
  ls_param(m->g, "w1", 2, (int64_t[]){5, 4}, 0.5, 11, &m->w1);
  ls_param(m->g, "b1", 1, (int64_t[]){5}, 0.1, 12, &m->b1);
  ls_param(m->g, "w2", 2, (int64_t[]){1, 5}, 0.5, 13, &m->w2);
  ls_param(m->g, "w3", 2, (int64_t[]){1, 2}, w3_scale, 14, &m->w3);
  em_attr tb = {.name = "transpose_b", .type = EM_ATTR_INT, .i = 1};
  em_var a, z, h, y2, y3, y;
  CHECK(em_apply(m->g, "matmul", (em_var[]){m->x, m->w1}, 2, &tb, 1, &a, 1));
  CHECK(em_apply(m->g, "add", (em_var[]){a, m->b1}, 2, NULL, 0, &z, 1));
  CHECK(em_apply(m->g, "tanh", &z, 1, NULL, 0, &h, 1));
  CHECK(em_apply(m->g, "matmul", (em_var[]){h, m->w2}, 2, &tb, 1, &y2, 1));
  CHECK(em_apply(m->g, "matmul", (em_var[]){m->x2, m->w3}, 2, &tb, 1, &y3, 1));
  CHECK(em_apply(m->g, "add", (em_var[]){y2, y3}, 2, NULL, 0, &y, 1));
  CHECK(em_apply(m->g, "squared_error", (em_var[]){y, m->t}, 2, NULL, 0, &m->loss, 1));
}



void ls_batch_make(const model *m, int step, int n, double x2_mul, batch *b) {
  float x[16 * 4], x2[16 * 2], t[16];
  uint64_t s = 1000 + (uint64_t)step;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < 4; j++) x[4 * i + j] = ls_uniform(&s);
    for (int j = 0; j < 2; j++) x2[2 * i + j] = (float)(x2_mul * ls_uniform(&s));
    t[i] = 2.0f * ls_uniform(&s);
  }
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, 4}, x, sizeof(float) * 4 * (size_t)n, &b->x));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, 2}, x2, sizeof(float) * 2 * (size_t)n, &b->x2));
  CHECK(em_tensor_from_host(em_cpu(), EM_F32, 2, (int64_t[]){n, 1}, t, sizeof(float) * (size_t)n, &b->t));
  b->f[0] = (em_feed){m->x, b->x};
  b->f[1] = (em_feed){m->x2, b->x2};
  b->f[2] = (em_feed){m->t, b->t};
}

void ls_batch_free(batch *b) {
  em_tensor_release(b->x);
  em_tensor_release(b->x2);
  em_tensor_release(b->t);
}

/* Trains minibatch `step` (8 samples); returns the status, *r its result. */
em_status ls_train(em_trainer *t, const model *m, int step, double x2_mul, em_minibatch_result *r) {
  batch b;
  ls_batch_make(m, step, 8, x2_mul, &b);
  em_status s = em_trainer_train_minibatch(t, b.f, 3, r);
  ls_batch_free(&b);
  return s;
}



void ls_snapshot(const em_graph *g, snap *out) {
  em_var vars[32];
  size_t np, ns;
  CHECK(em_graph_parameters(g, vars, 32, &np));
  CHECK(em_graph_states(g, vars + np, 32 - np, &ns));
  out->n = 0;
  for (size_t i = 0; i < np + ns; i++) {
    em_tensor *p;
    CHECK(em_parameter_get(g, vars[i], em_cpu(), &p));
    size_t k = (size_t)em_tensor_numel(p);
    assert_true(out->n + k <= sizeof out->v / sizeof out->v[0]);
    CHECK(em_tensor_to_host(p, out->v + out->n, sizeof(float) * k));
    out->n += k;
    em_tensor_release(p);
  }
}

void ls_snap_equal(const snap *a, const snap *b, const char *what) {
  if (a->n != b->n) fail_msg("%s: %zu values against %zu", what, a->n, b->n);
  for (size_t i = 0; i < a->n; i++)
    if (memcmp(&a->v[i], &b->v[i], sizeof(float)))
      fail_msg("%s: value %zu is %.9g, %.9g expected (bitwise)", what, i, a->v[i], b->v[i]);
}

em_learner *ls_learner(em_learner_kind kind, const char *name, const em_var *params, int n, double clip_norm) {
  em_learner_config cfg;
  CHECK(em_learner_defaults(kind, kind == EM_LEARNER_SGD || kind == EM_LEARNER_MOMENTUM ? 0.05 : 0.01, &cfg));
  cfg.clip_norm = clip_norm;
  em_learner *l;
  CHECK(em_learner_create(&cfg, name, params, n, &l));
  return l;
}

em_trainer_options ls_scaled(em_device dev, double init, int64_t interval) {
  return (em_trainer_options){.device = dev,
                              .mode = EM_MODE_PORTABLE,
                              .loss_scaling = {.mode = EM_LOSS_SCALE_DYNAMIC, .init_scale = init,
                                               .growth_interval = interval}};
}

em_trainer_totals ls_totals(const em_trainer *t) {
  em_trainer_totals tot;
  CHECK(em_trainer_get_totals(t, &tot));
  return tot;
}



void ls_rig_one(rig *r, em_learner_kind kind, double clip_norm, const em_trainer_options *o) {
  ls_build(&r->m, 0.5);
  r->n_l = 1;
  r->l[0] = ls_learner(kind, NULL, (em_var[]){r->m.w1, r->m.b1, r->m.w2, r->m.w3}, 4, clip_norm);
  CHECK(em_trainer_create(r->m.g, r->m.loss, -1, r->l, 1, o, &r->t));
}

/* Two learners: "a" (momentum) over w3, "b" (adam) over the rest; w3's gradient is 1e10 times the
 * others' when x2_mul is 1e10 (w3 is 1e-10 then, so y stays of order 1). */
void ls_rig_two(rig *r, double w3_scale, const em_trainer_options *o) {
  ls_build(&r->m, w3_scale);
  r->n_l = 2;
  r->l[0] = ls_learner(EM_LEARNER_MOMENTUM, "a", &r->m.w3, 1, 0);
  r->l[1] = ls_learner(EM_LEARNER_ADAM, "b", (em_var[]){r->m.w1, r->m.b1, r->m.w2}, 3, 0);
  CHECK(em_trainer_create(r->m.g, r->m.loss, -1, r->l, 2, o, &r->t));
}

void ls_rig_free(rig *r) {
  em_trainer_free(r->t);
  for (int i = 0; i < r->n_l; i++) em_learner_free(r->l[i]);
  em_graph_free(r->m.g);
}
