/* Tests of tools/gpucheck/require.c: NVIDIA_REQUIRE_* strings parsed and
 * evaluated as libnvidia-container does.
 *
 * Expected values are worked out by hand from libnvidia-container's rules
 * (src/cli/dsl.c and src/cli/configure.c, summarised in
 * shared/reference/gpucheck-anchors.md 1.4): spaces separate alternatives,
 * commas join conditions that must all hold, the operator is the whole run of
 * <>=! characters, versions compare segment by segment with missing or
 * trailing zero segments ignored, brands compare case-insensitively with = and
 * != only, unknowns hold (arch/brand with no visible GPU or no brand,
 * cuda/driver with no driver values), every visible GPU must satisfy the
 * requirement, and the error names the first space-separated token, with the
 * "please update your driver" suffix when it starts with "cuda>=".
 *
 * The real requirement strings are NVIDIA_REQUIRE_CUDA of nvidia/cuda images
 * (gitlab.com/nvidia/container-images/cuda), copied from Dockerfiles that
 * reproduce them (found through the code index: a 12.4 devel image adaptation,
 * a 12.8 install script, a CUDA 11.8 base); the same strings seed
 * tests/fuzz/corpus/gc_require. Term indexes below were counted by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "require.h"

static const char REQ_12_4[] =
    "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 "
    "brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 "
    "brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 "
    "brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 "
    "brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 "
    "brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526 "
    "brand=tesla,driver>=535,driver<536 brand=unknown,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 "
    "brand=nvidiartx,driver>=535,driver<536 brand=geforce,driver>=535,driver<536 "
    "brand=geforcertx,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 "
    "brand=quadrortx,driver>=535,driver<536 brand=titan,driver>=535,driver<536 brand=titanrtx,driver>=535,driver<536";

static const char REQ_12_8[] =
    "cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 "
    "brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 "
    "brand=quadrortx,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=vapps,driver>=470,driver<471 "
    "brand=vpc,driver>=470,driver<471 brand=vcs,driver>=470,driver<471 brand=vws,driver>=470,driver<471 "
    "brand=cloudgaming,driver>=470,driver<471 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 "
    "brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 "
    "brand=quadrortx,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=vapps,driver>=535,driver<536 "
    "brand=vpc,driver>=535,driver<536 brand=vcs,driver>=535,driver<536 brand=vws,driver>=535,driver<536 "
    "brand=cloudgaming,driver>=535,driver<536 brand=unknown,driver>=550,driver<551 brand=grid,driver>=550,driver<551 "
    "brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551 brand=quadro,driver>=550,driver<551 "
    "brand=quadrortx,driver>=550,driver<551 brand=nvidiartx,driver>=550,driver<551 brand=vapps,driver>=550,driver<551 "
    "brand=vpc,driver>=550,driver<551 brand=vcs,driver>=550,driver<551 brand=vws,driver>=550,driver<551 "
    "brand=cloudgaming,driver>=550,driver<551 brand=unknown,driver>=560,driver<561 brand=grid,driver>=560,driver<561 "
    "brand=tesla,driver>=560,driver<561 brand=nvidia,driver>=560,driver<561 brand=quadro,driver>=560,driver<561 "
    "brand=quadrortx,driver>=560,driver<561 brand=nvidiartx,driver>=560,driver<561 brand=vapps,driver>=560,driver<561 "
    "brand=vpc,driver>=560,driver<561 brand=vcs,driver>=560,driver<561 brand=vws,driver>=560,driver<561 "
    "brand=cloudgaming,driver>=560,driver<561 brand=unknown,driver>=565,driver<566 brand=grid,driver>=565,driver<566 "
    "brand=tesla,driver>=565,driver<566 brand=nvidia,driver>=565,driver<566 brand=quadro,driver>=565,driver<566 "
    "brand=quadrortx,driver>=565,driver<566 brand=nvidiartx,driver>=565,driver<566 brand=vapps,driver>=565,driver<566 "
    "brand=vpc,driver>=565,driver<566 brand=vcs,driver>=565,driver<566 brand=vws,driver>=565,driver<566 "
    "brand=cloudgaming,driver>=565,driver<566";

static const char REQ_11_8[] =
    "cuda>=11.8 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 "
    "brand=unknown,driver>=510,driver<511 brand=nvidia,driver>=510,driver<511 brand=nvidiartx,driver>=510,driver<511 "
    "brand=quadrortx,driver>=510,driver<511 brand=unknown,driver>=515,driver<516 brand=nvidia,driver>=515,driver<516 "
    "brand=nvidiartx,driver>=515,driver<516 brand=quadrortx,driver>=515,driver<516";

/* Parses s or fails the test; the caller frees. */
static gc_req parse_ok(const char *s) {
  gc_req r;
  gc_req_error e;
  if (gc_req_parse(s, &r, &e) < 0) fail_msg("'%s' did not parse: offset %zu: %s", s, e.offset, e.msg);
  return r;
}

