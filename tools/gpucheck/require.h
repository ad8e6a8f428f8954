/* Container requirement strings (NVIDIA_REQUIRE_CUDA and every other
 * NVIDIA_REQUIRE_* variable of an image) as libnvidia-container reads and
 * evaluates them before a container starts, so gpucheck can say which part of
 * a requirement fails and why (gpucheck-anchors.md 1.4, pain P4).
 *
 * Grammar (libnvidia-container src/cli/dsl.c, rules in src/cli/configure.c):
 *   requirement := term (' '+ term)*        terms are alternatives (OR)
 *   term        := cond (','+ cond)*        conditions must all hold (AND)
 *   cond        := rule op value
 *   rule        := cuda | driver | arch | brand        (case-insensitive)
 *   op          := = | != | < | <= | > | >=            (the whole run of <>=! chars)
 * Only the space separates terms (a tab is part of a condition); empty terms
 * and empty conditions are skipped. cuda, driver and arch values are dotted
 * numbers compared segment by segment, missing or trailing zero segments
 * ignored ("12.0" = "12"); brand compares case-insensitively, with = and !=
 * only. A term made only of commas ends libnvidia-container's evaluation: it
 * holds when it is the first term, otherwise the requirement fails; this is
 * reproduced.
 *
 * Differences from libnvidia-container, on purpose: it parses lazily (a
 * malformed condition after the first false one of a term, or in a term after
 * the satisfied one, is never seen); gc_req_parse checks the whole string and
 * reports the first malformed condition with its offset. nvidia-container-
 * toolkit's Go evaluator (CDI mode) skips unknown rules instead of refusing
 * them; here they are errors, as in libnvidia-container.
 *
 * Evaluation: per visible GPU, every requirement must hold (configure.c); with
 * no visible GPU once, globally. Unknowns follow libnvidia-container: arch and
 * brand hold when no GPU is visible or the brand is unknown, cuda and driver
 * hold when the driver's values are unknown. With ctx.strict they are
 * GC_TRI_UNKNOWN instead (what-if questions where the user did not say). */
#ifndef GPUCHECK_REQUIRE_H
#define GPUCHECK_REQUIRE_H

#include <stddef.h>

typedef enum gc_req_rule { GC_REQ_CUDA = 0, GC_REQ_DRIVER = 1, GC_REQ_ARCH = 2, GC_REQ_BRAND = 3 } gc_req_rule;
typedef enum gc_req_op { GC_REQ_EQ = 0, GC_REQ_NE, GC_REQ_LT, GC_REQ_LE, GC_REQ_GT, GC_REQ_GE } gc_req_op;

typedef struct gc_req_cond {
  gc_req_rule rule;
  gc_req_op op;
  char *value;        /* as written after the operator */
  size_t offset, len; /* the condition's place in gc_req.text */
} gc_req_cond;

typedef struct gc_req_term {
  size_t first, n;    /* its conditions: conds[first .. first + n); n = 0 for a term of commas only */
  size_t offset, len; /* its place in gc_req.text */
} gc_req_term;

typedef struct gc_req {
  char *text;         /* copy of the parsed string */
  gc_req_cond *conds;
  size_t n_conds;
  gc_req_term *terms;
  size_t n_terms;
} gc_req;

typedef struct gc_req_error {
  size_t offset;      /* byte offset in the string of the malformed part */
  char msg[256];      /* names the condition, what is wrong and what is expected */
} gc_req_error;

/* Parses a requirement string. Returns 0, or -1 with *err filled (out is then
 * empty, nothing to free). An empty string parses to zero terms (always holds). */
int gc_req_parse(const char *s, gc_req *out, gc_req_error *err);
void gc_req_free(gc_req *r);

/* Three-valued outcome: what-if questions may leave a value unknown. */
typedef enum gc_tri { GC_TRI_FALSE = 0, GC_TRI_TRUE = 1, GC_TRI_UNKNOWN = 2 } gc_tri;
const char *gc_tri_name(gc_tri t); /* "false", "true", "unknown" */

typedef struct gc_req_gpu {
  int cc;             /* 10*major+minor (86); 0 unknown */
  const char *brand;  /* as libnvidia-container names it ("Tesla", "GeForce"); NULL unknown */
} gc_req_gpu;

