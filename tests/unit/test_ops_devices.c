/* The one every-op-every-device test (in the manner of ggml's test-backend-ops).
 *
 * Every case of tests/unit/op_cases/<family>.c runs on the CPU and on every
 * GPU present, in both numeric modes: the outputs and, for cases with .grad,
 * the gradients of L = sum_k sum(y_k * w_k) are compared with the CPU's:
 * bitwise in portable mode (any NaN matches any NaN: NVIDIA GPUs and x86
 * produce different NaN payloads), within the case's tolerance in the fast
 * mode (integer and bool results exactly).
 *
 * GPUs: the real driver when EMBER_LIBCUDA is set or FAKECUDA_LIB is unset
 * (`make test-gpu` on a lent GPU); else the test double of libcuda
 * (FAKECUDA_LIB, set by build-tools/run_tests.sh) pretending to be an H100.
 * Each path is forced in turn (EMBER_FORCE=cubin, ptx, ptx-legacy, nvrtc, with
 * EMBER_STRICT=1 so nothing falls back). Without any driver the GPU parts
 * skip, saying so; the coverage check still runs.
 *
 * Coverage: an op without its own GPU implementation fails the coverage
 * test unless it is listed in `pending` below, and a listed op that has one
 * fails it too, so the list only shrinks. A GPU run in which a step of an op
 * not listed ran on host copies (its gpu member handed the case back to the
 * CPU) fails as well. Every op with a GPU implementation
 * needs at least one case.
 *
 * Under valgrind only the cubin path runs (see run_path).
 *
 * Inputs are fresh random values each run: the seed is printed, and
 * EMBER_TEST_SEED=<n> repeats a run. OC_FILTER=<families or ops, comma
 * separated> runs only those cases. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <cmocka.h>

#include <valgrind/valgrind.h>

#include "ember.h"
#include "gpu_double.h"
#include "op_cases/op_cases.h"
#include "../../kernels/em_math.h" /* f16 and bf16 conversions */

/* Ops still without a GPU implementation of their own. Shrink it; never grow it. */
static const char *const pending[] = {
#include "op_cases/pending.inc"
};
#define N_PENDING (sizeof pending / sizeof pending[0])

/* ------------------------------------------------------------ the cases --- */

/* The linker's bounds of the section OC_REGISTER fills (weak: no case file, no section). */
extern const oc_table *const __start_oc_tables[] __attribute__((weak));
extern const oc_table *const __stop_oc_tables[] __attribute__((weak));

typedef struct run_case {
  const oc_table *table;
  const oc_case *c;
} run_case;

static run_case *g_cases;
static size_t g_n_cases;
static uint64_t g_seed;

/* Whether the comma-separated list holds the word. */
static int list_has(const char *list, const char *word) {
  size_t lw = strlen(word);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == lw && !strncmp(p, word, len)) return 1;
    p += len + (p[len] == ',');
  }
  return 0;
}

/* OC_FILTER (families or ops): NULL or empty selects all. */
static int selected(const oc_table *t, const oc_case *c) {
  const char *f = getenv("OC_FILTER");
  if (!f || !*f) return 1;
  return list_has(f, t->family) || list_has(f, c->op);
}

static void collect_cases(void) {
  size_t n = 0;
  for (const oc_table *const *t = __start_oc_tables; t < __stop_oc_tables; t++) n += (*t)->n;
  g_cases = calloc(n ? n : 1, sizeof *g_cases);
  for (const oc_table *const *t = __start_oc_tables; t < __stop_oc_tables; t++)
    for (size_t i = 0; i < (*t)->n; i++)
      if (selected(*t, &(*t)->cases[i])) g_cases[g_n_cases++] = (run_case){*t, &(*t)->cases[i]};
}

static const char *case_name(const run_case *r, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s[%s]", r->table->family, r->c->op, r->c->label ? r->c->label : "");
  return buf;
}

