/* The selection policy (DESIGN.md): a pure function from device, driver,
 * images and NVRTC libraries to an ordered list of candidates with reasons.
 *
 * Steps, each tried only when the previous ones produced nothing viable:
 *   1 cubin for exactly this SM      2 cubin of the same major, highest lower minor
 *   3 PTX, highest compute_XY <= SM  4 NVRTC, newest that supports this SM
 *   5 the CPU
 * Within steps 1 and 2, cubins of one SM from several toolkits (nvcc 13.0,
 * NVRTC 12.9, NVRTC 11.8) go newest toolkit first.
 * An image the driver cannot load is listed, rejected, with the reason. */
#include "policy.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_table.h"

/* "12.2" from 12020. */
static const char *cuda_str(int v, char buf[16]) {
  snprintf(buf, 16, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

/* "sm_90a" / "compute_120" / "source". */
static const char *image_name(const em_image_info *img, char buf[32]) {
  const char *prefix = img->kind == EM_IMAGE_CUBIN ? "sm" : "compute";
  if (img->kind == EM_IMAGE_SOURCE || img->kind == EM_IMAGE_HEADER)
    snprintf(buf, 32, "source");
  else if (img->variant)
    snprintf(buf, 32, "%s_%d%c", prefix, img->arch, img->variant);
  else
    snprintf(buf, 32, "%s_%d", prefix, img->arch);
  return buf;
}

int em_image_min_driver(const em_image_info *img) {
  switch (img->kind) {
  case EM_IMAGE_CUBIN:
    /* An unknown toolkit puts no bound here; the loader then learns from the
     * driver's answer and moves to the next candidate. */
    return img->toolkit ? em_cubin_min_driver(img->toolkit) : 0;
  case EM_IMAGE_PTX: {
    int d = em_ptx_isa_min_driver(img->ptx_isa);
    return d ? d : INT_MAX; /* an ISA the table does not know is newer than any driver we know */
  }
  default:
    return 0;
  }
}

/* A Tegra (Jetson) SM, per arch_table; a CC the table does not know counts
 * as desktop. */
static int is_tegra(int cc) {
  const em_arch_row *row = em_arch_lookup(cc);
  return row && row->tegra;
}

/* Does a cubin built for `arch` (with variant) run on `cc`? The step it
 * belongs to is returned through *step (1 exact, 2 lower minor).
 * NVIDIA, CUDA C++ Programming Guide, "Binary Compatibility"
 * (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility):
 * "a cubin object generated for compute capability X.y will only execute on
 * devices of compute capability X.z where z>=y", and: "Binary compatibility is
 * supported only for the desktop. It is not supported for Tegra. Also, the
 * binary compatibility between desktop and Tegra is not supported." So step 2
 * never crosses into or out of a Tegra SM (an sm_72 Xavier cubin is no cubin
 * for a T4, an sm_86 one none for an Orin). */
static int cubin_fits(int arch, char variant, int cc, int *step) {
  if (arch / 10 != cc / 10) return 0;
  if (arch == cc) { *step = 1; return 1; }
  if (arch < cc && variant != 'a' && !is_tegra(arch) && !is_tegra(cc)) { *step = 2; return 1; }
  return 0;
}

/* Does PTX for compute_`arch` JIT for `cc`? 'a' PTX only on its exact SM,
 * 'f' PTX within its family (same major), plain PTX on any CC at or above. */
static int ptx_fits(int arch, char variant, int cc) {
  if (variant == 'a') return arch == cc;
  if (variant == 'f') return arch / 10 == cc / 10 && arch <= cc;
  return arch <= cc;
}

typedef struct plan_builder {
  const em_policy_input *in;
  em_plan *out;
  char cc_s[16], drv_s[16];
} plan_builder;

static em_plan_candidate *add_candidate(plan_builder *b, em_path path, int image, int arch,
                                        char variant, int viable, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static em_plan_candidate *add_candidate(plan_builder *b, em_path path, int image, int arch,
                                        char variant, int viable, const char *fmt, ...) {
  em_plan *p = b->out;
  /* The last slot is kept for the CPU entry. Past the cap, a rejected
   * candidate is counted, not listed; a viable one takes the place of the
   * last rejected one listed, so the order of the viable ones (the plan)
   * never changes. */
  int cap = path == EM_PATH_CPU ? EM_PLAN_MAX_CANDIDATES : EM_PLAN_MAX_CANDIDATES - 1;
  if (p->n_candidates >= cap) {
    p->n_omitted++;
    int k = p->n_candidates - 1;
    while (viable && k >= 0 && p->candidates[k].viable) k--;
    if (!viable || k < 0) return NULL;
    memmove(&p->candidates[k], &p->candidates[k + 1], (size_t)(p->n_candidates - 1 - k) * sizeof p->candidates[0]);
    p->n_candidates--;
  }
  em_plan_candidate *c = &p->candidates[p->n_candidates++];
  memset(c, 0, sizeof *c);
  c->path = path;
  c->image_index = image;
  c->arch = arch;
  c->variant = variant;
  c->viable = viable;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->reason, sizeof c->reason, fmt, ap);
  va_end(ap);
  if (b->in->force != EM_PATH_NONE && b->in->force != path && c->viable) {
    c->viable = 0;
    char tail[sizeof c->reason];
    snprintf(tail, sizeof tail, "%s", c->reason);
    snprintf(c->reason, sizeof c->reason, "EMBER_FORCE=%s excludes it (%.150s)",
             em_path_name(b->in->force), tail);
  }
  return c;
}

static int belongs(const em_policy_input *in, const em_image_info *img) {
  return img->module && in->module && strcmp(img->module, in->module) == 0;
}

/* Driver check shared by every image kind: fills why[] and returns 0 when the
 * driver is too old for the toolkit or PTX ISA that made the image. */
static int driver_can_load(plan_builder *b, const em_image_info *img, char *why, size_t cap) {
  int need = em_image_min_driver(img);
  char need_s[16];
  if (need <= b->in->driver_version) return 1;
  if (img->kind == EM_IMAGE_PTX && need == INT_MAX)
    snprintf(why, cap, "PTX ISA %d.%d is newer than any driver Ember knows", img->ptx_isa / 10,
             img->ptx_isa % 10);
  else if (img->kind == EM_IMAGE_PTX)
    snprintf(why, cap, "PTX ISA %d.%d needs a CUDA %s driver, this one is %s (PTX is never covered by minor-version compatibility)",
             img->ptx_isa / 10, img->ptx_isa % 10, cuda_str(need, need_s), b->drv_s);
  else
    snprintf(why, cap, "made by CUDA %s, needs a driver >= %s, this one is %s",
             cuda_str(img->toolkit, (char[16]){0}), cuda_str(need, need_s), b->drv_s);
  return 0;
}

/* The order in which steps 1 and 2 consider the module's cubins: does image
 * x come before image y?
 *  - The highest arch first, so that step 2 picks the highest lower minor.
 *  - At one arch (the build embeds sm_80 from nvcc 13.0, NVRTC 12.9 and NVRTC
 *    11.8), the newest toolkit first: its compiler has the latest fixes and
 *    tuning, so of the cubins this driver can load, the newest is the one to
 *    run. A driver loads a cubin of any toolkit of its own CUDA major or an
 *    older one: "From CUDA 11 onwards, applications compiled with a CUDA
 *    Toolkit release from within a CUDA major release family can run, with
 *    limited feature-set, on systems having at least the minimum required
 *    driver version" (>= 450 for 11.x, >= 525 for 12.x, >= 580 for 13.x), and
 *    older toolkits run on newer drivers through backward compatibility
 *    (NVIDIA, CUDA Compatibility, "Minor Version Compatibility",
 *    https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html;
 *    em_cubin_min_driver). So an H100 on R535 (CUDA 12.2) skips the 13.0
 *    sm_90 cubin (listed, rejected) and runs the 12.9 one, and on R580 the
 *    13.0 one. A cubin whose toolkit is unknown (0) comes last.
 *  - Then the table's order, so the plan never depends on anything else. */
static int cubin_before(const em_image_info *images, size_t x, size_t y) {
  const em_image_info *a = &images[x], *c = &images[y];
  if (a->arch != c->arch) return a->arch > c->arch;
  if (a->toolkit != c->toolkit) return a->toolkit > c->toolkit;
  return x < y;
}

/* The module's next cubin after image `prev` (-1: the first) in that order;
 * -1 when there is none. */
static long next_cubin(const em_policy_input *in, long prev) {
  long best = -1;
  for (size_t i = 0; i < in->n_images; i++) {
    const em_image_info *img = &in->images[i];
    if (img->kind != EM_IMAGE_CUBIN || !belongs(in, img)) continue;
    if (prev >= 0 && !cubin_before(in->images, (size_t)prev, i)) continue;
    if (best < 0 || cubin_before(in->images, i, (size_t)best)) best = (long)i;
  }
  return best;
}

/* Steps 1 and 2: every cubin of the module, rejected or not. */
static void consider_cubins(plan_builder *b, int want_step) {
  const em_policy_input *in = b->in;
  for (long i = next_cubin(in, -1); i >= 0; i = next_cubin(in, i)) {
    const em_image_info *img = &in->images[i];
    char name[32], why[160], tk[24] = "";
    int step = 0;
    image_name(img, name);
    /* Which toolkit made it: several cubins of one SM differ only in that. */
    if (img->toolkit) snprintf(tk, sizeof tk, " (CUDA %s)", cuda_str(img->toolkit, (char[16]){0}));
    if (!cubin_fits(img->arch, img->variant, in->cc, &step)) {
      if (want_step != 1) continue; /* report misfits once, with step 1 */
      const char *rule = img->variant == 'a' ? "an 'a' cubin runs only on exactly its SM"
                         : img->arch / 10 == in->cc / 10 && img->arch < in->cc
                             ? "cubins run on a higher minor only between desktop GPUs, never to or from Tegra"
                             : "a cubin runs only on its own major, at or above its minor";
      add_candidate(b, EM_PATH_CUBIN, (int)i, img->arch, img->variant, 0, "%s cubin%s does not run on CC %s (%s)",
                    name, tk, b->cc_s, rule);
      continue;
    }
    if (step != want_step) continue;
    if (!driver_can_load(b, img, why, sizeof why)) {
      add_candidate(b, EM_PATH_CUBIN, (int)i, img->arch, img->variant, 0, "%s cubin: %s", name, why);
      continue;
    }
    add_candidate(b, EM_PATH_CUBIN, (int)i, img->arch, img->variant, 1,
                  step == 1 ? "%s cubin%s matches CC %s" : "%s cubin%s runs on CC %s (same major, lower minor)", name,
                  tk, b->cc_s);
  }
}

/* Step 3: PTX, highest compute arch not above the device; at equal arch the
 * newer ISA (nvcc's) before the legacy one. */
/* PTX candidates come newest arch first, nvcc's before legacy at one arch,
 * then in table order. */
static int ptx_before(const em_image_info *a, size_t ia, const em_image_info *b, size_t ib) {
  if (a->arch != b->arch) return a->arch > b->arch;
  int la = (a->flags & EM_IMAGE_LEGACY) != 0, lb = (b->flags & EM_IMAGE_LEGACY) != 0;
  if (la != lb) return lb;
  return ia < ib;
}

static void consider_ptx(plan_builder *b) {
  const em_policy_input *in = b->in;
  /* The module's PTX images in candidate order: one pass over the table
   * (a scan per arch and flavour compared ~1M module names a plan). */
  size_t order[EM_PLAN_MAX_CANDIDATES], n = 0;
  for (size_t i = 0; i < in->n_images && n < EM_PLAN_MAX_CANDIDATES; i++) {
    const em_image_info *img = &in->images[i];
    if (img->kind != EM_IMAGE_PTX || !belongs(in, img)) continue;
    size_t k = n++;
    for (; k > 0 && ptx_before(img, i, &in->images[order[k - 1]], order[k - 1]); k--) order[k] = order[k - 1];
    order[k] = i;
  }
  for (size_t o = 0; o < n; o++) {
    size_t i = order[o];
    const em_image_info *img = &in->images[i];
    int legacy = (img->flags & EM_IMAGE_LEGACY) != 0;
    em_path path = legacy ? EM_PATH_PTX_LEGACY : EM_PATH_PTX;
    char name[32], why[160];
    image_name(img, name);
    if (!ptx_fits(img->arch, img->variant, in->cc)) {
      add_candidate(b, path, (int)i, img->arch, img->variant, 0, "%s PTX cannot be compiled for CC %s (%s)", name,
                    b->cc_s,
                    img->variant ? "variant PTX is limited to its SM or family"
                                 : "PTX JITs only for a CC at or above its arch");
    } else if (!driver_can_load(b, img, why, sizeof why)) {
      add_candidate(b, path, (int)i, img->arch, img->variant, 0, "%s PTX: %s", name, why);
    } else if (in->jit_disabled) {
      add_candidate(b, path, (int)i, img->arch, img->variant, 0,
                    "%s PTX: the driver's JIT is disabled (CUDA_DISABLE_PTX_JIT=1)", name);
    } else {
      add_candidate(b, path, (int)i, img->arch, img->variant, 1,
                    "%s PTX (ISA %d.%d%s) JIT-compiled by the driver for sm_%d", name, img->ptx_isa / 10,
                    img->ptx_isa % 10, legacy ? ", legacy" : "", in->cc);
    }
  }
}

static int nvrtc_supports(const em_policy_nvrtc *n, int sm) {
  if (!n->archs) return em_toolkit_supports_sm(n->version, sm, 0);
  for (size_t i = 0; i < n->n_archs; i++)
    if (n->archs[i] == sm) return 1;
  return 0;
}

/* Step 4: NVRTC libraries, newest first. */
static void consider_nvrtc(plan_builder *b) {
  const em_policy_input *in = b->in;
  int have_source = 0;
  for (size_t i = 0; i < in->n_images; i++)
    if (belongs(in, &in->images[i]) && in->images[i].kind == EM_IMAGE_SOURCE) have_source = 1;

  /* Sort indices by version, newest first (the list is short). */
  size_t order[32], n = in->n_nvrtc < 32 ? in->n_nvrtc : 32;
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && in->nvrtc[order[j]].version > in->nvrtc[order[j - 1]].version; j--) {
      size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
    }

  for (size_t k = 0; k < n; k++) {
    const em_policy_nvrtc *lib = &in->nvrtc[order[k]];
    char v[16], need_s[16];
    cuda_str(lib->version, v);
    em_plan_candidate *c;
    if (!have_source) {
      c = add_candidate(b, EM_PATH_NVRTC, -1, in->cc, 0, 0, "NVRTC %s: no kernel source of this module is embedded", v);
    } else if (!nvrtc_supports(lib, in->cc)) {
      c = add_candidate(b, EM_PATH_NVRTC, -1, in->cc, 0, 0, "NVRTC %s cannot target sm_%d", v, in->cc);
    } else {
      /* A cubin from NVRTC loads like any cubin of its toolkit; without
       * nvrtcGetCUBIN it can only hand back PTX of its own ISA. */
      int need = lib->has_cubin ? em_cubin_min_driver(lib->version) : lib->version;
      if (!lib->has_cubin && in->jit_disabled)
        c = add_candidate(b, EM_PATH_NVRTC, -1, in->cc, 0, 0,
                          "NVRTC %s can only make PTX (no nvrtcGetCUBIN) and the driver's JIT is disabled "
                          "(CUDA_DISABLE_PTX_JIT=1)", v);
      else if (need > in->driver_version)
        c = add_candidate(b, EM_PATH_NVRTC, -1, in->cc, 0, 0,
                          "NVRTC %s output (%s) needs a driver >= %s, this one is %s", v,
                          lib->has_cubin ? "cubin" : "PTX", cuda_str(need, need_s), b->drv_s);
      else
        c = add_candidate(b, EM_PATH_NVRTC, -1, in->cc, 0, 1, "NVRTC %s compiles the source to %s for sm_%d", v,
                          lib->has_cubin ? "a cubin" : "PTX", in->cc);
    }
    if (c) c->nvrtc_version = lib->version;
  }
}

static void choose(plan_builder *b) {
  em_plan *p = b->out;
  for (int i = 0; i < p->n_candidates; i++) {
    if (!p->candidates[i].viable) continue;
    p->chosen = i;
    p->path = p->candidates[i].path;
    return;
  }
}

static int step_of(const em_plan_candidate *c, int cc) {
  switch (c->path) {
  case EM_PATH_CUBIN: return c->arch == cc ? 1 : 2;
  case EM_PATH_PTX: case EM_PATH_PTX_LEGACY: return 3;
  case EM_PATH_NVRTC: return 4;
  case EM_PATH_CPU: return 5;
  default: return 0;
  }
}

/* Would the candidate's code fit the device, leaving the driver or the JIT as
 * the reason it was rejected? (An sm_120 cubin on a K80 is no news.) */
static int arch_fits(const em_plan_candidate *c, int cc) {
  int step;
  if (c->path == EM_PATH_CUBIN) return cubin_fits(c->arch, c->variant, cc, &step);
  if (c->path == EM_PATH_PTX || c->path == EM_PATH_PTX_LEGACY) return ptx_fits(c->arch, c->variant, cc);
  return 1;
}

/* Appends, after `used` bytes of out->reason, why each GPU path came to
 * nothing, so the one-line reason of a CPU fallback says why: the first
 * rejection whose code fitted the device, else "no <path> for CC X.Y". */
static void summarize_rejections(em_plan *out, int cc, int used) {
  static const em_path order[] = {EM_PATH_CUBIN, EM_PATH_PTX, EM_PATH_PTX_LEGACY, EM_PATH_NVRTC};
  size_t len = used > 0 ? (size_t)used : 0, cap = sizeof out->reason;
  for (size_t k = 0; k < sizeof order / sizeof order[0] && len < cap; k++) {
    const em_plan_candidate *why = NULL;
    int seen = 0;
    for (int i = 0; i < out->n_candidates && !why; i++) {
      const em_plan_candidate *c = &out->candidates[i];
      if (c->path != order[k]) continue;
      seen = 1;
      if (!c->viable && arch_fits(c, cc)) why = c;
    }
    const char *sep = k ? "; " : "";
    if (why) len += (size_t)snprintf(out->reason + len, cap - len, "%s%s", sep, why->reason);
    else if (seen) len += (size_t)snprintf(out->reason + len, cap - len, "%sno %s for CC %d.%d", sep,
                                           em_path_name(order[k]), cc / 10, cc % 10);
    else len += (size_t)snprintf(out->reason + len, cap - len, "%sno %s embedded or loadable", sep,
                                 em_path_name(order[k]));
  }
  if (len < cap) snprintf(out->reason + len, cap - len, "): falling back to the CPU");
}

void em_policy_plan(const em_policy_input *in, em_plan *out) {
  plan_builder b = {.in = in, .out = out};
  memset(out, 0, sizeof *out);
  out->chosen = -1;
  snprintf(b.cc_s, sizeof b.cc_s, "%d.%d", in->cc / 10, in->cc % 10);
  cuda_str(in->driver_version, b.drv_s);

  consider_cubins(&b, 1);
  consider_cubins(&b, 2);
  consider_ptx(&b);
  consider_nvrtc(&b);
  add_candidate(&b, EM_PATH_CPU, -1, 0, 0, 1, "the CPU twin always runs");
  choose(&b);

  if (out->chosen < 0) {
    snprintf(out->reason, sizeof out->reason,
             "EMBER_FORCE=%s: no %s candidate can run on CC %s with driver %s (see the candidates)",
             em_path_name(in->force), em_path_name(in->force), b.cc_s, b.drv_s);
    return;
  }
  const em_plan_candidate *c = &out->candidates[out->chosen];
  out->step = step_of(c, in->cc);
  if (c->path == EM_PATH_CPU && in->force != EM_PATH_CPU) {
    int n = snprintf(out->reason, sizeof out->reason, "no GPU image of module '%s' runs on CC %s with driver %s (",
                     in->module ? in->module : "?", b.cc_s, b.drv_s);
    summarize_rejections(out, in->cc, n);
    out->strict_error = in->strict;
  } else {
    snprintf(out->reason, sizeof out->reason, "step %d: %s%s", out->step, c->reason,
             in->force != EM_PATH_NONE ? " (forced by EMBER_FORCE)" : "");
  }
}

const char *em_path_name(em_path p) {
  switch (p) {
  case EM_PATH_CUBIN: return "cubin";
  case EM_PATH_PTX: return "ptx";
  case EM_PATH_PTX_LEGACY: return "ptx-legacy";
  case EM_PATH_NVRTC: return "nvrtc";
  case EM_PATH_CPU: return "cpu";
  default: return "none";
  }
}
