/* oneDNN for the fast CPU mode's convolutions and matrix products, loaded by Ember on first use.
 *
 * Why: Ember's own fast-mode convolution is im2col + OpenBLAS (ops/conv.c),
 * whose floor on ResNet-18 is about 1.6x onnxruntime's time on one thread
 * (the sgemm alone takes as long as onnxruntime's whole run; packing and
 * im2col add a third). oneDNN's direct convolutions on its blocked layouts
 * run ResNet's 3x3 layers at 240-320 GFLOP/s against ~150 for im2col +
 * OpenBLAS here (bench/results/cpu-2026-11-28-afadc5f-onednn-conv-probe.md).
 *
 * How: a contiguous NCHW x is reordered into the layout oneDNN chose and y
 * reordered back (the probe's "with reorders" column); channels-last x and y
 * (NHWC memory, which the executor keeps between convolutions and
 * element-wise ops: engine/layout.c) go to its NHWC kernels as they are.
 * An x * sigmoid(x) the executor fused into a convolution becomes a
 * post-op. The weights' reordered form is kept with the weights
 * when they are a graph value (em_tensor_derived, engine/tensor_internal.h:
 * dropped when the value changes), so a model's weights are reordered once,
 * not on every run. Primitives are built once per case and thread count (a
 * small cache below). Matrix products with one weight matrix (linalg.c) use
 * the same machinery with oneDNN's matmul.
 *
 * Optional: without libdnnl.so.2 (Debian: libdnnl2), with EMBER_DNNL=0, or
 * where oneDNN has no kernel for a case, em_dnnl_conv_fwd does nothing and
 * conv.c computes the convolution itself; only the speed differs. The
 * header fixes the ABI (the 2.x C API, whose memory descriptors are plain
 * structs), so Ember built against another major version does not use it.
 * EMBER_LIBDNNL names another file to load (tests load a missing one).
 *
 * Numbers: fast mode (ops/conv.c says what portable mode does instead).
 * oneDNN's kernels and their blocking are chosen per ISA and shape, so
 * results differ from im2col + OpenBLAS's in the last bits and may differ
 * between CPUs. Ember's promise of the same bits for every thread count is
 * kept (see "thread counts" below): its GEMM-based kernels are declined, and
 * a plan for several threads whose sums differ from the one-thread plan's is
 * replaced by that one.
 *
 * Concurrency: primitives get Ember's scratchpads (user mode, per thread), as
 * oneDNN's shared one is unsafe for distinct primitives running at once. */
#include "dnnl.h"

#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "op.h"
#include "tensor_internal.h"

#if defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#if DNNL_VERSION_MAJOR == 2
#define HAVE_DNNL 1
#endif
#endif
#endif

#ifndef HAVE_DNNL

em_status em_dnnl_conv_fwd(const em_dnnl_conv_geom *gm, const em_tensor *w, const float *x, int x_cl,
                           const float *bias, float *y, int y_cl, const em_dnnl_post *post, int *done) {
  (void)gm, (void)w, (void)x, (void)x_cl, (void)bias, (void)y, (void)y_cl, (void)post;
  *done = 0;
  return EM_OK;
}

em_status em_dnnl_conv_takes(const em_dnnl_conv_geom *gm, int has_bias, int x_cl, int y_cl,
                             const em_dnnl_post *post, int *yes) {
  (void)gm, (void)has_bias, (void)x_cl, (void)y_cl, (void)post;
  *yes = 0;
  return EM_OK;
}

em_status em_dnnl_matmul(const em_dnnl_matmul_geom *mm, const em_tensor *w, const float *x, const float *bias,
                         float *y, int *done) {
  (void)mm, (void)w, (void)x, (void)bias, (void)y;
  *done = 0;
  return EM_OK;
}

EM_API void em_cpu_conv_info(char *buf, size_t n) { snprintf(buf, n, "not used: Ember was built without oneDNN 2's headers"); }

uint64_t em_dnnl_plan_builds(void) { return 0; }

#else

#define LIB_NAME "libdnnl.so.2"
#define PLAN_CAP 256 /* geometries kept (a model has a few dozen) */

/* The functions Ember calls, typed by the header's declarations. */
#define DNNL_FNS(X)                                                                                                \
  X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_destroy) X(dnnl_stream_wait)                         \
  X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_get_size) X(dnnl_memory_desc_equal)                          \
  X(dnnl_dilated_convolution_forward_desc_init) X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy)      \
  X(dnnl_primitive_desc_query_md) X(dnnl_primitive_desc_query) X(dnnl_primitive_create)                          \
  X(dnnl_primitive_destroy) X(dnnl_primitive_execute) X(dnnl_reorder_primitive_desc_create) X(dnnl_memory_create) \
  X(dnnl_memory_destroy) X(dnnl_version) X(dnnl_get_effective_cpu_isa) X(dnnl_primitive_attr_create)            \
  X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_scratchpad_mode) X(dnnl_post_ops_create)             \
  X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_eltwise) X(dnnl_primitive_attr_set_post_ops)               \
  X(dnnl_matmul_desc_init)

static struct {
  pthread_once_t once;
  int ok;
  char why[512]; /* why oneDNN is not used */
  void *lib;
  dnnl_engine_t eng;
  dnnl_primitive_attr_t attr; /* every primitive's: scratchpads are Ember's (a step's own, per thread) */
#define MEMBER(f) __typeof__(f) *f;
  DNNL_FNS(MEMBER)
#undef MEMBER
} D = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
  const char *off = getenv("EMBER_DNNL");
  if (off && !strcmp(off, "0")) {
    snprintf(D.why, sizeof D.why, "switched off (EMBER_DNNL=0)");
    return;
  }
  const char *name = getenv("EMBER_LIBDNNL");
  if (!name || !name[0]) name = LIB_NAME;
  D.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!D.lib) {
    const char *e = dlerror();
    snprintf(D.why, sizeof D.why, "%s could not be loaded (%s; Debian: apt install libdnnl2)", name, e ? e : "?");
    return;
  }
  int missing = 0;