typedef struct gc_req_ctx {
  int cuda;             /* CUDA version the driver reports (12040 = 12.4); 0 unknown */
  const char *driver;   /* NVRM version "550.54.15"; NULL unknown */
  int driver_is_branch; /* with strict: driver is only a branch ("550"), i.e. any 550.x, so a
                           condition true for some of them and false for others is
                           GC_TRI_UNKNOWN; without strict the text is compared as written */
  const gc_req_gpu *gpus;
  size_t n_gpus;        /* visible GPUs; 0: none visible (one global evaluation) */
  int strict;           /* 0: libnvidia-container's defaults for unknowns; 1: GC_TRI_UNKNOWN */
} gc_req_ctx;

/* One evaluation: for one GPU, or the global one. */
typedef struct gc_req_eval {
  gc_tri verdict;
  int satisfied_term;   /* first term that holds, -1 if none */
  gc_tri *term;         /* per term (n_terms) */
  gc_tri *cond;         /* per condition (n_conds); every condition is evaluated */
} gc_req_eval;

typedef struct gc_req_result {
  gc_tri verdict;       /* false if any evaluation is false, else unknown if any is, else true */
  size_t n;             /* evaluations: ctx.n_gpus, or 1 when no GPU is visible */
  gc_req_eval *per;
  int deciding;         /* first false evaluation, else first unknown one; -1 when true */
} gc_req_result;

/* Evaluates r in ctx. Returns 0, or -1 when out of memory (out then empty). */
int gc_req_evaluate(const gc_req *r, const gc_req_ctx *ctx, gc_req_result *out);
void gc_req_result_free(gc_req_result *res);

/* One condition for one GPU (NULL: no visible GPU). */
gc_tri gc_req_cond_eval(const gc_req_cond *c, const gc_req_ctx *ctx, const gc_req_gpu *gpu);

/* The condition that decides why term t of evaluation e does not hold: its
 * first false condition, else its first unknown one; -1 when the term holds
 * or has no condition. An index into r->conds. */
int gc_req_term_blocker(const gc_req *r, const gc_req_eval *e, size_t t);

/* "cuda>=12.8" (rule, operator and value as libnvidia-container sees them)
 * and the text of a term as written. Return snprintf's count. */
int gc_req_cond_str(const gc_req *r, size_t ci, char *buf, size_t cap);
int gc_req_term_str(const gc_req *r, size_t t, char *buf, size_t cap);

/* What libnvidia-container prints for an unsatisfied requirement: it names
 * the first space-separated token of the string, not the term that failed
 * (src/cli/dsl.c): "unsatisfied condition: cuda>=12.8, please update your
 * driver to a newer version, or use an earlier cuda container". */
int gc_req_libnvc_message(const gc_req *r, char *buf, size_t cap);

/* Dotted-number comparison as libnvidia-container does it: <0, 0, >0, or
 * GC_REQ_NOT_A_VERSION when either side is not digits and dots starting with
 * a digit. "12.0" == "12"; "535.104.05" > "535.54.03". */
#define GC_REQ_NOT_A_VERSION (-1000)
int gc_req_version_cmp(const char *a, const char *b);

/* Does this value of NVIDIA_DISABLE_REQUIRE turn the checks off?
 * nvidia-container-toolkit parses it with Go's strconv.ParseBool
 * (internal/config/image/cuda_image.go): 1, t, T, TRUE, true, True. */
int gc_req_disabled_by(const char *value);

/* NVML brands: the names requirement strings use (lowercase), the NVML
 * enum value, the name libnvidia-container's C CLI reports for it, and
 * whether a GPU of that brand may use forward compatibility (cuda-compat). */
typedef struct gc_brand {
  const char *name;      /* "tesla", "geforcertx" */
  int nvml;              /* nvmlBrandType_t value */
  const char *libnvc;    /* what libnvidia-container's src/driver.c reports: "Tesla", "GeForce", "Unknown" */
  int fwd_compat;        /* 1 eligible, 0 not, -1 cannot tell from the brand */
  const char *source;
} gc_brand;
size_t gc_brand_count(void);
const gc_brand *gc_brand_at(size_t i);
const gc_brand *gc_brand_lookup(const char *name); /* case-insensitive; NULL unknown */

#endif