/* Evaluates s in ctx; returns the overall verdict and the first evaluation's satisfied term. */
static gc_tri eval(const char *s, const gc_req_ctx *ctx, int *satisfied) {
  gc_req r = parse_ok(s);
  gc_req_result res;
  assert_int_equal(gc_req_evaluate(&r, ctx, &res), 0);
  gc_tri v = res.verdict;
  if (satisfied) *satisfied = res.per[0].satisfied_term;
  gc_req_result_free(&res);
  gc_req_free(&r);
  return v;
}

static gc_tri cond(const char *s, const gc_req_ctx *ctx, const gc_req_gpu *gpu) {
  gc_req r = parse_ok(s);
  assert_int_equal(r.n_conds, 1);
  gc_tri v = gc_req_cond_eval(&r.conds[0], ctx, gpu);
  gc_req_free(&r);
  return v;
}

/* ------------------------------------------------------------- grammar --- */

static void test_structure(void **state) {
  (void)state;
  /* "cuda>=12.4" is term 1 at 0..10; the second term starts at 11 with three conditions. */
  gc_req r = parse_ok("cuda>=12.4 brand=tesla,driver>=470,driver<471");
  assert_int_equal(r.n_terms, 2);
  assert_int_equal(r.n_conds, 4);
  assert_int_equal(r.terms[0].first, 0);
  assert_int_equal(r.terms[0].n, 1);
  assert_int_equal(r.terms[0].offset, 0);
  assert_int_equal(r.terms[0].len, 10);
  assert_int_equal(r.terms[1].first, 1);
  assert_int_equal(r.terms[1].n, 3);
  assert_int_equal(r.terms[1].offset, 11);
  assert_int_equal(r.conds[0].rule, GC_REQ_CUDA);
  assert_int_equal(r.conds[0].op, GC_REQ_GE);
  assert_string_equal(r.conds[0].value, "12.4");
  assert_int_equal(r.conds[1].rule, GC_REQ_BRAND);
  assert_int_equal(r.conds[1].op, GC_REQ_EQ);
  assert_string_equal(r.conds[1].value, "tesla");
  assert_int_equal(r.conds[1].offset, 11);
  assert_int_equal(r.conds[3].rule, GC_REQ_DRIVER);
  assert_int_equal(r.conds[3].op, GC_REQ_LT);
  assert_string_equal(r.conds[3].value, "471");
  assert_int_equal(r.conds[3].offset, 35); /* 11 + "brand=tesla," (12) + "driver>=470," (12) */
  char buf[128];
  gc_req_term_str(&r, 1, buf, sizeof buf);
  assert_string_equal(buf, "brand=tesla,driver>=470,driver<471");
  gc_req_cond_str(&r, 2, buf, sizeof buf);
  assert_string_equal(buf, "driver>=470");
  gc_req_free(&r);
}

