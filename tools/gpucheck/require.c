/* Requirement strings of container images, parsed and evaluated the way
 * libnvidia-container does (require.h). Depends on libc only, so the fuzz
 * target compiles it alone. */
#include "require.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const rule_names[] = {"cuda", "driver", "arch", "brand"};
static const char *const op_names[] = {"=", "!=", "<", "<=", ">", ">="};
#define N_RULES (sizeof rule_names / sizeof rule_names[0])
#define N_OPS (sizeof op_names / sizeof op_names[0])

/* libnvidia-container's operator characters: the operator is the whole run
 * of them after the rule name (dsl.c), so "=>" or ">==" are not operators. */
static int is_op_char(char c) { return c == '<' || c == '>' || c == '=' || c == '!'; }

const char *gc_tri_name(gc_tri t) {
  switch (t) {
  case GC_TRI_FALSE: return "false";
  case GC_TRI_TRUE: return "true";
  default: return "unknown";
  }
}

/* ------------------------------------------------------------- versions --- */

/* A version as libnvidia-container accepts one: digits and dots, starting
 * with a digit (so every segment parses), each segment below 2^63. */
static int version_ok(const char *s, size_t n) {
  if (n == 0 || !isdigit((unsigned char)s[0])) return 0;
  size_t digits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '.') digits = 0;
    else if (isdigit((unsigned char)s[i])) {
      if (++digits > 18) return 0; /* keeps every segment in a uint64_t */
    } else return 0;
  }
  return 1;
}

/* Next numeric segment of a version at *p (dots skipped), 0 once it ends:
 * a missing segment counts as 0, which is libnvidia-container's "trailing
 * .0 ignored". */
static uint64_t next_segment(const char **p) {
  while (**p == '.') (*p)++;
  uint64_t v = 0;
  while (isdigit((unsigned char)**p)) v = v * 10 + (uint64_t)(*(*p)++ - '0');
  return v;
}