#define RESOLVE(f)                                                               \
  if (!(*(void **)&D.f = dlsym(D.lib, #f)) && !missing++)                        \
    snprintf(D.why, sizeof D.why, "%s lacks %s: not a oneDNN 2 Ember can use", name, #f);
  DNNL_FNS(RESOLVE)
#undef RESOLVE
  const dnnl_version_t *v = missing ? NULL : D.dnnl_version();
  if (v && v->major != DNNL_VERSION_MAJOR)
    snprintf(D.why, sizeof D.why, "%s is oneDNN %d.%d, Ember was built for %d.x", name, v->major, v->minor,
             DNNL_VERSION_MAJOR);
  if (!v || v->major != DNNL_VERSION_MAJOR) { /* not one Ember can use: let it go */
    dlclose(D.lib);
    D.lib = NULL;
    return;
  }
  /* User scratchpads: in its default mode oneDNN shares one scratchpad between primitives,
   * which its documentation says is unsafe when distinct primitives run at once (two
   * executors on two threads), unless it was built with DNNL_ENABLE_CONCURRENT_EXEC. */
  dnnl_status_t s = D.dnnl_engine_create(&D.eng, dnnl_cpu, 0);
  if (!s) s = D.dnnl_primitive_attr_create(&D.attr);
  if (!s) s = D.dnnl_primitive_attr_set_scratchpad_mode(D.attr, dnnl_scratchpad_mode_user);
  if (s != dnnl_success) {
    snprintf(D.why, sizeof D.why, "%s: creating its engine failed (status %d)", name, (int)s);
    return;
  }
  D.ok = 1;
}

static int loaded(void) {
  pthread_once(&D.once, load);
  return D.ok;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "other";
  }
}

EM_API void em_cpu_conv_info(char *buf, size_t n) {
  if (!loaded()) {
    snprintf(buf, n, "not used: %s", D.why);
    return;
  }
  const dnnl_version_t *v = D.dnnl_version();
  snprintf(buf, n, "oneDNN %d.%d.%d (%s), ISA %s", v->major, v->minor, v->patch, LIB_NAME,
           isa_name(D.dnnl_get_effective_cpu_isa()));
}

/* ------------------------------------------------------------- plans --- */

/* What decides a plan: the geometry, whether there is a bias, the layouts of x and y as Ember
 * holds them (contiguous or channels-last), and the thread count (oneDNN picks its blocking
 * for the threads it will have). Zeroed before filling: compared as bytes. */
enum { PLAN_CONV, PLAN_MATMUL };

typedef struct plan_key {
  int kind;                     /* PLAN_CONV: gm; PLAN_MATMUL: mm */
  em_dnnl_conv_geom gm;
  em_dnnl_matmul_geom mm;
  int has_bias, threads;
  int x_cl, y_cl;
  em_dnnl_post post;            /* kind 0: none */
} plan_key;

/* A primitive and the scratchpad it wants (Ember's memory: user mode). */
typedef struct step {
  dnnl_primitive_t prim;        /* NULL: no such step */
  dnnl_memory_desc_t scratch;
  size_t scratch_bytes;
} step;

typedef struct plan {
  atomic_int refs;              /* the cache's and each user's */
  plan_key key;
  uint64_t used;                /* the cache's clock at the last use */
  int ok;                       /* oneDNN has a kernel for it; else nothing below is set */
  struct plan *single;          /* the one-thread plan whose bits this one gives (itself, or the one-thread
                                 * plan where this one's differ: it then runs that, on one thread) */
  step main;                    /* the convolution or the product */
  step to_src, to_wei, from_dst; /* reorders; none where the plain layout is oneDNN's */
  dnnl_memory_desc_t src, wei, dst, bias;    /* oneDNN's layouts (bias: plain) */
  dnnl_memory_desc_t src_plain, wei_plain, dst_plain;
  dnnl_primitive_attr_t attr;   /* the convolution's attributes where it has a post-op (else D.attr) */
} plan;

static struct {
  pthread_mutex_t lock;
  plan *slot[PLAN_CAP];
  uint64_t clock;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void plan_release(plan *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  const step *steps[] = {&p->main, &p->to_src, &p->to_wei, &p->from_dst};
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
    if (steps[i]->prim) D.dnnl_primitive_destroy(steps[i]->prim);
  if (p->single != p) plan_release(p->single);
  if (p->attr) D.dnnl_primitive_attr_destroy(p->attr);
  free(p);
}

static const char *status_name(dnnl_status_t s) {
  switch (s) {
  case dnnl_out_of_memory: return "out of memory";
  case dnnl_invalid_arguments: return "invalid arguments";
  case dnnl_unimplemented: return "unimplemented";
  case dnnl_runtime_error: return "runtime error";
  default: return "failure";
  }
}

static em_status dnnl_error(const char *call, dnnl_status_t s, const plan_key *key) {
  const em_status code = s == dnnl_out_of_memory ? EM_ERR_OUT_OF_MEMORY : EM_ERR_INTERNAL;
  const em_dnnl_conv_geom *gm = &key->gm;
  const em_dnnl_matmul_geom *mm = &key->mm;
  if (key->kind == PLAN_MATMUL)
    return em_fail(code, "matrix product through oneDNN (x [%lld, %lld], w [%lld, %lld]%s): %s: %s (status %d)",
                   (long long)mm->m, (long long)mm->k, (long long)(mm->tw ? mm->n : mm->k),
                   (long long)(mm->tw ? mm->k : mm->n), mm->tw ? " transposed" : "", call, status_name(s), (int)s);
  return em_fail(code,
                 "convolution through oneDNN (x [%lld, %lld, ...], w [%lld, %lld, ...], groups %lld): %s: %s (status %d)",
                 (long long)gm->n, (long long)gm->ci, (long long)gm->co, (long long)(gm->ci / gm->groups),
                 (long long)gm->groups, call, status_name(s), (int)s);
}

/* NC<spatial> activations (N<spatial>C: channels-last) and [g,] O I <spatial> weights for ns
 * spatial axes (1..3). */
static dnnl_format_tag_t act_tag(int ns, int cl) {
  if (cl) return ns == 1 ? dnnl_nwc : ns == 2 ? dnnl_nhwc : dnnl_ndhwc;
  return ns == 1 ? dnnl_ncw : ns == 2 ? dnnl_nchw : dnnl_ncdhw;
}

static dnnl_format_tag_t wei_tag(int ns, int grouped) {
  if (grouped) return ns == 1 ? dnnl_goiw : ns == 2 ? dnnl_goihw : dnnl_goidhw;
  return ns == 1 ? dnnl_oiw : ns == 2 ? dnnl_oihw : dnnl_oidhw;
}

/* The step of a primitive descriptor (which it destroys). */
static dnnl_status_t step_of(dnnl_primitive_desc_t pd, step *out) {
  out->scratch = *D.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  out->scratch_bytes = D.dnnl_memory_desc_get_size(&out->scratch);
  dnnl_status_t s = D.dnnl_primitive_create(&out->prim, pd);
  D.dnnl_primitive_desc_destroy(pd);
  return s;
}

/* A reorder from one layout to another; no step when they are the same. */
static dnnl_status_t reorder_between(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, step *out) {
  if (D.dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd;
  dnnl_status_t s = D.dnnl_reorder_primitive_desc_create(&pd, from, D.eng, to, D.eng, D.attr);
  return s ? s : step_of(pd, out);
}

/* The end padding oneDNN wants for the sizes to agree: (col - 1) s + (k - 1) d + 1 - img - pb, or 0
 * where that is negative (the last window stops short of the image's end) and a floor division
 * still gives col. -1 where the sizes cannot be expressed. */
static int64_t end_padding(const em_dnnl_conv_geom *gm, int i) {
  const int64_t span = (gm->k[i] - 1) * gm->d[i] + 1;
  const int64_t need = (gm->col[i] - 1) * gm->s[i] + span - gm->img[i] - gm->pb[i];
  if (need >= 0) return need;
  return (gm->img[i] + gm->pb[i] - span) / gm->s[i] + 1 == gm->col[i] ? 0 : -1;
}

static atomic_uint_fast64_t g_plan_builds;

uint64_t em_dnnl_plan_builds(void) { return atomic_load(&g_plan_builds); }

static em_status plan_finish(plan *p, dnnl_primitive_desc_t pd);
static int kernel_taken(dnnl_primitive_desc_t pd);
static em_status matmul_build(plan *p);

/* The primitive descriptor of p's convolution with these tensor layouts (*pd), or NULL where
 * oneDNN has no kernel Ember takes for it; an error only for other failures. */
static em_status choose_kernel(const plan *p, const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *w,
                               const dnnl_memory_desc_t *y, const dnnl_dim_t *strides, const dnnl_dim_t *dil,
                               const dnnl_dim_t *pl, const dnnl_dim_t *pr, dnnl_primitive_desc_t *pd) {
  *pd = NULL;
  dnnl_convolution_desc_t cd;
  dnnl_status_t s = D.dnnl_dilated_convolution_forward_desc_init(
      &cd, dnnl_forward_inference, dnnl_convolution_direct, x, w, p->key.has_bias ? &p->bias : NULL, y, strides,
      dil, pl, pr);
  if (s) return s == dnnl_out_of_memory ? dnnl_error("describing the convolution", s, &p->key) : EM_OK;
  if ((s = D.dnnl_primitive_desc_create(pd, &cd, p->attr ? p->attr : D.attr, D.eng, NULL))) {
    *pd = NULL;
    return s == dnnl_out_of_memory ? dnnl_error("choosing a kernel", s, &p->key) : EM_OK; /* unimplemented: not ours */
  }
  if (!kernel_taken(*pd)) *pd = NULL; /* those cases stay with conv.c */
  return EM_OK;
}

/* p->attr: Ember's scratchpads and the post-op: x * sigmoid(x) (oneDNN's swish with alpha 1),
 * the one conv.c asks for (its relu and clip turn NaNs into 0: conv.c's dnnl_post_of). */
static dnnl_status_t post_attr(plan *p) {
  if (p->key.post.kind != EM_POST_SWISH) return dnnl_unimplemented;
  dnnl_post_ops_t ops = NULL;
  dnnl_status_t s = D.dnnl_primitive_attr_create(&p->attr);
  if (!s) s = D.dnnl_primitive_attr_set_scratchpad_mode(p->attr, dnnl_scratchpad_mode_user);
  if (!s) s = D.dnnl_post_ops_create(&ops);
  if (!s) s = D.dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f);
  if (!s) s = D.dnnl_primitive_attr_set_post_ops(p->attr, ops);
  if (ops) D.dnnl_post_ops_destroy(ops);
  return s;
}

/* Builds a plan. *p->ok = 0 where oneDNN has no kernel; an error only for other failures. */
static em_status plan_build(plan *p) {
  atomic_fetch_add(&g_plan_builds, 1);
  if (p->key.kind == PLAN_MATMUL) return matmul_build(p);
  const em_dnnl_conv_geom *gm = &p->key.gm;
  const int ns = gm->nsp, nd = 2 + ns, grouped = gm->groups > 1;
  dnnl_dims_t xd = {gm->n, gm->ci}, wd, yd = {gm->n, gm->co}, bd = {gm->co}, strides, dil, pl, pr;
  int wn = 0;
  if (grouped) wd[wn++] = gm->groups;
  wd[wn++] = gm->co / gm->groups;
  wd[wn++] = gm->ci / gm->groups;
  for (int i = 0; i < ns; i++) {
    xd[2 + i] = gm->img[i];
    yd[2 + i] = gm->col[i];
    wd[wn++] = gm->k[i];
    strides[i] = gm->s[i];
    dil[i] = gm->d[i] - 1; /* oneDNN counts the gaps */
    pl[i] = gm->pb[i];
    if ((pr[i] = end_padding(gm, i)) < 0 || pl[i] < 0) return EM_OK;
  }
  dnnl_memory_desc_t x_any, w_any, y_any;
  dnnl_status_t s;
  if ((s = D.dnnl_memory_desc_init_by_tag(&p->src_plain, nd, xd, dnnl_f32, act_tag(ns, p->key.x_cl))) ||
      (s = D.dnnl_memory_desc_init_by_tag(&p->wei_plain, wn, wd, dnnl_f32, wei_tag(ns, grouped))) ||
      (s = D.dnnl_memory_desc_init_by_tag(&p->dst_plain, nd, yd, dnnl_f32, act_tag(ns, p->key.y_cl))) ||
      (s = D.dnnl_memory_desc_init_by_tag(&p->bias, 1, bd, dnnl_f32, dnnl_x)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&x_any, nd, xd, dnnl_f32, dnnl_format_tag_any)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&w_any, wn, wd, dnnl_f32, dnnl_format_tag_any)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&y_any, nd, yd, dnnl_f32, dnnl_format_tag_any)))
    return s == dnnl_out_of_memory ? dnnl_error("describing the tensors", s, &p->key) : EM_OK;
  if (p->key.post.kind && (s = post_attr(p))) return s == dnnl_out_of_memory ? dnnl_error("describing a post-op", s, &p->key) : EM_OK;
  /* Channels-last tensors go to oneDNN's NHWC kernels as they are, where it has a direct one
   * for the case; else (and for contiguous ones) the layouts it prefers, with reorders. */
  dnnl_primitive_desc_t pd = NULL;
  if (p->key.x_cl || p->key.y_cl) {
    em_status st = choose_kernel(p, &p->src_plain, &w_any, &p->dst_plain, strides, dil, pl, pr, &pd);
    if (st) return st;
  }
  if (!pd) {
    em_status st = choose_kernel(p, &x_any, &w_any, &y_any, strides, dil, pl, pr, &pd);
    if (st || !pd) return st;
  }
  return plan_finish(p, pd);
}