/* ---------------------------------------------------------- the inputs --- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * ((double)(splitmix(s) >> 11) * 0x1.0p-53);
}

static void store(em_dtype t, void *p, int64_t i, double v) {
  switch (t) {
  case EM_F32: ((float *)p)[i] = (float)v; break;
  case EM_F64: ((double *)p)[i] = v; break;
  case EM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case EM_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  case EM_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case EM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case EM_F16: ((uint16_t *)p)[i] = em_f32_to_f16_bits((float)v); break;
  case EM_BF16: ((uint16_t *)p)[i] = em_f32_to_bf16_bits((float)v); break;
  default: fail_msg("test_ops_devices: no inputs of dtype %d", (int)t);
  }
}

/* Differentiable dtypes: gradients are compared for these. */
static int is_float(em_dtype t) { return t == EM_F32 || t == EM_F64; }
static int is_floating(em_dtype t) { return is_float(t) || t == EM_F16 || t == EM_BF16; }

/* A host tensor for input k of case c: fixed values, or random ones from the
 * case's seed (so every device and mode sees the same inputs). */
static em_tensor *make_input(const oc_input *in, uint64_t seed) {
  int64_t n = 1;
  for (int d = 0; d < in->ndim; d++) n *= in->dims[d];
  size_t es = em_dtype_size(in->dtype);
  void *buf = malloc((size_t)(n ? n : 1) * es);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    double v = in->values ? in->values[i] : uniform(&seed, in->lo, in->hi);
    if (!in->values && !is_floating(in->dtype)) v = floor(v);
    store(in->dtype, buf, i, v);
  }
  em_tensor *t = NULL;
  em_status s = em_tensor_from_host(em_cpu(), in->dtype, in->ndim, in->dims, buf, (size_t)n * es, &t);
  free(buf);
  if (s) fail_msg("input tensor: %s", em_last_error());
  return t;
}

/* ------------------------------------------------------------- one run --- */

#define MAX_RESULTS 16

/* What one run of a case produced: the op's outputs, then the gradients. */
typedef struct results {
  int n;
  em_tensor *t[MAX_RESULTS]; /* on the host */
  const char *what[MAX_RESULTS];
  char on_host[300];         /* a GPU run: steps that ran their CPU code on host copies, with why */
  int cudnn_max_grad;        /* a GPU run: _max_pool_grad ran through cuDNN (its road says so) */
} results;

static int is_pending(const char *op);
static int pending_index(const char *op, const char *dtype);

/* Per pending entry "op:dtype": bit 0, a GPU run executed such a step on the
 * device; bit 1, one ran on host copies. Only the first: the entry should go
 * (an op like _unary_grad may run some cases of a dtype on the device and
 * others on the host: the entry stays while any does). */
static unsigned char *g_pending_seen;

/* The steps of a GPU executor that ran on host copies although neither their
 * op nor "op:dtype" (the dtype of the step's first output) is pending
 * (em_exec_describe marks them "[on host copies: why]"): a gpu member that
 * hands a case back to the CPU is as missing as no gpu member. */
/* Whether a _max_pool_grad step of e reports cuDNN as its road: only then may a tied window's
 * gradient differ from the CPU's (op_cases.h: ties); Ember's kernels must match it. */
static int max_grad_via_cudnn(const em_exec *e) {
  size_t len = em_exec_describe(e, NULL, 0);
  char *text = malloc(len + 1);
  if (!text) return 0;
  em_exec_describe(e, text, len + 1);
  int via = 0;
  for (char *line = text; line && *line && !via;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    via = strstr(line, " _max_pool_grad(") && strstr(line, "[cuDNN ");
    line = end ? end + 1 : NULL;
  }
  free(text);
  return via;
}

static void find_host_steps(const em_exec *e, char *out, size_t cap) {
  out[0] = 0;
  size_t len = em_exec_describe(e, NULL, 0);
  char *text = malloc(len + 1);
  if (!text) return;
  em_exec_describe(e, text, len + 1);
  for (char *line = text; line && *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    const char *why = strstr(line, "[on host copies: "), *arrow = strstr(line, ") -> ");
    char op[64], dtype[16] = "";
    if (sscanf(line, " %*d node %*d %63[^(]", op) == 1) {
      if (arrow) sscanf(arrow + 5, "%*d:%15[a-z0-9]", dtype);
      int qualified = pending_index(op, dtype);
      if (qualified >= 0) g_pending_seen[qualified] |= why ? 2 : 1;
      if (why && !is_pending(op) && qualified < 0) {
        size_t have = strlen(out);
        snprintf(out + have, cap - have, "%s%s %.80s", have ? "; " : "", op, why + 1);
      }
    }
    line = end ? end + 1 : NULL;
  }
  free(text);
}

