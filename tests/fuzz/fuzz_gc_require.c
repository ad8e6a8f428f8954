// fuzz-sources: tools/gpucheck/require.c
/* libFuzzer target for tools/gpucheck/require.c: requirement strings
 * (NVIDIA_REQUIRE_*) come from container images, i.e. from anyone. The input
 * is copied into a NUL-terminated buffer (the parser takes a C string; an
 * embedded NUL ends it). Besides memory errors, it aborts when the parsed
 * structure or an evaluation contradicts itself:
 *   - terms and conditions lie inside the string, in order, conditions of a
 *     term inside the term;
 *   - a condition printed back ("cuda>=12.8") parses to the same rule,
 *     operator and value;
 *   - a term holds iff none of its conditions is false or unknown (a term of
 *     commas only aside), the verdict is the OR of the terms, and the
 *     satisfied term really holds;
 *   - libnvidia-container's defaults (strict = 0) never give "unknown";
 *   - a branch-only driver never decides a condition the other way than every
 *     full version of that branch tried does;
 *   - version comparison is antisymmetric. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/gpucheck/require.h"

static void check_structure(const gc_req *r, size_t len) {
  size_t last_end = 0, cond_seen = 0;
  for (size_t t = 0; t < r->n_terms; t++) {
    const gc_req_term *term = &r->terms[t];
    if (term->offset < last_end || term->offset + term->len > len || term->len == 0) abort();
    if (term->first != cond_seen || term->first + term->n > r->n_conds) abort();
    for (size_t j = 0; j < term->n; j++) {
      const gc_req_cond *c = &r->conds[term->first + j];
      if (c->offset < term->offset || c->offset + c->len > term->offset + term->len) abort();
      if (strlen(c->value) == 0 || strlen(c->value) >= c->len) abort();
      char buf[1024];
      int n = gc_req_cond_str(r, term->first + j, buf, sizeof buf);
      if (n > 0 && (size_t)n < sizeof buf) {
        gc_req again;
        gc_req_error e;
        if (gc_req_parse(buf, &again, &e) < 0) abort();
        if (again.n_conds != 1 || again.conds[0].rule != c->rule || again.conds[0].op != c->op ||
            strcmp(again.conds[0].value, c->value))
          abort();
        gc_req_free(&again);
      }
    }
    cond_seen += term->n;
    last_end = term->offset + term->len;
  }
  if (cond_seen != r->n_conds) abort();
}

static void check_eval(const gc_req *r, const gc_req_ctx *ctx) {
  gc_req_result res;
  if (gc_req_evaluate(r, ctx, &res) < 0) return; /* out of memory */
  for (size_t i = 0; i < res.n; i++) {
    const gc_req_eval *e = &res.per[i];
    int any_true = 0, any_unknown = 0, stopped = 0;
    for (size_t t = 0; t < r->n_terms; t++) {
      const gc_req_term *term = &r->terms[t];
      gc_tri want = GC_TRI_TRUE;
      if (term->n == 0) want = t == 0 ? GC_TRI_TRUE : GC_TRI_FALSE;
      for (size_t j = 0; j < term->n; j++) {
        gc_tri c = e->cond[term->first + j];
        if (!ctx->strict && c == GC_TRI_UNKNOWN) abort();
        if (c == GC_TRI_FALSE) want = GC_TRI_FALSE;
        else if (c == GC_TRI_UNKNOWN && want == GC_TRI_TRUE) want = GC_TRI_UNKNOWN;
      }
      if (stopped) want = GC_TRI_FALSE;
      if (e->term[t] != want) abort();
      if (!stopped && want == GC_TRI_TRUE) any_true = 1;
      if (!stopped && want == GC_TRI_UNKNOWN) any_unknown = 1;
      if (term->n == 0) stopped = 1;
      int b = gc_req_term_blocker(r, e, t);
      if (want == GC_TRI_TRUE && b >= 0) abort();
      if (b >= 0 && ((size_t)b < term->first || (size_t)b >= term->first + term->n)) abort();
    }
    gc_tri v = r->n_terms == 0 || any_true ? GC_TRI_TRUE : any_unknown ? GC_TRI_UNKNOWN : GC_TRI_FALSE;
    if (e->verdict != v) abort();
    if ((e->satisfied_term >= 0) != (v == GC_TRI_TRUE && r->n_terms > 0)) abort();
    if (e->satisfied_term >= 0 && e->term[e->satisfied_term] != GC_TRI_TRUE) abort();
  }
  if ((res.verdict == GC_TRI_TRUE) != (res.deciding < 0)) abort();
  gc_req_result_free(&res);
}

/* A branch-only driver: a decided outcome must match every full version tried. */
static void check_branch(const gc_req *r) {
  static const char *const full[] = {"535.0", "535.54.03", "535.104.05", "535.999.99"};
  gc_req_ctx branch = {.cuda = 12020, .driver = "535", .driver_is_branch = 1, .strict = 1};
  for (size_t i = 0; i < r->n_conds; i++) {
    if (r->conds[i].rule != GC_REQ_DRIVER) continue;
    gc_tri b = gc_req_cond_eval(&r->conds[i], &branch, NULL);
    if (b == GC_TRI_UNKNOWN) continue;
    for (size_t k = 0; k < sizeof full / sizeof full[0]; k++) {
      gc_req_ctx one = {.cuda = 12020, .driver = full[k], .strict = 1};
      if (gc_req_cond_eval(&r->conds[i], &one, NULL) != b) abort();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  size_t len = strlen(s);

  gc_req r;
  gc_req_error err;
  if (gc_req_parse(s, &r, &err) < 0) {
    if (err.offset > len || strnlen(err.msg, sizeof err.msg) >= sizeof err.msg || !err.msg[0]) abort();
  } else {
    check_structure(&r, len);
    gc_req_gpu gpus[2] = {{86, "GeForce"}, {90, NULL}};
    gc_req_ctx lib = {.cuda = 12040, .driver = "550.54.15", .gpus = gpus, .n_gpus = 2};
    gc_req_ctx none = {0};
    gc_req_ctx strict = {.cuda = 0, .driver = "550", .driver_is_branch = 1, .gpus = gpus, .n_gpus = 2, .strict = 1};
    check_eval(&r, &lib);
    check_eval(&r, &none);
    check_eval(&r, &strict);
    check_branch(&r);
    char msg[256];
    int n = gc_req_libnvc_message(&r, msg, sizeof msg);
    if (n < 0 || strnlen(msg, sizeof msg) >= sizeof msg) abort();
    gc_req_free(&r);
  }

  /* Version comparison: the input split at its first space into two sides. */
  char *sp = strchr(s, ' ');
  if (sp) {
    *sp = 0;
    int ab = gc_req_version_cmp(s, sp + 1), ba = gc_req_version_cmp(sp + 1, s);
    if ((ab == GC_REQ_NOT_A_VERSION) != (ba == GC_REQ_NOT_A_VERSION)) abort();
    if (ab != GC_REQ_NOT_A_VERSION && ab != -ba) abort();
  }
  (void)gc_req_disabled_by(s);
  (void)gc_brand_lookup(s);
  free(s);
  return 0;
}