/* The rest of a plan once its kernel is chosen (pd, which it takes): oneDNN's layouts, the
 * primitive, and the reorders from and to Ember's layouts. */
static em_status plan_finish(plan *p, dnnl_primitive_desc_t pd) {
  p->src = *D.dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  p->wei = *D.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  p->dst = *D.dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  dnnl_status_t s = step_of(pd, &p->main);
  if (!s) s = reorder_between(&p->src_plain, &p->src, &p->to_src);
  if (!s) s = reorder_between(&p->wei_plain, &p->wei, &p->to_wei);
  if (!s) s = reorder_between(&p->dst, &p->dst_plain, &p->from_dst);
  if (s) return dnnl_error("building the kernels", s, &p->key);
  p->ok = 1;
  return EM_OK;
}

/* Whether oneDNN's choice pd is one Ember takes (destroying it where not): not its im2col +
 * GEMM kernels ("gemm:jit", chosen for shapes its direct kernels do not take, such as small
 * grouped 1-D convolutions: Ember's own design, and with several threads their sums differ
 * from one thread's in ways a probe does not always show, found by a sweep of random
 * geometries), not its reference kernels ("ref:any", chosen for layout pairs its direct
 * kernels lack, such as NCHW in and NHWC out: plain loops, a hundred times slower than
 * Ember's own paths). */
