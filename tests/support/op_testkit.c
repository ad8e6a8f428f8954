/* The op test kit (op_testkit.h): every op test runs its op through the
 * public API (graph, executor, em_gradients), so the tests exercise the
 * engine as a user would, and the numeric gradient is computed here by
 * central differences, independently of any op's backward. */
#include "op_testkit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ember/primitives.h"

/* ----------------------------------------------------------------- data --- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double ot_uniform(uint64_t *state, double lo, double hi) {
  return lo + (hi - lo) * ((double)(splitmix(state) >> 11) * (1.0 / 9007199254740992.0));
}

static int64_t numel_of(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* Converts doubles to dtype bytes (f16/bf16 through f32, rounded). */
static void store(em_dtype t, const double *v, int64_t n, void *p) {
  for (int64_t i = 0; i < n; i++) {
    float f = (float)v[i];
    switch (t) {
    case EM_F32: ((float *)p)[i] = f; break;
    case EM_F64: ((double *)p)[i] = v[i]; break;
    case EM_F16: em_f32_to_f16(em_cpu(), &f, (uint16_t *)p + i, 1, NULL); break;
    case EM_BF16: em_f32_to_bf16(em_cpu(), &f, (uint16_t *)p + i, 1, NULL); break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)v[i]; break;
    case EM_I64: ((int64_t *)p)[i] = (int64_t)v[i]; break;
    case EM_U8: ((uint8_t *)p)[i] = (uint8_t)v[i]; break;
    case EM_BOOL: ((uint8_t *)p)[i] = v[i] != 0; break;
    }
  }
}

em_tensor *ot_tensor(em_dtype dtype, int ndim, const int64_t *shape, const double *values) {
  em_tensor *t = NULL;
  if (em_tensor_zeros(em_cpu(), dtype, ndim, shape, &t)) fail_msg("ot_tensor: %s", em_last_error());
  if (values) store(dtype, values, numel_of(ndim, shape), em_tensor_data(t));
  return t;
}

em_tensor *ot_rand(em_dtype dtype, int ndim, const int64_t *shape, uint64_t seed, double lo, double hi) {
  int64_t n = numel_of(ndim, shape);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!v) fail_msg("ot_rand: no memory");
  for (int64_t i = 0; i < n; i++) v[i] = ot_uniform(&seed, lo, hi);
  em_tensor *t = ot_tensor(dtype, ndim, shape, v);
  free(v);
  return t;
}

double *ot_values(const em_tensor *t, int64_t *n_out) {
  em_tensor *c = NULL;
  if (em_tensor_to_device(t, em_cpu(), &c)) fail_msg("ot_values: %s", em_last_error());
  int64_t n = em_tensor_numel(c);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!v) fail_msg("ot_values: no memory");
  const void *p = em_tensor_data(c);
  for (int64_t i = 0; i < n; i++) {
    float f;
    switch (em_tensor_dtype(c)) {
    case EM_F32: v[i] = ((const float *)p)[i]; break;
    case EM_F64: v[i] = ((const double *)p)[i]; break;
    case EM_F16: em_f16_to_f32(em_cpu(), (const uint16_t *)p + i, &f, 1, NULL); v[i] = f; break;
    case EM_BF16: em_bf16_to_f32(em_cpu(), (const uint16_t *)p + i, &f, 1, NULL); v[i] = f; break;
    case EM_I32: v[i] = ((const int32_t *)p)[i]; break;
    case EM_I64: v[i] = (double)((const int64_t *)p)[i]; break;
    case EM_U8: case EM_BOOL: v[i] = ((const uint8_t *)p)[i]; break;
    }
  }
  em_tensor_release(c);
  if (n_out) *n_out = n;
  return v;
}

void ot_expect_close(const double *got, const double *want, int64_t n, double atol, double rtol, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(w) && isnan(g)) continue;
    if (isinf(w) && g == w) continue;
    if (!(fabs(g - w) <= atol + rtol * fabs(w)))
      fail_msg("%s: element %lld is %.17g, expected %.17g (|diff| %.3g > %.3g)", what, (long long)i, g, w,
               fabs(g - w), atol + rtol * fabs(w));
  }
}