static void results_free(results *r) {
  for (int i = 0; i < r->n; i++) em_tensor_release(r->t[i]);
  memset(r, 0, sizeof *r);
}

static int op_outputs(const char *op) {
  size_t n = em_op_info_count();
  for (size_t i = 0; i < n; i++) {
    em_op_info info;
    if (!em_op_info_get(i, &info) && !strcmp(info.name, op)) return info.n_outputs;
  }
  return -1;
}

static const char *const output_names[] = {"y0", "y1", "y2", "y3", "y4", "y5", "y6", "y7"};
static const char *const grad_names[] = {"dx0", "dx1", "dx2", "dx3", "dx4", "dx5", "dx6", "dx7"};
static const char *const state_names[OC_MAX_INPUTS] = {
    "x0 after", "x1 after", "x2 after",  "x3 after",  "x4 after",  "x5 after",  "x6 after",  "x7 after",
    "x8 after", "x9 after", "x10 after", "x11 after", "x12 after", "x13 after", "x14 after", "x15 after"};

/* Builds the case's graph, runs it on dev in mode, fetches everything to the
 * host. Returns the first failure (message in em_last_error()). */
static em_status run_once(const oc_case *c, uint64_t seed, em_device dev, em_mode mode, results *out) {
  memset(out, 0, sizeof *out);
  int n_out = op_outputs(c->op);
  if (n_out < 1 || n_out > 8) return EM_ERR_NOT_FOUND; /* test_coverage names the case */
  em_graph *g = NULL;
  em_exec *e = NULL;
  em_tensor *in[OC_MAX_INPUTS] = {0}, *w[8] = {0};
  em_var x[OC_MAX_INPUTS], y[8], fetch[MAX_RESULTS];
  int n_fetch = 0;
  em_feed feeds[OC_MAX_INPUTS];
  int n_feeds = 0;
  em_status s = em_graph_create(&g);
  for (int k = 0; k < c->n_in && !s; k++) {
    in[k] = make_input(&c->in[k], seed + 7919u * (uint64_t)(k + 1));
    if (c->state & (1u << k)) { /* the graph's own storage, which the op updates in place */
      em_init from = {.kind = EM_INIT_FROM_DATA, .data = in[k]};
      s = em_state(g, NULL, c->in[k].dtype, c->in[k].ndim, c->in[k].dims, &from, &x[k]);
      continue;
    }
    s = em_input(g, NULL, c->in[k].dtype, c->in[k].ndim, c->in[k].dims, &x[k]);
    feeds[n_feeds++] = (em_feed){x[k], in[k]};
  }
  if (!s) s = em_apply(g, c->op, x, c->n_in, c->attrs, c->n_attrs, y, n_out);
  for (int k = 0; k < n_out && !s; k++) {
    fetch[n_fetch] = y[k];
    out->what[n_fetch++] = output_names[k];
  }
  if (!s && c->grad) {
    /* L = sum_k sum(y_k * w_k) over the float outputs, w_k fixed random. */
    em_var terms[8], loss, xs[OC_MAX_INPUTS], dx[OC_MAX_INPUTS];
    int n_terms = 0, n_xs = 0;
    int xk[OC_MAX_INPUTS];
    for (int k = 0; k < n_out && !s; k++) {
      em_dtype dt;
      int nd;
      int64_t shape[EM_MAX_DIMS];
      s = em_var_info(g, y[k], &dt, &nd, shape);
      if (s || !is_float(dt)) continue;
      oc_input wi = {.dtype = dt, .ndim = nd, .lo = 0.5, .hi = 1.5};
      memcpy(wi.dims, shape, sizeof(int64_t) * (size_t)nd);
      w[k] = make_input(&wi, seed ^ (0x5eedull + (uint64_t)k));
      em_var yw[2] = {y[k], -1};
      s = em_constant(g, w[k], &yw[1]);
      if (!s) s = em_apply(g, "_weighted_sum", yw, 2, NULL, 0, &terms[n_terms++], 1);
    }
    if (!s && n_terms) s = em_apply(g, "add_n", terms, n_terms, NULL, 0, &loss, 1);
    for (int k = 0; k < c->n_in; k++)
      if (is_float(c->in[k].dtype)) {
        xk[n_xs] = k;
        xs[n_xs++] = x[k];
      }
    if (!s && n_terms && n_xs) s = em_gradients(g, loss, xs, n_xs, dx);
    for (int i = 0; i < n_xs && n_terms && !s && n_fetch < MAX_RESULTS; i++) {
      fetch[n_fetch] = dx[i];
      out->what[n_fetch++] = grad_names[xk[i]];
    }
  }
  if (!s) s = em_exec_create(g, fetch, n_fetch, dev, &e);
  if (!s) s = em_exec_set_mode(e, mode);
  if (!s) s = em_exec_set_training(e, c->training);
  em_tensor *got[MAX_RESULTS] = {0};
  if (!s) s = em_exec_run(e, feeds, n_feeds, got);
  for (int i = 0; i < n_fetch && !s; i++) s = em_tensor_to_device(got[i], em_cpu(), &out->t[i]);
  /* inputs updated in place: their values after the run, newest copy (the device's) */
  for (int k = 0; k < c->n_in && !s && n_fetch < MAX_RESULTS; k++)
    if (c->state & (1u << k)) {
      s = em_parameter_get(g, x[k], em_cpu(), &out->t[n_fetch]);
      out->what[n_fetch++] = state_names[k];
    }
  if (!s) out->n = n_fetch;
  if (!s && dev.kind == EM_DEVICE_CUDA) find_host_steps(e, out->on_host, sizeof out->on_host);
  if (!s && dev.kind == EM_DEVICE_CUDA) out->cudnn_max_grad = max_grad_via_cudnn(e);
  for (int i = 0; i < n_fetch; i++) em_tensor_release(got[i]);
  for (int k = 0; k < c->n_in; k++) em_tensor_release(in[k]);
  for (int k = 0; k < 8; k++) em_tensor_release(w[k]);
  em_exec_free(e);
  em_graph_free(g);
  if (s) {
    for (int i = 0; i < n_fetch; i++) em_tensor_release(out->t[i]);
    memset(out, 0, sizeof *out);
  }
  return s;
}