static int kernel_taken(dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  if (!D.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) && impl && !strstr(impl, "gemm") &&
      !strstr(impl, "ref"))
    return 1;
  D.dnnl_primitive_desc_destroy(pd);
  return 0;
}

/* A plan for y [m, n] = x [m, k] w [k, n] (+ bias [n]), all row-major, w stored transposed
 * ([n, k]) where tw: oneDNN's matmul on the weights in the layout it prefers (reordered once
 * and kept with them), x and y as they are. */
static em_status matmul_build(plan *p) {
  const em_dnnl_matmul_geom *mm = &p->key.mm;
  dnnl_dims_t xd = {mm->m, mm->k}, wd = {mm->k, mm->n}, yd = {mm->m, mm->n}, bd = {1, mm->n};
  dnnl_memory_desc_t w_any;
  dnnl_status_t s;
  if ((s = D.dnnl_memory_desc_init_by_tag(&p->src_plain, 2, xd, dnnl_f32, dnnl_ab)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&p->wei_plain, 2, wd, dnnl_f32, mm->tw ? dnnl_ba : dnnl_ab)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&p->dst_plain, 2, yd, dnnl_f32, dnnl_ab)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&p->bias, 2, bd, dnnl_f32, dnnl_ab)) ||
      (s = D.dnnl_memory_desc_init_by_tag(&w_any, 2, wd, dnnl_f32, dnnl_format_tag_any)))
    return s == dnnl_out_of_memory ? dnnl_error("describing the tensors", s, &p->key) : EM_OK;
  dnnl_matmul_desc_t md;
  if ((s = D.dnnl_matmul_desc_init(&md, &p->src_plain, &w_any, p->key.has_bias ? &p->bias : NULL, &p->dst_plain)))
    return s == dnnl_out_of_memory ? dnnl_error("describing the product", s, &p->key) : EM_OK;
  dnnl_primitive_desc_t pd;
  if ((s = D.dnnl_primitive_desc_create(&pd, &md, D.attr, D.eng, NULL)))
    return s == dnnl_out_of_memory ? dnnl_error("choosing a kernel", s, &p->key) : EM_OK;
  return kernel_taken(pd) ? plan_finish(p, pd) : EM_OK;
}