int gc_req_version_cmp(const char *a, const char *b) {
  if (!a || !b || !version_ok(a, strlen(a)) || !version_ok(b, strlen(b))) return GC_REQ_NOT_A_VERSION;
  while (*a || *b) {
    uint64_t x = next_segment(&a), y = next_segment(&b);
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

static gc_tri from_cmp(int cmp, gc_req_op op) {
  int r = 0;
  switch (op) {
  case GC_REQ_EQ: r = cmp == 0; break;
  case GC_REQ_NE: r = cmp != 0; break;
  case GC_REQ_LT: r = cmp < 0; break;
  case GC_REQ_LE: r = cmp <= 0; break;
  case GC_REQ_GT: r = cmp > 0; break;
  case GC_REQ_GE: r = cmp >= 0; break;
  }
  return r ? GC_TRI_TRUE : GC_TRI_FALSE;
}

/* A branch "550" stands for every version in [550, 551). A condition is true
 * when it holds for all of them, false for none, unknown otherwise. Versions
 * in the range are >= lo and < hi, and lo itself is one of them. */
static gc_tri branch_cmp(const char *branch, gc_req_op op, const char *v) {
  char hi[32];
  unsigned long b = strtoul(branch, NULL, 10);
  snprintf(hi, sizeof hi, "%lu", b + 1);
  int lo_v = gc_req_version_cmp(branch, v); /* lo vs v */
  int hi_v = gc_req_version_cmp(hi, v);     /* hi vs v */
  switch (op) {
  case GC_REQ_GE: return lo_v >= 0 ? GC_TRI_TRUE : hi_v <= 0 ? GC_TRI_FALSE : GC_TRI_UNKNOWN;
  case GC_REQ_GT: return lo_v > 0 ? GC_TRI_TRUE : hi_v <= 0 ? GC_TRI_FALSE : GC_TRI_UNKNOWN;
  case GC_REQ_LT: return hi_v <= 0 ? GC_TRI_TRUE : lo_v >= 0 ? GC_TRI_FALSE : GC_TRI_UNKNOWN;
  case GC_REQ_LE: return hi_v <= 0 ? GC_TRI_TRUE : lo_v > 0 ? GC_TRI_FALSE : GC_TRI_UNKNOWN;
  case GC_REQ_EQ: return lo_v > 0 || hi_v <= 0 ? GC_TRI_FALSE : GC_TRI_UNKNOWN;
  case GC_REQ_NE: return lo_v > 0 || hi_v <= 0 ? GC_TRI_TRUE : GC_TRI_UNKNOWN;
  }
  return GC_TRI_UNKNOWN;
}

int gc_req_disabled_by(const char *value) {
  static const char *const truths[] = {"1", "t", "T", "TRUE", "true", "True"};
  if (!value) return 0;
  for (size_t i = 0; i < sizeof truths / sizeof truths[0]; i++)
    if (!strcmp(value, truths[i])) return 1;
  return 0;
}

/* --------------------------------------------------------------- parsing --- */

__attribute__((format(printf, 3, 4))) static void set_error(gc_req_error *err, size_t offset, const char *fmt, ...) {
  if (!err) return;
  err->offset = offset;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
}

/* Quoted, shortened copy of a piece of the input for error messages. */
static const char *excerpt(const char *s, size_t n, char buf[72]) {
  size_t k = n < 64 ? n : 64;
  snprintf(buf, 72, "'%.*s%s'", (int)k, s, n > k ? "..." : "");
  return buf;
}

static int push_cond(gc_req *r, size_t *cap, gc_req_cond c) {
  if (r->n_conds == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    gc_req_cond *t = realloc(r->conds, nc * sizeof *t);
    if (!t) return -1;
    r->conds = t, *cap = nc;
  }
  r->conds[r->n_conds++] = c;
  return 0;
}

static int push_term(gc_req *r, size_t *cap, gc_req_term t) {
  if (r->n_terms == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    gc_req_term *p = realloc(r->terms, nc * sizeof *p);
    if (!p) return -1;
    r->terms = p, *cap = nc;
  }
  r->terms[r->n_terms++] = t;
  return 0;
}

/* One condition text[at .. at+n) (no comma, no space inside). */
static int parse_cond(const char *text, size_t at, size_t n, gc_req_cond *c, gc_req_error *err) {
  const char *s = text + at;
  char q[72], q2[72];
  size_t rule_len = 0;
  while (rule_len < n && !is_op_char(s[rule_len])) rule_len++;
  if (rule_len == n) {
    set_error(err, at, "condition %s has no operator: expected <rule><op><value>, op one of = != < <= > >=",
              excerpt(s, n, q));
    return -1;
  }
  if (rule_len == 0) {
    set_error(err, at, "condition %s has no rule before the operator: expected cuda, driver, arch or brand",
              excerpt(s, n, q));
    return -1;
  }
  size_t r;
  for (r = 0; r < N_RULES; r++)
    if (strlen(rule_names[r]) == rule_len && !strncasecmp(s, rule_names[r], rule_len)) break;
  if (r == N_RULES) {
    set_error(err, at, "unknown rule %s in condition %s: expected cuda, driver, arch or brand",
              excerpt(s, rule_len, q), excerpt(s, n, q2));
    return -1;
  }
  size_t op_len = 0;
  while (rule_len + op_len < n && is_op_char(s[rule_len + op_len])) op_len++;
  size_t o;
  for (o = 0; o < N_OPS; o++)
    if (strlen(op_names[o]) == op_len && !strncmp(s + rule_len, op_names[o], op_len)) break;
  if (o == N_OPS) {
    set_error(err, at + rule_len, "%s is not an operator (in condition %s): expected one of = != < <= > >=",
              excerpt(s + rule_len, op_len, q), excerpt(s, n, q2));
    return -1;
  }
  size_t v_at = rule_len + op_len, v_len = n - v_at;
  if (v_len == 0) {
    set_error(err, at + v_at, "condition %s has no value after the operator", excerpt(s, n, q));
    return -1;
  }
  if (r == GC_REQ_BRAND && o != GC_REQ_EQ && o != GC_REQ_NE) {
    set_error(err, at + rule_len, "condition %s: brand compares only with = or !=", excerpt(s, n, q));
    return -1;
  }
  if (r != GC_REQ_BRAND && !version_ok(s + v_at, v_len)) {
    set_error(err, at + v_at,
              "condition %s: %s is not a version (digits and dots, starting with a digit, e.g. 12.4 or 535.104.05)",
              excerpt(s, n, q), excerpt(s + v_at, v_len, q2));
    return -1;
  }
  c->rule = (gc_req_rule)r;
  c->op = (gc_req_op)o;
  c->offset = at;
  c->len = n;
  c->value = strndup(s + v_at, v_len);
  if (!c->value) {
    set_error(err, at, "out of memory");
    return -1;
  }
  return 0;
}

void gc_req_free(gc_req *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_conds; i++) free(r->conds[i].value);
  free(r->conds);
  free(r->terms);
  free(r->text);
  memset(r, 0, sizeof *r);
}

int gc_req_parse(const char *s, gc_req *out, gc_req_error *err) {
  memset(out, 0, sizeof *out);
  if (err) err->offset = 0, err->msg[0] = 0;
  if (!s) s = "";
  out->text = strdup(s);
  if (!out->text) {
    set_error(err, 0, "out of memory");
    return -1;
  }
  size_t cond_cap = 0, term_cap = 0, len = strlen(s);
  for (size_t i = 0; i < len;) {
    if (s[i] == ' ') { /* terms are separated by spaces only; runs of them make empty terms */
      i++;
      continue;
    }
    size_t t_end = i;
    while (t_end < len && s[t_end] != ' ') t_end++;
    gc_req_term term = {out->n_conds, 0, i, t_end - i};
    for (size_t j = i; j < t_end;) {
      if (s[j] == ',') {
        j++;
        continue;
      }
      size_t c_end = j;
      while (c_end < t_end && s[c_end] != ',') c_end++;
      gc_req_cond c;
      if (parse_cond(s, j, c_end - j, &c, err) < 0) goto fail;
      if (push_cond(out, &cond_cap, c) < 0) {
        free(c.value);
        set_error(err, j, "out of memory");
        goto fail;
      }
      term.n++;
      j = c_end;
    }
    if (push_term(out, &term_cap, term) < 0) {
      set_error(err, i, "out of memory");
      goto fail;
    }
    i = t_end;
  }
  return 0;
fail:
  gc_req_free(out);
  return -1;
}

/* ------------------------------------------------------------ evaluation --- */

gc_tri gc_req_cond_eval(const gc_req_cond *c, const gc_req_ctx *ctx, const gc_req_gpu *gpu) {
  gc_tri unknown = ctx->strict ? GC_TRI_UNKNOWN : GC_TRI_TRUE;
  char have[32];
  switch (c->rule) {
  case GC_REQ_CUDA:
    if (ctx->cuda <= 0) return unknown;
    /* NVML's CUDA version as libnvidia-container formats it: major.minor. */
    snprintf(have, sizeof have, "%d.%d", ctx->cuda / 1000, ctx->cuda % 1000 / 10);
    return from_cmp(gc_req_version_cmp(have, c->value), c->op);
  case GC_REQ_DRIVER: {
    if (!ctx->driver) return unknown;
    int cmp = gc_req_version_cmp(ctx->driver, c->value);
    if (cmp == GC_REQ_NOT_A_VERSION) return unknown; /* libnvidia-container would call it invalid */
    if (ctx->driver_is_branch && ctx->strict) return branch_cmp(ctx->driver, c->op, c->value);
    return from_cmp(cmp, c->op);
  }
  case GC_REQ_ARCH:
    if (!gpu || gpu->cc <= 0) return unknown;
    snprintf(have, sizeof have, "%d.%d", gpu->cc / 10, gpu->cc % 10);
    return from_cmp(gc_req_version_cmp(have, c->value), c->op);
  case GC_REQ_BRAND: {
    if (!gpu || !gpu->brand) return unknown;
    int eq = !strcasecmp(gpu->brand, c->value);
    return (c->op == GC_REQ_EQ) == eq ? GC_TRI_TRUE : GC_TRI_FALSE;
  }
  }
  return GC_TRI_UNKNOWN;
}

/* AND of a term's conditions; OR of the terms, stopping at an empty term as
 * libnvidia-container's loop does (see require.h). */
static void evaluate_one(const gc_req *r, const gc_req_ctx *ctx, const gc_req_gpu *gpu, gc_req_eval *e) {
  for (size_t i = 0; i < r->n_conds; i++) e->cond[i] = gc_req_cond_eval(&r->conds[i], ctx, gpu);
  e->satisfied_term = -1;
  e->verdict = r->n_terms == 0 ? GC_TRI_TRUE : GC_TRI_FALSE;
  int stopped = 0;
  for (size_t t = 0; t < r->n_terms; t++) {
    const gc_req_term *term = &r->terms[t];
    gc_tri v = GC_TRI_TRUE;
    if (term->n == 0) v = t == 0 ? GC_TRI_TRUE : GC_TRI_FALSE;
    for (size_t j = 0; j < term->n; j++) {
      gc_tri c = e->cond[term->first + j];
      if (c == GC_TRI_FALSE) v = GC_TRI_FALSE;
      else if (c == GC_TRI_UNKNOWN && v == GC_TRI_TRUE) v = GC_TRI_UNKNOWN;
    }
    if (stopped) v = GC_TRI_FALSE; /* never reached by libnvidia-container */
    e->term[t] = v;
    if (stopped) continue;
    if (v == GC_TRI_TRUE && e->satisfied_term < 0) {
      e->satisfied_term = (int)t;
      e->verdict = GC_TRI_TRUE;
    } else if (v == GC_TRI_UNKNOWN && e->verdict == GC_TRI_FALSE) {
      e->verdict = GC_TRI_UNKNOWN;
    }
    if (term->n == 0) stopped = 1;
  }
}

void gc_req_result_free(gc_req_result *res) {
  if (!res) return;
  for (size_t i = 0; i < res->n; i++) free(res->per[i].term), free(res->per[i].cond);
  free(res->per);
  memset(res, 0, sizeof *res);
}

int gc_req_evaluate(const gc_req *r, const gc_req_ctx *ctx, gc_req_result *out) {
  memset(out, 0, sizeof *out);
  size_t n = ctx->n_gpus ? ctx->n_gpus : 1;
  out->per = calloc(n, sizeof *out->per);
  if (!out->per) return -1;
  out->n = n;
  for (size_t i = 0; i < n; i++) {
    gc_req_eval *e = &out->per[i];
    e->term = calloc(r->n_terms ? r->n_terms : 1, sizeof *e->term);
    e->cond = calloc(r->n_conds ? r->n_conds : 1, sizeof *e->cond);
    if (!e->term || !e->cond) {
      gc_req_result_free(out);
      return -1;
    }
    evaluate_one(r, ctx, ctx->n_gpus ? &ctx->gpus[i] : NULL, e);
  }
  out->verdict = GC_TRI_TRUE;
  out->deciding = -1;
  for (size_t i = 0; i < n; i++) {
    gc_tri v = out->per[i].verdict;
    if (v == GC_TRI_FALSE && out->verdict != GC_TRI_FALSE) out->verdict = v, out->deciding = (int)i;
    else if (v == GC_TRI_UNKNOWN && out->verdict == GC_TRI_TRUE) out->verdict = v, out->deciding = (int)i;
  }
  return 0;
}

int gc_req_term_blocker(const gc_req *r, const gc_req_eval *e, size_t t) {
  if (t >= r->n_terms) return -1;
  const gc_req_term *term = &r->terms[t];
  int unknown = -1;
  for (size_t j = 0; j < term->n; j++) {
    gc_tri c = e->cond[term->first + j];
    if (c == GC_TRI_FALSE) return (int)(term->first + j);
    if (c == GC_TRI_UNKNOWN && unknown < 0) unknown = (int)(term->first + j);
  }
  return unknown;
}

/* ---------------------------------------------------------------- output --- */

int gc_req_cond_str(const gc_req *r, size_t ci, char *buf, size_t cap) {
  if (ci >= r->n_conds) return snprintf(buf, cap, "?");
  const gc_req_cond *c = &r->conds[ci];
  return snprintf(buf, cap, "%s%s%s", rule_names[c->rule], op_names[c->op], c->value);
}

int gc_req_term_str(const gc_req *r, size_t t, char *buf, size_t cap) {
  if (t >= r->n_terms) return snprintf(buf, cap, "?");
  const gc_req_term *term = &r->terms[t];
  return snprintf(buf, cap, "%.*s", (int)term->len, r->text + term->offset);
}

int gc_req_libnvc_message(const gc_req *r, char *buf, size_t cap) {
  /* strsep(" ") on the raw string: a leading space makes the first token empty. */
  const char *s = r->text ? r->text : "";
  size_t n = strcspn(s, " ");
  int cuda_ge = n >= 6 && !strncmp(s, "cuda>=", 6);
  return snprintf(buf, cap, "unsatisfied condition: %.*s%s", (int)n, s,
                  cuda_ge ? ", please update your driver to a newer version, or use an earlier cuda container" : "");
}

/* ---------------------------------------------------------------- brands --- */

/* NVML brand enum (nvml.h nvmlBrandType_t), the names nvidia/cuda images use
 * in NVIDIA_REQUIRE_CUDA (gitlab.com/nvidia/container-images/cuda), the name
 * libnvidia-container's C CLI reports (src/driver.c: only Quadro, Tesla, NVS,
 * GRID, GeForce and TITAN have names, every other brand is "Unknown" -- which
 * is why the images carry brand=unknown terms), and forward-compatibility
 * eligibility read from the Device list [1,2,7..14] of the compat libcuda's
 * .note.cuda.fwd_compatibility (gpucheck-anchors.md 1.4: an inference there,
 * consistent with "data-center GPUs and select RTX, not GeForce" of
 * docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html). */
#define BRAND_SRC "nvml.h nvmlBrandType_t; libnvidia-container src/driver.c; compat ELF note (inferred eligibility)"
static const gc_brand brands[] = {
    {"unknown", 0, "Unknown", -1, BRAND_SRC},
    {"quadro", 1, "Quadro", 1, BRAND_SRC},
    {"tesla", 2, "Tesla", 1, BRAND_SRC},
    {"nvs", 3, "NVS", 0, BRAND_SRC},
    {"grid", 4, "GRID", 0, BRAND_SRC},
    {"geforce", 5, "GeForce", 0, BRAND_SRC},
    {"titan", 6, "TITAN", 0, BRAND_SRC},
    {"vapps", 7, "Unknown", 1, BRAND_SRC},
    {"vpc", 8, "Unknown", 1, BRAND_SRC},
    {"vcs", 9, "Unknown", 1, BRAND_SRC},
    {"vws", 10, "Unknown", 1, BRAND_SRC},
    {"cloudgaming", 11, "Unknown", 1, BRAND_SRC},
    {"quadrortx", 12, "Unknown", 1, BRAND_SRC},
    {"nvidiartx", 13, "Unknown", 1, BRAND_SRC},
    {"nvidia", 14, "Unknown", 1, BRAND_SRC},
    {"geforcertx", 15, "Unknown", 0, BRAND_SRC},
    {"titanrtx", 16, "Unknown", 0, BRAND_SRC},
};

size_t gc_brand_count(void) { return sizeof brands / sizeof brands[0]; }
const gc_brand *gc_brand_at(size_t i) { return i < gc_brand_count() ? &brands[i] : NULL; }

/* Case and spaces ignored: "NVIDIA RTX" (nvidia-smi's spelling) finds nvidiartx. */
const gc_brand *gc_brand_lookup(const char *name) {
  if (!name) return NULL;
  char key[32];
  size_t k = 0;
  for (const char *p = name; *p; p++) {
    if (*p == ' ' || *p == '_' || *p == '-') continue;
    if (k + 1 >= sizeof key) return NULL;
    key[k++] = (char)tolower((unsigned char)*p);
  }
  key[k] = 0;
  for (size_t i = 0; i < gc_brand_count(); i++)
    if (!strcmp(brands[i].name, key)) return &brands[i];
  return NULL;
}