static void test_operators_and_rule_case(void **state) {
  (void)state;
  static const struct {
    const char *s;
    gc_req_rule rule;
    gc_req_op op;
    const char *value;
  } cases[] = {
      {"cuda=12", GC_REQ_CUDA, GC_REQ_EQ, "12"},        {"driver!=535", GC_REQ_DRIVER, GC_REQ_NE, "535"},
      {"arch<9.0", GC_REQ_ARCH, GC_REQ_LT, "9.0"},       {"arch<=8.6", GC_REQ_ARCH, GC_REQ_LE, "8.6"},
      {"cuda>11", GC_REQ_CUDA, GC_REQ_GT, "11"},         {"CUDA>=12.8", GC_REQ_CUDA, GC_REQ_GE, "12.8"},
      {"Brand=GeForce", GC_REQ_BRAND, GC_REQ_EQ, "GeForce"}, {"brand!=tesla", GC_REQ_BRAND, GC_REQ_NE, "tesla"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gc_req r = parse_ok(cases[i].s);
    assert_int_equal(r.n_conds, 1);
    assert_int_equal(r.conds[0].rule, cases[i].rule);
    assert_int_equal(r.conds[0].op, cases[i].op);
    assert_string_equal(r.conds[0].value, cases[i].value);
    gc_req_free(&r);
  }
  /* The printed condition uses the lowercase rule name. */
  gc_req r = parse_ok("CUDA>=12.8");
  char buf[32];
  gc_req_cond_str(&r, 0, buf, sizeof buf);
  assert_string_equal(buf, "cuda>=12.8");
  gc_req_free(&r);
}

static void test_malformed_positions(void **state) {
  (void)state;
  static const struct {
    const char *s;
    size_t offset;
    const char *says;
  } cases[] = {
      {"cuda", 0, "no operator"},
      {">=12", 0, "no rule"},
      {"cudaa>=12", 0, "'cudaa'"},
      {"cuda=>12", 4, "'=>' is not an operator"},
      {"cuda>==12", 4, "'>==' is not an operator"},
      {"cuda!12", 4, "'!' is not an operator"},
      {"cuda>=", 6, "no value"},
      {"cuda>=x", 6, "not a version"},
      {"cuda>=.5", 6, "not a version"},
      {"cuda>=12-1", 6, "not a version"},
      {"brand<tesla", 5, "= or !="},
      /* "cuda>=12 " is 9 bytes, "driver>=535," 12, "arch>=8.0," 10: foo starts at 31. */
      {"cuda>=12 driver>=535,arch>=8.0,foo=1", 31, "'foo'"},
      /* Only the space separates terms: the tab makes the value "1\tdriver>=1". */
      {"cuda>=1\tdriver>=1", 6, "not a version"},
      /* "brand=tesla,," is 13 bytes. */
      {"brand=tesla,,cuda>=abc", 19, "not a version"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gc_req r;
    gc_req_error e;
    if (gc_req_parse(cases[i].s, &r, &e) == 0) fail_msg("'%s' parsed but is malformed", cases[i].s);
    if (e.offset != cases[i].offset)
      fail_msg("'%s': error at %zu, expected %zu (%s)", cases[i].s, e.offset, cases[i].offset, e.msg);
    if (!strstr(e.msg, cases[i].says)) fail_msg("'%s': message '%s' lacks '%s'", cases[i].s, e.msg, cases[i].says);
    assert_null(r.terms);
  }
}

static void test_empty_terms_and_conditions(void **state) {
  (void)state;
  gc_req_ctx ctx = {.cuda = 12040, .driver = "550.54.15"};
  int sat;
  /* Nothing to check holds (ret starts true in dsl_evaluate). */
  assert_int_equal(eval("", &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(eval("    ", &ctx, &sat), GC_TRI_TRUE);
  /* Runs of spaces and commas are skipped. */
  gc_req r = parse_ok("cuda>=99  cuda>=1,,driver>=1");
  assert_int_equal(r.n_terms, 2);
  assert_int_equal(r.terms[1].n, 2);
  gc_req_free(&r);
  assert_int_equal(eval("cuda>=99  cuda>=1,,driver>=1", &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 1);
  /* A term of commas only ends libnvidia-container's loop: first term -> holds... */
  assert_int_equal(eval(", cuda>=99", &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 0);
  /* ...after a failed term -> fails, even though a later term would hold. */
  assert_int_equal(eval("cuda>=99 , cuda>=1", &ctx, &sat), GC_TRI_FALSE);
  assert_int_equal(sat, -1);
}

/* ----------------------------------------------------------- semantics --- */

static void test_precedence(void **state) {
  (void)state;
  gc_req_gpu gpu = {86, "GeForce"};
  gc_req_ctx ctx = {.cuda = 12040, .driver = "550.54.15", .gpus = &gpu, .n_gpus = 1};
  int sat;
  /* (cuda>=99 AND driver>=1) OR arch>=1.0: the first term fails on cuda, the second holds. */
  assert_int_equal(eval("cuda>=99,driver>=1 arch>=1.0", &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 1);
  /* cuda>=1 OR (driver>=999 AND arch>=1): the first term holds. */
  assert_int_equal(eval("cuda>=1 driver>=999,arch>=1", &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 0);
  /* Nothing holds; the blocker of term 1 is its first false condition, driver>=999. */
  gc_req r = parse_ok("driver>=999,cuda>=1 arch>=99");
  gc_req_result res;
  assert_int_equal(gc_req_evaluate(&r, &ctx, &res), 0);
  assert_int_equal(res.verdict, GC_TRI_FALSE);
  assert_int_equal(res.deciding, 0);
  assert_int_equal(gc_req_term_blocker(&r, &res.per[0], 0), 0);
  assert_int_equal(gc_req_term_blocker(&r, &res.per[0], 1), 2);
  assert_int_equal(res.per[0].cond[1], GC_TRI_TRUE); /* evaluated even after the false one */
  gc_req_result_free(&res);
  gc_req_free(&r);
}

static void test_dotted_versions(void **state) {
  (void)state;
  assert_int_equal(gc_req_version_cmp("12.0", "12"), 0);
  assert_int_equal(gc_req_version_cmp("12", "12.0.0"), 0);
  assert_int_equal(gc_req_version_cmp("12.", "12"), 0);
  assert_int_equal(gc_req_version_cmp("12..1", "12.1"), 0);
  assert_int_equal(gc_req_version_cmp("1.05", "1.5"), 0);
  assert_true(gc_req_version_cmp("535.104.05", "535.54.03") > 0); /* 104 > 54, not text order */
  assert_true(gc_req_version_cmp("12.10", "12.9") > 0);
  assert_true(gc_req_version_cmp("10", "9.9") > 0);
  assert_true(gc_req_version_cmp("12", "12.0.1") < 0);
  assert_int_equal(gc_req_version_cmp("abc", "1"), GC_REQ_NOT_A_VERSION);
  assert_int_equal(gc_req_version_cmp(".5", "1"), GC_REQ_NOT_A_VERSION);
  assert_int_equal(gc_req_version_cmp("", "1"), GC_REQ_NOT_A_VERSION);

  gc_req_gpu gpu = {86, "GeForce"};
  gc_req_ctx ctx = {.cuda = 12000, .driver = "535.104.05"};
  assert_int_equal(cond("cuda=12", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("cuda!=12.0", &ctx, &gpu), GC_TRI_FALSE);
  assert_int_equal(cond("cuda<12.0.1", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("cuda>12", &ctx, &gpu), GC_TRI_FALSE);
  assert_int_equal(cond("cuda<=12.0", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("cuda>=12.0.0.0", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("driver>=535.54.03", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("driver<536", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("arch=8.6", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("arch<8.10", &ctx, &gpu), GC_TRI_TRUE); /* 6 < 10 */
  assert_int_equal(cond("arch>=9.0", &ctx, &gpu), GC_TRI_FALSE);
  assert_int_equal(cond("brand=geforce", &ctx, &gpu), GC_TRI_TRUE);
  assert_int_equal(cond("brand!=GEFORCE", &ctx, &gpu), GC_TRI_FALSE);
  assert_int_equal(cond("brand=tesla", &ctx, &gpu), GC_TRI_FALSE);
}

static void test_unknown_defaults(void **state) {
  (void)state;
  /* libnvidia-container: nothing known -> every rule holds (configure.c). */
  gc_req_ctx none = {0};
  assert_int_equal(cond("cuda>=99", &none, NULL), GC_TRI_TRUE);
  assert_int_equal(cond("driver>=999", &none, NULL), GC_TRI_TRUE);
  assert_int_equal(cond("arch>=99", &none, NULL), GC_TRI_TRUE);
  assert_int_equal(cond("brand=foo", &none, NULL), GC_TRI_TRUE);
  assert_int_equal(eval("cuda>=99,driver>=999,arch>=99,brand=foo", &none, NULL), GC_TRI_TRUE);
  /* A visible GPU whose brand NVML could not tell: brand holds, arch is compared. */
  gc_req_gpu nobrand = {86, NULL};
  gc_req_ctx one = {.cuda = 12040, .driver = "550.54.15", .gpus = &nobrand, .n_gpus = 1};
  assert_int_equal(cond("brand=foo", &one, &nobrand), GC_TRI_TRUE);
  assert_int_equal(cond("arch>=99", &one, &nobrand), GC_TRI_FALSE);
  /* strict: unknown stays unknown, and decides nothing by itself. */
  gc_req_ctx strict = {.strict = 1};
  assert_int_equal(cond("cuda>=99", &strict, NULL), GC_TRI_UNKNOWN);
  assert_int_equal(cond("driver>=1", &strict, NULL), GC_TRI_UNKNOWN);
  assert_int_equal(cond("arch>=1", &strict, NULL), GC_TRI_UNKNOWN);
  assert_int_equal(eval("cuda>=99", &strict, NULL), GC_TRI_UNKNOWN);
  gc_req_ctx s2 = {.cuda = 12040, .driver = "550.54.15", .gpus = &nobrand, .n_gpus = 1, .strict = 1};
  gc_req r = parse_ok("cuda>=99 brand=tesla,driver>=550");
  gc_req_result res;
  assert_int_equal(gc_req_evaluate(&r, &s2, &res), 0);
  assert_int_equal(res.verdict, GC_TRI_UNKNOWN);
  assert_int_equal(res.deciding, 0);
  assert_int_equal(res.per[0].term[0], GC_TRI_FALSE);
  assert_int_equal(res.per[0].term[1], GC_TRI_UNKNOWN);
  assert_int_equal(gc_req_term_blocker(&r, &res.per[0], 1), 1); /* brand=tesla */
  gc_req_result_free(&res);
  gc_req_free(&r);
  /* An unknown condition next to a false one: the term is false. */
  assert_int_equal(eval("brand=tesla,driver>=999", &s2, NULL), GC_TRI_FALSE);
}

static void test_every_gpu_must_pass(void **state) {
  (void)state;
  gc_req_gpu gpus[2] = {{90, "Tesla"}, {86, "GeForce"}};
  gc_req_ctx ctx = {.cuda = 12040, .driver = "550.54.15", .gpus = gpus, .n_gpus = 2};
  gc_req r = parse_ok("brand=tesla");
  gc_req_result res;
  assert_int_equal(gc_req_evaluate(&r, &ctx, &res), 0);
  assert_int_equal(res.n, 2);
  assert_int_equal(res.per[0].verdict, GC_TRI_TRUE);
  assert_int_equal(res.per[1].verdict, GC_TRI_FALSE);
  assert_int_equal(res.verdict, GC_TRI_FALSE);
  assert_int_equal(res.deciding, 1);
  gc_req_result_free(&res);
  gc_req_free(&r);
  assert_int_equal(eval("brand=tesla brand=geforce", &ctx, NULL), GC_TRI_TRUE);
  assert_int_equal(eval("arch>=8.0,arch<9.0", &ctx, NULL), GC_TRI_FALSE); /* the 9.0 GPU fails */
  /* No visible GPU: one global evaluation, brand holds. */
  gc_req_ctx global = {.cuda = 12040, .driver = "550.54.15"};
  assert_int_equal(eval("brand=tesla", &global, NULL), GC_TRI_TRUE);
}

static void test_branch_only_driver(void **state) {
  (void)state;
  /* "535" means some 535.x: [535, 536). */
  gc_req_ctx b = {.cuda = 12020, .driver = "535", .driver_is_branch = 1, .strict = 1};
  assert_int_equal(cond("driver>=535", &b, NULL), GC_TRI_TRUE);
  assert_int_equal(cond("driver<536", &b, NULL), GC_TRI_TRUE);
  assert_int_equal(cond("driver>=535.54", &b, NULL), GC_TRI_UNKNOWN);
  assert_int_equal(cond("driver<535.104", &b, NULL), GC_TRI_UNKNOWN);
  assert_int_equal(cond("driver=535.104.05", &b, NULL), GC_TRI_UNKNOWN);
  assert_int_equal(cond("driver>=536", &b, NULL), GC_TRI_FALSE);
  assert_int_equal(cond("driver!=550", &b, NULL), GC_TRI_TRUE);
  assert_int_equal(cond("driver<=534.99", &b, NULL), GC_TRI_FALSE);
  assert_int_equal(cond("driver>534", &b, NULL), GC_TRI_TRUE);
  /* Without strict the text is compared as libnvidia-container would: "535" < "535.54". */
  gc_req_ctx lit = {.cuda = 12020, .driver = "535", .driver_is_branch = 1};
  assert_int_equal(cond("driver>=535.54", &lit, NULL), GC_TRI_FALSE);
}

static void test_libnvc_message(void **state) {
  (void)state;
  char buf[256];
  gc_req r = parse_ok("cuda>=12.8 brand=tesla,driver>=535,driver<536");
  gc_req_libnvc_message(&r, buf, sizeof buf);
  assert_string_equal(buf, "unsatisfied condition: cuda>=12.8, please update your driver to a newer version, or use an "
                           "earlier cuda container");
  gc_req_free(&r);
  r = parse_ok("brand=tesla,driver>=535 cuda>=12");
  gc_req_libnvc_message(&r, buf, sizeof buf);
  assert_string_equal(buf, "unsatisfied condition: brand=tesla,driver>=535");
  gc_req_free(&r);
  r = parse_ok("CUDA>=12"); /* the suffix test is case-sensitive (strncmp) */
  gc_req_libnvc_message(&r, buf, sizeof buf);
  assert_string_equal(buf, "unsatisfied condition: CUDA>=12");
  gc_req_free(&r);
  r = parse_ok(" cuda>=12"); /* strsep on a leading space yields an empty first token */
  gc_req_libnvc_message(&r, buf, sizeof buf);
  assert_string_equal(buf, "unsatisfied condition: ");
  gc_req_free(&r);
}

/* ------------------------------------------------ real nvidia/cuda strings --- */

static void test_real_12_4(void **state) {
  (void)state;
  gc_req r = parse_ok(REQ_12_4);
  assert_int_equal(r.n_terms, 31); /* cuda>=12.4 + 10 brands x 3 branches */
  assert_int_equal(r.n_conds, 91);
  gc_req_free(&r);
  int sat;
  /* Driver 535.104.05 reports 12.2 (cuda-compat.md 2.3): term 1 fails; the 535 group is terms 21-30
   * (tesla, unknown, nvidia, nvidiartx, geforce, ...), 0-based. */
  gc_req_gpu geforce = {86, "GeForce"}, unknown = {86, "Unknown"}, tesla = {80, "Tesla"};
  gc_req_ctx ctx = {.cuda = 12020, .driver = "535.104.05", .gpus = &geforce, .n_gpus = 1};
  assert_int_equal(eval(REQ_12_4, &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 25);
  ctx.gpus = &unknown;
  assert_int_equal(eval(REQ_12_4, &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 22);
  ctx.gpus = &tesla;
  assert_int_equal(eval(REQ_12_4, &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 21);
  /* 550.54.15 reports 12.4: the first term holds. */
  gc_req_ctx new_drv = {.cuda = 12040, .driver = "550.54.15", .gpus = &geforce, .n_gpus = 1};
  assert_int_equal(eval(REQ_12_4, &new_drv, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 0);
  /* 545.23.08 reports 12.3 and is no listed branch: refused, naming cuda>=12.4. */
  gc_req_ctx old = {.cuda = 12030, .driver = "545.23.08", .gpus = &geforce, .n_gpus = 1};
  assert_int_equal(eval(REQ_12_4, &old, &sat), GC_TRI_FALSE);
  r = parse_ok(REQ_12_4);
  char buf[256];
  gc_req_libnvc_message(&r, buf, sizeof buf);
  assert_non_null(strstr(buf, "unsatisfied condition: cuda>=12.4, please update your driver"));
  gc_req_free(&r);
}

static void test_real_12_8(void **state) {
  (void)state;
  gc_req r = parse_ok(REQ_12_8);
  assert_int_equal(r.n_terms, 61); /* cuda>=12.8 + 12 brands x 5 branches */
  assert_int_equal(r.n_conds, 181);
  gc_req_free(&r);
  int sat;
  /* 550.54.15 (12.4): the 550 group is terms 25-36: unknown, grid, tesla, ... */
  gc_req_gpu tesla = {90, "Tesla"}, geforce = {89, "GeForce"};
  gc_req_ctx ctx = {.cuda = 12040, .driver = "550.54.15", .gpus = &tesla, .n_gpus = 1};
  assert_int_equal(eval(REQ_12_8, &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 27);
  /* The 12.8 image lists no GeForce escape hatch: a GeForce on 550 is refused. */
  ctx.gpus = &geforce;
  assert_int_equal(eval(REQ_12_8, &ctx, &sat), GC_TRI_FALSE);
  /* 570.124.06 reports 12.8: the first term holds for any brand. */
  gc_req_ctx new_drv = {.cuda = 12080, .driver = "570.124.06", .gpus = &geforce, .n_gpus = 1};
  assert_int_equal(eval(REQ_12_8, &new_drv, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 0);
}

static void test_real_11_8(void **state) {
  (void)state;
  gc_req r = parse_ok(REQ_11_8);
  assert_int_equal(r.n_terms, 15); /* cuda>=11.8 + 14 brand/branch terms */
  assert_int_equal(r.n_conds, 43);
  gc_req_free(&r);
  int sat;
  /* 470.82.01 reports 11.4: term 0 fails, brand=tesla on 450 fails, brand=tesla on 470 (term 2) holds. */
  gc_req_gpu tesla = {37, "Tesla"};
  gc_req_ctx ctx = {.cuda = 11040, .driver = "470.82.01", .gpus = &tesla, .n_gpus = 1};
  assert_int_equal(eval(REQ_11_8, &ctx, &sat), GC_TRI_TRUE);
  assert_int_equal(sat, 2);
}

/* ------------------------------------------------------ helpers and data --- */

static void test_disable_require_values(void **state) {
  (void)state;
  /* Go strconv.ParseBool true values; anything else (or a parse error) is false. */
  const char *yes[] = {"1", "t", "T", "TRUE", "true", "True"};
  const char *no[] = {"0", "f", "false", "FALSE", "yes", "on", "tRuE", "", " true"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) assert_true(gc_req_disabled_by(yes[i]));
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) assert_false(gc_req_disabled_by(no[i]));
  assert_false(gc_req_disabled_by(NULL));
}

static void test_brands(void **state) {
  (void)state;
  const gc_brand *b = gc_brand_lookup("NVIDIA RTX"); /* nvidia-smi's spelling */
  assert_non_null(b);
  assert_string_equal(b->name, "nvidiartx");
  assert_int_equal(b->nvml, 13);
  assert_string_equal(b->libnvc, "Unknown"); /* src/driver.c names six brands only */
  b = gc_brand_lookup("GeForce");
  assert_non_null(b);
  assert_int_equal(b->nvml, 5);
  assert_string_equal(b->libnvc, "GeForce");
  assert_int_equal(b->fwd_compat, 0);
  b = gc_brand_lookup("TESLA");
  assert_non_null(b);
  assert_int_equal(b->nvml, 2);
  assert_int_equal(b->fwd_compat, 1);
  assert_int_equal(gc_brand_lookup("geforce_rtx")->nvml, 15);
  assert_null(gc_brand_lookup("radeon"));
  assert_null(gc_brand_lookup(NULL));
  assert_int_equal(gc_brand_count(), 17); /* NVML_BRAND_UNKNOWN .. NVML_BRAND_TITAN_RTX */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_structure),
      cmocka_unit_test(test_operators_and_rule_case),
      cmocka_unit_test(test_malformed_positions),
      cmocka_unit_test(test_empty_terms_and_conditions),
      cmocka_unit_test(test_precedence),
      cmocka_unit_test(test_dotted_versions),
      cmocka_unit_test(test_unknown_defaults),
      cmocka_unit_test(test_every_gpu_must_pass),
      cmocka_unit_test(test_branch_only_driver),
      cmocka_unit_test(test_libnvc_message),
      cmocka_unit_test(test_real_12_4),
      cmocka_unit_test(test_real_12_8),
      cmocka_unit_test(test_real_11_8),
      cmocka_unit_test(test_disable_require_values),
      cmocka_unit_test(test_brands),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