static em_status plan_single(plan *p);

/* The plan for key, from the cache or built (and kept, evicting the least recently used). */
static em_status plan_get(const plan_key *key, plan **out) {
  pthread_mutex_lock(&P.lock);
  for (int i = 0; i < PLAN_CAP; i++) {
    plan *p = P.slot[i];
    if (p && !memcmp(&p->key, key, sizeof *key)) {
      p->used = ++P.clock;
      atomic_fetch_add(&p->refs, 1);
      pthread_mutex_unlock(&P.lock);
      *out = p;
      return EM_OK;
    }
  }
  pthread_mutex_unlock(&P.lock);
  plan *p = calloc(1, sizeof *p);
  if (!p) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a oneDNN convolution plan");
  atomic_init(&p->refs, 1);
  memcpy(&p->key, key, sizeof *key); /* bytes, padding included: keys are compared with memcmp */
  em_status st = plan_build(p);
  if (!st) st = plan_single(p);
  if (st) {
    plan_release(p);
    return st;
  }
  /* Kept unless another thread built the same plan meanwhile (then both run; one is kept). */
  pthread_mutex_lock(&P.lock);
  /* where it goes is decided now, not before the build: plan_single's own plan_get (the
   * one-thread plan) and other threads fill slots meanwhile, and no plan is evicted while a
   * slot is free (else building each layer's plan for several threads evicted the previous
   * layer's, and a model's second run built them all again) */
  int dup = 0, free_slot = -1, oldest = 0;
  for (int i = 0; i < PLAN_CAP && !dup; i++) {
    if (!P.slot[i]) {
      if (free_slot < 0) free_slot = i;
      continue;
    }
    dup = !memcmp(&P.slot[i]->key, key, sizeof *key);
    if (!P.slot[oldest] || P.slot[i]->used < P.slot[oldest]->used) oldest = i;
  }
  if (!dup) {
    int i = free_slot >= 0 ? free_slot : oldest;
    plan_release(P.slot[i]);
    atomic_fetch_add(&p->refs, 1);
    p->used = ++P.clock;
    P.slot[i] = p;
  }
  pthread_mutex_unlock(&P.lock);
  *out = p;
  return EM_OK;
}

/* ------------------------------------------------------------- running --- */

static void *alloc_md(const dnnl_memory_desc_t *md) {
  size_t bytes = D.dnnl_memory_desc_get_size(md);
  return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
}

/* The blocked copies of x and y, per thread, kept between calls: fresh ones each call cost
 * more than the reorders (glibc maps large blocks anew and the kernel zeroes every page:
 * 20% of MobileNet-V2's time here). Grown as needed; a thread's pair is freed when it ends
 * (the key's destructor), and one over KEEP_BYTES is freed after its call. */
#define KEEP_BYTES ((size_t)256 << 20)

enum { SCRATCH_X, SCRATCH_Y, SCRATCH_PAD, SCRATCH_SLOTS };

typedef struct scratch {
  void *buf[SCRATCH_SLOTS];
  size_t bytes[SCRATCH_SLOTS];
  dnnl_stream_t stream; /* the thread's stream (one per call cost allocations: ~1% of MobileNet-V2) */
} scratch;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static int g_scratch_key_ok;

static void scratch_free(void *v) {
  scratch *sc = v;
  if (!sc) return;
  for (int i = 0; i < SCRATCH_SLOTS; i++) free(sc->buf[i]);
  if (sc->stream) D.dnnl_stream_destroy(sc->stream);
  free(sc);
}

static void scratch_key_make(void) { g_scratch_key_ok = !pthread_key_create(&g_scratch_key, scratch_free); }

/* This thread's scratch; NULL when out of memory. */
static scratch *thread_scratch(void) {
  pthread_once(&g_scratch_once, scratch_key_make);
  if (!g_scratch_key_ok) return NULL;
  scratch *sc = pthread_getspecific(g_scratch_key);
  if (!sc && (!(sc = calloc(1, sizeof *sc)) || pthread_setspecific(g_scratch_key, sc))) {
    free(sc);
    return NULL;
  }
  return sc;
}

/* Slot i of this thread's scratch, at least need bytes; NULL when out of memory. */
static void *scratch_for(int i, size_t need) {
  scratch *sc = thread_scratch();
  if (!sc) return NULL;
  if (sc->bytes[i] < need || !sc->buf[i]) {
    free(sc->buf[i]);
    sc->bytes[i] = 0;
    if (!(sc->buf[i] = aligned_alloc(64, (need + 63) / 64 * 64 + 64))) return NULL;
    sc->bytes[i] = need;
  }
  return sc->buf[i];
}