/* ---------------------------------------------------------- comparison --- */

static double value_at(const em_tensor *t, int64_t i) {
  const void *p = em_tensor_data(t);
  switch (em_tensor_dtype(t)) {
  case EM_F32: return ((const float *)p)[i];
  case EM_F64: return ((const double *)p)[i];
  case EM_I32: return ((const int32_t *)p)[i];
  case EM_I64: return (double)((const int64_t *)p)[i];
  case EM_U8: case EM_BOOL: return ((const uint8_t *)p)[i];
  case EM_F16: return em_f16_bits_to_f32(((const uint16_t *)p)[i]);
  case EM_BF16: return em_bf16_bits_to_f32(((const uint16_t *)p)[i]);
  default: return NAN;
  }
}

static int same_bits(const em_tensor *a, const em_tensor *b, int64_t i) {
  size_t es = em_dtype_size(em_tensor_dtype(a));
  const unsigned char *pa = (const unsigned char *)em_tensor_data(a) + (size_t)i * es;
  const unsigned char *pb = (const unsigned char *)em_tensor_data(b) + (size_t)i * es;
  if (!memcmp(pa, pb, es)) return 1;
  return is_floating(em_tensor_dtype(a)) && isnan(value_at(a, i)) && isnan(value_at(b, i));
}