void ot_expect_shape(const em_tensor *t, em_dtype dtype, int ndim, const int64_t *shape, const char *what) {
  char b[128];
  int ok = em_tensor_dtype(t) == dtype && em_tensor_ndim(t) == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = em_tensor_shape(t)[i] == shape[i];
  if (!ok) {
    char w[256];
    size_t len = (size_t)snprintf(w, sizeof w, "%s[", em_dtype_name(dtype));
    for (int i = 0; i < ndim; i++) len += (size_t)snprintf(w + len, sizeof w - len, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(w + len, sizeof w - len, "]");
    fail_msg("%s: result is %s, expected %s", what, em_tensor_describe(t, b, sizeof b), w);
  }
}

/* ---------------------------------------------------------------- runs --- */

/* A graph holding the op applied to em_input values shaped like `in`. */
typedef struct op_graph {
  em_graph *g;
  em_var x[16];
  em_var y[8];
} op_graph;

static em_status build(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs, int n_out,
                       op_graph *og) {
  memset(og, 0, sizeof *og);
  if (n_in > 16 || n_out > 8) return EM_ERR_INVALID_ARGUMENT;
  em_status s = em_graph_create(&og->g);
  for (int i = 0; i < n_in && !s; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    s = em_input(og->g, name, em_tensor_dtype(in[i]), em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &og->x[i]);
  }
  if (!s) s = em_apply(og->g, op, og->x, n_in, attrs, n_attrs, og->y, n_out);
  return s;
}

static em_status run_outputs(op_graph *og, em_tensor *const *in, int n_in, const em_var *outs, int n_outs,
                             int training, uint64_t steps_before, em_tensor **results) {
  em_exec *e = NULL;
  em_feed feeds[16];
  for (int i = 0; i < n_in; i++) feeds[i] = (em_feed){og->x[i], in[i]};
  em_status s = em_exec_create(og->g, outs, n_outs, em_cpu(), &e);
  if (!s) s = em_exec_set_training(e, training);
  /* Step-dependent ops (dropout) see the same step in every evaluation. */
  for (uint64_t k = 0; k < steps_before && !s; k++) {
    em_tensor *tmp[8] = {0};
    s = em_exec_run(e, feeds, n_in, tmp);
    for (int i = 0; i < n_outs; i++) em_tensor_release(tmp[i]);
  }
  if (!s) s = em_exec_run(e, feeds, n_in, results);
  em_exec_free(e);
  return s;
}

static em_status run_mode(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                          em_tensor **out, int n_out, int training) {
  op_graph og;
  em_status s = build(op, in, n_in, attrs, n_attrs, n_out, &og);
  if (!s) s = run_outputs(&og, in, n_in, og.y, n_out, training, 0, out);
  em_graph_free(og.g);
  return s;
}

em_status ot_run(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs, em_tensor **out,
                 int n_out) {
  return run_mode(op, in, n_in, attrs, n_attrs, out, n_out, 0);
}

em_status ot_run_training(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                          em_tensor **out, int n_out) {
  return run_mode(op, in, n_in, attrs, n_attrs, out, n_out, 1);
}

/* ------------------------------------------------------------ gradients --- */

/* The loss L = sum_k sum(y_k * w_k) over float outputs; returns its value. */
typedef struct loss_graph {
  op_graph og;
  em_var loss;
  em_tensor *w[8];
} loss_graph;

static void loss_free(loss_graph *lg) {
  for (int k = 0; k < 8; k++) em_tensor_release(lg->w[k]);
  em_graph_free(lg->og.g);
}

static void build_loss(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs, int n_out,
                       loss_graph *lg) {
  memset(lg, 0, sizeof *lg);
  if (build(op, in, n_in, attrs, n_attrs, n_out, &lg->og))
    fail_msg("gradcheck %s: building the op failed: %s", op, em_last_error());
  em_var terms[8];
  int n_terms = 0;
  for (int k = 0; k < n_out; k++) {
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    em_var_info(lg->og.g, lg->og.y[k], &dt, &nd, shape);
    if (dt != EM_F64 && dt != EM_F32) continue;
    lg->w[k] = ot_rand(dt, nd, shape, 0x5eed0000u + (uint64_t)k, 0.5, 1.5);
    em_var yw[2] = {lg->og.y[k], -1};
    if (em_constant(lg->og.g, lg->w[k], &yw[1]) || em_apply(lg->og.g, "_weighted_sum", yw, 2, NULL, 0, &terms[n_terms], 1))
      fail_msg("gradcheck %s: building the loss failed: %s", op, em_last_error());
    n_terms++;
  }
  if (!n_terms) fail_msg("gradcheck %s: the op has no float output", op);
  if (em_apply(lg->og.g, "add_n", terms, n_terms, NULL, 0, &lg->loss, 1))
    fail_msg("gradcheck %s: summing the loss failed: %s", op, em_last_error());
}

static double eval_loss(loss_graph *lg, em_tensor *const *in, int n_in, int training, const char *op) {
  em_tensor *out = NULL;
  if (run_outputs(&lg->og, in, n_in, &lg->loss, 1, training, 1, &out))
    fail_msg("gradcheck %s: evaluating the loss failed: %s", op, em_last_error());
  double *v = ot_values(out, NULL);
  double r = v[0];
  free(v);
  em_tensor_release(out);
  return r;
}

static int is_float_tensor(const em_tensor *t) {
  return em_tensor_dtype(t) == EM_F64 || em_tensor_dtype(t) == EM_F32;
}

static void gradcheck_mode(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                           int n_out, unsigned skip_mask, double tol, int training) {
  loss_graph lg;
  build_loss(op, in, n_in, attrs, n_attrs, n_out, &lg);
  /* Which inputs: float and not skipped. An input the op gives no gradient
   * (its no_grad mask) gets zeros from em_gradients, which the comparison
   * rejects: tests name such float inputs in skip_mask. */
  em_var xs[16], grads[16];
  int which[16], n = 0;
  for (int i = 0; i < n_in; i++)
    if (is_float_tensor(in[i]) && !(skip_mask & (1u << i))) {
      which[n] = i;
      xs[n++] = lg.og.x[i];
    }
  if (!n) fail_msg("gradcheck %s: no input to check", op);
  if (em_gradients(lg.og.g, lg.loss, xs, n, grads))
    fail_msg("gradcheck %s: em_gradients failed: %s", op, em_last_error());
  em_tensor *analytic[16] = {0};
  if (run_outputs(&lg.og, in, n_in, grads, n, training, 1, analytic))
    fail_msg("gradcheck %s: running the gradients failed: %s", op, em_last_error());

  /* Perturbed copies of the inputs, in f64. */
  em_tensor *work[16];
  for (int i = 0; i < n_in; i++)
    if (em_tensor_to_device(in[i], em_cpu(), &work[i])) fail_msg("gradcheck: copy failed: %s", em_last_error());
  for (int k = 0; k < n; k++) {
    int i = which[k];
    if (em_tensor_dtype(work[i]) != EM_F64) fail_msg("gradcheck %s: input %d must be f64", op, i);
    int64_t m;
    double *ga = ot_values(analytic[k], &m);
    double *x = em_tensor_data(work[i]);
    int64_t count = m < 200 ? m : 200;
    for (int64_t c = 0; c < count; c++) {
      int64_t j = m <= 200 ? c : c * (m - 1) / (count - 1);
      double x0 = x[j], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
      x[j] = x0 + h;
      double lp = eval_loss(&lg, work, n_in, training, op);
      x[j] = x0 - h;
      double lm = eval_loss(&lg, work, n_in, training, op);
      x[j] = x0;
      double num = (lp - lm) / (2 * h);
      double scale = fabs(num) > 1 ? fabs(num) : 1;
      if (!(fabs(ga[j] - num) <= tol * scale))
        fail_msg("gradcheck %s: d loss / d input %d, element %lld: analytic %.12g, numeric %.12g (tol %.1e)", op, i,
                 (long long)j, ga[j], num, tol);
    }
    free(ga);
  }
  for (int i = 0; i < n_in; i++) em_tensor_release(work[i]);
  for (int k = 0; k < n; k++) em_tensor_release(analytic[k]);
  loss_free(&lg);
}

void ot_gradcheck(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs, int n_out,
                  unsigned skip_mask, double tol) {
  gradcheck_mode(op, in, n_in, attrs, n_attrs, n_out, skip_mask, tol, 0);
}

void ot_gradcheck_training(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs,
                           int n_out, unsigned skip_mask, double tol) {
  gradcheck_mode(op, in, n_in, attrs, n_attrs, n_out, skip_mask, tol, 1);
}

/* --------------------------------------------------------------- errors --- */

void ot_expect_apply_fails(const char *op, int n_in, const em_dtype *dtypes, const int *ndims,
                           const int64_t *const *shapes, const em_attr *attrs, int n_attrs, int n_out,
                           const char *needle1, const char *needle2) {
  em_graph *g;
  if (em_graph_create(&g)) fail_msg("no graph");
  em_var x[16], y[8];
  for (int i = 0; i < n_in; i++)
    if (em_input(g, NULL, dtypes[i], ndims[i], shapes[i], &x[i])) fail_msg("em_input: %s", em_last_error());
  em_status s = em_apply(g, op, x, n_in, attrs, n_attrs, y, n_out);
  const char *msg = em_last_error();
  char copy[1024];
  snprintf(copy, sizeof copy, "%s", msg ? msg : "");
  em_graph_free(g);
  if (s != EM_ERR_INVALID_ARGUMENT)
    fail_msg("%s: expected EM_ERR_INVALID_ARGUMENT, got %s (%s)", op, em_status_name(s), copy);
  if (!strstr(copy, op)) fail_msg("%s: the message does not name the op: %s", op, copy);
  if (needle1 && !strstr(copy, needle1)) fail_msg("%s: the message lacks \"%s\": %s", op, needle1, copy);
  if (needle2 && !strstr(copy, needle2)) fail_msg("%s: the message lacks \"%s\": %s", op, needle2, copy);
}

em_tensor *ot_run1(const char *op, em_tensor *const *in, int n_in, const em_attr *attrs, int n_attrs) {
  em_tensor *out = NULL;
  if (ot_run(op, in, n_in, attrs, n_attrs, &out, 1)) fail_msg("%s failed: %s", op, em_last_error());
  return out;
}

/* The road of op's step in an em_exec_describe text: the last "  [...]" on the op's line. */
static void road_of(const char *plan, const char *op, char *road, size_t cap) {
  const char *line = strstr(plan, op), *end = line ? strchr(line, '\n') : NULL, *open = NULL;
  for (const char *p = line; p && end && p + 2 < end; p++)
    if (!strncmp(p, "  [", 3)) open = p + 2;
  const char *close = open ? strrchr(open, ']') : NULL;
  if (close && end && close > end) close = NULL;
  snprintf(road, cap, "%.*s", close ? (int)(close - open - 1) : 0, close ? open + 1 : "");
}

em_tensor *ot_run1_on(em_device dev, int portable, const char *op, em_tensor *const *in, int n_in,
                      const em_attr *attrs, int n_attrs, char *road, size_t cap) {
  const char *where = dev.kind == EM_DEVICE_CPU ? "CPU" : "GPU";
  op_graph og;
  if (build(op, in, n_in, attrs, n_attrs, 1, &og)) fail_msg("%s: %s", op, em_last_error());
  em_feed feeds[16];
  for (int i = 0; i < n_in; i++) feeds[i] = (em_feed){og.x[i], in[i]};
  em_exec *e = NULL;
  em_tensor *out = NULL, *host = NULL;
  if (em_exec_create(og.g, og.y, 1, dev, &e)) fail_msg("%s on the %s: %s", op, where, em_last_error());
  if (portable && em_exec_set_mode(e, EM_MODE_PORTABLE)) fail_msg("%s: portable mode: %s", op, em_last_error());
  if (em_exec_run(e, feeds, n_in, &out)) fail_msg("%s on the %s: %s", op, where, em_last_error());
  if (em_tensor_to_device(out, em_cpu(), &host)) fail_msg("%s: copying the output to the CPU: %s", op, em_last_error());
  if (road) {
    char plan[4096];
    em_exec_describe(e, plan, sizeof plan);
    road_of(plan, op, road, cap);
  }
  em_tensor_release(out);
  em_exec_free(e);
  em_graph_free(og.g);
  return host;
}

void ot_expect_values(const em_tensor *t, const double *want, int64_t n, double tol, const char *what) {
  int64_t m;
  double *got = ot_values(t, &m);
  assert_int_equal(m, n);
  ot_expect_close(got, want, n, tol, tol, what);
  free(got);
}

/* ---------------------------------------------------------------- files --- */

void ot_tmp_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/ember_test_%d_%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(), name);
}