/* After a call: a very large scratch block goes back (a rare huge layer keeps no memory). */
static void scratch_trim(void) {
  scratch *sc = g_scratch_key_ok ? pthread_getspecific(g_scratch_key) : NULL;
  for (int i = 0; sc && i < SCRATCH_SLOTS; i++)
    if (sc->bytes[i] > KEEP_BYTES) {
      free(sc->buf[i]);
      sc->buf[i] = NULL;
      sc->bytes[i] = 0;
    }
}

/* Runs a step with its arguments (and its scratchpad) on the calling thread's stream and waits. */
static dnnl_status_t execute(const step *st, int n, const int *kinds, const dnnl_memory_desc_t *const *mds,
                             void *const *ptrs) {
  enum { MAX_ARGS = 5 };
  dnnl_memory_t mem[MAX_ARGS] = {0};
  dnnl_exec_arg_t args[MAX_ARGS];
  void *pad = NULL;
  scratch *sc = thread_scratch();
  if (!sc || (st->scratch_bytes && !(pad = scratch_for(SCRATCH_PAD, st->scratch_bytes)))) return dnnl_out_of_memory;
  dnnl_status_t s = sc->stream ? dnnl_success : D.dnnl_stream_create(&sc->stream, D.eng, dnnl_stream_default_flags);
  dnnl_stream_t stream = sc->stream;
  int m = 0;
  for (int i = 0; i <= n && !s; i++) {
    const int is_pad = i == n;
    if (is_pad && !pad) break;
    s = D.dnnl_memory_create(&mem[m], is_pad ? &st->scratch : mds[i], D.eng, is_pad ? pad : ptrs[i]);
    args[m].arg = is_pad ? DNNL_ARG_SCRATCHPAD : kinds[i];
    args[m].memory = mem[m];
    if (!s) m++;
  }
  if (!s) s = D.dnnl_primitive_execute(st->prim, stream, m, args);
  if (!s) s = D.dnnl_stream_wait(stream);
  for (int i = 0; i < m; i++) D.dnnl_memory_destroy(mem[i]);
  return s;
}

static dnnl_status_t run_reorder(const step *r, const dnnl_memory_desc_t *from, const void *src,
                                 const dnnl_memory_desc_t *to, void *dst) {
  const int kinds[] = {DNNL_ARG_FROM, DNNL_ARG_TO};
  const dnnl_memory_desc_t *mds[] = {from, to};
  void *ptrs[] = {(void *)src, dst};
  return execute(r, 2, kinds, mds, ptrs);
}

typedef struct weights_job {
  const plan *p;
  const float *w;
} weights_job;

static void free_aligned(void *data) { free(data); }

/* em_derive_fn: the weights in the plan's layout. */
static em_status reorder_weights(void *ctx, void **data, void (**free_fn)(void *)) {
  const weights_job *j = ctx;
  void *buf = alloc_md(&j->p->wei);
  if (!buf) return em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a convolution's reordered weights");
  dnnl_status_t s = run_reorder(&j->p->to_wei, &j->p->wei_plain, j->w, &j->p->wei, buf);
  if (s) {
    free(buf);
    return dnnl_error("reordering the weights", s, &j->p->key);
  }
  *data = buf;
  *free_fn = free_aligned;
  return EM_OK;
}

/* The derived form's key: the weights' layout in the plan (what the reorder writes) and where
 * they start in their storage. Not the whole plan key: plans for other batch sizes, image sizes
 * or thread counts mostly want the same layout, and each distinct key keeps a copy of the
 * weights until the value changes. Zeroed before filling: compared as bytes. */
typedef struct weights_key {
  int ndims, format_kind, inner_nblks;
  unsigned flags;
  int64_t dims[DNNL_MAX_NDIMS], padded_dims[DNNL_MAX_NDIMS], strides[DNNL_MAX_NDIMS];
  int64_t inner_blks[DNNL_MAX_NDIMS], inner_idxs[DNNL_MAX_NDIMS];
  plan_key plan; /* only for a layout that is not plain blocking (then per plan, as before) */
  const void *data;
} weights_key;

static void weights_key_of(const plan *p, const void *w, weights_key *k) {
  memset(k, 0, sizeof *k);
  const dnnl_memory_desc_t *md = &p->wei;
  k->ndims = md->ndims;
  k->format_kind = (int)md->format_kind;
  k->flags = (unsigned)md->extra.flags;
  for (int i = 0; i < md->ndims && i < DNNL_MAX_NDIMS; i++) k->dims[i] = md->dims[i], k->padded_dims[i] = md->padded_dims[i];
  if (md->format_kind == dnnl_blocked && md->offset0 == 0 && !md->extra.flags) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    k->inner_nblks = b->inner_nblks;
    for (int i = 0; i < md->ndims && i < DNNL_MAX_NDIMS; i++) k->strides[i] = b->strides[i];
    for (int i = 0; i < b->inner_nblks && i < DNNL_MAX_NDIMS; i++)
      k->inner_blks[i] = b->inner_blks[i], k->inner_idxs[i] = b->inner_idxs[i];
  } else {
    memcpy(&k->plan, &p->key, sizeof k->plan);
  }
  k->data = w;
}

/* y = conv(x, w) + bias through p's steps (on the calling thread's OpenMP thread count). wt:
 * the weights' tensor, whose reordered form may be kept with it; NULL: reordered for this call. */