/* NULL when got matches want; else one line naming the first difference. */
static const char *compare(const em_tensor *got, const em_tensor *want, int bitwise, double tol, char *buf,
                           size_t cap) {
  char a[128], b[128];
  int shape_ok = em_tensor_dtype(got) == em_tensor_dtype(want) && em_tensor_ndim(got) == em_tensor_ndim(want) &&
                 !memcmp(em_tensor_shape(got), em_tensor_shape(want), sizeof(int64_t) * (size_t)em_tensor_ndim(got));
  if (!shape_ok) {
    snprintf(buf, cap, "is %s, the CPU's is %s", em_tensor_describe(got, a, sizeof a),
             em_tensor_describe(want, b, sizeof b));
    return buf;
  }
  int exact = bitwise || !is_floating(em_tensor_dtype(want));
  int64_t n = em_tensor_numel(want), bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    int ok;
    if (exact) ok = same_bits(got, want, i);
    else {
      double g = value_at(got, i), w = value_at(want, i);
      ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= tol * (1 + fabs(w));
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (!bad) return NULL;
  snprintf(buf, cap, "%lld of %lld elements differ; first at %lld: %.9g, the CPU's %.9g%s", (long long)bad,
           (long long)n, (long long)first, value_at(got, first), value_at(want, first),
           exact ? " (compared bit for bit)" : "");
  return buf;
}

static double case_tol(const oc_case *c) {
  if (c->tol > 0) return c->tol;
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k].dtype == EM_F32) return 1e-5;
  return 1e-12;
}

/* ---------------------------------------------------- CPU references --- */

/* refs[2 * case + mode]: the CPU's results. */
static results *g_refs;
static em_status *g_ref_status;

static void test_cpu_reference(void **state) {
  (void)state;
  int failures = 0;
  char name[160], buf[400];
  for (size_t i = 0; i < g_n_cases; i++) {
    const oc_case *c = g_cases[i].c;
    uint64_t seed = g_seed + 104729u * (uint64_t)i;
    for (int m = 0; m < 2; m++) {
      g_ref_status[2 * i + m] = run_once(c, seed, em_cpu(), (em_mode)m, &g_refs[2 * i + m]);
      if (g_ref_status[2 * i + m]) {
        print_error("%s (%s, cpu): %s\n", case_name(&g_cases[i], name, sizeof name), m ? "portable" : "fast",
                    em_last_error());
        failures++;
      }
    }
    /* The CPU's two modes agree within the tolerance (they differ only in summation order). */
    results *f = &g_refs[2 * i], *p = &g_refs[2 * i + 1];
    for (int k = 0; k < f->n && k < p->n; k++)
      if (compare(p->t[k], f->t[k], 0, case_tol(c) * 10, buf, sizeof buf)) {
        print_error("%s %s: cpu portable vs fast: %s\n", case_name(&g_cases[i], name, sizeof name), f->what[k], buf);
        failures++;
      }
  }
  if (failures) fail_msg("%d CPU runs failed (above)", failures);
}

/* ------------------------------------------------------------- the GPUs --- */

static int g_gpu_count;
static char g_gpu_skip[200];

static void choose_driver(void) {
  em_shutdown(); /* the CPU runs before may have started the runtime without a driver chosen */
  g_gpu_count = ts_use_gpu();
  if (g_gpu_count == 0) snprintf(g_gpu_skip, sizeof g_gpu_skip, "no CUDA driver, real or test double (%s)", em_last_error());
}

/* Whether this build embeds images the path loads: a build without nvcc
 * (make test-nocuda) has no cubins, only the committed PTX and the sources. */
static int build_has_path(const char *path) {
  size_t n = 0;
  if (em_image_count(&n)) return 0;
  for (size_t i = 0; i < n; i++) {
    em_image_info img;
    if (em_image_get(i, &img)) continue;
    int legacy = (img.flags & EM_IMAGE_LEGACY) != 0;
    if ((!strcmp(path, "cubin") && img.kind == EM_IMAGE_CUBIN) ||
        (!strcmp(path, "ptx") && img.kind == EM_IMAGE_PTX && !legacy) ||
        (!strcmp(path, "ptx-legacy") && img.kind == EM_IMAGE_PTX && legacy) ||
        (!strcmp(path, "nvrtc") && img.kind == EM_IMAGE_SOURCE))
      return 1;
  }
  return 0;
}