unsigned char *ot_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(*n ? *n : 1);
  if (!p || fread(p, 1, *n, f) != *n) fail_msg("cannot read %s", path);
  fclose(f);
  return p;
}

void ot_write_file(const char *path, const unsigned char *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) fail_msg("cannot write %s", path);
  fclose(f);
}

void ot_reseal(unsigned char *p, size_t n) {
  uint64_t h = XXH3_64bits(p, n - 8);
  for (int i = 0; i < 8; i++) p[n - 8 + (size_t)i] = (unsigned char)(h >> (8 * i));
}

/* ---------------------------------------------- gradient ops, second order --- */

#define SO_CHECK(call)                                                  \
  do {                                                                  \
    em_status s_ = (call);                                              \
    if (s_) fail_msg("%s: %s", #call, em_last_error());                 \
  } while (0)

void ot_grad_dy_check(const char *op, em_tensor *const *in, int n_in, int dy_in, const em_attr *at, int n_at,
                      uint64_t seed) {
  em_tensor *y0 = ot_run1(op, in, n_in, at, n_at);
  em_tensor *w = ot_rand(EM_F64, em_tensor_ndim(y0), em_tensor_shape(y0), seed, -1, 1);
  em_graph *g;
  em_var x[4], y, wv, yw, l, gdy;
  if (n_in > 4) fail_msg("ot_grad_dy_check: %d inputs, at most 4", n_in);
  SO_CHECK(em_graph_create(&g));
  for (int i = 0; i < n_in; i++) {
    char name[8];
    snprintf(name, sizeof name, "in%d", i);
    SO_CHECK(em_input(g, name, em_tensor_dtype(in[i]), em_tensor_ndim(in[i]), em_tensor_shape(in[i]), &x[i]));
  }
  SO_CHECK(em_input(g, "w", EM_F64, em_tensor_ndim(w), em_tensor_shape(w), &wv));
  SO_CHECK(em_apply(g, op, x, n_in, at, n_at, &y, 1));
  em_var m[2] = {y, wv};
  SO_CHECK(em_apply(g, "mul", m, 2, NULL, 0, &yw, 1));
  SO_CHECK(em_apply(g, "reduce_sum", &yw, 1, NULL, 0, &l, 1));
  SO_CHECK(em_gradients(g, l, &x[dy_in], 1, &gdy));
  em_exec *e;
  SO_CHECK(em_exec_create(g, &gdy, 1, em_cpu(), &e));
  em_feed f[5];
  for (int i = 0; i < n_in; i++) f[i] = (em_feed){x[i], in[i]};
  f[n_in] = (em_feed){wv, w};
  em_tensor *r;
  SO_CHECK(em_exec_run(e, f, n_in + 1, &r));
  int64_t n, nw, ny;
  double *an = ot_values(r, &n), *wvals = ot_values(w, &nw), *dyv = em_tensor_data(in[dy_in]);
  for (int64_t j = 0; j < n; j++) {
    double keep = dyv[j], sum[2];
    for (int k = 0; k < 2; k++) {
      dyv[j] = keep + (k ? -1e-6 : 1e-6);
      em_tensor *yk = ot_run1(op, in, n_in, at, n_at);
      double *yv = ot_values(yk, &ny);
      sum[k] = 0;
      for (int64_t i = 0; i < ny; i++) sum[k] += yv[i] * wvals[i];
      free(yv);
      em_tensor_release(yk);
    }
    dyv[j] = keep;
    double num = (sum[0] - sum[1]) / 2e-6;
    if (fabs(num - an[j]) > 1e-6 * (1 + fabs(num)))
      fail_msg("gradient of %s with respect to dy, element %lld: analytic %.9g, numeric %.9g", op, (long long)j, an[j],
               num);
  }
  free(an), free(wvals);
  em_tensor_release(r), em_tensor_release(w), em_tensor_release(y0);
  em_exec_free(e);
  em_graph_free(g);
}