static em_status run_plan(const plan *p, const em_tensor *wt, const float *w, const float *x, const float *bias,
                          float *y) {
  em_status st = EM_OK;
  em_derived *kept = NULL;
  void *wbuf = NULL, *xbuf = NULL, *ybuf = NULL;
  const void *wuse = w;
  if (p->to_wei.prim) {
    weights_job job = {p, w};
    weights_key key;
    weights_key_of(p, w, &key);
    void (*free_fn)(void *) = NULL;
    if (wt && (st = em_tensor_derived(wt, &key, sizeof key, reorder_weights, &job, &kept))) return st;
    if (kept) wuse = em_derived_data(kept);
    else if ((st = reorder_weights(&job, &wbuf, &free_fn))) return st; /* not a graph value: this run only */
    else wuse = wbuf;
  }
  dnnl_status_t s = dnnl_success;
  const void *xuse = x;
  void *yuse = y;
  if (p->to_src.prim) {
    if (!(xbuf = scratch_for(SCRATCH_X, D.dnnl_memory_desc_get_size(&p->src)))) st = em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a convolution's input");
    else if (!(s = run_reorder(&p->to_src, &p->src_plain, x, &p->src, xbuf))) xuse = xbuf;
  }
  if (!st && !s && p->from_dst.prim && !(yuse = ybuf = scratch_for(SCRATCH_Y, D.dnnl_memory_desc_get_size(&p->dst))))
    st = em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory for a convolution's output");
  if (!st && !s) {
    const int kinds[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[] = {&p->src, &p->wei, &p->dst, &p->bias};
    void *ptrs[] = {(void *)xuse, (void *)wuse, yuse, (void *)bias};
    s = execute(&p->main, bias ? 4 : 3, kinds, mds, ptrs);
  }
  if (!st && !s && p->from_dst.prim) s = run_reorder(&p->from_dst, &p->dst, ybuf, &p->dst_plain, y);
  if (!st && s) st = dnnl_error("running the kernel", s, &p->key);
  scratch_trim();
  free(wbuf);
  em_derived_release(kept);
  return st;
}

/* ------------------------------------------------------- thread counts --- */

/* Ember gives the same bits whatever the thread count. oneDNN's forward convolutions mostly
 * sum each output within one thread, but not always: for deep layers on small images it splits
 * the channel sum between threads (measured, 2.6: 512 -> 64 channels, 3x3 on 4x4, with 3 or
 * more threads). Such a split shows on any data, so a plan for more than one thread is run
 * once on a fixed pattern against the one-thread plan when it is built: where their bits
 * differ, the one-thread plan runs instead (on one thread; deep layers on small images are
 * short), as it does where only the one-thread plan has a kernel; where that one has none,
 * neither is used. So a convolution never changes path, and bits, with the thread count. */

/* Fixed pseudo-random patterns (a linear congruential sequence): values in [-1, 1), or with
 * magnitudes spread over 2^-12 .. 2^12 (spread). A changed order of a sum shows as other bits
 * in most outputs of a large layer, but an output of two or three terms can round alike by
 * chance (about one in three): small layers get many patterns. */
static void fill_pattern(float *v, int64_t n, uint32_t seed, int spread) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    const float u = (float)(seed >> 8) * (1.0f / 8388608.0f) - 1.0f;
    v[i] = spread ? ldexpf(u, (int)(seed % 25u) - 12) : u;
  }
}

/* Patterns per probe: enough for PROBE_OUTPUTS outputs in all (one for a layer that large),
 * at most PROBE_MAX (a 1-D layer of five outputs, one of them summed in another order: found
 * by a sweep that six patterns missed). Run once per geometry and thread count. */
#define PROBE_OUTPUTS 131072
#define PROBE_MAX 64

/* Whether plans pa and pb (each run on its own thread count) give the same bits on the patterns. */
/* Elements of x, w, y and the bias of a plan's case. */
static void plan_sizes(const plan_key *key, int64_t *nx, int64_t *nw, int64_t *ny, int64_t *nb) {
  if (key->kind == PLAN_MATMUL) {
    const em_dnnl_matmul_geom *mm = &key->mm;
    *nx = mm->m * mm->k, *nw = mm->k * mm->n, *ny = mm->m * mm->n, *nb = mm->n;
    return;
  }
  const em_dnnl_conv_geom *gm = &key->gm;
  *nx = gm->n * gm->ci, *nw = gm->co * (gm->ci / gm->groups), *ny = gm->n * gm->co, *nb = gm->co;
  for (int i = 0; i < gm->nsp; i++) *nx *= gm->img[i], *nw *= gm->k[i], *ny *= gm->col[i];
}

static em_status same_bits(const plan *pa, const plan *pb, int *same) {
  int64_t nx, nw, ny, nb;
  plan_sizes(&pa->key, &nx, &nw, &ny, &nb);
  float *x = malloc(sizeof *x * (size_t)nx), *w = malloc(sizeof *w * (size_t)nw);
  float *bias = malloc(sizeof *bias * (size_t)nb), *ya = malloc(sizeof *ya * (size_t)ny);
  float *yb = malloc(sizeof *yb * (size_t)ny);
  em_status st = EM_OK;
  *same = 1;
  if (!x || !w || !bias || !ya || !yb) st = em_fail(EM_ERR_OUT_OF_MEMORY, "no host memory to check a oneDNN kernel");
  const int64_t want = PROBE_OUTPUTS / (ny > 0 ? ny : 1);
  const int patterns = want < 1 ? 1 : want > PROBE_MAX ? PROBE_MAX : (int)want, caller = omp_get_max_threads();
  for (int k = 0; k < patterns && !st && *same; k++) {
    const int spread = k % 2;
    fill_pattern(x, nx, 1 + 3 * (uint32_t)k, spread), fill_pattern(w, nw, 2 + 3 * (uint32_t)k, spread);
    fill_pattern(bias, nb, 3 + 3 * (uint32_t)k, spread);
    const float *b = pa->key.has_bias ? bias : NULL;
    omp_set_num_threads(pa->key.threads);
    st = run_plan(pa, NULL, w, x, b, ya);
    omp_set_num_threads(pb->key.threads);
    if (!st) st = run_plan(pb, NULL, w, x, b, yb);
    *same = !st && !memcmp(ya, yb, sizeof *ya * (size_t)ny);
  }
  omp_set_num_threads(caller);
  free(x), free(w), free(bias), free(ya), free(yb);
  return st;
}