static void run_path(const char *path) {
  if (!g_gpu_count) {
    print_message("test_ops_devices: GPU part SKIPPED: %s\n", g_gpu_skip);
    skip();
  }
  /* Under valgrind (make test-valgrind, 20-50x slower) one path suffices: the
   * paths differ in how a module is loaded, not in the kernels the double runs,
   * and the plain and sanitizer runs take all four. */
  if (RUNNING_ON_VALGRIND && strcmp(path, "cubin")) {
    print_message("test_ops_devices: path %s not run under valgrind (the plain and ASan runs cover it)\n", path);
    return;
  }
  /* OC_PATHS=cubin,ptx (say) runs only those paths: on a lent GPU with minutes
   * to spend, the quick paths first and the compiling ones (ptx-legacy, nvrtc)
   * after. A path left out skips, so a filtered run never reads as complete. */
  const char *only = getenv("OC_PATHS");
  if (only && *only && !list_has(only, path)) {
    print_message("test_ops_devices: path %s SKIPPED: not in OC_PATHS=%s\n", path, only);
    skip();
  }
  if (!build_has_path(path)) {
    print_message("test_ops_devices: path %s SKIPPED: this build embeds no image for it (built without nvcc?)\n", path);
    skip();
  }
  setenv("EMBER_FORCE", path, 1);
  setenv("EMBER_STRICT", "1", 1);
  em_shutdown();
  int failures = 0, runs = 0;
  char name[160], buf[400];
  for (int d = 0; d < g_gpu_count; d++)
    for (size_t i = 0; i < g_n_cases; i++) {
      const oc_case *c = g_cases[i].c;
      uint64_t seed = g_seed + 104729u * (uint64_t)i;
      for (int m = 0; m < 2; m++) {
        if (g_ref_status[2 * i + m]) continue; /* reported by the CPU test */
        results r;
        runs++;
        em_status s = run_once(c, seed, em_cuda(d), (em_mode)m, &r);
        const char *mode = m ? "portable" : "fast";
        if (s) {
          print_error("%s (%s, cuda:%d, %s): %s\n", case_name(&g_cases[i], name, sizeof name), mode, d, path,
                      em_last_error());
          failures++;
          continue;
        }
        if (r.on_host[0]) {
          print_error("%s (%s, cuda:%d, %s): ran on host copies: %s\n", case_name(&g_cases[i], name, sizeof name), mode,
                      d, path, r.on_host);
          failures++;
        }
        const results *want = &g_refs[2 * i + m];
        for (int k = 0; k < want->n; k++) {
          if (c->ties && m == EM_MODE_FAST && r.cudnn_max_grad && !strncmp(want->what[k], "dx", 2))
            continue; /* op_cases.h: ties, where cuDNN ran the gradient */
          const char *diff = compare(r.t[k], want->t[k], m == EM_MODE_PORTABLE, case_tol(c), buf, sizeof buf);
          if (diff) {
            print_error("%s %s (%s, cuda:%d, %s): %s\n", case_name(&g_cases[i], name, sizeof name), want->what[k],
                        mode, d, path, diff);
            failures++;
          }
        }
        results_free(&r);
      }
    }
  unsetenv("EMBER_FORCE");
  unsetenv("EMBER_STRICT");
  em_shutdown();
  if (failures) fail_msg("%d of %d GPU runs on path %s differ from the CPU or failed (above)", failures, runs, path);
}

/* After the GPU runs: an "op:dtype" entry that ran on the device goes. */
static void test_pending_still_pending(void **state) {
  (void)state;
  if (!g_gpu_count) skip();
  /* An "op:dtype" entry is pending while some case of it falls back: with a
   * subset of the cases, the ones that fall back may not have run. */
  const char *filter = getenv("OC_FILTER");
  if (filter && *filter) {
    print_message("test_pending_still_pending: SKIPPED: OC_FILTER runs a subset of the cases\n");
    skip();
  }
  int failures = 0;
  for (size_t i = 0; i < N_PENDING; i++)
    if (g_pending_seen[i] == 1) {
      print_error("'%s' now runs on the GPU: remove it from tests/unit/op_cases/pending.inc\n", pending[i]);
      failures++;
    }
  if (failures) fail_msg("%d pending entries are no longer pending (above)", failures);
}

static void test_gpu_cubin(void **state) { (void)state; run_path("cubin"); }
static void test_gpu_ptx(void **state) { (void)state; run_path("ptx"); }
static void test_gpu_ptx_legacy(void **state) { (void)state; run_path("ptx-legacy"); }
static void test_gpu_nvrtc(void **state) { (void)state; run_path("nvrtc"); }

/* ------------------------------------------------------------ coverage --- */

/* An entry "op": the op has no GPU implementation. */
static int is_pending(const char *op) {
  for (size_t i = 0; i < N_PENDING; i++)
    if (pending[i] && !strcmp(pending[i], op)) return 1;
  return 0;
}

/* An entry "op:dtype": the op's gpu member hands that dtype back to the CPU.
 * Its index, or -1. */
static int pending_index(const char *op, const char *dtype) {
  size_t lo = strlen(op);
  for (size_t i = 0; i < N_PENDING; i++)
    if (pending[i] && !strncmp(pending[i], op, lo) && pending[i][lo] == ':' && !strcmp(pending[i] + lo + 1, dtype))
      return (int)i;
  return -1;
}

/* The op name of a pending entry ("exp:f64" -> "exp"). */
static const char *pending_op(size_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%.*s", (int)strcspn(pending[i], ":"), pending[i]);
  return buf;
}

static int has_case(const char *op) {
  for (const oc_table *const *t = __start_oc_tables; t < __stop_oc_tables; t++)
    for (size_t i = 0; i < (*t)->n; i++)
      if (!strcmp((*t)->cases[i].op, op)) return 1;
  return 0;
}

static void test_coverage(void **state) {
  (void)state;
  int failures = 0, n_pending = 0;
  size_t n = em_op_info_count();
  for (size_t i = 0; i < n; i++) {
    em_op_info info;
    assert_int_equal(em_op_info_get(i, &info), EM_OK);
    int p = is_pending(info.name);
    n_pending += p;
    if (!info.gpu && !p) {
      print_error("op '%s' has no GPU implementation (ops/<family>_gpu.c)\n", info.name);
      failures++;
    } else if (info.gpu && p) {
      print_error("op '%s' now runs on the GPU: remove it from tests/unit/op_cases/pending.inc\n", info.name);
      failures++;
    }
    /* Internal ops (gradients) are reached through the cases' .grad. */
    if (info.gpu && !info.internal && !has_case(info.name)) {
      print_error("op '%s' runs on the GPU but no case in tests/unit/op_cases/ tests it\n", info.name);
      failures++;
    }
  }
  for (const oc_table *const *t = __start_oc_tables; t < __stop_oc_tables; t++)
    for (size_t i = 0; i < (*t)->n; i++)
      if (op_outputs((*t)->cases[i].op) < 0) {
        print_error("case %s/%s names no op\n", (*t)->family, (*t)->cases[i].op);
        failures++;
      }
  char op[64];
  for (size_t i = 0; i < N_PENDING; i++)
    if (pending[i] && op_outputs(pending_op(i, op, sizeof op)) < 0) {
      print_error("pending.inc names '%s', which is no op\n", pending[i]);
      failures++;
    }
  print_message("test_ops_devices: %zu ops, %d still without a GPU implementation (pending.inc)\n", n, n_pending);
  if (failures) fail_msg("%d coverage problems (above)", failures);
}

int main(void) {
  const char *seed = getenv("EMBER_TEST_SEED");
  g_seed = seed && *seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("test_ops_devices: seed %llu (EMBER_TEST_SEED=%llu repeats this run)\n", (unsigned long long)g_seed,
         (unsigned long long)g_seed);
  collect_cases();
  printf("test_ops_devices: %zu cases\n", g_n_cases);
  g_refs = calloc(2 * (g_n_cases ? g_n_cases : 1), sizeof *g_refs);
  g_ref_status = calloc(2 * (g_n_cases ? g_n_cases : 1), sizeof *g_ref_status);
  g_pending_seen = calloc(N_PENDING, 1);
  choose_driver();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_coverage),
    cmocka_unit_test(test_cpu_reference),
    cmocka_unit_test(test_gpu_cubin),
    cmocka_unit_test(test_gpu_ptx),
    cmocka_unit_test(test_gpu_ptx_legacy),
    cmocka_unit_test(test_gpu_nvrtc),
    cmocka_unit_test(test_pending_still_pending),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  for (size_t i = 0; i < 2 * g_n_cases; i++) results_free(&g_refs[i]);
  free(g_refs);
  free(g_ref_status);
  free(g_cases);
  free(g_pending_seen);
  em_shutdown();
  return rc;
}