/* Sets p->single: the plan whose results p's calls give (p itself, or the one-thread plan). */
static em_status plan_single(plan *p) {
  p->single = p;
  if (p->key.threads == 1) return EM_OK;
  plan_key k1;
  memcpy(&k1, &p->key, sizeof k1); /* padding included (compared as bytes) */
  k1.threads = 1;
  plan *one = NULL;
  const int caller = omp_get_max_threads();
  omp_set_num_threads(1);
  em_status st = plan_get(&k1, &one);
  omp_set_num_threads(caller);
  if (st) return st;
  int same = 0;
  if (p->ok && one->ok && (st = same_bits(p, one, &same))) {
    plan_release(one);
    return st;
  }
  if (p->ok && one->ok && same) plan_release(one);
  else p->single = one; /* differs, or only one of them has a kernel: one decides for both */
  return EM_OK;
}

/* The plan for this case on Ember's thread count (NULL where the case is not one oneDNN can
 * be asked: empty sizes, more than three spatial axes, the library absent). Called with
 * OpenMP's thread count set to Ember's (below). */
static em_status plan_for(const em_dnnl_conv_geom *gm, int has_bias, int x_cl, int y_cl, const em_dnnl_post *post,
                          plan **out) {
  *out = NULL;
  if (gm->nsp < 1 || gm->nsp > 3 || gm->n <= 0 || gm->ci <= 0 || gm->co <= 0 || gm->groups <= 0) return EM_OK;
  for (int i = 0; i < gm->nsp; i++)
    if (gm->img[i] <= 0 || gm->col[i] <= 0 || gm->k[i] <= 0) return EM_OK;
  if (!loaded()) return EM_OK;
  plan_key key;
  memset(&key, 0, sizeof key); /* compared as bytes: no stray padding */
  key.gm.nsp = gm->nsp;
  key.gm.n = gm->n, key.gm.ci = gm->ci, key.gm.co = gm->co, key.gm.groups = gm->groups;
  for (int i = 0; i < gm->nsp; i++) {
    key.gm.img[i] = gm->img[i], key.gm.col[i] = gm->col[i], key.gm.k[i] = gm->k[i];
    key.gm.s[i] = gm->s[i], key.gm.d[i] = gm->d[i], key.gm.pb[i] = gm->pb[i];
  }
  key.kind = PLAN_CONV;
  key.has_bias = has_bias != 0;
  key.x_cl = x_cl != 0, key.y_cl = y_cl != 0;
  if (post && post->kind) key.post = *post;
  key.threads = em_cpu_threads();
  return plan_get(&key, out);
}

/* oneDNN (built on the same libgomp) sizes its blocking and its parallel regions by
 * omp_get_max_threads(): Ember's thread count (em_set_num_threads) while it plans and runs,
 * the caller's own setting back afterwards (a per-thread setting in OpenMP). */
em_status em_dnnl_conv_takes(const em_dnnl_conv_geom *gm, int has_bias, int x_cl, int y_cl,
                             const em_dnnl_post *post, int *yes) {
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(em_cpu_threads());
  plan *p = NULL;
  em_status st = plan_for(gm, has_bias, x_cl, y_cl, post, &p);
  *yes = !st && p && p->single->ok;
  plan_release(p);
  omp_set_num_threads(caller_threads);
  return st;
}

/* Runs plan p (NULL: none) for y = op(x, w) + bias on the thread count its checked plan
 * wants; *done where it ran. Releases p. */
static em_status run_checked(plan *p, const em_tensor *w, const float *x, const float *bias, float *y, int *done) {
  em_status st = EM_OK;
  if (p && p->single->ok) {
    omp_set_num_threads(p->single->key.threads);
    st = run_plan(p->single, w, em_tensor_data(w), x, bias, y);
    *done = !st;
  }
  plan_release(p);
  return st;
}

em_status em_dnnl_matmul(const em_dnnl_matmul_geom *mm, const em_tensor *w, const float *x, const float *bias,
                         float *y, int *done) {
  *done = 0;
  if (mm->m <= 0 || mm->k <= 0 || mm->n <= 0 || !loaded()) return EM_OK;
  plan_key key;
  memset(&key, 0, sizeof key); /* compared as bytes */
  key.kind = PLAN_MATMUL;
  key.mm.m = mm->m, key.mm.k = mm->k, key.mm.n = mm->n, key.mm.tw = mm->tw != 0;
  key.has_bias = bias != NULL;
  key.threads = em_cpu_threads();
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(key.threads);
  plan *p = NULL;
  em_status st = plan_get(&key, &p);
  if (!st) st = run_checked(p, w, x, bias, y, done);
  else plan_release(p);
  omp_set_num_threads(caller_threads);
  return st;
}

em_status em_dnnl_conv_fwd(const em_dnnl_conv_geom *gm, const em_tensor *w, const float *x, int x_cl,
                           const float *bias, float *y, int y_cl, const em_dnnl_post *post, int *done) {
  *done = 0;
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(em_cpu_threads());
  plan *p = NULL;
  em_status st = plan_for(gm, bias != NULL, x_cl, y_cl, post, &p);
  if (!st) st = run_checked(p, w, x, bias, y, done);
  else plan_release(p);
  omp_set_num_threads(caller_threads);
  return st;
}

#endif
